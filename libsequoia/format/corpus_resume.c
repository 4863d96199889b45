/* Draft/target corpora in HDF5: resumable writing (PATH.partial, checkpoints after whole
 * chunks, reopening a partial file whose inputs match). */
#include "libsequoia/format/corpus.h"

#include <errno.h>
#include <fcntl.h>
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

#include "libsequoia/base/io.h"
#include "libsequoia/format/corpus_private.h"

/* ---- resumable writing ---------------------------------------------------------------------
 * PATH.partial holds, besides the corpus datasets, the root attributes resume_rows (rows
 * durable at the last checkpoint) and resume_fingerprint (the caller's description of its
 * inputs) and the dataset /resume/seq_offsets (sequence boundaries at that checkpoint). Rows
 * past resume_rows (written after the checkpoint) are cut off when the file is reopened. */

#define RESUME_ROWS "resume_rows"
#define RESUME_FINGERPRINT "resume_fingerprint"
#define RESUME_OFFSETS "/resume/seq_offsets"

static int attr_set_int(hid_t file, const char *name, long long value)
{
    if (H5Aexists(file, name) <= 0)
        return sqc_write_attr_int(file, name, value);
    hid_t a = H5Aopen(file, name, H5P_DEFAULT);
    int ok = a >= 0 && H5Awrite(a, H5T_NATIVE_LLONG, &value) >= 0;
    if (a >= 0)
        H5Aclose(a);
    return ok ? 0 : -1;
}

int sq_corpus_writer_checkpoint(sq_corpus_writer *w, sq_error *err)
{
    if (!w->resumable)
        return SQ_OK;
    if (w->failed)
        return sq_error_set(err, SQ_EIO, "%s: an earlier write failed", w->tmp);
    int rc = sqc_writer_flush(w, err);
    if (rc)
        return rc;
    hsize_t n = (hsize_t)w->n_offsets;
    int ok = H5Dset_extent(w->resume_offsets, &n) >= 0 &&
             H5Dwrite(w->resume_offsets, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT,
                      w->offsets) >= 0 &&
             H5Dflush(w->resume_offsets) >= 0;
    /* Data and boundaries first, then the row count that makes them count. */
    ok = ok && H5Fflush(w->file, H5F_SCOPE_GLOBAL) >= 0 &&
         attr_set_int(w->file, RESUME_ROWS, (long long)w->flushed) == 0 &&
         H5Fflush(w->file, H5F_SCOPE_GLOBAL) >= 0;
    if (!ok) {
        char d[256];
        w->failed = 1;
        return sq_error_set(err, SQ_EIO, "%s: checkpoint: write error: %s", w->tmp, sqc_h5_detail(d));
    }
    return SQ_OK;
}

int sqc_resume_state_drop(sq_corpus_writer *w, sq_error *err)
{
    sqc_h5_close_dataset(&w->resume_offsets);
    int ok = H5Adelete(w->file, RESUME_ROWS) >= 0 && H5Adelete(w->file, RESUME_FINGERPRINT) >= 0 &&
             H5Ldelete(w->file, "/resume", H5P_DEFAULT) >= 0;
    if (!ok) {
        char d[256];
        return sq_error_set(err, SQ_EIO, "%s: cannot drop the resume state: %s", w->tmp,
                            sqc_h5_detail(d));
    }
    return SQ_OK;
}

/* Whether rows [0, rows) of dataset `ds` (chunks of cd, checked by resume_dataset) are stored
 * in the partial file as it was found (`size` bytes, before extend_to_eoa): every chunk they
 * span is allocated and ends within `size`, and the chunk of the last row reads back through
 * the filters (a chunk of zeros does not inflate). A truncated partial claims rows whose chunks are gone; resuming it would cut
 * and append to data that is not there (docs/robustness.md, "No lost work"). */
