/* Tree speculative decoding (docs/design.md §8); see specdec.h for the protocol. */
#include "runtime/specdec.h"
#include "runtime/memory.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>
#include <time.h>

#include "runtime/prefill.h"

#define PREFILL_CHUNK 128

/* The tree of one step while a grow hook shapes it (specdec.h). */
struct sq_tree_grow {
    sq_specdec *sd;
    int         level;   /* the level whose nodes get children now                         */
    int         last;    /* the last node given children in this call, -1: none yet        */
};

struct sq_specdec {
    const sq_model   *draft, *target;
    sq_context       *dctx, *tctx;
    sq_specdec_params prm;
    int               V;
    int               max_context;
    sq_verifier      *ver;
    /* the plan: the most nodes (cap) and levels (D) a step's tree has, and the rule of the
     * default grow hook (grow_plan) */
    int      cap, D;
    int     *plan_kids;    /* (cap) children of the plan's node u                    */
    sq_grow_fn grow;       /* how the tree grows (grow_plan unless set)              */
    void    *grow_user;
    sq_prune_fn prune;     /* the final choice of the verified nodes, or NULL        */
    void    *prune_user;
    uint8_t *pkeep;        /* (cap) the prune hook's choice                          */
    int     *pmap;         /* (cap) old node index -> new, -1: dropped               */
    struct sq_tree_grow g;
    /* this step's tree, grown level by level: breadth-first, the children of a node
     * contiguous, the nodes of a level in their parents' order */
    int      n;            /* nodes so far                                          */
    int     *parent;       /* (cap)                                                 */
    int     *depth;        /* (cap)                                                 */
    int     *child_first;  /* (cap) first child's index, -1 for a leaf              */
    int     *child_count;  /* (cap)                                                 */
    int     *level_start;  /* (D + 1) nodes of level l: [level_start[l], level_start[l+1]) */
    double  *score;        /* (cap) what the grow hook recorded (0 unless it did)   */
    uint8_t *expand;       /* (cap) the draft reads the node (it may get children)  */
    /* the sequence */
    int32_t *seq;          /* (max_context + D) prompt + generated                   */
    int      len;
    int      started;
    /* per step */
    int32_t *tok;          /* (cap) node tokens                                     */
    int     *dslot;        /* (cap) the node's pending slot in the draft, -1: not fed */
    int     *path;         /* (D) accepted nodes below the root                     */
    int      a;            /* tokens of the draft's catch-up forward                */
    int      pd;           /* tokens pending in the draft                           */
    int      nfeed;        /* nodes of the level the draft reads next (in keep)      */
    int      cnt, pl;      /* tokens out and accepted nodes of the verification     */
    float   *dlog;         /* (cap, V) draft logits of the nodes fed to the draft    */
    int      tmaxp, dmaxp; /* pending capacity of the target and draft contexts      */
    int      tV, dV;       /* the target's and the draft's vocab_size (>= V, the shared
                              range: rows of a forward's output; sq_models_check_vocab) */
    float   *tlog;         /* (tmaxp, V) target logits (a forward writes (rows, tV);
                              shared_rows packs them to the shared range)            */
    float   *dbuf;         /* (dmaxp, dV) draft forward output                      */
    double  *p, *q;        /* (V)                                                   */
    uint8_t *mask;         /* (max(tmaxp, dmaxp)^2)                                 */
    int32_t *ftok, *fpos;  /* (max(tmaxp, dmaxp)) tokens and positions of a forward */
    int32_t *keep;         /* (max(tmaxp, dmaxp))                                   */
};

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

sq_specdec_params sq_specdec_default_params(void)
{
    sq_specdec_params p = {
        .mode = SQ_MODE_STOCHASTIC,
        .temperature = 1.0,
        .top_p = 1.0,
        .seed = 0,
        .max_context = 0,
        .backend = SQ_BACKEND_CPU,
        .threads = 0,
        .dtype = SQ_DTYPE_AUTO,
        .offload = 0,
        .check_attention = 0,
    };
    return p;
}

void sq_specdec_free(sq_specdec *sd)
{
    if (!sd)
        return;
    sq_context_free(sd->dctx);
    sq_context_free(sd->tctx);
    sq_verifier_free(sd->ver);
    free(sd->plan_kids);
    free(sd->pkeep);
    free(sd->pmap);
    free(sd->parent);
    free(sd->depth);
    free(sd->child_first);
    free(sd->child_count);
    free(sd->level_start);
    free(sd->score);
    free(sd->expand);
    free(sd->seq);
    free(sd->tok);
    free(sd->dslot);
    free(sd->path);
    free(sd->dlog);
    free(sd->tlog);
    free(sd->dbuf);
    free(sd->p);
    free(sd->q);
    free(sd->mask);
    free(sd->ftok);
    free(sd->fpos);
    free(sd->keep);
    free(sd);
}

static int grow_plan(sq_tree_grow *g, int level, void *user, sq_error *err);

/* What sq_specdec_new checks before it allocates anything (the batch checks it before its own
 * memory check, so that a single decoder and a batch refuse a bad plan or parameter alike): the
 * vocabularies, the plan against them, the sampling parameters, the context against the models
 * and the tree, and the logit buffers and tree mask against the machine's memory. */
static int check_new(const sq_model *draft, const sq_model *target, const sq_plan *plan,
                     const sq_specdec_params *params, const char *plan_file, sq_error *err)
{
    const sq_model_config *dc = sq_model_get_config(draft), *tc = sq_model_get_config(target);
    int V, rc = sq_models_check_vocab(draft, target, NULL, NULL, params->tokenizer_len, &V, err);
    if (rc)
        return rc;
    const sq_tree *t = plan->tree;
    int Vmax = tc->vocab_size > dc->vocab_size ? tc->vocab_size : dc->vocab_size;
    int maxc = sq_tree_max_children(t);
    if (params->mode != SQ_MODE_SPECINFER && maxc > V)
        return sq_error_set(err, SQ_EDATA,
                            "%s: nodes: a node has %d children but the models' vocabulary has "
                            "only %d tokens (%s mode proposes distinct tokens)",
                            plan_file, maxc, V, sq_mode_name(params->mode));
    if (!(params->temperature >= 0.0) || !isfinite(params->temperature))
        return sq_error_set(err, SQ_EUSAGE, "temperature %g must be finite and >= 0",
                            params->temperature);
    if (!(params->top_p > 0.0 && params->top_p <= 1.0))
        return sq_error_set(err, SQ_EUSAGE, "top-p %g must be in (0, 1]", params->top_p);
    if (params->mode != SQ_MODE_GREEDY && params->temperature == 0.0)
        return sq_error_set(err, SQ_EUSAGE,
                            "temperature 0 is greedy decoding: use the greedy mode");

    int n = t->n, D = sq_tree_depth(t);
    int maxpos = dc->max_position < tc->max_position ? dc->max_position : tc->max_position;
    int max_context = params->max_context > 0 ? params->max_context : maxpos;
    if (maxpos > 0 && max_context > maxpos)
        return sq_error_set(err, SQ_EUSAGE,
                            "context %d exceeds the models' max_position_embeddings %d",
                            params->max_context, maxpos);
    if (max_context < D + 1)
        return sq_error_set(err, SQ_EUSAGE, "context %d cannot hold a tree of depth %d",
                            max_context, D);
    int tmaxp = n > PREFILL_CHUNK ? n : PREFILL_CHUNK;
    int dmaxp = n + D + 2 > PREFILL_CHUNK ? n + D + 2 : PREFILL_CHUNK;
    int mp = tmaxp > dmaxp ? tmaxp : dmaxp;
    /* A huge plan (up to 2^20 nodes) times a large vocabulary is refused up front rather than
     * swapped or OOM-killed: the logit buffers and the tree mask against physical memory. */
    double need = ((double)n + tmaxp + dmaxp) * (double)Vmax * sizeof(float) +
                  (double)mp * (double)mp;
    return sq_memory_check(need, err, "use a smaller plan", "a plan of %d nodes with a "
                           "vocabulary of %d needs %.1f GiB of logit buffers and tree mask", n, V,
                           need / (1 << 30));
}

