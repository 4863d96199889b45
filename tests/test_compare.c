/* Suite 'compare': the regression check of acceptance curves as a library function
 * (planner/accept/compare.h, sq_accept_compare), on curve files written here. The tool around
 * it, sequoia-accept --compare, is tested in the suite 'cli-accept'. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "libsequoia/format/curve.h"
#include "planner/accept/compare.h"
#include "planner/regress.h"
#include "tests/testutil.h"

static char *dir;

static void setup(void)
{
    dir = tu_tmpdir();
}

static void teardown(void)
{
    tu_rmtree(dir);
    free(dir);
}

TestSuite(compare, .init = setup, .fini = teardown);

/* A curve file of n curves named names[i], each with p = scale[i] * (0.5, 0.2, 0.1, ...). */
static char *write_set(const char *file, int n, const char *const *names, const double *scale,
                       int width)
{
    sq_curve_set set = {.n = n, .curves = calloc((size_t)n, sizeof(sq_curve))};
    cr_assert_not_null(set.curves);
    for (int i = 0; i < n; i++) {
        double p[8];
        for (int k = 0; k < width; k++)
            p[k] = scale[i] * 0.5 / (double)(1 << k);
        sq_error err = {0};
        cr_assert_eq(sq_curve_init(&set.curves[i], names[i], "stochastic", p, width, &err), 0,
                     "%s", err.msg);
    }
    char *path = tu_path(dir, file);
    sq_error err = {0};
    cr_assert_eq(sq_curve_set_save(path, &set, &err), 0, "%s", err.msg);
    for (int i = 0; i < n; i++)
        sq_curve_clear(&set.curves[i]);
    free(set.curves);
    return path;
}

static sq_accept_compare_opts opts(FILE *report, FILE *warn)
{
    sq_accept_compare_opts o = {.budget = 16, .depth = 4, .sigma = 3, .only = NULL,
                                .optimal_F = sq_accept_optimal_F, .report = report,
                                .warn = warn, .prog = "test"};
    return o;
}

static const char *str(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    cr_assert(cJSON_IsString(v), "\"%s\" is not a string", key);
    return v->valuestring;
}

/* A file read back into a string (from a tmpfile). */
static char *slurp(FILE *f)
{
    long n = ftell(f);
    rewind(f);
    char *s = calloc((size_t)n + 1, 1);
    cr_assert_eq(fread(s, 1, (size_t)n, f), (size_t)n);
    return s;
}

Test(compare, identical_files_compare_ok_with_the_documented_members)
{
    const char *names[] = {"a", "b"};
    double scale[] = {1.0, 0.8};
    char *base = write_set("base.json", 2, names, scale, 4);
    FILE *rep = tmpfile();
    sq_accept_compare_opts o = opts(rep, NULL);
    cJSON *doc = NULL;
    sq_error err = {0};
    cr_assert_eq(sq_accept_compare(base, base, &o, &doc, &err), SQ_OK, "%s", err.msg);
    cr_assert_not_null(doc);
    cr_assert_str_eq(str(doc, "format"), SQ_COMPARE_FORMAT);
    cr_assert_str_eq(SQ_COMPARE_FORMAT, "sequoia-compare");
    cr_assert_eq(cJSON_GetObjectItem(doc, "version")->valueint, SQ_COMPARE_VERSION);
    cr_assert_str_eq(str(doc, "baseline"), base);
    cr_assert_str_eq(str(doc, "new"), base);
    cr_assert_eq(cJSON_GetObjectItem(doc, "budget")->valueint, 16);
    cr_assert_eq(cJSON_GetObjectItem(doc, "depth")->valueint, 4);
    cr_assert_eq(cJSON_GetObjectItem(doc, "sigma")->valuedouble, 3.0);
    cr_assert_str_eq(str(doc, "result"), SQ_COMPARE_RESULT_OK);
    cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(doc, "missing_in_new")), 0);
    cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(doc, "only_in_new")), 0);
    const cJSON *curves = cJSON_GetObjectItem(doc, "curves");
    cr_assert_eq(cJSON_GetArraySize(curves), 2);
    const cJSON *c = cJSON_GetArrayItem(curves, 1);
    cr_assert_str_eq(str(c, "name"), "b");
    cr_assert_str_eq(str(c, "mode"), "stochastic");
    cr_assert_eq(cJSON_GetObjectItem(c, "width_baseline")->valueint, 4);
    cr_assert_eq(cJSON_GetObjectItem(c, "width_new")->valueint, 4);
    const cJSON *ranks = cJSON_GetObjectItem(c, "ranks");
    cr_assert_eq(cJSON_GetArraySize(ranks), 4);
    const cJSON *r0 = cJSON_GetArrayItem(ranks, 0);
    cr_assert_eq(cJSON_GetObjectItem(r0, "rank")->valueint, 1);
    cr_assert_float_eq(cJSON_GetObjectItem(r0, "baseline")->valuedouble, 0.4, 1e-12);
    cr_assert_eq(cJSON_GetObjectItem(r0, "change")->valuedouble, 0.0);
    cr_assert(cJSON_IsNull(cJSON_GetObjectItem(r0, "z")), "no standard errors: z is null");
    const cJSON *F = cJSON_GetObjectItem(c, "optimal_F");
    cr_assert_gt(cJSON_GetObjectItem(F, "baseline")->valuedouble, 1.0);
    cr_assert_eq(cJSON_GetObjectItem(F, "change")->valuedouble, 0.0);
    cr_assert(cJSON_IsNull(cJSON_GetObjectItem(F, "stderr")));
    cr_assert(cJSON_IsFalse(cJSON_GetObjectItem(c, "significant_drop")));
    char *text = slurp(rep);
    cr_assert(strstr(text, "curve a (stochastic)") && strstr(text, "no significant drop"),
              "%s", text);
    free(text);
    fclose(rep);
    cJSON_Delete(doc);
    free(base);
}

