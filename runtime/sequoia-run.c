/* sequoia-run: executes a tree plan with a draft and a target model (docs/design.md §8), measures
 * and validates it, and dumps draft/target corpora (docs/design.md §7.2). */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "libsequoia/format/corpus.h"
#include "libsequoia/base/cli.h"
#include "libsequoia/base/io.h"
#include "libsequoia/base/progress.h"
#include "libsequoia/base/json.h"
#include "libsequoia/format/plan.h"
#include "libsequoia/base/sha256.h"
#include "runtime/batchrun.h"
#include "runtime/model.h"
#include "runtime/report.h"
#include "runtime/specdec.h"
#include "libsequoia/base/stats.h"
#include "runtime/tokens.h"
#include "runtime/validate.h"
#include "libsequoia/verify/verify.h"
#include "runtime/cpu_matmul.h"

#define PROG "sequoia-run"
#define CUDA_OPTIONS_HELP                                                                        \
    "      --backend NAME       cpu (default) or cuda (both models on the GPU)\n"                 \
    "      --dtype NAME         CUDA weights: f16 (default) or bf16; the CPU computes in f32\n"   \
    "      --offload            CUDA: weights stay in pinned host memory and are streamed to\n"   \
    "                           the GPU layer by layer (models larger than the GPU's memory)\n"

static void usage(FILE *fp)
{
    fprintf(fp,
        "Usage: " PROG " --draft DIR --target DIR --plan PLAN.json --prompt FILE\n"
        "                   [--max-new-tokens N] [--mode stochastic|specinfer|greedy|topk]\n"
        "                   [--temperature T] [--top-p P] [--seed S] [-o OUT.txt]\n"
        "                   [--report REPORT.json] [--validate] [--validate-samples N]\n"
        "                   [--context L] [--threads N] [--no-baseline] [-q]\n"
        "                   [--backend cpu|cuda] [--dtype f16|bf16] [--offload] [--batch B]\n"
        "       " PROG " dump --draft DIR --target DIR --tokens FILE -o CORPUS.h5\n"
        "                   [--top-k K] [--context L] [--half] [--compression N] [--threads N]\n"
        "                   [--resume] [-q]\n"
        "\n"
        "Runs tree speculative decoding (arXiv 2402.12374) exactly as the plan says: per step the\n"
        "draft grows the tree level by level (one draft forward per level), the target verifies\n"
        "every node in one forward with a tree attention mask, the verifier of --mode walks from\n"
        "the root, and both KV caches keep only the accepted path. Models are Hugging Face\n"
        "Llama directories (config.json + safetensors); the runtime works on token ids.\n"
        "\n"
        "Options:\n"
        "      --draft DIR          draft model directory\n"
        "      --target DIR         target model directory\n"
        "  -p, --plan FILE          tree plan (sequoia-plan v1)\n"
        "      --prompt FILE        token ids: whitespace-separated integers, or HDF5 /tokens\n"
        "  -n, --max-new-tokens N   tokens to generate (default 128)\n"
        "  -m, --mode MODE          verifier: stochastic (Sequoia, default), specinfer, greedy, topk\n"
        "  -t, --temperature T      sampling temperature (default 1; greedy ignores it)\n"
        "      --top-p P            nucleus truncation in (0, 1] (default 1: none)\n"
        "  -s, --seed S             random seed (default 0)\n"
        "  -o, --output FILE        generated token ids (one line), written atomically; default stdout\n"
        "  -r, --report FILE        JSON report: per-step counts, tokens/step with a 95%% CI vs the\n"
        "                           plan's expected_tokens, measured acceptance per rank and depth,\n"
        "                           wall time per token, target-only decoding and the speedup\n"
        "      --validate           also check: tree attention (logits of every node equal a plain\n"
        "                           forward over its root path, for %d steps), greedy output equal\n"
        "                           to target-only greedy decoding, and for sampled modes the first\n"
        "                           two tokens' distribution over many seeds against the target's\n"
        "                           (chi-square, fails below p = %g). Exit 1 if a check fails\n"
        "      --validate-samples N seeds for the distribution test (default 2000)\n"
        "      --context L          KV cache length (default: the models' max_position_embeddings)\n"
        "      --threads N          CPU threads (default: all cores)\n"
        "%s"
        "      --no-baseline        skip target-only decoding (no measured speedup)\n",
        SQ_VALIDATE_ATTN_STEPS, SQ_VALIDATE_P_MIN, CUDA_OPTIONS_HELP);
    fprintf(fp,
        "      --batch B            decode B prompts together (the prompt file's sequences,\n"
        "                           separated by empty lines, in turn) with the same plan: one\n"
        "                           batched forward per draft level and for the targets' trees;\n"
        "                           -o gets one line per sequence, the summary and --report give\n"
        "                           tokens/s over the batch and per sequence against the batch\n"
        "                           decoded by the target alone. --validate: greedy output of\n"
        "                           every sequence equal to the target's and to its own run\n"
        "                           alone; for sampled modes the chi-square test with its draws\n"
        "                           made inside the batch (--validate-samples draws in all)\n"
        "  -q, --quiet              no progress line (it is drawn only on a terminal)\n"
        "  -h, --help               this text\n"
        "      --version            the version\n"
        "\n"
        "dump: teacher-forced forward of both models over a token file (an empty line or HDF5\n"
        "/seq_offsets separates sequences, which are cut into windows of --context tokens), written\n"
        "as a sequoia-corpus v1 HDF5 file: per position the target's and the draft's logits and\n"
        "the actual next token. --top-k K stores only the K largest logits per row (sparse);\n"
        "--half stores dense logits as float16. --compression N is the deflate level, 0-9 (default\n"
        "1; 0 writes no filter, which sequoia-accept reads 1.7-1.8x as fast). --resume writes\n"
        "CORPUS.h5.partial, which an interruption (SIGINT, SIGTERM, a crash) leaves behind as of\n"
        "its last complete chunk of rows; the same command with --resume goes on from there\n"
        "without redoing that work, and the finished file is renamed to CORPUS.h5 (the same\n"
        "corpus as an uninterrupted dump).\n"
        "\n"
        "Examples:\n"
        "  " PROG " --draft d/ --target t/ --plan plan.json --prompt p.txt -n 256 --mode greedy\n"
        "  " PROG " --draft d/ --target t/ --plan plan.json --prompt p.txt -m stochastic -t 0.6 \\\n"
        "              --seed 7 -o out.txt --report report.json --validate\n"
        "  " PROG " dump --draft d/ --target t/ --tokens text.txt -o corpus.h5 --top-k 64\n"
        "\n"
        "Exit status: 0 success, 1 a --validate check failed, 64 usage error, 65 invalid input\n"
        "data (plan, model, prompt), 66 input file missing, 70 internal error, 73 cannot create\n"
        "output, 74 I/O error.\n");
}

