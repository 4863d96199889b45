/* Suite 'cpu-pool': the worker pool's policy on a shared machine (runtime/cpu_pool.h, issue 27).
 * The other tests of the pool (every part once, shared pools, the same results on 1, 2 and 7
 * threads, a caller that does not wait for workers that do not run) are in the 'cpu-matmul'
 * suite. These check the policy with the test delay (sq_pool_test_delay: a worker the kernel
 * does not schedule) and a part that sleeps on a worker (a worker preempted inside its part),
 * on counters only, never on times:
 *   - a worker that does not come is one miss however many dispatches go by (the policy before
 *     counted a miss every 16 dispatches the workers took no part in, and doubled the solo
 *     stretch each time: one slow wake-up sent the pool to the caller alone for 1024
 *     dispatches);
 *   - a solo stretch ends after a time, not after a number of dispatches: once it is over, the
 *     next dispatch is offered to the workers again, however few dispatches ran meanwhile;
 *   - a loss (the caller waited 200 ms for a part a worker started) in a period in which the
 *     workers saved nothing is a miss and doubles the next solo stretch; the worker that came
 *     is counted as come. */
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "runtime/cpu_pool.h"

typedef struct job {
    atomic_int hits[8];
} job;

static void count_part(void *arg, int part, int parts)
{
    (void)parts;
    job *j = arg;
    atomic_fetch_add(&j->hits[part], 1);
}

static void sleep_us(long us)
{
    struct timespec ts = {us / 1000000, us % 1000000 * 1000};
    while (nanosleep(&ts, &ts) != 0)
        ;
}

/* Parts that take 2 ms each: time goes by while the workers are asked. */
static void slow_part(void *arg, int part, int parts)
{
    (void)parts;
    sleep_us(2000);
    count_part(arg, part, parts);
}

static void init_job(job *j)
{
    for (int k = 0; k < 8; k++)
        atomic_init(&j->hits[k], 0);
}

Test(cpu_pool, an_absent_worker_is_one_miss_however_many_dispatches_go_by)
{
    sq_pool pool;
    cr_assert_eq(sq_pool_start(&pool, 2), 0);
    sq_pool_test_delay(&pool, 60000000);   /* the worker comes back when the delay is lifted */
    job j;
    init_job(&j);
    sq_pool_run(&pool, slow_part, &j);     /* 4 ms: longer than the worker may take */
    const int rounds = 20000;
    for (int r = 0; r < rounds; r++)
        sq_pool_run(&pool, count_part, &j);
    sq_pool_run(&pool, slow_part, &j);
    cr_assert_eq(pool.misses, 1, "%lu misses (%lu absences) for one worker that did not come",
                 pool.misses, pool.absences);
    cr_assert_eq(pool.absences, 1);
    cr_assert_eq(pool.losses, 0);
    for (int k = 0; k < 2; k++)
        cr_assert_eq(atomic_load(&j.hits[k]), rounds + 2, "part %d ran %d times", k,
                     atomic_load(&j.hits[k]));
    sq_pool_test_delay(&pool, 0);
    sq_pool_stop(&pool);
}

Test(cpu_pool, a_solo_stretch_ends_after_a_time_not_a_number_of_dispatches)
{
    sq_pool pool;
    cr_assert_eq(sq_pool_start(&pool, 2), 0);
    sq_pool_test_delay(&pool, 60000000);
    job j;
    init_job(&j);
    /* dispatches until the absent worker is missed: a solo stretch begins */
    for (int r = 0; pool.misses == 0 && r < 10000; r++)
        sq_pool_run(&pool, slow_part, &j);
    cr_assert_eq(pool.misses, 1);
    /* after the longest stretch has gone by, the next dispatch is offered to the workers
     * again, although no dispatch ran since the miss */
    sq_pool_test_delay(&pool, 0);
    sleep_us((long)(SQ_POOL_SOLO_MAX_S * 1e6) + 50000);
    const unsigned long s1 = pool.solo_runs;
    sq_pool_run(&pool, count_part, &j);
    cr_assert_eq(pool.solo_runs, s1, "the solo stretch outlived %.2f s", SQ_POOL_SOLO_MAX_S);
    sq_pool_stop(&pool);
}

/* ---- a worker preempted inside its part ------------------------------------------------------ */

typedef struct stall_job {
    pthread_t  caller;
    atomic_int on_worker;   /* parts a worker has entered */
    atomic_int hits[2];
} stall_job;

/* On a worker: 200 ms inside the part (preempted). On the caller: waits (up to 10 s) until a
 * worker has entered a part, so that the caller has to wait for it. */
static void stall_part(void *arg, int part, int parts)
{
    (void)parts;
    stall_job *s = arg;
    if (pthread_equal(pthread_self(), s->caller)) {
        for (int i = 0; i < 100000 && atomic_load(&s->on_worker) == 0; i++)
            sleep_us(100);
    } else {
        atomic_fetch_add(&s->on_worker, 1);
        sleep_us(200000);
    }
    atomic_fetch_add(&s->hits[part], 1);
}

Test(cpu_pool, a_stall_the_workers_did_not_pay_for_doubles_the_solo_stretch)
{
    sq_pool pool;
    cr_assert_eq(sq_pool_start(&pool, 2), 0);
    stall_job s = {.caller = pthread_self()};
    atomic_init(&s.on_worker, 0);
    atomic_init(&s.hits[0], 0);
    atomic_init(&s.hits[1], 0);
    const double before = pool.backoff;
    sq_pool_run(&pool, stall_part, &s);
    cr_assert_eq(atomic_load(&s.on_worker), 1, "the worker never entered a part");
    cr_assert_eq(atomic_load(&s.hits[0]) + atomic_load(&s.hits[1]), 2);
    cr_assert_eq(pool.losses, 1, "the 200 ms wait for the worker's part is a loss");
    cr_assert_eq(pool.misses, 1);
    cr_assert_eq(pool.backoff, 2 * before, "next solo stretch %.4f s, was %.4f s", pool.backoff,
                 before);
    cr_assert_lt(pool.saved_s, 0, "the period lost %.4f s", -pool.saved_s);
    cr_assert_geq(pool.arrivals, 1, "the worker came");
    sq_pool_stop(&pool);
}
