/* Estimating acceptance vectors from a draft/target corpus (docs/design.md §5, §6).
 *
 * At each corpus position t the target's distribution P_t and the draft's Q_t (after temperature
 * and top-p) give a per-position vector a(t) = (a_1(t) .. a_W(t)), a_k(t) = the probability that
 * the k-th child tried by the verifier is the accepted one:
 *  - greedy:     a_k = 1[argmax P = k-th draft token]                          (exact)
 *  - topk:       a_k = P(k-th draft token)                                     (exact)
 *  - stochastic: Sequoia, candidates drawn from Q WITHOUT replacement (Gumbel-top-W), then the
 *                residual recursion, Rao-Blackwellised over the accept/reject coins:
 *                  a_k = (1 - Σ_{j<k} a_j) · min(1, R(x_k) / Q'(x_k)),
 *                  on rejection R <- norm(max(R - Q', 0)), Q'(x_k) <- 0, Q' <- norm(Q')
 *  - specinfer:  the same with candidates drawn WITH replacement and Q' = Q throughout.
 * The sampled modes average `samples` independent draws per position.
 *
 * The curve is p_k = Σ_t a_k(t) / #positions. Positions of one sequence are correlated, so the
 * standard errors treat whole sequences ("units") as the independent observations: with Y_uk =
 * Σ_{t in u} a_k(t) and n_u the positions of unit u, the sufficient statistics
 *      U, Σn_u, Σn_u², Σ_u Y_uk, Σ_u n_u Y_uk, Σ_u Y_uj Y_uk
 * are sums over units, so shards merge exactly by addition, and they give the sequence-level
 * (cluster) covariance of the ratio estimator,
 *      Cov(p_j, p_k) = U/(U-1) · Σ_u (Y_uj - p_j n_u)(Y_uk - p_k n_u) / (Σ n_u)²,
 * which is the variance of resampling whole sequences with replacement (the sequence bootstrap)
 * to first order. A corpus holding a single sequence is cut into SQ_ACCEPT_BATCHES contiguous
 * batches instead (batch means).
 *
 * Random streams: every (position, configuration) gets its own gsl_rng (mt19937) seeded from a
 * hash of (seed, corpus key, row, mode, temperature, top-p), so a result depends neither on the
 * number of threads, nor on the other configurations computed in the same run, nor on the other
 * corpora: a run over shards A and B equals the merge of a run over A and a run over B. */
#ifndef SQ_ACCEPT_ACCEPT_H
#define SQ_ACCEPT_ACCEPT_H

#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>
#include <gsl/gsl_rng.h>

#include "libsequoia/base/error.h"
#include "libsequoia/format/corpus.h"
#include "libsequoia/format/mode.h"
#include "libsequoia/verify/rule.h"

#define SQ_ACCEPT_MAX_WIDTH 256        /* W: the covariance statistics hold W² numbers  */
#define SQ_ACCEPT_MAX_SAMPLES 1000000  /* draws per position                            */
#define SQ_ACCEPT_MAX_CONFIGS 256      /* (mode, temperature, top-p) triples in one run  */
#define SQ_ACCEPT_BATCHES 32           /* batch-means units of a single-sequence corpus  */
#define SQ_ACCEPT_MAX_DEPTHS 64        /* rows of p_by_depth the estimator writes        */

/* One curve to estimate. The modes, their names and which are sampled (average random draws per
 * position) are libsequoia/format/mode.h's. */
typedef struct sq_accept_config {
    sq_mode mode;
    double temperature;   /* >= 0; 0 only with greedy (which ignores it)   */
    double top_p;         /* (0, 1]                                        */
} sq_accept_config;

/* Checks a configuration (SQ_EUSAGE with a message naming the option). */
int sq_accept_config_check(const sq_accept_config *cfg, sq_error *err);

/* "stochastic@T0.6", "stochastic@T0.6@p0.9" (top-p < 1), "greedy@T0". */
void sq_accept_config_name(const sq_accept_config *cfg, char *buf, size_t size);

/* ---- per-position maths ------------------------------------------------------------------- */

/* Scratch memory for the functions below, for vocabularies up to V and widths up to W. */
typedef struct sq_accept_ws sq_accept_ws;
sq_accept_ws *sq_accept_ws_new(int V, int W);
void sq_accept_ws_free(sq_accept_ws *ws);

/* The distributions P and Q and the orders below are the verification rule's
 * (libsequoia/verify/rule.h: sq_probs_from_logits, sq_argmax_f, sq_draft_topk), so that the
 * estimate describes what the runtime's verifier does. */

/* sq_probs_from_logits with the workspace's scratch. */
int sq_accept_probs(const float *logits, int V, double temperature, double top_p,
                    double *probs, sq_accept_ws *ws);

/* Greedy: a(W) = 1 at the rank of argmax(target) among the draft's top-W, 0 elsewhere. */
void sq_accept_greedy(const float *target, const float *draft, int V, int W, double *a,
                      sq_accept_ws *ws);

