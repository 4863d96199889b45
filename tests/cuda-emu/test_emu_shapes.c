/* Edge shapes of the CUDA backend against the CPU backend (issue 15), run on the CUDA
 * emulation (tests/cuda-emu) on every build and on a GPU by the same source: head_dim from 2 to
 * 256 (also one that is not a multiple of 32), MHA, GQA and MQA, odd vocabulary sizes, offload
 * with 1 to 5 layers, f16 and bf16. Each case fills the context to the brim: a committed prefix
 * of max_context - K tokens, then one forward of max_pending tokens (a random tree: every node
 * attends to a random earlier pending node's path), a commit of K of them in a scrambled order,
 * and a forward of one token with the context full. Both backends get the same calls; every
 * forward's logits must agree within the dtype tolerance (1e-2 f16, 3e-2 bf16 of the largest
 * |logit|), on sharp attention (tests/cuda-emu/sharp.h). */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/model.h"
#include "tests/cuda-emu/sharp.h"

typedef struct shape_case {
    int             head_dim, n_heads, n_kv_heads, dim, vocab, layers;
    sq_weight_dtype dtype;
    int             offload;
    int             max_context, max_pending, kept;
} shape_case;

static const shape_case cases[] = {
    /* head_dim 2 .. 256 */
    {2, 4, 4, 16, 97, 1, SQ_DTYPE_F16, 0, 10, 6, 3},
    {4, 2, 1, 16, 3, 2, SQ_DTYPE_F16, 0, 9, 5, 2},            /* MQA, vocabulary 3 */
    {8, 8, 2, 32, 1031, 1, SQ_DTYPE_BF16, 0, 12, 8, 4},       /* GQA 4:1 */
    {16, 4, 2, 32, 97, 2, SQ_DTYPE_F16, 0, 12, 8, 5},         /* the 'cuda' suite's shape */
    {48, 2, 1, 32, 61, 1, SQ_DTYPE_F16, 0, 8, 6, 2},          /* not a multiple of 32 */
    {64, 2, 2, 32, 127, 1, SQ_DTYPE_BF16, 0, 8, 4, 1},
    {128, 4, 1, 32, 33, 1, SQ_DTYPE_F16, 0, 7, 5, 3},         /* MQA at 128 */
    {256, 2, 2, 32, 17, 1, SQ_DTYPE_F16, 0, 6, 4, 2},         /* the largest head_dim */
    {256, 4, 2, 32, 5, 1, SQ_DTYPE_BF16, 0, 6, 3, 1},
    /* n = 1 pending slot: every forward is one token */
    {16, 2, 1, 32, 97, 1, SQ_DTYPE_F16, 0, 6, 1, 1},
    /* offload with 1..5 layers */
    {16, 4, 2, 32, 97, 1, SQ_DTYPE_F16, 1, 8, 6, 3},
    {16, 4, 2, 32, 97, 2, SQ_DTYPE_BF16, 1, 8, 6, 3},
    {32, 2, 1, 32, 41, 3, SQ_DTYPE_F16, 1, 8, 6, 2},
    {8, 4, 4, 16, 97, 4, SQ_DTYPE_BF16, 1, 8, 6, 4},
    {16, 4, 2, 32, 59, 5, SQ_DTYPE_F16, 1, 8, 6, 3},
};

ParameterizedTestParameters(emu, edge_shapes_agree_with_the_cpu)
{
    return cr_make_param_array(shape_case, cases, sizeof cases / sizeof cases[0]);
}

static double max_abs(const float *x, size_t n)
{
    double m = 0.0;
    for (size_t i = 0; i < n; i++)
        m = fmax(m, fabs(x[i]));
    return m;
}

static uint64_t next(uint64_t *s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return *s >> 33;
}

/* The same forward on both contexts; logits compared. */
static void both_forward(sq_context *cpu, sq_context *gpu, const int32_t *tok, const int32_t *pos,
                         const uint8_t *mask, int n, int V, double tol, const char *what,
                         const shape_case *sc)
{
    float *a = malloc((size_t)n * V * sizeof *a), *b = malloc((size_t)n * V * sizeof *b);
    sq_error err = {0};
    cr_assert_eq(sq_context_forward(cpu, tok, pos, mask, n, a, &err), 0, "%s", err.msg);
    cr_assert_eq(sq_context_forward(gpu, tok, pos, mask, n, b, &err), 0, "%s", err.msg);
    double scale = max_abs(a, (size_t)n * V), worst = 0.0;
    int at = -1;
    for (size_t i = 0; i < (size_t)n * V; i++) {
        double d = fabs((double)a[i] - b[i]);
        if (!(d <= worst)) {   /* NaN counts as the worst */
            worst = isnan(d) ? INFINITY : d;
            at = (int)i;
        }
    }
    cr_assert(worst <= tol * scale, "head_dim %d, heads %d/%d, vocab %d, %d layers, %s%s: %s: "
              "max |diff| %g at token %d (tolerance %g of %g)", sc->head_dim, sc->n_heads,
              sc->n_kv_heads, sc->vocab, sc->layers, sq_weight_dtype_name(sc->dtype),
              sc->offload ? " offload" : "", what, worst, at / V, tol, scale);
    free(a);
    free(b);
}

