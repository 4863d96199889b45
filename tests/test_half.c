/* Suite 'half': the project's one 16-bit float codec, libsequoia/base/half.h (binary16 "f16"
 * and bfloat16 "bf16" <-> binary32), against the IEEE 754 rules that docs/formats.md ("16-bit
 * floats") states:
 *   - widening, exhaustively over all 65536 patterns of each format, against the value
 *     computed from the definition in double (ldexp of the mantissa and exponent), and for f16
 *     against the compiler's _Float16;
 *   - narrowing: every finite pattern round-trips; every half-way point between two adjacent
 *     patterns goes to the even one, and its neighbouring floats to the nearer one; every
 *     binary32 pattern in f16's rounding band (exponents 2^-26 .. 2^16, both signs) against an
 *     independent oracle, the floats beyond on a stride; bf16 on every sign, exponent and kept
 *     mantissa with chosen and exhaustive discarded halves; NaN stays a quiet NaN;
 *   - the tests of the three copies this codec replaced (from the suites kernels, model and
 *     corpus), unchanged but for the names of the functions. */
#include <criterion/criterion.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "libsequoia/base/half.h"

/* IEEE binary16 of the compiler (GCC >= 12 on x86-64), an oracle for the f16 conversions. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 12
#define HAVE_FLOAT16 1
__extension__ typedef _Float16 half_t;
#endif

/* ---- the definitions, in double ------------------------------------------------------------- */

/* binary16: sign, 5 exponent bits (bias 15), 10 mantissa bits. */
static double f16_value(uint16_t h)
{
    int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
    double v;
    if (e == 0)
        v = ldexp(m, -24);
    else if (e == 31)
        v = m ? NAN : INFINITY;
    else
        v = ldexp(1024 + m, e - 25);
    return s ? -v : v;
}

/* bfloat16: sign, 8 exponent bits (bias 127), 7 mantissa bits. */
static double bf16_value(uint16_t h)
{
    int s = h >> 15, e = (h >> 7) & 255, m = h & 127;
    double v;
    if (e == 0)
        v = ldexp(m, -133);
    else if (e == 255)
        v = m ? NAN : INFINITY;
    else
        v = ldexp(128 + m, e - 134);
    return s ? -v : v;
}

static int f16_is_nan(uint32_t h)
{
    return ((h >> 10) & 31) == 31 && (h & 1023);
}

static int bf16_is_nan(uint32_t h)
{
    return ((h >> 7) & 255) == 255 && (h & 127);
}

/* ---- widening: all 65536 patterns ------------------------------------------------------------- */

Test(half, f16_widening_is_exact_for_all_65536_patterns)
{
    for (uint32_t h = 0; h < 65536; h++) {
        float f = sq_f16_to_f32((uint16_t)h);
        uint32_t bits = sq_f32_bits(f);
        cr_assert_eq(bits >> 31, h >> 15, "0x%04x: sign", h);
        if (f16_is_nan(h)) {
            /* a NaN keeps its bits: quiet bit and payload at the top of binary32's payload */
            cr_assert(isnan(f), "0x%04x", h);
            cr_assert_eq(bits, ((h & 0x8000u) << 16) | 0x7f800000u | ((h & 0x3ffu) << 13),
                         "0x%04x: NaN bits 0x%08x", h, bits);
            continue;
        }
        double want = f16_value((uint16_t)h);
        cr_assert(isinf(want) ? isinf(f) && (f > 0) == (want > 0) : (double)f == want,
                  "0x%04x: %.17g, want %.17g", h, (double)f, want);
    }
    /* the landmarks */
    cr_assert_eq(sq_f16_to_f32(0x0001), 0x1p-24f);
    cr_assert_eq(sq_f16_to_f32(0x03ff), 0x3ffp-24f);
    cr_assert_eq(sq_f16_to_f32(0x0400), 0x1p-14f);
    cr_assert_eq(sq_f16_to_f32(0x3c00), 1.0f);
    cr_assert_eq(sq_f16_to_f32(0x7bff), 65504.0f);
    cr_assert_eq(sq_f16_to_f32(0xc000), -2.0f);
    cr_assert_eq(sq_f16_to_f32(0x7c00), INFINITY);
    cr_assert_eq(sq_f16_to_f32(0xfc00), -INFINITY);
    cr_assert_eq(sq_f32_bits(sq_f16_to_f32(0x8000)), 0x80000000u, "-0 stays -0");
}

