/* sequoia-accept: acceptance curves from draft/target corpora (docs/design.md §5, §6, §7.1), exact
 * merging of shards, and the CI regression check. */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <gsl/gsl_errno.h>

#include "planner/accept/accept.h"
#include "planner/accept/compare.h"
#include "planner/accept/dynstats.h"
#include "planner/accept/merge.h"
#include "planner/accept/stats.h"
#include "libsequoia/format/corpus.h"
#include "libsequoia/format/curve.h"
#include "planner/dp.h"
#include "planner/regress.h"
#include "libsequoia/base/cli.h"
#include "libsequoia/base/io.h"
#include "libsequoia/base/progress.h"
#include "libsequoia/base/json.h"
#include "libsequoia/base/sha256.h"
#include "planner/svg.h"
#include "libsequoia/format/tree.h"

#define PROG "sequoia-accept"
#define MAX_LIST 64

static void usage(FILE *fp)
{
    fprintf(fp,
        "Usage: " PROG " CORPUS.h5 [CORPUS.h5 ...] [--mode M[,M...]] [--temperature T[,T...]]\n"
        "                      [--top-p P[,P...]] [--width W] [--samples K] [--seed S]\n"
        "                      [--threads N] [--by-depth D] [-o CURVES.json] [--quiet]\n"
        "       " PROG " --merge A.json B.json [...] -o ALL.json\n"
        "       " PROG " --compare BASELINE.json NEW.json [--budget N] [--depth D] [--sigma Z]\n"
        "                      [--curve NAME] [--json FILE] [--quiet]\n"
        "       " PROG " --plot CURVES.json [...] --svg PICTURE.svg\n"
        "\n"
        "Estimates the acceptance vector p_1..p_W (p_k: probability that the verifier accepts the\n"
        "k-th child it tries) from corpora of draft and target logits (format sequoia-corpus v1),\n"
        "one curve per (mode, temperature, top-p), with standard errors from whole sequences.\n"
        "\n"
        "Modes (docs/design.md §5):\n"
        "  stochastic  Sequoia: candidates sampled from the draft without replacement (default)\n"
        "  specinfer   SpecInfer: candidates sampled with replacement\n"
        "  greedy      temperature 0: candidates are the draft's top-W, exact per position\n"
        "  topk        candidates are the draft's top-W, target sampled at T: exact per position\n"
        "\n"
        "Options:\n"
        "  -m, --mode LIST         modes, comma-separated (default stochastic)\n"
        "  -T, --temperature LIST  temperatures > 0 for the sampled and topk modes (default 1);\n"
        "                          0 is greedy decoding and is allowed only with --mode greedy,\n"
        "                          which always runs at temperature 0\n"
        "  -p, --top-p LIST        nucleus mass in (0, 1] applied to both models (default 1)\n"
        "  -w, --width W           ranks per curve, 1..%d (default 16)\n"
        "  -k, --samples K         independent candidate draws per position, sampled modes (default 1)\n"
        "  -s, --seed S            random seed (default 0); results depend only on the seed and\n"
        "                          the corpora, not on --threads\n"
        "  -j, --threads N         worker threads (default: all online CPUs)\n"
        "      --by-depth D        also estimate p_by_depth for depths 1..D (1..%d): depth d\n"
        "                          weighs each position by the chance that the d-1 positions\n"
        "                          before it each accepted a child (docs/estimator.md)\n"
        "  -o, --output FILE       write the curves there (atomically); default standard output\n"
        "  -q, --quiet             no progress line and no summary\n"
        "      --dynamic-samples N positions sampled for the dynamic-tree prediction (the curves\n"
        "                          file's key \"dynamic\": the draft's sorted top-K probabilities\n"
        "                          and each rank's acceptance, in runs of consecutive positions;\n"
        "                          sequoia-plan --engine sglang|trtllm-dynamic reads them);\n"
        "                          default 4096 per corpus, 0: none. Specinfer curves get none\n"
        "      --dynamic-topk K    ranks per sampled position, 1..16 (default 8)\n"
        "      --dynamic-segment N consecutive positions per run of samples (default 256; the\n"
        "                          predictor replays decoding along them)\n"
        "      --dynamic-skip N    leave the first N positions of every sequence out of those\n"
        "                          samples (a prompt before the decoded text; default 0)\n"
        "      --dynamic-branches F write where off-path contexts start (every 4th sample: corpus,\n"
        "                          sequence, position, the best draft token the text did not take)\n"
        "      --dynamic-offpath C a corpus of those branches (sequoia-run dump): the draft's\n"
        "                          top-K at each sequence's last row become the off-path pool\n"
        , SQ_ACCEPT_MAX_WIDTH, SQ_ACCEPT_MAX_DEPTHS);
    fputs(
        "      --merge             combine curve files computed on disjoint shards, exactly\n"
        "      --compare           compare NEW against BASELINE: per-rank change with z-scores and\n"
        "                          the change of the optimal tree's expected tokens per step;\n"
        "                          exit 1 when that drops by more than Z standard errors\n"
        "  -n, --budget N          tree size for --compare (default 64)\n"
        "  -d, --depth D           tree depth for --compare (default 8)\n"
        "  -z, --sigma Z           significance for --compare, in standard errors (default 3)\n"
        "  -c, --curve NAME        --compare only this curve (default: every curve of BASELINE, and\n"
        "                          a curve NEW lacks fails the comparison: lost coverage)\n"
        "      --json FILE         --compare: also write the comparison as JSON (sequoia-compare)\n"
        "      --svg FILE          also draw the curves written (p_k against rank, error bars,\n"
        "                          curves overlaid) as a self-contained SVG\n"
        "      --plot              draw curve files (with --svg) without estimating anything\n"
        "  -h, --help              this text\n"
        "      --version           the version\n"
        "\n", fp);
    fputs(
        "Examples:\n"
        "  " PROG " c4.h5 --mode stochastic --temperature 0.6,1.0 --width 16 -o curves.json\n"
        "  " PROG " c4.h5 --mode specinfer --temperature 1 --top-p 0.9 --samples 4 -o si.json\n"
        "  " PROG " c4.h5 --mode greedy --width 32 -o greedy.json\n"
        "  " PROG " c4.h5 --mode topk --temperature 0.7 -o topk.json\n"
        "  " PROG " shard0.h5 -o a.json && " PROG " shard1.h5 -o b.json\n"
        "  " PROG " --merge a.json b.json -o all.json           # = one run over both shards\n"
        "  " PROG " --compare main.json branch.json --budget 64 --depth 8 --sigma 3\n"
        "  " PROG " --plot main.json branch.json --svg curves.svg     # both overlaid\n"
        "\n"
        "Exit status: 0 success (--compare: no significant drop), 1 significant drop or a curve\n"
        "of BASELINE missing in NEW (--compare),\n"
        "64 usage error, 65 invalid input data, 66 input file missing, 70 internal error,\n"
        "73 cannot create output, 74 I/O error. No output file is left behind on failure.\n",
        fp);
}

