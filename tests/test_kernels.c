/* The per-element arithmetic of runtime/kernels.h, which the CPU backend, the verifier and the
 * CUDA kernels share, against plain reference formulas computed in double. These run on any
 * machine: they are what the CUDA kernels compute per element. (The 16-bit conversions that
 * kernels.h takes from libsequoia/base/half.h are tested in tests/test_half.c.) */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/kernels.h"
#include "libsequoia/verify/verify.h"

/* xorshift for test data */
static uint64_t rng_state = 88172645463325252ull;

static uint64_t rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

static double urand(void)
{
    return (double)(rnd() >> 11) / 9007199254740992.0;
}

static float frand(float lo, float hi)
{
    return lo + (hi - lo) * (float)urand();
}

/* relative error against a double reference, with an absolute floor */
static int close_to(double got, double want, double rel)
{
    return fabs(got - want) <= rel * fmax(fabs(want), 1e-6);
}

Test(kernels, rmsnorm_matches_the_double_formula)
{
    for (int trial = 0; trial < 50; trial++) {
        int dim = 1 + (int)(rnd() % 300);
        float x[300], w[300];
        double ss = 0.0;
        float ssf = 0.0f;
        for (int k = 0; k < dim; k++) {
            x[k] = frand(-3, 3);
            w[k] = frand(-2, 2);
            ss += (double)x[k] * x[k];
            ssf += x[k] * x[k];
        }
        const float eps = 1e-5f;
        float scale = sq_k_rms_scale(ssf, dim, eps);
        double want_scale = 1.0 / sqrt(ss / dim + (double)eps);
        cr_assert(close_to(scale, want_scale, 1e-5), "dim %d: scale %g, want %g", dim, scale,
                  want_scale);
        for (int k = 0; k < dim; k++) {
            double want = (double)w[k] * x[k] * want_scale;
            cr_assert(fabs(sq_k_rmsnorm(x[k], scale, w[k]) - want) <= 1e-5 * (fabs(want) + 1),
                      "dim %d, k %d", dim, k);
        }
    }
    /* all zeros: eps keeps the scale finite */
    cr_assert(isfinite(sq_k_rms_scale(0.0f, 8, 1e-6f)));
    cr_assert_float_eq(sq_k_rmsnorm(0.0f, sq_k_rms_scale(0.0f, 8, 1e-6f), 3.0f), 0.0f, 0.0f);
}

Test(kernels, rope_is_the_rotation_of_hf_rotate_half)
{
    const int head_dim = 64, half = head_dim / 2;
    const float theta = 10000.0f;
    for (int i = 0; i < half; i++) {
        double want = 1.0 / pow(theta, 2.0 * i / head_dim);
        cr_assert(close_to(sq_k_rope_inv_freq(i, head_dim, theta), want, 1e-6), "inv_freq[%d]", i);
    }
    for (int trial = 0; trial < 1000; trial++) {
        int pos = (int)(rnd() % 4096), i = (int)(rnd() % half);
        float x0 = frand(-2, 2), x1 = frand(-2, 2);
        float angle = (float)pos * sq_k_rope_inv_freq(i, head_dim, theta);
        float a = x0, b = x1;
        sq_k_rope_rotate(&a, &b, cosf(angle), sinf(angle));
        /* (x0 + i x1) * e^{i angle} */
        double ang = (double)angle;
        double want0 = x0 * cos(ang) - x1 * sin(ang), want1 = x1 * cos(ang) + x0 * sin(ang);
        cr_assert(fabs(a - want0) <= 1e-5 && fabs(b - want1) <= 1e-5,
                  "pos %d i %d: (%g, %g) vs (%g, %g)", pos, i, a, b, want0, want1);
        /* a rotation keeps the norm */
        double n0 = (double)x0 * x0 + (double)x1 * x1, n1 = (double)a * a + (double)b * b;
        cr_assert(fabs(n0 - n1) <= 1e-5 * (n0 + 1e-3));
    }
    /* position 0 is the identity */
    float a = 0.3f, b = -1.7f;
    sq_k_rope_rotate(&a, &b, cosf(0.0f), sinf(0.0f));
    cr_assert(a == 0.3f && b == -1.7f);
}

