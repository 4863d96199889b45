/* The run of sequoia-run: see run.h. */
#include "runtime/run.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "libsequoia/base/cli.h"
#include "libsequoia/base/io.h"
#include "libsequoia/base/json.h"
#include "libsequoia/base/progress.h"
#include "libsequoia/base/stats.h"
#include "libsequoia/format/dynplan.h"
#include "libsequoia/format/plan.h"
#include "runtime/dyntree.h"
#include "runtime/model.h"
#include "runtime/prefill.h"
#include "runtime/report.h"
#include "runtime/tokens.h"
#include "runtime/validate.h"

/* What one run holds: B sequences, row k of every (B, n) array being sequence k's. */
typedef struct run_state {
    sq_plan          *plan;          /* the plan, or a dynamic tree's room (sq_dyntree_plan)  */
    sq_dyntree       *dyn;           /* the engine's hooks of a dynamic run, else NULL        */
    /* the dynamic tree's engine and envelope, from --engine/--envelope or from a dynamic plan
     * (--plan of a sequoia-dynamic-plan); engine NULL: a static plan */
    const char       *engine;
    sq_dyn_engine     eng;
    int               env_steps, env_topk, env_nodes;
    double            env_expected;  /* a dynamic plan's expected_tokens; 0: --engine      */
    cJSON            *env_hw;        /* a dynamic plan's "hardware" section, or NULL          */
    char              engine_name[32];
    sq_run_dynamic    dynrec;        /* its report section                                    */
    char              plan_label[512];
    sq_model         *draft, *target;
    sq_tokens        *prompt;
    int               B, n;          /* sequences, new tokens per sequence                    */
    /* the decoders, a batch of B (runtime/specdec.h); a single run is a batch of one, whose
     * member 0 is seeded as the plain decoder (sq_specdec_batch_seed_of(seed, 0) = seed) */
    sq_specdec_batch *bt;
    const int32_t   **prompts;       /* (B)                                                  */
    int              *plen;          /* (B)                                                  */
    int32_t          *gen, *base;    /* (B, n)                                               */
    int32_t         **gen_rows, **base_rows;
    int              *steps;         /* (B) steps of each sequence                           */
    int               batch_steps;
    int              *step_tokens;   /* (B, n): every sequence's steps, one after the other  */
    int               nsteps;        /* sum of steps                                         */
    sq_step_info     *infos;         /* (B, n) per-sequence step infos                       */
    double            spec_ms, base_ms;
    sq_run_acceptance acc;
    sq_validation     val;
    int               alone_ok;      /* greedy --validate with B > 1: every sequence equals its
                                        run alone (-1: not checked)                           */
    sq_run_sequence  *seqs;          /* (B) for the report                                   */
    sq_run_batch      batch;
    /* text (issue 25): the target's tokenizer (NULL: none in its directory), the decoders'
     * parameters with its end-of-sequence ids, each sequence's tokens out (n, or fewer when it
     * stopped at an end-of-sequence id), the prompt's file (--prompt or --prompt-text) */
    sq_tokenizer     *tok;
    int               shared_vocab;   /* sq_models_check_vocab's shared range */
    sq_specdec_params prm;
    int              *len;           /* (B)                                                  */
    int               stopped;       /* sequences that stopped at an end-of-sequence id      */
    long long         generated;     /* sum of len                                           */
    const char       *prompt_file;
} run_state;

static sq_specdec *member(run_state *st, int k)
{
    return sq_specdec_batch_member(st->bt, k);
}

static void state_free(run_state *st)
{
    if (st->infos)
        for (size_t i = 0; i < (size_t)st->B * (size_t)st->n; i++)
            sq_step_info_clear(&st->infos[i]);
    free(st->infos);
    free(st->step_tokens);
    free(st->prompts);
    free(st->plen);
    free(st->gen);
    free(st->base);
    free(st->gen_rows);
    free(st->base_rows);
    free(st->steps);
    free(st->seqs);
    free(st->len);
    sq_tokenizer_free(st->tok);
    sq_run_acceptance_free(&st->acc);
    sq_specdec_batch_free(st->bt);
    sq_dyntree_free(st->dyn);
    sq_tokens_free(st->prompt);
    sq_model_free(st->draft);
    sq_model_free(st->target);
    sq_plan_free(st->plan);
    cJSON_Delete(st->env_hw);
}

