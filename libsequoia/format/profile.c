#include "libsequoia/format/profile.h"

#include <ctype.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "libsequoia/base/io.h"
#include "libsequoia/base/json.h"
#include "libsequoia/base/utf8.h"

int sq_extrapolate_parse(const char *s)
{
    if (!strcmp(s, "none"))
        return SQ_EXTRAPOLATE_NONE;
    if (!strcmp(s, "linear"))
        return SQ_EXTRAPOLATE_LINEAR;
    if (!strcmp(s, "constant"))
        return SQ_EXTRAPOLATE_CONSTANT;
    return -1;
}

static const char *const step_part_names[SQ_STEP_PARTS] = {"target", "draft_first",
                                                           "draft_level", "overhead", "expand"};

const char *sq_step_part_name(sq_step_part part)
{
    return part >= 0 && part < SQ_STEP_PARTS ? step_part_names[part] : "?";
}

static void step_free(sq_profile_step *s)
{
    if (!s)
        return;
    cJSON_Delete(s->draft);
    for (int k = 0; k < SQ_STEP_PARTS; k++)
        free(s->pts[k]);
    free(s);
}

static sq_profile_step *step_copy(const sq_profile_step *s)
{
    sq_profile_step *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    int ok = !s->draft || (c->draft = cJSON_Duplicate(s->draft, 1));
    c->context_mean = s->context_mean;
    c->context_min = s->context_min;
    c->context_max = s->context_max;
    for (int k = 0; k < SQ_STEP_PARTS && ok; k++) {
        c->n[k] = s->n[k];
        if (s->n[k] && (ok = !!(c->pts[k] = malloc((size_t)s->n[k] * sizeof *c->pts[k]))))
            memcpy(c->pts[k], s->pts[k], (size_t)s->n[k] * sizeof *c->pts[k]);
    }
    if (!ok) {
        step_free(c);
        return NULL;
    }
    return c;
}

void sq_profile_free(sq_profile *p)
{
    if (!p)
        return;
    step_free(p->step);
    free(p->device);
    free(p->backend);
    free(p->dtype);
    cJSON_Delete(p->model);
    free(p->points);
    free(p);
}

int sq_profile_validate(const sq_profile *p, const char *file, sq_error *err)
{
    if (p->n < 1)
        return sq_error_set(err, SQ_EDATA, "%s: points: empty, the profile has no measurement", file);
    for (int i = 0; i < p->n; i++) {
        const sq_profile_point *q = &p->points[i];
        if (q->batch < 1 || q->batch > SQ_PROFILE_MAX_BATCH)
            return sq_error_set(err, SQ_EDATA, "%s: points[%d].batch: %d is outside [1, %d]", file,
                                i, q->batch, SQ_PROFILE_MAX_BATCH);
        if (i > 0 && q->batch < p->points[i - 1].batch)
            return sq_error_set(err, SQ_EDATA, "%s: points[%d].batch: %d after %d, points must be "
                                "ordered by batch size", file, i, q->batch, p->points[i - 1].batch);
        if (q->tokens < 1 || q->tokens > SQ_PROFILE_MAX_TOKENS)
            return sq_error_set(err, SQ_EDATA, "%s: points[%d].tokens: %d is outside [1, %d]", file,
                                i, q->tokens, SQ_PROFILE_MAX_TOKENS);
        if (i > 0 && q->batch == p->points[i - 1].batch && q->tokens <= p->points[i - 1].tokens)
            return sq_error_set(err, SQ_EDATA, "%s: points[%d].tokens: %d after %d, token counts "
                                "must increase strictly", file, i, q->tokens, p->points[i - 1].tokens);
        if (!isfinite(q->median_ms) || q->median_ms <= 0)
            return sq_error_set(err, SQ_EDATA, "%s: points[%d].median_ms: must be a finite time > 0",
                                file, i);
        if (!isnan(q->p10_ms) && (!isfinite(q->p10_ms) || q->p10_ms <= 0 || q->p10_ms > q->median_ms))
            return sq_error_set(err, SQ_EDATA, "%s: points[%d].p10_ms: must be in (0, median_ms]",
                                file, i);
        if (!isnan(q->p90_ms) && (!isfinite(q->p90_ms) || q->p90_ms < q->median_ms))
            return sq_error_set(err, SQ_EDATA, "%s: points[%d].p90_ms: must be finite and >= "
                                "median_ms", file, i);
        if (q->samples < 0)
            return sq_error_set(err, SQ_EDATA, "%s: points[%d].samples: must be >= 0", file, i);
    }
    return SQ_OK;
}

static char *dup_or(const char *s, const char *dflt)
{
    return strdup(s ? s : dflt);
}

/* The members of one point, of the points (with_batch: version 2) or of a "step" table (batch
 * 1): batch, tokens, median_ms, p10_ms, p90_ms, samples. Their ranges against each other are
 * checked by the callers (sq_profile_validate, step_point). */