Test(kernels, silu_times_up_matches_the_double_formula)
{
    for (int trial = 0; trial < 10000; trial++) {
        float g = frand(-30, 30), u = frand(-5, 5);
        double want = (double)g / (1.0 + exp(-(double)g)) * u;
        cr_assert(fabs(sq_k_silu_mul(g, u) - want) <= 1e-5 * (fabs(want) + 1), "g %g u %g", g, u);
    }
    cr_assert_float_eq(sq_k_silu_mul(0.0f, 5.0f), 0.0f, 0.0f);
    cr_assert(sq_k_silu_mul(-100.0f, 1.0f) <= 0.0f && sq_k_silu_mul(-100.0f, 1.0f) > -1e-30f);
}

/* softmax(scores) . values in double, -inf scores masked */
static double ref_attention(const float *sc, const float *v, int n)
{
    double mx = -INFINITY, s = 0.0, o = 0.0;
    for (int t = 0; t < n; t++)
        if (sc[t] > mx)
            mx = sc[t];
    if (mx == -INFINITY)
        return 0.0;
    for (int t = 0; t < n; t++)
        if (sc[t] != -INFINITY) {
            double e = exp((double)sc[t] - mx);
            s += e;
            o += e * v[t];
        }
    return o / s;
}

/* The CUDA attention kernel's schedule on the CPU: `parts` partial online states over the
 * strided subsets t = w, w + parts, ..., merged in order. */
static double online_attention(const float *sc, const float *v, int n, int parts)
{
    sq_k_online tot = sq_k_online_init();
    float acc_tot = 0.0f;
    for (int w = 0; w < parts; w++) {
        sq_k_online st = sq_k_online_init();
        float acc = 0.0f, alpha, beta;
        for (int t = w; t < n; t += parts) {
            sq_k_online_push(&st, sc[t], &alpha, &beta);
            acc = alpha * acc + beta * v[t];
        }
        sq_k_online_merge(&tot, st, &alpha, &beta);
        acc_tot = alpha * acc_tot + beta * acc;
    }
    return tot.l > 0.0f ? acc_tot / tot.l : 0.0;
}

ParameterizedTestParameters(kernels, online_softmax_equals_two_pass_softmax)
{
    static int parts[] = {1, 2, 4, 7, 32};
    return cr_make_param_array(int, parts, sizeof parts / sizeof *parts);
}

ParameterizedTest(int *parts, kernels, online_softmax_equals_two_pass_softmax)
{
    for (int trial = 0; trial < 200; trial++) {
        int n = 1 + (int)(rnd() % 200);
        float sc[200], v[200];
        for (int t = 0; t < n; t++) {
            sc[t] = rnd() % 5 == 0 ? -INFINITY : frand(-20, 20);   /* masked slots */
            v[t] = frand(-1, 1);
        }
        double want = ref_attention(sc, v, n), got = online_attention(sc, v, n, *parts);
        cr_assert(fabs(got - want) <= 1e-5, "n %d, %d parts: %g vs %g", n, *parts, got, want);
        /* the two-pass form the CPU backend uses, from the same header */
        float mx = -INFINITY, s = 0.0f, o = 0.0f;
        for (int t = 0; t < n; t++)
            if (sc[t] > mx)
                mx = sc[t];
        if (mx != -INFINITY) {
            for (int t = 0; t < n; t++) {
                float e = sq_k_attn_exp(sc[t], mx);
                s += e;
                o += e * v[t];
            }
            cr_assert(fabs(o / s - want) <= 1e-5);
        }
    }
    /* everything masked: an empty state, weight 0 */
    float sc[3] = {-INFINITY, -INFINITY, -INFINITY}, v[3] = {1, 2, 3};
    cr_assert_float_eq(online_attention(sc, v, 3, *parts), 0.0, 0.0);
    sq_k_online st = sq_k_online_init();
    float a, b;
    sq_k_online_push(&st, -INFINITY, &a, &b);
    cr_assert(st.l == 0.0f && st.m == -INFINITY && b == 0.0f);
}

