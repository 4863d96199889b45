#include "planner/baseline.h"

double sq_baseline_chain(const sq_curve *c, int budget, int depth, int *nodes)
{
    int len = budget < depth ? budget : depth;
    double f = 1.0, total = 1.0;
    for (int i = 1; i < len; i++) {
        f *= sq_curve_p(c, i, 1);
        total += f;
    }
    if (nodes)
        *nodes = len;
    return total;
}

double sq_baseline_kxl_value(const sq_curve *c, int k, int L)
{
    /* Each chain below the root: its head has rank i at depth 1, then rank-1 nodes. */
    double tail = 0.0, f = 1.0;
    for (int j = 0; j < L; j++) {
        tail += f;
        f *= sq_curve_p(c, j + 2, 1);
    }
    double total = 1.0;
    for (int i = 1; i <= k; i++)
        total += sq_curve_p(c, 1, i) * tail;
    return total;
}

double sq_baseline_kxl(const sq_curve *c, int budget, int depth, int width, int *k, int *L)
{
    double best = 1.0;
    int bk = 0, bl = 0;
    for (int l = 1; l + 1 <= depth && 1 + l <= budget; l++) {
        for (int kk = 1; kk <= width && 1 + kk * l <= budget; kk++) {
            double v = sq_baseline_kxl_value(c, kk, l);
            if (v > best || (v == best && bk > 0 && kk * l < bk * bl)) {
                best = v;
                bk = kk;
                bl = l;
            }
        }
    }
    *k = bk;
    *L = bl;
    return best;
}
