/* Loading a checkpoint: config.json + safetensors -> typed weight views, tensor by tensor as
 * the architecture's table lists them (runtime/arch.h): matrices as stored, vectors as float32
 * (struct sq_model in runtime/backend.h); and the converted sets of sq_model_weights_as. */
#include <dirent.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "libsequoia/base/half.h"
#include "libsequoia/base/io.h"
#include "runtime/arch.h"
#include "runtime/backend.h"
#include "runtime/config.h"
#include "runtime/memory.h"
#include "runtime/safetensors.h"

/* Guards every model's converted sets and owned list (sq_model_weights_as). */
static pthread_mutex_t conv_lock = PTHREAD_MUTEX_INITIALIZER;

int sq_model_keep(sq_model *m, void *buf, size_t bytes, sq_error *err)
{
    void **o = realloc(m->owned, (size_t)(m->n_owned + 1) * sizeof *o);
    if (!o) {
        free(buf);
        return sq_error_oom(err, "the weight table");
    }
    m->owned = o;
    m->owned[m->n_owned++] = buf;
    m->owned_bytes += bytes;
    return SQ_OK;
}

static sq_weight_dtype dtype_of_st(sq_st_dtype dt)
{
    return dt == SQ_ST_F16 ? SQ_DTYPE_F16 : dt == SQ_ST_BF16 ? SQ_DTYPE_BF16 : SQ_DTYPE_F32;
}

