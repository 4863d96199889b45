/* Verification algorithms of DESIGN.md §4 on probability vectors. */
#include "libsequoia/verify/verify.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <gsl/gsl_errno.h>
#include <gsl/gsl_rng.h>

#include "libsequoia/verify/formulas.h"

typedef struct sq_pair {
    double v;
    int    i;
} sq_pair;

struct sq_verifier {
    int      vocab;
    sq_mode  mode;
    gsl_rng *rng;
    double  *r;       /* (V) residual target distribution          */
    double  *qr;      /* (V) residual draft distribution Q'        */
    double  *keys;    /* (V) Gumbel-top-k keys                      */
    sq_pair *pairs;   /* (V) sort scratch for top-p                 */
};

static const char *const mode_names[] = {"stochastic", "specinfer", "greedy", "topk"};

int sq_mode_parse(const char *name, sq_mode *out)
{
    for (int i = 0; i < 4; i++)
        if (name && strcmp(name, mode_names[i]) == 0) {
            *out = (sq_mode)i;
            return 0;
        }
    return -1;
}

const char *sq_mode_name(sq_mode mode)
{
    return (unsigned)mode < 4 ? mode_names[mode] : "unknown";
}

const char *sq_mode_rank_semantics(sq_mode mode)
{
    switch (mode) {
    case SQ_MODE_STOCHASTIC: return "sampled-without-replacement";
    case SQ_MODE_SPECINFER: return "sampled-with-replacement";
    default: return "draft-topk";
    }
}

int sq_mode_is_sampled(sq_mode mode)
{
    return mode != SQ_MODE_GREEDY;
}

sq_verifier *sq_verifier_new(int vocab, sq_mode mode, uint64_t seed)
{
    SQ_ASSERT(vocab > 0);
    gsl_set_error_handler_off();
    sq_verifier *v = calloc(1, sizeof *v);
    if (!v)
        return NULL;
    v->vocab = vocab;
    v->mode = mode;
    v->rng = gsl_rng_alloc(gsl_rng_mt19937);
    v->r = malloc((size_t)vocab * sizeof *v->r);
    v->qr = malloc((size_t)vocab * sizeof *v->qr);
    v->keys = malloc((size_t)vocab * sizeof *v->keys);
    v->pairs = malloc((size_t)vocab * sizeof *v->pairs);
    if (!v->rng || !v->r || !v->qr || !v->keys || !v->pairs) {
        sq_verifier_free(v);
        return NULL;
    }
    sq_verifier_seed(v, seed);
    return v;
}

void sq_verifier_free(sq_verifier *v)
{
    if (!v)
        return;
    if (v->rng)
        gsl_rng_free(v->rng);
    free(v->r);
    free(v->qr);
    free(v->keys);
    free(v->pairs);
    free(v);
}

sq_mode sq_verifier_mode(const sq_verifier *v)
{
    return v->mode;
}

int sq_verifier_vocab(const sq_verifier *v)
{
    return v->vocab;
}

void sq_verifier_seed(sq_verifier *v, uint64_t seed)
{
    /* mt19937 takes an unsigned long seed; fold the high half in so that every bit counts,
     * and avoid 0, which GSL replaces by its default seed. */
    unsigned long s = (unsigned long)(seed ^ (seed >> 32) * 0x9E3779B9u);
    gsl_rng_set(v->rng, s ? s : 0x5EED);
}

