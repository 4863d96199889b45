/* Draft/target corpora in HDF5: the atomic writer (dense, float16 or top-K rows, staged in
 * chunks) and its commit. */
#include "libsequoia/format/corpus.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <hdf5.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

#include "libsequoia/base/half.h"
#include "libsequoia/base/io.h"
#include "libsequoia/format/corpus_private.h"


sq_corpus_writer_params sq_corpus_writer_default_params(void)
{
    sq_corpus_writer_params p;
    memset(&p, 0, sizeof p);
    p.vocab = 0;
    p.topk = 0;
    p.half = 0;
    p.chunk_rows = 0;
    p.compression = 1;
    p.draft = "";
    p.target = "";
    return p;
}

int sqc_write_attr_string(hid_t file, const char *name, const char *value)
{
    hid_t t = H5Tcopy(H5T_C_S1);
    hid_t sp = H5Screate(H5S_SCALAR);
    int ok = t >= 0 && sp >= 0 && H5Tset_size(t, H5T_VARIABLE) >= 0 &&
             H5Tset_cset(t, H5T_CSET_UTF8) >= 0;
    hid_t a = ok ? H5Acreate2(file, name, t, sp, H5P_DEFAULT, H5P_DEFAULT) : H5I_INVALID_HID;
    ok = a >= 0 && H5Awrite(a, t, &value) >= 0;
    if (a >= 0)
        H5Aclose(a);
    if (sp >= 0)
        H5Sclose(sp);
    if (t >= 0)
        H5Tclose(t);
    return ok ? 0 : -1;
}

int sqc_write_attr_int(hid_t file, const char *name, long long value)
{
    hid_t sp = H5Screate(H5S_SCALAR);
    hid_t a = sp >= 0 ? H5Acreate2(file, name, H5T_STD_I64LE, sp, H5P_DEFAULT, H5P_DEFAULT)
                      : H5I_INVALID_HID;
    int ok = a >= 0 && H5Awrite(a, H5T_NATIVE_LLONG, &value) >= 0;
    if (a >= 0)
        H5Aclose(a);
    if (sp >= 0)
        H5Sclose(sp);
    return ok ? 0 : -1;
}

/* An extendible dataset [0, width] (or [0] when width == 0), chunked by rows. */
static hid_t create_rows_dataset(sq_corpus_writer *w, const char *name, hid_t type, int width)
{
    int rank = width > 0 ? 2 : 1;
    hsize_t dims[2] = {0, (hsize_t)width}, maxd[2] = {H5S_UNLIMITED, (hsize_t)width};
    hsize_t chunk[2] = {(hsize_t)w->chunk_rows, (hsize_t)width};
    if (rank == 1)
        chunk[0] = (hsize_t)w->chunk_rows * 16; /* tokens are small: fewer, larger chunks */
    hid_t sp = H5Screate_simple(rank, dims, maxd);
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    /* no modification times: the same data always gives the same bytes (and SHA-256) */
    int ok = sp >= 0 && dcpl >= 0 && H5Pset_chunk(dcpl, rank, chunk) >= 0 &&
             H5Pset_obj_track_times(dcpl, 0) >= 0;
    /* the parent group ("/target" of "/target/logits"), also without times */
    const char *slash = strrchr(name, '/');
    if (ok && slash && slash != name) {
        char parent[64];
        snprintf(parent, sizeof parent, "%.*s", (int)(slash - name), name);
        if (H5Lexists(w->file, parent, H5P_DEFAULT) <= 0) {
            hid_t gcpl = H5Pcreate(H5P_GROUP_CREATE);
            hid_t g = gcpl >= 0 && H5Pset_obj_track_times(gcpl, 0) >= 0
                          ? H5Gcreate2(w->file, parent, H5P_DEFAULT, gcpl, H5P_DEFAULT)
                          : H5I_INVALID_HID;
            ok = g >= 0;
            if (g >= 0)
                H5Gclose(g);
            if (gcpl >= 0)
                H5Pclose(gcpl);
        }
    }
    if (ok && w->p.compression > 0)
        ok = H5Pset_shuffle(dcpl) >= 0 && H5Pset_deflate(dcpl, (unsigned)w->p.compression) >= 0;
    hid_t lcpl = H5Pcreate(H5P_LINK_CREATE);
    if (ok)
        ok = lcpl >= 0 && H5Pset_create_intermediate_group(lcpl, 1) >= 0;
    hid_t ds = ok ? H5Dcreate2(w->file, name, type, sp, lcpl, dcpl, H5P_DEFAULT) : H5I_INVALID_HID;
    if (lcpl >= 0)
        H5Pclose(lcpl);
    if (dcpl >= 0)
        H5Pclose(dcpl);
    if (sp >= 0)
        H5Sclose(sp);
    return ds;
}

