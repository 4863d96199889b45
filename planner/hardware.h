/* Hardware-aware choice of tree size and depth (docs/design.md §4; paper §4.1).
 *
 * For every candidate (n, d) the DP gives the optimal tree T and F(n, d). One speculation step
 * costs, with w_l the nodes at level l of T (levels 0 .. L-1):
 *
 *   per-level model (a draft profile is known):
 *     t_step = t_target(n) + t_draft(a) + Σ_{l=1..L-2} t_draft(w_l),   a ≈ F(n, d)
 *     (the draft reads the a tokens accepted last step, which gives the root's distribution,
 *      then runs once per level over that level's nodes; the leaves need no draft forward)
 *   fixed model (only one draft time c is known; the official implementation's model):
 *     t_step = t_target(n) + L · c
 *
 *   in-step model (the target profile has a "step" section, sequoia-profile --draft: the
 *   cost of a step as decoding runs it, libsequoia/format/profile.h):
 *     t_step = T(n) + D_first(F) + Σ_{l=1..L-2} D_level(w_l) + O(n)
 *     T: the target's n-token forward inside a step (after the draft's forwards), D_first:
 *     the draft's first forward (after the target's), D_level: a level's draft forward, O:
 *     the step's own work outside the forwards. Past the step tables' measured range, T is
 *     the steady-stream time t_target(n) scaled by T/t_target at the table's nearest end (the
 *     same for D_* with the draft profile when one is given; otherwise the extrapolation
 *     mode, constant for D_first, linear for O). The draft profile, when given, must be of
 *     the draft the step section was measured with (same shape), else SQ_EDATA.
 *
 * These are the ENGINE's model: what a static-tree engine runs (its draft reads F tokens, the
 * tokens accepted last step, and every node of a level). It drives the choice (sq_hw_select)
 * unless params.cost_model is SQ_COST_SEQUOIA_RUN, when sequoia-run's model below does.
 *
 * sequoia-run's model (docs/planning.md, "Two cost models"): the same terms, but as
 * runtime/specdec.c runs them:
 *     t_step = T(n) + D_first(c) + Σ_{l=1..L-2} D_level(i_l) + O(n)
 *     (per-level: t_target(n) + t_draft(c) + Σ t_draft(i_l); fixed: t_target(n) + (L-1) · c)
 *   c = 1 + Σ_{leaves v ≠ root} f(v): the draft keeps in its cache the accepted nodes it ran
 *     while growing the tree (commit_walk), so its next first forward reads the bonus token
 *     plus the last accepted node when that node is a leaf (the draft reads only nodes with
 *     children: grow_plan's expand); f(v) = P(the path reaches v) (sq_tree_expected_tokens),
 *     and a path ends at a leaf v exactly when it reaches it;
 *   i_l: the nodes of level l that have children (the only ones the draft reads).
 *
 * A root-only tree (n = 1) is plain autoregressive decoding: t_step = t_target(1) (in-step:
 * T(1) + O(1), the plain decoding's forward and commit).
 *
 * Credibility (issue 27; docs/planning.md, "Profiles that are not credible"): unless `trust`
 * is set, sq_hw_select refuses (SQ_EDATA, naming the file and the token counts) a profile
 * whose time at n > 1 tokens falls below t(1) beyond SQ_PROFILE_FALL_TOL and noise
 * (sq_profile_falls with from_first), and a prediction whose speedup exceeds tokens/step x
 * (1 + SQ_PROFILE_FALL_TOL): a step costs at least one target forward of n >= 1 tokens, which
 * cannot be cheaper than t(1), so S = F · t(1) / t_step <= F.
 * The choice maximises F / t_step (t_step of the model params.cost_model names; the
 * credibility bound applies to that model's speedup); the predicted speedup against the target
 * alone is
 *   S = F · t_target(1) / t_step.
 * Ties go to the smaller size, then the smaller depth. */
#ifndef SQ_PLANNER_HARDWARE_H
#define SQ_PLANNER_HARDWARE_H

#include <stdio.h>

#include <cjson/cJSON.h>

#include "libsequoia/base/api.h"
#include "planner/dp.h"
#include "libsequoia/format/profile.h"

SQ_BEGIN_DECLS

/* Which model ranks the candidates (sequoia-plan --cost-model; docs/planning.md, "Two cost
 * models"): the engine's (the default) or sequoia-run's own. Both are always computed and written;
 * this only says which one the choice maximises. */
typedef enum sq_cost_model { SQ_COST_ENGINE = 0, SQ_COST_SEQUOIA_RUN = 1 } sq_cost_model;

/* "engine" or "sequoia-run"; -1 on anything else. */
SQ_API
int sq_cost_model_parse(const char *s);
SQ_API
const char *sq_cost_model_name(sq_cost_model m);

