/* The shapes the optimal tree is compared against (paper §3.1, §5): a single chain (one
 * speculated sequence) and k×L independent sequences (SpecInfer's shape: the root has k
 * children, each heading a chain of L nodes). */
#ifndef SQ_PLANNER_BASELINE_H
#define SQ_PLANNER_BASELINE_H

#include "libsequoia/base/api.h"
#include "libsequoia/format/curve.h"

SQ_BEGIN_DECLS

/* F of the longest chain that fits: min(budget, depth) nodes, root included. *nodes gets its
 * size. */
SQ_API
double sq_baseline_chain(const sq_curve *c, int budget, int depth, int *nodes);

/* The best k×L tree with 1 + k·L <= budget, L + 1 <= depth and k <= width (ties: the smaller
 * tree, then the smaller k). Returns 1 (root only) with k = L = 0 when none fits. */
SQ_API
double sq_baseline_kxl(const sq_curve *c, int budget, int depth, int width, int *k, int *L);

/* F of the k×L tree itself. */
SQ_API
double sq_baseline_kxl_value(const sq_curve *c, int k, int L);

SQ_END_DECLS

#endif
