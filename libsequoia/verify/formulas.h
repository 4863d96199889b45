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

/* ---- sampling --------------------------------------------------------------------------------- */

/* softmax(logits / T) numerator against the largest finite logit; non-finite logits weigh 0. */
SQ_HD static inline double sq_k_softmax_temp(float logit, float max, double temperature)
{
    return isfinite(logit) ? exp(((double)logit - (double)max) / temperature) : 0.0;
}

/* Element of the residual max(R - Q', 0) before normalisation (DESIGN.md §4). */
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

/* Argmax over floats skipping non-finite values: does candidate (vb, ib) replace the current
 * best (va, ia)? ia < 0 means no best yet. */
SQ_HD static inline int sq_k_argmax_takes(float va, int ia, float vb, int ib)
{
    if (ib < 0 || !isfinite(vb))
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
