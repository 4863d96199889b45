#include "profiler/measure.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

sq_measure_params sq_measure_default_params(void)
{
    return (sq_measure_params){.warmup = 2, .repeat = 10, .prefix = 512, .refine = 1,
                               .bend_tol = 0.10, .max_points = 48, .unstable = 0.25, .seed = 1};
}

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double sq_quantile(double *v, int n, double p)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    if (n == 1)
        return v[0];
    double pos = p * (n - 1);
    int lo = (int)floor(pos);
    if (lo >= n - 1)
        return v[n - 1];
    return v[lo] + (pos - lo) * (v[lo + 1] - v[lo]);
}

static unsigned next_token(unsigned *s, int vocab)
{
    *s = *s * 1103515245u + 12345u;
    return (*s >> 8) % (unsigned)vocab;
}

int sq_measure_prefill(sq_context *ctx, int vocab, const sq_measure_params *prm, sq_error *err)
{
    unsigned s = prm->seed;
    int chunk = 64;
    int32_t tok[64], pos[64];
    uint8_t mask[64 * 64];
    for (int start = sq_context_committed(ctx); start < prm->prefix; start += chunk) {
        int n = prm->prefix - start < chunk ? prm->prefix - start : chunk;
        for (int i = 0; i < n; i++) {
            tok[i] = (int32_t)next_token(&s, vocab);
            pos[i] = start + i;
            for (int j = 0; j < n; j++)
                mask[i * n + j] = j <= i;
        }
        float *logits = malloc((size_t)n * (size_t)vocab * sizeof *logits);
        if (!logits)
            return sq_error_oom(err, "logits");
        int rc = sq_context_forward(ctx, tok, pos, mask, n, logits, err);
        free(logits);
        if (rc)
            return rc;
        int32_t keep[64];
        for (int i = 0; i < n; i++)
            keep[i] = i;
        if ((rc = sq_context_commit(ctx, keep, n, err)))
            return rc;
    }
    return SQ_OK;
}

int sq_measure_point(sq_context *ctx, int vocab, int n, const sq_measure_params *prm,
                     sq_profile_point *out, sq_error *err)
{
    int32_t *tok = malloc((size_t)n * sizeof *tok), *pos = malloc((size_t)n * sizeof *pos);
    uint8_t *mask = malloc((size_t)n * (size_t)n);
    float *logits = malloc((size_t)n * (size_t)vocab * sizeof *logits);
    double *t = malloc((size_t)(prm->repeat > 0 ? prm->repeat : 1) * sizeof *t);
    int rc = SQ_OK;
    if (!tok || !pos || !mask || !logits || !t) {
        rc = sq_error_oom(err, "a measurement");
        goto done;
    }
    unsigned s = prm->seed * 7919u + (unsigned)n;
    int base = sq_context_committed(ctx);
    for (int i = 0; i < n; i++) {
        tok[i] = (int32_t)next_token(&s, vocab);
        pos[i] = base + i;
        for (int j = 0; j < n; j++)
            mask[(size_t)i * (size_t)n + (size_t)j] = j <= i;
    }
    for (int r = 0; r < prm->warmup + prm->repeat; r++) {
        double t0 = now_ms();
        if ((rc = sq_context_forward(ctx, tok, pos, mask, n, logits, err)))
            goto done;
        double dt = now_ms() - t0;
        if ((rc = sq_context_commit(ctx, NULL, 0, err)))
            goto done;
        if (r >= prm->warmup)
            t[r - prm->warmup] = dt;
    }
    out->batch = 1;
    out->tokens = n;
    out->samples = prm->repeat;
    out->p10_ms = sq_quantile(t, prm->repeat, 0.10);
    out->median_ms = sq_quantile(t, prm->repeat, 0.50);
    out->p90_ms = sq_quantile(t, prm->repeat, 0.90);
done:
    free(tok);
    free(pos);
    free(mask);
    free(logits);
    free(t);
    return rc;
}

int sq_measure_point_batch(sq_context *const *ctxs, int b, int vocab, int n,
                           const sq_measure_params *prm, sq_profile_point *out, sq_error *err)
{
    size_t nb = (size_t)b * (size_t)n;
    int32_t *tok = malloc(nb * sizeof *tok), *pos = malloc(nb * sizeof *pos);
    uint8_t *mask = malloc((size_t)n * (size_t)n);
    float *logits = malloc(nb * (size_t)vocab * sizeof *logits);
    double *t = malloc((size_t)(prm->repeat > 0 ? prm->repeat : 1) * sizeof *t);
    sq_batch_seq *seqs = malloc((size_t)b * sizeof *seqs);
    int rc = SQ_OK;
    if (!tok || !pos || !mask || !logits || !t || !seqs) {
        rc = sq_error_oom(err, "a measurement");
        goto done;
    }
    unsigned s = prm->seed * 7919u + (unsigned)n;
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++)
            mask[(size_t)i * (size_t)n + (size_t)j] = j <= i;
    for (int k = 0; k < b; k++) {
        int base = sq_context_committed(ctxs[k]);
        for (int i = 0; i < n; i++) {
            tok[(size_t)k * n + i] = (int32_t)next_token(&s, vocab);
            pos[(size_t)k * n + i] = base + i;
        }
        seqs[k] = (sq_batch_seq){ctxs[k], tok + (size_t)k * n, pos + (size_t)k * n, mask, n,
                                 logits + (size_t)k * n * (size_t)vocab};
    }
    for (int r = 0; r < prm->warmup + prm->repeat; r++) {
        double t0 = now_ms();
        if ((rc = sq_context_forward_batch(seqs, b, err)))
            goto done;
        double dt = now_ms() - t0;
        for (int k = 0; k < b; k++)
            if ((rc = sq_context_commit(ctxs[k], NULL, 0, err)))
                goto done;
        if (r >= prm->warmup)
            t[r - prm->warmup] = dt;
    }
    out->batch = b;
    out->tokens = n;
    out->samples = prm->repeat;
    out->p10_ms = sq_quantile(t, prm->repeat, 0.10);
    out->median_ms = sq_quantile(t, prm->repeat, 0.50);
    out->p90_ms = sq_quantile(t, prm->repeat, 0.90);
