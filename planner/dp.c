/* The Sequoia DP, exact and fast (issue 17). docs/planning.md ("Speed") has the method and the
 * proofs; in short, this computes exactly what the plain loop
 *
 *     for m = lo..hi:  v = T[n-m][d][b-1] + p_b·Best[m][d-1];  if (v > bv) bv = v, bm = m;
 *
 * computes, value and back-pointer bit for bit, but skips the splits it can prove cannot win:
 *
 *  1. Upper bounds. Rounding is monotone, so fl(a + fl(p·x)) <= fl(a' + fl(p·x')) whenever
 *     a <= a', x <= x' and p >= 0. With prefix maxima AM (of T[·][d][b-1]) and PM (of
 *     Best[·][d-1]), every split m of a block [m1, m2] has v <= U = fl(AM[n-m1] + fl(p·PM[m2])).
 *     A block with U < bv, or U == bv and m1 > bm, holds no split that the plain loop would
 *     pick (it keeps the smallest m among equal maxima), so it is skipped. Blocks are searched
 *     as a binary tree, the half with the larger bound first, starting from an incumbent at the
 *     previous size's arg-max (the arg-max is close to monotone on real tables; it is only a
 *     starting point here, correctness never depends on it).
 *  2. Depth saturation. Column d is a function F of column d-1, of maxsize[d-1] and of the
 *     curve row. If Best[·][d] == Best[·][d-1] bitwise and maxsize[d] == maxsize[d-1] (same row),
 *     then column d+1 = F(column d) = F(column d-1) = column d, values and back-pointers, and by
 *     induction every deeper column equals column d: it is stored once.
 *  3. With p_by_depth, a pass with depth bound Dmax gives column d the curve row for depth
 *     Dmax-d+1, which is the last row whenever d <= Dmax+1-R (R rows). Those columns are the
 *     same in every pass: they come from one depth-independent solve with the last row (which
 *     saturates as in 2), and each pass computes only its top R-1 columns.
 *  4. Within a column, the sizes n of one layer b are independent: threads split them, with one
 *     barrier per layer.
 * tests/dp_reference.c keeps the plain solver; tests/test_dp.c checks equality. */
#include "planner/dp.h"

#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct column {
    double *best;    /* (N+1) Best[n][d]                        */
    int32_t *bestb;  /* (N+1) the root's child count achieving it */
    int32_t *arg;    /* (B+1, N+1) subtree size of the b-th child */
} column;

struct sq_dp {
    int N, D, B;             /* effective bounds                                              */
    const sq_curve *curve;
    int depth_rows;          /* R: rows of p_by_depth, 0 when depth-independent               */
    int threads, auto_threads;
    void (*progress)(void *user, int64_t done, int64_t total);
    void *user;
    int64_t done, total;     /* columns computed, and to compute, for progress              */
    int pass_depth;          /* depth bound of the pass whose back-pointers are held          */
    long long *maxsize;      /* (D+1) largest tree of depth <= d and width <= B, capped at N  */
    column *col;             /* (D+1) the current pass's columns (views, not owned)           */
    column *tail;            /* (D+1) depth-independent columns (owned when computed)         */
    int tail_sat;            /* tail columns d >= tail_sat are views of column tail_sat       */
    column *own;             /* (nown) a depth-dependent pass's own columns, column d of the
                                pass with bound Dmax in slot Dmax-d (owned)                   */
    int nown;
    double *table;           /* (D+1, N+1) Best of pass d at column d (depth-dependent only)  */
    column base[2];          /* d = 0 (nothing) and d = 1 (the root alone)                    */
    /* workspace */
    double *layer[2];        /* (N+1) T[.][d][b-1] and T[.][d][b]                             */
    double *pm;              /* (N+1) prefix max of Best[.][d-1]                              */
    double *am;              /* (threads, N+1) prefix max of T[.][d][b-1], one per thread     */
};

sq_dp_params sq_dp_default_params(void)
{
    return (sq_dp_params){.budget = 128, .depth = 10, .width = 0, .curve = sq_curve_default()};
}

static void effective(const sq_dp_params *p, int *N, int *D, int *B)
{
    *N = p->budget;
    *D = p->depth < p->budget ? p->depth : p->budget;
    int w = p->width > 0 ? p->width : p->curve->width;
    int wmax = p->budget > 1 ? p->budget - 1 : 1;
    *B = w < wmax ? w : wmax;
}

