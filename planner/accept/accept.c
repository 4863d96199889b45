#include "planner/accept/accept.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "libsequoia/base/busguard.h"
#include "libsequoia/base/json.h"

/* ---- modes and configurations --------------------------------------------------------------- */

int sq_accept_config_check(const sq_accept_config *cfg, sq_error *err)
{
    if (!isfinite(cfg->temperature) || cfg->temperature < 0)
        return sq_error_set(err, SQ_EUSAGE, "temperature: %g, must be a finite value >= 0",
                            cfg->temperature);
    if (!(cfg->top_p > 0) || cfg->top_p > 1)
        return sq_error_set(err, SQ_EUSAGE, "top-p: %g, must be in (0, 1]", cfg->top_p);
    if (cfg->temperature == 0 && cfg->mode != SQ_MODE_GREEDY)
        return sq_error_set(err, SQ_EUSAGE,
                            "temperature 0 is greedy decoding: it is allowed only in greedy mode "
                            "(mode %s needs a temperature > 0)",
                            sq_mode_name(cfg->mode));
    return SQ_OK;
}

void sq_accept_config_name(const sq_accept_config *cfg, char *buf, size_t size)
{
    if (cfg->mode == SQ_MODE_GREEDY) {
        snprintf(buf, size, "greedy@T0");
        return;
    }
    if (cfg->top_p < 1)
        snprintf(buf, size, "%s@T%g@p%g", sq_mode_name(cfg->mode), cfg->temperature,
                 cfg->top_p);
    else
        snprintf(buf, size, "%s@T%g", sq_mode_name(cfg->mode), cfg->temperature);
}

/* ---- workspace ------------------------------------------------------------------------------ */

struct sq_accept_ws {
    int            V, W;
    double        *rs;       /* (V) residual R off the candidates, compacted, unnormalised */
    double        *qs;       /* (V) Q at the same tokens                                   */
    unsigned char *is_cand;  /* (V) 1 at the candidate tokens during sq_accept_residual    */
    double        *scratch;  /* (V) nucleus selection, rank keys                           */
    sq_ranked     *heap;     /* (W) the draft's top-W                                      */
    int32_t       *top;      /* (W) the draft's top-W tokens                               */
    double        *hkey;     /* (W) heap keys                                              */
    int           *hidx;     /* (W) heap indices                                           */
    int           *order;    /* (W) draw order (with replacement)                          */
    double        *u;        /* (W) uniforms (with replacement)                            */
    int           *cand;     /* (W) candidates                                             */
    double        *a;        /* (W) one draw's vector                                      */
    int           *ut;       /* (W) distinct candidate tokens                              */
    int           *slot;     /* (W) candidate k -> its entry in ut                         */
    double        *ur, *uq;  /* (W) R (unnormalised) and Q at the distinct candidates      */
};

sq_accept_ws *sq_accept_ws_new(int V, int W)
{
    SQ_ASSERT(V >= 1 && W >= 1);
    sq_accept_ws *ws = calloc(1, sizeof *ws);
    if (!ws)
        return NULL;
    ws->V = V;
    ws->W = W;
    ws->rs = malloc((size_t)V * sizeof *ws->rs);
    ws->qs = malloc((size_t)V * sizeof *ws->qs);
    ws->is_cand = calloc((size_t)V, 1);
    ws->scratch = malloc((size_t)V * sizeof *ws->scratch);
    ws->heap = malloc((size_t)W * sizeof *ws->heap);
    ws->top = malloc((size_t)W * sizeof *ws->top);
    ws->hkey = malloc((size_t)W * sizeof *ws->hkey);
    ws->hidx = malloc((size_t)W * sizeof *ws->hidx);
    ws->order = malloc((size_t)W * sizeof *ws->order);
    ws->u = malloc((size_t)W * sizeof *ws->u);
    ws->cand = malloc((size_t)W * sizeof *ws->cand);
    ws->a = malloc((size_t)W * sizeof *ws->a);
    ws->ut = malloc((size_t)W * sizeof *ws->ut);
    ws->slot = malloc((size_t)W * sizeof *ws->slot);
    ws->ur = malloc((size_t)W * sizeof *ws->ur);
    ws->uq = malloc((size_t)W * sizeof *ws->uq);
    if (!ws->rs || !ws->qs || !ws->is_cand || !ws->scratch || !ws->heap || !ws->top ||
        !ws->hkey || !ws->hidx ||
        !ws->order || !ws->u || !ws->cand || !ws->a || !ws->ut || !ws->slot || !ws->ur ||
        !ws->uq) {
        sq_accept_ws_free(ws);
        return NULL;
    }
    return ws;
}

void sq_accept_ws_free(sq_accept_ws *ws)
{
    if (!ws)
        return;
    free(ws->rs);
    free(ws->qs);
    free(ws->is_cand);
    free(ws->scratch);
    free(ws->heap);
    free(ws->top);
    free(ws->hkey);
    free(ws->hidx);
    free(ws->order);
    free(ws->u);
    free(ws->cand);
    free(ws->a);
    free(ws->ut);
    free(ws->slot);
    free(ws->ur);
    free(ws->uq);
    free(ws);
}

/* ---- the verification rule: distributions, greedy, topk --------------------------------------- */

int sq_accept_probs(const float *logits, int V, double temperature, double top_p,
                    double *probs, sq_accept_ws *ws)
{
    SQ_ASSERT(V <= ws->V);
    return sq_probs_from_logits(logits, V, temperature, top_p, probs, ws->scratch);
}

/* The draft's top-min(W, V) tokens into ws->top; returns how many. */
static int draft_top(const float *draft, int V, int W, sq_accept_ws *ws)
{
    SQ_ASSERT(W <= ws->W && V <= ws->V);
    int n = W < V ? W : V;
    sq_draft_topk(draft, V, n, ws->top, ws->scratch, ws->heap);
    return n;
}

void sq_accept_greedy(const float *target, const float *draft, int V, int W, double *a,
                      sq_accept_ws *ws)
{
    memset(a, 0, (size_t)W * sizeof *a);
    int arg = sq_argmax_f(target, V);
    int n = draft_top(draft, V, W, ws);
    for (int k = 0; k < n; k++)
        if (ws->top[k] == arg) {
            a[k] = 1.0;
            break;
        }
}

void sq_accept_topk(const double *P, const float *draft, int V, int W, double *a,
                    sq_accept_ws *ws)
{
    memset(a, 0, (size_t)W * sizeof *a);
    int n = draft_top(draft, V, W, ws);
    for (int k = 0; k < n; k++)
        a[k] = P[ws->top[k]];
}

/* ---- drawing candidates ---------------------------------------------------------------------- */

/* Max-heap of (key, index) on key, n entries: replace the root by (key, i) and sift down. */
static void heap_replace_root(double *hk, int *hi, int n, double key, int i)
{
    int c = 0;
    for (;;) {
        int k = 2 * c + 1;
        if (k >= n)
            break;
        if (k + 1 < n && hk[k + 1] > hk[k])
            k++;
        if (hk[k] <= key)
            break;
        hk[c] = hk[k];
        hi[c] = hi[k];
        c = k;
    }
    hk[c] = key;
    hi[c] = i;
}

/* One exponential race (sq_accept_draw_without): token i gets key E_i / Q_i with E_i ~ Exp(1);
 * the W smallest keys in increasing order are a draw of W tokens without replacement. A
 * max-heap keeps the W smallest keys; tau is the largest of them. Once the heap is full, token
 * i enters it iff E_i < tau·Q_i, independently with probability 1 - exp(-tau·Q_i): one Exp(1)
 * variable E decides a whole run of tokens (exponential jumps): skip while E >= tau·Q_i,
 * subtracting; the token where E < tau·Q_i enters with E_i = E (E is then exactly Exp(1)
 * conditioned on being below tau·Q_i), so key = E / Q_i; then tau shrinks and a fresh E starts.
 * About W·(1 + ln(V/W)) random numbers instead of V. */
typedef struct race {
    double *hk;     /* the heap's keys    */
    int *hi;        /* and tokens         */
    int n, W, i;    /* entries, capacity, the next token to look at */
    double tau, E;
    gsl_rng *rng;
} race;

/* The first W tokens of positive mass fill the heap; then the first E (a full heap only). */
static void race_fill(race *r, const double *Q, int V)
{
    double *hk = r->hk;
    int *hi = r->hi, n = 0, i = 0;
    for (; i < V && n < r->W; i++) {
        double q = Q[i];
        if (!(q > 0))
            continue;
        double key = -log(gsl_rng_uniform_pos(r->rng)) / q;
        int c = n++;
        while (c > 0) {
            int p = (c - 1) / 2;
            if (hk[p] >= key)
                break;
            hk[c] = hk[p];
            hi[c] = hi[p];
            c = p;
        }
        hk[c] = key;
        hi[c] = i;
    }
    r->n = n;
    r->i = i;   /* V when the heap is not full */
    if (n == r->W) {
        r->tau = hk[0];
        r->E = -log(gsl_rng_uniform_pos(r->rng));
    }
}

/* Token i enters (E < tau·Q_i): its key replaces the largest, and a fresh E starts. */
static void race_enter(race *r, const double *Q, int i)
{
    heap_replace_root(r->hk, r->hi, r->n, r->E / Q[i], i);
    r->tau = r->hk[0];
    r->E = -log(gsl_rng_uniform_pos(r->rng));
}

/* The jumps over tokens [r->i, end). */
static void race_run(race *r, const double *Q, int end)
{
    double tau = r->tau, E = r->E;
    for (int i = r->i; i < end; i++) {
        double w = tau * Q[i];
        if (E >= w) {
            E -= w;
            continue;
        }
        r->E = E;
        race_enter(r, Q, i);
        tau = r->tau;
        E = r->E;
    }
    r->tau = tau;
    r->E = E;
    r->i = end > r->i ? end : r->i;
}

/* Pop the largest key into the back: cand ends up in increasing key (draw) order. */
static int race_finish(race *r, int *cand)
{
    int n = r->n;
    while (n > 0) {
        cand[n - 1] = r->hi[0];
        n--;
        if (n > 0)
            heap_replace_root(r->hk, r->hi, n, r->hk[n], r->hi[n]);
    }
    return r->n;
}

int sq_accept_draw_without(const double *Q, int V, int W, gsl_rng *rng, int *cand,
                           sq_accept_ws *ws)
{
    SQ_ASSERT(W <= ws->W);
    race r = {.hk = ws->hkey, .hi = ws->hidx, .W = W, .rng = rng};
    race_fill(&r, Q, V);
    race_run(&r, Q, V);
    return race_finish(&r, cand);
}

