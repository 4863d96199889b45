/* HDF5 corpora (docs/design.md §7.2): writer -> reader round trips (dense float32, dense float16,
 * sparse top-K), streaming across chunk boundaries, float16 conversions against HDF5's own
 * converter and a brute-force nearest-value oracle, atomic output, and one test per bad input
 * of issue 3, with the bad files built by the HDF5 C API right here. */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <hdf5.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "libsequoia/format/corpus.h"
#include "libsequoia/base/half.h"
#include "libsequoia/base/io.h"
#include "tests/testutil.h"

/* ---- deterministic data ------------------------------------------------------------------ */

static uint64_t rng_state;

static double urand(void)
{
    /* xorshift64*; deterministic per test */
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return (double)((rng_state * 2685821657736338717ull) >> 11) / 9007199254740992.0;
}

/* (n, V) logits of model k, in [-8, 8) */
static float *make_logits(int n, int V, uint64_t seed)
{
    rng_state = seed * 0x9E3779B97F4A7C15ull + 1;
    float *v = malloc((size_t)n * (size_t)V * sizeof *v);
    cr_assert(v);
    for (size_t i = 0; i < (size_t)n * (size_t)V; i++)
        v[i] = (float)(16.0 * urand() - 8.0);
    return v;
}

static int32_t *make_tokens(int n, int V)
{
    int32_t *t = malloc((size_t)n * sizeof *t);
    cr_assert(t);
    for (int i = 0; i < n; i++)
        t[i] = (int32_t)((i * 7 + 3) % V);
    return t;
}

/* Writes a corpus of sequences of the given lengths with our writer, appending in pieces of
 * `piece` rows. */
static void write_corpus(const char *path, sq_corpus_writer_params p, const int *lens, int nseq,
                         int piece, const float *tl, const float *dl, const int32_t *tok)
{
    sq_error err = {0};
    sq_corpus_writer *w;
    cr_assert_eq(sq_corpus_writer_open(path, &p, &w, &err), SQ_OK, "%s", err.msg);
    int row = 0;
    for (int s = 0; s < nseq; s++) {
        for (int done = 0; done < lens[s];) {
            int n = lens[s] - done < piece ? lens[s] - done : piece;
            size_t o = (size_t)row * (size_t)p.vocab;
            cr_assert_eq(sq_corpus_writer_append(w, tl + o, dl + o, tok ? tok + row : NULL, n, &err),
                         SQ_OK, "%s", err.msg);
            done += n;
            row += n;
        }
        cr_assert_eq(sq_corpus_writer_end_sequence(w, &err), SQ_OK, "%s", err.msg);
    }
    cr_assert_eq(sq_corpus_writer_commit(w, &err), SQ_OK, "%s", err.msg);
}

static sq_corpus *open_ok(const char *path)
{
    sq_error err = {0};
    sq_corpus *c = NULL;
    int rc = sq_corpus_open(path, &c, &err);
    cr_assert_eq(rc, SQ_OK, "open: %s", err.msg);
    return c;
}

/* Reads the whole corpus in blocks of `block` rows. */
static void read_all(sq_corpus *c, int block, float *tl, float *dl, int32_t *tok)
{
    const sq_corpus_info *in = sq_corpus_get_info(c);
    sq_error err = {0};
    int V = in->vocab;
    for (int64_t r = 0; r < in->rows; r += block) {
        int n = (int)(in->rows - r < block ? in->rows - r : block);
        cr_assert_eq(sq_corpus_read(c, r, n, tl + r * V, dl + r * V, tok ? tok + r : NULL, &err),
                     SQ_OK, "read at %lld: %s", (long long)r, err.msg);
    }
}

/* ---- round trips ------------------------------------------------------------------------- */

Test(corpus, dense_float32_round_trip_is_exact)
{
    char *dir = tu_tmpdir(), *path = tu_path(dir, "c.h5");
    int V = 37, lens[] = {40, 1, 59}, N = 100;
    float *tl = make_logits(N, V, 1), *dl = make_logits(N, V, 2);
    int32_t *tok = make_tokens(N, V);
    sq_corpus_writer_params p = sq_corpus_writer_default_params();
    p.vocab = V;
    p.chunk_rows = 8;
    p.draft = "tiny-draft";
    p.target = "big-target";
    write_corpus(path, p, lens, 3, 13, tl, dl, tok);

    sq_corpus *c = open_ok(path);
    const sq_corpus_info *in = sq_corpus_get_info(c);
    cr_assert_eq(in->rows, N);
    cr_assert_eq(in->vocab, V);
    cr_assert_eq(in->sparse, 0);
    cr_assert_eq(in->has_tokens, 1);
    cr_assert_eq(in->sequences, 3);
    cr_assert_str_eq(in->draft, "tiny-draft");
    cr_assert_str_eq(in->target, "big-target");
    const int64_t *off = sq_corpus_seq_offsets(c);
    cr_assert_eq(off[0], 0);
    cr_assert_eq(off[1], 40);
    cr_assert_eq(off[2], 41);
    cr_assert_eq(off[3], 100);
    int B = sq_corpus_block_rows(c);
    cr_assert(B >= 1 && B <= N && (B % 8 == 0 || B == N), "block %d", B);

    float *rt = malloc(sizeof(float) * N * V), *rd = malloc(sizeof(float) * N * V);
    int32_t *rk = malloc(sizeof(int32_t) * N);
    read_all(c, 7, rt, rd, rk);
    cr_assert_eq(memcmp(rt, tl, sizeof(float) * N * V), 0);
    cr_assert_eq(memcmp(rd, dl, sizeof(float) * N * V), 0);
    cr_assert_eq(memcmp(rk, tok, sizeof(int32_t) * N), 0);
    sq_corpus_close(c);
    tu_rmtree(dir);
    free(tl), free(dl), free(tok), free(rt), free(rd), free(rk), free(path), free(dir);
}

Test(corpus, dense_float16_round_trip_is_within_half_precision)
{
    char *dir = tu_tmpdir(), *path = tu_path(dir, "c.h5");
    int V = 50, lens[] = {30, 33}, N = 63;
    float *tl = make_logits(N, V, 3), *dl = make_logits(N, V, 4);
    tl[5] = 65504.0f; /* the largest half */
    dl[6] = -3.0e-6f; /* a subnormal half */
    sq_corpus_writer_params p = sq_corpus_writer_default_params();
    p.vocab = V;
    p.half = 1;
    p.chunk_rows = 5;
    write_corpus(path, p, lens, 2, 64, tl, dl, NULL);

    sq_corpus *c = open_ok(path);
    cr_assert_eq(sq_corpus_get_info(c)->has_tokens, 0);
    float *rt = malloc(sizeof(float) * N * V), *rd = malloc(sizeof(float) * N * V);
    int32_t tok[4];
    sq_error err = {0};
    cr_assert_eq(sq_corpus_read(c, 0, 4, rt, rd, tok, &err), SQ_OK, "%s", err.msg);
    cr_assert_eq(tok[0], -1, "tokens are -1 without /tokens");
    read_all(c, 11, rt, rd, NULL);
    for (int i = 0; i < N * V; i++) {
        const float *src[2] = {tl, dl}, *got[2] = {rt, rd};
        for (int k = 0; k < 2; k++) {
            float x = src[k][i], y = got[k][i];
            /* round to nearest: error at most half an ulp, 2^-11 relative, 2^-25 absolute */
            cr_assert(fabsf(x - y) <= fabsf(x) * 0x1p-11f + 0x1p-25f, "%d: %.9g read as %.9g", i,
                      (double)x, (double)y);
            cr_assert_eq(y, sq_f16_to_f32(sq_f32_to_f16(x)));
        }
    }
    cr_assert_eq(rt[5], 65504.0f);
    sq_corpus_close(c);
    tu_rmtree(dir);
    free(tl), free(dl), free(rt), free(rd), free(path), free(dir);
}

static int cmp_desc(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x < y) - (x > y);
}

Test(corpus, sparse_round_trip_keeps_exactly_the_top_k)
{
    char *dir = tu_tmpdir(), *path = tu_path(dir, "c.h5");
    int V = 40, K = 6, lens[] = {17, 20}, N = 37;
    float *tl = make_logits(N, V, 5), *dl = make_logits(N, V, 6);
    sq_corpus_writer_params p = sq_corpus_writer_default_params();
    p.vocab = V;
    p.topk = K;
    p.chunk_rows = 4;
    write_corpus(path, p, lens, 2, 3, tl, dl, NULL);

    sq_corpus *c = open_ok(path);
    const sq_corpus_info *in = sq_corpus_get_info(c);
    cr_assert_eq(in->sparse, 1);
    cr_assert_eq(in->topk, K);
    float *rt = malloc(sizeof(float) * N * V), *rd = malloc(sizeof(float) * N * V);
    read_all(c, 5, rt, rd, NULL);
    const float *src[2] = {tl, dl}, *got[2] = {rt, rd};
    for (int k = 0; k < 2; k++) {
        for (int r = 0; r < N; r++) {
            /* brute force: the K-th largest value is the threshold */
            float sorted[40];
            memcpy(sorted, src[k] + r * V, sizeof(float) * V);
            qsort(sorted, (size_t)V, sizeof(float), cmp_desc);
            int kept = 0;
            for (int j = 0; j < V; j++) {
                float x = src[k][r * V + j], y = got[k][r * V + j];
                if (x >= sorted[K - 1]) {
                    cr_assert_eq(y, x, "row %d id %d", r, j);
                    kept++;
                } else {
                    cr_assert(isinf(y) && y < 0, "row %d id %d: %g outside the top-K", r, j,
                              (double)y);
                }
            }
            cr_assert_eq(kept, K);
        }
    }
    sq_corpus_close(c);
    tu_rmtree(dir);
    free(tl), free(dl), free(rt), free(rd), free(path), free(dir);
}

