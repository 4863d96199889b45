/* bench-skinny: the CPU product for few rows against OpenBLAS, per instruction set (issue 27).
 *
 *   bench-skinny [--isa scalar,avx2,avx512] [--dtype f32,bf16,f16] [--rows 1-64]
 *                [--reps R] [--ms M] [--model DIR]... [--blocks] [--shapes] [--wall]
 *                [--per-matrix] [--same-blas]
 *
 * For every path this CPU has (forced with sq_cpu_isa_set), every weight dtype and every row
 * count n, it times on one thread, interleaved repetition by repetition (ours, then OpenBLAS,
 * then ours ...), the weight products of one forward of each model (the distinct matrices of
 * config.json: q, k/v, o, gate/up, down, the LM head, each counted as often as a forward uses
 * it; random weights of the model's shapes):
 *   runtime  sq_cpu_matmul_typed, the product the forward calls (skinny kernel up to the path's
 *            threshold sq_cpu_skinny_rows_for, then the BLAS path)
 *   skinny   the skinny kernel alone, whatever n
 *   blas     OpenBLAS: cblas_sgemm on float32 weights; for 16-bit weights the runtime's BLAS
 *            path (panels widened to float32, then cblas_sgemm), what the hand-over costs
 * and prints the medians and the ratios runtime/blas and skinny/blas (below 1: ours is faster),
 * and per model the worst ratio over its single matrices. --per-matrix adds a line `pm` per
 * matrix and row count: the medians, then each round's ratio (runtime and OpenBLAS timed back
 * to back in that round, so the machine's slow drift cancels) summarised by its median and a
 * distribution-free 95% interval for that median (order statistics of the rounds' ratios: with
 * 31 rounds the 10th and 22nd), the verdict "faster" where the interval's upper end is <= 1,
 * "slower" where its lower end is > 1 and "n.d." (not distinguishable) where it straddles 1,
 * and runtime/skinny (the same kernel below the threshold: the size of the timing's own noise);
 * then `pm-summary` lines per path, dtype and model: the counts of each verdict and the
 * matrices not "faster", apart for the row counts where the runtime hands over to OpenBLAS
 * (there the ratio compares OpenBLAS with itself and should straddle 1). More rounds (--reps,
 * up to 1001) narrow the intervals. Times are the thread's CPU time
 * (CLOCK_THREAD_CPUTIME_ID), which a shared machine disturbs much less than wall time (the
 * caches still suffer); --wall measures wall time. The default models are
 * data/models/large (the 18M target) and data/models/target.
 *
 * Each path runs in a child process whose OpenBLAS uses the kernels of the same instruction
 * set (OPENBLAS_CORETYPE: Haswell against the AVX2 path, Prescott against the portable one,
 * the CPU's own choice against AVX-512), so that forcing a path on one host stands for a host
 * of that set; --same-blas keeps one process and the OpenBLAS as loaded.
 *
 * --blocks instead compares register blocks (runtime/cpu_matmul_isa.h compiled here with other
 * R x J) per path: the ratio to cblas_sgemm of each block, summed over the 18M model's
 * matrices, F32 and F16 weights; the runtime's blocks were chosen from this table
 * (docs/benchmarks.md, "The skinny product"). Targets are printed, not asserted. */
#include <getopt.h>
#include <math.h>
#include <spawn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <sys/wait.h>

#include <gsl/gsl_cblas.h>

#include "libsequoia/base/half.h"
#include "runtime/config.h"
#include "runtime/cpu_matmul.h"

#if defined(__x86_64__) && defined(__GNUC__)
#define BENCH_X86 1
#include <immintrin.h>
#else
#define BENCH_X86 0
#endif

char *openblas_get_corename(void) __attribute__((weak));
void openblas_set_num_threads(int num_threads) __attribute__((weak));

/* ---- candidate blocks: the kernel template with other shapes ------------------------------- */

#define BLOCKS(X)                                                                              \
    X(scalar, 4, 0, 4, 3, s4x3) X(scalar, 4, 0, 4, 2, s4x2) X(scalar, 4, 0, 3, 3, s3x3)        \
    X(scalar, 4, 0, 2, 4, s2x4)
#define BLOCKS_AVX2(X)                                                                         \
    X(avx2, 8, 1, 4, 3, a4x3) X(avx2, 8, 1, 3, 4, a3x4) X(avx2, 8, 1, 4, 2, a4x2)              \
    X(avx2, 8, 1, 3, 3, a3x3) X(avx2, 8, 1, 2, 4, a2x4) X(avx2, 16, 1, 4, 4, a16l4x4)
#define BLOCKS_AVX512(X)                                                                       \
    X(avx512, 16, 2, 4, 4, z4x4) X(avx512, 16, 2, 6, 4, z6x4) X(avx512, 16, 2, 4, 6, z4x6)     \
    X(avx512, 16, 2, 4, 3, z4x3) X(avx512, 16, 2, 8, 3, z8x3) X(avx512, 16, 2, 3, 6, z3x6)

