/* The CPU backend's product for few rows: out (n, d_out) = in (n, d_in) @ w^T (+ out), with w
 * (d_out, d_in) row-major, for n up to SQ_CPU_SKINNY_MAX rows (one token, a tree level, a small
 * tree verify).
 *
 * A general SGEMM packs both operands into blocks before it multiplies; with few rows of `in`
 * the packing of w costs as much as the product, and OpenBLAS reaches 5-30 GFLOP/s on such
 * shapes where the machine streams the weights at memory speed. This kernel reads every weight
 * row exactly once, straight from the model's array, and multiplies it into up to four input
 * rows held in registers, so for n <= 8 or so a forward costs what reading the weights costs
 * (docs/runtime.md, "The CPU forward"). The caller splits the output rows over threads. */
#ifndef SQ_RUNTIME_CPU_MATMUL_H
#define SQ_RUNTIME_CPU_MATMUL_H

#include "runtime/cpu_pool.h"

/* Largest n the skinny product is used for; above it sq_cpu_matmul calls cblas_sgemm. */
#define SQ_CPU_SKINNY_MAX 16

/* out (n, d_out) = in (n, d_in) @ w^T (+ out when accumulate != 0), all row-major, its output
 * columns split over the pool's workers (on the calling thread alone when the product is too
 * small to pay for a dispatch): the skinny product for n <= SQ_CPU_SKINNY_MAX, cblas_sgemm on
 * each worker's slice above. The backend keeps OpenBLAS single-threaded (its own threads spin
 * after each call and would compete with the pool for the cores), so every thread of a forward
 * is the pool's. */
void sq_cpu_matmul(sq_pool *pool, float *out, const float *in, const float *w, int n, int d_in,
                   int d_out, int accumulate);

/* Output columns [o0, o1) of out (n, d_out) = in (n, d_in) @ w^T, plus out itself when
 * accumulate != 0 (the residual adds of the attention and MLP outputs). The sum over d_in runs
 * in 16 interleaved float32 partial sums per (row, column), added at the end: the rounding
 * differs from a sequential dot product by a few ulp of the row's magnitude. */
void sq_cpu_matmul_skinny(float *out, const float *in, const float *w, int n, int d_in, int d_out,
                          int accumulate, int o0, int o1);

/* OpenBLAS picks its kernels by CPU model at load time. Debian 12's OpenBLAS 0.3.21 does not
 * know CPU models newer than its table (for example a Sapphire Rapids presented by a hypervisor
 * as a generic "Intel Xeon Processor") and falls back to its Prescott (SSE3) kernels, 2-4 times
 * slower than its AVX2/AVX-512 ones on the same CPU. When that happened, the CPU has AVX2 and
 * FMA, and OPENBLAS_CORETYPE is not set, this sets OPENBLAS_CORETYPE from the CPU's features
 * (SkylakeX with AVX-512, else Haswell) and re-executes the program (/proc/self/exe) with the
 * same argv, once, so that OpenBLAS loads with the right kernels. Returns only when nothing was
 * done or the re-execution failed. Tools that run models call it first thing in main; setting
 * OPENBLAS_CORETYPE yourself (any value) turns it off. Under an address-space limit
 * (RLIMIT_AS, `ulimit -v`) with OPENBLAS_NUM_THREADS unset it also re-executes with
 * OPENBLAS_NUM_THREADS=1: OpenBLAS's own threads, which the tools never use, would otherwise
 * look for their buffers at load and, finding no room, retry forever (issue 27 C1). */
void sq_cpu_blas_reexec(char **argv);

#endif