/* Inner steps of the plain solver, the bound on the work when nothing can be skipped. */
static double plain_work(int N, int D, int B, int rows)
{
    double work = (double)N * N * D * B / 2.0;
    if (rows > 1)
        work *= rows < D ? rows : D;
    return work;
}

int sq_dp_check(const sq_dp_params *p, sq_error *err)
{
    if (!p->curve || p->curve->width < 1)
        return sq_error_set(err, SQ_EUSAGE, "acceptance vector is empty");
    if (p->budget < 1)
        return sq_error_set(err, SQ_EUSAGE, "budget: %d, must be at least 1", p->budget);
    if (p->depth < 1)
        return sq_error_set(err, SQ_EUSAGE, "depth: %d, must be at least 1", p->depth);
    if (p->width < 0)
        return sq_error_set(err, SQ_EUSAGE, "width: %d, must be at least 1", p->width);
    if (p->threads < 0)
        return sq_error_set(err, SQ_EUSAGE, "threads: %d, must be at least 0", p->threads);
    if (p->budget > SQ_DP_MAX_BUDGET)
        return sq_error_set(err, SQ_EUSAGE, "budget: %d exceeds the limit of %d nodes", p->budget,
                            SQ_DP_MAX_BUDGET);
    int N, D, B;
    effective(p, &N, &D, &B);
    long long cells = (long long)(N + 1) * (D + 1) * (B + 1);
    if (cells > SQ_DP_MAX_CELLS)
        return sq_error_set(err, SQ_EUSAGE,
                            "budget %d x depth %d x width %d needs %lld table cells, more than the "
                            "limit of %lld; lower the budget, depth or width", N, D, B, cells,
                            SQ_DP_MAX_CELLS);
    int rows = p->curve->depth_rows;
    double work = plain_work(N, D, B, rows);
    if (work > (double)SQ_DP_MAX_WORK)
        return sq_error_set(err, SQ_EUSAGE,
                            "budget %d x depth %d x width %d needs up to %.3g solver steps "
                            "(N^2*D*B/2%s), more than the limit of %lld; lower the budget, "
                            "depth or width", N, D, B, work,
                            rows > 1 ? "*min(D, depth rows) with p_by_depth" : "",
                            SQ_DP_MAX_WORK);
    return SQ_OK;
}

static void column_free(column *c)
{
    free(c->best);
    free(c->bestb);
    free(c->arg);
    memset(c, 0, sizeof *c);
}

static int column_alloc(sq_dp *dp, column *c)
{
    if (c->best)
        return 0;
    c->best = malloc(((size_t)dp->N + 1) * sizeof *c->best);
    c->bestb = malloc(((size_t)dp->N + 1) * sizeof *c->bestb);
    c->arg = malloc(((size_t)dp->B + 1) * ((size_t)dp->N + 1) * sizeof *c->arg);
    if (!c->best || !c->bestb || !c->arg) {
        column_free(c);
        return -1;
    }
    return 0;
}

void sq_dp_free(sq_dp *dp)
{
    if (!dp)
        return;
    if (dp->tail)
        for (int d = 2; d <= dp->D && d <= dp->tail_sat; d++)
            column_free(&dp->tail[d]);
    if (dp->own)
        for (int i = 0; i < dp->nown; i++)
            column_free(&dp->own[i]);
    for (int i = 0; i < 2; i++)
        column_free(&dp->base[i]);
    free(dp->maxsize);
    free(dp->col);
    free(dp->tail);
    free(dp->own);
    free(dp->table);
    free(dp->layer[0]);
    free(dp->layer[1]);
    free(dp->pm);
    free(dp->am);
    free(dp);
}

/* ---- one column ------------------------------------------------------------------------- */

enum { LEAF = 8, WINDOW = 16 };

typedef struct {
    const double *A, *AM;  /* T[.][d][b-1] and its prefix max        */
    const double *P, *PM;  /* Best[.][d-1] and its prefix max        */
    double pb;
    double bv;             /* incumbent value and split              */
    int bm;
    int avx2;              /* the CPU has AVX2                       */
} search;

#ifdef SQ_DP_STATS
long long sq_dp_stat_leaf, sq_dp_stat_bound, sq_dp_stat_cells;
#define STAT(x) (x)
#else
#define STAT(x) ((void)0)
#endif

