/* The verification rule (rule.h; docs/estimator.md, "Verification rule"). */
#include "libsequoia/verify/rule.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "libsequoia/base/error.h"
#include "libsequoia/verify/formulas.h"

/* ---- orders ------------------------------------------------------------------------------------ */

int sq_argmax_f(const float *x, int n)
{
    int best = -1;
    for (int i = 0; i < n; i++)
        if (sq_k_argmax_takes(best < 0 ? 0.0f : x[best], best, x[i], i))
            best = i;
    return best < 0 ? 0 : best;
}

int sq_argmax_d(const double *x, int n)
{
    int best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best])
            best = i;
    return best;
}

/* Min-heap on the rank order: the worst kept entry on top. */
static void sift_down(sq_ranked *h, int n, int i)
{
    for (;;) {
        int l = 2 * i + 1, r = l + 1, w = i;
        if (l < n && sq_k_ranks_before(h[w].v, h[w].i, h[l].v, h[l].i))
            w = l;
        if (r < n && sq_k_ranks_before(h[w].v, h[w].i, h[r].v, h[r].i))
            w = r;
        if (w == i)
            return;
        sq_ranked t = h[i];
        h[i] = h[w];
        h[w] = t;
        i = w;
    }
}

void sq_topk_keys(const double *x, int n, int k, int32_t *out, sq_ranked *h)
{
    SQ_ASSERT(k >= 0 && k <= n);
    if (k == 0)
        return;
    for (int i = 0; i < k; i++)
        h[i] = (sq_ranked){x[i], i};
    for (int i = k / 2 - 1; i >= 0; i--)
        sift_down(h, k, i);
    for (int i = k; i < n; i++)
        if (sq_k_ranks_before(x[i], i, h[0].v, h[0].i)) {
            h[0] = (sq_ranked){x[i], i};
            sift_down(h, k, 0);
        }
    /* Take the worst off the top, filling from the back: best first. */
    for (int m = k; m > 0; m--) {
        out[m - 1] = h[0].i;
        h[0] = h[m - 1];
        sift_down(h, m - 1, 0);
    }
}

void sq_topk_d(const double *x, int n, int k, int32_t *out)
{
    sq_ranked *h = malloc((size_t)(k > 0 ? k : 1) * sizeof *h);
    SQ_ASSERT(h);
    sq_topk_keys(x, n, k, out, h);
    free(h);
}

void sq_draft_topk(const float *logits, int V, int k, int32_t *out, double *keys,
                   sq_ranked *heap)
{
    for (int i = 0; i < V; i++)
        keys[i] = sq_k_rank_key(logits[i]);
    sq_topk_keys(keys, V, k, out, heap);
}

/* ---- the distribution -------------------------------------------------------------------------- */

static inline void swap_d(double *a, double *b)
{
    double t = *a;
    *a = *b;
    *b = t;
}

/* tau of the nucleus among the n positive values of v (reordered): the largest value such that
 * the values >= tau reach top_p. Quickselect with a three-way partition: expected O(n) instead
 * of a sort. Each round splits the range around a pivot x into (> x, == x, < x); `above` is
 * the mass of the values already known to be larger than the range. */
static double nucleus_threshold(double *v, int n, double top_p)
{
    double above = 0.0;
    int lo = 0, hi = n;
    while (lo < hi) {
        double a = v[lo], b = v[lo + (hi - lo) / 2], c = v[hi - 1];
        double x = a < b ? (b < c ? b : (a < c ? c : a)) : (a < c ? a : (b < c ? c : b));
        int gt = lo, i = lo, lt = hi;   /* [lo, gt) > x, [gt, i) == x, [lt, hi) < x */
        while (i < lt) {
            if (v[i] > x)
                swap_d(&v[gt++], &v[i++]);
            else if (v[i] < x)
                swap_d(&v[i], &v[--lt]);
            else
                i++;
        }
        double larger = 0.0, equal = 0.0;
        for (int j = lo; j < gt; j++)
            larger += v[j];
        for (int j = gt; j < lt; j++)
            equal += v[j];
        if (sq_k_nucleus_reaches(above + larger, top_p))
            hi = gt;                    /* tau > x */
        else if (sq_k_nucleus_reaches(above + larger + equal, top_p))
            return x;                   /* the tokens >= x reach top_p, those > x do not */
        else {
            above += larger + equal;    /* tau < x */
            lo = lt;
        }
    }
    return 0.0;   /* rounding kept the whole mass below top_p: keep every token */
}

int sq_probs_from_logits(const float *logits, int V, double temperature, double top_p,
                         double *probs, double *scratch)
{
    SQ_ASSERT(V >= 1);
    int best = sq_argmax_f(logits, V);
    if (!(temperature > 0.0)) {
        memset(probs, 0, (size_t)V * sizeof *probs);
        probs[best] = 1.0;
        return 1;
    }
    /* NaN as the maximum: no usable logit, every token weighs 1 */
    float mx = sq_k_logit_usable(logits[best]) ? logits[best] : NAN;
    double sum = 0.0;
    for (int i = 0; i < V; i++) {
        probs[i] = sq_k_softmax_temp(logits[i], mx, temperature);
        sum += probs[i];
    }
    /* sum >= 1: the best token weighs exp(0) = 1 */
    int nz = 0;
    for (int i = 0; i < V; i++) {
        probs[i] /= sum;
        if (probs[i] > 0.0 && top_p < 1.0)
            scratch[nz] = probs[i];
        nz += probs[i] > 0.0;
    }
    if (!(top_p < 1.0))
        return nz;
    double tau = nucleus_threshold(scratch, nz, top_p);
    double kept = 0.0;
    nz = 0;
    for (int i = 0; i < V; i++) {
        if (probs[i] < tau)
            probs[i] = 0.0;
        kept += probs[i];
        nz += probs[i] > 0.0;
    }
    for (int i = 0; i < V; i++)
        probs[i] /= kept;
    return nz;
}
