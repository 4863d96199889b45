#include "libsequoia/format/curve.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "libsequoia/base/io.h"
#include "libsequoia/base/json.h"
#include "libsequoia/format/mode.h"

/* ---- the embedded default ----------------------------------------------------------------- */

static double appe_p[31] = {
    0.7732, 0.1039, 0.0402, 0.0206, 0.0128, 0.0081, 0.0064, 0.0043, 0.0035, 0.0026, 0.0025,
    0.0021, 0.0016, 0.0014, 0.0010, 0.0010, 0.0010, 0.0007, 0.0007, 0.0006, 0.0007, 0.0006,
    0.0004, 0.0004, 0.0005, 0.0006, 0.0004, 0.0003, 0.0002, 0.0004, 0.0001,
};

const char *const sq_curve_default_provenance =
    "the paper's App. E vector (Llama3-70B-Instruct target, Llama3-8B-Instruct draft, "
    "CNN/DailyMail; arXiv 2402.12374)";

static sq_curve appe_curve;

const sq_curve *sq_curve_default(void)
{
    if (!appe_curve.p) {
        double s = 0;
        for (int i = 0; i < 31; i++)
            s += appe_p[i];
        appe_curve = (sq_curve){
            .name = (char *)"paper-appE-llama3-70b-8b-cnndm",
            .mode = (char *)"stochastic",
            .temperature = NAN,
            .top_p = NAN,
            .width = 31,
            .p = appe_p,
            .reject = 1.0 - s,
            .positions = -1,
            .sequences = -1,
        };
    }
    return &appe_curve;
}

static double kjv_p[16] = {
    0.793352, 0.095764, 0.040850, 0.020572, 0.013414, 0.008409, 0.005962, 0.004511,
    0.003405, 0.002541, 0.002105, 0.001742, 0.001233, 0.000767, 0.000785, 0.000705,
};

static sq_curve kjv_curve;

const sq_curve *sq_curve_builtin(const char *name, const char **provenance)
{
    if (!strcmp(name, "paper-appE")) {
        if (provenance)
            *provenance = sq_curve_default_provenance;
        return sq_curve_default();
    }
    if (!strcmp(name, "kjv-byte-pair")) {
        if (!kjv_curve.p) {
            double s = 0;
            for (int i = 0; i < 16; i++)
                s += kjv_p[i];
            kjv_curve = (sq_curve){
                .name = (char *)"kjv-byte-pair-stochastic@T0.6",
                .mode = (char *)"stochastic",
                .temperature = 0.6,
                .top_p = 1.0,
                .width = 16,
                .p = kjv_p,
                .reject = 1.0 - s,
                .positions = 32640,
                .sequences = 128,
            };
        }
        if (provenance)
            *provenance = "the shipped byte-level KJV pair's stochastic curve at T = 0.6 (data/models, "
                          "estimated by examples/pipeline.sh over 32,640 held-out positions)";
        return &kjv_curve;
    }
    return NULL;
}

const char *sq_curve_builtin_names(void)
{
    return "paper-appE, kjv-byte-pair";
}

/* ---- basics ------------------------------------------------------------------------------- */

/* Mode names and their rank semantics: the one table of libsequoia/format/mode.h. */
static int mode_index(const char *mode)
{
    sq_mode m;
    return mode && sq_mode_parse(mode, &m) == 0 ? (int)m : -1;
}

const char *sq_curve_rank_semantics(const sq_curve *c)
{
    int i = mode_index(c->mode);
    return sq_mode_rank_semantics(i < 0 ? SQ_MODE_STOCHASTIC : (sq_mode)i);
}

double sq_curve_p(const sq_curve *c, int depth, int rank)
{
    SQ_ASSERT(depth >= 1 && rank >= 1);
    if (rank > c->width)
        return 0.0;
    if (c->depth_rows > 0) {
        int row = depth <= c->depth_rows ? depth - 1 : c->depth_rows - 1;
        return c->p_by_depth[(size_t)row * (size_t)c->width + (size_t)(rank - 1)];
    }
    return c->p[rank - 1];
}

void sq_curve_clear(sq_curve *c)
{
    if (!c)
        return;
    free(c->name);
    free(c->mode);
    free(c->p);
    free(c->stderr_p);
    free(c->p_by_depth);
    free(c->stderr_by_depth);
    cJSON_Delete(c->extra);
    memset(c, 0, sizeof *c);
}

