/* Suite 'ladder': batch profiles (profile format version 2) and the batch-size ladder
 * (planner/ladder.h), against closed forms and against the single-batch hardware choice. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "libsequoia/base/json.h"
#include "planner/hardware.h"
#include "planner/ladder.h"
#include "tests/testutil.h"

/* A profile over batches[0..nb) × tokens 1..maxn with t(b, n) = f(b, n). */
static sq_profile *batch_profile(const int *batches, int nb, int maxn,
                                 double (*f)(int b, int n))
{
    sq_profile *p = calloc(1, sizeof *p);
    p->device = strdup("test");
    p->backend = strdup("cpu");
    p->dtype = strdup("f32");
    p->prefix = 0;
    p->points = calloc((size_t)(nb * maxn), sizeof *p->points);
    for (int i = 0; i < nb; i++)
        for (int n = 1; n <= maxn; n++)
            p->points[p->n++] = (sq_profile_point){.batch = batches[i], .tokens = n,
                                                   .median_ms = f(batches[i], n), .p10_ms = NAN,
                                                   .p90_ms = NAN, .samples = 1};
    sq_error err = {0};
    cr_assert_eq(sq_profile_validate(p, "test", &err), 0, "%s", err.msg);
    return p;
}

static void curve(sq_curve *c)
{
    double p[8] = {0.6, 0.15, 0.08, 0.05, 0.03, 0.02, 0.01, 0.01};
    sq_error err = {0};
    cr_assert_eq(sq_curve_init(c, "t", "stochastic", p, 8, &err), 0, "%s", err.msg);
}

static sq_dp *solve(const sq_curve *c, int n, int d)
{
    sq_dp_params prm = {.budget = n, .depth = d, .width = 0, .curve = c};
    sq_dp *dp;
    sq_error err = {0};
    cr_assert_eq(sq_dp_solve(&prm, &dp, &err), 0, "%s", err.msg);
    return dp;
}

/* Memory-bound up to a knee of 8 rows, then compute-bound: t = 1 + 0.25·max(0, b·n - 8). */
static double knee(int b, int n)
{
    int rows = b * n;
    return 1.0 + 0.25 * (rows > 8 ? rows - 8 : 0);
}
static double flat(int b, int n) { (void)b; (void)n; return 2.0; }
static double linear(int b, int n) { return 0.1 * b * n; }

/* ---- profile format version 2 ------------------------------------------------------------ */

Test(ladder, batch_profiles_round_trip_and_version_1_reads_as_batch_1)
{
    int b[] = {1, 2, 4};
    sq_profile *p = batch_profile(b, 3, 4, knee);
    cJSON *j = sq_profile_to_json(p);
    cr_assert_eq(sq_json_field(j, "version")->valuedouble, 2);
    sq_profile *q;
    sq_error err = {0};
    cr_assert_eq(sq_profile_from_json(j, "p.json", &q, &err), 0, "%s", err.msg);
    cr_assert_eq(q->n, 12);
    int got[8];
    cr_assert_eq(sq_profile_batches(q, got, 8), 3);
    cr_assert(got[0] == 1 && got[1] == 2 && got[2] == 4);
    double ms;
    cr_assert_eq(sq_profile_ms_batch(q, 4, 3, SQ_EXTRAPOLATE_NONE, &ms, &err), 0);
    cr_assert_float_eq(ms, knee(4, 3), 1e-12);
    cr_assert_eq(sq_profile_ms(q, 2.5, SQ_EXTRAPOLATE_NONE, &ms, &err), 0);
    cr_assert_float_eq(ms, 1.0, 1e-12, "the plain lookup is batch 1");
    cr_assert_eq(sq_profile_ms_batch(q, 3, 1, SQ_EXTRAPOLATE_NONE, &ms, &err), SQ_EUSAGE);
    cr_assert(strstr(err.msg, "batch size 3"), "%s", err.msg);
    cJSON_Delete(j);
    sq_profile_free(q);
    sq_profile_free(p);

    /* version 1: no batch field, every point batch 1; written back as version 1 */
    const char *v1 = "{\"format\":\"sequoia-profile\",\"version\":1,\"points\":["
                     "{\"tokens\":1,\"median_ms\":1},{\"tokens\":2,\"median_ms\":1.5}]}";
    cJSON *r = cJSON_Parse(v1);
    cr_assert_eq(sq_profile_from_json(r, "v1.json", &q, &err), 0, "%s", err.msg);
    cr_assert(q->points[0].batch == 1 && q->points[1].batch == 1);
    cJSON *back = sq_profile_to_json(q);
    cr_assert_eq(sq_json_field(back, "version")->valuedouble, 1);
    cr_assert_null(sq_json_field(sq_json_field(back, "points")->child, "batch"));
    cJSON_Delete(back);
    cJSON_Delete(r);
    sq_profile_free(q);
}

