/* The envelope engines' rules are one function (libsequoia/format/dynplan.c,
 * sq_dynplan_envelope_check; docs/engines.md, "Envelopes"): the run (runtime/dyntree.h,
 * sq_dyntree_check), the planner (planner/dynamic.h, sq_dyn_envelope_check) and the exports
 * (planner/export.h, sq_engine_envelope_check and sq_export_envelope) refuse exactly the same
 * envelopes, with the same message, over a grid of L <= 9, K <= 9, N <= 90; and the verdicts are
 * those of the engines' sources, restated here independently. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "libsequoia/format/dynplan.h"
#include "planner/dynamic.h"
#include "planner/export.h"
#include "runtime/dyntree.h"

/* SGLang: python/sglang/srt/speculative/eagle_utils.py (the N - 1 draft tokens are the best of
 * K + (L - 1) K^2 candidates) and server_args.py (topk 1 resets num_draft_tokens to
 * num_steps + 1). TensorRT-LLM: tensorrt_llm/llmapi/llm_args.py, EagleDecodingConfig's
 * validator (max_draft_len <= max_total_draft_tokens <= dynamic_tree_max_topK * max_draft_len). */
static int engine_takes(int trt, int L, int K, int N)
{
    if (L < 1 || K < 1 || N < 2)
        return 0;
    if (trt)
        return N - 1 >= L && N - 1 <= K * L;
    return N - 1 <= K + (L - 1) * K * K && (K > 1 || N == L + 1);
}

Test(envelope_rules, run_planner_and_export_refuse_the_same_envelopes)
{
    int taken[2] = {0}, refused[2] = {0};
    for (int trt = 0; trt < 2; trt++) {
        sq_dyn_engine de = trt ? SQ_DYN_TRTLLM : SQ_DYN_SGLANG;
        sq_engine pe = trt ? SQ_ENGINE_TRTLLM_DYNAMIC : SQ_ENGINE_SGLANG;
        for (int L = 0; L <= 9; L++)
            for (int K = 0; K <= 9; K++)
                for (int N = 0; N <= 90; N++) {
                    sq_error er = {0}, ep = {0}, ee = {0}, ex = {0}, eb = {0};
                    int run = sq_dyntree_check(de, L, K, N, &er);
                    int plan = sq_dyn_envelope_check(pe, L, K, N, NULL, &ep);
                    int exp = sq_engine_envelope_check(pe, L, K, N, "f.json", &ee);
                    int base = sq_dynplan_envelope_check(sq_engine_name(pe), L, K, N, NULL, &eb);
                    char *buf = NULL;
                    size_t len = 0;
                    FILE *fp = open_memstream(&buf, &len);
                    cr_assert_not_null(fp);
                    int wrote = sq_export_envelope(fp, pe, L, K, N, "f.json", &ex);
                    fclose(fp);
                    int want = engine_takes(trt, L, K, N);
                    cr_assert_eq(base, want ? SQ_OK : SQ_EUSAGE, "%s %d,%d,%d: %s",
                                 sq_engine_name(pe), L, K, N, eb.msg);
                    cr_assert_eq(run, base, "run %d,%d,%d: %s", L, K, N, er.msg);
                    cr_assert_eq(plan, base, "planner %d,%d,%d: %s", L, K, N, ep.msg);
                    cr_assert_eq(exp, base, "export check %d,%d,%d: %s", L, K, N, ee.msg);
                    cr_assert_eq(wrote, base, "export %d,%d,%d: %s", L, K, N, ex.msg);
                    if (want) {
                        cr_assert(len > 0, "an export of %d,%d,%d", L, K, N);
                        taken[trt]++;
                    } else {
                        /* one message: the run's and the planner's are the rule's own, the
                         * exports' prefix it with the file */
                        cr_assert_str_eq(er.msg, eb.msg);
                        cr_assert_str_eq(ep.msg, eb.msg);
                        cr_assert(strstr(ee.msg, eb.msg) && strstr(ex.msg, eb.msg),
                                  "'%s' / '%s' should hold '%s'", ee.msg, ex.msg, eb.msg);
                        cr_assert(strstr(eb.msg, "rule ") &&
                                  strstr(eb.msg, sq_engine_name(pe)),
                                  "names the rule and the engine: %s", eb.msg);
                        cr_assert_eq(len, 0, "nothing written for %d,%d,%d", L, K, N);
                        refused[trt]++;
                    }
                    free(buf);
                }
    }
    for (int t = 0; t < 2; t++)
        cr_assert(taken[t] > 500 && refused[t] > 500, "%d %d", taken[t], refused[t]);
}

/* What is not an engine rule stays with its caller: the run's grown tree within
 * SQ_PLAN_MAX_NODES, the planner's L, K <= 16 and N <= 4096. */
Test(envelope_rules, the_callers_own_limits_are_theirs)
{
    sq_error e = {0};
    cr_assert_eq(sq_dynplan_envelope_check("sglang", 17, 4, 20, NULL, &e), SQ_OK, "%s", e.msg);
    cr_assert_eq(sq_engine_envelope_check(SQ_ENGINE_SGLANG, 17, 4, 20, "f", &e), SQ_OK);
    cr_assert_eq(sq_dyntree_check(SQ_DYN_SGLANG, 17, 4, 20, &e), SQ_OK, "%s", e.msg);
    cr_assert_eq(sq_dyn_envelope_check(SQ_ENGINE_SGLANG, 17, 4, 20, NULL, &e), SQ_EUSAGE);
    cr_assert(strstr(e.msg, "toolkit's limits"), "%s", e.msg);
    e = (sq_error){0};
    cr_assert_eq(sq_dynplan_envelope_check("sglang", 3, 2000, 20, NULL, &e), SQ_OK);
    cr_assert_eq(sq_dyntree_check(SQ_DYN_SGLANG, 3, 2000, 20, &e), SQ_EUSAGE);
    cr_assert(strstr(e.msg, "grown tree") && strstr(e.msg, "not of sglang"), "%s", e.msg);
}
