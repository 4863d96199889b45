/* Causal prefill and the vocabulary check (prefill.h). */
#include "runtime/prefill.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/backend.h"   /* the context's model and max_pending */

void sq_causal_mask(uint8_t *mask, int n)
{
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++)
            mask[(size_t)i * (size_t)n + (size_t)j] = j <= i;
}

/* sq_forward_causal with the caller's position, keep and mask buffers (n entries, n * n). */
static int forward_causal(sq_context *ctx, const int32_t *tokens, int n, float *logits,
                          int32_t *pos, int32_t *keep, uint8_t *mask, sq_error *err)
{
    const int start = sq_context_committed(ctx);
    for (int i = 0; i < n; i++) {
        pos[i] = start + i;
        keep[i] = i;
    }
    sq_causal_mask(mask, n);
    int rc = sq_context_forward(ctx, tokens, pos, mask, n, logits, err);
    return rc ? rc : sq_context_commit(ctx, keep, n, err);
}

/* SQ_EUSAGE unless ctx has nothing pending. */
static int check_nothing_pending(const sq_context *ctx, sq_error *err)
{
    if (sq_context_pending(ctx) != 0)
        return sq_error_set(err, SQ_EUSAGE, "prefill: the context has %d pending tokens (a "
                            "prefill reads after committed ones only)", sq_context_pending(ctx));
    return SQ_OK;
}

int sq_forward_causal(sq_context *ctx, const int32_t *tokens, int n, float *logits,
                      sq_error *err)
{
    if (n < 1 || n > ctx->params.max_pending)
        return sq_error_set(err, SQ_EUSAGE, "causal forward: %d tokens (1 to max_pending %d)", n,
                            ctx->params.max_pending);
    int rc = check_nothing_pending(ctx, err);
    if (rc)
        return rc;
    int32_t *pos = malloc((size_t)n * sizeof *pos), *keep = malloc((size_t)n * sizeof *keep);
    uint8_t *mask = malloc((size_t)n * (size_t)n);
    if (!pos || !keep || !mask)
        rc = sq_error_oom(err, "causal forward buffers");
    else
        rc = forward_causal(ctx, tokens, n, logits, pos, keep, mask, err);
    free(pos);
    free(keep);
    free(mask);
    return rc;
}

int sq_prefill(sq_context *ctx, const int32_t *tokens, int n, int chunk, float *last,
               sq_error *err)
{
    const int maxp = ctx->params.max_pending;
    if (chunk <= 0 || chunk > maxp)
        chunk = maxp;
    if (n < 0)
        return sq_error_set(err, SQ_EUSAGE, "prefill: needs n >= 0 tokens (got %d)", n);
    int rc = check_nothing_pending(ctx, err);
    if (rc || n == 0)
        return rc;
    const int c = n < chunk ? n : chunk;
    const size_t V = (size_t)ctx->model->config.vocab_size;
    int32_t *pos = malloc((size_t)c * sizeof *pos), *keep = malloc((size_t)c * sizeof *keep);
    uint8_t *mask = malloc((size_t)c * (size_t)c);
    float *logits = malloc((size_t)c * V * sizeof *logits);
    if (!pos || !keep || !mask || !logits) {
        rc = sq_error_oom(err, "prefill buffers");
        goto done;
    }
    int m = 0;   /* tokens of the last chunk */
    for (int off = 0; off < n && !rc; off += m) {
        m = n - off < c ? n - off : c;
        rc = forward_causal(ctx, tokens + off, m, logits, pos, keep, mask, err);
    }
    if (!rc && last)
        memcpy(last, logits + (size_t)(m - 1) * V, V * sizeof *last);
done:
    free(pos);
    free(keep);
    free(mask);
    free(logits);
    return rc;
}

/* The padding rule (prefill.h): the larger vocabulary a multiple of 64 and the gap at most
 * max(128, 1% of it). */
static int padding_gap(int small, int large)
{
    int gap = large - small;
    return large % 64 == 0 && (gap <= 128 || (double)gap * 100.0 <= (double)large);
}

int sq_models_check_vocab(const sq_model *draft, const sq_model *target, const char *draft_dir,
                          const char *target_dir, int tokenizer_len, int *shared, sq_error *err)
{
    int dv = sq_model_get_config(draft)->vocab_size, tv = sq_model_get_config(target)->vocab_size;
    int vs = dv < tv ? dv : tv;
    if (shared)
        *shared = vs;
    if (dv == tv)
        return SQ_OK;
    char dname[4200], tname[4200];
    snprintf(dname, sizeof dname, "%s%s", draft_dir ? draft_dir : "the draft's ",
             draft_dir ? "/config.json" : "config.json");
    snprintf(tname, sizeof tname, "%s%s", target_dir ? target_dir : "the target's ",
             target_dir ? "/config.json" : "config.json");
    if (tokenizer_len > 0) {
        if (tokenizer_len <= vs)
            return SQ_OK;
        return sq_error_set(err, SQ_EDATA, "%s: vocab_size: %d differs from %s's %d and "
                            "%s%s has %d token ids: the rows beyond %d are not padding", dname,
                            dv, tname, tv, target_dir ? target_dir : "the",
                            target_dir ? "/tokenizer.json" : " tokenizer", tokenizer_len, vs);
    }
    if (padding_gap(vs, dv > tv ? dv : tv))
        return SQ_OK;
    return sq_error_set(err, SQ_EDATA, "%s: vocab_size: %d differs from %s's %d by more than "
                        "padding (without a tokenizer.json, the larger must be a multiple of 64 "
                        "and the gap at most max(128, 1%% of it))", dname, dv, tname, tv);
}
