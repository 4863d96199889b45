/* A program of another project, built by tests/install/install.sh against the installed
 * sequoia.pc only (not against this source tree): it reads an acceptance curve file, solves the
 * Sequoia DP for the size and depth bound given, prints Best[n][d] and writes the optimal tree
 * as a plan.
 *
 *   tiny CURVES.json N D PLAN.json
 *
 * The includes are the same as inside the project, thanks to Cflags -I${includedir}/sequoia. */
#include <stdio.h>
#include <stdlib.h>

#include "libsequoia/base/error.h"
#include "libsequoia/format/curve.h"
#include "libsequoia/format/plan.h"
#include "libsequoia/format/tree.h"
#include "planner/dp.h"

int main(int argc, char **argv)
{
    if (argc != 5) {
        fprintf(stderr, "usage: tiny CURVES.json N D PLAN.json\n");
        return SQ_EUSAGE;
    }
    sq_error err = {0};
    sq_curve_set *set = NULL;
    sq_dp *dp = NULL;
    sq_tree *tree = NULL;
    sq_plan *plan = NULL;
    const sq_curve *curve = NULL;
    int n = atoi(argv[2]), d = atoi(argv[3]);

    if (sq_curve_set_load(argv[1], &set, &err) != SQ_OK ||
        sq_curve_set_select(set, NULL, argv[1], &curve, &err) != SQ_OK)
        goto fail;
    sq_dp_params params = sq_dp_default_params();
    params.budget = n;
    params.depth = d;
    params.curve = curve;
    if (sq_dp_solve(&params, &dp, &err) != SQ_OK)
        goto fail;
    printf("Best[%d][%d] = %.4f\n", n, d, sq_dp_best(dp, n, d));
    if (sq_dp_tree(dp, n, d, &tree, &err) != SQ_OK)
        goto fail;
    int size = tree->n, depth = sq_tree_depth(tree);
    if (sq_plan_new(tree, curve, n, d, sq_dp_width(dp), &plan, &err) != SQ_OK) {
        tree = NULL; /* the plan owned it */
        goto fail;
    }
    printf("tree: size %d, depth %d, expected tokens %.4f\n", size, depth, plan->expected_tokens);
    if (sq_plan_save(argv[4], plan, &err) != SQ_OK)
        goto fail;
    sq_plan_free(plan);
    sq_dp_free(dp);
    sq_curve_set_free(set);
    return 0;

fail:
    fprintf(stderr, "tiny: %s\n", err.msg);
    sq_plan_free(plan);
    sq_dp_free(dp);
    sq_curve_set_free(set);
    return err.status ? err.status : SQ_ESOFTWARE;
}
