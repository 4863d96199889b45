/* sequoia-plan: the optimal Sequoia token tree for an acceptance curve
 * (docs/design.md §3, §7.4). */
#include <errno.h>
#include <sys/stat.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "planner/baseline.h"
#include "libsequoia/format/curve.h"
#include "planner/dp.h"
#include "planner/dynamic.h"
#include "planner/hardware.h"
#include "planner/ladder.h"
#include "planner/engine.h"
#include "planner/export.h"
#include "planner/import.h"
#include "libsequoia/base/cli.h"
#include "libsequoia/base/io.h"
#include "libsequoia/base/progress.h"
#include "libsequoia/base/json.h"
#include "libsequoia/base/sha256.h"
#include "libsequoia/format/dynplan.h"
#include "libsequoia/format/plan.h"
#include "planner/svg.h"
#include "planner/table.h"

#define PROG "sequoia-plan"

#define OPTION_COLUMN 25   /* where the help text of an option starts */

/* One option's help: `head` (the option, padded to OPTION_COLUMN), then `lead` and the list
 * "NAME (note), ..." (names in a row with the same note share it, joined by `same`), then
 * `tail`, wrapped at `width` columns with continuation lines indented to OPTION_COLUMN. */
static void print_option(FILE *fp, const char *head, const char *lead, const char *const *names,
                         const char *const *notes, int n, const char *same, const char *tail,
                         int width)
{
    char text[2048];
    size_t len = (size_t)snprintf(text, sizeof text, "%s", lead);
    for (int i = 0; i < n && len < sizeof text; i++) {
        int last = i + 1 == n || strcmp(notes[i], notes[i + 1]) != 0;
        len += (size_t)snprintf(text + len, sizeof text - len, "%s%s", i == 0 ? " "
                                : strcmp(notes[i], notes[i - 1]) == 0 ? same : ", ", names[i]);
        if (last && len < sizeof text)
            len += (size_t)snprintf(text + len, sizeof text - len, " (%s)", notes[i]);
    }
    if (len < sizeof text)
        snprintf(text + len, sizeof text - len, "%s", tail);
    fprintf(fp, "%-*s", OPTION_COLUMN, head);
    int used = 0;   /* characters of text on the current line */
    for (const char *w = text; *w;) {
        int wl = (int)strcspn(w, " ");
        if (used && OPTION_COLUMN + used + 1 + wl > width) {
            fprintf(fp, "\n%*s", OPTION_COLUMN, "");
            used = 0;
        }
        fprintf(fp, "%s%.*s", used ? " " : "", wl, w);
        used += (used ? 1 : 0) + wl;
        w += wl;
        while (*w == ' ')
            w++;
    }
    fputc('\n', fp);
}

static void usage(FILE *fp)
{
    fprintf(fp,
        "Usage: " PROG " [--acceptance FILE [--curve NAME]] [--budget N] [--depth D] [--width B]\n"
        "                    [-o PLAN.json] [--table TABLE.json] [--quiet]\n"
        "                    [--engine ENGINE [--max-non-leaves M]]\n"
        "                    [--export FORMAT] [--save-plan PLAN.json] [--svg FILE] [--svg-table FILE]\n"
        "                    [--target-profile T.json (--draft-profile D.json | --draft-ms X)\n"
        "                     [--extrapolate none|linear|constant] [--sizes all|measured|budget]]\n"
        "       " PROG " --plan PLAN.json --export FORMAT [-o FILE] [--svg FILE]\n"
        "       " PROG " --import choices|growmap FILE [--acceptance FILE [--curve NAME]]\n"
        "                    [-o PLAN.json | --export FORMAT [-o FILE] [--save-plan PLAN.json]]\n"
        "\n"
        "Solves the Sequoia dynamic program (arXiv 2402.12374, §3.1) for the tree of at most N\n"
        "nodes (root included) and depth at most D (levels, root included) that maximises the\n"
        "expected number of tokens generated per speculation step, and writes it as a plan.\n"
        "The tree has exactly N nodes unless the depth and width bounds cannot hold that many.\n"
        "\n"
        "Options:\n"
        "  -a, --acceptance FILE  acceptance curves (format sequoia-acceptance v1), or the name of an\n"
        "                         embedded curve: paper-appE (the default: the paper's App. E\n"
        "                         vector, with a notice on stderr) or kjv-byte-pair (the shipped\n"
        "                         byte-level pair's stochastic curve at T = 0.6)\n"
        "  -c, --curve NAME       the curve to use when FILE holds several\n"
        "  -n, --budget N         tree size, root included (default 128)\n"
        "  -d, --depth D          depth bound, root level included (default 10); D >= N is unbounded\n"
        "  -w, --width B          at most B children per node (default: the curve's length)\n"
        "  -o, --output FILE      write the plan there (atomically); the summary then goes to\n"
        "                         stdout. Without -o the plan goes to stdout, the summary to stderr\n"
        "  -t, --table FILE       write the whole table Best[n][d], n <= N, d <= D (sequoia-table v1)\n"
        "  -q, --quiet            no summary\n"
        "\n"
        "Hardware-aware planning (paper §4.1): choose the size n <= N and depth d <= D with the most\n"
        "tokens per second, from measured latency profiles (sequoia-profile):\n"
        "      --target-profile F the target's forward time against new tokens; with a step\n"
        "                         section (sequoia-profile --draft) the step's parts as decoding\n"
        "                         runs them\n"
        "      --draft-profile F  the draft's: a step costs t_target(n) + t_draft(F) + one draft\n"
        "                         forward per inner level over its nodes\n"
        "      --trust-profiles   plan from profiles that are not physically credible (a time at\n"
        "                         n > 1 tokens 25%% below t(1), or a speedup above tokens/step);\n"
        "                         refused with exit 65 otherwise\n"
        "      --draft-ms X       or one fixed draft cost per level: t_target(n) + levels * X (the\n"
        "                         official implementation's model)\n"
        "      --extrapolate M    beyond a profile's measured tokens: none (an error, the default),\n"
        "                         linear or constant\n"
        "      --sizes S          all sizes <= N (default), only the sizes the target profile\n"
        "                         measured (as the official implementation does), or budget:\n"
        "                         the tree of the budget and depth bound itself, the plan's tree\n"
        "                         without profiles, priced rather than chosen (static trees)\n"
        "      --cost-model M     what the choice (tree, envelope, ladder rung) maximises: engine\n"
        "                         (the default: the engine's cost) or sequoia-run (sequoia-run's\n"
        "                         own cost, for deploying sequoia-run itself); both are printed\n"
        "\n");
    fputs(
        "Serving (batch profiles from sequoia-profile --batch): one tree per batch size:\n"
        "      --ladder           with --target-profile and --draft-profile/--draft-ms: -o gets a\n"
        "                         ladder (sequoia-ladder JSON): the best tree, chain and k x L at\n"
        "                         every profiled batch size, and where speculation stops paying\n"
        "      --objective O      latency (per-sequence speedup, the default) or throughput\n"
        "                         (tokens/s, against serving more sequences plainly instead)\n"
        "      --schedule FILE    TensorRT-LLM draft_len_schedule for chains (JSON)\n"
        "      --vllm-schedule FILE vLLM num_speculative_tokens and\n"
        "                         num_speculative_tokens_per_batch_size for chains (JSON)\n"
        "      --envelopes FILE   SGLang and TensorRT-LLM dynamic-tree flags by batch (JSON)\n"
        "      --ladder-plans DIR one plan per batch size, DIR/plan-b<batch>.json (for --plan)\n"
        "      --svg FILE         with --ladder: predicted speedup against batch size\n", fp);
    fprintf(fp,
        "\n"
        "Engines, exports, imports and pictures:\n");
    /* the engines and the formats from their tables (planner/engine.h, planner/export.h),
     * wrapped where these two paragraphs always wrapped (90 and 93 columns) */
    const char *names[SQ_ENGINE_COUNT + SQ_EXPORT_COUNT], *notes[SQ_ENGINE_COUNT + SQ_EXPORT_COUNT];
    int n = 0;
    for (int e = SQ_ENGINE_NONE + 1; e < SQ_ENGINE_COUNT; e++, n++) {
        names[n] = sq_engine_info_of((sq_engine)e)->name;
        notes[n] = sq_engine_info_of((sq_engine)e)->summary;
    }
    print_option(fp, "      --engine E", "plan under the limits of engine E and report what they cost "
                 "(docs/engines.md):", names, notes, n, " and ", "", 90);
    fprintf(fp,
        "      --max-non-leaves M TensorRT-LLM's max_non_leaves_per_layer (checked by --export\n"
        "                         trtllm and kept by --engine trtllm); default %d, as\n"
        "                         convert_checkpoint.py\n", SQ_TRTLLM_MAX_NON_LEAVES);
    n = 0;
    for (int f = 0; f < SQ_EXPORT_COUNT; f++, n++) {
        names[n] = sq_export_format_info_of((sq_export_format)f)->name;
        notes[n] = sq_export_format_info_of((sq_export_format)f)->note;
    }
    print_option(fp, "  -e, --export FORMAT", "write FORMAT instead of the plan to -o (or stdout):",
                 names, notes, n, ", ", ".", 93);
    print_option(fp, "", "A plan that breaks the engine's limits is refused (exit 65) with the "
                 "reason", NULL, NULL, 0, NULL, "", 90);
    fprintf(fp,
        "      --plan FILE        export an existing plan instead of planning\n"
        "      --import FMT FILE  read an engine's tree (FMT: choices, i.e. [[0], [0, 0], ...] or\n"
        "                         [(0,), ...]; or growmap) and score it under the curve as a plan;\n"
        "                         the summary compares it with the optimal tree of the same size\n"
        "      --save-plan FILE   also write the plan when --export sends the export to -o\n"
        "      --svg FILE         a picture of the plan's tree (SVG)\n"
        "      --svg-table FILE   a picture of the table: F against size for several depths, with\n"
        "                         the chain and k x L baselines (SVG)\n"
        "\n");
    fprintf(fp,
        "Dynamic trees (--engine sglang or trtllm-dynamic, with curves whose key \"dynamic\"\n"
        "sequoia-accept wrote; docs/planning.md, \"Dynamic trees\"): -o gets a dynamic plan\n"
        "(sequoia-dynamic-plan JSON) whose expected_tokens is the predicted tokens/step of the\n"
        "engine's own tree. Curves without that key keep the static envelope of the best fixed tree.\n"
        "      --envelope L,K,N   predict this envelope: L draft steps, top-K, N nodes with the root\n"
        "                         (SGLang: N - 1 <= K + (L-1) K^2; TensorRT-LLM: L <= N - 1 <= K L)\n"
        "                         Without it, --target-profile and --draft-profile (or --draft-ms)\n"
        "                         search L <= min(8, D - 1), K <= 8 (and --width), N <= --budget\n"
        "                         for the most tokens/s at the profile's first batch size, with\n"
        "                         --ladder one envelope per profiled batch size\n"
        "      --export sglang|trtllm-dynamic  -o gets the engine's flags (SGLang server\n"
        "                         arguments, TensorRT-LLM EagleDecodingConfig fields; with\n"
        "                         --ladder one per batch size) and --save-plan FILE the plan;\n"
        "                         --plan DYNPLAN.json --export ENGINE exports a saved one\n"
        "      --mode M           the statistics' verifier: greedy, topk or stochastic\n"
        "      --temperature T    with --mode (default 1; greedy is 0); or --curve NAME\n"
        "      --trials N         Monte-Carlo steps per prediction, 100 to 10^7 (default 20000;\n"
        "                         their replay buffers, about N x (2 L^2 + 5) bytes, at most 2 GiB)\n"
        "      --path P           the verified path: draw (its rank drawn from the acceptance,\n"
        "                         the default) or text (the rank of the corpus's next token: for\n"
        "                         a corpus of the target's own decoding in the same mode)\n"
        "\n");
    fprintf(fp,
        "  -h, --help             this text\n"
        "      --version          the version\n"
        "\n"
        "Examples:\n"
        "  " PROG " --budget 128 --depth 10                        # paper's App. E curve, plan on stdout\n"
        "  " PROG " -a curves.json -c stochastic@T0.6 -n 64 -d 8 -o plan.json\n"
        "  " PROG " -a curves.json --budget 1024 --depth 32 --width 16 -o big.json --table table.json\n"
        "  " PROG " --plan plan.json --export trtllm -o choices.json     # engine export of a plan\n"
        "  " PROG " -n 64 -d 8 --engine vllm --export vllm -o tree.txt   # vLLM-compatible tree\n"
        "  " PROG " --import choices examples/trees/mc_sim_7b_63.json -o medusa63.json\n"
        "  " PROG " -n 128 -d 10 -o plan.json --svg tree.svg --svg-table table.svg\n"
        "  " PROG " -a curves.json -n 1024 -d 16 --target-profile gpu.json --draft-profile draft.json \\\n"
        "               -o plan.json                                # fastest tree for this machine\n"
        "  " PROG " -a curves.json --engine sglang --envelope 5,4,16 --mode greedy -o dyn.json\n"
        "  " PROG " -a curves.json --engine trtllm-dynamic --mode topk --target-profile t.json \\\n"
        "               --draft-profile d.json -n 64 --ladder -o dyn.json  # envelopes by batch size\n"
        "  " PROG " --plan dyn.json --export sglang -o flags.json     # the engine's flags\n"
        "\n"
        "Limits: (N+1)(D+1)(B+1) <= %lld cells and N^2*D*B/2 <= %lld steps (D and B clamped to N).\n"
        "Exit status: 0 success, 64 usage error or request past a limit, 65 invalid input data\n"
        "(also: a plan an engine cannot take, or a malformed imported tree), 66 input file missing,\n"
        "70 internal error, 73 cannot create output, 74 I/O error.\n",
        SQ_DP_MAX_CELLS, SQ_DP_MAX_WORK);
}

