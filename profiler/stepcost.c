#include "profiler/stepcost.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "libsequoia/base/stats.h"
#include "libsequoia/format/curve.h"
#include "libsequoia/format/plan.h"
#include "libsequoia/format/tree.h"
#include "runtime/dyntree.h"

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

int sq_stepcost_shape(int n, int max_levels, int *w)
{
    int L = n < max_levels ? n : max_levels;
    if (L < 1)
        L = 1;
    w[0] = 1;
    for (int l = 1; l < L; l++)
        w[l] = (n - 1) / (L - 1) + (l - 1 < (n - 1) % (L - 1));
    return L;
}

/* Samples of one kind, by token count 1 .. cap. */
typedef struct bag {
    double **v;
    int     *n, *cap;
    int      keys;
} bag;

static int bag_init(bag *b, int keys)
{
    b->keys = keys;
    b->v = calloc((size_t)keys + 1, sizeof *b->v);
    b->n = calloc((size_t)keys + 1, sizeof *b->n);
    b->cap = calloc((size_t)keys + 1, sizeof *b->cap);
    return b->v && b->n && b->cap;
}

static void bag_free(bag *b)
{
    for (int k = 0; b->v && k <= b->keys; k++)
        free(b->v[k]);
    free(b->v);
    free(b->n);
    free(b->cap);
}

static int bag_add(bag *b, int key, double x)
{
    if (key < 1 || key > b->keys)
        return 1;
    if (b->n[key] == b->cap[key]) {
        int c = b->cap[key] ? 2 * b->cap[key] : 32;
        double *v = realloc(b->v[key], (size_t)c * sizeof *v);
        if (!v)
            return 0;
        b->v[key] = v;
        b->cap[key] = c;
    }
    b->v[key][b->n[key]++] = x;
    return 1;
}

/* The medians of every key with samples, increasing: a table of the step section. */
static int bag_table(bag *b, sq_profile_point **out, int *nout)
{
    int m = 0;
    for (int k = 1; k <= b->keys; k++)
        m += b->n[k] > 0;
    *nout = 0;
    *out = NULL;
    if (m == 0)
        return 1;
    sq_profile_point *p = calloc((size_t)m, sizeof *p);
    if (!p)
        return 0;
    int i = 0;
    for (int k = 1; k <= b->keys; k++) {
        int c = b->n[k];
        if (c == 0)
            continue;
        double *v = b->v[k];
        p[i++] = (sq_profile_point){.batch = 1, .tokens = k, .samples = c,
                                    .p10_ms = sq_quantile(v, c, 0.10),
                                    .median_ms = sq_quantile(v, c, 0.50),
                                    .p90_ms = sq_quantile(v, c, 0.90)};
    }
    *out = p;
    *nout = m;
    return 1;
}

/* What the grow hook records in one step: the time it was entered and left at each level and
 * the width of the level forward that follows. */
typedef struct hook_state {
    const sq_tree *shape;   /* the tree being grown (the plan's)                              */
    const int     *nch;     /* (n) children of each node in it                                */
    double         in[64], out[64];
    int            width[64];
    int            levels_seen;
} hook_state;

/* The top-k tokens of logits[0..V) (k <= V), best first, into tok. */
static void top_k(const float *logits, int V, int k, int32_t *tok)
{
    for (int i = 0; i < k; i++)
        tok[i] = -1;
    for (int v = 0; v < V; v++) {
        float x = logits[v];
        if (tok[k - 1] >= 0 && !(x > logits[tok[k - 1]]))
            continue;
        int j = k - 1;
        while (j > 0 && (tok[j - 1] < 0 || x > logits[tok[j - 1]])) {
            tok[j] = tok[j - 1];
            j--;
        }
        tok[j] = (int32_t)v;
    }
}

/* The expand part (stepcost.h): `samples` samples of sq_dyntree_expand for each K = 1, 2, 4, 8
 * (at most V) into b, each the mean of calls lasting SQ_STEPCOST_EXPAND_MS. */
