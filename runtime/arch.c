/* The architecture tables (runtime/arch.h, docs/design.md §8.1). */
#include "runtime/arch.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "libsequoia/base/half.h"
#include "runtime/backend.h"

/* Rows: a per-layer tensor (L) or a model tensor (M). */
#define L(n, slot, r, c, init, when) \
    {"model.layers.%d." n, 1, slot, r, c, 0, -1, init, when}
#define M(n, slot, r, c, init) {n, 0, slot, r, c, 0, -1, init, SQ_WHEN_ALWAYS}
#define EMBED M("model.embed_tokens.weight", SQ_M_EMBED, SQ_DIM_VOCAB, SQ_DIM_MODEL, SQ_INIT_EMBED)
#define FINAL_NORM(init) M("model.norm.weight", SQ_M_NORM, SQ_DIM_MODEL, SQ_DIM_NONE, init)
#define LM_HEAD \
    {"lm_head.weight", 0, SQ_M_LM_HEAD, SQ_DIM_VOCAB, SQ_DIM_MODEL, 0, SQ_M_EMBED, SQ_INIT_HEAD, \
     SQ_WHEN_ALWAYS}
/* the attention block of every family: projections, their optional biases, the q/k norms */
#define ATTN                                                                                      \
    L("self_attn.q_proj.weight", SQ_L_WQ, SQ_DIM_Q, SQ_DIM_MODEL, SQ_INIT_LINEAR, 0),              \
    L("self_attn.q_proj.bias", SQ_L_BQ, SQ_DIM_Q, SQ_DIM_NONE, SQ_INIT_BIAS, SQ_WHEN_ATTN_BIAS),   \
    L("self_attn.k_proj.weight", SQ_L_WK, SQ_DIM_KV, SQ_DIM_MODEL, SQ_INIT_LINEAR, 0),             \
    L("self_attn.k_proj.bias", SQ_L_BK, SQ_DIM_KV, SQ_DIM_NONE, SQ_INIT_BIAS, SQ_WHEN_ATTN_BIAS),  \
    L("self_attn.v_proj.weight", SQ_L_WV, SQ_DIM_KV, SQ_DIM_MODEL, SQ_INIT_LINEAR, 0),             \
    L("self_attn.v_proj.bias", SQ_L_BV, SQ_DIM_KV, SQ_DIM_NONE, SQ_INIT_BIAS, SQ_WHEN_ATTN_BIAS),  \
    L("self_attn.o_proj.weight", SQ_L_WO, SQ_DIM_MODEL, SQ_DIM_Q, SQ_INIT_LINEAR, 0),              \
    L("self_attn.o_proj.bias", SQ_L_BO, SQ_DIM_MODEL, SQ_DIM_NONE, SQ_INIT_BIAS,                   \
      SQ_WHEN_ATTN_OUT_BIAS)
#define QK_NORM(init)                                                                             \
    L("self_attn.q_norm.weight", SQ_L_Q_NORM, SQ_DIM_HEAD, SQ_DIM_NONE, init, SQ_WHEN_QK_NORM),    \
    L("self_attn.k_norm.weight", SQ_L_K_NORM, SQ_DIM_HEAD, SQ_DIM_NONE, init, SQ_WHEN_QK_NORM)
#define MLP                                                                                       \
    L("mlp.gate_proj.weight", SQ_L_GATE, SQ_DIM_HIDDEN, SQ_DIM_MODEL, SQ_INIT_LINEAR, 0),          \
    L("mlp.gate_proj.bias", SQ_L_BGATE, SQ_DIM_HIDDEN, SQ_DIM_NONE, SQ_INIT_BIAS,                  \
      SQ_WHEN_MLP_BIAS),                                                                          \
    L("mlp.up_proj.weight", SQ_L_UP, SQ_DIM_HIDDEN, SQ_DIM_MODEL, SQ_INIT_LINEAR, 0),              \
    L("mlp.up_proj.bias", SQ_L_BUP, SQ_DIM_HIDDEN, SQ_DIM_NONE, SQ_INIT_BIAS, SQ_WHEN_MLP_BIAS),   \
    L("mlp.down_proj.weight", SQ_L_DOWN, SQ_DIM_MODEL, SQ_DIM_HIDDEN, SQ_INIT_LINEAR, 0),          \
    L("mlp.down_proj.bias", SQ_L_BDOWN, SQ_DIM_MODEL, SQ_DIM_NONE, SQ_INIT_BIAS, SQ_WHEN_MLP_BIAS)

/* LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM (transformers'
 * modeling_llama, _mistral, _qwen2, _qwen3): RMSNorm before attention and before the MLP,
 * rotary attention with GQA, SwiGLU. Biases and q/k norms as the config says (Qwen2 always has
 * q/k/v biases, Qwen3 always q/k norms: runtime/config.c sets the flags). */
static const sq_arch_tensor llama_tensors[] = {
    EMBED,
    L("input_layernorm.weight", SQ_L_ATTN_NORM, SQ_DIM_MODEL, SQ_DIM_NONE, SQ_INIT_NORM, 0),
    ATTN,
    QK_NORM(SQ_INIT_NORM),
    L("post_attention_layernorm.weight", SQ_L_FFN_NORM, SQ_DIM_MODEL, SQ_DIM_NONE, SQ_INIT_NORM,
      0),
    MLP,
    FINAL_NORM(SQ_INIT_NORM),
    LM_HEAD,
};

/* Gemma2ForCausalLM, Gemma3ForCausalLM (modeling_gemma2, _gemma3): four norms per layer, each
 * (1 + w) (stored as w); post_attention_layernorm normalises the attention's output (Llama's of
 * that name is the MLP's input norm: here pre_feedforward_layernorm). */
static const sq_arch_tensor gemma_tensors[] = {
    EMBED,
    L("input_layernorm.weight", SQ_L_ATTN_NORM, SQ_DIM_MODEL, SQ_DIM_NONE, SQ_INIT_NORM0, 0),
    ATTN,
    QK_NORM(SQ_INIT_NORM0),
    L("post_attention_layernorm.weight", SQ_L_POST_ATTN_NORM, SQ_DIM_MODEL, SQ_DIM_NONE,
      SQ_INIT_NORM0, 0),
    L("pre_feedforward_layernorm.weight", SQ_L_FFN_NORM, SQ_DIM_MODEL, SQ_DIM_NONE,
      SQ_INIT_NORM0, 0),
    MLP,
    L("post_feedforward_layernorm.weight", SQ_L_POST_FFN_NORM, SQ_DIM_MODEL, SQ_DIM_NONE,
      SQ_INIT_NORM0, 0),
    FINAL_NORM(SQ_INIT_NORM0),
    LM_HEAD,
};

