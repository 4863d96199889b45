#include "planner/hardware.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "libsequoia/base/json.h"
#include "libsequoia/format/plan.h"

int sq_cost_model_parse(const char *s)
{
    if (s && !strcmp(s, "engine"))
        return SQ_COST_ENGINE;
    if (s && !strcmp(s, "sequoia-run"))
        return SQ_COST_SEQUOIA_RUN;
    return -1;
}

const char *sq_cost_model_name(sq_cost_model m)
{
    return m == SQ_COST_SEQUOIA_RUN ? "sequoia-run" : "engine";
}

sq_hw_params sq_hw_default_params(void)
{
    return (sq_hw_params){.target = NULL, .draft = NULL, .draft_ms = 0.0,
                          .extrapolate = SQ_EXTRAPOLATE_NONE, .measured_sizes_only = 0,
                          .target_file = NULL, .draft_file = NULL, .trust = 0,
                          .cost_model = SQ_COST_ENGINE};
}

static int profile_ms(const sq_profile *p, const char *which, double x, sq_extrapolate mode,
                      double *ms, sq_error *err)
{
    sq_error e = {0};
    int rc = sq_profile_ms(p, x, mode, ms, &e);
    if (rc && err && err->status == SQ_OK)
        err->cause = e.cause;   /* kept through the prefix (libsequoia/base/error.h) */
    if (rc)
        return sq_error_set(err, rc, "%s: %s", which, e.msg);
    return SQ_OK;
}

/* Part `part` of the target profile's step section at x; past the table's range, the
 * steady-stream time of `steady` (the target's or the draft's profile; NULL: none) scaled by
 * the in-step/steady ratio at the nearest end of the table, else the table extrapolated with
 * `mode`. */
static int step_part_ms(const sq_hw_params *prm, sq_step_part part, const sq_profile *steady,
                        const char *sname, double x, sq_extrapolate mode, double *ms, sq_error *err)
{
    const sq_profile_step *st = prm->target->step;
    const char *tname = prm->target_file ? prm->target_file : "target profile";
    int n = st->n[part];
    if (n == 0 && (part == SQ_STEP_OVERHEAD || part == SQ_STEP_EXPAND)) {   /* not measured: none */
        *ms = 0.0;
        return SQ_OK;
    }
    if (n == 0 && steady)   /* a section without this table: the steady-stream time */
        return profile_ms(steady, sname, x, prm->extrapolate, ms, err);
    if (n > 0 && x >= st->pts[part][0].tokens && x <= st->pts[part][n - 1].tokens)
        return sq_profile_step_ms(prm->target, part, x, mode, ms, err);
    if (n > 0 && steady) {
        const sq_profile_point *end = x < st->pts[part][0].tokens ? &st->pts[part][0]
                                                                    : &st->pts[part][n - 1];
        double at_end, here;
        int rc;
        if ((rc = profile_ms(steady, sname, end->tokens, prm->extrapolate, &at_end, err)) ||
            (rc = profile_ms(steady, sname, x, prm->extrapolate, &here, err)))
            return rc;
        *ms = here * end->median_ms / at_end;
        return SQ_OK;
    }
    sq_error e = {0};
    int rc = sq_profile_step_ms(prm->target, part, x, mode, ms, &e);
    if (rc && err && err->status == SQ_OK)
        err->cause = e.cause;
    if (rc)
        return sq_error_set(err, rc, "%s: step.%s: %s", tname, sq_step_part_name(part), e.msg);
    return SQ_OK;
}

/* The draft's forwards of a step after its first: one per level l = 1 .. levels - 2 over
 * count[l] nodes (the engine's model: the level's width; sequoia-run's: the level's nodes that
 * have children, the only ones its draft reads). */
typedef struct step_shape {
    int     levels;
    double  first;        /* tokens of the draft's first forward                           */
    const int *count;     /* (levels) nodes of each level the draft reads                  */
} step_shape;

