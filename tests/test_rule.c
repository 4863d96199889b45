/* Suite 'verify-rule': the acceptance estimator describes what the runtime's verifier does.
 *
 * For random small-vocabulary logits (V <= 8, values on a coarse grid so that ties, also at the
 * nucleus cut, are common, some -inf and NaN, and a few hand-picked rows), every mode, several
 * temperatures and top-p values, one node with W children is verified N times by the runtime's
 * verifier (libsequoia/verify/verify.h, driven as runtime/specdec.c drives it: target and draft
 * distributions from the logits, W children proposed from the draft, one verification), from
 * N_SEEDS seeds, PER_SEED times from each. The counts of "child k accepted" (k = 1..W) and "every child
 * rejected" are compared, by Pearson's chi-square, with the estimator's per-position vector
 * a(W) for the same logits (planner/accept/accept.h, computed as sq_accept_run computes a
 * corpus row): exact for greedy and topk, the mean of S Rao-Blackwellised draws for stochastic
 * and specinfer.
 *
 * The bound: a case fails when its p-value is below 1e-6 (a real difference in the rule gives
 * p-values far below that; a correct rule fails a case with probability 1e-6), and the whole
 * suite fails when the sum of the statistics over all cases is beyond the 0.999 quantile of a
 * chi-square with the summed degrees of freedom. For the sampled modes the estimate's own noise
 * is allowed for: the variance of a count's deviation is at most N a (1 - a) (the runtime) plus
 * N^2 a (1 - a) / S (the estimator's mean of S values in [0, 1] with mean a), so the statistic
 * is divided by 1 + N / S before it is compared with the chi-square. Seeds are fixed, so the
 * outcome is reproducible. */
#include <criterion/criterion.h>
#include <gsl/gsl_cdf.h>
#include <gsl/gsl_rng.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "libsequoia/base/stats.h"
#include "libsequoia/verify/verify.h"
#include "planner/accept/accept.h"

#define MAXV 8
#define MAXW 4
#define N_SEEDS 150         /* runtime seeds per case                                  */
#define PER_SEED 40         /* verifications from each seed                            */
#define N_RUNTIME (N_SEEDS * PER_SEED)
#define S_ESTIMATOR 50000   /* estimator draws per case, sampled modes                 */
#define P_CASE 1e-6         /* a single case fails below this p-value                  */
#define P_ALL 1e-3          /* the sum over all cases fails below this p-value         */

typedef struct rule_case {
    int   V, W;
    float target[MAXV], draft[MAXV];
    sq_mode mode;
    double temperature, top_p;
} rule_case;

/* ---- the two sides ------------------------------------------------------------------------- */

/* The runtime: the verifier as runtime/specdec.c uses it at one node. */
static void runtime_counts(const rule_case *c, uint64_t seed, double *counts)
{
    sq_mode mode = c->mode;
    sq_verifier *v = sq_verifier_new(c->V, mode, seed);
    cr_assert_not_null(v);
    double p[MAXV], q[MAXV];
    int sampled = sq_mode_is_sampled(mode);
    memset(counts, 0, (size_t)(c->W + 1) * sizeof *counts);
    for (int n = 0; n < N_RUNTIME; n++) {
        if (n % PER_SEED == 0)
            sq_verifier_seed(v, seed + 7919u * (uint64_t)(n / PER_SEED));
        /* specdec: the target at temperature 0 in greedy mode, the draft's Q for the sampled
         * proposals only */
        double tt = sq_mode_target_temperature(mode, c->temperature);
        sq_verifier_probs(v, c->target, tt, c->top_p, p);
        if (sampled)
            sq_verifier_probs(v, c->draft, c->temperature, c->top_p, q);
        int32_t tok[MAXW], bonus = -1;
        sq_verifier_propose(v, sampled ? q : NULL, c->draft, c->W, tok);
        int j = sq_verifier_node(v, p, sampled ? q : NULL, tok, c->W, &bonus);
        counts[j < 0 ? c->W : j] += 1;
    }
    sq_verifier_free(v);
}

