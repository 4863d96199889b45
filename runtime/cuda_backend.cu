/* The CUDA backend: the Llama forward of runtime/cpu.c on one GPU, with F16 or BF16 weights.
 *
 * Weights are converted from the model's float32 views (runtime/backend.h) to 16 bits on the
 * host at context creation and uploaded. GEMMs are cublasGemmEx with 16-bit inputs, float32
 * output and CUBLAS_COMPUTE_32F; the residual stream, RMSNorm, RoPE, softmax and SwiGLU are
 * float32; the KV cache holds keys and values in the weights' 16-bit type (attention reads it
 * in tiles shared by many queries; see the tree attention below and docs/cuda.md). Logits come
 * back through a pinned buffer. The per-element arithmetic of every kernel is in runtime/kernels.h, shared
 * with the CPU backend and tested on the CPU; this file holds the launches and the memory.
 *
 * Layout. The weights of one layer are one block, laid out from the architecture's table
 * (runtime/arch.h): its vectors (the norms) in float32 first, then its matrices in 16 bits, gate
 * and up adjacent so that one GEMM computes both; the layer body finds a tensor by its slot. On-device mode
 * keeps all blocks on the device. Offload mode keeps them in pinned host memory and streams
 * layer l+1 into one of two device block buffers on a copy stream while layer l computes on the
 * compute stream (events order "copied" before compute and "consumed" before the next copy
 * into the same buffer). The embedding, the final norm and the LM head stay on the device.
 *
 * The KV cache mirrors the CPU's layout: per layer, max_context committed slots then
 * max_pending pending ones; keys are stored after RoPE, both in 16 bits. Commit gathers the kept pending slots into a
 * scratch buffer and copies them after the committed ones. */
#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/cuda_check.h"

extern "C" {
#include "runtime/backend.h"
#include "runtime/rope.h"
}
#include "runtime/kernels.h"

#define HEAD_DIM_MAX 256
#define LOGIT_CHUNK ((size_t)1 << 20)   /* floats per pinned logits copy (4 MB)           */
#define LOGIT_EVENTS 8
#define BLOCK_ALIGN 256

/* The weights of one model in one 16-bit type and one mode, on one device: shared by every
 * context of that model, dtype and mode (a batch of B sequences is B contexts of one model, and
 * B copies of a 7B model's weights would not fit). Reference-counted in a process-wide list
 * (weights_find, weights_make, weights_release below); the first context makes them, the last
 * frees them. Contexts are freed before their model (the list is keyed by the model). */
typedef struct cuda_weights {
    const sq_model       *model;
    int                   bf16, offload, refs;
    struct cuda_weights  *next;
    uint8_t              *d_blocks;   // on device: (n_layers, block_bytes); offload: NULL
    uint8_t              *h_blocks;   // offload: (n_layers, block_bytes) pinned host
    void                 *d_model[SQ_M_COUNT]; /* the model's own tensors (runtime/arch.h):
                                             matrices 16-bit, vectors float32; a tied one
                                             is the pointer it is tied to               */
} cuda_weights;

/* One sequence of a forward as the attention and KV-store kernels see it (uploaded per forward,
 * one per sequence): its context's cache, the slots the new tokens go to, its rows of the
 * forward's activations and its mask. A single-sequence forward is a batch of one. */
typedef struct at_seq {
    uint16_t *kc, *vc;        /* layer 0 of the sequence's 16-bit key and value cache      */
    size_t    layer_stride;   /* elements per layer (slots * kv_dim)                       */
    size_t    mask_off;       /* its (n, width) mask in the forward's mask buffer          */
    int       C, width, n;    /* committed slots, pending + new, new tokens                */
    int       row0, tile0;    /* its first row of the forward, its first query tile        */
    int       chunks_per_split;
    const int32_t *kpos;      /* (slots) each slot's position (sliding windows), or NULL   */
} at_seq;

/* The activations of one forward, for up to `rows` token rows (all sequences of a batch
 * together); a context's own are sized for max_pending rows at creation and grow when a batched
 * forward needs more (act_reserve). */
typedef struct cuda_act {
    size_t    rows, mask_bytes, part_rows, seqs, tiles;   /* capacities                       */
    float    *x;              // (rows, dim)        residual stream
    uint16_t *xb;             // (rows, dim)        normed, 16-bit GEMM input
    float    *q;              // (rows, q_dim)
    uint16_t *att;            // (rows, q_dim)      attention out, 16-bit
    float    *gu;             // (rows, 2*hidden)   gate | up
    uint16_t *hb;             // (rows, hidden)     silu(gate)*up, 16-bit
    float    *logits;         // (rows, vocab)
    float    *kf;             // (rows, kv_dim)     new keys, float32
    float    *vf;             // (rows, kv_dim)     new values, float32
    float    *part;           // (part_rows, hd + 2) attention range states
    float    *h_logits;       // (rows, vocab)      pinned host
    int32_t  *d_tokens;       // (rows)
    int32_t  *d_pos;          // (rows)
    int32_t  *d_row_seq;      // (rows)             the sequence of each row
    uint8_t  *d_mask;         // (mask_bytes)       every sequence's mask, one after another
    at_seq   *d_seqs;         // (seqs)
    int32_t  *d_tile_seq;     // (tiles)            the sequence of each query tile
    uint8_t  *h_meta;         // host staging of seqs, tile_seq and row_seq
    size_t    h_meta_bytes;
} cuda_act;

typedef struct cuda_state {
    int             device;
    char            name[256];
    int             bf16;           /* weights in bfloat16, else float16                  */
    int             offload;
    int             slots;          /* max_context + max_pending                          */
    cudaStream_t    stream;         /* compute                                            */
    cudaStream_t    copy_stream;    /* offload: layer uploads                             */
    cudaEvent_t     copied[2], consumed[2];
    int             events;         /* events created                                     */
    cublasHandle_t  blas;
    size_t          off[SQ_L_COUNT]; /* byte offsets of a layer's tensors in its block,
                                       by slot (runtime/arch.h)                           */
    size_t          block_bytes;    /* one layer block, padded                            */
    cuda_weights   *w;              /* shared weights (NULL until acquired)               */
    uint8_t        *d_blocks;       // offload: (2, block_bytes) device layer buffers
    float          *d_inv_freq;     // (2, head_dim/2) RoPE of full layers, then sliding
    float           rope_af[2];     /* RoPE's attention factors (runtime/rope.h)           */
    int32_t        *d_slot_pos;     // (slots) positions of the slots (sliding windows)
    int32_t        *h_slot_pos;     // (slots) their host copy
    uint16_t       *k_cache;        // (layer, slots, kv_dim)     16-bit, keys after RoPE
    uint16_t       *v_cache;        // (layer, slots, kv_dim)
    int             sms;            // streaming multiprocessors
    cudaEvent_t     lev[LOGIT_EVENTS];
    int             levents;
    cuda_act        a;              /* activations (of every batch this context leads)   */
    uint16_t       *gather;         // (max_pending, kv_dim)     commit scratch
    int32_t        *d_keep;         // (max_pending)
} cuda_state;

/* ---- device helpers --------------------------------------------------------------------------- */

template <int BF> __device__ __forceinline__ float load16(uint16_t h)
{
    return BF ? sq_bf16_to_f32(h) : sq_f16_to_f32(h);
}

template <int BF> __device__ __forceinline__ uint16_t store16(float f)
{
    return BF ? sq_f32_to_bf16(f) : sq_f32_to_f16(f);
}

__device__ __forceinline__ float warp_sum(float v)
{
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* The sum of squares of v[0 .. dim), over the whole block (every thread gets it). */
__device__ float block_sumsq(const float *v, int dim)
{
    __shared__ float part[32];
    float ss = 0.0f;
    for (int k = threadIdx.x; k < dim; k += blockDim.x)
        ss += v[k] * v[k];
    ss = warp_sum(ss);
    if ((threadIdx.x & 31) == 0)
        part[threadIdx.x >> 5] = ss;
    __syncthreads();
    if (threadIdx.x < 32) {
        float w = threadIdx.x < (blockDim.x >> 5) ? part[threadIdx.x] : 0.0f;
        w = warp_sum(w);
        if (threadIdx.x == 0)
            part[0] = w;
    }
    __syncthreads();
    return part[0];
}

/* ---- kernels ------------------------------------------------------------------------------------ */

/* y[i][off + k] += b[k] for rows i < n of stride ld (a projection's bias). Grid-stride. */
__global__ void k_add_bias(float *y, size_t ld, size_t off, const float *b, int n, int d)
{
    const size_t total = (size_t)n * d;
    for (size_t j = (size_t)blockIdx.x * blockDim.x + threadIdx.x; j < total;
         j += (size_t)gridDim.x * blockDim.x)
        y[(j / d) * ld + off + j % d] += b[j % d];
}

/* In place: each row of hd floats (one head of q or k) RMS-normed and scaled by w (Qwen3's
 * q_norm / k_norm, before RoPE). grid (rows), block 32 (one warp). */
__global__ void k_head_norm(float *v, const float *w, int hd, float eps, float woff)
{
    float *vi = v + (size_t)blockIdx.x * hd;
    float ss = 0.0f;
    for (int k = threadIdx.x; k < hd; k += 32)
        ss += vi[k] * vi[k];
    ss = warp_sum(ss);
    const float scale = sq_k_rms_scale(ss, hd, eps);
    for (int k = threadIdx.x; k < hd; k += 32)
        vi[k] = sq_k_rmsnorm(vi[k], scale, woff + w[k]);
}

/* Gemma's post norms: x[i] += rmsnorm(t[i]) * (1 + w), float32. grid (n), block 256. */
__global__ void k_norm_add(float *x, const float *t, const float *w, int dim, float eps,
                           float woff)
{
    const float *ti = t + (size_t)blockIdx.x * dim;
    const float scale = sq_k_rms_scale(block_sumsq(ti, dim), dim, eps);
    float *xi = x + (size_t)blockIdx.x * dim;
    for (int k = threadIdx.x; k < dim; k += blockDim.x)
        xi[k] += sq_k_rmsnorm(ti[k], scale, woff + w[k]);
}

/* v[i] = cap * tanh(v[i] / cap) (Gemma-2's final logits). Grid-stride. */
__global__ void k_softcap(float *v, size_t n, float cap)
{
    for (size_t j = (size_t)blockIdx.x * blockDim.x + threadIdx.x; j < n;
         j += (size_t)gridDim.x * blockDim.x)
        v[j] = sq_k_softcap(v[j], cap);
}

/* x[i] = embed[tokens[i]] in float32. grid (n), block 256. */
template <int BF>
__global__ void k_embed(float *x, const uint16_t *embed, const int32_t *tokens, int dim,
                        float scale)
{
    const uint16_t *row = embed + (size_t)tokens[blockIdx.x] * dim;
    float *o = x + (size_t)blockIdx.x * dim;
    for (int k = threadIdx.x; k < dim; k += blockDim.x)
        o[k] = load16<BF>(row[k]) * scale;
}

/* out[i] = rmsnorm(x[i]) * w, to 16 bits. grid (n), block 256. */
template <int BF>
__global__ void k_rmsnorm(uint16_t *out, const float *x, const float *w, int dim, float eps,
                          float woff)
{
    const float *xi = x + (size_t)blockIdx.x * dim;
    const float scale = sq_k_rms_scale(block_sumsq(xi, dim), dim, eps);
    uint16_t *oi = out + (size_t)blockIdx.x * dim;
    for (int k = threadIdx.x; k < dim; k += blockDim.x)
        oi[k] = store16<BF>(sq_k_rmsnorm(xi[k], scale, woff + w[k]));
}

/* Rotates rows v[i] (stride `stride` floats, n_heads heads) at positions pos[i].
 * grid (n, n_heads), block half = head_dim/2 (<= 128). */
__global__ void k_rope(float *v, size_t stride, const int32_t *pos, const float *inv_freq,
                       int head_dim, float af)
{
    const int npair = head_dim / 2, k = threadIdx.x;
    if (k >= npair)
        return;
    float *a = v + (size_t)blockIdx.x * stride + (size_t)blockIdx.y * head_dim;
    float angle = (float)pos[blockIdx.x] * inv_freq[k];
    sq_k_rope_rotate(&a[k], &a[k + npair], cosf(angle) * af, sinf(angle) * af);
}

/* ---- GEMV for a few rows ------------------------------------------------------------------------
 * out (N, d_out) f32 = in (N, d_in) 16-bit @ W^T + beta * out, for N <= GEMV_MAX_N tokens (decode
 * and small trees), where cuBLAS's general kernels stay far below the memory bandwidth (docs/
 * cuda.md, first H200 run). One warp per output row streams the weight row in 16-byte loads
 * (8 values) and dots it with the N input rows (small: they stay in L1/L2); float32
 * accumulation, then a warp reduction. Needs d_in % 8 == 0 (16-byte aligned rows); grid
 * ceil(d_out / 8) blocks of 256 threads. */
#define GEMV_MAX_N 8

template <int BF> __device__ __forceinline__ void unpack8(uint4 v, float *f)
{
    const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int k = 0; k < 4; k++) {
        f[2 * k] = load16<BF>((uint16_t)(w[k] & 0xffffu));
        f[2 * k + 1] = load16<BF>((uint16_t)(w[k] >> 16));
    }
}

