/* Decoders of the Llama, Mistral, Qwen2/3 and Gemma-2/3 families for the reference runtime
 * (docs/design.md §8; which tensors an architecture has: runtime/arch.h; the families:
 * docs/runtime.md).
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

#include "libsequoia/base/error.h"

/* RoPE types (runtime/rope.h). */
typedef enum sq_rope_type {
    SQ_ROPE_DEFAULT = 0,
    SQ_ROPE_LINEAR,
    SQ_ROPE_DYNAMIC,
    SQ_ROPE_LLAMA3,
    SQ_ROPE_YARN,
} sq_rope_type;

/* One set of RoPE parameters (config.json's rope_scaling / rope_parameters); zero is plain
 * RoPE with the config's rope_theta. */
typedef struct sq_rope_params {
    int   type;              /* sq_rope_type                                        */
    float theta;             /* 0: sq_model_config.rope_theta                       */
    float factor;            /* linear, dynamic, llama3, yarn                       */
    float low_freq_factor;   /* llama3                                              */
    float high_freq_factor;  /* llama3                                              */
    int   original_max_position; /* llama3, yarn (0: max_position)                 */
    float beta_fast;         /* yarn (0: 32)                                        */
    float beta_slow;         /* yarn (0: 1)                                         */
    float attention_factor;  /* yarn: 0 derives it from mscale / the factor         */
    float mscale;            /* yarn (0: absent)                                    */
    float mscale_all_dim;    /* yarn (0: absent)                                    */
    int   no_truncate;       /* yarn's "truncate": false                            */
} sq_rope_params;

/* Layers up to this count; per-layer flags are bits. */
#define SQ_MODEL_MAX_LAYERS 4096

/* Hidden activations of the MLP. */
typedef enum sq_act { SQ_ACT_SILU = 0, SQ_ACT_GELU_TANH = 1 } sq_act;

/* A decoder's shape and its family's features (runtime/config.c reads them from config.json;
 * a config made by hand with the fields below zero is a plain Llama). */
typedef struct sq_model_config {
    int   dim;              /* hidden_size                                   */
    int   hidden_dim;       /* intermediate_size                             */
    int   n_layers;         /* num_hidden_layers                             */
    int   n_heads;          /* num_attention_heads                           */
    int   n_kv_heads;       /* num_key_value_heads (GQA), = n_heads if absent */
    int   head_dim;         /* head_dim, or dim / n_heads                    */
    int   vocab_size;
    int   max_position;     /* max_position_embeddings                       */
    float rope_theta;
    float norm_eps;         /* rms_norm_eps                                  */
    int   tied_embeddings;  /* tie_word_embeddings                           */
    char  dtype[8];         /* checkpoint dtype: "F32", "F16" or "BF16"      */
    int   arch;             /* sq_arch_id (runtime/arch.h): which tensors the
                               checkpoint holds; 0 is LlamaForCausalLM       */
    /* ---- family features (issue 24; docs/runtime.md's table) ---- */
    sq_rope_params rope;       /* RoPE of full-attention layers (all layers when
                                  rope_local.theta is 0)                       */
    sq_rope_params rope_local; /* Gemma-3's sliding layers: theta != 0        */
    int   attn_bias;        /* q/k/v projections have biases (Qwen2; attention_bias) */
    int   attn_out_bias;    /* o_proj has a bias (attention_bias of Llama,
                               Qwen3, Gemma)                                  */
    int   mlp_bias;         /* gate/up/down have biases (Llama's mlp_bias)   */
    int   qk_norm;          /* per-head RMSNorm of q and k before RoPE
                               (Qwen3, Gemma-3)                               */
    int   gemma;            /* Gemma: (1 + w) RMSNorm, four norms per layer,
                               embeddings scaled by sqrt(dim)                 */
    int   act;              /* sq_act                                        */
    float query_pre_attn_scalar; /* 0: head_dim; the scores are scaled by its
                               inverse square root (Gemma)                    */
    float attn_softcap;     /* 0: none; else tanh(s / cap) * cap (Gemma-2)   */
    float final_softcap;    /* 0: none; the logits' cap (Gemma-2)            */
    int   sliding_window;   /* 0: none; else keys within this many positions
                               on the layers whose bit is set below           */
    uint8_t layer_sliding[SQ_MODEL_MAX_LAYERS / 8];  /* bit l: layer l slides */
} sq_model_config;