ParameterizedTest(const shape_case *sc, emu, edge_shapes_agree_with_the_cpu)
{
    sq_error err = {0};
    if (sq_cuda_device_count(&err) < 1)
        cr_skip_test("no CUDA device (%s)", err.msg);
    sq_model_config c = {0};
    c.dim = sc->dim;
    c.hidden_dim = 2 * sc->dim + 8;
    c.n_layers = sc->layers;
    c.n_heads = sc->n_heads;
    c.n_kv_heads = sc->n_kv_heads;
    c.head_dim = sc->head_dim;
    c.vocab_size = sc->vocab;
    c.max_position = 256;
    c.rope_theta = 10000.0f;
    c.norm_eps = 1e-5f;
    strcpy(c.dtype, "F32");
    sq_model *m;
    cr_assert_eq(sq_model_new_random(&c, (uint64_t)sc->head_dim * 31 + sc->vocab, &m, &err), 0,
                 "%s", err.msg);
    sq_test_sharpen(m);
    const double tol = sc->dtype == SQ_DTYPE_BF16 ? 3e-2 : 1e-2;
    sq_context_params p = sq_context_default_params();
    p.max_context = sc->max_context;
    p.max_pending = sc->max_pending;
    p.threads = 1;
    sq_context *cpu, *gpu;
    cr_assert_eq(sq_context_new(m, &p, &cpu, &err), 0, "%s", err.msg);
    p.backend = SQ_BACKEND_CUDA;
    p.dtype = sc->dtype;
    p.offload = sc->offload;
    cr_assert_eq(sq_context_new(m, &p, &gpu, &err), 0, "%s", err.msg);

    const int P = sc->max_pending, V = sc->vocab, K = sc->kept;
    const int prefix = sc->max_context - K;
    int32_t *tok = malloc((size_t)P * sizeof *tok), *pos = malloc((size_t)P * sizeof *pos);
    int32_t *keep = malloc((size_t)P * sizeof *keep);
    int *parent = malloc((size_t)P * sizeof *parent), *depth = malloc((size_t)P * sizeof *depth);
    uint8_t *mask = malloc((size_t)P * P);
    uint64_t rs = (uint64_t)sc->head_dim * 977 + (uint64_t)sc->layers;
    /* the prefix, causal, in chunks of max_pending */
    for (int done = 0; done < prefix;) {
        int n = prefix - done < P ? prefix - done : P;
        memset(mask, 0, (size_t)n * n);
        for (int i = 0; i < n; i++) {
            tok[i] = (int32_t)(next(&rs) % (uint64_t)V);
            pos[i] = done + i;
            keep[i] = i;
            for (int j = 0; j <= i; j++)
                mask[i * n + j] = 1;
        }
        both_forward(cpu, gpu, tok, pos, mask, n, V, tol, "prefix", sc);
        cr_assert_eq(sq_context_commit(cpu, keep, n, &err), 0, "%s", err.msg);
        cr_assert_eq(sq_context_commit(gpu, keep, n, &err), 0, "%s", err.msg);
        done += n;
    }
    /* a random tree of max_pending nodes in one forward */
    memset(mask, 0, (size_t)P * P);
    for (int i = 0; i < P; i++) {
        parent[i] = i == 0 ? -1 : (int)(next(&rs) % (uint64_t)i);
        depth[i] = i == 0 ? 0 : depth[parent[i]] + 1;
        tok[i] = (int32_t)(next(&rs) % (uint64_t)V);
        pos[i] = prefix + depth[i];
        for (int a = i; a >= 0; a = parent[a])
            mask[(size_t)i * P + a] = 1;
    }
    both_forward(cpu, gpu, tok, pos, mask, P, V, tol, "tree of max_pending", sc);
    /* keep K nodes (a root path if it is long enough, else any), in a scrambled order */
    int nk = 0;
    for (int i = P - 1; i >= 0 && nk < K; i--)
        keep[nk++] = i;
    for (int i = nk - 1; i > 0; i--) {
        int j = (int)(next(&rs) % (uint64_t)(i + 1));
        int32_t t = keep[i];
        keep[i] = keep[j];
        keep[j] = t;
    }
    cr_assert_eq(sq_context_commit(cpu, keep, nk, &err), 0, "%s", err.msg);
    cr_assert_eq(sq_context_commit(gpu, keep, nk, &err), 0, "%s", err.msg);
    cr_assert_eq(sq_context_committed(gpu), sc->max_context, "the context is full");
    /* n = 1 with a full context */
    tok[0] = (int32_t)(next(&rs) % (uint64_t)V);
    pos[0] = sc->max_context;
    mask[0] = 1;
    both_forward(cpu, gpu, tok, pos, mask, 1, V, tol, "one token, full context", sc);
    free(tok);
    free(pos);
    free(keep);
    free(parent);
    free(depth);
    free(mask);
    sq_context_free(cpu);
    sq_context_free(gpu);
    sq_model_free(m);
}
