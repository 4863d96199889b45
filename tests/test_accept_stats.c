/* planner/accept/stats.c and merge.c: curves from statistics and back, the exact shard merge,
 * and the regression maths of --compare, against direct computation on the sums; the checks of
 * the shards a merge takes (their statistics, their dynamic-tree statistics). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "libsequoia/base/json.h"
#include "libsequoia/format/dynstats.h"
#include "planner/accept/accept.h"
#include "planner/accept/dynstats.h"
#include "planner/accept/merge.h"
#include "planner/accept/stats.h"

#define W 4

/* Units of random size with per-rank sums that keep Σ_k y_k <= n. */
static sq_accept_stats *random_stats(unsigned seed, int units)
{
    srand(seed);
    sq_accept_stats *s = sq_accept_stats_new(W);
    cr_assert_not_null(s);
    for (int u = 0; u < units; u++) {
        double n = 1 + rand() % 50, y[W], left = n;
        for (int k = 0; k < W; k++) {
            y[k] = left * (rand() / (double)RAND_MAX) * 0.6;
            left -= y[k];
        }
        sq_accept_stats_add_unit(s, n, y);
    }
    s->sequences = units;
    return s;
}

static const sq_accept_config cfg = {SQ_MODE_STOCHASTIC, 0.6, 1.0};

/* A one-curve set from stats, with a source naming one corpus by `sha`. */
static sq_curve_set *shard(const sq_accept_stats *st, const char *sha, const char *unit,
                           double seed)
{
    sq_curve_set *set = calloc(1, sizeof *set);
    set->curves = calloc(1, sizeof *set->curves);
    sq_error err = {0};
    cJSON *sd = cJSON_CreateNumber(seed);
    cr_assert_eq(sq_accept_curve_from_stats(&set->curves[0], "stochastic@T0.6", &cfg, st, 2, sd,
                                            unit, &err), SQ_OK, "%s", err.msg);
    cJSON_Delete(sd);
    set->n = 1;
    const char *corpus[] = {sha};
    const char *shas[] = {sha};
    set->source = sq_accept_source_json(corpus, shas, 1, "d", "t", 32, 0, "test");
    cr_assert_not_null(set->source);
    return set;
}

Test(accept_stats, curve_stats_round_trip)
{
    sq_accept_stats *st = random_stats(1, 9);
    sq_curve_set *set = shard(st, "aa", "sequence", 7);
    const sq_curve *c = &set->curves[0];
    double p[W], se[W];
    cr_assert_eq(sq_accept_stats_estimate(st, p, se), 1);
    for (int k = 0; k < W; k++) {
        cr_assert_eq(c->p[k], p[k]);
        cr_assert_eq(c->stderr_p[k], se[k]);
    }
    cr_assert_eq(c->positions, (long long)st->sum_n);
    sq_accept_curve_stats cs;
    sq_error err = {0};
    cr_assert_eq(sq_accept_curve_stats_read(c, "f.json", 0, &cs, &err), SQ_OK, "%s", err.msg);
    cr_assert_eq(cs.samples, 2);
    cr_assert_str_eq(cs.unit, "sequence");
    cr_assert(cJSON_IsNumber(cs.seed) && cs.seed->valuedouble == 7);
    cr_assert_eq(cs.stats->units, st->units);
    cr_assert_eq(cs.stats->sum_n, st->sum_n);
    for (int k = 0; k < W * W; k++)
        cr_assert_eq(cs.stats->sum_yy[k], st->sum_yy[k]);
    sq_accept_stats_free(cs.stats);
    /* a curve without statistics cannot be merged; the message names file and field */
    cJSON_Delete(set->curves[0].extra);
    set->curves[0].extra = NULL;
    cr_assert_eq(sq_accept_curve_stats_read(c, "f.json", 3, &cs, &err), SQ_EDATA);
    cr_assert(strstr(err.msg, "f.json: curves[3].stats: missing"), "%s", err.msg);
    sq_curve_set_free(set);
    sq_accept_stats_free(st);
}

