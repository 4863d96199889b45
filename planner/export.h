/* Exports of a plan for serving engines (DESIGN.md §6.5), and the engines' limits.
 *
 * Rank-path formats list every node but the root as the path of 0-based ranks from the root,
 * sorted by (length, lexicographic) — the order of the plan's nodes (§6.4):
 *   trtllm, medusa, eagle   [[0], [1], [0, 0]]             (JSON / Python list of lists)
 *   vllm                    "[(0,), (1,), (0, 0)]"         (the speculative_token_tree string)
 * growmap is the Sequoia layout (roots, branches, Successors, mask, depth, size) that the
 * official Sequoia code and UMbreLLa load; dot is Graphviz; svg a self-contained picture.
 *
 * Engine limits (checked before anything is written; a refusal is SQ_EDATA and names the
 * first offending node or level):
 *   vllm    every node of a level has the same number of children, and a level with
 *           children has no leaves (the EAGLE proposer drafts k_l children for every node of
 *           level l-1: the tree must be a k_1 x k_2 x ... product)
 *   trtllm  paths of at most 16 speculated tokens and 0-based ranks <= 15 (4-bit prefixes in
 *           a 64-bit key), and at most `max_non_leaves` non-leaf nodes per level when given
 *   medusa, eagle   0-based ranks <= 9 (top-10 candidates per head / step) */
#ifndef SQ_PLANNER_EXPORT_H
#define SQ_PLANNER_EXPORT_H

#include <stdio.h>

#include "libsequoia/base/error.h"
#include "libsequoia/format/plan.h"
#include "libsequoia/format/tree.h"

typedef enum sq_export_format {
    SQ_EXPORT_TRTLLM,
    SQ_EXPORT_MEDUSA,
    SQ_EXPORT_EAGLE,
    SQ_EXPORT_VLLM,
    SQ_EXPORT_GROWMAP,
    SQ_EXPORT_DOT,
    SQ_EXPORT_SVG,
    SQ_EXPORT_COUNT
} sq_export_format;

/* "trtllm", "medusa", ... ; returns -1 for an unknown name. */
int sq_export_format_parse(const char *name);
const char *sq_export_format_name(sq_export_format f);
/* "trtllm, medusa, eagle, vllm, growmap, dot, svg" */
const char *sq_export_format_list(void);

typedef enum sq_engine {
    SQ_ENGINE_NONE,
    SQ_ENGINE_VLLM,
    SQ_ENGINE_TRTLLM,
    SQ_ENGINE_MEDUSA,    /* Medusa and EAGLE-1 code bases */
} sq_engine;

/* "vllm", "trtllm", "medusa" (also "eagle"); -1 for an unknown name. */
int sq_engine_parse(const char *name);
const char *sq_engine_name(sq_engine e);

/* The engine whose limits an export format must satisfy (SQ_ENGINE_NONE for growmap, dot,
 * svg). */
sq_engine sq_export_engine(sq_export_format f);

#define SQ_TRTLLM_MAX_PATH 16   /* speculated tokens on one path (tree depth 17 with the root) */
#define SQ_TRTLLM_MAX_RANK0 15  /* largest 0-based rank                                          */
#define SQ_MEDUSA_MAX_RANK0 9   /* largest 0-based rank (TOPK = 10)                              */

typedef struct sq_engine_limits {
    int max_path;        /* most speculated tokens on a path (tree depth - 1); 0 = no limit */
    int max_rank0;       /* largest 0-based rank; -1 = no limit                             */
    int max_non_leaves;  /* most nodes with children on one level; 0 = no limit             */
    int level_uniform;   /* 1: k_1 x k_2 x ... product trees only                           */
} sq_engine_limits;

/* The limits of `e`; max_non_leaves (0 = none) only applies to TensorRT-LLM. */
sq_engine_limits sq_engine_limits_of(sq_engine e, int max_non_leaves);

/* Checks `t` against the limits of `e`. On a violation returns SQ_EDATA with a message
 * "FILE: ENGINE: problem" naming the node (as a rank path) or the level. */
int sq_engine_check(const sq_tree *t, sq_engine e, int max_non_leaves, const char *file,
                    sq_error *err);

typedef struct sq_export_params {
    int max_non_leaves;  /* TensorRT-LLM's max_non_leaves_per_layer; 0 = not checked */
    int check_limits;    /* 1 (default): refuse a plan that the engine cannot take   */
} sq_export_params;

sq_export_params sq_export_default_params(void);

/* Writes the export of `plan` to fp. `file` names the plan in messages. Errors: SQ_EDATA (an
 * engine limit), SQ_ESOFTWARE (out of memory). Nothing is written when a check fails. */
int sq_export_write(FILE *fp, const sq_plan *plan, sq_export_format f,
                    const sq_export_params *params, const char *file, sq_error *err);

/* The same into a malloc'd NUL-terminated string (*len bytes). */
int sq_export_to_string(const sq_plan *plan, sq_export_format f, const sq_export_params *params,
                        const char *file, char **out, size_t *len, sq_error *err);

/* Writes the 0-based rank path of node v ("[0, 2, 1]" or "(0, 2, 1)" / "(0,)" when
 * `tuple`) to fp. */
void sq_export_rank_path(FILE *fp, const sq_tree *t, int v, int tuple);

#endif
