/* sequoia-accept benchmark (issues 3 and 17): synthetic dense corpora with V = 32000, stochastic
 * mode at T = 0.6, W = 16, one sample per position. The estimator runs in-process (in a child,
 * so that writing the corpus does not count) on one thread and on two, side by side in one run,
 * on an uncompressed corpus and on a deflate-compressed one (reading, decompression included,
 * overlaps the compute), by each reading path (mapped chunks, the default; chunks fetched by
 * HDF5; rows read by HDF5); then the whole sequoia-accept process (which also hashes the corpus
 * with SHA-256) with every CPU. Reports positions/s by wall clock and by CPU time, the two-thread
 * scaling and the peak resident memory.
 * Targets (issue 17): >= 1900 positions/s on one thread, >= 3600 on two (>= 1.9x); <= 256 MB.
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
static void write_corpus(const char *path, int rows, int compression)
{
    sq_error err = {0};
    sq_corpus_writer_params p = sq_corpus_writer_default_params();
    p.vocab = V;
    p.compression = compression;
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

#define TEMPERATURE 0.6

typedef struct {
    double wall_rate;   /* positions per wall second              */
    double cpu_s;       /* CPU seconds of the child (all threads) */
    double p1;
    long peak_kib;
} result;

/* In a child: the estimator alone, with `threads` threads. */
static result run_inprocess(const char *path, int threads, int read_path)
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
        sq_accept_config cfg = {SQ_MODE_STOCHASTIC, TEMPERATURE, 1.0};
        sq_accept_params prm = sq_accept_default_params();
        prm.width = W;
        prm.samples = 1;
        prm.threads = threads;
        prm.read = read_path;
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
    return (result){.wall_rate = in[0], .p1 = in[1], .peak_kib = ru.ru_maxrss,
                    .cpu_s = ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 +
                             ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6};
}

/* In a child: CPU seconds of sq_accept_run's reading thread over the whole corpus, without
 * computing: the stored chunks where the corpus allows raw reads (sq_corpus_raw_rows; mapped
 * and populated with `read` AUTO, fetched by H5Dread_chunk with CHUNKS; the workers then
 * inflate and check them, which counts as computing), else whole rows in blocks of
 * sq_corpus_block_rows (decompression and the finite check included). */
