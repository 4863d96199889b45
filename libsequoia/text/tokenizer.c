/* Tokenizers of Hugging Face model directories (libsequoia/text/tokenizer.h; the algorithm, what
 * is supported and how it matches Hugging Face's `tokenizers` are in docs/tokenizer.md).
 *
 * Encoding follows the `tokenizers` pipeline:
 *   1. added tokens with normalized=false are matched in the raw text (leftmost, longest;
 *      single_word, lstrip, rstrip as Hugging Face applies them);
 *   2. every other section is normalized (Sequence, Prepend, Replace, NFC/NFKC/NFD/NFKD, Strip),
 *      and the added tokens with normalized=true are matched in the normalized text;
 *   3. the pre-tokenizer splits what is left into words (Split with a PCRE2 regex or a string
 *      and its five behaviours, ByteLevel, Metaspace, Sequence);
 *   4. BPE turns every word into ids: the characters' ids (byte_fallback: <0xNN> tokens; else
 *      the unknown token, fused when fuse_unk), then merges by rank, lowest rank first and the
 *      leftmost on ties, with a binary heap (a whole SentencePiece-style text is one word);
 *      words of byte-level models repeat, so a per-call cache keeps their ids;
 *   5. the post-processor (TemplateProcessing) adds BOS/EOS when add_special is set.
 * Decoding runs the decoder chain (ByteLevel, Metaspace, ByteFallback, Fuse, Strip, Replace,
 * Sequence) over the tokens of the ids. */
#define PCRE2_CODE_UNIT_WIDTH 8

#include "libsequoia/text/tokenizer.h"

#include <limits.h>
#include <pcre2.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <utf8proc.h>

#include "libsequoia/base/io.h"
#include "libsequoia/base/json.h"
#include "libsequoia/base/utf8.h"
#include "libsequoia/base/sha256.h"

#define TOK_MAX_IDS (1 << 24)      /* largest vocabulary accepted (ids 0 .. 2^24-1)        */
#define TOK_MAX_TOKEN_BYTES 4096   /* longest token string                                 */
#define CACHE_WORD_MAX 64          /* words up to this many bytes go to the per-call cache */
#define CACHE_MAX_ENTRIES (1u << 16)

/* ---- small helpers ------------------------------------------------------------------------ */

typedef struct {
    char  *p;
    size_t n, cap;
} buf;

static int buf_reserve(buf *b, size_t extra)
{
    if (b->n + extra + 1 <= b->cap)
        return 0;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->n + extra + 1)
        cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p)
        return -1;
    b->p = p;
    b->cap = cap;
    return 0;
}

static int buf_add(buf *b, const void *s, size_t n)
{
    if (buf_reserve(b, n))
        return -1;
    if (n)
        memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
    return 0;
}

typedef struct {
    int32_t *v;
    size_t   n, cap;
} ivec;

static int ivec_push(ivec *a, int32_t x)
{
    if (a->n == a->cap) {
        size_t cap = a->cap ? a->cap * 2 : 64;
        int32_t *v = realloc(a->v, cap * sizeof *v);
        if (!v)
            return -1;
        a->v = v;
        a->cap = cap;
    }
    a->v[a->n++] = x;
    return 0;
}

static uint64_t hash_bytes(const void *data, size_t n)
{
    const unsigned char *p = data;
    uint64_t h = 0xcbf29ce484222325ull ^ n;
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 0x100000001b3ull;
    return h ^ (h >> 29);
}

static uint64_t hash_u64(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    return x ^ (x >> 33);
}

/* Offset of the first invalid byte, or len when all of s is UTF-8. */
static size_t utf8_check(const char *s, size_t len)
{
    for (size_t i = 0; i < len;) {
        size_t k = sq_utf8_len((const unsigned char *)s + i, len - i);
        if (!k)
            return i;
        i += k;
    }
    return len;
}

/* Length of the character at p in valid UTF-8. */
static size_t utf8_clen(unsigned char c)
{
    return c < 0x80 ? 1 : c < 0xe0 ? 2 : c < 0xf0 ? 3 : 4;
}

static uint32_t utf8_decode(const char *s, size_t *k)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t n = utf8_clen(p[0]);
    *k = n;
    if (n == 1)
        return p[0];
    if (n == 2)
        return ((p[0] & 0x1fu) << 6) | (p[1] & 0x3fu);
    if (n == 3)
        return ((p[0] & 0x0fu) << 12) | ((p[1] & 0x3fu) << 6) | (p[2] & 0x3fu);
    return ((p[0] & 0x07u) << 18) | ((p[1] & 0x3fu) << 12) | ((p[2] & 0x3fu) << 6) | (p[3] & 0x3fu);
}

static size_t utf8_encode(uint32_t c, char *out)
{
    if (c < 0x80) {
        out[0] = (char)c;
        return 1;
    }
    if (c < 0x800) {
        out[0] = (char)(0xc0 | (c >> 6));
        out[1] = (char)(0x80 | (c & 0x3f));
        return 2;
    }
    if (c < 0x10000) {
        out[0] = (char)(0xe0 | (c >> 12));
        out[1] = (char)(0x80 | ((c >> 6) & 0x3f));
        out[2] = (char)(0x80 | (c & 0x3f));
        return 3;
    }
    out[0] = (char)(0xf0 | (c >> 18));
    out[1] = (char)(0x80 | ((c >> 12) & 0x3f));
    out[2] = (char)(0x80 | ((c >> 6) & 0x3f));
    out[3] = (char)(0x80 | (c & 0x3f));
    return 4;
}

/* Rust's char::is_whitespace: the Unicode White_Space property. */
static int is_white(uint32_t c)
{
    return (c >= 9 && c <= 13) || c == 32 || c == 0x85 || c == 0xa0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f ||
           c == 0x205f || c == 0x3000;
}

/* Rust's char::is_alphanumeric, by general category (letters and numbers). */
static int is_alnum_cp(uint32_t c)
{
    utf8proc_category_t k = utf8proc_category((utf8proc_int32_t)c);
    return (k >= UTF8PROC_CATEGORY_LU && k <= UTF8PROC_CATEGORY_LO) ||
           (k >= UTF8PROC_CATEGORY_ND && k <= UTF8PROC_CATEGORY_NO);
}

/* Appends s[0..n) to b with every invalid UTF-8 sequence replaced by U+FFFD (the maximal
 * subpart rule of Rust's String::from_utf8_lossy and the WHATWG decoder). */
static int buf_add_lossy(buf *b, const char *s, size_t n)
{
    for (size_t i = 0; i < n;) {
        const unsigned char *p = (const unsigned char *)s + i;
        size_t k = sq_utf8_len(p, n - i);
        if (k) {
            if (buf_add(b, p, k))
                return -1;
            i += k;
            continue;
        }
        /* The maximal subpart: a lead byte followed by the continuation bytes that could
         * still have completed it. */
        size_t skip = 1;
        unsigned c = p[0];
        size_t want = (c >= 0xc2 && c <= 0xdf) ? 2 : (c >= 0xe0 && c <= 0xef) ? 3
                    : (c >= 0xf0 && c <= 0xf4) ? 4 : 1;
        for (size_t j = 1; j < want && i + j < n; j++) {
            unsigned lo = 0x80, hi = 0xbf, d = p[j];
            if (j == 1) {
                if (c == 0xe0) lo = 0xa0;
                else if (c == 0xed) hi = 0x9f;
                else if (c == 0xf0) lo = 0x90;
                else if (c == 0xf4) hi = 0x8f;
            }
            if (d < lo || d > hi)
                break;
            skip = j + 1;
        }
        if (buf_add(b, "\xef\xbf\xbd", 3))
            return -1;
        i += skip;
    }
    return 0;
}

/* ---- patterns: a literal string or a PCRE2 regex ------------------------------------------ */

typedef struct {
    char        *lit;      /* literal pattern (when re is NULL) */
    size_t       lit_len;
    pcre2_code  *re;
    char        *source;   /* the regex text, for messages and the fingerprint */
} pattern;

static void pattern_free(pattern *p)
{
    free(p->lit);
    free(p->source);
    if (p->re)
        pcre2_code_free(p->re);
    memset(p, 0, sizeof *p);
}

/* Compiles {"String": s} or {"Regex": r}. */
static int pattern_parse(const cJSON *obj, pattern *p, const char *file, const char *ctx,
                         sq_error *err)
{
    memset(p, 0, sizeof *p);
    if (!cJSON_IsObject(obj))
        return sq_error_set(err, SQ_EDATA, "%s: %s: expected an object {\"String\": ...} or "
                            "{\"Regex\": ...}", file, ctx);
    const cJSON *s = cJSON_GetObjectItemCaseSensitive(obj, "String");
    const cJSON *r = cJSON_GetObjectItemCaseSensitive(obj, "Regex");
    if (cJSON_IsString(s)) {
        p->lit_len = strlen(s->valuestring);
        if (p->lit_len == 0)
            return sq_error_set(err, SQ_EDATA, "%s: %s.String: empty pattern", file, ctx);
        p->lit = strdup(s->valuestring);
        return p->lit ? SQ_OK : sq_error_oom(err, "tokenizer pattern");
    }
    if (cJSON_IsString(r)) {
        int ec = 0;
        PCRE2_SIZE off = 0;
        p->source = strdup(r->valuestring);
        if (!p->source)
            return sq_error_oom(err, "tokenizer pattern");
        p->re = pcre2_compile((PCRE2_SPTR)r->valuestring, PCRE2_ZERO_TERMINATED,
                              PCRE2_UTF | PCRE2_UCP | PCRE2_NO_UTF_CHECK, &ec, &off, NULL);
        if (!p->re) {
            char msg[256];
            pcre2_get_error_message(ec, (PCRE2_UCHAR *)msg, sizeof msg);
            return sq_error_set(err, SQ_EDATA, "%s: %s.Regex: not a regular expression PCRE2 "
                                "accepts (at offset %zu: %s)", file, ctx, (size_t)off, msg);
        }
        (void)pcre2_jit_compile(p->re, PCRE2_JIT_COMPLETE);   /* the interpreter otherwise */
        return SQ_OK;
    }
    return sq_error_set(err, SQ_EDATA, "%s: %s: expected {\"String\": \"...\"} or "
                        "{\"Regex\": \"...\"}", file, ctx);
}

/* memmem (a GNU extension). */
static const char *find_bytes(const char *h, size_t hn, const char *nd, size_t nn)
{
    while (hn >= nn) {
        const char *c = memchr(h, nd[0], hn - nn + 1);
        if (!c)
            return NULL;
        if (memcmp(c, nd, nn) == 0)
            return c;
        hn -= (size_t)(c - h) + 1;
        h = c + 1;
    }
    return NULL;
}

/* Per-call matching state. */
typedef struct {
    pcre2_match_data *md;
    int               failed;   /* a match error (resource limit) happened */
} matcher;

/* The next match of p in s[0..n) at or after `from`: 1 with [*ms, *me), 0 when none. */
static int pattern_next(const pattern *p, matcher *m, const char *s, size_t n, size_t from,
                        size_t *ms, size_t *me)
{
    if (!p->re) {
        if (from > n || n - from < p->lit_len)
            return 0;
        const char *hit = find_bytes(s + from, n - from, p->lit, p->lit_len);
        if (!hit)
            return 0;
        *ms = (size_t)(hit - s);
        *me = *ms + p->lit_len;
        return 1;
    }
    if (!m->md) {
        m->md = pcre2_match_data_create(8, NULL);
        if (!m->md) {
            m->failed = 1;
            return 0;
        }
    }
    for (;;) {
        if (from > n)
            return 0;
        int rc = pcre2_match(p->re, (PCRE2_SPTR)s, n, from, PCRE2_NO_UTF_CHECK, m->md, NULL);
        if (rc == PCRE2_ERROR_NOMATCH)
            return 0;
        if (rc < 0) {
            m->failed = 1;
            return 0;
        }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(m->md);
        *ms = ov[0];
        *me = ov[1];
        if (*me > *ms)
            return 1;
        /* An empty match splits nothing: look again one character later. */
        from = *ms + (*ms < n ? utf8_clen((unsigned char)s[*ms]) : 1);
    }
}

/* ---- the tokenizer ------------------------------------------------------------------------ */

enum { NORM_PREPEND, NORM_REPLACE, NORM_NFC, NORM_NFKC, NORM_NFD, NORM_NFKD, NORM_STRIP };
enum { PT_SPLIT, PT_BYTELEVEL, PT_METASPACE };
enum { DEC_BYTELEVEL, DEC_METASPACE, DEC_BYTEFALLBACK, DEC_FUSE, DEC_STRIP, DEC_REPLACE };
enum { BEH_REMOVED, BEH_ISOLATED, BEH_MERGED_PREV, BEH_MERGED_NEXT, BEH_CONTIGUOUS };
enum { PREPEND_ALWAYS, PREPEND_FIRST, PREPEND_NEVER };

