/* Feeding models (docs/runtime.md, "Prefill"): the causal prefill of a context, its mask, and the
 * check that a draft and a target read the same tokens. Every caller that reads a prompt or a
 * prefix into a context, or pairs two models, goes through here (docs/design.md §8).
 *
 * A causal forward of n tokens with nothing pending: token i attends the committed tokens and
 * the new tokens j <= i (sq_causal_mask). sq_prefill reads a whole token run that way, in
 * chunks, committing each chunk: the prompt before decoding, the prefix of a timing;
 * sq_forward_causal is one such chunk with every row's logits. */
#ifndef SQ_RUNTIME_PREFILL_H
#define SQ_RUNTIME_PREFILL_H

#include <stdint.h>

#include "libsequoia/base/error.h"
#include "runtime/model.h"

/* mask (n, n): mask[i * n + j] = (j <= i), the mask of a forward of n tokens in order over a
 * context with nothing pending. */
void sq_causal_mask(uint8_t *mask, int n);

/* One causal forward of tokens[0 .. n) (1 <= n <= the context's max_pending) at the positions
 * after ctx's committed tokens, ctx having nothing pending, and their commit; logits: (n, vocab),
 * every row (a teacher-forced read: the corpus dump). Errors as sq_prefill's. */
int sq_forward_causal(sq_context *ctx, const int32_t *tokens, int n, float *logits,
                      sq_error *err);

/* Reads tokens[0 .. n) into ctx, which must have nothing pending, at positions c .. c + n - 1
 * (c: the tokens ctx has committed) in causal forwards of `chunk` tokens each (the last one
 * shorter; chunk <= 0 or above the context's max_pending: max_pending), committing every chunk: afterwards ctx
 * has committed c + n tokens. The chunk size is part of the result (a forward's float rounding
 * depends on its row count), so a caller keeps its own. last, when not NULL (and n >= 1),
 * receives the logits (vocab) of the last token. n = 0 does nothing. Errors: SQ_EUSAGE (tokens
 * pending, n out of range), SQ_ESOFTWARE (memory), the forward's and the commit's. */
int sq_prefill(sq_context *ctx, const int32_t *tokens, int n, int chunk, float *last,
               sq_error *err);

/* The draft's and the target's vocabularies (docs/runtime.md, "Vocabularies that differ by
 * padding"): they must read and propose the same token ids. *shared (may be NULL) receives the
 * shared range V_shared = min(draft, target vocab_size); equal sizes are accepted. Sizes that
 * differ are accepted when the rows beyond V_shared are padding. With a tokenizer
 * (tokenizer_len > 0: the length of the pair's tokenizer.json, which the caller read with
 * sq_tokens_tokenizer: the target's, compared with the draft's), its length must be <= V_shared
 * (every real token is in the shared range). Without one, the padding rule: the larger
 * vocab_size is a multiple of 64 and the gap is at most max(128, 1% of the larger)
 * (checkpoints pad their embedding rows up to a multiple of 64 or 128: Qwen2.5-0.5B/7B
 * 151936/152064, Gemma-3 262144/262208). Otherwise SQ_EDATA naming the draft's config.json
 * ("<draft_dir>/config.json: vocab_size: ..."), the target's, both sizes and the rule; either
 * directory may be NULL (the message then says "the draft's" / "the target's config.json"). */
int sq_models_check_vocab(const sq_model *draft, const sq_model *target, const char *draft_dir,
                          const char *target_dir, int tokenizer_len, int *shared, sq_error *err);

#endif
