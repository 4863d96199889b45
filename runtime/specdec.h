/* Tree speculative decoding driven by a plan (docs/design.md §8), and plain target-only decoding.
 *
 * The sequence S (prompt + generated) is shared by both models. At the start of a step the
 * target has committed S[0 .. len-2] and the root of the tree is S[len-1], the last accepted
 * token. One step:
 *   1. the draft reads the tokens it has not seen (the root and whatever the previous step
 *      accepted past the nodes it had already fed) in one forward: the root's distribution Q;
 *   2. the tree grows level by level: the grow hook (below; by default the plan's rule) gives
 *      the nodes of level l their children from each node's Q (the plan's rule: draft top-k
 *      for greedy/top-k, drawn without replacement for stochastic, with replacement for
 *      specinfer) and says which children the draft reads ("expanded"), then one draft
 *      forward over the expanded nodes of level l+1 (tree mask over the pending tokens)
 *      yields their Q; leaves are never fed to the draft;
 *   2b. with a prune hook (below), only the nodes it keeps form the verified tree;
 *   3. the target reads all n tree nodes in one forward with the tree mask;
 *   4. the verifier walks from the root (libsequoia/verify/verify.h);
 *   5. both contexts commit only the accepted path (KV compaction); the bonus token becomes the
 *      next root.
 * A step produces between 1 and depth tokens.
 *
 * One body runs these steps for a group of decoders in lockstep (sq_specdec_step_group): every
 * forward of steps 1-3 is one forward over the sequences that have tokens to feed, the rest is
 * per sequence. sq_specdec_step is the group of one, a batch (sq_specdec_batch) the group of its
 * members, so a sequence produces the same tokens alone and in a batch, from the same
 * generator state (token for token for greedy, up to the batched products' float rounding). */
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
    /* end-of-sequence ids (n_eos of them; the array stays the caller's while decoders made
     * with these parameters live): generation stops a sequence at the first of them it
     * produces (sq_specdec_generate, sq_specdec_autoregressive and their batch forms);
     * n_eos 0: never (the default) */
    const int32_t  *eos;
    int             n_eos;
    /* the models' tokenizer length (0: none): a draft and a target whose vocab_size differ are
     * accepted when the rows beyond the shared range are padding (sq_models_check_vocab);
     * decoding then runs over the shared range only (docs/runtime.md, "Vocabularies that
     * differ by padding") */
    int             tokenizer_len;
    /* step infos keep each step's verified tree (sq_step_info's tree_* fields): the parents,
     * tokens and grow-hook scores of its nodes and the accepted path; 0: not kept (the
     * default). sequoia-run sets it for the report of a dynamic tree (docs/runtime.md,
     * "Dynamic trees (SGLang, TensorRT-LLM)") */
    int             record_tree;
} sq_specdec_params;

/* Fills what a sequence stopped at an end-of-sequence id did not generate. */
#define SQ_SPECDEC_NO_TOKEN (-1)

sq_specdec_params sq_specdec_default_params(void);

/* What one step did. In a group (a batch) the times are the group step's, the same for every
 * sequence that took part: its forwards serve them all. */
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
    int    nodes;           /* nodes of this step's tree (the plan's unless a hook shapes it) */
    int    draft_catchup;   /* tokens of the draft's first forward (step 1, its catch-up): the
                               tokens it had not read, 0 for a root-only plan (docs/planning.md,
                               "Two cost models") */
    /* with params.record_tree: the verified tree (after the prune hook, when one is set),
     * breadth-first as the target read it: tree_n = nodes entries of parents (-1 for the
     * root), tokens and scores (what the grow hook recorded), and the accepted path, the
     * nodes below the root that were accepted in order (tree_accepted = tokens - 1 of them);
     * NULL and 0 otherwise. sq_step_info_clear frees them. */
    int      tree_n, tree_accepted;
    int     *tree_parent;
    int32_t *tree_token;
    double  *tree_score;
    int     *tree_path;
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
 * be NULL. Errors: SQ_EUSAGE when the context is full; model errors as they come; the grow
 * hook's. The group of one: sq_specdec_step_group(&sd, 1, NULL, &out, &ntok, info, err). */