typedef struct {
    int     kind;
    pattern pat;        /* Replace, Split                                  */
    char   *str;        /* Prepend, Replace content, Metaspace replacement */
    size_t  str_len;
    int     a, b;       /* Strip: left/right; Split: behavior/invert; Metaspace: scheme/split;
                           ByteLevel: add_prefix_space/use_regex; Strip decoder: start/stop */
} op;

typedef struct {
    char   *content;     /* the token's text (decoding) */
    size_t  len;
    char   *pat;         /* what is matched: the content, normalized when normalized=true */
    size_t  pat_len;     /* (pat is content's own memory unless it was normalized) */
    int32_t id;
    unsigned char special, lstrip, rstrip, single_word, normalized;
} added_token;

typedef struct {
    const char *s;
    uint32_t    len;
} sv;

struct sq_tokenizer {
    char    *file;           /* the tokenizer.json path, for messages */
    int32_t  n_ids;          /* max id + 1 */
    sv      *tok;            /* [n_ids] text of each id (added tokens over the model's) */
    unsigned char *special;  /* [n_ids] 1 for special added tokens */
    int32_t  n_model;        /* model ids: 0 .. n_model-1 */
    sv      *model;          /* [n_model] */
    uint32_t *vmap;          /* open addressing: model id + 1, 0 empty */
    uint32_t  vmask;
    uint64_t *mkey;          /* merges: (left << 32 | right) + 1, 0 empty */
    uint64_t *mval;          /* rank << 32 | new id */
    uint32_t  mmask;
    int32_t   n_merges;
    int       byte_fallback, fuse_unk, ignore_merges;
    int32_t   unk_id;
    int32_t   byte_tok[256]; /* <0xNN> ids, -1 missing */
    added_token *added;
    int          n_added;
    int32_t     *added_by_byte[256];   /* indices into added, longest first, per first byte */
    int          n_by_byte[256][2];    /* [byte][normalized] counts, for a quick skip */
    int          added_by_byte_n[256];
    op  *norm;  int n_norm;
    op  *pre;   int n_pre;
    op  *dec;   int n_dec;
    int  has_decoder;
    int32_t *prefix; int n_prefix;     /* the post-processor's ids before and after the text */
    int32_t *suffix; int n_suffix;
    int32_t *eos; int n_eos;
    int32_t  bos;
    char    *arena;               /* the token strings */
    uint8_t  digest[SQ_SHA256_BYTES];
};

static void ops_free(op *o, int n)
{
    for (int i = 0; i < n; i++) {
        pattern_free(&o[i].pat);
        free(o[i].str);
    }
    free(o);
}

void sq_tokenizer_free(sq_tokenizer *t)
{
    if (!t)
        return;
    free(t->file);
    free(t->tok);
    free(t->special);
    free(t->model);
    free(t->vmap);
    free(t->mkey);
    free(t->mval);
    for (int i = 0; i < t->n_added; i++) {
        if (t->added[i].pat != t->added[i].content)
            free(t->added[i].pat);
        free(t->added[i].content);
    }
    free(t->added);
    for (int i = 0; i < 256; i++)
        free(t->added_by_byte[i]);
    ops_free(t->norm, t->n_norm);
    ops_free(t->pre, t->n_pre);
    ops_free(t->dec, t->n_dec);
    free(t->prefix);
    free(t->suffix);
    free(t->eos);
    free(t->arena);
    free(t);
}

static int32_t vocab_find(const sq_tokenizer *t, const char *s, size_t n)
{
    if (!t->vmap)
        return -1;
    uint32_t i = (uint32_t)hash_bytes(s, n) & t->vmask;
    for (;;) {
        uint32_t v = t->vmap[i];
        if (!v)
            return -1;
        const sv *e = &t->model[v - 1];
        if (e->len == n && memcmp(e->s, s, n) == 0)
            return (int32_t)(v - 1);
        i = (i + 1) & t->vmask;
    }
}

static int merge_find(const sq_tokenizer *t, int32_t a, int32_t b, uint32_t *rank,
                      int32_t *new_id)
{
    if (!t->mkey)
        return 0;
    uint64_t key = (((uint64_t)(uint32_t)a << 32) | (uint32_t)b) + 1;
    uint32_t i = (uint32_t)hash_u64(key) & t->mmask;
    for (;;) {
        uint64_t k = t->mkey[i];
        if (!k)
            return 0;
        if (k == key) {
            *rank = (uint32_t)(t->mval[i] >> 32);
            *new_id = (int32_t)(uint32_t)t->mval[i];
            return 1;
        }
        i = (i + 1) & t->mmask;
    }
}

/* Any token text: an added token first (by content), then the model's vocabulary. */
static int32_t token_find(const sq_tokenizer *t, const char *s)
{
    size_t n = strlen(s);
    for (int i = 0; i < t->n_added; i++)
        if (t->added[i].len == n && memcmp(t->added[i].content, s, n) == 0)
            return t->added[i].id;
    return vocab_find(t, s, n);
}

/* ---- loading ------------------------------------------------------------------------------ */

typedef struct {
    const char *file;
    sq_error   *err;
    sq_sha256   h;
} loadctx;

static int get_bool(const cJSON *obj, const char *key, int dflt, int *out, const char *file,
                    const char *ctx, sq_error *err)
{
    const cJSON *v = sq_json_field(obj, key);
    if (!v) {
        *out = dflt;
        return SQ_OK;
    }
    if (!cJSON_IsBool(v))
        return sq_error_set(err, SQ_EDATA, "%s: %s.%s: expected true or false", file, ctx, key);
    *out = cJSON_IsTrue(v);
    return SQ_OK;
}

static int get_str(const cJSON *obj, const char *key, int required, const char **out,
                   const char *file, const char *ctx, sq_error *err)
{
    return sq_json_get_string(obj, key, required, out, file, ctx, err);
}

static int ops_add(op **ops, int *n, op **out, sq_error *err)
{
    op *o = realloc(*ops, (size_t)(*n + 1) * sizeof *o);
    if (!o)
        return sq_error_oom(err, "tokenizer");
    *ops = o;
    memset(&o[*n], 0, sizeof o[*n]);
    *out = &o[(*n)++];
    return SQ_OK;
}

static int dup_str(const char *s, char **out, size_t *len, sq_error *err)
{
    *len = strlen(s);
    *out = strdup(s);
    return *out ? SQ_OK : sq_error_oom(err, "tokenizer");
}

/* A component of one kind (normalizer, pre-tokenizer, decoder) as the parsers read it. */
typedef int (*component_parser)(sq_tokenizer *t, const cJSON *n, const char *ctx, int depth,
                                loadctx *L);

/* The common head of a normalizer, pre-tokenizer, decoder or post-processor: *type is NULL
 * when n is absent or null (nothing to do), else its "type" string; Sequences nest at most 8
 * deep. */
static int component_type(const cJSON *n, const char *ctx, int depth, loadctx *L,
                          const char **type)
{
    *type = NULL;
    if (!n || cJSON_IsNull(n))
        return SQ_OK;
    if (depth > 8)
        return sq_error_set(L->err, SQ_EDATA, "%s: %s: Sequences nested too deep", L->file, ctx);
    if (!cJSON_IsObject(n))
        return sq_error_set(L->err, SQ_EDATA, "%s: %s: expected an object", L->file, ctx);
    return get_str(n, "type", 1, type, L->file, ctx, L->err);
}

/* A "Sequence" of one kind: every element of n[key], in order, through `parse`. */
static int parse_sequence(sq_tokenizer *t, const cJSON *n, const char *key, const char *ctx,
                          int depth, loadctx *L, component_parser parse)
{
    const cJSON *list = sq_json_field(n, key);
    if (!cJSON_IsArray(list))
        return sq_error_set(L->err, SQ_EDATA, "%s: %s.%s: expected an array", L->file, ctx, key);
    int i = 0;
    for (const cJSON *c = list->child; c; c = c->next, i++) {
        char sub[256];
        snprintf(sub, sizeof sub, "%s.%s[%d]", ctx, key, i);
        int rc = parse(t, c, sub, depth + 1, L);
        if (rc)
            return rc;
    }
    return SQ_OK;
}

/* A "Replace" normalizer or decoder: pattern -> content, appended to ops as `kind`. */
static int parse_replace(const cJSON *n, const char *ctx, op **ops, int *n_ops, int kind,
                         loadctx *L)
{
    const char *s = NULL;
    char sub[256];
    snprintf(sub, sizeof sub, "%s.pattern", ctx);
    op *o = NULL;
    int rc;
    if ((rc = get_str(n, "content", 1, &s, L->file, ctx, L->err)) ||
        (rc = ops_add(ops, n_ops, &o, L->err)))
        return rc;
    o->kind = kind;
    if ((rc = pattern_parse(sq_json_field(n, "pattern"), &o->pat, L->file, sub, L->err)))
        return rc;
    return dup_str(s, &o->str, &o->str_len, L->err);
}

static int parse_normalizer(sq_tokenizer *t, const cJSON *n, const char *ctx, int depth,
                            loadctx *L)
{
    const char *file = L->file;
    sq_error *err = L->err;
    const char *type;
    int rc = component_type(n, ctx, depth, L, &type);
    if (rc || !type)
        return rc;
    if (strcmp(type, "Sequence") == 0)
        return parse_sequence(t, n, "normalizers", ctx, depth, L, parse_normalizer);
    op *o = NULL;
    if (strcmp(type, "Prepend") == 0) {
        const char *s = NULL;
        if ((rc = get_str(n, "prepend", 1, &s, file, ctx, err)) ||
            (rc = ops_add(&t->norm, &t->n_norm, &o, err)))
            return rc;
        o->kind = NORM_PREPEND;
        return dup_str(s, &o->str, &o->str_len, err);
    }
    if (strcmp(type, "Replace") == 0)
        return parse_replace(n, ctx, &t->norm, &t->n_norm, NORM_REPLACE, L);
    static const struct { const char *name; int kind; } uni[] = {
        {"NFC", NORM_NFC}, {"NFKC", NORM_NFKC}, {"NFD", NORM_NFD}, {"NFKD", NORM_NFKD}};
    for (size_t i = 0; i < sizeof uni / sizeof uni[0]; i++)
        if (strcmp(type, uni[i].name) == 0) {
            if ((rc = ops_add(&t->norm, &t->n_norm, &o, err)))
                return rc;
            o->kind = uni[i].kind;
            return SQ_OK;
        }
    if (strcmp(type, "Strip") == 0) {
        int l = 1, r = 1;
        if ((rc = get_bool(n, "strip_left", 1, &l, file, ctx, err)) ||
            (rc = get_bool(n, "strip_right", 1, &r, file, ctx, err)) ||
            (rc = ops_add(&t->norm, &t->n_norm, &o, err)))
            return rc;
        o->kind = NORM_STRIP;
        o->a = l;
        o->b = r;
        return SQ_OK;
    }
    return sq_error_set(err, SQ_EDATA, "%s: %s.type: normalizer \"%s\" is not supported (supported: "
                        "Sequence, Prepend, Replace, NFC, NFKC, NFD, NFKD, Strip)", file, ctx, type);
}

static int parse_scheme(const cJSON *n, int *scheme, const char *file, const char *ctx,
                        sq_error *err)
{
    const char *s = NULL;
    int rc = get_str(n, "prepend_scheme", 0, &s, file, ctx, err);
    if (rc)
        return rc;
    if (!s) {
        /* Files older than tokenizers 0.14 say add_prefix_space instead. */
        int add = 1;
        if ((rc = get_bool(n, "add_prefix_space", 1, &add, file, ctx, err)))
            return rc;
        *scheme = add ? PREPEND_ALWAYS : PREPEND_NEVER;
        return SQ_OK;
    }
    if (strcmp(s, "always") == 0)
        *scheme = PREPEND_ALWAYS;
    else if (strcmp(s, "first") == 0)
        *scheme = PREPEND_FIRST;
    else if (strcmp(s, "never") == 0)
        *scheme = PREPEND_NEVER;
    else
        return sq_error_set(err, SQ_EDATA, "%s: %s.prepend_scheme: \"%s\" is not always, first "
                            "or never", file, ctx, s);
    return SQ_OK;
}

static int parse_replacement(const cJSON *n, op *o, const char *file, const char *ctx,
                             sq_error *err)
{
    const char *s = NULL;
    int rc = get_str(n, "replacement", 1, &s, file, ctx, err);
    if (rc)
        return rc;
    size_t k = s[0] ? utf8_clen((unsigned char)s[0]) : 0;
    if (k == 0 || strlen(s) != k)
        return sq_error_set(err, SQ_EDATA, "%s: %s.replacement: expected one character", file, ctx);
    return dup_str(s, &o->str, &o->str_len, err);
}

