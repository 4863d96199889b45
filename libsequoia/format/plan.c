#include "libsequoia/format/plan.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "libsequoia/base/io.h"
#include "libsequoia/base/json.h"
#include "libsequoia/format/mode.h"

int sq_plan_new(sq_tree *tree, const sq_curve *curve, int budget, int depth_limit, int width,
                sq_plan **out, sq_error *err)
{
    *out = NULL;
    sq_plan *p = calloc(1, sizeof *p);
    if (!p) {
        sq_tree_free(tree);
        return sq_error_oom(err, "plan");
    }
    p->tree = tree;
    int rc = sq_curve_copy(&p->acceptance, curve, err);
    if (rc) {
        sq_tree_free(tree);
        free(p);
        return rc;
    }
    if ((rc = sq_tree_score(tree, curve, &p->expected_tokens, err))) {
        sq_plan_free(p);
        return rc;
    }
    snprintf(p->rank_semantics, sizeof p->rank_semantics, "%s", sq_curve_rank_semantics(curve));
    p->budget = budget;
    p->depth_limit = depth_limit;
    p->width = width;
    *out = p;
    return SQ_OK;
}

void sq_plan_free(sq_plan *p)
{
    if (!p)
        return;
    sq_tree_free(p->tree);
    sq_curve_clear(&p->acceptance);
    cJSON_Delete(p->hardware);
    free(p);
}

cJSON *sq_plan_to_json(const sq_plan *p)
{
    const sq_tree *t = p->tree;
    int levels = sq_tree_depth(t);
    sq_json_build b = sq_json_build_begin();
    int *widths = sq_json_scratch((size_t)levels * sizeof *widths);
    double *scores = sq_json_scratch((size_t)t->n * sizeof *scores);
    if (!widths || !scores) {
        cJSON_free(widths);
        cJSON_free(scores);
        return sq_json_build_end(b, NULL);
    }
    sq_tree_level_widths(t, widths);
    sq_tree_expected_tokens(t, &p->acceptance, scores);

    cJSON *o = cJSON_CreateObject();
    sq_json_add(o, "format", cJSON_CreateString(SQ_PLAN_FORMAT));
    sq_json_add(o, "version", cJSON_CreateNumber(SQ_PLAN_VERSION));
    sq_json_add(o, "size", cJSON_CreateNumber(t->n));
    sq_json_add(o, "depth", cJSON_CreateNumber(levels));
    sq_json_add(o, "expected_tokens", cJSON_CreateNumber(p->expected_tokens));
    sq_json_add(o, "rank_semantics", cJSON_CreateString(p->rank_semantics));
    cJSON *solver = cJSON_CreateObject();
    sq_json_add(solver, "budget", p->budget ? cJSON_CreateNumber(p->budget) : cJSON_CreateNull());
    sq_json_add(solver, "depth_limit",
                p->depth_limit ? cJSON_CreateNumber(p->depth_limit) : cJSON_CreateNull());
    sq_json_add(solver, "width", p->width ? cJSON_CreateNumber(p->width) : cJSON_CreateNull());
    sq_json_add(o, "solver", solver);
    sq_json_add(o, "level_widths", sq_json_int_array(widths, (size_t)levels));
    cJSON *nodes = cJSON_CreateObject();
    sq_json_add(nodes, "parent", sq_json_int_array(t->parent, (size_t)t->n));
    sq_json_add(nodes, "rank", sq_json_int_array(t->rank, (size_t)t->n));
    sq_json_add(nodes, "depth", sq_json_int_array(t->depth, (size_t)t->n));
    sq_json_add(nodes, "score", sq_json_number_array(scores, (size_t)t->n));
    sq_json_add(o, "nodes", nodes);
    sq_json_add(o, "acceptance", sq_curve_to_json(&p->acceptance));
    sq_json_add(o, "hardware", p->hardware ? cJSON_Duplicate(p->hardware, 1) : cJSON_CreateNull());
    cJSON_free(widths);
    cJSON_free(scores);
    return sq_json_build_end(b, o);
}

int sq_plan_save(const char *file, const sq_plan *p, sq_error *err)
{
    cJSON *o = sq_plan_to_json(p);
    int rc = sq_json_save(file, o, err);
    cJSON_Delete(o);
    return rc;
}