/* Whether layer l uses the sliding window. */
static inline int sq_model_layer_sliding(const sq_model_config *c, int l)
{
    return c->sliding_window > 0 && l >= 0 && l < SQ_MODEL_MAX_LAYERS &&
           (c->layer_sliding[l >> 3] >> (l & 7) & 1);
}

typedef struct sq_model sq_model;

/* Weights as a backend computes with them (sq_context_params.dtype; docs/runtime.md, "16-bit
 * weights on the CPU"). AUTO: on the CPU the model's own dtype (sq_model_dtype: the
 * checkpoint's, read in place from the mapping with no copy; F32 checkpoints stay F32), on CUDA
 * F16 (which keeps F16 or BF16 weights on the device, converted from the model's weights at
 * context creation, and multiplies them with float32 accumulation). A CPU context asked for
 * another dtype than the model's computes with a converted copy that the model makes once and
 * its contexts share (f32: 4 bytes per parameter, as every CPU run took before 16-bit weights).
 * The CPU converts 16-bit weights to float32 inside its products and accumulates in float32. */
typedef enum sq_weight_dtype {
    SQ_DTYPE_AUTO = 0,
    SQ_DTYPE_F32  = 1,
    SQ_DTYPE_F16  = 2,
    SQ_DTYPE_BF16 = 3,
} sq_weight_dtype;


int sq_model_load(const char *dir, sq_model **out, sq_error *err);

/* sq_paths_check (libsequoia/base/io.h) with, besides `inputs`, the files that the tools read
 * from each model directory of `model_dirs` (an option and a directory; NULL, "-" or a path that
 * is not a directory adds nothing, as loading it reports the problem): config.json,
 * model.safetensors.index.json, every *.safetensors (the checkpoint or its shards),
 * tokenizer.json, tokenizer_config.json and generation_config.json, those that exist. An output
 * that would replace one of them is refused ("-o DIR/config.json: is the same file as the
 * input --target DIR/config.json"); other files in the directory stay writable. Errors:
 * SQ_EUSAGE as sq_paths_check, SQ_ESOFTWARE out of memory. */
struct sq_path_use;
int sq_model_paths_check(const struct sq_path_use *inputs, int n_in,
                         const struct sq_path_use *model_dirs, int n_dirs,
                         const struct sq_path_use *outputs, int n_out, sq_error *err);

/* For a tool's main: a checkpoint truncated or rewritten while its mapping is in use (SIGBUS)
 * ends the process with a message naming the mapped checkpoints and exit 74, not by signal
 * (installs a process-wide SIGBUS handler; the corpus reader's guarded regions still take their
 * own faults first). */
void sq_model_guard_mappings(const char *prog);
void sq_model_free(sq_model *m);
const sq_model_config *sq_model_get_config(const sq_model *m);

/* The dtype of the model's matrices as it holds them: the checkpoint's (config.dtype; the first
 * tensor's when a checkpoint mixes them), or a random model's. Never AUTO. */
sq_weight_dtype sq_model_dtype(const sq_model *m);
/* "F32", "F16", "BF16" (sq_model_config.dtype) -> F32, F16, BF16; anything else F32. */
sq_weight_dtype sq_model_dtype_of_name(const char *name);

/* Bytes of weights the model allocated: random weights, copies of unaligned tensors, float32
 * copies of 16-bit norms, and the converted sets its contexts asked for
 * (sq_context_params.dtype other than the model's). A 16-bit checkpoint computed in its own
 * dtype owns almost nothing (its norms): the matrices are read from the mapping. */
size_t sq_model_owned_bytes(const sq_model *m);

/* A model of the shape `cfg` with random float32 weights held in memory (latency depends on
 * shapes, not values: sequoia-profile times a 7B or 70B shape from its config.json alone).
 * Deterministic for a seed. Refuses (SQ_EUSAGE) a shape whose weights would take more than 80%
 * of the machine's memory. */
int sq_model_new_random(const sq_model_config *cfg, uint64_t seed, sq_model **out, sq_error *err);

/* The same with the matrices in `dtype` (F32, F16 or BF16; AUTO is F32): the float32 values of
 * sq_model_new_random rounded to 16 bits (2 bytes per parameter, so an 8B shape takes 16 GB);
 * vectors stay float32. config.dtype says which ("F32", "F16", "BF16"). */