static int point_fields(const cJSON *e, const char *file, const char *ctx, int with_batch,
                        sq_profile_point *q, sq_error *err)
{
    long long tokens = 0, samples = 0, batch = 1;
    int rc;
    q->p10_ms = q->p90_ms = NAN;
    if (!cJSON_IsObject(e))
        return sq_error_set(err, SQ_EDATA, "%s: %s: expected an object", file, ctx);
    if ((with_batch &&
         (rc = sq_json_get_int(e, "batch", 0, 1, SQ_PROFILE_MAX_BATCH, &batch, file, ctx, err))) ||
        (rc = sq_json_get_int(e, "tokens", 1, 1, SQ_PROFILE_MAX_TOKENS, &tokens, file, ctx, err)) ||
        (rc = sq_json_get_number(e, "median_ms", 1, &q->median_ms, file, ctx, err)) ||
        (rc = sq_json_get_number(e, "p10_ms", 0, &q->p10_ms, file, ctx, err)) ||
        (rc = sq_json_get_number(e, "p90_ms", 0, &q->p90_ms, file, ctx, err)) ||
        (rc = sq_json_get_int(e, "samples", 0, 0, 1LL << 40, &samples, file, ctx, err)))
        return rc;
    q->batch = (int)batch;
    q->tokens = (int)tokens;
    q->samples = (int)(samples > (1 << 30) ? (1 << 30) : samples);
    return SQ_OK;
}

/* One point of a "step" table: tokens, median_ms (>= 0: the overhead may round to 0), p10_ms,
 * p90_ms, samples. */
static int step_point(const cJSON *e, const char *file, const char *ctx, sq_profile_point *q,
                      sq_error *err)
{
    int rc = point_fields(e, file, ctx, 0, q, err);
    if (rc)
        return rc;
    if (!isfinite(q->median_ms) || q->median_ms < 0)
        return sq_error_set(err, SQ_EDATA, "%s: %s.median_ms: must be a finite time >= 0", file,
                            ctx);
    if (!isnan(q->p10_ms) && (!isfinite(q->p10_ms) || q->p10_ms < 0 || q->p10_ms > q->median_ms))
        return sq_error_set(err, SQ_EDATA, "%s: %s.p10_ms: must be in [0, median_ms]", file, ctx);
    if (!isnan(q->p90_ms) && (!isfinite(q->p90_ms) || q->p90_ms < q->median_ms))
        return sq_error_set(err, SQ_EDATA, "%s: %s.p90_ms: must be finite and >= median_ms", file,
                            ctx);
    return SQ_OK;
}

/* The step section's optional "context": {"mean", "min", "max"}, 0 <= min <= mean <= max. */
static int step_context(const cJSON *o, const char *file, sq_profile_step *s, sq_error *err)
{
    if (!o || cJSON_IsNull(o))
        return SQ_OK;
    if (!cJSON_IsObject(o))
        return sq_error_set(err, SQ_EDATA, "%s: step.context: expected an object with mean, min "
                            "and max", file);
    static const char *const keys[3] = {"min", "mean", "max"};
    double v[3];
    for (int k = 0; k < 3; k++) {
        const cJSON *e = sq_json_field(o, keys[k]);
        if (!cJSON_IsNumber(e) || !isfinite(e->valuedouble) || e->valuedouble < 0 ||
            e->valuedouble > INT_MAX)
            return sq_error_set(err, SQ_EDATA, "%s: step.context.%s: expected a number of tokens "
                                ">= 0", file, keys[k]);
        v[k] = e->valuedouble;
        if (k != 1 && v[k] != floor(v[k]))
            return sq_error_set(err, SQ_EDATA, "%s: step.context.%s: %g is not a whole number of "
                                "tokens", file, keys[k], v[k]);
    }
    if (!(v[0] <= v[1] && v[1] <= v[2] && v[2] >= 1))
        return sq_error_set(err, SQ_EDATA, "%s: step.context: min %g, mean %g, max %g: expected "
                            "min <= mean <= max and max >= 1", file, v[0], v[1], v[2]);
    s->context_min = (int)v[0];
    s->context_mean = v[1];
    s->context_max = (int)v[2];
    return SQ_OK;
}

