/* sequoia-run: executes a tree plan with a draft and a target model (docs/design.md §8), measures
 * and validates it, and dumps draft/target corpora (docs/design.md §7.2). The tool parses the
 * options; the run is runtime/run.h's sq_run, the dump runtime/dump.h's sq_dump. */
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "libsequoia/base/cli.h"
#include "libsequoia/base/io.h"
#include "runtime/cpu_matmul.h"
#include "runtime/dump.h"
#include "runtime/run.h"
#include "runtime/validate.h"

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
        "  -r, --report FILE        JSON report (sequoia-run-report v2): per-step counts, tokens/step\n"
        "                           with a 95%% CI vs the plan's expected_tokens, measured acceptance\n"
        "                           per rank and depth, wall time per token, target-only decoding,\n"
        "                           the speedup, and the batch section (a single run is B = 1)\n"
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
    sq_dump_opts o = sq_dump_default_opts();
    o.prog = PROG;
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
            if (sq_cli_threads(PROG, "--threads", optarg, &o.threads)) return SQ_EUSAGE;
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
    sq_error err = {0};
    int rc = sq_dump(&o, &err);
    if (rc)
        fprintf(stderr, PROG ": %s\n", err.msg);
    return sq_cli_finish(PROG, rc);
}

/* The command line of a run: sq_run's options, and the names that settle its parameters. */
typedef struct run_cli {
    sq_run_opts run;
    const char *backend, *dtype;
    int         offload, temp_given;
} run_cli;

#define PARSE_RUN (-1)   /* parse_run: go on and run */

/* Fills *o from argv. Returns PARSE_RUN, or the exit status (--help, --version, errors). */
static int parse_run(int argc, char **argv, run_cli *o)
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
    *o = (run_cli){.run = {.prog = PROG, .prm = sq_specdec_default_params(), .max_new = 128,
                           .samples = 2000, .baseline = 1}};
    int c;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":p:n:m:t:s:o:r:qh", opts, NULL)) != -1) {
        switch (c) {
        case OPT_DRAFT: o->run.draft_dir = optarg; break;
        case OPT_TARGET: o->run.target_dir = optarg; break;
        case 'p': o->run.plan_file = optarg; break;
        case OPT_PROMPT: o->run.prompt_file = optarg; break;
        case 'n':
            if (sq_cli_int(PROG, "--max-new-tokens", optarg, 1, INT_MAX, &o->run.max_new))
                return SQ_EUSAGE;
            break;
        case 'm':
            if (sq_mode_parse(optarg, &o->run.prm.mode)) {
                fprintf(stderr, PROG ": --mode: '%s' is not one of stochastic, specinfer, greedy, "
                        "topk\n", optarg);
                return SQ_EUSAGE;
            }
            break;
        case 't':
            if (sq_cli_double(PROG, "--temperature", optarg, &o->run.prm.temperature))
                return SQ_EUSAGE;
            o->temp_given = 1;
            break;
        case OPT_TOP_P:
            if (sq_cli_double(PROG, "--top-p", optarg, &o->run.prm.top_p))
                return SQ_EUSAGE;
            break;
        case 's':
            if (sq_cli_u64(PROG, "--seed", optarg, UINT64_MAX, &o->run.prm.seed))
                return SQ_EUSAGE;
            break;
        case 'o': o->run.out_file = optarg; break;
        case 'r': o->run.report_file = optarg; break;
        case OPT_VALIDATE: o->run.validate = 1; break;
        case OPT_SAMPLES:
            if (sq_cli_int(PROG, "--validate-samples", optarg, 10, INT_MAX, &o->run.samples))
                return SQ_EUSAGE;
            break;
        case OPT_CONTEXT:
            if (sq_cli_int(PROG, "--context", optarg, 2, INT_MAX, &o->run.prm.max_context))
                return SQ_EUSAGE;
            break;
        case OPT_THREADS:
            if (sq_cli_threads(PROG, "--threads", optarg, &o->run.prm.threads))
                return SQ_EUSAGE;
            break;
        case OPT_NO_BASELINE: o->run.baseline = 0; break;
        case OPT_BACKEND: o->backend = optarg; break;
        case OPT_DTYPE: o->dtype = optarg; break;
        case OPT_OFFLOAD: o->offload = 1; break;
        case OPT_BATCH:
            if (sq_cli_int(PROG, "--batch", optarg, 1, 1 << 20, &o->run.batch))
                return SQ_EUSAGE;
            break;
        case 'q': o->run.quiet = 1; break;
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
static const char *run_misfit(run_cli *o)
{
    static char buf[SQ_ERROR_MSG_MAX + 64];
    if (!o->run.draft_dir || !o->run.target_dir || !o->run.plan_file || !o->run.prompt_file)
        return "--draft, --target, --plan and --prompt are required (see --help)";
    if (o->run.prm.mode == SQ_MODE_GREEDY) {
        o->run.prm.temperature = 0.0;
    } else if (!(o->run.prm.temperature > 0.0)) {
        snprintf(buf, sizeof buf, "--temperature: %s must be > 0 for --mode %s (use --mode greedy "
                 "for argmax decoding)", o->temp_given ? "the value" : "it",
                 sq_mode_name(o->run.prm.mode));
        return buf;
    }
    if (!(o->run.prm.top_p > 0.0 && o->run.prm.top_p <= 1.0)) {
        snprintf(buf, sizeof buf, "--top-p: %g is not in (0, 1]", o->run.prm.top_p);
        return buf;
    }
    sq_error err = {0};
    if (sq_run_check(&o->run, &err)) {
        snprintf(buf, sizeof buf, "%s", err.msg);
        return buf;
    }
    if (o->backend && strcmp(o->backend, "cpu") && strcmp(o->backend, "cuda")) {
        snprintf(buf, sizeof buf, "--backend: unknown backend '%.100s' (cpu or cuda)", o->backend);
        return buf;
    }
    o->run.prm.backend = o->backend && !strcmp(o->backend, "cuda") ? SQ_BACKEND_CUDA : SQ_BACKEND_CPU;
    if (o->dtype && sq_weight_dtype_parse(o->dtype, &o->run.prm.dtype)) {
        snprintf(buf, sizeof buf, "--dtype: unknown dtype '%.100s' (f32, f16 or bf16)", o->dtype);
        return buf;
    }
    if (o->offload && o->run.prm.backend != SQ_BACKEND_CUDA)
        return "--offload streams weights to a GPU: it needs --backend cuda";
    o->run.prm.offload = o->offload;
    /* an output that is an input, or both outputs on one file (issue 14) */
    sq_path_use in[] = {{"--plan", o->run.plan_file}, {"--prompt", o->run.prompt_file}};
    sq_path_use out[] = {{"-o", o->run.out_file}, {"--report", o->run.report_file}};
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
    run_cli o;
    int rc = parse_run(argc, argv, &o);
    if (rc != PARSE_RUN)
        return rc;
    const char *why = run_misfit(&o);
    if (why) {
        fprintf(stderr, PROG ": %s\n", why);
        return SQ_EUSAGE;
    }
    sq_out_install_signal_handlers();
    return sq_cli_finish(PROG, sq_run(&o.run));
}
