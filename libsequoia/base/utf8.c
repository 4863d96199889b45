/* UTF-8 well-formedness: libsequoia/base/utf8.h. */
#include "libsequoia/base/utf8.h"

size_t sq_utf8_len(const unsigned char *p, size_t n)
{
    unsigned c = p[0];
    if (c < 0x80)
        return 1;
    size_t k;
    unsigned lo = 0x80, hi = 0xbf;
    if (c >= 0xc2 && c <= 0xdf)
        k = 2;
    else if (c >= 0xe0 && c <= 0xef) {
        k = 3;
        if (c == 0xe0)
            lo = 0xa0;
        else if (c == 0xed)
            hi = 0x9f;
    } else if (c >= 0xf0 && c <= 0xf4) {
        k = 4;
        if (c == 0xf0)
            lo = 0x90;
        else if (c == 0xf4)
            hi = 0x8f;
    } else {
        return 0;
    }
    if (n < k || p[1] < lo || p[1] > hi)
        return 0;
    for (size_t i = 2; i < k; i++)
        if (p[i] < 0x80 || p[i] > 0xbf)
            return 0;
    return k;
}

int sq_text_bom(const char *file, const char *text, size_t len, size_t *skip, sq_error *err)
{
    const unsigned char *p = (const unsigned char *)text;
    *skip = 0;
    if (len >= 3 && p[0] == 0xef && p[1] == 0xbb && p[2] == 0xbf) {
        *skip = 3;
        return SQ_OK;
    }
    const char *which = NULL;
    if (len >= 4 && p[0] == 0xff && p[1] == 0xfe && p[2] == 0 && p[3] == 0)
        which = "UTF-32 (little-endian)";
    else if (len >= 4 && p[0] == 0 && p[1] == 0 && p[2] == 0xfe && p[3] == 0xff)
        which = "UTF-32 (big-endian)";
    else if (len >= 2 && p[0] == 0xff && p[1] == 0xfe)
        which = "UTF-16 (little-endian)";
    else if (len >= 2 && p[0] == 0xfe && p[1] == 0xff)
        which = "UTF-16 (big-endian)";
    if (!which)
        return SQ_OK;
    return sq_error_set(err, SQ_EDATA, "%s: starts with a %s byte order mark: expected UTF-8 "
                        "text (convert it, e.g. iconv -f %s -t UTF-8)", file, which,
                        which[4] == '1' ? "UTF-16" : "UTF-32");
}
