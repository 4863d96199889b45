/* sequoia-profile --merge (profiler/merge.h; issue 26): profiles of one setup taken at different
 * times pooled into one. The pool against a brute force over the inputs, a merge of one file,
 * the refusal of inputs that differ, atomic outputs, an output that is an input, and the pooled
 * file read by the profile reader and by sequoia-plan. */
#include <criterion/criterion.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "libsequoia/base/json.h"
#include "libsequoia/format/profile.h"
#include "profiler/merge.h"
#include "tests/testutil.h"

static const char *bin(const char *var)
{
    const char *b = getenv(var);
    cr_assert_not_null(b, "%s is not set (run through meson test)", var);
    return b;
}

/* ---- the pool against a brute force ------------------------------------------------------- */

static unsigned long long rng_state;

static double urand(void)
{
    rng_state = rng_state * 6364136223846793005ULL + 1442695040888963407ULL;
    return (double)(rng_state >> 11) / 9007199254740992.0;
}

static sq_profile_point rand_point(int batch, int tokens, int with_percentiles)
{
    double m = 0.05 + 10 * urand();
    return (sq_profile_point){.batch = batch, .tokens = tokens, .median_ms = m,
                              .p10_ms = with_percentiles ? m * (0.5 + 0.5 * urand()) : NAN,
                              .p90_ms = with_percentiles ? m * (1 + urand()) : NAN,
                              .samples = 1 + (int)(30 * urand())};
}

/* A profile of batch sizes 1 and 2 at 1, 2, 4, 8 tokens, with a step section whose draft_first
 * and draft_level tables hold a random non-empty subset of {1, 2, 3} and {1, 2, 4}. */
static sq_profile *rand_profile(int with_percentiles)
{
    static const int toks[] = {1, 2, 4, 8};
    sq_profile *p = calloc(1, sizeof *p);
    p->device = strdup("d");
    p->backend = strdup("cpu");
    p->dtype = strdup("f32");
    p->threads = 1;
    p->prefix = 64;
    p->model = cJSON_Parse("{\"name\":\"m\",\"dim\":8}");
    p->n = 8;
    p->points = calloc(8, sizeof *p->points);
    for (int i = 0; i < 8; i++)
        p->points[i] = rand_point(1 + i / 4, toks[i % 4], with_percentiles);
    p->step = calloc(1, sizeof *p->step);
    p->step->draft = cJSON_Parse("{\"dim\":4}");
    static const int keys[SQ_STEP_PARTS][3] = {{1, 2, 3}, {1, 2, 3}, {1, 2, 4}, {1, 2, 3},
                                               {1, 2, 4}};
    for (int k = 0; k < SQ_STEP_PARTS; k++) {
        p->step->pts[k] = calloc(3, sizeof *p->step->pts[k]);
        int subset = k == SQ_STEP_DRAFT_FIRST || k == SQ_STEP_DRAFT_LEVEL || k == SQ_STEP_EXPAND;
        int mask = subset ? 1 + (int)(7 * urand()) % 7 : 7;
        for (int j = 0; j < 3; j++)
            if (mask & (1 << j))
                p->step->pts[k][p->step->n[k]++] = rand_point(1, keys[k][j], with_percentiles);
    }
    if (urand() < 0.9) {   /* the context the steps ran at; else unknown */
        p->step->context_min = 1 + (int)(100 * urand());
        p->step->context_max = p->step->context_min + (int)(100 * urand());
        p->step->context_mean = p->step->context_min +
                                urand() * (p->step->context_max - p->step->context_min);
    }
    return p;
}

