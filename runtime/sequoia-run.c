/* sequoia-run: executes a tree plan with a draft and a target model (DESIGN.md §7), measures
 * and validates it, and dumps draft/target corpora (§6.2). */
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
#include "libsequoia/base/json.h"
#include "libsequoia/format/plan.h"
#include "libsequoia/base/sha256.h"
#include "runtime/model.h"
#include "runtime/specdec.h"
#include "libsequoia/base/stats.h"
#include "runtime/tokens.h"
#include "libsequoia/verify/verify.h"

#define PROG "sequoia-run"
#define REPORT_FORMAT "sequoia-run-report"
#define REPORT_VERSION 1
#define P_MIN 0.001            /* a goodness-of-fit test fails below this p-value          */
/* tree vs path logits, max abs difference: F32 compute on the CPU, 16-bit GEMM inputs on CUDA */
static int attn_tol_cuda;
#define CUDA_OPTIONS_HELP                                                                        \
    "      --backend NAME       cpu (default) or cuda (both models on the GPU)\n"                 \
    "      --dtype NAME         CUDA weights: f16 (default) or bf16; the CPU computes in f32\n"   \
    "      --offload            CUDA: weights stay in pinned host memory and are streamed to\n"   \
    "                           the GPU layer by layer (models larger than the GPU's memory)\n"
#define ATTN_TOL (attn_tol_cuda ? 2e-2 : 1e-4)
#define ATTN_STEPS 3           /* steps whose tree attention --validate checks             */
#define MAX_FIRST_BINS 32      /* first tokens whose successors the pair test resolves     */

static void usage(FILE *fp)
{
    fprintf(fp,
        "Usage: " PROG " --draft DIR --target DIR --plan PLAN.json --prompt FILE\n"
        "                   [--max-new-tokens N] [--mode stochastic|specinfer|greedy|topk]\n"
        "                   [--temperature T] [--top-p P] [--seed S] [-o OUT.txt]\n"
        "                   [--report REPORT.json] [--validate] [--validate-samples N]\n"
        "                   [--context L] [--threads N] [--no-baseline]\n"
        "                   [--backend cpu|cuda] [--dtype f16|bf16] [--offload]\n"
        "       " PROG " dump --draft DIR --target DIR --tokens FILE -o CORPUS.h5\n"
        "                   [--top-k K] [--context L] [--half] [--threads N] [--resume]\n"
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
        "      --no-baseline        skip target-only decoding (no measured speedup)\n"
        "  -h, --help               this text\n"
        "      --version            the version\n"
        "\n"
        "dump: teacher-forced forward of both models over a token file (an empty line or HDF5\n"
        "/seq_offsets separates sequences, which are cut into windows of --context tokens), written\n"
        "as a sequoia-corpus v1 HDF5 file: per position the target's and the draft's logits and\n"
        "the actual next token. --top-k K stores only the K largest logits per row (sparse);\n"
        "--half stores dense logits as float16. --resume writes CORPUS.h5.partial, which an\n"
        "interruption (SIGINT, SIGTERM, a crash) leaves behind as of its last complete chunk of\n"
        "rows; the same command with --resume goes on from there without redoing that work, and\n"
        "the finished file is renamed to CORPUS.h5 (the same corpus as an uninterrupted dump).\n"
        "\n"
        "Examples:\n"
        "  " PROG " --draft d/ --target t/ --plan plan.json --prompt p.txt -n 256 --mode greedy\n"
        "  " PROG " --draft d/ --target t/ --plan plan.json --prompt p.txt -m stochastic -t 0.6 \\\n"
        "              --seed 7 -o out.txt --report report.json --validate\n"
        "  " PROG " dump --draft d/ --target t/ --tokens text.txt -o corpus.h5 --top-k 64\n"
        "\n"
        "Exit status: 0 success, 1 a --validate check failed, 64 usage error, 65 invalid input\n"
        "data (plan, model, prompt), 66 input file missing, 70 internal error, 73 cannot create\n"
        "output, 74 I/O error.\n",
        ATTN_STEPS, P_MIN, CUDA_OPTIONS_HELP);
}

static void write_tokens(FILE *fp, const int32_t *t, int n)
{
    for (int i = 0; i < n; i++)
        fprintf(fp, i ? " %d" : "%d", (int)t[i]);
    fputc('\n', fp);
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
        "narrower than the independent-steps interval"));
    return o;
}

