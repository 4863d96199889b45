#include "runtime/config.h"

#include <ctype.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "libsequoia/base/json.h"
#include "runtime/arch.h"
#include "runtime/rope.h"

static int get_bool(const cJSON *root, const char *key, int *out, const char *file,
                    sq_error *err)
{
    const cJSON *v = sq_json_field(root, key);
    if (!v)
        return SQ_OK;
    if (!cJSON_IsBool(v))
        return sq_error_set(err, SQ_EDATA, "%s: %s: expected true or false", file, key);
    *out = cJSON_IsTrue(v) ? 1 : 0;
    return SQ_OK;
}

static int get_int(const cJSON *root, const char *key, int required, long long lo, long long hi,
                   int *out, const char *file, sq_error *err)
{
    long long v = *out;
    int rc = sq_json_get_int(root, key, required, lo, hi, &v, file, "", err);
    if (rc == SQ_OK)
        *out = (int)v;
    return rc;
}

/* Architectures refused by name: what they are, so that the message says why. */
static const char *refused_kind(const char *s)
{
    static const char *const moe[] = {"moe", "mixtral", "deepseek", "dbrx", "arctic", "gptoss",
                                      "gpt_oss", "llama4"};
    static const char *const hybrid[] = {"qwen3next", "qwen3_next", "qwen3_5", "qwen35", "mamba",
                                         "jamba", "falconh1", "falcon_h1", "zamba",
                                         "recurrentgemma", "recurrent_gemma", "gemma3n",
                                         "hybrid", "rwkv", "lfm2"};
    char low[80];
    size_t n = 0;
    for (; s[n] && n + 1 < sizeof low; n++)
        low[n] = (char)tolower((unsigned char)s[n]);
    low[n] = '\0';
    for (size_t i = 0; i < sizeof hybrid / sizeof hybrid[0]; i++)
        if (strstr(low, hybrid[i]))
            return "a hybrid recurrent model";
    for (size_t i = 0; i < sizeof moe / sizeof moe[0]; i++)
        if (strstr(low, moe[i]))
            return "a mixture-of-experts model";
    return NULL;
}

/* The architecture (runtime/arch.h) that "architectures" names, or without it "model_type". */
static int check_architecture(const char *file, const cJSON *root, int *arch, sq_error *err)
{
    const cJSON *archs = sq_json_field(root, "architectures");
    if (archs) {
        if (!cJSON_IsArray(archs) || !archs->child)
            return sq_error_set(err, SQ_EDATA, "%s: architectures: expected a non-empty array of "
                                "strings", file);
        for (const cJSON *a = archs->child; a; a = a->next)
            if (cJSON_IsString(a) && (*arch = sq_arch_find(a->valuestring, 0)) >= 0)
                return SQ_OK;
        const cJSON *first = archs->child;
        const char *name = cJSON_IsString(first) ? first->valuestring : "(not a string)";
        const char *kind = refused_kind(name);
        if (!kind)   /* said once: "is not supported; not supported" read twice */
            return sq_error_set(err, SQ_EDATA, "%s: architectures: %.64s is not supported (this "
                                "runtime loads %s only)", file, name, sq_arch_names(0));
        return sq_error_set(err, SQ_EDATA, "%s: architectures: %.64s is %s; not supported (this "
                            "runtime loads %s only)", file, name, kind, sq_arch_names(0));
    }
    const char *mt = NULL;
    int rc = sq_json_get_string(root, "model_type", 0, &mt, file, "", err);
    if (rc)
        return rc;
    if (!mt)
        return sq_error_set(err, SQ_EDATA, "%s: architectures: missing, and no model_type "
                            "either; expected %s", file, sq_arch_names(0));
    if ((*arch = sq_arch_find(mt, 1)) < 0) {
        const char *kind = refused_kind(mt);
        return sq_error_set(err, SQ_EDATA, "%s: model_type: \"%.64s\" is %s (this runtime loads "
                            "%s only)", file, mt, kind ? kind : "not supported",
                            sq_arch_names(1));
    }
    return SQ_OK;
}

