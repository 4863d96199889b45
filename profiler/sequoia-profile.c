/* sequoia-profile: forward latency against the number of new tokens (docs/design.md §4, §7.3). */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "libsequoia/base/cli.h"
#include "libsequoia/base/io.h"
#include "libsequoia/base/json.h"
#include "libsequoia/base/progress.h"
#include "libsequoia/format/profile.h"
#include "profiler/latency_svg.h"
#include "profiler/measure.h"
#include "profiler/merge.h"
#include "profiler/stability.h"
#include "profiler/stepcost.h"
#include "runtime/arch.h"
#include "runtime/config.h"
#include "runtime/memory.h"
#include "runtime/model.h"
#include "runtime/cpu_matmul.h"

#define PROG "sequoia-profile"
#define MAX_LIST 256

static void usage(FILE *fp)
{
    fprintf(fp,
        "Usage: " PROG " --model DIR|config.json [--backend cpu|cuda] [--dtype f32|f16|bf16]\n"
        "                       [--tokens LIST | --max-tokens N] [--prefix L] [--warmup W]\n"
        "                       [--repeat R] [--threads T] [--no-refine] -o PROFILE.json\n"
        "                       [--svg CURVE.svg] [--offload] [--batch LIST] [--quiet]\n"
        "                       [--draft DIR|config.json [--step-tokens LIST]] [--force]\n"
        "       " PROG " --model DIR|config.json --dry-run [options as above]\n"
        "       " PROG " --import ENGINE.csv [--engine NAME] -o PROFILE.json [--svg CURVE.svg]\n"
        "       " PROG " --merge A.json B.json ... -o PROFILE.json [--svg CURVE.svg] [--force]\n"
        "\n"
        "Times the runtime's forward over n new tokens on top of a KV prefix of L tokens and\n"
        "writes the latency profile that sequoia-plan --target-profile/--draft-profile reads.\n"
        "\n"
        "Options:\n"
        "  -m, --model PATH       a Hugging Face directory (config.json + model.safetensors), or a\n"
        "                         config.json alone: then random weights of that shape are used,\n"
        "                         since latency depends on shapes, not values. A directory without\n"
        "                         a checkpoint, or with a broken one, is an error\n"
        "      --random-weights   random weights of the model's shape, even when the directory has\n"
        "                         a checkpoint (also --random)\n"
        "  -b, --backend NAME     cpu (default) or cuda\n"
        "      --dtype NAME       the weights: f32, f16 or bf16 on the CPU (default: the\n"
        "                         checkpoint's own, read in place; random weights: bf16), f16\n"
        "                         (default) or bf16 on CUDA\n"
        "      --tokens LIST      token counts, e.g. 1,2,4,8 (strictly increasing)\n"
        "      --max-tokens N     powers of two from 1 to N, plus N (default 1024, or what fits the\n"
        "                         model's context), refined where the curve bends\n"
        "      --no-refine        measure only the listed counts\n"
        "      --prefix L         committed KV prefix under each forward (default 512, or what\n"
        "                         fits the model's context beside the largest count)\n"
        "      --batch LIST       batch sizes, e.g. 1,2,4,8,16,32,64 (strictly increasing): each\n"
        "                         point times b independent sequences x n tokens in one forward,\n"
        "                         each on its own KV prefix of L tokens (a version 2 profile,\n"
        "                         for sequoia-plan --ladder); default 1. On CUDA the contexts\n"
        "                         share one copy of the weights\n"
        "      --warmup W         untimed forwards before each round's samples of a point, and at\n"
        "                         least 100 ms of them (default 2)\n"
        "      --repeat R         timed forwards per point, in rounds of 10 over all points\n"
        "                         (default 10)\n"
        "      --threads T        CPU threads (default: all cores)\n");
    fprintf(fp,
        "      --draft PATH       also time speculative steps as decoding runs them, with this\n"
        "                         draft (a directory or a config.json, as --model): the target's\n"
        "                         forward after the draft's, the draft's first and level\n"
        "                         forwards, the step's work outside the forwards; written as the\n"
        "                         profile's \"step\" section, which sequoia-plan plans from\n"
        "      --step-tokens LIST tree sizes of the timed steps (default 1,2,3,4,5,6,8,10,12,16,\n"
        "                         24,32,48,64, up to the largest --tokens count)\n"
        "      --force            write the profile even when it is not credible: a time that\n"
        "                         falls as the token count grows (beyond 25%% and the points'\n"
        "                         spread, or beyond 25%% when every point is noisy), or rounds\n"
        "                         that disagree (median p10-p90 spread over\n"
        "                         the median), still so after the suspect points are timed again\n"
        "                         (exit 65 without --force; with --repeat under 10 it is said,\n"
        "                         not refused)\n"
        "      --offload          CUDA: keep the weights in pinned host memory and stream them to\n"
        "                         the GPU layer by layer (double-buffered), for models larger than\n"
        "                         the GPU's memory; the profile's backend reads cuda-offload\n"
        "  -o, --output FILE      the profile (atomically)\n"
        "      --svg FILE         a picture of latency against tokens\n"
        "      --import CSV       turn another engine's measurements (header tokens,ms; or s, us;\n"
        "                         batch,tokens,ms for a batch profile) into a profile\n"
        "      --engine NAME      the engine named in an imported profile (default: imported)\n"
        "      --merge FILE...    pool profiles of one setup taken at different times (the same\n"
        "                         model, backend, dtype, device, threads, prefix, batch sizes,\n"
        "                         token counts and step section; else exit 65 naming the file\n"
        "                         and the field) into one: each point the median of the files'\n"
        "                         medians (p10, p90: the median of theirs), samples summed; the\n"
        "                         result records its sources and their time span (\"merged\")\n"
        "                         and is judged credible as a measured profile is (see --force)\n"
        "      --pool median|mean with --merge: each point the median of the files' medians\n"
        "                         (default; robust to one slow slice) or their mean (the time\n"
        "                         average, what a long run's mean rate sees)\n"
        "      --dry-run          read the model's shape and check the options against it (context,\n"
        "                         dtype, the CPU's memory) as a run would, print what the run would\n"
        "                         time and allocate, and stop before making or mapping any weights;\n"
        "                         nothing is written and -o is not needed\n");
    fprintf(fp,
        "  -q, --quiet            no progress bar\n"
        "  -h, --help             this text\n"
        "      --version          the version\n"
        "\n"
        "Examples:\n"
        "  " PROG " --model data/models/target -o target.json --svg target.svg\n"
        "  " PROG " --model llama2-7b/config.json --backend cuda --dtype f16 --prefix 512 -o a100.json\n"
        "  " PROG " --model draft/ --tokens 1,2,4,8,16,32 --repeat 20 -o draft.json\n"
        "  " PROG " --model llama2-70b/config.json --backend cuda --offload --repeat 3 -o l40.json\n"
        "  " PROG " --import vllm_latency.csv --engine vllm -o vllm.json\n"
        "  " PROG " --merge slice0.json slice1.json slice2.json -o pooled.json\n"
        "\n"
        "Exit status: 0 success, 64 usage error, 65 invalid input data or a measured profile that is\n"
        "not credible (see --force), 66 input missing,\n"
        "70 internal error, 73 cannot create output, 74 I/O error.\n");
}

