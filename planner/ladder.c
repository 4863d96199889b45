/* The batch-size ladder (planner/ladder.h; docs/planning.md, "Ladder"). */
#include "planner/ladder.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "libsequoia/base/json.h"
#include "libsequoia/base/svg.h"
#include "planner/baseline.h"
#include "planner/engine.h"
#include "planner/export.h"
#include "planner/hardware.h"

int sq_objective_parse(const char *s)
{
    if (!strcmp(s, "latency"))
        return SQ_OBJECTIVE_LATENCY;
    if (!strcmp(s, "throughput"))
        return SQ_OBJECTIVE_THROUGHPUT;
    return -1;
}

const char *sq_objective_name(sq_objective o)
{
    return o == SQ_OBJECTIVE_THROUGHPUT ? "throughput" : "latency";
}

void sq_ladder_free(sq_ladder *l)
{
    if (!l)
        return;
    for (int i = 0; i < l->n; i++)
        sq_plan_free(l->rungs[i].plan);
    free(l->rungs);
    free(l);
}

/* The rung being solved: the sliced profiles, the cost model and the plain-decoding
 * throughput at every profiled batch size (for the throughput objective's baseline). */
typedef struct rung_ctx {
    sq_hw_params  hw;
    int           batch;
    double        t1;
    const int    *batches;
    const double *plain;      /* tokens/s of plain decoding at batches[i] */
    int           nb;
    sq_objective  objective;
    sq_cost_model cost_model;
    const sq_curve *curve;    /* scores the trees: sequoia-run's catch-up */
} rung_ctx;

/* Best plain-decoding throughput over profiled batch sizes in [b, b·n]. */
static double plain_best(const rung_ctx *c, int n)
{
    double best = 0;
    long long hi = (long long)c->batch * n;
    for (int i = 0; i < c->nb; i++)
        if (c->batches[i] >= c->batch && c->batches[i] <= hi && c->plain[i] > best)
            best = c->plain[i];
    return best;
}

/* Scores one tree of value F under the rung's model into *ch. */
static int score(const rung_ctx *c, const sq_tree *t, double F, sq_ladder_choice *ch, sq_error *err)
{
    double step, rstep, cu;
    int rc;
    if ((rc = sq_hw_step_ms(&c->hw, t, F, &step, err)) ||
        (rc = sq_hw_catchup(t, c->curve, &cu, err)) ||
        (rc = sq_hw_step_ms_runtime(&c->hw, t, cu, &rstep, err)))
        return rc;
    ch->size = t->n;
    ch->depth = sq_tree_depth(t);
    ch->expected_tokens = F;
    ch->step_ms = step;
    ch->speedup = F * c->t1 / step;
    ch->tokens_per_s = 1e3 * c->batch * F / step;
    ch->run_catchup = cu;
    ch->run_step_ms = rstep;
    ch->run_speedup = F * c->t1 / rstep;
    ch->run_tokens_per_s = 1e3 * c->batch * F / rstep;
    int run = c->cost_model == SQ_COST_SEQUOIA_RUN;
    ch->gain = c->objective == SQ_OBJECTIVE_LATENCY
                   ? (run ? ch->run_speedup : ch->speedup)
                   : (run ? ch->run_tokens_per_s : ch->tokens_per_s) / plain_best(c, t->n);
    return SQ_OK;
}

/* Strictly better under the objective; ties keep the smaller tree (scanned first). */
static int better(const sq_ladder_choice *a, const sq_ladder_choice *b)
{
    return b->size == 0 || a->gain > b->gain;
}

static sq_tree *chain_tree(int n)
{
    sq_tree *t = sq_tree_new(n);
    if (!t)
        return NULL;
    for (int v = 0; v < n; v++) {
        t->parent[v] = v - 1;
        t->rank[v] = v ? 1 : 0;
        t->depth[v] = v;
    }
    return t;
}

/* k chains of L nodes under the root, breadth-first: level l holds the l-th node of every
 * chain, in chain order. */
