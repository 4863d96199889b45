/* Writing safetensors files, and tiny random checkpoints of every family for tests and
 * benchmarks.
 *
 * sq_st_writer streams a file whose header is known up front: declare every tensor (name,
 * dtype, shape) with sq_st_writer_add, call sq_st_writer_begin, then pass the values of the
 * tensors in declaration order with sq_st_writer_put (float32 values, converted to each
 * tensor's dtype: F32, F16 or BF16, rounding to nearest even) or sq_st_writer_put_raw (bytes,
 * any dtype), in as many pieces as convenient, and sq_st_writer_finish. Tensors are laid out
 * back to back in declaration order; the header is padded with spaces to a multiple of 8
 * bytes. The file is written atomically (libsequoia/base/io.h): nothing appears at `path` unless
 * finish succeeds. Memory stays bounded whatever the file size.
 *
 *     sq_st_writer *w = sq_st_writer_new();
 *     int64_t shape[2] = {4, 3};
 *     sq_st_writer_add(w, "a", SQ_ST_F16, 2, shape, &err);
 *     sq_st_writer_begin(w, "x.safetensors", &err);
 *     sq_st_writer_put(w, values12, 12, &err);
 *     sq_st_writer_finish(w, &err);
 *     sq_st_writer_free(w);
 *
 * sq_model_write_random writes a Hugging Face directory (config.json + model.safetensors, or
 * shards + model.safetensors.index.json) holding a model of config.arch (any architecture of runtime/arch.h, with the family features
 * the config sets: biases, q/k norms, Gemma, windows, RoPE scaling; config.json is
 * sq_model_config_to_json's) with random weights that sq_model_load reads back: every tensor of
 * the architecture's table (runtime/arch.h) that the config's features include, in its order.
 * Deterministic: tensor t's values are center + spread * (2u - 1), u the successive splitmix64
 * draws (top 53 bits / 2^53) from state seed ^ FNV-1a-64(t's full name); center 1 for plain
 * norms, else 0; spread 0.1 for norms (Gemma's w of 1 + w too) and biases, 1 for the embedding,
 * 1/sqrt(in_features) for matrices, logit_scale/sqrt(dim) for an untied LM head. */
#ifndef SQ_RUNTIME_ST_WRITER_H
#define SQ_RUNTIME_ST_WRITER_H

#include <stddef.h>
#include <stdint.h>

#include "libsequoia/base/error.h"
#include "runtime/model.h"
#include "runtime/safetensors.h"

typedef struct sq_st_writer sq_st_writer;

/* NULL when out of memory. */
sq_st_writer *sq_st_writer_new(void);
/* Frees the writer; an unfinished file is removed. NULL is allowed. */
void sq_st_writer_free(sq_st_writer *w);

/* A "__metadata__" entry. Before begin. */
int sq_st_writer_metadata(sq_st_writer *w, const char *key, const char *value, sq_error *err);
/* Declares the next tensor. Before begin. Errors: SQ_EUSAGE (duplicate name, bad shape). */
int sq_st_writer_add(sq_st_writer *w, const char *name, sq_st_dtype dtype, int ndim,
                     const int64_t *shape, sq_error *err);
/* Opens the temporary file and writes the header. Errors: SQ_ECANTCREAT, SQ_EIO. */
int sq_st_writer_begin(sq_st_writer *w, const char *path, sq_error *err);
/* The next `count` values, converted to the dtype of the tensor(s) they fall in (which must be
 * F32, F16 or BF16); may cross tensor boundaries. Errors: SQ_EUSAGE (more values than
 * declared, or another dtype), SQ_EIO. */
int sq_st_writer_put(sq_st_writer *w, const float *values, size_t count, sq_error *err);
/* The next `nbytes` bytes of data, as they are. */
int sq_st_writer_put_raw(sq_st_writer *w, const void *bytes, size_t nbytes, sq_error *err);
/* Checks that every declared byte was written and renames the file into place. */
int sq_st_writer_finish(sq_st_writer *w, sq_error *err);

typedef struct sq_random_model_params {
    sq_model_config config;      /* the architecture; config.dtype ("F32", "F16", "BF16")
                                    is the dtype of every tensor written                 */
    uint64_t seed;               /* same seed and config -> the same float values,
                                    whatever the dtype or sharding (each tensor's stream
                                    is seeded from seed and its name)                   */
    int      shards;             /* 0 or 1: model.safetensors; k > 1: k shard files and
                                    model.safetensors.index.json                         */
    int      write_tied_lm_head; /* with tied embeddings, also store lm_head.weight (a
                                    copy of the embeddings, as some checkpoints do)      */
    float    logit_scale;        /* lm_head values are uniform in +-logit_scale/sqrt(dim)
                                    (untied only); 0 means 3                             */
} sq_random_model_params;

/* A tiny GQA model: dim 64, 2 layers, 4 heads, 2 KV heads, hidden 96, vocab 97, F32,
 * untied, rope_theta 10000, eps 1e-5, max_position 512, seed 1, one file. */
sq_random_model_params sq_random_model_default_params(void);

/* Creates `dir` if needed (its parent must exist) and writes config.json and the weights
 * (values as described above). Errors: SQ_EUSAGE (invalid
 * config), SQ_ECANTCREAT, SQ_EIO. */
int sq_model_write_random(const char *dir, const sq_random_model_params *p, sq_error *err);

#endif
