/* sequoia-run --batch: see batchrun.h. */
#include "runtime/batchrun.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "libsequoia/base/cli.h"
#include "libsequoia/base/io.h"
#include "libsequoia/base/json.h"
#include "libsequoia/base/progress.h"
#include "libsequoia/base/stats.h"
#include "libsequoia/format/plan.h"
#include "runtime/model.h"
#include "runtime/tokens.h"
#include "runtime/validate.h"

/* Where a decoding's time went, from its batch steps alone: the prompts' prefill and the
 * start-up are left out, so that the rate compares with a profile of the forwards
 * (docs/benchmarks.md, "Ladder"). Medians and 10th percentiles are over the batch steps. */
typedef struct batch_timing {
    double decode_ms;                 /* sum of the batch steps' times                    */
    double step_ms, draft_ms, target_forward_ms, verify_ms;   /* medians                   */
    double step_p10_ms, target_forward_p10_ms;
} batch_timing;

typedef struct batch_state {
    sq_plan          *plan;
    sq_model         *draft, *target;
    sq_tokens        *prompt;
    sq_specdec_batch *bt;
    const int32_t   **prompts;   /* (B) */
    int              *plen;      /* (B) */
    int32_t          *gen, *base;           /* (B, max_new) */
    int32_t         **gen_rows, **base_rows;
    int              *steps;     /* (B) */
    int               batch_steps;
    double            spec_ms, base_ms;
    sq_step_info     *infos;     /* (B, max_new) per-sequence step infos of the decoding     */
    batch_timing      timing;    /* the batch steps' times (prompts' prefill left out)       */
    sq_validation     val;
    int               alone_ok;   /* greedy --validate: every sequence equals its run alone
                                     (-1: not checked)                                       */
    int               alone_seq, alone_tok;   /* the first mismatch                          */
} batch_state;

static void state_free(batch_state *st, int max_new)
{
    if (st->infos && st->bt)
        for (size_t i = 0; i < (size_t)sq_specdec_batch_size(st->bt) * (size_t)max_new; i++)
            sq_step_info_clear(&st->infos[i]);
    free(st->infos);
    sq_specdec_batch_free(st->bt);
    free(st->prompts);
    free(st->plen);
    free(st->gen);
    free(st->base);
    free(st->gen_rows);
    free(st->base_rows);
    free(st->steps);
    sq_tokens_free(st->prompt);
    sq_model_free(st->draft);
    sq_model_free(st->target);
    sq_plan_free(st->plan);
}

static int setup(const sq_batch_run_opts *o, batch_state *st, sq_error *err)
{
    int rc;
    if ((rc = sq_plan_load(o->plan_file, &st->plan, err)) ||
        (rc = sq_model_load(o->draft_dir, &st->draft, err)) ||
        (rc = sq_model_load(o->target_dir, &st->target, err)) ||
        (rc = sq_tokens_load(o->prompt_file, &st->prompt, err)))
        return rc;
    const sq_model_config *tcfg = sq_model_get_config(st->target);
    if ((rc = sq_tokens_check_vocab(st->prompt, tcfg->vocab_size, o->prompt_file, err)))
        return rc;
    if ((rc = sq_specdec_batch_new(st->draft, st->target, st->plan, &o->prm, o->plan_file,
                                   o->batch, &st->bt, err)))
        return rc;
    const int B = o->batch;
    size_t cells = (size_t)B * (size_t)o->max_new;
    st->prompts = malloc((size_t)B * sizeof *st->prompts);
    st->plen = malloc((size_t)B * sizeof *st->plen);
    st->gen = malloc(cells * sizeof *st->gen);
    st->base = malloc(cells * sizeof *st->base);
    st->gen_rows = malloc((size_t)B * sizeof *st->gen_rows);
    st->base_rows = malloc((size_t)B * sizeof *st->base_rows);
    st->steps = malloc((size_t)B * sizeof *st->steps);
    st->infos = calloc(cells, sizeof *st->infos);
    if (!st->prompts || !st->plen || !st->gen || !st->base || !st->gen_rows || !st->base_rows ||
        !st->steps || !st->infos)
        return sq_error_oom(err, "batch buffers");
    sq_specdec *sd = sq_specdec_batch_member(st->bt, 0);
    int D = sq_specdec_depth(sd), ctxlen = sq_specdec_max_context(sd);
    for (int k = 0; k < B; k++) {
        int64_t s = k % st->prompt->sequences;
        int64_t a = st->prompt->offsets[s], b = st->prompt->offsets[s + 1];
        if (b - a + o->max_new - 1 + D > ctxlen)
            return sq_error_set(err, SQ_EUSAGE, "%s: sequence %lld: %lld prompt tokens + %d new "
                                "tokens + a tree of depth %d exceed the context of %d tokens "
                                "(see --context)", o->prompt_file, (long long)s + 1,
                                (long long)(b - a), o->max_new, D, ctxlen);
        st->prompts[k] = st->prompt->ids + a;
        st->plen[k] = (int)(b - a);
        st->gen_rows[k] = st->gen + (size_t)k * o->max_new;
        st->base_rows[k] = st->base + (size_t)k * o->max_new;
    }
    return SQ_OK;
}

