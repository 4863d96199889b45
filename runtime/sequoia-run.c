/* sequoia-run: executes a tree plan with a draft and a target model (docs/design.md §8), measures
 * and validates it, dumps draft/target corpora (docs/design.md §7.2), and turns text into token
 * ids and back with a model's tokenizer (issue 25, docs/tokenizer.md). The tool parses the
 * options; the run is runtime/run.h's sq_run, the dump runtime/dump.h's sq_dump, the tokenizer
 * libsequoia/text/tokenizer.h. */
#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "libsequoia/base/cli.h"
#include "libsequoia/base/io.h"
#include "libsequoia/text/tokenizer.h"
#include "runtime/cpu_matmul.h"
#include "runtime/dump.h"
#include "runtime/dyntree.h"
#include "runtime/model.h"
#include "runtime/run.h"
#include "runtime/tokens.h"
#include "runtime/validate.h"

#define PROG "sequoia-run"
#define CUDA_OPTIONS_HELP                                                                        \
    "      --backend NAME       cpu (default) or cuda (both models on the GPU)\n"                 \
    "      --dtype NAME         the weights: f32, f16 or bf16 on the CPU (default: the\n"       \
    "                           checkpoint's own, read in place), f16 (default) or bf16 on CUDA\n" \
    "      --offload            CUDA: weights stay in pinned host memory and are streamed to\n"   \
    "                           the GPU layer by layer (models larger than the GPU's memory)\n"

