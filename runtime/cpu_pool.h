/* A small pool of persistent worker threads for the CPU backend: one dispatch runs
 * fn(arg, w, n) for w = 0 .. n-1, worker 0 on the calling thread, and returns when all are done.
 * A forward dispatches about ten times per layer (the weight products, attention), so a
 * dispatch must cost microseconds: idle workers spin on the dispatch counter for a few
 * milliseconds before they sleep on a condition variable (waking a sleeping thread costs tens of
 * microseconds on a VM), and so does the caller waiting for them. Contexts share one pool per
 * thread count in a process (sq_pool_shared_acquire): the draft's and the target's forwards
 * alternate, and two pools would each keep a thread spinning for the other's cores. */
#ifndef SQ_RUNTIME_CPU_POOL_H
#define SQ_RUNTIME_CPU_POOL_H

#include <pthread.h>
#include <stdatomic.h>

typedef void (*sq_pool_fn)(void *arg, int worker, int n_workers);

typedef struct sq_pool_worker {
    struct sq_pool *p;
    int             id;
} sq_pool_worker;

typedef struct sq_pool {
    int              n;         /* workers, the calling thread included (>= 1)              */
    int              started;   /* threads actually running (workers 1 .. started)          */
    pthread_t       *tids;      /* (n - 1)                                                  */
    sq_pool_worker  *ws;        /* (n - 1)                                                  */
    pthread_mutex_t  mu;
    pthread_mutex_t  run_mu;    /* one dispatch at a time: callers on several threads queue   */
    pthread_cond_t   go, done;
    atomic_uint      gen;       /* bumped per dispatch, after fn and arg are set             */
    atomic_int       pending;   /* workers still running the current dispatch                */
    atomic_int       stop;
    sq_pool_fn       fn;
    void            *arg;
} sq_pool;

/* Starts n - 1 threads. Returns 0, or -1 when out of memory (nothing to stop then). A thread
 * that cannot be created leaves its share to the calling thread. */
int sq_pool_start(sq_pool *p, int n);

/* One dispatch; fn must not dispatch on the same pool. Safe to call from several threads (they
 * take turns). */
void sq_pool_run(sq_pool *p, sq_pool_fn fn, void *arg);

/* Joins the threads and frees the pool's memory. */
void sq_pool_stop(sq_pool *p);

/* The process's shared pool of n workers, started on first use and stopped when its last user
 * releases it; NULL when out of memory. */
sq_pool *sq_pool_shared_acquire(int n);
void sq_pool_shared_release(sq_pool *p);

#endif