Test(half, bf16_widening_is_exact_for_all_65536_patterns)
{
    for (uint32_t h = 0; h < 65536; h++) {
        float f = sq_bf16_to_f32((uint16_t)h);
        uint32_t bits = sq_f32_bits(f);
        cr_assert_eq(bits, h << 16, "0x%04x: 0x%08x", h, bits);
        if (bf16_is_nan(h)) {
            cr_assert(isnan(f), "0x%04x", h);
            continue;
        }
        double want = bf16_value((uint16_t)h);
        cr_assert(isinf(want) ? isinf(f) && (f > 0) == (want > 0) : (double)f == want,
                  "0x%04x: %.17g, want %.17g", h, (double)f, want);
        cr_assert_eq(signbit(f) != 0, (h >> 15) != 0, "0x%04x: sign", h);
    }
    cr_assert_eq(sq_bf16_to_f32(0x0001), 0x1p-133f);
    cr_assert_eq(sq_bf16_to_f32(0x3f80), 1.0f);
    cr_assert_eq(sq_bf16_to_f32(0x7f7f), 0x1.fep127f);
    cr_assert_eq(sq_bf16_to_f32(0xff80), -INFINITY);
}

#ifdef HAVE_FLOAT16
/* The compiler widens a signalling NaN to a quiet one (IEEE convertFormat); the codec keeps the
 * bits as they are (docs/formats.md, "16-bit floats"). Everything else is bit for bit. */
Test(half, f16_widening_equals_the_compilers_float16_bit_for_bit)
{
    for (uint32_t h = 0; h < 65536; h++) {
        uint16_t h16 = (uint16_t)h;
        half_t x;
        memcpy(&x, &h16, sizeof x);
        uint32_t want = sq_f32_bits((float)x), got = sq_f32_bits(sq_f16_to_f32(h16));
        if (f16_is_nan(h) && !(h & 0x200u))
            got |= 0x00400000u; /* signalling: the compiler's is quieted */
        cr_assert_eq(got, want, "0x%04x: 0x%08x vs 0x%08x", h, got, want);
    }
}
#endif

/* ---- narrowing: patterns, ties, NaN ------------------------------------------------------------ */

Test(half, every_pattern_round_trips_and_nan_comes_back_quiet)
{
    for (uint32_t h = 0; h < 65536; h++) {
        uint16_t back = sq_f32_to_f16(sq_f16_to_f32((uint16_t)h));
        if (f16_is_nan(h))
            cr_assert_eq(back, h | 0x200u, "f16 0x%04x: NaN back as 0x%04x", h, back);
        else
            cr_assert_eq(back, h, "f16 0x%04x back as 0x%04x", h, back);
        back = sq_f32_to_bf16(sq_bf16_to_f32((uint16_t)h));
        if (bf16_is_nan(h))
            cr_assert_eq(back, h | 0x40u, "bf16 0x%04x: NaN back as 0x%04x", h, back);
        else
            cr_assert_eq(back, h, "bf16 0x%04x back as 0x%04x", h, back);
    }
}

/* Half-way between each pair of adjacent non-negative patterns (including the largest finite
 * one and infinity, which counts as the next value, 2^16 or 2^128): the even one, and the
 * floats just below and above go to the nearer one. Both signs. */
static void check_ties(int bf)
{
    uint32_t top = bf ? 0x7f80u : 0x7c00u; /* +infinity */
    for (uint32_t h = 0; h < top; h++) {
        double lo = bf ? bf16_value((uint16_t)h) : f16_value((uint16_t)h);
        double hi = h + 1 < top ? (bf ? bf16_value((uint16_t)(h + 1)) : f16_value((uint16_t)(h + 1)))
                                : ldexp(1.0, bf ? 128 : 16);
        double mid = (lo + hi) / 2;
        float m = (float)mid;
        cr_assert_eq((double)m, mid, "0x%04x: the half-way point is a float", h);
        uint16_t even = (uint16_t)(h & 1u ? h + 1 : h);
        float below = nextafterf(m, 0.0f), above = nextafterf(m, INFINITY);
        for (int s = 0; s < 2; s++) {
            uint16_t sign = s ? 0x8000u : 0u;
            float sm = s ? -m : m, sb = s ? -below : below, sa = s ? -above : above;
            uint16_t (*enc)(float) = bf ? sq_f32_to_bf16 : sq_f32_to_f16;
            cr_assert_eq(enc(sm), sign | even, "%s 0x%04x: tie %.9g -> 0x%04x", bf ? "bf16" : "f16",
                         h, (double)sm, enc(sm));
            cr_assert_eq(enc(sb), sign | h, "%s 0x%04x: below the tie", bf ? "bf16" : "f16", h);
            cr_assert_eq(enc(sa), sign | (h + 1), "%s 0x%04x: above the tie", bf ? "bf16" : "f16",
                         h);
        }
    }
}

