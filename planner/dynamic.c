/* Dynamic trees: envelope rules, prediction, cost per round, search (planner/dynamic.h;
 * docs/planning.md, "Dynamic trees"). */
#include "planner/dynamic.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "libsequoia/base/json.h"
#include "libsequoia/format/dynstats.h"
#include "libsequoia/format/dynplan.h"
#include "planner/hardware.h"

/* ---- rules ------------------------------------------------------------------------------------ */

int sq_dyn_envelope_check(sq_engine e, int L, int K, int N, const char *what, sq_error *err)
{
    /* the engines' rules, stated once with the dynamic plan format (the runtime and the exports
     * call the same function); then the planner's own limits (the predictor's tables) */
    int rc = sq_dynplan_envelope_check(sq_engine_name(e), L, K, N, what, err);
    if (rc)
        return rc;
    if (L > SQ_DYN_MAX_STEPS || K > SQ_DYN_MAX_TOPK || N > SQ_DYN_MAX_NODES)
        return sq_error_set(err, SQ_EUSAGE, "%s%senvelope %d,%d,%d (L,K,N): beyond this "
                            "toolkit's limits L <= %d, K <= %d, N <= %d (the planner's, not %s's)",
                            what ? what : "", what ? ": " : "", L, K, N, SQ_DYN_MAX_STEPS,
                            SQ_DYN_MAX_TOPK, SQ_DYN_MAX_NODES, sq_engine_name(e));
    return SQ_OK;
}

/* ---- samples ------------------------------------------------------------------------------------ */

void sq_dyn_samples_free(sq_dyn_samples *s)
{
    if (!s)
        return;
    free(s->q);
    free(s->a);
    free(s->next);
    free(s->remain);
    free(s->text_rank);
    free(s);
}

static int samples_alloc(int n, int n_off, int K, sq_dyn_samples **out, sq_error *err)
{
    sq_dyn_samples *s = calloc(1, sizeof *s);
    if (s) {
        s->n = n;
        s->n_off = n_off;
        s->K = K;
        s->q = calloc((size_t)(n + n_off) * K, sizeof *s->q);
        s->a = calloc((size_t)n * K, sizeof *s->a);
        s->next = calloc((size_t)n, sizeof *s->next);
        s->remain = calloc((size_t)n, sizeof *s->remain);
    }
    if (!s || !s->q || !s->a || !s->next || !s->remain) {
        sq_dyn_samples_free(s);
        return sq_error_oom(err, "dynamic-tree samples");
    }
    *out = s;
    return SQ_OK;
}

static void link_segments(sq_dyn_samples *s, const int *len, int n_segs)
{
    int at = 0;
    for (int g = 0; g < n_segs; g++) {
        for (int i = 0; i < len[g]; i++) {
            s->next[at + i] = i + 1 < len[g] ? at + i + 1 : -1;
            s->remain[at + i] = len[g] - 1 - i;
        }
        at += len[g];
    }
}

int sq_dyn_samples_new(int n, int K, const double *q, const double *a, const int *seg_len,
                       int n_segs, sq_dyn_samples **out, sq_error *err)
{
    int total = 0;
    for (int g = 0; g < n_segs; g++)
        total += seg_len[g] > 0 ? seg_len[g] : 0;
    if (n < 1 || K < 1 || K > SQ_DYN_MAX_TOPK || total != n)
        return sq_error_set(err, SQ_EUSAGE, "dynamic-tree samples: n %d, K %d, segments summing "
                            "to %d", n, K, total);
    int rc = samples_alloc(n, 0, K, out, err);
    if (rc)
        return rc;
    memcpy((*out)->q, q, (size_t)n * K * sizeof *q);
    memcpy((*out)->a, a, (size_t)n * K * sizeof *a);
    link_segments(*out, seg_len, n_segs);
    return SQ_OK;
}

/* The rows of arr (checked) into v. */
static void copy_rows(const cJSON *arr, int K, double *v, const char *file, const char *ctx)
{
    sq_error unused = {0};
    int rc = sq_json_get_unit_rows(arr, K, 0, v, file, ctx, &unused);
    SQ_ASSERT(rc == SQ_OK);
}