/* 100 (a / b - 1) as printed with `decimals` decimals: a difference that rounds to zero is
 * +0.0, never -0.0 (an imported tree equal to the optimum sums its terms in another order). */
static double pct(double a, double b, int decimals)
{
    double scale = decimals == 1 ? 10.0 : 100.0;
    double v = round(100.0 * (a / b - 1.0) * scale) / scale;
    return v == 0.0 ? 0.0 : v;
}

/* "nodes/level:    1 4 9 3": nodes are breadth-first (libsequoia/format/tree.h), so a level's
 * nodes are consecutive and are counted as they come, with nothing allocated. */
static void print_level_widths(FILE *fp, const sq_tree *t)
{
    fprintf(fp, "nodes/level:   ");
    for (int v = 0, count = 0; v < t->n; v++) {
        count++;
        if (v + 1 == t->n || t->depth[v + 1] != t->depth[v]) {
            fprintf(fp, " %d", count);
            count = 0;
        }
    }
    fprintf(fp, "\n");
}

static void print_summary(FILE *fp, const sq_curve *curve, const sq_dp *dp, const sq_plan *plan,
                          double solve_ms, const char *what)
{
    const sq_tree *t = plan->tree;
    int N = sq_dp_budget(dp), D = sq_dp_depth(dp), B = sq_dp_width(dp);
    int levels = sq_tree_depth(t);
    fprintf(fp, "curve:          %s (%s, %d ranks%s)\n", curve->name, curve->mode, curve->width,
            curve->depth_rows ? ", depth-dependent" : "");
    fprintf(fp, "bounds:         budget %d, depth <= %d, width <= %d\n", N, D, B);
    char label[32];
    snprintf(label, sizeof label, "%s:", what);
    fprintf(fp, "%-15s size %d, depth %d, %.4f expected tokens/step\n", label, t->n, levels,
            plan->expected_tokens);
    print_level_widths(fp, t);
    int chain_n, k, L;
    double chain = sq_baseline_chain(curve, N, D, &chain_n);
    double kxl = sq_baseline_kxl(curve, N, D, B, &k, &L);
    fprintf(fp, "best chain:     size %d, %.4f tokens/step (%s: %+.1f%%)\n", chain_n,
            chain, what, pct(plan->expected_tokens, chain, 1));
    if (k > 0)
        fprintf(fp, "best k x L:     %d x %d (size %d), %.4f tokens/step (%s: %+.1f%%)\n",
                k, L, 1 + k * L, kxl, what, pct(plan->expected_tokens, kxl, 1));
    fprintf(fp, "solve time:     %.2f ms\n", solve_ms);
}

/* One line per engine: does the tree fit its limits, and what goes with it? */
static void print_engine_status(FILE *fp, const sq_tree *t, int max_non_leaves)
{
    sq_engine_print_status(fp, t, max_non_leaves);
}

/* Summary of an imported or loaded plan, with the optimal tree of the same size and depth. */
static int print_plan_summary(FILE *fp, const sq_plan *plan, int max_non_leaves, sq_error *err)
{
    const sq_tree *t = plan->tree;
    int levels = sq_tree_depth(t);
    fprintf(fp, "curve:          %s (%s, %d ranks%s)\n", plan->acceptance.name,
            plan->acceptance.mode ? plan->acceptance.mode : "?", plan->acceptance.width,
            plan->acceptance.depth_rows ? ", depth-dependent" : "");
    fprintf(fp, "tree:           size %d, depth %d, widest node %d children, %.4f expected "
                "tokens/step\n", t->n, levels, sq_tree_max_children(t), plan->expected_tokens);
    print_level_widths(fp, t);
    sq_dp_params dpp = sq_dp_default_params();
    dpp.budget = t->n;
    dpp.depth = levels;
    dpp.curve = &plan->acceptance;
    sq_dp *dp = NULL;
    /* A tree past the DP's limits has no optimum to compare with; out of memory is an error. */
    if (!sq_dp_check(&dpp, NULL)) {
        int rc = sq_dp_solve(&dpp, &dp, err);
        if (rc)
            return rc;
        double best = sq_dp_best(dp, t->n, levels);
        fprintf(fp, "optimal tree:   same size and depth bound: %.4f tokens/step (this tree: "
                    "%+.1f%%)\n", best, pct(plan->expected_tokens, best, 1));
        sq_dp_free(dp);
    }
    print_engine_status(fp, t, max_non_leaves);
    return SQ_OK;
}

/* ---- command line --------------------------------------------------------------------------- */

typedef struct plan_opts {
    const char *acc_file, *curve_name, *out_file, *table_file, *plan_file, *import_file;
    const char *save_plan, *svg_file, *svg_table, *target_profile, *draft_profile;
    int quiet, width_given, export_fmt, import_fmt, max_non_leaves, engine, planning_opts;
    int draft_ms_given, ladder, objective, cost_model_given;
    const char *schedule_file, *vllm_schedule_file, *envelopes_file, *ladder_plans;
    /* dynamic plans (--engine sglang|trtllm-dynamic with dynamic statistics) */
    int env_given, env_L, env_K, env_N, trials, dyn_mode, dyn_path;
    double dyn_temperature;
    sq_hw_params hwp;
    sq_dp_params params;
} plan_opts;

enum { OPT_ENGINE = 256, OPT_MAX_NON_LEAVES, OPT_PLAN, OPT_IMPORT, OPT_SAVE_PLAN, OPT_SVG,
       OPT_SVG_TABLE, OPT_TARGET_PROFILE, OPT_DRAFT_PROFILE, OPT_DRAFT_MS, OPT_EXTRAPOLATE,
       OPT_SIZES, OPT_LADDER, OPT_OBJECTIVE, OPT_SCHEDULE, OPT_ENVELOPES, OPT_LADDER_PLANS,
       OPT_VLLM_SCHEDULE, OPT_ENVELOPE, OPT_MODE, OPT_TEMPERATURE, OPT_TRIALS, OPT_PATH,
       OPT_COST_MODEL };

enum { OPT_TRUST_PROFILES = 1024 };   /* planner/hardware.h, credibility */

#define PARSE_RUN (-1)   /* parse_options: go on and run */

/* The options with a value to check beyond a number. */
static int parse_choice(int c, const char *arg, plan_opts *o)
{
    switch (c) {
    case 'e':
        if ((o->export_fmt = sq_export_format_parse(arg)) >= 0)
            return SQ_OK;
        fprintf(stderr, PROG ": --export: unknown format '%s' (one of: %s)\n", arg,
                sq_export_format_list());
        return SQ_EUSAGE;
    case OPT_ENGINE:
        if ((o->engine = sq_engine_parse(arg)) >= 0)
            return SQ_OK;
        fprintf(stderr, PROG ": --engine: unknown engine '%s' (one of: %s)\n", arg,
                sq_engine_list());
        return SQ_EUSAGE;
    case OPT_IMPORT:
        if ((o->import_fmt = sq_import_format_parse(arg)) >= 0)
            return SQ_OK;
        fprintf(stderr, PROG ": --import: unknown format '%s' (choices or growmap)\n", arg);
        return SQ_EUSAGE;
    case OPT_DRAFT_MS: {
        char *end;
        o->hwp.draft_ms = strtod(arg, &end);
        o->draft_ms_given = 1;
        if (end != arg && !*end && isfinite(o->hwp.draft_ms) && o->hwp.draft_ms >= 0)
            return SQ_OK;
        fprintf(stderr, PROG ": --draft-ms: '%s' is not a time >= 0 in milliseconds\n", arg);
        return SQ_EUSAGE;
    }
    case OPT_EXTRAPOLATE: {
        int m = sq_extrapolate_parse(arg);
        o->hwp.extrapolate = (sq_extrapolate)(m < 0 ? 0 : m);
        if (m >= 0)
            return SQ_OK;
        fprintf(stderr, PROG ": --extrapolate: unknown mode '%s' (none, linear or constant)\n", arg);
        return SQ_EUSAGE;
    }
    default: /* OPT_SIZES */
        o->hwp.measured_sizes_only = !strcmp(arg, "measured");
        o->hwp.budget_only = !strcmp(arg, "budget");
        if (!strcmp(arg, "all") || !strcmp(arg, "measured") || !strcmp(arg, "budget"))
            return SQ_OK;
        fprintf(stderr, PROG ": --sizes: unknown value '%s' (all, measured or budget)\n", arg);
        return SQ_EUSAGE;
    }
}