static int parse_list_of(const char *opt, long max, const char *s, int *v, int *n)
{
    *n = 0;
    const char *p = s;
    while (*p) {
        char *end;
        errno = 0;
        long x = strtol(p, &end, 10);
        if (errno || end == p || x < 1 || x > max || (*end && (*end != ',' || !end[1]))) {
            fprintf(stderr, PROG ": %s: '%s' is not a comma-separated list of counts from 1 to "
                    "%ld\n", opt, s, max);
            return SQ_EUSAGE;
        }
        if (*n == MAX_LIST) {
            fprintf(stderr, PROG ": %s: more than %d counts\n", opt, MAX_LIST);
            return SQ_EUSAGE;
        }
        if (*n > 0 && x <= v[*n - 1]) {
            fprintf(stderr, PROG ": %s: %ld after %d, counts must increase strictly\n", opt, x,
                    v[*n - 1]);
            return SQ_EUSAGE;
        }
        v[(*n)++] = (int)x;
        p = *end ? end + 1 : end;
    }
    if (*n == 0) {
        fprintf(stderr, PROG ": %s: empty list\n", opt);
        return SQ_EUSAGE;
    }
    return SQ_OK;
}

static int parse_list(const char *s, int *v, int *n)
{
    return parse_list_of("--tokens", SQ_PROFILE_MAX_TOKENS, s, v, n);
}

static char *cpu_name(int threads)
{
    char name[256] = "unknown CPU";
    FILE *fp = fopen("/proc/cpuinfo", "r");
    if (fp) {
        char line[512];
        while (fgets(line, sizeof line, fp)) {
            if (strncmp(line, "model name", 10) == 0) {
                char *c = strchr(line, ':');
                if (c) {
                    c++;
                    while (*c == ' ')
                        c++;
                    c[strcspn(c, "\n")] = '\0';
                    snprintf(name, sizeof name, "%s", c);
                }
                break;
            }
        }
        fclose(fp);
    }
    char *out = malloc(strlen(name) + 32);
    if (out)
        sprintf(out, "%s (%d thread%s)", name, threads, threads == 1 ? "" : "s");
    return out;
}

typedef struct {
    int quiet;
    sq_progress bar;
} progress_state;

/* The sweep's progress: points done (libsequoia/base/progress.h); tokens == 0 ends it. */
static void on_progress(void *user, int done, int total, int tokens)
{
    progress_state *ps = user;
    if (done == 0 && tokens)
        sq_progress_start(&ps->bar, PROG, "timing", "points", ps->quiet, 0);
    sq_progress_update(&ps->bar, done, total);
    if (!tokens)
        sq_progress_end(&ps->bar);
}

static int is_dir(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

static int file_exists(const char *dir, const char *name)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    struct stat st;
    return stat(path, &st) == 0;
}

/* NULL if out of memory. */
static cJSON *model_json(const char *name, const sq_model_config *c, int random)
{
    sq_json_build b = sq_json_build_begin();
    cJSON *m = cJSON_CreateObject();
    sq_json_add(m, "name", cJSON_CreateString(name));
    sq_json_add(m, "weights", cJSON_CreateString(random ? "random" : "checkpoint"));
    sq_json_add(m, "dim", cJSON_CreateNumber(c->dim));
    sq_json_add(m, "hidden_dim", cJSON_CreateNumber(c->hidden_dim));
    sq_json_add(m, "n_layers", cJSON_CreateNumber(c->n_layers));
    sq_json_add(m, "n_heads", cJSON_CreateNumber(c->n_heads));
    sq_json_add(m, "n_kv_heads", cJSON_CreateNumber(c->n_kv_heads));
    sq_json_add(m, "vocab_size", cJSON_CreateNumber(c->vocab_size));
    sq_json_add(m, "max_position", cJSON_CreateNumber(c->max_position));
    sq_json_add(m, "params", cJSON_CreateNumber((double)sq_model_config_params(c)));
    return sq_json_build_end(b, m);
}

/* The "stability" object (docs/formats.md): what profiler/stability.h found. */
static cJSON *stability_json(const sq_stability *st, int forced)
{
    cJSON *o = cJSON_CreateObject();
    sq_json_add(o, "load_at_start", isnan(st->load1) ? cJSON_CreateNull()
                                                     : cJSON_CreateNumber(st->load1));
    sq_json_add(o, "cores", cJSON_CreateNumber(st->cores));
    sq_json_add(o, "busy_at_start", cJSON_CreateBool(st->busy));
    sq_json_add(o, "median_spread", cJSON_CreateNumber(st->median_spread));
    cJSON *falls = cJSON_CreateArray();
    for (int k = 0; k < 2; k++) {
        const sq_profile_fall *f = k ? st->step_falls : st->falls;
        int n = k ? st->n_step_falls : st->n_falls;
        for (int i = 0; i < n && i < SQ_STABILITY_MAX_FALLS; i++) {
            cJSON *e = cJSON_CreateObject();
            sq_json_add(e, "table", cJSON_CreateString(k ? "step.target" : "points"));
            sq_json_add(e, "batch", cJSON_CreateNumber(f[i].batch));
            sq_json_add(e, "tokens", cJSON_CreateNumber(f[i].tokens));
            sq_json_add(e, "median_ms", cJSON_CreateNumber(f[i].ms));
            sq_json_add(e, "ref_tokens", cJSON_CreateNumber(f[i].ref_tokens));
            sq_json_add(e, "ref_median_ms", cJSON_CreateNumber(f[i].ref_ms));
            sq_json_append(falls, e);
        }
    }
    sq_json_add(o, "falls", falls);
    sq_json_add(o, "credible", cJSON_CreateBool(!st->refuse));
    sq_json_add(o, "forced", cJSON_CreateBool(forced && st->refuse));
    return o;
}

/* extra: members added to the profile's top level (measured_at, merged), or NULL. */
static int write_outputs(const sq_profile *p, const char *out_file, const char *svg_file,
                         const char *title, double unstable, const int *unstable_at, int n_unstable,
                         const sq_stability *stab, int forced, const cJSON *extra, sq_error *err)
{
    sq_out *o = NULL, *s = NULL;
    int rc;
    if ((rc = sq_out_open(&o, out_file, err)))
        return rc;
    if (svg_file && (rc = sq_out_open(&s, svg_file, err))) {
        sq_out_abort(o);
        return rc;
    }
    sq_json_build b = sq_json_build_begin();
    cJSON *j = sq_profile_to_json(p);
    /* unstable_at: indices of points. unstable_tokens lists their token counts; a batch
     * profile (version 2) also lists each as {batch, tokens} in unstable_points, so that the
     * batch size is not lost (issue 27 W13) */
    int batched = 0;
    for (int i = 0; i < p->n; i++)
        batched |= p->points[i].batch > 1;
    int tokens[MAX_LIST + 64];
    cJSON *pts = batched ? cJSON_CreateArray() : NULL;
    for (int i = 0; i < n_unstable; i++) {
        const sq_profile_point *q = &p->points[unstable_at[i]];
        tokens[i] = q->tokens;
        if (pts) {
            cJSON *e = cJSON_CreateObject();
            sq_json_add(e, "batch", cJSON_CreateNumber(q->batch));
            sq_json_add(e, "tokens", cJSON_CreateNumber(q->tokens));
            sq_json_append(pts, e);
        }
    }
    sq_json_add(j, "unstable_tokens", sq_json_int_array(tokens, (size_t)n_unstable));
    if (pts)
        sq_json_add(j, "unstable_points", pts);
    sq_json_add(j, "unstable_threshold", cJSON_CreateNumber(unstable));
    if (stab)
        sq_json_add(j, "stability", stability_json(stab, forced));
    for (const cJSON *x = extra ? extra->child : NULL; x; x = x->next)
        sq_json_add(j, x->string, cJSON_Duplicate(x, 1));
    if (!(j = sq_json_build_end(b, j))) {
        sq_out_abort(o);
        sq_out_abort(s);
        return sq_error_oom(err, "the profile's JSON tree");
    }
    sq_json_print(sq_out_stream(o), j);
    cJSON_Delete(j);
    if (s)
        sq_latency_svg_write(sq_out_stream(s), p, title, unstable);
    /* both written out before either is renamed: a full disk leaves both as they were */
    sq_out *outs[2] = {o, s};
    return sq_cli_commit(outs, 2, err);
}

