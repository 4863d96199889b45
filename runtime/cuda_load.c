/* The CUDA backend's loader (docs/cuda.md): the runtime and every tool link no CUDA library;
 * the backend (runtime/cuda_backend.cu, runtime/cuda_sample.cu) is the module
 * libsequoia-cuda.so, which alone links the CUDA runtime and cuBLAS. The first request for the
 * CUDA backend (sq_context_new with SQ_BACKEND_CUDA, sq_cuda_device_count, a sampler of
 * runtime/cuda_sample.h) dlopens it and takes its table (runtime/backend.h, sq_cuda_module);
 * everything CUDA goes through that table. A CPU run never loads it.
 *
 * Where the module is looked for, in this order (never on the network):
 *   1. $SQ_CUDA_MODULE, when set and not empty: that file and no other;
 *   2. the install tree: SQ_CUDA_MODULE_FROM_BINDIR relative to the running executable's
 *      directory (e.g. bin/../lib/x86_64-linux-gnu/sequoia/libsequoia-cuda.so), or
 *      SQ_CUDA_MODULE_FROM_LIBDIR relative to the shared library holding this code;
 *   3. the build tree: SQ_CUDA_MODULE_BUILD, only for an executable inside SQ_BUILD_ROOT (the
 *      meson build directory it was built in).
 * Failures are SQ_EUNAVAILABLE (69): no module found (the places tried are named), a module or
 * a library it needs that does not load (dlerror's text names the file: "libcublasLt.so.13:
 * cannot open shared object file", "... failed to map segment"), or a module of other sources.
 * A build without the CUDA backend (no nvcc, -Dcuda=disabled) says so with SQ_EUSAGE (64). */
#define _GNU_SOURCE   /* dladdr */
#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/backend.h"
#include "runtime/cuda_sample.h"

#ifdef SQ_HAVE_CUDA

#ifndef SQ_CUDA_MODULE_NAME
#define SQ_CUDA_MODULE_NAME "libsequoia-cuda.so"
#endif

static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static const sq_cuda_module *loaded;
static sq_error load_err;

/* The directory of the file holding this code: the shared library when the runtime is one
 * (*is_lib = 1), else the executable. 0 on success. */
static int self_dir(char *dir, size_t n, int *is_lib)
{
    char exe[PATH_MAX] = "";
    ssize_t k = readlink("/proc/self/exe", exe, sizeof exe - 1);
    exe[k > 0 ? k : 0] = '\0';
    const char *self = exe;
    char lib[PATH_MAX];
    Dl_info info;
    if (dladdr(&load_once, &info) && info.dli_fname && info.dli_fname[0] == '/' &&
        realpath(info.dli_fname, lib) && strcmp(lib, exe) != 0)
        self = lib;
    *is_lib = self == lib;
    const char *slash = strrchr(self, '/');
    if (!slash || (size_t)(slash - self) >= n)
        return -1;
    memcpy(dir, self, (size_t)(slash - self));
    dir[slash - self] = '\0';
    return 0;
}

/* dlopen + dlsym + the layout checks; 0, or SQ_EUNAVAILABLE with load_err set. */
static int open_module(const char *path)
{
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *why = dlerror();
        return sq_error_set(&load_err, SQ_EUNAVAILABLE, "the CUDA backend cannot be loaded: %s "
                            "(its module needs the CUDA runtime and cuBLAS; docs/cuda.md)",
                            why ? why : path);
    }
    dlerror();
    const sq_cuda_module *m = (const sq_cuda_module *)dlsym(h, SQ_CUDA_MODULE_SYMBOL);
    if (!m) {   /* (the message before dlclose, which frees dlerror's text) */
        const char *why = dlerror();
        sq_error_set(&load_err, SQ_EUNAVAILABLE, "%s is not a Sequoia CUDA module: %s", path,
                     why ? why : "no " SQ_CUDA_MODULE_SYMBOL);
        dlclose(h);
        return SQ_EUNAVAILABLE;
    }
    if (m->abi != SQ_CUDA_MODULE_ABI || m->table_size != sizeof(sq_cuda_module) ||
        m->context_size != sizeof(sq_context) || m->model_size != sizeof(sq_model)) {
        sq_error_set(&load_err, SQ_EUNAVAILABLE, "%s was built from other sources than this "
                     "program (module ABI %d, this program's %d): rebuild or reinstall both",
                     path, m->abi, SQ_CUDA_MODULE_ABI);
        dlclose(h);
        return SQ_EUNAVAILABLE;
    }
    loaded = m;   /* never closed: the backend's state lives until the process ends */
    return SQ_OK;
}

