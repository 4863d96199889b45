/* Tree speculative decoding with real (tiny, random) Llama models: greedy exactness against
 * target-only decoding, tree attention against plain forwards, losslessness of the sampled
 * verifiers (chi-square on the first two generated tokens, fail below p = 0.001), the
 * sequoia-run CLI (report, --validate, bad inputs, corpus dump). Models come from
 * sq_model_write_random (runtime/st_writer.h). */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <hdf5.h>

#include "planner/accept/accept.h"
#include "libsequoia/format/corpus.h"
#include "planner/dp.h"
#include "libsequoia/base/json.h"
#include "libsequoia/format/plan.h"
#include "runtime/model.h"
#include "runtime/specdec.h"
#include "runtime/st_writer.h"
#include "libsequoia/base/stats.h"
#include "runtime/tokens.h"
#include "tests/testutil.h"

#define P_MIN 0.001

static char *write_model(const char *dir, const char *name, uint64_t seed, int vocab)
{
    char *path = tu_path(dir, name);
    sq_random_model_params p = sq_random_model_default_params();
    p.seed = seed;
    p.config.vocab_size = vocab;
    sq_error err = {0};
    cr_assert_eq(sq_model_write_random(path, &p, &err), 0, "%s", err.msg);
    return path;
}

static sq_model *load(const char *path)
{
    sq_model *m;
    sq_error err = {0};
    cr_assert_eq(sq_model_load(path, &m, &err), 0, "%s", err.msg);
    return m;
}

/* A plan around a parent list (ranks in sibling order) scored with a small curve. */
static sq_plan *plan_from_parents(const int *parent, int n, const char *mode)
{
    int *rank = calloc((size_t)n, sizeof *rank), *cnt = calloc((size_t)n, sizeof *cnt);
    for (int i = 1; i < n; i++)
        rank[i] = ++cnt[parent[i]];
    sq_tree *t;
    sq_error err = {0};
    cr_assert_eq(sq_tree_from_parents(parent, rank, n, &t, "test", &err), 0, "%s", err.msg);
    const double p[4] = {0.5, 0.2, 0.1, 0.05};
    sq_curve c = {0};
    cr_assert_eq(sq_curve_init(&c, "test", mode, p, 4, &err), 0, "%s", err.msg);
    sq_plan *plan;
    cr_assert_eq(sq_plan_new(t, &c, 0, 0, 0, &plan, &err), 0, "%s", err.msg);
    sq_curve_clear(&c);
    free(rank);
    free(cnt);
    return plan;
}

static sq_plan *chain_plan(int n, const char *mode)
{
    int parent[64];
    for (int i = 0; i < n; i++)
        parent[i] = i - 1;
    return plan_from_parents(parent, n, mode);
}

static sq_plan *star_plan(int n, const char *mode)
{
    int parent[64];
    parent[0] = -1;
    for (int i = 1; i < n; i++)
        parent[i] = 0;
    return plan_from_parents(parent, n, mode);
}

static sq_plan *dp_plan(int n, int d, int width)
{
    sq_dp_params prm = sq_dp_default_params();
    prm.budget = n;
    prm.depth = d;
    prm.width = width;
    sq_dp *dp;
    sq_tree *t;
    sq_plan *plan;
    sq_error err = {0};
    cr_assert_eq(sq_dp_solve(&prm, &dp, &err), 0, "%s", err.msg);
    cr_assert_eq(sq_dp_tree(dp, n, d, &t, &err), 0, "%s", err.msg);
    cr_assert_eq(sq_plan_new(t, prm.curve, n, d, sq_dp_width(dp), &plan, &err), 0, "%s", err.msg);
    sq_dp_free(dp);
    return plan;
}

static sq_specdec *new_sd_p(const sq_model *d, const sq_model *t, const sq_plan *plan,
                            sq_mode mode, double temp, double top_p, uint64_t seed)
{
    sq_specdec_params prm = sq_specdec_default_params();
    prm.mode = mode;
    prm.top_p = top_p;
    prm.temperature = mode == SQ_MODE_GREEDY ? 0.0 : temp;
    prm.seed = seed;
    prm.threads = 1;
    sq_specdec *sd;
    sq_error err = {0};
    cr_assert_eq(sq_specdec_new(d, t, plan, &prm, "plan.json", &sd, &err), 0, "%s", err.msg);
    return sd;
}

static sq_specdec *new_sd(const sq_model *d, const sq_model *t, const sq_plan *plan, sq_mode mode,
                          double temp, uint64_t seed)
{
    return new_sd_p(d, t, plan, mode, temp, 1.0, seed);
}

/* ---- greedy exactness and tree attention ------------------------------------------------ */

Test(run, greedy_speculative_output_equals_target_greedy)
{
    char *dir = tu_tmpdir();
    char *dp = write_model(dir, "draft", 2, 97), *tp = write_model(dir, "target", 1, 97);
    sq_model *draft = load(dp), *target = load(tp);
    sq_plan *plans[] = {chain_plan(5, "greedy"), star_plan(6, "greedy"), dp_plan(32, 6, 0),
                        dp_plan(16, 4, 3), chain_plan(1, "greedy")};
    const char *names[] = {"chain 5", "star 6", "DP 32x6", "DP 16x4 width 3", "root only"};
    const int32_t prompts[3][6] = {{1, 2, 3, 4, 5, 6}, {96, 0, 50}, {7}};
    const int plen[3] = {6, 3, 1};
    enum { NEW = 40 };
    for (size_t p = 0; p < sizeof plans / sizeof *plans; p++) {
        sq_specdec *sd = new_sd(draft, target, plans[p], SQ_MODE_GREEDY, 0, 1);
        for (int q = 0; q < 3; q++) {
            int32_t spec[NEW], ar[NEW];
            int st[NEW], steps;
            sq_error err = {0};
            cr_assert_eq(sq_specdec_generate(sd, prompts[q], plen[q], NEW, spec, st, &steps, NULL,
                                             &err), 0, "%s", err.msg);
            cr_assert_eq(sq_specdec_autoregressive(sd, prompts[q], plen[q], NEW, 0, ar, &err), 0,
                         "%s", err.msg);
            for (int i = 0; i < NEW; i++)
                cr_assert_eq(spec[i], ar[i], "%s, prompt %d: token %d: speculative %d, target %d",
                             names[p], q, i, spec[i], ar[i]);
            int total = 0;
            for (int s = 0; s < steps; s++) {
                cr_assert(st[s] >= 1 && st[s] <= sq_specdec_depth(sd));
                total += st[s];
            }
            cr_assert_geq(total, NEW);
            cr_assert_lt(total - st[steps - 1], NEW, "no step after the last needed one");
        }
        sq_specdec_free(sd);
    }
    for (size_t p = 0; p < sizeof plans / sizeof *plans; p++)
        sq_plan_free(plans[p]);
    sq_model_free(draft);
    sq_model_free(target);
    tu_rmtree(dir);
}

Test(run, tree_forward_logits_equal_plain_forwards_over_root_paths)
{
    char *dir = tu_tmpdir();
    char *dp = write_model(dir, "draft", 2, 97), *tp = write_model(dir, "target", 1, 97);
    sq_model *draft = load(dp), *target = load(tp);
    sq_plan *plans[] = {dp_plan(32, 6, 0), dp_plan(24, 24, 4), star_plan(8, "greedy")};
    const sq_mode modes[] = {SQ_MODE_STOCHASTIC, SQ_MODE_GREEDY, SQ_MODE_SPECINFER};
    const int32_t prompt[5] = {3, 1, 4, 1, 5};
    for (int p = 0; p < 3; p++) {
        sq_specdec *sd = new_sd(draft, target, plans[p], modes[p], 1.0, 5);
        sq_specdec_set_check_attention(sd, 1);
        sq_error err = {0};
        cr_assert_eq(sq_specdec_start(sd, prompt, 5, &err), 0, "%s", err.msg);
        sq_step_info info = {0};
        int32_t out[32];
        for (int s = 0; s < 4; s++) {
            cr_assert_eq(sq_specdec_step(sd, out, &info, &err), 0, "%s", err.msg);
            cr_assert_leq(info.attn_max_diff, 1e-4, "plan %d step %d: max |diff| %g", p, s,
                          info.attn_max_diff);
        }
        sq_step_info_clear(&info);
        sq_specdec_free(sd);
        sq_plan_free(plans[p]);
    }
    sq_model_free(draft);
    sq_model_free(target);
    tu_rmtree(dir);
}

/* Rank-1 path length (nodes, root included): what a perfect draft gets per step. */
static int rank1_path(const sq_tree *t)
{
    int u = 0, len = 1;
    for (;;) {
        int c = -1;
        for (int v = u + 1; v < t->n; v++)
            if (t->parent[v] == u && t->rank[v] == 1) {
                c = v;
                break;
            }
        if (c < 0)
            return len;
        u = c;
        len++;
    }
}

Test(run, draft_equal_to_target_accepts_the_whole_rank1_path)
{
    char *dir = tu_tmpdir();
    char *tp = write_model(dir, "target", 1, 97);
    sq_model *a = load(tp), *b = load(tp);
    sq_plan *plans[] = {chain_plan(6, "greedy"), dp_plan(32, 6, 0), star_plan(5, "greedy")};
    for (int p = 0; p < 3; p++) {
        sq_specdec *sd = new_sd(a, b, plans[p], SQ_MODE_GREEDY, 0, 1);
        const int32_t prompt[3] = {10, 20, 30};
        int32_t out[60];
        int st[60], steps;
        sq_error err = {0};
        cr_assert_eq(sq_specdec_generate(sd, prompt, 3, 60, out, st, &steps, NULL, &err), 0, "%s",
                     err.msg);
        int want = rank1_path(plans[p]->tree);
        cr_assert_eq(want, sq_specdec_depth(sd), "the rank-1 path is the deepest");
        for (int s = 0; s < steps; s++)
            cr_assert_eq(st[s], want, "plan %d step %d: %d tokens, expected %d", p, s, st[s], want);
        sq_specdec_free(sd);
        sq_plan_free(plans[p]);
    }
    sq_model_free(a);
    sq_model_free(b);
    tu_rmtree(dir);
}

