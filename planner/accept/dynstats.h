/* What a prediction of the engines' dynamic trees needs from a corpus (issue 26; the method is in
 * docs/planning.md, "Dynamic trees"; the key in docs/formats.md, "dynamic").
 *
 * SGLang and TensorRT-LLM grow each step's tree from the draft's sorted top-K probabilities
 * (scores: products of draft probabilities along the path) and verify it with the target. So the
 * predictor (planner/dynamic.h) needs, at real corpus positions, jointly:
 *   - the draft's sorted top-K probabilities q_1 >= ... >= q_K (softmax of the draft's logits at
 *     temperature 1, as both engines score: SGLang's draft_forward takes softmax then topk,
 *     TensorRT-LLM's _sample_softmax_topk);
 *   - for every verification configuration of the run (greedy, topk@T, stochastic@T; specinfer is
 *     refused for dynamic trees), the acceptance vector a_1..a_K of those ranks, exactly as
 *     planner/accept/accept.h defines it (greedy: one-hot at the target's argmax; topk: the
 *     target's probability of each draft token; stochastic: Sequoia's draws, Rao-Blackwellised);
 * in runs of consecutive positions ("segments"), so that a simulated accepted path can follow
 * the text (position t, t+1, ...) the way decoding does.
 *
 * The samples are segments of `segment` consecutive positions spread evenly over the corpus
 * (never across a sequence boundary, past the first `skip` positions of each sequence), at most
 * `max_samples` positions per corpus file. A calibration
 * table summarises them: per configuration, per bin of q and per rank, the number of samples and
 * their mean acceptance (a diagnostic: how well the draft's probability predicts acceptance).
 *
 * JSON (the curves file's top-level key "dynamic"):
 *   {"format": "sequoia-dynamic-stats", "version": 1, "topk": K, "draft_temperature": 1,
 *    "seed": S, "corpora": C, "segments": [[row0, length, corpus], ...], "draft_topk": [[q_1..q_K], ...],
 *    "accept": {"greedy@T0": [[a_1..a_K], ...], ...},
 *    "calibration": {"bins": [0, 0.1, ..., 1], "greedy@T0": {"count": [[per rank] per bin],
 *                    "mean_accept": [[...]]}, ...}}
 * Numbers are rounded to 5 significant digits (the file stays small; the prediction's error is
 * far larger). */
#ifndef SQ_ACCEPT_DYNSTATS_H
#define SQ_ACCEPT_DYNSTATS_H

#include <stdint.h>

#include <cjson/cJSON.h>

#include "libsequoia/base/error.h"
#include "libsequoia/format/corpus.h"
#include "libsequoia/format/dynstats.h"
#include "planner/accept/accept.h"

#define SQ_DYNSTATS_BINS 10

typedef struct sq_dynstats_params {
    int      topk;         /* K: ranks kept per position, 1..SQ_DYNSTATS_MAX_TOPK (default 8;
                              a smaller vocabulary keeps all of its tokens)                  */
    int      segment;      /* consecutive positions per segment (default 256: as long as
                              a decoded sequence, for the predictor's replay)                */
    int      max_samples;  /* positions per corpus (default 4096); 0 turns the statistics off */
    int      skip;         /* positions left out at the start of every sequence (default 0):
                              a prompt, when the rest is what decoding produced             */
    int      samples;      /* draws per position for the stochastic mode (default 1)          */
    uint64_t seed;
    /* Off-path contexts (docs/planning.md, "Dynamic trees"): the engine's tree holds rejected
     * siblings whose children get the draft's probabilities after a token the text did not
     * take. `branches` (a file name, or NULL): for every branch_every-th sample (default 4), a
     * line "CORPUS SEQUENCE POSITION TOKEN": the best draft token at that position that is not
     * the text's next token; a corpus of those branches (the sequence's tokens 0..POSITION,
     * TOKEN, and any one token more, dumped by sequoia-run dump) given back as `offpath`
     * (offpath_file names it) adds the draft's sorted top-K at each of its sequences' last row
     * as "offpath_topk", the pool the predictor draws off-path nodes from. */
    const char *branches;
    int         branch_every;
    sq_corpus  *offpath;
    const char *offpath_file;
} sq_dynstats_params;

sq_dynstats_params sq_dynstats_default_params(void);

/* The statistics in the estimator's pass (docs/estimator.md, "The dynamic-tree statistics"):
 * sq_dynstats_begin plans the samples of one or more corpora (corpora[f], keys[f] as in
 * sq_accept_run) for the configurations cfg[0..n_cfg) (specinfer ones are skipped; the budget is
 * per corpus) and sets *out to NULL when no configuration qualifies or max_samples is 0. For each
 * corpus f, sq_accept_run with the same cfg and params.hook = sq_dynstats_hook(ds, f) computes
 * its sampled rows in its workers (each row read and decoded once; the softmaxes of the curves
 * reused). sq_dynstats_finish then reads the sampled rows' tokens, writes params->branches, adds
 * the off-path pool of `offpath` (params->offpath_file names it; may be NULL) and returns the
 * "dynamic" object in *out. The corpora and keys must outlive ds. */
typedef struct sq_dynstats sq_dynstats;
int sq_dynstats_begin(sq_corpus *const *corpora, const uint64_t *keys, int n_files,
                      const sq_accept_config *cfg, int n_cfg, const sq_dynstats_params *params,
                      sq_dynstats **out, sq_error *err);
const sq_accept_hook *sq_dynstats_hook(sq_dynstats *ds, int file);
int sq_dynstats_finish(sq_dynstats *ds, sq_corpus *offpath, cJSON **out, sq_error *err);
void sq_dynstats_free(sq_dynstats *ds);

/* The same statistics by a pass of their own over the sampled rows only (read segment by
 * segment, the distributions computed here; params->offpath as `offpath` above): the same bits
 * as the hooked pass (tests compare them). *out NULL when off, as above. */
int sq_dynstats_run(sq_corpus *const *corpora, const char *const *files, const uint64_t *keys,
                    int n_files, const sq_accept_config *cfg, int n_cfg,
                    const sq_dynstats_params *params, cJSON **out, sq_error *err);

/* The draft's K best tokens at temperature 1 (K <= SQ_DYNSTATS_MAX_TOPK), best first, ties to
 * the lower id: their probabilities (as sq_accept_probs(d, V, 1, 1) gives them) into out and their
 * ids into ids (ranks past V: 0 and -1). scratch: V doubles; ws: (V, any W). */
void sq_dynstats_draft_topk(const float *d, int V, int K, double *scratch, sq_accept_ws *ws,
                            double *out, int *ids);

/* The statistics of several curve files' "dynamic" objects as one (sequoia-accept --merge): the
 * samples concatenated in input order (each corpus kept its own budget, so this equals one run over
 * all the corpora), the calibration recomputed. Every object is first checked as the planner
 * checks it (sq_dynstats_check, libsequoia/format/dynstats.h), so that a bad shard is named
 * instead of the merged file being refused later; every object must also hold "seed" and
 * "corpora" and have the same topk, seed and configurations (SQ_EDATA naming the file
 * otherwise). */
int sq_dynstats_merge(const cJSON *const *objs, const char *const *files, int n, cJSON **out,
                      sq_error *err);

#endif
