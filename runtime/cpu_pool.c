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
/* A dispatch is a miss when the caller, its own parts done, waited longer than this and longer
 * than its own parts took (a worker was preempted inside a part), or when it is the
 * POOL_IDLE_RUNS-th in a row in which the workers took no part. */
#define POOL_MISS_WAIT_S 1e-3
/* Dispatches in a row in which the workers took no part before that counts as a miss. */
#define POOL_IDLE_RUNS 16
/* Dispatches in a row that must go well before the next solo stretch is halved: under load
 * good and missed dispatches alternate, and the stretches must keep growing there. */
#define POOL_GOOD_RUNS 64
/* The longest stretch of dispatches run on the caller alone after misses. */
#define POOL_SOLO_MAX 1024

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

static inline uint32_t gen_of(uint64_t c)
{
    return (uint32_t)(c >> 32);
}

/* Runs parts of dispatch `gen` until none is left to claim; returns how many it ran. */
static int run_parts(sq_pool *p, uint32_t gen)
{
    int ran = 0;
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
            usleep((useconds_t)delay);
        run_parts(p, g);
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
    if (p->solo > 0) {   /* after a miss: the caller alone, nobody woken */
        p->solo--;
        p->solo_runs++;
        for (int k = 0; k < parts; k++)
            fn(arg, k, parts);
        pthread_mutex_unlock(&p->run_mu);
        return;
    }
    p->fn = fn;
    p->arg = arg;
    atomic_store_explicit(&p->left, parts, memory_order_relaxed);
    const uint32_t gen = gen_of(atomic_load(&p->claim)) + 1;
    /* sequentially consistent, like the sleepers' count below and in wait_dispatch: a worker
     * either sees the new generation before it sleeps or is counted and woken */
    atomic_store(&p->claim, (uint64_t)gen << 32 | (uint64_t)parts << 16);
    if (atomic_load(&p->sleeping) > 0) {
        pthread_mutex_lock(&p->mu);
        pthread_cond_broadcast(&p->go);
        pthread_mutex_unlock(&p->mu);
    }
    const double t0 = now_s();
    const int mine = run_parts(p, gen);
    double own = 0, waited = 0;
    if (atomic_load_explicit(&p->left, memory_order_acquire) > 0) {
        const double t1 = now_s();
        own = t1 - t0;
        wait_done(p);
        waited = now_s() - t1;
    }
    /* a worker that took no part cost nothing but its wake-up: the caller ran its parts. Only
     * when that keeps happening (workers that never get a core) are they no longer woken */
    int miss = waited > POOL_MISS_WAIT_S && waited > own;
    if (mine == parts)
        miss |= ++p->idle_runs >= POOL_IDLE_RUNS;
    else
        p->idle_runs = 0;
    if (miss) {
        p->misses++;
        p->idle_runs = 0;
        p->solo = p->backoff;
        p->backoff = p->backoff * 2 > POOL_SOLO_MAX ? POOL_SOLO_MAX : p->backoff * 2;
    } else if (mine < parts) {
        if (++p->good_runs >= POOL_GOOD_RUNS && p->backoff > 1) {
            p->good_runs = 0;
            p->backoff /= 2;
        }
    }
    if (miss)
        p->good_runs = 0;
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
    *p = (sq_pool){.n = n, .backoff = 1};
    atomic_init(&p->claim, 0);
    atomic_init(&p->left, 0);
    atomic_init(&p->sleeping, 0);
    atomic_init(&p->stop, 0);
    atomic_init(&p->delay_us, 0);
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