/* The merge of two shards is the curve of the summed statistics, exactly. */
Test(accept_stats, merge_equals_one_run_over_both_shards)
{
    sq_accept_stats *a = random_stats(2, 7), *b = random_stats(3, 11);
    sq_curve_set *sets[2] = {shard(a, "aa", "sequence", 5), shard(b, "bb", "batch", 5)};
    char *files[2] = {"a.json", "b.json"};
    sq_curve_set m;
    sq_error err = {0};
    cr_assert_eq(sq_accept_merge(sets, files, 2, "test", &m, &err), SQ_OK, "%s", err.msg);
    sq_accept_stats_merge(a, b);
    double p[W], se[W];
    sq_accept_stats_estimate(a, p, se);
    cr_assert_eq(m.n, 1);
    for (int k = 0; k < W; k++) {
        cr_assert_float_eq(m.curves[0].p[k], p[k], 1e-15);
        cr_assert_float_eq(m.curves[0].stderr_p[k], se[k], 1e-15);
    }
    sq_accept_curve_stats cs;
    cr_assert_eq(sq_accept_curve_stats_read(&m.curves[0], "m", 0, &cs, &err), SQ_OK);
    cr_assert_str_eq(cs.unit, "mixed");
    cr_assert(cJSON_IsNumber(cs.seed) && cs.seed->valuedouble == 5, "same seed kept");
    cr_assert_eq(cs.stats->units, 18);
    sq_accept_stats_free(cs.stats);
    cr_assert_eq(cJSON_GetArraySize(sq_json_field(m.source, "corpus")), 2);
    sq_curve_clear(&m.curves[0]);
    free(m.curves);
    cJSON_Delete(m.source);
    sq_curve_set_free(sets[0]);
    sq_curve_set_free(sets[1]);
    sq_accept_stats_free(a);
    sq_accept_stats_free(b);
}

Test(accept_stats, merge_refuses_a_corpus_counted_twice_and_a_missing_curve)
{
    sq_accept_stats *a = random_stats(4, 5);
    sq_curve_set *sets[2] = {shard(a, "aa", "sequence", 1), shard(a, "aa", "sequence", 2)};
    char *files[2] = {"a.json", "b.json"};
    sq_curve_set m;
    sq_error err = {0};
    cr_assert_eq(sq_accept_merge(sets, files, 2, "test", &m, &err), SQ_EDATA);
    cr_assert(strstr(err.msg, "b.json: source.sha256[0]") && strstr(err.msg, "not disjoint"),
              "%s", err.msg);
    sq_curve_set_free(sets[1]);
    sets[1] = shard(a, "bb", "sequence", 2);
    free(sets[1]->curves[0].name);
    sets[1]->curves[0].name = strdup("other");
    err = (sq_error){0};
    cr_assert_eq(sq_accept_merge(sets, files, 2, "test", &m, &err), SQ_EDATA);
    cr_assert(strstr(err.msg, "b.json: curves: no curve named \"stochastic@T0.6\""), "%s",
              err.msg);
    sq_curve_set_free(sets[0]);
    sq_curve_set_free(sets[1]);
    sq_accept_stats_free(a);
}

/* Var(F) = g' Cov g from the statistics; from the standard errors alone without them. */
Test(accept_stats, F_variance_is_the_delta_method)
{
    sq_accept_stats *st = random_stats(5, 13);
    sq_curve_set *set = shard(st, "aa", "sequence", 0);
    double g[W] = {1.5, -0.25, 0.75, 2.0}, cov[W * W], expect = 0, var;
    sq_accept_stats_cov(st, cov);
    for (int j = 0; j < W; j++)
        for (int k = 0; k < W; k++)
            expect += g[j] * cov[j * W + k] * g[k];
    const char *how;
    sq_error err = {0};
    cr_assert_eq(sq_accept_F_variance(&set->curves[0], "f", 0, g, &var, &how, &err), SQ_OK);
    cr_assert_float_eq(var, expect, 1e-15 * (1 + expect));
    cr_assert_str_eq(how, "full covariance");
    cJSON_Delete(set->curves[0].extra);
    set->curves[0].extra = NULL;
    expect = 0;
    for (int k = 0; k < W; k++)
        expect += g[k] * g[k] * set->curves[0].stderr_p[k] * set->curves[0].stderr_p[k];
    cr_assert_eq(sq_accept_F_variance(&set->curves[0], "f", 0, g, &var, &how, &err), SQ_OK);
    cr_assert_float_eq(var, expect, 1e-15 * (1 + expect));
    cr_assert(strstr(how, "standard errors only"));
    free(set->curves[0].stderr_p);
    set->curves[0].stderr_p = NULL;
    cr_assert_eq(sq_accept_F_variance(&set->curves[0], "f", 0, g, &var, &how, &err), SQ_OK);
    cr_assert_eq(var, 0);
    sq_curve_set_free(set);
    sq_accept_stats_free(st);
}

