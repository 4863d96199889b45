/* The skinny products of runtime/cpu_matmul.c for one instruction set: cpu_matmul.c includes
 * this file once per set, under `#pragma GCC target`, with these defined:
 *   ISA_SFX  the functions' suffix (scalar, avx2, avx512)
 *   ISA_VL   float lanes of one vector: 16 (a zmm), 8 (a ymm) or 4 (SSE2 / NEON / generic)
 *   ISA_F16  how VL f16 values widen: 2 AVX-512F's vcvtph2ps, 1 F16C's, 0 integer arithmetic
 *            on the vector (exact, the result of libsequoia/base/half.h up to NaN payloads)
 *   ISA_FMA  1: the multiply-adds are fused (_mm512/_mm256_fmadd_ps); 0: a multiply and an add
 *   ISA_R, ISA_J  the register block: R weight rows times J input rows
 *   ISA_XFIRST    1: a step loads the J input vectors, then the weight vectors one at a time
 *                 (R x J + J + 1 registers); 0: the R weight vectors, then the inputs one at a
 *                 time (R x J + R + 1)
 *   ISA_SHAPE_N, ISA_SHAPE_R(n), ISA_SHAPE_J(n)  optional: the block for products of n <=
 *                 ISA_SHAPE_N rows (few rows want more weight rows per block), R = 0 for the
 *                 main one; without them every n runs on R x J
 * Not a header of its own: cpu_matmul.c includes it, and tests/bench/bench_skinny.c includes it
 * with other blocks to measure them (docs/benchmarks.md, "The skinny product").
 *
 * Register blocking: a block is R weight rows (output columns o .. o+R-1) times J input rows
 * (j .. j+J-1). Its R x J accumulators are VL-lane vectors (the sum over d_in runs in VL
 * interleaved partial sums, added as a tree at the end); one step over k loads R weight vectors
 * and J input vectors and does R x J multiply-adds. The block must fit the register file: R x J
 * accumulators plus the vectors a step holds (ISA_XFIRST), at most 16 ymm on AVX2 and 32 zmm on
 * AVX-512 (and 16 xmm on the baseline x86-64 the portable path runs on there); past that the
 * accumulators spill to the stack every step (the 4 x 4 block of 16-lane vectors, 32 ymm on
 * AVX2, ran 3.5x slower than OpenBLAS: issue 27). At J = 1 (one token) the loop is a streaming
 * dot product bound by memory. At the end of a block the R accumulators of each input row are
 * reduced together (ISA_FN(reduce): shuffles and adds that serve several accumulators at once,
 * each accumulator's adds those of a horizontal sum) and stored as R contiguous outputs. Every weight row of a block is read from memory once and then
 * from L1 for the next J-block of inputs; the inputs (n rows) stay in L1/L2 across all weight
 * rows.
 *
 * 16-bit weights are widened to float32 in registers as they are loaded (WT, a constant at every
 * call site): bf16 is a 16-bit shift of each lane, f16 the conversion of ISA_F16. With many
 * input rows each weight would be widened once per J-block, so above ISA_WIDEN_ROWS rows R rows
 * at a time are widened once into a float32 buffer (R x d_in floats, L1-sized for the models'
 * widths) and the float32 block runs on it. Either way the products and sums are the float32 kernel's on the widened
 * values, so a 16-bit matrix gives bitwise the float32 result of its widened copy. */

/* ---- once: what every instruction set's body uses ---------------------------------------- */
#ifndef SQ_CPU_MATMUL_ISA_COMMON
#define SQ_CPU_MATMUL_ISA_COMMON

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "libsequoia/base/half.h"

/* The most weight rows of any block (the size of the blocks' arrays of accumulators; what a
 * block does not use the compiler drops). */
#define ISA_RMAX 12
#define ISA_JMAX 8

/* The weights' element type inside the kernels (a constant per compiled body). */
enum { WT_F32 = 0, WT_BF16 = 1, WT_F16 = 2 };

typedef float v16f __attribute__((vector_size(64)));
typedef float v8f __attribute__((vector_size(32)));
typedef float v4f __attribute__((vector_size(16)));
typedef uint16_t v16h __attribute__((vector_size(32)));
typedef uint16_t v8h __attribute__((vector_size(16)));
typedef uint16_t v4h __attribute__((vector_size(8)));
typedef uint32_t v16u __attribute__((vector_size(64)));
typedef uint32_t v8u __attribute__((vector_size(32)));
typedef uint32_t v4u __attribute__((vector_size(16)));

