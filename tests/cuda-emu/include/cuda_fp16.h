/* Stand-in for cuda_fp16.h (tests/cuda-emu): 16-bit types as bit patterns with float
 * conversions, through libsequoia/base/half.h's round-to-nearest-even conversions. The project's
 * kernels keep 16-bit values as uint16_t; this exists so that code using __half compiles. */
#ifndef SQ_EMU_CUDA_FP16_H
#define SQ_EMU_CUDA_FP16_H
#include <cstdint>
#include "runtime/kernels.h"

struct __half {
    uint16_t bits;
};
inline __half __float2half(float f)
{
    __half h;
    h.bits = sq_f32_to_f16(f);
    return h;
}
inline float __half2float(__half h)
{
    return sq_f16_to_f32(h.bits);
}
#endif
