/* Fuzz harness: HDF5 corpus metadata (docs/design.md §7.2, libsequoia/format/corpus.h).
 *
 * The input is not an HDF5 file (the HDF5 library's own parser is not ours to fuzz): its bytes
 * are a small program that builds a corpus through the HDF5 API, choosing the root attributes
 * (present or not, type, value), each model's datasets (dense or sparse, dtype, rank, shape,
 * layout, values, huge declared extents that are never written), /tokens and /seq_offsets.
 * The harness then opens the file with sq_corpus_open and reads a block at each end.
 * Oracle: an opened corpus has consistent info (rows >= 1, 1 <= vocab, sequences within rows,
 * offsets from 0 to N increasing), and reads either succeed with finite or -inf logits and
 * in-vocabulary tokens, or fail with a message. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hdf5.h>

#include "libsequoia/format/corpus.h"
#include "tests/fuzz/fuzz_util.h"

typedef struct bytes {
    const uint8_t *p;
    size_t n, at;
} bytes;

/* N of the corpus being built (offsets are spread over it). */
static hsize_t corpus_rows;

static unsigned next(bytes *b)
{
    return b->at < b->n ? b->p[b->at++] : 0u;
}

static uint64_t next64(bytes *b)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v |= (uint64_t)next(b) << (8 * i);
    return v;
}

/* A value for a data element: mostly small numbers, sometimes NaN or infinities. */
static double next_value(bytes *b)
{
    unsigned v = next(b);
    if (v == 0xff)
        return NAN;
    if (v == 0xfe)
        return INFINITY;
    if (v == 0xfd)
        return -INFINITY;
    return ((double)v - 100.0) / 8.0;
}

static void put_string_attr(hid_t loc, const char *name, bytes *b)
{
    unsigned mode = next(b) % 5;
    char buf[600];
    size_t len = 0;
    if (mode == 3)
        return;  /* missing */
    if (mode == 4) {
        hid_t sp = H5Screate(H5S_SCALAR);
        hid_t a = H5Acreate2(loc, name, H5T_STD_I32LE, sp, H5P_DEFAULT, H5P_DEFAULT);
        int v = (int)next(b);
        H5Awrite(a, H5T_NATIVE_INT, &v);
        H5Aclose(a);
        H5Sclose(sp);
        return;
    }
    if (!strcmp(name, "format") && next(b) % 4 != 0) {
        len = (size_t)snprintf(buf, sizeof buf, "%s", next(b) % 3 ? "sequoia-corpus" : "sequoia-plan");
    } else {
        len = next(b);
        if (next(b) == 7)
            len = 520;  /* past the 256-byte name fields */
        for (size_t i = 0; i < len; i++)
            buf[i] = (char)next(b);
        buf[len] = '\0';
    }
    hid_t t = H5Tcopy(H5T_C_S1);
    hid_t sp = next(b) == 9 ? H5Screate_simple(1, (hsize_t[]){2}, NULL) : H5Screate(H5S_SCALAR);
    if (mode == 1) {
        H5Tset_size(t, H5T_VARIABLE);
        hid_t a = H5Acreate2(loc, name, t, sp, H5P_DEFAULT, H5P_DEFAULT);
        const char *vals[2] = {buf, buf};
        H5Awrite(a, t, vals);
        H5Aclose(a);
    } else {
        H5Tset_size(t, len ? len : 1);
        if (mode == 2)
            H5Tset_strpad(t, H5T_STR_SPACEPAD);
        hid_t a = H5Acreate2(loc, name, t, sp, H5P_DEFAULT, H5P_DEFAULT);
        char two[1200];
        memset(two, 0, sizeof two);
        memcpy(two, buf, len ? len : 1);
        memcpy(two + (len ? len : 1), buf, len ? len : 1);
        H5Awrite(a, t, two);
        H5Aclose(a);
    }
    H5Sclose(sp);
    H5Tclose(t);
}