Test(kernels, online_softmax_is_stable_with_huge_scores)
{
    float sc[4] = {1000.0f, 999.0f, -1000.0f, 1000.0f}, v[4] = {1, 2, 3, 4};
    double got = online_attention(sc, v, 4, 2), want = ref_attention(sc, v, 4);
    cr_assert(isfinite(got) && fabs(got - want) <= 1e-5, "%g vs %g", got, want);
}

Test(kernels, temperature_softmax_numerator)
{
    for (int trial = 0; trial < 1000; trial++) {
        float l = frand(-50, 50), mx = l + frand(0, 30);
        double t = 0.05 + 2.0 * urand();
        double want = exp(((double)l - mx) / t);
        cr_assert(close_to(sq_k_softmax_temp(l, mx, t), want, 1e-12));
    }
    cr_assert_float_eq(sq_k_softmax_temp(-INFINITY, 0.0f, 1.0), 0.0, 0.0);
    cr_assert_float_eq(sq_k_softmax_temp(NAN, 0.0f, 1.0), 0.0, 0.0);
    cr_assert_float_eq(sq_k_softmax_temp(3.0f, 3.0f, 0.7), 1.0, 0.0);
    /* the rule's edge cases (docs/estimator.md, "Verification rule"): a row whose largest logit
     * is +inf puts its mass on the +inf tokens; a row with no usable logit (max NaN) is
     * uniform */
    cr_assert_float_eq(sq_k_softmax_temp(INFINITY, INFINITY, 0.7), 1.0, 0.0);
    cr_assert_float_eq(sq_k_softmax_temp(1e30f, INFINITY, 0.7), 0.0, 0.0);
    cr_assert_float_eq(sq_k_softmax_temp(-INFINITY, NAN, 0.7), 1.0, 0.0);
    cr_assert_float_eq(sq_k_softmax_temp(NAN, NAN, 0.7), 1.0, 0.0);
}

Test(kernels, nucleus_reach_and_rank_key)
{
    /* a mass reaches top_p up to SQ_TOP_P_SLACK, the empty set never */
    cr_assert(sq_k_nucleus_reaches(0.5, 0.5));
    cr_assert(sq_k_nucleus_reaches(0.5 - 0.5 * SQ_TOP_P_SLACK, 0.5));
    cr_assert(!sq_k_nucleus_reaches(0.5 - 2 * SQ_TOP_P_SLACK, 0.5));
    cr_assert(!sq_k_nucleus_reaches(0.0, 1e-12));
    cr_assert(sq_k_nucleus_reaches(1e-300, 1e-12));
    /* 0.1 + 0.2 rounds to 0.30000000000000004 one way and 0.3 - 1e-17 another: both reach 0.3 */
    cr_assert(sq_k_nucleus_reaches(0.1 + 0.2, 0.3) && sq_k_nucleus_reaches(0.3 - 1e-17, 0.3));
    /* draft order keys: NaN with -inf, +inf first */
    cr_assert(sq_k_rank_key(NAN) == -INFINITY);
    cr_assert(sq_k_rank_key(-INFINITY) == -INFINITY);
    cr_assert(sq_k_rank_key(INFINITY) == INFINITY);
    cr_assert(sq_k_rank_key(1.5f) == 1.5);
    cr_assert(sq_k_logit_usable(INFINITY) && !sq_k_logit_usable(NAN) &&
              !sq_k_logit_usable(-INFINITY));
}