int sq_model_new_random_dtype(const sq_model_config *cfg, uint64_t seed, sq_weight_dtype dtype,
                              sq_model **out, sq_error *err);

/* The same shape and distribution, but the weights are made on the GPU at context creation,
 * in the context's 16-bit type and in parallel (runtime/cuda_backend.cu): the host holds none,
 * so a 7B or 70B shape needs no host memory for weights (offload mode: the pinned 16-bit
 * copy only). Only the CUDA backend accepts such a model; the CPU backend refuses it. */
int sq_model_new_random_device(const sq_model_config *cfg, uint64_t seed, sq_model **out,
                               sq_error *err);

/* Parameters of a model of this shape (runtime/arch.c: its architecture's tensors, tied ones
 * counted once). */
size_t sq_model_config_params(const sq_model_config *cfg);

typedef enum sq_backend_kind { SQ_BACKEND_CPU = 0, SQ_BACKEND_CUDA = 1 } sq_backend_kind;

/* "f32", "f16", "bf16" -> dtype; -1 when unknown. */
int sq_weight_dtype_parse(const char *name, sq_weight_dtype *out);
const char *sq_weight_dtype_name(sq_weight_dtype dtype);

typedef struct sq_context_params {
    int             max_context;  /* committed tokens the cache holds               */
    int             max_pending;  /* pending (tree) tokens between two commits       */
    sq_backend_kind backend;
    int             threads;      /* CPU threads (0: all cores)                      */
    sq_weight_dtype dtype;        /* AUTO (default): the model's own on the CPU, F16
                                     on CUDA (sq_weight_dtype)                       */
    int             offload;      /* CUDA: weights stay in pinned host memory and are
                                     streamed to the device layer by layer (two device
                                     layer buffers, copies overlapped with compute)  */
} sq_context_params;

sq_context_params sq_context_default_params(void);

typedef struct sq_context sq_context;

int sq_context_new(const sq_model *m, const sq_context_params *params, sq_context **out,
                   sq_error *err);
void sq_context_free(sq_context *ctx);

/* What the context computes on, e.g. "CPU" or "NVIDIA H200 (sm_90, 139.8 GiB)". */
const char *sq_context_device_name(const sq_context *ctx);
/* The dtype the context's weights have (never AUTO). */
sq_weight_dtype sq_context_dtype(const sq_context *ctx);

/* CUDA devices this process can use: >= 1, or 0 with err saying why (a build without the CUDA
 * backend, no driver, no device; SQ_EUNAVAILABLE: the CUDA module or a CUDA library cannot be
 * loaded, docs/cuda.md). Loads the CUDA module (runtime/cuda_load.c). */
int sq_cuda_device_count(sq_error *err);

int sq_context_committed(const sq_context *ctx);  /* committed tokens */
int sq_context_pending(const sq_context *ctx);    /* pending tokens   */

int sq_context_forward(sq_context *ctx, const int32_t *tokens, const int32_t *pos,
                       const uint8_t *mask, int n, float *logits, sq_error *err);
int sq_context_commit(sq_context *ctx, const int32_t *keep, int nkeep, sq_error *err);

/* One sequence of a batched forward: a context and the arguments sq_context_forward takes. */
typedef struct sq_batch_seq {
    sq_context    *ctx;
    const int32_t *tokens;
    const int32_t *pos;
    const uint8_t *mask;      /* (n, P + n), P: ctx's pending tokens before the call    */
    int            n;
    float         *logits;    /* (n, vocab)                                             */
} sq_batch_seq;

/* The forward of b independent sequences at once (serving a batch): each sequence is what
 * sq_context_forward(seqs[k].ctx, ...) would do, with its own KV cache, positions and tree
 * mask, and its tokens become pending in its own context; the weight products see all
 * sum(n) rows together, attention is per sequence. The contexts must be distinct, on one
 * backend and of one model. The logits equal the separate forwards' up to float rounding (the
 * products' blocking depends on the row count). Both backends have one; on CUDA the contexts
 * must also share one dtype and mode (they then share one copy of the weights on the device),
 * else SQ_EUSAGE. A backend without a batched forward refuses b > 1 with SQ_EUSAGE. */
int sq_context_forward_batch(const sq_batch_seq *seqs, int b, sq_error *err);
/* Whether the context's backend has a batched forward. */
int sq_context_can_batch(const sq_context *ctx);

/* Drops everything (committed and pending). */
void sq_context_reset(sq_context *ctx);

#endif