void sqc_writer_free(sq_corpus_writer *w)
{
    for (int k = 0; k < 2; k++) {
        sqc_h5_close_dataset(&w->logits[k]);
        sqc_h5_close_dataset(&w->ids[k]);
        free(w->st_logits[k]);
        free(w->st_ids[k]);
    }
    sqc_h5_close_dataset(&w->tokens);
    sqc_h5_close_dataset(&w->resume_offsets);
    if (w->file >= 0)
        H5Fclose(w->file);
    w->file = H5I_INVALID_HID;
    free(w->st_tokens);
    free(w->offsets);
    free(w->heap);
    free(w->path);
    free(w->tmp);
    free(w);
}

void sq_corpus_writer_abort(sq_corpus_writer *w)
{
    if (!w)
        return;
    char *tmp = w->tmp;
    int slot = w->slot;
    int keep = w->resumable;  /* PATH.partial stays for --resume, as of its last checkpoint */
    w->tmp = NULL;
    sqc_writer_free(w); /* closes the HDF5 file first */
    if (!keep)
        sq_temp_discard(tmp, slot);
    free(tmp);
}

/* Checks the parameters and allocates a writer with its buffers (no file yet). */
int sqc_writer_new(const char *path, const sq_corpus_writer_params *params,
                      sq_corpus_writer **out, sq_error *err)
{
    *out = NULL;
    sqc_h5_quiet();
    const sq_corpus_writer_params p = *params;
    if (p.vocab < 1)
        return sq_error_set(err, SQ_EUSAGE, "%s: vocab %d: must be at least 1", path, p.vocab);
    if (p.topk < 0 || p.topk > p.vocab)
        return sq_error_set(err, SQ_EUSAGE, "%s: topk %d: must be between 0 (dense) and V = %d", path,
                            p.topk, p.vocab);
    if (p.topk > 0 && p.half)
        return sq_error_set(err, SQ_EUSAGE, "%s: float16 storage is for dense logits only", path);
    if (p.compression < 0 || p.compression > 9)
        return sq_error_set(err, SQ_EUSAGE, "%s: compression %d: must be a deflate level 0-9", path,
                            p.compression);
    if (p.chunk_rows < 0)
        return sq_error_set(err, SQ_EUSAGE, "%s: chunk_rows %d: must be >= 0", path, p.chunk_rows);
    int width = p.topk > 0 ? p.topk : p.vocab;
    size_t elem = p.half ? 2 : 4;
    size_t row_bytes = (size_t)width * elem;
    if (row_bytes >= ((size_t)1 << 31))
        return sq_error_set(err, SQ_EUSAGE, "%s: one row of %d values exceeds HDF5's chunk limit",
                            path, width);
    int chunk = p.chunk_rows;
    if (chunk == 0) {
        size_t r = WRITER_CHUNK_BYTES / row_bytes;
        chunk = r < 1 ? 1 : (r > WRITER_CHUNK_MAX_ROWS ? WRITER_CHUNK_MAX_ROWS : (int)r);
    }
    if ((size_t)chunk * row_bytes >= ((size_t)1 << 31))
        chunk = (int)(((size_t)1 << 31) / row_bytes) - 1;
    if (chunk < 1)
        chunk = 1;

    sq_corpus_writer *w = calloc(1, sizeof *w);
    if (!w)
        return sq_error_oom(err, "corpus writer");
    w->p = p;
    w->p.draft = NULL;
    w->p.target = NULL;
    w->slot = -1;
    w->file = w->tokens = H5I_INVALID_HID;
    for (int k = 0; k < 2; k++)
        w->logits[k] = w->ids[k] = H5I_INVALID_HID;
    w->has_tokens = -1;
    w->width = width;
    w->chunk_rows = chunk;
    w->path = strdup(path);
    w->cap_offsets = 64;
    w->offsets = malloc(w->cap_offsets * sizeof *w->offsets);
    w->st_tokens = malloc((size_t)chunk * sizeof *w->st_tokens);
    int oom = !w->path || !w->offsets || !w->st_tokens;
    for (int k = 0; k < 2; k++) {
        w->st_logits[k] = malloc((size_t)chunk * (size_t)width * sizeof(float));
        oom |= !w->st_logits[k];
        if (p.topk > 0) {
            w->st_ids[k] = malloc((size_t)chunk * (size_t)width * sizeof(int32_t));
            oom |= !w->st_ids[k];
        }
    }
    if (p.topk > 0) {
        w->heap = malloc((size_t)p.topk * sizeof *w->heap);
        oom |= !w->heap;
    }
    if (oom) {
        sqc_writer_free(w);
        return sq_error_oom(err, "corpus writer buffers");
    }
    w->offsets[0] = 0;
    w->n_offsets = 1;
    w->resume_offsets = H5I_INVALID_HID;
    *out = w;
    return SQ_OK;
}

