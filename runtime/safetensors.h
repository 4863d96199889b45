/* Reading safetensors checkpoints (https://huggingface.co/docs/safetensors).
 *
 * A file is laid out as
 *
 *     u64 (little-endian)  N, the length of the header
 *     N bytes              a JSON object: { "__metadata__": {str: str}?,
 *                                           "<name>": { "dtype": "F16",
 *                                                       "shape": [d0, d1, ...],
 *                                                       "data_offsets": [begin, end] }, ... }
 *     the data buffer      each tensor's bytes (row-major, little-endian) at [begin, end),
 *                          offsets counted from the start of the buffer
 *
 * sq_st_open maps the file read-only and validates every entry before handing out pointers:
 * the header length against the file size, each offset against the real buffer size (64-bit
 * arithmetic with overflow checks), shape x dtype size against the offset span, and overlaps
 * between tensors. Gaps between tensors and trailing bytes are allowed. Errors (SQ_EDATA) name
 * the file and the tensor or key, e.g.
 *     model.safetensors: model.norm.weight: data_offsets end 4096 is past the end of the data (2048 bytes)
 *
 * sq_st_set is a whole checkpoint: one model.safetensors, or the shards that
 * model.safetensors.index.json lists in its weight_map. */
#ifndef SQ_RUNTIME_SAFETENSORS_H
#define SQ_RUNTIME_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "libsequoia/base/error.h"
/* F16 and BF16 tensors convert with the project's one 16-bit codec (sq_f16_to_f32 and the
 * rest) */
#include "libsequoia/base/half.h"

/* Largest header this reader accepts (the reference implementation's limit is 100 MB). */
#define SQ_ST_MAX_HEADER (100u << 20)
/* Most dimensions in one tensor's shape. */
#define SQ_ST_MAX_DIMS 8

typedef enum sq_st_dtype {
    SQ_ST_BOOL, SQ_ST_U8, SQ_ST_I8, SQ_ST_I16, SQ_ST_U16, SQ_ST_F16, SQ_ST_BF16, SQ_ST_I32,
    SQ_ST_U32, SQ_ST_F32, SQ_ST_F64, SQ_ST_I64, SQ_ST_U64, SQ_ST_F8_E4M3, SQ_ST_F8_E5M2,
    SQ_ST_N_DTYPES
} sq_st_dtype;

/* "F16", ...; and the size of one element in bytes. */
const char *sq_st_dtype_name(sq_st_dtype dt);
size_t sq_st_dtype_size(sq_st_dtype dt);
/* Returns 0 and sets *dt when `name` is a known dtype, -1 otherwise. */
int sq_st_dtype_parse(const char *name, sq_st_dtype *dt);

typedef struct sq_st_tensor {
    char        *name;
    sq_st_dtype  dtype;
    int          ndim;
    int64_t      shape[SQ_ST_MAX_DIMS];
    uint64_t     numel;     /* product of shape (1 for a scalar)                         */
    uint64_t     begin;     /* data_offsets, relative to the data buffer                 */
    uint64_t     nbytes;    /* end - begin = numel * dtype size                          */
    const void  *data;      /* inside the read-only mapping; not necessarily aligned     */
} sq_st_tensor;

typedef struct sq_st_file {
    char         *path;
    int           n_tensors;
    sq_st_tensor *tensors;  /* (n_tensors), sorted by name                                */
    cJSON        *metadata; /* "__metadata__" object, or NULL                             */
    uint64_t      file_size;
    void         *map;      /* the whole file, PROT_READ                                  */
} sq_st_file;

/* Maps and validates `path`. Errors: SQ_ENOINPUT (cannot open), SQ_EDATA (malformed),
 * SQ_EIO, SQ_ESOFTWARE (out of memory). */
int sq_st_open(const char *path, sq_st_file **out, sq_error *err);
void sq_st_close(sq_st_file *f);

/* The tensor called `name`, or NULL. */
const sq_st_tensor *sq_st_find(const sq_st_file *f, const char *name);

/* A "__metadata__" value, or NULL. */
const char *sq_st_metadata(const sq_st_file *f, const char *key);

/* Converts `count` elements of an F32, F16 or BF16 buffer (unaligned is fine) to float32, by
 * libsequoia/base/half.h. Returns -1 for any other dtype. */
int sq_st_to_f32(sq_st_dtype dt, const void *src, float *dst, size_t count);

/* A checkpoint: <dir>/model.safetensors if it exists, else the shards named by
 * <dir>/model.safetensors.index.json. Shard names must be plain file names in `dir`; every
 * tensor of the weight_map must be present in its shard. Errors: SQ_ENOINPUT when neither file
 * exists or a shard is missing, SQ_EDATA. */
typedef struct sq_st_set {
    char        *dir;
    int          n_files;
    sq_st_file **files;      /* (n_files)                                                */
    cJSON       *weight_map; /* from the index, or NULL for a single file               */
} sq_st_set;

int sq_st_set_open(const char *dir, sq_st_set **out, sq_error *err);
void sq_st_set_free(sq_st_set *s);

/* The tensor `name` and, when file is not NULL, the file holding it; NULL when absent. */
const sq_st_tensor *sq_st_set_find(const sq_st_set *s, const char *name, const sq_st_file **file);

#endif
