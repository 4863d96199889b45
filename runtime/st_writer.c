#include "runtime/st_writer.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cjson/cJSON.h>

#include "libsequoia/base/io.h"
#include "libsequoia/base/json.h"
#include "runtime/arch.h"
#include "runtime/config.h"

typedef struct wtensor {
    char       *name;
    sq_st_dtype dtype;
    uint64_t    nbytes;
} wtensor;

struct sq_st_writer {
    cJSON   *header;
    wtensor *tensors;
    int      n;
    uint64_t total;      /* bytes of data declared                   */
    sq_out  *out;        /* open between begin and finish            */
    char    *path;
    int      cur;        /* tensor being written                     */
    uint64_t cur_done;   /* bytes of it written                      */
    uint64_t done;       /* bytes written in all                     */
};

sq_st_writer *sq_st_writer_new(void)
{
    sq_st_writer *w = calloc(1, sizeof *w);
    if (!w)
        return NULL;
    w->header = cJSON_CreateObject();
    if (!w->header) {
        free(w);
        return NULL;
    }
    return w;
}

void sq_st_writer_free(sq_st_writer *w)
{
    if (!w)
        return;
    sq_out_abort(w->out);
    for (int i = 0; i < w->n; i++)
        free(w->tensors[i].name);
    free(w->tensors);
    cJSON_Delete(w->header);
    free(w->path);
    free(w);
}

int sq_st_writer_metadata(sq_st_writer *w, const char *key, const char *value, sq_error *err)
{
    if (w->out)
        return sq_error_set(err, SQ_EUSAGE, "safetensors writer: metadata after begin");
    cJSON *meta = cJSON_GetObjectItemCaseSensitive(w->header, "__metadata__");
    if (!meta) {
        meta = cJSON_CreateObject();
        if (!meta || !cJSON_AddItemToObject(w->header, "__metadata__", meta)) {
            cJSON_Delete(meta);
            return sq_error_oom(err, "safetensors metadata");
        }
    }
    cJSON_DeleteItemFromObjectCaseSensitive(meta, key);
    if (!cJSON_AddStringToObject(meta, key, value))
        return sq_error_oom(err, "safetensors metadata");
    return SQ_OK;
}

int sq_st_writer_add(sq_st_writer *w, const char *name, sq_st_dtype dtype, int ndim,
                     const int64_t *shape, sq_error *err)
{
    if (w->out)
        return sq_error_set(err, SQ_EUSAGE, "safetensors writer: %s: declared after begin", name);
    if ((unsigned)dtype >= SQ_ST_N_DTYPES || ndim < 0 || ndim > SQ_ST_MAX_DIMS ||
        strcmp(name, "__metadata__") == 0 || cJSON_GetObjectItemCaseSensitive(w->header, name))
        return sq_error_set(err, SQ_EUSAGE, "safetensors writer: %s: bad dtype, rank or "
                            "duplicate name", name);
    uint64_t numel = 1;
    for (int i = 0; i < ndim; i++)
        if (shape[i] < 0 || __builtin_mul_overflow(numel, (uint64_t)shape[i], &numel))
            return sq_error_set(err, SQ_EUSAGE, "safetensors writer: %s: bad shape", name);
    uint64_t nbytes;
    if (__builtin_mul_overflow(numel, (uint64_t)sq_st_dtype_size(dtype), &nbytes) ||
        w->total + nbytes < w->total || w->total + nbytes > (1ull << 53))
        return sq_error_set(err, SQ_EUSAGE, "safetensors writer: %s: too large", name);
    wtensor *nt = realloc(w->tensors, (size_t)(w->n + 1) * sizeof *nt);
    if (!nt)
        return sq_error_oom(err, "the tensor list");
    w->tensors = nt;
    cJSON *e = cJSON_CreateObject();
    cJSON *sh = cJSON_CreateArray();
    cJSON *off = cJSON_CreateArray();
    char *copy = strdup(name);
    int ok = e && sh && off && copy;
    for (int i = 0; ok && i < ndim; i++)
        ok = cJSON_AddItemToArray(sh, cJSON_CreateNumber((double)shape[i]));
    ok = ok && cJSON_AddItemToArray(off, cJSON_CreateNumber((double)w->total)) &&
         cJSON_AddItemToArray(off, cJSON_CreateNumber((double)(w->total + nbytes)));
    ok = ok && cJSON_AddStringToObject(e, "dtype", sq_st_dtype_name(dtype));
    if (ok && cJSON_AddItemToObject(e, "shape", sh)) {
        sh = NULL;
        if (cJSON_AddItemToObject(e, "data_offsets", off)) {
            off = NULL;
            ok = cJSON_AddItemToObject(w->header, name, e);
            if (ok)
                e = NULL;
        } else {
            ok = 0;
        }
    } else {
        ok = 0;
    }
    cJSON_Delete(e);
    cJSON_Delete(sh);
    cJSON_Delete(off);
    if (!ok) {
        free(copy);
        return sq_error_oom(err, "the safetensors header");
    }
    w->tensors[w->n++] = (wtensor){copy, dtype, nbytes};
    w->total += nbytes;
    return SQ_OK;
}