static sq_tree *kxl_tree(int k, int L)
{
    sq_tree *t = sq_tree_new(1 + k * L);
    if (!t)
        return NULL;
    t->parent[0] = -1;
    t->rank[0] = 0;
    t->depth[0] = 0;
    for (int l = 1; l <= L; l++)
        for (int j = 0; j < k; j++) {
            int v = 1 + (l - 1) * k + j;
            t->parent[v] = l == 1 ? 0 : v - k;
            t->rank[v] = l == 1 ? j + 1 : 1;
            t->depth[v] = l;
        }
    return t;
}

static int best_chain(const rung_ctx *c, const sq_curve *curve, int N, int D, sq_ladder_choice *out,
                      sq_error *err)
{
    memset(out, 0, sizeof *out);
    for (int n = 1; n <= N && n <= D; n++) {
        int nodes;
        double F = sq_baseline_chain(curve, n, n, &nodes);
        sq_tree *t = chain_tree(nodes);
        if (!t)
            return sq_error_oom(err, "chain");
        sq_ladder_choice ch = {0};
        int rc = score(c, t, F, &ch, err);
        sq_tree_free(t);
        if (rc)
            return rc;
        if (better(&ch, out))
            *out = ch;
    }
    return SQ_OK;
}

static int best_kxl(const rung_ctx *c, const sq_curve *curve, int N, int D, int B,
                    sq_ladder_choice *out, sq_error *err)
{
    memset(out, 0, sizeof *out);
    sq_tree *root = chain_tree(1);
    if (!root)
        return sq_error_oom(err, "k x L tree");
    int rc = score(c, root, 1.0, out, err);
    sq_tree_free(root);
    if (rc)
        return rc;
    for (int L = 1; L + 1 <= D; L++)
        for (int k = 1; k <= B && 1 + k * L <= N; k++) {
            double F = sq_baseline_kxl_value(curve, k, L);
            sq_tree *t = kxl_tree(k, L);
            if (!t)
                return sq_error_oom(err, "k x L tree");
            sq_ladder_choice ch = {0};
            rc = score(c, t, F, &ch, err);
            sq_tree_free(t);
            if (rc)
                return rc;
            ch.k = k;
            ch.L = L;
            if (better(&ch, out) || (ch.gain == out->gain && ch.size < out->size))
                *out = ch;
        }
    return SQ_OK;
}

/* The optimal tree under the objective: every (n, d) the DP offers. */
static int best_tree(const rung_ctx *c, sq_dp *dp, sq_ladder_choice *out, int *out_d,
                     sq_error *err)
{
    memset(out, 0, sizeof *out);
    int N = sq_dp_budget(dp), D = sq_dp_depth(dp);
    for (int d = 1; d <= D; d++)
        for (int n = 1; n <= N; n++) {
            double F = sq_dp_best(dp, n, d);
            if (!isfinite(F))
                continue;
            /* depth d only when it beats every shallower bound: the same tree otherwise */
            if (d > 1 && F <= sq_dp_best(dp, n, d - 1))
                continue;
            sq_tree *t;
            int rc = sq_dp_tree(dp, n, d, &t, err);
            if (rc)
                return rc;
            sq_ladder_choice ch = {0};
            rc = score(c, t, F, &ch, err);
            sq_tree_free(t);
            if (rc)
                return rc;
            if (better(&ch, out)) {
                *out = ch;
                *out_d = d;
            }
        }
    return SQ_OK;
}

static int slice_or_explain(const sq_profile *p, int b, const char *file, const char *what,
                            sq_profile **out, sq_error *err)
{
    sq_error e = {0};
    if (sq_profile_slice(p, b, out, &e) == SQ_OK)
        return SQ_OK;
    return sq_error_set(err, SQ_EUSAGE, "%s: the %s profile does not measure batch size %d, "
                        "which the target profile has", file ? file : what, what, b);
}