#define ISA_XFIRST 0
#define ISA_FMA 0
#define ISA_F16 0
#define ISA_VL 4
#define ISA_SFX s4x3
#define ISA_R 4
#define ISA_J 3
#include "runtime/cpu_matmul_isa.h"
#undef ISA_SFX
#undef ISA_R
#undef ISA_J
#define ISA_SFX s4x2
#define ISA_R 4
#define ISA_J 2
#include "runtime/cpu_matmul_isa.h"
#undef ISA_SFX
#undef ISA_R
#undef ISA_J
#define ISA_SFX s3x3
#define ISA_R 3
#define ISA_J 3
#include "runtime/cpu_matmul_isa.h"
#undef ISA_SFX
#undef ISA_R
#undef ISA_J
#define ISA_SFX s2x4
#define ISA_R 2
#define ISA_J 4
#include "runtime/cpu_matmul_isa.h"
#undef ISA_SFX
#undef ISA_R
#undef ISA_J
#undef ISA_XFIRST
#define ISA_XFIRST 1
#define ISA_SFX sx3x3
#define ISA_R 3
#define ISA_J 3
#include "runtime/cpu_matmul_isa.h"
#undef ISA_SFX
#undef ISA_R
#undef ISA_J
#define ISA_SFX sx4x2
#define ISA_R 4
#define ISA_J 2
#include "runtime/cpu_matmul_isa.h"
#undef ISA_SFX
#undef ISA_R
#undef ISA_J
#define ISA_SFX sx4x3
#define ISA_R 4
#define ISA_J 3
#include "runtime/cpu_matmul_isa.h"
#undef ISA_SFX
#undef ISA_R
#undef ISA_J
#undef ISA_XFIRST
#define ISA_XFIRST 0
#undef ISA_VL
#undef ISA_F16

#if BENCH_X86
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
#undef ISA_FMA
#define ISA_FMA 1
#define ISA_F16 1
#define ISA_VL 8
#define ISA_SFX a4x3
#define ISA_R 4
#define ISA_J 3
#include "runtime/cpu_matmul_isa.h"
#undef ISA_SFX
#undef ISA_R
#undef ISA_J
#define ISA_SFX a3x4
#define ISA_R 3
#define ISA_J 4
#include "runtime/cpu_matmul_isa.h"
#undef ISA_SFX
#undef ISA_R
#undef ISA_J
#define ISA_SFX a4x2
#define ISA_R 4
#define ISA_J 2
#include "runtime/cpu_matmul_isa.h"
#undef ISA_SFX
#undef ISA_R
#undef ISA_J
#define ISA_SFX a3x3
#define ISA_R 3
#define ISA_J 3
#include "runtime/cpu_matmul_isa.h"
#undef ISA_SFX
#undef ISA_R
#undef ISA_J
#define ISA_SFX a2x4
#define ISA_R 2
#define ISA_J 4
#include "runtime/cpu_matmul_isa.h"
#undef ISA_SFX
#undef ISA_R
#undef ISA_J
#undef ISA_XFIRST
#define ISA_XFIRST 1
#define ISA_SFX ax4x3
#define ISA_R 4
#define ISA_J 3
#include "runtime/cpu_matmul_isa.h"
#undef ISA_SFX
#undef ISA_R
#undef ISA_J
#define ISA_SFX ax5x2
#define ISA_R 5
#define ISA_J 2
#include "runtime/cpu_matmul_isa.h"
#undef ISA_SFX
#undef ISA_R
#undef ISA_J
#define ISA_SFX ax3x3
#define ISA_R 3
#define ISA_J 3
#include "runtime/cpu_matmul_isa.h"
#undef ISA_SFX
#undef ISA_R
#undef ISA_J
#undef ISA_XFIRST
#define ISA_XFIRST 0
#undef ISA_VL
/* the block before issue 27: 4 x 4 accumulators of 16 lanes, two ymm each, multiplies and adds
 * not fused */
