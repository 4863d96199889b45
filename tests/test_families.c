/* The model families of issue 24 on the CPU (docs/runtime.md, "Model families"): config.json
 * forms, RoPE tables against a float64 derivation, every family's forward against a float64
 * reference written here (one loop over tokens, positions and keys; independent of runtime/cpu.c
 * except for reading the loaded weights), incremental and tree forwards against it (sliding
 * windows inside a tree), batch equals alone, greedy speculative decoding equals target-only
 * greedy decoding, and the refusals (bad input: exit 65 with the file and the field).
 *
 * Checkpoints come from sq_model_write_random (runtime/st_writer.h): the family's config and a
 * seed decide every value (tensor stream seeded by seed ^ FNV-1a(name), docs/runtime.md). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "libsequoia/base/half.h"
#include "libsequoia/base/json.h"
#include "libsequoia/format/corpus.h"
#include "libsequoia/format/plan.h"
#include "runtime/arch.h"
#include "runtime/backend.h"
#include "runtime/config.h"
#include "runtime/dump.h"
#include "runtime/model.h"
#include "runtime/prefill.h"
#include "runtime/rope.h"
#include "runtime/specdec.h"
#include "runtime/st_writer.h"
#include "runtime/validate.h"
#include "tests/testutil.h"

/* ---- float64 reference ----------------------------------------------------------------------- */

/* The RoPE inverse frequencies and attention factor, derived again in double from the formulas
 * of transformers' modeling_rope_utils. */
static void ref_rope(const sq_model_config *c, const sq_rope_params *r, double *inv, double *af)
{
    const int d = c->head_dim, half = d / 2;
    const double theta = r->theta > 0 ? r->theta : c->rope_theta;
    const double orig = r->original_max_position > 0 ? r->original_max_position
                                                     : c->max_position;
    *af = 1;
    for (int i = 0; i < half; i++) {
        double base = 1.0 / pow(theta, 2.0 * i / d);
        switch (r->type) {
        case SQ_ROPE_LINEAR:
            base /= r->factor;
            break;
        case SQ_ROPE_LLAMA3: {
            double wl = 2 * M_PI / base;
            double lo = orig / r->low_freq_factor, hi = orig / r->high_freq_factor;
            if (wl > lo)
                base /= r->factor;
            else if (wl >= hi) {
                double s = (orig / wl - r->low_freq_factor) /
                           (r->high_freq_factor - r->low_freq_factor);
                base = (1 - s) * base / r->factor + s * base;
            }
            break;
        }
        case SQ_ROPE_YARN: {
            double fast = r->beta_fast > 0 ? r->beta_fast : 32;
            double slow = r->beta_slow > 0 ? r->beta_slow : 1;
            double lo = floor(d * log(orig / (fast * 2 * M_PI)) / (2 * log(theta)));
            double hi = ceil(d * log(orig / (slow * 2 * M_PI)) / (2 * log(theta)));
            lo = fmax(lo, 0);
            hi = fmin(hi, d - 1);
            if (lo == hi)
                hi += 0.001;
            double ramp = fmin(fmax((i - lo) / (hi - lo), 0), 1);
            base = base / r->factor * ramp + base * (1 - ramp);
            *af = r->attention_factor > 0 ? r->attention_factor
                                          : 0.1 * log(r->factor) + 1.0;
            break;
        }
        default:
            break;
        }
        inv[i] = base;
    }
}

static void ref_norm(double *out, const double *x, const float *w, int n, double eps, int gemma)
{
    double ss = 0;
    for (int k = 0; k < n; k++)
        ss += x[k] * x[k];
    double sc = 1.0 / sqrt(ss / n + eps);
    for (int k = 0; k < n; k++)
        out[k] = x[k] * sc * ((gemma ? 1.0 : 0.0) + w[k]);
}

/* y (rows) = W (rows, cols) x + b */
static void ref_linear(double *y, const float *W, const float *b, const double *x, int rows,
                       int cols)
{
    for (int r = 0; r < rows; r++) {
        double s = b ? b[r] : 0;
        for (int k = 0; k < cols; k++)
            s += (double)W[(size_t)r * cols + k] * x[k];
        y[r] = s;
    }
}

/* Logits (n, V) of tokens tok[0..n) at positions 0..n-1, causal. */
static double *ref_forward(const sq_model *m, const int32_t *tok, int n)
{
    const sq_model_config *c = &m->config;
    /* the weights widened to float32 (a 16-bit checkpoint's are used as stored by the model) */
    const sq_weights *w = NULL;
    sq_error werr = {0};
    cr_assert_eq(sq_model_weights_as(m, SQ_DTYPE_F32, &w, &werr), 0, "%s", werr.msg);
    const int D = c->dim, H = c->hidden_dim, hd = c->head_dim, nh = c->n_heads;
    const int nkv = c->n_kv_heads, qd = nh * hd, kvd = nkv * hd, V = c->vocab_size;
    const int G = c->gemma;
    double *x = calloc((size_t)n * D, sizeof *x), *xb = malloc(sizeof(double) * D);
    double *q = malloc(sizeof(double) * (size_t)n * qd), *k = malloc(sizeof(double) * n * kvd);
    double *v = malloc(sizeof(double) * (size_t)n * kvd), *att = malloc(sizeof(double) * qd);
    double *o = malloc(sizeof(double) * D), *g = malloc(sizeof(double) * H);
    double *u = malloc(sizeof(double) * H), *sc = malloc(sizeof(double) * n);
    double *logits = malloc(sizeof(double) * (size_t)n * V);
    double inv[2][512], af[2];
    ref_rope(c, &c->rope, inv[0], &af[0]);
    ref_rope(c, c->rope_local.theta > 0 ? &c->rope_local : &c->rope, inv[1], &af[1]);
    double es = 1;
    if (G) {
        es = (float)sqrt((double)D);
        if (strcmp(c->dtype, "BF16") == 0)
            es = sq_bf16_to_f32(sq_f32_to_bf16((float)es));
    }
    for (int i = 0; i < n; i++)
        for (int j = 0; j < D; j++)
            x[(size_t)i * D + j] = ((const float *)w->t[SQ_M_EMBED].p)[(size_t)tok[i] * D + j] * es;
    const double scale = 1.0 / sqrt(c->query_pre_attn_scalar > 0 ? c->query_pre_attn_scalar
                                                                 : (double)hd);
    for (int l = 0; l < c->n_layers; l++) {
        const sq_wt *lw = w->layers[l].t;
        const int slide = sq_model_layer_sliding(c, l);
        const int set = slide && c->rope_local.theta > 0;
        for (int i = 0; i < n; i++) {
            ref_norm(xb, x + (size_t)i * D, lw[SQ_L_ATTN_NORM].p, D, c->norm_eps, G);
            ref_linear(q + (size_t)i * qd, lw[SQ_L_WQ].p, lw[SQ_L_BQ].p, xb, qd, D);
            ref_linear(k + (size_t)i * kvd, lw[SQ_L_WK].p, lw[SQ_L_BK].p, xb, kvd, D);
            ref_linear(v + (size_t)i * kvd, lw[SQ_L_WV].p, lw[SQ_L_BV].p, xb, kvd, D);
            for (int h = 0; h < nh + nkv; h++) {
                double *vec = h < nh ? q + (size_t)i * qd + h * hd
                                     : k + (size_t)i * kvd + (h - nh) * hd;
                if (c->qk_norm) {
                    double tmp[512];
                    ref_norm(tmp, vec, lw[h < nh ? SQ_L_Q_NORM : SQ_L_K_NORM].p, hd, c->norm_eps,
                             G);
                    memcpy(vec, tmp, sizeof(double) * hd);
                }
                for (int p = 0; p < hd / 2; p++) {
                    double a = i * inv[set][p], cs = cos(a) * af[set], sn = sin(a) * af[set];
                    double x0 = vec[p], x1 = vec[p + hd / 2];
                    vec[p] = x0 * cs - x1 * sn;
                    vec[p + hd / 2] = x1 * cs + x0 * sn;
                }
            }
        }
        for (int i = 0; i < n; i++) {
            for (int h = 0; h < nh; h++) {
                const int kh = h / (nh / nkv);
                double mx = -INFINITY, sum = 0;
                for (int j = 0; j <= i; j++) {
                    double s = 0;
                    for (int e = 0; e < hd; e++)
                        s += q[(size_t)i * qd + h * hd + e] * k[(size_t)j * kvd + kh * hd + e];
                    s *= scale;
                    if (c->attn_softcap > 0)
                        s = c->attn_softcap * tanh(s / c->attn_softcap);
                    if (slide && i - j >= c->sliding_window)
                        s = -INFINITY;
                    sc[j] = s;
                    mx = fmax(mx, s);
                }
                for (int j = 0; j <= i; j++)
                    sum += sc[j] = exp(sc[j] - mx);
                for (int e = 0; e < hd; e++) {
                    double a = 0;
                    for (int j = 0; j <= i; j++)
                        a += sc[j] / sum * v[(size_t)j * kvd + kh * hd + e];
                    att[h * hd + e] = a;
                }
            }
            ref_linear(o, lw[SQ_L_WO].p, lw[SQ_L_BO].p, att, D, qd);
            if (G)
                ref_norm(o, o, lw[SQ_L_POST_ATTN_NORM].p, D, c->norm_eps, G);
            for (int j = 0; j < D; j++)
                x[(size_t)i * D + j] += o[j];
            ref_norm(xb, x + (size_t)i * D, lw[SQ_L_FFN_NORM].p, D, c->norm_eps, G);
            ref_linear(g, lw[SQ_L_GATE].p, lw[SQ_L_BGATE].p, xb, H, D);
            ref_linear(u, lw[SQ_L_UP].p, lw[SQ_L_BUP].p, xb, H, D);
            for (int j = 0; j < H; j++) {
                double a = g[j];
                a = c->act == SQ_ACT_GELU_TANH
                        ? 0.5 * a * (1 + tanh(sqrt(2 / M_PI) * (a + 0.044715 * a * a * a)))
                        : a / (1 + exp(-a));
                g[j] = a * u[j];
            }
            ref_linear(o, lw[SQ_L_DOWN].p, lw[SQ_L_BDOWN].p, g, D, H);
            if (G)
                ref_norm(o, o, lw[SQ_L_POST_FFN_NORM].p, D, c->norm_eps, G);
            for (int j = 0; j < D; j++)
                x[(size_t)i * D + j] += o[j];
        }
    }
    for (int i = 0; i < n; i++) {
        ref_norm(xb, x + (size_t)i * D, w->t[SQ_M_NORM].p, D, c->norm_eps, G);
        ref_linear(logits + (size_t)i * V, w->t[SQ_M_LM_HEAD].p, NULL, xb, V, D);
        if (c->final_softcap > 0)
            for (int j = 0; j < V; j++)
                logits[(size_t)i * V + j] =
                    c->final_softcap * tanh(logits[(size_t)i * V + j] / c->final_softcap);
    }
    free(x); free(xb); free(q); free(k); free(v); free(att); free(o); free(g); free(u);
    free(sc);
    return logits;
}