/* The plain loop's update over [a, z], written so that the order of evaluation does not
 * matter: the largest value wins, and among equal values the smallest split. */
static void leaf_scalar(search *s, int n, int a, int z)
{
    const double *A = s->A, *P = s->P;
    const double pb = s->pb;
    double bv = s->bv;
    int bm = s->bm;
    for (int m = a; m <= z; m++) {
        double v = A[n - m] + pb * P[m];
        if (v > bv || (v == bv && m < bm)) {
            bv = v;
            bm = m;
        }
    }
    s->bv = bv;
    s->bm = bm;
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define SQ_DP_AVX2 1
/* The same update, four splits at a time: each value is the same IEEE product and sum as the
 * scalar one (separate multiply and add, no fused multiply-add: the "avx2" target does not
 * enable FMA), the block's maximum is found first and only then its smallest split. */
__attribute__((target("avx2"))) static void leaf_avx2(search *s, int n, int a, int z)
{
    const double *A = s->A, *P = s->P;
    const __m256d pb = _mm256_set1_pd(s->pb);
    double buf[4 * 32];
    while (a <= z) {
        const int len = z - a + 1 < 4 * 32 ? z - a + 1 : 4 * 32;
        const int vec = len & ~3;
        __m256d vmax = _mm256_set1_pd(-INFINITY);
        for (int i = 0; i < vec; i += 4) {
            const int m = a + i;
            /* A[n-m], A[n-m-1], A[n-m-2], A[n-m-3] */
            __m256d x = _mm256_permute4x64_pd(_mm256_loadu_pd(A + (n - m - 3)), 0x1B);
            __m256d v = _mm256_add_pd(x, _mm256_mul_pd(pb, _mm256_loadu_pd(P + m)));
            _mm256_storeu_pd(buf + i, v);
            vmax = _mm256_max_pd(vmax, v);
        }
        double lanes[4];
        _mm256_storeu_pd(lanes, vmax);
        double hm = lanes[0];
        for (int i = 1; i < 4; i++)
            hm = lanes[i] > hm ? lanes[i] : hm;
        for (int i = vec; i < len; i++) {
            const int m = a + i;
            buf[i] = A[n - m] + s->pb * P[m];
            hm = buf[i] > hm ? buf[i] : hm;
        }
        if (hm > s->bv || hm == s->bv) {
            int i = 0;
            while (buf[i] != hm)
                i++;
            if (hm > s->bv || a + i < s->bm) {
                s->bv = hm;
                s->bm = a + i;
            }
        }
        a += len;
    }
}
#endif

static inline void leaf(search *s, int n, int a, int z)
{
    STAT(sq_dp_stat_leaf += z - a + 1);
#ifdef SQ_DP_AVX2
    if (s->avx2 && z - a >= 7) {
        leaf_avx2(s, n, a, z);
        return;
    }
#endif
    leaf_scalar(s, n, a, z);
}

static inline double bound(const search *s, int n, int m1, int m2)
{
    STAT(sq_dp_stat_bound++);
    return s->AM[n - m1] + s->pb * s->PM[m2];
}

static inline int prunable(const search *s, double u, int m1)
{
    return u < s->bv || (u == s->bv && m1 > s->bm);
}

/* Depth-first over the binary tree of blocks of [lo, hi], the half with the larger bound first
 * (an explicit stack: at most 2 entries per level). */
static void search_block(search *s, int n, int lo, int hi)
{
    int stack[2 * 64][2];
    int top = 0;
    stack[top][0] = lo;
    stack[top][1] = hi;
    top++;
    while (top > 0) {
        top--;
        int m1 = stack[top][0], m2 = stack[top][1];
        if (m2 - m1 < LEAF) {
            leaf(s, n, m1, m2);
            continue;
        }
        if (prunable(s, bound(s, n, m1, m2), m1))
            continue;
        int mid = m1 + (m2 - m1) / 2;
        double ul = bound(s, n, m1, mid), ur = bound(s, n, mid + 1, m2);
        /* push the worse half first so the better one is searched first */
        if (ul >= ur) {
            stack[top][0] = mid + 1;
            stack[top][1] = m2;
            stack[top + 1][0] = m1;
            stack[top + 1][1] = mid;
        } else {
            stack[top][0] = m1;
            stack[top][1] = mid;
            stack[top + 1][0] = mid + 1;
            stack[top + 1][1] = m2;
        }
        top += 2;
    }
}

/* The best split of [lo, hi] for size n: a window of splits around the guess (the previous
 * size's arg-max) gives the incumbent, then blocks of doubling width outwards on each side are
 * skipped by their bound or searched. */
static void search_range(search *s, int n, int lo, int hi, int guess)
{
    if (hi - lo < 2 * WINDOW || guess < 0) {
        if (hi - lo < 2 * WINDOW)
            leaf(s, n, lo, hi);
        else
            search_block(s, n, lo, hi);
        return;
    }
    int a = guess - WINDOW / 4;
    a = a < lo ? lo : a;
    int z = a + WINDOW - 1;
    if (z > hi) {
        z = hi;
        a = z - WINDOW + 1;
    }
    leaf(s, n, a, z);
    for (int m1 = z + 1, w = WINDOW; m1 <= hi; w *= 2) {
        int m2 = m1 + w - 1 < hi ? m1 + w - 1 : hi;
        search_block(s, n, m1, m2);
        m1 = m2 + 1;
    }
    for (int m2 = a - 1, w = WINDOW; m2 >= lo; w *= 2) {
        int m1 = m2 - w + 1 > lo ? m2 - w + 1 : lo;
        search_block(s, n, m1, m2);
        m2 = m1 - 1;
    }
}

/* A barrier whose party count is fixed only once every thread that could be started has
 * started (pthread_barrier_t needs the count up front). */
typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int parties, waiting, open;
    unsigned gen;
} gate;

