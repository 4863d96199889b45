/* sequoia-profile: forward latency against the number of new tokens (DESIGN.md §3.4, §6.3). */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "libsequoia/base/io.h"
#include "libsequoia/base/json.h"
#include "libsequoia/format/profile.h"
#include "profiler/latency_svg.h"
#include "profiler/measure.h"
#include "runtime/config.h"
#include "runtime/model.h"

#define PROG "sequoia-profile"
#define MAX_LIST 256

static void usage(FILE *fp)
{
    fprintf(fp,
        "Usage: " PROG " --model DIR|config.json [--backend cpu|cuda] [--dtype f32|f16|bf16]\n"
        "                       [--tokens LIST | --max-tokens N] [--prefix L] [--warmup W]\n"
        "                       [--repeat R] [--threads T] [--no-refine] -o PROFILE.json\n"
        "                       [--svg CURVE.svg] [--offload] [--quiet]\n"
        "       " PROG " --import ENGINE.csv [--engine NAME] -o PROFILE.json [--svg CURVE.svg]\n"
        "\n"
        "Times the runtime's forward over n new tokens on top of a KV prefix of L tokens and\n"
        "writes the latency profile that sequoia-plan --target-profile/--draft-profile reads.\n"
        "\n"
        "Options:\n"
        "  -m, --model PATH       a Hugging Face directory (config.json + model.safetensors), or a\n"
        "                         config.json alone: then random weights of that shape are used,\n"
        "                         since latency depends on shapes, not values\n"
        "      --random           use random weights even when the directory has a checkpoint\n"
        "  -b, --backend NAME     cpu (default) or cuda\n"
        "      --dtype NAME       f32 (CPU), f16 or bf16 (CUDA weights); default f32 on the CPU\n"
        "      --tokens LIST      token counts, e.g. 1,2,4,8 (strictly increasing)\n"
        "      --max-tokens N     powers of two from 1 to N, plus N (default 1024), refined where\n"
        "                         the curve bends\n"
        "      --no-refine        measure only the listed counts\n"
        "      --prefix L         committed KV prefix under each forward (default 512)\n"
        "      --warmup W         untimed forwards per point (default 2)\n"
        "      --repeat R         timed forwards per point (default 10)\n"
        "      --threads T        CPU threads (default: all cores)\n"
        "      --offload          CUDA: keep the weights in pinned host memory and stream them to\n"
        "                         the GPU layer by layer (double-buffered), for models larger than\n"
        "                         the GPU's memory; the profile's backend reads cuda-offload\n"
        "  -o, --output FILE      the profile (atomically)\n"
        "      --svg FILE         a picture of latency against tokens\n"
        "      --import CSV       turn another engine's measurements (header tokens,ms; or s, us)\n"
        "                         into a profile\n"
        "      --engine NAME      the engine named in an imported profile (default: imported)\n"
        "  -q, --quiet            no progress bar\n"
        "  -h, --help             this text\n"
        "\n"
        "Examples:\n"
        "  " PROG " --model data/models/target -o target.json --svg target.svg\n"
        "  " PROG " --model llama2-7b/config.json --backend cuda --dtype f16 --prefix 512 -o a100.json\n"
        "  " PROG " --model draft/ --tokens 1,2,4,8,16,32 --repeat 20 -o draft.json\n"
        "  " PROG " --model llama2-70b/config.json --backend cuda --offload --repeat 3 -o l40.json\n"
        "  " PROG " --import vllm_latency.csv --engine vllm -o vllm.json\n"
        "\n"
        "Exit status: 0 success, 64 usage error, 65 invalid input data, 66 input missing,\n"
        "70 internal error, 73 cannot create output, 74 I/O error.\n");
}

static int parse_int(const char *opt, const char *s, int lo, int *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > INT_MAX) {
        fprintf(stderr, PROG ": %s: '%s' is not an integer >= %d\n", opt, s, lo);
        return SQ_EUSAGE;
    }
    *out = (int)v;
    return SQ_OK;
}

