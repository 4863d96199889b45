#include "runtime/safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "libsequoia/base/io.h"
#include "libsequoia/base/json.h"

static const struct {
    const char *name;
    size_t      size;
} dtype_table[SQ_ST_N_DTYPES] = {
    [SQ_ST_BOOL] = {"BOOL", 1},       [SQ_ST_U8] = {"U8", 1},     [SQ_ST_I8] = {"I8", 1},
    [SQ_ST_I16] = {"I16", 2},         [SQ_ST_U16] = {"U16", 2},   [SQ_ST_F16] = {"F16", 2},
    [SQ_ST_BF16] = {"BF16", 2},       [SQ_ST_I32] = {"I32", 4},   [SQ_ST_U32] = {"U32", 4},
    [SQ_ST_F32] = {"F32", 4},         [SQ_ST_F64] = {"F64", 8},   [SQ_ST_I64] = {"I64", 8},
    [SQ_ST_U64] = {"U64", 8},         [SQ_ST_F8_E4M3] = {"F8_E4M3", 1},
    [SQ_ST_F8_E5M2] = {"F8_E5M2", 1},
};

const char *sq_st_dtype_name(sq_st_dtype dt)
{
    return (unsigned)dt < SQ_ST_N_DTYPES ? dtype_table[dt].name : "?";
}

size_t sq_st_dtype_size(sq_st_dtype dt)
{
    return (unsigned)dt < SQ_ST_N_DTYPES ? dtype_table[dt].size : 0;
}

int sq_st_dtype_parse(const char *name, sq_st_dtype *dt)
{
    for (int i = 0; i < SQ_ST_N_DTYPES; i++) {
        if (strcmp(name, dtype_table[i].name) == 0) {
            *dt = (sq_st_dtype)i;
            return 0;
        }
    }
    return -1;
}

/* ---- to float32 (16-bit codecs: libsequoia/base/half.h) --------------------------------- */

int sq_st_to_f32(sq_st_dtype dt, const void *src, float *dst, size_t count)
{
    const unsigned char *s = src;
    uint16_t h;
    switch (dt) {
    case SQ_ST_F32:
        memcpy(dst, src, count * sizeof(float));
        return 0;
    case SQ_ST_F16:
        for (size_t i = 0; i < count; i++) {
            memcpy(&h, s + 2 * i, 2);
            dst[i] = sq_f16_to_f32(h);
        }
        return 0;
    case SQ_ST_BF16:
        for (size_t i = 0; i < count; i++) {
            memcpy(&h, s + 2 * i, 2);
            dst[i] = sq_bf16_to_f32(h);
        }
        return 0;
    default:
        return -1;
    }
}

/* ---- one file ---------------------------------------------------------------------------- */

static int host_is_little_endian(void)
{
    const uint16_t one = 1;
    unsigned char b;
    memcpy(&b, &one, 1);
    return b == 1;
}

/* A JSON number that is an integer in [0, 2^53]. */
static int json_u64(const cJSON *item, uint64_t *out)
{
    if (!cJSON_IsNumber(item))
        return -1;
    double v = item->valuedouble;
    if (!isfinite(v) || v < 0 || v > 9007199254740992.0 || v != floor(v))
        return -1;
    *out = (uint64_t)v;
    return 0;
}

static int by_name(const void *a, const void *b)
{
    return strcmp(((const sq_st_tensor *)a)->name, ((const sq_st_tensor *)b)->name);
}

static int by_begin(const void *a, const void *b)
{
    const sq_st_tensor *x = *(const sq_st_tensor *const *)a, *y = *(const sq_st_tensor *const *)b;
    if (x->begin != y->begin)
        return x->begin < y->begin ? -1 : 1;
    return strcmp(x->name, y->name);
}

