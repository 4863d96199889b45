#include "runtime/config.h"

#include <float.h>
#include <stdio.h>
#include <string.h>

#include "libsequoia/base/json.h"
#include "runtime/arch.h"

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
        return sq_error_set(err, SQ_EDATA, "%s: architectures: %.64s is not supported (this "
                            "runtime loads %s only)", file,
                            cJSON_IsString(first) ? first->valuestring : "(not a string)",
                            sq_arch_names(0));
    }
    const char *mt = NULL;
    int rc = sq_json_get_string(root, "model_type", 0, &mt, file, "", err);
    if (rc)
        return rc;
    if (!mt)
        return sq_error_set(err, SQ_EDATA, "%s: architectures: missing, and no model_type "
                            "either; expected %s", file, sq_arch_names(0));
    if ((*arch = sq_arch_find(mt, 1)) < 0)
        return sq_error_set(err, SQ_EDATA, "%s: model_type: \"%.64s\" is not supported (this "
                            "runtime loads %s only)", file, mt, sq_arch_names(1));
    return SQ_OK;
}

static int check_rope_scaling(const char *file, const cJSON *root, sq_error *err)
{
    const cJSON *rs = sq_json_field(root, "rope_scaling");
    if (!rs)
        return SQ_OK;
    if (!cJSON_IsObject(rs))
        return sq_error_set(err, SQ_EDATA, "%s: rope_scaling: expected null or an object", file);
    const char *key = "rope_type";
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(rs, key);
    if (!t) {
        key = "type";
        t = cJSON_GetObjectItemCaseSensitive(rs, key);
    }
    if (!t)
        return sq_error_set(err, SQ_EDATA, "%s: rope_scaling: has no rope_type; only null or "
                            "\"default\" is supported", file);
    if (!cJSON_IsString(t))
        return sq_error_set(err, SQ_EDATA, "%s: rope_scaling.%s: expected a string", file, key);
    if (strcmp(t->valuestring, "default") != 0)
        return sq_error_set(err, SQ_EDATA, "%s: rope_scaling.%s: \"%.64s\" scaling is not "
                            "implemented (only null or \"default\")", file, key, t->valuestring);
    return SQ_OK;
}

