/* Planner benchmark (issues 2 and 17): the solve that takes the official Python solver ~50 s
 * (budget 128, depth 10, width 32) and large ones (1024/32/32, 4096/64/64, 16384/64/64), each
 * timed in-process with the fast solver (planner/dp.c) and with the plain O(N²·D·B) solver it
 * replaced (tests/dp_reference.c) side by side, wall and CPU time, and as whole sequoia-plan
 * processes with their peak resident memory. The two solvers' tables are compared too.
 *
 *   meson test -C build --benchmark --suite bench -v        (or run the program directly:
 *   build/tests/bench/bench-plan PATH/TO/sequoia-plan [--skip-plain-above N])
 *
 * The plain solver needs about 5.5e11 steps (minutes) at 16384/64/64; --skip-plain-above 4096
 * leaves it out there (the row then says so).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "planner/dp.h"
#include "tests/dp_reference.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static double cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

typedef struct {
    double wall_ms, cpu_ms;
} timing;

/* Median wall and CPU time of `reps` solves; keeps the last solve in *keep when asked. */
static timing solve_fast(int n, int d, int w, int reps, sq_dp **keep)
{
    double t[64], c[64];
    for (int r = 0; r < reps; r++) {
        sq_dp_params p = sq_dp_default_params();
        p.budget = n;
        p.depth = d;
        p.width = w;
        sq_dp *dp;
        sq_error err = {0};
        double t0 = now_s(), c0 = cpu_s();
        if (sq_dp_solve(&p, &dp, &err)) {
            fprintf(stderr, "bench-plan: %s\n", err.msg);
            exit(1);
        }
        t[r] = (now_s() - t0) * 1e3;
        c[r] = (cpu_s() - c0) * 1e3;
        if (keep && r == reps - 1)
            *keep = dp;
        else
            sq_dp_free(dp);
    }
    return (timing){median(t, reps), median(c, reps)};
}

static timing solve_plain(int n, int d, int w, int reps, sq_dpref **keep)
{
    double t[64], c[64];
    for (int r = 0; r < reps; r++) {
        sq_dp_params p = sq_dp_default_params();
        p.budget = n;
        p.depth = d;
        p.width = w;
        sq_dpref *dp;
        sq_error err = {0};
        double t0 = now_s(), c0 = cpu_s();
        if (sq_dpref_solve(&p, &dp, &err)) {
            fprintf(stderr, "bench-plan: %s\n", err.msg);
            exit(1);
        }
        t[r] = (now_s() - t0) * 1e3;
        c[r] = (cpu_s() - c0) * 1e3;
        if (keep && r == reps - 1)
            *keep = dp;
        else
            sq_dpref_free(dp);
    }
    return (timing){median(t, reps), median(c, reps)};
}

/* Bitwise equality of the two tables and of the optimal tree at the bounds. */
static int same_tables(sq_dp *f, sq_dpref *r, int n, int d)
{
    for (int e = 0; e <= d; e++)
        for (int k = 0; k <= n; k++) {
            double a = sq_dp_best(f, k, e), b = sq_dpref_best(r, k, e);
            if (memcmp(&a, &b, sizeof a))
                return 0;
        }
    sq_tree *ta, *tb;
    sq_error err = {0};
    if (sq_dp_tree(f, n, d, &ta, &err) || sq_dpref_tree(r, n, d, &tb, &err))
        return 0;
    int same = ta->n == tb->n && !memcmp(ta->parent, tb->parent, (size_t)n * sizeof *ta->parent) &&
               !memcmp(ta->rank, tb->rank, (size_t)n * sizeof *ta->rank);
    sq_tree_free(ta);
    sq_tree_free(tb);
    return same;
}

