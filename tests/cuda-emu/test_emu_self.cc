/* The CUDA emulation itself (tests/cuda-emu/emu.cc): that its barriers are barriers, that it
 * refuses what a GPU would not do, and that its schedules and cuBLAS stand-in behave as the
 * CUDA documentation says. Kernels here are launched through sq_emu_launch directly. */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdlib.h>

#include <vector>

#include "cublas_v2.h"
#include "cuda_runtime.h"

/* sum of 0..n-1 by a shared-memory tree reduction: wrong unless __syncthreads is a barrier */
static void k_block_sum(int *out)
{
    __shared__ int sh[256];
    sh[threadIdx.x] = (int)threadIdx.x;
    __syncthreads();
    for (unsigned o = blockDim.x / 2; o > 0; o >>= 1) {
        if (threadIdx.x < o)
            sh[threadIdx.x] += sh[threadIdx.x + o];
        __syncthreads();
    }
    if (threadIdx.x == 0)
        out[blockIdx.x] = sh[0];
}

Test(emu, syncthreads_is_a_barrier_and_shuffles_exchange)
{
    int *d = NULL;
    cr_assert_eq(cudaMalloc((void **)&d, 4 * sizeof(int)), cudaSuccess);
    sq_emu_launch(sq_emu_config(4, 256), "k_block_sum", k_block_sum, d);
    int h[4];
    cr_assert_eq(cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost), cudaSuccess);
    for (int b = 0; b < 4; b++)
        cr_assert_eq(h[b], 255 * 256 / 2, "block %d: %d", b, h[b]);
    cudaFree(d);
}

static void k_warp_sum(float *out)
{
    float v = (float)threadIdx.x;
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    out[threadIdx.x] = v;
}

Test(emu, xor_shuffle_reduces_a_warp)
{
    float *d = NULL;
    cr_assert_eq(cudaMalloc((void **)&d, 64 * sizeof(float)), cudaSuccess);
    sq_emu_launch(sq_emu_config(1, 64), "k_warp_sum", k_warp_sum, d);
    float h[64];
    cr_assert_eq(cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost), cudaSuccess);
    for (int t = 0; t < 64; t++)
        cr_assert_eq(h[t], t < 32 ? 496.0f : 1520.0f, "thread %d: %g", t, h[t]);
    cudaFree(d);
}

static void k_divergent_barrier(int *out)
{
    if (threadIdx.x < 16)
        return;
    __syncthreads();
    out[0] = 1;
}

Test(emu, a_divergent_syncthreads_aborts, .signal = SIGABRT)
{
    int *d = NULL;
    cudaMalloc((void **)&d, sizeof(int));
    sq_emu_launch(sq_emu_config(1, 64), "k_divergent_barrier", k_divergent_barrier, d);
    cudaDeviceSynchronize();
}

static void k_half_warp_shuffle(float *out)
{
    if (threadIdx.x >= 16)
        return;
    out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, 1.0f, 1);
}

Test(emu, a_shuffle_missing_lanes_aborts, .signal = SIGABRT)
{
    float *d = NULL;
    cudaMalloc((void **)&d, 32 * sizeof(float));
    sq_emu_launch(sq_emu_config(1, 32), "k_half_warp_shuffle", k_half_warp_shuffle, d);
    cudaDeviceSynchronize();
}

Test(emu, a_copy_past_an_allocation_aborts, .signal = SIGABRT)
{
    float *d = NULL;
    cudaMalloc((void **)&d, 16 * sizeof(float));
    std::vector<float> h(17, 1.0f);
    cudaMemcpy(d, h.data(), 17 * sizeof(float), cudaMemcpyHostToDevice);
}

Test(emu, an_empty_grid_is_a_launch_error)
{
    int *d = NULL;
    cudaMalloc((void **)&d, sizeof(int));
    sq_emu_launch(sq_emu_config(0, 32), "k_block_sum", k_block_sum, d);
    cr_assert_eq(cudaGetLastError(), cudaErrorInvalidConfiguration);
    cr_assert_eq(cudaGetLastError(), cudaSuccess, "the launch error is cleared once read");
    sq_emu_launch(sq_emu_config(1, 2048), "k_block_sum", k_block_sum, d);
    cr_assert_eq(cudaGetLastError(), cudaErrorInvalidConfiguration);
    cudaFree(d);
}

static void k_copy(float *dst, const float *src, int n)
{
    for (int i = (int)threadIdx.x; i < n; i += (int)blockDim.x)
        dst[i] = src[i];
}

