/* The CPU backend: the float32 forward (weights float32, bf16 or f16, widened inside the
 * products: docs/runtime.md, "16-bit weights on the CPU") of every family of runtime/arch.h (Llama, Mistral,
 * Qwen2/3, Gemma-2/3: docs/runtime.md, "Model families") with tree attention over a KV cache.
 * The family's features are fields of the config: biases and q/k norms where their slots are
 * set, Gemma's (1 + w) norms, post norms, GeGLU, embedding scale and soft caps, sliding windows
 * by position (each slot's position is kept, gathered on commit), and the RoPE tables of
 * runtime/rope.h (a second one for Gemma-3's sliding layers).
 *
 * The weight products go through runtime/cpu_matmul.h (a skinny kernel for few rows, OpenBLAS
 * through GSL's CBLAS interface for more; the build links OpenBLAS, not libgslcblas); the
 * attention products call cblas_sgemm directly. RMSNorm, RoPE, attention and SwiGLU are written
 * here. The KV cache holds, per layer, max_context committed slots followed by max_pending
 * pending slots: committed token t sits in slot t, pending token j in slot C + j (C = committed
 * count). Keys are stored after RoPE, so a slot never needs its position again.
 *
 * One forward body serves both entry points: sq_context_forward is a batch of one
 * (cpu_forward_batch). The layer body reads the weights by their slots in the architecture's
 * table (runtime/arch.h); the context's memory is laid out by cpu_sizes_of, which
 * sq_cpu_context_bytes (runtime/memory.h) also counts.
 *
 * Attention runs as independent jobs (one KV head and a tile of its query rows each) on a small
 * pool of persistent threads, each job with single-threaded BLAS and its own scratch, so that
 * a tree verify pays neither OpenBLAS's per-call threading on tiny products nor a thread start
 * per softmax. The softmax's exponentials are vectorised (see attn_softmax_row). */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <gsl/gsl_cblas.h>

#include "libsequoia/base/cli.h"
#include "runtime/backend.h"
#include "runtime/cpu_matmul.h"
#include "runtime/cpu_pool.h"
#include "runtime/kernels.h"
#include "runtime/memory.h"
#include "runtime/rope.h"

/* OpenBLAS's thread control (cblas.h of OpenBLAS; not in GSL's header). blas_thread_shutdown_
 * stops the threads OpenBLAS started when it was loaded (weak: other builds may lack it). */
void openblas_set_num_threads(int num_threads);
int blas_thread_shutdown_(void) __attribute__((weak));

/* OpenBLAS maps one buffer for each thread that calls it, at that thread's first call:
 * BUFFER_SIZE (32 << 22 bytes on x86_64) plus a page, seen with strace. When that mmap fails
 * (an address-space limit, `ulimit -v`) its blas_memory_alloc retries forever instead of
 * failing (issue 27 C1). So under a finite RLIMIT_AS a context checks, once it has allocated
 * its own memory, that the buffers of all its threads still fit, with BLAS_SPARE_BYTES to spare
 * for what the tool allocates afterwards; if not it is out of memory (exit 70). */
#define BLAS_BUFFER_BYTES (((size_t)32 << 22) + 8192)
#define BLAS_SPARE_BYTES ((size_t)16 << 20)

static int blas_room_check(int threads, sq_error *err)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_AS, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY)
        return SQ_OK;
    size_t need = (size_t)threads * BLAS_BUFFER_BYTES + BLAS_SPARE_BYTES;
    void *p = mmap(NULL, need, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED)
        return sq_error_set(err, SQ_ESOFTWARE, "out of memory: the BLAS library needs %zu MiB of "
                            "address space for its buffers (%d thread%s), more than the "
                            "address-space limit (ulimit -v %llu KiB) leaves; raise the limit or "
                            "use fewer --threads", need >> 20, threads, threads == 1 ? "" : "s",
                            (unsigned long long)(rl.rlim_cur >> 10));
    munmap(p, need);
    return SQ_OK;
}