static int parse_pretokenizer(sq_tokenizer *t, const cJSON *n, const char *ctx, int depth,
                              loadctx *L)
{
    const char *file = L->file;
    sq_error *err = L->err;
    const char *type;
    int rc = component_type(n, ctx, depth, L, &type);
    if (rc || !type)
        return rc;
    op *o = NULL;
    if (strcmp(type, "Sequence") == 0)
        return parse_sequence(t, n, "pretokenizers", ctx, depth, L, parse_pretokenizer);
    if (strcmp(type, "Split") == 0) {
        const char *beh = NULL;
        int invert = 0;
        char sub[256];
        snprintf(sub, sizeof sub, "%s.pattern", ctx);
        if ((rc = get_str(n, "behavior", 1, &beh, file, ctx, err)) ||
            (rc = get_bool(n, "invert", 0, &invert, file, ctx, err)) ||
            (rc = ops_add(&t->pre, &t->n_pre, &o, err)))
            return rc;
        o->kind = PT_SPLIT;
        o->b = invert;
        static const char *names[] = {"Removed", "Isolated", "MergedWithPrevious",
                                      "MergedWithNext", "Contiguous"};
        o->a = -1;
        for (int i = 0; i < 5; i++)
            if (strcmp(beh, names[i]) == 0)
                o->a = i;
        if (o->a < 0)
            return sq_error_set(err, SQ_EDATA, "%s: %s.behavior: \"%s\" is not Removed, Isolated, "
                                "MergedWithPrevious, MergedWithNext or Contiguous", file, ctx, beh);
        return pattern_parse(sq_json_field(n, "pattern"), &o->pat, file, sub, err);
    }
    if (strcmp(type, "ByteLevel") == 0) {
        int aps = 1, rx = 1;
        if ((rc = get_bool(n, "add_prefix_space", 1, &aps, file, ctx, err)) ||
            (rc = get_bool(n, "use_regex", 1, &rx, file, ctx, err)) ||
            (rc = ops_add(&t->pre, &t->n_pre, &o, err)))
            return rc;
        o->kind = PT_BYTELEVEL;
        o->a = aps;
        o->b = rx;
        if (rx) {
            /* The GPT-2 pattern of the ByteLevel pre-tokenizer. */
            cJSON *p = cJSON_CreateObject();
            cJSON_AddStringToObject(p, "Regex", "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| "
                                    "?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+");
            rc = pattern_parse(p, &o->pat, file, ctx, err);
            cJSON_Delete(p);
        }
        return rc;
    }
    if (strcmp(type, "Metaspace") == 0) {
        int split = 1;
        if ((rc = ops_add(&t->pre, &t->n_pre, &o, err)))
            return rc;
        o->kind = PT_METASPACE;
        if ((rc = parse_replacement(n, o, file, ctx, err)) ||
            (rc = parse_scheme(n, &o->a, file, ctx, err)) ||
            (rc = get_bool(n, "split", 1, &split, file, ctx, err)))
            return rc;
        o->b = split;
        return SQ_OK;
    }
    return sq_error_set(err, SQ_EDATA, "%s: %s.type: pre-tokenizer \"%s\" is not supported "
                        "(supported: Sequence, Split, ByteLevel, Metaspace)", file, ctx, type);
}

static int parse_decoder(sq_tokenizer *t, const cJSON *n, const char *ctx, int depth, loadctx *L)
{
    const char *file = L->file;
    sq_error *err = L->err;
    const char *type;
    int rc = component_type(n, ctx, depth, L, &type);
    if (rc || !type)
        return rc;
    t->has_decoder = 1;
    op *o = NULL;
    if (strcmp(type, "Sequence") == 0)
        return parse_sequence(t, n, "decoders", ctx, depth, L, parse_decoder);
    if (strcmp(type, "ByteLevel") == 0 || strcmp(type, "ByteFallback") == 0 ||
        strcmp(type, "Fuse") == 0) {
        if ((rc = ops_add(&t->dec, &t->n_dec, &o, err)))
            return rc;
        o->kind = type[0] == 'F' ? DEC_FUSE : type[4] == 'L' ? DEC_BYTELEVEL : DEC_BYTEFALLBACK;
        return SQ_OK;
    }
    if (strcmp(type, "Metaspace") == 0) {
        if ((rc = ops_add(&t->dec, &t->n_dec, &o, err)))
            return rc;
        o->kind = DEC_METASPACE;
        if ((rc = parse_replacement(n, o, file, ctx, err)))
            return rc;
        return parse_scheme(n, &o->a, file, ctx, err);
    }
    if (strcmp(type, "Strip") == 0) {
        const char *s = NULL;
        long long start = 0, stop = 0;
        if ((rc = get_str(n, "content", 1, &s, file, ctx, err)) ||
            (rc = sq_json_get_int(n, "start", 1, 0, 1 << 20, &start, file, ctx, err)) ||
            (rc = sq_json_get_int(n, "stop", 1, 0, 1 << 20, &stop, file, ctx, err)) ||
            (rc = ops_add(&t->dec, &t->n_dec, &o, err)))
            return rc;
        size_t k = s[0] ? utf8_clen((unsigned char)s[0]) : 0;
        if (k == 0 || strlen(s) != k)
            return sq_error_set(err, SQ_EDATA, "%s: %s.content: expected one character", file, ctx);
        o->kind = DEC_STRIP;
        o->a = (int)start;
        o->b = (int)stop;
        return dup_str(s, &o->str, &o->str_len, err);
    }
    if (strcmp(type, "Replace") == 0)
        return parse_replace(n, ctx, &t->dec, &t->n_dec, DEC_REPLACE, L);
    return sq_error_set(err, SQ_EDATA, "%s: %s.type: decoder \"%s\" is not supported (supported: "
                        "Sequence, ByteLevel, Metaspace, ByteFallback, Fuse, Strip, Replace)",
                        file, ctx, type);
}

static int id_of(const cJSON *v, int32_t *id)
{
    if (!cJSON_IsNumber(v))
        return 0;
    double d = v->valuedouble;
    if (!(d >= 0 && d < TOK_MAX_IDS) || d != (double)(int32_t)d)
        return 0;
    *id = (int32_t)d;
    return 1;
}

/* Appends the ids of a template's special token to `out`. */
static int template_ids(sq_tokenizer *t, const cJSON *specials, const char *name, ivec *out,
                        const char *file, const char *ctx, sq_error *err)
{
    const cJSON *e = specials ? cJSON_GetObjectItemCaseSensitive(specials, name) : NULL;
    const cJSON *ids = e ? sq_json_field(e, "ids") : NULL;
    if (cJSON_IsArray(ids)) {
        for (const cJSON *c = ids->child; c; c = c->next) {
            int32_t id;
            if (!id_of(c, &id) || id >= t->n_ids || !t->tok[id].s)
                return sq_error_set(err, SQ_EDATA, "%s: %s.special_tokens.%s.ids: not an id of "
                                    "the vocabulary", file, ctx, name);
            if (ivec_push(out, id))
                return sq_error_oom(err, "tokenizer");
        }
        return SQ_OK;
    }
    int32_t id = token_find(t, name);
    if (id < 0)
        return sq_error_set(err, SQ_EDATA, "%s: %s: special token \"%s\" is neither in "
                            "special_tokens nor in the vocabulary", file, ctx, name);
    return ivec_push(out, id) ? sq_error_oom(err, "tokenizer") : SQ_OK;
}

static int parse_post(sq_tokenizer *t, const cJSON *n, const char *ctx, int depth, ivec *pre,
                      ivec *post, int *is_template, loadctx *L)
{
    const char *file = L->file;
    sq_error *err = L->err;
    const char *type;
    int rc = component_type(n, ctx, depth, L, &type);
    if (rc || !type)
        return rc;
    if (strcmp(type, "ByteLevel") == 0)
        return SQ_OK;   /* offsets only */
    if (strcmp(type, "Sequence") == 0) {
        const cJSON *list = sq_json_field(n, "processors");
        if (!cJSON_IsArray(list))
            return sq_error_set(err, SQ_EDATA, "%s: %s.processors: expected an array", file, ctx);
        int i = 0;
        for (const cJSON *c = list->child; c; c = c->next, i++) {
            char sub[256];
            snprintf(sub, sizeof sub, "%s.processors[%d]", ctx, i);
            if ((rc = parse_post(t, c, sub, depth + 1, pre, post, is_template, L)))
                return rc;
        }
        return SQ_OK;
    }
    if (strcmp(type, "TemplateProcessing") == 0) {
        *is_template = 1;
        const cJSON *single = sq_json_field(n, "single");
        const cJSON *specials = sq_json_field(n, "special_tokens");
        if (!cJSON_IsArray(single))
            return sq_error_set(err, SQ_EDATA, "%s: %s.single: expected an array", file, ctx);
        ivec a = {0}, b = {0};
        int seen_a = 0, i = 0;
        for (const cJSON *c = single->child; c; c = c->next, i++) {
            const cJSON *sp = sq_json_field(c, "SpecialToken");
            const cJSON *sq = sq_json_field(c, "Sequence");
            const char *id = NULL;
            char sub[256];
            snprintf(sub, sizeof sub, "%s.single[%d]", ctx, i);
            if (sp && (rc = get_str(sp, "id", 1, &id, file, sub, err)) == SQ_OK)
                rc = template_ids(t, specials, id, seen_a ? &b : &a, file, ctx, err);
            else if (!sp && sq) {
                rc = get_str(sq, "id", 1, &id, file, sub, err);
                if (!rc && (strcmp(id, "A") != 0 || seen_a))
                    rc = sq_error_set(err, SQ_EDATA, "%s: %s.Sequence.id: a single template "
                                      "holds sequence A once", file, sub);
                seen_a = 1;
            } else if (!sp) {
                rc = sq_error_set(err, SQ_EDATA, "%s: %s: expected SpecialToken or Sequence",
                                  file, sub);
            }
            if (rc) {
                free(a.v);
                free(b.v);
                return rc;
            }
        }
        if (!seen_a) {
            free(a.v);
            free(b.v);
            return sq_error_set(err, SQ_EDATA, "%s: %s.single: no Sequence A", file, ctx);
        }
        /* A later processor wraps what the earlier ones made. */
        for (size_t k = 0; k < pre->n; k++)
            if (ivec_push(&a, pre->v[k]))
                rc = SQ_ESOFTWARE;
        for (size_t k = 0; k < b.n; k++)
            if (ivec_push(post, b.v[k]))
                rc = SQ_ESOFTWARE;
        free(pre->v);
        *pre = a;
        free(b.v);
        return rc ? sq_error_oom(err, "tokenizer") : SQ_OK;
    }
    return sq_error_set(err, SQ_EDATA, "%s: %s.type: post-processor \"%s\" is not supported "
                        "(supported: TemplateProcessing, ByteLevel, Sequence)", file, ctx, type);
}

/* Rejects an object that holds a key twice (the vocabulary is checked by its hash table). */
static const cJSON *find_dup(const cJSON *node, int depth)
{
    if (depth > 64)
        return NULL;
    int n = 0;
    for (const cJSON *c = node ? node->child : NULL; c; c = c->next)
        n++;
    if (cJSON_IsObject(node) && n <= 256)
        for (const cJSON *c = node->child; c; c = c->next)
            for (const cJSON *d = node->child; d != c; d = d->next)
                if (c->string && d->string && strcmp(c->string, d->string) == 0)
                    return c;
    if (n > 256)
        return NULL;   /* a vocabulary or a merges list */
    for (const cJSON *c = node ? node->child : NULL; c; c = c->next) {
        const cJSON *x = find_dup(c, depth + 1);
        if (x)
            return x;
    }
    return NULL;
}