int sq_ladder_solve(sq_dp *dp, const sq_curve *curve, const sq_ladder_params *prm,
                    sq_ladder **out, sq_error *err)
{
    *out = NULL;
    int batches[SQ_LADDER_MAX_RUNGS];
    int nb = sq_profile_batches(prm->target, batches, SQ_LADDER_MAX_RUNGS);
    if (nb > SQ_LADDER_MAX_RUNGS)
        return sq_error_set(err, SQ_EUSAGE, "%s: %d batch sizes, more than the ladder's limit of %d",
                            prm->target_file ? prm->target_file : "target profile", nb,
                            SQ_LADDER_MAX_RUNGS);
    if (nb < 2)
        return sq_error_set(err, SQ_EUSAGE, "%s: the profile measures one batch size (%d); a "
                            "ladder needs a batch profile (sequoia-profile --batch 1,2,4,8)",
                            prm->target_file ? prm->target_file : "target profile", batches[0]);
    sq_ladder *l = calloc(1, sizeof *l);
    double plain[SQ_LADDER_MAX_RUNGS];
    sq_profile *ts[SQ_LADDER_MAX_RUNGS] = {0}, *ds[SQ_LADDER_MAX_RUNGS] = {0};
    int rc = SQ_OK;
    if (!l || !(l->rungs = calloc((size_t)nb, sizeof *l->rungs))) {
        free(l);
        return sq_error_oom(err, "ladder");
    }
    l->objective = prm->objective;
    l->cost_model = prm->cost_model;
    l->budget = sq_dp_budget(dp);
    l->depth = sq_dp_depth(dp);
    l->width = sq_dp_width(dp);
    /* slices and plain decoding at every batch size first: the throughput objective compares
     * against larger batch sizes */
    for (int i = 0; i < nb; i++) {
        if ((rc = slice_or_explain(prm->target, batches[i], prm->target_file, "target", &ts[i], err)))
            goto done;
        if (prm->draft &&
            (rc = slice_or_explain(prm->draft, batches[i], prm->draft_file, "draft", &ds[i], err)))
            goto done;
        double t1;
        if ((rc = sq_profile_ms(ts[i], 1, prm->extrapolate, &t1, err)))
            goto done;
        plain[i] = 1e3 * batches[i] / t1;
    }
    for (int i = 0; i < nb; i++) {
        sq_ladder_rung *r = &l->rungs[i];
        rung_ctx c = {.batch = batches[i], .batches = batches, .plain = plain, .nb = nb,
                      .objective = prm->objective, .cost_model = prm->cost_model,
                      .curve = curve};
        c.hw = sq_hw_default_params();
        c.hw.target = ts[i];
        c.hw.draft = ds[i];
        c.hw.draft_ms = prm->draft_ms;
        c.hw.extrapolate = prm->extrapolate;
        c.hw.target_file = prm->target_file;
        c.hw.draft_file = prm->draft_file;
        c.t1 = 1e3 * batches[i] / plain[i];
        r->batch = batches[i];
        r->target1_ms = c.t1;
        r->plain_tokens_per_s = plain[i];
        int d = 1;
        if ((rc = best_tree(&c, dp, &r->best, &d, err)) ||
            (rc = best_chain(&c, curve, l->budget, l->depth, &r->chain, err)) ||
            (rc = best_kxl(&c, curve, l->budget, l->depth, l->width, &r->kxl, err)))
            goto done;
        r->pays = r->best.size > 1 && r->best.gain > 1.0;
        sq_tree *t;
        if ((rc = sq_dp_tree(dp, r->best.size, d, &t, err)) ||
            (rc = sq_plan_new(t, curve, l->budget, l->depth, l->width, &r->plan, err)))
            goto done;
        l->n = i + 1;
    }
    l->crossover = 0;
    for (int i = nb - 1; i >= 0 && !l->rungs[i].pays; i--)
        l->crossover = l->rungs[i].batch;
done:
    for (int i = 0; i < nb; i++) {
        sq_profile_free(ts[i]);
        sq_profile_free(ds[i]);
    }
    if (rc) {
        sq_ladder_free(l);
        return rc;
    }
    *out = l;
    return SQ_OK;
}