template <int BF, int N>
__global__ void __launch_bounds__(256) k_gemv(float *out, const uint16_t *in, const uint16_t *w,
                                              int d_in, int d_out, float beta)
{
    const int row = (int)((blockIdx.x * (size_t)blockDim.x + threadIdx.x) >> 5);
    const int lane = threadIdx.x & 31;
    if (row >= d_out)   /* the whole warp */
        return;
    const uint4 *wr = (const uint4 *)(w + (size_t)row * d_in);
    const int chunks = d_in / 8;
    float acc[N];
#pragma unroll
    for (int i = 0; i < N; i++)
        acc[i] = 0.0f;
#pragma unroll 2
    for (int c = lane; c < chunks; c += 32) {
        float wf[8];
        unpack8<BF>(wr[c], wf);
#pragma unroll
        for (int i = 0; i < N; i++) {
            float xf[8];
            unpack8<BF>(((const uint4 *)(in + (size_t)i * d_in))[c], xf);
#pragma unroll
            for (int k = 0; k < 8; k++)
                acc[i] += wf[k] * xf[k];
        }
    }
#pragma unroll
    for (int i = 0; i < N; i++) {
        float v = warp_sum(acc[i]);
        if (lane == 0) {
            float *o = out + (size_t)i * d_out + row;
            *o = beta != 0.0f ? v + beta * *o : v;   /* beta == 0: out is not read */
        }
    }
}

/* ---- tree attention (docs/cuda.md, "Attention for tree verification") -------------------------
 *
 * The KV cache holds 16-bit keys (after RoPE) and values. Attention runs in two kernels:
 *
 * k_attn_partial: grid (n_kv_heads, query tiles, context splits), AT_THREADS threads. The query
 * rows of one KV head are the (token, query head) pairs of its GQA group, n * group rows, cut
 * into tiles of TQ rows; each warp owns TQ / 8 rows. The context (C committed slots, then the
 * `width` pending ones) is cut into chunks of AT_TK slots and the chunks into `splits` ranges
 * (flash-decoding). A block walks its range chunk by chunk: the block loads the chunk's keys and
 * values into shared memory once, and every row of the tile uses them (so a verify of n tokens
 * reads the cache n * group / TQ times instead of n * group times). Per row, lane j scores key
 * j of the chunk, the warp updates the row's online softmax state (running max m, sum l) and
 * each lane rescales and accumulates its head_dim / 32 output elements. Committed slots count
 * for every row; pending slot C + j only where mask[token][j] != 0. Each block writes, per row,
 * (m, l, unnormalised accumulator) for its range.
 *
 * Several sequences (a batched forward, sq_context_forward_batch) share one launch: each has its
 * own query tiles (numbered one sequence after another; tile_seq maps a tile to its sequence),
 * its own KV cache, context length, mask and rows, all in its at_seq. Every sequence is cut
 * into the same number of ranges, each of its own chunks_per_split chunks (a range past the end
 * of a shorter context is empty: m = -inf, l = 0, which the merge ignores). A forward of one
 * sequence is a batch of one.
 *
 * k_attn_merge: grid (rows, n_heads), head_dim threads: merges the ranges' states with
 * sq_k_online_merge and writes out = acc / l in 16 bits. */
#define AT_TK 32            /* slots per chunk                                   */
#define AT_THREADS 256      /* 8 warps                                           */
#define AT_MAX_SPLITS 64

template <int HDMAX> struct at_shape {
    /* rows per block; per warp ROWS rows share every key and value they read from shared
     * memory. WPAD: 32-bit words per cached row, odd, so that lane j's row j hits bank j + w. */
    enum { TQ = HDMAX <= 128 ? 32 : 8, ROWS = TQ / 8, PER = HDMAX / 32, WPAD = HDMAX / 2 + 1 };
};

template <int BF, int HDMAX>
__global__ void __launch_bounds__(AT_THREADS, 2) k_attn_partial(float *part, const float *q_all,
                               const at_seq *seqs, const int32_t *tile_seq,
                               const uint8_t *mask_all, int layer, int tile_base, int n_heads,
                               int n_kv_heads, int hd, int splits, const int32_t *qpos_all,
                               float scale, float cap, int window)
{
    typedef at_shape<HDMAX> S;
    __shared__ uint32_t sk[AT_TK][S::WPAD];    /* a chunk's keys: pairs of 16-bit values  */
    __shared__ uint32_t sv[AT_TK][S::WPAD];    /* and values                              */
    __shared__ float sq[S::TQ][HDMAX + 1];     /* the tile's queries, pre-scaled          */
    __shared__ float sp[AT_THREADS / 32][S::ROWS][AT_TK];   /* each warp's probabilities  */
    /* this block's sequence: its cache, mask, rows and context */
    const int gtile = tile_base + (int)blockIdx.y;
    const at_seq sd = seqs[tile_seq[gtile]];
    const uint16_t *kc = sd.kc + (size_t)layer * sd.layer_stride;
    const uint16_t *vc = sd.vc + (size_t)layer * sd.layer_stride;
    const uint8_t *mask = mask_all + sd.mask_off;
    const float *q = q_all + (size_t)sd.row0 * n_heads * hd;
    const int C = sd.C, width = sd.width, n = sd.n, chunks_per_split = sd.chunks_per_split;
    const int kvh = blockIdx.x, tile = gtile - sd.tile0, split = blockIdx.z;
    const int group = n_heads / n_kv_heads, rows = n * group;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int kv_dim = n_kv_heads * hd, total = C + width, words = hd / 2;

    for (int x = threadIdx.x; x < S::TQ * hd; x += AT_THREADS) {
        int r = x / hd, e = x % hd, R = tile * S::TQ + r;
        float v = 0.0f;
        if (R < rows) {
            int i = R / group, h = kvh * group + R % group;
            v = q[(size_t)i * n_heads * hd + (size_t)h * hd + e] * scale;
        }
        sq[r][e] = v;
    }
    float m[S::ROWS], l[S::ROWS], acc[S::ROWS][S::PER];
    int tok[S::ROWS], qp[S::ROWS];
#pragma unroll
    for (int r = 0; r < S::ROWS; r++) {
        m[r] = -INFINITY;
        l[r] = 0.0f;
        int R = tile * S::TQ + warp * S::ROWS + r;
        tok[r] = R < rows ? R / group : -1;
        qp[r] = tok[r] >= 0 ? qpos_all[sd.row0 + tok[r]] : 0;
#pragma unroll
        for (int k = 0; k < S::PER; k++)
            acc[r][k] = 0.0f;
    }
    const bool live = tok[0] >= 0;   /* warp-uniform: the warp has a row to compute */
    const int c0 = split * chunks_per_split;
    const int c1 = min(c0 + chunks_per_split, (total + AT_TK - 1) / AT_TK);
    const size_t head_off = (size_t)kvh * hd;
    for (int ch = c0; ch < c1; ch++) {
        const int t0 = ch * AT_TK;
        __syncthreads();   /* the previous chunk is consumed (and sq is written) */
        for (int x = threadIdx.x; x < AT_TK * words; x += AT_THREADS) {
            int j = x / words, w = x % words, t = t0 + j;
            uint32_t kw = 0, vw = 0;
            if (t < total) {
                kw = ((const uint32_t *)(kc + (size_t)t * kv_dim + head_off))[w];
                vw = ((const uint32_t *)(vc + (size_t)t * kv_dim + head_off))[w];
            }
            sk[j][w] = kw;
            sv[j][w] = vw;
        }
        __syncthreads();
        if (!live)
            continue;
        /* scores: lane j against key t0 + j, for every row of the warp */
        const int t = t0 + lane, rr = warp * S::ROWS;
        float sc[S::ROWS];
#pragma unroll
        for (int r = 0; r < S::ROWS; r++)
            sc[r] = 0.0f;
#pragma unroll 4
        for (int w = 0; w < words; w++) {
            const uint32_t kw = sk[lane][w];
            const float k0 = load16<BF>((uint16_t)(kw & 0xffffu));
            const float k1 = load16<BF>((uint16_t)(kw >> 16));
#pragma unroll
            for (int r = 0; r < S::ROWS; r++)
                sc[r] += sq[rr + r][2 * w] * k0 + sq[rr + r][2 * w + 1] * k1;
        }
        float alpha[S::ROWS];
#pragma unroll
        for (int r = 0; r < S::ROWS; r++) {
            /* a sliding window counts positions (docs/runtime.md, "Model families") */
            const bool vis = tok[r] >= 0 && t < total &&
                             (t < C || mask[(size_t)tok[r] * width + (t - C)]) &&
                             (window == 0 || qp[r] - sd.kpos[t] < window);
            const float s1 = vis ? (cap > 0.0f ? sq_k_softcap(sc[r], cap) : sc[r]) : -INFINITY;
            float mx = s1;
            for (int o = 16; o > 0; o >>= 1)
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
            const float mn = fmaxf(m[r], mx);
            alpha[r] = m[r] == -INFINITY ? (mn == -INFINITY ? 1.0f : 0.0f) : expf(m[r] - mn);
            const float pj = mn == -INFINITY ? 0.0f : sq_k_attn_exp(s1, mn);
            l[r] = l[r] * alpha[r] + warp_sum(pj);
            m[r] = mn;
            sp[warp][r][lane] = pj;
        }
        __syncwarp();
        /* values: lane e of every row, each value read once for all the warp's rows */
#pragma unroll
        for (int k = 0; k < S::PER; k++) {
            const int e = lane + 32 * k;
            if (e >= hd)
                break;
#pragma unroll
            for (int r = 0; r < S::ROWS; r++)
                acc[r][k] *= alpha[r];
#pragma unroll 4
            for (int j = 0; j < AT_TK; j++) {
                const uint32_t vw = sv[j][e >> 1];
                const float v = load16<BF>((uint16_t)(e & 1 ? vw >> 16 : vw & 0xffffu));
#pragma unroll
                for (int r = 0; r < S::ROWS; r++)
                    acc[r][k] += sp[warp][r][j] * v;
            }
        }
        __syncwarp();
    }
    /* this range's state of each row */
#pragma unroll
    for (int r = 0; r < S::ROWS; r++) {
        if (tok[r] < 0)
            continue;
        int R = tile * S::TQ + warp * S::ROWS + r;
        int h = kvh * group + R % group;
        float *o = part + (((size_t)(sd.row0 + tok[r]) * n_heads + h) * splits + split) *
                              (size_t)(hd + 2);
        if (lane == 0) {
            o[0] = m[r];
            o[1] = l[r];
        }
#pragma unroll
        for (int k = 0; k < S::PER; k++) {
            int e = lane + 32 * k;
            if (e < hd)
                o[2 + e] = acc[r][k];
        }
    }
}

