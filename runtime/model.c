/* Loading a Llama checkpoint: config.json + safetensors -> float32 weight views. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "runtime/backend.h"
#include "runtime/config.h"
#include "runtime/safetensors.h"

#define NAME_MAX_LEN 128

static int keep_buffer(sq_model *m, float *buf, size_t bytes, sq_error *err)
{
    float **o = realloc(m->owned, (size_t)(m->n_owned + 1) * sizeof *o);
    if (!o) {
        free(buf);
        return sq_error_oom(err, "the weight table");
    }
    m->owned = o;
    m->owned[m->n_owned++] = buf;
    m->owned_bytes += bytes;
    return SQ_OK;
}

static void shape_str(char *buf, size_t cap, int ndim, const int64_t *shape)
{
    size_t len = 0;
    len += (size_t)snprintf(buf + len, cap - len, "[");
    for (int i = 0; i < ndim && len < cap; i++)
        len += (size_t)snprintf(buf + len, cap - len, "%s%lld", i ? ", " : "",
                                (long long)shape[i]);
    if (len < cap)
        snprintf(buf + len, cap - len, "]");
}

/* Finds `name`, checks its dtype and shape (d0) or (d0, d1) (d1 = 0 for a vector), and returns
 * a float32 view of it. */
static int get_weight(sq_model *m, const char *name, int64_t d0, int64_t d1, const float **out,
                      const char **dtype_out, sq_error *err)
{
    const sq_st_file *f = NULL;
    const sq_st_tensor *t = sq_st_set_find(m->st, name, &f);
    if (!t)
        return sq_error_set(err, SQ_EDATA, "%s: tensor %s: missing from the checkpoint", m->dir,
                            name);
    if (t->dtype != SQ_ST_F32 && t->dtype != SQ_ST_F16 && t->dtype != SQ_ST_BF16)
        return sq_error_set(err, SQ_EDATA, "%s: %s: dtype %s is not supported (F32, F16 or "
                            "BF16)", f->path, name, sq_st_dtype_name(t->dtype));
    int64_t want[2] = {d0, d1};
    int want_ndim = d1 ? 2 : 1;
    if (t->ndim != want_ndim || t->shape[0] != d0 || (d1 && t->shape[1] != d1)) {
        char got[160], exp[64];
        shape_str(got, sizeof got, t->ndim, t->shape);
        shape_str(exp, sizeof exp, want_ndim, want);
        return sq_error_set(err, SQ_EDATA, "%s: %s: shape %s, but config.json implies %s",
                            f->path, name, got, exp);
    }
    if (dtype_out)
        *dtype_out = sq_st_dtype_name(t->dtype);
    if (t->dtype == SQ_ST_F32 && (uintptr_t)t->data % _Alignof(float) == 0) {
        *out = t->data;
        return SQ_OK;
    }
    size_t bytes = (size_t)t->numel * sizeof(float);
    float *buf = malloc(bytes ? bytes : 1);
    if (!buf)
        return sq_error_oom(err, name);
    sq_st_to_f32(t->dtype, t->data, buf, (size_t)t->numel);
    *out = buf;
    return keep_buffer(m, buf, bytes, err);
}

static int load_weights(sq_model *m, sq_error *err)
{
    const sq_model_config *c = &m->config;
    int64_t dim = c->dim, hid = c->hidden_dim, vocab = c->vocab_size;
    int64_t q_dim = (int64_t)c->n_heads * c->head_dim;
    int64_t kv_dim = (int64_t)c->n_kv_heads * c->head_dim;
    const char *dtype = NULL;
    int rc = get_weight(m, "model.embed_tokens.weight", vocab, dim, &m->w.embed, &dtype, err);
    if (rc)
        return rc;
    snprintf(m->config.dtype, sizeof m->config.dtype, "%s", dtype);
    m->w.layers = calloc((size_t)c->n_layers, sizeof *m->w.layers);
    if (!m->w.layers)
        return sq_error_oom(err, "the layer table");
    char name[NAME_MAX_LEN];
    for (int l = 0; l < c->n_layers && !rc; l++) {
        sq_layer_weights *lw = &m->w.layers[l];
        const struct {
            const char   *suffix;
            int64_t       d0, d1;
            const float **dst;
        } items[] = {
            {"input_layernorm.weight", dim, 0, &lw->attn_norm},
            {"self_attn.q_proj.weight", q_dim, dim, &lw->wq},
            {"self_attn.k_proj.weight", kv_dim, dim, &lw->wk},
            {"self_attn.v_proj.weight", kv_dim, dim, &lw->wv},
            {"self_attn.o_proj.weight", dim, q_dim, &lw->wo},
            {"post_attention_layernorm.weight", dim, 0, &lw->ffn_norm},
            {"mlp.gate_proj.weight", hid, dim, &lw->w_gate},
            {"mlp.up_proj.weight", hid, dim, &lw->w_up},
            {"mlp.down_proj.weight", dim, hid, &lw->w_down},
        };
        for (size_t i = 0; i < sizeof items / sizeof items[0] && !rc; i++) {
            snprintf(name, sizeof name, "model.layers.%d.%s", l, items[i].suffix);
            rc = get_weight(m, name, items[i].d0, items[i].d1, items[i].dst, NULL, err);
        }
    }
    if (!rc)
        rc = get_weight(m, "model.norm.weight", dim, 0, &m->w.norm, NULL, err);
    if (rc)
        return rc;
    if (c->tied_embeddings)
        m->w.lm_head = m->w.embed;   /* like transformers, a stored lm_head.weight is ignored */
    else
        rc = get_weight(m, "lm_head.weight", vocab, dim, &m->w.lm_head, NULL, err);
    return rc;
}

int sq_model_load(const char *dir, sq_model **out, sq_error *err)
{
    *out = NULL;
    struct stat st;
    if (stat(dir, &st) != 0)
        return sq_error_set(err, SQ_ENOINPUT, "%s: model directory does not exist", dir);
    if (!S_ISDIR(st.st_mode))
        return sq_error_set(err, SQ_ENOINPUT, "%s: not a directory (expected a Hugging Face "
                            "model directory with config.json)", dir);
    sq_model *m = calloc(1, sizeof *m);
    if (!m || !(m->dir = strdup(dir))) {
        free(m);
        return sq_error_oom(err, "a model");
    }
    size_t n = strlen(dir) + sizeof "/config.json";
    char *cfg_path = malloc(n);
    int rc;
    if (!cfg_path) {
        rc = sq_error_oom(err, "a path");
        goto fail;
    }
    snprintf(cfg_path, n, "%s/config.json", dir);
    rc = sq_model_config_load(cfg_path, &m->config, err);
    free(cfg_path);
    if (rc)
        goto fail;
    rc = sq_st_set_open(dir, &m->st, err);
    if (rc)
        goto fail;
    rc = load_weights(m, err);
    if (rc)
        goto fail;
    *out = m;
    return SQ_OK;
fail:
    sq_model_free(m);
    return rc;
}

void sq_model_free(sq_model *m)
{
    if (!m)
        return;
    for (int i = 0; i < m->n_owned; i++)
        free(m->owned[i]);
    free(m->owned);
    free(m->w.layers);
    sq_st_set_free(m->st);
    free(m->dir);
    free(m);
}

const sq_model_config *sq_model_get_config(const sq_model *m)
{
    return &m->config;
}
