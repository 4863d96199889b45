/* The CPU products of runtime/cpu_matmul.c for one instruction set: cpu_matmul.c includes this
 * file once per set, under `#pragma GCC target`, with ISA_SFX (the functions' suffix) and ISA_F16
 * (how 16 f16 values widen: 2 AVX-512F's vcvtph2ps, 1 F16C's twice, 0 the codec of
 * libsequoia/base/half.h lane by lane) defined. Not a header of its own: nothing else includes it.
 *
 * Register blocking: a block is R weight rows (output columns o .. o+R-1) times J input rows
 * (j .. j+J-1), R, J <= 4. Its R x J accumulators are 16-lane vectors; one step over k loads R
 * weight vectors and J input vectors and does R x J multiply-adds, so at R = J = 4 there are
 * two multiply-adds per load and the loop runs near the FMA units' rate, while at J = 1 (one
 * token) it is a streaming dot product bound by memory. Every weight row of a block is read
 * from memory once and then from L1 for the next J-block of inputs (4 rows of 1408 floats are
 * 22 KB). The inputs (n rows) stay in L1/L2 across all weight rows.
 *
 * 16-bit weights are widened to float32 in registers as they are loaded (WT, a constant at every
 * call site): bf16 is a 16-bit shift of each lane, f16 the conversion instruction of ISA_F16. The
 * products and sums are the float32 kernel's on the widened values, so a 16-bit matrix gives
 * bitwise the float32 result of its widened copy. */
#define ISA_CAT2(a, b) a##_##b
#define ISA_CAT(a, b)  ISA_CAT2(a, b)
#define ISA_FN(name)   ISA_CAT(name, ISA_SFX)

/* 16 weights from index i of w (dtype WT) as float32 lanes, into *out (not returned: a
 * 64-byte vector return would change the ABI on the sets without AVX-512). */
static inline __attribute__((always_inline)) void ISA_FN(ld16)(v16f *out, const void *w,
                                                               size_t i, const int WT)
{
    v16f v;
    if (WT == WT_F32) {
        memcpy(&v, (const float *)w + i, sizeof v);
    } else if (WT == WT_BF16) {
        v16h h;
        memcpy(&h, (const uint16_t *)w + i, sizeof h);
        v16u u = __builtin_convertvector(h, v16u) << 16;
        memcpy(&v, &u, sizeof v);
    } else {
#if ISA_F16 == 2
        __m512 f = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)((const uint16_t *)w + i)));
        memcpy(&v, &f, sizeof v);
#elif ISA_F16 == 1
        const uint16_t *p = (const uint16_t *)w + i;
        __m256 lo = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
        __m256 hi = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p + 8)));
        memcpy(&v, &lo, sizeof lo);
        memcpy((char *)&v + sizeof lo, &hi, sizeof hi);
#else
        const uint16_t *p = (const uint16_t *)w + i;
        for (int l = 0; l < 16; l++)
            v[l] = sq_f16_to_f32(p[l]);
#endif
    }
    *out = v;
}

/* One R x J block; R, J and WT are constants at every call site, so the loops over them unroll
 * and the accumulators live in registers. */
static inline __attribute__((always_inline)) void ISA_FN(block)(float *out, const float *in,
                                                                const void *w, int d_in,
                                                                int d_out, int accumulate, int o,
                                                                int j, const int R, const int J,
                                                                const int WT)
{
    v16f acc[4][4];
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int i = 0; i < J; i++)
            acc[r][i] = (v16f){0};
    size_t wr[4];
    const float *xr[4];
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
        wr[r] = (size_t)(o + r) * (size_t)d_in;
#pragma GCC unroll 4
    for (int i = 0; i < J; i++)
        xr[i] = in + (size_t)(j + i) * (size_t)d_in;
    const int k16 = d_in & ~15;
    for (int k = 0; k < k16; k += 16) {
        v16f wv[4], xv[4];
#pragma GCC unroll 4
        for (int r = 0; r < R; r++)
            ISA_FN(ld16)(&wv[r], w, wr[r] + (size_t)k, WT);
#pragma GCC unroll 4
        for (int i = 0; i < J; i++)
            memcpy(&xv[i], xr[i] + k, sizeof xv[i]);
#pragma GCC unroll 4
        for (int r = 0; r < R; r++)
#pragma GCC unroll 4
            for (int i = 0; i < J; i++)
                acc[r][i] += wv[r] * xv[i];
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int i = 0; i < J; i++) {
            float s = hsum16(&acc[r][i]);
            for (int k = k16; k < d_in; k++)
                s += ld1(w, wr[r] + (size_t)k, WT) * xr[i][k];
            float *dst = out + (size_t)(j + i) * (size_t)d_out + (size_t)(o + r);
            *dst = accumulate ? *dst + s : s;
        }
}

/* All input rows against R weight rows at o, in J-blocks of 4 and a last partial block. */
static inline __attribute__((always_inline)) void ISA_FN(rows)(float *out, const float *in,
                                                               const void *w, int n, int d_in,
                                                               int d_out, int accumulate, int o,
                                                               const int R, const int WT)
{
    int j = 0;
    for (; j + 4 <= n; j += 4)
        ISA_FN(block)(out, in, w, d_in, d_out, accumulate, o, j, R, 4, WT);
    switch (n - j) {
    case 3: ISA_FN(block)(out, in, w, d_in, d_out, accumulate, o, j, R, 3, WT); break;
    case 2: ISA_FN(block)(out, in, w, d_in, d_out, accumulate, o, j, R, 2, WT); break;
    case 1: ISA_FN(block)(out, in, w, d_in, d_out, accumulate, o, j, R, 1, WT); break;
    default: break;
    }
}

static inline __attribute__((always_inline)) void ISA_FN(skinny_wt)(float *out, const float *in,
                                                                    const void *w, int n,
                                                                    int d_in, int d_out,
                                                                    int accumulate, int o0,
                                                                    int o1, const int WT)
{
    int o = o0;
    for (; o + 4 <= o1; o += 4)
        ISA_FN(rows)(out, in, w, n, d_in, d_out, accumulate, o, 4, WT);
    for (; o < o1; o++)
        ISA_FN(rows)(out, in, w, n, d_in, d_out, accumulate, o, 1, WT);
}

/* The skinny product for weights of dtype wt (one compiled body per dtype). */
static void ISA_FN(skinny)(float *out, const float *in, const void *w, int wt, int n, int d_in,
                           int d_out, int accumulate, int o0, int o1)
{
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
        for (; i + 16 <= count; i += 16) {
            v16f v;
            ISA_FN(ld16)(&v, src, i, WT_BF16);
            memcpy(dst + i, &v, sizeof v);
        }
    else
        for (; i + 16 <= count; i += 16) {
            v16f v;
            ISA_FN(ld16)(&v, src, i, WT_F16);
            memcpy(dst + i, &v, sizeof v);
        }
    for (; i < count; i++)
        dst[i] = ld1(src, i, wt);
}

#undef ISA_FN
#undef ISA_CAT
#undef ISA_CAT2