/* The batch steps' times: the sequence that took the most steps was in every batch step, and
 * each of its step infos carries that batch step's times. */
static int step_timing(const sq_batch_run_opts *o, batch_state *st, sq_error *err)
{
    int kmax = 0, n = 0;
    for (int k = 1; k < o->batch; k++)
        if (st->steps[k] > st->steps[kmax])
            kmax = k;
    n = st->steps[kmax];
    const sq_step_info *in = st->infos + (size_t)kmax * (size_t)o->max_new;
    double *v = malloc((size_t)(n > 0 ? n : 1) * 4 * sizeof *v);
    if (!v)
        return sq_error_oom(err, "step times");
    batch_timing *t = &st->timing;
    *t = (batch_timing){0};
    for (int i = 0; i < n; i++) {
        t->decode_ms += in[i].step_ms;
        v[i] = in[i].step_ms;
        v[n + i] = in[i].draft_ms;
        v[2 * n + i] = in[i].target_forward_ms;
        v[3 * n + i] = in[i].verify_ms;
    }
    if (n > 0) {
        t->step_ms = sq_quantile(v, n, 0.5);
        t->step_p10_ms = sq_quantile(v, n, 0.1);
        t->draft_ms = sq_quantile(v + n, n, 0.5);
        t->target_forward_ms = sq_quantile(v + 2 * n, n, 0.5);
        t->target_forward_p10_ms = sq_quantile(v + 2 * n, n, 0.1);
        t->verify_ms = sq_quantile(v + 3 * n, n, 0.5);
    }
    free(v);
    return SQ_OK;
}

static int decode(const sq_batch_run_opts *o, batch_state *st, sq_error *err)
{
    int rc;
    sq_specdec_batch_seed(st->bt, o->prm.seed);
    double t0 = sq_now_ms();
    if ((rc = sq_specdec_batch_generate(st->bt, st->prompts, st->plen, o->max_new, st->gen_rows,
                                        st->steps, &st->batch_steps, st->infos, err)))
        return rc;
    st->spec_ms = sq_now_ms() - t0;
    if ((rc = step_timing(o, st, err)))
        return rc;
    st->base_ms = NAN;
    if (o->baseline) {
        t0 = sq_now_ms();
        if ((rc = sq_specdec_batch_autoregressive(st->bt, st->prompts, st->plen, o->max_new,
                                                  o->prm.seed, st->base_rows, err)))
            return rc;
        st->base_ms = sq_now_ms() - t0;
    }
    return SQ_OK;
}

/* --validate (batchrun.h). */
static int validate(const sq_batch_run_opts *o, batch_state *st, sq_error *err)
{
    const int B = o->batch, n = o->max_new;
    sq_validation *val = &st->val;
    val->ran = 1;
    int rc = sq_validate_attention(sq_specdec_batch_member(st->bt, 0), st->prompts[0],
                                   st->plen[0], sq_validate_attn_tol(o->prm.backend), val, err);
    if (rc)
        return rc;
    if (o->prm.mode != SQ_MODE_GREEDY) {
        sq_progress pg;
        sq_progress_start(&pg, o->prog, "validate", "draws", o->quiet, 0);
        rc = sq_validate_distribution_batch(st->bt, o->prm.seed, o->samples, st->prompts,
                                            st->plen, val, sq_progress_callback, &pg, err);
        sq_progress_end(&pg);
        return rc;
    }
    /* the target's greedy decoding (the batch decoded by the target alone) */
    val->greedy_checked = 1;
    val->greedy_ok = 1;
    val->greedy_first_mismatch = -1;
    for (int k = 0; k < B && val->greedy_ok; k++)
        for (int i = 0; i < n; i++)
            if (st->gen_rows[k][i] != st->base_rows[k][i]) {
                val->greedy_ok = 0;
                val->greedy_first_mismatch = i;
                fprintf(stderr, "%s: validate: sequence %d differs from the target's greedy "
                        "decoding at token %d: FAILED\n", o->prog, k, i);
                break;
            }
    /* B separate runs: each sequence through the single-sequence decoder on its own */
    int32_t *alone = malloc((size_t)n * sizeof *alone);
    int *stp = malloc((size_t)n * sizeof *stp), steps;
    if (!alone || !stp) {
        free(alone);
        free(stp);
        return sq_error_oom(err, "validation");
    }
    st->alone_ok = 1;
    st->alone_seq = st->alone_tok = -1;
    for (int k = 0; k < B && st->alone_ok && !rc; k++) {
        sq_specdec *sd = sq_specdec_batch_member(st->bt, k);
        sq_specdec_seed(sd, sq_specdec_batch_seed_of(o->prm.seed, k));
        if ((rc = sq_specdec_generate(sd, st->prompts[k], st->plen[k], n, alone, stp, &steps,
                                      NULL, err)))
            break;
        for (int i = 0; i < n; i++)
            if (st->gen_rows[k][i] != alone[i]) {
                st->alone_ok = 0;
                st->alone_seq = k;
                st->alone_tok = i;
                fprintf(stderr, "%s: validate: sequence %d differs from its run alone at token "
                        "%d: FAILED\n", o->prog, k, i);
                break;
            }
    }
    free(alone);
    free(stp);
    return rc;
}