static int parse_entry(const char *path, const cJSON *e, uint64_t data_size, sq_st_tensor *t,
                       sq_error *err)
{
    const char *nm = t->name;
    if (!cJSON_IsObject(e))
        return sq_error_set(err, SQ_EDATA, "%s: %s: expected an object with dtype, shape and "
                            "data_offsets", path, nm);
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(e, "dtype");
    const cJSON *shape = cJSON_GetObjectItemCaseSensitive(e, "shape");
    const cJSON *offs = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
    if (!dt)
        return sq_error_set(err, SQ_EDATA, "%s: %s: dtype: missing", path, nm);
    if (!cJSON_IsString(dt))
        return sq_error_set(err, SQ_EDATA, "%s: %s: dtype: expected a string", path, nm);
    if (sq_st_dtype_parse(dt->valuestring, &t->dtype) != 0)
        return sq_error_set(err, SQ_EDATA, "%s: %s: dtype: unknown dtype \"%.32s\"", path, nm,
                            dt->valuestring);
    if (!shape)
        return sq_error_set(err, SQ_EDATA, "%s: %s: shape: missing", path, nm);
    if (!cJSON_IsArray(shape))
        return sq_error_set(err, SQ_EDATA, "%s: %s: shape: expected an array of integers", path,
                            nm);
    int ndim = cJSON_GetArraySize(shape);
    if (ndim > SQ_ST_MAX_DIMS)
        return sq_error_set(err, SQ_EDATA, "%s: %s: shape: %d dimensions, more than %d", path,
                            nm, ndim, SQ_ST_MAX_DIMS);
    t->ndim = ndim;
    uint64_t numel = 1;
    int i = 0;
    for (const cJSON *d = shape->child; d; d = d->next, i++) {
        uint64_t v;
        if (json_u64(d, &v) != 0)
            return sq_error_set(err, SQ_EDATA, "%s: %s: shape[%d]: not an integer >= 0", path,
                                nm, i);
        t->shape[i] = (int64_t)v;
        if (__builtin_mul_overflow(numel, v, &numel))
            return sq_error_set(err, SQ_EDATA, "%s: %s: shape: element count overflows 64 bits",
                                path, nm);
    }
    t->numel = numel;
    uint64_t nbytes;
    if (__builtin_mul_overflow(numel, (uint64_t)sq_st_dtype_size(t->dtype), &nbytes))
        return sq_error_set(err, SQ_EDATA, "%s: %s: shape: byte size overflows 64 bits", path,
                            nm);
    if (!offs)
        return sq_error_set(err, SQ_EDATA, "%s: %s: data_offsets: missing", path, nm);
    uint64_t begin, end;
    if (!cJSON_IsArray(offs) || cJSON_GetArraySize(offs) != 2 ||
        json_u64(cJSON_GetArrayItem(offs, 0), &begin) != 0 ||
        json_u64(cJSON_GetArrayItem(offs, 1), &end) != 0)
        return sq_error_set(err, SQ_EDATA, "%s: %s: data_offsets: expected [begin, end], two "
                            "integers >= 0", path, nm);
    if (begin > end)
        return sq_error_set(err, SQ_EDATA, "%s: %s: data_offsets: begin %llu is after end %llu",
                            path, nm, (unsigned long long)begin, (unsigned long long)end);
    if (end > data_size)
        return sq_error_set(err, SQ_EDATA, "%s: %s: data_offsets: end %llu is past the end of "
                            "the data (%llu bytes); truncated file?", path, nm,
                            (unsigned long long)end, (unsigned long long)data_size);
    if (end - begin != nbytes)
        return sq_error_set(err, SQ_EDATA, "%s: %s: data_offsets span %llu bytes but shape x "
                            "%s needs %llu", path, nm, (unsigned long long)(end - begin),
                            sq_st_dtype_name(t->dtype), (unsigned long long)nbytes);
    t->begin = begin;
    t->nbytes = nbytes;
    return SQ_OK;
}