/* out[i][h] = merge over the splits of part[i][h][*]; grid (n, n_heads), block hd threads. */
template <int BF>
__global__ void k_attn_merge(uint16_t *out, const float *part, int n_heads, int hd, int splits)
{
    const int i = blockIdx.x, h = blockIdx.y, e = threadIdx.x;
    const float *p = part + ((size_t)i * n_heads + h) * splits * (size_t)(hd + 2);
    sq_k_online tot = sq_k_online_init();
    float res = 0.0f;
    for (int s = 0; s < splits; s++, p += hd + 2) {
        sq_k_online o;
        o.m = p[0];
        o.l = p[1];
        float alpha, beta;
        sq_k_online_merge(&tot, o, &alpha, &beta);
        res = alpha * res + (beta != 0.0f ? beta * p[2 + e] : 0.0f);
    }
    out[((size_t)i * n_heads + h) * hd + e] = store16<BF>(tot.l > 0.0f ? res / tot.l : 0.0f);
}

/* New keys and values into the 16-bit cache: key pairs (k, k + hd/2) rotated at pos[row]
 * (RoPE, rotate_half), values converted. kf_all/vf_all (rows, kv_dim) float32 GEMM outputs of
 * the whole forward; row `row` of sequence sd goes to slot C + P + (row - row0) of that
 * sequence's cache in layer `layer` (P = width - n: its pending slots before the forward).
 * grid (rows, n_kv_heads), block hd/2. */
template <int BF>
__global__ void k_kv_store(const at_seq *seqs, const int32_t *row_seq, int layer,
                           const float *kf_all, const float *vf_all, const int32_t *pos,
                           const float *inv_freq, int kv_dim, int head_dim, float af)
{
    const int npair = head_dim / 2, k = threadIdx.x;
    if (k >= npair)
        return;
    const int row = (int)blockIdx.x;
    const at_seq *sd = &seqs[row_seq[row]];
    const size_t slot = (size_t)(sd->C + sd->width - sd->n + (row - sd->row0));
    const size_t at = (size_t)layer * sd->layer_stride + slot * (size_t)kv_dim;
    uint16_t *kdst = sd->kc + at, *vdst = sd->vc + at;
    const float *kf = kf_all + (size_t)row * kv_dim, *vf = vf_all + (size_t)row * kv_dim;
    const size_t o = (size_t)blockIdx.y * head_dim;
    float a = kf[o + k], b = kf[o + k + npair];
    float angle = (float)pos[row] * inv_freq[k];
    sq_k_rope_rotate(&a, &b, cosf(angle) * af, sinf(angle) * af);
    kdst[o + k] = store16<BF>(a);
    kdst[o + k + npair] = store16<BF>(b);
    vdst[o + k] = store16<BF>(vf[o + k]);
    vdst[o + k + npair] = store16<BF>(vf[o + k + npair]);
}

/* Random filler weights made on the device (sq_model_new_random_device): dst[i] = offset +
 * scale * (2u - 1) with u = sq_k_uniform(seed, stream, i), in the context's 16-bit type.
 * Grid-stride over n elements. */
template <int BF>
__global__ void k_fill_random16(uint16_t *dst, size_t n, unsigned long long seed,
                                unsigned long long stream, float scale)
{
    const size_t step = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step)
        dst[i] = store16<BF>(scale * (float)(2.0 * sq_k_uniform(seed, stream, i) - 1.0));
}

/* dst[i] = v (the float32 norm weights of a random model). */
__global__ void k_fill_f32(float *dst, size_t n, float v)
{
    const size_t step = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step)
        dst[i] = v;
}

/* hb[i][k] = silu(gu[i][k]) * gu[i][hidden + k], to 16 bits. */
template <int BF>
__global__ void k_swiglu(uint16_t *hb, const float *gu, int n, int hidden, int gelu)
{
    size_t total = (size_t)n * hidden;
    for (size_t t = blockIdx.x * (size_t)blockDim.x + threadIdx.x; t < total;
         t += (size_t)gridDim.x * blockDim.x) {
        size_t i = t / hidden, k = t % hidden;
        const float *r = gu + i * 2 * hidden;
        hb[t] = store16<BF>(gelu ? sq_k_gelu_tanh_mul(r[k], r[hidden + k])
                                 : sq_k_silu_mul(r[k], r[hidden + k]));
    }
}

/* dst[k] = base[(C + keep[k]) * kv_dim ...] for k < nkeep (16-bit cache rows). grid (nkeep),
 * block 256. */
__global__ void k_gather(uint16_t *dst, const uint16_t *base, const int32_t *keep, int C,
                         int kv_dim)
{
    const uint16_t *src = base + (size_t)(C + keep[blockIdx.x]) * kv_dim;
    uint16_t *d = dst + (size_t)blockIdx.x * kv_dim;
    for (int e = threadIdx.x; e < kv_dim; e += blockDim.x)
        d[e] = src[e];
}

/* ---- host side ---------------------------------------------------------------------------------- */

static size_t align_up(size_t x)
{
    return (x + BLOCK_ALIGN - 1) / BLOCK_ALIGN * BLOCK_ALIGN;
}

typedef struct conv_job {
    sq_wt     src;    /* the model's tensor (float32 or 16-bit), from element 0 of this job */
    uint16_t *dst;
    size_t    n;
    int       bf16;
} conv_job;

static void *conv_run(void *arg)
{
    const conv_job *j = (const conv_job *)arg;
    const int want = j->bf16 ? SQ_DTYPE_BF16 : SQ_DTYPE_F16;
    const uint16_t *h = (const uint16_t *)j->src.p;
    const float *f = (const float *)j->src.p;
    if (j->src.dtype == want) {
        memcpy(j->dst, h, j->n * sizeof *h);
        return NULL;
    }
    for (size_t i = 0; i < j->n; i++) {
        float v = j->src.dtype == SQ_DTYPE_F32    ? f[i]
                  : j->src.dtype == SQ_DTYPE_BF16 ? sq_bf16_to_f32(h[i])
                                                  : sq_f16_to_f32(h[i]);
        j->dst[i] = j->bf16 ? sq_f32_to_bf16(v) : sq_f32_to_f16(v);
    }
    return NULL;
}

/* Element a of a typed tensor. */
static sq_wt wt_at(sq_wt t, size_t a)
{
    const size_t es = t.dtype == SQ_DTYPE_F32 ? sizeof(float) : sizeof(uint16_t);
    t.p = (const char *)t.p + a * es;
    return t;
}

/* Converts n weights (float32 or 16-bit: the model's, runtime/backend.h) to 16 bits with up to
 * 16 threads (big models have billions of them). */
static void convert16(uint16_t *dst, sq_wt src, size_t n, int bf16)
{
#define MAXT 16
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    long want = ncpu < 1 ? 1 : ncpu > MAXT ? MAXT : ncpu;
    int nt = n < ((size_t)1 << 20) ? 1 : (int)want;
    conv_job jobs[MAXT];
    pthread_t tids[MAXT];
    int started[MAXT] = {0};
    size_t chunk = (n + nt - 1) / nt;
    for (int t = 0; t < nt; t++) {
        size_t a = (size_t)t * chunk, b = a + chunk < n ? a + chunk : n;
        jobs[t].src = wt_at(src, a < n ? a : n);
        jobs[t].dst = dst + (a < n ? a : n);
        jobs[t].n = a < n ? b - a : 0;
        jobs[t].bf16 = bf16;
    }
    for (int t = 1; t < nt; t++)
        started[t] = pthread_create(&tids[t], NULL, conv_run, &jobs[t]) == 0;
    conv_run(&jobs[0]);
    for (int t = 1; t < nt; t++) {
        if (started[t])
            pthread_join(tids[t], NULL);
        else
            conv_run(&jobs[t]);
    }
#undef MAXT
}

/* Fills one layer block in host memory `blk` (block_bytes) from the layer's typed views, tensor
 * by tensor as the architecture's table lists them: vectors as float32, matrices in 16 bits.
 * An optional tensor the checkpoint lacks is zeros. */
