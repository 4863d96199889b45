#include "runtime/tokens.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sys/stat.h>

#include <cjson/cJSON.h>
#include <hdf5.h>

#include "libsequoia/base/io.h"
#include "libsequoia/base/json.h"
#include "libsequoia/base/utf8.h"

#define TEXT_MAX_BYTES (4ull << 30)

void sq_tokens_free(sq_tokens *t)
{
    if (!t)
        return;
    free(t->ids);
    free(t->offsets);
    free(t);
}

static int push_id(sq_tokens *t, int64_t *cap, int32_t id, sq_error *err)
{
    if (t->n == *cap) {
        int64_t nc = *cap ? *cap * 2 : 1024;
        int32_t *p = realloc(t->ids, (size_t)nc * sizeof *p);
        if (!p)
            return sq_error_oom(err, "tokens");
        t->ids = p;
        *cap = nc;
    }
    t->ids[t->n++] = id;
    return SQ_OK;
}

static int push_offset(sq_tokens *t, int64_t *cap, int64_t off, sq_error *err)
{
    if (t->offsets[t->sequences] == off)
        return SQ_OK;   /* empty sequence: dropped */
    if (t->sequences + 2 > *cap) {
        int64_t nc = *cap ? *cap * 2 : 16;
        int64_t *p = realloc(t->offsets, (size_t)nc * sizeof *p);
        if (!p)
            return sq_error_oom(err, "sequence offsets");
        t->offsets = p;
        *cap = nc;
    }
    t->offsets[++t->sequences] = off;
    return SQ_OK;
}

int sq_token_id_parse(const char *word, int32_t *id)
{
    const char *d = word + (*word == '-' || *word == '+');
    if (!*d)
        return SQ_TOKEN_ID_NOT_INTEGER;
    for (const char *q = d; *q; q++)
        if (*q < '0' || *q > '9')
            return SQ_TOKEN_ID_NOT_INTEGER;
    errno = 0;
    long long v = strtoll(word, NULL, 10);
    if (errno || v < 0 || v > INT32_MAX)
        return SQ_TOKEN_ID_OUT_OF_RANGE;
    *id = (int32_t)v;
    return SQ_TOKEN_ID_OK;
}

static const unsigned char hdf5_sig[8] = {0x89, 'H', 'D', 'F', '\r', '\n', 0x1a, '\n'};

static int load_text(const char *path, sq_tokens *t, sq_error *err)
{
    char *data;
    size_t len;
    int rc = sq_file_read(path, TEXT_MAX_BYTES, &data, &len, err);
    if (rc)
        return rc;
    size_t bom = 0;   /* a UTF-8 byte order mark is skipped: it is no token (issue 27) */
    if ((rc = sq_text_bom(path, data, len, &bom, err))) {
        free(data);
        return rc;
    }
    /* an HDF5 file arrives here only through "-" (a named one is recognised by its signature) */
    if (len >= sizeof hdf5_sig && memcmp(data, hdf5_sig, sizeof hdf5_sig) == 0) {
        free(data);
        return sq_error_set(err, SQ_EUSAGE, "%s: holds an HDF5 file, which is read by seeking: an "
                            "HDF5 token file must be named, not given as '-'", path);
    }
    /* a NUL byte would end a token early and hide what follows it (issue 27 W11) */
    const char *nul = memchr(data, '\0', len);
    if (nul) {
        long nl = 1;
        for (const char *q = data; q < nul; q++)
            nl += *q == '\n';
        rc = sq_error_set(err, SQ_EDATA, "%s: line %ld: NUL byte at byte offset %zu; a token "
                          "file is text (whitespace-separated integers)", path, nl,
                          (size_t)(nul - data));
        free(data);
        return rc;
    }
    int64_t cap = 0, ocap = 0;
    t->offsets = malloc(16 * sizeof *t->offsets);
    if (!t->offsets) {
        free(data);
        return sq_error_oom(err, "sequence offsets");
    }
    ocap = 16;
    t->offsets[0] = 0;
    t->sequences = 0;
    size_t i = bom;
    long line = 1;
    int line_has_token = 0;
    while (i < len && !rc) {
        char c = data[i];
        if (c == '\n') {
            if (!line_has_token)
                rc = push_offset(t, &ocap, t->n, err);   /* an empty line ends a sequence */
            line++;
            line_has_token = 0;
            i++;
            continue;
        }
        if (isspace((unsigned char)c)) {
            i++;
            continue;
        }
        size_t j = i;
        while (j < len && !isspace((unsigned char)data[j]))
            j++;
        char save = data[j];
        data[j] = '\0';
        int32_t v = 0;
        int how = sq_token_id_parse(data + i, &v);
        if (how == SQ_TOKEN_ID_NOT_INTEGER) {
            rc = sq_error_set(err, SQ_EDATA, "%s: line %ld: token %lld: '%.40s' is not an integer",
                              path, line, (long long)t->n, data + i);
        } else if (how == SQ_TOKEN_ID_OUT_OF_RANGE) {
            rc = sq_error_set(err, SQ_EDATA, "%s: line %ld: token %lld: id %.40s%s is out of range "
                              "(token ids are 0 to %d)", path, line, (long long)t->n, data + i,
                              j - i > 40 ? "..." : "", INT32_MAX);
        } else if (t->n >= SQ_TOKENS_MAX) {
            rc = sq_error_set(err, SQ_EDATA, "%s: more than %lld tokens", path, SQ_TOKENS_MAX);
        } else {
            rc = push_id(t, &cap, v, err);
        }
        data[j] = save;
        line_has_token = 1;
        i = j;
    }
    free(data);
    if (!rc)
        rc = push_offset(t, &ocap, t->n, err);
    return rc;
}

