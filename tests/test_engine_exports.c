/* Suite 'engine-exports' (issue 26): what the exports write is what today's engines take, and
 * means what the plan says.
 *
 * Each engine's own rules are re-implemented here, from the engines' sources, independently of
 * planner/ (which must agree with them):
 *   TensorRT-LLM  tensorrt_llm/llmapi/llm_args.py: DecodingBaseConfig's validator of
 *                 draft_len_schedule (validate_draft_len_schedule_and_sort) and
 *                 EagleDecodingConfig.validate_eagle_config (max_draft_len > 0; with
 *                 use_dynamic_tree, dynamic_tree_max_topK > 0 and max_total_draft_tokens in
 *                 [max_draft_len, dynamic_tree_max_topK * max_draft_len]);
 *                 tensorrt_llm/_torch/speculative/utils.py get_draft_len_for_batch_size (bisect
 *                 over the sorted keys: the first key >= the batch size; past the last key the
 *                 floor min_draft_len; every value floored at it).
 *   vLLM          vllm/v1/spec_decode/dynamic/utils.py validate_and_normalize_dynamic_sd_schedule
 *                 and build_dynamic_sd_schedule_lookup (3-item ranges), with SpeculativeConfig's
 *                 num_speculative_tokens > 0 (vllm/config/speculative.py).
 *   SGLang        python/sglang/srt/server_args.py (topk 1 resets num_draft_tokens to steps + 1)
 *                 and the tree build of speculative/eagle_utils.py (the num_draft_tokens - 1 best
 *                 of topk + (steps - 1) topk^2 candidates, a top-k that fails past that size).
 * Random ladders (property tests) check that every schedule we export passes the engine's
 * validator and maps every batch size to the ladder's chain, and that we refuse exactly the
 * ladders the engine cannot take. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "libsequoia/base/json.h"
#include "libsequoia/format/dynplan.h"
#include "libsequoia/format/tree.h"
#include "planner/engine.h"
#include "planner/export.h"
#include "planner/ladder.h"

#define MAXR 16

/* ---- TensorRT-LLM, reproduced ----------------------------------------------------------- */

typedef struct trt_schedule {
    int n;
    long key[64], val[64];   /* sorted by key after validation */
} trt_schedule;

/* validate_draft_len_schedule_and_sort, then validate_eagle_config's max_draft_len > 0. Returns
 * 0, or 1 with the reason. */
static int trt_validate(trt_schedule *s, long max_draft_len, char *why, size_t cap)
{
    if (max_draft_len <= 0) {
        snprintf(why, cap, "max_draft_len must be > 0 for Eagle");
        return 1;
    }
    for (int i = 0; i < s->n; i++) {
        if (s->key[i] < 1) {
            snprintf(why, cap, "batch size threshold must be >= 1, got %ld", s->key[i]);
            return 1;
        }
        if (s->val[i] < 0) {
            snprintf(why, cap, "draft length must be >= 0, got %ld", s->val[i]);
            return 1;
        }
    }
    if (s->n == 0)
        return 0;
    int smallest = 0;
    for (int i = 1; i < s->n; i++)
        if (s->key[i] < s->key[smallest])
            smallest = i;
    if (s->val[smallest] != max_draft_len) {
        snprintf(why, cap, "schedule[%ld] must equal max_draft_len", s->key[smallest]);
        return 1;
    }
    for (int i = 0; i < s->n; i++)
        if (s->val[i] > max_draft_len) {
            snprintf(why, cap, "all draft lengths must be <= max_draft_len");
            return 1;
        }
    /* dict(sorted(...)): insertion sort by key */
    for (int i = 1; i < s->n; i++)
        for (int j = i; j > 0 && s->key[j - 1] > s->key[j]; j--) {
            long k = s->key[j], v = s->val[j];
            s->key[j] = s->key[j - 1];
            s->val[j] = s->val[j - 1];
            s->key[j - 1] = k;
            s->val[j - 1] = v;
        }
    return 0;
}

static long trt_draft_len_for_batch_size(const trt_schedule *s, long batch, long max_draft_len,
                                         long min_draft_len)
{
    if (!s)
        return max_draft_len;
    int lo = 0, hi = s->n;   /* bisect_left */
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (s->key[mid] < batch)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo < s->n)
        return s->val[lo] > min_draft_len ? s->val[lo] : min_draft_len;
    return min_draft_len;
}

/* validate_eagle_config with use_dynamic_tree=True */
static int trt_dynamic_accepts(long L, long K, long T)
{
    if (L <= 0 || K <= 0)
        return 0;
    return L <= T && T <= K * L;
}

/* ---- vLLM, reproduced --------------------------------------------------------------------- */

