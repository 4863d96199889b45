/* Profiles pooled over a measured period: profiler/merge.h. */
#include "profiler/merge.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "libsequoia/base/stats.h"

/* The first member (key) in which the objects a and b differ, or NULL when they are equal; a
 * non-object (or NULL) against anything else is the whole (""). */
static const char *json_first_diff(const cJSON *a, const cJSON *b)
{
    if (!a && !b)
        return NULL;
    if (!a || !b || !cJSON_IsObject(a) || !cJSON_IsObject(b))
        return (a && b && cJSON_Compare(a, b, 1)) ? NULL : "";
    for (const cJSON *x = a->child; x; x = x->next) {
        const cJSON *y = cJSON_GetObjectItemCaseSensitive(b, x->string);
        if (!y || !cJSON_Compare(x, y, 1))
            return x->string;
    }
    for (const cJSON *y = b->child; y; y = y->next)
        if (!cJSON_GetObjectItemCaseSensitive(a, y->string))
            return y->string;
    return NULL;
}

/* A short text of obj's member key ("absent" when it has none), into buf. */
static void json_member_text(const cJSON *obj, const char *key, char *buf, size_t cap)
{
    const cJSON *v = !obj ? NULL : *key ? cJSON_GetObjectItemCaseSensitive(obj, key) : obj;
    char *s = v ? cJSON_PrintUnformatted(v) : NULL;
    snprintf(buf, cap, "%.200s", s ? s : v ? "?" : "absent");
    free(s);
}

static int differs(sq_error *err, const char *file, const char *field, const char *mine,
                   const char *file0, const char *theirs)
{
    return sq_error_set(err, SQ_EDATA, "%s: %s: %s, but %s has %s: --merge pools profiles of one "
                        "measurement setup (the same model, backend, dtype, device, threads, "
                        "prefix, batch sizes and token counts, and step section)", file, field,
                        mine, file0, theirs);
}

/* A description (the model, or the step section's draft) that must be the same. */
static int same_json(const cJSON *a, const cJSON *b, const char *what, const char *file,
                     const char *file0, sq_error *err)
{
    const char *key = json_first_diff(b, a);
    if (!key)
        return SQ_OK;
    char field[160], mine[240], theirs[240];
    snprintf(field, sizeof field, "%s%s%.100s", what, *key ? "." : "", key);
    json_member_text(a, key, mine, sizeof mine);
    json_member_text(b, key, theirs, sizeof theirs);
    return differs(err, file, field, mine, file0, theirs);
}

/* The points of one table must have the same (batch, tokens) as the first source's. */
static int same_points(const sq_profile_point *a, int na, const sq_profile_point *b, int nb,
                       const char *table, const char *file, const char *file0, sq_error *err)
{
    char field[96], mine[96], theirs[96];
    for (int i = 0; i < na || i < nb; i++) {
        if (i < na && i < nb && a[i].batch == b[i].batch && a[i].tokens == b[i].tokens)
            continue;
        snprintf(field, sizeof field, "%s[%d]", table, i);
        if (i < na)
            snprintf(mine, sizeof mine, "batch %d, %d tokens", a[i].batch, a[i].tokens);
        else
            snprintf(mine, sizeof mine, "absent (%d points)", na);
        if (i < nb)
            snprintf(theirs, sizeof theirs, "batch %d, %d tokens", b[i].batch, b[i].tokens);
        else
            snprintf(theirs, sizeof theirs, "absent (%d points)", nb);
        return differs(err, file, field, mine, file0, theirs);
    }
    return SQ_OK;
}

