/* Sharp attention for the CUDA-vs-CPU tests (tests/test_cuda.c, tests/cuda-emu/test_emu_shapes.c):
 * the query and key weights x16 and the value and output weights x8 of a model made by
 * sq_model_new_random. A random model's attention is otherwise nearly uniform over the context,
 * and then a mask that is ignored, a wrong KV head for GQA, a commit that ignores keep[] or RoPE
 * pairing (k, k+1) change the logits by less than a 16-bit tolerance; with these factors each
 * of them exceeds 1e-2 (f16) / 3e-2 (bf16) of the largest logit while correct kernels stay under
 * 3e-3 (tests/cuda-emu/mutate.sh checks that every CUDA test fails on each seeded bug). */
#ifndef SQ_TESTS_CUDA_SHARP_H
#define SQ_TESTS_CUDA_SHARP_H

#include <stddef.h>

#include "runtime/backend.h"

static inline void sq_test_scale(const void *w, size_t n, float by)
{
    float *x = (float *)w;   /* sq_model_new_random's own malloc'd buffers */
    for (size_t i = 0; i < n; i++)
        x[i] *= by;
}

static inline void sq_test_sharpen(sq_model *m)
{
    const sq_model_config *c = &m->config;
    const size_t dim = (size_t)c->dim, q = (size_t)c->n_heads * c->head_dim;
    const size_t kv = (size_t)c->n_kv_heads * c->head_dim;
    for (int l = 0; l < c->n_layers; l++) {
        const sq_layer_weights *w = &m->w.layers[l];
        sq_test_scale(w->t[SQ_L_WQ].p, q * dim, 16.0f);
        sq_test_scale(w->t[SQ_L_WK].p, kv * dim, 16.0f);
        sq_test_scale(w->t[SQ_L_WV].p, kv * dim, 8.0f);
        sq_test_scale(w->t[SQ_L_WO].p, dim * q, 8.0f);
    }
}

#endif