/* Below this many multiply-adds (both products, all heads), attention runs on the calling
 * thread only: waking the pool costs tens of microseconds. */
#define ATTN_PARALLEL_MIN_WORK (1 << 20)
/* Attention handles at most this many (token, query head) rows of one KV head at a time. */
#define ATTN_TILE 64
/* Most CPU threads: the pool (runtime/cpu_pool.h) and its per-worker scratch. */
#define CPU_MAX_THREADS SQ_MAX_THREADS /* libsequoia/base/cli.h */

typedef struct cpu_state {
    int    slots;        /* max_context + max_pending                                  */
    int    ld_scores;    /* slots rounded up to a multiple of 16 (the softmax's lanes)  */
    int    threads;
    sq_pool *pool;       /* the process's shared pool of `threads` workers (calling
                            thread included): runtime/cpu_pool.h                       */
    float *key_cache;    // (layer, slots, kv_dim)
    float *value_cache;  // (layer, slots, kv_dim)
    float *rows_buf;     // (rows_cap, row_floats)     a forward's per-row scratch: cpu_rows
    size_t rows_cap;     /* rows it holds: max_pending, more once it led a larger batch */
    float *scores;       // (threads, ATTN_TILE, ld_scores) attention scores, then weights
    float *qg;           // (threads, ATTN_TILE, head_dim)  queries of one KV head, packed
    float *og;           // (threads, ATTN_TILE, head_dim)  their attention outputs
    float *inv_freq;     // (2, head_dim/2) RoPE of full layers, then of sliding ones
    float  attn_factor[2]; /* RoPE's attention factor of each (runtime/rope.h)           */
    int32_t *slot_pos;   // (slots) the position of each slot's token (sliding windows)
    const sq_weights *w; /* the model's weights in the context's dtype (sq_model_weights_as) */
    float *logit_buf;    /* a batch's logits (b > 1) when this context leads it           */
    size_t logit_cap;    /* its size in floats                                         */
} cpu_state;

/* The per-row scratch of a forward of R token rows (all sequences of a batch together), cut
 * from one buffer of R * row_floats floats in this order. */
typedef struct cpu_rows {
    float *x;            // (R, dim)          residual stream
    float *xb;           // (R, dim)          normed input / scratch
    float *q;            // (R, q_dim)
    float *att;          // (R, q_dim)        attention output
    float *kb, *vb;      // (R, kv_dim)       new keys (after RoPE) and values
    float *hb, *hb2;     // (R, hidden_dim)
    float *rc, *rs;      // (R, head_dim/2)   RoPE cos and sin (full layers)
    float *rc2, *rs2;    // (R, head_dim/2)   the same for sliding layers (runtime/rope.h)
} cpu_rows;

static size_t row_floats(const sq_model_config *c)
{
    const size_t q_dim = (size_t)c->n_heads * c->head_dim;
    const size_t kv_dim = (size_t)c->n_kv_heads * c->head_dim;
    return 2 * (size_t)c->dim + 2 * q_dim + 2 * kv_dim + 2 * (size_t)c->hidden_dim +
           2 * (size_t)c->head_dim;
}

static cpu_rows rows_at(float *buf, const sq_model_config *c, size_t R)
{
    const size_t q_dim = (size_t)c->n_heads * c->head_dim;
    const size_t kv_dim = (size_t)c->n_kv_heads * c->head_dim;
    cpu_rows r;
    r.x = buf;
    r.xb = r.x + R * c->dim;
    r.q = r.xb + R * c->dim;
    r.att = r.q + R * q_dim;
    r.kb = r.att + R * q_dim;
    r.vb = r.kb + R * kv_dim;
    r.hb = r.vb + R * kv_dim;
    r.hb2 = r.hb + R * c->hidden_dim;
    r.rc = r.hb2 + R * c->hidden_dim;
    r.rs = r.rc + R * (c->head_dim / 2);
    r.rc2 = r.rs + R * (c->head_dim / 2);
    r.rs2 = r.rc2 + R * (c->head_dim / 2);
    return r;
}