typedef struct vllm_schedule {
    int n;
    long lo[64], hi[64], k[64];
} vllm_schedule;

static int vllm_validate(vllm_schedule *s, long num_speculative_tokens, char *why, size_t cap)
{
    if (num_speculative_tokens <= 0) {
        snprintf(why, cap, "num_speculative_tokens must be > 0");
        return 1;
    }
    if (s->n == 0) {
        snprintf(why, cap, "must not be empty");
        return 1;
    }
    for (int i = 0; i < s->n; i++) {
        if (s->lo[i] <= 0 || s->hi[i] <= 0) {
            snprintf(why, cap, "range must be positive");
            return 1;
        }
        if (s->lo[i] > s->hi[i]) {
            snprintf(why, cap, "range start must be <= end");
            return 1;
        }
        if (s->k[i] < 0) {
            snprintf(why, cap, "values must be >= 0");
            return 1;
        }
    }
    for (int i = 1; i < s->n; i++)   /* sort by start */
        for (int j = i; j > 0 && s->lo[j - 1] > s->lo[j]; j--) {
            long a = s->lo[j], b = s->hi[j], c = s->k[j];
            s->lo[j] = s->lo[j - 1], s->hi[j] = s->hi[j - 1], s->k[j] = s->k[j - 1];
            s->lo[j - 1] = a, s->hi[j - 1] = b, s->k[j - 1] = c;
        }
    long prev_end = 0;
    for (int i = 0; i < s->n; i++) {
        if (s->lo[i] <= prev_end) {
            snprintf(why, cap, "ranges must be non-overlapping and sorted");
            return 1;
        }
        prev_end = s->hi[i];
    }
    if (s->lo[0] != 1) {
        snprintf(why, cap, "the first range must start at 1");
        return 1;
    }
    return 0;
}

/* build_dynamic_sd_schedule_lookup: dense[1..max_batch] */
static void vllm_lookup(const vllm_schedule *s, long max_batch, long nst, long *dense)
{
    long next = 1, last = -1;
    for (int i = 0; i < s->n; i++) {
        if (s->lo[i] > next && last >= 0)
            for (long b = next; b < (s->lo[i] < max_batch + 1 ? s->lo[i] : max_batch + 1); b++)
                dense[b] = last < nst ? last : nst;
        for (long b = s->lo[i] > next ? s->lo[i] : next;
             b <= (s->hi[i] < max_batch ? s->hi[i] : max_batch); b++)
            dense[b] = s->k[i] < nst ? s->k[i] : nst;
        if (s->hi[i] + 1 > next)
            next = s->hi[i] + 1;
        last = s->k[i];
        if (next > max_batch)
            break;
    }
    for (long b = next; b <= max_batch; b++)
        dense[b] = last < nst ? last : nst;
}

/* ---- SGLang, reproduced --------------------------------------------------------------------- */

/* The envelope runs as given: topk 1 keeps num_draft_tokens = steps + 1 only, and the tree's
 * top-k over the scored candidates needs num_draft_tokens - 1 <= topk + (steps - 1) topk^2. */
static int sglang_accepts(long L, long K, long N)
{
    if (L < 1 || K < 1 || N < 2)
        return 0;
    if (K == 1 && N != L + 1)
        return 0;
    return N - 1 <= K + (L - 1) * K * K;
}

/* ---- helpers -------------------------------------------------------------------------------- */

static unsigned long long rng_state = 0x9E3779B97F4A7C15ull;

static unsigned rnd(unsigned n)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (unsigned)(rng_state % n);
}

/* A ladder of n rungs with the given batch sizes and chain lengths (0: no chain pays). */
static sq_ladder *ladder_of(const int *batch, const int *len, int n)
{
    sq_ladder *l = calloc(1, sizeof *l);
    cr_assert_not_null(l);
    l->rungs = calloc((size_t)n, sizeof *l->rungs);
    cr_assert_not_null(l->rungs);
    l->n = n;
    for (int i = 0; i < n; i++) {
        l->rungs[i].batch = batch[i];
        /* a rung whose best chain does not pay may still have a chain of several nodes */
        l->rungs[i].chain.size = len[i] > 0 ? len[i] + 1 : 1 + (int)rnd(4);
        l->rungs[i].chain.gain = len[i] > 0 ? 1.0 + 0.01 * (1 + rnd(50)) : 0.5 + 0.01 * rnd(50);
    }
    return l;
}

static char *export_ladder(const sq_ladder *l, const char *engine, int *rc, sq_error *err)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *fp = open_memstream(&buf, &len);
    cr_assert_not_null(fp);
    *rc = sq_ladder_export(l, engine, fp, err);
    fclose(fp);
    return buf;
}

