/* Planner benchmark (issue 2): the solve that takes the official Python solver ~50 s
 * (budget 128, depth 10, width 32) and a large one (1024, 32, 32), timed in-process and as
 * whole sequoia-plan processes with their peak resident memory.
 *
 *   meson test -C build --benchmark --suite bench -v        (or run the program directly:
 *   build/tests/bench/bench-plan PATH/TO/sequoia-plan)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "planner/dp.h"

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

static double solve_ms(int n, int d, int w, int reps)
{
    double t[64];
    for (int r = 0; r < reps; r++) {
        sq_dp_params p = sq_dp_default_params();
        p.budget = n;
        p.depth = d;
        p.width = w;
        sq_dp *dp;
        sq_error err = {0};
        double t0 = now_s();
        if (sq_dp_solve(&p, &dp, &err)) {
            fprintf(stderr, "bench-plan: %s\n", err.msg);
            exit(1);
        }
        t[r] = (now_s() - t0) * 1e3;
        sq_dp_free(dp);
    }
    return median(t, reps);
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
            execl(tool, tool, "--quiet", "--budget", n, "--depth", d, "--width", w, "-o", out,
                  (char *)NULL);
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
    const char *tool = argc > 1 ? argv[1] : getenv("SQ_PLAN_BIN");
    if (!tool) {
        fprintf(stderr, "usage: bench-plan PATH/TO/sequoia-plan\n");
        return 64;
    }
    printf("planner benchmark (medians; official Python solver: ~50 s, 257 MB for 128/10/32)\n");
    printf("%-22s %12s %14s %12s %10s\n", "budget/depth/width", "solve (ms)", "process (ms)",
           "peak (MB)", "target");
    struct {
        const char *n, *d, *w;
        int reps;
        const char *target;
    } cases[] = {
        {"128", "10", "32", 31, "<= 20 ms"},
        {"1024", "32", "32", 5, "<= 2 s, 300 MB"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        long peak;
        double s = solve_ms(atoi(cases[i].n), atoi(cases[i].d), atoi(cases[i].w), cases[i].reps);
        double p = process_ms(tool, cases[i].n, cases[i].d, cases[i].w, cases[i].reps, &peak);
        char label[40];
        snprintf(label, sizeof label, "%s/%s/%s", cases[i].n, cases[i].d, cases[i].w);
        printf("%-22s %12.2f %14.2f %12.1f %10s\n", label, s, p, peak / 1024.0, cases[i].target);
        if (i == 0)
            printf("%-22s %12s %14.0fx faster than the official solver's 50.26 s\n", "", "",
                   50260.0 / p);
    }
    return 0;
}
