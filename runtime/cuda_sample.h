/* Sampling arithmetic on a CUDA device (runtime/cuda_sample.cu): softmax with temperature and
 * top-p, argmax, the residual update and draws with and without replacement, on one vocabulary
 * row. They compute what libsequoia/verify/ computes on the host (the same per-element
 * formulas, libsequoia/verify/formulas.h), so a verifier can keep its decisions on the host while
 * the O(V) work runs next to the logits. Vectors are host arrays here (copied in and out), which is what the tests
 * compare against verify.c; random draws are counter-based (sq_k_uniform), so the host can
 * reproduce them exactly.
 *
 * The functions below are the loader's (runtime/cuda_load.c): each forwards to the CUDA module's
 * own (runtime/cuda_sample.cu, reached through its table, runtime/backend.h), loading the module
 * on the first call. Errors: SQ_ESOFTWARE with the failing CUDA call, SQ_EUSAGE when there is no
 * device or the build has no CUDA backend, SQ_EUNAVAILABLE when the module or a CUDA library
 * cannot be loaded (docs/cuda.md). */
#ifndef SQ_RUNTIME_CUDA_SAMPLE_H
#define SQ_RUNTIME_CUDA_SAMPLE_H

#include <stddef.h>
#include <stdint.h>

#include "libsequoia/base/error.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sq_cuda_sampler sq_cuda_sampler;

int sq_cuda_sampler_new(int vocab, sq_cuda_sampler **out, sq_error *err);
void sq_cuda_sampler_free(sq_cuda_sampler *s);

/* probs (V) = the verification rule's distribution (sq_probs_from_logits, libsequoia/verify/
 * rule.h): softmax(logits / T) over the nucleus of mass top_p, ties at the cut kept; T = 0 gives
 * the one-hot argmax. */
int sq_cuda_probs(sq_cuda_sampler *s, const float *logits, double temperature, double top_p,
                  double *probs, sq_error *err);

/* Index of the largest usable logit (not NaN, not -inf), lowest on ties; 0 when none is. As
 * sq_argmax_f. */
int sq_cuda_argmax(sq_cuda_sampler *s, const float *logits, int *out, sq_error *err);

/* r <- norm(max(r - q, 0)) in place; r unchanged when nothing remains. */
int sq_cuda_residual(sq_cuda_sampler *s, double *r, const double *q, sq_error *err);

/* k tokens drawn from q without replacement: the k largest Gumbel keys
 * sq_k_gumbel_key(sq_k_uniform(seed, stream, i), q[i]), largest first, lower id on ties. */
int sq_cuda_sample_without(sq_cuda_sampler *s, const double *q, uint64_t seed, uint64_t stream,
                           int k, int32_t *tokens, sq_error *err);

/* k i.i.d. draws from q (with replacement): draw j is the first token whose cumulative mass
 * exceeds sq_k_uniform(seed, stream, j) * sum(q). */
int sq_cuda_sample_with(sq_cuda_sampler *s, const double *q, uint64_t seed, uint64_t stream,
                        int k, int32_t *tokens, sq_error *err);

/* The device's memory bandwidth as a device-to-device copy sees it: the best of `reps` copies
 * of `bytes` bytes, counted as bytes read + bytes written per second (GB/s = 1e9 B/s). The
 * reference against which the decode benchmarks report their weight streaming rate. */
int sq_cuda_copy_bandwidth(size_t bytes, int reps, double *gb_per_s, sq_error *err);

#ifdef __cplusplus
}
#endif

#endif
