/* Plan files (docs/design.md §7.4): invariants of written plans, the round trip through the reader,
 * and the reader's validation of hand-broken plans. */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "planner/dp.h"
#include "libsequoia/base/json.h"
#include "libsequoia/format/plan.h"
#include "tests/testutil.h"

static sq_plan *optimal_plan(int n, int d)
{
    sq_dp_params prm = sq_dp_default_params();
    prm.budget = n;
    prm.depth = d;
    sq_dp *dp;
    sq_tree *t;
    sq_plan *plan;
    sq_error err = {0};
    cr_assert_eq(sq_dp_solve(&prm, &dp, &err), 0, "%s", err.msg);
    cr_assert_eq(sq_dp_tree(dp, n, d, &t, &err), 0, "%s", err.msg);
    cr_assert_eq(sq_plan_new(t, prm.curve, n, d, sq_dp_width(dp), &plan, &err), 0, "%s", err.msg);
    cr_assert(fabs(plan->expected_tokens - sq_dp_best(dp, n, d)) < 1e-12,
              "F recomputed from the nodes equals the DP value");
    sq_dp_free(dp);
    return plan;
}

Test(plan, written_plans_keep_every_invariant)
{
    const int sizes[][2] = {{1, 1}, {2, 2}, {7, 3}, {32, 5}, {128, 10}, {300, 12}};
    for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++) {
        sq_plan *plan = optimal_plan(sizes[s][0], sizes[s][1]);
        const sq_tree *t = plan->tree;
        sq_error err = {0};
        cr_assert_eq(sq_tree_validate(t, "plan", &err), 0, "%s", err.msg);
        /* breadth-first = rank paths sorted by (length, lexicographic) */
        for (int i = 2; i < t->n; i++) {
            int a = i - 1, b = i;
            cr_assert_leq(t->depth[a], t->depth[b]);
            if (t->depth[a] == t->depth[b]) {
                /* compare rank paths from the root */
                int pa[64], pb[64], la = 0, lb = 0;
                for (int v = a; v > 0; v = t->parent[v])
                    pa[la++] = t->rank[v];
                for (int v = b; v > 0; v = t->parent[v])
                    pb[lb++] = t->rank[v];
                int cmp = 0;
                for (int k = la - 1; k >= 0 && !cmp; k--)
                    cmp = (pa[k] > pb[k]) - (pa[k] < pb[k]);
                cr_assert_lt(cmp, 0, "nodes %d and %d out of (length, lex) order", a, b);
            }
        }
        cr_assert_leq(sq_tree_depth(t), sizes[s][1]);
        sq_plan_free(plan);
    }
}

Test(plan, round_trip_through_a_file)
{
    sq_plan *plan = optimal_plan(128, 10);
    char *dir = tu_tmpdir(), *path = tu_path(dir, "plan.json");
    sq_error err = {0};
    cr_assert_eq(sq_plan_save(path, plan, &err), 0, "%s", err.msg);
    cr_assert_eq(tu_count_entries(dir), 1, "no temporary file is left behind");
    sq_plan *back;
    cr_assert_eq(sq_plan_load(path, &back, &err), 0, "%s", err.msg);
    cr_assert_eq(back->tree->n, 128);
    cr_assert_eq(memcmp(back->tree->parent, plan->tree->parent, 128 * sizeof(int)), 0);
    cr_assert_eq(memcmp(back->tree->rank, plan->tree->rank, 128 * sizeof(int)), 0);
    cr_assert_eq(back->expected_tokens, plan->expected_tokens, "numbers are printed exactly");
    cr_assert_str_eq(back->rank_semantics, "sampled-without-replacement");
    cr_assert_eq(back->budget, 128);
    cr_assert_eq(back->depth_limit, 10);
    cr_assert_eq(back->acceptance.width, 31);
    /* saving what was read gives the same bytes */
    char *again = tu_path(dir, "again.json");
    cr_assert_eq(sq_plan_save(again, back, &err), 0);
    char *a = tu_read(path, NULL), *b = tu_read(again, NULL);
    cr_assert_str_eq(a, b);
    free(a);
    free(b);
    sq_plan_free(back);
    sq_plan_free(plan);
    tu_rmtree(dir);
    free(again);
    free(path);
    free(dir);
}

/* ---- the reader's validation ---------------------------------------------------------------- */

#define ACC "\"acceptance\":{\"name\":\"t\",\"p\":[0.5,0.25]}"

typedef struct {
    char text[600];
    char expect[2][80];
} bad_plan;

