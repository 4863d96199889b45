/* Exact merge of shard curve files (merge.h). */
#include "planner/accept/merge.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "libsequoia/base/json.h"
#include "planner/accept/accept.h"
#include "planner/accept/stats.h"

const char sq_accept_sparse_note[] =
    "sparse corpus: tokens outside the stored top-K count as probability 0 (an approximation)";

cJSON *sq_accept_source_json(const char *const *corpus, const char *const *sha, int n,
                             const char *draft, const char *target, long long vocab, int sparse,
                             const char *tool)
{
    sq_json_build b = sq_json_build_begin();
    cJSON *src = cJSON_CreateObject();
    sq_json_add(src, "corpus", cJSON_CreateStringArray(corpus, n));
    sq_json_add(src, "sha256", cJSON_CreateStringArray(sha, n));
    sq_json_add(src, "draft", cJSON_CreateString(draft));
    sq_json_add(src, "target", cJSON_CreateString(target));
    if (vocab >= 0)
        sq_json_add(src, "vocab_size", cJSON_CreateNumber((double)vocab));
    sq_json_add(src, "sparse", cJSON_CreateBool(sparse));
    if (sparse)
        sq_json_add(src, "note", cJSON_CreateString(sq_accept_sparse_note));
    sq_json_add(src, "tool", cJSON_CreateString(tool));
    return sq_json_build_end(b, src);
}

/* Appends the strings of src[key] to *v (*n of them so far). */
static int source_strings(const cJSON *src, const char *key, const char *file, const char ***v,
                          int *n, sq_error *err)
{
    const cJSON *a = src ? sq_json_field(src, key) : NULL;
    if (!cJSON_IsArray(a))
        return sq_error_set(err, SQ_EDATA, "%s: source.%s: missing or not an array", file, key);
    int m = cJSON_GetArraySize(a);
    const char **grown = realloc(*v, (size_t)(*n + m > 0 ? *n + m : 1) * sizeof **v);
    if (!grown)
        return sq_error_oom(err, "source");
    *v = grown;
    int i = 0;
    for (const cJSON *e = a->child; e; e = e->next, i++) {
        if (!cJSON_IsString(e))
            return sq_error_set(err, SQ_EDATA, "%s: source.%s[%d]: expected a string", file, key, i);
        (*v)[(*n)++] = e->valuestring;
    }
    return SQ_OK;
}

/* The sources of every shard: same models, disjoint corpora; the merged source in *src. */
static int merge_sources(sq_curve_set *const *sets, char *const *files, int n_files,
                         const char *tool, cJSON **src_out, sq_error *err)
{
    const char **corpus = NULL, **sha = NULL;
    int n_corpus = 0, n_sha = 0, sparse = 0, rc = SQ_OK;
    const char *draft = NULL, *target = NULL;
    for (int f = 0; f < n_files && !rc; f++) {
        const cJSON *src = sets[f]->source;
        const int before = n_sha;
        if ((rc = source_strings(src, "corpus", files[f], &corpus, &n_corpus, err)) ||
            (rc = source_strings(src, "sha256", files[f], &sha, &n_sha, err)))
            break;
        if (n_sha != n_corpus) {
            rc = sq_error_set(err, SQ_EDATA, "%s: source.sha256: %d entries but source.corpus has "
                              "%d", files[f], n_sha - before, n_corpus - before);
            break;
        }
        for (int i = before; i < n_sha && !rc; i++)
            for (int j = 0; j < i && !rc; j++)
                if (strcmp(sha[i], sha[j]) == 0)
                    rc = sq_error_set(err, SQ_EDATA, "%s: source.sha256[%d]: corpus %s was already "
                                      "counted (as %s): the shards are not disjoint", files[f],
                                      i - before, corpus[i], corpus[j]);
        const char *d = NULL, *t = NULL;
        if (rc || (rc = sq_json_get_string(src, "draft", 1, &d, files[f], "source", err)) ||
            (rc = sq_json_get_string(src, "target", 1, &t, files[f], "source", err)))
            break;
        if (f == 0) {
            draft = d;
            target = t;
        } else if (strcmp(d, draft) || strcmp(t, target)) {
            rc = sq_error_set(err, SQ_EDATA, "%s: source: models %s -> %s differ from %s's %s -> "
                              "%s", files[f], d, t, files[0], draft, target);
        }
        sparse |= cJSON_IsTrue(sq_json_field(src, "sparse"));
    }
    if (!rc) {
        const cJSON *vs = sq_json_field(sets[0]->source, "vocab_size");
        long long vocab = cJSON_IsNumber(vs) ? (long long)vs->valuedouble : -1;
        if (!(*src_out = sq_accept_source_json(corpus, sha, n_corpus, draft, target, vocab, sparse,
                                               tool)))
            rc = sq_error_oom(err, "source");
    }
    free(corpus);
    free(sha);
    return rc;
}

