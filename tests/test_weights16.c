/* Suite 'weights16': 16-bit weights on the CPU (docs/runtime.md, "16-bit weights on the CPU").
 *   - a BF16 (or F16) checkpoint is read as stored: the model's dtype is the checkpoint's, a
 *     default context computes in it, and the model owns no copy of its matrices (owned bytes
 *     = its norms as float32);
 *   - the same checkpoint computed in f32 (a converted set the model makes once, 4 bytes per
 *     matrix parameter, shared by its contexts) gives the bf16 context's logits within 1e-5 of
 *     the largest logit (both multiply the same widened values; only the summation order of the
 *     BLAS and skinny paths differs), for one token and for a tree of 20 (BLAS path);
 *   - f16 of a BF16 checkpoint and bf16 of an F32 one convert the matrices (2 bytes each),
 *     within a 16-bit tolerance (3e-2 of the largest logit) of the f32 logits;
 *   - random weights in bf16 take 2 bytes per matrix parameter, as the estimator counts them;
 *   - sequoia-run --dtype bf16 on BF16 checkpoints: greedy speculative decoding equals the
 *     target's greedy decoding (--validate), and the report says bf16. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "libsequoia/base/json.h"
#include "libsequoia/format/curve.h"
#include "libsequoia/format/plan.h"
#include "libsequoia/format/tree.h"
#include "runtime/arch.h"
#include "runtime/backend.h"
#include "runtime/memory.h"
#include "runtime/model.h"
#include "runtime/st_writer.h"
#include "tests/testutil.h"

static char *write_model(const char *dir, const char *name, const char *dtype, uint64_t seed)
{
    char *path = tu_path(dir, name);
    sq_random_model_params p = sq_random_model_default_params();
    p.seed = seed;
    p.config.dim = 128;          /* rows of 128: the kernels' vector body, not only tails */
    p.config.hidden_dim = 200;
    p.config.head_dim = 32;
    snprintf(p.config.dtype, sizeof p.config.dtype, "%s", dtype);
    sq_error err = {0};
    cr_assert_eq(sq_model_write_random(path, &p, &err), 0, "%s", err.msg);
    return path;
}

static sq_model *load(const char *path)
{
    sq_model *m;
    sq_error err = {0};
    cr_assert_eq(sq_model_load(path, &m, &err), 0, "%s", err.msg);
    return m;
}

/* bytes of the model's vectors and matrices (parameters) */
static void counts(const sq_model_config *c, double *vec, double *mat)
{
    *vec = *mat = 0;
    for (int k = 0; k < sq_arch_count(c); k++) {
        sq_arch_item it;
        sq_arch_tensor_at(c, k, &it);
        if (!it.tied)
            *(it.ndim == 2 ? mat : vec) += (double)it.numel;
    }
}

/* logits of a prefix of 3 tokens then a chain of n tokens, in dtype */
static float *logits_of(const sq_model *m, sq_weight_dtype dtype, int n)
{
    sq_context_params cp = sq_context_default_params();
    cp.max_context = 16;
    cp.max_pending = 32;
    cp.threads = 2;
    cp.dtype = dtype;
    sq_context *ctx;
    sq_error err = {0};
    cr_assert_eq(sq_context_new(m, &cp, &ctx, &err), 0, "%s", err.msg);
    cr_assert_eq(sq_context_dtype(ctx), dtype == SQ_DTYPE_AUTO ? sq_model_dtype(m) : dtype);
    const int V = sq_model_get_config(m)->vocab_size;
    int32_t tok[32], pos[32];
    uint8_t mask[32 * 32] = {0};
    float *lg = malloc(sizeof(float) * (size_t)V * 32);
    int32_t pre[3] = {5, 60, 96}, ppos[3] = {0, 1, 2};
    uint8_t pm[9] = {1, 0, 0, 1, 1, 0, 1, 1, 1};
    cr_assert_eq(sq_context_forward(ctx, pre, ppos, pm, 3, lg, &err), 0, "%s", err.msg);
    int32_t keep[3] = {0, 1, 2};
    cr_assert_eq(sq_context_commit(ctx, keep, 3, &err), 0, "%s", err.msg);
    for (int i = 0; i < n; i++) {
        tok[i] = (i * 37 + 11) % V;
        pos[i] = 3 + i;
        for (int j = 0; j <= i; j++)
            mask[i * n + j] = 1;
    }
    cr_assert_eq(sq_context_forward(ctx, tok, pos, mask, n, lg, &err), 0, "%s", err.msg);
    sq_context_free(ctx);
    return lg;
}

