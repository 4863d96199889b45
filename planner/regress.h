/* Regression checks of acceptance curves that need the tree DP (sequoia-accept --compare): the
 * optimal tree's expected tokens per step and its gradient in the curve. It lives with the
 * planner, not with the estimator (planner/accept/), which depends on libsequoia only. */
#ifndef SQ_PLANNER_REGRESS_H
#define SQ_PLANNER_REGRESS_H

#include "libsequoia/base/api.h"
#include "libsequoia/base/error.h"
#include "libsequoia/format/curve.h"

SQ_BEGIN_DECLS

/* F = the best expected tokens per step of a tree of at most `budget` nodes and depth <= `depth`
 * for curve c (the DP of planner/dp.h, the curve's width as the width bound), *size its size,
 * and grad(W) = dF/dp_k at that tree: by the envelope theorem the derivative of the maximum is
 * the derivative of the maximising tree's F = Σ_v Π_{edges} p_rank. With the covariance C of
 * p's estimate, Var(F) ≈ grad' C grad (delta method). Flat curves only (p_by_depth is
 * ignored). */
SQ_API
int sq_accept_optimal_F(const sq_curve *c, int budget, int depth, double *F, double *grad,
                        int *size, sq_error *err);

SQ_END_DECLS

#endif