/* Quantized checkpoints and experts, refused by name wherever the config says so. */
static int check_refused_keys(const char *file, const cJSON *o, const char *ctx, sq_error *err)
{
    const char *sep = ctx[0] ? "." : "";
    const cJSON *q = sq_json_field(o, "quantization_config");
    if (q) {
        const cJSON *m = cJSON_IsObject(q) ? cJSON_GetObjectItemCaseSensitive(q, "quant_method")
                                           : NULL;
        return sq_error_set(err, SQ_EDATA, "%s: %s%squantization_config: quantized weights "
                            "(%s%.32s%s) are not supported (F32, F16 or BF16 only)", file, ctx,
                            sep, cJSON_IsString(m) ? "quant_method \"" : "",
                            cJSON_IsString(m) ? m->valuestring : "any method",
                            cJSON_IsString(m) ? "\"" : "");
    }
    static const char *const experts[] = {"num_experts", "num_local_experts", "n_routed_experts"};
    for (size_t i = 0; i < sizeof experts / sizeof experts[0]; i++) {
        const cJSON *v = sq_json_field(o, experts[i]);
        if (v && (!cJSON_IsNumber(v) || v->valuedouble > 0))
            return sq_error_set(err, SQ_EDATA, "%s: %s%s%s: a mixture-of-experts model; not "
                                "supported", file, ctx, sep, experts[i]);
    }
    return SQ_OK;
}

/* One RoPE parameter object (rope_scaling, rope_parameters or one of its per-layer-type
 * entries), at path `ctx`; with_theta: it may hold rope_theta. */
static int parse_rope(const char *file, const cJSON *rs, const char *ctx, int with_theta,
                      const sq_model_config *c, sq_rope_params *r, sq_error *err)
{
    if (!cJSON_IsObject(rs))
        return sq_error_set(err, SQ_EDATA, "%s: %s: expected null or an object", file, ctx);
    const char *key = "rope_type";
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(rs, key);
    if (!t || cJSON_IsNull(t)) {
        key = "type";
        t = cJSON_GetObjectItemCaseSensitive(rs, key);
    }
    int type = SQ_ROPE_DEFAULT;
    if (t && !cJSON_IsNull(t)) {
        if (!cJSON_IsString(t))
            return sq_error_set(err, SQ_EDATA, "%s: %s.%s: expected a string", file, ctx, key);
        type = sq_rope_type_parse(t->valuestring);
        if (type < 0)
            return sq_error_set(err, SQ_EDATA, "%s: %s.%s: \"%.64s\" is not a supported RoPE "
                                "type (default, linear, dynamic, llama3, yarn)", file, ctx, key,
                                t->valuestring);
    } else if (!with_theta) {
        return sq_error_set(err, SQ_EDATA, "%s: %s: has no rope_type (expected default, linear, "
                            "dynamic, llama3 or yarn)", file, ctx);
    }
    memset(r, 0, sizeof *r);
    r->type = type;
    double v;
    int rc = SQ_OK;
#define NUM(name, field, need, lo, hi)                                                             \
    do {                                                                                           \
        v = -HUGE_VAL;                                                                             \
        if (!rc)                                                                                   \
            rc = sq_json_get_number(rs, name, need, &v, file, ctx, err);                           \
        if (!rc && v != -HUGE_VAL) {                                                               \
            if (!(v > (lo) && v < (hi)))                                                           \
                rc = sq_error_set(err, SQ_EDATA, "%s: %s.%s: %g is not in (%g, %g)", file, ctx,    \
                                  name, v, (double)(lo), (double)(hi));                            \
            else                                                                                   \
                r->field = (float)v;                                                               \
        }                                                                                          \
    } while (0)
    if (with_theta)
        NUM("rope_theta", theta, 0, 1, 1e12);
    const int scaled = type != SQ_ROPE_DEFAULT;
    if (scaled)
        NUM("factor", factor, 1, 0, 1e6);
    if (type == SQ_ROPE_LLAMA3) {
        NUM("low_freq_factor", low_freq_factor, 1, 0, 1e6);
        NUM("high_freq_factor", high_freq_factor, 1, 0, 1e6);
        if (!rc && !(r->high_freq_factor > r->low_freq_factor))
            rc = sq_error_set(err, SQ_EDATA, "%s: %s.high_freq_factor: %g must exceed "
                              "low_freq_factor %g", file, ctx, (double)r->high_freq_factor,
                              (double)r->low_freq_factor);
    }
    if (type == SQ_ROPE_YARN) {
        NUM("beta_fast", beta_fast, 0, 0, 1e6);
        NUM("beta_slow", beta_slow, 0, 0, 1e6);
        NUM("attention_factor", attention_factor, 0, 0, 1e6);
        NUM("mscale", mscale, 0, 0, 1e6);
        NUM("mscale_all_dim", mscale_all_dim, 0, 0, 1e6);
        int trunc = 1;
        if (!rc) {
            const cJSON *tv = sq_json_field(rs, "truncate");
            if (tv && !cJSON_IsBool(tv))
                rc = sq_error_set(err, SQ_EDATA, "%s: %s.truncate: expected true or false",
                                  file, ctx);
            else if (tv)
                trunc = cJSON_IsTrue(tv);
        }
        r->no_truncate = !trunc;
    }
#undef NUM
    if (!rc && (type == SQ_ROPE_LLAMA3 || type == SQ_ROPE_YARN)) {
        long long om = 0;
        rc = sq_json_get_int(rs, "original_max_position_embeddings", type == SQ_ROPE_LLAMA3, 1,
                             1LL << 30, &om, file, ctx, err);
        r->original_max_position = (int)om;
    }
    (void)c;
    return rc;
}

