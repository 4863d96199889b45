/* config.json of a Hugging Face decoder checkpoint <-> sq_model_config (docs/runtime.md, "Model
 * families").
 *
 * Accepted: "architectures" containing an architecture of runtime/arch.h (Llama, Mistral, Qwen2,
 * Qwen3, Gemma-2, Gemma-3, Gemma-3's ConditionalGeneration whose text_config is read) or,
 * without "architectures", its "model_type"; cfg->arch records which. Required keys:
 * hidden_size, intermediate_size, num_hidden_layers, num_attention_heads, vocab_size. Optional
 * keys take the defaults of the family's transformers config class. RoPE: rope_theta +
 * rope_scaling (transformers 4.x) or rope_parameters, flat or per layer type (5.x); types
 * default, linear, dynamic, llama3, yarn (runtime/rope.h). The family's features (biases, q/k
 * norms, Gemma's norms, activation, query_pre_attn_scalar, soft caps, sliding windows by
 * layer_types or the family's rule) become fields of sq_model_config.
 *
 * Refused, each with a message naming the file and the key (SQ_EDATA, exit 65): another
 * architecture (mixture-of-experts and hybrid recurrent ones named as such), quantization_config,
 * an unknown RoPE type or one without its parameters, an activation other than the family's,
 * an odd head dimension, layer_types of the wrong length or with another layer type,
 * sliding_window 0, num_attention_heads not a multiple of num_key_value_heads, sizes out of
 * range. `dtype` is left empty: it describes the weights, which config.json does not decide. */
#ifndef SQ_RUNTIME_CONFIG_H
#define SQ_RUNTIME_CONFIG_H

#include <cjson/cJSON.h>

#include "libsequoia/base/error.h"
#include "runtime/model.h"

/* Limits that keep every size product well inside 64 bits. */
#define SQ_MODEL_MAX_DIM (1 << 16)        /* hidden_size, num_attention_heads * head_dim  */
#define SQ_MODEL_MAX_HIDDEN (1 << 20)     /* intermediate_size                             */
#define SQ_MODEL_MAX_VOCAB (1 << 24)

/* `file` only serves the messages: "config.json: rope_scaling: type \"linear\" is not ..." */
int sq_model_config_parse(const char *file, const cJSON *root, sq_model_config *cfg,
                          sq_error *err);

/* Reads and parses a config.json file. Errors: SQ_ENOINPUT, SQ_EDATA, SQ_EIO. */
int sq_model_config_load(const char *path, sq_model_config *cfg, sq_error *err);

/* The config.json object for `cfg` (its architecture's names); NULL when out of memory. */
cJSON *sq_model_config_to_json(const sq_model_config *cfg);

#endif