/* Fills *o from argv. Returns PARSE_RUN, or the exit status (--help, --version, errors). */
static int parse_options(int argc, char **argv, plan_opts *o)
{
    static const struct option opts[] = {
        {"acceptance", required_argument, NULL, 'a'}, {"curve", required_argument, NULL, 'c'},
        {"budget", required_argument, NULL, 'n'},     {"depth", required_argument, NULL, 'd'},
        {"width", required_argument, NULL, 'w'},      {"output", required_argument, NULL, 'o'},
        {"table", required_argument, NULL, 't'},      {"quiet", no_argument, NULL, 'q'},
        {"help", no_argument, NULL, 'h'},             {"version", no_argument, NULL, 'V'},
        {"export", required_argument, NULL, 'e'},     {"engine", required_argument, NULL, OPT_ENGINE},
        {"max-non-leaves", required_argument, NULL, OPT_MAX_NON_LEAVES},
        {"plan", required_argument, NULL, OPT_PLAN},  {"import", required_argument, NULL, OPT_IMPORT},
        {"save-plan", required_argument, NULL, OPT_SAVE_PLAN},
        {"svg", required_argument, NULL, OPT_SVG},    {"svg-table", required_argument, NULL, OPT_SVG_TABLE},
        {"target-profile", required_argument, NULL, OPT_TARGET_PROFILE},
        {"draft-profile", required_argument, NULL, OPT_DRAFT_PROFILE},
        {"trust-profiles", no_argument, NULL, OPT_TRUST_PROFILES},
        {"draft-ms", required_argument, NULL, OPT_DRAFT_MS},
        {"extrapolate", required_argument, NULL, OPT_EXTRAPOLATE},
        {"sizes", required_argument, NULL, OPT_SIZES},
        {"ladder", no_argument, NULL, OPT_LADDER},
        {"objective", required_argument, NULL, OPT_OBJECTIVE},
        {"schedule", required_argument, NULL, OPT_SCHEDULE},
        {"vllm-schedule", required_argument, NULL, OPT_VLLM_SCHEDULE},
        {"envelopes", required_argument, NULL, OPT_ENVELOPES},
        {"ladder-plans", required_argument, NULL, OPT_LADDER_PLANS},
        {"envelope", required_argument, NULL, OPT_ENVELOPE},
        {"mode", required_argument, NULL, OPT_MODE},
        {"temperature", required_argument, NULL, OPT_TEMPERATURE},
        {"trials", required_argument, NULL, OPT_TRIALS},
        {"path", required_argument, NULL, OPT_PATH},
        {"cost-model", required_argument, NULL, OPT_COST_MODEL},
        {NULL, 0, NULL, 0},
    };
    *o = (plan_opts){.export_fmt = -1, .import_fmt = -1, .engine = SQ_ENGINE_NONE,
                     .dyn_mode = -1, .dyn_temperature = NAN,
                     .trials = sq_dyn_predict_default_params().trials,
                     .hwp = sq_hw_default_params(), .params = sq_dp_default_params()};
    int c;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":a:c:n:d:w:o:t:e:qh", opts, NULL)) != -1) {
        int *num = c == 'n' ? &o->params.budget : c == 'd' ? &o->params.depth
                 : c == 'w' ? &o->params.width : NULL;
        switch (c) {
        case 'a': o->acc_file = optarg; break;
        case 'c': o->curve_name = optarg; break;
        case 'n': case 'd': case 'w':
            if (sq_cli_int(PROG, c == 'n' ? "--budget" : c == 'd' ? "--depth" : "--width", optarg,
                           INT_MIN, INT_MAX, num))
                return SQ_EUSAGE;
            o->planning_opts = 1;
            o->width_given |= c == 'w';
            break;
        case 'o': o->out_file = optarg; break;
        case 't': o->table_file = optarg; break;
        case 'q': o->quiet = 1; break;
        case 'h': usage(stdout); return sq_cli_finish(PROG, SQ_OK);
        case 'V': printf(PROG " %s\n", SQ_VERSION); return sq_cli_finish(PROG, SQ_OK);
        case OPT_MAX_NON_LEAVES:
            if (sq_cli_int(PROG, "--max-non-leaves", optarg, 1, INT_MAX, &o->max_non_leaves))
                return SQ_EUSAGE;
            break;
        case OPT_IMPORT:
            if (parse_choice(c, optarg, o))
                return SQ_EUSAGE;
            if (optind >= argc) {
                fprintf(stderr, PROG ": --import %s needs a FILE (see --help)\n", optarg);
                return SQ_EUSAGE;
            }
            o->import_file = argv[optind++];
            break;
        case 'e': case OPT_ENGINE: case OPT_DRAFT_MS: case OPT_EXTRAPOLATE: case OPT_SIZES:
            if (parse_choice(c, optarg, o))
                return SQ_EUSAGE;
            break;
        case OPT_PLAN: o->plan_file = optarg; break;
        case OPT_SAVE_PLAN: o->save_plan = optarg; break;
        case OPT_SVG: o->svg_file = optarg; break;
        case OPT_SVG_TABLE: o->svg_table = optarg; break;
        case OPT_TARGET_PROFILE: o->target_profile = optarg; break;
        case OPT_TRUST_PROFILES: o->hwp.trust = 1; break;
        case OPT_LADDER: o->ladder = 1; break;
        case OPT_OBJECTIVE:
            if ((o->objective = sq_objective_parse(optarg)) < 0) {
                fprintf(stderr, PROG ": --objective: unknown objective '%s' (latency or "
                        "throughput)\n", optarg);
                return SQ_EUSAGE;
            }
            break;
        case OPT_COST_MODEL: {
            int m = sq_cost_model_parse(optarg);
            if (m < 0) {
                fprintf(stderr, PROG ": --cost-model: unknown model '%s' (engine or "
                        "sequoia-run)\n", optarg);
                return SQ_EUSAGE;
            }
            o->hwp.cost_model = (sq_cost_model)m;
            o->cost_model_given = 1;
            break;
        }
        case OPT_SCHEDULE: o->schedule_file = optarg; break;
        case OPT_VLLM_SCHEDULE: o->vllm_schedule_file = optarg; break;
        case OPT_ENVELOPES: o->envelopes_file = optarg; break;
        case OPT_LADDER_PLANS: o->ladder_plans = optarg; break;
        case OPT_DRAFT_PROFILE: o->draft_profile = optarg; break;
        case OPT_ENVELOPE: {
            /* the one parser of sequoia-plan and sequoia-run (libsequoia/format/dynplan.h) */
            sq_error perr = {0};
            if (sq_dynplan_envelope_parse(optarg, &o->env_L, &o->env_K, &o->env_N, &perr)) {
                fprintf(stderr, PROG ": %s\n", perr.msg);
                return SQ_EUSAGE;
            }
            o->env_given = 1;
            break;
        }
        case OPT_MODE: {
            sq_mode m;
            if (sq_mode_parse(optarg, &m) != 0 || m == SQ_MODE_SPECINFER) {
                fprintf(stderr, PROG ": --mode: '%s' is not a verifier of dynamic trees (greedy, "
                        "topk or stochastic; specinfer is not run on them)\n", optarg);
                return SQ_EUSAGE;
            }
            o->dyn_mode = (int)m;
            break;
        }
        case OPT_TEMPERATURE:
            if (sq_cli_double(PROG, "--temperature", optarg, &o->dyn_temperature))
                return SQ_EUSAGE;
            if (!(o->dyn_temperature >= 0)) {
                fprintf(stderr, PROG ": --temperature: %g, must be >= 0\n", o->dyn_temperature);
                return SQ_EUSAGE;
            }
            break;
        case OPT_TRIALS:
            if (sq_cli_int(PROG, "--trials", optarg, 100, 10000000, &o->trials))
                return SQ_EUSAGE;
            break;
        case OPT_PATH:
            if (!strcmp(optarg, "draw") || !strcmp(optarg, "text")) {
                o->dyn_path = !strcmp(optarg, "text") ? SQ_DYN_PATH_TEXT : SQ_DYN_PATH_DRAW;
                break;
            }
            fprintf(stderr, PROG ": --path: '%s' is neither draw nor text\n", optarg);
            return SQ_EUSAGE;
        default: return sq_cli_bad_option(PROG, c, argv, optind);
        }
    }
    if (optind < argc) {
        fprintf(stderr, PROG ": unexpected argument '%s' (see --help)\n", argv[optind]);
        return SQ_EUSAGE;
    }
    return PARSE_RUN;
}

/* "--target-profile ... an --engine other than sglang and trtllm-dynamic": the envelope
 * engines, from the engine table. */
static const char *target_profile_conflict(char *buf, size_t cap)
{
    size_t len = (size_t)snprintf(buf, cap, "--target-profile chooses a new tree; it does not go "
                                  "with --plan, --import or an --engine other than");
    int count = 0;
    for (int e = SQ_ENGINE_NONE + 1; e < SQ_ENGINE_COUNT && len < cap; e++)
        if (sq_engine_is_envelope((sq_engine)e)) {
            int more = 0;   /* another envelope engine follows */
            for (int f = e + 1; f < SQ_ENGINE_COUNT; f++)
                more |= sq_engine_is_envelope((sq_engine)f);
            len += (size_t)snprintf(buf + len, cap - len, "%s%s",
                                    count == 0 ? " " : more ? ", " : " and ",
                                    sq_engine_name((sq_engine)e));
            count++;
        }
    return buf;
}

