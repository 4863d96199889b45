/* Token files: the prompts and the text streams that sequoia-run reads.
 *
 * Two forms of token ids:
 *   - text: whitespace-separated decimal token ids; an empty line ends a sequence;
 *   - HDF5: an integer dataset /tokens (1-D), and optionally /seq_offsets (int64, S+1
 *     increasing offsets from 0 to the number of tokens) marking sequence boundaries.
 * The form is recognised by content (the HDF5 signature), not by the file name.
 *
 * And text (issue 25; docs/tokenizer.md, "Command line"), made into ids with the target's
 * tokenizer (libsequoia/text/tokenizer.h): a whole file as one sequence (--prompt-text), or a
 * file of documents (dump --text, --prompt-text with --batch): one per paragraph (paragraphs
 * are separated by blank lines, lines of nothing but whitespace), or with a name ending in
 * .jsonl one per line of JSON Lines, the document being the line's "text" string. */
#ifndef SQ_RUNTIME_TOKENS_H
#define SQ_RUNTIME_TOKENS_H

#include <stdint.h>

#include "libsequoia/base/error.h"
#include "libsequoia/text/tokenizer.h"

#define SQ_TOKENS_MAX (1LL << 31)   /* tokens in one file */

typedef struct sq_tokens {
    int32_t *ids;       /* (n)                                                   */
    int64_t  n;
    int64_t *offsets;   /* (sequences + 1) boundaries, first 0, last n          */
    int64_t  sequences;
} sq_tokens;

/* Reads a token file. Errors name the file and the token or dataset: SQ_ENOINPUT (missing),
 * SQ_EDATA (not an integer, negative id, bad dataset or offsets), SQ_EIO. Empty sequences
 * are dropped; a file without any token is an error. */
int sq_tokens_load(const char *path, sq_tokens **out, sq_error *err);

/* One word of a text of token ids (no whitespace in it): SQ_TOKEN_ID_OK with *id set;
 * SQ_TOKEN_ID_NOT_INTEGER when it is not a decimal integer; SQ_TOKEN_ID_OUT_OF_RANGE when it
 * is one outside [0, INT32_MAX], however many digits (messages give the word as written:
 * issue 27, a 20-digit id was reported as "not an integer" and 2^40 as 2147483647). */
enum { SQ_TOKEN_ID_OK = 0, SQ_TOKEN_ID_NOT_INTEGER, SQ_TOKEN_ID_OUT_OF_RANGE };
int sq_token_id_parse(const char *word, int32_t *id);

/* SQ_EDATA naming the file and the first token whose id is not below vocab. */
int sq_tokens_check_vocab(const sq_tokens *t, int vocab, const char *path, sq_error *err);

void sq_tokens_free(sq_tokens *t);

/* The tokenizer of a run or a dump: target_dir's tokenizer.json, checked against draft_dir's
 * when the draft has one too (the two must map every text to the same ids: sq_tokenizer_same;
 * their models may still differ by padding rows, which sq_models_check_vocab judges).
 * need: the option that needs the tokenizer (e.g. "--prompt-text"), or NULL when it is only
 * wanted for its end-of-sequence ids. *out is NULL when the target has no tokenizer.json and
 * need is NULL; a tokenizer that cannot be read is then a warning on stderr (prefixed by
 * prog), not an error. Errors (SQ_EDATA, naming the files): no tokenizer.json in the target
 * while `need` needs one, a malformed one, draft and target tokenizers that differ. */
int sq_tokens_tokenizer(const char *prog, const char *draft_dir, const char *target_dir,
                        const char *need, sq_tokenizer **out, sq_error *err);

/* SQ_EDATA when the tokenizer knows more ids than the model has rows (model_vocab): its
 * ids could not be fed to the model. */
int sq_tokens_check_tokenizer(const sq_tokenizer *tok, const char *dir, int model_vocab,
                              sq_error *err);

/* Ids of the text file `path` with the tokenizer: docs 0, the whole file as one sequence;
 * docs 1, one sequence per document (paragraphs). A name ending in .jsonl is JSON Lines either
 * way, a document per line's "text" string; with docs 0 it must hold exactly one (else
 * SQ_EUSAGE, suggesting --batch). Every sequence gets the post-processor's special tokens
 * (BOS), as Hugging Face's generation encodes a prompt. Errors name the file and where in it:
 * SQ_ENOINPUT (missing), SQ_EDATA (invalid UTF-8, a JSON line without a "text" string or with
 * a key twice, no token at all), SQ_EIO. */
int sq_tokens_from_text(const sq_tokenizer *tok, const char *path, int docs, sq_tokens **out,
                        sq_error *err);

#endif
