/* The CUDA backend against the CPU backend on tiny random Llama models, and the device sampling
 * kernels against libsequoia/verify/verify.c. Every test needs a CUDA device: without one (a build
 * without the backend, no driver, no GPU) each test reports itself SKIPPED, never passed.
 * The arithmetic these kernels run per element is tested on the CPU by the 'kernels' suite. */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "libsequoia/format/curve.h"
#include "libsequoia/format/plan.h"
#include "libsequoia/format/tree.h"
#include "tests/cuda-emu/sharp.h"
#include "runtime/cuda_sample.h"
#include "runtime/kernels.h"
#include "runtime/model.h"
#include "runtime/specdec.h"
#include "libsequoia/verify/verify.h"
#include "tests/llama_config.h"

#define V 97

static void need_device(void)
{
    sq_error err = {0};
    if (sq_cuda_device_count(&err) < 1)
        cr_skip_test("no CUDA device (%s)", err.msg);
}

static sq_model *tiny_model(uint64_t seed, int layers)
{
    sq_model_config c = tu_llama_config((tu_shape){.dim = 64, .hidden_dim = 160,
                                           .n_layers = layers, .n_heads = 4, .n_kv_heads = 2,
                                           .head_dim = 16, .vocab_size = V, .max_position = 512});
    sq_model *m;
    sq_error err = {0};
    cr_assert_eq(sq_model_new_random(&c, seed, &m, &err), 0, "%s", err.msg);
    sq_test_sharpen(m);
    return m;
}

typedef struct backend_case {
    sq_backend_kind backend;
    sq_weight_dtype dtype;
    int             offload;
    double          tol;      /* max |logit diff| against the CPU, relative to max |logit|:
                                 1e-2 for f16 and 3e-2 for bf16 weights (correct kernels stay
                                 under 3e-3 on sharp attention; each seeded attention bug
                                 exceeds them) */
    char            label[24];   /* in the struct: criterion copies parameters into a
                                    re-executed child, where a pointer to a literal dangles */
} backend_case;

static sq_context *new_ctx(const sq_model *m, const backend_case *bc, int max_context,
                           int max_pending)
{
    sq_context_params p = sq_context_default_params();
    p.backend = bc->backend;
    p.dtype = bc->dtype;
    p.offload = bc->offload;
    p.max_context = max_context;
    p.max_pending = max_pending;
    p.threads = 1;
    sq_context *ctx;
    sq_error err = {0};
    cr_assert_eq(sq_context_new(m, &p, &ctx, &err), 0, "%s: %s", bc->label, err.msg);
    return ctx;
}

/* Causal forward of n tokens at positions 0..n-1 as pending tokens; logits (n, V). */
static void causal(sq_context *ctx, const int32_t *tok, int n, float *logits)
{
    int32_t *pos = malloc((size_t)n * sizeof *pos);
    uint8_t *mask = calloc((size_t)n * n, 1);
    for (int i = 0; i < n; i++) {
        pos[i] = i;
        for (int j = 0; j <= i; j++)
            mask[i * n + j] = 1;
    }
    sq_error err = {0};
    cr_assert_eq(sq_context_forward(ctx, tok, pos, mask, n, logits, &err), 0, "%s", err.msg);
    free(pos);
    free(mask);
}

static double max_abs(const float *x, size_t n)
{
    double m = 0.0;
    for (size_t i = 0; i < n; i++)
        m = fmax(m, fabs(x[i]));
    return m;
}

/* max(m, d), with a NaN d counting as infinitely far */
static double worse(double m, double d)
{
    return isnan(d) ? INFINITY : fmax(m, d);
}

/* Largest |a - b|; a NaN on either side counts as infinitely far (fmax would drop it, and a
 * device that returns NaN logits would pass: tests/cuda-emu/mutate.sh's 'offload' mutation). */
static double max_diff(const float *a, const float *b, size_t n)
{
    double m = 0.0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        if (isnan(d))
            return INFINITY;
        m = fmax(m, d);
    }
    return m;
}

static backend_case cuda_cases[] = {
    {SQ_BACKEND_CUDA, SQ_DTYPE_F16, 0, 1e-2, "f16"},
    {SQ_BACKEND_CUDA, SQ_DTYPE_BF16, 0, 3e-2, "bf16"},
    {SQ_BACKEND_CUDA, SQ_DTYPE_F16, 1, 1e-2, "f16 offload"},
    {SQ_BACKEND_CUDA, SQ_DTYPE_BF16, 1, 3e-2, "bf16 offload"},
};

ParameterizedTestParameters(cuda, logits_agree_with_the_cpu_within_the_dtype_tolerance)
{
    return cr_make_param_array(backend_case, cuda_cases, sizeof cuda_cases / sizeof *cuda_cases);
}

ParameterizedTest(backend_case *bc, cuda, logits_agree_with_the_cpu_within_the_dtype_tolerance)
{
    need_device();
    sq_model *m = tiny_model(11, 3);
    backend_case cpu = {SQ_BACKEND_CPU, SQ_DTYPE_F32, 0, 0, "cpu"};
    sq_context *cc = new_ctx(m, &cpu, 64, 32), *gc = new_ctx(m, bc, 64, 32);
    cr_assert(strstr(sq_context_device_name(gc), "sm_"), "%s", sq_context_device_name(gc));
    cr_assert_eq(sq_context_dtype(gc), bc->dtype);
    enum { N = 24 };
    int32_t tok[N];
    for (int i = 0; i < N; i++)
        tok[i] = (i * 37 + 5) % V;
    float *want = malloc(N * V * sizeof *want), *got = malloc(N * V * sizeof *got);
    causal(cc, tok, N, want);
    causal(gc, tok, N, got);
    double scale = max_abs(want, N * V), d = max_diff(got, want, N * V);
    cr_assert(d <= bc->tol * scale, "%s: max diff %g, scale %g", bc->label, d, scale);
    /* then one token at a time over a committed prefix (the decode path) */
    sq_context_reset(cc);
    sq_context_reset(gc);
    sq_error err = {0};
    int32_t keep[1] = {0};
    for (int i = 0; i < N; i++) {
        int32_t pos = i;
        uint8_t one = 1;
        float a[V], b[V];
        cr_assert_eq(sq_context_forward(cc, &tok[i], &pos, &one, 1, a, &err), 0, "%s", err.msg);
        cr_assert_eq(sq_context_forward(gc, &tok[i], &pos, &one, 1, b, &err), 0, "%s", err.msg);
        cr_assert(max_diff(a, b, V) <= bc->tol * scale, "%s: token %d", bc->label, i);
        cr_assert(max_diff(b, got + (size_t)i * V, V) <= bc->tol * scale);
        cr_assert_eq(sq_context_commit(cc, keep, 1, &err), 0, "%s", err.msg);
        cr_assert_eq(sq_context_commit(gc, keep, 1, &err), 0, "%s", err.msg);
    }
    free(want);
    free(got);
    sq_context_free(cc);
    sq_context_free(gc);
    sq_model_free(m);
}

