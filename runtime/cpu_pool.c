/* The worker pool of runtime/cpu_pool.h. */
#define _GNU_SOURCE
#include <sched.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "runtime/cpu_pool.h"

/* Pause iterations a waiting thread spins before it yields: at 40-150 cycles a pause, tens of
 * microseconds, about the gap between two dispatches of one forward. */
#define POOL_SPIN 2048
/* Seconds a waiting thread then calls sched_yield before it sleeps: on a quiet machine a yield
 * returns at once (this is spinning), on a busy one it hands the core to whoever waits for it.
 * Longer than the gaps between the forwards of a decoding step (the draft's levels, then the
 * target's verify), shorter than a pause between requests. */
#define POOL_YIELD_S 4e-3
/* A loss: the waits for parts workers had started (a worker preempted inside one) have cost
 * more than this beyond what the workers' parts saved since the last miss. */
#define POOL_LOSS_S 1e-3
/* What a period may bank against later waits: a few of them, so that when other processes
 * start to take the cores, a long good period does not hide the losses for long. */
#define POOL_CREDIT_S 5e-3
/* An absence: no worker came for a dispatch within this long of being asked. A worker on a
 * free core comes at once when it is awake (spinning or yielding: under a microsecond) and in
 * tens of microseconds when it slept and had to be woken; one that waits for its core behind
 * another process comes after up to a time slice (milliseconds). Judged in time, once per
 * wait, never in dispatches: a short dispatch is over before any wake-up. */
#define POOL_ABSENT_AWAKE_S 50e-6
#define POOL_ABSENT_ASLEEP_S 1e-3
/* The solo stretches (seconds of dispatches run on the caller alone after a miss). */
#define POOL_SOLO_MIN_S 1e-3
#define POOL_SOLO_MAX_S SQ_POOL_SOLO_MAX_S

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static inline uint32_t gen_of(uint64_t c)
{
    return (uint32_t)(c >> 32);
}

/* Runs parts of dispatch `gen` until none is left to claim; returns how many it ran. Each
 * part is timed: the shortest wall time of a part in a dispatch is what a part costs, even when
 * another process took a core during some of them. The caller keeps its own shortest in
 * *fastest; a worker lowers p->part_ns before the part counts as done. */
static int run_parts(sq_pool *p, uint32_t gen, int64_t *fastest)
{
    int ran = 0;
    int64_t t = now_ns();
    uint64_t c = atomic_load_explicit(&p->claim, memory_order_acquire);
    for (;;) {
        if (gen_of(c) != gen)
            break;
        const unsigned parts = (unsigned)(c >> 16) & 0xffffu, next = (unsigned)c & 0xffffu;
        if (next >= parts)
            break;
        if (!atomic_compare_exchange_weak_explicit(&p->claim, &c, c + 1, memory_order_acq_rel,
                                                   memory_order_acquire))
            continue;
        /* the dispatch cannot end before this part does: fn and arg are its own */
        p->fn(p->arg, (int)next, (int)parts);
        ran++;
        const int64_t t1 = now_ns(), d = t1 - t;
        t = t1;
        if (fastest) {
            if (d < *fastest)
                *fastest = d;
        } else {
            int64_t m = atomic_load_explicit(&p->part_ns, memory_order_relaxed);
            while (d < m && !atomic_compare_exchange_weak_explicit(&p->part_ns, &m, d,
                                                                   memory_order_relaxed,
                                                                   memory_order_relaxed))
                ;
        }
        if (atomic_fetch_sub_explicit(&p->left, 1, memory_order_acq_rel) == 1) {
            pthread_mutex_lock(&p->mu);
            pthread_cond_signal(&p->done);
            pthread_mutex_unlock(&p->mu);
        }
        c = atomic_load_explicit(&p->claim, memory_order_acquire);
    }
    return ran;
}