int sq_st_writer_begin(sq_st_writer *w, const char *path, sq_error *err)
{
    if (w->out)
        return sq_error_set(err, SQ_EUSAGE, "safetensors writer: begin called twice");
    char *text = cJSON_PrintUnformatted(w->header);
    if (!text)
        return sq_error_oom(err, "the safetensors header");
    size_t len = strlen(text);
    size_t padded = (len + 7) / 8 * 8;
    int rc = sq_out_open(&w->out, path, err);
    if (rc) {
        free(text);
        return rc;
    }
    w->path = strdup(path);
    unsigned char lenbuf[8];
    for (int i = 0; i < 8; i++)
        lenbuf[i] = (unsigned char)((uint64_t)padded >> (8 * i));
    FILE *fp = sq_out_stream(w->out);
    int ok = fwrite(lenbuf, 1, 8, fp) == 8 && fwrite(text, 1, len, fp) == len;
    for (size_t i = len; ok && i < padded; i++)
        ok = fputc(' ', fp) != EOF;
    free(text);
    if (!ok || !w->path)
        return sq_error_set(err, SQ_EIO, "%s: write error: %s", path, strerror(errno));
    w->cur = 0;
    w->cur_done = 0;
    w->done = 0;
    return SQ_OK;
}

/* Moves past finished (and empty) tensors. */
static void skip_full(sq_st_writer *w)
{
    while (w->cur < w->n && w->cur_done == w->tensors[w->cur].nbytes) {
        w->cur++;
        w->cur_done = 0;
    }
}

int sq_st_writer_put(sq_st_writer *w, const float *values, size_t count, sq_error *err)
{
    if (!w->out)
        return sq_error_set(err, SQ_EUSAGE, "safetensors writer: put before begin");
    FILE *fp = sq_out_stream(w->out);
    unsigned char buf[4096];
    size_t i = 0;
    while (i < count) {
        skip_full(w);
        if (w->cur >= w->n)
            return sq_error_set(err, SQ_EUSAGE, "safetensors writer: %s: more values than "
                                "declared", w->path);
        const wtensor *t = &w->tensors[w->cur];
        size_t es = sq_st_dtype_size(t->dtype);
        if (t->dtype != SQ_ST_F32 && t->dtype != SQ_ST_F16 && t->dtype != SQ_ST_BF16)
            return sq_error_set(err, SQ_EUSAGE, "safetensors writer: %s: float values for a %s "
                                "tensor", t->name, sq_st_dtype_name(t->dtype));
        size_t room = (size_t)((t->nbytes - w->cur_done) / es);
        size_t m = count - i;
        if (m > room)
            m = room;
        if (m > sizeof buf / es)
            m = sizeof buf / es;
        for (size_t k = 0; k < m; k++) {
            float v = values[i + k];
            uint16_t h;
            if (t->dtype == SQ_ST_F32) {
                memcpy(buf + 4 * k, &v, 4);
            } else {
                h = t->dtype == SQ_ST_F16 ? sq_f32_to_f16(v) : sq_f32_to_bf16(v);
                memcpy(buf + 2 * k, &h, 2);
            }
        }
        if (fwrite(buf, es, m, fp) != m)
            return sq_error_set(err, SQ_EIO, "%s: write error: %s", w->path, strerror(errno));
        w->cur_done += m * es;
        w->done += m * es;
        i += m;
    }
    return SQ_OK;
}

int sq_st_writer_put_raw(sq_st_writer *w, const void *bytes, size_t nbytes, sq_error *err)
{
    if (!w->out)
        return sq_error_set(err, SQ_EUSAGE, "safetensors writer: put before begin");
    if (nbytes > w->total - w->done)
        return sq_error_set(err, SQ_EUSAGE, "safetensors writer: %s: more bytes than declared",
                            w->path);
    if (fwrite(bytes, 1, nbytes, sq_out_stream(w->out)) != nbytes)
        return sq_error_set(err, SQ_EIO, "%s: write error: %s", w->path, strerror(errno));
    w->done += nbytes;
    /* keep the tensor cursor in step */
    uint64_t left = nbytes;
    while (left) {
        skip_full(w);
        uint64_t room = w->tensors[w->cur].nbytes - w->cur_done;
        uint64_t m = left < room ? left : room;
        w->cur_done += m;
        left -= m;
    }
    return SQ_OK;
}