static int int_array(const cJSON *nodes, const char *key, int n, long long lo, long long hi,
                     int *out, const char *file, sq_error *err)
{
    const cJSON *a = sq_json_field(nodes, key);
    if (!cJSON_IsArray(a))
        return sq_error_set(err, SQ_EDATA, "%s: nodes.%s: missing or not an array", file, key);
    int len = cJSON_GetArraySize(a);
    if (len != n)
        return sq_error_set(err, SQ_EDATA, "%s: nodes.%s: has %d entries, size is %d", file, key,
                            len, n);
    int i = 0;
    for (const cJSON *e = a->child; e; e = e->next, i++) {
        double v = cJSON_IsNumber(e) ? e->valuedouble : NAN;
        if (!isfinite(v) || v != floor(v) || v < (double)lo || v > (double)hi)
            return sq_error_set(err, SQ_EDATA, "%s: nodes.%s[%d]: expected an integer in [%lld, %lld]",
                                file, key, i, lo, hi);
        out[i] = (int)v;
    }
    return SQ_OK;
}
/* The members a writer derives from the nodes and the curve (sq_plan_to_json), checked when
 * present so that a plan never carries widths or scores its tree does not have: level_widths
 * (the nodes per level) exactly, nodes.score (f(v)) within SQ_PLAN_F_TOL. */
static int check_derived(const cJSON *root, const cJSON *nodes, const sq_plan *p,
                         const char *file, sq_error *err)
{
    const sq_tree *t = p->tree;
    const int levels = sq_tree_depth(t);
    const cJSON *lw = sq_json_field(root, "level_widths");
    const cJSON *sc = sq_json_field(nodes, "score");
    if (!lw && !sc)
        return SQ_OK;
    int *w = malloc((size_t)levels * sizeof *w);
    double *f = malloc((size_t)t->n * sizeof *f);
    int rc = SQ_OK;
    if (!w || !f) {
        rc = sq_error_oom(err, "a plan's check");
        goto done;
    }
    sq_tree_level_widths(t, w);
    sq_tree_expected_tokens(t, &p->acceptance, f);
    if (lw) {
        if (!cJSON_IsArray(lw) || cJSON_GetArraySize(lw) != levels) {
            rc = sq_error_set(err, SQ_EDATA, "%s: level_widths: expected an array of %d integers "
                              "(one per level of the nodes)", file, levels);
            goto done;
        }
        int i = 0;
        for (const cJSON *e = lw->child; e; e = e->next, i++)
            if (!cJSON_IsNumber(e) || e->valuedouble != (double)w[i]) {
                rc = sq_error_set(err, SQ_EDATA, "%s: level_widths[%d]: the nodes have %d at "
                                  "level %d", file, i, w[i], i);
                goto done;
            }
    }
    if (sc) {
        if (!cJSON_IsArray(sc) || cJSON_GetArraySize(sc) != t->n) {
            rc = sq_error_set(err, SQ_EDATA, "%s: nodes.score: expected an array of %d numbers "
                              "(one per node)", file, t->n);
            goto done;
        }
        int i = 0;
        for (const cJSON *e = sc->child; e; e = e->next, i++)
            if (!cJSON_IsNumber(e)) {
                rc = sq_error_set(err, SQ_EDATA, "%s: nodes.score[%d]: not a number", file, i);
                goto done;
            } else if (!(fabs(e->valuedouble - f[i]) <= SQ_PLAN_F_TOL)) {
                rc = sq_error_set(err, SQ_EDATA, "%s: nodes.score[%d]: %.17g, but the nodes and "
                                  "the acceptance curve give %.17g", file, i, e->valuedouble,
                                  f[i]);
                goto done;
            }
    }
done:
    free(w);
    free(f);
    return rc;
}

/* The "hardware" object (planner/hardware.c's sq_hw_to_json), checked before it is copied
 * into a plan (issue 27 W13): its known members have their types and ranges, so that a report
 * or a summary never repeats a speedup of -3 or a time of "fast". Other members are kept. */
static int check_hardware(const cJSON *hw, const char *file, sq_error *err)
{
    static const char *const positive[] = {"target_ms_1", "time_per_step_ms", "time_per_token_ms",
                                           "tokens_per_second", "predicted_speedup"};
    for (size_t i = 0; i < sizeof positive / sizeof positive[0]; i++) {
        const cJSON *v = sq_json_field(hw, positive[i]);
        if (v && (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || !(v->valuedouble > 0)))
            return sq_error_set(err, SQ_EDATA, "%s: hardware.%s: expected a finite number > 0",
                                file, positive[i]);
    }
    const cJSON *dm = sq_json_field(hw, "draft_ms");
    if (dm && !cJSON_IsNull(dm) &&
        (!cJSON_IsNumber(dm) || !isfinite(dm->valuedouble) || dm->valuedouble < 0))
        return sq_error_set(err, SQ_EDATA, "%s: hardware.draft_ms: expected a finite number >= 0 "
                            "or null", file);
    static const char *const counts[] = {"search_budget", "search_depth"};
    for (size_t i = 0; i < 2; i++) {
        const cJSON *v = sq_json_field(hw, counts[i]);
        if (v && (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) ||
                  v->valuedouble < 1 || v->valuedouble > SQ_PLAN_MAX_NODES))
            return sq_error_set(err, SQ_EDATA, "%s: hardware.%s: expected an integer in [1, %d]",
                                file, counts[i], SQ_PLAN_MAX_NODES);
    }
    static const char *const strings[] = {"target_profile", "target_device", "target_backend",
                                          "draft_profile", "draft_cost_model", "candidates",
                                          "extrapolate"};
    for (size_t i = 0; i < sizeof strings / sizeof strings[0]; i++) {
        const cJSON *v = sq_json_field(hw, strings[i]);
        if (v && !cJSON_IsNull(v) && !cJSON_IsString(v))
            return sq_error_set(err, SQ_EDATA, "%s: hardware.%s: expected a string or null", file,
                                strings[i]);
    }
    return sq_plan_check_runtime_cost(hw, file, err);
}

