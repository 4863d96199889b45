/* Suite 'cpu-matmul': the CPU backend's weight products and its worker pool
 * (runtime/cpu_matmul.h, runtime/cpu_pool.h).
 *   - every path this CPU has, forced (scalar, avx2, avx512), every row count 1..64, odd widths
 *     and heights: the product the runtime calls (skinny or BLAS by the path's threshold) and
 *     the skinny kernel alone, on whole and split column ranges, equal a double-precision
 *     reference within float32 summation's bound;
 *   - the product equals a double-precision reference on random shapes, skinny and BLAS sizes,
 *     widths that are not multiples of 16 and heights not multiples of 4, with and without
 *     accumulation, within the bound of float32 summation;
 *   - a column range writes those columns and nothing else;
 *   - splitting the columns over 1-4 threads gives bitwise the same result as one thread;
 *   - every part of a dispatch runs exactly once, over many dispatches, also with more parts
 *     than threads;
 *   - the pool on a shared machine (issue 27): products and a model's forward give the same
 *     bits on 1, 2 and 7 threads (the BLAS path within float32 rounding: its column splits
 *     differ); with workers that sleep after they wake (sq_pool_test_delay, a worker the kernel
 *     does not schedule), the caller runs every part itself, at once, with the same results,
 *     and the late workers never run a part of a later dispatch;
 *   - a tool's BLAS set-up never leaves OpenBLAS on its Prescott fallback on a CPU with AVX2 and
 *     FMA, and leaves a user's OPENBLAS_CORETYPE alone;
 *   - 16-bit weights (docs/runtime.md, "16-bit weights on the CPU"), on every instruction set this
 *     CPU has (AVX-512, AVX2, the portable "scalar" path; forced with sq_cpu_isa_set): the
 *     widening equals libsequoia/base/half.h for all 65536 patterns of bf16 and f16; the
 *     products of bf16 and f16 matrices, for every row count 1..64 (skinny kernel and the BLAS
 *     path's panels) and odd sizes, equal the double-precision product of the widened float32
 *     matrix within float32 summation's bound; the skinny kernel gives bitwise the float32
 *     kernel's result on the widened copy. */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "libsequoia/base/half.h"
#include "runtime/cpu_matmul.h"
#include "runtime/cpu_pool.h"
#include "tests/llama_config.h"
#include "tests/testutil.h"

static float frand(unsigned *s)
{
    *s = *s * 1103515245u + 12345u;
    return (float)((*s >> 8) & 0xffff) / 32768.0f - 1.0f;
}

/* out = in w^T (+ out0) in double, and the bound sum |w||x| per element. */
static void reference(double *ref, double *mag, const float *in, const float *w, const float *out0,
                      int n, int d_in, int d_out)
{
    for (int i = 0; i < n; i++)
        for (int o = 0; o < d_out; o++) {
            double s = out0 ? out0[(size_t)i * d_out + o] : 0.0, m = out0 ? fabs(s) : 0.0;
            for (int k = 0; k < d_in; k++) {
                s += (double)in[(size_t)i * d_in + k] * w[(size_t)o * d_in + k];
                m += fabs((double)in[(size_t)i * d_in + k] * w[(size_t)o * d_in + k]);
            }
            ref[(size_t)i * d_out + o] = s;
            mag[(size_t)i * d_out + o] = m;
        }
}

Test(cpu_matmul, equals_double_reference_on_random_shapes)
{
    unsigned seed = 7;
    sq_pool pool;
    cr_assert_eq(sq_pool_start(&pool, 2), 0);
    for (int trial = 0; trial < 300; trial++) {
        int n = 1 + (int)(frand(&seed) * 0.5f * 40 + 20) % 40;   /* 1 .. 40: skinny and BLAS */
        int d_in = 1 + abs((int)(frand(&seed) * 1000)) % 150;
        int d_out = 1 + abs((int)(frand(&seed) * 1000)) % 70;
        int acc = trial % 2;
        float *in = malloc(sizeof(float) * (size_t)n * d_in);
        float *w = malloc(sizeof(float) * (size_t)d_out * d_in);
        float *out = malloc(sizeof(float) * (size_t)n * d_out);
        float *out0 = malloc(sizeof(float) * (size_t)n * d_out);
        double *ref = malloc(sizeof(double) * (size_t)n * d_out);
        double *mag = malloc(sizeof(double) * (size_t)n * d_out);
        for (int i = 0; i < n * d_in; i++)
            in[i] = frand(&seed);
        for (int i = 0; i < d_out * d_in; i++)
            w[i] = frand(&seed);
        for (int i = 0; i < n * d_out; i++)
            out[i] = out0[i] = frand(&seed);
        reference(ref, mag, in, w, acc ? out0 : NULL, n, d_in, d_out);
        sq_cpu_matmul(trial % 3 ? &pool : NULL, out, in, w, n, d_in, d_out, acc);
        for (int i = 0; i < n * d_out; i++)
            cr_assert(fabs(out[i] - ref[i]) <= 4e-7 * (d_in + 2) * mag[i] + 1e-30,
                      "n %d d_in %d d_out %d acc %d: element %d is %.9g, reference %.9g", n, d_in,
                      d_out, acc, i, out[i], ref[i]);
        free(in), free(w), free(out), free(out0), free(ref), free(mag);
    }
    sq_pool_stop(&pool);
}

