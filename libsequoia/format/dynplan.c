/* Dynamic plans (dynplan.h; docs/formats.md, "Dynamic plan"). */
#include "libsequoia/format/dynplan.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "libsequoia/base/json.h"
#include "libsequoia/format/plan.h"

/* The one statement of the envelope engines' rules (dynplan.h); the planner (planner/dynamic.c,
 * sq_dyn_envelope_check), the exports (planner/engines.c, sq_engine_envelope_check) and the run
 * (runtime/dyntree.c, sq_dyntree_check) call this. Only the engines' rules: this toolkit's own
 * limits (the planner's L, K <= 16, N <= 4096; the run's grown tree within SQ_PLAN_MAX_NODES
 * and K within the vocabulary) stay with their callers. No overflow for any int (the products
 * are taken in long long or double). */
int sq_dynplan_envelope_check(const char *engine, int L, int K, int N, const char *what,
                              sq_error *err)
{
    char pre[200];
    if (what)
        snprintf(pre, sizeof pre, "%s: envelope %d,%d,%d (L,K,N)", what, L, K, N);
    else
        snprintf(pre, sizeof pre, "envelope %d,%d,%d (L,K,N)", L, K, N);
    int sg = engine && !strcmp(engine, "sglang"), tr = engine && !strcmp(engine, "trtllm-dynamic");
    if (!sg && !tr)
        return sq_error_set(err, SQ_EUSAGE, "%s: %s takes static trees, not an envelope: not an "
                            "envelope engine (the envelope engines are sglang and "
                            "trtllm-dynamic)", pre, engine ? engine : "(no engine)");
    const char *name = sg ? "sglang" : "trtllm-dynamic";
    const char *eng = sg ? "SGLang" : "TensorRT-LLM";
    /* both engines: a draft step, a candidate per step, a draft token besides the root
     * (SGLang's server_args.py asserts speculative_num_steps and speculative_eagle_topk >= 1;
     * TensorRT-LLM's EagleDecodingConfig validator asks max_draft_len > 0,
     * dynamic_tree_max_topK > 0 and max_total_draft_tokens >= max_draft_len >= 1) */
    if (K < 1 || L < 1 || N < 2) {
        char which[64];
        if (K < 1)
            snprintf(which, sizeof which, "K = %d: %s needs K >= 1", K, name);
        else if (L < 1)
            snprintf(which, sizeof which, "L = %d: %s needs L >= 1", L, name);
        else
            snprintf(which, sizeof which, "N = %d: %s needs N >= 2", N, name);
        return sq_error_set(err, SQ_EUSAGE, "%s: %s (rule K >= 1, L >= 1, N >= 2 of %s: a "
                            "candidate per kept node, a draft step, and a draft token besides "
                            "the root, which N counts)", pre, which, eng);
    }
    if (sg) {
        /* python/sglang/srt/speculative/eagle_utils.py, organize_draft_results: torch.topk of
         * num_draft_token - 1 over the K + (L - 1) K^2 scored candidates (K at the first step,
         * K x K at each further one). In double: exact below 2^53, and past that the count
         * exceeds any int N anyway. */
        double cand = (double)K + (double)(L - 1) * K * K;
        if ((double)N - 1 > cand)
            return sq_error_set(err, SQ_EUSAGE, "%s: %s: N - 1 = %d exceeds K + (L - 1) K^2 = "
                                "%.0f, the candidates %s's tree chooses its draft tokens from "
                                "(rule N - 1 <= K + (L - 1) K^2; eagle_utils.py "
                                "organize_draft_results)", pre, name, N - 1, cand, eng);
        /* python/sglang/srt/server_args.py: with speculative_eagle_topk 1 the server resets
         * speculative_num_draft_tokens to speculative_num_steps + 1 (a chain) */
        if (K == 1 && N != L + 1)
            return sq_error_set(err, SQ_EUSAGE, "%s: %s: with K = 1 (--speculative-eagle-topk 1) "
                                "the %s server resets --speculative-num-draft-tokens to "
                                "--speculative-num-steps + 1 = %d, so N = %d would not run as "
                                "given (rule N = L + 1 when K = 1; server_args.py)", pre, name,
                                eng, L + 1, N);
        return SQ_OK;
    }
    /* tensorrt_llm/llmapi/llm_args.py, EagleDecodingConfig.validate_eagle_config with
     * use_dynamic_tree: max_draft_len <= max_total_draft_tokens <=
     * dynamic_tree_max_topK * max_draft_len */
    long long hi = (long long)K * L;
    if ((long long)N - 1 > hi)
        return sq_error_set(err, SQ_EUSAGE, "%s: %s: N - 1 = %d exceeds K L = %lld: %s's "
                            "max_total_draft_tokens may not exceed dynamic_tree_max_topK * "
                            "max_draft_len (rule max_total_draft_tokens <= dynamic_tree_max_topK "
                            "* max_draft_len, N - 1 <= K L; llm_args.py, "
                            "EagleDecodingConfig.validate_eagle_config)", pre, name, N - 1, hi,
                            eng);
    if (N - 1 < L)
        return sq_error_set(err, SQ_EUSAGE, "%s: %s: N - 1 = %d is below L = %d: %s's "
                            "max_total_draft_tokens may not be below max_draft_len (rule "
                            "max_total_draft_tokens >= max_draft_len, N - 1 >= L; llm_args.py, "
                            "EagleDecodingConfig.validate_eagle_config)", pre, name, N - 1, L,
                            eng);
    return SQ_OK;
}

