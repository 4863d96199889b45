/* Sampling kernels (runtime/cuda_sample.h): one vocabulary row per call, one thread block of
 * THREADS threads, reductions in shared memory. The per-element formulas are the verification
 * rule's (libsequoia/verify/formulas.h, through runtime/kernels.h). */
#include <stdlib.h>
#include <string.h>

#include "runtime/cuda_check.h"
#include "runtime/cuda_sample.h"
#include "runtime/kernels.h"

#define THREADS 1024
#define MAX_DRAWS 4096

struct sq_cuda_sampler {
    int      vocab;
    float   *d_logits;   // (V)
    double  *d_a;        // (V)   probabilities / residual
    double  *d_b;        // (V)   second operand / keys
    uint8_t *d_taken;    // (V)
    int32_t *d_tokens;   // (max(V, MAX_DRAWS))
};

/* ---- block reductions (blockDim.x == THREADS) ------------------------------------------------- */

__device__ double block_sum(double v, double *sh)
{
    sh[threadIdx.x] = v;
    __syncthreads();
    for (int o = THREADS / 2; o > 0; o >>= 1) {
        if ((int)threadIdx.x < o)
            sh[threadIdx.x] += sh[threadIdx.x + o];
        __syncthreads();
    }
    double r = sh[0];
    __syncthreads();
    return r;
}

/* The best (value, index) of the block under `ranks` (ties to the lower index); idx < 0: none. */
__device__ void block_best(double *v, int *idx, double *shv, int *shi, bool finite_only)
{
    shv[threadIdx.x] = *v;
    shi[threadIdx.x] = *idx;
    __syncthreads();
    for (int o = THREADS / 2; o > 0; o >>= 1) {
        if ((int)threadIdx.x < o) {
            double vb = shv[threadIdx.x + o];
            int ib = shi[threadIdx.x + o];
            double va = shv[threadIdx.x];
            int ia = shi[threadIdx.x];
            bool take = ib >= 0 && (ia < 0 || sq_k_ranks_before(vb, ib, va, ia));
            if (take) {
                shv[threadIdx.x] = vb;
                shi[threadIdx.x] = ib;
            }
        }
        __syncthreads();
    }
    *v = shv[0];
    *idx = shi[0];
    __syncthreads();
}

__device__ int block_argmax_logits(const float *logits, int V, double *shv, int *shi)
{
    float bv = 0.0f;
    int bi = -1;
    for (int i = threadIdx.x; i < V; i += THREADS)
        if (sq_k_argmax_takes(bv, bi, logits[i], i)) {
            bv = logits[i];
            bi = i;
        }
    double v = bv;
    block_best(&v, &bi, shv, shi, true);
    return bi;
}

__global__ void k_argmax(const float *logits, int V, int32_t *out)
{
    __shared__ double shv[THREADS];
    __shared__ int shi[THREADS];
    int b = block_argmax_logits(logits, V, shv, shi);
    if (threadIdx.x == 0)
        out[0] = b < 0 ? 0 : b;
}

__device__ unsigned long long dbits(double d)
{
    unsigned long long u;
    memcpy(&u, &d, sizeof u);
    return u;
}

__device__ double bitsd(unsigned long long u)
{
    double d;
    memcpy(&d, &u, sizeof d);
    return d;
}

/* The verification rule's distribution (libsequoia/verify/rule.h, sq_probs_from_logits) with
 * the same per-element formulas: softmax at T, the no-usable-logit and +inf cases through
 * sq_k_softmax_temp, and the nucleus: every token of probability >= tau, tau the largest value
 * whose tokens >= tau reach top_p (sq_k_nucleus_reaches), so that ties at the cut are all
 * kept. */
