/* The "dynamic" object of a curves file, checked (dynstats.h; docs/formats.md, "dynamic"). */
#include "libsequoia/format/dynstats.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "libsequoia/base/json.h"

/* x is a number holding an integer in [lo, hi]. */
static int is_int_in(const cJSON *x, double lo, double hi)
{
    return cJSON_IsNumber(x) && x->valuedouble >= lo && x->valuedouble <= hi &&
           x->valuedouble == floor(x->valuedouble);
}

/* An optional integer member in [lo, hi] (*out unchanged when absent); *present says which. */
static int opt_int(const cJSON *d, const char *key, double lo, double hi, const char *what,
                   double *out, int *present, const char *file, sq_error *err)
{
    const cJSON *x = sq_json_field(d, key);
    *present = x != NULL;
    if (!x)
        return SQ_OK;
    if (!is_int_in(x, lo, hi))
        return sq_error_set(err, SQ_EDATA, "%s: dynamic.%s: expected %s", file, key, what);
    *out = x->valuedouble;
    return SQ_OK;
}

/* arr: exactly n rows of K probabilities, each row summing to at most SQ_DYNSTATS_ROW_SUM and,
 * when `sorted`, in decreasing order. */
static int check_rows(const cJSON *arr, int n, int K, int sorted, const char *file,
                      const char *ctx, sq_error *err)
{
    if (!cJSON_IsArray(arr) || cJSON_GetArraySize(arr) != n)
        return sq_error_set(err, SQ_EDATA, "%s: %s: expected an array of %d rows (one per "
                            "sample)", file, ctx, n);
    int rc = sq_json_get_unit_rows(arr, K, SQ_DYNSTATS_ROW_SUM, NULL, file, ctx, err);
    if (rc || !sorted)
        return rc;
    int i = 0;
    const cJSON *row;
    cJSON_ArrayForEach(row, arr) {
        for (const cJSON *x = row->child; x && x->next; x = x->next)
            if (x->next->valuedouble > x->valuedouble)
                return sq_error_set(err, SQ_EDATA, "%s: %s[%d]: not sorted in decreasing order",
                                    file, ctx, i);
        i++;
    }
    return SQ_OK;
}

/* segments: [row0, length, corpus] each; *n their total length. */
static int check_segments(const cJSON *segs, int corpora, const char *file, int *n,
                          sq_error *err)
{
    if (!cJSON_IsArray(segs) || cJSON_GetArraySize(segs) < 1)
        return sq_error_set(err, SQ_EDATA, "%s: dynamic.segments: expected a non-empty array",
                            file);
    int g = 0, hi = corpora > 0 ? corpora : SQ_DYNSTATS_MAX_CORPORA;
    long long total = 0;
    const cJSON *sg;
    cJSON_ArrayForEach(sg, segs) {
        const cJSON *r0 = cJSON_GetArrayItem(sg, 0), *l = cJSON_GetArrayItem(sg, 1);
        const cJSON *c = cJSON_GetArrayItem(sg, 2);
        if (!cJSON_IsArray(sg) || cJSON_GetArraySize(sg) != 3 ||
            !is_int_in(l, 1, SQ_DYNSTATS_MAX_SAMPLES))
            return sq_error_set(err, SQ_EDATA, "%s: dynamic.segments[%d]: expected [row0, "
                                "length >= 1, corpus]", file, g);
        if (!is_int_in(r0, 0, INT_MAX))
            return sq_error_set(err, SQ_EDATA, "%s: dynamic.segments[%d][0]: expected the first "
                                "row, an integer in [0, %d]", file, g, INT_MAX);
        if (!is_int_in(c, 0, hi - 1))
            return sq_error_set(err, SQ_EDATA, "%s: dynamic.segments[%d][2]: expected a corpus "
                                "index, an integer in [0, %d)%s", file, g, hi,
                                corpora > 0 ? " (dynamic.corpora)" : "");
        total += l->valueint;
        if (total > SQ_DYNSTATS_MAX_SAMPLES)
            return sq_error_set(err, SQ_EDATA, "%s: dynamic.segments: more than 10^7 samples",
                                file);
        g++;
    }
    *n = (int)total;
    return SQ_OK;
}