static double *dup_doubles(const double *v, size_t n)
{
    if (!v)
        return NULL;
    double *d = malloc(n * sizeof *d);
    if (d)
        memcpy(d, v, n * sizeof *d);
    return d;
}

int sq_curve_copy(sq_curve *dst, const sq_curve *src, sq_error *err)
{
    memset(dst, 0, sizeof *dst);
    *dst = *src;
    dst->name = src->name ? strdup(src->name) : NULL;
    dst->mode = src->mode ? strdup(src->mode) : NULL;
    dst->p = dup_doubles(src->p, (size_t)src->width);
    dst->stderr_p = dup_doubles(src->stderr_p, (size_t)src->width);
    dst->p_by_depth = dup_doubles(src->p_by_depth, (size_t)src->depth_rows * (size_t)src->width);
    dst->stderr_by_depth =
        dup_doubles(src->stderr_by_depth, (size_t)src->depth_rows * (size_t)src->width);
    dst->extra = src->extra ? cJSON_Duplicate(src->extra, 1) : NULL;
    if ((src->name && !dst->name) || (src->mode && !dst->mode) || !dst->p ||
        (src->stderr_p && !dst->stderr_p) || (src->p_by_depth && !dst->p_by_depth) ||
        (src->stderr_by_depth && !dst->stderr_by_depth) ||
        (src->extra && !dst->extra)) {
        sq_curve_clear(dst);
        return sq_error_oom(err, "acceptance curve");
    }
    return SQ_OK;
}

int sq_curve_init(sq_curve *c, const char *name, const char *mode, const double *p, int width,
                  sq_error *err)
{
    memset(c, 0, sizeof *c);
    if (width < 1)
        return sq_error_set(err, SQ_EDATA, "%s: p: empty acceptance vector", name);
    sq_curve tmp = {
        .name = (char *)name, .mode = (char *)mode, .temperature = NAN, .top_p = NAN,
        .width = width, .p = (double *)p, .positions = -1, .sequences = -1,
    };
    double s = 0;
    for (int i = 0; i < width; i++)
        s += p[i];
    tmp.reject = 1.0 - s;
    int rc = sq_curve_validate(&tmp, name, "", err);
    if (rc)
        return rc;
    return sq_curve_copy(c, &tmp, err);
}

static int check_vector(const double *v, int n, const char *file, const char *ctx, sq_error *err)
{
    double s = 0;
    for (int i = 0; i < n; i++) {
        if (!isfinite(v[i]))
            return sq_error_set(err, SQ_EDATA, "%s: %s[%d]: value is not finite", file, ctx, i);
        if (v[i] < 0.0 || v[i] > 1.0)
            return sq_error_set(err, SQ_EDATA, "%s: %s[%d]: value %.17g is not a probability",
                                file, ctx, i, v[i]);
        s += v[i];
    }
    if (s > 1.0 + SQ_CURVE_SUM_TOL)
        return sq_error_set(err, SQ_EDATA,
                            "%s: %s: entries sum to %.9g, more than 1 (a verifier accepts at most "
                            "one child)", file, ctx, s);
    return SQ_OK;
}