/* ---- the families' test configs ---------------------------------------------------------------- */

enum {
    F_LLAMA3, F_LLAMA_YARN, F_LLAMA_LINEAR, F_MISTRAL, F_QWEN2, F_QWEN3, F_GEMMA2, F_GEMMA2_BF16,
    F_GEMMA3, F_GEMMA3_MM, F_COUNT
};
static const char *const fam_names[F_COUNT] = {
    "llama3 (rope llama3, biases, head_dim 24, tied)", "llama (yarn)", "llama (linear)",
    "mistral (window 3)", "qwen2 (biases, window rule)", "qwen3 (q/k norms, head_dim 32)",
    "gemma2", "gemma2 bf16", "gemma3", "gemma3 (ConditionalGeneration)"};

static void set_slide(sq_model_config *c, int l)
{
    c->layer_sliding[l >> 3] |= (uint8_t)(1u << (l & 7));
}

static sq_random_model_params family(int f)
{
    sq_random_model_params p = sq_random_model_default_params();
    sq_model_config *c = &p.config;
    c->n_layers = 3;
    c->max_position = 4096;
    switch (f) {
    case F_LLAMA3:
        c->head_dim = 24;   /* 4 * 24 != 64 */
        c->rope = (sq_rope_params){.type = SQ_ROPE_LLAMA3, .factor = 8, .low_freq_factor = 1,
                                   .high_freq_factor = 4, .original_max_position = 64};
        c->rope_theta = 500000;
        c->attn_bias = c->attn_out_bias = c->mlp_bias = 1;
        c->tied_embeddings = 1;
        break;
    case F_LLAMA_YARN:
        c->rope = (sq_rope_params){.type = SQ_ROPE_YARN, .factor = 4, .beta_fast = 32,
                                   .beta_slow = 1, .original_max_position = 256};
        break;
    case F_LLAMA_LINEAR:
        c->rope = (sq_rope_params){.type = SQ_ROPE_LINEAR, .factor = 2};
        break;
    case F_MISTRAL:
        c->arch = SQ_ARCH_MISTRAL;
        c->head_dim = 8;
        c->sliding_window = 3;
        for (int l = 0; l < c->n_layers; l++)
            set_slide(c, l);
        break;
    case F_QWEN2:
        c->arch = SQ_ARCH_QWEN2;
        c->attn_bias = 1;
        c->tied_embeddings = 1;
        c->sliding_window = 4;
        set_slide(c, 1);   /* max_window_layers 1 */
        set_slide(c, 2);
        break;
    case F_QWEN3:
        c->arch = SQ_ARCH_QWEN3;
        c->head_dim = 32;
        c->qk_norm = 1;
        c->rope_theta = 1000000;
        break;
    case F_GEMMA2:
    case F_GEMMA2_BF16:
        c->arch = SQ_ARCH_GEMMA2;
        c->gemma = 1;
        c->act = SQ_ACT_GELU_TANH;
        c->head_dim = 24;
        c->query_pre_attn_scalar = 20;
        c->attn_softcap = 0.5f;   /* small enough to bite on random weights */
        c->final_softcap = 3;
        c->tied_embeddings = 1;
        c->sliding_window = 3;
        set_slide(c, 0);
        set_slide(c, 2);
        if (f == F_GEMMA2_BF16)
            snprintf(c->dtype, sizeof c->dtype, "BF16");
        break;
    case F_GEMMA3:
    case F_GEMMA3_MM:
        c->arch = f == F_GEMMA3 ? SQ_ARCH_GEMMA3 : SQ_ARCH_GEMMA3_MM;
        c->gemma = 1;
        c->act = SQ_ACT_GELU_TANH;
        c->qk_norm = 1;
        c->head_dim = 16;
        c->query_pre_attn_scalar = 16;
        c->tied_embeddings = 1;
        c->rope_theta = 1000000;
        c->rope = (sq_rope_params){.type = SQ_ROPE_LINEAR, .factor = 8};
        c->rope_local.theta = 10000;
        c->sliding_window = 3;
        set_slide(c, 0);
        set_slide(c, 1);   /* pattern 3: layer 2 global */
        break;
    }
    p.seed = 100 + (uint64_t)f;
    return p;
}

static char *write_family(const char *dir, int f, uint64_t seed)
{
    sq_random_model_params p = family(f);
    p.seed += seed;
    char name[32];
    snprintf(name, sizeof name, "f%d-%llu", f, (unsigned long long)seed);
    char *path = tu_path(dir, name);
    sq_error err = {0};
    cr_assert_eq(sq_model_write_random(path, &p, &err), 0, "%s: %s", fam_names[f], err.msg);
    return path;
}

static sq_model *load(const char *path)
{
    sq_model *m;
    sq_error err = {0};
    cr_assert_eq(sq_model_load(path, &m, &err), 0, "%s", err.msg);
    return m;
}

static sq_context *ctx_new(const sq_model *m)
{
    sq_context_params cp = sq_context_default_params();
    cp.max_context = 64;
    cp.max_pending = 16;
    cp.threads = 2;
    sq_context *ctx;
    sq_error err = {0};
    cr_assert_eq(sq_context_new(m, &cp, &ctx, &err), 0, "%s", err.msg);
    return ctx;
}

/* |a - b| within tol of the reference's spread */
static double max_err(const float *a, const double *b, size_t n)
{
    double e = 0;
    for (size_t i = 0; i < n; i++)
        e = fmax(e, fabs(a[i] - b[i]));
    return e;
}

#define N_TOK 12
static const int32_t toks[N_TOK] = {5, 17, 3, 96, 41, 0, 8, 8, 60, 23, 77, 2};

/* ---- config forms ----------------------------------------------------------------------------- */

static int parse(const char *text, sq_model_config *c, sq_error *err)
{
    cJSON *root;
    int rc = sq_json_parse("config.json", text, strlen(text), &root, err);
    if (rc)
        return rc;
    rc = sq_model_config_parse("config.json", root, c, err);
    cJSON_Delete(root);
    return rc;
}

#define SIZES "\"hidden_size\": 64, \"intermediate_size\": 96, \"num_hidden_layers\": 4, " \
              "\"num_attention_heads\": 4, \"num_key_value_heads\": 2, \"vocab_size\": 97"

