/* Latency profiles (docs/design.md §7.3): a model's forward time against the number of new tokens,
 * measured by sequoia-profile on one machine or imported from another engine's measurements.
 *
 *   { "format": "sequoia-profile", "version": 1,
 *     "device": "...", "backend": "cpu", "threads": 2, "dtype": "f32", "prefix": 512,
 *     "model": { "name": "...", "dim": 4096, "n_layers": 32, ... },
 *     "points": [ { "tokens": 1, "median_ms": 10.1, "p10_ms": 9.9, "p90_ms": 10.4,
 *                   "samples": 20 }, ... ] }
 *
 * Version 2 adds a batch dimension: every point may carry "batch": b, the number of
 * independent sequences in the forward (each with n new tokens on its own prefix). Points are
 * ordered by batch, then strictly increasing `tokens` within a batch. A version 1 file is all
 * batch 1 (a "batch" member in it is refused, SQ_EDATA); the writer emits version 1 whenever every point is batch 1, so such profiles stay
 * readable by older builds.
 *
 * An optional "step" object (sequoia-profile --draft; docs/formats.md, "The step section") holds
 * the cost of a speculative step as decoding runs it, measured inside real steps of a target and
 * its draft: the target's forward of n tree nodes after the draft's forwards, the draft's first
 * forward and its level forwards after the target's, and the step's own work outside the
 * forwards. It adds no version: a build that does not know it ignores it and plans from the
 * points, and this build reads profiles without it as before.
 *
 * Within one batch size `points` is strictly increasing in `tokens`. Times between two measured token counts are
 * interpolated linearly (which preserves monotonicity and never overshoots); times outside the
 * measured range are an error unless an extrapolation mode is chosen. */
#ifndef SQ_FORMAT_PROFILE_H
#define SQ_FORMAT_PROFILE_H

#include <stddef.h>

#include <cjson/cJSON.h>

#include "libsequoia/base/api.h"
#include "libsequoia/base/error.h"

SQ_BEGIN_DECLS

#define SQ_PROFILE_FORMAT "sequoia-profile"
#define SQ_PROFILE_VERSION 2          /* the newest version read and written */
#define SQ_PROFILE_MAX_BATCH 65536
#define SQ_PROFILE_MAX_POINTS 100000
#define SQ_PROFILE_MAX_TOKENS (1 << 24)
#define SQ_PROFILE_MAX_CSV_BYTES (64u << 20)

typedef struct sq_profile_point {
    int    batch;      /* sequences in the forward (>= 1)              */
    int    tokens;     /* new tokens per sequence in one forward       */
    double median_ms;
    double p10_ms;     /* NAN when unknown (imported profiles)         */
    double p90_ms;
    int    samples;    /* 0 when unknown                               */
} sq_profile_point;

/* The parts of a step (the "step" section's tables, each a run of batch-1 points increasing in
 * tokens). */
typedef enum sq_step_part {
    SQ_STEP_TARGET = 0,   /* "target": the target's forward over the n nodes of a tree inside a
                             step; n = 1 is plain decoding's one-token forward              */
    SQ_STEP_DRAFT_FIRST,  /* "draft_first": the draft's first forward of a step, over the
                             tokens it catches up (right after the target's forward)        */
    SQ_STEP_DRAFT_LEVEL,  /* "draft_level": one level's draft forward over w nodes          */
    SQ_STEP_OVERHEAD,     /* "overhead": the step's time outside the forwards (proposals,
                             verification, KV compaction) by tree size n                    */
    SQ_STEP_EXPAND,       /* "expand": one node's expansion by a dynamic tree (the draft's
                             softmax at temperature 1 over the vocabulary and its K best:
                             runtime/dyntree.h, sq_dyntree_expand), by K; optional          */
    SQ_STEP_PARTS
} sq_step_part;

/* The JSON key of a part ("target", "draft_first", "draft_level", "overhead", "expand"). */
SQ_API
const char *sq_step_part_name(sq_step_part part);

typedef struct sq_profile_step {
    cJSON            *draft;   /* the draft model's description, verbatim; may be NULL       */
    int               n[SQ_STEP_PARTS];
    sq_profile_point *pts[SQ_STEP_PARTS];   /* (n[part]) batch 1, tokens increasing      */
    /* the context the timed steps ran at (committed tokens before each step): its mean, least
     * and most; all 0 (context_max == 0) when the file does not say ("context" absent) */
    double            context_mean;
    int               context_min, context_max;
} sq_profile_step;

typedef struct sq_profile {
    char  *device;     /* "NVIDIA H200", "AMD EPYC ... (2 threads)", "imported"        */
    char  *backend;    /* "cpu", "cuda", "cuda-offload", or the engine for imports   */
    char  *dtype;      /* "f32", "f16", "bf16", or "unknown"                         */
    int    threads;    /* 0 when unknown                                             */
    int    prefix;     /* KV-prefix length the forwards ran on top of; -1 unknown    */
    cJSON *model;      /* model description object, kept verbatim; may be NULL      */
    int    n;          /* points                                                     */
    sq_profile_point *points;  /* (n) strictly increasing in tokens                  */
    sq_profile_step  *step;    /* the "step" section, or NULL                                */
} sq_profile;

typedef enum sq_extrapolate {
    SQ_EXTRAPOLATE_NONE = 0,   /* outside the measured range is an error           */
    SQ_EXTRAPOLATE_LINEAR,     /* continue the nearest segment's slope              */
    SQ_EXTRAPOLATE_CONSTANT,   /* hold the nearest measured time                    */
} sq_extrapolate;

