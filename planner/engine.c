#include "planner/engine.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "planner/dp.h"
#include "planner/engine_private.h"

sq_engine_plan_params sq_engine_plan_default_params(void)
{
    return (sq_engine_plan_params){.engine = SQ_ENGINE_VLLM, .budget = 128, .depth = 10,
                                   .width = 0, .max_non_leaves = 0, .curve = sq_curve_default(),
                                   .hw = NULL};
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
                            "memo cells exceeds the limit %lld; lower the budget or the depth",
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

/* ---- EAGLE-1's parent rule: cut and refill ------------------------------------------- */

/* A tree grown node by node under depth, width and EAGLE-1's rule (planner/export.h). */
typedef struct grow {
    int     n, cap, D, W;
    int    *parent, *rank, *dep, *kids, *deep;   /* deep: has a child with children */
    double *f;
    char   *blocked;                             /* grow_fill's scratch               */
} grow;

static void grow_free(grow *g)
{
    free(g->parent);
    free(g->rank);
    free(g->dep);
    free(g->kids);
    free(g->deep);
    free(g->f);
    free(g->blocked);
}

static int grow_init(grow *g, int cap, int D, int W)
{
    memset(g, 0, sizeof *g);
    g->cap = cap;
    g->D = D;
    g->W = W;
    g->parent = malloc((size_t)cap * sizeof *g->parent);
    g->rank = malloc((size_t)cap * sizeof *g->rank);
    g->dep = malloc((size_t)cap * sizeof *g->dep);
    g->kids = calloc((size_t)cap, sizeof *g->kids);
    g->deep = calloc((size_t)cap, sizeof *g->deep);
    g->f = malloc((size_t)cap * sizeof *g->f);
    g->blocked = malloc((size_t)cap);
    if (!g->parent || !g->rank || !g->dep || !g->kids || !g->deep || !g->f || !g->blocked) {
        grow_free(g);
        return -1;
    }
    return 0;
}

static void grow_add(grow *g, int parent, int rank, double f)
{
    int v = g->n++;
    g->parent[v] = parent;
    g->rank[v] = rank;
    g->dep[v] = parent < 0 ? 0 : g->dep[parent] + 1;
    g->f[v] = f;
    if (parent >= 0) {
        if (!g->kids[parent] && g->parent[parent] >= 0)
            g->deep[g->parent[parent]] = 1;
        g->kids[parent]++;
    }
}

/* Rank-path order of two nodes of one level: <0, 0, >0. */
static int grow_cmp(const grow *g, int u, int v)
{
    while (g->parent[u] != g->parent[v]) {
        u = g->parent[u];
        v = g->parent[v];
    }
    return g->rank[u] - g->rank[v];
}

/* Does giving x one more child keep EAGLE-1's rule? Only a new non-leaf changes it: x joins
 * its level's non-leaves without grandchildren, and x's parent may join the deep ones. */
static int grow_eagle_ok(const grow *g, int x)
{
    if (g->kids[x])
        return 1;
    int p = g->parent[x];
    for (int v = 0; v < g->n; v++) {
        if (!g->kids[v])
            continue;
        if (g->dep[v] == g->dep[x] && v != x && g->deep[v] && grow_cmp(g, v, x) > 0)
            return 0;   /* a deep non-leaf after x */
        if (p > 0 && !g->deep[p] && g->dep[v] == g->dep[p] && v != p && !g->deep[v] &&
            grow_cmp(g, v, p) < 0)
            return 0;   /* p turns deep after a shallow non-leaf */
    }
    return 1;
}

/* Best-first refill up to `budget` nodes. */
static void grow_fill(grow *g, const sq_curve *c, int budget)
{
    char *blocked = g->blocked;
    while (g->n < budget) {
        memset(blocked, 0, (size_t)g->n);
        int added = 0;
        for (;;) {
            int best = -1;
            double bs = 0.0;
            for (int v = 0; v < g->n; v++) {
                if (blocked[v] || g->dep[v] + 1 >= g->D || g->kids[v] >= g->W)
                    continue;
                double sc = g->f[v] * sq_curve_p(c, g->dep[v] + 1, g->kids[v] + 1);
                if (sc > bs) {
                    bs = sc;
                    best = v;
                }
            }
            if (best < 0)
                break;
            if (!grow_eagle_ok(g, best)) {
                blocked[best] = 1;
                continue;
            }
            grow_add(g, best, g->kids[best] + 1, bs);
            added = 1;
            break;
        }
        if (!added)
            break;
    }
}

static int grow_tree(const grow *g, sq_tree **out, sq_error *err)
{
    return sq_tree_from_parents(g->parent, g->rank, g->n, out, "engine plan", err);
}

int sq_eagle_repair(const sq_tree *t, const sq_curve *c, int budget, int D, int W,
                    sq_tree **out, sq_error *err)
{
    *out = NULL;
    int n = t->n, cap = budget > n ? budget : n;
    double *f = malloc((size_t)n * sizeof *f), *sub = calloc((size_t)n, sizeof *sub);
    int *kids = calloc((size_t)n, sizeof *kids), *deep = calloc((size_t)n, sizeof *deep);
    int *cut = calloc((size_t)n, sizeof *cut);   /* 1: drop children; 2: drop grandchildren */
    int *keep = malloc((size_t)n * sizeof *keep), *id = malloc((size_t)n * sizeof *id);
    grow g;
    if (!f || !sub || !kids || !deep || !cut || !keep || !id || grow_init(&g, cap, D, W)) {
        free(f), free(sub), free(kids), free(deep), free(cut), free(keep), free(id);
        return sq_error_oom(err, "engine plan");
    }
    sq_tree_expected_tokens(t, c, f);
    for (int v = 0; v < n; v++)
        keep[v] = 1;
    int rc = SQ_OK;
    /* Level by level, top-down (nodes are in level order). */
    int changed = 0;
    for (int l = 1, start = 1; start < n; l++) {
        int end = start;
        while (end < n && t->depth[end] == l)
            end++;
        /* the state of the kept tree */
        for (int v = 1; v < n; v++)
            keep[v] = keep[t->parent[v]] && !(cut[t->parent[v]] == 1) &&
                      !(t->parent[v] > 0 && cut[t->parent[t->parent[v]]] == 2);
        memset(kids, 0, (size_t)n * sizeof *kids);
        memset(deep, 0, (size_t)n * sizeof *deep);
        memset(sub, 0, (size_t)n * sizeof *sub);
        for (int v = n - 1; v >= 1; v--)
            if (keep[v]) {
                kids[t->parent[v]]++;
                sub[v] += f[v];
                sub[t->parent[v]] += sub[v];
            }
        for (int v = 1; v < n; v++)
            if (keep[v] && kids[v])
                deep[t->parent[v]] = 1;
        /* cost of a split s among this level's kept non-leaves: shallow ones before s lose
         * their children, deep ones from s on lose their grandchildren */
        double best_cost = INFINITY, run = 0.0, tail = 0.0;
        for (int v = start; v < end; v++)
            if (keep[v] && kids[v] && deep[v]) {
                double gc = 0.0;
                for (int u = v + 1; u < n && t->depth[u] <= l + 1; u++)
                    if (keep[u] && t->parent[u] == v)
                        gc += sub[u] - f[u];
                tail += gc;
            }
        int best_s = start;
        /* s runs over the positions start..end; at s the cost is run (before) + tail (after) */
        for (int s = start;; s++) {
            double cost = run + tail;
            if (cost < best_cost) {
                best_cost = cost;
                best_s = s;
            }
            if (s >= end)
                break;
            if (keep[s] && kids[s]) {
                if (!deep[s]) {
                    run += sub[s] - f[s];
                } else {
                    double gc = 0.0;
                    for (int u = s + 1; u < n && t->depth[u] <= l + 1; u++)
                        if (keep[u] && t->parent[u] == s)
                            gc += sub[u] - f[u];
                    tail -= gc;
                }
            }
        }
        for (int v = start; v < end; v++)
            if (keep[v] && kids[v]) {
                if (v < best_s && !deep[v] && cut[v] != 1) {
                    cut[v] = 1;
                    changed = 1;
                } else if (v >= best_s && deep[v] && cut[v] != 2) {
                    cut[v] = 2;
                    changed = 1;
                }
            }
        start = end;
        /* A node that lost its children may leave its parent without grandchildren: the levels
         * above are scanned again until nothing changes (only cuts happen: it ends). */
        if (start >= n && changed) {
            changed = 0;
            l = 0;
            start = 1;
        }
    }
    for (int v = 1; v < n; v++)
        keep[v] = keep[t->parent[v]] && cut[t->parent[v]] != 1 &&
                  !(t->parent[v] > 0 && cut[t->parent[t->parent[v]]] == 2);
    /* copy the kept nodes (level order keeps parents first) */
    for (int v = 0; v < n; v++)
        if (keep[v]) {
            id[v] = g.n;
            grow_add(&g, v ? id[t->parent[v]] : -1, t->rank[v], f[v]);
        }
    /* ranks stay 1..k among kept siblings: children are cut all at once */
    grow_fill(&g, c, budget);
    rc = grow_tree(&g, out, err);
    grow_free(&g);
    free(f), free(sub), free(kids), free(deep), free(cut), free(keep), free(id);
    return rc;
}

/* ---- helpers --------------------------------------------------------------------------- */

/* The optimal tree of the DP under (budget, depth, width), at the smallest size reaching the
 * best value; *D and *B get the effective bounds. */
static int dp_best_tree(const sq_curve *c, int budget, int depth, int width, sq_dp *solved,
                        sq_tree **t, int *D, int *B, sq_error *err)
{
    sq_dp_params dpp = sq_dp_default_params();
    dpp.budget = budget;
    dpp.depth = depth;
    dpp.width = width;
    dpp.curve = c;
    sq_dp *dp = NULL;
    int rc;
    *t = NULL;
    if ((rc = sq_dp_check(&dpp, err)))
        return rc;
    /* The caller's unconstrained solve serves when the engine leaves its width bound: the
     * table holds every depth bound up to its own, so a tighter depth is a column of it. */
    int N = budget, DD = depth < N ? depth : N;
    int BB = width < (N > 1 ? N - 1 : 1) ? width : (N > 1 ? N - 1 : 1);
    sq_dp *use = solved;
    if (!use || sq_dp_budget(use) != N || sq_dp_width(use) != BB || sq_dp_depth(use) < DD ||
        sq_dp_curve(use) != c) {
        if ((rc = sq_dp_solve(&dpp, &dp, err)))
            return rc;
        use = dp;
        DD = sq_dp_depth(dp);
    }
    rc = sq_dp_tree(use, sq_dp_best_size(use, DD), DD, t, err);
    if (D)
        *D = DD;
    if (B)
        *B = sq_dp_width(use);
    sq_dp_free(dp);
    return rc;
}

/* The most non-leaves on one level. Nodes are breadth-first with siblings contiguous
 * (libsequoia/format/tree.h), so the parents met walking the nodes are the non-leaves, level
 * by level, each once: counted as they come, with nothing allocated. */
static int max_non_leaves_of(const sq_tree *t)
{
    int m = 0, level = -1, count = 0;
    for (int v = 1; v < t->n; v++) {
        int p = t->parent[v];
        if (v > 1 && p == t->parent[v - 1])
            continue;
        if (t->depth[p] != level) {
            level = t->depth[p];
            count = 0;
        }
        if (++count > m)
            m = count;
    }
    return m;
}

/* ---- repairing the DP trees of several width bounds ------------------------------------ */

/* Repairs `cand` (NULL: grows a tree from the root alone) into *out within the engine's rule. */
typedef int (*repair_fn)(const sq_tree *cand, const sq_curve *c, int budget, int D, int B,
                         int max_non_leaves, sq_tree **out, sq_error *err);

/* The optimal trees of the width bounds B, B-1, ... (B, B/2, B/4, ... past 256 nodes, one by one
 * from 2) down to 1, and with from_root a tree grown from the root alone, each repaired by `fix`;
 * the best with at least min_levels levels is kept (ties go to the wider bound). `t` is the
 * optimal tree of width B and is consumed. *best stays NULL when no repaired tree qualifies. */
static int repair_widths(sq_tree *t, const sq_curve *c, int budget, int D, int B,
                         int max_non_leaves, int from_root, int min_levels, repair_fn fix,
                         sq_tree **best, sq_error *err)
{
    *best = NULL;
    double best_f = -1;
    int rc = SQ_OK;
    for (int w = B; w >= (from_root ? 0 : 1) && !rc; w = (budget <= 256 || w <= 2) ? w - 1 : w / 2) {
        sq_tree *cand = NULL, *fixed = NULL;
        if (w == B) {
            cand = t;
            t = NULL;
        } else if (w > 0 && (rc = dp_best_tree(c, budget, D, w, NULL, &cand, NULL, NULL, err))) {
            break;
        }
        rc = fix(cand, c, budget, D, B, max_non_leaves, &fixed, err);
        sq_tree_free(cand);
        double f = 0;
        if (!rc && (rc = sq_tree_score(fixed, c, &f, err)))
            sq_tree_free(fixed);
        if (rc)
            break;
        if (sq_tree_depth(fixed) >= min_levels && f > best_f) {
            sq_tree_free(*best);
            *best = fixed;
            best_f = f;
        } else {
            sq_tree_free(fixed);
        }
    }
    sq_tree_free(t);
    if (rc) {
        sq_tree_free(*best);
        *best = NULL;
    }
    return rc;
}

/* ---- vLLM ---------------------------------------------------------------------------------- */

int sqe_plan_uniform(const sq_engine_plan_params *p, const sq_curve *c, sq_engine_plan_result *out,
                     sq_error *err)
{
    int D = p->depth < p->budget ? p->depth : p->budget;
    int *k = malloc((size_t)(D > 1 ? D : 1) * sizeof *k);
    int levels = 0, rc;
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
    out->exact = 1;
    out->depth = D;
    out->width = p->width > 0 ? p->width : c->width;
    return SQ_OK;
}

/* ---- TensorRT-LLM and Medusa --------------------------------------------------------- */

int sqe_plan_rank_limited(const sq_engine_plan_params *p, const sq_curve *c,
                          sq_engine_plan_result *out, sq_error *err)
{
    sq_engine_limits lim = sq_engine_limits_of(p->engine, p->max_non_leaves);
    int budget = p->budget;
    int W = p->width > 0 ? p->width : c->width;
    if (lim.max_rank0 >= 0 && W > lim.max_rank0 + 1)
        W = lim.max_rank0 + 1;
    int depth = p->depth;
    if (lim.max_path && depth > lim.max_path + 1)
        depth = lim.max_path + 1;
    sq_tree *t = NULL;
    int D = 0, B = 0, rc;
    if ((rc = dp_best_tree(c, budget, depth, W, p->solved, &t, &D, &B, err)))
        return rc;
    out->depth = D;
    out->width = B;
    out->exact = 1;
    if (lim.max_non_leaves && max_non_leaves_of(t) > lim.max_non_leaves) {
        /* Repair the optimal trees of several width bounds (narrower trees have fewer
         * non-leaves to cut) and keep the best. */
        sq_tree *best = NULL;
        if ((rc = repair_widths(t, c, budget, D, B, lim.max_non_leaves, 0, 0, repair_non_leaves,
                                &best, err)))
            return rc;
        t = best;
        out->exact = 0;
    }
    out->tree = t;
    return SQ_OK;
}

/* ---- EAGLE-1 --------------------------------------------------------------------------- */

/* EAGLE-1's repair of `cand`, or (cand NULL) the tree grown from the root within its rule. */
static int fix_eagle(const sq_tree *cand, const sq_curve *c, int budget, int D, int B,
                     int max_non_leaves, sq_tree **out, sq_error *err)
{
    (void)max_non_leaves;
    if (cand)
        return sq_eagle_repair(cand, c, budget, D, B, out, err);
    grow g;
    if (grow_init(&g, budget, D, B))
        return sq_error_oom(err, "engine plan");
    grow_add(&g, -1, 0, 1.0);
    grow_fill(&g, c, budget);
    int rc = grow_tree(&g, out, err);
    grow_free(&g);
    return rc;
}

int sqe_plan_eagle(const sq_engine_plan_params *p, const sq_curve *c, sq_engine_plan_result *out,
                   sq_error *err)
{
    sq_engine_limits lim = sq_engine_limits_of(p->engine, p->max_non_leaves);
    int min_levels = lim.min_path + 1;   /* EAGLE-1: 3 */
    if (p->budget < min_levels || p->depth < min_levels)
        return sq_error_set(err, SQ_EUSAGE, "engine eagle: budget %d and depth %d: EAGLE-1 needs "
                            "a path of at least 2 tokens (a tree of depth 1 crashes its "
                            "generate_tree_buffers with IndexError): use a budget of 3 or more "
                            "and a depth of 3 or more", p->budget, p->depth);
    int W = p->width > 0 ? p->width : c->width;
    if (W > lim.max_rank0 + 1)
        W = lim.max_rank0 + 1;
    sq_tree *t = NULL;
    int D = 0, B = 0, rc;
    if ((rc = dp_best_tree(c, p->budget, p->depth, W, p->solved, &t, &D, &B, err)))
        return rc;
    out->depth = D;
    out->width = B;
    out->exact = 1;
    if (sq_tree_depth(t) >= min_levels && sq_eagle_deep_first(t, NULL, NULL)) {
        out->tree = t;
        return SQ_OK;
    }
    /* Repair the DP trees of several widths, and grow one from the root; keep the best. */
    sq_tree *best = NULL;
    if ((rc = repair_widths(t, c, p->budget, D, B, 0, 1, min_levels, fix_eagle, &best, err)))
        return rc;
    if (!best)
        return sq_error_set(err, SQ_EUSAGE, "engine eagle: no tree of 2 levels below the root "
                            "fits the bounds");
    out->tree = best;
    out->exact = 0;
    return SQ_OK;
}

/* ---- envelopes (SGLang, TensorRT-LLM's dynamic tree) ---------------------------------- */

typedef struct env_cand {
    sq_tree *tree;
    int      exact, depth;
    double   score, ms;
} env_cand;

/* The best tree for topk K: the DP with width K (the caller's solve when it is that one), its
 * (size, depth) by tokens per step or per second, repaired to K non-leaves per level. */
static int envelope_try(const sq_engine_plan_params *p, const sq_curve *c, int K, env_cand *out,
                        sq_error *err)
{
    memset(out, 0, sizeof *out);
    sq_dp_params dpp = sq_dp_default_params();
    dpp.budget = p->budget;
    dpp.depth = p->depth;
    dpp.width = K;
    dpp.curve = c;
    sq_dp *dp = NULL, *use = p->solved;
    sq_hw_result *hw = NULL;
    sq_tree *t = NULL;
    int rc;
    if ((rc = sq_dp_check(&dpp, err)))
        return rc;
    int D = p->depth < p->budget ? p->depth : p->budget;
    if (!use || sq_dp_budget(use) != p->budget || sq_dp_width(use) != K ||
        sq_dp_depth(use) != D || sq_dp_curve(use) != c) {
        if ((rc = sq_dp_solve(&dpp, &dp, err)))
            return rc;
        use = dp;
    }
    int n = 1, d = sq_dp_depth(use);
    if (p->hw) {
        if ((rc = sq_hw_select(use, p->hw, &hw, err))) {
            sq_dp_free(dp);
            return rc;
        }
        n = hw->n;
        d = hw->d;
        if (n < 2) {
            /* The engine always drafts: the fastest tree with a draft step (it may not pay;
             * the speedup printed says so), by the cost model that made the choice. */
            const double *tab = p->hw->cost_model == SQ_COST_SEQUOIA_RUN
                                    ? hw->runtime_speedup_table
                                    : hw->speedup_table;
            double bs = -1;
            for (int m = 2; m <= hw->N; m++)
                for (int dd = 2; dd <= hw->D; dd++) {
                    double sp = tab[(size_t)m * (size_t)(hw->D + 1) + (size_t)dd];
                    if (!isnan(sp) && sp > bs) {
                        bs = sp;
                        n = m;
                        d = dd;
                    }
                }
        }
        sq_hw_result_free(hw);
    } else {
        n = sq_dp_best_size(use, d);
    }
    rc = sq_dp_tree(use, n, d, &t, err);
    sq_dp_free(dp);
    if (rc)
        return rc;
    out->exact = 1;
    if (max_non_leaves_of(t) > K) {
        sq_tree *fixed = NULL;
        rc = repair_non_leaves(t, c, n, d, K, K, &fixed, err);
        sq_tree_free(t);
        if (rc)
            return rc;
        t = fixed;
        out->exact = 0;
    }
    double F = 0;
    if ((rc = sq_tree_score(t, c, &F, err))) {
        sq_tree_free(t);
        return rc;
    }
    out->score = F;
    if (p->hw) {
        if ((rc = sq_hw_step_ms(p->hw, t, F, &out->ms, err))) {
            sq_tree_free(t);
            return rc;
        }
        out->score = F / out->ms;
    }
    out->tree = t;
    out->depth = d;
    return SQ_OK;
}

int sqe_plan_envelope(const sq_engine_plan_params *p, const sq_curve *c,
                      sq_engine_plan_result *out, sq_error *err)
{
    if (p->budget < 2 || p->depth < 2)
        return sq_error_set(err, SQ_EUSAGE, "engine %s: budget %d and depth %d leave no draft "
                            "step: use a budget of 2 or more and a depth of 2 or more",
                            sq_engine_name(p->engine), p->budget, p->depth);
    int Kmax = p->width > 0 ? p->width : c->width;
    if (Kmax > p->budget - 1)
        Kmax = p->budget - 1;
    /* The widest envelope first: its tree's own topk K* bounds the search, since a wider
     * envelope than K* holds that tree and cannot beat it. Then K = 1 .. K*-1, ties to the
     * smaller K. */
    env_cand wide, cand;
    int rc = envelope_try(p, c, Kmax, &wide, err);
    if (rc)
        return rc;
    int Kstar = Kmax;
    if (wide.tree->n >= 2) {
        sq_envelope env;
        if (sq_envelope_of(wide.tree, p->engine, &env, "plan", NULL) == SQ_OK && env.topk < Kmax)
            Kstar = env.topk;
    }
    double best_score = -1;
    for (int K = 1; K <= Kstar && !rc; K++) {
        if (K == Kstar) {
            cand = wide;
            wide.tree = NULL;
        } else if ((rc = envelope_try(p, c, K, &cand, err))) {
            break;
        }
        if (cand.tree->n >= 2 && cand.score > best_score * (1 + 1e-12)) {
            best_score = cand.score;
            sq_tree_free(out->tree);
            out->tree = cand.tree;
            out->exact = cand.exact;
            out->depth = cand.depth;
            out->width = K;
            out->step_ms = cand.ms;
        } else {
            sq_tree_free(cand.tree);
        }
    }
    sq_tree_free(wide.tree);
    if (rc) {
        sq_tree_free(out->tree);
        out->tree = NULL;
        return rc;
    }
    if (!out->tree)
        return sq_error_set(err, SQ_EUSAGE, "engine %s: no tree with a draft step is worth "
                            "planning under this curve", sq_engine_name(p->engine));
    if (p->hw && out->step_ms > 0) {
        sq_tree *root = sq_tree_new(1);
        double t1 = 0, F = 0;
        if (!root || (rc = sq_tree_score(out->tree, c, &F, err))) {
            sq_tree_free(root);
            sq_tree_free(out->tree);
            out->tree = NULL;
            return rc ? rc : sq_error_oom(err, "a one-node tree");
        }
        root->parent[0] = -1;
        if (sq_hw_step_ms(p->hw, root, 1.0, &t1, NULL) == SQ_OK)
            out->speedup = F * t1 / out->step_ms;
        sq_tree_free(root);
    }
    return sq_envelope_of(out->tree, p->engine, &out->envelope, "plan", err);
}

int sq_engine_plan(const sq_engine_plan_params *p, sq_engine_plan_result *out, sq_error *err)
{
    memset(out, 0, sizeof *out);
    const sq_engine_info *in = sq_engine_info_of(p->engine);
    if (!in)
        return sq_error_set(err, SQ_EUSAGE, "engine plan: unknown engine");
    const sq_curve *c = p->curve ? p->curve : sq_curve_default();
    int rc;
    out->budget = p->budget;
    if ((rc = in->plan(p, c, out, err)))
        return rc;
    sq_engine_limits lim = sq_engine_limits_of(p->engine, p->max_non_leaves);
    if (!sq_engine_size_ok(&lim, out->tree->n)) {
        /* A size the engine cannot take (TensorRT-LLM: 32k + 1 nodes): one node less is the best
         * size below, and it is never 32k + 1 itself. */
        sq_engine_plan_params q = *p;
        q.budget = out->tree->n - 1;
        q.solved = NULL;
        sq_tree_free(out->tree);
        memset(out, 0, sizeof *out);
        if ((rc = in->plan(&q, c, out, err)))
            return rc;
        out->budget = q.budget;
    }
    if ((rc = sq_tree_score(out->tree, c, &out->expected_tokens, err))) {
        sq_tree_free(out->tree);
        out->tree = NULL;
    }
    return rc;
}
