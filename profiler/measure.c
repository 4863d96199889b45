#include "profiler/measure.h"

#include "libsequoia/base/stats.h"
#include "runtime/prefill.h"

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

static unsigned next_token(unsigned *s, int vocab)
{
    *s = *s * 1103515245u + 12345u;
    return (*s >> 8) % (unsigned)vocab;
}

int sq_measure_prefill(sq_context *ctx, int vocab, const sq_measure_params *prm, sq_error *err)
{
    int start = sq_context_committed(ctx), n = prm->prefix - start;
    if (n <= 0)
        return SQ_OK;
    int32_t *tok = malloc((size_t)n * sizeof *tok);
    if (!tok)
        return sq_error_oom(err, "prefix tokens");
    unsigned s = prm->seed;
    for (int i = 0; i < n; i++)
        tok[i] = (int32_t)next_token(&s, vocab);
    int rc = sq_prefill(ctx, tok, n, 64, NULL, err);
    free(tok);
    return rc;
}

/* The inputs of one point of a set: n chain tokens per sequence, their positions and the causal
 * mask, and the b sequences of the batched forward. */
typedef struct point_inputs {
    int32_t      *tok, *pos;   /* (b, n) */
    uint8_t      *mask;        /* (n, n) */
    sq_batch_seq *seqs;        /* (b)    */
    double       *t;           /* (repeat) timed samples */
} point_inputs;

static void inputs_free(point_inputs *in)
{
    free(in->tok);
    free(in->pos);
    free(in->mask);
    free(in->seqs);
    free(in->t);
}

static int inputs_make(sq_context *const *ctxs, int b, int vocab, int n, float *logits,
                       const sq_measure_params *prm, point_inputs *in, sq_error *err)
{
    size_t nb = (size_t)b * (size_t)n;
    in->tok = malloc(nb * sizeof *in->tok);
    in->pos = malloc(nb * sizeof *in->pos);
    in->mask = malloc((size_t)n * (size_t)n);
    in->seqs = malloc((size_t)b * sizeof *in->seqs);
    in->t = malloc((size_t)(prm->repeat > 0 ? prm->repeat : 1) * sizeof *in->t);
    if (!in->tok || !in->pos || !in->mask || !in->seqs || !in->t)
        return sq_error_oom(err, "a measurement");
    unsigned s = prm->seed * 7919u + (unsigned)n;
    sq_causal_mask(in->mask, n);
    for (int k = 0; k < b; k++) {
        int base = sq_context_committed(ctxs[k]);
        for (int i = 0; i < n; i++) {
            in->tok[(size_t)k * n + i] = (int32_t)next_token(&s, vocab);
            in->pos[(size_t)k * n + i] = base + i;
        }
        in->seqs[k] = (sq_batch_seq){ctxs[k], in->tok + (size_t)k * n, in->pos + (size_t)k * n,
                                     in->mask, n, logits + (size_t)k * n * (size_t)vocab};
    }
    return SQ_OK;
}

/* One forward of the point (b = 1: the plain forward), timed; the pending tokens are dropped. */
static int forward_once(const point_inputs *in, int b, double *ms, sq_error *err)
{
    const sq_batch_seq *q = in->seqs;
    double t0 = now_ms();
    int rc = b == 1 ? sq_context_forward(q->ctx, q->tokens, q->pos, q->mask, q->n, q->logits, err)
                    : sq_context_forward_batch(in->seqs, b, err);
    *ms = now_ms() - t0;
    for (int k = 0; k < b && !rc; k++)
        rc = sq_context_commit(in->seqs[k].ctx, NULL, 0, err);
    return rc;
}

