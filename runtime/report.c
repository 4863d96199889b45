/* The run report (report.h). */
#include "runtime/report.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "libsequoia/base/json.h"

int sq_run_acceptance_init(sq_run_acceptance *a, int W, int D, sq_error *err)
{
    a->W = W > 0 ? W : 1;
    a->D = D;
    a->offered = calloc((size_t)a->W, sizeof(double));
    a->hits = calloc((size_t)a->W, sizeof(double));
    a->offered_d = calloc((size_t)a->W * (size_t)(D > 0 ? D : 1), sizeof(double));
    a->hits_d = calloc((size_t)a->W * (size_t)(D > 0 ? D : 1), sizeof(double));
    if (a->offered && a->hits && a->offered_d && a->hits_d)
        return SQ_OK;
    sq_run_acceptance_free(a);
    return sq_error_oom(err, "acceptance counts");
}

void sq_run_acceptance_free(sq_run_acceptance *a)
{
    free(a->offered);
    free(a->hits);
    free(a->offered_d);
    free(a->hits_d);
    memset(a, 0, sizeof *a);
}

void sq_run_acceptance_add(sq_run_acceptance *a, const sq_step_info *s)
{
    for (int v = 0; v < s->visits && v < a->D; v++) {
        int c = s->visit_children[v], r = s->visit_rank[v];
        for (int k = 0; k < c && k < a->W; k++) {
            a->offered[k] += 1;
            a->offered_d[(size_t)v * a->W + k] += 1;
        }
        if (r > 0 && r <= a->W) {
            a->hits[r - 1] += 1;
            a->hits_d[(size_t)v * a->W + r - 1] += 1;
        }
    }
}

void sq_run_acceptance_p(const sq_run_acceptance *a, double *p)
{
    for (int k = 0; k < a->W; k++)
        p[k] = a->offered[k] > 0 ? a->hits[k] / a->offered[k] : 0.0;
}

int sq_tree_f_with(const sq_tree *t, const double *p, int W, double *F, sq_error *err)
{
    double *f = malloc((size_t)t->n * sizeof *f);
    if (!f)
        return sq_error_oom(err, "tree scores");
    *F = 0.0;
    for (int v = 0; v < t->n; v++) {
        f[v] = v == 0 ? 1.0
                      : f[t->parent[v]] * (t->rank[v] <= W ? p[t->rank[v] - 1] : 0.0);
        *F += f[v];
    }
    free(f);
    return SQ_OK;
}