static int read_json(const char *file, cJSON **out, sq_error *err)
{
    char *text = NULL;
    size_t len = 0;
    *out = NULL;
    int rc = sq_file_read(file, SQ_JSON_MAX_BYTES, &text, &len, err);
    if (rc)
        return rc;
    size_t bom = 0;   /* a UTF-8 byte order mark is skipped, as sq_json_parse does (issue 27) */
    if ((rc = sq_text_bom(file, text, len, &bom, err))) {
        free(text);
        return rc;
    }
    if (bom) {
        memmove(text, text + bom, len - bom + 1);
        len -= bom;
    }
    if (len == 0) {
        free(text);
        return sq_error_set(err, SQ_EDATA, "%s: empty file, expected JSON", file);
    }
    size_t bad = utf8_check(text, len);
    if (bad < len) {
        free(text);
        return sq_error_set(err, SQ_EDATA, "%s: invalid UTF-8 at byte %zu; a JSON text must be "
                            "UTF-8", file, bad);
    }
    if (memchr(text, 0, len)) {
        free(text);
        return sq_error_set(err, SQ_EDATA, "%s: contains a NUL byte, not a JSON text", file);
    }
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(text, len + 1, &end, 1);
    if (!root) {
        const char *at = end ? end : cJSON_GetErrorPtr();
        int line = 1, col = 1;
        for (const char *p = text; at && p < at && p < text + len; p++) {
            if (*p == '\n') {
                line++;
                col = 1;
            } else {
                col++;
            }
        }
        free(text);
        return sq_error_set(err, SQ_EDATA, "%s:%d:%d: malformed JSON (or nested deeper than %d "
                            "levels)", file, line, col, CJSON_NESTING_LIMIT);
    }
    free(text);
    const cJSON *dup = find_dup(root, 0);
    if (dup) {
        rc = sq_error_set(err, SQ_EDATA, "%s: key \"%s\" appears twice in one object", file,
                          dup->string);
        cJSON_Delete(root);
        return rc;
    }
    *out = root;
    return SQ_OK;
}

static int is_pow2_cap(size_t n, uint32_t *mask)
{
    size_t cap = 16;
    while (cap < n * 2)
        cap *= 2;
    if (cap > (1u << 30))
        return -1;
    *mask = (uint32_t)(cap - 1);
    return 0;
}


static int parse_model(sq_tokenizer *t, const cJSON *model, const cJSON *added, loadctx *L)
{
    const char *file = L->file;
    sq_error *err = L->err;
    if (!cJSON_IsObject(model))
        return sq_error_set(err, SQ_EDATA, "%s: model: missing or not an object", file);
    const char *type = NULL;
    int rc = get_str(model, "type", 0, &type, file, "model", err);
    if (rc)
        return rc;
    if (!type)
        type = sq_json_field(model, "merges") ? "BPE" : "(none)";
    if (strcmp(type, "BPE") != 0)
        return sq_error_set(err, SQ_EDATA, "%s: model.type: model \"%s\" is not supported (BPE "
                            "only; WordPiece, Unigram and WordLevel are not)", file, type);
    const char *s = NULL;
    if ((rc = get_str(model, "continuing_subword_prefix", 0, &s, file, "model", err)))
        return rc;
    if (s && s[0])
        return sq_error_set(err, SQ_EDATA, "%s: model.continuing_subword_prefix: \"%s\" is not "
                            "supported (only an empty prefix)", file, s);
    s = NULL;
    if ((rc = get_str(model, "end_of_word_suffix", 0, &s, file, "model", err)))
        return rc;
    if (s && s[0])
        return sq_error_set(err, SQ_EDATA, "%s: model.end_of_word_suffix: \"%s\" is not "
                            "supported (only an empty suffix)", file, s);
    const cJSON *drop = sq_json_field(model, "dropout");
    if (drop && !(cJSON_IsNumber(drop) && drop->valuedouble == 0))
        return sq_error_set(err, SQ_EDATA, "%s: model.dropout: BPE dropout is not supported "
                            "(it makes encoding random)", file);
    if ((rc = get_bool(model, "byte_fallback", 0, &t->byte_fallback, file, "model", err)) ||
        (rc = get_bool(model, "fuse_unk", 0, &t->fuse_unk, file, "model", err)) ||
        (rc = get_bool(model, "ignore_merges", 0, &t->ignore_merges, file, "model", err)))
        return rc;

    const cJSON *vocab = sq_json_field(model, "vocab");
    if (!cJSON_IsObject(vocab))
        return sq_error_set(err, SQ_EDATA, "%s: model.vocab: missing or not an object", file);
    /* Sizes and the string arena. */
    size_t n_vocab = 0, bytes = 0;
    int32_t max_id = -1;
    for (const cJSON *c = vocab->child; c; c = c->next) {
        int32_t id;
        if (!id_of(c, &id))
            return sq_error_set(err, SQ_EDATA, "%s: model.vocab.\"%.64s\": not an id (an integer "
                                "in 0..%d)", file, c->string, TOK_MAX_IDS - 1);
        size_t len = strlen(c->string);
        if (len == 0 || len > TOK_MAX_TOKEN_BYTES)
            return sq_error_set(err, SQ_EDATA, "%s: model.vocab: token %d is empty or longer than "
                                "%d bytes", file, id, TOK_MAX_TOKEN_BYTES);
        n_vocab++;
        bytes += len + 1;
        if (id > max_id)
            max_id = id;
    }
    int i = 0;
    for (const cJSON *c = added ? added->child : NULL; c; c = c->next, i++) {
        const cJSON *content = sq_json_field(c, "content");
        int32_t id;
        if (!id_of(sq_json_field(c, "id"), &id))
            return sq_error_set(err, SQ_EDATA, "%s: added_tokens[%d].id: missing or not an id "
                                "(an integer in 0..%d)", file, i, TOK_MAX_IDS - 1);
        if (!cJSON_IsString(content) || !content->valuestring[0] ||
            strlen(content->valuestring) > TOK_MAX_TOKEN_BYTES)
            return sq_error_set(err, SQ_EDATA, "%s: added_tokens[%d].content: missing, empty or "
                                "longer than %d bytes", file, i, TOK_MAX_TOKEN_BYTES);
        if (id > max_id)
            max_id = id;
    }
    if (max_id < 0)
        return sq_error_set(err, SQ_EDATA, "%s: model.vocab: empty", file);
    t->n_model = 0;
    t->n_ids = max_id + 1;
    t->arena = malloc(bytes ? bytes : 1);
    t->tok = calloc((size_t)t->n_ids, sizeof *t->tok);
    t->special = calloc((size_t)t->n_ids, 1);
    t->model = calloc((size_t)t->n_ids, sizeof *t->model);
    if (is_pow2_cap(n_vocab, &t->vmask))
        return sq_error_set(err, SQ_EDATA, "%s: model.vocab: too large", file);
    t->vmap = calloc((size_t)t->vmask + 1, sizeof *t->vmap);
    if (!t->arena || !t->tok || !t->special || !t->model || !t->vmap)
        return sq_error_oom(err, "tokenizer vocabulary");
    char *ap = t->arena;
    for (const cJSON *c = vocab->child; c; c = c->next) {
        int32_t id = (int32_t)c->valuedouble;
        size_t len = strlen(c->string);
        if (t->model[id].s)
            return sq_error_set(err, SQ_EDATA, "%s: model.vocab: id %d is given to \"%.64s\" and "
                                "\"%.64s\"", file, id, t->model[id].s, c->string);
        memcpy(ap, c->string, len + 1);
        t->model[id].s = ap;
        t->model[id].len = (uint32_t)len;
        ap += len + 1;
        uint32_t h = (uint32_t)hash_bytes(c->string, len) & t->vmask;
        while (t->vmap[h]) {
            const sv *e = &t->model[t->vmap[h] - 1];
            if (e->len == len && memcmp(e->s, c->string, len) == 0)
                return sq_error_set(err, SQ_EDATA, "%s: model.vocab: \"%.64s\" appears twice",
                                    file, c->string);
            h = (h + 1) & t->vmask;
        }
        t->vmap[h] = (uint32_t)id + 1;
        if (id + 1 > t->n_model)
            t->n_model = id + 1;
        t->tok[id] = t->model[id];
    }
    for (int32_t id = 0; id < t->n_model; id++) {
        sq_sha256_update(&L->h, &id, sizeof id);
        if (t->model[id].s)
            sq_sha256_update(&L->h, t->model[id].s, t->model[id].len + 1);
    }
    /* <0xNN> tokens for byte_fallback. */
    for (int b = 0; b < 256; b++) {
        char name[8];
        snprintf(name, sizeof name, "<0x%02X>", b);
        t->byte_tok[b] = vocab_find(t, name, 6);
    }
    t->unk_id = -1;
    const cJSON *unk = sq_json_field(model, "unk_token");
    if (unk) {
        if (!cJSON_IsString(unk))
            return sq_error_set(err, SQ_EDATA, "%s: model.unk_token: expected a string", file);
        t->unk_id = vocab_find(t, unk->valuestring, strlen(unk->valuestring));
        if (t->unk_id < 0)
            return sq_error_set(err, SQ_EDATA, "%s: model.unk_token: \"%.64s\" is not in the "
                                "vocabulary", file, unk->valuestring);
    }

    /* Merges: "a b" strings or [a, b] pairs; the rank is the position. */
    const cJSON *merges = sq_json_field(model, "merges");
    if (merges && !cJSON_IsArray(merges))
        return sq_error_set(err, SQ_EDATA, "%s: model.merges: expected an array", file);
    size_t n_merges = 0;
    for (const cJSON *c = merges ? merges->child : NULL; c; c = c->next)
        n_merges++;
    if (n_merges > (size_t)INT32_MAX / 4)
        return sq_error_set(err, SQ_EDATA, "%s: model.merges: too many", file);
    if (n_merges) {
        if (is_pow2_cap(n_merges, &t->mmask))
            return sq_error_set(err, SQ_EDATA, "%s: model.merges: too many", file);
        t->mkey = calloc((size_t)t->mmask + 1, sizeof *t->mkey);
        t->mval = calloc((size_t)t->mmask + 1, sizeof *t->mval);
        if (!t->mkey || !t->mval)
            return sq_error_oom(err, "tokenizer merges");
    }
    char tmp[2 * TOK_MAX_TOKEN_BYTES + 2];
    uint32_t rank = 0;
    for (const cJSON *c = merges ? merges->child : NULL; c; c = c->next, rank++) {
        const char *a = NULL, *b = NULL;
        size_t la = 0, lb = 0;
        if (cJSON_IsString(c)) {
            const char *sp = strchr(c->valuestring, ' ');
            if (!sp || sp == c->valuestring || !sp[1] || strchr(sp + 1, ' '))
                return sq_error_set(err, SQ_EDATA, "%s: model.merges[%u]: \"%.64s\" is not two "
                                    "tokens separated by one space", file, rank, c->valuestring);
            a = c->valuestring;
            la = (size_t)(sp - a);
            b = sp + 1;
            lb = strlen(b);
        } else if (cJSON_IsArray(c) && cJSON_GetArraySize(c) == 2 &&
                   cJSON_IsString(c->child) && cJSON_IsString(c->child->next)) {
            a = c->child->valuestring;
            b = c->child->next->valuestring;
            la = strlen(a);
            lb = strlen(b);
        } else {
            return sq_error_set(err, SQ_EDATA, "%s: model.merges[%u]: expected \"a b\" or "
                                "[\"a\", \"b\"]", file, rank);
        }
        int32_t ia = vocab_find(t, a, la), ib = vocab_find(t, b, lb), ic = -1;
        if (ia >= 0 && ib >= 0 && la + lb <= TOK_MAX_TOKEN_BYTES) {
            memcpy(tmp, a, la);
            memcpy(tmp + la, b, lb);
            ic = vocab_find(t, tmp, la + lb);
        }
        if (ia < 0 || ib < 0 || ic < 0)
            return sq_error_set(err, SQ_EDATA, "%s: model.merges[%u]: \"%.*s\" + \"%.*s\": %s is "
                                "not in the vocabulary", file, rank, (int)(la > 64 ? 64 : la), a,
                                (int)(lb > 64 ? 64 : lb), b,
                                ia < 0 ? "the first token" : ib < 0 ? "the second token"
                                                           : "their merge");
        uint64_t key = (((uint64_t)(uint32_t)ia << 32) | (uint32_t)ib) + 1;
        uint32_t h = (uint32_t)hash_u64(key) & t->mmask;
        while (t->mkey[h] && t->mkey[h] != key)
            h = (h + 1) & t->mmask;
        if (!t->mkey[h]) {   /* a repeated merge keeps its first (lowest) rank */
            t->mkey[h] = key;
            t->mval[h] = ((uint64_t)rank << 32) | (uint32_t)ic;
        }
        int32_t pair[2] = {ia, ib};
        sq_sha256_update(&L->h, pair, sizeof pair);
    }
    t->n_merges = (int32_t)rank;
    return SQ_OK;
}

static int cmp_u64(const void *x, const void *y)
{
    uint64_t a = *(const uint64_t *)x, b = *(const uint64_t *)y;
    return a < b ? -1 : a > b;
}

