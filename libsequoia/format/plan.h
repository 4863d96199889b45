/* Tree plans (docs/design.md §7.4): the file that sequoia-plan writes and that runtimes and engine
 * exporters load. A plan holds the tree, its expected tokens per step, the acceptance curve it
 * was scored with (copied in), the solver's bounds and, once hardware-aware planning ran, the
 * hardware section. */
#ifndef SQ_FORMAT_PLAN_H
#define SQ_FORMAT_PLAN_H

#include <cjson/cJSON.h>

#include "libsequoia/base/api.h"
#include "libsequoia/format/curve.h"
#include "libsequoia/base/error.h"
#include "libsequoia/format/tree.h"

SQ_BEGIN_DECLS

#define SQ_PLAN_FORMAT "sequoia-plan"
#define SQ_PLAN_VERSION 1
#define SQ_PLAN_MAX_NODES (1 << 20)
#define SQ_PLAN_F_TOL 1e-9         /* expected_tokens must match the nodes this closely */

/* The member of a plan's "hardware" object (static plans and "sequoia-dynamic-plan" alike) that
 * holds sequoia-run's prediction beside the engine's (docs/formats.md; docs/planning.md, "Two
 * cost models"): {"cost_model" or "cost_per_round": "...", "draft_catchup_tokens": c, times in
 * ms and "tokens_per_second", "predicted_speedup"}. */
#define SQ_PLAN_HW_RUNTIME "sequoia_run"

typedef struct sq_plan {
    sq_tree *tree;
    double   expected_tokens;      /* F(T) under `acceptance`                        */
    char     rank_semantics[32];   /* docs/design.md §7.4                            */
    sq_curve acceptance;           /* the curve used, copied                         */
    int      budget;               /* solver bounds; 0 when unknown (imported trees) */
    int      depth_limit;
    int      width;
    cJSON   *hardware;             /* the "hardware" object, or NULL                 */
} sq_plan;

/* Builds a plan around `tree` (ownership passes to the plan, also on failure) scored with a
 * copy of `curve`. */
SQ_API
int sq_plan_new(sq_tree *tree, const sq_curve *curve, int budget, int depth_limit, int width,
                sq_plan **out, sq_error *err);
SQ_API
void sq_plan_free(sq_plan *plan);

SQ_API
cJSON *sq_plan_to_json(const sq_plan *plan); /* NULL if out of memory */
SQ_API
int sq_plan_save(const char *file, const sq_plan *plan, sq_error *err);

/* Reads and validates a plan: format and version, node arrays, breadth-first order, contiguous
 * ranks, parents before children, depth and size fields, the acceptance curve, and
 * expected_tokens recomputed from the nodes within SQ_PLAN_F_TOL. Errors are SQ_EDATA and name
 * the file and the field. */
SQ_API
int sq_plan_from_json(const cJSON *root, const char *file, sq_plan **out, sq_error *err);
SQ_API
int sq_plan_load(const char *file, sq_plan **out, sq_error *err);

/* The SQ_PLAN_HW_RUNTIME member of the hardware object hw, when present: an object whose
 * numbers are finite and >= 0, "tokens_per_second" and "predicted_speedup" > 0, whose figures
 * (the members the planners write as numbers, docs/formats.md) are numbers, and whose
 * "cost_model"/"cost_per_round" is a string; and hw's "chosen_by" ("engine" or "sequoia-run":
 * the cost model that chose, sequoia-plan --cost-model) and "batch" (an integer >= 1: the batch
 * size the figures price) when present. SQ_EDATA naming `file` and the field. */
SQ_API
int sq_plan_check_runtime_cost(const cJSON *hw, const char *file, sq_error *err);

SQ_END_DECLS

#endif