Test(accept_stats, rank_compare_and_the_drop_rule)
{
    sq_curve b = {0}, n = {0};
    double pb[3] = {0.5, 0.2, 0.1}, pn[2] = {0.4, 0.25};
    sq_error err = {0};
    cr_assert_eq(sq_curve_init(&b, "b", "stochastic", pb, 3, &err), 0);
    cr_assert_eq(sq_curve_init(&n, "n", "stochastic", pn, 2, &err), 0);
    sq_accept_rank_change r = sq_accept_rank_compare(&b, &n, 2);
    cr_assert_eq(r.base, 0.1);
    cr_assert_eq(r.now, 0);
    cr_assert(isnan(r.z), "no standard errors: no z");
    n.stderr_p = malloc(2 * sizeof(double));
    n.stderr_p[0] = 0.03;
    n.stderr_p[1] = 0.04;
    r = sq_accept_rank_compare(&b, &n, 0);
    cr_assert_float_eq(r.change, -0.1, 1e-15);
    cr_assert_float_eq(r.z, -0.1 / 0.03, 1e-12);
    sq_curve_clear(&b);
    sq_curve_clear(&n);
    cr_assert(sq_accept_significant_drop(-0.31, 0.1, 3));
    cr_assert(!sq_accept_significant_drop(-0.29, 0.1, 3));
    cr_assert(!sq_accept_significant_drop(0.5, 0.1, 3));
    cr_assert(sq_accept_significant_drop(-1e-9, 0, 3), "no error: any real drop");
    cr_assert(!sq_accept_significant_drop(-1e-13, 0, 3), "rounding is not a drop");
}

/* Merges the shards a (unchanged) and b (its curve's "stats" member edited by `edit`), expecting
 * SQ_EDATA with `msg` in the message. */
static void merge_refuses(void (*edit)(cJSON *stats), const char *msg)
{
    sq_accept_stats *a = random_stats(6, 7), *b = random_stats(7, 9);
    sq_curve_set *sets[2] = {shard(a, "aa", "sequence", 1), shard(b, "bb", "sequence", 1)};
    edit(cJSON_GetObjectItemCaseSensitive(sets[1]->curves[0].extra, "stats"));
    char *files[2] = {"a.json", "b.json"};
    sq_curve_set m;
    sq_error err = {0};
    cr_assert_eq(sq_accept_merge(sets, files, 2, "test", &m, &err), SQ_EDATA, "%s", msg);
    cr_assert(strstr(err.msg, msg), "expected \"%s\" in: %s", msg, err.msg);
    sq_curve_set_free(sets[0]);
    sq_curve_set_free(sets[1]);
    sq_accept_stats_free(a);
    sq_accept_stats_free(b);
}

static void zero_sum_y0(cJSON *st)
{
    cJSON *sum_y = cJSON_GetObjectItemCaseSensitive(st, "sum_y");
    cJSON_SetNumberValue(cJSON_GetArrayItem(sum_y, 0), 0);
}

static void huge_sum_n(cJSON *st)
{
    cJSON_SetNumberValue(cJSON_GetObjectItemCaseSensitive(st, "sum_n"), 0x1p63);
}

/* The merge adds the shards' sums, so a shard whose sums do not give its own p (an edited or
 * damaged file) is refused as --compare refuses it, and so are counts no corpus has. */
