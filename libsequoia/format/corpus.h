/* Draft/target corpora (docs/design.md §7.2): per position t, the target's and the draft's logits
 * for the same context, stored in HDF5. Readers stream row blocks, so memory stays bounded
 * whatever the number of rows N.
 *
 * Layout: attributes on "/" format = "sequoia-corpus", version = 1, vocab_size, draft, target;
 *   /target/logits, /draft/logits          float16|float32 [N, V] (chunked by rows, compressed)
 *   or /target/topk_ids int32 [N, K] + /target/topk_logits float [N, K] (same for /draft)
 *   /tokens int32 [N] (optional), /seq_offsets int64 [S+1] (optional; absent = one sequence). */
#ifndef SQ_FORMAT_CORPUS_H
#define SQ_FORMAT_CORPUS_H

#include <stdint.h>

#include "libsequoia/base/api.h"
#include "libsequoia/base/error.h"

SQ_BEGIN_DECLS

#define SQ_CORPUS_FORMAT "sequoia-corpus"
#define SQ_CORPUS_VERSION 1
/* Documented caps (README "Limits"): a file claiming more is refused when it is opened, before
 * any buffer is sized from it. One float32 row pair of the largest vocabulary is 128 MiB. */
#define SQ_CORPUS_MAX_VOCAB (1 << 24)
#define SQ_CORPUS_MAX_SEQUENCES (1LL << 24)

typedef struct sq_corpus_info {
    int64_t rows;          /* N: positions                                              */
    int     vocab;         /* V                                                         */
    int     sparse;        /* 1: top-K logits (tokens outside count as probability 0)   */
    int     topk;          /* K when sparse (per model: the larger of the two)          */
    int     has_tokens;    /* /tokens present                                           */
    int64_t sequences;     /* S (1 when /seq_offsets is absent)                         */
    char    draft[256];    /* model names from the attributes                          */
    char    target[256];
} sq_corpus_info;

/* One open corpus is used by one thread at a time (Debian's HDF5 is built thread-safe, but it
 * serialises every call behind one global lock anyway: read blocks in one thread, compute in
 * many). */
typedef struct sq_corpus sq_corpus;

/* Opens and checks a corpus: attributes, dataset presence, shapes, dtypes, that draft and
 * target agree on N and V and that V matches vocab_size, seq_offsets monotone from 0 to N.
 * Errors name the file and the dataset (SQ_ENOINPUT, SQ_EDATA). */
SQ_API
int sq_corpus_open(const char *path, sq_corpus **out, sq_error *err);
SQ_API
void sq_corpus_close(sq_corpus *c);

SQ_API
const sq_corpus_info *sq_corpus_get_info(const sq_corpus *c);

/* A good block size for sq_corpus_read: the two float32 blocks (target and draft, count x V
 * each) near 8 MiB, rounded down to whole chunks of the target's logits when a chunk fits;
 * between 1 and rows. */
SQ_API
int sq_corpus_block_rows(const sq_corpus *c);

/* Sequence boundaries: (sequences + 1) offsets, first 0, last rows. */
SQ_API
const int64_t *sq_corpus_seq_offsets(const sq_corpus *c);

/* Reads rows [row0, row0 + count) as float32 logits into target and draft (count, V) buffers;
 * sparse corpora are expanded with -INFINITY outside the top-K. tokens may be NULL (or is
 * filled with -1 when the corpus has none). NaN or infinite logits are an error naming the
 * dataset and the first bad row. */
SQ_API
int sq_corpus_read(sq_corpus *c, int64_t row0, int count, float *target, float *draft,
                   int32_t *tokens, sq_error *err);

/* Raw chunks, for decoding in several threads (issue 17): HDF5 runs one call at a time, and
 * inflating a chunk inside it kept one thread busy for the whole corpus. sq_corpus_read_raw
 * (one thread at a time) locates a chunk of a model's logits as stored; sq_corpus_decode_raw
 * (no HDF5 call: any thread, one sq_corpus_raw per thread) inflates, unshuffles and widens it
 * into the chunk's rows as float32, with sq_corpus_read's finite check and messages. The rows of
 * chunk i are [i·rows, min((i+1)·rows, N)).
 *
 * Mapped reading (the default where the file allows it, see docs/estimator.md "Reading"): the
 * chunk's file offset and size come from HDF5's chunk index (contiguous datasets: the
 * dataset's offset), are checked against the file's current size, and the chunk's pages are
 * mapped read-only and populated (MADV_POPULATE_READ: a page past the end of the file is an
 * error, not a SIGBUS). An unfiltered float32 chunk is then used where it lies (raw->rows points
 * into the mapping: no copy at all); a filtered one is decoded from the mapping. Otherwise
 * the stored bytes are fetched with H5Dread_chunk (one copy).
 *
 * sq_corpus_raw_rows: the rows per chunk when both models' dense logits allow it (little-endian
 * float32 or float16 in chunks of whole rows, filters shuffle and/or deflate, both models
 * chunked alike; or, when mapped, contiguous unfiltered datasets, cut into chunks of about
 * 1 MiB here), else 0 (sparse corpora, other layouts: use sq_corpus_read). */