static cJSON *parse(const char *text)
{
    cJSON *j = NULL;
    sq_error err = {0};
    cr_assert_eq(sq_json_parse("export", text, strlen(text), &j, &err), SQ_OK, "%s\n%s", err.msg,
                 text);
    return j;
}

/* What the ladder says at batch size b (1 <= b <= last rung): the chain of the first rung whose
 * batch size is >= b. */
static int ladder_says(const int *batch, const int *len, int n, long b)
{
    for (int i = 0; i < n; i++)
        if (batch[i] >= b)
            return len[i];
    return -1;
}

static void random_ladder(int *batch, int *len, int *n)
{
    *n = 1 + (int)rnd(8);
    int b = rnd(3) ? 1 : 1 + (int)rnd(4);
    for (int i = 0; i < *n; i++) {
        batch[i] = b;
        b += 1 + (int)rnd(i < 3 ? 3 : 40);
        /* mostly shrinking chains, some growing ones, some zeros */
        int prev = i ? len[i - 1] : 1 + (int)rnd(8);
        switch (rnd(6)) {
        case 0: len[i] = 0; break;
        case 1: len[i] = prev + 1; break;
        case 2: len[i] = 1 + (int)rnd(9); break;
        default: len[i] = prev > 0 ? prev - (int)rnd(2) : 0; break;
        }
    }
}

/* ---- TensorRT-LLM draft_len_schedule ------------------------------------------------------- */

static void check_trtllm_schedule(const int *batch, const int *len, int n)
{
    sq_ladder *l = ladder_of(batch, len, n);
    sq_error err = {0};
    int rc;
    char *out = export_ladder(l, "trtllm-schedule", &rc, &err);
    int max = 0;
    for (int i = 0; i < n; i++)
        max = len[i] > max ? len[i] : max;
    int expressible = max > 0 && len[0] == max;
    if (!expressible) {
        cr_assert_eq(rc, SQ_EDATA, "a ladder TensorRT-LLM cannot take is refused: %s", out);
        cr_assert(strstr(err.msg, "trtllm-schedule") && strstr(err.msg, "max_draft_len") &&
                  strstr(err.msg, "llm_args.py"), "the error names the rule: %s", err.msg);
        free(out);
        sq_ladder_free(l);
        return;
    }
    cr_assert_eq(rc, SQ_OK, "%s", err.msg);
    cJSON *j = parse(out);
    const cJSON *mdl = sq_json_field(j, "max_draft_len");
    const cJSON *s = sq_json_field(j, "draft_len_schedule");
    cr_assert(cJSON_IsNumber(mdl) && cJSON_IsObject(s), "%s", out);
    trt_schedule ts = {0};
    for (const cJSON *e = s->child; e; e = e->next) {
        char *end;
        cr_assert(cJSON_IsNumber(e) && e->valuedouble == (double)e->valueint, "%s", out);
        ts.key[ts.n] = strtol(e->string, &end, 10);
        cr_assert(!*end && *e->string, "an int key (pydantic's dict[int, int]): %s", out);
        ts.val[ts.n++] = e->valueint;
    }
    char why[256];
    cr_assert_eq(trt_validate(&ts, mdl->valueint, why, sizeof why), 0,
                 "TensorRT-LLM's validator refuses %s: %s", out, why);
    cr_assert_eq(mdl->valueint, max);
    /* the first schedules required the key 1 (PR #8194) */
    cr_assert_eq(ts.key[0], 1, "%s", out);
    /* every batch size up to the last rung gets what the ladder says; past it speculation is
     * off on the linear EAGLE3 path (min_runtime_draft_len 0) */
    for (long b = 1; b <= batch[n - 1] + 20; b++) {
        long got = trt_draft_len_for_batch_size(&ts, b, mdl->valueint, 0);
        long want = b <= batch[n - 1] ? ladder_says(batch, len, n, b) : 0;
        cr_assert_eq(got, want, "batch %ld: TensorRT-LLM drafts %ld, the ladder says %ld: %s", b,
                     got, want, out);
    }
    /* never max_draft_len 0 with larger entries (the export of issue 26) */
    for (int i = 0; i < ts.n; i++)
        cr_assert_leq(ts.val[i], mdl->valueint);
    cJSON_Delete(j);
    free(out);
    sq_ladder_free(l);
}