void sq_dynplan_free(sq_dynplan *p)
{
    if (!p)
        return;
    cJSON_Delete(p->prediction);
    cJSON_Delete(p->hardware);
    free(p->curves_file);
    free(p->ladder);
    free(p);
}

int sq_dynplan_sniff(const cJSON *root)
{
    const cJSON *f = sq_json_field(root, "format");
    return cJSON_IsString(f) && !strcmp(f->valuestring, SQ_DYNPLAN_FORMAT);
}

/* envelope {steps, topk, nodes} at ctx, checked against the engine's rules (as SQ_EDATA). */
static int read_envelope(const cJSON *obj, const char *engine, const char *file, const char *ctx,
                         int *L, int *K, int *N, sq_error *err)
{
    if (!cJSON_IsObject(obj))
        return sq_error_set(err, SQ_EDATA, "%s: %s: %s", file, ctx,
                            obj ? "expected an object {\"steps\", \"topk\", \"nodes\"}"
                                : "missing");
    long long l = 0, k = 0, n = 0;
    int rc;
    if ((rc = sq_json_get_int(obj, "steps", 1, 1, SQ_DYNPLAN_MAX_STEPS, &l, file, ctx, err)) ||
        (rc = sq_json_get_int(obj, "topk", 1, 1, SQ_DYNPLAN_MAX_TOPK, &k, file, ctx, err)) ||
        (rc = sq_json_get_int(obj, "nodes", 1, 2, SQ_DYNPLAN_MAX_NODES, &n, file, ctx, err)))
        return rc;
    char what[300];
    snprintf(what, sizeof what, "%s: %s", file, ctx);
    sq_error e = {0};
    if (sq_dynplan_envelope_check(engine, (int)l, (int)k, (int)n, what, &e))
        return sq_error_set(err, SQ_EDATA, "%s", e.msg);
    *L = (int)l;
    *K = (int)k;
    *N = (int)n;
    return SQ_OK;
}

static int read_expected(const cJSON *obj, const char *key, int L, const char *file,
                         const char *ctx, double *out, sq_error *err)
{
    int rc = sq_json_get_number(obj, key, 1, out, file, ctx, err);
    if (!rc && !(*out >= 1 && *out <= L + 1 + 1e-9))
        rc = sq_error_set(err, SQ_EDATA, "%s: %s%s%s: %.17g, expected tokens per step lie in "
                          "[1, L + 1 = %d]", file, ctx, *ctx ? "." : "", key, *out, L + 1);
    return rc;
}