/* t_step of a tree of n nodes with the draft's forwards of `sh` (hardware.h: the in-step,
 * per-level and fixed models), one body for the engine's model and sequoia-run's. */
static int step_cost(const sq_hw_params *prm, int n, const step_shape *sh, int runtime,
                     double *ms, sq_error *err)
{
    const char *tname = prm->target_file ? prm->target_file : "target profile";
    const char *dname = prm->draft_file ? prm->draft_file : "draft profile";
    int in_step = prm->target->step != NULL, rc;
    double total, x;
    if (in_step) {
        double O;
        if ((rc = step_part_ms(prm, SQ_STEP_TARGET, prm->target, tname, n, prm->extrapolate,
                               &total, err)) ||
            (rc = step_part_ms(prm, SQ_STEP_OVERHEAD, NULL, NULL, n, SQ_EXTRAPOLATE_LINEAR, &O,
                               err)))
            return rc;
        total += O;
    } else if ((rc = profile_ms(prm->target, tname, n, prm->extrapolate, &total, err))) {
        return rc;
    }
    if (n == 1) {
        *ms = total;
        return SQ_OK;
    }
    if (!in_step && !prm->draft) {
        /* the fixed model: the official code's L forwards a step; sequoia-run's draft runs
         * its catch-up and the levels 1 .. L - 2, L - 1 forwards */
        *ms = total + (runtime ? sh->levels - 1 : sh->levels) * prm->draft_ms;
        return SQ_OK;
    }
    if ((rc = in_step ? step_part_ms(prm, SQ_STEP_DRAFT_FIRST, prm->draft, dname, sh->first,
                                     SQ_EXTRAPOLATE_CONSTANT, &x, err)
                      : profile_ms(prm->draft, dname, sh->first, prm->extrapolate, &x, err)))
        return rc;
    total += x;
    for (int l = 1; l <= sh->levels - 2; l++) {
        if (sh->count[l] == 0)
            continue;
        if ((rc = in_step ? step_part_ms(prm, SQ_STEP_DRAFT_LEVEL, prm->draft, dname,
                                         sh->count[l], prm->extrapolate, &x, err)
                          : profile_ms(prm->draft, dname, sh->count[l], prm->extrapolate, &x,
                                       err)))
            return rc;
        total += x;
    }
    *ms = total;
    return SQ_OK;
}

int sq_hw_step_ms(const sq_hw_params *prm, const sq_tree *t, double F, double *ms, sq_error *err)
{
    int levels = sq_tree_depth(t);
    int *w = malloc((size_t)levels * sizeof *w);
    if (!w)
        return sq_error_oom(err, "level widths");
    sq_tree_level_widths(t, w);
    step_shape sh = {levels, F, w};
    int rc = step_cost(prm, t->n, &sh, 0, ms, err);
    free(w);
    return rc;
}

/* ---- sequoia-run's model (hardware.h) ------------------------------------------------------- */

double sq_hw_catchup_of(const sq_tree *t, const double *reach)
{
    if (t->n <= 1)
        return 0.0;   /* plain decoding: the draft is never run */
    /* a node the draft reads is a node with children (runtime/specdec.c, grow_plan); the
     * accepted path ends at a leaf with the probability of reaching it */
    char *inner = calloc((size_t)t->n, 1);
    double c = 1.0;
    if (!inner) {
        for (int v = 1; v < t->n; v++) {   /* no memory: the same sum, quadratic */
            int leaf = 1;
            for (int u = v + 1; u < t->n && leaf; u++)
                leaf = t->parent[u] != v;
            c += leaf ? reach[v] : 0.0;
        }
        return c;
    }
    for (int v = 1; v < t->n; v++)
        inner[t->parent[v]] = 1;
    for (int v = 1; v < t->n; v++)
        if (!inner[v])
            c += reach[v];
    free(inner);
    return c;
}