/* Every block size reads the same rows, whatever the chunk boundaries. */
ParameterizedTestParameters(corpus, streaming_block_sizes)
{
    static int blocks[] = {1, 2, 3, 8, 9, 16, 31, 64, 199, 200};
    return cr_make_param_array(int, blocks, sizeof blocks / sizeof blocks[0]);
}

ParameterizedTest(int *block, corpus, streaming_block_sizes)
{
    char *dir = tu_tmpdir(), *path = tu_path(dir, "c.h5");
    int V = 24, lens[] = {100, 100}, N = 200;
    float *tl = make_logits(N, V, 7), *dl = make_logits(N, V, 8);
    int32_t *tok = make_tokens(N, V);
    sq_corpus_writer_params p = sq_corpus_writer_default_params();
    p.vocab = V;
    p.chunk_rows = 8;
    p.compression = 6;
    write_corpus(path, p, lens, 2, 200, tl, dl, tok);
    sq_corpus *c = open_ok(path);
    float *rt = malloc(sizeof(float) * N * V), *rd = malloc(sizeof(float) * N * V);
    int32_t *rk = malloc(sizeof(int32_t) * N);
    read_all(c, *block, rt, rd, rk);
    cr_assert_eq(memcmp(rt, tl, sizeof(float) * N * V), 0);
    cr_assert_eq(memcmp(rd, dl, sizeof(float) * N * V), 0);
    cr_assert_eq(memcmp(rk, tok, sizeof(int32_t) * N), 0);
    /* a block in the middle, not aligned to anything */
    sq_error err = {0};
    cr_assert_eq(sq_corpus_read(c, 13, 50, rt, NULL, NULL, &err), SQ_OK, "%s", err.msg);
    cr_assert_eq(memcmp(rt, tl + 13 * V, sizeof(float) * 50 * V), 0);
    /* past the end is refused */
    cr_assert_eq(sq_corpus_read(c, 190, 11, rt, rd, NULL, &err), SQ_EUSAGE);
    sq_corpus_close(c);
    tu_rmtree(dir);
    free(tl), free(dl), free(tok), free(rt), free(rd), free(rk), free(path), free(dir);
}

Test(corpus, default_chunks_and_block_rows_stay_bounded)
{
    char *dir = tu_tmpdir(), *path = tu_path(dir, "c.h5");
    int V = 32000, lens[] = {70}, N = 70;
    float *tl = make_logits(N, V, 9), *dl = make_logits(N, V, 10);
    sq_corpus_writer_params p = sq_corpus_writer_default_params();
    p.vocab = V;
    write_corpus(path, p, lens, 1, 70, tl, dl, NULL);
    sq_corpus *c = open_ok(path);
    int B = sq_corpus_block_rows(c);
    /* default chunk: 1 MiB / (32000 * 4) = 8 rows; block: 8 MiB / (2 * 32000 * 4) = 32 rows */
    cr_assert_eq(B, 32);
    float *rt = malloc(sizeof(float) * N * V), *rd = malloc(sizeof(float) * N * V);
    read_all(c, B, rt, rd, NULL);
    cr_assert_eq(memcmp(rt, tl, sizeof(float) * N * V), 0);
    cr_assert_eq(memcmp(rd, dl, sizeof(float) * N * V), 0);
    sq_corpus_close(c);
    tu_rmtree(dir);
    free(tl), free(dl), free(rt), free(rd), free(path), free(dir);
}

/* ---- float16 ----------------------------------------------------------------------------- */

static hid_t h5_half_type(H5T_order_t order)
{
    hid_t t = H5Tcopy(H5T_IEEE_F32LE);
    cr_assert(H5Tset_fields(t, 15, 10, 5, 0, 10) >= 0);
    cr_assert(H5Tset_precision(t, 16) >= 0);
    cr_assert(H5Tset_size(t, 2) >= 0);
    cr_assert(H5Tset_ebias(t, 15) >= 0);
    cr_assert(H5Tset_order(t, order) >= 0);
    return t;
}

Test(corpus, half_to_float_agrees_with_hdf5_on_all_65536_values)
{
    uint16_t *h = malloc(65536 * sizeof *h);
    float *f = malloc(65536 * sizeof *f);
    for (int i = 0; i < 65536; i++)
        h[i] = (uint16_t)i;
    memcpy(f, h, 65536 * sizeof *h);
    hid_t ht = h5_half_type(H5Tget_order(H5T_NATIVE_FLOAT));
    cr_assert(H5Tconvert(ht, H5T_NATIVE_FLOAT, 65536, f, NULL, H5P_DEFAULT) >= 0);
    H5Tclose(ht);
    for (int i = 0; i < 65536; i++) {
        float mine = sq_f16_to_f32((uint16_t)i);
        if (isnan(f[i]))
            cr_assert(isnan(mine), "0x%04x", i);
        else
            cr_assert_eq(mine, f[i], "0x%04x: %.9g vs HDF5 %.9g", i, (double)mine, (double)f[i]);
    }
    free(h);
    free(f);
}

/* Narrowing (libsequoia/base/half.h) is tested in tests/test_half.c. */

/* ---- files built with the HDF5 API --------------------------------------------------------- */

typedef struct spec {
    const char *format;           /* NULL: no attribute                                   */
    int         fixed_strings;    /* write the string attributes as fixed-length          */
    long long   version;
    long long   vocab_attr;
    int         no_vocab_attr;
    int         no_names;
    int         rows[2], cols[2]; /* per model; rows < 0: no dataset                       */
    int         sparse;           /* K = cols; ids from sparse_ids                          */
    int         sparse_no_logits; /* topk_ids only                                          */
    int         id_bad_row, id_bad_value, id_dup_row; /* -1: none                            */
    hid_t       ftype;            /* logits file type (0: float32)                          */
    int         int_logits;       /* integer logits (a dtype error)                         */
    int         rank1_logits;
    int         bad_model, bad_row, bad_col; /* a non-finite value (bad_row < 0: none)       */
    float       bad_value;
    int         bad_row2;         /* a second bad row, later (or -1)                        */
    int         tokens;           /* 0 none, else length of /tokens                         */
    int         token_bad_row;    /* -1: none                                               */
    const long long *offsets;     /* NULL: none                                             */
    int         n_offsets;
} spec;

static spec spec_default(void)
{
    spec s;
    memset(&s, 0, sizeof s);
    s.format = SQ_CORPUS_FORMAT;
    s.version = 1;
    s.vocab_attr = 10;
    s.rows[0] = s.rows[1] = 12;
    s.cols[0] = s.cols[1] = 10;
    s.id_bad_row = s.id_dup_row = -1;
    s.bad_row = -1;
    s.bad_row2 = -1;
    s.token_bad_row = -1;
    return s;
}

static void attr_str(hid_t f, const char *name, const char *v, int fixed)
{
    hid_t t = H5Tcopy(H5T_C_S1);
    if (fixed)
        H5Tset_size(t, strlen(v) + 1);
    else
        H5Tset_size(t, H5T_VARIABLE);
    hid_t sp = H5Screate(H5S_SCALAR);
    hid_t a = H5Acreate2(f, name, t, sp, H5P_DEFAULT, H5P_DEFAULT);
    cr_assert(a >= 0);
    cr_assert(H5Awrite(a, t, fixed ? (const void *)v : (const void *)&v) >= 0);
    H5Aclose(a);
    H5Sclose(sp);
    H5Tclose(t);
}

static void attr_ll(hid_t f, const char *name, long long v)
{
    hid_t sp = H5Screate(H5S_SCALAR);
    hid_t a = H5Acreate2(f, name, H5T_STD_I64LE, sp, H5P_DEFAULT, H5P_DEFAULT);
    cr_assert(H5Awrite(a, H5T_NATIVE_LLONG, &v) >= 0);
    H5Aclose(a);
    H5Sclose(sp);
}

static void dataset(hid_t f, const char *name, hid_t ftype, hid_t mtype, int rank, hsize_t d0,
                    hsize_t d1, const void *data)
{
    hsize_t dims[2] = {d0, d1};
    hid_t sp = H5Screate_simple(rank, dims, NULL);
    hid_t lcpl = H5Pcreate(H5P_LINK_CREATE);
    H5Pset_create_intermediate_group(lcpl, 1);
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    if (d0 > 0) {
        hsize_t ch[2] = {d0 < 4 ? d0 : 4, d1 ? d1 : 1};
        H5Pset_chunk(dcpl, rank, ch);
        H5Pset_deflate(dcpl, 1);
    }
    hid_t ds = H5Dcreate2(f, name, ftype, sp, lcpl, dcpl, H5P_DEFAULT);
    cr_assert(ds >= 0, "create %s", name);
    if (d0 > 0)
        cr_assert(H5Dwrite(ds, mtype, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) >= 0);
    H5Dclose(ds);
    H5Pclose(dcpl);
    H5Pclose(lcpl);
    H5Sclose(sp);
}

