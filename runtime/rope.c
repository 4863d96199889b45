/* RoPE tables (runtime/rope.h). Written from the formulas of transformers'
 * modeling_rope_utils (its default, linear, dynamic, llama3 and yarn parameter functions); the
 * float32 steps are float32 here too, the scalar ones (Python floats there) double. */
#include "runtime/rope.h"

#include "runtime/kernels.h"

#include <math.h>
#include <string.h>

static const char *const rope_names[] = {
    [SQ_ROPE_DEFAULT] = "default", [SQ_ROPE_LINEAR] = "linear", [SQ_ROPE_DYNAMIC] = "dynamic",
    [SQ_ROPE_LLAMA3] = "llama3",   [SQ_ROPE_YARN] = "yarn",
};

int sq_rope_type_parse(const char *name)
{
    for (int i = 0; i < (int)(sizeof rope_names / sizeof rope_names[0]); i++)
        if (strcmp(name, rope_names[i]) == 0)
            return i;
    return -1;
}

const char *sq_rope_type_name(int type)
{
    return type >= 0 && type < (int)(sizeof rope_names / sizeof rope_names[0]) ? rope_names[type]
                                                                               : NULL;
}

const sq_rope_params *sq_rope_of_layer(const sq_model_config *c, int layer)
{
    if (c->rope_local.theta > 0 && sq_model_layer_sliding(c, layer))
        return &c->rope_local;
    return &c->rope;
}

/* yarn's dimension index at which `rotations` full turns fit in the original context. */
static double yarn_correction_dim(double rotations, int dim, double base, double orig_max)
{
    return dim * log(orig_max / (rotations * 2 * M_PI)) / (2 * log(base));
}

static double yarn_mscale(double scale, double mscale)
{
    return scale <= 1 ? 1.0 : 0.1 * mscale * log(scale) + 1.0;
}

void sq_rope_table(const sq_model_config *c, const sq_rope_params *r, float *inv_freq,
                   float *attn_factor)
{
    const int d = c->head_dim, half = d / 2;
    const float theta = r->theta > 0 ? r->theta : c->rope_theta;
    const double orig = r->original_max_position > 0 ? r->original_max_position
                                                     : (c->max_position > 0 ? c->max_position
                                                                            : 2048);
    *attn_factor = 1.0f;
    for (int i = 0; i < half; i++)  /* 1 / theta^(2i/d), as float32 tensors */
        inv_freq[i] = sq_k_rope_inv_freq(i, d, theta);
    switch (r->type) {
    case SQ_ROPE_LINEAR:
        for (int i = 0; i < half; i++)
            inv_freq[i] /= r->factor;
        break;
    case SQ_ROPE_LLAMA3: {
        const double low_wl = orig / r->low_freq_factor, high_wl = orig / r->high_freq_factor;
        for (int i = 0; i < half; i++) {
            const float f = inv_freq[i];
            const float wl = (float)(2 * M_PI) / f;
            float v = wl > (float)low_wl ? f / r->factor : f;
            if (!(wl < (float)high_wl) && !(wl > (float)low_wl)) {
                const float s = ((float)orig / wl - r->low_freq_factor) /
                                (r->high_freq_factor - r->low_freq_factor);
                v = (1 - s) * v / r->factor + s * v;
            }
            inv_freq[i] = v;
        }
        break;
    }
    case SQ_ROPE_YARN: {
        const double factor = r->factor;
        double af = r->attention_factor;
        if (!(af > 0)) {
            if (r->mscale > 0 && r->mscale_all_dim > 0)
                af = yarn_mscale(factor, r->mscale) / yarn_mscale(factor, r->mscale_all_dim);
            else
                af = yarn_mscale(factor, 1.0);
        }
        *attn_factor = (float)af;
        const double fast = r->beta_fast > 0 ? r->beta_fast : 32, slow = r->beta_slow > 0
                                                                       ? r->beta_slow
                                                                       : 1;
        double lo = yarn_correction_dim(fast, d, theta, orig);
        double hi = yarn_correction_dim(slow, d, theta, orig);
        if (!r->no_truncate) {
            lo = floor(lo);
            hi = ceil(hi);
        }
        lo = lo > 0 ? lo : 0;
        hi = hi < d - 1 ? hi : d - 1;
        if (lo == hi)
            hi += 0.001;
        for (int i = 0; i < half; i++) {
            const float pos_freq = powf(theta, (float)(2 * i) / (float)d);
            const float extra = sq_k_rope_inv_freq(i, d, theta);
            const float inter = 1.0f / ((float)factor * pos_freq);
            float ramp = ((float)i - (float)lo) / (float)(hi - lo);
            ramp = ramp < 0 ? 0 : ramp > 1 ? 1 : ramp;
            const float ef = 1.0f - ramp;   /* the extrapolation's share */
            inv_freq[i] = inter * (1.0f - ef) + extra * ef;
        }
        break;
    }
    case SQ_ROPE_DYNAMIC:   /* equal to default within max_position (sq_rope_check_context) */
    case SQ_ROPE_DEFAULT:
    default:
        break;
    }
}

int sq_rope_check_context(const sq_model_config *c, long long slots, sq_error *err)
{
    const sq_rope_params *rs[2] = {&c->rope, &c->rope_local};
    for (int k = 0; k < 2; k++)
        if (rs[k]->type == SQ_ROPE_DYNAMIC && c->max_position > 0 && slots > c->max_position)
            return sq_error_set(err, SQ_EUSAGE, "rope_scaling: a \"dynamic\" RoPE changes its "
                                "frequencies past max_position_embeddings = %d, which this "
                                "runtime does not do; a context of %lld positions is too long "
                                "(use at most %d)", c->max_position, slots, c->max_position);
    return SQ_OK;
}
