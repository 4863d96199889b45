/* The engines' dynamic trees executed (runtime/dyntree.h, issue 26): each step's verified tree
 * equals a brute-force oracle written from the engines' description (every top-K path of a
 * small random draft enumerated and scored by its path product, K kept per level, the N - 1
 * best of all candidates), for SGLang and TensorRT-LLM and several envelopes; greedy output
 * equals target-only greedy decoding on the shipped pair; the target-only sampling rule (topk)
 * and Sequoia's verifier on the engines' shape (stochastic) are lossless (chi-square); a batch
 * decodes what its members decode alone; bad envelopes are refused naming the rule and the
 * engine; the report's "dynamic" key is consistent with its tokens per step; a prune hook that
 * breaks the ancestor rule is refused. */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "libsequoia/base/stats.h"
#include "libsequoia/format/plan.h"
#include "runtime/dyntree.h"
#include "runtime/model.h"
#include "runtime/prefill.h"
#include "runtime/specdec.h"
#include "runtime/st_writer.h"
#include "runtime/validate.h"
#include "tests/testutil.h"

#define P_MIN 0.001

static sq_model *load(const char *path)
{
    sq_model *m;
    sq_error err = {0};
    cr_assert_eq(sq_model_load(path, &m, &err), 0, "%s", err.msg);
    return m;
}

/* A random pair of `vocab` tokens in dir: the target of `tl` layers, the draft its first layer
 * (same seed) when `related`, else a model of its own. */
static void write_pair(const char *dir, int vocab, int tl, int related, sq_model **draft,
                       sq_model **target)
{
    char *tp = tu_path(dir, "target"), *dp = tu_path(dir, "draft");
    sq_random_model_params p = sq_random_model_default_params();
    p.config.vocab_size = vocab;
    p.config.n_layers = tl;
    p.seed = 21;
    sq_error err = {0};
    cr_assert_eq(sq_model_write_random(tp, &p, &err), 0, "%s", err.msg);
    p.config.n_layers = 1;
    if (!related)
        p.seed = 22;
    cr_assert_eq(sq_model_write_random(dp, &p, &err), 0, "%s", err.msg);
    *draft = load(dp);
    *target = load(tp);
    free(tp);
    free(dp);
}

static sq_specdec *dyn_decoder(const sq_model *d, const sq_model *t, sq_dyn_engine e, int L,
                               int K, int N, sq_mode mode, double temp, uint64_t seed,
                               sq_dyntree **dt)
{
    sq_error err = {0};
    sq_plan *plan;
    cr_assert_eq(sq_dyntree_plan(L, K, &plan, &err), 0, "%s", err.msg);
    sq_specdec_params prm = sq_specdec_default_params();
    prm.mode = mode;
    prm.temperature = mode == SQ_MODE_GREEDY ? 0.0 : temp;
    prm.seed = seed;
    prm.threads = 1;
    prm.record_tree = 1;
    sq_specdec *sd;
    cr_assert_eq(sq_specdec_new(d, t, plan, &prm, "envelope", &sd, &err), 0, "%s", err.msg);
    sq_plan_free(plan);
    cr_assert_eq(sq_dyntree_new(e, L, K, N, sq_specdec_vocab(sd), dt, &err), 0, "%s", err.msg);
    sq_dyntree_attach(sd, *dt);
    return sd;
}

/* ---- the oracle ---------------------------------------------------------------------------- */

/* The draft's softmax at temperature 1 after ctx (n tokens), from a plain causal forward. */
static void draft_probs(sq_context *c, const int32_t *ctx, int n, int V, double *p)
{
    sq_error err = {0};
    float *lg = malloc((size_t)n * (size_t)V * sizeof *lg);
    sq_context_reset(c);
    cr_assert_eq(sq_forward_causal(c, ctx, n, lg, &err), 0, "%s", err.msg);
    const float *row = lg + (size_t)(n - 1) * V;
    double mx = -INFINITY, s = 0;
    for (int x = 0; x < V; x++)
        mx = row[x] > mx ? row[x] : mx;
    for (int x = 0; x < V; x++)
        s += p[x] = exp((double)row[x] - mx);
    for (int x = 0; x < V; x++)
        p[x] /= s;
    free(lg);
}

enum { MAXN = 512, MAXD = 8 };

/* A node of the oracle's full tree: its path of tokens below the root and its score. */
typedef struct onode {
    int32_t path[MAXD];
    int     len;
    double  score;
    int     kids[8];   /* indices of its K best children (full tree: every node expanded) */
} onode;

static int by_score(const void *a, const void *b)
{
    const onode *x = *(const onode *const *)a, *y = *(const onode *const *)b;
    return x->score < y->score ? 1 : x->score > y->score ? -1 : 0;
}

/* The engines' tree for envelope L,K,N after the sequence seq (n tokens, the root last), as the
 * engines describe it, from the full K-ary tree of the draft's best tokens: sel[0 .. N-2]
 * receives the chosen nodes (pointers into full). Returns the count. */
static int oracle(sq_context *c, const int32_t *seq, int n, int V, int L, int K, int N,
                  onode *full, const onode **sel)
{
    int32_t ctx[256];
    double *p = malloc((size_t)V * sizeof *p);
    memcpy(ctx, seq, (size_t)n * sizeof *ctx);
    /* the full tree, breadth-first: every node's K most probable children */
    int m = 1;
    full[0].len = 0;
    full[0].score = 1.0;
    for (int u = 0; u < m; u++) {
        if (full[u].len == L)
            continue;
        memcpy(ctx + n, full[u].path, (size_t)full[u].len * sizeof *ctx);
        draft_probs(c, ctx, n + full[u].len, V, p);
        for (int j = 0; j < K; j++) {   /* the j-th best token (ties: lower id) */
            int best = -1;
            for (int x = 0; x < V; x++) {
                int used = 0;
                for (int i = 0; i < j; i++)
                    used |= full[m - j + i].path[full[u].len] == x;
                if (!used && (best < 0 || p[x] > p[best]))
                    best = x;
            }
            cr_assert_lt(m, MAXN);
            onode *v = &full[m];
            memcpy(v->path, full[u].path, (size_t)full[u].len * sizeof *v->path);
            v->path[full[u].len] = best;
            v->len = full[u].len + 1;
            v->score = full[u].score * p[best];
            full[u].kids[j] = m++;
        }
    }
    /* the beam: level 1 all kept; each level's candidates are the kept nodes' children, the K
     * best of them kept; every candidate competes for the N - 1 places */
    const onode *cand[MAXN];
    int nc = 0;
    onode *kept[8], *next[64];
    int nk = K;
    for (int j = 0; j < K; j++) {
        kept[j] = &full[full[0].kids[j]];
        cand[nc++] = kept[j];
    }
    for (int l = 2; l <= L; l++) {
        int nn = 0;
        for (int i = 0; i < nk; i++)
            for (int j = 0; j < K; j++)
                cand[nc++] = next[nn++] = &full[kept[i]->kids[j]];
        qsort(next, (size_t)nn, sizeof *next, by_score);
        nk = K < nn ? K : nn;
        for (int i = 0; i < nk; i++)
            kept[i] = next[i];
    }
    qsort(cand, (size_t)nc, sizeof *cand, by_score);
    int take = N - 1 < nc ? N - 1 : nc;
    for (int i = 0; i < take; i++)
        sel[i] = cand[i];
    free(p);
    return take;
}

