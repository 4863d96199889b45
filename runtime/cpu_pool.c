/* The worker pool of runtime/cpu_pool.h. */
#include <stdlib.h>

#include "runtime/cpu_pool.h"

/* Iterations of the spin-wait before a worker or the caller sleeps: with a pause of the order of
 * 40-150 cycles each, a few milliseconds, longer than the gaps between the dispatches of one
 * forward and between the forwards of a decoding step (the draft's levels, then the target's
 * verify), shorter than a pause between requests. Measured on the 2-core VM with the 18M
 * target: 1,024 iterations left the workers asleep at most dispatches of a 4-token forward,
 * which then cost 2.5x a one-token forward; 65,536 brought it to 1.5x. */
#define POOL_SPIN 65536

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

static void *pool_main(void *arg)
{
    sq_pool_worker *w = arg;
    sq_pool *p = w->p;
    unsigned seen = 0;
    for (;;) {
        unsigned g = seen;
        for (int i = 0; i < POOL_SPIN; i++) {
            g = atomic_load_explicit(&p->gen, memory_order_acquire);
            if (g != seen || atomic_load_explicit(&p->stop, memory_order_relaxed))
                break;
            cpu_relax();
        }
        if (g == seen) {
            pthread_mutex_lock(&p->mu);
            while ((g = atomic_load(&p->gen)) == seen && !atomic_load(&p->stop))
                pthread_cond_wait(&p->go, &p->mu);
            pthread_mutex_unlock(&p->mu);
        }
        if (atomic_load(&p->stop))
            return NULL;
        seen = g;
        p->fn(p->arg, w->id, p->n);
        if (atomic_fetch_sub_explicit(&p->pending, 1, memory_order_acq_rel) == 1) {
            pthread_mutex_lock(&p->mu);
            pthread_cond_signal(&p->done);
            pthread_mutex_unlock(&p->mu);
        }
    }
}

void sq_pool_run(sq_pool *p, sq_pool_fn fn, void *arg)
{
    if (p->started == 0) {
        for (int w = 0; w < p->n; w++)
            fn(arg, w, p->n);
        return;
    }
    pthread_mutex_lock(&p->run_mu);
    p->fn = fn;
    p->arg = arg;
    atomic_store_explicit(&p->pending, p->started, memory_order_relaxed);
    pthread_mutex_lock(&p->mu);
    atomic_fetch_add_explicit(&p->gen, 1, memory_order_release);
    pthread_cond_broadcast(&p->go);
    pthread_mutex_unlock(&p->mu);
    fn(arg, 0, p->n);
    for (int w = 1 + p->started; w < p->n; w++)
        fn(arg, w, p->n);
    for (int i = 0; i < POOL_SPIN && atomic_load_explicit(&p->pending, memory_order_acquire); i++)
        cpu_relax();
    if (atomic_load_explicit(&p->pending, memory_order_acquire)) {
        pthread_mutex_lock(&p->mu);
        while (atomic_load(&p->pending) > 0)
            pthread_cond_wait(&p->done, &p->mu);
        pthread_mutex_unlock(&p->mu);
    }
    pthread_mutex_unlock(&p->run_mu);
}

int sq_pool_start(sq_pool *p, int n)
{
    *p = (sq_pool){.n = n};
    atomic_init(&p->gen, 0);
    atomic_init(&p->pending, 0);
    atomic_init(&p->stop, 0);
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
