/* sequoia-run's cost model (docs/planning.md, "Two cost models"): the draft's catch-up.
 *
 * - Static trees: sq_hw_catchup (1 + the probability of reaching a leaf) equals a brute-force
 *   enumeration of every verification path of small trees (the DP's optimal trees of random
 *   curves, and chains), and sq_hw_step_ms_runtime prices the level forwards over the nodes
 *   with children only.
 * - Dynamic trees: the Monte-Carlo replay's expected catch-up (sq_dyn_predict_catchup) equals
 *   closed forms enumerated by hand on identical samples: a chain L,1,L+1 (1 + p^L) and the
 *   tree 3,2,11 of two ranks.
 * - What sequoia-run does: on the shipped pair, the catch-up it counts (sq_step_info's
 *   draft_catchup) is exactly 1 + [the previous step's last accepted node is a leaf] for a
 *   static plan, and its mean lies within the 95% interval of the model's prediction: the
 *   static tree's under the acceptance measured in the same run, the dynamic envelope's from
 *   the statistics of the text the runs decode (data/dynamic/curves-shipped-insample-greedy.json). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "libsequoia/base/json.h"
#include "libsequoia/base/stats.h"
#include "libsequoia/format/plan.h"
#include "planner/dp.h"
#include "planner/dynamic.h"
#include "planner/hardware.h"
#include "runtime/dyntree.h"
#include "runtime/model.h"
#include "runtime/specdec.h"
#include "tests/testutil.h"

/* ---- static trees ----------------------------------------------------------------------------- */

/* Every verification path from node u reached with probability `pr`: the walk accepts child j
 * with p(depth, rank) and stops with the rest; a stop at a leaf (not the root) costs the next
 * step 2 tokens of catch-up, anywhere else 1. */
static double enumerate(const sq_tree *t, const sq_curve *c, int u, double pr)
{
    double stop = 1.0, e = 0.0;
    int leaf = 1;
    for (int v = u + 1; v < t->n; v++)
        if (t->parent[v] == u) {
            double p = sq_curve_p(c, t->depth[v], t->rank[v]);
            leaf = 0;
            stop -= p;
            e += enumerate(t, c, v, pr * p);
        }
    return e + pr * stop * (u > 0 && leaf ? 2.0 : 1.0);
}

static uint64_t lcg(uint64_t *s)
{
    *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
    return *s >> 33;
}

Test(catchup, static_catchup_equals_path_enumeration)
{
    uint64_t seed = 7;
    sq_error err = {0};
    for (int trial = 0; trial < 40; trial++) {
        double p[6], left = 0.97;
        int W = 1 + (int)(lcg(&seed) % 6);
        for (int k = 0; k < W; k++) {
            p[k] = left * (0.2 + 0.6 * (double)(lcg(&seed) % 1000) / 1000.0);
            left -= p[k];
        }
        sq_curve c = {0};
        cr_assert_eq(sq_curve_init(&c, "random", "greedy", p, W, &err), 0, "%s", err.msg);
        sq_dp_params prm = {.budget = 2 + (int)(lcg(&seed) % 30),
                            .depth = 2 + (int)(lcg(&seed) % 6), .width = 0, .curve = &c};
        sq_dp *dp;
        cr_assert_eq(sq_dp_solve(&prm, &dp, &err), 0, "%s", err.msg);
        for (int n = 1; n <= sq_dp_budget(dp); n++) {
            sq_tree *t;
            if (!isfinite(sq_dp_best(dp, n, sq_dp_depth(dp))))
                continue;
            cr_assert_eq(sq_dp_tree(dp, n, sq_dp_depth(dp), &t, &err), 0, "%s", err.msg);
            double got, want = n == 1 ? 0.0 : enumerate(t, &c, 0, 1.0);
            cr_assert_eq(sq_hw_catchup(t, &c, &got, &err), 0, "%s", err.msg);
            cr_assert(fabs(got - want) < 1e-12, "trial %d, n %d: %.15g, enumeration %.15g",
                      trial, n, got, want);
            cr_assert(n == 1 || (got >= 1.0 && got <= 2.0));
            sq_tree_free(t);
        }
        sq_dp_free(dp);
        sq_curve_clear(&c);
    }
}