static int load_hdf5(const char *path, sq_tokens *t, sq_error *err)
{
    int rc = SQ_OK;
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT), d = -1, s = -1;
    if (f < 0)
        return sq_error_set(err, SQ_EDATA, "%s: cannot open as HDF5", path);
    if (H5Lexists(f, "tokens", H5P_DEFAULT) <= 0) {
        rc = sq_error_set(err, SQ_EDATA, "%s: /tokens: no such dataset", path);
        goto done;
    }
    d = H5Dopen2(f, "tokens", H5P_DEFAULT);
    if (d < 0) {
        rc = sq_error_set(err, SQ_EDATA, "%s: /tokens: not a dataset", path);
        goto done;
    }
    hid_t ty = H5Dget_type(d);
    H5T_class_t cls = H5Tget_class(ty);
    /* read as the file stores them, so that an id out of range is given as written (a uint64
     * read as int64 would be clamped to 2^63 - 1) */
    int is_unsigned = cls == H5T_INTEGER && H5Tget_sign(ty) == H5T_SGN_NONE;
    H5Tclose(ty);
    s = H5Dget_space(d);
    int nd = H5Sget_simple_extent_ndims(s);
    hsize_t dims[2] = {0, 0};
    if (cls != H5T_INTEGER || nd != 1) {
        rc = sq_error_set(err, SQ_EDATA, "%s: /tokens: expected a 1-D integer dataset", path);
        goto done;
    }
    H5Sget_simple_extent_dims(s, dims, NULL);
    if (dims[0] == 0 || dims[0] > (hsize_t)SQ_TOKENS_MAX) {
        rc = sq_error_set(err, SQ_EDATA, "%s: /tokens: %llu tokens (1 to %lld allowed)", path,
                          (unsigned long long)dims[0], SQ_TOKENS_MAX);
        goto done;
    }
    t->n = (int64_t)dims[0];
    int64_t *tmp = malloc((size_t)t->n * sizeof *tmp);
    t->ids = malloc((size_t)t->n * sizeof *t->ids);
    if (!tmp || !t->ids) {
        free(tmp);
        rc = sq_error_oom(err, "tokens");
        goto done;
    }
    if (H5Dread(d, is_unsigned ? H5T_NATIVE_UINT64 : H5T_NATIVE_INT64, H5S_ALL, H5S_ALL,
                H5P_DEFAULT, tmp) < 0) {
        free(tmp);
        rc = sq_error_set(err, SQ_EIO, "%s: /tokens: read error", path);
        goto done;
    }
    for (int64_t i = 0; i < t->n; i++) {
        uint64_t u = (uint64_t)tmp[i];
        if (is_unsigned ? u > INT32_MAX : (tmp[i] < 0 || tmp[i] > INT32_MAX)) {
            char as_written[24];
            if (is_unsigned)
                snprintf(as_written, sizeof as_written, "%llu", (unsigned long long)u);
            else
                snprintf(as_written, sizeof as_written, "%lld", (long long)tmp[i]);
            rc = sq_error_set(err, SQ_EDATA, "%s: /tokens[%lld]: id %s is out of range (token "
                              "ids are 0 to %d)", path, (long long)i, as_written, INT32_MAX);
            break;
        }
        t->ids[i] = (int32_t)tmp[i];
    }
    free(tmp);
    if (rc)
        goto done;
    H5Sclose(s);
    s = -1;
    H5Dclose(d);
    d = -1;
    if (H5Lexists(f, "seq_offsets", H5P_DEFAULT) > 0) {
        d = H5Dopen2(f, "seq_offsets", H5P_DEFAULT);
        s = d >= 0 ? H5Dget_space(d) : -1;
        if (d < 0 || s < 0 || H5Sget_simple_extent_ndims(s) != 1) {
            rc = sq_error_set(err, SQ_EDATA, "%s: /seq_offsets: expected a 1-D integer dataset",
                              path);
            goto done;
        }
        H5Sget_simple_extent_dims(s, dims, NULL);
        if (dims[0] < 2 || dims[0] > (hsize_t)t->n + 1) {
            rc = sq_error_set(err, SQ_EDATA, "%s: /seq_offsets: %llu entries, expected 2 to %lld",
                              path, (unsigned long long)dims[0], (long long)t->n + 1);
            goto done;
        }
        int64_t *o = malloc((size_t)dims[0] * sizeof *o);
        if (!o) {
            rc = sq_error_oom(err, "sequence offsets");
            goto done;
        }
        if (H5Dread(d, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, o) < 0) {
            free(o);
            rc = sq_error_set(err, SQ_EIO, "%s: /seq_offsets: read error", path);
            goto done;
        }
        if (o[0] != 0 || o[dims[0] - 1] != t->n) {
            free(o);
            rc = sq_error_set(err, SQ_EDATA,
                              "%s: /seq_offsets: must run from 0 to the number of tokens (%lld)",
                              path, (long long)t->n);
            goto done;
        }
        for (hsize_t i = 1; i < dims[0]; i++)
            if (o[i] < o[i - 1]) {
                free(o);
                rc = sq_error_set(err, SQ_EDATA, "%s: /seq_offsets[%llu]: decreasing", path,
                                  (unsigned long long)i);
                goto done;
            }
        /* drop empty sequences */
        t->offsets = o;
        int64_t m = 0;
        for (hsize_t i = 1; i < dims[0]; i++)
            if (o[i] > o[m])
                o[++m] = o[i];
        t->sequences = m;
    } else {
        t->offsets = malloc(2 * sizeof *t->offsets);
        if (!t->offsets) {
            rc = sq_error_oom(err, "sequence offsets");
            goto done;
        }
        t->offsets[0] = 0;
        t->offsets[1] = t->n;
        t->sequences = 1;
    }
