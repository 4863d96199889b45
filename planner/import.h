/* Importing an engine's tree as a plan (the inverse of planner/export.h).
 *
 *  - choices: a list of 0-based rank paths, in any order, as engines take them:
 *        [[0], [1], [0, 0]]                 TensorRT-LLM / Medusa / EAGLE-1 (JSON or Python)
 *        [(0,), (1,), (0, 0)]               vLLM speculative_token_tree, optionally quoted
 *        mc_sim_7b_63 = [[0], [0, 0], ...]  a Python assignment, as in medusa_choices.py
 *    Every path's prefix must be present, no path may repeat, ranks are >= 0 and the ranks
 *    of siblings run 0..c-1 without gaps (the plan format cannot hold a gap). The root is
 *    implicit.
 *  - growmap: the Sequoia layout (roots, branches, Successors, mask, depth, size) as JSON,
 *    as written by `sequoia-plan --export growmap`, UMbreLLa (umbrella/trees/NAME.json) or the official
 *    .pt files converted with torch.load + json.dump. The rank of a child is its position
 *    in its parent's Successors list. Every field is cross-checked.
 * The tree is scored under the given curve (sq_plan_new). Errors are SQ_EDATA and name the
 * file, the entry and the problem. */
#ifndef SQ_PLANNER_IMPORT_H
#define SQ_PLANNER_IMPORT_H

#include "libsequoia/base/api.h"
#include "libsequoia/format/curve.h"
#include "libsequoia/base/error.h"
#include "libsequoia/format/plan.h"
#include "libsequoia/format/tree.h"

SQ_BEGIN_DECLS

#define SQ_IMPORT_MAX_NODES 16384   /* engine trees hold at most a few hundred nodes */
#define SQ_IMPORT_MAX_BYTES (64u << 20)

typedef enum sq_import_format {
    SQ_IMPORT_CHOICES,
    SQ_IMPORT_GROWMAP,
} sq_import_format;

/* "choices" or "growmap"; -1 otherwise. */
SQ_API
int sq_import_format_parse(const char *name);

/* Parses a choices text. `file` names it in messages ("file: line L, column C: problem"). */
SQ_API
int sq_import_choices_text(const char *text, const char *file, sq_tree **out, sq_error *err);

/* Checks a parsed growmap object. */
SQ_API
int sq_import_growmap_json(const cJSON *root, const char *file, sq_tree **out, sq_error *err);

/* Reads FILE in the given format. */
SQ_API
int sq_import_tree(const char *file, sq_import_format fmt, sq_tree **out, sq_error *err);

/* sq_import_tree + sq_plan_new under `curve` (budget and depth bounds unknown: 0). */
SQ_API
int sq_import_plan(const char *file, sq_import_format fmt, const sq_curve *curve, sq_plan **out,
                   sq_error *err);

SQ_END_DECLS

#endif