/* The path of node u of a recorded tree. */
static int rec_path(const sq_step_info *in, int u, int32_t *path)
{
    int len = 0;
    int32_t rev[MAXD + 1];
    for (int w = u; w > 0; w = in->tree_parent[w])
        rev[len++] = in->tree_token[w];
    for (int i = 0; i < len; i++)
        path[i] = rev[len - 1 - i];
    return len;
}

typedef struct env_case {
    sq_dyn_engine engine;
    int           L, K, N;
} env_case;

ParameterizedTestParameters(dyntree, each_step_is_the_oracles_tree)
{
    static env_case cases[] = {
        {SQ_DYN_SGLANG, 1, 3, 3},  {SQ_DYN_SGLANG, 2, 2, 5},  {SQ_DYN_SGLANG, 3, 3, 10},
        {SQ_DYN_SGLANG, 3, 3, 16}, {SQ_DYN_SGLANG, 4, 2, 9},  {SQ_DYN_SGLANG, 3, 4, 20},
        {SQ_DYN_SGLANG, 4, 1, 5},  {SQ_DYN_TRTLLM, 3, 3, 9},  {SQ_DYN_TRTLLM, 4, 2, 8},
        {SQ_DYN_TRTLLM, 2, 4, 8},  {SQ_DYN_TRTLLM, 5, 2, 6},  {SQ_DYN_TRTLLM, 3, 2, 4},
    };
    return cr_make_param_array(env_case, cases, sizeof cases / sizeof *cases);
}

ParameterizedTest(env_case *c, dyntree, each_step_is_the_oracles_tree)
{
    enum { V = 40, STEPS = 4 };
    char *dir = tu_tmpdir();
    sq_model *draft, *target;
    write_pair(dir, V, 2, 0, &draft, &target);
    sq_dyntree *dt;
    sq_specdec *sd = dyn_decoder(draft, target, c->engine, c->L, c->K, c->N, SQ_MODE_GREEDY, 0,
                                 1, &dt);
    sq_context_params cp = sq_context_default_params();
    cp.max_context = 256;
    cp.max_pending = 64;
    cp.threads = 1;
    sq_context *dc;
    sq_error err = {0};
    cr_assert_eq(sq_context_new(draft, &cp, &dc, &err), 0, "%s", err.msg);
    int32_t seq[128] = {3, 17, 5};
    int n = 3;
    cr_assert_eq(sq_specdec_start(sd, seq, n, &err), 0, "%s", err.msg);
    static onode full[MAXN];
    for (int s = 0; s < STEPS; s++) {
        int32_t out[MAXD + 2];
        sq_step_info in = {0};
        cr_assert_eq(sq_specdec_step(sd, out, &in, &err), 0, "%s", err.msg);
        const onode *sel[MAXN];
        int k = oracle(dc, seq, n, V, c->L, c->K, c->N, full, sel);
        cr_assert_eq(in.tree_n, k + 1, "step %d: %d nodes verified, the oracle's %d", s,
                     in.tree_n, k + 1);
        cr_assert_eq(in.nodes, in.tree_n);
        for (int u = 1; u < in.tree_n; u++) {
            int32_t path[MAXD + 1];
            int len = rec_path(&in, u, path), found = -1;
            for (int i = 0; i < k && found < 0; i++)
                if (sel[i]->len == len && !memcmp(sel[i]->path, path, (size_t)len * 4))
                    found = i;
            cr_assert_geq(found, 0, "step %d: node %d (depth %d) is not in the oracle's tree", s,
                          u, len);
            cr_assert_float_eq(in.tree_score[u], sel[found]->score, 1e-5 * sel[found]->score,
                               "step %d node %d: score %g, the oracle's %g", s, u,
                               in.tree_score[u], sel[found]->score);
            /* breadth-first, siblings in rank order (score descending) */
            int p = in.tree_parent[u];
            cr_assert_lt(p, u);
            if (u > 1 && in.tree_parent[u - 1] == p)
                cr_assert_geq(in.tree_score[u - 1], in.tree_score[u]);
        }
        cr_assert_eq(in.tree_accepted, in.tokens - 1);
        memcpy(seq + n, out, (size_t)in.tokens * sizeof *out);
        n += in.tokens;
        sq_step_info_clear(&in);
    }
    sq_context_free(dc);
    sq_specdec_free(sd);
    sq_dyntree_free(dt);
    sq_model_free(draft);
    sq_model_free(target);
    tu_rmtree(dir);
    free(dir);
}

/* Stochastic: the engines' shape from the rank scores (the parent's score times the draft's
 * j-th largest probability), the tokens drawn without replacement (distinct siblings). */
Test(dyntree, stochastic_keeps_the_rank_scores_shape)
{
    enum { V = 40 };
    char *dir = tu_tmpdir();
    sq_model *draft, *target;
    write_pair(dir, V, 2, 0, &draft, &target);
    sq_dyntree *dt;
    sq_specdec *sd = dyn_decoder(draft, target, SQ_DYN_SGLANG, 3, 3, 9, SQ_MODE_STOCHASTIC, 1.0,
                                 4, &dt);
    sq_context_params cp = sq_context_default_params();
    cp.max_context = 256;
    cp.max_pending = 64;
    cp.threads = 1;
    sq_context *dc;
    sq_error err = {0};
    cr_assert_eq(sq_context_new(draft, &cp, &dc, &err), 0, "%s", err.msg);
    int32_t seq[128] = {3, 17, 5}, ctx[140];
    int n = 3;
    double p[V];
    cr_assert_eq(sq_specdec_start(sd, seq, n, &err), 0, "%s", err.msg);
    for (int s = 0; s < 4; s++) {
        int32_t out[8];
        sq_step_info in = {0};
        cr_assert_eq(sq_specdec_step(sd, out, &in, &err), 0, "%s", err.msg);
        cr_assert_eq(in.tree_n, 9);
        for (int u = 0; u < in.tree_n; u++) {
            int kids[8], nk = 0;
            for (int v = u + 1; v < in.tree_n; v++)
                if (in.tree_parent[v] == u)
                    kids[nk++] = v;
            if (!nk)
                continue;
            int32_t path[8];
            int len = rec_path(&in, u, path);
            memcpy(ctx, seq, (size_t)n * sizeof *ctx);
            memcpy(ctx + n, path, (size_t)len * sizeof *ctx);
            draft_probs(dc, ctx, n + len, V, p);
            double sorted[V];
            memcpy(sorted, p, sizeof sorted);
            for (int i = 0; i < V; i++)   /* descending */
                for (int j = i + 1; j < V; j++)
                    if (sorted[j] > sorted[i]) {
                        double t = sorted[i];
                        sorted[i] = sorted[j];
                        sorted[j] = t;
                    }
            double ps = u == 0 ? 1.0 : in.tree_score[u];
            for (int j = 0; j < nk; j++) {
                cr_assert_float_eq(in.tree_score[kids[j]], ps * sorted[j], 1e-5 * ps,
                                   "step %d node %d child %d", s, u, j);
                for (int i = 0; i < j; i++)
                    cr_assert_neq(in.tree_token[kids[i]], in.tree_token[kids[j]]);
            }
        }
        memcpy(seq + n, out, (size_t)in.tokens * sizeof *out);
        n += in.tokens;
        sq_step_info_clear(&in);
    }
    sq_context_free(dc);
    sq_specdec_free(sd);
    sq_dyntree_free(dt);
    sq_model_free(draft);
    sq_model_free(target);
    tu_rmtree(dir);
    free(dir);
}