Test(families, transformers_4_and_5_rope_forms_agree)
{
    sq_model_config a, b;
    sq_error err = {0};
    cr_assert_eq(parse("{\"architectures\": [\"LlamaForCausalLM\"], " SIZES ", \"rope_theta\": "
                       "500000.0, \"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8.0, "
                       "\"low_freq_factor\": 1.0, \"high_freq_factor\": 4.0, "
                       "\"original_max_position_embeddings\": 8192}}", &a, &err), 0, "%s",
                 err.msg);
    cr_assert_eq(parse("{\"architectures\": [\"LlamaForCausalLM\"], " SIZES ", "
                       "\"rope_parameters\": {\"rope_type\": \"llama3\", \"rope_theta\": 500000.0,"
                       " \"factor\": 8.0, \"low_freq_factor\": 1.0, \"high_freq_factor\": 4.0, "
                       "\"original_max_position_embeddings\": 8192}}", &b, &err), 0, "%s",
                 err.msg);
    cr_assert_eq(a.rope.type, SQ_ROPE_LLAMA3);
    cr_assert_eq(a.rope_theta, 500000.0f);
    cr_assert_eq(memcmp(&a, &b, sizeof a), 0);
    /* Gemma-3: rope_theta + rope_local_base_freq + rope_scaling (4.x) against per-layer-type
     * rope_parameters (5.x) and layer_types against the pattern */
    cr_assert_eq(parse("{\"architectures\": [\"Gemma3ForCausalLM\"], " SIZES ", \"head_dim\": "
                       "16, \"rope_theta\": 1000000.0, \"rope_local_base_freq\": 10000.0, "
                       "\"rope_scaling\": {\"rope_type\": \"linear\", \"factor\": 8.0}, "
                       "\"sliding_window\": 512, \"sliding_window_pattern\": 2}", &a, &err),
                 0, "%s", err.msg);
    cr_assert_eq(parse("{\"architectures\": [\"Gemma3ForCausalLM\"], " SIZES ", \"head_dim\": "
                       "16, \"rope_parameters\": {\"full_attention\": {\"rope_type\": \"linear\", "
                       "\"factor\": 8.0, \"rope_theta\": 1000000.0}, \"sliding_attention\": "
                       "{\"rope_type\": \"default\", \"rope_theta\": 10000.0}}, "
                       "\"sliding_window\": 512, \"layer_types\": [\"sliding_attention\", "
                       "\"full_attention\", \"sliding_attention\", \"full_attention\"]}", &b,
                       &err), 0, "%s", err.msg);
    cr_assert_eq(a.rope.type, SQ_ROPE_LINEAR);
    cr_assert_eq(a.rope_local.theta, 10000.0f);
    cr_assert_eq(a.rope_local.type, SQ_ROPE_DEFAULT);
    cr_assert(sq_model_layer_sliding(&a, 0) && !sq_model_layer_sliding(&a, 1));
    cr_assert(sq_model_layer_sliding(&a, 2) && !sq_model_layer_sliding(&a, 3));
    cr_assert_eq(memcmp(&a, &b, sizeof a), 0);
    cr_assert_eq(sq_rope_of_layer(&a, 0), &a.rope_local);
    cr_assert_eq(sq_rope_of_layer(&a, 1), &a.rope);
}

Test(families, family_rules_and_defaults)
{
    sq_model_config c;
    sq_error err = {0};
    /* Qwen2: biases always; sliding only with use_sliding_window, from max_window_layers on */
    cr_assert_eq(parse("{\"architectures\": [\"Qwen2ForCausalLM\"], " SIZES ", "
                       "\"use_sliding_window\": true, \"sliding_window\": 8, "
                       "\"max_window_layers\": 2}", &c, &err), 0, "%s", err.msg);
    cr_assert(c.attn_bias && !c.attn_out_bias);
    cr_assert_eq(c.sliding_window, 8);
    for (int l = 0; l < 4; l++)
        cr_assert_eq(sq_model_layer_sliding(&c, l), l >= 2, "layer %d", l);
    cr_assert_eq(parse("{\"architectures\": [\"Qwen2ForCausalLM\"], " SIZES ", "
                       "\"use_sliding_window\": false, \"sliding_window\": 8, "
                       "\"max_window_layers\": 2}", &c, &err), 0, "%s", err.msg);
    for (int l = 0; l < 4; l++)
        cr_assert(!sq_model_layer_sliding(&c, l));
    /* Mistral: every layer; an explicit head_dim */
    cr_assert_eq(parse("{\"architectures\": [\"MistralForCausalLM\"], " SIZES ", \"head_dim\": 8,"
                       " \"sliding_window\": 4096}", &c, &err), 0, "%s", err.msg);
    cr_assert_eq(c.head_dim, 8);
    for (int l = 0; l < 4; l++)
        cr_assert(sq_model_layer_sliding(&c, l));
    cr_assert_eq(parse("{\"architectures\": [\"MistralForCausalLM\"], " SIZES ", "
                       "\"sliding_window\": null}", &c, &err), 0, "%s", err.msg);
    cr_assert(!sq_model_layer_sliding(&c, 0));
    /* Qwen3: q/k norms, attention_bias */
    cr_assert_eq(parse("{\"architectures\": [\"Qwen3ForCausalLM\"], " SIZES ", \"head_dim\": 32,"
                       " \"attention_bias\": false}", &c, &err), 0, "%s", err.msg);
    cr_assert(c.qk_norm && !c.attn_bias && c.head_dim == 32);
    /* Gemma-2 defaults: soft caps 50 / 30, even layers slide, tied, head_dim 256 */
    cr_assert_eq(parse("{\"architectures\": [\"Gemma2ForCausalLM\"], " SIZES "}", &c, &err), 0,
                 "%s", err.msg);
    cr_assert(c.gemma && c.act == SQ_ACT_GELU_TANH && c.tied_embeddings && c.head_dim == 256);
    cr_assert(c.attn_softcap == 50.0f && c.final_softcap == 30.0f);
    cr_assert(c.query_pre_attn_scalar == 256.0f && c.sliding_window == 4096);
    for (int l = 0; l < 4; l++)
        cr_assert_eq(sq_model_layer_sliding(&c, l), l % 2 == 0, "layer %d", l);
    /* Gemma-3: the pattern of 6, no caps; nested ConditionalGeneration */
    cr_assert_eq(parse("{\"architectures\": [\"Gemma3ForConditionalGeneration\"], \"model_type\":"
                       " \"gemma3\", \"text_config\": {\"model_type\": \"gemma3_text\", "
                       "\"hidden_size\": 64, \"intermediate_size\": 96, \"num_hidden_layers\": 7,"
                       " \"num_attention_heads\": 4, \"num_key_value_heads\": 2, \"vocab_size\": "
                       "97, \"head_dim\": 16}, \"vision_config\": {}}", &c, &err), 0, "%s",
                 err.msg);
    cr_assert(c.arch == SQ_ARCH_GEMMA3_MM && c.qk_norm && c.attn_softcap == 0 &&
              c.final_softcap == 0);
    for (int l = 0; l < 7; l++)
        cr_assert_eq(sq_model_layer_sliding(&c, l), l != 5, "layer %d", l);
    cr_assert_eq(c.rope_local.theta, 10000.0f);
    cr_assert_eq(c.rope_theta, 1000000.0f);
    sq_arch_item it;
    sq_arch_tensor_at(&c, 0, &it);
    cr_assert_str_eq(it.name, "language_model.model.embed_tokens.weight");
}

Test(families, config_round_trips_through_json)
{
    for (int f = 0; f < F_COUNT; f++) {
        sq_random_model_params p = family(f);
        cJSON *j = sq_model_config_to_json(&p.config);
        cr_assert_not_null(j);
        sq_model_config back;
        sq_error err = {0};
        cr_assert_eq(sq_model_config_parse("config.json", j, &back, &err), 0, "%s: %s",
                     fam_names[f], err.msg);
        cJSON_Delete(j);
        const sq_model_config *c = &p.config;
        cr_assert_eq(back.arch, c->arch, "%s", fam_names[f]);
        cr_assert_eq(back.head_dim, c->head_dim);
        cr_assert_eq(memcmp(&back.rope, &c->rope, sizeof c->rope), 0, "%s", fam_names[f]);
        cr_assert_eq(back.rope_local.theta, c->rope_local.theta, "%s", fam_names[f]);
        cr_assert_eq(back.attn_bias, c->attn_bias, "%s", fam_names[f]);
        cr_assert_eq(back.attn_out_bias, c->attn_out_bias, "%s", fam_names[f]);
        cr_assert_eq(back.mlp_bias, c->mlp_bias, "%s", fam_names[f]);
        cr_assert_eq(back.qk_norm, c->qk_norm, "%s", fam_names[f]);
        cr_assert_eq(back.gemma, c->gemma, "%s", fam_names[f]);
        cr_assert_eq(back.act, c->act, "%s", fam_names[f]);
        cr_assert_eq(back.attn_softcap, c->attn_softcap, "%s", fam_names[f]);
        cr_assert_eq(back.final_softcap, c->final_softcap, "%s", fam_names[f]);
        cr_assert_eq(back.sliding_window, c->sliding_window, "%s", fam_names[f]);
        cr_assert_eq(memcmp(back.layer_sliding, c->layer_sliding, sizeof c->layer_sliding), 0,
                     "%s", fam_names[f]);
    }
}

/* ---- RoPE tables --------------------------------------------------------------------------- */

