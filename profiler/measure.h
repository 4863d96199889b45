/* Timing a model's forward against the number of new tokens (docs/design.md §4, §7.3).
 *
 * A point times `repeat` forwards of n new tokens (after `warmup` untimed ones) on top of a KV
 * prefix of `prefix` committed tokens. The n tokens form a chain (causal mask), the most
 * attention work a tree of n nodes can need; the pending tokens are dropped after each forward,
 * so every sample starts from the same cache. */
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

/* Fills the context's prefix (forward + commit in chunks). */
int sq_measure_prefill(sq_context *ctx, int vocab, const sq_measure_params *params,
                       sq_error *err);

/* Times one point. */
int sq_measure_point(sq_context *ctx, int vocab, int n, const sq_measure_params *params,
                     sq_profile_point *out, sq_error *err);

/* Times one point of b >= 2 sequences: b contexts (each prefilled) with n chain tokens each,
 * in one sq_context_forward_batch. out->batch = b. */
int sq_measure_point_batch(sq_context *const *ctxs, int b, int vocab, int n,
                           const sq_measure_params *params, sq_profile_point *out, sq_error *err);

/* sq_measure_sweep at batch b over ctxs[0 .. b) (b = 1: sq_measure_point on ctxs[0]). */
int sq_measure_sweep_batch(sq_context *const *ctxs, int b, int vocab, const int *tokens,
                           int ntokens, const sq_measure_params *params,
                           sq_measure_progress progress, void *user, sq_profile_point **out,
                           int *nout, sq_error *err);

/* Times every count of `tokens` (strictly increasing), then, when params->refine is set,
 * bisects the segments where the curve bends. *out (malloc'd) gets *nout points, increasing. */
int sq_measure_sweep(sq_context *ctx, int vocab, const int *tokens, int ntokens,
                     const sq_measure_params *params, sq_measure_progress progress, void *user,
                     sq_profile_point **out, int *nout, sq_error *err);

/* The p-th quantile (0..1) of v[0..n) by linear interpolation; sorts v. */
double sq_quantile(double *v, int n, double p);

#endif
