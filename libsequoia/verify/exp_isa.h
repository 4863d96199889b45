/* The vector kernels of rule.c's softmax for one vector width: rule.c includes this file once
 * per instruction set, with these defined:
 *   EXP_SFX          the functions' suffix (avx2, avx512)
 *   EXP_TARGET       the functions' attribute, e.g. __attribute__((target("avx2")))
 *   EXP_VL           double lanes of one vector (4, 8)
 *   EXP_VD           the vector type (__m256d, __m512d)
 *   EXP_SET1(x), EXP_LOAD(p), EXP_STORE(p, v), EXP_ADD, EXP_SUB, EXP_MUL, EXP_DIV  the lane-wise
 *                    IEEE operations
 *   EXP_ROUND(v)     round to the nearest integer, ties to even (nearbyint)
 *   EXP_WIDEN(p)     EXP_VL floats at p, widened to doubles
 *   EXP_POW2(b)      the doubles whose bits are those of b shifted left by 52
 *   EXP_POSITIVE(v)  how many lanes of v are > 0
 * and exp_ln2_hi, exp_ln2_lo, exp_inv_ln2, exp_c[], HORNER_SPLIT in scope. Not a header of its
 * own. Every function makes the same IEEE operations in the same order on each value as the
 * scalar exp_nonpos and normalise_scalar, so every width gives the same bits (rule.c). */
#define EXP_CAT2(a, b) a##_##b
#define EXP_CAT(a, b) EXP_CAT2(a, b)
#define EXP_FN(name) EXP_CAT(name, EXP_SFX)

/* Stage 1: x = (logit - max) / T, k = round(x / ln2), r = x - k·ln2 (hi, then lo). unit: T is
 * 1, and x / 1 is x exactly (IEEE division by one), so the division is skipped: same bits. */
EXP_TARGET static void EXP_FN(exp_stage1)(const float *logits, int n, EXP_VD vmx, EXP_VD vt,
                                          int unit, double *xs, double *ks, double *rs)
{
    const EXP_VD hi = EXP_SET1(exp_ln2_hi), lo = EXP_SET1(exp_ln2_lo);
    const EXP_VD inv = EXP_SET1(exp_inv_ln2);
    for (int j = 0; j < n; j += EXP_VL) {
        EXP_VD x = EXP_SUB(EXP_WIDEN(logits + j), vmx);
        if (!unit)
            x = EXP_DIV(x, vt);
        EXP_VD k = EXP_ROUND(EXP_MUL(x, inv));
        EXP_VD r = EXP_SUB(EXP_SUB(x, EXP_MUL(k, hi)), EXP_MUL(k, lo));
        EXP_STORE(xs + j, x);
        EXP_STORE(ks + j, k);
        EXP_STORE(rs + j, r);
    }
}

/* Stage 2: the first Horner steps, p = c13, then p = p·r + c_i for i = 12 .. HORNER_SPLIT. */
EXP_TARGET static void EXP_FN(exp_stage2)(int n, const double *rs, double *ps)
{
    for (int j = 0; j < n; j += EXP_VL) {
        EXP_VD r = EXP_LOAD(rs + j), p = EXP_SET1(exp_c[13]);
#pragma GCC unroll 13
        for (int i = 12; i >= HORNER_SPLIT; i--)
            p = EXP_ADD(EXP_MUL(p, r), EXP_SET1(exp_c[i]));
        EXP_STORE(ps + j, p);
    }
}

/* Stage 3 for one vector of values: the remaining Horner steps and the scaling by 2^k. */
EXP_TARGET static inline EXP_VD EXP_FN(exp_stage3)(const double *ps, const double *rs,
                                                   const double *ks)
{
    EXP_VD r = EXP_LOAD(rs), p = EXP_LOAD(ps);
#pragma GCC unroll 13
    for (int i = HORNER_SPLIT - 1; i >= 0; i--)
        p = EXP_ADD(EXP_MUL(p, r), EXP_SET1(exp_c[i]));
    /* 2^k: k + 1023 + 2^52 holds k + 1023 in its low mantissa bits */
    EXP_VD biased = EXP_ADD(EXP_LOAD(ks), EXP_SET1(1023.0 + 4503599627370496.0));
    return EXP_MUL(p, EXP_POW2(biased));
}

/* probs[i] /= sum; returns how many are positive. */
EXP_TARGET static int EXP_FN(normalise)(double *probs, int V, double sum)
{
    const EXP_VD s = EXP_SET1(sum);
    int nz = 0, i = 0;
    for (; i + EXP_VL <= V; i += EXP_VL) {
        EXP_VD p = EXP_DIV(EXP_LOAD(probs + i), s);
        EXP_STORE(probs + i, p);
        nz += EXP_POSITIVE(p);
    }
    for (; i < V; i++) {
        probs[i] /= sum;
        nz += probs[i] > 0.0;
    }
    return nz;
}

#undef EXP_FN
#undef EXP_CAT
#undef EXP_CAT2
#undef EXP_SFX
#undef EXP_TARGET
#undef EXP_VL
#undef EXP_VD
#undef EXP_SET1
#undef EXP_LOAD
#undef EXP_STORE
#undef EXP_ADD
#undef EXP_SUB
#undef EXP_MUL
#undef EXP_DIV
#undef EXP_ROUND
#undef EXP_WIDEN
#undef EXP_POW2
#undef EXP_POSITIVE