/* ---- losslessness ------------------------------------------------------------------------ */

typedef struct loss_cfg {
    sq_mode mode;
    double  temperature;
    double  top_p;
} loss_cfg;

ParameterizedTestParameters(run, sampled_modes_are_lossless_on_the_first_two_tokens)
{
    static loss_cfg cfgs[] = {
        {SQ_MODE_STOCHASTIC, 1.0, 1.0}, {SQ_MODE_STOCHASTIC, 0.3, 1.0},
        {SQ_MODE_SPECINFER, 1.0, 1.0},  {SQ_MODE_SPECINFER, 0.3, 1.0},
        {SQ_MODE_TOPK, 1.0, 1.0},       {SQ_MODE_TOPK, 0.3, 1.0},
        {SQ_MODE_STOCHASTIC, 1.0, 0.9}, {SQ_MODE_SPECINFER, 1.0, 0.9},
    };
    return cr_make_param_array(loss_cfg, cfgs, sizeof cfgs / sizeof *cfgs);
}

ParameterizedTest(loss_cfg *c, run, sampled_modes_are_lossless_on_the_first_two_tokens)
{
    enum { V = 12, R = 3000 };
    char *dir = tu_tmpdir();
    /* the draft is the target's first layer (same seed): it accepts often, so the walks go
     * deep; "other" is an unrelated model, for the test's power */
    char *tp = tu_path(dir, "target"), *dp = tu_path(dir, "draft");
    sq_random_model_params mp = sq_random_model_default_params();
    mp.seed = 21;
    mp.config.vocab_size = V;
    mp.config.n_layers = 3;
    sq_error werr = {0};
    cr_assert_eq(sq_model_write_random(tp, &mp, &werr), 0, "%s", werr.msg);
    mp.config.n_layers = 1;
    cr_assert_eq(sq_model_write_random(dp, &mp, &werr), 0, "%s", werr.msg);
    char *op = write_model(dir, "other", 22, V);
    sq_model *draft = load(dp), *target = load(tp), *other = load(op);
    /* root with 3 children; the first has 2 children, the second 1 */
    const int parent[] = {-1, 0, 0, 0, 1, 1, 2};
    sq_plan *plan = plan_from_parents(parent, 7, "stochastic");
    sq_specdec *sd = new_sd_p(draft, target, plan, c->mode, c->temperature, c->top_p, 3);
    const int32_t prompt[3] = {5, 1, 7};
    static double cnt1[V], cnt2[V * V], p0[V], p2[V * V];
    memset(cnt1, 0, sizeof cnt1);
    memset(cnt2, 0, sizeof cnt2);
    sq_error err = {0};
    long steps = 0, toks = 0;
    for (int i = 0; i < R; i++) {
        sq_specdec_seed(sd, 1000 + (uint64_t)i);
        cr_assert_eq(sq_specdec_start(sd, prompt, 3, &err), 0, "%s", err.msg);
        int32_t seq[8], out[8];
        int n = 0;
        while (n < 2) {
            int before = sq_specdec_length(sd);
            cr_assert_eq(sq_specdec_step(sd, out, NULL, &err), 0, "%s", err.msg);
            int m = sq_specdec_length(sd) - before;
            steps++;
            toks += m;
            for (int j = 0; j < m && n < 8; j++)
                seq[n++] = out[j];
        }
        cnt1[seq[0]] += 1;
        cnt2[seq[0] * V + seq[1]] += 1;
    }
    cr_assert_eq(sq_specdec_target_probs(sd, prompt, 3, p0, &err), 0, "%s", err.msg);
    for (int a = 0; a < V; a++) {
        int32_t ctx[4] = {5, 1, 7, a};
        double p1[V];
        cr_assert_eq(sq_specdec_target_probs(sd, ctx, 4, p1, &err), 0, "%s", err.msg);
        for (int b = 0; b < V; b++)
            p2[a * V + b] = p0[a] * p1[b];
    }
    sq_chisq r1 = sq_chisq_gof(cnt1, p0, V, 5.0), r2 = sq_chisq_gof(cnt2, p2, V * V, 5.0);
    cr_log_info("%s T=%.1f top-p %.1f: %.3f tokens/step; first token X2=%.1f df=%d p=%.4f; pair X2=%.1f "
                "df=%d p=%.4f", sq_mode_name(c->mode), c->temperature, c->top_p, (double)toks / steps,
                r1.stat, r1.df, r1.p_value, r2.stat, r2.df, r2.p_value);
    cr_assert_geq(r1.p_value, P_MIN, "first token: X2=%.2f df=%d p=%g", r1.stat, r1.df,
                  r1.p_value);
    cr_assert_geq(r2.p_value, P_MIN, "first two tokens: X2=%.2f df=%d p=%g", r2.stat, r2.df,
                  r2.p_value);
    cr_assert_geq(r1.df, 2, "the test has bins to compare");
    /* and another model's distribution would have been told apart */
    if (c->temperature == 1.0 && c->top_p == 1.0) {
        sq_specdec_params prm = sq_specdec_default_params();
        prm.threads = 1;
        sq_specdec *ds;
        cr_assert_eq(sq_specdec_new(other, other, plan, &prm, "plan.json", &ds, &err), 0);
        double q0[V];
        cr_assert_eq(sq_specdec_target_probs(ds, prompt, 3, q0, &err), 0, "%s", err.msg);
        sq_chisq rq = sq_chisq_gof(cnt1, q0, V, 5.0);
        cr_assert_lt(rq.p_value, P_MIN, "the test has power against another model: p=%g",
                     rq.p_value);
        sq_specdec_free(ds);
    }
    sq_specdec_free(sd);
    sq_plan_free(plan);
    sq_model_free(draft);
    sq_model_free(target);
    sq_model_free(other);
    tu_rmtree(dir);
}

/* ---- batches (sq_specdec_batch) ------------------------------------------------------------ */

static sq_specdec_batch *new_batch(const sq_model *d, const sq_model *t, const sq_plan *plan,
                                   sq_mode mode, double temp, double top_p, uint64_t seed, int B)
{
    sq_specdec_params prm = sq_specdec_default_params();
    prm.mode = mode;
    prm.top_p = top_p;
    prm.temperature = mode == SQ_MODE_GREEDY ? 0.0 : temp;
    prm.seed = seed;
    prm.threads = 1;
    sq_specdec_batch *bt;
    sq_error err = {0};
    cr_assert_eq(sq_specdec_batch_new(d, t, plan, &prm, "plan.json", B, &bt, &err), 0, "%s",
                 err.msg);
    return bt;
}

/* B prompts of different lengths decoded together: each sequence's greedy output equals its own
 * separate run (speculative and target alone) token for token, on chains, stars, DP trees and
 * the root-only plan; the batched target-only decoding agrees too. */
Test(run, batch_greedy_output_equals_separate_runs_with_prompts_of_different_lengths)
{
    char *dir = tu_tmpdir();
    char *dp = write_model(dir, "draft", 2, 97), *tp = write_model(dir, "target", 1, 97);
    sq_model *draft = load(dp), *target = load(tp);
    sq_plan *plans[] = {chain_plan(5, "greedy"), star_plan(6, "greedy"), dp_plan(32, 6, 0),
                        dp_plan(16, 4, 3), chain_plan(1, "greedy")};
    const char *names[] = {"chain 5", "star 6", "DP 32x6", "DP 16x4 width 3", "root only"};
    enum { B = 5, NEW = 40 };
    const int32_t pr[B][9] = {{1, 2, 3, 4, 5, 6}, {96, 0, 50}, {7}, {3, 1, 4, 1, 5, 9, 2, 6, 5},
                              {42, 42}};
    const int plen[B] = {6, 3, 1, 9, 2};
    const int32_t *prompts[B];
    for (int k = 0; k < B; k++)
        prompts[k] = pr[k];
    for (size_t p = 0; p < sizeof plans / sizeof *plans; p++) {
        int Bs = p % 2 ? B : 3;   /* batches of 3 and of 5 */
        sq_specdec_batch *bt = new_batch(draft, target, plans[p], SQ_MODE_GREEDY, 0, 1, 1, Bs);
        sq_specdec *alone = new_sd(draft, target, plans[p], SQ_MODE_GREEDY, 0, 1);
        static int32_t got[B][NEW], base[B][NEW];
        int32_t *outs[B], *bases[B];
        for (int k = 0; k < B; k++) {
            outs[k] = got[k];
            bases[k] = base[k];
        }
        int steps[B], bsteps;
        sq_error err = {0};
        cr_assert_eq(sq_specdec_batch_generate(bt, prompts, plen, NEW, outs, steps, &bsteps, NULL,
                                               &err), 0, "%s", err.msg);
        cr_assert_eq(sq_specdec_batch_autoregressive(bt, prompts, plen, NEW, 0, bases, &err), 0,
                     "%s", err.msg);
        int most = 0;
        for (int k = 0; k < Bs; k++) {
            int32_t spec[NEW], ar[NEW];
            int st[NEW], nsteps;
            cr_assert_eq(sq_specdec_generate(alone, prompts[k], plen[k], NEW, spec, st, &nsteps,
                                             NULL, &err), 0, "%s", err.msg);
            cr_assert_eq(sq_specdec_autoregressive(alone, prompts[k], plen[k], NEW, 0, ar, &err),
                         0, "%s", err.msg);
            for (int i = 0; i < NEW; i++) {
                cr_assert_eq(got[k][i], spec[i], "%s, batch %d, sequence %d: token %d: batched "
                             "%d, alone %d", names[p], Bs, k, i, got[k][i], spec[i]);
                cr_assert_eq(got[k][i], ar[i], "%s sequence %d token %d vs target", names[p], k,
                             i);
                cr_assert_eq(base[k][i], ar[i], "%s sequence %d token %d: batched target-only",
                             names[p], k, i);
            }
            cr_assert_eq(steps[k], nsteps, "%s sequence %d: the same steps as alone", names[p],
                         k);
            most = steps[k] > most ? steps[k] : most;
        }
        cr_assert_eq(bsteps, most, "the batch runs until its slowest sequence is done");
        sq_specdec_free(alone);
        sq_specdec_batch_free(bt);
    }
    for (size_t p = 0; p < sizeof plans / sizeof *plans; p++)
        sq_plan_free(plans[p]);
    sq_model_free(draft);
    sq_model_free(target);
    tu_rmtree(dir);
}