int sq_curve_validate(const sq_curve *c, const char *file, const char *ctx, sq_error *err)
{
    char where[256];
    const char *sep = ctx[0] ? "." : "";
    if (c->width < 1 || !c->p) {
        snprintf(where, sizeof where, "%s%sp", ctx, sep);
        return sq_error_set(err, SQ_EDATA, "%s: %s: empty acceptance vector", file, where);
    }
    snprintf(where, sizeof where, "%s%sp", ctx, sep);
    int rc = check_vector(c->p, c->width, file, where, err);
    if (rc)
        return rc;
    if (c->mode && mode_index(c->mode) < 0)
        return sq_error_set(err, SQ_EDATA,
                            "%s: %s%smode: unknown mode \"%s\" (expected " SQ_MODE_NAMES ")", file,
                            ctx, sep, c->mode);
    if (!isnan(c->temperature) && (!isfinite(c->temperature) || c->temperature < 0))
        return sq_error_set(err, SQ_EDATA, "%s: %s%stemperature: must be >= 0", file, ctx, sep);
    if (!isnan(c->top_p) && (!(c->top_p > 0) || c->top_p > 1))
        return sq_error_set(err, SQ_EDATA, "%s: %s%stop_p: must be in (0, 1]", file, ctx, sep);
    for (int r = 0; r < c->depth_rows; r++) {
        snprintf(where, sizeof where, "%s%sp_by_depth[%d]", ctx, sep, r);
        rc = check_vector(c->p_by_depth + (size_t)r * (size_t)c->width, c->width, file, where, err);
        if (rc)
            return rc;
    }
    if (c->stderr_p) {
        for (int i = 0; i < c->width; i++)
            if (!isfinite(c->stderr_p[i]) || c->stderr_p[i] < 0)
                return sq_error_set(err, SQ_EDATA, "%s: %s%sstderr[%d]: must be a finite value >= 0",
                                    file, ctx, sep, i);
    }
    if (c->stderr_by_depth && c->depth_rows < 1)
        return sq_error_set(err, SQ_EDATA, "%s: %s%sstderr_by_depth: given without p_by_depth",
                            file, ctx, sep);
    for (int r = 0; c->stderr_by_depth && r < c->depth_rows; r++)
        for (int i = 0; i < c->width; i++) {
            double v = c->stderr_by_depth[(size_t)r * (size_t)c->width + (size_t)i];
            if (!isfinite(v) || v < 0)
                return sq_error_set(err, SQ_EDATA, "%s: %s%sstderr_by_depth[%d][%d]: must be a "
                                    "finite value >= 0", file, ctx, sep, r, i);
        }
    return SQ_OK;
}

/* ---- JSON --------------------------------------------------------------------------------- */

static const char *const known_keys[] = {"name", "mode", "temperature", "top_p", "p", "stderr",
                                         "reject", "p_by_depth", "stderr_by_depth",
                                         "positions", "sequences"};

static int is_known_key(const char *k)
{
    for (size_t i = 0; i < sizeof known_keys / sizeof *known_keys; i++)
        if (strcmp(k, known_keys[i]) == 0)
            return 1;
    return 0;
}

/* The optional matrix member `key` of a curve object (p_by_depth, stderr_by_depth): rows of
 * w numbers; absent or null: *m = NULL, *rows = 0. */
static int depth_matrix(const cJSON *obj, const char *key, const char *file, const char *ctx,
                        size_t w, double **m, int *rows_out, sq_error *err)
{
    char where[256];
    const char *sep = ctx[0] ? "." : "";
    *m = NULL;
    *rows_out = 0;
    const cJSON *pd = sq_json_field(obj, key);
    if (!pd)
        return SQ_OK;
    snprintf(where, sizeof where, "%s%s%s", ctx, sep, key);
    if (!cJSON_IsArray(pd) || cJSON_GetArraySize(pd) == 0)
        return sq_error_set(err, SQ_EDATA, "%s: %s: expected a non-empty array of rows (or null)",
                            file, where);
    int rows = cJSON_GetArraySize(pd);
    if (rows > SQ_CURVE_MAX_ROWS)
        return sq_error_set(err, SQ_EDATA, "%s: %s: %d rows, more than the limit of %d", file,
                            where, rows, SQ_CURVE_MAX_ROWS);
    double *out = malloc((size_t)rows * w * sizeof(double));
    if (!out)
        return sq_error_oom(err, where);
    int r = 0;
    for (const cJSON *row = pd->child; row; row = row->next, r++) {
        char rw[300];
        snprintf(rw, sizeof rw, "%s[%d]", where, r);
        double *v;
        size_t n;
        int rc = sq_json_get_numbers(row, -INFINITY, INFINITY, SQ_CURVE_MAX_WIDTH, &v, &n, file,
                                     rw, err);
        if (rc) {
            free(out);
            return rc;
        }
        if (n != w) {
            free(v);
            free(out);
            return sq_error_set(err, SQ_EDATA, "%s: %s: has %zu entries but p has %zu", file, rw,
                                n, w);
        }
        memcpy(out + (size_t)r * w, v, w * sizeof *v);
        free(v);
    }
    *m = out;
    *rows_out = rows;
    return SQ_OK;
}