Test(families, rope_tables_equal_a_float64_derivation)
{
    sq_random_model_params p = sq_random_model_default_params();
    sq_model_config *c = &p.config;
    c->head_dim = 128;
    c->max_position = 8192;
    c->rope_theta = 500000;
    const sq_rope_params cases[] = {
        {.type = SQ_ROPE_DEFAULT},
        {.type = SQ_ROPE_LINEAR, .factor = 4},
        {.type = SQ_ROPE_DYNAMIC, .factor = 2},
        {.type = SQ_ROPE_LLAMA3, .factor = 8, .low_freq_factor = 1, .high_freq_factor = 4,
         .original_max_position = 8192},
        {.type = SQ_ROPE_YARN, .factor = 4, .original_max_position = 2048},
        {.type = SQ_ROPE_YARN, .factor = 16, .beta_fast = 16, .beta_slow = 2,
         .attention_factor = 1.5f},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        float inv[64], af;
        double want[64], waf;
        sq_rope_table(c, &cases[k], inv, &af);
        ref_rope(c, &cases[k], want, &waf);
        for (int i = 0; i < 64; i++)
            cr_assert(fabs(inv[i] - want[i]) <= 2e-6 * want[i] + 1e-30,
                      "case %zu (%s) inv_freq[%d] = %.9g, want %.9g", k,
                      sq_rope_type_name(cases[k].type), i, inv[i], want[i]);
        cr_assert(fabs(af - waf) < 1e-6, "case %zu: attention factor %g, want %g", k, af, waf);
    }
    /* yarn's default attention factor: 0.1 ln(factor) + 1 */
    float inv[64], af;
    sq_rope_table(c, &cases[4], inv, &af);
    cr_assert(fabsf(af - (float)(0.1 * log(4.0) + 1)) < 1e-6f);
    /* llama3 keeps the high frequencies and divides the low ones by the factor */
    float plain[64];
    sq_rope_table(c, &cases[0], plain, &af);
    sq_rope_table(c, &cases[3], inv, &af);
    cr_assert_eq(inv[0], plain[0]);
    cr_assert(fabsf(inv[63] - plain[63] / 8) <= 1e-6f * plain[63]);
    /* dynamic: past max_position_embeddings the context is refused */
    c->rope = cases[2];
    sq_error err = {0};
    cr_assert_eq(sq_rope_check_context(c, 8192, &err), SQ_OK);
    cr_assert_eq(sq_rope_check_context(c, 8193, &err), SQ_EUSAGE);
    cr_assert(strstr(err.msg, "dynamic") && strstr(err.msg, "max_position_embeddings"), "%s",
              err.msg);
}

/* ---- forwards against the reference -------------------------------------------------------- */

Test(families, every_family_forward_equals_the_float64_reference)
{
    char *dir = tu_tmpdir();
    for (int f = 0; f < F_COUNT; f++) {
        char *path = write_family(dir, f, 0);
        sq_model *m = load(path);
        const int V = m->config.vocab_size;
        cr_assert_eq(m->config.arch, family(f).config.arch);
        double *ref = ref_forward(m, toks, N_TOK);
        double spread = 0;
        for (int i = 0; i < N_TOK * V; i++)
            spread = fmax(spread, fabs(ref[i]));
        /* all at once */
        sq_context *ctx = ctx_new(m);
        float *lg = malloc(sizeof(float) * N_TOK * V);
        int32_t pos[N_TOK];
        uint8_t mask[N_TOK * N_TOK];
        for (int i = 0; i < N_TOK; i++) {
            pos[i] = i;
            for (int j = 0; j < N_TOK; j++)
                mask[i * N_TOK + j] = j <= i;
        }
        sq_error err = {0};
        cr_assert_eq(sq_context_forward(ctx, toks, pos, mask, N_TOK, lg, &err), 0, "%s",
                     err.msg);
        double e = max_err(lg, ref, (size_t)N_TOK * V);
        cr_assert(e <= 1e-5 * fmax(spread, 1), "%s: all at once: max error %g (logits up to %g)",
                  fam_names[f], e, spread);
        /* one token at a time: the windows over committed keys */
        sq_context_reset(ctx);
        for (int i = 0; i < N_TOK; i++) {
            const uint8_t one = 1;
            const int32_t keep = 0;
            cr_assert_eq(sq_context_forward(ctx, &toks[i], &pos[i], &one, 1, lg, &err), 0);
            cr_assert_eq(sq_context_commit(ctx, &keep, 1, &err), 0);
            e = max_err(lg, ref + (size_t)i * V, (size_t)V);
            cr_assert(e <= 1e-5 * fmax(spread, 1), "%s: token %d alone: max error %g",
                      fam_names[f], i, e);
        }
        sq_context_free(ctx);
        free(lg);
        free(ref);
        sq_model_free(m);
        free(path);
    }
    tu_rmtree(dir);
}

/* A tree after a committed prefix: each node's logits equal the reference of its root path
 * (a node at depth d sits at position prefix + d and sees keys within the window of it). */
Test(families, tree_nodes_equal_their_paths_with_windows_by_position)
{
    char *dir = tu_tmpdir();
    const int parent[] = {-1, 0, 0, 1, 3, 4, 2, 6, 5};
    enum { NODES = 9, PREFIX = 4 };
    const int32_t node_tok[NODES] = {11, 12, 13, 14, 15, 16, 17, 18, 19};
    for (int f = 0; f < F_COUNT; f++) {
        char *path = write_family(dir, f, 1);
        sq_model *m = load(path);
        const int V = m->config.vocab_size;
        sq_context *ctx = ctx_new(m);
        sq_error err = {0};
        int32_t pos[16];
        uint8_t mask[16 * 16] = {0};
        float *lg = malloc(sizeof(float) * 16 * V);
        for (int i = 0; i < PREFIX; i++) {
            pos[i] = i;
            for (int j = 0; j <= i; j++)
                mask[i * PREFIX + j] = 1;
        }
        cr_assert_eq(sq_context_forward(ctx, toks, pos, mask, PREFIX, lg, &err), 0, "%s",
                     err.msg);
        const int32_t keep[PREFIX] = {0, 1, 2, 3};
        cr_assert_eq(sq_context_commit(ctx, keep, PREFIX, &err), 0);
        /* the tree in two forwards (the second sees the first's pending nodes) */
        int depth[NODES];
        memset(mask, 0, sizeof mask);
        for (int i = 0; i < NODES; i++) {
            depth[i] = parent[i] < 0 ? 0 : depth[parent[i]] + 1;
            pos[i] = PREFIX + depth[i];
            for (int a = i; a >= 0; a = parent[a])
                mask[i * NODES + a] = 1;
        }
        const int first = 5;
        uint8_t m1[5 * 5], m2[4 * NODES];
        for (int i = 0; i < first; i++)
            for (int j = 0; j < first; j++)
                m1[i * first + j] = mask[i * NODES + j];
        for (int i = first; i < NODES; i++)
            for (int j = 0; j < NODES; j++)
                m2[(i - first) * NODES + j] = mask[i * NODES + j];
        cr_assert_eq(sq_context_forward(ctx, node_tok, pos, m1, first, lg, &err), 0, "%s",
                     err.msg);
        cr_assert_eq(sq_context_forward(ctx, node_tok + first, pos + first, m2, NODES - first,
                                        lg + (size_t)first * V, &err), 0, "%s", err.msg);
        for (int i = 0; i < NODES; i++) {
            int32_t seq[32];
            int n = depth[i] + 1 + PREFIX;
            memcpy(seq, toks, sizeof(int32_t) * PREFIX);
            for (int a = i, d = depth[i]; a >= 0; a = parent[a], d--)
                seq[PREFIX + d] = node_tok[a];
            double *ref = ref_forward(m, seq, n);
            double spread = 0;
            for (int j = 0; j < V; j++)
                spread = fmax(spread, fabs(ref[(size_t)(n - 1) * V + j]));
            double e = max_err(lg + (size_t)i * V, ref + (size_t)(n - 1) * V, (size_t)V);
            cr_assert(e <= 1e-5 * fmax(spread, 1), "%s: node %d (depth %d): max error %g",
                      fam_names[f], i, depth[i], e);
            free(ref);
        }
        /* committing a path keeps the positions: the next token sees the right window */
        const int32_t path_keep[] = {0, 1, 3, 4};
        cr_assert_eq(sq_context_commit(ctx, path_keep, 4, &err), 0);
        int32_t seq[16];
        memcpy(seq, toks, sizeof(int32_t) * PREFIX);
        for (int k = 0; k < 4; k++)
            seq[PREFIX + k] = node_tok[path_keep[k]];
        seq[PREFIX + 4] = 42;
        const int32_t p1 = PREFIX + 4;
        const uint8_t one = 1;
        cr_assert_eq(sq_context_forward(ctx, &seq[PREFIX + 4], &p1, &one, 1, lg, &err), 0);
        double *ref = ref_forward(m, seq, PREFIX + 5);
        double e = max_err(lg, ref + (size_t)(PREFIX + 4) * V, (size_t)V);
        cr_assert(e <= 1e-5 * 10, "%s: after the commit: max error %g", fam_names[f], e);
        free(ref);
        free(lg);
        sq_context_free(ctx);
        sq_model_free(m);
        free(path);
    }
    tu_rmtree(dir);
}