/* The chi-square losslessness test of sampled_modes_are_lossless_on_the_first_two_tokens, with
 * every sample drawn inside a batch of 3 (each sequence with its own generator). */
ParameterizedTestParameters(run, batch_sampled_modes_are_lossless_on_the_first_two_tokens)
{
    static loss_cfg cfgs[] = {
        {SQ_MODE_STOCHASTIC, 1.0, 1.0}, {SQ_MODE_STOCHASTIC, 0.3, 1.0},
        {SQ_MODE_SPECINFER, 1.0, 1.0},  {SQ_MODE_TOPK, 1.0, 1.0},
    };
    return cr_make_param_array(loss_cfg, cfgs, sizeof cfgs / sizeof *cfgs);
}

ParameterizedTest(loss_cfg *c, run, batch_sampled_modes_are_lossless_on_the_first_two_tokens)
{
    enum { V = 12, B = 3, R = 1000 };
    char *dir = tu_tmpdir();
    char *tp = tu_path(dir, "target"), *dp = tu_path(dir, "draft");
    sq_random_model_params mp = sq_random_model_default_params();
    mp.seed = 21;
    mp.config.vocab_size = V;
    mp.config.n_layers = 3;
    sq_error werr = {0};
    cr_assert_eq(sq_model_write_random(tp, &mp, &werr), 0, "%s", werr.msg);
    mp.config.n_layers = 1;
    cr_assert_eq(sq_model_write_random(dp, &mp, &werr), 0, "%s", werr.msg);
    char *op = write_model(dir, "other", 22, V);
    sq_model *draft = load(dp), *target = load(tp), *other = load(op);
    const int parent[] = {-1, 0, 0, 0, 1, 1, 2};
    sq_plan *plan = plan_from_parents(parent, 7, "stochastic");
    sq_specdec_batch *bt = new_batch(draft, target, plan, c->mode, c->temperature, c->top_p, 3, B);
    const int32_t prompt[3] = {5, 1, 7};
    const int32_t *prompts[B] = {prompt, prompt, prompt};
    const int plen[B] = {3, 3, 3};
    static double cnt1[V], cnt2[V * V], p0[V], p2[V * V];
    memset(cnt1, 0, sizeof cnt1);
    memset(cnt2, 0, sizeof cnt2);
    sq_error err = {0};
    int same = 0;
    for (int i = 0; i < R; i++) {
        sq_specdec_batch_seed(bt, 1000 + (uint64_t)i);
        cr_assert_eq(sq_specdec_batch_start(bt, prompts, plen, &err), 0, "%s", err.msg);
        int32_t seq[B][8], buf[B][8];
        int32_t *outs[B] = {buf[0], buf[1], buf[2]};
        int n[B] = {0}, ntok[B], active[B];
        for (;;) {
            int any = 0;
            for (int k = 0; k < B; k++)
                any |= active[k] = n[k] < 2;
            if (!any)
                break;
            cr_assert_eq(sq_specdec_batch_step(bt, active, outs, ntok, NULL, &err), 0, "%s",
                         err.msg);
            for (int k = 0; k < B; k++) {
                cr_assert(active[k] || ntok[k] == 0, "an inactive sequence does not move");
                for (int j = 0; j < ntok[k] && n[k] < 8; j++)
                    seq[k][n[k]++] = buf[k][j];
            }
        }
        for (int k = 0; k < B; k++) {
            cnt1[seq[k][0]] += 1;
            cnt2[seq[k][0] * V + seq[k][1]] += 1;
        }
        same += seq[0][0] == seq[1][0] && seq[0][1] == seq[1][1] && seq[1][0] == seq[2][0] &&
                seq[1][1] == seq[2][1];
    }
    sq_specdec *sd = sq_specdec_batch_member(bt, 0);
    cr_assert_eq(sq_specdec_target_probs(sd, prompt, 3, p0, &err), 0, "%s", err.msg);
    for (int a = 0; a < V; a++) {
        int32_t ctx[4] = {5, 1, 7, a};
        double p1[V];
        cr_assert_eq(sq_specdec_target_probs(sd, ctx, 4, p1, &err), 0, "%s", err.msg);
        for (int b = 0; b < V; b++)
            p2[a * V + b] = p0[a] * p1[b];
    }
    sq_chisq r1 = sq_chisq_gof(cnt1, p0, V, 5.0), r2 = sq_chisq_gof(cnt2, p2, V * V, 5.0);
    cr_log_info("batch %s T=%.1f: first token X2=%.1f df=%d p=%.4f; pair X2=%.1f df=%d p=%.4f; "
                "%d of %d batches drew the same pair in every sequence", sq_mode_name(c->mode),
                c->temperature, r1.stat, r1.df, r1.p_value, r2.stat, r2.df, r2.p_value, same, R);
    cr_assert_geq(r1.p_value, P_MIN, "first token: X2=%.2f df=%d p=%g", r1.stat, r1.df,
                  r1.p_value);
    cr_assert_geq(r2.p_value, P_MIN, "first two tokens: X2=%.2f df=%d p=%g", r2.stat, r2.df,
                  r2.p_value);
    cr_assert_geq(r1.df, 2, "the test has bins to compare");
    /* independent generators: three equal pairs as often as the target's distribution makes
     * them (shared generators would give R) */
    double e3 = 0;
    for (int x = 0; x < V * V; x++)
        e3 += p2[x] * p2[x] * p2[x];
    double lim = R * e3 + 5 * sqrt(R * e3 * (1 - e3)) + 5;
    cr_assert_leq(same, lim, "the sequences of a batch draw from their own generators: %d equal "
                  "of %d, independence expects %.1f", same, R, R * e3);
    if (c->temperature == 1.0 && c->mode == SQ_MODE_STOCHASTIC) {
        sq_specdec_params prm = sq_specdec_default_params();
        prm.threads = 1;
        sq_specdec *ds;
        cr_assert_eq(sq_specdec_new(other, other, plan, &prm, "plan.json", &ds, &err), 0);
        double q0[V];
        cr_assert_eq(sq_specdec_target_probs(ds, prompt, 3, q0, &err), 0, "%s", err.msg);
        sq_chisq rq = sq_chisq_gof(cnt1, q0, V, 5.0);
        cr_assert_lt(rq.p_value, P_MIN, "the test has power against another model: p=%g",
                     rq.p_value);
        sq_specdec_free(ds);
    }
    sq_specdec_batch_free(bt);
    sq_plan_free(plan);
    sq_model_free(draft);
    sq_model_free(target);
    sq_model_free(other);
    tu_rmtree(dir);
}

Test(run, batch_past_the_machines_memory_is_refused_up_front_with_the_bytes_needed)
{
    char *dir = tu_tmpdir();
    char *dp = write_model(dir, "draft", 2, 97), *tp = write_model(dir, "target", 1, 97);
    sq_model *draft = load(dp), *target = load(tp);
    sq_plan *plan = chain_plan(4, "greedy");
    sq_specdec_params prm = sq_specdec_default_params();
    prm.mode = SQ_MODE_GREEDY;
    prm.temperature = 0;
    sq_specdec_batch *bt = NULL;
    sq_error err = {0};
    /* a million sequences: the caches alone are far past any machine's memory */
    cr_assert_eq(sq_specdec_batch_new(draft, target, plan, &prm, "plan.json", 1 << 20, &bt, &err),
                 SQ_EUSAGE);
    cr_assert_null(bt);
    cr_assert(strstr(err.msg, "batch 1048576") && strstr(err.msg, "bytes"), "%s", err.msg);
    double one = sq_specdec_batch_bytes(draft, target, plan, &prm, 1);
    double four = sq_specdec_batch_bytes(draft, target, plan, &prm, 4);
    cr_assert(one > 0 && four > 3.9 * one && four < 4.1 * one, "%g vs %g", one, four);
    err = (sq_error){0};
    cr_assert_eq(sq_specdec_batch_new(draft, target, plan, &prm, "plan.json", 0, &bt, &err),
                 SQ_EUSAGE);
    sq_plan_free(plan);
    sq_model_free(draft);
    sq_model_free(target);
    tu_rmtree(dir);
}

/* ---- token files -------------------------------------------------------------------------- */

