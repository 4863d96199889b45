/* Draft/target corpora in HDF5 (docs/formats.md): the checking, streaming reader, float16, and
 * the HDF5 helpers the writer shares. Only hyperslabs of row blocks are ever read, so memory
 * does not grow with N. */
#include "libsequoia/format/corpus.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <hdf5.h>
#include <libdeflate.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif
#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22 /* Linux 5.14 */
#endif

#include "libsequoia/base/busguard.h"
#include "libsequoia/base/half.h"
#include "libsequoia/base/io.h"
#include "libsequoia/format/corpus_private.h"

const char *const sqc_model_names[2] = {"target", "draft"};

void sqc_h5_quiet(void)
{
    /* The library prints its error stack on stderr by default; we report our own messages.
     * No exit handler either: after a failed write (a full disk) H5Fclose fails and leaves the
     * file half closed, and the library's own clean-up at exit then crashes on it. Every file
     * is closed explicitly, so there is nothing left for that handler to flush. */
    H5dont_atexit();
    H5open();
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
}

hid_t sqc_h5_fapl_new(void)
{
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    if (fapl >= 0)
        H5Pset_file_locking(fapl, 1, 1);
    return fapl;
}

static herr_t walk_innermost(unsigned n, const H5E_error2_t *e, void *data)
{
    if (n == 0 && e->desc && *e->desc) {
        /* HDF5's system-call messages ("file write failed: time = ..., file descriptor = 4,
         * errno = 27, ..., buf = 0x...") say in our words: the system's reason (issue 27 D2) */
        const char *en = strstr(e->desc, "errno = ");
        if (en && (strstr(e->desc, "time = ") || strstr(e->desc, "file descriptor"))) {
            int code = atoi(en + 8);
            snprintf((char *)data, 256, "%s",
                     code > 0 ? strerror(code) : "the system call failed");
        } else {
            snprintf((char *)data, 256, "%s", e->desc);
        }
    }
    return 0;
}

static herr_t walk_read_error(unsigned n, const H5E_error2_t *e, void *data)
{
    (void)n;
    if (e->min_num == H5E_READERROR || e->min_num == H5E_SEEKERROR)
        *(int *)data = 1;
    return 0;
}

/* 1 when the HDF5 error stack holds a failed system read (the disk, not the file's bytes). */
static int h5_is_read_error(void)
{
    int found = 0;
    H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, walk_read_error, &found);
    return found;
}

/* The most specific message on the HDF5 error stack (or ""); clears the stack. */
const char *sqc_h5_detail(char buf[256])
{
    buf[0] = '\0';
    H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, walk_innermost, buf);
    H5Eclear2(H5E_DEFAULT);
    return buf;
}

void sqc_h5_close_dataset(hid_t *id)
{
    if (*id >= 0)
        H5Dclose(*id);
    *id = H5I_INVALID_HID;
}

/* ---- float16 (converted by libsequoia/base/half.h) ---------------------------------------- */

/* IEEE 754 binary16 in the host's byte order: sign bit 15, exponent bits 10-14 (bias 15),
 * mantissa 0-9. HDF5 1.10 has no predefined half type; its soft conversion handles any such
 * layout, but slowly (about 15 M values/s), so the reader and the writer convert themselves and
 * let HDF5 move the raw 16-bit values. */
hid_t sqc_half_type_new(void)
{
    hid_t t = H5Tcopy(H5T_IEEE_F32LE);
    if (t < 0)
        return t;
    if (H5Tset_fields(t, 15, 10, 5, 0, 10) < 0 || H5Tset_precision(t, 16) < 0 ||
        H5Tset_size(t, 2) < 0 || H5Tset_ebias(t, 15) < 0 ||
        H5Tset_order(t, H5Tget_order(H5T_NATIVE_FLOAT)) < 0) {
        H5Tclose(t);
        return H5I_INVALID_HID;
    }
    return t;
}

/* Whether a file type is IEEE binary16 (in either byte order). */
static int is_ieee_half(hid_t t)
{
    size_t sp, ep, es, mp, ms;
    if (H5Tget_class(t) != H5T_FLOAT || H5Tget_size(t) != 2 || H5Tget_precision(t) != 16 ||
        H5Tget_offset(t) != 0 || H5Tget_fields(t, &sp, &ep, &es, &mp, &ms) < 0)
        return 0;
    return sp == 15 && ep == 10 && es == 5 && mp == 0 && ms == 10 && H5Tget_ebias(t) == 15 &&
           H5Tget_norm(t) == H5T_NORM_IMPLIED;
}



/* ---- attributes ------------------------------------------------------------------------- */

static int attr_open(sq_corpus *c, const char *name, hid_t *attr, sq_error *err)
{
    htri_t ex = H5Aexists(c->file, name);
    if (ex <= 0)
        return sq_error_set(err, SQ_EDATA, "%s: /: missing root attribute '%s'%s", c->path, name,
                            strcmp(name, "format") == 0 ? " (is this a sequoia corpus?)" : "");
    *attr = H5Aopen(c->file, name, H5P_DEFAULT);
    if (*attr < 0) {
        char d[256];
        return sq_error_set(err, SQ_EDATA, "%s: /: attribute '%s': cannot open: %s", c->path, name,
                            sqc_h5_detail(d));
    }
    hid_t sp = H5Aget_space(*attr);
    hssize_t npts = sp >= 0 ? H5Sget_simple_extent_npoints(sp) : -1;
    if (sp >= 0)
        H5Sclose(sp);
    if (npts != 1) {
        H5Aclose(*attr);
        return sq_error_set(err, SQ_EDATA, "%s: /: attribute '%s': expected a single value, found %lld",
                            c->path, name, (long long)npts);
    }
    return SQ_OK;
}

int sqc_attr_string(sq_corpus *c, const char *name, char *out, size_t cap, sq_error *err)
{
    hid_t a = H5I_INVALID_HID;   /* set by attr_open (initialised for the compiler) */
    int rc = attr_open(c, name, &a, err);
    if (rc)
        return rc;
    hid_t ft = H5Aget_type(a);
    hid_t mt = H5I_INVALID_HID;
    char d[256];
    if (ft < 0 || H5Tget_class(ft) != H5T_STRING) {
        rc = sq_error_set(err, SQ_EDATA, "%s: /: attribute '%s': expected a string", c->path, name);
    } else if (H5Tis_variable_str(ft) > 0) {
        mt = H5Tcopy(H5T_C_S1);
        H5Tset_size(mt, H5T_VARIABLE);
        H5Tset_cset(mt, H5Tget_cset(ft));
        char *s = NULL;
        if (H5Aread(a, mt, &s) < 0)
            rc = sq_error_set(err, SQ_EDATA, "%s: /: attribute '%s': cannot read: %s", c->path, name,
                              sqc_h5_detail(d));
        else
            snprintf(out, cap, "%s", s ? s : "");
        if (s)
            H5free_memory(s);
    } else {
        size_t sz = H5Tget_size(ft);
        char *buf = calloc(sz + 1, 1);
        if (!buf) {
            rc = sq_error_oom(err, name);
        } else {
            mt = H5Tcopy(ft);
            if (H5Aread(a, mt, buf) < 0)
                rc = sq_error_set(err, SQ_EDATA, "%s: /: attribute '%s': cannot read: %s", c->path,
                                  name, sqc_h5_detail(d));
            else
                snprintf(out, cap, "%s", buf); /* NUL- or space-padded: trim below */
            free(buf);
            size_t n = strlen(out);
            while (n > 0 && out[n - 1] == ' ')
                out[--n] = '\0';
        }
    }
    if (mt >= 0)
        H5Tclose(mt);
    if (ft >= 0)
        H5Tclose(ft);
    H5Aclose(a);
    return rc;
}

int sqc_attr_int(sq_corpus *c, const char *name, long long *out, sq_error *err)
{
    hid_t a = H5I_INVALID_HID;
    int rc = attr_open(c, name, &a, err);
    if (rc)
        return rc;
    hid_t ft = H5Aget_type(a);
    char d[256];
    if (ft < 0 || H5Tget_class(ft) != H5T_INTEGER) {
        rc = sq_error_set(err, SQ_EDATA, "%s: /: attribute '%s': expected an integer", c->path, name);
    } else {
        long long v = 0;
        if (H5Aread(a, H5T_NATIVE_LLONG, &v) < 0)
            rc = sq_error_set(err, SQ_EDATA, "%s: /: attribute '%s': cannot read: %s", c->path, name,
                              sqc_h5_detail(d));
        *out = v;
    }
    if (ft >= 0)
        H5Tclose(ft);
    H5Aclose(a);
    return rc;
}

