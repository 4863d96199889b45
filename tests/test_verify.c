/* Verification algorithms (docs/design.md §5) on synthetic distributions, without any model.
 *
 * The models are Markov chains over a small vocabulary: the target's and the draft's logits at a
 * node depend only on the node's token. A speculation step grows a fixed tree, the verifier walks
 * it, and steps repeat until two tokens came out. Losslessness means the pair (first, second)
 * is distributed as P(a | root) P(b | a): checked with a chi-square goodness-of-fit test that
 * fails when the p-value is below 0.001 (fixed seeds, so the outcome is reproducible). */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <gsl/gsl_randist.h>
#include <gsl/gsl_rng.h>

#include "libsequoia/base/stats.h"
#include "libsequoia/verify/verify.h"

#define V 6
#define P_MIN 0.001   /* fail a goodness-of-fit test below this p-value */

static float tgt_logits[V][V], dft_logits[V][V];

static void make_models(unsigned long seed)
{
    gsl_rng *r = gsl_rng_alloc(gsl_rng_mt19937);
    gsl_rng_set(r, seed);
    for (int a = 0; a < V; a++)
        for (int b = 0; b < V; b++) {
            tgt_logits[a][b] = (float)(3.0 * gsl_rng_uniform(r) - 1.5);
            /* the draft is a perturbed target: correlated but clearly different */
            dft_logits[a][b] = tgt_logits[a][b] + (float)(2.0 * gsl_rng_uniform(r) - 1.0);
        }
    gsl_rng_free(r);
}

/* A 3-level tree: the root has 3 children, which have 2, 1 and 0 children. */
static const int tree_parent[] = {-1, 0, 0, 0, 1, 1, 2};
#define TREE_N 7

typedef struct walk_cfg {
    sq_mode mode;
    double  temperature;
    double  top_p;
} walk_cfg;

/* One speculation step from `root`; writes the produced tokens to out, returns how many. */
static int spec_step(sq_verifier *v, const walk_cfg *c, int root, int32_t *out)
{
    int32_t tok[TREE_N];
    double q[TREE_N][V];
    tok[0] = root;
    /* draft: children of each node, in node order (parents come first) */
    for (int u = 0; u < TREE_N; u++) {
        int kids = 0, first = -1;
        for (int w = u + 1; w < TREE_N; w++)
            if (tree_parent[w] == u) {
                if (first < 0)
                    first = w;
                kids++;
            }
        sq_verifier_probs(v, dft_logits[tok[u]], c->temperature, c->top_p, q[u]);
        if (kids)
            sq_verifier_propose(v, q[u], dft_logits[tok[u]], kids, tok + first);
    }
    /* verify from the root */
    int n = 0, u = 0;
    for (;;) {
        double p[V];
        sq_verifier_probs(v, tgt_logits[tok[u]], c->temperature, c->top_p, p);
        int kids = 0, first = -1;
        for (int w = u + 1; w < TREE_N; w++)
            if (tree_parent[w] == u) {
                if (first < 0)
                    first = w;
                kids++;
            }
        int32_t bonus;
        int j = sq_verifier_node(v, p, q[u], kids ? tok + first : NULL, kids, &bonus);
        if (j < 0) {
            out[n++] = bonus;
            return n;
        }
        u = first + j;
        out[n++] = tok[u];
    }
}

static void run_lossless(const walk_cfg *c, int trials, unsigned long seed)
{
    make_models(seed);
    sq_verifier *v = sq_verifier_new(V, c->mode, seed * 7 + 1);
    cr_assert_not_null(v);
    const int root = 2;
    double counts[V * V] = {0}, probs[V * V];
    double p0[V], p1[V];
    sq_verifier_probs(v, tgt_logits[root], c->temperature, c->top_p, p0);
    for (int a = 0; a < V; a++) {
        sq_verifier_probs(v, tgt_logits[a], c->temperature, c->top_p, p1);
        for (int b = 0; b < V; b++)
            probs[a * V + b] = p0[a] * p1[b];
    }
    long steps = 0, produced = 0;
    for (int t = 0; t < trials; t++) {
        int32_t seq[16];
        int n = 0;
        while (n < 2) {
            int32_t out[TREE_N + 1];
            int m = spec_step(v, c, n ? seq[n - 1] : root, out);
            steps++;
            produced += m;
            for (int i = 0; i < m && n < 16; i++)
                seq[n++] = out[i];
        }
        counts[seq[0] * V + seq[1]] += 1;
    }
    sq_chisq r = sq_chisq_gof(counts, probs, V * V, 5.0);
    cr_log_info("%s T=%.2f top_p=%.2f: X2=%.2f df=%d p=%.4f (%.3f tokens/step)",
                sq_mode_name(c->mode), c->temperature, c->top_p, r.stat, r.df, r.p_value,
                (double)produced / (double)steps);
    cr_assert_geq(r.p_value, P_MIN,
                  "%s at T=%.2f top_p=%.2f: output pairs differ from the target's: X2=%.2f df=%d "
                  "p=%.2g", sq_mode_name(c->mode), c->temperature, c->top_p, r.stat, r.df,
                  r.p_value);
    cr_assert_gt(r.df, 5, "enough bins for the test to mean something");
    sq_verifier_free(v);
}