static int parse_list(const char *s, int *v, int *n)
{
    *n = 0;
    const char *p = s;
    while (*p) {
        char *end;
        errno = 0;
        long x = strtol(p, &end, 10);
        if (errno || end == p || x < 1 || x > SQ_PROFILE_MAX_TOKENS || (*end && *end != ',')) {
            fprintf(stderr, PROG ": --tokens: '%s' is not a comma-separated list of counts >= 1\n", s);
            return SQ_EUSAGE;
        }
        if (*n == MAX_LIST) {
            fprintf(stderr, PROG ": --tokens: more than %d counts\n", MAX_LIST);
            return SQ_EUSAGE;
        }
        if (*n > 0 && x <= v[*n - 1]) {
            fprintf(stderr, PROG ": --tokens: %ld after %d, counts must increase strictly\n", x,
                    v[*n - 1]);
            return SQ_EUSAGE;
        }
        v[(*n)++] = (int)x;
        p = *end ? end + 1 : end;
    }
    if (*n == 0) {
        fprintf(stderr, PROG ": --tokens: empty list\n");
        return SQ_EUSAGE;
    }
    return SQ_OK;
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
        sprintf(out, "%s (%d threads)", name, threads);
    return out;
}

typedef struct {
    int quiet;
} progress_state;