static void build(const char *path, const spec *s)
{
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    cr_assert(f >= 0);
    if (s->format)
        attr_str(f, "format", s->format, s->fixed_strings);
    attr_ll(f, "version", s->version);
    if (!s->no_vocab_attr)
        attr_ll(f, "vocab_size", s->vocab_attr);
    if (!s->no_names) {
        attr_str(f, "draft", "d-model", s->fixed_strings);
        attr_str(f, "target", "t-model", s->fixed_strings);
    }
    static const char *names[2] = {"target", "draft"};
    for (int k = 0; k < 2; k++) {
        if (s->rows[k] < 0)
            continue;
        int n = s->rows[k], w = s->cols[k];
        size_t cnt = (size_t)n * (size_t)w + 1;
        float *v = malloc(cnt * sizeof *v);
        int32_t *ids = malloc(cnt * sizeof *ids);
        for (int r = 0; r < n; r++)
            for (int j = 0; j < w; j++) {
                v[r * w + j] = (float)sin(r * 1.7 + j * 0.3 + k) * 4.0f;
                ids[r * w + j] = (j * 3 + r) % w; /* a permutation of 0..w-1 per row */
            }
        if (k == s->bad_model && s->bad_row >= 0) {
            v[s->bad_row * w + s->bad_col] = s->bad_value;
            if (s->bad_row2 >= 0)
                v[s->bad_row2 * w] = s->bad_value;
        }
        if (s->id_bad_row >= 0)
            ids[s->id_bad_row * w + 1] = s->id_bad_value;
        if (s->id_dup_row >= 0)
            ids[s->id_dup_row * w + 1] = ids[s->id_dup_row * w];
        char name[64];
        if (s->sparse) {
            snprintf(name, sizeof name, "/%s/topk_ids", names[k]);
            dataset(f, name, H5T_STD_I32LE, H5T_NATIVE_INT32, 2, (hsize_t)n, (hsize_t)w, ids);
            if (!s->sparse_no_logits) {
                snprintf(name, sizeof name, "/%s/topk_logits", names[k]);
                dataset(f, name, H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, 2, (hsize_t)n, (hsize_t)w, v);
            }
        } else {
            snprintf(name, sizeof name, "/%s/logits", names[k]);
            if (s->int_logits)
                dataset(f, name, H5T_STD_I32LE, H5T_NATIVE_INT32, 2, (hsize_t)n, (hsize_t)w, ids);
            else if (s->rank1_logits)
                dataset(f, name, H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, 1, (hsize_t)n * (hsize_t)w, 0, v);
            else
                dataset(f, name, s->ftype ? s->ftype : H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, 2,
                        (hsize_t)n, (hsize_t)w, v);
        }
        free(v);
        free(ids);
    }
    if (s->tokens) {
        int32_t *t = malloc((size_t)s->tokens * sizeof *t);
        for (int i = 0; i < s->tokens; i++)
            t[i] = i % (int)s->vocab_attr;
        if (s->token_bad_row >= 0)
            t[s->token_bad_row] = (int32_t)s->vocab_attr;
        dataset(f, "/tokens", H5T_STD_I32LE, H5T_NATIVE_INT32, 1, (hsize_t)s->tokens, 0, t);
        free(t);
    }
    if (s->offsets)
        dataset(f, "/seq_offsets", H5T_STD_I64LE, H5T_NATIVE_LLONG, 1, (hsize_t)s->n_offsets, 0,
                s->offsets);
    cr_assert(H5Fclose(f) >= 0);
}

/* Opens (and, when it opens, reads everything): returns the status, fills err. */
static int load(const char *path, sq_error *err)
{
    sq_corpus *c = NULL;
    int rc = sq_corpus_open(path, &c, err);
    if (rc)
        return rc;
    const sq_corpus_info *in = sq_corpus_get_info(c);
    int B = 5;
    float *t = malloc(sizeof(float) * (size_t)B * (size_t)in->vocab);
    float *d = malloc(sizeof(float) * (size_t)B * (size_t)in->vocab);
    int32_t tok[5];
    for (int64_t r = 0; r < in->rows && rc == SQ_OK; r += B) {
        int n = (int)(in->rows - r < B ? in->rows - r : B);
        rc = sq_corpus_read(c, r, n, t, d, tok, err);
    }
    free(t);
    free(d);
    sq_corpus_close(c);
    return rc;
}

/* Builds the file, loads it, and checks the status and that the message names the file and
 * every given fragment. */
static void expect_error(const spec *s, int status, const char *frag1, const char *frag2)
{
    char *dir = tu_tmpdir(), *path = tu_path(dir, "bad.h5");
    build(path, s);
    sq_error err = {0};
    int rc = load(path, &err);
    cr_assert_eq(rc, status, "status %d (%s), want %d", rc, err.msg, status);
    cr_assert(strstr(err.msg, path), "message does not name the file: %s", err.msg);
    if (frag1)
        cr_assert(strstr(err.msg, frag1), "message lacks '%s': %s", frag1, err.msg);
    if (frag2)
        cr_assert(strstr(err.msg, frag2), "message lacks '%s': %s", frag2, err.msg);
    tu_rmtree(dir);
    free(path);
    free(dir);
}

Test(corpus, hand_built_file_with_fixed_length_strings_loads)
{
    spec s = spec_default();
    s.fixed_strings = 1;
    s.tokens = 12;
    static const long long off[] = {0, 5, 12};
    s.offsets = off;
    s.n_offsets = 3;
    char *dir = tu_tmpdir(), *path = tu_path(dir, "ok.h5");
    build(path, &s);
    sq_corpus *c = open_ok(path);
    const sq_corpus_info *in = sq_corpus_get_info(c);
    cr_assert_str_eq(in->draft, "d-model");
    cr_assert_str_eq(in->target, "t-model");
    cr_assert_eq(in->sequences, 2);
    cr_assert_eq(in->rows, 12);
    float t[10], d[10];
    int32_t tok;
    sq_error err = {0};
    cr_assert_eq(sq_corpus_read(c, 3, 1, t, d, &tok, &err), SQ_OK, "%s", err.msg);
    cr_assert_float_eq(t[2], (float)sin(3 * 1.7 + 2 * 0.3) * 4.0f, 1e-6);
    cr_assert_float_eq(d[2], (float)sin(3 * 1.7 + 2 * 0.3 + 1) * 4.0f, 1e-6);
    cr_assert_eq(tok, 3);
    sq_corpus_close(c);
    tu_rmtree(dir);
    free(path);
    free(dir);
}

/* float64 and big-endian float16 logits go through HDF5's conversion and read the same. */
Test(corpus, other_float_layouts_are_converted)
{
    hid_t types[3] = {H5T_IEEE_F64LE, h5_half_type(H5T_ORDER_BE), h5_half_type(H5T_ORDER_LE)};
    for (int i = 0; i < 3; i++) {
        spec s = spec_default();
        s.ftype = types[i];
        char *dir = tu_tmpdir(), *path = tu_path(dir, "ok.h5");
        build(path, &s);
        sq_corpus *c = open_ok(path);
        float t[20], d[20];
        sq_error err = {0};
        cr_assert_eq(sq_corpus_read(c, 4, 2, t, d, NULL, &err), SQ_OK, "%s", err.msg);
        for (int j = 0; j < 10; j++) {
            float want = (float)sin(5 * 1.7 + j * 0.3) * 4.0f;
            float tol = i == 0 ? 0.0f : 4.0f * 0x1p-11f;
            cr_assert(fabsf(t[10 + j] - want) <= tol, "type %d col %d: %g vs %g", i, j,
                      (double)t[10 + j], (double)want);
        }
        sq_corpus_close(c);
        tu_rmtree(dir);
        free(path);
        free(dir);
    }
    H5Tclose(types[1]);
    H5Tclose(types[2]);
}

/* The fast float16 path gives what HDF5's own conversion gives. */
Test(corpus, float16_fast_path_matches_hdf5_conversion)
{
    char *dir = tu_tmpdir(), *path = tu_path(dir, "c.h5");
    int V = 33, lens[] = {21}, N = 21;
    float *tl = make_logits(N, V, 11), *dl = make_logits(N, V, 12);
    sq_corpus_writer_params p = sq_corpus_writer_default_params();
    p.vocab = V;
    p.half = 1;
    write_corpus(path, p, lens, 1, 21, tl, dl, NULL);
    float *h5 = malloc(sizeof(float) * N * V), *mine = malloc(sizeof(float) * N * V);
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    hid_t ds = H5Dopen2(f, "/draft/logits", H5P_DEFAULT);
    hid_t ft = H5Dget_type(ds);
    cr_assert_eq(H5Tget_size(ft), 2, "float16 on disk");
    H5Tclose(ft);
    cr_assert(H5Dread(ds, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, h5) >= 0);
    H5Dclose(ds);
    H5Fclose(f);
    sq_corpus *c = open_ok(path);
    sq_error err = {0};
    cr_assert_eq(sq_corpus_read(c, 0, N, NULL, mine, NULL, &err), SQ_OK, "%s", err.msg);
    cr_assert_eq(memcmp(h5, mine, sizeof(float) * N * V), 0);
    sq_corpus_close(c);
    tu_rmtree(dir);
    free(tl), free(dl), free(h5), free(mine), free(path), free(dir);
}