static void fill_block(const cuda_state *s, const sq_model_config *c, const sq_layer_weights *lw,
                       uint8_t *blk)
{
    sq_arch_item it[SQ_L_COUNT];
    const int n = sq_arch_items(c, 0, it, SQ_L_COUNT);
    for (int k = 0; k < n; k++) {
        const sq_wt src = lw->t[it[k].t->slot];
        uint8_t *dst = blk + s->off[it[k].t->slot];
        const size_t numel = (size_t)it[k].numel;
        if (!src.p)
            memset(dst, 0, numel * (it[k].ndim == 1 ? sizeof(float) : sizeof(uint16_t)));
        else if (it[k].ndim == 1)   /* vectors are float32 (runtime/backend.h) */
            memcpy(dst, src.p, numel * sizeof(float));
        else
            convert16((uint16_t *)dst, src, numel, s->bf16);
    }
}

static int upload16(uint16_t **dst, sq_wt src, size_t n, int bf16, uint16_t *staging,
                    size_t staging_elems, sq_error *err)
{
    CUDA_CHECK(cudaMalloc((void **)dst, n * sizeof(uint16_t)));
    for (size_t a = 0; a < n; a += staging_elems) {
        size_t m = n - a < staging_elems ? n - a : staging_elems;
        convert16(staging, wt_at(src, a), m, bf16);
        CUDA_CHECK(cudaMemcpy(*dst + a, staging, m * sizeof(uint16_t), cudaMemcpyHostToDevice));
    }
    return SQ_OK;
}

/* Uploads the model's weights (float32 or 16-bit) into `wt`, in the context's 16 bits on the host: layer blocks
 * (to the device, or to the pinned host blocks in offload mode), the embedding, the LM head and
 * the final norm. */
static int upload_weights(cuda_state *s, cuda_weights *wt, const sq_model_config *c,
                          const sq_weights *w, sq_error *err)
{
    const size_t L = (size_t)c->n_layers;
    if (s->offload) {
        for (size_t l = 0; l < L; l++)
            fill_block(s, c, &w->layers[l], wt->h_blocks + l * s->block_bytes);
    } else {
        uint8_t *staging = NULL;
        CUDA_CHECK(cudaMallocHost((void **)&staging, s->block_bytes));
        for (size_t l = 0; l < L; l++) {
            fill_block(s, c, &w->layers[l], staging);
            cudaError_t e = cudaMemcpy(wt->d_blocks + l * s->block_bytes, staging,
                                       s->block_bytes, cudaMemcpyHostToDevice);
            if (e != cudaSuccess) {
                cudaFreeHost(staging);
                CUDA_CHECK(e);
            }
        }
        CUDA_CHECK(cudaFreeHost(staging));
    }
    size_t st_elems = (size_t)1 << 24;
    uint16_t *st16 = (uint16_t *)malloc(st_elems * sizeof *st16);
    if (!st16)
        return sq_error_oom(err, "the CUDA upload buffer");
    sq_arch_item it[SQ_M_COUNT];
    const int n = sq_arch_items(c, -1, it, SQ_M_COUNT);
    int rc = SQ_OK;
    for (int k = 0; k < n && !rc; k++) {
        const int slot = it[k].t->slot;
        const size_t numel = (size_t)it[k].numel;
        const sq_wt src = w->t[slot];
        if (it[k].tied || !src.p)   /* tied: below; an absent optional one stays NULL */
            continue;
        if (it[k].ndim == 2) {
            rc = upload16((uint16_t **)&wt->d_model[slot], src, numel, s->bf16, st16, st_elems,
                          err);
            continue;
        }
        cudaError_t e = cudaMalloc(&wt->d_model[slot], numel * sizeof(float));
        if (e == cudaSuccess)
            e = cudaMemcpy(wt->d_model[slot], src.p, numel * sizeof(float), cudaMemcpyHostToDevice);
        if (e != cudaSuccess)
            rc = sq_error_set(err, SQ_ESOFTWARE, "CUDA: %s:%d: upload of %s: %s", __FILE__,
                              __LINE__, it[k].name, cudaGetErrorString(e));
    }
    free(st16);
    for (int k = 0; k < n && !rc; k++)
        if (it[k].tied)
            wt->d_model[it[k].t->slot] = wt->d_model[it[k].t->tied_to];
    return rc;
}

static int fill16(cuda_state *s, uint16_t *dst, size_t n, uint64_t seed, uint64_t stream,
                  float scale, sq_error *err)
{
    size_t blocks = (n + 255) / 256;
    if (blocks > 8192)
        blocks = 8192;
    if (blocks < 1)
        return SQ_OK;
    if (s->bf16)
        k_fill_random16<1><<<(unsigned)blocks, 256, 0, s->stream>>>(dst, n, seed, stream, scale);
    else
        k_fill_random16<0><<<(unsigned)blocks, 256, 0, s->stream>>>(dst, n, seed, stream, scale);
    CUDA_CHECK_LAUNCH();
    return SQ_OK;
}

static int fill32(cuda_state *s, float *dst, size_t n, float v, sq_error *err)
{
    size_t blocks = (n + 255) / 256;
    k_fill_f32<<<(unsigned)(blocks > 1024 ? 1024 : blocks), 256, 0, s->stream>>>(dst, n, v);
    CUDA_CHECK_LAUNCH();
    return SQ_OK;
}

/* The spread of a random matrix, as sq_model_new_random's: +-1/in_features, the embedding +-1,
 * the LM head +-1/dim. */
static float random_scale(const sq_model_config *c, const sq_arch_item *it)
{
    switch (it->t->init) {
    case SQ_INIT_EMBED: return 1.0f;
    case SQ_INIT_HEAD:  return 1.0f / (float)c->dim;
    default:            return 1.0f / (float)it->shape[1];
    }
}

/* The weights of a model made by sq_model_new_random_device, generated on the device in the
 * context's 16-bit type (no float32 copy anywhere) into `wt`: sq_model_new_random's
 * distribution, norms 1, matrices uniform in +-1/dim (down: +-1/hidden_dim), the embedding in
 * +-1, every tensor of the architecture's table (runtime/arch.h). Each tensor is its own counter
 * stream (numbered by layer and slot), so every element is computed independently.
 * Offload mode generates each layer in the context's device buffer 0 and copies it to its
 * pinned host block. */
static int random_weights(cuda_state *s, cuda_weights *wt, const sq_model_config *c,
                          uint64_t seed, sq_error *err)
{
    const size_t L = (size_t)c->n_layers;
    int rc;
    sq_arch_item it[(int)SQ_L_COUNT > (int)SQ_M_COUNT ? (int)SQ_L_COUNT : (int)SQ_M_COUNT];
    for (size_t l = 0; l < L; l++) {
        uint8_t *blk = s->offload ? s->d_blocks : wt->d_blocks + l * s->block_bytes;
        const int n = sq_arch_items(c, (int)l, it, SQ_L_COUNT);
        for (int k = 0; k < n; k++) {
            const int slot = it[k].t->slot;
            rc = it[k].ndim == 1
                ? fill32(s, (float *)(blk + s->off[slot]), (size_t)it[k].numel,
                         it[k].t->init == SQ_INIT_NORM ? 1.0f : 0.0f, err)
                : fill16(s, (uint16_t *)(blk + s->off[slot]), (size_t)it[k].numel, seed,
                         l * SQ_L_COUNT + (size_t)slot, random_scale(c, &it[k]), err);
            if (rc)
                return rc;
        }
        if (s->offload) {
            CUDA_CHECK(cudaMemcpyAsync(wt->h_blocks + l * s->block_bytes, blk, s->block_bytes,
                                       cudaMemcpyDeviceToHost, s->stream));
            CUDA_CHECK(cudaStreamSynchronize(s->stream));
        }
    }
    const uint64_t top = L * SQ_L_COUNT;
    const int n = sq_arch_items(c, -1, it, SQ_M_COUNT);
    for (int k = 0; k < n; k++) {
        const int slot = it[k].t->slot;
        const size_t numel = (size_t)it[k].numel;
        if (it[k].tied)
            continue;
        if (it[k].ndim == 2) {
            CUDA_CHECK(cudaMalloc(&wt->d_model[slot], numel * sizeof(uint16_t)));
            rc = fill16(s, (uint16_t *)wt->d_model[slot], numel, seed, top + (uint64_t)slot,
                        random_scale(c, &it[k]), err);
        } else {
            CUDA_CHECK(cudaMalloc(&wt->d_model[slot], numel * sizeof(float)));
            rc = fill32(s, (float *)wt->d_model[slot], numel,
                        it[k].t->init == SQ_INIT_NORM ? 1.0f : 0.0f, err);
        }
        if (rc)
            return rc;
    }
    for (int k = 0; k < n; k++)
        if (it[k].tied)
            wt->d_model[it[k].t->slot] = wt->d_model[it[k].t->tied_to];
    CUDA_CHECK(cudaStreamSynchronize(s->stream));
    return SQ_OK;
}

/* ---- shared weights ------------------------------------------------------------------------ */

static pthread_mutex_t weights_mu = PTHREAD_MUTEX_INITIALIZER;
static cuda_weights *weights_list;   /* under weights_mu */

static void weights_free(cuda_weights *wt)
{
    if (!wt)
        return;
    if (wt->d_blocks)
        cudaFree(wt->d_blocks);
    if (wt->h_blocks)
        cudaFreeHost(wt->h_blocks);
    for (int k = 0; k < SQ_M_COUNT; k++) {
        int alias = 0;   /* a tied tensor is another's pointer: freed once */
        for (int j = 0; j < k; j++)
            alias |= wt->d_model[j] == wt->d_model[k];
        if (wt->d_model[k] && !alias)
            cudaFree(wt->d_model[k]);
    }
    free(wt);
}

/* The shared weights of s's model, dtype and mode, or NULL when no context holds them yet
 * (caller holds weights_mu). */
static cuda_weights *weights_find(const sq_model *m, const cuda_state *s)
{
    for (cuda_weights *wt = weights_list; wt; wt = wt->next)
        if (wt->model == m && wt->bf16 == s->bf16 && wt->offload == s->offload)
            return wt;
    return NULL;
}

/* Makes the weights of ctx's model in s's dtype and mode (caller holds weights_mu and found
 * none) and lists them with one reference, s's. */