/* The buffers of a context, in floats: what cpu_init allocates and sq_cpu_context_bytes counts
 * (runtime/memory.h). 0 when a size overflows. */
typedef struct cpu_sizes {
    int    threads, slots, ld_scores;
    size_t cache;        /* each of the key and value caches      */
    size_t rows;         /* rows_buf                              */
    size_t scores, qg;   /* scores; qg and og each                */
    size_t inv_freq;     /* both RoPE tables                      */
    size_t pos;          /* slot_pos (int32, counted as floats)   */
} cpu_sizes;

static int cpu_threads(int threads)
{
    if (threads == 0) {
        long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
        threads = ncpu > 0 ? (int)ncpu : 1;
    }
    return threads > CPU_MAX_THREADS ? CPU_MAX_THREADS : threads;
}

static int cpu_sizes_of(const sq_model_config *c, int max_context, int max_pending, int threads,
                        cpu_sizes *z)
{
    memset(z, 0, sizeof *z);
    z->threads = cpu_threads(threads);
    z->slots = max_context + max_pending;
    z->ld_scores = (z->slots + 15) / 16 * 16;
    const size_t kv_dim = (size_t)c->n_kv_heads * (size_t)c->head_dim;
    const size_t tile_rows = (size_t)z->threads * ATTN_TILE;
    int bad = __builtin_mul_overflow((size_t)c->n_layers, (size_t)z->slots, &z->cache) ||
              __builtin_mul_overflow(z->cache, kv_dim, &z->cache) ||
              __builtin_mul_overflow((size_t)max_pending, row_floats(c), &z->rows) ||
              __builtin_mul_overflow(tile_rows, (size_t)z->ld_scores, &z->scores);
    z->qg = tile_rows * (size_t)c->head_dim;
    z->inv_freq = (size_t)c->head_dim;
    z->pos = (size_t)z->slots;
    size_t total = 0;
    bad = bad || __builtin_add_overflow(z->cache, z->cache, &total) ||
          __builtin_add_overflow(total, z->rows, &total) ||
          __builtin_add_overflow(total, z->scores, &total) ||
          __builtin_mul_overflow(total + 2 * z->qg + z->inv_freq + z->pos, sizeof(float),
                                 &total);
    return bad ? -1 : 0;
}

double sq_cpu_context_bytes(const sq_model_config *c, int max_context, int max_pending,
                            int threads)
{
    cpu_sizes z;
    if (cpu_sizes_of(c, max_context, max_pending, threads, &z) != 0)
        return HUGE_VAL;
    return ((double)z.cache * 2 + (double)z.rows + (double)z.scores + 2.0 * (double)z.qg +
            (double)z.inv_freq + (double)z.pos) * sizeof(float);
}

double sq_cpu_batch_bytes(const sq_model_config *c, double rows)
{
    return rows * ((double)row_floats(c) + c->vocab_size) * sizeof(float);
}

static void cpu_free(sq_context *ctx)
{
    cpu_state *s = ctx->impl;
    if (!s)
        return;
    sq_pool_shared_release(s->pool);
    free(s->key_cache);
    free(s->value_cache);
    free(s->rows_buf);
    free(s->scores);
    free(s->qg);
    free(s->og);
    free(s->inv_freq);
    free(s->slot_pos);
    free(s->logit_buf);
    free(s);
    ctx->impl = NULL;
}

static float *alloc_floats(size_t n, int *ok)
{
    if (!*ok)
        return NULL;
    float *p = calloc(n ? n : 1, sizeof(float));
    if (!p)
        *ok = 0;
    return p;
}

