/* The products of runtime/cpu_matmul.h: the skinny kernel (runtime/cpu_matmul_isa.h, compiled
 * here once per instruction set), the BLAS path with 16-bit panels, the choice of instruction
 * set and OpenBLAS's re-execution. */
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sys/resource.h>

#include <gsl/gsl_cblas.h>

#include "libsequoia/base/half.h"
#include "runtime/cpu_matmul.h"

#if defined(__x86_64__) && defined(__GNUC__)
#define SQ_CPU_X86 1
#include <immintrin.h>
#else
#define SQ_CPU_X86 0
#endif

/* Floats of one thread's panel of widened 16-bit weights on the BLAS path (1 MiB): large
 * enough for sgemm to run at its rate (64 rows of 4096), small enough to stay in L2. */
#define SQ_CPU_PANEL_FLOATS (1 << 18)

/* OpenBLAS's own functions (its cblas.h; not in GSL's header). Weak, so that a build against
 * another CBLAS still links: sq_cpu_blas_reexec then does nothing. */
char *openblas_get_corename(void) __attribute__((weak));

/* Below this many multiply-adds a skinny product runs on the calling thread only: a dispatch
 * costs a few microseconds, the product about 1 ns per 16 multiply-adds. */
#define MATMUL_PARALLEL_MIN_WORK (1 << 16)
/* Parts of a skinny product per thread of the pool. */
#define MATMUL_PARTS_PER_THREAD 4

/* The register block of each instruction set's skinny kernel, R weight rows x J input rows
 * (runtime/cpu_matmul_isa.h), chosen by measurement: docs/benchmarks.md, "The skinny product". */
#define SQ_CPU_BLOCK_SCALAR_R 4
#define SQ_CPU_BLOCK_SCALAR_J 2
#define SQ_CPU_BLOCK_SCALAR_XFIRST 1
#define SQ_CPU_BLOCK_AVX2_R 4
#define SQ_CPU_BLOCK_AVX2_J 3
#define SQ_CPU_BLOCK_AVX2_XFIRST 1
#define SQ_CPU_BLOCK_AVX512_R 6
#define SQ_CPU_BLOCK_AVX512_J 4
#define SQ_CPU_BLOCK_AVX512_XFIRST 1
/* Blocks chosen per row count for products of up to N rows (R x J of each n; R = 0: the main
 * block), by measurement on single matrices with hot caches, against OpenBLAS's small-matrix
 * kernels (docs/benchmarks.md, "The skinny product"): on AVX-512 (32 registers) 6 x 1, 6 x 2,
 * 8 x 3, 5 x 5, 4 x 6 for 1, 2, 3, 5, 6 rows and 4 x 6 (+ 4 x 3) for 9; on AVX2 8 x 1 and 4 x 2;
 * 8 x 1 on the portable path. */
#define SQ_CPU_SHAPE_SCALAR_N 1
#define SQ_CPU_SHAPE_SCALAR_R(n) 8
#define SQ_CPU_SHAPE_SCALAR_J(n) (n)
#define SQ_CPU_SHAPE_AVX2_N 2
#define SQ_CPU_SHAPE_AVX2_R(n) ((n) == 1 ? 8 : 4)
#define SQ_CPU_SHAPE_AVX2_J(n) (n)
#define SQ_CPU_SHAPE_AVX512_N 9
#define SQ_CPU_SHAPE_AVX512_R(n)                                                                \
    ((n) == 1 ? 6 : (n) == 2 ? 6 : (n) == 3 ? 8 : (n) == 5 ? 5 : (n) == 6 || (n) == 9 ? 4 : 0)
#define SQ_CPU_SHAPE_AVX512_J(n) ((n) <= 6 ? (n) : (n) == 9 ? 6 : 4)

/* The kernels, once per instruction set. The set is chosen by the CPU's features
 * (__builtin_cpu_supports), not by its model name: GCC's target_clones("arch=...") dispatches on
 * the exact CPU model and falls back to the baseline on newer CPUs of the same family. */
#define ISA_SFX scalar
#define ISA_VL 4
#define ISA_F16 0
#define ISA_FMA 0
#define ISA_R SQ_CPU_BLOCK_SCALAR_R
#define ISA_J SQ_CPU_BLOCK_SCALAR_J
#define ISA_XFIRST SQ_CPU_BLOCK_SCALAR_XFIRST
#define ISA_SHAPE_N SQ_CPU_SHAPE_SCALAR_N
#define ISA_SHAPE_R SQ_CPU_SHAPE_SCALAR_R
#define ISA_SHAPE_J SQ_CPU_SHAPE_SCALAR_J
#include "runtime/cpu_matmul_isa.h"
#undef ISA_SFX
#undef ISA_VL
#undef ISA_F16
#undef ISA_FMA
#undef ISA_R
#undef ISA_J
#undef ISA_XFIRST
#undef ISA_SHAPE_N
#undef ISA_SHAPE_R
#undef ISA_SHAPE_J