Test(engine_exports, trtllm_validator_and_lookup_as_in_the_source)
{
    /* the docstring's example: {4: 4, 8: 2, 32: 1} */
    trt_schedule s = {3, {4, 8, 32}, {4, 2, 1}};
    char why[128];
    cr_assert_eq(trt_validate(&s, 4, why, sizeof why), 0, "%s", why);
    long want[][2] = {{1, 4}, {4, 4}, {5, 2}, {8, 2}, {9, 1}, {32, 1}, {33, 0}};
    for (size_t i = 0; i < sizeof want / sizeof *want; i++)
        cr_assert_eq(trt_draft_len_for_batch_size(&s, want[i][0], 4, 0), want[i][1]);
    /* the floor (min_runtime_draft_len 1 for the other one-engine modes) */
    cr_assert_eq(trt_draft_len_for_batch_size(&s, 33, 4, 1), 1);
    /* what the old export wrote: max_draft_len 0 with later entries 5 and 9 */
    trt_schedule bad = {3, {1, 4, 8}, {0, 5, 9}};
    cr_assert_eq(trt_validate(&bad, 0, why, sizeof why), 1);
    bad.val[0] = 9;
    cr_assert_eq(trt_validate(&bad, 9, why, sizeof why), 0, "%s", why);
    trt_schedule grow = {2, {1, 4}, {3, 5}};
    cr_assert_eq(trt_validate(&grow, 3, why, sizeof why), 1, "no value above max_draft_len");
    cr_assert_eq(trt_validate(&grow, 5, why, sizeof why), 1, "the smallest key is max_draft_len");
}

Test(engine_exports, trtllm_schedule_of_fixed_ladders)
{
    /* shrinking, then off past batch 8 */
    int b1[] = {1, 2, 4, 8, 16}, c1[] = {5, 4, 4, 0, 0};
    check_trtllm_schedule(b1, c1, 5);
    sq_ladder *l = ladder_of(b1, c1, 5);
    sq_error err = {0};
    int rc;
    char *out = export_ladder(l, "trtllm-schedule", &rc, &err);
    cr_assert_eq(rc, 0, "%s", err.msg);
    cr_assert_str_eq(out, "{\"max_draft_len\": 5, \"draft_len_schedule\": {\"1\": 5, \"4\": 4, "
                          "\"8\": 0}}\n");
    free(out);
    sq_ladder_free(l);
    /* a ladder that starts at batch 2 */
    int b2[] = {2, 8, 64}, c2[] = {3, 3, 1};
    check_trtllm_schedule(b2, c2, 3);
    /* growing chains and nothing paying: refused */
    int c3[] = {2, 3, 1};
    check_trtllm_schedule(b2, c3, 3);
    int c4[] = {0, 0, 0};
    check_trtllm_schedule(b2, c4, 3);
    /* the speculation of batch 1 off, larger ones on: TensorRT-LLM cannot (the old export wrote
     * max_draft_len 0 with later entries) */
    int c5[] = {0, 5, 9};
    check_trtllm_schedule(b2, c5, 3);
}

Test(engine_exports, trtllm_schedule_of_random_ladders)
{
    int batch[MAXR], len[MAXR], n, refused = 0, taken = 0;
    for (int it = 0; it < 3000; it++) {
        random_ladder(batch, len, &n);
        int max = 0;
        for (int i = 0; i < n; i++)
            max = len[i] > max ? len[i] : max;
        (max > 0 && len[0] == max) ? taken++ : refused++;
        check_trtllm_schedule(batch, len, n);
    }
    cr_assert(taken > 500 && refused > 100, "both kinds drawn: %d taken, %d refused", taken,
              refused);
}

/* ---- vLLM num_speculative_tokens_per_batch_size ------------------------------------------- */