static void gate_wait(gate *g)
{
    pthread_mutex_lock(&g->mu);
    while (!g->open)
        pthread_cond_wait(&g->cv, &g->mu);
    unsigned gen = g->gen;
    if (++g->waiting == g->parties) {
        g->waiting = 0;
        g->gen++;
        pthread_cond_broadcast(&g->cv);
    } else {
        while (gen == g->gen)
            pthread_cond_wait(&g->cv, &g->mu);
    }
    pthread_mutex_unlock(&g->mu);
}

typedef struct {
    sq_dp *dp;
    const double *prev;    /* Best[.][d-1] */
    column *out;
    long long maxs;
    int depth_index;       /* the curve row's depth */
    int nthreads;
    gate *gate;
} column_job;

typedef struct {
    column_job *job;
    int t;
} worker_arg;

enum { CHUNK = 64 };

static void column_worker(column_job *job, int t)
{
    sq_dp *dp = job->dp;
    const int N = dp->N, B = dp->B, T = job->nthreads;
    const long long maxs = job->maxs;
    double *col = job->out->best;
    int32_t *colb = job->out->bestb;
    double *am = dp->am + (size_t)t * ((size_t)N + 1);
    const double *tprev = dp->layer[0];
    double *tcur = dp->layer[1];
    search s = {.P = job->prev, .PM = dp->pm};
#ifdef SQ_DP_AVX2
    s.avx2 = __builtin_cpu_supports("avx2") ? 1 : 0;
#endif
    for (int b = 1; b <= B; b++) {
        s.pb = sq_curve_p(dp->curve, job->depth_index, b);
        s.A = tprev;
        s.AM = am;
        const long long top = 1 + (long long)b * maxs;
        const int nmax = top < N ? (int)top : N;
        /* prefix max of T[.][d][b-1] over its sizes b .. min(N, 1 + (b-1)·maxs) */
        {
            long long pt = 1 + (long long)(b - 1) * maxs;
            int pmax = pt < N ? (int)pt : N;
            double run = -INFINITY;
            for (int k = b; k <= pmax; k++) {
                if (tprev[k] > run)
                    run = tprev[k];
                am[k] = run;
            }
        }
        int32_t *argb = job->out->arg + (size_t)b * ((size_t)N + 1);
        for (int c0 = b + 1 + t * CHUNK; c0 <= nmax; c0 += T * CHUNK) {
            const int c1 = c0 + CHUNK - 1 < nmax ? c0 + CHUNK - 1 : nmax;
            int guess = -1;
            for (int n = c0; n <= c1; n++) {
                long long lo_ll = (long long)n - 1 - (long long)(b - 1) * maxs;
                const int lo = lo_ll > 1 ? (int)lo_ll : 1;
                const int hi = (long long)(n - b) < maxs ? n - b : (int)maxs;
                s.bv = -INFINITY;
                s.bm = lo;
                STAT(sq_dp_stat_cells++);
                search_range(&s, n, lo, hi, guess);
                tcur[n] = s.bv;
                argb[n] = s.bm;
                guess = s.bm;
                if (s.bv > col[n]) {
                    col[n] = s.bv;
                    colb[n] = b;
                }
            }
        }
        if (T > 1)
            gate_wait(job->gate);
        const double *x = tprev;
        tprev = tcur;
        tcur = (double *)x;
    }
}

