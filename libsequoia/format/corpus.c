/* Draft/target corpora in HDF5 (docs/design.md §7.2): a checking, streaming reader and an atomic
 * writer. Only hyperslabs of row blocks are ever read, so memory does not grow with N. */
#include "libsequoia/format/corpus.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <hdf5.h>
#include <zlib.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

#include "libsequoia/base/io.h"

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

static const char *const model_names[2] = {"target", "draft"};

static void h5_quiet(void)
{
    /* The library prints its error stack on stderr by default; we report our own messages.
     * No exit handler either: after a failed write (a full disk) H5Fclose fails and leaves the
     * file half closed, and the library's own clean-up at exit then crashes on it. Every file
     * is closed explicitly, so there is nothing left for that handler to flush. */
    H5dont_atexit();
    H5open();
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
}

static hid_t h5_fapl_new(void)
{
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    if (fapl >= 0)
        H5Pset_file_locking(fapl, 1, 1);
    return fapl;
}

static herr_t walk_innermost(unsigned n, const H5E_error2_t *e, void *data)
{
    if (n == 0 && e->desc && *e->desc)
        snprintf((char *)data, 256, "%s", e->desc);
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
static const char *h5_detail(char buf[256])
{
    buf[0] = '\0';
    H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, walk_innermost, buf);
    H5Eclear2(H5E_DEFAULT);
    return buf;
}

static void h5_close_dataset(hid_t *id)
{
    if (*id >= 0)
        H5Dclose(*id);
    *id = H5I_INVALID_HID;
}

/* ---- float16 --------------------------------------------------------------------------- */

float sq_half_to_float(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu, bits;
    if (e == 0) {
        float v = ldexpf((float)m, -24); /* zero or subnormal: m * 2^-24, exact */
        memcpy(&bits, &v, sizeof bits);
        bits |= sign;
    } else if (e == 31) {
        bits = sign | 0x7f800000u | (m << 13); /* inf or NaN (payload kept) */
    } else {
        bits = sign | ((e + 112u) << 23) | (m << 13);
    }
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

uint16_t sq_float_to_half(float f)
{
    uint32_t bits;
    memcpy(&bits, &f, sizeof bits);
    uint16_t sign = (uint16_t)((bits >> 16) & 0x8000u);
    uint32_t a = bits & 0x7fffffffu;
    if (a > 0x7f800000u)
        return sign | 0x7e00u; /* NaN */
    if (a >= 0x477ff000u)
        return sign | 0x7c00u; /* rounds past 65504: infinity */
    if (a < 0x38800000u) {
        /* below 2^-14: a subnormal half, m * 2^-24, rounded to nearest even by rintf; 1024 is
         * the smallest normal, whose encoding is the same number */
        float m = rintf(ldexpf(fabsf(f), 24));
        return sign | (uint16_t)m;
    }
    uint32_t h = ((a >> 23) - 112u) << 10 | ((a >> 13) & 0x3ffu);
    uint32_t rest = a & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1u)))
        h++; /* a carry into the exponent is the right answer */
    return sign | (uint16_t)h;
}

/* IEEE 754 binary16 in the host's byte order: sign bit 15, exponent bits 10-14 (bias 15),
 * mantissa 0-9. HDF5 1.10 has no predefined half type; its soft conversion handles any such
 * layout, but slowly (about 15 M values/s), so the reader and the writer convert themselves and
 * let HDF5 move the raw 16-bit values. */
static hid_t half_type_new(void)
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

/* ============================================================================================
 * Reader
 * ========================================================================================== */

typedef struct corpus_model {
    int     sparse;          /* 1: topk_ids + topk_logits                                   */
    int     width;           /* V (dense) or K (sparse)                                     */
    int     half;            /* dense IEEE float16: read raw, converted by sq_half_to_float */
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
};

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
                            h5_detail(d));
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

static int attr_string(sq_corpus *c, const char *name, char *out, size_t cap, sq_error *err)
{
    hid_t a;
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
                              h5_detail(d));
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
                                  name, h5_detail(d));
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

