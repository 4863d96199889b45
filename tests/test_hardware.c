/* Latency profiles and the hardware-aware choice of (size, depth) (docs/design.md §4, §7.3),
 * checked against closed forms: flat, linear and step latency curves, the per-level cost model
 * by hand, and the official implementation's demo decision. */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "planner/hardware.h"
#include "libsequoia/base/json.h"
#include "tests/testutil.h"

static sq_profile *make_profile(const int *tokens, const double *ms, int n)
{
    sq_profile *p = calloc(1, sizeof *p);
    p->device = strdup("test");
    p->backend = strdup("cpu");
    p->dtype = strdup("f32");
    p->prefix = 0;
    p->n = n;
    p->points = calloc((size_t)n, sizeof *p->points);
    for (int i = 0; i < n; i++)
        p->points[i] = (sq_profile_point){.batch = 1, .tokens = tokens[i], .median_ms = ms[i],
                                            .p10_ms = NAN, .p90_ms = NAN, .samples = 1};
    sq_error err = {0};
    cr_assert_eq(sq_profile_validate(p, "test", &err), 0, "%s", err.msg);
    return p;
}

static sq_dp *solve(const sq_curve *c, int n, int d)
{
    sq_dp_params prm = {.budget = n, .depth = d, .width = 0, .curve = c};
    sq_dp *dp;
    sq_error err = {0};
    cr_assert_eq(sq_dp_solve(&prm, &dp, &err), 0, "%s", err.msg);
    return dp;
}

/* ---- interpolation ----------------------------------------------------------------------- */

Test(hardware, interpolates_linearly_and_refuses_to_extrapolate_silently)
{
    int tok[] = {1, 4, 16};
    double ms[] = {10, 13, 25};
    sq_profile *p = make_profile(tok, ms, 3);
    double v;
    sq_error err = {0};
    cr_assert_eq(sq_profile_ms(p, 1, SQ_EXTRAPOLATE_NONE, &v, &err), 0);
    cr_assert_eq(v, 10);
    cr_assert_eq(sq_profile_ms(p, 2.5, SQ_EXTRAPOLATE_NONE, &v, &err), 0);
    cr_assert(fabs(v - 11.5) < 1e-12);
    cr_assert_eq(sq_profile_ms(p, 10, SQ_EXTRAPOLATE_NONE, &v, &err), 0);
    cr_assert(fabs(v - 19) < 1e-12);
    cr_assert_eq(sq_profile_ms(p, 16, SQ_EXTRAPOLATE_NONE, &v, &err), 0);
    cr_assert_eq(v, 25);
    cr_assert_eq(sq_profile_ms(p, 17, SQ_EXTRAPOLATE_NONE, &v, &err), SQ_EUSAGE);
    cr_assert(strstr(err.msg, "[1, 16]") && strstr(err.msg, "extrapolation"), "%s", err.msg);
    cr_assert_eq(sq_profile_ms(p, 20, SQ_EXTRAPOLATE_LINEAR, &v, &err), 0);
    cr_assert(fabs(v - 29) < 1e-12);
    cr_assert_eq(sq_profile_ms(p, 20, SQ_EXTRAPOLATE_CONSTANT, &v, &err), 0);
    cr_assert_eq(v, 25);
    sq_profile_free(p);
}

Test(hardware, interpolation_is_monotone_between_monotone_points)
{
    int tok[] = {1, 2, 8, 64, 512};
    double ms[] = {5, 5.5, 7, 20, 90};
    sq_profile *p = make_profile(tok, ms, 5);
    double prev = 0, v;
    sq_error err = {0};
    for (double x = 1; x <= 512; x += 0.25) {
        cr_assert_eq(sq_profile_ms(p, x, SQ_EXTRAPOLATE_NONE, &v, &err), 0);
        cr_assert_geq(v, prev, "t(%g) = %g < %g", x, v, prev);
        prev = v;
    }
    sq_profile_free(p);
}

/* ---- closed-form optima -------------------------------------------------------------------- */

