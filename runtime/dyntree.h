/* The dynamic trees of SGLang and TensorRT-LLM, executed (issue 26; docs/runtime.md, "Dynamic
 * trees (SGLang, TensorRT-LLM)"): the grow hook and the prune hook of runtime/specdec.h that
 * make each step's tree as the two engines make it for an envelope L,K,N.
 *
 * The envelope (docs/design.md §8, the run; the convention of every tool): L draft steps (the
 * tree has L + 1 levels, the root included), K children per kept node, N nodes verified, the
 * root included (N - 1 draft tokens). SGLang's --speculative-num-steps is L,
 * --speculative-eagle-topk K, --speculative-num-draft-tokens N; TensorRT-LLM's max_draft_len is
 * L, dynamic_tree_max_topK K, max_total_draft_tokens N - 1.
 *
 * One step (both engines; SGLang eagle_utils.py select_top_k_tokens and
 * organize_draft_results, TensorRT-LLM eagle3_dynamic_tree.py update_draft_tokens_and_scores
 * and resampling_final_draft_tokens):
 *   - level 1: the root's K most probable draft tokens, score = the draft's probability (the
 *     softmax of its logits at temperature 1, whatever the run's temperature); all K are kept;
 *   - level l + 1 (l = 1 .. L - 1): each of the K kept nodes of level l gets its K most probable
 *     tokens, score = the parent's score times the token's draft probability (the product along
 *     the path); of these K^2 candidates the K of highest score are kept (the draft reads them,
 *     one forward of K tokens per level);
 *   - the N - 1 candidates of highest score among all K + (L - 1) K^2 form the verified tree
 *     (closed under ancestors: a child's score never exceeds its parent's).
 * Ties (equal scores) go to the node grown first (the lower breadth-first index: a parent before
 * its children, a lower rank before a higher one); the engines leave them to torch.topk. The
 * siblings of the verified tree are in rank order (the draft's probability, highest first).
 *
 * Modes: greedy and topk use the engines' tokens (the top K); stochastic keeps the shape rule
 * (the scores are the rank scores: the parent's score times the draft's j-th largest
 * probability) but the j-th child's token is the j-th draw without replacement from the draft
 * (Sequoia's proposal), so that Sequoia's verifier stays lossless; specinfer is refused.
 *
 * The engine rules (sq_dyntree_check): K >= 1, L >= 1, N >= 2 for both; SGLang
 * N - 1 <= K + (L - 1) K^2, and with K = 1 the engine sets N = L + 1 (server_args.py), so
 * N = L + 1 is required then; TensorRT-LLM L <= N - 1 <= K L (EagleDecodingConfig's validator,
 * tensorrt_llm/llmapi/llm_args.py). They are stated once, in libsequoia/format/dynplan.c
 * (sq_dynplan_envelope_check), which the planner and the exports call too. */
#ifndef SQ_RUNTIME_DYNTREE_H
#define SQ_RUNTIME_DYNTREE_H

#include <stdint.h>

#include "libsequoia/base/error.h"
#include "libsequoia/format/plan.h"
#include "runtime/specdec.h"

typedef enum sq_dyn_engine {
    SQ_DYN_SGLANG = 0,      /* "sglang"          */
    SQ_DYN_TRTLLM = 1,      /* "trtllm-dynamic"  */
} sq_dyn_engine;

/* "sglang" or "trtllm-dynamic"; SQ_EUSAGE naming the choices otherwise. */
int sq_dyn_engine_parse(const char *name, sq_dyn_engine *out, sq_error *err);
const char *sq_dyn_engine_name(sq_dyn_engine e);

/* "L,K,N" (three integers); SQ_EUSAGE naming the field otherwise. sequoia-plan's parser:
 * sq_dynplan_envelope_parse (libsequoia/format/dynplan.h), which this calls. */
int sq_dyntree_parse_envelope(const char *s, int *L, int *K, int *N, sq_error *err);

/* The engine's rules for an envelope (sq_dynplan_envelope_check); SQ_EUSAGE with a message
 * naming the rule and the engine. Then the run's own limit (not an engine's): envelopes whose
 * grown tree would exceed SQ_PLAN_MAX_NODES nodes are refused too. */
int sq_dyntree_check(sq_dyn_engine e, int L, int K, int N, sq_error *err);

/* Nodes a step grows for an envelope: 1 + K + (L - 1) K^2 (the root and every candidate). */
int sq_dyntree_capacity(int L, int K);

/* The plan a decoder of an envelope is made with (sq_specdec_new): room for every candidate
 * (sq_dyntree_capacity nodes) over L + 1 levels, the shape of the widest step (the root's K
 * children, then K children of each of the first K nodes of every level). Only its size and
 * depth matter to the decoder, the hooks shape each step; expected_tokens means nothing. */
int sq_dyntree_plan(int L, int K, sq_plan **out, sq_error *err);

/* The hooks' state for one envelope (shared by every decoder of a batch: the hooks keep no
 * state between calls, only scratch). */
typedef struct sq_dyntree sq_dyntree;

int sq_dyntree_new(sq_dyn_engine e, int L, int K, int N, int vocab, sq_dyntree **out,
                   sq_error *err);
void sq_dyntree_free(sq_dyntree *dt);

/* One node's expansion, the grow hook's work for each expanded node: the draft's softmax at
 * temperature 1 over the vocabulary (logits: dt's vocab), then its K best tokens, which it
 * returns (best first). The profiler times it (the step section's "expand" part,
 * docs/formats.md). */
const int32_t *sq_dyntree_expand(sq_dyntree *dt, const float *logits);

/* The grow hook (sq_grow_fn) and the prune hook (sq_prune_fn); user: the sq_dyntree. The grow
 * hook refuses the specinfer mode (SQ_EUSAGE) and a decoder whose plan has less room than the
 * envelope needs. */
int sq_dyntree_grow(sq_tree_grow *g, int level, void *user, sq_error *err);
int sq_dyntree_prune(sq_tree_grow *g, void *user, uint8_t *keep, sq_error *err);

/* Sets both hooks on a decoder, or on every member of a batch. */
void sq_dyntree_attach(sq_specdec *sd, sq_dyntree *dt);
void sq_dyntree_attach_batch(sq_specdec_batch *bt, sq_dyntree *dt);

#endif