Test(cpu_matmul, column_range_writes_only_its_columns)
{
    unsigned seed = 11;
    const int n = 5, d_in = 37, d_out = 23;
    float in[5 * 37], w[23 * 37], out[5 * 23];
    for (int i = 0; i < n * d_in; i++)
        in[i] = frand(&seed);
    for (int i = 0; i < d_out * d_in; i++)
        w[i] = frand(&seed);
    for (int o0 = 0; o0 < d_out; o0 += 3)
        for (int o1 = o0; o1 <= d_out; o1 += 5) {
            for (int i = 0; i < n * d_out; i++)
                out[i] = NAN;
            sq_cpu_matmul_skinny(out, in, w, n, d_in, d_out, 0, o0, o1);
            for (int i = 0; i < n; i++)
                for (int o = 0; o < d_out; o++)
                    cr_assert_eq(isnan(out[i * d_out + o]), !(o >= o0 && o < o1),
                                 "range [%d, %d): column %d of row %d", o0, o1, o, i);
        }
}

Test(cpu_matmul, threads_give_bitwise_the_same_product)
{
    unsigned seed = 3;
    const int d_in = 200, d_out = 301;
    float *in = malloc(sizeof(float) * SQ_CPU_SKINNY_MAX * d_in);
    float *w = malloc(sizeof(float) * d_out * d_in);
    float *a = malloc(sizeof(float) * SQ_CPU_SKINNY_MAX * d_out);
    float *b = malloc(sizeof(float) * SQ_CPU_SKINNY_MAX * d_out);
    for (int i = 0; i < SQ_CPU_SKINNY_MAX * d_in; i++)
        in[i] = frand(&seed);
    for (int i = 0; i < d_out * d_in; i++)
        w[i] = frand(&seed);
    for (int threads = 1; threads <= 4; threads++) {
        sq_pool pool;
        cr_assert_eq(sq_pool_start(&pool, threads), 0);
        for (int n = 1; n <= SQ_CPU_SKINNY_MAX; n++) {
            sq_cpu_matmul(NULL, a, in, w, n, d_in, d_out, 0);
            sq_cpu_matmul(&pool, b, in, w, n, d_in, d_out, 0);
            cr_assert(memcmp(a, b, sizeof(float) * (size_t)n * d_out) == 0,
                      "%d threads, n %d: differs from one thread", threads, n);
        }
        sq_pool_stop(&pool);
    }
    free(in), free(w), free(a), free(b);
}

typedef struct count_job {
    atomic_int hits[8];
    atomic_int wrong_n;
} count_job;

static void count_worker(void *arg, int worker, int n_workers)
{
    count_job *j = arg;
    atomic_fetch_add(&j->hits[worker], 1);
    if (n_workers < 1 || worker >= n_workers)
        atomic_fetch_add(&j->wrong_n, 1);
}

Test(cpu_pool, every_worker_runs_once_per_dispatch)
{
    for (int threads = 1; threads <= 4; threads++) {
        sq_pool pool;
        cr_assert_eq(sq_pool_start(&pool, threads), 0);
        count_job j;
        for (int k = 0; k < 8; k++)
            atomic_init(&j.hits[k], 0);
        atomic_init(&j.wrong_n, 0);
        const int rounds = 1000;
        for (int r = 0; r < rounds; r++)
            sq_pool_run(&pool, count_worker, &j);
        sq_pool_stop(&pool);
        for (int k = 0; k < threads; k++)
            cr_assert_eq(atomic_load(&j.hits[k]), rounds, "%d threads: worker %d ran %d times",
                         threads, k, atomic_load(&j.hits[k]));
        for (int k = threads; k < 8; k++)
            cr_assert_eq(atomic_load(&j.hits[k]), 0);
        cr_assert_eq(atomic_load(&j.wrong_n), 0);
    }
}

Test(cpu_matmul, blas_setup_leaves_no_prescott_fallback)
{
    const char *bin = getenv("SQ_BLAS_CORE_BIN");
    cr_assert(bin, "SQ_BLAS_CORE_BIN is not set");
    char *out = NULL;
    unsetenv("OPENBLAS_CORETYPE");
    char *argv[] = {(char *)bin, NULL};
    cr_assert_eq(tu_run(argv, &out, NULL), 0);
    char core[64] = "", env[64] = "";
    cr_assert_eq(sscanf(out, "%63s %63s", core, env), 2, "printed: %s", out);
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        cr_assert_str_neq(core, "Prescott", "OpenBLAS still runs its Prescott kernels");
    if (strcmp(env, "-") != 0)   /* re-executed: the variable names what OpenBLAS now uses */
        cr_assert_str_eq(core, env);
    free(out);
    /* a user's choice stays */
    setenv("OPENBLAS_CORETYPE", "Haswell", 1);
    cr_assert_eq(tu_run(argv, &out, NULL), 0);
    cr_assert_str_eq(out, "Haswell Haswell\n");
    free(out);
    unsetenv("OPENBLAS_CORETYPE");
}

typedef struct two_callers {
    sq_pool  *pool;
    count_job job;
} two_callers;

static void *caller_main(void *arg)
{
    two_callers *t = arg;
    for (int r = 0; r < 500; r++)
        sq_pool_run(t->pool, count_worker, &t->job);
    return NULL;
}

