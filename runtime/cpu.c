/* The CPU backend: float32 Llama forward with tree attention over a KV cache.
 *
 * The weight products go through runtime/cpu_matmul.h (a skinny kernel for few rows, OpenBLAS
 * through GSL's CBLAS interface for more; the build links OpenBLAS, not libgslcblas); the
 * attention products call cblas_sgemm directly. RMSNorm, RoPE, attention and SwiGLU are written
 * here. The KV cache holds, per layer, max_context committed slots followed by max_pending
 * pending slots: committed token t sits in slot t, pending token j in slot C + j (C = committed
 * count). Keys are stored after RoPE, so a slot never needs its position again.
 *
 * Attention runs as independent jobs (one KV head and a tile of its query rows each) on a small
 * pool of persistent threads, each job with single-threaded BLAS and its own scratch, so that
 * a tree verify pays neither OpenBLAS's per-call threading on tiny products nor a thread start
 * per softmax. The softmax's exponentials are vectorised (see attn_softmax_row). */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <gsl/gsl_cblas.h>

#include "runtime/backend.h"
#include "runtime/cpu_matmul.h"
#include "runtime/cpu_pool.h"
#include "runtime/kernels.h"

/* OpenBLAS's thread control (cblas.h of OpenBLAS; not in GSL's header). blas_thread_shutdown_
 * stops the threads OpenBLAS started when it was loaded (weak: other builds may lack it). */
void openblas_set_num_threads(int num_threads);
int blas_thread_shutdown_(void) __attribute__((weak));

/* Below this many multiply-adds (both products, all heads), attention runs on the calling
 * thread only: waking the pool costs tens of microseconds. */
#define ATTN_PARALLEL_MIN_WORK (1 << 20)
/* Attention handles at most this many (token, query head) rows of one KV head at a time. */
#define ATTN_TILE 64
/* Most CPU threads: the pool (runtime/cpu_pool.h) and its per-worker scratch. */
#define CPU_MAX_THREADS 256

typedef struct cpu_state {
    int    slots;        /* max_context + max_pending                                  */
    int    ld_scores;    /* slots rounded up to a multiple of 16 (the softmax's lanes)  */
    int    threads;
    sq_pool *pool;       /* the process's shared pool of `threads` workers (calling
                            thread included): runtime/cpu_pool.h                       */
    float *key_cache;    // (layer, slots, kv_dim)
    float *value_cache;  // (layer, slots, kv_dim)
    float *x;            // (max_pending, dim)         residual stream
    float *xb;           // (max_pending, dim)         normed input / scratch
    float *q;            // (max_pending, q_dim)
    float *att_out;      // (max_pending, q_dim)
    float *hb;           // (max_pending, hidden_dim)
    float *hb2;          // (max_pending, hidden_dim)
    float *scores;       // (threads, ATTN_TILE, ld_scores) attention scores, then weights
    float *qg;           // (threads, ATTN_TILE, head_dim)  queries of one KV head, packed
    float *og;           // (threads, ATTN_TILE, head_dim)  their attention outputs
    float *rope_cos;     // (max_pending, head_dim/2)
    float *rope_sin;     // (max_pending, head_dim/2)
    float *inv_freq;     // (head_dim/2)
    float *batch_buf;    /* scratch of sq_context_forward_batch when this context is the
                            batch's first: see cpu_forward_batch                          */
    size_t batch_cap;    /* its size in floats                                         */
} cpu_state;

static void cpu_free(sq_context *ctx)
{
    cpu_state *s = ctx->impl;
    if (!s)
        return;
    sq_pool_shared_release(s->pool);
    free(s->key_cache);
    free(s->value_cache);
    free(s->x);
    free(s->xb);
    free(s->q);
    free(s->att_out);
    free(s->hb);
    free(s->hb2);
    free(s->scores);
    free(s->qg);
    free(s->og);
    free(s->rope_cos);
    free(s->rope_sin);
    free(s->inv_freq);
    free(s->batch_buf);
    free(s);
    ctx->impl = NULL;
}

