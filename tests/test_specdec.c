/* The speculative step as one body (runtime/specdec.h): a single decoder is a batch of one
 * (tokens, step infos and the distribution validation equal, in every mode), a batch times its
 * steps as a single step does, the per-level grow hook shapes the tree (a hook that builds a
 * chain, or a fork of chains, equals the plan of that shape; its misuse is refused), and the
 * shared plumbing of runtime/prefill.h (causal prefill, the vocabulary check). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "libsequoia/format/plan.h"
#include "runtime/model.h"
#include "runtime/prefill.h"
#include "runtime/specdec.h"
#include "runtime/st_writer.h"
#include "runtime/validate.h"
#include "tests/testutil.h"

typedef struct models {
    char     *dir;
    sq_model *draft, *target;
} models;

static models models_new(int vocab)
{
    models m = {tu_tmpdir(), NULL, NULL};
    char *tp = tu_path(m.dir, "target"), *dp = tu_path(m.dir, "draft");
    sq_random_model_params p = sq_random_model_default_params();
    p.config.vocab_size = vocab;
    p.seed = 21;
    p.config.n_layers = 2;
    sq_error err = {0};
    cr_assert_eq(sq_model_write_random(tp, &p, &err), 0, "%s", err.msg);
    p.seed = 22;
    p.config.n_layers = 1;
    cr_assert_eq(sq_model_write_random(dp, &p, &err), 0, "%s", err.msg);
    cr_assert_eq(sq_model_load(dp, &m.draft, &err), 0, "%s", err.msg);
    cr_assert_eq(sq_model_load(tp, &m.target, &err), 0, "%s", err.msg);
    free(tp);
    free(dp);
    return m;
}

static void models_free(models *m)
{
    sq_model_free(m->draft);
    sq_model_free(m->target);
    tu_rmtree(m->dir);
    free(m->dir);
}

static sq_plan *plan_of(const int *parent, int n)
{
    int rank[64] = {0}, cnt[64] = {0};
    for (int i = 1; i < n; i++)
        rank[i] = ++cnt[parent[i]];
    sq_tree *t;
    sq_error err = {0};
    cr_assert_eq(sq_tree_from_parents(parent, rank, n, &t, "test", &err), 0, "%s", err.msg);
    const double p[4] = {0.5, 0.2, 0.1, 0.05};
    sq_curve c = {0};
    cr_assert_eq(sq_curve_init(&c, "test", "stochastic", p, 4, &err), 0, "%s", err.msg);
    sq_plan *plan;
    cr_assert_eq(sq_plan_new(t, &c, 0, 0, 0, &plan, &err), 0, "%s", err.msg);
    sq_curve_clear(&c);
    return plan;
}

typedef struct mode_cfg {
    sq_mode mode;
    double  temperature, top_p;
} mode_cfg;

static const mode_cfg MODES[] = {
    {SQ_MODE_GREEDY, 0.0, 1.0},     {SQ_MODE_STOCHASTIC, 1.0, 1.0},
    {SQ_MODE_STOCHASTIC, 0.7, 0.9}, {SQ_MODE_SPECINFER, 1.0, 1.0},
    {SQ_MODE_TOPK, 1.2, 1.0},
};
#define NMODES ((int)(sizeof MODES / sizeof *MODES))

static sq_specdec_params params_of(const mode_cfg *c, uint64_t seed)
{
    sq_specdec_params p = sq_specdec_default_params();
    p.mode = c->mode;
    p.temperature = c->temperature;
    p.top_p = c->top_p;
    p.seed = seed;
    p.threads = 1;
    return p;
}

static sq_specdec *decoder(const models *m, const sq_plan *plan, const mode_cfg *c,
                           uint64_t seed)
{
    sq_specdec_params p = params_of(c, seed);
    sq_specdec *sd;
    sq_error err = {0};
    cr_assert_eq(sq_specdec_new(m->draft, m->target, plan, &p, "plan.json", &sd, &err), 0, "%s",
                 err.msg);
    return sd;
}

enum { NEW = 24 };

typedef struct run_out {
    int32_t      tok[NEW];
    int          steps;
    int          step_tokens[NEW];
    sq_step_info info[NEW];
} run_out;

static void run_clear(run_out *r)
{
    for (int i = 0; i < NEW; i++)
        sq_step_info_clear(&r->info[i]);
}

/* Same tokens, steps and per-step infos (what the verifier saw at every visit). */
static void assert_same_run(const run_out *a, const run_out *b, const char *what)
{
    cr_assert_eq(a->steps, b->steps, "%s: %d steps vs %d", what, a->steps, b->steps);
    for (int i = 0; i < NEW; i++)
        cr_assert_eq(a->tok[i], b->tok[i], "%s: token %d: %d vs %d", what, i, a->tok[i],
                     b->tok[i]);
    for (int s = 0; s < a->steps; s++) {
        const sq_step_info *x = &a->info[s], *y = &b->info[s];
        cr_assert_eq(x->tokens, y->tokens, "%s: step %d: tokens", what, s);
        cr_assert_eq(x->visits, y->visits, "%s: step %d: visits", what, s);
        cr_assert_eq(x->nodes, y->nodes, "%s: step %d: nodes %d vs %d", what, s, x->nodes,
                     y->nodes);
        for (int v = 0; v < x->visits; v++) {
            cr_assert_eq(x->visit_children[v], y->visit_children[v], "%s: step %d visit %d",
                         what, s, v);
            cr_assert_eq(x->visit_rank[v], y->visit_rank[v], "%s: step %d visit %d: rank", what,
                         s, v);
        }
    }
}