int sq_run_decode_timing(const sq_step_info *in, int n, sq_run_decode *t, sq_error *err)
{
    double *v = malloc((size_t)(n > 0 ? n : 1) * 4 * sizeof *v);
    if (!v)
        return sq_error_oom(err, "step times");
    *t = (sq_run_decode){0};
    for (int i = 0; i < n; i++) {
        t->ms += in[i].step_ms;
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

int sq_run_predict(const sq_run_record *r, sq_run_prediction *out, sq_error *err)
{
    memset(out, 0, sizeof *out);
    double *stepv = malloc((size_t)(r->steps > 0 ? r->steps : 1) * sizeof *stepv);
    double *phat = malloc((size_t)r->acc->W * sizeof *phat);
    int rc = SQ_OK;
    if (!stepv || !phat) {
        rc = sq_error_oom(err, "prediction");
        goto done;
    }
    for (int s = 0; s < r->steps; s++)
        stepv[s] = r->step_tokens[s];
    out->ci = sq_mean_ci_batch(stepv, r->steps);
    /* A step outputs at least one token and at most one per tree level: a t interval from few
     * batches reaches past both (issue 27: "95% CI -4.853 .. 7.853"), so it is cut to them. */
    if (isfinite(out->ci.lo) && isfinite(out->ci.hi)) {
        double top = r->depth > 1 ? (double)r->depth : 1.0;
        out->ci.lo = out->ci.lo < 1.0 ? 1.0 : out->ci.lo;
        out->ci.hi = out->ci.hi > top ? top : out->ci.hi;
    }
    if (r->dyn && r->dyn->expected_tokens > 0) {   /* a dynamic plan's prediction */
        double e = r->dyn->expected_tokens;
        out->have_ci = isfinite(out->ci.lo) && isfinite(out->ci.hi);
        out->f_measured_acc = NAN;
        out->within = out->have_ci && e >= out->ci.lo && e <= out->ci.hi;
        if (!out->have_ci)
            snprintf(out->explanation, sizeof out->explanation,
                     "%d steps are too few for a confidence interval (at least 4 are needed): "
                     "generate more tokens to compare with the dynamic plan's expected_tokens "
                     "%.4f", r->steps, e);
        else
            snprintf(out->explanation, sizeof out->explanation,
                     "%s envelope %d,%d,%d: the dynamic plan's expected_tokens %.4f %s the 95%% "
                     "CI of the measured mean %.4f (docs/planning.md, \"Dynamic trees\", has the "
                     "prediction's assumptions)", r->dyn->engine, r->dyn->steps, r->dyn->topk,
                     r->dyn->nodes, e, out->within ? "lies within" : "lies outside",
                     out->ci.mean);
        goto done;
    }
    if (r->dyn) {   /* no plan to compare with: the planner predicts envelopes (issue 26) */
        out->have_ci = isfinite(out->ci.lo) && isfinite(out->ci.hi);
        out->f_measured_acc = NAN;
        snprintf(out->explanation, sizeof out->explanation,
                 "%s's dynamic tree of envelope %d,%d,%d: the run predicts nothing (sequoia-plan "
                 "--engine %s --envelope %d,%d,%d predicts its tokens/step)", r->dyn->engine,
                 r->dyn->steps, r->dyn->topk, r->dyn->nodes, r->dyn->engine, r->dyn->steps,
                 r->dyn->topk, r->dyn->nodes);
        goto done;
    }
    sq_run_acceptance_p(r->acc, phat);
    if ((rc = sq_tree_f_with(r->plan->tree, phat, r->acc->W, &out->f_measured_acc, err)))
        goto done;
    const sq_plan *plan = r->plan;
    const sq_mean_ci *ci = &out->ci;
    out->have_ci = isfinite(ci->lo) && isfinite(ci->hi);
    out->within = out->have_ci && plan->expected_tokens >= ci->lo &&
                  plan->expected_tokens <= ci->hi;
    if (!out->have_ci)
        snprintf(out->explanation, sizeof out->explanation,
                 "%d steps are too few for a confidence interval (at least 4 are needed): "
                 "generate more tokens to compare with the plan's expected_tokens %.4f", r->steps,
                 plan->expected_tokens);
    else if (out->within)
        snprintf(out->explanation, sizeof out->explanation,
                 "the plan's expected_tokens %.4f lies within the 95%% CI of the measured mean",
                 plan->expected_tokens);
    else
        snprintf(out->explanation, sizeof out->explanation,
                 "measured %.4f tokens/step vs the plan's %.4f. The plan's curve ('%s', %s) "
                 "predicts p_1 = %.4f; this run accepted rank 1 at %.4f. Scored with the "
                 "acceptance measured in this run, the same tree gives F = %.4f: the part of the "
                 "gap that remains (%.4f) is the positional assumption's error, the rest (%.4f) "
                 "is the curve not describing this model pair and setting",
                 ci->mean, plan->expected_tokens, plan->acceptance.name, plan->acceptance.mode,
                 sq_curve_p(&plan->acceptance, 1, 1), phat[0], out->f_measured_acc,
                 ci->mean - out->f_measured_acc, out->f_measured_acc - plan->expected_tokens);
done:
    free(stepv);
    free(phat);
    return rc;
}

void sq_run_speed_of(const sq_run_record *r, sq_run_speed *out)
{
    *out = (sq_run_speed){.predicted = NAN, .ratio = NAN, .plan_batch = 1};
    const cJSON *hw = r->dyn ? r->dyn->hardware : r->plan ? r->plan->hardware : NULL;
    if (!cJSON_IsObject(hw))
        return;
    out->have_plan = 1;
    const cJSON *pb = sq_json_field(hw, "batch");
    if (cJSON_IsNumber(pb) && pb->valuedouble >= 1)
        out->plan_batch = (int)pb->valuedouble;
    double toks = 0;
    for (int s = 0; s < r->steps; s++)
        toks += r->step_tokens[s];
    out->measured = r->steps_ms > 0 ? 1e3 * toks / r->steps_ms : 0.0;
    const cJSON *rt = sq_json_field(hw, SQ_PLAN_HW_RUNTIME);
    const cJSON *ptps = rt ? sq_json_field(rt, "tokens_per_second") : NULL;
    int B = r->batch ? r->batch->size : 1;
    if (!(cJSON_IsNumber(ptps) && ptps->valuedouble > 0))
        snprintf(out->note, sizeof out->note, "not compared: the plan's hardware section has no "
                 SQ_PLAN_HW_RUNTIME ".tokens_per_second (a plan written before sequoia-run's "
                 "cost model; plan it again)");
    else if (B != out->plan_batch)
        snprintf(out->note, sizeof out->note, "not comparable: the plan priced batch %d, this "
                 "run decoded %d sequence%s together", out->plan_batch, B, B == 1 ? "" : "s");
    else if (!(r->steps_ms > 0))
        snprintf(out->note, sizeof out->note, "not compared: no decoding step was timed");
    else {
        out->comparable = 1;
        /* a static plan's rate is per sequence, a dynamic plan's over the batch */
        out->predicted = ptps->valuedouble * (r->dyn ? 1 : out->plan_batch);
        out->ratio = out->measured / out->predicted;
    }
}

void sq_run_summary_line(const sq_run_record *r, const sq_run_prediction *pr, char *buf,
                         size_t cap)
{
    long long made = 0;
    for (int s = 0; s < r->steps; s++)
        made += r->step_tokens[s];
    double out = r->generated_tokens;
    size_t len = (size_t)snprintf(buf, cap, "%.0f token%s in %d step%s", out,
                                  out == 1 ? "" : "s", r->steps, r->steps == 1 ? "" : "s");
    if ((double)made > out && len < cap) {
        char at[64] = "an end-of-sequence token";
        if (out >= r->max_new_tokens)
            snprintf(at, sizeof at, "--max-new-tokens %d", r->max_new_tokens);
        len += (size_t)snprintf(buf + len, cap - len, ", which made %lld (the last step was cut "
                                "at %s; tokens/step counts all %lld)", made, at, made);
    }
    if (len < cap)
        len += (size_t)snprintf(buf + len, cap - len, ": %.3f tokens/step ", pr->ci.mean);
    if (len < cap && pr->have_ci)
        len += (size_t)snprintf(buf + len, cap - len, "(95%% CI %.3f .. %.3f)", pr->ci.lo,
                                pr->ci.hi);
    else if (len < cap)
        len += (size_t)snprintf(buf + len, cap - len, "(no 95%% CI: %d step%s, at least 4 "
                                "needed)", r->steps, r->steps == 1 ? "" : "s");
    if (len < cap && r->dyn)
        len += (size_t)snprintf(buf + len, cap - len, ", %s envelope %d,%d,%d", r->dyn->engine,
                                r->dyn->steps, r->dyn->topk, r->dyn->nodes);
    if (len < cap && r->dyn && r->dyn->expected_tokens > 0)
        snprintf(buf + len, cap - len, ", plan expects %.3f%s", r->dyn->expected_tokens,
                 pr->within || !pr->have_ci ? "" : " (outside the CI: see the report's "
                 "prediction)");
    else if (len < cap && !r->dyn)   /* an --engine run without a plan predicts nothing */
        snprintf(buf + len, cap - len, ", plan expects %.3f%s", r->plan->expected_tokens,
                 pr->within || !pr->have_ci ? "" : " (outside the CI: see the report's "
                 "prediction)");
}

static cJSON *ci_json(const sq_mean_ci *m)
{
    cJSON *o = cJSON_CreateObject();
    sq_json_add(o, "mean", cJSON_CreateNumber(m->mean));
    sq_json_add(o, "stddev", cJSON_CreateNumber(m->stddev));
    sq_json_add(o, "stderr", isfinite(m->stderr_) ? cJSON_CreateNumber(m->stderr_)
                                                 : cJSON_CreateNull());
    double ci[2] = {m->lo, m->hi};
    if (isfinite(m->lo) && isfinite(m->hi))
        sq_json_add(o, "ci95", sq_json_number_array(ci, 2));
    else
        sq_json_add(o, "ci95", cJSON_CreateNull());
    sq_json_add(o, "steps", cJSON_CreateNumber(m->n));
    sq_json_add(o, "batches", cJSON_CreateNumber(m->batches));
    sq_json_add(o, "ci_method", cJSON_CreateString(
        "t interval on batch means of consecutive steps (about sqrt(steps) batches), never "
        "narrower than the independent-steps interval, cut to [1, depth] (a step outputs 1 to "
        "depth tokens); null with fewer than 4 steps"));
    return o;
}

static cJSON *setup_json(const sq_run_record *r)
{
    cJSON *setup = cJSON_CreateObject();
    sq_json_add(setup, "draft", cJSON_CreateString(r->draft));
    sq_json_add(setup, "target", cJSON_CreateString(r->target));
    sq_json_add(setup, "plan", cJSON_CreateString(r->plan_file));
    sq_json_add(setup, "prompt", cJSON_CreateString(r->prompt_file));
    sq_json_add(setup, "prompt_tokens", cJSON_CreateNumber(r->prompt_tokens));
    sq_json_add(setup, "max_new_tokens", cJSON_CreateNumber(r->max_new_tokens));
    sq_json_add(setup, "mode", cJSON_CreateString(r->mode));
    sq_json_add(setup, "temperature", cJSON_CreateNumber(r->temperature));
    sq_json_add(setup, "top_p", cJSON_CreateNumber(r->top_p));
    sq_json_add(setup, "seed", cJSON_CreateNumber((double)r->seed));
    sq_json_add(setup, "context", cJSON_CreateNumber(r->context));
    sq_json_add(setup, "vocab_size", cJSON_CreateNumber(r->vocab_size));
    if (r->draft_vocab_size > 0) {   /* the models differ by padding rows */
        sq_json_add(setup, "draft_vocab_size", cJSON_CreateNumber(r->draft_vocab_size));
        sq_json_add(setup, "target_vocab_size", cJSON_CreateNumber(r->target_vocab_size));
    }
    sq_json_add(setup, "backend", cJSON_CreateString(r->backend));
    sq_json_add(setup, "dtype", cJSON_CreateString(r->dtype));
    return setup;
}

/* "acceptance_measured": p, offered, the plan's p, and p by depth (scratch pc holds W). */
static cJSON *acceptance_json(const sq_run_record *r, double *pc)
{
    const sq_run_acceptance *acc = r->acc;
    cJSON *aj = cJSON_CreateObject();
    sq_run_acceptance_p(acc, pc);
    sq_json_add(aj, "p", sq_json_number_array(pc, (size_t)acc->W));
    sq_json_add(aj, "offered", sq_json_number_array(acc->offered, (size_t)acc->W));
    for (int k = 0; k < acc->W; k++)
        pc[k] = sq_curve_p(&r->plan->acceptance, 1, k + 1);
    sq_json_add(aj, "plan_p", sq_json_number_array(pc, (size_t)acc->W));
    cJSON *rows = cJSON_CreateArray();
    for (int d = 0; d < acc->D; d++) {
        int any = 0;
        for (int k = 0; k < acc->W; k++) {
            double off = acc->offered_d[(size_t)d * acc->W + k];
            pc[k] = off > 0 ? acc->hits_d[(size_t)d * acc->W + k] / off : 0.0;
            any |= off > 0;
        }
        if (!any)
            break;
        cJSON_AddItemToArray(rows, sq_json_number_array(pc, (size_t)acc->W));
    }
    sq_json_add(aj, "p_by_depth", rows);
    sq_json_add(aj, "note", cJSON_CreateString(
        "p[k] = (times rank k+1 was accepted) / (visited nodes with at least k+1 children); "
        "p_by_depth row d counts nodes at depth d (0 = the root)"));
    return aj;
}

/* Tokens generated in all: every sequence's max_new_tokens, less what end-of-sequence stops
 * left out. */
static double generated(const sq_run_record *r)
{
    if (r->generated_tokens > 0)
        return r->generated_tokens;
    return (double)(r->batch ? r->batch->size : 1) * r->max_new_tokens;
}

static cJSON *timing_json(const sq_run_record *r)
{
    cJSON *tj = cJSON_CreateObject();
    sq_json_add(tj, "speculative_ms", cJSON_CreateNumber(r->spec_ms));
    sq_json_add(tj, "speculative_ms_per_token", cJSON_CreateNumber(r->spec_ms / generated(r)));
    sq_json_add(tj, "draft_ms", cJSON_CreateNumber(r->draft_ms));
    sq_json_add(tj, "target_ms", cJSON_CreateNumber(r->target_ms));
    sq_json_add(tj, "verify_ms", cJSON_CreateNumber(r->verify_ms));
    /* per-step split: the two models' forwards and everything else a step does */
    cJSON *sj = cJSON_CreateObject();
    sq_json_add(sj, "steps_ms", cJSON_CreateNumber(r->steps_ms));
    sq_json_add(sj, "draft_forward_ms", cJSON_CreateNumber(r->draft_forward_ms));
    sq_json_add(sj, "target_forward_ms", cJSON_CreateNumber(r->target_forward_ms));
    sq_json_add(sj, "draft_proposals_ms", cJSON_CreateNumber(r->draft_ms - r->draft_forward_ms));
    sq_json_add(sj, "target_inputs_ms", cJSON_CreateNumber(r->target_ms - r->target_forward_ms));
    sq_json_add(sj, "verify_ms", cJSON_CreateNumber(r->verify_ms));
    sq_json_add(sj, "commit_ms", cJSON_CreateNumber(r->commit_ms));
    sq_json_add(sj, "outside_forwards_ms",
                cJSON_CreateNumber(r->steps_ms - r->draft_forward_ms - r->target_forward_ms));
    sq_json_add(sj, "note", cJSON_CreateString(
        "sums over steps; outside_forwards_ms = steps_ms - draft_forward_ms - target_forward_ms "
        "(draft proposals and tree masks, target inputs, verification, KV compaction); "
        "speculative_ms also counts both models' prefill of the prompt"));
    sq_json_add(tj, "step_split", sj);
    if (r->step_infos && r->n_step_infos > 0) {
        /* step by step, to 0.1 us: the first steps of a process run slower than the rest
         * (docs/benchmarks.md, "Static trees against dynamic trees"), and a rare step is
         * interrupted */
        const int ns = r->n_step_infos;
        double *v = malloc((size_t)ns * sizeof *v);
        cJSON *pj = cJSON_CreateObject();
        static const char *const keys[3] = {"step_ms", "draft_forward_ms", "target_forward_ms"};
        for (int k = 0; k < 3 && v && pj; k++) {
            for (int s = 0; s < ns; s++) {
                const sq_step_info *in = &r->step_infos[s];
                double x = k == 0 ? in->step_ms : k == 1 ? in->draft_forward_ms
                                                         : in->target_forward_ms;
                v[s] = round(x * 1e4) / 1e4;
            }
            sq_json_add(pj, keys[k], sq_json_number_array(v, (size_t)ns));
        }
        free(v);
        sq_json_add(tj, "per_step", pj);
    }
    if (r->base) {
        sq_json_add(tj, "autoregressive_ms", cJSON_CreateNumber(r->base_ms));
        sq_json_add(tj, "autoregressive_ms_per_token",
                    cJSON_CreateNumber(r->base_ms / generated(r)));
        sq_json_add(tj, "speedup", cJSON_CreateNumber(r->base_ms / r->spec_ms));
    }
    return tj;
}

static int common_prefix(const int32_t *a, const int32_t *b, int n)
{
    int same = 0;
    while (same < n && a[same] == b[same])
        same++;
    return same;
}

/* The batch section: the batch's rates, its steps' times and every sequence's figures. */
static cJSON *batch_json(const sq_run_record *r)
{
    const sq_run_batch *bt = r->batch;
    const int n = r->max_new_tokens;
    const double toks = generated(r);
    long seq_steps = 0;
    for (int k = 0; k < bt->size; k++)
        seq_steps += bt->seqs[k].steps;
    cJSON *j = cJSON_CreateObject();
    sq_json_add(j, "size", cJSON_CreateNumber(bt->size));
    sq_json_add(j, "batch_steps", cJSON_CreateNumber(bt->batch_steps));
    sq_json_add(j, "tokens_per_step", cJSON_CreateNumber(toks / (double)seq_steps));
    sq_json_add(j, "tokens_per_s", cJSON_CreateNumber(toks / (r->spec_ms / 1e3)));
    sq_json_add(j, "tokens_per_s_per_sequence", cJSON_CreateNumber(n / (r->spec_ms / 1e3)));
    if (r->base)
        sq_json_add(j, "base_tokens_per_s", cJSON_CreateNumber(toks / (r->base_ms / 1e3)));
    const sq_run_decode *t = &bt->decode;
    cJSON *dj = cJSON_CreateObject();
    sq_json_add(dj, "ms", cJSON_CreateNumber(t->ms));
    sq_json_add(dj, "tokens_per_s", cJSON_CreateNumber(toks / (t->ms / 1e3)));
    sq_json_add(dj, "step_ms_median", cJSON_CreateNumber(t->step_ms));
    sq_json_add(dj, "step_ms_p10", cJSON_CreateNumber(t->step_p10_ms));
    sq_json_add(dj, "draft_ms_median", cJSON_CreateNumber(t->draft_ms));
    sq_json_add(dj, "target_forward_ms_median", cJSON_CreateNumber(t->target_forward_ms));
    sq_json_add(dj, "target_forward_ms_p10", cJSON_CreateNumber(t->target_forward_p10_ms));
    sq_json_add(dj, "verify_ms_median", cJSON_CreateNumber(t->verify_ms));
    sq_json_add(j, "decode", dj);
    if (bt->greedy_equals_separate_runs >= 0)
        sq_json_add(j, "greedy_equals_separate_runs",
                    cJSON_CreateBool(bt->greedy_equals_separate_runs));
    cJSON *seqs = cJSON_CreateArray();
    for (int k = 0; k < bt->size && seqs; k++) {
        const sq_run_sequence *q = &bt->seqs[k];
        cJSON *s = cJSON_CreateObject();
        sq_json_add(s, "prompt_tokens", cJSON_CreateNumber(q->prompt_tokens));
        sq_json_add(s, "steps", cJSON_CreateNumber(q->steps));
        int out = 0;   /* tokens out: n, or fewer when the sequence stopped at an EOS (-1 after) */
        while (out < n && q->gen[out] >= 0)
            out++;
        sq_json_add(s, "tokens_per_step", cJSON_CreateNumber((double)out / (double)q->steps));
        if (q->base)
            sq_json_add(s, "common_prefix_with_autoregressive",
                        cJSON_CreateNumber(common_prefix(q->gen, q->base, n)));
        sq_json_append(seqs, s);
    }
    sq_json_add(j, "sequences", seqs);
    return j;
}

/* "dynamic": the engine, the envelope and every step's verified tree (docs/formats.md). */
static cJSON *dynamic_json(const sq_run_dynamic *d)
{
    cJSON *j = cJSON_CreateObject();
    sq_json_add(j, "engine", cJSON_CreateString(d->engine));
    cJSON *ej = cJSON_CreateObject();
    sq_json_add(ej, "steps", cJSON_CreateNumber(d->steps));
    sq_json_add(ej, "topk", cJSON_CreateNumber(d->topk));
    sq_json_add(ej, "nodes", cJSON_CreateNumber(d->nodes));
    sq_json_add(j, "envelope", ej);
    cJSON *trees = cJSON_CreateArray();
    for (int k = 0; k < d->B && trees; k++)
        for (int s = 0; s < d->seq_steps[k]; s++) {
            const sq_step_info *in = &d->infos[(size_t)k * d->max_new + s];
            if (in->tree_n < 1)
                continue;
            cJSON *t = cJSON_CreateObject();
            sq_json_add(t, "sequence", cJSON_CreateNumber(k));
            sq_json_add(t, "step", cJSON_CreateNumber(s));
            sq_json_add(t, "parents", sq_json_int_array(in->tree_parent, (size_t)in->tree_n));
            cJSON *tok = cJSON_CreateArray();
            for (int u = 0; u < in->tree_n && tok; u++)
                sq_json_append(tok, cJSON_CreateNumber(in->tree_token[u]));
            sq_json_add(t, "tokens", tok);
            sq_json_add(t, "scores", sq_json_number_array(in->tree_score, (size_t)in->tree_n));
            sq_json_add(t, "accepted", sq_json_int_array(in->tree_path,
                                                          (size_t)in->tree_accepted));
            sq_json_add(t, "tokens_out", cJSON_CreateNumber(in->tokens));
            sq_json_append(trees, t);
        }
    sq_json_add(j, "trees", trees);
    sq_json_add(j, "note", cJSON_CreateString(
        "per step the verified tree breadth-first (node 0 the root, the last accepted token): "
        "parents (-1 for the root), tokens, scores (the product of the draft's temperature-1 "
        "probabilities along the path; 0 for the root), accepted = the accepted nodes below "
        "the root in order; tokens_out = accepted + 1 (the bonus token)"));
    return j;
}

cJSON *sq_run_report_json(const sq_run_record *r, const sq_run_prediction *pr)
{
    int n = r->max_new_tokens;
    size_t scratch = (size_t)(r->acc->W > n ? r->acc->W : n);
    scratch = scratch > (size_t)r->steps ? scratch : (size_t)r->steps;
    sq_json_build b = sq_json_build_begin();
    double *pc = sq_json_scratch((scratch ? scratch : 1) * sizeof *pc);
    int *iv = sq_json_scratch((scratch ? scratch : 1) * sizeof *iv);
    if (!pc || !iv) {
        cJSON_free(pc);
        cJSON_free(iv);
        return sq_json_build_end(b, NULL);
    }
    cJSON *rep = cJSON_CreateObject();
    sq_json_add(rep, "format", cJSON_CreateString(SQ_RUN_REPORT_FORMAT));
    sq_json_add(rep, "version", cJSON_CreateNumber(SQ_RUN_REPORT_VERSION));
    sq_json_add(rep, "setup", setup_json(r));
    cJSON *pj = cJSON_CreateObject();
    if (r->dyn) {   /* the verified tree's size, not the room the decoder was made with */
        sq_json_add(pj, "size", cJSON_CreateNumber(r->dyn->nodes));
        sq_json_add(pj, "depth", cJSON_CreateNumber(r->depth));
        sq_json_add(pj, "expected_tokens", r->dyn->expected_tokens > 0
                                               ? cJSON_CreateNumber(r->dyn->expected_tokens)
                                               : cJSON_CreateNull());
        sq_json_add(pj, "rank_semantics", cJSON_CreateString("dynamic"));
        sq_json_add(pj, "curve", cJSON_CreateNull());
    } else {
        sq_json_add(pj, "size", cJSON_CreateNumber(r->plan->tree->n));
        sq_json_add(pj, "depth", cJSON_CreateNumber(r->depth));
        sq_json_add(pj, "expected_tokens", cJSON_CreateNumber(r->plan->expected_tokens));
        sq_json_add(pj, "rank_semantics", cJSON_CreateString(r->plan->rank_semantics));
        sq_json_add(pj, "curve", cJSON_CreateString(r->plan->acceptance.name));
    }
    sq_json_add(rep, "plan", pj);
    sq_json_add(rep, "generated_tokens", cJSON_CreateNumber(generated(r)));
    sq_json_add(rep, "steps", cJSON_CreateNumber(r->steps));
    sq_json_add(rep, "step_tokens", sq_json_int_array(r->step_tokens, (size_t)r->steps));
    for (int s = 0; s < r->steps; s++)
        iv[s] = r->step_tokens[s] - 1;
    sq_json_add(rep, "step_accepted", sq_json_int_array(iv, (size_t)r->steps));
    sq_json_add(rep, "tokens_per_step", ci_json(&pr->ci));
    /* what sequoia-run's cost model prices as the draft's first forward (docs/planning.md,
     * "Two cost models"; a plan's hardware.sequoia_run.draft_catchup_tokens) */
    cJSON *cu = cJSON_CreateObject();
    sq_json_add(cu, "tokens", cJSON_CreateNumber(r->draft_catchup_tokens));
    sq_json_add(cu, "per_step", cJSON_CreateNumber(r->steps > 0 ? r->draft_catchup_tokens /
                                                                      r->steps : 0.0));
    sq_json_add(rep, "draft_catchup", cu);
    cJSON *pred = cJSON_CreateObject();
    sq_json_add(pred, "expected_tokens",
                !r->dyn ? cJSON_CreateNumber(r->plan->expected_tokens)
                : r->dyn->expected_tokens > 0 ? cJSON_CreateNumber(r->dyn->expected_tokens)
                                              : cJSON_CreateNull());
    sq_json_add(pred, "measured", cJSON_CreateNumber(pr->ci.mean));
    /* null when nothing was predicted (an --engine run without a plan; docs/formats.md) */
    sq_json_add(pred, "within_ci95", r->dyn && !(r->dyn->expected_tokens > 0)
                                         ? cJSON_CreateNull() : cJSON_CreateBool(pr->within));
    sq_json_add(pred, "expected_tokens_with_measured_acceptance",
                r->dyn ? cJSON_CreateNull() : cJSON_CreateNumber(pr->f_measured_acc));
    sq_json_add(pred, "explanation", cJSON_CreateString(pr->explanation));
    /* speed: against the plan's prediction of sequoia-run's own step (sq_run_speed_of) */
    sq_run_speed sp;
    sq_run_speed_of(r, &sp);
    if (sp.have_plan) {
        cJSON *sj = cJSON_CreateObject();
        sq_json_add(sj, "predicted", sp.comparable ? cJSON_CreateNumber(sp.predicted)
                                                   : cJSON_CreateNull());
        sq_json_add(sj, "predicted_by", cJSON_CreateString("plan hardware." SQ_PLAN_HW_RUNTIME));
        sq_json_add(sj, "batch", cJSON_CreateNumber(sp.plan_batch));
        sq_json_add(sj, "measured_decode", cJSON_CreateNumber(sp.measured));
        sq_json_add(sj, "ratio", sp.comparable ? cJSON_CreateNumber(sp.ratio)
                                               : cJSON_CreateNull());
        if (!sp.comparable)
            sq_json_add(sj, "note", cJSON_CreateString(sp.note));
        sq_json_add(pred, "tokens_per_second", sj);
    }
    sq_json_add(rep, "prediction", pred);
    sq_json_add(rep, "acceptance_measured", acceptance_json(r, pc));
    sq_json_add(rep, "timing", timing_json(r));
    if (r->base) {
        int same = common_prefix(r->gen, r->base, n);
        cJSON *bj = cJSON_CreateObject();
        for (int i = 0; i < n; i++)
            iv[i] = r->base[i];
        sq_json_add(bj, "tokens", sq_json_int_array(iv, (size_t)n));
        sq_json_add(bj, "common_prefix_with_speculative", cJSON_CreateNumber(same));
        sq_json_add(rep, "autoregressive", bj);
    }
    if (r->val && r->val->ran)
        sq_json_add(rep, "validation", sq_validation_to_json(r->val));
    if (r->batch)
        sq_json_add(rep, "batch", batch_json(r));
    if (r->dyn)
        sq_json_add(rep, "dynamic", dynamic_json(r->dyn));
    cJSON_free(pc);
    cJSON_free(iv);
    return sq_json_build_end(b, rep);
}