static int attr_int(sq_corpus *c, const char *name, long long *out, sq_error *err)
{
    hid_t a;
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
                              h5_detail(d));
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
                            h5_detail(d));
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
static void raw_setup(corpus_model *m, hid_t ft, hsize_t cols)
{
    m->raw_ok = 0;
    m->shuffle_at = m->deflate_at = -1;
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
    const char *name = model_names[k];
    char dense[32], ids[32], lg[32];
    snprintf(dense, sizeof dense, "/%s/logits", name);
    snprintf(ids, sizeof ids, "/%s/topk_ids", name);
    snprintf(lg, sizeof lg, "/%s/topk_logits", name);
    hsize_t dims[2];
    if (link_exists(c->file, dense)) {
        m->sparse = 0;
        snprintf(m->logits_name, sizeof m->logits_name, "%s", dense);
        int rc = dataset_open(c, dense, 2, H5T_FLOAT, &m->logits, dims, NULL, err);
        if (rc)
            return rc;
        hid_t ft = H5Dget_type(m->logits);
        m->half = ft >= 0 && is_ieee_half(ft);
        raw_setup(m, ft, dims[1]);
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
    hsize_t di[2];
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
    hsize_t dims[2];
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
        return sq_error_set(err, SQ_EIO, "%s: %s: read error: %s", c->path, name, h5_detail(d));
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

static int corpus_check(sq_corpus *c, sq_error *err)
{
    char fmt[64];
    int rc = attr_string(c, "format", fmt, sizeof fmt, err);
    if (rc)
        return rc;
    if (strcmp(fmt, SQ_CORPUS_FORMAT) != 0)
        return sq_error_set(err, SQ_EDATA, "%s: /: attribute 'format': \"%s\", expected \"%s\"", c->path,
                            fmt, SQ_CORPUS_FORMAT);
    long long version;
    if ((rc = attr_int(c, "version", &version, err)))
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
    if ((rc = attr_int(c, "vocab_size", &vocab, err)))
        return rc;
    if (vocab < 1)
        return sq_error_set(err, SQ_EDATA, "%s: /: attribute 'vocab_size': %lld is out of range", c->path,
                            vocab);
    if (vocab > SQ_CORPUS_MAX_VOCAB)
        return sq_error_set(err, SQ_EDATA, "%s: /: attribute 'vocab_size': %lld exceeds the limit of "
                            "%d tokens", c->path, vocab, SQ_CORPUS_MAX_VOCAB);
    c->info.vocab = (int)vocab;
    if ((rc = attr_string(c, "draft", c->info.draft, sizeof c->info.draft, err)) ||
        (rc = attr_string(c, "target", c->info.target, sizeof c->info.target, err)))
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
        hsize_t dims[2];
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
    return SQ_OK;
}

int sq_corpus_open(const char *path, sq_corpus **out, sq_error *err)
{
    *out = NULL;
    h5_quiet();
    FILE *probe = fopen(path, "rb");
    if (!probe)
        return sq_error_set(err, SQ_ENOINPUT, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    int isdir = fstat(fileno(probe), &st) == 0 && S_ISDIR(st.st_mode);
    fclose(probe);
    if (isdir)
        return sq_error_set(err, SQ_EDATA, "%s: is a directory, expected a corpus file", path);
    htri_t is = H5Fis_hdf5(path);
    if (is <= 0) {
        H5Eclear2(H5E_DEFAULT);
        return sq_error_set(err, SQ_EDATA, "%s: not an HDF5 file (no HDF5 signature found)", path);
    }
    sq_corpus *c = calloc(1, sizeof *c);
    if (!c)
        return sq_error_oom(err, "corpus");
    c->file = c->tokens = H5I_INVALID_HID;
    for (int k = 0; k < 2; k++)
        c->m[k].logits = c->m[k].ids = H5I_INVALID_HID;
    c->path = strdup(path);
    if (!c->path) {
        free(c);
        return sq_error_oom(err, "corpus");
    }
    /* File locking where the file system has it; where it has not (some network file
     * systems), read anyway rather than fail. */
    hid_t fapl = h5_fapl_new();
    c->file = H5Fopen(path, H5F_ACC_RDONLY, fapl >= 0 ? fapl : H5P_DEFAULT);
    if (fapl >= 0)
        H5Pclose(fapl);
    if (c->file < 0) {
        char d[256];
        h5_detail(d);
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
        h5_close_dataset(&c->m[k].logits);
        h5_close_dataset(&c->m[k].ids);
    }
    h5_close_dataset(&c->tokens);
    if (c->file >= 0)
        H5Fclose(c->file);
    free(c->offsets);
    free(c->sp_logits);
    free(c->sp_ids);
    free(c->tok_scratch);
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
        h5_detail(d);
        return sq_error_set(err, io ? SQ_EIO : SQ_EDATA, "%s: %s: cannot read rows %lld..%lld%s%s%s",
                            c->path, name, (long long)row0, (long long)(row0 + count - 1),
                            io ? "" : " (the file is damaged)", *d ? ": " : "", d);
    }
    return SQ_OK;
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

static int read_model(sq_corpus *c, int k, int64_t row0, int count, float *out, sq_error *err)
{
    corpus_model *m = &c->m[k];
    int V = c->info.vocab;
    int rc;
    if (!m->sparse && m->half) {
        /* The raw halves go to the upper half of out, then widen front to back: element i is
         * read (bytes 2n+2i) before out[i] (bytes 4i..4i+3) is written, and 4i+3 < 2n+2j for
         * every j > i, so nothing unread is overwritten. */
        size_t n = (size_t)count * (size_t)V;
        unsigned char *raw = (unsigned char *)out + 2 * n;
        hid_t mt = half_type_new();
        if (mt < 0)
            return sq_error_oom(err, "float16 type");
        rc = read_rows(c, m->logits, m->logits_name, mt, row0, count, V, raw, err);
        H5Tclose(mt);
        if (rc)
            return rc;
        for (size_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, raw + 2 * i, sizeof h);
            float f = sq_half_to_float(h);
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
                return sq_error_set(err, SQ_EDATA,
                                    "%s: /tokens: row %lld: token id %d is outside the vocabulary "
                                    "[0, %d)", c->path, (long long)(row0 + i), (int)tokens[i],
                                    c->info.vocab);
    }
    return SQ_OK;
}

/* ---- raw chunks, decoded outside HDF5 (issue 17) ------------------------------------------ */

int sq_corpus_raw_rows(const sq_corpus *c)
{
    const corpus_model *t = &c->m[0], *d = &c->m[1];
    if (!t->raw_ok || !d->raw_ok || t->chunk_rows != d->chunk_rows)
        return 0;
    return t->chunk_rows;
}

void sq_corpus_raw_clear(sq_corpus_raw *r)
{
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

int sq_corpus_read_raw(sq_corpus *c, int model, int64_t chunk, float *direct, sq_corpus_raw *r,
                       sq_error *err)
{
    corpus_model *m = &c->m[model];
    SQ_ASSERT(sq_corpus_raw_rows(c) > 0 && model >= 0 && model <= 1);
    hsize_t off[2] = {(hsize_t)chunk * (hsize_t)m->chunk_rows, 0};
    hsize_t size = 0;
    char d[256];
    if (H5Dget_chunk_storage_size(m->logits, off, &size) < 0 || size == 0)
        return sq_error_set(err, SQ_EIO, "%s: %s: cannot find the chunk of row %llu: %s", c->path,
                            m->logits_name, (unsigned long long)off[0], h5_detail(d));
    /* stored as the rows themselves: straight into the caller's rows */
    r->in_place = direct && m->esz == 4 && m->shuffle_at < 0 && m->deflate_at < 0 &&
                  (size_t)size == (size_t)m->chunk_rows * (size_t)c->info.vocab * sizeof(float);
    if (!r->in_place && grow(&r->data, &r->cap, (size_t)size))
        return sq_error_oom(err, "raw chunk");
    uint32_t mask = 0;
    if (H5Dread_chunk(m->logits, H5P_DEFAULT, off, &mask, r->in_place ? (void *)direct : r->data) < 0)
        return sq_error_set(err, SQ_EIO, "%s: %s: cannot read the chunk of row %llu: %s", c->path,
                            m->logits_name, (unsigned long long)off[0], h5_detail(d));
    r->size = (size_t)size;
    r->mask = mask;
    r->model = model;
    r->chunk = chunk;
    return SQ_OK;
}

int sq_corpus_decode_raw(const sq_corpus *c, const sq_corpus_raw *r, float *out,
                         unsigned char **work, size_t *work_cap, sq_error *err)
{
    const corpus_model *m = &c->m[r->model];
    const int V = c->info.vocab;
    const int64_t row0 = r->chunk * (int64_t)m->chunk_rows;
    const int count = (int)(c->info.rows - row0 < m->chunk_rows ? c->info.rows - row0
                                                                 : m->chunk_rows);
    const size_t n = (size_t)m->chunk_rows * (size_t)V, bytes = n * (size_t)m->esz;
    if (r->in_place)
        return check_finite((sq_corpus *)c, m->logits_name, out, row0, count, V, err);
    const unsigned char *src = r->data;
    size_t have = r->size;
    /* the pipeline backwards: inflate, then unshuffle */
    if (m->deflate_at >= 0 && !(r->mask >> m->deflate_at & 1)) {
        if (grow(work, work_cap, 2 * bytes))
            return sq_error_oom(err, "chunk decoding");
        uLongf got = (uLongf)bytes;
        if (uncompress(*work, &got, src, (uLong)have) != Z_OK || got != bytes)
            return sq_error_set(err, SQ_EDATA, "%s: %s: the chunk of row %lld does not inflate to "
                                "%zu bytes", c->path, m->logits_name, (long long)row0, bytes);
        src = *work;
        have = got;
    }
    if (have != bytes)
        return sq_error_set(err, SQ_EDATA, "%s: %s: the chunk of row %lld holds %zu bytes, not %zu",
                            c->path, m->logits_name, (long long)row0, have, bytes);
    if (m->shuffle_at >= 0 && !(r->mask >> m->shuffle_at & 1)) {
        /* byte plane b holds byte b of every element */
        if (grow(work, work_cap, 2 * bytes))
            return sq_error_oom(err, "chunk decoding");
        unsigned char *dst = *work + bytes;
        const size_t used = (size_t)count * (size_t)V;
        for (int b = 0; b < m->esz; b++) {
            const unsigned char *plane = src + (size_t)b * n;
            for (size_t i = 0; i < used; i++)
                dst[i * (size_t)m->esz + (size_t)b] = plane[i];
        }
        src = dst;
    }
    const size_t used = (size_t)count * (size_t)V;
    if (m->esz == 4) {
        memcpy(out, src, used * sizeof(float));
    } else {
        for (size_t i = 0; i < used; i++) {
            uint16_t h;
            memcpy(&h, src + 2 * i, sizeof h);
            out[i] = sq_half_to_float(h);
        }
    }
    return check_finite((sq_corpus *)c, m->logits_name, out, row0, count, V, err);
}

/* ============================================================================================
 * Writer
 * ========================================================================================== */

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

static int write_attr_string(hid_t file, const char *name, const char *value)
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

static int write_attr_int(hid_t file, const char *name, long long value)
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

static void writer_free(sq_corpus_writer *w)
{
    for (int k = 0; k < 2; k++) {
        h5_close_dataset(&w->logits[k]);
        h5_close_dataset(&w->ids[k]);
        free(w->st_logits[k]);
        free(w->st_ids[k]);
    }
    h5_close_dataset(&w->tokens);
    h5_close_dataset(&w->resume_offsets);
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
    writer_free(w); /* closes the HDF5 file first */
    if (!keep)
        sq_temp_discard(tmp, slot);
    free(tmp);
}

/* Checks the parameters and allocates a writer with its buffers (no file yet). */
static int writer_new(const char *path, const sq_corpus_writer_params *params,
                      sq_corpus_writer **out, sq_error *err)
{
    *out = NULL;
    h5_quiet();
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
        writer_free(w);
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
static int writer_create_file(sq_corpus_writer *w, const sq_corpus_writer_params *params,
                              sq_error *err)
{
    const char *path = w->path;
    const sq_corpus_writer_params p = *params;
    int width = w->width;
    hid_t fapl = h5_fapl_new();
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
        h5_detail(d);
        sq_error_set(err, SQ_ECANTCREAT, "%s: cannot create the HDF5 file: %s", path, d);
        sq_corpus_writer_abort(w);
        return SQ_ECANTCREAT;
    }
    int bad = write_attr_string(w->file, "format", SQ_CORPUS_FORMAT) ||
              write_attr_int(w->file, "version", SQ_CORPUS_VERSION) ||
              write_attr_int(w->file, "vocab_size", p.vocab) ||
              write_attr_string(w->file, "draft", params->draft ? params->draft : "") ||
              write_attr_string(w->file, "target", params->target ? params->target : "");
    hid_t half = p.half ? half_type_new() : H5I_INVALID_HID;
    for (int k = 0; k < 2 && !bad; k++) {
        char name[32];
        if (p.topk > 0) {
            snprintf(name, sizeof name, "/%s/topk_ids", model_names[k]);
            w->ids[k] = create_rows_dataset(w, name, H5T_STD_I32LE, width);
            snprintf(name, sizeof name, "/%s/topk_logits", model_names[k]);
            w->logits[k] = create_rows_dataset(w, name, H5T_IEEE_F32LE, width);
            bad = w->ids[k] < 0 || w->logits[k] < 0;
        } else {
            snprintf(name, sizeof name, "/%s/logits", model_names[k]);
            w->logits[k] = create_rows_dataset(w, name, p.half ? half : H5T_IEEE_F32LE, width);
            bad = (p.half && half < 0) || w->logits[k] < 0;
        }
    }
    if (half >= 0)
        H5Tclose(half);
    if (bad) {
        h5_detail(d);
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
    int rc = writer_new(path, params, &w, err);
    if (rc)
        return rc;
    if ((rc = sq_temp_create(path, &w->tmp, &w->slot, err))) {
        writer_free(w);
        return rc;
    }
    if ((rc = writer_create_file(w, params, err)))
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
        h5_detail(d);
        if (!*d || strstr(d, "write failed") || strstr(d, "file write failed"))
            snprintf(d, sizeof d, "%s", strerror(e));
        w->failed = 1;
        return sq_error_set(err, SQ_EIO, "%s: %s: write error: %s", w->path, what, d);
    }
    return SQ_OK;
}

static int writer_flush(sq_corpus_writer *w, sq_error *err)
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
                uint16_t h = sq_float_to_half(f);
                memcpy(b + 2 * i, &h, sizeof h);
            }
            hid_t mt = half_type_new();
            rc = mt < 0 ? sq_error_oom(err, "float16 type")
                        : extend_and_write(w, w->logits[k], mt, w->width, b, err, model_names[k]);
            if (mt >= 0)
                H5Tclose(mt);
        } else {
            rc = extend_and_write(w, w->logits[k], H5T_NATIVE_FLOAT, w->width, w->st_logits[k], err,
                                  model_names[k]);
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
                                        "finite", w->path, model_names[k], (long long)row, j);
                if (w->p.half && fabsf(v[j]) > HALF_MAX)
                    return sq_error_set(err, SQ_EDATA, "%s: /%s/logits: row %lld: column %d: %g does "
                                        "not fit in float16", w->path, model_names[k],
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
                                    h5_detail(d));
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
            int rc = writer_flush(w, err);
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
        return write_attr_int(file, name, value);
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
    int rc = writer_flush(w, err);
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
        return sq_error_set(err, SQ_EIO, "%s: checkpoint: write error: %s", w->tmp, h5_detail(d));
    }
    return SQ_OK;
}