/* The optional "step" section (profile.h; docs/formats.md). */
static int step_from_json(const cJSON *o, const char *file, sq_profile_step **out, sq_error *err)
{
    *out = NULL;
    if (!cJSON_IsObject(o))
        return sq_error_set(err, SQ_EDATA, "%s: step: expected an object", file);
    sq_profile_step *s = calloc(1, sizeof *s);
    if (!s)
        return sq_error_oom(err, "profile step section");
    int rc = SQ_OK;
    const cJSON *d = sq_json_field(o, "draft");
    if (d && !cJSON_IsNull(d) && !(s->draft = cJSON_Duplicate(d, 1)))
        rc = sq_error_oom(err, "profile step section");
    if (!rc)
        rc = step_context(sq_json_field(o, "context"), file, s, err);
    for (int k = 0; k < SQ_STEP_PARTS && !rc; k++) {
        const char *key = step_part_names[k];
        const cJSON *arr = sq_json_field(o, key);
        if (!arr)
            continue;
        if (!cJSON_IsArray(arr)) {
            rc = sq_error_set(err, SQ_EDATA, "%s: step.%s: expected an array of points", file, key);
            break;
        }
        int n = cJSON_GetArraySize(arr);
        if (n > SQ_PROFILE_MAX_POINTS) {
            rc = sq_error_set(err, SQ_EDATA, "%s: step.%s: %d entries, more than the limit of %d",
                              file, key, n, SQ_PROFILE_MAX_POINTS);
            break;
        }
        if (n == 0)
            continue;
        if (!(s->pts[k] = calloc((size_t)n, sizeof *s->pts[k]))) {
            rc = sq_error_oom(err, "profile step section");
            break;
        }
        int i = 0;
        for (const cJSON *e = arr->child; e && !rc; e = e->next, i++) {
            char ctx[64];
            snprintf(ctx, sizeof ctx, "step.%s[%d]", key, i);
            if ((rc = step_point(e, file, ctx, &s->pts[k][i], err)))
                break;
            if (i > 0 && s->pts[k][i].tokens <= s->pts[k][i - 1].tokens)
                rc = sq_error_set(err, SQ_EDATA, "%s: %s.tokens: %d after %d, token counts must "
                                  "increase strictly", file, ctx, s->pts[k][i].tokens,
                                  s->pts[k][i - 1].tokens);
            else if (k != SQ_STEP_OVERHEAD && s->pts[k][i].median_ms <= 0)
                rc = sq_error_set(err, SQ_EDATA, "%s: %s.median_ms: a forward's time must be > 0",
                                  file, ctx);
            s->n[k] = i + 1;
        }
    }
    if (!rc && s->n[SQ_STEP_TARGET] == 0)
        rc = sq_error_set(err, SQ_EDATA, "%s: step.target: missing or empty, the step section "
                          "needs the target's forwards", file);
    if (rc) {
        step_free(s);
        return rc;
    }
    *out = s;
    return SQ_OK;
}

int sq_profile_from_json(const cJSON *root, const char *file, sq_profile **out, sq_error *err)
{
    *out = NULL;
    if (!cJSON_IsObject(root))
        return sq_error_set(err, SQ_EDATA, "%s: expected a JSON object at the top level", file);
    const char *format = NULL, *device = NULL, *backend = NULL, *dtype = NULL;
    long long version = 0, threads = 0, prefix = -1;
    int rc;
    if ((rc = sq_json_get_string(root, "format", 1, &format, file, "", err)))
        return rc;
    if (strcmp(format, SQ_PROFILE_FORMAT) != 0)
        return sq_error_set(err, SQ_EDATA, "%s: format: \"%s\" is not \"%s\"", file, format,
                            SQ_PROFILE_FORMAT);
    if ((rc = sq_json_get_int(root, "version", 1, 0, 1LL << 31, &version, file, "", err)))
        return rc;
    if (version < 1 || version > SQ_PROFILE_VERSION)
        return sq_error_set(err, SQ_EDATA, "%s: version: %lld is not supported (this build reads "
                            "versions 1 to %d)", file, version, SQ_PROFILE_VERSION);
    if ((rc = sq_json_get_string(root, "device", 0, &device, file, "", err)) ||
        (rc = sq_json_get_string(root, "backend", 0, &backend, file, "", err)) ||
        (rc = sq_json_get_string(root, "dtype", 0, &dtype, file, "", err)) ||
        (rc = sq_json_get_int(root, "threads", 0, 0, 1 << 20, &threads, file, "", err)) ||
        (rc = sq_json_get_int(root, "prefix", 0, -1, SQ_PROFILE_MAX_TOKENS, &prefix, file, "", err)))
        return rc;
    const cJSON *pts = sq_json_field(root, "points");
    if (!cJSON_IsArray(pts))
        return sq_error_set(err, SQ_EDATA, "%s: points: missing or not an array", file);
    int n = cJSON_GetArraySize(pts);
    if (n > SQ_PROFILE_MAX_POINTS)
        return sq_error_set(err, SQ_EDATA, "%s: points: %d entries, more than the limit of %d", file,
                            n, SQ_PROFILE_MAX_POINTS);
    sq_profile *p = calloc(1, sizeof *p);
    if (!p)
        return sq_error_oom(err, "profile");
    p->device = dup_or(device, "unknown");
    p->backend = dup_or(backend, "unknown");
    p->dtype = dup_or(dtype, "unknown");
    p->threads = (int)threads;
    p->prefix = (int)prefix;
    p->points = calloc(n > 0 ? (size_t)n : 1, sizeof *p->points);
    const cJSON *model = sq_json_field(root, "model");
    if (model)
        p->model = cJSON_Duplicate(model, 1);
    if (!p->device || !p->backend || !p->dtype || !p->points || (model && !p->model)) {
        sq_profile_free(p);
        return sq_error_oom(err, "profile");
    }
    int i = 0;
    for (const cJSON *e = pts->child; e; e = e->next, i++) {
        char ctx[48];
        snprintf(ctx, sizeof ctx, "points[%d]", i);
        sq_profile_point *q = &p->points[i];
        /* version 1 has no batch member: reading past it would take batch-4 points for batch 1
         * (issue 27) */
        if (version < 2 && cJSON_GetObjectItemCaseSensitive(e, "batch")) {
            rc = sq_error_set(err, SQ_EDATA, "%s: %s.batch: a version 1 profile has no batch "
                              "sizes (every point is batch 1); a profile with batch sizes is "
                              "version 2 (docs/formats.md)", file, ctx);
            goto fail;
        }
        if ((rc = point_fields(e, file, ctx, version >= 2, q, err)))
            goto fail;
        p->n = i + 1;
    }
    if ((rc = sq_profile_validate(p, file, err)))
        goto fail;
    const cJSON *step = sq_json_field(root, "step");
    if (step && !cJSON_IsNull(step) && (rc = step_from_json(step, file, &p->step, err)))
        goto fail;
    *out = p;
    return SQ_OK;
fail:
    sq_profile_free(p);
    return rc;
}