Test(half, f16_ties_go_to_even_and_neighbours_to_the_nearer)
{
    check_ties(0);
}

Test(half, bf16_ties_go_to_even_and_neighbours_to_the_nearer)
{
    check_ties(1);
}

Test(half, overflow_is_infinity_and_tiny_values_are_subnormal_or_zero)
{
    cr_assert_eq(sq_f32_to_f16(65504.0f), 0x7bff);
    cr_assert_eq(sq_f32_to_f16(65519.996f), 0x7bff);
    cr_assert_eq(sq_f32_to_f16(65520.0f), 0x7c00);
    cr_assert_eq(sq_f32_to_f16(-1e30f), 0xfc00);
    cr_assert_eq(sq_f32_to_f16(FLT_MAX), 0x7c00);
    cr_assert_eq(sq_f32_to_f16(INFINITY), 0x7c00);
    cr_assert_eq(sq_f32_to_f16(0x1p-24f), 0x0001, "the smallest subnormal");
    cr_assert_eq(sq_f32_to_f16(0x1.8p-25f), 0x0001, "3/4 of it rounds up");
    cr_assert_eq(sq_f32_to_f16(0x1p-25f), 0x0000, "half of it: ties to even, zero");
    cr_assert_eq(sq_f32_to_f16(-0x1p-26f), 0x8000, "a negative tiny value is -0");
    cr_assert_eq(sq_f32_to_f16(0x1.ff8p-15f), 0x03ff, "the largest subnormal");
    cr_assert_eq(sq_f32_to_f16(0x1.ffcp-15f), 0x0400, "a tie, up to the even smallest normal");
    cr_assert_eq(sq_f32_to_f16(FLT_TRUE_MIN), 0x0000);
    cr_assert_eq(sq_f32_to_f16(-0.0f), 0x8000);
    cr_assert_eq(sq_f32_to_bf16(FLT_MAX), 0x7f80, "rounds past 0x1.fep127: infinity");
    cr_assert_eq(sq_f32_to_bf16(0x1.fep127f), 0x7f7f);
    cr_assert_eq(sq_f32_to_bf16(-INFINITY), 0xff80);
    cr_assert_eq(sq_f32_to_bf16(FLT_TRUE_MIN), 0x0000, "2^-149 is below half of 2^-133");
    cr_assert_eq(sq_f32_to_bf16(0x1p-133f), 0x0001, "bf16's smallest subnormal");
    cr_assert_eq(sq_f32_to_bf16(0x1p-126f * 0.75f), 0x0060, "a subnormal float, kept");
    cr_assert_eq(sq_f32_to_bf16(-0.0f), 0x8000);
}

Test(half, nan_narrows_to_a_quiet_nan_with_its_sign_and_top_payload)
{
    /* every NaN of binary32 (2^24 of them) */
    for (uint32_t m = 1; m < 0x800000u; m++)
        for (int s = 0; s < 2; s++) {
            uint32_t bits = (s ? 0x80000000u : 0u) | 0x7f800000u | m;
            float f = sq_bits_f32(bits);
            uint16_t h = sq_f32_to_f16(f), b = sq_f32_to_bf16(f);
            if (h != ((s ? 0x8000u : 0u) | 0x7e00u | ((m >> 13) & 0x3ffu)) ||
                b != ((s ? 0x8000u : 0u) | 0x7fc0u | ((m >> 16) & 0x7fu)) ||
                !isnan(sq_f16_to_f32(h)) || !isnan(sq_bf16_to_f32(b)))
                cr_assert_fail("0x%08x -> f16 0x%04x, bf16 0x%04x", bits, h, b);
        }
}

/* ---- narrowing: binary32 patterns ------------------------------------------------------------- */

