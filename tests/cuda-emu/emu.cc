/* The CPU execution of the project's CUDA code for tests (issue 15): the runtime API, streams and
 * events, device memory, kernel launches and cuBLAS's cublasGemmEx, as declared by the stand-in
 * headers in tests/cuda-emu/include.
 *
 * Threads. Each CUDA thread of a block is a fiber (its own stack; on x86-64 a 20-instruction
 * register switch, elsewhere ucontext's swapcontext, which costs two system calls and, under
 * ASan, clearing the shadow of the whole stack per switch). A block runs its fibers one at a
 * time, in a random order, each until it reaches __syncthreads(), a warp shuffle or its end;
 * __syncthreads() releases the block only when every thread is there (one that has returned
 * while others wait is a divergent barrier: abort), a shuffle releases the lanes named in its
 * mask only when all of them are there. Blocks run one at a time, in a random order.
 *
 * Streams. Every operation (kernel, copy, memset, event record, event wait, GEMM) is queued on
 * its stream and runs later, under one of three schedules (SQ_CUDA_EMU_SCHEDULE):
 *   eager      every operation runs as soon as it is queued and ready (a synchronous device);
 *   lazy       nothing runs until the host must see a result (a synchronising call), and then
 *              only what that result depends on: copies land as late as the CUDA rules allow;
 *   random:S   at each API call a random number of ready operations of random streams run
 *              (seed S); synchronising calls finish the rest in a random order.
 * Rules applied (CUDA Runtime API v13.0, "API synchronization behavior"): cudaMemcpy from
 * pageable host memory to the device returns once the source is staged (the copy lands later);
 * from pinned memory, and any copy to the host, returns when done; device-to-device returns at
 * once; cudaMemcpyAsync from pageable memory stages the source at the call. The legacy default
 * stream is ordered with blocking streams, never with cudaStreamNonBlocking ones. cudaFree,
 * cudaFreeHost and cudaDeviceSynchronize wait for everything.
 *
 * Memory. cudaMalloc fills new memory with 0xff bytes (NaN in f32, f16, bf16 and f64). Every
 * copy, memset and GEMM operand is range-checked against the allocation it falls in (device
 * side) or must not fall in one (host side); a violation aborts with the call and the numbers.
 * Kernels touch device memory directly, so AddressSanitizer (the emulated build has it) catches
 * their out-of-range accesses.
 *
 * Also: SQ_CUDA_EMU_DEVICES=0 makes cudaGetDeviceCount fail (cudaErrorNoDevice),
 * SQ_CUDA_EMU_MEM_MB sets the device's memory (default 4096). One process, one host thread. */
#include <ucontext.h>
#include <sys/mman.h>
#include <time.h>

#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "cublas_v2.h"
#include "cuda_runtime.h"
#include "runtime/kernels.h"

#if defined(__SANITIZE_ADDRESS__)
#define SQ_EMU_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SQ_EMU_ASAN 1
#endif
#endif
#ifdef SQ_EMU_ASAN
#include <sanitizer/common_interface_defs.h>
#endif

#if defined(__x86_64__) && !defined(SQ_EMU_UCONTEXT)
#define SQ_EMU_ASM 1
/* sq_emu_switch(&save_sp, sp): pushes the callee-saved registers and the SSE/x87 control words
 * (System V AMD64 ABI: rbx, rbp, r12-r15, MXCSR control bits and the x87 control word are
 * preserved across calls), stores rsp in *save_sp, loads sp, and pops the same from there. */
extern "C" void sq_emu_switch(void **save_sp, void *sp);
__asm__(".text\n"
        ".globl sq_emu_switch\n"
        ".type sq_emu_switch,@function\n"
        "sq_emu_switch:\n"
        "    pushq %rbp\n"
        "    pushq %rbx\n"
        "    pushq %r12\n"
        "    pushq %r13\n"
        "    pushq %r14\n"
        "    pushq %r15\n"
        "    subq $8, %rsp\n"
        "    stmxcsr (%rsp)\n"
        "    fnstcw 4(%rsp)\n"
        "    movq %rsp, (%rdi)\n"
        "    movq %rsi, %rsp\n"
        "    ldmxcsr (%rsp)\n"
        "    fldcw 4(%rsp)\n"
        "    addq $8, %rsp\n"
        "    popq %r15\n"
        "    popq %r14\n"
        "    popq %r13\n"
        "    popq %r12\n"
        "    popq %rbx\n"
        "    popq %rbp\n"
        "    ret\n"
        ".size sq_emu_switch, .-sq_emu_switch\n");
#else
#define SQ_EMU_ASM 0
#endif

uint3 sq_emu_threadIdx, sq_emu_blockIdx;
dim3 sq_emu_blockDim, sq_emu_gridDim;

