/* Rotary position embeddings: the inverse frequencies and the attention factor of every RoPE
 * type the runtime accepts (docs/design.md §8.1). Computed once per context, here only: the
 * CPU backend (runtime/cpu.c) and the CUDA backend (runtime/cuda_backend.cu) both build their
 * tables with sq_rope_table.
 *
 * The formulas follow transformers' modeling_rope_utils (the functions computing each type's
 * inv_freq and attention factor), in float32 where transformers computes in float32:
 *   default   inv_freq[i] = 1 / theta^(2i / d)                                    factor 1
 *   linear    default / factor                                                     1
 *   dynamic   default (NTK rescaling only starts past max_position_embeddings,
 *             where the runtime refuses to go: sq_rope_check_context)               1
 *   llama3    wavelength 2 pi / inv_freq above original_max / low_freq_factor:
 *             / factor; below original_max / high_freq_factor: unchanged; between:
 *             a blend with s = (original_max / wavelength - low) / (high - low)     1
 *   yarn      blend of inv_freq (extrapolation) and inv_freq / factor
 *             (interpolation) by a linear ramp over the dimensions between the
 *             correction dims of beta_fast and beta_slow (floor/ceil when
 *             truncate);
 *             attention factor given, else from mscale / mscale_all_dim, else
 *             0.1 ln(factor) + 1                                                  that
 * The attention factor multiplies cos and sin (so the scores by its square). */
#ifndef SQ_RUNTIME_ROPE_H
#define SQ_RUNTIME_ROPE_H

#include "libsequoia/base/error.h"
#include "runtime/model.h"

/* Which set of RoPE parameters a layer uses: Gemma-3's sliding layers have their own base and no
 * scaling (sq_model_config.rope_local). */
const sq_rope_params *sq_rope_of_layer(const sq_model_config *c, int layer);

/* inv_freq[0 .. head_dim/2) and *attn_factor for one parameter set (theta 0: c->rope_theta). */
void sq_rope_table(const sq_model_config *c, const sq_rope_params *r, float *inv_freq,
                   float *attn_factor);

/* A context of `slots` positions: SQ_EUSAGE for a dynamic RoPE past max_position_embeddings
 * (its frequencies would change with the length). */
int sq_rope_check_context(const sq_model_config *c, long long slots, sq_error *err);

/* "default", "linear", ... ; -1 / NULL when unknown. */
int sq_rope_type_parse(const char *name);
const char *sq_rope_type_name(int type);

#endif
