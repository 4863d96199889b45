/* The corpus statistics of the dynamic-tree prediction (dynstats.h; docs/planning.md, "Dynamic
 * trees"). The sampled rows are computed inside sq_accept_run's pass (sq_dynstats_hook: each row
 * read and decoded once, in its worker threads, with the distributions the curves computed), or
 * by sq_dynstats_run's own pass; both call dyn_row, and give the same bits. */
#include "planner/accept/dynstats.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <gsl/gsl_rng.h>

#include "libsequoia/base/io.h"
#include "libsequoia/base/json.h"

sq_dynstats_params sq_dynstats_default_params(void)
{
    return (sq_dynstats_params){.topk = 8, .segment = 256, .max_samples = 4096, .skip = 0,
                                .samples = 1, .seed = 0, .branch_every = 4};
}

/* 5 significant digits, so that the file stays small and byte-stable. */
static double round5(double v)
{
    char buf[32];
    snprintf(buf, sizeof buf, "%.5g", v);
    return strtod(buf, NULL);
}

static uint64_t mix64(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

/* The first v' = v + 8t (t >= 0) whose block p[v' .. v' + 8) holds a value above thr, or the
 * first with v' + 8 > V. The same decisions on every code path (sq_rule_isa). */
static int skip_blocks_scalar(const double *p, int v, int V, double thr)
{
    for (; v + 8 <= V; v += 8) {
        int any = 0;
        for (int j = 0; j < 8; j++)
            any |= p[v + j] > thr;
        if (any)
            break;
    }
    return v;
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define SQ_DYNSTATS_X86 1
__attribute__((target("avx2"))) static int skip_blocks_avx2(const double *p, int v, int V,
                                                           double thr)
{
    const __m256d t = _mm256_set1_pd(thr);
    for (; v + 8 <= V; v += 8) {
        __m256d a = _mm256_cmp_pd(_mm256_loadu_pd(p + v), t, _CMP_GT_OQ);
        __m256d b = _mm256_cmp_pd(_mm256_loadu_pd(p + v + 4), t, _CMP_GT_OQ);
        if (_mm256_movemask_pd(_mm256_or_pd(a, b)))
            break;
    }
    return v;
}

__attribute__((target("avx512f"))) static int skip_blocks_avx512(const double *p, int v, int V,
                                                                double thr)
{
    const __m512d t = _mm512_set1_pd(thr);
    for (; v + 8 <= V; v += 8)
        if (_mm512_cmp_pd_mask(_mm512_loadu_pd(p + v), t, _CMP_GT_OQ))
            break;
    return v;
}
#endif

static int skip_blocks(const double *p, int v, int V, double thr)
{
#ifdef SQ_DYNSTATS_X86
    const int isa = sq_rule_isa();
    if (isa >= SQ_RULE_ISA_AVX512)
        return skip_blocks_avx512(p, v, V, thr);
    if (isa >= SQ_RULE_ISA_AVX2)
        return skip_blocks_avx2(p, v, V, thr);
#endif
    return skip_blocks_scalar(p, v, V, thr);
}

/* The K largest of p[0..V) in decreasing order (ties: the lower index first, as the draft's
 * top-K order of libsequoia/verify/rule.h), their values into out and their ids into ids
 * (K <= SQ_DYNSTATS_MAX_TOPK + 1). */
static void top_values(const double *p, int V, int K, double *out, int *ids)
{
    int idx[SQ_DYNSTATS_MAX_TOPK + 1];
    int n = 0;
    for (int v = 0; v < V; v++) {
        if (n == K && (v & 7) == 0 && v + 8 <= V) {
            /* blocks of 8 below the K-th largest are skipped whole */
            v = skip_blocks(p, v, V, p[idx[K - 1]]);
            if (v >= V)
                break;
        }
        if (n == K && !(p[v] > p[idx[n - 1]]))
            continue;
        int j = n < K ? n++ : K - 1;
        while (j > 0 && p[v] > p[idx[j - 1]]) {
            idx[j] = idx[j - 1];
            j--;
        }
        idx[j] = v;
    }
    for (int k = 0; k < K; k++) {
        out[k] = k < n ? p[idx[k]] : 0.0;
        ids[k] = k < n ? idx[k] : -1;
    }
}

/* The draft's top K at temperature 1 (values and ids, as top_values of the distribution
 * sq_accept_probs(d, V, 1, 1) gives; dynstats.h). Issue 27: without normalising all V values.
 * The top K + 1 of the numerators e are taken and divided by their sum (the same division as the
 * normalisation): when the K + 1 quotients decrease strictly, they are the distribution's top
 * K + 1 in the same order (the division is monotone, and every other token's quotient is at
 * most the (K + 1)-th), so the first K are the answer. Otherwise (quotients tied by rounding, a
 * vocabulary of at most K tokens, a row without a finite largest logit) the whole distribution
 * is computed and searched, as before. Q1: V doubles of scratch. */
void sq_dynstats_draft_topk(const float *d, int V, int K, double *Q1, sq_accept_ws *ws,
                            double *out, int *ids)
{
    double sum = K < V ? sq_softmax_numerators(d, V, 1.0, Q1) : 0.0;
    if (sum > 0) {
        double v[SQ_DYNSTATS_MAX_TOPK + 1];
        int id[SQ_DYNSTATS_MAX_TOPK + 1];
        top_values(Q1, V, K + 1, v, id);
        int strict = 1;
        for (int k = 0; k <= K; k++) {
            v[k] /= sum;
            strict &= k == 0 || v[k] < v[k - 1];
        }
        if (strict) {
            memcpy(out, v, (size_t)K * sizeof *out);
            memcpy(ids, id, (size_t)K * sizeof *ids);
            return;
        }
    }
    sq_accept_probs(d, V, 1.0, 1.0, Q1, ws);
    top_values(Q1, V, K, out, ids);
}

typedef struct seg {
    int file;
    int64_t row0;
    int len;
} seg;

/* Segments of one corpus: starts spread evenly (stride) over the usable positions (each
 * sequence's, past its first `skip`), clipped at sequence ends. */
static int plan_segments(const int64_t *off, int64_t n_seq, int S, int skip, int budget, int file,
                         seg **segs, int *n_segs, int *cap, sq_error *err)
{
    int64_t usable = 0;
    for (int64_t s = 0; s < n_seq; s++)
        usable += off[s + 1] - off[s] > skip ? off[s + 1] - off[s] - skip : 0;
    if (budget <= 0 || usable <= 0)
        return SQ_OK;
    int64_t want = (budget + S - 1) / S;
    int64_t stride = usable / (want > 0 ? want : 1);
    if (stride < S)
        stride = S;
    int taken = 0;
    int64_t s = 0, vbase = 0;   /* sequence s's usable rows start at virtual position vbase */
    /* stride S (the budget covers every usable position): one segment after the other */
    for (int64_t v = 0, len = 0; v < usable && taken < budget; v += stride == S ? len : stride) {
        for (;;) {
            int64_t u = off[s + 1] - off[s] > skip ? off[s + 1] - off[s] - skip : 0;
            if (v < vbase + u)
                break;
            vbase += u;
            s++;
        }
        int64_t row = off[s] + skip + (v - vbase), end = off[s + 1];
        len = end - row;
        if (len > S)
            len = S;
        if (len > budget - taken)
            len = budget - taken;
        if (len <= 0)
            continue;
        if (*n_segs == *cap) {
            int nc = *cap ? 2 * *cap : 64;
            seg *g = realloc(*segs, (size_t)nc * sizeof *g);
            if (!g)
                return sq_error_oom(err, "dynamic statistics' segments");
            *segs = g;
            *cap = nc;
        }
        (*segs)[(*n_segs)++] = (seg){file, row, (int)len};
        taken += (int)len;
    }
    return SQ_OK;
}

/* The "dynamic" object. segs: (n_segs, 3) row0, length, corpus index; q (n, K); a (n_cfg, n, K),
 * all rounded already. */
static cJSON *build_json(int K, uint64_t seed, int n_files, const int *segs, int n_segs,
                         const double *q, const int *nrank, int n, const char *const *names,
                         int n_cfg, const double *a)
{
    sq_json_build b = sq_json_build_begin();
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "format", SQ_DYNSTATS_FORMAT);
    cJSON_AddNumberToObject(root, "version", SQ_DYNSTATS_VERSION);
    cJSON_AddNumberToObject(root, "topk", K);
    cJSON_AddNumberToObject(root, "draft_temperature", 1);
    cJSON_AddNumberToObject(root, "seed", (double)seed);
    cJSON_AddNumberToObject(root, "corpora", n_files);
    cJSON *jseg = cJSON_CreateArray();
    for (int i = 0; i < n_segs; i++)
        sq_json_append(jseg, sq_json_int_array(segs + 3 * i, 3));
    sq_json_add(root, "segments", jseg);
    cJSON *jq = cJSON_CreateArray();
    for (int s = 0; s < n; s++)
        sq_json_append(jq, sq_json_number_array(q + (size_t)s * K, (size_t)K));
    sq_json_add(root, "draft_topk", jq);
    if (nrank)
        sq_json_add(root, "next_rank", sq_json_int_array(nrank, (size_t)n));
    cJSON *ja = cJSON_CreateObject(), *jc = cJSON_CreateObject();
    double bins[SQ_DYNSTATS_BINS + 1];
    for (int i = 0; i <= SQ_DYNSTATS_BINS; i++)
        bins[i] = (double)i / SQ_DYNSTATS_BINS;
    sq_json_add(jc, "bins", sq_json_number_array(bins, SQ_DYNSTATS_BINS + 1));
    for (int j = 0; j < n_cfg; j++) {
        cJSON *arr = cJSON_CreateArray();
        double cnt[SQ_DYNSTATS_BINS][SQ_DYNSTATS_MAX_TOPK] = {{0}};
        double sum[SQ_DYNSTATS_BINS][SQ_DYNSTATS_MAX_TOPK] = {{0}};
        for (int s = 0; s < n; s++) {
            const double *as = a + ((size_t)j * n + s) * K;
            for (int k = 0; k < K; k++) {
                int bin = (int)(q[(size_t)s * K + k] * SQ_DYNSTATS_BINS);
                bin = bin < 0 ? 0 : bin >= SQ_DYNSTATS_BINS ? SQ_DYNSTATS_BINS - 1 : bin;
                cnt[bin][k] += 1;
                sum[bin][k] += as[k];
            }
            sq_json_append(arr, sq_json_number_array(as, (size_t)K));
        }
        sq_json_add(ja, names[j], arr);
        cJSON *cc = cJSON_CreateObject(), *jn = cJSON_CreateArray(), *jm = cJSON_CreateArray();
        for (int bi = 0; bi < SQ_DYNSTATS_BINS; bi++) {
            double m[SQ_DYNSTATS_MAX_TOPK];
            for (int k = 0; k < K; k++)
                m[k] = cnt[bi][k] > 0 ? round5(sum[bi][k] / cnt[bi][k]) : 0.0;
            sq_json_append(jn, sq_json_number_array(cnt[bi], (size_t)K));
            sq_json_append(jm, sq_json_number_array(m, (size_t)K));
        }
        sq_json_add(cc, "count", jn);
        sq_json_add(cc, "mean_accept", jm);
        sq_json_add(jc, names[j], cc);
    }
    sq_json_add(root, "accept", ja);
    sq_json_add(root, "calibration", jc);
    return sq_json_build_end(b, root);
}

/* One run's statistics: the samples planned by sq_dynstats_begin, filled row by row by
 * dyn_row (in sq_accept_run's workers, or by sq_dynstats_run's own pass), finished by
 * sq_dynstats_finish. */
typedef struct dyn_thread {
    sq_accept_ws *ws;   /* (V, K) */
    gsl_rng *rng;
    double *Q1;         /* (V) the draft at temperature 1 */
    sq_accept_draw dr;  /* the draw made with the curve's (hook_draw), for (dr_row, dr_j) */
    int64_t dr_row;
    int dr_j;
    int cand[SQ_DYNSTATS_MAX_TOPK];
} dyn_thread;

struct sq_dynstats {
    sq_dynstats_params prm;
    sq_corpus *const *corpora;
    const uint64_t *keys;
    int n_files, V, K;
    sq_accept_config cfg[SQ_ACCEPT_MAX_CONFIGS];   /* the qualifying configurations */
    int n_cfg;
    int map[SQ_ACCEPT_MAX_CONFIGS];   /* the caller's configuration j -> its index here, or -1 */
    seg *segs;
    int n_segs, n;
    int *seg_first;   /* (n_files + 1) each corpus's first segment                    */
    int *seg_at;      /* (n_segs) the sample index of each segment's first position    */
    double *q;        /* (n, K) the draft's sorted top-K at temperature 1               */
    int *ids;         /* (n, K) their tokens                                            */
    double *a;        /* (n_cfg, n, K)                                                  */
    dyn_thread *th;
    int n_th;
    int file;         /* the corpus of the current pass                                 */
    sq_accept_hook hook;
};

/* The sample index of row `row` of the current corpus, or -1 when it is not sampled. */
static int sample_of(const sq_dynstats *ds, int64_t row)
{
    int lo = ds->seg_first[ds->file], hi = ds->seg_first[ds->file + 1];
    while (lo < hi) {   /* the first segment that ends past row (sorted by row0) */
        int mid = (lo + hi) / 2;
        if (ds->segs[mid].row0 + ds->segs[mid].len <= row)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo == ds->seg_first[ds->file + 1] || row < ds->segs[lo].row0)
        return -1;
    return ds->seg_at[lo] + (int)(row - ds->segs[lo].row0);
}

static int hook_wants(void *user, int64_t row)
{
    return sample_of(user, row) >= 0;
}

static int hook_begin(void *user, int threads, sq_error *err)
{
    sq_dynstats *ds = user;
    if (threads <= ds->n_th)
        return SQ_OK;
    dyn_thread *t = realloc(ds->th, (size_t)threads * sizeof *t);
    if (!t)
        return sq_error_oom(err, "dynamic statistics' threads");
    ds->th = t;
    for (; ds->n_th < threads; ds->n_th++) {
        dyn_thread *d = &ds->th[ds->n_th];
        d->dr_row = -1;
        d->dr_j = -1;
        d->ws = sq_accept_ws_new(ds->V, ds->K);
        d->rng = gsl_rng_alloc(gsl_rng_mt19937);
        d->Q1 = malloc((size_t)ds->V * sizeof *d->Q1);
        if (!d->ws || !d->rng || !d->Q1) {
            ds->n_th++;   /* freed by sq_dynstats_free */
            return sq_error_oom(err, "dynamic statistics' threads");
        }
    }
    return SQ_OK;
}

/* Sample `at`'s random stream for its configuration k: the same whichever thread draws. */
static void seed_sample(const sq_dynstats *ds, gsl_rng *rng, int64_t row, int k)
{
    gsl_rng_set(rng, (unsigned long)(mix64(ds->prm.seed ^ mix64(ds->keys[ds->file] ^
                mix64((uint64_t)row * 64 + (uint64_t)k))) | 1));
}

/* The hook's draw (sq_accept_hook.draw): a stochastic configuration with one sample per
 * position draws its candidates in the curve's pass over Q (issue 27). */
static sq_accept_draw *hook_draw(void *user, int thread, int64_t row, int j)
{
    sq_dynstats *ds = user;
    int k = ds->map[j];
    if (k < 0 || ds->cfg[k].mode != SQ_MODE_STOCHASTIC || ds->prm.samples != 1 ||
        sample_of(ds, row) < 0)
        return NULL;
    dyn_thread *th = &ds->th[thread];
    seed_sample(ds, th->rng, row, k);
    th->dr = (sq_accept_draw){.rng = th->rng, .width = ds->K, .cand = th->cand, .ws = th->ws,
                              .n = -1};
    th->dr_row = row;
    th->dr_j = j;
    return &th->dr;
}

/* The statistics of one sampled row: j = -1, the draft's top-K at temperature 1; j >= 0, the
 * acceptance vector of the caller's configuration j, P and Q its distributions (as
 * sq_accept_hook says). The same bits whichever thread computes it: each sample has its own
 * random stream. */
static void dyn_row(void *user, int thread, int64_t row, int j, const float *t, const float *d,
                    const double *P, const double *Q)
{
    sq_dynstats *ds = user;
    int at = sample_of(ds, row);
    if (at < 0)
        return;
    dyn_thread *th = &ds->th[thread];
    const int V = ds->V, K = ds->K;
    if (j < 0) {
        sq_dynstats_draft_topk(d, V, K, th->Q1, th->ws, ds->q + (size_t)at * K,
                               ds->ids + (size_t)at * K);
        return;
    }
    int k = ds->map[j];
    if (k < 0)
        return;
    double *a = ds->a + ((size_t)k * ds->n + at) * K;
    if (th->dr_row == row && th->dr_j == j && th->dr.n >= 0) {
        /* drawn along with the curve's (hook_draw): the same random numbers, the same bits */
        sq_accept_position_drawn(P, Q, V, K, th->cand, th->dr.n, a, th->ws);
        th->dr_row = -1;
        return;
    }
    seed_sample(ds, th->rng, row, k);
    sq_accept_position(&ds->cfg[k], t, d, P, Q, V, K, ds->prm.samples, th->rng, a, th->ws);
}

int sq_dynstats_begin(sq_corpus *const *corpora, const uint64_t *keys, int n_files,
                      const sq_accept_config *cfg_in, int n_cfg_in,
                      const sq_dynstats_params *prm, sq_dynstats **out, sq_error *err)
{
    *out = NULL;
    if (prm->max_samples <= 0 || n_files <= 0)
        return SQ_OK;
    if (prm->topk < 1 || prm->topk > SQ_DYNSTATS_MAX_TOPK || prm->segment < 1)
        return sq_error_set(err, SQ_EUSAGE, "dynamic statistics: topk %d (1..%d), segment %d",
                            prm->topk, SQ_DYNSTATS_MAX_TOPK, prm->segment);
    sq_dynstats *ds = calloc(1, sizeof *ds);
    if (!ds)
        return sq_error_oom(err, "dynamic statistics");
    ds->prm = *prm;
    ds->corpora = corpora;
    ds->keys = keys;
    ds->n_files = n_files;
    for (int j = 0; j < n_cfg_in; j++) {
        ds->map[j] = -1;
        if (cfg_in[j].mode != SQ_MODE_SPECINFER) {
            ds->map[j] = ds->n_cfg;
            ds->cfg[ds->n_cfg++] = cfg_in[j];
        }
    }
    if (ds->n_cfg == 0) {
        free(ds);
        return SQ_OK;
    }
    ds->V = sq_corpus_get_info(corpora[0])->vocab;
    ds->K = prm->topk < ds->V ? prm->topk : ds->V;   /* a vocabulary smaller than K: all of it */
    int cap = 0, rc = SQ_OK;
    ds->seg_first = calloc((size_t)n_files + 1, sizeof *ds->seg_first);
    if (!ds->seg_first)
        rc = sq_error_oom(err, "dynamic statistics");
    for (int f = 0; f < n_files && !rc; f++) {
        const sq_corpus_info *in = sq_corpus_get_info(corpora[f]);
        int budget = prm->max_samples;   /* per corpus: a merge of shards is then exact */
        ds->seg_first[f] = ds->n_segs;
        rc = plan_segments(sq_corpus_seq_offsets(corpora[f]), in->sequences, prm->segment,
                           prm->skip, budget, f, &ds->segs, &ds->n_segs, &cap, err);
    }
    if (!rc) {
        ds->seg_first[n_files] = ds->n_segs;
        if (!(ds->seg_at = malloc(((size_t)ds->n_segs + 1) * sizeof *ds->seg_at)))
            rc = sq_error_oom(err, "dynamic statistics");
        for (int i = 0; !rc && i < ds->n_segs; i++) {
            ds->seg_at[i] = ds->n;
            ds->n += ds->segs[i].len;
        }
    }
    const size_t nK = (size_t)ds->n * (size_t)ds->K;
    if (!rc && (!(ds->q = calloc(nK + 1, sizeof *ds->q)) ||
                !(ds->ids = calloc(nK + 1, sizeof *ds->ids)) ||
                !(ds->a = calloc(nK * (size_t)ds->n_cfg + 1, sizeof *ds->a))))
        rc = sq_error_oom(err, "dynamic statistics");
    ds->hook = (sq_accept_hook){.begin = hook_begin, .wants = hook_wants, .row = dyn_row,
                                .draw = hook_draw, .user = ds};
    if (rc) {
        sq_dynstats_free(ds);
        return rc;
    }
    *out = ds;
    return SQ_OK;
}

const sq_accept_hook *sq_dynstats_hook(sq_dynstats *ds, int file)
{
    SQ_ASSERT(file >= 0 && file < ds->n_files);
    ds->file = file;
    return &ds->hook;
}

void sq_dynstats_free(sq_dynstats *ds)
{
    if (!ds)
        return;
    for (int t = 0; t < ds->n_th; t++) {
        sq_accept_ws_free(ds->th[t].ws);
        if (ds->th[t].rng)
            gsl_rng_free(ds->th[t].rng);
        free(ds->th[t].Q1);
    }
    free(ds->th);
    free(ds->segs);
    free(ds->seg_first);
    free(ds->seg_at);
    free(ds->q);
    free(ds->ids);
    free(ds->a);
    free(ds);
}

int sq_dynstats_finish(sq_dynstats *ds, sq_corpus *offpath, cJSON **out, sq_error *err)
{
    *out = NULL;
    const sq_dynstats_params *prm = &ds->prm;
    const int V = ds->V, K = ds->K, n = ds->n, n_segs = ds->n_segs, n_cfg = ds->n_cfg;
    const seg *segs = ds->segs;
    double *q = ds->q, *a = ds->a;
    int rc = SQ_OK, has_tokens = 1, at = 0;
    int32_t *tok = malloc((size_t)prm->segment * sizeof *tok);
    int *nrank = malloc(((size_t)n + 1) * sizeof *nrank);
    float *tl = NULL, *dl = NULL;
    if (!tok || !nrank)
        rc = sq_error_oom(err, "dynamic statistics");
    else
        rc = hook_begin(ds, 1, err);   /* thread 0's state: the off-path rows */

    /* The text's next tokens: the rank of each among the draft's top-K, and for every
     * branch_every-th sample (--dynamic-branches) the best draft token that is not the text's:
     * the strongest rejected sibling, where an off-path context starts. */
    sq_out *bout = NULL;
    if (!rc && prm->branches && (rc = sq_out_open(&bout, prm->branches, err)))
        bout = NULL;
    for (int i = 0; i < n_segs && !rc; i++) {
        const seg *g = &segs[i];
        if ((rc = sq_corpus_read(ds->corpora[g->file], g->row0, g->len, NULL, NULL, tok, err)))
            break;
        has_tokens &= sq_corpus_get_info(ds->corpora[g->file])->has_tokens;
        for (int r = 0; r < g->len; r++, at++) {
            const int *ids = ds->ids + (size_t)at * K;
            nrank[at] = -1;
            for (int k = 0; k < K; k++)
                if (ids[k] >= 0 && ids[k] == tok[r])
                    nrank[at] = k;
            if (bout && tok[r] >= 0 && at % (prm->branch_every > 0 ? prm->branch_every : 1) == 0) {
                int w = ids[0] == tok[r] ? (K > 1 ? ids[1] : -1) : ids[0];
                const int64_t *off = sq_corpus_seq_offsets(ds->corpora[g->file]);
                int64_t row = g->row0 + r, lo = 0;
                int64_t hi = sq_corpus_get_info(ds->corpora[g->file])->sequences;
                while (hi - lo > 1) {   /* the sequence holding row */
                    int64_t mid = (lo + hi) / 2;
                    if (off[mid] <= row)
                        lo = mid;
                    else
                        hi = mid;
                }
                if (w >= 0)
                    fprintf(sq_out_stream(bout), "%d %lld %lld %d\n", g->file, (long long)lo,
                            (long long)(row - off[lo]), w);
            }
        }
    }
    if (bout) {
        if (!rc)
            rc = sq_out_commit(bout, err);
        else
            sq_out_abort(bout);
    }
    /* --dynamic-offpath: the draft's sorted top-K at the last row of every sequence */
    double *offq = NULL;
    int n_off = 0;
    if (!rc && offpath) {
        const sq_corpus_info *oi = sq_corpus_get_info(offpath);
        const int64_t *off = sq_corpus_seq_offsets(offpath);
        if (oi->vocab != V)
            rc = sq_error_set(err, SQ_EDATA, "%s: vocabulary %d, the corpus has %d",
                              prm->offpath_file, oi->vocab, V);
        else if (!(offq = malloc(((size_t)oi->sequences + 1) * K * sizeof *offq)) ||
                 !(tl = malloc((size_t)V * sizeof *tl)) || !(dl = malloc((size_t)V * sizeof *dl)))
            rc = sq_error_oom(err, "off-path statistics");
        for (int64_t sq = 0; !rc && sq < oi->sequences; sq++) {
            if (off[sq + 1] <= off[sq])
                continue;
            if ((rc = sq_corpus_read(offpath, off[sq + 1] - 1, 1, tl, dl, NULL, err)))
                break;
            int ids[SQ_DYNSTATS_MAX_TOPK];
            sq_dynstats_draft_topk(dl, V, K, ds->th[0].Q1, ds->th[0].ws,
                                   offq + (size_t)n_off * K, ids);
            for (int k = 0; k < K; k++)
                offq[(size_t)n_off * K + k] = round5(offq[(size_t)n_off * K + k]);
            n_off++;
        }
    }

    cJSON *root = NULL;
    if (!rc) {
        /* rounded first, so that the calibration is the same whether computed here or by
         * sq_dynstats_merge from the file */
        for (size_t i = 0; i < (size_t)n * K; i++)
            q[i] = round5(q[i]);
        for (size_t i = 0; i < (size_t)n * K * n_cfg; i++)
            a[i] = round5(a[i]);
        int *rows = malloc(((size_t)n_segs + 1) * 3 * sizeof *rows);
        const char *names[SQ_ACCEPT_MAX_CONFIGS];
        char nbuf[SQ_ACCEPT_MAX_CONFIGS][128];
        for (int j = 0; j < n_cfg; j++) {
            sq_accept_config_name(&ds->cfg[j], nbuf[j], sizeof nbuf[j]);
            names[j] = nbuf[j];
        }
        if (!rows)
            rc = sq_error_oom(err, "dynamic statistics");
        else {
            for (int i = 0; i < n_segs; i++) {
                rows[3 * i] = (int)segs[i].row0;
                rows[3 * i + 1] = segs[i].len;
                rows[3 * i + 2] = segs[i].file;
            }
            if (!(root = build_json(K, prm->seed, ds->n_files, rows, n_segs, q, has_tokens ? nrank
                                    : NULL, n, names, n_cfg, a)))
                rc = sq_error_oom(err, "dynamic statistics' JSON");
            if (!rc && n_off > 0) {
                sq_json_build b = sq_json_build_begin();
                cJSON *jo = cJSON_CreateArray();
                for (int i = 0; i < n_off; i++)
                    sq_json_append(jo, sq_json_number_array(offq + (size_t)i * K, (size_t)K));
                if (!(jo = sq_json_build_end(b, jo)) || !cJSON_AddItemToObject(root, "offpath_topk",
                                                                              jo)) {
                    cJSON_Delete(jo);
                    rc = sq_error_oom(err, "off-path statistics");
                }
            }
            free(rows);
        }
    }
    free(offq);
    free(tok);
    free(nrank);
    free(tl);
    free(dl);
    if (rc) {
        cJSON_Delete(root);
        return rc;
    }
    *out = root;
    return SQ_OK;
}

int sq_dynstats_run(sq_corpus *const *corpora, const char *const *files, const uint64_t *keys,
                    int n_files, const sq_accept_config *cfg, int n_cfg,
                    const sq_dynstats_params *prm, cJSON **out, sq_error *err)
{
    *out = NULL;
    (void)files;
    sq_dynstats *ds = NULL;
    int rc = sq_dynstats_begin(corpora, keys, n_files, cfg, n_cfg, prm, &ds, err);
    if (rc || !ds)
        return rc;
    const int V = ds->V;
    float *tl = malloc((size_t)prm->segment * (size_t)V * sizeof *tl);
    float *dl = malloc((size_t)prm->segment * (size_t)V * sizeof *dl);
    double *P = malloc((size_t)V * sizeof *P), *Q = malloc((size_t)V * sizeof *Q);
    if (!tl || !dl || !P || !Q)
        rc = sq_error_oom(err, "dynamic statistics");
    if (!rc)
        rc = hook_begin(ds, 1, err);
    /* its own pass: the sampled rows read segment by segment, the distributions computed here */
    for (int i = 0; i < ds->n_segs && !rc; i++) {
        const seg *g = &ds->segs[i];
        ds->file = g->file;
        if ((rc = sq_corpus_read(corpora[g->file], g->row0, g->len, tl, dl, NULL, err)))
            break;
        for (int r = 0; r < g->len; r++) {
            const float *t = tl + (size_t)r * V, *d = dl + (size_t)r * V;
            int64_t row = g->row0 + r;
            dyn_row(ds, 0, row, -1, t, d, NULL, NULL);
            for (int j = 0; j < n_cfg; j++) {
                if (ds->map[j] < 0)
                    continue;
                const sq_accept_config *c = &cfg[j];
                if (c->mode != SQ_MODE_GREEDY) {
                    sq_accept_probs(t, V, c->temperature, c->top_p, P, ds->th[0].ws);
                    sq_accept_probs(d, V, c->temperature, c->top_p, Q, ds->th[0].ws);
                }
                dyn_row(ds, 0, row, j, t, d, P, Q);
            }
        }
    }
    free(tl);
    free(dl);
    free(P);
    free(Q);
    if (!rc)
        rc = sq_dynstats_finish(ds, prm->offpath, out, err);
    sq_dynstats_free(ds);
    return rc;
}

/* ---- merge ---------------------------------------------------------------------------------- */

/* Appends the rows of arr (n x K probabilities, checked by sq_dynstats_check) to *v. */
static int take_rows(const cJSON *arr, int K, const char *file, const char *ctx, double **v,
                     int *n, sq_error *err)
{
    if (!cJSON_IsArray(arr))
        return sq_error_set(err, SQ_EDATA, "%s: %s: expected an array of %d-number rows", file,
                            ctx, K);
    int m = cJSON_GetArraySize(arr);
    double *g = realloc(*v, ((size_t)*n + (size_t)m) * K * sizeof *g + 1);
    if (!g)
        return sq_error_oom(err, ctx);
    *v = g;
    int rc = sq_json_get_unit_rows(arr, K, 0, g + (size_t)*n * K, file, ctx, err);
    if (rc)
        return rc;
    *n += m;
    return SQ_OK;
}

int sq_dynstats_merge(const cJSON *const *objs, const char *const *files, int n_in, cJSON **out,
                      sq_error *err)
{
    *out = NULL;
    if (n_in <= 0)
        return SQ_OK;
    int K = 0, n_cfg = 0, n = 0, n_segs = 0, corpora = 0, rc = SQ_OK;
    double seed = 0;
    const char *names[SQ_ACCEPT_MAX_CONFIGS];
    double *q = NULL, *acc[SQ_ACCEPT_MAX_CONFIGS] = {0};
    int nacc[SQ_ACCEPT_MAX_CONFIGS] = {0};
    int *segs = NULL, *nrank = NULL, all_ranks = 1;
    for (int f = 0; f < n_in && !rc; f++) {
        const cJSON *o = objs[f];
        /* each shard checked as the planner checks a curves file, so that the merge neither
         * writes what the planner refuses nor takes a damaged shard's numbers */
        sq_dynstats_shape sh;
        if ((rc = sq_dynstats_check(o, files[f], &sh, err)))
            break;
        if (!sh.has_seed || sh.corpora < 1) {
            rc = sq_error_set(err, SQ_EDATA, "%s: dynamic.%s: missing (a merge needs every "
                              "shard's seed and count of corpora)", files[f],
                              sh.has_seed ? "corpora" : "seed");
            break;
        }
        if (corpora + sh.corpora > SQ_DYNSTATS_MAX_CORPORA ||
            n + sh.samples > SQ_DYNSTATS_MAX_SAMPLES) {
            rc = sq_error_set(err, SQ_EDATA, "%s: dynamic: with the shards before it, more than "
                              "%d corpora or 10^7 samples, more than a curves file holds",
                              files[f], SQ_DYNSTATS_MAX_CORPORA);
            break;
        }
        double sd = sq_json_field(o, "seed")->valuedouble;
        const cJSON *accept = sq_json_field(o, "accept");
        int nc = sh.configs;
        if (f == 0) {
            K = sh.topk;
            seed = sd;
            n_cfg = nc;
            if (nc > SQ_ACCEPT_MAX_CONFIGS) {
                rc = sq_error_set(err, SQ_EDATA, "%s: dynamic.accept: expected an object of 1 to "
                                  "%d configurations", files[f], SQ_ACCEPT_MAX_CONFIGS);
                break;
            }
            int j = 0;
            const cJSON *cj;
            cJSON_ArrayForEach(cj, accept) names[j++] = cj->string;
        } else if (sh.topk != K || sd != seed || nc != n_cfg) {
            rc = sq_error_set(err, SQ_EDATA, "%s: dynamic: topk, seed or configurations differ "
                              "from %s's; merge statistics of one setting", files[f], files[0]);
            break;
        }
        int before = n;
        if ((rc = take_rows(sq_json_field(o, "draft_topk"), K, files[f], "dynamic.draft_topk",
                            &q, &n, err)))
            break;
        all_ranks &= sh.next_rank;
        if (all_ranks) {
            int *g = realloc(nrank, ((size_t)n + 1) * sizeof *g), i = 0;
            if (!g) {
                rc = sq_error_oom(err, "next_rank");
                break;
            }
            nrank = g;
            const cJSON *x;
            cJSON_ArrayForEach(x, sq_json_field(o, "next_rank"))
                nrank[before + i++] = x->valueint;
        }
        for (int j = 0; j < n_cfg && !rc; j++) {
            char ctx[200];
            snprintf(ctx, sizeof ctx, "dynamic.accept.%s", names[j]);
            const cJSON *arr = sq_json_field(accept, names[j]);
            if (!arr)
                rc = sq_error_set(err, SQ_EDATA, "%s: %s: missing (the configurations differ "
                                  "from %s's)", files[f], ctx, files[0]);
            else
                rc = take_rows(arr, K, files[f], ctx, &acc[j], &nacc[j], err);
        }
        int *g = rc ? NULL : realloc(segs, ((size_t)n_segs + (size_t)sh.segments) * 3 *
                                               sizeof *g + 1);
        if (!rc && !g)
            rc = sq_error_oom(err, "segments");
        if (rc)
            break;
        segs = g;
        /* the corpus indices are rebased after the shards before this one (checked: in
         * [0, corpora), and the total stays within SQ_DYNSTATS_MAX_CORPORA) */
        const cJSON *sg;
        cJSON_ArrayForEach(sg, sq_json_field(o, "segments")) {
            for (int i = 0; i < 3; i++)
                segs[3 * n_segs + i] = cJSON_GetArrayItem(sg, i)->valueint;
            segs[3 * n_segs + 2] += corpora;
            n_segs++;
        }
        corpora += sh.corpora;
    }
    if (!rc) {
        double *a = malloc((size_t)n_cfg * n * K * sizeof *a + 1);
        if (!a)
            rc = sq_error_oom(err, "dynamic statistics");
        for (int j = 0; a && j < n_cfg; j++)
            memcpy(a + (size_t)j * n * K, acc[j], (size_t)n * K * sizeof *a);
        if (a && !(*out = build_json(K, (uint64_t)seed, corpora, segs, n_segs, q,
                                     all_ranks ? nrank : NULL, n, names, n_cfg, a)))
            rc = sq_error_oom(err, "dynamic statistics' JSON");
        free(a);
    }
    free(q);
    free(segs);
    free(nrank);
    for (int j = 0; j < SQ_ACCEPT_MAX_CONFIGS; j++)
        free(acc[j]);
    return rc;
}