typedef struct profile_opts {
    const char *model_path, *backend, *dtype, *out_file, *svg_file, *import_file, *engine;
    int tokens[MAX_LIST], ntokens, max_tokens, threads, force_random, offload, dry_run;
    int batches[MAX_LIST], nbatches;
    const char *draft_path;
    int step_tokens[MAX_LIST], nstep, force;
    int merge;             /* --merge: the operands are the profiles to pool              */
    const char *pool;      /* --pool median|mean (with --merge), NULL: median              */
    char *const *merge_files;
    int n_merge;
    const char *measuring; /* the first option given that measures (refused with --merge) */
    time_t started;        /* when the measurement began                                  */
    double load1;          /* the 1-minute load average when the run started; NAN unknown */
    sq_stability stab;
    int prefix_given, max_given;
    sq_backend_kind kind;
    double weight_bytes;   /* weights one forward reads (sq_weights_read_bytes) */
    progress_state ps;
    sq_measure_params mp;
} profile_opts;

#define PARSE_RUN (-1)   /* parse_options: go on and run */

/* Fills *o from argv. Returns PARSE_RUN, or the exit status (--help, errors). */
static int parse_options(int argc, char **argv, profile_opts *o)
{
    static const struct option opts[] = {
        {"model", required_argument, NULL, 'm'},   {"backend", required_argument, NULL, 'b'},
        {"dtype", required_argument, NULL, 'D'},   {"tokens", required_argument, NULL, 'T'},
        {"max-tokens", required_argument, NULL, 'M'}, {"prefix", required_argument, NULL, 'P'},
        {"warmup", required_argument, NULL, 'W'},  {"repeat", required_argument, NULL, 'R'},
        {"threads", required_argument, NULL, 't'}, {"output", required_argument, NULL, 'o'},
        {"svg", required_argument, NULL, 'S'},     {"import", required_argument, NULL, 'I'},
        {"engine", required_argument, NULL, 'E'},  {"random", no_argument, NULL, 'r'},
        {"no-refine", no_argument, NULL, 'n'},     {"quiet", no_argument, NULL, 'q'},
        {"offload", no_argument, NULL, 'O'},     {"batch", required_argument, NULL, 'B'},
        {"random-weights", no_argument, NULL, 'r'}, {"dry-run", no_argument, NULL, 'd'},
        {"version", no_argument, NULL, 'V'},
        {"draft", required_argument, NULL, 'G'}, {"step-tokens", required_argument, NULL, 'K'},
        {"force", no_argument, NULL, 'F'}, {"merge", no_argument, NULL, 'X'},
        {"pool", required_argument, NULL, 'Y'},
        {"help", no_argument, NULL, 'h'},          {NULL, 0, NULL, 0},
    };
    *o = (profile_opts){.backend = "cpu", .max_tokens = 1024, .mp = sq_measure_default_params()};
    int c;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":m:b:o:t:qh", opts, NULL)) != -1) {
        int lo = c == 'M' || c == 'R' ? 1 : 0;
        int *num = c == 'M' ? &o->max_tokens : c == 'P' ? &o->mp.prefix : c == 'W' ? &o->mp.warmup
                 : c == 'R' ? &o->mp.repeat : &o->threads;
        const char *name = c == 'M' ? "--max-tokens" : c == 'P' ? "--prefix" : c == 'W'
                         ? "--warmup" : c == 'R' ? "--repeat" : "--threads";
        /* the options that only a measurement (or an import) reads */
        static const struct { char c; const char *name; } meas[] = {
            {'m', "--model"}, {'b', "--backend"}, {'D', "--dtype"}, {'T', "--tokens"},
            {'M', "--max-tokens"}, {'P', "--prefix"}, {'W', "--warmup"}, {'R', "--repeat"},
            {'t', "--threads"}, {'I', "--import"}, {'E', "--engine"}, {'r', "--random-weights"},
            {'n', "--no-refine"}, {'O', "--offload"}, {'B', "--batch"}, {'d', "--dry-run"},
            {'G', "--draft"}, {'K', "--step-tokens"}};
        for (size_t k = 0; k < sizeof meas / sizeof *meas && !o->measuring; k++)
            if (meas[k].c == c)
                o->measuring = meas[k].name;
        switch (c) {
        case 'm': o->model_path = optarg; break;
        case 'b': o->backend = optarg; break;
        case 'D': o->dtype = optarg; break;
        case 'T': if (parse_list(optarg, o->tokens, &o->ntokens)) return SQ_EUSAGE; break;
        case 'B':
            if (parse_list_of("--batch", SQ_PROFILE_MAX_BATCH, optarg, o->batches, &o->nbatches))
                return SQ_EUSAGE;
            break;
        case 't':
            if (sq_cli_threads(PROG, "--threads", optarg, &o->threads))
                return SQ_EUSAGE;
            break;
        case 'M': case 'P': case 'W': case 'R':
            if (sq_cli_int(PROG, name, optarg, lo, INT_MAX, num))
                return SQ_EUSAGE;
            o->prefix_given |= c == 'P';
            o->max_given |= c == 'M';
            break;
        case 'G': o->draft_path = optarg; break;
        case 'K':
            if (parse_list_of("--step-tokens", SQ_PROFILE_MAX_TOKENS, optarg, o->step_tokens,
                              &o->nstep))
                return SQ_EUSAGE;
            break;
        case 'F': o->force = 1; break;
        case 'X': o->merge = 1; break;
        case 'Y': o->pool = optarg; break;
        case 'o': o->out_file = optarg; break;
        case 'S': o->svg_file = optarg; break;
        case 'I': o->import_file = optarg; break;
        case 'E': o->engine = optarg; break;
        case 'r': o->force_random = 1; break;
        case 'O': o->offload = 1; break;
        case 'd': o->dry_run = 1; break;
        case 'n': o->mp.refine = 0; break;
        case 'q': o->ps.quiet = 1; break;
        case 'h': usage(stdout); return sq_cli_finish(PROG, SQ_OK);
        case 'V': printf(PROG " %s\n", SQ_VERSION); return sq_cli_finish(PROG, SQ_OK);
        default: return sq_cli_bad_option(PROG, c, argv, optind);
        }
    }
    if (o->merge) {
        o->merge_files = argv + optind;
        o->n_merge = argc - optind;
    } else if (optind < argc) {
        fprintf(stderr, PROG ": unexpected argument '%s' (see --help)\n", argv[optind]);
        return SQ_EUSAGE;
    }
    return PARSE_RUN;
}

/* --merge: profiles to pool, no measuring option, no output that is an input. */
static const char *misfit_merge(const profile_opts *o, char *buf, size_t cap)
{
    if (o->pool && strcmp(o->pool, "median") && strcmp(o->pool, "mean")) {
        snprintf(buf, cap, "--pool '%.100s': expected median or mean", o->pool);
        return buf;
    }
    if (o->measuring) {
        snprintf(buf, cap, "--merge pools profiles already taken; %s measures (see --help)",
                 o->measuring);
        return buf;
    }
    if (o->n_merge < 1)
        return "--merge: give the profiles to pool, e.g. --merge a.json b.json -o pooled.json";
    if (o->n_merge > MAX_LIST) {
        snprintf(buf, cap, "--merge: %d profiles, more than the limit of %d", o->n_merge,
                 MAX_LIST);
        return buf;
    }
    sq_path_use in[MAX_LIST];
    for (int i = 0; i < o->n_merge; i++)
        in[i] = (sq_path_use){"--merge", o->merge_files[i]};
    sq_path_use out[] = {{"-o", o->out_file}, {"--svg", o->svg_file}};
    sq_error e = {0};
    if (sq_paths_check(in, o->n_merge, out, 2, &e) || sq_paths_distinct(in, o->n_merge, &e)) {
        snprintf(buf, cap, "%s", e.msg);
        return buf;
    }
    return NULL;
}

