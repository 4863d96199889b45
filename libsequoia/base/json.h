/* JSON helpers on top of cJSON: parsing with line/column errors and duplicate-key rejection,
 * typed field access whose errors name the file and the field path, and a printer that keeps
 * numeric arrays on one line so that plans and curves stay readable. */
#ifndef SQ_BASE_JSON_H
#define SQ_BASE_JSON_H

#include <stdio.h>

#include <cjson/cJSON.h>

#include "libsequoia/base/error.h"

/* Largest JSON file any tool reads (curves, plans, profiles, tables). */
#define SQ_JSON_MAX_BYTES (256u << 20)

/* Parses `text`; errors (SQ_EDATA) name `file`, the line and the column, and reject objects
 * that hold the same key twice. *out is freed with cJSON_Delete. */
int sq_json_parse(const char *file, const char *text, size_t len, cJSON **out, sq_error *err);

/* The first key that an object under `root` holds twice, or NULL: for readers that parse
 * pieces of a file themselves (JSON Lines) and refuse duplicates as sq_json_parse does. */
const char *sq_json_duplicate_key(const cJSON *root);

/* sq_file_read + sq_json_parse. */
int sq_json_load(const char *file, cJSON **out, sq_error *err);

/* Field access. `file` and `ctx` (the path of obj, "" for the top level, e.g. "curves[2]")
 * only serve the error message. A missing optional field leaves *out unchanged and returns
 * SQ_OK; a JSON null counts as missing. */
const cJSON *sq_json_field(const cJSON *obj, const char *key);
int sq_json_get_string(const cJSON *obj, const char *key, int required, const char **out,
                       const char *file, const char *ctx, sq_error *err);
int sq_json_get_number(const cJSON *obj, const char *key, int required, double *out,
                       const char *file, const char *ctx, sq_error *err);
int sq_json_get_int(const cJSON *obj, const char *key, int required, long long lo, long long hi,
                    long long *out, const char *file, const char *ctx, sq_error *err);

/* An array of finite numbers, each within [lo, hi]; *out (malloc'd, to free) gets *n values.
 * An empty array is an error. At most max_n entries. */
int sq_json_get_numbers(const cJSON *arr, double lo, double hi, size_t max_n, double **out,
                        size_t *n, const char *file, const char *ctx, sq_error *err);

/* The rows of arr (an array, checked by the caller) into v, which has room for all of them (v
 * NULL: checked only): each row an array of k numbers in [0, 1] (probabilities);
 * max_row_sum > 0: a row summing above it is an error too. */
int sq_json_get_unit_rows(const cJSON *arr, int k, double max_row_sum, double *v,
                          const char *file, const char *ctx, sq_error *err);

/* ---- Building trees, and running out of memory (docs/design.md §10) -----------------------
 *
 * Out of memory is an error like any other: a function that builds a tree returns NULL (and a
 * function with an sq_error returns sq_error_oom, SQ_ESOFTWARE); nothing aborts. So that a tree
 * is built with plain calls and checked once, every cJSON allocation goes through allocation
 * hooks of this library (installed with cJSON_InitHooks when the library is loaded), which
 * count the allocations that fail, per thread. A builder brackets its work:
 *
 *     sq_json_build b = sq_json_build_begin();
 *     cJSON *o = cJSON_CreateObject();
 *     sq_json_add(o, "p", sq_json_number_array(p, n));      // plain calls, no checks
 *     cJSON_AddNumberToObject(o, "reject", r);
 *     return sq_json_build_end(b, o);                       // o, or NULL if anything failed
 *
 * The cJSON calls accept a NULL parent (the failed creation of a parent is already counted),
 * and so do sq_json_add and sq_json_append. An item that they cannot add stays valid, so that
 * a tree may be filled after it is attached, until the build ends, which frees it. Builders
 * nest: an inner build's failure also fails the outer one. A program that installs cJSON
 * hooks of its own after loading the library turns the counting off. */
typedef struct sq_json_build {
    unsigned long failures;   /* the thread's count of failed allocations at the start */
    cJSON        *orphans;    /* the thread's items not added, at the start            */
} sq_json_build;

sq_json_build sq_json_build_begin(void);

/* 1 when a cJSON allocation of this thread failed since `b` began (the tree is incomplete). */
int sq_json_build_failed(sq_json_build b);

/* Ends the build: `root` if nothing failed since `b` began (and root is not NULL); otherwise
 * frees root and returns NULL. Either way frees the items the build could not add. Every
 * begin has its end, in nesting order. */
cJSON *sq_json_build_end(sq_json_build b, cJSON *root);

/* Scratch memory for a builder, through the same counted allocator (free with cJSON_free):
 * its failure fails the build too. */
void *sq_json_scratch(size_t bytes);

/* Arrays of numbers; NULL if out of memory. */
cJSON *sq_json_number_array(const double *v, size_t n);
cJSON *sq_json_int_array(const int *v, size_t n);

/* obj[key] = item, arr[] += item. When the item cannot be added (a NULL item, a NULL obj or
 * arr, out of memory) the build fails, and the item is freed when the build ends. */
void sq_json_add(cJSON *obj, const char *key, cJSON *item);
void sq_json_append(cJSON *arr, cJSON *item);

/* Test hook (internal, for the out-of-memory tests): the n-th cJSON allocation of this thread
 * from now (0: the next one) fails, once, as if malloc had returned NULL. A negative n turns
 * the injection off. Returns the number of allocations counted since the previous call, so
 * that a test can learn how many allocations a build makes and fail each in turn. */
long sq_json_inject_oom(long n);

/* Test hook: cJSON blocks allocated through the hooks and not yet freed, all threads (a test
 * compares it before and after a build to see that nothing leaked). */
long sq_json_live_blocks(void);

/* Pretty-prints `item` followed by a newline. Arrays of scalars stay on one line; numbers use
 * the shortest of %.15g/%.17g that reads back exactly, so output is byte-stable. */
void sq_json_print(FILE *fp, const cJSON *item);

/* Writes `item` to `file` atomically (libsequoia/base/io.h), pretty-printed; "-" is standard output.
 * A NULL item (a builder that ran out of memory) is SQ_ESOFTWARE, and nothing is written. */
int sq_json_save(const char *file, const cJSON *item, sq_error *err);

/* Renders to a malloc'd string. */
char *sq_json_to_string(const cJSON *item, size_t *len);

#endif
