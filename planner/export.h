/* Exports of a plan for serving engines (docs/design.md §6.5; docs/engines.md has the
 * engine/version table), and the engines' limits. The formats are one table (planner/export.c);
 * the engine functions below read the engine table (planner/engine.h, planner/engines.c).
 *
 * Rank-path formats list every node but the root as the path of 0-based ranks from the root,
 * sorted by (length, lexicographic) — the order of the plan's nodes (docs/design.md §7.4):
 *   trtllm, medusa, eagle   [[0], [1], [0, 0]]             (JSON / Python list of lists)
 *   vllm                    "[(0,), (1,), (0, 0)]"         (the speculative_token_tree string)
 * growmap is the Sequoia layout (roots, branches, Successors, mask, depth, size) that the
 * official Sequoia code and UMbreLLa load; dot is Graphviz; svg a self-contained picture.
 * sglang and trtllm-dynamic are envelopes, not trees: the smallest engine flags under which
 * the engine's own per-step tree can take the plan's shape (sq_envelope_of), within the
 * engine's rules on envelopes (sq_engine_envelope_check). sq_export_envelope and
 * sq_export_envelope_ladder write an envelope, or one per batch size, as each engine takes it.
 *
 * Which engine versions take what (docs/engines.md, "Engines and versions"): static trees
 * (vllm: vLLM from July 2025 until PR #42121 removed tree attention, merged 2026-05-08;
 * trtllm: TensorRT-LLM <= 1.3's eagle_choices / medusa_choices, only on the deprecated
 * two-model path, removed by PR #18210, 2026-08); envelopes (SGLang, TensorRT-LLM's PyTorch
 * dynamic tree); chains only (vLLM after PR #42121: num_speculative_tokens and, per batch size,
 * num_speculative_tokens_per_batch_size, PR #32374; planner/ladder.h's vllm-schedule).
 *
 * Engine limits (checked before anything is written; a refusal is SQ_EDATA and names the
 * first offending node or level, and why the engine needs it):
 *   vllm    every node of a level has the same number of children, and a level with
 *           children has no leaves (the EAGLE proposer drafts k_l children for every node of
 *           level l-1: the tree must be a k_1 x k_2 x ... product)
 *   trtllm  (static eagle_choices / medusa_choices, TensorRT-LLM <= 1.3)
 *           paths of at most 8 speculated tokens: computePrefix shifts a 32-bit int by
 *           4 * (len - 1), undefined from len 9 on (on x86 the prefixes collide and nodes get
 *           the wrong parent); 0-based ranks <= 15 (4-bit prefix chunks); at most
 *           max_non_leaves (default 10, convert_checkpoint.py's max_non_leaves_per_layer)
 *           nodes with children per level; and not 32k + 1 nodes (32k draft tokens): the
 *           C++ runtime packs the mask of max_draft_len + 1 tokens into
 *           divUp(max_draft_len, 32) words and older Python runtimes raise ValueError
 *   medusa  0-based ranks <= 9 (top-10 candidates per head)
 *   eagle   (EAGLE-1, SafeAILab/EAGLE v1) 0-based ranks <= 9; at least one path of 2 tokens
 *           (a depth-1 tree crashes generate_tree_buffers with IndexError); and on every level
 *           the non-leaves whose children have children come first among that level's
 *           non-leaves (the draft finds parents by counting parent changes) */
#ifndef SQ_PLANNER_EXPORT_H
#define SQ_PLANNER_EXPORT_H

#include <stdio.h>

#include "libsequoia/base/api.h"
#include "libsequoia/base/error.h"
#include "libsequoia/format/plan.h"
#include "libsequoia/format/tree.h"

SQ_BEGIN_DECLS

typedef enum sq_export_format {
    SQ_EXPORT_TRTLLM,
    SQ_EXPORT_MEDUSA,
    SQ_EXPORT_EAGLE,
    SQ_EXPORT_VLLM,
    SQ_EXPORT_GROWMAP,
    SQ_EXPORT_DOT,
    SQ_EXPORT_SVG,
    SQ_EXPORT_SGLANG,          /* server flags                          */
    SQ_EXPORT_TRTLLM_DYNAMIC,  /* EagleDecodingConfig fields (JSON)     */
    SQ_EXPORT_COUNT
} sq_export_format;

/* "trtllm", "medusa", ... ; returns -1 for an unknown name. */
SQ_API
int sq_export_format_parse(const char *name);
SQ_API
const char *sq_export_format_name(sq_export_format f);
/* "trtllm, medusa, eagle, vllm, growmap, dot, svg, sglang, trtllm-dynamic" */
SQ_API
const char *sq_export_format_list(void);