/* ---- datasets --------------------------------------------------------------------------- */

/* 1 when the link "/a/b" exists, walking one component at a time (HDF5 1.10 fails rather than
 * answering "no" when an intermediate group is missing). */
static int link_exists(hid_t file, const char *dpath)
{
    char buf[64];
    snprintf(buf, sizeof buf, "%s", dpath);
    for (char *p = buf + 1;; p++) {
        if (*p == '/' || *p == '\0') {
            char save = *p;
            *p = '\0';
            if (H5Lexists(file, buf, H5P_DEFAULT) <= 0) {
                H5Eclear2(H5E_DEFAULT);
                return 0;
            }
            *p = save;
            if (save == '\0')
                return 1;
        }
    }
}

/* Opens a dataset, checks its rank, element class, and gives its dims. With a chunked layout it
 * reopens it with a chunk cache sized for row-block reads. */
static int dataset_open(sq_corpus *c, const char *dpath, int rank, H5T_class_t cls, hid_t *out,
                        hsize_t dims[2], size_t *elem, sq_error *err)
{
    char d[256];
    *out = H5I_INVALID_HID;
    hid_t ds = H5Dopen2(c->file, dpath, H5P_DEFAULT);
    if (ds < 0)
        return sq_error_set(err, SQ_EDATA, "%s: %s: cannot open as a dataset: %s", c->path, dpath,
                            sqc_h5_detail(d));
    int rc = SQ_OK;
    hid_t sp = H5Dget_space(ds);
    int r = sp >= 0 ? H5Sget_simple_extent_ndims(sp) : -1;
    hsize_t dd[H5S_MAX_RANK];
    if (r != rank) {
        rc = sq_error_set(err, SQ_EDATA, "%s: %s: expected %d dimension%s, found %d", c->path, dpath,
                          rank, rank > 1 ? "s" : "", r);
    } else {
        H5Sget_simple_extent_dims(sp, dd, NULL);
        for (int i = 0; i < rank; i++)
            dims[i] = dd[i];
    }
    if (sp >= 0)
        H5Sclose(sp);
    hid_t ft = H5Dget_type(ds);
    if (rc == SQ_OK && (ft < 0 || H5Tget_class(ft) != cls))
        rc = sq_error_set(err, SQ_EDATA, "%s: %s: expected %s values", c->path, dpath,
                          cls == H5T_FLOAT ? "floating-point" : "integer");
    size_t esz = ft >= 0 ? H5Tget_size(ft) : 0;
    if (rc == SQ_OK && cls == H5T_FLOAT && esz != 2 && esz != 4 && esz != 8)
        rc = sq_error_set(err, SQ_EDATA, "%s: %s: unsupported %zu-byte float type (expected float16 "
                          "or float32)", c->path, dpath, esz);
    if (ft >= 0)
        H5Tclose(ft);
    if (elem)
        *elem = esz;
    if (rc) {
        H5Dclose(ds);
        return rc;
    }

    hid_t dcpl = H5Dget_create_plist(ds);
    if (dcpl >= 0 && H5Pget_layout(dcpl) == H5D_CHUNKED) {
        hsize_t cd[H5S_MAX_RANK];
        if (H5Pget_chunk(dcpl, rank, cd) == rank) {
            size_t cols = 1;
            if (rank == 2)
                cols = (size_t)((dims[1] + cd[1] - 1) / cd[1] * cd[1]);
            size_t stripe = (size_t)cd[0] * (cols ? cols : 1) * esz;
            size_t cache = 2 * stripe;
            if (cache < CACHE_MIN_BYTES)
                cache = CACHE_MIN_BYTES;
            if (cache > CACHE_MAX_BYTES)
                cache = CACHE_MAX_BYTES;
            /* Unfiltered chunks need no cache: without one HDF5 reads the selected part of a
             * chunk straight from the file into the caller's buffer, instead of into the cache
             * and then copying it (issue 17: the copy was a fifth of a read). */
            if (H5Pget_nfilters(dcpl) == 0)
                cache = 0;
            hid_t dapl = H5Pcreate(H5P_DATASET_ACCESS);
            if (dapl >= 0 && H5Pset_chunk_cache(dapl, CACHE_SLOTS, cache, 1.0) >= 0) {
                hid_t ds2 = H5Dopen2(c->file, dpath, dapl);
                if (ds2 >= 0) {
                    H5Dclose(ds);
                    ds = ds2;
                }
            }
            if (dapl >= 0)
                H5Pclose(dapl);
            if (c->block_rows == 0 && rank == 2)
                c->block_rows = (int)(cd[0] < INT_MAX ? cd[0] : INT_MAX);
        }
    }
    if (dcpl >= 0)
        H5Pclose(dcpl);
    H5Eclear2(H5E_DEFAULT);
    *out = ds;
    return SQ_OK;
}

/* Whether chunks of a dense dataset can be read raw and decoded here (see corpus_model). */
/* 1 when dataset ds is stored in file `file` itself; 0 when it was reached through an external
 * link (its chunks' offsets are then another file's). */
static int stored_in(hid_t ds, hid_t file)
{
    char here[1024], there[1024];
    hid_t owner = H5Iget_file_id(ds);
    ssize_t lh = H5Fget_name(file, here, sizeof here);
    ssize_t lt = owner >= 0 ? H5Fget_name(owner, there, sizeof there) : -1;
    if (owner >= 0)
        H5Fclose(owner);
    H5Eclear2(H5E_DEFAULT);
    return lh >= 0 && lt >= 0 && lh < (ssize_t)sizeof here && lt < (ssize_t)sizeof there &&
           strcmp(here, there) == 0;
}

/* Whether the raw reader may read m->logits (raw_ok), and how. It reads the chunks' bytes at
 * their offsets in the corpus file itself, so a dataset behind an external link (stored in
 * another file) is read through HDF5, as every other layout it does not take. */
static void raw_setup(corpus_model *m, hid_t file, hid_t ft, hsize_t cols)
{
    m->raw_ok = 0;
    m->shuffle_at = m->deflate_at = -1;
    if (!stored_in(m->logits, file))
        return;
    const uint16_t probe = 1;
    unsigned char first;
    memcpy(&first, &probe, 1);
    if (ft < 0 || first != 1 || H5Tget_order(ft) != H5T_ORDER_LE)
        return;
    size_t esz = H5Tget_size(ft);
    if (!(esz == 4 || (esz == 2 && m->half)))
        return;
    if (esz == 4 && H5Tequal(ft, H5T_IEEE_F32LE) <= 0)
        return;
    hid_t dcpl = H5Dget_create_plist(m->logits);
    if (dcpl < 0)
        return;
    if (H5Pget_layout(dcpl) == H5D_CONTIGUOUS && H5Pget_nfilters(dcpl) == 0) {
        /* raw reads only through the mapping; chunks of about 1 MiB are cut in map_setup */
        haddr_t off = H5Dget_offset(m->logits);
        H5Pclose(dcpl);
        H5Eclear2(H5E_DEFAULT);
        if (off != HADDR_UNDEF) {
            m->raw_ok = 1;
            m->contiguous = 1;
            m->contig_off = (uint64_t)off;
            m->esz = (int)esz;
        }
        return;
    }
    hsize_t cd[2];
    int ok = H5Pget_layout(dcpl) == H5D_CHUNKED && H5Pget_chunk(dcpl, 2, cd) == 2 &&
             cd[1] == cols && cd[0] >= 1 && cd[0] <= INT_MAX;
    int nf = ok ? H5Pget_nfilters(dcpl) : -1;
    ok = ok && nf >= 0 && nf <= 2;
    for (int i = 0; ok && i < nf; i++) {
        unsigned flags, cdv[8];
        size_t ncd = 8;
        char name[64];
        H5Z_filter_t id = H5Pget_filter2(dcpl, (unsigned)i, &flags, &ncd, cdv, sizeof name, name,
                                         NULL);
        if (id == H5Z_FILTER_SHUFFLE && m->shuffle_at < 0 && m->deflate_at < 0)
            m->shuffle_at = i;
        else if (id == H5Z_FILTER_DEFLATE && m->deflate_at < 0)
            m->deflate_at = i;
        else
            ok = 0;
    }
    H5Pclose(dcpl);
    H5Eclear2(H5E_DEFAULT);
    if (ok) {
        m->raw_ok = 1;
        m->chunk_rows = (int)cd[0];
        m->esz = (int)esz;
    }
}