Test(cpu_pool, shared_pools_are_one_per_thread_count_and_take_turns)
{
    sq_pool *a = sq_pool_shared_acquire(2), *b = sq_pool_shared_acquire(2);
    sq_pool *c = sq_pool_shared_acquire(3);
    cr_assert(a && b && c);
    cr_assert_eq(a, b, "two users of 2 threads share one pool");
    cr_assert_neq(a, c);
    /* two threads dispatching on the same pool at once: each dispatch runs whole */
    two_callers t[2];
    pthread_t tid[2];
    for (int i = 0; i < 2; i++) {
        t[i].pool = a;
        for (int k = 0; k < 8; k++)
            atomic_init(&t[i].job.hits[k], 0);
        atomic_init(&t[i].job.wrong_n, 0);
        cr_assert_eq(pthread_create(&tid[i], NULL, caller_main, &t[i]), 0);
    }
    for (int i = 0; i < 2; i++)
        pthread_join(tid[i], NULL);
    for (int i = 0; i < 2; i++)
        for (int k = 0; k < 2; k++)
            cr_assert_eq(atomic_load(&t[i].job.hits[k]), 500, "caller %d, worker %d", i, k);
    sq_pool_shared_release(b);
    sq_pool_shared_release(c);
    sq_pool *d = sq_pool_shared_acquire(2);
    cr_assert_eq(d, a, "still shared while a user holds it");
    sq_pool_shared_release(d);
    sq_pool_shared_release(a);
}

/* ---- 16-bit weights ------------------------------------------------------------------------ */

static const sq_cpu_isa isas[] = {SQ_CPU_ISA_SCALAR, SQ_CPU_ISA_AVX2, SQ_CPU_ISA_AVX512};

static float widen1(uint16_t h, sq_weight_dtype dt)
{
    return dt == SQ_DTYPE_BF16 ? sq_bf16_to_f32(h) : sq_f16_to_f32(h);
}

Test(cpu_matmul, widening_equals_the_codec_for_every_pattern_on_every_isa)
{
    uint16_t *h = malloc(65536 * sizeof *h);
    float *f = malloc(65537 * sizeof *f);
    for (int i = 0; i < 65536; i++)
        h[i] = (uint16_t)i;
    int ran = 0;
    for (size_t k = 0; k < sizeof isas / sizeof *isas; k++) {
        if (!sq_cpu_isa_supported(isas[k]))
            continue;
        cr_assert_eq(sq_cpu_isa_set(isas[k]), 0);
        cr_assert_eq(sq_cpu_isa_get(), isas[k]);
        ran++;
        const sq_weight_dtype dts[2] = {SQ_DTYPE_BF16, SQ_DTYPE_F16};
        for (int d = 0; d < 2; d++) {
            /* 65535 values from an odd start: the vector body and the scalar tail */
            sq_cpu_widen(f, h + 1, dts[d], 65535);
            for (int i = 1; i < 65536; i++) {
                float want = widen1((uint16_t)i, dts[d]);
                if (isnan(want))   /* F16C quietens a signalling NaN; a NaN stays a NaN */
                    cr_assert(isnan(f[i - 1]), "%s %s: 0x%04x", sq_cpu_isa_name(isas[k]),
                              d ? "f16" : "bf16", i);
                else
                    cr_assert(memcmp(&f[i - 1], &want, sizeof want) == 0,
                              "%s %s: 0x%04x gives %a, not %a", sq_cpu_isa_name(isas[k]),
                              d ? "f16" : "bf16", i, f[i - 1], want);
            }
        }
    }
    cr_assert_geq(ran, 1);
    sq_cpu_isa_set(SQ_CPU_ISA_AUTO);
    free(h), free(f);
}