int sq_specdec_new(const sq_model *draft, const sq_model *target, const sq_plan *plan,
                   const sq_specdec_params *params, const char *plan_file, sq_specdec **out,
                   sq_error *err)
{
    *out = NULL;
    int rc = check_new(draft, target, plan, params, plan_file, err);
    if (rc)
        return rc;
    const sq_model_config *dc = sq_model_get_config(draft), *tc = sq_model_get_config(target);
    const sq_tree *t = plan->tree;
    int V = dc->vocab_size < tc->vocab_size ? dc->vocab_size : tc->vocab_size;

    sq_specdec *sd = calloc(1, sizeof *sd);
    if (!sd)
        return sq_error_oom(err, "speculative decoder");
    sd->draft = draft;
    sd->target = target;
    sd->prm = *params;
    sd->V = V;
    sd->tV = tc->vocab_size;
    sd->dV = dc->vocab_size;
    int n = t->n, D = sq_tree_depth(t);
    sd->cap = n;
    sd->D = D;
    sd->grow = grow_plan;
    sd->g.sd = sd;
    int maxpos = dc->max_position < tc->max_position ? dc->max_position : tc->max_position;
    sd->max_context = params->max_context > 0 ? params->max_context : maxpos;
    sd->tmaxp = n > PREFILL_CHUNK ? n : PREFILL_CHUNK;
    sd->dmaxp = n + D + 2 > PREFILL_CHUNK ? n + D + 2 : PREFILL_CHUNK;
    int mp = sd->tmaxp > sd->dmaxp ? sd->tmaxp : sd->dmaxp;
    size_t Vs = (size_t)V;
    sd->plan_kids = calloc((size_t)n, sizeof(int));
    sd->pkeep = malloc((size_t)n);
    sd->pmap = malloc((size_t)n * sizeof(int));
    sd->parent = malloc((size_t)n * sizeof(int));
    sd->depth = malloc((size_t)n * sizeof(int));
    sd->child_first = malloc((size_t)n * sizeof(int));
    sd->child_count = calloc((size_t)n, sizeof(int));
    sd->level_start = calloc((size_t)D + 1, sizeof(int));
    sd->score = calloc((size_t)n, sizeof(double));
    sd->expand = calloc((size_t)n, 1);
    sd->seq = malloc(((size_t)sd->max_context + (size_t)D + 1) * sizeof(int32_t));
    sd->tok = malloc((size_t)n * sizeof(int32_t));
    sd->dslot = malloc((size_t)n * sizeof(int));
    sd->path = malloc((size_t)D * sizeof(int));
    sd->dlog = malloc((size_t)n * Vs * sizeof(float));
    sd->tlog = malloc((size_t)sd->tmaxp * (size_t)sd->tV * sizeof(float));
    sd->dbuf = malloc((size_t)sd->dmaxp * (size_t)sd->dV * sizeof(float));
    sd->p = malloc(Vs * sizeof(double));
    sd->q = malloc(Vs * sizeof(double));
    sd->mask = malloc((size_t)mp * (size_t)mp);
    sd->ftok = malloc((size_t)mp * sizeof(int32_t));
    sd->fpos = malloc((size_t)mp * sizeof(int32_t));
    sd->keep = malloc((size_t)mp * sizeof(int32_t));
    sd->ver = sq_verifier_new(V, params->mode, params->seed);
    if (!sd->plan_kids || !sd->pkeep || !sd->pmap || !sd->parent || !sd->depth || !sd->child_first || !sd->child_count ||
        !sd->level_start || !sd->score || !sd->expand || !sd->seq || !sd->tok || !sd->dslot ||
        !sd->path || !sd->dlog || !sd->tlog || !sd->dbuf || !sd->p || !sd->q || !sd->mask ||
        !sd->ftok || !sd->fpos || !sd->keep || !sd->ver) {
        sq_specdec_free(sd);
        return sq_error_oom(err, "speculative decoder buffers");
    }
    for (int i = 1; i < n; i++)
        sd->plan_kids[t->parent[i]]++;
    sq_context_params cp = sq_context_default_params();
    cp.max_context = sd->max_context;
    cp.backend = params->backend;
    cp.threads = params->threads;
    cp.dtype = params->dtype;
    cp.offload = params->offload;
    cp.max_pending = sd->dmaxp;
    rc = sq_context_new(draft, &cp, &sd->dctx, err);
    if (!rc) {
        cp.max_pending = sd->tmaxp;
        rc = sq_context_new(target, &cp, &sd->tctx, err);
    }
    if (rc) {
        sq_specdec_free(sd);
        return rc;
    }
    *out = sd;
    return SQ_OK;
}

int sq_specdec_vocab(const sq_specdec *sd)
{
    return sd->V;
}

int sq_specdec_max_context(const sq_specdec *sd)
{
    return sd->max_context;
}

int sq_specdec_depth(const sq_specdec *sd)
{
    return sd->D;
}

int sq_specdec_length(const sq_specdec *sd)
{
    return sd->len;
}

void sq_specdec_set_check_attention(sq_specdec *sd, int on)
{
    sd->prm.check_attention = on;
}

void sq_specdec_seed(sq_specdec *sd, uint64_t seed)
{
    sq_verifier_seed(sd->ver, seed);
}

void sq_specdec_set_grow(sq_specdec *sd, sq_grow_fn fn, void *user)
{
    sd->grow = fn ? fn : grow_plan;
    sd->grow_user = fn ? user : NULL;
}

void sq_specdec_set_prune(sq_specdec *sd, sq_prune_fn fn, void *user)
{
    sd->prune = fn;
    sd->prune_user = fn ? user : NULL;
}

void sq_step_info_clear(sq_step_info *info)
{
    if (!info)
        return;
    free(info->visit_children);
    free(info->visit_rank);
    info->visit_children = info->visit_rank = NULL;
    free(info->tree_parent);
    free(info->tree_token);
    free(info->tree_score);
    free(info->tree_path);
    info->tree_parent = info->tree_path = NULL;
    info->tree_token = NULL;
    info->tree_score = NULL;
    info->tree_n = info->tree_accepted = 0;
}

static int check_prompt(const sq_specdec *sd, const int32_t *prompt, int n, sq_error *err)
{
    if (n < 1)
        return sq_error_set(err, SQ_EDATA, "prompt: empty (at least one token is needed)");
    for (int i = 0; i < n; i++)
        if (prompt[i] < 0 || prompt[i] >= sd->V)
            return sq_error_set(err, SQ_EDATA,
                                "prompt: token %d: id %d is outside the vocabulary [0, %d)", i,
                                (int)prompt[i], sd->V);
    return SQ_OK;
}

int sq_specdec_start(sq_specdec *sd, const int32_t *prompt, int n, sq_error *err)
{
    int rc = check_prompt(sd, prompt, n, err);
    if (rc)
        return rc;
    if (n - 1 + sd->D > sd->max_context)
        return sq_error_set(err, SQ_EUSAGE,
                            "prompt: %d tokens plus a tree of depth %d exceed the context of %d "
                            "tokens", n, sd->D, sd->max_context);
    sd->started = 0;
    sq_context_reset(sd->dctx);
    sq_context_reset(sd->tctx);
    memcpy(sd->seq, prompt, (size_t)n * sizeof *prompt);
    sd->len = n;
    if ((rc = sq_prefill(sd->tctx, prompt, n - 1, sd->tmaxp, NULL, err)) ||
        (rc = sq_prefill(sd->dctx, prompt, n - 1, sd->dmaxp, NULL, err)))
        return rc;
    sd->started = 1;
    return SQ_OK;
}