static int model_open(sq_corpus *c, int k, sq_error *err)
{
    corpus_model *m = &c->m[k];
    const char *name = sqc_model_names[k];
    char dense[32], ids[32], lg[32];
    snprintf(dense, sizeof dense, "/%s/logits", name);
    snprintf(ids, sizeof ids, "/%s/topk_ids", name);
    snprintf(lg, sizeof lg, "/%s/topk_logits", name);
    hsize_t dims[2] = {0, 0};
    if (link_exists(c->file, dense)) {
        m->sparse = 0;
        snprintf(m->logits_name, sizeof m->logits_name, "%s", dense);
        int rc = dataset_open(c, dense, 2, H5T_FLOAT, &m->logits, dims, NULL, err);
        if (rc)
            return rc;
        hid_t ft = H5Dget_type(m->logits);
        m->half = ft >= 0 && is_ieee_half(ft);
        raw_setup(m, c->file, ft, dims[1]);
        if (ft >= 0)
            H5Tclose(ft);
        m->width = (int)(dims[1] > INT_MAX ? INT_MAX : dims[1]);
        if (dims[1] > INT_MAX)
            return sq_error_set(err, SQ_EDATA, "%s: %s: %llu columns is too many", c->path, dense,
                                (unsigned long long)dims[1]);
        c->info.rows = (k == 0) ? (int64_t)dims[0] : c->info.rows;
        if (k == 1 && (int64_t)dims[0] != c->info.rows)
            return sq_error_set(err, SQ_EDATA, "%s: %s has %llu rows but %s has %lld", c->path, dense,
                                (unsigned long long)dims[0], c->m[0].logits_name,
                                (long long)c->info.rows);
        return SQ_OK;
    }
    int has_ids = link_exists(c->file, ids), has_lg = link_exists(c->file, lg);
    if (!has_ids && !has_lg)
        return sq_error_set(err, SQ_EDATA, "%s: %s: missing dataset (and no sparse %s + %s either)",
                            c->path, dense, ids, lg);
    if (!has_ids || !has_lg)
        return sq_error_set(err, SQ_EDATA, "%s: %s: missing dataset (sparse logits need both %s and %s)",
                            c->path, has_ids ? lg : ids, ids, lg);
    m->sparse = 1;
    snprintf(m->logits_name, sizeof m->logits_name, "%s", lg);
    snprintf(m->ids_name, sizeof m->ids_name, "%s", ids);
    hsize_t di[2] = {0, 0};
    int rc = dataset_open(c, ids, 2, H5T_INTEGER, &m->ids, di, NULL, err);
    if (rc)
        return rc;
    rc = dataset_open(c, lg, 2, H5T_FLOAT, &m->logits, dims, NULL, err);
    if (rc)
        return rc;
    if (di[0] != dims[0] || di[1] != dims[1])
        return sq_error_set(err, SQ_EDATA, "%s: %s is [%llu, %llu] but %s is [%llu, %llu]", c->path,
                            ids, (unsigned long long)di[0], (unsigned long long)di[1], lg,
                            (unsigned long long)dims[0], (unsigned long long)dims[1]);
    if (dims[1] < 1 || dims[1] > INT_MAX)
        return sq_error_set(err, SQ_EDATA, "%s: %s: K = %llu columns; need at least 1", c->path, ids,
                            (unsigned long long)dims[1]);
    m->width = (int)dims[1];
    if (k == 0)
        c->info.rows = (int64_t)dims[0];
    else if ((int64_t)dims[0] != c->info.rows)
        return sq_error_set(err, SQ_EDATA, "%s: %s has %llu rows but %s has %lld", c->path, lg,
                            (unsigned long long)dims[0], c->m[0].logits_name, (long long)c->info.rows);
    return SQ_OK;
}

static int offsets_read(sq_corpus *c, sq_error *err)
{
    const char *name = "/seq_offsets";
    int64_t n = c->info.rows;
    if (!link_exists(c->file, name)) {
        c->info.sequences = 1;
        c->offsets = malloc(2 * sizeof *c->offsets);
        if (!c->offsets)
            return sq_error_oom(err, name);
        c->offsets[0] = 0;
        c->offsets[1] = n;
        return SQ_OK;
    }
    hid_t ds;
    hsize_t dims[2] = {0, 0};
    int rc = dataset_open(c, name, 1, H5T_INTEGER, &ds, dims, NULL, err);
    if (rc)
        return rc;
    if (dims[0] < 2) {
        H5Dclose(ds);
        return sq_error_set(err, SQ_EDATA, "%s: %s: has %llu entries; need at least 2 (0 and N = %lld)",
                            c->path, name, (unsigned long long)dims[0], (long long)n);
    }
    if (dims[0] - 1 > (hsize_t)SQ_CORPUS_MAX_SEQUENCES) {
        H5Dclose(ds);
        return sq_error_set(err, SQ_EDATA, "%s: %s: %llu sequences exceed the limit of %lld", c->path,
                            name, (unsigned long long)(dims[0] - 1), SQ_CORPUS_MAX_SEQUENCES);
    }
    if (dims[0] - 1 > (hsize_t)n) {
        H5Dclose(ds);
        return sq_error_set(err, SQ_EDATA, "%s: %s: %llu sequences but only %lld rows", c->path, name,
                            (unsigned long long)(dims[0] - 1), (long long)n);
    }
    c->offsets = malloc((size_t)dims[0] * sizeof *c->offsets);
    if (!c->offsets) {
        H5Dclose(ds);
        return sq_error_oom(err, name);
    }
    char d[256];
    if (H5Dread(ds, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, c->offsets) < 0) {
        H5Dclose(ds);
        return sq_error_set(err, SQ_EIO, "%s: %s: read error: %s", c->path, name, sqc_h5_detail(d));
    }
    H5Dclose(ds);
    int64_t s = (int64_t)dims[0] - 1;
    if (c->offsets[0] != 0)
        return sq_error_set(err, SQ_EDATA, "%s: %s[0]: is %lld, must be 0", c->path, name,
                            (long long)c->offsets[0]);
    for (int64_t i = 1; i <= s; i++)
        if (c->offsets[i] <= c->offsets[i - 1])
            return sq_error_set(err, SQ_EDATA,
                                "%s: %s[%lld]: %lld is not greater than the previous offset %lld "
                                "(offsets must increase strictly; sequences cannot be empty)",
                                c->path, name, (long long)i, (long long)c->offsets[i],
                                (long long)c->offsets[i - 1]);
    if (c->offsets[s] != n)
        return sq_error_set(err, SQ_EDATA, "%s: %s[%lld]: the last offset is %lld, must be N = %lld",
                            c->path, name, (long long)s, (long long)c->offsets[s], (long long)n);
    c->info.sequences = s;
    return SQ_OK;
}

/* The file's descriptor and size (issue 17). HDF5's own descriptor, duplicated: the same
 * file, not whatever the path names now; only for the default (sec2) driver. Mapped raw reads
 * also need no user block, so that HDF5's addresses are byte offsets in the file, and a kernel
 * that populates a mapping with an error instead of a SIGBUS (MADV_POPULATE_READ, Linux 5.14).
 * Contiguous datasets get chunks of the chunked model's rows, or of about 1 MiB. Nothing here
 * is an error: without a mapping, raw chunks are fetched with H5Dread_chunk (contiguous
 * datasets: rows with sq_corpus_read). */