#if SQ_CPU_X86
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
#define ISA_SFX avx2
#define ISA_VL 8
#define ISA_F16 1
#define ISA_FMA 1
#define ISA_R SQ_CPU_BLOCK_AVX2_R
#define ISA_J SQ_CPU_BLOCK_AVX2_J
#define ISA_XFIRST SQ_CPU_BLOCK_AVX2_XFIRST
#define ISA_SHAPE_N SQ_CPU_SHAPE_AVX2_N
#define ISA_SHAPE_R SQ_CPU_SHAPE_AVX2_R
#define ISA_SHAPE_J SQ_CPU_SHAPE_AVX2_J
#include "runtime/cpu_matmul_isa.h"
#undef ISA_SFX
#undef ISA_VL
#undef ISA_F16
#undef ISA_FMA
#undef ISA_R
#undef ISA_J
#undef ISA_XFIRST
#undef ISA_SHAPE_N
#undef ISA_SHAPE_R
#undef ISA_SHAPE_J
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx512f,fma,f16c")
#define ISA_SFX avx512
#define ISA_VL 16
#define ISA_F16 2
#define ISA_FMA 1
#define ISA_R SQ_CPU_BLOCK_AVX512_R
#define ISA_J SQ_CPU_BLOCK_AVX512_J
#define ISA_XFIRST SQ_CPU_BLOCK_AVX512_XFIRST
#define ISA_SHAPE_N SQ_CPU_SHAPE_AVX512_N
#define ISA_SHAPE_R SQ_CPU_SHAPE_AVX512_R
#define ISA_SHAPE_J SQ_CPU_SHAPE_AVX512_J
#include "runtime/cpu_matmul_isa.h"
#undef ISA_SFX
#undef ISA_VL
#undef ISA_F16
#undef ISA_FMA
#undef ISA_R
#undef ISA_J
#undef ISA_XFIRST
#undef ISA_SHAPE_N
#undef ISA_SHAPE_R
#undef ISA_SHAPE_J
#pragma GCC pop_options
#endif

/* ---- the instruction set in use ----------------------------------------------------------- */

static const char *const isa_names[] = {"auto", "scalar", "avx2", "avx512"};

const char *sq_cpu_isa_name(sq_cpu_isa isa)
{
    return (unsigned)isa < 4 ? isa_names[isa] : "unknown";
}

int sq_cpu_isa_supported(sq_cpu_isa isa)
{
    switch (isa) {
    case SQ_CPU_ISA_AUTO:
    case SQ_CPU_ISA_SCALAR:
        return 1;
#if SQ_CPU_X86
    case SQ_CPU_ISA_AVX2:
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
               __builtin_cpu_supports("f16c");
    case SQ_CPU_ISA_AVX512:
        return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("fma") &&
               __builtin_cpu_supports("f16c");
#endif
    default:
        return 0;
    }
}

static sq_cpu_isa best_isa(void)
{
    return sq_cpu_isa_supported(SQ_CPU_ISA_AVX512) ? SQ_CPU_ISA_AVX512
           : sq_cpu_isa_supported(SQ_CPU_ISA_AVX2) ? SQ_CPU_ISA_AVX2
                                                   : SQ_CPU_ISA_SCALAR;
}

/* 0: not settled yet (the first product reads SQ_CPU_ISA) */
static _Atomic int isa_now;

int sq_cpu_isa_set(sq_cpu_isa isa)
{
    if ((unsigned)isa > SQ_CPU_ISA_AVX512 || !sq_cpu_isa_supported(isa))
        return -1;
    atomic_store(&isa_now, (int)(isa == SQ_CPU_ISA_AUTO ? best_isa() : isa));
    return 0;
}

sq_cpu_isa sq_cpu_isa_get(void)
{
    int v = atomic_load(&isa_now);
    if (v)
        return (sq_cpu_isa)v;
    sq_cpu_isa want = best_isa();
    const char *env = getenv("SQ_CPU_ISA");
    for (int i = 1; env && i < 4; i++)
        if (strcmp(env, isa_names[i]) == 0 && sq_cpu_isa_supported((sq_cpu_isa)i))
            want = (sq_cpu_isa)i;
    int expect = 0;
    atomic_compare_exchange_strong(&isa_now, &expect, (int)want);
    return (sq_cpu_isa)atomic_load(&isa_now);
}

