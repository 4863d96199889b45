/* Fuzz harness: latency profiles, JSON (docs/design.md §7.3) and engine CSV.
 * The first byte picks the reader: even = JSON, odd = CSV; the rest is the file.
 * Oracle: a loaded profile validates, round-trips, and interpolates to finite positive times
 * inside its range. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "libsequoia/base/json.h"
#include "libsequoia/format/profile.h"
#include "tests/fuzz/fuzz_util.h"

static void exercise(const sq_profile *p)
{
    sq_error e = {0};
    if (sq_profile_validate(p, "fuzz", &e) != SQ_OK)
        abort();
    double lo = p->points[0].tokens, hi = p->points[p->n - 1].tokens;
    for (int i = 0; i <= 8; i++) {
        double x = lo + (hi - lo) * i / 8.0, ms = 0;
        sq_error e2 = {0};
        if (sq_profile_ms(p, x, SQ_EXTRAPOLATE_NONE, &ms, &e2) != SQ_OK || !(ms > 0) ||
            !isfinite(ms))
            abort();
    }
    double ms;
    sq_error e3 = {0};
    (void)sq_profile_ms(p, hi * 2 + 1, SQ_EXTRAPOLATE_LINEAR, &ms, &e3);
    (void)sq_profile_ms(p, 0.5, SQ_EXTRAPOLATE_CONSTANT, &ms, &e3);
    int at;
    (void)sq_profile_max_spread(p, &at);
    cJSON *out = sq_profile_to_json(p);
    char *s = out ? sq_json_to_string(out, NULL) : NULL;
    if (!s)
        abort();
    cJSON *back = NULL;
    sq_profile *p2 = NULL;
    sq_error e4 = {0};
    if (sq_json_parse("round.json", s, strlen(s), &back, &e4) != SQ_OK ||
        sq_profile_from_json(back, "round.json", &p2, &e4) != SQ_OK || p2->n != p->n)
        abort();
    sq_profile_free(p2);
    cJSON_Delete(back);
    free(s);
    cJSON_Delete(out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    int csv = data[0] & 1;
    data++;
    size--;
    sq_profile *p = NULL;
    sq_error err = {0};
    if (csv) {
        const char *path = fz_scratch_file("profile.csv", data, size);
        if (sq_profile_from_csv(path, "fuzz", &p, &err) == SQ_OK)
            exercise(p);
        else if (!err.msg[0])
            abort();
    } else {
        char *text = fz_strndup(data, size);
        cJSON *root = NULL;
        if (sq_json_parse("fuzz.json", text, size, &root, &err) == SQ_OK) {
            sq_error e2 = {0};
            if (sq_profile_from_json(root, "fuzz.json", &p, &e2) == SQ_OK)
                exercise(p);
            else if (!e2.msg[0])
                abort();
            cJSON_Delete(root);
        }
        free(text);
    }
    sq_profile_free(p);
    return 0;
}