int sq_profile_load(const char *file, sq_profile **out, sq_error *err)
{
    cJSON *root;
    *out = NULL;
    int rc = sq_json_load(file, &root, err);
    if (rc)
        return rc;
    rc = sq_profile_from_json(root, file, out, err);
    cJSON_Delete(root);
    return rc;
}

static cJSON *num_or_null(double x)
{
    return isnan(x) ? cJSON_CreateNull() : cJSON_CreateNumber(x);
}

/* One timed point (a steady-stream point, with its batch when the profile has batches, or a
 * step section's). */
static cJSON *point_json(const sq_profile_point *q, int with_batch)
{
    cJSON *e = cJSON_CreateObject();
    if (with_batch)
        sq_json_add(e, "batch", cJSON_CreateNumber(q->batch));
    sq_json_add(e, "tokens", cJSON_CreateNumber(q->tokens));
    sq_json_add(e, "median_ms", cJSON_CreateNumber(q->median_ms));
    sq_json_add(e, "p10_ms", num_or_null(q->p10_ms));
    sq_json_add(e, "p90_ms", num_or_null(q->p90_ms));
    sq_json_add(e, "samples", cJSON_CreateNumber(q->samples));
    return e;
}

cJSON *sq_profile_to_json(const sq_profile *p)
{
    int batched = 0;
    for (int i = 0; i < p->n; i++)
        batched |= p->points[i].batch > 1;
    sq_json_build b = sq_json_build_begin();
    cJSON *o = cJSON_CreateObject();
    sq_json_add(o, "format", cJSON_CreateString(SQ_PROFILE_FORMAT));
    sq_json_add(o, "version", cJSON_CreateNumber(batched ? 2 : 1));
    sq_json_add(o, "device", cJSON_CreateString(p->device ? p->device : "unknown"));
    sq_json_add(o, "backend", cJSON_CreateString(p->backend ? p->backend : "unknown"));
    sq_json_add(o, "threads", cJSON_CreateNumber(p->threads));
    sq_json_add(o, "dtype", cJSON_CreateString(p->dtype ? p->dtype : "unknown"));
    sq_json_add(o, "prefix", p->prefix >= 0 ? cJSON_CreateNumber(p->prefix) : cJSON_CreateNull());
    sq_json_add(o, "model", p->model ? cJSON_Duplicate(p->model, 1) : cJSON_CreateNull());
    cJSON *pts = cJSON_CreateArray();
    for (int i = 0; i < p->n && pts; i++) {
        sq_json_append(pts, point_json(&p->points[i], batched));
    }
    sq_json_add(o, "points", pts);
    if (p->step) {
        cJSON *st = cJSON_CreateObject();
        sq_json_add(st, "draft", p->step->draft ? cJSON_Duplicate(p->step->draft, 1)
                                                : cJSON_CreateNull());
        if (p->step->context_max > 0) {
            cJSON *cx = cJSON_CreateObject();
            sq_json_add(cx, "mean", cJSON_CreateNumber(p->step->context_mean));
            sq_json_add(cx, "min", cJSON_CreateNumber(p->step->context_min));
            sq_json_add(cx, "max", cJSON_CreateNumber(p->step->context_max));
            sq_json_add(st, "context", cx);
        }
        for (int k = 0; k < SQ_STEP_PARTS; k++) {
            cJSON *arr = cJSON_CreateArray();
            for (int i = 0; i < p->step->n[k]; i++) {
                sq_json_append(arr, point_json(&p->step->pts[k][i], 0));
            }
            sq_json_add(st, step_part_names[k], arr);
        }
        sq_json_add(o, "step", st);
    }
    return sq_json_build_end(b, o);
}