int sq_hw_catchup(const sq_tree *t, const sq_curve *c, double *catchup, sq_error *err)
{
    double *f = malloc((size_t)t->n * sizeof *f);
    if (!f)
        return sq_error_oom(err, "catch-up");
    sq_tree_expected_tokens(t, c, f);
    *catchup = sq_hw_catchup_of(t, f);
    free(f);
    return SQ_OK;
}

int sq_hw_step_ms_runtime(const sq_hw_params *prm, const sq_tree *t, double catchup, double *ms,
                          sq_error *err)
{
    int levels = sq_tree_depth(t);
    int *k = calloc((size_t)levels, sizeof *k);
    char *inner = calloc((size_t)t->n, 1);
    if (!k || !inner) {
        free(k);
        free(inner);
        return sq_error_oom(err, "level counts");
    }
    for (int v = 1; v < t->n; v++)
        inner[t->parent[v]] = 1;
    for (int v = 1; v < t->n; v++)
        k[t->depth[v]] += inner[v];
    step_shape sh = {levels, catchup, k};
    int rc = step_cost(prm, t->n, &sh, 1, ms, err);
    free(k);
    free(inner);
    return rc;
}

int sq_hw_forward_ms(const sq_hw_params *prm, sq_step_part part, int batch, double x,
                     double *ms, sq_error *err)
{
    const char *tname = prm->target_file ? prm->target_file : "target profile";
    const char *dname = prm->draft_file ? prm->draft_file : "draft profile";
    int draft = part == SQ_STEP_DRAFT_FIRST || part == SQ_STEP_DRAFT_LEVEL;
    if (part == SQ_STEP_EXPAND) {
        /* one node's expansion, whatever the batch (each sequence expands its own nodes);
         * without a step section, or a section from before the part: not priced */
        if (!prm->target->step) {
            *ms = 0.0;
            return SQ_OK;
        }
        return step_part_ms(prm, part, NULL, NULL, x, SQ_EXTRAPOLATE_LINEAR, ms, err);
    }
    if (batch == 1 && prm->target->step)
        return step_part_ms(prm, part, draft ? prm->draft : prm->target, draft ? dname : tname, x,
                            part == SQ_STEP_DRAFT_FIRST ? SQ_EXTRAPOLATE_CONSTANT
                            : part == SQ_STEP_OVERHEAD ? SQ_EXTRAPOLATE_LINEAR : prm->extrapolate,
                            ms, err);
    if (part == SQ_STEP_OVERHEAD) {
        *ms = 0.0;
        return SQ_OK;
    }
    const sq_profile *p = draft ? prm->draft : prm->target;
    if (!p) {
        if (!draft)
            return sq_error_set(err, SQ_EUSAGE, "no target profile");
        *ms = prm->draft_ms;   /* the fixed model's cost per draft forward */
        return SQ_OK;
    }
    sq_error e = {0};
    int rc = sq_profile_ms_batch(p, batch, x, prm->extrapolate, ms, &e);
    if (rc && err && err->status == SQ_OK)
        err->cause = e.cause;
    if (rc)
        return sq_error_set(err, rc, "%s: %s", draft ? dname : tname, e.msg);
    return SQ_OK;
}

/* ---- credibility (hardware.h) --------------------------------------------------------------- */

static int check_falls(const sq_profile *p, const char *file, const char *what, sq_error *err)
{
    sq_profile_fall f[8];
    int n = sq_profile_falls(p, SQ_PROFILE_FALL_TOL, SQ_FALLS_FROM_FIRST, f, 8);
    if (n == 0)
        return SQ_OK;
    char text[1024];
    sq_profile_falls_text(f, n < 8 ? n : 8, text, sizeof text);
    if (n > 8) {
        size_t len = strlen(text);
        snprintf(text + len, sizeof text - len, " and %d more", n - 8);
    }
    return sq_error_set(err, SQ_EDATA, "%s: %snot physically credible: %s; a forward of more "
                        "tokens cannot be faster than one token beyond %.0f%% and the points' "
                        "noise. The profile was likely taken under load: measure it again on a "
                        "quiet machine, or pass --trust-profiles to plan from it anyway", file,
                        what, text, 100 * SQ_PROFILE_FALL_TOL);
}