ParameterizedTestParameters(cuda, tree_forward_equals_path_forward_and_commit_keeps_the_path)
{
    return cr_make_param_array(backend_case, cuda_cases, sizeof cuda_cases / sizeof *cuda_cases);
}

/* A prefix of 5 committed tokens, then a tree of 8 nodes in one forward: every node's logits
 * equal a plain causal forward over prefix + its root path (on the same backend); after
 * committing one root-to-leaf path, the next token's logits equal the causal forward too. */
ParameterizedTest(backend_case *bc, cuda, tree_forward_equals_path_forward_and_commit_keeps_the_path)
{
    need_device();
    sq_model *m = tiny_model(5, 2);
    sq_context *tc = new_ctx(m, bc, 64, 32), *pc = new_ctx(m, bc, 64, 32);
    enum { PL = 5, T = 8 };
    const int32_t prefix[PL] = {3, 14, 15, 92, 65};
    const int parent[T] = {-1, 0, 0, 1, 1, 2, 3, 6};
    const int32_t ttok[T] = {35, 89, 79, 32, 38, 46, 26, 43};
    int depth[T];
    float *pre = malloc(PL * V * sizeof *pre), *tl = malloc(T * V * sizeof *tl);
    causal(tc, prefix, PL, pre);
    sq_error err = {0};
    int32_t keep[PL] = {0, 1, 2, 3, 4};
    cr_assert_eq(sq_context_commit(tc, keep, PL, &err), 0, "%s", err.msg);
    int32_t pos[T];
    uint8_t mask[T * T] = {0};
    for (int i = 0; i < T; i++) {
        depth[i] = parent[i] < 0 ? 0 : depth[parent[i]] + 1;
        pos[i] = PL + depth[i];
        for (int a = i; a >= 0; a = parent[a])
            mask[i * T + a] = 1;
    }
    cr_assert_eq(sq_context_forward(tc, ttok, pos, mask, T, tl, &err), 0, "%s", err.msg);
    double scale = max_abs(pre, PL * V), worst = 0.0;
    for (int i = 0; i < T; i++) {
        int32_t seq[PL + T];
        int len = PL + depth[i] + 1;
        memcpy(seq, prefix, sizeof prefix);
        for (int a = i; a >= 0; a = parent[a])
            seq[PL + depth[a]] = ttok[a];
        float *want = malloc((size_t)len * V * sizeof *want);
        sq_context_reset(pc);
        causal(pc, seq, len, want);
        double d = max_diff(tl + (size_t)i * V, want + (size_t)(len - 1) * V, V);
        worst = fmax(worst, d);
        free(want);
    }
    /* the same arithmetic in a different batch shape (other GEMM kernels and summation orders,
     * so 16-bit roundings of intermediate values may differ by an ulp): half the tolerance
     * against the CPU */
    const double same_tol = bc->tol / 2;
    cr_assert(worst <= same_tol * scale, "%s: tree vs path: max diff %g, scale %g", bc->label, worst,
              scale);

    /* commit the path 0 -> 1 -> 3 -> 6 -> 7, then feed one more token */
    int32_t path[5] = {0, 1, 3, 6, 7};
    cr_assert_eq(sq_context_commit(tc, path, 5, &err), 0, "%s", err.msg);
    int32_t nxt = 11, npos = PL + 5;
    uint8_t one = 1;
    float got[V];
    cr_assert_eq(sq_context_forward(tc, &nxt, &npos, &one, 1, got, &err), 0, "%s", err.msg);
    int32_t seq[PL + 6];
    memcpy(seq, prefix, sizeof prefix);
    for (int k = 0; k < 5; k++)
        seq[PL + k] = ttok[path[k]];
    seq[PL + 5] = nxt;
    float *want = malloc((PL + 6) * V * sizeof *want);
    sq_context_reset(pc);
    causal(pc, seq, PL + 6, want);
    double d = max_diff(got, want + (size_t)(PL + 5) * V, V);
    cr_assert(d <= same_tol * scale, "%s: after commit: max diff %g", bc->label, d);
    free(want);
    free(pre);
    free(tl);
    sq_context_free(tc);
    sq_context_free(pc);
    sq_model_free(m);
}

Test(cuda, offload_computes_what_the_on_device_weights_compute)
{
    need_device();
    sq_model *m = tiny_model(21, 4);
    backend_case on = {SQ_BACKEND_CUDA, SQ_DTYPE_F16, 0, 0, "f16"};
    backend_case off = {SQ_BACKEND_CUDA, SQ_DTYPE_F16, 1, 0, "f16 offload"};
    sq_context *a = new_ctx(m, &on, 64, 32), *b = new_ctx(m, &off, 64, 32);
    enum { N = 17 };
    int32_t tok[N];
    for (int i = 0; i < N; i++)
        tok[i] = (i * 13 + 2) % V;
    float *la = malloc(N * V * sizeof *la), *lb = malloc(N * V * sizeof *lb);
    for (int rep = 0; rep < 3; rep++) {   /* repeated forwards reuse the two layer buffers */
        sq_context_reset(a);
        sq_context_reset(b);
        causal(a, tok, N, la);
        causal(b, tok, N, lb);
        /* the same weights and kernels: identical up to GEMM algorithm choice */
        cr_assert(max_diff(la, lb, N * V) <= 1e-4 * max_abs(la, N * V), "rep %d", rep);
    }
    free(la);
    free(lb);
    sq_context_free(a);
    sq_context_free(b);
    sq_model_free(m);
}

static sq_plan *plan_of(const int *parent, int n)
{
    int rank[64] = {0}, cnt[64] = {0};
    for (int i = 1; i < n; i++)
        rank[i] = ++cnt[parent[i]];
    sq_tree *t;
    sq_error err = {0};
    cr_assert_eq(sq_tree_from_parents(parent, rank, n, &t, "test", &err), 0, "%s", err.msg);
    const double p[3] = {0.6, 0.2, 0.1};
    sq_curve c = {0};
    cr_assert_eq(sq_curve_init(&c, "test", "greedy", p, 3, &err), 0, "%s", err.msg);
    sq_plan *plan;
    cr_assert_eq(sq_plan_new(t, &c, 0, 0, 0, &plan, &err), 0, "%s", err.msg);
    sq_curve_clear(&c);
    return plan;
}

ParameterizedTestParameters(cuda, greedy_speculative_decoding_equals_target_greedy)
{
    return cr_make_param_array(backend_case, cuda_cases, sizeof cuda_cases / sizeof *cuda_cases);
}

