// A C++ program of another project, built by tests/install/install.sh with the C++ compiler
// against the installed sequoia.pc only: it includes every installed header (their
// declarations have C linkage, SQ_BEGIN_DECLS of libsequoia/base/api.h), does what tiny.c
// does (reads an acceptance curve, solves the Sequoia DP, prints Best[n][d], writes the optimal
// tree as a plan) and calls a few functions of the other headers.
//
//   tiny-cxx CURVES.json N D PLAN.json
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "libsequoia/base/api.h"
#include "libsequoia/base/error.h"
#include "libsequoia/format/corpus.h"
#include "libsequoia/format/curve.h"
#include "libsequoia/format/mode.h"
#include "libsequoia/format/plan.h"
#include "libsequoia/format/profile.h"
#include "libsequoia/format/tree.h"
#include "libsequoia/verify/rule.h"
#include "libsequoia/verify/verify.h"
#include "planner/baseline.h"
#include "planner/dp.h"
#include "planner/engine.h"
#include "planner/export.h"
#include "planner/hardware.h"
#include "planner/import.h"
#include "planner/ladder.h"
#include "planner/regress.h"
#include "planner/svg.h"
#include "planner/table.h"

namespace {

// Owns what the library hands out; the library's free functions accept NULL.
struct Solved {
    sq_curve_set *set = nullptr;
    sq_dp *dp = nullptr;
    sq_plan *plan = nullptr;
    ~Solved()
    {
        sq_plan_free(plan);
        sq_dp_free(dp);
        sq_curve_set_free(set);
    }
};

int fail(const sq_error &err)
{
    std::fprintf(stderr, "tiny-cxx: %s\n", err.msg);
    return err.status ? err.status : SQ_ESOFTWARE;
}

} // namespace

int main(int argc, char **argv)
{
    if (argc != 5) {
        std::fprintf(stderr, "usage: tiny-cxx CURVES.json N D PLAN.json\n");
        return SQ_EUSAGE;
    }
    sq_error err = {};
    Solved s;
    const sq_curve *curve = nullptr;
    const int n = std::atoi(argv[2]), d = std::atoi(argv[3]);

    if (sq_curve_set_load(argv[1], &s.set, &err) != SQ_OK ||
        sq_curve_set_select(s.set, nullptr, argv[1], &curve, &err) != SQ_OK)
        return fail(err);
    sq_dp_params params = sq_dp_default_params();
    params.budget = n;
    params.depth = d;
    params.curve = curve;
    if (sq_dp_solve(&params, &s.dp, &err) != SQ_OK)
        return fail(err);
    std::printf("Best[%d][%d] = %.4f\n", n, d, sq_dp_best(s.dp, n, d));

    sq_tree *tree = nullptr;
    if (sq_dp_tree(s.dp, n, d, &tree, &err) != SQ_OK)
        return fail(err);
    std::vector<int> widths(static_cast<size_t>(sq_tree_depth(tree)));
    sq_tree_level_widths(tree, widths.data());
    std::string levels;
    for (int w : widths)
        levels += (levels.empty() ? "" : " ") + std::to_string(w);
    std::printf("levels: %s\n", levels.c_str());
    if (sq_plan_new(tree, curve, n, d, sq_dp_width(s.dp), &s.plan, &err) != SQ_OK)
        return fail(err); // the plan owned the tree
    if (sq_plan_save(argv[4], s.plan, &err) != SQ_OK)
        return fail(err);

    // The header-only mode table and the verification rule's distribution: logits (0, ln 3)
    // at T = 1 give (1/4, 3/4).
    sq_mode mode = SQ_MODE_STOCHASTIC;
    if (sq_mode_parse("greedy", &mode) != 0)
        return SQ_ESOFTWARE;
    const float logits[2] = {0.0f, static_cast<float>(std::log(3.0))};
    double probs[2] = {0, 0};
    int support = sq_probs_from_logits(logits, 2, 1.0, 1.0, probs, nullptr);
    std::printf("mode %s (%s); probs %.4f %.4f (%d tokens); status 65 is %s\n",
                sq_mode_name(mode), sq_mode_rank_semantics(mode), probs[0], probs[1], support,
                sq_status_name(SQ_EDATA));
    return 0;
}
