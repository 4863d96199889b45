/* Private to libsequoia/format/corpus_*.c: the reader's and writer's state and the HDF5 helpers
 * the reader (corpus_read.c), the writer (corpus_write.c) and resumable writing
 * (corpus_resume.c) share. Not installed; the public API is corpus.h. */
#ifndef SQ_FORMAT_CORPUS_PRIVATE_H
#define SQ_FORMAT_CORPUS_PRIVATE_H

#include <stddef.h>
#include <stdint.h>

#include <hdf5.h>

#include "libsequoia/format/corpus.h"

/* Per-dataset chunk cache of the reader: enough for two row stripes of chunks, within limits. */
#define CACHE_MIN_BYTES ((size_t)1 << 20)
#define CACHE_MAX_BYTES ((size_t)32 << 20)
#define CACHE_SLOTS 12011
/* Writer: default chunk of about 1 MiB, never more than this many rows. */
#define WRITER_CHUNK_BYTES ((size_t)1 << 20)
#define WRITER_CHUNK_MAX_ROWS 4096
/* sq_corpus_block_rows: the two float32 blocks stay under this. */
#define BLOCK_TARGET_BYTES ((size_t)8 << 20)
/* Largest value of a float16. */
#define HALF_MAX 65504.0f


typedef struct corpus_model {
    int     sparse;          /* 1: topk_ids + topk_logits                                   */
    int     width;           /* V (dense) or K (sparse)                                     */
    int     half;            /* dense IEEE float16: read raw, converted by sq_f16_to_f32 */
    hid_t   logits;          /* /m/logits or /m/topk_logits                                 */
    hid_t   ids;             /* /m/topk_ids, or H5I_INVALID_HID                             */
    char    logits_name[32]; /* "/target/logits", ...                                      */
    char    ids_name[32];
    /* raw chunk reads (sq_corpus_read_raw): dense little-endian logits in chunks of whole rows,
     * filters none, shuffle, deflate or shuffle then deflate */
    int     raw_ok;
    int     chunk_rows;
    int     esz;             /* 2 or 4                                                      */
    int     shuffle_at;      /* its index in the filter pipeline, or -1                     */
    int     deflate_at;
    /* contiguous unfiltered logits (raw reads only when mapped): their file offset */
    int     contiguous;
    uint64_t contig_off;
} corpus_model;

struct sq_corpus {
    char          *path;
    hid_t          file;
    corpus_model   m[2];          /* [0] target, [1] draft                                */
    hid_t          tokens;        /* /tokens or H5I_INVALID_HID                           */
    sq_corpus_info info;
    int64_t       *offsets;       /* (sequences + 1)                                      */
    int            block_rows;
    float         *sp_logits;     /* (sp_cap): scratch of sparse reads, (count, K)        */
    int32_t       *sp_ids;        /* (sp_cap)                                             */
    size_t         sp_cap;
    int32_t       *tok_scratch;   /* (tok_cap): /tokens rows read only to be checked      */
    size_t         tok_cap;
    /* a descriptor of the file HDF5 opened (default driver), -1 otherwise: its size is
     * checked around every read (a file truncated while it is read), and it is mapped */
    int            fd;
    uint64_t       size_open;     /* the file's size when it was opened                   */
    int            map_ok;        /* mapped raw reads are possible                        */
    int            mapped;        /* map_ok and not turned off                            */
    int            bus;           /* this corpus installed the SIGBUS guard (busguard.h)  */
    size_t         page;
    /* sq_corpus_read of filtered or float16 chunks through the chunk decoder (read_chunks in
     * corpus_read.c): the chunk, the decoder's scratch, a chunk's rows as float32 */
    sq_corpus_raw  rd_raw;
    unsigned char *rd_work;
    size_t         rd_work_cap;
    float         *rd_rows;
    size_t         rd_rows_cap;
};

struct sq_corpus_writer {
    sq_corpus_writer_params p;
    char    *path;
    char    *tmp;
    int      slot;
    hid_t    file;
    hid_t    logits[2];       /* [model]: /m/logits or /m/topk_logits                       */
    hid_t    ids[2];          /* [model]: /m/topk_ids (sparse)                              */
    hid_t    tokens;
    int      has_tokens;      /* -1: not known before the first append                      */
    int      width;           /* columns stored per model: V or K                           */
    int      chunk_rows;
    int64_t  flushed;         /* rows in the file                                           */
    int      staged;          /* rows waiting in the stage buffers                          */
    float   *st_logits[2];    /* (chunk_rows, width)                                        */
    int32_t *st_ids[2];       /* (chunk_rows, width), sparse only                           */
    int32_t *st_tokens;       /* (chunk_rows)                                               */
    int64_t *offsets;         /* (n_offsets): sequence boundaries so far, starting with 0   */
    size_t   n_offsets, cap_offsets;
    int     *heap;            /* (K): top-K selection scratch                               */
    int      failed;          /* a write failed: only abort remains                         */
    int      resumable;       /* tmp is PATH.partial: kept on abort, checkpointed per chunk */
    hid_t    resume_offsets;  /* /resume/seq_offsets: the boundaries at the last checkpoint */
};

void sqc_h5_quiet(void);
hid_t sqc_h5_fapl_new(void);
const char *sqc_h5_detail(char buf[256]);
void sqc_h5_close_dataset(hid_t *id);
hid_t sqc_half_type_new(void);
extern const char *const sqc_model_names[2];
int sqc_attr_string(sq_corpus *c, const char *name, char *out, size_t cap, sq_error *err);
int sqc_attr_int(sq_corpus *c, const char *name, long long *out, sq_error *err);
int sqc_write_attr_string(hid_t file, const char *name, const char *value);
int sqc_write_attr_int(hid_t file, const char *name, long long value);
void sqc_writer_free(sq_corpus_writer *w);
int sqc_writer_new(const char *path, const sq_corpus_writer_params *params,
                      sq_corpus_writer **out, sq_error *err);
int sqc_writer_create_file(sq_corpus_writer *w, const sq_corpus_writer_params *params,
                              sq_error *err);
int sqc_writer_flush(sq_corpus_writer *w, sq_error *err);
int sqc_resume_state_drop(sq_corpus_writer *w, sq_error *err);

#endif
