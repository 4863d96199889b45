/* sequoia-plan: the optimal Sequoia token tree for an acceptance curve (DESIGN.md §3, §6.4). */
#include <errno.h>
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
#include "planner/hardware.h"
#include "planner/engine.h"
#include "planner/export.h"
#include "planner/import.h"
#include "libsequoia/base/io.h"
#include "libsequoia/base/json.h"
#include "libsequoia/format/plan.h"
#include "planner/svg.h"
#include "planner/table.h"

#define PROG "sequoia-plan"

static void usage(FILE *fp)
{
    fprintf(fp,
        "Usage: " PROG " [--acceptance FILE [--curve NAME]] [--budget N] [--depth D] [--width B]\n"
        "                    [-o PLAN.json] [--table TABLE.json] [--quiet]\n"
        "                    [--engine vllm|trtllm|medusa [--max-non-leaves M]]\n"
        "                    [--export FORMAT] [--save-plan PLAN.json] [--svg FILE] [--svg-table FILE]\n"
        "                    [--target-profile T.json (--draft-profile D.json | --draft-ms X)\n"
        "                     [--extrapolate none|linear|constant] [--sizes all|measured]]\n"
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
        "      --target-profile F the target's forward time against new tokens\n"
        "      --draft-profile F  the draft's: a step costs t_target(n) + t_draft(F) + one draft\n"
        "                         forward per inner level over its nodes\n"
        "      --draft-ms X       or one fixed draft cost per level: t_target(n) + levels * X (the\n"
        "                         official implementation's model)\n"
        "      --extrapolate M    beyond a profile's measured tokens: none (an error, the default),\n"
        "                         linear or constant\n"
        "      --sizes S          all sizes <= N (default), or only the sizes the target profile\n"
        "                         measured (as the official implementation does)\n");
    fprintf(fp,
        "\n"
        "Engines, exports, imports and pictures:\n"
        "      --engine E         plan under the limits of engine E and report what they cost:\n"
        "                         vllm (best k_1 x k_2 x ... tree, searched exactly), trtllm\n"
        "                         (ranks <= 15, 16 speculated tokens per path), medusa (ranks <= 9;\n"
        "                         also for EAGLE-1)\n"
        "      --max-non-leaves M TensorRT-LLM's max_non_leaves_per_layer (checked by --export\n"
        "                         trtllm and kept by --engine trtllm); default: not checked\n"
        "  -e, --export FORMAT    write FORMAT instead of the plan to -o (or stdout): trtllm, medusa,\n"
        "                         eagle (choices lists), vllm (speculative_token_tree string), growmap\n"
        "                         (Sequoia/UMbreLLa JSON), dot (Graphviz), svg (picture). A plan that\n"
        "                         breaks the engine's limits is refused (exit 65) with the reason\n"
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
        "\n"
        "Limits: (N+1)(D+1)(B+1) <= %lld cells and N^2*D*B/2 <= %lld steps (D and B clamped to N).\n"
        "Exit status: 0 success, 64 usage error or request past a limit, 65 invalid input data\n"
        "(also: a plan an engine cannot take, or a malformed imported tree), 66 input file missing,\n"
        "70 internal error, 73 cannot create output, 74 I/O error.\n",
        SQ_DP_MAX_CELLS, SQ_DP_MAX_WORK);
}