static void write_tokens(FILE *fp, const int32_t *t, int n)
{
    for (int i = 0; i < n; i++)
        fprintf(fp, i ? " %d" : "%d", (int)t[i]);
    fputc('\n', fp);
}

typedef struct run_opts {
    const char *draft_dir, *target_dir, *plan_file, *prompt_file, *out_file, *report_file;
    int         max_new, validate, samples, context, threads, baseline, quiet;
    sq_specdec_params prm;
    const char *backend, *dtype;
    int         offload, temp_given, batch;
} run_opts;

/* What one run holds. */
typedef struct run_state {
    sq_plan *plan;
    sq_model *draft, *target;
    sq_tokens *prompt;
    sq_specdec *sd;
    int32_t *gen, *base;
    int *step_tokens, steps, L;
    sq_step_info *infos;
    sq_run_acceptance acc;
    sq_validation val;
} run_state;

static void run_state_free(run_state *st, int max_new)
{
    if (st->infos)
        for (int s = 0; s <= max_new; s++)
            sq_step_info_clear(&st->infos[s]);
    free(st->infos);
    free(st->step_tokens);
    free(st->gen);
    free(st->base);
    sq_run_acceptance_free(&st->acc);
    sq_specdec_free(st->sd);
    sq_tokens_free(st->prompt);
    sq_model_free(st->draft);
    sq_model_free(st->target);
    sq_plan_free(st->plan);
}

/* Loads the plan, the models and the prompt, checks that they fit together, and makes the
 * speculative decoder. */
static int run_setup(run_opts *o, run_state *st, sq_error *err)
{
    int rc;
    if ((rc = sq_plan_load(o->plan_file, &st->plan, err)) ||
        (rc = sq_model_load(o->draft_dir, &st->draft, err)) ||
        (rc = sq_model_load(o->target_dir, &st->target, err)) ||
        (rc = sq_tokens_load(o->prompt_file, &st->prompt, err)))
        return rc;
    const sq_model_config *dcfg = sq_model_get_config(st->draft);
    const sq_model_config *tcfg = sq_model_get_config(st->target);
    if (dcfg->vocab_size != tcfg->vocab_size)
        return sq_error_set(err, SQ_EDATA,
                            "%s/config.json: vocab_size: %d differs from the target's %d (%s)",
                            o->draft_dir, dcfg->vocab_size, tcfg->vocab_size, o->target_dir);
    if ((rc = sq_tokens_check_vocab(st->prompt, tcfg->vocab_size, o->prompt_file, err)))
        return rc;
    if (st->prompt->n > INT_MAX / 2)
        return sq_error_set(err, SQ_EDATA, "%s: %lld tokens is too long a prompt", o->prompt_file,
                            (long long)st->prompt->n);
    int L = st->L = (int)st->prompt->n;
    const char *want = sq_mode_rank_semantics(o->prm.mode);
    if (strcmp(st->plan->rank_semantics, want) != 0)
        fprintf(stderr,
                PROG ": warning: %s: rank_semantics: the plan was made for '%s' ranks but --mode "
                "%s uses '%s'; its expected_tokens does not describe this run\n",
                o->plan_file, st->plan->rank_semantics, sq_mode_name(o->prm.mode), want);
    o->prm.max_context = o->context;
    o->prm.threads = o->threads;
    if ((rc = sq_specdec_new(st->draft, st->target, st->plan, &o->prm, o->plan_file, &st->sd,
                             err)))
        return rc;
    int D = sq_specdec_depth(st->sd), ctxlen = sq_specdec_max_context(st->sd);
    if (L - 1 + D > ctxlen)
        return sq_error_set(err, SQ_EDATA, "%s: %d tokens are longer than the context (%d tokens, "
                            "less the tree depth %d)", o->prompt_file, L, ctxlen, D);
    if (L + o->max_new - 1 + D > ctxlen)
        return sq_error_set(err, SQ_EUSAGE,
                            "--max-new-tokens: %d new tokens after a %d-token prompt and a tree of "
                            "depth %d exceed the context of %d tokens (see --context)",
                            o->max_new, L, D, ctxlen);
    size_t n = (size_t)o->max_new + 1;
    st->gen = malloc(n * sizeof *st->gen);
    st->base = malloc(n * sizeof *st->base);
    st->step_tokens = malloc(n * sizeof *st->step_tokens);
    st->infos = calloc(n, sizeof *st->infos);
    if (!st->gen || !st->base || !st->step_tokens || !st->infos)
        return sq_error_oom(err, "run buffers");
    return sq_run_acceptance_init(&st->acc, sq_tree_max_children(st->plan->tree), D, err);
}

