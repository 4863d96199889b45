/* The trained draft/target pair shipped in data/models/ (issue 8).
 *
 * The C runtime loads both checkpoints unchanged and recomputes their held-out bits per byte
 * over the slice that examples/train_pair.py evaluated (data/models/metrics.json, "eval"): the
 * first eval_bytes of data/heldout.txt in non-overlapping windows of eval_window bytes, every
 * byte of a window but the first predicted from the bytes before it in that window. The figures
 * must agree with the ones recorded by the training script (float32 PyTorch) within 1%, and
 * with those printed in data/README.md. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "libsequoia/base/json.h"
#include "runtime/model.h"
#include "tests/testutil.h"

#define VOCAB 256

typedef struct recorded {
    double bpb;          /* heldout_bits_per_byte       */
    long long params;    /* parameters                  */
    long long predicted; /* heldout_predicted_bytes     */
} recorded;

typedef struct eval_slice {
    long long heldout_len;  /* heldout_bytes[1] - heldout_bytes[0] */
    int eval_bytes;
    int window;
} eval_slice;

static cJSON *load_metrics(void)
{
    char *path = tu_source_path("data/models/metrics.json");
    cJSON *root = NULL;
    sq_error err = {0};
    int rc = sq_json_load(path, &root, &err);
    cr_assert_eq(rc, SQ_OK, "%s", err.msg);
    free(path);
    return root;
}

static recorded get_recorded(const cJSON *root, const char *name)
{
    const cJSON *models = cJSON_GetObjectItemCaseSensitive(root, "models");
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(models, name);
    cr_assert(cJSON_IsObject(m), "metrics.json: models.%s: missing", name);
    recorded r = {0};
    sq_error err = {0};
    int rc = sq_json_get_number(m, "heldout_bits_per_byte", 1, &r.bpb, "metrics.json", name,
                                &err);
    if (!rc)
        rc = sq_json_get_int(m, "parameters", 1, 1, 1LL << 40, &r.params, "metrics.json", name,
                             &err);
    if (!rc)
        rc = sq_json_get_int(m, "heldout_predicted_bytes", 1, 1, 1LL << 40, &r.predicted,
                             "metrics.json", name, &err);
    cr_assert_eq(rc, SQ_OK, "%s", err.msg);
    return r;
}

static eval_slice get_slice(const cJSON *root)
{
    eval_slice s = {0};
    const cJSON *ev = cJSON_GetObjectItemCaseSensitive(root, "eval");
    const cJSON *text = cJSON_GetObjectItemCaseSensitive(root, "text");
    const cJSON *range = cJSON_GetObjectItemCaseSensitive(text, "heldout_bytes");
    cr_assert(cJSON_IsArray(range) && cJSON_GetArraySize(range) == 2,
              "metrics.json: text.heldout_bytes: expected [begin, end]");
    s.heldout_len = (long long)(cJSON_GetArrayItem(range, 1)->valuedouble -
                                cJSON_GetArrayItem(range, 0)->valuedouble);
    long long eb = 0, ew = 0;
    sq_error err = {0};
    int rc = sq_json_get_int(ev, "eval_bytes", 1, 2, 1 << 24, &eb, "metrics.json", "eval", &err);
    if (!rc)
        rc = sq_json_get_int(ev, "eval_window", 1, 2, 4096, &ew, "metrics.json", "eval", &err);
    cr_assert_eq(rc, SQ_OK, "%s", err.msg);
    s.eval_bytes = (int)eb;
    s.window = (int)ew;
    return s;
}

static sq_model *load_model(const char *name)
{
    char rel[64];
    snprintf(rel, sizeof rel, "data/models/%s", name);
    char *dir = tu_source_path(rel);
    sq_model *m = NULL;
    sq_error err = {0};
    int rc = sq_model_load(dir, &m, &err);
    cr_assert_eq(rc, SQ_OK, "loading %s: %s", dir, err.msg);
    free(dir);
    return m;
}

/* Parameters implied by the configuration, counted like the training script (a tied
 * lm_head is not counted twice). */
static long long config_params(const sq_model_config *c)
{
    long long dim = c->dim, q = (long long)c->n_heads * c->head_dim;
    long long kv = (long long)c->n_kv_heads * c->head_dim;
    long long layer = dim * q * 2 + dim * kv * 2 + 3 * dim * c->hidden_dim + 2 * dim;
    long long p = (long long)c->vocab_size * dim + c->n_layers * layer + dim;
    if (!c->tied_embeddings)
        p += (long long)c->vocab_size * dim;
    return p;
}