Test(compare, a_drop_and_a_missing_curve_fail_with_the_document)
{
    const char *names[] = {"a", "b"};
    double sb[] = {1.0, 1.0}, sn[] = {0.5};
    char *base = write_set("base.json", 2, names, sb, 4);
    char *newf = write_set("new.json", 1, names, sn, 4);
    sq_accept_compare_opts o = opts(NULL, NULL);
    cJSON *doc = NULL;
    sq_error err = {0};
    cr_assert_eq(sq_accept_compare(base, newf, &o, &doc, &err), SQ_EFAIL);
    cr_assert_eq(err.status, SQ_OK, "a failed check is not an error: %s", err.msg);
    cr_assert_not_null(doc);
    cr_assert_str_eq(str(doc, "result"), SQ_COMPARE_RESULT_MISSING);
    cr_assert_str_eq(cJSON_GetArrayItem(cJSON_GetObjectItem(doc, "missing_in_new"), 0)->valuestring,
                     "b");
    const cJSON *c = cJSON_GetArrayItem(cJSON_GetObjectItem(doc, "curves"), 0);
    cr_assert(cJSON_IsTrue(cJSON_GetObjectItem(c, "significant_drop")));
    cJSON_Delete(doc);
    /* --curve a: only the drop */
    o.only = "a";
    cr_assert_eq(sq_accept_compare(base, newf, &o, &doc, &err), SQ_EFAIL);
    cr_assert_str_eq(str(doc, "result"), SQ_COMPARE_RESULT_DROP);
    cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(doc, "missing_in_new")), 0);
    cJSON_Delete(doc);
    /* the other way round: a rise, and "b" only in the new file */
    o.only = NULL;
    cr_assert_eq(sq_accept_compare(newf, base, &o, &doc, &err), SQ_OK, "%s", err.msg);
    cr_assert_str_eq(str(doc, "result"), SQ_COMPARE_RESULT_OK);
    cr_assert_str_eq(cJSON_GetArrayItem(cJSON_GetObjectItem(doc, "only_in_new"), 0)->valuestring,
                     "b");
    cJSON_Delete(doc);
    free(base);
    free(newf);
}

Test(compare, errors_leave_no_document_and_widths_warn)
{
    const char *names[] = {"a"}, *other[] = {"z"};
    double s[] = {1.0};
    char *base = write_set("base.json", 1, names, s, 4);
    char *wide = write_set("wide.json", 1, names, s, 6);
    char *z = write_set("z.json", 1, other, s, 4);
    char *none = tu_path(dir, "none.json");
    FILE *warn = tmpfile();
    sq_accept_compare_opts o = opts(NULL, warn);
    cJSON *doc = (cJSON *)1;
    sq_error err = {0};
    cr_assert_eq(sq_accept_compare(base, none, &o, &doc, &err), SQ_ENOINPUT);
    cr_assert_null(doc);
    cr_assert(strstr(err.msg, "none.json"), "%s", err.msg);
    memset(&err, 0, sizeof err);
    cr_assert_eq(sq_accept_compare(base, z, &o, &doc, &err), SQ_EDATA);
    cr_assert_null(doc);
    cr_assert(strstr(err.msg, "no curve name in common"), "%s", err.msg);
    memset(&err, 0, sizeof err);
    o.only = "q";
    cr_assert_eq(sq_accept_compare(base, base, &o, &doc, &err), SQ_EUSAGE);
    cr_assert_null(doc);
    o.only = NULL;
    memset(&err, 0, sizeof err);
    cr_assert_eq(sq_accept_compare(base, wide, &o, &doc, &err), SQ_OK, "%s", err.msg);
    cJSON_Delete(doc);
    char *text = slurp(warn);
    cr_assert(strstr(text, "test: warning: curve a: width 4 in ") && strstr(text, "but 6 in"),
              "%s", text);
    free(text);
    fclose(warn);
    free(base);
    free(wide);
    free(z);
    free(none);
}