#define ISA_VL 16
#undef ISA_FMA
#define ISA_FMA 0
#undef ISA_F16
#define ISA_F16 0
#define ISA_SFX a16l4x4
#define ISA_R 4
#define ISA_J 4
#include "runtime/cpu_matmul_isa.h"
#undef ISA_SFX
#undef ISA_R
#undef ISA_J
#undef ISA_VL
#undef ISA_F16
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx512f,fma,f16c")
#undef ISA_FMA
#define ISA_FMA 1
#define ISA_F16 2
#define ISA_VL 16
#define ISA_SFX z4x4
#define ISA_R 4
#define ISA_J 4
#include "runtime/cpu_matmul_isa.h"
#undef ISA_SFX
#undef ISA_R
#undef ISA_J
#define ISA_SFX z6x4
#define ISA_R 6
#define ISA_J 4
#include "runtime/cpu_matmul_isa.h"
#undef ISA_SFX
#undef ISA_R
#undef ISA_J
#define ISA_SFX z4x6
#define ISA_R 4
#define ISA_J 6
#include "runtime/cpu_matmul_isa.h"
#undef ISA_SFX
#undef ISA_R
#undef ISA_J
#define ISA_SFX z4x3
#define ISA_R 4
#define ISA_J 3
#include "runtime/cpu_matmul_isa.h"
#undef ISA_SFX
#undef ISA_R
#undef ISA_J
#define ISA_SFX z8x3
#define ISA_R 8
#define ISA_J 3
#include "runtime/cpu_matmul_isa.h"
#undef ISA_SFX
#undef ISA_R
#undef ISA_J
#define ISA_SFX z3x6
#define ISA_R 3
#define ISA_J 6
#include "runtime/cpu_matmul_isa.h"
#undef ISA_SFX
#undef ISA_R
#undef ISA_J
#define ISA_SFX z3x8
#define ISA_R 3
#define ISA_J 8
#include "runtime/cpu_matmul_isa.h"
#undef ISA_SFX
#undef ISA_R
#undef ISA_J
#undef ISA_XFIRST
#define ISA_XFIRST 1
#define ISA_SFX zx4x4
#define ISA_R 4
#define ISA_J 4
#include "runtime/cpu_matmul_isa.h"
#undef ISA_SFX
#undef ISA_R
#undef ISA_J
#define ISA_SFX zx6x4
#define ISA_R 6
#define ISA_J 4
#include "runtime/cpu_matmul_isa.h"
#undef ISA_SFX
#undef ISA_R
#undef ISA_J
#define ISA_SFX zx4x2
#define ISA_R 4
#define ISA_J 2
#include "runtime/cpu_matmul_isa.h"
#undef ISA_SFX
#undef ISA_R
#undef ISA_J
#define ISA_SFX zx8x2
#define ISA_R 8
#define ISA_J 2
#include "runtime/cpu_matmul_isa.h"
#undef ISA_SFX
#undef ISA_R
#undef ISA_J
#define ISA_SFX zx12x2
#define ISA_R 12
#define ISA_J 2
#include "runtime/cpu_matmul_isa.h"
#undef ISA_SFX
#undef ISA_R
#undef ISA_J
#undef ISA_XFIRST
#define ISA_XFIRST 0
#undef ISA_VL
#undef ISA_F16
#pragma GCC pop_options
#endif

typedef void (*skinny_fn)(float *, const float *, const void *, int, int, int, int, int, int,
                          int);
typedef struct block {
    sq_cpu_isa  isa;
    const char *name;
    skinny_fn   fn;
} block;

static const block blocks[] = {
    {SQ_CPU_ISA_SCALAR, "4x3", skinny_s4x3},
    {SQ_CPU_ISA_SCALAR, "4x2", skinny_s4x2},
    {SQ_CPU_ISA_SCALAR, "3x3", skinny_s3x3},
    {SQ_CPU_ISA_SCALAR, "2x4", skinny_s2x4},
    {SQ_CPU_ISA_SCALAR, "x4x3", skinny_sx4x3},
    {SQ_CPU_ISA_SCALAR, "x3x3", skinny_sx3x3},
    {SQ_CPU_ISA_SCALAR, "x4x2", skinny_sx4x2},
#if BENCH_X86
    {SQ_CPU_ISA_AVX2, "4x3", skinny_a4x3},
    {SQ_CPU_ISA_AVX2, "3x4", skinny_a3x4},
    {SQ_CPU_ISA_AVX2, "4x2", skinny_a4x2},
    {SQ_CPU_ISA_AVX2, "3x3", skinny_a3x3},
    {SQ_CPU_ISA_AVX2, "2x4", skinny_a2x4},
    {SQ_CPU_ISA_AVX2, "x4x3", skinny_ax4x3},
    {SQ_CPU_ISA_AVX2, "x5x2", skinny_ax5x2},
    {SQ_CPU_ISA_AVX2, "x3x3", skinny_ax3x3},
    {SQ_CPU_ISA_AVX2, "old16x4x4", skinny_a16l4x4},
    {SQ_CPU_ISA_AVX512, "4x4", skinny_z4x4},
    {SQ_CPU_ISA_AVX512, "6x4", skinny_z6x4},
    {SQ_CPU_ISA_AVX512, "4x6", skinny_z4x6},
    {SQ_CPU_ISA_AVX512, "4x3", skinny_z4x3},
    {SQ_CPU_ISA_AVX512, "8x3", skinny_z8x3},
    {SQ_CPU_ISA_AVX512, "3x6", skinny_z3x6},
    {SQ_CPU_ISA_AVX512, "x4x4", skinny_zx4x4},
    {SQ_CPU_ISA_AVX512, "x6x4", skinny_zx6x4},
    {SQ_CPU_ISA_AVX512, "3x8", skinny_z3x8},
    {SQ_CPU_ISA_AVX512, "x4x2", skinny_zx4x2},
    {SQ_CPU_ISA_AVX512, "x8x2", skinny_zx8x2},
    {SQ_CPU_ISA_AVX512, "x12x2", skinny_zx12x2},
#endif
};
#define N_BLOCKS (int)(sizeof blocks / sizeof *blocks)