/* A dataset behind an HDF5 external link is stored in another file: the raw reader, which reads
 * chunks at their offsets in the corpus file itself, read the corpus's own bytes at the other
 * file's offsets instead (exit 0 with another curve: a second hostile-input audit). It is now
 * read through HDF5, as h5py reads it. linked.h5 is a byte copy of c.h5 whose /target/logits is
 * replaced by a link to other.h5's, written with the same layout, so the old chunks still sit at
 * the linked dataset's offsets. */
Test(corpus, a_dataset_behind_an_external_link_is_read_from_its_own_file)
{
    char *dir = tu_tmpdir(), *c_path = tu_path(dir, "c.h5"), *o_path = tu_path(dir, "other.h5");
    char *l_path = tu_path(dir, "linked.h5");
    int V = 40, lens[] = {30, 18}, N = 48;
    for (int half = 0; half <= 1; half++) {
        float *t1 = make_logits(N, V, 21), *t2 = make_logits(N, V, 22), *dl = make_logits(N, V, 23);
        sq_corpus_writer_params p = sq_corpus_writer_default_params();
        p.vocab = V;
        p.half = half;
        write_corpus(c_path, p, lens, 2, 16, t1, dl, NULL);
        write_corpus(o_path, p, lens, 2, 16, t2, dl, NULL);
        size_t len;
        char *bytes = tu_read(c_path, &len);
        FILE *fo = fopen(l_path, "wb");
        cr_assert(fo && fwrite(bytes, 1, len, fo) == len && fclose(fo) == 0);
        free(bytes);
        hid_t f = H5Fopen(l_path, H5F_ACC_RDWR, H5P_DEFAULT);
        cr_assert(f >= 0);
        cr_assert(H5Ldelete(f, "/target/logits", H5P_DEFAULT) >= 0);
        cr_assert(H5Lcreate_external(o_path, "/target/logits", f, "/target/logits", H5P_DEFAULT,
                                     H5P_DEFAULT) >= 0);
        cr_assert(H5Fclose(f) >= 0);
        /* what HDF5 reads behind the link: other.h5's target */
        float *want = malloc(sizeof(float) * N * V), *got = malloc(sizeof(float) * N * V);
        f = H5Fopen(o_path, H5F_ACC_RDONLY, H5P_DEFAULT);
        hid_t ds = H5Dopen2(f, "/target/logits", H5P_DEFAULT);
        cr_assert(H5Dread(ds, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, want) >= 0);
        H5Dclose(ds);
        H5Fclose(f);
        sq_corpus *c = open_ok(l_path);
        sq_error err = {0};
        cr_assert_eq(sq_corpus_read(c, 0, N, got, NULL, NULL, &err), SQ_OK, "%s", err.msg);
        cr_assert_eq(memcmp(got, want, sizeof(float) * N * V), 0,
                     "half %d: the linked target was not read from its own file", half);
        sq_corpus_close(c);
        free(t1), free(t2), free(dl), free(want), free(got);
    }
    tu_rmtree(dir);
    free(c_path), free(o_path), free(l_path), free(dir);
}

/* ---- bad input ----------------------------------------------------------------------------- */

Test(corpus, missing_draft_logits_names_the_dataset)
{
    spec s = spec_default();
    s.rows[1] = -1;
    expect_error(&s, SQ_EDATA, "/draft/logits", "missing");
}

Test(corpus, missing_target_logits_names_the_dataset)
{
    spec s = spec_default();
    s.rows[0] = -1;
    expect_error(&s, SQ_EDATA, "/target/logits", "missing");
}

Test(corpus, sparse_ids_without_logits_names_the_missing_dataset)
{
    spec s = spec_default();
    s.sparse = 1;
    s.sparse_no_logits = 1;
    expect_error(&s, SQ_EDATA, "/target/topk_logits", "missing");
}

Test(corpus, mismatched_rows_between_draft_and_target)
{
    spec s = spec_default();
    s.rows[1] = 11;
    expect_error(&s, SQ_EDATA, "/draft/logits", "/target/logits");
}

Test(corpus, mismatched_vocab_between_draft_and_target)
{
    spec s = spec_default();
    s.cols[1] = 11;
    expect_error(&s, SQ_EDATA, "/draft/logits", "/target/logits");
}

Test(corpus, vocab_mismatch_with_the_attribute)
{
    spec s = spec_default();
    s.vocab_attr = 12;
    expect_error(&s, SQ_EDATA, "/target/logits", "vocab_size is 12");
}

Test(corpus, nan_logit_reports_the_first_bad_row)
{
    spec s = spec_default();
    s.bad_model = 0;
    s.bad_row = 7;
    s.bad_col = 3;
    s.bad_row2 = 9;
    s.bad_value = NAN;
    expect_error(&s, SQ_EDATA, "/target/logits: row 7:", "NaN");
}

Test(corpus, infinite_logit_reports_the_first_bad_row)
{
    spec s = spec_default();
    s.bad_model = 1;
    s.bad_row = 2;
    s.bad_col = 0;
    s.bad_value = INFINITY;
    expect_error(&s, SQ_EDATA, "/draft/logits: row 2:", "inf");
}

Test(corpus, infinite_sparse_logit_reports_the_first_bad_row)
{
    spec s = spec_default();
    s.sparse = 1;
    s.cols[0] = s.cols[1] = 4;
    s.bad_model = 1;
    s.bad_row = 10;
    s.bad_col = 1;
    s.bad_value = -INFINITY;
    expect_error(&s, SQ_EDATA, "/draft/topk_logits: row 10:", "-inf");
}

Test(corpus, empty_corpus)
{
    spec s = spec_default();
    s.rows[0] = s.rows[1] = 0;
    expect_error(&s, SQ_EDATA, "/target/logits", "empty");
}

Test(corpus, unknown_major_version)
{
    spec s = spec_default();
    s.version = 2;
    expect_error(&s, SQ_EDATA, "version", "version 2 is newer");
}

Test(corpus, wrong_format_attribute)
{
    spec s = spec_default();
    s.format = "something-else";
    expect_error(&s, SQ_EDATA, "'format'", "sequoia-corpus");
}

Test(corpus, missing_format_attribute)
{
    spec s = spec_default();
    s.format = NULL;
    expect_error(&s, SQ_EDATA, "'format'", "missing");
}

Test(corpus, missing_vocab_size_attribute)
{
    spec s = spec_default();
    s.no_vocab_attr = 1;
    expect_error(&s, SQ_EDATA, "'vocab_size'", "missing");
}

Test(corpus, missing_model_names)
{
    spec s = spec_default();
    s.no_names = 1;
    expect_error(&s, SQ_EDATA, "'draft'", "missing");
}

Test(corpus, integer_logits_are_a_dtype_error)
{
    spec s = spec_default();
    s.int_logits = 1;
    expect_error(&s, SQ_EDATA, "/target/logits", "floating-point");
}

Test(corpus, one_dimensional_logits_are_a_shape_error)
{
    spec s = spec_default();
    s.rank1_logits = 1;
    expect_error(&s, SQ_EDATA, "/target/logits", "2 dimensions");
}

Test(corpus, sparse_id_outside_the_vocabulary)
{
    spec s = spec_default();
    s.sparse = 1;
    s.cols[0] = s.cols[1] = 4;
    s.id_bad_row = 6;
    s.id_bad_value = 10;
    expect_error(&s, SQ_EDATA, "/target/topk_ids: row 6:", "outside the vocabulary");
}

Test(corpus, sparse_duplicate_id)
{
    spec s = spec_default();
    s.sparse = 1;
    s.cols[0] = s.cols[1] = 4;
    s.id_dup_row = 3;
    expect_error(&s, SQ_EDATA, "/target/topk_ids: row 3:", "twice");
}

Test(corpus, sparse_k_larger_than_vocab)
{
    spec s = spec_default();
    s.sparse = 1;
    s.cols[0] = s.cols[1] = 11;
    expect_error(&s, SQ_EDATA, "/target/topk_ids", "larger than vocab_size");
}

Test(corpus, seq_offsets_not_increasing)
{
    spec s = spec_default();
    static const long long off[] = {0, 6, 6, 12};
    s.offsets = off;
    s.n_offsets = 4;
    expect_error(&s, SQ_EDATA, "/seq_offsets[2]", "increase");
}

Test(corpus, seq_offsets_not_ending_at_n)
{
    spec s = spec_default();
    static const long long off[] = {0, 6, 11};
    s.offsets = off;
    s.n_offsets = 3;
    expect_error(&s, SQ_EDATA, "/seq_offsets[2]", "N = 12");
}

Test(corpus, seq_offsets_not_starting_at_zero)
{
    spec s = spec_default();
    static const long long off[] = {1, 12};
    s.offsets = off;
    s.n_offsets = 2;
    expect_error(&s, SQ_EDATA, "/seq_offsets[0]", "must be 0");
}

Test(corpus, tokens_of_the_wrong_length)
{
    spec s = spec_default();
    s.tokens = 11;
    expect_error(&s, SQ_EDATA, "/tokens", "11 entries");
}

Test(corpus, token_outside_the_vocabulary)
{
    spec s = spec_default();
    s.tokens = 12;
    s.token_bad_row = 8;
    expect_error(&s, SQ_EDATA, "/tokens: row 8:", "outside the vocabulary");
}