Test(catchup, a_chain_catches_up_one_plus_the_full_path)
{
    /* chain of 4 nodes, p = 0.5: the path ends at the leaf (depth 3) with 0.125 */
    int par[] = {-1, 0, 1, 2}, rank[] = {0, 1, 1, 1};
    sq_tree *t;
    sq_error err = {0};
    cr_assert_eq(sq_tree_from_parents(par, rank, 4, &t, "chain", &err), 0, "%s", err.msg);
    double p = 0.5, got;
    sq_curve c = {0};
    cr_assert_eq(sq_curve_init(&c, "half", "greedy", &p, 1, &err), 0, "%s", err.msg);
    cr_assert_eq(sq_hw_catchup(t, &c, &got, &err), 0);
    cr_assert(fabs(got - 1.125) < 1e-15, "%.17g", got);
    sq_curve_clear(&c);
    sq_tree_free(t);
}

Test(catchup, the_runtime_step_reads_only_the_nodes_with_children)
{
    /* levels 1, 3, 2, 1: level 1 has 3 nodes of which 1 has children, level 2 has 2 nodes of
     * which 1 has a child. The fixed model: the engine's L forwards against sequoia-run's
     * L - 1; the per-level model: t_draft(3) + t_draft(2) against t_draft(1) + t_draft(1). */
    int par[] = {-1, 0, 0, 0, 1, 1, 4}, rank[] = {0, 1, 2, 3, 1, 2, 1};
    sq_tree *t;
    sq_error err = {0};
    cr_assert_eq(sq_tree_from_parents(par, rank, 7, &t, "tree", &err), 0, "%s", err.msg);
    int tok[] = {1, 8};
    double tms[] = {10, 17}, dms[] = {1, 8};
    sq_profile tp = {0}, dp = {0};
    sq_profile_point tpt[2], dpt[2];
    for (int i = 0; i < 2; i++) {
        tpt[i] = (sq_profile_point){.batch = 1, .tokens = tok[i], .median_ms = tms[i],
                                    .p10_ms = NAN, .p90_ms = NAN, .samples = 1};
        dpt[i] = (sq_profile_point){.batch = 1, .tokens = tok[i], .median_ms = dms[i],
                                    .p10_ms = NAN, .p90_ms = NAN, .samples = 1};
    }
    tp.n = dp.n = 2;
    tp.points = tpt;
    dp.points = dpt;
    sq_hw_params hp = sq_hw_default_params();
    hp.target = &tp;
    hp.draft_ms = 0.5;
    double eng, run;
    cr_assert_eq(sq_hw_step_ms(&hp, t, 2.0, &eng, &err), 0, "%s", err.msg);
    cr_assert_eq(sq_hw_step_ms_runtime(&hp, t, 1.25, &run, &err), 0, "%s", err.msg);
    cr_assert(fabs(eng - (16 + 4 * 0.5)) < 1e-12, "%g", eng);
    cr_assert(fabs(run - (16 + 3 * 0.5)) < 1e-12, "%g", run);
    hp.draft = &dp;
    cr_assert_eq(sq_hw_step_ms(&hp, t, 2.0, &eng, &err), 0, "%s", err.msg);
    cr_assert_eq(sq_hw_step_ms_runtime(&hp, t, 1.25, &run, &err), 0, "%s", err.msg);
    /* t_target(7) = 16; engine: t_draft(2) + t_draft(3) + t_draft(2) = 2 + 3 + 2 */
    cr_assert(fabs(eng - (16 + 2 + 3 + 2)) < 1e-12, "%g", eng);
    /* runtime: t_draft(1.25) + t_draft(1) + t_draft(1) */
    cr_assert(fabs(run - (16 + 1.25 + 1 + 1)) < 1e-12, "%g", run);
    sq_tree_free(t);
}

/* ---- dynamic trees: the replay against closed forms ------------------------------------------- */