int sq_hw_check_profile(const sq_profile *p, const char *file, sq_error *err)
{
    int rc = check_falls(p, file, "", err);
    if (rc || !p->step)
        return rc;
    sq_profile view = {.n = p->step->n[SQ_STEP_TARGET], .points = p->step->pts[SQ_STEP_TARGET]};
    return view.n ? check_falls(&view, file, "step.target: ", err) : SQ_OK;
}

int sq_hw_check_prediction(const sq_hw_params *prm, int n, double F, double speedup,
                           sq_error *err)
{
    if (!(speedup > F * (1 + SQ_PROFILE_FALL_TOL)))
        return SQ_OK;
    const char *tname = prm->target_file ? prm->target_file : "target profile";
    double t1 = NAN, tn = NAN;
    sq_profile_ms(prm->target, 1, prm->extrapolate, &t1, NULL);
    sq_profile_ms(prm->target, n, prm->extrapolate, &tn, NULL);
    return sq_error_set(err, SQ_EDATA, "%s%s%s: not physically credible: a predicted speedup of "
                        "%.3gx with %.4g tokens/step at %d tokens (t(%d) = %.4g ms, t(1) = %.4g "
                        "ms) exceeds tokens/step x %.2f; a step costs at least one forward of "
                        "the target, which cannot be cheaper than one token's. Measure the "
                        "profiles again on a quiet machine, or pass --trust-profiles", tname,
                        prm->draft ? ", " : "", prm->draft ? (prm->draft_file ? prm->draft_file
                        : "draft profile") : "", speedup, F, n, n, tn, t1,
                        1 + SQ_PROFILE_FALL_TOL);
}

/* The draft the target profile's step section was measured with against the draft profile's
 * model: the same shape, or SQ_EDATA. */
static int check_step_draft(const sq_hw_params *prm, sq_error *err)
{
    if (!prm->target->step || !prm->target->step->draft || !prm->draft || !prm->draft->model)
        return SQ_OK;
    static const char *const keys[] = {"dim", "hidden_dim", "n_layers", "n_heads", "n_kv_heads",
                                       "vocab_size"};
    for (size_t i = 0; i < sizeof keys / sizeof *keys; i++) {
        const cJSON *a = cJSON_GetObjectItemCaseSensitive(prm->target->step->draft, keys[i]);
        const cJSON *b = cJSON_GetObjectItemCaseSensitive(prm->draft->model, keys[i]);
        if (cJSON_IsNumber(a) && cJSON_IsNumber(b) && a->valuedouble != b->valuedouble)
            return sq_error_set(err, SQ_EDATA, "%s: step.draft.%s is %g but %s's model.%s is %g: "
                                "the step costs were measured with another draft (measure them "
                                "with sequoia-profile --draft for this pair)",
                                prm->target_file ? prm->target_file : "target profile", keys[i],
                                a->valuedouble, prm->draft_file ? prm->draft_file
                                : "the draft profile", keys[i], b->valuedouble);
    }
    return SQ_OK;
}

static int measured(const sq_profile *p, int n)
{
    for (int i = 0; i < p->n; i++)
        if (p->points[i].tokens == n)
            return 1;
    return 0;
}

void sq_hw_result_free(sq_hw_result *r)
{
    if (!r)
        return;
    free(r->speedup_table);
    free(r->runtime_speedup_table);
    free(r);
}

