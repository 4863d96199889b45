/* Out of memory is an error, never an abort (docs/design.md §10, docs/robustness.md).
 *
 * sq_json_inject_oom (libsequoia/base/json.h) makes the k-th cJSON allocation of the thread
 * fail. For the curve, plan and profile files (and the planner's table), every allocation
 * that building the JSON tree makes is failed in turn: the builder must return NULL, the save
 * must return SQ_ESOFTWARE with a message and leave no file, and nothing may abort (criterion
 * runs each test in its own process and reports an abort as a crash). With no failure the
 * same calls give the same tree as before, byte for byte. */
#include <criterion/criterion.h>

#include <stdlib.h>
#include <string.h>

#include "libsequoia/base/json.h"
#include "libsequoia/base/stats.h"
#include "libsequoia/format/curve.h"
#include "libsequoia/format/plan.h"
#include "libsequoia/format/profile.h"
#include "planner/dp.h"
#include "planner/table.h"
#include "tests/testutil.h"

/* Most failure points one build is tried with: all of them up to this, else this many spread
 * over the whole build (the first and the last included). */
#define MAX_POINTS 1500

typedef cJSON *(*build_fn)(const void *obj);

static char *render(cJSON *j)
{
    char *s = sq_json_to_string(j, NULL);
    cr_assert_not_null(s);
    return s;
}

/* The allocations one build makes, and its text with nothing failing. */
static long count_allocations(build_fn build, const void *obj, char **text)
{
    sq_json_inject_oom(-1);
    cJSON *j = build(obj);
    long n = sq_json_inject_oom(-1);
    cr_assert_not_null(j, "the build fails with nothing injected");
    *text = render(j);
    cJSON_Delete(j);
    return n;
}

static long point(long i, long points, long n)
{
    return points == n ? i : (long)((double)i * (double)(n - 1) / (double)(points - 1));
}

/* Fails each allocation point of `build` in turn: NULL every time, and afterwards (nothing
 * injected) the same text as a build that never failed. Returns the points tried. */
static long fail_each(const char *what, build_fn build, const void *obj)
{
    char *want;
    long n = count_allocations(build, obj, &want);
    cr_assert_gt(n, 10, "%s: %ld allocations", what, n);
    long points = n < MAX_POINTS ? n : MAX_POINTS;
    long live = sq_json_live_blocks();
    for (long i = 0; i < points; i++) {
        long k = point(i, points, n);
        sq_json_inject_oom(k);
        cJSON *j = build(obj);
        sq_json_inject_oom(-1);
        if (j) {
            cJSON_Delete(j);
            cr_assert_fail("%s: allocation %ld of %ld failed, but the build returned a tree", what,
                           k, n);
        }
        cr_assert_eq(sq_json_live_blocks(), live, "%s: allocation %ld of %ld failed, and %ld "
                     "blocks were not freed", what, k, n, sq_json_live_blocks() - live);
    }
    cJSON *j = build(obj);
    cr_assert_not_null(j);
    char *got = render(j);
    cr_assert_str_eq(got, want, "%s: a build after the failures differs", what);
    free(got);
    free(want);
    cJSON_Delete(j);
    return points;
}

static cJSON *curves_json(const void *o) { return sq_curve_set_to_json(o); }
static cJSON *plan_json(const void *o) { return sq_plan_to_json(o); }
static cJSON *profile_json(const void *o) { return sq_profile_to_json(o); }

static void *load(const char *rel, int kind)
{
    char *path = tu_source_path(rel);
    sq_error err = {0};
    void *out = NULL;
    int rc = kind == 0   ? sq_curve_set_load(path, (sq_curve_set **)&out, &err)
             : kind == 1 ? sq_plan_load(path, (sq_plan **)&out, &err)
                         : sq_profile_load(path, (sq_profile **)&out, &err);
    cr_assert_eq(rc, SQ_OK, "%s", err.msg);
    free(path);
    return out;
}

Test(oom, curve_file_builder_fails_cleanly_at_every_allocation)
{
    sq_curve_set *set = load("data/speedup/curves.json", 0);
    /* the estimator's curves carry their sufficient statistics (W x W sums): a large tree */
    fail_each("curves", curves_json, set);
    sq_curve_set_free(set);
}

Test(oom, plan_file_builder_fails_cleanly_at_every_allocation)
{
    sq_plan *plan = load("data/speedup/plan_T0.6.json", 1);
    cr_assert_not_null(plan->hardware, "a plan with a hardware section, duplicated on output");
    fail_each("plan", plan_json, plan);
    sq_plan_free(plan);
}

Test(oom, profile_file_builder_fails_cleanly_at_every_allocation)
{
    sq_profile *p = load("data/speedup/profile_target.json", 2);
    fail_each("profile", profile_json, p);
    sq_profile_free(p);
}

typedef struct table_in {
    const sq_dp *dp;
    const sq_curve *curve;
} table_in;

static cJSON *table_json(const void *o)
{
    const table_in *t = o;
    return sq_table_to_json(t->dp, t->curve);
}

Test(oom, table_builder_fails_cleanly_at_every_allocation)
{
    sq_dp_params prm = sq_dp_default_params();
    prm.budget = 40;
    prm.depth = 8;
    prm.curve = sq_curve_default();
    sq_dp *dp = NULL;
    sq_error err = {0};
    cr_assert_eq(sq_dp_solve(&prm, &dp, &err), SQ_OK, "%s", err.msg);
    table_in in = {dp, prm.curve};
    fail_each("table", table_json, &in);
    sq_dp_free(dp);
}