static void *worker_main(void *p)
{
    worker_arg *w = p;
    gate *g = w->job->gate;
    pthread_mutex_lock(&g->mu);
    while (!g->open)
        pthread_cond_wait(&g->cv, &g->mu);
    pthread_mutex_unlock(&g->mu);
    column_worker(w->job, w->t);
    return NULL;
}

/* Column d from column d-1 (prev), for the curve row of depth depth_index. */
static int compute_column(sq_dp *dp, const double *prev, long long maxs, int depth_index,
                          column *out)
{
    const int N = dp->N;
    for (int n = 0; n <= N; n++) {
        out->best[n] = n == 1 ? 1.0 : -INFINITY;
        out->bestb[n] = 0;
    }
    double run = -INFINITY;
    dp->pm[0] = -INFINITY;
    for (int m = 1; m <= N; m++) {
        if (prev[m] > run)
            run = prev[m];
        dp->pm[m] = run;
    }
    for (int n = 0; n <= N; n++)
        dp->layer[0][n] = -INFINITY;
    dp->layer[0][1] = 1.0; /* b = 0: the root alone */
    column_job job = {.dp = dp, .prev = prev, .out = out, .maxs = maxs,
                      .depth_index = depth_index, .nthreads = 1};
    /* automatic threads only where the layers have enough sizes to share */
    int T = dp->threads;
    if (dp->auto_threads && (long long)N * maxs < 200000)
        T = 1;
    pthread_t tid[SQ_DP_MAX_THREADS];
    worker_arg wa[SQ_DP_MAX_THREADS];
    gate g = {.parties = 1};
    int started = 1;
    if (T > 1 && pthread_mutex_init(&g.mu, NULL) == 0) {
        if (pthread_cond_init(&g.cv, NULL) == 0) {
            job.gate = &g;
            for (int t = 1; t < T; t++) {
                wa[t] = (worker_arg){&job, t};
                if (pthread_create(&tid[t], NULL, worker_main, &wa[t]) != 0)
                    break;
                started++;
            }
            /* the workers wait at the gate until the count of parties is known */
            pthread_mutex_lock(&g.mu);
            job.nthreads = started;
            g.parties = started;
            g.open = 1;
            pthread_cond_broadcast(&g.cv);
            pthread_mutex_unlock(&g.mu);
        } else {
            pthread_mutex_destroy(&g.mu);
        }
    }
    column_worker(&job, 0);
    if (job.gate) {
        for (int t = 1; t < started; t++)
            pthread_join(tid[t], NULL);
        pthread_cond_destroy(&g.cv);
        pthread_mutex_destroy(&g.mu);
    }
    return 0;
}

static void column_done(sq_dp *dp)
{
    dp->done++;
    if (dp->progress)
        dp->progress(dp->user, dp->done < dp->total ? dp->done : dp->total, dp->total);
}

/* Columns 2..Dmax of a depth-independent solve (depth_index = any row's depth: the curve's
 * depth-independent p, or the last p_by_depth row) into cols, which own them; stops computing at
 * saturation. Returns the saturation column (D+1 when none). */
static int solve_independent(sq_dp *dp, column *cols, int depth_index, int *sat, sq_error *err)
{
    const int N = dp->N;
    cols[0] = dp->base[0];
    cols[1] = dp->base[1];
    *sat = dp->D + 1;
    for (int d = 2; d <= dp->D; d++) {
        if (d > *sat) {
            cols[d] = cols[*sat];
            continue;
        }
        if (column_alloc(dp, &cols[d]))
            return sq_error_oom(err, "DP column");
        compute_column(dp, cols[d - 1].best, dp->maxsize[d - 1], depth_index, &cols[d]);
        column_done(dp);
        if (dp->maxsize[d] == dp->maxsize[d - 1] &&
            memcmp(cols[d].best, cols[d - 1].best, ((size_t)N + 1) * sizeof(double)) == 0)
            *sat = d;
    }
    return SQ_OK;
}