done:
    if (s >= 0)
        H5Sclose(s);
    if (d >= 0)
        H5Dclose(d);
    H5Fclose(f);
    return rc;
}

int sq_tokens_load(const char *path, sq_tokens **out, sq_error *err)
{
    *out = NULL;
    unsigned char sig[8] = {0};
    size_t got = 0;
    if (strcmp(path, "-") != 0) {
        int fd;
        int rc = sq_input_open(path, "a file", NULL, &fd, err);
        if (rc)
            return rc;
        ssize_t r = read(fd, sig, sizeof sig);
        got = r > 0 ? (size_t)r : 0;
        close(fd);
    }
    sq_tokens *t = calloc(1, sizeof *t);
    if (!t)
        return sq_error_oom(err, "tokens");
    int rc;
    if (got == 8 && memcmp(sig, hdf5_sig, 8) == 0) {
        H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
        rc = load_hdf5(path, t, err);
    } else {
        rc = load_text(path, t, err);
    }
    if (!rc && t->n == 0)
        rc = sq_error_set(err, SQ_EDATA, "%s: no tokens", path);
    if (rc) {
        sq_tokens_free(t);
        return rc;
    }
    *out = t;
    return SQ_OK;
}

int sq_tokens_check_vocab(const sq_tokens *t, int vocab, const char *path, sq_error *err)
{
    for (int64_t i = 0; i < t->n; i++)
        if (t->ids[i] >= vocab)
            return sq_error_set(err, SQ_EDATA,
                                "%s: token %lld: id %d is outside the models' vocabulary [0, %d)",
                                path, (long long)i, (int)t->ids[i], vocab);
    return SQ_OK;
}