/* ---- the matrices of a forward ----------------------------------------------------------- */

typedef struct mat {
    int   d_out, d_in, count;   /* count: uses per forward */
    void *w[3];                 /* F32, BF16, F16 copies of the same values */
} mat;

typedef struct model {
    char name[256];
    int  n_mats;
    mat  mats[8];
} model;

static unsigned rng = 12345u;
static float frand(void)
{
    rng = rng * 1103515245u + 12345u;
    return (float)((rng >> 8) & 0xffff) / 32768.0f - 1.0f;
}

static void add_mat(model *m, int d_out, int d_in, int count)
{
    for (int i = 0; i < m->n_mats; i++)
        if (m->mats[i].d_out == d_out && m->mats[i].d_in == d_in) {
            m->mats[i].count += count;
            return;
        }
    mat *t = &m->mats[m->n_mats++];
    *t = (mat){d_out, d_in, count, {0}};
    size_t k = (size_t)d_out * d_in;
    float *f = malloc(k * sizeof *f);
    uint16_t *b = malloc(k * 2), *h = malloc(k * 2);
    if (!f || !b || !h) {
        fprintf(stderr, "bench-skinny: out of memory\n");
        exit(1);
    }
    for (size_t i = 0; i < k; i++) {
        float v = frand() * 0.05f;
        b[i] = sq_f32_to_bf16(v);
        h[i] = sq_f32_to_f16(v);
        f[i] = v;
    }
    t->w[0] = f, t->w[1] = b, t->w[2] = h;
}

static int load_model(const char *dir, model *m)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/config.json", dir);
    sq_model_config c;
    sq_error err = {0};
    if (sq_model_config_load(path, &c, &err) != 0) {
        fprintf(stderr, "bench-skinny: %s\n", err.msg);
        return -1;
    }
    const char *base = strrchr(dir, '/');
    snprintf(m->name, sizeof m->name, "%s", base && base[1] ? base + 1 : dir);
    m->n_mats = 0;
    const int q = c.n_heads * c.head_dim, kv = c.n_kv_heads * c.head_dim, L = c.n_layers;
    add_mat(m, q, c.dim, L);
    add_mat(m, kv, c.dim, 2 * L);
    add_mat(m, c.dim, q, L);
    add_mat(m, c.hidden_dim, c.dim, 2 * L);
    add_mat(m, c.dim, c.hidden_dim, L);
    add_mat(m, c.vocab_size, c.dim, 1);
    return 0;
}

/* ---- timing -------------------------------------------------------------------------------- */

/* The calling thread's CPU time (default: on a shared machine, wall time mostly measures the
 * other processes), or wall time with --wall. */