ParameterizedTest(backend_case *bc, cuda, greedy_speculative_decoding_equals_target_greedy)
{
    need_device();
    sq_model *draft = tiny_model(2, 1), *target = tiny_model(1, 2);
    const int parent[10] = {-1, 0, 0, 0, 1, 1, 2, 4, 4, 7};
    sq_plan *plan = plan_of(parent, 10);
    sq_specdec_params prm = sq_specdec_default_params();
    prm.mode = SQ_MODE_GREEDY;
    prm.temperature = 0.0;
    prm.backend = bc->backend;
    prm.dtype = bc->dtype;
    prm.offload = bc->offload;
    prm.max_context = 256;
    sq_specdec *sd;
    sq_error err = {0};
    cr_assert_eq(sq_specdec_new(draft, target, plan, &prm, "plan.json", &sd, &err), 0, "%s",
                 err.msg);
    enum { NEW = 48 };
    const int32_t prompt[4] = {1, 2, 3, 4};
    int32_t spec[NEW], ar[NEW];
    int st[NEW], steps;
    cr_assert_eq(sq_specdec_generate(sd, prompt, 4, NEW, spec, st, &steps, NULL, &err), 0, "%s",
                 err.msg);
    cr_assert_eq(sq_specdec_autoregressive(sd, prompt, 4, NEW, 0, ar, &err), 0, "%s", err.msg);
    /* The rule: speculative greedy output equals the target's greedy output token for token,
     * except where the target's two best logits at that point are within the dtype tolerance
     * of each other (bc->tol x max |logit|): cuBLAS may pick other GEMM kernels for 1 and for
     * 10 rows, and the argmax of a near tie may then flip without any bug. The first such
     * mismatch is reported (criterion's log) and ends the comparison, since the two texts
     * diverge from there; any other mismatch fails. */
    int first = -1;
    for (int i = 0; i < NEW && first < 0; i++)
        if (spec[i] != ar[i])
            first = i;
    if (first >= 0) {
        backend_case one = *bc;
        sq_context *tc = new_ctx(target, &one, 256, 64);
        int32_t seq[4 + NEW];
        memcpy(seq, prompt, sizeof prompt);
        memcpy(seq + 4, ar, (size_t)first * sizeof *ar);
        const int len = 4 + first;
        float *lg = malloc((size_t)len * V * sizeof *lg);
        causal(tc, seq, len, lg);
        const float *row = lg + (size_t)(len - 1) * V;
        double top1 = -INFINITY, top2 = -INFINITY;
        for (int t = 0; t < V; t++) {
            if (row[t] > top1) {
                top2 = top1;
                top1 = row[t];
            } else if (row[t] > top2) {
                top2 = row[t];
            }
        }
        const double gap = top1 - top2, allowed = bc->tol * max_abs(row, V);
        cr_log_warn("%s: token %d: speculative %d, target %d; the target's top-2 logits are "
                    "%.6g apart (allowed for a near tie: %.6g)", bc->label, first, spec[first],
                    ar[first], gap, allowed);
        cr_assert(gap <= allowed, "%s: token %d: speculative %d, target %d, and the target's "
                  "top-2 logits are %.6g apart (> %.6g): not a near tie", bc->label, first,
                  spec[first], ar[first], gap, allowed);
        cr_assert(row[spec[first]] >= top1 - allowed && row[ar[first]] >= top1 - allowed,
                  "%s: token %d: the two tokens' logits %.6g and %.6g are not both within %.6g "
                  "of the best %.6g", bc->label, first, row[spec[first]], row[ar[first]], allowed,
                  top1);
        free(lg);
        sq_context_free(tc);
    }
    sq_specdec_free(sd);
    sq_plan_free(plan);
    sq_model_free(draft);
    sq_model_free(target);
}

/* ---- batched forward (issue 18) -------------------------------------------------------------- */

/* Top-2 gap of a logits row. */
static double top2_gap(const float *row, int n)
{
    double top1 = -INFINITY, top2 = -INFINITY;
    for (int t = 0; t < n; t++) {
        if (row[t] > top1) {
            top2 = top1;
            top1 = row[t];
        } else if (row[t] > top2) {
            top2 = row[t];
        }
    }
    return top1 - top2;
}

enum { BQ = 3 };   /* sequences of the batched-forward tests */

/* Sequence k's calls: a committed prefix of pre[k] tokens, then (sequence 2 only) a first tree
 * part of 3 pending tokens, then the batched forward of n[k] tokens whose mask row i attends to
 * the pending tokens of its tree (a chain through the earlier part, and itself), then a commit
 * of 2 pending slots in reverse order and one more token each. */
static const int bq_pre[BQ] = {3, 9, 14}, bq_n[BQ] = {5, 1, 7}, bq_pend[BQ] = {0, 0, 3};

static int32_t bq_tok(int k, int i)
{
    return (int32_t)((k * 31 + i * 17 + 3) % V);
}

/* The prefix and the earlier pending part of sequence k on ctx. */
static void bq_setup(sq_context *ctx, int k)
{
    sq_error err = {0};
    int32_t tok[32], keep[32];
    float *lg = malloc(32 * V * sizeof *lg);
    for (int i = 0; i < bq_pre[k]; i++) {
        tok[i] = bq_tok(k, i);
        keep[i] = i;
    }
    causal(ctx, tok, bq_pre[k], lg);
    cr_assert_eq(sq_context_commit(ctx, keep, bq_pre[k], &err), 0, "%s", err.msg);
    if (bq_pend[k] > 0) {
        int32_t pos[8];
        uint8_t mask[64] = {0};
        const int P = bq_pend[k];
        for (int i = 0; i < P; i++) {
            tok[i] = bq_tok(k, 100 + i);
            pos[i] = bq_pre[k] + i;
            for (int j = 0; j <= i; j++)
                mask[i * P + j] = 1;
        }
        cr_assert_eq(sq_context_forward(ctx, tok, pos, mask, P, lg, &err), 0, "%s", err.msg);
    }
    free(lg);
}

/* The arguments of sequence k's batched forward: n tokens after P pending ones. */
static void bq_args(int k, int32_t *tok, int32_t *pos, uint8_t *mask)
{
    const int P = bq_pend[k], n = bq_n[k], width = P + n;
    memset(mask, 0, (size_t)n * width);
    for (int i = 0; i < n; i++) {
        tok[i] = bq_tok(k, 200 + i);
        /* node i hangs below node i - 2 (or the earlier part's last pending token) */
        int depth = i < 2 ? 0 : (i / 2);
        pos[i] = bq_pre[k] + P + depth;
        for (int j = 0; j < P; j++)
            mask[(size_t)i * width + j] = 1;
        for (int a = i; a >= 0; a -= 2)
            mask[(size_t)i * width + P + a] = 1;
    }
}

/* Runs the batched forward over ctxs (batched != 0) or each sequence's forward alone, then the
 * commit and one more token per sequence (batched the same way); logits: (BQ, 8 + 1, V). */