static cJSON *report_json(const sq_batch_run_opts *o, const batch_state *st, int greedy_ok)
{
    const int B = o->batch;
    double toks = (double)B * o->max_new;
    long seq_steps = 0;
    for (int k = 0; k < B; k++)
        seq_steps += st->steps[k];
    sq_json_build b = sq_json_build_begin();
    cJSON *j = cJSON_CreateObject();
    sq_json_add(j, "format", cJSON_CreateString("sequoia-run-batch"));
    sq_json_add(j, "version", cJSON_CreateNumber(1));
    sq_json_add(j, "draft", cJSON_CreateString(o->draft_dir));
    sq_json_add(j, "target", cJSON_CreateString(o->target_dir));
    sq_json_add(j, "plan", cJSON_CreateString(o->plan_file));
    sq_json_add(j, "prompt", cJSON_CreateString(o->prompt_file));
    sq_json_add(j, "mode", cJSON_CreateString(sq_mode_name(o->prm.mode)));
    sq_json_add(j, "batch", cJSON_CreateNumber(B));
    sq_json_add(j, "plan_nodes", cJSON_CreateNumber(st->plan->tree->n));
    sq_json_add(j, "plan_depth", cJSON_CreateNumber(sq_tree_depth(st->plan->tree)));
    sq_json_add(j, "plan_expected_tokens", cJSON_CreateNumber(st->plan->expected_tokens));
    sq_json_add(j, "max_new_tokens", cJSON_CreateNumber(o->max_new));
    sq_json_add(j, "batch_steps", cJSON_CreateNumber(st->batch_steps));
    sq_json_add(j, "tokens_per_step", cJSON_CreateNumber(toks / (double)seq_steps));
    sq_json_add(j, "spec_ms", cJSON_CreateNumber(st->spec_ms));
    sq_json_add(j, "tokens_per_s", cJSON_CreateNumber(toks / (st->spec_ms / 1e3)));
    sq_json_add(j, "tokens_per_s_per_sequence",
                cJSON_CreateNumber(o->max_new / (st->spec_ms / 1e3)));
    cJSON *dj = cJSON_CreateObject();
    const batch_timing *t = &st->timing;
    sq_json_add(dj, "ms", cJSON_CreateNumber(t->decode_ms));
    sq_json_add(dj, "tokens_per_s", cJSON_CreateNumber(toks / (t->decode_ms / 1e3)));
    sq_json_add(dj, "step_ms_median", cJSON_CreateNumber(t->step_ms));
    sq_json_add(dj, "step_ms_p10", cJSON_CreateNumber(t->step_p10_ms));
    sq_json_add(dj, "draft_ms_median", cJSON_CreateNumber(t->draft_ms));
    sq_json_add(dj, "target_forward_ms_median", cJSON_CreateNumber(t->target_forward_ms));
    sq_json_add(dj, "target_forward_ms_p10", cJSON_CreateNumber(t->target_forward_p10_ms));
    sq_json_add(dj, "verify_ms_median", cJSON_CreateNumber(t->verify_ms));
    sq_json_add(j, "decode", dj);
    if (o->baseline) {
        sq_json_add(j, "base_ms", cJSON_CreateNumber(st->base_ms));
        sq_json_add(j, "base_tokens_per_s", cJSON_CreateNumber(toks / (st->base_ms / 1e3)));
        sq_json_add(j, "speedup", cJSON_CreateNumber(st->base_ms / st->spec_ms));
    }
    if (greedy_ok >= 0)
        sq_json_add(j, "greedy_equals_target", cJSON_CreateBool(greedy_ok));
    if (st->alone_ok >= 0)
        sq_json_add(j, "greedy_equals_separate_runs", cJSON_CreateBool(st->alone_ok));
    if (st->val.ran)
        sq_json_add(j, "validation", sq_validation_to_json(&st->val));
    cJSON *seqs = cJSON_CreateArray();
    for (int k = 0; k < B && seqs; k++) {
        cJSON *s = cJSON_CreateObject();
        sq_json_add(s, "prompt_tokens", cJSON_CreateNumber(st->plen[k]));
        sq_json_add(s, "steps", cJSON_CreateNumber(st->steps[k]));
        sq_json_add(s, "tokens_per_step",
                    cJSON_CreateNumber((double)o->max_new / (double)st->steps[k]));
        sq_json_append(seqs, s);
    }
    sq_json_add(j, "sequences", seqs);
    return sq_json_build_end(b, j);
}