static void map_setup(sq_corpus *c)
{
    c->fd = -1;
    c->map_ok = c->mapped = 0;
    long pg = sysconf(_SC_PAGESIZE);
    c->page = pg > 0 ? (size_t)pg : 4096;
    for (int k = 0; k < 2; k++) {
        corpus_model *m = &c->m[k], *o = &c->m[1 - k];
        if (m->raw_ok && m->contiguous) {
            if (o->raw_ok && !o->contiguous) {
                m->chunk_rows = o->chunk_rows;
            } else {
                size_t r = ((size_t)1 << 20) / ((size_t)c->info.vocab * sizeof(float));
                m->chunk_rows = r < 1 ? 1 : (r > 4096 ? 4096 : (int)r);
            }
        }
    }
    hid_t fapl = H5Fget_access_plist(c->file), fcpl = H5Fget_create_plist(c->file);
    hsize_t ub = 1;
    void *handle = NULL;
    int ok = fapl >= 0 && H5Pget_driver(fapl) == H5FD_SEC2 &&
             H5Fget_vfd_handle(c->file, fapl, &handle) >= 0 && handle;
    c->fd = ok ? fcntl(*(int *)handle, F_DUPFD_CLOEXEC, 0) : -1;
    int no_userblock = fcpl >= 0 && H5Pget_userblock(fcpl, &ub) >= 0 && ub == 0;
    if (fapl >= 0)
        H5Pclose(fapl);
    if (fcpl >= 0)
        H5Pclose(fcpl);
    H5Eclear2(H5E_DEFAULT);
    struct stat st;
    if (c->fd < 0 || fstat(c->fd, &st) != 0) {
        if (c->fd >= 0)
            close(c->fd);
        c->fd = -1;
        return;
    }
    c->size_open = st.st_size > 0 ? (uint64_t)st.st_size : 0;
    if (!no_userblock || !c->m[0].raw_ok || !c->m[1].raw_ok)
        return;
    /* does this kernel populate with an error? (EINVAL: it does not know the advice) */
    void *probe = mmap(NULL, c->page, PROT_READ, MAP_SHARED, c->fd, 0);
    ok = probe != MAP_FAILED && madvise(probe, c->page, MADV_POPULATE_READ) == 0;
    if (probe != MAP_FAILED)
        munmap(probe, c->page);
    /* a truncation racing with the workers faults in the mapping: an error, not a death */
    if (ok && sq_bus_install() == 0)
        c->bus = 1;
    c->map_ok = c->mapped = ok && c->bus;
}

/* A file cut short since it was opened: HDF5 reads the missing bytes as zeros (its default
 * driver does), which would pass for logits. Checked after every read: a read that ends while
 * the file still has its size read what the file held. */
static int check_size(sq_corpus *c, const char *name, sq_error *err)
{
    struct stat st;
    if (c->fd < 0)
        return SQ_OK;
    if (fstat(c->fd, &st) != 0)
        return sq_error_set(err, SQ_EIO, "%s: %s: cannot check the file's size: %s", c->path, name,
                            strerror(errno));
    uint64_t now = st.st_size > 0 ? (uint64_t)st.st_size : 0;
    if (now < c->size_open)
        return sq_error_set(err, SQ_EDATA, "%s: %s: the file shrank from %llu to %llu bytes since "
                            "it was opened (truncated while being read)", c->path, name,
                            (unsigned long long)c->size_open, (unsigned long long)now);
    return SQ_OK;
}

static int corpus_check(sq_corpus *c, sq_error *err)
{
    char fmt[64];
    int rc = sqc_attr_string(c, "format", fmt, sizeof fmt, err);
    if (rc)
        return rc;
    if (strcmp(fmt, SQ_CORPUS_FORMAT) != 0)
        return sq_error_set(err, SQ_EDATA, "%s: /: attribute 'format': \"%s\", expected \"%s\"", c->path,
                            fmt, SQ_CORPUS_FORMAT);
    long long version;
    if ((rc = sqc_attr_int(c, "version", &version, err)))
        return rc;
    if (version > SQ_CORPUS_VERSION)
        return sq_error_set(err, SQ_EDATA,
                            "%s: /: attribute 'version': corpus format version %lld is newer than "
                            "this reader (it reads version %d); upgrade sequoia",
                            c->path, version, SQ_CORPUS_VERSION);
    if (version < 1)
        return sq_error_set(err, SQ_EDATA, "%s: /: attribute 'version': %lld is not a valid version",
                            c->path, version);
    long long vocab;
    if ((rc = sqc_attr_int(c, "vocab_size", &vocab, err)))
        return rc;
    if (vocab < 1)
        return sq_error_set(err, SQ_EDATA, "%s: /: attribute 'vocab_size': %lld is out of range", c->path,
                            vocab);
    if (vocab > SQ_CORPUS_MAX_VOCAB)
        return sq_error_set(err, SQ_EDATA, "%s: /: attribute 'vocab_size': %lld exceeds the limit of "
                            "%d tokens", c->path, vocab, SQ_CORPUS_MAX_VOCAB);
    c->info.vocab = (int)vocab;
    if ((rc = sqc_attr_string(c, "draft", c->info.draft, sizeof c->info.draft, err)) ||
        (rc = sqc_attr_string(c, "target", c->info.target, sizeof c->info.target, err)))
        return rc;

    for (int k = 0; k < 2; k++)
        if ((rc = model_open(c, k, err)))
            return rc;
    /* Dense widths: draft against target first, then both against the attribute. */
    if (!c->m[0].sparse && !c->m[1].sparse && c->m[0].width != c->m[1].width)
        return sq_error_set(err, SQ_EDATA, "%s: %s has V = %d columns but %s has %d", c->path,
                            c->m[1].logits_name, c->m[1].width, c->m[0].logits_name, c->m[0].width);
    for (int k = 0; k < 2; k++) {
        corpus_model *m = &c->m[k];
        if (!m->sparse && m->width != c->info.vocab)
            return sq_error_set(err, SQ_EDATA,
                                "%s: %s: V = %d columns, but the attribute vocab_size is %d", c->path,
                                m->logits_name, m->width, c->info.vocab);
        if (m->sparse && m->width > c->info.vocab)
            return sq_error_set(err, SQ_EDATA, "%s: %s: K = %d is larger than vocab_size = %d", c->path,
                                m->ids_name, m->width, c->info.vocab);
        if (m->sparse) {
            c->info.sparse = 1;
            if (m->width > c->info.topk)
                c->info.topk = m->width;
        }
    }
    if (c->info.rows == 0)
        return sq_error_set(err, SQ_EDATA, "%s: %s: the corpus is empty (0 rows)", c->path,
                            c->m[0].logits_name);

    if (link_exists(c->file, "/tokens")) {
        hsize_t dims[2] = {0, 0};
        if ((rc = dataset_open(c, "/tokens", 1, H5T_INTEGER, &c->tokens, dims, NULL, err)))
            return rc;
        if ((int64_t)dims[0] != c->info.rows)
            return sq_error_set(err, SQ_EDATA, "%s: /tokens: has %llu entries but %s has %lld rows",
                                c->path, (unsigned long long)dims[0], c->m[0].logits_name,
                                (long long)c->info.rows);
        c->info.has_tokens = 1;
    }
    if ((rc = offsets_read(c, err)))
        return rc;

    /* A read block: a whole number of target chunks, both float32 blocks within the target. */
    size_t row_bytes = 2 * (size_t)c->info.vocab * sizeof(float);
    int64_t want = (int64_t)(BLOCK_TARGET_BYTES / row_bytes);
    int64_t unit = c->block_rows > 0 ? c->block_rows : 1;
    if (want >= unit)
        want = want / unit * unit; /* whole chunks when a chunk fits, else part of one */
    if (want > c->info.rows)
        want = c->info.rows;
    if (want < 1)
        want = 1;
    c->block_rows = (int)(want > INT_MAX ? INT_MAX : want);
    map_setup(c);
    return SQ_OK;
}