/* Speculative decoding, the target alone, the checks: fills the record r. */
static int run_decode(const run_opts *o, run_state *st, sq_run_record *r, sq_error *err)
{
    int rc;
    sq_specdec_seed(st->sd, o->prm.seed);
    double t0 = sq_now_ms();
    if ((rc = sq_specdec_generate(st->sd, st->prompt->ids, st->L, o->max_new, st->gen,
                                  st->step_tokens, &st->steps, st->infos, err)))
        return rc;
    r->spec_ms = sq_now_ms() - t0;
    for (int s = 0; s < st->steps; s++) {
        sq_run_acceptance_add(&st->acc, &st->infos[s]);
        r->draft_ms += st->infos[s].draft_ms;
        r->target_ms += st->infos[s].target_ms;
        r->verify_ms += st->infos[s].verify_ms;
        r->draft_forward_ms += st->infos[s].draft_forward_ms;
        r->target_forward_ms += st->infos[s].target_forward_ms;
        r->commit_ms += st->infos[s].commit_ms;
        r->steps_ms += st->infos[s].step_ms;
    }
    r->base_ms = NAN;
    if (o->baseline) {
        t0 = sq_now_ms();
        if ((rc = sq_specdec_autoregressive(st->sd, st->prompt->ids, st->L, o->max_new,
                                            o->prm.seed, st->base, err)))
            return rc;
        r->base_ms = sq_now_ms() - t0;
    }
    if (o->validate) {
        st->val.ran = 1;
        if ((rc = sq_validate_attention(st->sd, st->prompt->ids, st->L,
                                        sq_validate_attn_tol(o->prm.backend), &st->val, err)))
            return rc;
        if (o->prm.mode == SQ_MODE_GREEDY)
            sq_validate_greedy(st->gen, st->base, o->max_new, &st->val);
        else {
            sq_progress pg;
            sq_progress_start(&pg, PROG, "validate", "seeds", o->quiet, 0);
            rc = sq_validate_distribution(st->sd, o->prm.seed, o->samples, st->prompt->ids,
                                          st->L, &st->val, sq_progress_callback, &pg, err);
            sq_progress_end(&pg);
            if (rc)
                return rc;
        }
    }
    const sq_model_config *tcfg = sq_model_get_config(st->target);
    r->draft = o->draft_dir;
    r->target = o->target_dir;
    r->plan_file = o->plan_file;
    r->prompt_file = o->prompt_file;
    r->mode = sq_mode_name(o->prm.mode);
    r->backend = o->prm.backend == SQ_BACKEND_CPU ? "cpu" : o->prm.offload ? "cuda-offload"
                                                                           : "cuda";
    r->dtype = o->prm.dtype == SQ_DTYPE_AUTO ? (o->prm.backend == SQ_BACKEND_CPU ? "f32" : "f16")
                                             : sq_weight_dtype_name(o->prm.dtype);
    r->prompt_tokens = st->L;
    r->max_new_tokens = o->max_new;
    r->context = sq_specdec_max_context(st->sd);
    r->vocab_size = tcfg->vocab_size;
    r->temperature = o->prm.mode == SQ_MODE_GREEDY ? 0.0 : o->prm.temperature;
    r->top_p = o->prm.top_p;
    r->seed = o->prm.seed;
    r->plan = st->plan;
    r->depth = sq_specdec_depth(st->sd);
    r->steps = st->steps;
    r->step_tokens = st->step_tokens;
    r->acc = &st->acc;
    r->gen = st->gen;
    r->base = o->baseline ? st->base : NULL;
    r->val = &st->val;
    return SQ_OK;
}