int sq_specdec_step(sq_specdec *sd, int32_t *out, sq_step_info *info, sq_error *err);

/* One step of every started decoder sd[k] (k < B) with active[k] != 0 (NULL: all), in lockstep:
 * each forward of the step is one forward over them (sq_context_forward_batch when more than
 * one has tokens to feed). The decoders must be distinct and of the same two models (the
 * batched forward's rule); their plans and hooks may differ. out[k] (capacity: its depth)
 * receives ntok[k] tokens (0 for an inactive decoder); info, when not NULL, (B) per-decoder
 * step infos. What sq_specdec_batch_step does on a batch's members; B = 1 is sq_specdec_step.
 * Errors: SQ_EUSAGE ("sequence k: context full" when B > 1), model and hook errors. */
int sq_specdec_step_group(sq_specdec *const *sd, int B, const int *active, int32_t *const *out,
                          int *ntok, sq_step_info *info, sq_error *err);

/* ---- how the tree grows: the per-level hook --------------------------------------------------
 *
 * In step 2, for l = 0, 1, ..., depth - 2 and as long as level l has expanded nodes, the
 * decoder calls its hook fn(g, l, user, err) with the step's tree so far (levels 0 .. l, every
 * expanded node of level l with its draft logits). The hook gives nodes of level l children
 * with sq_tree_grow_add, node by node in increasing order (each node once, only expanded
 * nodes), and writes each child's token, its score (any number the hook wants to keep, e.g. a
 * path log-probability; 0 if unset) and whether it is expanded (the draft reads it, so it may
 * get children at the next level; never on the deepest level, depth - 1). It may give a node
 * any number of children and leave any node a leaf, so the shape of every level is decided at
 * run time; the plan bounds the tree: at most its node count (sq_tree_grow_capacity) and its
 * depth. The hook returns SQ_OK or an error status (with err set), which ends the step.
 *
 * The default hook is the plan's rule: every node gets the plan's children, proposed as step 2
 * says with sq_verifier_propose, and is expanded when the plan gives it children; the tree is
 * then the plan's, node for node. A hook that draws tokens should draw from
 * sq_tree_grow_verifier's generator, so that a run stays reproducible from its seed; whether
 * its proposals keep the verification lossless is the hook's business (sq_verifier_node checks
 * the children in the order the mode's rank semantics assume: libsequoia/verify/verify.h).
 * Nodes are numbered breadth-first: the root 0, then level by level, the children of a node
 * contiguous, in the order of their parents. */
typedef struct sq_tree_grow sq_tree_grow;

typedef int (*sq_grow_fn)(sq_tree_grow *g, int level, void *user, sq_error *err);

/* The children sq_tree_grow_add made: nodes first .. first + k - 1; the hook fills the arrays
 * (tokens must be set; scores stay 0 and expand 0, a leaf, unless written). */
typedef struct sq_tree_children {
    int      first;
    int32_t *tokens;   /* (k) */
    double  *scores;   /* (k) */
    uint8_t *expand;   /* (k) */
} sq_tree_children;

/* Sets sd's hook (fn NULL: the plan's rule again). */
void sq_specdec_set_grow(sq_specdec *sd, sq_grow_fn fn, void *user);

/* ---- the final pruning: a tree grown wide, verified narrow -------------------------------
 *
 * The engines of dynamic trees (runtime/dyntree.h) choose the nodes the target verifies only
 * after every level has grown: the draft reads a few nodes per level, and of all the nodes
 * grown the best ones by score form the verified tree. A prune hook does that choice. When
 * one is set, after the last level has grown (and before the target's forward) the decoder
 * calls fn(g, user, keep, err) with the whole grown tree (sq_tree_grow_level answers for
 * every level; keep: sq_tree_grow_nodes(g) bytes, all 0); the hook sets keep[u] = 1 for the
 * nodes to verify (the root is always kept). The kept set must be closed under ancestors
 * (SQ_EUSAGE naming the node otherwise). The step then renumbers the kept nodes breadth-first
 * in their grown order (children still contiguous, in their parents' order, siblings in the
 * order the grow hook added them) and the target reads, and the verifier walks, only those;
 * nodes the draft read but the prune dropped are left out of both caches' commit like any node
 * off the accepted path. Without a prune hook (the default) every grown node is verified. */