int sq_corpus_open(const char *path, sq_corpus **out, sq_error *err)
{
    *out = NULL;
    sqc_h5_quiet();
    int rc0 = sq_input_check(path, "a corpus file", err);
    if (rc0)
        return rc0;
    htri_t is = H5Fis_hdf5(path);
    if (is <= 0) {
        H5Eclear2(H5E_DEFAULT);
        return sq_error_set(err, SQ_EDATA, "%s: not an HDF5 file (no HDF5 signature found)", path);
    }
    sq_corpus *c = calloc(1, sizeof *c);
    if (!c)
        return sq_error_oom(err, "corpus");
    c->file = c->tokens = H5I_INVALID_HID;
    c->fd = -1;
    for (int k = 0; k < 2; k++)
        c->m[k].logits = c->m[k].ids = H5I_INVALID_HID;
    c->path = strdup(path);
    if (!c->path) {
        free(c);
        return sq_error_oom(err, "corpus");
    }
    /* File locking where the file system has it; where it has not (some network file
     * systems), read anyway rather than fail. */
    hid_t fapl = sqc_h5_fapl_new();
    c->file = H5Fopen(path, H5F_ACC_RDONLY, fapl >= 0 ? fapl : H5P_DEFAULT);
    if (fapl >= 0)
        H5Pclose(fapl);
    if (c->file < 0) {
        char d[256];
        sqc_h5_detail(d);
        sq_error_set(err, SQ_EDATA, "%s: cannot open as HDF5 (truncated or corrupt file?)%s%s", path,
                     *d ? ": " : "", d);
        sq_corpus_close(c);
        return SQ_EDATA;
    }
    int rc = corpus_check(c, err);
    if (rc) {
        sq_corpus_close(c);
        return rc;
    }
    *out = c;
    return SQ_OK;
}

void sq_corpus_close(sq_corpus *c)
{
    if (!c)
        return;
    for (int k = 0; k < 2; k++) {
        sqc_h5_close_dataset(&c->m[k].logits);
        sqc_h5_close_dataset(&c->m[k].ids);
    }
    sqc_h5_close_dataset(&c->tokens);
    if (c->fd >= 0)
        close(c->fd);
    if (c->bus)
        sq_bus_uninstall();
    if (c->file >= 0)
        H5Fclose(c->file);
    free(c->offsets);
    free(c->sp_logits);
    free(c->sp_ids);
    free(c->tok_scratch);
    sq_corpus_raw_clear(&c->rd_raw);
    free(c->rd_work);
    free(c->rd_rows);
    free(c->path);
    free(c);
}

const sq_corpus_info *sq_corpus_get_info(const sq_corpus *c)
{
    return &c->info;
}

const int64_t *sq_corpus_seq_offsets(const sq_corpus *c)
{
    return c->offsets;
}

int sq_corpus_block_rows(const sq_corpus *c)
{
    return c->block_rows;
}

/* Reads rows [row0, row0+count) of a 2-D dataset of `width` columns into buf as mem_type. */
static int read_rows(sq_corpus *c, hid_t ds, const char *name, hid_t mem_type, int64_t row0,
                     int count, int width, void *buf, sq_error *err)
{
    hsize_t start[2] = {(hsize_t)row0, 0}, cnt[2] = {(hsize_t)count, (hsize_t)width};
    int rank = width > 0 ? 2 : 1;
    hid_t fs = H5Dget_space(ds);
    hid_t ms = H5Screate_simple(rank, cnt, NULL);
    int ok = fs >= 0 && ms >= 0 &&
             H5Sselect_hyperslab(fs, H5S_SELECT_SET, start, NULL, cnt, NULL) >= 0 &&
             H5Dread(ds, mem_type, ms, fs, H5P_DEFAULT, buf) >= 0;
    if (ms >= 0)
        H5Sclose(ms);
    if (fs >= 0)
        H5Sclose(fs);
    if (!ok) {
        /* A chunk that does not decompress (or a bad checksum) is damage in the file: data,
         * 65. Only a failed read() of the disk is an I/O error, 74. */
        int io = h5_is_read_error();
        char d[256];
        sqc_h5_detail(d);
        return sq_error_set(err, io ? SQ_EIO : SQ_EDATA, "%s: %s: cannot read rows %lld..%lld%s%s%s",
                            c->path, name, (long long)row0, (long long)(row0 + count - 1),
                            io ? "" : " (the file is damaged)", *d ? ": " : "", d);
    }
    return check_size(c, name, err);
}

/* The first non-finite value of a (count, width) block, as an error naming the row. */
/* Any NaN or infinity among n floats: an exponent of all ones, OR-ed over the block without an
 * early exit, four floats at a time with SSE2 (issue 17: the scalar early-exit loop was 40% of
 * a read). */
static int any_nonfinite(const float *v, size_t n)
{
    uint32_t bad = 0;
    size_t i = 0;
#ifdef __SSE2__
    const __m128i expo = _mm_set1_epi32(0x7f800000);
    __m128i acc = _mm_setzero_si128();
    for (; i + 8 <= n; i += 8) {
        __m128i a = _mm_and_si128(_mm_loadu_si128((const __m128i *)(const void *)(v + i)), expo);
        __m128i b = _mm_and_si128(_mm_loadu_si128((const __m128i *)(const void *)(v + i + 4)), expo);
        acc = _mm_or_si128(acc, _mm_or_si128(_mm_cmpeq_epi32(a, expo), _mm_cmpeq_epi32(b, expo)));
    }
    bad = (uint32_t)_mm_movemask_epi8(acc);
#endif
    for (; i < n; i++) {
        uint32_t b;
        memcpy(&b, v + i, sizeof b);
        bad |= (b & 0x7f800000u) == 0x7f800000u;
    }
    return bad != 0;
}

static int check_finite(sq_corpus *c, const char *name, const float *v, int64_t row0, int count,
                        int width, sq_error *err)
{
    if (!any_nonfinite(v, (size_t)count * (size_t)width))
        return SQ_OK;
    for (int r = 0; r < count; r++) {
        const float *row = v + (size_t)r * (size_t)width;
        for (int j = 0; j < width; j++) {
            if (!isfinite(row[j]))
                return sq_error_set(err, SQ_EDATA, "%s: %s: row %lld: column %d is %s (first bad row)",
                                    c->path, name, (long long)(row0 + r), j,
                                    isnan(row[j]) ? "NaN" : (row[j] > 0 ? "+inf" : "-inf"));
        }
    }
    return SQ_OK;
}

static int decode_raw(const sq_corpus *c, const sq_corpus_raw *r, float *out,
                      unsigned char **work, size_t *work_cap, int check, sq_error *err);
static void raw_unmap(sq_corpus_raw *r);

/* Rows [row0, row0 + count) of model k through the chunk decoder (issue 27: the dynamic-tree
 * statistics read their samples with sq_corpus_read, and HDF5's own path, zlib and a scalar
 * float16 loop, was a third of a float16 + deflate corpus's estimation). Chunk by chunk: the
 * stored bytes are mapped (sq_corpus_read_raw), inflated with libdeflate, unshuffled and widened
 * (decode) straight into out when the chunk's whole rows lie inside the request, else into
 * scratch and the requested rows copied. The values are the same floats as read_rows' (the
 * `corpus` suite compares every path), and the finite check is the caller's, over the requested
 * rows only, as before. */
static int read_chunks(sq_corpus *c, int k, int64_t row0, int count, float *out, sq_error *err)
{
    const corpus_model *m = &c->m[k];
    const size_t V = (size_t)c->info.vocab;
    const int64_t cr = m->chunk_rows, end = row0 + count;
    for (int64_t ch = row0 / cr; ch * cr < end; ch++) {
        const int64_t c0 = ch * cr;
        const int64_t a = c0 > row0 ? c0 : row0;
        const int64_t b = c0 + cr < end ? c0 + cr : end;
        const int whole = a == c0 && c0 + cr <= end;
        float *dst = out + (size_t)(a - row0) * V;
        if (!whole) {
            size_t need = (size_t)cr * V;
            if (need > c->rd_rows_cap) {
                float *p = realloc(c->rd_rows, need * sizeof *p);
                if (!p)
                    return sq_error_oom(err, "chunk rows");
                c->rd_rows = p;
                c->rd_rows_cap = need;
            }
            dst = c->rd_rows;
        }
        int rc = sq_corpus_read_raw(c, k, ch, NULL, &c->rd_raw, err);
        if (!rc)
            rc = decode_raw(c, &c->rd_raw, dst, &c->rd_work, &c->rd_work_cap, 0, err);
        if (rc)
            return rc;
        if (!whole)
            memcpy(out + (size_t)(a - row0) * V, c->rd_rows + (size_t)(a - c0) * V,
                   (size_t)(b - a) * V * sizeof(float));
    }
    raw_unmap(&c->rd_raw);
    return SQ_OK;
}