Test(run, token_files_text_and_hdf5)
{
    char *dir = tu_tmpdir();
    char *tp = tu_path(dir, "t.txt");
    tu_write(tp, "1 2 3\n4\n\n\n5 6\n  \n7\n");
    sq_tokens *t;
    sq_error err = {0};
    cr_assert_eq(sq_tokens_load(tp, &t, &err), 0, "%s", err.msg);
    cr_assert_eq(t->n, 7);
    cr_assert_eq(t->sequences, 3);
    cr_assert_eq(t->offsets[1], 4);
    cr_assert_eq(t->offsets[2], 6);
    cr_assert_eq(t->ids[6], 7);
    sq_tokens_free(t);

    char *hp = tu_path(dir, "t.h5");
    hid_t f = H5Fcreate(hp, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    hsize_t n = 5, m = 3;
    int32_t ids[5] = {9, 8, 7, 6, 5};
    int64_t off[3] = {0, 2, 5};
    hid_t s = H5Screate_simple(1, &n, NULL);
    hid_t d = H5Dcreate2(f, "tokens", H5T_STD_I32LE, s, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    H5Dwrite(d, H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, ids);
    H5Dclose(d);
    H5Sclose(s);
    s = H5Screate_simple(1, &m, NULL);
    d = H5Dcreate2(f, "seq_offsets", H5T_STD_I64LE, s, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    H5Dwrite(d, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, off);
    H5Dclose(d);
    H5Sclose(s);
    H5Fclose(f);
    cr_assert_eq(sq_tokens_load(hp, &t, &err), 0, "%s", err.msg);
    cr_assert_eq(t->n, 5);
    cr_assert_eq(t->sequences, 2);
    cr_assert_eq(t->ids[0], 9);
    cr_assert_eq(t->offsets[1], 2);
    sq_tokens_free(t);

    tu_write(tp, "1 2 x3\n");
    cr_assert_eq(sq_tokens_load(tp, &t, &err), SQ_EDATA);
    cr_assert(strstr(err.msg, "t.txt") && strstr(err.msg, "x3"), "%s", err.msg);
    memset(&err, 0, sizeof err);
    tu_write(tp, "1 -2\n");
    cr_assert_eq(sq_tokens_load(tp, &t, &err), SQ_EDATA);
    memset(&err, 0, sizeof err);
    tu_write(tp, "\n \n");
    cr_assert_eq(sq_tokens_load(tp, &t, &err), SQ_EDATA);
    cr_assert(strstr(err.msg, "no tokens"), "%s", err.msg);
    memset(&err, 0, sizeof err);
    cr_assert_eq(sq_tokens_load("/nonexistent/p.txt", &t, &err), SQ_ENOINPUT);
    tu_rmtree(dir);
}

/* ---- the CLI ------------------------------------------------------------------------------ */

typedef struct cli_fixture {
    char *dir, *draft, *target, *small, *plan, *prompt, *small_prompt;
} cli_fixture;

static cli_fixture fixture(void)
{
    cli_fixture f;
    f.dir = tu_tmpdir();
    f.draft = write_model(f.dir, "draft", 2, 97);
    f.target = write_model(f.dir, "target", 1, 97);
    f.small = write_model(f.dir, "small", 3, 12);
    f.plan = tu_path(f.dir, "plan.json");
    sq_plan *p = dp_plan(16, 5, 0);
    sq_error err = {0};
    cr_assert_eq(sq_plan_save(f.plan, p, &err), 0, "%s", err.msg);
    sq_plan_free(p);
    f.prompt = tu_path(f.dir, "prompt.txt");
    tu_write(f.prompt, "5 17 42\n8\n");
    f.small_prompt = tu_path(f.dir, "small_prompt.txt");
    tu_write(f.small_prompt, "5 1 7\n");
    return f;
}

static const char *run_bin(void)
{
    const char *b = getenv("SQ_RUN_BIN");
    cr_assert_not_null(b, "SQ_RUN_BIN is set by meson");
    return b;
}

static int run_tool(char **argv, char **out, char **err)
{
    int rc = tu_run(argv, out, err);
    return rc;
}

Test(run, cli_greedy_validate_and_report)
{
    cli_fixture f = fixture();
    char *out = tu_path(f.dir, "out.txt"), *rep = tu_path(f.dir, "report.json");
    char *argv[] = {(char *)run_bin(), "--draft", f.draft, "--target", f.target, "--plan", f.plan,
                    "--prompt", f.prompt, "-n", "30", "--mode", "greedy", "-o", out,
                    "--report", rep, "--validate", "--threads", "1", NULL};
    char *so, *se;
    int rc = run_tool(argv, &so, &se);
    cr_assert_eq(rc, 0, "stderr: %s", se);
    cr_assert(strstr(se, "greedy output identical"), "%s", se);
    char *toks = tu_read(out, NULL);
    int n = 0;
    for (char *s = strtok(toks, " \n"); s; s = strtok(NULL, " \n"))
        n++;
    cr_assert_eq(n, 30);
    cJSON *j;
    sq_error err = {0};
    cr_assert_eq(sq_json_load(rep, &j, &err), 0, "%s", err.msg);
    cr_assert_str_eq(cJSON_GetObjectItem(j, "format")->valuestring, "sequoia-run-report");
    cJSON *tps = cJSON_GetObjectItem(j, "tokens_per_step");
    cr_assert_not_null(cJSON_GetObjectItem(tps, "ci95"));
    cJSON *steps = cJSON_GetObjectItem(j, "step_tokens");
    int total = 0;
    for (int i = 0; i < cJSON_GetArraySize(steps); i++)
        total += cJSON_GetArrayItem(steps, i)->valueint;
    cr_assert_geq(total, 30);
    cr_assert(fabs(cJSON_GetObjectItem(tps, "mean")->valuedouble -
                   (double)total / cJSON_GetArraySize(steps)) < 1e-9);
    cJSON *pred = cJSON_GetObjectItem(j, "prediction");
    cr_assert_not_null(cJSON_GetObjectItem(pred, "expected_tokens"));
    cr_assert_not_null(cJSON_GetObjectItem(pred, "explanation"));
    cJSON *t = cJSON_GetObjectItem(j, "timing");
    cr_assert_gt(cJSON_GetObjectItem(t, "speculative_ms_per_token")->valuedouble, 0);
    cr_assert_gt(cJSON_GetObjectItem(t, "speedup")->valuedouble, 0);
    cJSON *v = cJSON_GetObjectItem(j, "validation");
    cr_assert(cJSON_IsTrue(cJSON_GetObjectItem(v, "pass")));
    cr_assert(cJSON_IsTrue(cJSON_GetObjectItem(cJSON_GetObjectItem(v, "greedy"), "pass")));
    /* the generated tokens are the target's own greedy continuation */
    cJSON *ar = cJSON_GetObjectItem(cJSON_GetObjectItem(j, "autoregressive"), "tokens");
    char *copy = tu_read(out, NULL);
    int i = 0;
    for (char *s = strtok(copy, " \n"); s; s = strtok(NULL, " \n"), i++)
        cr_assert_eq(atoi(s), cJSON_GetArrayItem(ar, i)->valueint);
    cJSON_Delete(j);
    tu_rmtree(f.dir);
}

/* sequoia-run --batch: prompts of different lengths in one batch, one output line each, every
 * line equal to that prompt's own run token for token; the report's rates; refusals. */
Test(run, cli_batch_greedy_equals_separate_runs_and_reports_rates)
{
    cli_fixture f = fixture();
    const char *ps[3] = {"5 17 42 8 9 1", "60", "3 3 90 12"};
    char *prompts = tu_path(f.dir, "prompts.txt");
    char text[256];
    snprintf(text, sizeof text, "%s\n\n%s\n\n%s\n", ps[0], ps[1], ps[2]);
    tu_write(prompts, text);
    char *out = tu_path(f.dir, "out.txt"), *rep = tu_path(f.dir, "report.json");
    char *argv[] = {(char *)run_bin(), "--draft", f.draft, "--target", f.target, "--plan", f.plan,
                    "--prompt", prompts, "-n", "24", "--mode", "greedy", "--batch", "4",
                    "-o", out, "--report", rep, "--validate", "--threads", "1", NULL};
    char *so, *se;
    cr_assert_eq(run_tool(argv, &so, &se), 0, "stderr: %s", se);
    cr_assert(strstr(se, "tokens/s over the batch") && strstr(se, "identical"), "%s", se);
    char *lines = tu_read(out, NULL);
    char *line[5] = {0};
    int nl = 0;
    for (char *sv, *l = strtok_r(lines, "\n", &sv); l && nl < 5; l = strtok_r(NULL, "\n", &sv))
        line[nl++] = l;
    cr_assert_eq(nl, 4, "one line per sequence");
    cr_assert_str_eq(line[0], line[3], "sequence 3 reads prompt 0 again");
    for (int k = 0; k < 3; k++) {
        char *one = tu_path(f.dir, "one.txt"), *oout = tu_path(f.dir, "one_out.txt");
        snprintf(text, sizeof text, "%s\n", ps[k]);
        tu_write(one, text);
        char *a1[] = {(char *)run_bin(), "--draft", f.draft, "--target", f.target, "--plan",
                      f.plan, "--prompt", one, "-n", "24", "--mode", "greedy", "-o", oout,
                      "--no-baseline", "--threads", "1", NULL};
        char *so1, *se1;
        cr_assert_eq(run_tool(a1, &so1, &se1), 0, "stderr: %s", se1);
        char *alone = tu_read(oout, NULL);
        alone[strcspn(alone, "\n")] = 0;
        cr_assert_str_eq(line[k], alone, "sequence %d: batched and alone differ", k);
        free(alone);
        free(so1);
        free(se1);
        free(one);
        free(oout);
    }
    cJSON *j;
    sq_error err = {0};
    cr_assert_eq(sq_json_load(rep, &j, &err), 0, "%s", err.msg);
    /* report v2: the batch's figures are in its batch section (docs/formats.md) */
    cr_assert_str_eq(cJSON_GetObjectItem(j, "format")->valuestring, "sequoia-run-report");
    cr_assert_eq(cJSON_GetObjectItem(j, "version")->valueint, 2);
    cJSON *bj = cJSON_GetObjectItem(j, "batch");
    cr_assert_eq(cJSON_GetObjectItem(bj, "size")->valueint, 4);
    double tps = cJSON_GetObjectItem(bj, "tokens_per_s")->valuedouble;
    double per = cJSON_GetObjectItem(bj, "tokens_per_s_per_sequence")->valuedouble;
    cr_assert(tps > 0 && fabs(tps - 4 * per) < 1e-6 * tps, "%g vs 4 x %g", tps, per);
    /* the decoding steps' own time: part of the whole, made of the batch steps it names */
    cJSON *dec = cJSON_GetObjectItem(bj, "decode");
    cr_assert_not_null(dec);
    double dms = cJSON_GetObjectItem(dec, "ms")->valuedouble;
    double spec = cJSON_GetObjectItem(cJSON_GetObjectItem(j, "timing"),
                                      "speculative_ms")->valuedouble;
    double smed = cJSON_GetObjectItem(dec, "step_ms_median")->valuedouble;
    double sp10 = cJSON_GetObjectItem(dec, "step_ms_p10")->valuedouble;
    double tmed = cJSON_GetObjectItem(dec, "target_forward_ms_median")->valuedouble;
    double tp10 = cJSON_GetObjectItem(dec, "target_forward_ms_p10")->valuedouble;
    int bsteps = cJSON_GetObjectItem(bj, "batch_steps")->valueint;
    cr_assert(dms > 0 && dms <= spec, "decode %g ms, whole run %g ms", dms, spec);
    cr_assert(cJSON_GetObjectItem(dec, "tokens_per_s")->valuedouble >= tps);
    cr_assert(sp10 > 0 && sp10 <= smed && tp10 <= tmed && tmed <= smed, "%g %g %g %g", sp10,
              smed, tp10, tmed);
    cr_assert(dms >= (bsteps + 1) / 2 * smed * (1 - 1e-9), "half the steps take the median or "
              "more: %g ms in %d steps of median %g", dms, bsteps, smed);
    cr_assert(cJSON_IsTrue(cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetObjectItem(j,
                           "validation"), "greedy"), "pass")));
    cr_assert(cJSON_IsTrue(cJSON_GetObjectItem(bj, "greedy_equals_separate_runs")));
    cr_assert(cJSON_IsTrue(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "validation"), "pass")));
    cr_assert(strstr(se, "its own run alone: ok"), "%s", se);
    cJSON *seqs = cJSON_GetObjectItem(bj, "sequences");
    cr_assert_eq(cJSON_GetArraySize(seqs), 4);
    cr_assert_eq(cJSON_GetObjectItem(cJSON_GetArrayItem(seqs, 1), "prompt_tokens")->valueint, 1);
    cJSON_Delete(j);
    free(lines);
    free(so);
    free(se);
    /* refusals: a zero batch, a batch past the machine's memory (with the bytes), greedy
     * --validate without the target-only decoding it compares with */
    struct {
        const char *batch, *mode, *expect;
        int validate;
    } bad[] = {
        {"0", "greedy", "--batch", 0},
        {"1000000", "greedy", "bytes", 0},
        {"2", "greedy", "--no-baseline", 1},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char *a[] = {(char *)run_bin(), "--draft", f.draft, "--target", f.target, "--plan", f.plan,
                     "--prompt", prompts, "-n", "4", "--mode", (char *)bad[i].mode, "--batch",
                     (char *)bad[i].batch, "-o", out, bad[i].validate ? "--validate" : NULL,
                     "--no-baseline", NULL};
        cr_assert_eq(run_tool(a, &so, &se), 64, "case %zu: %s", i, se);
        cr_assert(strstr(se, bad[i].expect), "case %zu: %s", i, se);
        free(so);
        free(se);
    }
    tu_rmtree(f.dir);
}

