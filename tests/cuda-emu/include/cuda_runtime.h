/* Stand-in for the CUDA runtime header (tests/cuda-emu): the subset of the runtime API and of
 * the device language that runtime/cuda_*.cu use, implemented on the CPU by tests/cuda-emu/emu.cc.
 * Device code is compiled as plain C++: __global__/__device__ vanish, __shared__ variables are
 * function statics (blocks run one at a time), each CUDA thread of a block is a fiber, and
 * threadIdx/blockIdx name the running fiber's coordinates. Launches `k<<<g, b, sh, s>>>(args)` are
 * rewritten by tests/cuda-emu/launch.py into sq_emu_launch(...) below. Semantics follow the CUDA
 * Runtime API reference (v13.0), "API synchronization behavior" and "Stream synchronization
 * behavior", and the CUDA C++ Programming Guide ("Synchronization functions", "Warp shuffle
 * functions"). */
#ifndef SQ_EMU_CUDA_RUNTIME_H
#define SQ_EMU_CUDA_RUNTIME_H

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <tuple>
#include <type_traits>
#include <utility>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __shared__ static
#define __launch_bounds__(...)
#define __restrict__ __restrict

struct uint3 {
    unsigned x, y, z;
};

struct uint4 {
    unsigned x, y, z, w;
};

struct dim3 {
    unsigned x, y, z;
    dim3(unsigned vx = 1, unsigned vy = 1, unsigned vz = 1) : x(vx), y(vy), z(vz) {}
};

extern uint3 sq_emu_threadIdx, sq_emu_blockIdx;
extern dim3 sq_emu_blockDim, sq_emu_gridDim;
#define threadIdx sq_emu_threadIdx
#define blockIdx sq_emu_blockIdx
#define blockDim sq_emu_blockDim
#define gridDim sq_emu_gridDim
#define warpSize 32

typedef enum cudaError {
    cudaSuccess = 0,
    cudaErrorInvalidValue = 1,
    cudaErrorMemoryAllocation = 2,
    cudaErrorInvalidConfiguration = 9,
    cudaErrorInvalidMemcpyDirection = 21,
    cudaErrorInsufficientDriver = 35,
    cudaErrorNoDevice = 100,
    cudaErrorInvalidDevice = 101,
    cudaErrorInvalidResourceHandle = 400,
    cudaErrorNotReady = 600,
    cudaErrorIllegalAddress = 700,
} cudaError_t;

typedef struct sq_emu_stream *cudaStream_t;
typedef struct sq_emu_event *cudaEvent_t;

enum cudaMemcpyKind {
    cudaMemcpyHostToHost = 0,
    cudaMemcpyHostToDevice = 1,
    cudaMemcpyDeviceToHost = 2,
    cudaMemcpyDeviceToDevice = 3,
    cudaMemcpyDefault = 4,
};

#define cudaStreamDefault 0x00
#define cudaStreamNonBlocking 0x01
#define cudaEventDefault 0x00
#define cudaEventBlockingSync 0x01
#define cudaEventDisableTiming 0x02
#define cudaHostAllocDefault 0x00

struct cudaDeviceProp {
    char   name[256];
    size_t totalGlobalMem;
    int    major, minor;
    int    multiProcessorCount;
    int    maxThreadsPerBlock;
    size_t sharedMemPerBlock;
};

cudaError_t cudaGetDeviceCount(int *count);
cudaError_t cudaSetDevice(int device);
cudaError_t cudaGetDeviceProperties(cudaDeviceProp *prop, int device);
cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total_bytes);
cudaError_t cudaDeviceSynchronize(void);
cudaError_t cudaGetLastError(void);
cudaError_t cudaPeekAtLastError(void);
const char *cudaGetErrorString(cudaError_t e);

cudaError_t cudaMalloc(void **p, size_t bytes);
cudaError_t cudaFree(void *p);
cudaError_t cudaMallocHost(void **p, size_t bytes);
cudaError_t cudaHostAlloc(void **p, size_t bytes, unsigned flags);
cudaError_t cudaFreeHost(void *p);
cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t stream = 0);
cudaError_t cudaMemset(void *p, int value, size_t bytes);
cudaError_t cudaMemsetAsync(void *p, int value, size_t bytes, cudaStream_t stream = 0);