Test(kernels, residual_and_gumbel_key_match_their_definitions)
{
    for (int trial = 0; trial < 1000; trial++) {
        double r = urand(), q = urand();
        cr_assert_float_eq(sq_k_residual(r, q), r > q ? r - q : 0.0, 0.0);
        double u = 1.0 - urand();   /* (0, 1] */
        cr_assert_float_eq(sq_k_gumbel_key(u, q + 1e-9), log(u) / (q + 1e-9), 0.0);
    }
    cr_assert(sq_k_gumbel_key(0.5, 0.0) == -INFINITY);
    cr_assert(sq_k_gumbel_key(1.0, 0.3) == 0.0);   /* the largest possible key */
}

/* Gumbel-top-1 keys pick token i with probability q_i: a chi-square-free check on the counts. */
Test(kernels, gumbel_keys_from_counter_uniforms_sample_q)
{
    const double q[4] = {0.5, 0.3, 0.15, 0.05};
    int count[4] = {0};
    const int N = 40000;
    for (int d = 0; d < N; d++) {
        int best = -1;
        double bk = 0.0;
        for (int i = 0; i < 4; i++) {
            double k = sq_k_gumbel_key(sq_k_uniform(7, (uint64_t)d, (uint64_t)i), q[i]);
            if (best < 0 || sq_k_ranks_before(k, i, bk, best)) {
                bk = k;
                best = i;
            }
        }
        count[best]++;
    }
    for (int i = 0; i < 4; i++) {
        double sd = sqrt(N * q[i] * (1 - q[i]));
        cr_assert(fabs(count[i] - N * q[i]) < 5 * sd, "token %d: %d of %d, want %g", i, count[i],
                  N, N * q[i]);
    }
}

Test(kernels, counter_uniforms_are_in_0_1_and_uniform)
{
    int bins[16] = {0};
    const int N = 160000;
    for (int i = 0; i < N; i++) {
        double u = sq_k_uniform(42, 3, (uint64_t)i);
        cr_assert(u > 0.0 && u <= 1.0, "u = %g", u);
        bins[(int)(u * 16) & 15]++;
    }
    for (int b = 0; b < 16; b++)
        cr_assert(abs(bins[b] - N / 16) < 5 * 97, "bin %d: %d", b, bins[b]);   /* sd ~ 97 */
    /* reproducible, and different streams differ */
    cr_assert_float_eq(sq_k_uniform(1, 2, 3), sq_k_uniform(1, 2, 3), 0.0);
    cr_assert(sq_k_uniform(1, 2, 3) != sq_k_uniform(1, 3, 3));
    cr_assert(sq_k_uniform(1, 2, 3) != sq_k_uniform(2, 2, 3));
}

/* The device argmax reduces pairs in a tree; any reduction order gives sq_argmax_f's answer. */
Test(kernels, argmax_rule_in_any_reduction_order_equals_sq_argmax_f)
{
    for (int trial = 0; trial < 300; trial++) {
        int n = 1 + (int)(rnd() % 100);
        float x[100];
        for (int i = 0; i < n; i++) {
            int kind = (int)(rnd() % 10);
            x[i] = kind == 0 ? NAN : kind == 1 ? -INFINITY : kind == 2 ? INFINITY
                 : (float)(int)(rnd() % 5);   /* many ties */
        }
        int want = sq_argmax_f(x, n);
        /* pairwise tree reduction with a stride, as in a block reduction */
        float v[128];
        int idx[128];
        for (int i = 0; i < 128; i++) {
            v[i] = 0.0f;
            idx[i] = -1;
        }
        for (int i = 0; i < n; i++) {
            int slot = i % 32;
            if (sq_k_argmax_takes(v[slot], idx[slot], x[i], i)) {
                v[slot] = x[i];
                idx[slot] = i;
            }
        }
        for (int o = 16; o > 0; o >>= 1)
            for (int s = 0; s < o; s++)
                if (idx[s + o] >= 0 && sq_k_argmax_takes(v[s], idx[s], v[s + o], idx[s + o])) {
                    v[s] = v[s + o];
                    idx[s] = idx[s + o];
                }
        int got = idx[0] < 0 ? 0 : idx[0];
        cr_assert_eq(got, want, "trial %d (n %d): %d vs %d", trial, n, got, want);
    }
}

