/* The Sequoia dynamic program (docs/design.md §3; paper §3.1, App. F.1).
 *
 *   T[n][d][b] = best F over trees of size n, depth <= d, whose root has exactly b children
 *   Best[n][d] = max_b T[n][d][b]
 *   T[n][d][b] = max_{m} T[n-m][d][b-1] + p_b · Best[m][d-1]     (b-th child: m nodes, depth d-1)
 *
 * One solve yields Best[n][d] for every n <= budget and d <= depth, and the optimal tree of any
 * of those sizes and depths. Time at most O(N²·D·B), memory O(N·D·B) (32-bit back-pointers);
 * planner/dp.c skips the splits and the depth columns it can prove do not change the result, so
 * typical solves are far cheaper (docs/planning.md, "Speed").
 *
 * Tie-breaking (so that the same input always gives the byte-identical plan): candidates are
 * scanned in increasing order and only a strictly larger value replaces the incumbent, so
 *  - the root gets the fewest children b that reach the optimum, and
 *  - among equally good splits the b-th child gets the smallest subtree m (larger subtrees go
 *    to better-ranked children).
 *
 * With a depth-dependent curve (p_by_depth) the value of a subtree depends on where it hangs,
 * so column d of the table comes from its own solve with the depth bound d; the columns below
 * the curve's last row are shared by every such solve, so the cost is O(N²·D·B·rows/2). */
#ifndef SQ_PLANNER_DP_H
#define SQ_PLANNER_DP_H

#include <stdint.h>

#include "libsequoia/base/api.h"
#include "libsequoia/format/curve.h"
#include "libsequoia/base/error.h"
#include "libsequoia/format/tree.h"

SQ_BEGIN_DECLS

/* Documented limits (docs/planning.md, "Speed"). A request past them is refused at once
 * (SQ_EUSAGE), naming the limit. The cells bound the back-pointers: 4 bytes each, at most
 * 512 MiB, and only the columns up to the depth where the table stops changing are stored. The
 * work bounds the plain solver's steps, N²·D·B/2 (with p_by_depth: ·min(D, rows)), which the
 * fast solver reaches only when no split can be skipped. */
#define SQ_DP_MAX_CELLS (1LL << 27)
#define SQ_DP_MAX_WORK (1LL << 40)
#define SQ_DP_MAX_BUDGET (1 << 20)
#define SQ_DP_MAX_THREADS 16

typedef struct sq_dp_params {
    int budget;             /* N >= 1: tree size, root included                            */
    int depth;              /* D >= 1: levels, root included; clamped to N                 */
    int width;              /* B >= 1: children per node; 0 = the curve's width; clamped   */
    const sq_curve *curve;  /* acceptance; its p_by_depth is used when present             */
    int threads;            /* 0: one per online CPU (at most SQ_DP_MAX_THREADS); the result
                               does not depend on it                                       */
    /* told the DP columns done after each one, from the calling thread (a progress line,
     * libsequoia/base/progress.h); NULL: none */
    void (*progress)(void *user, int64_t done, int64_t total);
    void *user;
} sq_dp_params;

/* budget 128, depth 10, width 0 (the curve's), the embedded default curve. */
SQ_API
sq_dp_params sq_dp_default_params(void);

typedef struct sq_dp sq_dp;

/* Checks the parameters against the limits without solving. */
SQ_API
int sq_dp_check(const sq_dp_params *params, sq_error *err);

SQ_API
int sq_dp_solve(const sq_dp_params *params, sq_dp **out, sq_error *err);
SQ_API
void sq_dp_free(sq_dp *dp);

/* The depth from which every deeper column of the table equals it (values and trees), or 0
 * when the table changes up to the depth bound (depth-independent part of the solve). */
SQ_API
int sq_dp_saturation(const sq_dp *dp);

/* Effective bounds after clamping. */
SQ_API
int sq_dp_budget(const sq_dp *dp);
SQ_API
int sq_dp_depth(const sq_dp *dp);
SQ_API
int sq_dp_width(const sq_dp *dp);
/* The curve it was solved with. */
SQ_API
const sq_curve *sq_dp_curve(const sq_dp *dp);

/* Best[n][d]: the best expected tokens per step of a tree of size n and depth <= d, or
 * -INFINITY when no such tree exists (n = 0, d = 0, or too many nodes for the width). d beyond
 * the effective depth is clamped to it. */
SQ_API
double sq_dp_best(const sq_dp *dp, int n, int d);

/* The smallest size n <= budget whose Best[n][d] is the largest at depth bound d: the budget
 * is an upper bound, and this is the budget itself unless the depth and width bounds cannot
 * hold that many nodes. 1 when no larger tree does better. */
SQ_API
int sq_dp_best_size(const sq_dp *dp, int d);

/* The optimal tree of size n and depth <= d (the one the tie-breaking rule picks).
 * Not thread-safe on one sq_dp (a depth-dependent solve may re-run a pass). */
SQ_API
int sq_dp_tree(sq_dp *dp, int n, int d, sq_tree **out, sq_error *err);

SQ_END_DECLS

#endif
