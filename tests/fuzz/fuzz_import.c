/* Fuzz harness: engine tree imports (planner/import.h): choices lists (JSON, Python tuples,
 * assignments) and growmap JSON. The first byte picks the reader: even = choices, odd =
 * growmap. Oracle: an imported tree validates, scores to a finite F >= 1, and re-imports
 * from its own choices export as the same tree. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "planner/export.h"
#include "planner/import.h"
#include "libsequoia/base/json.h"
#include "tests/fuzz/fuzz_util.h"

static void check_tree(sq_tree *t)
{
    sq_error e = {0};
    if (sq_tree_validate(t, "fuzz", &e) != SQ_OK)
        abort();
    sq_plan *plan = NULL;
    if (sq_plan_new(t, sq_curve_default(), 0, 0, 0, &plan, &e) != SQ_OK)
        return;  /* ownership passed; a refusal must say why */
    if (!isfinite(plan->expected_tokens) || plan->expected_tokens < 1.0)
        abort();
    sq_export_params ep = sq_export_default_params();
    ep.check_limits = 0;
    char *s = NULL;
    size_t len = 0;
    if (sq_export_to_string(plan, SQ_EXPORT_TRTLLM, &ep, "fuzz", &s, &len, &e) != SQ_OK)
        abort();
    sq_tree *t2 = NULL;
    if (sq_import_choices_text(s, "round", &t2, &e) != SQ_OK)
        abort();
    if (t2->n != plan->tree->n)
        abort();
    for (int i = 0; i < t2->n; i++)
        if (t2->parent[i] != plan->tree->parent[i] || t2->rank[i] != plan->tree->rank[i])
            abort();
    sq_tree_free(t2);
    free(s);
    sq_plan_free(plan);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    int growmap = data[0] & 1;
    char *text = fz_strndup(data + 1, size - 1);
    sq_tree *t = NULL;
    sq_error err = {0};
    if (!growmap) {
        if (sq_import_choices_text(text, "fuzz.txt", &t, &err) == SQ_OK)
            check_tree(t);
        else if (!err.msg[0])
            abort();
    } else {
        cJSON *root = NULL;
        if (sq_json_parse("fuzz.json", text, size - 1, &root, &err) == SQ_OK) {
            sq_error e2 = {0};
            if (sq_import_growmap_json(root, "fuzz.json", &t, &e2) == SQ_OK)
                check_tree(t);
            else if (!e2.msg[0])
                abort();
            cJSON_Delete(root);
        }
    }
    free(text);
    return 0;
}