/* The curve named like sets[0]'s c0, merged over every shard. */
static int merge_curve(sq_curve_set *const *sets, char *const *files, int n_files,
                       const sq_curve *c0, sq_curve *out, sq_error *err)
{
    sq_accept_stats *total = NULL;
    sq_accept_curve_stats first = {0};
    int seed_same = 1, rc = SQ_OK;
    const char *unit = NULL;
    /* the shards' curves, for the depth rows (issue 27) */
    const sq_curve **shard = calloc((size_t)n_files, sizeof *shard);
    int *shard_idx = calloc((size_t)n_files, sizeof *shard_idx);
    if (!shard || !shard_idx)
        rc = sq_error_oom(err, "curves");
    for (int f = 0; f < n_files && !rc; f++) {
        int idx = -1;
        for (int j = 0; j < sets[f]->n; j++)
            if (strcmp(sets[f]->curves[j].name, c0->name) == 0)
                idx = j;
        if (idx < 0) {
            rc = sq_error_set(err, SQ_EDATA, "%s: curves: no curve named \"%s\" (every shard must "
                              "hold the same curves; %s has it)", files[f], c0->name, files[0]);
            break;
        }
        const sq_curve *c = &sets[f]->curves[idx];
        shard[f] = c;
        shard_idx[f] = idx;
        if (strcmp(c->mode, c0->mode) || !(c->temperature == c0->temperature) ||
            !(c->top_p == c0->top_p || (isnan(c->top_p) && isnan(c0->top_p))) ||
            c->width != c0->width) {
            rc = sq_error_set(err, SQ_EDATA, "%s: curves[%d]: \"%s\" has a different mode, "
                              "temperature, top_p or width than in %s", files[f], idx, c->name,
                              files[0]);
            break;
        }
        /* a shard whose statistics do not reproduce its own p is refused, as --compare refuses
         * it: its sums, not its p, are what the merge adds */
        sq_accept_curve_stats cs;
        if ((rc = sq_accept_curve_stats_verify(c, files[f], idx, err)) ||
            (rc = sq_accept_curve_stats_read(c, files[f], idx, &cs, err)))
            break;
        if (f == 0) {
            first = cs;
            unit = cs.unit;
            total = cs.stats;
            continue;
        }
        if (cs.samples != first.samples)
            rc = sq_error_set(err, SQ_EDATA, "%s: curves[%d].stats.samples: %d, but %s used %d "
                              "(merge shards computed with the same settings)", files[f], idx,
                              cs.samples, files[0], first.samples);
        if (!cs.seed || !first.seed || !cJSON_Compare(cs.seed, first.seed, 1))
            seed_same = 0;
        if (strcmp(cs.unit, unit) != 0)
            unit = "mixed";
        if (!rc)
            sq_accept_stats_merge(total, cs.stats);
        sq_accept_stats_free(cs.stats);
    }
    if (!rc) {
        sq_mode mode;
        if (sq_mode_parse(c0->mode, &mode) != 0)
            mode = SQ_MODE_STOCHASTIC;
        sq_accept_config cfg = {mode, c0->temperature, c0->top_p};
        cJSON *null = cJSON_CreateNull();
        if (!null)
            rc = sq_error_oom(err, "curve");
        else
            rc = sq_accept_curve_from_stats(out, c0->name, &cfg, total, first.samples,
                                            seed_same ? first.seed : null, unit, err);
        cJSON_Delete(null);
        if (!rc)
            rc = sq_accept_curve_merge_depths(out, shard, files, shard_idx, n_files, err);
    }
    free(shard);
    free(shard_idx);
    sq_accept_stats_free(total);
    return rc;
}

int sq_accept_merge(sq_curve_set *const *sets, char *const *files, int n_files, const char *tool,
                    sq_curve_set *out, sq_error *err)
{
    *out = (sq_curve_set){0};
    int rc = merge_sources(sets, files, n_files, tool, &out->source, err);
    if (rc)
        return rc;
    out->curves = calloc((size_t)(sets[0]->n > 0 ? sets[0]->n : 1), sizeof *out->curves);
    if (!out->curves)
        rc = sq_error_oom(err, "curves");
    for (int i = 0; i < sets[0]->n && !rc; i++) {
        if ((rc = merge_curve(sets, files, n_files, &sets[0]->curves[i], &out->curves[i], err)))
            break;
        out->n = i + 1;
    }
    for (int f = 1; f < n_files && !rc; f++)
        for (int j = 0; j < sets[f]->n && !rc; j++) {
            int found = 0;
            for (int i = 0; i < sets[0]->n; i++)
                found |= strcmp(sets[0]->curves[i].name, sets[f]->curves[j].name) == 0;
            if (!found)
                rc = sq_error_set(err, SQ_EDATA, "%s: curves[%d]: \"%s\" is not in %s (every shard "
                                  "must hold the same curves)", files[f], j,
                                  sets[f]->curves[j].name, files[0]);
        }
    if (rc) {
        for (int i = 0; i < out->n; i++)
            sq_curve_clear(&out->curves[i]);
        free(out->curves);
        cJSON_Delete(out->source);
        *out = (sq_curve_set){0};
    }
    return rc;
}