int sq_measure_points(sq_context *const *ctxs, int b, int vocab, const int *ns, int count,
                      const sq_measure_params *prm, sq_measure_progress progress, void *user,
                      int done, int total, sq_profile_point *out, sq_error *err)
{
    int maxn = 0;
    for (int i = 0; i < count; i++)
        maxn = ns[i] > maxn ? ns[i] : maxn;
    float *logits = malloc((size_t)b * (size_t)maxn * (size_t)vocab * sizeof *logits);
    point_inputs *in = count > 0 ? calloc((size_t)count, sizeof *in) : NULL;
    int rc = SQ_OK;
    if (count <= 0)
        goto done;
    if (!logits || !in) {
        rc = sq_error_oom(err, "a measurement");
        goto done;
    }
    for (int i = 0; i < count && !rc; i++)
        rc = inputs_make(ctxs, b, vocab, ns[i], logits, prm, &in[i], err);
    /* Round r visits every point once, starting at point r mod count: `warmup` untimed
     * forwards, and more until SQ_MEASURE_WARMUP_MS have passed, then the next SQ_MEASURE_BLOCK
     * of its timed ones, back to back. A forward right after other work (a larger forward,
     * another process, an idle spell) runs slower than in a steady stream of forwards, the way a
     * decoding runs them: on this project's 2-core VM, 4 one-token forwards of a batch of 4 took
     * 9 ms each right after a 256-row forward and 4.5 ms from about 70 ms later on
     * (docs/design.md §7.3). The untimed forwards take up that transition, and the rounds
     * spread a slow spell of the machine over all points. */
    const int rounds = (prm->repeat + SQ_MEASURE_BLOCK - 1) / SQ_MEASURE_BLOCK;
    double ms;
    for (int r = 0; r < rounds && !rc; r++) {
        if (progress)
            progress(user, done + (int)((long long)count * r / rounds), total, ns[r % count]);
        for (int c = 0; c < count && !rc; c++) {
            int i = (r + c) % count;
            double t0 = now_ms();
            for (int w = 0; !rc && (w < prm->warmup || now_ms() - t0 < SQ_MEASURE_WARMUP_MS); w++)
                rc = forward_once(&in[i], b, &ms, err);
            for (int k = r * SQ_MEASURE_BLOCK; k < (r + 1) * SQ_MEASURE_BLOCK && k < prm->repeat &&
                 !rc; k++)
                rc = forward_once(&in[i], b, &in[i].t[k], err);
        }
    }
    for (int i = 0; i < count && !rc; i++)
        out[i] = (sq_profile_point){.batch = b, .tokens = ns[i], .samples = prm->repeat,
                                    .p10_ms = sq_quantile(in[i].t, prm->repeat, 0.10),
                                    .median_ms = sq_quantile(in[i].t, prm->repeat, 0.50),
                                    .p90_ms = sq_quantile(in[i].t, prm->repeat, 0.90)};
done:
    for (int i = 0; in && i < count; i++)
        inputs_free(&in[i]);
    free(in);
    free(logits);
    return rc;
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

int sq_measure_sweep_batch(sq_context *const *ctxs, int b, int vocab, const int *tokens,
                           int ntokens, const sq_measure_params *prm,
                           sq_measure_progress progress, void *user, sq_profile_point **out,
                           int *nout, sq_error *err)
{
    *out = NULL;
    *nout = 0;
    int cap = ntokens + (prm->refine ? prm->max_points : 0) + 1;
    sq_profile_point *pts = calloc((size_t)cap, sizeof *pts);
    sq_profile_point *got = calloc((size_t)cap, sizeof *got);
    /* segments still to examine: this generation's and the next's */
    typedef struct { int a, b; } segment;
    int scap = 2 * cap + 2;
    segment *seg = malloc((size_t)scap * sizeof *seg), *next = malloc((size_t)scap * sizeof *next);
    int *mids = malloc((size_t)cap * sizeof *mids);
    int n = 0, rc;
    int total = ntokens + (prm->refine ? ntokens - 1 : 0); /* a guess for the progress line */
    if (!pts || !got || !seg || !next || !mids) {
        rc = sq_error_oom(err, "points");
        goto fail;
    }
    if ((rc = sq_measure_points(ctxs, b, vocab, tokens, ntokens, prm, progress, user, 0, total,
                                got, err)))
        goto fail;
    for (int i = 0; i < ntokens; i++)
        insert_point(pts, &n, got[i]);
    int nseg = 0;
    if (prm->refine)
        for (int i = 1; i < ntokens; i++)
            seg[nseg++] = (segment){tokens[i - 1], tokens[i]};
    /* Refinement in generations: the midpoints of every pending segment are timed together as
     * one set, then a segment whose midpoint is off the straight line by more than bend_tol
     * (and by more than the midpoint's own p10-p90 spread) has both halves examined in the next
     * generation. */
    while (nseg > 0 && n < prm->max_points) {
        int nm = 0, nnext = 0;
        for (int s = 0; s < nseg && n + nm < prm->max_points; s++)
            if (seg[s].b - seg[s].a >= 2)
                seg[nm] = seg[s], mids[nm] = seg[s].a + (seg[s].b - seg[s].a) / 2, nm++;
        if (nm == 0)
            break;
        if (total < n + nm)
            total = n + nm;
        if ((rc = sq_measure_points(ctxs, b, vocab, mids, nm, prm, progress, user, n, total, got,
                                    err)))
            goto fail;
        for (int s = 0; s < nm; s++) {
            double ta = 0, tb = 0;
            for (int i = 0; i < n; i++) {
                if (pts[i].tokens == seg[s].a)
                    ta = pts[i].median_ms;
                if (pts[i].tokens == seg[s].b)
                    tb = pts[i].median_ms;
            }
            double line = ta + (tb - ta) * (mids[s] - seg[s].a) / (double)(seg[s].b - seg[s].a);
            double noise = got[s].p90_ms - got[s].p10_ms, gap = fabs(got[s].median_ms - line);
            if (gap > prm->bend_tol * line && gap > noise && nnext + 2 <= scap) {
                next[nnext++] = (segment){seg[s].a, mids[s]};
                next[nnext++] = (segment){mids[s], seg[s].b};
            }
        }
        for (int s = 0; s < nm; s++)
            insert_point(pts, &n, got[s]);
        segment *tmp = seg;
        seg = next, next = tmp, nseg = nnext;
    }
    if (progress)
        progress(user, n, n, 0);
    free(got);
    free(seg);
    free(next);
    free(mids);
    *out = pts;
    *nout = n;
    return SQ_OK;
fail:
    free(pts);
    free(got);
    free(seg);
    free(next);
    free(mids);
    return rc;
}