/* ---- text (tokens.h) ------------------------------------------------------------------------ */

static int has_tokenizer(const char *dir)
{
    char path[4096];
    struct stat st;
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    return stat(path, &st) == 0;
}

int sq_tokens_tokenizer(const char *prog, const char *draft_dir, const char *target_dir,
                        const char *need, sq_tokenizer **out, sq_error *err)
{
    *out = NULL;
    if (!has_tokenizer(target_dir)) {
        if (!need)
            return SQ_OK;
        return sq_error_set(err, SQ_EDATA, "%s/tokenizer.json: no such file: %s needs the "
                            "target's tokenizer", target_dir, need);
    }
    sq_tokenizer *t = NULL, *d = NULL;
    int rc = sq_tokenizer_load(target_dir, &t, err);
    if (rc) {
        if (!need) {
            /* wanted for its EOS ids only: a run on ids goes on without them */
            fprintf(stderr, "%s: warning: %s; decoding does not stop at an end-of-sequence "
                    "token\n", prog, err->msg);
            *err = (sq_error){0};
            return SQ_OK;
        }
        return rc == SQ_ENOINPUT ? (err->status = SQ_EDATA) : rc;
    }
    if (draft_dir && has_tokenizer(draft_dir)) {
        if ((rc = sq_tokenizer_load(draft_dir, &d, err))) {
            if (!need) {   /* as for the target's: a warning, the run on ids goes on */
                fprintf(stderr, "%s: warning: %s; the draft's tokenizer is not compared with "
                        "the target's\n", prog, err->msg);
                *err = (sq_error){0};
                *out = t;
                return SQ_OK;
            }
            sq_tokenizer_free(t);
            return rc == SQ_ENOINPUT ? (err->status = SQ_EDATA) : rc;
        }
        int same = sq_tokenizer_same(d, t);
        sq_tokenizer_free(d);
        if (!same) {
            sq_tokenizer_free(t);
            return sq_error_set(err, SQ_EDATA, "%s/tokenizer.json and %s/tokenizer.json differ: "
                                "the draft and the target must share a tokenizer", draft_dir,
                                target_dir);
        }
    }
    *out = t;
    return SQ_OK;
}

int sq_tokens_check_tokenizer(const sq_tokenizer *tok, const char *dir, int model_vocab,
                              sq_error *err)
{
    int v = sq_tokenizer_vocab_size(tok);
    if (v > model_vocab)
        return sq_error_set(err, SQ_EDATA, "%s/tokenizer.json: %d token ids, but the model has "
                            "only %d rows (vocab_size): not this model's tokenizer", dir, v,
                            model_vocab);
    return SQ_OK;
}

/* Appends the ids of one document as a sequence; where: "" or ": paragraph 3 (line 7)". */
static int push_document(const sq_tokenizer *tok, const char *path, const char *where,
                         const char *text, size_t len, sq_tokens *t, int64_t *cap,
                         int64_t *ocap, sq_error *err)
{
    int32_t *ids = NULL;
    size_t n = 0;
    int rc = sq_tokenizer_encode(tok, text, len, 1, &ids, &n, err);
    if (rc) {   /* the message names the file and the document */
        sq_error named = {0};
        sq_error_set(&named, rc, "%.400s%s: %.500s", path, where, err->msg);
        *err = named;
        return rc;
    }
    for (size_t i = 0; i < n && !rc; i++) {
        if (t->n >= SQ_TOKENS_MAX)
            rc = sq_error_set(err, SQ_EDATA, "%s: more than %lld tokens", path, SQ_TOKENS_MAX);
        else
            rc = push_id(t, cap, ids[i], err);
    }
    free(ids);
    return rc ? rc : push_offset(t, ocap, t->n, err);
}

static int is_blank(const char *s, size_t len)
{
    for (size_t i = 0; i < len; i++)
        if (!isspace((unsigned char)s[i]))
            return 0;
    return 1;
}

