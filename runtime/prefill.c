/* Causal prefill and the vocabulary check (prefill.h). */
#include "runtime/prefill.h"

#include <stdlib.h>
#include <string.h>

#include "runtime/backend.h"   /* the context's model and max_pending */

void sq_causal_mask(uint8_t *mask, int n)
{
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++)
            mask[(size_t)i * (size_t)n + (size_t)j] = j <= i;
}

int sq_prefill(sq_context *ctx, const int32_t *tokens, int n, int chunk, float *last,
               sq_error *err)
{
    const int maxp = ctx->params.max_pending;
    if (chunk <= 0 || chunk > maxp)
        chunk = maxp;
    if (n < 0)
        return sq_error_set(err, SQ_EUSAGE, "prefill: needs n >= 0 tokens (got %d)", n);
    if (sq_context_pending(ctx) != 0)
        return sq_error_set(err, SQ_EUSAGE, "prefill: the context has %d pending tokens (a "
                            "prefill reads after committed ones only)", sq_context_pending(ctx));
    if (n == 0)
        return SQ_OK;
    const int c = n < chunk ? n : chunk;
    const size_t V = (size_t)ctx->model->config.vocab_size;
    int32_t *pos = malloc((size_t)c * sizeof *pos), *keep = malloc((size_t)c * sizeof *keep);
    uint8_t *mask = malloc((size_t)c * (size_t)c);
    float *logits = malloc((size_t)c * V * sizeof *logits);
    int rc = SQ_OK;
    if (!pos || !keep || !mask || !logits) {
        rc = sq_error_oom(err, "prefill buffers");
        goto done;
    }
    const int start = sq_context_committed(ctx);
    int m = 0;   /* tokens of the last chunk */
    for (int off = 0; off < n && !rc; off += m) {
        m = n - off < c ? n - off : c;
        for (int i = 0; i < m; i++) {
            pos[i] = start + off + i;
            keep[i] = i;
        }
        sq_causal_mask(mask, m);
        rc = sq_context_forward(ctx, tokens + off, pos, mask, m, logits, err);
        if (!rc)
            rc = sq_context_commit(ctx, keep, m, err);
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

int sq_models_check_vocab(const sq_model *draft, const sq_model *target, const char *draft_dir,
                          const char *target_dir, sq_error *err)
{
    int dv = sq_model_get_config(draft)->vocab_size, tv = sq_model_get_config(target)->vocab_size;
    if (dv == tv)
        return SQ_OK;
    return sq_error_set(err, SQ_EDATA, "%s%s: vocab_size: %d differs from the target's %d%s%s%s",
                        draft_dir ? draft_dir : "the draft's ", draft_dir ? "/config.json" :
                        "config.json", dv, tv, target_dir ? " (" : "",
                        target_dir ? target_dir : "", target_dir ? ")" : "");
}