static int resume_rows_intact(sq_corpus_writer *w, const char *name, hid_t ds, int width,
                              const hsize_t cd[2], int64_t rows, uint64_t size, sq_error *err)
{
    if (rows == 0)
        return SQ_OK;
    int rank = width > 0 ? 2 : 1, ok;
    hsize_t cols = width > 0 ? (hsize_t)width : 1, step = rank == 2 ? cd[1] : 1;
    for (hsize_t r = 0; r < (hsize_t)rows; r += cd[0])
        for (hsize_t c = 0; c < cols; c += step) {
            hsize_t off[2] = {r, c};
            unsigned mask = 0;
            haddr_t addr = HADDR_UNDEF;
            hsize_t bytes = 0;
            if (H5Dget_chunk_info_by_coord(ds, off, &mask, &addr, &bytes) < 0 ||
                addr == HADDR_UNDEF || bytes == 0) {
                H5Eclear2(H5E_DEFAULT);
                return sq_error_set(err, SQ_EDATA, "%s: damaged (%s: row %llu is not stored, "
                                    "but resume_rows says %lld rows are); delete it to start "
                                    "over", w->tmp, name, (unsigned long long)r, (long long)rows);
            }
            if ((uint64_t)addr + bytes > size)
                return sq_error_set(err, SQ_EDATA, "%s: damaged (%s: row %llu is stored past "
                                    "the file's end at %llu bytes: truncated?); delete it to "
                                    "start over", w->tmp, name, (unsigned long long)r,
                                    (unsigned long long)size);
        }
    /* the last row, in the dataset's own type (no conversion): its chunk must decode */
    hid_t type = H5Dget_type(ds);
    size_t elem = type >= 0 ? H5Tget_size(type) : 0;
    void *buf = elem ? malloc((size_t)cols * elem) : NULL;
    hid_t fs = H5Dget_space(ds);
    hsize_t start[2] = {(hsize_t)rows - 1, 0}, count[2] = {1, cols};
    hid_t ms = H5Screate_simple(rank, count, NULL);
    ok = buf && fs >= 0 && ms >= 0 &&
         H5Sselect_hyperslab(fs, H5S_SELECT_SET, start, NULL, count, NULL) >= 0 &&
         H5Dread(ds, type, ms, fs, H5P_DEFAULT, buf) >= 0;
    char d[256];
    if (!ok)
        sqc_h5_detail(d);
    free(buf);
    if (ms >= 0)
        H5Sclose(ms);
    if (fs >= 0)
        H5Sclose(fs);
    if (type >= 0)
        H5Tclose(type);
    if (!ok)
        return sq_error_set(err, SQ_EDATA, "%s: damaged (%s: row %lld does not read back: %s); "
                            "delete it to start over", w->tmp, name, (long long)rows - 1,
                            *d ? d : "unreadable");
    return SQ_OK;
}

/* Opens dataset `name` of the partial file and checks its row width and that its first `rows`
 * rows are intact (resume_rows_intact); writes nothing (resume_cut does). */
static int resume_dataset(sq_corpus_writer *w, const char *name, int width, int64_t rows,
                          uint64_t size, hid_t *out, sq_error *err)
{
    char d[256];
    *out = H5Dopen2(w->file, name, H5P_DEFAULT);
    if (*out < 0)
        return sq_error_set(err, SQ_EDATA, "%s: %s: missing: %s (delete it to start over)", w->tmp,
                            name, sqc_h5_detail(d));
    hid_t sp = H5Dget_space(*out);
    int rank = sp >= 0 ? H5Sget_simple_extent_ndims(sp) : -1;
    hsize_t dims[2] = {0, 0};
    if (rank == (width > 0 ? 2 : 1))
        H5Sget_simple_extent_dims(sp, dims, NULL);
    if (sp >= 0)
        H5Sclose(sp);
    if (rank != (width > 0 ? 2 : 1) || (width > 0 && dims[1] != (hsize_t)width))
        return sq_error_set(err, SQ_EDATA, "%s: %s: shape differs from this dump's (%d columns); "
                            "delete it to start over", w->tmp, name, width);
    /* the writer's datasets are chunked in rows with an unlimited first dimension: another
     * layout cannot grow, and was not written by it */
    hsize_t cd[2] = {0, 1};
    hid_t dcpl = H5Dget_create_plist(*out);
    int chunked = dcpl >= 0 && H5Pget_layout(dcpl) == H5D_CHUNKED &&
                  H5Pget_chunk(dcpl, rank, cd) == rank && cd[0] >= 1 && cd[rank - 1] >= 1;
    if (dcpl >= 0)
        H5Pclose(dcpl);
    H5Eclear2(H5E_DEFAULT);
    if (!chunked)
        return sq_error_set(err, SQ_EDATA, "%s: %s: not stored in chunks of rows, as this tool "
                            "writes its datasets (it cannot grow); delete it to start over",
                            w->tmp, name);
    if (dims[0] < (hsize_t)rows)
        return sq_error_set(err, SQ_EDATA, "%s: %s: %llu rows, but the checkpoint says %lld; "
                            "delete it to start over", w->tmp, name, (unsigned long long)dims[0],
                            (long long)rows);
    return resume_rows_intact(w, name, *out, width, cd, rows, size, err);
}