static sq_dyn_samples *identical(int n, double q0, double q1, double a0, double a1)
{
    double *q = malloc((size_t)n * 2 * sizeof *q), *a = malloc((size_t)n * 2 * sizeof *a);
    for (int i = 0; i < n; i++) {
        q[2 * i] = q0;
        q[2 * i + 1] = q1;
        a[2 * i] = a0;
        a[2 * i + 1] = a1;
    }
    int seg = n;
    sq_dyn_samples *s;
    sq_error err = {0};
    cr_assert_eq(sq_dyn_samples_new(n, 2, q, a, &seg, 1, &s, &err), 0, "%s", err.msg);
    free(q);
    free(a);
    return s;
}

Test(catchup, dynamic_chain_catches_up_one_plus_p_to_the_L)
{
    sq_dyn_samples *s = identical(2000, 0.7, 0.2, 0.6, 0.1);
    sq_error err = {0};
    for (int method = 0; method < 2; method++) {
        sq_dyn_predict_params pp = sq_dyn_predict_default_params();
        pp.method = method;
        pp.trials = 200000;
        for (int L = 1; L <= 4; L++) {
            double E, se, cu;
            cr_assert_eq(sq_dyn_predict_catchup(s, L, 1, L + 1, &pp, &E, &se, &cu, NULL, &err), 0,
                         "%s", err.msg);
            double want = 1 + pow(0.6, L);
            /* a Bernoulli mean over at least 200000 / (E) steps */
            double tol = 5 * sqrt(0.25 / (pp.trials / E)) + 1e-9;
            cr_assert(fabs(cu - want) < tol, "method %d, L %d: %.5f, closed form %.5f", method, L,
                      cu, want);
        }
    }
    sq_dyn_samples_free(s);
}

Test(catchup, dynamic_tree_of_two_ranks_matches_the_enumeration)
{
    /* 3,2,11: every candidate is in the tree. Level 1: both nodes kept; level 2: scores .49,
     * .14, .14, .04, kept (0,0) and (0,1) (the tie goes to the lower index); a path through
     * (1, x) ends at depth 2 at a node the draft did not read; the full path (depth 3) too.
     * E[catch-up] = 1 + a1 (a0 + a1) + a0 (a0 + a1)^2. */
    double a0 = 0.5, a1 = 0.2;
    sq_dyn_samples *s = identical(3000, 0.7, 0.2, a0, a1);
    double want = 1 + a1 * (a0 + a1) + a0 * (a0 + a1) * (a0 + a1);
    sq_error err = {0};
    for (int method = 0; method < 2; method++) {
        sq_dyn_predict_params pp = sq_dyn_predict_default_params();
        pp.method = method;
        pp.trials = 300000;
        double E, se, cu;
        cr_assert_eq(sq_dyn_predict_catchup(s, 3, 2, 11, &pp, &E, &se, &cu, NULL, &err), 0, "%s",
                     err.msg);
        double tol = 5 * sqrt(0.25 / (pp.trials / E));
        cr_assert(fabs(cu - want) < tol, "method %d: %.5f, enumeration %.5f", method, cu, want);
        /* the grid holds the same cell */
        sq_dyn_grid *g;
        cr_assert_eq(sq_dyn_grid_new(s, 3, 2, 11, &pp, &g, &err), 0, "%s", err.msg);
        cr_assert(fabs(sq_dyn_grid_catchup(g, 3, 2, 11) - want) < 2 * tol);
        cr_assert(fabs(sq_dyn_grid_catchup(g, 1, 2, 3) - (1.0 + a0 + a1)) < 2 * tol,
                  "L = 1: every accepted node is a leaf");
        sq_dyn_grid_free(g);
    }
    sq_dyn_samples_free(s);
}

/* ---- what sequoia-run does, on the shipped pair ------------------------------------------------ */

enum { NEW = 200, PROMPTS = 8 };

/* The prompts of data/ladder-large/prompts.txt (token ids, one prompt a paragraph). */
static int read_prompts(int32_t prompts[PROMPTS][128], int *len)
{
    char *path = tu_source_path("data/ladder-large/prompts.txt");
    char *text = tu_read(path, NULL);
    cr_assert(text, "%s", path);
    int np = 0;
    for (char *p = text; *p && np < PROMPTS;) {
        char *end = strstr(p, "\n\n");
        if (end)
            *end = '\0';
        int at = 0;
        for (char *q = p, *e; at < 128; q = e) {
            long v = strtol(q, &e, 10);
            if (e == q)
                break;
            prompts[np][at++] = (int32_t)v;
        }
        if (at > 0)
            len[np++] = at;
        if (!end)
            break;
        p = end + 2;
    }
    free(text);
    free(path);
    return np;
}