static double target_temperature(const sq_specdec *sd)
{
    return sq_mode_target_temperature(sd->prm.mode, sd->prm.temperature);
}

/* The draft's distribution at node u (used by the sampled proposal modes). */
static const double *draft_q(sq_specdec *sd, int u)
{
    if (!sq_mode_is_sampled(sd->prm.mode))
        return NULL;
    sq_verifier_probs(sd->ver, sd->dlog + (size_t)u * sd->V, sd->prm.temperature, sd->prm.top_p,
                      sd->q);
    return sd->q;
}

/* ---- the tree of a step, grown by the hook ------------------------------------------------ */

int sq_tree_grow_level(const sq_tree_grow *g, int level, int *first)
{
    const sq_specdec *sd = g->sd;
    if (level < 0 || level > g->level + 1) {
        if (first)
            *first = sd->n;
        return 0;
    }
    int lo = sd->level_start[level];
    int hi = level <= g->level ? sd->level_start[level + 1] : sd->n;
    if (first)
        *first = lo;
    return hi - lo;
}

int sq_tree_grow_nodes(const sq_tree_grow *g)
{
    return g->sd->n;
}

int sq_tree_grow_capacity(const sq_tree_grow *g)
{
    return g->sd->cap;
}

int sq_tree_grow_max_depth(const sq_tree_grow *g)
{
    return g->sd->D;
}

int sq_tree_grow_vocab(const sq_tree_grow *g)
{
    return g->sd->V;
}

const sq_specdec_params *sq_tree_grow_params(const sq_tree_grow *g)
{
    return &g->sd->prm;
}

int sq_tree_grow_parent(const sq_tree_grow *g, int u)
{
    return u >= 0 && u < g->sd->n ? g->sd->parent[u] : -1;
}

int32_t sq_tree_grow_token(const sq_tree_grow *g, int u)
{
    return u >= 0 && u < g->sd->n ? g->sd->tok[u] : -1;
}

double sq_tree_grow_score(const sq_tree_grow *g, int u)
{
    return u >= 0 && u < g->sd->n ? g->sd->score[u] : 0.0;
}

int sq_tree_grow_expanded(const sq_tree_grow *g, int u)
{
    return u >= 0 && u < g->sd->n && g->sd->dslot[u] >= 0;
}

const float *sq_tree_grow_logits(const sq_tree_grow *g, int u)
{
    return sq_tree_grow_expanded(g, u) ? g->sd->dlog + (size_t)u * g->sd->V : NULL;
}

const double *sq_tree_grow_probs(sq_tree_grow *g, int u)
{
    sq_specdec *sd = g->sd;
    if (!sq_tree_grow_expanded(g, u))
        return NULL;
    sq_verifier_probs(sd->ver, sd->dlog + (size_t)u * sd->V, sd->prm.temperature, sd->prm.top_p,
                      sd->q);
    return sd->q;
}

sq_verifier *sq_tree_grow_verifier(sq_tree_grow *g)
{
    return g->sd->ver;
}

int sq_tree_grow_add(sq_tree_grow *g, int u, int k, sq_tree_children *out, sq_error *err)
{
    sq_specdec *sd = g->sd;
    const int l = g->level;
    if (k < 1)
        return sq_error_set(err, SQ_EUSAGE, "grow hook: level %d: node %d: %d children (at "
                            "least one)", l, u, k);
    if (u < sd->level_start[l] || u >= sd->level_start[l + 1])
        return sq_error_set(err, SQ_EUSAGE, "grow hook: level %d: node %d is not on the level "
                            "(nodes %d .. %d)", l, u, sd->level_start[l],
                            sd->level_start[l + 1] - 1);
    if (sd->dslot[u] < 0)
        return sq_error_set(err, SQ_EUSAGE, "grow hook: level %d: node %d was not read by the "
                            "draft (not expanded), so it cannot have children", l, u);
    if (u <= g->last)
        return sq_error_set(err, SQ_EUSAGE, "grow hook: level %d: node %d after node %d: nodes "
                            "get their children once each, in increasing order", l, u, g->last);
    if (k > sd->cap - sd->n)
        return sq_error_set(err, SQ_EUSAGE, "grow hook: level %d: node %d: %d more children "
                            "make %d nodes, more than the plan's %d", l, u, k, sd->n + k,
                            sd->cap);
    g->last = u;
    const int v0 = sd->n;
    sd->child_first[u] = v0;
    sd->child_count[u] = k;
    for (int v = v0; v < v0 + k; v++) {
        sd->parent[v] = u;
        sd->depth[v] = l + 1;
        sd->child_first[v] = -1;
        sd->child_count[v] = 0;
        sd->score[v] = 0.0;
        sd->expand[v] = 0;
        sd->dslot[v] = -1;
        sd->tok[v] = -1;
    }
    sd->n += k;
    *out = (sq_tree_children){v0, sd->tok + v0, sd->score + v0, sd->expand + v0};
    return SQ_OK;
}

/* The plan's rule, the default hook: node u of the level gets the plan's children of u,
 * proposed from u's draft distribution (sq_verifier_propose: the draft's top-k for greedy and
 * top-k, drawn without replacement for stochastic, with replacement for specinfer), and a
 * child is expanded when the plan gives it children. The step's tree is the plan's, node for
 * node (both breadth-first with contiguous children). */
static int grow_plan(sq_tree_grow *g, int level, void *user, sq_error *err)
{
    (void)user;
    sq_specdec *sd = g->sd;
    int first, cnt = sq_tree_grow_level(g, level, &first);
    for (int u = first; u < first + cnt; u++) {
        int k = sd->plan_kids[u];
        if (k == 0)
            continue;
        sq_tree_children ch;
        int rc = sq_tree_grow_add(g, u, k, &ch, err);
        if (rc)
            return rc;
        sq_verifier_propose(sd->ver, draft_q(sd, u), sd->dlog + (size_t)u * sd->V, k,
                            ch.tokens);
        for (int j = 0; j < k; j++)
            ch.expand[j] = sd->plan_kids[ch.first + j] > 0;
    }
    return SQ_OK;
}

/* A step's tree starts as the root, S[len-1]; the draft has read it (slot a - 1) unless the
 * plan is root-only (a = 0). */
static void tree_begin(sq_specdec *sd)
{
    sd->n = 1;
    sd->parent[0] = -1;
    sd->depth[0] = 0;
    sd->child_first[0] = -1;
    sd->child_count[0] = 0;
    sd->score[0] = 0.0;
    sd->expand[0] = sd->a > 0;
    sd->tok[0] = sd->seq[sd->len - 1];
    sd->dslot[0] = sd->a - 1;
    for (int l = 0; l <= sd->D; l++)
        sd->level_start[l] = l == 0 ? 0 : 1;
}

/* Calls the hook on level l (0 <= l < D - 1) of sd's tree, checks what it added, and lists in
 * keep[0 .. nfeed) the new nodes the draft reads next (the expanded ones, none on the deepest
 * level). */
