/* The verification rule (rule.h; docs/estimator.md, "Verification rule"). */
#include "libsequoia/verify/rule.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "libsequoia/base/error.h"
#include "libsequoia/verify/formulas.h"

/* ---- orders ------------------------------------------------------------------------------------ */

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define SQ_RULE_AVX2 1
#define SQ_RULE_AVX512 1
static int host_isa(void)
{
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl"))
        return SQ_RULE_ISA_AVX512;
    return __builtin_cpu_supports("avx2") ? SQ_RULE_ISA_AVX2 : SQ_RULE_ISA_SCALAR;
}
#else
static int host_isa(void)
{
    return SQ_RULE_ISA_SCALAR;
}
#endif

/* The path + 1 once chosen (0: not yet): sq_rule_isa_set's, else SQ_CPU_ISA's from the
 * environment (the runtime's variable, docs/runtime.md: one setting forces both) where the CPU
 * has it, else the best the CPU has. */
static atomic_int isa_now;

static int isa_auto(void)
{
    int want = host_isa();
    const char *env = getenv("SQ_CPU_ISA");
    for (int i = SQ_RULE_ISA_SCALAR; env && i <= want; i++)
        if (strcmp(env, sq_rule_isa_name(i)) == 0) {
            want = i;
            break;
        }
    return want;
}

int sq_rule_isa(void)
{
    int v = atomic_load_explicit(&isa_now, memory_order_relaxed);
    if (v)
        return v - 1;
    int expect = 0;
    atomic_compare_exchange_strong(&isa_now, &expect, isa_auto() + 1);
    return atomic_load(&isa_now) - 1;
}

int sq_rule_isa_set(int isa)
{
    if (isa != SQ_RULE_ISA_AUTO && (isa < SQ_RULE_ISA_SCALAR || isa > host_isa()))
        return -1;
    atomic_store(&isa_now, (isa == SQ_RULE_ISA_AUTO ? isa_auto() : isa) + 1);
    return 0;
}

const char *sq_rule_isa_name(int isa)
{
    return isa == SQ_RULE_ISA_AVX512 ? "avx512" : isa == SQ_RULE_ISA_AVX2 ? "avx2" : "scalar";
}

/* The argmax in two passes (issue 17): the largest usable value m, then the first index holding
 * it. That is sq_k_argmax_takes's answer: NaN never compares larger so it is skipped, a row
 * whose largest value is -inf has no usable logit (0), and the first index equal to m is the
 * lowest index among the ties (-0 == +0 included, as in sq_k_argmax_takes). */
static float max_usable_scalar(const float *x, int n)
{
    float m = -INFINITY;
    for (int i = 0; i < n; i++)
        m = x[i] > m ? x[i] : m;
    return m;
}

#ifdef SQ_RULE_AVX2
/* max_ps(x, m) is x > m ? x : m lane by lane, NaN in x keeping m: the scalar rule above. */
__attribute__((target("avx2"))) static float max_usable_avx2(const float *x, int n)
{
    __m256 m0 = _mm256_set1_ps(-INFINITY), m1 = m0;
    int i = 0;
    for (; i + 16 <= n; i += 16) {
        m0 = _mm256_max_ps(_mm256_loadu_ps(x + i), m0);
        m1 = _mm256_max_ps(_mm256_loadu_ps(x + i + 8), m1);
    }
    float l0[8], l1[8];
    _mm256_storeu_ps(l0, m0);
    _mm256_storeu_ps(l1, m1);
    float m = -INFINITY;
    for (int k = 0; k < 8; k++) {
        m = l0[k] > m ? l0[k] : m;
        m = l1[k] > m ? l1[k] : m;
    }
    for (; i < n; i++)
        m = x[i] > m ? x[i] : m;
    return m;
}

/* The first index holding m (there is one), eight at a time. */
__attribute__((target("avx2"))) static int first_equal_avx2(const float *x, int n, float m)
{
    const __m256 vm = _mm256_set1_ps(m);
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        int mask = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(x + i), vm, _CMP_EQ_OQ));
        if (mask)
            return i + __builtin_ctz((unsigned)mask);
    }
    while (x[i] != m)
        i++;
    return i;
}
#endif

#ifdef SQ_RULE_AVX512
/* The same two passes sixteen lanes wide (max_ps keeps m where x is NaN, as above; which of two
 * equal zeros it keeps does not matter: the index is found by ==). */