/* Top-k sampling: a_k = P(k-th draft token), P the target's distribution. */
void sq_accept_topk(const double *P, const float *draft, int V, int W, double *a,
                    sq_accept_ws *ws);

/* Draws min(W, support of Q) candidates from Q without replacement (exponential race / Gumbel
 * top-W: the W smallest E_i / Q_i, E_i ~ Exp(1)), in draw order. O(V) plus a heap of W.
 * Returns how many. */
int sq_accept_draw_without(const double *Q, int V, int W, gsl_rng *rng, int *cand,
                           sq_accept_ws *ws);

/* Two such draws from the same Q in one pass (issue 27): the first into cand (W, rng, ws; the
 * return value), the second into cand2 (W2, rng2, ws2 != ws; *n2). Each gives the bits it gives
 * alone; the two chains of the exponential jumps overlap in the processor. */
int sq_accept_draw_without2(const double *Q, int V, int W, gsl_rng *rng, int *cand,
                            sq_accept_ws *ws, int W2, gsl_rng *rng2, int *cand2,
                            sq_accept_ws *ws2, int *n2);

/* Draws W i.i.d. candidates from Q, in draw order. Returns W (0 when Q is all zero). */
int sq_accept_draw_with(const double *Q, int V, int W, gsl_rng *rng, int *cand,
                        sq_accept_ws *ws);

/* The Rao-Blackwellised acceptance vector a(W) given the n <= W candidates, for the residual
 * recursion without (with_replacement = 0) or with (1) replacement. Entries past n are 0.
 * Σ a_k <= 1; 1 - Σ a_k is the probability that every candidate is rejected. */
void sq_accept_residual(const double *P, const double *Q, int V, const int *cand, int n,
                        int with_replacement, double *a, int W, sq_accept_ws *ws);

/* a(W) for one position and configuration, averaged over `samples` draws for the sampled
 * modes (P, Q: the distributions after temperature and top-p; greedy uses the logits). */
void sq_accept_position(const sq_accept_config *cfg, const float *target, const float *draft,
                        const double *P, const double *Q, int V, int W, int samples,
                        gsl_rng *rng, double *a, sq_accept_ws *ws);

/* A second draw made along with a curve's (sq_accept_hook.draw): the hook sets rng (seeded),
 * width, cand (width ints) and ws (not the curve's); sq_accept_run sets n, how many were drawn. */
typedef struct sq_accept_draw {
    gsl_rng      *rng;
    int           width;
    int          *cand;
    sq_accept_ws *ws;
    int           n;
} sq_accept_draw;

/* sq_accept_position of a stochastic configuration with one sample (cfg->mode
 * SQ_MODE_STOCHASTIC, samples 1), the same bits, its draw made in one pass with the draw `d`
 * (sq_accept_draw_without2). */
void sq_accept_position_with_draw(const double *P, const double *Q, int V, int W, gsl_rng *rng,
                                  double *a, sq_accept_ws *ws, sq_accept_draw *d);

/* The second half of sq_accept_position for a stochastic configuration with one sample whose
 * candidates cand[0..n) were drawn already (with sq_accept_draw_without or ..._without2): the
 * same bits as sq_accept_position with that draw. */
void sq_accept_position_drawn(const double *P, const double *Q, int V, int W, const int *cand,
                              int n, double *a, sq_accept_ws *ws);

/* ---- sufficient statistics ---------------------------------------------------------------- */

typedef struct sq_accept_stats {
    int       width;      /* W                                                       */
    long long units;      /* U: independent units (sequences, or batches)            */
    long long sequences;  /* corpus sequences behind the statistics                  */
    double    sum_n;      /* Σ n_u: positions                                        */
    double    sum_n2;     /* Σ n_u²                                                  */
    double   *sum_y;      /* (W) Σ_u Y_uk                                            */
    double   *sum_ny;     /* (W) Σ_u n_u Y_uk                                        */
    double   *sum_yy;     /* (W, W) Σ_u Y_uj Y_uk                                    */
} sq_accept_stats;

sq_accept_stats *sq_accept_stats_new(int width);
void sq_accept_stats_free(sq_accept_stats *s);

/* Adds one unit of n positions whose per-rank sums are y(W). */
void sq_accept_stats_add_unit(sq_accept_stats *s, double n, const double *y);

/* dst += src (same width). */
void sq_accept_stats_merge(sq_accept_stats *dst, const sq_accept_stats *src);

/* p(W) = Σ Y / Σ n; se(W) (may be NULL) the sequence-level standard errors. Returns 1 when the
 * standard errors exist (at least two units), 0 otherwise (se is then zero-filled). */
int sq_accept_stats_estimate(const sq_accept_stats *s, double *p, double *se);

/* cov(W, W) of the estimate (zero when fewer than two units). */
void sq_accept_stats_cov(const sq_accept_stats *s, double *cov);

/* {"units", "sum_n", "sum_n2", "sum_y", "sum_ny", "sum_yy"} */
cJSON *sq_accept_stats_to_json(const sq_accept_stats *s);
int sq_accept_stats_from_json(const cJSON *obj, int width, const char *file, const char *ctx,
                              sq_accept_stats **out, sq_error *err);