Test(hardware, flat_latency_takes_the_whole_budget)
{
    /* verifying n tokens costs the same as one: the biggest tree wins, S = F(N, D) */
    int tok[] = {1, 256};
    double ms[] = {10, 10};
    sq_profile *t = make_profile(tok, ms, 2);
    sq_dp *dp = solve(sq_curve_default(), 256, 12);
    sq_hw_params hp = sq_hw_default_params();
    hp.target = t;
    hp.draft_ms = 0;
    sq_hw_result *r;
    sq_error err = {0};
    cr_assert_eq(sq_hw_select(dp, &hp, &r, &err), 0, "%s", err.msg);
    cr_assert_eq(r->n, 256);
    cr_assert(fabs(r->speedup - sq_dp_best(dp, 256, 12)) < 1e-12);
    sq_hw_result_free(r);
    sq_dp_free(dp);
    sq_profile_free(t);
}

Test(hardware, linear_latency_matches_the_closed_form_for_chains)
{
    /* one rank with p = q: only chains exist and F(n) = (1 - q^n) / (1 - q) for n <= depth.
     * With t(n) = a + b n and a draft cost c per level, S(n) = F(n) t(1) / (a + b n + n c). */
    const double q = 0.8, a = 10, b = 0.7, c = 0.3;
    double pv[1] = {q};
    sq_curve cur;
    sq_error err = {0};
    cr_assert_eq(sq_curve_init(&cur, "chain", "stochastic", pv, 1, &err), 0);
    int tok[] = {1, 64};
    double ms[] = {a + b, a + 64 * b};
    sq_profile *t = make_profile(tok, ms, 2);
    sq_dp *dp = solve(&cur, 64, 64);
    sq_hw_params hp = sq_hw_default_params();
    hp.target = t;
    hp.draft_ms = c;
    sq_hw_result *r;
    cr_assert_eq(sq_hw_select(dp, &hp, &r, &err), 0, "%s", err.msg);
    int best_n = 1;
    double best = 1.0;
    for (int n = 2; n <= 64; n++) {
        double F = (1 - pow(q, n)) / (1 - q);
        double s = F * (a + b) / (a + b * n + n * c);
        if (s > best) {
            best = s;
            best_n = n;
        }
    }
    cr_assert_eq(r->n, best_n, "chose %d, closed form %d", r->n, best_n);
    cr_assert(fabs(r->speedup - best) < 1e-9, "%.12f vs %.12f", r->speedup, best);
    cr_assert_eq(r->levels, best_n);
    sq_hw_result_free(r);
    sq_dp_free(dp);
    sq_profile_free(t);
    sq_curve_clear(&cur);
}

Test(hardware, step_latency_stops_at_the_step)
{
    /* t = 10 up to 64 tokens, 30 beyond: F(64) / 10 beats F(N) / 30 for any realistic curve, and
     * inside the flat part the largest tree wins, so the choice is exactly 64 nodes */
    int tok[] = {1, 64, 65, 512};
    double ms[] = {10, 10, 30, 30};
    sq_profile *t = make_profile(tok, ms, 4);
    sq_dp *dp = solve(sq_curve_default(), 512, 10);
    sq_hw_params hp = sq_hw_default_params();
    hp.target = t;
    sq_hw_result *r;
    sq_error err = {0};
    cr_assert_eq(sq_hw_select(dp, &hp, &r, &err), 0, "%s", err.msg);
    double expect = fmax(sq_dp_best(dp, 64, 10) / 10, sq_dp_best(dp, 512, 10) / 30) * 10;
    cr_assert_eq(r->n, 64);
    cr_assert_eq(r->d, 10);
    cr_assert(fabs(r->speedup - expect) < 1e-12);
    sq_hw_result_free(r);
    sq_dp_free(dp);
    sq_profile_free(t);
}