static int wt_of(sq_weight_dtype dt)
{
    return dt == SQ_DTYPE_BF16 ? WT_BF16 : dt == SQ_DTYPE_F16 ? WT_F16 : WT_F32;
}

/* Rows up to which each path's skinny kernel is at least as fast as OpenBLAS, per weight dtype
 * (F32, BF16, F16; above, sgemm on the weights or on widened panels), measured with
 * tests/bench/bench_skinny.c: docs/benchmarks.md, "The skinny product". None below
 * SQ_CPU_SKINNY_MAX (runtime/cpu_matmul.h). */
static const int skinny_rows_table[4][3] = {
    [SQ_CPU_ISA_SCALAR] = {64, 64, 64},
    [SQ_CPU_ISA_AVX2]   = {48, 56, 64},
    [SQ_CPU_ISA_AVX512] = {44, 44, 44},
};

/* The same for wide matrices (d_in > SQ_CPU_WIDE_DIN): measured per matrix, the 18M target's
 * 512 x 1408 (d_in 1408) ties OpenBLAS on AVX-512 at 36-44 rows (medians 0.87-1.10, 95%
 * intervals reaching above 1 at 7 of the 9 row counts) where every narrower matrix is faster;
 * at 33-35 rows it is 0.77-0.86. */
#define SQ_CPU_WIDE_DIN 1024
static const int skinny_rows_wide[4][3] = {
    [SQ_CPU_ISA_SCALAR] = {64, 64, 64},
    [SQ_CPU_ISA_AVX2]   = {48, 56, 64},
    [SQ_CPU_ISA_AVX512] = {35, 44, 44},
};

int sq_cpu_skinny_rows(sq_weight_dtype wdt)
{
    return skinny_rows_table[sq_cpu_isa_get()][wt_of(wdt)];
}

int sq_cpu_skinny_rows_for(sq_weight_dtype wdt, int d_in)
{
    return (d_in > SQ_CPU_WIDE_DIN ? skinny_rows_wide
                                   : skinny_rows_table)[sq_cpu_isa_get()][wt_of(wdt)];
}

void sq_cpu_matmul_skinny_typed(float *out, const float *in, const void *w, sq_weight_dtype wdt,
                                int n, int d_in, int d_out, int accumulate, int o0, int o1)
{
    const int wt = wt_of(wdt);
    switch (sq_cpu_isa_get()) {
#if SQ_CPU_X86
    case SQ_CPU_ISA_AVX512:
        skinny_avx512(out, in, w, wt, n, d_in, d_out, accumulate, o0, o1);
        return;
    case SQ_CPU_ISA_AVX2:
        skinny_avx2(out, in, w, wt, n, d_in, d_out, accumulate, o0, o1);
        return;
#endif
    default:
        skinny_scalar(out, in, w, wt, n, d_in, d_out, accumulate, o0, o1);
    }
}

void sq_cpu_matmul_skinny(float *out, const float *in, const float *w, int n, int d_in, int d_out,
                          int accumulate, int o0, int o1)
{
    sq_cpu_matmul_skinny_typed(out, in, w, SQ_DTYPE_F32, n, d_in, d_out, accumulate, o0, o1);
}

void sq_cpu_widen(float *dst, const void *src, sq_weight_dtype dt, size_t count)
{
    const int wt = wt_of(dt);
    if (wt == WT_F32) {
        memcpy(dst, src, count * sizeof(float));
        return;
    }
    switch (sq_cpu_isa_get()) {
#if SQ_CPU_X86
    case SQ_CPU_ISA_AVX512:
        widen_avx512(dst, src, wt, count);
        return;
    case SQ_CPU_ISA_AVX2:
        widen_avx2(dst, src, wt, count);
        return;
#endif
    default:
        widen_scalar(dst, src, wt, count);
    }
}

/* ---- the product on the pool ------------------------------------------------------------ */

typedef struct matmul_job {
    float       *out;
    const float *in;
    const void  *w;
    sq_weight_dtype wdt;
    int          n, d_in, d_out, accumulate;
    int          unit;   /* columns per share are a multiple of this */
    int          skinny; /* n <= sq_cpu_skinny_rows_for(wdt, d_in)   */
} matmul_job;