static sq_model *load(const char *rel)
{
    char *path = tu_source_path(rel);
    sq_model *m;
    sq_error err = {0};
    cr_assert_eq(sq_model_load(path, &m, &err), 0, "%s", err.msg);
    free(path);
    return m;
}

Test(catchup, sequoia_run_catches_up_what_the_static_model_says, .timeout = 300)
{
    sq_model *draft = load("data/models/draft"), *target = load("data/models/target");
    int32_t prompts[PROMPTS][128];
    int plen[PROMPTS];
    int np = read_prompts(prompts, plen);
    cr_assert_geq(np, 4);
    /* the optimal static tree of 16 nodes and depth 5 under the shipped greedy curve */
    char *cf = tu_source_path("data/dynamic/curves-shipped-greedy.json");
    sq_curve_set *set;
    const sq_curve *curve;
    sq_error err = {0};
    cr_assert_eq(sq_curve_set_load(cf, &set, &err), 0, "%s", err.msg);
    cr_assert_eq(sq_curve_set_select(set, "greedy@T0", cf, &curve, &err), 0, "%s", err.msg);
    sq_dp_params dprm = {.budget = 16, .depth = 5, .width = 0, .curve = curve};
    sq_dp *dp;
    sq_tree *t;
    sq_plan *plan;
    cr_assert_eq(sq_dp_solve(&dprm, &dp, &err), 0, "%s", err.msg);
    cr_assert_eq(sq_dp_tree(dp, 16, 5, &t, &err), 0, "%s", err.msg);
    cr_assert_eq(sq_plan_new(t, curve, 16, 5, sq_dp_width(dp), &plan, &err), 0, "%s", err.msg);
    const sq_tree *tree = plan->tree;
    char *leaf = calloc((size_t)tree->n, 1);
    for (int v = 0; v < tree->n; v++)
        leaf[v] = 1;
    for (int v = 1; v < tree->n; v++)
        leaf[tree->parent[v]] = 0;
    sq_specdec_params prm = sq_specdec_default_params();
    prm.mode = SQ_MODE_GREEDY;
    prm.temperature = 0;
    prm.threads = 1;
    prm.record_tree = 1;
    sq_specdec *sd;
    cr_assert_eq(sq_specdec_new(draft, target, plan, &prm, "plan", &sd, &err), 0, "%s", err.msg);
    /* the per-rank acceptance measured in this run: offered and accepted by (depth, rank) */
    int D = sq_tree_depth(tree), W = 16;
    double *off = calloc((size_t)D * W, sizeof *off), *hit = calloc((size_t)D * W, sizeof *hit);
    double *cu = malloc((size_t)np * NEW * sizeof *cu);
    int ncu = 0;
    sq_step_info *in = calloc(NEW, sizeof *in);
    for (int i = 0; i < np; i++) {
        int32_t out[NEW];
        int st[NEW], steps;
        cr_assert_eq(sq_specdec_generate(sd, prompts[i], plen[i], NEW, out, st, &steps, in, &err),
                     0, "%s", err.msg);
        for (int s = 0; s < steps; s++) {
            /* exactly: the bonus token, plus the last accepted node when it is a leaf */
            int want = 1;
            if (s > 0 && in[s - 1].tree_accepted > 0)
                want += leaf[in[s - 1].tree_path[in[s - 1].tree_accepted - 1]];
            cr_assert_eq(in[s].draft_catchup, want, "prompt %d, step %d: caught up %d, expected "
                         "%d", i, s, in[s].draft_catchup, want);
            if (s > 0)
                cu[ncu++] = in[s].draft_catchup;
            /* the visits: node u's children offered, the accepted rank */
            int u = 0;
            for (int d = 0; d < in[s].visits; d++) {
                for (int v = u + 1; v < tree->n; v++)
                    if (tree->parent[v] == u)
                        off[(size_t)d * W + tree->rank[v] - 1] += 1;
                int r = in[s].visit_rank[d];
                if (r > 0) {
                    hit[(size_t)d * W + r - 1] += 1;
                    u = in[s].tree_path[d];
                }
            }
        }
        for (int s = 0; s < steps; s++)
            sq_step_info_clear(&in[s]);
    }
    /* the model under the measured acceptance by depth and rank: f(v) = f(parent) p(d, r) */
    double *reach = malloc((size_t)tree->n * sizeof *reach);
    reach[0] = 1.0;
    for (int v = 1; v < tree->n; v++) {
        size_t at = (size_t)(tree->depth[v] - 1) * W + tree->rank[v] - 1;
        reach[v] = reach[tree->parent[v]] * (off[at] > 0 ? hit[at] / off[at] : 0.0);
    }
    double model = sq_hw_catchup_of(tree, reach);
    free(reach);
    sq_mean_ci ci = sq_mean_ci_batch(cu, ncu);
    cr_assert(model >= ci.lo && model <= ci.hi, "sequoia-run caught up %.4f [%.4f, %.4f] a step "
              "over %d steps; the model under the run's acceptance %.4f", ci.mean, ci.lo, ci.hi,
              ncu, model);
    free(in);
    free(cu);
    free(off);
    free(hit);
    free(leaf);
    sq_specdec_free(sd);
    sq_plan_free(plan);
    sq_dp_free(dp);
    sq_curve_set_free(set);
    free(cf);
    sq_model_free(draft);
    sq_model_free(target);
}