static void bq_run(sq_context **ctxs, int batched, float *logits)
{
    sq_error err = {0};
    int32_t tok[BQ][8], pos[BQ][8];
    uint8_t mask[BQ][8 * 16];
    sq_batch_seq seqs[BQ];
    for (int k = 0; k < BQ; k++) {
        bq_setup(ctxs[k], k);
        bq_args(k, tok[k], pos[k], mask[k]);
        seqs[k] = (sq_batch_seq){ctxs[k], tok[k], pos[k], mask[k], bq_n[k],
                                 logits + (size_t)k * 9 * V};
    }
    if (batched) {
        cr_assert_eq(sq_context_forward_batch(seqs, BQ, &err), 0, "%s", err.msg);
    } else {
        for (int k = 0; k < BQ; k++)
            cr_assert_eq(sq_context_forward(ctxs[k], tok[k], pos[k], mask[k], bq_n[k],
                                            seqs[k].logits, &err), 0, "%s", err.msg);
    }
    for (int k = 0; k < BQ; k++) {
        cr_assert_eq(sq_context_pending(ctxs[k]), bq_pend[k] + bq_n[k], "sequence %d", k);
        /* keep the last new token and the earlier part's first, in that order */
        int32_t keep[2] = {bq_pend[k] + bq_n[k] - 1, 0};
        int nk = bq_pend[k] + bq_n[k] >= 2 ? 2 : 1;
        cr_assert_eq(sq_context_commit(ctxs[k], keep, nk, &err), 0, "%s", err.msg);
        tok[k][0] = bq_tok(k, 300);
        pos[k][0] = bq_pre[k] + nk;
        mask[k][0] = 1;
        seqs[k] = (sq_batch_seq){ctxs[k], tok[k], pos[k], mask[k], 1,
                                 logits + ((size_t)k * 9 + 8) * V};
    }
    if (batched) {
        cr_assert_eq(sq_context_forward_batch(seqs, BQ, &err), 0, "%s", err.msg);
    } else {
        for (int k = 0; k < BQ; k++)
            cr_assert_eq(sq_context_forward(ctxs[k], tok[k], pos[k], mask[k], 1, seqs[k].logits,
                                            &err), 0, "%s", err.msg);
    }
}

ParameterizedTestParameters(cuda, batched_forward_equals_separate_forwards_and_the_cpu_batch)
{
    return cr_make_param_array(backend_case, cuda_cases, sizeof cuda_cases / sizeof *cuda_cases);
}

/* Three sequences with prefixes of 3, 9 and 14 tokens (one with 3 tokens already pending) read
 * trees of 5, 1 and 7 tokens in one batched forward, commit two slots each and read one more
 * token in a second batched forward. On CUDA, each sequence's logits equal its forward alone
 * (half the dtype tolerance: the same arithmetic in another batch shape) and the CPU's batched
 * forward (the dtype tolerance); every row's argmax equals the CPU's wherever the CPU's top two
 * logits are further apart than the tolerance (greedy decoding picks the same tokens). */
ParameterizedTest(backend_case *bc, cuda, batched_forward_equals_separate_forwards_and_the_cpu_batch)
{
    need_device();
    sq_model *m = tiny_model(31, 2);
    backend_case cpu = {SQ_BACKEND_CPU, SQ_DTYPE_F32, 0, 0, "cpu"};
    sq_context *gb[BQ], *ga[BQ], *cb[BQ];
    for (int k = 0; k < BQ; k++) {
        gb[k] = new_ctx(m, bc, 32, 16);
        ga[k] = new_ctx(m, bc, 32, 16);
        cb[k] = new_ctx(m, &cpu, 32, 16);
    }
    const size_t all = (size_t)BQ * 9 * V;
    float *lb = calloc(all, sizeof *lb), *la = calloc(all, sizeof *la), *lc = calloc(all, sizeof *lc);
    bq_run(gb, 1, lb);
    bq_run(ga, 0, la);
    bq_run(cb, 1, lc);
    double scale = max_abs(lc, all);
    for (int k = 0; k < BQ; k++) {
        for (int part = 0; part < 2; part++) {
            const int rows = part ? 1 : bq_n[k];
            const size_t at = ((size_t)k * 9 + (part ? 8 : 0)) * V;
            double ds = max_diff(lb + at, la + at, (size_t)rows * V);
            double dc = max_diff(lb + at, lc + at, (size_t)rows * V);
            cr_assert(ds <= bc->tol / 2 * scale, "%s: sequence %d, %s: batched vs alone: max "
                      "diff %g (scale %g)", bc->label, k, part ? "after commit" : "tree", ds,
                      scale);
            cr_assert(dc <= bc->tol * scale, "%s: sequence %d, %s: CUDA batch vs CPU batch: max "
                      "diff %g (scale %g)", bc->label, k, part ? "after commit" : "tree", dc,
                      scale);
            for (int i = 0; i < rows; i++) {
                const float *rc = lc + at + (size_t)i * V, *rb = lb + at + (size_t)i * V;
                if (top2_gap(rc, V) > bc->tol * scale)
                    cr_assert_eq(sq_argmax_f(rb, V), sq_argmax_f(rc, V), "%s: sequence %d row "
                                 "%d: greedy token", bc->label, k, i);
            }
        }
    }
    free(lb);
    free(la);
    free(lc);
    for (int k = 0; k < BQ; k++) {
        sq_context_free(gb[k]);
        sq_context_free(ga[k]);
        sq_context_free(cb[k]);
    }
    sq_model_free(m);
}

/* A batch shares one set of weights: contexts of one model in other dtypes are refused. */
Test(cuda, batched_forward_refuses_contexts_of_other_dtypes)
{
    need_device();
    sq_model *m = tiny_model(3, 1);
    backend_case f16 = {SQ_BACKEND_CUDA, SQ_DTYPE_F16, 0, 0, "f16"};
    backend_case bf16 = {SQ_BACKEND_CUDA, SQ_DTYPE_BF16, 0, 0, "bf16"};
    sq_context *a = new_ctx(m, &f16, 8, 4), *b = new_ctx(m, &bf16, 8, 4);
    int32_t tok = 1, pos = 0;
    uint8_t one = 1;
    float la[V], lb[V];
    sq_batch_seq seqs[2] = {{a, &tok, &pos, &one, 1, la}, {b, &tok, &pos, &one, 1, lb}};
    sq_error err = {0};
    cr_assert_eq(sq_context_forward_batch(seqs, 2, &err), SQ_EUSAGE);
    cr_assert(strstr(err.msg, "sequence 1") && strstr(err.msg, "bf16"), "%s", err.msg);
    cr_assert_eq(sq_context_pending(a), 0, "a refused batch leaves the contexts as they were");
    sq_context_free(a);
    sq_context_free(b);
    sq_model_free(m);
}

static backend_case batch_cases[] = {
    {SQ_BACKEND_CUDA, SQ_DTYPE_F16, 0, 1e-2, "f16"},
    {SQ_BACKEND_CUDA, SQ_DTYPE_BF16, 1, 3e-2, "bf16 offload"},
};

ParameterizedTestParameters(cuda, batched_greedy_decoding_equals_separate_runs)
{
    return cr_make_param_array(backend_case, batch_cases, sizeof batch_cases / sizeof *batch_cases);
}

/* sq_specdec_batch on CUDA (three prompts of different lengths, one batched forward per draft
 * level and for the targets' trees) produces, per sequence, the greedy output of the
 * sequence's decoder run alone on CUDA, token for token, with the near-tie rule of
 * greedy_speculative_decoding_equals_target_greedy (a mismatch where the target's top two
 * logits, on the CPU, are within the dtype tolerance ends the comparison; any other fails). */