/* ---- greedy on the shipped pair ------------------------------------------------------------- */

Test(dyntree, greedy_equals_target_greedy_on_the_shipped_pair)
{
    char *dp = tu_source_path("data/models/draft"), *tp = tu_source_path("data/models/target");
    sq_model *draft = load(dp), *target = load(tp);
    static const env_case envs[] = {
        {SQ_DYN_SGLANG, 4, 1, 5},  {SQ_DYN_SGLANG, 3, 4, 8},  {SQ_DYN_SGLANG, 5, 4, 16},
        {SQ_DYN_SGLANG, 3, 8, 40}, {SQ_DYN_TRTLLM, 8, 8, 64}, {SQ_DYN_TRTLLM, 6, 2, 10},
    };
    enum { NEW = 96 };
    const int32_t prompt[] = {84, 104, 101, 32, 113, 117, 105, 99, 107, 32};
    int32_t ar[NEW];
    sq_error err = {0};
    for (size_t i = 0; i < sizeof envs / sizeof *envs; i++) {
        const env_case *e = &envs[i];
        sq_dyntree *dt;
        sq_specdec *sd = dyn_decoder(draft, target, e->engine, e->L, e->K, e->N, SQ_MODE_GREEDY,
                                     0, 0, &dt);
        if (i == 0)
            cr_assert_eq(sq_specdec_autoregressive(sd, prompt, 10, NEW, 0, ar, &err), 0, "%s",
                         err.msg);
        int32_t spec[NEW];
        int st[NEW], steps;
        cr_assert_eq(sq_specdec_generate(sd, prompt, 10, NEW, spec, st, &steps, NULL, &err), 0,
                     "%s", err.msg);
        for (int j = 0; j < NEW; j++)
            cr_assert_eq(spec[j], ar[j], "%s %d,%d,%d: token %d differs from target-only greedy",
                         sq_dyn_engine_name(e->engine), e->L, e->K, e->N, j);
        cr_assert_lt(steps, NEW, "the tree accepts something");
        for (int s = 0; s < steps; s++)
            cr_assert_leq(st[s], e->L + 1);
        sq_specdec_free(sd);
        sq_dyntree_free(dt);
    }
    sq_model_free(draft);
    sq_model_free(target);
    free(dp);
    free(tp);
}

/* ---- losslessness ---------------------------------------------------------------------------- */

typedef struct loss_case {
    sq_mode mode;
    double  temperature;
    int     L, K, N;
} loss_case;

ParameterizedTestParameters(dyntree, sampled_modes_are_lossless_on_the_first_two_tokens)
{
    static loss_case cases[] = {
        {SQ_MODE_TOPK, 1.0, 3, 3, 7},       {SQ_MODE_TOPK, 0.5, 2, 4, 6},
        {SQ_MODE_STOCHASTIC, 1.0, 3, 3, 7}, {SQ_MODE_STOCHASTIC, 0.5, 2, 4, 6},
        {SQ_MODE_STOCHASTIC, 1.0, 3, 2, 5},
    };
    return cr_make_param_array(loss_case, cases, sizeof cases / sizeof *cases);
}

