/* Fuzz harness: acceptance-curve JSON (docs/design.md §7.1).
 * Oracle: a file that loads must survive a round trip (to JSON, parse, load again) with the
 * same widths and vectors, and every accessor must stay in bounds. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "libsequoia/format/curve.h"
#include "libsequoia/base/json.h"
#include "tests/fuzz/fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = fz_strndup(data, size);
    cJSON *root = NULL;
    sq_error err = {0};
    if (sq_json_parse("fuzz.json", text, size, &root, &err) == SQ_OK) {
        sq_curve_set *set = NULL;
        sq_error e2 = {0};
        if (sq_curve_set_from_json(root, "fuzz.json", &set, &e2) == SQ_OK) {
            for (int i = 0; i < set->n; i++) {
                const sq_curve *c = &set->curves[i];
                double sum = 0;
                for (int d = 1; d <= c->depth_rows + 2; d++)
                    for (int k = 1; k <= c->width + 1; k++)
                        sum += sq_curve_p(c, d, k);
                if (!isfinite(sum))
                    abort();
                (void)sq_curve_rank_semantics(c);
            }
            cJSON *out = sq_curve_set_to_json(set);
            char *s = out ? sq_json_to_string(out, NULL) : NULL;
            if (!s)
                abort();
            cJSON *back = NULL;
            sq_curve_set *set2 = NULL;
            sq_error e3 = {0};
            if (sq_json_parse("round.json", s, strlen(s), &back, &e3) != SQ_OK ||
                sq_curve_set_from_json(back, "round.json", &set2, &e3) != SQ_OK)
                abort();  /* what we write, we must read */
            if (set2->n != set->n)
                abort();
            for (int i = 0; i < set->n; i++) {
                if (set2->curves[i].width != set->curves[i].width ||
                    set2->curves[i].depth_rows != set->curves[i].depth_rows)
                    abort();
                for (int k = 0; k < set->curves[i].width; k++)
                    if (set2->curves[i].p[k] != set->curves[i].p[k]) {
                        fprintf(stderr, "fuzz-curve: curves[%d].p[%d]: %.17g written, %.17g read "
                                "back from %s\n", i, k, set->curves[i].p[k], set2->curves[i].p[k], s);
                        abort();
                    }
            }
            const sq_curve *pick = NULL;
            sq_error e4 = {0};
            (void)sq_curve_set_select(set, NULL, "fuzz.json", &pick, &e4);
            sq_curve_set_free(set2);
            cJSON_Delete(back);
            free(s);
            cJSON_Delete(out);
            sq_curve_set_free(set);
        } else if (e2.status == SQ_OK || !e2.msg[0]) {
            abort();  /* a failure must say why */
        }
        cJSON_Delete(root);
    } else if (!err.msg[0]) {
        abort();
    }
    free(text);
    return 0;
}