/* The estimator: a(W) for one corpus row, as sq_accept_run's workers compute it. */
static void estimator_vector(const rule_case *c, uint64_t seed, double *a)
{
    int greedy = c->mode == SQ_MODE_GREEDY;
    sq_accept_config cfg = {c->mode, greedy ? 0.0 : c->temperature, greedy ? 1.0 : c->top_p};
    sq_accept_ws *ws = sq_accept_ws_new(c->V, c->W);
    gsl_rng *rng = gsl_rng_alloc(gsl_rng_mt19937);
    cr_assert(ws && rng);
    gsl_rng_set(rng, (unsigned long)seed);
    double P[MAXV] = {0}, Q[MAXV] = {0};
    if (cfg.mode != SQ_MODE_GREEDY)
        sq_accept_probs(c->target, c->V, cfg.temperature, cfg.top_p, P, ws);
    if (sq_mode_is_sampled(cfg.mode))
        sq_accept_probs(c->draft, c->V, cfg.temperature, cfg.top_p, Q, ws);
    sq_accept_position(&cfg, c->target, c->draft, P, Q, c->V, c->W, S_ESTIMATOR, rng, a, ws);
    gsl_rng_free(rng);
    sq_accept_ws_free(ws);
}

/* ---- the cases ----------------------------------------------------------------------------- */

/* Logits on a grid of half-units in [-1.5, 2]: ties everywhere. A few -inf and NaN. */
static void random_logits(gsl_rng *r, int V, float *l)
{
    for (int i = 0; i < V; i++) {
        double u = gsl_rng_uniform(r);
        if (u < 0.08)
            l[i] = -INFINITY;
        else if (u < 0.10)
            l[i] = NAN;
        else
            l[i] = (float)(0.5 * (double)gsl_rng_uniform_int(r, 8) - 1.5);
    }
}

static void describe(const rule_case *c, char *buf, size_t size)
{
    int o = snprintf(buf, size, "%s T=%g top_p=%g V=%d W=%d target {", sq_mode_name(c->mode),
                     c->temperature, c->top_p, c->V, c->W);
    for (int i = 0; i < c->V && o < (int)size; i++)
        o += snprintf(buf + o, size - (size_t)o, "%s%g", i ? "," : "", (double)c->target[i]);
    if (o < (int)size)
        o += snprintf(buf + o, size - (size_t)o, "} draft {");
    for (int i = 0; i < c->V && o < (int)size; i++)
        o += snprintf(buf + o, size - (size_t)o, "%s%g", i ? "," : "", (double)c->draft[i]);
    if (o < (int)size)
        snprintf(buf + o, size - (size_t)o, "}");
}

typedef struct tally {
    double stat;    /* summed (scaled) statistics */
    int    df;
    int    cases, failed;
    double worst_p;
    char   worst[600];
} tally;

static void check_case(const rule_case *c, uint64_t seed, tally *t)
{
    double a[MAXW], probs[MAXW + 1], counts[MAXW + 1];
    estimator_vector(c, seed * 2 + 1, a);
    runtime_counts(c, seed * 2 + 2, counts);
    double sum = 0;
    for (int k = 0; k < c->W; k++) {
        probs[k] = a[k] < 0 ? 0 : a[k];
        sum += probs[k];
    }
    probs[c->W] = sum < 1 ? 1 - sum : 0;
    sq_chisq r = sq_chisq_gof(counts, probs, c->W + 1, 5.0);
    double scale = sq_mode_is_sampled(c->mode) ? 1.0 + (double)N_RUNTIME / S_ESTIMATOR : 1.0;
    double stat = r.stat / scale;
    int broken = !(sum == sum) || !(sum <= 1 + 1e-9);   /* NaN, or more than certainty */
    double p = broken ? 0.0 : r.df < 1 ? (r.stat > 0 && !isfinite(r.stat) ? 0.0 : 1.0)
                        : isfinite(stat) ? gsl_cdf_chisq_Q(stat, r.df) : 0.0;
    t->cases++;
    t->df += r.df;
    t->stat += stat;
    char what[400];
    describe(c, what, sizeof what);
    if (p < P_CASE) {
        t->failed++;
        cr_log_error("case %d: %s: X2=%.1f df=%d p=%.3g; estimator a = (%.4f %.4f %.4f %.4f "
                     "| rejected %.4f), runtime = (%.4f %.4f %.4f %.4f | %.4f)",
                     t->cases, what, stat, r.df, p, probs[0], c->W > 1 ? probs[1] : 0,
                     c->W > 2 ? probs[2] : 0, c->W > 3 ? probs[3] : 0, probs[c->W],
                     counts[0] / N_RUNTIME, c->W > 1 ? counts[1] / N_RUNTIME : 0,
                     c->W > 2 ? counts[2] / N_RUNTIME : 0, c->W > 3 ? counts[3] / N_RUNTIME : 0,
                     counts[c->W] / N_RUNTIME);
    }
    if (t->cases == 1 || p < t->worst_p) {
        t->worst_p = p;
        snprintf(t->worst, sizeof t->worst, "%s (X2=%.2f df=%d)", what, stat, r.df);
    }
}