/* Checks the options that depend on each other, settles the backend, dtype and token counts;
 * NULL when they fit, else the message. */
static const char *misfit(profile_opts *o)
{
    static char buf[SQ_ERROR_MSG_MAX + 64];
    if (!o->out_file && !o->dry_run)
        return "-o PROFILE.json is required (see --help)";
    if (o->merge)
        return misfit_merge(o, buf, sizeof buf);
    if (o->pool)
        return "--pool goes with --merge (it says how the profiles are pooled; see --help)";
    if (o->dry_run && o->import_file)
        return "--dry-run checks a --model; it does not apply to --import";
    if (!!o->model_path == !!o->import_file)
        return "give exactly one of --model and --import (see --help)";
    if (o->ntokens > 0 && o->max_given)
        return "give one of --tokens (the counts) and --max-tokens (counts doubling up to N)";
    if (o->max_tokens > SQ_PROFILE_MAX_TOKENS) {
        snprintf(buf, sizeof buf, "--max-tokens: %d exceeds the limit of %d", o->max_tokens,
                 SQ_PROFILE_MAX_TOKENS);
        return buf;
    }
    /* an output that is an input, or both outputs on one file (issue 14) */
    sq_path_use in[] = {{"--import", o->import_file}, {"--model", o->model_path},
                        {"--draft", o->draft_path}};
    sq_path_use dirs[] = {{"--model", o->model_path}, {"--draft", o->draft_path}};
    sq_path_use out[] = {{"-o", o->out_file}, {"--svg", o->svg_file}};
    sq_error e = {0};
    if (sq_model_paths_check(in, 3, dirs, 2, out, 2, &e)) {
        snprintf(buf, sizeof buf, "%s", e.msg);
        return buf;
    }
    if (o->import_file && (o->draft_path || o->nstep))
        return "--draft/--step-tokens time steps; they do not apply to --import";
    if (o->nstep && !o->draft_path)
        return "--step-tokens needs --draft PATH (see --help)";
    if (o->import_file)
        return o->nbatches ? "--batch measures forwards; it does not apply to --import" : NULL;
    if (strcmp(o->backend, "cpu") && strcmp(o->backend, "cuda")) {
        snprintf(buf, sizeof buf, "--backend: unknown backend '%.100s' (cpu or cuda)", o->backend);
        return buf;
    }
    o->kind = !strcmp(o->backend, "cpu") ? SQ_BACKEND_CPU : SQ_BACKEND_CUDA;
    /* no --dtype: CUDA f16; the CPU the checkpoint's own or, for random weights, bf16
     * (settled in load_model) */
    if (!o->dtype && o->kind == SQ_BACKEND_CUDA)
        o->dtype = "f16";
    if (o->dtype && strcmp(o->dtype, "f32") && strcmp(o->dtype, "f16") &&
        strcmp(o->dtype, "bf16")) {
        snprintf(buf, sizeof buf, "--dtype: unknown dtype '%.100s' (f32, f16 or bf16)", o->dtype);
        return buf;
    }
    if (o->offload && o->kind != SQ_BACKEND_CUDA)
        return "--offload streams weights to a GPU: it needs --backend cuda";
    if (o->nbatches == 0)
        o->batches[o->nbatches++] = 1;
    if (o->ntokens > 0)
        o->mp.refine = 0; /* an explicit list is measured as given */
    return NULL;
}

/* The token counts and the prefix, once the model's context C is known. Defaults that would
 * not fit (prefix 512 + 1024 tokens on a 1024-position model) shrink to fit, said in one line;
 * counts given on the command line are kept (the check after this names them). */
static void settle_counts(profile_opts *o, int context)
{
    int prefix0 = o->mp.prefix, max0 = o->max_tokens;
    int biggest = o->ntokens > 0 ? o->tokens[o->ntokens - 1] : o->max_tokens;
    if ((long long)o->mp.prefix + biggest > context) {
        if (o->ntokens == 0 && !o->max_given) {
            /* room for the prefix first when it was given, else half the context each */
            int room = o->prefix_given ? context - o->mp.prefix : context / 2;
            if (room >= 1 && room < o->max_tokens)
                o->max_tokens = room;
            biggest = o->max_tokens;
        }
        if (!o->prefix_given && (long long)o->mp.prefix + biggest > context &&
            context - biggest >= 0)
            o->mp.prefix = context - biggest;
    }
    if (o->mp.prefix != prefix0 || o->max_tokens != max0)
        fprintf(stderr, PROG ": notice: the model's context is %d positions: using --prefix %d "
                "and up to %d tokens by default (was %d + %d)\n", context, o->mp.prefix,
                o->ntokens ? biggest : o->max_tokens, prefix0, o->ntokens ? biggest : max0);
    if (o->ntokens == 0) {
        for (int n = 1; n <= o->max_tokens && o->ntokens < MAX_LIST; n *= 2)
            o->tokens[o->ntokens++] = n;
        if (o->tokens[o->ntokens - 1] != o->max_tokens)
            o->tokens[o->ntokens++] = o->max_tokens;
    }
}

/* --import CSV: another engine's measurements as a profile. */
static int import_profile(const profile_opts *o, sq_error *err)
{
    sq_profile *p;
    int rc = sq_profile_from_csv(o->import_file, o->engine, &p, err);
    if (rc)
        return rc;
    char title[512];
    snprintf(title, sizeof title, "%s latency (imported from %s)", p->backend, o->import_file);
    rc = write_outputs(p, o->out_file, o->svg_file, title, o->mp.unstable, NULL, 0, NULL, 0, NULL,
                       err);
    sq_profile_free(p);
    return rc;
}

/* t as "2026-12-01T18:58:06Z" (UTC) into buf[32]. */
static void utc_text(time_t t, char *buf)
{
    struct tm tm;
    if (!gmtime_r(&t, &tm) || !strftime(buf, 32, "%Y-%m-%dT%H:%M:%SZ", &tm))
        snprintf(buf, 32, "unknown");
}

/* "2026-12-01T18:58:06Z" back to a time; -1 when s is not of that form. */
static time_t utc_parse(const char *s)
{
    struct tm tm = {0};
    char z = 0;
    if (!s || sscanf(s, "%4d-%2d-%2dT%2d:%2d:%2d%c", &tm.tm_year, &tm.tm_mon, &tm.tm_mday,
                     &tm.tm_hour, &tm.tm_min, &tm.tm_sec, &z) != 7 || z != 'Z')
        return (time_t)-1;
    tm.tm_year -= 1900;
    tm.tm_mon -= 1;
    return timegm(&tm);
}

/* {"start": ..., "end": ...}: the "measured_at" object (docs/formats.md); NULL if out of
 * memory. */
static cJSON *measured_at_json(time_t start, time_t end)
{
    char a[32], b[32];
    utc_text(start, a);
    utc_text(end, b);
    sq_json_build bl = sq_json_build_begin();
    cJSON *o = cJSON_CreateObject();
    sq_json_add(o, "start", cJSON_CreateString(a));
    sq_json_add(o, "end", cJSON_CreateString(b));
    return sq_json_build_end(bl, o);
}