static int weights_make(sq_context *ctx, cuda_state *s, sq_error *err)
{
    const sq_model_config *c = &ctx->model->config;
    cuda_weights *wt = (cuda_weights *)calloc(1, sizeof *wt);
    if (!wt)
        return sq_error_oom(err, "the CUDA weights");
    wt->model = ctx->model;
    wt->bf16 = s->bf16;
    wt->offload = s->offload;
    wt->refs = 1;
    cudaError_t e = s->offload
        ? cudaHostAlloc((void **)&wt->h_blocks, (size_t)c->n_layers * s->block_bytes,
                        cudaHostAllocDefault)
        : cudaMalloc((void **)&wt->d_blocks, (size_t)c->n_layers * s->block_bytes);
    int rc = SQ_OK;
    if (e != cudaSuccess)
        rc = sq_error_set(err, SQ_ESOFTWARE, "CUDA: %s:%d: %s of the layer blocks: %s", __FILE__,
                          __LINE__, s->offload ? "cudaHostAlloc" : "cudaMalloc",
                          cudaGetErrorString(e));
    else if (ctx->model->device_random)
        rc = random_weights(s, wt, c, ctx->model->random_seed, err);
    else
        rc = upload_weights(s, wt, c, &ctx->model->w, err);
    if (rc) {
        weights_free(wt);
        return rc;
    }
    wt->next = weights_list;
    weights_list = wt;
    s->w = wt;
    return SQ_OK;
}

/* Drops s's reference; the last one frees the weights. */
static void weights_release(cuda_state *s)
{
    if (!s->w)
        return;
    pthread_mutex_lock(&weights_mu);
    cuda_weights *wt = s->w;
    if (--wt->refs == 0) {
        for (cuda_weights **p = &weights_list; *p; p = &(*p)->next)
            if (*p == wt) {
                *p = wt->next;
                break;
            }
        weights_free(wt);
    }
    pthread_mutex_unlock(&weights_mu);
    s->w = NULL;
}

/* ---- activations ---------------------------------------------------------------------------- */

static void act_free(cuda_act *a)
{
    void *dev[] = {a->x, a->xb, a->q, a->att, a->gu, a->hb, a->logits, a->kf, a->vf, a->part,
                   a->d_tokens, a->d_pos, a->d_row_seq, a->d_mask, a->d_seqs, a->d_tile_seq};
    for (size_t k = 0; k < sizeof dev / sizeof dev[0]; k++)
        if (dev[k])
            cudaFree(dev[k]);
    if (a->h_logits)
        cudaFreeHost(a->h_logits);
    free(a->h_meta);
    memset(a, 0, sizeof *a);
}

/* The partial-state entries (token, head, split) attention may use for `rows` rows. */
static size_t act_part_rows(const sq_model_config *c, size_t rows)
{
    return (size_t)c->n_heads * (rows * 4 > AT_MAX_SPLITS ? rows * 4 : AT_MAX_SPLITS);
}

/* Device bytes of the activations for `rows` rows and `mask_bytes` of masks. */
static size_t act_bytes(const sq_model_config *c, size_t rows, size_t mask_bytes)
{
    const size_t dim = (size_t)c->dim, hid = (size_t)c->hidden_dim, V = (size_t)c->vocab_size;
    const size_t q_dim = (size_t)c->n_heads * c->head_dim;
    const size_t kv_dim = (size_t)c->n_kv_heads * c->head_dim;
    return rows * (dim * 6 + q_dim * 6 + hid * 10 + V * 4 + kv_dim * 8 + 12) + mask_bytes +
           act_part_rows(c, rows) * (size_t)(c->head_dim + 2) * sizeof(float) +
           rows * (sizeof(at_seq) + sizeof(int32_t));
}

#define DMALLOC(ptr, bytes) CUDA_CHECK(cudaMalloc((void **)&(ptr), (bytes)))

/* A device buffer *p of *cap elements of `unit` bytes grown to at least `need` (kept when large
 * enough; the old contents are not kept). On failure *p is NULL and *cap 0. */
static int grow_device(void **p, size_t *cap, size_t need, size_t unit, sq_error *err)
{
    if (need <= *cap)
        return SQ_OK;
    if (*p)
        cudaFree(*p);
    *p = NULL;
    *cap = 0;
    CUDA_CHECK(cudaMalloc(p, need * unit));
    *cap = need;
    return SQ_OK;
}

/* Makes room for a forward of `rows` token rows in `nseq` sequences with `mask_bytes` of masks
 * and `tiles` query tiles; buffers already large enough are kept. (cudaFree waits for the
 * device, so nothing in flight uses a buffer that goes.) */
static int act_reserve(const sq_model_config *c, cuda_act *a, size_t rows, size_t mask_bytes,
                       size_t nseq, size_t tiles, sq_error *err)
{
    const size_t dim = (size_t)c->dim, hid = (size_t)c->hidden_dim, V = (size_t)c->vocab_size;
    const size_t q_dim = (size_t)c->n_heads * c->head_dim;
    const size_t kv_dim = (size_t)c->n_kv_heads * c->head_dim;
    if (rows > a->rows) {
        cuda_act keep = *a;   /* the masks and tables are sized apart */
        void *dev[] = {a->x, a->xb, a->q, a->att, a->gu, a->hb, a->logits, a->kf, a->vf,
                       a->part, a->d_tokens, a->d_pos, a->d_row_seq};
        for (size_t k = 0; k < sizeof dev / sizeof dev[0]; k++)
            if (dev[k])
                cudaFree(dev[k]);
        if (a->h_logits)
            cudaFreeHost(a->h_logits);
        memset(a, 0, sizeof *a);
        a->mask_bytes = keep.mask_bytes;
        a->d_mask = keep.d_mask;
        a->seqs = keep.seqs;
        a->d_seqs = keep.d_seqs;
        a->tiles = keep.tiles;
        a->d_tile_seq = keep.d_tile_seq;
        a->h_meta = keep.h_meta;
        a->h_meta_bytes = keep.h_meta_bytes;
        a->part_rows = act_part_rows(c, rows);
        DMALLOC(a->x, rows * dim * sizeof(float));
        DMALLOC(a->xb, rows * dim * 2);
        DMALLOC(a->q, rows * q_dim * sizeof(float));
        DMALLOC(a->att, rows * q_dim * 2);
        DMALLOC(a->gu, rows * 2 * hid * sizeof(float));
        DMALLOC(a->hb, rows * hid * 2);
        DMALLOC(a->logits, rows * V * sizeof(float));
        DMALLOC(a->kf, rows * kv_dim * sizeof(float));
        DMALLOC(a->vf, rows * kv_dim * sizeof(float));
        DMALLOC(a->part, a->part_rows * (size_t)(c->head_dim + 2) * sizeof(float));
        DMALLOC(a->d_tokens, rows * sizeof(int32_t));
        DMALLOC(a->d_pos, rows * sizeof(int32_t));
        DMALLOC(a->d_row_seq, rows * sizeof(int32_t));
        CUDA_CHECK(cudaMallocHost((void **)&a->h_logits, rows * V * sizeof(float)));
        a->rows = rows;
    }
    int rc;
    if ((rc = grow_device((void **)&a->d_mask, &a->mask_bytes, mask_bytes, 1, err)) ||
        (rc = grow_device((void **)&a->d_seqs, &a->seqs, nseq, sizeof(at_seq), err)) ||
        (rc = grow_device((void **)&a->d_tile_seq, &a->tiles, tiles, sizeof(int32_t), err)))
        return rc;
    /* host staging: the tables, then rows' tokens and positions, then the masks */
    size_t meta = nseq * sizeof(at_seq) + (tiles + 3 * rows) * sizeof(int32_t) + mask_bytes;
    if (meta > a->h_meta_bytes) {
        uint8_t *h = (uint8_t *)realloc(a->h_meta, meta);
        if (!h)
            return sq_error_oom(err, "the CUDA forward's tables");
        a->h_meta = h;
        a->h_meta_bytes = meta;
    }
    return SQ_OK;
}

static void cuda_free(sq_context *ctx)
{
    cuda_state *s = (cuda_state *)ctx->impl;
    if (!s)
        return;
    cudaSetDevice(s->device);
    if (s->stream)
        cudaStreamSynchronize(s->stream);
    if (s->copy_stream)
        cudaStreamSynchronize(s->copy_stream);
    weights_release(s);
    act_free(&s->a);
    void *dev[] = {s->d_blocks, s->d_inv_freq, s->k_cache, s->v_cache, s->gather, s->d_keep,
                   s->d_slot_pos};
    free(s->h_slot_pos);
    for (size_t k = 0; k < sizeof dev / sizeof dev[0]; k++)
        if (dev[k])
            cudaFree(dev[k]);
    for (int e = 0; e < s->levents; e++)
        cudaEventDestroy(s->lev[e]);
    for (int b = 0; b < s->events; b++) {
        cudaEventDestroy(s->copied[b]);
        cudaEventDestroy(s->consumed[b]);
    }
    if (s->blas)
        cublasDestroy(s->blas);
    if (s->stream)
        cudaStreamDestroy(s->stream);
    if (s->copy_stream)
        cudaStreamDestroy(s->copy_stream);
    free(s);
    ctx->impl = NULL;
}

/* Query tiles of a sequence of n tokens (at_shape's TQ rows each, per KV head). */
static int at_tiles(const sq_model_config *c, int n)
{
    const int tq = c->head_dim <= 128 ? (int)at_shape<128>::TQ : (int)at_shape<256>::TQ;
    return (n * (c->n_heads / c->n_kv_heads) + tq - 1) / tq;
}