ParameterizedTest(loss_case *c, dyntree, sampled_modes_are_lossless_on_the_first_two_tokens)
{
    enum { V = 12, R = 3000 };
    char *dir = tu_tmpdir();
    sq_model *draft, *target;
    write_pair(dir, V, 3, 1, &draft, &target);
    sq_dyntree *dt;
    sq_specdec *sd = dyn_decoder(draft, target, SQ_DYN_SGLANG, c->L, c->K, c->N, c->mode,
                                 c->temperature, 3, &dt);
    const int32_t prompt[3] = {5, 1, 7};
    static double cnt1[V], cnt2[V * V], p0[V], p2[V * V];
    memset(cnt1, 0, sizeof cnt1);
    memset(cnt2, 0, sizeof cnt2);
    sq_error err = {0};
    long steps = 0, toks = 0;
    for (int i = 0; i < R; i++) {
        sq_specdec_seed(sd, 1000 + (uint64_t)i);
        cr_assert_eq(sq_specdec_start(sd, prompt, 3, &err), 0, "%s", err.msg);
        int32_t seq[16], out[16];
        int n = 0;
        while (n < 2) {
            int before = sq_specdec_length(sd);
            cr_assert_eq(sq_specdec_step(sd, out, NULL, &err), 0, "%s", err.msg);
            int m = sq_specdec_length(sd) - before;
            steps++;
            toks += m;
            for (int j = 0; j < m && n < 16; j++)
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
    cr_log_info("%s T=%.1f envelope %d,%d,%d: %.3f tokens/step; first X2=%.1f df=%d p=%.4f; "
                "pair X2=%.1f df=%d p=%.4f", sq_mode_name(c->mode), c->temperature, c->L, c->K,
                c->N, (double)toks / steps, r1.stat, r1.df, r1.p_value, r2.stat, r2.df,
                r2.p_value);
    cr_assert_gt((double)toks / steps, 1.3, "the trees accept tokens (the test reaches deep)");
    cr_assert_geq(r1.df, 2);
    cr_assert_geq(r1.p_value, P_MIN, "first token: X2=%.2f df=%d p=%g", r1.stat, r1.df,
                  r1.p_value);
    cr_assert_geq(r2.p_value, P_MIN, "first two tokens: X2=%.2f df=%d p=%g", r2.stat, r2.df,
                  r2.p_value);
    /* and the test tells the draft's own distribution apart (its power) */
    if (c->temperature == 1.0) {
        sq_specdec_params prm = sq_specdec_default_params();
        prm.threads = 1;
        sq_plan *plan;
        sq_specdec *ds;
        cr_assert_eq(sq_dyntree_plan(1, 1, &plan, &err), 0, "%s", err.msg);
        cr_assert_eq(sq_specdec_new(draft, draft, plan, &prm, "envelope", &ds, &err), 0, "%s",
                     err.msg);
        double q0[V];
        cr_assert_eq(sq_specdec_target_probs(ds, prompt, 3, q0, &err), 0, "%s", err.msg);
        sq_chisq rq = sq_chisq_gof(cnt1, q0, V, 5.0);
        cr_assert_lt(rq.p_value, P_MIN, "the test has power against the draft: p=%g",
                     rq.p_value);
        sq_specdec_free(ds);
        sq_plan_free(plan);
    }
    sq_specdec_free(sd);
    sq_dyntree_free(dt);
    sq_model_free(draft);
    sq_model_free(target);
    tu_rmtree(dir);
    free(dir);
}

/* ---- a batch ----------------------------------------------------------------------------------- */

Test(dyntree, a_batch_decodes_what_its_members_decode_alone)
{
    enum { V = 40, B = 3, NEW = 24 };
    char *dir = tu_tmpdir();
    sq_model *draft, *target;
    write_pair(dir, V, 2, 1, &draft, &target);
    sq_error err = {0};
    const sq_mode modes[] = {SQ_MODE_GREEDY, SQ_MODE_TOPK, SQ_MODE_STOCHASTIC};
    const int32_t p0[] = {1, 2, 3}, p1[] = {9, 8, 7, 6, 5}, p2[] = {4};
    const int32_t *prompts[B] = {p0, p1, p2};
    const int plen[B] = {3, 5, 1};
    for (int mi = 0; mi < 3; mi++) {
        sq_plan *plan;
        cr_assert_eq(sq_dyntree_plan(4, 3, &plan, &err), 0, "%s", err.msg);
        sq_specdec_params prm = sq_specdec_default_params();
        prm.mode = modes[mi];
        prm.temperature = modes[mi] == SQ_MODE_GREEDY ? 0.0 : 0.8;
        prm.seed = 11;
        prm.threads = 1;
        prm.record_tree = 1;
        sq_specdec_batch *bt;
        cr_assert_eq(sq_specdec_batch_new(draft, target, plan, &prm, "envelope", B, &bt, &err),
                     0, "%s", err.msg);
        sq_dyntree *dt;
        cr_assert_eq(sq_dyntree_new(SQ_DYN_TRTLLM, 4, 3, 10, V, &dt, &err), 0, "%s", err.msg);
        sq_dyntree_attach_batch(bt, dt);
        static int32_t gen[B][NEW];
        int32_t *outs[B] = {gen[0], gen[1], gen[2]};
        int steps[B], bsteps;
        static sq_step_info infos[B * NEW];
        memset(infos, 0, sizeof infos);
        cr_assert_eq(sq_specdec_batch_generate(bt, prompts, plen, NEW, outs, steps, &bsteps,
                                               infos, &err), 0, "%s", err.msg);
        for (int k = 0; k < B; k++) {
            sq_specdec *sd = sq_specdec_batch_member(bt, k);
            sq_specdec_seed(sd, sq_specdec_batch_seed_of(11, k));
            int32_t alone[NEW];
            int st[NEW], ns;
            static sq_step_info ai[NEW];
            memset(ai, 0, sizeof ai);
            cr_assert_eq(sq_specdec_generate(sd, prompts[k], plen[k], NEW, alone, st, &ns, ai,
                                             &err), 0, "%s", err.msg);
            cr_assert_eq(ns, steps[k], "%s: sequence %d", sq_mode_name(modes[mi]), k);
            for (int i = 0; i < NEW; i++)
                cr_assert_eq(alone[i], gen[k][i], "%s: sequence %d token %d",
                             sq_mode_name(modes[mi]), k, i);
            for (int s = 0; s < ns; s++) {
                const sq_step_info *x = &ai[s], *y = &infos[k * NEW + s];
                cr_assert_eq(x->tree_n, y->tree_n);
                cr_assert_eq(x->tree_n, 10);
                cr_assert_eq(memcmp(x->tree_token, y->tree_token, (size_t)x->tree_n * 4), 0);
                cr_assert_eq(memcmp(x->tree_parent, y->tree_parent, (size_t)x->tree_n * 4), 0);
                sq_step_info_clear(&ai[s]);
            }
        }
        for (int i = 0; i < B * NEW; i++)
            sq_step_info_clear(&infos[i]);
        sq_specdec_batch_free(bt);
        sq_dyntree_free(dt);
        sq_plan_free(plan);
    }
    sq_model_free(draft);
    sq_model_free(target);
    tu_rmtree(dir);
    free(dir);
}

/* ---- bad envelopes, bad hooks ---------------------------------------------------------------- */

typedef struct bad_env {
    sq_dyn_engine engine;
    int           L, K, N;
    const char   *says;
} bad_env;

/* One node's expansion (what the grow hook does per expanded node and the profiler times):
 * the K best tokens of the draft's softmax, best first, ties to the lower id. Oracle: the
 * logits' own order (the softmax is monotone; logits on a grid of 0.25 make distinct logits'
 * probabilities distinct, and equal logits get equal probabilities wherever they sit). */
Test(dyntree, an_expansion_is_the_top_k_of_the_softmax)
{
    unsigned s = 7;
    for (int trial = 0; trial < 300; trial++) {
        int V = 1 + (int)((s = s * 1103515245u + 12345u) >> 8) % 300;
        int K = 1 + (int)((s = s * 1103515245u + 12345u) >> 8) % 8;
        if (K > V)
            K = V;
        float *l = malloc((size_t)V * sizeof *l);
        int *want = malloc((size_t)V * sizeof *want);
        for (int i = 0; i < V; i++) {
            s = s * 1103515245u + 12345u;
            l[i] = -8.0f + 0.25f * (float)((s >> 8) % 49);
            want[i] = i;
        }
        for (int i = 1; i < V; i++)   /* insertion sort: logit descending, id ascending */
            for (int j = i; j > 0 && l[want[j]] > l[want[j - 1]]; j--) {
                int t = want[j];
                want[j] = want[j - 1];
                want[j - 1] = t;
            }
        sq_dyntree *dt;
        sq_error err = {0};
        cr_assert_eq(sq_dyntree_new(SQ_DYN_SGLANG, 1, K, K + 1, V, &dt, &err), SQ_OK, "%s",
                     err.msg);
        const int32_t *got = sq_dyntree_expand(dt, l);
        for (int k = 0; k < K; k++)
            cr_assert_eq(got[k], want[k], "trial %d (V %d, K %d): rank %d is %d, want %d",
                         trial, V, K, k, got[k], want[k]);
        sq_dyntree_free(dt);
        free(l);
        free(want);
    }
}

Test(dyntree, bad_envelopes_are_refused_naming_the_rule_and_the_engine)
{
    static const bad_env bad[] = {
        {SQ_DYN_SGLANG, 3, 0, 4, "K = 0: sglang needs K >= 1"},
        {SQ_DYN_TRTLLM, 3, 0, 4, "K = 0: trtllm-dynamic needs K >= 1"},
        {SQ_DYN_SGLANG, 0, 2, 4, "sglang needs L >= 1"},
        {SQ_DYN_TRTLLM, 2, 2, 1, "trtllm-dynamic needs N >= 2"},
        {SQ_DYN_SGLANG, 2, 2, 8, "rule N - 1 <= K + (L - 1) K^2"},
        {SQ_DYN_SGLANG, 3, 1, 3, "rule N = L + 1 when K = 1"},
        {SQ_DYN_TRTLLM, 3, 3, 11, "rule max_total_draft_tokens <= dynamic_tree_max_topK * "
                                  "max_draft_len"},
        {SQ_DYN_TRTLLM, 5, 4, 4, "rule max_total_draft_tokens >= max_draft_len"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        sq_error err = {0};
        cr_assert_eq(sq_dyntree_check(bad[i].engine, bad[i].L, bad[i].K, bad[i].N, &err),
                     SQ_EUSAGE, "%d,%d,%d", bad[i].L, bad[i].K, bad[i].N);
        cr_assert(strstr(err.msg, bad[i].says), "'%s' should say '%s'", err.msg, bad[i].says);
    }
    sq_error err = {0};
    cr_assert_eq(sq_dyntree_check(SQ_DYN_SGLANG, 2, 2, 7, &err), 0, "the largest: %s", err.msg);
    cr_assert_eq(sq_dyntree_check(SQ_DYN_TRTLLM, 3, 3, 10, &err), 0, "%s", err.msg);
    cr_assert_eq(sq_dyntree_check(SQ_DYN_SGLANG, 4, 1, 5, &err), 0, "%s", err.msg);
    cr_assert_eq(sq_dyntree_check(SQ_DYN_TRTLLM, 4, 1, 5, &err), 0, "%s", err.msg);
    /* the SGLang rule admits what TensorRT-LLM's refuses */
    cr_assert_eq(sq_dyntree_check(SQ_DYN_SGLANG, 3, 3, 16, &err), 0, "%s", err.msg);
    cr_assert_eq(sq_dyntree_check(SQ_DYN_TRTLLM, 3, 3, 16, &err), SQ_EUSAGE);
    int L, K, N;
    cr_assert_eq(sq_dyntree_parse_envelope("5,4,8", &L, &K, &N, &err), 0);
    cr_assert(L == 5 && K == 4 && N == 8);
    cr_assert_eq(sq_dyntree_parse_envelope("5,4", &L, &K, &N, &err), SQ_EUSAGE);
    cr_assert_eq(sq_dyntree_parse_envelope("5,4,8,1", &L, &K, &N, &err), SQ_EUSAGE);
    err = (sq_error){0};
    cr_assert_eq(sq_dyntree_parse_envelope("a,4,8", &L, &K, &N, &err), SQ_EUSAGE);
    cr_assert(strstr(err.msg, "L (draft steps) is not an integer"), "%s", err.msg);
    /* an integer past int is out of range, not "not an integer" */
    err = (sq_error){0};
    cr_assert_eq(sq_dyntree_parse_envelope("99999999999,2,4", &L, &K, &N, &err), SQ_EUSAGE);
    cr_assert(strstr(err.msg, "L (draft steps) 99999999999 is out of range (at most 2147483647"),
              "%s", err.msg);
    err = (sq_error){0};
    cr_assert_eq(sq_dyntree_parse_envelope("2,2,99999999999999999999", &L, &K, &N, &err),
                 SQ_EUSAGE);
    cr_assert(strstr(err.msg, "N (nodes, the root included) 99999999999999999999 is out of range"),
              "%s", err.msg);
    sq_dyn_engine e;
    err = (sq_error){0};
    cr_assert_eq(sq_dyn_engine_parse("vllm", &e, &err), SQ_EUSAGE);
    cr_assert(strstr(err.msg, "sglang or trtllm-dynamic"));
}

Test(dyntree, the_cli_refuses_bad_envelopes_and_specinfer_with_exit_64)
{
    const char *run = getenv("SQ_RUN_BIN");
    cr_assert(run);
    char *dp = tu_source_path("data/models/draft"), *tp = tu_source_path("data/models/target");
    char *pp = tu_source_path("data/ladder-large/prompts.txt");
    struct {
        const char *engine, *envelope, *mode, *says;
    } bad[] = {
        {"sglang", "2,2,8", "greedy", "sglang: N - 1 = 7 exceeds K + (L - 1) K^2 = 6"},
        {"trtllm-dynamic", "3,3,11", "greedy", "trtllm-dynamic: N - 1 = 10 exceeds K L = 9"},
        {"trtllm-dynamic", "3,0,4", "greedy", "K = 0: trtllm-dynamic needs K >= 1"},
        {"sglang", "3,2,5", "specinfer", "the specinfer mode is not run on dynamic trees"},
        {"sglang", "3,2", "greedy", "three integers L,K,N"},
        {"eagle", "3,2,5", "greedy", "sglang or trtllm-dynamic"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char *argv[] = {(char *)run, "--draft", dp, "--target", tp, "--engine",
                        (char *)bad[i].engine, "--envelope", (char *)bad[i].envelope, "--prompt",
                        pp, "--mode", (char *)bad[i].mode, "-n", "4", NULL};
        char *out = NULL, *er = NULL;
        int rc = tu_run(argv, &out, &er);
        cr_assert_eq(rc, 64, "%s %s: exit %d: %s", bad[i].engine, bad[i].envelope, rc, er);
        cr_assert(strstr(er, bad[i].says), "'%s' should say '%s'", er, bad[i].says);
        free(out);
        free(er);
    }
    /* --engine without --envelope, and with --plan */
    char *argv[] = {(char *)run, "--draft", dp, "--target", tp, "--engine", "sglang", "--prompt",
                    pp, NULL};
    char *out = NULL, *er = NULL;
    cr_assert_eq(tu_run(argv, &out, &er), 64);
    cr_assert(strstr(er, "--engine needs --envelope"), "%s", er);
    free(out);
    free(er);
    free(dp);
    free(tp);
    free(pp);
}

static int bad_prune(sq_tree_grow *g, void *user, uint8_t *keep, sq_error *err)
{
    (void)user;
    (void)err;
    keep[sq_tree_grow_nodes(g) - 1] = 1;   /* a deepest node without its parent */
    return SQ_OK;
}

Test(dyntree, a_prune_hook_must_keep_ancestors)
{
    enum { V = 40 };
    char *dir = tu_tmpdir();
    sq_model *draft, *target;
    write_pair(dir, V, 2, 0, &draft, &target);
    sq_dyntree *dt;
    sq_specdec *sd = dyn_decoder(draft, target, SQ_DYN_SGLANG, 3, 2, 4, SQ_MODE_GREEDY, 0, 1,
                                 &dt);
    sq_specdec_set_prune(sd, bad_prune, NULL);
    const int32_t prompt[] = {1, 2};
    int32_t out[8];
    sq_error err = {0};
    cr_assert_eq(sq_specdec_start(sd, prompt, 2, &err), 0, "%s", err.msg);
    cr_assert_eq(sq_specdec_step(sd, out, NULL, &err), SQ_EUSAGE);
    cr_assert(strstr(err.msg, "kept without its parent"), "%s", err.msg);
    /* without a prune hook every grown node is verified: 1 + K + (L - 1) K^2 */
    sq_specdec_set_prune(sd, NULL, NULL);
    sq_step_info in = {0};
    err = (sq_error){0};
    cr_assert_eq(sq_specdec_start(sd, prompt, 2, &err), 0, "%s", err.msg);
    cr_assert_eq(sq_specdec_step(sd, out, &in, &err), 0, "%s", err.msg);
    cr_assert_eq(in.nodes, sq_dyntree_capacity(3, 2));
    sq_step_info_clear(&in);
    /* the grow hook refuses specinfer */
    sq_specdec_free(sd);
    sq_dyntree_free(dt);
    sd = dyn_decoder(draft, target, SQ_DYN_SGLANG, 3, 2, 4, SQ_MODE_SPECINFER, 1.0, 1, &dt);
    err = (sq_error){0};
    cr_assert_eq(sq_specdec_start(sd, prompt, 2, &err), 0, "%s", err.msg);
    cr_assert_eq(sq_specdec_step(sd, out, NULL, &err), SQ_EUSAGE);
    cr_assert(strstr(err.msg, "specinfer"), "%s", err.msg);
    sq_specdec_free(sd);
    sq_dyntree_free(dt);
    sq_model_free(draft);
    sq_model_free(target);
    tu_rmtree(dir);
    free(dir);
}

/* ---- the report ---------------------------------------------------------------------------- */

Test(dyntree, the_report_holds_every_steps_tree_consistent_with_tokens_per_step)
{
    const char *run = getenv("SQ_RUN_BIN");
    cr_assert(run);
    char *dp = tu_source_path("data/models/draft"), *tp = tu_source_path("data/models/target");
    char *pp = tu_source_path("data/ladder-large/prompts.txt");
    char *dir = tu_tmpdir(), *rp = tu_path(dir, "r.json"), *op = tu_path(dir, "o.txt");
    char *argv[] = {(char *)run, "--draft", dp, "--target", tp, "--engine", "trtllm-dynamic",
                    "--envelope", "5,4,12", "--prompt", pp, "--batch", "3", "-n", "40", "--mode",
                    "topk", "--seed", "3", "--no-baseline", "--threads", "1", "-q", "--report",
                    rp, "-o", op, NULL};
    char *out = NULL, *er = NULL;
    cr_assert_eq(tu_run(argv, &out, &er), 0, "%s", er);
    size_t len;
    char *text = tu_read(rp, &len);
    cJSON *r = cJSON_Parse(text);
    cr_assert(r);
    cJSON *dyn = cJSON_GetObjectItem(r, "dynamic");
    cr_assert(dyn, "the report has its 'dynamic' key");
    cr_assert_str_eq(cJSON_GetObjectItem(dyn, "engine")->valuestring, "trtllm-dynamic");
    cJSON *env = cJSON_GetObjectItem(dyn, "envelope");
    cr_assert_eq(cJSON_GetObjectItem(env, "steps")->valueint, 5);
    cr_assert_eq(cJSON_GetObjectItem(env, "topk")->valueint, 4);
    cr_assert_eq(cJSON_GetObjectItem(env, "nodes")->valueint, 12);
    cJSON *trees = cJSON_GetObjectItem(dyn, "trees"), *st = cJSON_GetObjectItem(r, "step_tokens");
    int nt = cJSON_GetArraySize(trees);
    cr_assert_eq(nt, cJSON_GetArraySize(st), "one tree per step");
    cr_assert_eq(nt, cJSON_GetObjectItem(r, "steps")->valueint);
    for (int i = 0; i < nt; i++) {
        cJSON *t = cJSON_GetArrayItem(trees, i);
        cJSON *par = cJSON_GetObjectItem(t, "parents"), *acc = cJSON_GetObjectItem(t, "accepted");
        int n = cJSON_GetArraySize(par), na = cJSON_GetArraySize(acc);
        cr_assert_eq(n, 12, "N nodes verified");
        cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(t, "tokens")), n);
        cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(t, "scores")), n);
        cr_assert_eq(cJSON_GetArrayItem(par, 0)->valueint, -1);
        for (int u = 1; u < n; u++)
            cr_assert_lt(cJSON_GetArrayItem(par, u)->valueint, u);
        int tok = cJSON_GetObjectItem(t, "tokens_out")->valueint;
        cr_assert_eq(tok, na + 1, "tokens/step = the accepted path + 1");
        cr_assert_eq(tok, cJSON_GetArrayItem(st, i)->valueint, "step %d", i);
        for (int a = 0, prev = 0; a < na; a++) {
            int u = cJSON_GetArrayItem(acc, a)->valueint;
            cr_assert_eq(cJSON_GetArrayItem(par, u)->valueint, prev, "the path is a chain");
            prev = u;
        }
    }
    cJSON *pj = cJSON_GetObjectItem(r, "plan");
    cr_assert(cJSON_IsNull(cJSON_GetObjectItem(pj, "expected_tokens")));
    cJSON_Delete(r);
    free(text);
    free(out);
    free(er);
    tu_rmtree(dir);
    free(dir);
    free(rp);
    free(op);
    free(dp);
    free(tp);
    free(pp);
}