/* When a source profile was taken: its "measured_at" (start, end), else, for a profile without
 * one (written before measured_at was recorded), the file's modification time for both;
 * *from_mtime says which. A measured_at that is there but not two UTC times in order is an
 * error (SQ_EDATA naming the field), never replaced by the file's date. */
static int source_time(const cJSON *root, const char *file, time_t *start, time_t *end,
                       int *from_mtime, sq_error *err)
{
    const cJSON *m = sq_json_field(root, "measured_at");
    *from_mtime = 0;
    if (!m) {
        struct stat st;
        *start = *end = stat(file, &st) == 0 ? st.st_mtime : (time_t)-1;
        *from_mtime = 1;
        return SQ_OK;
    }
    if (!cJSON_IsObject(m))
        return sq_error_set(err, SQ_EDATA, "%s: measured_at: expected an object with \"start\" "
                            "and \"end\"", file);
    static const char *const key[2] = {"start", "end"};
    time_t *t[2] = {start, end};
    for (int i = 0; i < 2; i++) {
        const char *v = cJSON_GetStringValue(sq_json_field(m, key[i]));
        if (!v)
            return sq_error_set(err, SQ_EDATA, "%s: measured_at.%s: missing or not a string "
                                "(a UTC time like 2026-12-01T18:58:06Z)", file, key[i]);
        if ((*t[i] = utc_parse(v)) == (time_t)-1)
            return sq_error_set(err, SQ_EDATA, "%s: measured_at.%s: '%s' is not a UTC time "
                                "like 2026-12-01T18:58:06Z", file, key[i], v);
    }
    if (*end < *start)
        return sq_error_set(err, SQ_EDATA, "%s: measured_at: end %s is before start %s", file,
                            cJSON_GetStringValue(sq_json_field(m, "end")),
                            cJSON_GetStringValue(sq_json_field(m, "start")));
    return SQ_OK;
}

static int judge_and_write(profile_opts *o, const sq_profile *prof, const char *title,
                           const cJSON *extra, sq_error *err);

/* --merge: the operands pooled (profiler/merge.h), judged as a measured profile is, written with
 * "measured_at" (the sources' span) and "merged" (docs/formats.md, "Merged profiles"). */
static int merge_profiles(profile_opts *o, sq_error *err)
{
    int n = o->n_merge, rc = SQ_OK;
    sq_profile **in = calloc((size_t)n, sizeof *in);
    time_t *t0 = calloc((size_t)n, sizeof *t0), *t1 = calloc((size_t)n, sizeof *t1);
    int *mt = calloc((size_t)n, sizeof *mt);
    sq_profile *m = NULL;
    cJSON *extra = NULL;
    if (!in || !t0 || !t1 || !mt) {
        rc = sq_error_oom(err, "--merge");
        goto done;
    }
    for (int i = 0; i < n && !rc; i++) {
        cJSON *root = NULL;
        if (!(rc = sq_json_load(o->merge_files[i], &root, err)))
            rc = sq_profile_from_json(root, o->merge_files[i], &in[i], err);
        if (!rc)
            rc = source_time(root, o->merge_files[i], &t0[i], &t1[i], &mt[i], err);
        cJSON_Delete(root);
    }
    sq_merge_drift drift;
    const int mean = o->pool && !strcmp(o->pool, "mean");
    if (rc || (rc = sq_profile_merge((const sq_profile *const *)in,
                                     (const char *const *)o->merge_files, n,
                                     mean ? SQ_POOL_MEAN : SQ_POOL_MEDIAN, &m, &drift, err)))
        goto done;
    time_t lo = (time_t)-1, hi = (time_t)-1;
    for (int i = 0; i < n; i++) {
        if (t0[i] != (time_t)-1 && (lo == (time_t)-1 || t0[i] < lo))
            lo = t0[i];
        if (t1[i] != (time_t)-1 && (hi == (time_t)-1 || t1[i] > hi))
            hi = t1[i];
    }
    sq_json_build b = sq_json_build_begin();
    extra = cJSON_CreateObject();
    if (lo != (time_t)-1 && hi != (time_t)-1)
        sq_json_add(extra, "measured_at", measured_at_json(lo, hi));
    cJSON *mg = cJSON_CreateObject();
    sq_json_add(mg, "sources", cJSON_CreateNumber(n));
    sq_json_add(mg, "span_s", lo != (time_t)-1 && hi != (time_t)-1
                              ? cJSON_CreateNumber((double)(hi - lo)) : cJSON_CreateNull());
    sq_json_add(mg, "pool", cJSON_CreateString(mean ? "mean of the sources' medians (p10, p90: "
                                                      "the median of theirs; samples summed)"
                                                    : "median of the sources' medians (p10, p90: "
                                                      "the median of theirs; samples summed)"));
    cJSON *files = cJSON_CreateArray();
    for (int i = 0; i < n; i++) {
        cJSON *f = cJSON_CreateObject();
        sq_json_add(f, "file", cJSON_CreateString(o->merge_files[i]));
        sq_json_add(f, "measured_at", t0[i] != (time_t)-1 ? measured_at_json(t0[i], t1[i])
                                                          : cJSON_CreateNull());
        sq_json_add(f, "time_from", cJSON_CreateString(mt[i] ? "mtime" : "measured_at"));
        sq_json_append(files, f);
    }
    sq_json_add(mg, "files", files);
    cJSON *dr = cJSON_CreateObject();
    sq_json_add(dr, "median", cJSON_CreateNumber(drift.median));
    sq_json_add(dr, "max", cJSON_CreateNumber(drift.max));
    sq_json_add(dr, "max_batch", cJSON_CreateNumber(drift.max_batch));
    sq_json_add(dr, "max_tokens", cJSON_CreateNumber(drift.max_tokens));
    sq_json_add(mg, "drift", dr);
    sq_json_add(extra, "merged", mg);
    if (!(extra = sq_json_build_end(b, extra))) {
        rc = sq_error_oom(err, "--merge");
        goto done;
    }
    if (!o->ps.quiet)
        fprintf(stderr, PROG ": pooled %d profile%s over %.0f s; the sources' medians spread by "
                "%.1f%% at the median point, %.1f%% at most (%d tokens%s)\n", n,
                n == 1 ? "" : "s", lo != (time_t)-1 && hi != (time_t)-1 ? (double)(hi - lo) : 0.0,
                100 * drift.median, 100 * drift.max, drift.max_tokens,
                drift.max_batch > 1 ? ", batch > 1" : "");
    char title[600];
    const char *name = cJSON_GetStringValue(sq_json_field(m->model, "name"));
    snprintf(title, sizeof title, "%.200s on %.200s (%s, prefix %d, %d profiles pooled)",
             name ? name : "model", m->device, m->dtype, m->prefix, n);
    rc = judge_and_write(o, m, title, extra, err);
done:
    for (int i = 0; in && i < n; i++)
        sq_profile_free(in[i]);
    free(in);
    free(t0);
    free(t1);
    free(mt);
    sq_profile_free(m);
    cJSON_Delete(extra);
    return rc;
}

