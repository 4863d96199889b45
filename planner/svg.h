/* Self-contained SVG pictures, written by hand (no plotting dependency):
 *  - a plan: nodes laid out by level (root on top), edges to parents, each node labelled
 *    with its rank and score f(v), the number of nodes of each level at the side. Trees of up
 *    to SQ_SVG_LABEL_MAX nodes get text labels; larger ones are scaled down and drawn as
 *    coloured dots (colour = f(v), with a legend) whose tooltips keep rank, path and score;
 *    a tree of more than 1000 leaves is squeezed into 3000 px, and its levels of more than 1000
 *    nodes are drawn as 3-px columns (colour: the column's largest f; tooltip: its node count,
 *    ranks and scores), so a 20000-node plan stays about 3200 px wide;
 *  - acceptance curves: p_k against rank k on a log scale, with ±1 standard error bars,
 *    several curves overlaid;
 *  - the expected-tokens table: F (best expected tokens per step) against tree size for
 *    several depth bounds, with the chain and best k x L baselines.
 * Every function writes atomically (libsequoia/base/io.h) when given a path. */
#ifndef SQ_PLANNER_SVG_H
#define SQ_PLANNER_SVG_H

#include <stdio.h>

#include "libsequoia/base/api.h"
#include "libsequoia/format/curve.h"
#include "planner/dp.h"
#include "libsequoia/base/error.h"
#include "libsequoia/format/plan.h"

SQ_BEGIN_DECLS

#define SQ_SVG_LABEL_MAX 256     /* nodes up to which every node carries text labels */
#define SQ_SVG_MAX_RANKS 64      /* ranks drawn per curve                              */

/* The picture of a plan's tree. */
SQ_API
int sq_svg_plan_write(FILE *fp, const sq_plan *plan, sq_error *err);
SQ_API
int sq_svg_plan(const sq_plan *plan, const char *path, sq_error *err);

/* Acceptance curves of a set, overlaid. */
SQ_API
int sq_svg_curves_write(FILE *fp, const sq_curve_set *set, sq_error *err);
SQ_API
int sq_svg_curves(const sq_curve_set *set, const char *path, sq_error *err);

/* Best[n][d] against n for up to 6 depth bounds d (spread over 2..D, always including D), the
 * longest chain and the best k x L tree at depth D, from a solved DP. */
SQ_API
int sq_svg_table_write(FILE *fp, const sq_dp *dp, const sq_curve *curve, sq_error *err);
SQ_API
int sq_svg_table(const sq_dp *dp, const sq_curve *curve, const char *path, sq_error *err);

SQ_END_DECLS

#endif