static int use_wall;
static double now_s(void)
{
    struct timespec ts;
    clock_gettime(use_wall ? CLOCK_MONOTONIC : CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

enum { K_RUNTIME, K_SKINNY, K_BLAS, K_BLOCK };

static const sq_weight_dtype dtypes[3] = {SQ_DTYPE_F32, SQ_DTYPE_BF16, SQ_DTYPE_F16};
static const char *const dtype_names[3] = {"f32", "bf16", "f16"};
static const int wt_code[3] = {WT_F32, WT_BF16, WT_F16};

static float *in_buf, *out_buf;
static int per_matrix;   /* --per-matrix: each matrix's medians too */

/* One product of matrix t with n rows by kind k (dtype index d; block b for K_BLOCK). */
static void product(int k, const mat *t, int d, int n, const block *b)
{
    switch (k) {
    case K_RUNTIME:
        sq_cpu_matmul_typed(NULL, out_buf, in_buf, t->w[d], dtypes[d], n, t->d_in, t->d_out, 0);
        break;
    case K_SKINNY:
        sq_cpu_matmul_skinny_typed(out_buf, in_buf, t->w[d], dtypes[d], n, t->d_in, t->d_out, 0,
                                   0, t->d_out);
        break;
    case K_BLAS:
        sq_cpu_matmul_blas_typed(out_buf, in_buf, t->w[d], dtypes[d], n, t->d_in, t->d_out, 0);
        break;
    default:
        b->fn(out_buf, in_buf, t->w[d], wt_code[d], n, t->d_in, t->d_out, 0, 0, t->d_out);
    }
}

/* Seconds of one call, averaged over enough calls to last about `ms` milliseconds. */
static double time_one(int k, const mat *t, int d, int n, const block *b, double ms)
{
    double t0 = now_s();
    product(k, t, d, n, b);
    double one = now_s() - t0;
    int iters = one > 0 ? (int)(ms * 1e-3 / one) : 1;
    if (iters < 1)
        iters = 1;
    if (iters > 100000)
        iters = 100000;
    t0 = now_s();
    for (int i = 0; i < iters; i++)
        product(k, t, d, n, b);
    return (now_s() - t0) / iters;
}

#define MAX_REPS 1001
#define MAX_KINDS 16

/* The per-round ratios a[r] / b[r] (r < reps; each round times both back to back, so slow drift
 * of the machine cancels): their median and a distribution-free 95% interval for it, the order
 * statistics x(k+1) and x(reps-k) of the sorted ratios with the largest k such that a
 * Binomial(reps, 1/2) is at most k with probability <= 2.5% (the interval covers the median with
 * probability >= 95%; below 6 rounds no k exists and the interval is the range, covering less).
 * ci_rank gives k and the interval's exact coverage. */
static int ci_rank(int reps, double *cover)
{
    double term = ldexp(1.0, -reps), cdf = term;   /* P(B <= i), i = 0 */
    int k = -1;
    double at_k = 0;
    for (int i = 0; 2 * i < reps && cdf <= 0.025; i++) {
        k = i, at_k = cdf;
        term *= (double)(reps - i) / (double)(i + 1);
        cdf += term;
    }
    if (k < 0)
        k = 0, at_k = ldexp(1.0, -reps);
    if (cover)
        *cover = 1 - 2 * at_k;
    return k;
}

static void ratio_ci(const double *a, const double *b, int reps, double *med, double *lo,
                     double *hi)
{
    static double q[MAX_REPS];
    for (int r = 0; r < reps; r++)
        q[r] = b[r] > 0 ? a[r] / b[r] : 0;
    *med = median(q, reps);   /* sorts q */
    const int k = ci_rank(reps, NULL);
    *lo = q[k];
    *hi = q[reps - 1 - k];
}

/* "faster" where the interval's upper end is <= 1, "slower" where its lower end is > 1, "n.d."
 * (not distinguishable at 95%) where it straddles 1. */
static const char *verdict(double lo, double hi)
{
    return hi <= 1.0 ? "faster" : lo > 1.0 ? "slower" : "n.d.";
}

/* --per-matrix: the label of the lines (path dtype model) and the verdicts of the first kind
 * (the runtime's product) against the last (OpenBLAS) over its matrices and row counts, apart
 * for the row counts where the runtime runs the skinny kernel and those where it runs OpenBLAS
 * itself (there the ratio is two timings of the same code). */
static char pm_label[64] = "-";
typedef struct tally_t {
    int    count[3];   /* faster, n.d., slower */
    double worst_med, worst_hi;
    char   worst[64];
    char   list[2048]; /* the matrices not "faster" */
} tally_t;
static tally_t tallies[2];   /* [0] skinny rows, [1] BLAS rows */

static void tally(int n, int d_out, int d_in, double md, double lo, double hi, int blas)
{
    tally_t *t = &tallies[blas];
    int v = hi <= 1.0 ? 0 : lo > 1.0 ? 2 : 1;
    t->count[v]++;
    if (hi > t->worst_hi) {
        t->worst_hi = hi;
        t->worst_med = md;
        snprintf(t->worst, sizeof t->worst, "n %d %dx%d %.3f [%.3f %.3f]", n, d_out, d_in, md,
                 lo, hi);
    }
    if (v != 0 && strlen(t->list) + 64 < sizeof t->list) {
        char one[64];
        snprintf(one, sizeof one, " n%d:%dx%d:%.3f[%.3f,%.3f]%s", n, d_out, d_in, md, lo, hi,
                 v == 2 ? "!" : "");
        strcat(t->list, one);
    }
}

static void tally_print(void)
{
    static const char *const what[2] = {"skinny rows", "OpenBLAS rows (runtime = OpenBLAS)"};
    for (int b = 0; b < 2; b++) {
        const tally_t *t = &tallies[b];
        if (t->count[0] + t->count[1] + t->count[2] == 0)
            continue;
        printf("pm-summary %s, %s: runtime/OpenBLAS per matrix and row count: faster %d, "
               "n.d. %d, slower %d; largest upper end: %s\n", pm_label, what[b], t->count[0],
               t->count[1], t->count[2], t->worst);
        if (t->list[0])
            printf("pm-summary %s, %s: not faster (median[95%%], ! slower):%s\n", pm_label,
                   what[b], t->list);
    }
    memset(tallies, 0, sizeof tallies);
}

/* Medians over reps of the per-forward total of each kind in kinds[], measured interleaved;
 * worst[k]: the largest ratio of kind k to the last kind over single matrices. */
static void measure(const model *m, int d, int n, const int *kinds, const block **bl, int nk,
                    int reps, double ms, double *med, double *worst)
{
    static double tot[MAX_KINDS][MAX_REPS], per[8][MAX_KINDS][MAX_REPS];
    for (int r = 0; r < reps; r++)
        for (int k = 0; k < nk; k++)
            tot[k][r] = 0;
    for (int r = 0; r < reps; r++)
        for (int i = 0; i < m->n_mats; i++)
            for (int k = 0; k < nk; k++) {
                int kk = (k + r) % nk;   /* rotate which kind goes first */
                double s = time_one(kinds[kk], &m->mats[i], d, n, bl[kk], ms);
                per[i][kk][r] = s;
                tot[kk][r] += s * m->mats[i].count;
            }
    if (per_matrix)
        for (int i = 0; i < m->n_mats; i++) {
            /* pm LABEL n MATRIX, each kind's median ms, then each kind's per-round ratio to the
             * last kind: median [95% interval] verdict; with runtime and skinny (the same kernel
             * below the threshold) their ratio too, what two timings of one code differ by */
            char shape[32];
            snprintf(shape, sizeof shape, "%dx%d", m->mats[i].d_out, m->mats[i].d_in);
            printf("pm %s %3d %-9s", pm_label, n, shape);
            for (int k = 0; k < nk; k++) {
                static double c[MAX_REPS];
                memcpy(c, per[i][k], sizeof(double) * (size_t)reps);
                printf(" %8.4f", median(c, reps) * 1e3);
            }
            for (int k = 0; k < nk - 1; k++) {
                double md, lo, hi;
                ratio_ci(per[i][k], per[i][nk - 1], reps, &md, &lo, &hi);
                printf("  %.3f [%.3f %.3f] %-6s", md, lo, hi, verdict(lo, hi));
                if (k == 0)
                    tally(n, m->mats[i].d_out, m->mats[i].d_in, md, lo, hi,
                          n > sq_cpu_skinny_rows_for(dtypes[d], m->mats[i].d_in));
            }
            if (nk == 3 && kinds[0] == K_RUNTIME && kinds[1] == K_SKINNY) {
                double md, lo, hi;
                ratio_ci(per[i][0], per[i][1], reps, &md, &lo, &hi);
                printf("  %.3f [%.3f %.3f]", md, lo, hi);
            }
            printf("\n");
        }
    for (int k = 0; k < nk; k++) {
        med[k] = median(tot[k], reps);
        worst[k] = 0;
        for (int i = 0; i < m->n_mats; i++) {
            double a = median(per[i][k], reps), z = median(per[i][nk - 1], reps);
            if (a / z > worst[k])
                worst[k] = a / z;
        }
    }
}

static const char *const isa_names4[4] = {"-", "scalar", "avx2", "avx512"};

/* want[k] = 1 for the names of the comma-separated list, 0 for the others; -1: an unknown name */
static int pick(const char *list, const char *const *names, int n, int *want)
{
    for (int k = 0; k < n; k++)
        want[k] = 0;
    char buf[256];
    snprintf(buf, sizeof buf, "%s", list);
    for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        int k = 0;
        while (k < n && strcmp(t, names[k]) != 0)
            k++;
        if (k == n)
            return -1;
        want[k] = 1;
    }
    return 0;
}

static int parse_rows(const char *s, int *rows)
{
    int n = 0;
    while (*s && n < 64) {
        char *e;
        long a = strtol(s, &e, 10), b = a;
        if (e == s)
            return -1;
        if (*e == '-')
            b = strtol(e + 1, &e, 10);
        for (long v = a; v <= b && n < 64; v++)
            if (v >= 1 && v <= 64)
                rows[n++] = (int)v;
        s = *e == ',' ? e + 1 : e;
        if (*e && *e != ',')
            return -1;
    }
    return n;
}

static void print_host(void)
{
    char line[512], model_name[256] = "?";
    FILE *f = fopen("/proc/cpuinfo", "r");
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, "model name", 10) == 0) {
            char *c = strchr(line, ':');
            if (c) {
                snprintf(model_name, sizeof model_name, "%s", c + 2);
                model_name[strcspn(model_name, "\n")] = 0;
            }
            break;
        }
    if (f)
        fclose(f);
    double load[3] = {0};
    f = fopen("/proc/loadavg", "r");
    if (f) {
        if (fscanf(f, "%lf %lf %lf", &load[0], &load[1], &load[2]) != 3)
            load[0] = -1;
        fclose(f);
    }
    printf("# CPU: %s; paths:", model_name);
    const sq_cpu_isa all[3] = {SQ_CPU_ISA_SCALAR, SQ_CPU_ISA_AVX2, SQ_CPU_ISA_AVX512};
    for (int i = 0; i < 3; i++)
        if (sq_cpu_isa_supported(all[i]))
            printf(" %s", sq_cpu_isa_name(all[i]));
    printf("; OpenBLAS core: %s; load average %.2f %.2f %.2f\n",
           openblas_get_corename ? openblas_get_corename() : "?", load[0], load[1], load[2]);
}