int sq_accept_draw_without2(const double *Q, int V, int W, gsl_rng *rng, int *cand,
                            sq_accept_ws *ws, int W2, gsl_rng *rng2, int *cand2,
                            sq_accept_ws *ws2, int *n2)
{
    SQ_ASSERT(W <= ws->W && W2 <= ws2->W && ws != ws2);
    race a = {.hk = ws->hkey, .hi = ws->hidx, .W = W, .rng = rng};
    race b = {.hk = ws2->hkey, .hi = ws2->hidx, .W = W2, .rng = rng2};
    race_fill(&a, Q, V);
    race_fill(&b, Q, V);
    /* the race that starts first runs alone up to the other's start, then both together: the
     * two chains of subtractions are independent, so the processor overlaps them; each race
     * makes the same operations, and takes the same random numbers from its own generator, as
     * alone */
    race *lead = a.i <= b.i ? &a : &b, *other = lead == &a ? &b : &a;
    race_run(lead, Q, other->i);
    double ta = a.tau, ea = a.E, tb = b.tau, eb = b.E;
    for (int i = other->i; i < V; i++) {
        const double q = Q[i], wa = ta * q, wb = tb * q;
        if (ea >= wa)
            ea -= wa;
        else {
            a.E = ea;
            race_enter(&a, Q, i);
            ta = a.tau;
            ea = a.E;
        }
        if (eb >= wb)
            eb -= wb;
        else {
            b.E = eb;
            race_enter(&b, Q, i);
            tb = b.tau;
            eb = b.E;
        }
    }
    *n2 = race_finish(&b, cand2);
    return race_finish(&a, cand);
}

int sq_accept_draw_with(const double *Q, int V, int W, gsl_rng *rng, int *cand,
                        sq_accept_ws *ws)
{
    SQ_ASSERT(W <= ws->W);
    double total = 0;
    int last = -1;
    for (int i = 0; i < V; i++)
        if (Q[i] > 0) {
            total += Q[i];
            last = i;
        }
    if (last < 0)
        return 0;
    double *u = ws->u;
    int *ord = ws->order;
    for (int j = 0; j < W; j++) {
        u[j] = gsl_rng_uniform(rng) * total;
        ord[j] = j;
    }
    /* Insertion sort of the draw indices by their uniform (W is small). */
    for (int j = 1; j < W; j++) {
        int o = ord[j], k = j;
        while (k > 0 && u[ord[k - 1]] > u[o]) {
            ord[k] = ord[k - 1];
            k--;
        }
        ord[k] = o;
    }
    double cum = 0;
    int j = 0;
    for (int i = 0; i < V && j < W; i++) {
        if (!(Q[i] > 0))
            continue;
        cum += Q[i];
        while (j < W && u[ord[j]] < cum)
            cand[ord[j++]] = i;
    }
    while (j < W) /* rounding at the top end */
        cand[ord[j++]] = last;
    return W;
}

/* ---- the residual recursion ------------------------------------------------------------------ */

/* The first rejection's pass over the vocabulary: v = P - Q at every token, kept (compacted into
 * rs, with Q into qs) where v > 0 and the token is not a candidate; *sum = the kept mass. The
 * second, over the kept tokens: v = rs·rscale - qs·qscale, kept where v > 0. Both four tokens at
 * a time with AVX2 (issue 17: these passes were a third of a position) or eight with AVX-512
 * (issue 27) where the CPU has it (the path: sq_rule_isa, libsequoia/verify/rule.h); every path
 * adds the kept mass in the same order, so all give the same bits. These two functions are the
 * one-by-one tails of every path. */
static int residual_first_scalar(const double *P, const double *Q, int V,
                                 const unsigned char *is_cand, double *rs, double *qs,
                                 double *sum_out, int i, int ns, double sum)
{
    for (; i < V; i++) {
        double q = Q[i], v = P[i] - q;
        rs[ns] = v;
        qs[ns] = q;
        int keep = (v > 0) & !is_cand[i];
        ns += keep;
        sum += keep ? v : 0.0;
    }
    *sum_out = sum;
    return ns;
}

static int residual_next_scalar(double *rs, double *qs, int ns, double rscale, double qscale,
                                double *sum_out, int s, int out, double sum)
{
    for (; s < ns; s++) {
        double q = qs[s], v = rs[s] * rscale - q * qscale;
        rs[out] = v;
        qs[out] = q;
        out += v > 0;
        sum += v > 0 ? v : 0.0;
    }
    *sum_out = sum;
    return out;
}

/* The scalar path adds in the vector paths' order (issue 27), so that every path gives the same
 * bits: four partial sums over the first n / 4 · 4 values (sum j takes the kept values at 4t +
 * j), folded as (s0 + s1) + (s2 + s3), then the rest one by one (the *_scalar tails above). */
static int residual_first_lanes(const double *P, const double *Q, int V,
                                const unsigned char *is_cand, double *rs, double *qs,
                                double *sum_out)
{
    double l[4] = {0};
    int ns = 0, i = 0;
    for (; i + 4 <= V; i += 4)
        for (int j = 0; j < 4; j++) {
            double q = Q[i + j], v = P[i + j] - q;
            rs[ns] = v;
            qs[ns] = q;
            int keep = (v > 0) & !is_cand[i + j];
            ns += keep;
            l[j] += keep ? v : 0.0;
        }
    return residual_first_scalar(P, Q, V, is_cand, rs, qs, sum_out, i, ns,
                                 (l[0] + l[1]) + (l[2] + l[3]));
}

