/* Curves from statistics and back, and the regression maths (stats.h). */
#include "planner/accept/stats.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "libsequoia/base/json.h"

int sq_accept_curve_from_stats(sq_curve *c, const char *name, const sq_accept_config *cfg,
                               const sq_accept_stats *st, int samples, const cJSON *seed,
                               const char *unit, sq_error *err)
{
    int W = st->width;
    double *p = malloc((size_t)W * sizeof *p), *se = malloc((size_t)W * sizeof *se);
    if (!p || !se) {
        free(p);
        free(se);
        return sq_error_oom(err, "curve");
    }
    int have_se = sq_accept_stats_estimate(st, p, se);
    int rc = sq_curve_init(c, name, sq_mode_name(cfg->mode), p, W, err);
    free(p);
    if (rc) {
        free(se);
        return rc;
    }
    c->temperature = cfg->temperature;
    c->top_p = cfg->top_p;
    c->positions = (long long)st->sum_n;
    c->sequences = st->sequences;
    if (have_se)
        c->stderr_p = se;
    else
        free(se);
    /* the settings first, then the sums */
    int sampled = sq_mode_is_sampled(cfg->mode);
    sq_json_build b = sq_json_build_begin();
    cJSON *sums = sq_accept_stats_to_json(st);
    cJSON *o = cJSON_CreateObject(), *extra = cJSON_CreateObject();
    sq_json_add(o, "estimator", cJSON_CreateString(sampled ? "rao-blackwellised" : "exact"));
    sq_json_add(o, "samples", cJSON_CreateNumber(sampled ? samples : 1));
    sq_json_add(o, "seed", seed ? cJSON_Duplicate(seed, 1) : cJSON_CreateNull());
    sq_json_add(o, "unit", cJSON_CreateString(unit));
    for (cJSON *m = sums ? sums->child : NULL; m; m = m->next)
        sq_json_add(o, m->string, cJSON_Duplicate(m, 1));
    sq_json_add(extra, "stats", o);
    cJSON_Delete(sums);   /* (a NULL sums failed inside this build, so the build fails) */
    if (!(extra = sq_json_build_end(b, extra))) {
        sq_curve_clear(c);
        return sq_error_oom(err, "curve statistics");
    }
    c->extra = extra;
    return SQ_OK;
}

int sq_accept_curve_stats_read(const sq_curve *c, const char *file, int idx,
                               sq_accept_curve_stats *out, sq_error *err)
{
    *out = (sq_accept_curve_stats){0};
    char ctx[64];
    snprintf(ctx, sizeof ctx, "curves[%d].stats", idx);
    const cJSON *st = c->extra ? sq_json_field(c->extra, "stats") : NULL;
    if (!st)
        return sq_error_set(err, SQ_EDATA, "%s: %s: missing (the curve \"%s\" was not written by "
                            "sequoia-accept, so it cannot be merged)", file, ctx, c->name);
    if (c->width > SQ_ACCEPT_MAX_WIDTH)
        return sq_error_set(err, SQ_EDATA, "%s: curves[%d].p: %d ranks, more than %d", file, idx,
                            c->width, SQ_ACCEPT_MAX_WIDTH);
    sq_accept_stats *s = NULL;
    int rc = sq_accept_stats_from_json(st, c->width, file, ctx, &s, err);
    if (rc)
        return rc;
    s->sequences = c->sequences < 0 ? 0 : c->sequences;
    long long k = 1;
    const char *unit = "sequence";
    if ((rc = sq_json_get_int(st, "samples", 1, 1, SQ_ACCEPT_MAX_SAMPLES, &k, file, ctx, err)) ||
        (rc = sq_json_get_string(st, "unit", 0, &unit, file, ctx, err))) {
        sq_accept_stats_free(s);
        return rc;
    }
    *out = (sq_accept_curve_stats){.stats = s, .samples = (int)k,
                                   .seed = sq_json_field(st, "seed"), .unit = unit};
    return SQ_OK;
}