typedef enum sq_engine {
    SQ_ENGINE_NONE,
    SQ_ENGINE_VLLM,
    SQ_ENGINE_TRTLLM,          /* static eagle_choices / medusa_choices (<= 1.3)        */
    SQ_ENGINE_MEDUSA,          /* FasterDecoding/Medusa                                 */
    SQ_ENGINE_EAGLE,           /* EAGLE-1 (SafeAILab/EAGLE v1)                          */
    SQ_ENGINE_SGLANG,          /* envelope: num_steps, eagle_topk, num_draft_tokens     */
    SQ_ENGINE_TRTLLM_DYNAMIC,  /* envelope: use_dynamic_tree, dynamic_tree_max_topK ... */
    SQ_ENGINE_COUNT
} sq_engine;

/* "vllm", "trtllm", "medusa", "eagle", "sglang", "trtllm-dynamic"; -1 for an unknown name. */
SQ_API
int sq_engine_parse(const char *name);
SQ_API
const char *sq_engine_name(sq_engine e);

/* "vllm, trtllm, medusa, eagle, sglang, trtllm-dynamic" */
SQ_API
const char *sq_engine_list(void);

/* 1 for the envelope engines (sglang, trtllm-dynamic). */
SQ_API
int sq_engine_is_envelope(sq_engine e);

/* The engine whose limits an export format must satisfy (SQ_ENGINE_NONE for growmap, dot,
 * svg). */
SQ_API
sq_engine sq_export_engine(sq_export_format f);

/* An export writer: the export of `plan` to fp, the engine's limits already checked; `file`
 * names the plan in messages. */
typedef int (*sq_export_writer)(FILE *fp, const sq_plan *plan, const char *file, sq_error *err);

/* The format table (planner/export.c), one row per format; an engine's format takes the
 * engine's writer from the engine table (planner/engine.h). */
typedef struct sq_export_format_info {
    const char      *name;    /* --export FORMAT                                           */
    sq_engine        engine;  /* whose limits and writer; SQ_ENGINE_NONE for growmap, dot, svg */
    sq_export_writer write;   /* the writer of a format without an engine, else NULL       */
    const char      *note;    /* what it writes, for --help ("choices lists")              */
} sq_export_format_info;

/* The row of `f`; NULL out of range. */
SQ_API
const sq_export_format_info *sq_export_format_info_of(sq_export_format f);

/* The writer of `f`: its own, or its engine's. */
SQ_API
sq_export_writer sq_export_writer_of(sq_export_format f);

#define SQ_TRTLLM_MAX_PATH 8        /* speculated tokens on one path (tree depth 9 with the root) */
#define SQ_TRTLLM_MAX_RANK0 15      /* largest 0-based rank                                       */
#define SQ_TRTLLM_MAX_NON_LEAVES 10 /* convert_checkpoint.py's max_non_leaves_per_layer default   */
#define SQ_MEDUSA_MAX_RANK0 9       /* largest 0-based rank (TOPK = 10)                           */
#define SQ_EAGLE_MAX_RANK0 9        /* EAGLE-1: TOPK = 10 in utils_c.py and cnets.py              */

typedef struct sq_engine_limits {
    int max_path;        /* most speculated tokens on a path (tree depth - 1); 0 = no limit */
    int min_path;        /* the longest path must have at least this many tokens; 0 = none */
    int max_rank0;       /* largest 0-based rank; -1 = no limit                             */
    int max_non_leaves;  /* most nodes with children on one level; 0 = no limit             */
    int level_uniform;   /* 1: k_1 x k_2 x ... product trees only                           */
    int deep_first;      /* 1: EAGLE-1's rule (non-leaves with grandchildren first)         */
    int no_32k_plus_1;   /* 1: a size of 32k + 1 nodes (k >= 1) is refused                  */
} sq_engine_limits;

/* The limits of `e`; max_non_leaves only applies to TensorRT-LLM (0 = the default 10). */
SQ_API
sq_engine_limits sq_engine_limits_of(sq_engine e, int max_non_leaves);

/* EAGLE-1's rule: for every level, the non-leaves that have a non-leaf child come before
 * (in rank-path order) every non-leaf without one. Returns 1 when it holds; otherwise 0, and
 * *bad_early / *bad_late (when not NULL) get a non-leaf without a non-leaf child and a later
 * one with one, on the first level where it fails. */
SQ_API
int sq_eagle_deep_first(const sq_tree *t, int *bad_early, int *bad_late);

/* The envelope engines' flags: SGLang --speculative-num-steps / --speculative-eagle-topk /
 * --speculative-num-draft-tokens (root included: the verified token is tree node 0);
 * TensorRT-LLM max_draft_len / dynamic_tree_max_topK / max_total_draft_tokens (root not
 * counted). Each expands at most topk nodes per level by their topk best children, so the
 * smallest envelope holding `t` has topk = max(children of any node, non-leaves of any level);
 * for TensorRT-LLM also topk >= ceil((n - 1) / steps), since it takes max_total_draft_tokens
 * <= dynamic_tree_max_topK * max_draft_len only. The result keeps sq_engine_envelope_check. */
typedef struct sq_envelope {
    int steps;         /* draft steps = speculated tokens on the longest path (levels - 1) */
    int topk;
    int draft_tokens;  /* as the engine counts them                                        */
} sq_envelope;

