/* runtime/report.c and validate.c: the acceptance counted along the verifier's walks, F with
 * measured acceptance, the prediction and the report, the validation verdicts. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "libsequoia/base/json.h"
#include "libsequoia/format/tree.h"
#include "runtime/report.h"
#include "runtime/validate.h"

/* F(T) through the allocating form of sq_tree_expected_tokens (libsequoia/format/tree.h). */
static double tree_F(const sq_tree *t, const sq_curve *c)
{
    double F = 0;
    cr_assert_eq(sq_tree_score(t, c, &F, NULL), SQ_OK, "out of memory");
    return F;
}

/* root with children of ranks 1, 2; the rank-1 child has one child of rank 1 */
static sq_tree *small_tree(void)
{
    int parent[4] = {-1, 0, 0, 1}, rank[4] = {0, 1, 2, 1};
    sq_tree *t = NULL;
    sq_error err = {0};
    cr_assert_eq(sq_tree_from_parents(parent, rank, 4, &t, "t", &err), 0, "%s", err.msg);
    return t;
}

Test(run_report, F_with_measured_acceptance_is_the_trees_F)
{
    sq_tree *t = small_tree();
    double p[2] = {0.6, 0.25}, F;
    sq_error err = {0};
    cr_assert_eq(sq_tree_f_with(t, p, 2, &F, &err), SQ_OK);
    cr_assert_float_eq(F, 1 + 0.6 + 0.25 + 0.36, 1e-15);
    sq_curve c;
    cr_assert_eq(sq_curve_init(&c, "c", "stochastic", p, 2, &err), 0);
    cr_assert_float_eq(F, tree_F(t, &c), 1e-15);
    /* a rank past W counts as 0 */
    cr_assert_eq(sq_tree_f_with(t, p, 1, &F, &err), SQ_OK);
    cr_assert_float_eq(F, 1 + 0.6 + 0.36, 1e-15);
    sq_curve_clear(&c);
    sq_tree_free(t);
}

/* Walks: each visited node offers ranks 1..children; hits count the accepted rank. */
Test(run_report, acceptance_counts_offered_and_accepted_ranks)
{
    sq_run_acceptance a;
    sq_error err = {0};
    cr_assert_eq(sq_run_acceptance_init(&a, 2, 3, &err), SQ_OK);
    int ch1[3] = {2, 1, 0}, rk1[3] = {1, 1, 0};  /* accepted rank 1, then rank 1, then bonus */
    int ch2[3] = {2, 0, 0}, rk2[3] = {0, 0, 0};  /* nothing accepted at the root */
    int ch3[3] = {2, 0, 0}, rk3[3] = {2, 0, 0};  /* rank 2 accepted, a leaf */
    sq_step_info s[3] = {{.visits = 3, .visit_children = ch1, .visit_rank = rk1},
                         {.visits = 1, .visit_children = ch2, .visit_rank = rk2},
                         {.visits = 2, .visit_children = ch3, .visit_rank = rk3}};
    for (int i = 0; i < 3; i++)
        sq_run_acceptance_add(&a, &s[i]);
    cr_assert_eq(a.offered[0], 4);   /* root three times, depth 1 once */
    cr_assert_eq(a.offered[1], 3);
    cr_assert_eq(a.hits[0], 2);
    cr_assert_eq(a.hits[1], 1);
    double p[2];
    sq_run_acceptance_p(&a, p);
    cr_assert_float_eq(p[0], 0.5, 1e-15);
    cr_assert_float_eq(p[1], 1.0 / 3, 1e-15);
    cr_assert_eq(a.offered_d[0 * 2 + 0], 3);
    cr_assert_eq(a.hits_d[1 * 2 + 0], 1);
    sq_run_acceptance_free(&a);
}

static sq_plan *plan_of(double expected)
{
    double p[2] = {0.6, 0.25};
    sq_curve c;
    sq_error err = {0};
    cr_assert_eq(sq_curve_init(&c, "c", "stochastic", p, 2, &err), 0);
    sq_plan *plan;
    cr_assert_eq(sq_plan_new(small_tree(), &c, 4, 3, 2, &plan, &err), 0, "%s", err.msg);
    sq_curve_clear(&c);
    plan->expected_tokens = expected;
    return plan;
}