Test(cpu_matmul, sixteen_bit_products_equal_float32_on_every_isa_and_row_count)
{
    static const int ins[] = {1, 15, 16, 17, 33, 64, 100, 131, 257};
    static const int outs[] = {1, 3, 4, 7, 37, 69};
    const sq_weight_dtype dts[2] = {SQ_DTYPE_BF16, SQ_DTYPE_F16};
    unsigned seed = 24;
    sq_pool pool;
    cr_assert_eq(sq_pool_start(&pool, 3), 0);
    for (size_t k = 0; k < sizeof isas / sizeof *isas; k++) {
        if (!sq_cpu_isa_supported(isas[k]))
            continue;
        cr_assert_eq(sq_cpu_isa_set(isas[k]), 0);
        for (int d = 0; d < 2; d++)
            for (int n = 1; n <= 64; n++) {
                const int d_in = ins[(n * 7 + d) % 9], d_out = outs[(n * 5 + (int)k) % 6];
                const int acc = n % 2;
                const size_t nw = (size_t)d_out * d_in;
                uint16_t *w16 = malloc(nw * sizeof *w16);
                float *w32 = malloc(nw * sizeof *w32);
                float *in = malloc(sizeof(float) * (size_t)n * d_in);
                float *out = malloc(sizeof(float) * (size_t)n * d_out);
                float *out0 = malloc(sizeof(float) * (size_t)n * d_out);
                float *sk32 = malloc(sizeof(float) * (size_t)n * d_out);
                double *ref = malloc(sizeof(double) * (size_t)n * d_out);
                double *mag = malloc(sizeof(double) * (size_t)n * d_out);
                for (size_t i = 0; i < nw; i++) {
                    float v = frand(&seed);
                    w16[i] = dts[d] == SQ_DTYPE_BF16 ? sq_f32_to_bf16(v) : sq_f32_to_f16(v);
                    w32[i] = widen1(w16[i], dts[d]);
                }
                for (int i = 0; i < n * d_in; i++)
                    in[i] = frand(&seed);
                for (int i = 0; i < n * d_out; i++)
                    out[i] = out0[i] = frand(&seed);
                reference(ref, mag, in, w32, acc ? out0 : NULL, n, d_in, d_out);
                sq_cpu_matmul_typed(n % 3 ? &pool : NULL, out, in, w16, dts[d], n, d_in, d_out,
                                    acc);
                for (int i = 0; i < n * d_out; i++)
                    cr_assert(fabs(out[i] - ref[i]) <= 4e-7 * (d_in + 2) * mag[i] + 1e-30,
                              "%s %s n %d d_in %d d_out %d acc %d: element %d is %.9g, "
                              "reference %.9g", sq_cpu_isa_name(isas[k]), d ? "f16" : "bf16", n,
                              d_in, d_out, acc, i, out[i], ref[i]);
                if (n <= SQ_CPU_SKINNY_MAX) {
                    /* the skinny kernel: bitwise its float32 result on the widened copy */
                    sq_cpu_matmul_skinny_typed(out, in, w16, dts[d], n, d_in, d_out, 0, 0,
                                               d_out);
                    sq_cpu_matmul_skinny(sk32, in, w32, n, d_in, d_out, 0, 0, d_out);
                    cr_assert(memcmp(out, sk32, sizeof(float) * (size_t)n * d_out) == 0,
                              "%s %s n %d d_in %d d_out %d: skinny differs from float32",
                              sq_cpu_isa_name(isas[k]), d ? "f16" : "bf16", n, d_in, d_out);
                }
                free(w16), free(w32), free(in), free(out), free(out0), free(sk32), free(ref),
                    free(mag);
            }
    }
    sq_cpu_isa_set(SQ_CPU_ISA_AUTO);
    sq_pool_stop(&pool);
}

Test(cpu_matmul, blas_path_panels_cover_wide_matrices)
{
    /* d_out past one panel (2^18 floats / d_in rows) and not a multiple of it: 1100 x 300 bf16
     * with 40 rows takes five panels per thread-free call */
    const int n = 40, d_in = 300, d_out = 1100;
    unsigned seed = 5;
    uint16_t *w16 = malloc(sizeof(uint16_t) * d_out * d_in);
    float *w32 = malloc(sizeof(float) * d_out * d_in);
    float *in = malloc(sizeof(float) * n * d_in);
    float *a = malloc(sizeof(float) * n * d_out), *b = malloc(sizeof(float) * n * d_out);
    for (int i = 0; i < d_out * d_in; i++) {
        w16[i] = sq_f32_to_bf16(frand(&seed));
        w32[i] = sq_bf16_to_f32(w16[i]);
    }
    for (int i = 0; i < n * d_in; i++)
        in[i] = frand(&seed);
    sq_cpu_matmul_typed(NULL, a, in, w16, SQ_DTYPE_BF16, n, d_in, d_out, 0);
    sq_cpu_matmul(NULL, b, in, w32, n, d_in, d_out, 0);
    for (int i = 0; i < n * d_out; i++)
        cr_assert(fabs(a[i] - b[i]) <= 1e-5f * (1.0f + fabsf(b[i])), "element %d: %g vs %g", i,
                  a[i], b[i]);
    free(w16), free(w32), free(in), free(a), free(b);
}

Test(cpu_matmul, isa_forcing_refuses_what_the_cpu_lacks_and_reads_the_environment)
{
    cr_assert_eq(sq_cpu_isa_set((sq_cpu_isa)9), -1);
    cr_assert_eq(sq_cpu_isa_set(SQ_CPU_ISA_SCALAR), 0);
    cr_assert_eq(sq_cpu_isa_get(), SQ_CPU_ISA_SCALAR);
    cr_assert_eq(sq_cpu_isa_set(SQ_CPU_ISA_AUTO), 0);
    cr_assert_neq(sq_cpu_isa_get(), SQ_CPU_ISA_AUTO);
    for (size_t k = 0; k < sizeof isas / sizeof *isas; k++)
        if (!sq_cpu_isa_supported(isas[k]))
            cr_assert_eq(sq_cpu_isa_set(isas[k]), -1, "%s", sq_cpu_isa_name(isas[k]));
    cr_assert_str_eq(sq_cpu_isa_name(SQ_CPU_ISA_AVX512), "avx512");
}

Test(cpu_matmul, sq_cpu_isa_environment_variable_picks_the_path)
{
    /* each criterion test runs in its own process: nothing has settled the path yet */
    setenv("SQ_CPU_ISA", "scalar", 1);
    cr_assert_eq(sq_cpu_isa_get(), SQ_CPU_ISA_SCALAR);
    unsetenv("SQ_CPU_ISA");
}

/* ---- the pool on a shared machine (issue 27) ------------------------------------------------ */

