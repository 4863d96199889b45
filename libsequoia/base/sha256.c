#include "libsequoia/base/sha256.h"
#include "libsequoia/base/io.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#include <immintrin.h>
#define SQ_SHA256_X86 1
#endif

/* FIPS 180-4 §4.2.2: the first 32 bits of the fractional parts of the cube roots of the
 * first 64 primes. */
static const uint32_t K[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
};

static inline uint32_t rotr(uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }

/* One 512-bit block (§6.2.2). */
static void compress(uint32_t st[8], const uint8_t *p)
{
    uint32_t w[64];
    for (int t = 0; t < 16; t++)
        w[t] = (uint32_t)p[4 * t] << 24 | (uint32_t)p[4 * t + 1] << 16 |
               (uint32_t)p[4 * t + 2] << 8 | (uint32_t)p[4 * t + 3];
    for (int t = 16; t < 64; t++) {
        uint32_t s0 = rotr(w[t - 15], 7) ^ rotr(w[t - 15], 18) ^ (w[t - 15] >> 3);
        uint32_t s1 = rotr(w[t - 2], 17) ^ rotr(w[t - 2], 19) ^ (w[t - 2] >> 10);
        w[t] = w[t - 16] + s0 + w[t - 7] + s1;
    }
    uint32_t a = st[0], b = st[1], c = st[2], d = st[3], e = st[4], f = st[5], g = st[6],
             h = st[7];
    for (int t = 0; t < 64; t++) {
        uint32_t S1 = rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25);
        uint32_t ch = (e & f) ^ (~e & g);
        uint32_t t1 = h + S1 + ch + K[t] + w[t];
        uint32_t S0 = rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22);
        uint32_t maj = (a & b) ^ (a & c) ^ (b & c);
        uint32_t t2 = S0 + maj;
        h = g;
        g = f;
        f = e;
        e = d + t1;
        d = c;
        c = b;
        b = a;
        a = t1 + t2;
    }
    st[0] += a;
    st[1] += b;
    st[2] += c;
    st[3] += d;
    st[4] += e;
    st[5] += f;
    st[6] += g;
    st[7] += h;
}

#ifdef SQ_SHA256_X86
/* The same compression with the x86 SHA extensions (SHA-NI): the state is kept as the two
 * lanes ABEF and CDGH that sha256rnds2 works on; each round group of four adds K to four
 * message words, and sha256msg1/msg2 extend the schedule four words at a time:
 * W[t] = σ1(W[t-2]) + W[t-7] + σ0(W[t-15]) + W[t-16]. */
__attribute__((target("sha,sse4.1,ssse3")))
static void compress_hw(uint32_t st[8], const uint8_t *p, size_t blocks)
{
    const __m128i bswap = _mm_set_epi64x(0x0c0d0e0f08090a0bLL, 0x0405060700010203LL);
    __m128i dcba = _mm_loadu_si128((const __m128i *)&st[0]);
    __m128i hgfe = _mm_loadu_si128((const __m128i *)&st[4]);
    __m128i cdab = _mm_shuffle_epi32(dcba, 0xB1);
    __m128i efgh = _mm_shuffle_epi32(hgfe, 0x1B);
    __m128i abef = _mm_alignr_epi8(cdab, efgh, 8);
    __m128i cdgh = _mm_blend_epi16(efgh, cdab, 0xF0);
    for (; blocks > 0; blocks--, p += 64) {
        __m128i abef0 = abef, cdgh0 = cdgh, m[4];
        /* unrolled whatever the optimisation level: at -O2 (the default build) GCC kept the
         * loop and the schedule words m[] in memory, 1.3 against 1.7 GB/s (issue 27) */
#pragma GCC unroll 16
        for (int g = 0; g < 16; g++) {
            __m128i w;
            if (g < 4) {
                w = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(p + 16 * g)), bswap);
            } else {
                /* m[g%4] holds W[4g-16..4g-13]; m[(g+1)%4] the next four, m[(g+3)%4] the last
                 * four words, m[(g+2)%4] the four before them. */
                __m128i t = _mm_sha256msg1_epu32(m[g % 4], m[(g + 1) % 4]);
                t = _mm_add_epi32(t, _mm_alignr_epi8(m[(g + 3) % 4], m[(g + 2) % 4], 4));
                w = _mm_sha256msg2_epu32(t, m[(g + 3) % 4]);
            }
            m[g % 4] = w;
            __m128i wk = _mm_add_epi32(w, _mm_loadu_si128((const __m128i *)&K[4 * g]));
            cdgh = _mm_sha256rnds2_epu32(cdgh, abef, wk);
            /* cdgh now holds the new ABEF, and abef (two rounds old) is the new CDGH */
            abef = _mm_sha256rnds2_epu32(abef, cdgh, _mm_shuffle_epi32(wk, 0x0E));
            /* four rounds done: abef and cdgh hold their names' lanes again */
        }
        abef = _mm_add_epi32(abef, abef0);
        cdgh = _mm_add_epi32(cdgh, cdgh0);
    }
    __m128i feba = _mm_shuffle_epi32(abef, 0x1B);
    __m128i dchg = _mm_shuffle_epi32(cdgh, 0xB1);
    dcba = _mm_blend_epi16(feba, dchg, 0xF0);
    hgfe = _mm_alignr_epi8(dchg, feba, 8);
    _mm_storeu_si128((__m128i *)&st[0], dcba);
    _mm_storeu_si128((__m128i *)&st[4], hgfe);
}

