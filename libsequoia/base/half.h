/* The 16-bit float codecs: IEEE 754 binary16 ("f16") and bfloat16 ("bf16"), kept as uint16_t
 * bit patterns, to and from binary32. The project's only copy (docs/formats.md, "16-bit floats"):
 * the corpus reader and writer (libsequoia/format/), the safetensors loader and writer, the CPU
 * backend, the CUDA kernels (runtime/cuda_*.cu) and the CUDA emulation (tests/cuda-emu) all
 * convert here.
 *
 * The rules (tests/test_half.c checks them exhaustively):
 *   16 -> 32  exact for all 65536 patterns: zeros and subnormals included, the sign kept (-0
 *             stays -0), infinities stay infinite, a NaN stays a NaN with its sign, quiet bit
 *             and payload (shifted into the top of the binary32 payload): the bits are kept,
 *             so a signalling NaN stays signalling (bf16 widening stays a single shift).
 *   32 -> 16  round to nearest, ties to even; a magnitude that rounds past the largest finite
 *             value is infinity (f16: from 65520; bf16: from 2^128 - 2^119); results below the
 *             smallest normal are subnormals (not flushed to zero); a NaN becomes a quiet NaN
 *             with its sign and the top bits of its payload (the bits that fit), so a NaN never
 *             turns into an infinity.
 * Integer arithmetic, but for one exact product (a subnormal f16's mantissa times 2^-24, a
 * normal binary32): the result does not depend on the floating-point environment (rounding
 * mode, flush-to-zero), on the host or on the GPU.
 *
 * Plain C11 with static inline functions. nvcc compiles this header as CUDA C++, where
 * SQ_HALF_HD marks each function __host__ __device__, so a CUDA kernel converts exactly as the
 * host does. */
#ifndef SQ_BASE_HALF_H
#define SQ_BASE_HALF_H

#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define SQ_HALF_HD __host__ __device__
#else
#define SQ_HALF_HD
#endif

/* The bit pattern of a binary32, and back (memcpy: no aliasing or union questions). */
SQ_HALF_HD static inline uint32_t sq_f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

SQ_HALF_HD static inline float sq_bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* ---- binary16: sign bit 15, exponent bits 10-14 (bias 15), mantissa bits 0-9 ----------------- */

SQ_HALF_HD static inline float sq_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 0x1fu) /* infinity, or a NaN whose payload moves to the top of binary32's */
        return sq_bits_f32(sign | 0x7f800000u | (m << 13));
    if (e == 0) {
        /* zero or subnormal: m * 2^-24, exact in binary32 (a normal number there) */
        float v = (float)m * (1.0f / 16777216.0f);
        return sign ? -v : v;
    }
    return sq_bits_f32(sign | ((e + 112u) << 23) | (m << 13));
}

SQ_HALF_HD static inline uint16_t sq_f32_to_f16(float f)
{
    uint32_t u = sq_f32_bits(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) /* NaN: quiet, the sign and the top 9 payload bits kept */
        return (uint16_t)(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
    if (a >= 0x477ff000u) /* at least 65520 (half-way past 65504) or infinite: infinity */
        return (uint16_t)(sign | 0x7c00u);
    if (a < 0x38800000u) {
        /* below 2^-14: a subnormal half q * 2^-24 (q = 1024 is the smallest normal, whose
         * encoding is the same number) */
        if (a < 0x33000000u) /* below 2^-25, half the smallest subnormal: zero */
            return sign;
        uint32_t e = a >> 23; /* 102 .. 112 */
        uint32_t mant = (a & 0x7fffffu) | 0x800000u;
        uint32_t shift = 126u - e; /* 14 .. 24 */
        uint32_t q = mant >> shift;
        uint32_t rest = mant & ((1u << shift) - 1u), mid = 1u << (shift - 1u);
        if (rest > mid || (rest == mid && (q & 1u)))
            q++;
        return (uint16_t)(sign | q);
    }
    /* normal: round to nearest even at bit 13 (a carry into the exponent is the right answer),
     * then rebias the exponent from 127 to 15 */
    uint32_t r = a + 0xfffu + ((a >> 13) & 1u);
    return (uint16_t)(sign | ((r - 0x38000000u) >> 13));
}

/* ---- bfloat16: the top half of a binary32 -------------------------------------------------- */

SQ_HALF_HD static inline float sq_bf16_to_f32(uint16_t h)
{
    return sq_bits_f32((uint32_t)h << 16);
}

SQ_HALF_HD static inline uint16_t sq_f32_to_bf16(float f)
{
    uint32_t u = sq_f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) /* NaN: quiet, the sign and the top payload bits kept */
        return (uint16_t)((u >> 16) | 0x0040u);
    u += 0x7fffu + ((u >> 16) & 1u); /* to nearest even; FLT_MAX and up carry into infinity */
    return (uint16_t)(u >> 16);
}

#endif