/* Runs sequoia-run with the fixture's models and `extra` arguments (NULL-terminated); returns
 * the exit status, stderr in *se (the caller frees it). */
static int run_with(const char *draft, const char *target, const char *plan, const char *prompt,
                    const char *const *extra, char **se)
{
    char *argv[40] = {(char *)run_bin(), "--draft", (char *)draft, "--target", (char *)target,
                      "--plan", (char *)plan, "--prompt", (char *)prompt, "--threads", "1"};
    int a = 11;
    for (int i = 0; extra[i] && a < 39; i++)
        argv[a++] = (char *)extra[i];
    argv[a] = NULL;
    char *so = NULL;
    int rc = run_tool(argv, &so, se);
    free(so);
    return rc;
}

/* A report without what depends on the clock: the timing object and the batch's rates. */
static cJSON *report_without_times(const char *path)
{
    cJSON *j;
    sq_error err = {0};
    cr_assert_eq(sq_json_load(path, &j, &err), 0, "%s", err.msg);
    cJSON_DeleteItemFromObject(j, "timing");
    cJSON *b = cJSON_GetObjectItem(j, "batch");
    cr_assert_not_null(b, "%s: every v2 report has the batch section", path);
    const char *clock[] = {"tokens_per_s", "tokens_per_s_per_sequence", "base_tokens_per_s",
                           "decode"};
    for (size_t i = 0; i < sizeof clock / sizeof *clock; i++)
        cJSON_DeleteItemFromObject(b, clock[i]);
    return j;
}

/* One driver (runtime/run.h): a single run is a batch of one. Without --batch and with
 * --batch 1, the same prompt gives the same tokens and the same report but for the times, in
 * greedy mode (validated against the target) and in a sampled mode (validated by the
 * distribution test). */
Test(run, cli_single_run_equals_a_batch_of_one)
{
    cli_fixture f = fixture();
    const struct {
        const char *draft, *target, *prompt;
        const char *args[12];
    } cases[] = {
        {f.draft, f.target, f.prompt, {"-n", "20", "--mode", "greedy", "--validate", NULL}},
        {f.small, f.small, f.small_prompt, {"-n", "12", "-m", "stochastic", "-t", "0.8", "-s",
                                            "4", "--validate", "--validate-samples", "200",
                                            NULL}},
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        char *out[2], *rep[2], *toks[2];
        cJSON *j[2];
        for (int b = 0; b < 2; b++) {
            char name[32];
            snprintf(name, sizeof name, "out%d.txt", b);
            out[b] = tu_path(f.dir, name);
            snprintf(name, sizeof name, "rep%d.json", b);
            rep[b] = tu_path(f.dir, name);
            const char *extra[24];
            int a = 0;
            for (int i = 0; cases[c].args[i]; i++)
                extra[a++] = cases[c].args[i];
            extra[a++] = "-o";
            extra[a++] = out[b];
            extra[a++] = "--report";
            extra[a++] = rep[b];
            if (b) {
                extra[a++] = "--batch";
                extra[a++] = "1";
            }
            extra[a] = NULL;
            char *se;
            cr_assert_eq(run_with(cases[c].draft, cases[c].target, f.plan, cases[c].prompt, extra,
                                  &se), 0, "case %zu%s: %s", c, b ? " --batch 1" : "", se);
            free(se);
            toks[b] = tu_read(out[b], NULL);
            j[b] = report_without_times(rep[b]);
        }
        cr_assert_str_eq(toks[0], toks[1], "case %zu: the same tokens", c);
        char *s0 = cJSON_PrintUnformatted(j[0]), *s1 = cJSON_PrintUnformatted(j[1]);
        cr_assert_str_eq(s0, s1, "case %zu: the same report but for the times", c);
        cr_assert(cJSON_IsTrue(sq_json_field(sq_json_field(j[0], "validation"), "pass")));
        const cJSON *bj = sq_json_field(j[0], "batch");
        cr_assert_eq(sq_json_field(bj, "size")->valueint, 1);
        cr_assert_eq(sq_json_field(bj, "batch_steps")->valueint,
                     sq_json_field(j[0], "steps")->valueint);
        free(s0);
        free(s1);
        for (int b = 0; b < 2; b++) {
            cJSON_Delete(j[b]);
            free(toks[b]);
            free(out[b]);
            free(rep[b]);
        }
    }
    tu_rmtree(f.dir);
}

/* The two drifts of the run's former copies (issue 23): a batch warns, as a single run does,
 * that the plan was made for other ranks than the mode's; and --validate --no-baseline is
 * refused in greedy mode only (it compares with the target-only decoding), with or without a
 * batch: the sampled modes' distribution test runs without the baseline. */
