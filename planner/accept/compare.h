/* The regression check of acceptance curves (sequoia-accept --compare): a baseline curve file
 * against a new one, per curve the change of each rank's p with its z-score and the change of
 * the optimal tree's expected tokens per step F with its standard error, and whether F dropped
 * significantly. Depth-dependent curves (p_by_depth) are also compared depth by depth, each
 * depth's vector like a whole curve (its F from that vector alone, its error from that row's
 * statistics), and a significant drop at any depth fails the comparison (issue 27). The result is a "sequoia-compare" document (docs/formats.md, "Curve
 * comparisons"), and optionally a text report.
 *
 * The optimal tree needs the tree DP, which belongs to the planner; the estimator library does
 * not depend on the planner (docs/design.md, "Layout"), so the caller passes the planner's
 * sq_accept_optimal_F (planner/regress.h) in the options. */
#ifndef SQ_ACCEPT_COMPARE_H
#define SQ_ACCEPT_COMPARE_H

#include <stdio.h>

#include <cjson/cJSON.h>

#include "libsequoia/base/error.h"
#include "libsequoia/format/curve.h"

/* The document's "format" and "version" members. */
#define SQ_COMPARE_FORMAT "sequoia-compare"
#define SQ_COMPARE_VERSION 1

/* Its "result" member: no significant drop and no curve missing; a significant drop of some
 * curve's F; a curve of the baseline missing in the new file (which takes precedence). */
#define SQ_COMPARE_RESULT_OK "ok"
#define SQ_COMPARE_RESULT_DROP "significant drop"
#define SQ_COMPARE_RESULT_MISSING "missing curves"

/* F of the best tree of at most `budget` nodes and depth `depth` for curve c, its gradient in
 * p (grad, c->width values) and the tree's size: planner/regress.h's sq_accept_optimal_F. */
typedef int (*sq_accept_optimal_F_fn)(const sq_curve *c, int budget, int depth, double *F,
                                      double *grad, int *size, sq_error *err);

typedef struct sq_accept_compare_opts {
    int                    budget;    /* the optimal tree's node budget (the tool: 64)        */
    int                    depth;     /* and depth bound (the tool: 8)                        */
    double                 sigma;     /* significance, in standard errors (the tool: 3)       */
    const char            *only;      /* compare this curve only; NULL: every baseline curve  */
    sq_accept_optimal_F_fn optimal_F; /* required                                             */
    FILE                  *report;    /* the text report; NULL: none                          */
    FILE                  *warn;      /* warnings (a curve's width differs); NULL: none       */
    const char            *prog;      /* prefix of each warning line ("prog: warning: ...")   */
} sq_accept_compare_opts;

/* Compares the curves of base_file with those of new_file (matched by name). Returns
 *   SQ_OK     no significant drop, no baseline curve missing in new_file;
 *   SQ_EFAIL  a significant drop, or a baseline curve missing in new_file (lost coverage;
 *             unless o->only limits the comparison to one curve): the document's "result" and
 *             "missing_in_new" say which; err is not set;
 * with *out the sequoia-compare document (to cJSON_Delete) in both cases; or another status
 * with err set and *out NULL: SQ_ENOINPUT, SQ_EDATA (a file's errors, statistics that do not
 * reproduce the curve or its depth rows, no curve name in common), SQ_EUSAGE (o->only names no curve of both
 * files), SQ_ESOFTWARE (out of memory). */
int sq_accept_compare(const char *base_file, const char *new_file,
                      const sq_accept_compare_opts *o, cJSON **out, sq_error *err);

#endif