static int resume_state_drop(sq_corpus_writer *w, sq_error *err)
{
    h5_close_dataset(&w->resume_offsets);
    int ok = H5Adelete(w->file, RESUME_ROWS) >= 0 && H5Adelete(w->file, RESUME_FINGERPRINT) >= 0 &&
             H5Ldelete(w->file, "/resume", H5P_DEFAULT) >= 0;
    if (!ok) {
        char d[256];
        return sq_error_set(err, SQ_EIO, "%s: cannot drop the resume state: %s", w->tmp,
                            h5_detail(d));
    }
    return SQ_OK;
}

/* Opens dataset `name` of the partial file, checks its row width and cuts it to `rows`. */
static int resume_dataset(sq_corpus_writer *w, const char *name, int width, int64_t rows,
                          hid_t *out, sq_error *err)
{
    char d[256];
    *out = H5Dopen2(w->file, name, H5P_DEFAULT);
    if (*out < 0)
        return sq_error_set(err, SQ_EDATA, "%s: %s: missing: %s (delete it to start over)", w->tmp,
                            name, h5_detail(d));
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
    if (dims[0] < (hsize_t)rows)
        return sq_error_set(err, SQ_EDATA, "%s: %s: %llu rows, but the checkpoint says %lld; "
                            "delete it to start over", w->tmp, name, (unsigned long long)dims[0],
                            (long long)rows);
    hsize_t nd[2] = {(hsize_t)rows, (hsize_t)width};
    if (H5Dset_extent(*out, nd) < 0)
        return sq_error_set(err, SQ_EIO, "%s: %s: cannot cut to %lld rows: %s", w->tmp, name,
                            (long long)rows, h5_detail(d));
    return SQ_OK;
}

