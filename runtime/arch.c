/* The architecture tables (runtime/arch.h, docs/design.md §8.1). */
#include "runtime/arch.h"

#include <stdio.h>
#include <string.h>

#include "runtime/backend.h"

/* LlamaForCausalLM (transformers' modeling_llama): RMSNorm, rotary attention with GQA, SwiGLU;
 * no biases. Rows in checkpoint order. */
static const sq_arch_tensor llama_tensors[] = {
    {"model.embed_tokens.weight", 0, SQ_M_EMBED, SQ_DIM_VOCAB, SQ_DIM_MODEL, 0, -1,
     SQ_INIT_EMBED},
    {"model.layers.%d.input_layernorm.weight", 1, SQ_L_ATTN_NORM, SQ_DIM_MODEL, SQ_DIM_NONE, 0,
     -1, SQ_INIT_NORM},
    {"model.layers.%d.self_attn.q_proj.weight", 1, SQ_L_WQ, SQ_DIM_Q, SQ_DIM_MODEL, 0, -1,
     SQ_INIT_LINEAR},
    {"model.layers.%d.self_attn.k_proj.weight", 1, SQ_L_WK, SQ_DIM_KV, SQ_DIM_MODEL, 0, -1,
     SQ_INIT_LINEAR},
    {"model.layers.%d.self_attn.v_proj.weight", 1, SQ_L_WV, SQ_DIM_KV, SQ_DIM_MODEL, 0, -1,
     SQ_INIT_LINEAR},
    {"model.layers.%d.self_attn.o_proj.weight", 1, SQ_L_WO, SQ_DIM_MODEL, SQ_DIM_Q, 0, -1,
     SQ_INIT_LINEAR},
    {"model.layers.%d.post_attention_layernorm.weight", 1, SQ_L_FFN_NORM, SQ_DIM_MODEL,
     SQ_DIM_NONE, 0, -1, SQ_INIT_NORM},
    {"model.layers.%d.mlp.gate_proj.weight", 1, SQ_L_GATE, SQ_DIM_HIDDEN, SQ_DIM_MODEL, 0, -1,
     SQ_INIT_LINEAR},
    {"model.layers.%d.mlp.up_proj.weight", 1, SQ_L_UP, SQ_DIM_HIDDEN, SQ_DIM_MODEL, 0, -1,
     SQ_INIT_LINEAR},
    {"model.layers.%d.mlp.down_proj.weight", 1, SQ_L_DOWN, SQ_DIM_MODEL, SQ_DIM_HIDDEN, 0, -1,
     SQ_INIT_LINEAR},
    {"model.norm.weight", 0, SQ_M_NORM, SQ_DIM_MODEL, SQ_DIM_NONE, 0, -1, SQ_INIT_NORM},
    {"lm_head.weight", 0, SQ_M_LM_HEAD, SQ_DIM_VOCAB, SQ_DIM_MODEL, 0, SQ_M_EMBED, SQ_INIT_HEAD},
};

static const sq_arch sq_archs[SQ_ARCH_COUNT] = {
    [SQ_ARCH_LLAMA] = {"LlamaForCausalLM", "llama", llama_tensors,
                       (int)(sizeof llama_tensors / sizeof llama_tensors[0])},
};

const sq_arch *sq_arch_get(int id)
{
    return id >= 0 && id < SQ_ARCH_COUNT ? &sq_archs[id] : NULL;
}

int sq_arch_find(const char *s, int by_model_type)
{
    for (int i = 0; i < SQ_ARCH_COUNT; i++)
        if (strcmp(s, by_model_type ? sq_archs[i].model_type : sq_archs[i].name) == 0)
            return i;
    return -1;
}

const char *sq_arch_names(int by_model_type)
{
    static char names[2][256];
    char *b = names[by_model_type ? 1 : 0];
    size_t len = 0;
    b[0] = '\0';
    for (int i = 0; i < SQ_ARCH_COUNT && len < sizeof names[0]; i++)
        len += (size_t)snprintf(b + len, sizeof names[0] - len, "%s%s", i ? ", " : "",
                                by_model_type ? sq_archs[i].model_type : sq_archs[i].name);
    return b;
}

