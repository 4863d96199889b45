/* Token files: the prompts and the text streams that sequoia-run reads.
 *
 * Two forms:
 *   - text: whitespace-separated decimal token ids; an empty line ends a sequence;
 *   - HDF5: an integer dataset /tokens (1-D), and optionally /seq_offsets (int64, S+1
 *     increasing offsets from 0 to the number of tokens) marking sequence boundaries.
 * The form is recognised by content (the HDF5 signature), not by the file name. */
#ifndef SQ_RUNTIME_TOKENS_H
#define SQ_RUNTIME_TOKENS_H

#include <stdint.h>

#include "libsequoia/base/error.h"

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

/* SQ_EDATA naming the file and the first token whose id is not below vocab. */
int sq_tokens_check_vocab(const sq_tokens *t, int vocab, const char *path, sq_error *err);

void sq_tokens_free(sq_tokens *t);

#endif