/* The model: a checkpoint directory, or a shape (config.json) with random weights. */
static int load_model(profile_opts *o, sq_model **model, sq_model_config *cfg,
                      int *random, sq_error *err)
{
    int rc;
    *model = NULL;
    *random = o->force_random;
    if (is_dir(o->model_path)) {
        /* random weights only on purpose: a config.json given as the model, or --random-weights;
         * a directory whose checkpoint is missing or broken is an error naming the file */
        static const char *const names[] = {"model.safetensors", "model.safetensors.index.json"};
        int found = 0;
        for (int i = 0; i < 2; i++) {
            char path[4096];
            snprintf(path, sizeof path, "%s/%s", o->model_path, names[i]);
            if ((rc = sq_path_broken_link(path, err)))
                return rc;
            found |= file_exists(o->model_path, names[i]);
        }
        if (!found && !*random)
            return sq_error_set(err, SQ_ENOINPUT, "%s: holds neither model.safetensors nor "
                                "model.safetensors.index.json; for random weights of its shape "
                                "pass %s/config.json or add --random-weights", o->model_path,
                                o->model_path);
        if (*random || o->dry_run) {
            char cpath[4096];
            snprintf(cpath, sizeof cpath, "%s/config.json", o->model_path);
            if ((rc = sq_model_config_load(cpath, cfg, err)))
                return rc;
        }
    } else {
        *random = 1;
        if ((rc = sq_model_config_load(o->model_path, cfg, err)))
            return rc;
    }
    if (!*random && o->dry_run) {
        /* the checkpoint's dtype as config.json states it, without mapping the checkpoint */
        if (!o->dtype)
            o->dtype = sq_weight_dtype_name(sq_model_dtype_of_name(cfg->dtype));
    } else if (!*random) {
        if ((rc = sq_model_load(o->model_path, model, err)))
            return rc;
        *cfg = *sq_model_get_config(*model);
        if (!o->dtype)
            o->dtype = sq_weight_dtype_name(sq_model_dtype(*model));
    } else {
        /* random weights are made in the dtype they are timed in (bf16 by default on the CPU:
         * 2 bytes per parameter, the form checkpoints ship in) */
        if (!o->dtype)
            o->dtype = "bf16";
        snprintf(cfg->dtype, sizeof cfg->dtype, "%s",
                 !strcmp(o->dtype, "f32") ? "F32" : !strcmp(o->dtype, "f16") ? "F16" : "BF16");
    }
    settle_counts(o, cfg->max_position);
    int biggest = o->tokens[o->ntokens - 1];
    if ((long long)o->mp.prefix + biggest > cfg->max_position) {
        sq_model_free(*model);
        *model = NULL;
        return sq_error_set(err, SQ_EUSAGE, "--prefix %d + %d tokens = %lld positions, past the "
                            "model's context of %d (max_position_embeddings in config.json)",
                            o->mp.prefix, biggest, (long long)o->mp.prefix + biggest,
                            cfg->max_position);
    }
    if (!*random || o->dry_run)
        return SQ_OK;
    /* random weights: on a CUDA device they are made there, in the target dtype (no float32
     * copy on the host, whose memory is then not the limit) */
    return o->kind == SQ_BACKEND_CUDA
               ? sq_model_new_random_device(cfg, 1234, model, err)
               : sq_model_new_random_dtype(cfg, 1234, sq_model_dtype_of_name(cfg->dtype), model,
                                           err);
}

/* --dry-run: what a run of these options would time and allocate, after the checks it would
 * make (the model's context in load_model, the CPU's memory here); stdout, nothing written. */
static int dry_run(const profile_opts *o, sq_model_config *cfg, int random, sq_error *err)
{
    sq_weight_dtype dt;
    sq_weight_dtype_parse(o->dtype, &dt);   /* checked in misfit() */
    snprintf(cfg->dtype, sizeof cfg->dtype, "%s",
             dt == SQ_DTYPE_F32 ? "F32" : dt == SQ_DTYPE_F16 ? "F16" : "BF16");
    int biggest = o->tokens[o->ntokens - 1], bmax = o->batches[o->nbatches - 1];
    int max_context = o->mp.prefix > 0 ? o->mp.prefix : 1;
    int max_pending = biggest > 64 ? biggest : 64;
    const sq_arch *a = sq_arch_get(cfg->arch);
    double weights = sq_weights_bytes(cfg), read = sq_weights_read_bytes(cfg, dt);
    printf("%s: %s, %.4g parameters, %d layers, hidden %d, vocab %d, context %d\n",
           o->model_path, a ? a->name : "?", (double)sq_model_config_params(cfg), cfg->n_layers,
           cfg->dim, cfg->vocab_size, cfg->max_position);
    printf("weights: %s (%s), %.3f GB; one forward reads %.3f GB\n",
           random ? "random" : "checkpoint", sq_weight_dtype_name(dt), weights / 1e9, read / 1e9);
    printf("would time: %d token count%s from %d to %d%s on a prefix of %d, batch up to %d, "
           "on %s\n", o->ntokens, o->ntokens == 1 ? "" : "s", o->tokens[0], biggest,
           o->mp.refine ? " (refined)" : "", o->mp.prefix, bmax, o->backend);
    if (o->kind != SQ_BACKEND_CPU)
        return SQ_OK;
    double ctx = bmax * sq_cpu_context_bytes(cfg, max_context, max_pending, o->threads) +
                 (bmax > 1 ? sq_cpu_batch_bytes(cfg, (double)bmax * max_pending) : 0);
    double need = ctx + (random ? weights : 0);
    printf("host memory: %.3f GB of KV caches and scratch%s, %.3f GB in all\n", ctx / 1e9,
           random ? " besides the weights" : " (the checkpoint is mapped)", need / 1e9);
    return sq_memory_check(need, err, "use a smaller --dtype, --prefix, --tokens or --batch",
                           "%s: %.0f bytes (%.2f GiB) of weights, KV caches and scratch",
                           o->model_path, need, need / (1 << 30));
}

/* The points of one batch size that look not credible (profiler/stability.h) are timed again
 * once, as one interleaved set, before the profile is judged: a slow spell of a shared machine
 * does not come back at the same points, a profile taken under sustained load stays wrong.
 * All points when the rounds disagree, else the points of each fall and their references. */
static int confirm_points(profile_opts *o, sq_context *const *ctxs, int b, int vocab,
                          sq_profile_point *pts, int np, sq_error *err)
{
    sq_profile view = {.n = np, .points = pts};
    sq_stability st;
    sq_profile_stability(&view, o->mp.unstable, SQ_STABILITY_SEVERE, NAN, 0, 0, &st);
    if (!st.refuse)
        return SQ_OK;
    int *again = malloc((size_t)np * sizeof *again), k = 0;
    sq_profile_fall *f = malloc((size_t)np * sizeof *f);
    sq_profile_point *got = malloc((size_t)np * sizeof *got);
    int rc = SQ_OK;
    if (!again || !f || !got) {
        rc = sq_error_oom(err, "points");
        goto done;
    }
    int nf = sq_profile_falls(&view, SQ_PROFILE_FALL_TOL, st.noisy ? SQ_FALLS_IGNORE_SPREAD : 0,
                              f, np);
    for (int i = 0; i < np; i++) {
        int pick = st.disagree;
        for (int j = 0; j < nf && !pick; j++)
            pick = f[j].tokens == pts[i].tokens || f[j].ref_tokens == pts[i].tokens;
        if (pick)
            again[k++] = pts[i].tokens;
    }
    if (!o->ps.quiet)
        fprintf(stderr, PROG ": %d point%s of batch %d look%s unstable; timing %s again\n", k,
                k == 1 ? "" : "s", b, k == 1 ? "s" : "", k == 1 ? "it" : "them");
    if ((rc = sq_measure_points(ctxs, b, vocab, again, k, &o->mp, NULL, NULL, 0, k, got, err)))
        goto done;
    for (int i = 0, j = 0; i < np && j < k; i++)
        if (pts[i].tokens == again[j])
            pts[i] = got[j++];
done:
    free(again);
    free(f);
    free(got);
    return rc;
}