/* Everything but the times agrees with in[0] (merge.h). */
static int check_same(const sq_profile *p, const char *file, const sq_profile *p0,
                      const char *file0, sq_error *err)
{
    static const char *const names[] = {"backend", "dtype", "device"};
    const char *const mine[] = {p->backend, p->dtype, p->device};
    const char *const theirs[] = {p0->backend, p0->dtype, p0->device};
    char a[64], b[64];
    int rc;
    if ((rc = same_json(p->model, p0->model, "model", file, file0, err)))
        return rc;
    for (int k = 0; k < 3; k++)
        if (strcmp(mine[k] ? mine[k] : "", theirs[k] ? theirs[k] : ""))
            return differs(err, file, names[k], mine[k] ? mine[k] : "absent", file0,
                           theirs[k] ? theirs[k] : "absent");
    if (p->threads != p0->threads || p->prefix != p0->prefix) {
        int t = p->threads != p0->threads;
        snprintf(a, sizeof a, "%d", t ? p->threads : p->prefix);
        snprintf(b, sizeof b, "%d", t ? p0->threads : p0->prefix);
        return differs(err, file, t ? "threads" : "prefix", a, file0, b);
    }
    if ((rc = same_points(p->points, p->n, p0->points, p0->n, "points", file, file0, err)))
        return rc;
    if (!p->step != !p0->step)
        return differs(err, file, "step", p->step ? "present" : "absent", file0,
                       p0->step ? "present" : "absent");
    if (!p->step)
        return SQ_OK;
    if ((rc = same_json(p->step->draft, p0->step->draft, "step.draft", file, file0, err)))
        return rc;
    static const sq_step_part keyed_by_n[] = {SQ_STEP_TARGET, SQ_STEP_OVERHEAD};
    for (int k = 0; k < 2; k++) {
        sq_step_part part = keyed_by_n[k];
        char table[32];
        snprintf(table, sizeof table, "step.%s", sq_step_part_name(part));
        if ((rc = same_points(p->step->pts[part], p->step->n[part], p0->step->pts[part],
                              p0->step->n[part], table, file, file0, err)))
            return rc;
    }
    return SQ_OK;
}

/* The pool of one point over its sources q[0..n) (n >= 1; merge.h); v: scratch of n. */
static sq_profile_point pool_point(const sq_profile_point *const *q, int n, sq_merge_pool pool,
                                   double *v)
{
    sq_profile_point r = {.batch = q[0]->batch, .tokens = q[0]->tokens};
    double sum = 0.0;
    for (int i = 0; i < n; i++) {
        v[i] = q[i]->median_ms;
        sum += v[i];
    }
    r.median_ms = pool == SQ_POOL_MEAN ? sum / n : sq_quantile(v, n, 0.5);
    int m = 0;
    for (int i = 0; i < n; i++)
        if (!isnan(q[i]->p10_ms))
            v[m++] = q[i]->p10_ms;
    r.p10_ms = m ? fmin(sq_quantile(v, m, 0.5), r.median_ms) : NAN;
    m = 0;
    for (int i = 0; i < n; i++)
        if (!isnan(q[i]->p90_ms))
            v[m++] = q[i]->p90_ms;
    r.p90_ms = m ? fmax(sq_quantile(v, m, 0.5), r.median_ms) : NAN;
    long long s = 0;
    for (int i = 0; i < n; i++)
        s += q[i]->samples;
    r.samples = s > (1 << 30) ? (1 << 30) : (int)s;
    return r;
}