int sq_dyn_samples_from_json(const cJSON *curves, const char *file, const char *config,
                             sq_dyn_samples **out, sq_error *err)
{
    *out = NULL;
    const cJSON *d = sq_json_field(curves, "dynamic");
    if (!cJSON_IsObject(d))
        return sq_error_set(err, SQ_EDATA, "%s: no key \"dynamic\": the curves hold no "
                            "statistics for a dynamic-tree prediction (estimate them again "
                            "with sequoia-accept, which writes them by default)", file);
    /* the whole object is checked as sequoia-accept --merge checks its inputs (one function,
     * libsequoia/format/dynstats.h); what follows only reads it */
    _Static_assert(SQ_DYN_MAX_TOPK >= SQ_DYNSTATS_MAX_TOPK, "the statistics' K fits the planner");
    sq_dynstats_shape sh;
    int rc = sq_dynstats_check(d, file, &sh, err);
    if (rc)
        return rc;
    const cJSON *acc = sq_json_field(d, "accept"), *a = sq_json_field(acc, config);
    if (!a) {
        char list[512] = "";
        size_t len = 0;
        const cJSON *c;
        cJSON_ArrayForEach(c, acc)
            if (len < sizeof list)
                len += (size_t)snprintf(list + len, sizeof list - len, "%s\"%s\"",
                                        len ? ", " : "", c->string);
        return sq_error_set(err, SQ_EDATA, "%s: dynamic.accept: no configuration \"%s\" (it has "
                            "%s)", file, config, len ? list : "none");
    }
    const int K = sh.topk, n = sh.samples, n_off = sh.offpath;
    int *len = malloc((size_t)sh.segments * sizeof *len), g = 0;
    if (!len)
        return sq_error_oom(err, "segments");
    const cJSON *sg;
    cJSON_ArrayForEach(sg, sq_json_field(d, "segments"))
        len[g++] = cJSON_GetArrayItem(sg, 1)->valueint;
    sq_dyn_samples *s = NULL;
    if ((rc = samples_alloc(n, n_off, K, &s, err))) {
        free(len);
        return rc;
    }
    copy_rows(sq_json_field(d, "draft_topk"), K, s->q, file, "dynamic.draft_topk");
    copy_rows(a, K, s->a, file, config);
    if (n_off)
        copy_rows(sq_json_field(d, "offpath_topk"), K, s->q + (size_t)n * K, file,
                  "dynamic.offpath_topk");
    if (sh.next_rank) {
        if (!(s->text_rank = malloc((size_t)n * sizeof *s->text_rank))) {
            free(len);
            sq_dyn_samples_free(s);
            return sq_error_oom(err, "next_rank");
        }
        int i = 0;
        const cJSON *x;
        cJSON_ArrayForEach(x, sq_json_field(d, "next_rank"))
            s->text_rank[i++] = x->valueint;
    }
    link_segments(s, len, sh.segments);
    free(len);
    snprintf(s->config, sizeof s->config, "%s", config);
    *out = s;
    return SQ_OK;
}

/* ---- prediction ---------------------------------------------------------------------------------- */

sq_dyn_predict_params sq_dyn_predict_default_params(void)
{
    return (sq_dyn_predict_params){.trials = 20000, .seed = 1, .path = SQ_DYN_PATH_DRAW,
                                   .method = SQ_DYN_METHOD_REPLAY};
}

/* splitmix64: one stream per trial, so a result depends only on the seed and the trial. */
typedef struct rng64 {
    uint64_t s;
} rng64;

