/* sequoia-accept benchmark (issue 3): a synthetic dense corpus with V = 32000, stochastic mode,
 * W = 16, one sample per position, with every online CPU. Reports positions/s and the peak
 * resident memory, for the estimator in-process (in a child, so that writing the corpus does not
 * count) and for the whole sequoia-accept process (which also hashes the corpus with SHA-256).
 * Targets: >= 1000 positions/s, <= 256 MB.
 *
 *   meson test -C build --benchmark --suite bench -v        (or run the program directly:
 *   build/tests/bench/bench-accept PATH/TO/sequoia-accept [ROWS])
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <gsl/gsl_errno.h>
#include <gsl/gsl_randist.h>
#include <gsl/gsl_rng.h>

#include "planner/accept/accept.h"
#include "libsequoia/format/corpus.h"

#define V 32000
#define W 16

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static void die(const char *what, const sq_error *err)
{
    fprintf(stderr, "bench-accept: %s: %s\n", what, err ? err->msg : "failed");
    exit(1);
}

/* Target logits: Gaussian with a few boosted tokens (a peaked, LLM-like distribution); draft =
 * target + noise. 64-row sequences. */
static void write_corpus(const char *path, int rows)
{
    sq_error err = {0};
    sq_corpus_writer_params p = sq_corpus_writer_default_params();
    p.vocab = V;
    p.compression = 0;
    p.draft = "synthetic-draft";
    p.target = "synthetic-target";
    sq_corpus_writer *w;
    if (sq_corpus_writer_open(path, &p, &w, &err))
        die(path, &err);
    gsl_rng *rng = gsl_rng_alloc(gsl_rng_mt19937);
    gsl_rng_set(rng, 1);
    enum { BLOCK = 64 };
    float *t = malloc((size_t)BLOCK * V * sizeof *t), *d = malloc((size_t)BLOCK * V * sizeof *d);
    if (!t || !d)
        die("memory", NULL);
    for (int r0 = 0; r0 < rows; r0 += BLOCK) {
        int n = rows - r0 < BLOCK ? rows - r0 : BLOCK;
        for (int i = 0; i < n; i++) {
            float *ti = t + (size_t)i * V, *di = d + (size_t)i * V;
            for (int v = 0; v < V; v++) {
                ti[v] = (float)(2.0 * gsl_ran_gaussian_ziggurat(rng, 1.0));
                di[v] = ti[v] + (float)gsl_ran_gaussian_ziggurat(rng, 1.0);
            }
            for (int b = 0; b < 8; b++) {
                int v = (int)gsl_rng_uniform_int(rng, V);
                float boost = (float)(12.0 - b);
                ti[v] += boost;
                di[v] += boost + (float)gsl_ran_gaussian_ziggurat(rng, 1.5);
            }
        }
        if (sq_corpus_writer_append(w, t, d, NULL, n, &err) ||
            sq_corpus_writer_end_sequence(w, &err))
            die(path, &err);
    }
    if (sq_corpus_writer_commit(w, &err))
        die(path, &err);
    free(t);
    free(d);
    gsl_rng_free(rng);
}