/* Cuts dataset `ds` to `rows` (what was written after the checkpoint goes). */
static int resume_cut(sq_corpus_writer *w, hid_t ds, int width, int64_t rows, sq_error *err)
{
    char d[256], name[128];
    hsize_t nd[2] = {(hsize_t)rows, (hsize_t)width};
    if (H5Dset_extent(ds, nd) >= 0)
        return SQ_OK;
    sqc_h5_detail(d);
    if (H5Iget_name(ds, name, sizeof name) <= 0)
        snprintf(name, sizeof name, "a dataset");
    return sq_error_set(err, SQ_EIO, "%s: %s: cannot cut to %lld rows: %s", w->tmp, name,
                        (long long)rows, d);
}

/* The end-of-allocation address in an HDF5 superblock at offset 0 (versions 0-3), or 0. */
static uint64_t superblock_eoa(int fd)
{
    unsigned char b[64];
    if (pread(fd, b, sizeof b, 0) != (ssize_t)sizeof b || memcmp(b, "\211HDF\r\n\032\n", 8) != 0)
        return 0;
    int ver = b[8], so, at;
    if (ver <= 1) {
        so = b[13];
        at = (ver == 0 ? 24 : 28) + 2 * so;   /* after the base and free-space addresses */
    } else if (ver <= 3) {
        so = b[9];
        at = 12 + 2 * so;                     /* after the base and extension addresses */
    } else {
        return 0;
    }
    if (so != 8 || at + 8 > (int)sizeof b)
        return 0;
    uint64_t eoa = 0;
    for (int i = 7; i >= 0; i--)
        eoa = (eoa << 8) | b[at + i];
    return eoa;
}

/* A write that failed for want of space (a full disk, `ulimit -f`) may leave the partial file
 * shorter than the space its superblock has allocated, which HDF5 refuses to open ("truncated
 * file"). The rows of the last checkpoint lie before the failed write; the bytes past the end
 * belong to rows after it, which resume_reopen cuts off. So the file is extended with zeros to
 * the allocated size (issue 27 D2). Returns 1 when it was extended (old size in *was). */
static int extend_to_eoa(const char *path, off_t *was)
{
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0)
        return 0;
    struct stat st;
    uint64_t eoa = superblock_eoa(fd);
    int done = 0;
    if (fstat(fd, &st) == 0 && eoa > (uint64_t)st.st_size &&
        eoa - (uint64_t)st.st_size < ((uint64_t)1 << 40) && ftruncate(fd, (off_t)eoa) == 0) {
        *was = st.st_size;
        done = 1;
    }
    close(fd);
    return done;
}

/* The fields of fingerprint `fp` ("NAME VALUE; NAME VALUE; ...", the name up to a field's last
 * space) that differ from `now`'s, as "NAME: partial A, now B; ..." in out; a field one side
 * lacks is an option left at its default there (docs/robustness.md, "No lost work"). Returns
 * the number of fields that differ. */