static int parse_int(const char *opt, const char *s, int *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < INT_MIN || v > INT_MAX) {
        fprintf(stderr, PROG ": %s: '%s' is not an integer\n", opt, s);
        return SQ_EUSAGE;
    }
    *out = (int)v;
    return SQ_OK;
}

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void print_summary(FILE *fp, const sq_curve *curve, const sq_dp *dp, const sq_plan *plan,
                          double solve_ms, const char *what)
{
    const sq_tree *t = plan->tree;
    int N = sq_dp_budget(dp), D = sq_dp_depth(dp), B = sq_dp_width(dp);
    int levels = sq_tree_depth(t);
    int *w = malloc((size_t)levels * sizeof *w);
    SQ_ASSERT(w);
    sq_tree_level_widths(t, w);
    fprintf(fp, "curve:          %s (%s, %d ranks%s)\n", curve->name, curve->mode, curve->width,
            curve->depth_rows ? ", depth-dependent" : "");
    fprintf(fp, "bounds:         budget %d, depth <= %d, width <= %d\n", N, D, B);
    char label[32];
    snprintf(label, sizeof label, "%s:", what);
    fprintf(fp, "%-15s size %d, depth %d, %.4f expected tokens/step\n", label, t->n, levels,
            plan->expected_tokens);
    fprintf(fp, "nodes/level:   ");
    for (int l = 0; l < levels; l++)
        fprintf(fp, " %d", w[l]);
    fprintf(fp, "\n");
    int chain_n, k, L;
    double chain = sq_baseline_chain(curve, N, D, &chain_n);
    double kxl = sq_baseline_kxl(curve, N, D, B, &k, &L);
    fprintf(fp, "best chain:     size %d, %.4f tokens/step (%s: %+.1f%%)\n", chain_n,
            chain, what, 100.0 * (plan->expected_tokens / chain - 1.0));
    if (k > 0)
        fprintf(fp, "best k x L:     %d x %d (size %d), %.4f tokens/step (%s: %+.1f%%)\n",
                k, L, 1 + k * L, kxl, what, 100.0 * (plan->expected_tokens / kxl - 1.0));
    fprintf(fp, "solve time:     %.2f ms\n", solve_ms);
    free(w);
}

/* One line per engine: does the tree fit its limits? */
static void print_engine_status(FILE *fp, const sq_tree *t, int max_non_leaves)
{
    static const sq_engine engines[] = {SQ_ENGINE_VLLM, SQ_ENGINE_TRTLLM, SQ_ENGINE_MEDUSA};
    for (size_t i = 0; i < sizeof engines / sizeof *engines; i++) {
        sq_error e = {0};
        int rc = sq_engine_check(t, engines[i], max_non_leaves, "plan", &e);
        /* the message is "plan: ENGINE: problem; hint" */
        const char *why = e.msg;
        for (int skip = 0; rc && skip < 2 && strstr(why, ": "); skip++)
            why = strstr(why, ": ") + 2;
        fprintf(fp, "%-15s %s%s\n", i == 0 ? "engine limits:" : "", sq_engine_name(engines[i]),
                rc ? "" : ": ok");
        if (rc)
            fprintf(fp, "%-15s   refused: %s\n", "", why);
    }
}

/* Summary of an imported or loaded plan, with the optimal tree of the same size and depth. */
static void print_plan_summary(FILE *fp, const sq_plan *plan, int max_non_leaves)
{
    const sq_tree *t = plan->tree;
    int levels = sq_tree_depth(t);
    int *w = malloc((size_t)levels * sizeof *w);
    SQ_ASSERT(w);
    sq_tree_level_widths(t, w);
    fprintf(fp, "curve:          %s (%s, %d ranks%s)\n", plan->acceptance.name,
            plan->acceptance.mode ? plan->acceptance.mode : "?", plan->acceptance.width,
            plan->acceptance.depth_rows ? ", depth-dependent" : "");
    fprintf(fp, "tree:           size %d, depth %d, widest node %d children, %.4f expected "
                "tokens/step\n", t->n, levels, sq_tree_max_children(t), plan->expected_tokens);
    fprintf(fp, "nodes/level:   ");
    for (int l = 0; l < levels; l++)
        fprintf(fp, " %d", w[l]);
    fprintf(fp, "\n");
    free(w);
    sq_dp_params dpp = sq_dp_default_params();
    dpp.budget = t->n;
    dpp.depth = levels;
    dpp.curve = &plan->acceptance;
    sq_dp *dp = NULL;
    if (!sq_dp_check(&dpp, NULL) && !sq_dp_solve(&dpp, &dp, NULL)) {
        double best = sq_dp_best(dp, t->n, levels);
        fprintf(fp, "optimal tree:   same size and depth bound: %.4f tokens/step (this tree: "
                    "%+.1f%%)\n", best, 100.0 * (plan->expected_tokens / best - 1.0));
        sq_dp_free(dp);
    }
    print_engine_status(fp, t, max_non_leaves);
}