ParameterizedTestParameters(verify, lossless_over_a_tree)
{
    static walk_cfg cfgs[] = {
        {SQ_MODE_STOCHASTIC, 1.0, 1.0}, {SQ_MODE_STOCHASTIC, 0.3, 1.0},
        {SQ_MODE_STOCHASTIC, 2.0, 1.0}, {SQ_MODE_STOCHASTIC, 1.0, 0.8},
        {SQ_MODE_SPECINFER, 1.0, 1.0},  {SQ_MODE_SPECINFER, 0.3, 1.0},
        {SQ_MODE_SPECINFER, 2.0, 1.0},  {SQ_MODE_SPECINFER, 1.0, 0.8},
        {SQ_MODE_TOPK, 1.0, 1.0},       {SQ_MODE_TOPK, 0.3, 1.0},
    };
    return cr_make_param_array(walk_cfg, cfgs, sizeof cfgs / sizeof *cfgs);
}

ParameterizedTest(walk_cfg *c, verify, lossless_over_a_tree)
{
    run_lossless(c, 40000, 11);
}

/* The test above must be able to fail: the same statistic on draft samples rejects. */
Test(verify, chi_square_detects_the_draft_distribution)
{
    make_models(11);
    sq_verifier *v = sq_verifier_new(V, SQ_MODE_SPECINFER, 5);
    double p[V], q[V], counts[V] = {0};
    sq_verifier_probs(v, tgt_logits[2], 1.0, 1.0, p);
    sq_verifier_probs(v, dft_logits[2], 1.0, 1.0, q);
    for (int t = 0; t < 40000; t++)
        counts[sq_verifier_sample(v, q)] += 1;
    sq_chisq r = sq_chisq_gof(counts, p, V, 5.0);
    cr_assert_lt(r.p_value, P_MIN, "draft samples pass as target samples: p=%g", r.p_value);
    r = sq_chisq_gof(counts, q, V, 5.0);
    cr_assert_geq(r.p_value, P_MIN, "draft samples fit the draft: p=%g", r.p_value);
    sq_verifier_free(v);
}

Test(verify, a_verifier_that_ignores_the_residual_is_caught)
{
    /* Accepting x ~ Q w.p. min(1, P/Q) but then sampling the bonus from P (not the residual)
     * is biased; the chi-square statistic must see it. */
    make_models(11);
    sq_verifier *v = sq_verifier_new(V, SQ_MODE_SPECINFER, 9);
    double p[V], q[V], counts[V] = {0};
    sq_verifier_probs(v, tgt_logits[2], 1.0, 1.0, p);
    sq_verifier_probs(v, dft_logits[2], 1.0, 1.0, q);
    gsl_rng *r = gsl_rng_alloc(gsl_rng_mt19937);
    for (int t = 0; t < 40000; t++) {
        int32_t x = sq_verifier_sample(v, q);
        if (gsl_rng_uniform(r) < p[x] / q[x])
            counts[x] += 1;
        else
            counts[sq_verifier_sample(v, p)] += 1;
    }
    gsl_rng_free(r);
    sq_chisq c = sq_chisq_gof(counts, p, V, 5.0);
    cr_assert_lt(c.p_value, P_MIN, "biased verifier not detected: p=%g", c.p_value);
    sq_verifier_free(v);
}