static int cpu_init(sq_context *ctx, sq_error *err)
{
    const sq_model_config *c = &ctx->model->config;
    const sq_context_params *p = &ctx->params;
    int rc = sq_rope_check_context(c, (long long)p->max_context + p->max_pending, err);
    if (rc)
        return rc;
    cpu_state *s = calloc(1, sizeof *s);
    if (!s)
        return sq_error_oom(err, "the CPU context");
    ctx->impl = s;
    cpu_sizes z;
    int ok = cpu_sizes_of(c, p->max_context, p->max_pending, p->threads, &z) == 0;
    s->slots = z.slots;
    s->threads = z.threads;
    s->ld_scores = z.ld_scores;
    s->key_cache = alloc_floats(z.cache, &ok);
    s->value_cache = alloc_floats(z.cache, &ok);
    s->rows_buf = alloc_floats(z.rows, &ok);
    s->rows_cap = (size_t)p->max_pending;
    s->scores = alloc_floats(z.scores, &ok);
    s->qg = alloc_floats(z.qg, &ok);
    s->og = alloc_floats(z.qg, &ok);
    s->inv_freq = alloc_floats(z.inv_freq, &ok);
    s->slot_pos = ok ? calloc(z.pos ? z.pos : 1, sizeof(int32_t)) : NULL;
    ok = ok && s->slot_pos;
    if (!ok) {
        size_t kv_dim = (size_t)c->n_kv_heads * (size_t)c->head_dim;
        size_t mib = (size_t)c->n_layers * (size_t)s->slots * kv_dim * 2 * sizeof(float) >> 20;
        cpu_free(ctx);
        return sq_error_set(err, SQ_ESOFTWARE, "out of memory for a KV cache of %d slots "
                            "(about %zu MiB) and scratch", p->max_context + p->max_pending, mib);
    }
    /* RoPE's tables as transformers computes them (runtime/rope.h): full layers, then sliding */
    sq_rope_table(c, &c->rope, s->inv_freq, &s->attn_factor[0]);
    sq_rope_table(c, c->rope_local.theta > 0 ? &c->rope_local : &c->rope,
                  s->inv_freq + c->head_dim / 2, &s->attn_factor[1]);
    rc = sq_model_weights_as(ctx->model, p->dtype, &s->w, err);
    if (rc) {
        cpu_free(ctx);
        return rc;
    }
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
    rc = blas_room_check(s->threads, err);
    if (rc)
        cpu_free(ctx);
    return rc;
}

/* out (n, d_out) = in (n, d_in) @ w^T (+ out when accumulate), w float32 or 16-bit (widened
 * inside the product): runtime/cpu_matmul.h. */
static void linear(cpu_state *s, float *out, const float *in, sq_wt w, int n, int d_in,
                   int d_out, int accumulate)
{
    sq_cpu_matmul_typed(s->pool, out, in, w.p, w.dtype, n, d_in, d_out, accumulate);
}

/* Row `row` of the embedding (dim values, float32 or 16-bit) as float32. */
static void embed_row(float *out, sq_wt e, int32_t row, size_t dim)
{
    const size_t es = e.dtype == SQ_DTYPE_F32 ? sizeof(float) : sizeof(uint16_t);
    sq_cpu_widen(out, (const char *)e.p + (size_t)row * dim * es, e.dtype, dim);
}

/* weight_offset: 0, or 1 for Gemma's (1 + w) norms. In place (out == x) is fine. */
static void rmsnorm(float *out, const float *x, const float *weight, int n, int dim, float eps,
                    float weight_offset)
{
    for (int i = 0; i < n; i++) {
        const float *xi = x + (size_t)i * dim;
        float *oi = out + (size_t)i * dim;
        float ss = 0.0f;
        for (int k = 0; k < dim; k++)
            ss += xi[k] * xi[k];
        float scale = sq_k_rms_scale(ss, dim, eps);
        for (int k = 0; k < dim; k++)
            oi[k] = sq_k_rmsnorm(xi[k], scale, weight_offset + weight[k]);
    }
}

