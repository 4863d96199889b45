/* The run report of sequoia-run (format sequoia-run-report v1, docs/runtime.md): what was run,
 * tokens per step with a confidence interval against the plan's expected_tokens, the
 * acceptance measured along the verifier's walks, timing, the target-only baseline and the
 * validation. */
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
#define SQ_RUN_REPORT_VERSION 1

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

/* Everything a run measured. */
typedef struct sq_run_record {
    /* setup */
    const char *draft, *target, *plan_file, *prompt_file, *mode, *backend, *dtype;
    int         prompt_tokens, max_new_tokens, context, vocab_size;
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
    const int32_t *gen;                    /* (max_new_tokens)                      */
    const int32_t *base;                   /* target alone, or NULL (no baseline)   */
    double      base_ms;
    const sq_validation *val;              /* NULL: not validated                   */
} sq_run_record;

/* The measured tokens per step against the plan's prediction. */
typedef struct sq_run_prediction {
    sq_mean_ci ci;
    int        have_ci, within;            /* a CI exists; expected_tokens lies in it  */
    double     f_measured_acc;             /* the tree's F with the measured acceptance */
    char       explanation[1024];
} sq_run_prediction;

int sq_run_predict(const sq_run_record *r, sq_run_prediction *out, sq_error *err);

/* The report; NULL when out of memory. */
cJSON *sq_run_report_json(const sq_run_record *r, const sq_run_prediction *pred);

#endif