static int parse_header(sq_st_file *f, const unsigned char *hdr, uint64_t hlen,
                        uint64_t data_size, const unsigned char *data, sq_error *err)
{
    char *text = malloc(hlen + 1);
    if (!text)
        return sq_error_oom(err, "the safetensors header");
    memcpy(text, hdr, hlen);
    text[hlen] = '\0';
    cJSON *root = NULL;
    int rc = sq_json_parse(f->path, text, hlen, &root, err);
    free(text);
    if (rc)
        return rc;
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return sq_error_set(err, SQ_EDATA, "%s: header: expected a JSON object", f->path);
    }
    int n = 0;
    for (const cJSON *c = root->child; c; c = c->next)
        if (strcmp(c->string, "__metadata__") != 0)
            n++;
    f->tensors = calloc(n ? (size_t)n : 1, sizeof *f->tensors);
    if (!f->tensors) {
        cJSON_Delete(root);
        return sq_error_oom(err, "the tensor table");
    }
    for (const cJSON *c = root->child; c; c = c->next) {
        if (strcmp(c->string, "__metadata__") == 0) {
            if (!cJSON_IsObject(c)) {
                rc = sq_error_set(err, SQ_EDATA, "%s: __metadata__: expected an object of "
                                  "strings", f->path);
                break;
            }
            for (const cJSON *m = c->child; m; m = m->next) {
                if (!cJSON_IsString(m)) {
                    rc = sq_error_set(err, SQ_EDATA, "%s: __metadata__: %s: value is not a "
                                      "string", f->path, m->string);
                    break;
                }
            }
            if (rc)
                break;
            f->metadata = cJSON_Duplicate(c, 1);
            if (!f->metadata) {
                rc = sq_error_oom(err, "the metadata");
                break;
            }
            continue;
        }
        sq_st_tensor *t = &f->tensors[f->n_tensors];
        t->name = strdup(c->string);
        if (!t->name) {
            rc = sq_error_oom(err, "a tensor name");
            break;
        }
        f->n_tensors++;
        rc = parse_entry(f->path, c, data_size, t, err);
        if (rc)
            break;
        t->data = data + t->begin;
    }
    cJSON_Delete(root);
    if (rc)
        return rc;

    /* No two non-empty tensors may share a byte. */
    if (f->n_tensors > 1) {
        sq_st_tensor **order = malloc((size_t)f->n_tensors * sizeof *order);
        if (!order)
            return sq_error_oom(err, "the tensor table");
        for (int i = 0; i < f->n_tensors; i++)
            order[i] = &f->tensors[i];
        qsort(order, (size_t)f->n_tensors, sizeof *order, by_begin);
        const sq_st_tensor *prev = NULL;
        for (int i = 0; i < f->n_tensors && !rc; i++) {
            const sq_st_tensor *t = order[i];
            if (t->nbytes == 0)
                continue;
            if (prev && prev->begin + prev->nbytes > t->begin)
                rc = sq_error_set(err, SQ_EDATA, "%s: %s: data_offsets [%llu, %llu) overlap those "
                                  "of %s [%llu, %llu)", f->path, t->name,
                                  (unsigned long long)t->begin,
                                  (unsigned long long)(t->begin + t->nbytes), prev->name,
                                  (unsigned long long)prev->begin,
                                  (unsigned long long)(prev->begin + prev->nbytes));
            if (!prev || prev->begin + prev->nbytes < t->begin + t->nbytes)
                prev = t;
        }
        free(order);
        if (rc)
            return rc;
    }
    qsort(f->tensors, (size_t)f->n_tensors, sizeof *f->tensors, by_name);
    return SQ_OK;
}