ParameterizedTest(backend_case *bc, cuda, batched_greedy_decoding_equals_separate_runs)
{
    need_device();
    sq_model *draft = tiny_model(2, 1), *target = tiny_model(1, 2);
    const int parent[7] = {-1, 0, 0, 1, 1, 2, 3};
    sq_plan *plan = plan_of(parent, 7);
    sq_specdec_params prm = sq_specdec_default_params();
    prm.mode = SQ_MODE_GREEDY;
    prm.temperature = 0.0;
    prm.backend = bc->backend;
    prm.dtype = bc->dtype;
    prm.offload = bc->offload;
    prm.max_context = 128;
    sq_error err = {0};
    sq_specdec_batch *bt;
    cr_assert_eq(sq_specdec_batch_new(draft, target, plan, &prm, "plan.json", BQ, &bt, &err), 0,
                 "%s: %s", bc->label, err.msg);
    enum { NEW = 20 };
    const int32_t p0[2] = {5, 6}, p1[6] = {1, 2, 3, 4, 5, 6}, p2[4] = {9, 8, 7, 6};
    const int32_t *prompts[BQ] = {p0, p1, p2};
    const int plen[BQ] = {2, 6, 4};
    int32_t got[BQ][NEW], *outs[BQ] = {got[0], got[1], got[2]};
    int steps[BQ], bsteps;
    cr_assert_eq(sq_specdec_batch_generate(bt, prompts, plen, NEW, outs, steps, &bsteps, NULL,
                                           &err), 0, "%s: %s", bc->label, err.msg);
    sq_specdec *sd;
    cr_assert_eq(sq_specdec_new(draft, target, plan, &prm, "plan.json", &sd, &err), 0, "%s",
                 err.msg);
    backend_case cpu = {SQ_BACKEND_CPU, SQ_DTYPE_F32, 0, 0, "cpu"};
    for (int k = 0; k < BQ; k++) {
        int32_t alone[NEW];
        int st[NEW], ns;
        cr_assert_eq(sq_specdec_generate(sd, prompts[k], plen[k], NEW, alone, st, &ns, NULL, &err),
                     0, "%s", err.msg);
        int first = -1;
        for (int i = 0; i < NEW && first < 0; i++)
            if (got[k][i] != alone[i])
                first = i;
        if (first < 0)
            continue;
        /* the target's logits after the agreed prefix, on the CPU */
        sq_context *tc = new_ctx(target, &cpu, 128, 64);
        int32_t seq[8 + NEW];
        memcpy(seq, prompts[k], (size_t)plen[k] * sizeof *seq);
        memcpy(seq + plen[k], alone, (size_t)first * sizeof *seq);
        const int len = plen[k] + first;
        float *lg = malloc((size_t)len * V * sizeof *lg);
        causal(tc, seq, len, lg);
        const float *row = lg + (size_t)(len - 1) * V;
        const double gap = top2_gap(row, V), allowed = bc->tol * max_abs(row, V);
        cr_log_warn("%s: sequence %d token %d: batched %d, alone %d; top-2 gap %.6g (near tie "
                    "below %.6g)", bc->label, k, first, got[k][first], alone[first], gap, allowed);
        cr_assert(gap <= allowed, "%s: sequence %d token %d: batched %d, alone %d: not a near tie",
                  bc->label, k, first, got[k][first], alone[first]);
        free(lg);
        sq_context_free(tc);
    }
    sq_specdec_free(sd);
    sq_specdec_batch_free(bt);
    sq_plan_free(plan);
    sq_model_free(draft);
    sq_model_free(target);
}

/* ---- long contexts: many key chunks, several context splits (issue 27) --------------------- */

/* The kernels walk the context in chunks of 32 slots, each block over a range of chunks (a
 * split) with an online softmax, and merge the splits (k_attn_partial, k_attn_merge); the tests
 * above never fill more than one chunk. Here the contexts span up to 19 chunks and a forward
 * is cut into up to 7 ranges of 1 to 6 chunks each (on the emulation's 4 SMs; a GPU cuts them
 * otherwise, and the comparison with the CPU holds there too), and the largest
 * score of every row arrives late: the first query head of each GQA group reads keys made by
 * its own query weights (Wk = Wq), so a token's query aligns best with its own key (RoPE at
 * distance 0), which is the last slot the row sees, in the last chunk of the last split, and
 * nearly as well with the copies of its token just before it. The other heads keep random
 * sharp weights. A rescaling that misses the new maximum, or a merge that mishandles a range,
 * is far outside the dtype tolerance (tests/cuda-emu/mutate.sh: 'rescale', 'sum', 'max',
 * 'chunks', 'merge', 'split', 'batchsplit'). The random heads' query weights are sharpened x4
 * here, not x16: over hundreds of keys x16 makes near ties between two keys common, and a
 * 16-bit rounding then moves the weight between them; the aligned heads' x16, so that their
 * late maximum outgrows every earlier score by far (a missed rescaling then moves most of the
 * row's weight). */
enum { LC_CTX = 640, LC_PEND = 48 };

static sq_model *long_model(uint64_t seed)
{
    sq_model_config c = tu_llama_config((tu_shape){.dim = 64, .hidden_dim = 160, .n_layers = 1,
                                           .n_heads = 4, .n_kv_heads = 2, .head_dim = 16,
                                           .vocab_size = V, .max_position = LC_CTX});
    sq_model *m;
    sq_error err = {0};
    cr_assert_eq(sq_model_new_random(&c, seed, &m, &err), 0, "%s", err.msg);
    const size_t dim = (size_t)c.dim, hd = (size_t)c.head_dim;
    const size_t group = (size_t)(c.n_heads / c.n_kv_heads);
    const size_t q = (size_t)c.n_heads * hd, kv = (size_t)c.n_kv_heads * hd;
    for (int l = 0; l < c.n_layers; l++) {
        const sq_layer_weights *w = &m->w.layers[l];
        sq_test_scale(w->t[SQ_L_WQ].p, q * dim, 4.0f);
        sq_test_scale(w->t[SQ_L_WV].p, kv * dim, 8.0f);
        sq_test_scale(w->t[SQ_L_WO].p, dim * q, 8.0f);
        /* KV head g's key rows = query head g * group's rows, those x4 again: the aligned
         * score outgrows every other by far, so a row's weight all but moves to the late keys */
        for (size_t g = 0; g < (size_t)c.n_kv_heads; g++) {
            float *wq = (float *)w->t[SQ_L_WQ].p + g * group * hd * dim;
            sq_test_scale(wq, hd * dim, 4.0f);
            memcpy((float *)w->t[SQ_L_WK].p + g * hd * dim, wq, hd * dim * sizeof(float));
        }
    }
    return m;
}

/* Token i of sequence k's context: pseudo-random, but the last 8 before `copies_from` and
 * everything after it copies of one token (the late, well aligned keys). */
static int32_t lc_tok(int k, int i, int copies_from)
{
    if (i >= copies_from - 8)
        return (int32_t)(7 + 13 * k) % V;
    uint64_t s = (uint64_t)(k + 1) * 0x9e3779b97f4a7c15ull + (uint64_t)i * 0xbf58476d1ce4e5b9ull;
    s ^= s >> 29;
    return (int32_t)(s % V);
}