/* Per-architecture defaults of transformers' config classes. */
typedef struct arch_defaults {
    int    max_position;
    double rope_theta;
    int    tied;
    int    window;       /* sliding_window when the key is absent (0: none) */
} arch_defaults;

static arch_defaults defaults_of(int arch)
{
    switch (arch) {
    case SQ_ARCH_MISTRAL:   return (arch_defaults){131072, 10000.0, 0, 4096};
    case SQ_ARCH_QWEN2:     return (arch_defaults){32768, 10000.0, 0, 4096};
    case SQ_ARCH_QWEN3:     return (arch_defaults){32768, 10000.0, 0, 4096};
    case SQ_ARCH_GEMMA2:    return (arch_defaults){8192, 10000.0, 1, 4096};
    case SQ_ARCH_GEMMA3:
    case SQ_ARCH_GEMMA3_MM: return (arch_defaults){131072, 1000000.0, 1, 4096};
    default:                return (arch_defaults){2048, 10000.0, 0, 0};
    }
}

static int is_gemma(int arch)
{
    return arch == SQ_ARCH_GEMMA2 || arch == SQ_ARCH_GEMMA3 || arch == SQ_ARCH_GEMMA3_MM;
}

static void set_sliding(sq_model_config *c, int l, int on)
{
    if (on)
        c->layer_sliding[l >> 3] |= (uint8_t)(1u << (l & 7));
    else
        c->layer_sliding[l >> 3] &= (uint8_t)~(1u << (l & 7));
}