/* A worker's wait for a generation other than `seen` (or stop): spin, yield, then sleep. */
static uint32_t wait_dispatch(sq_pool *p, uint32_t seen)
{
    for (int i = 0; i < POOL_SPIN; i++) {
        uint32_t g = gen_of(atomic_load_explicit(&p->claim, memory_order_acquire));
        if (g != seen || atomic_load_explicit(&p->stop, memory_order_relaxed))
            return g;
        cpu_relax();
    }
    /* the clock read at every yield: on a busy core one yield can last a time slice */
    for (const double t0 = now_s(); now_s() - t0 < POOL_YIELD_S;) {
        uint32_t g = gen_of(atomic_load_explicit(&p->claim, memory_order_acquire));
        if (g != seen || atomic_load_explicit(&p->stop, memory_order_relaxed))
            return g;
        sched_yield();
    }
    pthread_mutex_lock(&p->mu);
    atomic_fetch_add(&p->sleeping, 1);
    uint32_t g;
    while ((g = gen_of(atomic_load(&p->claim))) == seen && !atomic_load(&p->stop))
        pthread_cond_wait(&p->go, &p->mu);
    atomic_fetch_sub(&p->sleeping, 1);
    pthread_mutex_unlock(&p->mu);
    return g;
}

/* The test delay: sleeps `us` in short slices, ended early when the delay is turned off or
 * the pool stops. */
static void test_delay(sq_pool *p, int us)
{
    for (int slept = 0; slept < us; slept += 1000) {
        if (atomic_load_explicit(&p->delay_us, memory_order_relaxed) == 0 ||
            atomic_load_explicit(&p->stop, memory_order_relaxed))
            return;
        usleep((useconds_t)(us - slept < 1000 ? us - slept : 1000));
    }
}

/* A worker has come for generation g: `seen` only moves forward (another worker may have come
 * for a later one already). */
static void arrived(sq_pool *p, uint32_t g)
{
    atomic_store_explicit(&p->seen_ns, now_ns(), memory_order_relaxed);
    uint32_t s = atomic_load_explicit(&p->seen, memory_order_relaxed);
    while ((int32_t)(g - s) > 0 &&
           !atomic_compare_exchange_weak_explicit(&p->seen, &s, g, memory_order_release,
                                                  memory_order_relaxed))
        ;
}

static void *pool_main(void *arg)
{
    sq_pool_worker *w = arg;
    sq_pool *p = w->p;
    uint32_t seen = 0;
    for (;;) {
        uint32_t g = wait_dispatch(p, seen);
        if (atomic_load(&p->stop))
            return NULL;
        seen = g;
        int delay = atomic_load_explicit(&p->delay_us, memory_order_relaxed);
        if (delay > 0)
            test_delay(p, delay);
        arrived(p, g);
        run_parts(p, g, NULL);
    }
}

/* The caller's wait for the parts other threads started: spin, yield, then sleep. */
static void wait_done(sq_pool *p)
{
    for (int i = 0; i < POOL_SPIN; i++) {
        if (atomic_load_explicit(&p->left, memory_order_acquire) == 0)
            return;
        cpu_relax();
    }
    for (const double t0 = now_s(); now_s() - t0 < POOL_YIELD_S;) {
        if (atomic_load_explicit(&p->left, memory_order_acquire) == 0)
            return;
        sched_yield();
    }
    pthread_mutex_lock(&p->mu);
    while (atomic_load(&p->left) > 0)
        pthread_cond_wait(&p->done, &p->mu);
    pthread_mutex_unlock(&p->mu);
}

/* The end of a parallel period (a miss): the period's ledger sets the next solo stretch. One
 * that lost time (the waits cost more than the workers' parts saved) doubles it, up to
 * POOL_SOLO_MAX_S; one that gained halves it, down to POOL_SOLO_MIN_S; one in which the
 * workers did nothing (absent all along) leaves it. */