static cJSON *choice_json(const sq_ladder_choice *ch, int with_kl)
{
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return NULL;
    sq_json_add(o, "size", cJSON_CreateNumber(ch->size));
    sq_json_add(o, "depth", cJSON_CreateNumber(ch->depth));
    if (with_kl) {
        sq_json_add(o, "k", cJSON_CreateNumber(ch->k));
        sq_json_add(o, "L", cJSON_CreateNumber(ch->L));
    }
    sq_json_add(o, "expected_tokens", cJSON_CreateNumber(ch->expected_tokens));
    sq_json_add(o, "time_per_step_ms", cJSON_CreateNumber(ch->step_ms));
    sq_json_add(o, "speedup", cJSON_CreateNumber(ch->speedup));
    sq_json_add(o, "tokens_per_second", cJSON_CreateNumber(ch->tokens_per_s));
    sq_json_add(o, "gain", cJSON_CreateNumber(ch->gain));
    /* sequoia-run's model of the same tree (docs/formats.md, "Ladders") */
    cJSON *rt = cJSON_CreateObject();
    sq_json_add(rt, "draft_catchup_tokens", cJSON_CreateNumber(ch->run_catchup));
    sq_json_add(rt, "time_per_step_ms", cJSON_CreateNumber(ch->run_step_ms));
    sq_json_add(rt, "speedup", cJSON_CreateNumber(ch->run_speedup));
    sq_json_add(rt, "tokens_per_second", cJSON_CreateNumber(ch->run_tokens_per_s));
    sq_json_add(o, SQ_PLAN_HW_RUNTIME, rt);
    return o;
}

cJSON *sq_ladder_to_json(const sq_ladder *l, const sq_ladder_params *prm)
{
    sq_json_build b = sq_json_build_begin();
    cJSON *o = cJSON_CreateObject();
    cJSON *rungs = cJSON_CreateArray();
    sq_json_add(o, "format", cJSON_CreateString(SQ_LADDER_FORMAT));
    sq_json_add(o, "version", cJSON_CreateNumber(SQ_LADDER_VERSION));
    sq_json_add(o, "objective", cJSON_CreateString(sq_objective_name(l->objective)));
    if (l->cost_model == SQ_COST_SEQUOIA_RUN)   /* which model chose (absent: the engine's) */
        sq_json_add(o, "chosen_by", cJSON_CreateString(sq_cost_model_name(l->cost_model)));
    sq_json_add(o, "target_profile", prm->target_file ? cJSON_CreateString(prm->target_file)
                                                      : cJSON_CreateNull());
    sq_json_add(o, "draft_profile", prm->draft && prm->draft_file
                                        ? cJSON_CreateString(prm->draft_file) : cJSON_CreateNull());
    sq_json_add(o, "draft_ms", prm->draft ? cJSON_CreateNull() : cJSON_CreateNumber(prm->draft_ms));
    sq_json_add(o, "budget", cJSON_CreateNumber(l->budget));
    sq_json_add(o, "depth", cJSON_CreateNumber(l->depth));
    sq_json_add(o, "width", cJSON_CreateNumber(l->width));
    sq_json_add(o, "crossover_batch", l->crossover ? cJSON_CreateNumber(l->crossover)
                                                   : cJSON_CreateNull());
    for (int i = 0; i < l->n && rungs; i++) {
        const sq_ladder_rung *r = &l->rungs[i];
        cJSON *e = cJSON_CreateObject();
        sq_json_add(e, "batch", cJSON_CreateNumber(r->batch));
        sq_json_add(e, "target_ms_1", cJSON_CreateNumber(r->target1_ms));
        sq_json_add(e, "plain_tokens_per_second", cJSON_CreateNumber(r->plain_tokens_per_s));
        sq_json_add(e, "speculation_pays", cJSON_CreateBool(r->pays));
        sq_json_add(e, "tree", choice_json(&r->best, 0));
        sq_json_add(e, "chain", choice_json(&r->chain, 0));
        sq_json_add(e, "kxl", choice_json(&r->kxl, 1));
        sq_json_add(e, "plan", sq_plan_to_json(r->plan));
        sq_json_append(rungs, e);
    }
    sq_json_add(o, "rungs", rungs);
    return sq_json_build_end(b, o);
}

