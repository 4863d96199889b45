/* Llama-architecture decoders for the reference runtime (DESIGN.md §7).
 *
 * A model is loaded from a Hugging Face directory (config.json + model.safetensors, or shards
 * listed in model.safetensors.index.json), mapped read-only. A context holds one model's KV
 * cache and scratch on one backend. Tokens in a context are either committed (the accepted
 * prefix) or pending (speculated tree nodes fed since the last commit):
 *
 *   sq_context_forward(ctx, tokens, pos, mask, n, logits)
 *       feeds n new tokens; they become pending slots P .. P+n-1 (P = pending before the call).
 *       Token i sits at RoPE position pos[i], attends every committed token and the pending
 *       tokens j (0 <= j < P+n) with mask[i*(P+n) + j] != 0 (a tree mask: its ancestors and
 *       itself). logits: (n, vocab) float32.
 *   sq_context_commit(ctx, keep, nkeep)
 *       appends the pending slots keep[0..nkeep) (an accepted root-to-leaf path, in order) to
 *       the committed cache and drops every pending slot (KV compaction by gather).
 *
 * Plain autoregressive decoding is forward(1 token, mask {1}) then commit({0}). */
#ifndef SQ_RUNTIME_MODEL_H
#define SQ_RUNTIME_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "planner/error.h"

typedef struct sq_model_config {
    int   dim;              /* hidden_size                                   */
    int   hidden_dim;       /* intermediate_size                             */
    int   n_layers;         /* num_hidden_layers                             */
    int   n_heads;          /* num_attention_heads                           */
    int   n_kv_heads;       /* num_key_value_heads (GQA), = n_heads if absent */
    int   head_dim;         /* dim / n_heads                                 */
    int   vocab_size;
    int   max_position;     /* max_position_embeddings                       */
    float rope_theta;
    float norm_eps;         /* rms_norm_eps                                  */
    int   tied_embeddings;  /* tie_word_embeddings                           */
    char  dtype[8];         /* checkpoint dtype: "F32", "F16" or "BF16"      */
} sq_model_config;

typedef struct sq_model sq_model;

int sq_model_load(const char *dir, sq_model **out, sq_error *err);
void sq_model_free(sq_model *m);
const sq_model_config *sq_model_get_config(const sq_model *m);

/* A model of the shape `cfg` with random float32 weights held in memory (latency depends on
 * shapes, not values: sequoia-profile times a 7B or 70B shape from its config.json alone).
 * Deterministic for a seed. Refuses (SQ_EUSAGE) a shape whose weights would take more than 80%
 * of the machine's memory. */
int sq_model_new_random(const sq_model_config *cfg, uint64_t seed, sq_model **out, sq_error *err);

/* Parameters of a model of this shape. */
size_t sq_model_config_params(const sq_model_config *cfg);

typedef enum sq_backend_kind { SQ_BACKEND_CPU = 0, SQ_BACKEND_CUDA = 1 } sq_backend_kind;

typedef struct sq_context_params {
    int             max_context;  /* committed tokens the cache holds               */
    int             max_pending;  /* pending (tree) tokens between two commits       */
    sq_backend_kind backend;
    int             threads;      /* CPU threads (0: all cores)                      */
} sq_context_params;

sq_context_params sq_context_default_params(void);

typedef struct sq_context sq_context;

int sq_context_new(const sq_model *m, const sq_context_params *params, sq_context **out,
                   sq_error *err);
void sq_context_free(sq_context *ctx);

int sq_context_committed(const sq_context *ctx);  /* committed tokens */
int sq_context_pending(const sq_context *ctx);    /* pending tokens   */

int sq_context_forward(sq_context *ctx, const int32_t *tokens, const int32_t *pos,
                       const uint8_t *mask, int n, float *logits, sq_error *err);
int sq_context_commit(sq_context *ctx, const int32_t *keep, int nkeep, sq_error *err);

/* Drops everything (committed and pending). */
void sq_context_reset(sq_context *ctx);

#endif