static int hw_state = -1;   /* -1 not probed, 0 off, 1 on */

static int hw_available(void)
{
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & bit_SSSE3) || !(c & bit_SSE4_1))
        return 0;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d))
        return 0;
    return (b >> 29) & 1; /* CPUID.(EAX=7,ECX=0):EBX.SHA[bit 29] */
}

int sq_sha256_use_hw(int on)
{
    hw_state = on && hw_available();
    return hw_state;
}

static void compress_blocks(uint32_t st[8], const uint8_t *p, size_t blocks)
{
    if (hw_state < 0)
        hw_state = hw_available();
    if (hw_state) {
        compress_hw(st, p, blocks);
        return;
    }
    for (; blocks > 0; blocks--, p += 64)
        compress(st, p);
}
#else
int sq_sha256_use_hw(int on)
{
    (void)on;
    return 0;
}

static void compress_blocks(uint32_t st[8], const uint8_t *p, size_t blocks)
{
    for (; blocks > 0; blocks--, p += 64)
        compress(st, p);
}
#endif

void sq_sha256_init(sq_sha256 *h)
{
    static const uint32_t H0[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                   0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
    memcpy(h->state, H0, sizeof H0);
    h->length = 0;
    h->fill = 0;
}

void sq_sha256_update(sq_sha256 *h, const void *data, size_t len)
{
    const uint8_t *p = data;
    h->length += len;
    if (h->fill) {
        size_t take = 64 - h->fill < len ? 64 - h->fill : len;
        memcpy(h->block + h->fill, p, take);
        h->fill += take;
        p += take;
        len -= take;
        if (h->fill < 64)
            return;
        compress_blocks(h->state, h->block, 1);
        h->fill = 0;
    }
    size_t blocks = len / 64;
    compress_blocks(h->state, p, blocks);
    p += 64 * blocks;
    len -= 64 * blocks;
    memcpy(h->block, p, len);
    h->fill = len;
}

void sq_sha256_final(sq_sha256 *h, uint8_t digest[SQ_SHA256_BYTES])
{
    uint64_t bits = h->length * 8;
    /* Padding (§5.1.1): a one bit, zeros up to 56 mod 64 bytes, the length in bits. */
    h->block[h->fill++] = 0x80;
    if (h->fill > 56) {
        memset(h->block + h->fill, 0, 64 - h->fill);
        compress(h->state, h->block);
        h->fill = 0;
    }
    memset(h->block + h->fill, 0, 56 - h->fill);
    for (int i = 0; i < 8; i++)
        h->block[56 + i] = (uint8_t)(bits >> (56 - 8 * i));
    compress(h->state, h->block);
    for (int i = 0; i < 8; i++) {
        digest[4 * i] = (uint8_t)(h->state[i] >> 24);
        digest[4 * i + 1] = (uint8_t)(h->state[i] >> 16);
        digest[4 * i + 2] = (uint8_t)(h->state[i] >> 8);
        digest[4 * i + 3] = (uint8_t)h->state[i];
    }
    h->fill = 0;
}

void sq_sha256_hex(const uint8_t digest[SQ_SHA256_BYTES], char hex[SQ_SHA256_HEX])
{
    static const char digits[] = "0123456789abcdef";
    for (int i = 0; i < SQ_SHA256_BYTES; i++) {
        hex[2 * i] = digits[digest[i] >> 4];
        hex[2 * i + 1] = digits[digest[i] & 15];
    }
    hex[2 * SQ_SHA256_BYTES] = '\0';
}

int sq_sha256_file(const char *path, uint8_t digest[SQ_SHA256_BYTES], sq_error *err)
{
    int fd;
    int rc0 = sq_input_open(path, "a file", NULL, &fd, err);
    if (rc0)
        return rc0;
    enum { BUF = 1 << 20 };
    uint8_t *buf = malloc(BUF);
    if (!buf) {
        close(fd);
        return sq_error_oom(err, "a read buffer");
    }
    sq_sha256 h;
    sq_sha256_init(&h);
    for (;;) {
        ssize_t r = read(fd, buf, BUF);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            int e = errno;
            free(buf);
            close(fd);
            return sq_error_set(err, SQ_EIO, "%s: read error: %s", path, strerror(e));
        }
        if (r == 0)
            break;
        sq_sha256_update(&h, buf, (size_t)r);
    }
    free(buf);
    close(fd);
    sq_sha256_final(&h, digest);
    return SQ_OK;
}