/* The 16-bit conversions (libsequoia/base/half.h) are tested in tests/test_half.c. */

/* The device's nucleus (runtime/cuda_sample.cu, k_probs) finds tau by bisection on the bit
 * patterns of the probabilities, with block sums in a different order from the host's; the
 * host's (libsequoia/verify/rule.c) by quickselect. Replayed here with a strided two-level sum
 * like a block reduction: both keep the same tokens on rows full of ties. */
static double strided_mass(const double *p, int n, double tau)
{
    double part[32] = {0}, m = 0.0;
    for (int i = 0; i < n; i++)
        if (p[i] >= tau)
            part[i % 32] += p[i];
    for (int o = 16; o > 0; o >>= 1)
        for (int t = 0; t < o; t++)
            part[t] += part[t + o];
    m = part[0];
    return m;
}

static double bits_to_d(uint64_t u)
{
    double d;
    memcpy(&d, &u, sizeof d);
    return d;
}

Test(kernels, nucleus_by_bisection_keeps_what_the_host_rule_keeps)
{
    for (int trial = 0; trial < 400; trial++) {
        int n = 1 + (int)(rnd() % 300);
        float l[300];
        for (int i = 0; i < n; i++) {
            int kind = (int)(rnd() % 16);
            l[i] = kind == 0 ? -INFINITY : kind == 1 ? NAN : (float)(int)(rnd() % 6) * 0.5f;
        }
        double T = 0.3 + 1.5 * urand(), top_p = trial % 7 == 0 ? 0.5 : 0.02 + 0.97 * urand();
        double full[300], want[300], scratch[300];
        sq_probs_from_logits(l, n, T, 1.0, full, NULL);
        sq_probs_from_logits(l, n, T, top_p, want, scratch);
        int b = sq_argmax_f(l, n);
        uint64_t lo = 0, hi;
        memcpy(&hi, &full[b], sizeof hi);
        hi += 1;
        while (hi - lo > 1) {
            uint64_t mid = lo + (hi - lo) / 2;
            if (sq_k_nucleus_reaches(strided_mass(full, n, bits_to_d(mid)), top_p))
                lo = mid;
            else
                hi = mid;
        }
        double tau = bits_to_d(lo);
        for (int i = 0; i < n; i++)
            cr_assert_eq(full[i] >= tau && full[i] > 0, want[i] > 0,
                         "trial %d token %d: p %g, tau %g, host keeps %d", trial, i, full[i],
                         tau, want[i] > 0);
    }
}

/* ---- the host softmax's own exp and the vectorised argmax (issue 17) ---------------------- */

static int64_t ulps_apart(double a, double b)
{
    int64_t x, y;
    memcpy(&x, &a, sizeof x);
    memcpy(&y, &b, sizeof y);
    return x > y ? x - y : y - x;
}

Test(kernels, softmax_exp_is_within_2_ulp_of_libm)
{
    int64_t worst = 0;
    for (int i = 0; i < 2000000; i++) {
        double x = i % 4 ? -40.0 * urand() : -745.0 * urand();
        double got = sq_exp_nonpos(x), want = exp(x);
        int64_t u = ulps_apart(got, want);
        cr_assert_leq(u, 2, "exp(%.17g): %.17g, libm %.17g (%lld ulp)", x, got, want, (long long)u);
        if (u > worst)
            worst = u;
    }
    cr_assert_eq(sq_exp_nonpos(0.0), 1.0);
    cr_assert_eq(sq_exp_nonpos(-INFINITY), 0.0);
    cr_assert(isnan(sq_exp_nonpos(NAN)));
    cr_assert_eq(sq_exp_nonpos(-800.0), 0.0);
    cr_assert_eq(sq_exp_nonpos(-720.0), exp(-720.0)); /* subnormal: libm's */
    cr_log_info("largest error: %lld ulp", (long long)worst);
}