Test(corpus, truncated_file)
{
    char *dir = tu_tmpdir(), *path = tu_path(dir, "t.h5");
    int V = 64, lens[] = {40}, N = 40;
    float *tl = make_logits(N, V, 13), *dl = make_logits(N, V, 14);
    sq_corpus_writer_params p = sq_corpus_writer_default_params();
    p.vocab = V;
    p.compression = 0;
    write_corpus(path, p, lens, 1, 40, tl, dl, NULL);
    size_t len;
    char *bytes = tu_read(path, &len);
    cr_assert(len > 4096);
    FILE *fp = fopen(path, "wb");
    cr_assert(fp && fwrite(bytes, 1, len / 2, fp) == len / 2 && fclose(fp) == 0);
    sq_error err = {0};
    int rc = load(path, &err);
    cr_assert_eq(rc, SQ_EDATA, "status %d: %s", rc, err.msg);
    cr_assert(strstr(err.msg, path) && strstr(err.msg, "truncated"), "%s", err.msg);
    tu_rmtree(dir);
    free(bytes), free(tl), free(dl), free(path), free(dir);
}

Test(corpus, non_hdf5_file)
{
    char *dir = tu_tmpdir(), *path = tu_path(dir, "c.h5");
    tu_write(path, "{\"format\": \"sequoia-corpus\"}\n");
    sq_error err = {0};
    cr_assert_eq(load(path, &err), SQ_EDATA, "%s", err.msg);
    cr_assert(strstr(err.msg, path) && strstr(err.msg, "not an HDF5 file"), "%s", err.msg);
    tu_rmtree(dir);
    free(path), free(dir);
}

Test(corpus, missing_file)
{
    sq_error err = {0};
    cr_assert_eq(load("/nonexistent/dir/c.h5", &err), SQ_ENOINPUT, "%s", err.msg);
    cr_assert(strstr(err.msg, "/nonexistent/dir/c.h5"), "%s", err.msg);
}

/* ---- the writer: atomic output and refusals ----------------------------------------------- */

Test(corpus, a_directory_is_not_a_corpus)
{
    char *dir = tu_tmpdir();
    sq_error err = {0};
    cr_assert_eq(load(dir, &err), SQ_EDATA, "%s", err.msg);
    cr_assert(strstr(err.msg, dir) && strstr(err.msg, "directory"), "%s", err.msg);
    tu_rmtree(dir);
    free(dir);
}

Test(corpus, sigterm_during_a_write_removes_the_temporary_file)
{
    char *dir = tu_tmpdir(), *path = tu_path(dir, "c.h5");
    pid_t pid = fork();
    cr_assert(pid >= 0);
    if (pid == 0) {
        sq_out_install_signal_handlers();
        sq_corpus_writer_params p = sq_corpus_writer_default_params();
        p.vocab = 8;
        sq_error err = {0};
        sq_corpus_writer *w;
        float row[8] = {0};
        if (sq_corpus_writer_open(path, &p, &w, &err) ||
            sq_corpus_writer_append(w, row, row, NULL, 1, &err) || tu_count_entries(dir) > 1)
            _exit(3);
        raise(SIGTERM);
        _exit(4); /* not reached */
    }
    int st;
    cr_assert_eq(waitpid(pid, &st, 0), pid);
    cr_assert(WIFSIGNALED(st) && WTERMSIG(st) == SIGTERM, "child status %d", st);
    cr_assert_eq(tu_count_entries(dir), 0, "the temporary file was left behind");
    tu_rmtree(dir);
    free(path), free(dir);
}

Test(corpus, writer_abort_leaves_nothing_and_keeps_the_old_file)
{
    char *dir = tu_tmpdir(), *path = tu_path(dir, "c.h5");
    tu_write(path, "old contents");
    sq_corpus_writer_params p = sq_corpus_writer_default_params();
    p.vocab = 8;
    sq_error err = {0};
    sq_corpus_writer *w;
    cr_assert_eq(sq_corpus_writer_open(path, &p, &w, &err), SQ_OK, "%s", err.msg);
    /* the temporary file is anonymous (O_TMPFILE) on this file system, or named beside it */
    int during = tu_count_entries(dir);
    cr_assert(during == 1 || during == 2, "%d entries while writing", during);
    float row[8] = {0};
    cr_assert_eq(sq_corpus_writer_append(w, row, row, NULL, 1, &err), SQ_OK);
    sq_corpus_writer_abort(w);
    cr_assert_eq(tu_count_entries(dir), 1);
    char *old = tu_read(path, NULL);
    cr_assert_str_eq(old, "old contents");
    free(old);
    tu_rmtree(dir);
    free(path), free(dir);
}

Test(corpus, writer_refuses_an_empty_corpus_and_leaves_no_file)
{
    char *dir = tu_tmpdir(), *path = tu_path(dir, "c.h5");
    sq_corpus_writer_params p = sq_corpus_writer_default_params();
    p.vocab = 8;
    sq_error err = {0};
    sq_corpus_writer *w;
    cr_assert_eq(sq_corpus_writer_open(path, &p, &w, &err), SQ_OK, "%s", err.msg);
    cr_assert_eq(sq_corpus_writer_end_sequence(w, &err), SQ_OK);
    cr_assert_eq(sq_corpus_writer_commit(w, &err), SQ_EDATA);
    cr_assert(strstr(err.msg, path) && strstr(err.msg, "empty"), "%s", err.msg);
    cr_assert_eq(tu_count_entries(dir), 0);
    tu_rmtree(dir);
    free(path), free(dir);
}

Test(corpus, writer_refuses_non_finite_and_out_of_range_values)
{
    char *dir = tu_tmpdir(), *path = tu_path(dir, "c.h5");
    sq_corpus_writer_params p = sq_corpus_writer_default_params();
    p.vocab = 4;
    p.half = 1;
    sq_error err = {0};
    sq_corpus_writer *w;
    cr_assert_eq(sq_corpus_writer_open(path, &p, &w, &err), SQ_OK, "%s", err.msg);
    float good[8] = {1, 2, 3, 4, 5, 6, 7, 8}, bad[8] = {1, 2, 3, 4, 5, 6, NAN, 8};
    float big[4] = {1, 7e4f, 0, 0};
    int32_t tok[2] = {0, 4};
    cr_assert_eq(sq_corpus_writer_append(w, good, bad, NULL, 2, &err), SQ_EDATA);
    cr_assert(strstr(err.msg, "/draft/logits: row 1"), "%s", err.msg);
    sq_error e2 = {0};
    cr_assert_eq(sq_corpus_writer_append(w, big, good, NULL, 1, &e2), SQ_EDATA);
    cr_assert(strstr(e2.msg, "float16"), "%s", e2.msg);
    sq_error e3 = {0};
    cr_assert_eq(sq_corpus_writer_append(w, good, good, tok, 2, &e3), SQ_EDATA);
    cr_assert(strstr(e3.msg, "/tokens: row 1"), "%s", e3.msg);
    sq_corpus_writer_abort(w);
    cr_assert_eq(tu_count_entries(dir), 0);

    sq_error e4 = {0};
    p.vocab = 0;
    cr_assert_eq(sq_corpus_writer_open(path, &p, &w, &e4), SQ_EUSAGE);
    sq_error e5 = {0};
    p.vocab = 4;
    p.topk = 5;
    p.half = 0;
    cr_assert_eq(sq_corpus_writer_open(path, &p, &w, &e5), SQ_EUSAGE);
    cr_assert_eq(tu_count_entries(dir), 0);
    tu_rmtree(dir);
    free(path), free(dir);
}

Test(corpus, writer_cannot_create_in_a_missing_directory)
{
    sq_corpus_writer_params p = sq_corpus_writer_default_params();
    p.vocab = 4;
    sq_error err = {0};
    sq_corpus_writer *w = NULL;
    cr_assert_eq(sq_corpus_writer_open("/nonexistent/dir/c.h5", &p, &w, &err), SQ_ECANTCREAT);
    cr_assert_null(w);
    cr_assert(strstr(err.msg, "/nonexistent/dir/c.h5"), "%s", err.msg);
}

/* The same data written twice, a second apart, gives the same bytes: no object timestamps, so
 * a corpus's SHA-256 (which keys sequoia-accept's random streams) depends on its content only. */
Test(corpus, same_content_gives_identical_files)
{
    char *dir = tu_tmpdir();
    char *path[2] = {tu_path(dir, "a.h5"), tu_path(dir, "b.h5")};
    float t[4 * 8], d[4 * 8];
    int32_t tok[4] = {1, 2, 3, 4};
    for (int i = 0; i < 32; i++) {
        t[i] = (float)(i % 7) * 0.5f;
        d[i] = (float)(i % 5) * 0.25f;
    }
    for (int f = 0; f < 2; f++) {
        if (f == 1)
            sleep(1);
        sq_corpus_writer_params p = sq_corpus_writer_default_params();
        p.vocab = 8;
        p.draft = "d";
        p.target = "t";
        sq_corpus_writer *w;
        sq_error err = {0};
        cr_assert_eq(sq_corpus_writer_open(path[f], &p, &w, &err), SQ_OK, "%s", err.msg);
        cr_assert_eq(sq_corpus_writer_append(w, t, d, tok, 4, &err), SQ_OK, "%s", err.msg);
        cr_assert_eq(sq_corpus_writer_end_sequence(w, &err), SQ_OK, "%s", err.msg);
        cr_assert_eq(sq_corpus_writer_commit(w, &err), SQ_OK, "%s", err.msg);
    }
    size_t la, lb;
    char *a = tu_read(path[0], &la), *b = tu_read(path[1], &lb);
    cr_assert(a && b);
    cr_assert_eq(la, lb);
    cr_assert_eq(memcmp(a, b, la), 0, "the two files differ");
    free(a);
    free(b);
    tu_rmtree(dir);
    free(dir);
    free(path[0]);
    free(path[1]);
}