/* ---- option parsing ----------------------------------------------------------------------- */

/* Comma-separated numbers. */
static int parse_list(const char *opt, const char *s, double *v, int *n)
{
    char buf[1024];
    if (strlen(s) >= sizeof buf) {
        fprintf(stderr, PROG ": %s: list too long\n", opt);
        return SQ_EUSAGE;
    }
    strcpy(buf, s);
    *n = 0;
    char *save = NULL;
    for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        if (*n == MAX_LIST) {
            fprintf(stderr, PROG ": %s: at most %d values\n", opt, MAX_LIST);
            return SQ_EUSAGE;
        }
        if (sq_cli_double(PROG, opt, tok, &v[*n]))
            return SQ_EUSAGE;
        (*n)++;
    }
    if (*n == 0) {
        fprintf(stderr, PROG ": %s: empty list\n", opt);
        return SQ_EUSAGE;
    }
    return SQ_OK;
}

static int parse_modes(const char *s, sq_mode *m, int *n)
{
    char buf[256];
    if (strlen(s) >= sizeof buf) {
        fprintf(stderr, PROG ": --mode: list too long\n");
        return SQ_EUSAGE;
    }
    strcpy(buf, s);
    *n = 0;
    char *save = NULL;
    for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        sq_mode mode;
        if (sq_mode_parse(tok, &mode) != 0) {
            fprintf(stderr, PROG ": --mode: unknown mode '%s' (expected stochastic, specinfer, "
                    "greedy or topk)\n", tok);
            return SQ_EUSAGE;
        }
        int dup = 0;
        for (int i = 0; i < *n; i++)
            dup |= m[i] == mode;
        if (!dup)
            m[(*n)++] = mode;
    }
    if (*n == 0) {
        fprintf(stderr, PROG ": --mode: empty list\n");
        return SQ_EUSAGE;
    }
    return SQ_OK;
}

/* ---- helpers -------------------------------------------------------------------------------- */

