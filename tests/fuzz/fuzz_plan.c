/* Fuzz harness: plan JSON (docs/design.md §7.4).
 * Oracle: a plan that loads has a valid tree and round-trips through sq_plan_to_json; every
 * export either succeeds or refuses with a message. */
#include <stdlib.h>
#include <string.h>

#include "planner/export.h"
#include "libsequoia/base/json.h"
#include "libsequoia/format/plan.h"
#include "tests/fuzz/fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = fz_strndup(data, size);
    cJSON *root = NULL;
    sq_error err = {0};
    if (sq_json_parse("fuzz.json", text, size, &root, &err) == SQ_OK) {
        sq_plan *plan = NULL;
        sq_error e2 = {0};
        if (sq_plan_from_json(root, "fuzz.json", &plan, &e2) == SQ_OK) {
            sq_error e3 = {0};
            if (sq_tree_validate(plan->tree, "fuzz.json", &e3) != SQ_OK)
                abort();
            cJSON *out = sq_plan_to_json(plan);
            char *s = out ? sq_json_to_string(out, NULL) : NULL;
            if (!s)
                abort();
            cJSON *back = NULL;
            sq_plan *plan2 = NULL;
            if (sq_json_parse("round.json", s, strlen(s), &back, &e3) != SQ_OK ||
                sq_plan_from_json(back, "round.json", &plan2, &e3) != SQ_OK)
                abort();
            if (plan2->tree->n != plan->tree->n)
                abort();
            sq_plan_free(plan2);
            cJSON_Delete(back);
            free(s);
            cJSON_Delete(out);
            /* Exports of small plans only: the mask of growmap is n^2. */
            if (plan->tree->n <= 512) {
                sq_export_params ep = sq_export_default_params();
                for (int f = 0; f < SQ_EXPORT_COUNT; f++) {
                    char *str = NULL;
                    size_t len = 0;
                    sq_error e4 = {0};
                    int rc = sq_export_to_string(plan, (sq_export_format)f, &ep, "fuzz.json", &str,
                                                 &len, &e4);
                    if (rc != SQ_OK && !e4.msg[0])
                        abort();
                    if (rc == SQ_OK && strlen(str) != len)
                        abort();
                    free(str);
                }
            }
            sq_plan_free(plan);
        } else if (!e2.msg[0]) {
            abort();
        }
        cJSON_Delete(root);
    } else if (!err.msg[0]) {
        abort();
    }
    free(text);
    return 0;
}