/* Bits per byte of `name` over the evaluation slice, computed with the runtime. */
static double runtime_bpb(const char *name, const eval_slice *s, long long *predicted)
{
    size_t len = 0;
    char *path = tu_source_path("data/heldout.txt");
    unsigned char *text = (unsigned char *)tu_read(path, &len);
    cr_assert_not_null(text, "%s: missing", path);
    cr_assert_eq((long long)len, s->heldout_len,
                 "%s: %zu bytes, but metrics.json records %lld", path, len, s->heldout_len);
    cr_assert_geq((long long)len, s->eval_bytes);
    free(path);

    sq_model *m = load_model(name);
    const int n = s->window - 1;  /* tokens fed per window */
    sq_context_params cp = sq_context_default_params();
    cp.max_context = s->window;
    cp.max_pending = s->window;
    sq_context *ctx = NULL;
    sq_error err = {0};
    cr_assert_eq(sq_context_new(m, &cp, &ctx, &err), SQ_OK, "%s", err.msg);

    int32_t *tok = malloc((size_t)n * sizeof *tok);
    int32_t *pos = malloc((size_t)n * sizeof *pos);
    uint8_t *mask = calloc((size_t)n * (size_t)n, 1);
    float *logits = malloc((size_t)n * VOCAB * sizeof *logits);
    cr_assert(tok && pos && mask && logits);
    for (int i = 0; i < n; i++) {
        pos[i] = i;
        for (int j = 0; j <= i; j++)
            mask[(size_t)i * (size_t)n + (size_t)j] = 1;  /* causal */
    }

    double nll = 0.0;
    long long count = 0;
    for (int w = 0; w + s->window <= s->eval_bytes; w += s->window) {
        const unsigned char *x = text + w;
        for (int i = 0; i < n; i++)
            tok[i] = x[i];
        sq_context_reset(ctx);
        cr_assert_eq(sq_context_forward(ctx, tok, pos, mask, n, logits, &err), SQ_OK, "%s",
                     err.msg);
        for (int i = 0; i < n; i++) {
            const float *l = logits + (size_t)i * VOCAB;
            double mx = l[0];
            for (int v = 1; v < VOCAB; v++)
                mx = l[v] > mx ? l[v] : mx;
            double z = 0.0;
            for (int v = 0; v < VOCAB; v++)
                z += exp(l[v] - mx);
            nll += mx + log(z) - l[x[i + 1]];
            count++;
        }
    }
    free(tok);
    free(pos);
    free(mask);
    free(logits);
    free(text);
    sq_context_free(ctx);
    sq_model_free(m);
    *predicted = count;
    return nll / (double)count / log(2.0);
}

static void check_model(const char *name, long long min_params, long long max_params)
{
    cJSON *root = load_metrics();
    recorded r = get_recorded(root, name);
    eval_slice s = get_slice(root);
    cJSON_Delete(root);

    sq_model *m = load_model(name);
    const sq_model_config *c = sq_model_get_config(m);
    cr_expect_eq(c->vocab_size, VOCAB, "%s: vocab_size %d, expected the 256 bytes", name,
                 c->vocab_size);
    long long p = config_params(c);
    cr_expect_eq(p, r.params, "%s: config implies %lld parameters, metrics.json records %lld",
                 name, p, r.params);
    cr_expect(p >= min_params && p <= max_params, "%s: %lld parameters outside [%lld, %lld]",
              name, p, min_params, max_params);
    sq_model_free(m);

    long long predicted = 0;
    double bpb = runtime_bpb(name, &s, &predicted);
    cr_expect_eq(predicted, r.predicted, "%s: predicted %lld bytes, metrics.json says %lld",
                 name, predicted, r.predicted);
    cr_expect(fabs(bpb - r.bpb) <= 0.01 * r.bpb,
              "%s: held-out %.6f bits/byte with the runtime, %.6f recorded (more than 1%% apart)",
              name, bpb, r.bpb);
    cr_log_info("%s: %.6f bits/byte (runtime), %.6f (recorded)", name, bpb, r.bpb);
}

Test(shipped_models, target_heldout_bits_per_byte_matches_the_record, .timeout = 240)
{
    check_model("target", 2000000, 8000000);
}

Test(shipped_models, draft_heldout_bits_per_byte_matches_the_record, .timeout = 240)
{
    check_model("draft", 100000, 500000);
}

/* The CPU-speedup target (issue 16): >= 16M parameters (>= 64 MB as float32 at run time, past
 * a 32 MB L3 cache), and better than the small target on the same held-out slice. */
Test(shipped_models, large_heldout_bits_per_byte_matches_the_record, .timeout = 300)
{
    check_model("large", 16000000, 40000000);
    cJSON *root = load_metrics();
    recorded l = get_recorded(root, "large"), t = get_recorded(root, "target");
    cJSON_Delete(root);
    cr_expect(l.bpb < t.bpb, "large %.4f bits/byte does not beat the target's %.4f", l.bpb, t.bpb);
}

Test(shipped_models, target_is_clearly_better_than_draft)
{
    cJSON *root = load_metrics();
    recorded t = get_recorded(root, "target"), d = get_recorded(root, "draft");
    cJSON_Delete(root);
    cr_expect(t.bpb > 0.5 && t.bpb < 8.0, "target: %.4f bits/byte is implausible", t.bpb);
    cr_expect(t.bpb < d.bpb - 0.1, "target %.4f bits/byte does not beat draft %.4f by 0.1",
              t.bpb, d.bpb);
}

/* data/README.md prints the figures to 4 decimals; they must be the recorded ones. */
Test(shipped_models, readme_states_the_recorded_figures)
{
    cJSON *root = load_metrics();
    recorded t = get_recorded(root, "target"), d = get_recorded(root, "draft");
    recorded l = get_recorded(root, "large");
    cJSON_Delete(root);
    char *path = tu_source_path("data/README.md");
    char *readme = tu_read(path, NULL);
    cr_assert_not_null(readme, "%s: missing", path);
    char want[64];
    snprintf(want, sizeof want, "%.4f", t.bpb);
    cr_expect_not_null(strstr(readme, want), "%s: does not state the target's %s bits/byte",
                       path, want);
    snprintf(want, sizeof want, "%.4f", d.bpb);
    cr_expect_not_null(strstr(readme, want), "%s: does not state the draft's %s bits/byte", path,
                       want);
    snprintf(want, sizeof want, "%.4f", l.bpb);
    cr_expect_not_null(strstr(readme, want), "%s: does not state the large target's %s bits/byte",
                       path, want);
    free(readme);
    free(path);
}