int sq_curve_from_json(const cJSON *obj, const char *file, const char *ctx, sq_curve *out,
                       sq_error *err)
{
    memset(out, 0, sizeof *out);
    out->temperature = NAN;
    out->top_p = NAN;
    out->positions = -1;
    out->sequences = -1;
    if (!cJSON_IsObject(obj))
        return sq_error_set(err, SQ_EDATA, "%s: %s: expected an object", file, ctx);

    char where[256];
    const char *sep = ctx[0] ? "." : "";
    const char *name = NULL, *mode = "stochastic";
    int rc;
    if ((rc = sq_json_get_string(obj, "name", 0, &name, file, ctx, err)) ||
        (rc = sq_json_get_string(obj, "mode", 0, &mode, file, ctx, err)) ||
        (rc = sq_json_get_number(obj, "temperature", 0, &out->temperature, file, ctx, err)) ||
        (rc = sq_json_get_number(obj, "top_p", 0, &out->top_p, file, ctx, err)) ||
        (rc = sq_json_get_int(obj, "positions", 0, 0, (1LL << 53), &out->positions, file, ctx, err)) ||
        (rc = sq_json_get_int(obj, "sequences", 0, 0, (1LL << 53), &out->sequences, file, ctx, err)))
        goto fail;
    out->name = strdup(name ? name : ctx);
    out->mode = strdup(mode);
    if (!out->name || !out->mode) {
        rc = sq_error_oom(err, "curve name");
        goto fail;
    }

    const cJSON *p = sq_json_field(obj, "p");
    snprintf(where, sizeof where, "%s%sp", ctx, sep);
    if (!p) {
        rc = sq_error_set(err, SQ_EDATA, "%s: %s: missing", file, where);
        goto fail;
    }
    size_t w;
    /* Read with wide bounds; sq_curve_validate words the range errors. */
    if ((rc = sq_json_get_numbers(p, -INFINITY, INFINITY, SQ_CURVE_MAX_WIDTH, &out->p, &w, file,
                                  where, err)))
        goto fail;
    out->width = (int)w;

    const cJSON *se = sq_json_field(obj, "stderr");
    if (se) {
        size_t ws;
        snprintf(where, sizeof where, "%s%sstderr", ctx, sep);
        if ((rc = sq_json_get_numbers(se, -INFINITY, INFINITY, SQ_CURVE_MAX_WIDTH, &out->stderr_p,
                                      &ws, file, where, err)))
            goto fail;
        if (ws != w) {
            rc = sq_error_set(err, SQ_EDATA, "%s: %s: has %zu entries but p has %zu", file, where,
                              ws, w);
            goto fail;
        }
    }

    int rows = 0;
    if ((rc = depth_matrix(obj, "p_by_depth", file, ctx, w, &out->p_by_depth, &rows, err)))
        goto fail;
    out->depth_rows = rows;
    int se_rows = 0;
    if ((rc = depth_matrix(obj, "stderr_by_depth", file, ctx, w, &out->stderr_by_depth, &se_rows,
                           err)))
        goto fail;
    if (out->stderr_by_depth && rows == 0) {
        rc = sq_error_set(err, SQ_EDATA, "%s: %s%sstderr_by_depth: given without p_by_depth",
                          file, ctx, sep);
        goto fail;
    }
    if (out->stderr_by_depth && se_rows != rows) {
        rc = sq_error_set(err, SQ_EDATA, "%s: %s%sstderr_by_depth: has %d rows but p_by_depth "
                          "has %d", file, ctx, sep, se_rows, rows);
        goto fail;
    }

    if ((rc = sq_curve_validate(out, file, ctx, err)))
        goto fail;

    double s = 0;
    for (int i = 0; i < out->width; i++)
        s += out->p[i];
    out->reject = s >= 1.0 ? 0.0 : 1.0 - s;
    double reject = out->reject;
    if ((rc = sq_json_get_number(obj, "reject", 0, &reject, file, ctx, err)))
        goto fail;
    if (fabs(reject - out->reject) > 1e-4) {
        rc = sq_error_set(err, SQ_EDATA, "%s: %s%sreject: value %.9g disagrees with 1 - sum(p) = %.9g",
                          file, ctx, sep, reject, out->reject);
        goto fail;
    }

    for (const cJSON *m = obj->child; m; m = m->next) {
        if (is_known_key(m->string))
            continue;
        if (!out->extra && !(out->extra = cJSON_CreateObject())) {
            rc = sq_error_oom(err, "curve");
            goto fail;
        }
        cJSON *copy = cJSON_Duplicate(m, 1);
        if (!copy || !cJSON_AddItemToObject(out->extra, m->string, copy)) {
            cJSON_Delete(copy);
            rc = sq_error_oom(err, "curve");
            goto fail;
        }
    }
    return SQ_OK;
fail:
    sq_curve_clear(out);
    return rc;
}