/* The options that do not go together; 0 or SQ_EUSAGE (with the message printed). */
static int check_options(const plan_opts *o)
{
    const char *why = NULL;
    char buf[256];
    if (o->width_given && o->params.width < 1)
        snprintf(buf, sizeof buf, "--width: %d, must be at least 1", o->params.width), why = buf;
    else if (o->params.budget < 1 || o->params.depth < 1)
        snprintf(buf, sizeof buf, "%s: %d, must be at least 1", o->params.budget < 1 ? "--budget"
                 : "--depth", o->params.budget < 1 ? o->params.budget : o->params.depth), why = buf;
    else if (o->params.budget > SQ_DP_MAX_BUDGET)
        snprintf(buf, sizeof buf, "--budget: %d exceeds the limit of %d nodes", o->params.budget,
                 SQ_DP_MAX_BUDGET), why = buf;
    else if (o->curve_name && !o->acc_file)
        why = "--curve needs --acceptance FILE";
    else if ((o->draft_profile || o->draft_ms_given) && !o->target_profile)
        why = "--draft-profile/--draft-ms need --target-profile FILE";
    else if (o->cost_model_given && !o->target_profile)
        why = "--cost-model ranks the hardware-aware choice: it needs --target-profile FILE";
    else if (o->target_profile && !!o->draft_profile == o->draft_ms_given)
        why = "--target-profile needs exactly one of --draft-profile FILE (per-level draft cost) "
              "and --draft-ms X (one fixed cost per level)";
    else if (o->target_profile && (o->plan_file || o->import_file ||
                                   (o->engine != SQ_ENGINE_NONE &&
                                    !sq_engine_is_envelope((sq_engine)o->engine))))
        why = target_profile_conflict(buf, sizeof buf);
    else if (o->plan_file && o->import_file)
        why = "--plan and --import exclude each other";
    else if ((o->objective || o->schedule_file || o->vllm_schedule_file || o->envelopes_file ||
              o->ladder_plans) && !o->ladder)
        why = "--objective, --schedule, --vllm-schedule, --envelopes and --ladder-plans go with "
              "--ladder";
    else if (o->ladder && !o->target_profile)
        why = "--ladder needs --target-profile FILE (a batch profile: sequoia-profile --batch) "
              "and --draft-profile FILE or --draft-ms X";
    else if (o->ladder && (((o->export_fmt >= 0 || o->save_plan) &&
                            !sq_engine_is_envelope((sq_engine)o->engine)) ||
                           o->table_file || o->svg_table))
        why = "--ladder writes a ladder; --export, --table, --save-plan and --svg-table go with a "
              "single plan (use --ladder-plans DIR, then --plan)";
    else if (o->save_plan && o->export_fmt < 0)
        why = "--save-plan goes with --export (without it -o is the plan)";
    else if ((o->env_given || o->dyn_mode >= 0 || !isnan(o->dyn_temperature)) &&
             !sq_engine_is_envelope((sq_engine)o->engine))
        why = "--envelope, --mode and --temperature describe an engine's dynamic tree: they go "
              "with --engine sglang or --engine trtllm-dynamic";
    else if (o->env_given && !o->acc_file)
        why = "--envelope needs --acceptance CURVES.json holding the dynamic-tree statistics "
              "(sequoia-accept writes them)";
    else if (o->env_given && o->ladder)
        why = "--ladder searches an envelope per batch size; drop --envelope";
    if (!why && (o->plan_file || o->import_file)) {
        const char *mode = o->plan_file ? "--plan" : "--import";
        const char *bad = o->planning_opts ? "--budget/--depth/--width"
                        : o->engine ? "--engine" : o->table_file ? "--table"
                        : o->svg_table ? "--svg-table" : NULL;
        if (bad)
            snprintf(buf, sizeof buf, "%s does not go with %s (they shape a new plan)", bad, mode),
                why = buf;
        else if (o->plan_file && (o->acc_file || o->curve_name))
            why = "--plan: the plan carries its own curve; drop --acceptance";
        else if (o->plan_file && o->export_fmt < 0 && !o->svg_file)
            why = "--plan needs --export FORMAT or --svg FILE";
    }
    if (!why) {
        /* an output that is an input, or two outputs on one file: refused before any work */
        sq_path_use in[] = {{"--acceptance", o->acc_file}, {"--plan", o->plan_file},
                            {"--import", o->import_file}, {"--target-profile", o->target_profile},
                            {"--draft-profile", o->draft_profile}};
        sq_path_use out[] = {{"-o", o->out_file}, {"--table", o->table_file},
                             {"--save-plan", o->save_plan}, {"--svg", o->svg_file},
                             {"--svg-table", o->svg_table}, {"--schedule", o->schedule_file},
                             {"--vllm-schedule", o->vllm_schedule_file},
                             {"--envelopes", o->envelopes_file}};
        sq_error e = {0};
        if (sq_paths_check(in, 5, out, 8, &e)) {
            fprintf(stderr, PROG ": %s\n", e.msg);
            return e.status;
        }
        return SQ_OK;
    }
    fprintf(stderr, PROG ": %s\n", why);
    return SQ_EUSAGE;
}

/* ---- one run -------------------------------------------------------------------------------- */

typedef struct plan_state {
    sq_curve_set *set;
    sq_dp *dp;                /* the unconstrained solve (NULL with --plan, --import)        */
    sq_plan *plan;
    sq_dynplan *dynplan;      /* --plan of a dynamic plan (sq_dynplan_sniff)                  */
    sq_engine_plan_result ep;
    sq_profile *tprof, *dprof;
    sq_hw_result *hw;
    double solve_ms, unconstrained;
    int default_curve;        /* no --acceptance: the notice comes after the work succeeded */
} plan_state;

static void state_free(plan_state *st)
{
    sq_tree_free(st->ep.tree);
    sq_plan_free(st->plan);
    sq_dynplan_free(st->dynplan);
    sq_dp_free(st->dp);
    sq_curve_set_free(st->set);
    sq_hw_result_free(st->hw);
    sq_profile_free(st->tprof);
    sq_profile_free(st->dprof);
}

/* The curve (a file, an embedded one, or the default), the plan of --plan, the profiles. */
static int load_inputs(plan_opts *o, plan_state *st, int dyn, sq_error *err)
{
    int rc;
    if (o->plan_file) {
        /* a static plan or a dynamic one (an envelope), told apart by its format */
        cJSON *root = NULL;
        sq_error ignored = {0};   /* unreadable: the static loader says why, as before */
        int dynamic = sq_json_load(o->plan_file, &root, &ignored) == SQ_OK &&
                      sq_dynplan_sniff(root);
        rc = dynamic ? sq_dynplan_from_json(root, o->plan_file, &st->dynplan, err)
                     : sq_plan_load(o->plan_file, &st->plan, err);
        cJSON_Delete(root);
        return rc;
    }
    if (dyn)   /* a dynamic plan reads its curves file itself (run_dynamic) */
        goto profiles;
    const char *builtin_note = NULL;
    const sq_curve *builtin = NULL;
    if (o->acc_file && access(o->acc_file, F_OK) != 0)
        builtin = sq_curve_builtin(o->acc_file, &builtin_note);
    if (builtin) {
        if (o->curve_name)
            return sq_error_set(err, SQ_EUSAGE, "--curve: the embedded curve \"%s\" is a single "
                                "curve", o->acc_file);
        o->params.curve = builtin;
        fprintf(stderr, PROG ": using the embedded curve \"%s\": %s\n", o->acc_file, builtin_note);
    } else if (o->acc_file) {
        if ((rc = sq_curve_set_load(o->acc_file, &st->set, err)) ||
            (rc = sq_curve_set_select(st->set, o->curve_name, o->acc_file, &o->params.curve, err))) {
            if (st->set && !o->curve_name)
                sq_cli_hint(err, "pick it with --curve NAME");
            return rc;
        }
    } else {
        st->default_curve = 1;
    }
    if (o->import_file)
        return sq_import_plan(o->import_file, (sq_import_format)o->import_fmt, o->params.curve,
                              &st->plan, err);
profiles:
    if (o->target_profile) {
        if ((rc = sq_profile_load(o->target_profile, &st->tprof, err)) ||
            (o->draft_profile && (rc = sq_profile_load(o->draft_profile, &st->dprof, err))))
            return rc;
        /* profiles that are not physically credible, for every use (the ladder too);
         * planner/hardware.h */
        if (!o->hwp.trust &&
            ((rc = sq_hw_check_profile(st->tprof, o->target_profile, err)) ||
             (st->dprof && (rc = sq_hw_check_profile(st->dprof, o->draft_profile, err)))))
            return rc;
        o->hwp.target = st->tprof;
        o->hwp.draft = st->dprof;
        o->hwp.target_file = o->target_profile;
        o->hwp.draft_file = o->draft_profile;
    }
    return SQ_OK;
}

/* Solves the DP once and makes the plan: the optimal tree, the engine's, or the fastest. */
static int make_plan(const plan_opts *o, plan_state *st, sq_error *err)
{
    int rc;
    if (st->plan)
        return SQ_OK;
    sq_dp_params solve = o->params;
    const sq_dp_params *prm = &solve;
    /* a progress line on a terminal, for solves that last more than a second */
    sq_progress pg;
    sq_progress_start(&pg, PROG, "solve", "columns", o->quiet, 1000);
    solve.progress = sq_progress_callback;
    solve.user = &pg;
    double t0 = sq_now_ms();
    rc = sq_dp_check(prm, err);
    if (!rc)
        rc = sq_dp_solve(prm, &st->dp, err);
    sq_progress_end(&pg);
    if (rc)
        return rc;
    st->solve_ms = sq_now_ms() - t0;
    sq_dp *dp = st->dp;
    int N = sq_dp_budget(dp), D = sq_dp_depth(dp), size = sq_dp_best_size(dp, D);
    st->unconstrained = sq_dp_best(dp, size, D);
    sq_tree *tree = NULL;
    if (o->engine != SQ_ENGINE_NONE) {
        sq_engine_plan_params epp = {.engine = (sq_engine)o->engine, .budget = prm->budget,
                                     .depth = prm->depth, .width = prm->width,
                                     .max_non_leaves = o->max_non_leaves, .curve = prm->curve,
                                     .solved = dp,
                                     .hw = o->target_profile ? &o->hwp : NULL};
        if ((rc = sq_engine_plan(&epp, &st->ep, err)))
            return rc;
        /* an envelope engine planned for the hardware is compared in tokens/s with the fastest
         * unconstrained tree on the same hardware (issue 27 W10), not in tokens/step with the
         * full-budget tree */
        if (o->target_profile && st->ep.step_ms > 0 &&
            (rc = sq_hw_select(dp, &o->hwp, &st->hw, err))) {
            sq_tree_free(st->ep.tree);
            st->ep.tree = NULL;
            return rc;
        }
        tree = st->ep.tree;
        st->ep.tree = NULL;
        rc = sq_plan_new(tree, prm->curve, N, st->ep.depth, st->ep.width, &st->plan, err);
    } else if (o->target_profile) {
        /* hardware-aware: the (size, depth) with the most tokens per second */
        if ((rc = sq_hw_select(dp, &o->hwp, &st->hw, err)) ||
            (rc = sq_dp_tree(dp, st->hw->n, st->hw->d, &tree, err)))
            return rc;
        rc = sq_plan_new(tree, prm->curve, N, D, sq_dp_width(dp), &st->plan, err);
        if (!rc && !(st->plan->hardware = sq_hw_to_json(st->hw, &o->hwp, o->target_profile,
                                                        o->draft_profile)))
            rc = sq_error_oom(err, "hardware report");
    } else {
        if ((rc = sq_dp_tree(dp, size, D, &tree, err)))
            return rc;
        rc = sq_plan_new(tree, prm->curve, N, D, sq_dp_width(dp), &st->plan, err);
    }
    return rc;   /* sq_plan_new owns the tree, also on failure */
}