static double brute_median(double *v, int n)
{
    for (int i = 1; i < n; i++)   /* insertion sort */
        for (int j = i; j > 0 && v[j] < v[j - 1]; j--) {
            double t = v[j];
            v[j] = v[j - 1];
            v[j - 1] = t;
        }
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* The pooled point of (batch, tokens) over the tables tab[s][0..n[s]) computed by hand. */
static void check_point(const sq_profile_point *got, const sq_profile_point *const *tab,
                        const int *n, int ns, sq_merge_pool pool, const char *what)
{
    double med[16], lo[16], hi[16];
    int m = 0, ml = 0, mh = 0, samples = 0;
    for (int s = 0; s < ns; s++)
        for (int i = 0; i < n[s]; i++)
            if (tab[s][i].batch == got->batch && tab[s][i].tokens == got->tokens) {
                med[m++] = tab[s][i].median_ms;
                if (!isnan(tab[s][i].p10_ms))
                    lo[ml++] = tab[s][i].p10_ms;
                if (!isnan(tab[s][i].p90_ms))
                    hi[mh++] = tab[s][i].p90_ms;
                samples += tab[s][i].samples;
            }
    cr_assert_gt(m, 0, "%s: %dx%d is in no source", what, got->batch, got->tokens);
    double sum = 0;
    for (int i = 0; i < m; i++)
        sum += med[i];
    double want = pool == SQ_POOL_MEAN ? sum / m : brute_median(med, m);
    cr_assert_float_eq(got->median_ms, want, 1e-12, "%s %dx%d: %.17g, brute force %.17g", what,
                       got->batch, got->tokens, got->median_ms, want);
    if (ml)
        cr_assert_float_eq(got->p10_ms, fmin(brute_median(lo, ml), want), 1e-12, "%s", what);
    else
        cr_assert(isnan(got->p10_ms), "%s: no source has a p10", what);
    if (mh)
        cr_assert_float_eq(got->p90_ms, fmax(brute_median(hi, mh), want), 1e-12, "%s", what);
    else
        cr_assert(isnan(got->p90_ms), "%s: no source has a p90", what);
    cr_assert_eq(got->samples, samples, "%s: samples are summed", what);
}

Test(merge, pooled_points_are_the_median_of_the_sources_by_brute_force)
{
    rng_state = 2026;
    for (int trial = 0; trial < 40; trial++) {
        int ns = 1 + trial % 7;
        sq_profile *in[8];
        const char *names[8] = {"a", "b", "c", "d", "e", "f", "g", "h"};
        for (int s = 0; s < ns; s++)
            in[s] = rand_profile(trial % 5 != 4);   /* every 5th trial: no percentiles */
        sq_profile *m = NULL;
        sq_merge_drift d;
        sq_error err = {0};
        const sq_merge_pool pool = trial % 3 == 2 ? SQ_POOL_MEAN : SQ_POOL_MEDIAN;
        cr_assert_eq(sq_profile_merge((const sq_profile *const *)in, names, ns, pool, &m, &d, &err),
                     SQ_OK, "%s", err.msg);
        cr_assert_eq(sq_profile_validate(m, "m", &err), SQ_OK, "%s", err.msg);
        cr_assert_eq(m->n, 8);
        const sq_profile_point *tab[8];
        int n[8];
        double worst = 0;
        for (int i = 0; i < 8; i++) {
            for (int s = 0; s < ns; s++)
                tab[s] = in[s]->points, n[s] = in[s]->n;
            cr_assert_eq(m->points[i].batch, in[0]->points[i].batch);
            cr_assert_eq(m->points[i].tokens, in[0]->points[i].tokens);
            check_point(&m->points[i], tab, n, ns, pool, "points");
            double lo = INFINITY, hi = 0;
            for (int s = 0; s < ns; s++)
                lo = fmin(lo, in[s]->points[i].median_ms), hi = fmax(hi, in[s]->points[i].median_ms);
            worst = fmax(worst, (hi - lo) / m->points[i].median_ms);
        }
        cr_assert_float_eq(d.max, worst, 1e-12, "the drift is the widest spread of the medians");
        for (int k = 0; k < SQ_STEP_PARTS; k++) {
            /* the union of the sources' token counts, increasing */
            int want[3] = {0}, nw = 0;
            for (int s = 0; s < ns; s++)
                for (int i = 0; i < in[s]->step->n[k]; i++) {
                    int t = in[s]->step->pts[k][i].tokens, seen = 0;
                    for (int j = 0; j < nw; j++)
                        seen |= want[j] == t;
                    if (!seen)
                        want[nw++] = t;
                }
            cr_assert_eq(m->step->n[k], nw, "step.%s: the union of the sources' counts",
                         sq_step_part_name(k));
            for (int i = 0; i < m->step->n[k]; i++) {
                if (i)
                    cr_assert_gt(m->step->pts[k][i].tokens, m->step->pts[k][i - 1].tokens);
                for (int s = 0; s < ns; s++)
                    tab[s] = in[s]->step->pts[k], n[s] = in[s]->step->n[k];
                check_point(&m->step->pts[k][i], tab, n, ns, pool, sq_step_part_name(k));
            }
        }
        cr_assert(cJSON_Compare(m->model, in[0]->model, 1));
        cr_assert(cJSON_Compare(m->step->draft, in[0]->step->draft, 1));
        /* the context: the mean of the means, the least and the most; unknown if one is */
        double mean = 0;
        int lo = INT_MAX, hi = 0, known = 1;
        for (int s = 0; s < ns; s++) {
            known &= in[s]->step->context_max > 0;
            mean += in[s]->step->context_mean;
            lo = in[s]->step->context_min < lo ? in[s]->step->context_min : lo;
            hi = in[s]->step->context_max > hi ? in[s]->step->context_max : hi;
        }
        if (known) {
            cr_assert_float_eq(m->step->context_mean, mean / ns, 1e-9);
            cr_assert_eq(m->step->context_min, lo);
            cr_assert_eq(m->step->context_max, hi);
        } else {
            cr_assert(m->step->context_max == 0 && m->step->context_min == 0 &&
                      m->step->context_mean == 0, "unknown in one source: unknown");
        }
        sq_profile_free(m);
        for (int s = 0; s < ns; s++)
            sq_profile_free(in[s]);
    }
}

/* Field by field (a memcmp of the structs would read their padding): doubles equal, or both
 * NaN (an unknown percentile). */
static int same_double(double a, double b)
{
    return a == b || (isnan(a) && isnan(b));
}

static void assert_same_points(const sq_profile_point *a, const sq_profile_point *b, int n)
{
    for (int i = 0; i < n; i++)
        cr_assert(a[i].batch == b[i].batch && a[i].tokens == b[i].tokens &&
                      a[i].samples == b[i].samples && same_double(a[i].median_ms, b[i].median_ms) &&
                      same_double(a[i].p10_ms, b[i].p10_ms) && same_double(a[i].p90_ms, b[i].p90_ms),
                  "point %d: (%d, %d, %.17g, %.17g, %.17g, %d) against (%d, %d, %.17g, %.17g, %.17g, %d)",
                  i, a[i].batch, a[i].tokens, a[i].median_ms, a[i].p10_ms, a[i].p90_ms,
                  a[i].samples, b[i].batch, b[i].tokens, b[i].median_ms, b[i].p10_ms, b[i].p90_ms,
                  b[i].samples);
}

Test(merge, a_merge_of_one_profile_is_its_points)
{
    rng_state = 7;
    sq_profile *p = rand_profile(1);
    const char *name = "only.json";
    sq_profile *m = NULL;
    sq_merge_drift d;
    sq_error err = {0};
    cr_assert_eq(sq_profile_merge((const sq_profile *const *)&p, &name, 1, SQ_POOL_MEDIAN, &m, &d, &err), SQ_OK,
                 "%s", err.msg);
    cr_assert_eq(m->n, p->n);
    assert_same_points(m->points, p->points, p->n);
    for (int k = 0; k < SQ_STEP_PARTS; k++) {
        cr_assert_eq(m->step->n[k], p->step->n[k]);
        assert_same_points(m->step->pts[k], p->step->pts[k], p->step->n[k]);
    }
    cr_assert_eq(d.median, 0.0);
    cr_assert_eq(d.max, 0.0);
    sq_profile_free(m);
    sq_profile_free(p);
}

Test(merge, sources_that_differ_are_refused_naming_the_file_and_the_field)
{
    static const char *const cases[] = {"prefix", "threads", "model.dim", "points[3]",
                                        "backend", "dtype", "step", "step.target[1]",
                                        "step.draft.dim", "device"};
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        rng_state = 11 + c;
        sq_profile *in[2] = {rand_profile(1), rand_profile(1)};
        sq_profile *b = in[1];
        const char *f = cases[c];
        if (!strcmp(f, "prefix"))
            b->prefix = 100;
        else if (!strcmp(f, "threads"))
            b->threads = 2;
        else if (!strcmp(f, "model.dim"))
            cJSON_ReplaceItemInObject(b->model, "dim", cJSON_CreateNumber(16));
        else if (!strcmp(f, "points[3]"))
            b->points[3].tokens = 9;
        else if (!strcmp(f, "backend"))
            free(b->backend), b->backend = strdup("cuda");
        else if (!strcmp(f, "dtype"))
            free(b->dtype), b->dtype = strdup("bf16");
        else if (!strcmp(f, "step")) {
            for (int k = 0; k < SQ_STEP_PARTS; k++)
                free(b->step->pts[k]);
            cJSON_Delete(b->step->draft);
            free(b->step);
            b->step = NULL;
        } else if (!strcmp(f, "step.target[1]"))
            b->step->pts[SQ_STEP_TARGET][1].tokens = 5;
        else if (!strcmp(f, "step.draft.dim"))
            cJSON_ReplaceItemInObject(b->step->draft, "dim", cJSON_CreateNumber(5));
        else
            free(b->device), b->device = strdup("another CPU");
        const char *names[2] = {"first.json", "second.json"};
        sq_profile *m = NULL;
        sq_error err = {0};
        cr_assert_eq(sq_profile_merge((const sq_profile *const *)in, names, 2, SQ_POOL_MEDIAN, &m, NULL, &err),
                     SQ_EDATA, "%s", f);
        cr_assert_null(m);
        char want[64];
        snprintf(want, sizeof want, "second.json: %s: ", f);
        cr_assert(strstr(err.msg, want) && strstr(err.msg, "first.json has"), "%s: %s", f,
                  err.msg);
        sq_profile_free(in[0]);
        sq_profile_free(in[1]);
    }
}