static void assert_close(const float *a, const float *b, size_t count, double rel,
                         const char *what)
{
    double mx = 0, worst = 0;
    for (size_t i = 0; i < count; i++)
        mx = fmax(mx, fabs(b[i]));
    for (size_t i = 0; i < count; i++)
        worst = fmax(worst, fabs((double)a[i] - b[i]));
    cr_assert(worst <= rel * mx, "%s: worst difference %g, %g of the largest logit %g (bound %g)",
              what, worst, worst / mx, mx, rel);
}

Test(weights16, bf16_checkpoint_is_used_as_stored_and_matches_f32)
{
    char *dir = tu_tmpdir();
    char *path = write_model(dir, "bf16", "BF16", 3);
    sq_model *m = load(path);
    const sq_model_config *c = sq_model_get_config(m);
    double vec, mat;
    counts(c, &vec, &mat);
    cr_assert_eq(sq_model_dtype(m), SQ_DTYPE_BF16);
    /* no float32 copy: only the norms are the model's own */
    cr_assert_eq(sq_model_owned_bytes(m), (size_t)(4 * vec), "owned %zu",
                 sq_model_owned_bytes(m));
    cr_assert_eq(sq_weights_bytes(c), 4 * vec + 2 * mat);
    const size_t V = (size_t)c->vocab_size;
    for (int n = 1; n <= 20; n += 19) {
        const size_t before = sq_model_owned_bytes(m);
        float *a = logits_of(m, SQ_DTYPE_AUTO, n);
        cr_assert_eq(sq_model_owned_bytes(m), before, "a bf16 context copies nothing");
        float *b = logits_of(m, SQ_DTYPE_F32, n);
        /* the f32 set: 4 bytes per matrix parameter, made once */
        cr_assert_eq(sq_model_owned_bytes(m), (size_t)(4 * vec + 4 * mat + (n > 1 ? 2 * mat : 0)));
        assert_close(a, b, (size_t)n * V, 1e-5, n == 1 ? "bf16 vs f32, 1 token" : "bf16 vs f32, 20");
        float *h = logits_of(m, SQ_DTYPE_F16, n);
        assert_close(h, b, (size_t)n * V, 3e-2, "f16 (converted) vs f32");
        free(a), free(b), free(h);
    }
    cr_assert_eq(sq_model_owned_bytes(m), (size_t)(4 * vec + 4 * mat + 2 * mat));
    sq_model_free(m);
    tu_rmtree(dir);
}

Test(weights16, f16_checkpoint_and_f32_checkpoint_in_bf16)
{
    char *dir = tu_tmpdir();
    sq_model *h = load(write_model(dir, "f16", "F16", 4));
    sq_model *f = load(write_model(dir, "f32", "F32", 4));
    cr_assert_eq(sq_model_dtype(h), SQ_DTYPE_F16);
    cr_assert_eq(sq_model_dtype(f), SQ_DTYPE_F32);
    cr_assert_eq(sq_model_owned_bytes(f), 0, "an aligned F32 checkpoint is read in place");
    const size_t V = (size_t)sq_model_get_config(f)->vocab_size;
    double vec, mat;
    counts(sq_model_get_config(f), &vec, &mat);
    for (int n = 1; n <= 20; n += 19) {
        float *ref = logits_of(f, SQ_DTYPE_AUTO, n);
        float *a = logits_of(h, SQ_DTYPE_AUTO, n);
        float *b = logits_of(f, SQ_DTYPE_BF16, n);
        assert_close(a, ref, (size_t)n * V, 3e-3, "F16 checkpoint vs F32");
        assert_close(b, ref, (size_t)n * V, 3e-2, "F32 checkpoint as bf16 vs f32");
        free(ref), free(a), free(b);
    }
    cr_assert_eq(sq_model_owned_bytes(f), (size_t)(2 * mat));
    sq_model_free(h);
    sq_model_free(f);
    tu_rmtree(dir);
}

