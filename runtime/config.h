/* config.json of a Hugging Face Llama checkpoint <-> sq_model_config.
 *
 * Accepted: "architectures" containing an architecture of runtime/arch.h (today
 * "LlamaForCausalLM") or, without "architectures", its "model_type" ("llama"); cfg->arch records
 * which. Required keys: hidden_size, intermediate_size, num_hidden_layers,
 * num_attention_heads, vocab_size. Optional keys take the defaults of transformers'
 * LlamaConfig: num_key_value_heads = num_attention_heads, rms_norm_eps = 1e-6,
 * rope_theta = 10000, max_position_embeddings = 2048, tie_word_embeddings = false,
 * hidden_act = "silu".
 *
 * Refused, each with a message naming the key: another architecture or model_type, a
 * hidden_act other than silu, rope_scaling other than null or {"rope_type": "default"}
 * (linear, dynamic, yarn, llama3, ... are refused: this runtime has only plain RoPE), attention_bias or mlp_bias true,
 * a head_dim other than hidden_size / num_attention_heads, num_attention_heads not a multiple
 * of num_key_value_heads, an odd head dimension (RoPE pairs), sizes out of range.
 * `dtype` is left empty: it describes the weights, which config.json does not decide. */
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