static void generate(sq_specdec *sd, const int32_t *prompt, int n, run_out *r)
{
    sq_error err = {0};
    memset(r, 0, sizeof *r);
    cr_assert_eq(sq_specdec_generate(sd, prompt, n, NEW, r->tok, r->step_tokens, &r->steps,
                                     r->info, &err), 0, "%s", err.msg);
}

/* ---- single = batch of one ------------------------------------------------------------------ */

Test(specdec, single_equals_a_batch_of_one_in_every_mode)
{
    models m = models_new(40);
    const int chain[] = {-1, 0, 1, 2, 3}, star[] = {-1, 0, 0, 0, 0, 0};
    const int tree[] = {-1, 0, 0, 0, 1, 1, 2, 4, 4, 5, 7, 7}, root[] = {-1};
    const int *parents[] = {chain, star, tree, root};
    const int sizes[] = {5, 6, 12, 1};
    const int32_t prompt[] = {1, 2, 3, 4, 5};
    for (int pi = 0; pi < 4; pi++) {
        sq_plan *plan = plan_of(parents[pi], sizes[pi]);
        for (int mi = 0; mi < NMODES; mi++) {
            char what[64];
            snprintf(what, sizeof what, "plan %d, %s T=%.1f", pi, sq_mode_name(MODES[mi].mode),
                     MODES[mi].temperature);
            sq_specdec *sd = decoder(&m, plan, &MODES[mi], 7);
            static run_out alone, batch, group;
            generate(sd, prompt, 5, &alone);

            /* the batch of one, seeded alike */
            sq_specdec_params p = params_of(&MODES[mi], 7);
            sq_specdec_batch *bt;
            sq_error err = {0};
            cr_assert_eq(sq_specdec_batch_new(m.draft, m.target, plan, &p, "plan.json", 1, &bt,
                                              &err), 0, "%s", err.msg);
            memset(&batch, 0, sizeof batch);
            const int32_t *prompts[1] = {prompt};
            const int plen[1] = {5};
            int32_t *outs[1] = {batch.tok};
            int bsteps;
            cr_assert_eq(sq_specdec_batch_generate(bt, prompts, plen, NEW, outs, &batch.steps,
                                                   &bsteps, batch.info, &err), 0, "%s", err.msg);
            cr_assert_eq(bsteps, batch.steps);
            assert_same_run(&alone, &batch, what);

            /* stepping by hand: sq_specdec_step and the group of one */
            sq_specdec_seed(sd, 7);
            cr_assert_eq(sq_specdec_start(sd, prompt, 5, &err), 0, "%s", err.msg);
            memset(&group, 0, sizeof group);
            for (int got = 0; got < NEW; group.steps++) {
                int32_t buf[8];
                int32_t *bp = buf;
                int nt;
                cr_assert_eq(sq_specdec_step_group(&sd, 1, NULL, &bp, &nt,
                                                   &group.info[group.steps], &err), 0, "%s",
                             err.msg);
                cr_assert_eq(nt, group.info[group.steps].tokens);
                for (int i = 0; i < nt && got < NEW; i++)
                    group.tok[got++] = buf[i];
            }
            assert_same_run(&alone, &group, what);

            /* the steps of a batch are timed as a single step's */
            for (int s = 0; s < batch.steps; s++) {
                const sq_step_info *in = &batch.info[s];
                cr_assert_eq(in->nodes, sizes[pi]);
                cr_assert(in->draft_forward_ms >= 0 && in->draft_forward_ms <= in->draft_ms);
                cr_assert(in->target_forward_ms > 0 && in->target_forward_ms <= in->target_ms);
                cr_assert(in->commit_ms >= 0 && in->verify_ms >= 0);
                cr_assert(in->step_ms >= in->draft_ms + in->target_ms + in->verify_ms +
                                             in->commit_ms - 1e-9, "%s: step %d", what, s);
                if (sizes[pi] > 1)
                    cr_assert(in->draft_forward_ms > 0, "%s: the draft ran", what);
            }

            /* the distribution validation: the single one is the batch of one */
            if (MODES[mi].mode != SQ_MODE_GREEDY && pi == 2) {
                sq_validation v1 = {0}, vb = {0};
                cr_assert_eq(sq_validate_distribution(sd, 3, 120, prompt, 2, &v1, NULL, NULL,
                                                      &err), 0, "%s", err.msg);
                cr_assert_eq(sq_validate_distribution_batch(bt, 3, 120, prompts, (int[]){2}, &vb,
                                                            NULL, NULL, &err), 0, "%s",
                             err.msg);
                cr_assert_eq(v1.seeds, 120);
                cr_assert_eq(vb.seeds, 120);
                cr_assert_eq(v1.first.p_value, vb.first.p_value, "%s", what);
                cr_assert_eq(v1.pair.p_value, vb.pair.p_value, "%s", what);
                cr_assert_eq(v1.first.stat, vb.first.stat, "%s", what);
                cr_assert_eq(v1.dist_ok, vb.dist_ok);
                cr_assert_eq(vb.dist_groups, 1);
            }
            run_clear(&alone);
            run_clear(&batch);
            run_clear(&group);
            sq_specdec_batch_free(bt);
            sq_specdec_free(sd);
        }
        sq_plan_free(plan);
    }
    models_free(&m);
}