/* The summary on stderr; SQ_EFAIL when a check failed. */
static int run_summary(const sq_run_record *r, const sq_run_prediction *pr, sq_error *err)
{
    const sq_validation *val = r->val;
    int n = r->max_new_tokens;
    fprintf(stderr, PROG ": %d tokens in %d steps: %.3f tokens/step (95%% CI %.3f .. %.3f), plan "
            "expects %.3f%s\n", n, r->steps, pr->ci.mean, pr->ci.lo, pr->ci.hi,
            r->plan->expected_tokens, pr->within ? "" : pr->have_ci
            ? " (outside the CI: see the report's prediction)" : " (too few steps for a CI)");
    if (r->base)
        fprintf(stderr, PROG ": %.3f ms/token speculative, %.3f ms/token target alone: speedup "
                "%.2fx\n", r->spec_ms / n, r->base_ms / n, r->base_ms / r->spec_ms);
    if (!val->ran)
        return SQ_OK;
    fprintf(stderr, PROG ": validate: tree attention max |diff| %.3g (<= %g): %s\n",
            val->attn_max_diff, val->attn_tol, val->attn_ok ? "ok" : "FAILED");
    if (val->greedy_checked && val->greedy_ok)
        fprintf(stderr, PROG ": validate: greedy output identical to the target's: ok\n");
    else if (val->greedy_checked)
        fprintf(stderr, PROG ": validate: greedy output differs from the target's at token %d: "
                "FAILED\n", val->greedy_first_mismatch);
    if (val->dist_checked)
        fprintf(stderr, PROG ": validate: %d seeds, first token chi2 %.2f df %d p = %.4g; "
                "first two tokens chi2 %.2f df %d p = %.4g (fail below %g): %s\n",
                val->seeds, val->first.stat, val->first.df, val->first.p_value, val->pair.stat,
                val->pair.df, val->pair.p_value, SQ_VALIDATE_P_MIN,
                val->dist_ok ? "ok" : "FAILED");
    return sq_validation_pass(val) ? SQ_OK : sq_error_set(err, SQ_EFAIL, "validation failed");
}

static int run_main(run_opts *o)
{
    sq_error err = {0};
    int rc;
    enum { TOKENS, REPORT, N_OUT };
    sq_out *out[N_OUT] = {NULL, NULL};
    run_state st = {0};
    sq_run_record rec = {0};
    sq_run_prediction pred;
    cJSON *rep = NULL;
    /* every output first, so that an unwritable path fails before any work */
    if (!(rc = sq_out_open(&out[TOKENS], o->out_file ? o->out_file : "-", &err)) &&
        !(o->report_file && (rc = sq_out_open(&out[REPORT], o->report_file, &err))) &&
        !(rc = run_setup(o, &st, &err)) && !(rc = run_decode(o, &st, &rec, &err)) &&
        !(rc = sq_run_predict(&rec, &pred, &err))) {
        write_tokens(sq_out_stream(out[TOKENS]), st.gen, o->max_new);
        if (out[REPORT] && !(rep = sq_run_report_json(&rec, &pred)))
            rc = sq_error_oom(&err, "report");
        else if (out[REPORT])
            sq_json_print(sq_out_stream(out[REPORT]), rep);
        /* both written out before either is renamed: a full disk leaves both as they were */
        if (!rc && !(rc = sq_cli_commit(out, N_OUT, &err)))
            rc = run_summary(&rec, &pred, &err);
    }
    for (int i = 0; i < N_OUT; i++)
        sq_out_abort(out[i]);
    cJSON_Delete(rep);
    run_state_free(&st, o->max_new);
    if (rc)
        fprintf(stderr, PROG ": %s\n", err.msg);
    return rc;
}

/* ---- corpus dump --------------------------------------------------------------------------- */

typedef struct dump_opts {
    const char *draft_dir, *target_dir, *tokens_file, *out_file;
    int         topk, context, half, threads, resume, quiet;
    int         compression;   /* deflate level 0-9 */
} dump_opts;

#define DUMP_CHUNK 128

/* --resume: SIGINT/SIGTERM only set this flag; the dump checkpoints OUT.partial after the chunk
 * in progress and then dies of the signal. */
static volatile sig_atomic_t dump_stop_signal;

static void dump_on_signal(int sig)
{
    dump_stop_signal = sig;
}

/* What a partial dump must have been started with to be resumed: the token ids, the models'
 * directories and shapes, and every option that changes the rows. */
static void dump_fingerprint(const dump_opts *o, const sq_tokens *toks, int V, int ctxlen,
                             char *out, size_t cap)
{
    sq_sha256 h;
    uint8_t dg[SQ_SHA256_BYTES];
    char hex[SQ_SHA256_HEX];
    sq_sha256_init(&h);
    sq_sha256_update(&h, toks->ids, (size_t)toks->n * sizeof *toks->ids);
    sq_sha256_update(&h, toks->offsets, (size_t)(toks->sequences + 1) * sizeof *toks->offsets);
    sq_sha256_final(&h, dg);
    sq_sha256_hex(dg, hex);
    int n = snprintf(out, cap, "tokens sha256 %s; draft %.1000s; target %.1000s; V %d; top-k %d; "
                     "half %d; context %d", hex, o->draft_dir, o->target_dir, V, o->topk, o->half,
                     ctxlen);
    /* the default level adds nothing, so that partial files of earlier versions still resume */
    if (o->compression != 1 && n > 0 && (size_t)n < cap)
        snprintf(out + n, cap - (size_t)n, "; compression %d", o->compression);
}

