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

/* Adds acceptance by depth to curve c (built by sq_accept_curve_from_stats): p_by_depth and
 * stderr_by_depth from st[0..depths) (st[d]: depth d + 1, sq_accept_params.depth_stats), and
 * the member "stats_by_depth" of its extras, an array of the rows' sums (as "stats" holds
 * them, without the settings). Rows from the first whose weight (sum_n) is zero are left out
 * (a curve reuses its last row deeper); *kept (may be NULL) says how many rows remain. */
int sq_accept_curve_add_depths(sq_curve *c, sq_accept_stats *const *st, int depths, int *kept,
                               sq_error *err);

/* Merges the depth rows of n shards' curves (shard[f], curves[idx[f]] of files[f]) into out,
 * a merged curve built by sq_accept_curve_from_stats: row by row, exactly, over the rows that
 * every shard has ("stats_by_depth"); none when a shard has none. */
int sq_accept_curve_merge_depths(sq_curve *out, const sq_curve *const *shard,
                                 char *const *files, const int *idx, int n, sq_error *err);

/* The statistics of row d (0-based) of curve c's p_by_depth from its "stats_by_depth" member
 * (*out NULL when the curve has none). Errors: SQ_EDATA naming curves[idx].stats_by_depth[d]. */
int sq_accept_curve_depth_stats_read(const sq_curve *c, const char *file, int idx, int d,
                                     sq_accept_stats **out, sq_error *err);

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

/* The same for the depth rows: "stats_by_depth" (when present) must have one entry per row of
 * p_by_depth and reproduce each row and its standard errors within 1e-6. */
int sq_accept_curve_depth_stats_check(const sq_curve *c, const char *file, int idx,
                                      sq_error *err);

/* Both checks above, p against "stats" and the depth rows against "stats_by_depth": what every
 * reader of a curve's statistics runs before trusting them (--compare on both files, --merge on
 * every shard), so that an edited or damaged file is refused (exit 65) instead of changing a
 * merged curve or a comparison's error bars. */
int sq_accept_curve_stats_verify(const sq_curve *c, const char *file, int idx, sq_error *err);

/* Row d (0-based) of curve c as a flat curve into *out (to sq_curve_clear): p = p_by_depth[d]
 * (a curve without p_by_depth gives p itself for every d), stderr = stderr_by_depth[d], and
 * the row's statistics as its "stats" member, so that the comparison's maths applies to it. */
int sq_accept_curve_depth_row(const sq_curve *c, const char *file, int idx, int d, sq_curve *out,
                              sq_error *err);

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