Test(run, cli_batch_warns_of_rank_semantics_and_validates_sampled_modes_without_baseline)
{
    cli_fixture f = fixture();
    char *topk = tu_path(f.dir, "topk.json"), *out = tu_path(f.dir, "out.txt");
    char *rep = tu_path(f.dir, "report.json"), *prompts = tu_path(f.dir, "prompts.txt");
    sq_plan *p = star_plan(4, "greedy");   /* draft-topk ranks */
    sq_error err = {0};
    cr_assert_eq(sq_plan_save(topk, p, &err), 0, "%s", err.msg);
    sq_plan_free(p);
    tu_write(prompts, "5 1 7\n\n3\n");
    const char *batch[] = {NULL, "2"};
    for (int b = 0; b < 2; b++) {
        const char *extra[] = {"-n", "6", "-m", "stochastic", "-t", "0.8", "--validate",
                               "--validate-samples", "200", "--no-baseline", "-o", out,
                               "--report", rep, batch[b] ? "--batch" : NULL, batch[b], NULL};
        char *se;
        cr_assert_eq(run_with(f.small, f.small, topk, prompts, extra, &se), 0, "batch %s: %s",
                     batch[b] ? batch[b] : "none", se);
        cr_assert(strstr(se, "warning") && strstr(se, "rank_semantics") &&
                  strstr(se, "draft-topk"), "batch %s: %s", batch[b] ? batch[b] : "none", se);
        free(se);
        cJSON *j;
        cr_assert_eq(sq_json_load(rep, &j, &err), 0, "%s", err.msg);
        const cJSON *v = sq_json_field(j, "validation");
        cr_assert_not_null(sq_json_field(v, "distribution"));
        cr_assert(cJSON_IsTrue(sq_json_field(v, "pass")));
        cr_assert_null(sq_json_field(j, "autoregressive"), "no baseline");
        cr_assert_null(sq_json_field(sq_json_field(j, "batch"), "base_tokens_per_s"));
        cr_assert_eq(sq_json_field(sq_json_field(j, "batch"), "size")->valueint, b ? 2 : 1);
        cJSON_Delete(j);
    }
    /* greedy: refused before any work, with or without a batch */
    for (int b = 0; b < 2; b++) {
        const char *extra[] = {"-n", "6", "-m", "greedy", "--validate", "--no-baseline", "-o",
                               out, batch[b] ? "--batch" : NULL, batch[b], NULL};
        char *se;
        cr_assert_eq(run_with(f.small, f.small, topk, prompts, extra, &se), 64, "%s", se);
        cr_assert(strstr(se, "--no-baseline"), "%s", se);
        free(se);
    }
    tu_rmtree(f.dir);
}

/* The v2 report's batch section for a batch of 3 over prompts of different lengths: the pooled
 * figures are the sequences' sums, each sequence has its entry, the rates agree. */
Test(run, cli_report_v2_batch_section)
{
    cli_fixture f = fixture();
    char *prompts = tu_path(f.dir, "prompts.txt"), *out = tu_path(f.dir, "out.txt");
    char *rep = tu_path(f.dir, "report.json");
    tu_write(prompts, "5 17 42 8 9 1\n\n60\n");
    const char *extra[] = {"-n", "16", "--mode", "greedy", "--batch", "3", "-o", out,
                           "--report", rep, NULL};
    char *se;
    cr_assert_eq(run_with(f.draft, f.target, f.plan, prompts, extra, &se), 0, "%s", se);
    free(se);
    cJSON *j;
    sq_error err = {0};
    cr_assert_eq(sq_json_load(rep, &j, &err), 0, "%s", err.msg);
    cr_assert_str_eq(sq_json_field(j, "format")->valuestring, "sequoia-run-report");
    cr_assert_eq(sq_json_field(j, "version")->valueint, 2);
    cr_assert_eq(sq_json_field(j, "generated_tokens")->valueint, 3 * 16);
    cr_assert_eq(sq_json_field(sq_json_field(j, "setup"), "prompt_tokens")->valueint, 6);
    const cJSON *bj = sq_json_field(j, "batch");
    cr_assert_eq(sq_json_field(bj, "size")->valueint, 3);
    const cJSON *seqs = sq_json_field(bj, "sequences");
    cr_assert_eq(cJSON_GetArraySize(seqs), 3);
    int plen[3] = {6, 1, 6}, sum = 0, most = 0;
    for (int k = 0; k < 3; k++) {
        const cJSON *q = cJSON_GetArrayItem(seqs, k);
        int st = sq_json_field(q, "steps")->valueint;
        cr_assert_eq(sq_json_field(q, "prompt_tokens")->valueint, plen[k]);
        cr_assert_float_eq(sq_json_field(q, "tokens_per_step")->valuedouble, 16.0 / st, 1e-12);
        cr_assert_eq(sq_json_field(q, "common_prefix_with_autoregressive")->valueint, 16,
                     "greedy: sequence %d is the target's own continuation", k);
        sum += st;
        most = st > most ? st : most;
    }
    cr_assert_eq(sq_json_field(j, "steps")->valueint, sum, "steps pool every sequence's");
    cr_assert_eq(cJSON_GetArraySize(sq_json_field(j, "step_tokens")), sum);
    cr_assert_eq(sq_json_field(bj, "batch_steps")->valueint, most,
                 "the batch runs until its slowest sequence is done");
    cr_assert_float_eq(sq_json_field(bj, "tokens_per_step")->valuedouble, 48.0 / sum, 1e-12);
    const cJSON *t = sq_json_field(j, "timing");
    double spec = sq_json_field(t, "speculative_ms")->valuedouble;
    double base = sq_json_field(t, "autoregressive_ms")->valuedouble;
    cr_assert_float_eq(sq_json_field(bj, "tokens_per_s")->valuedouble, 48 / (spec / 1e3), 1e-9);
    cr_assert_float_eq(sq_json_field(bj, "base_tokens_per_s")->valuedouble, 48 / (base / 1e3),
                       1e-9);
    cr_assert_float_eq(sq_json_field(t, "speedup")->valuedouble, base / spec, 1e-12);
    cr_assert_float_eq(sq_json_field(t, "speculative_ms_per_token")->valuedouble, spec / 48,
                       1e-12);
    const cJSON *dec = sq_json_field(bj, "decode");
    const char *dk[] = {"ms", "tokens_per_s", "step_ms_median", "step_ms_p10", "draft_ms_median",
                        "target_forward_ms_median", "target_forward_ms_p10", "verify_ms_median"};
    for (size_t i = 0; i < sizeof dk / sizeof *dk; i++)
        cr_assert(cJSON_IsNumber(sq_json_field(dec, dk[i])), "decode.%s", dk[i]);
    cr_assert_null(sq_json_field(bj, "greedy_equals_separate_runs"), "not validated");
    cJSON_Delete(j);
    tu_rmtree(f.dir);
}

Test(run, cli_stochastic_validate_reports_p_values)
{
    cli_fixture f = fixture();
    char *rep = tu_path(f.dir, "report.json");
    char *argv[] = {(char *)run_bin(), "--draft", f.small, "--target", f.small, "--plan", f.plan,
                    "--prompt", f.small_prompt, "-n", "20", "-m", "stochastic", "-t", "0.8", "-s", "3",
                    "--report", rep, "--validate", "--validate-samples", "400", "--threads", "1",
                    NULL};
    /* the small model has 12 tokens: fine for a plan whose nodes have at most 12 children */
    char *so, *se;
    int rc = run_tool(argv, &so, &se);
    cr_assert_eq(rc, 0, "stderr: %s", se);
    cJSON *j;
    sq_error err = {0};
    cr_assert_eq(sq_json_load(rep, &j, &err), 0, "%s", err.msg);
    cJSON *d = cJSON_GetObjectItem(cJSON_GetObjectItem(j, "validation"), "distribution");
    cr_assert_not_null(d);
    double p1 = cJSON_GetObjectItem(cJSON_GetObjectItem(d, "first_token"), "p_value")->valuedouble;
    double p2 =
        cJSON_GetObjectItem(cJSON_GetObjectItem(d, "first_two_tokens"), "p_value")->valuedouble;
    cr_assert(p1 >= P_MIN && p2 >= P_MIN, "p-values %g %g", p1, p2);
    cJSON_Delete(j);
    tu_rmtree(f.dir);
}

/* sequoia-run --batch --validate in the sampled modes: the chi-square test of the first two
 * tokens with every draw made inside a batch of 3 over two prompts of different lengths (one
 * test per prompt, 400 and 200 draws) passes, from the command line; the report says so. */
Test(run, cli_batch_sampled_validate_passes_the_chi_square_inside_the_batch)
{
    cli_fixture f = fixture();
    char *prompts = tu_path(f.dir, "prompts.txt"), *rep = tu_path(f.dir, "report.json");
    char *out = tu_path(f.dir, "out.txt");
    tu_write(prompts, "5 1 7\n\n3\n");
    const char *modes[] = {"stochastic", "specinfer"};
    for (int m = 0; m < 2; m++) {
        char *argv[] = {(char *)run_bin(), "--draft", f.small, "--target", f.small, "--plan",
                        f.plan, "--prompt", prompts, "-n", "6", "-m", (char *)modes[m], "-t",
                        "0.8", "-s", "5", "--batch", "3", "-o", out, "--report", rep,
                        "--validate", "--validate-samples", "600", "--threads", "1", NULL};
        char *so, *se;
        cr_assert_eq(run_tool(argv, &so, &se), 0, "%s: stderr: %s", modes[m], se);
        cr_assert(strstr(se, "600 draws in batches of 3 over 2 prompts") && strstr(se, "): ok"),
                  "%s: %s", modes[m], se);
        cJSON *j;
        sq_error err = {0};
        cr_assert_eq(sq_json_load(rep, &j, &err), 0, "%s", err.msg);
        cJSON *v = cJSON_GetObjectItem(j, "validation");
        cJSON *d = cJSON_GetObjectItem(v, "distribution");
        cr_assert_not_null(d, "%s: the report has the distribution test", modes[m]);
        cr_assert_eq(cJSON_GetObjectItem(d, "seeds")->valueint, 600);
        cr_assert_eq(cJSON_GetObjectItem(d, "prompts")->valueint, 2);
        double p1 = cJSON_GetObjectItem(cJSON_GetObjectItem(d, "first_token"), "p_value")->valuedouble;
        double p2 = cJSON_GetObjectItem(cJSON_GetObjectItem(d, "first_two_tokens"),
                                        "p_value")->valuedouble;
        cr_assert(p1 >= P_MIN && p2 >= P_MIN, "%s: p-values %g %g", modes[m], p1, p2);
        cr_assert(cJSON_GetObjectItem(cJSON_GetObjectItem(d, "first_token"), "df")->valueint >= 2,
                  "the test has bins to compare");
        cr_assert(cJSON_IsTrue(cJSON_GetObjectItem(v, "pass")));
        cJSON_Delete(j);
        free(so);
        free(se);
    }
    tu_rmtree(f.dir);
}

