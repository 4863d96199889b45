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

/* ---- acceptance by depth ---------------------------------------------------------------------- */

int sq_accept_curve_add_depths(sq_curve *c, sq_accept_stats *const *st, int depths, int *kept,
                               sq_error *err)
{
    int W = c->width, rows = 0;
    while (rows < depths && st[rows]->sum_n > 0)
        rows++;
    if (kept)
        *kept = rows;
    if (rows == 0)
        return SQ_OK;
    double *p = malloc((size_t)rows * (size_t)W * sizeof *p);
    double *se = malloc((size_t)rows * (size_t)W * sizeof *se);
    sq_json_build b = sq_json_build_begin();
    cJSON *arr = cJSON_CreateArray();
    for (int r = 0; r < rows && p && se; r++) {
        SQ_ASSERT(st[r]->width == W);
        sq_accept_stats_estimate(st[r], p + (size_t)r * (size_t)W, se + (size_t)r * (size_t)W);
        sq_json_append(arr, sq_accept_stats_to_json(st[r]));
    }
    arr = sq_json_build_end(b, arr);
    if (arr && !c->extra)
        c->extra = cJSON_CreateObject();
    if (!arr || !p || !se || !c->extra ||
        !cJSON_AddItemToObject(c->extra, "stats_by_depth", arr)) {
        cJSON_Delete(arr);
        free(p);
        free(se);
        return sq_error_oom(err, "acceptance by depth");
    }
    free(c->p_by_depth);
    free(c->stderr_by_depth);
    c->p_by_depth = p;
    c->stderr_by_depth = se;
    c->depth_rows = rows;
    return SQ_OK;
}

int sq_accept_curve_depth_stats_read(const sq_curve *c, const char *file, int idx, int d,
                                     sq_accept_stats **out, sq_error *err)
{
    *out = NULL;
    const cJSON *arr = c->extra ? sq_json_field(c->extra, "stats_by_depth") : NULL;
    if (!arr)
        return SQ_OK;
    char ctx[80];
    snprintf(ctx, sizeof ctx, "curves[%d].stats_by_depth", idx);
    if (!cJSON_IsArray(arr) || cJSON_GetArraySize(arr) != c->depth_rows)
        return sq_error_set(err, SQ_EDATA, "%s: %s: expected an array of %d entries, one per row "
                            "of p_by_depth", file, ctx, c->depth_rows);
    if (c->width > SQ_ACCEPT_MAX_WIDTH)
        return sq_error_set(err, SQ_EDATA, "%s: curves[%d].p: %d ranks, more than %d", file, idx,
                            c->width, SQ_ACCEPT_MAX_WIDTH);
    snprintf(ctx, sizeof ctx, "curves[%d].stats_by_depth[%d]", idx, d);
    sq_accept_stats *s = NULL;
    int rc = sq_accept_stats_from_json(cJSON_GetArrayItem(arr, d), c->width, file, ctx, &s, err);
    if (rc)
        return rc;
    s->sequences = c->sequences < 0 ? 0 : c->sequences;
    *out = s;
    return SQ_OK;
}

int sq_accept_curve_depth_stats_check(const sq_curve *c, const char *file, int idx,
                                      sq_error *err)
{
    int W = c->width, rc = SQ_OK;
    if (!c->extra || !sq_json_field(c->extra, "stats_by_depth"))
        return SQ_OK;
    if (c->depth_rows < 1)
        return sq_error_set(err, SQ_EDATA, "%s: curves[%d].stats_by_depth: given without "
                            "p_by_depth", file, idx);
    double *p = malloc((size_t)W * sizeof *p), *se = malloc((size_t)W * sizeof *se);
    if (!p || !se)
        rc = sq_error_oom(err, "statistics check");
    for (int d = 0; d < c->depth_rows && !rc; d++) {
        sq_accept_stats *s;
        if ((rc = sq_accept_curve_depth_stats_read(c, file, idx, d, &s, err)))
            break;
        int have_se = sq_accept_stats_estimate(s, p, se);
        const double *row = c->p_by_depth + (size_t)d * (size_t)W;
        const double *srow = c->stderr_by_depth ? c->stderr_by_depth + (size_t)d * (size_t)W
                                                : NULL;
        for (int k = 0; k < W && !rc; k++) {
            if (!(fabs(p[k] - row[k]) <= 1e-6))
                rc = sq_error_set(err, SQ_EDATA, "%s: curves[%d].stats_by_depth[%d]: do not "
                                  "reproduce p_by_depth[%d][%d] (%.9g in the file, %.9g from the "
                                  "stats); the file was edited or damaged, so its error bars "
                                  "cannot be trusted", file, idx, d, d, k, row[k], p[k]);
            else if (have_se && srow && !(fabs(se[k] - srow[k]) <= 1e-6))
                rc = sq_error_set(err, SQ_EDATA, "%s: curves[%d].stats_by_depth[%d]: do not "
                                  "reproduce stderr_by_depth[%d][%d] (%.9g in the file, %.9g "
                                  "from the stats); the file was edited or damaged", file, idx,
                                  d, d, k, srow[k], se[k]);
        }
        sq_accept_stats_free(s);
    }
    free(p);
    free(se);
    return rc;
}