/* Reopens an existing partial file: checks it was started for the same output, cuts every
 * dataset to the checkpoint and restores the sequence boundaries. */
static int resume_reopen(sq_corpus_writer *w, const char *fingerprint, int64_t *rows_done,
                         sq_error *err)
{
    char d[256];
    hid_t fapl = h5_fapl_new();
    if (fapl >= 0)
        H5Pset_fclose_degree(fapl, H5F_CLOSE_STRONG);
    w->file = H5Fopen(w->tmp, H5F_ACC_RDWR, fapl >= 0 ? fapl : H5P_DEFAULT);
    if (fapl >= 0)
        H5Pclose(fapl);
    if (w->file < 0) {
        /* HDF5 often leaves no message (a file of other bytes): say what we know. */
        h5_detail(d);
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
    if (attr_int(&probe, RESUME_ROWS, &rows, &e) || attr_int(&probe, "vocab_size", &vocab, &e) ||
        attr_string(&probe, RESUME_FINGERPRINT, fp, sizeof fp, &e))
        return sq_error_set(err, SQ_EDATA, "%s (not a partial dump of this tool? delete it to "
                            "start over)", e.msg);
    if (strcmp(fp, fingerprint) != 0)
        return sq_error_set(err, SQ_EDATA, "%s: was started with other inputs or options (%s; "
                            "now %s); delete it, or start over without resuming", w->tmp, fp, fingerprint);
    if (vocab != w->p.vocab || rows < 0)
        return sq_error_set(err, SQ_EDATA, "%s: vocab_size %lld or resume_rows %lld does not fit "
                            "this dump; delete it to start over", w->tmp, vocab, rows);
    int rc;
    for (int k = 0; k < 2; k++) {
        char name[32];
        if (w->p.topk > 0) {
            snprintf(name, sizeof name, "/%s/topk_ids", model_names[k]);
            if ((rc = resume_dataset(w, name, w->width, rows, &w->ids[k], err)))
                return rc;
            snprintf(name, sizeof name, "/%s/topk_logits", model_names[k]);
        } else {
            snprintf(name, sizeof name, "/%s/logits", model_names[k]);
        }
        if ((rc = resume_dataset(w, name, w->width, rows, &w->logits[k], err)))
            return rc;
    }
    if (H5Lexists(w->file, "/tokens", H5P_DEFAULT) > 0) {
        if ((rc = resume_dataset(w, "/tokens", 0, rows, &w->tokens, err)))
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
                            h5_detail(d));
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
    int rc = writer_new(path, params, &w, err);
    if (rc)
        return rc;
    w->resumable = 1;
    w->tmp = strdup(partial);
    if (!w->tmp) {
        writer_free(w);
        return sq_error_oom(err, "partial path");
    }
    struct stat st;
    if (stat(partial, &st) == 0) {
        if (!S_ISREG(st.st_mode)) {
            writer_free(w);
            return sq_error_set(err, SQ_ECANTCREAT, "%s: exists and is not a regular file", partial);
        }
        if ((rc = resume_reopen(w, fingerprint, rows_done, err))) {
            writer_free(w);  /* the partial file stays as it was */
            return rc;
        }
        *out = w;
        return SQ_OK;
    }
    if ((rc = writer_create_file(w, params, err)))
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
    ok = w->resume_offsets >= 0 && write_attr_string(w->file, RESUME_FINGERPRINT, fingerprint) == 0;
    if (ok && (rc = sq_corpus_writer_checkpoint(w, err)) != SQ_OK) {
        unlink(partial);
        writer_free(w);
        return rc;
    }
    if (!ok) {
        char d[256];
        sq_error_set(err, SQ_EIO, "%s: cannot write the resume state: %s", partial, h5_detail(d));
        writer_free(w);
        unlink(partial);
        return SQ_EIO;
    }
    *out = w;
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
        rc = writer_flush(w, err);
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
            rc = sq_error_set(err, SQ_EIO, "%s: /seq_offsets: write error: %s", w->path, h5_detail(d));
        }
    }
    if (rc == SQ_OK && w->resumable)
        rc = resume_state_drop(w, err);  /* the finished file is a plain corpus */
    if (rc == SQ_OK) {
        for (int k = 0; k < 2; k++) {
            h5_close_dataset(&w->logits[k]);
            h5_close_dataset(&w->ids[k]);
        }
        h5_close_dataset(&w->tokens);
        herr_t fl = H5Fflush(w->file, H5F_SCOPE_GLOBAL);
        herr_t cl = H5Fclose(w->file);
        w->file = H5I_INVALID_HID;
        if (fl < 0 || cl < 0) {
            char d[256];
            rc = sq_error_set(err, SQ_EIO, "%s: cannot finish the HDF5 file: %s", w->path,
                              h5_detail(d));
        }
    }
    if (rc != SQ_OK) {
        sq_corpus_writer_abort(w);
        return rc;
    }
    rc = sq_temp_commit(w->tmp, w->slot, w->path, err);
    writer_free(w);
    return rc;
}
