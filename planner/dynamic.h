/* The engines' dynamic trees (issue 26): the envelope rules, the prediction of tokens per step
 * from corpus statistics, and each engine's cost per round (docs/planning.md, "Dynamic trees").
 *
 * The algorithm, as both engines implement it (SGLang python/sglang/srt/speculative/
 * eagle_utils.py select_top_k_tokens and organize_draft_results; TensorRT-LLM
 * tensorrt_llm/_torch/speculative/eagle3_dynamic_tree.py _select_topk_draft_tokens and
 * _resample_final_tokens, whose kernels are ported from SGLang's):
 *   level 1: the root's K most probable draft tokens, score = draft probability;
 *   level l = 2..L: each of the K kept nodes of level l-1 gets its K most probable children,
 *     score = parent score x draft probability (the product along the path); all K^2 are
 *     candidates, the K best become the kept nodes of level l;
 *   the tree: the N - 1 best of all K + (L-1) K^2 candidates by score (torch.topk, then sorted
 *     by candidate index), plus the root.
 * Draft probabilities are the softmax of the draft's logits at temperature 1 (SGLang's
 * draft_forward, TensorRT-LLM's _sample_softmax_topk).
 *
 * Envelope L,K,N (i26-contract): L draft steps (levels below the root), K top-K per kept node,
 * N nodes including the root. */
#ifndef SQ_PLANNER_DYNAMIC_H
#define SQ_PLANNER_DYNAMIC_H

#include <stdint.h>

#include <cjson/cJSON.h>

#include "libsequoia/base/api.h"
#include "libsequoia/base/error.h"
#include "libsequoia/format/dynplan.h"
#include "libsequoia/format/profile.h"
#include "planner/export.h"
#include "planner/hardware.h"

SQ_BEGIN_DECLS

/* the planner's limits (the plan file's, libsequoia/format/dynplan.h), not the engines' rules */
#define SQ_DYN_MAX_STEPS SQ_DYNPLAN_MAX_STEPS  /* L                                      */
#define SQ_DYN_MAX_TOPK SQ_DYNPLAN_MAX_TOPK    /* K (the corpus statistics keep 16 ranks) */
#define SQ_DYN_MAX_NODES SQ_DYNPLAN_MAX_NODES  /* N                                      */
/* The replay's buffers (SQ_DYN_METHOD_REPLAY): every trial keeps its ranks, 2 L^2 + 5 bytes,
 * for passes x samples trials (--trials rounded up to whole passes over the samples). A larger
 * request is SQ_EUSAGE before anything is allocated (docs/robustness.md, "Limits"). */
#define SQ_DYN_MAX_REPLAY_BYTES (2ull << 30)

/* The engine rules of an envelope (SQ_EUSAGE, the message naming the rule and the engine;
 * `what` names the input, e.g. "--envelope 3,4,20"): libsequoia/format/dynplan.h,
 * sq_dynplan_envelope_check, which states and cites them (the runtime and the exports call that
 * one too), then the planner's limits SQ_DYN_MAX_*. Any engine other than sglang and
 * trtllm-dynamic is SQ_EUSAGE. */
SQ_API
int sq_dyn_envelope_check(sq_engine e, int steps, int topk, int nodes, const char *what,
                          sq_error *err);

/* ---- corpus statistics (planner/accept/dynstats.h writes them) ------------------------------ */

typedef struct sq_dyn_samples {
    int     K;         /* ranks per sample                                                */
    int     n;         /* samples (corpus positions)                                      */
    int     n_off;     /* off-path contexts ("offpath_topk"), 0 when none                 */
    double *q;         /* (n + n_off, K) the draft's sorted top-K probabilities: the
                          samples', then the off-path contexts'                           */
    double *a;         /* (n, K) acceptance of each rank under the chosen configuration   */
    int    *next;      /* (n) the sample of the next corpus position; -1 at a segment end  */
    int    *remain;    /* (n) how many successors follow in the segment                   */
    int    *text_rank; /* (n) rank of the text's next token among the K, -1 outside; NULL
                          when the corpus had no tokens ("next_rank")                     */
    char    config[128];
} sq_dyn_samples;