/* One scalar weight (the tails of d_in not a multiple of VL) as float32. */
static inline __attribute__((always_inline)) float ld1(const void *w, size_t i, int wt)
{
    if (wt == WT_BF16)
        return sq_bf16_to_f32(((const uint16_t *)w)[i]);
    if (wt == WT_F16)
        return sq_f16_to_f32(((const uint16_t *)w)[i]);
    return ((const float *)w)[i];
}
#endif

/* Rows above which 16-bit weights of type WT are widened once into a buffer: on the portable
 * path as soon as there are two blocks of inputs (its f16 conversion is a dozen instructions a
 * vector); where one instruction converts (f16 with F16C or AVX-512F, bf16 on AVX-512), widening
 * in registers again for each block costs less than the buffer's store and reload up to four
 * blocks; bf16 on AVX2 needs a register more than the 16 the 4 x 3 block leaves (measured with
 * tests/bench/bench_skinny.c). */
#define ISA_WIDEN_ROWS(WT)                                                                      \
    ((((WT) == WT_F16 && ISA_F16 != 0) || ((WT) == WT_BF16 && ISA_VL == 16)) ? 4 * ISA_J : ISA_J)

#define ISA_CAT2(a, b) a##_##b
#define ISA_CAT(a, b)  ISA_CAT2(a, b)
#define ISA_FN(name)   ISA_CAT(name, ISA_SFX)

#if ISA_VL == 16
#define VF v16f
#define VH v16h
#define VU v16u
#elif ISA_VL == 8
#define VF v8f
#define VH v8h
#define VU v8u
#else
#define VF v4f
#define VH v4h
#define VU v4u
#endif

/* The lanes of *a summed as a tree of halves (16 -> 8 -> 4, then (0 + 2) + (1 + 3)): a
 * sequential sum would be a chain of dependent adds per accumulator. */
static inline __attribute__((always_inline)) float ISA_FN(hsum)(const VF *a)
{
    v4f l4;
#if ISA_VL == 16
    v8f lo, hi;
    memcpy(&lo, a, sizeof lo);
    memcpy(&hi, (const char *)a + sizeof lo, sizeof hi);
    lo += hi;
#elif ISA_VL == 8
    v8f lo;
    memcpy(&lo, a, sizeof lo);
#endif
#if ISA_VL >= 8
    v4f h4;
    memcpy(&l4, &lo, sizeof l4);
    memcpy(&h4, (const char *)&lo + sizeof l4, sizeof h4);
    l4 += h4;
#else
    memcpy(&l4, a, sizeof l4);
#endif
    return (l4[0] + l4[2]) + (l4[1] + l4[3]);
}

/* The reduction tree of several accumulators at once. Level w (lanes per accumulator before it:
 * VL, ..., 2) takes two vectors x and y of accumulators of w lanes and adds the low half of each
 * accumulator's lanes to its high half (lane t plus lane t + w / 2), giving one vector of twice
 * as many accumulators of w / 2 lanes. Every accumulator goes through the adds of ISA_FN(hsum) in
 * the same order (16 -> 8 -> 4 -> 2 -> 1 lanes), so its sum is bitwise hsum's; but a shuffle and
 * an add serve several accumulators, where hsum spends about eight instructions on each (the end
 * of a block cost as much as 16 steps of its loop over 256 columns: docs/benchmarks.md, "The
 * skinny product"). Levels 16 and 8 move whole 128-bit quarters and keep the accumulators in
 * order (x's, then y's); levels 4 and 2 stay within each 128-bit quarter (one-cycle shuffles)
 * and leave quarter c of the last vector holding accumulators c, c + VL / 4, c + 2 VL / 4 ...,
 * which one permutation puts back in order. */
