#include "planner/engine.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "planner/dp.h"

sq_engine_plan_params sq_engine_plan_default_params(void)
{
    return (sq_engine_plan_params){.engine = SQ_ENGINE_VLLM, .budget = 128, .depth = 10,
                                   .width = 0, .max_non_leaves = 0, .curve = sq_curve_default()};
}

long long sq_uniform_size(const int *k, int levels)
{
    long long size = 1, m = 1;
    for (int l = 0; l < levels; l++) {
        m *= k[l];
        size += m;
        if (m > INT_MAX || size > INT_MAX)
            return INT_MAX;
    }
    return size;
}

sq_tree *sq_uniform_tree(const int *k, int levels)
{
    long long size = sq_uniform_size(k, levels);
    SQ_ASSERT(size < INT_MAX);
    sq_tree *t = sq_tree_new((int)size);
    if (!t)
        return NULL;
    t->parent[0] = -1;
    int start = 0, width = 1, next = 1;   /* level l occupies [start, start + width) */
    for (int l = 0; l < levels; l++) {
        for (int j = 0; j < width; j++)
            for (int r = 1; r <= k[l]; r++, next++) {
                t->parent[next] = start + j;
                t->rank[next] = r;
                t->depth[next] = l + 1;
            }
        start += width;
        width *= k[l];
    }
    return t;
}

typedef struct uniform {
    int     N, D, W;    /* budget, levels (root included), widest k          */
    double *S;          /* (D, W+1): S[l*(W+1)+k] = p(l,1)+...+p(l,k), l >= 1 */
    double *memo;       /* (D-1, N, N): G(l, m, R), NAN = not yet known        */
} uniform;

static double *memo_at(uniform *u, int l, int m, int R)
{
    return &u->memo[((size_t)l * (size_t)u->N + (size_t)(m - 1)) * (size_t)u->N + (size_t)R];
}

/* G(l, m, R): the best sum of the deeper levels' totals relative to the m nodes of level l. */
static double uniform_G(uniform *u, int l, int m, int R, int *best_k)
{
    if (best_k)
        *best_k = 0;
    if (l + 1 >= u->D || m > R)
        return 0.0;
    double *cell = memo_at(u, l, m, R);
    if (!best_k && !isnan(*cell))
        return *cell;
    double best = 0.0;
    int arg = 0;
    for (int k = 1; k <= u->W && (long long)m * k <= R; k++) {
        double s = u->S[(size_t)(l + 1) * (size_t)(u->W + 1) + (size_t)k];
        double v = s * (1.0 + uniform_G(u, l + 1, m * k, R - m * k, NULL));
        if (v > best) {
            best = v;
            arg = k;
        }
    }
    *cell = best;
    if (best_k)
        *best_k = arg;
    return best;
}

int sq_uniform_search(const sq_curve *c, int budget, int depth, int width, int *k, int *levels,
                      double *F, sq_error *err)
{
    *levels = 0;
    *F = 1.0;
    if (budget < 1 || depth < 1)
        return sq_error_set(err, SQ_EUSAGE, "level-uniform search: budget %d and depth %d must be "
                            "at least 1", budget, depth);
    int D = depth < budget ? depth : budget;
    int W = width > 0 ? width : c->width;
    if (W > c->width)
        W = c->width;   /* ranks past the curve have p = 0 and add nothing */
    if (W > budget - 1)
        W = budget - 1;
    if (D < 2 || W < 1)
        return SQ_OK;
    long long cells = (long long)(D - 1) * budget * budget;
    if (cells > SQ_UNIFORM_MAX_CELLS)
        return sq_error_set(err, SQ_EUSAGE, "level-uniform search: (depth - 1) x budget^2 = %lld "
                            "memo cells exceeds the limit %lld; lower --budget or --depth",
                            cells, SQ_UNIFORM_MAX_CELLS);
    uniform u = {.N = budget, .D = D, .W = W};
    u.S = calloc((size_t)D * (size_t)(W + 1), sizeof *u.S);
    u.memo = malloc((size_t)cells * sizeof *u.memo);
    if (!u.S || !u.memo) {
        free(u.S);
        free(u.memo);
        return sq_error_oom(err, "level-uniform search");
    }
    for (long long i = 0; i < cells; i++)
        u.memo[i] = NAN;
    for (int l = 1; l < D; l++)
        for (int r = 1; r <= W; r++)
            u.S[(size_t)l * (size_t)(W + 1) + (size_t)r] =
                u.S[(size_t)l * (size_t)(W + 1) + (size_t)(r - 1)] + sq_curve_p(c, l, r);
    double G = uniform_G(&u, 0, 1, budget - 1, NULL);
    /* Follow the choices. */
    int l = 0, m = 1, R = budget - 1, kk;
    for (;;) {
        uniform_G(&u, l, m, R, &kk);
        if (!kk)
            break;
        k[l] = kk;
        m *= kk;
        R -= m;
        l++;
    }
    *levels = l;
    *F = 1.0 + G;
    free(u.S);
    free(u.memo);
    return SQ_OK;
}