int sq_run_check(const sq_run_opts *o, sq_error *err)
{
    if (o->validate && o->prm.mode == SQ_MODE_GREEDY && !o->baseline)
        return sq_error_set(err, SQ_EUSAGE, "--validate in greedy mode compares with target-only "
                            "decoding: drop --no-baseline");
    if (o->engine) {
        sq_dyn_engine e;
        int rc = sq_dyn_engine_parse(o->engine, &e, err);
        if (rc)
            return rc;
        /* with --plan: a dynamic plan's engine and envelope (sq_run_resolve_plan compared them;
         * its loader checks the envelope naming the file), a static plan's refusal in load_plan */
        if (!o->plan_file && (rc = sq_dyntree_check(e, o->env_steps, o->env_topk, o->env_nodes,
                                                    err)))
            return rc;
        if (o->prm.mode == SQ_MODE_SPECINFER)
            return sq_error_set(err, SQ_EUSAGE, "--engine %s: the specinfer mode is not run on "
                                "dynamic trees (use greedy, topk or stochastic)", o->engine);
    }
    return SQ_OK;
}

#define PLAN_OR_ENGINE "--plan and --engine/--envelope: a run executes either a static plan or " \
                       "an engine's dynamic tree, give one"

/* The dynamic plan's settings into *o (sq_run_resolve_plan). */
static int adopt_dynplan(sq_run_opts *o, const sq_dynplan *p, sq_error *err)
{
    const char *f = o->plan_file;
    sq_dyn_engine e;
    int rc = sq_dyn_engine_parse(p->engine, &e, err);
    if (rc)
        return rc;
    if (o->engine && strcmp(o->engine, p->engine) != 0)
        return sq_error_set(err, SQ_EUSAGE, "%s: --engine %s conflicts with the dynamic plan's "
                            "engine %s (give the plan's or none)", f, o->engine, p->engine);
    if (o->env_steps > 0 && (o->env_steps != p->steps || o->env_topk != p->topk ||
                             o->env_nodes != p->nodes))
        return sq_error_set(err, SQ_EUSAGE, "%s: --envelope %d,%d,%d conflicts with the dynamic "
                            "plan's envelope %d,%d,%d (give the plan's or none)", f, o->env_steps,
                            o->env_topk, o->env_nodes, p->steps, p->topk, p->nodes);
    if (o->mode_given && o->prm.mode != p->mode)
        return sq_error_set(err, SQ_EUSAGE, "%s: --mode %s conflicts with the dynamic plan's mode "
                            "%s (its expected_tokens was predicted for that mode; give the plan's "
                            "or none)", f, sq_mode_name(o->prm.mode), sq_mode_name(p->mode));
    /* a greedy run ignores the temperature, as it does with a static plan */
    int greedy_given = o->mode_given && o->prm.mode == SQ_MODE_GREEDY;
    double T = o->prm.temperature;
    if (o->temperature_given && !greedy_given && fabs(T - p->temperature) > 1e-9 * (1 + T))
        return sq_error_set(err, SQ_EUSAGE, "%s: --temperature %g conflicts with the dynamic "
                            "plan's temperature %g (mode %s; give the plan's or none)", f, T,
                            p->temperature, sq_mode_name(p->mode));
    if (o->top_p_given && p->mode != SQ_MODE_GREEDY && fabs(o->prm.top_p - p->top_p) > 1e-9)
        return sq_error_set(err, SQ_EUSAGE, "%s: --top-p %g conflicts with the dynamic plan's "
                            "top_p %g (give the plan's or none)", f, o->prm.top_p, p->top_p);
    o->engine = sq_dyn_engine_name(e);
    o->env_steps = p->steps;
    o->env_topk = p->topk;
    o->env_nodes = p->nodes;
    o->prm.mode = p->mode;
    o->prm.temperature = p->mode == SQ_MODE_GREEDY ? 0.0 : p->temperature;
    if (p->mode != SQ_MODE_GREEDY || !o->top_p_given)
        o->prm.top_p = p->top_p;
    o->mode_given = o->temperature_given = o->top_p_given = 1;
    return SQ_OK;
}

/* The plan file's JSON. Standard input ('-') can be read once per process, and the plan is
 * read twice (sq_run_resolve_plan, then load_plan): its JSON is kept for the second reader. */
static int plan_json(const char *file, cJSON **root, sq_error *err)
{
    static cJSON *from_stdin;
    *root = NULL;
    if (strcmp(file, "-") != 0)
        return sq_json_load(file, root, err);
    int rc;
    if (!from_stdin && (rc = sq_json_load(file, &from_stdin, err)))
        return rc;
    if (!(*root = cJSON_Duplicate(from_stdin, 1)))
        return sq_error_oom(err, "the plan");
    return SQ_OK;
}

