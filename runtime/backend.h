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

/* Float32 weights: F32 tensors whose data is 4-byte aligned in the mapping are used in place
 * (no copy; the pages belong to the page cache). F16/BF16 tensors, and unaligned F32 ones,
 * are converted once at load into malloc'd buffers (4 bytes per parameter). */
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

#ifdef SQ_HAVE_CUDA
/* runtime/cuda_backend.cu (built when meson finds nvcc). */
extern const sq_backend_ops sq_backend_cuda;
int sq_cuda_device_count_impl(sq_error *err);
#endif

#endif