static size_t dtype_size(sq_weight_dtype dt)
{
    return dt == SQ_DTYPE_F16 || dt == SQ_DTYPE_BF16 ? 2 : 4;
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

/* Finds tensor `it`, checks its dtype and shape against the config, and returns its view
 * (struct sq_model, runtime/backend.h): a matrix as stored (in place when aligned), a vector as
 * float32; an optional tensor the checkpoint lacks leaves out->p NULL. */
static int get_weight(sq_model *m, const sq_arch_item *it, sq_wt *out, const char **dtype_out,
                      sq_error *err)
{
    const char *name = it->name;
    const sq_st_file *f = NULL;
    const sq_st_tensor *t = sq_st_set_find(m->st, name, &f);
    *out = (sq_wt){NULL, SQ_DTYPE_F32};
    /* Gemma3ForConditionalGeneration as transformers >= 4.52 saves it: model.language_model.*
     * and a top-level lm_head, where the hub's checkpoints have language_model.model.* */
    static const char old_prefix[] = "language_model.model.";
    char alt[200];
    if (!t && strncmp(name, old_prefix, sizeof old_prefix - 1) == 0) {
        snprintf(alt, sizeof alt, "model.language_model.%s", name + sizeof old_prefix - 1);
        if ((t = sq_st_set_find(m->st, alt, &f)))
            name = alt;
    } else if (!t && strcmp(name, "language_model.lm_head.weight") == 0) {
        if ((t = sq_st_set_find(m->st, "lm_head.weight", &f)))
            name = "lm_head.weight";
    }
    if (!t && it->t->optional)
        return SQ_OK;
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
    /* matrices keep their dtype; vectors are float32 */
    const sq_weight_dtype dt = it->ndim == 2 ? dtype_of_st(t->dtype) : SQ_DTYPE_F32;
    const size_t es = dtype_size(dt);
    out->dtype = dt;
    if (dt == dtype_of_st(t->dtype) && (uintptr_t)t->data % es == 0) {
        out->p = t->data;
        return SQ_OK;
    }
    size_t bytes = (size_t)t->numel * es;
    void *buf = malloc(bytes ? bytes : 1);
    if (!buf)
        return sq_error_oom(err, name);
    if (dt == SQ_DTYPE_F32)
        sq_st_to_f32(t->dtype, t->data, buf, (size_t)t->numel);
    else
        memcpy(buf, t->data, bytes);   /* an unaligned 16-bit matrix: copied, not converted */
    out->p = buf;
    return sq_model_keep(m, buf, bytes, err);
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
    int rc = SQ_OK;
    for (int k = 0; k < count && !rc; k++) {
        sq_arch_item it;
        sq_arch_tensor_at(c, k, &it);
        if (it.tied)
            continue;
        const char *dtype = NULL;
        rc = get_weight(m, &it, sq_arch_slot(&m->w, &it), m->config.dtype[0] ? NULL : &dtype,
                        err);
        if (!rc && dtype)
            snprintf(m->config.dtype, sizeof m->config.dtype, "%s", dtype);
    }
    m->dtype = sq_model_dtype_of_name(m->config.dtype);
    for (int k = 0; k < count && !rc; k++) {
        sq_arch_item it;
        sq_arch_tensor_at(c, k, &it);
        if (it.tied)
            *sq_arch_slot(&m->w, &it) = m->w.t[it.t->tied_to];
    }
    return rc;
}

sq_weight_dtype sq_model_dtype_of_name(const char *name)
{
    return strcmp(name, "F16") == 0 ? SQ_DTYPE_F16 : strcmp(name, "BF16") == 0 ? SQ_DTYPE_BF16
                                                                              : SQ_DTYPE_F32;
}

/* ---- a checkpoint cut short while mapped (docs/robustness.md, issue 27 C2) -----------------
 * Matrices are used in place in the checkpoint's mapping (16-bit weights: docs/runtime.md), so a
 * checkpoint truncated while the model runs raises SIGBUS at the next read of a lost page, in
 * whichever thread reads it; no forward can go on without those weights. A tool that calls
 * sq_model_guard_mappings turns that signal into a message naming the mapped checkpoints and
 * exit 74 (SQ_EIO) instead of death by signal. The names are copied at load into fixed buffers,
 * so the handler only calls write and _exit (async-signal-safe). */
#define MAPPED_MAX 4
static char mapped_dir[MAPPED_MAX][512];
static volatile sig_atomic_t n_mapped;
static char guard_prog[64];

static void put_str(const char *s)
{
    size_t n = strlen(s);
    while (n > 0) {
        ssize_t w = write(STDERR_FILENO, s, n);
        if (w <= 0)
            return;
        s += w;
        n -= (size_t)w;
    }
}

static void on_sigbus(int sig)
{
    (void)sig;
    put_str(guard_prog);
    put_str(": a mapped checkpoint was cut short or rewritten while in use (SIGBUS reading its "
            "weights):");
    for (int i = 0; i < n_mapped && i < MAPPED_MAX; i++) {
        put_str(" ");
        put_str(mapped_dir[i]);
    }
    put_str("\n");
    _exit(SQ_EIO);
}

void sq_model_guard_mappings(const char *prog)
{
    snprintf(guard_prog, sizeof guard_prog, "%s", prog ? prog : "sequoia");
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigbus;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGBUS, &sa, NULL);
}

static void note_mapped(const char *dir)
{
    int k = n_mapped;
    if (k < MAPPED_MAX) {
        snprintf(mapped_dir[k], sizeof mapped_dir[k], "%s/model.safetensors", dir);
        n_mapped = k + 1;
    }
}

/* The names the tools open in a model directory (sq_model_paths_check): the loader's, the
 * tokenizer's (libsequoia/text/tokenizer.h) and every checkpoint file. */
static int model_file_name(const char *name)
{
    static const char *const fixed[] = {"config.json", "model.safetensors.index.json",
                                        "tokenizer.json", "tokenizer_config.json",
                                        "generation_config.json"};
    for (size_t i = 0; i < sizeof fixed / sizeof *fixed; i++)
        if (strcmp(name, fixed[i]) == 0)
            return 1;
    size_t n = strlen(name), k = strlen(".safetensors");
    return n > k && strcmp(name + n - k, ".safetensors") == 0;
}