#if ISA_VL == 16
#define ISA_LO16 0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23
#define ISA_HI16 8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31
#define ISA_LO8 0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19, 24, 25, 26, 27
#define ISA_HI8 4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22, 23, 28, 29, 30, 31
#define ISA_LO4 0, 1, 16, 17, 4, 5, 20, 21, 8, 9, 24, 25, 12, 13, 28, 29
#define ISA_HI4 2, 3, 18, 19, 6, 7, 22, 23, 10, 11, 26, 27, 14, 15, 30, 31
#define ISA_LO2 0, 2, 16, 18, 4, 6, 20, 22, 8, 10, 24, 26, 12, 14, 28, 30
#define ISA_HI2 1, 3, 17, 19, 5, 7, 21, 23, 9, 11, 25, 27, 13, 15, 29, 31
#define ISA_ORDER 0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15
#elif ISA_VL == 8
#define ISA_LO8 0, 1, 2, 3, 8, 9, 10, 11
#define ISA_HI8 4, 5, 6, 7, 12, 13, 14, 15
#define ISA_LO4 0, 1, 8, 9, 4, 5, 12, 13
#define ISA_HI4 2, 3, 10, 11, 6, 7, 14, 15
#define ISA_LO2 0, 2, 8, 10, 4, 6, 12, 14
#define ISA_HI2 1, 3, 9, 11, 5, 7, 13, 15
#define ISA_ORDER 0, 4, 1, 5, 2, 6, 3, 7
#else
#define ISA_LO4 0, 1, 4, 5
#define ISA_HI4 2, 3, 6, 7
#define ISA_LO2 0, 2, 4, 6
#define ISA_HI2 1, 3, 5, 7
#endif

/* Lanes of a and b (0 .. VL-1 from a, VL .. 2 VL-1 from b), constant indices: GCC 12 and clang
 * have __builtin_shufflevector; older GCC has __builtin_shuffle with a mask vector. */
#if defined(__clang__) || (defined(__GNUC__) && __GNUC__ >= 12 && !defined(SQ_CPU_OLD_SHUFFLE))
#define ISA_SHUF(a, b, ...) __builtin_shufflevector(a, b, __VA_ARGS__)
#else
#define ISA_SHUF(a, b, ...) __builtin_shuffle(a, b, (VU){__VA_ARGS__})
#endif

static inline __attribute__((always_inline)) void ISA_FN(half)(VF *z, const VF *x, const VF *y,
                                                               const int w)
{
    VF a = *x, b = *y, r;
#if ISA_VL == 16
    if (w == 16)
        r = ISA_SHUF(a, b, ISA_LO16) + ISA_SHUF(a, b, ISA_HI16);
    else
#endif
#if ISA_VL >= 8
    if (w == 8)
        r = ISA_SHUF(a, b, ISA_LO8) + ISA_SHUF(a, b, ISA_HI8);
    else
#endif
    if (w == 4)
        r = ISA_SHUF(a, b, ISA_LO4) + ISA_SHUF(a, b, ISA_HI4);
    else
        r = ISA_SHUF(a, b, ISA_LO2) + ISA_SHUF(a, b, ISA_HI2);
    *z = r;
}

/* The sums of the m accumulators v[0 .. m-1] (m a constant; v is overwritten) into
 * res[0 .. m-1], each bitwise ISA_FN(hsum)'s. An odd vector out at a level is paired with
 * itself. Each of the last ceil(m / VL) vectors holds VL consecutive accumulators (the pairs of
 * a level are neighbours), which the one permutation puts in order. A block reduces all its
 * R x J accumulators in one call: fewer half-empty vectors at the last levels than one call per
 * input row. */
static inline __attribute__((always_inline)) void ISA_FN(reduce)(float *res, VF *v, const int m)
{
    int cnt = m;
#pragma GCC unroll 8
    for (int w = ISA_VL; w > 1; w /= 2) {
        const int nv = (cnt + 1) / 2;
#pragma GCC unroll 64
        for (int p = 0; p < nv; p++)
            ISA_FN(half)(&v[p], &v[2 * p], &v[2 * p + 1 < cnt ? 2 * p + 1 : 2 * p], w);
        cnt = nv;
    }
#ifdef ISA_ORDER
#pragma GCC unroll 8
    for (int p = 0; p < cnt; p++)
        v[p] = ISA_SHUF(v[p], v[p], ISA_ORDER);
#endif
    memcpy(res, v, sizeof(float) * (size_t)m);
}

