/* Loading a checkpoint: config.json + safetensors -> float32 weight views, tensor by tensor as
 * the architecture's table lists them (runtime/arch.h). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "runtime/arch.h"
#include "runtime/backend.h"
#include "runtime/config.h"
#include "libsequoia/base/busguard.h"
#include "runtime/safetensors.h"

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

/* Finds tensor `it`, checks its dtype and shape against the config, and returns a float32 view
 * of it; an optional tensor the checkpoint lacks leaves *out NULL. */
static int get_weight(sq_model *m, const sq_arch_item *it, const float **out,
                      const char **dtype_out, const char *volatile *reading, sq_error *err)
{
    int rc0;
    const char *name = it->name;
    const sq_st_file *f = NULL;
    const sq_st_tensor *t = sq_st_set_find(m->st, name, &f);
    if (!t && it->t->optional) {
        *out = NULL;
        return SQ_OK;
    }
    if (!t)
        return sq_error_set(err, SQ_EDATA, "%s: tensor %s: missing from the checkpoint", m->dir,
                            name);
    if (t->dtype != SQ_ST_F32 && t->dtype != SQ_ST_F16 && t->dtype != SQ_ST_BF16)
        return sq_error_set(err, SQ_EDATA, "%s: %s: dtype %s is not supported (F32, F16 or "
                            "BF16)", f->path, name, sq_st_dtype_name(t->dtype));
    const int64_t d0 = it->shape[0], d1 = it->shape[1];
    if (t->ndim != it->ndim || t->shape[0] != d0 || (d1 && t->shape[1] != d1)) {
        char got[160], exp[64];
        shape_str(got, sizeof got, t->ndim, t->shape);
        shape_str(exp, sizeof exp, it->ndim, it->shape);
        return sq_error_set(err, SQ_EDATA, "%s: %s: shape %s, but config.json implies %s",
                            f->path, name, got, exp);
    }
    if (dtype_out)
        *dtype_out = sq_st_dtype_name(t->dtype);
    /* Every tensor is copied out of the mapping, F32 ones too (issue 27 C2): a checkpoint
     * truncated or rewritten while the model runs would otherwise raise SIGBUS in the middle of
     * a forward, or change the weights under it. The copy runs under the bus guard
     * (load_weights). */
    size_t bytes = (size_t)t->numel * sizeof(float);
    float *buf = malloc(bytes ? bytes : 1);
    if (!buf)
        return sq_error_oom(err, name);
    if ((rc0 = keep_buffer(m, buf, bytes, err)))
        return rc0;   /* keep_buffer freed buf */
    *reading = f->path;
    if (t->dtype == SQ_ST_F32)
        memcpy(buf, t->data, bytes);
    else
        sq_st_to_f32(t->dtype, t->data, buf, (size_t)t->numel);
    *reading = NULL;
    *out = buf;
    return SQ_OK;
}

/* Every tensor of the architecture's table (runtime/arch.h), in checkpoint order; the dtype of
 * the first one found is the model's. A tied tensor takes the view of the one it is tied to
 * (like transformers, a stored copy is ignored). */
static int load_weights(sq_model *m, sq_error *err)
{
    const sq_model_config *c = &m->config;
    m->w.layers = calloc((size_t)(c->n_layers > 0 ? c->n_layers : 1), sizeof *m->w.layers);
    if (!m->w.layers)
        return sq_error_oom(err, "the layer table");
    const int count = sq_arch_count(c);
    volatile int rc = SQ_OK;
    /* the file being copied, for the message when its mapping faults (busguard.h) */
    const char *volatile reading = NULL;
    int guarded = sq_bus_install() == 0;
    sigjmp_buf jb;
    if (guarded && sigsetjmp(jb, 0)) {
        sq_bus_leave();
        sq_bus_uninstall();
        return sq_error_set(err, SQ_EIO, "%s: the file was cut short while being read (its "
                            "mapping faulted); was the checkpoint replaced or truncated?",
                            reading ? reading : m->dir);
    }
    if (guarded)
        sq_bus_enter(&jb);
    for (int k = 0; k < count && !rc; k++) {
        sq_arch_item it;
        sq_arch_tensor_at(c, k, &it);
        if (it.tied)
            continue;
        const char *dtype = NULL;
        rc = get_weight(m, &it, sq_arch_slot(&m->w, &it), m->config.dtype[0] ? NULL : &dtype,
                        &reading, err);
        if (!rc && dtype)
            snprintf(m->config.dtype, sizeof m->config.dtype, "%s", dtype);
    }
    if (guarded) {
        sq_bus_leave();
        sq_bus_uninstall();
    }
    for (int k = 0; k < count && !rc; k++) {
        sq_arch_item it;
        sq_arch_tensor_at(c, k, &it);
        if (it.tied)
            *sq_arch_slot(&m->w, &it) = m->w.t[it.t->tied_to];
    }
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