cudaError_t cudaStreamCreate(cudaStream_t *s);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags);
cudaError_t cudaStreamDestroy(cudaStream_t s);
cudaError_t cudaStreamSynchronize(cudaStream_t s);
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned flags = 0);
cudaError_t cudaEventCreate(cudaEvent_t *e);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned flags);
cudaError_t cudaEventDestroy(cudaEvent_t e);
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s = 0);
cudaError_t cudaEventSynchronize(cudaEvent_t e);
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b);

/* ---- device side ---------------------------------------------------------------------------- */

void __syncthreads(void);
/* The lanes named in mask meet (a lane in the mask that has exited or waits elsewhere aborts). */
void __syncwarp(unsigned mask = 0xffffffffu);
inline int min(int a, int b)
{
    return a < b ? a : b;
}
inline int max(int a, int b)
{
    return a > b ? a : b;
}
/* Every lane named in `mask` arrives, each deposits 8 bytes, then reads lane `src`'s (its own
 * when src is outside the warp); a lane in the mask that has exited or waits elsewhere aborts. */
unsigned long long sq_emu_shfl_bits(unsigned mask, unsigned long long bits, int src_lane);
unsigned sq_emu_lane(void);

template <typename T> T sq_emu_shfl(unsigned mask, T v, int src)
{
    static_assert(sizeof(T) <= 8, "shuffle of more than 8 bytes");
    unsigned long long b = 0;
    std::memcpy(&b, &v, sizeof v);
    b = sq_emu_shfl_bits(mask, b, src);
    T r;
    std::memcpy(&r, &b, sizeof r);
    return r;
}
template <typename T> T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32)
{
    unsigned lane = sq_emu_lane();
    return sq_emu_shfl(mask, v, (int)((lane & ~(unsigned)(width - 1)) |
                                      ((lane ^ (unsigned)lane_mask) & (unsigned)(width - 1))));
}
template <typename T> T __shfl_sync(unsigned mask, T v, int src, int width = 32)
{
    unsigned lane = sq_emu_lane();
    return sq_emu_shfl(mask, v, (int)((lane & ~(unsigned)(width - 1)) + ((unsigned)src %
                                                                          (unsigned)width)));
}
template <typename T> T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = 32)
{
    unsigned lane = sq_emu_lane(), seg = lane & (unsigned)(width - 1);
    return sq_emu_shfl(mask, v, (int)(seg + delta < (unsigned)width ? lane + delta : lane));
}

/* ---- launches --------------------------------------------------------------------------------- */

struct sq_emu_cfg {
    dim3         grid, block;
    size_t       shmem;
    cudaStream_t stream;
};

inline sq_emu_cfg sq_emu_config(dim3 grid, dim3 block, size_t shmem = 0, cudaStream_t stream = 0)
{
    sq_emu_cfg c;
    c.grid = grid;
    c.block = block;
    c.shmem = shmem;
    c.stream = stream;
    return c;
}

/* Checks the configuration (a bad one sets the sticky launch error, as cudaGetLastError then
 * reports) and enqueues `body` on the stream; when the stream runs it, every block runs every
 * thread's fiber through `body`. */
void sq_emu_launch_body(const sq_emu_cfg &cfg, const char *name, std::function<void()> body);

/* The arguments are converted to the kernel's parameter types and captured by value when the
 * launch is made, as the CUDA runtime does. */
template <typename... P, typename... A>
void sq_emu_launch(const sq_emu_cfg &cfg, const char *name, void (*kernel)(P...), A &&...args)
{
    static_assert(sizeof...(P) == sizeof...(A), "kernel launched with the wrong argument count");
    std::tuple<typename std::decay<P>::type...> captured(std::forward<A>(args)...);
    sq_emu_launch_body(cfg, name, [kernel, captured]() { std::apply(kernel, captured); });
}

#endif