Test(accept_stats, merge_refuses_statistics_that_do_not_reproduce_p)
{
    merge_refuses(zero_sum_y0, "b.json: curves[0].stats: do not reproduce p[0]");
    merge_refuses(huge_sum_n, "b.json: curves[0].stats.sum_n: 9.2233720368547758e+18 positions, "
                              "more than 2^53");
    /* the same counts made consistent with p: still refused, by the reader */
    cJSON *o = cJSON_Parse("{\"units\": 2, \"sum_n\": 9.2233720368547758e18, \"sum_n2\": "
                           "4.2535295865117308e37, \"sum_y\": [4.6116860184273879e18], "
                           "\"sum_ny\": [2.1267647932558654e37], \"sum_yy\": "
                           "[[1.0633823966279327e37]]}");
    sq_accept_stats *s = NULL;
    sq_error err = {0};
    cr_assert_eq(sq_accept_stats_from_json(o, 1, "f.json", "curves[0].stats", &s, &err),
                 SQ_EDATA);
    cr_assert(strstr(err.msg, "f.json: curves[0].stats.sum_n: ") &&
              strstr(err.msg, "more than 2^53"), "%s", err.msg);
    cr_assert_null(s);
    cJSON_Delete(o);
}

/* Reads random statistics back after setting sum_yy[j][k] (and sum_yy[k][j] when `both`) to v, or
 * the member `key` to v; expects SQ_EDATA naming `msg`. */
static void stats_refused(const char *key, int j, int k, int both, double v, const char *msg)
{
    sq_accept_stats *st = random_stats(8, 12), *back = NULL;
    cJSON *o = sq_accept_stats_to_json(st);
    cr_assert_not_null(o);
    if (key) {
        cJSON_SetNumberValue(cJSON_GetObjectItemCaseSensitive(o, key), v);
    } else {
        cJSON *yy = cJSON_GetObjectItemCaseSensitive(o, "sum_yy");
        cJSON_SetNumberValue(cJSON_GetArrayItem(cJSON_GetArrayItem(yy, j), k), v);
        if (both)
            cJSON_SetNumberValue(cJSON_GetArrayItem(cJSON_GetArrayItem(yy, k), j), v);
    }
    sq_error err = {0};
    cr_expect_eq(sq_accept_stats_from_json(o, W, "f.json", "curves[0].stats", &back, &err),
                 SQ_EDATA, "%s", msg);
    cr_expect(strstr(err.msg, msg), "expected \"%s\" in: %s", msg, err.msg);
    sq_accept_stats_free(back);
    cJSON_Delete(o);
    sq_accept_stats_free(st);
}

/* The whole block of sums is checked when it is read (by --compare, --merge, the depth rows):
 * an off-diagonal sum_yy that no units give would hand the comparison error bars of any size
 * (a real drop of F passed the gate with sum_yy[0][1] = 1e18). */
Test(accept_stats, statistics_that_no_units_give_are_refused_when_read)
{
    sq_accept_stats *st = random_stats(8, 12);
    double yy01 = st->sum_yy[1], cs = sqrt(st->sum_yy[0] * st->sum_yy[W + 1]);
    sq_accept_stats_free(st);
    stats_refused(NULL, 0, 1, 1, 1e18, "f.json: curves[0].stats.sum_yy[0][1]: 1e+18 is outside");
    stats_refused(NULL, 0, 1, 0, yy01 * 1.5, "f.json: curves[0].stats.sum_yy[0][1]: ");
    stats_refused(NULL, 0, 1, 0, yy01 * 1.5, "(a sum of products is symmetric)");
    stats_refused(NULL, 0, 1, 1, -1, "f.json: curves[0].stats.sum_yy[0][1]: -1 is outside");
    stats_refused(NULL, 0, 1, 1, cs * 0.999, "implies a covariance of ranks 1 and 2 larger");
    stats_refused(NULL, 2, 2, 0, -3, "f.json: curves[0].stats.sum_yy[2][2]: -3 is outside");
    stats_refused("sum_n2", 0, 0, 0, 0, "f.json: curves[0].stats.sum_n2: 0 is outside");
    stats_refused("units", 0, 0, 0, 0, "f.json: curves[0].stats.units: 0, but sum_n is");
}

/* ---- the dynamic-tree statistics' merge (planner/accept/dynstats.h) ------------------------- */

