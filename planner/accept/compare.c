/* The regression check of acceptance curves (compare.h), sequoia-accept --compare's work. */
#include "planner/accept/compare.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "libsequoia/base/json.h"
#include "planner/accept/stats.h"

/* to the text report, if any */
#define REPORT(...) do { if (o->report) fprintf(o->report, __VA_ARGS__); } while (0)

static cJSON *jnum(double v)
{
    return cJSON_CreateNumber(isfinite(v) ? v : 0.0);
}

/* One rank's row of the JSON report (whole curves and each depth alike). */
static cJSON *rank_json(int k, const sq_accept_rank_change *r)
{
    cJSON *jk = cJSON_CreateObject();
    sq_json_add(jk, "rank", cJSON_CreateNumber(k + 1));
    sq_json_add(jk, "baseline", jnum(r->base));
    sq_json_add(jk, "new", jnum(r->now));
    sq_json_add(jk, "change", jnum(r->change));
    sq_json_add(jk, "z", !isnan(r->z) ? jnum(r->z) : cJSON_CreateNull());
    return jk;
}

/* The optimal tree's F, baseline against new, with its standard error (sF <= 0: none) and
 * where that error came from. */
static cJSON *optimal_F_json(double Fb, double Fn, double sF, const char *how_b, const char *how_n)
{
    double dF = Fn - Fb;
    cJSON *jf = cJSON_CreateObject();
    sq_json_add(jf, "baseline", jnum(Fb));
    sq_json_add(jf, "new", jnum(Fn));
    sq_json_add(jf, "change", jnum(dF));
    sq_json_add(jf, "stderr", sF > 0 ? jnum(sF) : cJSON_CreateNull());
    sq_json_add(jf, "z", sF > 0 ? jnum(dF / sF) : cJSON_CreateNull());
    sq_json_add(jf, "error_from", cJSON_CreateString(strcmp(how_b, how_n) ? how_n : how_b));
    return jf;
}

/* The depth-dependent part (issue 27): depths 1 .. max(rows) of both curves, each depth's
 * vector as a flat curve (a curve without p_by_depth is p at every depth; one with fewer rows
 * reuses its last), compared like a whole curve: ranks with z-scores, and the optimal tree's F
 * built from that depth's vector alone with its standard error from that row's statistics.
 * *drop: some depth's F dropped by more than sigma standard errors. Adds "by_depth" to jc. */