static int residual_next_lanes(double *rs, double *qs, int ns, double rscale, double qscale,
                               double *sum_out)
{
    double l[4] = {0};
    int out = 0, s = 0;
    for (; s + 4 <= ns; s += 4) {
        double v4[4], q4[4];   /* the four are read before any is written (in place) */
        for (int j = 0; j < 4; j++) {
            q4[j] = qs[s + j];
            v4[j] = rs[s + j] * rscale - q4[j] * qscale;
        }
        for (int j = 0; j < 4; j++) {
            rs[out] = v4[j];
            qs[out] = q4[j];
            out += v4[j] > 0;
            l[j] += v4[j] > 0 ? v4[j] : 0.0;
        }
    }
    return residual_next_scalar(rs, qs, ns, rscale, qscale, sum_out, s, out,
                                (l[0] + l[1]) + (l[2] + l[3]));
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define SQ_ACCEPT_AVX2 1

/* For a 4-bit keep mask, the 32-bit lane permutation that moves the kept doubles to the front
 * in order. */
static const int32_t compact_lut[16][8] = {
    {0, 1, 2, 3, 4, 5, 6, 7},
    {0, 1, 2, 3, 4, 5, 6, 7},
    {2, 3, 2, 3, 4, 5, 6, 7},
    {0, 1, 2, 3, 4, 5, 6, 7},
    {4, 5, 2, 3, 4, 5, 6, 7},
    {0, 1, 4, 5, 4, 5, 6, 7},
    {2, 3, 4, 5, 4, 5, 6, 7},
    {0, 1, 2, 3, 4, 5, 6, 7},
    {6, 7, 2, 3, 4, 5, 6, 7},
    {0, 1, 6, 7, 4, 5, 6, 7},
    {2, 3, 6, 7, 4, 5, 6, 7},
    {0, 1, 2, 3, 6, 7, 6, 7},
    {4, 5, 6, 7, 4, 5, 6, 7},
    {0, 1, 4, 5, 6, 7, 6, 7},
    {2, 3, 4, 5, 6, 7, 6, 7},
    {0, 1, 2, 3, 4, 5, 6, 7},
};

__attribute__((target("avx2"))) static int residual_first_avx2(const double *P, const double *Q,
                                                              int V, const unsigned char *is_cand,
                                                              double *rs, double *qs,
                                                              double *sum_out)
{
    const __m256d zero = _mm256_setzero_pd();
    __m256d acc = zero;
    int ns = 0, i = 0;
    for (; i + 4 <= V; i += 4) {
        __m256d q = _mm256_loadu_pd(Q + i), v = _mm256_sub_pd(_mm256_loadu_pd(P + i), q);
        uint32_t c4;
        memcpy(&c4, is_cand + i, sizeof c4);
        __m256i cand = _mm256_cmpeq_epi64(_mm256_cvtepu8_epi64(_mm_cvtsi32_si128((int)c4)),
                                          _mm256_setzero_si256());
        __m256d keep = _mm256_and_pd(_mm256_cmp_pd(v, zero, _CMP_GT_OQ), _mm256_castsi256_pd(cand));
        acc = _mm256_add_pd(acc, _mm256_and_pd(v, keep));
        int m = _mm256_movemask_pd(keep);
        __m256i perm = _mm256_loadu_si256((const __m256i *)(const void *)compact_lut[m]);
        _mm256_storeu_pd(rs + ns, _mm256_castps_pd(_mm256_permutevar8x32_ps(_mm256_castpd_ps(v), perm)));
        _mm256_storeu_pd(qs + ns, _mm256_castps_pd(_mm256_permutevar8x32_ps(_mm256_castpd_ps(q), perm)));
        ns += __builtin_popcount((unsigned)m);
    }
    double l[4];
    _mm256_storeu_pd(l, acc);
    return residual_first_scalar(P, Q, V, is_cand, rs, qs, sum_out, i, ns,
                                 (l[0] + l[1]) + (l[2] + l[3]));
}

__attribute__((target("avx2"))) static int residual_next_avx2(double *rs, double *qs, int ns,
                                                             double rscale, double qscale,
                                                             double *sum_out)
{
    const __m256d zero = _mm256_setzero_pd(), vr = _mm256_set1_pd(rscale),
                  vq = _mm256_set1_pd(qscale);
    __m256d acc = zero;
    int out = 0, s = 0;
    /* in place: the values are loaded before anything at out <= s is stored. Eight at a time
     * (two groups of four, added to acc in order: the same bits as four at a time; issue 27:
     * 10-15% faster), then four. */
    for (; s + 8 <= ns; s += 8) {
        __m256d q = _mm256_loadu_pd(qs + s), q2 = _mm256_loadu_pd(qs + s + 4);
        __m256d v = _mm256_sub_pd(_mm256_mul_pd(_mm256_loadu_pd(rs + s), vr), _mm256_mul_pd(q, vq));
        __m256d v2 =
            _mm256_sub_pd(_mm256_mul_pd(_mm256_loadu_pd(rs + s + 4), vr), _mm256_mul_pd(q2, vq));
        __m256d keep = _mm256_cmp_pd(v, zero, _CMP_GT_OQ), keep2 = _mm256_cmp_pd(v2, zero, _CMP_GT_OQ);
        acc = _mm256_add_pd(acc, _mm256_and_pd(v, keep));
        acc = _mm256_add_pd(acc, _mm256_and_pd(v2, keep2));
        int m = _mm256_movemask_pd(keep), m2 = _mm256_movemask_pd(keep2);
        __m256i perm = _mm256_loadu_si256((const __m256i *)(const void *)compact_lut[m]);
        __m256i perm2 = _mm256_loadu_si256((const __m256i *)(const void *)compact_lut[m2]);
        int out2 = out + __builtin_popcount((unsigned)m);
        _mm256_storeu_pd(rs + out, _mm256_castps_pd(_mm256_permutevar8x32_ps(_mm256_castpd_ps(v), perm)));
        _mm256_storeu_pd(qs + out, _mm256_castps_pd(_mm256_permutevar8x32_ps(_mm256_castpd_ps(q), perm)));
        _mm256_storeu_pd(rs + out2, _mm256_castps_pd(_mm256_permutevar8x32_ps(_mm256_castpd_ps(v2), perm2)));
        _mm256_storeu_pd(qs + out2, _mm256_castps_pd(_mm256_permutevar8x32_ps(_mm256_castpd_ps(q2), perm2)));
        out = out2 + __builtin_popcount((unsigned)m2);
    }
    for (; s + 4 <= ns; s += 4) {
        __m256d q = _mm256_loadu_pd(qs + s);
        __m256d v = _mm256_sub_pd(_mm256_mul_pd(_mm256_loadu_pd(rs + s), vr), _mm256_mul_pd(q, vq));
        __m256d keep = _mm256_cmp_pd(v, zero, _CMP_GT_OQ);
        acc = _mm256_add_pd(acc, _mm256_and_pd(v, keep));
        int m = _mm256_movemask_pd(keep);
        __m256i perm = _mm256_loadu_si256((const __m256i *)(const void *)compact_lut[m]);
        _mm256_storeu_pd(rs + out, _mm256_castps_pd(_mm256_permutevar8x32_ps(_mm256_castpd_ps(v), perm)));
        _mm256_storeu_pd(qs + out, _mm256_castps_pd(_mm256_permutevar8x32_ps(_mm256_castpd_ps(q), perm)));
        out += __builtin_popcount((unsigned)m);
    }
    double l[4];
    _mm256_storeu_pd(l, acc);
    return residual_next_scalar(rs, qs, ns, rscale, qscale, sum_out, s, out,
                                (l[0] + l[1]) + (l[2] + l[3]));
}

/* One AVX-512 step of both passes: the kept lanes of v (and the matching q) packed to rs and qs,
 * their values added to the four-lane sum as the AVX2 path adds them (low half, then high
 * half); returns how many were kept. */
__attribute__((target("avx512f,avx512vl"))) static inline int
keep8(__m512d v, __m512d q, __mmask8 keep, __m256d *acc, double *rs, double *qs)
{
    __m512d vz = _mm512_maskz_mov_pd(keep, v);
    *acc = _mm256_add_pd(*acc, _mm512_castpd512_pd256(vz));
    *acc = _mm256_add_pd(*acc, _mm512_extractf64x4_pd(vz, 1));
    _mm512_storeu_pd(rs, _mm512_maskz_compress_pd(keep, v));
    _mm512_storeu_pd(qs, _mm512_maskz_compress_pd(keep, q));
    return __builtin_popcount((unsigned)keep);
}

/* The same for the four-lane step that follows when four values are left. */
__attribute__((target("avx512f,avx512vl"))) static inline int
keep4(__m256d v, __m256d q, __mmask8 keep, __m256d *acc, double *rs, double *qs)
{
    *acc = _mm256_add_pd(*acc, _mm256_maskz_mov_pd(keep, v));
    _mm256_storeu_pd(rs, _mm256_maskz_compress_pd(keep, v));
    _mm256_storeu_pd(qs, _mm256_maskz_compress_pd(keep, q));
    return __builtin_popcount((unsigned)keep);
}

/* The same passes eight tokens at a time with AVX-512 (compress instead of the table), the sum
 * still over four lanes in the AVX2 path's order: the low four values of every eight, then the
 * high four, then (when four are left) one AVX2 step, then the scalar tail. Same bits. */
__attribute__((target("avx512f,avx512vl"))) static int
residual_first_avx512(const double *P, const double *Q, int V, const unsigned char *is_cand,
                      double *rs, double *qs, double *sum_out)
{
    const __m512d zero = _mm512_setzero_pd();
    __m256d acc = _mm256_setzero_pd();
    int ns = 0, i = 0;
    for (; i + 8 <= V; i += 8) {
        __m512d q = _mm512_loadu_pd(Q + i), v = _mm512_sub_pd(_mm512_loadu_pd(P + i), q);
        uint64_t c8;
        memcpy(&c8, is_cand + i, sizeof c8);
        __m512i c = _mm512_cvtepu8_epi64(_mm_cvtsi64_si128((long long)c8));
        __mmask8 nc = _mm512_cmpeq_epi64_mask(c, _mm512_setzero_si512());
        __mmask8 keep = _mm512_mask_cmp_pd_mask(nc, v, zero, _CMP_GT_OQ);
        ns += keep8(v, q, keep, &acc, rs + ns, qs + ns);
    }
    if (i + 4 <= V) {
        __m256d q = _mm256_loadu_pd(Q + i), v = _mm256_sub_pd(_mm256_loadu_pd(P + i), q);
        uint32_t c4;
        memcpy(&c4, is_cand + i, sizeof c4);
        __mmask8 nc = _mm256_cmpeq_epi64_mask(_mm256_cvtepu8_epi64(_mm_cvtsi32_si128((int)c4)),
                                              _mm256_setzero_si256());
        __mmask8 keep = _mm256_mask_cmp_pd_mask(nc, v, _mm256_setzero_pd(), _CMP_GT_OQ);
        ns += keep4(v, q, keep, &acc, rs + ns, qs + ns);
        i += 4;
    }
    double l[4];
    _mm256_storeu_pd(l, acc);
    return residual_first_scalar(P, Q, V, is_cand, rs, qs, sum_out, i, ns,
                                 (l[0] + l[1]) + (l[2] + l[3]));
}

__attribute__((target("avx512f,avx512vl"))) static int
residual_next_avx512(double *rs, double *qs, int ns, double rscale, double qscale,
                     double *sum_out)
{
    const __m512d zero = _mm512_setzero_pd(), vr = _mm512_set1_pd(rscale),
                  vq = _mm512_set1_pd(qscale);
    __m256d acc = _mm256_setzero_pd();
    int out = 0, s = 0;
    /* in place: the values are loaded before anything at out <= s is stored */
    for (; s + 8 <= ns; s += 8) {
        __m512d q = _mm512_loadu_pd(qs + s);
        __m512d v = _mm512_sub_pd(_mm512_mul_pd(_mm512_loadu_pd(rs + s), vr), _mm512_mul_pd(q, vq));
        __mmask8 keep = _mm512_cmp_pd_mask(v, zero, _CMP_GT_OQ);
        out += keep8(v, q, keep, &acc, rs + out, qs + out);
    }
    if (s + 4 <= ns) {
        __m256d q = _mm256_loadu_pd(qs + s);
        __m256d v = _mm256_sub_pd(_mm256_mul_pd(_mm256_loadu_pd(rs + s), _mm256_set1_pd(rscale)),
                                  _mm256_mul_pd(q, _mm256_set1_pd(qscale)));
        __mmask8 keep = _mm256_cmp_pd_mask(v, _mm256_setzero_pd(), _CMP_GT_OQ);
        out += keep4(v, q, keep, &acc, rs + out, qs + out);
        s += 4;
    }
    double l[4];
    _mm256_storeu_pd(l, acc);
    return residual_next_scalar(rs, qs, ns, rscale, qscale, sum_out, s, out,
                                (l[0] + l[1]) + (l[2] + l[3]));
}
#endif

static int residual_first(const double *P, const double *Q, int V, const unsigned char *is_cand,
                          double *rs, double *qs, double *sum)
{
#ifdef SQ_ACCEPT_AVX2
    const int isa = sq_rule_isa();
    if (isa >= SQ_RULE_ISA_AVX512)
        return residual_first_avx512(P, Q, V, is_cand, rs, qs, sum);
    if (isa >= SQ_RULE_ISA_AVX2)
        return residual_first_avx2(P, Q, V, is_cand, rs, qs, sum);
#endif
    return residual_first_lanes(P, Q, V, is_cand, rs, qs, sum);
}

static int residual_next(double *rs, double *qs, int ns, double rscale, double qscale,
                         double *sum)
{
#ifdef SQ_ACCEPT_AVX2
    const int isa = sq_rule_isa();
    if (isa >= SQ_RULE_ISA_AVX512)
        return residual_next_avx512(rs, qs, ns, rscale, qscale, sum);
    if (isa >= SQ_RULE_ISA_AVX2)
        return residual_next_avx2(rs, qs, ns, rscale, qscale, sum);
#endif
    return residual_next_lanes(rs, qs, ns, rscale, qscale, sum);
}

void sq_accept_residual(const double *P, const double *Q, int V, const int *cand, int n,
                        int with_replacement, double *a, int W, sq_accept_ws *ws)
{
    SQ_ASSERT(n <= W && V <= ws->V);
    memset(a, 0, (size_t)W * sizeof *a);
    if (n == 0)
        return;
    /* The distinct candidate tokens are tracked apart (ur, uq); every other token with R > 0
     * lives in the compacted arrays (rs, qs), built at the first rejection. R = value · rscale,
     * Q' = Q · qscale.
     *
     * Q'(x_j) <- 0 for the rejected candidates need not be stored: a rejected x had R(x) < Q'(x),
     * so the update leaves R(x) = 0, and max(0 - Q'(x), 0) = 0 keeps it there whatever Q'(x) is;
     * without replacement the candidates are distinct, so Q'(x_k) is never one of them. */
    int m = 0;
    for (int k = 0; k < n; k++) {
        int x = cand[k], j = 0;
        while (j < m && ws->ut[j] != x)
            j++;
        if (j == m) {
            ws->ut[m] = x;
            ws->ur[m] = P[x];
            ws->uq[m] = Q[x];
            ws->is_cand[x] = 1;
            m++;
        }
        ws->slot[k] = j;
    }
    double *rs = ws->rs, *qs = ws->qs;
    int ns = -1;                 /* -1: the compacted arrays are not built yet */
    double rscale = 1.0, qscale = 1.0, qmass = 1.0;
    double remain = 1.0;         /* 1 - Σ_{j<k} a_j: x_1..x_{k-1} were all rejected */
    for (int k = 0; k < n; k++) {
        int j = ws->slot[k];
        double qx = ws->uq[j] * qscale, rx = ws->ur[j] * rscale;
        double ratio = qx > 0 ? (rx >= qx ? 1.0 : rx / qx) : (rx > 0 ? 1.0 : 0.0);
        a[k] = remain * ratio;
        remain -= a[k];
        if (ratio >= 1.0 || !(remain > 0) || k == n - 1)
            break;
        /* Rejected: R <- norm(max(R - Q', 0)). Branch-free compaction keeps the loop tight. */
        double sum = 0;
        if (ns < 0) {
            ns = residual_first(P, Q, V, ws->is_cand, rs, qs, &sum);
        } else {
            ns = residual_next(rs, qs, ns, rscale, qscale, &sum);
        }
        for (int u = 0; u < m; u++) {
            double v = ws->ur[u] * rscale - ws->uq[u] * qscale;
            ws->ur[u] = v > 0 ? v : 0.0;
            sum += ws->ur[u];
        }
        if (!(sum > 0))
            break; /* R = Q': nothing is left to accept */
        rscale = 1.0 / sum;
        if (!with_replacement) {
            /* Q'(x_k) <- 0, Q' <- norm(Q') */
            qmass -= ws->uq[j];
            if (!(qmass > 0))
                break; /* the draft has no other token: no candidate is left */
            qscale = 1.0 / qmass;
        }
    }
    for (int u = 0; u < m; u++)
        ws->is_cand[ws->ut[u]] = 0;
}

void sq_accept_position(const sq_accept_config *cfg, const float *target, const float *draft,
                        const double *P, const double *Q, int V, int W, int samples,
                        gsl_rng *rng, double *a, sq_accept_ws *ws)
{
    switch (cfg->mode) {
    case SQ_MODE_GREEDY:
        sq_accept_greedy(target, draft, V, W, a, ws);
        return;
    case SQ_MODE_TOPK:
        sq_accept_topk(P, draft, V, W, a, ws);
        return;
    case SQ_MODE_STOCHASTIC:
    case SQ_MODE_SPECINFER:
        break;
    }
    int with = cfg->mode == SQ_MODE_SPECINFER;
    memset(a, 0, (size_t)W * sizeof *a);
    double w = 1.0 / samples;
    for (int s = 0; s < samples; s++) {
        int n = with ? sq_accept_draw_with(Q, V, W, rng, ws->cand, ws)
                     : sq_accept_draw_without(Q, V, W, rng, ws->cand, ws);
        sq_accept_residual(P, Q, V, ws->cand, n, with, ws->a, W, ws);
        for (int k = 0; k < W; k++)
            a[k] += w * ws->a[k];
    }
}

void sq_accept_position_drawn(const double *P, const double *Q, int V, int W, const int *cand,
                              int n, double *a, sq_accept_ws *ws)
{
    /* sq_accept_position's arithmetic with samples = 1: a = 0 + 1·a' */
    memset(a, 0, (size_t)W * sizeof *a);
    sq_accept_residual(P, Q, V, cand, n, 0, ws->a, W, ws);
    for (int k = 0; k < W; k++)
        a[k] += 1.0 * ws->a[k];
}

void sq_accept_position_with_draw(const double *P, const double *Q, int V, int W, gsl_rng *rng,
                                  double *a, sq_accept_ws *ws, sq_accept_draw *d)
{
    int n = sq_accept_draw_without2(Q, V, W, rng, ws->cand, ws, d->width, d->rng, d->cand, d->ws,
                                    &d->n);
    sq_accept_position_drawn(P, Q, V, W, ws->cand, n, a, ws);
}

/* ---- sufficient statistics -------------------------------------------------------------------- */

sq_accept_stats *sq_accept_stats_new(int width)
{
    SQ_ASSERT(width >= 1 && width <= SQ_ACCEPT_MAX_WIDTH);
    sq_accept_stats *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->width = width;
    s->sum_y = calloc((size_t)width, sizeof *s->sum_y);
    s->sum_ny = calloc((size_t)width, sizeof *s->sum_ny);
    s->sum_yy = calloc((size_t)width * (size_t)width, sizeof *s->sum_yy);
    if (!s->sum_y || !s->sum_ny || !s->sum_yy) {
        sq_accept_stats_free(s);
        return NULL;
    }
    return s;
}

void sq_accept_stats_free(sq_accept_stats *s)
{
    if (!s)
        return;
    free(s->sum_y);
    free(s->sum_ny);
    free(s->sum_yy);
    free(s);
}

void sq_accept_stats_add_unit(sq_accept_stats *s, double n, const double *y)
{
    int W = s->width;
    s->units++;
    s->sum_n += n;
    s->sum_n2 += n * n;
    for (int j = 0; j < W; j++) {
        s->sum_y[j] += y[j];
        s->sum_ny[j] += n * y[j];
        for (int k = 0; k < W; k++)
            s->sum_yy[(size_t)j * (size_t)W + (size_t)k] += y[j] * y[k];
    }
}

void sq_accept_stats_merge(sq_accept_stats *dst, const sq_accept_stats *src)
{
    SQ_ASSERT(dst->width == src->width);
    int W = dst->width;
    dst->units += src->units;
    dst->sequences += src->sequences;
    dst->sum_n += src->sum_n;
    dst->sum_n2 += src->sum_n2;
    for (int j = 0; j < W; j++) {
        dst->sum_y[j] += src->sum_y[j];
        dst->sum_ny[j] += src->sum_ny[j];
    }
    for (size_t i = 0; i < (size_t)W * (size_t)W; i++)
        dst->sum_yy[i] += src->sum_yy[i];
}

void sq_accept_stats_cov(const sq_accept_stats *s, double *cov)
{
    int W = s->width;
    memset(cov, 0, (size_t)W * (size_t)W * sizeof *cov);
    if (s->units < 2 || !(s->sum_n > 0))
        return;
    double U = (double)s->units, N = s->sum_n;
    double f = U / (U - 1.0) / (N * N);
    for (int j = 0; j < W; j++) {
        double pj = s->sum_y[j] / N;
        for (int k = 0; k < W; k++) {
            double pk = s->sum_y[k] / N;
            double v = s->sum_yy[(size_t)j * (size_t)W + (size_t)k] - pj * s->sum_ny[k] -
                       pk * s->sum_ny[j] + pj * pk * s->sum_n2;
            cov[(size_t)j * (size_t)W + (size_t)k] = f * v;
        }
    }
}

int sq_accept_stats_estimate(const sq_accept_stats *s, double *p, double *se)
{
    int W = s->width;
    double N = s->sum_n;
    for (int k = 0; k < W; k++) {
        double v = N > 0 ? s->sum_y[k] / N : 0.0;
        p[k] = v < 0 ? 0 : v > 1 ? 1 : v;
    }
    if (!se)
        return s->units >= 2;
    memset(se, 0, (size_t)W * sizeof *se);
    if (s->units < 2 || !(N > 0))
        return 0;
    double U = (double)s->units, f = U / (U - 1.0) / (N * N);
    for (int k = 0; k < W; k++) {
        double pk = s->sum_y[k] / N;
        double v = s->sum_yy[(size_t)k * (size_t)W + (size_t)k] - 2 * pk * s->sum_ny[k] +
                   pk * pk * s->sum_n2;
        se[k] = v > 0 ? sqrt(f * v) : 0.0;
    }
    return 1;
}

cJSON *sq_accept_stats_to_json(const sq_accept_stats *s)
{
    int W = s->width;
    sq_json_build b = sq_json_build_begin();
    cJSON *o = cJSON_CreateObject();
    sq_json_add(o, "units", cJSON_CreateNumber((double)s->units));
    sq_json_add(o, "sum_n", cJSON_CreateNumber(s->sum_n));
    sq_json_add(o, "sum_n2", cJSON_CreateNumber(s->sum_n2));
    sq_json_add(o, "sum_y", sq_json_number_array(s->sum_y, (size_t)W));
    sq_json_add(o, "sum_ny", sq_json_number_array(s->sum_ny, (size_t)W));
    cJSON *rows = cJSON_CreateArray();
    for (int j = 0; j < W && rows; j++)
        sq_json_append(rows, sq_json_number_array(s->sum_yy + (size_t)j * (size_t)W, (size_t)W));
    sq_json_add(o, "sum_yy", rows);
    return sq_json_build_end(b, o);
}

/* `arr` (at `where`): exactly W numbers into dst. */
static int vec_of(const cJSON *arr, int W, double *dst, const char *file, const char *where,
                  sq_error *err)
{
    double *v;
    size_t n;
    int rc = sq_json_get_numbers(arr, -1e300, 1e300, (size_t)W, &v, &n, file, where, err);
    if (rc)
        return rc;
    if (n != (size_t)W) {
        free(v);
        return sq_error_set(err, SQ_EDATA, "%s: %s: has %zu entries, expected %d (the width)",
                            file, where, n, W);
    }
    memcpy(dst, v, (size_t)W * sizeof *v);
    free(v);
    return SQ_OK;
}

static int get_vec(const cJSON *obj, const char *key, int W, double *dst, const char *file,
                   const char *ctx, sq_error *err)
{
    char where[300];
    snprintf(where, sizeof where, "%s.%s", ctx, key);
    const cJSON *arr = sq_json_field(obj, key);
    if (!arr)
        return sq_error_set(err, SQ_EDATA, "%s: %s: missing", file, where);
    return vec_of(arr, W, dst, file, where, err);
}

/* What the sums of s must satisfy by their definitions (docs/estimator.md, "Output"): over units
 * u with n_u >= 0 positions (or weights) and per-rank sums 0 <= Y_uk <= n_u, every sum is >= 0,
 * sum_n2 lies in [sum_n^2 / U, sum_n^2], sum_ny[k] <= sum_n2 and sum_yy[j][k] <= sum_n2,
 * sum_yy is symmetric, its diagonal is at least sum_y[k]^2 / U and sum_ny[k]^2 / sum_n2, each
 * entry obeys Cauchy-Schwarz against the diagonal, and so does the covariance the sums imply
 * (a Gram matrix: Σ_u (Y_uj - p_j n_u)(Y_uk - p_k n_u)). All within rounding (relative
 * `tol`). A file that breaks one was edited or damaged, and would give --compare error bars
 * of any size (docs/robustness.md). */
static int stats_consistent(const sq_accept_stats *s, const char *file, const char *ctx,
                            sq_error *err)
{
    const double tol = 1e-9, U = (double)s->units, N = s->sum_n, N2 = s->sum_n2;
    const int W = s->width;
    const double *yy = s->sum_yy;
#define YY(j, k) yy[(size_t)(j) * (size_t)W + (size_t)(k)]
    if (s->units == 0 && (N > 0 || N2 > 0))
        return sq_error_set(err, SQ_EDATA, "%s: %s.units: 0, but sum_n is %.17g and sum_n2 "
                            "%.17g (no units, no positions)", file, ctx, N, N2);
    if (s->units > 0 && (N2 > N * N * (1 + tol) || N2 < N * N / U * (1 - tol)))
        return sq_error_set(err, SQ_EDATA, "%s: %s.sum_n2: %.17g is outside [sum_n^2 / units, "
                            "sum_n^2] = [%.17g, %.17g]", file, ctx, N2, N * N / U, N * N);
    for (int k = 0; k < W; k++) {
        if (s->sum_ny[k] < 0 || s->sum_ny[k] > N2 * (1 + tol))
            return sq_error_set(err, SQ_EDATA, "%s: %s.sum_ny[%d]: %.17g is outside [0, sum_n2 = "
                                "%.17g]", file, ctx, k, s->sum_ny[k], N2);
        double lo = s->units > 0 ? s->sum_y[k] * s->sum_y[k] / U : 0;
        if (N2 > 0 && s->sum_ny[k] * s->sum_ny[k] / N2 > lo)
            lo = s->sum_ny[k] * s->sum_ny[k] / N2;
        if (YY(k, k) < lo * (1 - tol) || YY(k, k) > N2 * (1 + tol))
            return sq_error_set(err, SQ_EDATA, "%s: %s.sum_yy[%d][%d]: %.17g is outside [%.17g, "
                                "sum_n2 = %.17g], the range its sums sum_y[%d] and sum_ny[%d] "
                                "allow", file, ctx, k, k, YY(k, k), lo, N2, k, k);
    }
    for (int j = 0; j < W; j++)
        for (int k = j + 1; k < W; k++) {
            double a = YY(j, k), b = YY(k, j), m = fmax(fabs(a), fabs(b));
            if (fabs(a - b) > tol * m)
                return sq_error_set(err, SQ_EDATA, "%s: %s.sum_yy[%d][%d]: %.17g, but "
                                    "sum_yy[%d][%d] is %.17g (a sum of products is symmetric)",
                                    file, ctx, j, k, a, k, j, b);
            double cs = sqrt(YY(j, j) * YY(k, k));
            if (a < 0 || a > cs * (1 + tol))
                return sq_error_set(err, SQ_EDATA, "%s: %s.sum_yy[%d][%d]: %.17g is outside [0, "
                                    "sqrt(sum_yy[%d][%d] sum_yy[%d][%d]) = %.17g] (Cauchy-Schwarz)",
                                    file, ctx, j, k, a, j, j, k, k, cs);
        }
    if (!(N > 0))
        return SQ_OK;
    /* the covariance's numerators v_jk and the size of their terms (their rounding) */
    double *v = malloc((size_t)W * (size_t)W * sizeof *v);
    double *sz = malloc((size_t)W * (size_t)W * sizeof *sz);
    int rc = SQ_OK;
    if (!v || !sz)
        rc = sq_error_oom(err, "statistics check");
    for (int j = 0; j < W && !rc; j++)
        for (int k = 0; k < W; k++) {
            double pj = s->sum_y[j] / N, pk = s->sum_y[k] / N;
            size_t i = (size_t)j * (size_t)W + (size_t)k;
            v[i] = YY(j, k) - pj * s->sum_ny[k] - pk * s->sum_ny[j] + pj * pk * N2;
            sz[i] = fabs(YY(j, k)) + pj * s->sum_ny[k] + pk * s->sum_ny[j] + pj * pk * N2;
        }
    for (int k = 0; k < W && !rc; k++) {
        size_t i = (size_t)k * (size_t)W + (size_t)k;
        if (v[i] < -tol * sz[i])
            rc = sq_error_set(err, SQ_EDATA, "%s: %s.sum_yy[%d][%d]: %.17g gives rank %d a "
                              "negative variance (its sums sum_y and sum_ny need at least "
                              "%.17g)", file, ctx, k, k, YY(k, k), k + 1, YY(k, k) - v[i]);
    }
    for (int j = 0; j < W && !rc; j++)
        for (int k = j + 1; k < W && !rc; k++) {
            size_t jk = (size_t)j * (size_t)W + (size_t)k;
            size_t jj = (size_t)j * (size_t)W + (size_t)j, kk = (size_t)k * (size_t)W + (size_t)k;
            double bound = sqrt(fmax(v[jj], 0) * fmax(v[kk], 0));
            if (fabs(v[jk]) > bound + tol * (sz[jk] + sqrt(sz[jj] * sz[kk])))
                rc = sq_error_set(err, SQ_EDATA, "%s: %s.sum_yy[%d][%d]: %.17g implies a "
                                  "covariance of ranks %d and %d larger than their standard "
                                  "errors allow (Cauchy-Schwarz); the file was edited or damaged",
                                  file, ctx, j, k, YY(j, k), j + 1, k + 1);
        }
#undef YY
    free(v);
    free(sz);
    return rc;
}

int sq_accept_stats_from_json(const cJSON *obj, int width, const char *file, const char *ctx,
                              sq_accept_stats **out, sq_error *err)
{
    *out = NULL;
    if (!cJSON_IsObject(obj))
        return sq_error_set(err, SQ_EDATA, "%s: %s: expected an object", file, ctx);
    if (width < 1 || width > SQ_ACCEPT_MAX_WIDTH)
        return sq_error_set(err, SQ_EDATA, "%s: %s: width %d is outside 1..%d", file, ctx, width,
                            SQ_ACCEPT_MAX_WIDTH);
    sq_accept_stats *s = sq_accept_stats_new(width);
    if (!s)
        return sq_error_oom(err, "statistics");
    long long units = 0;
    int rc;
    if ((rc = sq_json_get_int(obj, "units", 1, 0, 1LL << 53, &units, file, ctx, err)) ||
        (rc = sq_json_get_number(obj, "sum_n", 1, &s->sum_n, file, ctx, err)) ||
        (rc = sq_json_get_number(obj, "sum_n2", 1, &s->sum_n2, file, ctx, err)) ||
        (rc = get_vec(obj, "sum_y", width, s->sum_y, file, ctx, err)) ||
        (rc = get_vec(obj, "sum_ny", width, s->sum_ny, file, ctx, err)))
        goto fail;
    s->units = units;
    if (s->sum_n < 0 || s->sum_n2 < 0) {
        rc = sq_error_set(err, SQ_EDATA, "%s: %s.sum_n: negative counts", file, ctx);
        goto fail;
    }
    /* positions are counted exactly in a double up to 2^53 (and written as an integer,
     * "positions"); more is no corpus but a damaged file */
    if (s->sum_n > 0x1p53) {
        rc = sq_error_set(err, SQ_EDATA, "%s: %s.sum_n: %.17g positions, more than 2^53 (a "
                          "damaged file)", file, ctx, s->sum_n);
        goto fail;
    }
    const cJSON *rows = sq_json_field(obj, "sum_yy");
    if (!cJSON_IsArray(rows) || cJSON_GetArraySize(rows) != width) {
        rc = sq_error_set(err, SQ_EDATA, "%s: %s.sum_yy: expected %d rows of %d numbers", file,
                          ctx, width, width);
        goto fail;
    }
    int j = 0;
    for (const cJSON *row = rows->child; row; row = row->next, j++) {
        char where[300];
        snprintf(where, sizeof where, "%s.sum_yy[%d]", ctx, j);
        rc = vec_of(row, width, s->sum_yy + (size_t)j * (size_t)width, file, where, err);
        if (rc)
            goto fail;
    }
    for (int k = 0; k < width; k++)
        if (s->sum_y[k] < 0 || s->sum_y[k] > s->sum_n * (1 + 1e-9)) {
            rc = sq_error_set(err, SQ_EDATA,
                              "%s: %s.sum_y[%d]: %.17g is outside [0, sum_n = %.17g]", file, ctx,
                              k, s->sum_y[k], s->sum_n);
            goto fail;
        }
    if ((rc = stats_consistent(s, file, ctx, err)))
        goto fail;
    *out = s;
    return SQ_OK;
fail:
    sq_accept_stats_free(s);
    return rc;
}

/* ---- over a corpus ------------------------------------------------------------------------------ */

sq_accept_params sq_accept_default_params(void)
{
    return (sq_accept_params){
        .width = 16,
        .samples = 1,
        .seed = 0,
        .threads = 0,
        .batch_bytes = 16u << 20,
    };
}

int64_t sq_accept_units(const int64_t *offsets, int64_t sequences, int64_t rows,
                        int64_t **bounds)
{
    *bounds = NULL;
    if (sequences <= 1) {
        int64_t u = rows < SQ_ACCEPT_BATCHES ? rows : SQ_ACCEPT_BATCHES;
        int64_t *b = malloc((size_t)(u + 1) * sizeof *b);
        if (!b)
            return -1;
        for (int64_t i = 0; i <= u; i++)
            b[i] = u ? rows * i / u : 0;
        *bounds = b;
        return u;
    }
    int64_t *b = malloc((size_t)(sequences + 1) * sizeof *b);
    if (!b)
        return -1;
    int64_t u = 0;
    b[0] = offsets[0];
    for (int64_t s = 0; s < sequences; s++)
        if (offsets[s + 1] > offsets[s])
            b[++u] = offsets[s + 1];
    *bounds = b;
    return u;
}

static uint64_t mix64(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

static uint64_t double_bits(double x)
{
    uint64_t b;
    memcpy(&b, &x, sizeof b);
    return b;
}

/* The part of a random stream's seed that a configuration contributes. */
static uint64_t config_key(const sq_accept_config *c)
{
    return mix64(mix64((uint64_t)c->mode * 0x51ed27ULL ^ double_bits(c->temperature)) ^
                 double_bits(c->top_p));
}

/* One batch of rows in one of the two buffers (slots). The reading thread fills a slot and
 * publishes it; the workers take its work (decode a stored chunk, compute a row) under the
 * lock, the oldest batch first, and go on to the next published batch instead of waiting for
 * the others (issue 27: a per-batch barrier made two threads wait for a third that was not
 * scheduled, on shared cores). */
typedef struct slot {
    const float *const *trow;   /* (rows) the batch's target rows: in the read
                                   buffer, or where a mapped chunk lies         */
    const float *const *drow;   /* (rows) the draft's                         */
    float *target;              /* (rows, V) the read buffer: decoded chunks  */
    float *draft;               /* (rows, V)                                  */
    int64_t row0, seq;          /* first row; the batch's number              */
    int rows;
    double *res;                /* (rows, n_cfg, W)                           */
    const sq_corpus_raw *items; /* (n_items) the batch's stored chunks, or
                                   NULL (rows read whole)                     */
    int n_items;
    int guard;                  /* rows of this batch lie in mappings         */
    /* under the lock */
    int published;
    int next_item, items_done, next_row, rows_done, busy;
    int failed;
    int64_t fail_key;
    sq_error fail;
} slot;

typedef struct run_ctx {
    const sq_accept_config *cfg;
    int n_cfg, V, W, samples;
    uint64_t seed, key;
    const uint64_t *cfg_keys;   /* (n_cfg)                                    */
    const sq_corpus *corpus;
    int chunk_rows;
    const char *file;
    const sq_accept_hook *hook; /* params->hook                               */
    slot slots[2];
    pthread_mutex_t mu;
    pthread_cond_t work;        /* workers: work may be available, or stop     */
    pthread_cond_t done;        /* the reading thread: a batch may be finished */
    int stop;                   /* workers return                              */
} run_ctx;

typedef struct worker {
    run_ctx *ctx;
    sq_accept_ws *ws;
    gsl_rng *rng;
    double *P, *Q;              /* (V)                                        */
    unsigned char *work;        /* chunk decoding scratch                     */
    size_t work_cap;
    int index;                  /* 0 .. threads - 1 (the hook's thread index) */
    pthread_t thread;
} worker;

static void compute_row(worker *w, const slot *sl, int i)
{
    run_ctx *c = w->ctx;
    int V = c->V, W = c->W;
    const float *t = sl->trow[i];
    const float *d = sl->drow[i];
    double pt = NAN, pp = NAN, qt = NAN, qp = NAN;   /* settings P and Q were computed for */
    uint64_t row_key = mix64(mix64(c->seed) ^ mix64(c->key ^ mix64((uint64_t)(sl->row0 + i))));
    const sq_accept_hook *h = c->hook;
    const int hooked = h && h->wants(h->user, sl->row0 + i);
    if (hooked)
        h->row(h->user, w->index, sl->row0 + i, -1, t, d, NULL, NULL);
    for (int j = 0; j < c->n_cfg; j++) {
        const sq_accept_config *cfg = &c->cfg[j];
        double *a = sl->res + ((size_t)i * (size_t)c->n_cfg + (size_t)j) * (size_t)W;
        if (cfg->mode != SQ_MODE_GREEDY &&
            !(pt == cfg->temperature && pp == cfg->top_p)) {
            sq_accept_probs(t, V, cfg->temperature, cfg->top_p, w->P, w->ws);
            pt = cfg->temperature;
            pp = cfg->top_p;
        }
        if (sq_mode_is_sampled(cfg->mode)) {
            if (!(qt == cfg->temperature && qp == cfg->top_p)) {
                sq_accept_probs(d, V, cfg->temperature, cfg->top_p, w->Q, w->ws);
                qt = cfg->temperature;
                qp = cfg->top_p;
            }
            gsl_rng_set(w->rng, (unsigned long)(mix64(row_key ^ c->cfg_keys[j]) & 0xffffffffu));
        }
        sq_accept_draw *hd = NULL;
        if (hooked && h->draw && cfg->mode == SQ_MODE_STOCHASTIC && c->samples == 1)
            hd = h->draw(h->user, w->index, sl->row0 + i, j);
        if (hd)
            sq_accept_position_with_draw(w->P, w->Q, V, W, w->rng, a, w->ws, hd);
        else
            sq_accept_position(cfg, t, d, w->P, w->Q, V, W, c->samples, w->rng, a, w->ws);
        if (hooked) {
            int greedy = cfg->mode == SQ_MODE_GREEDY;
            int q_ok = !greedy && qt == cfg->temperature && qp == cfg->top_p;
            h->row(h->user, w->index, sl->row0 + i, j, t, d, greedy ? NULL : w->P,
                   q_ok ? w->Q : NULL);
        }
    }
}

/* A slot is finished when nothing of it runs any more and either it failed or every row is
 * computed. Under the lock. */
static int slot_finished(const slot *sl)
{
    return sl->busy == 0 && (sl->failed || sl->rows_done == sl->rows);
}

/* Every piece of work of the slot is handed out (or it failed): the next batch may start.
 * Under the lock. */
static int slot_claimed(const slot *sl)
{
    return sl->failed || (sl->items_done == sl->n_items && sl->next_row == sl->rows);
}

/* Records a failure of the slot (the earliest by key wins: chunks target before draft, as
 * sq_corpus_read checks them, then rows in order), stops handing out its work. Under the
 * lock. */
static void slot_fail(slot *sl, int64_t key, const sq_error *e)
{
    if (!sl->failed || key < sl->fail_key) {
        sl->fail_key = key;
        sl->fail = *e;
    }
    sl->failed = 1;
}

enum { WORK_NONE, WORK_DECODE, WORK_ROW };

/* Takes the next piece of work of the oldest published slot that has one (only `only` when
 * not NULL): a chunk to decode, else a row once every chunk of its batch is decoded. Under
 * the lock. */
static int take_work(run_ctx *c, slot *only, slot **out, int *idx)
{
    slot *order[2] = {&c->slots[0], &c->slots[1]};
    if (order[1]->published && (!order[0]->published || order[1]->seq < order[0]->seq)) {
        order[0] = &c->slots[1];
        order[1] = &c->slots[0];
    }
    for (int k = 0; k < 2; k++) {
        slot *sl = order[k];
        if (!sl->published || sl->failed || (only && sl != only))
            continue;
        if (sl->next_item < sl->n_items) {
            *out = sl;
            *idx = sl->next_item++;
            sl->busy++;
            return WORK_DECODE;
        }
        if (sl->items_done == sl->n_items && sl->next_row < sl->rows) {
            *out = sl;
            *idx = sl->next_row++;
            sl->busy++;
            if (sl->next_row == sl->rows)
                pthread_cond_broadcast(&c->done);   /* the next batch may be handed out */
            return WORK_ROW;
        }
    }
    return WORK_NONE;
}

/* Decodes stored chunk i of the slot into its rows (raw mode). */
static void decode_item(worker *w, slot *sl, int i)
{
    run_ctx *c = w->ctx;
    const sq_corpus_raw *r = &sl->items[i];
    int64_t first = r->chunk * (int64_t)c->chunk_rows - sl->row0;
    float *dst = (r->model ? sl->draft : sl->target) + (size_t)first * (size_t)c->V;
    sq_error e = {0};
    int rc = sq_corpus_decode_raw(c->corpus, r, dst, &w->work, &w->work_cap, &e);
    pthread_mutex_lock(&c->mu);
    if (rc)
        slot_fail(sl, ((int64_t)r->model << 40) + r->chunk, &e);
    if (++sl->items_done == sl->n_items)
        pthread_cond_broadcast(&c->work);   /* its rows can start */
    sl->busy--;
    if (slot_finished(sl))
        pthread_cond_broadcast(&c->done);
    pthread_mutex_unlock(&c->mu);
}

/* Row i of the slot is done, or failed with *e. */
static void finish_row(run_ctx *c, slot *sl, int i, const sq_error *e)
{
    pthread_mutex_lock(&c->mu);
    if (e)
        slot_fail(sl, (3LL << 40) + i, e);
    sl->rows_done++;
    sl->busy--;
    if (slot_finished(sl))
        pthread_cond_broadcast(&c->done);
    pthread_mutex_unlock(&c->mu);
}

/* Computes row i of the slot; a row in a mapping is guarded (a file cut short faults there,
 * busguard.h). */
static void row_item(worker *w, slot *sl, int i)
{
    run_ctx *c = w->ctx;
    if (sl->guard) {
        sigjmp_buf jb;
        if (sigsetjmp(jb, 0)) {
            sq_bus_leave();
            sq_error e = {0};
            sq_error_set(&e, SQ_EDATA, "%s: row %lld: the file was cut short while being read "
                         "(its mapping faulted)", c->file, (long long)(sl->row0 + i));
            finish_row(c, sl, i, &e);
            return;
        }
        sq_bus_enter(&jb);
        compute_row(w, sl, i);
        sq_bus_leave();
    } else {
        compute_row(w, sl, i);
    }
    finish_row(c, sl, i, NULL);
}

/* Does work until `only` (not NULL: the calling thread when no worker could start) is
 * finished, or (NULL) until the run stops. */
static void work_loop(worker *w, slot *only)
{
    run_ctx *c = w->ctx;
    for (;;) {
        slot *sl = NULL;
        int idx = 0, kind;
        pthread_mutex_lock(&c->mu);
        for (;;) {
            if (only ? slot_finished(only) : c->stop) {
                pthread_mutex_unlock(&c->mu);
                return;
            }
            if ((kind = take_work(c, only, &sl, &idx)) != WORK_NONE)
                break;
            pthread_cond_wait(&c->work, &c->mu);
        }
        pthread_mutex_unlock(&c->mu);
        if (kind == WORK_DECODE)
            decode_item(w, sl, idx);
        else
            row_item(w, sl, idx);
    }
}

static void *worker_main(void *arg)
{
    work_loop(arg, NULL);
    return NULL;
}

/* ---- acceptance by depth (docs/estimator.md, "Acceptance by depth") ------------------------------ *
 * Along a sequence, the weight of depth d + 1 at position t is the probability that a chain of
 * d accepted children led there: w_0(t) = 1, w_d(t) = w_{d-1}(t - 1) · A(t - 1) with A the
 * position's acceptance 1 - reject = Σ_k a_k, and w_d = 0 where the sequence has fewer than d
 * positions before t. Depth d + 1's statistics are those of the plain curve with n_u = Σ_t w_d(t)
 * and Y_uk = Σ_t w_d(t) a_k(t) over the unit's positions: a weighted ratio estimator whose
 * sequence-level variance the same sums give. Computed in row order by the reducing thread. */
typedef struct depth_acc {
    int n_cfg, D, W;
    const int64_t *offsets;   /* sequence starts (NULL: one sequence)      */
    int64_t sequences, next_seq;
    double *w;                /* (n_cfg, D) this position's weights        */
    double *n;                /* (n_cfg, D) the open unit's Σ w            */
    double *y;                /* (n_cfg, D, W) the open unit's Σ w·a       */
    sq_accept_stats **part;   /* (n_cfg·D)                                 */
} depth_acc;

static void depth_acc_free(depth_acc *d)
{
    if (d->part)
        for (int q = 0; q < d->n_cfg * d->D; q++)
            sq_accept_stats_free(d->part[q]);
    free(d->part);
    free(d->w);
    free(d->n);
    free(d->y);
    *d = (depth_acc){0};
}

static int depth_acc_init(depth_acc *d, int n_cfg, int D, int W, const sq_corpus *corpus)
{
    *d = (depth_acc){.n_cfg = n_cfg, .D = D, .W = W};
    if (D == 0)
        return 0;
    const sq_corpus_info *info = sq_corpus_get_info(corpus);
    d->sequences = info->sequences;
    d->offsets = info->sequences > 1 ? sq_corpus_seq_offsets(corpus) : NULL;
    size_t m = (size_t)n_cfg * (size_t)D;
    d->w = calloc(m, sizeof *d->w);
    d->n = calloc(m, sizeof *d->n);
    d->y = calloc(m * (size_t)W, sizeof *d->y);
    d->part = calloc(m, sizeof *d->part);
    if (!d->w || !d->n || !d->y || !d->part)
        return -1;
    for (size_t q = 0; q < m; q++)
        if (!(d->part[q] = sq_accept_stats_new(W)))
            return -1;
    return 0;
}

/* Position `row` with its vectors ri (n_cfg, W), rows in order. */
static void depth_acc_row(depth_acc *d, int64_t row, const double *ri)
{
    const int D = d->D, W = d->W;
    int start = row == 0;
    while (d->offsets && d->next_seq < d->sequences && d->offsets[d->next_seq] <= row) {
        start |= d->offsets[d->next_seq] == row;
        d->next_seq++;
    }
    for (int j = 0; j < d->n_cfg; j++) {
        double *w = d->w + (size_t)j * (size_t)D;
        const double *a = ri + (size_t)j * (size_t)W;
        if (start) {
            w[0] = 1.0;
            for (int k = 1; k < D; k++)
                w[k] = 0.0;
        }
        double A = 0;
        for (int k = 0; k < W; k++)
            A += a[k];
        for (int k = 0; k < D; k++) {
            if (w[k] == 0)
                continue;
            double *y = d->y + ((size_t)j * (size_t)D + (size_t)k) * (size_t)W;
            d->n[(size_t)j * (size_t)D + (size_t)k] += w[k];
            for (int r = 0; r < W; r++)
                y[r] += w[k] * a[r];
        }
        /* the next position's weights */
        for (int k = D - 1; k > 0; k--)
            w[k] = w[k - 1] * A;
        w[0] = 1.0;
    }
}

static void depth_acc_close_unit(depth_acc *d)
{
    size_t m = (size_t)d->n_cfg * (size_t)d->D;
    for (size_t q = 0; q < m; q++)
        sq_accept_stats_add_unit(d->part[q], d->n[q], d->y + q * (size_t)d->W);
    memset(d->n, 0, m * sizeof *d->n);
    memset(d->y, 0, m * (size_t)d->W * sizeof *d->y);
}

/* The stored chunks of rows [row0, row0 + count) of both models, target first, and where each
 * row of the batch will be: in its chunk's mapping (unfiltered float32, mapped), else in
 * target/draft ((batch rows, V) each, whole chunks of room), where the workers decode it or
 * where HDF5 read it. */
static int read_raw_batch(sq_corpus *corpus, int64_t row0, int count, int chunk_rows,
                          float *target, float *draft, int V, sq_corpus_raw *items, int *n,
                          const float **trow, const float **drow, sq_error *err)
{
    int k = 0;
    for (int model = 0; model < 2; model++)
        for (int64_t ch = row0 / chunk_rows; ch * chunk_rows < row0 + count; ch++) {
            int64_t first = ch * chunk_rows - row0;
            float *rows = (model ? draft : target) + (size_t)first * (size_t)V;
            sq_corpus_raw *r = &items[k++];
            int rc = sq_corpus_read_raw(corpus, model, ch, rows, r, err);
            if (rc)
                return rc;
            const float *at = r->rows ? r->rows : rows;
            const float **ptr = model ? drow : trow;
            for (int64_t j = 0; j < chunk_rows && first + j < count; j++)
                ptr[first + j] = at + (size_t)j * (size_t)V;
        }
    *n = k;
    return SQ_OK;
}

/* Rows read whole by HDF5 into the buffers. */
static int read_rows_batch(sq_corpus *corpus, int64_t row0, int count, float *target,
                           float *draft, int V, const float **trow, const float **drow,
                           sq_error *err)
{
    for (int i = 0; i < count; i++) {
        trow[i] = target + (size_t)i * (size_t)V;
        drow[i] = draft + (size_t)i * (size_t)V;
    }
    return sq_corpus_read(corpus, row0, count, target, draft, NULL, err);
}

/* Reads rows [row0, row0 + count) (batch number seq) into slot b's buffers and publishes the
 * slot to the workers (seq < 0: not yet; the caller sets seq and publishes it); /tokens is read after the logits in raw mode, its error kept in
 * *tok_rc and *tok_err for when the batch is reduced. A reading error is returned and the
 * slot is left unpublished. */
static int read_batch(sq_corpus *corpus, run_ctx *c, int b, int64_t seq, int64_t row0,
                      int count, int raw_rows, float *buf, size_t half, const float **rowp,
                      int64_t batch, sq_corpus_raw *raw, double *res, int *tok_rc,
                      sq_error *tok_err, sq_error *err)
{
    int rc, n_items = 0, guard = 0;
    *tok_rc = SQ_OK;
    *tok_err = (sq_error){0};
    if (raw_rows > 0) {
        rc = read_raw_batch(corpus, row0, count, raw_rows, buf, buf + half, c->V, raw, &n_items,
                            rowp, rowp + batch, err);
        if (rc == SQ_OK)
            *tok_rc = sq_corpus_read(corpus, row0, count, NULL, NULL, NULL, tok_err);
        for (int i = 0; i < n_items; i++)
            guard |= raw[i].map != NULL;
    } else {
        rc = read_rows_batch(corpus, row0, count, buf, buf + half, c->V, rowp, rowp + batch,
                             err);
    }
    if (rc)
        return rc;
    pthread_mutex_lock(&c->mu);
    c->slots[b] = (slot){
        .trow = rowp, .drow = rowp + batch, .target = buf, .draft = buf + half, .row0 = row0,
        .seq = seq, .rows = count, .res = res, .items = raw_rows > 0 ? raw : NULL,
        .n_items = n_items, .guard = guard, .published = seq >= 0,
    };
    if (seq >= 0)
        pthread_cond_broadcast(&c->work);
    pthread_mutex_unlock(&c->mu);
    return SQ_OK;
}

int sq_accept_run(sq_corpus *corpus, const char *file, uint64_t key,
                  const sq_accept_config *cfg, int n_cfg, const sq_accept_params *params,
                  sq_accept_stats **stats, sq_error *err)
{
    const sq_corpus_info *info = sq_corpus_get_info(corpus);
    int V = info->vocab, W = params->width;
    int64_t N = info->rows;
    SQ_ASSERT(n_cfg >= 1 && n_cfg <= SQ_ACCEPT_MAX_CONFIGS);
    SQ_ASSERT(W >= 1 && W <= SQ_ACCEPT_MAX_WIDTH && params->samples >= 1);
    const int D = params->depths;
    SQ_ASSERT(D >= 0 && D <= SQ_ACCEPT_MAX_DEPTHS && (D == 0 || params->depth_stats));
    for (int q = 0; q < n_cfg * D; q++)
        SQ_ASSERT(params->depth_stats[q] && params->depth_stats[q]->width == W);
    for (int j = 0; j < n_cfg; j++) {
        int rc = sq_accept_config_check(&cfg[j], err);
        if (rc)
            return rc;
        SQ_ASSERT(stats[j] && stats[j]->width == W);
    }
    if (N <= 0)
        return sq_error_set(err, SQ_EDATA, "%s: the corpus has no positions", file);

    int threads = params->threads;
    if (threads <= 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        threads = n > 0 ? (int)n : 1;
    }
    if (threads > 256)
        threads = 256;
    size_t row_bytes = (size_t)V * 2 * sizeof(float);
    /* Raw mode (issue 17): the reading thread only locates (mapped) or fetches the stored
     * chunks; the workers inflate and check them, then compute. Otherwise the reading thread
     * reads whole rows. Chunks too large for a batch are read as rows. */
    const int was_mapped = sq_corpus_mapped(corpus);
    if (params->read != SQ_ACCEPT_READ_AUTO)
        sq_corpus_set_mapped(corpus, 0);
    int raw_rows = params->read == SQ_ACCEPT_READ_ROWS ? 0 : sq_corpus_raw_rows(corpus);
    size_t big = params->batch_bytes > ((size_t)64 << 20) ? params->batch_bytes : (size_t)64 << 20;
    if (raw_rows > 0 && (size_t)raw_rows > big / row_bytes)
        raw_rows = 0;
    /* Rows per batch: a whole number of the corpus's HDF5 chunks (so that no chunk is
     * decompressed twice), about batch_bytes of float32 logits, at least one row per thread. */
    int64_t unit_rows = raw_rows > 0 ? raw_rows : sq_corpus_block_rows(corpus);
    if (unit_rows < 1)
        unit_rows = 1;
    int64_t batch = (int64_t)(params->batch_bytes / row_bytes) / unit_rows * unit_rows;
    if (batch < unit_rows)
        batch = unit_rows;
    while (batch < threads)
        batch += unit_rows;
    if (batch > 4096)
        batch = 4096 > unit_rows ? 4096 / unit_rows * unit_rows : unit_rows;
    if (batch > N)
        batch = N;

    int64_t *bounds = NULL;
    int64_t units = sq_accept_units(sq_corpus_seq_offsets(corpus), info->sequences, N, &bounds);
    uint64_t *cfg_keys = malloc((size_t)n_cfg * sizeof *cfg_keys);
    /* whole chunks of room (the last batch's last chunk may run past N) */
    int64_t room = raw_rows > 0 ? (batch + raw_rows - 1) / raw_rows * raw_rows : batch;
    float *buf[2] = {malloc((size_t)room * row_bytes), malloc((size_t)room * row_bytes)};
    const float **rowp[2] = {malloc((size_t)batch * 2 * sizeof(float *)),
                             malloc((size_t)batch * 2 * sizeof(float *))};
    double *res[2] = {malloc((size_t)batch * (size_t)n_cfg * (size_t)W * sizeof(double)),
                      malloc((size_t)batch * (size_t)n_cfg * (size_t)W * sizeof(double))};
    double *acc = calloc((size_t)n_cfg * (size_t)W, sizeof *acc);
    worker *ws = calloc((size_t)threads, sizeof *ws);
    sq_accept_stats **part = calloc((size_t)n_cfg, sizeof *part);
    depth_acc dep = {0};
    sq_corpus_raw *raw[2] = {NULL, NULL};
    int n_raw = 0, sync_made = 0, started = 0;
    int tok_rc[2] = {SQ_OK, SQ_OK};
    sq_error tok_err[2] = {{0}, {0}};
    int rc = SQ_OK;
    if (units < 0 || !cfg_keys || !buf[0] || !buf[1] || !rowp[0] || !rowp[1] || !res[0] ||
        !res[1] || !acc ||
        !ws || !part || depth_acc_init(&dep, n_cfg, D, W, corpus)) {
        rc = sq_error_oom(err, "estimation buffers");
        goto done;
    }
    for (int j = 0; j < n_cfg; j++) {
        cfg_keys[j] = config_key(&cfg[j]);
        if (!(part[j] = sq_accept_stats_new(W))) {
            rc = sq_error_oom(err, "statistics");
            goto done;
        }
    }
    run_ctx ctx = {
        .cfg = cfg, .n_cfg = n_cfg, .V = V, .W = W, .samples = params->samples,
        .seed = params->seed, .key = key, .cfg_keys = cfg_keys, .file = file,
        .corpus = corpus, .chunk_rows = raw_rows, .hook = params->hook,
    };
    for (int t = 0; t < threads; t++) {
        ws[t].ctx = &ctx;
        ws[t].index = t;
        ws[t].ws = sq_accept_ws_new(V, W);
        ws[t].rng = gsl_rng_alloc(gsl_rng_mt19937);
        ws[t].P = malloc((size_t)V * sizeof(double));
        ws[t].Q = malloc((size_t)V * sizeof(double));
        if (!ws[t].ws || !ws[t].rng || !ws[t].P || !ws[t].Q) {
            rc = sq_error_oom(err, "worker state");
            goto done;
        }
    }

    if (params->hook && (rc = params->hook->begin(params->hook->user, threads, err)))
        goto done;
    size_t half = (size_t)room * (size_t)V;
    const int per_model = raw_rows > 0 ? (int)((batch + raw_rows - 1) / raw_rows) + 1 : 0;
    if (raw_rows > 0) {
        for (int b = 0; b < 2; b++)
            if (!(raw[b] = calloc((size_t)(2 * per_model), sizeof *raw[b]))) {
                rc = sq_error_oom(err, "raw chunk buffers");
                goto done;
            }
        n_raw = 2 * per_model;
    }
    if (pthread_mutex_init(&ctx.mu, NULL)) {
        rc = sq_error_set(err, SQ_ESOFTWARE, "cannot create a mutex");
        goto done;
    }
    if (pthread_cond_init(&ctx.work, NULL)) {
        pthread_mutex_destroy(&ctx.mu);
        rc = sq_error_set(err, SQ_ESOFTWARE, "cannot create a condition variable");
        goto done;
    }
    if (pthread_cond_init(&ctx.done, NULL)) {
        pthread_cond_destroy(&ctx.work);
        pthread_mutex_destroy(&ctx.mu);
        rc = sq_error_set(err, SQ_ESOFTWARE, "cannot create a condition variable");
        goto done;
    }
    sync_made = 1;
    /* Reads batch number `seq` (count rows from row0) into slot b and publishes it. */
#define READ_BATCH(b, seq_, row0_, count_, e_)                                                 \
    read_batch(corpus, &ctx, (b), (seq_), (row0_), (count_), raw_rows, buf[b], half, rowp[b],   \
               batch, raw[b], res[b], &tok_rc[b], &tok_err[b], (e_))
    int cur = 0;
    int64_t seq = 0, row = 0;
    int count = (int)batch;
    if ((rc = READ_BATCH(0, 0, 0, count, err)))
        goto done;
    /* The workers run for the whole corpus; the next batch is read while they compute. */
    for (int t = 0; t < threads; t++) {
        if (pthread_create(&ws[t].thread, NULL, worker_main, &ws[t]) != 0)
            break;
        started++;
    }
    int64_t next_row = row + count;
    int next_count = (int)(N - next_row < batch ? N - next_row : batch);
    int pend_rc = SQ_OK;        /* reading the batch after the current one failed */
    sq_error pend_err = {0};
    if (next_count > 0)
        pend_rc = READ_BATCH(1, -1, next_row, next_count, &pend_err);
    int64_t unit = 0;
    double unit_n = 0;
    while (row < N) {
        slot *sl = &ctx.slots[cur], *next = &ctx.slots[1 - cur];
        if (started == 0)
            work_loop(&ws[0], sl); /* no thread could start: compute here */
        /* Once every row of this batch is handed out, the progress callback, then the next
         * batch (read while this one ran) goes to the workers: a worker with nothing left here
         * starts on it instead of waiting for the others' last rows. */
        pthread_mutex_lock(&ctx.mu);
        while (!slot_claimed(sl))
            pthread_cond_wait(&ctx.done, &ctx.mu);
        pthread_mutex_unlock(&ctx.mu);
        if (params->progress)
            params->progress(params->user, row + count, N);
        pthread_mutex_lock(&ctx.mu);
        if (next_count > 0 && !pend_rc) {
            next->seq = seq + 1;
            next->published = 1;
            pthread_cond_broadcast(&ctx.work);
        }
        while (!slot_finished(sl))
            pthread_cond_wait(&ctx.done, &ctx.mu);
        sl->published = 0;
        pthread_mutex_unlock(&ctx.mu);
        if (sl->failed) {
            /* a bad chunk of this batch comes before anything of the next */
            if (err)
                *err = sl->fail;
            rc = sl->fail.status;
            goto done;
        }
        if (raw_rows > 0 && tok_rc[cur]) {
            if (err)
                *err = tok_err[cur];
            rc = tok_rc[cur];
            goto done;
        }
        if (pend_rc) {
            if (err)
                *err = pend_err;
            rc = pend_rc;
            goto done;
        }
        /* Reduce in row order, closing units at their boundaries. */
        for (int i = 0; i < count; i++) {
            const double *ri = sl->res + (size_t)i * (size_t)n_cfg * (size_t)W;
            for (size_t q = 0; q < (size_t)n_cfg * (size_t)W; q++)
                acc[q] += ri[q];
            unit_n += 1;
            if (D)
                depth_acc_row(&dep, row + i, ri);
            while (unit < units && row + i + 1 == bounds[unit + 1]) {
                if (D)
                    depth_acc_close_unit(&dep);
                for (int j = 0; j < n_cfg; j++)
                    sq_accept_stats_add_unit(part[j], unit_n, acc + (size_t)j * (size_t)W);
                memset(acc, 0, (size_t)n_cfg * (size_t)W * sizeof *acc);
                unit_n = 0;
                unit++;
            }
        }
        row = next_row;
        count = next_count;
        /* this slot is free: the batch after the next is read into it, published later */
        next_row = row + count;
        next_count = (int)(N - next_row < batch ? N - next_row : batch);
        if (count > 0 && next_count > 0)
            pend_rc = READ_BATCH(cur, -1, next_row, next_count, &pend_err);
        cur = 1 - cur;
        seq++;
    }
#undef READ_BATCH
    SQ_ASSERT(unit == units && unit_n == 0);
    for (int j = 0; j < n_cfg; j++) {
        part[j]->sequences = info->sequences;
        sq_accept_stats_merge(stats[j], part[j]);
    }
    for (int q = 0; q < n_cfg * D; q++) {
        dep.part[q]->sequences = info->sequences;
        sq_accept_stats_merge(params->depth_stats[q], dep.part[q]);
    }

done:
    if (started > 0) {
        /* the workers finish what they hold (maybe in the next batch) and return */
        pthread_mutex_lock(&ctx.mu);
        ctx.stop = 1;
        pthread_cond_broadcast(&ctx.work);
        pthread_mutex_unlock(&ctx.mu);
        for (int t = 0; t < started; t++)
            pthread_join(ws[t].thread, NULL);
    }
    for (int b = 0; b < 2; b++) {
        for (int i = 0; raw[b] && i < n_raw; i++)
            sq_corpus_raw_clear(&raw[b][i]);
        free(raw[b]);
    }
    if (sync_made) {
        pthread_mutex_destroy(&ctx.mu);
        pthread_cond_destroy(&ctx.work);
        pthread_cond_destroy(&ctx.done);
    }
    if (ws)
        for (int t = 0; t < threads; t++) {
            free(ws[t].work);
            sq_accept_ws_free(ws[t].ws);
            if (ws[t].rng)
                gsl_rng_free(ws[t].rng);
            free(ws[t].P);
            free(ws[t].Q);
        }
    if (part)
        for (int j = 0; j < n_cfg; j++)
            sq_accept_stats_free(part[j]);
    free(part);
    depth_acc_free(&dep);
    free(ws);
    free(acc);
    free(res[0]);
    free(res[1]);
    free(buf[0]);
    free(buf[1]);
    free(rowp[0]);
    free(rowp[1]);
    sq_corpus_set_mapped(corpus, was_mapped);
    free(cfg_keys);
    free(bounds);
    return rc;
}