typedef int (*sq_prune_fn)(sq_tree_grow *g, void *user, uint8_t *keep, sq_error *err);

/* Sets sd's prune hook (fn NULL: none, every grown node is verified). */
void sq_specdec_set_prune(sq_specdec *sd, sq_prune_fn fn, void *user);

/* Node u (of the level being grown, expanded, above every node already given children in this
 * call) gets k >= 1 children. Errors (SQ_EUSAGE, naming the level and the node): any of those
 * conditions broken, or the tree past the plan's node count. A token outside the vocabulary
 * left by the hook fails the step (SQ_EUSAGE). */
int sq_tree_grow_add(sq_tree_grow *g, int u, int k, sq_tree_children *out, sq_error *err);

/* The nodes of `level` (<= the level being grown + 1, whose nodes are the children added so
 * far): their number, *first the first one's index. */
int sq_tree_grow_level(const sq_tree_grow *g, int level, int *first);
int sq_tree_grow_nodes(const sq_tree_grow *g);      /* nodes so far                        */
int sq_tree_grow_capacity(const sq_tree_grow *g);   /* most nodes: the plan's              */
int sq_tree_grow_max_depth(const sq_tree_grow *g);  /* most levels, root included: the plan's */
int sq_tree_grow_vocab(const sq_tree_grow *g);
const sq_specdec_params *sq_tree_grow_params(const sq_tree_grow *g);  /* mode, temperature... */
int sq_tree_grow_parent(const sq_tree_grow *g, int u);      /* -1: the root                 */
int32_t sq_tree_grow_token(const sq_tree_grow *g, int u);
double sq_tree_grow_score(const sq_tree_grow *g, int u);
int sq_tree_grow_expanded(const sq_tree_grow *g, int u);    /* the draft has read u          */
/* The draft's logits at an expanded node u (vocab), NULL otherwise. */
const float *sq_tree_grow_logits(const sq_tree_grow *g, int u);
/* The draft's distribution Q at an expanded node u (vocab): sq_probs_from_logits at the run's
 * temperature and top-p, in the decoder's scratch (valid until the next call); NULL otherwise. */
const double *sq_tree_grow_probs(sq_tree_grow *g, int u);
/* The sequence's generator (the verifier's: proposals and verification draw from it). */
sq_verifier *sq_tree_grow_verifier(sq_tree_grow *g);

/* Sequence length so far (prompt + generated). */
int sq_specdec_length(const sq_specdec *sd);

/* Runs steps from the prompt until max_new tokens are out (the last step's extra tokens are
 * dropped from out but counted in step_tokens). out: (max_new); step_tokens: (max_new) tokens
 * per step, *steps of them; infos, when not NULL, (max_new) per-step infos whose arrays the
 * caller frees with sq_step_info_clear. With end-of-sequence ids (params eos), the step that
 * produces one is the last: out keeps the tokens up to and including it, the rest of out is
 * SQ_SPECDEC_NO_TOKEN, and that step counts every token it produced in step_tokens and its
 * info, like a step cut by max_new (docs/runtime.md, "Text"). */
int sq_specdec_generate(sq_specdec *sd, const int32_t *prompt, int n, int max_new, int32_t *out,
                        int *step_tokens, int *steps, sq_step_info *infos, sq_error *err);

/* Plain autoregressive decoding with the target alone (one token per forward): argmax for
 * greedy, otherwise a draw from P after temperature and top-p (from the generator reseeded
 * with `seed`). out: (max_new); it stops after an end-of-sequence id as
 * sq_specdec_generate does, the rest of out being SQ_SPECDEC_NO_TOKEN. */
int sq_specdec_autoregressive(sq_specdec *sd, const int32_t *prompt, int n, int max_new,
                              uint64_t seed, int32_t *out, sq_error *err);

