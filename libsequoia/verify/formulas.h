/* The verification rule's per-element formulas, shared by the host verifier
 * (libsequoia/verify/verify.c), the acceptance estimator and the CUDA sampler
 * (runtime/cuda_sample.cu). Plain C11 that nvcc also compiles as C++: SQ_HD marks each
 * function __host__ __device__ there, so a GPU thread and the CPU compute the same number. */
#ifndef SQ_VERIFY_FORMULAS_H
#define SQ_VERIFY_FORMULAS_H

#include <math.h>
#include <stdint.h>

#ifdef __CUDACC__
#define SQ_HD __host__ __device__
#else
#define SQ_HD
#endif

/* ---- the verification rule's numbers (docs/estimator.md, "Verification rule") -------------- */

/* The slack by which a nucleus "reaches" top_p: a set of tokens whose probabilities sum to at
 * least top_p - SQ_TOP_P_SLACK reaches it. It absorbs the rounding of the sum (which differs
 * between a sequential host sum and a device tree reduction) so that a nucleus whose exact mass
 * is top_p is the same everywhere. */
#define SQ_TOP_P_SLACK 1e-9

/* A logit that counts: neither NaN nor -inf (+inf counts, as the largest possible logit). */
SQ_HD static inline int sq_k_logit_usable(float logit)
{
    return !isnan(logit) && logit != -INFINITY;
}

/* softmax(logits / T) numerator of one token against `max`, the largest usable logit of the
 * row (sq_argmax_f's), or NaN when the row has none. Unusable logits weigh 0. When the largest
 * logit is +inf, the +inf tokens weigh 1 and the others 0 (the limit of the softmax). A row with
 * no usable logit weighs 1 everywhere: it is treated as if every logit were equal, so it is
 * uniform at T > 0, as its argmax (token 0) is at T = 0. */
SQ_HD static inline double sq_k_softmax_temp(float logit, float max, double temperature)
{
    if (isnan(max))
        return 1.0;
    if (!sq_k_logit_usable(logit))
        return 0.0;
    if (max == INFINITY)
        return logit == INFINITY ? 1.0 : 0.0;
    return exp(((double)logit - (double)max) / temperature);
}

/* Does a set of tokens of total probability `mass` reach the nucleus mass top_p? The empty set
 * (mass 0) never does, so a nucleus always holds the most likely token. */
SQ_HD static inline int sq_k_nucleus_reaches(double mass, double top_p)
{
    return mass > 0.0 && mass >= top_p - SQ_TOP_P_SLACK;
}

/* The key by which the draft's logits rank the children of greedy and top-k proposals: the logit
 * itself, NaN ranking with -inf (last, in token order by sq_k_ranks_before). */
SQ_HD static inline double sq_k_rank_key(float logit)
{
    return isnan(logit) ? -INFINITY : (double)logit;
}

/* Element of the residual max(R - Q', 0) before normalisation (docs/design.md, verifiers). */
SQ_HD static inline double sq_k_residual(double r, double q)
{
    double d = r - q;
    return d > 0.0 ? d : 0.0;
}

/* Gumbel-top-k key (Efraimidis-Spirakis) of a token of probability q for a uniform u in (0, 1]:
 * the k largest keys are k draws from q without replacement; q = 0 gives -inf (never drawn). */
SQ_HD static inline double sq_k_gumbel_key(double u, double q)
{
    return q > 0.0 ? log(u) / q : -INFINITY;
}

/* Order of argmax and top-k: (va, ia) ranks before (vb, ib) when it is larger, or equal with a
 * lower index. */
SQ_HD static inline int sq_k_ranks_before(double va, int ia, double vb, int ib)
{
    return va > vb || (va == vb && ia < ib);
}

/* Argmax over logits, skipping the unusable ones (NaN, -inf): does candidate (vb, ib) replace
 * the current best (va, ia)? ia < 0 means no best yet. Ties go to the lower index. */
SQ_HD static inline int sq_k_argmax_takes(float va, int ia, float vb, int ib)
{
    if (ib < 0 || !sq_k_logit_usable(vb))
        return 0;
    return ia < 0 || vb > va || (vb == va && ib < ia);
}

/* Counter-based uniform in (0, 1] from (seed, stream, index): a splitmix64 hash, so a GPU
 * thread and the CPU draw the same number for the same element with no shared state. */
SQ_HD static inline double sq_k_uniform(uint64_t seed, uint64_t stream, uint64_t index)
{
    uint64_t z = seed ^ (stream * 0x9E3779B97F4A7C15ull) ^ (index * 0xD1B54A32D192ED03ull);
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return (double)((z >> 11) + 1) * (1.0 / 9007199254740992.0);   /* (0, 1], 53 bits */
}

#endif