Test(hardware, per_level_model_charges_each_level_once)
{
    /* tree: root, two children, one grandchild (levels 1, 2, 1). The draft reads F tokens for
     * the root's distribution and runs once over level 1; the leaf level needs no forward. */
    int parent[] = {-1, 0, 0, 1}, rank[] = {0, 1, 2, 1};
    sq_tree *tree;
    sq_error err = {0};
    cr_assert_eq(sq_tree_from_parents(parent, rank, 4, &tree, "t", &err), 0);
    int tt[] = {1, 8};
    double tm[] = {20, 27};                     /* t_target(n) = 19 + n */
    int dt[] = {1, 8};
    double dm[] = {2, 9};                       /* t_draft(x) = 1 + x   */
    sq_profile *t = make_profile(tt, tm, 2), *d = make_profile(dt, dm, 2);
    sq_hw_params hp = sq_hw_default_params();
    hp.target = t;
    hp.draft = d;
    double F = 1.7, ms;
    cr_assert_eq(sq_hw_step_ms(&hp, tree, F, &ms, &err), 0, "%s", err.msg);
    cr_assert(fabs(ms - ((19 + 4) + (1 + F) + (1 + 2))) < 1e-12, "%g", ms);
    hp.draft = NULL;
    hp.draft_ms = 0.5;
    cr_assert_eq(sq_hw_step_ms(&hp, tree, F, &ms, &err), 0);
    cr_assert(fabs(ms - (23 + 3 * 0.5)) < 1e-12, "fixed model: L * c, got %g", ms);
    sq_tree_free(tree);
    sq_profile_free(t);
    sq_profile_free(d);
}

/* The official implementation's demo configuration (tests/data/reference/README.md): draft time
 * 0.3, budgets 1..32 with target times 10,10,10,12,14,18, depth <= 10, candidates = measured
 * sizes, fixed draft cost per level. */
static sq_hw_result *official_demo(const sq_curve *c)
{
    int tok[] = {1, 2, 4, 8, 16, 32};
    double ms[] = {10, 10, 10, 12, 14, 18};
    sq_profile *t = make_profile(tok, ms, 6);
    sq_dp *dp = solve(c, 32, 10);
    sq_hw_params hp = sq_hw_default_params();
    hp.target = t;
    hp.draft_ms = 0.3;
    hp.measured_sizes_only = 1;
    sq_hw_result *r;
    sq_error err = {0};
    cr_assert_eq(sq_hw_select(dp, &hp, &r, &err), 0, "%s", err.msg);
    sq_dp_free(dp);
    sq_profile_free(t);
    return r;
}

Test(hardware, reproduces_the_official_demo_decision)
{
    char *path = tu_source_path("tests/data/reference/official_demo_table.json");
    cJSON *root;
    sq_error err = {0};
    cr_assert_eq(sq_json_load(path, &root, &err), 0, "%s", err.msg);
    const cJSON *pj = cJSON_GetObjectItem(root, "p");
    double p[32];
    for (int i = 0; i < 32; i++)
        p[i] = cJSON_GetArrayItem(pj, i + 1)->valuedouble;
    sq_curve c;
    cr_assert_eq(sq_curve_init(&c, "demo", "stochastic", p, 32, &err), 0);
    sq_hw_result *r = official_demo(&c);
    cr_assert_eq(r->n, 4);
    cr_assert_eq(r->levels, 4, "a 4-node chain");
    cr_assert(fabs(r->speedup - 2.0459) < 2e-4, "speedup %.5f", r->speedup);
    sq_hw_result_free(r);
    sq_curve_clear(&c);
    cJSON_Delete(root);
    free(path);
}

Test(hardware, demo_configuration_on_the_appendix_e_vector)
{
    /* documented in docs/planning.md: the App. E curve accepts more, so a bigger tree pays off */
    sq_hw_result *r = official_demo(sq_curve_default());
    cr_assert_eq(r->n, 8, "chose size %d depth %d (speedup %.4f)", r->n, r->d, r->speedup);
    cr_assert_eq(r->d, 7, "chose size %d depth %d (speedup %.4f)", r->n, r->d, r->speedup);
    /* S = F(8, 7) * t(1) / (t(8) + L * 0.3) */
    cr_assert(fabs(r->speedup - r->expected_tokens * 10 / (12 + r->levels * 0.3)) < 1e-12);
    cr_assert(fabs(r->speedup - 2.6841) < 1e-4, "speedup %.5f", r->speedup);
    sq_hw_result_free(r);
}

