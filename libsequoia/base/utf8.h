/* UTF-8 well-formedness (RFC 3629: no overlongs, no surrogates, at most U+10FFFF), shared by the
 * JSON readers (libsequoia/base/json.c) and the tokenizers (libsequoia/text/). Internal: not
 * installed (docs/design.md §9.1). */
#ifndef SQ_BASE_UTF8_H
#define SQ_BASE_UTF8_H

#include <stddef.h>

#include "libsequoia/base/error.h"

/* Length (1-4) of the well-formed UTF-8 sequence at p, of which n >= 1 bytes are readable; 0
 * when the bytes there are not one. */
size_t sq_utf8_len(const unsigned char *p, size_t n);

/* The start of a text input (JSON, CSV, token ids) of `len` bytes: *skip is 3 when it begins
 * with the UTF-8 byte order mark EF BB BF (editors on Windows write one; RFC 8259 §8.1 lets a
 * JSON parser ignore it), else 0. A UTF-16 or UTF-32 byte order mark is SQ_EDATA: `file:
 * starts with a UTF-16 (little-endian) byte order mark: expected UTF-8 text ...` (issue 27: a
 * byte order mark was reported as malformed JSON or as a bad first value). */
int sq_text_bom(const char *file, const char *text, size_t len, size_t *skip, sq_error *err);

#endif