/* Whether sq_corpus_read takes read_chunks for model k: mapped, both models' chunks decodable
 * (sq_corpus_raw_rows), this one chunked with a filter or stored as float16 (unfiltered float32
 * is a plain copy through HDF5 already), and a chunk's float32 rows at most 64 MiB (the
 * estimator's limit for raw batches). */
static int chunks_pay(const sq_corpus *c, const corpus_model *m)
{
    return c->mapped && !m->sparse && !m->contiguous && sq_corpus_raw_rows(c) > 0 &&
           (m->esz == 2 || m->shuffle_at >= 0 || m->deflate_at >= 0) &&
           (uint64_t)m->chunk_rows * (uint64_t)c->info.vocab * sizeof(float) <= ((uint64_t)64 << 20);
}

static int read_model(sq_corpus *c, int k, int64_t row0, int count, float *out, sq_error *err)
{
    corpus_model *m = &c->m[k];
    int V = c->info.vocab;
    int rc;
    if (chunks_pay(c, m)) {
        if ((rc = read_chunks(c, k, row0, count, out, err)))
            return rc;
        return check_finite(c, m->logits_name, out, row0, count, V, err);
    }
    if (!m->sparse && m->half) {
        /* The raw halves go to the upper half of out, then widen front to back: element i is
         * read (bytes 2n+2i) before out[i] (bytes 4i..4i+3) is written, and 4i+3 < 2n+2j for
         * every j > i, so nothing unread is overwritten. */
        size_t n = (size_t)count * (size_t)V;
        unsigned char *raw = (unsigned char *)out + 2 * n;
        hid_t mt = sqc_half_type_new();
        if (mt < 0)
            return sq_error_oom(err, "float16 type");
        rc = read_rows(c, m->logits, m->logits_name, mt, row0, count, V, raw, err);
        H5Tclose(mt);
        if (rc)
            return rc;
        for (size_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, raw + 2 * i, sizeof h);
            float f = sq_f16_to_f32(h);
            memcpy((unsigned char *)out + 4 * i, &f, sizeof f);
        }
        return check_finite(c, m->logits_name, out, row0, count, V, err);
    }
    if (!m->sparse) {
        if ((rc = read_rows(c, m->logits, m->logits_name, H5T_NATIVE_FLOAT, row0, count, V, out, err)))
            return rc;
        return check_finite(c, m->logits_name, out, row0, count, V, err);
    }
    size_t need = (size_t)count * (size_t)m->width;
    if (need > c->sp_cap) {
        float *l = realloc(c->sp_logits, need * sizeof *l);
        if (l)
            c->sp_logits = l;
        int32_t *i = realloc(c->sp_ids, need * sizeof *i);
        if (i)
            c->sp_ids = i;
        if (!l || !i)
            return sq_error_oom(err, "sparse read buffer");
        c->sp_cap = need;
    }
    if ((rc = read_rows(c, m->ids, m->ids_name, H5T_NATIVE_INT32, row0, count, m->width, c->sp_ids,
                        err)) ||
        (rc = read_rows(c, m->logits, m->logits_name, H5T_NATIVE_FLOAT, row0, count, m->width,
                        c->sp_logits, err)) ||
        (rc = check_finite(c, m->logits_name, c->sp_logits, row0, count, m->width, err)))
        return rc;
    for (int r = 0; r < count; r++) {
        float *row = out + (size_t)r * (size_t)V;
        for (int j = 0; j < V; j++)
            row[j] = -INFINITY;
        const int32_t *id = c->sp_ids + (size_t)r * (size_t)m->width;
        const float *lg = c->sp_logits + (size_t)r * (size_t)m->width;
        for (int j = 0; j < m->width; j++) {
            if (id[j] < 0 || id[j] >= V)
                return sq_error_set(err, SQ_EDATA,
                                    "%s: %s: row %lld: token id %d is outside the vocabulary [0, %d)",
                                    c->path, m->ids_name, (long long)(row0 + r), (int)id[j], V);
            if (row[id[j]] != -INFINITY)
                return sq_error_set(err, SQ_EDATA, "%s: %s: row %lld: token id %d appears twice",
                                    c->path, m->ids_name, (long long)(row0 + r), (int)id[j]);
            row[id[j]] = lg[j];
        }
    }
    return SQ_OK;
}

/* The error for /tokens row `row`, whose id read as int32 is `id`: HDF5 clamps a wider id to
 * INT32_MAX or INT32_MIN, so such a row is read again at 64 bits and given as written (issue
 * 27: 2^40 was reported as 2147483647). */
static int bad_token(sq_corpus *c, int64_t row, int32_t id, sq_error *err)
{
    char as_written[24];
    snprintf(as_written, sizeof as_written, "%d", (int)id);
    if (id == INT32_MAX || id == INT32_MIN) {
        hid_t ty = H5Dget_type(c->tokens);
        int is_unsigned = ty >= 0 && H5Tget_sign(ty) == H5T_SGN_NONE;
        if (ty >= 0)
            H5Tclose(ty);
        union { long long s; unsigned long long u; } v;
        sq_error ignored = {0};
        if (read_rows(c, c->tokens, "/tokens", is_unsigned ? H5T_NATIVE_ULLONG : H5T_NATIVE_LLONG,
                      row, 1, 0, &v, &ignored) == SQ_OK) {
            if (is_unsigned)
                snprintf(as_written, sizeof as_written, "%llu", v.u);
            else
                snprintf(as_written, sizeof as_written, "%lld", v.s);
        }
    }
    return sq_error_set(err, SQ_EDATA, "%s: /tokens: row %lld: token id %s is outside the "
                        "vocabulary [0, %d)", c->path, (long long)row, as_written, c->info.vocab);
}

int sq_corpus_read(sq_corpus *c, int64_t row0, int count, float *target, float *draft,
                   int32_t *tokens, sq_error *err)
{
    if (count < 0 || row0 < 0 || row0 > c->info.rows || count > c->info.rows - row0)
        return sq_error_set(err, SQ_EUSAGE, "%s: rows %lld..%lld are outside the corpus (%lld rows)",
                            c->path, (long long)row0, (long long)row0 + count - 1,
                            (long long)c->info.rows);
    if (count == 0)
        return SQ_OK;
    int rc;
    if (target && (rc = read_model(c, 0, row0, count, target, err)))
        return rc;
    if (draft && (rc = read_model(c, 1, row0, count, draft, err)))
        return rc;
    if (tokens && !c->info.has_tokens) {
        for (int i = 0; i < count; i++)
            tokens[i] = -1;
        return SQ_OK;
    }
    if (c->info.has_tokens) {
        /* /tokens is checked even when the caller does not want it: a corpus with ids outside
         * [0, V) is malformed whoever reads it (4 bytes a row, beside 2 V floats). */
        if (!tokens) {
            if ((size_t)count > c->tok_cap) {
                int32_t *t = realloc(c->tok_scratch, (size_t)count * sizeof *t);
                if (!t)
                    return sq_error_oom(err, "token buffer");
                c->tok_scratch = t;
                c->tok_cap = (size_t)count;
            }
            tokens = c->tok_scratch;
        }
        if ((rc = read_rows(c, c->tokens, "/tokens", H5T_NATIVE_INT32, row0, count, 0, tokens, err)))
            return rc;
        for (int i = 0; i < count; i++)
            if (tokens[i] < 0 || tokens[i] >= c->info.vocab)
                return bad_token(c, row0 + i, tokens[i], err);
    }
    return SQ_OK;
}

/* ---- raw chunks, decoded outside HDF5 (issue 17) ------------------------------------------ */

int sq_corpus_raw_rows(const sq_corpus *c)
{
    const corpus_model *t = &c->m[0], *d = &c->m[1];
    if (!t->raw_ok || !d->raw_ok || t->chunk_rows != d->chunk_rows)
        return 0;
    if ((t->contiguous || d->contiguous) && !c->mapped)
        return 0;
    return t->chunk_rows;
}

int sq_corpus_mapped(const sq_corpus *c)
{
    return c->mapped;
}

void sq_corpus_set_mapped(sq_corpus *c, int on)
{
    c->mapped = on && c->map_ok;
}

