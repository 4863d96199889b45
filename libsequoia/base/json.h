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

/* Builders that abort on allocation failure (the trees are small and built from validated
 * data; running out of memory there is not a recoverable input error). */
cJSON *sq_json_number_array(const double *v, size_t n);
cJSON *sq_json_int_array(const int *v, size_t n);
void sq_json_add(cJSON *obj, const char *key, cJSON *item);

/* Pretty-prints `item` followed by a newline. Arrays of scalars stay on one line; numbers use
 * the shortest of %.15g/%.17g that reads back exactly, so output is byte-stable. */
void sq_json_print(FILE *fp, const cJSON *item);

/* Writes `item` to `file` atomically (libsequoia/base/io.h), pretty-printed; "-" is standard output. */
int sq_json_save(const char *file, const cJSON *item, sq_error *err);

/* Renders to a malloc'd string. */
char *sq_json_to_string(const cJSON *item, size_t *len);

#endif