static void miss(sq_pool *p, double now)
{
    p->misses++;
    if (p->ledger < 0)
        p->backoff = p->backoff * 2 > POOL_SOLO_MAX_S ? POOL_SOLO_MAX_S : p->backoff * 2;
    else if (p->ledger > 0)
        p->backoff = p->backoff / 2 < POOL_SOLO_MIN_S ? POOL_SOLO_MIN_S : p->backoff / 2;
    p->ledger = 0;
    p->solo_until = now + p->backoff;
    p->solo_s += p->backoff;
}

void sq_pool_run_parts(sq_pool *p, sq_pool_fn fn, void *arg, int parts)
{
    if (parts < 1)
        return;
    if (p->started == 0 || parts == 1 || parts > 0xffff) {
        for (int k = 0; k < parts; k++)
            fn(arg, k, parts);
        return;
    }
    pthread_mutex_lock(&p->run_mu);
    p->dispatches++;
    const double t0 = now_s();
    if (t0 < p->solo_until) {   /* after a miss: the caller alone, nobody woken */
        p->solo_runs++;
        for (int k = 0; k < parts; k++)
            fn(arg, k, parts);
        pthread_mutex_unlock(&p->run_mu);
        return;
    }
    p->fn = fn;
    p->arg = arg;
    atomic_store_explicit(&p->left, parts, memory_order_relaxed);
    atomic_store_explicit(&p->part_ns, INT64_MAX, memory_order_relaxed);
    const uint32_t gen = gen_of(atomic_load(&p->claim)) + 1;
    /* sequentially consistent, like the sleepers' count below and in wait_dispatch: a worker
     * either sees the new generation before it sleeps or is counted and woken */
    atomic_store(&p->claim, (uint64_t)gen << 32 | (uint64_t)parts << 16);
    const int sleepers = atomic_load(&p->sleeping);
    if (!p->asking) {   /* the workers are asked from now on */
        p->asking = 1;
        p->absent_counted = 0;
        p->ask_gen = gen;
        p->ask_t = t0;
        p->ask_limit = sleepers >= p->started ? POOL_ABSENT_ASLEEP_S : POOL_ABSENT_AWAKE_S;
    }
    if (sleepers > 0) {
        pthread_mutex_lock(&p->mu);
        pthread_cond_broadcast(&p->go);
        pthread_mutex_unlock(&p->mu);
    }
    int64_t fastest = INT64_MAX;
    const int mine = run_parts(p, gen, &fastest);
    const double t1 = now_s();
    double waited = 0;
    if (atomic_load_explicit(&p->left, memory_order_acquire) > 0) {
        wait_done(p);
        waited = now_s() - t1;
        p->waited_s += waited;
    }
    const double end = t1 + waited;
    /* the ledger: the workers' parts, at the cost of the fastest part of the dispatch (what
     * the caller would have spent on them), minus the wait for them */
    if (mine < parts) {
        const int64_t w = atomic_load_explicit(&p->part_ns, memory_order_relaxed);
        const double gain = (double)(w < fastest ? w : fastest) * 1e-9 * (parts - mine) - waited;
        p->saved_s += gain;
        p->ledger += gain;
        if (p->ledger > POOL_CREDIT_S)
            p->ledger = POOL_CREDIT_S;
    }
    /* have the workers come since they were asked? */
    if (p->asking) {
        const uint32_t s = atomic_load_explicit(&p->seen, memory_order_acquire);
        if ((int32_t)(s - p->ask_gen) >= 0) {
            double lat = (double)atomic_load_explicit(&p->seen_ns, memory_order_relaxed) * 1e-9 -
                         p->ask_t;
            lat = lat < 0 ? 0 : lat;
            p->arrivals++;
            p->arrive_s += lat;
            if (lat > p->arrive_max_s)
                p->arrive_max_s = lat;
            p->asking = 0;
        }
    }
    if (p->ledger < -POOL_LOSS_S) {
        p->losses++;
        miss(p, end);
    } else if (p->asking && !p->absent_counted && end - p->ask_t > p->ask_limit) {
        p->absences++;
        p->absent_counted = 1;
        miss(p, end);
    }
    pthread_mutex_unlock(&p->run_mu);
}