static void put_int_attr(hid_t loc, const char *name, bytes *b, long long good)
{
    unsigned mode = next(b) % 8;
    if (mode == 7)
        return;
    long long v;
    switch (mode) {
    case 0: case 1: v = good; break;
    case 2: v = good + 1; break;
    case 3: v = -(long long)next(b); break;
    case 4: v = 1LL << 31; break;
    case 5: v = 1LL << 30; break;
    default: v = (long long)next64(b); break;
    }
    hid_t sp = H5Screate(H5S_SCALAR);
    unsigned ty = next(b) % 5;
    hid_t ft = ty == 0 ? H5T_STD_I32LE : ty == 1 ? H5T_STD_U64LE : ty == 2 ? H5T_IEEE_F64LE
                                                                           : H5T_STD_I64LE;
    hid_t a = H5Acreate2(loc, name, ft, sp, H5P_DEFAULT, H5P_DEFAULT);
    if (ft == H5T_IEEE_F64LE) {
        double d = (double)v;
        H5Awrite(a, H5T_NATIVE_DOUBLE, &d);
    } else if (ft == H5T_STD_I32LE) {
        int i = (int)v;
        H5Awrite(a, H5T_NATIVE_INT, &i);
    } else {
        H5Awrite(a, H5T_NATIVE_LLONG, &v);
    }
    H5Aclose(a);
    H5Sclose(sp);
}

static hid_t half_type(bytes *b)
{
    hid_t t = H5Tcopy(H5T_IEEE_F32LE);
    unsigned ebias = next(b) % 4 == 0 ? 7u : 15u;
    H5Tset_fields(t, 15, 10, 5, 0, 10);
    H5Tset_precision(t, 16);
    H5Tset_size(t, 2);
    H5Tset_ebias(t, ebias);
    return t;
}