/* `j` (NULL: out of memory) pretty-printed to fp, then freed. */
static int print_json(FILE *fp, cJSON *j, const char *what, sq_error *err)
{
    if (!j)
        return sq_error_oom(err, what);
    sq_json_print(fp, j);
    cJSON_Delete(j);
    return SQ_OK;
}

/* Every output opened before any is written, and all committed together (sq_cli_commit). */
static int write_outputs(const plan_opts *o, const plan_state *st, sq_error *err)
{
    const sq_plan *plan = st->plan;
    const char *plan_name = o->plan_file ? o->plan_file : o->import_file ? o->import_file : "plan";
    sq_export_format fmt = (sq_export_format)o->export_fmt;
    int rc;
    /* Check the export before opening anything, so that a refusal leaves no file behind. */
    if (o->export_fmt >= 0 &&
        (rc = sq_engine_check(plan->tree, sq_export_engine(fmt), o->max_non_leaves, plan_name,
                              err)))
        return rc;
    if (o->svg_table && !st->dp)
        return sq_error_set(err, SQ_EUSAGE, "--svg-table needs a planning run");
    enum { MAIN, TABLE, SAVE, SVG, SVG_TABLE, N_OUT };
    const char *path[N_OUT] = {!o->plan_file || o->export_fmt >= 0
                                   ? (o->out_file ? o->out_file : "-") : NULL,
                               o->table_file, o->save_plan, o->svg_file, o->svg_table};
    sq_out *out[N_OUT] = {0};
    for (int i = 0; i < N_OUT; i++)
        if (path[i] && (rc = sq_out_open(&out[i], path[i], err)))
            goto fail;
    if (out[MAIN] && o->export_fmt >= 0) {
        sq_export_params xp = sq_export_default_params();
        xp.max_non_leaves = o->max_non_leaves;
        xp.check_limits = 0;   /* checked above */
        if ((rc = sq_export_write(sq_out_stream(out[MAIN]), plan, fmt, &xp, plan_name, err)))
            goto fail;
    } else if (out[MAIN] && (rc = print_json(sq_out_stream(out[MAIN]), sq_plan_to_json(plan), "plan",
                                         err))) {
        goto fail;
    }
    if ((out[TABLE] && (rc = print_json(sq_out_stream(out[TABLE]),
                                      sq_table_to_json(st->dp, o->params.curve), "table", err))) ||
        (out[SAVE] && (rc = print_json(sq_out_stream(out[SAVE]), sq_plan_to_json(plan), "plan", err))) ||
        (out[SVG] && (rc = sq_svg_plan_write(sq_out_stream(out[SVG]), plan, err))) ||
        (out[SVG_TABLE] && (rc = sq_svg_table_write(sq_out_stream(out[SVG_TABLE]), st->dp,
                                                    o->params.curve, err))))
        goto fail;
    return sq_cli_commit(out, N_OUT, err);
fail:
    for (int i = 0; i < N_OUT; i++)
        sq_out_abort(out[i]);
    return rc;
}

/* What an engine plan adds: a lowered budget, an envelope's flags and what they promise. */
static void print_engine_extra(FILE *fp, const plan_opts *o, const plan_state *st)
{
    const sq_engine_plan_result *ep = &st->ep;
    if (ep->budget != o->params.budget)   /* the size rule, sq_engine_size_ok */
        fprintf(fp, "                budget %d lowered to %d (%s: not 32k + 1 nodes)\n",
                o->params.budget, ep->budget, sq_engine_info_of((sq_engine)o->engine)->display);
    if (!sq_engine_is_envelope((sq_engine)o->engine))
        return;
    char req[400];
    sq_engine_requirements(st->plan->tree, (sq_engine)o->engine, o->max_non_leaves, req,
                           sizeof req);
    fprintf(fp, "envelope:       %s\n", req);
    fprintf(fp, "                the tree is the best fixed tree the engine could build within "
            "these flags%s; a static prediction, not a guarantee for its dynamic selection\n",
            ep->exact ? "" : " (non-leaf limit repaired greedily)");
    if (o->target_profile)
        fprintf(fp, "                %.4g ms/step, predicted speedup %.3fx over the target "
                "alone\n", ep->step_ms, ep->speedup);
}

static int print_report(const plan_opts *o, const plan_state *st, sq_error *err)
{
    FILE *fp = o->out_file || (o->plan_file && o->export_fmt < 0) ? stdout : stderr;
    const sq_plan *plan = st->plan;
    const sq_hw_result *hw = st->hw;
    if (!st->dp) {
        return print_plan_summary(fp, plan, o->max_non_leaves, err);
    } else if (o->engine == SQ_ENGINE_NONE) {
        print_summary(fp, o->params.curve, st->dp, plan, st->solve_ms,
                      hw ? "fastest tree" : "optimal tree");
        if (hw) {
            fprintf(fp, "hardware:       target %s (%s); draft %s\n", st->tprof->device,
                    o->target_profile, st->dprof ? o->draft_profile : "fixed cost per level");
            fprintf(fp, "                size %d, depth bound %d (%d levels): %.4g ms/step, "
                    "%.4g ms/token, predicted speedup %.3fx over the target alone "
                    "(%.4g ms/token)\n", hw->n, hw->d, hw->levels, hw->step_ms,
                    hw->step_ms / hw->expected_tokens, hw->speedup, hw->target1_ms);
            fprintf(fp, "sequoia-run:    the same tree as sequoia-run runs it (its draft catches "
                    "up %.3f tokens a step): %.4g ms/step, %.1f tokens/s, predicted speedup "
                    "%.3fx\n", hw->runtime_catchup, hw->runtime_step_ms,
                    1e3 * hw->expected_tokens / hw->runtime_step_ms, hw->runtime_speedup);
            if (o->hwp.cost_model == SQ_COST_SEQUOIA_RUN)
                fprintf(fp, "chosen by:      sequoia-run's cost model (--cost-model sequoia-run): "
                        "the size and depth with the most tokens/s as sequoia-run runs it\n");
            sq_hw_print_table(fp, hw);
        }
        print_engine_status(fp, plan->tree, o->max_non_leaves);
    } else {
        print_summary(fp, o->params.curve, st->dp, plan, st->solve_ms, "engine tree");
        if (hw && st->ep.step_ms > 0) {
            /* like with like: both chosen for this hardware, in tokens/s */
            double rate = plan->expected_tokens / st->ep.step_ms * 1000.0;
            double best = hw->expected_tokens / hw->step_ms * 1000.0;
            fprintf(fp, "engine:         %s, %s: %.4f tokens/step, %.1f tokens/s, %+.2f%% "
                    "against the fastest unconstrained tree on this hardware (size %d, depth %d: "
                    "%.1f tokens/s)\n", sq_engine_name((sq_engine)o->engine),
                    st->ep.exact ? "optimal under its limits" : "repaired greedily to its "
                    "limits (not proven optimal)", plan->expected_tokens, rate,
                    pct(rate, best, 2), hw->n, hw->d, best);
        } else {
            fprintf(fp, "engine:         %s, %s: %.4f tokens/step, %+.2f%% against the "
                    "unconstrained optimum %.4f\n", sq_engine_name((sq_engine)o->engine),
                    st->ep.exact ? "optimal under its limits" : "repaired greedily to its limits "
                    "(not proven optimal)", plan->expected_tokens,
                    pct(plan->expected_tokens, st->unconstrained, 2), st->unconstrained);
        }
        print_engine_extra(fp, o, st);
        print_engine_status(fp, plan->tree, o->max_non_leaves);
    }
    return SQ_OK;
}

/* --ladder: one solve, the ladder over the profiled batch sizes, its files and its summary. */
static int run_ladder(const plan_opts *o, plan_state *st, sq_error *err)
{
    int rc;
    if (o->export_fmt >= 0 || o->save_plan)   /* check_options lets these by for the envelope
                                               * engines: a dynamic ladder exports them */
        return sq_error_set(err, SQ_EUSAGE, "--ladder writes a ladder; --export and --save-plan "
                            "go with a single plan or a dynamic plan (use --ladder-plans DIR, "
                            "then --plan)");
    if ((rc = sq_dp_check(&o->params, err)) || (rc = sq_dp_solve(&o->params, &st->dp, err)))
        return rc;
    sq_ladder_params lp = {.cost_model = o->hwp.cost_model,
                           .target = st->tprof, .draft = st->dprof, .draft_ms = o->hwp.draft_ms,
                           .extrapolate = o->hwp.extrapolate,
                           .objective = (sq_objective)o->objective,
                           .target_file = o->target_profile, .draft_file = o->draft_profile};
    sq_ladder *l = NULL;
    if ((rc = sq_ladder_solve(st->dp, o->params.curve, &lp, &l, err)))
        return rc;
    if (o->ladder_plans && mkdir(o->ladder_plans, 0777) != 0 && errno != EEXIST) {
        rc = sq_error_set(err, SQ_ECANTCREAT, "%s: cannot create the folder: %s", o->ladder_plans,
                          strerror(errno));
        sq_ladder_free(l);
        return rc;
    }
    enum { MAIN, SCHEDULE, VSCHEDULE, ENVELOPES, SVG, FIXED };
    const char *path[FIXED + SQ_LADDER_MAX_RUNGS] = {o->out_file ? o->out_file : "-",
                                                     o->schedule_file, o->vllm_schedule_file,
                                                     o->envelopes_file, o->svg_file};
    char names[SQ_LADDER_MAX_RUNGS][4096];
    for (int i = 0; o->ladder_plans && i < l->n; i++) {
        snprintf(names[i], sizeof names[i], "%s/plan-b%d.json", o->ladder_plans,
                 l->rungs[i].batch);
        path[FIXED + i] = names[i];
    }
    int n_out = FIXED + (o->ladder_plans ? l->n : 0);
    /* a rung's plan that is -o, another output or an input: refused before anything is written */
    sq_path_use in[] = {{"--acceptance", o->acc_file}, {"--target-profile", o->target_profile},
                        {"--draft-profile", o->draft_profile}};
    sq_path_use outs[FIXED + SQ_LADDER_MAX_RUNGS] = {
        {"-o", path[MAIN]}, {"--schedule", path[SCHEDULE]},
        {"--vllm-schedule", path[VSCHEDULE]}, {"--envelopes", path[ENVELOPES]},
        {"--svg", path[SVG]}};
    for (int i = FIXED; i < n_out; i++)
        outs[i] = (sq_path_use){"--ladder-plans", path[i]};
    if ((rc = sq_paths_check(in, 3, outs, n_out, err))) {
        sq_ladder_free(l);
        return rc;
    }
    sq_out *out[FIXED + SQ_LADDER_MAX_RUNGS] = {0};
    for (int i = 0; i < n_out && !rc; i++)
        if (path[i])
            rc = sq_out_open(&out[i], path[i], err);
    cJSON *j = rc ? NULL : sq_ladder_to_json(l, &lp);
    if (!rc)
        rc = print_json(sq_out_stream(out[MAIN]), j, "ladder", err);
    if (!rc && out[SCHEDULE])
        rc = sq_ladder_export(l, "trtllm-schedule", sq_out_stream(out[SCHEDULE]), err);
    if (!rc && out[VSCHEDULE])
        rc = sq_ladder_export(l, "vllm-schedule", sq_out_stream(out[VSCHEDULE]), err);
    if (!rc && out[ENVELOPES])
        rc = sq_ladder_export(l, "envelopes", sq_out_stream(out[ENVELOPES]), err);
    if (!rc && out[SVG])
        rc = sq_ladder_svg_write(sq_out_stream(out[SVG]), l, err);
    for (int i = 0; !rc && o->ladder_plans && i < l->n; i++)
        rc = print_json(sq_out_stream(out[FIXED + i]), sq_plan_to_json(l->rungs[i].plan), "plan",
                        err);
    if (!rc)
        rc = sq_cli_commit(out, n_out, err);
    else
        for (int i = 0; i < n_out; i++)
            sq_out_abort(out[i]);
    if (!rc && !o->quiet)
        sq_ladder_print(o->out_file ? stdout : stderr, l);
    sq_ladder_free(l);
    return rc;
}