static int parse_added(sq_tokenizer *t, const cJSON *added, loadctx *L)
{
    const char *file = L->file;
    sq_error *err = L->err;
    if (!added || cJSON_IsNull(added))
        return SQ_OK;
    if (!cJSON_IsArray(added))
        return sq_error_set(err, SQ_EDATA, "%s: added_tokens: expected an array", file);
    int n = cJSON_GetArraySize(added);
    t->added = calloc((size_t)n + 1, sizeof *t->added);
    if (!t->added)
        return sq_error_oom(err, "tokenizer");
    int i = 0, rc;
    for (const cJSON *c = added->child; c; c = c->next, i++) {
        added_token *a = &t->added[t->n_added];
        char ctx[64];
        snprintf(ctx, sizeof ctx, "added_tokens[%d]", i);
        int sp = 0, ls = 0, rs = 0, sw = 0, nz = 1;
        if ((rc = get_bool(c, "special", 0, &sp, file, ctx, err)) ||
            (rc = get_bool(c, "lstrip", 0, &ls, file, ctx, err)) ||
            (rc = get_bool(c, "rstrip", 0, &rs, file, ctx, err)) ||
            (rc = get_bool(c, "single_word", 0, &sw, file, ctx, err)) ||
            (rc = get_bool(c, "normalized", !sp, &nz, file, ctx, err)))
            return rc;
        a->id = (int32_t)sq_json_field(c, "id")->valuedouble;   /* checked by parse_model */
        const char *content = sq_json_field(c, "content")->valuestring;
        if ((rc = dup_str(content, &a->content, &a->len, err)))
            return rc;
        a->pat = a->content;
        a->pat_len = a->len;
        a->special = (unsigned char)sp;
        a->lstrip = (unsigned char)ls;
        a->rstrip = (unsigned char)rs;
        a->single_word = (unsigned char)sw;
        a->normalized = (unsigned char)nz;
        t->n_added++;
        t->tok[a->id].s = a->content;
        t->tok[a->id].len = (uint32_t)a->len;
        t->special[a->id] = (unsigned char)sp;
        unsigned char flags[6] = {(unsigned char)sp, (unsigned char)ls, (unsigned char)rs,
                                  (unsigned char)sw, (unsigned char)nz, 0};
        sq_sha256_update(&L->h, &a->id, sizeof a->id);
        sq_sha256_update(&L->h, a->content, a->len + 1);
        sq_sha256_update(&L->h, flags, sizeof flags);
    }
    return SQ_OK;
}

static int normalize(const sq_tokenizer *t, const char *s, size_t n, buf *out, matcher *m,
                     sq_error *err);

/* Buckets of added tokens by their first byte (after normalization for normalized ones),
 * longest first. A normalized token's pattern is its content normalized. */
static int index_added(sq_tokenizer *t, sq_error *err)
{
    matcher m = {0};
    for (int i = 0; i < t->n_added; i++) {
        added_token *a = &t->added[i];
        if (a->normalized && t->n_norm) {
            buf b = {0};
            int rc = normalize(t, a->content, a->len, &b, &m, err);
            if (rc) {
                free(b.p);
                pcre2_match_data_free(m.md);
                return rc;
            }
            if (b.n == 0) {
                free(b.p);
                a->normalized = 2;   /* normalizes to nothing: never matched */
                continue;
            }
            a->pat = b.p;
            a->pat_len = b.n;
        }
    }
    pcre2_match_data_free(m.md);
    int cnt[256] = {0};
    for (int i = 0; i < t->n_added; i++)
        if (t->added[i].normalized < 2)
            cnt[(unsigned char)t->added[i].pat[0]]++;
    for (int b = 0; b < 256; b++) {
        if (!cnt[b])
            continue;
        t->added_by_byte[b] = malloc((size_t)cnt[b] * sizeof(int32_t));
        if (!t->added_by_byte[b])
            return sq_error_oom(err, "tokenizer");
    }
    for (int i = 0; i < t->n_added; i++) {
        const added_token *a = &t->added[i];
        if (a->normalized >= 2)
            continue;
        unsigned char b = (unsigned char)a->pat[0];
        t->added_by_byte[b][t->added_by_byte_n[b]++] = i;
        t->n_by_byte[b][a->normalized]++;
    }
    /* Longest first, then in file order. */
    for (int b = 0; b < 256; b++) {
        int cnt_b = t->added_by_byte_n[b];
        if (cnt_b < 2)
            continue;
        uint64_t *keys = malloc((size_t)cnt_b * sizeof *keys);
        if (!keys)
            return sq_error_oom(err, "tokenizer");
        for (int k = 0; k < cnt_b; k++) {
            int32_t i = t->added_by_byte[b][k];
            keys[k] = ((uint64_t)(UINT32_MAX - (uint32_t)t->added[i].pat_len) << 32) | (uint32_t)i;
        }
        qsort(keys, (size_t)cnt_b, sizeof *keys, cmp_u64);
        for (int k = 0; k < cnt_b; k++)
            t->added_by_byte[b][k] = (int32_t)(uint32_t)keys[k];
        free(keys);
    }
    return SQ_OK;
}

/* The name of a token from a config file: a string, or an AddedToken object's content. */
static int config_token(const cJSON *cfg, const char *key, const char **out, const char *file,
                        sq_error *err)
{
    *out = NULL;
    const cJSON *v = sq_json_field(cfg, key);
    if (!v)
        return SQ_OK;
    if (cJSON_IsString(v)) {
        *out = v->valuestring;
        return SQ_OK;
    }
    if (cJSON_IsObject(v)) {
        const cJSON *c = sq_json_field(v, "content");
        if (cJSON_IsString(c)) {
            *out = c->valuestring;
            return SQ_OK;
        }
    }
    return sq_error_set(err, SQ_EDATA, "%s: %s: expected a string or an object with a content "
                        "string", file, key);
}

static int id_push_checked(sq_tokenizer *t, ivec *v, const cJSON *x, const char *file,
                           const char *field, sq_error *err)
{
    int32_t id;
    if (!id_of(x, &id) || id >= t->n_ids || !t->tok[id].s)
        return sq_error_set(err, SQ_EDATA, "%s: %s: not an id of the vocabulary of %s", file,
                            field, t->file);
    return ivec_push(v, id) ? sq_error_oom(err, "tokenizer") : SQ_OK;
}

static int load_configs(sq_tokenizer *t, const char *dir, int can_rebuild, ivec *pre,
                        ivec *post, sq_error *err)
{
    size_t dl = strlen(dir);
    char *path = malloc(dl + 32);
    if (!path)
        return sq_error_oom(err, "tokenizer");
    const char *bos_name = NULL, *eos_name = NULL;
    int add_bos = -1, add_eos = -1, rc = SQ_OK;
    cJSON *cfg = NULL, *gen = NULL;
    struct stat st;

    snprintf(path, dl + 32, "%s/tokenizer_config.json", dir);
    if (stat(path, &st) == 0) {
        if ((rc = read_json(path, &cfg, err)))
            goto out;
        if (!cJSON_IsObject(cfg)) {
            rc = sq_error_set(err, SQ_EDATA, "%s: expected a JSON object", path);
            goto out;
        }
        if ((rc = config_token(cfg, "bos_token", &bos_name, path, err)) ||
            (rc = config_token(cfg, "eos_token", &eos_name, path, err)))
            goto out;
        const cJSON *v = sq_json_field(cfg, "add_bos_token");
        if (v && !cJSON_IsBool(v)) {
            rc = sq_error_set(err, SQ_EDATA, "%s: add_bos_token: expected true or false", path);
            goto out;
        }
        if (v)
            add_bos = cJSON_IsTrue(v);
        v = sq_json_field(cfg, "add_eos_token");
        if (v && !cJSON_IsBool(v)) {
            rc = sq_error_set(err, SQ_EDATA, "%s: add_eos_token: expected true or false", path);
            goto out;
        }
        if (v)
            add_eos = cJSON_IsTrue(v);
    }
    int32_t bos_id = -1, eos_tok = -1;
    if (bos_name) {
        bos_id = token_find(t, bos_name);
        if (bos_id < 0) {
            rc = sq_error_set(err, SQ_EDATA, "%s: bos_token: \"%.64s\" is not a token of %s", path,
                              bos_name, t->file);
            goto out;
        }
    }
    if (eos_name) {
        eos_tok = token_find(t, eos_name);
        if (eos_tok < 0) {
            rc = sq_error_set(err, SQ_EDATA, "%s: eos_token: \"%.64s\" is not a token of %s", path,
                              eos_name, t->file);
            goto out;
        }
    }
    /* transformers' Llama and Gemma tokenizers rebuild the template from add_bos_token and
     * add_eos_token (docs/tokenizer.md); a byte-level post-processor has no template. */
    if ((add_bos >= 0 || add_eos >= 0) && can_rebuild) {
        if (add_bos >= 0) {
            pre->n = 0;
            if (add_bos) {
                if (bos_id < 0) {
                    rc = sq_error_set(err, SQ_EDATA, "%s: add_bos_token is true but bos_token is "
                                      "not set", path);
                    goto out;
                }
                if (ivec_push(pre, bos_id)) {
                    rc = sq_error_oom(err, "tokenizer");
                    goto out;
                }
            }
        }
        if (add_eos >= 0) {
            post->n = 0;
            if (add_eos) {
                if (eos_tok < 0) {
                    rc = sq_error_set(err, SQ_EDATA, "%s: add_eos_token is true but eos_token is "
                                      "not set", path);
                    goto out;
                }
                if (ivec_push(post, eos_tok)) {
                    rc = sq_error_oom(err, "tokenizer");
                    goto out;
                }
            }
        }
    }
    t->bos = bos_id >= 0 ? bos_id : (pre->n ? pre->v[0] : -1);

    ivec eos = {0};
    snprintf(path, dl + 32, "%s/generation_config.json", dir);
    if (stat(path, &st) == 0) {
        if ((rc = read_json(path, &gen, err)))
            goto out;
        if (!cJSON_IsObject(gen)) {
            rc = sq_error_set(err, SQ_EDATA, "%s: expected a JSON object", path);
            goto out;
        }
        const cJSON *v = sq_json_field(gen, "eos_token_id");
        if (cJSON_IsArray(v)) {
            int i = 0;
            for (const cJSON *c = v->child; c && !rc; c = c->next, i++) {
                char field[48];
                snprintf(field, sizeof field, "eos_token_id[%d]", i);
                rc = id_push_checked(t, &eos, c, path, field, err);
            }
        } else if (v) {
            rc = id_push_checked(t, &eos, v, path, "eos_token_id", err);
        }
        if (rc) {
            free(eos.v);
            goto out;
        }
    }
    if (eos.n == 0 && eos_tok >= 0 && ivec_push(&eos, eos_tok)) {
        free(eos.v);
        rc = sq_error_oom(err, "tokenizer");
        goto out;
    }
    t->eos = eos.v;
    t->n_eos = (int)eos.n;
out:
    cJSON_Delete(cfg);
    cJSON_Delete(gen);
    free(path);
    return rc;
}

static void hash_json(sq_sha256 *h, const char *tag, const cJSON *v)
{
    sq_sha256_update(h, tag, strlen(tag) + 1);
    char *s = v ? cJSON_PrintUnformatted(v) : NULL;
    if (s) {
        sq_sha256_update(h, s, strlen(s) + 1);
        cJSON_free(s);
    }
}

