/* Tokenizers of Hugging Face model directories: text to token ids and back (issue 25; the
 * algorithm and its limits are in docs/tokenizer.md).
 *
 * A tokenizer is read from a model directory: tokenizer.json (the Hugging Face `tokenizers`
 * format: model, normalizer, pre_tokenizer, post_processor, decoder, added_tokens), with
 * tokenizer_config.json (add_bos_token, add_eos_token, bos_token, eos_token) and
 * generation_config.json (eos_token_id, a number or a list) when present. Supported models:
 * BPE with byte-level pre-tokenization (Llama-3.x, Qwen2/2.5/3) and BPE in the SentencePiece
 * style (Llama-2, Mistral, Gemma: Metaspace or Prepend/Replace normalizers, byte_fallback).
 * Other models (WordPiece, Unigram, ...) are refused by name (SQ_EDATA).
 *
 * Errors name the file and the field: SQ_ENOINPUT for a missing tokenizer.json, SQ_EDATA for a
 * malformed one, an unknown model or pre-tokenizer type, merges naming unknown tokens, invalid
 * UTF-8 in text to encode, or ids outside the vocabulary when decoding. */
#ifndef SQ_TEXT_TOKENIZER_H
#define SQ_TEXT_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "libsequoia/base/api.h"
#include "libsequoia/base/error.h"

SQ_BEGIN_DECLS

typedef struct sq_tokenizer sq_tokenizer;

/* Reads DIR/tokenizer.json (and DIR/tokenizer_config.json, DIR/generation_config.json when they
 * exist). `path` may also name a tokenizer.json file itself; the two other files are then
 * looked for beside it. */
SQ_API
int sq_tokenizer_load(const char *path, sq_tokenizer **out, sq_error *err);
SQ_API
void sq_tokenizer_free(sq_tokenizer *tok);

/* Ids of `text` (len bytes of UTF-8; embedded NULs are text like any other byte). add_special:
 * the post-processor's special tokens (e.g. BOS) are added as Hugging Face's
 * encode(text, add_special_tokens=True) adds them; 0 leaves them out. Special and added tokens
 * written literally in the text are matched as Hugging Face matches them in both cases.
 * *ids is malloc'd (the caller frees it), *n its length. */
SQ_API
int sq_tokenizer_encode(const sq_tokenizer *tok, const char *text, size_t len, int add_special,
                        int32_t **ids, size_t *n, sq_error *err);

/* Text of ids[0..n) as Hugging Face's decode(ids, skip_special_tokens=skip_special); *text is
 * malloc'd and NUL-terminated, *len its length without the NUL. */
SQ_API
int sq_tokenizer_decode(const sq_tokenizer *tok, const int32_t *ids, size_t n, int skip_special,
                        char **text, size_t *len, sq_error *err);

/* Ids the tokenizer knows: the model's vocabulary and the added tokens (max id + 1). */
SQ_API
int sq_tokenizer_vocab_size(const sq_tokenizer *tok);

/* The end-of-sequence ids (generation_config.json's eos_token_id, else tokenizer_config.json's
 * eos_token): *n of them (0 when none is known); the array belongs to the tokenizer. */
SQ_API
const int32_t *sq_tokenizer_eos(const sq_tokenizer *tok, int *n);

/* The beginning-of-sequence id, or -1 when there is none. */
SQ_API
int32_t sq_tokenizer_bos(const sq_tokenizer *tok);

/* 1 when the two tokenizers map every string to the same ids (same model, vocabulary, merges,
 * normalizer, pre-tokenizer, added tokens and post-processor); 0 otherwise. */
SQ_API
int sq_tokenizer_same(const sq_tokenizer *a, const sq_tokenizer *b);

SQ_END_DECLS

#endif
