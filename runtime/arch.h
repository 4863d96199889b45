/* Architectures: which tensors a decoder checkpoint holds, with which shapes (docs/design.md §8,
 * "Model layout").
 *
 * One table per architecture lists every tensor of a Hugging Face checkpoint: its name pattern
 * ("model.layers.%d.self_attn.q_proj.weight"), its shape as functions of config.json's sizes,
 * whether it may be absent, what it equals when the embeddings are tied, how random weights fill
 * it, and its slot in the weights struct (runtime/backend.h: sq_layer_weights.t[] for a per-layer
 * tensor, sq_weights.t[] for a tensor of the whole model). The loader (model.c), the random
 * weights (model_random.c), the test checkpoint writer (st_writer.c), the CUDA upload lists
 * (cuda_backend.cu) and the weights' byte counts (memory.h) iterate the table; the layer bodies
 * of both backends read the slots.
 *
 * Adding an architecture: a row in sq_archs (arch.c) with its tensor list, the slots of any new
 * tensor here (SQ_L_* / SQ_M_*), the config keys it needs in config.c, and the lines that use
 * the new tensors in the layer bodies (cpu.c, cuda_backend.cu). A slot an architecture does not
 * list stays NULL, so a layer body tests it (`if (lw->t[SQ_L_BQ])`) and every other architecture
 * is unchanged.
 *
 * Order. A checkpoint's tensors, as the writer writes them and the loader and the random
 * generator visit them: the model rows before the first per-layer row, then for each layer all
 * per-layer rows, then the remaining model rows (sq_arch_tensor_at). */
#ifndef SQ_RUNTIME_ARCH_H
#define SQ_RUNTIME_ARCH_H

#include <stddef.h>
#include <stdint.h>

#include "runtime/model.h"

/* Slots of a layer's tensors (sq_layer_weights.t[]). The numbering is fixed (the CUDA
 * backend's device random weights seed each tensor's stream from it), not the checkpoint
 * order, which is the table's. */
typedef enum sq_layer_slot {
    SQ_L_ATTN_NORM,   /* (dim)               input_layernorm                */
    SQ_L_FFN_NORM,    /* (dim)               post_attention_layernorm       */
    SQ_L_WQ,          /* (q_dim, dim)        self_attn.q_proj               */
    SQ_L_WK,          /* (kv_dim, dim)       self_attn.k_proj               */
    SQ_L_WV,          /* (kv_dim, dim)       self_attn.v_proj               */
    SQ_L_WO,          /* (dim, q_dim)        self_attn.o_proj               */
    SQ_L_GATE,        /* (hidden_dim, dim)   mlp.gate_proj                  */
    SQ_L_UP,          /* (hidden_dim, dim)   mlp.up_proj (follows GATE)     */
    SQ_L_DOWN,        /* (dim, hidden_dim)   mlp.down_proj                  */
    SQ_L_BQ,          /* (q_dim)             self_attn.q_proj.bias          */
    SQ_L_BK,          /* (kv_dim)            self_attn.k_proj.bias          */
    SQ_L_BV,          /* (kv_dim)            self_attn.v_proj.bias          */
    SQ_L_BO,          /* (dim)               self_attn.o_proj.bias          */
    SQ_L_BGATE,       /* (hidden_dim)        mlp.gate_proj.bias             */
    SQ_L_BUP,         /* (hidden_dim)        mlp.up_proj.bias               */
    SQ_L_BDOWN,       /* (dim)               mlp.down_proj.bias             */
    SQ_L_Q_NORM,      /* (head_dim)          self_attn.q_norm (per head)    */
    SQ_L_K_NORM,      /* (head_dim)          self_attn.k_norm               */
    SQ_L_POST_ATTN_NORM, /* (dim)            Gemma's post_attention_layernorm
                                             (Gemma's pre_feedforward_layernorm
                                             is FFN_NORM)                   */
    SQ_L_POST_FFN_NORM,  /* (dim)            post_feedforward_layernorm     */
    SQ_L_COUNT
} sq_layer_slot;

/* Slots of the model's own tensors (sq_weights.t[]). */
typedef enum sq_model_slot {
    SQ_M_EMBED,       /* (vocab, dim)        model.embed_tokens             */
    SQ_M_LM_HEAD,     /* (vocab, dim)        lm_head, or EMBED when tied    */
    SQ_M_NORM,        /* (dim)               model.norm                     */
    SQ_M_COUNT
} sq_model_slot;

/* A dimension of a tensor, from the config. */
typedef enum sq_arch_dim {
    SQ_DIM_NONE = 0,  /* no second dimension: a vector                    */
    SQ_DIM_MODEL,     /* hidden_size                                      */
    SQ_DIM_HIDDEN,    /* intermediate_size                                */
    SQ_DIM_Q,         /* num_attention_heads * head_dim                   */
    SQ_DIM_KV,        /* num_key_value_heads * head_dim                   */
    SQ_DIM_HEAD,      /* head_dim (per-head norms)                        */
    SQ_DIM_VOCAB,     /* vocab_size                                       */
} sq_arch_dim;

/* How random weights fill a tensor (each generator has its own figures: model_random.c,
 * st_writer.c, cuda_backend.cu). */