Test(families, batch_equals_alone)
{
    char *dir = tu_tmpdir();
    for (int f = 0; f < F_COUNT; f++) {
        char *path = write_family(dir, f, 2);
        sq_model *m = load(path);
        const int V = m->config.vocab_size;
        sq_context *a = ctx_new(m), *b = ctx_new(m), *alone = ctx_new(m);
        int32_t pa[N_TOK], pb[5];
        uint8_t ma[N_TOK * N_TOK], mb[25];
        for (int i = 0; i < N_TOK; i++) {
            pa[i] = i;
            for (int j = 0; j < N_TOK; j++)
                ma[i * N_TOK + j] = j <= i;
        }
        for (int i = 0; i < 5; i++) {
            pb[i] = i;
            for (int j = 0; j < 5; j++)
                mb[i * 5 + j] = j <= i;
        }
        float *la = malloc(sizeof(float) * N_TOK * V), *lb = malloc(sizeof(float) * 5 * V);
        float *l1 = malloc(sizeof(float) * N_TOK * V);
        sq_batch_seq seqs[2] = {{a, toks, pa, ma, N_TOK, la}, {b, toks + 3, pb, mb, 5, lb}};
        sq_error err = {0};
        cr_assert_eq(sq_context_forward_batch(seqs, 2, &err), 0, "%s", err.msg);
        cr_assert_eq(sq_context_forward(alone, toks, pa, ma, N_TOK, l1, &err), 0);
        for (int i = 0; i < N_TOK * V; i++)
            cr_assert(fabsf(la[i] - l1[i]) <= 1e-4f * fmaxf(1, fabsf(l1[i])), "%s: %d: %g %g",
                      fam_names[f], i, la[i], l1[i]);
        sq_context_reset(alone);
        cr_assert_eq(sq_context_forward(alone, toks + 3, pb, mb, 5, l1, &err), 0);
        for (int i = 0; i < 5 * V; i++)
            cr_assert(fabsf(lb[i] - l1[i]) <= 1e-4f * fmaxf(1, fabsf(l1[i])), "%s: %d",
                      fam_names[f], i);
        free(la);
        free(lb);
        free(l1);
        sq_context_free(a);
        sq_context_free(b);
        sq_context_free(alone);
        sq_model_free(m);
        free(path);
    }
    tu_rmtree(dir);
}

/* ---- greedy speculative decoding equals target-only greedy decoding ----------------------- */

static sq_plan *tree_plan_mode(const char *mode)
{
    const int parent[] = {-1, 0, 0, 1, 1, 3, 5, 2};
    const int n = 8;
    int rank[8], cnt[8] = {0};
    rank[0] = 0;
    for (int i = 1; i < n; i++)
        rank[i] = ++cnt[parent[i]];
    sq_tree *t;
    sq_error err = {0};
    cr_assert_eq(sq_tree_from_parents(parent, rank, n, &t, "test", &err), 0, "%s", err.msg);
    const double p[4] = {0.5, 0.2, 0.1, 0.05};
    sq_curve c = {0};
    cr_assert_eq(sq_curve_init(&c, "test", mode, p, 4, &err), 0, "%s", err.msg);
    sq_plan *plan;
    cr_assert_eq(sq_plan_new(t, &c, 0, 0, 0, &plan, &err), 0, "%s", err.msg);
    sq_curve_clear(&c);
    return plan;
}

static sq_plan *tree_plan(void)
{
    return tree_plan_mode("greedy");
}

Test(families, greedy_tree_decoding_equals_target_greedy)
{
    char *dir = tu_tmpdir();
    sq_plan *plan = tree_plan();
    for (int f = 0; f < F_COUNT; f++) {
        char *dp = write_family(dir, f, 3), *tp = write_family(dir, f, 4);
        sq_model *draft = load(dp), *target = load(tp);
        sq_specdec_params prm = sq_specdec_default_params();
        prm.mode = SQ_MODE_GREEDY;
        prm.temperature = 0;
        prm.threads = 1;
        sq_specdec *sd;
        sq_error err = {0};
        cr_assert_eq(sq_specdec_new(draft, target, plan, &prm, "plan.json", &sd, &err), 0, "%s",
                     err.msg);
        enum { NEW = 24 };
        int32_t spec[NEW], ar[NEW];
        int st[NEW], steps;
        cr_assert_eq(sq_specdec_generate(sd, toks, 5, NEW, spec, st, &steps, NULL, &err), 0,
                     "%s", err.msg);
        cr_assert_eq(sq_specdec_autoregressive(sd, toks, 5, NEW, 0, ar, &err), 0, "%s", err.msg);
        for (int i = 0; i < NEW; i++)
            cr_assert_eq(spec[i], ar[i], "%s: token %d: speculative %d, target %d", fam_names[f],
                         i, spec[i], ar[i]);
        sq_specdec_free(sd);
        sq_model_free(draft);
        sq_model_free(target);
        free(dp);
        free(tp);
    }
    sq_plan_free(plan);
    tu_rmtree(dir);
}

/* ---- sampled tree decoding is lossless: chi-square goodness of fit ------------------------ */

/* For every family, a draft (another seed of the family) and a target: over VAL_SEEDS seeded
 * runs of stochastic tree decoding (the 8-node tree, temperature 0.8 or, where the target is
 * near-deterministic there, a higher one), the first token follows the target's P(. | prompt)
 * and the first two P(a | prompt) P(b | prompt, a) (runtime/validate.h: chi-square, fails
 * below SQ_VALIDATE_P_MIN); the tree's logits equal the plain causal forwards of its paths
 * (sq_validate_attention, the CPU tolerance). */
#define VAL_SEEDS 400

Test(families, stochastic_tree_decoding_passes_the_chi_square_test, .timeout = 120)
{
    char *dir = tu_tmpdir();
    sq_plan *plan = tree_plan_mode("stochastic");
    for (int f = 0; f < F_COUNT; f++) {
        char *dp = write_family(dir, f, 7), *tp = write_family(dir, f, 8);
        sq_model *draft = load(dp), *target = load(tp);
        /* 0.8, or the first higher temperature at which the target's first token is no longer
         * (close to) certain: the tied random checkpoints repeat their last token with
         * probability ~1 up to temperature 4 (a test with one bin would pass anything) */
        static const double temps[] = {0.8, 2, 4, 8};
        sq_specdec *sd = NULL;
        sq_error err = {0};
        double T = 0;
        for (size_t ti = 0; ti < sizeof temps / sizeof temps[0]; ti++) {
            sq_specdec_params prm = sq_specdec_default_params();
            prm.mode = SQ_MODE_STOCHASTIC;
            prm.temperature = T = temps[ti];
            prm.threads = 1;
            prm.max_context = 64;
            cr_assert_eq(sq_specdec_new(draft, target, plan, &prm, "plan.json", &sd, &err), 0,
                         "%s: %s", fam_names[f], err.msg);
            double pr[512];
            cr_assert(sq_specdec_vocab(sd) <= 512);
            cr_assert_eq(sq_specdec_target_probs(sd, toks, 5, pr, &err), 0, "%s", err.msg);
            int bins = 0;
            for (int x = 0; x < sq_specdec_vocab(sd); x++)
                bins += pr[x] * VAL_SEEDS >= 5;
            if (bins >= 3)
                break;
            sq_specdec_free(sd);
            sd = NULL;
        }
        cr_assert_not_null(sd, "%s: the target is near-deterministic up to temperature %g",
                           fam_names[f], T);
        sq_validation v = {0};
        v.ran = 1;
        cr_assert_eq(sq_validate_attention(sd, toks, 5, sq_validate_attn_tol(SQ_BACKEND_CPU), &v,
                                           &err), 0, "%s: %s", fam_names[f], err.msg);
        cr_assert_eq(sq_validate_distribution(sd, 1000 + (uint64_t)f, VAL_SEEDS, toks, 5, &v,
                                              NULL, NULL, &err), 0, "%s: %s", fam_names[f],
                     err.msg);
        cr_assert(v.dist_checked && v.seeds == VAL_SEEDS, "%s", fam_names[f]);
        cr_assert_eq(v.first.n, VAL_SEEDS, "%s", fam_names[f]);
        cr_assert_eq(v.pair.n, VAL_SEEDS, "%s", fam_names[f]);
        cr_assert(v.first.df >= 2 && v.pair.df >= 1, "%s: first df %d, pair df %d",
                  fam_names[f], v.first.df, v.pair.df);
        cr_assert(v.attn_ok, "%s: tree attention: max difference %g (tolerance %g)",
                  fam_names[f], v.attn_max_diff, v.attn_tol);
        cr_assert(v.first.p_value >= SQ_VALIDATE_P_MIN && v.pair.p_value >= SQ_VALIDATE_P_MIN,
                  "%s: first token chi2 %g (df %d) p %g; pair chi2 %g (df %d) p %g",
                  fam_names[f], v.first.stat, v.first.df, v.first.p_value, v.pair.stat,
                  v.pair.df, v.pair.p_value);
        cr_assert(v.dist_ok && sq_validation_pass(&v), "%s", fam_names[f]);
        cr_log_info("%s: temperature %g: chi-square: first p %.3g (df %d), pair p %.3g (df %d), "
                    "tree attention %.3g", fam_names[f], T, v.first.p_value, v.first.df,
                    v.pair.p_value, v.pair.df, v.attn_max_diff);
        sq_specdec_free(sd);
        sq_model_free(draft);
        sq_model_free(target);
        free(dp);
        free(tp);
    }
    sq_plan_free(plan);
    tu_rmtree(dir);
}

/* ---- the corpus dump: every row equals a plain causal forward ----------------------------- */

/* For every family: sq_dump (dense float32 logits, windows of DUMP_WIN tokens) of a token file
 * of two sequences, read back with the corpus reader; each row's target and draft logits equal
 * those of a causal forward of its window from an empty cache (sq_forward_causal), within 1e-5
 * of the row's largest |logit|, and each row's token is the next one. */
#define DUMP_WIN 8