ParameterizedTestParameters(plan, reader_rejects_broken_plans)
{
    static bad_plan cases[] = {
        /* a valid 4-node plan is: parent [-1,0,0,1], rank [0,1,2,1], depth [0,1,1,2],
         * F = 1 + .5 + .25 + .25 = 2.0 */
        {"{\"format\":\"sequoia-plan\",\"version\":7,\"size\":4,\"depth\":3,\"expected_tokens\":2,"
         "\"rank_semantics\":\"draft-topk\",\"nodes\":{\"parent\":[-1,0,0,1],\"rank\":[0,1,2,1],"
         "\"depth\":[0,1,1,2]}," ACC "}", {"version", "7 is not supported"}},
        {"{\"format\":\"sequoia-plan\",\"version\":1,\"size\":4,\"depth\":3,\"expected_tokens\":2,"
         "\"rank_semantics\":\"draft-topk\",\"nodes\":{\"parent\":[-1,0,0,1],\"rank\":[0,1,3,1],"
         "\"depth\":[0,1,1,2]}," ACC "}", {"node 2", "rank 3, expected 2"}},
        {"{\"format\":\"sequoia-plan\",\"version\":1,\"size\":4,\"depth\":3,\"expected_tokens\":2,"
         "\"rank_semantics\":\"draft-topk\",\"nodes\":{\"parent\":[-1,0,1,0],\"rank\":[0,1,1,2],"
         "\"depth\":[0,1,2,1]}," ACC "}", {"node 3", "breadth-first"}},
        {"{\"format\":\"sequoia-plan\",\"version\":1,\"size\":4,\"depth\":3,\"expected_tokens\":2,"
         "\"rank_semantics\":\"draft-topk\",\"nodes\":{\"parent\":[-1,0,3,1],\"rank\":[0,1,1,1],"
         "\"depth\":[0,1,1,2]}," ACC "}", {"node 2", "parent 3"}},
        {"{\"format\":\"sequoia-plan\",\"version\":1,\"size\":4,\"depth\":3,\"expected_tokens\":2.01,"
         "\"rank_semantics\":\"draft-topk\",\"nodes\":{\"parent\":[-1,0,0,1],\"rank\":[0,1,2,1],"
         "\"depth\":[0,1,1,2]}," ACC "}", {"expected_tokens", "give 2"}},
        {"{\"format\":\"sequoia-plan\",\"version\":1,\"size\":4,\"depth\":2,\"expected_tokens\":2,"
         "\"rank_semantics\":\"draft-topk\",\"nodes\":{\"parent\":[-1,0,0,1],\"rank\":[0,1,2,1],"
         "\"depth\":[0,1,1,2]}," ACC "}", {"depth", "3 levels"}},
        {"{\"format\":\"sequoia-plan\",\"version\":1,\"size\":5,\"depth\":3,\"expected_tokens\":2,"
         "\"rank_semantics\":\"draft-topk\",\"nodes\":{\"parent\":[-1,0,0,1],\"rank\":[0,1,2,1],"
         "\"depth\":[0,1,1,2]}," ACC "}", {"nodes.parent", "4 entries, size is 5"}},
        {"{\"format\":\"sequoia-plan\",\"version\":1,\"size\":4,\"depth\":3,\"expected_tokens\":2,"
         "\"rank_semantics\":\"beam\",\"nodes\":{\"parent\":[-1,0,0,1],\"rank\":[0,1,2,1],"
         "\"depth\":[0,1,1,2]}," ACC "}", {"rank_semantics", "beam"}},
        {"{\"format\":\"sequoia-plan\",\"version\":1,\"size\":4,\"depth\":3,\"expected_tokens\":2,"
         "\"rank_semantics\":\"draft-topk\",\"nodes\":{\"parent\":[-1,0,0,1],\"rank\":[0,1,2,1],"
         "\"depth\":[0,1,1,2]},\"acceptance\":{\"p\":[0.5,0.6]}}", {"acceptance.p", "sum to"}},
        {"{\"format\":\"sequoia-plan\",\"version\":1,\"size\":4,\"depth\":3,\"expected_tokens\":2,"
         "\"rank_semantics\":\"draft-topk\",\"nodes\":{\"parent\":[-1,0,0,1.5],\"rank\":[0,1,2,1],"
         "\"depth\":[0,1,1,2]}," ACC "}", {"nodes.parent[3]", "integer"}},
        /* the derived members, when present, agree with the nodes (level widths 1, 2, 1;
         * f = 1, .5, .25, .25) */
        {"{\"format\":\"sequoia-plan\",\"version\":1,\"size\":4,\"depth\":3,\"expected_tokens\":2,"
         "\"rank_semantics\":\"draft-topk\",\"level_widths\":[1,1,2],\"nodes\":{\"parent\":"
         "[-1,0,0,1],\"rank\":[0,1,2,1],\"depth\":[0,1,1,2]}," ACC "}",
         {"level_widths[1]", "have 2 at level 1"}},
        {"{\"format\":\"sequoia-plan\",\"version\":1,\"size\":4,\"depth\":3,\"expected_tokens\":2,"
         "\"rank_semantics\":\"draft-topk\",\"nodes\":{\"parent\":[-1,0,0,1],\"rank\":[0,1,2,1],"
         "\"depth\":[0,1,1,2],\"score\":[1,0.5,0.25,-5]}," ACC "}", {"nodes.score[3]", "give 0.25"}},
        {"{\"format\":\"sequoia-plan\",\"version\":1,\"size\":4,\"depth\":3,\"expected_tokens\":2,"
         "\"rank_semantics\":\"draft-topk\",\"nodes\":{\"parent\":[-1,0,0,1],\"rank\":[0,1,2,1],"
         "\"depth\":[0,1,1,2],\"score\":[1,0.5]}," ACC "}", {"nodes.score", "4 numbers"}},
        {"{\"format\":\"sequoia-table\",\"version\":1}", {"format", "sequoia-table"}},
    };
    return cr_make_param_array(bad_plan, cases, sizeof cases / sizeof *cases);
}

