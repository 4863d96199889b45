/* The Sequoia dynamic program (DESIGN.md §3; paper §3.1, App. F.1).
 *
 *   T[n][d][b] = best F over trees of size n, depth <= d, whose root has exactly b children
 *   Best[n][d] = max_b T[n][d][b]
 *   T[n][d][b] = max_{m} T[n-m][d][b-1] + p_b · Best[m][d-1]     (b-th child: m nodes, depth d-1)
 *
 * One solve yields Best[n][d] for every n <= budget and d <= depth, and the optimal tree of any
 * of those sizes and depths. Time O(N²·D·B), memory O(N·D·B) (32-bit back-pointers).
 *
 * Tie-breaking (so that the same input always gives the byte-identical plan): candidates are
 * scanned in increasing order and only a strictly larger value replaces the incumbent, so
 *  - the root gets the fewest children b that reach the optimum, and
 *  - among equally good splits the b-th child gets the smallest subtree m (larger subtrees go
 *    to better-ranked children).
 *
 * With a depth-dependent curve (p_by_depth) the value of a subtree depends on where it hangs,
 * so column d of the table comes from its own solve with the depth bound d; the cost is then
 * O(N²·D²·B/2). */
#ifndef SQ_PLANNER_DP_H
#define SQ_PLANNER_DP_H

#include "libsequoia/format/curve.h"
#include "libsequoia/base/error.h"
#include "libsequoia/format/tree.h"

/* Documented limits. A request past them is refused at once (SQ_EUSAGE). */
#define SQ_DP_MAX_CELLS (1LL << 24)   /* (N+1)·(D+1)·(B+1) after clamping: 64 MiB of back-pointers */
#define SQ_DP_MAX_WORK (1LL << 35)    /* inner-loop steps, about N²·D·B/2 (depth-dependent: ·D/2) */
#define SQ_DP_MAX_BUDGET (1 << 20)

typedef struct sq_dp_params {
    int budget;             /* N >= 1: tree size, root included                            */
    int depth;              /* D >= 1: levels, root included; clamped to N                 */
    int width;              /* B >= 1: children per node; 0 = the curve's width; clamped   */
    const sq_curve *curve;  /* acceptance; its p_by_depth is used when present             */
} sq_dp_params;

/* budget 128, depth 10, width 0 (the curve's), the embedded default curve. */
sq_dp_params sq_dp_default_params(void);

typedef struct sq_dp sq_dp;

/* Checks the parameters against the limits without solving. */
int sq_dp_check(const sq_dp_params *params, sq_error *err);

int sq_dp_solve(const sq_dp_params *params, sq_dp **out, sq_error *err);
void sq_dp_free(sq_dp *dp);

/* Effective bounds after clamping. */
int sq_dp_budget(const sq_dp *dp);
int sq_dp_depth(const sq_dp *dp);
int sq_dp_width(const sq_dp *dp);
/* The curve it was solved with. */
const sq_curve *sq_dp_curve(const sq_dp *dp);

/* Best[n][d]: the best expected tokens per step of a tree of size n and depth <= d, or
 * -INFINITY when no such tree exists (n = 0, d = 0, or too many nodes for the width). d beyond
 * the effective depth is clamped to it. */
double sq_dp_best(const sq_dp *dp, int n, int d);

/* The smallest size n <= budget whose Best[n][d] is the largest at depth bound d: the budget
 * is an upper bound, and this is the budget itself unless the depth and width bounds cannot
 * hold that many nodes. 1 when no larger tree does better. */
int sq_dp_best_size(const sq_dp *dp, int d);

/* The optimal tree of size n and depth <= d (the one the tie-breaking rule picks).
 * Not thread-safe on one sq_dp (a depth-dependent solve may re-run a pass). */
int sq_dp_tree(sq_dp *dp, int n, int d, sq_tree **out, sq_error *err);

#endif
