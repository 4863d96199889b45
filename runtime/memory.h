/* What a model and its contexts take in host memory, and the one memory check (docs/design.md
 * §8.1).
 *
 * The figures are the allocations themselves: the weights' bytes come from the architecture's
 * table (runtime/arch.h), a CPU context's from the CPU backend's own layout (runtime/cpu.c sizes
 * its buffers with the same function). Callers that refuse a job past the machine's memory
 * (random weights, sequoia-run's decoders and batches, sequoia-profile's batch sweep) add up
 * these figures and their own buffers, and ask sq_memory_check. */
#ifndef SQ_RUNTIME_MEMORY_H
#define SQ_RUNTIME_MEMORY_H

#include <stddef.h>

#include "libsequoia/base/error.h"
#include "runtime/model.h"

/* Bytes of a model's weights as the CPU holds them in c->dtype ("F32", "F16" or "BF16"; empty:
 * F32): every tensor of its architecture, tied ones once, the matrices at 4 or 2 bytes per
 * parameter and the vectors (norms, biases) at 4. What sq_model_new_random_dtype allocates, and
 * what a checkpoint's mapping or a converted set takes. */
double sq_weights_bytes(const sq_model_config *c);

/* Bytes of weights one CPU forward reads, in `dtype` (AUTO: c->dtype's): every tensor a forward
 * multiplies or applies (the LM head whole, tied or not), but not the embedding, of which it reads
 * only the rows of its tokens. A decode step's bandwidth is this over its time (sequoia-profile's
 * "GB/s" column, docs/runtime.md). */
double sq_weights_read_bytes(const sq_model_config *c, sq_weight_dtype dtype);

/* Bytes a CPU context of this shape allocates at sq_context_new: the KV caches (keys and values,
 * float32, max_context + max_pending slots per layer) and the scratch of a forward of
 * max_pending tokens, with the attention's per-thread scratch (threads 0: all cores, as
 * sq_context_params says). Implemented in runtime/cpu.c, next to the allocation. */
double sq_cpu_context_bytes(const sq_model_config *c, int max_context, int max_pending,
                            int threads);

/* At most the bytes a batched CPU forward (sq_context_forward_batch) of `rows` token rows in all
 * allocates in the batch's first context beyond sq_cpu_context_bytes: the rows' scratch and
 * logits. */
double sq_cpu_batch_bytes(const sq_model_config *c, double rows);

/* This machine's physical memory in bytes; 0 when unknown. */
double sq_memory_total(void);

/* SQ_OK when `need` bytes fit in 80% of this machine's physical memory (or its size is
 * unknown). Otherwise SQ_EUSAGE with the message "<fmt ...>, more than 80% of this machine's
 * N GiB; <advice>": fmt says what needs how much, e.g. "a plan of %d nodes ... needs %.1f GiB of
 * logit buffers". */
int sq_memory_check(double need, sq_error *err, const char *advice, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#endif
