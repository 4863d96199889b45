/* The CPU backend's product for few rows: out (n, d_out) = in (n, d_in) @ w^T (+ out), with w
 * (d_out, d_in) row-major, for n up to the path's threshold (sq_cpu_skinny_rows: one token, a
 * tree level, a small tree).
 *
 * A general SGEMM packs both operands into blocks before it multiplies; with few rows of `in`
 * the packing of w costs as much as the product, and OpenBLAS reaches 5-30 GFLOP/s on such
 * shapes where the machine streams the weights at memory speed. This kernel reads every weight
 * row exactly once, straight from the model's array, and multiplies a block of R weight rows into
 * J input rows held in registers (R x J per instruction set, and for the fewest rows per row
 * count; each input row's R sums reduced together at the end: runtime/cpu_matmul_isa.h), so for
 * small n a forward costs what reading the weights costs (docs/runtime.md, "The CPU forward" and
 * "The skinny product per instruction set"). The caller splits the output columns over threads.
 *
 * The weights may be float32, bf16 or f16 (docs/runtime.md, "16-bit weights on the CPU"): the
 * skinny kernel widens 16-bit weights to float32 in registers as it loads them (bf16: a 16-bit
 * shift; f16: AVX-512F's or F16C's vcvtph2ps, or exact integer arithmetic on the portable path),
 * or, with more input rows than one block, a block's rows at a time into a float32 buffer; the
 * BLAS path widens a panel of weight rows at a time into a per-thread float32 scratch and calls
 * sgemm on it. Either way the sums are float32 over the exact widened values: a 16-bit matrix
 * gives the result of its float32 copy, within float32 summation. */
#ifndef SQ_RUNTIME_CPU_MATMUL_H
#define SQ_RUNTIME_CPU_MATMUL_H

#include <stddef.h>

#include "runtime/cpu_pool.h"
#include "runtime/model.h"

/* Rows up to which every path takes the skinny product, whatever the weights' dtype (no
 * threshold of sq_cpu_skinny_rows is below it; the largest is 64): up to it, splitting the
 * columns over threads gives bitwise the one-thread product. */
#define SQ_CPU_SKINNY_MAX 32

/* out (n, d_out) = in (n, d_in) @ w^T (+ out when accumulate != 0), all row-major, its output
 * columns split into parts over the pool's threads (on the calling thread alone when the
 * product is too small to pay for a dispatch): the skinny product for n <= sq_cpu_skinny_rows_for,
 * cblas_sgemm on each part's slice above. The backend keeps OpenBLAS single-threaded (its own
 * threads spin after each call and would compete with the pool for the cores), so every thread
 * of a forward is the pool's. */
void sq_cpu_matmul(sq_pool *pool, float *out, const float *in, const float *w, int n, int d_in,
                   int d_out, int accumulate);
/* The same with weights w of dtype wdt (F32, F16 or BF16): 16-bit weights widened inside the
 * kernels, above the skinny threshold a panel at a time (a worker's float32 scratch of at
 * most 1 MiB, 16 rows minimum; out of memory for it, the skinny kernel does the rows). */
void sq_cpu_matmul_typed(sq_pool *pool, float *out, const float *in, const void *w,
                         sq_weight_dtype wdt, int n, int d_in, int d_out, int accumulate);

/* Output columns [o0, o1) of out (n, d_out) = in (n, d_in) @ w^T, any n, plus out itself when
 * accumulate != 0 (the residual adds of the attention and MLP outputs). The sum over d_in runs
 * in as many interleaved float32 partial sums per (row, column) as the path's vectors have
 * lanes (16, 8, 4), added at the end: the rounding differs from a sequential dot product by a
 * few ulp of the row's magnitude, and between paths; within a path an element's result does not
 * depend on n, the column range or the block it falls in. */
void sq_cpu_matmul_skinny(float *out, const float *in, const float *w, int n, int d_in, int d_out,
                          int accumulate, int o0, int o1);
void sq_cpu_matmul_skinny_typed(float *out, const float *in, const void *w, sq_weight_dtype wdt,
                                int n, int d_in, int d_out, int accumulate, int o0, int o1);

/* The BLAS path on the calling thread whatever n: cblas_sgemm on float32 weights, on panels of
 * widened 16-bit ones (benchmarks and tests compare it with the skinny product). */
void sq_cpu_matmul_blas_typed(float *out, const float *in, const void *w, sq_weight_dtype wdt,
                              int n, int d_in, int d_out, int accumulate);

/* Rows up to which the path in use (sq_cpu_isa_get) takes the skinny product for weights of
 * dtype wdt: where it measured at least as fast as OpenBLAS (docs/benchmarks.md, "The skinny
 * product"); SQ_CPU_SKINNY_MAX to 64. sq_cpu_skinny_rows_for is the threshold for a matrix of
 * d_in columns, the one sq_cpu_matmul_typed uses: sq_cpu_skinny_rows(wdt) up to d_in 1024, lower
 * for wider matrices where measured so (AVX-512 float32: 35 rows), never below
 * SQ_CPU_SKINNY_MAX. */
int sq_cpu_skinny_rows(sq_weight_dtype wdt);
int sq_cpu_skinny_rows_for(sq_weight_dtype wdt, int d_in);

/* count values of dtype dt (F32, F16, BF16) at src as float32 at dst: the BLAS path's panels
 * and the embedding's rows, on the instruction set in use. */
void sq_cpu_widen(float *dst, const void *src, sq_weight_dtype dt, size_t count);

/* The instruction set the kernels run on. AUTO picks the best the CPU has (AVX-512F, then
 * AVX2 with FMA and F16C, then the portable C path, called "scalar": GCC vector extensions of 4
 * lanes on the baseline ISA). The first product settles it: from the
 * environment variable SQ_CPU_ISA=scalar|avx2|avx512 when set to a path the CPU has (else
 * ignored), otherwise AUTO. sq_cpu_isa_set forces a path (tests, benchmarks): 0, or -1 when the
 * CPU lacks it (nothing changes). Every path gives the same results up to float32 rounding. */
typedef enum sq_cpu_isa {
    SQ_CPU_ISA_AUTO   = 0,
    SQ_CPU_ISA_SCALAR = 1,
    SQ_CPU_ISA_AVX2   = 2,
    SQ_CPU_ISA_AVX512 = 3,
} sq_cpu_isa;

int sq_cpu_isa_set(sq_cpu_isa isa);
sq_cpu_isa sq_cpu_isa_get(void);              /* the path in use; never AUTO  */
int sq_cpu_isa_supported(sq_cpu_isa isa);     /* 1 when this CPU can run it   */
const char *sq_cpu_isa_name(sq_cpu_isa isa);  /* "scalar", "avx2", "avx512"   */

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