int sq_profile_save(const char *file, const sq_profile *p, sq_error *err)
{
    cJSON *o = sq_profile_to_json(p);
    int rc = sq_json_save(file, o, err);
    cJSON_Delete(o);
    return rc;
}

/* ---- CSV import ------------------------------------------------------------------------------ */

static char *trim(char *s)
{
    while (isspace((unsigned char)*s))
        s++;
    char *e = s + strlen(s);
    while (e > s && isspace((unsigned char)e[-1]))
        *--e = '\0';
    return s;
}

static int cmp_point(const void *a, const void *b)
{
    const sq_profile_point *x = a, *y = b;
    if (x->batch != y->batch)
        return (x->batch > y->batch) - (x->batch < y->batch);
    if (x->tokens != y->tokens)
        return (x->tokens > y->tokens) - (x->tokens < y->tokens);
    return (x->median_ms > y->median_ms) - (x->median_ms < y->median_ms);
}

/* The time column's unit: milliseconds per unit, or 0 for a name that is not a time. */
static double time_scale(const char *name)
{
    if (!strcmp(name, "ms") || !strcmp(name, "median_ms"))
        return 1.0;
    if (!strcmp(name, "s") || !strcmp(name, "seconds"))
        return 1e3;
    if (!strcmp(name, "us"))
        return 1e-3;
    return 0.0;
}

/* Splits a line at its commas into at most `cap` trimmed fields; returns how many there are
 * (more than cap when there are more). */
static int split_csv(char *l, char **f, int cap)
{
    int n = 0;
    for (char *c = l;; c++) {
        char *comma = strchr(c, ',');
        if (n < cap)
            f[n] = c;
        n++;
        if (!comma)
            break;
        *comma = '\0';
        c = comma;
    }
    for (int i = 0; i < n && i < cap; i++)
        f[i] = trim(f[i]);
    return n;
}

#define CSV_COLUMNS "expected two columns, tokens and a time, or three, with a batch column"

