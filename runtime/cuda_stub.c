/* The CUDA sampling API (runtime/cuda_sample.h) in a build without the CUDA backend: every
 * call fails with the reason, so that callers and tests link the same way in both builds. */
#include "runtime/cuda_sample.h"

static int no_cuda(sq_error *err)
{
    return sq_error_set(err, SQ_EUSAGE, "this build has no CUDA backend");
}

int sq_cuda_sampler_new(int vocab, sq_cuda_sampler **out, sq_error *err)
{
    (void)vocab;
    *out = NULL;
    return no_cuda(err);
}

void sq_cuda_sampler_free(sq_cuda_sampler *s)
{
    (void)s;
}

int sq_cuda_probs(sq_cuda_sampler *s, const float *logits, double temperature, double top_p,
                  double *probs, sq_error *err)
{
    (void)s, (void)logits, (void)temperature, (void)top_p, (void)probs;
    return no_cuda(err);
}

int sq_cuda_argmax(sq_cuda_sampler *s, const float *logits, int *out, sq_error *err)
{
    (void)s, (void)logits, (void)out;
    return no_cuda(err);
}

int sq_cuda_residual(sq_cuda_sampler *s, double *r, const double *q, sq_error *err)
{
    (void)s, (void)r, (void)q;
    return no_cuda(err);
}

int sq_cuda_sample_without(sq_cuda_sampler *s, const double *q, uint64_t seed, uint64_t stream,
                           int k, int32_t *tokens, sq_error *err)
{
    (void)s, (void)q, (void)seed, (void)stream, (void)k, (void)tokens;
    return no_cuda(err);
}

int sq_cuda_sample_with(sq_cuda_sampler *s, const double *q, uint64_t seed, uint64_t stream,
                        int k, int32_t *tokens, sq_error *err)
{
    (void)s, (void)q, (void)seed, (void)stream, (void)k, (void)tokens;
    return no_cuda(err);
}

int sq_cuda_copy_bandwidth(size_t bytes, int reps, double *gb_per_s, sq_error *err)
{
    (void)bytes, (void)reps;
    *gb_per_s = 0.0;
    return no_cuda(err);
}