ParameterizedTest(bad_plan *bp, plan, reader_rejects_broken_plans)
{
    cJSON *root;
    sq_error err = {0};
    cr_assert_eq(sq_json_parse("p.json", bp->text, strlen(bp->text), &root, &err), 0, "%s", err.msg);
    sq_plan *plan = (sq_plan *)1;
    cr_assert_eq(sq_plan_from_json(root, "p.json", &plan, &err), SQ_EDATA, "%s", bp->text);
    cr_assert_null(plan);
    cr_assert(strstr(err.msg, "p.json"), "%s", err.msg);
    for (int i = 0; i < 2; i++)
        cr_assert(strstr(err.msg, bp->expect[i]), "message '%s' lacks '%s'", err.msg, bp->expect[i]);
    cJSON_Delete(root);
}

Test(plan, reader_accepts_the_documented_example_shape)
{
    const char *text = "{\"format\":\"sequoia-plan\",\"version\":1,\"size\":4,\"depth\":3,"
                       "\"expected_tokens\":2,\"rank_semantics\":\"draft-topk\",\"nodes\":{"
                       "\"parent\":[-1,0,0,1],\"rank\":[0,1,2,1],\"depth\":[0,1,1,2]}," ACC
                       ",\"hardware\":null}";
    cJSON *root;
    sq_error err = {0};
    cr_assert_eq(sq_json_parse("p.json", text, strlen(text), &root, &err), 0);
    sq_plan *plan;
    cr_assert_eq(sq_plan_from_json(root, "p.json", &plan, &err), 0, "%s", err.msg);
    cr_assert_eq(plan->expected_tokens, 2.0);
    cr_assert_eq(plan->budget, 0, "solver bounds are optional");
    sq_plan_free(plan);
    cJSON_Delete(root);
}

Test(plan, tree_from_parents_canonicalises_any_order)
{
    /* the same 5-node tree listed depth-first with shuffled ids */
    int parent[] = {-1, 3, 0, 0, 3};
    int rank[] = {0, 2, 2, 1, 1};
    sq_tree *t;
    sq_error err = {0};
    cr_assert_eq(sq_tree_from_parents(parent, rank, 5, &t, "x", &err), 0, "%s", err.msg);
    int want_parent[] = {-1, 0, 0, 1, 1}, want_rank[] = {0, 1, 2, 1, 2};
    cr_assert_eq(memcmp(t->parent, want_parent, sizeof want_parent), 0);
    cr_assert_eq(memcmp(t->rank, want_rank, sizeof want_rank), 0);
    sq_tree_free(t);
    int gap_rank[] = {0, 1, 3, 1, 2};
    sq_error e2 = {0};
    cr_assert_eq(sq_tree_from_parents(parent, gap_rank, 5, &t, "x", &e2), SQ_EDATA);
    cr_assert(strstr(e2.msg, "unreachable"), "%s", e2.msg);
}