static void check_vllm_schedule(const int *batch, const int *len, int n)
{
    sq_ladder *l = ladder_of(batch, len, n);
    sq_error err = {0};
    int rc;
    char *out = export_ladder(l, "vllm-schedule", &rc, &err);
    int max = 0;
    for (int i = 0; i < n; i++)
        max = len[i] > max ? len[i] : max;
    if (max == 0) {
        cr_assert_eq(rc, SQ_EDATA);
        cr_assert(strstr(err.msg, "vllm-schedule") && strstr(err.msg, "num_speculative_tokens"),
                  "%s", err.msg);
        free(out);
        sq_ladder_free(l);
        return;
    }
    cr_assert_eq(rc, SQ_OK, "%s", err.msg);
    cJSON *j = parse(out);
    const cJSON *nst = sq_json_field(j, "num_speculative_tokens");
    const cJSON *s = sq_json_field(j, "num_speculative_tokens_per_batch_size");
    cr_assert(cJSON_IsNumber(nst) && cJSON_IsArray(s), "%s", out);
    cr_assert_eq(cJSON_GetArraySize(j), 2, "only the two fields: %s", out);
    vllm_schedule vs = {0};
    for (const cJSON *e = s->child; e; e = e->next) {
        cr_assert(cJSON_IsArray(e) && cJSON_GetArraySize(e) == 3, "3-item entries: %s", out);
        vs.lo[vs.n] = cJSON_GetArrayItem(e, 0)->valueint;
        vs.hi[vs.n] = cJSON_GetArrayItem(e, 1)->valueint;
        vs.k[vs.n++] = cJSON_GetArrayItem(e, 2)->valueint;
    }
    char why[128];
    cr_assert_eq(vllm_validate(&vs, nst->valueint, why, sizeof why), 0, "vLLM refuses %s: %s",
                 out, why);
    cr_assert_eq(nst->valueint, max);
    long top = batch[n - 1] + 20;
    long *dense = calloc((size_t)top + 1, sizeof *dense);
    cr_assert_not_null(dense);
    vllm_lookup(&vs, top, nst->valueint, dense);
    for (long b = 1; b <= top; b++) {
        long want = b <= batch[n - 1] ? ladder_says(batch, len, n, b) : len[n - 1];
        cr_assert_eq(dense[b], want, "batch %ld: vLLM drafts %ld, the ladder says %ld: %s", b,
                     dense[b], want, out);
    }
    free(dense);
    cJSON_Delete(j);
    free(out);
    sq_ladder_free(l);
}

Test(engine_exports, vllm_validator_and_lookup_as_in_the_source)
{
    /* the carry-forward example of build_dynamic_sd_schedule_lookup: [(1, 16, 3), (32, 128, 2)] */
    vllm_schedule s = {2, {1, 32}, {16, 128}, {3, 2}};
    char why[128];
    cr_assert_eq(vllm_validate(&s, 3, why, sizeof why), 0, "%s", why);
    long dense[201];
    vllm_lookup(&s, 200, 3, dense);
    cr_assert_eq(dense[1], 3);
    cr_assert_eq(dense[17], 3);
    cr_assert_eq(dense[31], 3);
    cr_assert_eq(dense[32], 2);
    cr_assert_eq(dense[200], 2);
    vllm_schedule late = {1, {2}, {8}, {3}};
    cr_assert_eq(vllm_validate(&late, 3, why, sizeof why), 1, "must start at 1");
    vllm_schedule overlap = {2, {1, 4}, {4, 8}, {3, 2}};
    cr_assert_eq(vllm_validate(&overlap, 3, why, sizeof why), 1);
}

Test(engine_exports, vllm_schedule_of_fixed_and_random_ladders)
{
    int b1[] = {1, 2, 4, 8, 16}, c1[] = {5, 4, 4, 0, 0};
    check_vllm_schedule(b1, c1, 5);
    sq_ladder *l = ladder_of(b1, c1, 5);
    sq_error err = {0};
    int rc;
    char *out = export_ladder(l, "vllm-schedule", &rc, &err);
    cr_assert_eq(rc, 0, "%s", err.msg);
    cr_assert_str_eq(out, "{\"num_speculative_tokens\": 5, \"num_speculative_tokens_per_batch_size"
                          "\": [[1, 1, 5], [2, 4, 4], [5, 16, 0]]}\n");
    free(out);
    sq_ladder_free(l);
    int b2[] = {2, 8, 64}, c2[] = {0, 5, 9};   /* growing: vLLM takes it */
    check_vllm_schedule(b2, c2, 3);
    int batch[MAXR], len[MAXR], n;
    for (int it = 0; it < 3000; it++) {
        random_ladder(batch, len, &n);
        check_vllm_schedule(batch, len, n);
    }
}

Test(engine_exports, schedules_need_increasing_batch_sizes)
{
    const char *engines[] = {"trtllm-schedule", "vllm-schedule"};
    int cases[][3] = {{1, 4, 4}, {1, 8, 4}, {0, 2, 4}};
    int len[] = {3, 2, 1};
    for (int e = 0; e < 2; e++)
        for (int c = 0; c < 3; c++) {
            sq_ladder *l = ladder_of(cases[c], len, 3);
            sq_error err = {0};
            int rc;
            char *out = export_ladder(l, engines[e], &rc, &err);
            cr_assert_eq(rc, SQ_EUSAGE, "%s %d: %s", engines[e], c, out);
            cr_assert(strstr(err.msg, engines[e]) && strstr(err.msg, "strictly increasing"), "%s",
                      err.msg);
            cr_assert(!out || !*out, "nothing written: %s", out);
            free(out);
            sq_ladder_free(l);
        }
}

/* ---- envelopes --------------------------------------------------------------------------- */

