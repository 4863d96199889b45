/* Curves from the estimator's statistics and back, and the regression maths of
 * sequoia-accept --compare (docs/estimator.md).
 *
 * A curve written by the estimator carries its sufficient statistics in the "stats" member of
 * its extra fields, next to the settings (estimator, samples, seed, unit), so that shards can be
 * merged exactly and a comparison can use the full covariance of p's estimate. */
#ifndef SQ_ACCEPT_STATS_H
#define SQ_ACCEPT_STATS_H

#include <cjson/cJSON.h>

#include "libsequoia/base/error.h"
#include "libsequoia/format/curve.h"
#include "planner/accept/accept.h"

/* Builds curve c (to sq_curve_clear) named `name` for configuration cfg from st: p and its
 * standard errors, positions, sequences, and the "stats" member with the settings first
 * (estimator, samples, seed (NULL: null), unit) and then the sums. */
int sq_accept_curve_from_stats(sq_curve *c, const char *name, const sq_accept_config *cfg,
                               const sq_accept_stats *st, int samples, const cJSON *seed,
                               const char *unit, sq_error *err);

/* What a curve's "stats" member holds. seed and unit point into the curve. */
typedef struct sq_accept_curve_stats {
    sq_accept_stats *stats;   /* to sq_accept_stats_free */
    int              samples;
    const cJSON     *seed;    /* NULL when absent */
    const char      *unit;    /* "sequence" when absent */
} sq_accept_curve_stats;

/* Reads back the statistics of curve c, the idx-th curve of `file` (for messages). Errors:
 * SQ_EDATA (missing, malformed, wider than SQ_ACCEPT_MAX_WIDTH). */
int sq_accept_curve_stats_read(const sq_curve *c, const char *file, int idx,
                               sq_accept_curve_stats *out, sq_error *err);

/* Checks that the statistics of curve c (when it has them) reproduce its p and standard
 * errors within 1e-6 (issue 27 W8): a file whose p or stats were edited would otherwise give a
 * comparison its error bars from other numbers than its estimate. Errors: SQ_EDATA
 * "FILE: curves[I].stats: do not reproduce p[K] (P in the file, Q from the stats); ...". */
int sq_accept_curve_stats_check(const sq_curve *c, const char *file, int idx, sq_error *err);

/* Var(F) of the optimal tree's expected tokens F, by the delta method with F's gradient grad
 * (width c->width): grad' Cov grad with the covariance from the statistics when the curve has
 * them, else from the standard errors alone (diagonal), else 0. *how says which ("full
 * covariance", "standard errors only (no covariance)", "no error information (treated as
 * exact)"). */
int sq_accept_F_variance(const sq_curve *c, const char *file, int idx, const double *grad,
                         double *var, const char **how, sq_error *err);

/* Rank k (0-based) of a baseline curve b against a new curve n; a rank past a curve's width
 * counts as p = 0 with no error. z is NAN when neither has a standard error there. */
typedef struct sq_accept_rank_change {
    double base, now, change, z;
} sq_accept_rank_change;
sq_accept_rank_change sq_accept_rank_compare(const sq_curve *b, const sq_curve *n, int k);

/* The regression rule: a change dF of F with standard error sF is a significant drop when it
 * is below -sigma standard errors; with no standard error, any drop beyond rounding (1e-12). */
int sq_accept_significant_drop(double dF, double sF, double sigma);

#endif
