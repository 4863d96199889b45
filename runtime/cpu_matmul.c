/* The skinny product of runtime/cpu_matmul.h.
 *
 * Register blocking: a block is R weight rows (output columns o .. o+R-1) times J input rows
 * (j .. j+J-1), R, J <= 4. Its R x J accumulators are 16-lane vectors; one step over k loads R
 * weight vectors and J input vectors and does R x J multiply-adds, so at R = J = 4 there are
 * two multiply-adds per load and the loop runs near the FMA units' rate, while at J = 1 (one
 * token) it is a streaming dot product bound by memory. Every weight row of a block is read
 * from memory once and then from L1 for the next J-block of inputs (4 rows of 1408 floats are
 * 22 KB). The inputs (n rows) stay in L1/L2 across all weight rows. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sys/resource.h>

#include <gsl/gsl_cblas.h>

#include "runtime/cpu_matmul.h"

/* OpenBLAS's own functions (its cblas.h; not in GSL's header). Weak, so that a build against
 * another CBLAS still links: sq_cpu_blas_reexec then does nothing. */
char *openblas_get_corename(void) __attribute__((weak));

/* Below this many multiply-adds a skinny product runs on the calling thread only: a dispatch
 * costs a few microseconds, the product about 1 ns per 16 multiply-adds. */
#define MATMUL_PARALLEL_MIN_WORK (1 << 16)

typedef float v16f __attribute__((vector_size(64)));
typedef float v8f __attribute__((vector_size(32)));
typedef float v4f __attribute__((vector_size(16)));

/* The 16 lanes of *a summed as a tree of halves (8 + 8, 4 + 4, then 4 scalars): a sequential sum
 * would be a chain of 15 dependent adds per accumulator and cost more than the dot product. */
static inline __attribute__((always_inline)) float hsum16(const v16f *a)
{
    v8f lo, hi;
    memcpy(&lo, a, sizeof lo);
    memcpy(&hi, (const char *)a + sizeof lo, sizeof hi);
    lo += hi;
    v4f l4, h4;
    memcpy(&l4, &lo, sizeof l4);
    memcpy(&h4, (const char *)&lo + sizeof l4, sizeof h4);
    l4 += h4;
    return (l4[0] + l4[2]) + (l4[1] + l4[3]);
}


/* One R x J block; R and J are constants at every call site, so the loops over them unroll and
 * the accumulators live in registers. */
static inline __attribute__((always_inline)) void block(float *out, const float *in,
                                                        const float *w, int d_in, int d_out,
                                                        int accumulate, int o, int j,
                                                        const int R, const int J)
{
    v16f acc[4][4];
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int i = 0; i < J; i++)
            acc[r][i] = (v16f){0};
    const float *wr[4], *xr[4];
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
        wr[r] = w + (size_t)(o + r) * (size_t)d_in;
#pragma GCC unroll 4
    for (int i = 0; i < J; i++)
        xr[i] = in + (size_t)(j + i) * (size_t)d_in;
    const int k16 = d_in & ~15;
    for (int k = 0; k < k16; k += 16) {
        v16f wv[4], xv[4];
#pragma GCC unroll 4
        for (int r = 0; r < R; r++)
            memcpy(&wv[r], wr[r] + k, sizeof wv[r]);
#pragma GCC unroll 4
        for (int i = 0; i < J; i++)
            memcpy(&xv[i], xr[i] + k, sizeof xv[i]);
#pragma GCC unroll 4
        for (int r = 0; r < R; r++)
#pragma GCC unroll 4
            for (int i = 0; i < J; i++)
                acc[r][i] += wv[r] * xv[i];
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int i = 0; i < J; i++) {
            float s = hsum16(&acc[r][i]);
            for (int k = k16; k < d_in; k++)
                s += wr[r][k] * xr[i][k];
            float *dst = out + (size_t)(j + i) * (size_t)d_out + (size_t)(o + r);
            *dst = accumulate ? *dst + s : s;
        }
}

/* All input rows against R weight rows at o, in J-blocks of 4 and a last partial block. */
static inline __attribute__((always_inline)) void rows(float *out, const float *in,
                                                       const float *w, int n, int d_in,
                                                       int d_out, int accumulate, int o,
                                                       const int R)
{
    int j = 0;
    for (; j + 4 <= n; j += 4)
        block(out, in, w, d_in, d_out, accumulate, o, j, R, 4);
    switch (n - j) {
    case 3: block(out, in, w, d_in, d_out, accumulate, o, j, R, 3); break;
    case 2: block(out, in, w, d_in, d_out, accumulate, o, j, R, 2); break;
    case 1: block(out, in, w, d_in, d_out, accumulate, o, j, R, 1); break;
    default: break;
    }
}

/* The whole product for one instruction set: the same source compiled three times. The variant
 * is chosen by the CPU's features (__builtin_cpu_supports), not by its model name: GCC's
 * target_clones("arch=...") dispatches on the exact CPU model and falls back to the baseline
 * on newer CPUs of the same family. */