int sq_accept_curve_stats_check(const sq_curve *c, const char *file, int idx, sq_error *err)
{
    if (!c->extra || !sq_json_field(c->extra, "stats"))
        return SQ_OK;
    sq_accept_curve_stats cs;
    int rc = sq_accept_curve_stats_read(c, file, idx, &cs, err);
    if (rc)
        return rc;
    int W = c->width;
    double *p = malloc((size_t)W * sizeof *p), *se = malloc((size_t)W * sizeof *se);
    if (!p || !se) {
        rc = sq_error_oom(err, "statistics check");
    } else {
        int have_se = sq_accept_stats_estimate(cs.stats, p, se);
        for (int k = 0; k < W && !rc; k++) {
            if (!(fabs(p[k] - c->p[k]) <= 1e-6))
                rc = sq_error_set(err, SQ_EDATA, "%s: curves[%d].stats: do not reproduce p[%d] "
                                  "(%.9g in the file, %.9g from the stats); the file was edited "
                                  "or damaged, so its error bars cannot be trusted", file, idx, k,
                                  c->p[k], p[k]);
            else if (have_se && c->stderr_p && !(fabs(se[k] - c->stderr_p[k]) <= 1e-6))
                rc = sq_error_set(err, SQ_EDATA, "%s: curves[%d].stats: do not reproduce "
                                  "stderr[%d] (%.9g in the file, %.9g from the stats); the file "
                                  "was edited or damaged", file, idx, k, c->stderr_p[k], se[k]);
        }
    }
    free(p);
    free(se);
    sq_accept_stats_free(cs.stats);
    return rc;
}

int sq_accept_F_variance(const sq_curve *c, const char *file, int idx, const double *grad,
                         double *var, const char **how, sq_error *err)
{
    int W = c->width;
    *var = 0;
    if (c->extra && sq_json_field(c->extra, "stats")) {
        sq_accept_curve_stats cs;
        int rc = sq_accept_curve_stats_read(c, file, idx, &cs, err);
        if (rc)
            return rc;
        double *cov = malloc((size_t)W * (size_t)W * sizeof *cov);
        if (!cov) {
            sq_accept_stats_free(cs.stats);
            return sq_error_oom(err, "covariance");
        }
        sq_accept_stats_cov(cs.stats, cov);
        double v = 0;
        for (int j = 0; j < W; j++)
            for (int k = 0; k < W; k++)
                v += grad[j] * cov[(size_t)j * (size_t)W + (size_t)k] * grad[k];
        free(cov);
        sq_accept_stats_free(cs.stats);
        *how = "full covariance";
        *var = v > 0 ? v : 0;
        return SQ_OK;
    }
    if (c->stderr_p) {
        double v = 0;
        for (int k = 0; k < W; k++)
            v += grad[k] * grad[k] * c->stderr_p[k] * c->stderr_p[k];
        *how = "standard errors only (no covariance)";
        *var = v;
        return SQ_OK;
    }
    *how = "no error information (treated as exact)";
    return SQ_OK;
}

sq_accept_rank_change sq_accept_rank_compare(const sq_curve *b, const sq_curve *n, int k)
{
    sq_accept_rank_change r;
    r.base = k < b->width ? b->p[k] : 0;
    r.now = k < n->width ? n->p[k] : 0;
    double sb = k < b->width && b->stderr_p ? b->stderr_p[k] : 0;
    double sn = k < n->width && n->stderr_p ? n->stderr_p[k] : 0;
    double s = sqrt(sb * sb + sn * sn);
    r.change = r.now - r.base;
    r.z = s > 0 ? r.change / s : NAN;
    return r;
}

int sq_accept_significant_drop(double dF, double sF, double sigma)
{
    return dF < 0 && (sF > 0 ? dF / sF < -sigma : dF < -1e-12);
}
