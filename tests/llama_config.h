/* The Llama configs of the tests' random models (sq_model_new_random): float32, RoPE theta
 * 10000, RMSNorm eps 1e-5, the shape given; every other field 0 (the runtime's defaults). */
#ifndef SQ_TESTS_LLAMA_CONFIG_H
#define SQ_TESTS_LLAMA_CONFIG_H

#include <string.h>

#include "runtime/model.h"

typedef struct tu_shape {
    int dim, hidden_dim, n_layers, n_heads, n_kv_heads, head_dim, vocab_size, max_position;
} tu_shape;

static inline sq_model_config tu_llama_config(tu_shape s)
{
    sq_model_config c = {0};
    c.dim = s.dim;
    c.hidden_dim = s.hidden_dim;
    c.n_layers = s.n_layers;
    c.n_heads = s.n_heads;
    c.n_kv_heads = s.n_kv_heads;
    c.head_dim = s.head_dim;
    c.vocab_size = s.vocab_size;
    c.max_position = s.max_position;
    c.rope_theta = 10000.0f;
    c.norm_eps = 1e-5f;
    strcpy(c.dtype, "F32");
    return c;
}

#endif