typedef struct bad_case {
    const char *what;
    int         code;
    const char *needle;   /* in stderr */
} bad_case;

static int run_bad(cli_fixture *f, const char *plan, const char *prompt, const char *draft,
                   const char *mode, const char *out, char **se)
{
    char *argv[] = {(char *)run_bin(), "--draft", (char *)draft, "--target", f->target, "--plan",
                    (char *)plan, "--prompt", (char *)prompt, "-n", "8", "--mode", (char *)mode,
                    "-o", (char *)out, "--threads", "1", NULL};
    return run_tool(argv, NULL, se);
}

Test(run, cli_bad_inputs_have_clear_messages_and_exit_codes)
{
    cli_fixture f = fixture();
    char *out = tu_path(f.dir, "out.txt");
    char *se;
    /* missing plan */
    char *missing = tu_path(f.dir, "nope.json");
    cr_assert_eq(run_bad(&f, missing, f.prompt, f.draft, "greedy", out, &se), 66, "%s", se);
    cr_assert(strstr(se, "nope.json"), "%s", se);
    /* corrupt plan */
    char *corrupt = tu_path(f.dir, "corrupt.json");
    tu_write(corrupt, "{\"format\": \"sequoia-plan\", \"version\": 1, \"nodes\": ");
    cr_assert_eq(run_bad(&f, corrupt, f.prompt, f.draft, "greedy", out, &se), 65, "%s", se);
    cr_assert(strstr(se, "corrupt.json"), "%s", se);
    /* bad prompt file */
    char *bp = tu_path(f.dir, "bad.txt");
    tu_write(bp, "1 2 three\n");
    cr_assert_eq(run_bad(&f, f.plan, bp, f.draft, "greedy", out, &se), 65, "%s", se);
    cr_assert(strstr(se, "bad.txt") && strstr(se, "three"), "%s", se);
    /* out-of-range ids */
    tu_write(bp, "1 2 97\n");
    cr_assert_eq(run_bad(&f, f.plan, bp, f.draft, "greedy", out, &se), 65, "%s", se);
    cr_assert(strstr(se, "bad.txt") && strstr(se, "97") && strstr(se, "vocabulary"), "%s", se);
    /* a prompt longer than the context (512 positions) */
    char *longp = tu_path(f.dir, "long.txt");
    char *txt = malloc(600 * 4);
    txt[0] = '\0';
    for (int i = 0; i < 600; i++)
        strcat(txt, "3 ");
    tu_write(longp, txt);
    free(txt);
    cr_assert_eq(run_bad(&f, f.plan, longp, f.draft, "greedy", out, &se), 65, "%s", se);
    cr_assert(strstr(se, "long.txt") && strstr(se, "context"), "%s", se);
    /* draft and target with different vocabularies */
    cr_assert_eq(run_bad(&f, f.plan, f.prompt, f.small, "greedy", out, &se), 65, "%s", se);
    cr_assert(strstr(se, "vocab_size"), "%s", se);
    /* plan/model mismatch: more children than the vocabulary has tokens */
    char *wide = tu_path(f.dir, "wide.json");
    sq_plan *p = star_plan(20, "greedy");
    sq_error err = {0};
    cr_assert_eq(sq_plan_save(wide, p, &err), 0, "%s", err.msg);
    sq_plan_free(p);
    char *argv[] = {(char *)run_bin(), "--draft", f.small, "--target", f.small, "--plan", wide,
                    "--prompt", f.small_prompt, "-n", "4", "--mode", "greedy", "-o", out, NULL};
    cr_assert_eq(run_tool(argv, NULL, &se), 65, "%s", se);
    cr_assert(strstr(se, "wide.json") && strstr(se, "vocabulary"), "%s", se);
    /* unknown mode */
    cr_assert_eq(run_bad(&f, f.plan, f.prompt, f.draft, "beam", out, &se), 64, "%s", se);
    cr_assert(strstr(se, "beam"), "%s", se);
    /* unwritable output */
    char *nodir = tu_path(f.dir, "no/such/dir/out.txt");
    cr_assert_eq(run_bad(&f, f.plan, f.prompt, f.draft, "greedy", nodir, &se), 73, "%s", se);
    /* none of the failures left an output behind */
    cr_assert_eq(tu_exists(out), 0);
    /* the models' directory missing */
    char *nomodel = tu_path(f.dir, "nomodel");
    cr_assert_neq(run_bad(&f, f.plan, f.prompt, nomodel, "greedy", out, &se), 0);
    cr_assert(strstr(se, "nomodel"), "%s", se);
    /* required options */
    char *argv2[] = {(char *)run_bin(), "--draft", f.draft, NULL};
    cr_assert_eq(run_tool(argv2, NULL, &se), 64);
    char *argv3[] = {(char *)run_bin(), "--help", NULL};
    char *so;
    cr_assert_eq(run_tool(argv3, &so, &se), 0);
    cr_assert(strstr(so, "Examples") && strstr(so, "dump"));
    tu_rmtree(f.dir);
}

Test(run, cli_dump_writes_teacher_forced_logits)
{
    cli_fixture f = fixture();
    char *toks = tu_path(f.dir, "text.txt"), *corpus = tu_path(f.dir, "c.h5");
    tu_write(toks, "1 2 3 4 5 6 7 8 9 10\n\n11 12 13\n");
    char *argv[] = {(char *)run_bin(), "dump", "--draft", f.draft, "--target", f.target,
                    "--tokens", toks, "-o", corpus, "--context", "4", "--threads", "1", NULL};
    char *se;
    cr_assert_eq(run_tool(argv, NULL, &se), 0, "%s", se);
    sq_corpus *c;
    sq_error err = {0};
    cr_assert_eq(sq_corpus_open(corpus, &c, &err), 0, "%s", err.msg);
    const sq_corpus_info *info = sq_corpus_get_info(c);
    /* windows of 4 tokens: rows for every position with a next token: 9 + 2 */
    cr_assert_eq(info->rows, 11);
    cr_assert_eq(info->vocab, 97);
    cr_assert_eq(info->sequences, 2);
    cr_assert(info->has_tokens);
    float *tl = malloc(11 * 97 * sizeof *tl), *dl = malloc(11 * 97 * sizeof *dl);
    int32_t next[11];
    cr_assert_eq(sq_corpus_read(c, 0, 11, tl, dl, next, &err), 0, "%s", err.msg);
    const int32_t want_next[11] = {2, 3, 4, 5, 6, 7, 8, 9, 10, 12, 13};
    for (int i = 0; i < 11; i++)
        cr_assert_eq(next[i], want_next[i]);
    /* oracle: row 5 (token 6, window 5..8 starts at token 5) = target forward over (5, 6) */
    sq_model *tm = load(f.target);
    sq_context_params cp = sq_context_default_params();
    cp.max_context = 16;
    cp.max_pending = 8;
    cp.threads = 1;
    sq_context *ctx;
    cr_assert_eq(sq_context_new(tm, &cp, &ctx, &err), 0, "%s", err.msg);
    const int32_t ids[2] = {5, 6}, pos[2] = {0, 1};
    const uint8_t mask[4] = {1, 0, 1, 1};
    float lg[2 * 97];
    cr_assert_eq(sq_context_forward(ctx, ids, pos, mask, 2, lg, &err), 0, "%s", err.msg);
    for (int x = 0; x < 97; x++)
        cr_assert(fabsf(lg[97 + x] - tl[5 * 97 + x]) <= 1e-4f, "logit %d: %g vs %g", x,
                  lg[97 + x], tl[5 * 97 + x]);
    sq_context_free(ctx);
    sq_model_free(tm);
    free(tl);
    free(dl);
    sq_corpus_close(c);
    /* sparse top-k */
    char *argv2[] = {(char *)run_bin(), "dump", "--draft", f.draft, "--target", f.target,
                     "--tokens", toks, "-o", corpus, "--top-k", "8", "--threads", "1", NULL};
    cr_assert_eq(run_tool(argv2, NULL, &se), 0, "%s", se);
    cr_assert_eq(sq_corpus_open(corpus, &c, &err), 0, "%s", err.msg);
    cr_assert(sq_corpus_get_info(c)->sparse);
    cr_assert_eq(sq_corpus_get_info(c)->rows, 11);
    sq_corpus_close(c);
    /* dense float16 */
    char *argv4[] = {(char *)run_bin(), "dump", "--draft", f.draft, "--target", f.target,
                     "--tokens", toks, "-o", corpus, "--half", "--threads", "1", NULL};
    cr_assert_eq(run_tool(argv4, NULL, &se), 0, "%s", se);
    cr_assert_eq(sq_corpus_open(corpus, &c, &err), 0, "%s", err.msg);
    cr_assert_eq(sq_corpus_get_info(c)->rows, 11);
    cr_assert_eq(sq_corpus_get_info(c)->sparse, 0);
    sq_corpus_close(c);
    /* --compression 0: no filter on the logits, the same rows as the default level 1 */
    char *c0 = tu_path(f.dir, "c0.h5"), *c1 = tu_path(f.dir, "c1.h5");
    char *argv5[] = {(char *)run_bin(), "dump", "--draft", f.draft, "--target", f.target,
                     "--tokens", toks, "-o", c0, "--compression", "0", "--threads", "1", NULL};
    char *argv6[] = {(char *)run_bin(), "dump", "--draft", f.draft, "--target", f.target,
                     "--tokens", toks, "-o", c1, "--threads", "1", NULL};
    cr_assert_eq(run_tool(argv5, NULL, &se), 0, "%s", se);
    cr_assert_eq(run_tool(argv6, NULL, &se), 0, "%s", se);
    int nfilters[2];
    float *rows[2];
    for (int k = 0; k < 2; k++) {
        hid_t file = H5Fopen(k ? c1 : c0, H5F_ACC_RDONLY, H5P_DEFAULT);
        cr_assert(file >= 0);
        hid_t ds = H5Dopen2(file, "/target/logits", H5P_DEFAULT);
        hid_t pl = H5Dget_create_plist(ds);
        nfilters[k] = H5Pget_nfilters(pl);
        H5Pclose(pl);
        H5Dclose(ds);
        H5Fclose(file);
        cr_assert_eq(sq_corpus_open(k ? c1 : c0, &c, &err), 0, "%s", err.msg);
        rows[k] = malloc(2 * 11 * 97 * sizeof(float));
        cr_assert_eq(sq_corpus_read(c, 0, 11, rows[k], rows[k] + 11 * 97, NULL, &err), 0, "%s",
                     err.msg);
        sq_corpus_close(c);
    }
    cr_assert_eq(nfilters[0], 0, "--compression 0 left %d filters", nfilters[0]);
    cr_assert_gt(nfilters[1], 0, "the default level wrote no filter");
    cr_assert(memcmp(rows[0], rows[1], 2 * 11 * 97 * sizeof(float)) == 0);
    free(rows[0]);
    free(rows[1]);
    char *argv7[] = {(char *)run_bin(), "dump", "--draft", f.draft, "--target", f.target,
                     "--tokens", toks, "-o", c0, "--compression", "10", NULL};
    cr_assert_eq(run_tool(argv7, NULL, &se), 64, "%s", se);
    cr_assert(strstr(se, "--compression"), "%s", se);
    /* a missing token file, and nothing written */
    char *c2 = tu_path(f.dir, "c2.h5");
    char *argv3[] = {(char *)run_bin(), "dump", "--draft", f.draft, "--target", f.target,
                     "--tokens", "/nonexistent/t.txt", "-o", c2, NULL};
    cr_assert_eq(run_tool(argv3, NULL, &se), 66, "%s", se);
    cr_assert_eq(tu_exists(c2), 0);
    tu_rmtree(f.dir);
}