/* ---- the tool ----------------------------------------------------------------------------- */

/* A profile file: points 1, 4, 16 tokens at scale * (2, 3, 6) ms, a step section, taken from
 * `start` to `end` (measured_at; NULL: none), prefix `prefix`. */
static void write_profile(const char *path, double scale, int prefix, const char *start,
                          const char *end, int with_step)
{
    char at[160] = "", step[900] = "", text[2400];
    if (start)
        snprintf(at, sizeof at, ",\"measured_at\":{\"start\":\"%s\",\"end\":\"%s\"}", start, end);
    if (with_step)
        snprintf(step, sizeof step,
                 ",\"step\":{\"draft\":{\"dim\":4},"
                 "\"target\":[{\"tokens\":1,\"median_ms\":%.17g,\"p10_ms\":%.17g,\"p90_ms\":%.17g,"
                 "\"samples\":21},{\"tokens\":4,\"median_ms\":%.17g,\"samples\":21}],"
                 "\"draft_first\":[{\"tokens\":1,\"median_ms\":%.17g,\"samples\":21}],"
                 "\"draft_level\":[{\"tokens\":1,\"median_ms\":%.17g,\"samples\":21}],"
                 "\"overhead\":[{\"tokens\":1,\"median_ms\":0.01,\"samples\":21},"
                 "{\"tokens\":4,\"median_ms\":%.17g,\"samples\":21}]}",
                 2.2 * scale, 2.1 * scale, 2.4 * scale, 3.6 * scale, 0.5 * scale, 0.3 * scale,
                 0.04 * scale);
    snprintf(text, sizeof text,
             "{\"format\":\"sequoia-profile\",\"version\":1,\"device\":\"cpu0 (1 thread)\","
             "\"backend\":\"cpu\",\"threads\":1,\"dtype\":\"f32\",\"prefix\":%d,"
             "\"model\":{\"name\":\"t\",\"dim\":8},\"points\":["
             "{\"tokens\":1,\"median_ms\":%.17g,\"p10_ms\":%.17g,\"p90_ms\":%.17g,\"samples\":21},"
             "{\"tokens\":4,\"median_ms\":%.17g,\"p10_ms\":%.17g,\"p90_ms\":%.17g,\"samples\":21},"
             "{\"tokens\":16,\"median_ms\":%.17g,\"p10_ms\":%.17g,\"p90_ms\":%.17g,\"samples\":21}]"
             "%s%s}",
             prefix, 2 * scale, 1.9 * scale, 2.2 * scale, 3 * scale, 2.9 * scale, 3.3 * scale,
             6 * scale, 5.8 * scale, 6.5 * scale, at, step);
    tu_write(path, text);
}

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

