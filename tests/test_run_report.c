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

Test(run_report, attention_tolerance_by_backend)
{
    cr_assert_eq(sq_validate_attn_tol(SQ_BACKEND_CPU), 1e-4);
    cr_assert_eq(sq_validate_attn_tol(SQ_BACKEND_CUDA), 2e-2);
    sq_validation v = {.ran = 1, .attn_ok = 1, .dist_checked = 1, .dist_ok = 1};
    cr_assert(sq_validation_pass(&v));
    v.dist_ok = 0;
    cr_assert(!sq_validation_pass(&v));
}