int sq_hw_select(sq_dp *dp, const sq_hw_params *prm, sq_hw_result **out, sq_error *err)
{
    *out = NULL;
    SQ_ASSERT(prm->target);
    if (!prm->draft && (!isfinite(prm->draft_ms) || prm->draft_ms < 0))
        return sq_error_set(err, SQ_EUSAGE, "draft_ms: must be a finite time >= 0");
    sq_hw_result *r = calloc(1, sizeof *r);
    if (!r)
        return sq_error_oom(err, "hardware selection");
    r->N = sq_dp_budget(dp);
    r->D = sq_dp_depth(dp);
    size_t cells = (size_t)(r->N + 1) * (size_t)(r->D + 1);
    r->speedup_table = malloc(cells * sizeof *r->speedup_table);
    r->runtime_speedup_table = malloc(cells * sizeof *r->runtime_speedup_table);
    double *reach = malloc((size_t)(r->N + 1) * sizeof *reach);
    if (!r->speedup_table || !r->runtime_speedup_table || !reach) {
        free(reach);
        sq_hw_result_free(r);
        return sq_error_oom(err, "hardware selection");
    }
    for (size_t i = 0; i < cells; i++)
        r->speedup_table[i] = r->runtime_speedup_table[i] = NAN;
    const sq_curve *curve = sq_dp_curve(dp);
    int rc;
    if ((rc = check_step_draft(prm, err)) ||
        (!prm->trust &&
         ((rc = sq_hw_check_profile(prm->target, prm->target_file ? prm->target_file
                                                                   : "target profile", err)) ||
          (prm->draft && (rc = sq_hw_check_profile(prm->draft, prm->draft_file ? prm->draft_file
                                                                 : "draft profile", err))))))
        goto fail;
    if (prm->target->step) {
        /* plain decoding as the step section measured it: the forward and the commit */
        double o1;
        rc = step_part_ms(prm, SQ_STEP_TARGET, prm->target, prm->target_file ? prm->target_file
                          : "target profile", 1, prm->extrapolate, &r->target1_ms, err);
        if (!rc && !(rc = step_part_ms(prm, SQ_STEP_OVERHEAD, NULL, NULL, 1,
                                       SQ_EXTRAPOLATE_LINEAR, &o1, err)))
            r->target1_ms += o1;
    } else {
        rc = profile_ms(prm->target, prm->target_file ? prm->target_file : "target profile", 1,
                        prm->extrapolate, &r->target1_ms, err);
    }
    if (rc)
        goto fail;
    double best_rate = -1;
    /* depth outer: a depth-dependent DP re-solves at most once per depth */
    for (int d = 1; d <= r->D; d++) {
        for (int n = 1; n <= r->N; n++) {
            if ((prm->measured_sizes_only && !measured(prm->target, n)) ||
                (prm->budget_only && (n != r->N || d != r->D)))
                continue;
            double F = sq_dp_best(dp, n, d);
            if (!isfinite(F))
                continue;
            sq_tree *t;
            if ((rc = sq_dp_tree(dp, n, d, &t, err)))
                goto fail;
            double step, rstep = 0, catchup = 0;
            rc = sq_hw_step_ms(prm, t, F, &step, err);
            if (!rc) {   /* sequoia-run's model of the same tree */
                sq_tree_expected_tokens(t, curve, reach);
                catchup = sq_hw_catchup_of(t, reach);
                rc = sq_hw_step_ms_runtime(prm, t, catchup, &rstep, err);
            }
            int levels = sq_tree_depth(t);
            sq_tree_free(t);
            if (rc)
                goto fail;
            /* the rate the choice maximises: the model params.cost_model names */
            double rate = prm->cost_model == SQ_COST_SEQUOIA_RUN ? F / rstep : F / step;
            r->speedup_table[(size_t)n * (size_t)(r->D + 1) + (size_t)d] = F / step *
                                                                            r->target1_ms;
            r->runtime_speedup_table[(size_t)n * (size_t)(r->D + 1) + (size_t)d] =
                F / rstep * r->target1_ms;
            /* strict: ties keep the smaller n (scanned first within a depth) and, across
             * depths, the smaller depth */
            if (rate > best_rate || (rate == best_rate && n < r->n)) {
                best_rate = rate;
                r->n = n;
                r->d = d;
                r->levels = levels;
                r->expected_tokens = F;
                r->step_ms = step;
                r->runtime_step_ms = rstep;
                r->runtime_catchup = catchup;
            }
        }
    }
    if (best_rate < 0) {
        rc = sq_error_set(err, SQ_EUSAGE, "no candidate tree: the target profile measures no size "
                          "within the budget");
        goto fail;
    }
    r->speedup = r->expected_tokens * r->target1_ms / r->step_ms;
    r->runtime_speedup = r->expected_tokens * r->target1_ms / r->runtime_step_ms;
    if (!prm->trust &&
        (rc = sq_hw_check_prediction(prm, r->n, r->expected_tokens,
                                     prm->cost_model == SQ_COST_SEQUOIA_RUN ? r->runtime_speedup
                                                                            : r->speedup, err)))
        goto fail;
    free(reach);
    *out = r;
    return SQ_OK;
fail:
    free(reach);
    sq_hw_result_free(r);
    return rc;
}