TestSuite(merge_tool, .init = setup, .fini = teardown);

Test(merge_tool, pools_three_slices_records_its_sources_and_plans)
{
    char *a = tu_path(dir, "a.json"), *b = tu_path(dir, "b.json"), *c = tu_path(dir, "c.json");
    char *out = tu_path(dir, "pooled.json"), *plan = tu_path(dir, "plan.json");
    write_profile(a, 1.0, 64, "2026-12-01T20:00:00Z", "2026-12-01T20:00:11Z", 1);
    write_profile(b, 1.3, 64, "2026-12-01T20:01:00Z", "2026-12-01T20:01:11Z", 1);
    write_profile(c, 0.9, 64, "2026-12-01T20:02:00Z", "2026-12-01T20:02:12Z", 1);
    char *argv[] = {(char *)bin("SQ_PROFILE_BIN"), "--merge", a, b, c, "-o", out, NULL};
    char *so = NULL, *se = NULL;
    int rc = tu_run(argv, &so, &se);
    cr_assert_eq(rc, 0, "exit %d: %s", rc, se);
    cr_assert(strstr(se, "pooled 3 profiles over 132 s"), "%s", se);
    sq_profile *p = NULL;
    sq_error err = {0};
    cr_assert_eq(sq_profile_load(out, &p, &err), SQ_OK, "%s", err.msg);
    /* the median of 1, 1.3 and 0.9 times the shape is 1.0: a's points */
    static const double want[] = {2, 3, 6};
    for (int i = 0; i < 3; i++) {
        cr_assert_float_eq(p->points[i].median_ms, want[i], 1e-12);
        cr_assert_eq(p->points[i].samples, 63);
    }
    cr_assert_float_eq(p->step->pts[SQ_STEP_TARGET][1].median_ms, 3.6, 1e-12);
    cr_assert(isnan(p->step->pts[SQ_STEP_TARGET][1].p10_ms), "no source has it");
    cr_assert_float_eq(p->step->pts[SQ_STEP_DRAFT_LEVEL][0].median_ms, 0.3, 1e-12);
    cJSON *j = NULL;
    cr_assert_eq(sq_json_load(out, &j, &err), SQ_OK);
    const cJSON *mg = sq_json_field(j, "merged");
    cr_assert_eq(sq_json_field(mg, "sources")->valueint, 3);
    cr_assert_float_eq(sq_json_field(mg, "span_s")->valuedouble, 132, 1e-9);
    cr_assert_eq(cJSON_GetArraySize(sq_json_field(mg, "files")), 3);
    cr_assert_str_eq(cJSON_GetStringValue(sq_json_field(sq_json_field(j, "measured_at"), "start")),
                     "2026-12-01T20:00:00Z");
    cr_assert_str_eq(cJSON_GetStringValue(sq_json_field(sq_json_field(j, "measured_at"), "end")),
                     "2026-12-01T20:02:12Z");
    /* (1.3 - 0.9) / 1.0 at every point */
    cr_assert_float_eq(sq_json_field(sq_json_field(mg, "drift"), "max")->valuedouble, 0.4, 1e-9);
    cr_assert(cJSON_IsTrue(sq_json_field(sq_json_field(j, "stability"), "credible")));
    cJSON_Delete(j);
    /* the planner reads it, step section included */
    char *pl[] = {(char *)bin("SQ_PLAN_BIN"), "--budget", "8", "--depth", "8", "--target-profile",
                  out, "--draft-ms", "0.3", "--extrapolate", "linear", "-o", plan, NULL};
    free(so);
    free(se);
    rc = tu_run(pl, &so, &se);
    cr_assert_eq(rc, 0, "exit %d: %s", rc, se);
    cr_assert(tu_exists(plan));
    sq_profile_free(p);
    free(so);
    free(se);
    free(a);
    free(b);
    free(c);
    free(out);
    free(plan);
}