Test(catchup, sequoia_run_catches_up_what_the_replay_predicts, .timeout = 300)
{
    sq_model *draft = load("data/models/draft"), *target = load("data/models/target");
    int32_t prompts[PROMPTS][128];
    int plen[PROMPTS];
    int np = read_prompts(prompts, plen);
    /* the statistics of the text these runs decode (the target's greedy continuations of the
     * same 8 prompts, data/dynamic/README-predicted.md), so that the check is of the catch-up
     * model and not of held-out text's acceptance */
    char *cf = tu_source_path("data/dynamic/curves-shipped-insample-greedy.json");
    cJSON *root;
    sq_error err = {0};
    cr_assert_eq(sq_json_load(cf, &root, &err), 0, "%s", err.msg);
    sq_dyn_samples *smp;
    cr_assert_eq(sq_dyn_samples_from_json(root, cf, "greedy@T0", &smp, &err), 0, "%s", err.msg);
    /* L, K, N and the slack in hundredths of a token beyond the 95% interval: 3,2,6 is
     * predicted 0.08 below the measured (1.64 against 1.72 [1.68, 1.76]): of the steps that stop
     * at depth 2 the run finds 27% at a node its draft did not keep, the replay 5% (the
     * off-path contexts' draft probabilities that compete for the K kept places, docs/planning.md
     * "Two cost models"); the others lie inside the interval */
    static const int envs[][4] = {{3, 2, 6, 10}, {4, 4, 16, 0}, {2, 1, 3, 0}};
    for (size_t e = 0; e < sizeof envs / sizeof *envs; e++) {
        int L = envs[e][0], K = envs[e][1], N = envs[e][2];
        sq_dyn_predict_params pp = sq_dyn_predict_default_params();
        pp.path = SQ_DYN_PATH_TEXT;
        double E, se, pred;
        cr_assert_eq(sq_dyn_predict_catchup(smp, L, K, N, &pp, &E, &se, &pred, NULL, &err), 0,
                     "%s", err.msg);
        sq_plan *plan;
        cr_assert_eq(sq_dyntree_plan(L, K, &plan, &err), 0, "%s", err.msg);
        sq_specdec_params prm = sq_specdec_default_params();
        prm.mode = SQ_MODE_GREEDY;
        prm.temperature = 0;
        prm.threads = 1;
        prm.record_tree = 1;
        sq_specdec *sd;
        sq_dyntree *dt;
        cr_assert_eq(sq_specdec_new(draft, target, plan, &prm, "envelope", &sd, &err), 0, "%s",
                     err.msg);
        cr_assert_eq(sq_dyntree_new(SQ_DYN_SGLANG, L, K, N, sq_specdec_vocab(sd), &dt, &err), 0,
                     "%s", err.msg);
        sq_dyntree_attach(sd, dt);
        double *cu = malloc((size_t)np * NEW * sizeof *cu);
        int ncu = 0;
        sq_step_info *in = calloc(NEW, sizeof *in);
        for (int i = 0; i < np; i++) {
            int32_t out[NEW];
            int st[NEW], steps;
            cr_assert_eq(sq_specdec_generate(sd, prompts[i], plen[i], NEW, out, st, &steps, in,
                                             &err), 0, "%s", err.msg);
            for (int s = 0; s < steps; s++) {
                int c = in[s].draft_catchup, prev = s > 0 ? in[s - 1].tree_accepted : 0;
                cr_assert(c == 1 || c == 2, "%d", c);
                /* nothing accepted: the bonus alone; the deepest level: never read */
                if (s > 0 && prev == 0)
                    cr_assert_eq(c, 1);
                if (s > 0 && prev == L)
                    cr_assert_eq(c, 2);
                if (s > 0)
                    cu[ncu++] = c;
            }
            for (int s = 0; s < steps; s++)
                sq_step_info_clear(&in[s]);
        }
        sq_mean_ci ci = sq_mean_ci_batch(cu, ncu);
        double slack = envs[e][3] / 100.0;
        cr_assert(pred >= ci.lo - slack && pred <= ci.hi + slack, "%d,%d,%d: sequoia-run caught up "
                  "%.4f [%.4f, %.4f] a step over %d steps; the replay predicts %.4f", L, K, N,
                  ci.mean, ci.lo, ci.hi, ncu, pred);
        cr_log_info("%d,%d,%d: measured %.4f [%.4f, %.4f], predicted %.4f", L, K, N, ci.mean,
                    ci.lo, ci.hi, pred);   /* 1.7205 [1.6767, 1.7643] 1.6406; 1.7847 [1.7308,
                                            * 1.8385] 1.7729; 1.7021 [1.6638, 1.7404] 1.7054 */
        free(in);
        free(cu);
        sq_specdec_free(sd);
        sq_dyntree_free(dt);
        sq_plan_free(plan);
    }
    sq_dyn_samples_free(smp);
    cJSON_Delete(root);
    free(cf);
    sq_model_free(draft);
    sq_model_free(target);
}