typedef struct sq_hw_params {
    const sq_profile *target;     /* required                                              */
    const sq_profile *draft;      /* per-level model when set                              */
    double            draft_ms;   /* fixed model's cost per level when draft is NULL       */
    sq_extrapolate    extrapolate;
    int               measured_sizes_only; /* candidates: only sizes the target profile
                                              measured (what the official code does)      */
    int               budget_only;  /* the one candidate (N, D), the tree the plan holds
                                       without profiles: priced, not chosen               */
    const char       *target_file;  /* names for messages; NULL: "target profile"         */
    const char       *draft_file;
    int               trust;        /* plan from profiles and predictions that are not
                                       physically credible (sequoia-plan --trust-profiles) */
    sq_cost_model     cost_model;   /* what the choice maximises (default: the engine's)   */
} sq_hw_params;

/* The credibility check of one profile (see above): SQ_EDATA naming `file` and the token
 * counts whose time falls below t(1), including the step section's target table. */
SQ_API
int sq_hw_check_profile(const sq_profile *p, const char *file, sq_error *err);

/* The speedup bound: SQ_EDATA when S > F · (1 + SQ_PROFILE_FALL_TOL), naming the files, the
 * tree size n and t_target(n), t_target(1). */
SQ_API
int sq_hw_check_prediction(const sq_hw_params *params, int n, double F, double speedup,
                           sq_error *err);

SQ_API
sq_hw_params sq_hw_default_params(void);

typedef struct sq_hw_result {
    int     N, D;            /* search bounds (the DP's effective budget and depth)          */
    int     n, d;            /* the choice                                                   */
    int     levels;          /* levels of the chosen tree                                    */
    double  expected_tokens; /* F(n, d)                                                      */
    double  step_ms;         /* t_step(n, d)                                                 */
    double  target1_ms;      /* t_target(1)                                                  */
    double  speedup;         /* F · t_target(1) / t_step                                     */
    double *speedup_table;   /* (N+1, D+1) S for every evaluated (n, d); NAN elsewhere       */
    /* sequoia-run's model of the same trees (the choice is params.cost_model's) */
    double  runtime_step_ms; /* t_step of the choice as sequoia-run runs it                  */
    double  runtime_catchup; /* its draft's expected catch-up tokens c                       */
    double  runtime_speedup; /* F · t_target(1) / runtime_step_ms                            */
    double *runtime_speedup_table;   /* (N+1, D+1), as speedup_table                          */
} sq_hw_result;

/* Evaluates every candidate. Errors: SQ_EUSAGE when a needed time is outside a profile's
 * range and extrapolation is off, or when no candidate exists. */
SQ_API
int sq_hw_select(sq_dp *dp, const sq_hw_params *params, sq_hw_result **out, sq_error *err);
SQ_API
void sq_hw_result_free(sq_hw_result *r);

/* Cost of one step of tree t under the model (F = expected tokens of t). */
SQ_API
int sq_hw_step_ms(const sq_hw_params *params, const sq_tree *t, double F, double *ms,
                  sq_error *err);

/* sequoia-run's expected draft catch-up of tree t, c = 1 + Σ_{leaves v ≠ root} reach[v]
 * (reach: f(v) of sq_tree_expected_tokens); 0 for a root-only tree (plain decoding). */
SQ_API
double sq_hw_catchup_of(const sq_tree *t, const double *reach);
/* The same under curve c (its p_by_depth when present). Errors: out of memory. */
SQ_API
int sq_hw_catchup(const sq_tree *t, const sq_curve *c, double *catchup, sq_error *err);

/* Cost of one step of tree t as sequoia-run runs it (the model above), its draft catching up
 * `catchup` tokens (sq_hw_catchup). */
SQ_API
int sq_hw_step_ms_runtime(const sq_hw_params *params, const sq_tree *t, double catchup,
                          double *ms, sq_error *err);

/* One forward's time as the step-cost model prices it, for other cost models (the envelope
 * engines' rounds, planner/dynamic.c): part SQ_STEP_TARGET (the target's forward of x tokens),
 * SQ_STEP_DRAFT_FIRST or SQ_STEP_DRAFT_LEVEL (the draft's), SQ_STEP_OVERHEAD (the step's own
 * work), at batch size `batch`. At batch 1 with a step section in the target profile: the
 * section's time (past its range as sq_hw_step_ms does); otherwise the steady-stream profile's
 * sq_profile_ms_batch (the draft's for the draft parts; 0 for the overhead). */
SQ_API
int sq_hw_forward_ms(const sq_hw_params *params, sq_step_part part, int batch, double x,
                     double *ms, sq_error *err);

/* The plan's "hardware" section, with sequoia-run's model of the chosen tree under
 * SQ_PLAN_HW_RUNTIME (libsequoia/format/plan.h), and "chosen_by": "sequoia-run" when that model
 * chose it (params.cost_model; absent: the engine's, as before the option). File names may be
 * NULL. */
SQ_API
cJSON *sq_hw_to_json(const sq_hw_result *r, const sq_hw_params *params, const char *target_file,
                     const char *draft_file);

/* Compact tables of predicted speedup by size (rows) and depth bound (columns): the engine
 * model's, then sequoia-run's. */
SQ_API
void sq_hw_print_table(FILE *fp, const sq_hw_result *r);

SQ_END_DECLS

#endif