/* The same forward (n tokens after the pending ones) on the CPU and the CUDA context; fails
 * unless the logits agree within the dtype tolerance of the CPU's largest |logit|. */
static void lc_both(sq_context *cc, sq_context *gc, const backend_case *bc, const int32_t *tok,
                    const int32_t *pos, const uint8_t *mask, int n, const char *what)
{
    float *a = malloc((size_t)n * V * sizeof *a), *b = malloc((size_t)n * V * sizeof *b);
    sq_error err = {0};
    cr_assert_eq(sq_context_forward(cc, tok, pos, mask, n, a, &err), 0, "%s", err.msg);
    cr_assert_eq(sq_context_forward(gc, tok, pos, mask, n, b, &err), 0, "%s: %s", what, err.msg);
    double scale = max_abs(a, (size_t)n * V), d = max_diff(a, b, (size_t)n * V);
    cr_assert(d <= bc->tol * scale, "%s: %s (context %d + %d pending): max diff %g = %.3g of the "
              "largest |logit| %g (tolerance %g)", bc->label, what, sq_context_committed(cc),
              sq_context_pending(cc), d, d / scale, scale, bc->tol);
    cr_log_info("%s: %s: max diff %.3g of the largest |logit|", bc->label, what, d / scale);
    free(a);
    free(b);
}

/* A committed prefix of `len` tokens of sequence k (the last ones copies of one token), read in
 * causal pieces of LC_PEND tokens, each compared with the CPU when cc != NULL. */
static void lc_prefix(sq_context *cc, sq_context *gc, const backend_case *bc, int k, int len)
{
    int32_t tok[LC_PEND], pos[LC_PEND], keep[LC_PEND];
    uint8_t *mask = malloc((size_t)LC_PEND * LC_PEND);
    float *lg = malloc((size_t)LC_PEND * V * sizeof *lg);
    sq_error err = {0};
    for (int at = 0; at < len; at += LC_PEND) {
        const int n = len - at < LC_PEND ? len - at : LC_PEND;
        memset(mask, 0, (size_t)n * n);
        for (int i = 0; i < n; i++) {
            tok[i] = lc_tok(k, at + i, len);
            pos[i] = at + i;
            keep[i] = i;
            for (int j = 0; j <= i; j++)
                mask[i * n + j] = 1;
        }
        if (cc) {
            char what[64];
            snprintf(what, sizeof what, "prefix tokens %d..%d", at, at + n - 1);
            lc_both(cc, gc, bc, tok, pos, mask, n, what);
            cr_assert_eq(sq_context_commit(cc, keep, n, &err), 0, "%s", err.msg);
        } else {
            cr_assert_eq(sq_context_forward(gc, tok, pos, mask, n, lg, &err), 0, "%s", err.msg);
        }
        cr_assert_eq(sq_context_commit(gc, keep, n, &err), 0, "%s", err.msg);
    }
    free(mask);
    free(lg);
}

/* A tree of n nodes below `pend` pending chain tokens (the context holds `ctx` committed
 * ones): node i hangs below node (i - 1) / 2, or the chain's end for i = 0; every node is a
 * copy of the late token. The arguments of the forward of the n nodes. */
static void lc_tree(int k, int ctx, int pend, int n, int32_t *tok, int32_t *pos, uint8_t *mask)
{
    const int width = pend + n;
    int depth[LC_PEND];
    memset(mask, 0, (size_t)n * width);
    for (int i = 0; i < n; i++) {
        depth[i] = i == 0 ? 0 : depth[(i - 1) / 2] + 1;
        tok[i] = lc_tok(k, 0, 0);
        pos[i] = ctx + pend + depth[i];
        for (int j = 0; j < pend; j++)
            mask[(size_t)i * width + j] = 1;
        for (int a = i;; a = (a - 1) / 2) {
            mask[(size_t)i * width + pend + a] = 1;
            if (a == 0)
                break;
        }
    }
}

static backend_case long_cases[] = {
    {SQ_BACKEND_CUDA, SQ_DTYPE_F16, 0, 1e-2, "f16"},
    {SQ_BACKEND_CUDA, SQ_DTYPE_BF16, 0, 3e-2, "bf16"},
};

ParameterizedTestParameters(cuda, long_context_attention_agrees_with_the_cpu)
{
    return cr_make_param_array(backend_case, long_cases, sizeof long_cases / sizeof *long_cases);
}

/* One sequence: a prefix of 560 tokens read in causal pieces of 48 (3 query tiles per KV head:
 * up to 3 ranges of up to 6 chunks), 4 pending chain tokens, a binary tree of 15 nodes below
 * them (one tile per KV head: 7 ranges of 3 chunks), a commit of one root-to-leaf path in
 * scrambled order and 4 single tokens (6 ranges of 3 chunks); every forward's logits equal the
 * CPU's. */
ParameterizedTest(backend_case *bc, cuda, long_context_attention_agrees_with_the_cpu)
{
    need_device();
    sq_model *m = long_model(41);
    backend_case cpu = {SQ_BACKEND_CPU, SQ_DTYPE_F32, 0, 0, "cpu"};
    sq_context *cc = new_ctx(m, &cpu, LC_CTX, LC_PEND), *gc = new_ctx(m, bc, LC_CTX, LC_PEND);
    enum { PRE = 560, CHAIN = 4, TREE = 15 };
    lc_prefix(cc, gc, bc, 0, PRE);
    int32_t tok[LC_PEND], pos[LC_PEND];
    uint8_t mask[LC_PEND * LC_PEND];
    for (int i = 0; i < CHAIN; i++) {
        tok[i] = lc_tok(0, 0, 0);
        pos[i] = PRE + i;
        for (int j = 0; j < CHAIN; j++)
            mask[i * CHAIN + j] = j <= i;
    }
    lc_both(cc, gc, bc, tok, pos, mask, CHAIN, "pending chain");
    lc_tree(0, PRE, CHAIN, TREE, tok, pos, mask);
    lc_both(cc, gc, bc, tok, pos, mask, TREE, "tree below the pending chain");
    /* the path chain -> 0 -> 2 -> 6 -> 14, kept in scrambled order */
    int32_t keep[CHAIN + 4] = {CHAIN + 6, 0, 2, CHAIN + 0, 1, CHAIN + 14, 3, CHAIN + 2};
    sq_error err = {0};
    cr_assert_eq(sq_context_commit(cc, keep, CHAIN + 4, &err), 0, "%s", err.msg);
    cr_assert_eq(sq_context_commit(gc, keep, CHAIN + 4, &err), 0, "%s", err.msg);
    for (int i = 0; i < 4; i++) {
        int32_t t = lc_tok(0, 0, 0), p = PRE + CHAIN + 4 + i;
        uint8_t one = 1;
        int32_t k0 = 0;
        char what[48];
        snprintf(what, sizeof what, "single token %d", i);
        lc_both(cc, gc, bc, &t, &p, &one, 1, what);
        cr_assert_eq(sq_context_commit(cc, &k0, 1, &err), 0, "%s", err.msg);
        cr_assert_eq(sq_context_commit(gc, &k0, 1, &err), 0, "%s", err.msg);
    }
    sq_context_free(cc);
    sq_context_free(gc);
    sq_model_free(m);
}