int sq_tokenizer_load(const char *path, sq_tokenizer **out, sq_error *err)
{
    *out = NULL;
    struct stat st;
    size_t pl = strlen(path);
    char *file = NULL, *dir = NULL;
    int rc;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
        file = malloc(pl + 32);
        dir = strdup(path);
        if (file)
            snprintf(file, pl + 32, "%s/tokenizer.json", path);
    } else {
        file = strdup(path);
        const char *slash = strrchr(path, '/');
        dir = slash ? strndup(path, (size_t)(slash - path) + (slash == path)) : strdup(".");
    }
    sq_tokenizer *t = calloc(1, sizeof *t);
    if (!file || !dir || !t) {
        free(file);
        free(dir);
        free(t);
        return sq_error_oom(err, "tokenizer");
    }
    t->file = file;
    t->bos = -1;
    cJSON *root = NULL;
    ivec pre = {0}, post = {0};
    loadctx L;
    memset(&L, 0, sizeof L);
    L.file = file;
    L.err = err;
    sq_sha256_init(&L.h);
    if ((rc = read_json(file, &root, err)))
        goto fail;
    if (!cJSON_IsObject(root)) {
        rc = sq_error_set(err, SQ_EDATA, "%s: expected a JSON object", file);
        goto fail;
    }
    const cJSON *added = sq_json_field(root, "added_tokens");
    if (added && !cJSON_IsArray(added)) {
        rc = sq_error_set(err, SQ_EDATA, "%s: added_tokens: expected an array", file);
        goto fail;
    }
    const cJSON *model = sq_json_field(root, "model");
    if ((rc = parse_model(t, model, added, &L)) || (rc = parse_added(t, added, &L)) ||
        (rc = parse_normalizer(t, sq_json_field(root, "normalizer"), "normalizer", 0, &L)) ||
        (rc = parse_pretokenizer(t, sq_json_field(root, "pre_tokenizer"), "pre_tokenizer", 0,
                                 &L)) ||
        (rc = parse_decoder(t, sq_json_field(root, "decoder"), "decoder", 0, &L)))
        goto fail;
    int is_template = 0;
    if ((rc = parse_post(t, sq_json_field(root, "post_processor"), "post_processor", 0, &pre,
                         &post, &is_template, &L)))
        goto fail;
    const cJSON *pp = sq_json_field(root, "post_processor");
    if ((rc = index_added(t, err)) ||
        (rc = load_configs(t, dir, is_template || !pp, &pre, &post, err)))
        goto fail;
    t->prefix = pre.v;
    t->n_prefix = (int)pre.n;
    t->suffix = post.v;
    t->n_suffix = (int)post.n;
    pre.v = post.v = NULL;
    /* The fingerprint of everything encoding depends on (sq_tokenizer_same). */
    hash_json(&L.h, "normalizer", sq_json_field(root, "normalizer"));
    hash_json(&L.h, "pre_tokenizer", sq_json_field(root, "pre_tokenizer"));
    int flags[6] = {t->byte_fallback, t->fuse_unk, t->ignore_merges, t->unk_id, t->n_prefix,
                    t->n_suffix};
    sq_sha256_update(&L.h, flags, sizeof flags);
    if (t->n_prefix)
        sq_sha256_update(&L.h, t->prefix, (size_t)t->n_prefix * sizeof(int32_t));
    if (t->n_suffix)
        sq_sha256_update(&L.h, t->suffix, (size_t)t->n_suffix * sizeof(int32_t));
    sq_sha256_final(&L.h, t->digest);
    cJSON_Delete(root);
    free(dir);
    *out = t;
    return SQ_OK;
fail:
    cJSON_Delete(root);
    free(pre.v);
    free(post.v);
    free(dir);
    sq_tokenizer_free(t);
    return rc ? rc : sq_error_set(err, SQ_ESOFTWARE, "tokenizer: internal error");
}

/* ---- encoding ----------------------------------------------------------------------------- */

static int normalize(const sq_tokenizer *t, const char *s, size_t n, buf *out, matcher *m,
                     sq_error *err)
{
    buf a = {0}, b = {0};
    int rc = SQ_OK;
    if (buf_add(&a, s, n))
        return sq_error_oom(err, "tokenizer");
    for (int i = 0; i < t->n_norm && !rc; i++) {
        const op *o = &t->norm[i];
        b.n = 0;
        switch (o->kind) {
        case NORM_PREPEND:
            if (a.n && (buf_add(&b, o->str, o->str_len) || buf_add(&b, a.p, a.n)))
                rc = SQ_ESOFTWARE;
            if (!a.n && buf_add(&b, "", 0))
                rc = SQ_ESOFTWARE;
            break;
        case NORM_REPLACE: {
            size_t at = 0, ms, me;
            while (pattern_next(&o->pat, m, a.p, a.n, at, &ms, &me)) {
                if (buf_add(&b, a.p + at, ms - at) || buf_add(&b, o->str, o->str_len))
                    rc = SQ_ESOFTWARE;
                at = me;
            }
            if (buf_add(&b, a.p + at, a.n - at))
                rc = SQ_ESOFTWARE;
            break;
        }
        case NORM_STRIP: {
            size_t lo = 0, hi = a.n, k;
            while (o->a && lo < hi && is_white(utf8_decode(a.p + lo, &k)))
                lo += k;
            while (o->b && hi > lo) {
                size_t j = hi - 1;
                while (j > lo && ((unsigned char)a.p[j] & 0xc0) == 0x80)
                    j--;
                if (!is_white(utf8_decode(a.p + j, &k)))
                    break;
                hi = j;
            }
            if (buf_add(&b, a.p + lo, hi - lo))
                rc = SQ_ESOFTWARE;
            break;
        }
        default: {
            /* ASCII is the same in the four normalization forms. */
            size_t q = 0;
            while (q < a.n && !((unsigned char)a.p[q] & 0x80))
                q++;
            if (q == a.n) {
                if (buf_add(&b, a.p, a.n))
                    rc = SQ_ESOFTWARE;
                break;
            }
            int opt = UTF8PROC_STABLE;
            opt |= o->kind == NORM_NFC ? UTF8PROC_COMPOSE
                 : o->kind == NORM_NFKC ? (UTF8PROC_COMPOSE | UTF8PROC_COMPAT)
                 : o->kind == NORM_NFD ? UTF8PROC_DECOMPOSE
                                       : (UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT);
            utf8proc_uint8_t *res = NULL;
            utf8proc_ssize_t r = a.n ? utf8proc_map((const utf8proc_uint8_t *)a.p,
                                                    (utf8proc_ssize_t)a.n, &res,
                                                    (utf8proc_option_t)opt)
                                     : 0;
            if (r < 0) {
                free(res);
                rc = r == UTF8PROC_ERROR_NOMEM ? SQ_ESOFTWARE : SQ_EDATA;
                break;
            }
            if (buf_add(&b, res ? (const char *)res : "", (size_t)r))
                rc = SQ_ESOFTWARE;
            free(res);
            break;
        }
        }
        buf tmp = a;
        a = b;
        b = tmp;
    }
    free(b.p);
    if (!rc && m->failed)
        rc = SQ_EDATA;
    if (rc) {
        free(a.p);
        return rc == SQ_EDATA ? sq_error_set(err, SQ_EDATA, "%s: normalizer: the text cannot be "
                                             "normalized (a regex or Unicode error)", t->file)
                              : sq_error_oom(err, "tokenizer");
    }
    out->n = 0;
    rc = buf_add(out, a.p, a.n) ? sq_error_oom(err, "tokenizer") : SQ_OK;
    free(a.p);
    return rc;
}

/* A piece of text during pre-tokenization: [off, off+len) of a buffer. */
typedef struct {
    size_t off, len;
    int    first;   /* starts at offset 0 of the original text (Metaspace prepend_scheme first) */
} piece;

typedef struct {
    piece *v;
    size_t n, cap;
} pvec;

static int pvec_push(pvec *p, size_t off, size_t len, int first)
{
    if (len == 0)
        return 0;   /* empty pieces are dropped, as Hugging Face drops them */
    if (p->n == p->cap) {
        size_t cap = p->cap ? p->cap * 2 : 64;
        piece *v = realloc(p->v, cap * sizeof *v);
        if (!v)
            return -1;
        p->v = v;
        p->cap = cap;
    }
    p->v[p->n].off = off;
    p->v[p->n].len = len;
    p->v[p->n].first = first;
    p->n++;
    return 0;
}

/* The splits of one piece by pattern with a behaviour (Hugging Face's SplitDelimiterBehavior):
 * (start, end, is_match) in order, covering the piece. */
typedef struct {
    size_t s, e;
    int    m;
} span;

static int split_piece(const op *o, matcher *m, const char *s, size_t n, span **spans,
                       size_t *ns, size_t *cap)
{
    size_t k = 0, at = 0, ms, me;
#define SPAN_PUSH(S, E, M)                                                                 \
    do {                                                                                   \
        if (k == *cap) {                                                                   \
            size_t c2 = *cap ? *cap * 2 : 64;                                              \
            span *v2 = realloc(*spans, c2 * sizeof *v2);                                   \
            if (!v2)                                                                       \
                return -1;                                                                 \
            *spans = v2;                                                                   \
            *cap = c2;                                                                     \
        }                                                                                  \
        (*spans)[k].s = (S);                                                               \
        (*spans)[k].e = (E);                                                               \
        (*spans)[k].m = (M);                                                               \
        k++;                                                                               \
    } while (0)
    while (pattern_next(&o->pat, m, s, n, at, &ms, &me)) {
        if (ms > at)
            SPAN_PUSH(at, ms, o->b);
        SPAN_PUSH(ms, me, !o->b);
        at = me;
    }
    if (at < n)
        SPAN_PUSH(at, n, o->b);
#undef SPAN_PUSH
    /* Apply the behaviour in place. */
    span *v = *spans;
    size_t w = 0;
    switch (o->a) {
    case BEH_REMOVED:
        for (size_t i = 0; i < k; i++)
            if (!v[i].m)
                v[w++] = v[i];
        break;
    case BEH_ISOLATED:
        w = k;
        break;
    case BEH_MERGED_PREV: {
        int prev = 0;
        for (size_t i = 0; i < k; i++) {
            int im = v[i].m;
            if (im && !prev && w > 0)
                v[w - 1].e = v[i].e;
            else
                v[w++] = v[i];
            prev = im;
        }
        break;
    }
    case BEH_MERGED_NEXT: {
        /* Right to left: a match joins the split after it. */
        int prev = 0;
        size_t r = k;   /* result grows down from k */
        for (size_t i = k; i-- > 0;) {
            int im = v[i].m;
            if (im && !prev && r < k)
                v[r].s = v[i].s;
            else
                v[--r] = v[i];
            prev = im;
        }
        memmove(v, v + r, (k - r) * sizeof *v);
        w = k - r;
        break;
    }
    case BEH_CONTIGUOUS: {
        int prev = 0;
        for (size_t i = 0; i < k; i++) {
            int im = v[i].m;
            if (im == prev && w > 0)
                v[w - 1].e = v[i].e;
            else
                v[w++] = v[i];
            prev = im;
        }
        break;
    }
    }
    *ns = w;
    return 0;
}

/* GPT-2's byte to unicode table: printable bytes map to themselves, others to U+0100 on. */
static uint32_t byte_char[256];
static int16_t char_byte[324];   /* inverse, -1 for characters that are no byte */
static char byte_utf8[256][3];
static unsigned char byte_utf8_len[256];

static pthread_once_t byte_tables_once = PTHREAD_ONCE_INIT;

static void byte_tables_fill(void)
{
    for (int c = 0; c < 324; c++)
        char_byte[c] = -1;
    int k = 0;
    for (int b = 0; b < 256; b++) {
        int printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174);
        byte_char[b] = printable ? (uint32_t)b : (uint32_t)(256 + k++);
        char_byte[byte_char[b]] = (int16_t)b;
        byte_utf8_len[b] = (unsigned char)utf8_encode(byte_char[b], byte_utf8[b]);
    }
}

static void byte_tables_init(void)
{
    pthread_once(&byte_tables_once, byte_tables_fill);
}

typedef struct {
    matcher m;
    buf     A, B;       /* piece buffers */
    buf     S;          /* scratch of the ByteLevel pre-tokenizer */
    pvec    PA, PB;
    span   *spans;
    size_t  spans_cap;
    /* BPE scratch */
    struct sym { int32_t id, prev, next; } *sym;
    size_t  sym_cap;
    uint64_t *heap;     /* rank << 32 | position */
    size_t  heap_n, heap_cap;
    /* word cache: open addressing, key bytes in kbuf, ids in ivec cids */
    struct centry { uint32_t koff, klen, ioff, icnt; } *cache;
    uint32_t cmask, cn;
    buf     kbuf;
    ivec    cids;
} encstate;

static void encstate_free(encstate *e)
{
    pcre2_match_data_free(e->m.md);
    free(e->A.p);
    free(e->B.p);
    free(e->S.p);
    free(e->PA.v);
    free(e->PB.v);
    free(e->spans);
    free(e->sym);
    free(e->heap);
    free(e->cache);
    free(e->kbuf.p);
    free(e->cids.v);
}