Test(verify, greedy_accepts_exactly_the_target_argmax)
{
    gsl_rng *r = gsl_rng_alloc(gsl_rng_mt19937);
    sq_verifier *v = sq_verifier_new(50, SQ_MODE_GREEDY, 1);
    float tl[50], dl[50];
    double p[50], q[50];
    for (int t = 0; t < 500; t++) {
        for (int i = 0; i < 50; i++) {
            tl[i] = (float)gsl_ran_ugaussian(r);
            dl[i] = tl[i] + (float)gsl_ran_ugaussian(r);
        }
        sq_verifier_probs(v, tl, 0.0, 1.0, p);
        sq_verifier_probs(v, dl, 0.0, 1.0, q);
        int am = sq_argmax_f(tl, 50);
        cr_assert_eq(p[am], 1.0);
        int k = 1 + t % 6;
        int32_t kids[6];
        sq_verifier_propose(v, q, dl, k, kids);
        for (int j = 0; j < k; j++) {
            cr_assert_geq(dl[kids[j]], dl[kids[j + 1 < k ? j + 1 : j]], "top-k in order");
            for (int i = 0; i < 50; i++) {
                int before = 0;
                for (int jj = 0; jj < j; jj++)
                    before |= kids[jj] == i;
                if (!before && i != kids[j])
                    cr_assert_leq(dl[i], dl[kids[j]], "rank %d is the %d-th largest", j, j + 1);
            }
        }
        int32_t bonus = -1;
        int acc = sq_verifier_node(v, p, q, kids, k, &bonus);
        int where = -1;
        for (int j = 0; j < k; j++)
            if (kids[j] == am)
                where = j;
        cr_assert_eq(acc, where);
        if (acc < 0)
            cr_assert_eq(bonus, am);
    }
    sq_verifier_free(v);
    gsl_rng_free(r);
}

Test(verify, sampling_without_replacement_never_repeats)
{
    enum { W = 40 };
    sq_verifier *v = sq_verifier_new(W, SQ_MODE_STOCHASTIC, 3);
    double q[W];
    float l[W];
    gsl_rng *r = gsl_rng_alloc(gsl_rng_mt19937);
    for (int t = 0; t < 300; t++) {
        for (int i = 0; i < W; i++)
            l[i] = (float)(3 * gsl_ran_ugaussian(r));
        /* top-p leaves part of the vocabulary with probability 0: k may exceed the support */
        sq_verifier_probs(v, l, 0.5 + gsl_rng_uniform(r), t % 2 ? 0.7 : 1.0, q);
        int k = 1 + (int)gsl_rng_uniform_int(r, W);
        int32_t kids[W];
        sq_verifier_propose(v, q, l, k, kids);
        int seen[W] = {0}, support = 0;
        for (int i = 0; i < W; i++)
            support += q[i] > 0;
        for (int j = 0; j < k; j++) {
            cr_assert(kids[j] >= 0 && kids[j] < W);
            cr_assert_eq(seen[kids[j]], 0, "token %d proposed twice", kids[j]);
            seen[kids[j]] = 1;
            if (j < support)
                cr_assert_gt(q[kids[j]], 0.0, "draws inside the support come first");
        }
    }
    gsl_rng_free(r);
    sq_verifier_free(v);
}

Test(verify, without_replacement_second_draw_has_the_closed_form_law)
{
    /* P(x2 = j) = sum_{i != j} q_i q_j / (1 - q_i) */
    const double q[5] = {0.4, 0.25, 0.2, 0.1, 0.05};
    sq_verifier *v = sq_verifier_new(5, SQ_MODE_STOCHASTIC, 17);
    double c1[5] = {0}, c2[5] = {0}, e2[5] = {0};
    for (int j = 0; j < 5; j++)
        for (int i = 0; i < 5; i++)
            if (i != j)
                e2[j] += q[i] * q[j] / (1 - q[i]);
    float dummy[5] = {0};
    for (int t = 0; t < 50000; t++) {
        int32_t k[2];
        sq_verifier_propose(v, q, dummy, 2, k);
        c1[k[0]] += 1;
        c2[k[1]] += 1;
    }
    sq_chisq r1 = sq_chisq_gof(c1, q, 5, 5.0), r2 = sq_chisq_gof(c2, e2, 5, 5.0);
    cr_assert_geq(r1.p_value, P_MIN, "first draw ~ q: p=%g", r1.p_value);
    cr_assert_geq(r2.p_value, P_MIN, "second draw: p=%g", r2.p_value);
    /* and it is not simply q again */
    sq_chisq bad = sq_chisq_gof(c2, q, 5, 5.0);
    cr_assert_lt(bad.p_value, P_MIN);
    sq_verifier_free(v);
}

