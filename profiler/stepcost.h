/* The cost of a speculative step as decoding runs it (issue 26; docs/design.md §7.3;
 * docs/formats.md, "The step section").
 *
 * A profile's points time one model's forwards in a steady stream. Inside a decoding step the
 * target's forward follows the draft's forwards and the draft's first forward follows the
 * target's (each model's weights and caches pushed out of the CPU's caches by the other's), and
 * the step does work of its own outside the forwards (proposals, verification, KV compaction):
 * on the 2-core development VM the 18M target's 3-token forward took 2.40 ms inside the runs
 * against 2.02 ms profiled. This module times real steps (runtime/specdec.h) of the pair with a
 * tree of n nodes for every n asked, and splits each step into its parts:
 *   target:      the target's forward over the n nodes (sq_step_info.target_forward_ms);
 *   draft_first: the draft's first forward of the step, keyed by the tokens it catches up;
 *   draft_level: each level's draft forward, keyed by the level's width (timed between the
 *                grow hook's calls, which bracket every level forward);
 *   overhead:    step_ms less the forwards (proposals, verification, commits, bookkeeping);
 *   expand:      one node's expansion by a dynamic tree (runtime/dyntree.h,
 *                sq_dyntree_expand: the draft's softmax at temperature 1 over the vocabulary
 *                and its top K), keyed by K = 1, 2, 4, 8 (at most the vocabulary): the work
 *                a dynamic tree's growth adds per expanded node, which these static trees'
 *                proposals (the draft's top-k of its logits) do not do. Timed apart, on a
 *                row of pseudo-random logits (the softmax's cost does not depend on the
 *                values), right after the steps, SQ_STEPCOST_EXPAND_MS a sample.
 * n = 1 is a root-only tree: plain decoding (the target's one-token forward and its commit;
 * the draft is never run).
 *
 * The trees: n nodes on min(n, max_levels) levels, the n - 1 non-root nodes spread evenly over
 * the levels below the root, each level's nodes the children of the level above's (spread
 * evenly over them), children proposed as the draft's top-k (the greedy rule); verification is
 * greedy. The prompt is `prefix` pseudo-random tokens. Steps are timed in interleaved rounds as
 * the profile's points are (sq_measure_points): each round visits every n once, runs warm-up
 * steps from the whole prompt (at least `warmup` and SQ_MEASURE_WARMUP_MS, at most 32),
 * counting the tokens g a step adds, then restarts the decoder on the prompt shortened by
 * g * (SQ_STEPCOST_LEAD + SQ_MEASURE_BLOCK / 2) tokens and times the next SQ_MEASURE_BLOCK steps
 * after SQ_STEPCOST_LEAD untimed ones: the timed steps' context is centred on `prefix` (within g / 2 tokens; a prefix
 * too short to shorten starts at 1 token). A small draft's forward grows with its context (its
 * attention reads every cached slot): the shipped 0.25M draft's one-token forward takes 0.024 ms
 * at 164 tokens and 0.033 ms at 250, and timing after the warm-up, as before 2026-12-02, put
 * the steps about 100 tokens past the prefix and priced the draft's levels 20-30% high. The
 * section records the context it ran at (sq_profile_step.context_*). */
#ifndef SQ_PROFILER_STEPCOST_H
#define SQ_PROFILER_STEPCOST_H

#include "libsequoia/format/profile.h"
#include "profiler/measure.h"
#include "runtime/model.h"
#include "runtime/specdec.h"

#define SQ_STEPCOST_MAX_LEVELS 5   /* default levels of the measured trees, root included */
/* Untimed steps between the restart that precedes each visit's timed steps and the first timed
 * one: the steps right after a prefill run slower for a while (the run reports' per-step times:
 * about 4 steps for the shipped pair, 10 and more for the 18M target), and a decode of a few
 * hundred tokens spends most of its steps past that. */
#define SQ_STEPCOST_LEAD 16
#define SQ_STEPCOST_EXPAND_MS 0.05   /* an expand sample: the mean of calls lasting this long */
#define SQ_STEPCOST_EXPAND_MAX_K 8   /* the expand part's largest K                           */

typedef struct sq_stepcost_params {
    sq_measure_params measure;   /* warmup, repeat, prefix, seed                           */
    int               max_levels;
    sq_backend_kind   backend;
    int               threads;
    sq_weight_dtype   dtype;
    int               offload;
} sq_stepcost_params;

/* The level widths (root included) of the measured tree of n nodes: w[0] = 1, levels =
 * min(n, max_levels), the rest spread evenly, larger levels first. Returns the levels. */
int sq_stepcost_shape(int n, int max_levels, int *w);

/* Times real steps for every count of ns[0..count) (strictly increasing, each >= 1) and fills
 * *out (malloc'd; the caller sets its draft description). progress as sq_measure_points'.
 * Errors: the runtime's (SQ_EUSAGE when prefix + the steps do not fit the models' context). */
int sq_stepcost_measure(const sq_model *draft, const sq_model *target, const int *ns, int count,
                        const sq_stepcost_params *params, sq_measure_progress progress,
                        void *user, sq_profile_step **out, sq_error *err);

#endif
