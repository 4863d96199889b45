/* The reference DP (see tests/dp_reference.h): planner/dp.c as of commit fc2b186, renamed. */
#include "tests/dp_reference.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

struct sq_dpref {
    int N, D, B;             /* effective bounds                                              */
    const sq_curve *curve;
    int depth_dependent;
    int pass_depth;          /* depth bound of the pass whose back-pointers are held          */
    long long *maxsize;      /* (D+1) largest tree of depth <= d and width <= B, capped at N  */
    double *best;            /* (D+1, N+1) Best[n][d] of the current pass                     */
    double *table;           /* (D+1, N+1) the exposed table (== best unless depth-dependent) */
    int32_t *bestb;          /* (D+1, N+1) root's child count achieving Best                  */
    int32_t *arg;            /* (D+1, B+1, N+1) subtree size of the b-th child                */
    double *layer[2];        /* (N+1) T[.][d][b-1] and T[.][d][b]                             */
};

static void effective(const sq_dp_params *p, int *N, int *D, int *B)
{
    *N = p->budget;
    *D = p->depth < p->budget ? p->depth : p->budget;
    int w = p->width > 0 ? p->width : p->curve->width;
    int wmax = p->budget > 1 ? p->budget - 1 : 1;
    *B = w < wmax ? w : wmax;
}

void sq_dpref_free(sq_dpref *dp)
{
    if (!dp)
        return;
    free(dp->maxsize);
    free(dp->best);
    if (dp->table != dp->best)
        free(dp->table);
    free(dp->bestb);
    free(dp->arg);
    free(dp->layer[0]);
    free(dp->layer[1]);
    free(dp);
}

#define AT(dp, d, n) ((size_t)(d) * (size_t)((dp)->N + 1) + (size_t)(n))
#define ARG(dp, d, b, n) \
    (((size_t)(d) * (size_t)((dp)->B + 1) + (size_t)(b)) * (size_t)((dp)->N + 1) + (size_t)(n))

/* One pass with depth bound Dmax: fills best/bestb/arg for every d <= Dmax. For a
 * depth-dependent curve, a subtree with depth budget d hangs at absolute depth Dmax - d, so its
 * children use the curve row for depth Dmax - d + 1. */
static void solve_pass(sq_dpref *dp, int Dmax)
{
    const int N = dp->N, B = dp->B;
    for (int d = 0; d <= Dmax; d++)
        for (int n = 0; n <= N; n++) {
            dp->best[AT(dp, d, n)] = (d >= 1 && n == 1) ? 1.0 : -INFINITY;
            dp->bestb[AT(dp, d, n)] = 0;
        }
    for (int d = 2; d <= Dmax; d++) {
        const double *prev = dp->best + AT(dp, d - 1, 0);
        double *col = dp->best + AT(dp, d, 0);
        int32_t *colb = dp->bestb + AT(dp, d, 0);
        const long long maxs = dp->maxsize[d - 1];
        const int row = Dmax - d + 1;
        double *tprev = dp->layer[0], *tcur = dp->layer[1];
        tprev[1] = 1.0; /* b = 0: the root alone */
        for (int b = 1; b <= B; b++) {
            const double pb = sq_curve_p(dp->curve, row, b);
            long long top = 1 + (long long)b * maxs;
            const int nmax = top < N ? (int)top : N;
            int32_t *argb = dp->arg + ARG(dp, d, b, 0);
            for (int n = b + 1; n <= nmax; n++) {
                long long lo_ll = (long long)n - 1 - (long long)(b - 1) * maxs;
                const int lo = lo_ll > 1 ? (int)lo_ll : 1;
                const int hi = (long long)(n - b) < maxs ? n - b : (int)maxs;
                double bv = -INFINITY;
                int bm = lo;
                for (int m = lo; m <= hi; m++) {
                    double v = tprev[n - m] + pb * prev[m];
                    if (v > bv) {
                        bv = v;
                        bm = m;
                    }
                }
                tcur[n] = bv;
                argb[n] = bm;
                if (bv > col[n]) {
                    col[n] = bv;
                    colb[n] = b;
                }
            }
            double *t = tprev;
            tprev = tcur;
            tcur = t;
        }
    }
    dp->pass_depth = Dmax;
}