int64_t sq_arch_dim_size(const sq_model_config *c, sq_arch_dim d)
{
    switch (d) {
    case SQ_DIM_NONE:   return 0;
    case SQ_DIM_MODEL:  return c->dim;
    case SQ_DIM_HIDDEN: return c->hidden_dim;
    case SQ_DIM_Q:      return (int64_t)c->n_heads * c->head_dim;
    case SQ_DIM_KV:     return (int64_t)c->n_kv_heads * c->head_dim;
    case SQ_DIM_HEAD:   return c->head_dim;
    case SQ_DIM_VOCAB:  return c->vocab_size;
    }
    return 0;
}

/* The table of c's architecture (an out-of-range id reads as Llama: configs made by hand leave
 * arch 0). */
static const sq_arch *arch_of(const sq_model_config *c)
{
    const sq_arch *a = sq_arch_get(c->arch);
    return a ? a : &sq_archs[SQ_ARCH_LLAMA];
}

/* The rows [first, last) that repeat per layer. */
static void layer_rows(const sq_arch *a, int *first, int *last)
{
    int f = a->n_tensors, l = a->n_tensors;
    for (int i = 0; i < a->n_tensors; i++)
        if (a->tensors[i].per_layer) {
            if (f == a->n_tensors)
                f = i;
            l = i + 1;
        }
    *first = f;
    *last = l;
}

int sq_arch_count(const sq_model_config *c)
{
    const sq_arch *a = arch_of(c);
    int f, l;
    layer_rows(a, &f, &l);
    return a->n_tensors - (l - f) + (l - f) * (c->n_layers > 0 ? c->n_layers : 0);
}

void sq_arch_tensor_at(const sq_model_config *c, int k, sq_arch_item *out)
{
    const sq_arch *a = arch_of(c);
    int f, l;
    layer_rows(a, &f, &l);
    const int per = l - f, L = c->n_layers > 0 ? c->n_layers : 0;
    int row, layer = -1;
    if (k < f) {
        row = k;
    } else if (k < f + per * L) {
        row = f + (k - f) % per;
        layer = (k - f) / per;
    } else {
        row = k - per * L + per;
    }
    const sq_arch_tensor *t = &a->tensors[row];
    memset(out, 0, sizeof *out);
    out->t = t;
    out->layer = layer;
    if (layer >= 0)
        snprintf(out->name, sizeof out->name, t->name, layer);
    else
        snprintf(out->name, sizeof out->name, "%s", t->name);
    out->shape[0] = sq_arch_dim_size(c, t->rows);
    out->shape[1] = sq_arch_dim_size(c, t->cols);
    out->ndim = t->cols == SQ_DIM_NONE ? 1 : 2;
    out->numel = out->shape[0] * (out->ndim == 2 ? out->shape[1] : 1);
    out->tied = t->tied_to >= 0 && c->tied_embeddings;
}

int sq_arch_items(const sq_model_config *c, int layer, sq_arch_item *out, int cap)
{
    const sq_arch *a = arch_of(c);
    int f, l, n = 0;
    layer_rows(a, &f, &l);
    const int per = l - f, L = c->n_layers > 0 ? c->n_layers : 0;
    const int count = sq_arch_count(c);
    /* layer j's rows are items f + j * per .. f + (j + 1) * per - 1; the model's the others */
    const int lo = layer >= 0 ? f + layer * per : 0, hi = layer >= 0 ? lo + per : count;
    for (int k = lo; k < hi; k++) {
        if (layer < 0 && k >= f && k < f + per * L)
            k = f + per * L;
        if (k >= hi)
            break;
        if (n < cap)
            sq_arch_tensor_at(c, k, &out[n]);
        n++;
    }
    return n;
}

struct sq_wt *sq_arch_slot(struct sq_weights *w, const sq_arch_item *it)
{
    return it->layer >= 0 ? &w->layers[it->layer].t[it->t->slot] : &w->t[it->t->slot];
}

/* runtime/model.h: tied tensors counted once, optional ones as present. */
size_t sq_model_config_params(const sq_model_config *c)
{
    size_t n = 0;
    const int count = sq_arch_count(c);
    for (int k = 0; k < count; k++) {
        sq_arch_item it;
        sq_arch_tensor_at(c, k, &it);
        if (!it.tied)
            n += (size_t)it.numel;
    }
    return n;
}