int sq_st_writer_finish(sq_st_writer *w, sq_error *err)
{
    if (!w->out)
        return sq_error_set(err, SQ_EUSAGE, "safetensors writer: finish before begin");
    if (w->done != w->total) {
        sq_out_abort(w->out);
        w->out = NULL;
        return sq_error_set(err, SQ_EUSAGE, "safetensors writer: %s: %llu of %llu data bytes "
                            "written", w->path, (unsigned long long)w->done,
                            (unsigned long long)w->total);
    }
    int rc = sq_out_commit(w->out, err);
    w->out = NULL;
    return rc;
}

/* ---- random Llama checkpoints ---------------------------------------------------------------- */

sq_random_model_params sq_random_model_default_params(void)
{
    sq_random_model_params p;
    memset(&p, 0, sizeof p);
    p.config.dim = 64;
    p.config.hidden_dim = 96;
    p.config.n_layers = 2;
    p.config.n_heads = 4;
    p.config.n_kv_heads = 2;
    p.config.head_dim = 16;
    p.config.vocab_size = 97;
    p.config.max_position = 512;
    p.config.rope_theta = 10000.0f;
    p.config.norm_eps = 1e-5f;
    p.config.tied_embeddings = 0;
    snprintf(p.config.dtype, sizeof p.config.dtype, "F32");
    p.seed = 1;
    p.shards = 1;
    p.write_tied_lm_head = 0;
    p.logit_scale = 0;
    return p;
}

