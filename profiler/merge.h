/* Profiles pooled over a measured period (issue 26, "Prediction of wall-clock time within 10%";
 * docs/design.md §7.3; docs/formats.md, "Merged profiles"): sequoia-profile --merge.
 *
 * One profile is one measurement of a few seconds; on a shared or virtualised host the speed of
 * the machine drifts over minutes (two profiles of the same model a minute apart differed by 27%
 * at one token), so a prediction priced from one of them is only as good as the moment it was
 * taken. Profiles taken in slices through a longer measurement (examples/dynamic_grid.sh: one
 * before each prompt's round of runs) are pooled here into one profile of the whole period.
 *
 * What is pooled: a profile stores, per point, the median, p10 and p90 of its samples and their
 * count, not the samples themselves. Each point of the result (and of the step section's tables)
 * is, over the sources that have it:
 *   median_ms  the median of the sources' medians (each source a sample of the host's state;
 *              the median, so that one slice taken in a slow spell moves it little), or with
 *              SQ_POOL_MEAN their mean (sq_merge_pool);
 *   p10_ms     the median of the sources' p10s, at most the pooled median (NAN when no source
 *              has one: imported profiles);
 *   p90_ms     the median of the sources' p90s, at least the pooled median;
 *   samples    the sum of the sources' samples.
 * A merge of one profile is that profile's points.
 *
 * What must agree (else SQ_EDATA naming the file, the field and both values): the model
 * description (every member), backend, dtype, device, threads, prefix, the (batch, tokens) of
 * every point, and the step section: present in all or none, the same draft description, the
 * same token counts in its `target` and `overhead` tables. The `draft_first` and `draft_level`
 * tables are keyed by what the steps caught up and grew, which may differ between runs: they are
 * pooled over the union of their token counts, each point over the sources that have it. */
#ifndef SQ_PROFILER_MERGE_H
#define SQ_PROFILER_MERGE_H

#include "libsequoia/base/error.h"
#include "libsequoia/format/profile.h"

/* How a point's medians are pooled: their median (default; one slice taken in a slow spell moves
 * it little) or their mean (the time average: the expected cost over the period the slices
 * sample, which a long measurement's mean rate sees; on a host whose speed jumps between modes
 * from one process to the next, the median follows the commoner mode and the mean their mix;
 * docs/formats.md, "Merged profiles"). */
typedef enum sq_merge_pool { SQ_POOL_MEDIAN = 0, SQ_POOL_MEAN = 1 } sq_merge_pool;

/* How far the sources' medians spread, point by point: (max - min) / pooled median over the
 * sources' medians of a point (steady-stream points only). */
typedef struct sq_merge_drift {
    double median;               /* over the points                                     */
    double max;                  /* the largest, at (max_batch, max_tokens)              */
    int    max_batch, max_tokens;
} sq_merge_drift;

/* Pools in[0..n) (n >= 1; files[i] names in[i] in messages) into *out (sq_profile_free), as
 * above; drift, when not NULL, gets the spread of the sources' medians. Errors: SQ_EDATA when a
 * source differs from in[0] (the message names files[i], the field, its value and in[0]'s),
 * SQ_EUSAGE when n < 1, SQ_ESOFTWARE out of memory. */
int sq_profile_merge(const sq_profile *const *in, const char *const *files, int n,
                     sq_merge_pool pool, sq_profile **out, sq_merge_drift *drift, sq_error *err);

#endif