/* A depth-dependent pass with depth bound Dmax: columns up to Dmax+1-R are the tail's, the
 * rest use the rows of depth Dmax-d+1. */
static int solve_pass(sq_dp *dp, int Dmax, sq_error *err)
{
    const int R = dp->depth_rows;
    for (int d = 0; d <= dp->D; d++)
        dp->col[d] = dp->tail[d];
    for (int d = 2; d <= Dmax; d++) {
        if (d <= Dmax + 1 - R)
            continue;
        column *c = &dp->own[Dmax - d];
        if (column_alloc(dp, c))
            return sq_error_oom(err, "DP column");
        compute_column(dp, dp->col[d - 1].best, dp->maxsize[d - 1], Dmax - d + 1, c);
        column_done(dp);
        dp->col[d] = *c;
    }
    dp->pass_depth = Dmax;
    return SQ_OK;
}

static int default_threads(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    if (n < 1)
        n = 1;
    return n > SQ_DP_MAX_THREADS ? SQ_DP_MAX_THREADS : (int)n;
}

int sq_dp_solve(const sq_dp_params *params, sq_dp **out, sq_error *err)
{
    *out = NULL;
    int rc = sq_dp_check(params, err);
    if (rc)
        return rc;
    sq_dp *dp = calloc(1, sizeof *dp);
    if (!dp)
        return sq_error_oom(err, "DP");
    effective(params, &dp->N, &dp->D, &dp->B);
    dp->curve = params->curve;
    dp->depth_rows = params->curve->depth_rows;
    dp->threads = params->threads > 0 ? params->threads : default_threads();
    dp->auto_threads = params->threads == 0;
    dp->progress = params->progress;
    dp->user = params->user;
    /* columns to compute: 2..D once, and with depth rows R, per pass Dmax its columns past
     * Dmax+1-R (saturation may end the first part early: the count then jumps) */
    dp->total = dp->D > 1 ? dp->D - 1 : 0;
    for (int Dmax = 1; params->curve->depth_rows > 0 && Dmax <= dp->D; Dmax++) {
        int from = Dmax + 2 - params->curve->depth_rows;
        dp->total += Dmax - (from > 2 ? from : 2) + 1 > 0 ? Dmax - (from > 2 ? from : 2) + 1 : 0;
    }

    if (dp->threads > SQ_DP_MAX_THREADS)
        dp->threads = SQ_DP_MAX_THREADS;
    const size_t n1 = (size_t)dp->N + 1, d1 = (size_t)dp->D + 1;
    dp->maxsize = calloc(d1, sizeof *dp->maxsize);
    dp->col = calloc(d1, sizeof *dp->col);
    dp->tail = calloc(d1, sizeof *dp->tail);
    dp->layer[0] = malloc(n1 * sizeof(double));
    dp->layer[1] = malloc(n1 * sizeof(double));
    dp->pm = malloc(n1 * sizeof(double));
    dp->am = malloc(n1 * (size_t)dp->threads * sizeof(double));
    for (int i = 0; i < 2; i++) {
        dp->base[i].best = malloc(n1 * sizeof(double));
        dp->base[i].bestb = calloc(n1, sizeof(int32_t));
    }
    if (dp->depth_rows > 0) {
        /* a pass computes its columns d > Dmax+1-R only: fewer than R of them */
        dp->nown = dp->depth_rows < dp->D + 1 ? dp->depth_rows : dp->D + 1;
        dp->own = calloc((size_t)dp->nown, sizeof *dp->own);
        dp->table = malloc(d1 * n1 * sizeof *dp->table);
    }
    if (!dp->maxsize || !dp->col || !dp->tail || !dp->layer[0] || !dp->layer[1] || !dp->pm ||
        !dp->am || !dp->base[0].best || !dp->base[0].bestb || !dp->base[1].best ||
        !dp->base[1].bestb || (dp->depth_rows > 0 && (!dp->own || !dp->table))) {
        sq_dp_free(dp);
        return sq_error_oom(err, "DP tables");
    }
    for (size_t n = 0; n < n1; n++) {
        dp->base[0].best[n] = -INFINITY;
        dp->base[1].best[n] = n == 1 ? 1.0 : -INFINITY;
    }
    dp->maxsize[0] = 0;
    for (int d = 1; d <= dp->D; d++) {
        long long s = 1 + (long long)dp->B * dp->maxsize[d - 1];
        dp->maxsize[d] = s < dp->N ? s : dp->N;
    }
    if (dp->depth_rows == 0) {
        rc = solve_independent(dp, dp->tail, 1, &dp->tail_sat, err);
        memcpy(dp->col, dp->tail, d1 * sizeof *dp->col);
        dp->pass_depth = dp->D;
    } else {
        rc = solve_independent(dp, dp->tail, dp->depth_rows, &dp->tail_sat, err);
        for (int d = 0; d <= dp->D && !rc; d++) {
            if (d >= 1)
                rc = solve_pass(dp, d, err);
            for (size_t n = 0; n < n1 && !rc; n++)
                dp->table[(size_t)d * n1 + n] = d >= 1 ? dp->col[d].best[n] : -INFINITY;
        }
    }
    if (rc) {
        sq_dp_free(dp);
        return rc;
    }
    if (dp->progress && dp->total > 0)
        dp->progress(dp->user, dp->total, dp->total);
    *out = dp;
    return SQ_OK;
}