/* A pageable cudaMemcpy lands late: a non-blocking stream is not ordered after it. */
Test(emu, lazy_schedule_lands_pageable_copies_late)
{
    if (!getenv("SQ_CUDA_EMU_SCHEDULE") || strcmp(getenv("SQ_CUDA_EMU_SCHEDULE"), "lazy"))
        cr_skip_test("only under SQ_CUDA_EMU_SCHEDULE=lazy");
    float *a = NULL, *b = NULL;
    cudaStream_t s;
    cr_assert_eq(cudaMalloc((void **)&a, 8 * sizeof(float)), cudaSuccess);
    cr_assert_eq(cudaMalloc((void **)&b, 8 * sizeof(float)), cudaSuccess);
    cr_assert_eq(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
    std::vector<float> h(8, 2.0f), r(8, 0.0f);
    cr_assert_eq(cudaMemcpy(a, h.data(), 8 * sizeof(float), cudaMemcpyHostToDevice),
                 cudaSuccess);
    sq_emu_launch(sq_emu_config(1, 32, 0, s), "k_copy", k_copy, b, (const float *)a, 8);
    cr_assert_eq(cudaMemcpyAsync(r.data(), b, 8 * sizeof(float), cudaMemcpyDeviceToHost, s),
                 cudaSuccess);
    cr_assert_eq(cudaStreamSynchronize(s), cudaSuccess);
    cr_assert(std::isnan(r[0]), "the kernel saw the copy (%g): nothing ordered it", r[0]);
    /* synchronised first, the data is there */
    cr_assert_eq(cudaDeviceSynchronize(), cudaSuccess);
    sq_emu_launch(sq_emu_config(1, 32, 0, s), "k_copy", k_copy, b, (const float *)a, 8);
    cudaMemcpyAsync(r.data(), b, 8 * sizeof(float), cudaMemcpyDeviceToHost, s);
    cr_assert_eq(cudaStreamSynchronize(s), cudaSuccess);
    cr_assert_eq(r[7], 2.0f);
    cudaStreamDestroy(s);
    cudaFree(a);
    cudaFree(b);
}

Test(emu, gemm_checks_arguments_and_computes_the_product)
{
    cublasHandle_t h;
    cr_assert_eq(cublasCreate(&h), CUBLAS_STATUS_SUCCESS);
    /* C (3 x 2) = A^T B with A (4 x 3) col-major, B (4 x 2) col-major, all float32 */
    const float A[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
    const float B[8] = {1, 0, -1, 2, 3, 1, 0, -2};
    float *dA, *dB, *dC;
    cudaMalloc((void **)&dA, sizeof A);
    cudaMalloc((void **)&dB, sizeof B);
    cudaMalloc((void **)&dC, 6 * sizeof(float));
    cudaMemcpy(dA, A, sizeof A, cudaMemcpyHostToDevice);
    cudaMemcpy(dB, B, sizeof B, cudaMemcpyHostToDevice);
    const float one = 1.0f, zero = 0.0f;
    cr_assert_eq(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, 3, 2, 4, &one, dA, CUDA_R_32F, 3, dB,
                              CUDA_R_32F, 4, &zero, dC, CUDA_R_32F, 3, CUBLAS_COMPUTE_32F,
                              CUBLAS_GEMM_DEFAULT),
                 CUBLAS_STATUS_INVALID_VALUE, "lda 3 < k 4 for op T");
    cr_assert_eq(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, 3, 2, 4, &one, dA, CUDA_R_16F, 4, dB,
                              CUDA_R_32F, 4, &zero, dC, CUDA_R_32F, 3, CUBLAS_COMPUTE_32F,
                              CUBLAS_GEMM_DEFAULT),
                 CUBLAS_STATUS_NOT_SUPPORTED, "mixed input types");
    cr_assert_eq(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, 3, 2, 4, &one, dA, CUDA_R_32F, 4, dB,
                              CUDA_R_32F, 4, &zero, dC, CUDA_R_32F, 3, CUBLAS_COMPUTE_32F,
                              CUBLAS_GEMM_DEFAULT),
                 CUBLAS_STATUS_SUCCESS);
    float C[6];
    cudaMemcpy(C, dC, sizeof C, cudaMemcpyDeviceToHost);   /* beta 0: the NaN fill unread */
    for (int j = 0; j < 2; j++)
        for (int i = 0; i < 3; i++) {
            float want = 0.0f;
            for (int p = 0; p < 4; p++)
                want += A[i * 4 + p] * B[j * 4 + p];
            cr_assert_eq(C[j * 3 + i], want, "C[%d][%d] = %g, want %g", i, j, C[j * 3 + i], want);
        }
    cublasDestroy(h);
    cudaFree(dA);
    cudaFree(dB);
    cudaFree(dC);
}
