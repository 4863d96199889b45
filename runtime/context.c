/* sq_context_*: argument checks and bookkeeping shared by every backend (runtime/backend.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/backend.h"

/* Committed + pending slots one context may hold (keeps every cache size inside 64 bits). */
#define SQ_CONTEXT_MAX_SLOTS (1 << 24)

static const char *const dtype_names[] = {"auto", "f32", "f16", "bf16"};

int sq_weight_dtype_parse(const char *name, sq_weight_dtype *out)
{
    for (int i = 1; i < 4; i++)
        if (name && strcmp(name, dtype_names[i]) == 0) {
            *out = (sq_weight_dtype)i;
            return 0;
        }
    return -1;
}

const char *sq_weight_dtype_name(sq_weight_dtype dtype)
{
    return (unsigned)dtype < 4 ? dtype_names[dtype] : "unknown";
}

sq_context_params sq_context_default_params(void)
{
    sq_context_params p = {
        .max_context = 2048,
        .max_pending = 256,
        .backend = SQ_BACKEND_CPU,
        .threads = 0,
        .dtype = SQ_DTYPE_AUTO,
        .offload = 0,
    };
    return p;
}

int sq_context_new(const sq_model *m, const sq_context_params *params, sq_context **out,
                   sq_error *err)
{
    *out = NULL;
    const sq_backend_ops *ops = NULL;
    sq_weight_dtype dtype = params->dtype;
    switch (params->backend) {
    case SQ_BACKEND_CPU:
        ops = &sq_backend_cpu;
        /* AUTO: the model's own dtype, read in place; another one is a converted set the
         * model makes once (sq_model_weights_as, runtime/backend.h) */
        if (dtype == SQ_DTYPE_AUTO)
            dtype = m->device_random ? SQ_DTYPE_F32 : sq_model_dtype(m);
        if ((unsigned)dtype > SQ_DTYPE_BF16)
            return sq_error_set(err, SQ_EUSAGE, "context: dtype %d is not f32, f16 or bf16",
                                (int)dtype);
        if (params->offload)
            return sq_error_set(err, SQ_EUSAGE, "context: offload streams weights to a GPU; "
                                "it needs the CUDA backend");
        if (m->device_random)
            return sq_error_set(err, SQ_EUSAGE, "context: this model's random weights are made "
                                "on a CUDA device (sq_model_new_random_device); the CPU backend "
                                "needs sq_model_new_random");
        break;
    case SQ_BACKEND_CUDA: {
        if (dtype == SQ_DTYPE_AUTO)
            dtype = SQ_DTYPE_F16;
        if (dtype != SQ_DTYPE_F16 && dtype != SQ_DTYPE_BF16)
            return sq_error_set(err, SQ_EUSAGE, "context: dtype %s: the CUDA backend keeps "
                                "weights in f16 or bf16", sq_weight_dtype_name(dtype));
        /* the module (runtime/cuda_load.c) is loaded here, by the first CUDA context: a CPU
         * run never maps a CUDA library (docs/cuda.md) */
        const sq_cuda_module *cuda;
        int lrc = sq_cuda_module_get(&cuda, err);
        if (lrc)
            return lrc;
        ops = cuda->backend;
        break;
    }
    default:
        return sq_error_set(err, SQ_EUSAGE, "unknown backend %d", (int)params->backend);
    }
    if (params->max_context < 1 || params->max_pending < 1 ||
        (long long)params->max_context + params->max_pending > SQ_CONTEXT_MAX_SLOTS)
        return sq_error_set(err, SQ_EUSAGE, "context: max_context %d and max_pending %d must be "
                            ">= 1 and sum to at most %d", params->max_context,
                            params->max_pending, SQ_CONTEXT_MAX_SLOTS);
    if (params->threads < 0)
        return sq_error_set(err, SQ_EUSAGE, "context: threads %d must be >= 0 (0: all cores)",
                            params->threads);
    sq_context *ctx = calloc(1, sizeof *ctx);
    if (!ctx)
        return sq_error_oom(err, "a context");
    ctx->model = m;
    ctx->params = *params;
    ctx->params.dtype = dtype;
    ctx->ops = ops;
    int rc = ops->init(ctx, err);
    if (rc) {
        free(ctx);
        return rc;
    }
    *out = ctx;
    return SQ_OK;
}

void sq_context_free(sq_context *ctx)
{
    if (!ctx)
        return;
    ctx->ops->free(ctx);
    free(ctx);
}

const char *sq_context_device_name(const sq_context *ctx)
{
    const char *name = ctx->ops->device_name ? ctx->ops->device_name(ctx) : NULL;
    return name ? name : "CPU";
}

sq_weight_dtype sq_context_dtype(const sq_context *ctx)
{
    return ctx->params.dtype;
}

int sq_context_committed(const sq_context *ctx)
{
    return ctx->n_committed;
}

int sq_context_pending(const sq_context *ctx)
{
    return ctx->n_pending;
}

/* The checks of one forward's arguments; `who` starts each message ("forward" or
 * "forward: sequence k"). */