/* ---- profile files ------------------------------------------------------------------------ */

Test(hardware, profile_round_trips_through_json)
{
    int tok[] = {1, 2, 64};
    double ms[] = {3.25, 3.5, 9.125};
    sq_profile *p = make_profile(tok, ms, 3);
    p->points[1].p10_ms = 3.0;
    p->points[1].p90_ms = 4.0;
    char *dir = tu_tmpdir(), *path = tu_path(dir, "prof.json");
    sq_error err = {0};
    cr_assert_eq(sq_profile_save(path, p, &err), 0, "%s", err.msg);
    sq_profile *q;
    cr_assert_eq(sq_profile_load(path, &q, &err), 0, "%s", err.msg);
    cr_assert_eq(q->n, 3);
    cr_assert_eq(q->points[2].median_ms, 9.125);
    cr_assert_eq(q->points[1].p90_ms, 4.0);
    cr_assert(isnan(q->points[0].p10_ms));
    int at;
    cr_assert(fabs(sq_profile_max_spread(q, &at) - 1.0 / 3.5) < 1e-12);
    cr_assert_eq(at, 1);
    sq_profile_free(p);
    sq_profile_free(q);
    tu_rmtree(dir);
    free(path);
    free(dir);
}

typedef struct {
    char text[300];
    char expect[2][60];
} bad_profile;

#define PH "{\"format\":\"sequoia-profile\",\"version\":1,\"points\":"

ParameterizedTestParameters(hardware, bad_profiles_are_refused)
{
    static bad_profile cases[] = {
        {PH "[]}", {"points", "empty"}},
        {PH "[{\"tokens\":4,\"median_ms\":3},{\"tokens\":2,\"median_ms\":2}]}",
         {"points[1].tokens", "increase strictly"}},
        {PH "[{\"tokens\":4,\"median_ms\":3},{\"tokens\":4,\"median_ms\":2}]}",
         {"points[1].tokens", "increase strictly"}},
        {PH "[{\"tokens\":1,\"median_ms\":-3}]}", {"points[0].median_ms", "> 0"}},
        {PH "[{\"tokens\":1,\"median_ms\":3,\"p10_ms\":4}]}", {"points[0].p10_ms", "median"}},
        {PH "[{\"tokens\":0,\"median_ms\":3}]}", {"points[0].tokens", "integer"}},
        {PH "[{\"tokens\":1}]}", {"points[0].median_ms", "missing"}},
        {"{\"format\":\"sequoia-profile\",\"version\":3,\"points\":[]}", {"version", "3"}},
    };
    return cr_make_param_array(bad_profile, cases, sizeof cases / sizeof *cases);
}

ParameterizedTest(bad_profile *bp, hardware, bad_profiles_are_refused)
{
    cJSON *root;
    sq_error err = {0};
    cr_assert_eq(sq_json_parse("prof.json", bp->text, strlen(bp->text), &root, &err), 0);
    sq_profile *p = (sq_profile *)1;
    cr_assert_eq(sq_profile_from_json(root, "prof.json", &p, &err), SQ_EDATA);
    cr_assert_null(p);
    cr_assert(strstr(err.msg, "prof.json"), "%s", err.msg);
    for (int i = 0; i < 2; i++)
        cr_assert(strstr(err.msg, bp->expect[i]), "'%s' lacks '%s'", err.msg, bp->expect[i]);
    cJSON_Delete(root);
}