static int ends_with(const char *s, const char *suffix)
{
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

/* Documents of a JSON Lines file: every non-blank line an object with a "text" string. */
static int jsonl_documents(const sq_tokenizer *tok, const char *path, const char *data,
                           size_t len, sq_tokens *t, int64_t *cap, int64_t *ocap, sq_error *err)
{
    int rc = SQ_OK;
    long line = 0;
    for (size_t i = 0; i < len && !rc;) {
        size_t j = i;
        while (j < len && data[j] != '\n')
            j++;
        line++;
        if (!is_blank(data + i, j - i)) {
            cJSON *obj = cJSON_ParseWithLength(data + i, j - i);
            const cJSON *txt = cJSON_GetObjectItemCaseSensitive(obj, "text");
            char where[64];
            snprintf(where, sizeof where, ": line %ld", line);
            const char *dup = obj ? sq_json_duplicate_key(obj) : NULL;
            if (!obj)
                rc = sq_error_set(err, SQ_EDATA, "%s: line %ld: not a JSON value", path, line);
            else if (dup)   /* as every JSON reader (docs/robustness.md, "duplicate key") */
                rc = sq_error_set(err, SQ_EDATA, "%s: line %ld: key \"%s\" appears twice in one "
                                  "object", path, line, dup);
            else if (!cJSON_IsString(txt))
                rc = sq_error_set(err, SQ_EDATA, "%s: line %ld: text: missing, or not a string",
                                  path, line);
            else
                rc = push_document(tok, path, where, txt->valuestring, strlen(txt->valuestring),
                                   t, cap, ocap, err);
            cJSON_Delete(obj);
        }
        i = j + 1;
    }
    return rc;
}

/* Documents separated by blank lines; a document is its lines joined by their newlines,
 * without the last line's. */
static int paragraph_documents(const sq_tokenizer *tok, const char *path, const char *data,
                               size_t len, sq_tokens *t, int64_t *cap, int64_t *ocap,
                               sq_error *err)
{
    int rc = SQ_OK;
    long line = 0, par = 0, first = 0;
    size_t start = 0, end = 0;   /* the paragraph so far: [start, end) */
    int open = 0;
    for (size_t i = 0; !rc;) {   /* i past the end: the last paragraph is done */
        int at_end = i >= len;
        size_t j = i;
        while (j < len && data[j] != '\n')
            j++;
        if (!at_end)
            line++;
        if (at_end || is_blank(data + i, j - i)) {
            if (open) {
                char where[64];
                snprintf(where, sizeof where, ": paragraph %ld (line %ld)", ++par, first);
                rc = push_document(tok, path, where, data + start, end - start, t, cap, ocap,
                                   err);
                open = 0;
            }
            if (at_end)
                break;
        } else {
            if (!open) {
                open = 1;
                start = i;
                first = line;
            }
            end = j;
        }
        i = j + 1;
    }
    return rc;
}

int sq_tokens_from_text(const sq_tokenizer *tok, const char *path, int docs, sq_tokens **out,
                        sq_error *err)
{
    *out = NULL;
    char *data;
    size_t len;
    int rc = sq_file_read(path, TEXT_MAX_BYTES, &data, &len, err);
    if (rc)
        return rc;
    /* a UTF-8 byte order mark marks the encoding, it is no text: skipped (issue 27) */
    size_t bom = 0;
    if ((rc = sq_text_bom(path, data, len, &bom, err))) {
        free(data);
        return rc;
    }
    sq_tokens *t = calloc(1, sizeof *t);
    int64_t cap = 0, ocap = 16;
    if (!t || !(t->offsets = malloc((size_t)ocap * sizeof *t->offsets))) {
        free(t);
        free(data);
        return sq_error_oom(err, "tokens");
    }
    t->offsets[0] = 0;
    /* a .jsonl name means the objects' "text" strings with or without documents: a single
     * prompt is the file's one object (man sequoia-run(1), --prompt-text) */
    int jsonl = ends_with(path, ".jsonl");
    if (jsonl)
        rc = jsonl_documents(tok, path, data + bom, len - bom, t, &cap, &ocap, err);
    else if (!docs)
        rc = push_document(tok, path, "", data + bom, len - bom, t, &cap, &ocap, err);
    else
        rc = paragraph_documents(tok, path, data + bom, len - bom, t, &cap, &ocap, err);
    free(data);
    if (!rc && t->n == 0)
        rc = sq_error_set(err, SQ_EDATA, "%s: no text to make tokens of", path);
    if (!rc && jsonl && !docs && t->sequences > 1)
        rc = sq_error_set(err, SQ_EUSAGE, "%s: holds %lld JSON lines; without --batch a "
                          ".jsonl prompt holds one (use --batch %lld to decode them separately)",
                          path, (long long)t->sequences, (long long)t->sequences);
    if (rc) {
        sq_tokens_free(t);
        return rc;
    }
    *out = t;
    return SQ_OK;
}
