#include "libsequoia/base/json.h"
#include "libsequoia/base/utf8.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "libsequoia/base/io.h"

static void line_col(const char *text, const char *at, int *line, int *col)
{
    *line = 1;
    *col = 1;
    for (const char *p = text; p < at && *p; p++) {
        if (*p == '\n') {
            (*line)++;
            *col = 1;
        } else {
            (*col)++;
        }
    }
}

/* Returns the first duplicated key found under `node`, or NULL. *where gets its object. */
static const cJSON *find_duplicate(const cJSON *node)
{
    for (const cJSON *c = node ? node->child : NULL; c; c = c->next) {
        if (cJSON_IsObject(node) && c->string) {
            for (const cJSON *d = node->child; d != c; d = d->next)
                if (d->string && strcmp(d->string, c->string) == 0)
                    return c;
        }
        const cJSON *inner = find_duplicate(c);
        if (inner)
            return inner;
    }
    return NULL;
}

const char *sq_json_duplicate_key(const cJSON *root)
{
    const cJSON *dup = find_duplicate(root);
    return dup ? dup->string : NULL;
}

/* Where the nesting of arrays and objects (outside strings) first goes past `limit`, or NULL. */
static const char *too_deep(const char *text, size_t len, int limit)
{
    int depth = 0, in_string = 0;
    for (size_t i = 0; i < len; i++) {
        char c = text[i];
        if (in_string) {
            if (c == '\\')
                i++;
            else if (c == '"')
                in_string = 0;
        } else if (c == '"') {
            in_string = 1;
        } else if (c == '[' || c == '{') {
            if (++depth > limit)
                return text + i;
        } else if (c == ']' || c == '}') {
            depth--;
        }
    }
    return NULL;
}

int sq_json_parse(const char *file, const char *text, size_t len, cJSON **out, sq_error *err)
{
    *out = NULL;
    size_t bom = 0;
    int rc = sq_text_bom(file, text, len, &bom, err);
    if (rc)
        return rc;
    text += bom;   /* a UTF-8 byte order mark is skipped (RFC 8259 §8.1) */
    len -= bom;
    if (len == 0)
        return sq_error_set(err, SQ_EDATA, "%s: empty file, expected JSON%s", file,
                            bom ? " (after its UTF-8 byte order mark)" : "");
    if (strlen(text) != len)
        return sq_error_set(err, SQ_EDATA, "%s: contains a NUL byte, not a JSON text", file);
    /* RFC 8259: JSON text is UTF-8. Names copied from it end up in other files. */
    for (size_t i = 0; i < len;) {
        size_t k = sq_utf8_len((const unsigned char *)text + i, len - i);
        if (k == 0) {
            int line = 0, col = 0;
            line_col(text, text + i, &line, &col);
            return sq_error_set(err, SQ_EDATA, "%s:%d:%d: invalid UTF-8 (byte 0x%02x); a JSON text "
                                "must be UTF-8", file, line, col, (unsigned char)text[i]);
        }
        i += k;
    }
    const char *end = NULL;
    /* len + 1: cJSON checks that the NUL terminator follows the value. */
    cJSON *root = cJSON_ParseWithLengthOpts(text, len + 1, &end, 1);
    if (!root) {
        const char *at = end ? end : cJSON_GetErrorPtr();
        int line = 0, col = 0;
        /* cJSON refuses more than CJSON_NESTING_LIMIT levels as a parse error: say so. */
        const char *deep = too_deep(text, len, CJSON_NESTING_LIMIT);
        if (deep && (!at || deep <= at)) {
            line_col(text, deep, &line, &col);
            return sq_error_set(err, SQ_EDATA, "%s:%d:%d: nested too deep (more than %d levels of "
                                "arrays and objects)", file, line, col, CJSON_NESTING_LIMIT);
        }
        if (at && at >= text && at <= text + len)
            line_col(text, at, &line, &col);
        return sq_error_set(err, SQ_EDATA, "%s:%d:%d: malformed JSON", file, line, col);
    }
    const cJSON *dup = find_duplicate(root);
    if (dup) {
        rc = sq_error_set(err, SQ_EDATA, "%s: key \"%s\" appears twice in one object", file,
                          dup->string);
        cJSON_Delete(root);
        return rc;
    }
    *out = root;
    return SQ_OK;
}

int sq_json_load(const char *file, cJSON **out, sq_error *err)
{
    char *text;
    size_t len;
    *out = NULL;
    int rc = sq_file_read(file, SQ_JSON_MAX_BYTES, &text, &len, err);
    if (rc)
        return rc;
    rc = sq_json_parse(file, text, len, out, err);
    free(text);
    return rc;
}

const cJSON *sq_json_field(const cJSON *obj, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    return (v && !cJSON_IsNull(v)) ? v : NULL;
}