static void raw_unmap(sq_corpus_raw *r)
{
    if (r->map)
        munmap(r->map, r->map_len);
    r->map = NULL;
    r->map_len = 0;
}

void sq_corpus_raw_clear(sq_corpus_raw *r)
{
    raw_unmap(r);
    free(r->data);
    memset(r, 0, sizeof *r);
}

static int grow(unsigned char **buf, size_t *cap, size_t need)
{
    if (need <= *cap)
        return 0;
    unsigned char *b = realloc(*buf, need);
    if (!b)
        return -1;
    *buf = b;
    *cap = need;
    return 0;
}

/* The chunk's bytes [addr, addr + size) of the file, mapped and populated. The bounds are
 * checked against the file's size now (a file truncated or damaged after it was opened), and
 * populating reports a page that is gone as an error (a truncation racing with this call):
 * what the workers then read is resident. */
static int map_chunk(sq_corpus *c, const corpus_model *m, uint64_t row, uint64_t addr,
                     uint64_t size, sq_corpus_raw *r, sq_error *err)
{
    int rc = check_size(c, m->logits_name, err);
    if (rc)
        return rc;
    uint64_t fsize = c->size_open;
    if (size == 0 || addr > fsize || size > fsize - addr)
        return sq_error_set(err, SQ_EDATA, "%s: %s: the chunk of row %llu (%llu bytes at offset "
                            "%llu) lies past the end of the file (%llu bytes): truncated or "
                            "damaged file", c->path, m->logits_name, (unsigned long long)row,
                            (unsigned long long)size, (unsigned long long)addr,
                            (unsigned long long)fsize);
    uint64_t start = addr / c->page * c->page;
    uint64_t len = addr + size - start;
    if (len > SIZE_MAX || start > (uint64_t)INT64_MAX)
        return sq_error_set(err, SQ_EDATA, "%s: %s: the chunk of row %llu is too large to map",
                            c->path, m->logits_name, (unsigned long long)row);
    void *p = mmap(NULL, (size_t)len, PROT_READ, MAP_SHARED, c->fd, (off_t)start);
    if (p == MAP_FAILED)
        return sq_error_set(err, errno == ENOMEM ? SQ_ESOFTWARE : SQ_EIO,
                            "%s: %s: cannot map the chunk of row %llu: %s", c->path,
                            m->logits_name, (unsigned long long)row, strerror(errno));
    if (madvise(p, (size_t)len, MADV_POPULATE_READ) != 0) {
        int e = errno;
        munmap(p, (size_t)len);
        return sq_error_set(err, e == EFAULT ? SQ_EDATA : SQ_EIO,
                            "%s: %s: cannot read the chunk of row %llu: %s", c->path,
                            m->logits_name, (unsigned long long)row,
                            e == EFAULT ? "the file was truncated" : strerror(e));
    }
    r->map = p;
    r->map_len = (size_t)len;
    r->bytes = (const unsigned char *)p + (addr - start);
    r->size = (size_t)size;
    return SQ_OK;
}

int sq_corpus_read_raw(sq_corpus *c, int model, int64_t chunk, float *direct, sq_corpus_raw *r,
                       sq_error *err)
{
    corpus_model *m = &c->m[model];
    SQ_ASSERT(sq_corpus_raw_rows(c) > 0 && model >= 0 && model <= 1);
    raw_unmap(r);
    r->rows = NULL;
    r->bytes = NULL;
    r->in_place = 0;
    r->model = model;
    r->chunk = chunk;
    const uint64_t row0 = (uint64_t)chunk * (uint64_t)m->chunk_rows;
    const size_t V = (size_t)c->info.vocab;
    const size_t whole = (size_t)m->chunk_rows * V * sizeof(float);
    char d[256];
    if (c->mapped) {
        uint64_t addr, size;
        uint32_t mask = 0;
        if (m->contiguous) {
            uint64_t count = (uint64_t)c->info.rows - row0 < (uint64_t)m->chunk_rows
                                 ? (uint64_t)c->info.rows - row0 : (uint64_t)m->chunk_rows;
            addr = m->contig_off + row0 * V * (uint64_t)m->esz;
            size = count * V * (uint64_t)m->esz;
        } else {
            hsize_t off[2] = {(hsize_t)row0, 0};
            haddr_t a = HADDR_UNDEF;
            hsize_t sz = 0;
            unsigned fm = 0;
            if (H5Dget_chunk_info_by_coord(m->logits, off, &fm, &a, &sz) < 0 || a == HADDR_UNDEF ||
                sz == 0)
                return sq_error_set(err, SQ_EDATA, "%s: %s: cannot find the chunk of row %llu%s%s",
                                    c->path, m->logits_name, (unsigned long long)row0,
                                    *sqc_h5_detail(d) ? ": " : "", d);
            addr = (uint64_t)a;
            size = (uint64_t)sz;
            mask = fm;
        }
        int rc = map_chunk(c, m, row0, addr, size, r, err);
        if (rc)
            return rc;
        r->mask = mask;
        /* unfiltered float32 at a float's alignment: the rows are there already */
        if (m->esz == 4 && (m->shuffle_at < 0 || (mask >> m->shuffle_at & 1)) &&
            (m->deflate_at < 0 || (mask >> m->deflate_at & 1)) &&
            (size_t)r->bytes % _Alignof(float) == 0 &&
            (m->contiguous || r->size == whole)) {
            r->rows = (const float *)(const void *)r->bytes;
            r->in_place = 1;
        }
        return SQ_OK;
    }
    hsize_t off[2] = {(hsize_t)row0, 0};
    hsize_t size = 0;
    if (H5Dget_chunk_storage_size(m->logits, off, &size) < 0 || size == 0)
        return sq_error_set(err, SQ_EIO, "%s: %s: cannot find the chunk of row %llu: %s", c->path,
                            m->logits_name, (unsigned long long)off[0], sqc_h5_detail(d));
    /* stored as the rows themselves: straight into the caller's rows */
    int in_place = direct && m->esz == 4 && m->shuffle_at < 0 && m->deflate_at < 0 &&
                   (size_t)size == whole;
    if (!in_place && grow(&r->data, &r->cap, (size_t)size))
        return sq_error_oom(err, "raw chunk");
    uint32_t mask = 0;
    if (H5Dread_chunk(m->logits, H5P_DEFAULT, off, &mask, in_place ? (void *)direct : r->data) < 0)
        return sq_error_set(err, SQ_EIO, "%s: %s: cannot read the chunk of row %llu: %s", c->path,
                            m->logits_name, (unsigned long long)off[0], sqc_h5_detail(d));
    int rc = check_size(c, m->logits_name, err);
    if (rc)
        return rc;
    r->size = (size_t)size;
    r->mask = mask;
    r->bytes = in_place ? NULL : r->data;
    r->rows = in_place ? direct : NULL;
    r->in_place = in_place;
    return SQ_OK;
}

/* Shuffle filter undone: byte plane b (n bytes at src + b·n) holds byte b of every element;
 * the first `used` elements go to out. */
static void unshuffle4(const unsigned char *src, size_t n, size_t used, unsigned char *out)
{
    const unsigned char *p0 = src, *p1 = src + n, *p2 = src + 2 * n, *p3 = src + 3 * n;
    size_t i = 0;
#ifdef __SSE2__
    for (; i + 16 <= used; i += 16) {
        __m128i a = _mm_loadu_si128((const __m128i *)(const void *)(p0 + i));
        __m128i b = _mm_loadu_si128((const __m128i *)(const void *)(p1 + i));
        __m128i cc = _mm_loadu_si128((const __m128i *)(const void *)(p2 + i));
        __m128i dd = _mm_loadu_si128((const __m128i *)(const void *)(p3 + i));
        __m128i ab0 = _mm_unpacklo_epi8(a, b), ab1 = _mm_unpackhi_epi8(a, b);
        __m128i cd0 = _mm_unpacklo_epi8(cc, dd), cd1 = _mm_unpackhi_epi8(cc, dd);
        unsigned char *o = out + 4 * i;
        _mm_storeu_si128((__m128i *)(void *)o, _mm_unpacklo_epi16(ab0, cd0));
        _mm_storeu_si128((__m128i *)(void *)(o + 16), _mm_unpackhi_epi16(ab0, cd0));
        _mm_storeu_si128((__m128i *)(void *)(o + 32), _mm_unpacklo_epi16(ab1, cd1));
        _mm_storeu_si128((__m128i *)(void *)(o + 48), _mm_unpackhi_epi16(ab1, cd1));
    }
#endif
    for (; i < used; i++) {
        out[4 * i] = p0[i];
        out[4 * i + 1] = p1[i];
        out[4 * i + 2] = p2[i];
        out[4 * i + 3] = p3[i];
    }
}