int sq_run_resolve_plan(sq_run_opts *o, sq_error *err)
{
    if (!o->plan_file)
        return SQ_OK;
    cJSON *root = NULL;
    sq_error ignored = {0};   /* unreadable: load_plan says why */
    if (plan_json(o->plan_file, &root, &ignored) != SQ_OK)
        return SQ_OK;
    if (!sq_dynplan_sniff(root)) {
        cJSON_Delete(root);
        return o->engine || o->env_steps > 0 ? sq_error_set(err, SQ_EUSAGE, PLAN_OR_ENGINE)
                                             : SQ_OK;
    }
    sq_dynplan *p = NULL;
    int rc = sq_dynplan_from_json(root, o->plan_file, &p, err);
    cJSON_Delete(root);
    if (!rc)
        rc = adopt_dynplan(o, p, err);
    sq_dynplan_free(p);
    return rc;
}

/* A dynamic plan's engine and envelope as the run's (--plan DYNPLAN.json; sq_run_resolve_plan
 * made the options its own), checked as --engine/--envelope are (sq_run_check), its prediction
 * and its hardware section kept for the report. */
static int take_dynplan(const sq_run_opts *o, run_state *st, const sq_dynplan *p, sq_error *err)
{
    int rc;
    if ((rc = sq_dyn_engine_parse(p->engine, &st->eng, err)))
        return rc;
    snprintf(st->engine_name, sizeof st->engine_name, "%s", p->engine);
    st->engine = st->engine_name;
    st->env_steps = p->steps;
    st->env_topk = p->topk;
    st->env_nodes = p->nodes;
    st->env_expected = p->expected_tokens;
    sq_error e = {0};
    if ((rc = sq_dyntree_check(st->eng, p->steps, p->topk, p->nodes, &e)))
        return sq_error_set(err, rc, "%s: %s", o->plan_file, e.msg);
    if (o->prm.mode == SQ_MODE_SPECINFER)
        return sq_error_set(err, SQ_EUSAGE, "%s: a dynamic plan (%s): the specinfer mode is not "
                            "run on dynamic trees (use greedy, topk or stochastic)",
                            o->plan_file, p->engine);
    if (p->hardware && !(st->env_hw = cJSON_Duplicate(p->hardware, 1)))
        return sq_error_oom(err, "the dynamic plan's hardware section");
    return SQ_OK;
}

/* The plan: a static plan, a dynamic plan (told apart by sq_dynplan_sniff), or --engine with
 * --envelope; a dynamic tree's decoders get the room of sq_dyntree_plan. */
static int load_plan(const sq_run_opts *o, run_state *st, sq_error *err)
{
    int rc;
    if (o->plan_file) {
        cJSON *root = NULL;
        if ((rc = plan_json(o->plan_file, &root, err)))
            return rc;
        if (!sq_dynplan_sniff(root)) {
            rc = o->engine || o->env_steps > 0
                     ? sq_error_set(err, SQ_EUSAGE, PLAN_OR_ENGINE)
                     : sq_plan_from_json(root, o->plan_file, &st->plan, err);
            cJSON_Delete(root);
            return rc;
        }
        sq_dynplan *p = NULL;
        rc = sq_dynplan_from_json(root, o->plan_file, &p, err);
        cJSON_Delete(root);
        if (!rc)
            rc = take_dynplan(o, st, p, err);
        sq_dynplan_free(p);
        if (rc)
            return rc;
    } else {
        if ((rc = sq_dyn_engine_parse(o->engine, &st->eng, err)))
            return rc;
        st->engine = o->engine;
        st->env_steps = o->env_steps;
        st->env_topk = o->env_topk;
        st->env_nodes = o->env_nodes;
    }
    if ((rc = sq_dyntree_plan(st->env_steps, st->env_topk, &st->plan, err)))
        return rc;
    if (!o->plan_file)
        snprintf(st->plan_label, sizeof st->plan_label, "%s envelope %d,%d,%d", st->engine,
                 st->env_steps, st->env_topk, st->env_nodes);
    else
        snprintf(st->plan_label, sizeof st->plan_label, "%.400s (%s envelope %d,%d,%d)",
                 o->plan_file, st->engine, st->env_steps, st->env_topk, st->env_nodes);
    return SQ_OK;
}

/* Loads the plan, the models and the prompts, checks that they fit together, and makes the
 * speculative decoder(s). */