#define SKINNY_BODY                                                                          \
    {                                                                                        \
        int o = o0;                                                                          \
        for (; o + 4 <= o1; o += 4)                                                          \
            rows(out, in, w, n, d_in, d_out, accumulate, o, 4);                              \
        for (; o < o1; o++)                                                                  \
            rows(out, in, w, n, d_in, d_out, accumulate, o, 1);                              \
    }
#define SKINNY_ARGS                                                                          \
    float *out, const float *in, const float *w, int n, int d_in, int d_out, int accumulate, \
        int o0, int o1

static void skinny_base(SKINNY_ARGS) SKINNY_BODY
#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("avx512f,fma"))) static void skinny_avx512(SKINNY_ARGS) SKINNY_BODY
__attribute__((target("avx2,fma"))) static void skinny_avx2(SKINNY_ARGS) SKINNY_BODY
#endif

void sq_cpu_matmul_skinny(float *out, const float *in, const float *w, int n, int d_in, int d_out,
                          int accumulate, int o0, int o1)
{
#if defined(__x86_64__) && defined(__GNUC__)
    if (__builtin_cpu_supports("avx512f")) {
        skinny_avx512(out, in, w, n, d_in, d_out, accumulate, o0, o1);
        return;
    }
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
        skinny_avx2(out, in, w, n, d_in, d_out, accumulate, o0, o1);
        return;
    }
#endif
    skinny_base(out, in, w, n, d_in, d_out, accumulate, o0, o1);
}

typedef struct matmul_job {
    float       *out;
    const float *in, *w;
    int          n, d_in, d_out, accumulate;
    int          unit;   /* columns per share are a multiple of this */
} matmul_job;

/* Worker w of nw takes a contiguous range of column blocks of `unit` columns: the skinny kernel
 * for few rows, single-threaded OpenBLAS on its slice of w and out for more. */
static void matmul_worker(void *arg, int worker, int n_workers)
{
    const matmul_job *m = arg;
    long long blocks = (m->d_out + m->unit - 1) / m->unit;
    int o0 = (int)(m->unit * (blocks * worker / n_workers));
    int o1 = (int)(m->unit * (blocks * (worker + 1) / n_workers));
    if (o1 > m->d_out)
        o1 = m->d_out;
    if (o0 >= o1)
        return;
    if (m->n <= SQ_CPU_SKINNY_MAX)
        sq_cpu_matmul_skinny(m->out, m->in, m->w, m->n, m->d_in, m->d_out, m->accumulate, o0, o1);
    else
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m->n, o1 - o0, m->d_in, 1.0f, m->in,
                    m->d_in, m->w + (size_t)o0 * (size_t)m->d_in, m->d_in,
                    m->accumulate ? 1.0f : 0.0f, m->out + o0, m->d_out);
}

void sq_cpu_matmul(sq_pool *pool, float *out, const float *in, const float *w, int n, int d_in,
                   int d_out, int accumulate)
{
    matmul_job m = {out, in, w, n, d_in, d_out, accumulate, n <= SQ_CPU_SKINNY_MAX ? 4 : 16};
    if (!pool || pool->n < 2 || (double)n * d_in * d_out < MATMUL_PARALLEL_MIN_WORK)
        matmul_worker(&m, 0, 1);
    else
        sq_pool_run(pool, matmul_worker, &m);
}

/* The CPU's own kernels for OpenBLAS (OPENBLAS_CORETYPE), or "" when nothing is to be set. */
static const char *blas_coretype(void)
{
#if defined(__x86_64__) && defined(__GNUC__) && defined(__linux__)
    if (getenv("OPENBLAS_CORETYPE"))
        return "";
    const char *core = openblas_get_corename();
    if (!core || strcmp(core, "Prescott") != 0)
        return "";
    if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma"))
        return "";   /* Prescott may be right: nothing better to ask for */
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                   __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq")
               ? "SkylakeX"
               : "Haswell";
#else
    return "";
#endif
}

void sq_cpu_blas_reexec(char **argv)
{
#if defined(__linux__)
    if (!openblas_get_corename || !argv || !argv[0])
        return;
    const char *want = blas_coretype();
    /* Under an address-space limit OpenBLAS's own threads, started at load, may find no room
     * for their buffers and then retry forever (issue 27 C1): the tools never use them, so the
     * program is re-executed without them. */
    struct rlimit rl;
    int no_threads = !getenv("OPENBLAS_NUM_THREADS") && getrlimit(RLIMIT_AS, &rl) == 0 &&
                     rl.rlim_cur != RLIM_INFINITY;
    if (!*want && !no_threads)
        return;
    if (*want && setenv("OPENBLAS_CORETYPE", want, 1) != 0)
        return;
    if (no_threads && setenv("OPENBLAS_NUM_THREADS", "1", 1) != 0)
        return;
    fflush(NULL);
    execv("/proc/self/exe", argv);
    /* could not re-execute: carry on as loaded */
    if (*want)
        unsetenv("OPENBLAS_CORETYPE");
    if (no_threads)
        unsetenv("OPENBLAS_NUM_THREADS");
#else
    (void)argv;
#endif
}