static void load(void)
{
    const char *env = getenv("SQ_CUDA_MODULE");
    if (env && *env) {
        open_module(env);
        return;
    }
    char dir[PATH_MAX], cand[2][PATH_MAX + 256];
    int nc = 0, is_lib = 0;
    if (self_dir(dir, sizeof dir, &is_lib) == 0) {
#if defined(SQ_CUDA_MODULE_FROM_BINDIR) && defined(SQ_CUDA_MODULE_FROM_LIBDIR)
        snprintf(cand[nc++], sizeof cand[0], "%s/%s/%s", dir,
                 is_lib ? SQ_CUDA_MODULE_FROM_LIBDIR : SQ_CUDA_MODULE_FROM_BINDIR,
                 SQ_CUDA_MODULE_NAME);
#endif
#if defined(SQ_CUDA_MODULE_BUILD) && defined(SQ_BUILD_ROOT)
        size_t nroot = strlen(SQ_BUILD_ROOT);
        if (strncmp(dir, SQ_BUILD_ROOT, nroot) == 0 && (dir[nroot] == '/' || !dir[nroot]))
            snprintf(cand[nc++], sizeof cand[0], "%s", SQ_CUDA_MODULE_BUILD);
#endif
    }
    for (int i = 0; i < nc; i++)
        if (access(cand[i], F_OK) == 0) {
            open_module(cand[i]);
            return;
        }
    char tried[2 * (PATH_MAX + 260)] = "";
    for (int i = 0; i < nc; i++)
        snprintf(tried + strlen(tried), sizeof tried - strlen(tried), "%s%s", i ? ", " : "",
                 cand[i]);
    sq_error_set(&load_err, SQ_EUNAVAILABLE, "the CUDA backend's module %s is not installed "
                 "(looked for %s; SQ_CUDA_MODULE names another file)", SQ_CUDA_MODULE_NAME,
                 nc ? tried : "it next to no known executable");
}

int sq_cuda_module_get(const sq_cuda_module **out, sq_error *err)
{
    pthread_once(&load_once, load);
    *out = loaded;
    if (loaded)
        return SQ_OK;
    return sq_error_set(err, load_err.status, "%s", load_err.msg);
}

#else

int sq_cuda_module_get(const sq_cuda_module **out, sq_error *err)
{
    *out = NULL;
    return sq_error_set(err, SQ_EUSAGE, "this build has no CUDA backend (meson found no nvcc, "
                        "or -Dcuda=disabled)");
}

#endif

/* runtime/model.h */
int sq_cuda_device_count(sq_error *err)
{
    const sq_cuda_module *m;
    return sq_cuda_module_get(&m, err) ? 0 : m->device_count(err);
}

/* runtime/cuda_sample.h: each function forwards to the module's. */
int sq_cuda_sampler_new(int vocab, sq_cuda_sampler **out, sq_error *err)
{
    const sq_cuda_module *m;
    *out = NULL;
    int rc = sq_cuda_module_get(&m, err);
    return rc ? rc : m->sampler_new(vocab, out, err);
}

void sq_cuda_sampler_free(sq_cuda_sampler *s)
{
    const sq_cuda_module *m;
    if (s && sq_cuda_module_get(&m, NULL) == SQ_OK)
        m->sampler_free(s);
}

int sq_cuda_probs(sq_cuda_sampler *s, const float *logits, double temperature, double top_p,
                  double *probs, sq_error *err)
{
    const sq_cuda_module *m;
    int rc = sq_cuda_module_get(&m, err);
    return rc ? rc : m->probs(s, logits, temperature, top_p, probs, err);
}

int sq_cuda_argmax(sq_cuda_sampler *s, const float *logits, int *out, sq_error *err)
{
    const sq_cuda_module *m;
    int rc = sq_cuda_module_get(&m, err);
    return rc ? rc : m->argmax(s, logits, out, err);
}

int sq_cuda_residual(sq_cuda_sampler *s, double *r, const double *q, sq_error *err)
{
    const sq_cuda_module *m;
    int rc = sq_cuda_module_get(&m, err);
    return rc ? rc : m->residual(s, r, q, err);
}

int sq_cuda_sample_without(sq_cuda_sampler *s, const double *q, uint64_t seed, uint64_t stream,
                           int k, int32_t *tokens, sq_error *err)
{
    const sq_cuda_module *m;
    int rc = sq_cuda_module_get(&m, err);
    return rc ? rc : m->sample_without(s, q, seed, stream, k, tokens, err);
}

int sq_cuda_sample_with(sq_cuda_sampler *s, const double *q, uint64_t seed, uint64_t stream,
                        int k, int32_t *tokens, sq_error *err)
{
    const sq_cuda_module *m;
    int rc = sq_cuda_module_get(&m, err);
    return rc ? rc : m->sample_with(s, q, seed, stream, k, tokens, err);
}

int sq_cuda_copy_bandwidth(size_t bytes, int reps, double *gb_per_s, sq_error *err)
{
    const sq_cuda_module *m;
    *gb_per_s = 0.0;
    int rc = sq_cuda_module_get(&m, err);
    return rc ? rc : m->copy_bandwidth(bytes, reps, gb_per_s, err);
}