/* The prediction: inside the CI, outside it (with the split of the gap), too few steps. */
Test(run_report, prediction_and_report)
{
    sq_run_acceptance a;
    sq_error err = {0};
    cr_assert_eq(sq_run_acceptance_init(&a, 2, 3, &err), SQ_OK);
    int ch[3] = {2, 1, 0}, rk[3] = {1, 1, 0};
    sq_step_info s = {.visits = 3, .visit_children = ch, .visit_rank = rk};
    sq_run_acceptance_add(&a, &s);
    int steps[8] = {2, 3, 2, 3, 2, 3, 2, 3};
    int32_t gen[16] = {0}, base[16] = {0};
    base[5] = 9;
    sq_validation val = {.ran = 1, .attn_ok = 1, .attn_tol = 1e-4};
    sq_validate_greedy(gen, base, 16, &val);
    cr_assert(val.greedy_checked && !val.greedy_ok && val.greedy_first_mismatch == 5);
    cr_assert(!sq_validation_pass(&val));
    sq_plan *plan = plan_of(2.5);
    sq_run_record r = {.draft = "d", .target = "t", .plan_file = "p.json", .prompt_file = "x",
                       .mode = "greedy", .backend = "cpu", .dtype = "f32", .prompt_tokens = 3,
                       .max_new_tokens = 16, .context = 64, .vocab_size = 32, .plan = plan,
                       .depth = 3, .steps = 8, .step_tokens = steps, .acc = &a, .spec_ms = 10,
                       .gen = gen, .base = base, .base_ms = 20, .val = &val};
    sq_run_prediction pr;
    cr_assert_eq(sq_run_predict(&r, &pr, &err), SQ_OK);
    cr_assert(pr.have_ci && pr.within, "mean 2.5 is the plan's value");
    cr_assert_float_eq(pr.f_measured_acc, 1 + 1 + 0 + 1, 1e-15);   /* p = (1, 0) measured */
    cJSON *rep = sq_run_report_json(&r, &pr);
    cr_assert_not_null(rep);
    cr_assert_str_eq(sq_json_field(rep, "format")->valuestring, SQ_RUN_REPORT_FORMAT);
    cr_assert_eq(cJSON_GetArrayItem(sq_json_field(rep, "step_accepted"), 1)->valueint, 2);
    cr_assert_eq(cJSON_GetArrayItem(sq_json_field(rep, "step_tokens"), 1)->valueint, 3);
    const cJSON *ar = sq_json_field(rep, "autoregressive");
    cr_assert_eq(sq_json_field(ar, "common_prefix_with_speculative")->valueint, 5);
    const cJSON *v = sq_json_field(rep, "validation");
    cr_assert(cJSON_IsFalse(sq_json_field(v, "pass")));
    cr_assert_float_eq(sq_json_field(sq_json_field(rep, "timing"), "speedup")->valuedouble, 2.0,
                       1e-15);
    cJSON_Delete(rep);
    sq_plan_free(plan);

    plan = plan_of(50.0);
    r.plan = plan;
    cr_assert_eq(sq_run_predict(&r, &pr, &err), SQ_OK);
    cr_assert(pr.have_ci && !pr.within);
    cr_assert(strstr(pr.explanation, "positional assumption"), "%s", pr.explanation);
    r.steps = 3;
    cr_assert_eq(sq_run_predict(&r, &pr, &err), SQ_OK);
    cr_assert(!pr.have_ci && strstr(pr.explanation, "too few"), "%s", pr.explanation);
    sq_plan_free(plan);
    sq_run_acceptance_free(&a);
}

