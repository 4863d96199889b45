/* Tree speculative decoding driven by a plan (docs/design.md §8), and plain target-only decoding.
 *
 * The sequence S (prompt + generated) is shared by both models. At the start of a step the
 * target has committed S[0 .. len-2] and the root of the tree is S[len-1], the last accepted
 * token. One step:
 *   1. the draft reads the tokens it has not seen (the root and whatever the previous step
 *      accepted past the nodes it had already fed) in one forward: the root's distribution Q;
 *   2. the draft grows the tree level by level as the plan says: the children of every node of
 *      level l are proposed from that node's Q (draft top-k for greedy/top-k, drawn without
 *      replacement for stochastic, with replacement for specinfer), then one draft forward
 *      over the nodes of level l+1 that have children (tree mask over the pending tokens)
 *      yields their Q; leaves are never fed to the draft;
 *   3. the target reads all n tree nodes in one forward with the tree mask;
 *   4. the verifier walks from the root (libsequoia/verify/verify.h);
 *   5. both contexts commit only the accepted path (KV compaction); the bonus token becomes the
 *      next root.
 * A step produces between 1 and depth tokens. */
#ifndef SQ_RUNTIME_SPECDEC_H
#define SQ_RUNTIME_SPECDEC_H

#include <stdint.h>

#include "libsequoia/base/error.h"
#include "libsequoia/format/plan.h"
#include "runtime/model.h"
#include "libsequoia/verify/verify.h"

typedef struct sq_specdec_params {
    sq_mode         mode;
    double          temperature;   /* ignored for greedy (argmax)                         */
    double          top_p;         /* 1: no nucleus truncation                            */
    uint64_t        seed;
    int             max_context;   /* tokens of S the caches hold; 0: the smaller of the
                                      two models' max_position_embeddings                  */
    sq_backend_kind backend;
    int             threads;       /* 0: all cores                                         */
    sq_weight_dtype dtype;         /* weights of both contexts (AUTO: the backend's own)   */
    int             offload;       /* CUDA: stream the target's and the draft's weights
                                      from pinned host memory layer by layer               */
    int             check_attention; /* each step also runs a plain causal forward of the
                                      target over every node's root path and records the
                                      largest logit difference (slow; for validation)       */
} sq_specdec_params;

sq_specdec_params sq_specdec_default_params(void);

/* What one step did. */
typedef struct sq_step_info {
    int    tokens;          /* tokens produced: accepted nodes + the bonus token           */
    int    visits;          /* nodes the verifier stood on (= tokens)                      */
    int   *visit_children;  /* (depth) children of the i-th visited node                   */
    int   *visit_rank;      /* (depth) rank accepted there, 0 when none (bonus drawn)      */
    double draft_ms, target_ms, verify_ms;
    /* finer timing of the same step: the time inside the draft's and the target's forwards,
     * the commit of both caches (KV compaction) and the whole step; everything in step_ms
     * outside the two forwards is the step's own work (proposals, verification, bookkeeping,
     * compaction) */
    double draft_forward_ms, target_forward_ms, commit_ms, step_ms;
    double attn_max_diff;   /* with check_attention: max |tree - path| logit difference    */
} sq_step_info;

typedef struct sq_specdec sq_specdec;

/* Checks that the two models share a vocabulary, that the plan's nodes fit it (no node with
 * more children than tokens unless candidates are drawn with replacement), and allocates the
 * contexts. Errors: SQ_EDATA naming the plan or the model, SQ_ESOFTWARE (memory). */
int sq_specdec_new(const sq_model *draft, const sq_model *target, const sq_plan *plan,
                   const sq_specdec_params *params, const char *plan_file, sq_specdec **out,
                   sq_error *err);
void sq_specdec_free(sq_specdec *sd);

int sq_specdec_vocab(const sq_specdec *sd);
int sq_specdec_max_context(const sq_specdec *sd);
int sq_specdec_depth(const sq_specdec *sd);   /* tree levels, root included */

/* Turns the per-step tree attention check (params.check_attention) on or off. */
void sq_specdec_set_check_attention(sq_specdec *sd, int on);

/* Reseeds the generator of the verifier (and of target-only sampling). */
void sq_specdec_seed(sq_specdec *sd, uint64_t seed);

/* Resets both contexts and reads the prompt (n >= 1 tokens): both models commit S[0..n-2].
 * Errors: SQ_EDATA for an id outside the vocabulary, SQ_EUSAGE when the prompt plus one tree
 * does not fit the context. */
int sq_specdec_start(sq_specdec *sd, const int32_t *prompt, int n, sq_error *err);

/* One speculation step; out receives info->tokens tokens (capacity: the tree depth). info may
 * be NULL. Errors: SQ_EUSAGE when the context is full; model errors as they come. */
int sq_specdec_step(sq_specdec *sd, int32_t *out, sq_step_info *info, sq_error *err);

/* Sequence length so far (prompt + generated). */
int sq_specdec_length(const sq_specdec *sd);