int sq_ladder_save(const char *file, const sq_ladder *l, const sq_ladder_params *prm, sq_error *err)
{
    cJSON *o = sq_ladder_to_json(l, prm);
    int rc = sq_json_save(file, o, err);
    cJSON_Delete(o);
    return rc;
}

/* Speculated tokens of the rung's best chain; 0 where no chain pays. */
static int chain_len(const sq_ladder_rung *r)
{
    return r->chain.gain > 1.0 ? r->chain.size - 1 : 0;
}

static int io_status(FILE *fp, sq_error *err)
{
    return ferror(fp) ? sq_error_set(err, SQ_EIO, "writing the export failed") : SQ_OK;
}

/* The rungs' chain lengths into c (l->n entries) and their largest, after checking that the
 * batch sizes are >= 1 and strictly increasing (both engines' schedules map batch sizes to
 * lengths in that order). */
static int chain_lengths(const sq_ladder *l, const char *engine, int *c, int *max, sq_error *err)
{
    if (l->n < 1 || l->n > SQ_LADDER_MAX_RUNGS)
        return sq_error_set(err, SQ_EUSAGE, "ladder: %s: %d rungs (1 to %d)", engine, l->n,
                            SQ_LADDER_MAX_RUNGS);
    *max = 0;
    for (int i = 0; i < l->n; i++) {
        int b = l->rungs[i].batch;
        if (b < 1 || (i > 0 && b <= l->rungs[i - 1].batch))
            return sq_error_set(err, SQ_EUSAGE, "ladder: %s: rung %d: batch size %d %s: a "
                                "schedule's batch sizes must be >= 1 and strictly increasing",
                                engine, i, b, b < 1 ? "is below 1" : "does not exceed the rung "
                                "before");
        c[i] = chain_len(&l->rungs[i]);
        if (c[i] > *max)
            *max = c[i];
    }
    return SQ_OK;
}

/* TensorRT-LLM's draft_len_schedule (DecodingBaseConfig, tensorrt_llm/llmapi/llm_args.py;
 * read by get_draft_len_for_batch_size in tensorrt_llm/_torch/speculative/utils.py): sorted
 * keys are upper bounds, a batch size b takes the value of the smallest key >= b, and above the
 * largest key the draft length is min_runtime_draft_len (0 on the linear EAGLE3 path:
 * speculation off). Its validator wants keys >= 1, values >= 0, the smallest key's value equal
 * to max_draft_len and no value above it; EagleDecodingConfig wants max_draft_len > 0.
 *
 * Rung i (batch b_i, chain c_i) is the key b_i unless rung i + 1 has the same length; the first
 * of a run of zeros up to the last rung ends the schedule (the implicit tail is 0 too); "1" comes
 * first (the first schedules, PR #8194, required it; it changes nothing). So every profiled
 * batch size gets its rung's chain, and a batch size between two rungs the larger one's. */
static int write_trtllm_schedule(const sq_ladder *l, FILE *fp, sq_error *err)
{
    int c[SQ_LADDER_MAX_RUNGS], max, rc;
    if ((rc = chain_lengths(l, "trtllm-schedule", c, &max, err)))
        return rc;
    const sq_ladder_rung *r = l->rungs;
    if (max == 0)
        return sq_error_set(err, SQ_EDATA, "ladder: trtllm-schedule: no chain pays at any "
                            "profiled batch size, and TensorRT-LLM needs max_draft_len > 0 "
                            "(EagleDecodingConfig.validate_eagle_config, llm_args.py): serve "
                            "without speculative_config");
    if (c[0] != max) {
        int j = 0;
        while (c[j] != max)
            j++;
        return sq_error_set(err, SQ_EDATA, "ladder: trtllm-schedule: TensorRT-LLM's "
                            "draft_len_schedule maps its smallest key to max_draft_len and no "
                            "key above it (validate_draft_len_schedule_and_sort, llm_args.py), "
                            "so the draft cannot grow with the batch size, but the ladder's best "
                            "chain is %d tokens at batch size %d and %d at batch size %d: use "
                            "vLLM's num_speculative_tokens_per_batch_size (ladder export "
                            "vllm-schedule), or one max_draft_len per deployment", c[0],
                            r[0].batch, c[j], r[j].batch);
    }
    fprintf(fp, "{\"max_draft_len\": %d, \"draft_len_schedule\": {", max);
    fprintf(fp, "\"1\": %d", c[0]);
    for (int i = 0; i < l->n; i++) {
        int zeros_to_end = 1;
        for (int j = i; j < l->n && zeros_to_end; j++)
            zeros_to_end = c[j] == 0;
        if ((zeros_to_end || i + 1 == l->n || c[i] != c[i + 1]) && r[i].batch > 1)
            fprintf(fp, ", \"%d\": %d", r[i].batch, c[i]);
        if (zeros_to_end)
            break;
    }
    fprintf(fp, "}}\n");
    return io_status(fp, err);
}