static float *alloc_floats(size_t a, size_t b, size_t c, int *ok)
{
    size_t n;
    if (!*ok || __builtin_mul_overflow(a, b, &n) || __builtin_mul_overflow(n, c, &n) ||
        __builtin_mul_overflow(n, sizeof(float), &n)) {
        *ok = 0;
        return NULL;
    }
    float *p = calloc(n ? n : 1, 1);
    if (!p)
        *ok = 0;
    return p;
}

static int cpu_init(sq_context *ctx, sq_error *err)
{
    const sq_model_config *c = &ctx->model->config;
    const sq_context_params *p = &ctx->params;
    cpu_state *s = calloc(1, sizeof *s);
    if (!s)
        return sq_error_oom(err, "the CPU context");
    ctx->impl = s;
    s->slots = p->max_context + p->max_pending;
    s->threads = p->threads;
    if (s->threads == 0) {
        long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
        s->threads = ncpu > 0 ? (int)ncpu : 1;
    }
    if (s->threads > CPU_MAX_THREADS)
        s->threads = CPU_MAX_THREADS;
    s->ld_scores = (s->slots + 15) / 16 * 16;
    size_t q_dim = (size_t)c->n_heads * (size_t)c->head_dim;
    size_t kv_dim = (size_t)c->n_kv_heads * (size_t)c->head_dim;
    size_t mp = (size_t)p->max_pending;
    int ok = 1;
    s->key_cache = alloc_floats((size_t)c->n_layers, (size_t)s->slots, kv_dim, &ok);
    s->value_cache = alloc_floats((size_t)c->n_layers, (size_t)s->slots, kv_dim, &ok);
    s->x = alloc_floats(mp, (size_t)c->dim, 1, &ok);
    s->xb = alloc_floats(mp, (size_t)c->dim, 1, &ok);
    s->q = alloc_floats(mp, q_dim, 1, &ok);
    s->att_out = alloc_floats(mp, q_dim, 1, &ok);
    s->hb = alloc_floats(mp, (size_t)c->hidden_dim, 1, &ok);
    s->hb2 = alloc_floats(mp, (size_t)c->hidden_dim, 1, &ok);
    size_t nt = (size_t)s->threads;
    s->scores = alloc_floats(nt * ATTN_TILE, (size_t)s->ld_scores, 1, &ok);
    s->qg = alloc_floats(nt * ATTN_TILE, (size_t)c->head_dim, 1, &ok);
    s->og = alloc_floats(nt * ATTN_TILE, (size_t)c->head_dim, 1, &ok);
    s->rope_cos = alloc_floats(mp, (size_t)c->head_dim / 2, 1, &ok);
    s->rope_sin = alloc_floats(mp, (size_t)c->head_dim / 2, 1, &ok);
    s->inv_freq = alloc_floats((size_t)c->head_dim / 2, 1, 1, &ok);
    if (!ok) {
        size_t mib = (size_t)c->n_layers * (size_t)s->slots * kv_dim * 2 * sizeof(float) >> 20;
        cpu_free(ctx);
        return sq_error_set(err, SQ_ESOFTWARE, "out of memory for a KV cache of %d slots "
                            "(about %zu MiB) and scratch", p->max_context + p->max_pending, mib);
    }
    /* As transformers computes it: inv_freq[i] = 1 / theta^(2i / head_dim) in float32. */
    for (int i = 0; i < c->head_dim / 2; i++)
        s->inv_freq[i] = sq_k_rope_inv_freq(i, c->head_dim, c->rope_theta);
    s->pool = sq_pool_shared_acquire(s->threads);
    if (!s->pool) {
        cpu_free(ctx);
        return sq_error_oom(err, "the CPU thread pool");
    }
    /* every thread of a forward is the pool's: runtime/cpu_matmul.h. OpenBLAS's own threads,
     * started when it was loaded, would spin (sched_yield) for about 2^28 cycles before they
     * sleep, a core taken from the pool for all of a short run: stop them */
    openblas_set_num_threads(1);
    if (blas_thread_shutdown_)
        blas_thread_shutdown_();
    return SQ_OK;
}