static int measure_expand(int V, int samples, unsigned seed, bag *b, sq_error *err)
{
    float *row = malloc((size_t)V * sizeof *row);
    if (!row)
        return sq_error_oom(err, "the step measurement");
    unsigned s = seed * 2654435761u + 99u;
    for (int i = 0; i < V; i++) {   /* a sum of four uniforms: bell-shaped, spread about 2.3 */
        double x = 0;
        for (int k = 0; k < 4; k++) {
            s = s * 1103515245u + 12345u;
            x += (double)((s >> 8) & 0xffff) / 65536.0 - 0.5;
        }
        row[i] = (float)(4.0 * x);
    }
    int rc = SQ_OK;
    for (int K = 1; K <= SQ_STEPCOST_EXPAND_MAX_K && K <= V && !rc; K *= 2) {
        sq_dyntree *dt;
        if ((rc = sq_dyntree_new(SQ_DYN_SGLANG, 1, K, K + 1, V, &dt, err)))
            break;
        double t0 = now_ms();
        for (int r = 0; r < 4; r++)
            sq_dyntree_expand(dt, row);
        double one = (now_ms() - t0) / 4;
        long reps = one > 0 ? (long)ceil(SQ_STEPCOST_EXPAND_MS / one) : 1000;
        reps = reps < 1 ? 1 : reps > 100000 ? 100000 : reps;
        for (int k = 0; k < samples && !rc; k++) {
            t0 = now_ms();
            for (long r = 0; r < reps; r++)
                sq_dyntree_expand(dt, row);
            if (!bag_add(b, K, (now_ms() - t0) / (double)reps))
                rc = sq_error_oom(err, "the step measurement");
        }
        sq_dyntree_free(dt);
    }
    free(row);
    return rc;
}

/* The grow hook: the shape's children of every expanded node of `level`, the draft's top-k
 * (the greedy rule), expanded when the shape gives them children. */
static int grow_shape(sq_tree_grow *g, int level, void *user, sq_error *err)
{
    hook_state *hs = user;
    double t0 = now_ms();
    int first, m = sq_tree_grow_level(g, level, &first), V = sq_tree_grow_vocab(g), fed = 0;
    for (int u = first; u < first + m; u++) {
        int c = hs->nch[u];
        if (c == 0 || !sq_tree_grow_expanded(g, u))
            continue;
        sq_tree_children ch;
        int rc = sq_tree_grow_add(g, u, c, &ch, err);
        if (rc)
            return rc;
        for (int i = 0; i < c; i++)
            ch.tokens[i] = 0;   /* past the vocabulary (a tiny test model): repeated tokens */
        top_k(sq_tree_grow_logits(g, u), V, c < V ? c : V, ch.tokens);
        for (int i = 0; i < c; i++) {
            if (ch.tokens[i] < 0)
                ch.tokens[i] = 0;
            int v = ch.first + i;
            ch.expand[i] = v < hs->shape->n && hs->nch[v] > 0;
            fed += ch.expand[i];
        }
    }
    if (level < 64) {
        hs->in[level] = t0;
        hs->out[level] = now_ms();
        hs->width[level] = fed;
        hs->levels_seen = level + 1;
    }
    return SQ_OK;
}

/* A tree of n nodes with the widths of sq_stepcost_shape, each level's nodes spread over the
 * level above's in order. */