/* vLLM's num_speculative_tokens_per_batch_size (SpeculativeConfig, vllm/config/speculative.py,
 * PR #32374; validated and expanded by vllm/v1/spec_decode/dynamic/utils.py): inclusive
 * [start, end, K] ranges, sorted, disjoint, the first starting at 1; a gap takes the range
 * before it, batch sizes above the last range take the last K, and every K is clamped to
 * num_speculative_tokens (> 0). Ranges run from one rung past the previous one to the rung, runs
 * of equal lengths merged: the same mapping as the TensorRT-LLM schedule up to the last rung. */
static int write_vllm_schedule(const sq_ladder *l, FILE *fp, sq_error *err)
{
    int c[SQ_LADDER_MAX_RUNGS], max, rc;
    if ((rc = chain_lengths(l, "vllm-schedule", c, &max, err)))
        return rc;
    if (max == 0)
        return sq_error_set(err, SQ_EDATA, "ladder: vllm-schedule: no chain pays at any profiled "
                            "batch size, and vLLM needs num_speculative_tokens > 0 "
                            "(SpeculativeConfig, vllm/config/speculative.py): serve without "
                            "speculative_config");
    fprintf(fp, "{\"num_speculative_tokens\": %d, \"num_speculative_tokens_per_batch_size\": [",
            max);
    for (int i = 0, start = 1, k = 0; i < l->n; i++)
        if (i + 1 == l->n || c[i] != c[i + 1]) {
            fprintf(fp, "%s[%d, %d, %d]", k++ ? ", " : "", start, l->rungs[i].batch, c[i]);
            start = l->rungs[i].batch + 1;
        }
    fprintf(fp, "]}\n");
    return io_status(fp, err);
}

int sq_ladder_export(const sq_ladder *l, const char *engine, FILE *fp, sq_error *err)
{
    if (!strcmp(engine, "trtllm-schedule"))
        return write_trtllm_schedule(l, fp, err);
    if (!strcmp(engine, "vllm-schedule"))
        return write_vllm_schedule(l, fp, err);
    if (!strcmp(engine, "envelopes")) {
        /* Per batch size, the smallest flags under which SGLang's and TensorRT-LLM's dynamic
         * trees can take the rung's tree (sq_envelope_of, planner/export.h: SGLang counts the
         * root among its draft tokens, TensorRT-LLM does not). A rung that does not pay gets
         * speculation off. */
        fprintf(fp, "{\"shape\": \"the smallest envelope holding each batch size's best tree\","
                    "\n \"per_batch\": [");
        for (int i = 0; i < l->n; i++) {
            const sq_ladder_rung *r = &l->rungs[i];
            fprintf(fp, "%s\n  {\"batch\": %d, \"speculate\": %s", i ? "," : "", r->batch,
                    r->pays ? "true" : "false");
            if (r->pays) {
                sq_envelope sg, tr;
                int rc = sq_envelope_of(r->plan->tree, SQ_ENGINE_SGLANG, &sg, "ladder", err);
                if (!rc)
                    rc = sq_envelope_of(r->plan->tree, SQ_ENGINE_TRTLLM_DYNAMIC, &tr, "ladder", err);
                if (rc)
                    return rc;
                fprintf(fp, ", \"sglang\": {\"speculative_num_steps\": %d, "
                        "\"speculative_eagle_topk\": %d, \"speculative_num_draft_tokens\": %d}, "
                        "\"trtllm_dynamic\": {\"use_dynamic_tree\": true, \"max_draft_len\": %d, "
                        "\"dynamic_tree_max_topK\": %d, \"max_total_draft_tokens\": %d}",
                        sg.steps, sg.topk, sg.draft_tokens, tr.steps, tr.topk, tr.draft_tokens);
            }
            fputc('}', fp);
        }
        /* neither engine changes its envelope with the batch size: what a user does */
        fprintf(fp, "\n],\n \"sglang_per_batch_size\": \"%s\",\n \"trtllm_dynamic_per_batch_size\": "
                "\"%s\"}\n", sq_engine_info_of(SQ_ENGINE_SGLANG)->per_batch_note,
                sq_engine_info_of(SQ_ENGINE_TRTLLM_DYNAMIC)->per_batch_note);
        return io_status(fp, err);
    }
    return sq_error_set(err, SQ_EUSAGE, "ladder export \"%s\": unknown (known: trtllm-schedule, "
                        "vllm-schedule, envelopes)", engine);
}