/* A rung's optional "sequoia_run" object: tokens_per_second > 0 required in it,
 * predicted_speedup > 0, draft_catchup_tokens and round_ms >= 0 when present. */
static int read_rung_run(const cJSON *r, const char *file, const char *ctx, sq_dynplan_rung *g,
                         sq_error *err)
{
    const cJSON *rt = sq_json_field(r, SQ_PLAN_HW_RUNTIME);
    if (!rt)
        return SQ_OK;
    char rctx[96];
    snprintf(rctx, sizeof rctx, "%s." SQ_PLAN_HW_RUNTIME, ctx);
    if (!cJSON_IsObject(rt))
        return sq_error_set(err, SQ_EDATA, "%s: %s: expected an object", file, rctx);
    const char *key[] = {"tokens_per_second", "predicted_speedup", "draft_catchup_tokens",
                         "round_ms"};
    double *val[] = {&g->run_tokens_per_second, &g->run_speedup, &g->run_catchup,
                     &g->run_round_ms};
    for (int k = 0; k < 4; k++) {
        int rc = sq_json_get_number(rt, key[k], k == 0, val[k], file, rctx, err);
        if (rc)
            return rc;
        if (!isfinite(*val[k]) || *val[k] < 0 || (k < 2 && sq_json_field(rt, key[k]) &&
                                                  !(*val[k] > 0)))
            return sq_error_set(err, SQ_EDATA, "%s: %s.%s: %.17g, expected a finite number %s 0",
                                file, rctx, key[k], *val[k], k < 2 ? ">" : ">=");
    }
    return SQ_OK;
}