/* ---- over a corpus -------------------------------------------------------------------------- */

enum { SQ_ACCEPT_READ_AUTO = 0, SQ_ACCEPT_READ_CHUNKS = 1, SQ_ACCEPT_READ_ROWS = 2 };

typedef struct sq_accept_params {
    int      width;        /* W >= 1                                                  */
    int      samples;      /* draws per position for the sampled modes, >= 1          */
    uint64_t seed;
    int      threads;      /* worker threads; 0 = the online CPUs                     */
    size_t   batch_bytes;  /* logits per read buffer, rounded to whole HDF5 chunks of
                              the corpus (two buffers are used)                       */
    /* How the corpus is read (docs/estimator.md "Reading"); the statistics are the same bits
     * whichever is used. AUTO: mapped chunks where the file allows it, else chunks fetched by
     * HDF5, else rows read by HDF5. The others force a path where the corpus allows it (tests
     * and benchmarks compare them): CHUNKS fetches chunks with H5Dread_chunk, ROWS reads rows
     * with sq_corpus_read. */
    int      read;         /* SQ_ACCEPT_READ_*                                         */
    /* Acceptance by depth (docs/estimator.md, "Acceptance by depth"): with depths D >= 1,
     * depth_stats[j·D + d] (width W) also receive the statistics of depth d + 1 for cfg[j]:
     * each position weighted by the probability that the d positions before it in its
     * sequence each accepted a child (the product of their 1 - reject), so depth 1 is the
     * plain curve. 0: none (depth_stats is not used). */
    int      depths;       /* 0 .. SQ_ACCEPT_MAX_DEPTHS                                */
    sq_accept_stats **depth_stats;
    /* Called by the calling thread after each batch, once all its rows are handed to the
     * workers and before the next batch is (its last rows may still be computing); may be
     * NULL. */
    void   (*progress)(void *user, int64_t done, int64_t total);
    void    *user;
    /* More work on some rows, in the same pass (the dynamic-tree statistics, dynstats.h: each
     * row read and decoded once, in the workers); NULL: none. */
    const struct sq_accept_hook *hook;
} sq_accept_params;

/* A hook into sq_accept_run's workers. begin(user, threads) is called once before the workers
 * start (threads: how many may call row at the same time, each with its own index in
 * [0, threads)); a non-zero return (an sq_status, the message in *err) stops the run. Then, for
 * every row r with wants(user, r): row(user, thread, r, -1, t, d, NULL, NULL) before the row's
 * curves (t, d: its logits, V each), and row(user, thread, r, j, t, d, P, Q) after the curve of
 * each configuration j, with P and Q the target's and the draft's distributions at cfg[j]'s
 * temperature and top-p exactly as sq_accept_probs computed them for that curve, or NULL where
 * the curve did not need them (P for greedy; Q for greedy and topk). A failure inside row is
 * the hook's to record and report. */
typedef struct sq_accept_hook {
    int  (*begin)(void *user, int threads, sq_error *err);
    int  (*wants)(void *user, int64_t row);
    void (*row)(void *user, int thread, int64_t row, int j, const float *target,
                const float *draft, const double *P, const double *Q);
    /* May be NULL. Before the curve of configuration j of a wanted row, where that curve is
     * one draw without replacement (stochastic, samples 1): a draw of the hook's own to make in
     * the same pass (sq_accept_draw; issue 27), or NULL. The row call for j that follows then
     * finds its n set. */
    sq_accept_draw *(*draw)(void *user, int thread, int64_t row, int j);
    void  *user;
} sq_accept_hook;

/* width 16, samples 1, seed 0, threads 0, batch_bytes 16 MiB, read AUTO, depths 0. */
sq_accept_params sq_accept_default_params(void);

/* Streams the whole corpus and adds it to stats[i] (width params->width) for cfg[i] (and to
 * params->depth_stats, see above).
 * `key` identifies the corpus in the random streams (e.g. the first bytes of its SHA-256);
 * `file` names it in messages. Memory: 2·batch_bytes + threads·O(V) + O(n_cfg·W²).
 * The worker threads live for the whole run: the calling thread reads the next batch while they
 * compute, and hands it to them as soon as every row of the current one is taken, so that a
 * worker never waits for another's last row (docs/estimator.md, "Speed"). */
int sq_accept_run(sq_corpus *corpus, const char *file, uint64_t key,
                  const sq_accept_config *cfg, int n_cfg, const sq_accept_params *params,
                  sq_accept_stats **stats, sq_error *err);

/* Unit boundaries used for a corpus of `rows` positions in `sequences` sequences with the given
 * offsets: the non-empty sequences, or SQ_ACCEPT_BATCHES contiguous batches when there is only
 * one sequence. Returns the number of units; *bounds (malloc'd, units + 1 entries). */
int64_t sq_accept_units(const int64_t *offsets, int64_t sequences, int64_t rows,
                        int64_t **bounds);

#endif