static int check_next_rank(const cJSON *nr, int n, int K, const char *file, sq_error *err)
{
    if (!cJSON_IsArray(nr) || cJSON_GetArraySize(nr) != n)
        return sq_error_set(err, SQ_EDATA, "%s: dynamic.next_rank: expected %d ranks", file, n);
    int i = 0;
    const cJSON *x;
    cJSON_ArrayForEach(x, nr) {
        if (!is_int_in(x, -1, K - 1))
            return sq_error_set(err, SQ_EDATA, "%s: dynamic.next_rank[%d]: expected an integer "
                                "in [-1, %d]", file, i, K - 1);
        i++;
    }
    return SQ_OK;
}

/* calibration: bins, then per configuration of `accept` a count and a mean per bin and rank. */
static int check_calibration(const cJSON *cal, const cJSON *accept, int K, const char *file,
                             sq_error *err)
{
    if (!cJSON_IsObject(cal))
        return sq_error_set(err, SQ_EDATA, "%s: dynamic.calibration: expected an object", file);
    const cJSON *bins = sq_json_field(cal, "bins"), *x;
    int nb = cJSON_GetArraySize(bins), i = 0;
    double last = -1;
    if (!cJSON_IsArray(bins) || nb < 2)
        return sq_error_set(err, SQ_EDATA, "%s: dynamic.calibration.bins: expected an array of "
                            "at least 2 bin edges", file);
    cJSON_ArrayForEach(x, bins) {
        if (!cJSON_IsNumber(x) || !(x->valuedouble > last && x->valuedouble <= 1))
            return sq_error_set(err, SQ_EDATA, "%s: dynamic.calibration.bins[%d]: expected "
                                "increasing bin edges in [0, 1]", file, i);
        last = x->valuedouble;
        i++;
    }
    const cJSON *c;
    cJSON_ArrayForEach(c, cal) {
        if (strcmp(c->string, "bins") == 0)
            continue;
        char ctx[300];
        snprintf(ctx, sizeof ctx, "dynamic.calibration.%s", c->string);
        if (!sq_json_field(accept, c->string))
            return sq_error_set(err, SQ_EDATA, "%s: %s: not a configuration of dynamic.accept",
                                file, ctx);
        const cJSON *cnt = sq_json_field(c, "count"), *mean = sq_json_field(c, "mean_accept");
        if (!cJSON_IsObject(c) || !cJSON_IsArray(cnt) || cJSON_GetArraySize(cnt) != nb - 1 ||
            !cJSON_IsArray(mean) || cJSON_GetArraySize(mean) != nb - 1)
            return sq_error_set(err, SQ_EDATA, "%s: %s: expected \"count\" and \"mean_accept\", "
                                "%d rows each (one per bin)", file, ctx, nb - 1);
        snprintf(ctx, sizeof ctx, "dynamic.calibration.%s.mean_accept", c->string);
        int rc = sq_json_get_unit_rows(mean, K, 0, NULL, file, ctx, err);
        if (rc)
            return rc;
        int b = 0;
        const cJSON *row;
        cJSON_ArrayForEach(row, cnt) {
            int k = 0;
            if (!cJSON_IsArray(row) || cJSON_GetArraySize(row) != K)
                return sq_error_set(err, SQ_EDATA, "%s: dynamic.calibration.%s.count[%d]: "
                                    "expected %d numbers", file, c->string, b, K);
            cJSON_ArrayForEach(x, row) {
                if (!is_int_in(x, 0, 0x1p53))
                    return sq_error_set(err, SQ_EDATA, "%s: dynamic.calibration.%s.count[%d][%d]: "
                                        "expected a count, an integer >= 0", file, c->string, b,
                                        k);
                k++;
            }
            b++;
        }
    }
    return SQ_OK;
}