/* A batch of 3 on one prompt: each member equals the single decoder seeded as the member is. */
Test(specdec, batch_members_equal_single_decoders_seeded_alike)
{
    models m = models_new(40);
    const int tree[] = {-1, 0, 0, 0, 1, 1, 2, 4, 4, 5, 7, 7};
    sq_plan *plan = plan_of(tree, 12);
    const int32_t p0[] = {3, 1, 4, 1}, p1[] = {5}, p2[] = {9, 2, 6};
    const int32_t *prompts[3] = {p0, p1, p2};
    const int plen[3] = {4, 1, 3};
    for (int mi = 0; mi < NMODES; mi++) {
        sq_specdec_params p = params_of(&MODES[mi], 11);
        sq_specdec_batch *bt;
        sq_error err = {0};
        cr_assert_eq(sq_specdec_batch_new(m.draft, m.target, plan, &p, "plan.json", 3, &bt,
                                          &err), 0, "%s", err.msg);
        static int32_t got[3][NEW];
        int32_t *outs[3] = {got[0], got[1], got[2]};
        int steps[3], bsteps;
        cr_assert_eq(sq_specdec_batch_generate(bt, prompts, plen, NEW, outs, steps, &bsteps, NULL,
                                               &err), 0, "%s", err.msg);
        for (int k = 0; k < 3; k++) {
            sq_specdec *sd = decoder(&m, plan, &MODES[mi], sq_specdec_batch_seed_of(11, k));
            static run_out r;
            generate(sd, prompts[k], plen[k], &r);
            cr_assert_eq(r.steps, steps[k], "%s sequence %d", sq_mode_name(MODES[mi].mode), k);
            for (int i = 0; i < NEW; i++)
                cr_assert_eq(r.tok[i], got[k][i], "%s sequence %d token %d",
                             sq_mode_name(MODES[mi].mode), k, i);
            run_clear(&r);
            sq_specdec_free(sd);
        }
        sq_specdec_batch_free(bt);
    }
    sq_plan_free(plan);
    models_free(&m);
}