/* Runs the tool `reps` times; returns the median wall time and the largest peak RSS (KiB). */
static double process_ms(const char *tool, const char *n, const char *d, const char *w, int reps,
                         long *peak_kib)
{
    double t[64];
    *peak_kib = 0;
    char out[] = "/tmp/bench-plan-XXXXXX";
    int fd = mkstemp(out);
    if (fd < 0)
        exit(1);
    close(fd);
    for (int r = 0; r < reps; r++) {
        double t0 = now_s();
        pid_t pid = fork();
        if (pid == 0) {
            /* the tool's notes on stderr go to a scratch file, not into the table */
            char errf[] = "/tmp/bench-plan-err-XXXXXX";
            int efd = mkstemp(errf);
            if (efd >= 0) {
                unlink(errf);
                dup2(efd, 2);
            }
            execl(tool, tool, "--quiet", "--acceptance", "paper-appE", "--budget", n, "--depth",
                  d, "--width", w, "-o", out, (char *)NULL);
            _exit(127);
        }
        int status;
        struct rusage ru;
        if (wait4(pid, &status, 0, &ru) < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
            fprintf(stderr, "bench-plan: %s failed\n", tool);
            exit(1);
        }
        t[r] = (now_s() - t0) * 1e3;
        if (ru.ru_maxrss > *peak_kib)
            *peak_kib = ru.ru_maxrss;
    }
    unlink(out);
    return median(t, reps);
}

int main(int argc, char **argv)
{
    const char *tool = getenv("SQ_PLAN_BIN");
    long skip_above = -1;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--skip-plain-above") && i + 1 < argc)
            skip_above = atol(argv[++i]);
        else
            tool = argv[i];
    }
    if (!tool) {
        fprintf(stderr, "usage: bench-plan PATH/TO/sequoia-plan [--skip-plain-above N]\n");
        return 64;
    }
    double load[3] = {0, 0, 0};
    FILE *la = fopen("/proc/loadavg", "r");
    if (la) {
        if (fscanf(la, "%lf %lf %lf", &load[0], &load[1], &load[2]) != 3)
            load[0] = load[1] = load[2] = -1;
        fclose(la);
    }
    printf("planner benchmark (medians; official Python solver: ~50 s, 257 MB for 128/10/32)\n");
    printf("load average at start: %.2f %.2f %.2f on %ld CPUs\n", load[0], load[1], load[2],
           sysconf(_SC_NPROCESSORS_ONLN));
    printf("%-14s | %21s | %21s | %8s %5s | %12s %9s | %s\n", "", "fast DP (ms)",
           "plain DP (ms)", "speed-up", "same", "process", "peak", "target");
    printf("%-14s | %10s %10s | %10s %10s | %8s %5s | %12s %9s |\n", "N/D/B", "wall", "cpu",
           "wall", "cpu", "(wall)", "", "(ms)", "(MB)");
    struct {
        const char *n, *d, *w;
        int reps, plain_reps;
        const char *target;
    } cases[] = {
        {"128", "10", "32", 31, 31, "process <= 5 ms"},
        {"1024", "32", "32", 5, 1, "process <= 2 s, 300 MB"},
        {"4096", "64", "64", 3, 1, "process <= 1 s, 256 MB"},
        {"16384", "64", "64", 1, 1, "process <= 30 s"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        const int n = atoi(cases[i].n), d = atoi(cases[i].d), w = atoi(cases[i].w);
        sq_dp *f = NULL;
        timing fast = solve_fast(n, d, w, cases[i].reps, &f);
        char plain_wall[24] = "skipped", plain_cpu[24] = "", speed[24] = "", same[8] = "";
        if (skip_above < 0 || n <= skip_above) {
            sq_dpref *r = NULL;
            timing plain = solve_plain(n, d, w, cases[i].plain_reps, &r);
            snprintf(plain_wall, sizeof plain_wall, "%.2f", plain.wall_ms);
            snprintf(plain_cpu, sizeof plain_cpu, "%.2f", plain.cpu_ms);
            snprintf(speed, sizeof speed, "%.1fx", plain.wall_ms / fast.wall_ms);
            snprintf(same, sizeof same, "%s", same_tables(f, r, n, d) ? "yes" : "NO");
            sq_dpref_free(r);
        }
        sq_dp_free(f);
        long peak;
        double p = process_ms(tool, cases[i].n, cases[i].d, cases[i].w, cases[i].reps, &peak);
        char label[40];
        snprintf(label, sizeof label, "%s/%s/%s", cases[i].n, cases[i].d, cases[i].w);
        printf("%-14s | %10.2f %10.2f | %10s %10s | %8s %5s | %12.2f %9.1f | %s\n", label,
               fast.wall_ms, fast.cpu_ms, plain_wall, plain_cpu, speed, same, p, peak / 1024.0,
               cases[i].target);
        fflush(stdout);
    }
    return 0;
}