static int dump_main(const dump_opts *o)
{
    sq_error err = {0};
    int rc;
    sq_model *draft = NULL, *target = NULL;
    sq_tokens *toks = NULL;
    sq_context *dctx = NULL, *tctx = NULL;
    sq_corpus_writer *w = NULL;
    float *tl = NULL, *dl = NULL;
    uint8_t *mask = NULL;
    int32_t *pos = NULL, *keep = NULL, *next = NULL;
    int64_t rows = 0, done_rows = 0;
    char *partial = NULL;

    if ((rc = sq_model_load(o->draft_dir, &draft, &err)) ||
        (rc = sq_model_load(o->target_dir, &target, &err)) ||
        (rc = sq_tokens_load(o->tokens_file, &toks, &err)))
        goto done;
    const sq_model_config *dc = sq_model_get_config(draft), *tc = sq_model_get_config(target);
    if (dc->vocab_size != tc->vocab_size) {
        rc = sq_error_set(&err, SQ_EDATA,
                          "%s/config.json: vocab_size: %d differs from the target's %d (%s)",
                          o->draft_dir, dc->vocab_size, tc->vocab_size, o->target_dir);
        goto done;
    }
    int V = tc->vocab_size;
    if ((rc = sq_tokens_check_vocab(toks, V, o->tokens_file, &err)))
        goto done;
    if (o->topk > V) {
        rc = sq_error_set(&err, SQ_EUSAGE, "--top-k: %d exceeds the vocabulary (%d tokens)",
                          o->topk, V);
        goto done;
    }
    int maxpos = dc->max_position < tc->max_position ? dc->max_position : tc->max_position;
    int ctxlen = o->context > 0 ? o->context : (maxpos < 2048 ? maxpos : 2048);
    if (ctxlen > maxpos || ctxlen < 2) {
        rc = sq_error_set(&err, SQ_EUSAGE,
                          "--context: %d must be in [2, %d] (max_position_embeddings)", ctxlen,
                          maxpos);
        goto done;
    }
    sq_context_params cp = sq_context_default_params();
    cp.max_context = ctxlen;
    cp.max_pending = DUMP_CHUNK;
    cp.threads = o->threads;
    if ((rc = sq_context_new(draft, &cp, &dctx, &err)) ||
        (rc = sq_context_new(target, &cp, &tctx, &err)))
        goto done;
    tl = malloc((size_t)DUMP_CHUNK * V * sizeof *tl);
    dl = malloc((size_t)DUMP_CHUNK * V * sizeof *dl);
    mask = malloc((size_t)DUMP_CHUNK * DUMP_CHUNK);
    pos = malloc(DUMP_CHUNK * sizeof *pos);
    keep = malloc(DUMP_CHUNK * sizeof *keep);
    next = malloc(DUMP_CHUNK * sizeof *next);
    if (!tl || !dl || !mask || !pos || !keep || !next) {
        rc = sq_error_oom(&err, "dump buffers");
        goto done;
    }
    sq_corpus_writer_params wp = sq_corpus_writer_default_params();
    wp.vocab = V;
    wp.topk = o->topk;
    wp.half = o->half;
    wp.compression = o->compression;
    wp.draft = o->draft_dir;
    wp.target = o->target_dir;
    if (o->resume) {
        size_t n = strlen(o->out_file) + sizeof ".partial";
        char fp[SQ_CORPUS_MAX_FINGERPRINT + 1];
        partial = malloc(n);
        if (!partial) {
            rc = sq_error_oom(&err, "partial path");
            goto done;
        }
        snprintf(partial, n, "%s.partial", o->out_file);
        dump_fingerprint(o, toks, V, ctxlen, fp, sizeof fp);
        if ((rc = sq_corpus_writer_open_resumable(o->out_file, partial, &wp, fp, &done_rows, &w,
                                                  &err)))
            goto done;
        if (done_rows > 0)
            fprintf(stderr, PROG ": %s: resuming after %lld positions\n", partial,
                    (long long)done_rows);
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = dump_on_signal;
        sigemptyset(&sa.sa_mask);
        sigaction(SIGINT, &sa, NULL);
        sigaction(SIGTERM, &sa, NULL);
        sigaction(SIGHUP, &sa, NULL);
    } else if ((rc = sq_corpus_writer_open(o->out_file, &wp, &w, &err))) {
        goto done;
    }
    int64_t total_rows = 0;
    for (int64_t s = 0; s < toks->sequences; s++)
        if (toks->offsets[s + 1] - toks->offsets[s] > 1)
            total_rows += toks->offsets[s + 1] - toks->offsets[s] - 1;
    sq_progress pg;
    sq_progress_start(&pg, PROG, o->out_file, "positions", o->quiet, 0);
    for (int64_t s = 0; s < toks->sequences; s++) {
        int64_t b = toks->offsets[s], e = toks->offsets[s + 1];
        int64_t before = rows;
        /* a resumed dump skips the sequences the partial file holds whole (their boundary is
         * in it, or is exactly where it stopped) */
        int64_t seq_rows = e - b > 1 ? e - b - 1 : 0;
        if (rows + seq_rows <= done_rows) {
            rows += seq_rows;
            if (seq_rows > 0 && rows == done_rows &&
                (rc = sq_corpus_writer_end_sequence(w, &err)))
                goto done;
            continue;
        }
        /* windows of ctxlen tokens; a row for every position that has a next token */
        for (int64_t w0 = b; w0 < e - 1; w0 += ctxlen) {
            int64_t w1 = w0 + ctxlen < e ? w0 + ctxlen : e;
            int64_t win_rows = (w1 < e ? w1 : e - 1) - w0;
            if (rows + win_rows <= done_rows) {  /* whole window already in the file */
                rows += win_rows;
                continue;
            }
            sq_context_reset(dctx);
            sq_context_reset(tctx);
            for (int64_t c0 = w0; c0 < w1; c0 += DUMP_CHUNK) {
                int m = (int)(w1 - c0 < DUMP_CHUNK ? w1 - c0 : DUMP_CHUNK);
                for (int i = 0; i < m; i++) {
                    pos[i] = (int32_t)(c0 - w0 + i);
                    keep[i] = i;
                    for (int j = 0; j < m; j++)
                        mask[(size_t)i * m + j] = j <= i;
                }
                const int32_t *ids = toks->ids + c0;
                if ((rc = sq_context_forward(tctx, ids, pos, mask, m, tl, &err)) ||
                    (rc = sq_context_forward(dctx, ids, pos, mask, m, dl, &err)) ||
                    (rc = sq_context_commit(tctx, keep, m, &err)) ||
                    (rc = sq_context_commit(dctx, keep, m, &err)))
                    goto done;
                int r = 0;
                while (r < m && c0 + r + 1 < e) {
                    next[r] = toks->ids[c0 + r + 1];
                    r++;
                }
                /* rows before done_rows are in the partial file: forward only (KV cache) */
                int skip = rows >= done_rows ? 0 : (int)(done_rows - rows < r ? done_rows - rows : r);
                if (r > skip &&
                    (rc = sq_corpus_writer_append(w, tl + (size_t)skip * V, dl + (size_t)skip * V,
                                                  next + skip, r - skip, &err)))
                    goto done;
                rows += r;
                sq_progress_update(&pg, rows, total_rows);
                if (dump_stop_signal) {
                    int sig = dump_stop_signal;
                    if ((rc = sq_corpus_writer_checkpoint(w, &err)))
                        goto done;
                    sq_corpus_writer_abort(w);  /* keeps the partial file */
                    w = NULL;
                    sq_progress_end(&pg);
                    fprintf(stderr, PROG ": %s: interrupted after %lld positions; run the same "
                            "command with --resume to go on\n", partial, (long long)rows);
                    signal(sig, SIG_DFL);
                    raise(sig);
                    rc = SQ_EFAIL;  /* not reached unless the signal is blocked */
                    goto done;
                }
            }
        }
        if (rows > before && (rc = sq_corpus_writer_end_sequence(w, &err)))
            goto done;
    }
    sq_progress_end(&pg);
    if (rows == 0) {
        rc = sq_error_set(&err, SQ_EDATA, "%s: no sequence has two tokens: nothing to dump",
                          o->tokens_file);
        goto done;
    }
    rc = sq_corpus_writer_commit(w, &err);
    w = NULL;
    if (!rc)
        fprintf(stderr, PROG ": %s: %lld positions in %lld sequences, vocabulary %d%s\n",
                o->out_file, (long long)rows, (long long)toks->sequences, V,
                o->topk ? " (top-k logits)" : "");
done:
    sq_corpus_writer_abort(w);
    free(tl);
    free(dl);
    free(mask);
    free(pos);
    free(keep);
    free(next);
    free(partial);
    sq_context_free(dctx);
    sq_context_free(tctx);
    sq_tokens_free(toks);
    sq_model_free(draft);
    sq_model_free(target);
    if (rc) {
        fprintf(stderr, PROG ": %s\n", err.msg);
        return rc;
    }
    return SQ_OK;
}