/* A group of two decoders with plans of different shapes and depths, stepped by hand: each
 * equals its run alone. */
Test(specdec, a_group_of_decoders_with_different_plans_equals_them_alone)
{
    models m = models_new(40);
    const int chain[] = {-1, 0, 1, 2, 3}, star[] = {-1, 0, 0, 0, 0, 0};
    sq_plan *pa = plan_of(chain, 5), *pb = plan_of(star, 6);
    const int32_t prompt[] = {2, 7, 1};
    for (int mi = 0; mi < NMODES; mi++) {
        sq_specdec *g[2] = {decoder(&m, pa, &MODES[mi], 3), decoder(&m, pb, &MODES[mi], 4)};
        sq_specdec *alone[2] = {decoder(&m, pa, &MODES[mi], 3), decoder(&m, pb, &MODES[mi], 4)};
        static run_out r[2];
        generate(alone[0], prompt, 3, &r[0]);
        generate(alone[1], prompt, 3, &r[1]);
        sq_error err = {0};
        int32_t got[2][NEW + 8], b0[8], b1[8];
        int32_t *outs[2] = {b0, b1};
        int n[2] = {0, 0}, active[2] = {1, 1}, ntok[2];
        for (int k = 0; k < 2; k++)
            cr_assert_eq(sq_specdec_start(g[k], prompt, 3, &err), 0, "%s", err.msg);
        while (active[0] || active[1]) {
            cr_assert_eq(sq_specdec_step_group(g, 2, active, outs, ntok, NULL, &err), 0, "%s",
                         err.msg);
            for (int k = 0; k < 2; k++) {
                for (int i = 0; i < ntok[k]; i++)
                    got[k][n[k]++] = outs[k][i];
                active[k] = n[k] < NEW;
            }
        }
        for (int k = 0; k < 2; k++) {
            for (int i = 0; i < NEW; i++)
                cr_assert_eq(got[k][i], r[k].tok[i], "%s decoder %d token %d",
                             sq_mode_name(MODES[mi].mode), k, i);
            run_clear(&r[k]);
            sq_specdec_free(g[k]);
            sq_specdec_free(alone[k]);
        }
    }
    sq_plan_free(pa);
    sq_plan_free(pb);
    models_free(&m);
}

/* ---- the grow hook -------------------------------------------------------------------------- */

/* Gives the root `root_children` children and every other expanded node one child, proposed by
 * the plan's rule (sq_verifier_propose from the node's Q), expanding down to `levels` levels;
 * records score(child) = score(parent) + 1 and checks it reads back. */
typedef struct fork_hook {
    int root_children, levels;
    int calls, bad_scores;
} fork_hook;