Test(kernels, equal_logits_get_bitwise_equal_probabilities_wherever_they_sit)
{
    /* the row is processed eight values at a time plus a scalar tail: a value must not depend on
     * which of the two computes it */
    for (int trial = 0; trial < 200; trial++) {
        int n = 1 + (int)(rnd() % 77);
        float l[77];
        float pool[5] = {frand(-30, 5), frand(-30, 5), -INFINITY, frand(-3, 3), 2.5f};
        for (int i = 0; i < n; i++)
            l[i] = pool[rnd() % 5];
        double T = 0.2 + 2 * urand();
        double P[77];
        sq_probs_from_logits(l, n, T, 1.0, P, NULL);
        int usable = 0;
        for (int i = 0; i < n; i++)
            usable |= l[i] != -INFINITY;
        double sum = 0;
        for (int i = 0; i < n; i++) {
            sum += P[i];
            for (int j = 0; j < i; j++)
                if (l[i] == l[j])
                    cr_assert(memcmp(&P[i], &P[j], sizeof P[i]) == 0, "trial %d: tokens %d and %d",
                              trial, j, i);
            if (l[i] == -INFINITY && usable)
                cr_assert_eq(P[i], 0.0);
        }
        cr_assert(fabs(sum - 1) < 1e-12, "trial %d: sum %.17g", trial, sum);
    }
}

Test(kernels, vectorised_argmax_equals_the_elementwise_rule)
{
    for (int trial = 0; trial < 3000; trial++) {
        int n = 1 + (int)(rnd() % 100);
        float x[100];
        for (int i = 0; i < n; i++) {
            int kind = (int)(rnd() % 12);
            x[i] = kind == 0 ? NAN : kind == 1 ? -INFINITY : kind == 2 ? INFINITY
                 : kind == 3 ? -0.0f : kind == 4 ? 0.0f : (float)(int)(rnd() % 5);
            if (trial % 3 == 0 && kind == 2)
                x[i] = 1.0f; /* rows without +inf too */
        }
        int want = -1;
        for (int i = 0; i < n; i++)
            if (sq_k_argmax_takes(want < 0 ? 0.0f : x[want], want, x[i], i))
                want = i;
        cr_assert_eq(sq_argmax_f(x, n), want < 0 ? 0 : want, "trial %d", trial);
    }
}

/* ---- the rule's code paths (issue 27): scalar, AVX2, AVX-512 give the same bits ----------- */

/* A row of n logits of one of several kinds: ordinary, wide (exponents below -708 once divided
 * by T, so the vector exp hands values to the scalar one), with -inf and NaN, all -inf, +inf. */
static void path_row(float *l, int n, int kind)
{
    for (int i = 0; i < n; i++) {
        int r = (int)(rnd() % 40);
        l[i] = kind == 1 ? frand(-900, 10) : frand(-30, 5);
        if (kind >= 2 && r == 0)
            l[i] = -INFINITY;
        if (kind >= 2 && r == 1)
            l[i] = NAN;
        if (kind == 3)
            l[i] = r < 30 ? -INFINITY : NAN;
        if (kind == 4 && r < 2)
            l[i] = INFINITY;
        if (r == 2)
            l[i] = l[rnd() % (unsigned)(i + 1)];   /* ties */
    }
}