static int fingerprint_diff(const char *fp, const char *now, char *out, size_t cap)
{
    const char *side[2] = {fp, now};
    size_t len = 0;
    int n = 0;
    out[0] = '\0';
    for (int pass = 0; pass < 2; pass++)   /* fields of fp, then those only now has */
        for (const char *f = side[pass]; *f;) {
            const char *e = strstr(f, "; ");
            size_t flen = e ? (size_t)(e - f) : strlen(f);
            const char *sp = f + flen;
            while (sp > f && sp[-1] != ' ')
                sp--;
            size_t klen = sp > f ? (size_t)(sp - f - 1) : flen;
            /* the same name on the other side */
            const char *o = side[!pass], *ov = NULL;
            size_t ovlen = 0;
            while (*o) {
                const char *oe = strstr(o, "; ");
                size_t olen = oe ? (size_t)(oe - o) : strlen(o);
                if (olen > klen && o[klen] == ' ' && strncmp(o, f, klen) == 0 &&
                    !memchr(o + klen + 1, ' ', olen - klen - 1)) {
                    ov = o + klen + 1;
                    ovlen = olen - klen - 1;
                    break;
                }
                o = oe ? oe + 2 : o + olen;
            }
            const char *v = f + klen + (klen < flen);
            size_t vlen = flen - klen - (klen < flen);
            int differs = ov ? ovlen != vlen || strncmp(ov, v, vlen) != 0 : 1;
            if (differs && (pass == 0 || !ov)) {
                const char *pv = pass == 0 ? v : "at its default", *nv = pass == 0 ? ov : v;
                int pl = pass == 0 ? (int)vlen : 14, nl = pass == 0 ? (int)ovlen : (int)vlen;
                if (!nv)
                    nv = "at its default", nl = 14;
                if (len < cap)
                    len += (size_t)snprintf(out + len, cap - len, "%s%.*s: partial %.*s, now %.*s",
                                            n ? "; " : "", (int)klen, f, pl > 200 ? 200 : pl, pv,
                                            nl > 200 ? 200 : nl, nv);
                n++;
            }
            f = e ? e + 2 : f + flen;
        }
    return n;
}

/* Reopens an existing partial file: checks it was started for the same output and that the
 * rows of its checkpoint are intact, then cuts every dataset to the checkpoint and restores
 * the sequence boundaries. Nothing is written before every check has passed; when the file
 * was extended (extend_to_eoa), *restore is its old size until then, for the caller to cut it
 * back to after closing it on a refusal (-1 otherwise). */
