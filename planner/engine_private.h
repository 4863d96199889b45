/* What the engine table (planner/engines.c) points at in the other planner files: the engines'
 * export writers (planner/export.c) and their planners (planner/engine.c). Not installed (a
 * _private.h header); nothing outside planner/ uses it. */
#ifndef SQ_PLANNER_ENGINE_PRIVATE_H
#define SQ_PLANNER_ENGINE_PRIVATE_H

#include <stdio.h>

#include "planner/engine.h"

/* Writers (sq_export_writer): rank-path lists for TensorRT-LLM, Medusa and EAGLE-1
 * ([[0], [1], [0, 0]]); vLLM's speculative_token_tree string ("[(0,), (1,), (0, 0)]"); the
 * envelope engines' flags (SGLang's server flags, TensorRT-LLM's EagleDecodingConfig JSON). */
int sqe_write_choices(FILE *fp, const sq_plan *plan, const char *file, sq_error *err);
int sqe_write_tuples(FILE *fp, const sq_plan *plan, const char *file, sq_error *err);
int sqe_write_sglang(FILE *fp, const sq_plan *plan, const char *file, sq_error *err);
int sqe_write_trtllm_dynamic(FILE *fp, const sq_plan *plan, const char *file, sq_error *err);

/* Planners (sq_engine_planner; planner/engine.h has each method): the best level-uniform tree
 * (vLLM), the DP clamped to the engine's rank and path limits with the non-leaf repair
 * (TensorRT-LLM, Medusa), the DP repaired to EAGLE-1's parent rule, the best static tree within
 * an envelope (SGLang, TensorRT-LLM's dynamic tree). */
int sqe_plan_uniform(const sq_engine_plan_params *p, const sq_curve *c, sq_engine_plan_result *out,
                     sq_error *err);
int sqe_plan_rank_limited(const sq_engine_plan_params *p, const sq_curve *c,
                          sq_engine_plan_result *out, sq_error *err);
int sqe_plan_eagle(const sq_engine_plan_params *p, const sq_curve *c, sq_engine_plan_result *out,
                   sq_error *err);
int sqe_plan_envelope(const sq_engine_plan_params *p, const sq_curve *c,
                      sq_engine_plan_result *out, sq_error *err);

#endif