/* ---- plans deliver their prediction ------------------------------------------------------- */

/* The chain of issue 4, proof 4, on a model pair whose draft is the target's first layer (same
 * seed: shared embeddings, layer 0 and head): the target samples text; `sequoia-run dump` turns
 * it into a corpus; the stochastic@T1 curve is estimated from it (planner/accept/accept.h); the DP
 * plans a tree with that curve; speculative decoding of fresh prompts must deliver the plan's
 * expected tokens per step within the 95% confidence interval of the measured mean. */
static void sample_text(sq_specdec *sd, int seqs, int len, uint64_t seed0, const char *path)
{
    char *buf = malloc((size_t)seqs * (len + 4) * 8 + 16);
    size_t o = 0;
    sq_error err = {0};
    for (int s = 0; s < seqs; s++) {
        int32_t prompt[2] = {(int32_t)(seed0 * 7 + s * 13) % 97, (int32_t)(s * 31 + 5) % 97};
        int32_t *gen = malloc((size_t)len * sizeof *gen);
        cr_assert_eq(sq_specdec_autoregressive(sd, prompt, 2, len, seed0 + s, gen, &err), 0, "%s",
                     err.msg);
        o += (size_t)sprintf(buf + o, "%d %d", prompt[0], prompt[1]);
        for (int i = 0; i < len; i++)
            o += (size_t)sprintf(buf + o, " %d", gen[i]);
        o += (size_t)sprintf(buf + o, "\n\n");
        free(gen);
    }
    tu_write(path, buf);
    free(buf);
}

Test(run, plan_from_a_dumped_curve_delivers_its_expected_tokens, .timeout = 240)
{
    enum { W = 8, V = 97 };
    char *dir = tu_tmpdir();
    sq_random_model_params mp = sq_random_model_default_params();
    mp.config.n_layers = 4;
    char *tp = tu_path(dir, "target"), *dp = tu_path(dir, "draft");
    sq_error err = {0};
    cr_assert_eq(sq_model_write_random(tp, &mp, &err), 0, "%s", err.msg);
    mp.config.n_layers = 1;
    cr_assert_eq(sq_model_write_random(dp, &mp, &err), 0, "%s", err.msg);
    sq_model *draft = load(dp), *target = load(tp);

    /* 1. the target's own text at T = 1 */
    sq_plan *root = chain_plan(1, "stochastic");
    sq_specdec *sd = new_sd(draft, target, root, SQ_MODE_STOCHASTIC, 1.0, 1);
    char *text = tu_path(dir, "text.txt"), *corpus = tu_path(dir, "c.h5");
    sample_text(sd, 24, 120, 100, text);
    sq_specdec_free(sd);
    sq_plan_free(root);

    /* 2. the corpus */
    char *argv[] = {(char *)run_bin(), "dump", "--draft", dp, "--target", tp, "--tokens", text,
                    "-o", corpus, "--threads", "1", NULL};
    char *se;
    cr_assert_eq(run_tool(argv, NULL, &se), 0, "%s", se);

    /* 3. the stochastic@T1 curve */
    sq_corpus *c;
    cr_assert_eq(sq_corpus_open(corpus, &c, &err), 0, "%s", err.msg);
    int64_t rows = sq_corpus_get_info(c)->rows;
    float *tl = malloc((size_t)V * sizeof *tl), *dl = malloc((size_t)V * sizeof *dl);
    double P[V], Q[V], a[W], sum[W] = {0};
    sq_accept_ws *ws = sq_accept_ws_new(V, W);
    gsl_rng *rng = gsl_rng_alloc(gsl_rng_mt19937);
    sq_accept_config cfg = {SQ_MODE_STOCHASTIC, 1.0, 1.0};
    for (int64_t r = 0; r < rows; r++) {
        cr_assert_eq(sq_corpus_read(c, r, 1, tl, dl, NULL, &err), 0, "%s", err.msg);
        sq_accept_probs(tl, V, 1.0, 1.0, P, ws);
        sq_accept_probs(dl, V, 1.0, 1.0, Q, ws);
        sq_accept_position(&cfg, tl, dl, P, Q, V, W, 16, rng, a, ws);
        for (int k = 0; k < W; k++)
            sum[k] += a[k];
    }
    for (int k = 0; k < W; k++)
        sum[k] /= (double)rows;
    gsl_rng_free(rng);
    sq_accept_ws_free(ws);
    sq_corpus_close(c);
    free(tl);
    free(dl);
    sq_curve curve = {0};
    cr_assert_eq(sq_curve_init(&curve, "stochastic@T1", "stochastic", sum, W, &err), 0, "%s",
                 err.msg);

    /* 4. the plan */
    sq_dp_params prm = sq_dp_default_params();
    prm.budget = 16;
    prm.depth = 5;
    prm.curve = &curve;
    sq_dp *dpv;
    sq_tree *t;
    sq_plan *plan;
    cr_assert_eq(sq_dp_solve(&prm, &dpv, &err), 0, "%s", err.msg);
    cr_assert_eq(sq_dp_tree(dpv, 16, 5, &t, &err), 0, "%s", err.msg);
    cr_assert_eq(sq_plan_new(t, &curve, 16, 5, sq_dp_width(dpv), &plan, &err), 0, "%s", err.msg);
    sq_dp_free(dpv);

    /* 5. speculative decoding of fresh prompts */
    sd = new_sd(draft, target, plan, SQ_MODE_STOCHASTIC, 1.0, 77);
    enum { SEQS = 24, NEW = 120 };
    double *steps = malloc(SEQS * NEW * sizeof *steps);
    int ns = 0;
    for (int s = 0; s < SEQS; s++) {
        int32_t prompt[2] = {(int32_t)(s * 17 + 3) % V, (int32_t)(s * 29 + 11) % V};
        int32_t out[NEW];
        int st[NEW], k;
        sq_specdec_seed(sd, 5000 + (uint64_t)s);
        cr_assert_eq(sq_specdec_generate(sd, prompt, 2, NEW, out, st, &k, NULL, &err), 0, "%s",
                     err.msg);
        for (int i = 0; i < k - 1; i++)   /* the last step may be cut short: left out */
            steps[ns++] = st[i];
    }
    sq_mean_ci m = sq_mean_ci_batch(steps, ns);
    cr_log_info("curve p = [%.3f %.3f %.3f %.3f ...]; plan expects %.4f; measured %.4f "
                "(95%% CI %.4f .. %.4f, %d steps)", sum[0], sum[1], sum[2], sum[3],
                plan->expected_tokens, m.mean, m.lo, m.hi, ns);
    cr_assert(plan->expected_tokens >= m.lo && plan->expected_tokens <= m.hi,
              "plan expects %.4f tokens/step, measured %.4f (95%% CI %.4f .. %.4f)",
              plan->expected_tokens, m.mean, m.lo, m.hi);
    cr_assert_gt(plan->expected_tokens, 2.0, "a draft worth speculating with");
    free(steps);
    sq_specdec_free(sd);
    sq_plan_free(plan);
    sq_curve_clear(&curve);
    sq_model_free(draft);
    sq_model_free(target);
    tu_rmtree(dir);
}