#define SEP(ctx) ((ctx)[0] ? "." : "")

int sq_json_get_string(const cJSON *obj, const char *key, int required, const char **out,
                       const char *file, const char *ctx, sq_error *err)
{
    const cJSON *v = sq_json_field(obj, key);
    if (!v)
        return required ? sq_error_set(err, SQ_EDATA, "%s: %s%s%s: missing", file, ctx, SEP(ctx), key)
                        : SQ_OK;
    if (!cJSON_IsString(v))
        return sq_error_set(err, SQ_EDATA, "%s: %s%s%s: expected a string", file, ctx, SEP(ctx), key);
    *out = v->valuestring;
    return SQ_OK;
}

int sq_json_get_number(const cJSON *obj, const char *key, int required, double *out,
                       const char *file, const char *ctx, sq_error *err)
{
    const cJSON *v = sq_json_field(obj, key);
    if (!v)
        return required ? sq_error_set(err, SQ_EDATA, "%s: %s%s%s: missing", file, ctx, SEP(ctx), key)
                        : SQ_OK;
    if (!cJSON_IsNumber(v))
        return sq_error_set(err, SQ_EDATA, "%s: %s%s%s: expected a number", file, ctx, SEP(ctx), key);
    if (!isfinite(v->valuedouble))
        return sq_error_set(err, SQ_EDATA, "%s: %s%s%s: value is not finite", file, ctx, SEP(ctx), key);
    *out = v->valuedouble;
    return SQ_OK;
}

int sq_json_get_int(const cJSON *obj, const char *key, int required, long long lo, long long hi,
                    long long *out, const char *file, const char *ctx, sq_error *err)
{
    double d = 0;
    const cJSON *v = sq_json_field(obj, key);
    if (!v)
        return required ? sq_error_set(err, SQ_EDATA, "%s: %s%s%s: missing", file, ctx, SEP(ctx), key)
                        : SQ_OK;
    int rc = sq_json_get_number(obj, key, 1, &d, file, ctx, err);
    if (rc)
        return rc;
    if (d != floor(d) || d < (double)lo || d > (double)hi)
        return sq_error_set(err, SQ_EDATA, "%s: %s%s%s: value %.17g is not an integer in [%lld, %lld]",
                            file, ctx, SEP(ctx), key, d, lo, hi);
    *out = (long long)d;
    return SQ_OK;
}

int sq_json_get_numbers(const cJSON *arr, double lo, double hi, size_t max_n, double **out,
                        size_t *n, const char *file, const char *ctx, sq_error *err)
{
    *out = NULL;
    *n = 0;
    if (!cJSON_IsArray(arr))
        return sq_error_set(err, SQ_EDATA, "%s: %s: expected an array of numbers", file, ctx);
    size_t count = (size_t)cJSON_GetArraySize(arr);
    if (count == 0)
        return sq_error_set(err, SQ_EDATA, "%s: %s: empty array", file, ctx);
    if (count > max_n)
        return sq_error_set(err, SQ_EDATA, "%s: %s: %zu entries, more than the limit of %zu", file,
                            ctx, count, max_n);
    double *v = malloc(count * sizeof *v);
    if (!v)
        return sq_error_oom(err, ctx);
    size_t i = 0;
    for (const cJSON *e = arr->child; e; e = e->next, i++) {
        if (!cJSON_IsNumber(e)) {
            free(v);
            return sq_error_set(err, SQ_EDATA, "%s: %s[%zu]: expected a number", file, ctx, i);
        }
        double x = e->valuedouble;
        if (!isfinite(x)) {
            free(v);
            return sq_error_set(err, SQ_EDATA, "%s: %s[%zu]: value is not finite", file, ctx, i);
        }
        if (x < lo || x > hi) {
            free(v);
            return sq_error_set(err, SQ_EDATA, "%s: %s[%zu]: value %.17g is outside [%g, %g]", file,
                                ctx, i, x, lo, hi);
        }
        v[i] = x;
    }
    *out = v;
    *n = count;
    return SQ_OK;
}

int sq_json_get_unit_rows(const cJSON *arr, int k, double max_row_sum, double *v,
                          const char *file, const char *ctx, sq_error *err)
{
    int i = 0;
    const cJSON *row;
    cJSON_ArrayForEach(row, arr) {
        if (!cJSON_IsArray(row) || cJSON_GetArraySize(row) != k)
            return sq_error_set(err, SQ_EDATA, "%s: %s[%d]: expected %d numbers", file, ctx, i, k);
        int j = 0;
        double sum = 0;
        const cJSON *x;
        cJSON_ArrayForEach(x, row) {
            if (!cJSON_IsNumber(x) || !(x->valuedouble >= 0 && x->valuedouble <= 1))
                return sq_error_set(err, SQ_EDATA, "%s: %s[%d][%d]: expected a probability in "
                                    "[0, 1]", file, ctx, i, j);
            if (v)
                v[(size_t)i * k + j] = x->valuedouble;
            j++;
            sum += x->valuedouble;
        }
        if (max_row_sum > 0 && sum > max_row_sum)
            return sq_error_set(err, SQ_EDATA, "%s: %s[%d]: the probabilities sum to %.6g > 1",
                                file, ctx, i, sum);
        i++;
    }
    return SQ_OK;
}