int sq_profile_from_csv(const char *file, const char *engine, sq_profile **out, sq_error *err)
{
    *out = NULL;
    char *text;
    size_t len;
    int rc = sq_file_read(file, SQ_PROFILE_MAX_CSV_BYTES, &text, &len, err);
    if (rc)
        return rc;
    size_t bom = 0;   /* a UTF-8 byte order mark (spreadsheets write one) is skipped */
    if ((rc = sq_text_bom(file, text, len, &bom, err))) {
        free(text);
        return rc;
    }
    sq_profile_point *raw = NULL;
    size_t nraw = 0, cap = 0;
    double scale = 1.0;
    int line_no = 0, header = 0, ncol = 0, col_tok = 0, col_time = 1, col_batch = -1;
    char *save = NULL;
    rc = SQ_OK;
    for (char *line = strtok_r(text + bom, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        line_no++;
        char *l = trim(line);
        if (!*l || *l == '#')
            continue;
        char *f[3];
        int n = split_csv(l, f, 3);
        if (!header) {
            /* tokens and a time (the first column tokens), or those two and batch in any order */
            header = 1;
            ncol = n;
            if (n == 2) {
                if (strcmp(f[0], "tokens") != 0) {
                    rc = sq_error_set(err, SQ_EDATA, "%s:%d: first column is \"%s\", expected "
                                      "\"tokens\"%s", file, line_no, f[0], !strcmp(f[0], "batch")
                                      ? " (a batch column comes with tokens and a time: "
                                        "batch,tokens,ms)" : "");
                    goto done;
                }
                if (!(scale = time_scale(f[1]))) {
                    /* "tokens,tokens" is a column named twice, not an unknown time unit */
                    int known = !strcmp(f[1], "tokens") || !strcmp(f[1], "batch");
                    rc = sq_error_set(err, SQ_EDATA, "%s:%d: %s \"%s\"%s (expected a time "
                                      "column: ms, median_ms, us, s or seconds)", file, line_no,
                                      known ? "column 2 is" : "unknown time column", f[1],
                                      !strcmp(f[1], "tokens") ? " again" : "");
                    goto done;
                }
                continue;
            }
            if (n != 3) {
                rc = sq_error_set(err, SQ_EDATA, "%s:%d: %d columns; " CSV_COLUMNS " (e.g. "
                                  "\"tokens,ms\" or \"batch,tokens,ms\")", file, line_no, n);
                goto done;
            }
            col_tok = col_time = col_batch = -1;
            for (int i = 0; i < 3; i++) {
                int *slot = !strcmp(f[i], "tokens") ? &col_tok : !strcmp(f[i], "batch")
                            ? &col_batch : time_scale(f[i]) ? &col_time : NULL;
                if (!slot || *slot >= 0) {
                    /* a second time column is another name than the first: not "again" */
                    char what[96] = "";
                    if (slot == &col_time)
                        snprintf(what, sizeof what, ", a second time column (column %d is "
                                 "\"%.16s\")", *slot + 1, f[*slot]);
                    else if (slot)
                        snprintf(what, sizeof what, " again");
                    rc = sq_error_set(err, SQ_EDATA, "%s:%d: column %d is \"%s\"%s; " CSV_COLUMNS
                                      " (\"batch,tokens,ms\"; the time in ms, median_ms, us, s or "
                                      "seconds)", file, line_no, i + 1, f[i], what);
                    goto done;
                }
                *slot = i;
                if (slot == &col_time)
                    scale = time_scale(f[i]);
            }
            if (col_tok < 0 || col_time < 0 || col_batch < 0) {
                rc = sq_error_set(err, SQ_EDATA, "%s:%d: three columns need batch, tokens and a "
                                  "time; " CSV_COLUMNS, file, line_no);
                goto done;
            }
            continue;
        }
        if (n != ncol) {
            rc = sq_error_set(err, SQ_EDATA, "%s:%d: %d columns where the header has %d; %s", file,
                              line_no, n, ncol, ncol == 2 ? "expected two columns, tokens and a "
                              "time" : "expected three, batch, tokens and a time");
            goto done;
        }
        char *a = f[col_tok], *b = f[col_time], *end1, *end2, *end3;
        long tok = strtol(a, &end1, 10);
        double t = strtod(b, &end2);
        long batch = 1;
        if (*end1 || end1 == a || tok < 1 || tok > SQ_PROFILE_MAX_TOKENS) {
            rc = sq_error_set(err, SQ_EDATA, "%s:%d: tokens: \"%s\" is not an integer in [1, %d]",
                              file, line_no, a, SQ_PROFILE_MAX_TOKENS);
            goto done;
        }
        if (*end2 || end2 == b || !isfinite(t) || t <= 0) {
            rc = sq_error_set(err, SQ_EDATA, "%s:%d: time: \"%s\" is not a finite time > 0", file,
                              line_no, b);
            goto done;
        }
        if (col_batch >= 0) {
            char *c = f[col_batch];
            batch = strtol(c, &end3, 10);
            if (*end3 || end3 == c || batch < 1 || batch > SQ_PROFILE_MAX_BATCH) {
                rc = sq_error_set(err, SQ_EDATA, "%s:%d: batch: \"%s\" is not an integer in [1, "
                                  "%d]", file, line_no, c, SQ_PROFILE_MAX_BATCH);
                goto done;
            }
        }
        if (nraw == cap) {
            if (cap >= SQ_PROFILE_MAX_POINTS * 16u) {
                rc = sq_error_set(err, SQ_EDATA, "%s: more than %u rows", file,
                                  SQ_PROFILE_MAX_POINTS * 16u);
                goto done;
            }
            cap = cap ? cap * 2 : 64;
            sq_profile_point *r = realloc(raw, cap * sizeof *raw);
            if (!r) {
                rc = sq_error_oom(err, file);
                goto done;
            }
            raw = r;
        }
        raw[nraw++] = (sq_profile_point){.batch = (int)batch, .tokens = (int)tok,
                                         .median_ms = t * scale, .p10_ms = NAN, .p90_ms = NAN,
                                         .samples = 1};
    }
    if (!header) {
        rc = sq_error_set(err, SQ_EDATA, "%s: empty, expected a header \"tokens,ms\" and rows", file);
        goto done;
    }
    if (nraw == 0) {
        rc = sq_error_set(err, SQ_EDATA, "%s: no measurement rows after the header", file);
        goto done;
    }
    /* Combine repeated (batch, token count) rows: median, p10 and p90 of their times. */
    qsort(raw, nraw, sizeof *raw, cmp_point);
    sq_profile *p = calloc(1, sizeof *p);
    if (!p || !(p->points = calloc(nraw, sizeof *p->points))) {
        free(p);
        rc = sq_error_oom(err, file);
        goto done;
    }
    p->device = strdup("imported");
    p->backend = strdup(engine ? engine : "imported");
    p->dtype = strdup("unknown");
    p->prefix = -1;
    for (size_t i = 0; i < nraw;) {
        size_t j = i;
        while (j < nraw && raw[j].batch == raw[i].batch && raw[j].tokens == raw[i].tokens)
            j++;
        size_t k = j - i;
        sq_profile_point *q = &p->points[p->n++];
        q->batch = raw[i].batch;
        q->tokens = raw[i].tokens;
        q->median_ms = k % 2 ? raw[i + k / 2].median_ms
                             : 0.5 * (raw[i + k / 2 - 1].median_ms + raw[i + k / 2].median_ms);
        q->p10_ms = k > 1 ? raw[i + (size_t)floor(0.1 * (double)(k - 1))].median_ms : NAN;
        q->p90_ms = k > 1 ? raw[i + (size_t)ceil(0.9 * (double)(k - 1))].median_ms : NAN;
        q->samples = (int)k;
        i = j;
    }
    if (!p->device || !p->backend || !p->dtype) {
        sq_profile_free(p);
        rc = sq_error_oom(err, file);
        goto done;
    }
    if ((rc = sq_profile_validate(p, file, err))) {
        sq_profile_free(p);
        goto done;
    }
    *out = p;
done:
    free(raw);
    free(text);
    return rc;
}

/* ---- interpolation ------------------------------------------------------------------------- */

static double lerp(const sq_profile_point *a, const sq_profile_point *b, double x)
{
    double t = (x - a->tokens) / (double)(b->tokens - a->tokens);
    return a->median_ms + t * (b->median_ms - a->median_ms);
}

/* Interpolation over one batch size's run of points pt[0 .. n). */
static int run_ms(const sq_profile_point *pt, int n, double x, sq_extrapolate mode, double *ms,
                  sq_error *err)
{
    if (x >= pt[0].tokens && x <= pt[n - 1].tokens) {
        int lo = 0, hi = n - 1; /* largest lo with tokens <= x */
        while (lo < hi) {
            int mid = (lo + hi + 1) / 2;
            if (pt[mid].tokens <= x)
                lo = mid;
            else
                hi = mid - 1;
        }
        *ms = lo == n - 1 ? pt[lo].median_ms : lerp(&pt[lo], &pt[lo + 1], x);
        return SQ_OK;
    }
    if (mode == SQ_EXTRAPOLATE_NONE) {
        if (err && err->status == SQ_OK)
            err->cause = SQ_CAUSE_OUT_OF_RANGE;
        return sq_error_set(err, SQ_EUSAGE, "%.6g tokens is outside the profile's measured range "
                            "[%d, %d]; measure it, or allow linear or constant extrapolation", x,
                            pt[0].tokens, pt[n - 1].tokens);
    }
    int below = x < pt[0].tokens;
    if (mode == SQ_EXTRAPOLATE_CONSTANT || n == 1) {
        *ms = below ? pt[0].median_ms : pt[n - 1].median_ms;
        return SQ_OK;
    }
    double v = below ? lerp(&pt[0], &pt[1], x) : lerp(&pt[n - 2], &pt[n - 1], x);
    /* a steep first segment could extrapolate to a time <= 0: hold the measured one instead */
    *ms = v > 0 ? v : (below ? pt[0].median_ms : pt[n - 1].median_ms);
    return SQ_OK;
}

/* The run of points of batch size `batch`: *first and the count; 0 when there is none. */
static int batch_run(const sq_profile *p, int batch, int *first)
{
    int i = 0;
    while (i < p->n && p->points[i].batch != batch)
        i++;
    int j = i;
    while (j < p->n && p->points[j].batch == batch)
        j++;
    *first = i;
    return j - i;
}

int sq_profile_ms(const sq_profile *p, double x, sq_extrapolate mode, double *ms, sq_error *err)
{
    SQ_ASSERT(p->n >= 1);
    return sq_profile_ms_batch(p, p->points[0].batch, x, mode, ms, err);
}

int sq_profile_ms_batch(const sq_profile *p, int batch, double x, sq_extrapolate mode, double *ms,
                        sq_error *err)
{
    int first, n = batch_run(p, batch, &first);
    if (n == 0)
        return sq_error_set(err, SQ_EUSAGE, "batch size %d is not measured in the profile", batch);
    return run_ms(p->points + first, n, x, mode, ms, err);
}

int sq_profile_batches(const sq_profile *p, int *out, int cap)
{
    int count = 0;
    for (int i = 0; i < p->n; i++)
        if (i == 0 || p->points[i].batch != p->points[i - 1].batch) {
            if (count < cap)
                out[count] = p->points[i].batch;
            count++;
        }
    return count;
}

int sq_profile_copy_setup(sq_profile *dst, const sq_profile *src)
{
    dst->device = strdup(src->device ? src->device : "unknown");
    dst->backend = strdup(src->backend ? src->backend : "unknown");
    dst->dtype = strdup(src->dtype ? src->dtype : "unknown");
    dst->threads = src->threads;
    dst->prefix = src->prefix;
    dst->model = src->model ? cJSON_Duplicate(src->model, 1) : NULL;
    return dst->device && dst->backend && dst->dtype && (!src->model || dst->model) ? 0 : -1;
}

int sq_profile_slice(const sq_profile *p, int batch, sq_profile **out, sq_error *err)
{
    *out = NULL;
    int first, n = batch_run(p, batch, &first);
    if (n == 0)
        return sq_error_set(err, SQ_EUSAGE, "batch size %d is not measured in the profile", batch);
    sq_profile *s = calloc(1, sizeof *s);
    if (!s)
        return sq_error_oom(err, "profile slice");
    s->points = malloc((size_t)n * sizeof *s->points);
    if (sq_profile_copy_setup(s, p) || !s->points) {
        sq_profile_free(s);
        return sq_error_oom(err, "profile slice");
    }
    memcpy(s->points, p->points + first, (size_t)n * sizeof *s->points);
    s->n = n;
    /* the step section is measured at batch 1: it goes with the batch-1 slice */
    if (p->step && batch == 1 && !(s->step = step_copy(p->step))) {
        sq_profile_free(s);
        return sq_error_oom(err, "profile slice");
    }
    *out = s;
    return SQ_OK;
}

double sq_profile_max_spread(const sq_profile *p, int *at)
{
    double worst = 0;
    int w = -1;
    for (int i = 0; i < p->n; i++) {
        const sq_profile_point *q = &p->points[i];
        if (isnan(q->p10_ms) || isnan(q->p90_ms))
            continue;
        double s = (q->p90_ms - q->p10_ms) / q->median_ms;
        if (s > worst) {
            worst = s;
            w = i;
        }
    }
    if (at)
        *at = w;
    return worst;
}

int sq_profile_step_ms(const sq_profile *p, sq_step_part part, double x, sq_extrapolate mode,
                       double *ms, sq_error *err)
{
    if (!p->step)
        return sq_error_set(err, SQ_EUSAGE, "the profile has no step section (measure one with "
                            "sequoia-profile --draft)");
    if (part < 0 || part >= SQ_STEP_PARTS || p->step->n[part] == 0)
        return sq_error_set(err, SQ_EUSAGE, "the profile's step section has no %s points",
                            sq_step_part_name(part));
    return run_ms(p->step->pts[part], p->step->n[part], x, mode, ms, err);
}

/* ---- credibility ------------------------------------------------------------------------- */

static double spread_of(const sq_profile_point *q)
{
    return isnan(q->p10_ms) || isnan(q->p90_ms) ? 0.0 : q->p90_ms - q->p10_ms;
}

int sq_profile_falls(const sq_profile *p, double tol, int flags, sq_profile_fall *out,
                     int cap)
{
    int count = 0;
    for (int i = 0; i < p->n;) {
        int j = i;
        while (j < p->n && p->points[j].batch == p->points[i].batch)
            j++;
        /* the run i .. j-1 of one batch size; `worst` is the slowest smaller count so far */
        for (int k = i + 1; k < j; k++) {
            const sq_profile_point *q = &p->points[k];
            int ref = -1;
            double worst_gap = 0;
            for (int m = i; m < (flags & SQ_FALLS_FROM_FIRST ? i + 1 : k); m++) {
                const sq_profile_point *r = &p->points[m];
                double gap = r->median_ms - q->median_ms;
                double need = tol * r->median_ms;
                if (!(flags & SQ_FALLS_IGNORE_SPREAD) && need < spread_of(r) + spread_of(q))
                    need = spread_of(r) + spread_of(q);
                if (need < SQ_PROFILE_FALL_FLOOR_MS)
                    need = SQ_PROFILE_FALL_FLOOR_MS;
                if (gap > need && gap > worst_gap) {
                    worst_gap = gap;
                    ref = m;
                }
            }
            if (ref < 0)
                continue;
            if (count < cap)
                out[count] = (sq_profile_fall){q->batch, q->tokens, p->points[ref].tokens,
                                               q->median_ms, p->points[ref].median_ms};
            count++;
        }
        i = j;
    }
    return count;
}

void sq_profile_falls_text(const sq_profile_fall *f, int n, char *buf, size_t cap)
{
    size_t len = 0;
    if (cap)
        buf[0] = '\0';
    for (int i = 0; i < n && i < 8 && len < cap; i++) {
        char pt[32], rp[32];
        if (f[i].batch > 1) {
            snprintf(pt, sizeof pt, "%dx%d", f[i].batch, f[i].tokens);
            snprintf(rp, sizeof rp, "%dx%d", f[i].batch, f[i].ref_tokens);
        } else {
            snprintf(pt, sizeof pt, "%d", f[i].tokens);
            snprintf(rp, sizeof rp, "%d", f[i].ref_tokens);
        }
        len += (size_t)snprintf(buf + len, cap - len, "%st(%s) = %.4g ms < t(%s) = %.4g ms (%+.0f%%)",
                                i ? ", " : "", pt, f[i].ms, rp, f[i].ref_ms,
                                100.0 * (f[i].ms / f[i].ref_ms - 1.0));
    }
    if (n > 8 && len < cap)
        snprintf(buf + len, cap - len, " and %d more", n - 8);
}