static int setup(const sq_run_opts *o, run_state *st, sq_error *err)
{
    int rc;
    const char *pf = st->prompt_file = o->prompt_file ? o->prompt_file : o->prompt_text_file;
    /* the tokenizer: needed for text in or out, else only read for its end-of-sequence ids */
    const char *need = o->prompt_text_file ? "--prompt-text" : o->text_file ? "--text" : NULL;
    if ((rc = load_plan(o, st, err)))
        return rc;
    if ((rc = sq_model_load(o->draft_dir, &st->draft, err)) ||
        (rc = sq_model_load(o->target_dir, &st->target, err)) ||
        (rc = sq_tokens_tokenizer(o->prog, o->draft_dir, o->target_dir, need, &st->tok, err)) ||
        (rc = o->prompt_file ? sq_tokens_load(o->prompt_file, &st->prompt, err)
                             : sq_tokens_from_text(st->tok, pf, o->batch > 0, &st->prompt, err)))
        return rc;
    const sq_model_config *tcfg = sq_model_get_config(st->target);
    /* the pair over its shared range (the tokenizer's length, when there is one, decides what
     * rows beyond it are padding; docs/runtime.md, "Vocabularies that differ by padding") */
    int tok_len = st->tok ? sq_tokenizer_vocab_size(st->tok) : 0;
    if ((rc = sq_models_check_vocab(st->draft, st->target, o->draft_dir, o->target_dir, tok_len,
                                    &st->shared_vocab, err)))
        return rc;
    if (st->tok && (rc = sq_tokens_check_tokenizer(st->tok, o->target_dir, tcfg->vocab_size, err)))
        return rc;
    if ((rc = sq_tokens_check_vocab(st->prompt, st->shared_vocab, pf, err)))
        return rc;
    st->prm = o->prm;
    st->prm.tokenizer_len = tok_len;
    if (st->tok && !o->ignore_eos)
        st->prm.eos = sq_tokenizer_eos(st->tok, &st->prm.n_eos);
    /* a dynamic run keeps each step's tree for the report */
    st->prm.record_tree = st->engine && o->report_file;
    const char *want = sq_mode_rank_semantics(o->prm.mode);
    if (!st->engine && strcmp(st->plan->rank_semantics, want) != 0)
        fprintf(stderr,
                "%s: warning: %s: rank_semantics: the plan was made for '%s' ranks but --mode "
                "%s uses '%s'; its expected_tokens does not describe this run\n", o->prog,
                o->plan_file, st->plan->rank_semantics, sq_mode_name(o->prm.mode), want);
    const int B = st->B = o->batch > 0 ? o->batch : 1;
    const int n = st->n = o->max_new;
    size_t cells = (size_t)B * (size_t)n;
    st->prompts = malloc((size_t)B * sizeof *st->prompts);
    st->plen = malloc((size_t)B * sizeof *st->plen);
    st->gen = malloc(cells * sizeof *st->gen);
    st->base = malloc(cells * sizeof *st->base);
    st->gen_rows = malloc((size_t)B * sizeof *st->gen_rows);
    st->base_rows = malloc((size_t)B * sizeof *st->base_rows);
    st->steps = calloc((size_t)B, sizeof *st->steps);
    st->step_tokens = malloc(cells * sizeof *st->step_tokens);
    st->infos = calloc(cells, sizeof *st->infos);
    st->seqs = calloc((size_t)B, sizeof *st->seqs);
    st->len = calloc((size_t)B, sizeof *st->len);
    if (!st->prompts || !st->plen || !st->gen || !st->base || !st->gen_rows || !st->base_rows ||
        !st->steps || !st->step_tokens || !st->infos || !st->seqs || !st->len)
        return sq_error_oom(err, "run buffers");
    /* the prompts: the whole file for a single run, the file's sequences in turn for --batch;
     * a file whose sequences are not all used as such says so (issue 27 W6) */
    long long nseq = (long long)st->prompt->sequences;
    if (!o->batch && nseq > 1)
        fprintf(stderr, "%s: warning: %s: holds %lld sequences (separated by empty lines); "
                "without --batch they are decoded as one prompt, joined in order (use --batch "
                "%lld to decode them separately)\n", o->prog, o->prompt_file, nseq, nseq);
    else if (o->batch && nseq > B)
        fprintf(stderr, "%s: warning: %s: holds %lld sequences; --batch %d decodes the first %d "
                "and leaves out the other %lld\n", o->prog, o->prompt_file, nseq, B, B,
                nseq - B);
    for (int k = 0; k < B; k++) {
        int64_t s = o->batch ? k % st->prompt->sequences : 0;
        int64_t a = o->batch ? st->prompt->offsets[s] : 0;
        int64_t b = o->batch ? st->prompt->offsets[s + 1] : st->prompt->n;
        if (b - a > INT_MAX / 2)
            return sq_error_set(err, SQ_EDATA, "%s: %lld tokens is too long a prompt", pf,
                                (long long)(b - a));
        st->prompts[k] = st->prompt->ids + a;
        st->plen[k] = (int)(b - a);
        st->gen_rows[k] = st->gen + (size_t)k * n;
        st->base_rows[k] = st->base + (size_t)k * n;
    }
    const char *plan_name = st->engine ? st->plan_label : o->plan_file;
    rc = sq_specdec_batch_new(st->draft, st->target, st->plan, &st->prm, plan_name, B, &st->bt,
                              err);
    if (rc)
        return rc;
    if (st->engine) {
        if ((rc = sq_dyntree_new(st->eng, st->env_steps, st->env_topk, st->env_nodes,
                                 st->shared_vocab, &st->dyn, err)))
            return rc;
        sq_dyntree_attach_batch(st->bt, st->dyn);
    }
    int D = sq_specdec_depth(member(st, 0)), ctxlen = sq_specdec_max_context(member(st, 0));
    for (int k = 0; k < B; k++) {
        int L = st->plen[k];
        long long seq = o->batch ? k % st->prompt->sequences + 1 : 0;
        char where[48] = "";
        if (o->batch)
            snprintf(where, sizeof where, ": sequence %lld", seq);
        if (L - 1 + D > ctxlen)
            return sq_error_set(err, SQ_EDATA, "%s%s: %d tokens are longer than the context (%d "
                                "tokens, less the tree depth %d)", pf, where, L,
                                ctxlen, D);
        if (L + n - 1 + D > ctxlen && o->batch)
            return sq_error_set(err, SQ_EUSAGE, "%s%s: %d prompt tokens + %d new tokens - 1 + a "
                                "tree of depth %d = %d exceed the context of %d tokens (see "
                                "--context)", pf, where, L, n, D, L + n - 1 + D, ctxlen);
        if (L + n - 1 + D > ctxlen)
            return sq_error_set(err, SQ_EUSAGE,
                                "--max-new-tokens: %d new tokens after a %d-token prompt and a "
                                "tree of depth %d exceed the context of %d tokens (%d + %d - 1 + "
                                "%d = %d; see --context)", n, L, D, ctxlen, L, n, D,
                                L + n - 1 + D);
    }
    return sq_run_acceptance_init(&st->acc, sq_tree_max_children(st->plan->tree), D, err);
}