static char *export_envelope(sq_engine e, int L, int K, int N, int *rc, sq_error *err)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *fp = open_memstream(&buf, &len);
    cr_assert_not_null(fp);
    *rc = sq_export_envelope(fp, e, L, K, N, "env", err);
    fclose(fp);
    return buf;
}

static void check_sglang_config(const cJSON *c, int L, int K, int N)
{
    const cJSON *a = sq_json_field(c, "server_args");
    cr_assert_str_eq(sq_json_field(c, "engine")->valuestring, "sglang");
    /* python/sglang/srt/server_args.py's field names */
    cr_assert_eq(sq_json_field(a, "speculative_num_steps")->valueint, L);
    cr_assert_eq(sq_json_field(a, "speculative_eagle_topk")->valueint, K);
    cr_assert_eq(sq_json_field(a, "speculative_num_draft_tokens")->valueint, N);
    char flags[160];
    snprintf(flags, sizeof flags, "--speculative-num-steps %d --speculative-eagle-topk %d "
             "--speculative-num-draft-tokens %d", L, K, N);
    cr_assert_str_eq(sq_json_field(c, "flags")->valuestring, flags);
}

static void check_trtllm_config(const cJSON *c, int L, int K, int N)
{
    /* EagleDecodingConfig's field names, nothing else */
    cr_assert_eq(cJSON_GetArraySize(c), 4);
    cr_assert(cJSON_IsTrue(sq_json_field(c, "use_dynamic_tree")));
    int k = sq_json_field(c, "dynamic_tree_max_topK")->valueint;
    int l = sq_json_field(c, "max_draft_len")->valueint;
    int t = sq_json_field(c, "max_total_draft_tokens")->valueint;
    cr_assert(k == K && l == L && t == N - 1, "root not counted");
    cr_assert(trt_dynamic_accepts(l, k, t));
}

Test(engine_exports, envelopes_are_exported_exactly_when_the_engine_takes_them)
{
    int taken[2] = {0}, refused[2] = {0};
    for (int L = -1; L <= 9; L++)
        for (int K = -1; K <= 9; K++)
            for (int N = -1; N <= 90; N++)
                for (int e = 0; e < 2; e++) {
                    sq_engine en = e ? SQ_ENGINE_TRTLLM_DYNAMIC : SQ_ENGINE_SGLANG;
                    int want = e ? trt_dynamic_accepts(L, K, N - 1) && N >= 2
                                 : sglang_accepts(L, K, N);
                    sq_error err = {0};
                    int rc;
                    char *out = export_envelope(en, L, K, N, &rc, &err);
                    if (!want) {
                        refused[e]++;
                        cr_assert_eq(rc, SQ_EUSAGE, "%s %d,%d,%d taken: %s", sq_engine_name(en),
                                     L, K, N, out);
                        char env[64];
                        snprintf(env, sizeof env, "%d,%d,%d (L,K,N)", L, K, N);
                        cr_assert(strstr(err.msg, sq_engine_name(en)) && strstr(err.msg, env),
                                  "names the engine and the envelope: %s", err.msg);
                        cr_assert(!out || !*out);
                        cr_assert_eq(sq_engine_envelope_check(en, L, K, N, "env", NULL),
                                     SQ_EUSAGE);
                    } else {
                        taken[e]++;
                        cr_assert_eq(rc, SQ_OK, "%s %d,%d,%d: %s", sq_engine_name(en), L, K, N,
                                     err.msg);
                        cJSON *j = parse(out);
                        (e ? check_trtllm_config : check_sglang_config)(j, L, K, N);
                        cJSON_Delete(j);
                    }
                    free(out);
                }
    for (int e = 0; e < 2; e++)
        cr_assert(taken[e] > 100 && refused[e] > 100, "%d %d", taken[e], refused[e]);
    /* the rules by name */
    sq_error err = {0};
    cr_assert_eq(sq_engine_envelope_check(SQ_ENGINE_TRTLLM_DYNAMIC, 3, 2, 8, "f", &err), SQ_EUSAGE);
    cr_assert(strstr(err.msg, "dynamic_tree_max_topK * max_draft_len") &&
              strstr(err.msg, "llm_args.py"), "%s", err.msg);
    err = (sq_error){0};
    cr_assert_eq(sq_engine_envelope_check(SQ_ENGINE_SGLANG, 2, 2, 8, "f", &err), SQ_EUSAGE);
    cr_assert(strstr(err.msg, "K + (L - 1) K^2"), "%s", err.msg);
    err = (sq_error){0};
    cr_assert_eq(sq_engine_envelope_check(SQ_ENGINE_SGLANG, 3, 1, 3, "f", &err), SQ_EUSAGE);
    cr_assert(strstr(err.msg, "topk 1"), "%s", err.msg);
    err = (sq_error){0};
    cr_assert_eq(sq_engine_envelope_check(SQ_ENGINE_SGLANG, 3, 0, 3, "f", &err), SQ_EUSAGE);
    cr_assert(strstr(err.msg, "K >= 1"), "%s", err.msg);
    /* no overflow at the ends of int */
    cr_assert_eq(sq_engine_envelope_check(SQ_ENGINE_SGLANG, 2147483647, 2147483647, 2147483647,
                                          "f", NULL), SQ_OK);
    cr_assert_eq(sq_engine_envelope_check(SQ_ENGINE_TRTLLM_DYNAMIC, 1000, 2147483647,
                                          2147483647, "f", NULL), SQ_OK);
    cr_assert_eq(sq_engine_envelope_check(SQ_ENGINE_TRTLLM_DYNAMIC, 2147483647, 2147483647,
                                          2147483647, "f", NULL), SQ_EUSAGE, "N - 1 < L");
    cr_assert_eq(sq_engine_envelope_check(SQ_ENGINE_TRTLLM_DYNAMIC, 2147483647, 1, 3, "f", NULL),
                 SQ_EUSAGE);
    err = (sq_error){0};
    cr_assert_eq(sq_engine_envelope_check(SQ_ENGINE_VLLM, 3, 2, 3, "f", &err), SQ_EUSAGE);
    cr_assert(strstr(err.msg, "not an envelope engine"), "%s", err.msg);
}