/* out (n, d_out) = in (n, d_in) @ w^T (+ out when accumulate): runtime/cpu_matmul.h. */
static void linear(cpu_state *s, float *out, const float *in, const float *w, int n, int d_in,
                   int d_out, int accumulate)
{
    sq_cpu_matmul(s->pool, out, in, w, n, d_in, d_out, accumulate);
}

static void rmsnorm(float *out, const float *x, const float *weight, int n, int dim, float eps)
{
    for (int i = 0; i < n; i++) {
        const float *xi = x + (size_t)i * dim;
        float *oi = out + (size_t)i * dim;
        float ss = 0.0f;
        for (int k = 0; k < dim; k++)
            ss += xi[k] * xi[k];
        float scale = sq_k_rms_scale(ss, dim, eps);
        for (int k = 0; k < dim; k++)
            oi[k] = sq_k_rmsnorm(xi[k], scale, weight[k]);
    }
}

/* HF rotate_half convention: within each head, element k pairs with k + head_dim/2. */
static void rope(float *v, int n_heads, int head_dim, const float *cosv, const float *sinv)
{
    int half = head_dim / 2;
    for (int h = 0; h < n_heads; h++) {
        float *a = v + (size_t)h * head_dim;
        float *b = a + half;
        for (int k = 0; k < half; k++)
            sq_k_rope_rotate(&a[k], &b[k], cosv[k], sinv[k]);
    }
}

/* Attention, per KV head g and tile of rows (token i, query head h of g's group):
 *   scores = Q K^T / sqrt(hd) over every cached slot 0 .. C+P+n-1   (one sgemm)
 *   mask: a pending slot C+j counts only when mask[i][j] != 0; softmax per row
 *   out    = weights V                                               (one sgemm)
 * Keys and values of slot t sit at row t of the layer's cache (stride kv_dim), so both products
 * read the cache in place. Masked pending slots cost a few wasted multiply-adds (at most the
 * pending share of the row) and no branch in the inner loops. */
/* ---- the attention softmax, vectorised ---------------------------------------------------- */

/* exp(x) for x <= 0 (scores minus their row maximum) on 16 lanes: x = k ln2 + r with
 * |r| <= ln2/2 (ln2 split in two parts for an exact k ln2), exp(r) from the degree-6
 * polynomial of the Cephes library's expf (S. L. Moshier, cephes/single/expf.c, whose
 * coefficients and range reduction this follows; written here in GCC vector extensions),
 * times 2^k set in the exponent bits. Within 2 ulp of expf on [-87, 0]; below -87 (and for the
 * -inf of a masked slot) the weight is exactly 0. The CPU's softmax therefore differs from
 * sq_k_attn_exp (expf) by rounding only. */
typedef float   v16f __attribute__((vector_size(64)));
typedef int32_t v16i __attribute__((vector_size(64)));

/* One row of scores -> softmax weights, in place: slots t >= C count only where
 * mrow[t - C] != 0. total is padded to a multiple of 16 by the caller's scratch (row has room
 * up to the next multiple of 16). */
/* Clones by instruction set, dispatched on the CPU's features (not "arch=" clones, which GCC
 * dispatches on the exact CPU model, so that a newer model runs the baseline). */