/* Speculative decoding and the target alone: fills gen, steps, the step infos, the pooled step
 * tokens and acceptance, the times. */
static int decode(const sq_run_opts *o, run_state *st, sq_error *err)
{
    const int B = st->B, n = st->n;
    int rc;
    sq_specdec_batch_seed(st->bt, o->prm.seed);
    double t0 = sq_now_ms();
    rc = sq_specdec_batch_generate(st->bt, st->prompts, st->plen, n, st->gen_rows, st->steps,
                                   &st->batch_steps, st->infos, err);
    if (rc)
        return rc;
    st->spec_ms = sq_now_ms() - t0;
    st->generated = 0;
    st->stopped = 0;
    for (int k = 0; k < B; k++) {
        int m = 0;
        while (m < n && st->gen_rows[k][m] != SQ_SPECDEC_NO_TOKEN)
            m++;
        st->len[k] = m;
        st->generated += m;
        for (int e = 0; m > 0 && e < st->prm.n_eos; e++)
            st->stopped += st->gen_rows[k][m - 1] == st->prm.eos[e];
    }
    st->nsteps = 0;
    for (int k = 0; k < B; k++)
        for (int s = 0; s < st->steps[k]; s++) {
            const sq_step_info *in = &st->infos[(size_t)k * n + s];
            st->step_tokens[st->nsteps++] = in->tokens;
            sq_run_acceptance_add(&st->acc, in);
        }
    st->base_ms = NAN;
    if (o->baseline) {
        t0 = sq_now_ms();
        rc = sq_specdec_batch_autoregressive(st->bt, st->prompts, st->plen, n, o->prm.seed,
                                             st->base_rows, err);
        if (rc)
            return rc;
        st->base_ms = sq_now_ms() - t0;
    }
    return SQ_OK;
}