int sq_plan_check_runtime_cost(const cJSON *hw, const char *file, sq_error *err)
{
    /* which cost model chose, and the batch size the figures price (docs/formats.md) */
    const cJSON *by = sq_json_field(hw, "chosen_by"), *pb = sq_json_field(hw, "batch");
    if (by && !(cJSON_IsString(by) && (!strcmp(by->valuestring, "engine") ||
                                       !strcmp(by->valuestring, "sequoia-run"))))
        return sq_error_set(err, SQ_EDATA, "%s: hardware.chosen_by: expected \"engine\" or "
                            "\"sequoia-run\"", file);
    if (pb && !(cJSON_IsNumber(pb) && pb->valuedouble == floor(pb->valuedouble) &&
                pb->valuedouble >= 1 && pb->valuedouble <= 1 << 20))
        return sq_error_set(err, SQ_EDATA, "%s: hardware.batch: expected an integer in [1, %d]",
                            file, 1 << 20);
    const cJSON *rt = sq_json_field(hw, SQ_PLAN_HW_RUNTIME), *x;
    if (!rt)
        return SQ_OK;
    if (!cJSON_IsObject(rt))
        return sq_error_set(err, SQ_EDATA, "%s: hardware." SQ_PLAN_HW_RUNTIME ": expected an "
                            "object", file);
    /* the figures the planners write there (planner/hardware.c, planner/ladder.c,
     * planner/sequoia-plan.c; docs/formats.md): numbers, never "fast" or [] */
    static const char *const figures[] = {"draft_catchup_tokens", "time_per_step_ms",
                                          "time_per_token_ms", "tokens_per_second",
                                          "predicted_speedup", "speedup", "round_ms",
                                          "round_target_ms", "round_draft_ms"};
    cJSON_ArrayForEach(x, rt) {
        int text = strcmp(x->string, "cost_model") == 0 || strcmp(x->string, "cost_per_round") == 0;
        int positive = strcmp(x->string, "tokens_per_second") == 0 ||
                       strcmp(x->string, "predicted_speedup") == 0;
        int figure = 0;
        for (size_t i = 0; i < sizeof figures / sizeof figures[0]; i++)
            figure |= strcmp(x->string, figures[i]) == 0;
        if (text && !cJSON_IsString(x))
            return sq_error_set(err, SQ_EDATA, "%s: hardware." SQ_PLAN_HW_RUNTIME ".%s: expected "
                                "a string", file, x->string);
        if (figure && !cJSON_IsNumber(x))
            return sq_error_set(err, SQ_EDATA, "%s: hardware." SQ_PLAN_HW_RUNTIME ".%s: expected "
                                "a finite number %s 0", file, x->string, positive ? ">" : ">=");
        if (cJSON_IsNumber(x) && (!isfinite(x->valuedouble) || x->valuedouble < 0 ||
                                  (positive && !(x->valuedouble > 0))))
            return sq_error_set(err, SQ_EDATA, "%s: hardware." SQ_PLAN_HW_RUNTIME ".%s: %.17g, "
                                "expected a finite number %s 0", file, x->string, x->valuedouble,
                                positive ? ">" : ">=");
    }
    return SQ_OK;
}