/* The saves: SQ_ESOFTWARE, a message that says what ran out, and no file (the output is
 * atomic: nothing is created when the tree cannot be built). */
Test(oom, saves_return_an_error_and_write_nothing)
{
    sq_curve_set *set = load("data/speedup/curves.json", 0);
    sq_plan *plan = load("data/speedup/plan_T0.6.json", 1);
    sq_profile *prof = load("data/speedup/profile_target.json", 2);
    char *dir = tu_tmpdir();
    const char *names[3] = {"curves.json", "plan.json", "profile.json"};
    for (int kind = 0; kind < 3; kind++) {
        char *path = tu_path(dir, names[kind]);
        for (long k = 0; k < 40; k += 3) {
            sq_error err = {0};
            sq_json_inject_oom(k);
            int rc = kind == 0   ? sq_curve_set_save(path, set, &err)
                     : kind == 1 ? sq_plan_save(path, plan, &err)
                                 : sq_profile_save(path, prof, &err);
            sq_json_inject_oom(-1);
            cr_assert_eq(rc, SQ_ESOFTWARE, "%s, allocation %ld: status %d (%s)", names[kind], k,
                         rc, err.msg);
            cr_assert(strstr(err.msg, "out of memory") && strstr(err.msg, names[kind]),
                      "message: %s", err.msg);
            cr_assert(!tu_exists(path), "%s written although its tree failed", path);
        }
        sq_error err = {0};
        int rc = kind == 0   ? sq_curve_set_save(path, set, &err)
                 : kind == 1 ? sq_plan_save(path, plan, &err)
                             : sq_profile_save(path, prof, &err);
        cr_assert_eq(rc, SQ_OK, "%s", err.msg);
        cr_assert(tu_exists(path));
        free(path);
    }
    tu_rmtree(dir);
    sq_curve_set_free(set);
    sq_plan_free(plan);
    sq_profile_free(prof);
}

/* The builders nest (a plan holds a curve, a curve set holds curves): a failure inside the
 * inner one fails the outer one, and items that could not be attached are freed when the
 * build ends: no cJSON block is left behind. */
Test(oom, nested_builds_and_orphans)
{
    long live = sq_json_live_blocks();
    sq_json_build outer = sq_json_build_begin();
    cJSON *root = cJSON_CreateObject();
    cJSON *late = cJSON_CreateArray();
    sq_json_inject_oom(0);
    sq_json_add(root, "late", late);   /* the key's copy fails: `late` becomes an orphan ...   */
    sq_json_inject_oom(-1);
    sq_json_append(late, cJSON_CreateNumber(1));   /* ... that may still be filled */
    sq_json_build inner = sq_json_build_begin();
    cJSON *ok = sq_json_build_end(inner, sq_json_number_array((const double[]){1, 2}, 2));
    cr_assert_not_null(ok, "an inner build that did not fail succeeds");
    sq_json_add(root, "ok", ok);
    cr_assert(sq_json_build_failed(outer));
    cr_assert_null(sq_json_build_end(outer, root));
    cr_assert_eq(sq_json_live_blocks(), live, "the failed build left %ld blocks",
                 sq_json_live_blocks() - live);

    /* nothing failing: the same calls give the tree */
    outer = sq_json_build_begin();
    root = cJSON_CreateObject();
    late = cJSON_CreateArray();
    sq_json_add(root, "late", late);
    sq_json_append(late, cJSON_CreateNumber(1));
    cr_assert(!sq_json_build_failed(outer));
    root = sq_json_build_end(outer, root);
    cr_assert_not_null(root);
    char *s = render(root);
    cr_assert_str_eq(s, "{\n  \"late\": [1]\n}\n");
    free(s);
    cJSON_Delete(root);
    cr_assert_eq(sq_json_live_blocks(), live);
}

/* The statistics that used to allocate scratch (and abort without it) no longer allocate:
 * their results are those of the formulas, pooled bins included. */
Test(oom, chisq_pooling_without_scratch)
{
    /* bins 0..3 expected 50, 30, 15, 5 (n = 100); min_expected 10 pools bin 3 (5) with the
     * remainder (0): the pool (5) joins the smallest kept bin, bin 2 (15 -> 20). */
    const double counts[4] = {48, 33, 12, 7};
    const double probs[4] = {0.5, 0.3, 0.15, 0.05};
    sq_chisq r = sq_chisq_gof(counts, probs, 4, 10.0);
    double want = (48 - 50.0) * (48 - 50.0) / 50 + (33 - 30.0) * (33 - 30.0) / 30 +
                  (19 - 20.0) * (19 - 20.0) / 20;
    cr_assert_eq(r.bins, 3);
    cr_assert_eq(r.df, 2);
    cr_assert_float_eq(r.stat, want, 1e-12);
    /* a pool large enough is a bin of its own */
    const double c2[3] = {30, 30, 40};
    const double p2[3] = {0.3, 0.3, 0.2};   /* remainder 0.2: 20 expected, 0 observed */
    r = sq_chisq_gof(c2, p2, 3, 5.0);
    want = 0.0 + 0.0 + (40 - 20.0) * (40 - 20.0) / 20 + (0 - 20.0) * (0 - 20.0) / 20;
    cr_assert_eq(r.bins, 4);
    cr_assert_float_eq(r.stat, want, 1e-12);
}