void sq_ladder_print(FILE *fp, const sq_ladder *l)
{
    fprintf(fp, "ladder (objective %s, budget %d, depth %d; chosen by %s's cost model):\n",
            sq_objective_name(l->objective), l->budget, l->depth,
            sq_cost_model_name(l->cost_model));
    /* the engine's prediction, then sequoia-run's of the same tree (its "run" columns) */
    fprintf(fp, "%6s %10s %12s %9s %9s %9s %12s %11s %12s\n", "batch", "tree", "tokens/step",
            "speedup", "chain", "k x L", "tokens/s", "run speedup", "run tok/s");
    for (int i = 0; i < l->n; i++) {
        const sq_ladder_rung *r = &l->rungs[i];
        char tree[32];
        snprintf(tree, sizeof tree, "%d/%d", r->best.size, r->best.depth);
        fprintf(fp, "%6d %10s %12.3f %8.3fx %8.3fx %8.3fx %12.1f %10.3fx %12.1f%s\n", r->batch,
                tree, r->best.expected_tokens, r->best.speedup, r->chain.speedup,
                r->kxl.speedup, r->best.tokens_per_s, r->best.run_speedup,
                r->best.run_tokens_per_s, r->pays ? "" : "  (plain decoding)");
    }
    /* the rungs where no tree pays, wherever they are (issue 27 W4: a ladder need not be
     * monotone; batch 1 may be plain decoding while larger batches speculate) */
    int plain = 0;
    for (int i = 0; i < l->n; i++)
        plain += !l->rungs[i].pays;
    if (plain == 0) {
        fprintf(fp, "speculation pays at every profiled batch size\n");
        return;
    }
    if (l->crossover)
        fprintf(fp, "speculation stops paying at batch size %d: from there on, no tree beats plain "
                "decoding\n", l->crossover);
    int before = 0;   /* rungs below the crossover that do not pay */
    for (int i = 0; i < l->n; i++)
        before += !l->rungs[i].pays && (!l->crossover || l->rungs[i].batch < l->crossover);
    if (!before)
        return;
    if (plain == l->n) {
        fprintf(fp, "speculation pays at no profiled batch size\n");
        return;
    }
    fprintf(fp, "%splain decoding at batch size%s", l->crossover ? "below it, " : "",
            before > 1 ? "s" : "");
    for (int i = 0, k = 0; i < l->n; i++)
        if (!l->rungs[i].pays && (!l->crossover || l->rungs[i].batch < l->crossover))
            fprintf(fp, "%s %d", k++ ? "," : "", l->rungs[i].batch);
    fprintf(fp, " (no tree pays there); speculation pays at");
    for (int i = 0, k = 0; i < l->n; i++)
        if (l->rungs[i].pays)
            fprintf(fp, "%s %d", k++ ? "," : "", l->rungs[i].batch);
    fprintf(fp, "\n");
}

