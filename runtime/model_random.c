/* Models with random weights of a given shape, held in memory: forward latency depends on the
 * shapes, not the values, so sequoia-profile can time a Llama-2-7B or 70B shape from its
 * config.json alone. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/backend.h"

/* splitmix64: a tiny deterministic generator, plenty for filler weights */
static uint64_t next_u64(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static float *alloc_fill(sq_model *m, size_t count, float scale, float offset, uint64_t *state,
                         sq_error *err)
{
    float *buf = malloc((count ? count : 1) * sizeof *buf);
    if (!buf) {
        sq_error_oom(err, "random weights");
        return NULL;
    }
    for (size_t i = 0; i < count; i++) {
        double u = (double)(next_u64(state) >> 11) / 9007199254740992.0; /* [0, 1) */
        buf[i] = offset + scale * (float)(2.0 * u - 1.0);
    }
    float **o = realloc(m->owned, (size_t)(m->n_owned + 1) * sizeof *o);
    if (!o) {
        free(buf);
        sq_error_oom(err, "the weight table");
        return NULL;
    }
    m->owned = o;
    m->owned[m->n_owned++] = buf;
    m->owned_bytes += count * sizeof *buf;
    return buf;
}

size_t sq_model_config_params(const sq_model_config *c)
{
    size_t dim = (size_t)c->dim, hid = (size_t)c->hidden_dim, vocab = (size_t)c->vocab_size;
    size_t q = (size_t)c->n_heads * (size_t)c->head_dim, kv = (size_t)c->n_kv_heads * (size_t)c->head_dim;
    size_t layer = 2 * dim + q * dim + 2 * kv * dim + dim * q + 3 * hid * dim;
    return vocab * dim * (c->tied_embeddings ? 1 : 2) + dim + (size_t)c->n_layers * layer;
}

int sq_model_new_random(const sq_model_config *cfg, uint64_t seed, sq_model **out, sq_error *err)
{
    *out = NULL;
    double need = (double)sq_model_config_params(cfg) * sizeof(float);
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
    double have = pages > 0 && page > 0 ? (double)pages * (double)page : 0;
    if (have > 0 && need > 0.8 * have)
        return sq_error_set(err, SQ_EUSAGE, "random weights of this shape need %.1f GiB as float32, "
                            "more than 80%% of this machine's %.1f GiB of memory; profile a "
                            "smaller shape (fewer layers) or on a larger machine",
                            need / 1073741824.0, have / 1073741824.0);
    sq_model *m = calloc(1, sizeof *m);
    if (!m)
        return sq_error_oom(err, "model");
    m->config = *cfg;
    snprintf(m->config.dtype, sizeof m->config.dtype, "F32");
    m->dir = strdup("(random weights)");
    m->w.layers = calloc((size_t)cfg->n_layers, sizeof *m->w.layers);
    if (!m->dir || !m->w.layers) {
        sq_model_free(m);
        return sq_error_oom(err, "model");
    }
    uint64_t s = seed;
    size_t dim = (size_t)cfg->dim, hid = (size_t)cfg->hidden_dim, vocab = (size_t)cfg->vocab_size;
    size_t q = (size_t)cfg->n_heads * (size_t)cfg->head_dim;
    size_t kv = (size_t)cfg->n_kv_heads * (size_t)cfg->head_dim;
    float sd = 1.0f / (float)dim, sh = 1.0f / (float)hid;
#define FILL(dst, count, scale, offset)                                         \
    do {                                                                        \
        float *b_ = alloc_fill(m, (count), (scale), (offset), &s, err);         \
        if (!b_) {                                                              \
            sq_model_free(m);                                                   \
            return SQ_ESOFTWARE;                                                \
        }                                                                       \
        (dst) = b_;                                                             \
    } while (0)
    FILL(m->w.embed, vocab * dim, 1.0f, 0.0f);
    for (int l = 0; l < cfg->n_layers; l++) {
        sq_layer_weights *L = &m->w.layers[l];
        FILL(L->attn_norm, dim, 0.0f, 1.0f);
        FILL(L->wq, q * dim, sd, 0.0f);
        FILL(L->wk, kv * dim, sd, 0.0f);
        FILL(L->wv, kv * dim, sd, 0.0f);
        FILL(L->wo, dim * q, sd, 0.0f);
        FILL(L->ffn_norm, dim, 0.0f, 1.0f);
        FILL(L->w_gate, hid * dim, sd, 0.0f);
        FILL(L->w_up, hid * dim, sd, 0.0f);
        FILL(L->w_down, dim * hid, sh, 0.0f);
    }
    FILL(m->w.norm, dim, 0.0f, 1.0f);
    if (cfg->tied_embeddings)
        m->w.lm_head = m->w.embed;
    else
        FILL(m->w.lm_head, vocab * dim, sd, 0.0f);
#undef FILL
    *out = m;
    return SQ_OK;
}

int sq_model_new_random_device(const sq_model_config *cfg, uint64_t seed, sq_model **out,
                               sq_error *err)
{
    *out = NULL;
    sq_model *m = calloc(1, sizeof *m);
    if (!m)
        return sq_error_oom(err, "model");
    m->config = *cfg;
    snprintf(m->config.dtype, sizeof m->config.dtype, "F32");
    m->dir = strdup("(random weights, made on the device)");
    m->w.layers = calloc((size_t)(cfg->n_layers > 0 ? cfg->n_layers : 1), sizeof *m->w.layers);
    if (!m->dir || !m->w.layers) {
        sq_model_free(m);
        return sq_error_oom(err, "model");
    }
    m->device_random = 1;
    m->random_seed = seed;
    *out = m;
    return SQ_OK;
}