static const char *base_name(const char *path)
{
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

/* A corpus's key in the random streams: any fixed function of its digest. */
static uint64_t corpus_key(const char *hex)
{
    uint64_t key = 0;
    for (int b = 0; b < 16; b++) {
        unsigned v;
        sscanf(hex + 2 * b, "%2x", &v);
        key = key << 4 ^ (key >> 60) ^ v;
    }
    return key;
}

static double now_s(void)
{
    return sq_now_ms() / 1e3;
}

/* --svg FILE: a picture of the curves written (or plotted), or NULL. */
static const char *svg_path;

/* Draws the curves of `root` (a sequoia-acceptance tree) to svg_path, when one was asked for. */
static int write_svg(const cJSON *root, sq_error *err)
{
    if (!svg_path)
        return SQ_OK;
    sq_curve_set *set;
    int rc = sq_curve_set_from_json(root, "curves", &set, err);
    if (rc)
        return rc;
    rc = sq_svg_curves(set, svg_path, err);
    sq_curve_set_free(set);
    return rc;
}

/* --plot A.json [B.json ...]: every curve of every file in one picture; with several files the
 * curves are named FILE:NAME. */
static int plot(char **files, int n_files)
{
    sq_error err = {0};
    sq_curve_set all = {0};
    sq_curve_set *set = NULL;
    int rc = SQ_OK;
    for (int f = 0; f < n_files && rc == SQ_OK; f++) {
        if ((rc = sq_curve_set_load(files[f], &set, &err)))
            break;
        sq_curve *grown = realloc(all.curves, (size_t)(all.n + set->n) * sizeof *grown);
        if (!grown) {
            rc = sq_error_oom(&err, "curves");
            break;
        }
        all.curves = grown;
        for (int i = 0; i < set->n && rc == SQ_OK; i++) {
            sq_curve *c = &all.curves[all.n];
            if ((rc = sq_curve_copy(c, &set->curves[i], &err)))
                break;
            all.n++;
            if (n_files > 1) {
                size_t len = strlen(files[f]) + strlen(c->name) + 2;
                char *name = malloc(len);
                if (!name) {
                    rc = sq_error_oom(&err, "curve name");
                    break;
                }
                snprintf(name, len, "%s:%s", files[f], c->name);
                free(c->name);
                c->name = name;
            }
        }
        sq_curve_set_free(set);
        set = NULL;
    }
    if (rc == SQ_OK)
        rc = sq_svg_curves(&all, svg_path, &err);
    for (int i = 0; i < all.n; i++)
        sq_curve_clear(&all.curves[i]);
    free(all.curves);
    if (rc)
        fprintf(stderr, PROG ": %s\n", err.msg);
    return rc;
}


/* ---- estimation ------------------------------------------------------------------------------ */

typedef struct est_opts {
    sq_mode modes[4];
    int n_modes;
    double temps[MAX_LIST];
    int n_temps, temps_given;
    double top_ps[MAX_LIST];
    int n_top_ps;
    sq_accept_params params;
    sq_dynstats_params dyn;   /* the dynamic-tree statistics (dynstats.h) */
    const char *out_file;
    int quiet;
} est_opts;

/* The dynamic-tree statistics under the curves file's key "dynamic" (dynstats.h), computed in
 * the curves' pass (ds, with the same corpus keys as the curves' random streams). */
static int add_dynamic(sq_dynstats *ds, const est_opts *o, cJSON *root, sq_error *err)
{
    cJSON *dyn = NULL;
    sq_corpus *offpath = NULL;
    int rc = SQ_OK;
    if (o->dyn.offpath_file)
        rc = sq_corpus_open(o->dyn.offpath_file, &offpath, err);
    if (!rc && ds)   /* NULL: the statistics are off (the off-path corpus is checked still) */
        rc = sq_dynstats_finish(ds, offpath, &dyn, err);
    sq_corpus_close(offpath);
    if (!rc && dyn && !cJSON_AddItemToObject(root, SQ_DYNSTATS_KEY, dyn)) {
        cJSON_Delete(dyn);
        rc = sq_error_oom(err, "the dynamic statistics");
    }
    return rc;
}

static int estimate(char **files, int n_files, est_opts *o)
{
    sq_error err = {0};
    int rc = SQ_OK;
    sq_accept_config cfg[SQ_ACCEPT_MAX_CONFIGS];
    int n_cfg = 0;

    /* Configurations: greedy once at temperature 0; the others per (temperature, top-p). */
    for (int m = 0; m < o->n_modes; m++)
        if (o->modes[m] == SQ_MODE_GREEDY)
            cfg[n_cfg++] = (sq_accept_config){SQ_MODE_GREEDY, 0.0, 1.0};
    for (int t = 0; t < o->n_temps; t++)
        for (int q = 0; q < o->n_top_ps; q++)
            for (int m = 0; m < o->n_modes; m++) {
                if (o->modes[m] == SQ_MODE_GREEDY)
                    continue;
                sq_accept_config c = {o->modes[m], o->temps[t], o->top_ps[q]};
                if ((rc = sq_accept_config_check(&c, &err))) {
                    if (c.temperature == 0)
                        sq_cli_hint(&err, "--temperature 0 goes with --mode greedy");
                    fprintf(stderr, PROG ": %s\n", err.msg);
                    return rc;
                }
                int dup = 0;
                for (int j = 0; j < n_cfg; j++)
                    dup |= cfg[j].mode == c.mode && cfg[j].temperature == c.temperature &&
                           cfg[j].top_p == c.top_p;
                if (dup)
                    continue;
                /* two settings whose curve names agree (the names keep %g's 6 significant
                 * digits) would write two curves that no reader can tell apart */
                char nm[128], other[128];
                sq_accept_config_name(&c, nm, sizeof nm);
                for (int j = 0; j < n_cfg; j++) {
                    sq_accept_config_name(&cfg[j], other, sizeof other);
                    if (strcmp(nm, other) == 0) {
                        fprintf(stderr, PROG ": --temperature/--top-p: T %.15g, top-p %.15g and "
                                "T %.15g, top-p %.15g would both be the curve \"%s\"; give "
                                "values that differ in their first 6 significant digits\n",
                                cfg[j].temperature, cfg[j].top_p, c.temperature, c.top_p, nm);
                        return SQ_EUSAGE;
                    }
                }
                if (n_cfg == SQ_ACCEPT_MAX_CONFIGS) {
                    fprintf(stderr, PROG ": more than %d curves requested\n",
                            SQ_ACCEPT_MAX_CONFIGS);
                    return SQ_EUSAGE;
                }
                cfg[n_cfg++] = c;
            }
    int only_greedy = 1;
    for (int m = 0; m < o->n_modes; m++)
        only_greedy &= o->modes[m] == SQ_MODE_GREEDY;
    if (only_greedy && o->temps_given)
        for (int t = 0; t < o->n_temps; t++)
            if (o->temps[t] != 0) {
                fprintf(stderr, PROG ": --mode greedy always runs at temperature 0; --temperature "
                        "%g is ignored\n", o->temps[t]);
                break;
            }

    sq_corpus **corp = calloc((size_t)n_files, sizeof *corp);
    char (*hex)[SQ_SHA256_HEX] = calloc((size_t)n_files, sizeof *hex);
    const char **names = calloc((size_t)n_files, sizeof *names);
    const char **hexp = calloc((size_t)n_files, sizeof *hexp);
    sq_accept_stats **stats = calloc((size_t)n_cfg, sizeof *stats);
    const int D = o->params.depths;
    sq_accept_stats **dstats = calloc((size_t)n_cfg * (size_t)D + 1, sizeof *dstats);
    sq_curve_set set = {0};
    sq_out *out = NULL;
    cJSON *root = NULL;
    uint64_t *keys = calloc((size_t)n_files, sizeof *keys);
    sq_dynstats *ds = NULL;
    if (!corp || !hex || !names || !hexp || !stats || !dstats || !keys) {
        rc = sq_error_oom(&err, "corpus list");
        goto done;
    }

    /* Open and check every corpus before any work. */
    int sparse = 0, single = 0, multi = 0;
    const char *single_file = NULL;
    int64_t single_rows = 0;
    for (int f = 0; f < n_files; f++) {
        if ((rc = sq_corpus_open(files[f], &corp[f], &err)))
            goto done;
        const sq_corpus_info *in = sq_corpus_get_info(corp[f]);
        const sq_corpus_info *i0 = sq_corpus_get_info(corp[0]);
        if (in->rows <= 0) {
            rc = sq_error_set(&err, SQ_EDATA, "%s: the corpus is empty (0 rows)", files[f]);
            goto done;
        }
        if (f > 0 && strcmp(in->draft, i0->draft) != 0) {
            rc = sq_error_set(&err, SQ_EDATA, "%s: /: attribute 'draft': \"%s\" differs from %s's "
                              "\"%s\"", files[f], in->draft, files[0], i0->draft);
            goto done;
        }
        if (f > 0 && strcmp(in->target, i0->target) != 0) {
            rc = sq_error_set(&err, SQ_EDATA, "%s: /: attribute 'target': \"%s\" differs from %s's "
                              "\"%s\"", files[f], in->target, files[0], i0->target);
            goto done;
        }
        if (f > 0 && in->vocab != i0->vocab) {
            rc = sq_error_set(&err, SQ_EDATA, "%s: /: attribute 'vocab_size': %d differs from %s's %d",
                              files[f], in->vocab, files[0], i0->vocab);
            goto done;
        }
        sparse |= in->sparse;
        if (in->sequences <= 1) {
            if (!single) {
                single_file = files[f];
                single_rows = in->rows;
            }
            single = 1;
        } else
            multi = 1;
        uint8_t d[SQ_SHA256_BYTES];
        if ((rc = sq_sha256_file(files[f], d, &err)))
            goto done;
        sq_sha256_hex(d, hex[f]);
        for (int g = 0; g < f; g++)
            if (strcmp(hex[g], hex[f]) == 0) {
                rc = sq_error_set(&err, SQ_EUSAGE, "%s: has the same content (SHA-256 %.12s...) as "
                                  "%s; a corpus may be counted only once", files[f], hex[f], files[g]);
                goto done;
            }
        names[f] = base_name(files[f]);
        hexp[f] = hex[f];
        keys[f] = corpus_key(hex[f]);
    }
    if (sparse)
        fprintf(stderr, PROG ": notice: %s\n", sq_accept_sparse_note);
    if (single)
        fprintf(stderr, PROG ": notice: %s%s holds one sequence; its standard errors use %lld "
                "contiguous batches (batch means)\n", single_file,
                n_files > 1 ? " (and maybe others)" : "", (long long)(single_rows <
                SQ_ACCEPT_BATCHES ? single_rows : SQ_ACCEPT_BATCHES));

    /* The output is opened first, so that an unwritable path fails before the work. */
    if ((rc = sq_out_open(&out, o->out_file ? o->out_file : "-", &err)))
        goto done;

    for (int j = 0; j < n_cfg; j++)
        if (!(stats[j] = sq_accept_stats_new(o->params.width))) {
            rc = sq_error_oom(&err, "statistics");
            goto done;
        }
    for (int q = 0; q < n_cfg * D; q++)
        if (!(dstats[q] = sq_accept_stats_new(o->params.width))) {
            rc = sq_error_oom(&err, "statistics");
            goto done;
        }
    sq_dynstats_params dp = o->dyn;
    dp.seed = o->params.seed;
    dp.samples = o->params.samples;
    if ((rc = sq_dynstats_begin(corp, keys, n_files, cfg, n_cfg, &dp, &ds, &err)))
        goto done;
    double t0 = now_s();
    int64_t total_rows = 0;
    for (int f = 0; f < n_files; f++) {
        char label[300];
        snprintf(label, sizeof label, "%s (%d/%d)", names[f], f + 1, n_files);
        sq_progress ps;
        sq_progress_start(&ps, PROG, label, "positions", o->quiet, 0);
        sq_accept_params pr = o->params;
        pr.progress = sq_progress_callback;
        pr.user = &ps;
        pr.depth_stats = dstats;
        pr.hook = ds ? sq_dynstats_hook(ds, f) : NULL;
        rc = sq_accept_run(corp[f], files[f], keys[f], cfg, n_cfg, &pr, stats, &err);
        sq_progress_end(&ps);
        if (rc)
            goto done;
        total_rows += sq_corpus_get_info(corp[f])->rows;
    }
    double elapsed = now_s() - t0;

    /* Curves. */
    set.curves = calloc((size_t)n_cfg, sizeof *set.curves);
    if (!set.curves) {
        rc = sq_error_oom(&err, "curves");
        goto done;
    }
    cJSON *seed = cJSON_CreateNumber((double)o->params.seed);
    if (!seed) {
        rc = sq_error_oom(&err, "the seed's JSON number");
        goto done;
    }
    const char *unit = single && multi ? "mixed" : single ? "batch" : "sequence";
    for (int j = 0; j < n_cfg; j++) {
        char name[128];
        sq_accept_config_name(&cfg[j], name, sizeof name);
        rc = sq_accept_curve_from_stats(&set.curves[j], name, &cfg[j], stats[j], o->params.samples, seed,
                              unit, &err);
        if (rc) {
            cJSON_Delete(seed);
            goto done;
        }
        set.n = j + 1;
        int kept = 0;
        if (D && (rc = sq_accept_curve_add_depths(&set.curves[j], dstats + (size_t)j * (size_t)D,
                                                  D, &kept, &err))) {
            cJSON_Delete(seed);
            goto done;
        }
        if (kept < D)
            fprintf(stderr, PROG ": notice: curve %s: no position reached depth %d (every chain "
                    "of %d accepted children was cut by a rejection or a sequence start), so "
                    "p_by_depth has %d row%s; deeper levels use the last\n", name, kept + 1, kept,
                    kept, kept == 1 ? "" : "s");
    }
    cJSON_Delete(seed);
    const sq_corpus_info *i0 = sq_corpus_get_info(corp[0]);
    if (!(set.source = sq_accept_source_json(names, hexp, n_files, i0->draft, i0->target,
                                             i0->vocab, sparse, PROG " " SQ_VERSION))) {
        rc = sq_error_oom(&err, "source");
        goto done;
    }
    if (!(root = sq_curve_set_to_json(&set))) {
        rc = sq_error_oom(&err, "the curve file's JSON tree");
        goto done;
    }
    if ((rc = add_dynamic(ds, o, root, &err)))
        goto done;
    sq_json_print(sq_out_stream(out), root);
    rc = sq_out_commit(out, &err);
    out = NULL;
    if (rc || (rc = write_svg(root, &err)))
        goto done;

    if (!o->quiet) {
        FILE *fp = o->out_file ? stdout : stderr;
        fprintf(fp, "%lld positions from %d corpus file%s in %.2f s (%.0f positions/s)\n",
                (long long)total_rows, n_files, n_files == 1 ? "" : "s", elapsed,
                elapsed > 0 ? (double)total_rows / elapsed : 0.0);
        for (int j = 0; j < set.n; j++) {
            const sq_curve *c = &set.curves[j];
            fprintf(fp, "%-24s p1 %.4f", c->name, c->p[0]);
            if (c->stderr_p)
                fprintf(fp, " ± %.4f", c->stderr_p[0]);
            if (c->width > 1)
                fprintf(fp, "  p2 %.4f", c->p[1]);
            if (c->width > 2)
                fprintf(fp, "  p3 %.4f", c->p[2]);
            fprintf(fp, "  reject %.4f\n", c->reject);
        }
    }

done:
    sq_out_abort(out);
    cJSON_Delete(root);
    cJSON_Delete(set.source);
    for (int j = 0; j < set.n; j++)
        sq_curve_clear(&set.curves[j]);
    free(set.curves);
    if (stats)
        for (int j = 0; j < n_cfg; j++)
            sq_accept_stats_free(stats[j]);
    free(stats);
    if (dstats)
        for (int q = 0; q < n_cfg * D; q++)
            sq_accept_stats_free(dstats[q]);
    free(dstats);
    if (corp)
        for (int f = 0; f < n_files; f++)
            sq_corpus_close(corp[f]);
    free(corp);
    free(hex);
    free(names);
    free(hexp);
    free(keys);
    sq_dynstats_free(ds);
    if (rc)
        fprintf(stderr, PROG ": %s\n", err.msg);
    return rc;
}

/* ---- merge -------------------------------------------------------------------------------------- */

/* The files' "dynamic" statistics merged into root (dynstats.h); none when no file has them, a
 * notice when only some have. */
static int merge_dynamic(char **files, int n_files, cJSON *root, sq_error *err)
{
    cJSON **docs = calloc((size_t)n_files, sizeof *docs);
    const cJSON **dyn = calloc((size_t)n_files, sizeof *dyn);
    int rc = docs && dyn ? SQ_OK : sq_error_oom(err, "curve files"), have = 0;
    for (int f = 0; f < n_files && !rc; f++)
        if (!(rc = sq_json_load(files[f], &docs[f], err)))
            have += (dyn[f] = sq_json_field(docs[f], SQ_DYNSTATS_KEY)) != NULL;
    cJSON *merged = NULL;
    if (!rc && have && have < n_files)
        fprintf(stderr, PROG ": notice: only %d of the %d files hold dynamic-tree statistics "
                "(key \"" SQ_DYNSTATS_KEY "\"); the merge has none\n", have, n_files);
    else if (!rc && have &&
             !(rc = sq_dynstats_merge(dyn, (const char *const *)files, n_files, &merged, err)) &&
             !cJSON_AddItemToObject(root, SQ_DYNSTATS_KEY, merged)) {
        cJSON_Delete(merged);
        rc = sq_error_oom(err, "the dynamic statistics");
    }
    for (int f = 0; docs && f < n_files; f++)
        cJSON_Delete(docs[f]);
    free(docs);
    free(dyn);
    return rc;
}

static int merge(char **files, int n_files, const char *out_file, int quiet)
{
    sq_error err = {0};
    int rc = SQ_OK;
    sq_curve_set **sets = calloc((size_t)n_files, sizeof *sets);
    sq_curve_set merged = {0};
    cJSON *root = NULL;
    if (!sets)
        rc = sq_error_oom(&err, "curve files");
    for (int f = 0; f < n_files && !rc; f++)
        rc = sq_curve_set_load(files[f], &sets[f], &err);
    if (!rc && !(rc = sq_accept_merge(sets, files, n_files, PROG " " SQ_VERSION, &merged, &err))) {
        if (!(root = sq_curve_set_to_json(&merged)))
            rc = sq_error_oom(&err, "curves");
        else if ((rc = merge_dynamic(files, n_files, root, &err)))
            ;
        else if (!(rc = sq_json_save(out_file ? out_file : "-", root, &err)))
            rc = write_svg(root, &err);
    }
    if (!rc && !quiet && out_file) {
        const cJSON *corpus = sq_json_field(merged.source, "corpus");
        printf("merged %d curve%s from %d files (%d corpus files)\n", merged.n,
               merged.n == 1 ? "" : "s", n_files, cJSON_GetArraySize(corpus));
    }
    cJSON_Delete(root);
    cJSON_Delete(merged.source);
    for (int i = 0; i < merged.n; i++)
        sq_curve_clear(&merged.curves[i]);
    free(merged.curves);
    for (int f = 0; sets && f < n_files; f++)
        sq_curve_set_free(sets[f]);
    free(sets);
    if (rc)
        fprintf(stderr, PROG ": %s\n", err.msg);
    return rc;
}

/* ---- compare --------------------------------------------------------------------------------------- */

/* --compare BASE NEW: the comparison of planner/accept/compare.h, its report on stdout and its
 * warnings on stderr (unless --quiet), and --json FILE. Exit 1 on a significant drop, and when
 * NEW lacks a curve of BASE (lost coverage in CI) unless --curve limits the comparison. */
static int compare(const char *base_file, const char *new_file, int budget, int depth,
                   double sigma, const char *only, int quiet, const char *json_file)
{
    sq_error err = {0};
    cJSON *doc = NULL;
    sq_accept_compare_opts o = {
        .budget = budget, .depth = depth, .sigma = sigma, .only = only,
        .optimal_F = sq_accept_optimal_F, .report = quiet ? NULL : stdout,
        .warn = quiet ? NULL : stderr, .prog = PROG,
    };
    int rc = sq_accept_compare(base_file, new_file, &o, &doc, &err);
    if (doc && json_file) {
        int src = sq_json_save(json_file, doc, &err);
        if (src)
            rc = src;
    }
    const cJSON *jmissing = cJSON_GetObjectItemCaseSensitive(doc, "missing_in_new");
    int missing = cJSON_GetArraySize(jmissing);
    if (rc == SQ_EFAIL && missing) {
        fprintf(stderr, PROG ": %s lacks %d curve%s of %s (", new_file, missing,
                missing == 1 ? "" : "s", base_file);
        int k = 0;
        const cJSON *m;
        cJSON_ArrayForEach(m, jmissing)
            fprintf(stderr, "%s\"%s\"", k++ ? ", " : "", m->valuestring);
        fprintf(stderr, "): that coverage is lost; compare one curve with --curve NAME\n");
    }
    cJSON_Delete(doc);
    if (rc && rc != SQ_EFAIL)
        fprintf(stderr, PROG ": %s\n", err.msg);
    return rc;
}

/* ---- main ------------------------------------------------------------------------------------------ */

enum { OPT_MERGE = 256, OPT_COMPARE, OPT_VERSION, OPT_SVG, OPT_PLOT, OPT_JSON, OPT_BY_DEPTH, OPT_DYN_SAMPLES,
       OPT_DYN_TOPK, OPT_DYN_SKIP, OPT_DYN_BRANCHES, OPT_DYN_OFFPATH, OPT_DYN_SEGMENT };

typedef struct accept_opts {
    est_opts est;
    int do_plot, do_merge, do_compare, budget, depth, est_opt, cmp_opt;
    double sigma;
    const char *curve, *json_file;
} accept_opts;

#define PARSE_RUN (-1)   /* parse_options: go on and run */

/* The estimation options: 0, or SQ_EUSAGE with the message printed. */
static int parse_estimation(int c, const char *arg, est_opts *o)
{
    int v;
    uint64_t seed;
    switch (c) {
    case 'm':
        return parse_modes(arg, o->modes, &o->n_modes);
    case 'T':
        if (parse_list("--temperature", arg, o->temps, &o->n_temps))
            return SQ_EUSAGE;
        for (int i = 0; i < o->n_temps; i++)
            if (o->temps[i] < 0) {
                fprintf(stderr, PROG ": --temperature: %g, must be >= 0\n", o->temps[i]);
                return SQ_EUSAGE;
            }
        o->temps_given = 1;
        return SQ_OK;
    case 'p':
        if (parse_list("--top-p", arg, o->top_ps, &o->n_top_ps))
            return SQ_EUSAGE;
        for (int i = 0; i < o->n_top_ps; i++)
            if (!(o->top_ps[i] > 0) || o->top_ps[i] > 1) {
                fprintf(stderr, PROG ": --top-p: %g, must be in (0, 1]\n", o->top_ps[i]);
                return SQ_EUSAGE;
            }
        return SQ_OK;
    case 'w':
        if (sq_cli_int(PROG, "--width", arg, 1, SQ_ACCEPT_MAX_WIDTH, &v))
            return SQ_EUSAGE;
        o->params.width = v;
        return SQ_OK;
    case 'k':
        if (sq_cli_int(PROG, "--samples", arg, 1, SQ_ACCEPT_MAX_SAMPLES, &v))
            return SQ_EUSAGE;
        o->params.samples = v;
        return SQ_OK;
    case 's': /* stored in JSON as a number: at most 2^53 */
        if (sq_cli_u64(PROG, "--seed", arg, 1ULL << 53, &seed))
            return SQ_EUSAGE;
        o->params.seed = seed;
        return SQ_OK;
    case OPT_BY_DEPTH:
        if (sq_cli_int(PROG, "--by-depth", arg, 1, SQ_ACCEPT_MAX_DEPTHS, &v))
            return SQ_EUSAGE;
        o->params.depths = v;
        return SQ_OK;
    case OPT_DYN_SAMPLES:
        return sq_cli_int(PROG, "--dynamic-samples", arg, 0, 1 << 20, &o->dyn.max_samples)
               ? SQ_EUSAGE : SQ_OK;
    case OPT_DYN_BRANCHES:
        o->dyn.branches = arg;
        return SQ_OK;
    case OPT_DYN_SEGMENT:
        return sq_cli_int(PROG, "--dynamic-segment", arg, 1, 1 << 20, &o->dyn.segment)
               ? SQ_EUSAGE : SQ_OK;
    case OPT_DYN_OFFPATH:
        o->dyn.offpath_file = arg;
        return SQ_OK;
    case OPT_DYN_SKIP:
        return sq_cli_int(PROG, "--dynamic-skip", arg, 0, INT_MAX, &o->dyn.skip) ? SQ_EUSAGE
                                                                                   : SQ_OK;
    case OPT_DYN_TOPK:
        return sq_cli_int(PROG, "--dynamic-topk", arg, 1, SQ_DYNSTATS_MAX_TOPK, &o->dyn.topk)
               ? SQ_EUSAGE : SQ_OK;
    default: /* 'j' */
        if (sq_cli_int(PROG, "--threads", arg, 1, 256, &v))
            return SQ_EUSAGE;
        o->params.threads = v;
        return SQ_OK;
    }
}

/* Fills *a from argv. Returns PARSE_RUN, or the exit status (--help, --version, errors). */
static int parse_options(int argc, char **argv, accept_opts *a)
{
    static const struct option opts[] = {
        {"mode", required_argument, NULL, 'm'},     {"temperature", required_argument, NULL, 'T'},
        {"top-p", required_argument, NULL, 'p'},    {"width", required_argument, NULL, 'w'},
        {"samples", required_argument, NULL, 'k'},  {"seed", required_argument, NULL, 's'},
        {"threads", required_argument, NULL, 'j'},  {"output", required_argument, NULL, 'o'},
        {"quiet", no_argument, NULL, 'q'},          {"merge", no_argument, NULL, OPT_MERGE},
        {"svg", required_argument, NULL, OPT_SVG},  {"plot", no_argument, NULL, OPT_PLOT},
        {"compare", no_argument, NULL, OPT_COMPARE}, {"json", required_argument, NULL, OPT_JSON},
        {"budget", required_argument, NULL, 'n'},   {"depth", required_argument, NULL, 'd'},
        {"sigma", required_argument, NULL, 'z'},    {"curve", required_argument, NULL, 'c'},
        {"help", no_argument, NULL, 'h'},           {"version", no_argument, NULL, OPT_VERSION},
        {"by-depth", required_argument, NULL, OPT_BY_DEPTH},
        {"dynamic-samples", required_argument, NULL, OPT_DYN_SAMPLES},
        {"dynamic-topk", required_argument, NULL, OPT_DYN_TOPK},
        {"dynamic-skip", required_argument, NULL, OPT_DYN_SKIP},
        {"dynamic-branches", required_argument, NULL, OPT_DYN_BRANCHES},
        {"dynamic-offpath", required_argument, NULL, OPT_DYN_OFFPATH},
        {"dynamic-segment", required_argument, NULL, OPT_DYN_SEGMENT},
        {NULL, 0, NULL, 0},
    };
    *a = (accept_opts){.est = {.n_modes = 1, .modes = {SQ_MODE_STOCHASTIC}, .n_temps = 1,
                               .temps = {1.0}, .n_top_ps = 1, .top_ps = {1.0},
                               .params = sq_accept_default_params(),
                               .dyn = sq_dynstats_default_params()},
                       .budget = 64, .depth = 8, .sigma = 3.0};
    int c;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":m:T:p:w:k:s:j:o:qn:d:z:c:h", opts, NULL)) != -1) {
        switch (c) {
        case 'm': case 'T': case 'p': case 'w': case 'k': case 's': case 'j': case OPT_BY_DEPTH:
        case OPT_DYN_SAMPLES: case OPT_DYN_TOPK: case OPT_DYN_SKIP: case OPT_DYN_BRANCHES:
        case OPT_DYN_OFFPATH: case OPT_DYN_SEGMENT:
            if (parse_estimation(c, optarg, &a->est))
                return SQ_EUSAGE;
            a->est_opt = 1;
            break;
        case 'o': a->est.out_file = optarg; break;
        case 'q': a->est.quiet = 1; break;
        case OPT_MERGE: a->do_merge = 1; break;
        case OPT_SVG: svg_path = optarg; break;
        case OPT_PLOT: a->do_plot = 1; break;
        case OPT_COMPARE: a->do_compare = 1; break;
        case 'n': case 'd':
            if (sq_cli_int(PROG, c == 'n' ? "--budget" : "--depth", optarg, 1, SQ_DP_MAX_BUDGET,
                           c == 'n' ? &a->budget : &a->depth))
                return SQ_EUSAGE;
            a->cmp_opt = 1;
            break;
        case 'z':
            if (sq_cli_double(PROG, "--sigma", optarg, &a->sigma))
                return SQ_EUSAGE;
            if (a->sigma < 0) {
                fprintf(stderr, PROG ": --sigma: %g, must be >= 0\n", a->sigma);
                return SQ_EUSAGE;
            }
            a->cmp_opt = 1;
            break;
        case 'c': a->curve = optarg; a->cmp_opt = 1; break;
        case OPT_JSON: a->json_file = optarg; a->cmp_opt = 1; break;
        case 'h': usage(stdout); return sq_cli_finish(PROG, SQ_OK);
        case OPT_VERSION: printf(PROG " %s\n", SQ_VERSION); return sq_cli_finish(PROG, SQ_OK);
        default: return sq_cli_bad_option(PROG, c, argv, optind);
        }
    }
    return PARSE_RUN;
}