/* The target's distribution (after temperature/top-p, one-hot for greedy) of the next token
 * after `ctx` (n >= 1 tokens), from a plain causal forward. probs: (vocab). */
int sq_specdec_target_probs(sq_specdec *sd, const int32_t *ctx, int n, double *probs,
                            sq_error *err);

void sq_step_info_clear(sq_step_info *info);

/* The rule for a model's logits (issue 27 W5; docs/robustness.md): one NaN or infinite logit of
 * the `model` ("draft" or "target"), V of them at `row`, is SQ_EDATA "the draft's logit of token
 * X at position P is NaN; its weights (or activations) are not finite". Decoding checks every
 * row it uses, dump every row it writes. */
int sq_logits_check_finite(const char *model, const float *row, int V, long long position,
                           sq_error *err);

/* ---- a batch: B sequences decoded together with one plan (serving) ----------------------------
 *
 * B decoders, each with its own draft and target contexts (KV caches), sequence and verifier
 * generator, step in lockstep (sq_specdec_step_group): the catch-up forward and every level's
 * forward of the draft, and the target's tree forward, are each one sq_context_forward_batch
 * over the sequences still running, so the weights are read once per forward for the whole
 * batch; proposals, verification and commits are per sequence. Every sequence therefore
 * produces what it would alone, from the same generator state (token for token for greedy, up
 * to the products' float rounding). Sequence k's generator starts from
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
/* Sets every member's grow hook (sq_specdec_set_grow). */
void sq_specdec_batch_set_grow(sq_specdec_batch *bt, sq_grow_fn fn, void *user);
/* Sets every member's prune hook (sq_specdec_set_prune). */
void sq_specdec_batch_set_prune(sq_specdec_batch *bt, sq_prune_fn fn, void *user);

/* Bytes of KV caches and scratch that B decoders of this plan and these models take (an
 * estimate that leaves out the mapped weights). */
double sq_specdec_batch_bytes(const sq_model *draft, const sq_model *target, const sq_plan *plan,
                              const sq_specdec_params *params, int B);

/* Starts sequence k on prompts[k] (n[k] >= 1 tokens; lengths may differ). */
int sq_specdec_batch_start(sq_specdec_batch *bt, const int32_t *const *prompts, const int *n,
                           sq_error *err);

/* One step of every sequence k with active[k] != 0 (NULL: all): sq_specdec_step_group on the
 * members. out[k] (capacity: the depth) receives ntok[k] tokens (0 for an inactive sequence);
 * info, when not NULL, (B) per-sequence step infos whose times are the batch step's, timed as
 * a single step's (draft_ms with draft_forward_ms inside it, target_ms with
 * target_forward_ms, verify_ms, commit_ms, step_ms), the same for every active sequence. */
int sq_specdec_batch_step(sq_specdec_batch *bt, const int *active, int32_t *const *out,
                          int *ntok, sq_step_info *info, sq_error *err);

/* Runs batch steps from the prompts until every sequence has max_new tokens or has stopped at
 * an end-of-sequence id (as sq_specdec_generate); a sequence that is done leaves the batch
 * (the others go on in a smaller one). out[k]: (max_new). steps[k]:
 * the steps sequence k took; *batch_steps: batch steps in all. infos, when not NULL, is
 * (B, max_new) per-sequence step infos, row k at infos + k * max_new. */
int sq_specdec_batch_generate(sq_specdec_batch *bt, const int32_t *const *prompts, const int *n,
                              int max_new, int32_t *const *out, int *steps, int *batch_steps,
                              sq_step_info *infos, sq_error *err);

/* Plain decoding of the batch with the target alone: one batched forward of one token per
 * sequence per step (argmax for greedy, else a draw from sequence k's generator reseeded with
 * sq_specdec_batch_seed_of(seed, k)). out[k]: (max_new); a sequence that produced an
 * end-of-sequence id leaves the batch, the rest of its row SQ_SPECDEC_NO_TOKEN. */
int sq_specdec_batch_autoregressive(sq_specdec_batch *bt, const int32_t *const *prompts,
                                    const int *n, int max_new, uint64_t seed,
                                    int32_t *const *out, sq_error *err);

#endif