/* A dataset `name` under loc. kind: 0 float logits, 1 integer ids, 2 tokens, 3 offsets. */
static void put_dataset(hid_t loc, const char *name, bytes *b, int kind, hsize_t rows, hsize_t cols,
                        int vocab)
{
    unsigned shape = next(b) % 8;
    int rank = (kind >= 2) ? 1 : 2;
    hsize_t dims[3] = {rows, cols, 2};
    if (shape == 1)
        rank = rank == 2 ? 1 : 2;
    else if (shape == 2)
        rank = 3;
    else if (shape == 3)
        dims[0] = rows + 1;
    else if (shape == 4)
        dims[rank - 1] = next(b) % 9;
    int huge = 0;
    if (shape == 5 && next(b) % 2) {
        dims[next(b) % rank] = (hsize_t)1 << (30 + next(b) % 12);  /* declared, never written */
        huge = 1;
    }
    hsize_t total = 1;
    for (int i = 0; i < rank; i++)
        total *= dims[i] ? dims[i] : 1;
    if (!huge && total > 4096)
        return;
    unsigned dt = next(b) % 8;
    hid_t ft;
    int own_type = 0;
    if (kind == 0) {
        ft = dt < 3 ? H5T_IEEE_F32LE : dt < 5 ? (own_type = 1, half_type(b))
             : dt == 5 ? H5T_IEEE_F64LE : dt == 6 ? H5T_STD_I32LE : H5T_STD_U8LE;
    } else {
        ft = dt < 4 ? (kind == 3 ? H5T_STD_I64LE : H5T_STD_I32LE)
             : dt == 4 ? H5T_STD_I64LE : dt == 5 ? H5T_STD_U8LE : dt == 6 ? H5T_IEEE_F32LE
                                                                          : H5T_STD_U64LE;
    }
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    int any_zero = 0;
    for (int i = 0; i < rank; i++)
        any_zero |= dims[i] == 0;
    if (huge || next(b) % 2) {
        hsize_t chunk[3];
        for (int i = 0; i < rank; i++) {
            chunk[i] = 1 + next(b) % 4;
            if (dims[i] && chunk[i] > dims[i])
                chunk[i] = dims[i];
        }
        H5Pset_chunk(dcpl, rank, chunk);
        if (next(b) % 2)
            H5Pset_deflate(dcpl, 1);
    }
    hid_t sp = H5Screate_simple(rank, dims, NULL);
    hid_t ds = H5Dcreate2(loc, name, ft, sp, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    if (ds >= 0 && !huge && !any_zero) {
        double *v = malloc((size_t)total * sizeof *v);
        if (!v)
            abort();
        for (hsize_t i = 0; i < total; i++) {
            if (kind == 0) {
                v[i] = next_value(b);
            } else if (kind == 1) {
                unsigned x = next(b);
                v[i] = x == 0xff ? -1.0 : x == 0xfe ? (double)vocab : (double)(i % (cols ? cols : 1));
                if (x < 0x10)
                    v[i] = (double)(x % (vocab > 0 ? vocab : 1));
            } else if (kind == 2) {
                unsigned x = next(b);
                v[i] = x == 0xff ? -1.0 : x == 0xfe ? (double)vocab : (double)(x % 4);
            } else {
                unsigned x = next(b);
                /* offsets: evenly spread over the corpus rows, the last one N */
                v[i] = x < 0xf0 ? (double)(i * (corpus_rows / (total > 1 ? total - 1 : 1)))
                                : (double)x;
                if (i == total - 1 && x < 0x80)
                    v[i] = (double)corpus_rows;
            }
        }
        H5Dwrite(ds, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, v);
        free(v);
    }
    if (ds >= 0)
        H5Dclose(ds);
    H5Sclose(sp);
    H5Pclose(dcpl);
    if (own_type)
        H5Tclose(ft);
}

static void put_model(hid_t file, const char *name, bytes *b, hsize_t rows, int vocab)
{
    unsigned mode = next(b) % 6;
    if (mode == 5)
        return;  /* missing */
    if (mode == 4) {  /* a dataset where the group should be */
        put_dataset(file, name, b, 0, rows, (hsize_t)vocab, vocab);
        return;
    }
    hid_t g = H5Gcreate2(file, name, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    if (g < 0)
        return;
    if (mode <= 1) {
        put_dataset(g, "logits", b, 0, rows, (hsize_t)vocab, vocab);
    } else {
        hsize_t k = 1 + next(b) % 4;
        if (mode == 2 || next(b) % 2)
            put_dataset(g, "topk_ids", b, 1, rows, k, vocab);
        if (mode == 2 || next(b) % 2)
            put_dataset(g, "topk_logits", b, 0, rows, k, vocab);
        if (next(b) == 3)
            H5Gclose(H5Gcreate2(g, "logits", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
    }
    H5Gclose(g);
}

static void check_block(sq_corpus *c, int64_t row0, int count)
{
    const sq_corpus_info *info = sq_corpus_get_info(c);
    size_t n = (size_t)count * (size_t)info->vocab;
    float *t = malloc(n * sizeof *t), *d = malloc(n * sizeof *d);
    int32_t *tok = malloc((size_t)count * sizeof *tok);
    if (!t || !d || !tok)
        abort();
    sq_error err = {0};
    int rc = sq_corpus_read(c, row0, count, t, d, tok, &err);
    if (rc == SQ_OK) {
        for (size_t i = 0; i < n; i++)
            if (isnan(t[i]) || isnan(d[i]) || t[i] == INFINITY || d[i] == INFINITY)
                abort();
        for (int i = 0; i < count; i++)
            if (info->has_tokens ? (tok[i] < 0 || tok[i] >= info->vocab) : tok[i] != -1)
                abort();
    } else if (!err.msg[0]) {
        abort();
    }
    free(t);
    free(d);
    free(tok);
}

/* Raw chunks (the estimator's reading, issue 17), mapped and fetched by HDF5: each chunk either
 * decodes to exactly the rows sq_corpus_read gives, or fails with a message. */
static void check_raw(sq_corpus *c)
{
    const sq_corpus_info *info = sq_corpus_get_info(c);
    size_t n = (size_t)info->rows * (size_t)info->vocab;
    float *t = malloc(n * sizeof *t), *d = malloc(n * sizeof *d);
    if (!t || !d)
        abort();
    sq_error err = {0};
    int whole = sq_corpus_read(c, 0, (int)info->rows, t, d, NULL, &err) == SQ_OK;
    const int was = sq_corpus_mapped(c);
    for (int mapped = was; mapped >= 0; mapped--) {
        sq_corpus_set_mapped(c, mapped);
        int rows = sq_corpus_raw_rows(c);
        if (rows <= 0)
            continue;
        float *out = malloc((size_t)rows * (size_t)info->vocab * sizeof *out);
        if (!out)
            abort();
        sq_corpus_raw raw = {0};
        unsigned char *work = NULL;
        size_t cap = 0;
        for (int model = 0; model < 2; model++)
            for (int64_t ch = 0; ch * rows < info->rows; ch++) {
                sq_error e = {0};
                int rc = sq_corpus_read_raw(c, model, ch, out, &raw, &e);
                if (rc == SQ_OK)
                    rc = sq_corpus_decode_raw(c, &raw, out, &work, &cap, &e);
                if (rc != SQ_OK) {
                    if (!e.msg[0])
                        abort();
                    continue;
                }
                int64_t r0 = ch * rows;
                size_t cnt = (size_t)(info->rows - r0 < rows ? info->rows - r0 : rows) *
                             (size_t)info->vocab;
                const float *got = raw.rows ? raw.rows : out;
                const float *want = (model ? d : t) + (size_t)r0 * (size_t)info->vocab;
                for (size_t i = 0; i < cnt; i++)
                    if (!isfinite(got[i]) || (whole && memcmp(&got[i], &want[i], sizeof *got)))
                        abort();
            }
        sq_corpus_raw_clear(&raw);
        free(work);
        free(out);
    }
    sq_corpus_set_mapped(c, was);
    free(t);
    free(d);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int quiet;
    if (!quiet) {
        H5open();
        H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
        quiet = 1;
    }
    bytes b = {data, size, 0};
    char path[8192];
    snprintf(path, sizeof path, "%s/corpus.h5", fz_scratch_dir());
    hid_t file = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    if (file < 0)
        abort();
    int vocab = 1 + (int)(next(&b) % 12);
    hsize_t rows = next(&b) % 9;
    corpus_rows = rows;
    put_string_attr(file, "format", &b);
    put_int_attr(file, "version", &b, 1);
    put_int_attr(file, "vocab_size", &b, vocab);
    put_string_attr(file, "draft", &b);
    put_string_attr(file, "target", &b);
    put_model(file, "target", &b, rows, vocab);
    put_model(file, "draft", &b, rows, vocab);
    if (next(&b) % 2)
        put_dataset(file, "tokens", &b, 2, rows, 0, vocab);
    if (next(&b) % 2)
        put_dataset(file, "seq_offsets", &b, 3, 1 + next(&b) % 4, 0, vocab);
    H5Fclose(file);

    sq_corpus *c = NULL;
    sq_error err = {0};
    int rc = sq_corpus_open(path, &c, &err);
    if (getenv("SQ_FUZZ_VERBOSE"))  /* for writing seeds: what the reader made of it */
        fprintf(stderr, "fuzz-corpus: %s\n", rc ? err.msg : "opened");
    if (rc == SQ_OK) {
        const sq_corpus_info *info = sq_corpus_get_info(c);
        if (info->rows < 1 || info->vocab < 1 || info->sequences < 1 ||
            info->sequences > info->rows || (info->sparse && (info->topk < 1 ||
                                                              info->topk > info->vocab)))
            abort();
        const int64_t *off = sq_corpus_seq_offsets(c);
        if (off[0] != 0 || off[info->sequences] != info->rows)
            abort();
        for (int64_t s = 1; s <= info->sequences; s++)
            if (off[s] <= off[s - 1])
                abort();
        int br = sq_corpus_block_rows(c);
        if (br < 1 || br > info->rows)
            abort();
        int64_t count = br < 16 ? br : 16;
        /* The harness's own buffers stay small; the reader's caps are tested elsewhere. */
        if ((uint64_t)count * (uint64_t)info->vocab <= (1u << 20)) {
            check_block(c, 0, (int)count);
            check_block(c, info->rows - count, (int)count);
        }
        if ((uint64_t)info->rows * (uint64_t)info->vocab <= (1u << 20) && !info->sparse)
            check_raw(c);
        sq_error e2 = {0};
        if (sq_corpus_read(c, info->rows, 1, NULL, NULL, NULL, &e2) == SQ_OK)
            abort();
        sq_corpus_close(c);
    } else if (!err.msg[0]) {
        abort();
    }
    return 0;
}
