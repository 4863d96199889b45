/* sequoia-plan: the optimal Sequoia token tree for an acceptance curve (DESIGN.md §3, §6.4). */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "planner/baseline.h"
#include "planner/curve.h"
#include "planner/dp.h"
#include "planner/io.h"
#include "planner/json.h"
#include "planner/plan.h"
#include "planner/table.h"

#define PROG "sequoia-plan"

static void usage(FILE *fp)
{
    fprintf(fp,
        "Usage: " PROG " [--acceptance FILE [--curve NAME]] [--budget N] [--depth D] [--width B]\n"
        "                    [-o PLAN.json] [--table TABLE.json] [--quiet]\n"
        "\n"
        "Solves the Sequoia dynamic program (arXiv 2402.12374, §3.1) for the tree of at most N\n"
        "nodes (root included) and depth at most D (levels, root included) that maximises the\n"
        "expected number of tokens generated per speculation step, and writes it as a plan.\n"
        "The tree has exactly N nodes unless the depth and width bounds cannot hold that many.\n"
        "\n"
        "Options:\n"
        "  -a, --acceptance FILE  acceptance curves (format sequoia-acceptance v1); without it the\n"
        "                         paper's App. E vector is used (a notice says so on stderr)\n"
        "  -c, --curve NAME       the curve to use when FILE holds several\n"
        "  -n, --budget N         tree size, root included (default 128)\n"
        "  -d, --depth D          depth bound, root level included (default 10); D >= N is unbounded\n"
        "  -w, --width B          at most B children per node (default: the curve's length)\n"
        "  -o, --output FILE      write the plan there (atomically); the summary then goes to\n"
        "                         stdout. Without -o the plan goes to stdout, the summary to stderr\n"
        "  -t, --table FILE       write the whole table Best[n][d], n <= N, d <= D (sequoia-table v1)\n"
        "  -q, --quiet            no summary\n"
        "  -h, --help             this text\n"
        "      --version          the version\n"
        "\n"
        "Examples:\n"
        "  " PROG " --budget 128 --depth 10                        # paper's App. E curve, plan on stdout\n"
        "  " PROG " -a curves.json -c stochastic@T0.6 -n 64 -d 8 -o plan.json\n"
        "  " PROG " -a curves.json --budget 1024 --depth 32 --width 16 -o big.json --table table.json\n"
        "\n"
        "Limits: (N+1)(D+1)(B+1) <= %lld cells and N^2*D*B/2 <= %lld steps (D and B clamped to N).\n"
        "Exit status: 0 success, 64 usage error or request past a limit, 65 invalid input data,\n"
        "66 input file missing, 70 internal error, 73 cannot create output, 74 I/O error.\n",
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
                          double solve_ms)
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
    fprintf(fp, "optimal tree:   size %d, depth %d, %.4f expected tokens/step\n", t->n, levels,
            plan->expected_tokens);
    fprintf(fp, "nodes/level:   ");
    for (int l = 0; l < levels; l++)
        fprintf(fp, " %d", w[l]);
    fprintf(fp, "\n");
    int chain_n, k, L;
    double chain = sq_baseline_chain(curve, N, D, &chain_n);
    double kxl = sq_baseline_kxl(curve, N, D, B, &k, &L);
    fprintf(fp, "best chain:     size %d, %.4f tokens/step (optimal tree: %+.1f%%)\n", chain_n,
            chain, 100.0 * (plan->expected_tokens / chain - 1.0));
    if (k > 0)
        fprintf(fp, "best k x L:     %d x %d (size %d), %.4f tokens/step (optimal tree: %+.1f%%)\n",
                k, L, 1 + k * L, kxl, 100.0 * (plan->expected_tokens / kxl - 1.0));
    fprintf(fp, "solve time:     %.2f ms\n", solve_ms);
    free(w);
}