int sq_dynstats_check(const cJSON *d, const char *file, sq_dynstats_shape *shape, sq_error *err)
{
    sq_dynstats_shape sh = {0};
    if (shape)
        *shape = sh;
    if (!cJSON_IsObject(d))
        return sq_error_set(err, SQ_EDATA, "%s: dynamic: expected an object", file);
    const char *fmt = NULL;
    long long K = 0, ver = 0;
    double temp = 1, seed = 0, corpora = 0;
    int present, rc;
    if ((rc = sq_json_get_string(d, "format", 1, &fmt, file, "dynamic", err)) ||
        (rc = sq_json_get_int(d, "version", 1, 1, SQ_DYNSTATS_VERSION, &ver, file, "dynamic",
                              err)) ||
        (rc = sq_json_get_int(d, "topk", 1, 1, SQ_DYNSTATS_MAX_TOPK, &K, file, "dynamic", err)))
        return rc;
    if (strcmp(fmt, SQ_DYNSTATS_FORMAT) != 0)
        return sq_error_set(err, SQ_EDATA, "%s: dynamic.format: \"%s\", expected \"%s\"", file,
                            fmt, SQ_DYNSTATS_FORMAT);
    sh.topk = (int)K;
    if ((rc = sq_json_get_number(d, "draft_temperature", 0, &temp, file, "dynamic", err)))
        return rc;
    if (temp != 1)
        return sq_error_set(err, SQ_EDATA, "%s: dynamic.draft_temperature: %g, expected 1 (the "
                            "engines score their trees with the draft's softmax at temperature "
                            "1, which is what the prediction assumes)", file, temp);
    if ((rc = opt_int(d, "seed", 0, 0x1p64 - 0x1p11, "an integer seed in [0, 2^64)", &seed,
                      &sh.has_seed, file, err)) ||
        (rc = opt_int(d, "corpora", 1, SQ_DYNSTATS_MAX_CORPORA, "a count of corpora >= 1",
                      &corpora, &present, file, err)))
        return rc;
    sh.corpora = (int)corpora;
    if ((rc = check_segments(sq_json_field(d, "segments"), sh.corpora, file, &sh.samples, err)))
        return rc;
    sh.segments = cJSON_GetArraySize(sq_json_field(d, "segments"));
    const cJSON *acc = sq_json_field(d, "accept");
    if (!cJSON_IsObject(acc) || !acc->child)
        return sq_error_set(err, SQ_EDATA, "%s: dynamic.accept: expected an object of "
                            "configurations", file);
    if ((rc = check_rows(sq_json_field(d, "draft_topk"), sh.samples, sh.topk, 1, file,
                         "dynamic.draft_topk", err)))
        return rc;
    const cJSON *c;
    cJSON_ArrayForEach(c, acc) {
        char ctx[300];
        snprintf(ctx, sizeof ctx, "dynamic.accept.%s", c->string);
        if ((rc = check_rows(c, sh.samples, sh.topk, 0, file, ctx, err)))
            return rc;
        sh.configs++;
    }
    const cJSON *off = sq_json_field(d, "offpath_topk");
    if (off) {
        sh.offpath = cJSON_GetArraySize(off);
        if (!cJSON_IsArray(off) || sh.offpath < 1 || sh.offpath > SQ_DYNSTATS_MAX_SAMPLES)
            return sq_error_set(err, SQ_EDATA, "%s: dynamic.offpath_topk: expected a non-empty "
                                "array of rows", file);
        if ((rc = check_rows(off, sh.offpath, sh.topk, 1, file, "dynamic.offpath_topk", err)))
            return rc;
    }
    const cJSON *nr = sq_json_field(d, "next_rank");
    if (nr && (rc = check_next_rank(nr, sh.samples, sh.topk, file, err)))
        return rc;
    sh.next_rank = nr != NULL;
    const cJSON *cal = sq_json_field(d, "calibration");
    if (cal && (rc = check_calibration(cal, acc, sh.topk, file, err)))
        return rc;
    if (shape)
        *shape = sh;
    return SQ_OK;
}