static cJSON *num_or_null(double x)
{
    return isnan(x) ? cJSON_CreateNull() : cJSON_CreateNumber(x);
}

cJSON *sq_curve_to_json(const sq_curve *c)
{
    sq_json_build b = sq_json_build_begin();
    cJSON *o = cJSON_CreateObject();
    sq_json_add(o, "name", cJSON_CreateString(c->name ? c->name : ""));
    sq_json_add(o, "mode", cJSON_CreateString(c->mode ? c->mode : "stochastic"));
    sq_json_add(o, "temperature", num_or_null(c->temperature));
    sq_json_add(o, "top_p", num_or_null(c->top_p));
    sq_json_add(o, "p", sq_json_number_array(c->p, (size_t)c->width));
    sq_json_add(o, "stderr", c->stderr_p ? sq_json_number_array(c->stderr_p, (size_t)c->width)
                                         : cJSON_CreateNull());
    sq_json_add(o, "reject", cJSON_CreateNumber(c->reject));
    if (c->depth_rows > 0) {
        cJSON *rows = cJSON_CreateArray();
        for (int r = 0; r < c->depth_rows && rows; r++)
            sq_json_append(rows, sq_json_number_array(c->p_by_depth + (size_t)r * (size_t)c->width,
                                                      (size_t)c->width));
        sq_json_add(o, "p_by_depth", rows);
        if (c->stderr_by_depth) {
            cJSON *se = cJSON_CreateArray();
            for (int r = 0; r < c->depth_rows && se; r++)
                sq_json_append(se, sq_json_number_array(c->stderr_by_depth +
                                                        (size_t)r * (size_t)c->width,
                                                        (size_t)c->width));
            sq_json_add(o, "stderr_by_depth", se);
        }
    } else {
        sq_json_add(o, "p_by_depth", cJSON_CreateNull());
    }
    sq_json_add(o, "positions", c->positions < 0 ? cJSON_CreateNull()
                                                 : cJSON_CreateNumber((double)c->positions));
    sq_json_add(o, "sequences", c->sequences < 0 ? cJSON_CreateNull()
                                                 : cJSON_CreateNumber((double)c->sequences));
    for (const cJSON *m = c->extra ? c->extra->child : NULL; m; m = m->next)
        sq_json_add(o, m->string, cJSON_Duplicate(m, 1));
    return sq_json_build_end(b, o);
}