Test(hardware, csv_import_reads_units_and_combines_repeats)
{
    char *dir = tu_tmpdir(), *path = tu_path(dir, "engine.csv");
    tu_write(path, "# measured in vLLM\ntokens, s\n1,0.010\n1,0.012\n1,0.011\n8, 0.020\n64,0.05\n");
    sq_profile *p;
    sq_error err = {0};
    cr_assert_eq(sq_profile_from_csv(path, "vllm", &p, &err), 0, "%s", err.msg);
    cr_assert_eq(p->n, 3);
    cr_assert(fabs(p->points[0].median_ms - 11.0) < 1e-9);
    cr_assert_eq(p->points[0].samples, 3);
    cr_assert(fabs(p->points[2].median_ms - 50.0) < 1e-9);
    cr_assert_str_eq(p->backend, "vllm");
    sq_profile_free(p);

    const char *bad[][2] = {
        {"tokens,ms,extra\n1,2,3\n", "two columns"},
        {"tokens,minutes\n1,2\n", "unknown time column \"minutes\""},
        {"n,ms\n1,2\n", "expected \"tokens\""},
        {"tokens,ms\n1,abc\n", "engine.csv:2: time"},
        {"tokens,ms\n8,2\n4,1\n4,nan\n", "engine.csv:4: time"},
        {"tokens,ms\n", "no measurement rows"},
        {"", "empty"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        tu_write(path, bad[i][0]);
        sq_error e = {0};
        cr_assert_eq(sq_profile_from_csv(path, "x", &p, &e), SQ_EDATA, "%s", bad[i][0]);
        cr_assert(strstr(e.msg, bad[i][1]), "'%s' lacks '%s'", e.msg, bad[i][1]);
    }
    tu_rmtree(dir);
    free(path);
    free(dir);
}

/* --cost-model sequoia-run (sq_hw_params.cost_model): the choice is the argmax of sequoia-run's
 * predicted speedup over every (n, d) (its table), the engine's tables are what they were, and
 * the hardware section says which model chose; the engine's model (the default) still picks
 * the argmax of its own table and writes no "chosen_by". */
Test(hardware, sequoia_run_cost_model_picks_its_own_argmax)
{
    double p[6] = {0.7, 0.12, 0.06, 0.03, 0.02, 0.01};
    sq_curve c;
    sq_error err = {0};
    cr_assert_eq(sq_curve_init(&c, "t", "stochastic", p, 6, &err), 0, "%s", err.msg);
    sq_dp *dp = solve(&c, 24, 6);
    int tt[] = {1, 32}, dt[] = {1, 32};
    double tm[] = {10, 13.1}, dm[] = {0.5, 6.7};   /* a draft as costly per token as the target */
    sq_profile *t = make_profile(tt, tm, 2), *d = make_profile(dt, dm, 2);
    sq_hw_result *r[2];
    for (int m = 0; m < 2; m++) {
        sq_hw_params hp = sq_hw_default_params();
        hp.target = t;
        hp.draft = d;
        hp.cost_model = (sq_cost_model)m;
        cr_assert_eq(sq_hw_select(dp, &hp, &r[m], &err), 0, "%s", err.msg);
        const double *tab = m ? r[m]->runtime_speedup_table : r[m]->speedup_table;
        double top = -1;
        int tn = 0, td = 0;
        for (int dd = 1; dd <= r[m]->D; dd++)
            for (int n = 1; n <= r[m]->N; n++) {
                double v = tab[(size_t)n * (size_t)(r[m]->D + 1) + (size_t)dd];
                if (isfinite(v) && v > top)
                    top = v, tn = n, td = dd;
            }
        cr_expect(r[m]->n == tn && r[m]->d == td, "model %d: (%d, %d), argmax (%d, %d)", m,
                  r[m]->n, r[m]->d, tn, td);
        cr_expect_float_eq(m ? r[m]->runtime_speedup : r[m]->speedup, top, 1e-12 * top);
        cJSON *j = sq_hw_to_json(r[m], &hp, "t.json", "d.json");
        const cJSON *by = sq_json_field(j, "chosen_by");
        if (m)
            cr_expect(cJSON_IsString(by) && !strcmp(by->valuestring, "sequoia-run"));
        else
            cr_expect_null(by);
        cJSON_Delete(j);
    }
    /* the same tables under both: only the choice moves */
    size_t cells = (size_t)(r[0]->N + 1) * (size_t)(r[0]->D + 1);
    for (size_t i = 0; i < cells; i++)
        cr_assert(memcmp(&r[0]->speedup_table[i], &r[1]->speedup_table[i], sizeof(double)) == 0 &&
                  memcmp(&r[0]->runtime_speedup_table[i], &r[1]->runtime_speedup_table[i],
                         sizeof(double)) == 0, "cell %zu", i);
    cr_expect(sq_cost_model_parse("engine") == SQ_COST_ENGINE &&
              sq_cost_model_parse("sequoia-run") == SQ_COST_SEQUOIA_RUN &&
              sq_cost_model_parse("foo") == -1);
    sq_hw_result_free(r[0]);
    sq_hw_result_free(r[1]);
    sq_profile_free(t);
    sq_profile_free(d);
    sq_dp_free(dp);
    sq_curve_clear(&c);
}

/* --sizes budget: the one candidate is the budget's own tree at the depth bound, the tree a plan
 * holds without profiles; its price is the full search's table entry at (N, D), to the bit, under
 * both cost models, and the JSON says so. */
Test(hardware, budget_only_prices_the_budgets_tree_without_choosing)
{
    double p[6] = {0.7, 0.12, 0.06, 0.03, 0.02, 0.01};
    sq_curve c;
    sq_error err = {0};
    cr_assert_eq(sq_curve_init(&c, "t", "stochastic", p, 6, &err), 0, "%s", err.msg);
    int tt[] = {1, 32}, dt[] = {1, 32};
    double tm[] = {10, 13.1}, dm[] = {0.5, 6.7};
    sq_profile *t = make_profile(tt, tm, 2), *d = make_profile(dt, dm, 2);
    static const int cases[][2] = {{24, 6}, {8, 8}, {16, 4}, {1, 1}};
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        sq_dp *dp = solve(&c, cases[k][0], cases[k][1]);
        sq_hw_params hp = sq_hw_default_params();
        hp.target = t;
        hp.draft = d;
        sq_hw_result *all, *one;
        cr_assert_eq(sq_hw_select(dp, &hp, &all, &err), 0, "%s", err.msg);
        hp.budget_only = 1;
        cr_assert_eq(sq_hw_select(dp, &hp, &one, &err), 0, "%s", err.msg);
        const int N = all->N, D = all->D;
        const size_t at = (size_t)N * (size_t)(D + 1) + (size_t)D;
        cr_assert(one->n == N && one->d == D, "case %zu: (%d, %d), the budget (%d, %d)", k,
                  one->n, one->d, N, D);
        cr_assert(one->speedup_table[at] == all->speedup_table[at] &&
                  one->runtime_speedup_table[at] == all->runtime_speedup_table[at],
                  "case %zu: %.17g %.17g against the table's %.17g %.17g", k,
                  one->speedup_table[at], one->runtime_speedup_table[at], all->speedup_table[at],
                  all->runtime_speedup_table[at]);
        cr_assert_float_eq(one->speedup, all->speedup_table[at], 1e-14 * one->speedup);
        cr_assert_float_eq(one->runtime_speedup, all->runtime_speedup_table[at],
                           1e-14 * one->runtime_speedup);
        for (size_t i = 0; i < (size_t)(N + 1) * (size_t)(D + 1); i++)   /* nothing else */
            cr_assert(i == at || isnan(one->speedup_table[i]), "case %zu: cell %zu", k, i);
        cr_assert_float_eq(one->expected_tokens, sq_dp_best(dp, N, D), 0);
        cJSON *j = sq_hw_to_json(one, &hp, "t.json", "d.json");
        cr_assert_str_eq(cJSON_GetStringValue(sq_json_field(j, "candidates")), "the budget's tree");
        cJSON_Delete(j);
        sq_hw_result_free(all);
        sq_hw_result_free(one);
        sq_dp_free(dp);
    }
    sq_profile_free(t);
    sq_profile_free(d);
    sq_curve_clear(&c);
}