ParameterizedTestParameters(cuda, long_context_batched_forward_agrees_with_the_cpu)
{
    return cr_make_param_array(backend_case, long_cases, sizeof long_cases / sizeof *long_cases);
}

/* Three sequences with committed contexts of 20, 250 and 590 tokens (1, 8 and 19 chunks; the
 * last with 3 pending chain tokens) read trees of 9, 1 and 12 nodes in one batched forward: the
 * ranges are cut per sequence (1, 3 and 7 chunks each) and the shortest sequence's later ranges
 * are empty. Then each commits two slots in reverse order and reads one more token in a second
 * batched forward. The CUDA batch's logits equal the CPU batch's. */
ParameterizedTest(backend_case *bc, cuda, long_context_batched_forward_agrees_with_the_cpu)
{
    need_device();
    sq_model *m = long_model(43);
    backend_case cpu = {SQ_BACKEND_CPU, SQ_DTYPE_F32, 0, 0, "cpu"};
    enum { B = 3 };
    const int pre[B] = {20, 250, 590}, n[B] = {9, 1, 12}, pend[B] = {0, 0, 3};
    sq_context *gc[B], *cc[B];
    sq_error err = {0};
    int32_t tok[B][LC_PEND], pos[B][LC_PEND];
    uint8_t mask[B][LC_PEND * LC_PEND];
    float *lc = malloc((size_t)B * LC_PEND * V * sizeof *lc);
    float *lg = malloc((size_t)B * LC_PEND * V * sizeof *lg);
    for (int k = 0; k < B; k++) {
        gc[k] = new_ctx(m, bc, LC_CTX, LC_PEND);
        cc[k] = new_ctx(m, &cpu, LC_CTX, LC_PEND);
        lc_prefix(NULL, gc[k], bc, k, pre[k]);
        lc_prefix(NULL, cc[k], &cpu, k, pre[k]);
        if (pend[k] > 0) {
            for (int i = 0; i < pend[k]; i++) {
                tok[k][i] = lc_tok(k, 0, 0);
                pos[k][i] = pre[k] + i;
                for (int j = 0; j < pend[k]; j++)
                    mask[k][i * pend[k] + j] = j <= i;
            }
            cr_assert_eq(sq_context_forward(gc[k], tok[k], pos[k], mask[k], pend[k], lg, &err), 0,
                         "%s", err.msg);
            cr_assert_eq(sq_context_forward(cc[k], tok[k], pos[k], mask[k], pend[k], lc, &err), 0,
                         "%s", err.msg);
        }
        lc_tree(k, pre[k], pend[k], n[k], tok[k], pos[k], mask[k]);
    }
    for (int step = 0; step < 2; step++) {
        sq_batch_seq gs[B], cs[B];
        size_t rows = 0;
        for (int k = 0; k < B; k++) {
            const int nk = step ? 1 : n[k];
            gs[k] = (sq_batch_seq){gc[k], tok[k], pos[k], mask[k], nk, lg + rows * V};
            cs[k] = (sq_batch_seq){cc[k], tok[k], pos[k], mask[k], nk, lc + rows * V};
            rows += (size_t)nk;
        }
        cr_assert_eq(sq_context_forward_batch(cs, B, &err), 0, "%s", err.msg);
        cr_assert_eq(sq_context_forward_batch(gs, B, &err), 0, "%s: %s", bc->label, err.msg);
        const double scale = max_abs(lc, rows * V);
        for (int k = 0; k < B; k++) {
            const size_t nk = step ? 1 : (size_t)n[k];
            const double d = max_diff(cs[k].logits, gs[k].logits, nk * V);
            cr_assert(d <= bc->tol * scale, "%s: %s, sequence %d (context %d): max diff %g = "
                      "%.3g of the largest |logit| %g (tolerance %g)", bc->label,
                      step ? "after commit" : "trees", k, pre[k], d, d / scale, scale, bc->tol);
            cr_log_info("%s: step %d sequence %d: max diff %.3g of the largest |logit|",
                        bc->label, step, k, d / scale);
        }
        if (step)
            break;
        for (int k = 0; k < B; k++) {
            /* keep the last node and the first pending slot, in that order */
            const int width = pend[k] + n[k];
            int32_t keep[2] = {width - 1, 0};
            const int nk = width >= 2 ? 2 : 1;
            cr_assert_eq(sq_context_commit(gc[k], keep, nk, &err), 0, "%s", err.msg);
            cr_assert_eq(sq_context_commit(cc[k], keep, nk, &err), 0, "%s", err.msg);
            tok[k][0] = lc_tok(k, 0, 0);
            pos[k][0] = pre[k] + nk;
            mask[k][0] = 1;
        }
    }
    free(lc);
    free(lg);
    for (int k = 0; k < B; k++) {
        sq_context_free(gc[k]);
        sq_context_free(cc[k]);
    }
    sq_model_free(m);
}

/* ---- sampling kernels against libsequoia/verify/verify.c ----------------------------------------------- */

static sq_cuda_sampler *new_sampler(int vocab)
{
    sq_cuda_sampler *s;
    sq_error err = {0};
    cr_assert_eq(sq_cuda_sampler_new(vocab, &s, &err), 0, "%s", err.msg);
    return s;
}

static void random_logits(float *l, int n, uint64_t seed)
{
    for (int i = 0; i < n; i++)
        l[i] = (float)(8.0 * sq_k_uniform(seed, 0, (uint64_t)i) - 4.0);
}

Test(cuda, softmax_with_temperature_and_top_p_equals_the_verifier)
{
    need_device();
    const int n = 32000;
    sq_cuda_sampler *s = new_sampler(n);
    sq_verifier *v = sq_verifier_new(n, SQ_MODE_STOCHASTIC, 1);
    float *l = malloc((size_t)n * sizeof *l);
    double *want = malloc((size_t)n * sizeof *want), *got = malloc((size_t)n * sizeof *got);
    const double temps[] = {0.0, 0.3, 1.0, 1.7};
    const double tops[] = {1.0, 0.9, 0.5, 0.01};
    sq_error err = {0};
    for (int a = 0; a < 4; a++)
        for (int b = 0; b < 4; b++) {
            random_logits(l, n, (uint64_t)(a * 4 + b));
            l[123] = -INFINITY;
            l[456] = NAN;
            sq_verifier_probs(v, l, temps[a], tops[b], want);
            cr_assert_eq(sq_cuda_probs(s, l, temps[a], tops[b], got, &err), 0, "%s", err.msg);
            double d = 0.0;
            int kept_w = 0, kept_g = 0;
            for (int i = 0; i < n; i++) {
                d = worse(d, fabs(got[i] - want[i]));
                kept_w += want[i] > 0.0;
                kept_g += got[i] > 0.0;
            }
            cr_assert(d <= 1e-9, "T %g top-p %g: max diff %g", temps[a], tops[b], d);
            cr_assert_eq(kept_g, kept_w, "T %g top-p %g: support", temps[a], tops[b]);
        }
    free(l);
    free(want);
    free(got);
    sq_verifier_free(v);
    sq_cuda_sampler_free(s);
}