/* --draft: the draft model as --model reads a model (a checkpoint directory, or a config.json
 * for random weights in the target's dtype); the step section of prof. */
static int measure_steps(profile_opts *o, const sq_model *target, const sq_context_params *cp,
                         int biggest, sq_profile *prof, sq_error *err)
{
    sq_model *dm = NULL;
    sq_model_config dcfg;
    int random = o->force_random || !is_dir(o->draft_path) ||
                 !(file_exists(o->draft_path, "model.safetensors") ||
                   file_exists(o->draft_path, "model.safetensors.index.json"));
    int rc;
    if (!random) {
        if ((rc = sq_model_load(o->draft_path, &dm, err)))
            return rc;
        dcfg = *sq_model_get_config(dm);
    } else {
        char cpath[4096];
        snprintf(cpath, sizeof cpath, is_dir(o->draft_path) ? "%s/config.json" : "%s",
                 o->draft_path);
        if ((rc = sq_model_config_load(cpath, &dcfg, err)))
            return rc;
        rc = o->kind == SQ_BACKEND_CUDA
                 ? sq_model_new_random_device(&dcfg, 4321, &dm, err)
                 : sq_model_new_random_dtype(&dcfg, 4321, cp->dtype == SQ_DTYPE_AUTO
                                             ? SQ_DTYPE_BF16 : cp->dtype, &dm, err);
        if (rc)
            return rc;
    }
    static const int dflt[] = {1, 2, 3, 4, 5, 6, 8, 10, 12, 16, 24, 32, 48, 64};
    int ns[MAX_LIST], count = 0;
    if (o->nstep) {
        memcpy(ns, o->step_tokens, (size_t)o->nstep * sizeof *ns);
        count = o->nstep;
    } else {
        for (size_t i = 0; i < sizeof dflt / sizeof *dflt; i++)
            if (dflt[i] <= biggest)
                ns[count++] = dflt[i];
    }
    sq_stepcost_params sp = {.measure = o->mp, .max_levels = SQ_STEPCOST_MAX_LEVELS,
                             .backend = cp->backend, .threads = cp->threads, .dtype = cp->dtype,
                             .offload = cp->offload};
    if (!o->ps.quiet)
        fprintf(stderr, PROG ": speculative steps with the draft %s\n", o->draft_path);
    sq_profile_step *st = NULL;
    rc = sq_stepcost_measure(dm, target, ns, count, &sp, on_progress, &o->ps, &st, err);
    if (!rc && !(st->draft = model_json(o->draft_path, &dcfg, random)))
        rc = sq_error_oom(err, "the step section");
    if (!rc)
        prof->step = st;
    else if (st) {
        prof->step = st;   /* freed with the profile's other parts by the caller */
    }
    sq_model_free(dm);
    return rc;
}

/* Times the sweep at every batch size; fills prof (its strings and points to free). */
static int measure(profile_opts *o, sq_profile *prof, sq_error *err)
{
    sq_model *model = NULL;
    sq_model_config cfg;
    int random, rc;
    if ((rc = load_model(o, &model, &cfg, &random, err)))
        return rc;
    if (o->dry_run)
        return dry_run(o, &cfg, random, err);
    int biggest = o->tokens[o->ntokens - 1];
    int bmax = o->batches[o->nbatches - 1];
    sq_context_params cp = sq_context_default_params();
    cp.backend = o->kind;
    cp.threads = o->threads;
    cp.offload = o->offload;
    sq_weight_dtype_parse(o->dtype, &cp.dtype);   /* checked in misfit() */
    cp.max_context = o->mp.prefix > 0 ? o->mp.prefix : 1;
    cp.max_pending = biggest > 64 ? biggest : 64;
    if (o->kind == SQ_BACKEND_CPU && bmax > 1) {
        /* refused up front rather than swapped or OOM-killed half way through the sweep */
        double need = bmax * sq_cpu_context_bytes(&cfg, cp.max_context, cp.max_pending,
                                                  cp.threads) +
                      sq_cpu_batch_bytes(&cfg, (double)bmax * cp.max_pending) +
                      (random ? sq_weights_bytes(&cfg) : 0);
        if ((rc = sq_memory_check(need, err, "use smaller batch sizes, --prefix or --tokens",
                                  "--batch %d: %d sequences with a prefix of %d and %d new tokens "
                                  "need %.0f bytes (%.2f GiB) of KV caches, scratch and weights",
                                  bmax, bmax, o->mp.prefix, biggest, need, need / (1 << 30)))) {
            sq_model_free(model);
            return rc;
        }
    }
    sq_context **ctxs = calloc((size_t)bmax, sizeof *ctxs);
    if (!ctxs) {
        sq_model_free(model);
        return sq_error_oom(err, "contexts");
    }
    for (int k = 0; k < bmax && !rc; k++)
        rc = sq_context_new(model, &cp, &ctxs[k], err);
    if (rc)
        goto done;
    int nthreads = sq_cli_threads_used(o->threads);  /* what the CPU backend runs with */
    prof->device = o->kind == SQ_BACKEND_CPU ? cpu_name(nthreads)
                                             : strdup(sq_context_device_name(ctxs[0]));
    prof->backend = strdup(o->offload ? "cuda-offload" : o->backend);
    prof->dtype = strdup(sq_weight_dtype_name(sq_context_dtype(ctxs[0])));
    o->weight_bytes = sq_weights_read_bytes(&cfg, sq_context_dtype(ctxs[0]));
    prof->threads = o->kind == SQ_BACKEND_CPU ? nthreads : 0;
    prof->prefix = o->mp.prefix;
    prof->model = model_json(o->model_path, &cfg, random);
    if (!prof->device || !prof->backend || !prof->dtype || !prof->model)
        rc = sq_error_oom(err, "profile");
    /* each sequence its own prefix (other token ids: a batch of different contexts) */
    for (int k = 0; k < bmax && !rc; k++) {
        sq_measure_params mk = o->mp;
        mk.seed = o->mp.seed + (unsigned)k * 1000003u;
        rc = sq_measure_prefill(ctxs[k], cfg.vocab_size, &mk, err);
    }
    for (int bi = 0; bi < o->nbatches && !rc; bi++) {
        sq_profile_point *pts = NULL;
        int np = 0;
        if (!o->ps.quiet && o->nbatches > 1)
            fprintf(stderr, PROG ": batch %d\n", o->batches[bi]);
        rc = sq_measure_sweep_batch(ctxs, o->batches[bi], cfg.vocab_size, o->tokens, o->ntokens,
                                    &o->mp, on_progress, &o->ps, &pts, &np, err);
        if (!rc)
            rc = confirm_points(o, ctxs, o->batches[bi], cfg.vocab_size, pts, np, err);
        if (rc) {
            free(pts);
            break;
        }
        sq_profile_point *all = realloc(prof->points, (size_t)(prof->n + np) * sizeof *all);
        if (!all) {
            free(pts);
            rc = sq_error_oom(err, "points");
            break;
        }
        memcpy(all + prof->n, pts, (size_t)np * sizeof *pts);
        prof->points = all;
        prof->n += np;
        free(pts);
    }
    if (!rc && o->draft_path) {
        /* the sweep's caches go first: the steps make their own */
        for (int k = 0; k < bmax; k++) {
            sq_context_free(ctxs[k]);
            ctxs[k] = NULL;
        }
        rc = measure_steps(o, model, &cp, biggest, prof, err);
    }
done:
    for (int k = 0; k < bmax; k++)
        sq_context_free(ctxs[k]);
    free(ctxs);
    sq_model_free(model);
    return rc;
}