/* ---- raw chunks decoded outside HDF5 (issue 17) ------------------------------------------- */

Test(corpus, raw_chunks_decode_to_what_sq_corpus_read_reads)
{
    /* float32 and float16, with and without shuffle + deflate; 23 rows in chunks of 4, so the
     * last chunk is partial */
    const int V = 37, N = 23, lens[3] = {9, 1, 13};
    float *tl = make_logits(N, V, 31), *dl = make_logits(N, V, 32);
    char *dir = tu_tmpdir();
    for (int kind = 0; kind < 4; kind++) {
        char *path = tu_path(dir, kind % 2 ? "raw-deflate.h5" : "raw-plain.h5");
        sq_corpus_writer_params p = sq_corpus_writer_default_params();
        p.vocab = V;
        p.chunk_rows = 4;
        p.compression = kind % 2;
        p.half = kind / 2;
        write_corpus(path, p, lens, 3, 5, tl, dl, NULL);
        sq_corpus *c = open_ok(path);
        cr_assert_eq(sq_corpus_raw_rows(c), 4, "kind %d", kind);
        float *want_t = malloc(sizeof(float) * (size_t)(N * V));
        float *want_d = malloc(sizeof(float) * (size_t)(N * V));
        read_all(c, 7, want_t, want_d, NULL);
        float rows[4 * 37];
        sq_corpus_raw raw = {0};
        unsigned char *work = NULL;
        size_t work_cap = 0;
        sq_error err = {0};
        /* mapped (Linux >= 5.14), then fetched by H5Dread_chunk */
        cr_assert(sq_corpus_mapped(c), "kind %d: chunks are not mapped", kind);
        for (int mapped = 1; mapped >= 0; mapped--) {
            sq_corpus_set_mapped(c, mapped);
            cr_assert_eq(sq_corpus_mapped(c), mapped);
            for (int model = 0; model < 2; model++)
                for (int ch = 0; ch * 4 < N; ch++) {
                    memset(rows, 0xff, sizeof rows);
                    cr_assert_eq(sq_corpus_read_raw(c, model, ch, rows, &raw, &err), 0, "%s",
                                 err.msg);
                    /* unfiltered float32: used where it lies, or read straight into rows
                     * (the writer's chunks are at 4-byte offsets) */
                    cr_assert_eq(raw.in_place, kind == 0, "kind %d", kind);
                    cr_assert_eq(raw.rows != NULL, kind == 0, "kind %d", kind);
                    if (raw.rows && !mapped)
                        cr_assert_eq(raw.rows, rows);
                    cr_assert_eq(raw.map != NULL, mapped);
                    cr_assert_eq(sq_corpus_decode_raw(c, &raw, rows, &work, &work_cap, &err), 0,
                                 "%s", err.msg);
                    int count = N - ch * 4 < 4 ? N - ch * 4 : 4;
                    const float *want = (model ? want_d : want_t) + (size_t)(ch * 4) * (size_t)V;
                    cr_assert_eq(memcmp(raw.rows ? raw.rows : rows, want,
                                        sizeof(float) * (size_t)(count * V)), 0,
                                 "kind %d mapped %d model %d chunk %d", kind, mapped, model, ch);
                }
        }
        sq_corpus_raw_clear(&raw);
        free(work);
        free(want_t);
        free(want_d);
        sq_corpus_close(c);
        unlink(path);
        free(path);
    }
    free(tl);
    free(dl);
    tu_rmtree(dir);
    free(dir);
}

/* Every finite float16 value (both zeros, the subnormals, the largest) decodes from a raw chunk
 * to sq_f16_to_f32's float, with and without shuffle + deflate: the vector widening (F16C,
 * issue 27) takes over from the scalar rule bit for bit, partial blocks included (V = 1000). */
Test(corpus, raw_float16_chunks_widen_every_finite_half_exactly)
{
    const int V = 1000, N = 64;   /* 64000 >= the 63488 finite halves */
    float *tl = malloc(sizeof(float) * (size_t)(N * V)), *dl = malloc(sizeof(float) * (size_t)(N * V));
    cr_assert(tl && dl);
    int k = 0;
    for (int h = 0; h < 65536 && k < N * V; h++)
        if (((h >> 10) & 0x1f) != 0x1f)
            tl[k++] = sq_f16_to_f32((uint16_t)h);
    for (; k < N * V; k++)
        tl[k] = (float)(k % 77) / 8.0f;
    for (int i = 0; i < N * V; i++)
        dl[i] = tl[N * V - 1 - i];
    char *dir = tu_tmpdir();
    for (int kind = 0; kind < 2; kind++) {
        char *path = tu_path(dir, kind ? "h-deflate.h5" : "h-plain.h5");
        sq_corpus_writer_params p = sq_corpus_writer_default_params();
        p.vocab = V;
        p.chunk_rows = 8;
        p.compression = kind;
        p.half = 1;
        int lens[1] = {N};
        write_corpus(path, p, lens, 1, N, tl, dl, NULL);
        sq_corpus *c = open_ok(path);
        float *rows = malloc(sizeof(float) * (size_t)(8 * V));
        sq_corpus_raw raw = {0};
        unsigned char *work = NULL;
        size_t work_cap = 0;
        sq_error err = {0};
        for (int model = 0; model < 2; model++)
            for (int ch = 0; ch * 8 < N; ch++) {
                cr_assert_eq(sq_corpus_read_raw(c, model, ch, rows, &raw, &err), 0, "%s", err.msg);
                cr_assert_eq(sq_corpus_decode_raw(c, &raw, rows, &work, &work_cap, &err), 0,
                             "%s", err.msg);
                const float *want = (model ? dl : tl) + (size_t)(ch * 8) * (size_t)V;
                for (int i = 0; i < 8 * V; i++)
                    cr_assert_eq(memcmp(&rows[i], &want[i], sizeof(float)), 0,
                                 "kind %d model %d chunk %d element %d: %a, not %a", kind, model,
                                 ch, i, (double)rows[i], (double)want[i]);
            }
        sq_corpus_raw_clear(&raw);
        free(work);
        free(rows);
        sq_corpus_close(c);
        unlink(path);
        free(path);
    }
    free(tl);
    free(dl);
    tu_rmtree(dir);
    free(dir);
}

/* A float16 infinity or NaN in a raw chunk is still the finite check's error (the widening
 * tells the check when it can be skipped, issue 27): written through HDF5 directly, in the
 * middle of a vector block and in the scalar tail, shuffled + deflated and plain. */
Test(corpus, raw_float16_chunk_with_an_infinity_or_nan_is_an_error)
{
    const int V = 40, N = 8;
    char *dir = tu_tmpdir();
    const uint16_t bad[2] = {0x7c00 /* +inf */, 0x7e01 /* NaN */};
    const int at[2] = {3 * 40 + 17, 5 * 40 + 38};   /* row 3 (a vector block), row 5 (tail) */
    for (int kind = 0; kind < 4; kind++) {
        char *path = tu_path(dir, "h.h5");
        float *tl = malloc(sizeof(float) * (size_t)(N * V));
        for (int i = 0; i < N * V; i++)
            tl[i] = (float)(i % 13) / 4.0f;
        sq_corpus_writer_params p = sq_corpus_writer_default_params();
        p.vocab = V;
        p.chunk_rows = 8;
        p.compression = kind & 1;
        p.half = 1;
        int lens[1] = {N};
        write_corpus(path, p, lens, 1, N, tl, tl, NULL);
        /* overwrite one half in /target/logits with HDF5 */
        hid_t f = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
        hid_t ds = H5Dopen2(f, "/target/logits", H5P_DEFAULT);
        hid_t ft = H5Dget_type(ds);
        uint16_t *raw = malloc(sizeof(uint16_t) * (size_t)(N * V));
        cr_assert(H5Dread(ds, ft, H5S_ALL, H5S_ALL, H5P_DEFAULT, raw) >= 0);
        raw[at[kind / 2]] = bad[kind / 2];
        cr_assert(H5Dwrite(ds, ft, H5S_ALL, H5S_ALL, H5P_DEFAULT, raw) >= 0);
        H5Tclose(ft);
        H5Dclose(ds);
        H5Fclose(f);
        sq_corpus *c = open_ok(path);
        float *rows = malloc(sizeof(float) * (size_t)(N * V));
        sq_corpus_raw r = {0};
        unsigned char *work = NULL;
        size_t work_cap = 0;
        sq_error err = {0};
        cr_assert_eq(sq_corpus_read_raw(c, 0, 0, rows, &r, &err), 0, "%s", err.msg);
        cr_assert_eq(sq_corpus_decode_raw(c, &r, rows, &work, &work_cap, &err), SQ_EDATA,
                     "kind %d: a non-finite half passed", kind);
        cr_assert(strstr(err.msg, "/target/logits") &&
                      strstr(err.msg, kind / 2 ? "row 5: column 38 is NaN" : "row 3: column 17 is +inf"),
                  "kind %d: %s", kind, err.msg);
        sq_corpus_raw_clear(&r);
        free(work);
        free(rows);
        free(raw);
        free(tl);
        sq_corpus_close(c);
        unlink(path);
        free(path);
    }
    tu_rmtree(dir);
    free(dir);
}