/* The products of several row counts (skinny and BLAS), the same bits with any thread count. */
static void products(sq_pool *pool, float *out, const float *in, const float *w, int d_in,
                     int d_out)
{
    static const int ns[] = {1, 3, 5, 16, 17, 40, 64};
    size_t off = 0;
    for (size_t k = 0; k < sizeof ns / sizeof *ns; k++) {
        sq_cpu_matmul(pool, out + off, in, w, ns[k], d_in, d_out, 0);
        off += (size_t)ns[k] * d_out;
    }
}

#define PROD_FLOATS(d_out) ((size_t)(1 + 3 + 5 + 16 + 17 + 40 + 64) * (d_out))

/* The logits of a one-token and a 7-token forward of a small random model on `threads`. */
static void forward_logits(int threads, float *logits)
{
    sq_model_config c = tu_llama_config((tu_shape){.dim = 128, .hidden_dim = 352, .n_layers = 2,
                                           .n_heads = 4, .n_kv_heads = 2, .head_dim = 32,
                                           .vocab_size = 101, .max_position = 512});
    sq_model *m;
    sq_error err = {0};
    cr_assert_eq(sq_model_new_random(&c, 5, &m, &err), 0, "%s", err.msg);
    sq_context_params cp = sq_context_default_params();
    cp.max_context = 64;
    cp.max_pending = 16;
    cp.threads = threads;
    sq_context *ctx;
    cr_assert_eq(sq_context_new(m, &cp, &ctx, &err), 0, "%s", err.msg);
    int32_t tok[7] = {3, 14, 15, 92, 65, 35, 89}, pos[7], keep[7];
    uint8_t mask[49] = {0};
    for (int i = 0; i < 7; i++) {
        pos[i] = keep[i] = i;
        for (int j = 0; j <= i; j++)
            mask[i * 7 + j] = 1;
    }
    cr_assert_eq(sq_context_forward(ctx, tok, pos, mask, 7, logits, &err), 0, "%s", err.msg);
    cr_assert_eq(sq_context_commit(ctx, keep, 7, &err), 0, "%s", err.msg);
    int32_t t = 7, p = 7;
    uint8_t one = 1;
    cr_assert_eq(sq_context_forward(ctx, &t, &p, &one, 1, logits + 7 * 101, &err), 0, "%s",
                 err.msg);
    sq_context_free(ctx);
    sq_model_free(m);
}

Test(cpu_pool, results_are_identical_with_1_2_and_7_threads)
{
    unsigned seed = 27;
    const int d_in = 257, d_out = 333;
    float *in = malloc(sizeof(float) * 64 * d_in), *w = malloc(sizeof(float) * d_out * d_in);
    float *a = malloc(sizeof(float) * PROD_FLOATS(d_out));
    float *b = malloc(sizeof(float) * PROD_FLOATS(d_out));
    for (int i = 0; i < 64 * d_in; i++)
        in[i] = frand(&seed);
    for (int i = 0; i < d_out * d_in; i++)
        w[i] = frand(&seed);
    products(NULL, a, in, w, d_in, d_out);
    float *la = malloc(sizeof(float) * 8 * 101), *lb = malloc(sizeof(float) * 8 * 101);
    forward_logits(1, la);
    const int threads[] = {1, 2, 7};
    for (int k = 0; k < 3; k++) {
        sq_pool pool;
        cr_assert_eq(sq_pool_start(&pool, threads[k]), 0);
        for (int rep = 0; rep < 20; rep++) {
            products(&pool, b, in, w, d_in, d_out);
            /* the BLAS path (more rows than the skinny kernel takes) splits the columns at other
             * places: equal within float32 rounding there, bitwise for the skinny kernel */
            size_t off = 0;
            static const int ns[] = {1, 3, 5, 16, 17, 40, 64};
            for (size_t q = 0; q < sizeof ns / sizeof *ns; q++) {
                size_t len = (size_t)ns[q] * d_out;
                if (ns[q] <= sq_cpu_skinny_rows(SQ_DTYPE_F32))
                    cr_assert(memcmp(a + off, b + off, sizeof(float) * len) == 0,
                              "%d threads, %d rows: differs from one thread", threads[k], ns[q]);
                else
                    for (size_t i = 0; i < len; i++)
                        cr_assert(fabsf(a[off + i] - b[off + i]) <= 1e-4f * (1 + fabsf(a[off + i])),
                                  "%d threads, %d rows, element %zu", threads[k], ns[q], i);
                off += len;
            }
        }
        sq_pool_stop(&pool);
        forward_logits(threads[k], lb);
        cr_assert(memcmp(la, lb, sizeof(float) * 8 * 101) == 0,
                  "forward on %d threads: logits differ from one thread", threads[k]);
    }
    free(in), free(w), free(a), free(b), free(la), free(lb);
}