#define N_OF(t) (int)(sizeof t / sizeof t[0])
static const sq_arch sq_archs[SQ_ARCH_COUNT] = {
    [SQ_ARCH_LLAMA] = {"LlamaForCausalLM", "llama", llama_tensors, N_OF(llama_tensors), ""},
    [SQ_ARCH_MISTRAL] = {"MistralForCausalLM", "mistral", llama_tensors, N_OF(llama_tensors),
                         ""},
    [SQ_ARCH_QWEN2] = {"Qwen2ForCausalLM", "qwen2", llama_tensors, N_OF(llama_tensors), ""},
    [SQ_ARCH_QWEN3] = {"Qwen3ForCausalLM", "qwen3", llama_tensors, N_OF(llama_tensors), ""},
    [SQ_ARCH_GEMMA2] = {"Gemma2ForCausalLM", "gemma2", gemma_tensors, N_OF(gemma_tensors), ""},
    [SQ_ARCH_GEMMA3] = {"Gemma3ForCausalLM", "gemma3_text", gemma_tensors, N_OF(gemma_tensors),
                        ""},
    [SQ_ARCH_GEMMA3_MM] = {"Gemma3ForConditionalGeneration", "gemma3", gemma_tensors,
                           N_OF(gemma_tensors), "language_model."},
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

/* Whether row t is part of a checkpoint of config c. */
static int row_active(const sq_model_config *c, const sq_arch_tensor *t)
{
    switch (t->when) {
    case SQ_WHEN_ATTN_BIAS:     return c->attn_bias != 0;
    case SQ_WHEN_ATTN_OUT_BIAS: return c->attn_out_bias != 0;
    case SQ_WHEN_MLP_BIAS:      return c->mlp_bias != 0;
    case SQ_WHEN_QK_NORM:       return c->qk_norm != 0;
    case SQ_WHEN_ALWAYS:
    default:                    return 1;
    }
}

/* The active rows of c's table (indices into a->tensors, at most 64) and the range
 * [first, last) of them that repeats per layer. */
typedef struct rows_of {
    const sq_arch *a;
    int            row[64];
    int            n, first, last;
} rows_of;

static void active_rows(const sq_model_config *c, rows_of *r)
{
    r->a = arch_of(c);
    r->n = 0;
    for (int i = 0; i < r->a->n_tensors && r->n < 64; i++)
        if (row_active(c, &r->a->tensors[i]))
            r->row[r->n++] = i;
    r->first = r->last = r->n;
    for (int i = 0; i < r->n; i++)
        if (r->a->tensors[r->row[i]].per_layer) {
            if (r->first == r->n)
                r->first = i;
            r->last = i + 1;
        }
}

int sq_arch_count(const sq_model_config *c)
{
    rows_of r;
    active_rows(c, &r);
    const int per = r.last - r.first;
    return r.n - per + per * (c->n_layers > 0 ? c->n_layers : 0);
}

void sq_arch_tensor_at(const sq_model_config *c, int k, sq_arch_item *out)
{
    rows_of r;
    active_rows(c, &r);
    const int f = r.first, per = r.last - r.first, L = c->n_layers > 0 ? c->n_layers : 0;
    int row, layer = -1;
    if (k < f) {
        row = k;
    } else if (k < f + per * L) {
        row = f + (k - f) % per;
        layer = (k - f) / per;
    } else {
        row = k - per * L + per;
    }
    const sq_arch_tensor *t = &r.a->tensors[r.row[row]];
    memset(out, 0, sizeof *out);
    out->t = t;
    out->layer = layer;
    int len = snprintf(out->name, sizeof out->name, "%s", r.a->prefix);
    if (len < 0 || len >= (int)sizeof out->name)
        len = 0;
    if (layer >= 0)
        snprintf(out->name + len, sizeof out->name - (size_t)len, t->name, layer);
    else
        snprintf(out->name + len, sizeof out->name - (size_t)len, "%s", t->name);
    out->shape[0] = sq_arch_dim_size(c, t->rows);
    out->shape[1] = sq_arch_dim_size(c, t->cols);
    out->ndim = t->cols == SQ_DIM_NONE ? 1 : 2;
    out->numel = out->shape[0] * (out->ndim == 2 ? out->shape[1] : 1);
    out->tied = t->tied_to >= 0 && c->tied_embeddings;
}

int sq_arch_items(const sq_model_config *c, int layer, sq_arch_item *out, int cap)
{
    rows_of r;
    active_rows(c, &r);
    const int f = r.first, per = r.last - r.first, L = c->n_layers > 0 ? c->n_layers : 0;
    const int count = sq_arch_count(c);
    int n = 0;
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

float sq_arch_embed_scale(const sq_model_config *c)
{
    if (!c->gemma)
        return 1.0f;
    /* transformers: hidden_size ** 0.5 as a tensor of the hidden states' dtype */
    float v = (float)sqrt((double)c->dim);
    if (strcmp(c->dtype, "BF16") == 0)
        v = sq_bf16_to_f32(sq_f32_to_bf16(v));
    else if (strcmp(c->dtype, "F16") == 0)
        v = sq_f16_to_f32(sq_f32_to_f16(v));
    return v;
}

const char *sq_arch_cuda_unsupported(const sq_model_config *c)
{
    /* Gemma's post norms take the attention and MLP outputs through the gate|up buffer */
    if (c->gemma && 2 * (long long)c->hidden_dim < c->dim)
        return "Gemma with intermediate_size < hidden_size / 2";
    return NULL;
}