/* A mapped chunk whose file is cut short before it is decoded: the mapping faults (SIGBUS),
 * which the guard turns into an error naming the file, the dataset and the chunk; the next
 * chunk is refused before it is mapped; and the process's SIGBUS handling is what it was once
 * the corpus is closed. */
Test(corpus, a_mapped_chunk_cut_short_is_an_error_not_a_sigbus)
{
    const int V = 4000, N = 16, lens[1] = {16};
    float *tl = make_logits(N, V, 41), *dl = make_logits(N, V, 42);
    char *dir = tu_tmpdir();
    for (int kind = 0; kind < 2; kind++) {
        char *path = tu_path(dir, "cut.h5");
        sq_corpus_writer_params p = sq_corpus_writer_default_params();
        p.vocab = V;
        p.chunk_rows = 4;
        p.compression = kind;
        write_corpus(path, p, lens, 1, 16, tl, dl, NULL);
        struct sigaction before, after;
        cr_assert(sigaction(SIGBUS, NULL, &before) == 0);
        sq_corpus *c = open_ok(path);
        cr_assert(sq_corpus_mapped(c));
        float *rows = malloc(sizeof(float) * 4 * (size_t)V);
        sq_corpus_raw raw = {0};
        unsigned char *work = NULL;
        size_t cap = 0;
        sq_error err = {0};
        cr_assert_eq(sq_corpus_read_raw(c, 1, 2, rows, &raw, &err), 0, "%s", err.msg);
        cr_assert(raw.map);
        cr_assert(truncate(path, 0) == 0);
        cr_assert_eq(sq_corpus_decode_raw(c, &raw, rows, &work, &cap, &err), SQ_EDATA);
        cr_assert(strstr(err.msg, path) && strstr(err.msg, "/draft/logits: the chunk of row 8") &&
                  strstr(err.msg, "mapping faulted"), "%s", err.msg);
        err = (sq_error){0};
        cr_assert_eq(sq_corpus_read_raw(c, 1, 3, rows, &raw, &err), SQ_EDATA);
        cr_assert(strstr(err.msg, "shrank"), "%s", err.msg);
        sq_corpus_raw_clear(&raw);
        free(work);
        free(rows);
        sq_corpus_close(c);
        cr_assert(sigaction(SIGBUS, NULL, &after) == 0);
        cr_assert(after.sa_handler == before.sa_handler, "the SIGBUS handler is restored");
        unlink(path);
        free(path);
    }
    free(tl);
    free(dl);
    tu_rmtree(dir);
    free(dir);
}

Test(corpus, raw_decoding_reports_the_first_bad_row_like_sq_corpus_read)
{
    spec s = spec_default();
    s.bad_model = 1;
    s.bad_row = 7;
    s.bad_col = 3;
    s.bad_row2 = 9;
    s.bad_value = INFINITY;
    char *dir = tu_tmpdir();
    char *path = tu_path(dir, "bad.h5");
    build(path, &s);
    sq_error err = {0};
    sq_corpus *c = NULL;
    if (sq_corpus_open(path, &c, &err) == SQ_OK) {
        int rows = sq_corpus_raw_rows(c);
        cr_assert_gt(rows, 0);
        float *out = malloc(sizeof(float) * (size_t)rows * 10);
        sq_corpus_raw raw = {0};
        unsigned char *work = NULL;
        size_t cap = 0;
        int failed = 0;
        for (int ch = 0; ch * rows < 12 && !failed; ch++) {
            cr_assert_eq(sq_corpus_read_raw(c, 1, ch, out, &raw, &err), 0, "%s", err.msg);
            failed = sq_corpus_decode_raw(c, &raw, out, &work, &cap, &err) != 0;
        }
        cr_assert(failed);
        cr_assert_eq(err.status, SQ_EDATA);
        cr_assert(strstr(err.msg, "/draft/logits: row 7:") && strstr(err.msg, "+inf"), "%s",
                  err.msg);
        sq_corpus_raw_clear(&raw);
        free(work);
        free(out);
        sq_corpus_close(c);
    } else {
        /* the open itself may check every row: then it already names the row */
        cr_assert(strstr(err.msg, "/draft/logits: row 7:"), "%s", err.msg);
    }
    unlink(path);
    free(path);
    tu_rmtree(dir);
    free(dir);
}

/* sq_corpus_read of a mapped corpus whose chunks are filtered or float16 goes through the chunk
 * decoder (libdeflate, the SIMD unshuffle and F16C; issue 27: the dynamic-tree statistics read
 * their samples this way, and HDF5's zlib and scalar float16 loop were a third of a float16 +
 * deflate estimation). Every range of rows (inside one chunk, across chunks, the partial last
 * chunk, single rows) reads the same floats, bit for bit, as HDF5's path (mapping off), for
 * float32 and float16, with and without shuffle + deflate. */
Test(corpus, sq_corpus_read_through_the_chunk_decoder_equals_hdf5s_rows)
{
    const int V = 37, N = 23, lens[3] = {9, 1, 13};
    float *tl = make_logits(N, V, 41), *dl = make_logits(N, V, 42);
    char *dir = tu_tmpdir();
    for (int kind = 0; kind < 4; kind++) {
        char *path = tu_path(dir, "read.h5");
        sq_corpus_writer_params p = sq_corpus_writer_default_params();
        p.vocab = V;
        p.chunk_rows = 4;
        p.compression = kind % 2;
        p.half = kind / 2;
        write_corpus(path, p, lens, 3, 5, tl, dl, NULL);
        sq_corpus *c = open_ok(path);
        cr_assert(sq_corpus_mapped(c), "kind %d: not mapped", kind);
        float *want_t = malloc(sizeof(float) * (size_t)(N * V));
        float *want_d = malloc(sizeof(float) * (size_t)(N * V));
        float *got_t = malloc(sizeof(float) * (size_t)(N * V));
        float *got_d = malloc(sizeof(float) * (size_t)(N * V));
        sq_corpus_set_mapped(c, 0);
        read_all(c, N, want_t, want_d, NULL);
        sq_corpus_set_mapped(c, 1);
        sq_error err = {0};
        for (int row0 = 0; row0 < N; row0++)
            for (int count = 1; row0 + count <= N; count++) {
                memset(got_t, 0xff, sizeof(float) * (size_t)(N * V));
                memset(got_d, 0xff, sizeof(float) * (size_t)(N * V));
                cr_assert_eq(sq_corpus_read(c, row0, count, got_t, got_d, NULL, &err), SQ_OK,
                             "kind %d rows %d+%d: %s", kind, row0, count, err.msg);
                size_t o = (size_t)row0 * (size_t)V, n = sizeof(float) * (size_t)(count * V);
                cr_assert_eq(memcmp(got_t, want_t + o, n), 0, "kind %d target rows %d+%d", kind,
                             row0, count);
                cr_assert_eq(memcmp(got_d, want_d + o, n), 0, "kind %d draft rows %d+%d", kind,
                             row0, count);
                /* nothing written past the rows asked for */
                uint32_t past;
                if (row0 + count < N) {
                    memcpy(&past, got_t + (size_t)count * (size_t)V, sizeof past);
                    cr_assert_eq(past, 0xffffffffu, "kind %d rows %d+%d", kind, row0, count);
                }
            }
        free(want_t);
        free(want_d);
        free(got_t);
        free(got_d);
        sq_corpus_close(c);
        unlink(path);
        free(path);
    }
    free(tl);
    free(dl);
    tu_rmtree(dir);
    free(dir);
}

/* Through the chunk decoder the finite check still covers the rows asked for and only those:
 * a NaN in row 5 of chunk [4, 8) is not an error for rows 6..7 (read from the same chunk), and
 * for rows 4..6 it is the error HDF5's path gives, word for word. */
Test(corpus, sq_corpus_read_through_the_chunk_decoder_checks_only_the_rows_asked_for)
{
    const int V = 40, N = 12;
    char *dir = tu_tmpdir();
    for (int kind = 0; kind < 2; kind++) {   /* float16 + shuffle + deflate, float32 + deflate */
        char *path = tu_path(dir, "nan.h5");
        float *tl = malloc(sizeof(float) * (size_t)(N * V));
        for (int i = 0; i < N * V; i++)
            tl[i] = (float)(i % 13) / 4.0f;
        sq_corpus_writer_params p = sq_corpus_writer_default_params();
        p.vocab = V;
        p.chunk_rows = 4;
        p.compression = 1;
        p.half = kind == 0;
        int lens[1] = {N};
        write_corpus(path, p, lens, 1, N, tl, tl, NULL);
        hid_t f = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
        hid_t ds = H5Dopen2(f, "/target/logits", H5P_DEFAULT);
        float *all = malloc(sizeof(float) * (size_t)(N * V));
        cr_assert(H5Dread(ds, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, all) >= 0);
        all[5 * V + 38] = NAN;
        cr_assert(H5Dwrite(ds, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, all) >= 0);
        H5Dclose(ds);
        H5Fclose(f);
        sq_corpus *c = open_ok(path);
        float *out = malloc(sizeof(float) * (size_t)(N * V));
        char msg[2][sizeof ((sq_error){0}).msg];
        for (int mapped = 1; mapped >= 0; mapped--) {
            sq_corpus_set_mapped(c, mapped);
            sq_error err = {0};
            cr_assert_eq(sq_corpus_read(c, 6, 2, out, out, NULL, &err), SQ_OK,
                         "kind %d mapped %d: %s", kind, mapped, err.msg);
            cr_assert_eq(sq_corpus_read(c, 4, 3, out, out, NULL, &err), SQ_EDATA,
                         "kind %d mapped %d: the NaN passed", kind, mapped);
            cr_assert(strstr(err.msg, "/target/logits: row 5: column 38 is NaN"), "%s", err.msg);
            snprintf(msg[mapped], sizeof msg[mapped], "%s", err.msg);
        }
        cr_assert_str_eq(msg[1], msg[0]);
        free(out);
        free(all);
        free(tl);
        sq_corpus_close(c);
        unlink(path);
        free(path);
    }
    tu_rmtree(dir);
    free(dir);
}