int sq_curve_set_from_json(const cJSON *root, const char *file, sq_curve_set **out, sq_error *err)
{
    *out = NULL;
    if (!cJSON_IsObject(root))
        return sq_error_set(err, SQ_EDATA, "%s: expected a JSON object at the top level", file);
    const char *format = NULL;
    long long version = 0;
    int rc;
    if ((rc = sq_json_get_string(root, "format", 1, &format, file, "", err)))
        return rc;
    if (strcmp(format, SQ_CURVE_FORMAT) != 0)
        return sq_error_set(err, SQ_EDATA, "%s: format: \"%s\" is not \"%s\"", file, format,
                            SQ_CURVE_FORMAT);
    if ((rc = sq_json_get_int(root, "version", 1, 0, 1LL << 31, &version, file, "", err)))
        return rc;
    if (version != SQ_CURVE_VERSION)
        return sq_error_set(err, SQ_EDATA, "%s: version: %lld is not supported (this build reads "
                            "version %d)", file, version, SQ_CURVE_VERSION);
    const cJSON *curves = sq_json_field(root, "curves");
    if (!cJSON_IsArray(curves))
        return sq_error_set(err, SQ_EDATA, "%s: curves: missing or not an array", file);
    int n = cJSON_GetArraySize(curves);
    if (n == 0)
        return sq_error_set(err, SQ_EDATA, "%s: curves: empty, the file holds no curve", file);
    if (n > SQ_CURVE_MAX_CURVES)
        return sq_error_set(err, SQ_EDATA, "%s: curves: %d curves, more than the limit of %d", file,
                            n, SQ_CURVE_MAX_CURVES);
    sq_curve_set *set = calloc(1, sizeof *set);
    if (!set || !(set->curves = calloc((size_t)n, sizeof *set->curves))) {
        free(set);
        return sq_error_oom(err, "curves");
    }
    int i = 0;
    for (const cJSON *c = curves->child; c; c = c->next, i++) {
        char ctx[64];
        snprintf(ctx, sizeof ctx, "curves[%d]", i);
        if ((rc = sq_curve_from_json(c, file, ctx, &set->curves[i], err))) {
            sq_curve_set_free(set);
            return rc;
        }
        set->n = i + 1;
        for (int j = 0; j < i; j++)
            if (strcmp(set->curves[j].name, set->curves[i].name) == 0) {
                rc = sq_error_set(err, SQ_EDATA, "%s: %s.name: \"%s\" is also the name of curves[%d]",
                                  file, ctx, set->curves[i].name, j);
                sq_curve_set_free(set);
                return rc;
            }
    }
    const cJSON *src = sq_json_field(root, "source");
    if (src && !(set->source = cJSON_Duplicate(src, 1))) {
        sq_curve_set_free(set);
        return sq_error_oom(err, "source");
    }
    *out = set;
    return SQ_OK;
}

int sq_curve_set_load(const char *file, sq_curve_set **out, sq_error *err)
{
    cJSON *root;
    *out = NULL;
    int rc = sq_json_load(file, &root, err);
    if (rc)
        return rc;
    rc = sq_curve_set_from_json(root, file, out, err);
    cJSON_Delete(root);
    return rc;
}

cJSON *sq_curve_set_to_json(const sq_curve_set *set)
{
    sq_json_build b = sq_json_build_begin();
    cJSON *o = cJSON_CreateObject();
    sq_json_add(o, "format", cJSON_CreateString(SQ_CURVE_FORMAT));
    sq_json_add(o, "version", cJSON_CreateNumber(SQ_CURVE_VERSION));
    cJSON *arr = cJSON_CreateArray();
    for (int i = 0; i < set->n && arr; i++)
        sq_json_append(arr, sq_curve_to_json(&set->curves[i]));
    sq_json_add(o, "curves", arr);
    sq_json_add(o, "source", set->source ? cJSON_Duplicate(set->source, 1) : cJSON_CreateNull());
    return sq_json_build_end(b, o);
}

int sq_curve_set_save(const char *file, const sq_curve_set *set, sq_error *err)
{
    cJSON *o = sq_curve_set_to_json(set);
    int rc = sq_json_save(file, o, err);
    cJSON_Delete(o);
    return rc;
}

void sq_curve_set_free(sq_curve_set *set)
{
    if (!set)
        return;
    for (int i = 0; i < set->n; i++)
        sq_curve_clear(&set->curves[i]);
    free(set->curves);
    cJSON_Delete(set->source);
    free(set);
}

int sq_curve_set_select(const sq_curve_set *set, const char *name, const char *file,
                        const sq_curve **out, sq_error *err)
{
    *out = NULL;
    if (!name && set->n == 1) {
        *out = &set->curves[0];
        return SQ_OK;
    }
    if (name)
        for (int i = 0; i < set->n; i++)
            if (strcmp(set->curves[i].name, name) == 0) {
                *out = &set->curves[i];
                return SQ_OK;
            }
    char list[700] = "";
    size_t used = 0;
    for (int i = 0; i < set->n && used + 8 < sizeof list; i++) {
        int w = snprintf(list + used, sizeof list - used, "%s\"%s\"", i ? ", " : "",
                         set->curves[i].name);
        if (w < 0 || (size_t)w >= sizeof list - used) {
            snprintf(list + used, sizeof list - used, ", ...");
            break;
        }
        used += (size_t)w;
    }
    if (!name)
        return sq_error_set(err, SQ_EUSAGE, "%s: holds %d curves, choose one by name: %s", file,
                            set->n, list);
    return sq_error_set(err, SQ_EUSAGE, "%s: no curve named \"%s\"; the file has: %s", file, name,
                        list);
}
