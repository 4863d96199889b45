/* The corpus dump (sequoia-run dump; docs/runtime.md, "Corpus dump"; docs/design.md §7.2):
 * both models teacher-forced over a token file, written as a sequoia-corpus v1 HDF5 file
 * (libsequoia/format/corpus.h, docs/formats.md): per position that has a next token, the
 * target's and the draft's logits and the actual next token. The file's sequences are the
 * corpus's sequences; a sequence longer than the context is cut into windows, each read from
 * an empty cache. */
#ifndef SQ_RUNTIME_DUMP_H
#define SQ_RUNTIME_DUMP_H

#include "libsequoia/base/error.h"

typedef struct sq_dump_opts {
    const char *prog;          /* prefix of the progress line and the messages on stderr  */
    const char *draft_dir, *target_dir;
    const char *tokens_file;   /* token ids (runtime/tokens.h)                            */
    /* instead of tokens_file: documents of text (one per paragraph, or JSON Lines with a "text"
     * field when the name ends in .jsonl), each a sequence of the target tokenizer's ids with
     * its special tokens (runtime/tokens.h, sq_tokens_from_text; issue 25)                   */
    const char *text_file;
    const char *out_file;      /* the corpus                                              */
    int         topk;          /* > 0: only the K largest logits per row (sparse)         */
    int         context;       /* window in tokens; 0: min(2048, max_position_embeddings) */
    int         half;          /* dense logits as float16                                 */
    int         threads;       /* CPU threads; 0: all cores                               */
    int         compression;   /* deflate level 0-9 (0: no filter)                        */
    int         quiet;         /* no progress line                                        */
    /* write OUT.partial, checkpointed after every chunk of rows; an interruption leaves it,
     * and a dump of the same inputs and options with resume set goes on from it. While such a
     * dump runs, SIGINT, SIGTERM and SIGHUP are caught: the dump checkpoints after the chunk
     * in progress and the process then dies of the signal (its default action) */
    int         resume;
} sq_dump_opts;

/* prog "sequoia-run", compression 1, every other field 0 or NULL. */
sq_dump_opts sq_dump_default_opts(void);

/* Runs the dump; prints the progress line and a one-line summary (or, with resume, where it
 * resumed) on stderr. Returns SQ_OK or the error's status with *err filled, naming the file
 * and the field: SQ_EUSAGE (--top-k past the vocabulary, --context outside [2,
 * max_position_embeddings]), SQ_EDATA (vocabularies that differ by more than padding, ids
 * outside the shared vocabulary, no sequence with two tokens, a partial file of other inputs;
 * with text_file: no tokenizer.json in the target, draft and target tokenizers that differ,
 * invalid UTF-8), SQ_ENOINPUT, SQ_ECANTCREAT, SQ_EIO, SQ_ESOFTWARE (memory). Models whose
 * vocab_size differ by padding rows are dumped over their shared range (V columns, the corpus's
 * vocab_size; docs/runtime.md, "Vocabularies that differ by padding"). */
int sq_dump(const sq_dump_opts *o, sq_error *err);

#endif