/* Columns [o0, o1) with more rows than the skinny kernel takes and 16-bit weights: panels of the
 * weights widened into this thread's float32 scratch, one sgemm each. Out of memory for the
 * scratch, the skinny kernel in row blocks does the same product. */
static void panels16(const matmul_job *m, int o0, int o1)
{
    const size_t d_in = (size_t)m->d_in;
    size_t rows = ((size_t)SQ_CPU_PANEL_FLOATS / (d_in ? d_in : 1)) & ~(size_t)15;
    if (rows < 16)
        rows = 16;
    if (rows > (size_t)(o1 - o0))
        rows = (size_t)(o1 - o0);
    float *buf = malloc(rows * d_in * sizeof(float) + 1);
    if (!buf) {
        for (int j = 0; j < m->n; j += SQ_CPU_SKINNY_MAX) {
            int nj = m->n - j < SQ_CPU_SKINNY_MAX ? m->n - j : SQ_CPU_SKINNY_MAX;
            sq_cpu_matmul_skinny_typed(m->out + (size_t)j * m->d_out, m->in + (size_t)j * d_in,
                                       m->w, m->wdt, nj, m->d_in, m->d_out, m->accumulate, o0,
                                       o1);
        }
        return;
    }
    const size_t es = 2;
    for (int o = o0; o < o1; o += (int)rows) {
        int p = o1 - o < (int)rows ? o1 - o : (int)rows;
        sq_cpu_widen(buf, (const char *)m->w + (size_t)o * d_in * es, m->wdt, (size_t)p * d_in);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m->n, p, m->d_in, 1.0f, m->in,
                    m->d_in, buf, m->d_in, m->accumulate ? 1.0f : 0.0f, m->out + o, m->d_out);
    }
    free(buf);
}

void sq_cpu_matmul_blas_typed(float *out, const float *in, const void *w, sq_weight_dtype wdt,
                              int n, int d_in, int d_out, int accumulate)
{
    matmul_job m = {out, in, w, wdt, n, d_in, d_out, accumulate, 16, 0};
    if (wdt == SQ_DTYPE_F16 || wdt == SQ_DTYPE_BF16)
        panels16(&m, 0, d_out);
    else
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, d_out, d_in, 1.0f, in, d_in, w,
                    d_in, accumulate ? 1.0f : 0.0f, out, d_out);
}

/* Part w of nw is a contiguous range of column blocks of `unit` columns: the skinny kernel
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
    if (m->skinny)
        sq_cpu_matmul_skinny_typed(m->out, m->in, m->w, m->wdt, m->n, m->d_in, m->d_out,
                                   m->accumulate, o0, o1);
    else if (m->wdt == SQ_DTYPE_F16 || m->wdt == SQ_DTYPE_BF16)
        panels16(m, o0, o1);
    else
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m->n, o1 - o0, m->d_in, 1.0f, m->in,
                    m->d_in, (const float *)m->w + (size_t)o0 * (size_t)m->d_in, m->d_in,
                    m->accumulate ? 1.0f : 0.0f, m->out + o0, m->d_out);
}

void sq_cpu_matmul_typed(sq_pool *pool, float *out, const float *in, const void *w,
                         sq_weight_dtype wdt, int n, int d_in, int d_out, int accumulate)
{
    const int skinny = n <= sq_cpu_skinny_rows_for(wdt, d_in);
    /* columns per part: a multiple of every path's main R (12: 3, 4 and 6; the blocks for few
     * rows leave a part's last columns to blocks of 4 and of 1), 16 for sgemm */
    matmul_job m = {out, in, w, wdt, n, d_in, d_out, accumulate, skinny ? 12 : 16, skinny};
    if (!pool || pool->n < 2 || (double)n * d_in * d_out < MATMUL_PARALLEL_MIN_WORK) {
        matmul_worker(&m, 0, 1);
        return;
    }
    /* more parts than threads, so that a thread slowed down by another process's use of its
     * core leaves its share to the others (runtime/cpu_pool.h) */
    int blocks = (d_out + m.unit - 1) / m.unit;
    int parts = pool->n * (skinny ? MATMUL_PARTS_PER_THREAD : 2);
    sq_pool_run_parts(pool, matmul_worker, &m, parts < blocks ? parts : blocks);
}

void sq_cpu_matmul(sq_pool *pool, float *out, const float *in, const float *w, int n, int d_in,
                   int d_out, int accumulate)
{
    sq_cpu_matmul_typed(pool, out, in, w, SQ_DTYPE_F32, n, d_in, d_out, accumulate);
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
