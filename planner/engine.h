/* Planning under a serving engine's limits (sequoia-plan --engine; limits in planner/export.h,
 * the engines and versions in docs/engines.md), and the engine table that every per-engine
 * lookup reads (below; the rows are in planner/engines.c).
 *
 *  - vllm: the best level-uniform tree k_1 x k_2 x ... x k_L (every node of level l-1 has k_l
 *    children of ranks 1..k_l), searched exactly. The nodes of level l score in total
 *    P_l = S_1(k_1) ... S_l(k_l) with S_l(k) = p(l,1) + ... + p(l,k) (row l of a
 *    depth-dependent curve), so F = 1 + P_1 + P_1 P_2 + ... . With m nodes on the current
 *    level l and R nodes of budget left, the best remainder is
 *        G(l, m, R) = max(0, max_{k: m k <= R} S_{l+1}(k) (1 + G(l+1, m k, R - m k)))
 *    memoised over (l, m, R): O(D N^2) memory, O(D N^2 log N) time at worst. Ties go to
 *    stopping, then to the smaller k.
 *  - trtllm, medusa: the DP of planner/dp.h with the width clamped to the engine's rank limit
 *    (16 and 10 children) and, for TensorRT-LLM, the depth to 9 levels (8 speculated tokens)
 *    and the size off 32k + 1: exact. When TensorRT-LLM's limit on non-leaf nodes per level
 *    (default 10) binds, DP trees are repaired: on each level the best-scoring non-leaves are
 *    kept, the other subtrees are cut, and the freed budget is refilled best-first (highest
 *    f(parent) p(rank) first) with nodes that keep every limit. The optimal trees of every
 *    width bound 1..B (of B, B/2, B/4, ... past 256 nodes) are repaired and the best result
 *    is kept. That step is a heuristic and the result says so.
 *  - eagle (EAGLE-1): the DP with width 10; when its tree breaks EAGLE-1's parent rule (on a
 *    level, a non-leaf with grandchildren after one without), each level is cut at the split
 *    that loses the least score (non-leaves before it lose their children if they have no
 *    grandchildren, those after it lose their grandchildren), and refilled best-first with
 *    nodes that keep the rule; the same from the root alone (pure constrained greedy). The
 *    best is kept: a heuristic, and the result says so.
 *  - sglang, trtllm-dynamic (envelopes): for every topk K, the DP with width <= K, depth <=
 *    steps + 1 and size <= the budget (the root is among SGLang's num_draft_tokens, not among
 *    TensorRT-LLM's max_total_draft_tokens), repaired to at most K non-leaves per level (the
 *    engines expand K nodes per step); the K with the most expected tokens per step wins, or,
 *    with profiles, the (K, size, depth) with the most tokens per second. The tree is the
 *    static optimum inside the envelope: the best fixed tree the engine could build within
 *    those flags, not a guarantee for its dynamic selection. sequoia-plan uses this static path
 *    only for curves without dynamic-tree statistics; with them it predicts the engine's own
 *    tree and chooses the envelope by that prediction (planner/dynamic.h). */
#ifndef SQ_PLANNER_ENGINE_H
#define SQ_PLANNER_ENGINE_H

#include "libsequoia/base/api.h"
#include "libsequoia/format/curve.h"
#include "libsequoia/base/error.h"
#include "planner/dp.h"
#include "planner/export.h"
#include "planner/hardware.h"
#include "libsequoia/format/tree.h"

SQ_BEGIN_DECLS

#define SQ_UNIFORM_MAX_CELLS (1LL << 24)   /* D N^2 memo entries (8 bytes each) */

typedef struct sq_engine_plan_params {
    sq_engine       engine;
    int             budget;          /* N: nodes, root included                      */
    int             depth;           /* D: levels, root included                     */
    int             width;           /* B: children per node; 0 = the curve's width  */
    int             max_non_leaves;  /* trtllm only; 0 = the default 10                */
    const sq_curve *curve;
    /* Optional: an unconstrained solve of the same budget and curve (sq_dp_solve), reused for
     * trtllm and medusa when the engine's width limit does not bind, so that a caller that
     * also reports the unconstrained optimum solves the DP once. NULL: solve here. */
    sq_dp          *solved;
    /* envelope engines only: choose (topk, size, depth) by tokens per second (NULL: by
     * expected tokens per step at the full budget and depth) */
    const sq_hw_params *hw;
} sq_engine_plan_params;

/* vllm, budget 128, depth 10, width 0, default non-leaf limit, the embedded default curve. */
SQ_API
sq_engine_plan_params sq_engine_plan_default_params(void);

typedef struct sq_engine_plan_result {
    sq_tree *tree;            /* the plan's tree (to free)                                */
    double   expected_tokens; /* its F                                                    */
    int      exact;           /* 1: optimal under the limits; 0: repaired (heuristic)     */
    int      depth;           /* effective depth bound and width after the engine clamps  */
    int      width;
    int      budget;          /* effective budget (TensorRT-LLM: off 32k + 1)             */
    sq_envelope envelope;     /* envelope engines: the flags                              */
    double   step_ms;         /* envelope engines with hw: predicted time per step ...    */
    double   speedup;         /* ... and speedup over the target alone; 0 without hw     */
} sq_engine_plan_result;