/* The statistics of configuration `config` (a curve name: "greedy@T0", "topk@T1",
 * "stochastic@T0.6") from a curves file's JSON. Errors (SQ_EDATA) name the file and the key:
 * a file without "dynamic" (estimated before issue 26, or with --dynamic-samples 0), a
 * configuration it lacks (the message lists those it has), malformed fields. */
SQ_API
int sq_dyn_samples_from_json(const cJSON *curves, const char *file, const char *config,
                             sq_dyn_samples **out, sq_error *err);

/* From arrays (tests, synthetic cases): n samples in segments of the given lengths (summing to
 * n), q and a (n, K) copied. */
SQ_API
int sq_dyn_samples_new(int n, int K, const double *q, const double *a, const int *seg_len,
                       int n_segs, sq_dyn_samples **out, sq_error *err);
SQ_API
void sq_dyn_samples_free(sq_dyn_samples *s);

/* ---- prediction ------------------------------------------------------------------------------
 *
 * Monte-Carlo over the samples (docs/planning.md, "Dynamic trees"): a trial picks a root
 * position t; the verifier's path follows the text (t, t+1, ...): at each node of the path the
 * accepted rank is drawn from that position's acceptance vector (greedy: the target's argmax
 * rank; topk: rank r with probability p_target(r-th draft token); none with the rest), and the
 * node's children carry that position's draft probabilities. Nodes off the path (siblings and
 * their subtrees, which are never accepted but compete for the K kept slots and the N - 1
 * places) take the draft probabilities of an off-path context drawn uniformly from the
 * statistics' "offpath_topk" (the draft after a token the text did not take), or, when the
 * statistics have none, of a sample drawn uniformly. The
 * engine's algorithm then builds the tree, and the accepted length is how far the path stays
 * inside it. Tokens per step = 1 + E[accepted length]. */

/* Where the verified path goes at each of its nodes:
 *   DRAW: a rank drawn from the position's acceptance vector (any verifier, any corpus);
 *   TEXT: the rank of the text's next token (-1: none of the K). For topk at temperature T on
 *     a corpus of the target's own samples at T, and for greedy on its greedy text, this is a
 *     draw from the same distribution that also keeps its correlation with the contexts that
 *     follow; it needs the statistics' "next_rank". Not for stochastic (its accepted child is
 *     a draw index, not a token). */
enum { SQ_DYN_PATH_DRAW = 0, SQ_DYN_PATH_TEXT = 1 };

/* How steps are averaged:
 *   REPLAY (default): every position is simulated as a root (trials / positions times, at
 *     least once); then decoding is replayed along each run of consecutive positions: from the
 *     run's first position, a step at root x emits accepted + 1 tokens and the next root is x
 *     plus that, until the run ends (the last step's tokens past the end count too, as
 *     sequoia-run's report counts them); tokens/step = tokens over steps. Decoding's roots are not uniform over the text (a long accepted run skips the
 *     positions inside it), which moves tokens/step by a few percent either way; the runs should
 *     be as long as the decoded sequences (sequoia-accept --dynamic-segment).
 *   ROOTS: trial t starts at the t-th of the positions with L - 1 successors, in turn;
 *     tokens/step = 1 + the mean accepted length (the expectation at a uniform root). */
enum { SQ_DYN_METHOD_REPLAY = 0, SQ_DYN_METHOD_ROOTS = 1 };

typedef struct sq_dyn_predict_params {
    int      trials;   /* simulated steps (default 20000)                           */
    uint64_t seed;     /* default 1                                                  */
    int      path;     /* SQ_DYN_PATH_* (default DRAW)                               */
    int      method;   /* SQ_DYN_METHOD_* (default REPLAY)                           */
} sq_dyn_predict_params;

SQ_API
sq_dyn_predict_params sq_dyn_predict_default_params(void);

/* Every envelope (l, K, N) with l <= L and N <= max_nodes from one set of trials:
 * E[(l - 1) * (max_nodes + 1) + N] (l = 1..L, N = 2..max_nodes; other entries 0) the expected
 * tokens per step and se[...] (may be NULL) its Monte-Carlo standard error. Every such
 * envelope is evaluated, whether or not an engine allows it (sq_dyn_envelope_check).
 * p_len (may be NULL): (L + 1) entries for the envelope (L, K, max_nodes): P(accepted length
 * >= d), d = 0..L. Errors: SQ_EUSAGE for K above the samples' ranks or bounds outside the
 * limits. */