int sq_dynplan_from_json(const cJSON *root, const char *file, sq_dynplan **out, sq_error *err)
{
    *out = NULL;
    if (!cJSON_IsObject(root))
        return sq_error_set(err, SQ_EDATA, "%s: expected a JSON object (a dynamic plan)", file);
    const char *fmt = NULL, *engine = NULL, *mode = NULL;
    long long ver = 0;
    int rc;
    if ((rc = sq_json_get_string(root, "format", 1, &fmt, file, "", err)))
        return rc;
    if (strcmp(fmt, SQ_DYNPLAN_FORMAT) != 0)
        return sq_error_set(err, SQ_EDATA, "%s: format: \"%s\", expected \"%s\"", file, fmt,
                            SQ_DYNPLAN_FORMAT);
    if ((rc = sq_json_get_int(root, "version", 1, 1, SQ_DYNPLAN_VERSION, &ver, file, "", err)) ||
        (rc = sq_json_get_string(root, "engine", 1, &engine, file, "", err)) ||
        (rc = sq_json_get_string(root, "mode", 1, &mode, file, "", err)))
        return rc;
    if (strcmp(engine, "sglang") && strcmp(engine, "trtllm-dynamic"))
        return sq_error_set(err, SQ_EDATA, "%s: engine: \"%s\", expected \"sglang\" or "
                            "\"trtllm-dynamic\"", file, engine);
    sq_dynplan *p = calloc(1, sizeof *p);
    if (!p)
        return sq_error_oom(err, "dynamic plan");
    snprintf(p->engine, sizeof p->engine, "%s", engine);
    if (sq_mode_parse(mode, &p->mode) != 0 || p->mode == SQ_MODE_SPECINFER) {
        rc = sq_error_set(err, SQ_EDATA, "%s: mode: \"%s\", expected greedy, topk or stochastic "
                          "(specinfer is not run on dynamic trees)", file, mode);
        goto fail;
    }
    p->top_p = 1.0;
    if ((rc = sq_json_get_number(root, "temperature", 1, &p->temperature, file, "", err)) ||
        (rc = sq_json_get_number(root, "top_p", 0, &p->top_p, file, "", err)))
        goto fail;
    if (!(p->temperature >= 0 && p->temperature <= 1e6) ||
        (p->temperature == 0 && p->mode != SQ_MODE_GREEDY)) {
        rc = sq_error_set(err, SQ_EDATA, "%s: temperature: %.17g, expected >= 0 (0 only with "
                          "mode greedy)", file, p->temperature);
        goto fail;
    }
    if (!(p->top_p > 0 && p->top_p <= 1)) {
        rc = sq_error_set(err, SQ_EDATA, "%s: top_p: %.17g, expected in (0, 1]", file, p->top_p);
        goto fail;
    }
    if ((rc = read_envelope(sq_json_field(root, "envelope"), p->engine, file, "envelope",
                            &p->steps, &p->topk, &p->nodes, err)) ||
        (rc = read_expected(root, "expected_tokens", p->steps, file, "", &p->expected_tokens,
                            err)))
        goto fail;
    const cJSON *pred = sq_json_field(root, "prediction");
    if (pred) {
        const char *method = NULL;
        if (!cJSON_IsObject(pred)) {
            rc = sq_error_set(err, SQ_EDATA, "%s: prediction: expected an object", file);
            goto fail;
        }
        if ((rc = sq_json_get_string(pred, "method", 1, &method, file, "prediction", err)))
            goto fail;
        if (!(p->prediction = cJSON_Duplicate(pred, 1))) {
            rc = sq_error_oom(err, "prediction");
            goto fail;
        }
    }
    const cJSON *cv = sq_json_field(root, "curves");
    if (cv) {
        const char *cf = NULL, *sha = NULL;
        if (!cJSON_IsObject(cv)) {
            rc = sq_error_set(err, SQ_EDATA, "%s: curves: expected an object {\"file\", "
                              "\"sha256\"}", file);
            goto fail;
        }
        if ((rc = sq_json_get_string(cv, "file", 1, &cf, file, "curves", err)) ||
            (rc = sq_json_get_string(cv, "sha256", 1, &sha, file, "curves", err)))
            goto fail;
        int hex = strlen(sha) == 64;
        for (int i = 0; hex && i < 64; i++)
            hex = (sha[i] >= '0' && sha[i] <= '9') || (sha[i] >= 'a' && sha[i] <= 'f');
        if (!hex) {
            rc = sq_error_set(err, SQ_EDATA, "%s: curves.sha256: expected 64 lowercase hex "
                              "digits", file);
            goto fail;
        }
        memcpy(p->curves_sha256, sha, 65);
        if (!(p->curves_file = strdup(cf))) {
            rc = sq_error_oom(err, "curves");
            goto fail;
        }
    }
    const cJSON *hw = sq_json_field(root, "hardware");
    if (hw) {
        const cJSON *x;
        if (!cJSON_IsObject(hw)) {
            rc = sq_error_set(err, SQ_EDATA, "%s: hardware: expected an object", file);
            goto fail;
        }
        cJSON_ArrayForEach(x, hw)
            if (cJSON_IsNumber(x) && !isfinite(x->valuedouble)) {
                rc = sq_error_set(err, SQ_EDATA, "%s: hardware.%s: not a finite number", file,
                                  x->string);
                goto fail;
            }
        const char *num[] = {"round_ms", "tokens_per_second", "round_target_ms", "round_draft_ms"};
        for (int i = 0; i < 4; i++) {
            double v = 1;
            if ((rc = sq_json_get_number(hw, num[i], 0, &v, file, "hardware", err)))
                goto fail;
            if (!(v >= 0)) {
                rc = sq_error_set(err, SQ_EDATA, "%s: hardware.%s: %.17g, expected >= 0", file,
                                  num[i], v);
                goto fail;
            }
        }
        if ((rc = sq_plan_check_runtime_cost(hw, file, err)))
            goto fail;
        if (!(p->hardware = cJSON_Duplicate(hw, 1))) {
            rc = sq_error_oom(err, "hardware");
            goto fail;
        }
    }
    const cJSON *lad = sq_json_field(root, "ladder");
    if (lad) {
        int n = cJSON_GetArraySize(lad);
        if (!cJSON_IsArray(lad) || n < 1 || n > SQ_DYNPLAN_MAX_LADDER) {
            rc = sq_error_set(err, SQ_EDATA, "%s: ladder: expected an array of 1 to %d rungs",
                              file, SQ_DYNPLAN_MAX_LADDER);
            goto fail;
        }
        if (!(p->ladder = calloc((size_t)n, sizeof *p->ladder))) {
            rc = sq_error_oom(err, "ladder");
            goto fail;
        }
        const cJSON *r;
        int i = 0;
        cJSON_ArrayForEach(r, lad) {
            char ctx[64];
            snprintf(ctx, sizeof ctx, "ladder[%d]", i);
            sq_dynplan_rung *g = &p->ladder[i];
            long long b = 0;
            if (!cJSON_IsObject(r)) {
                rc = sq_error_set(err, SQ_EDATA, "%s: %s: expected an object", file, ctx);
                goto fail;
            }
            if ((rc = sq_json_get_int(r, "batch", 1, 1, 1 << 20, &b, file, ctx, err)))
                goto fail;
            g->batch = (int)b;
            if (i > 0 && g->batch <= p->ladder[i - 1].batch) {
                rc = sq_error_set(err, SQ_EDATA, "%s: %s.batch: %d after %d; batch sizes must "
                                  "increase", file, ctx, g->batch, p->ladder[i - 1].batch);
                goto fail;
            }
            const cJSON *sp = sq_json_field(r, "speculate");
            if (!cJSON_IsBool(sp)) {
                rc = sq_error_set(err, SQ_EDATA, "%s: %s.speculate: expected true or false",
                                  file, ctx);
                goto fail;
            }
            g->speculate = cJSON_IsTrue(sp);
            char ectx[80];
            snprintf(ectx, sizeof ectx, "%s.envelope", ctx);
            if ((rc = read_envelope(sq_json_field(r, "envelope"), p->engine, file, ectx,
                                    &g->steps, &g->topk, &g->nodes, err)) ||
                (rc = read_expected(r, "expected_tokens", g->steps, file, ctx,
                                    &g->expected_tokens, err)) ||
                (rc = sq_json_get_number(r, "tokens_per_second", 1, &g->tokens_per_second, file,
                                         ctx, err)))
                goto fail;
            if (!(g->tokens_per_second > 0)) {
                rc = sq_error_set(err, SQ_EDATA, "%s: %s.tokens_per_second: %.17g, expected > 0",
                                  file, ctx, g->tokens_per_second);
                goto fail;
            }
            if ((rc = read_rung_run(r, file, ctx, g, err)))
                goto fail;
            i++;
        }
        p->n_ladder = n;
    }
    *out = p;
    return SQ_OK;
fail:
    sq_dynplan_free(p);
    return rc;
}

