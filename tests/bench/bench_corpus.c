/* bench-corpus: speed and memory of the HDF5 corpus writer and streaming reader at V = 32000.
 *
 *   bench-corpus            writes synthetic corpora (dense float32, dense float16, top-64
 *                           sparse; N = 512 and 2048 rows) in a temporary directory, then reads
 *                           each one in a fresh process and reports rows/s and peak RSS
 *   bench-corpus --read F   (internal) streams F in sq_corpus_block_rows() blocks and prints
 *                           "rows/s peak_kib"
 *
 * The peak RSS of the reader must not grow with N: compare the two N of one layout. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "libsequoia/format/corpus.h"

#define V 32000

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static long peak_kib(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_maxrss;
}

static double cpu_s(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec * 1e-6 +
           (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec * 1e-6;
}

static int read_file(const char *path)
{
    sq_error err = {0};
    sq_corpus *c;
    if (sq_corpus_open(path, &c, &err)) {
        fprintf(stderr, "bench-corpus: %s\n", err.msg);
        return 1;
    }
    const sq_corpus_info *in = sq_corpus_get_info(c);
    int B = sq_corpus_block_rows(c);
    float *t = malloc((size_t)B * V * sizeof *t), *d = malloc((size_t)B * V * sizeof *d);
    int32_t *tok = malloc((size_t)B * sizeof *tok);
    double t0 = now(), c0 = cpu_s(), check = 0;
    for (int64_t r = 0; r < in->rows; r += B) {
        int n = (int)(in->rows - r < B ? in->rows - r : B);
        if (sq_corpus_read(c, r, n, t, d, tok, &err)) {
            fprintf(stderr, "bench-corpus: %s\n", err.msg);
            return 1;
        }
        check += t[0] + (double)tok[0];
    }
    double dt = now() - t0, dc = cpu_s() - c0;
    printf("%.0f %.0f %ld %d %g\n", (double)in->rows / dt, (double)in->rows / dc, peak_kib(), B,
           check);
    sq_corpus_close(c);
    free(t), free(d), free(tok);
    return 0;
}

static double write_file(const char *path, int rows, int half, int topk, double *per_cpu)
{
    sq_corpus_writer_params p = sq_corpus_writer_default_params();
    p.vocab = V;
    p.half = half;
    p.topk = topk;
    p.draft = "bench-draft";
    p.target = "bench-target";
    sq_error err = {0};
    sq_corpus_writer *w;
    if (sq_corpus_writer_open(path, &p, &w, &err)) {
        fprintf(stderr, "bench-corpus: %s\n", err.msg);
        exit(1);
    }
    enum { PIECE = 16 };
    float *t = malloc((size_t)PIECE * V * sizeof *t), *d = malloc((size_t)PIECE * V * sizeof *d);
    int32_t tok[PIECE];
    uint32_t s = 12345;
    double t0 = now(), c0 = cpu_s();
    for (int r = 0; r < rows; r += PIECE) {
        for (size_t i = 0; i < (size_t)PIECE * V; i++) {
            s = s * 1664525u + 1013904223u;
            t[i] = (float)(s >> 8) * 0x1p-24f * 12.0f - 6.0f;
            d[i] = t[i] + (float)((s >> 3) & 255) * 0.01f;
        }
        for (int i = 0; i < PIECE; i++)
            tok[i] = (r + i) % V;
        if (sq_corpus_writer_append(w, t, d, tok, PIECE, &err) ||
            ((r + PIECE) % 512 == 0 && sq_corpus_writer_end_sequence(w, &err))) {
            fprintf(stderr, "bench-corpus: %s\n", err.msg);
            exit(1);
        }
    }
    if (sq_corpus_writer_commit(w, &err)) {
        fprintf(stderr, "bench-corpus: %s\n", err.msg);
        exit(1);
    }
    free(t), free(d);
    *per_cpu = (double)rows / (cpu_s() - c0);
    return (double)rows / (now() - t0);
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "--read") == 0)
        return read_file(argv[2]);
    char dir[] = "/tmp/bench-corpus-XXXXXX";
    if (!mkdtemp(dir))
        return 1;
    static const struct { const char *name; int half, topk; } layouts[] = {
        {"dense-f32", 0, 0}, {"dense-f16", 1, 0}, {"sparse-k64", 0, 64}};
    static const int sizes[] = {512, 2048};
    printf("V = %d, default chunks, deflate level 1; reads in sq_corpus_block_rows() blocks\n", V);
    printf("rows/s are per second of wall time, and [per second of CPU time] (the synthetic data\n"
           "generation is inside the write figures)\n");
    printf("%-11s %6s %20s %20s %6s %16s\n", "layout", "N", "write row/s [cpu]", "read row/s [cpu]",
           "block", "reader peak RSS");
    for (size_t l = 0; l < sizeof layouts / sizeof layouts[0]; l++) {
        for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
            char path[256];
            snprintf(path, sizeof path, "%s/%s-%d.h5", dir, layouts[l].name, sizes[k]);
            double wc;
            double wr = write_file(path, sizes[k], layouts[l].half, layouts[l].topk, &wc);
            int fds[2];
            if (pipe(fds) != 0)
                return 1;
            pid_t pid = fork();
            if (pid == 0) {
                dup2(fds[1], 1);
                close(fds[0]);
                execl("/proc/self/exe", argv[0], "--read", path, (char *)NULL);
                _exit(127);
            }
            close(fds[1]);
            char buf[256] = {0};
            ssize_t n = read(fds[0], buf, sizeof buf - 1);
            close(fds[0]);
            int st;
            waitpid(pid, &st, 0);
            double rd = 0, rc = 0;
            long kib = 0;
            int block = 0;
            if (n <= 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0 ||
                sscanf(buf, "%lf %lf %ld %d", &rd, &rc, &kib, &block) != 4) {
                fprintf(stderr, "bench-corpus: reading %s failed\n", path);
                return 1;
            }
            printf("%-11s %6d %9.0f [%8.0f] %9.0f [%8.0f] %6d %13.1f MB\n", layouts[l].name,
                   sizes[k], wr, wc, rd, rc, block, (double)kib / 1024.0);
            fflush(stdout);
            unlink(path);
        }
    }
    rmdir(dir);
    return 0;
}