static int fork_grow(sq_tree_grow *g, int level, void *user, sq_error *err)
{
    fork_hook *h = user;
    h->calls++;
    const sq_specdec_params *p = sq_tree_grow_params(g);
    int first, cnt = sq_tree_grow_level(g, level, &first);
    for (int u = first; u < first + cnt; u++) {
        if (sq_tree_grow_score(g, u) != level)
            h->bad_scores++;
        if (!sq_tree_grow_expanded(g, u))
            continue;
        int k = level == 0 ? h->root_children : 1;
        sq_tree_children ch;
        int rc = sq_tree_grow_add(g, u, k, &ch, err);
        if (rc)
            return rc;
        const double *q = sq_mode_is_sampled(p->mode) ? sq_tree_grow_probs(g, u) : NULL;
        sq_verifier_propose(sq_tree_grow_verifier(g), q, sq_tree_grow_logits(g, u), k,
                            ch.tokens);
        for (int j = 0; j < k; j++) {
            ch.scores[j] = sq_tree_grow_score(g, u) + 1.0;
            ch.expand[j] = level + 2 < h->levels;
        }
    }
    return SQ_OK;
}

static void hook_equals_plan(int root_children, int levels, const int *parent, int n)
{
    models m = models_new(40);
    const int tree[] = {-1, 0, 0, 0, 1, 1, 2, 4, 4, 5, 7, 7};   /* 12 nodes, 5 levels */
    sq_plan *room = plan_of(tree, 12), *shape = plan_of(parent, n);
    const int32_t prompt[] = {7, 3, 9};
    for (int mi = 0; mi < NMODES; mi++) {
        sq_specdec *byplan = decoder(&m, shape, &MODES[mi], 5);
        sq_specdec *byhook = decoder(&m, room, &MODES[mi], 5);
        fork_hook h = {root_children, levels, 0, 0};
        sq_specdec_set_grow(byhook, fork_grow, &h);
        static run_out a, b;
        generate(byplan, prompt, 3, &a);
        generate(byhook, prompt, 3, &b);
        assert_same_run(&a, &b, sq_mode_name(MODES[mi].mode));
        for (int s = 0; s < b.steps; s++)
            cr_assert_eq(b.info[s].nodes, n, "the hook's tree has %d nodes", n);
        cr_assert_eq(h.calls, b.steps * (levels - 1), "the hook is called once per level");
        cr_assert_eq(h.bad_scores, 0, "scores read back as recorded");
        /* back to the plan's rule: the 12-node tree again */
        sq_specdec_set_grow(byhook, NULL, NULL);
        int32_t out[8];
        sq_step_info info = {0};
        sq_error err = {0};
        cr_assert_eq(sq_specdec_start(byhook, prompt, 3, &err), 0, "%s", err.msg);
        cr_assert_eq(sq_specdec_step(byhook, out, &info, &err), 0, "%s", err.msg);
        cr_assert_eq(info.nodes, 12);
        sq_step_info_clear(&info);
        run_clear(&a);
        run_clear(&b);
        sq_specdec_free(byplan);
        sq_specdec_free(byhook);
    }
    sq_plan_free(room);
    sq_plan_free(shape);
    models_free(&m);
}

Test(specdec, a_chain_hook_equals_the_chain_plan_in_every_mode)
{
    const int chain[] = {-1, 0, 1, 2, 3};
    hook_equals_plan(1, 5, chain, 5);
}

Test(specdec, a_hook_that_forks_at_the_root_equals_the_plan_of_that_shape)
{
    const int fork[] = {-1, 0, 0, 1, 2, 3, 4};
    hook_equals_plan(2, 4, fork, 7);
}