Test(merge_tool, pool_mean_is_the_mean_of_the_files_medians)
{
    char *a = tu_path(dir, "a.json"), *b = tu_path(dir, "b.json"), *c = tu_path(dir, "c.json");
    char *out = tu_path(dir, "pooled.json");
    write_profile(a, 1.0, 64, "2026-12-01T20:00:00Z", "2026-12-01T20:00:11Z", 1);
    write_profile(b, 1.3, 64, "2026-12-01T20:01:00Z", "2026-12-01T20:01:11Z", 1);
    write_profile(c, 0.8, 64, "2026-12-01T20:02:00Z", "2026-12-01T20:02:12Z", 1);
    char *argv[] = {(char *)bin("SQ_PROFILE_BIN"), "--merge", a, b, c, "--pool", "mean", "-o",
                    out, "-q", NULL};
    char *se = NULL;
    int rc = tu_run(argv, NULL, &se);
    cr_assert_eq(rc, 0, "exit %d: %s", rc, se);
    sq_profile *p = NULL;
    sq_error err = {0};
    cr_assert_eq(sq_profile_load(out, &p, &err), SQ_OK, "%s", err.msg);
    /* the mean of 1, 1.3 and 0.8 times the shape: 1.0333... (the median would be 1.0) */
    static const double want[] = {2, 3, 6};
    for (int i = 0; i < 3; i++)
        cr_assert_float_eq(p->points[i].median_ms, want[i] * 3.1 / 3, 1e-12);
    cr_assert_float_eq(p->step->pts[SQ_STEP_TARGET][1].median_ms, 3.6 * 3.1 / 3, 1e-12);
    char *text = tu_read(out, NULL);
    cr_assert(strstr(text, "mean of the sources' medians"), "%s", text);
    free(text);
    sq_profile_free(p);
    free(se);
    free(a);
    free(b);
    free(c);
    free(out);
}