static int tree_grow(sq_specdec *sd, int l, sq_error *err)
{
    sq_tree_grow *g = &sd->g;
    g->level = l;
    g->last = -1;
    const int v0 = sd->n;
    int rc = sd->grow(g, l, sd->grow_user, err);
    for (int m = l + 2; m <= sd->D; m++)
        sd->level_start[m] = sd->n;
    if (rc)
        return rc;
    sd->nfeed = 0;
    for (int v = v0; v < sd->n; v++) {
        if (sd->tok[v] < 0 || sd->tok[v] >= sd->V)
            return sq_error_set(err, SQ_EUSAGE, "grow hook: level %d: node %d: token %d is "
                                "outside the vocabulary [0, %d)", l, v, (int)sd->tok[v], sd->V);
        if (l + 2 >= sd->D)
            sd->expand[v] = 0;   /* the deepest level: leaves */
        if (sd->expand[v])
            sd->keep[sd->nfeed++] = v;
    }
    return SQ_OK;
}

/* Step 2b (specdec.h, the final pruning): the prune hook chooses the verified nodes of the
 * grown tree; the kept ones are renumbered breadth-first in their grown order (index map: old
 * index -> new, never larger, so one pass in increasing order moves every node's fields and
 * draft logits down in place) and the children and level tables are made again. */
static int tree_prune(sq_specdec *sd, sq_error *err)
{
    const int n = sd->n;
    sq_tree_grow *g = &sd->g;
    g->level = sd->D - 1;   /* every level answers sq_tree_grow_level */
    g->last = n;            /* no node takes children now */
    memset(sd->pkeep, 0, (size_t)n);
    int rc = sd->prune(g, sd->prune_user, sd->pkeep, err);
    if (rc)
        return rc;
    sd->pkeep[0] = 1;
    int m = 0;
    for (int v = 0; v < n; v++) {
        if (sd->pkeep[v] && v > 0 && !sd->pkeep[sd->parent[v]])
            return sq_error_set(err, SQ_EUSAGE, "prune hook: node %d is kept without its parent "
                                "%d (the kept nodes must be closed under ancestors)", v,
                                sd->parent[v]);
        sd->pmap[v] = sd->pkeep[v] ? m++ : -1;
    }
    const size_t Vs = (size_t)sd->V;
    for (int v = 0; v < n; v++) {
        int w = sd->pmap[v];
        if (w < 0)
            continue;
        sd->parent[w] = v > 0 ? sd->pmap[sd->parent[v]] : -1;
        sd->depth[w] = sd->depth[v];
        sd->tok[w] = sd->tok[v];
        sd->score[w] = sd->score[v];
        sd->expand[w] = sd->expand[v];
        sd->dslot[w] = sd->dslot[v];
        if (w != v && sd->dslot[v] >= 0)
            memcpy(sd->dlog + (size_t)w * Vs, sd->dlog + (size_t)v * Vs, Vs * sizeof(float));
    }
    for (int w = 0; w < m; w++) {
        sd->child_first[w] = -1;
        sd->child_count[w] = 0;
    }
    for (int w = 1; w < m; w++) {
        int p = sd->parent[w];
        if (sd->child_count[p]++ == 0)
            sd->child_first[p] = w;
    }
    for (int l = 0, w = 0; l <= sd->D; l++) {
        while (w < m && sd->depth[w] < l)
            w++;
        sd->level_start[l] = w;
    }
    sd->n = m;
    return SQ_OK;
}

/* With params.record_tree: the verified tree and the accepted path into info. */
static int record_tree(const sq_specdec *sd, sq_step_info *info, sq_error *err)
{
    const int n = sd->n, pl = sd->pl;
    int *par = realloc(info->tree_parent, (size_t)n * sizeof *par);
    if (par)
        info->tree_parent = par;
    int32_t *tok = realloc(info->tree_token, (size_t)n * sizeof *tok);
    if (tok)
        info->tree_token = tok;
    double *sc = realloc(info->tree_score, (size_t)n * sizeof *sc);
    if (sc)
        info->tree_score = sc;
    int *path = realloc(info->tree_path, (size_t)(pl > 0 ? pl : 1) * sizeof *path);
    if (path)
        info->tree_path = path;
    if (!par || !tok || !sc || !path)
        return sq_error_oom(err, "step tree record");
    memcpy(par, sd->parent, (size_t)n * sizeof *par);
    memcpy(tok, sd->tok, (size_t)n * sizeof *tok);
    memcpy(sc, sd->score, (size_t)n * sizeof *sc);
    memcpy(path, sd->path, (size_t)pl * sizeof *path);
    info->tree_n = n;
    info->tree_accepted = pl;
    return SQ_OK;
}

/* Plain causal forward of the target over every node's root path, compared with the tree
 * forward's logits (tlog). Leaves the target with nothing pending. */
static int check_attention(sq_specdec *sd, double *maxdiff, sq_error *err)
{
    int len = sd->len, V = sd->V;
    double worst = 0.0;
    float *row = malloc((size_t)sd->D * (size_t)sd->tV * sizeof *row);
    if (!row)
        return sq_error_oom(err, "attention check");
    int32_t dummy = 0;
    int rc = SQ_OK;
    for (int u = 0; u < sd->n && !rc; u++) {
        int m = sd->depth[u] + 1;
        for (int w = u, i = m - 1; w >= 0; w = sd->parent[w], i--) {
            sd->ftok[i] = sd->tok[w];
            sd->fpos[i] = len - 1 + i;
        }
        sq_causal_mask(sd->mask, m);
        rc = sq_context_forward(sd->tctx, sd->ftok, sd->fpos, sd->mask, m, row, err);
        if (!rc) {
            const float *a = row + (size_t)(m - 1) * sd->tV, *b = sd->tlog + (size_t)u * V;
            for (int x = 0; x < V; x++) {
                double d = fabs((double)a[x] - (double)b[x]);
                if (d > worst || isnan(d))
                    worst = isnan(d) ? INFINITY : d;
            }
            rc = sq_context_commit(sd->tctx, &dummy, 0, err);
        }
    }
    free(row);
    *maxdiff = worst;
    return rc;
}

/* Packs the first `rows` rows of the target's forward output in tlog, (rows, tV), to the shared
 * range, (rows, V) in place: the padding ids beyond V have no tokens, so neither the verifier
 * nor an argmax ever sees them (docs/runtime.md, "Vocabularies that differ by padding"). A
 * single row needs nothing: its first V columns are the shared range already. */
static void shared_rows(sq_specdec *sd, int rows)
{
    if (sd->tV == sd->V)
        return;
    for (int r = 1; r < rows; r++)
        memmove(sd->tlog + (size_t)r * sd->V, sd->tlog + (size_t)r * sd->tV,
                (size_t)sd->V * sizeof(float));
}

/* Tokens, positions and ancestor-or-self mask of the whole tree for the target. */
static void tree_inputs(sq_specdec *sd, int len)
{
    int n = sd->n;
    memset(sd->mask, 0, (size_t)n * (size_t)n);
    for (int u = 0; u < n; u++) {
        sd->ftok[u] = sd->tok[u];
        sd->fpos[u] = len - 1 + sd->depth[u];
        for (int w = u; w >= 0; w = sd->parent[w])
            sd->mask[(size_t)u * n + w] = 1;
    }
}

/* Step 4: the verifier's walk from the root over the target logits in sd->tlog. Writes the
 * accepted tokens and the bonus token to out (sd->cnt of them) and the accepted nodes to
 * sd->path (sd->pl of them); records the visits in info when given. */
/* A logit that is NaN or infinite stops the run (SQ_EDATA, issue 27 W5): a verifier fed with
 * the target's would accept garbage, and greedy decoding would agree with itself; the draft's
 * would propose garbage that looks like a poor acceptance rate (docs/robustness.md). */