Test(families, dump_rows_equal_causal_forwards)
{
    char *dir = tu_tmpdir();
    /* sequence 1: toks (12 tokens: windows 0..7, 8..11), sequence 2: 5 tokens */
    static const int32_t seq2[5] = {9, 90, 33, 1, 64};
    const int32_t *seqs[2] = {toks, seq2};
    const int lens[2] = {N_TOK, 5};
    char *tokfile = tu_path(dir, "tokens.txt");
    {
        char text[512];
        size_t o = 0;
        for (int s = 0; s < 2; s++) {
            for (int i = 0; i < lens[s]; i++)
                o += (size_t)snprintf(text + o, sizeof text - o, "%d ", seqs[s][i]);
            o += (size_t)snprintf(text + o, sizeof text - o, s == 0 ? "\n\n" : "\n");
        }
        tu_write(tokfile, text);
    }
    const int rows_want = (N_TOK - 1) + (5 - 1);
    for (int f = 0; f < F_COUNT; f++) {
        char *dp = write_family(dir, f, 9), *tp = write_family(dir, f, 10);
        char *out = tu_path(dir, "corpus.h5");
        sq_dump_opts o = sq_dump_default_opts();
        o.draft_dir = dp;
        o.target_dir = tp;
        o.tokens_file = tokfile;
        o.out_file = out;
        o.context = DUMP_WIN;
        o.half = 0;
        o.topk = 0;
        o.threads = 1;
        o.quiet = 1;
        sq_error err = {0};
        cr_assert_eq(sq_dump(&o, &err), 0, "%s: %s", fam_names[f], err.msg);
        sq_corpus *c;
        cr_assert_eq(sq_corpus_open(out, &c, &err), 0, "%s: %s", fam_names[f], err.msg);
        const sq_corpus_info *info = sq_corpus_get_info(c);
        sq_model *draft = load(dp), *target = load(tp);
        const int V = target->config.vocab_size;
        cr_assert_eq(info->rows, rows_want, "%s", fam_names[f]);
        cr_assert_eq(info->vocab, V, "%s", fam_names[f]);
        cr_assert_eq(info->sequences, 2, "%s", fam_names[f]);
        cr_assert(!info->sparse, "%s", fam_names[f]);
        float *tl = malloc(sizeof(float) * rows_want * V);
        float *dl = malloc(sizeof(float) * rows_want * V);
        int32_t next[N_TOK + 5];
        cr_assert_eq(sq_corpus_read(c, 0, rows_want, tl, dl, next, &err), 0, "%s: %s",
                     fam_names[f], err.msg);
        sq_corpus_close(c);
        sq_context *tc = ctx_new(target), *dc = ctx_new(draft);
        float *ft = malloc(sizeof(float) * DUMP_WIN * V);
        float *fd = malloc(sizeof(float) * DUMP_WIN * V);
        int row = 0;
        double worst_t = 0, worst_d = 0;
        for (int s = 0; s < 2; s++) {
            for (int w0 = 0; w0 < lens[s] - 1; w0 += DUMP_WIN) {
                int w1 = w0 + DUMP_WIN < lens[s] ? w0 + DUMP_WIN : lens[s];
                int n = w1 - w0, nrows = (w1 < lens[s] ? w1 : lens[s] - 1) - w0;
                sq_context_reset(tc);
                sq_context_reset(dc);
                cr_assert_eq(sq_forward_causal(tc, seqs[s] + w0, n, ft, &err), 0, "%s: %s",
                             fam_names[f], err.msg);
                cr_assert_eq(sq_forward_causal(dc, seqs[s] + w0, n, fd, &err), 0, "%s: %s",
                             fam_names[f], err.msg);
                for (int r = 0; r < nrows; r++, row++) {
                    cr_assert_eq(next[row], seqs[s][w0 + r + 1], "%s: row %d: token %d, want %d",
                                 fam_names[f], row, next[row], seqs[s][w0 + r + 1]);
                    for (int k = 0; k < 2; k++) {
                        const float *got = (k ? dl : tl) + (size_t)row * V;
                        const float *want = (k ? fd : ft) + (size_t)r * V;
                        double mx = 0, e = 0;
                        for (int x = 0; x < V; x++) {
                            mx = fmax(mx, fabs(want[x]));
                            e = fmax(e, fabs((double)got[x] - want[x]));
                        }
                        cr_assert(mx > 0, "%s: row %d: %s logits all zero", fam_names[f], row,
                                  k ? "draft" : "target");
                        cr_assert(e <= 1e-5 * mx, "%s: row %d (sequence %d, position %d): %s "
                                  "logits differ by %g (row max |logit| %g)", fam_names[f], row,
                                  s, w0 + r, k ? "draft" : "target", e, mx);
                        double rel = e / mx;
                        if (k)
                            worst_d = fmax(worst_d, rel);
                        else
                            worst_t = fmax(worst_t, rel);
                    }
                }
            }
        }
        cr_assert_eq(row, rows_want, "%s", fam_names[f]);
        /* the draft is another checkpoint: its rows are not the target's */
        cr_assert(memcmp(tl, dl, sizeof(float) * rows_want * V) != 0, "%s", fam_names[f]);
        cr_log_info("%s: dump rows: largest difference / row max |logit|: target %.3g, "
                    "draft %.3g", fam_names[f], worst_t, worst_d);
        free(ft);
        free(fd);
        free(tl);
        free(dl);
        sq_context_free(tc);
        sq_context_free(dc);
        sq_model_free(draft);
        sq_model_free(target);
        remove(out);
        free(out);
        free(dp);
        free(tp);
    }
    free(tokfile);
    tu_rmtree(dir);
}

/* ---- bad input ----------------------------------------------------------------------------- */