/* ---- building trees: counted allocation (json.h, "Building trees") ------------------------ */

static _Thread_local unsigned long alloc_failures;   /* failed cJSON allocations, this thread */
static _Thread_local long alloc_count;               /* allocations since sq_json_inject_oom  */
static _Thread_local long inject_at = -1;            /* the allocation that is made to fail   */
/* Items that sq_json_add or sq_json_append could not add, chained through their `next`: they
 * stay valid (a builder may still fill them) until the build that made them ends. */
static _Thread_local cJSON *orphans;
static atomic_long live_blocks;   /* cJSON blocks allocated and not yet freed (a test hook) */

static void *counted_malloc(size_t bytes)
{
    long k = alloc_count++;
    void *p = k == inject_at ? NULL : malloc(bytes);
    if (k == inject_at)
        inject_at = -1;
    if (!p)
        alloc_failures++;
    else
        atomic_fetch_add_explicit(&live_blocks, 1, memory_order_relaxed);
    return p;
}

static void counted_free(void *p)
{
    if (p)
        atomic_fetch_sub_explicit(&live_blocks, 1, memory_order_relaxed);
    free(p);
}

/* Installed when the library is loaded, before any thread of the program's: every cJSON
 * allocation (parsing, building, cJSON_Duplicate) is counted. Both hooks end in malloc and
 * free, so a block is freed the same way whoever allocated it. */
__attribute__((constructor)) static void install_hooks(void)
{
    cJSON_Hooks hooks = {.malloc_fn = counted_malloc, .free_fn = counted_free};
    cJSON_InitHooks(&hooks);
}

long sq_json_live_blocks(void)
{
    return atomic_load_explicit(&live_blocks, memory_order_relaxed);
}

long sq_json_inject_oom(long n)
{
    long counted = alloc_count;
    alloc_count = 0;
    inject_at = n;
    return counted;
}

sq_json_build sq_json_build_begin(void)
{
    return (sq_json_build){.failures = alloc_failures, .orphans = orphans};
}

int sq_json_build_failed(sq_json_build b)
{
    return alloc_failures != b.failures;
}

cJSON *sq_json_build_end(sq_json_build b, cJSON *root)
{
    /* builds nest: free only the orphans of this one (and of builds inside it) */
    while (orphans && orphans != b.orphans) {
        cJSON *o = orphans;
        orphans = o->next;
        o->next = NULL;
        cJSON_Delete(o);
    }
    if (root && !sq_json_build_failed(b))
        return root;
    cJSON_Delete(root);
    return NULL;
}

/* An item that could not be added: the build fails, and the item lives on as an orphan. */
static void orphan(cJSON *item)
{
    alloc_failures++;
    if (item) {
        item->prev = NULL;
        item->next = orphans;
        orphans = item;
    }
}

void *sq_json_scratch(size_t bytes)
{
    return cJSON_malloc(bytes ? bytes : 1);
}

cJSON *sq_json_number_array(const double *v, size_t n)
{
    sq_json_build b = sq_json_build_begin();
    cJSON *a = cJSON_CreateArray();
    for (size_t i = 0; i < n && a; i++)
        sq_json_append(a, cJSON_CreateNumber(v[i]));
    return sq_json_build_end(b, a);
}

cJSON *sq_json_int_array(const int *v, size_t n)
{
    sq_json_build b = sq_json_build_begin();
    cJSON *a = cJSON_CreateArray();
    for (size_t i = 0; i < n && a; i++)
        sq_json_append(a, cJSON_CreateNumber(v[i]));
    return sq_json_build_end(b, a);
}

void sq_json_add(cJSON *obj, const char *key, cJSON *item)
{
    if (!item || !obj || !cJSON_AddItemToObject(obj, key, item))
        orphan(item);
}

void sq_json_append(cJSON *arr, cJSON *item)
{
    if (!item || !arr || !cJSON_AddItemToArray(arr, item))
        orphan(item);
}

/* ---- printer ------------------------------------------------------------------------------ */

