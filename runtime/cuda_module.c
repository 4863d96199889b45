/* The one symbol the CUDA module (libsequoia-cuda.so, docs/cuda.md) exports: its table
 * (runtime/backend.h, sq_cuda_module), which the loader (runtime/cuda_load.c) finds with dlsym.
 * The module is compiled with -fvisibility=hidden, so the backend and the sampler behind the
 * table (runtime/cuda_backend.cu, runtime/cuda_sample.cu) are reachable only through it; the
 * sampler's functions keep the names of runtime/cuda_sample.h, whose public definitions are
 * the loader's forwarding ones in the tools. */
#include "runtime/backend.h"
#include "runtime/cuda_sample.h"

__attribute__((visibility("default"))) extern const sq_cuda_module sq_cuda_module_table;

const sq_cuda_module sq_cuda_module_table = {
    .abi = SQ_CUDA_MODULE_ABI,
    .table_size = sizeof(sq_cuda_module),
    .context_size = sizeof(sq_context),
    .model_size = sizeof(sq_model),
    .backend = &sq_backend_cuda,
    .device_count = sq_cuda_device_count_impl,
    .sampler_new = sq_cuda_sampler_new,
    .sampler_free = sq_cuda_sampler_free,
    .probs = sq_cuda_probs,
    .argmax = sq_cuda_argmax,
    .residual = sq_cuda_residual,
    .sample_without = sq_cuda_sample_without,
    .sample_with = sq_cuda_sample_with,
    .copy_bandwidth = sq_cuda_copy_bandwidth,
};