int sq_logits_check_finite(const char *model, const float *row, int V, long long position,
                           sq_error *err)
{
    /* Every row decoding uses goes through here, so it runs on the hot path: blocks of 64
     * values count the exponents of all ones (NaN and infinities) without a branch, which the
     * compiler vectorises (about 0.1 ns a value against 0.4 for a loop that stops at the first,
     * on this AMD EPYC at -O2); only a block that has one is searched value by value. */
    int x0 = 0, bad = -1;
    for (; x0 + 64 <= V && bad < 0; x0 += 64) {
        int n = 0;
        for (int x = x0; x < x0 + 64; x++) {
            uint32_t u;
            memcpy(&u, row + x, sizeof u);
            n += (u & 0x7f800000u) == 0x7f800000u;
        }
        if (n)
            bad = x0;
    }
    for (int x = bad >= 0 ? bad : x0; x < V; x++)
        if (!isfinite(row[x]))
            return sq_error_set(err, SQ_EDATA, "the %s's logit of token %d at position %lld "
                                "is %s; its weights (or activations) are not finite", model, x,
                                position, isnan(row[x]) ? "NaN" : "infinite");
    return SQ_OK;
}

static int check_finite(const sq_specdec *sd, int u, sq_error *err)
{
    return sq_logits_check_finite("target", sd->tlog + (size_t)u * (size_t)sd->V, sd->V,
                                  sd->len - 1 + sd->depth[u], err);
}

static int verify_walk(sq_specdec *sd, int32_t *out, sq_step_info *info, sq_error *err)
{
    size_t Vs = (size_t)sd->V;
    int u = 0, cnt = 0, pl = 0;
    if (info) {
        if (!info->visit_children)
            info->visit_children = malloc((size_t)sd->D * sizeof(int));
        if (!info->visit_rank)
            info->visit_rank = malloc((size_t)sd->D * sizeof(int));
        if (!info->visit_children || !info->visit_rank)
            return sq_error_oom(err, "step info");
    }
    for (;;) {
        int rc = check_finite(sd, u, err);
        if (rc)
            return rc;
        sq_verifier_probs(sd->ver, sd->tlog + (size_t)u * Vs, target_temperature(sd),
                          sd->prm.top_p, sd->p);
        int k = sd->child_count[u];
        const double *q = k > 0 ? draft_q(sd, u) : NULL;
        int32_t bonus = -1;
        int j = sq_verifier_node(sd->ver, sd->p, q, k ? sd->tok + sd->child_first[u] : NULL, k,
                                 &bonus);
        if (info) {
            info->visit_children[cnt] = k;
            info->visit_rank[cnt] = j + 1;
        }
        if (j < 0) {
            out[cnt++] = bonus;
            break;
        }
        u = sd->child_first[u] + j;
        sd->path[pl++] = u;
        out[cnt++] = sd->tok[u];
    }
    sd->cnt = cnt;
    sd->pl = pl;
    return SQ_OK;
}

/* Step 5: keeps only the accepted path in both caches (the draft keeps its a catch-up tokens
 * and the accepted nodes it ran) and appends the cnt output tokens to the sequence. */
static int commit_walk(sq_specdec *sd, const int32_t *out, sq_error *err)
{
    int rc, a = sd->a, cnt = sd->cnt, pl = sd->pl;
    sd->keep[0] = 0;
    for (int i = 0; i < pl; i++)
        sd->keep[1 + i] = sd->path[i];
    if ((rc = sq_context_commit(sd->tctx, sd->keep, 1 + pl, err)))
        return rc;
    int nk = 0;
    for (int i = 0; i < a; i++)
        sd->keep[nk++] = i;
    for (int i = 0; i < pl && sd->dslot[sd->path[i]] >= 0; i++)
        sd->keep[nk++] = sd->dslot[sd->path[i]];
    if ((rc = sq_context_commit(sd->dctx, sd->keep, nk, err)))
        return rc;
    memcpy(sd->seq + sd->len, out, (size_t)cnt * sizeof *out);
    sd->len += cnt;
    return SQ_OK;
}

/* One forward over seqs[0 .. f) (f may be 0): the plain forward for one sequence, else one
 * batched forward. */
static int forward_seqs(sq_batch_seq *seqs, int f, sq_error *err)
{
    if (f == 1)
        return sq_context_forward(seqs[0].ctx, seqs[0].tokens, seqs[0].pos, seqs[0].mask,
                                  seqs[0].n, seqs[0].logits, err);
    return f > 0 ? sq_context_forward_batch(seqs, f, err) : SQ_OK;
}

/* SQ_EUSAGE when sd's context has no room for another tree; `who` starts the message. */
static int check_room(const sq_specdec *sd, const char *who, sq_error *err)
{
    SQ_ASSERT(sd->started);
    if (sd->len - 1 + sd->D > sd->max_context)
        return sq_error_set(err, SQ_EUSAGE, "%scontext full: %d tokens plus a tree of depth %d "
                            "exceed %d", who, sd->len, sd->D, sd->max_context);
    return SQ_OK;
}

/* The step (steps 1-5 of specdec.h) of m >= 1 started decoders with room for a tree, in
 * lockstep: every forward is one forward over the sequences that have tokens to feed
 * (forward_seqs), everything else is per sequence. out[i] (capacity: the depth) receives
 * ntok[i] tokens; info[i] may be NULL. seqs: (m) scratch. m = 1 is sq_specdec_step. */
