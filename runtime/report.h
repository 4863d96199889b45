/* The run report of sequoia-run (format sequoia-run-report v2, docs/formats.md): what was run,
 * tokens per step with a confidence interval against the plan's expected_tokens, the
 * acceptance measured along the verifier's walks, timing, the target-only baseline, the
 * validation, and the batch section (the B sequences decoded together; a single run is B = 1). */
#ifndef SQ_RUNTIME_REPORT_H
#define SQ_RUNTIME_REPORT_H

#include <stdint.h>

#include <cjson/cJSON.h>

#include "libsequoia/base/error.h"
#include "libsequoia/base/stats.h"
#include "libsequoia/format/plan.h"
#include "runtime/specdec.h"
#include "runtime/validate.h"

#define SQ_RUN_REPORT_FORMAT "sequoia-run-report"
#define SQ_RUN_REPORT_VERSION 2
/* Version 1 of the report had no batch section; `sequoia-run --batch` wrote a report of its own
 * (format "sequoia-run-batch", version 1), which version 2 replaces (docs/formats.md). */
#define SQ_RUN_BATCH_FORMAT_V1 "sequoia-run-batch"

/* Acceptance measured along the verifier's walks: at a visited node with c children, ranks
 * 1..c were each "offered"; hits[k] counts rank k+1 accepted. Under the positional assumption
 * hits[k] / offered[k] estimates p_{k+1} whatever c is. */
typedef struct sq_run_acceptance {
    int     W, D;
    double *offered, *hits;               /* (W)                         */
    double *offered_d, *hits_d;           /* (D, W) by depth of the node */
} sq_run_acceptance;

int sq_run_acceptance_init(sq_run_acceptance *a, int W, int D, sq_error *err);
void sq_run_acceptance_free(sq_run_acceptance *a);
void sq_run_acceptance_add(sq_run_acceptance *a, const sq_step_info *s);
/* p(W): hits / offered, 0 for ranks never offered. */
void sq_run_acceptance_p(const sq_run_acceptance *a, double *p);

/* F(T) with the per-rank acceptance p(W) (ranks past W count as 0). Errors: out of memory. */
int sq_tree_f_with(const sq_tree *t, const double *p, int W, double *F, sq_error *err);

/* Where a decoding's time went, from its batch steps alone: the prompts' prefill and the
 * start-up are left out, so that the rate compares with a profile of the forwards
 * (docs/benchmarks.md, "Ladder"). Medians and 10th percentiles are over the batch steps. */
typedef struct sq_run_decode {
    double ms;                              /* sum of the batch steps' times              */
    double step_ms, draft_ms, target_forward_ms, verify_ms;   /* medians                  */
    double step_p10_ms, target_forward_p10_ms;
} sq_run_decode;

/* The decode times of n batch steps whose step infos are in[0..n-1] (each carries its batch
 * step's times). Errors: out of memory. */
int sq_run_decode_timing(const sq_step_info *in, int n, sq_run_decode *out, sq_error *err);

/* One sequence of a batch. */
typedef struct sq_run_sequence {
    int            prompt_tokens, steps;
    const int32_t *gen;                    /* (max_new_tokens)                      */
    const int32_t *base;                   /* target alone, or NULL (no baseline)   */
} sq_run_sequence;

/* The batch section: B sequences decoded together (B = 1 for a single run). */
typedef struct sq_run_batch {
    int                    size;           /* B                                     */
    int                    batch_steps;
    const sq_run_sequence *seqs;           /* (B)                                   */
    sq_run_decode          decode;
    int                    greedy_equals_separate_runs;   /* -1: not checked        */
} sq_run_batch;

/* A dynamic run (runtime/dyntree.h): the engine, the envelope and every step's verified tree,
 * from the step infos (B sequences, row k at infos + k * max_new, steps[k] of them, with
 * sq_specdec_params.record_tree; a row without a recorded tree is left out). The report writes
 * it under "dynamic" (docs/formats.md). */
typedef struct sq_run_dynamic {
    const char         *engine;           /* "sglang" | "trtllm-dynamic"            */
    int                 steps, topk, nodes;   /* the envelope L,K,N                  */
    int                 B, max_new;
    const int          *seq_steps;        /* (B)                                    */
    const sq_step_info *infos;            /* (B, max_new)                           */
    double              expected_tokens;  /* a dynamic plan's prediction (sequoia-run
                                             --plan DYN.json), compared like a plan's;
                                             0: none (--engine/--envelope)             */
    const cJSON        *hardware;         /* the dynamic plan's "hardware" section, or NULL:
                                             its sequoia_run prediction is compared with the
                                             measured speed (sq_run_speed)                 */
} sq_run_dynamic;