static double read_only_cpu(const char *path, int read_path)
{
    pid_t pid = fork();
    if (pid == 0) {
        sq_error err = {0};
        sq_corpus *c;
        if (sq_corpus_open(path, &c, &err))
            die(path, &err);
        if (read_path != SQ_ACCEPT_READ_AUTO)
            sq_corpus_set_mapped(c, 0);
        const sq_corpus_info *info = sq_corpus_get_info(c);
        int chunk = read_path == SQ_ACCEPT_READ_ROWS ? 0 : sq_corpus_raw_rows(c);
        if (chunk > 0) {
            sq_corpus_raw raw = {0};
            float *rows = malloc((size_t)chunk * V * sizeof *rows);
            if (!rows)
                die("memory", NULL);
            for (int model = 0; model < 2; model++)
                for (int64_t ch = 0; ch * chunk < info->rows; ch++)
                    if (sq_corpus_read_raw(c, model, ch, rows, &raw, &err))
                        die(path, &err);
            sq_corpus_raw_clear(&raw);
            _exit(0);
        }
        int block = sq_corpus_block_rows(c);
        float *t = malloc((size_t)block * V * sizeof *t), *d = malloc((size_t)block * V * sizeof *d);
        if (!t || !d)
            die("memory", NULL);
        for (int64_t r = 0; r < info->rows; r += block) {
            int n = (int)(info->rows - r < block ? info->rows - r : block);
            if (sq_corpus_read(c, r, n, t, d, NULL, &err))
                die(path, &err);
        }
        _exit(0);
    }
    int status;
    struct rusage ru;
    if (wait4(pid, &status, 0, &ru) < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
        die("read-only run", NULL);
    return ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + ru.ru_stime.tv_sec +
           ru.ru_stime.tv_usec / 1e6;
}

static double run_tool(const char *tool, const char *path, const char *out, int rows,
                       long *peak_kib, double *cpu_s)
{
    double t0 = now_s();
    pid_t pid = fork();
    if (pid == 0) {
        execl(tool, tool, path, "--mode", "stochastic", "--temperature", "0.6", "--width", "16",
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
    const char *tool = argc > 1 && argv[1][0] ? argv[1] : NULL;
    int rows = argc > 2 ? atoi(argv[2]) : 2048;
    if (rows < 64)
        rows = 64;
    char dir[] = "/tmp/bench-accept-XXXXXX";
    if (!mkdtemp(dir))
        die("mkdtemp", NULL);
    char path[2][256], out[256];
    snprintf(path[0], sizeof path[0], "%s/corpus.h5", dir);
    snprintf(path[1], sizeof path[1], "%s/corpus-deflate.h5", dir);
    snprintf(out, sizeof out, "%s/curves.json", dir);
    double t0 = now_s();
    write_corpus(path[0], rows, 0);
    write_corpus(path[1], rows, 1);
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    double load[3] = {-1, -1, -1};
    FILE *la = fopen("/proc/loadavg", "r");
    if (la) {
        if (fscanf(la, "%lf %lf %lf", &load[0], &load[1], &load[2]) != 3)
            load[0] = -1;
        fclose(la);
    }
    printf("bench-accept: synthetic dense corpora, %d positions, V = %d, float32 (%.0f MB each; "
           "uncompressed and deflate 1), written in %.1f s\n", rows, V, rows * 2.0 * V * 4 / 1e6,
           now_s() - t0);
    printf("stochastic at T = %.1f, W = %d, 1 sample/position; %ld online CPUs; load average "
           "%.2f %.2f %.2f\n", TEMPERATURE, W, cpus, load[0], load[1], load[2]);
    printf("Wall rates depend on the load. The idle estimate uses CPU times: the reading thread "
           "(overlapped) r, measured alone, and the workers c = CPU of the run - r (chunk "
           "decoding included), per position; one thread: 1/max(c, r), two: 2/max(c + r, 2r) on "
           "two cores.\n");
    printf("Read paths: mapped = chunks mapped read-only and used in place or inflated by the "
           "workers (the default); hdf5 chunks = chunks fetched by H5Dread_chunk (a copy), "
           "inflated by the workers; hdf5 rows = rows read by H5Dread (decompression inside "
           "HDF5, in the reading thread).\n");
    printf("%-14s %-12s %7s | %10s | %8s %8s | %12s | %7s | %7s\n", "corpus", "read", "threads",
           "pos/s wall", "read us", "comp us", "idle pos/s", "peak MB", "p1");
    static const struct { int read; const char *name; } paths[3] = {
        {SQ_ACCEPT_READ_AUTO, "mapped"},
        {SQ_ACCEPT_READ_CHUNKS, "hdf5 chunks"},
        {SQ_ACCEPT_READ_ROWS, "hdf5 rows"},
    };
    for (int k = 0; k < 2; k++)
        for (int pi = 0; pi < 3; pi++) {
            double rd = read_only_cpu(path[k], paths[pi].read) / rows;
            result r[2];
            double est[2];
            for (int t = 0; t < 2; t++) {
                r[t] = run_inprocess(path[k], t + 1, paths[pi].read);
                double comp = r[t].cpu_s / rows - rd;
                est[t] = t == 0 ? 1.0 / (comp > rd ? comp : rd)
                                : 2.0 / (comp + rd > 2 * rd ? comp + rd : 2 * rd);
                printf("%-14s %-12s %7d | %10.0f | %8.1f %8.1f | %12.0f | %7.1f | %7.4f\n",
                       k ? "deflate 1" : "uncompressed", paths[pi].name, t + 1, r[t].wall_rate,
                       rd * 1e6, comp * 1e6, est[t], r[t].peak_kib / 1024.0, r[t].p1);
                fflush(stdout);
            }
            printf("%-14s %-12s %7s | %9.2fx | %17s | %11.2fx |\n", "", "", "2 vs 1",
                   r[1].wall_rate / r[0].wall_rate, "", est[1] / est[0]);
        }
    if (tool) {
        double cpu;
        long peak;
        double r2 = run_tool(tool, path[0], out, rows, &peak, &cpu);
        printf("sequoia-accept process, every CPU: %.0f positions/s wall, %.0f by CPU time x %ld "
               "CPUs, peak RSS %.1f MB (includes SHA-256 of the corpus)\n", r2,
               rows / cpu * (double)cpus, cpus, peak / 1024.0);
    }
    printf("targets: >= 1900 positions/s on one thread, >= 3600 on two (>= 1.9x), peak RSS <= "
           "256 MB\n");
    unlink(out);
    unlink(path[0]);
    unlink(path[1]);
    rmdir(dir);
    return 0;
}