/* ---- TensorRT-LLM's non-leaf limit: cut and refill ---------------------------------- */

static int repair_non_leaves(const sq_tree *t, const sq_curve *c, int budget, int D, int W,
                             int M, sq_tree **out, sq_error *err)
{
    int n = t->n, cap = budget;
    int *parent = malloc((size_t)cap * sizeof *parent), *rank = malloc((size_t)cap * sizeof *rank);
    int *dep = malloc((size_t)cap * sizeof *dep), *kids = calloc((size_t)cap, sizeof *kids);
    int *alive = malloc((size_t)cap * sizeof *alive), *cut = calloc((size_t)cap, sizeof *cut);
    int *nl = calloc((size_t)D + 1, sizeof *nl), *ids = malloc((size_t)cap * sizeof *ids);
    double *f = malloc((size_t)cap * sizeof *f);
    int rc = SQ_OK;
    if (!parent || !rank || !dep || !kids || !alive || !cut || !nl || !ids || !f) {
        rc = sq_error_oom(err, "engine plan");
        goto done;
    }
    sq_tree_expected_tokens(t, c, f);
    for (int v = 0; v < n; v++) {
        parent[v] = t->parent[v];
        rank[v] = t->rank[v];
        dep[v] = t->depth[v];
        alive[v] = 1;
    }
    /* Level by level (nodes are breadth-first): keep the M best non-leaves. */
    for (int l = 0; l < D; l++) {
        int cnt = 0;
        for (int v = 1; v < n; v++)   /* parents come first: one pass propagates */
            if (!alive[parent[v]] || cut[parent[v]])
                alive[v] = 0;
        for (int v = 0; v < n; v++) {
            kids[v] = 0;
        }
        for (int v = 1; v < n; v++)
            if (alive[v])
                kids[parent[v]]++;
        for (int v = 0; v < n; v++)
            if (alive[v] && dep[v] == l && kids[v])
                ids[cnt++] = v;
        if (cnt <= M)
            continue;
        /* selection by score, ties to the earlier node */
        for (int i = 0; i < cnt; i++)
            for (int j = i + 1; j < cnt; j++)
                if (f[ids[j]] > f[ids[i]] || (f[ids[j]] == f[ids[i]] && ids[j] < ids[i])) {
                    int x = ids[i];
                    ids[i] = ids[j];
                    ids[j] = x;
                }
        for (int i = M; i < cnt; i++)
            cut[ids[i]] = 1;
    }
    for (int v = 1; v < n; v++)
        if (!alive[parent[v]] || cut[parent[v]])
            alive[v] = 0;
    /* compact */
    int m = 0;
    for (int v = 0; v < n; v++)
        if (alive[v])
            ids[v] = m++;
    for (int v = 0; v < n; v++)
        if (alive[v]) {
            int w = ids[v];
            parent[w] = v == 0 ? -1 : ids[parent[v]];
            rank[w] = rank[v];
            dep[w] = dep[v];
            f[w] = f[v];
        }
    n = m;
    memset(kids, 0, (size_t)cap * sizeof *kids);
    memset(nl, 0, ((size_t)D + 1) * sizeof *nl);
    for (int v = 1; v < n; v++)
        kids[parent[v]]++;
    for (int v = 0; v < n; v++)
        if (kids[v])
            nl[dep[v]]++;
    /* refill best-first */
    while (n < budget) {
        int best = -1;
        double bs = 0.0;
        for (int v = 0; v < n; v++) {
            if (dep[v] + 1 >= D || kids[v] >= W || (!kids[v] && nl[dep[v]] >= M))
                continue;
            double s = f[v] * sq_curve_p(c, dep[v] + 1, kids[v] + 1);
            if (s > bs) {
                bs = s;
                best = v;
            }
        }
        if (best < 0)
            break;
        if (!kids[best])
            nl[dep[best]]++;
        kids[best]++;
        parent[n] = best;
        rank[n] = kids[best];
        dep[n] = dep[best] + 1;
        f[n] = bs;
        n++;
    }
    rc = sq_tree_from_parents(parent, rank, n, out, "engine plan", err);
done:
    free(parent);
    free(rank);
    free(dep);
    free(kids);
    free(alive);
    free(cut);
    free(nl);
    free(ids);
    free(f);
    return rc;
}