/* ---- depth-dependent curves (issue 27) ------------------------------------------------------ */

#include "planner/accept/stats.h"

/* Statistics of U = 40 units of 10 positions whose per-rank means scatter around p (±0.02). */
static sq_accept_stats *fake_stats(const double *p, int W, unsigned seed)
{
    sq_accept_stats *s = sq_accept_stats_new(W);
    cr_assert_not_null(s);
    uint64_t x = seed * 2654435761u + 1;
    for (int u = 0; u < 40; u++) {
        double y[8];
        for (int k = 0; k < W; k++) {
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            double e = ((double)(x >> 11) / 9007199254740992.0 - 0.5) * 0.04;
            y[k] = 10 * (p[k] + (p[k] > 0.03 ? e : 0));
        }
        sq_accept_stats_add_unit(s, 10, y);
    }
    s->sequences = 40;
    return s;
}

/* A file with one curve "c" (width 4, base p = (0.5, 0.2, 0.1, 0.05)) and `rows` depth rows,
 * row d scaled by scale[d]; rows 0 gives a flat curve. */
static char *write_depth_set(const char *file, int rows, const double *scale)
{
    const double base[4] = {0.5, 0.2, 0.1, 0.05};
    sq_accept_stats *st[8];
    for (int d = 0; d < (rows ? rows : 1); d++) {
        double p[4];
        for (int k = 0; k < 4; k++)
            p[k] = base[k] * (rows ? scale[d] : 1.0);
        st[d] = fake_stats(p, 4, 11u + (unsigned)d);
    }
    sq_curve_set set = {.n = 1, .curves = calloc(1, sizeof(sq_curve))};
    cr_assert_not_null(set.curves);
    sq_accept_config cfg = {SQ_MODE_STOCHASTIC, 1.0, 1.0};
    sq_error err = {0};
    cJSON *seed = cJSON_CreateNumber(0);
    cr_assert_eq(sq_accept_curve_from_stats(&set.curves[0], "c", &cfg, st[0], 1, seed, "sequence",
                                            &err), SQ_OK, "%s", err.msg);
    cJSON_Delete(seed);
    int kept = -1;
    if (rows)
        cr_assert_eq(sq_accept_curve_add_depths(&set.curves[0], st, rows, &kept, &err), SQ_OK,
                     "%s", err.msg);
    cr_assert_eq(set.curves[0].depth_rows, rows);
    char *path = tu_path(dir, file);
    cr_assert_eq(sq_curve_set_save(path, &set, &err), 0, "%s", err.msg);
    sq_curve_clear(&set.curves[0]);
    free(set.curves);
    for (int d = 0; d < (rows ? rows : 1); d++)
        sq_accept_stats_free(st[d]);
    return path;
}

static const cJSON *depth_row(const cJSON *doc, int d)
{
    const cJSON *c = cJSON_GetArrayItem(cJSON_GetObjectItem(doc, "curves"), 0);
    const cJSON *by = cJSON_GetObjectItem(c, "by_depth");
    cr_assert(cJSON_IsArray(by), "no by_depth");
    const cJSON *r = cJSON_GetArrayItem(by, d);
    cr_assert_not_null(r);
    cr_assert_eq(cJSON_GetObjectItem(r, "depth")->valueint, d + 1);
    return r;
}

/* The same p, the same rows but the third 30% lower: a significant drop at depth 3 alone fails
 * the comparison; 0.2% lower (well inside the error bars) passes. */