__attribute__((target("avx512f"))) static float max_usable_avx512(const float *x, int n)
{
    __m512 m0 = _mm512_set1_ps(-INFINITY), m1 = m0;
    int i = 0;
    for (; i + 32 <= n; i += 32) {
        m0 = _mm512_max_ps(_mm512_loadu_ps(x + i), m0);
        m1 = _mm512_max_ps(_mm512_loadu_ps(x + i + 16), m1);
    }
    float l0[16], l1[16];
    _mm512_storeu_ps(l0, m0);
    _mm512_storeu_ps(l1, m1);
    float m = -INFINITY;
    for (int k = 0; k < 16; k++) {
        m = l0[k] > m ? l0[k] : m;
        m = l1[k] > m ? l1[k] : m;
    }
    for (; i < n; i++)
        m = x[i] > m ? x[i] : m;
    return m;
}

__attribute__((target("avx512f"))) static int first_equal_avx512(const float *x, int n, float m)
{
    const __m512 vm = _mm512_set1_ps(m);
    int i = 0;
    for (; i + 16 <= n; i += 16) {
        unsigned mask = _mm512_cmp_ps_mask(_mm512_loadu_ps(x + i), vm, _CMP_EQ_OQ);
        if (mask)
            return i + __builtin_ctz(mask);
    }
    while (x[i] != m)
        i++;
    return i;
}
#endif

int sq_argmax_f(const float *x, int n)
{
    float m;
    const int isa = sq_rule_isa();
    (void)isa;   /* unused without the vector paths */
#ifdef SQ_RULE_AVX512
    if (isa >= SQ_RULE_ISA_AVX512)
        m = max_usable_avx512(x, n);
    else
#endif
#ifdef SQ_RULE_AVX2
    if (isa >= SQ_RULE_ISA_AVX2)
        m = max_usable_avx2(x, n);
    else
#endif
        m = max_usable_scalar(x, n);
    if (!sq_k_logit_usable(m))
        return 0;
#ifdef SQ_RULE_AVX512
    if (isa >= SQ_RULE_ISA_AVX512)
        return first_equal_avx512(x, n, m);
#endif
#ifdef SQ_RULE_AVX2
    if (isa >= SQ_RULE_ISA_AVX2)
        return first_equal_avx2(x, n, m);
#endif
    int i = 0;
    while (x[i] != m)
        i++;
    return i;
}

int sq_argmax_d(const double *x, int n)
{
    int best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best])
            best = i;
    return best;
}

/* Min-heap on the rank order: the worst kept entry on top. */
static void sift_down(sq_ranked *h, int n, int i)
{
    for (;;) {
        int l = 2 * i + 1, r = l + 1, w = i;
        if (l < n && sq_k_ranks_before(h[w].v, h[w].i, h[l].v, h[l].i))
            w = l;
        if (r < n && sq_k_ranks_before(h[w].v, h[w].i, h[r].v, h[r].i))
            w = r;
        if (w == i)
            return;
        sq_ranked t = h[i];
        h[i] = h[w];
        h[w] = t;
        i = w;
    }
}

void sq_topk_keys(const double *x, int n, int k, int32_t *out, sq_ranked *h)
{
    SQ_ASSERT(k >= 0 && k <= n);
    if (k == 0)
        return;
    for (int i = 0; i < k; i++)
        h[i] = (sq_ranked){x[i], i};
    for (int i = k / 2 - 1; i >= 0; i--)
        sift_down(h, k, i);
    for (int i = k; i < n; i++)
        if (sq_k_ranks_before(x[i], i, h[0].v, h[0].i)) {
            h[0] = (sq_ranked){x[i], i};
            sift_down(h, k, 0);
        }
    /* Take the worst off the top, filling from the back: best first. */
    for (int m = k; m > 0; m--) {
        out[m - 1] = h[0].i;
        h[0] = h[m - 1];
        sift_down(h, m - 1, 0);
    }
}

int sq_topk_d(const double *x, int n, int k, int32_t *out, sq_error *err)
{
    sq_ranked *h = malloc((size_t)(k > 0 ? k : 1) * sizeof *h);
    if (!h)
        return sq_error_oom(err, "a top-k heap");
    sq_topk_keys(x, n, k, out, h);
    free(h);
    return SQ_OK;
}

void sq_draft_topk(const float *logits, int V, int k, int32_t *out, double *keys,
                   sq_ranked *heap)
{
    for (int i = 0; i < V; i++)
        keys[i] = sq_k_rank_key(logits[i]);
    sq_topk_keys(keys, V, k, out, heap);
}

/* ---- the distribution -------------------------------------------------------------------------- */