/* Parses "none", "linear" or "constant"; -1 on anything else. */
SQ_API
int sq_extrapolate_parse(const char *s);

SQ_API
void sq_profile_free(sq_profile *p);

/* Checks the points: at least one, tokens >= 1 and strictly increasing, times finite and
 * positive, p10 <= median <= p90 when given. `file` names the source in messages. */
SQ_API
int sq_profile_validate(const sq_profile *p, const char *file, sq_error *err);

SQ_API
int sq_profile_from_json(const cJSON *root, const char *file, sq_profile **out, sq_error *err);
SQ_API
int sq_profile_load(const char *file, sq_profile **out, sq_error *err);
SQ_API
cJSON *sq_profile_to_json(const sq_profile *p); /* NULL if out of memory */
SQ_API
int sq_profile_save(const char *file, const sq_profile *p, sq_error *err);

/* Reads an engine's measurements: a CSV file whose header names the columns `tokens` and `ms`
 * (also accepted: `tokens,median_ms`, `tokens,seconds` or `tokens,s`, `tokens,us`), or three
 * columns in any order, `batch`, `tokens` and a time, for a batch profile (points of batch > 1
 * make the writer emit version 2); other columns are refused. Repeated (batch, token count)
 * rows are combined into their median, p10 and p90. */
SQ_API
int sq_profile_from_csv(const char *file, const char *engine, sq_profile **out, sq_error *err);

/* Forward time for x new tokens (x may be fractional, e.g. the mean accepted length), at the
 * profile's smallest batch size (batch 1 for every version 1 profile).
 * Errors: SQ_EUSAGE when x is outside the measured range and mode is NONE (the message names
 * the range and the --extrapolate option; err->cause is SQ_CAUSE_OUT_OF_RANGE). */
SQ_API
int sq_profile_ms(const sq_profile *p, double x, sq_extrapolate mode, double *ms, sq_error *err);

/* The same at batch size `batch`: SQ_EUSAGE when the profile has no point of that batch. */
SQ_API
int sq_profile_ms_batch(const sq_profile *p, int batch, double x, sq_extrapolate mode, double *ms,
                        sq_error *err);

/* The distinct batch sizes, ascending, into out[0 .. cap); returns how many there are. */
SQ_API
int sq_profile_batches(const sq_profile *p, int *out, int cap);

/* A copy holding only the points of one batch size (NULL-free strings and model copied).
 * SQ_EUSAGE when there are none. */
SQ_API
int sq_profile_slice(const sq_profile *p, int batch, sq_profile **out, sq_error *err);

/* Copies src's setup into dst, whose strings and model must be unset: device, backend and
 * dtype ("unknown" where src has none), threads, prefix and the model description. Returns 0,
 * or -1 out of memory (what was copied stays in dst, for sq_profile_free). */
SQ_API
int sq_profile_copy_setup(sq_profile *dst, const sq_profile *src);

/* Time of a part of a step at x tokens (nodes, caught-up tokens or level width), from the
 * profile's "step" section, interpolated as sq_profile_ms. SQ_EUSAGE when the profile has no
 * step section or the part no point (err->cause as sq_profile_ms when x is out of range). */
SQ_API
int sq_profile_step_ms(const sq_profile *p, sq_step_part part, double x, sq_extrapolate mode,
                       double *ms, sq_error *err);

/* ---- credibility (issue 27: profiles taken under load) ---------------------------------------
 *
 * A forward over more tokens does more work, so within one batch size a profile's time cannot
 * fall as the token count grows, beyond noise. A fall is a point n whose median is below the
 * median of a smaller count m of the same batch by more than `tol` of t(m), by more than the two
 * points' p10-p90 spreads together, and by more than SQ_PROFILE_FALL_FLOOR_MS (timer and
 * scheduling granularity). With SQ_FALLS_FROM_FIRST in `flags` only m = the batch's smallest
 * count (t(1)) is compared; otherwise every smaller m, and the fall reported is against the
 * slowest of them. SQ_FALLS_IGNORE_SPREAD leaves the spreads out (a fall within the noise of a
 * profile that is noisy throughout: profiler/stability.h). */
#define SQ_FALLS_FROM_FIRST 1
#define SQ_FALLS_IGNORE_SPREAD 2
#define SQ_PROFILE_FALL_FLOOR_MS 0.01
#define SQ_PROFILE_FALL_TOL 0.25

typedef struct sq_profile_fall {
    int    batch, tokens;     /* the point that is too fast                               */
    int    ref_tokens;        /* the smaller count it falls below                         */
    double ms, ref_ms;        /* their medians                                            */
} sq_profile_fall;

/* The falls of p (see above), the first `cap` into out; returns how many there are. */
SQ_API
int sq_profile_falls(const sq_profile *p, double tol, int flags, sq_profile_fall *out,
                     int cap);

/* "t(3) = 25 ms < t(1) = 158 ms (-84%), t(8) ..." for the first falls (batch-prefixed, "2x3",
 * when b > 1), into buf. */
SQ_API
void sq_profile_falls_text(const sq_profile_fall *f, int n, char *buf, size_t cap);

/* The largest relative spread (p90 - p10) / median over the points, and the point with it. */
SQ_API
double sq_profile_max_spread(const sq_profile *p, int *at);

SQ_END_DECLS

#endif