Test(verify, specinfer_draws_with_replacement)
{
    const double q[3] = {0.8, 0.15, 0.05};
    float dummy[3] = {0};
    sq_verifier *v = sq_verifier_new(3, SQ_MODE_SPECINFER, 23);
    int repeats = 0;
    for (int t = 0; t < 1000; t++) {
        int32_t k[4];
        sq_verifier_propose(v, q, dummy, 4, k);
        repeats += k[0] == k[1];
    }
    cr_assert_gt(repeats, 500, "i.i.d. draws repeat the likely token (got %d)", repeats);
    sq_verifier_free(v);
}

Test(verify, probs_follow_temperature_and_top_p)
{
    const float l[4] = {2.0f, 1.0f, 0.0f, -INFINITY};
    sq_verifier *v = sq_verifier_new(4, SQ_MODE_STOCHASTIC, 1);
    double p[4];
    for (double T = 0.25; T <= 4.0; T *= 2) {
        sq_verifier_probs(v, l, T, 1.0, p);
        double z = exp(2 / T) + exp(1 / T) + 1;
        cr_assert(fabs(p[0] - exp(2 / T) / z) < 1e-12);
        cr_assert(fabs(p[2] - 1 / z) < 1e-12);
        cr_assert_eq(p[3], 0.0);
    }
    sq_verifier_probs(v, l, 0.0, 1.0, p);
    cr_assert(p[0] == 1.0 && p[1] == 0.0 && p[2] == 0.0);
    /* T=1: p = (.665, .245, .090); top_p 0.7 keeps the first two, 0.6 only the first */
    sq_verifier_probs(v, l, 1.0, 0.7, p);
    cr_assert(p[0] > 0 && p[1] > 0 && p[2] == 0);
    cr_assert(fabs(p[0] + p[1] - 1.0) < 1e-12);
    sq_verifier_probs(v, l, 1.0, 0.6, p);
    cr_assert(p[0] == 1.0);
    /* No usable logit (NaN, -inf): as if every logit were equal, uniform at T > 0 and token 0
     * at T = 0 (the rule of libsequoia/verify/rule.h, which the estimator shares). */
    const float bad[4] = {NAN, -INFINITY, -INFINITY, -INFINITY};
    sq_verifier_probs(v, bad, 1.0, 0.3, p);
    for (int i = 0; i < 4; i++)
        cr_assert(p[i] == 0.25, "no usable logit: uniform, p[%d] = %g", i, p[i]);
    sq_verifier_probs(v, bad, 0.0, 1.0, p);
    cr_assert(p[0] == 1.0, "no usable logit at T = 0: token 0");
    /* +inf: the +inf tokens share the mass (the softmax's limit) */
    const float big[4] = {1.0f, INFINITY, 3.0f, INFINITY};
    sq_verifier_probs(v, big, 0.7, 1.0, p);
    cr_assert(p[0] == 0 && p[1] == 0.5 && p[2] == 0 && p[3] == 0.5);
    sq_verifier_free(v);
}

/* Issue 12's row: ties at the nucleus cut are all kept, so the nucleus does not depend on token
 * ids (before the one rule, the verifier kept 3 of these tokens and the estimator 5). */
Test(verify, nucleus_keeps_every_token_tied_at_the_cut)
{
    const float l[8] = {2, 1, 1, 1, 1, 0, 0, 0};
    const float perm[8] = {1, 0, 1, 0, 2, 1, 0, 1};
    sq_verifier *v = sq_verifier_new(8, SQ_MODE_STOCHASTIC, 1);
    double p[8], q[8];
    sq_verifier_probs(v, l, 1.0, 0.5, p);
    double z = exp(1.0) + 4.0;
    cr_assert(fabs(p[0] - exp(1.0) / z) < 1e-12);
    for (int i = 1; i < 5; i++)
        cr_assert(fabs(p[i] - 1.0 / z) < 1e-12, "p[%d] = %g", i, p[i]);
    for (int i = 5; i < 8; i++)
        cr_assert_eq(p[i], 0.0);
    /* the same logits permuted: the same nucleus, permuted */
    sq_verifier_probs(v, perm, 1.0, 0.5, q);
    cr_assert(q[4] == p[0] && q[0] == p[1] && q[2] == p[1] && q[5] == p[1] && q[7] == p[1]);
    cr_assert(q[1] == 0 && q[3] == 0 && q[6] == 0);
    sq_verifier_free(v);
}