/* Pre-tokenizes `s` into e->PA/e->A. */
static int pretokenize(const sq_tokenizer *t, encstate *e, const char *s, size_t n, int first)
{
    e->A.n = 0;
    e->PA.n = 0;
    if (buf_add(&e->A, s, n) || pvec_push(&e->PA, 0, n, first))
        return -1;
    for (int i = 0; i < t->n_pre; i++) {
        const op *o = &t->pre[i];
        e->B.n = 0;
        e->PB.n = 0;
        if (buf_reserve(&e->B, e->A.n))
            return -1;
        for (size_t j = 0; j < e->PA.n; j++) {
            const piece *p = &e->PA.v[j];
            const char *ps = e->A.p + p->off;
            switch (o->kind) {
            case PT_SPLIT: {
                size_t ns = 0;
                if (split_piece(o, &e->m, ps, p->len, &e->spans, &ns, &e->spans_cap))
                    return -1;
                size_t base = e->B.n;
                if (buf_add(&e->B, ps, p->len))
                    return -1;
                for (size_t q = 0; q < ns; q++)
                    if (pvec_push(&e->PB, base + e->spans[q].s, e->spans[q].e - e->spans[q].s,
                                  p->first && e->spans[q].s == 0))
                        return -1;
                break;
            }
            case PT_BYTELEVEL: {
                /* Prefix space, the GPT-2 split, then bytes to characters. */
                buf *tmp = &e->S;
                size_t keep = tmp->n = 0;
                if (o->a && ps[0] != ' ' && buf_add(tmp, " ", 1))
                    return -1;
                if (buf_add(tmp, ps, p->len))
                    return -1;
                const char *w = tmp->p + keep;
                size_t wn = tmp->n - keep;
                size_t at = 0, ms, me;
                for (;;) {
                    int hit = o->b ? pattern_next(&o->pat, &e->m, w, wn, at, &ms, &me) : 0;
                    if (!o->b) {
                        ms = 0;
                        me = wn;
                    }
                    if (!hit && o->b) {
                        if (at < wn) {   /* the regex matches everything; keep any rest */
                            ms = at;
                            me = wn;
                        } else {
                            break;
                        }
                    }
                    if (ms > at) {   /* a gap the regex did not match: its own piece */
                        size_t base = e->B.n;
                        for (size_t q = at; q < ms; q++)
                            if (buf_add(&e->B, byte_utf8[(unsigned char)w[q]],
                                        byte_utf8_len[(unsigned char)w[q]]))
                                return -1;
                        if (pvec_push(&e->PB, base, e->B.n - base, 0))
                            return -1;
                    }
                    size_t base = e->B.n;
                    for (size_t q = ms; q < me; q++)
                        if (buf_add(&e->B, byte_utf8[(unsigned char)w[q]],
                                    byte_utf8_len[(unsigned char)w[q]]))
                            return -1;
                    if (pvec_push(&e->PB, base, e->B.n - base, p->first && ms == 0))
                        return -1;
                    at = me;
                    if (!o->b || at >= wn)
                        break;
                }
                break;
            }
            case PT_METASPACE: {
                size_t base = e->B.n;
                int starts = ps[0] == ' ' ||
                             (p->len >= o->str_len && memcmp(ps, o->str, o->str_len) == 0);
                if (!starts && (o->a == PREPEND_ALWAYS || (o->a == PREPEND_FIRST && p->first)))
                    if (buf_add(&e->B, o->str, o->str_len))
                        return -1;
                for (size_t q = 0; q < p->len; q++) {
                    if (ps[q] == ' ') {
                        if (buf_add(&e->B, o->str, o->str_len))
                            return -1;
                    } else if (buf_add(&e->B, ps + q, 1)) {
                        return -1;
                    }
                }
                size_t end = e->B.n;
                if (!o->b) {
                    if (pvec_push(&e->PB, base, end - base, p->first))
                        return -1;
                    break;
                }
                /* Split before each replacement character (MergedWithNext). */
                size_t st = base;
                for (size_t q = base; q < end;) {
                    if (q > st && end - q >= o->str_len &&
                        memcmp(e->B.p + q, o->str, o->str_len) == 0) {
                        if (pvec_push(&e->PB, st, q - st, p->first && st == base))
                            return -1;
                        st = q;
                    }
                    q += utf8_clen((unsigned char)e->B.p[q]);
                }
                if (pvec_push(&e->PB, st, end - st, p->first && st == base))
                    return -1;
                break;
            }
            }
        }
        buf tb = e->A;
        e->A = e->B;
        e->B = tb;
        pvec tp = e->PA;
        e->PA = e->PB;
        e->PB = tp;
    }
    return e->m.failed ? -2 : 0;
}

static void heap_push(encstate *e, uint64_t x)
{
    size_t i = e->heap_n++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (e->heap[p] <= x)
            break;
        e->heap[i] = e->heap[p];
        i = p;
    }
    e->heap[i] = x;
}

static uint64_t heap_pop(encstate *e)
{
    uint64_t top = e->heap[0], x = e->heap[--e->heap_n];
    size_t i = 0, n = e->heap_n;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n)
            break;
        if (c + 1 < n && e->heap[c + 1] < e->heap[c])
            c++;
        if (e->heap[c] >= x)
            break;
        e->heap[i] = e->heap[c];
        i = c;
    }
    if (n)
        e->heap[i] = x;
    return top;
}

static void try_pair(const sq_tokenizer *t, encstate *e, int32_t pos)
{
    int32_t nx = e->sym[pos].next;
    uint32_t rank;
    int32_t nid;
    if (nx >= 0 && merge_find(t, e->sym[pos].id, e->sym[nx].id, &rank, &nid))
        heap_push(e, ((uint64_t)rank << 32) | (uint32_t)pos);
}

/* BPE of one word: appends its ids to out. */
static int bpe_word(const sq_tokenizer *t, encstate *e, const char *w, size_t n, ivec *out)
{
    if (t->ignore_merges) {
        int32_t id = vocab_find(t, w, n);
        if (id >= 0)
            return ivec_push(out, id);
    }
    /* The cache. */
    uint32_t ch = 0;
    if (n <= CACHE_WORD_MAX && e->cache) {
        ch = (uint32_t)hash_bytes(w, n) & e->cmask;
        for (uint32_t i = ch;; i = (i + 1) & e->cmask) {
            const struct centry *c = &e->cache[i];
            if (!c->klen)
                break;
            if (c->klen == n && memcmp(e->kbuf.p + c->koff, w, n) == 0) {
                for (uint32_t k = 0; k < c->icnt; k++)
                    if (ivec_push(out, e->cids.v[c->ioff + k]))
                        return -1;
                return 0;
            }
        }
    }
    /* Symbols: the characters' ids. */
    if (e->sym_cap < n) {
        size_t cap = n < 64 ? 64 : n;
        void *p = realloc(e->sym, cap * sizeof *e->sym);
        /* n - 1 pairs at first; each merge pops one entry and queues at most two, and there
         * are at most n - 1 merges: never more than 2n entries at once. */
        void *h = realloc(e->heap, (2 * cap + 4) * sizeof *e->heap);
        if (p)
            e->sym = p;
        if (h)
            e->heap = h;
        if (!p || !h)
            return -1;
        e->sym_cap = cap;
        e->heap_cap = cap;
    }
    int32_t ns = 0;
    int last_unk = 0;
    for (size_t i = 0; i < n;) {
        size_t k = utf8_clen((unsigned char)w[i]);
        if (k > n - i)
            k = n - i;
        int32_t id = vocab_find(t, w + i, k);
        if (id >= 0) {
            e->sym[ns++].id = id;
            last_unk = 0;
        } else {
            int ok = t->byte_fallback;
            for (size_t q = 0; ok && q < k; q++)
                ok = t->byte_tok[(unsigned char)w[i + q]] >= 0;
            if (ok) {
                /* A character of k bytes gives k symbols: still at most n in all. */
                for (size_t q = 0; q < k; q++)
                    e->sym[ns++].id = t->byte_tok[(unsigned char)w[i + q]];
                last_unk = 0;
            } else if (t->unk_id >= 0) {
                if (!(t->fuse_unk && last_unk))
                    e->sym[ns++].id = t->unk_id;
                last_unk = 1;
            }
            /* else the character is dropped, as Hugging Face drops it */
        }
        i += k;
    }
    for (int32_t i = 0; i < ns; i++) {
        e->sym[i].prev = i - 1;
        e->sym[i].next = i + 1 < ns ? i + 1 : -1;
    }
    e->heap_n = 0;
    for (int32_t i = 0; i + 1 < ns; i++)
        try_pair(t, e, i);
    while (e->heap_n) {
        uint64_t top = heap_pop(e);
        int32_t pos = (int32_t)(uint32_t)top;
        uint32_t rank = (uint32_t)(top >> 32), r2;
        struct sym *a = &e->sym[pos];
        if (a->id < 0 || a->next < 0)
            continue;
        struct sym *b = &e->sym[a->next];
        int32_t nid;
        if (!merge_find(t, a->id, b->id, &r2, &nid) || r2 != rank)
            continue;   /* stale: the pair changed since it was queued */
        a->id = nid;
        int32_t nn = b->next;
        b->id = -1;
        a->next = nn;
        if (nn >= 0)
            e->sym[nn].prev = pos;
        if (a->prev >= 0)
            try_pair(t, e, a->prev);
        try_pair(t, e, pos);
    }
    size_t start = out->n;
    for (int32_t i = ns ? 0 : -1; i >= 0; i = e->sym[i].next)
        if (ivec_push(out, e->sym[i].id))
            return -1;
    /* Remember short words. */
    if (n <= CACHE_WORD_MAX && e->cn < CACHE_MAX_ENTRIES) {
        if (!e->cache) {
            e->cmask = 255;
            e->cache = calloc(e->cmask + 1, sizeof *e->cache);
            if (!e->cache)
                return 0;
            ch = (uint32_t)hash_bytes(w, n) & e->cmask;
        }
        if ((e->cn + 1) * 2 > e->cmask + 1) {
            uint32_t nm = e->cmask * 2 + 1;
            struct centry *nc = calloc((size_t)nm + 1, sizeof *nc);
            if (!nc)
                return 0;
            for (uint32_t i = 0; i <= e->cmask; i++) {
                if (!e->cache[i].klen)
                    continue;
                uint32_t h = (uint32_t)hash_bytes(e->kbuf.p + e->cache[i].koff,
                                                  e->cache[i].klen) & nm;
                while (nc[h].klen)
                    h = (h + 1) & nm;
                nc[h] = e->cache[i];
            }
            free(e->cache);
            e->cache = nc;
            e->cmask = nm;
            ch = (uint32_t)hash_bytes(w, n) & e->cmask;
        }
        uint32_t i = ch;
        while (e->cache[i].klen)
            i = (i + 1) & e->cmask;
        size_t koff = e->kbuf.n, ioff = e->cids.n;
        if (buf_add(&e->kbuf, w, n))
            return 0;
        for (size_t k = start; k < out->n; k++)
            if (ivec_push(&e->cids, out->v[k]))
                return 0;
        if (n == 0 || koff > UINT32_MAX || ioff > UINT32_MAX)
            return 0;
        e->cache[i].koff = (uint32_t)koff;
        e->cache[i].klen = (uint32_t)n;
        e->cache[i].ioff = (uint32_t)ioff;
        e->cache[i].icnt = (uint32_t)(out->n - start);
        e->cn++;
    }
    return 0;
}

/* Pre-tokenizes and BPE-encodes one section of text without added tokens. */
static int encode_plain(const sq_tokenizer *t, encstate *e, const char *s, size_t n, int first,
                        ivec *out, sq_error *err)
{
    if (n == 0)
        return SQ_OK;
    int rc = pretokenize(t, e, s, n, first);
    if (rc == -2)
        return sq_error_set(err, SQ_EDATA, "%s: pre_tokenizer: the regular expression failed on "
                            "the text (a PCRE2 resource limit)", t->file);
    if (rc)
        return sq_error_oom(err, "tokenizer");
    /* bpe_word may use kbuf; PA and A stay untouched until the next pretokenize. */
    for (size_t i = 0; i < e->PA.n; i++)
        if (bpe_word(t, e, e->A.p + e->PA.v[i].off, e->PA.v[i].len, out))
            return sq_error_oom(err, "tokenizer");
    return SQ_OK;
}

/* The longest added token of the `normalized` class at s[i], or -1. */
static int added_at(const sq_tokenizer *t, const char *s, size_t n, size_t i, int normalized)
{
    unsigned char b = (unsigned char)s[i];
    if (!t->n_by_byte[b][normalized])
        return -1;
    const int32_t *list = t->added_by_byte[b];
    for (int k = 0; k < t->added_by_byte_n[b]; k++) {
        const added_token *a = &t->added[list[k]];
        if (a->normalized != normalized || a->pat_len > n - i)
            continue;
        if (memcmp(a->pat, s + i, a->pat_len) == 0)
            return list[k];
    }
    return -1;
}

typedef struct {
    size_t s, e;
    int    tok;   /* index into added, or -1 for text */
} section;

/* Hugging Face's AddedVocabulary::find_matches: the added tokens of one class in s[0..n),
 * leftmost and longest, with single_word, lstrip and rstrip. */