typedef enum sq_arch_init {
    SQ_INIT_NORM,     /* around 1                                         */
    SQ_INIT_LINEAR,   /* uniform, spread from 1/cols (in_features)        */
    SQ_INIT_EMBED,    /* uniform in [-1, 1]                               */
    SQ_INIT_HEAD,     /* the LM head: uniform, spread from 1/dim          */
    SQ_INIT_NORM0,    /* a Gemma norm, stored as w of (1 + w): around 0   */
    SQ_INIT_BIAS,     /* a bias: small, around 0                          */
} sq_arch_init;

/* When a table row is part of a checkpoint: always, or with a feature of the config
 * (runtime/model.h: sq_model_config). */
typedef enum sq_arch_when {
    SQ_WHEN_ALWAYS = 0,
    SQ_WHEN_ATTN_BIAS,      /* attn_bias      */
    SQ_WHEN_ATTN_OUT_BIAS,  /* attn_out_bias  */
    SQ_WHEN_MLP_BIAS,       /* mlp_bias       */
    SQ_WHEN_QK_NORM,        /* qk_norm        */
} sq_arch_when;

typedef struct sq_arch_tensor {
    const char  *name;       /* HF name; a per-layer one has "%d" for the layer      */
    int          per_layer;  /* 1: slot in sq_layer_weights.t, 0: in sq_weights.t   */
    int          slot;       /* sq_layer_slot or sq_model_slot                      */
    sq_arch_dim  rows, cols; /* shape (rows) or (rows, cols): HF nn.Linear's
                                (out_features, in_features), row-major            */
    int          optional;   /* may be missing from a checkpoint (slot stays NULL)  */
    int          tied_to;    /* with tie_word_embeddings: the model slot it equals
                                (a stored copy is ignored, as transformers does);
                                -1: none                                          */
    sq_arch_init init;
    sq_arch_when when;       /* rows of a feature the config does not have are not
                                part of the checkpoint                             */
} sq_arch_tensor;

typedef enum sq_arch_id {
    SQ_ARCH_LLAMA = 0,   /* LlamaForCausalLM                                         */
    SQ_ARCH_MISTRAL,     /* MistralForCausalLM                                       */
    SQ_ARCH_QWEN2,       /* Qwen2ForCausalLM                                         */
    SQ_ARCH_QWEN3,       /* Qwen3ForCausalLM                                         */
    SQ_ARCH_GEMMA2,      /* Gemma2ForCausalLM                                        */
    SQ_ARCH_GEMMA3,      /* Gemma3ForCausalLM (model_type gemma3_text)               */
    SQ_ARCH_GEMMA3_MM,   /* Gemma3ForConditionalGeneration: its language model only
                            (config under text_config, tensors under language_model.) */
    SQ_ARCH_COUNT
} sq_arch_id;

typedef struct sq_arch {
    const char           *name;        /* "architectures" entry: "LlamaForCausalLM" */
    const char           *model_type;  /* "model_type": "llama"                     */
    const sq_arch_tensor *tensors;
    int                   n_tensors;
    const char           *prefix;      /* before every tensor name ("" or
                                          "language_model.")                      */
} sq_arch;

/* The table of an architecture (sq_model_config.arch); NULL when out of range. */
const sq_arch *sq_arch_get(int id);
/* The architecture whose "architectures" name (by_name) or "model_type" is `s`; -1 if none. */
int sq_arch_find(const char *s, int by_model_type);
/* "LlamaForCausalLM" or "A, B" for the messages of config.c: every supported architecture. */
const char *sq_arch_names(int by_model_type);

/* The size of a dimension for config c (0 for SQ_DIM_NONE). */
int64_t sq_arch_dim_size(const sq_model_config *c, sq_arch_dim d);

/* One tensor of a checkpoint of config c. */
typedef struct sq_arch_item {
    const sq_arch_tensor *t;
    int                   layer;      /* -1 for a model tensor                     */
    char                  name[160];  /* the name, layer filled in                 */
    int                   ndim;       /* 1 or 2                                    */
    int64_t               shape[2];   /* shape[1] = 0 for a vector                 */
    int64_t               numel;
    int                   tied;       /* tied_to applies: the tensor is an alias   */
} sq_arch_item;

/* Tensors of a checkpoint of config c (tied ones included). */
int sq_arch_count(const sq_model_config *c);
/* The k-th (0 <= k < sq_arch_count) in checkpoint order. */
void sq_arch_tensor_at(const sq_model_config *c, int k, sq_arch_item *out);

/* The tensors of layer `layer` (>= 0), or with layer -1 the model's own, in checkpoint order,
 * into out[0 .. cap); returns how many there are. */
int sq_arch_items(const sq_model_config *c, int layer, sq_arch_item *out, int cap);

/* Where a tensor's typed view lives in w (runtime/backend.h). */
struct sq_weights;
struct sq_wt;
struct sq_wt *sq_arch_slot(struct sq_weights *w, const sq_arch_item *it);

/* The factor of the embeddings: 1, or for Gemma sqrt(hidden_size) rounded to the checkpoint's
 * dtype (c->dtype) as transformers makes it. */
float sq_arch_embed_scale(const sq_model_config *c);

/* The first feature of c the CUDA backend (runtime/cuda_backend.cu) does not implement, by
 * name; NULL when it implements them all. */
const char *sq_arch_cuda_unsupported(const sq_model_config *c);

#endif
