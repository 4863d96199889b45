/* Tree speculative decoding (docs/design.md §8); see specdec.h for the protocol. */
#include "runtime/specdec.h"
#include "runtime/memory.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <time.h>

#define PREFILL_CHUNK 128

struct sq_specdec {
    const sq_model   *draft, *target;
    sq_context       *dctx, *tctx;
    sq_specdec_params prm;
    int               V;
    int               max_context;
    sq_verifier      *ver;
    /* the tree */
    int      n, D;
    int     *parent;       /* (n)                                                   */
    int     *depth;        /* (n)                                                   */
    int     *child_first;  /* (n) first child's index, -1 for a leaf                */
    int     *child_count;  /* (n)                                                   */
    int     *level_start;  /* (D + 1) nodes of level l: [level_start[l], level_start[l+1]) */
    /* the sequence */
    int32_t *seq;          /* (max_context + D) prompt + generated                   */
    int      len;
    int      started;
    /* per step */
    int32_t *tok;          /* (n) node tokens                                       */
    int     *dslot;        /* (n) the node's pending slot in the draft, -1: not fed */
    int     *path;         /* (D) accepted nodes below the root                     */
    float   *dlog;         /* (n, V) draft logits of the nodes fed to the draft      */
    int      tmaxp, dmaxp; /* pending capacity of the target and draft contexts      */
    float   *tlog;         /* (tmaxp, V) target logits                              */
    float   *dbuf;         /* (dmaxp, V) draft forward output                       */
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
    free(sd->parent);
    free(sd->depth);
    free(sd->child_first);
    free(sd->child_count);
    free(sd->level_start);
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

int sq_specdec_new(const sq_model *draft, const sq_model *target, const sq_plan *plan,
                   const sq_specdec_params *params, const char *plan_file, sq_specdec **out,
                   sq_error *err)
{
    *out = NULL;
    const sq_model_config *dc = sq_model_get_config(draft), *tc = sq_model_get_config(target);
    if (dc->vocab_size != tc->vocab_size)
        return sq_error_set(err, SQ_EDATA,
                            "draft and target vocabularies differ: vocab_size %d (draft) vs %d "
                            "(target)", dc->vocab_size, tc->vocab_size);
    const sq_tree *t = plan->tree;
    int V = tc->vocab_size;
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

    sq_specdec *sd = calloc(1, sizeof *sd);
    if (!sd)
        return sq_error_oom(err, "speculative decoder");
    sd->draft = draft;
    sd->target = target;
    sd->prm = *params;
    sd->V = V;
    int n = t->n, D = sq_tree_depth(t);
    sd->n = n;
    sd->D = D;
    int maxpos = dc->max_position < tc->max_position ? dc->max_position : tc->max_position;
    sd->max_context = params->max_context > 0 ? params->max_context : maxpos;
    if (maxpos > 0 && sd->max_context > maxpos) {
        sq_specdec_free(sd);
        return sq_error_set(err, SQ_EUSAGE,
                            "context %d exceeds the models' max_position_embeddings %d",
                            params->max_context, maxpos);
    }
    if (sd->max_context < D + 1) {
        int mc = sd->max_context;
        sq_specdec_free(sd);
        return sq_error_set(err, SQ_EUSAGE, "context %d cannot hold a tree of depth %d", mc, D);
    }
    sd->tmaxp = n > PREFILL_CHUNK ? n : PREFILL_CHUNK;
    sd->dmaxp = n + D + 2 > PREFILL_CHUNK ? n + D + 2 : PREFILL_CHUNK;
    int mp = sd->tmaxp > sd->dmaxp ? sd->tmaxp : sd->dmaxp;
    size_t Vs = (size_t)V;
    /* A huge plan (up to 2^20 nodes) times a large vocabulary is refused up front rather than
     * swapped or OOM-killed: the logit buffers and the tree mask against physical memory. */
    double need = ((double)n + sd->tmaxp + sd->dmaxp) * (double)Vs * sizeof(float) +
                  (double)mp * (double)mp;
    int mrc = sq_memory_check(need, err, "use a smaller plan", "a plan of %d nodes with a "
                              "vocabulary of %d needs %.1f GiB of logit buffers and tree mask", n,
                              V, need / (1 << 30));
    if (mrc) {
        sq_specdec_free(sd);
        return mrc;
    }
    sd->parent = malloc((size_t)n * sizeof(int));
    sd->depth = malloc((size_t)n * sizeof(int));
    sd->child_first = malloc((size_t)n * sizeof(int));
    sd->child_count = calloc((size_t)n, sizeof(int));
    sd->level_start = calloc((size_t)D + 1, sizeof(int));
    sd->seq = malloc(((size_t)sd->max_context + (size_t)D + 1) * sizeof(int32_t));
    sd->tok = malloc((size_t)n * sizeof(int32_t));
    sd->dslot = malloc((size_t)n * sizeof(int));
    sd->path = malloc((size_t)D * sizeof(int));
    sd->dlog = malloc((size_t)n * Vs * sizeof(float));
    sd->tlog = malloc((size_t)sd->tmaxp * Vs * sizeof(float));
    sd->dbuf = malloc((size_t)sd->dmaxp * Vs * sizeof(float));
    sd->p = malloc(Vs * sizeof(double));
    sd->q = malloc(Vs * sizeof(double));
    sd->mask = malloc((size_t)mp * (size_t)mp);
    sd->ftok = malloc((size_t)mp * sizeof(int32_t));
    sd->fpos = malloc((size_t)mp * sizeof(int32_t));
    sd->keep = malloc((size_t)mp * sizeof(int32_t));
    sd->ver = sq_verifier_new(V, params->mode, params->seed);
    if (!sd->parent || !sd->depth || !sd->child_first || !sd->child_count || !sd->level_start ||
        !sd->seq || !sd->tok || !sd->dslot || !sd->path || !sd->dlog || !sd->tlog ||
        !sd->dbuf || !sd->p || !sd->q || !sd->mask || !sd->ftok || !sd->fpos || !sd->keep ||
        !sd->ver) {
        sq_specdec_free(sd);
        return sq_error_oom(err, "speculative decoder buffers");
    }
    for (int i = 0; i < n; i++) {
        sd->parent[i] = t->parent[i];
        sd->depth[i] = t->depth[i];
        sd->child_first[i] = -1;
    }
    for (int i = 1; i < n; i++) {
        int u = t->parent[i];
        if (sd->child_first[u] < 0)
            sd->child_first[u] = i;
        sd->child_count[u]++;
    }
    for (int l = 0, i = 0; l <= D; l++) {
        while (i < n && t->depth[i] < l)
            i++;
        sd->level_start[l] = i;
    }
    sq_context_params cp = sq_context_default_params();
    cp.max_context = sd->max_context;
    cp.backend = params->backend;
    cp.threads = params->threads;
    cp.dtype = params->dtype;
    cp.offload = params->offload;
    cp.max_pending = sd->dmaxp;
    int rc = sq_context_new(draft, &cp, &sd->dctx, err);
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

void sq_step_info_clear(sq_step_info *info)
{
    if (!info)
        return;
    free(info->visit_children);
    free(info->visit_rank);
    info->visit_children = info->visit_rank = NULL;
}

/* Reads x[0..m) at positions start.. into ctx with causal masks, committing everything. */
static int prefill(sq_specdec *sd, sq_context *ctx, int maxp, float *logits, const int32_t *x,
                   int m, int start, sq_error *err)
{
    for (int off = 0; off < m; off += maxp) {
        int c = m - off < maxp ? m - off : maxp;
        for (int i = 0; i < c; i++) {
            sd->ftok[i] = x[off + i];
            sd->fpos[i] = start + off + i;
            sd->keep[i] = i;
            for (int j = 0; j < c; j++)
                sd->mask[(size_t)i * c + j] = j <= i;
        }
        int rc = sq_context_forward(ctx, sd->ftok, sd->fpos, sd->mask, c, logits, err);
        if (!rc)
            rc = sq_context_commit(ctx, sd->keep, c, err);
        if (rc)
            return rc;
    }
    return SQ_OK;
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
    if ((rc = prefill(sd, sd->tctx, sd->tmaxp, sd->tlog, prompt, n - 1, 0, err)) ||
        (rc = prefill(sd, sd->dctx, sd->dmaxp, sd->dbuf, prompt, n - 1, 0, err)))
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

/* Plain causal forward of the target over every node's root path, compared with the tree
 * forward's logits (tlog). Leaves the target with nothing pending. */
static int check_attention(sq_specdec *sd, double *maxdiff, sq_error *err)
{
    int len = sd->len, V = sd->V;
    double worst = 0.0;
    float *row = malloc((size_t)sd->D * (size_t)V * sizeof *row);
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
        for (int i = 0; i < m; i++)
            for (int j = 0; j < m; j++)
                sd->mask[(size_t)i * m + j] = j <= i;
        rc = sq_context_forward(sd->tctx, sd->ftok, sd->fpos, sd->mask, m, row, err);
        if (!rc) {
            const float *a = row + (size_t)(m - 1) * V, *b = sd->tlog + (size_t)u * V;
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
 * accepted tokens and the bonus token to out (*cnt of them) and the accepted nodes to sd->path
 * (*pl of them); records the visits in info when given. */
static int verify_walk(sq_specdec *sd, int32_t *out, int *cnt_out, int *pl_out,
                       sq_step_info *info, sq_error *err)
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
    *cnt_out = cnt;
    *pl_out = pl;
    return SQ_OK;
}

/* Step 5: keeps only the accepted path in both caches (the draft keeps its a catch-up tokens
 * and the accepted nodes it ran) and appends the cnt output tokens to the sequence. */
static int commit_walk(sq_specdec *sd, int a, const int32_t *out, int cnt, int pl, sq_error *err)
{
    int rc;
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

int sq_specdec_step(sq_specdec *sd, int32_t *out, sq_step_info *info, sq_error *err)
{
    SQ_ASSERT(sd->started);
    int len = sd->len, V = sd->V, D = sd->D, n = sd->n;
    size_t Vs = (size_t)V;
    if (len - 1 + D > sd->max_context)
        return sq_error_set(err, SQ_EUSAGE,
                            "context full: %d tokens plus a tree of depth %d exceed %d", len, D,
                            sd->max_context);
    int rc;
    double t0 = now_ms(), dfwd = 0.0, tf;

    /* 1. the draft catches up: S[dc .. len-1], the root last. A root-only plan is plain
     * decoding with the target: the draft is never needed, so it is never run. */
    int dcom = sq_context_committed(sd->dctx);
    int a = n > 1 ? len - dcom : 0;
    SQ_ASSERT(n == 1 || (a >= 1 && a + n <= sd->dmaxp));
    for (int i = 0; i < a; i++) {
        sd->ftok[i] = sd->seq[dcom + i];
        sd->fpos[i] = dcom + i;
        for (int j = 0; j < a; j++)
            sd->mask[(size_t)i * a + j] = j <= i;
    }
    if (a > 0) {
        tf = now_ms();
        if ((rc = sq_context_forward(sd->dctx, sd->ftok, sd->fpos, sd->mask, a, sd->dbuf, err)))
            return rc;
        dfwd += now_ms() - tf;
        memcpy(sd->dlog, sd->dbuf + (size_t)(a - 1) * Vs, Vs * sizeof(float));
    }
    for (int u = 0; u < n; u++)
        sd->dslot[u] = -1;
    sd->dslot[0] = a - 1;
    sd->tok[0] = sd->seq[len - 1];
    int pd = a;

    /* 2. grow the tree level by level */
    for (int l = 0; l < D; l++) {
        for (int u = sd->level_start[l]; u < sd->level_start[l + 1]; u++)
            if (sd->child_count[u] > 0)
                sq_verifier_propose(sd->ver, draft_q(sd, u), sd->dlog + (size_t)u * Vs,
                                    sd->child_count[u], sd->tok + sd->child_first[u]);
        if (l + 1 >= D)
            break;
        int m = 0;
        for (int u = sd->level_start[l + 1]; u < sd->level_start[l + 2]; u++)
            if (sd->child_count[u] > 0)
                sd->keep[m++] = u;   /* nodes to feed */
        if (m == 0)
            break;
        int width = pd + m;
        memset(sd->mask, 0, (size_t)m * (size_t)width);
        for (int i = 0; i < m; i++) {
            int u = sd->keep[i];
            uint8_t *row = sd->mask + (size_t)i * width;
            sd->ftok[i] = sd->tok[u];
            sd->fpos[i] = len - 1 + l + 1;
            for (int j = 0; j < a; j++)
                row[j] = 1;   /* the caught-up tokens end with the root */
            for (int w = sd->parent[u]; w > 0; w = sd->parent[w])
                row[sd->dslot[w]] = 1;
            row[pd + i] = 1;
        }
        tf = now_ms();
        if ((rc = sq_context_forward(sd->dctx, sd->ftok, sd->fpos, sd->mask, m, sd->dbuf, err)))
            return rc;
        dfwd += now_ms() - tf;
        for (int i = 0; i < m; i++) {
            int u = sd->keep[i];
            memcpy(sd->dlog + (size_t)u * Vs, sd->dbuf + (size_t)i * Vs, Vs * sizeof(float));
            sd->dslot[u] = pd + i;
        }
        pd += m;
    }
    double t1 = now_ms();

    /* 3. the target reads the whole tree */
    double attn = 0.0;
    tree_inputs(sd, len);
    tf = now_ms();
    if ((rc = sq_context_forward(sd->tctx, sd->ftok, sd->fpos, sd->mask, n, sd->tlog, err)))
        return rc;
    double tfwd = now_ms() - tf;
    if (sd->prm.check_attention) {
        /* a plain forward needs nothing pending: drop the tree, compare, read it again */
        int32_t dummy = 0;
        if ((rc = sq_context_commit(sd->tctx, &dummy, 0, err)) ||
            (rc = check_attention(sd, &attn, err)))
            return rc;
        tree_inputs(sd, len);
        if ((rc = sq_context_forward(sd->tctx, sd->ftok, sd->fpos, sd->mask, n, sd->tlog, err)))
            return rc;
    }
    double t2 = now_ms();

    /* 4. verify from the root */
    int cnt, pl;
    if ((rc = verify_walk(sd, out, &cnt, &pl, info, err)))
        return rc;
    double t3 = now_ms();

    /* 5. keep only the accepted path */
    if ((rc = commit_walk(sd, a, out, cnt, pl, err)))
        return rc;
    double t4 = now_ms();

    if (info) {
        info->tokens = cnt;
        info->visits = cnt;
        info->draft_ms = t1 - t0;
        info->target_ms = t2 - t1;
        info->verify_ms = t3 - t2;
        info->draft_forward_ms = dfwd;
        info->target_forward_ms = tfwd;
        info->commit_ms = t4 - t3;
        info->step_ms = t4 - t0;
        info->attn_max_diff = attn;
    }
    return SQ_OK;
}

int sq_specdec_generate(sq_specdec *sd, const int32_t *prompt, int n, int max_new, int32_t *out,
                        int *step_tokens, int *steps, sq_step_info *infos, sq_error *err)
{
    *steps = 0;
    if (n + max_new - 1 + sd->D > sd->max_context)
        return sq_error_set(err, SQ_EUSAGE,
                            "prompt of %d tokens + %d new tokens + a tree of depth %d exceed the "
                            "context of %d tokens", n, max_new, sd->D, sd->max_context);
    int rc = sq_specdec_start(sd, prompt, n, err);
    if (rc)
        return rc;
    int32_t *buf = malloc((size_t)sd->D * sizeof *buf);
    if (!buf)
        return sq_error_oom(err, "step output");
    int done = 0;
    while (done < max_new) {
        sq_step_info *info = infos ? &infos[*steps] : NULL;
        if ((rc = sq_specdec_step(sd, buf, info, err)))
            break;
        int m = sd->len - (n + done);   /* tokens this step produced */
        step_tokens[(*steps)++] = m;
        for (int i = 0; i < m && done < max_new; i++)
            out[done++] = buf[i];
    }
    free(buf);
    return rc;
}

int sq_specdec_autoregressive(sq_specdec *sd, const int32_t *prompt, int n, int max_new,
                              uint64_t seed, int32_t *out, sq_error *err)
{
    int rc = check_prompt(sd, prompt, n, err);
    if (rc)
        return rc;
    if (n + max_new > sd->max_context)
        return sq_error_set(err, SQ_EUSAGE,
                            "prompt of %d tokens + %d new tokens exceed the context of %d tokens",
                            n, max_new, sd->max_context);
    sd->started = 0;
    sq_context_reset(sd->tctx);
    if ((rc = prefill(sd, sd->tctx, sd->tmaxp, sd->tlog, prompt, n - 1, 0, err)))
        return rc;
    sq_verifier_seed(sd->ver, seed);
    int32_t last = prompt[n - 1], zero = 0;
    uint8_t one = 1;
    for (int i = 0; i < max_new; i++) {
        int32_t pos = n - 1 + i;
        if ((rc = sq_context_forward(sd->tctx, &last, &pos, &one, 1, sd->tlog, err)) ||
            (rc = sq_context_commit(sd->tctx, &zero, 1, err)))
            return rc;
        if (sd->prm.mode == SQ_MODE_GREEDY) {
            last = sq_argmax_f(sd->tlog, sd->V);
        } else {
            sq_verifier_probs(sd->ver, sd->tlog, sd->prm.temperature, sd->prm.top_p, sd->p);
            last = sq_verifier_sample(sd->ver, sd->p);
        }
        out[i] = last;
    }
    return SQ_OK;
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
    if ((rc = prefill(sd, sd->tctx, sd->tmaxp, sd->tlog, ctx, n - 1, 0, err)))
        return rc;
    int32_t last = ctx[n - 1], pos = n - 1, zero = 0;
    uint8_t one = 1;
    if ((rc = sq_context_forward(sd->tctx, &last, &pos, &one, 1, sd->tlog, err)) ||
        (rc = sq_context_commit(sd->tctx, &zero, 0, err)))
        return rc;
    sq_verifier_probs(sd->ver, sd->tlog, target_temperature(sd), sd->prm.top_p, probs);
    return SQ_OK;
}

/* ---- batches ------------------------------------------------------------------------------ */

struct sq_specdec_batch {
    int           B;
    sq_specdec  **sd;      /* (B)                                                          */
    sq_batch_seq *seqs;    /* (B) one batched forward's sequences                          */
    int          *idx;     /* (B) the member behind seqs[i]                                */
    int          *a;       /* (B) draft catch-up tokens of the current step                */
    int          *pd;      /* (B) draft pending tokens of the current step                 */
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
    double mp = tmaxp > dmaxp ? tmaxp : dmaxp, V = tc->vocab_size;
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
    free(bt->seqs);
    free(bt->idx);
    free(bt->a);
    free(bt->pd);
    free(bt);
}

int sq_specdec_batch_new(const sq_model *draft, const sq_model *target, const sq_plan *plan,
                         const sq_specdec_params *params, const char *plan_file, int B,
                         sq_specdec_batch **out, sq_error *err)
{
    *out = NULL;
    if (B < 1)
        return sq_error_set(err, SQ_EUSAGE, "batch %d: needs at least one sequence", B);
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
    bt->seqs = calloc((size_t)B, sizeof *bt->seqs);
    bt->idx = calloc((size_t)B, sizeof *bt->idx);
    bt->a = calloc((size_t)B, sizeof *bt->a);
    bt->pd = calloc((size_t)B, sizeof *bt->pd);
    if (!bt->sd || !bt->seqs || !bt->idx || !bt->a || !bt->pd) {
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

/* One batched forward over seqs[0 .. m) (m may be 0). */
static int forward_seqs(sq_specdec_batch *bt, int m, sq_error *err)
{
    return m > 0 ? sq_context_forward_batch(bt->seqs, m, err) : SQ_OK;
}

/* Steps 4 and 5 of sq_specdec_step for one sequence whose target logits are in tlog. */
static int verify_and_commit(sq_specdec *sd, int a, int32_t *out, int *ntok, sq_step_info *info,
                             sq_error *err)
{
    int cnt, pl, rc;
    if ((rc = verify_walk(sd, out, &cnt, &pl, info, err)) ||
        (rc = commit_walk(sd, a, out, cnt, pl, err)))
        return rc;
    *ntok = cnt;
    if (info) {
        info->tokens = cnt;
        info->visits = cnt;
        info->attn_max_diff = 0.0;
    }
    return SQ_OK;
}

int sq_specdec_batch_step(sq_specdec_batch *bt, const int *active, int32_t *const *out,
                          int *ntok, sq_step_info *info, sq_error *err)
{
    int m = 0, rc;
    for (int k = 0; k < bt->B; k++) {
        ntok[k] = 0;
        if (active && !active[k])
            continue;
        sq_specdec *sd = bt->sd[k];
        SQ_ASSERT(sd->started);
        if (sd->len - 1 + sd->D > sd->max_context)
            return sq_error_set(err, SQ_EUSAGE, "sequence %d: context full: %d tokens plus a "
                                "tree of depth %d exceed %d", k, sd->len, sd->D, sd->max_context);
        bt->idx[m++] = k;
    }
    const int M = m;
    if (M == 0)
        return SQ_OK;
    sq_specdec *s0 = bt->sd[bt->idx[0]];
    const int n = s0->n, D = s0->D;
    const size_t Vs = (size_t)s0->V;
    double t0 = now_ms();

    /* 1. every draft catches up (root last), in one batched forward */
    int f = 0;
    for (int i = 0; i < M; i++) {
        sq_specdec *sd = bt->sd[bt->idx[i]];
        int dcom = sq_context_committed(sd->dctx), len = sd->len;
        int a = n > 1 ? len - dcom : 0;
        SQ_ASSERT(n == 1 || (a >= 1 && a + n <= sd->dmaxp));
        bt->a[i] = a;
        for (int r = 0; r < a; r++) {
            sd->ftok[r] = sd->seq[dcom + r];
            sd->fpos[r] = dcom + r;
            for (int j = 0; j < a; j++)
                sd->mask[(size_t)r * a + j] = j <= r;
        }
        if (a > 0)
            bt->seqs[f++] = (sq_batch_seq){sd->dctx, sd->ftok, sd->fpos, sd->mask, a, sd->dbuf};
    }
    if ((rc = forward_seqs(bt, f, err)))
        return rc;
    for (int i = 0; i < M; i++) {
        sq_specdec *sd = bt->sd[bt->idx[i]];
        int a = bt->a[i];
        if (a > 0)
            memcpy(sd->dlog, sd->dbuf + (size_t)(a - 1) * Vs, Vs * sizeof(float));
        for (int u = 0; u < n; u++)
            sd->dslot[u] = -1;
        sd->dslot[0] = a - 1;
        sd->tok[0] = sd->seq[sd->len - 1];
        bt->pd[i] = a;
    }

    /* 2. the trees grow level by level, one batched draft forward per level */
    for (int l = 0; l < D; l++) {
        int fed = 0;
        f = 0;
        for (int i = 0; i < M; i++) {
            sq_specdec *sd = bt->sd[bt->idx[i]];
            for (int u = sd->level_start[l]; u < sd->level_start[l + 1]; u++)
                if (sd->child_count[u] > 0)
                    sq_verifier_propose(sd->ver, draft_q(sd, u), sd->dlog + (size_t)u * Vs,
                                        sd->child_count[u], sd->tok + sd->child_first[u]);
            if (l + 1 >= D)
                continue;
            int mm = 0;
            for (int u = sd->level_start[l + 1]; u < sd->level_start[l + 2]; u++)
                if (sd->child_count[u] > 0)
                    sd->keep[mm++] = u;
            fed = mm;
            if (mm == 0)
                continue;
            int pd = bt->pd[i], a = bt->a[i], width = pd + mm, len = sd->len;
            memset(sd->mask, 0, (size_t)mm * (size_t)width);
            for (int r = 0; r < mm; r++) {
                int u = sd->keep[r];
                uint8_t *row = sd->mask + (size_t)r * width;
                sd->ftok[r] = sd->tok[u];
                sd->fpos[r] = len - 1 + l + 1;
                for (int j = 0; j < a; j++)
                    row[j] = 1;
                for (int w = sd->parent[u]; w > 0; w = sd->parent[w])
                    row[sd->dslot[w]] = 1;
                row[pd + r] = 1;
            }
            bt->seqs[f++] = (sq_batch_seq){sd->dctx, sd->ftok, sd->fpos, sd->mask, mm, sd->dbuf};
        }
        if (l + 1 >= D || fed == 0)
            break;
        if ((rc = forward_seqs(bt, f, err)))
            return rc;
        for (int i = 0; i < M; i++) {
            sq_specdec *sd = bt->sd[bt->idx[i]];
            for (int r = 0; r < fed; r++) {
                int u = sd->keep[r];
                memcpy(sd->dlog + (size_t)u * Vs, sd->dbuf + (size_t)r * Vs, Vs * sizeof(float));
                sd->dslot[u] = bt->pd[i] + r;
            }
            bt->pd[i] += fed;
        }
    }
    double t1 = now_ms();

    /* 3. the targets read their trees in one batched forward */
    for (int i = 0; i < M; i++) {
        sq_specdec *sd = bt->sd[bt->idx[i]];
        tree_inputs(sd, sd->len);
        bt->seqs[i] = (sq_batch_seq){sd->tctx, sd->ftok, sd->fpos, sd->mask, n, sd->tlog};
    }
    if ((rc = forward_seqs(bt, M, err)))
        return rc;
    double t2 = now_ms();

    /* 4, 5. verification and commits, per sequence */
    for (int i = 0; i < M; i++) {
        int k = bt->idx[i];
        if ((rc = verify_and_commit(bt->sd[k], bt->a[i], out[k], &ntok[k], info ? &info[k] : NULL,
                                    err)))
            return rc;
    }
    double t3 = now_ms();
    if (info)
        for (int i = 0; i < M; i++) {
            sq_step_info *in = &info[bt->idx[i]];
            in->draft_ms = t1 - t0;
            in->target_ms = in->target_forward_ms = t2 - t1;
            in->verify_ms = t3 - t2;
            in->step_ms = t3 - t0;
        }
    return SQ_OK;
}

int sq_specdec_batch_generate(sq_specdec_batch *bt, const int32_t *const *prompts, const int *n,
                              int max_new, int32_t *const *out, int *steps, int *batch_steps,
                              sq_step_info *infos, sq_error *err)
{
    const int B = bt->B;
    *batch_steps = 0;
    for (int k = 0; k < B; k++) {
        steps[k] = 0;
        sq_specdec *sd = bt->sd[k];
        if (n[k] + max_new - 1 + sd->D > sd->max_context)
            return sq_error_set(err, SQ_EUSAGE,
                                "sequence %d: prompt of %d tokens + %d new tokens + a tree of "
                                "depth %d exceed the context of %d tokens", k, n[k], max_new,
                                sd->D, sd->max_context);
    }
    int rc = sq_specdec_batch_start(bt, prompts, n, err);
    if (rc)
        return rc;
    int D = bt->sd[0]->D;
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
        if ((rc = sq_specdec_batch_step(bt, active, bufs, ntok, info, err)))
            break;
        (*batch_steps)++;
        for (int k = 0; k < B; k++) {
            if (!active[k])
                continue;
            if (infos)
                infos[(size_t)k * max_new + steps[k]] = si[k];
            steps[k]++;
            for (int i = 0; i < ntok[k] && done[k] < max_new; i++)
                out[k][done[k]++] = bufs[k][i];
            if (done[k] == max_new) {
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

int sq_specdec_batch_autoregressive(sq_specdec_batch *bt, const int32_t *const *prompts,
                                    const int *n, int max_new, uint64_t seed,
                                    int32_t *const *out, sq_error *err)
{
    const int B = bt->B;
    int rc;
    for (int k = 0; k < B; k++) {
        sq_specdec *sd = bt->sd[k];
        if ((rc = check_prompt(sd, prompts[k], n[k], err)))
            return rc;
        if (n[k] + max_new > sd->max_context)
            return sq_error_set(err, SQ_EUSAGE, "sequence %d: prompt of %d tokens + %d new "
                                "tokens exceed the context of %d tokens", k, n[k], max_new,
                                sd->max_context);
        sd->started = 0;
        sq_context_reset(sd->tctx);
        if ((rc = prefill(sd, sd->tctx, sd->tmaxp, sd->tlog, prompts[k], n[k] - 1, 0, err)))
            return rc;
        sq_verifier_seed(sd->ver, sq_specdec_batch_seed_of(seed, k));
        sd->ftok[0] = prompts[k][n[k] - 1];
        sd->mask[0] = 1;
    }
    int32_t zero = 0;
    for (int i = 0; i < max_new; i++) {
        for (int k = 0; k < B; k++) {
            sq_specdec *sd = bt->sd[k];
            sd->fpos[0] = n[k] - 1 + i;
            bt->seqs[k] = (sq_batch_seq){sd->tctx, sd->ftok, sd->fpos, sd->mask, 1, sd->tlog};
        }
        if ((rc = forward_seqs(bt, B, err)))
            return rc;
        for (int k = 0; k < B; k++) {
            sq_specdec *sd = bt->sd[k];
            if ((rc = sq_context_commit(sd->tctx, &zero, 1, err)))
                return rc;
            int32_t next;
            if (sd->prm.mode == SQ_MODE_GREEDY) {
                next = sq_argmax_f(sd->tlog, sd->V);
            } else {
                sq_verifier_probs(sd->ver, sd->tlog, sd->prm.temperature, sd->prm.top_p, sd->p);
                next = sq_verifier_sample(sd->ver, sd->p);
            }
            out[k][i] = next;
            sd->ftok[0] = next;
        }
    }
    return SQ_OK;
}