/* sliding_window and which layers use it: layer_types when present, else each family's rule. */
static int parse_windows(const char *file, const cJSON *root, const cJSON *outer,
                         sq_model_config *c, sq_error *err)
{
    const int arch = c->arch;
    long long window = defaults_of(arch).window;
    const cJSON *wv = cJSON_GetObjectItemCaseSensitive(root, "sliding_window");
    if (arch == SQ_ARCH_LLAMA)
        window = 0;     /* LlamaConfig has no sliding window */
    else if (wv && cJSON_IsNull(wv))
        window = 0;
    else if (wv) {
        int rc = sq_json_get_int(root, "sliding_window", 1, 0, 1LL << 30, &window, file, "", err);
        if (rc)
            return rc;
        if (window == 0)
            return sq_error_set(err, SQ_EDATA, "%s: sliding_window: 0 is not a window (a "
                                "positive number of positions, or null)", file);
    }
    if (arch == SQ_ARCH_QWEN2 || arch == SQ_ARCH_QWEN3) {
        int use = 0;
        int rc = get_bool(root, "use_sliding_window", &use, file, err);
        if (rc)
            return rc;
        if (!use)
            window = 0;
    }
    c->sliding_window = (int)window;
    memset(c->layer_sliding, 0, sizeof c->layer_sliding);
    const cJSON *lt = sq_json_field(root, "layer_types");
    (void)outer;
    if (lt) {
        if (!cJSON_IsArray(lt) || cJSON_GetArraySize(lt) != c->n_layers)
            return sq_error_set(err, SQ_EDATA, "%s: layer_types: expected an array of "
                                "num_hidden_layers = %d strings, got %d entries", file,
                                c->n_layers, cJSON_IsArray(lt) ? cJSON_GetArraySize(lt) : 0);
        int l = 0;
        for (const cJSON *e = lt->child; e; e = e->next, l++) {
            if (!cJSON_IsString(e))
                return sq_error_set(err, SQ_EDATA, "%s: layer_types[%d]: expected a string",
                                    file, l);
            if (strcmp(e->valuestring, "sliding_attention") == 0)
                set_sliding(c, l, 1);
            else if (strcmp(e->valuestring, "full_attention") != 0)
                return sq_error_set(err, SQ_EDATA, "%s: layer_types[%d]: \"%.64s\" is not "
                                    "supported (full_attention or sliding_attention; hybrid "
                                    "recurrent layers are not)", file, l, e->valuestring);
        }
        if (arch == SQ_ARCH_LLAMA)
            memset(c->layer_sliding, 0, sizeof c->layer_sliding);
        return SQ_OK;
    }
    if (!window)
        return SQ_OK;
    long long mwl = 28, pattern = arch == SQ_ARCH_GEMMA2 ? 2 : 6;
    if (arch == SQ_ARCH_QWEN2 || arch == SQ_ARCH_QWEN3) {
        int rc = sq_json_get_int(root, "max_window_layers", 0, 0, SQ_MODEL_MAX_LAYERS, &mwl, file,
                                 "", err);
        if (rc)
            return rc;
    }
    if (arch == SQ_ARCH_GEMMA3 || arch == SQ_ARCH_GEMMA3_MM) {
        const char *pk = sq_json_field(root, "sliding_window_pattern") ? "sliding_window_pattern"
                                                                       : "_sliding_window_pattern";
        int rc = sq_json_get_int(root, pk, 0, 1, SQ_MODEL_MAX_LAYERS, &pattern, file, "", err);
        if (rc)
            return rc;
    }
    for (int l = 0; l < c->n_layers; l++) {
        int on = 1;   /* Mistral: every layer */
        if (arch == SQ_ARCH_QWEN2 || arch == SQ_ARCH_QWEN3)
            on = l >= mwl;
        else if (is_gemma(arch))
            on = (l + 1) % pattern != 0;
        set_sliding(c, l, on);
    }
    return SQ_OK;
}

/* rope_theta, rope_scaling (transformers 4.x) or rope_parameters (5.x, flat or per layer
 * type), and Gemma-3's rope_local_base_freq. */
static int parse_ropes(const char *file, const cJSON *root, sq_model_config *c, sq_error *err)
{
    double theta = defaults_of(c->arch).rope_theta;
    int rc = sq_json_get_number(root, "rope_theta", 0, &theta, file, "", err);
    if (!rc && !(theta > 1 && theta < 1e12))
        rc = sq_error_set(err, SQ_EDATA, "%s: rope_theta: %g is not in (1, 1e12)", file, theta);
    if (rc)
        return rc;
    c->rope_theta = (float)theta;
    memset(&c->rope, 0, sizeof c->rope);
    memset(&c->rope_local, 0, sizeof c->rope_local);
    const int gemma3 = c->arch == SQ_ARCH_GEMMA3 || c->arch == SQ_ARCH_GEMMA3_MM;
    if (gemma3) {
        double local = 10000.0;
        rc = sq_json_get_number(root, "rope_local_base_freq", 0, &local, file, "", err);
        if (!rc && !(local > 1 && local < 1e12))
            rc = sq_error_set(err, SQ_EDATA, "%s: rope_local_base_freq: %g is not in (1, 1e12)",
                              file, local);
        if (rc)
            return rc;
        c->rope_local.theta = (float)local;
    }
    const cJSON *rs = sq_json_field(root, "rope_scaling");
    const cJSON *rp = sq_json_field(root, "rope_parameters");
    if (rp) {
        if (!cJSON_IsObject(rp))
            return sq_error_set(err, SQ_EDATA, "%s: rope_parameters: expected an object", file);
        const cJSON *full = cJSON_GetObjectItemCaseSensitive(rp, "full_attention");
        const cJSON *slid = cJSON_GetObjectItemCaseSensitive(rp, "sliding_attention");
        if (full || slid) {
            for (const cJSON *e = rp->child; e; e = e->next)
                if (strcmp(e->string, "full_attention") != 0 &&
                    strcmp(e->string, "sliding_attention") != 0)
                    return sq_error_set(err, SQ_EDATA, "%s: rope_parameters.%.64s: not a layer "
                                        "type of this runtime (full_attention, "
                                        "sliding_attention)", file, e->string);
            if (full)
                rc = parse_rope(file, full, "rope_parameters.full_attention", 1, c, &c->rope, err);
            if (!rc && slid)
                rc = parse_rope(file, slid, "rope_parameters.sliding_attention", 1, c,
                                &c->rope_local, err);
        } else {
            rc = parse_rope(file, rp, "rope_parameters", 1, c, &c->rope, err);
        }
        if (!rc && c->rope.theta > 0)
            c->rope_theta = c->rope.theta;
        c->rope.theta = 0;
        if (!rc && slid && c->rope_local.theta <= 0)
            c->rope_local.theta = c->rope_theta;
    } else if (rs) {
        rc = parse_rope(file, rs, "rope_scaling", 0, c, &c->rope, err);
        c->rope.theta = 0;
    }
    if (rc)
        return rc;
    /* the sliding layers' own parameters matter only where they differ */
    if (c->rope_local.theta > 0 && c->rope_local.type == SQ_ROPE_DEFAULT &&
        c->rope_local.theta == c->rope_theta && c->rope.type == SQ_ROPE_DEFAULT)
        memset(&c->rope_local, 0, sizeof c->rope_local);
    return SQ_OK;
}