__attribute__((target_clones("avx512f", "avx2", "default")))
static void attn_softmax_row(float *row, int total, int C, const uint8_t *mrow)
{
    float mx = -INFINITY;
    for (int t = C; t < total; t++)
        if (!mrow[t - C])
            row[t] = -INFINITY;
    for (int t = 0; t < total; t++)
        mx = row[t] > mx ? row[t] : mx;
    const int tp = (total + 15) & ~15;
    for (int t = total; t < tp; t++)
        row[t] = -INFINITY;
    v16f sum = {0};
    for (int t = 0; t < tp; t += 16) {
        v16f x;
        memcpy(&x, row + t, sizeof x);
        x -= mx;
        /* exp(x), x <= 0, as described above */
        const v16f lo = (v16f){0} + -87.0f;
        v16i keep = x >= lo;                      /* -1 where exp(x) is representable */
        x = (v16f)(((v16i)x & keep) | ((v16i)lo & ~keep));
        const v16f shifter = (v16f){0} + 12582912.0f; /* 1.5 * 2^23: rounds to an integer */
        v16f k = x * 1.44269504088896341f + shifter;
        k = k - shifter;
        v16f r = x - k * 0.693359375f;
        r = r - k * -2.12194440e-4f;
        v16f p = (v16f){0} + 1.9875691500e-4f;
        p = p * r + 1.3981999507e-3f;
        p = p * r + 8.3334519073e-3f;
        p = p * r + 4.1665795894e-2f;
        p = p * r + 1.6666665459e-1f;
        p = p * r + 5.0000001201e-1f;
        p = p * (r * r) + r + 1.0f;
        v16i e = (__builtin_convertvector(k, v16i) + 127) << 23;
        v16f v = (v16f)((v16i)(p * (v16f)e) & keep);
        memcpy(row + t, &v, sizeof v);
        sum += v;
    }
    float s = 0.0f;
    for (int i = 0; i < 16; i++)
        s += sum[i];
    const float inv = 1.0f / s;   /* s >= 1: the maximum contributes exp(0) */
    for (int t = 0; t < total; t++)
        row[t] *= inv;
}

/* ---- attention ------------------------------------------------------------------------------ */

/* Attention, per KV head g and tile of rows (token i, query head h of g's group):
 *   scores = Q K^T / sqrt(hd) over every cached slot 0 .. C+P+n-1   (one sgemm)
 *   mask: a pending slot C+j counts only when mask[i][j] != 0; softmax per row
 *   out    = weights V                                               (one sgemm)
 * Keys and values of slot t sit at row t of the layer's cache (stride kv_dim), so both products
 * read the cache in place. Masked pending slots cost a few wasted multiply-adds (at most the
 * pending share of the row) and no branch in the inner loops. Jobs (g, tile) are independent:
 * each writes its own rows of att_out. */
typedef struct attn_job {
    const sq_model_config *c;
    cpu_state             *s;
    int                    layer, n, C, P;
    const uint8_t         *mask;
    int                    tiles;   /* row tiles per KV head */
} attn_job;

static void attn_tile(const attn_job *jb, int g, int tile, float *scores, float *qg, float *og)
{
    const sq_model_config *c = jb->c;
    cpu_state *s = jb->s;
    const int hd = c->head_dim, kv_dim = c->n_kv_heads * hd, q_dim = c->n_heads * hd;
    const int group = c->n_heads / c->n_kv_heads;
    const int width = jb->P + jb->n, total = jb->C + width, rows_all = jb->n * group;
    const float scale = 1.0f / sqrtf((float)hd);
    const float *K = s->key_cache + (size_t)jb->layer * s->slots * kv_dim + (size_t)g * hd;
    const float *V = s->value_cache + (size_t)jb->layer * s->slots * kv_dim + (size_t)g * hd;
    const int row0 = tile * ATTN_TILE;
    const int rows = rows_all - row0 < ATTN_TILE ? rows_all - row0 : ATTN_TILE;
    for (int r = 0; r < rows; r++) {
        int i = (row0 + r) / group, h = g * group + (row0 + r) % group;
        memcpy(qg + (size_t)r * hd, s->q + (size_t)i * q_dim + (size_t)h * hd,
               (size_t)hd * sizeof(float));
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, total, hd, scale, qg, hd, K,
                kv_dim, 0.0f, scores, s->ld_scores);
    for (int r = 0; r < rows; r++)
        attn_softmax_row(scores + (size_t)r * s->ld_scores, total, jb->C,
                         jb->mask + (size_t)((row0 + r) / group) * width);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, hd, total, 1.0f, scores,
                s->ld_scores, V, kv_dim, 0.0f, og, hd);
    for (int r = 0; r < rows; r++) {
        int i = (row0 + r) / group, h = g * group + (row0 + r) % group;
        memcpy(s->att_out + (size_t)i * q_dim + (size_t)h * hd, og + (size_t)r * hd,
               (size_t)hd * sizeof(float));
    }
}