__global__ void k_probs(const float *logits, int V, double temperature, double top_p,
                        double *p)
{
    __shared__ double shv[THREADS];
    __shared__ int shi[THREADS];
    const int best = block_argmax_logits(logits, V, shv, shi);
    const int b = best < 0 ? 0 : best;
    if (!(temperature > 0.0)) {
        for (int i = threadIdx.x; i < V; i += THREADS)
            p[i] = i == b ? 1.0 : 0.0;
        return;
    }
    const float mx = best < 0 ? NAN : logits[best];   /* NaN: no usable logit, uniform */
    double s = 0.0;
    for (int i = threadIdx.x; i < V; i += THREADS) {
        p[i] = sq_k_softmax_temp(logits[i], mx, temperature);
        s += p[i];
    }
    s = block_sum(s, shv);
    for (int i = threadIdx.x; i < V; i += THREADS)
        p[i] /= s;
    if (!(top_p < 1.0))
        return;
    __syncthreads();
    /* tau by bisection on the bit patterns of non-negative doubles (monotone in the value):
     * the tokens >= bitsd(lo) reach top_p, those >= bitsd(hi) do not (none is above p[b], the
     * largest) */
    unsigned long long lo = 0, hi = dbits(p[b]) + 1;
    while (hi - lo > 1) {
        unsigned long long mid = lo + (hi - lo) / 2;
        double tau = bitsd(mid), m = 0.0;
        for (int i = threadIdx.x; i < V; i += THREADS)
            if (p[i] >= tau)
                m += p[i];
        m = block_sum(m, shv);
        if (sq_k_nucleus_reaches(m, top_p))
            lo = mid;
        else
            hi = mid;
    }
    const double tau = bitsd(lo);
    double kept = 0.0;
    for (int i = threadIdx.x; i < V; i += THREADS) {
        if (p[i] < tau)
            p[i] = 0.0;
        kept += p[i];
    }
    kept = block_sum(kept, shv);
    for (int i = threadIdx.x; i < V; i += THREADS)
        p[i] /= kept;
}

__global__ void k_residual(double *r, const double *q, int V)
{
    __shared__ double shv[THREADS];
    double s = 0.0;
    for (int i = threadIdx.x; i < V; i += THREADS)
        s += sq_k_residual(r[i], q[i]);
    s = block_sum(s, shv);
    if (!(s > 1e-300))
        return;
    for (int i = threadIdx.x; i < V; i += THREADS)
        r[i] = sq_k_residual(r[i], q[i]) / s;
}

/* Gumbel-top-k: k rounds of a block argmax over the keys of the tokens not taken yet. */
__global__ void k_sample_without(const double *q, int V, unsigned long long seed,
                                 unsigned long long stream, int k, double *keys, uint8_t *taken,
                                 int32_t *out)
{
    __shared__ double shv[THREADS];
    __shared__ int shi[THREADS];
    for (int i = threadIdx.x; i < V; i += THREADS) {
        keys[i] = q[i] > 0.0 ? sq_k_gumbel_key(sq_k_uniform(seed, stream, (uint64_t)i), q[i])
                             : -INFINITY;
        taken[i] = 0;
    }
    __syncthreads();
    for (int j = 0; j < k; j++) {
        double bv = 0.0;
        int bi = -1;
        for (int i = threadIdx.x; i < V; i += THREADS)
            if (!taken[i] && (bi < 0 || sq_k_ranks_before(keys[i], i, bv, bi))) {
                bv = keys[i];
                bi = i;
            }
        block_best(&bv, &bi, shv, shi, false);
        if (threadIdx.x == 0) {
            out[j] = bi;
            taken[bi] = 1;
        }
        __syncthreads();
    }
}

/* Inverse CDF: per-thread chunk sums, their prefix, then each draw walks one chunk. */
__global__ void k_sample_with(const double *q, int V, unsigned long long seed,
                              unsigned long long stream, int k, int32_t *out)
{
    __shared__ double pre[THREADS + 1];
    __shared__ int last_pos[THREADS];
    const int chunk = (V + THREADS - 1) / THREADS;
    const int a = threadIdx.x * chunk, b = a + chunk < V ? a + chunk : V;
    double s = 0.0;
    int lp = -1;
    for (int i = a; i < b; i++)
        if (q[i] > 0.0) {
            s += q[i];
            lp = i;
        }
    pre[threadIdx.x + 1] = s;
    last_pos[threadIdx.x] = lp;
    __syncthreads();
    if (threadIdx.x == 0) {
        pre[0] = 0.0;
        for (int t = 1; t <= THREADS; t++)
            pre[t] += pre[t - 1];
        int last = 0;
        for (int t = 0; t < THREADS; t++)
            if (last_pos[t] >= 0)
                last = last_pos[t];
        last_pos[0] = last;   /* the last token with mass, for a u past the rounded total */
    }
    __syncthreads();
    const double total = pre[THREADS];
    const int last = last_pos[0];
    for (int j = threadIdx.x; j < k; j += THREADS) {
        double u = sq_k_uniform(seed, stream, (uint64_t)j) * total;
        int t = 0;
        while (t < THREADS - 1 && pre[t + 1] <= u)
            t++;
        int tok = last;
        double c = pre[t];
        for (int i = t * chunk; i < V && i < (t + 1) * chunk; i++)
            if (q[i] > 0.0) {
                c += q[i];
                if (u < c) {
                    tok = i;
                    break;
                }
            }
        out[j] = tok;
    }
}