Test(weights16, random_weights_in_bf16_take_two_bytes_per_matrix_parameter)
{
    sq_random_model_params rp = sq_random_model_default_params();
    sq_model *r32, *r16;
    sq_error err = {0};
    cr_assert_eq(sq_model_new_random_dtype(&rp.config, 9, SQ_DTYPE_BF16, &r16, &err), 0, "%s",
                 err.msg);
    cr_assert_eq(sq_model_new_random(&rp.config, 9, &r32, &err), 0, "%s", err.msg);
    double vec, mat;
    counts(&rp.config, &vec, &mat);
    cr_assert_str_eq(sq_model_get_config(r16)->dtype, "BF16");
    cr_assert_eq(sq_model_dtype(r16), SQ_DTYPE_BF16);
    cr_assert_eq(sq_model_owned_bytes(r16), (size_t)(4 * vec + 2 * mat));
    cr_assert_eq(sq_model_owned_bytes(r16), (size_t)sq_weights_bytes(sq_model_get_config(r16)));
    /* the bytes a forward reads: every matrix but the embedding, and the vectors */
    const sq_model_config *c = sq_model_get_config(r16);
    double embed = (double)c->vocab_size * c->dim;
    cr_assert_eq(sq_weights_read_bytes(c, SQ_DTYPE_AUTO), 4 * vec + 2 * (mat - embed));
    cr_assert_eq(sq_weights_read_bytes(c, SQ_DTYPE_F32), 4 * vec + 4 * (mat - embed));
    /* the same values, rounded */
    float *a = logits_of(r16, SQ_DTYPE_AUTO, 4), *b = logits_of(r32, SQ_DTYPE_AUTO, 4);
    assert_close(a, b, 4 * (size_t)c->vocab_size, 3e-2, "random bf16 vs f32");
    free(a), free(b);
    sq_model_free(r16);
    sq_model_free(r32);
}

Test(weights16, sequoia_run_dtype_bf16_greedy_equals_the_targets_greedy)
{
    const char *bin = getenv("SQ_RUN_BIN");
    cr_assert_not_null(bin, "SQ_RUN_BIN is set by meson");
    char *dir = tu_tmpdir();
    char *draft = write_model(dir, "draft", "BF16", 2), *target = write_model(dir, "target", "BF16", 1);
    /* a small tree: root, two children, two grandchildren */
    const int parent[7] = {-1, 0, 0, 1, 1, 2, 3}, rank[7] = {0, 1, 2, 1, 2, 1, 1};
    sq_tree *t;
    sq_error err = {0};
    cr_assert_eq(sq_tree_from_parents(parent, rank, 7, &t, "test", &err), 0, "%s", err.msg);
    const double p[4] = {0.5, 0.2, 0.1, 0.05};
    sq_curve cv = {0};
    cr_assert_eq(sq_curve_init(&cv, "test", "greedy", p, 4, &err), 0, "%s", err.msg);
    sq_plan *plan;
    cr_assert_eq(sq_plan_new(t, &cv, 0, 0, 0, &plan, &err), 0, "%s", err.msg);
    sq_curve_clear(&cv);
    char *pf = tu_path(dir, "plan.json"), *prompt = tu_path(dir, "prompt.txt");
    cr_assert_eq(sq_plan_save(pf, plan, &err), 0, "%s", err.msg);
    sq_plan_free(plan);
    tu_write(prompt, "5 17 42\n");
    const char *dts[2] = {"bf16", NULL};
    for (int k = 0; k < 2; k++) {
        char *rep = tu_path(dir, k ? "auto.json" : "bf16.json"), *out = tu_path(dir, "out.txt");
        char *argv[] = {(char *)bin, "--draft", draft, "--target", target, "--plan", pf,
                        "--prompt", prompt, "-n", "24", "--mode", "greedy", "-o", out,
                        "--report", rep, "--validate", "--threads", "2",
                        dts[k] ? "--dtype" : NULL, (char *)dts[k], NULL};
        char *so, *se;
        int rc = tu_run(argv, &so, &se);
        cr_assert_eq(rc, 0, "stderr: %s", se);
        cr_assert(strstr(se, "greedy output identical"), "%s", se);
        cJSON *j;
        cr_assert_eq(sq_json_load(rep, &j, &err), 0, "%s", err.msg);
        const cJSON *setup = cJSON_GetObjectItem(j, "setup");
        const cJSON *dt = cJSON_GetObjectItem(setup ? setup : j, "dtype");
        cr_assert(cJSON_IsString(dt) && strcmp(dt->valuestring, "bf16") == 0,
                  "the report's dtype (default: the checkpoint's)");
        cJSON_Delete(j);
        free(so), free(se), free(rep), free(out);
    }
    tu_rmtree(dir);
}