/* Everything a run measured. The pooled fields (steps, step_tokens, acc) cover every sequence
 * of the batch; the timing sums are over batch steps; prompt_tokens, gen and base are the first
 * sequence's (the whole run for B = 1). */
typedef struct sq_run_record {
    /* setup */
    const char *draft, *target, *plan_file, *prompt_file, *mode, *backend, *dtype;
    int         prompt_tokens, max_new_tokens, context;
    int         vocab_size;                /* the shared range decoded over            */
    int         draft_vocab_size, target_vocab_size;   /* 0: both vocab_size; else the
                                              models' own, which differ by padding rows   */
    double      temperature, top_p;
    uint64_t    seed;
    /* the run */
    const sq_plan *plan;
    int         depth;                     /* tree levels, root included            */
    int         steps;
    const int  *step_tokens;               /* (steps)                               */
    const sq_run_acceptance *acc;
    double      spec_ms, draft_ms, target_ms, verify_ms;
    /* sums over steps of sq_step_info's finer timing (specdec.h) */
    double      draft_forward_ms, target_forward_ms, commit_ms, steps_ms;
    /* the same step by step (the batch steps of the sequence that took the most), or NULL:
     * the report's timing.per_step */
    const sq_step_info *step_infos;
    int         n_step_infos;
    /* tokens the draft caught up, summed over every sequence's steps (sq_step_info's
     * draft_catchup; the report's "draft_catchup") */
    double      draft_catchup_tokens;
    const int32_t *gen;                    /* (max_new_tokens)                      */
    const int32_t *base;                   /* target alone, or NULL (no baseline)   */
    double      base_ms;
    /* tokens out in all, fewer than B * max_new_tokens when sequences stopped at an
     * end-of-sequence id (gen then ends in SQ_SPECDEC_NO_TOKEN); 0: B * max_new_tokens */
    double      generated_tokens;
    const sq_validation *val;              /* NULL: not validated                   */
    const sq_run_batch *batch;             /* NULL: no batch section (B = 1)        */
    /* a dynamic tree's run, or NULL (a plan's): plan is then only the envelope's room, and
     * the prediction and the "plan" section say so instead of comparing with it */
    const sq_run_dynamic *dyn;
} sq_run_record;

/* The measured tokens per step against the plan's prediction. */
typedef struct sq_run_prediction {
    sq_mean_ci ci;
    int        have_ci, within;            /* a CI exists; expected_tokens lies in it  */
    double     f_measured_acc;             /* the tree's F with the measured acceptance */
    char       explanation[1024];
} sq_run_prediction;

int sq_run_predict(const sq_run_record *r, sq_run_prediction *out, sq_error *err);

/* The measured decoding speed against the plan's prediction of sequoia-run's own
 * (hardware.sequoia_run.tokens_per_second, docs/planning.md "Two cost models"), for static and
 * dynamic plans alike: the one place that decides whether they compare. The plan priced batch
 * hardware.batch (absent: batch 1); the run compares when it decoded that many sequences
 * together. A static plan's tokens_per_second is per sequence (F / t_step), a dynamic plan's over
 * the batch: `predicted` is over the batch for both. */
typedef struct sq_run_speed {
    int    have_plan;     /* the plan has a hardware section (else nothing to say)            */
    int    comparable;    /* predicted and ratio are set                                      */
    int    plan_batch;    /* the batch the plan priced                                        */
    double predicted;     /* tokens/s over the batch, NAN when not comparable                 */
    double measured;      /* Σ step_tokens over the batch steps' time (tokens/s of the batch) */
    double ratio;         /* measured / predicted                                             */
    char   note[256];     /* why not comparable ("" when comparable)                          */
} sq_run_speed;

void sq_run_speed_of(const sq_run_record *r, sq_run_speed *out);

/* The summary of a single run's tokens per step, without the tool's name: tokens out, steps,
 * the mean with its 95% CI (or why there is none), the plan's expected_tokens; when the steps
 * made more tokens than the output keeps (the last step cut at --max-new-tokens or at an
 * end-of-sequence token), it says so: tokens/step counts every token the steps made. */
void sq_run_summary_line(const sq_run_record *r, const sq_run_prediction *pr, char *buf,
                         size_t cap);

/* The report (format SQ_RUN_REPORT_FORMAT, version SQ_RUN_REPORT_VERSION); NULL when out of
 * memory. */
cJSON *sq_run_report_json(const sq_run_record *r, const sq_run_prediction *pred);

#endif