/* --validate (run.h). */
static int validate(const sq_run_opts *o, run_state *st, sq_error *err)
{
    const int B = st->B, n = st->n;
    sq_validation *val = &st->val;
    val->ran = 1;
    int rc = sq_validate_attention(member(st, 0), st->prompts[0], st->plen[0],
                                   sq_validate_attn_tol(o->prm.backend), val, err);
    if (rc)
        return rc;
    if (o->prm.mode != SQ_MODE_GREEDY) {
        sq_progress pg;
        sq_progress_start(&pg, o->prog, "validate", B == 1 ? "seeds" : "draws", o->quiet, 0);
        rc = sq_validate_distribution_batch(st->bt, o->prm.seed, o->samples, st->prompts,
                                            st->plen, val, sq_progress_callback, &pg, err);
        sq_progress_end(&pg);
        return rc;
    }
    /* the target's greedy decoding, sequence by sequence */
    for (int k = 0; k < B; k++) {
        sq_validate_greedy(st->gen_rows[k], st->base_rows[k], n, val);
        if (!val->greedy_ok) {
            if (B > 1)
                fprintf(stderr, "%s: validate: sequence %d differs from the target's greedy "
                        "decoding at token %d: FAILED\n", o->prog, k, val->greedy_first_mismatch);
            break;
        }
    }
    if (B == 1)
        return SQ_OK;   /* a batch of one is its run alone */
    /* B separate runs: each sequence through the single-sequence decoder on its own */
    int32_t *alone = malloc((size_t)n * sizeof *alone);
    int *stp = malloc((size_t)n * sizeof *stp), steps;
    if (!alone || !stp) {
        free(alone);
        free(stp);
        return sq_error_oom(err, "validation");
    }
    st->alone_ok = 1;
    for (int k = 0; k < B && st->alone_ok && !rc; k++) {
        sq_specdec *sd = member(st, k);
        sq_specdec_seed(sd, sq_specdec_batch_seed_of(o->prm.seed, k));
        if ((rc = sq_specdec_generate(sd, st->prompts[k], st->plen[k], n, alone, stp, &steps,
                                      NULL, err)))
            break;
        for (int i = 0; i < n; i++)
            if (st->gen_rows[k][i] != alone[i]) {
                st->alone_ok = 0;
                fprintf(stderr, "%s: validate: sequence %d differs from its run alone at token "
                        "%d: FAILED\n", o->prog, k, i);
                break;
            }
    }
    free(alone);
    free(stp);
    return rc;
}

/* The record of report.h: pooled steps and acceptance, the times of the batch steps (those of
 * the sequence that took the most steps, which was in every one), the batch section. */
static int record(const sq_run_opts *o, run_state *st, sq_run_record *r, sq_error *err)
{
    const int B = st->B, n = st->n;
    int kmax = 0;
    for (int k = 1; k < B; k++)
        if (st->steps[k] > st->steps[kmax])
            kmax = k;
    const sq_step_info *in = st->infos + (size_t)kmax * n;
    r->step_infos = in;
    r->n_step_infos = st->steps[kmax];
    for (int s = 0; s < st->steps[kmax]; s++) {
        r->draft_ms += in[s].draft_ms;
        r->target_ms += in[s].target_ms;
        r->verify_ms += in[s].verify_ms;
        r->draft_forward_ms += in[s].draft_forward_ms;
        r->target_forward_ms += in[s].target_forward_ms;
        r->commit_ms += in[s].commit_ms;
        r->steps_ms += in[s].step_ms;
    }
    int rc = sq_run_decode_timing(in, st->steps[kmax], &st->batch.decode, err);
    if (rc)
        return rc;
    for (int k = 0; k < B; k++)
        st->seqs[k] = (sq_run_sequence){st->plen[k], st->steps[k], st->gen_rows[k],
                                        o->baseline ? st->base_rows[k] : NULL};
    st->batch.size = B;
    st->batch.batch_steps = st->batch_steps;
    st->batch.seqs = st->seqs;
    st->batch.greedy_equals_separate_runs = st->alone_ok;
    const sq_model_config *tcfg = sq_model_get_config(st->target);
    r->draft = o->draft_dir;
    r->target = o->target_dir;
    r->plan_file = st->engine ? st->plan_label : o->plan_file;
    if (st->engine) {
        st->dynrec = (sq_run_dynamic){st->engine, st->env_steps, st->env_topk, st->env_nodes, B,
                                      n, st->steps, st->infos, st->env_expected,
                                      st->env_hw};
        r->dyn = &st->dynrec;
    }
    r->prompt_file = st->prompt_file;
    r->mode = sq_mode_name(o->prm.mode);
    r->backend = o->prm.backend == SQ_BACKEND_CPU ? "cpu" : o->prm.offload ? "cuda-offload"
                                                                           : "cuda";
    /* AUTO: on the CPU the target's own dtype (sq_weight_dtype, runtime/model.h) */
    r->dtype = o->prm.dtype != SQ_DTYPE_AUTO ? sq_weight_dtype_name(o->prm.dtype)
               : o->prm.backend == SQ_BACKEND_CPU ? sq_weight_dtype_name(sq_model_dtype(st->target))
                                                  : "f16";
    r->prompt_tokens = st->plen[0];
    r->max_new_tokens = n;
    r->context = sq_specdec_max_context(member(st, 0));
    r->vocab_size = st->shared_vocab;
    if (sq_model_get_config(st->draft)->vocab_size != tcfg->vocab_size) {
        r->draft_vocab_size = sq_model_get_config(st->draft)->vocab_size;
        r->target_vocab_size = tcfg->vocab_size;
    }
    r->temperature = o->prm.mode == SQ_MODE_GREEDY ? 0.0 : o->prm.temperature;
    r->top_p = o->prm.top_p;
    r->seed = o->prm.seed;
    r->plan = st->plan;
    r->depth = sq_specdec_depth(member(st, 0));
    r->steps = st->nsteps;
    for (int k = 0; k < B; k++)   /* every sequence's steps, pooled like steps */
        for (int s = 0; s < st->steps[k]; s++)
            r->draft_catchup_tokens += st->infos[(size_t)k * n + s].draft_catchup;
    r->step_tokens = st->step_tokens;
    r->acc = &st->acc;
    r->spec_ms = st->spec_ms;
    r->gen = st->gen;
    r->base = o->baseline ? st->base : NULL;
    r->base_ms = st->base_ms;
    r->generated_tokens = (double)st->generated;
    r->val = &st->val;
    r->batch = &st->batch;
    return SQ_OK;
}