int sq_dynplan_load(const char *file, sq_dynplan **out, sq_error *err)
{
    cJSON *root = NULL;
    int rc = sq_json_load(file, &root, err);
    if (!rc)
        rc = sq_dynplan_from_json(root, file, out, err);
    cJSON_Delete(root);
    return rc;
}

/* The one parser of "--envelope L,K,N" (dynplan.h): sequoia-plan and sequoia-run (through
 * runtime/dyntree.c) both call it, so that the two tools read the same text alike. strtoll with
 * a range check: a number past int is refused as the user typed it, never wrapped into another
 * envelope (docs/robustness.md, "Bad inputs"). */
int sq_dynplan_envelope_parse(const char *s, int *L, int *K, int *N, sq_error *err)
{
    static const char *const field[] = {"L (draft steps)", "K (top-K)",
                                        "N (nodes, the root included)"};
    const char *text = s ? s : "", *p = text;
    int v[3];
    for (int i = 0; i < 3; i++) {
        char *end;
        errno = 0;
        long long x = strtoll(p, &end, 10);
        if (end == p)
            return sq_error_set(err, SQ_EUSAGE, "--envelope: '%.100s': %s is not an integer "
                                "(the form is L,K,N, e.g. 5,4,16)", text, field[i]);
        if (errno == ERANGE || x < INT_MIN || x > INT_MAX)
            return sq_error_set(err, SQ_EUSAGE, "--envelope: '%.100s': %s %.*s is out of range "
                                "(at most %d in magnitude)", text, field[i],
                                (int)(end - p > 40 ? 40 : end - p), p, INT_MAX);
        v[i] = (int)x;
        if (i < 2 && *end != ',')
            return sq_error_set(err, SQ_EUSAGE, "--envelope: '%.100s': three integers L,K,N "
                                "are needed (after %s)", text, field[i]);
        if (i == 2 && *end != '\0')
            return sq_error_set(err, SQ_EUSAGE, "--envelope: '%.100s': unexpected '%.20s' after "
                                "N (the form is L,K,N)", text, end);
        p = end + 1;
    }
    *L = v[0];
    *K = v[1];
    *N = v[2];
    return SQ_OK;
}

