/* Is a measured profile credible? (issue 27: profiles taken under load; docs/design.md §7.3,
 * docs/robustness.md). A pure function of the points and the load at start, so that it is tested
 * on synthetic timing series (tests/test_stepcost.c), never on live timing.
 *
 * Refused (without --force) when, after sequoia-profile has timed the suspect points again:
 *   - the time falls as the token count grows: sq_profile_falls (libsequoia/format/profile.h)
 *     over every pair of counts of a batch size, beyond SQ_PROFILE_FALL_TOL, the two points'
 *     p10-p90 spreads and SQ_PROFILE_FALL_FLOOR_MS; also in the step section's target table.
 *     When the profile is noisy throughout (the median spread over `unstable`, every point of
 *     at least SQ_STABILITY_MIN_SAMPLES samples: with fewer, one preempted sample of a
 *     microsecond forward makes the spread and the median alike, as in the test suites' tiny
 *     models at --repeat 2), the spreads hide nothing and are left out: a fall beyond the tolerance and the floor is one (a
 *     profile taken under load read t(5) = 8.1 ms, t(6) = 4.3 ms with every point's p10-p90
 *     near 65% of its median);
 *   - the rounds disagree: the median over points of (p90 - p10) / median exceeds `severe`
 *     (SQ_STABILITY_SEVERE: p90 - p10 wider than the median itself at a typical point).
 * Only a profile of at least SQ_STABILITY_MIN_SAMPLES samples a point is refused (the default
 * --repeat 10): with fewer, one preempted sample of a microsecond forward decides a point, and
 * quick runs (the test suites' tiny models at --repeat 2, beside other tests) would fail at
 * random; their problems are said.
 * Said, not refused: points whose own spread exceeds `unstable` (the existing warning), and
 * a busy machine at start, a 1-minute load average above cores - threads + 0.5 (the load
 * average counts runnable threads, so on a quiet machine it stays below that; a build or a
 * busy loop beside the profiler raises it). A busy start alone does not refuse: the evidence
 * is in the timings, and shared CI machines are often busy while timing well enough. */
#ifndef SQ_PROFILER_STABILITY_H
#define SQ_PROFILER_STABILITY_H

#include <stddef.h>

#include "libsequoia/format/profile.h"

#define SQ_STABILITY_SEVERE 1.0
#define SQ_STABILITY_MIN_SAMPLES 10
#define SQ_STABILITY_MAX_FALLS 16

typedef struct sq_stability {
    int             n_falls;                      /* in all                               */
    sq_profile_fall falls[SQ_STABILITY_MAX_FALLS]; /* the first of them                   */
    int             n_step_falls;                 /* of the step section's target table   */
    sq_profile_fall step_falls[SQ_STABILITY_MAX_FALLS];
    double          median_spread;                /* over the points                       */
    int             noisy;                        /* median_spread > unstable, enough samples */
    int             n_unstable;                   /* points over `unstable`                */
    double          load1;                        /* NAN: unknown                          */
    int             cores, threads;
    int             busy;                         /* load1 > cores - threads + 0.5         */
    int             disagree;                     /* median_spread > severe                */
    int             few;                          /* a point has < SQ_STABILITY_MIN_SAMPLES */
    int             refuse;                       /* (falls or disagree) and not few       */
} sq_stability;

void sq_profile_stability(const sq_profile *p, double unstable, double severe, double load1,
                          int cores, int threads, sq_stability *out);

/* One paragraph saying what is wrong (falls with their token counts and how much, the spread,
 * the load), into buf; empty when nothing is. */
void sq_stability_text(const sq_stability *s, char *buf, size_t cap);

/* The 1-minute load average from /proc/loadavg, NAN when it cannot be read. */
double sq_load_average(void);

#endif