static const char dyn_good[] =
    "{\"format\": \"sequoia-dynamic-stats\", \"version\": 1, \"topk\": 3, \"draft_temperature\": 1,"
    " \"seed\": 0, \"corpora\": 1, \"segments\": [[0, 4, 0], [10, 2, 0]], \"draft_topk\": "
    "[[0.5, 0.3, 0.1], [0.6, 0.2, 0.1], [0.9, 0.05, 0.01], [0.4, 0.4, 0.1], [0.7, 0.1, 0.1], "
    "[0.5, 0.2, 0.2]], \"next_rank\": [0, 1, -1, 2, 0, 0], \"accept\": {\"topk@T1\": "
    "[[0.4, 0.1, 0.05], [0.5, 0.1, 0], [0.8, 0, 0], [0.3, 0.3, 0.1], [0.6, 0.1, 0], "
    "[0.4, 0.1, 0.1]]}}";

/* Merges dyn_good (a.json) with a copy (b.json) whose arr[i][j] (arr[i] when j < 0) is set to
 * v (no edit when arr is NULL). */
static int dyn_merge(const char *arr, int i, int j, double v, sq_error *err)
{
    cJSON *a = cJSON_Parse(dyn_good), *b = cJSON_Parse(dyn_good), *out = NULL;
    cr_assert(a && b);
    if (arr) {
        cJSON *x = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(b, arr), i);
        cJSON *item = j >= 0 ? cJSON_GetArrayItem(x, j) : x;
        cJSON_SetNumberValue(item, v);
    }
    const cJSON *objs[2] = {a, b};
    const char *files[2] = {"a.json", "b.json"};
    int rc = sq_dynstats_merge(objs, files, 2, &out, err);
    if (rc == SQ_OK) {
        /* what a merge writes, the planner reads */
        sq_dynstats_shape sh;
        cr_assert_eq(sq_dynstats_check(out, "m.json", &sh, err), SQ_OK, "%s", err->msg);
        cr_assert_eq(sh.corpora, 2);
        cr_assert_eq(sh.samples, 12);
        cr_assert_eq(cJSON_GetArrayItem(cJSON_GetArrayItem(sq_json_field(out, "segments"), 3),
                                        2)->valueint, 1, "b.json's corpus 0 is corpus 1");
    }
    cJSON_Delete(a);
    cJSON_Delete(b);
    cJSON_Delete(out);
    return rc;
}

/* Each shard is checked as the planner checks a curves file, naming the shard and the field:
 * a corpus index outside [0, corpora) (once rebased onto a wrong corpus, or overflowing an int),
 * an unsorted row of the draft's top-K, a row summing past 1, a segment of negative length. */
Test(accept_stats, dynamic_merge_checks_each_shard_as_the_planner_does)
{
    sq_error err = {0};
    cr_assert_eq(dyn_merge(NULL, 0, 0, 0, &err), SQ_OK, "%s", err.msg);
    static const struct {
        const char *arr;
        int i, j;
        double v;
        const char *msg;
    } bad[] = {
        {"segments", 0, 2, 2147483647.0, "b.json: dynamic.segments[0][2]: expected a corpus index"},
        {"segments", 1, 2, -1, "b.json: dynamic.segments[1][2]: expected a corpus index"},
        {"segments", 0, 2, 1, "b.json: dynamic.segments[0][2]: expected a corpus index"},
        {"draft_topk", 0, 0, 0, "b.json: dynamic.draft_topk[0]: not sorted in decreasing order"},
        {"draft_topk", 3, 2, 0.3, "b.json: dynamic.draft_topk[3]: the probabilities sum to 1.1"},
        {"segments", 1, 1, -2, "b.json: dynamic.segments[1]: expected [row0, length >= 1"},
        {"next_rank", 2, -1, 3, "b.json: dynamic.next_rank[2]: expected an integer in [-1, 2]"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        err = (sq_error){0};
        cr_expect_eq(dyn_merge(bad[i].arr, bad[i].i, bad[i].j, bad[i].v, &err), SQ_EDATA,
                     "%s", bad[i].msg);
        cr_expect(strstr(err.msg, bad[i].msg), "expected \"%s\" in: %s", bad[i].msg, err.msg);
    }
}