static int cmp_int(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

/* One step table pooled over the union of the sources' token counts (merge.h). */
static int pool_step_table(const sq_profile *const *in, int n, sq_step_part part,
                           sq_merge_pool pool, sq_profile_step *st, const sq_profile_point **q,
                           double *v)
{
    int total = 0;
    for (int s = 0; s < n; s++)
        total += in[s]->step->n[part];
    if (total == 0)
        return SQ_OK;
    int *toks = malloc((size_t)total * sizeof *toks);
    if (!toks)
        return SQ_ESOFTWARE;
    int k = 0;
    for (int s = 0; s < n; s++)
        for (int i = 0; i < in[s]->step->n[part]; i++)
            toks[k++] = in[s]->step->pts[part][i].tokens;
    qsort(toks, (size_t)total, sizeof *toks, cmp_int);
    int u = 0;
    for (int i = 0; i < total; i++)
        if (u == 0 || toks[i] != toks[u - 1])
            toks[u++] = toks[i];
    st->pts[part] = calloc((size_t)u, sizeof *st->pts[part]);
    if (!st->pts[part]) {
        free(toks);
        return SQ_ESOFTWARE;
    }
    for (int t = 0; t < u; t++) {
        int m = 0;
        for (int s = 0; s < n; s++)
            for (int i = 0; i < in[s]->step->n[part]; i++)
                if (in[s]->step->pts[part][i].tokens == toks[t]) {
                    q[m++] = &in[s]->step->pts[part][i];
                    break;
                }
        st->pts[part][t] = pool_point(q, m, pool, v);
    }
    st->n[part] = u;
    free(toks);
    return SQ_OK;
}

int sq_profile_merge(const sq_profile *const *in, const char *const *files, int n,
                     sq_merge_pool pool, sq_profile **out, sq_merge_drift *drift, sq_error *err)
{
    *out = NULL;
    if (n < 1)
        return sq_error_set(err, SQ_EUSAGE, "--merge: no profile to merge");
    int rc;
    for (int s = 1; s < n; s++)
        if ((rc = check_same(in[s], files[s], in[0], files[0], err)))
            return rc;
    const sq_profile *p0 = in[0];
    sq_profile *r = calloc(1, sizeof *r);
    const sq_profile_point **q = malloc((size_t)n * sizeof *q);
    double *v = malloc((size_t)n * sizeof *v);
    double *spread = malloc((size_t)p0->n * sizeof *spread);
    if (!r || !q || !v || !spread)
        goto oom;
    r->points = calloc((size_t)p0->n, sizeof *r->points);
    if (sq_profile_copy_setup(r, p0) || !r->points)
        goto oom;
    r->n = p0->n;
    sq_merge_drift d = {.max = 0, .max_batch = p0->points[0].batch,
                        .max_tokens = p0->points[0].tokens};
    for (int i = 0; i < p0->n; i++) {
        double lo = INFINITY, hi = 0;
        for (int s = 0; s < n; s++) {
            q[s] = &in[s]->points[i];
            lo = fmin(lo, q[s]->median_ms);
            hi = fmax(hi, q[s]->median_ms);
        }
        r->points[i] = pool_point(q, n, pool, v);
        spread[i] = (hi - lo) / r->points[i].median_ms;
        if (spread[i] > d.max) {
            d.max = spread[i];
            d.max_batch = r->points[i].batch;
            d.max_tokens = r->points[i].tokens;
        }
    }
    d.median = sq_quantile(spread, p0->n, 0.5);
    if (p0->step) {
        if (!(r->step = calloc(1, sizeof *r->step)))
            goto oom;
        if (p0->step->draft && !(r->step->draft = cJSON_Duplicate(p0->step->draft, 1)))
            goto oom;
        for (int k = 0; k < SQ_STEP_PARTS; k++)
            if (pool_step_table(in, n, (sq_step_part)k, pool, r->step, q, v))
                goto oom;
        /* the timed steps' context: the mean of the sources' means, the least and the most of
         * all; unknown (all 0) when any source does not say */
        sq_profile_step *st = r->step;
        st->context_min = in[0]->step->context_min;
        for (int s = 0; s < n; s++) {
            const sq_profile_step *src = in[s]->step;
            if (src->context_max == 0) {
                st->context_mean = 0.0;
                st->context_min = st->context_max = 0;
                break;
            }
            st->context_mean += src->context_mean / n;
            st->context_min = src->context_min < st->context_min ? src->context_min
                                                                 : st->context_min;
            st->context_max = src->context_max > st->context_max ? src->context_max
                                                                 : st->context_max;
        }
    }
    if ((rc = sq_profile_validate(r, "the merged profile", err))) {
        sq_profile_free(r);
        r = NULL;
    }
    free(q);
    free(v);
    free(spread);
    if (!rc) {
        *out = r;
        if (drift)
            *drift = d;
    }
    return rc;
oom:
    sq_profile_free(r);
    free(q);
    free(v);
    free(spread);
    return sq_error_oom(err, "the merged profile");
}