/* sequoia-run --plan of a dynamic plan (libsequoia/format/dynplan.h, as sequoia-plan writes it)
 * runs its engine and envelope exactly as --engine/--envelope do; a --mode or --temperature other
 * than the plan's is refused (64, issue 26: the plan's are the run's), specinfer too, an
 * envelope outside the engine's rules is the loader's data error (65). */
static char *write_dynplan(const char *dir, const char *name, const char *engine,
                           const char *mode, double T, int L, int K, int N)
{
    char *f = tu_path(dir, name);
    char text[1024];
    snprintf(text, sizeof text, "{\"format\": \"sequoia-dynamic-plan\", \"version\": 1, "
             "\"engine\": \"%s\", \"mode\": \"%s\", \"temperature\": %g, \"top_p\": 1, "
             "\"envelope\": {\"steps\": %d, \"topk\": %d, \"nodes\": %d}, "
             "\"expected_tokens\": 1.5, \"prediction\": {\"method\": \"test\"}}\n", engine, mode,
             T, L, K, N);
    tu_write(f, text);
    return f;
}

Test(dyntree, run_takes_a_dynamic_plan_as_its_engine_and_envelope, .timeout = 120)
{
    const char *run = getenv("SQ_RUN_BIN");
    cr_assert(run);
    char *dp = tu_source_path("data/models/draft"), *tp = tu_source_path("data/models/target");
    char *pp = tu_source_path("data/ladder-large/prompts.txt");
    char *dir = tu_tmpdir(), *o1 = tu_path(dir, "o1.txt"), *o2 = tu_path(dir, "o2.txt");
    char *rp = tu_path(dir, "r.json");
    char *pl = write_dynplan(dir, "dyn.json", "sglang", "greedy", 0, 3, 2, 5);
    char *args1[] = {(char *)run, "--draft", dp, "--target", tp, "--plan", pl, "--prompt", pp,
                     "-n", "24", "--mode", "greedy", "--threads", "1", "-q", "--validate",
                     "-o", o1, "--report", rp, NULL};
    char *out = NULL, *er = NULL;
    cr_assert_eq(tu_run(args1, &out, &er), 0, "%s", er);
    cr_assert(!strstr(er, "the dynamic plan was predicted for"), "the plan's mode: %s", er);
    cr_assert(strstr(er, "sglang envelope 3,2,5, plan expects 1.500"), "%s", er);
    free(out);
    free(er);
    char *args2[] = {(char *)run, "--draft", dp, "--target", tp, "--engine", "sglang",
                     "--envelope", "3,2,5", "--prompt", pp, "-n", "24", "--mode", "greedy",
                     "--threads", "1", "-q", "--no-baseline", "-o", o2, NULL};
    cr_assert_eq(tu_run(args2, &out, &er), 0, "%s", er);
    free(out);
    free(er);
    char *t1 = tu_read(o1, NULL), *t2 = tu_read(o2, NULL);
    cr_assert_str_eq(t1, t2, "the plan's run is --engine sglang --envelope 3,2,5");
    free(t1);
    free(t2);
    char *text = tu_read(rp, NULL);
    cJSON *r = cJSON_Parse(text);
    cJSON *dyn = cJSON_GetObjectItem(r, "dynamic");
    cr_assert(dyn && cJSON_GetObjectItem(dyn, "trees"), "the report has the trees");
    cr_assert_str_eq(cJSON_GetObjectItem(dyn, "engine")->valuestring, "sglang");
    cr_assert_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(dyn, "envelope"), "nodes")->valueint, 5);
    /* the plan's prediction is compared with the measurement, as a static plan's */
    cJSON *pred = cJSON_GetObjectItem(r, "prediction");
    cr_assert_float_eq(cJSON_GetObjectItem(pred, "expected_tokens")->valuedouble, 1.5, 1e-12);
    cr_assert_float_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(r, "plan"),
                                           "expected_tokens")->valuedouble, 1.5, 1e-12);
    cr_assert(strstr(cJSON_GetObjectItem(pred, "explanation")->valuestring,
                     "the dynamic plan's expected_tokens 1.5000"),
              "%s", cJSON_GetObjectItem(pred, "explanation")->valuestring);
    cJSON_Delete(r);
    free(text);

    /* another mode than the plan's: refused (64), naming the plan and both modes (the plan's
     * mode is the run's: sq_run_resolve_plan) */
    char *args3[] = {(char *)run, "--draft", dp, "--target", tp, "--plan", pl, "--prompt", pp,
                     "-n", "8", "--mode", "topk", "--threads", "1", "-q", "--no-baseline", NULL};
    cr_assert_eq(tu_run(args3, &out, &er), 64, "%s", er);
    cr_assert(strstr(er, "dyn.json: --mode topk conflicts with the dynamic plan's mode greedy"),
              "%s", er);
    free(out);
    free(er);
    /* specinfer: refused as with --engine */
    char *args4[] = {(char *)run, "--draft", dp, "--target", tp, "--plan", pl, "--prompt", pp,
                     "-n", "8", "--mode", "specinfer", "-q", NULL};
    cr_assert_eq(tu_run(args4, &out, &er), 64, "%s", er);
    cr_assert(strstr(er, "specinfer") && strstr(er, "dyn.json"), "%s", er);
    free(out);
    free(er);
    /* an envelope the engine refuses: the file, the field, the rule */
    char *bad = write_dynplan(dir, "bad.json", "trtllm-dynamic", "greedy", 0, 3, 3, 11);
    char *args5[] = {(char *)run, "--draft", dp, "--target", tp, "--plan", bad, "--prompt", pp,
                     "-n", "8", "-q", NULL};
    cr_assert_eq(tu_run(args5, &out, &er), 65, "%s", er);
    cr_assert(strstr(er, "bad.json") && strstr(er, "rule max_total_draft_tokens <= "
                                                   "dynamic_tree_max_topK * max_draft_len"),
              "%s", er);
    free(out);
    free(er);
    tu_rmtree(dir);
    free(dir);
    free(o1);
    free(o2);
    free(rp);
    free(pl);
    free(bad);
    free(dp);
    free(tp);
    free(pp);
}

