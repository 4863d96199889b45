/* Models with random weights of a given shape, held in memory: forward latency depends on the
 * shapes, not the values, so sequoia-profile can time a Llama-2-7B or 70B shape from its
 * config.json alone. Every tensor of the architecture's table (runtime/arch.h) is filled, the
 * matrices in the dtype asked for (float32 or 16-bit: sq_model_new_random_dtype). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "libsequoia/base/half.h"
#include "runtime/arch.h"
#include "runtime/backend.h"
#include "runtime/memory.h"

/* splitmix64: a tiny deterministic generator, plenty for filler weights */
static uint64_t next_u64(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* count values offset + scale * uniform(-1, 1) as dtype dt (vectors: always F32), rounded from
 * the float32 values when 16-bit, so that every dtype draws the same stream. */
static void *alloc_fill(sq_model *m, size_t count, sq_weight_dtype dt, float scale, float offset,
                        uint64_t *state, sq_error *err)
{
    const size_t es = dt == SQ_DTYPE_F32 ? sizeof(float) : sizeof(uint16_t);
    void *buf = malloc((count ? count : 1) * es);
    if (!buf) {
        sq_error_oom(err, "random weights");
        return NULL;
    }
    for (size_t i = 0; i < count; i++) {
        double u = (double)(next_u64(state) >> 11) / 9007199254740992.0; /* [0, 1) */
        float v = offset + scale * (float)(2.0 * u - 1.0);
        if (dt == SQ_DTYPE_F32)
            ((float *)buf)[i] = v;
        else
            ((uint16_t *)buf)[i] = dt == SQ_DTYPE_BF16 ? sq_f32_to_bf16(v) : sq_f32_to_f16(v);
    }
    return sq_model_keep(m, buf, count * es, err) ? NULL : buf;
}

/* The filler of one tensor: offset + scale * uniform(-1, 1). Norms 1, matrices +-1/in_features,
 * the embedding +-1, the LM head +-1/dim. */
static void init_of(const sq_arch_item *it, const sq_model_config *c, float *scale, float *offset)
{
    *offset = 0.0f;
    switch (it->t->init) {
    case SQ_INIT_NORM:
        *scale = 0.0f;
        *offset = 1.0f;
        break;
    case SQ_INIT_EMBED:
        *scale = 1.0f;
        break;
    case SQ_INIT_NORM0:   /* Gemma's (1 + w): w = 0 */
        *scale = 0.0f;
        break;
    case SQ_INIT_BIAS:
        *scale = 0.05f;
        break;
    case SQ_INIT_HEAD:
        *scale = 1.0f / (float)c->dim;
        break;
    case SQ_INIT_LINEAR:
    default:
        *scale = 1.0f / (float)it->shape[1];
        break;
    }
}

int sq_model_new_random(const sq_model_config *cfg, uint64_t seed, sq_model **out, sq_error *err)
{
    return sq_model_new_random_dtype(cfg, seed, SQ_DTYPE_F32, out, err);
}

int sq_model_new_random_dtype(const sq_model_config *cfg, uint64_t seed, sq_weight_dtype dtype,
                              sq_model **out, sq_error *err)
{
    *out = NULL;
    if (dtype == SQ_DTYPE_AUTO)
        dtype = SQ_DTYPE_F32;
    if ((unsigned)dtype > SQ_DTYPE_BF16)
        return sq_error_set(err, SQ_EUSAGE, "random weights: dtype %d is not f32, f16 or bf16",
                            (int)dtype);
    const char *dname = dtype == SQ_DTYPE_F32 ? "F32" : dtype == SQ_DTYPE_F16 ? "F16" : "BF16";
    sq_model_config c = *cfg;
    snprintf(c.dtype, sizeof c.dtype, "%s", dname);
    int rc = sq_memory_check(sq_weights_bytes(&c), err, "profile a smaller shape (fewer layers), "
                             "in 16 bits (--dtype bf16) or on a larger machine", "random weights "
                             "of this shape need %.1f GiB as %s", sq_weights_bytes(&c) / 1073741824.0,
                             sq_weight_dtype_name(dtype));
    if (rc)
        return rc;
    sq_model *m = calloc(1, sizeof *m);
    if (!m)
        return sq_error_oom(err, "model");
    m->config = c;
    m->dtype = dtype;
    m->dir = strdup("(random weights)");
    m->w.layers = calloc((size_t)cfg->n_layers, sizeof *m->w.layers);
    if (!m->dir || !m->w.layers) {
        sq_model_free(m);
        return sq_error_oom(err, "model");
    }
    /* one stream through every tensor of the table, in checkpoint order; tied ones alias */
    uint64_t s = seed;
    const int count = sq_arch_count(cfg);
    for (int k = 0; k < count; k++) {
        sq_arch_item it;
        sq_arch_tensor_at(cfg, k, &it);
        if (it.tied) {
            *sq_arch_slot(&m->w, &it) = m->w.t[it.t->tied_to];
            continue;
        }
        float scale, offset;
        init_of(&it, cfg, &scale, &offset);
        const sq_weight_dtype dt = it.ndim == 2 ? dtype : SQ_DTYPE_F32;
        void *b = alloc_fill(m, (size_t)it.numel, dt, scale, offset, &s, err);
        if (!b) {
            sq_model_free(m);
            return SQ_ESOFTWARE;
        }
        *sq_arch_slot(&m->w, &it) = (sq_wt){b, dt};
    }
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
    m->dtype = SQ_DTYPE_F32;
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