static int compare_depths(const sq_curve *cb, const char *base_file, int i, const sq_curve *cn,
                          const char *new_file, int j, const sq_accept_compare_opts *o,
                          cJSON *jc, int *drop, sq_error *err)
{
    int D = cb->depth_rows > cn->depth_rows ? cb->depth_rows : cn->depth_rows;
    int W = cb->width > cn->width ? cb->width : cn->width;
    cJSON *jd = cJSON_CreateArray();
    sq_json_add(jc, "by_depth", jd);
    REPORT("  by depth (rows: %d in %s, %d in %s; a curve reuses its last row deeper):\n",
           cb->depth_rows, base_file, cn->depth_rows, new_file);
    REPORT("  depth      p1 base -> new         z    worst rank z   F base -> new     change"
           "       z\n");
    double *gb = malloc((size_t)W * sizeof *gb), *gn = malloc((size_t)W * sizeof *gn);
    int rc = gb && gn ? SQ_OK : sq_error_oom(err, "gradient");
    *drop = 0;
    for (int d = 0; d < D && !rc; d++) {
        sq_curve rb = {0}, rn = {0};
        if ((rc = sq_accept_curve_depth_row(cb, base_file, i, d, &rb, err)) ||
            (rc = sq_accept_curve_depth_row(cn, new_file, j, d, &rn, err))) {
            sq_curve_clear(&rb);
            break;
        }
        cJSON *row = cJSON_CreateObject(), *jr = cJSON_CreateArray();
        sq_json_append(jd, row);
        sq_json_add(row, "depth", cJSON_CreateNumber(d + 1));
        sq_json_add(row, "ranks", jr);
        double worst = NAN;
        int worst_k = 0;
        for (int k = 0; k < W; k++) {
            sq_accept_rank_change r = sq_accept_rank_compare(&rb, &rn, k);
            sq_json_append(jr, rank_json(k, &r));
            if (!isnan(r.z) && (isnan(worst) || r.z < worst)) {
                worst = r.z;
                worst_k = k + 1;
            }
        }
        double Fb, Fn, vb = 0, vn = 0;
        int size_b, size_n;
        const char *how_b, *how_n;
        if (!(rc = o->optimal_F(&rb, o->budget, o->depth, &Fb, gb, &size_b, err)) &&
            !(rc = o->optimal_F(&rn, o->budget, o->depth, &Fn, gn, &size_n, err)) &&
            !(rc = sq_accept_F_variance(&rb, base_file, i, gb, &vb, &how_b, err)))
            rc = sq_accept_F_variance(&rn, new_file, j, gn, &vn, &how_n, err);
        if (!rc) {
            double dF = Fn - Fb, sF = sqrt(vb + vn);
            int dd = sq_accept_significant_drop(dF, sF, o->sigma);
            sq_accept_rank_change r1 = sq_accept_rank_compare(&rb, &rn, 0);
            REPORT("  %5d  %9.5f -> %9.5f  ", d + 1, r1.base, r1.now);
            if (!isnan(r1.z))
                REPORT("%+7.2f", r1.z);
            else
                REPORT("      -");
            if (!isnan(worst))
                REPORT("  %4d %+7.2f", worst_k, worst);
            else
                REPORT("          -");
            REPORT("  %7.4f -> %7.4f  %+8.4f", Fb, Fn, dF);
            if (sF > 0)
                REPORT("  %+6.2f", dF / sF);
            else
                REPORT("       -");
            REPORT("%s\n", dd ? "  SIGNIFICANT DROP" : "");
            sq_json_add(row, "optimal_F", optimal_F_json(Fb, Fn, sF, how_b, how_n));
            sq_json_add(row, "significant_drop", cJSON_CreateBool(dd));
            *drop |= dd;
        }
        sq_curve_clear(&rb);
        sq_curve_clear(&rn);
    }
    free(gb);
    free(gn);
    return rc;
}

