#include "libsequoia/format/tree.h"

#include <stdlib.h>
#include <string.h>

sq_tree *sq_tree_new(int n)
{
    SQ_ASSERT(n >= 1);
    sq_tree *t = calloc(1, sizeof *t);
    if (!t)
        return NULL;
    t->n = n;
    t->parent = calloc((size_t)n, sizeof(int));
    t->rank = calloc((size_t)n, sizeof(int));
    t->depth = calloc((size_t)n, sizeof(int));
    if (!t->parent || !t->rank || !t->depth) {
        sq_tree_free(t);
        return NULL;
    }
    return t;
}

void sq_tree_free(sq_tree *t)
{
    if (!t)
        return;
    free(t->parent);
    free(t->rank);
    free(t->depth);
    free(t);
}

int sq_tree_validate(const sq_tree *t, const char *file, sq_error *err)
{
    if (t->n < 1)
        return sq_error_set(err, SQ_EDATA, "%s: the tree has no node", file);
    if (t->parent[0] != -1 || t->rank[0] != 0 || t->depth[0] != 0)
        return sq_error_set(err, SQ_EDATA,
                            "%s: node 0 must be the root (parent -1, rank 0, depth 0)", file);
    /* In breadth-first order with contiguous sibling groups, parents are non-decreasing, a
     * parent's first child has rank 1 and each next sibling the next rank. */
    for (int i = 1; i < t->n; i++) {
        int p = t->parent[i];
        if (p < 0 || p >= i)
            return sq_error_set(err, SQ_EDATA, "%s: node %d: parent %d does not come before it",
                                file, i, p);
        if (p < t->parent[i - 1])
            return sq_error_set(err, SQ_EDATA,
                                "%s: node %d: not in breadth-first order (parent %d after parent %d)",
                                file, i, p, t->parent[i - 1]);
        int expect = (i > 1 && t->parent[i - 1] == p) ? t->rank[i - 1] + 1 : 1;
        if (t->rank[i] != expect)
            return sq_error_set(err, SQ_EDATA,
                                "%s: node %d: rank %d, expected %d (sibling ranks run 1..c in order)",
                                file, i, t->rank[i], expect);
        if (t->depth[i] != t->depth[p] + 1)
            return sq_error_set(err, SQ_EDATA, "%s: node %d: depth %d, expected %d (parent's + 1)",
                                file, i, t->depth[i], t->depth[p] + 1);
        if (t->depth[i] < t->depth[i - 1])
            return sq_error_set(err, SQ_EDATA, "%s: node %d: not in breadth-first order (depth %d "
                                "after depth %d)", file, i, t->depth[i], t->depth[i - 1]);
    }
    return SQ_OK;
}

int sq_tree_depth(const sq_tree *t)
{
    int d = 0;
    for (int i = 0; i < t->n; i++)
        if (t->depth[i] > d)
            d = t->depth[i];
    return d + 1;
}

void sq_tree_level_widths(const sq_tree *t, int *widths)
{
    int levels = sq_tree_depth(t);
    memset(widths, 0, (size_t)levels * sizeof *widths);
    for (int i = 0; i < t->n; i++)
        widths[t->depth[i]]++;
}

int sq_tree_max_children(const sq_tree *t)
{
    int m = 0;
    for (int i = 1; i < t->n; i++)
        if (t->rank[i] > m)
            m = t->rank[i];
    return m;
}

double sq_tree_expected_tokens(const sq_tree *t, const sq_curve *c, double *f)
{
    double total = 0;
    for (int i = 0; i < t->n; i++) {
        f[i] = i == 0 ? 1.0 : f[t->parent[i]] * sq_curve_p(c, t->depth[i], t->rank[i]);
        total += f[i];
    }
    return total;
}

int sq_tree_score(const sq_tree *t, const sq_curve *c, double *out, sq_error *err)
{
    double *f = malloc((size_t)t->n * sizeof *f);
    if (!f)
        return sq_error_oom(err, "the node scores of a tree");
    *out = sq_tree_expected_tokens(t, c, f);
    free(f);
    return SQ_OK;
}

int sq_tree_from_parents(const int *parent, const int *rank, int n, sq_tree **out,
                         const char *file, sq_error *err)
{
    *out = NULL;
    if (n < 1)
        return sq_error_set(err, SQ_EDATA, "%s: the tree has no node", file);
    int roots = 0;
    for (int i = 0; i < n; i++) {
        if (parent[i] == -1)
            roots++;
        else if (parent[i] < 0 || parent[i] >= n || parent[i] == i)
            return sq_error_set(err, SQ_EDATA, "%s: node %d: parent %d is not a node", file, i,
                                parent[i]);
    }
    if (roots != 1 || parent[0] != -1)
        return sq_error_set(err, SQ_EDATA, "%s: expected exactly one root, node 0", file);
    /* Breadth-first walk; children of a node sorted by rank. */
    int *order = malloc((size_t)n * sizeof *order);
    int *newid = malloc((size_t)n * sizeof *newid);
    sq_tree *t = sq_tree_new(n);
    if (!order || !newid || !t) {
        free(order);
        free(newid);
        sq_tree_free(t);
        return sq_error_oom(err, "tree");
    }
    int head = 0, tail = 0;
    order[tail++] = 0;
    for (int i = 0; i < n; i++)
        newid[i] = -1;
    newid[0] = 0;
    int rc = SQ_OK;
    while (head < tail) {
        int v = order[head++];
        /* children of v by increasing rank: O(n) scan per node is fine for engine-sized trees */
        for (int want = 1;; want++) {
            int found = -1;
            for (int c = 0; c < n; c++)
                if (parent[c] == v && rank[c] == want) {
                    if (found >= 0) {
                        rc = sq_error_set(err, SQ_EDATA, "%s: nodes %d and %d are both child %d of "
                                          "node %d", file, found, c, want, v);
                        goto done;
                    }
                    found = c;
                }
            if (found < 0)
                break;
            newid[found] = tail;
            order[tail++] = found;
        }
    }
    if (tail != n) {
        for (int i = 0; i < n; i++)
            if (newid[i] < 0) {
                rc = sq_error_set(err, SQ_EDATA, "%s: node %d is unreachable from the root (a "
                                  "cycle, or a gap in its siblings' ranks)", file, i);
                goto done;
            }
    }
    for (int j = 0; j < n; j++) {
        int old = order[j];
        t->parent[j] = j == 0 ? -1 : newid[parent[old]];
        t->rank[j] = j == 0 ? 0 : rank[old];
        t->depth[j] = j == 0 ? 0 : t->depth[t->parent[j]] + 1;
    }
    rc = sq_tree_validate(t, file, err);
done:
    free(order);
    free(newid);
    if (rc)
        sq_tree_free(t);
    else
        *out = t;
    return rc;
}