int sq_st_open(const char *path, sq_st_file **out, sq_error *err)
{
    *out = NULL;
    if (!host_is_little_endian())
        return sq_error_set(err, SQ_EDATA, "%s: safetensors data is little-endian and this "
                            "host is not; not supported", path);
    sq_st_file *f = calloc(1, sizeof *f);
    if (!f || !(f->path = strdup(path))) {
        free(f);
        return sq_error_oom(err, "a safetensors file");
    }
    int rc = SQ_OK;
    int fd;
    struct stat st;
    if ((rc = sq_input_open(path, NULL, &st, &fd, err)))
        goto fail;
    f->file_size = (uint64_t)st.st_size;
    if (f->file_size < 8) {
        rc = sq_error_set(err, SQ_EDATA, "%s: %llu bytes, too short to hold the 8-byte header "
                          "length; truncated file?", path, (unsigned long long)f->file_size);
        close(fd);
        goto fail;
    }
    if (f->file_size > (uint64_t)SIZE_MAX) {
        rc = sq_error_set(err, SQ_EDATA, "%s: too large to map", path);
        close(fd);
        goto fail;
    }
    f->map = mmap(NULL, (size_t)f->file_size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (f->map == MAP_FAILED) {
        f->map = NULL;
        rc = sq_error_set(err, SQ_EIO, "%s: cannot map: %s", path, strerror(errno));
        goto fail;
    }
    const unsigned char *base = f->map;
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--)
        hlen = (hlen << 8) | base[i];
    if (hlen == 0) {
        rc = sq_error_set(err, SQ_EDATA, "%s: header length is 0", path);
        goto fail;
    }
    if (hlen > f->file_size - 8) {
        rc = sq_error_set(err, SQ_EDATA, "%s: header length %llu is past the end of the file "
                          "(%llu bytes); truncated or not a safetensors file",
                          path, (unsigned long long)hlen, (unsigned long long)f->file_size);
        goto fail;
    }
    if (hlen > SQ_ST_MAX_HEADER) {
        rc = sq_error_set(err, SQ_EDATA, "%s: header length %llu exceeds the limit of %u bytes",
                          path, (unsigned long long)hlen, SQ_ST_MAX_HEADER);
        goto fail;
    }
    rc = parse_header(f, base + 8, hlen, f->file_size - 8 - hlen, base + 8 + hlen, err);
    if (rc)
        goto fail;
    *out = f;
    return SQ_OK;
fail:
    sq_st_close(f);
    return rc;
}

void sq_st_close(sq_st_file *f)
{
    if (!f)
        return;
    if (f->map)
        munmap(f->map, (size_t)f->file_size);
    for (int i = 0; i < f->n_tensors; i++)
        free(f->tensors[i].name);
    free(f->tensors);
    cJSON_Delete(f->metadata);
    free(f->path);
    free(f);
}

const sq_st_tensor *sq_st_find(const sq_st_file *f, const char *name)
{
    sq_st_tensor key = {.name = (char *)name};
    return f->n_tensors ? bsearch(&key, f->tensors, (size_t)f->n_tensors, sizeof key, by_name)
                        : NULL;
}

