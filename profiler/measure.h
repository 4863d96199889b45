/* Timing a model's forward against the number of new tokens (docs/design.md §4, §7.3).
 *
 * A point times `repeat` forwards of n new tokens (after `warmup` untimed ones) on top of a KV
 * prefix of `prefix` committed tokens. The n tokens form a chain (causal mask), the most
 * attention work a tree of n nodes can need; the pending tokens are dropped after each forward,
 * so every sample starts from the same cache. The points of a sweep are timed in interleaved
 * rounds. */
#ifndef SQ_PROFILER_MEASURE_H
#define SQ_PROFILER_MEASURE_H

#include "libsequoia/format/profile.h"
#include "runtime/model.h"

typedef struct sq_measure_params {
    int    warmup;       /* untimed forwards per point                                       */
    int    repeat;       /* timed forwards per point                                         */
    int    prefix;       /* committed tokens the forwards run on top of                      */
    int    refine;       /* add midpoints where the curve bends                              */
    double bend_tol;     /* relative gap between a midpoint and the straight line that counts
                            as a bend                                                         */
    int    max_points;   /* cap on points, refinement included                               */
    double unstable;     /* (p90 - p10) / median above this flags a point as unstable        */
    unsigned seed;       /* token ids of the prefix and of the timed forwards                */
} sq_measure_params;

sq_measure_params sq_measure_default_params(void);

typedef void (*sq_measure_progress)(void *user, int done, int total, int tokens);

/* Fills the context's prefix up to params->prefix committed tokens with pseudo-random tokens
 * (sq_prefill of runtime/prefill.h, chunks of 64). */
int sq_measure_prefill(sq_context *ctx, int vocab, const sq_measure_params *params,
                       sq_error *err);

/* Timed forwards of a point taken back to back in one visit, and the least time of untimed
 * forwards before them (see sq_measure_points). */
#define SQ_MEASURE_BLOCK 10
#define SQ_MEASURE_WARMUP_MS 100.0

/* Times the points of ns[0..count) (token counts) at batch b: b >= 2 sequences are one
 * sq_context_forward_batch over ctxs[0..b) (each prefilled) with n chain tokens each, b = 1 a
 * plain forward on ctxs[0]. The `repeat` (>= 1) timed forwards of each point are taken in
 * ceil(repeat / SQ_MEASURE_BLOCK) interleaved rounds (docs/design.md §7.3): each round visits
 * every point once, runs `warmup` untimed forwards (and more until SQ_MEASURE_WARMUP_MS have
 * passed) and then the next block of timed ones, so
 * that a slow spell of a shared machine spreads over all points instead of falling on one.
 * out[i]: point ns[i]. progress, when not NULL, is called at the start of each round with
 * done + the rounds' share of count, out of total, and the round's first point. */
int sq_measure_points(sq_context *const *ctxs, int b, int vocab, const int *ns, int count,
                      const sq_measure_params *params, sq_measure_progress progress, void *user,
                      int done, int total, sq_profile_point *out, sq_error *err);

/* Times every count of `tokens` (strictly increasing) as one set at batch b over ctxs[0..b),
 * then, when params->refine is set, bisects the segments where the curve bends (each
 * generation of midpoints one set). *out (malloc'd) gets *nout points, increasing. */
int sq_measure_sweep_batch(sq_context *const *ctxs, int b, int vocab, const int *tokens,
                           int ntokens, const sq_measure_params *params,
                           sq_measure_progress progress, void *user, sq_profile_point **out,
                           int *nout, sq_error *err);

#endif