typedef struct path_list {
    sq_path_use *uses;
    char **owned;   /* the paths made here */
    int n, n_owned, cap;
} path_list;

static int path_list_add(path_list *l, const char *option, const char *path, char *owned)
{
    if (l->n == l->cap) {
        int nc = l->cap ? 2 * l->cap : 16;
        sq_path_use *u = realloc(l->uses, (size_t)nc * sizeof *u);
        if (!u)
            return -1;
        l->uses = u;
        char **o = realloc(l->owned, (size_t)nc * sizeof *o);
        if (!o)
            return -1;
        l->owned = o;
        l->cap = nc;
    }
    l->uses[l->n++] = (sq_path_use){option, path};
    if (owned)
        l->owned[l->n_owned++] = owned;
    return 0;
}

/* Appends the files that the tools read from model directory `dir` (sq_model_paths_check). */
static int model_dir_files(path_list *l, const char *option, const char *dir)
{
    struct stat st;
    if (!dir || strcmp(dir, "-") == 0 || stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
        return 0;
    DIR *d = opendir(dir);
    if (!d)
        return 0;   /* unreadable: loading it reports the problem */
    int rc = 0;
    struct dirent *e;
    while (!rc && (e = readdir(d))) {
        if (!model_file_name(e->d_name))
            continue;
        size_t len = strlen(dir) + strlen(e->d_name) + 2;
        char *path = malloc(len);
        if (!path) {
            rc = -1;
            break;
        }
        snprintf(path, len, "%s/%s", dir, e->d_name);
        if ((rc = path_list_add(l, option, path, path)))
            free(path);
    }
    closedir(d);
    return rc;
}

int sq_model_paths_check(const sq_path_use *inputs, int n_in, const sq_path_use *model_dirs,
                         int n_dirs, const sq_path_use *outputs, int n_out, sq_error *err)
{
    path_list l = {0};
    int rc = 0;
    for (int i = 0; !rc && i < n_in; i++)
        rc = path_list_add(&l, inputs[i].option, inputs[i].path, NULL);
    for (int i = 0; !rc && i < n_dirs; i++)
        rc = model_dir_files(&l, model_dirs[i].option, model_dirs[i].path);
    rc = rc ? sq_error_oom(err, "a model directory's file list")
            : sq_paths_check(l.uses, l.n, outputs, n_out, err);
    for (int i = 0; i < l.n_owned; i++)
        free(l.owned[i]);
    free(l.owned);
    free(l.uses);
    return rc;
}

int sq_model_load(const char *dir, sq_model **out, sq_error *err)
{
    *out = NULL;
    struct stat st;
    if (strcmp(dir, "-") == 0)
        return sq_error_set(err, SQ_EUSAGE, "-: standard input cannot be a model directory (its "
                            "checkpoint is mapped); name the directory");
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
    note_mapped(dir);
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
    for (int d = 0; d < 4; d++)
        free(m->conv[d].layers);
    sq_st_set_free(m->st);
    free(m->dir);
    free(m);
}

const sq_model_config *sq_model_get_config(const sq_model *m)
{
    return &m->config;
}

sq_weight_dtype sq_model_dtype(const sq_model *m)
{
    return m->dtype;
}

size_t sq_model_owned_bytes(const sq_model *m)
{
    pthread_mutex_lock(&conv_lock);
    size_t b = m->owned_bytes;
    pthread_mutex_unlock(&conv_lock);
    return b;
}

/* ---- converted sets (sq_model_weights_as) -------------------------------------------------- */

/* count elements of src (dtype sd) as dtype dd into dst */
static void convert(void *dst, sq_weight_dtype dd, const void *src, sq_weight_dtype sd,
                    size_t count)
{
    if (dd == SQ_DTYPE_F32) {
        sq_st_to_f32(sd == SQ_DTYPE_F16 ? SQ_ST_F16 : sd == SQ_DTYPE_BF16 ? SQ_ST_BF16 : SQ_ST_F32,
                     src, dst, count);
        return;
    }
    uint16_t *d = dst;
    for (size_t i = 0; i < count; i++) {
        float v;
        if (sd == SQ_DTYPE_F32)
            v = ((const float *)src)[i];
        else if (sd == SQ_DTYPE_BF16)
            v = sq_bf16_to_f32(((const uint16_t *)src)[i]);
        else
            v = sq_f16_to_f32(((const uint16_t *)src)[i]);
        d[i] = dd == SQ_DTYPE_BF16 ? sq_f32_to_bf16(v) : sq_f32_to_f16(v);
    }
}

static int make_set(sq_model *m, sq_weight_dtype dt, sq_error *err)
{
    const sq_model_config *c = &m->config;
    const int count = sq_arch_count(c);
    double need = 0;
    for (int k = 0; k < count; k++) {
        sq_arch_item it;
        sq_arch_tensor_at(c, k, &it);
        const sq_wt *src = sq_arch_slot(&m->w, &it);
        if (!it.tied && src->p && it.ndim == 2 && src->dtype != dt)
            need += (double)it.numel * (double)dtype_size(dt);
    }
    int rc = sq_memory_check(need + (double)m->owned_bytes, err, "compute in the checkpoint's "
                             "own dtype (the default)", "%s: its weights as %s need %.1f GiB more",
                             m->dir, sq_weight_dtype_name(dt), need / 1073741824.0);
    if (rc)
        return rc;
    sq_weights *w = &m->conv[dt];
    w->layers = calloc((size_t)(c->n_layers > 0 ? c->n_layers : 1), sizeof *w->layers);
    if (!w->layers)
        return sq_error_oom(err, "the layer table");
    for (int k = 0; k < count && !rc; k++) {
        sq_arch_item it;
        sq_arch_tensor_at(c, k, &it);
        if (it.tied)
            continue;
        const sq_wt *src = sq_arch_slot(&m->w, &it);
        sq_wt *dst = sq_arch_slot(w, &it);
        *dst = *src;
        if (!src->p || it.ndim != 2 || src->dtype == dt)
            continue;
        size_t bytes = (size_t)it.numel * dtype_size(dt);
        void *buf = malloc(bytes ? bytes : 1);
        if (!buf) {
            rc = sq_error_oom(err, "converted weights");
            break;
        }
        convert(buf, dt, src->p, src->dtype, (size_t)it.numel);
        *dst = (sq_wt){buf, dt};
        rc = sq_model_keep(m, buf, bytes, err);
    }
    for (int k = 0; k < count && !rc; k++) {
        sq_arch_item it;
        sq_arch_tensor_at(c, k, &it);
        if (it.tied)
            *sq_arch_slot(w, &it) = w->t[it.t->tied_to];
    }
    if (rc) {   /* the buffers made so far stay owned (freed with the model); no half set */
        free(w->layers);
        w->layers = NULL;
    }
    return rc;
}

int sq_model_weights_as(const sq_model *cm, sq_weight_dtype dtype, const sq_weights **out,
                        sq_error *err)
{
    sq_model *m = (sq_model *)cm;   /* the converted sets are a cache of the const model */
    if (dtype == SQ_DTYPE_AUTO || dtype == m->dtype) {
        /* mixed checkpoints (a matrix in another dtype) compute each tensor in its own */
        *out = &m->w;
        return SQ_OK;
    }
    if ((unsigned)dtype > SQ_DTYPE_BF16)
        return sq_error_set(err, SQ_EUSAGE, "dtype %d is not f32, f16 or bf16", (int)dtype);
    pthread_mutex_lock(&conv_lock);
    int rc = m->conv[dtype].layers ? SQ_OK : make_set(m, dtype, err);
    pthread_mutex_unlock(&conv_lock);
    *out = rc ? NULL : &m->conv[dtype];
    return rc;
}