/* A dynamic plan of sglang 3,2,5 in `mode` at temperature T with the given "hardware" object
 * (NULL: none). */
static char *write_dynplan_hw(const char *dir, const char *name, const char *mode, double T,
                              const char *hw)
{
    char *f = tu_path(dir, name);
    char text[2048];
    snprintf(text, sizeof text, "{\"format\": \"sequoia-dynamic-plan\", \"version\": 1, "
             "\"engine\": \"sglang\", \"mode\": \"%s\", \"temperature\": %g, \"top_p\": 1, "
             "\"envelope\": {\"steps\": 3, \"topk\": 2, \"nodes\": 5}, "
             "\"expected_tokens\": 1.5, \"prediction\": {\"method\": \"test\"}%s%s}\n", mode, T,
             hw ? ", \"hardware\": " : "", hw ? hw : "");
    tu_write(f, text);
    return f;
}

/* The report's speed comparison of a run (prediction.tokens_per_second), NULL-safe fields. */
static cJSON *report_speed(const char *rp, cJSON **root)
{
    char *text = tu_read(rp, NULL);
    *root = cJSON_Parse(text);
    free(text);
    cr_assert_not_null(*root);
    return cJSON_GetObjectItem(cJSON_GetObjectItem(*root, "prediction"), "tokens_per_second");
}