/* The points whose spread is too wide, with a warning; the table of points on stdout. */
static int unstable_points(const sq_profile *prof, double unstable, int *at)
{
    int n = 0;
    for (int i = 0; i < prof->n && n < MAX_LIST + 64; i++) {
        const sq_profile_point *p = &prof->points[i];
        if ((p->p90_ms - p->p10_ms) / p->median_ms > unstable)
            at[n++] = i;
    }
    int batched = 0;
    for (int i = 0; i < prof->n; i++)
        batched |= prof->points[i].batch > 1;
    if (n > 0) {
        fprintf(stderr, PROG ": warning: %d of %d points are unstable (p10-p90 spread over %.0f%% "
                "of the median) at %s", n, prof->n, 100 * unstable,
                batched ? "batch x tokens" : "tokens");
        for (int i = 0; i < n; i++) {
            const sq_profile_point *q = &prof->points[at[i]];
            if (batched)
                fprintf(stderr, "%s%dx%d", i ? ", " : " ", q->batch, q->tokens);
            else
                fprintf(stderr, "%s%d", i ? ", " : " ", q->tokens);
        }
        fprintf(stderr, "; the machine is noisy: rerun when it is idle, or raise --repeat\n");
    }
    return n;
}

/* "avx512)" etc.: the CPU products' instruction set (runtime/cpu_matmul.h). */
static const char *cpu_kernels_note(void)
{
    static char buf[32];
    snprintf(buf, sizeof buf, "%s)", sq_cpu_isa_name(sq_cpu_isa_get()));
    return buf;
}

/* The table of points; "weights GB/s" is the weights one forward reads (every matrix but the
 * embedding, in the timed dtype: sq_weights_read_bytes) over its median time, whatever the
 * batch and token count (a batch reads them once). At one token it is the decode bandwidth
 * (docs/runtime.md, "16-bit weights on the CPU"); a summary line on stderr says so. */
static void print_points(const sq_profile *prof, double unstable, double weight_bytes)
{
    printf("%6s %8s %12s %12s %12s %12s\n", "batch", "tokens", "median ms", "p10 ms", "p90 ms",
           "weights GB/s");
    for (int i = 0; i < prof->n; i++) {
        const sq_profile_point *p = &prof->points[i];
        char gbs[32] = "-";   /* a merged profile: the weights' bytes are not known */
        if (weight_bytes > 0)
            snprintf(gbs, sizeof gbs, "%.2f", weight_bytes / (p->median_ms * 1e6));
        printf("%6d %8d %12.4f %12.4f %12.4f %12s%s\n", p->batch, p->tokens, p->median_ms,
               p->p10_ms, p->p90_ms, gbs,
               (p->p90_ms - p->p10_ms) / p->median_ms > unstable ? "  unstable" : "");
    }
    for (int i = 0; i < prof->n && weight_bytes > 0; i++)
        if (prof->points[i].batch == 1 && prof->points[i].tokens == 1) {
            fprintf(stderr, PROG ": decode (1 token): %.3f ms, %.3f GB of %s weights read per "
                    "forward: %.2f GB/s%s%s\n", prof->points[i].median_ms, weight_bytes / 1e9,
                    prof->dtype, weight_bytes / (prof->points[i].median_ms * 1e6),
                    strcmp(prof->backend, "cpu") ? "" : " (CPU kernels: ",
                    strcmp(prof->backend, "cpu") ? "" : cpu_kernels_note());
            break;
        }
}

/* The profile judged (profiler/stability.h; a merged one with the load unknown) and written,
 * or refused when it is not credible and --force is not given; the table of points on stdout. */
static int judge_and_write(profile_opts *o, const sq_profile *prof, const char *title,
                           const cJSON *extra, sq_error *err)
{
    int at[MAX_LIST + 64], rc;
    /* test hook (tests/test_hostile.c): a threshold below 0 calls every point unstable */
    const char *hook = getenv("SQ_TEST_UNSTABLE_THRESHOLD");
    if (hook)
        o->mp.unstable = atof(hook);
    int n_unstable = unstable_points(prof, o->mp.unstable, at);
    /* test hook (tests/test_stepcost.c): a severe threshold below 0 makes the rounds
     * always disagree, so that the refusal is tested without live timing */
    const char *sev = getenv("SQ_TEST_STABILITY_SEVERE");
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    sq_profile_stability(prof, o->mp.unstable, sev ? atof(sev) : SQ_STABILITY_SEVERE,
                         o->merge ? NAN : o->load1, cores > 0 ? (int)cores : 0,
                         prof->threads > 0 ? prof->threads : 1, &o->stab);
    char said[4096];
    sq_stability_text(&o->stab, said, sizeof said);
    if (o->stab.refuse && !o->force) {
        print_points(prof, o->mp.unstable, o->weight_bytes);
        return sq_error_set(err, SQ_EDATA, "%s: not written: the profile is not credible: "
                            "%.3000s. Rerun on a quiet machine (or with a higher --repeat), "
                            "or pass --force to write it anyway", o->out_file, said);
    }
    if (*said)
        fprintf(stderr, PROG ": warning: %s%s\n", said, o->stab.refuse
                ? " (written because of --force; sequoia-plan refuses a profile whose "
                  "time falls below t(1), see --trust-profiles)" : "");
    rc = write_outputs(prof, o->out_file, o->svg_file, title, o->mp.unstable, at, n_unstable,
                       &o->stab, o->force, extra, err);
    if (!rc)
        print_points(prof, o->mp.unstable, o->weight_bytes);
    return rc;
}

int main(int argc, char **argv)
{
    sq_cpu_blas_reexec(argv);   /* OpenBLAS with the CPU's own kernels: runtime/cpu_matmul.h */
    sq_model_guard_mappings(PROG);   /* a checkpoint cut short while mapped: exit 74 */
    profile_opts o;
    int rc = parse_options(argc, argv, &o);
    if (rc != PARSE_RUN)
        return rc;
    const char *why = misfit(&o);
    if (why) {
        fprintf(stderr, PROG ": %s\n", why);
        return SQ_EUSAGE;
    }
    sq_out_install_signal_handlers();
    sq_error err = {0};
    sq_profile prof = {0};
    o.load1 = sq_load_average();   /* before this run adds its own threads */
    o.started = time(NULL);
    if (o.import_file) {
        rc = import_profile(&o, &err);
    } else if (o.merge) {
        rc = merge_profiles(&o, &err);
    } else if (!(rc = measure(&o, &prof, &err)) && !o.dry_run) {
        cJSON *extra = cJSON_CreateObject();
        cJSON *at = measured_at_json(o.started, time(NULL));
        if (extra && at)
            cJSON_AddItemToObject(extra, "measured_at", at);
        else
            cJSON_Delete(at);
        char title[600];
        snprintf(title, sizeof title, "%s on %s (%s, prefix %d)", o.model_path, prof.device,
                 prof.dtype, o.mp.prefix);
        rc = extra ? judge_and_write(&o, &prof, title, extra, &err)
                   : sq_error_oom(&err, "the profile's JSON tree");
        cJSON_Delete(extra);
    }
    if (prof.step) {
        cJSON_Delete(prof.step->draft);
        for (int k = 0; k < SQ_STEP_PARTS; k++)
            free(prof.step->pts[k]);
        free(prof.step);
    }
    free(prof.device);
    free(prof.backend);
    free(prof.dtype);
    cJSON_Delete(prof.model);
    free(prof.points);
    if (rc) {
        fprintf(stderr, PROG ": %s\n", err.msg);
        return rc;
    }
    return sq_cli_finish(PROG, SQ_OK);
}