/* Creates the HDF5 file w->tmp with the attributes and the empty datasets. On failure the
 * writer is aborted. */
int sqc_writer_create_file(sq_corpus_writer *w, const sq_corpus_writer_params *params,
                              sq_error *err)
{
    const char *path = w->path;
    const sq_corpus_writer_params p = *params;
    int width = w->width;
    hid_t fapl = sqc_h5_fapl_new();
    if (fapl >= 0)
        H5Pset_fclose_degree(fapl, H5F_CLOSE_STRONG);
    /* An anonymous temporary file is named by its /proc/self/fd link, which HDF5's default
     * (sec2) driver resolves to a path that does not exist; the stdio driver opens the name as
     * given (H5F__build_actual_name in HDF5 1.10 only resolves links for POSIX-handle drivers). */
    if (fapl >= 0 && sq_temp_is_anonymous(w->slot))
        H5Pset_fapl_stdio(fapl);
    w->file = H5Fcreate(w->tmp, H5F_ACC_TRUNC, H5P_DEFAULT, fapl >= 0 ? fapl : H5P_DEFAULT);
    if (fapl >= 0)
        H5Pclose(fapl);
    char d[256];
    if (w->file < 0) {
        sqc_h5_detail(d);
        sq_error_set(err, SQ_ECANTCREAT, "%s: cannot create the HDF5 file: %s", path, d);
        sq_corpus_writer_abort(w);
        return SQ_ECANTCREAT;
    }
    int bad = sqc_write_attr_string(w->file, "format", SQ_CORPUS_FORMAT) ||
              sqc_write_attr_int(w->file, "version", SQ_CORPUS_VERSION) ||
              sqc_write_attr_int(w->file, "vocab_size", p.vocab) ||
              sqc_write_attr_string(w->file, "draft", params->draft ? params->draft : "") ||
              sqc_write_attr_string(w->file, "target", params->target ? params->target : "");
    hid_t half = p.half ? sqc_half_type_new() : H5I_INVALID_HID;
    for (int k = 0; k < 2 && !bad; k++) {
        char name[32];
        if (p.topk > 0) {
            snprintf(name, sizeof name, "/%s/topk_ids", sqc_model_names[k]);
            w->ids[k] = create_rows_dataset(w, name, H5T_STD_I32LE, width);
            snprintf(name, sizeof name, "/%s/topk_logits", sqc_model_names[k]);
            w->logits[k] = create_rows_dataset(w, name, H5T_IEEE_F32LE, width);
            bad = w->ids[k] < 0 || w->logits[k] < 0;
        } else {
            snprintf(name, sizeof name, "/%s/logits", sqc_model_names[k]);
            w->logits[k] = create_rows_dataset(w, name, p.half ? half : H5T_IEEE_F32LE, width);
            bad = (p.half && half < 0) || w->logits[k] < 0;
        }
    }
    if (half >= 0)
        H5Tclose(half);
    if (bad) {
        sqc_h5_detail(d);
        sq_error_set(err, SQ_EIO, "%s: cannot write the corpus layout: %s", path, d);
        sq_corpus_writer_abort(w);
        return SQ_EIO;
    }
    return SQ_OK;
}