Test(compare, depth_curves_fail_on_a_drop_at_any_depth)
{
    const double sb[3] = {1.0, 0.95, 0.9}, sn[3] = {1.0, 0.95, 0.63}, ss[3] = {1.0, 0.95, 0.898};
    char *base = write_depth_set("db.json", 3, sb);
    char *newf = write_depth_set("dn.json", 3, sn);
    char *same = write_depth_set("ds.json", 3, ss);
    FILE *rep = tmpfile();
    sq_accept_compare_opts o = opts(rep, NULL);
    cJSON *doc = NULL;
    sq_error err = {0};
    cr_assert_eq(sq_accept_compare(base, newf, &o, &doc, &err), SQ_EFAIL, "%s", err.msg);
    cr_assert_str_eq(str(doc, "result"), SQ_COMPARE_RESULT_DROP);
    const cJSON *c = cJSON_GetArrayItem(cJSON_GetObjectItem(doc, "curves"), 0);
    cr_assert(cJSON_IsTrue(cJSON_GetObjectItem(c, "significant_drop")));
    /* p is unchanged: the flat part sees nothing */
    cr_assert_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(c, "optimal_F"), "change")->valuedouble,
                 0.0);
    for (int d = 0; d < 3; d++) {
        const cJSON *r = depth_row(doc, d);
        cr_assert_eq(cJSON_IsTrue(cJSON_GetObjectItem(r, "significant_drop")), d == 2, "depth %d",
                     d + 1);
        const cJSON *F = cJSON_GetObjectItem(r, "optimal_F");
        cr_assert(cJSON_IsNumber(cJSON_GetObjectItem(F, "stderr")), "depth %d: no error bar",
                  d + 1);
        cr_assert_str_eq(str(F, "error_from"), "full covariance");
        cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(r, "ranks")), 4);
    }
    char *text = slurp(rep);
    cr_assert(strstr(text, "by depth") && strstr(text, "SIGNIFICANT DROP"), "%s", text);
    free(text);
    fclose(rep);
    cJSON_Delete(doc);
    o.report = NULL;
    cr_assert_eq(sq_accept_compare(base, same, &o, &doc, &err), SQ_OK, "%s", err.msg);
    cr_assert_str_eq(str(doc, "result"), SQ_COMPARE_RESULT_OK);
    cr_assert(cJSON_IsFalse(cJSON_GetObjectItem(depth_row(doc, 2), "significant_drop")));
    cJSON_Delete(doc);
    free(base);
    free(newf);
    free(same);
}

/* A flat baseline against a new file with depth rows: the flat curve is p at every depth, so
 * depths 1..3 are compared, and a deeper row that drops fails. Rows of different counts: the
 * shorter reuses its last row. */
Test(compare, flat_and_depth_curves_compare_depth_by_depth)
{
    const double flat[1] = {1.0}, rows[3] = {1.0, 1.0, 0.6}, two[2] = {1.0, 1.0};
    char *base = write_depth_set("flat.json", 0, flat);
    char *newf = write_depth_set("rows.json", 3, rows);
    char *shorter = write_depth_set("two.json", 2, two);
    sq_accept_compare_opts o = opts(NULL, NULL);
    cJSON *doc = NULL;
    sq_error err = {0};
    cr_assert_eq(sq_accept_compare(base, newf, &o, &doc, &err), SQ_EFAIL, "%s", err.msg);
    cr_assert(cJSON_IsFalse(cJSON_GetObjectItem(depth_row(doc, 0), "significant_drop")));
    cr_assert(cJSON_IsTrue(cJSON_GetObjectItem(depth_row(doc, 2), "significant_drop")));
    cJSON_Delete(doc);
    /* two rows against three: depth 3 of the shorter one is its row 2 (= 1.0): no drop the
     * other way round */
    cr_assert_eq(sq_accept_compare(newf, shorter, &o, &doc, &err), SQ_OK, "%s", err.msg);
    cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(
                     cJSON_GetArrayItem(cJSON_GetObjectItem(doc, "curves"), 0), "by_depth")), 3);
    cJSON_Delete(doc);
    cr_assert_eq(sq_accept_compare(shorter, newf, &o, &doc, &err), SQ_EFAIL, "%s", err.msg);
    cJSON_Delete(doc);
    free(base);
    free(newf);
    free(shorter);
}

/* Depth rows whose statistics were edited (or rows edited under them) are refused, as p is. */
Test(compare, edited_depth_statistics_are_refused)
{
    const double sb[2] = {1.0, 0.9};
    char *base = write_depth_set("eb.json", 2, sb);
    sq_error err = {0};
    sq_curve_set *set = NULL;
    cr_assert_eq(sq_curve_set_load(base, &set, &err), 0, "%s", err.msg);
    set->curves[0].p_by_depth[4 + 1] += 0.01;   /* row 2, rank 2 */
    char *edited = tu_path(dir, "edited.json");
    cr_assert_eq(sq_curve_set_save(edited, set, &err), 0, "%s", err.msg);
    sq_curve_set_free(set);
    sq_accept_compare_opts o = opts(NULL, NULL);
    cJSON *doc = NULL;
    cr_assert_eq(sq_accept_compare(base, edited, &o, &doc, &err), SQ_EDATA);
    cr_assert_null(doc);
    cr_assert(strstr(err.msg, edited) && strstr(err.msg, "curves[0].stats_by_depth[1]") &&
              strstr(err.msg, "p_by_depth[1][1]"), "%s", err.msg);
    free(base);
    free(edited);
}