static int resume_reopen(sq_corpus_writer *w, const char *fingerprint, int64_t *rows_done,
                         off_t *restore, sq_error *err)
{
    char d[256];
    *restore = -1;
    struct stat st0;
    uint64_t size = stat(w->tmp, &st0) == 0 ? (uint64_t)st0.st_size : 0;
    hid_t fapl = sqc_h5_fapl_new();
    if (fapl >= 0)
        H5Pset_fclose_degree(fapl, H5F_CLOSE_STRONG);
    w->file = H5Fopen(w->tmp, H5F_ACC_RDWR, fapl >= 0 ? fapl : H5P_DEFAULT);
    off_t was = 0;
    if (w->file < 0 && extend_to_eoa(w->tmp, &was)) {
        H5Eclear2(H5E_DEFAULT);
        size = (uint64_t)was;
        *restore = was;
        w->file = H5Fopen(w->tmp, H5F_ACC_RDWR, fapl >= 0 ? fapl : H5P_DEFAULT);
    }
    if (fapl >= 0)
        H5Pclose(fapl);
    if (w->file < 0) {
        /* HDF5 often leaves no message (a file of other bytes): say what we know. */
        sqc_h5_detail(d);
        if (!*d) {
            htri_t is = H5Fis_hdf5(w->tmp);
            H5Eclear2(H5E_DEFAULT);
            snprintf(d, sizeof d, "%s", is <= 0 ? "not an HDF5 file" : "HDF5 could not open it");
        }
        return sq_error_set(err, SQ_EDATA, "%s: cannot reopen the partial dump (%s); delete it to "
                            "start over", w->tmp, d);
    }
    long long rows = -1, vocab = -1;
    char fp[SQ_CORPUS_MAX_FINGERPRINT + 2];
    fp[0] = '\0';
    sq_corpus probe;
    memset(&probe, 0, sizeof probe);
    probe.file = w->file;
    probe.path = w->tmp;
    sq_error e = {0};
    if (sqc_attr_int(&probe, RESUME_ROWS, &rows, &e) || sqc_attr_int(&probe, "vocab_size", &vocab, &e) ||
        sqc_attr_string(&probe, RESUME_FINGERPRINT, fp, sizeof fp, &e))
        return sq_error_set(err, SQ_EDATA, "%s (not a partial dump of this tool? delete it to "
                            "start over)", e.msg);
    /* the resumed file is finished as this writer's: its format and version must be ours */
    char fmt[64] = "";
    long long version = 0;
    if (sqc_attr_string(&probe, "format", fmt, sizeof fmt, &e) ||
        sqc_attr_int(&probe, "version", &version, &e) || strcmp(fmt, SQ_CORPUS_FORMAT) != 0 ||
        version != SQ_CORPUS_VERSION)
        return sq_error_set(err, SQ_EDATA, "%s: not a partial corpus of this version (format "
                            "\"%s\", version %lld; this writer makes \"%s\" version %d); delete it "
                            "to start over", w->tmp, fmt, version, SQ_CORPUS_FORMAT,
                            SQ_CORPUS_VERSION);
    if (strcmp(fp, fingerprint) != 0) {
        char diff[1024];
        if (fingerprint_diff(fp, fingerprint, diff, sizeof diff) > 0)
            return sq_error_set(err, SQ_EDATA, "%s: was started with other inputs or options "
                                "(%s); delete it, or start over without resuming", w->tmp, diff);
        return sq_error_set(err, SQ_EDATA, "%s: was started with other inputs or options (%s; "
                            "now %s); delete it, or start over without resuming", w->tmp, fp, fingerprint);
    }
    if (vocab != w->p.vocab)
        return sq_error_set(err, SQ_EDATA, "%s: vocab_size %lld, but this dump's vocabulary is "
                            "%d; delete it to start over", w->tmp, vocab, w->p.vocab);
    if (rows < 0)
        return sq_error_set(err, SQ_EDATA, "%s: %s: %lld rows is negative; delete it to start "
                            "over", w->tmp, RESUME_ROWS, rows);
    int rc;
    for (int k = 0; k < 2; k++) {
        char name[32];
        if (w->p.topk > 0) {
            snprintf(name, sizeof name, "/%s/topk_ids", sqc_model_names[k]);
            if ((rc = resume_dataset(w, name, w->width, rows, size, &w->ids[k], err)))
                return rc;
            snprintf(name, sizeof name, "/%s/topk_logits", sqc_model_names[k]);
        } else {
            snprintf(name, sizeof name, "/%s/logits", sqc_model_names[k]);
        }
        if ((rc = resume_dataset(w, name, w->width, rows, size, &w->logits[k], err)))
            return rc;
    }
    if (H5Lexists(w->file, "/tokens", H5P_DEFAULT) > 0) {
        if ((rc = resume_dataset(w, "/tokens", 0, rows, size, &w->tokens, err)))
            return rc;
        w->has_tokens = 1;
    } else {
        H5Eclear2(H5E_DEFAULT);
        w->has_tokens = rows > 0 ? 0 : -1;
    }
    /* The chunk shape of the existing datasets, so that the rest is laid out the same. */
    hid_t dcpl = H5Dget_create_plist(w->logits[0]);
    hsize_t cd[2];
    if (dcpl >= 0 && H5Pget_chunk(dcpl, 2, cd) == 2 && cd[0] >= 1 && cd[0] <= (hsize_t)w->chunk_rows)
        w->chunk_rows = (int)cd[0];
    if (dcpl >= 0)
        H5Pclose(dcpl);
    w->resume_offsets = H5Dopen2(w->file, RESUME_OFFSETS, H5P_DEFAULT);
    hid_t sp = w->resume_offsets >= 0 ? H5Dget_space(w->resume_offsets) : H5I_INVALID_HID;
    hsize_t n = 0;
    if (sp >= 0 && H5Sget_simple_extent_ndims(sp) == 1)
        H5Sget_simple_extent_dims(sp, &n, NULL);
    if (sp >= 0)
        H5Sclose(sp);
    if (n < 1 || n > (hsize_t)SQ_CORPUS_MAX_SEQUENCES + 1)
        return sq_error_set(err, SQ_EDATA, "%s: %s: missing or %llu entries; delete it to start "
                            "over", w->tmp, RESUME_OFFSETS, (unsigned long long)n);
    if (n > w->cap_offsets) {
        int64_t *o = realloc(w->offsets, (size_t)n * sizeof *o);
        if (!o)
            return sq_error_oom(err, "sequence offsets");
        w->offsets = o;
        w->cap_offsets = (size_t)n;
    }
    if (H5Dread(w->resume_offsets, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT,
                w->offsets) < 0)
        return sq_error_set(err, SQ_EIO, "%s: %s: read error: %s", w->tmp, RESUME_OFFSETS,
                            sqc_h5_detail(d));
    /* A process killed inside a checkpoint may have written the new boundaries but not yet the
     * new row count: the boundaries of the older checkpoint are the ones up to its row count
     * (boundaries are only ever appended). */
    w->n_offsets = (size_t)n;
    for (size_t i = 1; i < (size_t)n; i++) {
        if (w->offsets[i] <= w->offsets[i - 1])
            return sq_error_set(err, SQ_EDATA, "%s: %s[%zu]: %lld is out of order; delete it to "
                                "start over", w->tmp, RESUME_OFFSETS, i, (long long)w->offsets[i]);
        if (w->offsets[i] > rows && w->n_offsets == (size_t)n)
            w->n_offsets = i;
    }
    if (w->offsets[0] != 0)
        return sq_error_set(err, SQ_EDATA, "%s: %s[0]: must be 0", w->tmp, RESUME_OFFSETS);
    /* every check passed: from here on the file is written, and stays as extended */
    *restore = -1;
    for (int k = 0; k < 2; k++) {
        if (w->p.topk > 0 && (rc = resume_cut(w, w->ids[k], w->width, rows, err)))
            return rc;
        if ((rc = resume_cut(w, w->logits[k], w->width, rows, err)))
            return rc;
    }
    if (w->has_tokens == 1 && (rc = resume_cut(w, w->tokens, 0, rows, err)))
        return rc;
    w->flushed = rows;
    *rows_done = rows;
    return SQ_OK;
}

