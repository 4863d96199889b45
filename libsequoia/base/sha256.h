/* SHA-256 (FIPS 180-4), for naming the exact corpus behind an acceptance curve. */
#ifndef SQ_BASE_SHA256_H
#define SQ_BASE_SHA256_H

#include <stddef.h>
#include <stdint.h>

#include "libsequoia/base/error.h"

#define SQ_SHA256_BYTES 32
#define SQ_SHA256_HEX (2 * SQ_SHA256_BYTES + 1)

typedef struct sq_sha256 {
    uint32_t state[8];   /* H0..H7                                  */
    uint64_t length;     /* message bytes so far                    */
    uint8_t  block[64];  /* pending input, `fill` bytes of it valid */
    size_t   fill;
} sq_sha256;

void sq_sha256_init(sq_sha256 *h);
void sq_sha256_update(sq_sha256 *h, const void *data, size_t len);
void sq_sha256_final(sq_sha256 *h, uint8_t digest[SQ_SHA256_BYTES]);

/* Lower-case hexadecimal digest (64 characters and a NUL). */
void sq_sha256_hex(const uint8_t digest[SQ_SHA256_BYTES], char hex[SQ_SHA256_HEX]);

/* Uses the CPU's SHA instructions (x86 SHA-NI) when `on` and the CPU has them (the default);
 * returns whether they are used. The result never depends on it. */
int sq_sha256_use_hw(int on);

/* Digest of a whole file. Errors: SQ_ENOINPUT, SQ_EIO. */
int sq_sha256_file(const char *path, uint8_t digest[SQ_SHA256_BYTES], sq_error *err);

#endif