/* float16 elements (byte planes when shuffled, else pairs) widened into out[0, used): element i
 * is src[i] | src[n + i] << 8 (shuffled) or the i-th pair. With F16C (issue 27: this loop was
 * 12% of a float16 corpus's estimation), sixteen at a time by vcvtph2ps, which gives
 * sq_f16_to_f32's value for every finite half (subnormals included); a block holding an
 * infinity or a NaN takes the scalar rule, so every bit stays sq_f16_to_f32's. */
static int widen_f16_scalar(const unsigned char *src, size_t n, size_t i, size_t used,
                            int unshuffle, float *out)
{
    int special = 0;
    for (; i < used; i++) {
        uint16_t h;
        if (unshuffle) {
            h = (uint16_t)(src[i] | (unsigned)src[n + i] << 8);
        } else {
            memcpy(&h, src + 2 * i, sizeof h);
        }
        special |= (h & 0x7c00u) == 0x7c00u;
        out[i] = sq_f16_to_f32(h);
    }
    return special;
}

#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("avx2,f16c"))) static size_t widen_f16_f16c(const unsigned char *src,
                                                                 size_t n, size_t used,
                                                                 int unshuffle, float *out,
                                                                 int *special_out)
{
    const __m128i expo = _mm_set1_epi16(0x7c00);
    size_t i = 0;
    for (; i + 16 <= used; i += 16) {
        __m128i h0, h1;
        if (unshuffle) {
            __m128i lo = _mm_loadu_si128((const __m128i *)(const void *)(src + i));
            __m128i hi = _mm_loadu_si128((const __m128i *)(const void *)(src + n + i));
            h0 = _mm_unpacklo_epi8(lo, hi);
            h1 = _mm_unpackhi_epi8(lo, hi);
        } else {
            h0 = _mm_loadu_si128((const __m128i *)(const void *)(src + 2 * i));
            h1 = _mm_loadu_si128((const __m128i *)(const void *)(src + 2 * i + 16));
        }
        __m128i special = _mm_or_si128(_mm_cmpeq_epi16(_mm_and_si128(h0, expo), expo),
                                       _mm_cmpeq_epi16(_mm_and_si128(h1, expo), expo));
        if (_mm_movemask_epi8(special)) {
            *special_out |= widen_f16_scalar(src, n, i, i + 16, unshuffle, out);
            continue;
        }
        _mm256_storeu_ps(out + i, _mm256_cvtph_ps(h0));
        _mm256_storeu_ps(out + i + 8, _mm256_cvtph_ps(h1));
    }
    return i;
}
#endif

/* Returns 1 when some value is an infinity or a NaN (exponent bits all ones): only then can
 * the widened rows hold a value that is not finite. */
static int widen_f16(const unsigned char *src, size_t n, size_t used, int unshuffle,
                     float *out)
{
    size_t i = 0;
    int special = 0;
#if defined(__x86_64__) && defined(__GNUC__)
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c"))
        i = widen_f16_f16c(src, n, used, unshuffle, out, &special);
#endif
    return widen_f16_scalar(src, n, i, used, unshuffle, out) | special;
}

static int decode(const sq_corpus *c, const sq_corpus_raw *r, float *out, unsigned char **work,
                  size_t *work_cap, struct libdeflate_decompressor *z, int check, sq_error *err)
{
    const corpus_model *m = &c->m[r->model];
    const int V = c->info.vocab;
    const int64_t row0 = r->chunk * (int64_t)m->chunk_rows;
    const int count = (int)(c->info.rows - row0 < m->chunk_rows ? c->info.rows - row0
                                                                 : m->chunk_rows);
    const size_t used = (size_t)count * (size_t)V;
    /* elements stored: a chunk holds whole chunk rows, a piece of a contiguous dataset only
     * its own */
    const size_t n = m->contiguous ? used : (size_t)m->chunk_rows * (size_t)V;
    const size_t bytes = n * (size_t)m->esz;
    if (r->rows && !check) {
        memcpy(out, r->rows, used * sizeof(float));
        return SQ_OK;
    }
    if (r->rows)
        return check_finite((sq_corpus *)c, m->logits_name, r->rows, row0, count, V, err);
    const unsigned char *src = r->bytes;
    size_t have = r->size;
    const int unshuffle = m->shuffle_at >= 0 && !(r->mask >> m->shuffle_at & 1);
    /* the pipeline backwards: inflate, then unshuffle */
    if (m->deflate_at >= 0 && !(r->mask >> m->deflate_at & 1)) {
        /* float32 without shuffle inflates straight into the rows (out has room for whole
         * chunk rows) */
        unsigned char *dst = (unsigned char *)out;
        if (unshuffle || m->esz != 4) {
            if (grow(work, work_cap, bytes))
                return sq_error_oom(err, "chunk decoding");
            dst = *work;
        }
        size_t got = 0;
        enum libdeflate_result zr = libdeflate_zlib_decompress(z, src, have, dst, bytes, &got);
        if (zr != LIBDEFLATE_SUCCESS || got != bytes)
            return sq_error_set(err, SQ_EDATA, "%s: %s: the chunk of row %lld does not inflate to "
                                "%zu bytes (the file is damaged)", c->path, m->logits_name,
                                (long long)row0, bytes);
        src = dst;
        have = got;
    }
    if (have != bytes)
        return sq_error_set(err, SQ_EDATA, "%s: %s: the chunk of row %lld holds %zu bytes, not %zu",
                            c->path, m->logits_name, (long long)row0, have, bytes);
    if (m->esz == 4) {
        if (unshuffle)
            unshuffle4(src, n, used, (unsigned char *)out);
        else if (src != (const unsigned char *)out)
            memcpy(out, src, used * sizeof(float));
    } else if (!widen_f16(src, n, used, unshuffle, out)) {
        return SQ_OK;   /* no infinity or NaN among the halves: the finite check would pass */
    }
    return check ? check_finite((sq_corpus *)c, m->logits_name, out, row0, count, V, err) : SQ_OK;
}

int sq_corpus_decode_raw(const sq_corpus *c, const sq_corpus_raw *r, float *out,
                         unsigned char **work, size_t *work_cap, sq_error *err)
{
    return decode_raw(c, r, out, work, work_cap, 1, err);
}

/* check 0: no finite check (the caller checks the rows it wants), and rows already in place
 * (r->rows) are copied to out. */
static int decode_raw(const sq_corpus *c, const sq_corpus_raw *r, float *out,
                      unsigned char **work, size_t *work_cap, int check, sq_error *err)
{
    const corpus_model *m = &c->m[r->model];
    struct libdeflate_decompressor *const z =
        m->deflate_at >= 0 && !(r->mask >> m->deflate_at & 1) ? libdeflate_alloc_decompressor()
                                                              : NULL;
    if (m->deflate_at >= 0 && !(r->mask >> m->deflate_at & 1) && !z)
        return sq_error_oom(err, "chunk decoding");
    int rc;
    if (r->map) {
        /* the mapping faults when the file was cut short after the chunk was mapped */
        sigjmp_buf jb;
        if (sigsetjmp(jb, 0)) {
            sq_bus_leave();
            libdeflate_free_decompressor(z);
            return sq_error_set(err, SQ_EDATA, "%s: %s: the chunk of row %lld: the file was cut "
                                "short while being read (its mapping faulted)", c->path,
                                m->logits_name, (long long)(r->chunk * (int64_t)m->chunk_rows));
        }
        sq_bus_enter(&jb);
        rc = decode(c, r, out, work, work_cap, z, check, err);
        sq_bus_leave();
    } else {
        rc = decode(c, r, out, work, work_cap, z, check, err);
    }
    libdeflate_free_decompressor(z);
    return rc;
}