static int cuda_init_impl(sq_context *ctx, cuda_state *s, sq_error *err)
{
    const sq_model_config *c = &ctx->model->config;
    const sq_context_params *p = &ctx->params;
    if (c->head_dim > HEAD_DIM_MAX || c->head_dim % 2)
        return sq_error_set(err, SQ_EUSAGE, "CUDA backend: head_dim %d: must be even and at most "
                            "%d", c->head_dim, HEAD_DIM_MAX);
    /* the families' features this backend does not compute yet (runtime/arch.h) are refused
     * rather than computed wrong */
    const char *missing = sq_arch_cuda_unsupported(c);
    if (missing)
        return sq_error_set(err, SQ_EUSAGE, "CUDA backend: %s of %s: not implemented on this "
                            "backend yet (use --backend cpu)", missing,
                            sq_arch_get(c->arch) ? sq_arch_get(c->arch)->name : "this model");
    int rrc = sq_rope_check_context(c, (long long)p->max_context + p->max_pending, err);
    if (rrc)
        return rrc;
    if (sq_cuda_device_count_impl(err) < 1)
        return SQ_EUSAGE;   /* err says why: no driver, no device */
    s->device = 0;
    CUDA_CHECK(cudaSetDevice(s->device));
    cudaDeviceProp prop;
    CUDA_CHECK(cudaGetDeviceProperties(&prop, s->device));
    s->sms = prop.multiProcessorCount > 0 ? prop.multiProcessorCount : 1;
    snprintf(s->name, sizeof s->name, "%.150s (sm_%d%d, %.1f GiB)", prop.name, prop.major % 100,
             prop.minor % 100, (double)prop.totalGlobalMem / (1 << 30));
    s->bf16 = p->dtype == SQ_DTYPE_BF16;
    s->offload = p->offload;
    s->slots = p->max_context + p->max_pending;

    const size_t kv_dim = (size_t)c->n_kv_heads * c->head_dim;
    const size_t L = (size_t)c->n_layers, mp = (size_t)p->max_pending;
    /* the layer block: the vectors in float32, then the matrices in 16 bits, in table order,
     * each aligned, except that up follows gate directly (one GEMM computes both) */
    sq_arch_item li[SQ_L_COUNT];
    const int nli = sq_arch_items(c, 0, li, SQ_L_COUNT);
    size_t o = 0;
    for (int pass = 1; pass <= 2; pass++)
        for (int k = 0; k < nli; k++) {
            if (li[k].ndim != pass)
                continue;
            const size_t bytes = (size_t)li[k].numel * (pass == 1 ? sizeof(float) : 2);
            s->off[li[k].t->slot] = o;
            o = li[k].t->slot == SQ_L_GATE ? o + bytes : align_up(o + bytes);
        }
    s->block_bytes = o;

    /* refuse early, with the numbers, when the device cannot hold it; weights another context
     * of this model, dtype and mode already holds cost nothing more */
    pthread_mutex_lock(&weights_mu);
    const int shared = weights_find(ctx->model, s) != NULL;
    pthread_mutex_unlock(&weights_mu);
    size_t kv_bytes = 2 * L * (size_t)s->slots * kv_dim * sizeof(uint16_t);
    size_t a_bytes = act_bytes(c, mp, mp * mp) + mp * (kv_dim * 2 + 4);
    size_t model_bytes = 0;   /* the model's own tensors: matrices 16-bit, vectors float32 */
    sq_arch_item mi[SQ_M_COUNT];
    const int nmi = sq_arch_items(c, -1, mi, SQ_M_COUNT);
    for (int k = 0; k < nmi; k++)
        if (!mi[k].tied)
            model_bytes += (size_t)mi[k].numel * (mi[k].ndim == 2 ? 2 : sizeof(float));
    size_t w_bytes = (s->offload ? 2 : 0) * s->block_bytes +
                     (shared ? 0 : (s->offload ? 0 : L) * s->block_bytes + model_bytes);
    size_t free_b = 0, total_b = 0;
    CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
    if (kv_bytes + a_bytes + w_bytes > free_b)
        return sq_error_set(err, SQ_EUSAGE, "CUDA backend: needs %.2f GiB (weights %.2f, KV "
                            "cache %.2f, activations %.2f) but %s has %.2f GiB free%s",
                            (double)(kv_bytes + a_bytes + w_bytes) / (1 << 30),
                            (double)w_bytes / (1 << 30), (double)kv_bytes / (1 << 30),
                            (double)a_bytes / (1 << 30), s->name, (double)free_b / (1 << 30),
                            s->offload ? "" : "; try the offload mode (weights streamed from host memory)");

    CUDA_CHECK(cudaStreamCreateWithFlags(&s->stream, cudaStreamNonBlocking));
    CUDA_CHECK(cudaStreamCreateWithFlags(&s->copy_stream, cudaStreamNonBlocking));
    for (int b = 0; b < 2; b++) {
        CUDA_CHECK(cudaEventCreateWithFlags(&s->copied[b], cudaEventDisableTiming));
        cudaError_t e = cudaEventCreateWithFlags(&s->consumed[b], cudaEventDisableTiming);
        if (e != cudaSuccess) {
            cudaEventDestroy(s->copied[b]);
            CUDA_CHECK(e);
        }
        s->events = b + 1;
    }
    CUBLAS_CHECK(cublasCreate(&s->blas));
    CUBLAS_CHECK(cublasSetStream(s->blas, s->stream));

    /* weights: this context's two layer buffers in offload mode, then the shared ones */
    if (s->offload)
        DMALLOC(s->d_blocks, 2 * s->block_bytes);
    int rc = SQ_OK;
    pthread_mutex_lock(&weights_mu);
    cuda_weights *wt = weights_find(ctx->model, s);
    if (wt) {
        wt->refs++;
        s->w = wt;
    } else {
        rc = weights_make(ctx, s, err);
    }
    pthread_mutex_unlock(&weights_mu);
    if (rc)
        return rc;
    const int npair = c->head_dim / 2;
    float inv_freq[HEAD_DIM_MAX];   /* full layers' table, then sliding layers' (runtime/rope.h) */
    sq_rope_table(c, &c->rope, inv_freq, &s->rope_af[0]);
    sq_rope_table(c, c->rope_local.theta > 0 ? &c->rope_local : &c->rope, inv_freq + npair,
                  &s->rope_af[1]);
    DMALLOC(s->d_inv_freq, 2 * (size_t)npair * sizeof(float));
    CUDA_CHECK(cudaMemcpy(s->d_inv_freq, inv_freq, 2 * (size_t)npair * sizeof(float),
                          cudaMemcpyHostToDevice));
    int windows = 0;
    for (int l = 0; l < c->n_layers; l++)
        windows |= sq_model_layer_sliding(c, l);
    if (windows) {   /* each slot's position, for the sliding windows */
        DMALLOC(s->d_slot_pos, (size_t)s->slots * sizeof(int32_t));
        s->h_slot_pos = (int32_t *)calloc((size_t)s->slots, sizeof(int32_t));
        if (!s->h_slot_pos)
            return sq_error_oom(err, "the slot positions");
    }
    /* Every upload above went through the legacy default stream, and a cudaMemcpy from
     * pageable memory may return before its data lands (the CUDA runtime API's "API
     * synchronization behavior"); the compute stream is non-blocking, so nothing orders the
     * first forward after those copies. Wait for all of them here. (tests/cuda-emu lands such
     * copies as late as the rules allow; the 'cuda-emu' suite fails without this line.) */
    CUDA_CHECK(cudaDeviceSynchronize());

    /* KV cache and scratch */
    DMALLOC(s->k_cache, kv_bytes / 2);
    DMALLOC(s->v_cache, kv_bytes / 2);
    if ((rc = act_reserve(c, &s->a, mp, mp * mp, 1, (size_t)at_tiles(c, (int)mp), err)))
        return rc;
    DMALLOC(s->gather, mp * kv_dim * sizeof(uint16_t));
    for (int e = 0; e < LOGIT_EVENTS; e++) {
        CUDA_CHECK(cudaEventCreateWithFlags(&s->lev[e], cudaEventDisableTiming));
        s->levents = e + 1;
    }
    DMALLOC(s->d_keep, mp * sizeof(int32_t));
    return SQ_OK;
}

static int cuda_init(sq_context *ctx, sq_error *err)
{
    cuda_state *s = (cuda_state *)calloc(1, sizeof *s);
    if (!s)
        return sq_error_oom(err, "the CUDA context");
    ctx->impl = s;
    int rc = cuda_init_impl(ctx, s, err);
    if (rc)
        cuda_free(ctx);
    return rc;
}

/* out (n, d_out) f32 = in (n, d_in) 16-bit @ W^T + beta * out, W (d_out, d_in) row-major: the
 * GEMV kernel above for up to GEMV_MAX_N rows, else cuBLAS. Column-major view for cuBLAS:
 * out^T (d_out x n) = W^T' (op T of the d_in x d_out matrix) x in^T. */
template <int BF>
static int gemv(cuda_state *s, float *out, const uint16_t *in, const uint16_t *w, int n, int d_in,
                int d_out, float beta, sq_error *err)
{
    const unsigned blocks = (unsigned)((d_out + 7) / 8);
    switch (n) {
#define GEMV_CASE(N)                                                                           \
    case N:                                                                                    \
        k_gemv<BF, N><<<blocks, 256, 0, s->stream>>>(out, in, w, d_in, d_out, beta);          \
        break;
    GEMV_CASE(1) GEMV_CASE(2) GEMV_CASE(3) GEMV_CASE(4)
    GEMV_CASE(5) GEMV_CASE(6) GEMV_CASE(7) GEMV_CASE(8)
#undef GEMV_CASE
    default:
        return sq_error_set(err, SQ_ESOFTWARE, "CUDA backend: gemv of %d rows", n);
    }
    CUDA_CHECK_LAUNCH();
    return SQ_OK;
}

/* y (n rows of stride ld, from column off) += b (d floats of a layer block), on the stream. */
static void add_bias(cuda_state *s, float *y, size_t ld, size_t off, const void *b, int n, int d)
{
    const size_t total = (size_t)n * (size_t)d;
    const int blocks = (int)((total + 255) / 256 < 65535 ? (total + 255) / 256 : 65535);
    k_add_bias<<<blocks, 256, 0, s->stream>>>(y, ld, off, (const float *)b, n, d);
}