void sq_pool_run(sq_pool *p, sq_pool_fn fn, void *arg)
{
    sq_pool_run_parts(p, fn, arg, p->n);
}

void sq_pool_test_delay(sq_pool *p, int us)
{
    atomic_store(&p->delay_us, us > 0 ? us : 0);
}

int sq_pool_start(sq_pool *p, int n)
{
    *p = (sq_pool){.n = n, .backoff = POOL_SOLO_MIN_S};
    atomic_init(&p->claim, 0);
    atomic_init(&p->left, 0);
    atomic_init(&p->sleeping, 0);
    atomic_init(&p->stop, 0);
    atomic_init(&p->delay_us, 0);
    atomic_init(&p->seen, 0);
    atomic_init(&p->seen_ns, 0);
    atomic_init(&p->part_ns, 0);
    size_t k = (size_t)(n > 1 ? n - 1 : 1);
    p->tids = calloc(k, sizeof *p->tids);
    p->ws = calloc(k, sizeof *p->ws);
    if (!p->tids || !p->ws) {
        free(p->tids);
        free(p->ws);
        return -1;
    }
    pthread_mutex_init(&p->mu, NULL);
    pthread_mutex_init(&p->run_mu, NULL);
    pthread_cond_init(&p->go, NULL);
    pthread_cond_init(&p->done, NULL);
    for (int w = 1; w < n; w++) {
        p->ws[w - 1] = (sq_pool_worker){p, w};
        if (pthread_create(&p->tids[w - 1], NULL, pool_main, &p->ws[w - 1]) != 0)
            break;
        p->started++;
    }
    return 0;
}

void sq_pool_stop(sq_pool *p)
{
    if (!p->tids)
        return;
    pthread_mutex_lock(&p->mu);
    atomic_store(&p->stop, 1);
    pthread_cond_broadcast(&p->go);
    pthread_mutex_unlock(&p->mu);
    for (int w = 0; w < p->started; w++)
        pthread_join(p->tids[w], NULL);
    pthread_mutex_destroy(&p->mu);
    pthread_mutex_destroy(&p->run_mu);
    pthread_cond_destroy(&p->go);
    pthread_cond_destroy(&p->done);
    free(p->tids);
    free(p->ws);
    p->tids = NULL;
    p->ws = NULL;
}

/* ---- the shared pools ---------------------------------------------------------------------- */

#define SHARED_POOLS 8

static pthread_mutex_t shared_mu = PTHREAD_MUTEX_INITIALIZER;
static struct {
    sq_pool *p;
    int      refs;
} shared[SHARED_POOLS];

sq_pool *sq_pool_shared_acquire(int n)
{
    sq_pool *got = NULL;
    pthread_mutex_lock(&shared_mu);
    int slot = -1;
    for (int i = 0; i < SHARED_POOLS && !got; i++) {
        if (shared[i].p && shared[i].p->n == n) {
            got = shared[i].p;
            shared[i].refs++;
        } else if (!shared[i].p && slot < 0) {
            slot = i;
        }
    }
    if (!got) {
        got = malloc(sizeof *got);
        if (got && sq_pool_start(got, n) != 0) {
            free(got);
            got = NULL;
        }
        if (got && slot >= 0)
            shared[slot].p = got, shared[slot].refs = 1;
        /* no free slot: a private pool, stopped by its release */
    }
    pthread_mutex_unlock(&shared_mu);
    return got;
}

void sq_pool_shared_release(sq_pool *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&shared_mu);
    int last = 1;
    for (int i = 0; i < SHARED_POOLS; i++)
        if (shared[i].p == p) {
            last = --shared[i].refs == 0;
            if (last)
                shared[i].p = NULL;
        }
    pthread_mutex_unlock(&shared_mu);
    if (last) {
        sq_pool_stop(p);
        free(p);
    }
}