/* ---- picture ---------------------------------------------------------------------------------- */

int sq_ladder_svg_write(FILE *fp, const sq_ladder *l, sq_error *err)
{
    double ymax = 1.0;
    for (int i = 0; i < l->n; i++) {
        const sq_ladder_rung *r = &l->rungs[i];
        double v[3] = {r->best.speedup, r->chain.speedup, r->kxl.speedup};
        for (int k = 0; k < 3; k++)
            if (v[k] > ymax)
                ymax = v[k];
    }
    ymax = ceil(ymax * 4.0 + 0.5) / 4.0;
    double bmin = l->n ? log2(l->rungs[0].batch) : 0, bmax = l->n ? log2(l->rungs[l->n - 1].batch) : 1;
    if (bmax <= bmin)
        bmax = bmin + 1;
    /* batch sizes on a log2 axis, speedup from 0 (drawn with libsequoia/base/svg.h) */
    sq_svg_axes a = {.x0 = 70, .y0 = 40, .w = 530, .h = 300, .xmin = bmin, .xmax = bmax,
                     .ymin = 0, .ymax = ymax, .xlog2 = 1};
    char title[160];
    snprintf(title, sizeof title, "Predicted speedup over plain decoding by batch size "
             "(objective: %s)", sq_objective_name(l->objective));
    sq_svg_begin(fp, 640, 400, title);
    sq_svg_text(fp, a.x0, 22, 14, NULL, NULL, 0, title);
    sq_svg_axes_draw(fp, &a, "batch size (sequences)", "speedup (x)");
    double x1 = a.x0 + a.w, ytop = a.y0;
    sq_svg_line(fp, a.x0, sq_svg_y(&a, 1.0), x1, sq_svg_y(&a, 1.0), "black", 1, "2,3");
    const char *color[3] = {"#1f77b4", "#ff7f0e", "#2ca02c"};
    const char *label[3] = {"optimal tree", "best chain", "best k x L"};
    for (int k = 0; k < 3; k++) {
        sq_svg_polyline_begin(fp, color[k], 2, NULL);
        for (int i = 0; i < l->n; i++) {
            const sq_ladder_rung *r = &l->rungs[i];
            double v = k == 0 ? r->best.speedup : k == 1 ? r->chain.speedup : r->kxl.speedup;
            sq_svg_polyline_point(fp, i == 0, sq_svg_x(&a, r->batch), sq_svg_y(&a, v));
        }
        sq_svg_polyline_end(fp);
        for (int i = 0; i < l->n; i++) {
            const sq_ladder_rung *r = &l->rungs[i];
            double v = k == 0 ? r->best.speedup : k == 1 ? r->chain.speedup : r->kxl.speedup;
            char tip[96];
            snprintf(tip, sizeof tip, "%s, batch %d: %.3fx", label[k], r->batch, v);
            sq_svg_marker(fp, sq_svg_x(&a, r->batch), sq_svg_y(&a, v), 3, color[k], NULL, NULL,
                          tip);
        }
        sq_svg_line(fp, x1 - 150, ytop + 8 + 16.0 * k, x1 - 125, ytop + 8 + 16.0 * k, color[k], 2,
                    NULL);
        sq_svg_text(fp, x1 - 118, ytop + 12 + 16.0 * k, 12, NULL, NULL, 0, label[k]);
    }
    if (l->crossover) {
        double xc = sq_svg_x(&a, l->crossover);
        char text[64];
        snprintf(text, sizeof text, "crossover: batch %d", l->crossover);
        sq_svg_line(fp, xc, a.y0 + a.h, xc, ytop, "#d62728", 1, "6,4");
        sq_svg_text(fp, xc + 4, ytop + 70, 12, NULL, "#d62728", 0, text);
    }
    sq_svg_end(fp);
    return ferror(fp) ? sq_error_set(err, SQ_EIO, "writing the picture failed") : SQ_OK;
}