/* The decode times of batch steps: their sum, medians and 10th percentiles. */
Test(run_report, decode_timing_of_batch_steps)
{
    sq_step_info in[5];
    double step[5] = {5, 1, 4, 2, 3};
    for (int i = 0; i < 5; i++)
        in[i] = (sq_step_info){.step_ms = step[i], .draft_ms = step[i] / 2,
                               .target_forward_ms = step[i] / 4, .verify_ms = 0.125};
    sq_run_decode d;
    sq_error err = {0};
    cr_assert_eq(sq_run_decode_timing(in, 5, &d, &err), SQ_OK);
    cr_assert_float_eq(d.ms, 15, 1e-12);
    cr_assert_float_eq(d.step_ms, 3, 1e-12);
    cr_assert_float_eq(d.draft_ms, 1.5, 1e-12);
    cr_assert_float_eq(d.target_forward_ms, 0.75, 1e-12);
    cr_assert_float_eq(d.verify_ms, 0.125, 1e-12);
    cr_assert(d.step_p10_ms >= 1 && d.step_p10_ms < 3, "%g", d.step_p10_ms);
    cr_assert(d.target_forward_p10_ms <= d.target_forward_ms);
    cr_assert_eq(sq_run_decode_timing(in, 0, &d, &err), SQ_OK);
    cr_assert_eq(d.ms, 0);
}

/* Report v2: the batch section of two sequences: the rates over the batch, the decode times,
 * every sequence's entry; the pooled top level counts both sequences' tokens. */
Test(run_report, report_v2_batch_section)
{
    sq_run_acceptance a;
    sq_error err = {0};
    cr_assert_eq(sq_run_acceptance_init(&a, 2, 3, &err), SQ_OK);
    int steps[8] = {2, 3, 2, 3, 2, 3, 2, 3};
    int32_t gen[2][4] = {{1, 2, 3, 4}, {5, 6, 7, 8}}, base[2][4] = {{1, 2, 9, 4}, {5, 6, 7, 8}};
    sq_plan *plan = plan_of(2.5);
    sq_run_sequence seqs[2] = {{3, 5, gen[0], base[0]}, {1, 3, gen[1], base[1]}};
    sq_run_batch bt = {.size = 2, .batch_steps = 5, .seqs = seqs,
                       .decode = {.ms = 8, .step_ms = 1.5}, .greedy_equals_separate_runs = 1};
    sq_run_record r = {.draft = "d", .target = "t", .plan_file = "p.json", .prompt_file = "x",
                       .mode = "greedy", .backend = "cpu", .dtype = "f32", .prompt_tokens = 3,
                       .max_new_tokens = 4, .context = 64, .vocab_size = 32, .plan = plan,
                       .depth = 3, .steps = 8, .step_tokens = steps, .acc = &a, .spec_ms = 10,
                       .gen = gen[0], .base = base[0], .base_ms = 20, .batch = &bt};
    sq_run_prediction pr;
    cr_assert_eq(sq_run_predict(&r, &pr, &err), SQ_OK);
    cJSON *rep = sq_run_report_json(&r, &pr);
    cr_assert_not_null(rep);
    cr_assert_eq(sq_json_field(rep, "version")->valueint, SQ_RUN_REPORT_VERSION);
    cr_assert_eq(SQ_RUN_REPORT_VERSION, 2);
    cr_assert_eq(sq_json_field(rep, "generated_tokens")->valueint, 8);
    const cJSON *t = sq_json_field(rep, "timing");
    cr_assert_float_eq(sq_json_field(t, "speculative_ms_per_token")->valuedouble, 10.0 / 8, 1e-15);
    cr_assert_float_eq(sq_json_field(t, "autoregressive_ms_per_token")->valuedouble, 20.0 / 8,
                       1e-15);
    const cJSON *b = sq_json_field(rep, "batch");
    cr_assert_eq(sq_json_field(b, "size")->valueint, 2);
    cr_assert_eq(sq_json_field(b, "batch_steps")->valueint, 5);
    cr_assert_float_eq(sq_json_field(b, "tokens_per_step")->valuedouble, 8.0 / 8, 1e-15);
    cr_assert_float_eq(sq_json_field(b, "tokens_per_s")->valuedouble, 800, 1e-9);
    cr_assert_float_eq(sq_json_field(b, "tokens_per_s_per_sequence")->valuedouble, 400, 1e-9);
    cr_assert_float_eq(sq_json_field(b, "base_tokens_per_s")->valuedouble, 400, 1e-9);
    cr_assert(cJSON_IsTrue(sq_json_field(b, "greedy_equals_separate_runs")));
    const cJSON *d = sq_json_field(b, "decode");
    cr_assert_float_eq(sq_json_field(d, "ms")->valuedouble, 8, 1e-15);
    cr_assert_float_eq(sq_json_field(d, "tokens_per_s")->valuedouble, 1000, 1e-9);
    cr_assert_float_eq(sq_json_field(d, "step_ms_median")->valuedouble, 1.5, 1e-15);
    const cJSON *q = sq_json_field(b, "sequences");
    cr_assert_eq(cJSON_GetArraySize(q), 2);
    const cJSON *q0 = cJSON_GetArrayItem(q, 0), *q1 = cJSON_GetArrayItem(q, 1);
    cr_assert_eq(sq_json_field(q0, "prompt_tokens")->valueint, 3);
    cr_assert_eq(sq_json_field(q0, "steps")->valueint, 5);
    cr_assert_float_eq(sq_json_field(q0, "tokens_per_step")->valuedouble, 4.0 / 5, 1e-15);
    cr_assert_eq(sq_json_field(q0, "common_prefix_with_autoregressive")->valueint, 2);
    cr_assert_eq(sq_json_field(q1, "common_prefix_with_autoregressive")->valueint, 4);
    cJSON_Delete(rep);
    /* without a baseline nor the check: neither base_tokens_per_s nor the verdict */
    bt.greedy_equals_separate_runs = -1;
    seqs[0].base = seqs[1].base = NULL;
    r.base = NULL;
    rep = sq_run_report_json(&r, &pr);
    b = sq_json_field(rep, "batch");
    cr_assert_null(sq_json_field(b, "base_tokens_per_s"));
    cr_assert_null(sq_json_field(b, "greedy_equals_separate_runs"));
    cr_assert_null(sq_json_field(cJSON_GetArrayItem(sq_json_field(b, "sequences"), 0),
                                 "common_prefix_with_autoregressive"));
    cJSON_Delete(rep);
    /* a record without a batch section (B = 1 by default) writes none */
    r.batch = NULL;
    rep = sq_run_report_json(&r, &pr);
    cr_assert_null(sq_json_field(rep, "batch"));
    cr_assert_eq(sq_json_field(rep, "generated_tokens")->valueint, 4);
    cJSON_Delete(rep);
    sq_plan_free(plan);
    sq_run_acceptance_free(&a);
}