int sq_corpus_writer_open(const char *path, const sq_corpus_writer_params *params,
                          sq_corpus_writer **out, sq_error *err)
{
    sq_corpus_writer *w;
    int rc = sqc_writer_new(path, params, &w, err);
    if (rc)
        return rc;
    if ((rc = sq_temp_create(path, &w->tmp, &w->slot, err))) {
        sqc_writer_free(w);
        return rc;
    }
    if ((rc = sqc_writer_create_file(w, params, err)))
        return rc;
    *out = w;
    return SQ_OK;
}

static int extend_and_write(sq_corpus_writer *w, hid_t ds, hid_t mem_type, int width,
                            const void *buf, sq_error *err, const char *what)
{
    int rank = width > 0 ? 2 : 1;
    hsize_t newd[2] = {(hsize_t)(w->flushed + w->staged), (hsize_t)width};
    hsize_t start[2] = {(hsize_t)w->flushed, 0}, cnt[2] = {(hsize_t)w->staged, (hsize_t)width};
    int ok = H5Dset_extent(ds, newd) >= 0;
    hid_t fs = ok ? H5Dget_space(ds) : H5I_INVALID_HID;
    hid_t ms = H5Screate_simple(rank, cnt, NULL);
    ok = ok && fs >= 0 && ms >= 0 &&
         H5Sselect_hyperslab(fs, H5S_SELECT_SET, start, NULL, cnt, NULL) >= 0 &&
         H5Dwrite(ds, mem_type, ms, fs, H5P_DEFAULT, buf) >= 0;
    if (ms >= 0)
        H5Sclose(ms);
    if (fs >= 0)
        H5Sclose(fs);
    if (!ok) {
        int e = errno;
        char d[256];
        sqc_h5_detail(d);
        if (!*d || strstr(d, "write failed") || strstr(d, "file write failed"))
            snprintf(d, sizeof d, "%s", strerror(e));
        w->failed = 1;
        /* a resumable dump writes PATH.partial itself: name it, the file the user keeps */
        return sq_error_set(err, SQ_EIO, "%s: %s: write error: %s",
                            w->resumable ? w->tmp : w->path, what, d);
    }
    return SQ_OK;
}

int sqc_writer_flush(sq_corpus_writer *w, sq_error *err)
{
    if (w->staged == 0)
        return SQ_OK;
    int rc;
    for (int k = 0; k < 2; k++) {
        if (w->p.topk > 0 && (rc = extend_and_write(w, w->ids[k], H5T_NATIVE_INT32, w->width,
                                                     w->st_ids[k], err, "topk_ids")))
            return rc;
        if (w->p.half) {
            /* narrow in place, front to back: half i (bytes 2i, 2i+1) never reaches float j > i */
            size_t n = (size_t)w->staged * (size_t)w->width;
            unsigned char *b = (unsigned char *)w->st_logits[k];
            for (size_t i = 0; i < n; i++) {
                float f;
                memcpy(&f, b + 4 * i, sizeof f);
                uint16_t h = sq_f32_to_f16(f);
                memcpy(b + 2 * i, &h, sizeof h);
            }
            hid_t mt = sqc_half_type_new();
            rc = mt < 0 ? sq_error_oom(err, "float16 type")
                        : extend_and_write(w, w->logits[k], mt, w->width, b, err, sqc_model_names[k]);
            if (mt >= 0)
                H5Tclose(mt);
        } else {
            rc = extend_and_write(w, w->logits[k], H5T_NATIVE_FLOAT, w->width, w->st_logits[k], err,
                                  sqc_model_names[k]);
        }
        if (rc)
            return rc;
    }
    if (w->has_tokens == 1 &&
        (rc = extend_and_write(w, w->tokens, H5T_NATIVE_INT32, 0, w->st_tokens, err, "/tokens")))
        return rc;
    w->flushed += w->staged;
    w->staged = 0;
    return SQ_OK;
}