/* VL weights from index i of w (dtype WT) as float32 lanes, into *out (not returned: a vector
 * return wider than the baseline's would change the ABI). */
static inline __attribute__((always_inline)) void ISA_FN(ld)(VF *out, const void *w, size_t i,
                                                             const int WT)
{
    VF v;
    if (WT == WT_F32) {
        memcpy(&v, (const float *)w + i, sizeof v);
    } else if (WT == WT_BF16) {
        VH h;
        memcpy(&h, (const uint16_t *)w + i, sizeof h);
        VU u = __builtin_convertvector(h, VU) << 16;
        memcpy(&v, &u, sizeof v);
    } else {
#if ISA_F16 == 2
        __m512 f = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)((const uint16_t *)w + i)));
        memcpy(&v, &f, sizeof v);
#elif ISA_F16 == 1
        __m256 f = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)w + i)));
        memcpy(&v, &f, sizeof v);
#else
        /* exponent and mantissa moved to float32's places give the value times 2^-112 (a float
         * subnormal for an f16 subnormal, exactly); one multiply by 2^112 rescales; infinities
         * and NaNs (exponent 31) get float32's all-ones exponent instead */
        VH h;
        memcpy(&h, (const uint16_t *)w + i, sizeof h);
        VU x = __builtin_convertvector(h, VU);
        VU em = (x & 0x7fffu) << 13, sign = (x & 0x8000u) << 16;
        VF f;
        memcpy(&f, &em, sizeof f);
        f *= 0x1p112f;
        VU b;
        memcpy(&b, &f, sizeof b);
        VU special = (VU)((x & 0x7c00u) == 0x7c00u);   /* all ones where inf / NaN */
        b = (b & ~special) | ((em | 0x7f800000u) & special);
        b |= sign;
        memcpy(&v, &b, sizeof v);
#endif
    }
    *out = v;
}

/* v is kept in a register: with few input rows (J = 1 to 3) GCC folds the load of a weight vector
 * into each of its multiply-adds, loading it J times (measured: the 8 x 2 block read 16 weight
 * vectors a step instead of 8, 1.25x slower than OpenBLAS). Only there: with more rows GCC loads
 * it once, and the barrier made it store the vector to the stack on every step. */
#if defined(__x86_64__) && defined(__GNUC__)
#define ISA_IN_REG(v) __asm__("" : "+v"(v))
#elif defined(__aarch64__) && defined(__GNUC__)
#define ISA_IN_REG(v) __asm__("" : "+w"(v))
#else
#define ISA_IN_REG(v) ((void)0)
#endif

/* acc += a * b on lvalues of type VF, fused on the sets with FMA: ISO C (-std=c11) turns off
 * GCC's contraction of a * b + c, and separate multiplies and adds run at half the rate with
 * twice the latency. A macro, not a function: a pointer to an accumulator would keep the block's
 * accumulators in memory. */
#if ISA_FMA && ISA_VL == 16
#define ISA_MADD(acc, a, b) ((acc) = (VF)_mm512_fmadd_ps((__m512)(a), (__m512)(b), (__m512)(acc)))
#elif ISA_FMA && ISA_VL == 8
#define ISA_MADD(acc, a, b) ((acc) = (VF)_mm256_fmadd_ps((__m256)(a), (__m256)(b), (__m256)(acc)))
#else
#define ISA_MADD(acc, a, b) ((acc) += (a) * (b))
#endif

/* One R x J block: output columns o .. o+R-1 from weight rows wo .. wo+R-1 of w, input rows
 * j .. j+jn-1 (jn <= J; the block's other rows repeat the last one and are not stored). R, J and
 * WT are constants at every call site, so the loops over them unroll and the accumulators live
 * in registers. */