static uint64_t rng_next(rng64 *r)
{
    uint64_t x = (r->s += 0x9e3779b97f4a7c15ULL);
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

static double rng_unit(rng64 *r)
{
    return (double)(rng_next(r) >> 11) * (1.0 / 9007199254740992.0);
}

static int rng_below(rng64 *r, int n)
{
    return (int)(rng_unit(r) * n);
}

/* The draft probabilities of an off-path node: an off-path context when there are some, else
 * a sample. */
static int off_path(const sq_dyn_samples *s, rng64 *r)
{
    return s->n_off > 0 ? s->n + rng_below(r, s->n_off) : rng_below(r, s->n);
}

/* The accepted rank at sample i (0-based), or -1: drawn from its acceptance vector, or the
 * text's (SQ_DYN_PATH_TEXT: s->text_rank set). The draw is made either way, so that both
 * paths consume the same random numbers. */
static int draw_rank(const sq_dyn_samples *s, int i, rng64 *r, int text)
{
    double u = rng_unit(r), c = 0;
    if (text)
        return s->text_rank[i];
    const double *a = s->a + (size_t)i * s->K;
    for (int k = 0; k < s->K; k++) {
        c += a[k];
        if (u < c)
            return k;
    }
    return -1;
}

typedef struct cand {
    double score;
    int sample;      /* the position whose draft probabilities its children get      */
    int on_path;
} cand;

/* One trial: the candidates of every level (engine order), the on-path node of each level and
 * the count, per level, of candidates that outrank it. Fills rank_by[d][l]: candidates of
 * level l that come before the on-path node of level d in the engine's order (score, then
 * index); path_len: levels with an on-path node whose node could be reached. */
typedef struct trial_ws {
    cand *level[SQ_DYN_MAX_STEPS + 1];
    int   kept[SQ_DYN_MAX_TOPK];
    int   path_at[SQ_DYN_MAX_STEPS + 1];   /* index of the on-path node in its level, -1 */
} trial_ws;

static int roots_of(const sq_dyn_samples *s, int L, int **roots)
{
    int n = 0;
    for (int i = 0; i < s->n; i++)
        n += s->remain[i] >= L - 1;
    int all = n == 0;
    if (all)
        n = s->n;
    *roots = malloc((size_t)n * sizeof **roots);
    if (!*roots)
        return -1;
    int j = 0;
    for (int i = 0; i < s->n; i++)
        if (all || s->remain[i] >= L - 1)
            (*roots)[j++] = i;
    return n;
}

/* The K best of m candidates c[0..m) by score (ties: the lower index), in order. */
static void top_k(const cand *c, int m, int K, int *out)
{
    int n = 0;
    for (int i = 0; i < m; i++) {
        if (n == K && !(c[i].score > c[out[n - 1]].score))
            continue;
        int j = n < K ? n++ : K - 1;
        while (j > 0 && c[i].score > c[out[j - 1]].score) {
            out[j] = out[j - 1];
            j--;
        }
        out[j] = i;
    }
}

/* One simulated step from root `root`: the engine's tree over levels 1..L with top-K, the
 * verified path through it, and mx[l][d] (d = 1..min(depth, l)): the largest rank, among the
 * candidates of levels <= l in the engine's order, of the path's nodes of depths 1..d, so that
 * the path reaches depth d in a tree of levels <= l with N - 1 > mx[l][d] draft tokens.
 * *kept: bit d - 1 set when the path's node of depth d is among the K kept nodes of its level
 * (the ones the draft reads, sequoia-run's catch-up: docs/planning.md, "Two cost models").
 * Returns the path's depth (levels with an on-path node). */
static int simulate(const sq_dyn_samples *s, int root, int L, int K, rng64 *r, int text,
                    trial_ws *ws, int mx[SQ_DYN_MAX_STEPS + 1][SQ_DYN_MAX_STEPS + 1],
                    uint32_t *kept)
{
    /* level 1: the root's top-K; the path goes on at rank tr */
    int tr = draw_rank(s, root, r, text), nxt = s->next[root];
    const double *qr = s->q + (size_t)root * s->K;
    for (int l = 1; l <= L; l++)
        ws->path_at[l] = -1;
    for (int k = 0; k < K; k++) {
        int on = k == tr;
        ws->level[1][k] = (cand){qr[k], on ? (nxt >= 0 ? nxt : rng_below(r, s->n))
                                           : off_path(s, r), on};
        if (on)
            ws->path_at[1] = k;
    }
    int n_kept = K;
    for (int k = 0; k < K; k++)
        ws->kept[k] = k;
    *kept = ws->path_at[1] >= 0;   /* level 1: every node is kept */
    for (int l = 2; l <= L; l++) {
        cand *prev = ws->level[l - 1], *cur = ws->level[l];
        for (int i = 0; i < n_kept; i++) {
            const cand *par = &prev[ws->kept[i]];
            const double *qp = s->q + (size_t)par->sample * s->K;
            int ptr = par->on_path ? draw_rank(s, par->sample, r, text) : -1;
            int pn = par->on_path ? s->next[par->sample] : -1;
            for (int k = 0; k < K; k++) {
                int on = par->on_path && k == ptr;
                cur[i * K + k] = (cand){par->score * qp[k],
                                        !on ? off_path(s, r) : pn >= 0 ? pn
                                        : rng_below(r, s->n), on};
                if (on)
                    ws->path_at[l] = i * K + k;
            }
        }
        top_k(cur, n_kept * K, K, ws->kept);
        for (int k = 0; k < K && ws->path_at[l] >= 0; k++)
            if (ws->kept[k] == ws->path_at[l])
                *kept |= 1u << (l - 1);
    }
    int depth = 0;
    for (int d = 1; d <= L && ws->path_at[d] >= 0; d++)
        depth = d;
    /* rank_by[d][l]: candidates of level l before the on-path node of level d */
    int rank_by[SQ_DYN_MAX_STEPS + 1][SQ_DYN_MAX_STEPS + 1];
    for (int d = 1; d <= depth; d++) {
        int at = ws->path_at[d];
        double sc = ws->level[d][at].score;
        for (int l = 1; l <= L; l++) {
            int m = l == 1 ? K : K * K, c = 0;
            const cand *cl = ws->level[l];
            for (int i = 0; i < m; i++)
                c += cl[i].score > sc || (cl[i].score == sc && (l < d || (l == d && i < at)));
            rank_by[d][l] = c;
        }
    }
    for (int l = 1; l <= L; l++) {
        int m = 0, rk = 0;
        for (int d = 1; d <= (depth < l ? depth : l); d++) {
            rk = 0;
            for (int j = 1; j <= l; j++)
                rk += rank_by[d][j];
            m = rk > m ? rk : m;
            mx[l][d] = m;
        }
    }
    return depth;
}

/* Accepted length of a step in the tree of levels <= l and N nodes. */
static int accepted(int mx[SQ_DYN_MAX_STEPS + 1][SQ_DYN_MAX_STEPS + 1], int depth, int l, int N)
{
    int a = 0;
    while (a < depth && a < l && mx[l][a + 1] < N - 1)
        a++;
    return a;
}

/* The tokens sequoia-run's draft catches up after a step that accepted a nodes of a tree of l
 * levels: the bonus token, plus the last accepted node when the draft did not read it (a node
 * of level l, or one not kept). */
static int catchup_of(int a, int l, uint32_t kept)
{
    return 1 + (a >= 1 && (a == l || !(kept >> (a - 1) & 1u)));
}

static int trial_ws_new(trial_ws *ws, int L, int K)
{
    *ws = (trial_ws){0};
    for (int l = 1; l <= L; l++)
        if (!(ws->level[l] = malloc((size_t)(l == 1 ? K : K * K) * sizeof(cand))))
            return -1;
    return 0;
}

static void trial_ws_free(trial_ws *ws, int L)
{
    for (int l = 1; l <= L; l++)
        free(ws->level[l]);
}

static rng64 trial_rng(uint64_t seed, uint64_t t)
{
    rng64 r = {seed * 0x100000001b3ULL ^ (t * 0x9e3779b97f4a7c15ULL)};
    rng_next(&r);
    return r;
}

/* SQ_DYN_METHOD_ROOTS: trial t starts at root roots[t % n_roots], E = 1 + mean length. */
static int grid_roots(const sq_dyn_samples *s, int L, int K, int max_nodes, int trials,
                      uint64_t seed, int text, double *E, double *se, double *C, double *p_len,
                      sq_error *err)
{
    int W = max_nodes + 1;
    size_t cells = (size_t)L * W;
    double *sum = calloc(cells, sizeof *sum), *sum2 = calloc(cells, sizeof *sum2);
    double *csum = calloc(cells, sizeof *csum);
    long long *reach = calloc((size_t)L + 1, sizeof *reach);
    int *roots = NULL;
    int n_roots = roots_of(s, L, &roots);
    /* zeroed: when an allocation above fails, trial_ws_new never runs and the cleanup below
     * frees ws's (null) levels (docs/robustness.md: out of memory is exit 70, never an abort) */
    trial_ws ws = {0};
    int ok = sum && sum2 && csum && reach && n_roots > 0 && trial_ws_new(&ws, L, K) == 0;
    int mx[SQ_DYN_MAX_STEPS + 1][SQ_DYN_MAX_STEPS + 1];
    uint32_t kept;
    for (int t = 0; ok && t < trials; t++) {
        rng64 r = trial_rng(seed, (uint64_t)t);
        int depth = simulate(s, roots[t % n_roots], L, K, &r, text, &ws, mx, &kept);
        for (int l = 1; l <= L; l++) {
            double *row = sum + (size_t)(l - 1) * W, *row2 = sum2 + (size_t)(l - 1) * W;
            for (int N = 2; N < W; N++) {
                int len = accepted(mx, depth, l, N);
                row[N] += len;
                row2[N] += (double)len * len;
                csum[(size_t)(l - 1) * W + N] += catchup_of(len, l, kept);
            }
        }
        int len = accepted(mx, depth, L, max_nodes);
        for (int d = 0; d <= len; d++)
            reach[d]++;
    }
    if (ok) {
        for (int l = 1; l <= L; l++)
            for (int N = 0; N < W; N++) {
                size_t i = (size_t)(l - 1) * W + N;
                double m = sum[i] / trials, v = sum2[i] / trials - m * m;
                E[i] = N < 2 ? 0 : 1.0 + m;
                if (C)
                    C[i] = N < 2 ? 0 : csum[i] / trials;
                if (se)
                    se[i] = N < 2 || trials < 2 || !(v > 0) ? 0.0 : sqrt(v / (trials - 1));
            }
        if (p_len)
            for (int d = 0; d <= L; d++)
                p_len[d] = (double)reach[d] / trials;
    }
    free(sum); free(sum2); free(csum); free(reach); free(roots);
    trial_ws_free(&ws, L);
    return ok ? SQ_OK : sq_error_oom(err, "dynamic prediction");
}

/* SQ_DYN_METHOD_REPLAY: every position is simulated as a root `passes` times; then decoding is
 * replayed along every run of positions: from its first position, a step at root x emits
 * accepted + 1 tokens and the next root is x plus that, until the run ends (its last step's
 * tokens past the end count too, as sequoia-run's report counts them). E is tokens over
 * steps, as a decoder counts it; the standard error treats each (run, pass) as a
 * unit (ratio estimator). */
static int grid_replay(const sq_dyn_samples *s, int L, int K, int max_nodes, int trials,
                       uint64_t seed, int text, double *E, double *se, double *C, double *p_len,
                       sq_error *err)
{
    int W = max_nodes + 1, n = s->n;
    int passes = (int)(((long long)trials + n - 1) / n);
    if (passes < 1)
        passes = 1;
    size_t per = (size_t)L * L;
    /* a documented limit, checked before allocating gigabytes (docs/robustness.md, "Limits") */
    unsigned long long bytes = (unsigned long long)passes * (unsigned long long)n *
                               (per * sizeof(short) + 1 + sizeof(uint32_t));
    if (bytes > SQ_DYN_MAX_REPLAY_BYTES)
        return sq_error_set(err, SQ_EUSAGE, "dynamic prediction: %d trials (%d passes over %d "
                            "samples) at L = %d need %.0f MiB of replay buffers, more than the "
                            "limit of %.0f MiB; use fewer trials (--trials) or a smaller L",
                            trials, passes, n, L, (double)bytes / (1 << 20),
                            (double)SQ_DYN_MAX_REPLAY_BYTES / (1 << 20));
    short *mxs = malloc((size_t)passes * n * per * sizeof *mxs + 1);
    unsigned char *dep = malloc((size_t)passes * n + 1);
    uint32_t *kpt = malloc(((size_t)passes * n + 1) * sizeof *kpt);
    trial_ws ws = {0};   /* freed below even when trial_ws_new never ran (as in grid_roots) */
    int ok = mxs && dep && kpt && trial_ws_new(&ws, L, K) == 0;
    int mx[SQ_DYN_MAX_STEPS + 1][SQ_DYN_MAX_STEPS + 1];
    for (int pass = 0; ok && pass < passes; pass++)
        for (int x = 0; x < n; x++) {
            rng64 r = trial_rng(seed, (uint64_t)pass * (uint64_t)n + (uint64_t)x);
            size_t at = (size_t)pass * n + x;
            int depth = simulate(s, x, L, K, &r, text, &ws, mx, &kpt[at]);
            dep[at] = (unsigned char)depth;
            for (int l = 1; l <= L; l++)
                for (int d = 1; d <= (depth < l ? depth : l); d++)
                    mxs[at * per + (size_t)(l - 1) * L + (d - 1)] =
                        (short)(mx[l][d] < 32767 ? mx[l][d] : 32767);
        }
    long long steps_all = 0;
    long long *reach = calloc((size_t)L + 1, sizeof *reach);
    ok = ok && reach;
    for (int l = 1; ok && l <= L; l++)
        for (int N = 2; N < W; N++) {
            double T = 0, S = 0, TT = 0, SS = 0, TS = 0, CU = 0;
            long long units = 0;
            for (int pass = 0; pass < passes; pass++)
                for (int x0 = 0; x0 < n; x0 = x0 + s->remain[x0] + 1) {
                    int end = x0 + s->remain[x0] + 1;
                    double tu = 0, su = 0;
                    for (int x = x0; x < end;) {
                        size_t at = (size_t)pass * n + x;
                        int depth = dep[at], a = 0;
                        const short *m = mxs + at * per + (size_t)(l - 1) * L;
                        while (a < depth && a < l && m[a] < N - 1)
                            a++;
                        if (l == L && N == max_nodes) {
                            for (int d = 0; d <= a; d++)
                                reach[d]++;
                            steps_all++;
                        }
                        CU += catchup_of(a, l, kpt[at]);
                        int t = a + 1;   /* the last step's tokens past the end count too */
                        tu += t;
                        su += 1;
                        x += t;
                    }
                    T += tu, S += su, TT += tu * tu, SS += su * su, TS += tu * su;
                    units++;
                }
            size_t i = (size_t)(l - 1) * W + N;
            double R = T / S;
            E[i] = R;
            if (C)
                C[i] = CU / S;
            if (se) {
                double v = TT - 2 * R * TS + R * R * SS;   /* sum of (T_u - R S_u)^2 */
                se[i] = units > 1 && v > 0 ? sqrt((double)units / (units - 1) * v) / S : 0.0;
            }
        }
    if (ok) {
        for (int l = 1; l <= L; l++)
            for (int N = 0; N < 2; N++) {
                E[(size_t)(l - 1) * W + N] = 0;
                if (C)
                    C[(size_t)(l - 1) * W + N] = 0;
                if (se)
                    se[(size_t)(l - 1) * W + N] = 0;
            }
        if (p_len)
            for (int d = 0; d <= L; d++)
                p_len[d] = steps_all ? (double)reach[d] / steps_all : 0.0;
    }
    free(mxs);
    free(dep);
    free(kpt);
    free(reach);
    trial_ws_free(&ws, L);
    return ok ? SQ_OK : sq_error_oom(err, "dynamic prediction");
}

int sq_dyn_predict_grid(const sq_dyn_samples *s, int L, int K, int max_nodes,
                        const sq_dyn_predict_params *p, double *E, double *se, double *p_len,
                        sq_error *err)
{
    return sq_dyn_predict_grid_catchup(s, L, K, max_nodes, p, E, se, NULL, p_len, err);
}

int sq_dyn_predict_grid_catchup(const sq_dyn_samples *s, int L, int K, int max_nodes,
                                const sq_dyn_predict_params *p, double *E, double *se,
                                double *catchup, double *p_len, sq_error *err)
{
    if (K < 1 || K > s->K || L < 1 || L > SQ_DYN_MAX_STEPS || max_nodes < 2 ||
        max_nodes > SQ_DYN_MAX_NODES)
        return sq_error_set(err, SQ_EUSAGE, "dynamic prediction: L %d (1..%d), K %d (1..%d, the "
                            "statistics keep %d ranks), N %d (2..%d)", L, SQ_DYN_MAX_STEPS, K,
                            SQ_DYN_MAX_TOPK, s->K, max_nodes, SQ_DYN_MAX_NODES);
    int trials = p && p->trials > 0 ? p->trials : 20000;
    uint64_t seed = p ? p->seed : 1;
    int text = p && p->path == SQ_DYN_PATH_TEXT;
    if (text && !s->text_rank)
        return sq_error_set(err, SQ_EUSAGE, "dynamic prediction: the path along the text needs "
                            "the statistics' \"next_rank\" (a corpus with its tokens)");
    if (p && p->method == SQ_DYN_METHOD_ROOTS)
        return grid_roots(s, L, K, max_nodes, trials, seed, text, E, se, catchup, p_len, err);
    return grid_replay(s, L, K, max_nodes, trials, seed, text, E, se, catchup, p_len, err);
}

int sq_dyn_predict(const sq_dyn_samples *s, int L, int K, int N, const sq_dyn_predict_params *p,
                   double *expected, double *se, double *p_len, sq_error *err)
{
    return sq_dyn_predict_catchup(s, L, K, N, p, expected, se, NULL, p_len, err);
}

int sq_dyn_predict_catchup(const sq_dyn_samples *s, int L, int K, int N,
                           const sq_dyn_predict_params *p, double *expected, double *se,
                           double *catchup, double *p_len, sq_error *err)
{
    if (N < 2 || N > SQ_DYN_MAX_NODES || L < 1 || L > SQ_DYN_MAX_STEPS)
        return sq_error_set(err, SQ_EUSAGE, "dynamic prediction: L %d, N %d out of range", L, N);
    size_t cells = (size_t)L * (N + 1);
    double *E = malloc(cells * sizeof *E), *S = malloc(cells * sizeof *S);
    double *C = malloc(cells * sizeof *C);
    if (!E || !S || !C) {
        free(E);
        free(S);
        free(C);
        return sq_error_oom(err, "dynamic prediction");
    }
    int rc = sq_dyn_predict_grid_catchup(s, L, K, N, p, E, S, C, p_len, err);
    if (!rc) {
        *expected = E[(size_t)(L - 1) * (N + 1) + N];
        if (se)
            *se = S[(size_t)(L - 1) * (N + 1) + N];
        if (catchup)
            *catchup = C[(size_t)(L - 1) * (N + 1) + N];
    }
    free(E);
    free(S);
    free(C);
    return rc;
}

/* ---- cost ------------------------------------------------------------------------------------------ */

/* A round priced forward by forward as planner/hardware.h does (sq_hw_forward_ms: in-step at
 * batch 1 with a step section, else the steady-stream profiles): the target's verify of N and
 * the step's own work, the draft's first forward over `first` tokens, then L - 1 level forwards
 * of K tokens each (grow = 0) or of i K at level i (grow = 1, TensorRT-LLM's growing context).
 * With `expand` (sequoia-run's round) the step's own work adds the tree's growth, which the
 * step section's static shapes do not do: 1 + (L - 1) K expanded nodes per sequence (the root,
 * then the K kept nodes of each level but the last), each a softmax over the vocabulary and a
 * top K on the host (the section's "expand" part; 0 for a section without it). The engines
 * grow theirs on the GPU, in kernels this host's cost says nothing about. */
static int priced_round(const sq_profile *target, const sq_profile *draft, double draft_ms, int b,
                        int L, int K, int N, double first, int grow, int expand,
                        sq_extrapolate x, sq_dyn_cost *out, sq_error *err)
{
    sq_hw_params hp = sq_hw_default_params();
    hp.target = target;
    hp.draft = draft;
    hp.draft_ms = draft_ms;
    hp.extrapolate = x;
    double t, o, d, v = 0, e = 0;
    int rc;
    if ((rc = sq_hw_forward_ms(&hp, SQ_STEP_TARGET, b, N, &t, err)) ||
        (rc = sq_hw_forward_ms(&hp, SQ_STEP_OVERHEAD, b, N, &o, err)) ||
        (expand && (rc = sq_hw_forward_ms(&hp, SQ_STEP_EXPAND, b, K, &e, err))) ||
        (rc = sq_hw_forward_ms(&hp, SQ_STEP_DRAFT_FIRST, b, first, &d, err)))
        return rc;
    o += (double)b * (1.0 + (double)(L - 1) * K) * e;
    if (grow) {
        for (int i = 1; i < L; i++) {
            if ((rc = sq_hw_forward_ms(&hp, SQ_STEP_DRAFT_LEVEL, b, i * K, &v, err)))
                return rc;
            d += v;
        }
    } else if (L > 1) {
        if ((rc = sq_hw_forward_ms(&hp, SQ_STEP_DRAFT_LEVEL, b, K, &v, err)))
            return rc;
        d += (L - 1) * v;
    }
    out->target_ms = t + o;
    out->draft_ms = d;
    out->round_ms = t + o + d;
    return SQ_OK;
}

/* The engine's in-step model (batch 1, the target profile has a step section): the engine's
 * structure, every forward as decoding runs it. */
static int round_in_step(sq_engine e, const sq_profile *target, const sq_profile *draft,
                         double draft_ms, int L, int K, int N, double accepted, sq_extrapolate x,
                         sq_dyn_cost *out, sq_error *err)
{
    /* the first forward catches up the tokens accepted last round; unknown: the engine's own
     * count (SGLang's extend over the N verified tokens, TensorRT-LLM's L + 1) */
    double first = accepted > 0 ? accepted : e == SQ_ENGINE_SGLANG ? N : L + 1;
    return priced_round(target, draft, draft_ms, 1, L, K, N, first, e != SQ_ENGINE_SGLANG, 0, x,
                        out, err);
}

int sq_dyn_round_ms_accepted(sq_engine e, const sq_profile *target, const sq_profile *draft,
                             double draft_ms, int b, int L, int K, int N, double accepted,
                             sq_extrapolate x, sq_dyn_cost *out, sq_error *err)
{
    if (b == 1 && target->step)
        return round_in_step(e, target, draft, draft_ms, L, K, N, accepted, x, out, err);
    double t, d = 0, v;
    int rc = sq_profile_ms_batch(target, b, N, x, &t, err);
    if (rc)
        return rc;
    if (!draft) {
        d = L * draft_ms;
    } else if (e == SQ_ENGINE_SGLANG) {
        if (L > 1) {
            if ((rc = sq_profile_ms_batch(draft, b, K, x, &v, err)))
                return rc;
            d += (L - 1) * v;
        }
        if ((rc = sq_profile_ms_batch(draft, b, N, x, &v, err)))
            return rc;
        d += v;
    } else {
        if ((rc = sq_profile_ms_batch(draft, b, L + 1, x, &v, err)))
            return rc;
        d += v;
        for (int i = 1; i < L; i++) {
            if ((rc = sq_profile_ms_batch(draft, b, i * K, x, &v, err)))
                return rc;
            d += v;
        }
    }
    out->target_ms = t;
    out->draft_ms = d;
    out->round_ms = t + d;
    return SQ_OK;
}

int sq_dyn_round_ms_runtime(const sq_profile *target, const sq_profile *draft, double draft_ms,
                            int b, int L, int K, int N, double catchup, sq_extrapolate x,
                            sq_dyn_cost *out, sq_error *err)
{
    /* sequoia-run's draft: the catch-up, then K kept nodes a level, whatever the engine */
    return priced_round(target, draft, draft_ms, b, L, K, N, catchup, 0, 1, x, out, err);
}

int sq_dyn_plain_ms(const sq_profile *target, int b, sq_extrapolate x, double *ms, sq_error *err)
{
    if (b != 1 || !target->step)
        return sq_profile_ms_batch(target, b, 1, x, ms, err);
    sq_hw_params hp = sq_hw_default_params();
    hp.target = target;
    hp.extrapolate = x;
    double t, o;
    int rc;
    if ((rc = sq_hw_forward_ms(&hp, SQ_STEP_TARGET, 1, 1, &t, err)) ||
        (rc = sq_hw_forward_ms(&hp, SQ_STEP_OVERHEAD, 1, 1, &o, err)))
        return rc;
    *ms = t + o;
    return SQ_OK;
}

int sq_dyn_round_ms(sq_engine e, const sq_profile *target, const sq_profile *draft,
                    double draft_ms, int b, int L, int K, int N, sq_extrapolate x,
                    sq_dyn_cost *out, sq_error *err)
{
    return sq_dyn_round_ms_accepted(e, target, draft, draft_ms, b, L, K, N, 0, x, out, err);
}

/* ---- search ------------------------------------------------------------------------------------------ */

/* The rate the search maximises: the engine's round, or sequoia-run's (sq_cost_model). */
static double ranked_tps(const sq_dyn_choice *c, sq_cost_model m)
{
    return m == SQ_COST_SEQUOIA_RUN ? c->run_tokens_per_second : c->tokens_per_second;
}

static int better(const sq_dyn_choice *a, const sq_dyn_choice *b, sq_cost_model m)
{
    double ra = ranked_tps(a, m), rb = ranked_tps(b, m);
    if (ra != rb)
        return ra > rb;
    if (a->nodes != b->nodes)
        return a->nodes < b->nodes;
    if (a->steps != b->steps)
        return a->steps < b->steps;
    return a->topk < b->topk;
}

void sq_dyn_grid_free(sq_dyn_grid *g)
{
    if (!g)
        return;
    free(g->E);
    free(g->se);
    free(g->catchup);
    free(g);
}

int sq_dyn_grid_new(const sq_dyn_samples *s, int Lm, int Km, int Nm,
                    const sq_dyn_predict_params *p, sq_dyn_grid **out, sq_error *err)
{
    *out = NULL;
    if (Lm < 1 || Km < 1 || Km > s->K || Nm < 2 || Lm > SQ_DYN_MAX_STEPS || Nm > SQ_DYN_MAX_NODES)
        return sq_error_set(err, SQ_EUSAGE, "envelope search: bounds L <= %d, K <= %d, N <= %d "
                            "leave nothing to search (L 1..%d, K 1..%d, N 2..%d)", Lm, Km, Nm,
                            SQ_DYN_MAX_STEPS, s->K, SQ_DYN_MAX_NODES);
    sq_dyn_grid *g = calloc(1, sizeof *g);
    size_t per = (size_t)Lm * (Nm + 1), cells = per * Km;
    if (g) {
        g->E = calloc(cells, sizeof *g->E);
        g->se = calloc(cells, sizeof *g->se);
        g->catchup = calloc(cells, sizeof *g->catchup);
    }
    if (!g || !g->E || !g->se || !g->catchup) {
        sq_dyn_grid_free(g);
        return sq_error_oom(err, "envelope search");
    }
    g->max_steps = Lm;
    g->max_topk = Km;
    g->max_nodes = Nm;
    g->trials = p && p->trials > 0 ? p->trials : sq_dyn_predict_default_params().trials;
    for (int K = 1; K <= Km; K++) {
        int rc = sq_dyn_predict_grid_catchup(s, Lm, K, Nm, p, g->E + per * (K - 1),
                                             g->se + per * (K - 1), g->catchup + per * (K - 1),
                                             NULL, err);
        if (rc) {
            sq_dyn_grid_free(g);
            return rc;
        }
    }
    *out = g;
    return SQ_OK;
}

double sq_dyn_grid_at(const sq_dyn_grid *g, int L, int K, int N, double *se)
{
    size_t i = ((size_t)(K - 1) * g->max_steps + (L - 1)) * (g->max_nodes + 1) + N;
    if (se)
        *se = g->se[i];
    return g->E[i];
}

double sq_dyn_grid_catchup(const sq_dyn_grid *g, int L, int K, int N)
{
    return g->catchup[((size_t)(K - 1) * g->max_steps + (L - 1)) * (g->max_nodes + 1) + N];
}

int sq_dyn_search(const sq_dyn_grid *g, const sq_dyn_search_params *p, sq_dyn_choice *best,
                  int cap, int *n_best, double *plain_tps, sq_error *err)
{
    *n_best = 0;
    double t1;
    int rc = sq_dyn_plain_ms(p->target, p->batch, p->extrapolate, &t1, err);
    if (rc)
        return rc;
    *plain_tps = p->batch / t1 * 1000.0;
    int found = 0;
    for (int K = 1; K <= g->max_topk && !rc; K++)
        for (int L = 1; L <= g->max_steps && !rc; L++)
            for (int N = 2; N <= g->max_nodes && !rc; N++) {
                if (sq_dyn_envelope_check(p->engine, L, K, N, NULL, NULL) != SQ_OK)
                    continue;
                sq_dyn_cost c, rc_run;
                double se, E = sq_dyn_grid_at(g, L, K, N, &se);
                double cu = sq_dyn_grid_catchup(g, L, K, N);
                if ((rc = sq_dyn_round_ms_accepted(p->engine, p->target, p->draft, p->draft_ms,
                                                   p->batch, L, K, N, E, p->extrapolate, &c,
                                                   err)) ||
                    (rc = sq_dyn_round_ms_runtime(p->target, p->draft, p->draft_ms, p->batch, L,
                                                  K, N, cu, p->extrapolate, &rc_run, err)))
                    break;
                found = 1;
                sq_dyn_choice ch = {L, K, N, E, se, c.round_ms, c.target_ms, c.draft_ms,
                                    p->batch * E / c.round_ms * 1000.0, cu, rc_run.round_ms,
                                    rc_run.target_ms, rc_run.draft_ms,
                                    p->batch * E / rc_run.round_ms * 1000.0};
                /* into the sorted list of the cap best */
                if (cap <= 0 || (*n_best == cap && !better(&ch, &best[cap - 1], p->cost_model)))
                    continue;
                int j = *n_best < cap ? (*n_best)++ : cap - 1;
                while (j > 0 && better(&ch, &best[j - 1], p->cost_model)) {
                    best[j] = best[j - 1];
                    j--;
                }
                best[j] = ch;
            }
    if (!rc && !found)
        rc = sq_error_set(err, SQ_EUSAGE, "envelope search: no envelope within L <= %d, K <= %d, "
                          "N <= %d keeps %s's rules", g->max_steps, g->max_topk, g->max_nodes,
                          sq_engine_name(p->engine));
    return rc;
}
