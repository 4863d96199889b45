/* Token trees (docs/design.md §2, §7.4).
 *
 * Nodes are stored in breadth-first order with the children of one parent contiguous and in
 * rank order, which is the same as sorting rank paths by (length, lexicographic). Node 0 is the
 * root: parent -1, rank 0, depth 0. Size counts the root; depth counts levels including it. */
#ifndef SQ_FORMAT_TREE_H
#define SQ_FORMAT_TREE_H

#include "libsequoia/base/api.h"
#include "libsequoia/format/curve.h"
#include "libsequoia/base/error.h"

SQ_BEGIN_DECLS

typedef struct sq_tree {
    int  n;        /* nodes, root included                                */
    int *parent;   /* (n) index of the parent; -1 for the root            */
    int *rank;     /* (n) 1-based rank among siblings; 0 for the root     */
    int *depth;    /* (n) level; 0 for the root                           */
} sq_tree;

/* A tree of n nodes with zeroed arrays (callers fill them), or NULL when out of memory. */
SQ_API
sq_tree *sq_tree_new(int n);
SQ_API
void sq_tree_free(sq_tree *t);

/* Checks the layout invariants above: root first, parents before children, breadth-first
 * order, children of a parent contiguous with ranks 1..c in order, depth = parent's + 1.
 * `file` names the source in messages (e.g. "plan.json: nodes"). */
SQ_API
int sq_tree_validate(const sq_tree *t, const char *file, sq_error *err);

/* Number of levels, root included (a root-only tree has depth 1). */
SQ_API
int sq_tree_depth(const sq_tree *t);

/* Nodes per level: widths[l] for l < sq_tree_depth(t). */
SQ_API
void sq_tree_level_widths(const sq_tree *t, int *widths);

/* Largest number of children of any node. */
SQ_API
int sq_tree_max_children(const sq_tree *t);

/* F(T) = Σ_v f(v), f(root) = 1, f(child) = f(parent) · p(depth, rank). Fills scores[v] = f(v)
 * (t->n entries, the caller's: nothing is allocated). */
SQ_API
double sq_tree_expected_tokens(const sq_tree *t, const sq_curve *c, double *scores);

/* The same F(T) into *out, with scores of its own: SQ_ESOFTWARE if they cannot be allocated. */
SQ_API
int sq_tree_score(const sq_tree *t, const sq_curve *c, double *out, sq_error *err);

/* Builds a tree in canonical order from any parent/rank description (e.g. an imported tree):
 * parents[i] < i is not required, but the result is validated. */
SQ_API
int sq_tree_from_parents(const int *parent, const int *rank, int n, sq_tree **out,
                         const char *file, sq_error *err);

SQ_END_DECLS

#endif