const char *sq_st_metadata(const sq_st_file *f, const char *key)
{
    const cJSON *v = f->metadata ? cJSON_GetObjectItemCaseSensitive(f->metadata, key) : NULL;
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* ---- a checkpoint directory ---------------------------------------------------------------- */

static char *join(const char *dir, const char *name)
{
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = malloc(n);
    if (p)
        snprintf(p, n, "%s/%s", dir, name);
    return p;
}

static int file_exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

static int add_file(sq_st_set *s, const char *path, sq_error *err)
{
    sq_st_file **nf = realloc(s->files, (size_t)(s->n_files + 1) * sizeof *nf);
    if (!nf)
        return sq_error_oom(err, "the shard list");
    s->files = nf;
    int rc = sq_st_open(path, &s->files[s->n_files], err);
    if (rc == SQ_OK)
        s->n_files++;
    return rc;
}

static const char *base_name(const char *path)
{
    const char *slash = strrchr(path, '/');
    return slash ? slash + 1 : path;
}

static sq_st_file *shard_by_name(const sq_st_set *s, const char *shard)
{
    for (int i = 0; i < s->n_files; i++)
        if (strcmp(base_name(s->files[i]->path), shard) == 0)
            return s->files[i];
    return NULL;
}

static int open_index(sq_st_set *s, const char *index_path, sq_error *err)
{
    cJSON *root = NULL;
    int rc = sq_json_load(index_path, &root, err);
    if (rc)
        return rc;
    const cJSON *wm = cJSON_IsObject(root) ? cJSON_GetObjectItemCaseSensitive(root, "weight_map")
                                           : NULL;
    if (!cJSON_IsObject(wm) || !wm->child) {
        cJSON_Delete(root);
        return sq_error_set(err, SQ_EDATA, "%s: weight_map: missing or not a non-empty object",
                            index_path);
    }
    s->weight_map = cJSON_DetachItemViaPointer(root, (cJSON *)wm);
    cJSON_Delete(root);
    for (const cJSON *e = s->weight_map->child; e; e = e->next) {
        if (!cJSON_IsString(e))
            return sq_error_set(err, SQ_EDATA, "%s: weight_map: %s: expected a shard file name",
                                index_path, e->string);
        const char *shard = e->valuestring;
        if (!*shard || strchr(shard, '/') || strcmp(shard, ".") == 0 || strcmp(shard, "..") == 0)
            return sq_error_set(err, SQ_EDATA, "%s: weight_map: %s: shard \"%s\" is not a file "
                                "name in the model directory", index_path, e->string, shard);
        if (shard_by_name(s, shard))
            continue;
        char *p = join(s->dir, shard);
        if (!p)
            return sq_error_oom(err, "a path");
        if (!file_exists(p)) {
            rc = sq_error_set(err, SQ_ENOINPUT, "%s: weight_map: %s: shard %s does not exist",
                              index_path, e->string, p);
            free(p);
            return rc;
        }
        rc = add_file(s, p, err);
        free(p);
        if (rc)
            return rc;
    }
    for (const cJSON *e = s->weight_map->child; e; e = e->next) {
        const sq_st_file *f = shard_by_name(s, e->valuestring);
        if (!sq_st_find(f, e->string))
            return sq_error_set(err, SQ_EDATA, "%s: weight_map: tensor %s is not in its shard %s",
                                index_path, e->string, f->path);
    }
    return SQ_OK;
}

int sq_st_set_open(const char *dir, sq_st_set **out, sq_error *err)
{
    *out = NULL;
    sq_st_set *s = calloc(1, sizeof *s);
    if (!s || !(s->dir = strdup(dir))) {
        free(s);
        return sq_error_oom(err, "a checkpoint");
    }
    char *single = join(dir, "model.safetensors");
    char *index = join(dir, "model.safetensors.index.json");
    int rc;
    if (!single || !index) {
        rc = sq_error_oom(err, "a path");
    } else if ((rc = sq_path_broken_link(single, err)) ||
               (rc = sq_path_broken_link(index, err))) {
        /* a checkpoint that is there but broken is an error, never "no checkpoint" */
    } else if (file_exists(single)) {
        rc = add_file(s, single, err);
    } else if (file_exists(index)) {
        rc = open_index(s, index, err);
    } else {
        rc = sq_error_set(err, SQ_ENOINPUT, "%s: holds neither model.safetensors nor "
                          "model.safetensors.index.json", dir);
    }
    free(single);
    free(index);
    if (rc) {
        sq_st_set_free(s);
        return rc;
    }
    *out = s;
    return SQ_OK;
}

void sq_st_set_free(sq_st_set *s)
{
    if (!s)
        return;
    for (int i = 0; i < s->n_files; i++)
        sq_st_close(s->files[i]);
    free(s->files);
    cJSON_Delete(s->weight_map);
    free(s->dir);
    free(s);
}

const sq_st_tensor *sq_st_set_find(const sq_st_set *s, const char *name, const sq_st_file **file)
{
    const sq_st_file *f = NULL;
    if (s->weight_map) {
        const cJSON *e = cJSON_GetObjectItemCaseSensitive(s->weight_map, name);
        if (cJSON_IsString(e))
            f = shard_by_name(s, e->valuestring);
    } else if (s->n_files == 1) {
        f = s->files[0];
    }
    const sq_st_tensor *t = f ? sq_st_find(f, name) : NULL;
    if (file)
        *file = t ? f : NULL;
    return t;
}