cJSON *sq_dynplan_envelope_json(int L, int K, int N)
{
    cJSON *e = cJSON_CreateObject();
    cJSON_AddNumberToObject(e, "steps", L);
    cJSON_AddNumberToObject(e, "topk", K);
    cJSON_AddNumberToObject(e, "nodes", N);
    return e;
}

cJSON *sq_dynplan_to_json(const sq_dynplan *p)
{
    sq_json_build b = sq_json_build_begin();
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "format", SQ_DYNPLAN_FORMAT);
    cJSON_AddNumberToObject(o, "version", SQ_DYNPLAN_VERSION);
    cJSON_AddStringToObject(o, "engine", p->engine);
    cJSON_AddStringToObject(o, "mode", sq_mode_name(p->mode));
    cJSON_AddNumberToObject(o, "temperature", p->temperature);
    cJSON_AddNumberToObject(o, "top_p", p->top_p);
    sq_json_add(o, "envelope", sq_dynplan_envelope_json(p->steps, p->topk, p->nodes));
    cJSON_AddNumberToObject(o, "expected_tokens", p->expected_tokens);
    if (p->prediction)
        sq_json_add(o, "prediction", cJSON_Duplicate(p->prediction, 1));
    if (p->curves_file) {
        cJSON *c = cJSON_CreateObject();
        cJSON_AddStringToObject(c, "file", p->curves_file);
        cJSON_AddStringToObject(c, "sha256", p->curves_sha256);
        sq_json_add(o, "curves", c);
    }
    if (p->hardware)
        sq_json_add(o, "hardware", cJSON_Duplicate(p->hardware, 1));
    if (p->n_ladder > 0) {
        cJSON *arr = cJSON_CreateArray();
        for (int i = 0; i < p->n_ladder; i++) {
            const sq_dynplan_rung *g = &p->ladder[i];
            cJSON *r = cJSON_CreateObject();
            cJSON_AddNumberToObject(r, "batch", g->batch);
            sq_json_add(r, "envelope", sq_dynplan_envelope_json(g->steps, g->topk, g->nodes));
            cJSON_AddBoolToObject(r, "speculate", g->speculate);
            cJSON_AddNumberToObject(r, "expected_tokens", g->expected_tokens);
            cJSON_AddNumberToObject(r, "tokens_per_second", g->tokens_per_second);
            if (g->run_tokens_per_second > 0) {
                cJSON *rt = cJSON_CreateObject();
                cJSON_AddNumberToObject(rt, "draft_catchup_tokens", g->run_catchup);
                cJSON_AddNumberToObject(rt, "round_ms", g->run_round_ms);
                cJSON_AddNumberToObject(rt, "tokens_per_second", g->run_tokens_per_second);
                cJSON_AddNumberToObject(rt, "predicted_speedup", g->run_speedup);
                sq_json_add(r, SQ_PLAN_HW_RUNTIME, rt);
            }
            sq_json_append(arr, r);
        }
        sq_json_add(o, "ladder", arr);
    }
    return sq_json_build_end(b, o);
}

int sq_dynplan_save(const char *file, const sq_dynplan *p, sq_error *err)
{
    cJSON *j = sq_dynplan_to_json(p);
    int rc = sq_json_save(file, j, err);
    cJSON_Delete(j);
    return rc;
}