done:
    free(tok);
    free(pos);
    free(mask);
    free(logits);
    free(t);
    free(seqs);
    return rc;
}

static int measure_at(sq_context *const *ctxs, int b, int vocab, int n,
                      const sq_measure_params *prm, sq_profile_point *out, sq_error *err)
{
    return b == 1 ? sq_measure_point(ctxs[0], vocab, n, prm, out, err)
                  : sq_measure_point_batch(ctxs, b, vocab, n, prm, out, err);
}

static int insert_point(sq_profile_point *pts, int *n, sq_profile_point p)
{
    int i = *n;
    while (i > 0 && pts[i - 1].tokens > p.tokens) {
        pts[i] = pts[i - 1];
        i--;
    }
    pts[i] = p;
    (*n)++;
    return i;
}

int sq_measure_sweep(sq_context *ctx, int vocab, const int *tokens, int ntokens,
                     const sq_measure_params *prm, sq_measure_progress progress, void *user,
                     sq_profile_point **out, int *nout, sq_error *err)
{
    return sq_measure_sweep_batch(&ctx, 1, vocab, tokens, ntokens, prm, progress, user, out, nout,
                                  err);
}

int sq_measure_sweep_batch(sq_context *const *ctxs, int b, int vocab, const int *tokens,
                           int ntokens, const sq_measure_params *prm,
                           sq_measure_progress progress, void *user, sq_profile_point **out,
                           int *nout, sq_error *err)
{
    *out = NULL;
    *nout = 0;
    int cap = ntokens + (prm->refine ? prm->max_points : 0) + 1;
    sq_profile_point *pts = calloc((size_t)cap, sizeof *pts);
    if (!pts)
        return sq_error_oom(err, "points");
    int n = 0, rc;
    int total = ntokens + (prm->refine ? ntokens - 1 : 0); /* a guess for the progress line */
    for (int i = 0; i < ntokens; i++) {
        if (progress)
            progress(user, n, total, tokens[i]);
        sq_profile_point p;
        if ((rc = measure_at(ctxs, b, vocab, tokens[i], prm, &p, err)))
            goto fail;
        insert_point(pts, &n, p);
    }
    if (prm->refine && ntokens > 1) {
        /* Bisect segments whose midpoint is off the straight line by more than bend_tol; a
         * bent segment has both halves examined in turn. */
        typedef struct { int a, b; } segment;
        int scap = 2 * (ntokens + prm->max_points) + 2, top = 0;
        segment *stack = malloc((size_t)scap * sizeof *stack);
        if (!stack) {
            rc = sq_error_oom(err, "segments");
            goto fail;
        }
        for (int i = ntokens - 1; i >= 1; i--)
            stack[top++] = (segment){tokens[i - 1], tokens[i]};
        while (top > 0 && n < prm->max_points) {
            segment sg = stack[--top];
            if (sg.b - sg.a < 2)
                continue;
            double ta = 0, tb = 0;
            for (int i = 0; i < n; i++) {
                if (pts[i].tokens == sg.a)
                    ta = pts[i].median_ms;
                if (pts[i].tokens == sg.b)
                    tb = pts[i].median_ms;
            }
            int mid = sg.a + (sg.b - sg.a) / 2;
            double line = ta + (tb - ta) * (mid - sg.a) / (double)(sg.b - sg.a);
            if (progress)
                progress(user, n, n + top + 1 > total ? n + top + 1 : total, mid);
            sq_profile_point p;
            if ((rc = measure_at(ctxs, b, vocab, mid, prm, &p, err))) {
                free(stack);
                goto fail;
            }
            insert_point(pts, &n, p);
            /* a bend must also stand out of the midpoint's own noise (its p10-p90 spread) */
            double noise = p.p90_ms - p.p10_ms;
            double gap = fabs(p.median_ms - line);
            if (gap > prm->bend_tol * line && gap > noise && top + 2 <= scap) {
                stack[top++] = (segment){mid, sg.b};
                stack[top++] = (segment){sg.a, mid};
            }
        }
        free(stack);
    }
    if (progress)
        progress(user, n, n, 0);
    *out = pts;
    *nout = n;
    return SQ_OK;
fail:
    free(pts);
    return rc;
}