/* Is token a a better top-K entry than b: larger logit, then smaller id. */
static int topk_better(const float *row, int a, int b)
{
    return row[a] > row[b] || (row[a] == row[b] && a < b);
}

static void heap_down(int *h, int n, int i, const float *row)
{
    /* min-heap on "better": the root is the worst of the kept entries */
    for (;;) {
        int l = 2 * i + 1, r = l + 1, s = i;
        if (l < n && topk_better(row, h[s], h[l]))
            s = l;
        if (r < n && topk_better(row, h[s], h[r]))
            s = r;
        if (s == i)
            return;
        int t = h[i];
        h[i] = h[s];
        h[s] = t;
        i = s;
    }
}

/* The K best ids of row, best first, into ids and their logits into lg. */
static void topk_select(const float *row, int V, int K, int *heap, int32_t *ids, float *lg)
{
    int n = 0;
    for (int j = 0; j < V; j++) {
        if (n < K) {
            heap[n] = j;
            for (int i = n++; i > 0;) { /* sift up */
                int p = (i - 1) / 2;
                if (!topk_better(row, heap[p], heap[i]))
                    break;
                int t = heap[i];
                heap[i] = heap[p];
                heap[p] = t;
                i = p;
            }
        } else if (topk_better(row, j, heap[0])) {
            heap[0] = j;
            heap_down(heap, n, 0, row);
        }
    }
    /* Pop the worst repeatedly: fills the output from the back. */
    for (int i = K - 1; i >= 0; i--) {
        ids[i] = heap[0];
        lg[i] = row[heap[0]];
        heap[0] = heap[--n];
        heap_down(heap, n, 0, row);
    }
}

int sq_corpus_writer_append(sq_corpus_writer *w, const float *target, const float *draft,
                            const int32_t *tokens, int rows, sq_error *err)
{
    if (w->failed)
        return sq_error_set(err, SQ_EIO, "%s: an earlier write failed", w->path);
    if (rows < 0)
        return sq_error_set(err, SQ_EUSAGE, "%s: append of %d rows", w->path, rows);
    if (rows == 0)
        return SQ_OK;
    int V = w->p.vocab;
    if (w->has_tokens >= 0 && w->has_tokens != (tokens != NULL))
        return sq_error_set(err, SQ_EUSAGE, "%s: /tokens: tokens must be given with every append or "
                            "with none", w->path);
    /* Check everything before staging anything, so that a refused append changes nothing. */
    for (int r = 0; r < rows; r++) {
        int64_t row = w->flushed + w->staged + r;
        for (int k = 0; k < 2; k++) {
            const float *v = (k == 0 ? target : draft) + (size_t)r * (size_t)V;
            for (int j = 0; j < V; j++) {
                if (!isfinite(v[j]))
                    return sq_error_set(err, SQ_EDATA, "%s: /%s/logits: row %lld: column %d is not "
                                        "finite", w->path, sqc_model_names[k], (long long)row, j);
                if (w->p.half && fabsf(v[j]) > HALF_MAX)
                    return sq_error_set(err, SQ_EDATA, "%s: /%s/logits: row %lld: column %d: %g does "
                                        "not fit in float16", w->path, sqc_model_names[k],
                                        (long long)row, j, (double)v[j]);
            }
        }
        if (tokens && (tokens[r] < 0 || tokens[r] >= V))
            return sq_error_set(err, SQ_EDATA, "%s: /tokens: row %lld: token id %d is outside the "
                                "vocabulary [0, %d)", w->path, (long long)row, (int)tokens[r], V);
    }
    if (w->has_tokens < 0) {
        w->has_tokens = tokens != NULL;
        if (w->has_tokens) {
            w->tokens = create_rows_dataset(w, "/tokens", H5T_STD_I32LE, 0);
            if (w->tokens < 0) {
                char d[256];
                w->failed = 1;
                return sq_error_set(err, SQ_EIO, "%s: /tokens: cannot create: %s", w->path,
                                    sqc_h5_detail(d));
            }
        }
    }
    for (int r = 0; r < rows; r++) {
        for (int k = 0; k < 2; k++) {
            const float *v = (k == 0 ? target : draft) + (size_t)r * (size_t)V;
            float *dst = w->st_logits[k] + (size_t)w->staged * (size_t)w->width;
            if (w->p.topk > 0)
                topk_select(v, V, w->p.topk, w->heap,
                            w->st_ids[k] + (size_t)w->staged * (size_t)w->width, dst);
            else
                memcpy(dst, v, (size_t)V * sizeof *dst);
        }
        if (tokens)
            w->st_tokens[w->staged] = tokens[r];
        if (++w->staged == w->chunk_rows) {
            int rc = sqc_writer_flush(w, err);
            if (rc == SQ_OK && w->resumable)
                rc = sq_corpus_writer_checkpoint(w, err);  /* a complete chunk is durable */
            if (rc)
                return rc;
        }
    }
    return SQ_OK;
}