Test(cpu_pool, the_caller_finishes_the_work_of_workers_that_do_not_run)
{
    /* workers that sleep 300 ms after they wake (a worker the kernel does not schedule): every
     * dispatch still runs each part exactly once, returns long before they wake, and gives the
     * same products */
    unsigned seed = 31;
    const int d_in = 200, d_out = 301;
    float *in = malloc(sizeof(float) * 64 * d_in), *w = malloc(sizeof(float) * d_out * d_in);
    float *a = malloc(sizeof(float) * PROD_FLOATS(d_out));
    float *b = malloc(sizeof(float) * PROD_FLOATS(d_out));
    for (int i = 0; i < 64 * d_in; i++)
        in[i] = frand(&seed);
    for (int i = 0; i < d_out * d_in; i++)
        w[i] = frand(&seed);
    sq_pool one;
    cr_assert_eq(sq_pool_start(&one, 1), 0);
    products(&one, a, in, w, d_in, d_out);
    sq_pool_stop(&one);
    for (int threads = 2; threads <= 7; threads += 5) {
        sq_pool pool;
        cr_assert_eq(sq_pool_start(&pool, threads), 0);
        sq_pool_test_delay(&pool, 300000);
        count_job j;
        for (int k = 0; k < 8; k++)
            atomic_init(&j.hits[k], 0);
        atomic_init(&j.wrong_n, 0);
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        const int rounds = 200;
        for (int r = 0; r < rounds; r++)
            sq_pool_run(&pool, count_worker, &j);
        products(&pool, b, in, w, d_in, d_out);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        double s = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
        cr_assert_lt(s, 0.25, "%d threads: %d dispatches took %.3f s with sleeping workers",
                     threads, rounds, s);
        for (int k = 0; k < threads; k++)
            cr_assert_eq(atomic_load(&j.hits[k]), rounds, "%d threads: part %d ran %d times",
                         threads, k, atomic_load(&j.hits[k]));
        cr_assert_eq(atomic_load(&j.wrong_n), 0);
        cr_assert_geq(pool.misses, 1, "the dispatches the workers missed are counted");
        size_t off = 0;
        static const int ns[] = {1, 3, 5, 16, 17, 40, 64};
        for (size_t q = 0; q < sizeof ns / sizeof *ns; q++) {
            size_t len = (size_t)ns[q] * d_out;
            for (size_t i = 0; i < len; i++)
                cr_assert(fabsf(a[off + i] - b[off + i]) <= 1e-4f * (1 + fabsf(a[off + i])),
                          "%d threads, %d rows, element %zu", threads, ns[q], i);
            off += len;
        }
        /* the workers, awake again, find no part of a later dispatch by mistake */
        sq_pool_test_delay(&pool, 0);
        usleep(350000);
        for (int k = 0; k < 8; k++)
            atomic_init(&j.hits[k], 0);
        for (int r = 0; r < 5000; r++)
            sq_pool_run(&pool, count_worker, &j);
        for (int k = 0; k < threads; k++)
            cr_assert_eq(atomic_load(&j.hits[k]), 5000, "%d threads: part %d ran %d times",
                         threads, k, atomic_load(&j.hits[k]));
        sq_pool_stop(&pool);
    }
    free(in), free(w), free(a), free(b);
}

static void slow_part(void *arg, int part, int parts)
{
    (void)parts;
    atomic_int *hits = arg;
    struct timespec ts = {0, 200000};   /* 0.2 ms */
    nanosleep(&ts, NULL);
    atomic_fetch_add(&hits[part], 1);
}

Test(cpu_pool, more_parts_than_threads_each_run_once)
{
    sq_pool pool;
    cr_assert_eq(sq_pool_start(&pool, 3), 0);
    atomic_int hits[37];
    for (int k = 0; k < 37; k++)
        atomic_init(&hits[k], 0);
    for (int r = 0; r < 20; r++)
        sq_pool_run_parts(&pool, slow_part, hits, 37);
    for (int k = 0; k < 37; k++)
        cr_assert_eq(atomic_load(&hits[k]), 20, "part %d ran %d times", k,
                     atomic_load(&hits[k]));
    sq_pool_stop(&pool);
}