static void attn_worker(void *arg, int worker, int n_workers)
{
    const attn_job *jb = arg;
    cpu_state *s = jb->s;
    const int hd = jb->c->head_dim;
    float *scores = s->scores + (size_t)worker * ATTN_TILE * s->ld_scores;
    float *qg = s->qg + (size_t)worker * ATTN_TILE * hd;
    float *og = s->og + (size_t)worker * ATTN_TILE * hd;
    const int jobs = jb->c->n_kv_heads * jb->tiles;
    for (int j = worker; j < jobs; j += n_workers)
        attn_tile(jb, j / jb->tiles, j % jb->tiles, scores, qg, og);
}

static void attention(const sq_model_config *c, cpu_state *s, int layer, int n, int C, int P,
                      const uint8_t *mask)
{
    const int group = c->n_heads / c->n_kv_heads, total = C + P + n;
    attn_job jb = {c, s, layer, n, C, P, mask, (n * group + ATTN_TILE - 1) / ATTN_TILE};
    /* multiply-adds of the two products: small ones are not worth waking the pool */
    double work = 2.0 * n * c->n_heads * (double)total * c->head_dim;
    if (s->pool->n < 2 || work < ATTN_PARALLEL_MIN_WORK) {
        attn_worker(&jb, 0, 1);
        return;
    }
    sq_pool_run(s->pool, attn_worker, &jb);
}

static int cpu_forward(sq_context *ctx, const int32_t *tokens, const int32_t *pos,
                       const uint8_t *mask, int n, float *logits, sq_error *err)
{
    const sq_model_config *c = &ctx->model->config;
    const sq_weights *w = &ctx->model->w;
    cpu_state *s = ctx->impl;
    const int dim = c->dim, hid = c->hidden_dim, hd = c->head_dim, half = hd / 2;
    const int q_dim = c->n_heads * hd, kv_dim = c->n_kv_heads * hd;
    const int C = ctx->n_committed, P = ctx->n_pending;

    for (int i = 0; i < n; i++) {
        memcpy(s->x + (size_t)i * dim, w->embed + (size_t)tokens[i] * dim,
               (size_t)dim * sizeof(float));
        for (int k = 0; k < half; k++) {
            float angle = (float)pos[i] * s->inv_freq[k];
            s->rope_cos[(size_t)i * half + k] = cosf(angle);
            s->rope_sin[(size_t)i * half + k] = sinf(angle);
        }
    }

    for (int l = 0; l < c->n_layers; l++) {
        const sq_layer_weights *lw = &w->layers[l];
        size_t first = (size_t)l * s->slots + (size_t)(C + P);   /* slot of new token 0 */
        float *kdst = s->key_cache + first * kv_dim;
        float *vdst = s->value_cache + first * kv_dim;

        rmsnorm(s->xb, s->x, lw->attn_norm, n, dim, c->norm_eps);
        linear(s, s->q, s->xb, lw->wq, n, dim, q_dim, 0);
        linear(s, kdst, s->xb, lw->wk, n, dim, kv_dim, 0);
        linear(s, vdst, s->xb, lw->wv, n, dim, kv_dim, 0);
        for (int i = 0; i < n; i++) {
            const float *cs = s->rope_cos + (size_t)i * half, *sn = s->rope_sin + (size_t)i * half;
            rope(s->q + (size_t)i * q_dim, c->n_heads, hd, cs, sn);
            rope(kdst + (size_t)i * kv_dim, c->n_kv_heads, hd, cs, sn);
        }
        attention(c, s, l, n, C, P, mask);
        linear(s, s->x, s->att_out, lw->wo, n, q_dim, dim, 1);

        rmsnorm(s->xb, s->x, lw->ffn_norm, n, dim, c->norm_eps);
        linear(s, s->hb, s->xb, lw->w_gate, n, dim, hid, 0);
        linear(s, s->hb2, s->xb, lw->w_up, n, dim, hid, 0);
        for (size_t k = 0; k < (size_t)n * hid; k++)
            s->hb[k] = sq_k_silu_mul(s->hb[k], s->hb2[k]);
        linear(s, s->x, s->hb, lw->w_down, n, hid, dim, 1);
    }
    rmsnorm(s->xb, s->x, w->norm, n, dim, c->norm_eps);
    linear(s, logits, s->xb, w->lm_head, n, dim, c->vocab_size, 0);
    (void)err;
    return SQ_OK;
}