static inline __attribute__((always_inline)) void ISA_FN(block)(float *out, const float *in,
                                                                const void *w, int d_in,
                                                                int d_out, int accumulate, int o,
                                                                int wo, int j, int jn,
                                                                const int R, const int J,
                                                                const int WT)
{
    VF acc[ISA_RMAX][ISA_JMAX];
#pragma GCC unroll 16
    for (int r = 0; r < R; r++)
#pragma GCC unroll 16
        for (int i = 0; i < J; i++)
            acc[r][i] = (VF){0};
    size_t wr[ISA_RMAX];
    const float *xr[ISA_JMAX];
#pragma GCC unroll 16
    for (int r = 0; r < R; r++)
        wr[r] = (size_t)(wo + r) * (size_t)d_in;
#pragma GCC unroll 16
    for (int i = 0; i < J; i++)
        xr[i] = in + (size_t)(j + (i < jn ? i : jn - 1)) * (size_t)d_in;
    const int kv = d_in & ~(ISA_VL - 1);
    for (int k = 0; k < kv; k += ISA_VL) {
#if ISA_XFIRST
        /* the J input vectors in registers, then one weight vector at a time */
        VF xv[ISA_JMAX];
#pragma GCC unroll 16
        for (int i = 0; i < J; i++)
            memcpy(&xv[i], xr[i] + k, sizeof xv[i]);
#pragma GCC unroll 16
        for (int r = 0; r < R; r++) {
            VF wv;
            ISA_FN(ld)(&wv, w, wr[r] + (size_t)k, WT);
            if (J <= 3)
                ISA_IN_REG(wv);
#pragma GCC unroll 16
            for (int i = 0; i < J; i++)
                ISA_MADD(acc[r][i], wv, xv[i]);
        }
#else
        /* the R weight vectors in registers, then one input vector at a time */
        VF wv[ISA_RMAX];
#pragma GCC unroll 16
        for (int r = 0; r < R; r++)
            ISA_FN(ld)(&wv[r], w, wr[r] + (size_t)k, WT);
#pragma GCC unroll 16
        for (int i = 0; i < J; i++) {
            VF xv;
            memcpy(&xv, xr[i] + k, sizeof xv);
#pragma GCC unroll 16
            for (int r = 0; r < R; r++)
                ISA_MADD(acc[r][i], wv[r], xv);
        }
#endif
    }
    /* all R x J sums of the block at once (input row i's R contiguous output columns at
     * s[i R .. i R + R - 1]) */
    float sums[ISA_RMAX * ISA_JMAX];
    if (R * J == 1) {
        sums[0] = ISA_FN(hsum)(&acc[0][0]);
    } else {
        VF t[ISA_RMAX * ISA_JMAX];
#pragma GCC unroll 16
        for (int i = 0; i < J; i++)
#pragma GCC unroll 16
            for (int r = 0; r < R; r++)
                t[i * R + r] = acc[r][i];
        ISA_FN(reduce)(sums, t, R * J);
    }
#pragma GCC unroll 16
    for (int i = 0; i < J; i++) {
        if (i >= jn)
            break;
        float *s = sums + i * R;
        if (kv < d_in)
            for (int r = 0; r < R; r++)
                for (int k = kv; k < d_in; k++)
                    s[r] += ld1(w, wr[r] + (size_t)k, WT) * xr[i][k];
        float *dst = out + (size_t)(j + i) * (size_t)d_out + (size_t)o;
        if (accumulate) {
#pragma GCC unroll 16
            for (int r = 0; r < R; r++)
                dst[r] += s[r];
        } else {
#pragma GCC unroll 16
            for (int r = 0; r < R; r++)
                dst[r] = s[r];
        }
    }
}

/* All input rows against R weight rows at wo (output columns at o), in blocks of J rows; a last
 * partial block of fewer rows runs as a block of that many (before, a partial block of float32
 * rows ran as a full block with its missing rows repeated: that measured faster while GCC loaded
 * each weight vector once per input row, and slower once it stopped, ISA_IN_REG). R, J, WT are
 * constants. An element's sum does not depend on the block. */