int sq_dp_budget(const sq_dp *dp) { return dp->N; }
int sq_dp_depth(const sq_dp *dp) { return dp->D; }
int sq_dp_width(const sq_dp *dp) { return dp->B; }
const sq_curve *sq_dp_curve(const sq_dp *dp) { return dp->curve; }

int sq_dp_saturation(const sq_dp *dp) { return dp->tail_sat <= dp->D ? dp->tail_sat : 0; }

double sq_dp_best(const sq_dp *dp, int n, int d)
{
    if (n < 0 || n > dp->N || d < 0)
        return -INFINITY;
    if (d > dp->D)
        d = dp->D;
    if (dp->table)
        return dp->table[(size_t)d * ((size_t)dp->N + 1) + (size_t)n];
    return dp->col[d].best[n];
}

int sq_dp_best_size(const sq_dp *dp, int d)
{
    int size = 1;
    for (int n = 2; n <= dp->N; n++)
        if (sq_dp_best(dp, n, d) > sq_dp_best(dp, size, d))
            size = n;
    return size;
}

int sq_dp_tree(sq_dp *dp, int n, int d, sq_tree **out, sq_error *err)
{
    *out = NULL;
    if (d > dp->D)
        d = dp->D;
    if (!isfinite(sq_dp_best(dp, n, d)))
        return sq_error_set(err, SQ_EUSAGE, "no tree of size %d has depth <= %d and at most %d "
                            "children per node", n, d, dp->B);
    if (dp->depth_rows > 0 && dp->pass_depth != d) {
        int rc = solve_pass(dp, d, err);
        if (rc)
            return rc;
    }
    sq_tree *t = sq_tree_new(n);
    int *size = malloc((size_t)n * sizeof *size);    /* subtree size of each node       */
    int *budget = malloc((size_t)n * sizeof *budget); /* its depth budget                */
    int *kids = malloc(((size_t)dp->B + 1) * sizeof *kids);
    if (!t || !size || !budget || !kids) {
        sq_tree_free(t);
        free(size);
        free(budget);
        free(kids);
        return sq_error_oom(err, "tree");
    }
    t->parent[0] = -1;
    size[0] = n;
    budget[0] = d;
    int next = 1;
    /* Breadth-first: nodes are numbered as they are created, children in rank order. */
    for (int v = 0; v < next; v++) {
        int s = size[v], e = budget[v];
        if (s == 1)
            continue;
        const column *c = &dp->col[e];
        int b = c->bestb[s];
        SQ_ASSERT(b >= 1 && b <= dp->B);
        for (int k = b; k >= 1; k--) {
            int m = c->arg[(size_t)k * ((size_t)dp->N + 1) + (size_t)s];
            SQ_ASSERT(m >= 1 && m < s);
            kids[k] = m;
            s -= m;
        }
        SQ_ASSERT(s == 1);
        for (int k = 1; k <= b; k++) {
            SQ_ASSERT(next < n);
            t->parent[next] = v;
            t->rank[next] = k;
            t->depth[next] = t->depth[v] + 1;
            size[next] = kids[k];
            budget[next] = e - 1;
            next++;
        }
    }
    SQ_ASSERT(next == n);
    free(size);
    free(budget);
    free(kids);
    *out = t;
    return SQ_OK;
}