/* ---- the engine table (planner/engines.c; docs/engines.md, "Adding an engine") --------
 *
 * One row per engine holds everything the planner knows about it: its name, the versions read,
 * its limits and why they exist, its export writer, how to plan within its limits and what to
 * pass alongside its export. Every lookup by engine (parsing --engine, the name lists of --help
 * and of error messages, the checks, the summary's verdicts, sq_engine_plan) reads this table;
 * nothing else switches over engines. */

/* Planning within the engine's limits (sq_engine_plan calls it, and again with one node less
 * when the tree's size breaks the size rule, sq_engine_size_ok). Fills out->tree, exact, depth,
 * width (and the envelope fields). */
typedef int (*sq_engine_planner)(const sq_engine_plan_params *p, const sq_curve *c,
                                 sq_engine_plan_result *out, sq_error *err);

/* What goes alongside the export of t (which passes sq_engine_check), one line into buf. */
typedef void (*sq_engine_requirer)(const sq_tree *t, int max_non_leaves, char *buf, size_t cap);

/* Envelope engines only: the envelope as the engine takes it, one JSON object (no newline). */
typedef void (*sq_envelope_writer)(FILE *fp, int steps, int topk, int nodes);

typedef struct sq_engine_info {
    sq_engine          id;
    const char        *name;          /* --engine, --export and messages: "trtllm"              */
    const char *const *aliases;       /* more names --engine takes (NULL-terminated), or NULL    */
    const char        *display;       /* the engine in explanations: "TensorRT-LLM"             */
    const char        *versions;      /* the versions whose source was read (the verdict line)   */
    const char        *summary;       /* its limits in a phrase, for --help                       */
    sq_export_format   format;        /* its --export format (named as the engine)               */
    sq_engine_limits   limits;        /* max_non_leaves: the default (--max-non-leaves overrides) */
    int                envelope;      /* 1: the export is flags, the engine builds its own tree  */
    int                counts_root;   /* envelope: its draft-token count includes the root       */
    /* why each limit, quoted in refusals (NULL where the limit is off) */
    const char        *min_path_note; /* min_path >= 2                                           */
    const char        *path_note;     /* max_path                                                */
    const char        *rank_note;     /* max_rank0                                               */
    const char        *uniform_note;  /* level_uniform                                           */
    sq_export_writer   write;         /* its export (limits already checked)                     */
    sq_engine_planner  plan;          /* --engine                                                */
    sq_engine_requirer requirements;  /* the verdict's "pass ..." / envelope flags               */
    /* envelope engines (NULL otherwise): the export, and what the engine takes per batch size
     * (the note of sq_export_envelope_ladder); the rules an envelope must keep are
     * sq_dynplan_envelope_check's (libsequoia/format/dynplan.h) */
    sq_envelope_writer write_envelope;
    const char        *per_batch_note;
} sq_engine_info;

/* The row of `e`; NULL for SQ_ENGINE_NONE and anything out of range. */
SQ_API
const sq_engine_info *sq_engine_info_of(sq_engine e);

/* The size rule (limits.no_32k_plus_1: TensorRT-LLM's mask packing, docs/engines.md): 1 when a
 * tree of n nodes (root included) is allowed. The check and the planner both ask it. */
SQ_API
int sq_engine_size_ok(const sq_engine_limits *lim, int n);

/* Errors: SQ_EUSAGE for bounds the engine cannot take (EAGLE-1 below 3 levels or 3 nodes,
 * an envelope with a budget of 1), or past the DP's limits. */
SQ_API
int sq_engine_plan(const sq_engine_plan_params *params, sq_engine_plan_result *out,
                   sq_error *err);

/* EAGLE-1's repair alone (the tree the eagle plan starts from; for tests): cuts `t` at the
 * cheapest split of each level and refills up to `budget` nodes of depth <= D, width <= W. */
SQ_API
int sq_eagle_repair(const sq_tree *t, const sq_curve *c, int budget, int D, int W,
                    sq_tree **out, sq_error *err);

/* The level-uniform search alone. k[0..*levels-1] get k_1..k_L (k must hold depth - 1
 * entries); *F the expected tokens. Errors: SQ_EUSAGE past SQ_UNIFORM_MAX_CELLS. */
SQ_API
int sq_uniform_search(const sq_curve *c, int budget, int depth, int width, int *k, int *levels,
                      double *F, sq_error *err);

/* The k_1 x k_2 x ... tree. */
SQ_API
sq_tree *sq_uniform_tree(const int *k, int levels);

/* Size of the k_1 x ... tree, root included (saturates at INT_MAX). */
SQ_API
long long sq_uniform_size(const int *k, int levels);

SQ_END_DECLS

#endif