/* The summary on stderr; SQ_EFAIL when a check failed. */
static int summary(const sq_run_opts *o, const run_state *st, const sq_run_record *r,
                   const sq_run_prediction *pr, sq_error *err)
{
    const char *prog = o->prog;
    const sq_validation *val = r->val;
    const int B = st->B, n = st->n;
    const double toks = (double)st->generated;   /* B * n, less what stops at EOS left out */
    /* --batch: the rates over the batch; otherwise tokens/step against the plan and ms/token */
    if (o->batch) {
        char expects[128];
        if (r->dyn)
            snprintf(expects, sizeof expects, "%s", r->plan_file);
        else
            snprintf(expects, sizeof expects, "plan expects %.3f", r->plan->expected_tokens);
        fprintf(stderr, "%s: batch %d: %s%d tokens per sequence in %d batch steps, %.3f "
                "tokens/step (%s); %.1f tokens/s over the batch, %.1f per "
                "sequence\n", prog, B, st->stopped ? "up to " : "", n, st->batch_steps,
                toks / (double)r->steps, expects, toks / (r->spec_ms / 1e3),
                toks / B / (r->spec_ms / 1e3));
        if (r->base)
            fprintf(stderr, "%s: batch %d: target alone %.1f tokens/s over the batch: speedup "
                    "%.2fx\n", prog, B, toks / (r->base_ms / 1e3), r->base_ms / r->spec_ms);
    } else {
        char line[512];
        sq_run_summary_line(r, pr, line, sizeof line);
        fprintf(stderr, "%s: %s\n", prog, line);
    }
    if (st->stopped)
        fprintf(stderr, "%s: %d of %d sequence%s stopped at an end-of-sequence token: %.0f "
                "tokens in all (a cut step counts all its tokens in tokens/step)\n", prog,
                st->stopped, B, B == 1 ? "" : "s", toks);
    if (!o->batch && r->base) {
        fprintf(stderr, "%s: %.3f ms/token speculative, %.3f ms/token target alone: speedup "
                "%.2fx\n", prog, r->spec_ms / toks, r->base_ms / toks, r->base_ms / r->spec_ms);
    }
    sq_run_speed sp;   /* the plan's prediction of sequoia-run's speed (report.h) */
    sq_run_speed_of(r, &sp);
    if (sp.comparable)
        fprintf(stderr, "%s: speed: %.1f tokens/s over the decoding steps, %.1f predicted by the "
                "plan's hardware." SQ_PLAN_HW_RUNTIME " (batch %d): measured/predicted %.3f\n",
                prog, sp.measured, sp.predicted, sp.plan_batch, sp.ratio);
    else if (sp.have_plan)
        fprintf(stderr, "%s: speed: %.1f tokens/s over the decoding steps; %s\n", prog,
                sp.measured, sp.note);
    if (!val->ran)
        return SQ_OK;
    fprintf(stderr, "%s: validate: tree attention%s max |diff| %.3g (<= %g): %s\n", prog,
            B > 1 ? " (sequence 0 alone)" : "", val->attn_max_diff, val->attn_tol,
            val->attn_ok ? "ok" : "FAILED");
    if (val->greedy_checked && val->greedy_ok && st->alone_ok == 1)
        fprintf(stderr, "%s: validate: every sequence's greedy output identical to the target's "
                "and to its own run alone: ok\n", prog);
    else if (val->greedy_checked && val->greedy_ok && st->alone_ok < 0)
        fprintf(stderr, "%s: validate: greedy output identical to the target's: ok\n", prog);
    else if (val->greedy_checked && B == 1)
        fprintf(stderr, "%s: validate: greedy output differs from the target's at token %d: "
                "FAILED\n", prog, val->greedy_first_mismatch);
    if (val->dist_checked && B == 1)
        fprintf(stderr, "%s: validate: %d seeds, first token chi2 %.2f df %d p = %.4g; "
                "first two tokens chi2 %.2f df %d p = %.4g (fail below %g): %s\n", prog,
                val->seeds, val->first.stat, val->first.df, val->first.p_value, val->pair.stat,
                val->pair.df, val->pair.p_value, SQ_VALIDATE_P_MIN,
                val->dist_ok ? "ok" : "FAILED");
    else if (val->dist_checked)
        fprintf(stderr, "%s: validate: %d draws in batches of %d over %d prompt%s; first token "
                "chi2 %.2f df %d p = %.4g; first two tokens chi2 %.2f df %d p = %.4g (%s; fail "
                "below %g): %s\n", prog, val->seeds, B, val->dist_groups,
                val->dist_groups == 1 ? "" : "s", val->first.stat, val->first.df,
                val->first.p_value, val->pair.stat, val->pair.df, val->pair.p_value,
                val->dist_groups == 1 ? "pooled" : "the worst prompt's", SQ_VALIDATE_P_MIN,
                val->dist_ok ? "ok" : "FAILED");
    return sq_validation_pass(val) && st->alone_ok != 0
               ? SQ_OK : sq_error_set(err, SQ_EFAIL, "validation failed");
}