Test(engine_exports, envelope_ladders)
{
    int batch[] = {1, 4, 16, 64}, L[] = {6, 4, 3, 0}, K[] = {4, 3, 2, 0}, N[] = {16, 12, 6, 0};
    int spec[] = {1, 1, 1, 0};
    for (int e = 0; e < 2; e++) {
        sq_engine en = e ? SQ_ENGINE_TRTLLM_DYNAMIC : SQ_ENGINE_SGLANG;
        char *buf = NULL;
        size_t len = 0;
        FILE *fp = open_memstream(&buf, &len);
        sq_error err = {0};
        cr_assert_eq(sq_export_envelope_ladder(fp, en, batch, L, K, N, spec, 4, "lad", &err), 0,
                     "%s", err.msg);
        fclose(fp);
        cJSON *j = parse(buf);
        cr_assert_str_eq(sq_json_field(j, "engine")->valuestring, sq_engine_name(en));
        const cJSON *rows = sq_json_field(j, "per_batch");
        cr_assert_eq(cJSON_GetArraySize(rows), 4);
        for (int i = 0; i < 4; i++) {
            const cJSON *r = cJSON_GetArrayItem(rows, i);
            cr_assert_eq(sq_json_field(r, "batch")->valueint, batch[i]);
            cr_assert_eq(cJSON_IsTrue(sq_json_field(r, "speculate")), spec[i]);
            const cJSON *c = sq_json_field(r, "config");
            if (!spec[i]) {
                cr_assert_null(c);
                continue;
            }
            (e ? check_trtllm_config : check_sglang_config)(c, L[i], K[i], N[i]);
        }
        const cJSON *note = sq_json_field(j, "per_batch_size");
        cr_assert(cJSON_IsString(note) && strstr(note->valuestring, "router"), "%s", buf);
        cJSON_Delete(j);
        free(buf);

        /* bad input: batch sizes out of order, a row outside the rules, no rows */
        int down[] = {1, 4, 4, 64};
        err = (sq_error){0};
        fp = open_memstream(&buf, &len);
        cr_assert_eq(sq_export_envelope_ladder(fp, en, down, L, K, N, spec, 4, "lad", &err),
                     SQ_EUSAGE);
        fclose(fp);
        cr_assert_eq(len, 0);
        cr_assert(strstr(err.msg, "strictly increasing") && strstr(err.msg, sq_engine_name(en)),
                  "%s", err.msg);
        free(buf);
        int Nbad[] = {16, 40, 6, 0};
        err = (sq_error){0};
        fp = open_memstream(&buf, &len);
        cr_assert_eq(sq_export_envelope_ladder(fp, en, batch, L, K, Nbad, spec, 4, "lad", &err),
                     SQ_EUSAGE);
        fclose(fp);
        cr_assert_eq(len, 0);
        cr_assert(strstr(err.msg, "batch size 4") && strstr(err.msg, "4,3,40"), "%s", err.msg);
        free(buf);
        fp = open_memstream(&buf, &len);
        cr_assert_eq(sq_export_envelope_ladder(fp, en, batch, L, K, N, spec, 0, "lad", &err),
                     SQ_EUSAGE);
        fclose(fp);
        free(buf);
    }
}