/* The --validate lines on stderr; SQ_EFAIL when a check failed. */
static int summary(const sq_batch_run_opts *o, const batch_state *st, sq_error *err)
{
    const sq_validation *val = &st->val;
    if (!val->ran)
        return SQ_OK;
    fprintf(stderr, "%s: validate: tree attention (sequence 0 alone) max |diff| %.3g (<= %g): "
            "%s\n", o->prog, val->attn_max_diff, val->attn_tol, val->attn_ok ? "ok" : "FAILED");
    if (val->greedy_checked && val->greedy_ok && st->alone_ok == 1)
        fprintf(stderr, "%s: validate: every sequence's greedy output identical to the target's "
                "and to its own run alone: ok\n", o->prog);
    if (val->dist_checked)
        fprintf(stderr, "%s: validate: %d draws in batches of %d over %d prompt%s; first token "
                "chi2 %.2f df %d p = %.4g; first two tokens chi2 %.2f df %d p = %.4g (%s; fail "
                "below %g): %s\n", o->prog, val->seeds, o->batch, val->dist_groups,
                val->dist_groups == 1 ? "" : "s", val->first.stat, val->first.df,
                val->first.p_value, val->pair.stat, val->pair.df, val->pair.p_value,
                val->dist_groups == 1 ? "pooled" : "the worst prompt's", SQ_VALIDATE_P_MIN,
                val->dist_ok ? "ok" : "FAILED");
    return sq_validation_pass(val) && st->alone_ok != 0
               ? SQ_OK : sq_error_set(err, SQ_EFAIL, "validation failed");
}

int sq_batch_run(const sq_batch_run_opts *o)
{
    sq_error err = {0};
    int rc;
    enum { TOKENS, REPORT, N_OUT };
    sq_out *out[N_OUT] = {NULL, NULL};
    batch_state st = {0};
    st.alone_ok = -1;
    cJSON *rep = NULL;
    int greedy_ok = -1;
    if (!(rc = sq_out_open(&out[TOKENS], o->out_file ? o->out_file : "-", &err)) &&
        !(o->report_file && (rc = sq_out_open(&out[REPORT], o->report_file, &err))) &&
        !(rc = setup(o, &st, &err)) && !(rc = decode(o, &st, &err))) {
        if (o->validate && !(rc = validate(o, &st, &err)) && st.val.greedy_checked)
            greedy_ok = st.val.greedy_ok;
    }
    if (!rc) {
        FILE *fp = sq_out_stream(out[TOKENS]);
        for (int k = 0; k < o->batch; k++) {
            for (int i = 0; i < o->max_new; i++)
                fprintf(fp, i ? " %d" : "%d", (int)st.gen_rows[k][i]);
            fputc('\n', fp);
        }
        if (out[REPORT] && !(rep = report_json(o, &st, greedy_ok)))
            rc = sq_error_oom(&err, "report");
        else if (out[REPORT])
            sq_json_print(sq_out_stream(out[REPORT]), rep);
        if (!rc)
            rc = sq_cli_commit(out, N_OUT, &err);
        if (!rc) {
            double toks = (double)o->batch * o->max_new;
            long seq_steps = 0;
            for (int k = 0; k < o->batch; k++)
                seq_steps += st.steps[k];
            fprintf(stderr, "%s: batch %d: %d tokens per sequence in %d batch steps, %.3f "
                    "tokens/step (plan expects %.3f); %.1f tokens/s over the batch, %.1f per "
                    "sequence\n", o->prog, o->batch, o->max_new, st.batch_steps,
                    toks / (double)seq_steps, st.plan->expected_tokens,
                    toks / (st.spec_ms / 1e3), o->max_new / (st.spec_ms / 1e3));
            if (o->baseline)
                fprintf(stderr, "%s: batch %d: target alone %.1f tokens/s over the batch: speedup "
                        "%.2fx\n", o->prog, o->batch, toks / (st.base_ms / 1e3),
                        st.base_ms / st.spec_ms);
            rc = summary(o, &st, &err);
        }
    }
    for (int i = 0; i < N_OUT; i++)
        sq_out_abort(out[i]);
    cJSON_Delete(rep);
    state_free(&st, o->max_new);
    if (rc)
        fprintf(stderr, "%s: %s\n", o->prog, err.msg);
    return rc;
}