/* In a child: the estimator alone. Writes rate (positions/s) and p1 to the pipe. */
static void run_inprocess(const char *path, double *rate, double *p1, long *peak_kib,
                          double *cpu_s)
{
    int fds[2];
    if (pipe(fds) != 0)
        die("pipe", NULL);
    pid_t pid = fork();
    if (pid == 0) {
        close(fds[0]);
        sq_error err = {0};
        sq_corpus *c;
        if (sq_corpus_open(path, &c, &err))
            die(path, &err);
        sq_accept_config cfg = {SQ_MODE_STOCHASTIC, 1.0, 1.0};
        sq_accept_params prm = sq_accept_default_params();
        prm.width = W;
        prm.samples = 1;
        sq_accept_stats *st = sq_accept_stats_new(W);
        double t0 = now_s();
        if (sq_accept_run(c, path, 1, &cfg, 1, &prm, &st, &err))
            die(path, &err);
        double dt = now_s() - t0;
        double p[W], out[2];
        sq_accept_stats_estimate(st, p, NULL);
        out[0] = (double)sq_corpus_get_info(c)->rows / dt;
        out[1] = p[0];
        if (write(fds[1], out, sizeof out) != (ssize_t)sizeof out)
            _exit(1);
        sq_accept_stats_free(st);
        sq_corpus_close(c);
        _exit(0);
    }
    close(fds[1]);
    double in[2] = {0, 0};
    ssize_t got = read(fds[0], in, sizeof in);
    close(fds[0]);
    int status;
    struct rusage ru;
    if (wait4(pid, &status, 0, &ru) < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0 ||
        got != (ssize_t)sizeof in)
        die("in-process run", NULL);
    *rate = in[0];
    *p1 = in[1];
    *peak_kib = ru.ru_maxrss;
    *cpu_s = ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + ru.ru_stime.tv_sec +
             ru.ru_stime.tv_usec / 1e6;
}

static double run_tool(const char *tool, const char *path, const char *out, int rows,
                       long *peak_kib, double *cpu_s)
{
    double t0 = now_s();
    pid_t pid = fork();
    if (pid == 0) {
        execl(tool, tool, path, "--mode", "stochastic", "--temperature", "1", "--width", "16",
              "--samples", "1", "--quiet", "-o", out, (char *)NULL);
        _exit(127);
    }
    int status;
    struct rusage ru;
    if (wait4(pid, &status, 0, &ru) < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
        die(tool, NULL);
    *peak_kib = ru.ru_maxrss;
    *cpu_s = ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + ru.ru_stime.tv_sec +
             ru.ru_stime.tv_usec / 1e6;
    return rows / (now_s() - t0);
}

int main(int argc, char **argv)
{
    gsl_set_error_handler_off();
    const char *tool = argc > 1 ? argv[1] : NULL;
    int rows = argc > 2 ? atoi(argv[2]) : 4096;
    if (rows < 64)
        rows = 64;
    char dir[] = "/tmp/bench-accept-XXXXXX";
    if (!mkdtemp(dir))
        die("mkdtemp", NULL);
    char path[256], out[256];
    snprintf(path, sizeof path, "%s/corpus.h5", dir);
    snprintf(out, sizeof out, "%s/curves.json", dir);
    double t0 = now_s();
    write_corpus(path, rows);
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    printf("bench-accept: synthetic dense corpus, %d positions, V = %d, float32 (%.0f MB), "
           "written in %.1f s\n", rows, V, rows * 2.0 * V * 4 / 1e6, now_s() - t0);
    printf("stochastic, W = %d, 1 sample/position, %ld threads (online CPUs)\n", W, cpus);

    double rate, p1, cpu;
    long peak;
    /* The CPU-time rate (positions per CPU-second times the CPUs) is what the machine would do
     * unloaded; it differs from the wall-clock rate when other processes compete for it. */
    run_inprocess(path, &rate, &p1, &peak, &cpu);
    printf("estimator in-process:     %8.0f positions/s wall, %8.0f positions/s by CPU time x %ld "
           "CPUs, peak RSS %6.1f MB (p1 = %.4f)\n", rate, rows / cpu * (double)cpus, cpus,
           peak / 1024.0, p1);
    if (tool) {
        double r2 = run_tool(tool, path, out, rows, &peak, &cpu);
        printf("sequoia-accept process:   %8.0f positions/s wall, %8.0f positions/s by CPU time x %ld "
               "CPUs, peak RSS %6.1f MB (includes SHA-256 of the corpus)\n", r2,
               rows / cpu * (double)cpus, cpus, peak / 1024.0);
    }
    printf("targets: >= 1000 positions/s with every CPU, peak RSS <= 256 MB\n");
    unlink(out);
    unlink(path);
    rmdir(dir);
    return 0;
}