/* The f16 rounding band: binary32 exponent fields 101 (2^-26, below half the smallest
 * subnormal) to 143 (2^16, past the overflow threshold 65520), every pattern of both signs:
 * 2 x 43 x 2^23 = 721 M values. The oracle walks up the positive floats with the half-way points
 * between adjacent patterns (computed in double from the definition): below a point the lower
 * pattern, above it the upper one, on it the even one. Below the band everything is zero, above
 * it infinity; those are checked on a stride. */
Test(half, f16_narrowing_of_every_float_in_the_rounding_band, .timeout = 120)
{
    uint32_t *mid = malloc(0x7c00u * sizeof *mid); /* mid[h]: bits of the point above h */
    cr_assert_not_null(mid);
    for (uint32_t h = 0; h < 0x7c00u; h++) {
        double hi = h + 1 < 0x7c00u ? f16_value((uint16_t)(h + 1)) : 65536.0;
        float m = (float)((f16_value((uint16_t)h) + hi) / 2);
        mid[h] = sq_f32_bits(m);
    }
    const uint32_t band_lo = 101u << 23, band_hi = 144u << 23;
    uint32_t h = 0;
    while (mid[h] < band_lo)
        h++;
    cr_assert_eq(h, 0u);
    unsigned long long bad = 0;
    uint32_t first_bad = 0;
    for (uint32_t a = band_lo; a < band_hi; a++) {
        while (h < 0x7c00u && a > mid[h])
            h++;
        uint32_t want = h < 0x7c00u && a == mid[h] ? (h & 1u ? h + 1 : h) : h;
        uint16_t p = sq_f32_to_f16(sq_bits_f32(a)), n = sq_f32_to_f16(sq_bits_f32(a | 0x80000000u));
        if (p != want || n != (want | 0x8000u)) {
            if (!bad++)
                first_bad = a;
        }
    }
    cr_assert_eq(bad, 0ull, "%llu floats misrounded, the first 0x%08x -> 0x%04x", bad, first_bad,
                 sq_f32_to_f16(sq_bits_f32(first_bad)));
    /* outside the band, on a stride (all exponents, all low bits in turn) */
    for (uint32_t a = 0; a < 0x7f800000u; a += 4093u) {
        if (a >= band_lo && a < band_hi)
            continue;
        uint16_t want = a < band_lo ? 0x0000u : 0x7c00u;
        if (sq_f32_to_f16(sq_bits_f32(a)) != want ||
            sq_f32_to_f16(sq_bits_f32(a | 0x80000000u)) != (want | 0x8000u))
            cr_assert_fail("0x%08x (and its negative)", a);
    }
    free(mid);
}

/* bf16 reference: the nearer of the two bf16 neighbours (in double), ties to the even one;
 * past the largest finite one infinity counts as 2^128. */
static uint16_t bf16_nearest(float f)
{
    uint32_t u = sq_f32_bits(f);
    uint16_t lo = (uint16_t)(u >> 16), hi = (uint16_t)(lo + 1);
    double x = fabs((double)f), vl = fabs(bf16_value(lo));
    double vh = (hi & 0x7fffu) == 0x7f80u ? ldexp(1.0, 128) : fabs(bf16_value(hi));
    double dl = x - vl, dh = vh - x;
    if (dl < dh)
        return lo;
    if (dh < dl)
        return hi;
    return (lo & 1u) ? hi : lo;
}

/* Every bf16 pattern's neighbourhood: for each of the 65536 top halves (every sign, exponent
 * and kept mantissa; the NaN and infinity halves excepted) the discarded low half at its
 * landmarks (0, 1, 0x7fff, 0x8000, 0x8001, 0xffff) and 58 others; every low half for 512 top
 * halves (subnormals, the largest exponents, powers of two, random ones). */