Test(merge_tool, one_file_merged_is_that_file_with_its_time_from_the_files_date)
{
    char *a = tu_path(dir, "a.json"), *out = tu_path(dir, "pooled.json");
    write_profile(a, 1.2345678901234567, 64, NULL, NULL, 1);
    char *argv[] = {(char *)bin("SQ_PROFILE_BIN"), "--merge", a, "-o", out, "--quiet", NULL};
    char *se = NULL;
    int rc = tu_run(argv, NULL, &se);
    cr_assert_eq(rc, 0, "exit %d: %s", rc, se);
    sq_profile *p = NULL, *q = NULL;
    sq_error err = {0};
    cr_assert_eq(sq_profile_load(a, &p, &err), SQ_OK, "%s", err.msg);
    cr_assert_eq(sq_profile_load(out, &q, &err), SQ_OK, "%s", err.msg);
    cr_assert_eq(q->n, p->n);
    for (int i = 0; i < p->n; i++) {
        cr_assert_eq(q->points[i].median_ms, p->points[i].median_ms, "exactly");
        cr_assert_eq(q->points[i].p10_ms, p->points[i].p10_ms);
        cr_assert_eq(q->points[i].p90_ms, p->points[i].p90_ms);
        cr_assert_eq(q->points[i].samples, p->points[i].samples);
    }
    for (int k = 0; k < SQ_STEP_PARTS; k++) {
        cr_assert_eq(q->step->n[k], p->step->n[k]);
        for (int i = 0; i < p->step->n[k]; i++)
            cr_assert_eq(q->step->pts[k][i].median_ms, p->step->pts[k][i].median_ms);
    }
    char *text = tu_read(out, NULL);
    cr_assert(strstr(text, "\"time_from\": \"mtime\""), "%s", text);
    free(text);
    sq_profile_free(p);
    sq_profile_free(q);
    free(se);
    free(a);
    free(out);
}