cJSON *sq_hw_to_json(const sq_hw_result *r, const sq_hw_params *prm, const char *target_file,
                     const char *draft_file)
{
    sq_json_build b = sq_json_build_begin();
    cJSON *o = cJSON_CreateObject();
    sq_json_add(o, "target_profile", target_file ? cJSON_CreateString(target_file) : cJSON_CreateNull());
    sq_json_add(o, "target_device", cJSON_CreateString(prm->target->device));
    sq_json_add(o, "target_backend", cJSON_CreateString(prm->target->backend));
    sq_json_add(o, "draft_profile", draft_file && prm->draft ? cJSON_CreateString(draft_file)
                                                             : cJSON_CreateNull());
    sq_json_add(o, "draft_ms", prm->draft ? cJSON_CreateNull() : cJSON_CreateNumber(prm->draft_ms));
    sq_json_add(o, "draft_cost_model",
                cJSON_CreateString(prm->target->step
                                   ? "in-step: T(n) + D_first(F) + sum_{l=1..L-2} D_level(w_l) "
                                     "+ O(n), from the target profile's step section"
                                   : prm->draft ? "per-level: t_target(n) + t_draft(F) + "
                                                  "sum_{l=1..L-2} t_draft(w_l)"
                                                : "fixed: t_target(n) + L * draft_ms"));
    if (prm->trust)
        sq_json_add(o, "trusted", cJSON_CreateTrue());
    if (prm->cost_model == SQ_COST_SEQUOIA_RUN)   /* which model chose (docs/formats.md) */
        sq_json_add(o, "chosen_by", cJSON_CreateString(sq_cost_model_name(prm->cost_model)));
    sq_json_add(o, "candidates", cJSON_CreateString(prm->budget_only ? "the budget's tree"
                                                    : prm->measured_sizes_only ? "measured sizes"
                                                                               : "all sizes"));
    const char *ex[] = {"none", "linear", "constant"};
    sq_json_add(o, "extrapolate", cJSON_CreateString(ex[prm->extrapolate]));
    sq_json_add(o, "search_budget", cJSON_CreateNumber(r->N));
    sq_json_add(o, "search_depth", cJSON_CreateNumber(r->D));
    /* the batch size the profile priced (its smallest; docs/formats.md): written when it is not
     * 1, so that sequoia-run compares like with like (tokens_per_second is per sequence) */
    int pb = prm->target->n > 0 ? prm->target->points[0].batch : 1;
    if (pb != 1)
        sq_json_add(o, "batch", cJSON_CreateNumber(pb));
    sq_json_add(o, "target_ms_1", cJSON_CreateNumber(r->target1_ms));
    sq_json_add(o, "time_per_step_ms", cJSON_CreateNumber(r->step_ms));
    sq_json_add(o, "time_per_token_ms", cJSON_CreateNumber(r->step_ms / r->expected_tokens));
    sq_json_add(o, "tokens_per_second", cJSON_CreateNumber(1e3 * r->expected_tokens / r->step_ms));
    sq_json_add(o, "predicted_speedup", cJSON_CreateNumber(r->speedup));
    /* sequoia-run's model of the same tree (hardware.h; docs/formats.md) */
    cJSON *rt = cJSON_CreateObject();
    sq_json_add(o, SQ_PLAN_HW_RUNTIME, rt);
    sq_json_add(rt, "cost_model", cJSON_CreateString(
        prm->target->step ? "in-step: T(n) + O(n) + D_first(c) + sum_{l=1..L-2} D_level(i_l), "
                            "c = 1 + P(the accepted path ends at a leaf), i_l = the nodes of "
                            "level l with children"
        : prm->draft ? "per-level: t_target(n) + t_draft(c) + sum_{l=1..L-2} t_draft(i_l)"
                     : "fixed: t_target(n) + (L - 1) * draft_ms"));
    sq_json_add(rt, "draft_catchup_tokens", cJSON_CreateNumber(r->runtime_catchup));
    sq_json_add(rt, "time_per_step_ms", cJSON_CreateNumber(r->runtime_step_ms));
    sq_json_add(rt, "time_per_token_ms",
                cJSON_CreateNumber(r->runtime_step_ms / r->expected_tokens));
    sq_json_add(rt, "tokens_per_second",
                cJSON_CreateNumber(1e3 * r->expected_tokens / r->runtime_step_ms));
    sq_json_add(rt, "predicted_speedup", cJSON_CreateNumber(r->runtime_speedup));
    return sq_json_build_end(b, o);
}