static inline __attribute__((always_inline)) void ISA_FN(rows)(float *out, const float *in,
                                                               const void *w, int n, int d_in,
                                                               int d_out, int accumulate, int o,
                                                               int wo, const int R, const int J,
                                                               const int WT)
{
    int j = 0;
    for (; j + J <= n; j += J)
        ISA_FN(block)(out, in, w, d_in, d_out, accumulate, o, wo, j, J, R, J, WT);
    switch (n - j) {
#if ISA_JMAX > 7
    case 7: if (J > 7) ISA_FN(block)(out, in, w, d_in, d_out, accumulate, o, wo, j, 7, R, 7, WT); break;
#endif
    case 6: if (J > 6) ISA_FN(block)(out, in, w, d_in, d_out, accumulate, o, wo, j, 6, R, 6, WT); break;
    case 5: if (J > 5) ISA_FN(block)(out, in, w, d_in, d_out, accumulate, o, wo, j, 5, R, 5, WT); break;
    case 4: if (J > 4) ISA_FN(block)(out, in, w, d_in, d_out, accumulate, o, wo, j, 4, R, 4, WT); break;
    case 3: if (J > 3) ISA_FN(block)(out, in, w, d_in, d_out, accumulate, o, wo, j, 3, R, 3, WT); break;
    case 2: if (J > 2) ISA_FN(block)(out, in, w, d_in, d_out, accumulate, o, wo, j, 2, R, 2, WT); break;
    case 1: ISA_FN(block)(out, in, w, d_in, d_out, accumulate, o, wo, j, 1, R, 1, WT); break;
    default: break;
    }
}

/* All n input rows against output columns [o0, o1): R x J blocks, then the columns left over in
 * blocks of 4 x J (when R > 4), of 2 x J (when R > 2: a 1 x J block has J chains of
 * multiply-adds, too few to keep the FMA units busy) and of 1 x J. */
static inline __attribute__((always_inline)) void ISA_FN(cols)(float *out, const float *in,
                                                               const void *w, int n, int d_in,
                                                               int d_out, int accumulate, int o0,
                                                               int o1, const int R, const int J,
                                                               const int WT)
{
    int o = o0;
    for (; o + R <= o1; o += R)
        ISA_FN(rows)(out, in, w, n, d_in, d_out, accumulate, o, o, R, J, WT);
    if (R > 4)
        for (; o + 4 <= o1; o += 4)
            ISA_FN(rows)(out, in, w, n, d_in, d_out, accumulate, o, o, 4, J, WT);
    if (R > 2)
        for (; o + 2 <= o1; o += 2)
            ISA_FN(rows)(out, in, w, n, d_in, d_out, accumulate, o, o, 2, J, WT);
    for (; o < o1; o++)
        ISA_FN(rows)(out, in, w, n, d_in, d_out, accumulate, o, o, 1, J, WT);
}

static void ISA_FN(widen)(float *dst, const void *src, int wt, size_t count);

/* The block for a product of few rows: up to ISA_SHAPE_N rows (default 0, none) the instruction
 * set names a block of ISA_SHAPE_R(n) weight rows x ISA_SHAPE_J(n) input rows for each n
 * (runtime/cpu_matmul.c), chosen per row count by measurement; above, and where ISA_SHAPE_R(n)
 * is 0, ISA_R x ISA_J. */
#ifndef ISA_SHAPE_N
#define ISA_SHAPE_N 0
#define ISA_SHAPE_R(n) ISA_R
#define ISA_SHAPE_J(n) ISA_J
#define ISA_SHAPE_DEFAULT 1
#endif

/* Each row count's blocks in a function of their own (per dtype), and the main block's too:
 * inlined together into one function, their loops lost registers to each other and spilled
 * (measured: up to 1.3x slower). */
#define ISA_SHAPE_FN(k)                                                                         \
    static __attribute__((noinline)) void ISA_CAT(ISA_FN(shape), k)(                          \
        float *out, const float *in, const void *w, int wt, int d_in, int d_out,               \
        int accumulate, int o0, int o1)                                                         \
    {                                                                                           \
        const int R = ISA_SHAPE_R(k) ? ISA_SHAPE_R(k) : ISA_R;                                  \
        if (wt == WT_BF16)                                                                      \
            ISA_FN(cols)(out, in, w, k, d_in, d_out, accumulate, o0, o1, R, ISA_SHAPE_J(k),     \
                         WT_BF16);                                                              \
        else if (wt == WT_F16)                                                                  \
            ISA_FN(cols)(out, in, w, k, d_in, d_out, accumulate, o0, o1, R, ISA_SHAPE_J(k),     \
                         WT_F16);                                                               \
        else                                                                                    \
            ISA_FN(cols)(out, in, w, k, d_in, d_out, accumulate, o0, o1, R, ISA_SHAPE_J(k),     \
                         WT_F32);                                                               \
    }