/* A JSON string of len bytes (NULs and control characters escaped; other bytes as they are). */
static void json_string(FILE *fp, const char *s, size_t len)
{
    fputc('"', fp);
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\')
            fprintf(fp, "\\%c", c);
        else if (c == '\n')
            fputs("\\n", fp);
        else if (c == '\t')
            fputs("\\t", fp);
        else if (c == '\r')
            fputs("\\r", fp);
        else if (c < 0x20 || c == 0x7f)
            fprintf(fp, "\\u%04x", c);
        else
            fputc(c, fp);
    }
    fputc('"', fp);
}

/* --text: every sequence's tokens out as text (run.h: the layout). */
static int write_text(const sq_run_opts *o, const run_state *st, FILE *fp, sq_error *err)
{
    for (int k = 0; k < st->B; k++) {
        char *text;
        size_t len;
        int rc = sq_tokenizer_decode(st->tok, st->gen_rows[k], (size_t)st->len[k], 1, &text,
                                     &len, err);
        if (rc)
            return rc;
        if (o->batch) {
            fprintf(fp, "{\"sequence\": %d, \"text\": ", k);
            json_string(fp, text, len);
            fputs("}\n", fp);
        } else {
            fwrite(text, 1, len, fp);
        }
        free(text);
    }
    return SQ_OK;
}

int sq_run(const sq_run_opts *opts)
{
    sq_error err = {0};
    int rc;
    /* a dynamic plan's settings are the run's (the caller may not have resolved them) */
    sq_run_opts resolved = *opts;
    const sq_run_opts *o = &resolved;
    enum { TOKENS, REPORT, TEXT, N_OUT };
    sq_out *out[N_OUT] = {NULL, NULL, NULL};
    run_state st = {0};
    st.alone_ok = -1;
    sq_run_record rec = {0};
    sq_run_prediction pred;
    cJSON *rep = NULL;
    /* every output first, so that an unwritable path fails before any work */
    if (!(rc = sq_run_resolve_plan(&resolved, &err)) && !(rc = sq_run_check(o, &err)) &&
        !(rc = sq_out_open(&out[TOKENS], o->out_file ? o->out_file : "-", &err)) &&
        !(o->report_file && (rc = sq_out_open(&out[REPORT], o->report_file, &err))) &&
        !(o->text_file && (rc = sq_out_open(&out[TEXT], o->text_file, &err))) &&
        !(rc = setup(o, &st, &err)) && !(rc = decode(o, &st, &err)) &&
        !(o->validate && (rc = validate(o, &st, &err))) &&
        !(rc = record(o, &st, &rec, &err)) && !(rc = sq_run_predict(&rec, &pred, &err))) {
        FILE *fp = sq_out_stream(out[TOKENS]);
        for (int k = 0; k < st.B; k++) {
            for (int i = 0; i < st.len[k]; i++)
                fprintf(fp, i ? " %d" : "%d", (int)st.gen_rows[k][i]);
            fputc('\n', fp);
        }
        if (out[REPORT] && !(rep = sq_run_report_json(&rec, &pred)))
            rc = sq_error_oom(&err, "report");
        else if (out[REPORT])
            sq_json_print(sq_out_stream(out[REPORT]), rep);
        if (!rc && out[TEXT])
            rc = write_text(o, &st, sq_out_stream(out[TEXT]), &err);
        /* all written out before any is renamed: a full disk leaves them as they were */
        if (!rc && !(rc = sq_cli_commit(out, N_OUT, &err)))
            rc = summary(o, &st, &rec, &pred, &err);
    }
    for (int i = 0; i < N_OUT; i++)
        sq_out_abort(out[i]);
    cJSON_Delete(rep);
    state_free(&st);
    if (rc)
        fprintf(stderr, "%s: %s\n", o->prog, err.msg);
    return rc;
}