Test(cpu_matmul, every_path_and_row_count_equals_the_double_reference)
{
    /* float32 weights, each path this CPU has forced, n = 1 .. 64, odd widths and heights:
     * the product the runtime calls (skinny kernel or BLAS by the path's threshold) and the
     * skinny kernel alone, on whole and partial column ranges */
    static const int ins[] = {1, 7, 15, 17, 33, 63, 129, 255};
    static const int outs[] = {1, 3, 5, 7, 13, 37, 69};
    unsigned seed = 64;
    sq_pool pool;
    cr_assert_eq(sq_pool_start(&pool, 2), 0);
    int ran = 0;
    for (size_t k = 0; k < sizeof isas / sizeof *isas; k++) {
        if (!sq_cpu_isa_supported(isas[k]))
            continue;
        cr_assert_eq(sq_cpu_isa_set(isas[k]), 0);
        ran++;
        for (int n = 1; n <= 64; n++)
            for (int v = 0; v < 2; v++) {
                const int d_in = ins[(n * 3 + v * 5 + (int)k) % 8];
                const int d_out = outs[(n * 5 + v + (int)k) % 7];
                const int acc = (n + v) % 2;
                float *in = malloc(sizeof(float) * (size_t)n * d_in);
                float *w = malloc(sizeof(float) * (size_t)d_out * d_in);
                float *out = malloc(sizeof(float) * (size_t)n * d_out);
                float *out0 = malloc(sizeof(float) * (size_t)n * d_out);
                double *ref = malloc(sizeof(double) * (size_t)n * d_out);
                double *mag = malloc(sizeof(double) * (size_t)n * d_out);
                for (int i = 0; i < n * d_in; i++)
                    in[i] = frand(&seed);
                for (int i = 0; i < d_out * d_in; i++)
                    w[i] = frand(&seed);
                for (int i = 0; i < n * d_out; i++)
                    out0[i] = frand(&seed);
                reference(ref, mag, in, w, acc ? out0 : NULL, n, d_in, d_out);
                for (int how = 0; how < 3; how++) {
                    memcpy(out, out0, sizeof(float) * (size_t)n * d_out);
                    if (how == 0) {
                        sq_cpu_matmul(v ? &pool : NULL, out, in, w, n, d_in, d_out, acc);
                    } else if (how == 1) {
                        sq_cpu_matmul_skinny(out, in, w, n, d_in, d_out, acc, 0, d_out);
                    } else {   /* two column ranges split at an odd place */
                        int mid = d_out / 2 | 1;
                        if (mid > d_out)
                            mid = d_out;
                        sq_cpu_matmul_skinny(out, in, w, n, d_in, d_out, acc, 0, mid);
                        sq_cpu_matmul_skinny(out, in, w, n, d_in, d_out, acc, mid, d_out);
                    }
                    for (int i = 0; i < n * d_out; i++)
                        cr_assert(fabs(out[i] - ref[i]) <= 4e-7 * (d_in + 2) * mag[i] + 1e-30,
                                  "%s n %d d_in %d d_out %d acc %d (%s): element %d is %.9g, "
                                  "reference %.9g", sq_cpu_isa_name(isas[k]), n, d_in, d_out,
                                  acc, how == 0 ? "product" : "skinny", i, out[i], ref[i]);
                }
                free(in), free(w), free(out), free(out0), free(ref), free(mag);
            }
    }
    cr_assert_geq(ran, 1);
    sq_cpu_isa_set(SQ_CPU_ISA_AUTO);
    sq_pool_stop(&pool);
}

/* The sum of one element in the order runtime/cpu_matmul.h documents for a path of vl lanes:
 * vl interleaved partial sums over the first d_in & ~(vl - 1) terms (fused multiply-adds where
 * the path has FMA), added as a tree of halves (16 -> 8 -> 4 -> 2 -> 1), then the remaining
 * terms one at a time. */
static float ordered_dot(const float *x, const float *w, int d_in, int vl, int fused)
{
    float p[16] = {0};
    const int kv = d_in & ~(vl - 1);
    for (int k = 0; k < kv; k++)
        p[k % vl] = fused ? fmaf(w[k], x[k], p[k % vl]) : p[k % vl] + w[k] * x[k];
    for (int h = vl / 2; h >= 1; h /= 2)
        for (int t = 0; t < h; t++)
            p[t] = p[t] + p[t + h];
    float s = p[0];
    for (int k = kv; k < d_in; k++)
        s += w[k] * x[k];
    return s;
}

Test(cpu_matmul, every_block_sums_in_the_documented_order_bitwise)
{
    /* each path forced; every row count whose block is its own (1 .. 12: the blocks chosen per
     * row count, the main block and its partial blocks) and a few above; widths below, at and
     * above multiples of the vector, heights that leave columns for the blocks of 4 and of 1;
     * with and without accumulation, whole and split column ranges: every element is bitwise
     * the documented order's, whichever block computed it (the batched reduction of a block's
     * accumulators gives each the horizontal sum's adds) */
    static const int ins[] = {1, 4, 15, 16, 17, 33, 64, 100, 255, 256, 257};
    static const int outs[] = {1, 5, 7, 12, 13, 37};
    static const int ns[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 17, 24, 33, 64};
    unsigned seed = 99;
    int ran = 0;
    for (size_t k = 0; k < sizeof isas / sizeof *isas; k++) {
        if (!sq_cpu_isa_supported(isas[k]))
            continue;
        cr_assert_eq(sq_cpu_isa_set(isas[k]), 0);
        ran++;
        const int vl = isas[k] == SQ_CPU_ISA_AVX512 ? 16 : isas[k] == SQ_CPU_ISA_AVX2 ? 8 : 4;
        const int fused = isas[k] != SQ_CPU_ISA_SCALAR;
        for (size_t q = 0; q < sizeof ns / sizeof *ns; q++)
            for (int v = 0; v < 4; v++) {
                const int n = ns[q];
                const int d_in = ins[(q * 3 + (size_t)v * 5 + k) % 11];
                const int d_out = outs[(q + (size_t)v * 2 + k) % 6];
                const int acc = v % 2;
                float *in = malloc(sizeof(float) * (size_t)n * d_in);
                float *w = malloc(sizeof(float) * (size_t)d_out * d_in);
                float *out = malloc(sizeof(float) * (size_t)n * d_out);
                float *out0 = malloc(sizeof(float) * (size_t)n * d_out);
                for (int i = 0; i < n * d_in; i++)
                    in[i] = frand(&seed);
                for (int i = 0; i < d_out * d_in; i++)
                    w[i] = frand(&seed);
                for (int i = 0; i < n * d_out; i++)
                    out[i] = out0[i] = frand(&seed);
                if (v < 2) {
                    sq_cpu_matmul_skinny(out, in, w, n, d_in, d_out, acc, 0, d_out);
                } else {
                    int mid = d_out / 3 | 1;
                    if (mid > d_out)
                        mid = d_out;
                    sq_cpu_matmul_skinny(out, in, w, n, d_in, d_out, acc, 0, mid);
                    sq_cpu_matmul_skinny(out, in, w, n, d_in, d_out, acc, mid, d_out);
                }
                for (int i = 0; i < n; i++)
                    for (int o = 0; o < d_out; o++) {
                        float s = ordered_dot(in + (size_t)i * d_in, w + (size_t)o * d_in, d_in,
                                              vl, fused);
                        float want = acc ? out0[(size_t)i * d_out + o] + s : s;
                        float got = out[(size_t)i * d_out + o];
                        cr_assert(memcmp(&got, &want, sizeof got) == 0,
                                  "%s n %d d_in %d d_out %d acc %d split %d: row %d column %d "
                                  "is %a, the documented order gives %a",
                                  sq_cpu_isa_name(isas[k]), n, d_in, d_out, acc, v >= 2, i, o,
                                  got, want);
                    }
                free(in), free(w), free(out), free(out0);
            }
    }
    cr_assert_geq(ran, 1);
    sq_cpu_isa_set(SQ_CPU_ISA_AUTO);
}