/* Gemma's number-or-null keys: a positive value, or null / absent (def then applies when the
 * key is absent). */
static int get_cap(const char *file, const cJSON *root, const char *key, double def, float *out,
                   sq_error *err)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
    double x = v ? 0 : def;
    if (v && !cJSON_IsNull(v)) {
        int rc = sq_json_get_number(root, key, 1, &x, file, "", err);
        if (rc)
            return rc;
        if (!(x > 0 && x < 1e9))
            return sq_error_set(err, SQ_EDATA, "%s: %s: %g is not positive (null turns it off)",
                                file, key, x);
    }
    *out = (float)x;
    return SQ_OK;
}

int sq_model_config_parse(const char *file, const cJSON *root0, sq_model_config *cfg,
                          sq_error *err)
{
    memset(cfg, 0, sizeof *cfg);
    if (!cJSON_IsObject(root0))
        return sq_error_set(err, SQ_EDATA, "%s: expected a JSON object", file);
    int rc = check_architecture(file, root0, &cfg->arch, err);
    if (!rc)
        rc = check_refused_keys(file, root0, "", err);
    if (rc)
        return rc;
    const cJSON *root = root0;
    if (cfg->arch == SQ_ARCH_GEMMA3_MM) {
        root = sq_json_field(root0, "text_config");
        if (!root || !cJSON_IsObject(root))
            return sq_error_set(err, SQ_EDATA, "%s: text_config: missing or not an object (a "
                                "Gemma3ForConditionalGeneration config holds its language "
                                "model's there)", file);
        rc = check_refused_keys(file, root, "text_config", err);
        if (rc)
            return rc;
    }
    const arch_defaults def = defaults_of(cfg->arch);
    /* Gemma-3's multimodal configs leave the text model's sizes at Gemma3TextConfig's
     * defaults (Gemma-3-4B's text_config has no vocab_size or head counts) */
    const int g3 = cfg->arch == SQ_ARCH_GEMMA3 || cfg->arch == SQ_ARCH_GEMMA3_MM;
    if (g3) {
        cfg->dim = 2304;
        cfg->hidden_dim = 9216;
        cfg->n_layers = 26;
        cfg->n_heads = 8;
        cfg->n_kv_heads = 4;
        cfg->vocab_size = 262208;
    }

    rc = get_int(root, "hidden_size", !g3, 1, SQ_MODEL_MAX_DIM, &cfg->dim, file, err);
    if (!rc)
        rc = get_int(root, "intermediate_size", !g3, 1, SQ_MODEL_MAX_HIDDEN, &cfg->hidden_dim,
                     file, err);
    if (!rc)
        rc = get_int(root, "num_hidden_layers", !g3, 1, SQ_MODEL_MAX_LAYERS, &cfg->n_layers,
                     file, err);
    if (!rc)
        rc = get_int(root, "num_attention_heads", !g3, 1, SQ_MODEL_MAX_DIM, &cfg->n_heads, file,
                     err);
    if (!rc) {
        if (!g3)
            cfg->n_kv_heads = cfg->n_heads;
        rc = get_int(root, "num_key_value_heads", 0, 1, SQ_MODEL_MAX_DIM, &cfg->n_kv_heads, file,
                     err);
    }
    if (!rc)
        rc = get_int(root, "vocab_size", !g3, 1, SQ_MODEL_MAX_VOCAB, &cfg->vocab_size, file, err);
    if (!rc) {
        cfg->max_position = def.max_position;
        rc = get_int(root, "max_position_embeddings", 0, 1, 1LL << 30, &cfg->max_position, file,
                     err);
    }
    double eps = 1e-6;
    if (!rc)
        rc = sq_json_get_number(root, "rms_norm_eps", 0, &eps, file, "", err);
    /* the value is used as a float32: below FLT_MIN it would become 0 (or a subnormal) */
    if (!rc && !(eps >= FLT_MIN && eps < 1))
        rc = sq_error_set(err, SQ_EDATA, "%s: rms_norm_eps: %g is not in [%g, 1) (it is used as a "
                          "normal float32)", file, eps, (double)FLT_MIN);
    if (rc)
        return rc;
    cfg->norm_eps = (float)eps;
    cfg->tied_embeddings = def.tied;
    if (root != root0)
        rc = get_bool(root0, "tie_word_embeddings", &cfg->tied_embeddings, file, err);
    if (!rc)
        rc = get_bool(root, "tie_word_embeddings", &cfg->tied_embeddings, file, err);
    if (rc)
        return rc;

    const int gemma = is_gemma(cfg->arch);
    cfg->gemma = gemma;
    const char *act = gemma ? "gelu_pytorch_tanh" : "silu";
    const char *act_key = gemma && sq_json_field(root, "hidden_activation") ? "hidden_activation"
                                                                            : "hidden_act";
    rc = sq_json_get_string(root, act_key, 0, &act, file, "", err);
    if (rc)
        return rc;
    if (!gemma && strcmp(act, "silu") == 0)
        cfg->act = SQ_ACT_SILU;
    else if (gemma && (strcmp(act, "gelu_pytorch_tanh") == 0 || strcmp(act, "gelu_tanh") == 0))
        cfg->act = SQ_ACT_GELU_TANH;
    else
        return sq_error_set(err, SQ_EDATA, "%s: %s: \"%.64s\" is not supported (%s)", file,
                            act_key, act, gemma ? "gelu_pytorch_tanh" : "silu");
    rc = parse_ropes(file, root, cfg, err);
    if (rc)
        return rc;

    /* biases: Qwen2 always has q/k/v biases; attention_bias (q/k/v/o) where the family reads
     * it; mlp_bias only in Llama */
    int ab = 0, mb = 0;
    rc = get_bool(root, "attention_bias", &ab, file, err);
    if (!rc)
        rc = get_bool(root, "mlp_bias", &mb, file, err);
    if (rc)
        return rc;
    if (ab && (cfg->arch == SQ_ARCH_MISTRAL || cfg->arch == SQ_ARCH_QWEN2))
        return sq_error_set(err, SQ_EDATA, "%s: attention_bias: true is not part of %s", file,
                            sq_arch_get(cfg->arch)->name);
    if (mb && cfg->arch != SQ_ARCH_LLAMA)
        return sq_error_set(err, SQ_EDATA, "%s: mlp_bias: true is not part of %s", file,
                            sq_arch_get(cfg->arch)->name);
    cfg->attn_bias = ab || cfg->arch == SQ_ARCH_QWEN2;
    cfg->attn_out_bias = ab;
    cfg->mlp_bias = mb;
    cfg->qk_norm = cfg->arch == SQ_ARCH_QWEN3 || cfg->arch == SQ_ARCH_GEMMA3 ||
                   cfg->arch == SQ_ARCH_GEMMA3_MM;

    if (gemma) {
        double qs = 256;
        rc = sq_json_get_number(root, "query_pre_attn_scalar", 0, &qs, file, "", err);
        if (!rc && !(qs > 0 && qs < 1e9))
            rc = sq_error_set(err, SQ_EDATA, "%s: query_pre_attn_scalar: %g is not positive",
                              file, qs);
        if (rc)
            return rc;
        cfg->query_pre_attn_scalar = (float)qs;
        const int g2 = cfg->arch == SQ_ARCH_GEMMA2;
        rc = get_cap(file, root, "attn_logit_softcapping", g2 ? 50.0 : 0, &cfg->attn_softcap, err);
        if (!rc)
            rc = get_cap(file, root, "final_logit_softcapping", g2 ? 30.0 : 0,
                         &cfg->final_softcap, err);
        if (rc)
            return rc;
    }

    /* head_dim: explicit (Mistral, Qwen3, Gemma: heads * head_dim may differ from hidden) or
     * hidden_size / num_attention_heads */
    const cJSON *hdv = sq_json_field(root, "head_dim");
    if (hdv) {
        rc = get_int(root, "head_dim", 1, 1, SQ_MODEL_MAX_DIM, &cfg->head_dim, file, err);
        if (rc)
            return rc;
    } else if (gemma) {
        cfg->head_dim = 256;
    } else {
        if (cfg->dim % cfg->n_heads != 0)
            return sq_error_set(err, SQ_EDATA, "%s: hidden_size %d is not a multiple of "
                                "num_attention_heads %d (and there is no head_dim)", file,
                                cfg->dim, cfg->n_heads);
        cfg->head_dim = cfg->dim / cfg->n_heads;
    }
    if (cfg->head_dim % 2 != 0)
        return sq_error_set(err, SQ_EDATA, "%s: head_dim: %d is odd; RoPE needs an even head "
                            "dimension", file, cfg->head_dim);
    if ((long long)cfg->n_heads * cfg->head_dim > SQ_MODEL_MAX_DIM)
        return sq_error_set(err, SQ_EDATA, "%s: head_dim: %d * num_attention_heads %d exceeds "
                            "%d", file, cfg->head_dim, cfg->n_heads, SQ_MODEL_MAX_DIM);
    if (cfg->n_kv_heads > cfg->n_heads || cfg->n_heads % cfg->n_kv_heads != 0)
        return sq_error_set(err, SQ_EDATA, "%s: num_key_value_heads: %d does not divide "
                            "num_attention_heads %d", file, cfg->n_kv_heads, cfg->n_heads);
    return parse_windows(file, root, root0, cfg, err);
}

