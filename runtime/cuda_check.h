/* Checking macros for CUDA runtime and cuBLAS calls (CUDA sources only).
 *
 * Every call goes through one of them: on failure it records "CUDA: file:line: call: error
 * string" in the sq_error `err` that is in scope and returns SQ_ESOFTWARE from the enclosing
 * function (which returns int). Nothing exits. */
#ifndef SQ_RUNTIME_CUDA_CHECK_H
#define SQ_RUNTIME_CUDA_CHECK_H

#include <cublas_v2.h>
#include <cuda_runtime.h>

extern "C" {
#include "libsequoia/base/error.h"
}

#define CUDA_CHECK(call)                                                                    \
    do {                                                                                    \
        cudaError_t sq_cuda_rc_ = (call);                                                   \
        if (sq_cuda_rc_ != cudaSuccess)                                                     \
            return sq_error_set(err, SQ_ESOFTWARE, "CUDA: %s:%d: %s: %s", __FILE__, __LINE__, \
                                #call, cudaGetErrorString(sq_cuda_rc_));                    \
    } while (0)

#define CUBLAS_CHECK(call)                                                                  \
    do {                                                                                    \
        cublasStatus_t sq_blas_rc_ = (call);                                                \
        if (sq_blas_rc_ != CUBLAS_STATUS_SUCCESS)                                           \
            return sq_error_set(err, SQ_ESOFTWARE, "cuBLAS: %s:%d: %s: %s", __FILE__,        \
                                __LINE__, #call, cublasGetStatusString(sq_blas_rc_));       \
    } while (0)

/* A kernel launch: checks the launch configuration error right away (execution errors surface
 * at the next synchronising call, which is checked too). */
#define CUDA_CHECK_LAUNCH() CUDA_CHECK(cudaGetLastError())

#endif