int main(int argc, char **argv)
{
    enum { OPT_ENGINE = 256, OPT_MAX_NON_LEAVES, OPT_PLAN, OPT_IMPORT, OPT_SAVE_PLAN, OPT_SVG,
           OPT_SVG_TABLE, OPT_TARGET_PROFILE, OPT_DRAFT_PROFILE, OPT_DRAFT_MS, OPT_EXTRAPOLATE,
           OPT_SIZES };
    static const struct option opts[] = {
        {"acceptance", required_argument, NULL, 'a'},
        {"curve", required_argument, NULL, 'c'},
        {"budget", required_argument, NULL, 'n'},
        {"depth", required_argument, NULL, 'd'},
        {"width", required_argument, NULL, 'w'},
        {"output", required_argument, NULL, 'o'},
        {"table", required_argument, NULL, 't'},
        {"quiet", no_argument, NULL, 'q'},
        {"help", no_argument, NULL, 'h'},
        {"version", no_argument, NULL, 'V'},
        {"export", required_argument, NULL, 'e'},
        {"engine", required_argument, NULL, OPT_ENGINE},
        {"max-non-leaves", required_argument, NULL, OPT_MAX_NON_LEAVES},
        {"plan", required_argument, NULL, OPT_PLAN},
        {"import", required_argument, NULL, OPT_IMPORT},
        {"save-plan", required_argument, NULL, OPT_SAVE_PLAN},
        {"svg", required_argument, NULL, OPT_SVG},
        {"svg-table", required_argument, NULL, OPT_SVG_TABLE},
        {"target-profile", required_argument, NULL, OPT_TARGET_PROFILE},
        {"draft-profile", required_argument, NULL, OPT_DRAFT_PROFILE},
        {"draft-ms", required_argument, NULL, OPT_DRAFT_MS},
        {"extrapolate", required_argument, NULL, OPT_EXTRAPOLATE},
        {"sizes", required_argument, NULL, OPT_SIZES},
        {NULL, 0, NULL, 0},
    };
    const char *acc_file = NULL, *curve_name = NULL, *out_file = NULL, *table_file = NULL;
    const char *plan_file = NULL, *import_file = NULL, *save_plan = NULL, *svg_file = NULL;
    const char *svg_table = NULL;
    int quiet = 0, width_given = 0, export_fmt = -1, import_fmt = -1, max_non_leaves = 0;
    int engine = SQ_ENGINE_NONE, planning_opts = 0;
    const char *target_profile = NULL, *draft_profile = NULL;
    sq_hw_params hwp = sq_hw_default_params();
    int draft_ms_given = 0;
    sq_dp_params params = sq_dp_default_params();
    int c;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":a:c:n:d:w:o:t:e:qh", opts, NULL)) != -1) {
        switch (c) {
        case 'a': acc_file = optarg; break;
        case 'c': curve_name = optarg; break;
        case 'n': if (parse_int("--budget", optarg, &params.budget)) return SQ_EUSAGE; planning_opts = 1; break;
        case 'd': if (parse_int("--depth", optarg, &params.depth)) return SQ_EUSAGE; planning_opts = 1; break;
        case 'w':
            if (parse_int("--width", optarg, &params.width)) return SQ_EUSAGE;
            width_given = 1;
            planning_opts = 1;
            break;
        case 'o': out_file = optarg; break;
        case 't': table_file = optarg; break;
        case 'q': quiet = 1; break;
        case 'h': usage(stdout); return fclose(stdout) ? SQ_EIO : SQ_OK;
        case 'V': printf(PROG " %s\n", SQ_VERSION); return fclose(stdout) ? SQ_EIO : SQ_OK;
        case 'e':
            if ((export_fmt = sq_export_format_parse(optarg)) < 0) {
                fprintf(stderr, PROG ": --export: unknown format '%s' (one of: %s)\n", optarg,
                        sq_export_format_list());
                return SQ_EUSAGE;
            }
            break;
        case OPT_ENGINE:
            if ((engine = sq_engine_parse(optarg)) < 0) {
                fprintf(stderr, PROG ": --engine: unknown engine '%s' (one of: vllm, trtllm, "
                        "medusa)\n", optarg);
                return SQ_EUSAGE;
            }
            break;
        case OPT_MAX_NON_LEAVES:
            if (parse_int("--max-non-leaves", optarg, &max_non_leaves)) return SQ_EUSAGE;
            if (max_non_leaves < 1) {
                fprintf(stderr, PROG ": --max-non-leaves: %d, must be at least 1\n", max_non_leaves);
                return SQ_EUSAGE;
            }
            break;
        case OPT_PLAN: plan_file = optarg; break;
        case OPT_IMPORT:
            if ((import_fmt = sq_import_format_parse(optarg)) < 0) {
                fprintf(stderr, PROG ": --import: unknown format '%s' (choices or growmap)\n", optarg);
                return SQ_EUSAGE;
            }
            if (optind >= argc) {
                fprintf(stderr, PROG ": --import %s needs a FILE (see --help)\n", optarg);
                return SQ_EUSAGE;
            }
            import_file = argv[optind++];
            break;
        case OPT_SAVE_PLAN: save_plan = optarg; break;
        case OPT_SVG: svg_file = optarg; break;
        case OPT_SVG_TABLE: svg_table = optarg; break;
        case OPT_TARGET_PROFILE: target_profile = optarg; break;
        case OPT_DRAFT_PROFILE: draft_profile = optarg; break;
        case OPT_DRAFT_MS: {
            char *end;
            hwp.draft_ms = strtod(optarg, &end);
            if (end == optarg || *end || !isfinite(hwp.draft_ms) || hwp.draft_ms < 0) {
                fprintf(stderr, PROG ": --draft-ms: '%s' is not a time >= 0 in milliseconds\n",
                        optarg);
                return SQ_EUSAGE;
            }
            draft_ms_given = 1;
            break;
        }
        case OPT_EXTRAPOLATE: {
            int m = sq_extrapolate_parse(optarg);
            if (m < 0) {
                fprintf(stderr, PROG ": --extrapolate: unknown mode '%s' (none, linear or "
                        "constant)\n", optarg);
                return SQ_EUSAGE;
            }
            hwp.extrapolate = (sq_extrapolate)m;
            break;
        }
        case OPT_SIZES:
            if (!strcmp(optarg, "all") || !strcmp(optarg, "measured")) {
                hwp.measured_sizes_only = !strcmp(optarg, "measured");
            } else {
                fprintf(stderr, PROG ": --sizes: unknown value '%s' (all or measured)\n", optarg);
                return SQ_EUSAGE;
            }
            break;
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
    if (width_given && params.width < 1) {
        fprintf(stderr, PROG ": --width: %d, must be at least 1\n", params.width);
        return SQ_EUSAGE;
    }
    if (curve_name && !acc_file) {
        fprintf(stderr, PROG ": --curve needs --acceptance FILE\n");
        return SQ_EUSAGE;
    }
    if ((draft_profile || draft_ms_given) && !target_profile) {
        fprintf(stderr, PROG ": --draft-profile/--draft-ms need --target-profile FILE\n");
        return SQ_EUSAGE;
    }
    if (target_profile && !!draft_profile == draft_ms_given) {
        fprintf(stderr, PROG ": --target-profile needs exactly one of --draft-profile FILE (per-level "
                "draft cost) and --draft-ms X (one fixed cost per level)\n");
        return SQ_EUSAGE;
    }
    if (target_profile && (plan_file || import_file || engine != SQ_ENGINE_NONE)) {
        fprintf(stderr, PROG ": --target-profile chooses a new tree; it does not go with --plan, "
                "--import or --engine\n");
        return SQ_EUSAGE;
    }
    if (plan_file && import_file) {
        fprintf(stderr, PROG ": --plan and --import exclude each other\n");
        return SQ_EUSAGE;
    }
    if (plan_file || import_file) {
        const char *mode = plan_file ? "--plan" : "--import";
        const char *bad = planning_opts ? "--budget/--depth/--width" : engine ? "--engine"
                        : table_file ? "--table" : svg_table ? "--svg-table" : NULL;
        if (bad) {
            fprintf(stderr, PROG ": %s does not go with %s (they shape a new plan)\n", bad, mode);
            return SQ_EUSAGE;
        }
        if (plan_file && (acc_file || curve_name)) {
            fprintf(stderr, PROG ": --plan: the plan carries its own curve; drop --acceptance\n");
            return SQ_EUSAGE;
        }
        if (plan_file && export_fmt < 0 && !svg_file) {
            fprintf(stderr, PROG ": --plan needs --export FORMAT or --svg FILE\n");
            return SQ_EUSAGE;
        }
    }
    if (save_plan && export_fmt < 0) {
        fprintf(stderr, PROG ": --save-plan goes with --export (without it -o is the plan)\n");
        return SQ_EUSAGE;
    }
    sq_out_install_signal_handlers();

    sq_error err = {0};
    sq_curve_set *set = NULL;
    sq_dp *dp = NULL;
    sq_plan *plan = NULL;
    sq_out *plan_out = NULL, *table_out = NULL;
    sq_tree *tree = NULL;
    const char *plan_name = plan_file ? plan_file : import_file ? import_file : "plan";
    const char *main_out = out_file ? out_file : "-";
    FILE *sfp = out_file ? stdout : stderr;
    int rc;
    double solve_ms = 0, unconstrained = 0;
    sq_engine_plan_result ep = {0};
    sq_profile *tprof = NULL, *dprof = NULL;
    sq_hw_result *hw = NULL;

    if (plan_file) {
        if ((rc = sq_plan_load(plan_file, &plan, &err)))
            goto done;
    } else {
        const char *builtin_note = NULL;
        const sq_curve *builtin = NULL;
        if (acc_file && access(acc_file, F_OK) != 0)
            builtin = sq_curve_builtin(acc_file, &builtin_note);
        if (builtin) {
            if (curve_name) {
                rc = sq_error_set(&err, SQ_EUSAGE, "--curve: the embedded curve \"%s\" is a single "
                                  "curve", acc_file);
                goto done;
            }
            params.curve = builtin;
            fprintf(stderr, PROG ": using the embedded curve \"%s\": %s\n", acc_file, builtin_note);
        } else if (acc_file) {
            if ((rc = sq_curve_set_load(acc_file, &set, &err)) ||
                (rc = sq_curve_set_select(set, curve_name, acc_file, &params.curve, &err)))
                goto done;
        } else {
            fprintf(stderr, PROG ": no --acceptance given; using %s\n", sq_curve_default_provenance);
        }
    }
    if (import_file) {
        if ((rc = sq_import_plan(import_file, (sq_import_format)import_fmt, params.curve, &plan,
                                 &err)))
            goto done;
    }
    if (target_profile) {
        if ((rc = sq_profile_load(target_profile, &tprof, &err)) ||
            (draft_profile && (rc = sq_profile_load(draft_profile, &dprof, &err))))
            goto done;
        hwp.target = tprof;
        hwp.draft = dprof;
        hwp.target_file = target_profile;
        hwp.draft_file = draft_profile;
    }
    if (!plan) {
        if ((rc = sq_dp_check(&params, &err)))
            goto done;
        double t0 = now_ms();
        if ((rc = sq_dp_solve(&params, &dp, &err)))
            goto done;
        solve_ms = now_ms() - t0;
        /* The budget is an upper bound: take the smallest size that reaches the best value (it
         * is N itself unless the depth and width bounds cannot hold N nodes). */
        int N = sq_dp_budget(dp), D = sq_dp_depth(dp), size = 1;
        for (int n = 2; n <= N; n++)
            if (sq_dp_best(dp, n, D) > sq_dp_best(dp, size, D))
                size = n;
        unconstrained = sq_dp_best(dp, size, D);
        if (engine != SQ_ENGINE_NONE) {
            sq_engine_plan_params epp = {.engine = (sq_engine)engine, .budget = params.budget,
                                         .depth = params.depth, .width = params.width,
                                         .max_non_leaves = max_non_leaves, .curve = params.curve};
            if ((rc = sq_engine_plan(&epp, &ep, &err)))
                goto done;
            tree = ep.tree;
            ep.tree = NULL;
            rc = sq_plan_new(tree, params.curve, N, ep.depth, ep.width, &plan, &err);
        } else if (target_profile) {
            /* hardware-aware: the (size, depth) with the most tokens per second */
            if ((rc = sq_hw_select(dp, &hwp, &hw, &err)) ||
                (rc = sq_dp_tree(dp, hw->n, hw->d, &tree, &err)))
                goto done;
            rc = sq_plan_new(tree, params.curve, N, D, sq_dp_width(dp), &plan, &err);
            if (!rc)
                plan->hardware = sq_hw_to_json(hw, &hwp, target_profile, draft_profile);
        } else {
            if ((rc = sq_dp_tree(dp, size, D, &tree, &err)))
                goto done;
            rc = sq_plan_new(tree, params.curve, N, D, sq_dp_width(dp), &plan, &err);
        }
        tree = NULL;
        if (rc)
            goto done;
    }

    /* Check the export before opening anything, so that a refusal leaves no file behind. */
    if (export_fmt >= 0 && sq_export_engine((sq_export_format)export_fmt) != SQ_ENGINE_NONE &&
        (rc = sq_engine_check(plan->tree, sq_export_engine((sq_export_format)export_fmt),
                              max_non_leaves, plan_name, &err)))
        goto done;

    /* Open every output before writing any, so that an unwritable path leaves nothing behind. */
    if (!plan_file || export_fmt >= 0) {
        if ((rc = sq_out_open(&plan_out, main_out, &err)))
            goto done;
    }
    if (table_file && (rc = sq_out_open(&table_out, table_file, &err)))
        goto done;
    sq_out *extra[3] = {NULL, NULL, NULL};
    const char *extra_path[3] = {save_plan, svg_file, svg_table};
    for (int i = 0; i < 3; i++)
        if (extra_path[i] && (rc = sq_out_open(&extra[i], extra_path[i], &err))) {
            for (int j = 0; j < i; j++)
                sq_out_abort(extra[j]);
            goto done;
        }
    if (plan_out) {
        if (export_fmt >= 0) {
            sq_export_params xp = sq_export_default_params();
            xp.max_non_leaves = max_non_leaves;
            rc = sq_export_write(sq_out_stream(plan_out), plan, (sq_export_format)export_fmt, &xp,
                                 plan_name, &err);
        } else {
            cJSON *pj = sq_plan_to_json(plan);
            sq_json_print(sq_out_stream(plan_out), pj);
            cJSON_Delete(pj);
        }
    }
    if (!rc && table_out) {
        cJSON *tj = sq_table_to_json(dp, params.curve);
        sq_json_print(sq_out_stream(table_out), tj);
        cJSON_Delete(tj);
    }
    if (!rc && extra[0]) {
        cJSON *pj = sq_plan_to_json(plan);
        sq_json_print(sq_out_stream(extra[0]), pj);
        cJSON_Delete(pj);
    }
    if (!rc && extra[1])
        rc = sq_svg_plan_write(sq_out_stream(extra[1]), plan, &err);
    if (!rc && extra[2]) {
        if (!dp)
            rc = sq_error_set(&err, SQ_EUSAGE, "--svg-table needs a planning run");
        else
            rc = sq_svg_table_write(sq_out_stream(extra[2]), dp, params.curve, &err);
    }
    /* Every output written out and synced before any is renamed: a write error on one (a full
     * disk) leaves all the destinations as they were. */
    sq_out *all[5] = {plan_out, table_out, extra[0], extra[1], extra[2]};
    for (int i = 0; i < 5 && !rc; i++)
        if (all[i])
            rc = sq_out_prepare(all[i], &err);
    if (rc) {
        for (int i = 0; i < 3; i++)
            sq_out_abort(extra[i]);
        goto done;
    }
    if (plan_out) {
        rc = sq_out_commit(plan_out, &err);
        plan_out = NULL;
        if (rc) {
            for (int i = 0; i < 3; i++)
                sq_out_abort(extra[i]);
            goto done;
        }
    }
    if (table_out) {
        rc = sq_out_commit(table_out, &err);
        table_out = NULL;
        if (rc) {
            for (int i = 0; i < 3; i++)
                sq_out_abort(extra[i]);
            goto done;
        }
    }
    for (int i = 0; i < 3; i++) {
        if (!extra[i])
            continue;
        int r = sq_out_commit(extra[i], &err);
        extra[i] = NULL;
        if (r && !rc)
            rc = r;
    }
    if (rc) {
        goto done;
    }
    if (!quiet) {
        if (!plan_out && plan_file && export_fmt < 0)
            sfp = stdout;
        if (dp && engine == SQ_ENGINE_NONE) {
            print_summary(sfp, params.curve, dp, plan, solve_ms,
                          hw ? "fastest tree" : "optimal tree");
            if (hw) {
                fprintf(sfp, "hardware:       target %s (%s); draft %s\n", tprof->device,
                        target_profile, dprof ? draft_profile : "fixed cost per level");
                fprintf(sfp, "                size %d, depth bound %d (%d levels): %.4g ms/step, "
                        "%.4g ms/token, predicted speedup %.3fx over the target alone "
                        "(%.4g ms/token)\n", hw->n, hw->d, hw->levels, hw->step_ms,
                        hw->step_ms / hw->expected_tokens, hw->speedup, hw->target1_ms);
                sq_hw_print_table(sfp, hw);
            }
            if (export_fmt >= 0 || svg_file)
                print_engine_status(sfp, plan->tree, max_non_leaves);
        } else if (dp) {
            print_summary(sfp, params.curve, dp, plan, solve_ms, "engine tree");
            fprintf(sfp, "engine:         %s, %s: %.4f tokens/step, %+.2f%% against the "
                    "unconstrained optimum %.4f\n", sq_engine_name((sq_engine)engine),
                    ep.exact ? "optimal under its limits" : "non-leaf limit repaired greedily "
                    "(not proven optimal)", plan->expected_tokens,
                    100.0 * (plan->expected_tokens / unconstrained - 1.0), unconstrained);
            print_engine_status(sfp, plan->tree, max_non_leaves);
        } else {
            print_plan_summary(sfp, plan, max_non_leaves);
        }
    }

done:
    sq_out_abort(plan_out);
    sq_out_abort(table_out);
    sq_tree_free(tree);
    sq_tree_free(ep.tree);
    sq_plan_free(plan);
    sq_dp_free(dp);
    sq_curve_set_free(set);
    sq_hw_result_free(hw);
    sq_profile_free(tprof);
    sq_profile_free(dprof);
    if (rc) {
        fprintf(stderr, PROG ": %s\n", err.msg);
        return rc;
    }
    if (fclose(stdout) != 0) {
        fprintf(stderr, PROG ": standard output: %s\n", strerror(errno));
        return SQ_EIO;
    }
    return SQ_OK;
}
