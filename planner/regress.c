/* The optimal tree's F and its gradient (regress.h). */
#include "planner/regress.h"

#include <stdlib.h>
#include <string.h>

#include "libsequoia/format/tree.h"
#include "planner/dp.h"

int sq_accept_optimal_F(const sq_curve *c, int budget, int depth, double *F, double *grad,
                        int *size, sq_error *err)
{
    sq_dp_params dp_params = sq_dp_default_params();
    dp_params.budget = budget;
    dp_params.depth = depth;
    dp_params.width = 0;
    dp_params.curve = c;
    sq_dp *dp = NULL;
    sq_tree *t = NULL;
    int rc;
    if ((rc = sq_dp_check(&dp_params, err)) || (rc = sq_dp_solve(&dp_params, &dp, err)))
        return rc;
    int D = sq_dp_depth(dp), n = sq_dp_best_size(dp, D);
    if ((rc = sq_dp_tree(dp, n, D, &t, err))) {
        sq_dp_free(dp);
        return rc;
    }
    *size = n;
    int W = c->width;
    /* f(v) and g_k(v) = df(v)/dp_k along the tree (parents come before children). */
    double *f = malloc((size_t)t->n * sizeof *f);
    double *g = calloc((size_t)t->n * (size_t)W, sizeof *g);
    if (!f || !g) {
        free(f);
        free(g);
        sq_tree_free(t);
        sq_dp_free(dp);
        return sq_error_oom(err, "tree scores");
    }
    memset(grad, 0, (size_t)W * sizeof *grad);
    *F = 0;
    for (int v = 0; v < t->n; v++) {
        double *gv = g + (size_t)v * (size_t)W;
        if (t->parent[v] < 0) {
            f[v] = 1.0;
        } else {
            int par = t->parent[v], r = t->rank[v];
            double pr = r <= W ? c->p[r - 1] : 0.0;
            const double *gp = g + (size_t)par * (size_t)W;
            f[v] = f[par] * pr;
            for (int k = 0; k < W; k++)
                gv[k] = gp[k] * pr;
            if (r <= W)
                gv[r - 1] += f[par];
        }
        *F += f[v];
        for (int k = 0; k < W; k++)
            grad[k] += gv[k];
    }
    free(f);
    free(g);
    sq_tree_free(t);
    sq_dp_free(dp);
    return SQ_OK;
}