Test(ladder, batch_profiles_refuse_bad_order_and_sizes)
{
    const char *bad[][2] = {
        {"{\"format\":\"sequoia-profile\",\"version\":2,\"points\":[{\"batch\":2,\"tokens\":1,"
         "\"median_ms\":1},{\"batch\":1,\"tokens\":1,\"median_ms\":1}]}", "ordered by batch"},
        {"{\"format\":\"sequoia-profile\",\"version\":2,\"points\":[{\"batch\":2,\"tokens\":2,"
         "\"median_ms\":1},{\"batch\":2,\"tokens\":2,\"median_ms\":1}]}", "increase strictly"},
        {"{\"format\":\"sequoia-profile\",\"version\":2,\"points\":[{\"batch\":0,\"tokens\":2,"
         "\"median_ms\":1}]}", "batch"},
        {"{\"format\":\"sequoia-profile\",\"version\":3,\"points\":[]}", "version"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        cJSON *r = cJSON_Parse(bad[i][0]);
        sq_profile *q = NULL;
        sq_error err = {0};
        cr_assert_eq(sq_profile_from_json(r, "b.json", &q, &err), SQ_EDATA, "case %zu", i);
        cr_assert(strstr(err.msg, "b.json") && strstr(err.msg, bad[i][1]), "case %zu: %s", i,
                  err.msg);
        cJSON_Delete(r);
    }
}

/* ---- the ladder ----------------------------------------------------------------------------- */

static sq_ladder *ladder(sq_dp *dp, const sq_curve *c, const sq_profile *t, const sq_profile *d,
                         sq_objective obj)
{
    sq_ladder_params prm = {.target = t, .draft = d, .draft_ms = 0.0, .objective = obj,
                            .extrapolate = SQ_EXTRAPOLATE_NONE};
    sq_ladder *l;
    sq_error err = {0};
    cr_assert_eq(sq_ladder_solve(dp, c, &prm, &l, &err), 0, "%s", err.msg);
    return l;
}

Test(ladder, each_rung_is_the_hardware_choice_at_its_batch_size)
{
    sq_curve c;
    curve(&c);
    sq_dp *dp = solve(&c, 32, 6);
    int b[] = {1, 2, 4, 8};
    sq_profile *t = batch_profile(b, 4, 32, knee), *d = batch_profile(b, 4, 32, flat);
    sq_ladder *l = ladder(dp, &c, t, d, SQ_OBJECTIVE_LATENCY);
    cr_assert_eq(l->n, 4);
    for (int i = 0; i < 4; i++) {
        sq_profile *ts, *ds;
        sq_error err = {0};
        cr_assert_eq(sq_profile_slice(t, b[i], &ts, &err), 0);
        cr_assert_eq(sq_profile_slice(d, b[i], &ds, &err), 0);
        sq_hw_params hw = sq_hw_default_params();
        hw.target = ts;
        hw.draft = ds;
        sq_hw_result *r;
        cr_assert_eq(sq_hw_select(dp, &hw, &r, &err), 0, "%s", err.msg);
        cr_assert_float_eq(l->rungs[i].best.speedup, r->speedup, 1e-12, "batch %d", b[i]);
        cr_assert_eq(l->rungs[i].best.size, r->n, "batch %d", b[i]);
        cr_assert_float_eq(l->rungs[i].best.tokens_per_s,
                           1e3 * b[i] * r->expected_tokens / r->step_ms, 1e-9);
        sq_hw_result_free(r);
        sq_profile_free(ts);
        sq_profile_free(ds);
    }
    sq_ladder_free(l);
    sq_profile_free(t);
    sq_profile_free(d);
    sq_dp_free(dp);
    sq_curve_clear(&c);
}

/* A draft whose forward grows with its rows: the engine's model (first forward over F tokens,
 * every node of a level) and sequoia-run's (over c tokens, the nodes with children) differ. */
static double draft_rows(int b, int n) { return 0.2 + 0.05 * b * n; }

/* Each rung's sequoia-run prediction (planner/hardware.h, "Two cost models") equals the plan
 * written for that batch size alone (sq_hw_select on the profiles sliced at b), under either
 * cost model; with --cost-model sequoia-run the rung's tree is the argmax of sequoia-run's
 * speedup over every (n, d), and the engine model's ladder is the one before the option. */
Test(ladder, rungs_carry_sequoia_runs_prediction_under_either_cost_model)
{
    sq_curve c;
    curve(&c);
    sq_dp *dp = solve(&c, 32, 6);
    int b[] = {1, 2, 4, 8};
    sq_profile *t = batch_profile(b, 4, 32, knee), *d = batch_profile(b, 4, 32, draft_rows);
    for (int m = 0; m < 2; m++) {
        sq_ladder_params prm = {.target = t, .draft = d, .objective = SQ_OBJECTIVE_LATENCY,
                                .extrapolate = SQ_EXTRAPOLATE_NONE, .cost_model = m};
        sq_ladder *l;
        sq_error err = {0};
        cr_assert_eq(sq_ladder_solve(dp, &c, &prm, &l, &err), 0, "%s", err.msg);
        cr_assert_eq(l->n, 4);
        for (int i = 0; i < 4; i++) {
            const sq_ladder_choice *best = &l->rungs[i].best;
            sq_profile *ts, *ds;
            cr_assert_eq(sq_profile_slice(t, b[i], &ts, &err), 0);
            cr_assert_eq(sq_profile_slice(d, b[i], &ds, &err), 0);
            sq_hw_params hw = sq_hw_default_params();
            hw.target = ts;
            hw.draft = ds;
            hw.cost_model = m;
            sq_hw_result *r;
            cr_assert_eq(sq_hw_select(dp, &hw, &r, &err), 0, "%s", err.msg);
            cr_assert_eq(best->size, r->n, "model %d batch %d", m, b[i]);
            cr_assert_float_eq(best->run_step_ms, r->runtime_step_ms, 1e-12);
            cr_assert_float_eq(best->run_catchup, r->runtime_catchup, 1e-12);
            cr_assert_float_eq(best->run_speedup, r->runtime_speedup, 1e-12);
            cr_assert_float_eq(best->run_tokens_per_s,
                               1e3 * b[i] * r->expected_tokens / r->runtime_step_ms, 1e-9);
            cr_assert_float_eq(best->speedup, r->speedup, 1e-12);
            cr_assert_float_eq(best->gain, m ? best->run_speedup : best->speedup, 1e-15);
            /* the argmax of the chosen model's speedup over every candidate */
            const double *tab = m ? r->runtime_speedup_table : r->speedup_table;
            for (int n = 1; n <= r->N; n++)
                for (int dd = 1; dd <= r->D; dd++) {
                    double v = tab[(size_t)n * (size_t)(r->D + 1) + (size_t)dd];
                    cr_assert(!(v > best->gain * (1 + 1e-12)), "model %d batch %d: (%d, %d) "
                              "%.6f beats the rung's %.6f", m, b[i], n, dd, v, best->gain);
                }
            sq_hw_result_free(r);
            sq_profile_free(ts);
            sq_profile_free(ds);
        }
        /* the ladder file: every choice's sequoia_run, and who chose */
        cJSON *j = sq_ladder_to_json(l, &prm);
        const cJSON *r0 = cJSON_GetArrayItem(sq_json_field(j, "rungs"), 0);
        const cJSON *rt = sq_json_field(sq_json_field(r0, "tree"), "sequoia_run");
        cr_assert(cJSON_IsObject(rt));
        cr_assert_float_eq(sq_json_field(rt, "tokens_per_second")->valuedouble,
                           l->rungs[0].best.run_tokens_per_s, 1e-12);
        cr_assert(sq_json_field(sq_json_field(r0, "chain"), "sequoia_run"));
        const cJSON *by = sq_json_field(j, "chosen_by");
        if (m)
            cr_assert(cJSON_IsString(by) && !strcmp(by->valuestring, "sequoia-run"));
        else
            cr_assert_null(by, "the engine's ladder says nothing new");
        cJSON_Delete(j);
        sq_ladder_free(l);
    }
    sq_profile_free(t);
    sq_profile_free(d);
    sq_dp_free(dp);
    sq_curve_clear(&c);
}

Test(ladder, crossover_where_the_forward_stops_being_memory_bound)
{
    /* Draft free (fixed model, 0 ms). t = 1 + 0.25·max(0, b·n − 8): at batch b a tree of n ≤ 8/b
     * nodes costs one plain step, so it pays while 8/b ≥ 2; at b = 8 and 16 any tree costs
     * 0.25·8·(n−1) more per step, F(n) − 1 < 2·(n − 1) for every n > 1 (p_1 < 1): no tree pays. */
    sq_curve c;
    curve(&c);
    sq_dp *dp = solve(&c, 16, 6);
    int b[] = {1, 2, 4, 8, 16};
    sq_profile *t = batch_profile(b, 5, 16, knee);
    sq_ladder *l = ladder(dp, &c, t, NULL, SQ_OBJECTIVE_LATENCY);
    cr_assert(l->rungs[0].pays && l->rungs[1].pays && l->rungs[2].pays);
    cr_assert_eq(l->rungs[2].best.size, 2, "batch 4: two nodes fill the 8 free rows");
    cr_assert(!l->rungs[3].pays && !l->rungs[4].pays);
    cr_assert_eq(l->crossover, 8);
    cr_assert_eq(l->rungs[3].best.size, 1);
    cr_assert_float_eq(l->rungs[3].best.speedup, 1.0, 1e-12);
    sq_ladder_free(l);
    sq_profile_free(t);

    /* linear cost, no fixed part: nothing ever pays, the crossover is the first batch */
    t = batch_profile(b, 5, 16, linear);
    l = ladder(dp, &c, t, NULL, SQ_OBJECTIVE_LATENCY);
    cr_assert_eq(l->crossover, 1);
    sq_ladder_free(l);
    sq_profile_free(t);

    /* flat cost: the whole budget pays everywhere */
    t = batch_profile(b, 5, 16, flat);
    l = ladder(dp, &c, t, NULL, SQ_OBJECTIVE_LATENCY);
    cr_assert_eq(l->crossover, 0);
    for (int i = 0; i < 5; i++)
        cr_assert_eq(l->rungs[i].best.size, 16);
    sq_ladder_free(l);
    sq_profile_free(t);
    sq_dp_free(dp);
    sq_curve_clear(&c);
}

Test(ladder, throughput_objective_compares_with_more_sequences)
{
    /* Flat cost at every batch: serving min(b·n, 64) sequences plainly gives that many tokens
     * per step against b·F(n) with speculation. F(n) < n, so nothing pays while b·n ≤ 64 for
     * every n ≤ 8 (b ≤ 8); at b = 16 the best is 16·F(8) against 64, and F(8) < 4. At 32 the
     * whole budget pays exactly when F(8) > 2; at 64 there is no larger batch to compare with.
     * The latency objective takes the whole budget everywhere. */
    sq_curve c;
    curve(&c);
    sq_dp *dp = solve(&c, 8, 4);
    int b[] = {1, 2, 4, 8, 16, 32, 64};
    sq_profile *t = batch_profile(b, 7, 8, flat);
    sq_ladder *l = ladder(dp, &c, t, NULL, SQ_OBJECTIVE_THROUGHPUT);
    double F8 = sq_dp_best(dp, 8, 4);
    cr_assert(F8 < 4);
    for (int i = 0; i < 5; i++)
        cr_assert(!l->rungs[i].pays, "batch %d", b[i]);
    cr_assert_eq(l->rungs[5].pays, F8 > 2, "batch 32, F(8) = %g", F8);
    cr_assert_float_eq(l->rungs[5].best.gain, F8 > 2 ? F8 / 2 : 1.0, 1e-12);
    cr_assert(l->rungs[6].pays, "at the largest batch there is no larger one to compare with");
    cr_assert_eq(l->crossover, 0, "pays again at 64: no batch from which on nothing pays");
    sq_ladder_free(l);
    l = ladder(dp, &c, t, NULL, SQ_OBJECTIVE_LATENCY);
    for (int i = 0; i < 7; i++)
        cr_assert(l->rungs[i].pays);
    sq_ladder_free(l);
    sq_profile_free(t);
    sq_dp_free(dp);
    sq_curve_clear(&c);
}

Test(ladder, a_draft_profile_missing_a_batch_is_refused)
{
    sq_curve c;
    curve(&c);
    sq_dp *dp = solve(&c, 8, 4);
    int b[] = {1, 2, 4}, bd[] = {1, 2};
    sq_profile *t = batch_profile(b, 3, 8, knee), *d = batch_profile(bd, 2, 8, flat);
    sq_ladder_params prm = {.target = t, .draft = d, .target_file = "t.json",
                            .draft_file = "d.json"};
    sq_ladder *l = NULL;
    sq_error err = {0};
    cr_assert_eq(sq_ladder_solve(dp, &c, &prm, &l, &err), SQ_EUSAGE);
    cr_assert(strstr(err.msg, "d.json") && strstr(err.msg, "batch size 4"), "%s", err.msg);
    sq_profile_free(t);
    sq_profile_free(d);
    sq_dp_free(dp);
    sq_curve_clear(&c);
}

Test(ladder, exports_parse_as_the_engines_expect)
{
    sq_curve c;
    curve(&c);
    sq_dp *dp = solve(&c, 16, 6);
    int b[] = {1, 2, 4, 8, 16};
    sq_profile *t = batch_profile(b, 5, 16, knee);
    sq_ladder *l = ladder(dp, &c, t, NULL, SQ_OBJECTIVE_LATENCY);
    char *buf = NULL;
    size_t len = 0;
    FILE *fp = open_memstream(&buf, &len);
    sq_error err = {0};
    cr_assert_eq(sq_ladder_export(l, "trtllm-schedule", fp, &err), 0, "%s", err.msg);
    fclose(fp);
    cJSON *j = cJSON_Parse(buf);
    cr_assert_not_null(j, "%s", buf);
    const cJSON *s = sq_json_field(j, "draft_len_schedule");
    const cJSON *one = sq_json_field(s, "1");
    cr_assert_not_null(one, "the schedule has batch 1: %s", buf);
    cr_assert_eq(one->valueint, sq_json_field(j, "max_draft_len")->valueint,
                 "TensorRT-LLM requires schedule[1] == max_draft_len");
    cr_assert_eq(one->valueint, l->rungs[0].chain.size - 1);
    cr_assert_not_null(sq_json_field(s, "8"), "speculation switches off at the crossover: %s", buf);
    cr_assert_eq(sq_json_field(s, "8")->valueint, 0);
    for (const cJSON *e = s->child; e; e = e->next) {
        char *end;
        long key = strtol(e->string, &end, 10);
        cr_assert(!*end && key >= 1, "keys are batch thresholds: %s", e->string);
    }
    cJSON_Delete(j);
    free(buf);

    fp = open_memstream(&buf, &len);
    cr_assert_eq(sq_ladder_export(l, "envelopes", fp, &err), 0, "%s", err.msg);
    fclose(fp);
    j = cJSON_Parse(buf);
    cr_assert_not_null(j, "%s", buf);
    const cJSON *rows = sq_json_field(j, "per_batch");
    cr_assert_eq(cJSON_GetArraySize(rows), 5);
    const cJSON *r0 = rows->child, *sg = sq_json_field(r0, "sglang");
    const cJSON *tr = sq_json_field(r0, "trtllm_dynamic");
    cr_assert_eq(sq_json_field(sg, "speculative_num_draft_tokens")->valueint, l->rungs[0].best.size,
                 "SGLang counts the root");
    cr_assert_eq(sq_json_field(tr, "max_total_draft_tokens")->valueint,
                 l->rungs[0].best.size - 1, "TensorRT-LLM does not");
    cr_assert_eq(sq_json_field(sg, "speculative_num_steps")->valueint, l->rungs[0].best.depth - 1);
    const cJSON *r3 = cJSON_GetArrayItem(rows, 3);
    cr_assert(cJSON_IsFalse(sq_json_field(r3, "speculate")), "batch 8 is past the crossover");
    cr_assert_null(sq_json_field(r3, "sglang"));
    cJSON_Delete(j);
    free(buf);
    fp = open_memstream(&buf, &len);
    cr_assert_eq(sq_ladder_export(l, "medusa", fp, &err), SQ_EUSAGE);
    fclose(fp);
    free(buf);

    /* the ladder file */
    cJSON *lj = sq_ladder_to_json(l, &(sq_ladder_params){.target = t});
    cr_assert_str_eq(sq_json_field(lj, "format")->valuestring, "sequoia-ladder");
    cr_assert_eq(sq_json_field(lj, "crossover_batch")->valueint, 8);
    cr_assert_eq(cJSON_GetArraySize(sq_json_field(lj, "rungs")), 5);
    cJSON_Delete(lj);
    sq_ladder_free(l);
    sq_profile_free(t);
    sq_dp_free(dp);
    sq_curve_clear(&c);
}

Test(ladder, a_profile_of_one_batch_size_is_not_a_ladder)
{
    sq_curve c;
    curve(&c);
    sq_dp *dp = solve(&c, 8, 4);
    int b[] = {1};
    sq_profile *t = batch_profile(b, 1, 8, knee);
    sq_ladder_params prm = {.target = t, .draft_ms = 0.1, .target_file = "t.json"};
    sq_ladder *l = NULL;
    sq_error err = {0};
    cr_assert_eq(sq_ladder_solve(dp, &c, &prm, &l, &err), SQ_EUSAGE);
    cr_assert(strstr(err.msg, "t.json") && strstr(err.msg, "--batch"), "%s", err.msg);
    sq_profile_free(t);
    sq_dp_free(dp);
    sq_curve_clear(&c);
}

/* ---- the tool ----------------------------------------------------------------------------- */

static void write_batch_profile(const char *path, double fixed, double per_row)
{
    FILE *fp = fopen(path, "w");
    cr_assert_not_null(fp);
    fprintf(fp, "{\"format\":\"sequoia-profile\",\"version\":2,\"points\":[");
    int b[] = {1, 2, 4, 8, 16};
    for (int i = 0; i < 5; i++)
        for (int n = 1; n <= 32; n++)
            fprintf(fp, "%s{\"batch\":%d,\"tokens\":%d,\"median_ms\":%.6f}", i || n > 1 ? "," : "",
                    b[i], n, fixed + per_row * (b[i] * n > 16 ? b[i] * n - 16 : 0));
    fprintf(fp, "]}\n");
    fclose(fp);
}

Test(ladder, sequoia_plan_ladder_writes_every_file_and_refuses_bad_requests)
{
    char *dir = tu_tmpdir();
    char *t = tu_path(dir, "t.json"), *d = tu_path(dir, "d.json"), *o = tu_path(dir, "l.json");
    char *s = tu_path(dir, "s.json"), *e = tu_path(dir, "e.json"), *g = tu_path(dir, "l.svg");
    char *p = tu_path(dir, "plans");
    write_batch_profile(t, 1.0, 0.05);
    write_batch_profile(d, 0.1, 0.005);
    char *argv[] = {getenv("SQ_PLAN_BIN"), "--ladder", "--target-profile", t, "--draft-profile",
                    d, "-n", "32", "-d", "6", "-o", o, "--schedule", s, "--envelopes", e, "--svg",
                    g, "--ladder-plans", p, NULL};
    char *out = NULL, *se = NULL;
    cr_assert_eq(tu_run(argv, &out, &se), 0, "%s", se);
    cr_assert(strstr(out, "batch"), "%s", out);
    size_t len;
    char *text = tu_read(o, &len);
    cJSON *j = cJSON_Parse(text);
    cr_assert_str_eq(sq_json_field(j, "format")->valuestring, "sequoia-ladder");
    cr_assert_eq(cJSON_GetArraySize(sq_json_field(j, "rungs")), 5);
    cJSON_Delete(j);
    free(text);
    char *p16 = tu_path(p, "plan-b16.json");
    sq_plan *plan;
    sq_error err = {0};
    cr_assert_eq(sq_plan_load(p16, &plan, &err), 0, "%s", err.msg);
    sq_plan_free(plan);
    text = tu_read(g, &len);
    cr_assert(strstr(text, "<svg") && strstr(text, "optimal tree"));
    /* drawn by the one SVG writer (libsequoia/base/svg.h): its document and its axes group */
    cr_assert(strncmp(text, "<?xml", 5) == 0 && strstr(text, "<g class=\"axes\" data-x-scale=\"log2\""),
              "%.300s", text);
    free(text);
    text = tu_read(s, &len);
    cr_assert(strstr(text, "draft_len_schedule"), "%s", text);
    free(text);
    free(out);
    free(se);

    /* a version 1 profile is not a batch profile */
    char *v1 = tu_path(dir, "v1.json");
    tu_write(v1, "{\"format\":\"sequoia-profile\",\"version\":1,\"points\":["
                 "{\"tokens\":1,\"median_ms\":1},{\"tokens\":64,\"median_ms\":2}]}");
    char *argv2[] = {getenv("SQ_PLAN_BIN"), "--ladder", "--target-profile", v1, "--draft-ms",
                     "0.1", "-n", "16", "-o", o, NULL};
    cr_assert_eq(tu_run(argv2, NULL, &se), SQ_EUSAGE);
    cr_assert(strstr(se, "v1.json") && strstr(se, "batch profile"), "%s", se);
    free(se);
    /* ladder options without --ladder, and --ladder without profiles */
    char *argv3[] = {getenv("SQ_PLAN_BIN"), "--objective", "throughput", NULL};
    cr_assert_eq(tu_run(argv3, NULL, &se), SQ_EUSAGE);
    cr_assert(strstr(se, "--ladder"), "%s", se);
    free(se);
    char *argv4[] = {getenv("SQ_PLAN_BIN"), "--ladder", NULL};
    cr_assert_eq(tu_run(argv4, NULL, &se), SQ_EUSAGE);
    cr_assert(strstr(se, "--target-profile"), "%s", se);
    free(se);
    char *argv5[] = {getenv("SQ_PLAN_BIN"), "--ladder", "--objective", "speed", NULL};
    cr_assert_eq(tu_run(argv5, NULL, &se), SQ_EUSAGE);
    cr_assert(strstr(se, "speed"), "%s", se);
    free(se);
    free(t); free(d); free(o); free(s); free(e); free(g); free(p); free(p16); free(v1);
    tu_rmtree(dir);
}

/* --vllm-schedule writes vLLM's chain per batch size (sq_ladder_export "vllm-schedule"); a
 * schedule the engine cannot take is refused (65) and, outputs being all or nothing
 * (docs/robustness.md), nothing is written: not the ladder either (examples/ladder.sh asks for
 * the schedules in runs of their own). */
Test(ladder, sequoia_plan_vllm_schedule_and_a_refused_schedule)
{
    char *dir = tu_tmpdir();
    char *t = tu_path(dir, "t.json"), *d = tu_path(dir, "d.json"), *o = tu_path(dir, "l.json");
    char *v = tu_path(dir, "v.json"), *s = tu_path(dir, "s.json");
    write_batch_profile(t, 1.0, 0.05);
    write_batch_profile(d, 0.1, 0.005);
    char *argv[] = {getenv("SQ_PLAN_BIN"), "--ladder", "--target-profile", t, "--draft-profile",
                    d, "-n", "32", "-d", "6", "-q", "-o", o, "--vllm-schedule", v, NULL};
    char *se = NULL;
    cr_assert_eq(tu_run(argv, NULL, &se), 0, "%s", se);
    free(se);
    size_t len;
    char *text = tu_read(v, &len);
    cJSON *j = cJSON_Parse(text);
    cr_assert(j, "%s", text);
    cr_assert_gt(sq_json_field(j, "num_speculative_tokens")->valueint, 0, "%s", text);
    const cJSON *r = sq_json_field(j, "num_speculative_tokens_per_batch_size");
    cr_assert(cJSON_IsArray(r) && cJSON_GetArraySize(r) >= 1, "%s", text);
    cr_assert_eq(cJSON_GetArrayItem(cJSON_GetArrayItem(r, 0), 0)->valueint, 1, "%s", text);
    cJSON_Delete(j);
    free(text);
    cr_assert_eq(remove(o), 0);
    /* a draft as slow as 100 ms a level: no chain pays, neither engine takes a schedule */
    const char *opt[] = {"--schedule", "--vllm-schedule"};
    for (int i = 0; i < 2; i++) {
        char *argv2[] = {getenv("SQ_PLAN_BIN"), "--ladder", "--target-profile", t, "--draft-ms",
                         "100", "-n", "32", "-d", "6", "-q", "-o", o, (char *)opt[i], s, NULL};
        cr_assert_eq(tu_run(argv2, NULL, &se), SQ_EDATA, "%s: %s", opt[i], se);
        cr_assert(strstr(se, "no chain pays"), "%s", se);
        cr_assert(!tu_exists(o) && !tu_exists(s), "%s: nothing written", opt[i]);
        free(se);
    }
    free(t); free(d); free(o); free(v); free(s);
    tu_rmtree(dir);
}

/* sequoia-plan --cost-model sequoia-run with --ladder and with a single hardware plan: the
 * summary and the files say which model chose (chosen_by), the ladder's summary prints both
 * models; the default writes the same ladder and plan as --cost-model engine, without
 * chosen_by. */
Test(ladder, sequoia_plan_cost_model_in_ladders_and_plans)
{
    char *dir = tu_tmpdir();
    char *t = tu_path(dir, "t.json"), *d = tu_path(dir, "d.json"), *o = tu_path(dir, "l.json");
    char *oe = tu_path(dir, "le.json"), *od = tu_path(dir, "ld.json");
    write_batch_profile(t, 1.0, 0.05);
    write_batch_profile(d, 0.1, 0.02);
    const char *models[3] = {"sequoia-run", "engine", NULL};
    char *files[3] = {o, oe, od};
    for (int m = 0; m < 3; m++) {
        char *argv[] = {getenv("SQ_PLAN_BIN"), "--ladder", "--target-profile", t,
                        "--draft-profile", d, "-n", "32", "-d", "6", "-o", files[m],
                        models[m] ? "--cost-model" : NULL, (char *)models[m], NULL};
        char *out = NULL, *se = NULL;
        cr_assert_eq(tu_run(argv, &out, &se), 0, "%s", se);
        cr_assert(strstr(out, m ? "chosen by engine's cost model" :
                                  "chosen by sequoia-run's cost model") &&
                  strstr(out, "run tok/s"), "%s", out);
        free(out);
        free(se);
    }
    char *a = tu_read(o, NULL), *b = tu_read(oe, NULL), *c = tu_read(od, NULL);
    cr_assert_str_eq(b, c, "--cost-model engine is the default");
    cr_assert(!strstr(b, "chosen_by") && strstr(a, "\"chosen_by\": \"sequoia-run\""));
    cJSON *j = cJSON_Parse(a);
    const cJSON *r0 = cJSON_GetArrayItem(sq_json_field(j, "rungs"), 0);
    const cJSON *tr = sq_json_field(r0, "tree");
    cr_assert_float_eq(sq_json_field(tr, "gain")->valuedouble,
                       sq_json_field(sq_json_field(tr, "sequoia_run"), "speedup")->valuedouble,
                       1e-12, "the gain is sequoia-run's speedup");
    cJSON_Delete(j);
    free(a);
    free(b);
    free(c);
    /* one plan for the hardware (the profile's smallest batch size, 1) */
    char *p = tu_path(dir, "p.json");
    char *argv2[] = {getenv("SQ_PLAN_BIN"), "--target-profile", t, "--draft-profile", d, "-n",
                     "32", "-d", "6", "-o", p, "--cost-model", "sequoia-run", NULL};
    char *out = NULL, *se = NULL;
    cr_assert_eq(tu_run(argv2, &out, &se), 0, "%s", se);
    cr_assert(strstr(out, "chosen by:      sequoia-run's cost model"), "%s", out);
    free(out);
    free(se);
    sq_plan *plan;
    sq_error err = {0};
    cr_assert_eq(sq_plan_load(p, &plan, &err), 0, "%s", err.msg);
    const cJSON *by = sq_json_field(plan->hardware, "chosen_by");
    cr_assert(cJSON_IsString(by) && !strcmp(by->valuestring, "sequoia-run"));
    cr_assert_null(sq_json_field(plan->hardware, "batch"), "batch 1 is not written");
    sq_plan_free(plan);
    free(t); free(d); free(o); free(oe); free(od); free(p);
    tu_rmtree(dir);
}