int main(int argc, char **argv)
{
    sq_cpu_blas_reexec(argv);
    if (openblas_set_num_threads)   /* one thread, as the runtime runs it (runtime/cpu.c) */
        openblas_set_num_threads(1);
    int want_isa[4] = {0, 1, 1, 1}, want_dt[3] = {1, 1, 1}, rows[64], n_rows = 64;
    int reps = 7, blocks_mode = 0, shapes = 0, child = 0, same_blas = 0;
    double ms = 2.0;
    const char *models[8];
    int n_models = 0;
    for (int i = 0; i < 64; i++)
        rows[i] = i + 1;
    static const struct option opts[] = {
        {"isa", required_argument, 0, 'i'},  {"dtype", required_argument, 0, 'd'},
        {"rows", required_argument, 0, 'r'}, {"reps", required_argument, 0, 'n'},
        {"ms", required_argument, 0, 'm'},   {"model", required_argument, 0, 'M'},
        {"blocks", no_argument, 0, 'b'},     {"shapes", no_argument, 0, 's'},
        {"wall", no_argument, 0, 'w'},       {"child", no_argument, 0, 'c'},
        {"same-blas", no_argument, 0, 'S'},  {"per-matrix", no_argument, 0, 'P'},
        {0, 0, 0, 0}};
    int o;
    while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (o) {
        case 'i':
            if (pick(optarg, isa_names4, 4, want_isa) != 0) {
                fprintf(stderr, "bench-skinny: --isa: a list of scalar, avx2, avx512\n");
                return 64;
            }
            break;
        case 'd':
            if (pick(optarg, dtype_names, 3, want_dt) != 0) {
                fprintf(stderr, "bench-skinny: --dtype: a list of f32, bf16, f16\n");
                return 64;
            }
            break;
        case 'r':
            n_rows = parse_rows(optarg, rows);
            if (n_rows <= 0) {
                fprintf(stderr, "bench-skinny: --rows: a list of counts and ranges in 1..64\n");
                return 64;
            }
            break;
        case 'n':
            reps = atoi(optarg);
            if (reps < 1 || reps > MAX_REPS) {
                fprintf(stderr, "bench-skinny: --reps: 1 .. %d\n", MAX_REPS);
                return 64;
            }
            break;
        case 'm':
            ms = atof(optarg);
            if (!(ms > 0 && ms < 1000)) {
                fprintf(stderr, "bench-skinny: --ms: a duration in milliseconds\n");
                return 64;
            }
            break;
        case 'M':
            if (n_models < 8)
                models[n_models++] = optarg;
            break;
        case 'b': blocks_mode = 1; break;
        case 's': shapes = 1; break;
        case 'w': use_wall = 1; break;
        case 'c': child = 1; break;
        case 'S': same_blas = 1; break;
        case 'P': per_matrix = 1; break;
        default:
            fprintf(stderr, "usage: bench-skinny [--isa LIST] [--dtype LIST] [--rows LIST] "
                            "[--reps R] [--ms M] [--model DIR]... [--blocks] [--shapes] "
                            "[--wall] [--per-matrix] [--same-blas]\n");
            return 64;
        }
    }
    if (!child && !same_blas && !getenv("SQ_BENCH_BLAS_CORE")) {
        /* one child per path, each with OpenBLAS's kernels of that instruction set */
        int rc = 0;
        for (int isa = 1; isa < 4; isa++) {
            if (!want_isa[isa] || !sq_cpu_isa_supported((sq_cpu_isa)isa))
                continue;
            char **av = calloc((size_t)argc + 4, sizeof *av);
            for (int i = 0; i < argc; i++)
                av[i] = argv[i];
            av[argc] = "--isa";
            av[argc + 1] = (char *)isa_names4[isa];
            av[argc + 2] = "--child";
            av[argc + 3] = NULL;
            /* the AVX-512 path against what OpenBLAS picks for this CPU (runtime/cpu_matmul.h:
             * sq_cpu_blas_reexec), the others against OpenBLAS's kernels of their set */
            const char *core = isa == SQ_CPU_ISA_AVX512 ? "" :
                               isa == SQ_CPU_ISA_AVX2   ? "Haswell" : "Prescott";
            if (*core)
                setenv("OPENBLAS_CORETYPE", core, 1);
            else
                unsetenv("OPENBLAS_CORETYPE");
            fflush(stdout);
            pid_t pid;
            extern char **environ;
            int st = 0;
            if (posix_spawn(&pid, "/proc/self/exe", NULL, NULL, av, environ) != 0 ||
                waitpid(pid, &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
                rc = 1;
            free(av);
        }
        return rc;
    }
    if (n_models == 0) {
        models[n_models++] = SQ_SOURCE_DIR "/data/models/large";
        if (!blocks_mode)
            models[n_models++] = SQ_SOURCE_DIR "/data/models/target";
    }
    model *ms_ = calloc((size_t)n_models, sizeof *ms_);
    int max_d = 0;
    for (int i = 0; i < n_models; i++) {
        if (load_model(models[i], &ms_[i]) != 0)
            return 66;
        for (int k = 0; k < ms_[i].n_mats; k++) {
            if (ms_[i].mats[k].d_in > max_d)
                max_d = ms_[i].mats[k].d_in;
            if (ms_[i].mats[k].d_out > max_d)
                max_d = ms_[i].mats[k].d_out;
        }
    }
    in_buf = malloc(sizeof(float) * 64 * (size_t)max_d);
    out_buf = malloc(sizeof(float) * 64 * (size_t)max_d);
    for (int i = 0; i < 64 * max_d; i++)
        in_buf[i] = frand();
    print_host();
    printf("# one thread, %s time; medians of %d interleaved repetitions of about %.1f ms per "
           "matrix\n", use_wall ? "wall" : "the thread's CPU", reps, ms);
    if (per_matrix) {
        double cover;
        int k = ci_rank(reps, &cover);
        printf("# per-matrix intervals: order statistics %d and %d of %d per-round ratios, "
               "coverage %.3f of the median\n", k + 1, reps - k, reps, cover);
    }
    if (shapes)
        for (int i = 0; i < n_models; i++) {
            printf("# %s:", ms_[i].name);
            for (int k = 0; k < ms_[i].n_mats; k++)
                printf(" %dx%d (x%d)", ms_[i].mats[k].d_out, ms_[i].mats[k].d_in,
                       ms_[i].mats[k].count);
            printf("\n");
        }

    if (blocks_mode) {
        /* per path: every candidate block's forward total / cblas_sgemm's (F32 weights) */
        for (int isa = 1; isa < 4; isa++) {
            if (!want_isa[isa] || !sq_cpu_isa_supported((sq_cpu_isa)isa))
                continue;
            sq_cpu_isa_set((sq_cpu_isa)isa);
            int kinds[MAX_KINDS];
            const block *bl[MAX_KINDS];
            int nk = 0;
            for (int b = 0; b < N_BLOCKS && nk < MAX_KINDS - 1; b++)
                if (blocks[b].isa == (sq_cpu_isa)isa)
                    kinds[nk] = K_BLOCK, bl[nk++] = &blocks[b];
            kinds[nk] = K_BLAS, bl[nk++] = NULL;
            for (int d = 0; d < 3; d++) {
                if (!want_dt[d])
                    continue;
                printf("\nblocks %s %s %s: ratio to OpenBLAS (forward's matrices, median)\n",
                       sq_cpu_isa_name((sq_cpu_isa)isa), dtype_names[d], ms_[0].name);
                printf("%4s", "n");
                for (int k = 0; k < nk - 1; k++)
                    printf(" %10s", bl[k]->name);
                printf(" %10s\n", "blas_ms");
                for (int ri = 0; ri < n_rows; ri++) {
                    double med[MAX_KINDS], worst[MAX_KINDS];
                    measure(&ms_[0], d, rows[ri], kinds, bl, nk, reps, ms, med, worst);
                    printf("%4d", rows[ri]);
                    for (int k = 0; k < nk - 1; k++)
                        printf(" %10.3f", med[k] / med[nk - 1]);
                    printf(" %10.3f\n", med[nk - 1] * 1e3);
                    fflush(stdout);
                }
            }
        }
        sq_cpu_isa_set(SQ_CPU_ISA_AUTO);
        return 0;
    }

    if (per_matrix)
        printf("# pm path dtype model n matrix runtime_ms skinny_ms blas_ms, then per-round "
               "ratios: median [95%% interval] verdict of runtime/blas and of skinny/blas, and "
               "runtime/skinny (the same kernel below the threshold: the timing's own noise); "
               "verdict: faster (upper end <= 1), slower (lower end > 1), n.d. (straddles 1)\n");
    printf("%-7s %-5s %-8s %3s %10s %10s %10s %8s %8s %8s %8s\n", "path", "dtype", "model", "n",
           "runtime_ms", "skinny_ms", "blas_ms", "rt/blas", "sk/blas", "worst_rt", "worst_sk");
    for (int isa = 1; isa < 4; isa++) {
        if (!want_isa[isa] || !sq_cpu_isa_supported((sq_cpu_isa)isa))
            continue;
        sq_cpu_isa_set((sq_cpu_isa)isa);
        for (int d = 0; d < 3; d++) {
            if (!want_dt[d])
                continue;
            for (int mi = 0; mi < n_models; mi++) {
                snprintf(pm_label, sizeof pm_label, "%-6s %-4s %-6s",
                         sq_cpu_isa_name((sq_cpu_isa)isa), dtype_names[d], ms_[mi].name);
                for (int ri = 0; ri < n_rows; ri++) {
                    const int kinds[3] = {K_RUNTIME, K_SKINNY, K_BLAS};
                    const block *bl[3] = {NULL, NULL, NULL};
                    double med[3], worst[3];
                    measure(&ms_[mi], d, rows[ri], kinds, bl, 3, reps, ms, med, worst);
                    printf("%-7s %-5s %-8s %3d %10.4f %10.4f %10.4f %8.3f %8.3f %8.3f %8.3f%s\n",
                           sq_cpu_isa_name((sq_cpu_isa)isa), dtype_names[d], ms_[mi].name,
                           rows[ri], med[0] * 1e3, med[1] * 1e3, med[2] * 1e3, med[0] / med[2],
                           med[1] / med[2], worst[0], worst[1],
                           rows[ri] > sq_cpu_skinny_rows(dtypes[d])      ? "  (blas)"
                           : rows[ri] > sq_cpu_skinny_rows_for(dtypes[d], 1 << 30) ? "  (wide: blas)"
                                                                                  : "");
                    fflush(stdout);
                }
                if (per_matrix)
                    tally_print();
            }
        }
    }
    sq_cpu_isa_set(SQ_CPU_ISA_AUTO);
    return 0;
}