static void usage(FILE *fp)
{
    fprintf(fp,
        "Usage: " PROG " --draft DIR --target DIR (--plan PLAN.json | --engine E --envelope L,K,N)\n"
        "                   (--prompt | --prompt-text) FILE\n"
        "                   [--max-new-tokens N] [--mode stochastic|specinfer|greedy|topk]\n"
        "                   [--temperature T] [--top-p P] [--seed S] [-o OUT.txt]\n"
        "                   [--report REPORT.json] [--validate] [--validate-samples N]\n"
        "                   [--context L] [--threads N] [--no-baseline] [-q]\n"
        "                   [--backend cpu|cuda] [--dtype f32|f16|bf16] [--offload] [--batch B]\n"
        "                   [--text OUT.txt] [--ignore-eos]\n"
        "       " PROG " dump --draft DIR --target DIR (--tokens | --text) FILE -o CORPUS.h5\n"
        "                   [--top-k K] [--context L] [--half] [--compression N] [--threads N]\n"
        "                   [--resume] [-q]\n"
        "       " PROG " tokenize --model DIR [--no-special] [--decode [--skip-special]]\n"
        "\n"
        "Runs tree speculative decoding (arXiv 2402.12374) exactly as the plan says: per step the\n"
        "draft grows the tree level by level (one draft forward per level), the target verifies\n"
        "every node in one forward with a tree attention mask, the verifier of --mode walks from\n"
        "the root, and both KV caches keep only the accepted path. Models are Hugging Face\n"
        "Llama directories (config.json + safetensors); the runtime works on token ids, and\n"
        "the target's tokenizer.json (Hugging Face format) turns text into ids and back.\n"
        "\n"
        "Options:\n"
        "      --draft DIR          draft model directory\n"
        "      --target DIR         target model directory\n"
        "  -p, --plan FILE          tree plan (sequoia-plan v1), or a dynamic plan\n"
        "                           (sequoia-dynamic-plan: its engine, envelope, mode and\n"
        "                           temperature are the run's, as --engine/--envelope; one of\n"
        "                           those options that differs from the plan's is refused)\n");
    fprintf(fp,
        "      --engine NAME        instead of --plan: grow each step's tree as the engine does,\n"
        "                           sglang or trtllm-dynamic (a dynamic tree: the draft's top-K\n"
        "                           per kept node scored by the product of draft probabilities\n"
        "                           along the path, K kept per level, the N - 1 best verified)\n"
        "      --envelope L,K,N     with --engine: L draft steps, top-K, N verified nodes counting\n"
        "                           the root; checked against the engine's rules (sglang:\n"
        "                           N - 1 <= K + (L - 1) K^2, N = L + 1 when K = 1; trtllm-dynamic:\n"
        "                           L <= N - 1 <= K L). Modes greedy, topk (the engines'\n"
        "                           target-only sampling) and stochastic (Sequoia's verifier on\n"
        "                           the same shape); --report adds every step's tree\n"
        "      --prompt FILE        token ids: whitespace-separated integers, or HDF5 /tokens\n"
        "      --prompt-text FILE   UTF-8 text instead, made into ids with the target's\n"
        "                           tokenizer.json, special tokens (BOS) added as Hugging Face's\n"
        "                           generation adds them (chat templates are not applied: pass\n"
        "                           an already formatted prompt); with --batch, one prompt per\n"
        "                           paragraph (blank-line separated) or per JSON line (.jsonl);\n"
        "                           a .jsonl file is its lines' \"text\" strings either way\n"
        "                           (without --batch, one line)\n"
        "  -n, --max-new-tokens N   tokens to generate (default 128)\n"
        "  -m, --mode MODE          verifier: stochastic (Sequoia, default), specinfer, greedy, topk\n"
        "  -t, --temperature T      sampling temperature (default 1; greedy ignores it)\n"
        "      --top-p P            nucleus truncation in (0, 1] (default 1: none)\n"
        "  -s, --seed S             random seed (default 0)\n"
        "  -o, --output FILE        generated token ids (one line), written atomically; default stdout\n"
        "      --text FILE          the generated text (special tokens skipped), written\n"
        "                           atomically; with --batch JSON Lines: {\"sequence\": k,\n"
        "                           \"text\": ...} per sequence\n"
        "      --ignore-eos         generate --max-new-tokens tokens even past an end-of-sequence\n"
        "                           token (by default a sequence stops at the first one, when\n"
        "                           the target's directory has a tokenizer that names it)\n"
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
        "                           separated by empty lines) with the same plan; a file of more\n"
        "                           than B decodes the first B and warns of the rest, one of fewer\n"
        "                           (S) is used in turn: sequence k decodes prompt k mod S. One\n"
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
        "corpus as an uninterrupted dump). --text FILE instead of --tokens: documents of UTF-8\n"
        "text, one per paragraph (blank-line separated) or, for a name ending in .jsonl, one per\n"
        "JSON line's \"text\" field, made into ids with the target's tokenizer.\n"
        "\n"
        "tokenize: encodes all of standard input, byte for byte, with DIR's tokenizer.json and\n"
        "prints the ids on one line; --no-special leaves out the special tokens the\n"
        "post-processor adds (BOS). --decode reads whitespace-separated ids from standard input\n"
        "and writes their text (--skip-special: without the special tokens).\n"
        "\n"
        "Examples:\n"
        "  " PROG " --draft d/ --target t/ --plan plan.json --prompt p.txt -n 256 --mode greedy\n"
        "  " PROG " --draft d/ --target t/ --plan plan.json --prompt p.txt -m stochastic -t 0.6 \\\n"
        "              --seed 7 -o out.txt --report report.json --validate\n"
        "  " PROG " dump --draft d/ --target t/ --tokens text.txt -o corpus.h5 --top-k 64\n"
        "  " PROG " dump --draft d/ --target t/ --text docs.jsonl -o corpus.h5 --top-k 64\n"
        "  echo 'Hello, world' | " PROG " tokenize --model t/\n"
        "\n"
        "Exit status: 0 success, 1 a --validate check failed, 64 usage error, 65 invalid input\n"
        "data (plan, model, prompt, tokenizer, invalid UTF-8, ids outside the vocabulary), 66\n"
        "input file missing, 70 internal error, 73 cannot create output, 74 I/O error.\n");
}

/* ---- command line ------------------------------------------------------------------------- */

enum {
    OPT_DRAFT = 1000, OPT_BACKEND, OPT_DTYPE, OPT_OFFLOAD, OPT_TARGET, OPT_PROMPT, OPT_TOP_P, OPT_VALIDATE, OPT_SAMPLES,
    OPT_CONTEXT, OPT_THREADS, OPT_NO_BASELINE, OPT_VERSION, OPT_TOKENS, OPT_TOPK, OPT_HALF,
    OPT_RESUME, OPT_BATCH, OPT_COMPRESSION, OPT_PROMPT_TEXT, OPT_TEXT, OPT_IGNORE_EOS,
    OPT_MODEL, OPT_NO_SPECIAL, OPT_DECODE, OPT_SKIP_SPECIAL, OPT_ENGINE, OPT_ENVELOPE,
};

/* ---- tokenize ------------------------------------------------------------------------------- */