/* A batch whose members grow by a hook equals the members alone. */
Test(specdec, a_batch_with_a_hook_equals_its_members_alone)
{
    models m = models_new(40);
    const int tree[] = {-1, 0, 0, 0, 1, 1, 2, 4, 4, 5, 7, 7};
    sq_plan *plan = plan_of(tree, 12);
    const int32_t p0[] = {3, 1, 4, 1}, p1[] = {5};
    const int32_t *prompts[2] = {p0, p1};
    const int plen[2] = {4, 1};
    const mode_cfg *c = &MODES[1];
    sq_specdec_params p = params_of(c, 2);
    sq_specdec_batch *bt;
    sq_error err = {0};
    cr_assert_eq(sq_specdec_batch_new(m.draft, m.target, plan, &p, "plan.json", 2, &bt, &err), 0,
                 "%s", err.msg);
    fork_hook hb = {3, 4, 0, 0};
    sq_specdec_batch_set_grow(bt, fork_grow, &hb);
    static int32_t got[2][NEW];
    int32_t *outs[2] = {got[0], got[1]};
    int steps[2], bsteps;
    cr_assert_eq(sq_specdec_batch_generate(bt, prompts, plen, NEW, outs, steps, &bsteps, NULL,
                                           &err), 0, "%s", err.msg);
    for (int k = 0; k < 2; k++) {
        sq_specdec *sd = decoder(&m, plan, c, sq_specdec_batch_seed_of(2, k));
        fork_hook h = {3, 4, 0, 0};
        sq_specdec_set_grow(sd, fork_grow, &h);
        static run_out r;
        generate(sd, prompts[k], plen[k], &r);
        cr_assert_eq(r.steps, steps[k]);
        for (int i = 0; i < NEW; i++)
            cr_assert_eq(r.tok[i], got[k][i], "sequence %d token %d", k, i);
        for (int s = 0; s < r.steps; s++)
            cr_assert_eq(r.info[s].nodes, 10, "1 + 3 + 3 + 3 nodes");
        run_clear(&r);
        sq_specdec_free(sd);
    }
    sq_specdec_batch_free(bt);
    sq_plan_free(plan);
    models_free(&m);
}

/* Misuse of sq_tree_grow_add, one kind per call. */
static int bad_grow(sq_tree_grow *g, int level, void *user, sq_error *err)
{
    int kind = *(int *)user;
    sq_tree_children ch;
    int rc;
    switch (kind) {
    case 0:   /* a node twice */
        if ((rc = sq_tree_grow_add(g, 0, 1, &ch, err)))
            return rc;
        ch.tokens[0] = 1;
        return sq_tree_grow_add(g, 0, 1, &ch, err);
    case 1:   /* children for a node the draft did not read */
        if (level == 0) {
            if ((rc = sq_tree_grow_add(g, 0, 2, &ch, err)))
                return rc;
            ch.tokens[0] = ch.tokens[1] = 1;
            ch.expand[0] = 1;
            return SQ_OK;
        }
        return sq_tree_grow_add(g, 2, 1, &ch, err);
    case 2:   /* past the plan's node count */
        return sq_tree_grow_add(g, 0, sq_tree_grow_capacity(g), &ch, err);
    case 3:   /* a token left unset */
        return sq_tree_grow_add(g, 0, 1, &ch, err);
    default:  /* a node of another level */
        return sq_tree_grow_add(g, 1, 1, &ch, err);
    }
}

Test(specdec, a_hook_that_breaks_the_rules_fails_the_step_with_a_message)
{
    models m = models_new(40);
    const int tree[] = {-1, 0, 0, 0, 1, 1, 2, 4, 4, 5, 7, 7};
    sq_plan *plan = plan_of(tree, 12);
    const char *want[] = {"once each", "not read by the draft", "more than the plan's 12",
                          "outside the vocabulary", "not on the level"};
    const int32_t prompt[] = {1, 2};
    for (int kind = 0; kind < 5; kind++) {
        sq_specdec *sd = decoder(&m, plan, &MODES[0], 1);
        sq_specdec_set_grow(sd, bad_grow, &kind);
        sq_error err = {0};
        int32_t out[8];
        cr_assert_eq(sq_specdec_start(sd, prompt, 2, &err), 0, "%s", err.msg);
        cr_assert_eq(sq_specdec_step(sd, out, NULL, &err), SQ_EUSAGE, "kind %d", kind);
        cr_assert(strstr(err.msg, "grow hook") && strstr(err.msg, want[kind]), "kind %d: %s",
                  kind, err.msg);
        /* the decoder starts again cleanly with the plan's rule */
        sq_specdec_set_grow(sd, NULL, NULL);
        err = (sq_error){0};
        cr_assert_eq(sq_specdec_start(sd, prompt, 2, &err), 0, "%s", err.msg);
        cr_assert_eq(sq_specdec_step(sd, out, NULL, &err), 0, "%s", err.msg);
        sq_specdec_free(sd);
    }
    sq_plan_free(plan);
    models_free(&m);
}