Test(merge_tool, mismatched_inputs_exit_65_and_leave_the_output_as_it_was)
{
    char *a = tu_path(dir, "a.json"), *b = tu_path(dir, "b.json"), *out = tu_path(dir, "o.json");
    write_profile(a, 1.0, 64, NULL, NULL, 1);
    write_profile(b, 1.1, 100, NULL, NULL, 1);
    tu_write(out, "old");
    int entries = tu_count_entries(dir);
    char *argv[] = {(char *)bin("SQ_PROFILE_BIN"), "--merge", a, b, "-o", out, NULL};
    char *se = NULL;
    int rc = tu_run(argv, NULL, &se);
    cr_assert_eq(rc, 65, "exit %d: %s", rc, se);
    char want[512];
    snprintf(want, sizeof want, "%s: prefix: 100, but %s has 64", b, a);
    cr_assert(strstr(se, want), "%s", se);
    char *text = tu_read(out, NULL);
    cr_assert_str_eq(text, "old");
    free(text);
    cr_assert_eq(tu_count_entries(dir), entries, "no temporary file is left");
    free(se);
    /* a step section in one only */
    write_profile(b, 1.1, 64, NULL, NULL, 0);
    rc = tu_run(argv, NULL, &se);
    cr_assert_eq(rc, 65, "exit %d: %s", rc, se);
    snprintf(want, sizeof want, "%s: step: absent, but %s has present", b, a);
    cr_assert(strstr(se, want), "%s", se);
    free(se);
    /* a broken source: the reader's message, the output untouched */
    tu_write(b, "{\"format\":\"sequoia-profile\",\"version\":1,\"points\":[]}");
    rc = tu_run(argv, NULL, &se);
    cr_assert_eq(rc, 65, "exit %d: %s", rc, se);
    cr_assert(strstr(se, b) && strstr(se, "points"), "%s", se);
    text = tu_read(out, NULL);
    cr_assert_str_eq(text, "old");
    free(text);
    free(se);
    /* a measured_at that is there but wrong is named, never replaced by the file's date */
    static const char *const times[][3] = {
        {"yesterday", "2026-12-02T00:00:00Z", "measured_at.start: 'yesterday' is not a UTC time"},
        {"2026-12-02T01:00:00Z", "2026-12-02T00:00:00Z", "measured_at: end 2026-12-02T00:00:00Z "
                                                         "is before start"},
        {"2026-12-02T00:00:00Z", "12:00", "measured_at.end: '12:00' is not a UTC time"},
    };
    for (size_t i = 0; i < sizeof times / sizeof *times; i++) {
        write_profile(b, 1.1, 64, times[i][0], times[i][1], 1);
        rc = tu_run(argv, NULL, &se);
        cr_assert_eq(rc, 65, "case %zu: exit %d: %s", i, rc, se);
        cr_assert(strstr(se, b) && strstr(se, times[i][2]), "case %zu: %s", i, se);
        free(se);
    }
    /* success replaces it whole */
    write_profile(b, 1.1, 64, NULL, NULL, 1);
    rc = tu_run(argv, NULL, &se);
    cr_assert_eq(rc, 0, "exit %d: %s", rc, se);
    cr_assert_eq(tu_count_entries(dir), entries);
    sq_profile *p = NULL;
    sq_error err = {0};
    cr_assert_eq(sq_profile_load(out, &p, &err), SQ_OK, "%s", err.msg);
    cr_assert_float_eq(p->points[0].median_ms, 2.1, 1e-12, "the median of two is their mean");
    sq_profile_free(p);
    free(se);
    free(a);
    free(b);
    free(out);
}

Test(merge_tool, an_output_that_is_an_input_and_bad_usage_exit_64)
{
    char *a = tu_path(dir, "a.json"), *b = tu_path(dir, "b.json"), *svg = tu_path(dir, "x.svg");
    write_profile(a, 1.0, 64, NULL, NULL, 1);
    write_profile(b, 1.1, 64, NULL, NULL, 1);
    char *before = tu_read(b, NULL);
    char a2[4096];
    snprintf(a2, sizeof a2, "%s/./a.json", dir);
    char *cases[][10] = {
        {(char *)bin("SQ_PROFILE_BIN"), "--merge", a, b, "-o", b, NULL},
        {(char *)bin("SQ_PROFILE_BIN"), "--merge", a, b, "-o", svg, "--svg", a, NULL},
        {(char *)bin("SQ_PROFILE_BIN"), "--merge", "-o", svg, NULL},
        {(char *)bin("SQ_PROFILE_BIN"), "--merge", a, b, "--tokens", "1,2", "-o", svg, NULL},
        {(char *)bin("SQ_PROFILE_BIN"), "--merge", a, "--model", a, "-o", svg, NULL},
        {(char *)bin("SQ_PROFILE_BIN"), "--merge", a, b, "--pool", "mode", "-o", svg, NULL},
        {(char *)bin("SQ_PROFILE_BIN"), "--model", a, "--pool", "mean", "-o", svg, NULL},
        /* one file named twice (here through "dir/./a.json") would count its samples twice */
        {(char *)bin("SQ_PROFILE_BIN"), "--merge", a, b, a2, "-o", svg, NULL},
    };
    static const char *const says[] = {"-o", "--svg", "give the profiles to pool", "--tokens",
                                       "--model", "--pool 'mode': expected median or mean",
                                       "--pool goes with --merge", "would count twice"};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char *se = NULL;
        int rc = tu_run(cases[i], NULL, &se);
        cr_assert_eq(rc, 64, "case %zu: exit %d: %s", i, rc, se);
        cr_assert(strstr(se, says[i]), "case %zu: %s", i, se);
        free(se);
    }
    char *after = tu_read(b, NULL), *after_a = tu_read(a, NULL);
    cr_assert_str_eq(after, before, "the input is untouched");
    cr_assert(after_a && strstr(after_a, "sequoia-profile"));
    free(before);
    free(after);
    free(after_a);
    free(a);
    free(b);
    free(svg);
}