/* The options that do not go together, given n_files operands; NULL when they fit. */
static const char *misfit(const accept_opts *a, int n_files)
{
    if (a->do_merge && a->do_compare)
        return "--merge and --compare cannot be combined";
    if ((a->do_merge || a->do_compare) && a->est_opt)
        return a->do_merge ? "estimation options (--mode, --temperature, --top-p, --width, "
                             "--samples, --seed, --threads, --by-depth) do not apply to --merge"
                           : "estimation options (--mode, --temperature, --top-p, --width, "
                             "--samples, --seed, --threads, --by-depth) do not apply to --compare";
    if (!a->do_compare && a->cmp_opt)
        return "--budget, --depth, --sigma, --curve and --json apply to --compare only";
    if (a->do_plot && (!svg_path || n_files < 1 || a->do_merge || a->do_compare || a->est.out_file))
        return "--plot needs curve files and --svg FILE (and no -o, --merge or --compare)";
    if (a->do_plot)
        return NULL;
    if (a->do_compare && svg_path)
        return "--compare prints its report; --svg does not apply (use --plot BASELINE.json "
               "NEW.json --svg FILE)";
    if (a->do_compare && n_files != 2)
        return "--compare needs exactly two files, BASELINE.json NEW.json";
    if (a->do_compare && a->est.out_file)
        return "--compare prints its report; -o does not apply";
    if (a->do_merge && n_files < 2)
        return "--merge needs at least two curve files";
    if (!a->do_compare && !a->do_merge && n_files < 1)
        return "no corpus given (see --help)";
    return NULL;
}