Test(families, refusals_name_the_file_and_the_field)
{
    const struct {
        const char *text, *n1, *n2;
    } cases[] = {
        {"{\"architectures\": [\"LlamaForCausalLM\"], " SIZES ", \"rope_scaling\": {\"rope_type\":"
         " \"su\", \"factor\": 2}}", "rope_scaling.rope_type", "\"su\""},
        {"{\"architectures\": [\"LlamaForCausalLM\"], " SIZES ", \"rope_parameters\": "
         "{\"rope_type\": \"longrope\"}}", "rope_parameters.rope_type", "longrope"},
        {"{\"architectures\": [\"LlamaForCausalLM\"], " SIZES ", \"rope_scaling\": {\"rope_type\":"
         " \"yarn\"}}", "rope_scaling.factor", "missing"},
        {"{\"architectures\": [\"LlamaForCausalLM\"], " SIZES ", \"rope_scaling\": {\"rope_type\":"
         " \"linear\", \"factor\": 0}}", "rope_scaling.factor", NULL},
        {"{\"architectures\": [\"MistralForCausalLM\"], " SIZES ", \"head_dim\": 7}", "head_dim",
         "odd"},
        {"{\"architectures\": [\"MistralForCausalLM\"], " SIZES ", \"head_dim\": 0}", "head_dim",
         NULL},
        {"{\"architectures\": [\"MistralForCausalLM\"], " SIZES ", \"sliding_window\": 0}",
         "sliding_window", "0"},
        {"{\"architectures\": [\"Gemma2ForCausalLM\"], " SIZES ", \"layer_types\": "
         "[\"sliding_attention\"]}", "layer_types", "num_hidden_layers"},
        {"{\"architectures\": [\"Qwen2ForCausalLM\"], " SIZES ", \"layer_types\": "
         "[\"full_attention\", \"linear_attention\", \"full_attention\", \"full_attention\"]}",
         "layer_types[1]", "linear_attention"},
        {"{\"architectures\": [\"Qwen3MoeForCausalLM\"], " SIZES "}", "architectures",
         "mixture-of-experts"},
        {"{\"architectures\": [\"Qwen3NextForCausalLM\"], " SIZES "}", "architectures",
         "hybrid recurrent"},
        {"{\"model_type\": \"mixtral\", " SIZES "}", "model_type", "mixture-of-experts"},
        {"{\"architectures\": [\"Qwen2ForCausalLM\"], " SIZES ", \"quantization_config\": "
         "{\"quant_method\": \"awq\"}}", "quantization_config", "awq"},
        {"{\"architectures\": [\"LlamaForCausalLM\"], " SIZES ", \"num_local_experts\": 8}",
         "num_local_experts", "mixture-of-experts"},
        {"{\"architectures\": [\"Gemma2ForCausalLM\"], " SIZES ", \"hidden_activation\": "
         "\"relu\"}", "hidden_activation", "relu"},
        {"{\"architectures\": [\"Gemma2ForCausalLM\"], " SIZES ", \"attn_logit_softcapping\": "
         "-1}", "attn_logit_softcapping", NULL},
        {"{\"architectures\": [\"Gemma3ForConditionalGeneration\"], " SIZES "}", "text_config",
         "missing"},
        {"{\"architectures\": [\"MistralForCausalLM\"], " SIZES ", \"attention_bias\": true}",
         "attention_bias", "MistralForCausalLM"},
        {"{\"architectures\": [\"LlamaForCausalLM\"], " SIZES ", \"rope_scaling\": {\"rope_type\":"
         " \"llama3\", \"factor\": 8, \"low_freq_factor\": 4, \"high_freq_factor\": 1, "
         "\"original_max_position_embeddings\": 8192}}", "high_freq_factor", NULL},
        {"{\"architectures\": [\"Gemma3ForCausalLM\"], " SIZES ", \"rope_parameters\": "
         "{\"full_attention\": {\"rope_type\": \"default\"}, \"chunked_attention\": {}}}",
         "rope_parameters.chunked_attention", NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        sq_model_config c;
        sq_error err = {0};
        int rc = parse(cases[i].text, &c, &err);
        cr_assert_eq(rc, SQ_EDATA, "case %zu: rc %d (%s)", i, rc, err.msg);
        cr_assert_eq(rc, 65);
        cr_assert(strstr(err.msg, "config.json"), "case %zu: %s", i, err.msg);
        cr_assert(strstr(err.msg, cases[i].n1), "case %zu lacks %s: %s", i, cases[i].n1,
                  err.msg);
        if (cases[i].n2)
            cr_assert(strstr(err.msg, cases[i].n2), "case %zu lacks %s: %s", i, cases[i].n2,
                      err.msg);
    }
}

/* transformers >= 4.52's names of a Gemma3ForConditionalGeneration checkpoint */
static const char *new_style(const char *name, char *buf, size_t cap)
{
    static const char old_prefix[] = "language_model.model.";
    if (strncmp(name, old_prefix, sizeof old_prefix - 1) == 0)
        snprintf(buf, cap, "model.language_model.%s", name + sizeof old_prefix - 1);
    else if (strcmp(name, "language_model.lm_head.weight") == 0)
        snprintf(buf, cap, "lm_head.weight");
    else
        snprintf(buf, cap, "%s", name);
    return buf;
}

static int rename_new_style;

/* Rewrites dir's model.safetensors: tensor `drop` left out, tensor `grow` one longer (and with
 * rename_new_style, the names as new_style makes them). */
static void rewrite_checkpoint(const char *dir, const char *drop, const char *grow)
{
    sq_st_set *set;
    sq_error err = {0};
    cr_assert_eq(sq_st_set_open(dir, &set, &err), 0, "%s", err.msg);
    const sq_st_file *f = set->files[0];
    sq_st_writer *w = sq_st_writer_new();
    for (int i = 0; i < f->n_tensors; i++) {
        const sq_st_tensor *t = &f->tensors[i];
        if (drop && strcmp(t->name, drop) == 0)
            continue;
        int64_t shape[4] = {t->shape[0], t->ndim > 1 ? t->shape[1] : 0};
        if (grow && strcmp(t->name, grow) == 0)
            shape[0]++;
        char nb[200];
        const char *nm = rename_new_style ? new_style(t->name, nb, sizeof nb) : t->name;
        cr_assert_eq(sq_st_writer_add(w, nm, t->dtype, t->ndim, shape, &err), 0, "%s",
                     err.msg);
    }
    char *tmp = tu_path(dir, "new.safetensors");
    cr_assert_eq(sq_st_writer_begin(w, tmp, &err), 0, "%s", err.msg);
    for (int i = 0; i < f->n_tensors; i++) {
        const sq_st_tensor *t = &f->tensors[i];
        if (drop && strcmp(t->name, drop) == 0)
            continue;
        size_t bytes = (size_t)t->numel * sq_st_dtype_size(t->dtype);
        cr_assert_eq(sq_st_writer_put_raw(w, t->data, bytes, &err), 0, "%s", err.msg);
        if (grow && strcmp(t->name, grow) == 0) {
            const float zero = 0;
            cr_assert_eq(sq_st_writer_put(w, &zero, 1, &err), 0, "%s", err.msg);
        }
    }
    cr_assert_eq(sq_st_writer_finish(w, &err), 0, "%s", err.msg);
    sq_st_writer_free(w);
    sq_st_set_free(set);
    char *dst = tu_path(dir, "model.safetensors");
    cr_assert_eq(rename(tmp, dst), 0);
    free(tmp);
    free(dst);
}

Test(families, checkpoint_refusals_name_the_tensor)
{
    char *dir = tu_tmpdir();
    /* a Qwen3 checkpoint without its q_norm */
    char *q3 = write_family(dir, F_QWEN3, 5);
    rewrite_checkpoint(q3, "model.layers.1.self_attn.q_norm.weight", NULL);
    sq_model *m;
    sq_error err = {0};
    cr_assert_eq(sq_model_load(q3, &m, &err), SQ_EDATA);
    cr_assert(strstr(err.msg, "model.layers.1.self_attn.q_norm.weight") &&
              strstr(err.msg, "missing"), "%s", err.msg);
    /* a Qwen2 bias of the wrong shape */
    char *q2 = write_family(dir, F_QWEN2, 5);
    rewrite_checkpoint(q2, NULL, "model.layers.2.self_attn.k_proj.bias");
    err = (sq_error){0};
    cr_assert_eq(sq_model_load(q2, &m, &err), SQ_EDATA);
    cr_assert(strstr(err.msg, "model.layers.2.self_attn.k_proj.bias") &&
              strstr(err.msg, "shape"), "%s", err.msg);
    /* a dynamic RoPE: a context past max_position_embeddings is refused */
    sq_random_model_params p = family(F_LLAMA_LINEAR);
    p.config.rope.type = SQ_ROPE_DYNAMIC;
    p.config.max_position = 70;
    cr_assert_eq(sq_model_new_random(&p.config, 1, &m, &err), 0, "%s", err.msg);
    sq_context_params cp = sq_context_default_params();
    cp.max_context = 64;
    cp.max_pending = 16;
    cp.threads = 1;
    sq_context *ctx;
    err = (sq_error){0};
    cr_assert_eq(sq_context_new(m, &cp, &ctx, &err), SQ_EUSAGE);
    cr_assert(strstr(err.msg, "dynamic") && strstr(err.msg, "70"), "%s", err.msg);
    cp.max_context = 50;
    cr_assert_eq(sq_context_new(m, &cp, &ctx, &err), 0, "%s", err.msg);
    sq_context_free(ctx);
    sq_model_free(m);
    free(q3);
    free(q2);
    tu_rmtree(dir);
}

/* ---- real shapes: the config.json of the models people deploy parse into their sizes ------- */

Test(families, real_configs_parse_to_their_parameter_counts)
{
    const struct {
        const char *text;
        double params;   /* published parameter count */
    } cases[] = {
        {"{\"architectures\": [\"LlamaForCausalLM\"], \"attention_bias\": false, \"head_dim\": "
         "128, \"hidden_act\": \"silu\", \"hidden_size\": 4096, \"intermediate_size\": 14336, "
         "\"max_position_embeddings\": 131072, \"mlp_bias\": false, \"model_type\": \"llama\", "
         "\"num_attention_heads\": 32, \"num_hidden_layers\": 32, \"num_key_value_heads\": 8, "
         "\"rms_norm_eps\": 1e-05, \"rope_scaling\": {\"factor\": 8.0, \"low_freq_factor\": 1.0,"
         " \"high_freq_factor\": 4.0, \"original_max_position_embeddings\": 8192, \"rope_type\":"
         " \"llama3\"}, \"rope_theta\": 500000.0, \"tie_word_embeddings\": false, "
         "\"torch_dtype\": \"bfloat16\", \"vocab_size\": 128256}", 8.03e9},
        {"{\"architectures\": [\"LlamaForCausalLM\"], \"head_dim\": 64, \"hidden_size\": 2048, "
         "\"intermediate_size\": 8192, \"max_position_embeddings\": 131072, "
         "\"num_attention_heads\": 32, \"num_hidden_layers\": 16, \"num_key_value_heads\": 8, "
         "\"rope_scaling\": {\"factor\": 32.0, \"low_freq_factor\": 1.0, \"high_freq_factor\": "
         "4.0, \"original_max_position_embeddings\": 8192, \"rope_type\": \"llama3\"}, "
         "\"rope_theta\": 500000.0, \"tie_word_embeddings\": true, \"vocab_size\": 128256}",
         1.236e9},
        {"{\"architectures\": [\"Qwen2ForCausalLM\"], \"hidden_act\": \"silu\", \"hidden_size\": "
         "896, \"intermediate_size\": 4864, \"max_position_embeddings\": 32768, "
         "\"max_window_layers\": 21, \"num_attention_heads\": 14, \"num_hidden_layers\": 24, "
         "\"num_key_value_heads\": 2, \"rms_norm_eps\": 1e-06, \"rope_theta\": 1000000.0, "
         "\"sliding_window\": 32768, \"tie_word_embeddings\": true, \"use_sliding_window\": false,"
         " \"vocab_size\": 151936}", 0.494e9},
        {"{\"architectures\": [\"Qwen2ForCausalLM\"], \"hidden_size\": 3584, \"intermediate_size\":"
         " 18944, \"max_window_layers\": 28, \"num_attention_heads\": 28, \"num_hidden_layers\": "
         "28, \"num_key_value_heads\": 4, \"rope_scaling\": null, \"rope_theta\": 1000000.0, "
         "\"sliding_window\": 131072, \"tie_word_embeddings\": false, \"use_sliding_window\": "
         "false, \"vocab_size\": 152064}", 7.62e9},
        {"{\"architectures\": [\"Qwen3ForCausalLM\"], \"attention_bias\": false, \"head_dim\": 128,"
         " \"hidden_size\": 1024, \"intermediate_size\": 3072, \"max_window_layers\": 28, "
         "\"num_attention_heads\": 16, \"num_hidden_layers\": 28, \"num_key_value_heads\": 8, "
         "\"rope_scaling\": null, \"rope_theta\": 1000000, \"sliding_window\": null, "
         "\"tie_word_embeddings\": true, \"use_sliding_window\": false, \"vocab_size\": 151936}",
         0.596e9},
        {"{\"architectures\": [\"Qwen3ForCausalLM\"], \"head_dim\": 128, \"hidden_size\": 4096, "
         "\"intermediate_size\": 12288, \"num_attention_heads\": 32, \"num_hidden_layers\": 36, "
         "\"num_key_value_heads\": 8, \"rope_theta\": 1000000, \"tie_word_embeddings\": false, "
         "\"vocab_size\": 151936}", 8.19e9},
        {"{\"architectures\": [\"MistralForCausalLM\"], \"hidden_size\": 4096, "
         "\"intermediate_size\": 14336, \"max_position_embeddings\": 32768, "
         "\"num_attention_heads\": 32, \"num_hidden_layers\": 32, \"num_key_value_heads\": 8, "
         "\"rms_norm_eps\": 1e-05, \"rope_theta\": 1000000.0, \"sliding_window\": null, "
         "\"tie_word_embeddings\": false, \"vocab_size\": 32768}", 7.25e9},
        {"{\"architectures\": [\"Gemma2ForCausalLM\"], \"attn_logit_softcapping\": 50.0, "
         "\"final_logit_softcapping\": 30.0, \"head_dim\": 256, \"hidden_act\": "
         "\"gelu_pytorch_tanh\", \"hidden_activation\": \"gelu_pytorch_tanh\", \"hidden_size\": "
         "2304, \"intermediate_size\": 9216, \"max_position_embeddings\": 8192, \"model_type\": "
         "\"gemma2\", \"num_attention_heads\": 8, \"num_hidden_layers\": 26, "
         "\"num_key_value_heads\": 4, \"query_pre_attn_scalar\": 256, \"rms_norm_eps\": 1e-06, "
         "\"rope_theta\": 10000.0, \"sliding_window\": 4096, \"vocab_size\": 256000}", 2.61e9},
        {"{\"architectures\": [\"Gemma3ForCausalLM\"], \"attn_logit_softcapping\": null, "
         "\"final_logit_softcapping\": null, \"head_dim\": 256, \"hidden_activation\": "
         "\"gelu_pytorch_tanh\", \"hidden_size\": 1152, \"intermediate_size\": 6912, "
         "\"max_position_embeddings\": 32768, \"model_type\": \"gemma3_text\", "
         "\"num_attention_heads\": 4, \"num_hidden_layers\": 26, \"num_key_value_heads\": 1, "
         "\"query_pre_attn_scalar\": 256, \"rope_local_base_freq\": 10000, \"rope_scaling\": null,"
         " \"rope_theta\": 1000000, \"sliding_window\": 512, \"sliding_window_pattern\": 6, "
         "\"vocab_size\": 262144}", 1.0e9},
        {"{\"architectures\": [\"Gemma3ForConditionalGeneration\"], \"model_type\": \"gemma3\", "
         "\"text_config\": {\"hidden_size\": 2560, \"intermediate_size\": 10240, \"model_type\": "
         "\"gemma3_text\", \"num_hidden_layers\": 34, \"rope_scaling\": {\"factor\": 8.0, "
         "\"rope_type\": \"linear\"}, \"sliding_window\": 1024}, \"vision_config\": "
         "{\"hidden_size\": 1152, \"model_type\": \"siglip_vision_model\"}}", 3.88e9},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        sq_model_config c;
        sq_error err = {0};
        cr_assert_eq(parse(cases[i].text, &c, &err), 0, "case %zu: %s", i, err.msg);
        double n = (double)sq_model_config_params(&c);
        cr_assert(fabs(n / cases[i].params - 1) < 0.03, "case %zu: %.4g parameters, published "
                  "%.4g", i, n, cases[i].params);
    }
    /* the shipped copies under data/configs/ (data/configs/README.md): the same counts */
    const struct {
        const char *dir;
        double params;
    } shipped[] = {
        {"Llama-3.1-8B", 8.03e9}, {"Llama-3.2-1B", 1.236e9}, {"Qwen2.5-0.5B", 0.494e9},
        {"Qwen2.5-7B", 7.62e9},   {"Qwen3-0.6B", 0.596e9},   {"Qwen3-8B", 8.19e9},
        {"Mistral-7B-v0.3", 7.25e9}, {"gemma-2-2b", 2.61e9}, {"gemma-3-1b-pt", 1.0e9},
    };
    const char *root = getenv("SQ_SOURCE_ROOT");
    if (!root)
        cr_skip_test("SQ_SOURCE_ROOT is not set (run through meson test)");
    for (size_t i = 0; i < sizeof shipped / sizeof shipped[0]; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/data/configs/%s/config.json", root, shipped[i].dir);
        sq_model_config c;
        sq_error err = {0};
        cr_assert_eq(sq_model_config_load(path, &c, &err), 0, "%s: %s", path, err.msg);
        double n = (double)sq_model_config_params(&c);
        cr_assert(fabs(n / shipped[i].params - 1) < 0.03, "%s: %.4g parameters, published %.4g",
                  path, n, shipped[i].params);
    }
}

/* ---- the tools: sequoia-profile times a family's shape, refuses the others with exit 65 ---- */

Test(families, profile_times_every_family_and_refuses_moe_with_exit_65)
{
    const char *bin = getenv("SQ_PROFILE_BIN");
    if (!bin)
        cr_skip_test("SQ_PROFILE_BIN is not set (run through meson test)");
    char *dir = tu_tmpdir();
    for (int f = 0; f < F_COUNT; f++) {
        sq_random_model_params p = family(f);
        p.config.n_layers = 2;
        cJSON *j = sq_model_config_to_json(&p.config);
        char *text = cJSON_Print(j);
        cJSON_Delete(j);
        char *cfg = tu_path(dir, "config.json"), *out = tu_path(dir, "p.json");
        tu_write(cfg, text);
        free(text);
        char *argv[] = {(char *)bin, "-m", cfg, "--tokens", "1,3", "--prefix", "8", "--repeat",
                        "1", "--warmup", "0", "--no-refine", "--threads", "1", "--quiet", "-o",
                        out, NULL};
        char *so, *se;
        cr_assert_eq(tu_run(argv, &so, &se), 0, "%s: %s", fam_names[f], se);
        cr_assert(tu_exists(out));
        free(so);
        free(se);
        free(cfg);
        free(out);
    }
    char *cfg = tu_path(dir, "config.json"), *out = tu_path(dir, "q.json");
    tu_write(cfg, "{\"architectures\": [\"Qwen3MoeForCausalLM\"], " SIZES "}");
    char *argv[] = {(char *)bin, "-m", cfg, "--tokens", "1", "-o", out, NULL};
    char *so, *se;
    cr_assert_eq(tu_run(argv, &so, &se), 65, "%s", se);
    cr_assert(strstr(se, "config.json") && strstr(se, "architectures") &&
              strstr(se, "mixture-of-experts"), "%s", se);
    cr_assert(!tu_exists(out));
    free(so);
    free(se);
    free(cfg);
    free(out);
    tu_rmtree(dir);
}

/* A Gemma3ForConditionalGeneration checkpoint saved with the newer names
 * (model.language_model.*, a top-level lm_head) loads to the same logits. */
Test(families, gemma3_multimodal_checkpoints_load_with_either_naming)
{
    char *dir = tu_tmpdir();
    char *a = write_family(dir, F_GEMMA3_MM, 6);
    sq_random_model_params p = family(F_GEMMA3_MM);
    p.seed += 6;
    char *b = tu_path(dir, "newnames");
    sq_error err = {0};
    cr_assert_eq(sq_model_write_random(b, &p, &err), 0, "%s", err.msg);
    rename_new_style = 1;
    rewrite_checkpoint(b, NULL, NULL);
    rename_new_style = 0;
    sq_st_set *set;
    cr_assert_eq(sq_st_set_open(b, &set, &err), 0, "%s", err.msg);
    const sq_st_file *f;
    cr_assert_not_null(sq_st_set_find(set, "model.language_model.layers.0.self_attn.q_norm.weight",
                                      &f));
    cr_assert_null(sq_st_set_find(set, "language_model.model.embed_tokens.weight", &f));
    sq_st_set_free(set);
    sq_model *ma = load(a), *mb = load(b);
    const int V = ma->config.vocab_size;
    float *la = malloc(sizeof(float) * N_TOK * V), *lb = malloc(sizeof(float) * N_TOK * V);
    int32_t pos[N_TOK];
    uint8_t mask[N_TOK * N_TOK];
    for (int i = 0; i < N_TOK; i++) {
        pos[i] = i;
        for (int j = 0; j < N_TOK; j++)
            mask[i * N_TOK + j] = j <= i;
    }
    sq_context *ca = ctx_new(ma), *cb = ctx_new(mb);
    cr_assert_eq(sq_context_forward(ca, toks, pos, mask, N_TOK, la, &err), 0, "%s", err.msg);
    cr_assert_eq(sq_context_forward(cb, toks, pos, mask, N_TOK, lb, &err), 0, "%s", err.msg);
    cr_assert_eq(memcmp(la, lb, sizeof(float) * N_TOK * V), 0);
    free(la);
    free(lb);
    sq_context_free(ca);
    sq_context_free(cb);
    sq_model_free(ma);
    sq_model_free(mb);
    free(a);
    free(b);
    tu_rmtree(dir);
}