Test(run_report, attention_tolerance_by_backend)
{
    cr_assert_eq(sq_validate_attn_tol(SQ_BACKEND_CPU), 1e-4);
    cr_assert_eq(sq_validate_attn_tol(SQ_BACKEND_CUDA), 2e-2);
    sq_validation v = {.ran = 1, .attn_ok = 1, .dist_checked = 1, .dist_ok = 1};
    cr_assert(sq_validation_pass(&v));
    v.dist_ok = 0;
    cr_assert(!sq_validation_pass(&v));
}

/* sq_run_speed_of, the one place that compares a run's speed with its plan's
 * hardware.sequoia_run: a static plan priced at batch 1 (no "batch") against one sequence,
 * a static plan priced at batch 2 (per-sequence rate, times 2) against two, a batch it did not
 * price (not comparable), a section without sequoia_run (not compared), a dynamic plan (its
 * rate over the batch), and no hardware section (nothing said). */
Test(run_report, speed_against_the_plans_sequoia_run_prediction)
{
    sq_run_acceptance a;
    sq_error err = {0};
    cr_assert_eq(sq_run_acceptance_init(&a, 2, 3, &err), SQ_OK);
    int steps[4] = {2, 3, 2, 3};   /* 10 tokens in 20 ms: 500 tokens/s */
    int32_t gen[8] = {0};
    sq_plan *plan = plan_of(2.5);
    sq_run_sequence seqs[2] = {{3, 2, gen, NULL}, {3, 2, gen + 4, NULL}};
    sq_run_batch bt = {.size = 1, .batch_steps = 4, .seqs = seqs};
    sq_run_record r = {.plan = plan, .steps = 4, .step_tokens = steps, .acc = &a,
                       .steps_ms = 20, .batch = &bt};
    sq_run_speed sp;
    sq_run_speed_of(&r, &sp);
    cr_assert(!sp.have_plan, "no hardware section: nothing to say");
    plan->hardware = cJSON_Parse("{\"tokens_per_second\": 900, \"sequoia_run\": "
                                 "{\"tokens_per_second\": 400}}");
    sq_run_speed_of(&r, &sp);
    cr_assert(sp.have_plan && sp.comparable && sp.plan_batch == 1);
    cr_assert_float_eq(sp.measured, 500, 1e-9);
    cr_assert_float_eq(sp.predicted, 400, 1e-12);
    cr_assert_float_eq(sp.ratio, 1.25, 1e-12);
    bt.size = 2;
    sq_run_speed_of(&r, &sp);
    cr_assert(!sp.comparable && strstr(sp.note, "not comparable: the plan priced batch 1, this "
                                       "run decoded 2 sequences together"), "%s", sp.note);
    cJSON_AddNumberToObject(plan->hardware, "batch", 2);
    sq_run_speed_of(&r, &sp);
    cr_assert(sp.comparable && sp.plan_batch == 2);
    cr_assert_float_eq(sp.predicted, 800, 1e-12, "a static plan's rate is per sequence");
    sq_run_prediction pr;
    cr_assert_eq(sq_run_predict(&r, &pr, &err), SQ_OK);
    r.draft = r.target = r.plan_file = r.prompt_file = "x";
    r.mode = "greedy", r.backend = "cpu", r.dtype = "f32", r.max_new_tokens = 4, r.gen = gen;
    cJSON *rep = sq_run_report_json(&r, &pr);
    const cJSON *ts = sq_json_field(sq_json_field(rep, "prediction"), "tokens_per_second");
    cr_assert_float_eq(sq_json_field(ts, "predicted")->valuedouble, 800, 1e-12);
    cr_assert_float_eq(sq_json_field(ts, "ratio")->valuedouble, 500.0 / 800, 1e-12);
    cr_assert_eq(sq_json_field(ts, "batch")->valueint, 2);
    cr_assert_null(sq_json_field(ts, "note"));
    cJSON_Delete(rep);
    /* a dynamic plan's hardware: its rate is over the batch already */
    sq_run_dynamic dyn = {.engine = "sglang", .steps = 2, .topk = 1, .nodes = 3, .B = 2,
                          .hardware = plan->hardware};
    r.dyn = &dyn;
    sq_run_speed_of(&r, &sp);
    cr_assert(sp.comparable);
    cr_assert_float_eq(sp.predicted, 400, 1e-12);
    r.dyn = NULL;
    cJSON_DeleteItemFromObject(plan->hardware, "sequoia_run");
    sq_run_speed_of(&r, &sp);
    cr_assert(sp.have_plan && !sp.comparable && strstr(sp.note, "no sequoia_run"), "%s", sp.note);
    sq_plan_free(plan);
    sq_run_acceptance_free(&a);
}