#if ISA_SHAPE_N >= 1
ISA_SHAPE_FN(1)
#endif
#if ISA_SHAPE_N >= 2
ISA_SHAPE_FN(2)
#endif
#if ISA_SHAPE_N >= 3
ISA_SHAPE_FN(3)
#endif
#if ISA_SHAPE_N >= 4
ISA_SHAPE_FN(4)
#endif
#if ISA_SHAPE_N >= 5
ISA_SHAPE_FN(5)
#endif
#if ISA_SHAPE_N >= 6
ISA_SHAPE_FN(6)
#endif
#if ISA_SHAPE_N >= 7
ISA_SHAPE_FN(7)
#endif
#if ISA_SHAPE_N >= 8
ISA_SHAPE_FN(8)
#endif
#if ISA_SHAPE_N >= 9
ISA_SHAPE_FN(9)
#endif
#if ISA_SHAPE_N > 9
#error "ISA_SHAPE_N: at most 9"
#endif
#undef ISA_SHAPE_FN

#define ISA_SHAPE_CASE(k)                                                                       \
    case k:                                                                                     \
        if (ISA_SHAPE_R(k) == 0)                                                                \
            break;                                                                              \
        ISA_CAT(ISA_FN(shape), k)(out, in, w, WT, d_in, d_out, accumulate, o0, o1);             \
        return;

/* The main block over all n rows, in a function of its own (see ISA_SHAPE_FN). */
static __attribute__((noinline)) void ISA_FN(skinny_main)(float *out, const float *in,
                                                          const void *w, int wt, int n, int d_in,
                                                          int d_out, int accumulate, int o0,
                                                          int o1)
{
    if (wt == WT_BF16)
        ISA_FN(cols)(out, in, w, n, d_in, d_out, accumulate, o0, o1, ISA_R, ISA_J, WT_BF16);
    else if (wt == WT_F16)
        ISA_FN(cols)(out, in, w, n, d_in, d_out, accumulate, o0, o1, ISA_R, ISA_J, WT_F16);
    else
        ISA_FN(cols)(out, in, w, n, d_in, d_out, accumulate, o0, o1, ISA_R, ISA_J, WT_F32);
}

/* 16-bit weights and several J-blocks of inputs, which would widen every weight again: R rows
 * at a time widened once into a float32 buffer (the same values), the float32 blocks on it. A
 * function of its own (not inlined into skinny_wt): inlined beside the blocks of the other row
 * counts its loop lost registers and ran 1.3x slower. -1 when the buffer cannot be had. */
static __attribute__((noinline)) int ISA_FN(skinny_buf)(float *out, const float *in,
                                                        const void *w, int wt, int n, int d_in,
                                                        int d_out, int accumulate, int o0, int o1)
{
    float *buf = malloc(sizeof(float) * ISA_R * (size_t)d_in + 1);
    if (!buf)
        return -1;
    for (int o = o0; o < o1; o += ISA_R) {
        const int r = o1 - o < ISA_R ? o1 - o : ISA_R;
        ISA_FN(widen)(buf, (const uint16_t *)w + (size_t)o * (size_t)d_in, wt,
                      (size_t)r * (size_t)d_in);
        if (r == ISA_R)
            ISA_FN(rows)(out, in, buf, n, d_in, d_out, accumulate, o, 0, ISA_R, ISA_J, WT_F32);
        else
            for (int k = 0; k < r; k++)
                ISA_FN(rows)(out, in, buf, n, d_in, d_out, accumulate, o + k, k, 1, ISA_J,
                             WT_F32);
    }
    free(buf);
    return 0;
}

