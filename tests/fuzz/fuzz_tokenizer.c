/* Fuzz harness: a Hugging Face tokenizer.json and a text (libsequoia/text/tokenizer.h).
 * The input is the tokenizer.json, a NUL byte, then the text (a JSON text holds no raw NUL);
 * without a NUL it is all tokenizer.json and the text is a fixed sample.
 * Oracle: a failure has a message; a tokenizer that loads encodes the text (with and without
 * special tokens) to ids inside its vocabulary, or refuses it with a message; those ids decode
 * to NUL-terminated UTF-8 of the length returned; ids made of the text's bytes decode or are
 * refused with a message. */
#include <stdlib.h>
#include <string.h>

#include "libsequoia/text/tokenizer.h"
#include "tests/fuzz/fuzz_util.h"

static int valid_utf8(const char *s, size_t n)
{
    for (size_t i = 0; i < n;) {
        unsigned char c = (unsigned char)s[i];
        size_t k = c < 0x80 ? 1 : (c >= 0xc2 && c <= 0xdf) ? 2 : (c >= 0xe0 && c <= 0xef) ? 3
                 : (c >= 0xf0 && c <= 0xf4) ? 4 : 0;
        if (!k || i + k > n)
            return 0;
        for (size_t j = 1; j < k; j++)
            if (((unsigned char)s[i + j] & 0xc0) != 0x80)
                return 0;
        i += k;
    }
    return 1;
}

static void check_decode(const sq_tokenizer *t, const int32_t *ids, size_t n, int must_work)
{
    for (int skip = 0; skip < 2; skip++) {
        char *text = NULL;
        size_t len = 0;
        sq_error err = {0};
        int rc = sq_tokenizer_decode(t, ids, n, skip, &text, &len, &err);
        if (rc == SQ_OK) {
            if (!text || text[len] != 0 || !valid_utf8(text, len))
                abort();
            free(text);
        } else if (must_work || !err.msg[0] || text) {
            abort();
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *nul = memchr(data, 0, size);
    size_t json_len = nul ? (size_t)(nul - data) : size;
    const char *text = nul ? (const char *)nul + 1 : "Hello world! <s> 123 \xc3\xa9\xe2\x96\x81 \n\n";
    size_t text_len = nul ? size - json_len - 1 : strlen(text);
    const char *path = fz_scratch_file("tokenizer.json", data, json_len);
    sq_tokenizer *t = NULL;
    sq_error err = {0};
    if (sq_tokenizer_load(path, &t, &err) != SQ_OK) {
        if (!err.msg[0] || t)
            abort();
        return 0;
    }
    int vocab = sq_tokenizer_vocab_size(t);
    if (vocab < 1)
        abort();
    int n_eos = 0;
    const int32_t *eos = sq_tokenizer_eos(t, &n_eos);
    for (int i = 0; i < n_eos; i++)
        if (eos[i] < 0 || eos[i] >= vocab)
            abort();
    if (sq_tokenizer_bos(t) < -1 || sq_tokenizer_bos(t) >= vocab)
        abort();
    for (int special = 0; special < 2; special++) {
        int32_t *ids = NULL;
        size_t n = 0;
        sq_error e2 = {0};
        int rc = sq_tokenizer_encode(t, text, text_len, special, &ids, &n, &e2);
        if (rc != SQ_OK) {
            if (!e2.msg[0] || ids)
                abort();
            continue;
        }
        for (size_t i = 0; i < n; i++)
            if (ids[i] < 0 || ids[i] >= vocab)
                abort();
        check_decode(t, ids, n, 1);
        free(ids);
    }
    /* Arbitrary ids: the text's bytes, four at a time, folded near the vocabulary. */
    size_t n_raw = text_len / 4;
    int32_t *raw = malloc((n_raw ? n_raw : 1) * sizeof *raw);
    if (!raw)
        abort();
    for (size_t i = 0; i < n_raw; i++) {
        uint32_t v;
        memcpy(&v, text + 4 * i, 4);
        raw[i] = (int32_t)(v % ((uint32_t)vocab + 2u)) - 1;
    }
    check_decode(t, raw, n_raw, 0);
    free(raw);
    if (!sq_tokenizer_same(t, t))
        abort();
    sq_tokenizer_free(t);
    return 0;
}