/* sequoia-run --plan DYNPLAN: the plan's mode and temperature are the run's (the same tokens,
 * bit for bit, as --engine/--envelope with the plan's settings and the same seed); the report
 * compares the measured speed with the plan's hardware.sequoia_run prediction when the run
 * decoded the batch size it priced, and says why not otherwise; a conflicting --engine,
 * --envelope, --mode or --temperature is refused (64) naming both values. */
Test(dyntree, run_of_a_dynamic_plan_compares_with_its_sequoia_run_prediction, .timeout = 180)
{
    const char *run = getenv("SQ_RUN_BIN");
    cr_assert(run);
    char *dp = tu_source_path("data/models/draft"), *tp = tu_source_path("data/models/target");
    char *pp = tu_source_path("data/ladder-large/prompts.txt");
    char *dir = tu_tmpdir(), *o1 = tu_path(dir, "o1.txt"), *o2 = tu_path(dir, "o2.txt");
    char *rp = tu_path(dir, "r.json");
    const char *hw1 = "{\"batch\": 1, \"round_ms\": 2, \"tokens_per_second\": 700, "
                      "\"sequoia_run\": {\"cost_per_round\": \"test\", \"draft_catchup_tokens\": "
                      "1.5, \"round_ms\": 2.1, \"tokens_per_second\": 123.5, "
                      "\"predicted_speedup\": 1.2}}";
    const char *hw2 = "{\"batch\": 2, \"round_ms\": 2, \"tokens_per_second\": 700, "
                      "\"sequoia_run\": {\"cost_per_round\": \"test\", \"draft_catchup_tokens\": "
                      "1.5, \"round_ms\": 2.1, \"tokens_per_second\": 246.5, "
                      "\"predicted_speedup\": 1.2}}";
    char *gp = write_dynplan_hw(dir, "g.json", "greedy", 0, hw1);
    char *kp = write_dynplan_hw(dir, "k.json", "topk", 1, hw1);
    char *bp = write_dynplan_hw(dir, "b2.json", "greedy", 0, hw2);
    char *np = write_dynplan_hw(dir, "old.json", "greedy", 0, "{\"batch\": 1, \"round_ms\": 2}");
    char *out = NULL, *er = NULL;

    /* the topk plan without --mode: topk at T = 1, as --engine/--envelope --mode topk */
    char *a1[] = {(char *)run, "--draft", dp, "--target", tp, "--plan", kp, "--prompt", pp,
                  "-n", "16", "--seed", "7", "--threads", "1", "-q", "--no-baseline", "-o", o1,
                  "--report", rp, NULL};
    cr_assert_eq(tu_run(a1, &out, &er), 0, "%s", er);
    cr_assert(strstr(er, "speed: ") && strstr(er, "predicted by the plan's hardware.sequoia_run "
                                              "(batch 1)"), "%s", er);
    free(out);
    free(er);
    char *a2[] = {(char *)run, "--draft", dp, "--target", tp, "--engine", "sglang",
                  "--envelope", "3,2,5", "--mode", "topk", "--temperature", "1", "--seed", "7",
                  "--prompt", pp, "-n", "16", "--threads", "1", "-q", "--no-baseline", "-o", o2,
                  NULL};
    cr_assert_eq(tu_run(a2, &out, &er), 0, "%s", er);
    free(out);
    free(er);
    char *t1 = tu_read(o1, NULL), *t2 = tu_read(o2, NULL);
    cr_assert_str_eq(t1, t2, "the plan's run is --engine sglang --envelope 3,2,5 --mode topk");
    free(t1);
    free(t2);
    cJSON *r;
    cJSON *sp = report_speed(rp, &r);
    cr_assert(sp, "the report compares the speed");
    cr_assert_str_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(r, "setup"), "mode")->valuestring,
                     "topk");
    cr_assert_float_eq(cJSON_GetObjectItem(sp, "predicted")->valuedouble, 123.5, 1e-12);
    cr_assert_eq(cJSON_GetObjectItem(sp, "batch")->valueint, 1);
    cr_assert_str_eq(cJSON_GetObjectItem(sp, "predicted_by")->valuestring,
                     "plan hardware.sequoia_run");
    double m = cJSON_GetObjectItem(sp, "measured_decode")->valuedouble;
    cr_assert(m > 0);
    cr_assert_float_eq(cJSON_GetObjectItem(sp, "ratio")->valuedouble, m / 123.5, 1e-12);
    cr_assert_null(cJSON_GetObjectItem(sp, "note"));
    cJSON_Delete(r);

    /* --batch 2 against a plan priced at batch 1: not comparable, said so */
    char *a3[] = {(char *)run, "--draft", dp, "--target", tp, "--plan", gp, "--prompt", pp,
                  "-n", "8", "--batch", "2", "--threads", "1", "-q", "--no-baseline", "--report",
                  rp, NULL};
    cr_assert_eq(tu_run(a3, &out, &er), 0, "%s", er);
    cr_assert(strstr(er, "not comparable: the plan priced batch 1, this run decoded 2 sequences "
                         "together"), "%s", er);
    free(out);
    free(er);
    sp = report_speed(rp, &r);
    cr_assert(sp && cJSON_IsNull(cJSON_GetObjectItem(sp, "predicted")) &&
              cJSON_IsNull(cJSON_GetObjectItem(sp, "ratio")));
    cr_assert(strstr(cJSON_GetObjectItem(sp, "note")->valuestring, "not comparable"));
    cJSON_Delete(r);
    /* a plan priced at batch 2, run with --batch 2: compared */
    char *a4[] = {(char *)run, "--draft", dp, "--target", tp, "--plan", bp, "--prompt", pp,
                  "-n", "8", "--batch", "2", "--threads", "1", "-q", "--no-baseline", "--report",
                  rp, NULL};
    cr_assert_eq(tu_run(a4, &out, &er), 0, "%s", er);
    free(out);
    free(er);
    sp = report_speed(rp, &r);
    cr_assert(sp);
    cr_assert_float_eq(cJSON_GetObjectItem(sp, "predicted")->valuedouble, 246.5, 1e-12);
    cr_assert_eq(cJSON_GetObjectItem(sp, "batch")->valueint, 2);
    cJSON_Delete(r);
    /* a hardware section without sequoia_run: the run goes on, the note says why */
    char *a5[] = {(char *)run, "--draft", dp, "--target", tp, "--plan", np, "--prompt", pp,
                  "-n", "8", "--threads", "1", "-q", "--no-baseline", "--report", rp, NULL};
    cr_assert_eq(tu_run(a5, &out, &er), 0, "%s", er);
    cr_assert(strstr(er, "has no sequoia_run.tokens_per_second"), "%s", er);
    free(out);
    free(er);
    sp = report_speed(rp, &r);
    cr_assert(sp && cJSON_IsNull(cJSON_GetObjectItem(sp, "predicted")));
    cJSON_Delete(r);

    /* conflicts: 64, naming both values; the plan's own values are accepted */
    struct {
        const char *opt, *val, *msg;
    } bad[] = {
        {"--engine", "trtllm-dynamic", "--engine trtllm-dynamic conflicts with the dynamic "
                                       "plan's engine sglang"},
        {"--envelope", "3,2,6", "--envelope 3,2,6 conflicts with the dynamic plan's envelope "
                                "3,2,5"},
        {"--temperature", "0.5", "--temperature 0.5 conflicts with the dynamic plan's "
                                 "temperature 0"},
        {"--mode", "stochastic", "--mode stochastic conflicts with the dynamic plan's mode "
                                 "greedy"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char *a[] = {(char *)run, "--draft", dp, "--target", tp, "--plan", gp, "--prompt", pp,
                     "-n", "4", (char *)bad[i].opt, (char *)bad[i].val, "-q", "--no-baseline",
                     NULL};
        cr_assert_eq(tu_run(a, &out, &er), 64, "%s: %s", bad[i].opt, er);
        cr_assert(strstr(er, "g.json: ") && strstr(er, bad[i].msg), "%s", er);
        free(out);
        free(er);
    }
    char *a6[] = {(char *)run, "--draft", dp, "--target", tp, "--plan", gp, "--engine", "sglang",
                  "--envelope", "3,2,5", "--mode", "greedy", "--prompt", pp, "-n", "4",
                  "--threads", "1", "-q", "--no-baseline", NULL};
    cr_assert_eq(tu_run(a6, &out, &er), 0, "%s", er);
    free(out);
    free(er);
    tu_rmtree(dir);
    free(dir);
    free(o1);
    free(o2);
    free(rp);
    free(gp);
    free(kp);
    free(bp);
    free(np);
    free(dp);
    free(tp);
    free(pp);
}