int main(int argc, char **argv)
{
    gsl_set_error_handler_off();
    accept_opts a;
    int rc = parse_options(argc, argv, &a);
    if (rc != PARSE_RUN)
        return rc;
    char **files = argv + optind;
    int n_files = argc - optind;
    const char *why = misfit(&a, n_files);
    if (why) {
        fprintf(stderr, PROG ": %s\n", why);
        return SQ_EUSAGE;
    }
    /* an output that is an input, or two outputs on one file, before any work (issue 14) */
    sq_path_use *in = calloc((size_t)n_files + 1, sizeof *in);
    if (!in)
        return SQ_ESOFTWARE;
    for (int i = 0; i < n_files; i++)
        in[i] = (sq_path_use){a.do_compare ? (i ? "NEW" : "BASELINE")
                              : a.do_merge || a.do_plot ? "curve file" : "corpus", files[i]};
    /* the off-path corpus is read too: no output may overwrite it (-o, --dynamic-branches) */
    in[n_files] = (sq_path_use){"--dynamic-offpath", a.est.dyn.offpath_file};
    sq_path_use outs[] = {{"-o", a.est.out_file}, {"--svg", svg_path}, {"--json", a.json_file},
                          {"--dynamic-branches", a.est.dyn.branches}};
    sq_error perr = {0};
    rc = sq_paths_check(in, n_files + 1, outs, 4, &perr);
    free(in);
    if (rc) {
        fprintf(stderr, PROG ": %s\n", perr.msg);
        return rc;
    }
    sq_out_install_signal_handlers();
    if (a.do_plot)
        rc = plot(files, n_files);
    else if (a.do_compare)
        rc = compare(files[0], files[1], a.budget, a.depth, a.sigma, a.curve, a.est.quiet,
                     a.json_file);
    else if (a.do_merge)
        rc = merge(files, n_files, a.est.out_file, a.est.quiet);
    else
        rc = estimate(files, n_files, &a.est);
    return sq_cli_finish(PROG, rc);
}