static int step_body(sq_specdec *const *sds, int m, sq_batch_seq *seqs, int32_t *const *out,
                     int *ntok, sq_step_info *const *info, sq_error *err)
{
    int D = 0, rc, f;
    for (int i = 0; i < m; i++)
        D = sds[i]->D > D ? sds[i]->D : D;
    double t0 = now_ms(), dfwd = 0.0, tf;

    /* 1. every draft catches up: S[dc .. len-1], the root last, in one forward. A root-only
     * plan is plain decoding with the target: the draft is never needed, so it is never run. */
    f = 0;
    for (int i = 0; i < m; i++) {
        sq_specdec *sd = sds[i];
        int dcom = sq_context_committed(sd->dctx);
        int a = sd->cap > 1 ? sd->len - dcom : 0;
        SQ_ASSERT(sd->cap == 1 || (a >= 1 && a + sd->cap <= sd->dmaxp));
        sd->a = a;
        for (int r = 0; r < a; r++) {
            sd->ftok[r] = sd->seq[dcom + r];
            sd->fpos[r] = dcom + r;
        }
        sq_causal_mask(sd->mask, a);
        if (a > 0)
            seqs[f++] = (sq_batch_seq){sd->dctx, sd->ftok, sd->fpos, sd->mask, a, sd->dbuf};
    }
    tf = now_ms();
    if ((rc = forward_seqs(seqs, f, err)))
        return rc;
    dfwd += f > 0 ? now_ms() - tf : 0.0;
    for (int i = 0; i < m; i++) {
        sq_specdec *sd = sds[i];
        size_t Vs = (size_t)sd->V;
        if (sd->a > 0) {
            memcpy(sd->dlog, sd->dbuf + (size_t)(sd->a - 1) * sd->dV, Vs * sizeof(float));
            if ((rc = sq_logits_check_finite("draft", sd->dlog, sd->V, sd->len - 1, err)))
                return rc;
        }
        tree_begin(sd);
        sd->pd = sd->a;
        sd->nfeed = sd->a > 0;   /* the root, read */
    }

    /* 2. the trees grow level by level: the hook gives the nodes of level l their children
     * from their draft distributions, then one forward over every sequence's expanded nodes
     * of level l + 1 (tree mask over the pending tokens) yields their distributions */
    for (int l = 0; l + 1 < D; l++) {
        f = 0;
        for (int i = 0; i < m; i++) {
            sq_specdec *sd = sds[i];
            if (sd->nfeed == 0)
                continue;   /* no node of level l was read: its tree is done */
            if ((rc = tree_grow(sd, l, err)))
                return rc;
            int mm = sd->nfeed, pd = sd->pd, a = sd->a, width = pd + mm;
            if (mm == 0)
                continue;
            memset(sd->mask, 0, (size_t)mm * (size_t)width);
            for (int r = 0; r < mm; r++) {
                int u = sd->keep[r];
                uint8_t *row = sd->mask + (size_t)r * width;
                sd->ftok[r] = sd->tok[u];
                sd->fpos[r] = sd->len - 1 + l + 1;
                for (int j = 0; j < a; j++)
                    row[j] = 1;   /* the caught-up tokens end with the root */
                for (int w = sd->parent[u]; w > 0; w = sd->parent[w])
                    row[sd->dslot[w]] = 1;
                row[pd + r] = 1;
            }
            seqs[f++] = (sq_batch_seq){sd->dctx, sd->ftok, sd->fpos, sd->mask, mm, sd->dbuf};
        }
        if (f == 0)
            break;
        tf = now_ms();
        if ((rc = forward_seqs(seqs, f, err)))
            return rc;
        dfwd += now_ms() - tf;
        for (int i = 0; i < m; i++) {
            sq_specdec *sd = sds[i];
            size_t Vs = (size_t)sd->V;
            for (int r = 0; r < sd->nfeed; r++) {
                int u = sd->keep[r];
                memcpy(sd->dlog + (size_t)u * Vs, sd->dbuf + (size_t)r * sd->dV,
                       Vs * sizeof(float));
                if ((rc = sq_logits_check_finite("draft", sd->dlog + (size_t)u * Vs, sd->V,
                                                 sd->fpos[r], err)))
                    return rc;
                sd->dslot[u] = sd->pd + r;
            }
            sd->pd += sd->nfeed;
        }
    }
    /* 2b. a prune hook chooses the nodes the target verifies */
    for (int i = 0; i < m; i++)
        if (sds[i]->prune && (rc = tree_prune(sds[i], err)))
            return rc;
    double t1 = now_ms();

    /* 3. the targets read their whole trees in one forward */
    for (int i = 0; i < m; i++) {
        sq_specdec *sd = sds[i];
        tree_inputs(sd, sd->len);
        seqs[i] = (sq_batch_seq){sd->tctx, sd->ftok, sd->fpos, sd->mask, sd->n, sd->tlog};
    }
    tf = now_ms();
    if ((rc = forward_seqs(seqs, m, err)))
        return rc;
    double tfwd = now_ms() - tf;
    for (int i = 0; i < m; i++)
        shared_rows(sds[i], sds[i]->n);
    double *attn = NULL;
    for (int i = 0; i < m; i++) {
        sq_specdec *sd = sds[i];
        if (!sd->prm.check_attention)
            continue;
        if (!attn && !(attn = calloc((size_t)m, sizeof *attn)))
            return sq_error_oom(err, "attention check");
        /* a plain forward needs nothing pending: drop the tree, compare, read it again */
        int32_t dummy = 0;
        if ((rc = sq_context_commit(sd->tctx, &dummy, 0, err)) ||
            (rc = check_attention(sd, &attn[i], err)))
            break;
        tree_inputs(sd, sd->len);
        if ((rc = sq_context_forward(sd->tctx, sd->ftok, sd->fpos, sd->mask, sd->n, sd->tlog,
                                     err)))
            break;
        shared_rows(sd, sd->n);
    }
    double t2 = now_ms();

    /* 4. verification from the root, per sequence */
    for (int i = 0; i < m && !rc; i++) {
        rc = verify_walk(sds[i], out[i], info[i], err);
        if (!rc && info[i] && sds[i]->prm.record_tree)
            rc = record_tree(sds[i], info[i], err);
    }
    double t3 = now_ms();

    /* 5. every sequence keeps only its accepted path */
    for (int i = 0; i < m && !rc; i++)
        rc = commit_walk(sds[i], out[i], err);
    double t4 = now_ms();

    for (int i = 0; i < m && !rc; i++) {
        ntok[i] = sds[i]->cnt;
        sq_step_info *in = info[i];
        if (!in)
            continue;
        in->tokens = sds[i]->cnt;
        in->visits = sds[i]->cnt;
        in->nodes = sds[i]->n;
        in->draft_catchup = sds[i]->a;
        in->draft_ms = t1 - t0;
        in->target_ms = t2 - t1;
        in->verify_ms = t3 - t2;
        in->draft_forward_ms = dfwd;
        in->target_forward_ms = tfwd;
        in->commit_ms = t4 - t3;
        in->step_ms = t4 - t0;
        in->attn_max_diff = attn ? attn[i] : 0.0;
    }
    free(attn);
    return rc;
}

/* ---- groups: B decoders in lockstep (a batch; B = 1 is the single decoder) ----------------- */

/* One step of every decoder k < B with active[k] != 0 (NULL: all), as sq_specdec_batch_step
 * says; `named`: messages name the sequence. */
static int steps_of(sq_specdec *const *sds, int B, const int *active, int32_t *const *out,
                    int *ntok, sq_step_info *info, int named, sq_error *err)
{
    sq_specdec *one_sd;
    int32_t *one_out;
    sq_step_info *one_info;
    sq_batch_seq one_seq;
    int one_ntok, one_k;
    sq_specdec **act = &one_sd;
    int32_t **outs = &one_out;
    sq_step_info **infos = &one_info;
    sq_batch_seq *seqs = &one_seq;
    int *nt = &one_ntok, *idx = &one_k;
    if (B > 1) {
        act = malloc((size_t)B * sizeof *act);
        outs = malloc((size_t)B * sizeof *outs);
        infos = malloc((size_t)B * sizeof *infos);
        seqs = malloc((size_t)B * sizeof *seqs);
        nt = malloc((size_t)B * sizeof *nt);
        idx = malloc((size_t)B * sizeof *idx);
    }
    int rc = SQ_OK, m = 0;
    if (!act || !outs || !infos || !seqs || !nt || !idx) {
        rc = sq_error_oom(err, "a batch step");
        goto end;
    }
    for (int k = 0; k < B; k++) {
        ntok[k] = 0;
        if (active && !active[k])
            continue;
        char who[48] = "";
        if (named)
            snprintf(who, sizeof who, "sequence %d: ", k);
        if ((rc = check_room(sds[k], who, err)))
            goto end;
        act[m] = sds[k];
        outs[m] = out[k];
        infos[m] = info ? &info[k] : NULL;
        idx[m++] = k;
    }
    if (m > 0 && !(rc = step_body(act, m, seqs, outs, nt, infos, err)))
        for (int i = 0; i < m; i++)
            ntok[idx[i]] = nt[i];
end:
    if (B > 1) {
        free(act);
        free(outs);
        free(infos);
        free(seqs);
        free(nt);
        free(idx);
    }
    return rc;
}

/* sq_specdec_batch_generate over B decoders; step_tokens, when not NULL, is (B, max_new): the
 * tokens of each of sequence k's steps at step_tokens + k * max_new. */
/* An end-of-sequence id of these parameters (sq_specdec_params.eos)? */
static int is_eos(const sq_specdec_params *p, int32_t id)
{
    for (int i = 0; i < p->n_eos; i++)
        if (p->eos[i] == id)
            return 1;
    return 0;
}

