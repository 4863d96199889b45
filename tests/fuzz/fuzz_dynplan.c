/* Fuzz harness: dynamic plans and the curves' dynamic-tree statistics (issue 26; docs/formats.md).
 * Oracle: a dynamic plan that loads keeps its engine's envelope rules and round-trips through
 * sq_dynplan_to_json; statistics that load give a prediction in [1, L + 1] for a small envelope;
 * every refusal has a message. */
#include <stdlib.h>
#include <string.h>

#include "libsequoia/base/json.h"
#include "libsequoia/format/dynplan.h"
#include "planner/dynamic.h"
#include "tests/fuzz/fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = fz_strndup(data, size);
    cJSON *root = NULL;
    sq_error err = {0};
    if (sq_json_parse("fuzz.json", text, size, &root, &err) == SQ_OK) {
        sq_dynplan *p = NULL;
        sq_error e2 = {0};
        if (sq_dynplan_from_json(root, "fuzz.json", &p, &e2) == SQ_OK) {
            if (sq_dynplan_envelope_check(p->engine, p->steps, p->topk, p->nodes, NULL, NULL))
                abort();
            cJSON *out = sq_dynplan_to_json(p);
            char *s = out ? sq_json_to_string(out, NULL) : NULL;
            if (!s)
                abort();
            cJSON *back = NULL;
            sq_dynplan *p2 = NULL;
            sq_error e3 = {0};
            if (sq_json_parse("round.json", s, strlen(s), &back, &e3) != SQ_OK ||
                sq_dynplan_from_json(back, "round.json", &p2, &e3) != SQ_OK)
                abort();
            if (p2->nodes != p->nodes || p2->n_ladder != p->n_ladder)
                abort();
            sq_dynplan_free(p2);
            cJSON_Delete(back);
            free(s);
            cJSON_Delete(out);
            sq_dynplan_free(p);
        } else if (!e2.msg[0]) {
            abort();
        }
        const cJSON *acc = sq_json_field(sq_json_field(root, "dynamic"), "accept");
        const char *cfg = acc && acc->child && acc->child->string ? acc->child->string : "x";
        sq_dyn_samples *s = NULL;
        sq_error e4 = {0};
        if (sq_dyn_samples_from_json(root, "fuzz.json", cfg, &s, &e4) == SQ_OK) {
            double E = 0;
            int K = s->K < 2 ? s->K : 2;
            sq_dyn_predict_params pp = {.trials = 50, .seed = 1, .path = SQ_DYN_PATH_DRAW};
            if (sq_dyn_predict(s, 2, K, 2, &pp, &E, NULL, NULL, &e4) != SQ_OK || !(E >= 1) ||
                !(E <= 3))
                abort();
            sq_dyn_samples_free(s);
        } else if (!e4.msg[0]) {
            abort();
        }
        cJSON_Delete(root);
    } else if (!err.msg[0]) {
        abort();
    }
    free(text);
    return 0;
}