static void print_table(FILE *fp, const sq_hw_result *r, const double *table, const char *title)
{
    /* columns: every depth up to 12, then about 8 more spread to D */
    int cols[64], nc = 0;
    for (int d = 1; d <= r->D && d <= 12; d++)
        cols[nc++] = d;
    if (r->D > 12) {
        int step = (r->D - 12 + 7) / 8;
        for (int d = 12 + step; d < r->D && nc < 62; d += step)
            cols[nc++] = d;
        cols[nc++] = r->D;
    }
    /* rows: powers of two, the budget and the choice */
    int rows[64], nr = 0;
    for (int n = 1; n <= r->N && nr < 60; n *= 2)
        rows[nr++] = n;
    if (rows[nr - 1] != r->N)
        rows[nr++] = r->N;
    int have = 0;
    for (int i = 0; i < nr; i++)
        have |= rows[i] == r->n;
    if (!have) {
        int i = nr++;
        while (i > 0 && rows[i - 1] > r->n) {
            rows[i] = rows[i - 1];
            i--;
        }
        rows[i] = r->n;
    }
    fprintf(fp, "%s by size (rows) and depth bound (columns):\n%6s", title, "n\\d");
    for (int c = 0; c < nc; c++)
        fprintf(fp, " %6d", cols[c]);
    fputc('\n', fp);
    for (int i = 0; i < nr; i++) {
        fprintf(fp, "%6d", rows[i]);
        for (int c = 0; c < nc; c++) {
            double s = table[(size_t)rows[i] * (size_t)(r->D + 1) + (size_t)cols[c]];
            int mark = rows[i] == r->n && cols[c] == r->d;
            if (isnan(s))
                fprintf(fp, " %6s", "-");
            else
                fprintf(fp, " %5.2f%c", s, mark ? '*' : ' ');
        }
        fputc('\n', fp);
    }
}

void sq_hw_print_table(FILE *fp, const sq_hw_result *r)
{
    print_table(fp, r, r->speedup_table, "predicted speedup");
    print_table(fp, r, r->runtime_speedup_table, "sequoia-run's predicted speedup");
}