/* ---- prefill and the vocabulary check --------------------------------------------------------- */

Test(specdec, prefill_in_chunks_reads_what_one_causal_forward_reads)
{
    models m = models_new(40);
    enum { N = 11, V = 40 };
    sq_context_params cp = sq_context_default_params();
    cp.max_context = 64;
    cp.max_pending = 16;
    cp.threads = 1;
    sq_context *a, *b;
    sq_error err = {0};
    cr_assert_eq(sq_context_new(m.target, &cp, &a, &err), 0, "%s", err.msg);
    cr_assert_eq(sq_context_new(m.target, &cp, &b, &err), 0, "%s", err.msg);
    int32_t tok[N + 1], pos[N + 1];
    for (int i = 0; i < N + 1; i++) {
        tok[i] = (int32_t)((i * 7 + 3) % V);
        pos[i] = i;
    }
    /* a: chunks of 4 (the last one 3 long); b: one causal forward of all */
    static float last[V], all[N * V], next_a[V], next_b[V];
    cr_assert_eq(sq_prefill(a, tok, N, 4, last, &err), 0, "%s", err.msg);
    cr_assert_eq(sq_context_committed(a), N);
    cr_assert_eq(sq_context_pending(a), 0);
    uint8_t mask[N * N];
    sq_causal_mask(mask, N);
    for (int i = 0; i < N; i++)
        for (int j = 0; j < N; j++)
            cr_assert_eq(mask[i * N + j], j <= i);
    cr_assert_eq(sq_context_forward(b, tok, pos, mask, N, all, &err), 0, "%s", err.msg);
    for (int x = 0; x < V; x++)
        cr_assert_float_eq(last[x], all[(N - 1) * V + x], 1e-4, "last logits, token %d", x);
    int32_t keep[N];
    for (int i = 0; i < N; i++)
        keep[i] = i;
    cr_assert_eq(sq_context_commit(b, keep, N, &err), 0, "%s", err.msg);
    /* sq_forward_causal: the same forward, every row, committed */
    sq_context *c;
    static float rows[N * V];
    cr_assert_eq(sq_context_new(m.target, &cp, &c, &err), 0, "%s", err.msg);
    cr_assert_eq(sq_forward_causal(c, tok, N, rows, &err), 0, "%s", err.msg);
    cr_assert_eq(sq_context_committed(c), N);
    for (int x = 0; x < N * V; x++)
        cr_assert_float_eq(rows[x], all[x], 1e-6, "row %d token %d", x / V, x % V);
    cr_assert_eq(sq_forward_causal(c, tok, 17, rows, &err), SQ_EUSAGE, "past max_pending");
    sq_context_free(c);
    err = (sq_error){0};
    /* both caches read on alike */
    uint8_t one = 1;
    cr_assert_eq(sq_context_forward(a, tok + N, pos + N, &one, 1, next_a, &err), 0);
    cr_assert_eq(sq_context_forward(b, tok + N, pos + N, &one, 1, next_b, &err), 0);
    for (int x = 0; x < V; x++)
        cr_assert_float_eq(next_a[x], next_b[x], 1e-4);
    /* pending tokens: refused; a chunk above max_pending: max_pending */
    cr_assert_eq(sq_prefill(a, tok, 2, 4, NULL, &err), SQ_EUSAGE);
    cr_assert(strstr(err.msg, "pending"), "%s", err.msg);
    sq_context_reset(a);
    err = (sq_error){0};
    cr_assert_eq(sq_prefill(a, tok, N, 1000, NULL, &err), 0, "%s", err.msg);
    cr_assert_eq(sq_context_committed(a), N);
    cr_assert_eq(sq_prefill(a, tok, 0, 4, NULL, &err), 0, "n = 0 does nothing");
    cr_assert_eq(sq_context_committed(a), N);
    sq_context_free(a);
    sq_context_free(b);
    models_free(&m);
}