static int gemm(cuda_state *s, float *out, const uint16_t *in, const void *wt, int n, int d_in,
                int d_out, float beta, sq_error *err)
{
    if (n <= GEMV_MAX_N && d_in % 8 == 0 && ((uintptr_t)wt & 15) == 0 &&
        ((uintptr_t)in & 15) == 0)
        return s->bf16 ? gemv<1>(s, out, in, (const uint16_t *)wt, n, d_in, d_out, beta, err)
                       : gemv<0>(s, out, in, (const uint16_t *)wt, n, d_in, d_out, beta, err);
    const float alpha = 1.0f;
    const cudaDataType_t t16 = s->bf16 ? CUDA_R_16BF : CUDA_R_16F;
    CUBLAS_CHECK(cublasGemmEx(s->blas, CUBLAS_OP_T, CUBLAS_OP_N, d_out, n, d_in, &alpha, wt, t16,
                              d_in, in, t16, d_in, &beta, out, CUDA_R_32F, d_out,
                              CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    return SQ_OK;
}

/* Offload: copy layer l's block into device buffer l % 2 once the layer that used it is done. */
static int prefetch(cuda_state *s, int l, sq_error *err)
{
    int b = l & 1;
    CUDA_CHECK(cudaStreamWaitEvent(s->copy_stream, s->consumed[b], 0));
    CUDA_CHECK(cudaMemcpyAsync(s->d_blocks + (size_t)b * s->block_bytes,
                               s->w->h_blocks + (size_t)l * s->block_bytes, s->block_bytes,
                               cudaMemcpyHostToDevice, s->copy_stream));
    CUDA_CHECK(cudaEventRecord(s->copied[b], s->copy_stream));
    return SQ_OK;
}

/* The tree attention of layer `layer` over every sequence of the forward (their at_seq tables
 * are on the device): the partial kernel over all query tiles (in launches of at most 65535
 * tiles, the grid's y limit), then the merge over all R rows. */
template <int BF, int HDMAX>
static int attention_t(cuda_state *s, const sq_model_config *c, int layer, int R, int tiles,
                       int splits, sq_error *err)
{
    cuda_act *A = &s->a;
    for (int t0 = 0; t0 < tiles; t0 += 65535) {
        const int nt = tiles - t0 < 65535 ? tiles - t0 : 65535;
        k_attn_partial<BF, HDMAX><<<dim3(c->n_kv_heads, nt, splits), AT_THREADS, 0, s->stream>>>(
            A->part, A->q, A->d_seqs, A->d_tile_seq, A->d_mask, layer, t0, c->n_heads,
            c->n_kv_heads, c->head_dim, splits, A->d_pos,
            1.0f / sqrtf(c->query_pre_attn_scalar > 0 ? c->query_pre_attn_scalar
                                                      : (float)c->head_dim),
            c->attn_softcap, sq_model_layer_sliding(c, layer) ? c->sliding_window : 0);
        CUDA_CHECK_LAUNCH();
    }
    k_attn_merge<BF><<<dim3(R, c->n_heads), c->head_dim, 0, s->stream>>>(A->att, A->part,
                                                                        c->n_heads, c->head_dim,
                                                                        splits);
    CUDA_CHECK_LAUNCH();
    return SQ_OK;
}

template <int BF>
static int attention(cuda_state *s, const sq_model_config *c, int layer, int R, int tiles,
                     int splits, sq_error *err)
{
    return c->head_dim <= 128 ? attention_t<BF, 128>(s, c, layer, R, tiles, splits, err)
                              : attention_t<BF, 256>(s, c, layer, R, tiles, splits, err);
}

/* Copies floats [a, a + m) of the forward's (rows, vocab) logits, flat, from src (indexed the
 * same way) to the sequences' own logits arrays. */
static void scatter_logits(const sq_batch_seq *seqs, int b, size_t V, const float *src, size_t a,
                           size_t m)
{
    size_t off = 0;
    for (int k = 0; k < b && m > 0; k++) {
        const size_t len = (size_t)seqs[k].n * V;
        if (a < off + len) {
            const size_t from = a - off, take = len - from < m ? len - from : m;
            memcpy(seqs[k].logits + from, src + a, take * sizeof(float));
            a += take;
            m -= take;
        }
        off += len;
    }
}

/* The forward of b >= 1 sequences of contexts that share one set of weights (runtime/backend.h;
 * sq_context_forward is b = 1), on the first context's stream, weights and activations: the
 * R = sum n_k rows go through every weight product together, the new keys and values go to
 * each sequence's own cache, and the attention reads each sequence's own cache and mask (one
 * launch for all of them, see k_attn_partial). The launch geometry of the attention: query
 * tiles of TQ rows per KV head, and every context split into the same number of ranges, so
 * that about 4 blocks per SM run, within the partial-state buffer (docs/cuda.md). */
template <int BF>
static int forward_t(const sq_batch_seq *seqs, int b, sq_error *err)
{
    sq_context *ctx0 = seqs[0].ctx;
    const sq_model_config *c = &ctx0->model->config;
    cuda_state *s = (cuda_state *)ctx0->impl;
    cuda_act *A = &s->a;
    const int dim = c->dim, hid = c->hidden_dim, hd = c->head_dim, V = c->vocab_size;
    const int q_dim = c->n_heads * hd, kv_dim = c->n_kv_heads * hd;
    cudaStream_t st = s->stream;
    const float woff = c->gemma ? 1.0f : 0.0f;   /* Gemma's (1 + w) norms */
    int rc;

    size_t R = 0, maskb = 0, tiles = 0;
    for (int k = 0; k < b; k++) {
        const sq_context *ck = seqs[k].ctx;
        R += (size_t)seqs[k].n;
        maskb += (size_t)seqs[k].n * (size_t)(ck->n_pending + seqs[k].n);
        tiles += (size_t)at_tiles(c, seqs[k].n);
    }
    if (R > (size_t)(INT_MAX / 4) || tiles > (size_t)(INT_MAX / 4))
        return sq_error_set(err, SQ_EUSAGE, "forward batch: %zu token rows in one forward is too "
                            "many for the CUDA backend", R);
    CUDA_CHECK(cudaSetDevice(s->device));
    if ((rc = act_reserve(c, A, R, maskb, (size_t)b, tiles, err)))
        return rc;

    /* the host tables: per sequence, per tile and per row; tokens, positions and masks */
    at_seq *hs = (at_seq *)A->h_meta;
    int32_t *h_tile = (int32_t *)(hs + b), *h_row = h_tile + tiles, *h_tok = h_row + R;
    int32_t *h_pos = h_tok + R;
    uint8_t *h_mask = (uint8_t *)(h_pos + R);
    int row0 = 0, tile0 = 0, maxch = 1;
    size_t moff = 0;
    for (int k = 0; k < b; k++) {
        const sq_context *ck = seqs[k].ctx;
        const cuda_state *sk = (const cuda_state *)ck->impl;
        const int n = seqs[k].n, width = ck->n_pending + n, nt = at_tiles(c, n);
        hs[k] = at_seq{sk->k_cache, sk->v_cache, (size_t)sk->slots * kv_dim, moff,
                       ck->n_committed, width, n, row0, tile0, 1, sk->d_slot_pos};
        if (sk->d_slot_pos) {   /* the new slots' positions, for the sliding windows */
            const int first = ck->n_committed + ck->n_pending;
            memcpy(sk->h_slot_pos + first, seqs[k].pos, (size_t)n * sizeof(int32_t));
            CUDA_CHECK(cudaMemcpyAsync(sk->d_slot_pos + first, sk->h_slot_pos + first,
                                       (size_t)n * sizeof(int32_t), cudaMemcpyHostToDevice, st));
        }
        for (int t = 0; t < nt; t++)
            h_tile[tile0 + t] = k;
        for (int i = 0; i < n; i++)
            h_row[row0 + i] = k;
        memcpy(h_tok + row0, seqs[k].tokens, (size_t)n * sizeof(int32_t));
        memcpy(h_pos + row0, seqs[k].pos, (size_t)n * sizeof(int32_t));
        memcpy(h_mask + moff, seqs[k].mask, (size_t)n * width);
        const int ch = (ck->n_committed + width + AT_TK - 1) / AT_TK;
        maxch = ch > maxch ? ch : maxch;
        row0 += n;
        tile0 += nt;
        moff += (size_t)n * width;
    }
    long want = (4L * s->sms + (long)c->n_kv_heads * (long)tiles - 1) /
                ((long)c->n_kv_heads * (long)tiles);
    long cap = (long)(A->part_rows / (R * (size_t)c->n_heads));
    if (want > cap)
        want = cap;
    if (want > AT_MAX_SPLITS)
        want = AT_MAX_SPLITS;
    if (want > maxch)
        want = maxch;
    if (want < 1)
        want = 1;
    int splits = 1;
    for (int k = 0; k < b; k++) {
        const int ch = (hs[k].C + hs[k].width + AT_TK - 1) / AT_TK;
        const int per = (ch + (int)want - 1) / (int)want;
        const int used = (ch + per - 1) / per;
        hs[k].chunks_per_split = per;
        splits = used > splits ? used : splits;
    }
    CUDA_CHECK(cudaMemcpyAsync(A->d_seqs, hs, (size_t)b * sizeof(at_seq), cudaMemcpyHostToDevice,
                               st));
    CUDA_CHECK(cudaMemcpyAsync(A->d_tile_seq, h_tile, tiles * sizeof(int32_t),
                               cudaMemcpyHostToDevice, st));
    CUDA_CHECK(cudaMemcpyAsync(A->d_row_seq, h_row, R * sizeof(int32_t), cudaMemcpyHostToDevice,
                               st));
    CUDA_CHECK(cudaMemcpyAsync(A->d_tokens, h_tok, R * sizeof(int32_t), cudaMemcpyHostToDevice,
                               st));
    CUDA_CHECK(cudaMemcpyAsync(A->d_pos, h_pos, R * sizeof(int32_t), cudaMemcpyHostToDevice, st));
    CUDA_CHECK(cudaMemcpyAsync(A->d_mask, h_mask, maskb, cudaMemcpyHostToDevice, st));
    const int n = (int)R;
    k_embed<BF><<<n, 256, 0, st>>>(A->x, (const uint16_t *)s->w->d_model[SQ_M_EMBED], A->d_tokens,
                                   dim, sq_arch_embed_scale(c));
    CUDA_CHECK_LAUNCH();
    if (s->offload && (rc = prefetch(s, 0, err)))
        return rc;

    for (int l = 0; l < c->n_layers; l++) {
        const uint8_t *blk;
        if (s->offload) {
            if (l + 1 < c->n_layers && (rc = prefetch(s, l + 1, err)))
                return rc;
            CUDA_CHECK(cudaStreamWaitEvent(st, s->copied[l & 1], 0));
            blk = s->d_blocks + (size_t)(l & 1) * s->block_bytes;
        } else {
            blk = s->w->d_blocks + (size_t)l * s->block_bytes;
        }
        k_rmsnorm<BF><<<n, 256, 0, st>>>(A->xb, A->x, (const float *)(blk + s->off[SQ_L_ATTN_NORM]),
                                         dim, c->norm_eps, woff);
        CUDA_CHECK_LAUNCH();
        if ((rc = gemm(s, A->q, A->xb, blk + s->off[SQ_L_WQ], n, dim, q_dim, 0.0f, err)) ||
            (rc = gemm(s, A->kf, A->xb, blk + s->off[SQ_L_WK], n, dim, kv_dim, 0.0f, err)) ||
            (rc = gemm(s, A->vf, A->xb, blk + s->off[SQ_L_WV], n, dim, kv_dim, 0.0f, err)))
            return rc;
        if (c->attn_bias) {   /* q/k/v biases (Qwen2, attention_bias) */
            add_bias(s, A->q, q_dim, 0, blk + s->off[SQ_L_BQ], n, q_dim);
            add_bias(s, A->kf, kv_dim, 0, blk + s->off[SQ_L_BK], n, kv_dim);
            add_bias(s, A->vf, kv_dim, 0, blk + s->off[SQ_L_BV], n, kv_dim);
            CUDA_CHECK_LAUNCH();
        }
        if (c->qk_norm) {     /* per-head RMSNorm of q and k, before RoPE (Qwen3) */
            k_head_norm<<<n * c->n_heads, 32, 0, st>>>(
                A->q, (const float *)(blk + s->off[SQ_L_Q_NORM]), hd, c->norm_eps, woff);
            CUDA_CHECK_LAUNCH();
            k_head_norm<<<n * c->n_kv_heads, 32, 0, st>>>(
                A->kf, (const float *)(blk + s->off[SQ_L_K_NORM]), hd, c->norm_eps, woff);
            CUDA_CHECK_LAUNCH();
        }
        /* Gemma-3's sliding layers: their own RoPE table (runtime/rope.h) */
        const int loc = c->rope_local.theta > 0 && sq_model_layer_sliding(c, l);
        const float *inv = s->d_inv_freq + (loc ? hd / 2 : 0);
        k_rope<<<dim3(n, c->n_heads), hd / 2, 0, st>>>(A->q, (size_t)q_dim, A->d_pos, inv, hd,
                                                       s->rope_af[loc]);
        CUDA_CHECK_LAUNCH();
        k_kv_store<BF><<<dim3(n, c->n_kv_heads), hd / 2, 0, st>>>(A->d_seqs, A->d_row_seq, l,
                                                                  A->kf, A->vf, A->d_pos, inv,
                                                                  kv_dim, hd, s->rope_af[loc]);
        CUDA_CHECK_LAUNCH();
        if ((rc = attention<BF>(s, c, l, n, (int)tiles, splits, err)))
            return rc;
        if (c->gemma) {   /* the attention's output normed before the residual add; gu is
                             free until the MLP (2 * hidden >= dim: sq_arch_cuda_unsupported) */
            if ((rc = gemm(s, A->gu, A->att, blk + s->off[SQ_L_WO], n, q_dim, dim, 0.0f, err)))
                return rc;
            if (c->attn_out_bias)
                add_bias(s, A->gu, dim, 0, blk + s->off[SQ_L_BO], n, dim);
            k_norm_add<<<n, 256, 0, st>>>(A->x, A->gu,
                                          (const float *)(blk + s->off[SQ_L_POST_ATTN_NORM]), dim,
                                          c->norm_eps, woff);
            CUDA_CHECK_LAUNCH();
        } else {
            if ((rc = gemm(s, A->x, A->att, blk + s->off[SQ_L_WO], n, q_dim, dim, 1.0f, err)))
                return rc;
            if (c->attn_out_bias) {
                add_bias(s, A->x, dim, 0, blk + s->off[SQ_L_BO], n, dim);
                CUDA_CHECK_LAUNCH();
            }
        }

        k_rmsnorm<BF><<<n, 256, 0, st>>>(A->xb, A->x, (const float *)(blk + s->off[SQ_L_FFN_NORM]),
                                         dim, c->norm_eps, woff);
        CUDA_CHECK_LAUNCH();
        if ((rc = gemm(s, A->gu, A->xb, blk + s->off[SQ_L_GATE], n, dim, 2 * hid, 0.0f, err)))
            return rc;
        if (c->mlp_bias) {   /* gate's and up's biases: the two halves of each gu row */
            add_bias(s, A->gu, 2 * (size_t)hid, 0, blk + s->off[SQ_L_BGATE], n, hid);
            add_bias(s, A->gu, 2 * (size_t)hid, (size_t)hid, blk + s->off[SQ_L_BUP], n, hid);
            CUDA_CHECK_LAUNCH();
        }
        int blocks = (int)(((size_t)n * hid + 255) / 256);
        k_swiglu<BF><<<blocks < 65535 ? blocks : 65535, 256, 0, st>>>(A->hb, A->gu, n, hid,
                                                                      c->act == SQ_ACT_GELU_TANH);
        CUDA_CHECK_LAUNCH();
        if (c->gemma) {
            if ((rc = gemm(s, A->gu, A->hb, blk + s->off[SQ_L_DOWN], n, hid, dim, 0.0f, err)))
                return rc;
            if (c->mlp_bias)
                add_bias(s, A->gu, dim, 0, blk + s->off[SQ_L_BDOWN], n, dim);
            k_norm_add<<<n, 256, 0, st>>>(A->x, A->gu,
                                          (const float *)(blk + s->off[SQ_L_POST_FFN_NORM]), dim,
                                          c->norm_eps, woff);
            CUDA_CHECK_LAUNCH();
        } else {
            if ((rc = gemm(s, A->x, A->hb, blk + s->off[SQ_L_DOWN], n, hid, dim, 1.0f, err)))
                return rc;
            if (c->mlp_bias) {
                add_bias(s, A->x, dim, 0, blk + s->off[SQ_L_BDOWN], n, dim);
                CUDA_CHECK_LAUNCH();
            }
        }
        if (s->offload)
            CUDA_CHECK(cudaEventRecord(s->consumed[l & 1], st));
    }
    k_rmsnorm<BF><<<n, 256, 0, st>>>(A->xb, A->x, (const float *)s->w->d_model[SQ_M_NORM], dim,
                                     c->norm_eps, woff);
    CUDA_CHECK_LAUNCH();
    if ((rc = gemm(s, A->logits, A->xb, s->w->d_model[SQ_M_LM_HEAD], n, dim, V, 0.0f, err)))
        return rc;
    if (c->final_softcap > 0) {   /* Gemma-2 */
        const size_t nl = (size_t)n * V;
        const size_t blocks = (nl + 255) / 256;
        k_softcap<<<(unsigned)(blocks < 65535 ? blocks : 65535), 256, 0, st>>>(A->logits, nl,
                                                                              c->final_softcap);
        CUDA_CHECK_LAUNCH();
    }
    /* logits: device -> pinned buffer in chunks (full copy bandwidth), each chunk copied on to
     * the sequences' arrays as soon as it has landed, while the next one is in flight */
    const size_t total = R * (size_t)V;
    const size_t nch = (total + LOGIT_CHUNK - 1) / LOGIT_CHUNK;
    for (size_t k = 0; k < nch; k++) {
        size_t a = k * LOGIT_CHUNK, m = total - a < LOGIT_CHUNK ? total - a : LOGIT_CHUNK;
        CUDA_CHECK(cudaMemcpyAsync(A->h_logits + a, A->logits + a, m * sizeof(float),
                                   cudaMemcpyDeviceToHost, st));
        if (k < LOGIT_EVENTS)
            CUDA_CHECK(cudaEventRecord(s->lev[k], st));
    }
    for (size_t k = 0; k < nch; k++) {
        size_t a = k * LOGIT_CHUNK, m = total - a < LOGIT_CHUNK ? total - a : LOGIT_CHUNK;
        if (k < LOGIT_EVENTS && k + 1 < nch)
            CUDA_CHECK(cudaEventSynchronize(s->lev[k]));
        else
            CUDA_CHECK(cudaStreamSynchronize(st));
        scatter_logits(seqs, b, (size_t)V, A->h_logits, a, m);
    }
    return SQ_OK;
}

static int cuda_forward(sq_context *ctx, const int32_t *tokens, const int32_t *pos,
                        const uint8_t *mask, int n, float *logits, sq_error *err)
{
    const cuda_state *s = (const cuda_state *)ctx->impl;
    const sq_batch_seq one = {ctx, tokens, pos, mask, n, logits};
    return s->bf16 ? forward_t<1>(&one, 1, err) : forward_t<0>(&one, 1, err);
}

/* sq_context_forward_batch on CUDA: the contexts (checked by context.c: distinct, one model)
 * must also share the weights, i.e. have one dtype and one mode (on device or offload). */
static int cuda_forward_batch(const sq_batch_seq *seqs, int b, sq_error *err)
{
    const cuda_state *s0 = (const cuda_state *)seqs[0].ctx->impl;
    for (int k = 1; k < b; k++) {
        const cuda_state *sk = (const cuda_state *)seqs[k].ctx->impl;
        if (sk->w != s0->w)
            return sq_error_set(err, SQ_EUSAGE, "forward batch: sequence %d's context has %s%s "
                                "weights, sequence 0's %s%s (a batch shares one set)", k,
                                sk->bf16 ? "bf16" : "f16", sk->offload ? " offloaded" : "",
                                s0->bf16 ? "bf16" : "f16", s0->offload ? " offloaded" : "");
    }
    return s0->bf16 ? forward_t<1>(seqs, b, err) : forward_t<0>(seqs, b, err);
}

static int cuda_commit(sq_context *ctx, const int32_t *keep, int nkeep, sq_error *err)
{
    const sq_model_config *c = &ctx->model->config;
    cuda_state *s = (cuda_state *)ctx->impl;
    const size_t kv_dim = (size_t)c->n_kv_heads * c->head_dim;
    const int C = ctx->n_committed;
    cudaStream_t st = s->stream;
    CUDA_CHECK(cudaSetDevice(s->device));
    CUDA_CHECK(cudaMemcpyAsync(s->d_keep, keep, (size_t)nkeep * sizeof *keep,
                               cudaMemcpyHostToDevice, st));
    for (int l = 0; l < c->n_layers; l++) {
        uint16_t *caches[2] = {s->k_cache, s->v_cache};
        for (int which = 0; which < 2; which++) {
            uint16_t *base = caches[which] + (size_t)l * s->slots * kv_dim;
            k_gather<<<nkeep, 256, 0, st>>>(s->gather, base, s->d_keep, C, (int)kv_dim);
            CUDA_CHECK_LAUNCH();
            CUDA_CHECK(cudaMemcpyAsync(base + (size_t)C * kv_dim, s->gather,
                                       (size_t)nkeep * kv_dim * sizeof(uint16_t),
                                       cudaMemcpyDeviceToDevice, st));
        }
    }
    if (s->d_slot_pos && nkeep > 0) {   /* the kept slots' positions, the same gather */
        int32_t *tmp = (int32_t *)malloc((size_t)nkeep * sizeof(int32_t));
        if (!tmp)
            return sq_error_oom(err, "commit scratch");
        for (int k = 0; k < nkeep; k++)
            tmp[k] = s->h_slot_pos[C + keep[k]];
        memcpy(s->h_slot_pos + C, tmp, (size_t)nkeep * sizeof(int32_t));
        free(tmp);
        CUDA_CHECK(cudaMemcpyAsync(s->d_slot_pos + C, s->h_slot_pos + C,
                                   (size_t)nkeep * sizeof(int32_t), cudaMemcpyHostToDevice, st));
    }
    CUDA_CHECK(cudaStreamSynchronize(st));
    return SQ_OK;
}

static const char *cuda_device_name(const sq_context *ctx)
{
    return ((const cuda_state *)ctx->impl)->name;
}

extern "C" int sq_cuda_device_count_impl(sq_error *err)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        sq_error_set(err, SQ_EUSAGE, "CUDA backend: no usable CUDA device: cudaGetDeviceCount: "
                     "%s", cudaGetErrorString(e));
        return 0;
    }
    if (n < 1)
        sq_error_set(err, SQ_EUSAGE, "CUDA backend: no CUDA device");
    return n;
}

extern "C" const sq_backend_ops sq_backend_cuda = {
    "cuda", cuda_init, cuda_free, cuda_forward, cuda_commit, cuda_device_name,
    cuda_forward_batch,
};
