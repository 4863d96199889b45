/* Plans for serving: one tree per batch size (docs/planning.md, "Ladder").
 *
 * A batched forward runs b independent sequences with n new tokens each; the weight GEMMs see
 * b·n rows, the attention is per sequence. A batch profile (format version 2) gives
 * t_target(b, n) and t_draft(b, n). At each profiled batch size b the ladder applies the
 * hardware-aware choice (planner/hardware.h) to the profiles sliced at b:
 *
 *   rate_b(T) = F(T) / t_step_b(T)           tokens per millisecond per sequence
 *   speedup_b(T) = rate_b(T) · t_target(b, 1)  against plain decoding at the same batch size
 *   throughput_b(T) = 1000 · b · rate_b(T)    tokens per second over the batch
 *
 * Objectives:
 *   latency (default)  the tree maximising speedup_b; speculation pays at b when that tree has
 *                      more than the root (speedup > 1).
 *   throughput         the tree maximising gain_b(T) = throughput_b(T) / plain*(b, n), where
 *                      plain*(b, n) is the best plain-decoding throughput over the profiled
 *                      batch sizes b' with b <= b' <= b·n: the same forward rows could instead
 *                      serve more sequences when requests are queued. It pays when gain > 1.
 *
 * Each shape is priced by the engine's model and by sequoia-run's (planner/hardware.h, "Two cost
 * models"); params.cost_model names the one the gains, and so the choices, use.
 *
 * The crossover is the smallest profiled batch size from which on no tree pays (0 when
 * speculation pays at every profiled batch size). The best chain and the best k×L tree of the
 * same budget are evaluated under the same model for comparison. */
#ifndef SQ_PLANNER_LADDER_H
#define SQ_PLANNER_LADDER_H

#include <stdio.h>

#include <cjson/cJSON.h>

#include "libsequoia/base/api.h"
#include "libsequoia/format/plan.h"
#include "libsequoia/format/profile.h"
#include "planner/dp.h"
#include "planner/hardware.h"

SQ_BEGIN_DECLS

#define SQ_LADDER_FORMAT "sequoia-ladder"
#define SQ_LADDER_VERSION 1
#define SQ_LADDER_MAX_RUNGS 64

typedef enum sq_objective { SQ_OBJECTIVE_LATENCY = 0, SQ_OBJECTIVE_THROUGHPUT } sq_objective;

/* "latency" or "throughput"; -1 on anything else. */
SQ_API
int sq_objective_parse(const char *s);
SQ_API
const char *sq_objective_name(sq_objective o);

typedef struct sq_ladder_params {
    const sq_profile *target;     /* required; batch sizes come from it                   */
    const sq_profile *draft;      /* per-level model when set (must cover the same batches) */
    double            draft_ms;   /* fixed cost per level when draft is NULL              */
    sq_extrapolate    extrapolate;
    sq_objective      objective;
    const char       *target_file;
    const char       *draft_file;
    sq_cost_model     cost_model;   /* the model the gains (and so the choices) use: the
                                       engine's (default) or sequoia-run's (planner/hardware.h) */
} sq_ladder_params;

/* One candidate shape at one batch size. */
typedef struct sq_ladder_choice {
    int    size, depth;      /* nodes (root included) and levels                          */
    int    k, L;             /* k×L shape only; 0 otherwise                               */
    double expected_tokens;  /* F                                                         */
    double step_ms;          /* t_step_b                                                  */
    double speedup;          /* against plain decoding at the same batch size             */
    double tokens_per_s;     /* over the batch                                            */
    double gain;             /* the objective's ratio (speedup for latency), under the
                                params' cost_model                                        */
    /* sequoia-run's model of the same tree at the same batch size (sq_hw_step_ms_runtime;
     * docs/planning.md, "Two cost models"): the fields above as sequoia-run runs it */
    double run_catchup;      /* its draft's expected catch-up c                          */
    double run_step_ms, run_speedup, run_tokens_per_s;
} sq_ladder_choice;

typedef struct sq_ladder_rung {
    int              batch;
    double           target1_ms;    /* t_target(b, 1)                                      */
    double           plain_tokens_per_s;
    int              pays;          /* the best tree beats plain decoding                   */
    sq_ladder_choice best, chain, kxl;
    sq_plan         *plan;          /* the best tree, with its hardware section             */
} sq_ladder_rung;

typedef struct sq_ladder {
    sq_objective    objective;
    sq_cost_model   cost_model;     /* the model that chose (sq_ladder_params)              */
    int             budget, depth, width;
    int             crossover;      /* smallest batch from which on nothing pays; 0: none   */
    int             n;
    sq_ladder_rung *rungs;          /* ascending batch sizes                                */
} sq_ladder;

/* Solves the ladder on a solved DP (its curve scores every tree). Errors (SQ_EUSAGE): the
 * target profile has a single batch size (not a batch profile); a batch size of the target is
 * missing from the draft profile; a needed time is outside a profile's range and
 * extrapolation is off. */
SQ_API
int sq_ladder_solve(sq_dp *dp, const sq_curve *curve, const sq_ladder_params *params,
                    sq_ladder **out, sq_error *err);
SQ_API
void sq_ladder_free(sq_ladder *l);

/* The ladder file (format sequoia-ladder, version 1): objective, bounds, crossover, and per
 * rung the batch size, the predictions of the best tree, chain and k×L, and the plan. */
SQ_API
cJSON *sq_ladder_to_json(const sq_ladder *l, const sq_ladder_params *params);
SQ_API
int sq_ladder_save(const char *file, const sq_ladder *l, const sq_ladder_params *params,
                   sq_error *err);

/* Engine exports of a ladder (docs/engines.md, "Ladders"), from each rung's best chain (its
 * speculated tokens; 0 where no chain pays) or best tree:
 *   trtllm-schedule  TensorRT-LLM's {"max_draft_len": M, "draft_len_schedule": {"b": len}}:
 *                    keys are upper bounds (a batch size takes the value of the smallest key
 *                    >= it; above the largest key, 0), so each profiled batch size gets its
 *                    rung's chain and one between two rungs the larger rung's; the first key is
 *                    1. Refused (SQ_EDATA) where TensorRT-LLM's validator cannot take the ladder:
 *                    no chain pays anywhere (max_draft_len must be > 0), or a later rung's chain
 *                    is longer than the first's (the smallest key must map to max_draft_len).
 *   vllm-schedule    vLLM's {"num_speculative_tokens": M, "num_speculative_tokens_per_batch_size":
 *                    [[start, end, K], ...]} (inclusive ranges from 1, the same mapping; above the
 *                    last rung vLLM keeps its K). Refused where no chain pays.
 *   envelopes        per batch size, the smallest SGLang and TensorRT-LLM dynamic-tree flags
 *                    holding the rung's best tree (speculation off where it does not pay), and
 *                    what each engine takes per batch size
 * Written as JSON to fp. Rungs whose batch sizes are not >= 1 and strictly increasing are
 * refused (SQ_EUSAGE). */
SQ_API
int sq_ladder_export(const sq_ladder *l, const char *engine, FILE *fp, sq_error *err);

/* A picture: predicted speedup against batch size for the optimal tree, the best chain and
 * the best k×L, the break-even line and the crossover marked (standalone SVG). */
SQ_API
int sq_ladder_svg_write(FILE *fp, const sq_ladder *l, sq_error *err);

/* Human summary, one line per rung (the engine's and sequoia-run's predictions of its tree)
 * plus the crossover sentence. */
SQ_API
void sq_ladder_print(FILE *fp, const sq_ladder *l);

SQ_END_DECLS

#endif