Test(half, bf16_narrowing_of_every_top_half_against_the_nearest_pattern, .timeout = 120)
{
    uint32_t lows[64] = {0x0000, 0x0001, 0x7fff, 0x8000, 0x8001, 0xffff, 0x4000, 0xc000};
    uint64_t x = 0x9e3779b97f4a7c15ull;
    for (int i = 8; i < 64; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        lows[i] = (uint32_t)(x & 0xffffu);
    }
    for (uint32_t top = 0; top < 65536; top++) {
        if (((top >> 7) & 255) == 255)
            continue;
        for (int i = 0; i < 64; i++) {
            float f = sq_bits_f32(top << 16 | lows[i]);
            uint16_t got = sq_f32_to_bf16(f), want = bf16_nearest(f);
            if (got != want)
                cr_assert_fail("0x%08x -> 0x%04x, want 0x%04x", sq_f32_bits(f), got, want);
        }
    }
    for (int t = 0; t < 512; t++) {
        uint32_t top;
        if (t < 128)
            top = (uint32_t)t; /* subnormal, +0 */
        else if (t < 256)
            top = 0x7f00u + (uint32_t)(t - 128); /* the largest binade, 0x7f7f next to infinity */
        else if (t < 384)
            top = 0x8000u | ((uint32_t)(t - 256) << 7); /* negative powers of two */
        else {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            top = (uint32_t)(x & 0xffffu);
            if (((top >> 7) & 255) == 255)
                top ^= 0x0100u;
        }
        for (uint32_t low = 0; low < 65536; low++) {
            float f = sq_bits_f32(top << 16 | low);
            uint16_t got = sq_f32_to_bf16(f), want = bf16_nearest(f);
            if (got != want)
                cr_assert_fail("0x%08x -> 0x%04x, want 0x%04x", sq_f32_bits(f), got, want);
        }
    }
}

#ifdef HAVE_FLOAT16
/* The compiler's conversion, NaN included (it too keeps the top payload bits and quiets), on
 * a stride through all 2^32 patterns with every low bit pattern in turn. */
Test(half, f16_narrowing_equals_the_compilers_float16, .timeout = 120)
{
    for (uint64_t a = 0; a <= 0xffffffffu; a += 1021u) {
        float f = sq_bits_f32((uint32_t)a);
        half_t x = (half_t)f;
        uint16_t want;
        memcpy(&want, &x, sizeof want);
        if (sq_f32_to_f16(f) != want)
            cr_assert_fail("0x%08x: 0x%04x vs 0x%04x", (uint32_t)a, sq_f32_to_f16(f), want);
    }
}
#endif

/* ---- the tests of the copies this codec replaced ---------------------------------------------- */

/* From the suite 'kernels' (runtime/kernels.h's sq_k_* conversions), with its generator. */
static uint64_t kern_rng_state = 88172645463325252ull;

static uint64_t kern_rnd(void)
{
    kern_rng_state ^= kern_rng_state << 13;
    kern_rng_state ^= kern_rng_state >> 7;
    kern_rng_state ^= kern_rng_state << 17;
    return kern_rng_state;
}

#ifdef HAVE_FLOAT16
Test(half, kernels_f16_every_pattern_round_trips_through_f32)
{
    for (uint32_t h = 0; h < 65536; h++) {
        float f = sq_f16_to_f32((uint16_t)h);
        if (((h >> 10) & 0x1f) == 0x1f && (h & 0x3ff)) {
            cr_assert(isnan(f), "0x%04x", h);
            continue;
        }
        cr_assert_eq(sq_f32_to_f16(f), h, "0x%04x -> %g -> 0x%04x", h, f, sq_f32_to_f16(f));
        cr_assert(f == (float)(half_t)f, "0x%04x: %g is not exactly a half", h, f);
    }
}

Test(half, kernels_f16_rounding_equals_the_compilers_float16)
{
    static const float edges[] = {65504.0f, 65519.99f, 65520.0f, 65536.0f, 1e9f, 6.1035156e-5f,
                                  5.9604645e-8f, 2.9802322e-8f, 2.9802326e-8f, 1e-30f, 0.0f,
                                  -0.0f, 1.0f + 1.0f / 2048, 1.0f + 3.0f / 2048, INFINITY};
    for (size_t i = 0; i < sizeof edges / sizeof *edges; i++)
        for (int s = 0; s < 2; s++) {
            float f = s ? -edges[i] : edges[i];
            half_t h = (half_t)f;
            uint16_t want;
            memcpy(&want, &h, sizeof want);
            cr_assert_eq(sq_f32_to_f16(f), want, "%.9g: 0x%04x vs 0x%04x", f,
                         sq_f32_to_f16(f), want);
        }
    for (int trial = 0; trial < 2000000; trial++) {
        uint32_t bits = (uint32_t)kern_rnd();
        float f;
        memcpy(&f, &bits, sizeof f);
        if (isnan(f))
            continue;
        half_t h = (half_t)f;
        uint16_t want;
        memcpy(&want, &h, sizeof want);
        cr_assert_eq(sq_f32_to_f16(f), want, "%.9g (0x%08x): 0x%04x vs 0x%04x", f, bits,
                     sq_f32_to_f16(f), want);
    }
    cr_assert(isnan(sq_f16_to_f32(sq_f32_to_f16(NAN))));
}
#endif