static inline void swap_d(double *a, double *b)
{
    double t = *a;
    *a = *b;
    *b = t;
}

/* tau of the nucleus among the n positive values of v (reordered): the largest value such that
 * the values >= tau reach top_p. Quickselect with a three-way partition: expected O(n) instead
 * of a sort. Each round splits the range around a pivot x into (> x, == x, < x); `above` is
 * the mass of the values already known to be larger than the range. */
static double nucleus_threshold(double *v, int n, double top_p)
{
    double above = 0.0;
    int lo = 0, hi = n;
    while (lo < hi) {
        double a = v[lo], b = v[lo + (hi - lo) / 2], c = v[hi - 1];
        double x = a < b ? (b < c ? b : (a < c ? c : a)) : (a < c ? a : (b < c ? c : b));
        int gt = lo, i = lo, lt = hi;   /* [lo, gt) > x, [gt, i) == x, [lt, hi) < x */
        while (i < lt) {
            if (v[i] > x)
                swap_d(&v[gt++], &v[i++]);
            else if (v[i] < x)
                swap_d(&v[i], &v[--lt]);
            else
                i++;
        }
        double larger = 0.0, equal = 0.0;
        for (int j = lo; j < gt; j++)
            larger += v[j];
        for (int j = gt; j < lt; j++)
            equal += v[j];
        if (sq_k_nucleus_reaches(above + larger, top_p))
            hi = gt;                    /* tau > x */
        else if (sq_k_nucleus_reaches(above + larger + equal, top_p))
            return x;                   /* the tokens >= x reach top_p, those > x do not */
        else {
            above += larger + equal;    /* tau < x */
            lo = lt;
        }
    }
    return 0.0;   /* rounding kept the whole mass below top_p: keep every token */
}

/* ---- exp for the softmax ------------------------------------------------------------------- */

/* exp(x) for x <= 0 (the softmax's exponents), eight at a time with AVX-512, four with AVX2 and
 * one at a time otherwise (sq_rule_isa), with the same IEEE operations in all, so that a value does not depend on
 * where it sits in the row (tied logits keep exactly tied probabilities). Within 2 ulp of the
 * correctly rounded exp (tests/test_kernels.c measures it against libm). Method: Cody-Waite
 * reduction x = k·ln2 + r, |r| <= ln2/2, with ln2 split in two so that k·ln2_hi is exact, the
 * Taylor polynomial of degree 13 for exp(r) (truncation below 1e-17 relative) by Horner, and
 * 2^k put into the exponent bits. No fused multiply-add, so nothing depends on the compiler's
 * contraction. x below -708 (subnormal or zero results) goes to libm's exp; NaN gives NaN and
 * -inf gives 0. */
#define EXP_LOW (-708.0)
static const double exp_ln2_hi = 6.93147180369123816490e-01; /* 0x3fe62e42fee00000 */
static const double exp_ln2_lo = 1.90821492927058770002e-10;
static const double exp_inv_ln2 = 1.44269504088896338700e+00;
static const double exp_c[14] = {
    1.0,
    1.0,
    1.0 / 2,
    1.0 / 6,
    1.0 / 24,
    1.0 / 120,
    1.0 / 720,
    1.0 / 5040,
    1.0 / 40320,
    1.0 / 362880,
    1.0 / 3628800,
    1.0 / 39916800,
    1.0 / 479001600,
    1.0 / 6227020800,
};

static double exp_nonpos(double x)
{
    if (!(x >= EXP_LOW))
        return x == -INFINITY ? 0.0 : exp(x); /* NaN stays NaN */
    double k = nearbyint(x * exp_inv_ln2);
    double r = (x - k * exp_ln2_hi) - k * exp_ln2_lo;
    double p = exp_c[13];
    for (int i = 12; i >= 0; i--)
        p = p * r + exp_c[i];
    uint64_t bits = (uint64_t)((int64_t)k + 1023) << 52;
    double scale;
    memcpy(&scale, &bits, sizeof scale);
    return p * scale;
}

/* Softmax numerators of a row whose largest usable logit mx is finite: sq_k_softmax_temp's
 * (logit - max) / T, with exp_nonpos for exp; NaN and -inf logits weigh 0. Returns their sum,
 * added in the vector paths' order (issue 27), so that every path gives the same bits: eight
 * partial sums over the first V / 8 · 8 values (sum j takes the values at 8t + j), folded as
 * ((s0 + s4) + (s1 + s5)) + ((s2 + s6) + (s3 + s7)), then the rest one by one. */