/* ---- command line ------------------------------------------------------------------------- */

enum {
    OPT_DRAFT = 1000, OPT_BACKEND, OPT_DTYPE, OPT_OFFLOAD, OPT_TARGET, OPT_PROMPT, OPT_TOP_P, OPT_VALIDATE, OPT_SAMPLES,
    OPT_CONTEXT, OPT_THREADS, OPT_NO_BASELINE, OPT_VERSION, OPT_TOKENS, OPT_TOPK, OPT_HALF,
    OPT_RESUME, OPT_BATCH, OPT_COMPRESSION,
};

static int parse_dump(int argc, char **argv)
{
    static const struct option opts[] = {
        {"draft", required_argument, NULL, OPT_DRAFT},
        {"target", required_argument, NULL, OPT_TARGET},
        {"tokens", required_argument, NULL, OPT_TOKENS},
        {"output", required_argument, NULL, 'o'},
        {"top-k", required_argument, NULL, OPT_TOPK},
        {"context", required_argument, NULL, OPT_CONTEXT},
        {"half", no_argument, NULL, OPT_HALF},
        {"compression", required_argument, NULL, OPT_COMPRESSION},
        {"threads", required_argument, NULL, OPT_THREADS},
        {"resume", no_argument, NULL, OPT_RESUME},
        {"quiet", no_argument, NULL, 'q'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    dump_opts o = {0};
    o.compression = 1;
    int c;
    opterr = 0;
    optind = 1;
    while ((c = getopt_long(argc, argv, ":o:qh", opts, NULL)) != -1) {
        switch (c) {
        case OPT_DRAFT: o.draft_dir = optarg; break;
        case OPT_TARGET: o.target_dir = optarg; break;
        case OPT_TOKENS: o.tokens_file = optarg; break;
        case 'o': o.out_file = optarg; break;
        case OPT_TOPK:
            if (sq_cli_int(PROG, "--top-k", optarg, 1, INT_MAX, &o.topk)) return SQ_EUSAGE;
            break;
        case OPT_CONTEXT:
            if (sq_cli_int(PROG, "--context", optarg, 2, INT_MAX, &o.context)) return SQ_EUSAGE;
            break;
        case OPT_THREADS:
            if (sq_cli_int(PROG, "--threads", optarg, 0, INT_MAX, &o.threads)) return SQ_EUSAGE;
            break;
        case OPT_HALF: o.half = 1; break;
        case OPT_COMPRESSION:
            if (sq_cli_int(PROG, "--compression", optarg, 0, 9, &o.compression)) return SQ_EUSAGE;
            break;
        case OPT_RESUME: o.resume = 1; break;
        case 'q': o.quiet = 1; break;
        case 'h': usage(stdout); return sq_cli_finish(PROG, SQ_OK);
        default: return sq_cli_bad_option(PROG, c, argv, optind);
        }
    }
    if (optind < argc) {
        fprintf(stderr, PROG ": dump: unexpected argument '%s' (see --help)\n", argv[optind]);
        return SQ_EUSAGE;
    }
    if (!o.draft_dir || !o.target_dir || !o.tokens_file || !o.out_file) {
        fprintf(stderr, PROG ": dump needs --draft, --target, --tokens and -o (see --help)\n");
        return SQ_EUSAGE;
    }
    if (o.half && o.topk) {
        fprintf(stderr, PROG ": dump: --half applies to dense logits, not with --top-k\n");
        return SQ_EUSAGE;
    }
    if (o.resume && sq_out_is_direct(o.out_file)) {
        fprintf(stderr, PROG ": dump: --resume keeps OUT.partial beside -o; %s is not a file\n",
                o.out_file);
        return SQ_EUSAGE;
    }
    {
        /* an output that is an input is refused before the models load (issue 14) */
        sq_path_use in[] = {{"--tokens", o.tokens_file}};
        sq_path_use out[] = {{"-o", o.out_file}};
        sq_error err = {0};
        if (sq_paths_check(in, 1, out, 1, &err)) {
            fprintf(stderr, PROG ": dump: %s\n", err.msg);
            return err.status;
        }
    }
    sq_out_install_signal_handlers();
    return sq_cli_finish(PROG, dump_main(&o));
}

#define PARSE_RUN (-1)   /* parse_run: go on and run */

/* Fills *o from argv. Returns PARSE_RUN, or the exit status (--help, --version, errors). */
static int parse_run(int argc, char **argv, run_opts *o)
{
    static const struct option opts[] = {
        {"draft", required_argument, NULL, OPT_DRAFT},
        {"target", required_argument, NULL, OPT_TARGET},
        {"plan", required_argument, NULL, 'p'},
        {"prompt", required_argument, NULL, OPT_PROMPT},
        {"max-new-tokens", required_argument, NULL, 'n'},
        {"mode", required_argument, NULL, 'm'},
        {"temperature", required_argument, NULL, 't'},
        {"top-p", required_argument, NULL, OPT_TOP_P},
        {"seed", required_argument, NULL, 's'},
        {"output", required_argument, NULL, 'o'},
        {"report", required_argument, NULL, 'r'},
        {"validate", no_argument, NULL, OPT_VALIDATE},
        {"validate-samples", required_argument, NULL, OPT_SAMPLES},
        {"context", required_argument, NULL, OPT_CONTEXT},
        {"threads", required_argument, NULL, OPT_THREADS},
        {"no-baseline", no_argument, NULL, OPT_NO_BASELINE},
        {"backend", required_argument, NULL, OPT_BACKEND},
        {"dtype", required_argument, NULL, OPT_DTYPE},
        {"offload", no_argument, NULL, OPT_OFFLOAD},
        {"batch", required_argument, NULL, OPT_BATCH},
        {"help", no_argument, NULL, 'h'},
        {"version", no_argument, NULL, OPT_VERSION},
        {"quiet", no_argument, NULL, 'q'},
        {NULL, 0, NULL, 0},
    };
    *o = (run_opts){.prm = sq_specdec_default_params(), .max_new = 128, .samples = 2000,
                    .baseline = 1};
    int c;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":p:n:m:t:s:o:r:qh", opts, NULL)) != -1) {
        switch (c) {
        case OPT_DRAFT: o->draft_dir = optarg; break;
        case OPT_TARGET: o->target_dir = optarg; break;
        case 'p': o->plan_file = optarg; break;
        case OPT_PROMPT: o->prompt_file = optarg; break;
        case 'n':
            if (sq_cli_int(PROG, "--max-new-tokens", optarg, 1, INT_MAX, &o->max_new))
                return SQ_EUSAGE;
            break;
        case 'm':
            if (sq_mode_parse(optarg, &o->prm.mode)) {
                fprintf(stderr, PROG ": --mode: '%s' is not one of stochastic, specinfer, greedy, "
                        "topk\n", optarg);
                return SQ_EUSAGE;
            }
            break;
        case 't':
            if (sq_cli_double(PROG, "--temperature", optarg, &o->prm.temperature))
                return SQ_EUSAGE;
            o->temp_given = 1;
            break;
        case OPT_TOP_P:
            if (sq_cli_double(PROG, "--top-p", optarg, &o->prm.top_p))
                return SQ_EUSAGE;
            break;
        case 's':
            if (sq_cli_u64(PROG, "--seed", optarg, UINT64_MAX, &o->prm.seed))
                return SQ_EUSAGE;
            break;
        case 'o': o->out_file = optarg; break;
        case 'r': o->report_file = optarg; break;
        case OPT_VALIDATE: o->validate = 1; break;
        case OPT_SAMPLES:
            if (sq_cli_int(PROG, "--validate-samples", optarg, 10, INT_MAX, &o->samples))
                return SQ_EUSAGE;
            break;
        case OPT_CONTEXT:
            if (sq_cli_int(PROG, "--context", optarg, 2, INT_MAX, &o->context))
                return SQ_EUSAGE;
            break;
        case OPT_THREADS:
            if (sq_cli_int(PROG, "--threads", optarg, 0, INT_MAX, &o->threads))
                return SQ_EUSAGE;
            break;
        case OPT_NO_BASELINE: o->baseline = 0; break;
        case OPT_BACKEND: o->backend = optarg; break;
        case OPT_DTYPE: o->dtype = optarg; break;
        case OPT_OFFLOAD: o->offload = 1; break;
        case OPT_BATCH:
            if (sq_cli_int(PROG, "--batch", optarg, 1, 1 << 20, &o->batch))
                return SQ_EUSAGE;
            break;
        case 'q': o->quiet = 1; break;
        case 'h': usage(stdout); return sq_cli_finish(PROG, SQ_OK);
        case OPT_VERSION: printf(PROG " %s\n", SQ_VERSION); return sq_cli_finish(PROG, SQ_OK);
        default: return sq_cli_bad_option(PROG, c, argv, optind);
        }
    }
    if (optind < argc) {
        fprintf(stderr, PROG ": unexpected argument '%s' (see --help)\n", argv[optind]);
        return SQ_EUSAGE;
    }
    return PARSE_RUN;
}

