/* Per-element arithmetic of the runtime's kernels, shared by the CPU backend (runtime/cpu.c),
 * the verifier (libsequoia/verify/), the CUDA kernels (runtime/cuda_*.cu) and the CPU tests
 * (tests/test_kernels.c). Each function computes one element, one pair or one merge step; the
 * loops, reductions and memory plumbing around them belong to each backend. A CUDA kernel and
 * the CPU path therefore run the same formula, and what cannot be tested without a GPU is only
 * the launch and the memory traffic.
 *
 * Plain C11 that nvcc also compiles as C++ (SQ_HD marks them __host__ __device__ there). */
#ifndef SQ_RUNTIME_KERNELS_H
#define SQ_RUNTIME_KERNELS_H

#include <math.h>
#include <stdint.h>
#include <string.h>

/* SQ_HD and the sampling formulas (softmax with temperature, residual, Gumbel keys, rank
 * order, counter-based uniforms) belong to the verification rule, which the CUDA sampler
 * shares with the host verifier. */
#include "libsequoia/verify/formulas.h"

/* ---- RMSNorm: out_k = w_k * (x_k * scale), scale = 1 / sqrt(mean(x^2) + eps) ---------------- */

SQ_HD static inline float sq_k_rms_scale(float sumsq, int dim, float eps)
{
    return 1.0f / sqrtf(sumsq / (float)dim + eps);
}

SQ_HD static inline float sq_k_rmsnorm(float x, float scale, float weight)
{
    return weight * (x * scale);
}

/* ---- RoPE (Hugging Face rotate_half: element k of a head pairs with k + head_dim/2) -------- */

/* inv_freq[i] = 1 / theta^(2i / head_dim), in float32 as transformers computes it. */
SQ_HD static inline float sq_k_rope_inv_freq(int i, int head_dim, float theta)
{
    return 1.0f / powf(theta, (float)(2 * i) / (float)head_dim);
}

/* Rotates the pair (x0, x1) = (v[k], v[k + half]) by the angle whose cosine and sine are c, s. */
SQ_HD static inline void sq_k_rope_rotate(float *x0, float *x1, float c, float s)
{
    float a = *x0, b = *x1;
    *x0 = a * c - b * s;
    *x1 = b * c + a * s;
}

/* ---- SwiGLU: silu(gate) * up ---------------------------------------------------------------- */

SQ_HD static inline float sq_k_silu_mul(float gate, float up)
{
    return gate / (1.0f + expf(-gate)) * up;
}

/* ---- GeGLU (Gemma): gelu_tanh(gate) * up, the tanh approximation of GELU
 * (PyTorch's gelu(approximate="tanh"), transformers' gelu_pytorch_tanh) ------------------------ */

SQ_HD static inline float sq_k_gelu_tanh(float x)
{
    const float k = 0.7978845608028654f;   /* sqrt(2 / pi) */
    return 0.5f * x * (1.0f + tanhf(k * (x + 0.044715f * x * x * x)));
}

SQ_HD static inline float sq_k_gelu_tanh_mul(float gate, float up)
{
    return sq_k_gelu_tanh(gate) * up;
}

/* ---- soft cap (Gemma-2's attention scores and final logits): cap * tanh(x / cap) ------------ */

SQ_HD static inline float sq_k_softcap(float x, float cap)
{
    return cap * tanhf(x / cap);
}

/* ---- attention softmax ------------------------------------------------------------------------ */

/* Two-pass form: the unnormalised weight of a score against the row maximum (-inf: masked). */
SQ_HD static inline float sq_k_attn_exp(float score, float max)
{
    return score == -INFINITY ? 0.0f : expf(score - max);
}

/* One-pass (online) form: a running maximum m and sum l of exp(score - m). Pushing a score, or
 * merging another partial state, returns the factor `alpha` by which the caller rescales its
 * weighted accumulator and the weight `beta` of what is added:
 *     acc <- alpha * acc + beta * v        (push)
 *     acc <- alpha * acc + beta * acc_o    (merge)
 * and at the end out = acc / l. A state that has seen only -inf scores has m = -inf, l = 0. */
typedef struct sq_k_online {
    float m;
    float l;
} sq_k_online;

SQ_HD static inline sq_k_online sq_k_online_init(void)
{
    sq_k_online s;
    s.m = -INFINITY;
    s.l = 0.0f;
    return s;
}

SQ_HD static inline void sq_k_online_merge(sq_k_online *st, sq_k_online o, float *alpha,
                                           float *beta)
{
    float m = st->m > o.m ? st->m : o.m;
    if (m == -INFINITY) {   /* both empty */
        *alpha = 1.0f;
        *beta = 0.0f;
        return;
    }
    float a = st->m == -INFINITY ? 0.0f : expf(st->m - m);
    float b = o.m == -INFINITY ? 0.0f : expf(o.m - m);
    st->l = st->l * a + o.l * b;
    st->m = m;
    *alpha = a;
    *beta = b;
}

SQ_HD static inline void sq_k_online_push(sq_k_online *st, float score, float *alpha, float *beta)
{
    sq_k_online one;
    one.m = score;
    one.l = score == -INFINITY ? 0.0f : 1.0f;
    sq_k_online_merge(st, one, alpha, beta);
}

/* ---- 16-bit weights (stored as uint16_t bit patterns) ----------------------------------------- */

/* Converted by the project's one codec, sq_f16_to_f32, sq_f32_to_f16, sq_bf16_to_f32 and
 * sq_f32_to_bf16 (host and device alike). */
#include "libsequoia/base/half.h"

#endif