/* Gathers pending slots keep[] to committed slots C .. C+nkeep-1, through the scratch rows of
 * q (max_pending x q_dim >= nkeep x kv_dim), so any order of keep is fine. */
static int cpu_commit(sq_context *ctx, const int32_t *keep, int nkeep, sq_error *err)
{
    const sq_model_config *c = &ctx->model->config;
    cpu_state *s = ctx->impl;
    const size_t kv_dim = (size_t)c->n_kv_heads * c->head_dim;
    const size_t row = kv_dim * sizeof(float);
    const int C = ctx->n_committed;
    for (int l = 0; l < c->n_layers; l++) {
        float *caches[2] = {s->key_cache, s->value_cache};
        for (int which = 0; which < 2; which++) {
            float *base = caches[which] + (size_t)l * s->slots * kv_dim;
            for (int k = 0; k < nkeep; k++)
                memcpy(s->q + k * kv_dim, base + (size_t)(C + keep[k]) * kv_dim, row);
            memcpy(base + (size_t)C * kv_dim, s->q, (size_t)nkeep * row);
        }
    }
    (void)err;
    return SQ_OK;
}

/* Several sequences in one forward (sq_context_forward_batch): the R = sum n_k rows of all
 * sequences go through every weight product together (RMSNorm, the projections, SwiGLU and
 * the LM head see R rows, so each weight matrix is read once per layer for the whole batch),
 * while attention runs per sequence on that sequence's own KV cache and tree mask, through the
 * same attention() as the single-sequence forward: its q and att_out rows are pointed at the
 * sequence's slice of the batch scratch for the call. New keys and values are computed into the
 * scratch, rotated, then copied to each context's pending slots. The scratch lives in the first
 * context and grows to the largest batch seen. */
