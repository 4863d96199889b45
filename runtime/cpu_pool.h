/* A small pool of persistent worker threads for the CPU backend. One dispatch runs
 * fn(arg, part, parts) once for every part = 0 .. parts-1; the parts are claimed one at a time
 * by whichever thread gets there first, the calling thread included, and the dispatch returns
 * when all are done.
 *
 * A forward dispatches about ten times per layer (the weight products, attention), so a
 * dispatch must cost microseconds when the cores are free; and it must not collapse when other
 * processes hold the cores (issue 27: with a static share per worker, the caller waited for a
 * worker the kernel had not scheduled, 102 ms a forward against 25 ms on one thread). Hence:
 *   - dynamic parts: a worker that has not woken claims nothing, and the caller runs the parts
 *     nobody took; only a part a worker has started must be waited for;
 *   - spin, then yield, then block: idle workers, and the caller waiting for the last parts,
 *     spin on the dispatch counter for tens of microseconds (a dispatch's gap on a quiet
 *     machine), then call sched_yield for a few milliseconds (free when nothing else wants the
 *     core, the core given away when something does), then sleep on a condition variable;
 *   - falling back to one thread, judged in time and by what the workers saved: each dispatch
 *     adds to a ledger the workers' parts, at the cost of the dispatch's fastest part (what the
 *     caller would have spent on them), minus the caller's wait for parts they had started. A
 *     miss ends a period of dispatches offered to the workers: a loss (the ledger below -1 ms:
 *     a worker preempted inside its part, or one that shares the caller's core) or an absence
 *     (no worker came within 50 us of being asked while awake, 1 ms when it had to be woken:
 *     its core is held by another process; counted once per wait however many dispatches go
 *     by, since on free cores a short dispatch is over before a wake-up). After a miss the
 *     dispatches run on the calling thread alone, waking nobody, for a solo stretch of time
 *     (1 ms to SQ_POOL_SOLO_MAX_S): a period that lost doubles the next stretch, one that
 *     gained halves it, one in which absent workers did nothing leaves it. The ledger banks at
 *     most 5 ms, so a long good period absorbs a few waits but not a change of load. Under
 *     load a forward thus costs about what it costs on one thread, or less while the workers
 *     still get some time; on free cores a slow wake-up costs a millisecond, not a stretch of
 *     1024 dispatches (the policy before, counted in dispatches, ran 72% of an idle machine's
 *     dispatches on the caller alone).
 * Contexts share one pool per thread count in a process (sq_pool_shared_acquire): the draft's
 * and the target's forwards alternate, and two pools would each keep a thread spinning for the
 * other's cores. Details: docs/runtime.md, "Threads on a shared machine". */
#ifndef SQ_RUNTIME_CPU_POOL_H
#define SQ_RUNTIME_CPU_POOL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

/* The longest solo stretch (seconds of dispatches run on the caller alone after misses). */
#define SQ_POOL_SOLO_MAX_S 0.25

/* One part of a dispatch; `part` < `parts`, every part exactly once per dispatch, at most one
 * thread in a given part (so per-part scratch needs no lock). */
typedef void (*sq_pool_fn)(void *arg, int part, int parts);

typedef struct sq_pool_worker {
    struct sq_pool *p;
    int             id;
} sq_pool_worker;

typedef struct sq_pool {
    int              n;         /* threads, the calling thread included (>= 1)              */
    int              started;   /* threads actually running (workers 1 .. started)          */
    pthread_t       *tids;      /* (n - 1)                                                  */
    sq_pool_worker  *ws;        /* (n - 1)                                                  */
    pthread_mutex_t  mu;
    pthread_mutex_t  run_mu;    /* one dispatch at a time: callers on several threads queue   */
    pthread_cond_t   go, done;
    /* the dispatch: generation (32 bits) | parts (16) | next part to claim (16), one word so
     * that a worker waking late can never claim a part of a later dispatch by mistake */
    _Atomic uint64_t claim;
    atomic_int       left;      /* parts of the current dispatch not finished yet            */
    _Atomic int64_t  part_ns;   /* the workers' shortest part in it (ns)                     */
    atomic_int       sleeping;  /* workers asleep on `go`                                    */
    atomic_int       stop;
    sq_pool_fn       fn;
    void            *arg;
    /* arrivals: the latest generation a worker has come for, and when (CLOCK_MONOTONIC ns) */
    _Atomic uint32_t seen;
    _Atomic int64_t  seen_ns;
    /* the policy (under run_mu) */
    double           solo_until; /* dispatches run on the caller alone until then (s)      */
    double           backoff;    /* the next solo stretch (s)                               */
    double           ledger;     /* this parallel period: the workers' parts minus the waits */
    double           ask_t;      /* when the workers were asked for generation ask_gen ...  */
    uint32_t         ask_gen;    /* ... and have not come yet (asking)                      */
    double           ask_limit;  /* ... and how long they may take (asleep or awake then)   */
    int              asking, absent_counted;
    atomic_int       delay_us;  /* tests: a worker sleeps this long before it claims a part  */
    /* counters (read by benchmarks; not synchronised beyond the dispatch lock) */
    unsigned long    dispatches; /* dispatches of several parts                             */
    unsigned long    solo_runs;  /* of them, run on the caller alone (a solo stretch)       */
    unsigned long    misses;     /* losses + absences: each begins a solo stretch           */
    unsigned long    losses;     /* the ledger fell below -1 ms (waits for started parts)   */
    unsigned long    absences;   /* no worker came in time after being asked                */
    unsigned long    arrivals;   /* times the workers came after being asked: latency ...  */
    double           arrive_s, arrive_max_s; /* ... summed, and the largest (s)             */
    double           waited_s;   /* the caller's waits for parts workers had started (s)    */
    double           saved_s;    /* what the ledgers were given: time saved, net (s)        */
    double           solo_s;     /* the solo stretches begun, summed (s)                    */
} sq_pool;

/* Starts n - 1 threads. Returns 0, or -1 when out of memory (nothing to stop then). A thread
 * that cannot be created leaves its parts to the others. */
int sq_pool_start(sq_pool *p, int n);

/* One dispatch of p->n parts (fn(arg, part, p->n) for part = 0 .. n-1): per-part scratch sized
 * for the pool's threads. fn must not dispatch on the same pool. Safe to call from several
 * threads (they take turns). */
void sq_pool_run(sq_pool *p, sq_pool_fn fn, void *arg);

/* The same with `parts` parts (1 .. 65535): more parts than threads balance the work when the
 * threads run at different speeds (a core shared with another process). */
void sq_pool_run_parts(sq_pool *p, sq_pool_fn fn, void *arg, int parts);

/* Joins the threads and frees the pool's memory. */
void sq_pool_stop(sq_pool *p);

/* Tests: every worker sleeps `us` microseconds after it wakes for a dispatch and before it
 * comes for it (claims a part, counts as arrived): a worker the kernel does not schedule. 0
 * turns it off, and ends the sleeps under way within a millisecond (as does sq_pool_stop). */
void sq_pool_test_delay(sq_pool *p, int us);

/* The process's shared pool of n workers, started on first use and stopped when its last user
 * releases it; NULL when out of memory. */
sq_pool *sq_pool_shared_acquire(int n);
void sq_pool_shared_release(sq_pool *p);

#endif