/* ---- dynamic plans (--engine sglang|trtllm-dynamic; planner/dynamic.h) ---------------------
 *
 * An envelope engine gets a dynamic plan (libsequoia/format/dynplan.h) when --envelope is given
 * or the curves file holds the dynamic-tree statistics; otherwise (curves without them, or the
 * embedded curves) the static path of planner/engine.c stays: the smallest envelope holding the
 * best static tree, which is a bound, not a prediction of the engine's dynamic tree. */

/* Whether this run makes a dynamic plan. */
static int wants_dynamic(const plan_opts *o, int *dyn, sq_error *err)
{
    *dyn = 0;
    if (!sq_engine_is_envelope((sq_engine)o->engine) || o->plan_file || o->import_file)
        return SQ_OK;
    if (o->env_given) {
        *dyn = 1;
        return SQ_OK;
    }
    if (!o->acc_file || access(o->acc_file, F_OK) != 0)
        return SQ_OK;
    cJSON *root = NULL;
    int rc = sq_json_load(o->acc_file, &root, err);
    if (!rc)
        *dyn = sq_json_field(root, "dynamic") != NULL;
    cJSON_Delete(root);
    if (!rc && !*dyn && (o->dyn_mode >= 0 || !isnan(o->dyn_temperature)))
        rc = sq_error_set(err, SQ_EDATA, "%s: no key \"dynamic\": --mode/--temperature select "
                          "dynamic-tree statistics, which these curves lack (estimate them again "
                          "with sequoia-accept)", o->acc_file);
    return rc;
}

/* The configuration of the statistics: --curve NAME, or --mode/--temperature, or the one the
 * file holds. */
static int dyn_config(const plan_opts *o, const cJSON *root, char *name, size_t cap,
                      sq_error *err)
{
    if (o->curve_name) {
        snprintf(name, cap, "%s", o->curve_name);
        return SQ_OK;
    }
    if (o->dyn_mode >= 0) {
        if (o->dyn_mode == SQ_MODE_GREEDY)
            snprintf(name, cap, "greedy@T0");
        else
            snprintf(name, cap, "%s@T%g", sq_mode_name((sq_mode)o->dyn_mode),
                     isnan(o->dyn_temperature) ? 1.0 : o->dyn_temperature);
        if (o->dyn_mode != SQ_MODE_GREEDY && o->dyn_temperature == 0)
            return sq_error_set(err, SQ_EUSAGE, "--temperature 0 goes with --mode greedy");
        return SQ_OK;
    }
    if (!isnan(o->dyn_temperature))
        return sq_error_set(err, SQ_EUSAGE, "--temperature needs --mode (greedy, topk or "
                            "stochastic)");
    const cJSON *acc = sq_json_field(sq_json_field(root, "dynamic"), "accept");
    if (cJSON_GetArraySize(acc) == 1) {
        snprintf(name, cap, "%s", acc->child->string);
        return SQ_OK;
    }
    char list[512] = "";
    size_t len = 0;
    const cJSON *c;
    cJSON_ArrayForEach(c, acc)
        if (len < sizeof list)
            len += (size_t)snprintf(list + len, sizeof list - len, "%s%s", len ? ", " : "",
                                    c->string);
    return sq_error_set(err, SQ_EUSAGE, "%s: the dynamic statistics hold several configurations "
                        "(%s); pick one with --mode M [--temperature T] or --curve NAME",
                        o->acc_file, len ? list : "none");
}

/* The engine's flags for an envelope, one line. */
static void dyn_flags(sq_engine e, int L, int K, int N, char *buf, size_t cap)
{
    if (e == SQ_ENGINE_SGLANG)
        snprintf(buf, cap, "--speculative-num-steps %d --speculative-eagle-topk %d "
                 "--speculative-num-draft-tokens %d", L, K, N);
    else
        snprintf(buf, cap, "use_dynamic_tree: true, max_draft_len: %d, dynamic_tree_max_topK: %d, "
                 "max_total_draft_tokens: %d", L, K, N - 1);
}

static const char *dyn_cost_model(sq_engine e, int fixed, int in_step)
{
    if (in_step)   /* sq_dyn_round_ms_accepted: batch 1, the target profile's step section */
        return e == SQ_ENGINE_SGLANG
            ? "in-step: T(N) + O(N) + D_first(E) + (L - 1) D_level(K)"
            : "in-step: T(N) + O(N) + D_first(E) + sum_{i=1..L-1} D_level(i K)";
    if (fixed)
        return "t_target(b, N) + L * draft_ms";
    return e == SQ_ENGINE_SGLANG
        ? "t_target(b, N) + (L - 1) t_draft(b, K) + t_draft(b, N)"
        : "t_target(b, N) + t_draft(b, L + 1) + sum_{i=1..L-1} t_draft(b, i K)";
}

/* sequoia-run's round (sq_dyn_round_ms_runtime), one line. */
static const char *dyn_run_cost_model(int fixed, int in_step)
{
    if (in_step)
        return "in-step: T(N) + O(N) + (1 + (L - 1) K) X(K) + D_first(c) + (L - 1) D_level(K), "
               "c = sequoia-run's expected draft catch-up, X a node's expansion";
    if (fixed)
        return "t_target(b, N) + L * draft_ms";
    return "t_target(b, N) + b (1 + (L - 1) K) X(K) + t_draft(b, c) + (L - 1) t_draft(b, K), "
           "c = sequoia-run's expected draft catch-up, X a node's expansion (0 without a step "
           "section)";
}

/* The "hardware" object of a dynamic plan. */
static cJSON *dyn_hardware_json(const plan_opts *o, const plan_state *st, int batch,
                                const sq_dyn_choice *best, int n_best, double plain_tps,
                                const sq_dyn_grid *g)
{
    sq_json_build b = sq_json_build_begin();
    cJSON *h = cJSON_CreateObject();
    cJSON_AddStringToObject(h, "target_profile", o->target_profile);
    cJSON_AddStringToObject(h, "target_device", st->tprof->device ? st->tprof->device : "");
    if (o->draft_profile)
        cJSON_AddStringToObject(h, "draft_profile", o->draft_profile);
    else
        cJSON_AddNumberToObject(h, "draft_ms_per_forward", o->hwp.draft_ms);
    cJSON_AddStringToObject(h, "cost_per_round", dyn_cost_model((sq_engine)o->engine,
                                                                !o->draft_profile,
                                                                batch == 1 && st->tprof->step));
    cJSON_AddNumberToObject(h, "batch", batch);
    if (g && o->hwp.cost_model == SQ_COST_SEQUOIA_RUN)   /* which model chose (formats.md) */
        cJSON_AddStringToObject(h, "chosen_by", sq_cost_model_name(o->hwp.cost_model));
    cJSON_AddNumberToObject(h, "round_ms", best[0].round_ms);
    cJSON_AddNumberToObject(h, "round_target_ms", best[0].target_ms);
    cJSON_AddNumberToObject(h, "round_draft_ms", best[0].draft_ms);
    cJSON_AddNumberToObject(h, "tokens_per_second", best[0].tokens_per_second);
    cJSON_AddNumberToObject(h, "plain_tokens_per_second", plain_tps);
    cJSON_AddNumberToObject(h, "predicted_speedup", best[0].tokens_per_second / plain_tps);
    /* sequoia-run's round of the same envelope (docs/formats.md, docs/planning.md "Two cost
     * models") */
    cJSON *rt = cJSON_CreateObject();
    cJSON_AddStringToObject(rt, "cost_per_round", dyn_run_cost_model(!o->draft_profile,
                                                                     batch == 1 &&
                                                                     st->tprof->step));
    cJSON_AddNumberToObject(rt, "draft_catchup_tokens", best[0].catchup);
    cJSON_AddNumberToObject(rt, "round_ms", best[0].run_round_ms);
    cJSON_AddNumberToObject(rt, "round_target_ms", best[0].run_target_ms);
    cJSON_AddNumberToObject(rt, "round_draft_ms", best[0].run_draft_ms);
    cJSON_AddNumberToObject(rt, "tokens_per_second", best[0].run_tokens_per_second);
    cJSON_AddNumberToObject(rt, "predicted_speedup", best[0].run_tokens_per_second / plain_tps);
    sq_json_add(h, SQ_PLAN_HW_RUNTIME, rt);
    if (g) {
        cJSON *sr = cJSON_CreateObject();
        cJSON_AddNumberToObject(sr, "max_steps", g->max_steps);
        cJSON_AddNumberToObject(sr, "max_topk", g->max_topk);
        cJSON_AddNumberToObject(sr, "max_nodes", g->max_nodes);
        sq_json_add(h, "searched", sr);
        cJSON *ru = cJSON_CreateArray();
        for (int i = 1; i < n_best; i++) {
            cJSON *r = cJSON_CreateObject();
            sq_json_add(r, "envelope", sq_dynplan_envelope_json(best[i].steps, best[i].topk,
                                                         best[i].nodes));
            cJSON_AddNumberToObject(r, "expected_tokens", best[i].expected_tokens);
            cJSON_AddNumberToObject(r, "round_ms", best[i].round_ms);
            cJSON_AddNumberToObject(r, "tokens_per_second", best[i].tokens_per_second);
            cJSON_AddNumberToObject(r, "sequoia_run_tokens_per_second",
                                    best[i].run_tokens_per_second);
            sq_json_append(ru, r);
        }
        sq_json_add(h, "runner_ups", ru);
    }
    return sq_json_build_end(b, h);
}