static const double temps[] = {0.5, 1.0, 2.0};
static const double tops[] = {0.3, 0.5, 0.8, 1.0};

/* Every mode, temperature and top-p on one pair of logit rows (greedy once: it uses
 * neither). */
static void check_row(rule_case *c, uint64_t *seed, tally *t)
{
    for (int m = 0; m < SQ_MODE_COUNT; m++)
        for (int ti = 0; ti < 3; ti++)
            for (int pi = 0; pi < 4; pi++) {
                if (m == SQ_MODE_GREEDY && (ti || pi))
                    continue;
                c->mode = (sq_mode)m;
                c->temperature = temps[ti];
                c->top_p = tops[pi];
                check_case(c, (*seed)++, t);
            }
}

static void report(const tally *t)
{
    double p_all = gsl_cdf_chisq_Q(t->stat, t->df);
    cr_log_info("%d cases: sum X2 = %.1f on %d df (p = %.3g), %d below p = %g; the least "
                "likely: p = %.3g, %s", t->cases, t->stat, t->df, p_all, t->failed, P_CASE,
                t->worst_p, t->worst);
    fprintf(stderr, "verify-rule: %d cases: sum X2 = %.1f on %d df (p = %.3g), %d below p = %g; "
            "least likely case p = %.3g: %s\n", t->cases, t->stat, t->df, p_all, t->failed,
            P_CASE, t->worst_p, t->worst);
    cr_expect_eq(t->failed, 0, "%d of %d cases: the estimator and the runtime's verifier "
                 "disagree (see the log)", t->failed, t->cases);
    cr_expect_geq(p_all, P_ALL, "sum over %d cases: X2 = %.1f on %d df, p = %.3g", t->cases,
                  t->stat, t->df, p_all);
}

/* Hand-picked rows: the ties at the nucleus cut of the issue ({2,1,1,1,1,0,0,0}, T = 1,
 * top-p 0.5), rows with no usable logit (all -inf, NaN), +inf. */
Test(verify_rule, estimator_equals_runtime_on_hand_picked_rows)
{
    static const float rows[][2][MAXV] = {
        {{2, 1, 1, 1, 1, 0, 0, 0}, {1, 1, 2, 1, 0, 1, 0, 0}},
        {{1, 1, 2, 1, 0, 1, 0, 0}, {2, 1, 1, 1, 1, 0, 0, 0}},
        {{0.5f, 0.5f, 0.5f, 0.5f, 0, 0, 0, 0}, {0.5f, 0, 0.5f, 0, 0.5f, 0, 0.5f, 0}},
        {{-INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY,
          -INFINITY}, {1, 0, 2, 0, 1, 0, 0, 0}},
        {{1, 0, 2, 0, 1, 0, 0, 0}, {-INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY,
                                    -INFINITY, -INFINITY, -INFINITY}},
        {{NAN, -INFINITY, NAN, -INFINITY, NAN, -INFINITY, NAN, -INFINITY},
         {NAN, 0, 1, 0, NAN, 2, 0, 0}},
        {{-INFINITY, 0, -INFINITY, 1, -INFINITY, 0, -INFINITY, 1},
         {2, -INFINITY, 2, -INFINITY, 1, -INFINITY, 1, -INFINITY}},
        {{0, INFINITY, 1, 2, 0, 0, INFINITY, 0}, {INFINITY, 0, 1, 2, 0, 0, 1, 0}},
    };
    tally t = {0};
    uint64_t seed = 1000;
    for (size_t r = 0; r < sizeof rows / sizeof *rows; r++) {
        rule_case c = {.V = MAXV};
        memcpy(c.target, rows[r][0], sizeof c.target);
        memcpy(c.draft, rows[r][1], sizeof c.draft);
        for (c.W = 1; c.W <= MAXW; c.W += 3)
            check_row(&c, &seed, &t);
    }
    report(&t);
}

Test(verify_rule, estimator_equals_runtime_on_random_rows)
{
    gsl_rng *r = gsl_rng_alloc(gsl_rng_mt19937);
    gsl_rng_set(r, 12);
    tally t = {0};
    uint64_t seed = 1;
    for (int row = 0; row < 8; row++) {
        rule_case c = {.V = 2 + (int)gsl_rng_uniform_int(r, MAXV - 1)};
        random_logits(r, c.V, c.target);
        random_logits(r, c.V, c.draft);
        c.W = 1 + (int)gsl_rng_uniform_int(r, (unsigned long)(c.V < MAXW ? c.V : MAXW));
        check_row(&c, &seed, &t);
    }
    gsl_rng_free(r);
    report(&t);
}