/* Checks the options that depend on each other and settles the backend; NULL when they fit,
 * else the message. */
static const char *run_misfit(run_opts *o)
{
    static char buf[SQ_ERROR_MSG_MAX + 64];
    if (!o->draft_dir || !o->target_dir || !o->plan_file || !o->prompt_file)
        return "--draft, --target, --plan and --prompt are required (see --help)";
    if (o->prm.mode == SQ_MODE_GREEDY) {
        o->prm.temperature = 0.0;
    } else if (!(o->prm.temperature > 0.0)) {
        snprintf(buf, sizeof buf, "--temperature: %s must be > 0 for --mode %s (use --mode greedy "
                 "for argmax decoding)", o->temp_given ? "the value" : "it",
                 sq_mode_name(o->prm.mode));
        return buf;
    }
    if (!(o->prm.top_p > 0.0 && o->prm.top_p <= 1.0)) {
        snprintf(buf, sizeof buf, "--top-p: %g is not in (0, 1]", o->prm.top_p);
        return buf;
    }
    if (o->validate && o->prm.mode == SQ_MODE_GREEDY && !o->baseline)
        return "--validate in greedy mode compares with target-only decoding: drop --no-baseline";
    if (o->backend && strcmp(o->backend, "cpu") && strcmp(o->backend, "cuda")) {
        snprintf(buf, sizeof buf, "--backend: unknown backend '%.100s' (cpu or cuda)", o->backend);
        return buf;
    }
    o->prm.backend = o->backend && !strcmp(o->backend, "cuda") ? SQ_BACKEND_CUDA : SQ_BACKEND_CPU;
    if (o->dtype && sq_weight_dtype_parse(o->dtype, &o->prm.dtype)) {
        snprintf(buf, sizeof buf, "--dtype: unknown dtype '%.100s' (f32, f16 or bf16)", o->dtype);
        return buf;
    }
    if (o->offload && o->prm.backend != SQ_BACKEND_CUDA)
        return "--offload streams weights to a GPU: it needs --backend cuda";
    o->prm.offload = o->offload;
    if (o->batch > 1 && o->validate && !o->baseline)
        return "--validate in greedy mode compares with target-only decoding: drop --no-baseline";
    /* an output that is an input, or both outputs on one file (issue 14) */
    sq_path_use in[] = {{"--plan", o->plan_file}, {"--prompt", o->prompt_file}};
    sq_path_use out[] = {{"-o", o->out_file}, {"--report", o->report_file}};
    sq_error err = {0};
    if (sq_paths_check(in, 2, out, 2, &err)) {
        snprintf(buf, sizeof buf, "%s", err.msg);
        return buf;
    }
    return NULL;
}

int main(int argc, char **argv)
{
    sq_cpu_blas_reexec(argv);   /* OpenBLAS with the CPU's own kernels: runtime/cpu_matmul.h */
    if (argc > 1 && strcmp(argv[1], "dump") == 0)
        return parse_dump(argc - 1, argv + 1);
    run_opts o;
    int rc = parse_run(argc, argv, &o);
    if (rc != PARSE_RUN)
        return rc;
    const char *why = run_misfit(&o);
    if (why) {
        fprintf(stderr, PROG ": %s\n", why);
        return SQ_EUSAGE;
    }
    sq_out_install_signal_handlers();
    if (o.batch >= 1) {   /* --batch given, even 1: the batch runner and its report */
        sq_batch_run_opts b = {PROG, o.draft_dir, o.target_dir, o.plan_file, o.prompt_file,
                               o.out_file, o.report_file, o.batch, o.max_new, o.baseline,
                               o.validate, o.prm, o.samples, o.quiet};
        b.prm.max_context = o.context;
        b.prm.threads = o.threads;
        return sq_cli_finish(PROG, sq_batch_run(&b));
    }
    return sq_cli_finish(PROG, run_main(&o));
}