static double softmax_scalar(const float *logits, int V, float mx, double temperature,
                             double *probs)
{
    double s[8] = {0};
    const int V8 = V / 8 * 8;
    for (int i = 0; i < V; i++) {
        double e = exp_nonpos(((double)logits[i] - (double)mx) / temperature);
        probs[i] = e == e ? e : 0.0;
    }
    for (int i = 0; i < V8; i += 8)
        for (int j = 0; j < 8; j++)
            s[j] += probs[i + j];
    double sum = ((s[0] + s[4]) + (s[1] + s[5])) + ((s[2] + s[6]) + (s[3] + s[7]));
    for (int i = V8; i < V; i++)
        sum += probs[i];
    return sum;
}

#ifdef SQ_RULE_AVX2
/* exp_nonpos in three stages over a block of values (issue 27). Each value's exp is a chain of
 * about 30 dependent operations (reduction, 13 Horner steps, scaling) whose latency, not the
 * number of operations, bounded the softmax: the processor cannot hold enough values in
 * flight to hide a chain that long. Cut into three passes over a block that stays in L1, each
 * pass's chains are short and the passes run at the operations' throughput. The same IEEE
 * operations in the same order on every value (intermediates stored as doubles): the same bits
 * as one pass, and as the scalar exp_nonpos. */
#define SOFTMAX_BLOCK 256   /* values per block: four arrays of 2 KiB */
#define HORNER_SPLIT 7      /* stage 2 runs the Horner steps c12 .. c7, stage 3 c6 .. c0 */

#define EXP_SFX avx2
#define EXP_TARGET __attribute__((target("avx2")))
#define EXP_VL 4
#define EXP_VD __m256d
#define EXP_SET1 _mm256_set1_pd
#define EXP_LOAD _mm256_loadu_pd
#define EXP_STORE _mm256_storeu_pd
#define EXP_ADD _mm256_add_pd
#define EXP_SUB _mm256_sub_pd
#define EXP_MUL _mm256_mul_pd
#define EXP_DIV _mm256_div_pd
#define EXP_ROUND(v) _mm256_round_pd((v), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
#define EXP_WIDEN(p) _mm256_cvtps_pd(_mm_loadu_ps(p))
#define EXP_POW2(b) _mm256_castsi256_pd(_mm256_slli_epi64(_mm256_castpd_si256(b), 52))
#define EXP_POSITIVE(v)                                                                        \
    __builtin_popcount((unsigned)_mm256_movemask_pd(_mm256_cmp_pd((v), _mm256_setzero_pd(),    \
                                                                  _CMP_GT_OQ)))
#include "libsequoia/verify/exp_isa.h"

__attribute__((target("avx2"))) static double softmax_avx2(const float *logits, int V, float mx,
                                                           double temperature, double *probs)
{
    const __m256d vmx = _mm256_set1_pd((double)mx), vt = _mm256_set1_pd(temperature);
    const __m256d low = _mm256_set1_pd(EXP_LOW);
    const int unit = temperature == 1.0;
    __m256d s0 = _mm256_setzero_pd(), s1 = _mm256_setzero_pd();
    double xs[SOFTMAX_BLOCK], ks[SOFTMAX_BLOCK], rs[SOFTMAX_BLOCK], ps[SOFTMAX_BLOCK];
    const int V8 = V / 8 * 8;
    int i = 0;
    for (int b0 = 0; b0 < V8; b0 += SOFTMAX_BLOCK) {
        const int n = V8 - b0 < SOFTMAX_BLOCK ? V8 - b0 : SOFTMAX_BLOCK;   /* a multiple of 8 */
        exp_stage1_avx2(logits + b0, n, vmx, vt, unit, xs, ks, rs);
        exp_stage2_avx2(n, rs, ps);
        for (int j = 0; j < n; j += 8) {
            __m256d x0 = _mm256_loadu_pd(xs + j), x1 = _mm256_loadu_pd(xs + j + 4);
            /* in range (x >= -708, false for NaN): the vector exp; otherwise the scalar path */
            __m256d in0 = _mm256_cmp_pd(x0, low, _CMP_GE_OQ), in1 = _mm256_cmp_pd(x1, low, _CMP_GE_OQ);
            __m256d e0 = _mm256_and_pd(exp_stage3_avx2(ps + j, rs + j, ks + j), in0);
            __m256d e1 = _mm256_and_pd(exp_stage3_avx2(ps + j + 4, rs + j + 4, ks + j + 4), in1);
            if ((_mm256_movemask_pd(in0) & _mm256_movemask_pd(in1)) != 0xF) {
                double t0[4], t1[4];
                _mm256_storeu_pd(t0, e0);
                _mm256_storeu_pd(t1, e1);
                for (int k = 0; k < 4; k++) {
                    if (!(xs[j + k] >= EXP_LOW)) {
                        double e = exp_nonpos(xs[j + k]);
                        t0[k] = e == e ? e : 0.0;
                    }
                    if (!(xs[j + 4 + k] >= EXP_LOW)) {
                        double e = exp_nonpos(xs[j + 4 + k]);
                        t1[k] = e == e ? e : 0.0;
                    }
                }
                e0 = _mm256_loadu_pd(t0);
                e1 = _mm256_loadu_pd(t1);
            }
            _mm256_storeu_pd(probs + b0 + j, e0);
            _mm256_storeu_pd(probs + b0 + j + 4, e1);
            s0 = _mm256_add_pd(s0, e0);
            s1 = _mm256_add_pd(s1, e1);
        }
        i = b0 + n;
    }
    double l[4];
    _mm256_storeu_pd(l, _mm256_add_pd(s0, s1));
    double sum = (l[0] + l[1]) + (l[2] + l[3]);
    for (; i < V; i++) {
        double e = exp_nonpos(((double)logits[i] - (double)mx) / temperature);
        probs[i] = e == e ? e : 0.0;
        sum += probs[i];
    }
    return sum;
}
#endif