int sq_argmax_f(const float *x, int n)
{
    int best = -1;
    for (int i = 0; i < n; i++)
        if (isfinite(x[i]) && (best < 0 || x[i] > x[best]))
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

/* a ranks before b: larger value, or the same value and a lower index. */
static int ranks_before(double va, int ia, double vb, int ib)
{
    return sq_k_ranks_before(va, ia, vb, ib);
}

/* Min-heap (the worst kept element on top) of k (value, index) pairs. */
static void heap_sift_down(sq_pair *h, int n, int i)
{
    for (;;) {
        int l = 2 * i + 1, r = l + 1, w = i;
        if (l < n && ranks_before(h[w].v, h[w].i, h[l].v, h[l].i))
            w = l;
        if (r < n && ranks_before(h[w].v, h[w].i, h[r].v, h[r].i))
            w = r;
        if (w == i)
            return;
        sq_pair t = h[i];
        h[i] = h[w];
        h[w] = t;
        i = w;
    }
}

static void topk_pairs(const double *x, int n, int k, int32_t *out, sq_pair *h)
{
    SQ_ASSERT(k >= 0 && k <= n);
    if (k == 0)
        return;
    for (int i = 0; i < k; i++)
        h[i] = (sq_pair){x[i], i};
    for (int i = k / 2 - 1; i >= 0; i--)
        heap_sift_down(h, k, i);
    for (int i = k; i < n; i++)
        if (ranks_before(x[i], i, h[0].v, h[0].i)) {
            h[0] = (sq_pair){x[i], i};
            heap_sift_down(h, k, 0);
        }
    /* Pop the worst to the back: the array ends up best first. */
    for (int m = k; m > 0; m--) {
        out[m - 1] = h[0].i;
        h[0] = h[m - 1];
        heap_sift_down(h, m - 1, 0);
    }
}

void sq_topk_d(const double *x, int n, int k, int32_t *out)
{
    sq_pair *h = malloc((size_t)(k > 0 ? k : 1) * sizeof *h);
    SQ_ASSERT(h);
    topk_pairs(x, n, k, out, h);
    free(h);
}

static int cmp_pair_desc(const void *a, const void *b)
{
    const sq_pair *x = a, *y = b;
    if (x->v != y->v)
        return x->v > y->v ? -1 : 1;
    return (x->i > y->i) - (x->i < y->i);
}

static void normalize(double *p, int n)
{
    double s = 0.0;
    for (int i = 0; i < n; i++)
        s += p[i];
    if (s > 0.0)
        for (int i = 0; i < n; i++)
            p[i] /= s;
}

void sq_verifier_probs(sq_verifier *v, const float *logits, double temperature, double top_p,
                       double *probs)
{
    int V = v->vocab;
    int best = -1;
    for (int i = 0; i < V; i++)
        if (isfinite(logits[i]) && (best < 0 || logits[i] > logits[best]))
            best = i;
    if (best < 0 || !(temperature > 0.0)) {
        memset(probs, 0, (size_t)V * sizeof *probs);
        probs[best < 0 ? 0 : best] = 1.0;
        return;
    }
    double mx = logits[best], s = 0.0;
    for (int i = 0; i < V; i++) {
        double e = isfinite(logits[i]) ? exp(((double)logits[i] - mx) / temperature) : 0.0;
        probs[i] = e;
        s += e;
    }
    for (int i = 0; i < V; i++)
        probs[i] /= s;
    if (!(top_p < 1.0))
        return;
    for (int i = 0; i < V; i++)
        v->pairs[i] = (sq_pair){probs[i], i};
    qsort(v->pairs, (size_t)V, sizeof *v->pairs, cmp_pair_desc);
    double cum = 0.0;
    int keep = 0;
    while (keep < V && (keep == 0 || cum < top_p)) {
        cum += v->pairs[keep].v;
        keep++;
    }
    for (int j = keep; j < V; j++)
        probs[v->pairs[j].i] = 0.0;
    normalize(probs, V);
}

int32_t sq_verifier_sample(sq_verifier *v, const double *probs)
{
    int V = v->vocab;
    double s = 0.0;
    for (int i = 0; i < V; i++)
        s += probs[i];
    double u = gsl_rng_uniform(v->rng) * s, c = 0.0;
    int last = 0;
    for (int i = 0; i < V; i++) {
        if (probs[i] > 0.0) {
            c += probs[i];
            last = i;
            if (u < c)
                return i;
        }
    }
    return last;   /* u landed past the rounded total */
}

void sq_verifier_propose(sq_verifier *v, const double *q, const float *logits, int k,
                         int32_t *tokens)
{
    int V = v->vocab;
    SQ_ASSERT(k >= 0);
    if (k == 0)
        return;
    SQ_ASSERT(v->mode == SQ_MODE_SPECINFER || k <= V);
    switch (v->mode) {
    case SQ_MODE_STOCHASTIC:
        /* Gumbel-top-k (Efraimidis-Spirakis): the k largest log(u_i)/q_i are a sample of k
         * tokens drawn from q without replacement. Zero-probability tokens get -inf and come
         * last, in id order. */
        for (int i = 0; i < V; i++)
            v->keys[i] = q[i] > 0.0 ? sq_k_gumbel_key(gsl_rng_uniform_pos(v->rng), q[i]) : -INFINITY;
        topk_pairs(v->keys, V, k, tokens, v->pairs);
        break;
    case SQ_MODE_SPECINFER:
        for (int j = 0; j < k; j++)
            tokens[j] = sq_verifier_sample(v, q);
        break;
    case SQ_MODE_GREEDY:
    case SQ_MODE_TOPK:
        for (int i = 0; i < V; i++)
            v->keys[i] = isfinite(logits[i]) ? (double)logits[i] : -INFINITY;
        topk_pairs(v->keys, V, k, tokens, v->pairs);
        break;
    }
}

/* R <- norm(max(R - Q', 0)); leaves R as it is when nothing remains (R <= Q' everywhere
 * means R == Q' up to rounding, in which case the candidate was accepted w.p. 1 anyway). */
static void residual_update(double *r, const double *qr, int n)
{
    double s = 0.0;
    for (int i = 0; i < n; i++)
        s += sq_k_residual(r[i], qr[i]);
    if (!(s > 1e-300))
        return;
    for (int i = 0; i < n; i++)
        r[i] = sq_k_residual(r[i], qr[i]) / s;
}

int sq_verifier_node(sq_verifier *v, const double *p, const double *q, const int32_t *tokens,
                     int k, int32_t *bonus)
{
    int V = v->vocab;
    if (v->mode == SQ_MODE_GREEDY || v->mode == SQ_MODE_TOPK) {
        int32_t y = v->mode == SQ_MODE_GREEDY ? sq_argmax_d(p, V) : sq_verifier_sample(v, p);
        for (int j = 0; j < k; j++)
            if (tokens[j] == y)
                return j;
        *bonus = y;
        return -1;
    }
    int without = v->mode == SQ_MODE_STOCHASTIC;
    memcpy(v->r, p, (size_t)V * sizeof *v->r);
    if (k > 0)
        memcpy(v->qr, q, (size_t)V * sizeof *v->qr);
    for (int j = 0; j < k; j++) {
        int32_t x = tokens[j];
        SQ_ASSERT(x >= 0 && x < V);
        if (!(v->qr[x] > 0.0))
            continue;   /* not a draw from Q' (past Q's support): skip deterministically */
        double a = v->r[x] / v->qr[x];
        if (gsl_rng_uniform(v->rng) < a)
            return j;
        residual_update(v->r, v->qr, V);
        if (without) {
            v->qr[x] = 0.0;
            normalize(v->qr, V);   /* all zero once Q's support is exhausted */
        }
    }
    *bonus = sq_verifier_sample(v, v->r);
    return -1;
}