/* ---- the smallest envelope of a static tree -------------------------------------------------- */

/* A random tree: level by level, each node of a level gets 0..w children. */
static sq_tree *random_tree(int max_n, int max_levels, int w)
{
    int par[512], rank[512], n = 1, level_start = 0;
    par[0] = -1;
    rank[0] = 0;
    for (int lv = 1; lv < max_levels && n < max_n; lv++) {
        int level_end = n;
        for (int v = level_start; v < level_end && n < max_n; v++) {
            int k = (int)rnd((unsigned)w + 1);
            if (v == 0 && k == 0)
                k = 1;
            for (int c = 0; c < k && n < max_n; c++) {
                par[n] = v;
                rank[n] = c + 1;
                n++;
            }
        }
        level_start = level_end;
        if (n == level_end)
            break;
    }
    sq_tree *t = NULL;
    sq_error err = {0};
    cr_assert_eq(sq_tree_from_parents(par, rank, n, &t, "random", &err), SQ_OK, "%s", err.msg);
    return t;
}

Test(engine_exports, static_tree_envelopes_keep_the_engines_rules)
{
    for (int it = 0; it < 2000; it++) {
        sq_tree *t = random_tree(2 + (int)rnd(200), 2 + (int)rnd(9), 1 + (int)rnd(6));
        int levels = sq_tree_depth(t);
        int *kids = calloc((size_t)t->n, sizeof *kids), *nl = calloc((size_t)levels, sizeof *nl);
        cr_assert(kids && nl);
        for (int v = 1; v < t->n; v++)
            kids[t->parent[v]]++;
        for (int e = 0; e < 2; e++) {
            sq_engine en = e ? SQ_ENGINE_TRTLLM_DYNAMIC : SQ_ENGINE_SGLANG;
            sq_envelope env;
            sq_error err = {0};
            cr_assert_eq(sq_envelope_of(t, en, &env, "t", &err), SQ_OK, "%s", err.msg);
            int N = e ? env.draft_tokens + 1 : env.draft_tokens;
            cr_assert_eq(N, t->n);
            cr_assert_eq(env.steps, levels - 1);
            /* it holds the tree: topk >= every node's children and every level's non-leaves */
            memset(nl, 0, (size_t)levels * sizeof *nl);
            for (int v = 0; v < t->n; v++) {
                cr_assert_geq(env.topk, kids[v]);
                if (kids[v])
                    cr_assert_geq(env.topk, ++nl[t->depth[v]]);
            }
            cr_assert(e ? trt_dynamic_accepts(env.steps, env.topk, env.draft_tokens)
                        : sglang_accepts(env.steps, env.topk, env.draft_tokens),
                      "%s takes %d,%d,%d", sq_engine_name(en), env.steps, env.topk, N);
            cr_assert_eq(sq_engine_envelope_check(en, env.steps, env.topk, N, "t", &err), SQ_OK,
                         "%s", err.msg);
        }
        free(kids);
        free(nl);
        sq_tree_free(t);
    }
}

Test(engine_exports, the_engine_table_says_which_versions_take_what)
{
    for (sq_engine e = SQ_ENGINE_NONE + 1; e < SQ_ENGINE_COUNT; e++) {
        const sq_engine_info *in = sq_engine_info_of(e);
        /* the rows' envelope rules moved to libsequoia/format/dynplan.c: every envelope row's
         * name is an engine there, and no other row's */
        cr_assert_eq(sq_dynplan_envelope_check(in->name, 2, 2, 3, NULL, NULL) == SQ_OK,
                     in->envelope, "%s", in->name);
        cr_assert_eq(!!in->write_envelope, in->envelope, "%s", in->name);
        cr_assert_eq(!!in->per_batch_note, in->envelope, "%s", in->name);
        if (in->envelope)
            cr_assert(strstr(in->versions, "envelopes"), "%s", in->versions);
    }
    /* the static-tree engines say until when (the PR that removed the static tree) */
    cr_assert(strstr(sq_engine_info_of(SQ_ENGINE_VLLM)->versions, "#42121") &&
              strstr(sq_engine_info_of(SQ_ENGINE_VLLM)->versions, "chains only"));
    cr_assert(strstr(sq_engine_info_of(SQ_ENGINE_TRTLLM)->versions, "#18210"));
    cr_assert(strstr(sq_engine_info_of(SQ_ENGINE_VLLM)->summary, "#42121"));
    cr_assert(strstr(sq_engine_info_of(SQ_ENGINE_TRTLLM)->summary, "#18210"));
}