/* bf16 reference: the nearer of the two bf16 neighbours, ties to the even one. */
static uint16_t ref_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    uint16_t lo = (uint16_t)(u >> 16), hi = (uint16_t)(lo + 1);
    double dl = fabs((double)f - sq_bf16_to_f32(lo));
    float fh = sq_bf16_to_f32(hi);
    double dh = isinf(fh) ? fabs((double)f - ldexp(1.0, 128) * (f < 0 ? -1 : 1))
                          : fabs((double)f - fh);
    if (dl < dh)
        return lo;
    if (dh < dl)
        return hi;
    return (lo & 1) ? hi : lo;
}

Test(half, kernels_bf16_rounds_to_nearest_even)
{
    for (int trial = 0; trial < 2000000; trial++) {
        uint32_t bits = (uint32_t)kern_rnd();
        float f;
        memcpy(&f, &bits, sizeof f);
        if (isnan(f) || isinf(f))
            continue;
        cr_assert_eq(sq_f32_to_bf16(f), ref_bf16(f), "%.9g (0x%08x)", f, bits);
    }
    for (uint32_t h = 0; h < 65536; h++) {
        float f = sq_bf16_to_f32((uint16_t)h);
        if (isnan(f))
            cr_assert(isnan(sq_bf16_to_f32(sq_f32_to_bf16(f))), "0x%04x", h);
        else
            cr_assert_eq(sq_f32_to_bf16(f), h, "0x%04x", h);
    }
    cr_assert_eq(sq_f32_to_bf16(FLT_MAX), 0x7f80);   /* rounds up to infinity */
    cr_assert_eq(sq_f32_to_bf16(1.0f), 0x3f80);
}

/* From the suite 'model' (runtime/safetensors.c's conversions), with its generator. */
static uint64_t model_rng_state = 12345;

static uint32_t model_rnd(void)
{
    model_rng_state = model_rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(model_rng_state >> 33);
}

static int model_rnd_below(int n)
{
    return (int)(model_rnd() % (uint32_t)n);
}

Test(half, model_f16_decoding_matches_the_definition_for_all_65536_values)
{
    for (uint32_t h = 0; h < 65536; h++) {
        double want = f16_value((uint16_t)h);
        float got = sq_f16_to_f32((uint16_t)h);
        if (isnan(want)) {
            cr_assert(isnan(got), "h=%#x", h);
        } else {
            cr_assert_eq((double)got, want, "h=%#x: %.9g vs %.9g", h, got, want);
            cr_assert_eq(signbit(got) != 0, (h >> 15) != 0, "h=%#x sign", h);
            cr_assert_eq(sq_f32_to_f16(got), (uint16_t)h, "h=%#x does not round-trip", h);
        }
    }
}

Test(half, model_f32_to_f16_rounds_to_the_nearest_half_ties_to_even)
{
    /* Oracle: the nearest of all finite halves, by brute force over the positive ones. */
    static double halves[31744];
    for (int h = 0; h < 31744; h++)
        halves[h] = f16_value((uint16_t)h);
    for (int it = 0; it < 20000; it++) {
        float f;
        if (it % 3 == 0) {
            /* exact midpoints between two adjacent halves */
            int h = model_rnd_below(31743);
            f = (float)((halves[h] + halves[h + 1]) / 2);
        } else {
            uint32_t bits = (model_rnd() & 0x7fffffffu) % 0x47800000u;   /* up to 65536 */
            memcpy(&f, &bits, 4);
        }
        double a = fabs((double)f);
        int best = 0;
        for (int h = 1; h < 31744; h++) {
            double d = fabs(halves[h] - a), db = fabs(halves[best] - a);
            if (d < db || (d == db && (h & 1) == 0))
                best = h;
        }
        uint16_t want = (uint16_t)best;
        if (a >= 65520.0)
            want = 0x7c00;
        cr_assert_eq(sq_f32_to_f16(f), want, "f=%.9g: got %#x want %#x", f, sq_f32_to_f16(f),
                     want);
        cr_assert_eq(sq_f32_to_f16(-f), want | 0x8000u);
    }
    cr_assert_eq(sq_f32_to_f16(INFINITY), 0x7c00);
    cr_assert(isnan(sq_f16_to_f32(sq_f32_to_f16(NAN))));
}