static inline __attribute__((always_inline)) void ISA_FN(skinny_wt)(float *out, const float *in,
                                                                    const void *w, int n,
                                                                    int d_in, int d_out,
                                                                    int accumulate, int o0,
                                                                    int o1, const int WT)
{
    if (n <= ISA_SHAPE_N && (WT == WT_F32 || n <= ISA_WIDEN_ROWS(WT))) {
        switch (n) {
#if ISA_SHAPE_N >= 1
            ISA_SHAPE_CASE(1)
#endif
#if ISA_SHAPE_N >= 2
            ISA_SHAPE_CASE(2)
#endif
#if ISA_SHAPE_N >= 3
            ISA_SHAPE_CASE(3)
#endif
#if ISA_SHAPE_N >= 4
            ISA_SHAPE_CASE(4)
#endif
#if ISA_SHAPE_N >= 5
            ISA_SHAPE_CASE(5)
#endif
#if ISA_SHAPE_N >= 6
            ISA_SHAPE_CASE(6)
#endif
#if ISA_SHAPE_N >= 7
            ISA_SHAPE_CASE(7)
#endif
#if ISA_SHAPE_N >= 8
            ISA_SHAPE_CASE(8)
#endif
#if ISA_SHAPE_N >= 9
            ISA_SHAPE_CASE(9)
#endif
        default: break;
        }
    }
    if (WT != WT_F32 && n > ISA_WIDEN_ROWS(WT) &&
        ISA_FN(skinny_buf)(out, in, w, WT, n, d_in, d_out, accumulate, o0, o1) == 0)
        return;
    ISA_FN(skinny_main)(out, in, w, WT, n, d_in, d_out, accumulate, o0, o1);
}
#undef ISA_SHAPE_CASE

/* The skinny product for weights of dtype wt (one compiled body per dtype). Input rows that
 * do not start on a vector boundary (the runtime's activations are malloc'ed: 16-byte aligned)
 * are copied first into an aligned buffer on the stack, up to ISA_XBUF floats: a misaligned
 * 64-byte load reads two cache lines, and with the weights' loads (misaligned too, where the
 * model file puts them) the loads, not the multiply-adds, set the pace (measured on AVX-512:
 * 4 rows x 256 columns, 1.66 against 1.48 us for 128 output columns; docs/benchmarks.md, "The
 * skinny product"). The values are the same, and so are the sums. */
#define ISA_XBUF 8192
static void ISA_FN(skinny)(float *out, const float *in, const void *w, int wt, int n, int d_in,
                           int d_out, int accumulate, int o0, int o1)
{
#if ISA_VL >= 8
    float xbuf[ISA_XBUF] __attribute__((aligned(64)));
    if (((uintptr_t)in & (sizeof(VF) - 1)) != 0 && d_in % ISA_VL == 0 &&
        (size_t)n * (size_t)d_in <= ISA_XBUF) {
        memcpy(xbuf, in, sizeof(float) * (size_t)n * (size_t)d_in);
        in = xbuf;
    }
#endif
    if (wt == WT_BF16)
        ISA_FN(skinny_wt)(out, in, w, n, d_in, d_out, accumulate, o0, o1, WT_BF16);
    else if (wt == WT_F16)
        ISA_FN(skinny_wt)(out, in, w, n, d_in, d_out, accumulate, o0, o1, WT_F16);
    else
        ISA_FN(skinny_wt)(out, in, w, n, d_in, d_out, accumulate, o0, o1, WT_F32);
}

/* count 16-bit values of dtype wt from src to float32 dst (the panels of the BLAS path). */
static void ISA_FN(widen)(float *dst, const void *src, int wt, size_t count)
{
    size_t i = 0;
    if (wt == WT_BF16)
        for (; i + ISA_VL <= count; i += ISA_VL) {
            VF v;
            ISA_FN(ld)(&v, src, i, WT_BF16);
            memcpy(dst + i, &v, sizeof v);
        }
    else
        for (; i + ISA_VL <= count; i += ISA_VL) {
            VF v;
            ISA_FN(ld)(&v, src, i, WT_F16);
            memcpy(dst + i, &v, sizeof v);
        }
    for (; i < count; i++)
        dst[i] = ld1(src, i, wt);
}

#undef ISA_WIDEN_ROWS
#undef ISA_XBUF
#ifdef ISA_SHAPE_DEFAULT
#undef ISA_SHAPE_N
#undef ISA_SHAPE_R
#undef ISA_SHAPE_J
#undef ISA_SHAPE_DEFAULT
#endif
#undef ISA_LO16
#undef ISA_HI16
#undef ISA_LO8
#undef ISA_HI8
#undef ISA_LO4
#undef ISA_HI4
#undef ISA_LO2
#undef ISA_HI2
#undef ISA_ORDER
#undef ISA_SHUF
#undef ISA_MADD
#undef ISA_IN_REG
#undef VF
#undef VH
#undef VU
#undef ISA_FN
#undef ISA_CAT
#undef ISA_CAT2