int main(int argc, char **argv)
{
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
        {NULL, 0, NULL, 0},
    };
    const char *acc_file = NULL, *curve_name = NULL, *out_file = NULL, *table_file = NULL;
    int quiet = 0, width_given = 0;
    sq_dp_params params = sq_dp_default_params();
    int c;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":a:c:n:d:w:o:t:qh", opts, NULL)) != -1) {
        switch (c) {
        case 'a': acc_file = optarg; break;
        case 'c': curve_name = optarg; break;
        case 'n': if (parse_int("--budget", optarg, &params.budget)) return SQ_EUSAGE; break;
        case 'd': if (parse_int("--depth", optarg, &params.depth)) return SQ_EUSAGE; break;
        case 'w':
            if (parse_int("--width", optarg, &params.width)) return SQ_EUSAGE;
            width_given = 1;
            break;
        case 'o': out_file = optarg; break;
        case 't': table_file = optarg; break;
        case 'q': quiet = 1; break;
        case 'h': usage(stdout); return fclose(stdout) ? SQ_EIO : SQ_OK;
        case 'V': printf(PROG " %s\n", SQ_VERSION); return fclose(stdout) ? SQ_EIO : SQ_OK;
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
    sq_out_install_signal_handlers();

    sq_error err = {0};
    sq_curve_set *set = NULL;
    sq_dp *dp = NULL;
    sq_plan *plan = NULL;
    sq_out *plan_out = NULL, *table_out = NULL;
    sq_tree *tree = NULL;
    int rc;

    if (acc_file) {
        if ((rc = sq_curve_set_load(acc_file, &set, &err)) ||
            (rc = sq_curve_set_select(set, curve_name, acc_file, &params.curve, &err)))
            goto done;
    } else {
        fprintf(stderr, PROG ": no --acceptance given; using %s\n", sq_curve_default_provenance);
    }

    if ((rc = sq_dp_check(&params, &err)))
        goto done;
    double t0 = now_ms();
    if ((rc = sq_dp_solve(&params, &dp, &err)))
        goto done;
    double solve_ms = now_ms() - t0;
    /* The budget is an upper bound: take the smallest size that reaches the best value (it is
     * N itself unless the depth and width bounds cannot hold N nodes). */
    int N = sq_dp_budget(dp), D = sq_dp_depth(dp), size = 1;
    for (int n = 2; n <= N; n++)
        if (sq_dp_best(dp, n, D) > sq_dp_best(dp, size, D))
            size = n;
    if ((rc = sq_dp_tree(dp, size, D, &tree, &err)))
        goto done;
    rc = sq_plan_new(tree, params.curve, N, D, sq_dp_width(dp), &plan, &err);
    tree = NULL;
    if (rc)
        goto done;

    /* Open every output before writing any, so that an unwritable path leaves nothing behind. */
    if ((rc = sq_out_open(&plan_out, out_file ? out_file : "-", &err)))
        goto done;
    if (table_file && (rc = sq_out_open(&table_out, table_file, &err)))
        goto done;
    cJSON *pj = sq_plan_to_json(plan);
    sq_json_print(sq_out_stream(plan_out), pj);
    cJSON_Delete(pj);
    if (table_out) {
        cJSON *tj = sq_table_to_json(dp, params.curve);
        sq_json_print(sq_out_stream(table_out), tj);
        cJSON_Delete(tj);
    }
    rc = sq_out_commit(plan_out, &err);
    plan_out = NULL;
    if (rc)
        goto done;
    if (table_out) {
        rc = sq_out_commit(table_out, &err);
        table_out = NULL;
        if (rc)
            goto done;
    }
    if (!quiet)
        print_summary(out_file ? stdout : stderr, params.curve, dp, plan, solve_ms);

done:
    sq_out_abort(plan_out);
    sq_out_abort(table_out);
    sq_tree_free(tree);
    sq_plan_free(plan);
    sq_dp_free(dp);
    sq_curve_set_free(set);
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