/* All of standard input; NULL with the message printed when it cannot be read. */
static char *read_stdin(size_t *len)
{
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        n += fread(buf + n, 1, cap - n, stdin);
        if (ferror(stdin)) {
            fprintf(stderr, PROG ": tokenize: standard input: %s\n", strerror(errno));
            free(buf);
            return NULL;
        }
        if (feof(stdin))
            break;
        char *p = cap <= ((size_t)1 << 40) ? realloc(buf, cap * 2) : NULL;
        if (!p)
            free(buf);
        buf = p;
        cap *= 2;
    }
    if (!buf)
        fprintf(stderr, PROG ": tokenize: standard input: out of memory\n");
    *len = n;
    return buf;
}

/* --decode: the ids of standard input (whitespace-separated) into *ids; SQ_EDATA for a token
 * that is not an id of the tokenizer, naming it. */
static int parse_ids(const char *model, char *text, size_t len, int vocab, int32_t **ids,
                     size_t *n, sq_error *err)
{
    size_t cap = 1024;
    *n = 0;
    *ids = malloc(cap * sizeof **ids);
    if (!*ids)
        return sq_error_oom(err, "ids");
    for (size_t i = 0; i < len;) {
        if (isspace((unsigned char)text[i])) {
            i++;
            continue;
        }
        size_t j = i;
        while (j < len && !isspace((unsigned char)text[j]))
            j++;
        char save = text[j];
        text[j] = '\0';
        int32_t v = 0;
        int how = sq_token_id_parse(text + i, &v);
        text[j] = save;
        if (how == SQ_TOKEN_ID_NOT_INTEGER)
            return sq_error_set(err, SQ_EDATA, "standard input: token %zu: '%.*s' is not a token "
                                "id", *n, (int)(j - i < 40 ? j - i : 40), text + i);
        int w = (int)(j - i < 40 ? j - i : 40);
        const char *more = j - i > 40 ? "..." : "";
        if (how == SQ_TOKEN_ID_OUT_OF_RANGE && text[i] != '-')
            return sq_error_set(err, SQ_EDATA, "standard input: token %zu: id %.*s%s is not a "
                                "token id: it is out of range (token ids are 0 to %d; the "
                                "vocabulary of %s is [0, %d))", *n, w, text + i, more, INT32_MAX,
                                model, vocab);
        if (how == SQ_TOKEN_ID_OUT_OF_RANGE || v >= vocab)
            return sq_error_set(err, SQ_EDATA, "standard input: token %zu: id %.*s%s is outside "
                                "the vocabulary [0, %d) of %s", *n, w, text + i, more, vocab,
                                model);
        if (*n == cap) {
            int32_t *p = realloc(*ids, 2 * cap * sizeof *p);
            if (!p)
                return sq_error_oom(err, "ids");
            *ids = p;
            cap *= 2;
        }
        (*ids)[(*n)++] = (int32_t)v;
        i = j;
    }
    return SQ_OK;
}