/* ---- host API ----------------------------------------------------------------------------------- */

extern "C" void sq_cuda_sampler_free(sq_cuda_sampler *s)
{
    if (!s)
        return;
    void *p[] = {s->d_logits, s->d_a, s->d_b, s->d_taken, s->d_tokens};
    for (size_t i = 0; i < sizeof p / sizeof p[0]; i++)
        if (p[i])
            cudaFree(p[i]);
    free(s);
}

static int sampler_alloc(sq_cuda_sampler *s, sq_error *err)
{
    const size_t V = (size_t)s->vocab;
    CUDA_CHECK(cudaMalloc((void **)&s->d_logits, V * sizeof(float)));
    CUDA_CHECK(cudaMalloc((void **)&s->d_a, V * sizeof(double)));
    CUDA_CHECK(cudaMalloc((void **)&s->d_b, V * sizeof(double)));
    CUDA_CHECK(cudaMalloc((void **)&s->d_taken, V));
    CUDA_CHECK(cudaMalloc((void **)&s->d_tokens, (V > MAX_DRAWS ? V : MAX_DRAWS) * sizeof(int32_t)));
    return SQ_OK;
}

extern "C" int sq_cuda_sampler_new(int vocab, sq_cuda_sampler **out, sq_error *err)
{
    *out = NULL;
    if (vocab < 1)
        return sq_error_set(err, SQ_EUSAGE, "CUDA sampler: vocabulary of %d tokens", vocab);
    /* no driver or no device is a usage error (64, as runtime/cuda_sample.h documents), not a
     * failing device (70) */
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess)
        return sq_error_set(err, SQ_EUSAGE, "CUDA sampler: no usable CUDA device: "
                            "cudaGetDeviceCount: %s", cudaGetErrorString(e));
    if (n < 1)
        return sq_error_set(err, SQ_EUSAGE, "CUDA sampler: no CUDA device");
    sq_cuda_sampler *s = (sq_cuda_sampler *)calloc(1, sizeof *s);
    if (!s)
        return sq_error_oom(err, "the CUDA sampler");
    s->vocab = vocab;
    int rc = sampler_alloc(s, err);
    if (rc) {
        sq_cuda_sampler_free(s);
        return rc;
    }
    *out = s;
    return SQ_OK;
}

extern "C" int sq_cuda_probs(sq_cuda_sampler *s, const float *logits, double temperature,
                             double top_p, double *probs, sq_error *err)
{
    const size_t V = (size_t)s->vocab;
    CUDA_CHECK(cudaMemcpy(s->d_logits, logits, V * sizeof(float), cudaMemcpyHostToDevice));
    k_probs<<<1, THREADS>>>(s->d_logits, s->vocab, temperature, top_p, s->d_a);
    CUDA_CHECK_LAUNCH();
    CUDA_CHECK(cudaMemcpy(probs, s->d_a, V * sizeof(double), cudaMemcpyDeviceToHost));
    return SQ_OK;
}

extern "C" int sq_cuda_argmax(sq_cuda_sampler *s, const float *logits, int *out, sq_error *err)
{
    int32_t r = 0;
    CUDA_CHECK(cudaMemcpy(s->d_logits, logits, (size_t)s->vocab * sizeof(float),
                          cudaMemcpyHostToDevice));
    k_argmax<<<1, THREADS>>>(s->d_logits, s->vocab, s->d_tokens);
    CUDA_CHECK_LAUNCH();
    CUDA_CHECK(cudaMemcpy(&r, s->d_tokens, sizeof r, cudaMemcpyDeviceToHost));
    *out = r;
    return SQ_OK;
}