/* The profiles' batch sizes that the draft profile also has (the ladder's rungs); an error naming
 * the draft profile when it lacks one of the target's. */
static int dyn_batches(const plan_opts *o, const plan_state *st, int *out, int cap, int *n,
                       sq_error *err)
{
    *n = sq_profile_batches(st->tprof, out, cap);
    if (*n < 1)
        return sq_error_set(err, SQ_EDATA, "%s: no batch sizes", o->target_profile);
    if (st->dprof) {
        int db[SQ_LADDER_MAX_RUNGS], nd = sq_profile_batches(st->dprof, db, SQ_LADDER_MAX_RUNGS);
        for (int i = 0; i < *n; i++) {
            int have = 0;
            for (int j = 0; j < nd; j++)
                have |= db[j] == out[i];
            if (!have)
                return sq_error_set(err, SQ_EDATA, "%s: no points at batch %d, which the target "
                                    "profile %s has (profile the draft at the same batch sizes)",
                                    o->draft_profile, out[i], o->target_profile);
        }
    }
    return SQ_OK;
}

#define DYN_RUNNER_UPS 6

/* A dynamic plan's outputs, committed together: -o gets the plan, or with --export the engine's
 * flags (sq_export_envelope; the plan's ladder, when it has one, as sq_export_envelope_ladder)
 * and --save-plan the plan. The export must be the plan's engine. */
static int dyn_write_outputs(const plan_opts *o, const sq_dynplan *plan, const char *plan_name,
                             sq_error *err)
{
    int e = sq_engine_parse(plan->engine), rc;
    sq_export_format fmt = (sq_export_format)o->export_fmt;
    if (o->export_fmt >= 0 && (e < 0 || sq_export_engine(fmt) != (sq_engine)e))
        return sq_error_set(err, SQ_EUSAGE, "--export %s: %s is a dynamic plan for %s, which "
                            "exports as --export %s", sq_export_format_name(fmt), plan_name,
                            plan->engine, plan->engine);
    enum { MAIN, SAVE, N_OUT };
    const char *path[N_OUT] = {o->out_file ? o->out_file : "-", o->save_plan};
    sq_out *out[N_OUT] = {0};
    for (int i = 0; i < N_OUT; i++)
        if (path[i] && (rc = sq_out_open(&out[i], path[i], err)))
            goto fail;
    if (o->export_fmt < 0) {
        rc = print_json(sq_out_stream(out[MAIN]), sq_dynplan_to_json(plan), "plan", err);
    } else if (plan->n_ladder > 0) {
        int n = plan->n_ladder, *v = calloc((size_t)n * 5, sizeof *v);
        if (!v) {
            rc = sq_error_oom(err, "ladder export");
            goto fail;
        }
        for (int i = 0; i < n; i++) {
            const sq_dynplan_rung *g = &plan->ladder[i];
            v[i] = g->batch;
            v[n + i] = g->steps;
            v[2 * n + i] = g->topk;
            v[3 * n + i] = g->nodes;
            v[4 * n + i] = g->speculate;
        }
        rc = sq_export_envelope_ladder(sq_out_stream(out[MAIN]), (sq_engine)e, v, v + n,
                                       v + 2 * n, v + 3 * n, v + 4 * n, n, plan_name, err);
        free(v);
    } else {
        rc = sq_export_envelope(sq_out_stream(out[MAIN]), (sq_engine)e, plan->steps, plan->topk,
                                plan->nodes, plan_name, err);
    }
    if (rc || (out[SAVE] && (rc = print_json(sq_out_stream(out[SAVE]),
                                             sq_dynplan_to_json(plan), "plan", err))))
        goto fail;
    return sq_cli_commit(out, N_OUT, err);
fail:
    for (int i = 0; i < N_OUT; i++)
        sq_out_abort(out[i]);
    return rc;
}

/* --plan DYNPLAN.json: the export of a saved dynamic plan (sq_dynplan_sniff told it apart). */
static int run_dynplan_export(const plan_opts *o, const sq_dynplan *plan, sq_error *err)
{
    if (o->svg_file)
        return sq_error_set(err, SQ_EUSAGE, "--svg: %s is a dynamic plan (an envelope, no fixed "
                            "tree to draw)", o->plan_file);
    return dyn_write_outputs(o, plan, o->plan_file, err);
}