static int parse_tokenize(int argc, char **argv)
{
    static const struct option opts[] = {
        {"model", required_argument, NULL, OPT_MODEL},
        {"no-special", no_argument, NULL, OPT_NO_SPECIAL},
        {"decode", no_argument, NULL, OPT_DECODE},
        {"skip-special", no_argument, NULL, OPT_SKIP_SPECIAL},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const char *model = NULL;
    int no_special = 0, decode = 0, skip_special = 0, c;
    opterr = 0;
    optind = 1;
    while ((c = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
        switch (c) {
        case OPT_MODEL: model = optarg; break;
        case OPT_NO_SPECIAL: no_special = 1; break;
        case OPT_DECODE: decode = 1; break;
        case OPT_SKIP_SPECIAL: skip_special = 1; break;
        case 'h': usage(stdout); return sq_cli_finish(PROG, SQ_OK);
        default: return sq_cli_bad_option(PROG, c, argv, optind);
        }
    }
    if (optind < argc) {
        fprintf(stderr, PROG ": tokenize: unexpected argument '%s' (see --help)\n", argv[optind]);
        return SQ_EUSAGE;
    }
    if (!model) {
        fprintf(stderr, PROG ": tokenize needs --model DIR (see --help)\n");
        return SQ_EUSAGE;
    }
    if (decode ? no_special : skip_special) {
        fprintf(stderr, PROG ": tokenize: %s\n", decode ? "--no-special is for encoding"
                : "--skip-special is for --decode");
        return SQ_EUSAGE;
    }
    sq_error err = {0};
    sq_tokenizer *tok = NULL;
    int32_t *ids = NULL;
    char *in = NULL, *text = NULL;
    size_t len = 0, n = 0, tlen = 0;
    /* a missing --model is a missing input (66) as everywhere; a model directory without its
     * tokenizer is bad data (65, man sequoia-run(1)) */
    struct stat mst;
    int exists = stat(model, &mst) == 0;
    int rc = exists ? sq_tokenizer_load(model, &tok, &err)
                    : sq_error_set(&err, SQ_ENOINPUT, "%s: model directory does not exist", model);
    if (exists && rc == SQ_ENOINPUT)
        rc = err.status = SQ_EDATA;
    if (!rc && !(in = read_stdin(&len)))
        rc = SQ_EIO;
    if (!rc && decode) {
        if (!(rc = parse_ids(model, in, len, sq_tokenizer_vocab_size(tok), &ids, &n, &err)) &&
            !(rc = sq_tokenizer_decode(tok, ids, n, skip_special, &text, &tlen, &err)))
            fwrite(text, 1, tlen, stdout);
    } else if (!rc) {
        rc = sq_tokenizer_encode(tok, in, len, !no_special, &ids, &n, &err);
        if (rc) {   /* the message names the input */
            sq_error named = {0};
            sq_error_set(&named, rc, "standard input: %.900s", err.msg);
            err = named;
        }
        for (size_t i = 0; !rc && i < n; i++)
            printf(i ? " %d" : "%d", (int)ids[i]);
        if (!rc)
            putchar('\n');
    }
    if (rc && rc != SQ_EIO)
        fprintf(stderr, PROG ": tokenize: %s\n", err.msg);
    free(ids);
    free(in);
    free(text);
    sq_tokenizer_free(tok);
    return sq_cli_finish(PROG, rc);
}

static int parse_dump(int argc, char **argv)
{
    static const struct option opts[] = {
        {"draft", required_argument, NULL, OPT_DRAFT},
        {"target", required_argument, NULL, OPT_TARGET},
        {"tokens", required_argument, NULL, OPT_TOKENS},
        {"text", required_argument, NULL, OPT_TEXT},
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
        case OPT_TEXT: o.text_file = optarg; break;
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
    if (!o.draft_dir || !o.target_dir || !(o.tokens_file || o.text_file) || !o.out_file) {
        fprintf(stderr, PROG ": dump needs --draft, --target, --tokens (or --text) and -o (see "
                "--help)\n");
        return SQ_EUSAGE;
    }
    if (o.tokens_file && o.text_file) {
        fprintf(stderr, PROG ": dump: --tokens and --text are two sources: give one\n");
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
        /* an output that is an input (a model's files included) is refused before the models
         * load (issue 14) */
        sq_path_use in[] = {{o.tokens_file ? "--tokens" : "--text",
                             o.tokens_file ? o.tokens_file : o.text_file}};
        sq_path_use dirs[] = {{"--draft", o.draft_dir}, {"--target", o.target_dir}};
        sq_path_use out[] = {{"-o", o.out_file}};
        sq_error err = {0};
        if (sq_model_paths_check(in, 1, dirs, 2, out, 1, &err)) {
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
    const char *backend, *dtype, *envelope;
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
        {"engine", required_argument, NULL, OPT_ENGINE},
        {"envelope", required_argument, NULL, OPT_ENVELOPE},
        {"prompt", required_argument, NULL, OPT_PROMPT},
        {"prompt-text", required_argument, NULL, OPT_PROMPT_TEXT},
        {"text", required_argument, NULL, OPT_TEXT},
        {"ignore-eos", no_argument, NULL, OPT_IGNORE_EOS},
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
        case OPT_ENGINE: o->run.engine = optarg; break;
        case OPT_ENVELOPE: o->envelope = optarg; break;
        case OPT_PROMPT: o->run.prompt_file = optarg; break;
        case OPT_PROMPT_TEXT: o->run.prompt_text_file = optarg; break;
        case OPT_TEXT: o->run.text_file = optarg; break;
        case OPT_IGNORE_EOS: o->run.ignore_eos = 1; break;
        case 'n':
            if (sq_cli_int(PROG, "--max-new-tokens", optarg, 1, INT_MAX, &o->run.max_new))
                return SQ_EUSAGE;
            break;
        case 'm':
            o->run.mode_given = 1;
            if (sq_mode_parse(optarg, &o->run.prm.mode)) {
                fprintf(stderr, PROG ": --mode: '%s' is not one of stochastic, specinfer, greedy, "
                        "topk\n", optarg);
                return SQ_EUSAGE;
            }
            break;
        case 't':
            if (sq_cli_double(PROG, "--temperature", optarg, &o->run.prm.temperature))
                return SQ_EUSAGE;
            o->temp_given = o->run.temperature_given = 1;
            break;
        case OPT_TOP_P:
            if (sq_cli_double(PROG, "--top-p", optarg, &o->run.prm.top_p))
                return SQ_EUSAGE;
            o->run.top_p_given = 1;
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
static const char *run_misfit(run_cli *o, int *rc)
{
    static char buf[SQ_ERROR_MSG_MAX + 64];
    *rc = SQ_EUSAGE;
    if (!o->run.draft_dir || !o->run.target_dir || !(o->run.plan_file || o->run.engine) ||
        !(o->run.prompt_file || o->run.prompt_text_file))
        return "--draft, --target, --plan (or --engine with --envelope) and --prompt (or "
               "--prompt-text) are required (see --help)";
    /* with --plan, --engine and --envelope may repeat a dynamic plan's (sq_run_resolve_plan) */
    if (o->run.engine && !o->envelope && !o->run.plan_file)
        return "--engine needs --envelope L,K,N (see --help)";
    if (o->envelope && !o->run.engine && !o->run.plan_file)
        return "--envelope goes with --engine sglang|trtllm-dynamic (see --help)";
    if (o->envelope) {
        sq_error perr = {0};
        if (sq_dyntree_parse_envelope(o->envelope, &o->run.env_steps, &o->run.env_topk,
                                      &o->run.env_nodes, &perr)) {
            snprintf(buf, sizeof buf, "%s", perr.msg);
            return buf;
        }
    }
    /* a dynamic plan's engine, envelope, mode and temperature are the run's */
    sq_error rerr = {0};
    int rrc = sq_run_resolve_plan(&o->run, &rerr);
    if (rrc) {
        *rc = rrc;
        snprintf(buf, sizeof buf, "%s", rerr.msg);
        return buf;
    }
    if (o->run.prompt_file && o->run.prompt_text_file)
        return "--prompt and --prompt-text are two prompts: give one";
    if (o->run.prm.mode == SQ_MODE_GREEDY) {
        o->run.prm.temperature = 0.0;
    } else if (!(o->run.prm.temperature > 0.0)) {
        snprintf(buf, sizeof buf, "--temperature: %s must be > 0 for --mode %s (use --mode greedy "
                 "for argmax decoding)", o->temp_given ? "the value" : "it",
                 sq_mode_name(o->run.prm.mode));
        return buf;
    }
    if (!(o->run.prm.top_p > 0.0 && o->run.prm.top_p <= 1.0)) {
        snprintf(buf, sizeof buf, "--top-p: %.17g is not in (0, 1]", o->run.prm.top_p);
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
    sq_path_use in[] = {{o->run.prompt_file ? "--prompt" : "--prompt-text",
                         o->run.prompt_file ? o->run.prompt_file : o->run.prompt_text_file},
                        {"--plan", o->run.plan_file}};
    sq_path_use dirs[] = {{"--draft", o->run.draft_dir}, {"--target", o->run.target_dir}};
    sq_path_use out[] = {{"-o", o->run.out_file}, {"--report", o->run.report_file},
                         {"--text", o->run.text_file}};
    if (sq_model_paths_check(in, o->run.plan_file ? 2 : 1, dirs, 2, out, 3, &err)) {
        snprintf(buf, sizeof buf, "%s", err.msg);
        return buf;
    }
    return NULL;
}

int main(int argc, char **argv)
{
    sq_cpu_blas_reexec(argv);   /* OpenBLAS with the CPU's own kernels: runtime/cpu_matmul.h */
    sq_model_guard_mappings(PROG);   /* a checkpoint cut short while mapped: exit 74 */
    if (argc > 1 && strcmp(argv[1], "dump") == 0)
        return parse_dump(argc - 1, argv + 1);
    if (argc > 1 && strcmp(argv[1], "tokenize") == 0)
        return parse_tokenize(argc - 1, argv + 1);
    run_cli o;
    int rc = parse_run(argc, argv, &o);
    if (rc != PARSE_RUN)
        return rc;
    const char *why = run_misfit(&o, &rc);
    if (why) {
        fprintf(stderr, PROG ": %s\n", why);
        return rc;
    }
    sq_out_install_signal_handlers();
    return sq_cli_finish(PROG, sq_run(&o.run));
}