/* Errors: SQ_EDATA for a root-only tree (no draft step). */
SQ_API
int sq_envelope_of(const sq_tree *t, sq_engine e, sq_envelope *out, const char *file,
                   sq_error *err);

/* An envelope of `steps` draft steps L, `topk` K and `nodes` N (root included, N - 1 draft
 * tokens; docs/engines.md, "Envelopes") against the rules of engine e (SQ_ENGINE_SGLANG or
 * SQ_ENGINE_TRTLLM_DYNAMIC): K >= 1, L >= 1, N >= 2 for both; SGLang: N - 1 <= K + (L - 1) K^2
 * (the tree keeps the N - 1 best of that many candidates) and, with K = 1, N = L + 1 (the
 * server resets N to L + 1); TensorRT-LLM: L <= N - 1 <= K L (max_total_draft_tokens in
 * [max_draft_len, dynamic_tree_max_topK * max_draft_len]). Errors: SQ_EUSAGE "FILE: ENGINE:
 * the rule, where the engine states it, the numbers" (also for an engine without envelopes). */
SQ_API
int sq_engine_envelope_check(sq_engine e, int steps, int topk, int nodes, const char *file,
                             sq_error *err);

/* Writes one envelope as engine e's current version takes it, JSON with a newline:
 *   SGLang          {"engine": "sglang", "server_args": {"speculative_num_steps": L,
 *                    "speculative_eagle_topk": K, "speculative_num_draft_tokens": N},
 *                    "flags": "--speculative-num-steps L --speculative-eagle-topk K
 *                    --speculative-num-draft-tokens N"}
 *   TensorRT-LLM    {"use_dynamic_tree": true, "dynamic_tree_max_topK": K, "max_draft_len": L,
 *                    "max_total_draft_tokens": N - 1}   (EagleDecodingConfig's fields)
 * Nothing is written when sq_engine_envelope_check refuses it (its error). */
SQ_API
int sq_export_envelope(FILE *fp, sq_engine e, int steps, int topk, int nodes, const char *file,
                       sq_error *err);

/* One envelope per batch size (n rows; batch strictly increasing, >= 1; a row with
 * speculate[i] == 0 is plain decoding and its envelope is not read):
 *   {"engine": NAME, "per_batch": [{"batch": b, "speculate": true, "config": <as
 *    sq_export_envelope>}, {"batch": b, "speculate": false}, ...],
 *    "per_batch_size": "what the engine takes per batch size and what a user does"}
 * Neither engine changes its tree envelope with the batch size (docs/engines.md): the note says
 * how to deploy the rows. Errors (SQ_EUSAGE, nothing written): n < 1, batch sizes not
 * increasing, a speculating row outside the engine's rules (the row's batch size named). */
SQ_API
int sq_export_envelope_ladder(FILE *fp, sq_engine e, const int *batch, const int *steps,
                              const int *topk, const int *nodes, const int *speculate, int n,
                              const char *file, sq_error *err);

/* What engine e needs alongside the export of t (max_draft_len, num_speculative_tokens, ...),
 * one line into buf. t must pass sq_engine_check. */
SQ_API
void sq_engine_requirements(const sq_tree *t, sq_engine e, int max_non_leaves, char *buf,
                            size_t cap);

/* The summary's verdict block: one line per engine (ok with what to pass, or refused with
 * the reason), as docs/engines.md's table. */
SQ_API
void sq_engine_print_status(FILE *fp, const sq_tree *t, int max_non_leaves);

/* Checks `t` against the limits of `e`. On a violation returns SQ_EDATA with a message
 * "FILE: ENGINE: problem" naming the node (as a rank path) or the level. */
SQ_API
int sq_engine_check(const sq_tree *t, sq_engine e, int max_non_leaves, const char *file,
                    sq_error *err);

typedef struct sq_export_params {
    int max_non_leaves;  /* TensorRT-LLM's max_non_leaves_per_layer; 0 = the default 10 */
    int check_limits;    /* 1 (default): refuse a plan that the engine cannot take   */
} sq_export_params;

SQ_API
sq_export_params sq_export_default_params(void);

/* Writes the export of `plan` to fp. `file` names the plan in messages. Errors: SQ_EDATA (an
 * engine limit), SQ_ESOFTWARE (out of memory). Nothing is written when a check fails. */
SQ_API
int sq_export_write(FILE *fp, const sq_plan *plan, sq_export_format f,
                    const sq_export_params *params, const char *file, sq_error *err);

/* The same into a malloc'd NUL-terminated string (*len bytes). */
SQ_API
int sq_export_to_string(const sq_plan *plan, sq_export_format f, const sq_export_params *params,
                        const char *file, char **out, size_t *len, sq_error *err);

/* Writes the 0-based rank path of node v ("[0, 2, 1]" or "(0, 2, 1)" / "(0,)" when
 * `tuple`) to fp. SQ_ESOFTWARE if a path deeper than 64 levels finds no memory. */
SQ_API
int sq_export_rank_path(FILE *fp, const sq_tree *t, int v, int tuple, sq_error *err);

SQ_END_DECLS

#endif
