/* The tree verifier (verify.h) on probability vectors; the rule itself is rule.c. */
#include "libsequoia/verify/verify.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <gsl/gsl_errno.h>
#include <gsl/gsl_rng.h>

#include "libsequoia/verify/formulas.h"

struct sq_verifier {
    int        vocab;
    sq_mode    mode;
    gsl_rng   *rng;
    double    *r;       /* (V) residual target distribution          */
    double    *qr;      /* (V) residual draft distribution Q'        */
    double    *keys;    /* (V) Gumbel-top-k and rank keys; nucleus   */
    sq_ranked *heap;    /* (V) top-k scratch                         */
};

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
    v->heap = malloc((size_t)vocab * sizeof *v->heap);
    if (!v->rng || !v->r || !v->qr || !v->keys || !v->heap) {
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
    free(v->heap);
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
    sq_probs_from_logits(logits, v->vocab, temperature, top_p, probs, v->keys);
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
        sq_topk_keys(v->keys, V, k, tokens, v->heap);
        break;
    case SQ_MODE_SPECINFER:
        for (int j = 0; j < k; j++)
            tokens[j] = sq_verifier_sample(v, q);
        break;
    case SQ_MODE_GREEDY:
    case SQ_MODE_TOPK:
        sq_draft_topk(logits, V, k, tokens, v->keys, v->heap);
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