Test(kernels, every_code_path_gives_the_scalar_paths_bits)
{
    static const int sizes[] = {1, 3, 7, 8, 9, 15, 16, 17, 31, 33, 255, 256, 257, 263, 1000, 32000};
    static const double temps[] = {0.3, 0.6, 1.0, 1.7};
    const int host = sq_rule_isa();
    cr_assert_eq(sq_rule_isa_set(SQ_RULE_ISA_AVX512 + 1), -1);
    cr_assert_eq(sq_rule_isa_set(-2), -1);
    cr_assert_eq(sq_rule_isa(), host, "a refused setting changes nothing");
    float *l = malloc(32000 * sizeof *l);
    double *want = malloc(32000 * sizeof *want), *got = malloc(32000 * sizeof *got);
    double *scratch = malloc(32000 * sizeof *scratch);
    cr_assert(l && want && got && scratch);
    int compared = 0;
    for (size_t si = 0; si < sizeof sizes / sizeof *sizes; si++)
        for (int kind = 0; kind < 5; kind++)
            for (size_t ti = 0; ti < sizeof temps / sizeof *temps; ti++) {
                const int n = sizes[si];
                path_row(l, n, kind);
                const double top_p = ti == 3 ? 0.9 : 1.0;
                cr_assert_eq(sq_rule_isa_set(SQ_RULE_ISA_SCALAR), 0);
                int nz = sq_probs_from_logits(l, n, temps[ti], top_p, want, scratch);
                int arg = sq_argmax_f(l, n);
                for (int isa = SQ_RULE_ISA_AVX2; isa <= host; isa++) {
                    cr_assert_eq(sq_rule_isa_set(isa), 0);
                    cr_assert_eq(sq_rule_isa(), isa);
                    int nz2 = sq_probs_from_logits(l, n, temps[ti], top_p, got, scratch);
                    cr_assert_eq(nz2, nz, "%s, V %d, kind %d, T %g", sq_rule_isa_name(isa), n,
                                 kind, temps[ti]);
                    cr_assert(memcmp(got, want, (size_t)n * sizeof *got) == 0,
                              "%s, V %d, kind %d, T %g: other bits than the scalar path's",
                              sq_rule_isa_name(isa), n, kind, temps[ti]);
                    cr_assert_eq(sq_argmax_f(l, n), arg, "%s, V %d, kind %d",
                                 sq_rule_isa_name(isa), n, kind);
                    compared++;
                }
            }
    cr_assert_eq(sq_rule_isa_set(SQ_RULE_ISA_AUTO), 0);
    cr_assert_eq(sq_rule_isa(), host);
    cr_log_info("host path %s, %d rows compared", sq_rule_isa_name(host), compared);
    free(l);
    free(want);
    free(got);
    free(scratch);
}

Test(kernels, sq_cpu_isa_in_the_environment_forces_the_rules_path)
{
    unsetenv("SQ_CPU_ISA");
    cr_assert_eq(sq_rule_isa_set(SQ_RULE_ISA_AUTO), 0);
    const int best = sq_rule_isa();
    setenv("SQ_CPU_ISA", "scalar", 1);
    cr_assert_eq(sq_rule_isa_set(SQ_RULE_ISA_AUTO), 0);
    cr_assert_eq(sq_rule_isa(), SQ_RULE_ISA_SCALAR);
    setenv("SQ_CPU_ISA", "avx9", 1);   /* unknown: the best */
    cr_assert_eq(sq_rule_isa_set(SQ_RULE_ISA_AUTO), 0);
    cr_assert_eq(sq_rule_isa(), best);
    if (best >= SQ_RULE_ISA_AVX2) {
        setenv("SQ_CPU_ISA", "avx2", 1);
        cr_assert_eq(sq_rule_isa_set(SQ_RULE_ISA_AUTO), 0);
        cr_assert_eq(sq_rule_isa(), SQ_RULE_ISA_AVX2);
    }
    unsetenv("SQ_CPU_ISA");
    cr_assert_eq(sq_rule_isa_set(SQ_RULE_ISA_AUTO), 0);
}