int sq_plan_from_json(const cJSON *root, const char *file, sq_plan **out, sq_error *err)
{
    *out = NULL;
    if (!cJSON_IsObject(root))
        return sq_error_set(err, SQ_EDATA, "%s: expected a JSON object at the top level", file);
    const char *format = NULL, *sem = NULL;
    long long version = 0, size = 0, depth = 0;
    double f = 0;
    int rc;
    if ((rc = sq_json_get_string(root, "format", 1, &format, file, "", err)))
        return rc;
    if (strcmp(format, SQ_PLAN_FORMAT) != 0)
        return sq_error_set(err, SQ_EDATA, "%s: format: \"%s\" is not \"%s\"", file, format,
                            SQ_PLAN_FORMAT);
    if ((rc = sq_json_get_int(root, "version", 1, 0, 1LL << 31, &version, file, "", err)))
        return rc;
    if (version != SQ_PLAN_VERSION)
        return sq_error_set(err, SQ_EDATA, "%s: version: %lld is not supported (this build reads "
                            "version %d)", file, version, SQ_PLAN_VERSION);
    if ((rc = sq_json_get_int(root, "size", 1, 1, SQ_PLAN_MAX_NODES, &size, file, "", err)) ||
        (rc = sq_json_get_int(root, "depth", 1, 1, SQ_PLAN_MAX_NODES, &depth, file, "", err)) ||
        (rc = sq_json_get_number(root, "expected_tokens", 1, &f, file, "", err)) ||
        (rc = sq_json_get_string(root, "rank_semantics", 1, &sem, file, "", err)))
        return rc;
    if (!sq_mode_rank_semantics_known(sem))
        return sq_error_set(err, SQ_EDATA, "%s: rank_semantics: unknown value \"%s\"", file, sem);
    const cJSON *nodes = sq_json_field(root, "nodes");
    if (!cJSON_IsObject(nodes))
        return sq_error_set(err, SQ_EDATA, "%s: nodes: missing or not an object", file);
    const cJSON *acc = sq_json_field(root, "acceptance");
    if (!acc)
        return sq_error_set(err, SQ_EDATA, "%s: acceptance: missing", file);

    sq_plan *p = calloc(1, sizeof *p);
    if (!p || !(p->tree = sq_tree_new((int)size))) {
        free(p);
        return sq_error_oom(err, "plan");
    }
    snprintf(p->rank_semantics, sizeof p->rank_semantics, "%s", sem);
    char where[600];
    snprintf(where, sizeof where, "%s: nodes", file);
    if ((rc = int_array(nodes, "parent", (int)size, -1, size - 1, p->tree->parent, file, err)) ||
        (rc = int_array(nodes, "rank", (int)size, 0, size, p->tree->rank, file, err)) ||
        (rc = int_array(nodes, "depth", (int)size, 0, size, p->tree->depth, file, err)) ||
        (rc = sq_tree_validate(p->tree, where, err)) ||
        (rc = sq_curve_from_json(acc, file, "acceptance", &p->acceptance, err)))
        goto fail;
    if (sq_tree_depth(p->tree) != depth) {
        rc = sq_error_set(err, SQ_EDATA, "%s: depth: %lld, but the nodes span %d levels", file, depth,
                          sq_tree_depth(p->tree));
        goto fail;
    }
    if ((rc = sq_tree_score(p->tree, &p->acceptance, &p->expected_tokens, err)))
        goto fail;
    if (fabs(p->expected_tokens - f) > SQ_PLAN_F_TOL) {
        rc = sq_error_set(err, SQ_EDATA, "%s: expected_tokens: %.17g, but the nodes and the "
                          "acceptance curve give %.17g", file, f, p->expected_tokens);
        goto fail;
    }
    if ((rc = check_derived(root, nodes, p, file, err)))
        goto fail;
    const cJSON *solver = sq_json_field(root, "solver");
    if (solver) {
        long long b = 0, d = 0, w = 0;
        if ((rc = sq_json_get_int(solver, "budget", 0, 1, SQ_PLAN_MAX_NODES, &b, file, "solver", err)) ||
            (rc = sq_json_get_int(solver, "depth_limit", 0, 1, SQ_PLAN_MAX_NODES, &d, file, "solver", err)) ||
            (rc = sq_json_get_int(solver, "width", 0, 1, SQ_PLAN_MAX_NODES, &w, file, "solver", err)))
            goto fail;
        p->budget = (int)b;
        p->depth_limit = (int)d;
        p->width = (int)w;
    }
    const cJSON *hw = sq_json_field(root, "hardware");
    if (hw) {
        if (!cJSON_IsObject(hw)) {
            rc = sq_error_set(err, SQ_EDATA, "%s: hardware: expected an object or null", file);
            goto fail;
        }
        if ((rc = check_hardware(hw, file, err)))
            goto fail;
        if (!(p->hardware = cJSON_Duplicate(hw, 1))) {
            rc = sq_error_oom(err, "plan");
            goto fail;
        }
    }
    *out = p;
    return SQ_OK;
fail:
    sq_plan_free(p);
    return rc;
}

int sq_plan_load(const char *file, sq_plan **out, sq_error *err)
{
    cJSON *root;
    *out = NULL;
    int rc = sq_json_load(file, &root, err);
    if (rc)
        return rc;
    rc = sq_plan_from_json(root, file, out, err);
    cJSON_Delete(root);
    return rc;
}