int sq_engine_plan(const sq_engine_plan_params *p, sq_engine_plan_result *out, sq_error *err)
{
    memset(out, 0, sizeof *out);
    const sq_curve *c = p->curve ? p->curve : sq_curve_default();
    int rc;
    if (p->engine == SQ_ENGINE_VLLM) {
        int D = p->depth < p->budget ? p->depth : p->budget;
        int *k = malloc((size_t)(D > 1 ? D : 1) * sizeof *k);
        int levels = 0;
        double F = 1;
        if (!k)
            return sq_error_oom(err, "engine plan");
        rc = sq_uniform_search(c, p->budget, p->depth, p->width, k, &levels, &F, err);
        if (!rc) {
            out->tree = sq_uniform_tree(k, levels);
            if (!out->tree)
                rc = sq_error_oom(err, "engine plan");
        }
        free(k);
        if (rc)
            return rc;
        out->expected_tokens = sq_tree_expected_tokens(out->tree, c, NULL);
        out->exact = 1;
        out->depth = D;
        out->width = p->width > 0 ? p->width : c->width;
        return SQ_OK;
    }
    if (p->engine != SQ_ENGINE_TRTLLM && p->engine != SQ_ENGINE_MEDUSA)
        return sq_error_set(err, SQ_EUSAGE, "engine plan: unknown engine");
    sq_engine_limits lim = sq_engine_limits_of(p->engine, p->max_non_leaves);
    sq_dp_params dp_params = sq_dp_default_params();
    dp_params.budget = p->budget;
    dp_params.curve = c;
    int W = p->width > 0 ? p->width : c->width;
    if (W > lim.max_rank0 + 1)
        W = lim.max_rank0 + 1;
    dp_params.width = W;
    dp_params.depth = p->depth;
    if (lim.max_path && dp_params.depth > lim.max_path + 1)
        dp_params.depth = lim.max_path + 1;
    sq_dp *dp = NULL;
    if ((rc = sq_dp_check(&dp_params, err)))
        return rc;
    /* The caller's unconstrained solve serves when the engine leaves its width bound: the
     * table holds every depth bound up to its own, so a tighter depth is a column of it. */
    int N = dp_params.budget, D = dp_params.depth < N ? dp_params.depth : N;
    int B = W < (N > 1 ? N - 1 : 1) ? W : (N > 1 ? N - 1 : 1);
    sq_dp *use = p->solved;
    if (!use || sq_dp_budget(use) != N || sq_dp_width(use) != B || sq_dp_depth(use) < D ||
        sq_dp_curve(use) != c) {
        if ((rc = sq_dp_solve(&dp_params, &dp, err)))
            return rc;
        use = dp;
    }
    sq_tree *t = NULL;
    rc = sq_dp_tree(use, sq_dp_best_size(use, D), D, &t, err);
    out->depth = D;
    out->width = B;
    sq_dp_free(dp);
    if (rc)
        return rc;
    out->exact = 1;
    if (lim.max_non_leaves && sq_engine_check(t, p->engine, lim.max_non_leaves, "plan", NULL)) {
        /* Repair the optimal trees of several width bounds (narrower trees have fewer
         * non-leaves to cut) and keep the best; ties go to the wider bound. */
        sq_tree *best = NULL;
        double best_f = -1;
        int wmax = out->width;
        for (int w = wmax; w >= 1 && !rc; w = (p->budget <= 256 || w <= 2) ? w - 1 : w / 2) {
            sq_tree *cand = NULL, *fixed = NULL;
            if (w == wmax) {
                cand = t;
                t = NULL;
            } else {
                sq_dp *dw = NULL;
                dp_params.width = w;
                if ((rc = sq_dp_solve(&dp_params, &dw, err)))
                    break;
                rc = sq_dp_tree(dw, sq_dp_best_size(dw, D), D, &cand, err);
                sq_dp_free(dw);
                if (rc)
                    break;
            }
            rc = repair_non_leaves(cand, c, p->budget, D, wmax, lim.max_non_leaves, &fixed, err);
            sq_tree_free(cand);
            if (rc)
                break;
            double f = sq_tree_expected_tokens(fixed, c, NULL);
            if (f > best_f) {
                sq_tree_free(best);
                best = fixed;
                best_f = f;
            } else {
                sq_tree_free(fixed);
            }
        }
        sq_tree_free(t);
        if (rc) {
            sq_tree_free(best);
            return rc;
        }
        t = best;
        out->exact = 0;
    }
    out->tree = t;
    out->expected_tokens = sq_tree_expected_tokens(t, c, NULL);
    return SQ_OK;
}