Test(verify, topk_orders_ties_by_token_id)
{
    const double x[6] = {1, 3, 3, 0, 3, 2};
    int32_t out[6];
    cr_assert_eq(sq_topk_d(x, 6, 6, out, NULL), SQ_OK);
    const int32_t want[6] = {1, 2, 4, 5, 0, 3};
    for (int i = 0; i < 6; i++)
        cr_assert_eq(out[i], want[i]);
}

Test(verify, same_seed_same_draws)
{
    const double q[4] = {0.1, 0.2, 0.3, 0.4};
    float dummy[4] = {0};
    sq_verifier *a = sq_verifier_new(4, SQ_MODE_STOCHASTIC, 99);
    sq_verifier *b = sq_verifier_new(4, SQ_MODE_STOCHASTIC, 99);
    int differ = 0;
    for (int t = 0; t < 100; t++) {
        int32_t ka[3], kb[3];
        sq_verifier_propose(a, q, dummy, 3, ka);
        sq_verifier_propose(b, q, dummy, 3, kb);
        differ |= memcmp(ka, kb, sizeof ka) != 0;
    }
    cr_assert_eq(differ, 0);
    sq_verifier_free(a);
    sq_verifier_free(b);
}

Test(verify, mode_names_round_trip)
{
    for (int m = 0; m < SQ_MODE_COUNT; m++) {
        sq_mode out;
        cr_assert_eq(sq_mode_parse(sq_mode_name((sq_mode)m), &out), 0);
        cr_assert_eq((int)out, m);
    }
    sq_mode out;
    cr_assert_eq(sq_mode_parse("beam", &out), -1);
    cr_assert_str_eq(sq_mode_rank_semantics(SQ_MODE_STOCHASTIC), "sampled-without-replacement");
    cr_assert_str_eq(sq_mode_rank_semantics(SQ_MODE_SPECINFER), "sampled-with-replacement");
    cr_assert_str_eq(sq_mode_rank_semantics(SQ_MODE_GREEDY), "draft-topk");
    cr_assert_str_eq(sq_mode_rank_semantics(SQ_MODE_TOPK), "draft-topk");
    /* "sampled": the candidates are a random sample of the draft (docs/estimator.md) */
    cr_assert(sq_mode_is_sampled(SQ_MODE_STOCHASTIC) && sq_mode_is_sampled(SQ_MODE_SPECINFER));
    cr_assert(!sq_mode_is_sampled(SQ_MODE_GREEDY) && !sq_mode_is_sampled(SQ_MODE_TOPK));
    cr_assert_eq(sq_mode_target_temperature(SQ_MODE_GREEDY, 0.7), 0.0);
    cr_assert_eq(sq_mode_target_temperature(SQ_MODE_TOPK, 0.7), 0.7);
    cr_assert(sq_mode_rank_semantics_known("draft-topk"));
    cr_assert(!sq_mode_rank_semantics_known("draft-top-k"));
}

Test(verify, chi_square_and_batch_ci_closed_forms)
{
    const double c[2] = {60, 40}, p[2] = {0.5, 0.5};
    sq_chisq r = sq_chisq_gof(c, p, 2, 5.0);
    cr_assert(fabs(r.stat - 4.0) < 1e-12);
    cr_assert_eq(r.df, 1);
    cr_assert(fabs(r.p_value - 0.0455003) < 1e-6);
    double x[100];
    for (int i = 0; i < 100; i++)
        x[i] = 3.0;
    sq_mean_ci m = sq_mean_ci_batch(x, 100);
    cr_assert_eq(m.mean, 3.0);
    cr_assert_eq(m.lo, 3.0);
    cr_assert_eq(m.hi, 3.0);
    for (int i = 0; i < 100; i++)
        x[i] = i % 2;
    m = sq_mean_ci_batch(x, 100);
    cr_assert(m.lo < 0.5 && m.hi > 0.5 && m.hi - m.lo < 0.3);
}