Test(merge_tool, a_pool_that_is_not_credible_needs_force)
{
    /* every source falls from t(1) = 10 ms to t(4) = 5 ms, tight spreads, 21 samples */
    char *a = tu_path(dir, "a.json"), *b = tu_path(dir, "b.json"), *out = tu_path(dir, "o.json");
    const char *fall = "{\"format\":\"sequoia-profile\",\"version\":1,\"points\":["
                       "{\"tokens\":1,\"median_ms\":10,\"p10_ms\":9.9,\"p90_ms\":10.1,\"samples\":21},"
                       "{\"tokens\":4,\"median_ms\":5,\"p10_ms\":4.9,\"p90_ms\":5.1,\"samples\":21}]}";
    tu_write(a, fall);
    tu_write(b, fall);
    char *argv[] = {(char *)bin("SQ_PROFILE_BIN"), "--merge", a, b, "-o", out, NULL, NULL};
    char *se = NULL;
    int rc = tu_run(argv, NULL, &se);
    cr_assert_eq(rc, 65, "exit %d: %s", rc, se);
    cr_assert(strstr(se, "not credible") && strstr(se, "t(4)"), "%s", se);
    cr_assert_not(tu_exists(out));
    free(se);
    argv[6] = "--force";
    rc = tu_run(argv, NULL, &se);
    cr_assert_eq(rc, 0, "exit %d: %s", rc, se);
    char *text = tu_read(out, NULL);
    cr_assert(text && strstr(text, "\"forced\": true"), "%s", text);
    free(text);
    free(se);
    free(a);
    free(b);
    free(out);
}

Test(merge_tool, a_measured_profile_records_when_it_was_taken, .timeout = 60)
{
    char *config = tu_path(dir, "config.json"), *out = tu_path(dir, "p.json");
    tu_write(config, "{\"architectures\":[\"LlamaForCausalLM\"],\"hidden_size\":64,"
             "\"intermediate_size\":128,\"num_hidden_layers\":2,\"num_attention_heads\":4,"
             "\"num_key_value_heads\":2,\"vocab_size\":64,\"max_position_embeddings\":64}");
    char *argv[] = {(char *)bin("SQ_PROFILE_BIN"), "--model", config, "--tokens", "1,2",
                    "--prefix", "8", "--warmup", "0", "--repeat", "2", "-o", out, "--quiet", NULL};
    char *se = NULL;
    int rc = tu_run(argv, NULL, &se);
    cr_assert_eq(rc, 0, "exit %d: %s", rc, se);
    cJSON *j = NULL;
    sq_error err = {0};
    cr_assert_eq(sq_json_load(out, &j, &err), SQ_OK, "%s", err.msg);
    const cJSON *at = sq_json_field(j, "measured_at");
    const char *s = cJSON_GetStringValue(sq_json_field(at, "start"));
    const char *e = cJSON_GetStringValue(sq_json_field(at, "end"));
    cr_assert(s && e && strlen(s) == 20 && s[10] == 'T' && s[19] == 'Z', "%s", s ? s : "none");
    cr_assert_leq(strcmp(s, e), 0, "%s .. %s", s, e);
    cJSON_Delete(j);
    free(se);
    free(config);
    free(out);
}