Test(half, model_bf16_rounds_to_nearest_even_and_keeps_nan)
{
    for (int it = 0; it < 100000; it++) {
        uint32_t bits = model_rnd() ^ ((uint32_t)model_rnd() << 16);
        float f;
        memcpy(&f, &bits, 4);
        if (isnan(f)) {
            cr_assert(isnan(sq_bf16_to_f32(sq_f32_to_bf16(f))));
            continue;
        }
        if (isinf(f)) {
            cr_assert_eq(sq_f32_to_bf16(f), (uint16_t)(bits >> 16));
            continue;
        }
        /* the two bfloat16 neighbours of f; past the largest finite one, infinity counts as
         * 2^128 (IEEE overflow rounding) */
        uint32_t lo = bits & 0xffff0000u, hi = lo + 0x10000u;
        float flo, fhi;
        memcpy(&flo, &lo, 4);
        memcpy(&fhi, &hi, 4);
        double vhi = isinf(fhi) ? copysign(ldexp(1.0, 128), fhi) : (double)fhi;
        double dl = fabs((double)f - flo), dh = fabs(vhi - f);
        uint16_t want = (uint16_t)(lo >> 16);
        if (dh < dl || (dh == dl && (want & 1)))
            want = (uint16_t)(hi >> 16);
        cr_assert_eq(sq_f32_to_bf16(f), want, "bits %#x", bits);
    }
}

/* From the suite 'corpus' (libsequoia/format/corpus_read.c's sq_half_to_float and
 * sq_float_to_half), with its generator. */
static uint64_t corpus_rng_state;

static double corpus_urand(void)
{
    /* xorshift64*; deterministic per test */
    corpus_rng_state ^= corpus_rng_state >> 12;
    corpus_rng_state ^= corpus_rng_state << 25;
    corpus_rng_state ^= corpus_rng_state >> 27;
    return (double)((corpus_rng_state * 2685821657736338717ull) >> 11) / 9007199254740992.0;
}

/* The nearest half by brute force over the 31744 finite non-negative halves; ties to even. */
static uint16_t nearest_half(float x)
{
    double ax = fabs((double)x), best = INFINITY;
    int bi = 0;
    for (int i = 0; i < 0x7c00; i++) {
        double d = fabs((double)sq_f16_to_f32((uint16_t)i) - ax);
        if (d < best || (d == best && (i & 1) == 0)) {
            best = d;
            bi = i;
        }
    }
    return (uint16_t)(bi | (signbit(x) ? 0x8000 : 0));
}

Test(half, corpus_float_to_half_rounds_to_nearest_even)
{
    corpus_rng_state = 12345;
    for (int t = 0; t < 400; t++) {
        float x;
        if (t < 100)
            x = (float)((corpus_urand() - 0.5) * 200.0);
        else if (t < 200)
            x = (float)ldexp(corpus_urand(), -14 - (int)(corpus_urand() * 12)); /* subnormals */
        else if (t < 300)
            x = -(float)(corpus_urand() * 65504.0);
        else {
            /* exact ties: halfway between two adjacent halves */
            uint16_t h = (uint16_t)(corpus_urand() * 0x7bff);
            x = (float)(((double)sq_f16_to_f32(h) + sq_f16_to_f32((uint16_t)(h + 1))) / 2);
        }
        uint16_t want = nearest_half(x), got = sq_f32_to_f16(x);
        cr_assert_eq(got, want, "%.9g: 0x%04x, want 0x%04x", (double)x, got, want);
    }
    cr_assert_eq(sq_f32_to_f16(65504.0f), 0x7bff);
    cr_assert_eq(sq_f32_to_f16(65520.0f), 0x7c00, "past the largest half: infinity");
    cr_assert_eq(sq_f32_to_f16(-INFINITY), 0xfc00);
    cr_assert_eq(sq_f32_to_f16(-0.0f), 0x8000);
}