typedef struct sq_corpus_raw {
    unsigned char *data;          /* the stored bytes when copied (malloc'd, grown)     */
    size_t size, cap;
    const unsigned char *bytes;   /* the stored bytes (data, or in the mapping)         */
    const float *rows;            /* non-NULL: the chunk's rows as float32 already (in
                                     the mapping, or read into `direct`): decoding is
                                     only the finite check there                       */
    void *map;                    /* this chunk's mapping (unmapped by the next read
                                     into this struct or by sq_corpus_raw_clear)       */
    size_t map_len;
    uint32_t mask;                /* HDF5's filter mask of the chunk                   */
    int in_place;                 /* rows != NULL                                      */
    int model;                    /* 0 target, 1 draft                                 */
    int64_t chunk;
} sq_corpus_raw;

SQ_API
int sq_corpus_raw_rows(const sq_corpus *c);
/* Whether chunks are mapped (1) or fetched with H5Dread_chunk (0). sq_corpus_set_mapped(c, 0)
 * turns mapping off (tests compare both paths); turning it on again only works where the file
 * allows it. Both change sq_corpus_raw_rows (contiguous datasets need the mapping). */
SQ_API
int sq_corpus_mapped(const sq_corpus *c);
SQ_API
void sq_corpus_set_mapped(sq_corpus *c, int on);
/* direct (may be NULL): room for the chunk's rows (chunk rows x V floats); an unfiltered
 * float32 chunk that is not mapped is read straight there (raw->rows = direct). */
SQ_API
int sq_corpus_read_raw(sq_corpus *c, int model, int64_t chunk, float *direct, sq_corpus_raw *raw,
                       sq_error *err);
/* out: where the rows go unless raw->rows is set (then out is not touched). work, *work_cap:
 * the caller's scratch (malloc'd and grown here; one per thread). */
SQ_API
int sq_corpus_decode_raw(const sq_corpus *c, const sq_corpus_raw *raw, float *out,
                         unsigned char **work, size_t *work_cap, sq_error *err);
/* Unmaps and frees; raw is all zero afterwards. */
SQ_API
void sq_corpus_raw_clear(sq_corpus_raw *raw);

/* ---- writer (runtime dumps, tests) ---------------------------------------------------------- */

typedef struct sq_corpus_writer_params {
    int         vocab;         /* V                                                      */
    int         topk;          /* 0: dense logits; K > 0: store the top-K per row        */
    int         half;          /* dense only: store float16 instead of float32           */
    int         chunk_rows;    /* rows per HDF5 chunk (0: a default)                     */
    int         compression;   /* deflate level 0-9 (0: none; default 1)                 */
    const char *draft;         /* model names                                            */
    const char *target;
} sq_corpus_writer_params;

SQ_API
sq_corpus_writer_params sq_corpus_writer_default_params(void);

typedef struct sq_corpus_writer sq_corpus_writer;

/* Starts writing `path` atomically (a temporary file renamed at commit). */
SQ_API
int sq_corpus_writer_open(const char *path, const sq_corpus_writer_params *params,
                          sq_corpus_writer **out, sq_error *err);

/* Appends `rows` positions of the current sequence: target/draft logits (rows, V); tokens
 * (rows) may be NULL. */
SQ_API
int sq_corpus_writer_append(sq_corpus_writer *w, const float *target, const float *draft,
                            const int32_t *tokens, int rows, sq_error *err);

/* Closes the current sequence (records a boundary in /seq_offsets). */
SQ_API
int sq_corpus_writer_end_sequence(sq_corpus_writer *w, sq_error *err);

/* Finishes the file and renames it into place; frees w. */
SQ_API
int sq_corpus_writer_commit(sq_corpus_writer *w, sq_error *err);

/* Drops the temporary file; frees w. NULL is allowed. */
SQ_API
void sq_corpus_writer_abort(sq_corpus_writer *w);

/* Resumable writing (sequoia-run dump --resume). The file is written under `partial`
 * (PATH.partial by convention), which is not removed on a signal or by abort: every complete
 * chunk of rows (and every sq_corpus_writer_checkpoint) records the rows that are durable, with
 * the sequence boundaries so far. When `partial` exists it is reopened: it must have been
 * started with the same `fingerprint` (a description of the inputs and options, at most
 * SQ_CORPUS_MAX_FINGERPRINT bytes) and parameters; rows written after its last checkpoint are
 * cut off, and *rows_done tells the caller where to go on (it must append exactly the rows it
 * would have appended after that many, and end the sequences that were still open). Commit
 * drops the resume state and renames `partial` to `path`, so the finished file is the same
 * corpus an uninterrupted run writes. Errors: SQ_EDATA (a partial file of other inputs, or
 * damaged: the message says to delete it), SQ_ECANTCREAT, SQ_EIO. */
#define SQ_CORPUS_MAX_FINGERPRINT 4000
SQ_API
int sq_corpus_writer_open_resumable(const char *path, const char *partial,
                                    const sq_corpus_writer_params *params, const char *fingerprint,
                                    int64_t *rows_done, sq_corpus_writer **out, sq_error *err);
/* Makes every row appended so far durable in the partial file (no-op for other writers). */
SQ_API
int sq_corpus_writer_checkpoint(sq_corpus_writer *w, sq_error *err);

SQ_END_DECLS

#endif