static int find_added(const sq_tokenizer *t, const char *s, size_t n, int normalized,
                      section **out, size_t *nout)
{
    size_t cap = 16, k = 0, start = 0;
    section *v = malloc(cap * sizeof *v);
    if (!v)
        return -1;
    for (size_t i = 0; i < n;) {
        int a = added_at(t, s, n, i, normalized);
        if (a < 0) {
            i++;
            continue;
        }
        const added_token *tk = &t->added[a];
        size_t ms = i, me = i + tk->pat_len, q;
        i = me;
        if (tk->single_word) {
            int left_ok = 1, right_ok = 1;
            if (ms > 0) {
                size_t j = ms - 1;
                while (j > 0 && ((unsigned char)s[j] & 0xc0) == 0x80)
                    j--;
                left_ok = !is_alnum_cp(utf8_decode(s + j, &q));
            }
            if (me < n)
                right_ok = !is_alnum_cp(utf8_decode(s + me, &q));
            if (!left_ok || !right_ok)
                continue;
        }
        if (tk->lstrip) {
            size_t j = ms;
            while (j > start) {
                size_t p = j - 1;
                while (p > 0 && ((unsigned char)s[p] & 0xc0) == 0x80)
                    p--;
                if (!is_white(utf8_decode(s + p, &q)))
                    break;
                j = p;
            }
            ms = j;
        }
        if (tk->rstrip) {
            while (me < n && is_white(utf8_decode(s + me, &q)))
                me += q;
            i = me;
        }
        if (k + 2 > cap) {
            cap *= 2;
            section *v2 = realloc(v, cap * sizeof *v);
            if (!v2) {
                free(v);
                return -1;
            }
            v = v2;
        }
        if (ms > start)
            v[k++] = (section){start, ms, -1};
        v[k++] = (section){ms, me, a};
        start = me;
    }
    if (start < n || k == 0) {
        if (k + 1 > cap) {
            section *v2 = realloc(v, (cap + 1) * sizeof *v);
            if (!v2) {
                free(v);
                return -1;
            }
            v = v2;
        }
        v[k++] = (section){start, n, -1};
    }
    *out = v;
    *nout = k;
    return 0;
}

int sq_tokenizer_encode(const sq_tokenizer *t, const char *text, size_t len, int add_special,
                        int32_t **ids, size_t *n, sq_error *err)
{
    *ids = NULL;
    *n = 0;
    if (!text && len)
        return sq_error_set(err, SQ_EUSAGE, "tokenizer: no text");
    size_t bad = utf8_check(text, len);
    if (bad < len)
        return sq_error_set(err, SQ_EDATA, "text: invalid UTF-8 at byte %zu (0x%02x); the "
                            "tokenizer of %s encodes UTF-8 text only", bad,
                            (unsigned char)text[bad], t->file);
    byte_tables_init();
    ivec out = {0};
    encstate e;
    memset(&e, 0, sizeof e);
    int rc = SQ_OK;
    for (int i = 0; i < t->n_prefix && add_special && !rc; i++)
        if (ivec_push(&out, t->prefix[i]))
            rc = sq_error_oom(err, "tokenizer");
    section *raw = NULL, *sub = NULL;
    size_t nraw = 0, nsub = 0;
    buf norm = {0};
    if (!rc && len && find_added(t, text, len, 0, &raw, &nraw))
        rc = sq_error_oom(err, "tokenizer");
    for (size_t i = 0; i < nraw && !rc; i++) {
        if (raw[i].tok >= 0) {
            if (ivec_push(&out, t->added[raw[i].tok].id))
                rc = sq_error_oom(err, "tokenizer");
            continue;
        }
        const char *s = text + raw[i].s;
        size_t sn = raw[i].e - raw[i].s;
        if (sn == 0)
            continue;
        if (t->n_norm) {
            if ((rc = normalize(t, s, sn, &norm, &e.m, err)))
                break;
            s = norm.p;
            sn = norm.n;
        }
        if (sn == 0)
            continue;
        free(sub);
        sub = NULL;
        if (find_added(t, s, sn, 1, &sub, &nsub)) {
            rc = sq_error_oom(err, "tokenizer");
            break;
        }
        for (size_t j = 0; j < nsub && !rc; j++) {
            if (sub[j].tok >= 0) {
                if (ivec_push(&out, t->added[sub[j].tok].id))
                    rc = sq_error_oom(err, "tokenizer");
                continue;
            }
            rc = encode_plain(t, &e, s + sub[j].s, sub[j].e - sub[j].s,
                              raw[i].s == 0 && sub[j].s == 0, &out, err);
        }
    }
    for (int i = 0; i < t->n_suffix && add_special && !rc; i++)
        if (ivec_push(&out, t->suffix[i]))
            rc = sq_error_oom(err, "tokenizer");
    free(raw);
    free(sub);
    free(norm.p);
    encstate_free(&e);
    if (rc) {
        free(out.v);
        return rc;
    }
    if (!out.v) {
        out.v = malloc(sizeof(int32_t));
        if (!out.v)
            return sq_error_oom(err, "tokenizer");
    }
    *ids = out.v;
    *n = out.n;
    return SQ_OK;
}

/* ---- decoding ----------------------------------------------------------------------------- */

typedef struct {
    buf   *v;
    size_t n;
} strlist;

static void strlist_free(strlist *l)
{
    for (size_t i = 0; i < l->n; i++)
        free(l->v[i].p);
    free(l->v);
    l->v = NULL;
    l->n = 0;
}

static int dec_step(const sq_tokenizer *t, const op *o, strlist *in, strlist *outl, matcher *m)
{
    outl->v = calloc(in->n ? in->n : 1, sizeof *outl->v);
    outl->n = 0;
    if (!outl->v)
        return -1;
    switch (o->kind) {
    case DEC_FUSE:
    case DEC_BYTELEVEL: {
        buf all = {0}, raw = {0};
        if (buf_add(&all, "", 0))
            return -1;
        for (size_t i = 0; i < in->n; i++) {
            if (o->kind == DEC_FUSE) {
                if (buf_add(&all, in->v[i].p, in->v[i].n))
                    goto fail_bl;
                continue;
            }
            /* Characters of the byte table back to bytes; a token with any other character
             * keeps its own bytes. */
            size_t mark = raw.n, k;
            int ok = 1;
            for (size_t q = 0; q < in->v[i].n && ok; q += k) {
                uint32_t c = utf8_decode(in->v[i].p + q, &k);
                if (c < 324 && char_byte[c] >= 0) {
                    char ch = (char)char_byte[c];
                    if (buf_add(&raw, &ch, 1))
                        goto fail_bl;
                } else {
                    ok = 0;
                }
            }
            if (!ok) {
                raw.n = mark;
                if (buf_add(&raw, in->v[i].p, in->v[i].n))
                    goto fail_bl;
            }
        }
        if (o->kind == DEC_BYTELEVEL && buf_add_lossy(&all, raw.p ? raw.p : "", raw.n))
            goto fail_bl;
        free(raw.p);
        outl->v[0] = all;
        outl->n = 1;
        return 0;
    fail_bl:
        free(all.p);
        free(raw.p);
        return -1;
    }
    case DEC_BYTEFALLBACK: {
        buf bytes = {0};
        for (size_t i = 0; i <= in->n; i++) {
            int byte = -1;
            if (i < in->n && in->v[i].n == 6 && memcmp(in->v[i].p, "<0x", 3) == 0 &&
                in->v[i].p[5] == '>') {
                char hex[3] = {in->v[i].p[3], in->v[i].p[4], 0};
                char *end = NULL;
                long v = strtol(hex, &end, 16);
                if (end == hex + 2 && hex[0] != '-' && hex[0] != '+' && hex[0] != ' ')
                    byte = (int)v;
            }
            if (byte >= 0) {
                char c = (char)byte;
                if (buf_add(&bytes, &c, 1))
                    goto fail_bf;
                continue;
            }
            if (bytes.n) {
                buf s = {0};
                if (utf8_check(bytes.p, bytes.n) == bytes.n) {
                    if (buf_add(&s, bytes.p, bytes.n))
                        goto fail_bf;
                } else {
                    /* Hugging Face: one U+FFFD per byte when the bytes are no UTF-8. */
                    for (size_t q = 0; q < bytes.n; q++)
                        if (buf_add(&s, "\xef\xbf\xbd", 3))
                            goto fail_bf;
                }
                outl->v[outl->n++] = s;
                bytes.n = 0;
            }
            if (i < in->n) {
                outl->v[outl->n++] = in->v[i];
                in->v[i].p = NULL;
            }
        }
        free(bytes.p);
        return 0;
    fail_bf:
        free(bytes.p);
        return -1;
    }
    case DEC_METASPACE:
    case DEC_STRIP:
    case DEC_REPLACE:
        for (size_t i = 0; i < in->n; i++) {
            const buf *s = &in->v[i];
            buf r = {0};
            if (buf_add(&r, "", 0))
                return -1;
            outl->v[outl->n++] = r;
            buf *d = &outl->v[outl->n - 1];
            if (o->kind == DEC_METASPACE) {
                for (size_t q = 0; q < s->n;) {
                    if (s->n - q >= o->str_len && memcmp(s->p + q, o->str, o->str_len) == 0) {
                        if (!(i == 0 && o->a != PREPEND_NEVER) && buf_add(d, " ", 1))
                            return -1;
                        q += o->str_len;
                    } else {
                        if (buf_add(d, s->p + q, 1))
                            return -1;
                        q++;
                    }
                }
            } else if (o->kind == DEC_STRIP) {
                size_t lo = 0, hi = s->n;
                for (int k = 0; k < o->a && hi - lo >= o->str_len &&
                                memcmp(s->p + lo, o->str, o->str_len) == 0; k++)
                    lo += o->str_len;
                for (int k = 0; k < o->b && hi - lo >= o->str_len &&
                                memcmp(s->p + hi - o->str_len, o->str, o->str_len) == 0; k++)
                    hi -= o->str_len;
                if (buf_add(d, s->p + lo, hi - lo))
                    return -1;
            } else {
                size_t at = 0, ms, me;
                while (pattern_next(&o->pat, m, s->p, s->n, at, &ms, &me)) {
                    if (buf_add(d, s->p + at, ms - at) || buf_add(d, o->str, o->str_len))
                        return -1;
                    at = me;
                }
                if (buf_add(d, s->p + at, s->n - at))
                    return -1;
            }
        }
        return m->failed ? -1 : 0;
    }
    return -1;
}

int sq_tokenizer_decode(const sq_tokenizer *t, const int32_t *ids, size_t n, int skip_special,
                        char **text, size_t *len, sq_error *err)
{
    *text = NULL;
    *len = 0;
    byte_tables_init();
    strlist cur = {0};
    cur.v = calloc(n ? n : 1, sizeof *cur.v);
    if (!cur.v)
        return sq_error_oom(err, "tokenizer");
    for (size_t i = 0; i < n; i++) {
        int32_t id = ids[i];
        if (id < 0 || id >= t->n_ids || !t->tok[id].s) {
            strlist_free(&cur);
            return sq_error_set(err, SQ_EDATA, "ids[%zu]: id %d is outside the vocabulary of %s "
                                "(0..%d)", i, id, t->file, t->n_ids - 1);
        }
        if (skip_special && t->special[id])
            continue;
        if (buf_add(&cur.v[cur.n], t->tok[id].s, t->tok[id].len)) {
            strlist_free(&cur);
            return sq_error_oom(err, "tokenizer");
        }
        cur.n++;
    }
    matcher m = {0};
    int rc = SQ_OK;
    for (int i = 0; i < t->n_dec && !rc; i++) {
        strlist next = {0};
        if (dec_step(t, &t->dec[i], &cur, &next, &m))
            rc = m.failed ? sq_error_set(err, SQ_EDATA, "%s: decoder: a regular expression "
                                         "failed on the text", t->file)
                          : sq_error_oom(err, "tokenizer");
        strlist_free(&cur);
        cur = next;
    }
    pcre2_match_data_free(m.md);
    buf all = {0};
    if (!rc && buf_add(&all, "", 0))
        rc = sq_error_oom(err, "tokenizer");
    for (size_t i = 0; i < cur.n && !rc; i++) {
        /* Without a decoder Hugging Face joins the tokens with spaces. */
        if (!t->has_decoder && i > 0 && buf_add(&all, " ", 1))
            rc = sq_error_oom(err, "tokenizer");
        if (!rc && buf_add_lossy(&all, cur.v[i].p ? cur.v[i].p : "", cur.v[i].n))
            rc = sq_error_oom(err, "tokenizer");
    }
    strlist_free(&cur);
    if (rc) {
        free(all.p);
        return rc;
    }
    *text = all.p;
    *len = all.n;
    return SQ_OK;
}

/* ---- queries ------------------------------------------------------------------------------ */

int sq_tokenizer_vocab_size(const sq_tokenizer *t)
{
    return t->n_ids;
}

const int32_t *sq_tokenizer_eos(const sq_tokenizer *t, int *n)
{
    *n = t->n_eos;
    return t->eos;
}

int32_t sq_tokenizer_bos(const sq_tokenizer *t)
{
    return t->bos;
}

int sq_tokenizer_same(const sq_tokenizer *a, const sq_tokenizer *b)
{
    return memcmp(a->digest, b->digest, sizeof a->digest) == 0;
}