/* The verification rule's edge cases on the device (libsequoia/verify/rule.h): ties at the
 * nucleus cut (all kept), rows with no usable logit (uniform; token 0 at T = 0), +inf logits. */
Test(cuda, probs_follow_the_rule_at_ties_and_non_finite_logits)
{
    need_device();
    const int n = 4096;
    sq_cuda_sampler *s = new_sampler(n);
    sq_verifier *v = sq_verifier_new(n, SQ_MODE_STOCHASTIC, 1);
    float *l = malloc((size_t)n * sizeof *l);
    double *want = malloc((size_t)n * sizeof *want), *got = malloc((size_t)n * sizeof *got);
    const double temps[] = {0.0, 0.5, 1.0};
    const double tops[] = {1.0, 0.9, 0.5, 0.1};
    sq_error err = {0};
    for (int kind = 0; kind < 4; kind++)
        for (int a = 0; a < 3; a++)
            for (int b = 0; b < 4; b++) {
                for (int i = 0; i < n; i++) {
                    double u = sq_k_uniform((uint64_t)kind, 1, (uint64_t)i);
                    /* kind 0: a coarse grid (ties everywhere); 1: every logit NaN or -inf;
                     * 2: a few +inf among the grid; 3: issue 12's row {2,1,1,1,1,0,0,0} */
                    l[i] = kind == 1 ? (u < 0.5 ? NAN : -INFINITY)
                         : kind == 3 ? (i == 0 ? 2.0f : i < 5 ? 1.0f : i < 8 ? 0.0f : -INFINITY)
                         : (float)(int)(8.0 * u) * 0.5f;
                }
                if (kind == 2)
                    l[17] = l[4000] = INFINITY;
                sq_verifier_probs(v, l, temps[a], tops[b], want);
                cr_assert_eq(sq_cuda_probs(s, l, temps[a], tops[b], got, &err), 0, "%s",
                             err.msg);
                double d = 0.0;
                int kept_w = 0, kept_g = 0;
                for (int i = 0; i < n; i++) {
                    d = worse(d, fabs(got[i] - want[i]));
                    kept_w += want[i] > 0.0;
                    kept_g += got[i] > 0.0;
                }
                cr_assert(d <= 1e-9, "kind %d T %g top-p %g: max diff %g", kind, temps[a],
                          tops[b], d);
                cr_assert_eq(kept_g, kept_w, "kind %d T %g top-p %g: support", kind, temps[a],
                             tops[b]);
            }
    free(l);
    free(want);
    free(got);
    sq_verifier_free(v);
    sq_cuda_sampler_free(s);
}

Test(cuda, argmax_and_residual_equal_the_verifier)
{
    need_device();
    const int n = 5003;
    sq_cuda_sampler *s = new_sampler(n);
    float *l = malloc((size_t)n * sizeof *l);
    double *r = malloc((size_t)n * sizeof *r), *q = malloc((size_t)n * sizeof *q),
           *want = malloc((size_t)n * sizeof *want);
    sq_error err = {0};
    for (int t = 0; t < 20; t++) {
        random_logits(l, n, 100 + (uint64_t)t);
        l[(t * 997) % n] = 9.0f;    /* ties: the lower id wins */
        l[(t * 991) % n] = 9.0f;
        l[7] = t % 2 ? NAN : INFINITY;
        int got;
        cr_assert_eq(sq_cuda_argmax(s, l, &got, &err), 0, "%s", err.msg);
        cr_assert_eq(got, sq_argmax_f(l, n), "trial %d", t);
        double sr = 0.0, sq = 0.0;
        for (int i = 0; i < n; i++) {
            r[i] = sq_k_uniform(t, 1, (uint64_t)i);
            q[i] = sq_k_uniform(t, 2, (uint64_t)i);
            sr += r[i];
            sq += q[i];
        }
        double s2 = 0.0;
        for (int i = 0; i < n; i++) {
            r[i] /= sr;
            q[i] /= sq;
            s2 += sq_k_residual(r[i], q[i]);
        }
        for (int i = 0; i < n; i++)
            want[i] = sq_k_residual(r[i], q[i]) / s2;
        cr_assert_eq(sq_cuda_residual(s, r, q, &err), 0, "%s", err.msg);
        for (int i = 0; i < n; i++)
            cr_assert(fabs(r[i] - want[i]) <= 1e-12, "trial %d, token %d", t, i);
    }
    free(l);
    free(r);
    free(q);
    free(want);
    sq_cuda_sampler_free(s);
}

Test(cuda, draws_with_and_without_replacement_equal_the_host_computation)
{
    need_device();
    const int n = 1000;
    sq_cuda_sampler *s = new_sampler(n);
    double *q = calloc((size_t)n, sizeof *q), *keys = malloc((size_t)n * sizeof *keys);
    double tot = 0.0;
    for (int i = 0; i < n; i += 3) {   /* a third of the tokens have mass */
        q[i] = sq_k_uniform(9, 0, (uint64_t)i);
        tot += q[i];
    }
    for (int i = 0; i < n; i++)
        q[i] /= tot;
    sq_error err = {0};
    for (uint64_t stream = 0; stream < 10; stream++) {
        /* without replacement: 400 > 334 tokens with mass, so zero-mass ones come last */
        enum { K = 400 };
        int32_t got[K], want[K];
        for (int i = 0; i < n; i++)
            keys[i] = sq_k_gumbel_key(sq_k_uniform(5, stream, (uint64_t)i), q[i]);
        cr_assert_eq(sq_topk_d(keys, n, K, want, NULL), SQ_OK);
        cr_assert_eq(sq_cuda_sample_without(s, q, 5, stream, K, got, &err), 0, "%s", err.msg);
        for (int j = 0; j < K; j++)
            cr_assert_eq(got[j], want[j], "stream %llu, draw %d", (unsigned long long)stream, j);
        /* with replacement: inverse CDF of the same uniforms */
        enum { D = 64 };
        int32_t w[D];
        cr_assert_eq(sq_cuda_sample_with(s, q, 5, stream, D, w, &err), 0, "%s", err.msg);
        for (int j = 0; j < D; j++) {
            double u = sq_k_uniform(5, stream, (uint64_t)j), c = 0.0;
            int tok = -1;
            for (int i = 0; i < n && tok < 0; i++) {
                c += q[i];
                if (q[i] > 0.0 && u < c)
                    tok = i;
            }
            cr_assert(q[w[j]] > 0.0, "draw %d: token %d has no mass", j, w[j]);
            cr_assert_eq(w[j], tok, "stream %llu, draw %d", (unsigned long long)stream, j);
        }
    }
    free(q);
    free(keys);
    sq_cuda_sampler_free(s);
}