/* Acceptance measured along the verifier's walks: at a visited node with c children, ranks
 * 1..c were each "offered"; hits[k] counts rank k accepted. Under the positional assumption
 * hits[k] / offered[k] estimates p_k whatever c is. */
typedef struct acc_stats {
    int     W, D;
    double *offered, *hits;               /* (W)                         */
    double *offered_d, *hits_d;           /* (D, W) by depth of the node */
} acc_stats;

static int acc_init(acc_stats *a, int W, int D)
{
    a->W = W > 0 ? W : 1;
    a->D = D;
    a->offered = calloc((size_t)a->W, sizeof(double));
    a->hits = calloc((size_t)a->W, sizeof(double));
    a->offered_d = calloc((size_t)a->W * (size_t)D, sizeof(double));
    a->hits_d = calloc((size_t)a->W * (size_t)D, sizeof(double));
    return a->offered && a->hits && a->offered_d && a->hits_d ? 0 : -1;
}

static void acc_free(acc_stats *a)
{
    free(a->offered);
    free(a->hits);
    free(a->offered_d);
    free(a->hits_d);
}

static void acc_add(acc_stats *a, const sq_step_info *s)
{
    for (int v = 0; v < s->visits; v++) {
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

/* F(T) with the measured per-rank acceptance (ranks never offered count as 0). */
static double tree_f_with(const sq_tree *t, const double *p, int W)
{
    double *f = malloc((size_t)t->n * sizeof *f), F = 0.0;
    SQ_ASSERT(f);
    for (int v = 0; v < t->n; v++) {
        f[v] = v == 0 ? 1.0
                      : f[t->parent[v]] * (t->rank[v] <= W ? p[t->rank[v] - 1] : 0.0);
        F += f[v];
    }
    free(f);
    return F;
}

typedef struct run_opts {
    const char *draft_dir, *target_dir, *plan_file, *prompt_file, *out_file, *report_file;
    int         max_new, validate, samples, context, threads, baseline;
    sq_specdec_params prm;
    const char *backend, *dtype;
    int         offload, temp_given;
} run_opts;

typedef struct validation {
    int    ran;
    int    attn_ok;
    double attn_max_diff;
    int    greedy_checked, greedy_ok, greedy_first_mismatch;
    int    dist_checked, dist_ok;
    sq_chisq first, pair;
    int    pair_first_tokens;
} validation;

/* The distribution of the first two generated tokens over `samples` seeds against the
 * target's own: first token ~ P(. | prompt), pair ~ P(a | prompt) P(b | prompt, a). */
static int validate_distribution(sq_specdec *sd, const run_opts *o, const int32_t *prompt,
                                 int L, validation *val, sq_error *err)
{
    int V = sq_specdec_vocab(sd), D = sq_specdec_depth(sd);
    int R = o->samples, rc = SQ_OK;
    int32_t *first = malloc((size_t)R * sizeof *first), *second = malloc((size_t)R * sizeof *second);
    int32_t *buf = malloc((size_t)D * sizeof *buf), *ctx = malloc(((size_t)L + 1) * sizeof *ctx);
    double *p0 = malloc((size_t)V * sizeof *p0), *p1 = malloc((size_t)V * sizeof *p1);
    double *cnt = calloc((size_t)V, sizeof *cnt);
    int32_t *order = malloc((size_t)V * sizeof *order);
    double *pp = NULL, *pc = NULL;
    if (!first || !second || !buf || !ctx || !p0 || !p1 || !cnt || !order) {
        rc = sq_error_oom(err, "validation");
        goto done;
    }
    for (int i = 0; i < R && !rc; i++) {
        sq_specdec_seed(sd, o->prm.seed + 0x51ed27ull * (uint64_t)(i + 1));
        if ((rc = sq_specdec_start(sd, prompt, L, err)))
            break;
        int got = 0;
        while (got < 2 && !rc) {
            if ((rc = sq_specdec_step(sd, buf, NULL, err)))
                break;
            int m = sq_specdec_length(sd) - L - got;
            for (int j = 0; j < m && got < 2; j++, got++) {
                if (got == 0)
                    first[i] = buf[j];
                else
                    second[i] = buf[j];
            }
        }
    }
    if (rc)
        goto done;
    if ((rc = sq_specdec_target_probs(sd, prompt, L, p0, err)))
        goto done;
    for (int i = 0; i < R; i++)
        cnt[first[i]] += 1;
    val->first = sq_chisq_gof(cnt, p0, V, 5.0);
    /* pair bins: (a, b) for the likeliest first tokens a, then one bin for every other a */
    sq_topk_d(p0, V, V < MAX_FIRST_BINS ? V : MAX_FIRST_BINS, order);
    int A = 0;
    while (A < V && A < MAX_FIRST_BINS && p0[order[A]] * R >= 5.0)
        A++;
    size_t nb = (size_t)A * V + 1;
    pp = calloc(nb, sizeof *pp);
    pc = calloc(nb, sizeof *pc);
    if (!pp || !pc) {
        rc = sq_error_oom(err, "validation bins");
        goto done;
    }
    memcpy(ctx, prompt, (size_t)L * sizeof *ctx);
    double rest = 1.0;
    for (int j = 0; j < A; j++) {
        ctx[L] = order[j];
        if ((rc = sq_specdec_target_probs(sd, ctx, L + 1, p1, err)))
            goto done;
        for (int b = 0; b < V; b++)
            pp[(size_t)j * V + b] = p0[order[j]] * p1[b];
        rest -= p0[order[j]];
    }
    pp[nb - 1] = rest > 0.0 ? rest : 0.0;
    for (int i = 0; i < R; i++) {
        int j = 0;
        while (j < A && order[j] != first[i])
            j++;
        pc[j < A ? (size_t)j * V + second[i] : nb - 1] += 1;
    }
    val->pair = sq_chisq_gof(pc, pp, (int)nb, 5.0);
    val->pair_first_tokens = A;
    val->dist_checked = 1;
    val->dist_ok = val->first.p_value >= P_MIN && val->pair.p_value >= P_MIN;
done:
    free(first);
    free(second);
    free(buf);
    free(ctx);
    free(p0);
    free(p1);
    free(cnt);
    free(order);
    free(pp);
    free(pc);
    return rc;
}

static int validate_attention(sq_specdec *sd, const int32_t *prompt, int L, validation *val,
                              sq_error *err)
{
    int D = sq_specdec_depth(sd);
    int32_t *buf = malloc((size_t)D * sizeof *buf);
    if (!buf)
        return sq_error_oom(err, "validation");
    sq_step_info info = {0};
    int rc = sq_specdec_start(sd, prompt, L, err);
    val->attn_max_diff = 0.0;
    sq_specdec_set_check_attention(sd, 1);
    for (int s = 0; s < ATTN_STEPS && !rc; s++) {
        if (sq_specdec_length(sd) - 1 + D > sq_specdec_max_context(sd))
            break;
        rc = sq_specdec_step(sd, buf, &info, err);
        if (!rc && !(info.attn_max_diff <= val->attn_max_diff))
            val->attn_max_diff = info.attn_max_diff;
    }
    sq_specdec_set_check_attention(sd, 0);
    sq_step_info_clear(&info);
    free(buf);
    val->attn_ok = val->attn_max_diff <= ATTN_TOL;
    return rc;
}

static cJSON *chisq_json(const sq_chisq *c, const char *what)
{
    cJSON *o = cJSON_CreateObject();
    sq_json_add(o, "test", cJSON_CreateString(what));
    sq_json_add(o, "samples", cJSON_CreateNumber(c->n));
    sq_json_add(o, "chi2", isfinite(c->stat) ? cJSON_CreateNumber(c->stat) : cJSON_CreateNull());
    sq_json_add(o, "df", cJSON_CreateNumber(c->df));
    sq_json_add(o, "p_value", cJSON_CreateNumber(c->p_value));
    sq_json_add(o, "pass", cJSON_CreateBool(c->p_value >= P_MIN));
    return o;
}

static int run_main(run_opts *o)
{
    sq_error err = {0};
    int rc = SQ_OK;
    sq_out *tok_out = NULL, *rep_out = NULL;
    sq_plan *plan = NULL;
    sq_model *draft = NULL, *target = NULL;
    sq_tokens *prompt = NULL;
    sq_specdec *sd = NULL;
    int32_t *gen = NULL, *base = NULL;
    int *step_tokens = NULL, steps = 0;
    sq_step_info *infos = NULL;
    double *stepv = NULL;
    acc_stats acc = {0};
    validation val = {0};
    cJSON *rep = NULL;

    /* every output first, so that an unwritable path fails before any work */
    if ((rc = sq_out_open(&tok_out, o->out_file ? o->out_file : "-", &err)))
        goto done;
    if (o->report_file && (rc = sq_out_open(&rep_out, o->report_file, &err)))
        goto done;
    if ((rc = sq_plan_load(o->plan_file, &plan, &err)) ||
        (rc = sq_model_load(o->draft_dir, &draft, &err)) ||
        (rc = sq_model_load(o->target_dir, &target, &err)) ||
        (rc = sq_tokens_load(o->prompt_file, &prompt, &err)))
        goto done;
    const sq_model_config *dcfg = sq_model_get_config(draft), *tcfg = sq_model_get_config(target);
    if (dcfg->vocab_size != tcfg->vocab_size) {
        rc = sq_error_set(&err, SQ_EDATA,
                          "%s/config.json: vocab_size: %d differs from the target's %d (%s)",
                          o->draft_dir, dcfg->vocab_size, tcfg->vocab_size, o->target_dir);
        goto done;
    }
    if ((rc = sq_tokens_check_vocab(prompt, tcfg->vocab_size, o->prompt_file, &err)))
        goto done;
    if (prompt->n > INT_MAX / 2) {
        rc = sq_error_set(&err, SQ_EDATA, "%s: %lld tokens is too long a prompt", o->prompt_file,
                          (long long)prompt->n);
        goto done;
    }
    int L = (int)prompt->n;
    const char *want = sq_mode_rank_semantics(o->prm.mode);
    if (strcmp(plan->rank_semantics, want) != 0)
        fprintf(stderr,
                PROG ": warning: %s: rank_semantics: the plan was made for '%s' ranks but --mode "
                "%s uses '%s'; its expected_tokens does not describe this run\n",
                o->plan_file, plan->rank_semantics, sq_mode_name(o->prm.mode), want);
    o->prm.max_context = o->context;
    o->prm.threads = o->threads;
    if ((rc = sq_specdec_new(draft, target, plan, &o->prm, o->plan_file, &sd, &err)))
        goto done;
    int D = sq_specdec_depth(sd), ctxlen = sq_specdec_max_context(sd);
    if (L - 1 + D > ctxlen) {
        rc = sq_error_set(&err, SQ_EDATA,
                          "%s: %d tokens are longer than the context (%d tokens, less the tree "
                          "depth %d)", o->prompt_file, L, ctxlen, D);
        goto done;
    }
    if (L + o->max_new - 1 + D > ctxlen) {
        rc = sq_error_set(&err, SQ_EUSAGE,
                          "--max-new-tokens: %d new tokens after a %d-token prompt and a tree of "
                          "depth %d exceed the context of %d tokens (see --context)",
                          o->max_new, L, D, ctxlen);
        goto done;
    }

    /* speculative decoding */
    gen = malloc(((size_t)o->max_new + 1) * sizeof *gen);
    base = malloc(((size_t)o->max_new + 1) * sizeof *base);
    step_tokens = malloc(((size_t)o->max_new + 1) * sizeof *step_tokens);
    infos = calloc((size_t)o->max_new + 1, sizeof *infos);
    stepv = malloc(((size_t)o->max_new + 1) * sizeof *stepv);
    int W = sq_tree_max_children(plan->tree);
    if (!gen || !base || !step_tokens || !infos || !stepv || acc_init(&acc, W, D)) {
        rc = sq_error_oom(&err, "run buffers");
        goto done;
    }
    sq_specdec_seed(sd, o->prm.seed);
    double t0 = sq_now_ms();
    if ((rc = sq_specdec_generate(sd, prompt->ids, L, o->max_new, gen, step_tokens, &steps, infos,
                                  &err)))
        goto done;
    double spec_ms = sq_now_ms() - t0;
    double draft_ms = 0, target_ms = 0, verify_ms = 0;
    for (int s = 0; s < steps; s++) {
        stepv[s] = step_tokens[s];
        acc_add(&acc, &infos[s]);
        draft_ms += infos[s].draft_ms;
        target_ms += infos[s].target_ms;
        verify_ms += infos[s].verify_ms;
    }
    sq_mean_ci ci = sq_mean_ci_batch(stepv, steps);

    /* the target alone */
    double base_ms = NAN;
    if (o->baseline) {
        t0 = sq_now_ms();
        if ((rc = sq_specdec_autoregressive(sd, prompt->ids, L, o->max_new, o->prm.seed, base,
                                            &err)))
            goto done;
        base_ms = sq_now_ms() - t0;
    }

    if (o->validate) {
        val.ran = 1;
        if ((rc = validate_attention(sd, prompt->ids, L, &val, &err)))
            goto done;
        if (o->prm.mode == SQ_MODE_GREEDY) {
            val.greedy_checked = 1;
            val.greedy_ok = 1;
            val.greedy_first_mismatch = -1;
            for (int i = 0; i < o->max_new; i++)
                if (gen[i] != base[i]) {
                    val.greedy_ok = 0;
                    val.greedy_first_mismatch = i;
                    break;
                }
        } else if ((rc = validate_distribution(sd, o, prompt->ids, L, &val, &err))) {
            goto done;
        }
    }

    /* measured acceptance and the prediction */
    double *phat = calloc((size_t)acc.W, sizeof *phat);
    SQ_ASSERT(phat);
    for (int k = 0; k < acc.W; k++)
        phat[k] = acc.offered[k] > 0 ? acc.hits[k] / acc.offered[k] : 0.0;
    double f_measured_acc = tree_f_with(plan->tree, phat, acc.W);
    int have_ci = isfinite(ci.lo) && isfinite(ci.hi);
    int within = have_ci && plan->expected_tokens >= ci.lo && plan->expected_tokens <= ci.hi;
    char expl[1024];
    if (!have_ci)
        snprintf(expl, sizeof expl,
                 "%d steps are too few for a confidence interval (at least 4 are needed): "
                 "generate more tokens to compare with the plan's expected_tokens %.4f", steps,
                 plan->expected_tokens);
    else if (within)
        snprintf(expl, sizeof expl,
                 "the plan's expected_tokens %.4f lies within the 95%% CI of the measured mean",
                 plan->expected_tokens);
    else
        snprintf(expl, sizeof expl,
                 "measured %.4f tokens/step vs the plan's %.4f. The plan's curve ('%s', %s) "
                 "predicts p_1 = %.4f; this run accepted rank 1 at %.4f. Scored with the "
                 "acceptance measured in this run, the same tree gives F = %.4f: the part of the "
                 "gap that remains (%.4f) is the positional assumption's error, the rest (%.4f) "
                 "is the curve not describing this model pair and setting",
                 ci.mean, plan->expected_tokens, plan->acceptance.name, plan->acceptance.mode,
                 sq_curve_p(&plan->acceptance, 1, 1), phat[0], f_measured_acc,
                 ci.mean - f_measured_acc, f_measured_acc - plan->expected_tokens);

    rep = cJSON_CreateObject();
    sq_json_add(rep, "format", cJSON_CreateString(REPORT_FORMAT));
    sq_json_add(rep, "version", cJSON_CreateNumber(REPORT_VERSION));
    cJSON *setup = cJSON_CreateObject();
    sq_json_add(setup, "draft", cJSON_CreateString(o->draft_dir));
    sq_json_add(setup, "target", cJSON_CreateString(o->target_dir));
    sq_json_add(setup, "plan", cJSON_CreateString(o->plan_file));
    sq_json_add(setup, "prompt", cJSON_CreateString(o->prompt_file));
    sq_json_add(setup, "prompt_tokens", cJSON_CreateNumber(L));
    sq_json_add(setup, "max_new_tokens", cJSON_CreateNumber(o->max_new));
    sq_json_add(setup, "mode", cJSON_CreateString(sq_mode_name(o->prm.mode)));
    sq_json_add(setup, "temperature", cJSON_CreateNumber(o->prm.mode == SQ_MODE_GREEDY
                                                             ? 0.0 : o->prm.temperature));
    sq_json_add(setup, "top_p", cJSON_CreateNumber(o->prm.top_p));
    sq_json_add(setup, "seed", cJSON_CreateNumber((double)o->prm.seed));
    sq_json_add(setup, "context", cJSON_CreateNumber(ctxlen));
    sq_json_add(setup, "vocab_size", cJSON_CreateNumber(tcfg->vocab_size));
    sq_json_add(setup, "backend", cJSON_CreateString(o->prm.backend == SQ_BACKEND_CPU ? "cpu"
                                                     : o->prm.offload ? "cuda-offload" : "cuda"));
    sq_json_add(setup, "dtype", cJSON_CreateString(o->prm.dtype == SQ_DTYPE_AUTO
        ? (o->prm.backend == SQ_BACKEND_CPU ? "f32" : "f16") : sq_weight_dtype_name(o->prm.dtype)));
    sq_json_add(rep, "setup", setup);
    cJSON *pj = cJSON_CreateObject();
    sq_json_add(pj, "size", cJSON_CreateNumber(plan->tree->n));
    sq_json_add(pj, "depth", cJSON_CreateNumber(D));
    sq_json_add(pj, "expected_tokens", cJSON_CreateNumber(plan->expected_tokens));
    sq_json_add(pj, "rank_semantics", cJSON_CreateString(plan->rank_semantics));
    sq_json_add(pj, "curve", cJSON_CreateString(plan->acceptance.name));
    sq_json_add(rep, "plan", pj);
    sq_json_add(rep, "generated_tokens", cJSON_CreateNumber(o->max_new));
    sq_json_add(rep, "steps", cJSON_CreateNumber(steps));
    sq_json_add(rep, "step_tokens", sq_json_int_array(step_tokens, (size_t)steps));
    for (int s = 0; s < steps; s++)
        step_tokens[s] -= 1;
    sq_json_add(rep, "step_accepted", sq_json_int_array(step_tokens, (size_t)steps));
    sq_json_add(rep, "tokens_per_step", ci_json(&ci));
    cJSON *pred = cJSON_CreateObject();
    sq_json_add(pred, "expected_tokens", cJSON_CreateNumber(plan->expected_tokens));
    sq_json_add(pred, "measured", cJSON_CreateNumber(ci.mean));
    sq_json_add(pred, "within_ci95", cJSON_CreateBool(within));
    sq_json_add(pred, "expected_tokens_with_measured_acceptance",
                cJSON_CreateNumber(f_measured_acc));
    sq_json_add(pred, "explanation", cJSON_CreateString(expl));
    sq_json_add(rep, "prediction", pred);
    cJSON *aj = cJSON_CreateObject();
    sq_json_add(aj, "p", sq_json_number_array(phat, (size_t)acc.W));
    sq_json_add(aj, "offered", sq_json_number_array(acc.offered, (size_t)acc.W));
    double *pc = malloc((size_t)acc.W * sizeof *pc);
    SQ_ASSERT(pc);
    for (int k = 0; k < acc.W; k++)
        pc[k] = sq_curve_p(&plan->acceptance, 1, k + 1);
    sq_json_add(aj, "plan_p", sq_json_number_array(pc, (size_t)acc.W));
    cJSON *rows = cJSON_CreateArray();
    for (int d = 0; d < D; d++) {
        int any = 0;
        for (int k = 0; k < acc.W; k++) {
            double off = acc.offered_d[(size_t)d * acc.W + k];
            pc[k] = off > 0 ? acc.hits_d[(size_t)d * acc.W + k] / off : 0.0;
            any |= off > 0;
        }
        if (!any)
            break;
        cJSON_AddItemToArray(rows, sq_json_number_array(pc, (size_t)acc.W));
    }
    sq_json_add(aj, "p_by_depth", rows);
    sq_json_add(aj, "note", cJSON_CreateString(
        "p[k] = (times rank k+1 was accepted) / (visited nodes with at least k+1 children); "
        "p_by_depth row d counts nodes at depth d (0 = the root)"));
    sq_json_add(rep, "acceptance_measured", aj);
    free(pc);
    free(phat);
    cJSON *tj = cJSON_CreateObject();
    sq_json_add(tj, "speculative_ms", cJSON_CreateNumber(spec_ms));
    sq_json_add(tj, "speculative_ms_per_token", cJSON_CreateNumber(spec_ms / o->max_new));
    sq_json_add(tj, "draft_ms", cJSON_CreateNumber(draft_ms));
    sq_json_add(tj, "target_ms", cJSON_CreateNumber(target_ms));
    sq_json_add(tj, "verify_ms", cJSON_CreateNumber(verify_ms));
    if (o->baseline) {
        sq_json_add(tj, "autoregressive_ms", cJSON_CreateNumber(base_ms));
        sq_json_add(tj, "autoregressive_ms_per_token", cJSON_CreateNumber(base_ms / o->max_new));
        sq_json_add(tj, "speedup", cJSON_CreateNumber(base_ms / spec_ms));
    }
    sq_json_add(rep, "timing", tj);
    if (o->baseline) {
        int same = 0;
        while (same < o->max_new && gen[same] == base[same])
            same++;
        cJSON *bj = cJSON_CreateObject();
        int *bi = malloc((size_t)o->max_new * sizeof *bi);
        SQ_ASSERT(bi);
        for (int i = 0; i < o->max_new; i++)
            bi[i] = base[i];
        sq_json_add(bj, "tokens", sq_json_int_array(bi, (size_t)o->max_new));
        free(bi);
        sq_json_add(bj, "common_prefix_with_speculative", cJSON_CreateNumber(same));
        sq_json_add(rep, "autoregressive", bj);
    }
    if (val.ran) {
        cJSON *vj = cJSON_CreateObject();
        cJSON *at = cJSON_CreateObject();
        sq_json_add(at, "max_abs_diff", isfinite(val.attn_max_diff)
                                            ? cJSON_CreateNumber(val.attn_max_diff)
                                            : cJSON_CreateNull());
        sq_json_add(at, "tolerance", cJSON_CreateNumber(ATTN_TOL));
        sq_json_add(at, "steps", cJSON_CreateNumber(ATTN_STEPS));
        sq_json_add(at, "pass", cJSON_CreateBool(val.attn_ok));
        sq_json_add(vj, "tree_attention", at);
        if (val.greedy_checked) {
            cJSON *g = cJSON_CreateObject();
            sq_json_add(g, "identical_to_target_greedy", cJSON_CreateBool(val.greedy_ok));
            sq_json_add(g, "first_mismatch", cJSON_CreateNumber(val.greedy_first_mismatch));
            sq_json_add(g, "pass", cJSON_CreateBool(val.greedy_ok));
            sq_json_add(vj, "greedy", g);
        }
        if (val.dist_checked) {
            cJSON *dj = cJSON_CreateObject();
            sq_json_add(dj, "seeds", cJSON_CreateNumber(o->samples));
            sq_json_add(dj, "p_min", cJSON_CreateNumber(P_MIN));
            sq_json_add(dj, "first_token",
                        chisq_json(&val.first, "chi-square goodness of fit of the first "
                                   "generated token to the target's P(. | prompt)"));
            sq_json_add(dj, "first_two_tokens",
                        chisq_json(&val.pair, "chi-square goodness of fit of (first, second) "
                                   "to P(a | prompt) P(b | prompt, a); the likeliest first "
                                   "tokens get one bin per successor, the others one bin"));
            sq_json_add(dj, "pair_first_tokens", cJSON_CreateNumber(val.pair_first_tokens));
            sq_json_add(dj, "pass", cJSON_CreateBool(val.dist_ok));
            sq_json_add(vj, "distribution", dj);
        }
        int pass = val.attn_ok && (!val.greedy_checked || val.greedy_ok) &&
                   (!val.dist_checked || val.dist_ok);
        sq_json_add(vj, "pass", cJSON_CreateBool(pass));
        sq_json_add(rep, "validation", vj);
    }

    write_tokens(sq_out_stream(tok_out), gen, o->max_new);
    if (rep_out)
        sq_json_print(sq_out_stream(rep_out), rep);
    /* both written out before either is renamed: a full disk leaves both as they were */
    rc = sq_out_prepare(tok_out, &err);
    if (!rc && rep_out)
        rc = sq_out_prepare(rep_out, &err);
    if (rc)
        goto done;
    rc = sq_out_commit(tok_out, &err);
    tok_out = NULL;
    if (!rc && rep_out) {
        rc = sq_out_commit(rep_out, &err);
        rep_out = NULL;
    }
    if (rc)
        goto done;

    fprintf(stderr, PROG ": %d tokens in %d steps: %.3f tokens/step (95%% CI %.3f .. %.3f), plan "
            "expects %.3f%s\n", o->max_new, steps, ci.mean, ci.lo, ci.hi, plan->expected_tokens,
            within ? "" : have_ci ? " (outside the CI: see the report's prediction)"
                                  : " (too few steps for a CI)");
    if (o->baseline)
        fprintf(stderr, PROG ": %.3f ms/token speculative, %.3f ms/token target alone: speedup "
                "%.2fx\n", spec_ms / o->max_new, base_ms / o->max_new, base_ms / spec_ms);
    if (val.ran) {
        fprintf(stderr, PROG ": validate: tree attention max |diff| %.3g (<= %g): %s\n",
                val.attn_max_diff, ATTN_TOL, val.attn_ok ? "ok" : "FAILED");
        if (val.greedy_checked) {
            if (val.greedy_ok)
                fprintf(stderr, PROG ": validate: greedy output identical to the target's: ok\n");
            else
                fprintf(stderr, PROG ": validate: greedy output differs from the target's at "
                        "token %d: FAILED\n", val.greedy_first_mismatch);
        }
        if (val.dist_checked)
            fprintf(stderr, PROG ": validate: %d seeds, first token chi2 %.2f df %d p = %.4g; "
                    "first two tokens chi2 %.2f df %d p = %.4g (fail below %g): %s\n",
                    o->samples, val.first.stat, val.first.df, val.first.p_value, val.pair.stat,
                    val.pair.df, val.pair.p_value, P_MIN, val.dist_ok ? "ok" : "FAILED");
        if (!val.attn_ok || (val.greedy_checked && !val.greedy_ok) ||
            (val.dist_checked && !val.dist_ok))
            rc = sq_error_set(&err, SQ_EFAIL, "validation failed");
    }

done:
    sq_out_abort(tok_out);
    sq_out_abort(rep_out);
    cJSON_Delete(rep);
    if (infos)
        for (int s = 0; s <= o->max_new; s++)
            sq_step_info_clear(&infos[s]);
    free(infos);
    free(stepv);
    free(step_tokens);
    free(gen);
    free(base);
    acc_free(&acc);
    sq_specdec_free(sd);
    sq_tokens_free(prompt);
    sq_model_free(draft);
    sq_model_free(target);
    sq_plan_free(plan);
    if (rc) {
        fprintf(stderr, PROG ": %s\n", err.msg);
        return rc;
    }
    return SQ_OK;
}

/* ---- corpus dump --------------------------------------------------------------------------- */

typedef struct dump_opts {
    const char *draft_dir, *target_dir, *tokens_file, *out_file;
    int         topk, context, half, threads, resume;
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
    snprintf(out, cap, "tokens sha256 %s; draft %.1000s; target %.1000s; V %d; top-k %d; half %d; "
             "context %d", hex, o->draft_dir, o->target_dir, V, o->topk, o->half, ctxlen);
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
                if (dump_stop_signal) {
                    int sig = dump_stop_signal;
                    if ((rc = sq_corpus_writer_checkpoint(w, &err)))
                        goto done;
                    sq_corpus_writer_abort(w);  /* keeps the partial file */
                    w = NULL;
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
    OPT_RESUME,
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
        {"threads", required_argument, NULL, OPT_THREADS},
        {"resume", no_argument, NULL, OPT_RESUME},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    dump_opts o = {0};
    int c;
    opterr = 0;
    optind = 1;
    while ((c = getopt_long(argc, argv, ":o:h", opts, NULL)) != -1) {
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
        case OPT_RESUME: o.resume = 1; break;
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
        {"help", no_argument, NULL, 'h'},
        {"version", no_argument, NULL, OPT_VERSION},
        {NULL, 0, NULL, 0},
    };
    *o = (run_opts){.prm = sq_specdec_default_params(), .max_new = 128, .samples = 2000,
                    .baseline = 1};
    int c;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":p:n:m:t:s:o:r:h", opts, NULL)) != -1) {
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
    static char buf[256];
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
    return NULL;
}

int main(int argc, char **argv)
{
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
    attn_tol_cuda = o.prm.backend == SQ_BACKEND_CUDA;
    sq_out_install_signal_handlers();
    return sq_cli_finish(PROG, run_main(&o));
}