int sq_accept_curve_stats_verify(const sq_curve *c, const char *file, int idx, sq_error *err)
{
    int rc = sq_accept_curve_stats_check(c, file, idx, err);
    return rc ? rc : sq_accept_curve_depth_stats_check(c, file, idx, err);
}

int sq_accept_curve_depth_row(const sq_curve *c, const char *file, int idx, int d, sq_curve *out,
                              sq_error *err)
{
    memset(out, 0, sizeof *out);
    if (c->depth_rows < 1)
        return sq_curve_copy(out, c, err);
    int W = c->width, r = d < c->depth_rows ? d : c->depth_rows - 1;
    int rc = sq_curve_init(out, c->name, c->mode, c->p_by_depth + (size_t)r * (size_t)W, W, err);
    if (rc)
        return rc;
    out->temperature = c->temperature;
    out->top_p = c->top_p;
    out->sequences = c->sequences;
    if (c->stderr_by_depth) {
        out->stderr_p = malloc((size_t)W * sizeof *out->stderr_p);
        if (!out->stderr_p) {
            sq_curve_clear(out);
            return sq_error_oom(err, "curve row");
        }
        memcpy(out->stderr_p, c->stderr_by_depth + (size_t)r * (size_t)W,
               (size_t)W * sizeof *out->stderr_p);
    }
    sq_accept_stats *s = NULL;
    if ((rc = sq_accept_curve_depth_stats_read(c, file, idx, r, &s, err))) {
        sq_curve_clear(out);
        return rc;
    }
    if (s) {
        out->positions = (long long)s->sum_n;
        /* the curve's settings (samples, unit, ...), then the row's sums */
        sq_json_build b = sq_json_build_begin();
        cJSON *extra = cJSON_CreateObject(), *o = cJSON_CreateObject();
        cJSON *sums = sq_accept_stats_to_json(s);
        const cJSON *parent = c->extra ? sq_json_field(c->extra, "stats") : NULL;
        static const char *const settings[] = {"estimator", "samples", "seed", "unit"};
        for (size_t q = 0; q < sizeof settings / sizeof *settings; q++) {
            const cJSON *v = parent ? cJSON_GetObjectItemCaseSensitive(parent, settings[q])
                                    : NULL;
            if (v)
                sq_json_add(o, settings[q], cJSON_Duplicate(v, 1));
            else if (q == 1)
                sq_json_add(o, "samples", cJSON_CreateNumber(1));
        }
        for (cJSON *m = sums ? sums->child : NULL; m; m = m->next)
            sq_json_add(o, m->string, cJSON_Duplicate(m, 1));
        cJSON_Delete(sums);
        sq_json_add(extra, "stats", o);
        sq_accept_stats_free(s);
        if (!(out->extra = sq_json_build_end(b, extra))) {
            sq_curve_clear(out);
            return sq_error_oom(err, "curve row");
        }
    }
    return SQ_OK;
}

int sq_accept_curve_merge_depths(sq_curve *out, const sq_curve *const *shard,
                                 char *const *files, const int *idx, int n, sq_error *err)
{
    int rows = SQ_ACCEPT_MAX_DEPTHS;
    for (int f = 0; f < n; f++) {
        const cJSON *arr = shard[f]->extra ? sq_json_field(shard[f]->extra, "stats_by_depth")
                                           : NULL;
        int r = arr ? shard[f]->depth_rows : 0;
        rows = r < rows ? r : rows;
    }
    if (rows <= 0)
        return SQ_OK;
    sq_accept_stats **tot = calloc((size_t)rows, sizeof *tot);
    if (!tot)
        return sq_error_oom(err, "acceptance by depth");
    int rc = SQ_OK;
    for (int f = 0; f < n && !rc; f++)
        for (int d = 0; d < rows && !rc; d++) {
            sq_accept_stats *s = NULL;
            if ((rc = sq_accept_curve_depth_stats_read(shard[f], files[f], idx[f], d, &s, err)))
                break;
            if (!tot[d])
                tot[d] = s;
            else {
                sq_accept_stats_merge(tot[d], s);
                sq_accept_stats_free(s);
            }
        }
    if (!rc)
        rc = sq_accept_curve_add_depths(out, tot, rows, NULL, err);
    for (int d = 0; d < rows; d++)
        sq_accept_stats_free(tot[d]);
    free(tot);
    return rc;
}