static int cpu_forward_batch(const sq_batch_seq *seqs, int b, sq_error *err)
{
    sq_context *ctx0 = seqs[0].ctx;
    const sq_model_config *c = &ctx0->model->config;
    const sq_weights *w = &ctx0->model->w;
    cpu_state *s0 = ctx0->impl;
    const size_t dim = (size_t)c->dim, hid = (size_t)c->hidden_dim, hd = (size_t)c->head_dim;
    const size_t half = hd / 2, q_dim = (size_t)c->n_heads * hd, kv_dim = (size_t)c->n_kv_heads * hd;
    const size_t V = (size_t)c->vocab_size;
    size_t R = 0;
    for (int k = 0; k < b; k++)
        R += (size_t)seqs[k].n;
    const size_t per_row = 2 * dim + 2 * q_dim + 2 * kv_dim + 2 * hid + 2 * half + V;
    if (R * per_row > s0->batch_cap) {
        float *nb = malloc(R * per_row * sizeof(float));
        if (!nb)
            return sq_error_oom(err, "batched forward scratch");
        free(s0->batch_buf);
        s0->batch_buf = nb;
        s0->batch_cap = R * per_row;
    }
    float *x = s0->batch_buf, *xb = x + R * dim, *q = xb + R * dim, *att = q + R * q_dim;
    float *kb = att + R * q_dim, *vb = kb + R * kv_dim, *hb = vb + R * kv_dim, *hb2 = hb + R * hid;
    float *rc_ = hb2 + R * hid, *rs_ = rc_ + R * half, *lg = rs_ + R * half;
    const int n_all = (int)R;

    for (int k = 0, r = 0; k < b; k++) {
        const cpu_state *sk = seqs[k].ctx->impl;
        for (int i = 0; i < seqs[k].n; i++, r++) {
            memcpy(x + (size_t)r * dim, w->embed + (size_t)seqs[k].tokens[i] * dim,
                   dim * sizeof(float));
            for (size_t j = 0; j < half; j++) {
                float angle = (float)seqs[k].pos[i] * sk->inv_freq[j];
                rc_[(size_t)r * half + j] = cosf(angle);
                rs_[(size_t)r * half + j] = sinf(angle);
            }
        }
    }
    for (int l = 0; l < c->n_layers; l++) {
        const sq_layer_weights *lw = &w->layers[l];
        rmsnorm(xb, x, lw->attn_norm, n_all, (int)dim, c->norm_eps);
        linear(s0, q, xb, lw->wq, n_all, (int)dim, (int)q_dim, 0);
        linear(s0, kb, xb, lw->wk, n_all, (int)dim, (int)kv_dim, 0);
        linear(s0, vb, xb, lw->wv, n_all, (int)dim, (int)kv_dim, 0);
        for (size_t r = 0; r < R; r++) {
            rope(q + r * q_dim, c->n_heads, (int)hd, rc_ + r * half, rs_ + r * half);
            rope(kb + r * kv_dim, c->n_kv_heads, (int)hd, rc_ + r * half, rs_ + r * half);
        }
        for (int k = 0, r = 0; k < b; k++) {
            sq_context *ctx = seqs[k].ctx;
            cpu_state *sk = ctx->impl;
            const int n = seqs[k].n, C = ctx->n_committed, P = ctx->n_pending;
            size_t first = (size_t)l * sk->slots + (size_t)(C + P);
            memcpy(sk->key_cache + first * kv_dim, kb + (size_t)r * kv_dim,
                   (size_t)n * kv_dim * sizeof(float));
            memcpy(sk->value_cache + first * kv_dim, vb + (size_t)r * kv_dim,
                   (size_t)n * kv_dim * sizeof(float));
            float *q_own = sk->q, *att_own = sk->att_out;
            sk->q = q + (size_t)r * q_dim;
            sk->att_out = att + (size_t)r * q_dim;
            attention(c, sk, l, n, C, P, seqs[k].mask);
            sk->q = q_own;
            sk->att_out = att_own;
            r += n;
        }
        linear(s0, x, att, lw->wo, n_all, (int)q_dim, (int)dim, 1);
        rmsnorm(xb, x, lw->ffn_norm, n_all, (int)dim, c->norm_eps);
        linear(s0, hb, xb, lw->w_gate, n_all, (int)dim, (int)hid, 0);
        linear(s0, hb2, xb, lw->w_up, n_all, (int)dim, (int)hid, 0);
        for (size_t j = 0; j < R * hid; j++)
            hb[j] = sq_k_silu_mul(hb[j], hb2[j]);
        linear(s0, x, hb, lw->w_down, n_all, (int)hid, (int)dim, 1);
    }
    rmsnorm(xb, x, w->norm, n_all, (int)dim, c->norm_eps);
    linear(s0, lg, xb, w->lm_head, n_all, (int)dim, (int)V, 0);
    for (int k = 0, r = 0; k < b; k++) {
        memcpy(seqs[k].logits, lg + (size_t)r * V, (size_t)seqs[k].n * V * sizeof(float));
        r += seqs[k].n;
    }
    return SQ_OK;
}

const sq_backend_ops sq_backend_cpu = {
    .name = "cpu",
    .init = cpu_init,
    .free = cpu_free,
    .forward = cpu_forward,
    .forward_batch = cpu_forward_batch,
    .commit = cpu_commit,
};