SQ_API
int sq_dyn_predict_grid(const sq_dyn_samples *s, int L, int K, int max_nodes,
                        const sq_dyn_predict_params *p, double *E, double *se, double *p_len,
                        sq_error *err);

/* One envelope: expected tokens per step, its standard error, and P(accepted length >= d),
 * d = 0..L, into p_len (L + 1 entries; may be NULL). */
SQ_API
int sq_dyn_predict(const sq_dyn_samples *s, int L, int K, int N, const sq_dyn_predict_params *p,
                   double *expected, double *se, double *p_len, sq_error *err);

/* The same two, with sequoia-run's expected draft catch-up per step from the same trials
 * (catchup: as E, or one number; may be NULL): after a step that accepted a nodes of a tree of
 * l levels, runtime/specdec.c's draft reads 1 token (the bonus) plus 1 when the last accepted
 * node is one it did not read: a node of level l, or one not among the K kept nodes of its
 * level (runtime/dyntree.c reads the root, then the K kept nodes of levels 1 .. l - 1). Averaged
 * as E is (tokens over steps: the mean over steps). docs/planning.md, "Two cost models". */
SQ_API
int sq_dyn_predict_grid_catchup(const sq_dyn_samples *s, int L, int K, int max_nodes,
                                const sq_dyn_predict_params *p, double *E, double *se,
                                double *catchup, double *p_len, sq_error *err);
SQ_API
int sq_dyn_predict_catchup(const sq_dyn_samples *s, int L, int K, int N,
                           const sq_dyn_predict_params *p, double *expected, double *se,
                           double *catchup, double *p_len, sq_error *err);

/* ---- cost per round -----------------------------------------------------------------------
 *
 * One round of batch b (times from the profiles at batch b, sq_profile_ms_batch):
 *   sglang:         t_target(b, N) + (L - 1) t_draft(b, K) + t_draft(b, N)
 *                   (verify; L - 1 draft forwards of K tokens a request; the draft's extend
 *                    over the N verified tokens)
 *   trtllm-dynamic: t_target(b, N) + t_draft(b, L + 1) + sum_{i=1..L-1} t_draft(b, i K)
 *                   (its draft re-runs the growing context: (L+1) + K L (L-1)/2 tokens)
 * With no draft profile, every draft forward costs draft_ms (L forwards a round).
 *
 * In-step model (batch 1 and the target profile has a "step" section, sequoia-profile --draft;
 * docs/planning.md, "Dynamic trees"): every forward is priced as decoding runs it
 * (planner/hardware.h sq_hw_forward_ms), the engine's structure kept:
 *   sglang:         T(N) + O(N) + D_first(a) + (L - 1) D_level(K)
 *   trtllm-dynamic: T(N) + O(N) + D_first(a) + sum_{i=1..L-1} D_level(i K)
 * T: the target's verify inside a step, O: the step's own work, D_first: the draft's first
 * forward, over the a tokens accepted last round (sq_dyn_round_ms_accepted's `accepted`, the
 * predicted tokens/step; 0 or sq_dyn_round_ms: the engine's own count, N for SGLang's extend,
 * L + 1 for TensorRT-LLM), D_level: a level's draft forward. target_ms holds T + O. At batch > 1
 * or without a step section, the steady-stream model above.
 *
 * These are the ENGINE's cost; they drive the envelope search. sequoia-run's round
 * (sq_dyn_round_ms_runtime; docs/planning.md, "Two cost models") is the same for both engines,
 * since its draft keeps its cache and reads only the kept nodes:
 *   T(N) + O(N) + (1 + (L - 1) K) X(K) + D_first(c) + (L - 1) D_level(K)
 *                                                      (batch 1 with a step section)
 *   t_target(b, N) + b (1 + (L - 1) K) X(K) + t_draft(b, c) + (L - 1) t_draft(b, K)
 *                                                      (otherwise; no draft profile: L forwards
 *                                                      of draft_ms)
 * c: the expected catch-up (sq_dyn_predict_catchup), 1 to 2 tokens; X(K): one node's expansion
 * by the tree's growth (the step section's "expand" part; 0 without it). target_ms holds it. */
typedef struct sq_dyn_cost {
    double target_ms;
    double draft_ms;
    double round_ms;
} sq_dyn_cost;