static int generate_of(sq_specdec *const *sds, int B, const int32_t *const *prompts,
                       const int *n, int max_new, int32_t *const *out, int *steps,
                       int *batch_steps, int *step_tokens, sq_step_info *infos, int named,
                       sq_error *err)
{
    *batch_steps = 0;
    for (int k = 0; k < B; k++) {
        steps[k] = 0;
        sq_specdec *sd = sds[k];
        if (n[k] + max_new - 1 + sd->D > sd->max_context) {
            char who[48] = "";
            if (named)
                snprintf(who, sizeof who, "sequence %d: ", k);
            return sq_error_set(err, SQ_EUSAGE,
                                "%sprompt of %d tokens + %d new tokens - 1 + a tree of depth "
                                "%d = %d exceed the context of %d tokens (the last step's tree "
                                "sits on all but the last new token)", who, n[k], max_new, sd->D,
                                n[k] + max_new - 1 + sd->D, sd->max_context);
        }
    }
    int rc;
    for (int k = 0; k < B; k++)
        if ((rc = sq_specdec_start(sds[k], prompts[k], n[k], err)))
            return rc;
    int D = 0;
    for (int k = 0; k < B; k++)
        D = sds[k]->D > D ? sds[k]->D : D;
    int *active = malloc((size_t)B * sizeof *active), *done = calloc((size_t)B, sizeof *done);
    int *ntok = malloc((size_t)B * sizeof *ntok);
    int32_t *buf = malloc((size_t)B * (size_t)D * sizeof *buf);
    int32_t **bufs = malloc((size_t)B * sizeof *bufs);
    sq_step_info *si = calloc((size_t)B, sizeof *si);
    if (!active || !done || !ntok || !buf || !bufs || !si) {
        rc = sq_error_oom(err, "batch step buffers");
        goto end;
    }
    for (int k = 0; k < B; k++) {
        active[k] = 1;
        bufs[k] = buf + (size_t)k * D;
    }
    for (int running = B; running > 0;) {
        sq_step_info *info = NULL;
        if (infos) {
            for (int k = 0; k < B; k++)
                si[k] = active[k] ? infos[(size_t)k * max_new + steps[k]] : (sq_step_info){0};
            info = si;
        }
        if ((rc = steps_of(sds, B, active, bufs, ntok, info, named, err))) {
            /* the failed step's arrays go back to the caller, who frees every info */
            if (infos)
                for (int k = 0; k < B; k++)
                    if (active[k])
                        infos[(size_t)k * max_new + steps[k]] = si[k];
            break;
        }
        (*batch_steps)++;
        for (int k = 0; k < B; k++) {
            if (!active[k])
                continue;
            if (infos)
                infos[(size_t)k * max_new + steps[k]] = si[k];
            if (step_tokens)
                step_tokens[(size_t)k * max_new + steps[k]] = ntok[k];
            steps[k]++;
            int stop = 0;
            for (int i = 0; i < ntok[k] && done[k] < max_new && !stop; i++) {
                out[k][done[k]++] = bufs[k][i];
                stop = is_eos(&sds[k]->prm, bufs[k][i]);
            }
            if (done[k] == max_new || stop) {
                for (int i = done[k]; i < max_new; i++)
                    out[k][i] = SQ_SPECDEC_NO_TOKEN;
                active[k] = 0;
                running--;
            }
        }
    }
end:
    free(active);
    free(done);
    free(ntok);
    free(buf);
    free(bufs);
    free(si);
    return rc;
}

/* sq_specdec_batch_autoregressive over B decoders. */
static int autoregressive_of(sq_specdec *const *sds, int B, const int32_t *const *prompts,
                             const int *n, int max_new, uint64_t seed, int32_t *const *out,
                             int named, sq_error *err)
{
    int rc;
    for (int k = 0; k < B; k++) {
        sq_specdec *sd = sds[k];
        if ((rc = check_prompt(sd, prompts[k], n[k], err)))
            return rc;
        if (n[k] + max_new > sd->max_context) {
            char who[48] = "";
            if (named)
                snprintf(who, sizeof who, "sequence %d: ", k);
            return sq_error_set(err, SQ_EUSAGE, "%sprompt of %d tokens + %d new tokens exceed "
                                "the context of %d tokens", who, n[k], max_new, sd->max_context);
        }
        sd->started = 0;
        sq_context_reset(sd->tctx);
        if ((rc = sq_prefill(sd->tctx, prompts[k], n[k] - 1, sd->tmaxp, NULL, err)))
            return rc;
        sq_verifier_seed(sd->ver, sq_specdec_batch_seed_of(seed, k));
        sd->ftok[0] = prompts[k][n[k] - 1];
        sd->mask[0] = 1;
    }
    sq_batch_seq one, *seqs = B > 1 ? malloc((size_t)B * sizeof *seqs) : &one;
    int onex, *run = B > 1 ? malloc((size_t)B * sizeof *run) : &onex;   /* not stopped */
    if (!seqs || !run) {
        if (seqs != &one)
            free(seqs);
        if (run != &onex)
            free(run);
        return sq_error_oom(err, "a batch step");
    }
    int32_t zero = 0;
    rc = SQ_OK;
    int m = B;
    for (int k = 0; k < B; k++)
        run[k] = k;
    for (int i = 0; i < max_new && !rc && m > 0; i++) {
        for (int r = 0; r < m; r++) {
            sq_specdec *sd = sds[run[r]];
            sd->fpos[0] = n[run[r]] - 1 + i;
            seqs[r] = (sq_batch_seq){sd->tctx, sd->ftok, sd->fpos, sd->mask, 1, sd->tlog};
        }
        if ((rc = forward_seqs(seqs, m, err)))
            break;
        int kept = 0;
        for (int r = 0; r < m && !rc; r++) {
            int k = run[r];
            sq_specdec *sd = sds[k];
            if ((rc = sq_context_commit(sd->tctx, &zero, 1, err)))
                break;
            int32_t next;
            if (sd->prm.mode == SQ_MODE_GREEDY) {
                next = sq_argmax_f(sd->tlog, sd->V);
            } else {
                sq_verifier_probs(sd->ver, sd->tlog, sd->prm.temperature, sd->prm.top_p, sd->p);
                next = sq_verifier_sample(sd->ver, sd->p);
            }
            out[k][i] = next;
            sd->ftok[0] = next;
            if (is_eos(&sd->prm, next)) {   /* stopped: the rest of its row is empty */
                for (int j = i + 1; j < max_new; j++)
                    out[k][j] = SQ_SPECDEC_NO_TOKEN;
            } else {
                run[kept++] = k;
            }
        }
        m = kept;
    }
    if (seqs != &one)
        free(seqs);
    if (run != &onex)
        free(run);
    return rc;
}

/* ---- one decoder: the group of one ---------------------------------------------------------- */

int sq_specdec_step(sq_specdec *sd, int32_t *out, sq_step_info *info, sq_error *err)
{
    int ntok;
    return steps_of(&sd, 1, NULL, &out, &ntok, info, 0, err);
}

int sq_specdec_step_group(sq_specdec *const *sd, int B, const int *active, int32_t *const *out,
                          int *ntok, sq_step_info *info, sq_error *err)
{
    if (B < 1)
        return sq_error_set(err, SQ_EUSAGE, "step group: needs at least one decoder (got %d)", B);
    return steps_of(sd, B, active, out, ntok, info, B > 1, err);
}

int sq_specdec_generate(sq_specdec *sd, const int32_t *prompt, int n, int max_new, int32_t *out,
                        int *step_tokens, int *steps, sq_step_info *infos, sq_error *err)
{
    int bsteps;
    return generate_of(&sd, 1, &prompt, &n, max_new, &out, steps, &bsteps, step_tokens, infos,
                       0, err);
}

int sq_specdec_autoregressive(sq_specdec *sd, const int32_t *prompt, int n, int max_new,
                              uint64_t seed, int32_t *out, sq_error *err)
{
    return autoregressive_of(&sd, 1, &prompt, &n, max_new, seed, &out, 0, err);
}