extern "C" int sq_cuda_residual(sq_cuda_sampler *s, double *r, const double *q, sq_error *err)
{
    const size_t bytes = (size_t)s->vocab * sizeof(double);
    CUDA_CHECK(cudaMemcpy(s->d_a, r, bytes, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(s->d_b, q, bytes, cudaMemcpyHostToDevice));
    k_residual<<<1, THREADS>>>(s->d_a, s->d_b, s->vocab);
    CUDA_CHECK_LAUNCH();
    CUDA_CHECK(cudaMemcpy(r, s->d_a, bytes, cudaMemcpyDeviceToHost));
    return SQ_OK;
}

extern "C" int sq_cuda_sample_without(sq_cuda_sampler *s, const double *q, uint64_t seed,
                                      uint64_t stream, int k, int32_t *tokens, sq_error *err)
{
    if (k < 0 || k > s->vocab)
        return sq_error_set(err, SQ_EUSAGE, "CUDA sampler: %d draws without replacement from %d "
                            "tokens", k, s->vocab);
    if (k == 0)
        return SQ_OK;
    CUDA_CHECK(cudaMemcpy(s->d_a, q, (size_t)s->vocab * sizeof(double), cudaMemcpyHostToDevice));
    k_sample_without<<<1, THREADS>>>(s->d_a, s->vocab, seed, stream, k, s->d_b, s->d_taken,
                                     s->d_tokens);
    CUDA_CHECK_LAUNCH();
    CUDA_CHECK(cudaMemcpy(tokens, s->d_tokens, (size_t)k * sizeof(int32_t),
                          cudaMemcpyDeviceToHost));
    return SQ_OK;
}

extern "C" int sq_cuda_sample_with(sq_cuda_sampler *s, const double *q, uint64_t seed,
                                   uint64_t stream, int k, int32_t *tokens, sq_error *err)
{
    int cap = s->vocab > MAX_DRAWS ? s->vocab : MAX_DRAWS;
    if (k < 0 || k > cap)
        return sq_error_set(err, SQ_EUSAGE, "CUDA sampler: %d draws (at most %d per call)", k,
                            cap);
    if (k == 0)
        return SQ_OK;
    CUDA_CHECK(cudaMemcpy(s->d_a, q, (size_t)s->vocab * sizeof(double), cudaMemcpyHostToDevice));
    k_sample_with<<<1, THREADS>>>(s->d_a, s->vocab, seed, stream, k, s->d_tokens);
    CUDA_CHECK_LAUNCH();
    CUDA_CHECK(cudaMemcpy(tokens, s->d_tokens, (size_t)k * sizeof(int32_t),
                          cudaMemcpyDeviceToHost));
    return SQ_OK;
}

static int copy_bandwidth(void *a, void *b, cudaEvent_t e0, cudaEvent_t e1, size_t bytes,
                          int reps, double *gb_per_s, sq_error *err)
{
    CUDA_CHECK(cudaMemset(a, 1, bytes));
    CUDA_CHECK(cudaMemcpy(b, a, bytes, cudaMemcpyDeviceToDevice));   /* warm-up */
    double best = 0.0;
    for (int r = 0; r < reps; r++) {
        CUDA_CHECK(cudaEventRecord(e0, 0));
        CUDA_CHECK(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, 0));
        CUDA_CHECK(cudaEventRecord(e1, 0));
        CUDA_CHECK(cudaEventSynchronize(e1));
        float ms = 0.0f;
        CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
        double bw = ms > 0.0f ? 2.0 * (double)bytes / (ms * 1e-3) / 1e9 : 0.0;
        if (bw > best)
            best = bw;
    }
    *gb_per_s = best;
    return SQ_OK;
}

extern "C" int sq_cuda_copy_bandwidth(size_t bytes, int reps, double *gb_per_s, sq_error *err)
{
    *gb_per_s = 0.0;
    void *a = NULL, *b = NULL;
    cudaEvent_t e0 = NULL, e1 = NULL;
    int rc = SQ_OK;
    cudaError_t e;
    if ((e = cudaMalloc(&a, bytes)) != cudaSuccess || (e = cudaMalloc(&b, bytes)) != cudaSuccess ||
        (e = cudaEventCreate(&e0)) != cudaSuccess || (e = cudaEventCreate(&e1)) != cudaSuccess)
        rc = sq_error_set(err, SQ_ESOFTWARE, "CUDA: %s:%d: copy buffers of %zu bytes: %s",
                          __FILE__, __LINE__, bytes, cudaGetErrorString(e));
    else
        rc = copy_bandwidth(a, b, e0, e1, bytes, reps < 1 ? 1 : reps, gb_per_s, err);
    if (e0)
        cudaEventDestroy(e0);
    if (e1)
        cudaEventDestroy(e1);
    if (a)
        cudaFree(a);
    if (b)
        cudaFree(b);
    return rc;
}