/* Runs steps from the prompt until max_new tokens are out (the last step's extra tokens are
 * dropped from out but counted in step_tokens). out: (max_new); step_tokens: (max_new) tokens
 * per step, *steps of them; infos, when not NULL, (max_new) per-step infos whose arrays the
 * caller frees with sq_step_info_clear. */
int sq_specdec_generate(sq_specdec *sd, const int32_t *prompt, int n, int max_new, int32_t *out,
                        int *step_tokens, int *steps, sq_step_info *infos, sq_error *err);

/* Plain autoregressive decoding with the target alone (one token per forward): argmax for
 * greedy, otherwise a draw from P after temperature and top-p (from the generator reseeded
 * with `seed`). out: (max_new). */
int sq_specdec_autoregressive(sq_specdec *sd, const int32_t *prompt, int n, int max_new,
                              uint64_t seed, int32_t *out, sq_error *err);

/* The target's distribution (after temperature/top-p, one-hot for greedy) of the next token
 * after `ctx` (n >= 1 tokens), from a plain causal forward. probs: (vocab). */
int sq_specdec_target_probs(sq_specdec *sd, const int32_t *ctx, int n, double *probs,
                            sq_error *err);

void sq_step_info_clear(sq_step_info *info);

/* ---- a batch: B sequences decoded together with one plan (serving) ----------------------------
 *
 * B decoders, each with its own draft and target contexts (KV caches), sequence and verifier
 * generator, step in lockstep: the catch-up forward and every level's forward of the draft, and
 * the target's tree forward, are each one sq_context_forward_batch over the sequences still
 * running, so the weights are read once per forward for the whole batch; proposals,
 * verification and commits are per sequence, exactly as sq_specdec_step does them. Every
 * sequence therefore produces what it would alone, from the same generator state (token for
 * token for greedy, up to the products' float rounding). Sequence k's generator starts from
 * sq_specdec_batch_seed_of(seed, k). */
typedef struct sq_specdec_batch sq_specdec_batch;

/* Errors as sq_specdec_new; SQ_EUSAGE when the backend has no batched forward and B > 1 (both
 * the CPU and the CUDA backend have one), or
 * when B decoders' caches would not fit in memory (the message gives the bytes needed). */
int sq_specdec_batch_new(const sq_model *draft, const sq_model *target, const sq_plan *plan,
                         const sq_specdec_params *params, const char *plan_file, int B,
                         sq_specdec_batch **out, sq_error *err);
void sq_specdec_batch_free(sq_specdec_batch *bt);

int sq_specdec_batch_size(const sq_specdec_batch *bt);
/* Sequence k's decoder (to seed it, read its length, or run it alone). */
sq_specdec *sq_specdec_batch_member(sq_specdec_batch *bt, int k);
uint64_t sq_specdec_batch_seed_of(uint64_t seed, int k);
/* Reseeds sequence k's generator with sq_specdec_batch_seed_of(seed, k), for every k. */
void sq_specdec_batch_seed(sq_specdec_batch *bt, uint64_t seed);

/* Bytes of KV caches and scratch that B decoders of this plan and these models take (an
 * estimate that leaves out the mapped weights). */
double sq_specdec_batch_bytes(const sq_model *draft, const sq_model *target, const sq_plan *plan,
                              const sq_specdec_params *params, int B);

/* Starts sequence k on prompts[k] (n[k] >= 1 tokens; lengths may differ). */
int sq_specdec_batch_start(sq_specdec_batch *bt, const int32_t *const *prompts, const int *n,
                           sq_error *err);

/* One step of every sequence k with active[k] != 0 (NULL: all). out[k] (capacity: the depth)
 * receives ntok[k] tokens (0 for an inactive sequence); info, when not NULL, (B) per-sequence
 * step infos (the times are the batch step's: draft_ms, target_ms = target_forward_ms,
 * verify_ms and step_ms; draft_forward_ms and commit_ms are not timed in a batch and stay 0). */
int sq_specdec_batch_step(sq_specdec_batch *bt, const int *active, int32_t *const *out,
                          int *ntok, sq_step_info *info, sq_error *err);

/* Runs batch steps from the prompts until every sequence has max_new tokens; a sequence that
 * has them leaves the batch (the others go on in a smaller one). out[k]: (max_new). steps[k]:
 * the steps sequence k took; *batch_steps: batch steps in all. infos, when not NULL, is
 * (B, max_new) per-sequence step infos, row k at infos + k * max_new. */
int sq_specdec_batch_generate(sq_specdec_batch *bt, const int32_t *const *prompts, const int *n,
                              int max_new, int32_t *const *out, int *steps, int *batch_steps,
                              sq_step_info *infos, sq_error *err);

/* Plain decoding of the batch with the target alone: one batched forward of one token per
 * sequence per step (argmax for greedy, else a draw from sequence k's generator reseeded with
 * sq_specdec_batch_seed_of(seed, k)). out[k]: (max_new). */
int sq_specdec_batch_autoregressive(sq_specdec_batch *bt, const int32_t *const *prompts,
                                    const int *n, int max_new, uint64_t seed,
                                    int32_t *const *out, sq_error *err);

#endif