/* timing.per_step: each step's time and its two forwards, to 0.1 us, in step order; absent
 * without the steps' infos. */
Test(run_report, per_step_timing)
{
    sq_run_acceptance a;
    sq_error err = {0};
    cr_assert_eq(sq_run_acceptance_init(&a, 2, 3, &err), SQ_OK);
    int steps[3] = {2, 3, 1};
    int32_t gen[6] = {0};
    sq_step_info in[3] = {{.step_ms = 0.73456789, .draft_forward_ms = 0.13, .target_forward_ms = 0.5764},
                          {.step_ms = 0.41, .draft_forward_ms = 0.12, .target_forward_ms = 0.28},
                          {.step_ms = 16.35, .draft_forward_ms = 0.11, .target_forward_ms = 16.2}};
    sq_plan *plan = plan_of(2.0);
    sq_run_record r = {.draft = "d", .target = "t", .plan_file = "p.json", .prompt_file = "x",
                       .mode = "greedy", .backend = "cpu", .dtype = "f32", .prompt_tokens = 3,
                       .max_new_tokens = 6, .context = 64, .vocab_size = 32, .plan = plan,
                       .depth = 3, .steps = 3, .step_tokens = steps, .acc = &a, .spec_ms = 18,
                       .gen = gen};
    sq_run_prediction pr;
    cr_assert_eq(sq_run_predict(&r, &pr, &err), SQ_OK);
    cJSON *rep = sq_run_report_json(&r, &pr);
    cr_assert_null(sq_json_field(sq_json_field(rep, "timing"), "per_step"));
    cJSON_Delete(rep);
    r.step_infos = in;
    r.n_step_infos = 3;
    rep = sq_run_report_json(&r, &pr);
    const cJSON *ps = sq_json_field(sq_json_field(rep, "timing"), "per_step");
    static const char *const keys[3] = {"step_ms", "draft_forward_ms", "target_forward_ms"};
    for (int k = 0; k < 3; k++) {
        const cJSON *arr = sq_json_field(ps, keys[k]);
        cr_assert_eq(cJSON_GetArraySize(arr), 3, "%s", keys[k]);
        for (int s = 0; s < 3; s++) {
            double want = k == 0 ? in[s].step_ms : k == 1 ? in[s].draft_forward_ms
                                                          : in[s].target_forward_ms;
            cr_assert_float_eq(cJSON_GetArrayItem(arr, s)->valuedouble, want, 0.5e-4 + 1e-12,
                               "%s[%d]", keys[k], s);
        }
    }
    cr_assert_float_eq(cJSON_GetArrayItem(sq_json_field(ps, "step_ms"), 0)->valuedouble, 0.7346,
                       1e-12, "rounded to 0.1 us");
    cJSON_Delete(rep);
    sq_plan_free(plan);
    sq_run_acceptance_free(&a);
}

