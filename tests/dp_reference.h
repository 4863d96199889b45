/* The reference Sequoia DP: the plain O(N²·D·B) solver exactly as planner/dp.c had it before
 * issue 17 (every cell, every split, no pruning, one thread). The fast solver in planner/dp.c
 * must equal it bit for bit, values and trees; tests/test_dp.c and tests/bench/bench_plan.c
 * compare the two. Tests only: nothing outside tests/ links it. */
#ifndef SQ_TESTS_DP_REFERENCE_H
#define SQ_TESTS_DP_REFERENCE_H

#include "planner/dp.h"

typedef struct sq_dpref sq_dpref;

/* Same parameters, clamping and tie-breaking as sq_dp_solve; no limits are checked beyond
 * what the caller asks. */
int sq_dpref_solve(const sq_dp_params *params, sq_dpref **out, sq_error *err);
void sq_dpref_free(sq_dpref *dp);
double sq_dpref_best(const sq_dpref *dp, int n, int d);
int sq_dpref_tree(sq_dpref *dp, int n, int d, sq_tree **out, sq_error *err);

#endif
