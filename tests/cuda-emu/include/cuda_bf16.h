/* Stand-in for cuda_bf16.h (tests/cuda-emu); see cuda_fp16.h. */
#ifndef SQ_EMU_CUDA_BF16_H
#define SQ_EMU_CUDA_BF16_H
#include <cstdint>
#include "runtime/kernels.h"

struct __nv_bfloat16 {
    uint16_t bits;
};
inline __nv_bfloat16 __float2bfloat16(float f)
{
    __nv_bfloat16 h;
    h.bits = sq_f32_to_bf16(f);
    return h;
}
inline float __bfloat162float(__nv_bfloat16 h)
{
    return sq_bf16_to_f32(h.bits);
}
#endif