static int check_forward(const sq_context *ctx, const int32_t *tokens, const int32_t *pos,
                         const uint8_t *mask, int n, const float *logits, const char *who,
                         sq_error *err)
{
    const int vocab = ctx->model->config.vocab_size;
    const int P = ctx->n_pending;
    if (n < 1 || !tokens || !pos || !mask || !logits)
        return sq_error_set(err, SQ_EUSAGE, "%s: needs n >= 1 tokens (got %d) and non-null "
                            "tokens, pos, mask and logits", who, n);
    if (n > ctx->params.max_pending - P)
        return sq_error_set(err, SQ_EUSAGE, "%s: %d pending + %d new tokens exceed "
                            "max_pending %d", who, P, n, ctx->params.max_pending);
    const int width = P + n;
    for (int i = 0; i < n; i++) {
        if (tokens[i] < 0 || tokens[i] >= vocab)
            return sq_error_set(err, SQ_EDATA, "%s: tokens[%d]: id %d is outside the "
                                "vocabulary [0, %d)", who, i, (int)tokens[i], vocab);
        if (pos[i] < 0)
            return sq_error_set(err, SQ_EUSAGE, "%s: pos[%d]: %d is negative", who, i,
                                (int)pos[i]);
        if (ctx->n_committed == 0) {
            const uint8_t *row = mask + (size_t)i * (size_t)width;
            int any = 0;
            for (int j = 0; j < width && !any; j++)
                any = row[j] != 0;
            if (!any)
                return sq_error_set(err, SQ_EUSAGE, "%s: mask row %d attends to nothing "
                                    "(no committed tokens and no pending bit set)", who, i);
        }
    }
    return SQ_OK;
}

int sq_context_forward(sq_context *ctx, const int32_t *tokens, const int32_t *pos,
                       const uint8_t *mask, int n, float *logits, sq_error *err)
{
    int rc = check_forward(ctx, tokens, pos, mask, n, logits, "forward", err);
    if (rc)
        return rc;
    rc = ctx->ops->forward(ctx, tokens, pos, mask, n, logits, err);
    if (rc)
        return rc;
    ctx->n_pending += n;
    return SQ_OK;
}

int sq_context_can_batch(const sq_context *ctx)
{
    return ctx->ops->forward_batch != NULL;
}

int sq_context_forward_batch(const sq_batch_seq *seqs, int b, sq_error *err)
{
    if (b < 1 || !seqs)
        return sq_error_set(err, SQ_EUSAGE, "forward batch: needs b >= 1 sequences (got %d)", b);
    for (int k = 0; k < b; k++) {
        const sq_context *ctx = seqs[k].ctx;
        if (!ctx)
            return sq_error_set(err, SQ_EUSAGE, "forward batch: sequence %d has no context", k);
        if (ctx->ops != seqs[0].ctx->ops || ctx->model != seqs[0].ctx->model)
            return sq_error_set(err, SQ_EUSAGE, "forward batch: sequence %d's context is of "
                                "another %s than sequence 0's", k,
                                ctx->ops != seqs[0].ctx->ops ? "backend" : "model");
        for (int j = 0; j < k; j++)
            if (seqs[j].ctx == ctx)
                return sq_error_set(err, SQ_EUSAGE, "forward batch: sequences %d and %d share "
                                    "a context (each sequence needs its own KV cache)", j, k);
        char who[64];
        snprintf(who, sizeof who, "forward batch: sequence %d", k);
        int rc = check_forward(ctx, seqs[k].tokens, seqs[k].pos, seqs[k].mask, seqs[k].n,
                               seqs[k].logits, who, err);
        if (rc)
            return rc;
    }
    int rc;
    if (b == 1)
        rc = seqs[0].ctx->ops->forward(seqs[0].ctx, seqs[0].tokens, seqs[0].pos, seqs[0].mask,
                                       seqs[0].n, seqs[0].logits, err);
    else if (!seqs[0].ctx->ops->forward_batch)
        return sq_error_set(err, SQ_EUSAGE, "forward batch: the %s backend has no batched "
                            "forward yet (batch %d; use the CPU backend, or batch 1)",
                            seqs[0].ctx->ops->name, b);
    else
        rc = seqs[0].ctx->ops->forward_batch(seqs, b, err);
    if (rc)
        return rc;
    for (int k = 0; k < b; k++)
        seqs[k].ctx->n_pending += seqs[k].n;
    return SQ_OK;
}

int sq_context_commit(sq_context *ctx, const int32_t *keep, int nkeep, sq_error *err)
{
    const int P = ctx->n_pending;
    if (nkeep < 0 || (nkeep > 0 && !keep))
        return sq_error_set(err, SQ_EUSAGE, "commit: nkeep %d must be >= 0 with a keep array",
                            nkeep);
    if (nkeep > P)
        return sq_error_set(err, SQ_EUSAGE, "commit: keeps %d of only %d pending tokens", nkeep,
                            P);
    if (nkeep > ctx->params.max_context - ctx->n_committed)
        return sq_error_set(err, SQ_EUSAGE, "commit: %d committed + %d kept tokens exceed "
                            "max_context %d", ctx->n_committed, nkeep, ctx->params.max_context);
    for (int k = 0; k < nkeep; k++) {
        if (keep[k] < 0 || keep[k] >= P)
            return sq_error_set(err, SQ_EUSAGE, "commit: keep[%d]: slot %d is not pending "
                                "(0 .. %d)", k, (int)keep[k], P - 1);
        for (int j = 0; j < k; j++)
            if (keep[j] == keep[k])
                return sq_error_set(err, SQ_EUSAGE, "commit: keep[%d]: slot %d kept twice", k,
                                    (int)keep[k]);
    }
    if (nkeep > 0) {
        int rc = ctx->ops->commit(ctx, keep, nkeep, err);
        if (rc)
            return rc;
    }
    ctx->n_committed += nkeep;
    ctx->n_pending = 0;
    return SQ_OK;
}

void sq_context_reset(sq_context *ctx)
{
    ctx->n_committed = 0;
    ctx->n_pending = 0;
}