int sq_model_config_parse(const char *file, const cJSON *root, sq_model_config *cfg,
                          sq_error *err)
{
    memset(cfg, 0, sizeof *cfg);
    if (!cJSON_IsObject(root))
        return sq_error_set(err, SQ_EDATA, "%s: expected a JSON object", file);
    int rc = check_architecture(file, root, &cfg->arch, err);
    if (rc)
        return rc;

    rc = get_int(root, "hidden_size", 1, 1, SQ_MODEL_MAX_DIM, &cfg->dim, file, err);
    if (!rc)
        rc = get_int(root, "intermediate_size", 1, 1, SQ_MODEL_MAX_HIDDEN, &cfg->hidden_dim,
                     file, err);
    if (!rc)
        rc = get_int(root, "num_hidden_layers", 1, 1, SQ_MODEL_MAX_LAYERS, &cfg->n_layers, file,
                     err);
    if (!rc)
        rc = get_int(root, "num_attention_heads", 1, 1, SQ_MODEL_MAX_DIM, &cfg->n_heads, file,
                     err);
    if (!rc) {
        cfg->n_kv_heads = cfg->n_heads;
        rc = get_int(root, "num_key_value_heads", 0, 1, SQ_MODEL_MAX_DIM, &cfg->n_kv_heads, file,
                     err);
    }
    if (!rc)
        rc = get_int(root, "vocab_size", 1, 1, SQ_MODEL_MAX_VOCAB, &cfg->vocab_size, file, err);
    if (!rc) {
        cfg->max_position = 2048;
        rc = get_int(root, "max_position_embeddings", 0, 1, 1LL << 30, &cfg->max_position, file,
                     err);
    }
    double eps = 1e-6, theta = 10000.0;
    if (!rc)
        rc = sq_json_get_number(root, "rms_norm_eps", 0, &eps, file, "", err);
    /* the value is used as a float32: below FLT_MIN it would become 0 (or a subnormal) */
    if (!rc && !(eps >= FLT_MIN && eps < 1))
        rc = sq_error_set(err, SQ_EDATA, "%s: rms_norm_eps: %g is not in [%g, 1) (it is used as a "
                          "normal float32)", file, eps, (double)FLT_MIN);
    if (!rc)
        rc = sq_json_get_number(root, "rope_theta", 0, &theta, file, "", err);
    if (!rc && !(theta > 1 && theta < 1e12))
        rc = sq_error_set(err, SQ_EDATA, "%s: rope_theta: %g is not in (1, 1e12)", file, theta);
    if (rc)
        return rc;
    cfg->norm_eps = (float)eps;
    cfg->rope_theta = (float)theta;
    rc = get_bool(root, "tie_word_embeddings", &cfg->tied_embeddings, file, err);
    if (rc)
        return rc;

    const char *act = "silu";
    rc = sq_json_get_string(root, "hidden_act", 0, &act, file, "", err);
    if (rc)
        return rc;
    if (strcmp(act, "silu") != 0)
        return sq_error_set(err, SQ_EDATA, "%s: hidden_act: \"%.64s\" is not supported (only "
                            "silu)", file, act);
    rc = check_rope_scaling(file, root, err);
    if (rc)
        return rc;
    const char *biases[] = {"attention_bias", "mlp_bias"};
    for (int i = 0; i < 2; i++) {
        int on = 0;
        rc = get_bool(root, biases[i], &on, file, err);
        if (rc)
            return rc;
        if (on)
            return sq_error_set(err, SQ_EDATA, "%s: %s: true is not supported (Llama has no "
                                "biases)", file, biases[i]);
    }

    if (cfg->dim % cfg->n_heads != 0)
        return sq_error_set(err, SQ_EDATA, "%s: hidden_size %d is not a multiple of "
                            "num_attention_heads %d", file, cfg->dim, cfg->n_heads);
    cfg->head_dim = cfg->dim / cfg->n_heads;
    int hd = cfg->head_dim;
    rc = get_int(root, "head_dim", 0, 1, SQ_MODEL_MAX_DIM, &hd, file, err);
    if (rc)
        return rc;
    if (hd != cfg->head_dim)
        return sq_error_set(err, SQ_EDATA, "%s: head_dim: %d differs from hidden_size / "
                            "num_attention_heads = %d; not supported", file, hd, cfg->head_dim);
    if (cfg->head_dim % 2 != 0)
        return sq_error_set(err, SQ_EDATA, "%s: head_dim: %d is odd; RoPE needs an even head "
                            "dimension", file, cfg->head_dim);
    if (cfg->n_kv_heads > cfg->n_heads || cfg->n_heads % cfg->n_kv_heads != 0)
        return sq_error_set(err, SQ_EDATA, "%s: num_key_value_heads: %d does not divide "
                            "num_attention_heads %d", file, cfg->n_kv_heads, cfg->n_heads);
    return SQ_OK;
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

cJSON *sq_model_config_to_json(const sq_model_config *cfg)
{
    cJSON *o = cJSON_CreateObject();
    cJSON *arch = cJSON_CreateArray();
    if (!o || !arch) {
        cJSON_Delete(o);
        cJSON_Delete(arch);
        return NULL;
    }
    const sq_arch *a = sq_arch_get(cfg->arch) ? sq_arch_get(cfg->arch) : sq_arch_get(0);
    int ok = cJSON_AddItemToArray(arch, cJSON_CreateString(a->name)) &&
             cJSON_AddItemToObject(o, "architectures", arch);
    if (!ok)
        cJSON_Delete(arch);
    ok = ok && cJSON_AddStringToObject(o, "model_type", a->model_type) &&
         cJSON_AddNumberToObject(o, "hidden_size", cfg->dim) &&
         cJSON_AddNumberToObject(o, "intermediate_size", cfg->hidden_dim) &&
         cJSON_AddNumberToObject(o, "num_hidden_layers", cfg->n_layers) &&
         cJSON_AddNumberToObject(o, "num_attention_heads", cfg->n_heads) &&
         cJSON_AddNumberToObject(o, "num_key_value_heads", cfg->n_kv_heads) &&
         cJSON_AddNumberToObject(o, "vocab_size", cfg->vocab_size) &&
         cJSON_AddNumberToObject(o, "max_position_embeddings", cfg->max_position) &&
         cJSON_AddNumberToObject(o, "rms_norm_eps", cfg->norm_eps) &&
         cJSON_AddNumberToObject(o, "rope_theta", cfg->rope_theta) &&
         cJSON_AddBoolToObject(o, "tie_word_embeddings", cfg->tied_embeddings) &&
         cJSON_AddStringToObject(o, "hidden_act", "silu") &&
         cJSON_AddNullToObject(o, "rope_scaling");
    if (ok && cfg->dtype[0])
        ok = cJSON_AddStringToObject(o, "torch_dtype",
                                     strcmp(cfg->dtype, "F32") == 0   ? "float32"
                                     : strcmp(cfg->dtype, "F16") == 0 ? "float16"
                                                                      : "bfloat16") != NULL;
    if (!ok) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}