int sq_model_config_load(const char *path, sq_model_config *cfg, sq_error *err)
{
    cJSON *root = NULL;
    int rc = sq_json_load(path, &root, err);
    if (rc)
        return rc;
    rc = sq_model_config_parse(path, root, cfg, err);
    cJSON_Delete(root);
    return rc;
}

/* A RoPE parameter object ("rope_scaling" form: no rope_theta). */
static cJSON *rope_json(const sq_rope_params *r)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "rope_type", sq_rope_type_name(r->type));
    if (r->type != SQ_ROPE_DEFAULT)
        cJSON_AddNumberToObject(o, "factor", r->factor);
    if (r->type == SQ_ROPE_LLAMA3) {
        cJSON_AddNumberToObject(o, "low_freq_factor", r->low_freq_factor);
        cJSON_AddNumberToObject(o, "high_freq_factor", r->high_freq_factor);
    }
    if ((r->type == SQ_ROPE_LLAMA3 || r->type == SQ_ROPE_YARN) && r->original_max_position > 0)
        cJSON_AddNumberToObject(o, "original_max_position_embeddings", r->original_max_position);
    if (r->type == SQ_ROPE_YARN) {
        const struct { const char *k; float v; } f[] = {
            {"beta_fast", r->beta_fast}, {"beta_slow", r->beta_slow},
            {"attention_factor", r->attention_factor}, {"mscale", r->mscale},
            {"mscale_all_dim", r->mscale_all_dim}};
        for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
            if (f[i].v > 0)
                cJSON_AddNumberToObject(o, f[i].k, f[i].v);
        if (r->no_truncate)
            cJSON_AddFalseToObject(o, "truncate");
    }
    return o;
}