/* An --engine run without a plan predicts nothing: the summary names no "plan expects" (the
 * envelope's room plan has expected_tokens 1, which is no prediction) and the report's
 * within_ci95 is null, not false (docs/formats.md, the report's dynamic run). */
Test(run_report, engine_run_without_plan_predicts_nothing)
{
    sq_run_acceptance a;
    sq_error err = {0};
    cr_assert_eq(sq_run_acceptance_init(&a, 2, 3, &err), SQ_OK);
    int steps[8] = {2, 3, 2, 3, 2, 3, 2, 3};
    int32_t gen[20] = {0};
    sq_step_info infos[8] = {{0}};
    int seq_steps[1] = {8};
    sq_plan *plan = plan_of(1.0);
    sq_run_dynamic dyn = {.engine = "sglang", .steps = 2, .topk = 2, .nodes = 4, .B = 1,
                          .max_new = 8, .seq_steps = seq_steps, .infos = infos};
    sq_run_record r = {.draft = "d", .target = "t", .plan_file = "sglang envelope 2,2,4",
                       .prompt_file = "x", .mode = "greedy", .backend = "cpu", .dtype = "f32",
                       .prompt_tokens = 3, .max_new_tokens = 20, .context = 64,
                       .vocab_size = 32, .plan = plan, .depth = 3, .steps = 8,
                       .step_tokens = steps, .acc = &a, .spec_ms = 10, .gen = gen, .dyn = &dyn,
                       .generated_tokens = 20};
    sq_run_prediction pr;
    cr_assert_eq(sq_run_predict(&r, &pr, &err), SQ_OK, "%s", err.msg);
    cr_assert(pr.have_ci);
    char line[512];
    sq_run_summary_line(&r, &pr, line, sizeof line);
    cr_assert_null(strstr(line, "plan expects"), "%s", line);
    cr_assert_null(strstr(line, "outside the CI"), "%s", line);
    cr_assert(strstr(line, "sglang envelope 2,2,4"), "%s", line);
    cJSON *rep = sq_run_report_json(&r, &pr);
    const cJSON *pj = sq_json_field(rep, "prediction");
    /* sq_json_field hides a null: the raw lookup tells null from absent */
    cr_assert(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(pj, "expected_tokens")));
    cr_assert(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(pj, "within_ci95")),
              "within_ci95 is not null");
    cJSON_Delete(rep);
    /* a dynamic plan's prediction is still compared */
    dyn.expected_tokens = 2.5;
    cr_assert_eq(sq_run_predict(&r, &pr, &err), SQ_OK, "%s", err.msg);
    sq_run_summary_line(&r, &pr, line, sizeof line);
    cr_assert(strstr(line, "plan expects 2.500"), "%s", line);
    rep = sq_run_report_json(&r, &pr);
    cr_assert(cJSON_IsBool(sq_json_field(sq_json_field(rep, "prediction"), "within_ci95")));
    cJSON_Delete(rep);
    sq_plan_free(plan);
    sq_run_acceptance_free(&a);
}