static int make_shape(int n, int max_levels, sq_tree **out, sq_error *err)
{
    int w[64], L = sq_stepcost_shape(n, max_levels, w);
    int *parent = malloc((size_t)n * sizeof *parent), *rank = malloc((size_t)n * sizeof *rank);
    if (!parent || !rank) {
        free(parent);
        free(rank);
        return sq_error_oom(err, "a measured tree");
    }
    parent[0] = -1;
    rank[0] = 0;
    int prev = 0, at = 1;   /* first node of the level above, next node */
    for (int l = 1; l < L; l++) {
        int np = w[l - 1];
        for (int j = 0; j < np; j++) {
            int c = w[l] / np + (j < w[l] % np);
            for (int r = 1; r <= c; r++, at++) {
                parent[at] = prev + j;
                rank[at] = r;
            }
        }
        prev += np;
    }
    int rc = sq_tree_from_parents(parent, rank, n, out, "the measured tree", err);
    free(parent);
    free(rank);
    return rc;
}

int sq_stepcost_measure(const sq_model *draft, const sq_model *target, const int *ns, int count,
                        const sq_stepcost_params *prm, sq_measure_progress progress, void *user,
                        sq_profile_step **out, sq_error *err)
{
    *out = NULL;
    const sq_measure_params *mp = &prm->measure;
    int maxn = ns[count - 1], rc = SQ_OK;
    int max_levels = prm->max_levels > 0 ? prm->max_levels : SQ_STEPCOST_MAX_LEVELS;
    if (max_levels > 63)
        max_levels = 63;
    const int max_warm = 32;   /* warm-up steps per visit at most: the context stays bounded */
    sq_specdec **sd = calloc((size_t)count, sizeof *sd);
    sq_tree **shape = calloc((size_t)count, sizeof *shape);
    int **nch = calloc((size_t)count, sizeof *nch);
    int32_t *prompt = malloc((size_t)(mp->prefix > 0 ? mp->prefix : 1) * sizeof *prompt);
    int32_t *tok = malloc((size_t)(max_levels + 1) * sizeof *tok);
    bag part[SQ_STEP_PARTS];
    memset(part, 0, sizeof part);
    int ok = sd && shape && nch && prompt && tok;
    for (int k = 0; k < SQ_STEP_PARTS && ok; k++)
        ok = bag_init(&part[k], k == SQ_STEP_DRAFT_FIRST ? max_levels + 1
                                : k == SQ_STEP_EXPAND ? SQ_STEPCOST_EXPAND_MAX_K : maxn);
    sq_curve curve = {0};
    if (!ok) {
        rc = sq_error_oom(err, "the step measurement");
        goto done;
    }
    int plen = mp->prefix > 0 ? mp->prefix : 1;
    unsigned s = mp->seed * 2654435761u + 17u;
    int V = sq_model_get_config(target)->vocab_size;
    int Vd = sq_model_get_config(draft)->vocab_size;
    V = Vd < V ? Vd : V;
    for (int i = 0; i < plen; i++) {
        s = s * 1103515245u + 12345u;
        prompt[i] = (int32_t)((s >> 8) % (unsigned)V);
    }
    double pv[1] = {0.5};
    if ((rc = sq_curve_init(&curve, "greedy@T0", "greedy", pv, 1, err)))
        goto done;
    sq_specdec_params sp = sq_specdec_default_params();
    sp.mode = SQ_MODE_GREEDY;
    sp.temperature = 0.0;
    sp.backend = prm->backend;
    sp.threads = prm->threads;
    sp.dtype = prm->dtype;
    sp.offload = prm->offload;
    sp.seed = mp->seed;
    sp.max_context = plen + (max_warm + SQ_MEASURE_BLOCK + SQ_STEPCOST_LEAD) * max_levels + 1;
    int cap = sq_model_get_config(target)->max_position;
    if (sq_model_get_config(draft)->max_position < cap)
        cap = sq_model_get_config(draft)->max_position;
    if (sp.max_context > cap)
        sp.max_context = cap;   /* the decoder restarts on the prompt when it fills up */
    if (plen + max_levels + 1 > sp.max_context) {
        rc = sq_error_set(err, SQ_EUSAGE, "--prefix %d: a prompt of %d tokens and a tree of %d "
                          "levels do not fit the models' context of %d positions", mp->prefix,
                          plen, max_levels, sp.max_context);
        goto done;
    }
    for (int i = 0; i < count && !rc; i++) {
        if ((rc = make_shape(ns[i], max_levels, &shape[i], err)))
            break;
        if (!(nch[i] = calloc((size_t)ns[i], sizeof *nch[i]))) {
            rc = sq_error_oom(err, "the step measurement");
            break;
        }
        for (int v = 1; v < ns[i]; v++)
            nch[i][shape[i]->parent[v]]++;
        sq_tree *copy;
        if ((rc = sq_tree_from_parents(shape[i]->parent, shape[i]->rank, shape[i]->n, &copy,
                                       "the measured tree", err)))
            break;
        sq_plan *plan;
        int width = sq_tree_max_children(copy);
        if ((rc = sq_plan_new(copy, &curve, ns[i], sq_tree_depth(shape[i]), width > 0 ? width : 1,
                              &plan, err)))
            break;
        rc = sq_specdec_new(draft, target, plan, &sp, "the measured tree", &sd[i], err);
        sq_plan_free(plan);
    }
    hook_state hs;
    const int rounds = (mp->repeat + SQ_MEASURE_BLOCK - 1) / SQ_MEASURE_BLOCK;
    double ctx_sum = 0.0;
    long ctx_n = 0;
    int ctx_min = INT_MAX, ctx_max = 0;
    for (int r = 0; r < rounds && !rc; r++) {
        if (progress)
            progress(user, (int)((long long)count * r / rounds), count, ns[r % count]);
        for (int c = 0; c < count && !rc; c++) {
            int i = (r + c) % count;
            memset(&hs, 0, sizeof hs);
            hs.shape = shape[i];
            hs.nch = nch[i];
            if (ns[i] > 1)
                sq_specdec_set_grow(sd[i], grow_shape, &hs);
            int goal = mp->repeat - r * SQ_MEASURE_BLOCK;
            goal = goal < SQ_MEASURE_BLOCK ? goal : SQ_MEASURE_BLOCK;
            /* Warm-up from the whole prompt (untimed), counting the tokens a step adds; then
             * back to a prompt shortened by the growth expected over SQ_STEPCOST_LEAD untimed
             * steps and half the timed ones, so that the timed steps' context is centred on
             * the prefix (their draft's attention, a large part of a small draft's forward,
             * grows with the context). */
            int a = 1, warm = 0, warm_tokens = 0, start_len = plen;
            if ((rc = sq_specdec_start(sd[i], prompt, plen, err)))
                break;
            double t0 = now_ms();
            for (int w = 0; w < max_warm && (w < mp->warmup || now_ms() - t0 < SQ_MEASURE_WARMUP_MS);
                 w++) {
                if (sq_specdec_length(sd[i]) + max_levels + 1 > sp.max_context &&
                    (rc = sq_specdec_start(sd[i], prompt, plen, err)))
                    break;
                sq_step_info info;
                memset(&info, 0, sizeof info);
                hs.levels_seen = 0;
                rc = sq_specdec_step(sd[i], tok, &info, err);
                if (!rc) {
                    warm++;
                    warm_tokens += info.tokens;
                }
                sq_step_info_clear(&info);   /* a failed step hands its arrays back too */
                if (rc)
                    break;
            }
            if (rc)
                break;
            double g = warm > 0 ? (double)warm_tokens / warm : 1.0;
            int back = (int)lround(g * (SQ_STEPCOST_LEAD + goal / 2.0));
            start_len = plen - back >= 1 ? plen - back : 1;
            if ((rc = sq_specdec_start(sd[i], prompt, start_len, err)))
                break;
            int timed = 0;
            for (int w = 0; !rc && timed < goal; w++) {
                int warming = w < SQ_STEPCOST_LEAD;
                if (sq_specdec_length(sd[i]) + max_levels + 1 > sp.max_context) {
                    /* full: back to the prompt (untimed); the next step's draft catches up 1 */
                    if ((rc = sq_specdec_start(sd[i], prompt, start_len, err)))
                        break;
                    a = 1;
                }
                int len = sq_specdec_length(sd[i]);
                sq_step_info info;
                memset(&info, 0, sizeof info);
                hs.levels_seen = 0;
                if ((rc = sq_specdec_step(sd[i], tok, &info, err))) {
                    sq_step_info_clear(&info);   /* a failed step hands its arrays back */
                    break;
                }
                if (!warming) {
                    int n = ns[i];
                    double levels = 0;
                    ok = bag_add(&part[SQ_STEP_TARGET], n, info.target_forward_ms);
                    for (int l = 0; l + 1 < hs.levels_seen && ok; l++) {
                        double f = hs.in[l + 1] - hs.out[l];
                        levels += f;
                        ok = bag_add(&part[SQ_STEP_DRAFT_LEVEL], hs.width[l], f);
                    }
                    if (ok && n > 1)
                        ok = bag_add(&part[SQ_STEP_DRAFT_FIRST], a,
                                     info.draft_forward_ms > levels
                                         ? info.draft_forward_ms - levels : 0.0);
                    double o = info.step_ms - info.draft_forward_ms - info.target_forward_ms;
                    if (ok)
                        ok = bag_add(&part[SQ_STEP_OVERHEAD], n, o > 0 ? o : 0.0);
                    if (!ok)
                        rc = sq_error_oom(err, "the step measurement");
                    ctx_sum += len;
                    ctx_n++;
                    ctx_min = len < ctx_min ? len : ctx_min;
                    ctx_max = len > ctx_max ? len : ctx_max;
                    timed++;
                }
                /* the last accepted node: read by the draft when the shape gave it children;
                 * if not, the draft catches it up with the bonus token next step */
                int u = 0;
                for (int v = 0; v < info.visits && info.visit_rank; v++) {
                    int rk = info.visit_rank[v];
                    if (rk <= 0)
                        break;
                    int f = -1;
                    for (int x = u + 1; x < shape[i]->n; x++)
                        if (shape[i]->parent[x] == u && shape[i]->rank[x] == rk) {
                            f = x;
                            break;
                        }
                    if (f < 0)
                        break;
                    u = f;
                }
                a = 1 + (u > 0 && nch[i][u] == 0);
                sq_step_info_clear(&info);
            }
            sq_specdec_set_grow(sd[i], NULL, NULL);
        }
    }
    if (!rc)
        rc = measure_expand(V, mp->repeat > 0 ? mp->repeat : 1, mp->seed,
                            &part[SQ_STEP_EXPAND], err);
    if (!rc) {
        sq_profile_step *st = calloc(1, sizeof *st);
        ok = st != NULL;
        for (int k = 0; k < SQ_STEP_PARTS && ok; k++)
            ok = bag_table(&part[k], &st->pts[k], &st->n[k]);
        if (!ok) {
            if (st)
                for (int k = 0; k < SQ_STEP_PARTS; k++)
                    free(st->pts[k]);
            free(st);
            rc = sq_error_oom(err, "the step section");
        } else {
            if (ctx_n > 0) {   /* else unknown: all 0 */
                st->context_mean = ctx_sum / (double)ctx_n;
                st->context_min = ctx_min;
                st->context_max = ctx_max;
            }
            *out = st;
        }
    }
    if (progress && !rc)
        progress(user, count, count, 0);
done:
    for (int i = 0; sd && i < count; i++)
        sq_specdec_free(sd[i]);
    for (int i = 0; shape && i < count; i++)
        sq_tree_free(shape[i]);
    for (int i = 0; nch && i < count; i++)
        free(nch[i]);
    free(nch);
    free(sd);
    free(shape);
    free(prompt);
    free(tok);
    for (int k = 0; k < SQ_STEP_PARTS; k++)
        bag_free(&part[k]);
    sq_curve_clear(&curve);
    return rc;
}