#ifdef SQ_RULE_AVX512
/* The three stages eight lanes wide: the same operations on every value, so the same bits. */
#define EXP_SFX avx512
#define EXP_TARGET __attribute__((target("avx512f")))
#define EXP_VL 8
#define EXP_VD __m512d
#define EXP_SET1 _mm512_set1_pd
#define EXP_LOAD _mm512_loadu_pd
#define EXP_STORE _mm512_storeu_pd
#define EXP_ADD _mm512_add_pd
#define EXP_SUB _mm512_sub_pd
#define EXP_MUL _mm512_mul_pd
#define EXP_DIV _mm512_div_pd
#define EXP_ROUND(v) _mm512_roundscale_pd((v), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
#define EXP_WIDEN(p) _mm512_cvtps_pd(_mm256_loadu_ps(p))
#define EXP_POW2(b) _mm512_castsi512_pd(_mm512_slli_epi64(_mm512_castpd_si512(b), 52))
#define EXP_POSITIVE(v)                                                                        \
    __builtin_popcount((unsigned)_mm512_cmp_pd_mask((v), _mm512_setzero_pd(), _CMP_GT_OQ))
#include "libsequoia/verify/exp_isa.h"

/* softmax_avx2 eight values at a time: its two four-lane sums (values j..j+3 and j+4..j+7 of
 * every eight) are the low and high halves of one eight-lane sum, added in the same order. */
__attribute__((target("avx512f"))) static double softmax_avx512(const float *logits, int V,
                                                               float mx, double temperature,
                                                               double *probs)
{
    const __m512d vmx = _mm512_set1_pd((double)mx), vt = _mm512_set1_pd(temperature);
    const __m512d low = _mm512_set1_pd(EXP_LOW);
    const int unit = temperature == 1.0;   /* x / 1 is x exactly: same bits */
    __m512d s = _mm512_setzero_pd();
    double xs[SOFTMAX_BLOCK], ks[SOFTMAX_BLOCK], rs[SOFTMAX_BLOCK], ps[SOFTMAX_BLOCK];
    const int V8 = V / 8 * 8;
    int i = 0;
    for (int b0 = 0; b0 < V8; b0 += SOFTMAX_BLOCK) {
        const int n = V8 - b0 < SOFTMAX_BLOCK ? V8 - b0 : SOFTMAX_BLOCK;   /* a multiple of 8 */
        exp_stage1_avx512(logits + b0, n, vmx, vt, unit, xs, ks, rs);
        exp_stage2_avx512(n, rs, ps);
        for (int j = 0; j < n; j += 8) {
            /* in range (x >= -708, false for NaN): the vector exp; otherwise the scalar path */
            __mmask8 in = _mm512_cmp_pd_mask(_mm512_loadu_pd(xs + j), low, _CMP_GE_OQ);
            __m512d e = _mm512_maskz_mov_pd(in, exp_stage3_avx512(ps + j, rs + j, ks + j));
            if (in != 0xFF) {
                double t[8];
                _mm512_storeu_pd(t, e);
                for (int k = 0; k < 8; k++)
                    if (!(xs[j + k] >= EXP_LOW)) {
                        double x = exp_nonpos(xs[j + k]);
                        t[k] = x == x ? x : 0.0;
                    }
                e = _mm512_loadu_pd(t);
            }
            _mm512_storeu_pd(probs + b0 + j, e);
            s = _mm512_add_pd(s, e);
        }
        i = b0 + n;
    }
    double l[4];
    _mm256_storeu_pd(l, _mm256_add_pd(_mm512_castpd512_pd256(s), _mm512_extractf64x4_pd(s, 1)));
    double sum = (l[0] + l[1]) + (l[2] + l[3]);
    for (; i < V; i++) {
        double e = exp_nonpos(((double)logits[i] - (double)mx) / temperature);
        probs[i] = e == e ? e : 0.0;
        sum += probs[i];
    }
    return sum;
}
#endif