SQ_API
int sq_dyn_round_ms(sq_engine e, const sq_profile *target, const sq_profile *draft,
                    double draft_ms, int batch, int L, int K, int N, sq_extrapolate x,
                    sq_dyn_cost *out, sq_error *err);
/* Plain decoding's time per token at batch b: the target's one-token forward, in-step T(1) +
 * O(1) (batch 1 with a step section, planner/hardware.h), else sq_profile_ms_batch. */
SQ_API
int sq_dyn_plain_ms(const sq_profile *target, int batch, sq_extrapolate x, double *ms,
                    sq_error *err);

SQ_API
int sq_dyn_round_ms_accepted(sq_engine e, const sq_profile *target, const sq_profile *draft,
                             double draft_ms, int batch, int L, int K, int N, double accepted,
                             sq_extrapolate x, sq_dyn_cost *out, sq_error *err);

/* sequoia-run's round of envelope L,K,N (above), its draft catching up `catchup` tokens. */
SQ_API
int sq_dyn_round_ms_runtime(const sq_profile *target, const sq_profile *draft, double draft_ms,
                            int batch, int L, int K, int N, double catchup, sq_extrapolate x,
                            sq_dyn_cost *out, sq_error *err);

/* ---- search ----------------------------------------------------------------------------------- */

/* Predictions of every envelope within L <= max_steps, K <= max_topk, N <= max_nodes (one
 * sq_dyn_predict_grid per K), computed once and priced at any batch size. */
typedef struct sq_dyn_grid {
    int     max_steps, max_topk, max_nodes;
    int     trials;
    double *E, *se;   /* [((K - 1) max_steps + L - 1) (max_nodes + 1) + N]                   */
    double *catchup;  /* the same cells: sequoia-run's expected draft catch-up               */
} sq_dyn_grid;

SQ_API
int sq_dyn_grid_new(const sq_dyn_samples *s, int max_steps, int max_topk, int max_nodes,
                    const sq_dyn_predict_params *p, sq_dyn_grid **out, sq_error *err);
SQ_API
void sq_dyn_grid_free(sq_dyn_grid *g);

/* Expected tokens of (L, K, N) in the grid (and its standard error into *se, may be NULL). */
SQ_API
double sq_dyn_grid_at(const sq_dyn_grid *g, int L, int K, int N, double *se);
/* sequoia-run's expected draft catch-up of (L, K, N) in the grid. */
SQ_API
double sq_dyn_grid_catchup(const sq_dyn_grid *g, int L, int K, int N);

typedef struct sq_dyn_choice {
    int    steps, topk, nodes;
    double expected_tokens, se;
    double round_ms, target_ms, draft_ms;
    double tokens_per_second;   /* batch x expected tokens / round                 */
    /* sequoia-run's round of the same envelope (sq_dyn_round_ms_runtime) */
    double catchup;             /* its draft's expected catch-up tokens            */
    double run_round_ms, run_target_ms, run_draft_ms;
    double run_tokens_per_second;
} sq_dyn_choice;

typedef struct sq_dyn_search_params {
    sq_engine          engine;
    int                batch;
    const sq_profile  *target, *draft;
    double             draft_ms;     /* when draft is NULL                            */
    sq_extrapolate     extrapolate;
    sq_cost_model      cost_model;   /* what the search maximises: the engine's round
                                        (default) or sequoia-run's (run_tokens_per_second) */
} sq_dyn_search_params;

/* Every envelope of the grid that the engine allows, priced at the batch size by the engine's
 * cost (sequoia-run's beside it, in the run_* fields): the fastest first into best[0 .. *n_best)
 * (fastest by the model p->cost_model names: tokens_per_second, or run_tokens_per_second)
 * (*n_best at most `cap`), and *plain_tps the rate of plain
 * decoding there (batch / t_target(batch, 1)). Ties go to the smaller N, then L, then K.
 * Errors: the profiles' (a batch size or token count they lack), SQ_EUSAGE when no envelope
 * of the grid keeps the engine's rules. */
SQ_API
int sq_dyn_search(const sq_dyn_grid *g, const sq_dyn_search_params *p, sq_dyn_choice *best,
                  int cap, int *n_best, double *plain_tps, sq_error *err);

SQ_END_DECLS

#endif