static int run_dynamic(plan_opts *o, plan_state *st, sq_error *err)
{
    sq_engine e = (sq_engine)o->engine;
    int rc;
    if (o->table_file || o->svg_file || o->svg_table || o->ladder_plans || o->schedule_file ||
        o->vllm_schedule_file || o->envelopes_file)
        return sq_error_set(err, SQ_EUSAGE, "a dynamic plan (--engine %s with dynamic-tree "
                            "statistics) is written with -o, or --export %s (with --save-plan); "
                            "--table, --svg, --svg-table, --ladder-plans, --schedule, "
                            "--vllm-schedule and --envelopes take static plans",
                            sq_engine_name(e), sq_engine_name(e));
    if (o->export_fmt >= 0 && sq_export_engine((sq_export_format)o->export_fmt) != e)
        return sq_error_set(err, SQ_EUSAGE, "--export %s: a dynamic plan for %s exports as "
                            "--export %s", sq_export_format_name((sq_export_format)o->export_fmt),
                            sq_engine_name(e), sq_engine_name(e));
    if (!o->acc_file || access(o->acc_file, F_OK) != 0)
        return sq_error_set(err, SQ_EUSAGE, "--engine %s --envelope: --acceptance must name a "
                            "curves file with the dynamic-tree statistics", sq_engine_name(e));
    if (o->env_given && (rc = sq_dyn_envelope_check(e, o->env_L, o->env_K, o->env_N,
                                                     "--envelope", err)))
        return rc;
    if (!o->env_given && !o->target_profile)
        return sq_error_set(err, SQ_EUSAGE, "--engine %s with dynamic-tree statistics: give "
                            "--envelope L,K,N to predict one envelope, or --target-profile and "
                            "--draft-profile (or --draft-ms) to choose one for the hardware",
                            sq_engine_name(e));
    cJSON *root = NULL;
    sq_dyn_samples *smp = NULL;
    sq_dyn_grid *grid = NULL;
    sq_dynplan plan = {0};
    char config[128];
    uint8_t digest[SQ_SHA256_BYTES];
    if ((rc = sq_json_load(o->acc_file, &root, err)) ||
        /* without the statistics: the loader's message, naming the file and the key */
        (!sq_json_field(root, "dynamic") &&
         (rc = sq_dyn_samples_from_json(root, o->acc_file, "", &smp, err))) ||
        (rc = dyn_config(o, root, config, sizeof config, err)) ||
        (rc = sq_dyn_samples_from_json(root, o->acc_file, config, &smp, err)) ||
        (rc = sq_sha256_file(o->acc_file, digest, err)))
        goto done;
    /* mode and temperature of the plan, from the configuration's name */
    {
        char m[32] = "";
        double T = 0;
        if (sscanf(config, "%31[a-z]@T%lf", m, &T) != 2 || sq_mode_parse(m, &plan.mode) != 0 ||
            plan.mode == SQ_MODE_SPECINFER) {
            rc = sq_error_set(err, SQ_EDATA, "%s: dynamic.accept: configuration \"%s\" is not "
                              "MODE@T<temperature> of greedy, topk or stochastic", o->acc_file,
                              config);
            goto done;
        }
        const char *pp = strstr(config, "@p");
        plan.temperature = plan.mode == SQ_MODE_GREEDY ? 0.0 : T;
        plan.top_p = pp ? strtod(pp + 2, NULL) : 1.0;
    }
    snprintf(plan.engine, sizeof plan.engine, "%s", sq_engine_name(e));
    sq_sha256_hex(digest, plan.curves_sha256);
    plan.curves_file = (char *)o->acc_file;   /* not freed: plan lives on the stack */
    sq_dyn_predict_params pp = sq_dyn_predict_default_params();
    pp.trials = o->trials;
    pp.path = o->dyn_path;
    if (pp.path == SQ_DYN_PATH_TEXT && plan.mode == SQ_MODE_STOCHASTIC) {
        rc = sq_error_set(err, SQ_EUSAGE, "--path text: the stochastic verifier accepts a draw, "
                          "not the text's token; use --path draw");
        goto done;
    }
    /* the text's path is the statistics' next_rank: curves without it are the file's lack, named
     * like curves without "dynamic" (docs/robustness.md, "Bad inputs") */
    /* the envelope's K draws on the statistics' ranks: name the file's topk and the way out */
    if (o->env_given && o->env_K > smp->K) {
        rc = sq_error_set(err, SQ_EUSAGE, "--envelope %d,%d,%d: %s: dynamic.topk is %d; envelope "
                          "K %d needs at least %d (re-run sequoia-accept with --dynamic-topk %d, "
                          "or lower K)", o->env_L, o->env_K, o->env_N, o->acc_file, smp->K,
                          o->env_K, o->env_K, o->env_K);
        goto done;
    }
    if (pp.path == SQ_DYN_PATH_TEXT && !smp->text_rank) {
        rc = sq_error_set(err, SQ_EDATA, "%s: no key \"dynamic.next_rank\": --path text follows "
                          "the corpus's next tokens, and these statistics do not hold their ranks "
                          "(sequoia-accept writes them from a corpus with its tokens; or use "
                          "--path draw)", o->acc_file);
        goto done;
    }
    double se = 0, p_len[SQ_DYN_MAX_STEPS + 1];
    sq_dyn_choice best[DYN_RUNNER_UPS];
    int n_best = 0, batch = 1;
    double plain = 0;
    sq_dyn_search_params sp = {.engine = e, .target = st->tprof, .draft = st->dprof,
                               .draft_ms = o->hwp.draft_ms, .extrapolate = o->hwp.extrapolate,
                               .cost_model = o->hwp.cost_model};
    int batches[SQ_LADDER_MAX_RUNGS], n_batches = 0;
    if (o->target_profile) {
        if ((rc = dyn_batches(o, st, batches, SQ_LADDER_MAX_RUNGS, &n_batches, err)))
            goto done;
        batch = batches[0];
    }
    if (o->env_given) {
        plan.steps = o->env_L;
        plan.topk = o->env_K;
        plan.nodes = o->env_N;
        double cu = 0;
        if ((rc = sq_dyn_predict_catchup(smp, plan.steps, plan.topk, plan.nodes, &pp,
                                         &plan.expected_tokens, &se, &cu, p_len, err)))
            goto done;
        if (o->target_profile) {
            sq_dyn_cost c, cr;
            double t1;
            sp.batch = batch;
            if ((rc = sq_dyn_round_ms_accepted(e, st->tprof, st->dprof, o->hwp.draft_ms, batch,
                                               plan.steps, plan.topk, plan.nodes,
                                               plan.expected_tokens, o->hwp.extrapolate, &c,
                                               err)) ||
                (rc = sq_dyn_round_ms_runtime(st->tprof, st->dprof, o->hwp.draft_ms, batch,
                                              plan.steps, plan.topk, plan.nodes, cu,
                                              o->hwp.extrapolate, &cr, err)) ||
                (rc = sq_dyn_plain_ms(st->tprof, batch, o->hwp.extrapolate, &t1, err)))
                goto done;
            best[0] = (sq_dyn_choice){plan.steps, plan.topk, plan.nodes, plan.expected_tokens, se,
                                      c.round_ms, c.target_ms, c.draft_ms,
                                      batch * plan.expected_tokens / c.round_ms * 1000.0, cu,
                                      cr.round_ms, cr.target_ms, cr.draft_ms,
                                      batch * plan.expected_tokens / cr.round_ms * 1000.0};
            n_best = 1;
            plain = batch / t1 * 1000.0;
        }
    } else {
        int Lm = o->params.depth - 1 < 8 ? o->params.depth - 1 : 8;
        int Km = smp->K < 8 ? smp->K : 8;
        if (o->width_given && o->params.width < Km)
            Km = o->params.width;
        int Nm = o->params.budget < SQ_DYN_MAX_NODES ? o->params.budget : SQ_DYN_MAX_NODES;
        if (Lm < 1 || Nm < 2) {
            rc = sq_error_set(err, SQ_EUSAGE, "--engine %s: --depth %d and --budget %d leave no "
                              "envelope (at least 2 levels and 2 nodes)", sq_engine_name(e),
                              o->params.depth, o->params.budget);
            goto done;
        }
        if ((rc = sq_dyn_grid_new(smp, Lm, Km, Nm, &pp, &grid, err)))
            goto done;
        sp.batch = batch;
        if ((rc = sq_dyn_search(grid, &sp, best, DYN_RUNNER_UPS, &n_best, &plain, err)))
            goto done;
        plan.steps = best[0].steps;
        plan.topk = best[0].topk;
        plan.nodes = best[0].nodes;
        plan.expected_tokens = best[0].expected_tokens;
        se = best[0].se;
        /* the per-depth detail of the chosen envelope */
        double E;
        if ((rc = sq_dyn_predict(smp, plan.steps, plan.topk, plan.nodes, &pp, &E, NULL, p_len,
                                 err)))
            goto done;
        if (o->ladder) {
            if (!(plan.ladder = calloc((size_t)n_batches, sizeof *plan.ladder))) {
                rc = sq_error_oom(err, "ladder");
                goto done;
            }
            for (int i = 0; i < n_batches; i++) {
                sq_dyn_choice bb[1];
                int nb = 0;
                double pl = 0;
                sp.batch = batches[i];
                if ((rc = sq_dyn_search(grid, &sp, bb, 1, &nb, &pl, err)))
                    goto done;
                /* speculation pays where the chosen model's round beats plain decoding */
                int spec = (o->hwp.cost_model == SQ_COST_SEQUOIA_RUN
                                ? bb[0].run_tokens_per_second : bb[0].tokens_per_second) > pl;
                plan.ladder[i] = (sq_dynplan_rung){batches[i], bb[0].steps, bb[0].topk,
                                                   bb[0].nodes, spec, bb[0].expected_tokens,
                                                   spec ? bb[0].tokens_per_second : pl,
                                                   bb[0].catchup, bb[0].run_round_ms,
                                                   bb[0].run_tokens_per_second,
                                                   bb[0].run_tokens_per_second / pl};
                plan.n_ladder = i + 1;
            }
        }
    }
    /* the prediction's detail */
    {
        sq_json_build b = sq_json_build_begin();
        cJSON *pr = cJSON_CreateObject();
        cJSON_AddStringToObject(pr, "method", "monte-carlo: the engine's tree simulated at every "
                                "corpus position, decoding replayed along the text "
                                "(docs/planning.md, \"Dynamic trees\")");
        cJSON_AddStringToObject(pr, "configuration", config);
        cJSON_AddStringToObject(pr, "path", pp.path == SQ_DYN_PATH_TEXT ? "text" : "draw");
        cJSON_AddNumberToObject(pr, "trials", pp.trials);
        cJSON_AddNumberToObject(pr, "seed", (double)pp.seed);
        cJSON_AddNumberToObject(pr, "samples", smp->n);
        cJSON_AddNumberToObject(pr, "offpath_contexts", smp->n_off);
        cJSON_AddNumberToObject(pr, "stderr", se);
        sq_json_add(pr, "p_accepted_at_least", sq_json_number_array(p_len + 1,
                                                                     (size_t)plan.steps));
        if (!(plan.prediction = sq_json_build_end(b, pr))) {
            rc = sq_error_oom(err, "prediction");
            goto done;
        }
    }
    if (n_best > 0 &&
        !(plan.hardware = dyn_hardware_json(o, st, batch, best, n_best, plain, grid))) {
        rc = sq_error_oom(err, "hardware");
        goto done;
    }
    if ((rc = dyn_write_outputs(o, &plan, "plan", err)))
        goto done;
    if (!o->quiet) {
        FILE *fp = o->out_file ? stdout : stderr;
        char flags[300];
        dyn_flags(e, plan.steps, plan.topk, plan.nodes, flags, sizeof flags);
        fprintf(fp, "dynamic plan:   %s, envelope %d,%d,%d (L,K,N: %d draft steps, top-%d, %d nodes "
                "with the root)\n", sq_engine_name(e), plan.steps, plan.topk, plan.nodes,
                plan.steps, plan.topk, plan.nodes);
        fprintf(fp, "flags:          %s\n", flags);
        fprintf(fp, "prediction:     %.4f ± %.4f tokens/step (%s, Monte-Carlo: %d trials over %d "
                "corpus positions", plan.expected_tokens, se, config, pp.trials, smp->n);
        if (smp->n_off)
            fprintf(fp, " and %d off-path contexts", smp->n_off);
        fprintf(fp, " of %s, path %s)\n", o->acc_file,
                pp.path == SQ_DYN_PATH_TEXT ? "text" : "draw");
        fprintf(fp, "accepted >= d:  ");
        for (int d = 1; d <= plan.steps; d++)
            fprintf(fp, " %.3f", p_len[d]);
        fprintf(fp, "\n");
        if (n_best > 0) {
            fprintf(fp, "hardware:       %s, batch %d, cost per round %s\n", st->tprof->device,
                    batch, dyn_cost_model(e, !o->draft_profile, batch == 1 && st->tprof->step));
            if (grid && o->hwp.cost_model == SQ_COST_SEQUOIA_RUN)
                fprintf(fp, "chosen by:      sequoia-run's cost model (--cost-model sequoia-run): "
                        "the envelope with the most tokens/s as sequoia-run runs it\n");
            fprintf(fp, "                %s: %.4g ms/round (target %.4g + draft %.4g), %.1f "
                    "tokens/s, predicted speedup %.3fx over the target alone (%.1f tokens/s)\n",
                    sq_engine_name(e), best[0].round_ms, best[0].target_ms, best[0].draft_ms,
                    best[0].tokens_per_second, best[0].tokens_per_second / plain, plain);
            fprintf(fp, "sequoia-run:    cost per round %s\n",
                    dyn_run_cost_model(!o->draft_profile, batch == 1 && st->tprof->step));
            fprintf(fp, "                the draft catches up %.3f tokens a round: %.4g ms/round "
                    "(target %.4g + draft %.4g), %.1f tokens/s, predicted speedup %.3fx\n",
                    best[0].catchup, best[0].run_round_ms, best[0].run_target_ms,
                    best[0].run_draft_ms, best[0].run_tokens_per_second,
                    best[0].run_tokens_per_second / plain);
            for (int i = 1; i < n_best; i++)
                fprintf(fp, "%s%d,%d,%d: %.4f tokens/step, %.4g ms/round, %.1f tokens/s "
                        "(sequoia-run %.1f)\n", i == 1 ? "runner-ups:     " : "                ",
                        best[i].steps, best[i].topk, best[i].nodes, best[i].expected_tokens,
                        best[i].round_ms, best[i].tokens_per_second,
                        best[i].run_tokens_per_second);
        }
        for (int i = 0; i < plan.n_ladder; i++) {
            const sq_dynplan_rung *g = &plan.ladder[i];
            fprintf(fp, "%sbatch %d: %s%d,%d,%d, %.4f tokens/step%s, %.1f tokens/s; "
                    "sequoia-run %.1f tokens/s (speedup %.3fx)\n",
                    i == 0 ? "ladder:         " : "                ", g->batch,
                    g->speculate ? "envelope " : "plain decoding (best envelope ", g->steps,
                    g->topk, g->nodes, g->expected_tokens, g->speculate ? "" : ", slower)",
                    g->tokens_per_second, g->run_tokens_per_second, g->run_speedup);
        }
    }
done:
    cJSON_Delete(root);
    cJSON_Delete(plan.prediction);
    cJSON_Delete(plan.hardware);
    free(plan.ladder);
    sq_dyn_samples_free(smp);
    sq_dyn_grid_free(grid);
    return rc;
}

int main(int argc, char **argv)
{
    plan_opts o;
    int rc = parse_options(argc, argv, &o);
    if (rc != PARSE_RUN)
        return rc;
    if ((rc = check_options(&o)))
        return rc;
    sq_out_install_signal_handlers();
    sq_error err = {0};
    plan_state st = {0};
    int dyn = 0;
    if (!(rc = wants_dynamic(&o, &dyn, &err)))
        rc = load_inputs(&o, &st, dyn, &err);
    if (!rc && st.dynplan)
        rc = run_dynplan_export(&o, st.dynplan, &err);
    else if (!rc && dyn)
        rc = run_dynamic(&o, &st, &err);
    else if (!rc && o.ladder)
        rc = run_ladder(&o, &st, &err);
    else if (!rc && !(rc = make_plan(&o, &st, &err)) && !(rc = write_outputs(&o, &st, &err)) &&
             !o.quiet)
        rc = print_report(&o, &st, &err);
    /* after the work, so that a usage error is the only line it prints */
    if (!rc && st.default_curve)
        fprintf(stderr, PROG ": no --acceptance given; using %s\n", sq_curve_default_provenance);
    state_free(&st);
    if (rc == SQ_EUSAGE && err.cause == SQ_CAUSE_OUT_OF_RANGE)
        sq_cli_hint(&err, "see --extrapolate");
    if (rc) {
        fprintf(stderr, PROG ": %s\n", err.msg);
        return rc;
    }
    return sq_cli_finish(PROG, SQ_OK);
}