cJSON *sq_model_config_to_json(const sq_model_config *cfg)
{
    sq_json_build b = sq_json_build_begin();
    const sq_arch *a = sq_arch_get(cfg->arch) ? sq_arch_get(cfg->arch) : sq_arch_get(0);
    const int arch = sq_arch_get(cfg->arch) ? cfg->arch : SQ_ARCH_LLAMA;
    cJSON *top = cJSON_CreateObject();
    cJSON *archs = cJSON_CreateArray();
    sq_json_append(archs, cJSON_CreateString(a->name));
    sq_json_add(top, "architectures", archs);
    cJSON_AddStringToObject(top, "model_type", a->model_type);
    cJSON *o = top;
    if (arch == SQ_ARCH_GEMMA3_MM) {
        o = cJSON_CreateObject();
        sq_json_add(top, "text_config", o);
        cJSON_AddStringToObject(o, "model_type", "gemma3_text");
    }
    cJSON_AddNumberToObject(o, "hidden_size", cfg->dim);
    cJSON_AddNumberToObject(o, "intermediate_size", cfg->hidden_dim);
    cJSON_AddNumberToObject(o, "num_hidden_layers", cfg->n_layers);
    cJSON_AddNumberToObject(o, "num_attention_heads", cfg->n_heads);
    cJSON_AddNumberToObject(o, "num_key_value_heads", cfg->n_kv_heads);
    cJSON_AddNumberToObject(o, "head_dim", cfg->head_dim);
    cJSON_AddNumberToObject(o, "vocab_size", cfg->vocab_size);
    cJSON_AddNumberToObject(o, "max_position_embeddings", cfg->max_position);
    cJSON_AddNumberToObject(o, "rms_norm_eps", cfg->norm_eps);
    cJSON_AddNumberToObject(o, "rope_theta", cfg->rope_theta);
    cJSON_AddBoolToObject(o, "tie_word_embeddings", cfg->tied_embeddings);
    const int gemma = arch == SQ_ARCH_GEMMA2 || arch == SQ_ARCH_GEMMA3 ||
                      arch == SQ_ARCH_GEMMA3_MM;
    cJSON_AddStringToObject(o, gemma ? "hidden_activation" : "hidden_act",
                            gemma ? "gelu_pytorch_tanh" : "silu");
    if (cfg->rope.type != SQ_ROPE_DEFAULT)
        sq_json_add(o, "rope_scaling", rope_json(&cfg->rope));
    else
        cJSON_AddNullToObject(o, "rope_scaling");
    if ((arch == SQ_ARCH_GEMMA3 || arch == SQ_ARCH_GEMMA3_MM))
        cJSON_AddNumberToObject(o, "rope_local_base_freq",
                                cfg->rope_local.theta > 0 ? cfg->rope_local.theta
                                                          : cfg->rope_theta);
    if (arch == SQ_ARCH_LLAMA || arch == SQ_ARCH_QWEN3 || gemma)
        cJSON_AddBoolToObject(o, "attention_bias", cfg->attn_out_bias);
    if (arch == SQ_ARCH_LLAMA)
        cJSON_AddBoolToObject(o, "mlp_bias", cfg->mlp_bias);
    if (gemma) {
        cJSON_AddNumberToObject(o, "query_pre_attn_scalar",
                                cfg->query_pre_attn_scalar > 0 ? cfg->query_pre_attn_scalar
                                                               : cfg->head_dim);
        if (cfg->attn_softcap > 0)
            cJSON_AddNumberToObject(o, "attn_logit_softcapping", cfg->attn_softcap);
        else
            cJSON_AddNullToObject(o, "attn_logit_softcapping");
        if (cfg->final_softcap > 0)
            cJSON_AddNumberToObject(o, "final_logit_softcapping", cfg->final_softcap);
        else
            cJSON_AddNullToObject(o, "final_logit_softcapping");
    }
    if (arch != SQ_ARCH_LLAMA) {
        if (cfg->sliding_window > 0) {
            cJSON_AddNumberToObject(o, "sliding_window", cfg->sliding_window);
            if (arch == SQ_ARCH_QWEN2 || arch == SQ_ARCH_QWEN3)
                cJSON_AddTrueToObject(o, "use_sliding_window");
            cJSON *lt = cJSON_CreateArray();
            for (int l = 0; l < cfg->n_layers; l++)
                sq_json_append(lt, cJSON_CreateString(sq_model_layer_sliding(cfg, l)
                                                          ? "sliding_attention"
                                                          : "full_attention"));
            sq_json_add(o, "layer_types", lt);
        } else {
            cJSON_AddNullToObject(o, "sliding_window");
        }
    }
    if (cfg->dtype[0])
        cJSON_AddStringToObject(top, "torch_dtype",
                                strcmp(cfg->dtype, "F32") == 0   ? "float32"
                                : strcmp(cfg->dtype, "F16") == 0 ? "float16"
                                                                 : "bfloat16");
    return sq_json_build_end(b, top);
}