/* probs[i] /= sum; returns how many are positive. */
static int normalise_scalar(double *probs, int V, double sum)
{
    int nz = 0;
    for (int i = 0; i < V; i++) {
        probs[i] /= sum;
        nz += probs[i] > 0.0;
    }
    return nz;
}



double sq_exp_nonpos(double x)
{
    return exp_nonpos(x);
}

/* The numerators for a finite largest usable logit mx, and their sum, on the path in use. */
static double softmax_numerators(const float *logits, int V, float mx, double temperature,
                                 double *e)
{
    const int isa = sq_rule_isa();
#ifdef SQ_RULE_AVX512
    if (isa >= SQ_RULE_ISA_AVX512)
        return softmax_avx512(logits, V, mx, temperature, e);
#endif
#ifdef SQ_RULE_AVX2
    if (isa >= SQ_RULE_ISA_AVX2)
        return softmax_avx2(logits, V, mx, temperature, e);
#endif
    (void)isa;   /* unused without the vector paths */
    return softmax_scalar(logits, V, mx, temperature, e);
}

double sq_softmax_numerators(const float *logits, int V, double temperature, double *e)
{
    SQ_ASSERT(V >= 1);
    if (!(temperature > 0.0))
        return 0.0;
    int best = sq_argmax_f(logits, V);
    if (!sq_k_logit_usable(logits[best]) || !isfinite(logits[best]))
        return 0.0;
    return softmax_numerators(logits, V, logits[best], temperature, e);
}

int sq_probs_from_logits(const float *logits, int V, double temperature, double top_p,
                         double *probs, double *scratch)
{
    SQ_ASSERT(V >= 1);
    int best = sq_argmax_f(logits, V);
    if (!(temperature > 0.0)) {
        memset(probs, 0, (size_t)V * sizeof *probs);
        probs[best] = 1.0;
        return 1;
    }
    /* NaN as the maximum: no usable logit, every token weighs 1 */
    float mx = sq_k_logit_usable(logits[best]) ? logits[best] : NAN;
    double sum = 0.0;
    if (isfinite(mx)) {
        /* the common case, vectorised (issue 17) */
        sum = softmax_numerators(logits, V, mx, temperature, probs);
    } else {
        for (int i = 0; i < V; i++) {
            probs[i] = sq_k_softmax_temp(logits[i], mx, temperature);
            sum += probs[i];
        }
    }
    /* sum >= 1: the best token weighs exp(0) = 1 */
    int nz = 0;
    const int isa = sq_rule_isa();
    (void)isa;
#ifdef SQ_RULE_AVX512
    if (isa >= SQ_RULE_ISA_AVX512)
        nz = normalise_avx512(probs, V, sum);
    else
#endif
#ifdef SQ_RULE_AVX2
    if (isa >= SQ_RULE_ISA_AVX2)
        nz = normalise_avx2(probs, V, sum);
    else
#endif
        nz = normalise_scalar(probs, V, sum);
    if (!(top_p < 1.0))
        return nz;
    nz = 0;
    for (int i = 0; i < V; i++) {
        if (probs[i] > 0.0)
            scratch[nz] = probs[i];
        nz += probs[i] > 0.0;
    }
    double tau = nucleus_threshold(scratch, nz, top_p);
    double kept = 0.0;
    nz = 0;
    for (int i = 0; i < V; i++) {
        if (probs[i] < tau)
            probs[i] = 0.0;
        kept += probs[i];
        nz += probs[i] > 0.0;
    }
    for (int i = 0; i < V; i++)
        probs[i] /= kept;
    return nz;
}