static uint64_t splitmix64(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint64_t name_hash(const char *s)
{
    uint64_t h = 1469598103934665603ull;   /* FNV-1a */
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

typedef struct rtensor {
    char    name[160];
    int64_t shape[2];
    int     ndim;
    float   center, spread;   /* values uniform in center +- spread */
    const char *seed_name;    /* name whose stream gives the values  */
} rtensor;

/* Every tensor of the architecture's table (runtime/arch.h) in checkpoint order, with its
 * values: norms 1 +- 0.1, matrices +- 1/sqrt(in_features), the embedding +- 1, the LM head
 * +- logit_scale/sqrt(dim). A tied tensor is written only with write_tied_lm_head, as a copy of
 * the one it is tied to (the same stream). */
static int build_list(const sq_random_model_params *p, rtensor **out, int *n_out)
{
    const sq_model_config *c = &p->config;
    const int count = sq_arch_count(c);
    rtensor *t = calloc((size_t)count, sizeof *t);
    if (!t)
        return -1;
    int n = 0;
    float logit = (p->logit_scale > 0 ? p->logit_scale : 3.0f) / sqrtf((float)c->dim);
    for (int k = 0; k < count; k++) {
        sq_arch_item it;
        sq_arch_tensor_at(c, k, &it);
        if (it.tied && !p->write_tied_lm_head)
            continue;
        rtensor *r = &t[n++];
        snprintf(r->name, sizeof r->name, "%s", it.name);
        r->shape[0] = it.shape[0];
        r->shape[1] = it.shape[1];
        r->ndim = it.ndim;
        r->seed_name = r->name;
        switch (it.t->init) {
        case SQ_INIT_NORM:
            r->center = 1.0f;
            r->spread = 0.1f;
            break;
        case SQ_INIT_EMBED:
            r->spread = 1.0f;
            break;
        case SQ_INIT_NORM0:   /* Gemma's (1 + w) */
            r->spread = 0.1f;
            break;
        case SQ_INIT_BIAS:
            r->spread = 0.1f;
            break;
        case SQ_INIT_HEAD:
            r->spread = logit;
            break;
        case SQ_INIT_LINEAR:
        default:
            r->spread = 1.0f / sqrtf((float)it.shape[1]);
            break;
        }
        if (it.tied) {   /* the same values as the tensor it is tied to */
            for (int j = 0; j < count; j++) {
                sq_arch_item o;
                sq_arch_tensor_at(c, j, &o);
                if (o.layer >= 0 || o.t->slot != it.t->tied_to)
                    continue;
                for (int i = 0; i < n - 1; i++)
                    if (strcmp(t[i].name, o.name) == 0) {
                        r->seed_name = t[i].name;
                        r->center = t[i].center;
                        r->spread = t[i].spread;
                    }
            }
        }
    }
    *out = t;
    *n_out = n;
    return 0;
}

static int write_shard(const char *path, const sq_random_model_params *p, sq_st_dtype dt,
                       const rtensor *t, int n, int first, int step, sq_error *err)
{
    sq_st_writer *w = sq_st_writer_new();
    if (!w)
        return sq_error_oom(err, "a safetensors writer");
    int rc = sq_st_writer_metadata(w, "format", "pt", err);
    for (int i = first; i < n && !rc; i += step)
        rc = sq_st_writer_add(w, t[i].name, dt, t[i].ndim, t[i].shape, err);
    if (!rc)
        rc = sq_st_writer_begin(w, path, err);
    float buf[4096];
    for (int i = first; i < n && !rc; i += step) {
        uint64_t state = p->seed ^ name_hash(t[i].seed_name);
        uint64_t count = (uint64_t)t[i].shape[0] * (uint64_t)(t[i].ndim == 2 ? t[i].shape[1] : 1);
        while (count && !rc) {
            size_t m = count < 4096 ? (size_t)count : 4096;
            for (size_t k = 0; k < m; k++) {
                double u = (double)(splitmix64(&state) >> 11) * (1.0 / 9007199254740992.0);
                buf[k] = t[i].center + t[i].spread * (float)(2.0 * u - 1.0);
            }
            rc = sq_st_writer_put(w, buf, m, err);
            count -= m;
        }
    }
    if (!rc)
        rc = sq_st_writer_finish(w, err);
    sq_st_writer_free(w);
    return rc;
}

static char *join(const char *dir, const char *name)
{
    size_t n = strlen(dir) + strlen(name) + 2;
    char *s = malloc(n);
    if (s)
        snprintf(s, n, "%s/%s", dir, name);
    return s;
}

static int write_json(const char *path, const cJSON *j, sq_error *err)
{
    size_t len;
    char *text = sq_json_to_string(j, &len);
    if (!text)
        return sq_error_oom(err, path);
    int rc = sq_file_write_atomic(path, text, len, err);
    free(text);
    return rc;
}

int sq_model_write_random(const char *dir, const sq_random_model_params *p, sq_error *err)
{
    const sq_model_config *c = &p->config;
    sq_st_dtype dt;
    if (sq_st_dtype_parse(c->dtype, &dt) != 0 ||
        (dt != SQ_ST_F32 && dt != SQ_ST_F16 && dt != SQ_ST_BF16))
        return sq_error_set(err, SQ_EUSAGE, "random model: dtype \"%s\" is not F32, F16 or BF16",
                            c->dtype);
    /* Validate the architecture the way the loader will. */
    cJSON *cj = sq_model_config_to_json(c);
    if (!cj)
        return sq_error_oom(err, "config.json");
    sq_model_config check;
    sq_error e2 = {0};
    if (sq_model_config_parse("config.json", cj, &check, &e2) != SQ_OK) {
        cJSON_Delete(cj);
        return sq_error_set(err, SQ_EUSAGE, "random model: %s", e2.msg);
    }
    if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
        cJSON_Delete(cj);
        return sq_error_set(err, SQ_ECANTCREAT, "%s: cannot create: %s", dir, strerror(errno));
    }
    char *cfg_path = join(dir, "config.json");
    int rc = cfg_path ? write_json(cfg_path, cj, err) : sq_error_oom(err, "a path");
    free(cfg_path);
    cJSON_Delete(cj);
    if (rc)
        return rc;

    rtensor *t = NULL;
    int n = 0;
    if (build_list(p, &t, &n) != 0)
        return sq_error_oom(err, "the tensor list");
    int shards = p->shards > 1 ? p->shards : 1;
    if (shards > n)
        shards = n;
    if (shards == 1) {
        char *path = join(dir, "model.safetensors");
        rc = path ? write_shard(path, p, dt, t, n, 0, 1, err) : sq_error_oom(err, "a path");
        free(path);
        free(t);
        return rc;
    }
    cJSON *index = cJSON_CreateObject();
    cJSON *wm = cJSON_CreateObject();
    cJSON *meta = cJSON_CreateObject();
    if (!index || !wm || !meta) {
        cJSON_Delete(index);
        cJSON_Delete(wm);
        cJSON_Delete(meta);
        free(t);
        return sq_error_oom(err, "the index");
    }
    double total = 0;
    for (int i = 0; i < n; i++)
        total += (double)t[i].shape[0] * (double)(t[i].ndim == 2 ? t[i].shape[1] : 1) *
                 (double)sq_st_dtype_size(dt);
    sq_json_add(meta, "total_size", cJSON_CreateNumber(total));
    sq_json_add(index, "metadata", meta);
    sq_json_add(index, "weight_map", wm);
    for (int s = 0; s < shards && !rc; s++) {
        char fname[64];
        snprintf(fname, sizeof fname, "model-%05d-of-%05d.safetensors", s + 1, shards);
        for (int i = s; i < n; i += shards)
            sq_json_add(wm, t[i].name, cJSON_CreateString(fname));
        char *path = join(dir, fname);
        rc = path ? write_shard(path, p, dt, t, n, s, shards, err) : sq_error_oom(err, "a path");
        free(path);
    }
    if (!rc) {
        char *path = join(dir, "model.safetensors.index.json");
        rc = path ? write_json(path, index, err) : sq_error_oom(err, "a path");
        free(path);
    }
    cJSON_Delete(index);
    free(t);
    return rc;
}