Test(specdec, the_vocabulary_check_names_the_draft_and_the_target)
{
    models m = models_new(40), o = models_new(41);
    sq_error err = {0};
    cr_assert_eq(sq_models_check_vocab(m.draft, m.target, "d", "t", 0, NULL, &err), 0);
    cr_assert_eq(sq_models_check_vocab(o.draft, m.target, "/x/draft", "/x/target", 0, NULL, &err),
                 SQ_EDATA);
    cr_assert_str_eq(err.msg, "/x/draft/config.json: vocab_size: 41 differs from "
                              "/x/target/config.json's 40 by more than padding (without a "
                              "tokenizer.json, the larger must be a multiple of 64 and the gap "
                              "at most max(128, 1% of it))");
    err = (sq_error){0};
    cr_assert_eq(sq_models_check_vocab(o.draft, m.target, NULL, NULL, 0, NULL, &err), SQ_EDATA);
    cr_assert_str_eq(err.msg, "the draft's config.json: vocab_size: 41 differs from the "
                              "target's config.json's 40 by more than padding (without a "
                              "tokenizer.json, the larger must be a multiple of 64 and the gap "
                              "at most max(128, 1% of it))");
    /* the decoder refuses the pair with the same message */
    const int chain[] = {-1, 0};
    sq_plan *plan = plan_of(chain, 2);
    sq_specdec_params p = params_of(&MODES[0], 1);
    sq_specdec *sd = NULL;
    err = (sq_error){0};
    cr_assert_eq(sq_specdec_new(o.draft, m.target, plan, &p, "plan.json", &sd, &err), SQ_EDATA);
    cr_assert_null(sd);
    cr_assert(strstr(err.msg, "vocab_size: 41 differs from the target's config.json's 40"), "%s",
              err.msg);
    sq_plan_free(plan);
    models_free(&m);
    models_free(&o);
}

/* The finiteness check of every logit row (sq_logits_check_finite, which counts in blocks of 64
 * before it searches) names the first NaN or infinity of the row, as a value-by-value search
 * does: rows of 1 to 300 values, none, one or several bad values anywhere (block edges and the
 * tail included). */
Test(specdec, the_finiteness_check_names_the_first_bad_logit)
{
    unsigned seed = 7;
    float row[300];
    for (int trial = 0; trial < 4000; trial++) {
        seed = seed * 1103515245u + 12345u;
        int V = 1 + (int)(seed >> 8) % 300;
        for (int i = 0; i < V; i++)
            row[i] = (float)i * 0.25f - 30.0f;
        int bad = (int)(seed >> 4) % 4;   /* how many */
        for (int b = 0; b < bad; b++) {
            seed = seed * 1103515245u + 12345u;
            int at = (int)(seed >> 8) % V;
            row[at] = b % 3 == 0 ? NAN : b % 3 == 1 ? INFINITY : -INFINITY;
        }
        int first = -1;
        for (int i = 0; i < V && first < 0; i++)
            if (!isfinite(row[i]))
                first = i;
        sq_error err = {0};
        int rc = sq_logits_check_finite("draft", row, V, 11, &err);
        if (first < 0) {
            cr_assert_eq(rc, SQ_OK, "trial %d, V %d: %s", trial, V, err.msg);
            continue;
        }
        cr_assert_eq(rc, SQ_EDATA, "trial %d, V %d: the bad logit at %d passed", trial, V, first);
        char want[128];
        snprintf(want, sizeof want, "the draft's logit of token %d at position 11 is %s", first,
                 isnan(row[first]) ? "NaN" : "infinite");
        cr_assert(strstr(err.msg, want), "trial %d: %s (want %s)", trial, err.msg, want);
    }
}