int sq_specdec_target_probs(sq_specdec *sd, const int32_t *ctx, int n, double *probs,
                            sq_error *err)
{
    int rc = check_prompt(sd, ctx, n, err);
    if (rc)
        return rc;
    if (n > sd->max_context)
        return sq_error_set(err, SQ_EUSAGE, "%d tokens exceed the context of %d tokens", n,
                            sd->max_context);
    sd->started = 0;
    sq_context_reset(sd->tctx);
    if ((rc = sq_prefill(sd->tctx, ctx, n - 1, sd->tmaxp, NULL, err)))
        return rc;
    int32_t last = ctx[n - 1], pos = n - 1, zero = 0;
    uint8_t one = 1;
    if ((rc = sq_context_forward(sd->tctx, &last, &pos, &one, 1, sd->tlog, err)) ||
        (rc = sq_context_commit(sd->tctx, &zero, 0, err)))
        return rc;
    sq_verifier_probs(sd->ver, sd->tlog, target_temperature(sd), sd->prm.top_p, probs);
    return SQ_OK;
}

/* ---- batches: B decoders that step together ------------------------------------------------ */

struct sq_specdec_batch {
    int           B;
    sq_specdec  **sd;      /* (B)                                                          */
};

uint64_t sq_specdec_batch_seed_of(uint64_t seed, int k)
{
    /* k = 0 keeps the seed itself: a batch of one is the plain decoder */
    return k == 0 ? seed : seed ^ ((uint64_t)k * 0x9E3779B97F4A7C15ull);
}

double sq_specdec_batch_bytes(const sq_model *draft, const sq_model *target, const sq_plan *plan,
                              const sq_specdec_params *params, int B)
{
    const sq_model_config *dc = sq_model_get_config(draft), *tc = sq_model_get_config(target);
    int n = plan->tree->n, D = sq_tree_depth(plan->tree);
    int maxpos = dc->max_position < tc->max_position ? dc->max_position : tc->max_position;
    double mc = params->max_context > 0 ? params->max_context : maxpos;
    double tmaxp = n > PREFILL_CHUNK ? n : PREFILL_CHUNK;
    double dmaxp = n + D + 2 > PREFILL_CHUNK ? n + D + 2 : PREFILL_CHUNK;
    double mp = tmaxp > dmaxp ? tmaxp : dmaxp;
    double V = tc->vocab_size > dc->vocab_size ? tc->vocab_size : dc->vocab_size;
    double one = sq_cpu_context_bytes(tc, (int)mc, (int)tmaxp, params->threads) +
                 sq_cpu_context_bytes(dc, (int)mc, (int)dmaxp, params->threads) +
                 ((double)n + tmaxp + dmaxp) * V * sizeof(float) + mp * mp +
                 (mc + D) * sizeof(int32_t);
    /* the batched forwards' scratch: every row of the batch through both models */
    double batch = sq_cpu_batch_bytes(tc, B * tmaxp) + sq_cpu_batch_bytes(dc, B * dmaxp);
    return B * one + batch;
}

void sq_specdec_batch_free(sq_specdec_batch *bt)
{
    if (!bt)
        return;
    if (bt->sd)
        for (int k = 0; k < bt->B; k++)
            sq_specdec_free(bt->sd[k]);
    free(bt->sd);
    free(bt);
}

int sq_specdec_batch_new(const sq_model *draft, const sq_model *target, const sq_plan *plan,
                         const sq_specdec_params *params, const char *plan_file, int B,
                         sq_specdec_batch **out, sq_error *err)
{
    *out = NULL;
    if (B < 1)
        return sq_error_set(err, SQ_EUSAGE, "batch %d: needs at least one sequence", B);
    int rc0 = check_new(draft, target, plan, params, plan_file, err);
    if (rc0)
        return rc0;
    /* past the machine's memory: refused up front, with what it would take */
    double need = sq_specdec_batch_bytes(draft, target, plan, params, B);
    int mrc = sq_memory_check(need, err, "use a smaller batch or --context", "batch %d: %d "
                              "sequences need %.0f bytes (%.2f GiB) of KV caches, logit buffers "
                              "and scratch", B, B, need, need / (1 << 30));
    if (mrc)
        return mrc;
    sq_specdec_batch *bt = calloc(1, sizeof *bt);
    if (!bt)
        return sq_error_oom(err, "a batch");
    bt->B = B;
    bt->sd = calloc((size_t)B, sizeof *bt->sd);
    if (!bt->sd) {
        sq_specdec_batch_free(bt);
        return sq_error_oom(err, "a batch");
    }
    for (int k = 0; k < B; k++) {
        sq_specdec_params pk = *params;
        pk.seed = sq_specdec_batch_seed_of(params->seed, k);
        int rc = sq_specdec_new(draft, target, plan, &pk, plan_file, &bt->sd[k], err);
        if (rc) {
            sq_specdec_batch_free(bt);
            return rc;
        }
    }
    if (B > 1 && (!sq_context_can_batch(bt->sd[0]->tctx) || !sq_context_can_batch(bt->sd[0]->dctx))) {
        sq_specdec_batch_free(bt);
        return sq_error_set(err, SQ_EUSAGE, "batch %d: the %s backend has no batched forward yet "
                            "(use --backend cpu, or batch 1)", B,
                            params->backend == SQ_BACKEND_CUDA ? "CUDA" : "chosen");
    }
    if (params->check_attention) {
        sq_specdec_batch_free(bt);
        return sq_error_set(err, SQ_EUSAGE, "a batch does not run the per-step attention check "
                            "(check it with batch 1)");
    }
    *out = bt;
    return SQ_OK;
}

int sq_specdec_batch_size(const sq_specdec_batch *bt)
{
    return bt->B;
}

sq_specdec *sq_specdec_batch_member(sq_specdec_batch *bt, int k)
{
    return k >= 0 && k < bt->B ? bt->sd[k] : NULL;
}

void sq_specdec_batch_seed(sq_specdec_batch *bt, uint64_t seed)
{
    for (int k = 0; k < bt->B; k++)
        sq_specdec_seed(bt->sd[k], sq_specdec_batch_seed_of(seed, k));
}

void sq_specdec_batch_set_grow(sq_specdec_batch *bt, sq_grow_fn fn, void *user)
{
    for (int k = 0; k < bt->B; k++)
        sq_specdec_set_grow(bt->sd[k], fn, user);
}

void sq_specdec_batch_set_prune(sq_specdec_batch *bt, sq_prune_fn fn, void *user)
{
    for (int k = 0; k < bt->B; k++)
        sq_specdec_set_prune(bt->sd[k], fn, user);
}

int sq_specdec_batch_start(sq_specdec_batch *bt, const int32_t *const *prompts, const int *n,
                           sq_error *err)
{
    for (int k = 0; k < bt->B; k++) {
        int rc = sq_specdec_start(bt->sd[k], prompts[k], n[k], err);
        if (rc)
            return rc;
    }
    return SQ_OK;
}

int sq_specdec_batch_step(sq_specdec_batch *bt, const int *active, int32_t *const *out,
                          int *ntok, sq_step_info *info, sq_error *err)
{
    return steps_of(bt->sd, bt->B, active, out, ntok, info, 1, err);
}

int sq_specdec_batch_generate(sq_specdec_batch *bt, const int32_t *const *prompts, const int *n,
                              int max_new, int32_t *const *out, int *steps, int *batch_steps,
                              sq_step_info *infos, sq_error *err)
{
    return generate_of(bt->sd, bt->B, prompts, n, max_new, out, steps, batch_steps, NULL, infos,
                       1, err);
}

int sq_specdec_batch_autoregressive(sq_specdec_batch *bt, const int32_t *const *prompts,
                                    const int *n, int max_new, uint64_t seed,
                                    int32_t *const *out, sq_error *err)
{
    return autoregressive_of(bt->sd, bt->B, prompts, n, max_new, seed, out, 1, err);
}
