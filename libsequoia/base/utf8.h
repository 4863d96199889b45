/* UTF-8 well-formedness (RFC 3629: no overlongs, no surrogates, at most U+10FFFF), shared by the
 * JSON readers (libsequoia/base/json.c) and the tokenizers (libsequoia/text/). Internal: not
 * installed (docs/design.md §9.1). */
#ifndef SQ_BASE_UTF8_H
#define SQ_BASE_UTF8_H

#include <stddef.h>

/* Length (1-4) of the well-formed UTF-8 sequence at p, of which n >= 1 bytes are readable; 0
 * when the bytes there are not one. */
size_t sq_utf8_len(const unsigned char *p, size_t n);

#endif