int sq_corpus_writer_end_sequence(sq_corpus_writer *w, sq_error *err)
{
    int64_t n = w->flushed + w->staged;
    if (n == w->offsets[w->n_offsets - 1])
        return SQ_OK; /* nothing since the last boundary: sequences are never empty */
    if (w->n_offsets == w->cap_offsets) {
        size_t cap = w->cap_offsets * 2;
        int64_t *o = realloc(w->offsets, cap * sizeof *o);
        if (!o)
            return sq_error_oom(err, "sequence offsets");
        w->offsets = o;
        w->cap_offsets = cap;
    }
    w->offsets[w->n_offsets++] = n;
    return SQ_OK;
}


int sq_corpus_writer_commit(sq_corpus_writer *w, sq_error *err)
{
    int rc = SQ_OK;
    if (w->failed)
        rc = sq_error_set(err, SQ_EIO, "%s: an earlier write failed", w->path);
    if (rc == SQ_OK)
        rc = sq_corpus_writer_end_sequence(w, err);
    if (rc == SQ_OK)
        rc = sqc_writer_flush(w, err);
    if (rc == SQ_OK && w->flushed == 0)
        rc = sq_error_set(err, SQ_EDATA, "%s: no rows were appended; an empty corpus is not valid",
                          w->path);
    if (rc == SQ_OK) {
        hsize_t n = (hsize_t)w->n_offsets;
        hid_t sp = H5Screate_simple(1, &n, NULL);
        hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
        if (dcpl >= 0)
            H5Pset_obj_track_times(dcpl, 0);
        hid_t ds = sp >= 0 && dcpl >= 0
                       ? H5Dcreate2(w->file, "/seq_offsets", H5T_STD_I64LE, sp, H5P_DEFAULT, dcpl,
                                    H5P_DEFAULT)
                       : H5I_INVALID_HID;
        if (dcpl >= 0)
            H5Pclose(dcpl);
        int ok = ds >= 0 && H5Dwrite(ds, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT,
                                     w->offsets) >= 0;
        if (ds >= 0)
            H5Dclose(ds);
        if (sp >= 0)
            H5Sclose(sp);
        if (!ok) {
            char d[256];
            rc = sq_error_set(err, SQ_EIO, "%s: /seq_offsets: write error: %s",
                              w->resumable ? w->tmp : w->path, sqc_h5_detail(d));
        }
    }
    if (rc == SQ_OK && w->resumable)
        rc = sqc_resume_state_drop(w, err);  /* the finished file is a plain corpus */
    if (rc == SQ_OK) {
        for (int k = 0; k < 2; k++) {
            sqc_h5_close_dataset(&w->logits[k]);
            sqc_h5_close_dataset(&w->ids[k]);
        }
        sqc_h5_close_dataset(&w->tokens);
        herr_t fl = H5Fflush(w->file, H5F_SCOPE_GLOBAL);
        herr_t cl = H5Fclose(w->file);
        w->file = H5I_INVALID_HID;
        if (fl < 0 || cl < 0) {
            char d[256];
            rc = sq_error_set(err, SQ_EIO, "%s: cannot finish the HDF5 file: %s", w->path,
                              sqc_h5_detail(d));
        }
    }
    if (rc != SQ_OK) {
        sq_corpus_writer_abort(w);
        return rc;
    }
    rc = sq_temp_commit(w->tmp, w->slot, w->path, err);
    sqc_writer_free(w);
    return rc;
}