[[noreturn]] static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "cuda-emu: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    abort();
}

/* ---- random numbers, schedule ------------------------------------------------------------------ */

enum { SCHED_EAGER, SCHED_LAZY, SCHED_RANDOM };
static int g_sched = -1;
static uint64_t g_rng = 1;

static uint64_t rnd(void)
{
    uint64_t z = (g_rng += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static void init_sched(void)
{
    if (g_sched >= 0)
        return;
    const char *s = getenv("SQ_CUDA_EMU_SCHEDULE");
    g_sched = SCHED_RANDOM;
    g_rng = 1;
    if (!s || !*s)
        return;
    if (!strcmp(s, "eager"))
        g_sched = SCHED_EAGER;
    else if (!strcmp(s, "lazy"))
        g_sched = SCHED_LAZY;
    else if (!strncmp(s, "random", 6)) {
        g_sched = SCHED_RANDOM;
        if (s[6] == ':')
            g_rng = strtoull(s + 7, NULL, 10);
    } else
        die("SQ_CUDA_EMU_SCHEDULE=%s: eager, lazy or random[:SEED]", s);
}

/* ---- memory registry ----------------------------------------------------------------------------- */

struct alloc_t {
    size_t bytes;
    bool   device;   /* else pinned host */
};
static std::map<uintptr_t, alloc_t> g_allocs;
static size_t g_device_bytes;

static size_t device_total(void)
{
    const char *s = getenv("SQ_CUDA_EMU_MEM_MB");
    return (s ? strtoull(s, NULL, 10) : 4096) << 20;
}

/* The allocation holding p (any kind), or NULL. */
static const std::pair<const uintptr_t, alloc_t> *find_alloc(const void *p)
{
    uintptr_t a = (uintptr_t)p;
    auto it = g_allocs.upper_bound(a);
    if (it == g_allocs.begin())
        return NULL;
    --it;
    if (a >= it->first && a < it->first + (it->second.bytes ? it->second.bytes : 1))
        return &*it;
    return NULL;
}

static bool is_pinned(const void *p)
{
    auto a = find_alloc(p);
    return a && !a->second.device;
}

/* Aborts unless [p, p + bytes) lies inside one device allocation. */
static void check_device_range(const char *call, const char *what, const void *p, size_t bytes)
{
    if (bytes == 0)
        return;
    auto a = find_alloc(p);
    if (!a || !a->second.device)
        die("%s: %s %p (%zu bytes) is not device memory", call, what, p, bytes);
    uintptr_t off = (uintptr_t)p - a->first;
    if (off + bytes > a->second.bytes)
        die("%s: %s: bytes [%zu, %zu) of a %zu-byte device allocation", call, what,
            (size_t)off, (size_t)(off + bytes), a->second.bytes);
}

static void check_host_range(const char *call, const char *what, const void *p, size_t bytes)
{
    if (bytes == 0)
        return;
    if (!p)
        die("%s: %s is NULL", call, what);
    auto a = find_alloc(p);
    if (a && a->second.device)
        die("%s: %s %p is device memory where host memory is expected", call, what, p);
    if (a && (uintptr_t)p - a->first + bytes > a->second.bytes)
        die("%s: %s: %zu bytes past the end of a pinned allocation", call, what, bytes);
}

/* ---- streams and events --------------------------------------------------------------------------- */

struct sq_emu_stream;
struct dep_t {
    sq_emu_stream *s;
    uint64_t       seq;   /* satisfied once s->done >= seq */
};
struct op_t {
    std::string           name;
    std::vector<dep_t>    deps;
    std::function<void()> run;
};
struct sq_emu_stream {
    bool             blocking;
    std::deque<op_t> q;
    uint64_t         enq = 0, done = 0;
    bool             alive = true;
};
struct sq_emu_event {
    unsigned       flags;
    sq_emu_stream *s = NULL;
    uint64_t       seq = 0;
    double         t = -1.0;   /* seconds, when the record ran */
    uint64_t       rec_id = 0;  /* which record the time belongs to */
    uint64_t       want_id = 0;
};

static sq_emu_stream g_legacy = {true, {}, 0, 0, true};
static std::vector<sq_emu_stream *> g_streams = {&g_legacy};
static cudaError_t g_last_error = cudaSuccess;

static sq_emu_stream *S(cudaStream_t s)
{
    sq_emu_stream *r = s ? (sq_emu_stream *)s : &g_legacy;
    if (!r->alive)
        die("use of a destroyed stream");
    return r;
}

static bool ready(const op_t &op)
{
    for (const dep_t &d : op.deps)
        if (d.s->done < d.seq)
            return false;
    return true;
}

static void run_head(sq_emu_stream *s)
{
    op_t op = std::move(s->q.front());
    s->q.pop_front();
    op.run();
    s->done++;
}

/* Runs ops until stream s has done `seq` ops; under the lazy schedule only what that needs. */
static void complete(sq_emu_stream *s, uint64_t seq)
{
    while (s->done < seq) {
        op_t &h = s->q.front();
        bool blocked = false;
        for (const dep_t &d : h.deps)
            if (d.s->done < d.seq) {
                complete(d.s, d.seq);
                blocked = true;
                break;
            }
        if (blocked)
            continue;
        if (g_sched == SCHED_RANDOM) {
            /* sometimes run another stream's ready op first */
            for (int tries = 0; tries < 2 && (rnd() & 1); tries++) {
                sq_emu_stream *o = g_streams[rnd() % g_streams.size()];
                if (o != s && !o->q.empty() && ready(o->q.front()))
                    run_head(o);
            }
        }
        run_head(s);
    }
}

static void complete_all(void)
{
    for (;;) {
        std::vector<sq_emu_stream *> pending;
        for (sq_emu_stream *s : g_streams)
            if (!s->q.empty())
                pending.push_back(s);
        if (pending.empty())
            return;
        sq_emu_stream *s = pending[g_sched == SCHED_RANDOM ? rnd() % pending.size() : 0];
        complete(s, s->enq);
    }
}

/* After an op is queued, what the schedule runs right away. */
static void progress(void)
{
    if (g_sched == SCHED_EAGER) {
        bool any = true;
        while (any) {
            any = false;
            for (sq_emu_stream *s : g_streams)
                while (!s->q.empty() && ready(s->q.front())) {
                    run_head(s);
                    any = true;
                }
        }
    } else if (g_sched == SCHED_RANDOM) {
        int n = (int)(rnd() % 4);
        for (int i = 0; i < n; i++) {
            std::vector<sq_emu_stream *> r;
            for (sq_emu_stream *s : g_streams)
                if (!s->q.empty() && ready(s->q.front()))
                    r.push_back(s);
            if (r.empty())
                break;
            run_head(r[rnd() % r.size()]);
        }
    }
}

/* Queues op on stream s with the legacy stream's implicit ordering. */
static void enqueue(sq_emu_stream *s, op_t op)
{
    init_sched();
    if (s == &g_legacy) {
        for (sq_emu_stream *o : g_streams)
            if (o != s && o->blocking && o->enq > 0)
                op.deps.push_back({o, o->enq});
    } else if (s->blocking && g_legacy.enq > 0) {
        op.deps.push_back({&g_legacy, g_legacy.enq});
    }
    s->q.push_back(std::move(op));
    s->enq++;
    progress();
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---- the runtime API ------------------------------------------------------------------------------- */

static int device_count(void)
{
    const char *s = getenv("SQ_CUDA_EMU_DEVICES");
    return s ? atoi(s) : 1;
}

cudaError_t cudaGetDeviceCount(int *count)
{
    *count = device_count();
    if (*count < 1) {
        *count = 0;
        return cudaErrorNoDevice;
    }
    return cudaSuccess;
}

cudaError_t cudaSetDevice(int device)
{
    return device >= 0 && device < device_count() ? cudaSuccess : cudaErrorInvalidDevice;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp *prop, int device)
{
    if (device < 0 || device >= device_count())
        return cudaErrorInvalidDevice;
    memset(prop, 0, sizeof *prop);
    snprintf(prop->name, sizeof prop->name, "CUDA emulator (tests/cuda-emu)");
    prop->totalGlobalMem = device_total();
    prop->major = 9;
    prop->minor = 0;
    prop->multiProcessorCount = 4;
    prop->maxThreadsPerBlock = 1024;
    prop->sharedMemPerBlock = 48 << 10;
    return cudaSuccess;
}

cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total_bytes)
{
    *total_bytes = device_total();
    *free_bytes = g_device_bytes < *total_bytes ? *total_bytes - g_device_bytes : 0;
    return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize(void)
{
    init_sched();
    complete_all();
    return cudaSuccess;
}

cudaError_t cudaGetLastError(void)
{
    cudaError_t e = g_last_error;
    g_last_error = cudaSuccess;
    return e;
}

cudaError_t cudaPeekAtLastError(void)
{
    return g_last_error;
}

const char *cudaGetErrorString(cudaError_t e)
{
    switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInvalidMemcpyDirection: return "invalid copy direction for memcpy";
    case cudaErrorInsufficientDriver: return "CUDA driver version is insufficient";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorIllegalAddress: return "an illegal memory access was encountered";
    }
    return "unknown error";
}

static void *host_alloc(size_t bytes, bool device)
{
    void *p = malloc(bytes ? bytes : 1);
    if (!p)
        return NULL;
    if (device)
        memset(p, 0xff, bytes);   /* NaN in every float type */
    g_allocs[(uintptr_t)p] = {bytes, device};
    return p;
}

cudaError_t cudaMalloc(void **p, size_t bytes)
{
    *p = NULL;
    if (g_device_bytes + bytes > device_total())
        return cudaErrorMemoryAllocation;
    *p = host_alloc(bytes, true);
    if (!*p)
        return cudaErrorMemoryAllocation;
    g_device_bytes += bytes;
    return cudaSuccess;
}

static cudaError_t free_kind(void *p, bool device, const char *call)
{
    if (!p)
        return cudaSuccess;
    init_sched();
    complete_all();   /* cudaFree and cudaFreeHost synchronise the device */
    auto it = g_allocs.find((uintptr_t)p);
    if (it == g_allocs.end() || it->second.device != device)
        die("%s(%p): not the start of a %s allocation", call, p, device ? "device" : "pinned");
    if (device)
        g_device_bytes -= it->second.bytes;
    g_allocs.erase(it);
    free(p);
    return cudaSuccess;
}

cudaError_t cudaFree(void *p)
{
    return free_kind(p, true, "cudaFree");
}

cudaError_t cudaMallocHost(void **p, size_t bytes)
{
    *p = host_alloc(bytes, false);
    return *p ? cudaSuccess : cudaErrorMemoryAllocation;
}

cudaError_t cudaHostAlloc(void **p, size_t bytes, unsigned flags)
{
    (void)flags;
    return cudaMallocHost(p, bytes);
}

cudaError_t cudaFreeHost(void *p)
{
    return free_kind(p, false, "cudaFreeHost");
}

/* Queues a copy on s. Pageable host sources are staged now; everything else is read when the
 * copy runs. Returns the stream's sequence number once it has run. */
static uint64_t queue_copy(const char *call, void *dst, const void *src, size_t bytes,
                           cudaMemcpyKind kind, sq_emu_stream *s)
{
    bool dd = kind == cudaMemcpyDeviceToDevice || kind == cudaMemcpyDeviceToHost;
    bool hd = kind == cudaMemcpyDeviceToDevice || kind == cudaMemcpyHostToDevice;
    if (kind == cudaMemcpyHostToHost || kind == cudaMemcpyDefault)
        die("%s: copy kind %d is not used by the project", call, (int)kind);
    if (dd)
        check_device_range(call, "source", src, bytes);
    else
        check_host_range(call, "source", src, bytes);
    if (hd)
        check_device_range(call, "destination", dst, bytes);
    else
        check_host_range(call, "destination", dst, bytes);
    op_t op;
    op.name = call;
    if (kind == cudaMemcpyHostToDevice && !is_pinned(src)) {
        std::shared_ptr<std::vector<uint8_t>> staged =
            std::make_shared<std::vector<uint8_t>>((const uint8_t *)src,
                                                   (const uint8_t *)src + bytes);
        op.run = [dst, staged]() { memcpy(dst, staged->data(), staged->size()); };
    } else {
        op.run = [dst, src, bytes]() { memmove(dst, src, bytes); };
    }
    enqueue(s, std::move(op));
    return s->enq;
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind)
{
    if (bytes == 0)
        return cudaSuccess;
    sq_emu_stream *s = &g_legacy;
    if (kind == cudaMemcpyHostToDevice && is_pinned(src)) {
        complete(s, s->enq);   /* pinned: synchronous with respect to the host */
        complete(s, queue_copy("cudaMemcpy", dst, src, bytes, kind, s));
    } else if (kind == cudaMemcpyHostToDevice) {
        complete(s, s->enq);   /* pageable: a stream sync, then staged; lands later */
        queue_copy("cudaMemcpy", dst, src, bytes, kind, s);
    } else if (kind == cudaMemcpyDeviceToHost) {
        complete(s, queue_copy("cudaMemcpy", dst, src, bytes, kind, s));
    } else {
        queue_copy("cudaMemcpy", dst, src, bytes, kind, s);   /* device to device: no sync */
    }
    return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t stream)
{
    if (bytes == 0)
        return cudaSuccess;
    queue_copy("cudaMemcpyAsync", dst, src, bytes, kind, S(stream));
    return cudaSuccess;
}

cudaError_t cudaMemsetAsync(void *p, int value, size_t bytes, cudaStream_t stream)
{
    check_device_range("cudaMemset", "destination", p, bytes);
    op_t op;
    op.name = "cudaMemset";
    op.run = [p, value, bytes]() { memset(p, value, bytes); };
    enqueue(S(stream), std::move(op));
    return cudaSuccess;
}

cudaError_t cudaMemset(void *p, int value, size_t bytes)
{
    return cudaMemsetAsync(p, value, bytes, 0);
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags)
{
    sq_emu_stream *n = new sq_emu_stream();
    n->blocking = !(flags & cudaStreamNonBlocking);
    g_streams.push_back(n);
    *s = n;
    return cudaSuccess;
}

cudaError_t cudaStreamCreate(cudaStream_t *s)
{
    return cudaStreamCreateWithFlags(s, cudaStreamDefault);
}

cudaError_t cudaStreamDestroy(cudaStream_t s)
{
    if (!s)
        return cudaErrorInvalidResourceHandle;
    sq_emu_stream *x = S(s);
    complete(x, x->enq);   /* queued work still completes */
    x->alive = false;      /* kept allocated: events may still point at it */
    g_streams.erase(std::find(g_streams.begin(), g_streams.end(), x));
    return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t s)
{
    init_sched();
    sq_emu_stream *x = S(s);
    complete(x, x->enq);
    return cudaSuccess;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned flags)
{
    sq_emu_event *n = new sq_emu_event();
    n->flags = flags;
    *e = n;
    return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t *e)
{
    return cudaEventCreateWithFlags(e, cudaEventDefault);
}

cudaError_t cudaEventDestroy(cudaEvent_t e)
{
    if (!e)
        return cudaErrorInvalidResourceHandle;
    /* the record may still be queued: let it run against a live object */
    if (e->s && e->s->done < e->seq)
        complete(e->s, e->seq);
    delete e;
    return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t stream)
{
    sq_emu_stream *s = S(stream);
    op_t op;
    op.name = "cudaEventRecord";
    uint64_t id = ++e->want_id;
    op.run = [e, id]() {
        e->t = now_s();
        e->rec_id = id;
    };
    e->s = s;
    enqueue(s, std::move(op));
    e->seq = s->enq;
    return cudaSuccess;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t e, unsigned flags)
{
    (void)flags;
    op_t op;
    op.name = "cudaStreamWaitEvent";
    if (e->s)   /* waits for the most recent record; none: nothing to wait for */
        op.deps.push_back({e->s, e->seq});
    op.run = []() {};
    enqueue(S(stream), std::move(op));
    return cudaSuccess;
}

cudaError_t cudaEventSynchronize(cudaEvent_t e)
{
    init_sched();
    if (e->s)
        complete(e->s, e->seq);
    return cudaSuccess;
}

cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b)
{
    if ((a->flags | b->flags) & cudaEventDisableTiming)
        return cudaErrorInvalidResourceHandle;
    if (!a->s || !b->s || a->rec_id != a->want_id || b->rec_id != b->want_id)
        return cudaErrorNotReady;
    *ms = (float)((b->t - a->t) * 1e3);
    return cudaSuccess;
}

/* ---- fibers ----------------------------------------------------------------------------------------- */

enum { F_RUN, F_BLOCK_BARRIER, F_WARP_BARRIER, F_EXITED };
struct fiber_t {
#if SQ_EMU_ASM
    void      *sp;
#else
    ucontext_t ctx;
#endif
    void      *stack;
    int        state;
    unsigned   tid, lane, warp;
    uint3      idx;
    unsigned   wmask;
    void      *fake = NULL;   /* ASan fake stack of this fiber */
};

#define STACK_BYTES (128u << 10)
static std::vector<fiber_t *> g_fibers;
static fiber_t *g_cur;
#if SQ_EMU_ASM
static void *g_sched_sp;
#else
static ucontext_t g_sched_ctx;
#endif
static std::function<void()> *g_body;
static const char *g_kernel;
static unsigned long long g_warp_buf[32][32];
static const void *g_sched_stack_bottom;
static size_t g_sched_stack_size;

static void to_scheduler(void)
{
    fiber_t *f = g_cur;
#ifdef SQ_EMU_ASAN
    __sanitizer_start_switch_fiber(&f->fake, g_sched_stack_bottom, g_sched_stack_size);
#endif
#if SQ_EMU_ASM
    sq_emu_switch(&f->sp, g_sched_sp);
#else
    swapcontext(&f->ctx, &g_sched_ctx);
#endif
#ifdef SQ_EMU_ASAN
    __sanitizer_finish_switch_fiber(f->fake, &g_sched_stack_bottom, &g_sched_stack_size);
#endif
}

static void fiber_main(int i)
{
#ifdef SQ_EMU_ASAN
    __sanitizer_finish_switch_fiber(NULL, &g_sched_stack_bottom, &g_sched_stack_size);
#endif
    (void)i;
    for (;;) {
        (*g_body)();
        g_cur->state = F_EXITED;
        to_scheduler();
    }
}

#if SQ_EMU_ASM
static void fiber_entry(void)
{
    fiber_main(0);
}
#endif

static fiber_t *fiber(unsigned i)
{
    while (g_fibers.size() <= i) {
        fiber_t *f = new fiber_t();
        f->stack = mmap(NULL, STACK_BYTES, PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (f->stack == MAP_FAILED)
            die("no memory for fiber stacks");
#if SQ_EMU_ASM
        /* a frame that sq_emu_switch "returns" from into fiber_entry: the saved control words
         * (MXCSR 0x1f80, x87 0x037f), six callee-saved registers, the return address, with
         * rsp = 8 mod 16 at entry as after a call */
        uint64_t *top = (uint64_t *)((char *)f->stack + STACK_BYTES) - 2;
        top[0] = (uint64_t)(uintptr_t)fiber_entry;
        uint64_t *sp = top - 7;
        memset(sp, 0, 7 * sizeof *sp);
        sp[0] = 0x1f80ull | (0x037full << 32);
        f->sp = sp;
#else
        getcontext(&f->ctx);
        f->ctx.uc_stack.ss_sp = f->stack;
        f->ctx.uc_stack.ss_size = STACK_BYTES;
        f->ctx.uc_link = NULL;
        makecontext(&f->ctx, (void (*)(void))fiber_main, 1, (int)g_fibers.size());
#endif
        g_fibers.push_back(f);
    }
    return g_fibers[i];
}

static void switch_to(fiber_t *f)
{
    g_cur = f;
    sq_emu_threadIdx = f->idx;
    void *fake = NULL;
    (void)fake;
#ifdef SQ_EMU_ASAN
    __sanitizer_start_switch_fiber(&fake, f->stack, STACK_BYTES);
#endif
#if SQ_EMU_ASM
    sq_emu_switch(&g_sched_sp, f->sp);
#else
    swapcontext(&g_sched_ctx, &f->ctx);
#endif
#ifdef SQ_EMU_ASAN
    __sanitizer_finish_switch_fiber(fake, NULL, NULL);
#endif
    g_cur = NULL;
}

void __syncthreads(void)
{
    if (!g_cur)
        die("__syncthreads outside a kernel");
    g_cur->state = F_BLOCK_BARRIER;
    to_scheduler();
}

unsigned sq_emu_lane(void)
{
    if (!g_cur)
        die("a warp function outside a kernel");
    return g_cur->lane;
}

static void warp_barrier(unsigned mask)
{
    g_cur->state = F_WARP_BARRIER;
    g_cur->wmask = mask;
    to_scheduler();
}

void __syncwarp(unsigned mask)
{
    fiber_t *f = g_cur;
    if (!f)
        die("__syncwarp outside a kernel");
    if (!(mask >> f->lane & 1u))
        die("%s: lane %u of warp %u calls __syncwarp with a mask 0x%08x that leaves it out",
            g_kernel, f->lane, f->warp, mask);
    warp_barrier(mask);
}

unsigned long long sq_emu_shfl_bits(unsigned mask, unsigned long long bits, int src)
{
    fiber_t *f = g_cur;
    if (!f)
        die("a warp shuffle outside a kernel");
    if (!(mask >> f->lane & 1u))
        die("%s: lane %u of warp %u shuffles with a mask 0x%08x that leaves it out", g_kernel,
            f->lane, f->warp, mask);
    g_warp_buf[f->warp][f->lane] = bits;
    warp_barrier(mask);
    unsigned long long r = bits;
    if (src >= 0 && src < 32 && (mask >> src & 1u))
        r = g_warp_buf[f->warp][src];
    warp_barrier(mask);
    return r;
}

/* Runs one block: every thread's fiber until all have returned. */
static void run_block(unsigned nthreads)
{
    std::vector<fiber_t *> all(nthreads), runnable;
    for (unsigned t = 0; t < nthreads; t++) {
        fiber_t *f = fiber(t);
        f->tid = t;
        f->lane = t % 32;
        f->warp = t / 32;
        f->idx.x = t % sq_emu_blockDim.x;
        f->idx.y = t / sq_emu_blockDim.x % sq_emu_blockDim.y;
        f->idx.z = t / (sq_emu_blockDim.x * sq_emu_blockDim.y);
        f->state = F_RUN;
        all[t] = f;
    }
    runnable = all;
    const unsigned nwarps = (nthreads + 31) / 32;
    for (;;) {
        for (size_t i = runnable.size(); i > 1; i--)   /* random order */
            std::swap(runnable[i - 1], runnable[rnd() % i]);
        for (fiber_t *f : runnable)
            switch_to(f);
        runnable.clear();
        unsigned exited = 0, at_block = 0, at_warp = 0;
        for (fiber_t *f : all) {
            exited += f->state == F_EXITED;
            at_block += f->state == F_BLOCK_BARRIER;
            at_warp += f->state == F_WARP_BARRIER;
        }
        if (exited == nthreads)
            return;
        /* warps whose every masked lane waits at a shuffle with the same mask */
        for (unsigned w = 0; w < nwarps; w++) {
            unsigned mask = 0;
            bool any = false, ok = true;
            for (unsigned l = 0; l < 32 && w * 32 + l < nthreads; l++) {
                fiber_t *f = all[w * 32 + l];
                if (f->state == F_WARP_BARRIER) {
                    if (any && f->wmask != mask)
                        ok = false;
                    mask = f->wmask;
                    any = true;
                }
            }
            if (!any || !ok)
                continue;
            bool full = true;
            for (unsigned l = 0; l < 32; l++)
                if (mask >> l & 1u) {
                    unsigned t = w * 32 + l;
                    if (t >= nthreads || all[t]->state != F_WARP_BARRIER)
                        full = false;
                }
            if (full)
                for (unsigned l = 0; l < 32; l++)
                    if (mask >> l & 1u) {
                        all[w * 32 + l]->state = F_RUN;
                        runnable.push_back(all[w * 32 + l]);
                    }
        }
        if (!runnable.empty())
            continue;
        if (at_warp)
            die("%s: block (%u,%u,%u): a warp shuffle waits for lanes that have returned, wait "
                "at __syncthreads or are missing (%u threads in the block)", g_kernel,
                sq_emu_blockIdx.x, sq_emu_blockIdx.y, sq_emu_blockIdx.z, nthreads);
        if (exited)
            die("%s: block (%u,%u,%u): __syncthreads reached by %u threads while %u have "
                "returned (a divergent barrier)", g_kernel, sq_emu_blockIdx.x, sq_emu_blockIdx.y,
                sq_emu_blockIdx.z, at_block, exited);
        for (fiber_t *f : all) {
            f->state = F_RUN;
            runnable.push_back(f);
        }
    }
}

static void run_kernel(const sq_emu_cfg &cfg, const char *name, std::function<void()> &body)
{
    sq_emu_gridDim = cfg.grid;
    sq_emu_blockDim = cfg.block;
    const unsigned nthreads = cfg.block.x * cfg.block.y * cfg.block.z;
    const uint64_t nblocks = (uint64_t)cfg.grid.x * cfg.grid.y * cfg.grid.z;
    std::vector<uint64_t> order(nblocks);
    for (uint64_t b = 0; b < nblocks; b++)
        order[b] = b;
    for (uint64_t i = nblocks; i > 1; i--)
        std::swap(order[i - 1], order[rnd() % i]);
    std::function<void()> *saved_body = g_body;
    const char *saved_name = g_kernel;
    g_body = &body;
    g_kernel = name;
    for (uint64_t b : order) {
        sq_emu_blockIdx.x = (unsigned)(b % cfg.grid.x);
        sq_emu_blockIdx.y = (unsigned)(b / cfg.grid.x % cfg.grid.y);
        sq_emu_blockIdx.z = (unsigned)(b / ((uint64_t)cfg.grid.x * cfg.grid.y));
        run_block(nthreads);
    }
    g_body = saved_body;
    g_kernel = saved_name;
}

void sq_emu_launch_body(const sq_emu_cfg &cfg, const char *name, std::function<void()> body)
{
    init_sched();
    if (g_cur)
        die("%s launched from device code", name);
    const uint64_t threads = (uint64_t)cfg.block.x * cfg.block.y * cfg.block.z;
    if (cfg.grid.x < 1 || cfg.grid.y < 1 || cfg.grid.z < 1 || cfg.grid.x > 0x7fffffffu ||
        cfg.grid.y > 65535 || cfg.grid.z > 65535 || threads < 1 || threads > 1024 ||
        cfg.block.z > 64 || cfg.shmem > (48u << 10)) {
        fprintf(stderr, "cuda-emu: %s: invalid launch configuration grid (%u,%u,%u) block "
                "(%u,%u,%u) shared %zu\n", name, cfg.grid.x, cfg.grid.y, cfg.grid.z, cfg.block.x,
                cfg.block.y, cfg.block.z, cfg.shmem);
        g_last_error = cudaErrorInvalidConfiguration;
        return;
    }
    sq_emu_cfg c = cfg;
    op_t op;
    op.name = name;
    op.run = [c, name, body]() mutable { run_kernel(c, name, body); };
    enqueue(S(cfg.stream), std::move(op));
}

/* ---- cuBLAS ------------------------------------------------------------------------------------------ */

struct sq_emu_blas {
    cudaStream_t stream = 0;
};

cublasStatus_t cublasCreate(cublasHandle_t *h)
{
    if (device_count() < 1)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    *h = new sq_emu_blas();
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasDestroy(cublasHandle_t h)
{
    if (!h)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    cudaStreamSynchronize(h->stream);
    delete h;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetStream(cublasHandle_t h, cudaStream_t s)
{
    if (!h)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    h->stream = s;
    return CUBLAS_STATUS_SUCCESS;
}

const char *cublasGetStatusString(cublasStatus_t s)
{
    switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    }
    return "unknown cuBLAS status";
}

static size_t type_bytes(cudaDataType_t t)
{
    switch (t) {
    case CUDA_R_16F: case CUDA_R_16BF: return 2;
    case CUDA_R_32F: return 4;
    case CUDA_R_64F: return 8;
    }
    return 0;
}

static float load(const void *p, cudaDataType_t t, size_t i)
{
    switch (t) {
    case CUDA_R_16F: return sq_f16_to_f32(((const uint16_t *)p)[i]);
    case CUDA_R_16BF: return sq_bf16_to_f32(((const uint16_t *)p)[i]);
    case CUDA_R_32F: return ((const float *)p)[i];
    default: return (float)((const double *)p)[i];
    }
}

static void store(void *p, cudaDataType_t t, size_t i, float v)
{
    switch (t) {
    case CUDA_R_16F: ((uint16_t *)p)[i] = sq_f32_to_f16(v); break;
    case CUDA_R_16BF: ((uint16_t *)p)[i] = sq_f32_to_bf16(v); break;
    case CUDA_R_32F: ((float *)p)[i] = v; break;
    default: ((double *)p)[i] = v; break;
    }
}

cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,
                            int n, int k, const void *alpha, const void *A, cudaDataType_t at,
                            int lda, const void *B, cudaDataType_t bt, int ldb, const void *beta,
                            void *C, cudaDataType_t ct, int ldc, cublasComputeType_t comp,
                            cublasGemmAlgo_t algo)
{
    (void)algo;
    if (!h)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    if ((ta != CUBLAS_OP_N && ta != CUBLAS_OP_T) || (tb != CUBLAS_OP_N && tb != CUBLAS_OP_T))
        return CUBLAS_STATUS_INVALID_VALUE;
    const int arows = ta == CUBLAS_OP_N ? m : k, acols = ta == CUBLAS_OP_N ? k : m;
    const int brows = tb == CUBLAS_OP_N ? k : n, bcols = tb == CUBLAS_OP_N ? n : k;
    if (m < 0 || n < 0 || k < 0 || lda < std::max(1, arows) || ldb < std::max(1, brows) ||
        ldc < std::max(1, m) || !alpha || !beta)
        return CUBLAS_STATUS_INVALID_VALUE;
    /* CUBLAS_COMPUTE_32F: A and B both 16F, both 16BF (C the same or 32F) or all 32F */
    bool ok = comp == CUBLAS_COMPUTE_32F && at == bt &&
              (((at == CUDA_R_16F || at == CUDA_R_16BF) && (ct == at || ct == CUDA_R_32F)) ||
               (at == CUDA_R_32F && ct == CUDA_R_32F));
    if (!ok)
        return CUBLAS_STATUS_NOT_SUPPORTED;
    if (m == 0 || n == 0)
        return CUBLAS_STATUS_SUCCESS;
    const float al = *(const float *)alpha, be = *(const float *)beta;
    /* the extent of each operand: (cols - 1) * ld + rows elements */
    if (k > 0) {
        check_device_range("cublasGemmEx", "A", A, ((size_t)(acols - 1) * lda + arows) *
                           type_bytes(at));
        check_device_range("cublasGemmEx", "B", B, ((size_t)(bcols - 1) * ldb + brows) *
                           type_bytes(bt));
    }
    check_device_range("cublasGemmEx", "C", C, ((size_t)(n - 1) * ldc + m) * type_bytes(ct));
    op_t op;
    op.name = "cublasGemmEx";
    op.run = [=]() {
        for (int j = 0; j < n; j++)
            for (int i = 0; i < m; i++) {
                double acc = 0.0;
                for (int p = 0; p < k; p++) {
                    size_t ai = ta == CUBLAS_OP_N ? (size_t)p * lda + i : (size_t)i * lda + p;
                    size_t bi = tb == CUBLAS_OP_N ? (size_t)j * ldb + p : (size_t)p * ldb + j;
                    acc += (double)load(A, at, ai) * (double)load(B, bt, bi);
                }
                size_t ci = (size_t)j * ldc + i;
                double v = al * acc;
                if (be != 0.0f)   /* beta == 0: C is not read */
                    v += (double)be * load(C, ct, ci);
                store(C, ct, ci, (float)v);
            }
    };
    enqueue(S(h->stream), std::move(op));
    return CUBLAS_STATUS_SUCCESS;
}