/* ---- dump --resume: a damaged partial file ------------------------------------------------ */

/* Writes `bytes` of `data` to `path` (replacing it). */
static void put_bytes(const char *path, const char *data, size_t bytes)
{
    FILE *f = fopen(path, "wb");
    cr_assert(f);
    cr_assert_eq(fwrite(data, 1, bytes, f), bytes);
    cr_assert_eq(fclose(f), 0);
}

/* A partial file cut short (a copy that stopped, a full disk that lost rows of the checkpoint)
 * or overwritten with zeros claims rows that are not there: it is refused before anything is
 * written, with "damaged ... delete it to start over", and left byte for byte as it was
 * (docs/robustness.md, "No lost work"); the intact file still resumes. */
Test(corpus, resume_refuses_a_damaged_partial_and_leaves_it_untouched)
{
    char *dir = tu_tmpdir(), *path = tu_path(dir, "c.h5"), *partial = tu_path(dir, "c.h5.partial");
    int V = 37, N = 200;
    float *tl = make_logits(N, V, 3), *dl = make_logits(N, V, 4);
    int32_t *tok = make_tokens(N, V);
    sq_corpus_writer_params p = sq_corpus_writer_default_params();
    p.vocab = V;
    p.chunk_rows = 8;
    sq_error err = {0};
    sq_corpus_writer *w;
    int64_t done = -1;
    cr_assert_eq(sq_corpus_writer_open_resumable(path, partial, &p, "fp", &done, &w, &err),
                 SQ_OK, "%s", err.msg);
    cr_assert_eq(sq_corpus_writer_append(w, tl, dl, tok, N, &err), SQ_OK, "%s", err.msg);
    cr_assert_eq(sq_corpus_writer_checkpoint(w, &err), SQ_OK, "%s", err.msg);
    sq_corpus_writer_abort(w);   /* keeps the partial file */
    size_t len;
    char *full = tu_read(partial, &len);
    cr_assert(len > 20000, "%zu bytes", len);
    /* cut short at several points, and the last third overwritten with zeros */
    for (int c = 0; c < 4; c++) {
        char *bytes = malloc(len);
        memcpy(bytes, full, len);
        size_t n = c < 3 ? len * (size_t)(3 + 2 * c) / 10 : len;
        if (c == 3)
            memset(bytes + len * 2 / 3, 0, len - len * 2 / 3 - 4096);
        put_bytes(partial, bytes, n);
        err = (sq_error){0};
        w = NULL;
        int rc = sq_corpus_writer_open_resumable(path, partial, &p, "fp", &done, &w, &err);
        if (rc == SQ_OK)
            sq_corpus_writer_abort(w);
        cr_assert_eq(rc, SQ_EDATA, "case %d (%zu of %zu bytes): %d %s", c, n, len, rc, err.msg);
        cr_assert(strstr(err.msg, partial) && strstr(err.msg, "delete it to start over"),
                  "case %d: %s", c, err.msg);
        size_t after_len;
        char *after = tu_read(partial, &after_len);
        cr_assert(after_len == n && memcmp(after, bytes, n) == 0,
                  "case %d: the partial file was changed (%zu bytes, was %zu)", c, after_len, n);
        free(after);
        free(bytes);
    }
    /* the truncated ones say what is wrong, not only "delete it" */
    put_bytes(partial, full, len * 9 / 10);
    err = (sq_error){0};
    cr_assert_eq(sq_corpus_writer_open_resumable(path, partial, &p, "fp", &done, &w, &err),
                 SQ_EDATA);
    cr_assert(strstr(err.msg, "damaged ("), "%s", err.msg);
    /* a partial without our format attribute, or of another version, would be finished as a
     * corpus that no reader takes; ... */
    /* ... and one whose datasets cannot grow, or whose row count is negative, is damaged */
    static const char *const says[] = {"not a partial corpus of this version",
                                       "not a partial corpus of this version",
                                       "/target/logits: not stored in chunks",
                                       "resume_rows: -5 rows is negative"};
    for (int c = 0; c < 4; c++) {
        put_bytes(partial, full, len);
        hid_t f = H5Fopen(partial, H5F_ACC_RDWR, H5P_DEFAULT);
        cr_assert(f >= 0);
        if (c == 0) {
            cr_assert(H5Adelete(f, "format") >= 0);
        } else if (c == 1 || c == 3) {
            hid_t a = H5Aopen(f, c == 1 ? "version" : "resume_rows", H5P_DEFAULT);
            long long v = c == 1 ? 2 : -5;
            cr_assert(a >= 0 && H5Awrite(a, H5T_NATIVE_LLONG, &v) >= 0);
            H5Aclose(a);
        } else {
            cr_assert(H5Ldelete(f, "/target/logits", H5P_DEFAULT) >= 0);
            hsize_t dims[2] = {(hsize_t)N, (hsize_t)V};
            hid_t sp = H5Screate_simple(2, dims, NULL);
            hid_t ds = H5Dcreate2(f, "/target/logits", H5T_IEEE_F32LE, sp, H5P_DEFAULT,
                                  H5P_DEFAULT, H5P_DEFAULT);
            cr_assert(ds >= 0 && H5Dwrite(ds, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT,
                                          tl) >= 0);
            H5Dclose(ds);
            H5Sclose(sp);
        }
        H5Fclose(f);
        err = (sq_error){0};
        cr_assert_eq(sq_corpus_writer_open_resumable(path, partial, &p, "fp", &done, &w, &err),
                     SQ_EDATA, "case %d: %s", c, err.msg);
        cr_assert(strstr(err.msg, says[c]) && strstr(err.msg, "delete it to start over"),
                  "case %d: %s", c, err.msg);
    }
    /* the intact file resumes after all its rows */
    put_bytes(partial, full, len);
    err = (sq_error){0};
    cr_assert_eq(sq_corpus_writer_open_resumable(path, partial, &p, "fp", &done, &w, &err),
                 SQ_OK, "%s", err.msg);
    cr_assert_eq(done, N);
    cr_assert_eq(sq_corpus_writer_end_sequence(w, &err), SQ_OK, "%s", err.msg);
    cr_assert_eq(sq_corpus_writer_commit(w, &err), SQ_OK, "%s", err.msg);
    sq_corpus *cc = open_ok(path);
    cr_assert_eq(sq_corpus_get_info(cc)->rows, N);
    sq_corpus_close(cc);
    free(full);
    tu_rmtree(dir);
    free(tl), free(dl), free(tok), free(path), free(partial), free(dir);
}

/* A partial of other inputs or options names the fields that differ, not both fingerprints
 * whole (about 700 characters in a dump's): a field one side lacks is at its default there. */
Test(corpus, resume_of_other_inputs_names_the_fields_that_differ)
{
    char *dir = tu_tmpdir(), *path = tu_path(dir, "c.h5"), *partial = tu_path(dir, "c.h5.partial");
    sq_corpus_writer_params p = sq_corpus_writer_default_params();
    p.vocab = 5;
    sq_error err = {0};
    sq_corpus_writer *w;
    int64_t done;
    const char *then = "tokens sha256 abc; draft d/; top-k 0; context 1024";
    cr_assert_eq(sq_corpus_writer_open_resumable(path, partial, &p, then, &done, &w, &err),
                 SQ_OK, "%s", err.msg);
    sq_corpus_writer_abort(w);
    const struct {
        const char *now, *says;
    } cases[] = {
        {"tokens sha256 abc; draft d/; top-k 0; context 1024; compression 5",
         "(compression: partial at its default, now 5); delete it"},
        {"tokens sha256 abd; draft d/; top-k 8; context 1024",
         "(tokens sha256: partial abc, now abd; top-k: partial 0, now 8); delete it"},
        {"tokens sha256 abc; draft d/; context 1024", "(top-k: partial 0, now at its default)"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        err = (sq_error){0};
        cr_assert_eq(sq_corpus_writer_open_resumable(path, partial, &p, cases[i].now, &done, &w,
                                                     &err), SQ_EDATA);
        cr_assert(strstr(err.msg, partial) && strstr(err.msg, "other inputs or options") &&
                  strstr(err.msg, cases[i].says), "case %zu: %s", i, err.msg);
        cr_assert_null(strstr(err.msg, "draft d/"), "case %zu names a field that agrees: %s", i,
                       err.msg);
    }
    tu_rmtree(dir);
    free(path), free(partial), free(dir);
}