int sq_corpus_writer_open_resumable(const char *path, const char *partial,
                                    const sq_corpus_writer_params *params, const char *fingerprint,
                                    int64_t *rows_done, sq_corpus_writer **out, sq_error *err)
{
    *rows_done = 0;
    if (strlen(fingerprint) > SQ_CORPUS_MAX_FINGERPRINT)
        return sq_error_set(err, SQ_EUSAGE, "%s: resume fingerprint longer than %d bytes", partial,
                            SQ_CORPUS_MAX_FINGERPRINT);
    sq_corpus_writer *w;
    int rc = sqc_writer_new(path, params, &w, err);
    if (rc)
        return rc;
    w->resumable = 1;
    w->tmp = strdup(partial);
    if (!w->tmp) {
        sqc_writer_free(w);
        return sq_error_oom(err, "partial path");
    }
    struct stat st;
    if (stat(partial, &st) == 0) {
        if (!S_ISREG(st.st_mode)) {
            sqc_writer_free(w);
            return sq_error_set(err, SQ_ECANTCREAT, "%s: exists and is not a regular file", partial);
        }
        off_t restore = -1;
        if ((rc = resume_reopen(w, fingerprint, rows_done, &restore, err))) {
            sqc_writer_free(w);  /* the partial file stays as it was */
            if (restore >= 0 && truncate(partial, restore) != 0) {
                /* left longer than it was (zeros past its old end): reported as refused */
            }
            return rc;
        }
        *out = w;
        return SQ_OK;
    }
    if ((rc = sqc_writer_create_file(w, params, err)))
        return rc;
    /* The resume state: an empty checkpoint. */
    hsize_t one = 1, unl = H5S_UNLIMITED, ch = 1024;
    hid_t sp = H5Screate_simple(1, &one, &unl);
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    hid_t lcpl = H5Pcreate(H5P_LINK_CREATE);
    int ok = sp >= 0 && dcpl >= 0 && lcpl >= 0 && H5Pset_chunk(dcpl, 1, &ch) >= 0 &&
             H5Pset_obj_track_times(dcpl, 0) >= 0 &&
             H5Pset_create_intermediate_group(lcpl, 1) >= 0;
    w->resume_offsets = ok ? H5Dcreate2(w->file, RESUME_OFFSETS, H5T_STD_I64LE, sp, lcpl, dcpl,
                                        H5P_DEFAULT)
                           : H5I_INVALID_HID;
    if (sp >= 0)
        H5Sclose(sp);
    if (dcpl >= 0)
        H5Pclose(dcpl);
    if (lcpl >= 0)
        H5Pclose(lcpl);
    ok = w->resume_offsets >= 0 && sqc_write_attr_string(w->file, RESUME_FINGERPRINT, fingerprint) == 0;
    if (ok && (rc = sq_corpus_writer_checkpoint(w, err)) != SQ_OK) {
        unlink(partial);
        sqc_writer_free(w);
        return rc;
    }
    if (!ok) {
        char d[256];
        sq_error_set(err, SQ_EIO, "%s: cannot write the resume state: %s", partial, sqc_h5_detail(d));
        sqc_writer_free(w);
        unlink(partial);
        return SQ_EIO;
    }
    *out = w;
    return SQ_OK;
}