/* out (n, d) += b, row by row; nothing when b is NULL (a bias the model does not have). */
static void add_bias(float *out, const float *b, size_t n, size_t d)
{
    if (!b)
        return;
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < d; j++)
            out[i * d + j] += b[j];
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
 * each writes its own rows of att. */
typedef struct attn_job {
    const sq_model_config *c;
    cpu_state             *s;       /* the sequence's context: its caches, its scratch */
    int                    layer, n, C, P;
    const uint8_t         *mask;
    const float           *q;       /* (n, q_dim) the sequence's queries               */
    float                 *att;     /* (n, q_dim) its attention output                 */
    int                    tiles;   /* row tiles per KV head */
    const int32_t         *qpos;    /* (n) the queries' positions                      */
    int                    window;  /* 0, or keys with qpos - kpos < window only       */
} attn_job;

static void attn_tile(const attn_job *jb, int g, int tile, float *scores, float *qg, float *og)
{
    const sq_model_config *c = jb->c;
    cpu_state *s = jb->s;
    const int hd = c->head_dim, kv_dim = c->n_kv_heads * hd, q_dim = c->n_heads * hd;
    const int group = c->n_heads / c->n_kv_heads;
    const int width = jb->P + jb->n, total = jb->C + width, rows_all = jb->n * group;
    const float scale = 1.0f / sqrtf(c->query_pre_attn_scalar > 0 ? c->query_pre_attn_scalar
                                                                   : (float)hd);
    const float cap = c->attn_softcap;
    const float *K = s->key_cache + (size_t)jb->layer * s->slots * kv_dim + (size_t)g * hd;
    const float *V = s->value_cache + (size_t)jb->layer * s->slots * kv_dim + (size_t)g * hd;
    const int row0 = tile * ATTN_TILE;
    const int rows = rows_all - row0 < ATTN_TILE ? rows_all - row0 : ATTN_TILE;
    for (int r = 0; r < rows; r++) {
        int i = (row0 + r) / group, h = g * group + (row0 + r) % group;
        memcpy(qg + (size_t)r * hd, jb->q + (size_t)i * q_dim + (size_t)h * hd,
               (size_t)hd * sizeof(float));
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, total, hd, scale, qg, hd, K,
                kv_dim, 0.0f, scores, s->ld_scores);
    for (int r = 0; r < rows; r++) {
        float *row = scores + (size_t)r * s->ld_scores;
        const int i = (row0 + r) / group;
        if (cap > 0)
            for (int t = 0; t < total; t++)
                row[t] = sq_k_softcap(row[t], cap);
        if (jb->window > 0) {   /* sliding window: positions, also inside a tree */
            const int64_t qp = jb->qpos[i];
            for (int t = 0; t < total; t++)
                if (qp - (int64_t)s->slot_pos[t] >= jb->window)
                    row[t] = -INFINITY;
        }
        attn_softmax_row(row, total, jb->C, jb->mask + (size_t)i * width);
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, hd, total, 1.0f, scores,
                s->ld_scores, V, kv_dim, 0.0f, og, hd);
    for (int r = 0; r < rows; r++) {
        int i = (row0 + r) / group, h = g * group + (row0 + r) % group;
        memcpy(jb->att + (size_t)i * q_dim + (size_t)h * hd, og + (size_t)r * hd,
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
                      const uint8_t *mask, const float *q, float *att, const int32_t *qpos)
{
    const int group = c->n_heads / c->n_kv_heads, total = C + P + n;
    attn_job jb = {c, s, layer, n, C, P, mask, q, att, (n * group + ATTN_TILE - 1) / ATTN_TILE,
                   qpos, sq_model_layer_sliding(c, layer) ? c->sliding_window : 0};
    /* multiply-adds of the two products: small ones are not worth waking the pool */
    double work = 2.0 * n * c->n_heads * (double)total * c->head_dim;
    if (s->pool->n < 2 || work < ATTN_PARALLEL_MIN_WORK) {
        attn_worker(&jb, 0, 1);
        return;
    }
    sq_pool_run(s->pool, attn_worker, &jb);
}

/* The forward of b >= 1 sequences of distinct contexts of one model (sq_context_forward_batch;
 * sq_context_forward is b = 1). The R = sum n_k rows of all sequences go through every weight
 * product together (RMSNorm, the projections, SwiGLU and the LM head see R rows, so each weight
 * matrix is read once per layer for the whole batch), while attention runs per sequence on that
 * sequence's own KV cache and tree mask. New keys and values are computed into the scratch,
 * rotated, then copied to each context's pending slots. The rows' scratch is the first
 * context's, grown to the largest batch it led; a batch's logits go through its logit buffer,
 * a single sequence's straight to the caller's array. */
static int cpu_forward_batch(const sq_batch_seq *seqs, int b, sq_error *err)
{
    sq_context *ctx0 = seqs[0].ctx;
    cpu_state *s0 = ctx0->impl;
    const sq_model_config *c = &ctx0->model->config;
    const sq_weights *w = s0->w;   /* the first context's: all of one model */
    const size_t dim = (size_t)c->dim, hid = (size_t)c->hidden_dim, hd = (size_t)c->head_dim;
    const size_t half = hd / 2, q_dim = (size_t)c->n_heads * hd, kv_dim = (size_t)c->n_kv_heads * hd;
    const size_t V = (size_t)c->vocab_size;
    size_t R = 0;
    for (int k = 0; k < b; k++)
        R += (size_t)seqs[k].n;
    if (R > s0->rows_cap) {
        float *nb = malloc(R * row_floats(c) * sizeof(float));
        if (!nb)
            return sq_error_oom(err, "batched forward scratch");
        free(s0->rows_buf);
        s0->rows_buf = nb;
        s0->rows_cap = R;
    }
    float *lg = seqs[0].logits;
    if (b > 1) {
        if (R * V > s0->logit_cap) {
            float *nb = malloc(R * V * sizeof(float));
            if (!nb)
                return sq_error_oom(err, "batched forward scratch");
            free(s0->logit_buf);
            s0->logit_buf = nb;
            s0->logit_cap = R * V;
        }
        lg = s0->logit_buf;
    }
    const cpu_rows r = rows_at(s0->rows_buf, c, R);
    const int n_all = (int)R;
    const float nw = c->gemma ? 1.0f : 0.0f;      /* Gemma's norms: (1 + w) */
    const float emb_scale = sq_arch_embed_scale(c);
    const int two_ropes = c->rope_local.theta > 0;

    for (int k = 0, i0 = 0; k < b; k++) {
        cpu_state *sk = seqs[k].ctx->impl;
        const int first = seqs[k].ctx->n_committed + seqs[k].ctx->n_pending;
        for (int i = 0; i < seqs[k].n; i++, i0++) {
            float *xi = r.x + (size_t)i0 * dim;
            embed_row(xi, w->t[SQ_M_EMBED], seqs[k].tokens[i], dim);
            if (emb_scale != 1.0f)
                for (size_t j = 0; j < dim; j++)
                    xi[j] *= emb_scale;
            sk->slot_pos[first + i] = seqs[k].pos[i];
            for (int set = 0; set < 1 + two_ropes; set++) {
                const float *inv = sk->inv_freq + (size_t)set * half;
                const float af = sk->attn_factor[set];
                float *rc = (set ? r.rc2 : r.rc) + (size_t)i0 * half;
                float *rs = (set ? r.rs2 : r.rs) + (size_t)i0 * half;
                for (size_t j = 0; j < half; j++) {
                    float angle = (float)seqs[k].pos[i] * inv[j];
                    rc[j] = cosf(angle) * af;
                    rs[j] = sinf(angle) * af;
                }
            }
        }
    }
    for (int l = 0; l < c->n_layers; l++) {
        const sq_wt *lw = w->layers[l].t;
        rmsnorm(r.xb, r.x, lw[SQ_L_ATTN_NORM].p, n_all, (int)dim, c->norm_eps, nw);
        linear(s0, r.q, r.xb, lw[SQ_L_WQ], n_all, (int)dim, (int)q_dim, 0);
        linear(s0, r.kb, r.xb, lw[SQ_L_WK], n_all, (int)dim, (int)kv_dim, 0);
        linear(s0, r.vb, r.xb, lw[SQ_L_WV], n_all, (int)dim, (int)kv_dim, 0);
        add_bias(r.q, lw[SQ_L_BQ].p, R, q_dim);
        add_bias(r.kb, lw[SQ_L_BK].p, R, kv_dim);
        add_bias(r.vb, lw[SQ_L_BV].p, R, kv_dim);
        if (lw[SQ_L_Q_NORM].p) {   /* per-head RMSNorm of q and k, before RoPE */
            rmsnorm(r.q, r.q, lw[SQ_L_Q_NORM].p, (int)R * c->n_heads, (int)hd, c->norm_eps, nw);
            rmsnorm(r.kb, r.kb, lw[SQ_L_K_NORM].p, (int)R * c->n_kv_heads, (int)hd, c->norm_eps,
                    nw);
        }
        const int local = two_ropes && sq_model_layer_sliding(c, l);
        const float *rcl = local ? r.rc2 : r.rc, *rsl = local ? r.rs2 : r.rs;
        for (size_t i = 0; i < R; i++) {
            rope(r.q + i * q_dim, c->n_heads, (int)hd, rcl + i * half, rsl + i * half);
            rope(r.kb + i * kv_dim, c->n_kv_heads, (int)hd, rcl + i * half, rsl + i * half);
        }
        for (int k = 0, i0 = 0; k < b; k++) {
            sq_context *ctx = seqs[k].ctx;
            cpu_state *sk = ctx->impl;
            const int n = seqs[k].n, C = ctx->n_committed, P = ctx->n_pending;
            size_t first = (size_t)l * sk->slots + (size_t)(C + P);   /* slot of new token 0 */
            memcpy(sk->key_cache + first * kv_dim, r.kb + (size_t)i0 * kv_dim,
                   (size_t)n * kv_dim * sizeof(float));
            memcpy(sk->value_cache + first * kv_dim, r.vb + (size_t)i0 * kv_dim,
                   (size_t)n * kv_dim * sizeof(float));
            attention(c, sk, l, n, C, P, seqs[k].mask, r.q + (size_t)i0 * q_dim,
                      r.att + (size_t)i0 * q_dim, seqs[k].pos);
            i0 += n;
        }
        if (c->gemma) {   /* the attention's output is normed before the residual add */
            linear(s0, r.xb, r.att, lw[SQ_L_WO], n_all, (int)q_dim, (int)dim, 0);
            add_bias(r.xb, lw[SQ_L_BO].p, R, dim);
            rmsnorm(r.xb, r.xb, lw[SQ_L_POST_ATTN_NORM].p, n_all, (int)dim, c->norm_eps, nw);
            add_bias(r.x, r.xb, 1, R * dim);
        } else {
            linear(s0, r.x, r.att, lw[SQ_L_WO], n_all, (int)q_dim, (int)dim, 1);
            add_bias(r.x, lw[SQ_L_BO].p, R, dim);
        }

        rmsnorm(r.xb, r.x, lw[SQ_L_FFN_NORM].p, n_all, (int)dim, c->norm_eps, nw);
        linear(s0, r.hb, r.xb, lw[SQ_L_GATE], n_all, (int)dim, (int)hid, 0);
        linear(s0, r.hb2, r.xb, lw[SQ_L_UP], n_all, (int)dim, (int)hid, 0);
        add_bias(r.hb, lw[SQ_L_BGATE].p, R, hid);
        add_bias(r.hb2, lw[SQ_L_BUP].p, R, hid);
        if (c->act == SQ_ACT_GELU_TANH)
            for (size_t j = 0; j < R * hid; j++)
                r.hb[j] = sq_k_gelu_tanh_mul(r.hb[j], r.hb2[j]);
        else
            for (size_t j = 0; j < R * hid; j++)
                r.hb[j] = sq_k_silu_mul(r.hb[j], r.hb2[j]);
        if (c->gemma) {
            linear(s0, r.xb, r.hb, lw[SQ_L_DOWN], n_all, (int)hid, (int)dim, 0);
            add_bias(r.xb, lw[SQ_L_BDOWN].p, R, dim);
            rmsnorm(r.xb, r.xb, lw[SQ_L_POST_FFN_NORM].p, n_all, (int)dim, c->norm_eps, nw);
            add_bias(r.x, r.xb, 1, R * dim);
        } else {
            linear(s0, r.x, r.hb, lw[SQ_L_DOWN], n_all, (int)hid, (int)dim, 1);
            add_bias(r.x, lw[SQ_L_BDOWN].p, R, dim);
        }
    }
    rmsnorm(r.xb, r.x, w->t[SQ_M_NORM].p, n_all, (int)dim, c->norm_eps, nw);
    linear(s0, lg, r.xb, w->t[SQ_M_LM_HEAD], n_all, (int)dim, (int)V, 0);
    if (c->final_softcap > 0)
        for (size_t j = 0; j < R * V; j++)
            lg[j] = sq_k_softcap(lg[j], c->final_softcap);
    if (b > 1)
        for (int k = 0, i0 = 0; k < b; k++) {
            memcpy(seqs[k].logits, lg + (size_t)i0 * V, (size_t)seqs[k].n * V * sizeof(float));
            i0 += seqs[k].n;
        }
    return SQ_OK;
}

/* A single sequence is a batch of one. */
static int cpu_forward(sq_context *ctx, const int32_t *tokens, const int32_t *pos,
                       const uint8_t *mask, int n, float *logits, sq_error *err)
{
    const sq_batch_seq one = {ctx, tokens, pos, mask, n, logits};
    return cpu_forward_batch(&one, 1, err);
}

/* Gathers pending slots keep[] to committed slots C .. C+nkeep-1, through the key rows of the
 * context's scratch (rows_cap >= max_pending >= nkeep rows of kv_dim), so any order of keep is
 * fine. */
static int cpu_commit(sq_context *ctx, const int32_t *keep, int nkeep, sq_error *err)
{
    const sq_model_config *c = &ctx->model->config;
    cpu_state *s = ctx->impl;
    const size_t kv_dim = (size_t)c->n_kv_heads * c->head_dim;
    const size_t row = kv_dim * sizeof(float);
    const int C = ctx->n_committed;
    float *tmp = rows_at(s->rows_buf, c, s->rows_cap).kb;
    for (int l = 0; l < c->n_layers; l++) {
        float *caches[2] = {s->key_cache, s->value_cache};
        for (int which = 0; which < 2; which++) {
            float *base = caches[which] + (size_t)l * s->slots * kv_dim;
            for (int k = 0; k < nkeep; k++)
                memcpy(tmp + k * kv_dim, base + (size_t)(C + keep[k]) * kv_dim, row);
            memcpy(base + (size_t)C * kv_dim, tmp, (size_t)nkeep * row);
        }
    }
    int32_t *ptmp = (int32_t *)tmp;   /* positions: the same gather (nkeep <= kv_dim rows) */
    for (int k = 0; k < nkeep; k++)
        ptmp[k] = s->slot_pos[C + keep[k]];
    memcpy(s->slot_pos + C, ptmp, (size_t)nkeep * sizeof(int32_t));
    (void)err;
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