static void print_number(FILE *fp, double x)
{
    if (!isfinite(x)) {
        fputs("null", fp); /* JSON has no NaN/inf; writers validate before they get here */
        return;
    }
    if (x == floor(x) && fabs(x) < 1e15) {
        fprintf(fp, "%.0f", x);
        return;
    }
    char buf[40];
    snprintf(buf, sizeof buf, "%.15g", x);
    if (strtod(buf, NULL) != x)
        snprintf(buf, sizeof buf, "%.17g", x);
    fputs(buf, fp);
}

static void print_string(FILE *fp, const char *s)
{
    fputc('"', fp);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        switch (*p) {
        case '"':  fputs("\\\"", fp); break;
        case '\\': fputs("\\\\", fp); break;
        case '\n': fputs("\\n", fp); break;
        case '\r': fputs("\\r", fp); break;
        case '\t': fputs("\\t", fp); break;
        case '\b': fputs("\\b", fp); break;
        case '\f': fputs("\\f", fp); break;
        default:
            if (*p < 0x20) {
                fprintf(fp, "\\u%04x", *p);
            } else if (*p < 0x80) {
                fputc(*p, fp);
            } else {
                /* Names from elsewhere (file names, HDF5 attributes) may not be UTF-8: an
                 * invalid byte becomes U+FFFD, so that the output is always valid JSON. */
                size_t k = sq_utf8_len(p, strnlen((const char *)p, 4));
                if (k == 0) {
                    fputs("\xef\xbf\xbd", fp);
                } else {
                    fwrite(p, 1, k, fp);
                    p += k - 1;
                }
            }
        }
    }
    fputc('"', fp);
}

static int is_scalar(const cJSON *v)
{
    return !cJSON_IsArray(v) && !cJSON_IsObject(v);
}

static int all_scalars(const cJSON *arr)
{
    for (const cJSON *e = arr->child; e; e = e->next)
        if (!is_scalar(e))
            return 0;
    return 1;
}

static void indent(FILE *fp, int level)
{
    for (int i = 0; i < level; i++)
        fputs("  ", fp);
}

static void print_value(FILE *fp, const cJSON *v, int level)
{
    if (cJSON_IsNull(v) || cJSON_IsInvalid(v)) {
        fputs("null", fp);
    } else if (cJSON_IsFalse(v)) {
        fputs("false", fp);
    } else if (cJSON_IsTrue(v)) {
        fputs("true", fp);
    } else if (cJSON_IsNumber(v)) {
        print_number(fp, v->valuedouble);
    } else if (cJSON_IsString(v)) {
        print_string(fp, v->valuestring ? v->valuestring : "");
    } else if (cJSON_IsArray(v)) {
        if (!v->child) {
            fputs("[]", fp);
        } else if (all_scalars(v)) {
            fputc('[', fp);
            for (const cJSON *e = v->child; e; e = e->next) {
                print_value(fp, e, level);
                if (e->next)
                    fputs(", ", fp);
            }
            fputc(']', fp);
        } else {
            fputs("[\n", fp);
            for (const cJSON *e = v->child; e; e = e->next) {
                indent(fp, level + 1);
                print_value(fp, e, level + 1);
                fputs(e->next ? ",\n" : "\n", fp);
            }
            indent(fp, level);
            fputc(']', fp);
        }
    } else if (cJSON_IsObject(v)) {
        if (!v->child) {
            fputs("{}", fp);
            return;
        }
        fputs("{\n", fp);
        for (const cJSON *e = v->child; e; e = e->next) {
            indent(fp, level + 1);
            print_string(fp, e->string ? e->string : "");
            fputs(": ", fp);
            print_value(fp, e, level + 1);
            fputs(e->next ? ",\n" : "\n", fp);
        }
        indent(fp, level);
        fputc('}', fp);
    } else if (cJSON_IsRaw(v)) {
        fputs(v->valuestring ? v->valuestring : "null", fp);
    }
}

void sq_json_print(FILE *fp, const cJSON *item)
{
    print_value(fp, item, 0);
    fputc('\n', fp);
}

int sq_json_save(const char *file, const cJSON *item, sq_error *err)
{
    if (!item)   /* a builder ran out of memory (json.h, "Building trees") */
        return sq_error_set(err, SQ_ESOFTWARE, "%s: out of memory while building its JSON tree",
                            file);
    sq_out *out;
    int rc = sq_out_open(&out, file, err);
    if (rc)
        return rc;
    sq_json_print(sq_out_stream(out), item);
    return sq_out_commit(out, err);
}

char *sq_json_to_string(const cJSON *item, size_t *len)
{
    char *buf = NULL;
    size_t n = 0;
    FILE *fp = open_memstream(&buf, &n);
    if (!fp)
        return NULL;
    sq_json_print(fp, item);
    if (fclose(fp) != 0) {
        free(buf);
        return NULL;
    }
    if (len)
        *len = n;
    return buf;
}