static void on_progress(void *user, int done, int total, int tokens)
{
    progress_state *ps = user;
    if (ps->quiet)
        return;
    int width = 30, fill = total > 0 ? done * width / total : 0;
    if (fill > width)
        fill = width;
    fprintf(stderr, "\r" PROG ": [%.*s%*s] %d/%d points%s", fill,
            "##############################", width - fill, "", done, total, tokens ? "" : "\n");
    if (tokens)
        fprintf(stderr, ", timing %d tokens   ", tokens);
    fflush(stderr);
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

static cJSON *model_json(const char *name, const sq_model_config *c, int random)
{
    cJSON *m = cJSON_CreateObject();
    SQ_ASSERT(m);
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
    return m;
}

static int write_outputs(const sq_profile *p, const char *out_file, const char *svg_file,
                         const char *title, double unstable, const int *unstable_at, int n_unstable,
                         sq_error *err)
{
    sq_out *o = NULL, *s = NULL;
    int rc;
    if ((rc = sq_out_open(&o, out_file, err)))
        return rc;
    if (svg_file && (rc = sq_out_open(&s, svg_file, err))) {
        sq_out_abort(o);
        return rc;
    }
    cJSON *j = sq_profile_to_json(p);
    cJSON *u = cJSON_CreateArray();
    SQ_ASSERT(u);
    for (int i = 0; i < n_unstable; i++)
        SQ_ASSERT(cJSON_AddItemToArray(u, cJSON_CreateNumber(unstable_at[i])));
    sq_json_add(j, "unstable_tokens", u);
    sq_json_add(j, "unstable_threshold", cJSON_CreateNumber(unstable));
    sq_json_print(sq_out_stream(o), j);
    cJSON_Delete(j);
    if (s)
        sq_latency_svg_write(sq_out_stream(s), p, title, unstable);
    /* both written out before either is renamed: a full disk leaves both as they were */
    rc = sq_out_prepare(o, err);
    if (!rc && s)
        rc = sq_out_prepare(s, err);
    if (!rc)
        rc = sq_out_commit(o, err);
    else
        sq_out_abort(o);
    if (rc) {
        sq_out_abort(s);
        return rc;
    }
    return s ? sq_out_commit(s, err) : SQ_OK;
}

int main(int argc, char **argv)
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
        {"offload", no_argument, NULL, 'O'},
        {"help", no_argument, NULL, 'h'},          {NULL, 0, NULL, 0},
    };
    const char *model_path = NULL, *backend = "cpu", *dtype = NULL, *out_file = NULL;
    const char *svg_file = NULL, *import_file = NULL, *engine = NULL;
    int tokens[MAX_LIST], ntokens = 0, max_tokens = 1024, threads = 0, force_random = 0;
    int offload = 0;
    progress_state ps = {.quiet = !isatty(2)};
    sq_measure_params mp = sq_measure_default_params();
    int c;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":m:b:o:t:qh", opts, NULL)) != -1) {
        switch (c) {
        case 'm': model_path = optarg; break;
        case 'b': backend = optarg; break;
        case 'D': dtype = optarg; break;
        case 'T': if (parse_list(optarg, tokens, &ntokens)) return SQ_EUSAGE; break;
        case 'M': if (parse_int("--max-tokens", optarg, 1, &max_tokens)) return SQ_EUSAGE; break;
        case 'P': if (parse_int("--prefix", optarg, 0, &mp.prefix)) return SQ_EUSAGE; break;
        case 'W': if (parse_int("--warmup", optarg, 0, &mp.warmup)) return SQ_EUSAGE; break;
        case 'R': if (parse_int("--repeat", optarg, 1, &mp.repeat)) return SQ_EUSAGE; break;
        case 't': if (parse_int("--threads", optarg, 0, &threads)) return SQ_EUSAGE; break;
        case 'o': out_file = optarg; break;
        case 'S': svg_file = optarg; break;
        case 'I': import_file = optarg; break;
        case 'E': engine = optarg; break;
        case 'r': force_random = 1; break;
        case 'O': offload = 1; break;
        case 'n': mp.refine = 0; break;
        case 'q': ps.quiet = 1; break;
        case 'h': usage(stdout); return fclose(stdout) ? SQ_EIO : SQ_OK;
        case ':':
            fprintf(stderr, PROG ": option '%s' needs a value (see --help)\n", argv[optind - 1]);
            return SQ_EUSAGE;
        default:
            fprintf(stderr, PROG ": unknown option '%s' (see --help)\n", argv[optind - 1]);
            return SQ_EUSAGE;
        }
    }
    if (optind < argc) {
        fprintf(stderr, PROG ": unexpected argument '%s' (see --help)\n", argv[optind]);
        return SQ_EUSAGE;
    }
    if (!out_file) {
        fprintf(stderr, PROG ": -o PROFILE.json is required (see --help)\n");
        return SQ_EUSAGE;
    }
    if (!!model_path == !!import_file) {
        fprintf(stderr, PROG ": give exactly one of --model and --import (see --help)\n");
        return SQ_EUSAGE;
    }
    if (max_tokens > SQ_PROFILE_MAX_TOKENS) {
        fprintf(stderr, PROG ": --max-tokens: %d exceeds the limit of %d\n", max_tokens,
                SQ_PROFILE_MAX_TOKENS);
        return SQ_EUSAGE;
    }
    sq_out_install_signal_handlers();
    sq_error err = {0};
    int rc;

    if (import_file) {
        sq_profile *p;
        if ((rc = sq_profile_from_csv(import_file, engine, &p, &err)))
            goto fail_plain;
        char title[512];
        snprintf(title, sizeof title, "%s latency (imported from %s)", p->backend, import_file);
        rc = write_outputs(p, out_file, svg_file, title, mp.unstable, NULL, 0, &err);
        sq_profile_free(p);
        if (rc)
            goto fail_plain;
        return fclose(stdout) ? SQ_EIO : SQ_OK;
    }

    sq_backend_kind kind;
    if (!strcmp(backend, "cpu"))
        kind = SQ_BACKEND_CPU;
    else if (!strcmp(backend, "cuda"))
        kind = SQ_BACKEND_CUDA;
    else {
        fprintf(stderr, PROG ": --backend: unknown backend '%s' (cpu or cuda)\n", backend);
        return SQ_EUSAGE;
    }
    if (!dtype)
        dtype = kind == SQ_BACKEND_CPU ? "f32" : "f16";
    if (strcmp(dtype, "f32") && strcmp(dtype, "f16") && strcmp(dtype, "bf16")) {
        fprintf(stderr, PROG ": --dtype: unknown dtype '%s' (f32, f16 or bf16)\n", dtype);
        return SQ_EUSAGE;
    }
    if (kind == SQ_BACKEND_CPU && strcmp(dtype, "f32")) {
        fprintf(stderr, PROG ": --dtype %s: the CPU backend computes in float32 (f16 and bf16 "
                "weights are converted at load); use --dtype f32\n", dtype);
        return SQ_EUSAGE;
    }
    if (offload && kind != SQ_BACKEND_CUDA) {
        fprintf(stderr, PROG ": --offload streams weights to a GPU: it needs --backend cuda\n");
        return SQ_EUSAGE;
    }
    if (ntokens == 0) {
        for (int n = 1; n <= max_tokens && ntokens < MAX_LIST; n *= 2)
            tokens[ntokens++] = n;
        if (tokens[ntokens - 1] != max_tokens)
            tokens[ntokens++] = max_tokens;
    } else {
        mp.refine = 0; /* an explicit list is measured as given */
    }

    /* the model: a checkpoint directory, or a shape (config.json) with random weights */
    sq_model *model = NULL;
    sq_model_config cfg;
    int random = force_random;
    if (is_dir(model_path)) {
        if (!file_exists(model_path, "model.safetensors") &&
            !file_exists(model_path, "model.safetensors.index.json"))
            random = 1;
        if (random) {
            char cpath[4096];
            snprintf(cpath, sizeof cpath, "%s/config.json", model_path);
            if ((rc = sq_model_config_load(cpath, &cfg, &err)))
                goto fail_plain;
        }
    } else {
        random = 1;
        if ((rc = sq_model_config_load(model_path, &cfg, &err)))
            goto fail_plain;
    }
    if (!random) {
        if ((rc = sq_model_load(model_path, &model, &err)))
            goto fail_plain;
        cfg = *sq_model_get_config(model);
    }
    int biggest = tokens[ntokens - 1];
    if ((long long)mp.prefix + biggest > cfg.max_position) {
        fprintf(stderr, PROG ": --prefix %d + %d tokens = %lld positions, past the model's "
                "context of %d (max_position_embeddings in config.json)\n", mp.prefix, biggest,
                (long long)mp.prefix + biggest, cfg.max_position);
        sq_model_free(model);
        return SQ_EUSAGE;
    }
    /* random weights: on a CUDA device they are made there, in the target dtype (no float32
     * copy on the host, whose memory is then not the limit) */
    if (random && (rc = kind == SQ_BACKEND_CUDA ? sq_model_new_random_device(&cfg, 1234, &model, &err)
                                                : sq_model_new_random(&cfg, 1234, &model, &err)))
        goto fail_plain;

    sq_context_params cp = sq_context_default_params();
    cp.backend = kind;
    cp.threads = threads;
    cp.offload = offload;
    sq_weight_dtype_parse(dtype, &cp.dtype);   /* checked above */
    cp.max_context = mp.prefix > 0 ? mp.prefix : 1;
    cp.max_pending = biggest > 64 ? biggest : 64;
    sq_context *ctx = NULL;
    if ((rc = sq_context_new(model, &cp, &ctx, &err))) {
        sq_model_free(model);
        goto fail_plain;
    }
    int nthreads = threads > 0 ? threads : (int)sysconf(_SC_NPROCESSORS_ONLN);
    char *device = kind == SQ_BACKEND_CPU ? cpu_name(nthreads) : strdup(sq_context_device_name(ctx));

    sq_profile_point *pts = NULL;
    int npts = 0;
    if ((rc = sq_measure_prefill(ctx, cfg.vocab_size, &mp, &err)) ||
        (rc = sq_measure_sweep(ctx, cfg.vocab_size, tokens, ntokens, &mp, on_progress, &ps, &pts,
                               &npts, &err))) {
        sq_context_free(ctx);
        sq_model_free(model);
        free(device);
        goto fail_plain;
    }
    sq_context_free(ctx);

    sq_profile prof = {0};
    prof.device = device;
    prof.backend = strdup(offload ? "cuda-offload" : backend);
    prof.dtype = strdup(dtype);
    prof.threads = kind == SQ_BACKEND_CPU ? nthreads : 0;
    prof.prefix = mp.prefix;
    prof.model = model_json(model_path, &cfg, random);
    prof.n = npts;
    prof.points = pts;
    sq_model_free(model);

    int unstable_at[MAX_LIST + 64], n_unstable = 0;
    for (int i = 0; i < npts && n_unstable < MAX_LIST + 64; i++)
        if ((pts[i].p90_ms - pts[i].p10_ms) / pts[i].median_ms > mp.unstable)
            unstable_at[n_unstable++] = pts[i].tokens;
    if (n_unstable > 0) {
        fprintf(stderr, PROG ": warning: %d of %d points are unstable (p10-p90 spread over %.0f%% "
                "of the median) at tokens", n_unstable, npts, 100 * mp.unstable);
        for (int i = 0; i < n_unstable; i++)
            fprintf(stderr, "%s%d", i ? ", " : " ", unstable_at[i]);
        fprintf(stderr, "; the machine is noisy: rerun when it is idle, or raise --repeat\n");
    }
    char title[600];
    snprintf(title, sizeof title, "%s on %s (%s, prefix %d)", model_path, prof.device, dtype,
             mp.prefix);
    rc = write_outputs(&prof, out_file, svg_file, title, mp.unstable, unstable_at, n_unstable, &err);
    if (rc == SQ_OK) {
        printf("%8s %12s %12s %12s\n", "tokens", "median ms", "p10 ms", "p90 ms");
        for (int i = 0; i < npts; i++)
            printf("%8d %12.4f %12.4f %12.4f%s\n", pts[i].tokens, pts[i].median_ms, pts[i].p10_ms,
                   pts[i].p90_ms,
                   (pts[i].p90_ms - pts[i].p10_ms) / pts[i].median_ms > mp.unstable ? "  unstable" : "");
    }
    free(prof.device);
    free(prof.backend);
    free(prof.dtype);
    cJSON_Delete(prof.model);
    free(pts);
    if (rc)
        goto fail_plain;
    if (fclose(stdout) != 0) {
        fprintf(stderr, PROG ": standard output: %s\n", strerror(errno));
        return SQ_EIO;
    }
    return SQ_OK;

fail_plain:
    fprintf(stderr, PROG ": %s\n", err.msg);
    return rc;
}