int sq_accept_compare(const char *base_file, const char *new_file,
                      const sq_accept_compare_opts *o, cJSON **out, sq_error *err)
{
    sq_curve_set *b = NULL, *n = NULL;
    int rc;
    *out = NULL;
    int worst = SQ_OK, compared = 0, missing = 0;
    /* the report is built with plain calls and checked once, before it is used */
    sq_json_build jb = sq_json_build_begin();
    cJSON *root = cJSON_CreateObject(), *jcurves = cJSON_CreateArray();
    cJSON *jmissing = cJSON_CreateArray(), *jonly_new = cJSON_CreateArray();
    sq_json_add(root, "format", cJSON_CreateString(SQ_COMPARE_FORMAT));
    sq_json_add(root, "version", cJSON_CreateNumber(SQ_COMPARE_VERSION));
    sq_json_add(root, "baseline", cJSON_CreateString(base_file));
    sq_json_add(root, "new", cJSON_CreateString(new_file));
    sq_json_add(root, "budget", cJSON_CreateNumber(o->budget));
    sq_json_add(root, "depth", cJSON_CreateNumber(o->depth));
    sq_json_add(root, "sigma", cJSON_CreateNumber(o->sigma));
    sq_json_add(root, "curves", jcurves);
    sq_json_add(root, "missing_in_new", jmissing);
    sq_json_add(root, "only_in_new", jonly_new);
    if ((rc = sq_curve_set_load(base_file, &b, err)) ||
        (rc = sq_curve_set_load(new_file, &n, err)))
        goto done;
    for (int i = 0; i < b->n; i++) {
        const sq_curve *cb = &b->curves[i];
        if (o->only && strcmp(o->only, cb->name) != 0)
            continue;
        int j = -1;
        for (int q = 0; q < n->n; q++)
            if (strcmp(n->curves[q].name, cb->name) == 0)
                j = q;
        if (j < 0) {
            /* coverage that NEW lost: a failure, reported after the comparisons */
            REPORT("curve %s: only in %s, missing in %s\n", cb->name, base_file, new_file);
            sq_json_append(jmissing, cJSON_CreateString(cb->name));
            missing++;
            continue;
        }
        const sq_curve *cn = &n->curves[j];
        /* one name, two settings: comparing them would measure the settings, not a regression
         * (issue 27 W7) */
        int same_mode = (!cb->mode && !cn->mode) ||
                        (cb->mode && cn->mode && strcmp(cb->mode, cn->mode) == 0);
        int same_t = (isnan(cb->temperature) && isnan(cn->temperature)) ||
                     cb->temperature == cn->temperature;
        int same_p = (isnan(cb->top_p) && isnan(cn->top_p)) || cb->top_p == cn->top_p;
        if (!same_mode || !same_t || !same_p) {
            rc = sq_error_set(err, SQ_EDATA, "curve \"%s\": mode %s, temperature %g, top-p %g in "
                              "%s but mode %s, temperature %g, top-p %g in %s: one name for two "
                              "settings, refusing to compare them", cb->name,
                              cb->mode ? cb->mode : "?", cb->temperature, cb->top_p, base_file,
                              cn->mode ? cn->mode : "?", cn->temperature, cn->top_p, new_file);
            goto done;
        }
        if ((rc = sq_accept_curve_stats_verify(cb, base_file, i, err)) ||
            (rc = sq_accept_curve_stats_verify(cn, new_file, j, err)))
            goto done;
        compared++;
        if (cb->width != cn->width && o->warn)
            fprintf(o->warn, "%s: warning: curve %s: width %d in %s but %d in %s; ranks past %d "
                    "compare with probability 0\n", o->prog ? o->prog : "sequoia", cb->name,
                    cb->width, base_file, cn->width, new_file,
                    cb->width < cn->width ? cb->width : cn->width);
        cJSON *jc = cJSON_CreateObject(), *jr = cJSON_CreateArray();
        sq_json_append(jcurves, jc);
        sq_json_add(jc, "name", cJSON_CreateString(cb->name));
        sq_json_add(jc, "mode", cJSON_CreateString(cb->mode ? cb->mode : "?"));
        sq_json_add(jc, "positions_baseline", cJSON_CreateNumber((double)cb->positions));
        sq_json_add(jc, "positions_new", cJSON_CreateNumber((double)cn->positions));
        sq_json_add(jc, "width_baseline", cJSON_CreateNumber(cb->width));
        sq_json_add(jc, "width_new", cJSON_CreateNumber(cn->width));
        sq_json_add(jc, "ranks", jr);
        REPORT("curve %s (%s): positions %lld -> %lld\n", cb->name, cb->mode, cb->positions,
               cn->positions);
        REPORT("  rank   baseline        new     change        z\n");
        int W = cb->width > cn->width ? cb->width : cn->width;
        for (int k = 0; k < W; k++) {
            sq_accept_rank_change r = sq_accept_rank_compare(cb, cn, k);
            REPORT("  %4d  %9.5f  %9.5f  %+9.5f", k + 1, r.base, r.now, r.change);
            if (!isnan(r.z))
                REPORT("  %+7.2f\n", r.z);
            else
                REPORT("        -\n");
            sq_json_append(jr, rank_json(k, &r));
        }
        double Fb, Fn;
        double *gb = malloc((size_t)cb->width * sizeof *gb);
        double *gn = malloc((size_t)cn->width * sizeof *gn);
        if (!gb || !gn) {
            free(gb);
            free(gn);
            rc = sq_error_oom(err, "gradient");
            goto done;
        }
        int size_b, size_n;
        const char *how_b, *how_n;
        /* p itself (the depth rows, if any, are compared below): the tree and its F from p */
        sq_curve fb = *cb, fn = *cn;
        fb.depth_rows = fn.depth_rows = 0;
        fb.p_by_depth = fn.p_by_depth = fb.stderr_by_depth = fn.stderr_by_depth = NULL;
        if ((rc = o->optimal_F(&fb, o->budget, o->depth, &Fb, gb, &size_b, err)) ||
            (rc = o->optimal_F(&fn, o->budget, o->depth, &Fn, gn, &size_n, err))) {
            free(gb);
            free(gn);
            goto done;
        }
        double vb = 0, vn = 0;
        if (!(rc = sq_accept_F_variance(cb, base_file, i, gb, &vb, &how_b, err)))
            rc = sq_accept_F_variance(cn, new_file, j, gn, &vn, &how_n, err);
        free(gb);
        free(gn);
        if (rc)
            goto done;
        double dF = Fn - Fb, sF = sqrt(vb + vn);
        int drop = sq_accept_significant_drop(dF, sF, o->sigma);
        REPORT("  optimal tree (budget %d, depth %d): expected tokens/step %.4f -> %.4f, change "
               "%+.4f", o->budget, o->depth, Fb, Fn, dF);
        if (sF > 0)
            REPORT(" ± %.4f (z %+.2f)\n", sF, dF / sF);
        else
            REPORT(" (no standard error)\n");
        if (strcmp(how_b, "full covariance") || strcmp(how_n, "full covariance"))
            REPORT("  note: error of F from %s / %s\n", how_b, how_n);
        REPORT("  %s\n", drop ? "SIGNIFICANT DROP" : "no significant drop");
        sq_json_add(jc, "optimal_F", optimal_F_json(Fb, Fn, sF, how_b, how_n));
        if (cb->depth_rows || cn->depth_rows) {
            int ddrop = 0;
            if ((rc = compare_depths(cb, base_file, i, cn, new_file, j, o, jc, &ddrop, err)))
                goto done;
            drop |= ddrop;
        }
        sq_json_add(jc, "significant_drop", cJSON_CreateBool(drop));
        if (drop)
            worst = SQ_EFAIL;
    }
    for (int j = 0; j < n->n; j++) {
        int found = 0;
        for (int i = 0; i < b->n; i++)
            found |= strcmp(b->curves[i].name, n->curves[j].name) == 0;
        if (!found && (!o->only || strcmp(o->only, n->curves[j].name) == 0)) {
            REPORT("curve %s: only in %s, not compared\n", n->curves[j].name, new_file);
            sq_json_append(jonly_new, cJSON_CreateString(n->curves[j].name));
        }
    }
    if (o->only && compared == 0) {
        rc = sq_error_set(err, SQ_EUSAGE, "--curve: no curve named \"%s\" in both %s and %s",
                          o->only, base_file, new_file);
        goto done;
    }
    if (compared == 0) {
        rc = sq_error_set(err, SQ_EDATA, "%s: no curve name in common with %s", new_file,
                          base_file);
        goto done;
    }
    sq_json_add(root, "result", cJSON_CreateString(missing ? SQ_COMPARE_RESULT_MISSING
                                                    : worst ? SQ_COMPARE_RESULT_DROP
                                                            : SQ_COMPARE_RESULT_OK));
    if (sq_json_build_failed(jb)) {
        rc = sq_error_oom(err, "the comparison's report");
        goto done;
    }
    rc = missing ? SQ_EFAIL : worst;
done:
    root = sq_json_build_end(jb, root);
    if ((rc == SQ_OK || rc == SQ_EFAIL) && !root)
        rc = sq_error_oom(err, "the comparison's report");
    if (rc == SQ_OK || rc == SQ_EFAIL) {
        *out = root;
    } else {
        cJSON_Delete(root);
        *out = NULL;
    }
    sq_curve_set_free(b);
    sq_curve_set_free(n);
    return rc;
}

#undef REPORT