Test(cpu_matmul, wide_matrices_hand_over_where_measured_and_stay_exact)
{
    /* the threshold of a matrix of d_in columns: the path's own up to d_in 1024, never above it
     * and never below SQ_CPU_SKINNY_MAX for wider ones; around that threshold the product of a
     * wide matrix (whichever of the skinny kernel and OpenBLAS runs) equals the double reference,
     * and the kernel's aligned copy of misaligned input rows changes nothing: bitwise the product
     * of the same rows at an aligned address */
    const sq_weight_dtype dts[] = {SQ_DTYPE_F32, SQ_DTYPE_BF16, SQ_DTYPE_F16};
    const int d_in = 1040, d_out = 21;
    unsigned seed = 1040;
    float *in = malloc(sizeof(float) * 48 * d_in + 64);
    float *inb = aligned_alloc(64, sizeof(float) * 48 * d_in + 64);
    float *w = malloc(sizeof(float) * (size_t)d_out * d_in);
    float *out = malloc(sizeof(float) * 48 * d_out), *outb = malloc(sizeof(float) * 48 * d_out);
    double *ref = malloc(sizeof(double) * 48 * d_out), *mag = malloc(sizeof(double) * 48 * d_out);
    cr_assert(in && inb && w && out && outb && ref && mag);
    float *x = in + 1;   /* 4 bytes past malloc's alignment: never on a 32- or 64-byte boundary */
    if (((uintptr_t)x & 31) == 0)
        x++;
    for (int i = 0; i < 48 * d_in; i++)
        inb[i] = x[i] = frand(&seed);
    for (int i = 0; i < d_out * d_in; i++)
        w[i] = frand(&seed);
    int ran = 0;
    for (size_t k = 0; k < sizeof isas / sizeof *isas; k++) {
        if (!sq_cpu_isa_supported(isas[k]))
            continue;
        cr_assert_eq(sq_cpu_isa_set(isas[k]), 0);
        ran++;
        for (size_t q = 0; q < 3; q++) {
            const int all = sq_cpu_skinny_rows(dts[q]);
            cr_assert_eq(sq_cpu_skinny_rows_for(dts[q], 512), all);
            cr_assert_eq(sq_cpu_skinny_rows_for(dts[q], 1024), all);
            const int wide = sq_cpu_skinny_rows_for(dts[q], d_in);
            cr_assert(wide <= all && wide >= SQ_CPU_SKINNY_MAX, "%s: %d rows for d_in %d",
                      sq_cpu_isa_name(isas[k]), wide, d_in);
        }
        const int t = sq_cpu_skinny_rows_for(SQ_DTYPE_F32, d_in);
        const int ns[] = {1, 4, 8, t, t + 1, 48};
        for (size_t q = 0; q < sizeof ns / sizeof *ns; q++) {
            const int n = ns[q] < 48 ? ns[q] : 48;
            reference(ref, mag, x, w, NULL, n, d_in, d_out);
            sq_cpu_matmul(NULL, out, x, w, n, d_in, d_out, 0);
            for (int i = 0; i < n * d_out; i++)
                cr_assert(fabs(out[i] - ref[i]) <= 4e-7 * (d_in + 2) * mag[i] + 1e-30,
                          "%s n %d: element %d is %.9g, reference %.9g",
                          sq_cpu_isa_name(isas[k]), n, i, out[i], ref[i]);
            sq_cpu_matmul_skinny(out, x, w, n, d_in, d_out, 0, 0, d_out);
            sq_cpu_matmul_skinny(outb, inb, w, n, d_in, d_out, 0, 0, d_out);
            cr_assert(memcmp(out, outb, sizeof(float) * (size_t)n * d_out) == 0,
                      "%s n %d: misaligned input rows give another result",
                      sq_cpu_isa_name(isas[k]), n);
        }
    }
    cr_assert_geq(ran, 1);
    sq_cpu_isa_set(SQ_CPU_ISA_AUTO);
    free(in), free(inb), free(w), free(out), free(outb), free(ref), free(mag);
}
