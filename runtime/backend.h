/* Internal: the model's weights as the backends see them, and the backend vtable behind
 * sq_context_* (runtime/model.h). Not part of the public API.
 *
 * context.c checks every argument of sq_context_forward/commit (token range, positions, mask
 * rows, pending and committed capacity, keep indices) before calling a backend, and keeps the
 * committed/pending counts; a backend only computes. Adding a backend (CUDA, issue 7) means
 * one more sq_backend_ops and a case in sq_context_new. */
#ifndef SQ_RUNTIME_BACKEND_H
#define SQ_RUNTIME_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "runtime/arch.h"
#include "runtime/model.h"
#include "runtime/safetensors.h"

/* The weights, one float32 view per slot of the architecture's table (runtime/arch.h, which
 * gives each slot's HF name and shape; SQ_L_* / SQ_M_* name the slots). Matrices are HF
 * nn.Linear weights: (out_features, in_features), row-major, so y = W x. A slot the
 * architecture does not have, or an optional tensor the checkpoint lacks, is NULL; a tied
 * lm_head is the embedding's pointer. */
typedef struct sq_layer_weights {
    const float *t[SQ_L_COUNT];    // model.layers.{i}.*
} sq_layer_weights;

typedef struct sq_weights {
    const float      *t[SQ_M_COUNT];  // embed, lm_head (== embed when tied), final norm
    sq_layer_weights *layers;         // (n_layers)
} sq_weights;

/* Float32 weights: every tensor is copied (F32) or converted (F16/BF16) once at load into
 * malloc'd buffers (4 bytes per parameter), under the bus guard; nothing reads the mapping
 * afterwards, so a checkpoint truncated or rewritten while the model runs changes nothing
 * (issue 27 C2). */
struct sq_model {
    sq_model_config config;
    char           *dir;
    sq_st_set      *st;          /* the mapped checkpoint; raw tensors for other backends  */
    sq_weights      w;
    float         **owned;       /* (n_owned) conversion buffers                           */
    int             n_owned;
    size_t          owned_bytes; /* their total size                                       */
    int             device_random; /* sq_model_new_random_device: no host weights (w.* NULL);
                                      the CUDA backend makes them from random_seed           */
    uint64_t        random_seed;
};

typedef struct sq_backend_ops {
    const char *name;
    /* Allocates ctx->impl for ctx->model and ctx->params. */
    int  (*init)(sq_context *ctx, sq_error *err);
    void (*free)(sq_context *ctx);
    /* Arguments already checked; ctx->n_committed / n_pending are the counts before the call.
     * The CPU backend never fails on valid arguments once init succeeded; a device backend
     * returns SQ_ESOFTWARE with the failing call in err when the device reports an error. */
    int  (*forward)(sq_context *ctx, const int32_t *tokens, const int32_t *pos,
                    const uint8_t *mask, int n, float *logits, sq_error *err);
    int  (*commit)(sq_context *ctx, const int32_t *keep, int nkeep, sq_error *err);
    /* The device's name; NULL for "CPU". */
    const char *(*device_name)(const sq_context *ctx);
    /* b >= 1 sequences of distinct contexts of this backend and one model, each checked as
     * forward's arguments are; NULL when the backend has none (sq_context_forward_batch then
     * refuses b > 1). */
    int  (*forward_batch)(const sq_batch_seq *seqs, int b, sq_error *err);
} sq_backend_ops;

struct sq_context {
    const sq_model        *model;
    sq_context_params      params;
    const sq_backend_ops  *ops;
    void                  *impl;
    int                    n_committed;
    int                    n_pending;
};

extern const sq_backend_ops sq_backend_cpu;

/* The CUDA backend is a module loaded at run time (docs/cuda.md): libsequoia-cuda.so, built
 * from runtime/cuda_backend.cu, runtime/cuda_sample.cu and runtime/cuda_module.c when meson finds
 * nvcc, is the only file that links the CUDA runtime and cuBLAS. It exports one table,
 * sq_cuda_module_table (SQ_CUDA_MODULE_SYMBOL); the loader (runtime/cuda_load.c) dlopens the
 * module the first time the CUDA backend is asked for and reaches the backend only through this
 * table. abi and the sizes let the loader refuse a module built from other sources. */
#define SQ_CUDA_MODULE_ABI    1
#define SQ_CUDA_MODULE_SYMBOL "sq_cuda_module_table"

struct sq_cuda_sampler;

typedef struct sq_cuda_module {
    int    abi;                  /* SQ_CUDA_MODULE_ABI                                    */
    size_t table_size;           /* sizeof(sq_cuda_module)                                */
    size_t context_size;         /* sizeof(sq_context): the layouts the module was built  */
    size_t model_size;           /*   against, sizeof(sq_model)                           */
    const sq_backend_ops *backend;
    /* the functions behind sq_cuda_device_count (runtime/model.h) and runtime/cuda_sample.h */
    int  (*device_count)(sq_error *err);
    int  (*sampler_new)(int vocab, struct sq_cuda_sampler **out, sq_error *err);
    void (*sampler_free)(struct sq_cuda_sampler *s);
    int  (*probs)(struct sq_cuda_sampler *s, const float *logits, double temperature,
                  double top_p, double *probs, sq_error *err);
    int  (*argmax)(struct sq_cuda_sampler *s, const float *logits, int *out, sq_error *err);
    int  (*residual)(struct sq_cuda_sampler *s, double *r, const double *q, sq_error *err);
    int  (*sample_without)(struct sq_cuda_sampler *s, const double *q, uint64_t seed,
                           uint64_t stream, int k, int32_t *tokens, sq_error *err);
    int  (*sample_with)(struct sq_cuda_sampler *s, const double *q, uint64_t seed,
                        uint64_t stream, int k, int32_t *tokens, sq_error *err);
    int  (*copy_bandwidth)(size_t bytes, int reps, double *gb_per_s, sq_error *err);
} sq_cuda_module;

/* The CUDA module's table (runtime/cuda_load.c), loaded on the first call of the process (once;
 * later calls return the first outcome). Errors: SQ_EUNAVAILABLE (69) when the module or a
 * library it needs cannot be loaded, with dlerror's text naming it; SQ_EUSAGE (64) in a build
 * without the CUDA backend. */
int sq_cuda_module_get(const sq_cuda_module **out, sq_error *err);

/* Inside the module only (runtime/cuda_backend.cu), reached through the table. */
extern const sq_backend_ops sq_backend_cuda;
int sq_cuda_device_count_impl(sq_error *err);

#endif