int sq_dpref_solve(const sq_dp_params *params, sq_dpref **out, sq_error *err)
{
    *out = NULL;
    sq_dpref *dp = calloc(1, sizeof *dp);
    if (!dp)
        return sq_error_oom(err, "DP");
    effective(params, &dp->N, &dp->D, &dp->B);
    dp->curve = params->curve;
    dp->depth_dependent = params->curve->depth_rows > 0;
    const size_t cols = (size_t)(dp->D + 1) * (size_t)(dp->N + 1);
    dp->maxsize = calloc((size_t)dp->D + 1, sizeof *dp->maxsize);
    dp->best = calloc(cols, sizeof *dp->best);
    dp->bestb = calloc(cols, sizeof *dp->bestb);
    dp->arg = calloc(cols * (size_t)(dp->B + 1), sizeof *dp->arg);
    dp->layer[0] = calloc((size_t)dp->N + 1, sizeof(double));
    dp->layer[1] = calloc((size_t)dp->N + 1, sizeof(double));
    dp->table = dp->depth_dependent ? calloc(cols, sizeof *dp->table) : dp->best;
    if (!dp->maxsize || !dp->best || !dp->bestb || !dp->arg || !dp->layer[0] || !dp->layer[1] ||
        !dp->table) {
        sq_dpref_free(dp);
        return sq_error_oom(err, "DP tables");
    }
    dp->maxsize[0] = 0;
    for (int d = 1; d <= dp->D; d++) {
        long long s = 1 + (long long)dp->B * dp->maxsize[d - 1];
        dp->maxsize[d] = s < dp->N ? s : dp->N;
    }
    if (!dp->depth_dependent) {
        solve_pass(dp, dp->D);
    } else {
        for (int d = 0; d <= dp->D; d++) {
            if (d >= 1)
                solve_pass(dp, d);
            for (int n = 0; n <= dp->N; n++)
                dp->table[AT(dp, d, n)] = d >= 1 ? dp->best[AT(dp, d, n)] : -INFINITY;
        }
    }
    *out = dp;
    return SQ_OK;
}

double sq_dpref_best(const sq_dpref *dp, int n, int d)
{
    if (n < 0 || n > dp->N || d < 0)
        return -INFINITY;
    if (d > dp->D)
        d = dp->D;
    return dp->table[AT(dp, d, n)];
}

int sq_dpref_tree(sq_dpref *dp, int n, int d, sq_tree **out, sq_error *err)
{
    *out = NULL;
    if (d > dp->D)
        d = dp->D;
    if (!isfinite(sq_dpref_best(dp, n, d)))
        return sq_error_set(err, SQ_EUSAGE, "no tree of size %d has depth <= %d and at most %d "
                            "children per node", n, d, dp->B);
    if (dp->depth_dependent && dp->pass_depth != d)
        solve_pass(dp, d);
    sq_tree *t = sq_tree_new(n);
    int *size = malloc((size_t)n * sizeof *size);    /* subtree size of each node       */
    int *budget = malloc((size_t)n * sizeof *budget); /* its depth budget                */
    int *kids = malloc(((size_t)dp->B + 1) * sizeof *kids);
    if (!t || !size || !budget || !kids) {
        sq_tree_free(t);
        free(size);
        free(budget);
        free(kids);
        return sq_error_oom(err, "tree");
    }
    t->parent[0] = -1;
    size[0] = n;
    budget[0] = d;
    int next = 1;
    /* Breadth-first: nodes are numbered as they are created, children in rank order. */
    for (int v = 0; v < next; v++) {
        int s = size[v], e = budget[v];
        if (s == 1)
            continue;
        int b = dp->bestb[AT(dp, e, s)];
        SQ_ASSERT(b >= 1 && b <= dp->B);
        for (int k = b; k >= 1; k--) {
            int m = dp->arg[ARG(dp, e, k, s)];
            SQ_ASSERT(m >= 1 && m < s);
            kids[k] = m;
            s -= m;
        }
        SQ_ASSERT(s == 1);
        for (int k = 1; k <= b; k++) {
            SQ_ASSERT(next < n);
            t->parent[next] = v;
            t->rank[next] = k;
            t->depth[next] = t->depth[v] + 1;
            size[next] = kids[k];
            budget[next] = e - 1;
            next++;
        }
    }
    SQ_ASSERT(next == n);
    free(size);
    free(budget);
    free(kids);
    *out = t;
    return SQ_OK;
}