/* ---- the plan's key ---------------------------------------------------------------------------- */

Test(catchup, the_plans_sequoia_run_member_is_checked)
{
    static const char *const bad[][2] = {
        {"{\"sequoia_run\": 3}", "hardware.sequoia_run: expected an object"},
        {"{\"sequoia_run\": {\"tokens_per_second\": 0}}", "hardware.sequoia_run.tokens_per_second"},
        {"{\"sequoia_run\": {\"round_ms\": -1}}", "hardware.sequoia_run.round_ms"},
        {"{\"sequoia_run\": {\"cost_model\": 1}}", "hardware.sequoia_run.cost_model: expected a "
                                                  "string"},
        /* sequoia-plan --cost-model's key and the batch the figures price */
        {"{\"chosen_by\": \"fastest\"}", "hardware.chosen_by: expected \"engine\" or "
                                         "\"sequoia-run\""},
        {"{\"batch\": 2.5}", "hardware.batch: expected an integer"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        cJSON *hw = cJSON_Parse(bad[i][0]);
        sq_error err = {0};
        cr_assert_eq(sq_plan_check_runtime_cost(hw, "p.json", &err), SQ_EDATA, "%s", bad[i][0]);
        cr_assert(strstr(err.msg, "p.json") && strstr(err.msg, bad[i][1]), "%s", err.msg);
        cJSON_Delete(hw);
    }
    cJSON *ok = cJSON_Parse("{\"sequoia_run\": {\"cost_model\": \"x\", \"draft_catchup_tokens\": "
                            "1.5, \"tokens_per_second\": 10, \"predicted_speedup\": 1.1}}");
    sq_error err = {0};
    cr_assert_eq(sq_plan_check_runtime_cost(ok, "p.json", &err), SQ_OK, "%s", err.msg);
    cJSON_Delete(ok);
}
