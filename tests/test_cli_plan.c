/* sequoia-plan as a user runs it: outputs, the summary, and every bad input of issue 2 with its
 * exit code, its message and no output file created or truncated. */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "libsequoia/base/json.h"
#include "libsequoia/format/plan.h"
#include "tests/testutil.h"

static const char *bin(void)
{
    const char *b = getenv("SQ_PLAN_BIN");
    cr_assert_not_null(b, "SQ_PLAN_BIN is not set (run through meson test)");
    return b;
}

Test(cli_plan, default_run_prints_plan_and_names_the_default_curve)
{
    char *out, *err;
    char *argv[] = {(char *)bin(), "--budget", "128", "--depth", "10", NULL};
    cr_assert_eq(tu_run(argv, &out, &err), 0, "%s", err);
    cr_assert(strstr(err, "App. E"), "provenance notice on stderr: %s", err);
    cr_assert(strstr(err, "optimal tree:   size 128"), "summary on stderr without -o: %s", err);
    cJSON *root;
    sq_error e = {0};
    cr_assert_eq(sq_json_parse("stdout", out, strlen(out), &root, &e), 0, "%s", e.msg);
    sq_plan *plan;
    cr_assert_eq(sq_plan_from_json(root, "stdout", &plan, &e), 0, "%s", e.msg);
    cr_assert(fabs(plan->expected_tokens - 6.3194) < 5e-5, "%.6f", plan->expected_tokens);
    sq_plan_free(plan);
    cJSON_Delete(root);
    free(out);
    free(err);
}

Test(cli_plan, output_file_is_byte_identical_across_runs_and_summary_goes_to_stdout)
{
    char *dir = tu_tmpdir();
    char *p1 = tu_path(dir, "a.json"), *p2 = tu_path(dir, "b.json"), *tab = tu_path(dir, "t.json");
    char *out, *err;
    char *a1[] = {(char *)bin(), "-n", "64", "-d", "6", "-o", p1, "--table", tab, NULL};
    char *a2[] = {(char *)bin(), "-n", "64", "-d", "6", "-o", p2, "-q", NULL};
    cr_assert_eq(tu_run(a1, &out, &err), 0, "%s", err);
    cr_assert(strstr(out, "optimal tree:") && strstr(out, "nodes/level:") &&
              strstr(out, "best chain:") && strstr(out, "best k x L:"), "%s", out);
    free(out);
    free(err);
    cr_assert_eq(tu_run(a2, &out, &err), 0, "%s", err);
    cr_assert_str_eq(out, "", "--quiet prints no summary");
    char *t1 = tu_read(p1, NULL), *t2 = tu_read(p2, NULL);
    cr_assert_str_eq(t1, t2);
    /* the table: (N+1) x (D+1), null where no tree */
    char *tt = tu_read(tab, NULL);
    cJSON *root;
    sq_error e = {0};
    cr_assert_eq(sq_json_parse(tab, tt, strlen(tt), &root, &e), 0, "%s", e.msg);
    cr_assert_str_eq(cJSON_GetObjectItem(root, "format")->valuestring, "sequoia-table");
    const cJSON *et = cJSON_GetObjectItem(root, "expected_tokens");
    cr_assert_eq(cJSON_GetArraySize(et), 65);
    cr_assert_eq(cJSON_GetArraySize(cJSON_GetArrayItem(et, 0)), 7);
    cr_assert(cJSON_IsNull(cJSON_GetArrayItem(cJSON_GetArrayItem(et, 0), 3)), "n = 0: null");
    cr_assert(cJSON_IsNull(cJSON_GetArrayItem(cJSON_GetArrayItem(et, 64), 2)), "64 nodes, depth 2");
    cr_assert_eq(cJSON_GetArrayItem(cJSON_GetArrayItem(et, 1), 1)->valuedouble, 1.0);
    cJSON_Delete(root);
    cr_assert_eq(tu_count_entries(dir), 3, "no temporary files left");
    free(tt);
    free(t1);
    free(t2);
    free(out);
    free(err);
    tu_rmtree(dir);
    free(dir);
    free(p1);
    free(p2);
    free(tab);
}

Test(cli_plan, help_shows_examples_and_exit_codes)
{
    char *out, *err;
    char *argv[] = {(char *)bin(), "--help", NULL};
    cr_assert_eq(tu_run(argv, &out, &err), 0);
    cr_assert(strstr(out, "Examples:") && strstr(out, "--budget 128 --depth 10") &&
              strstr(out, "64 usage") && strstr(out, "65 invalid input"), "%s", out);
    free(out);
    free(err);
}

/* ---- bad input ------------------------------------------------------------------------------ */

#define GOOD "{\"format\":\"sequoia-acceptance\",\"version\":1,\"curves\":[{\"name\":\"a\",\"p\":[0.6,0.2]},{\"name\":\"b\",\"p\":[0.5]}]}"
#define ONE(p) "{\"format\":\"sequoia-acceptance\",\"version\":1,\"curves\":[{\"name\":\"a\",\"p\":" p "}]}"

/* Parameters are copied into the test's own process, so they hold arrays, not pointers. */
typedef struct {
    char acc[200];        /* contents of acc.json; "" for no --acceptance                  */
    char args[8][40];     /* extra arguments; "@DIR" is the scratch directory             */
    int  status;
    char expect[3][48];   /* substrings of the message                                    */
} cli_case;

ParameterizedTestParameters(cli_plan, bad_input_is_refused_without_touching_the_output)
{
    static cli_case cases[] = {
        {"{\"format\":", {""}, 65, {"acc.json:1:", "malformed JSON"}},
        {"{\"format\":\"nope\",\"version\":1,\"curves\":[]}", {""}, 65, {"acc.json", "format", "nope"}},
        {"{\"format\":\"sequoia-acceptance\",\"version\":9,\"curves\":[]}", {""}, 65, {"acc.json", "version", "9"}},
        {ONE("[0.5,1.7]"), {""}, 65, {"acc.json", "curves[0].p[1]", "not a probability"}},
        {ONE("[0.5,NaN]"), {""}, 65, {"acc.json", "malformed JSON"}},
        {ONE("[0.5,-1e999]"), {""}, 65, {"acc.json", "curves[0].p[1]", "not finite"}},
        {ONE("[0.8,0.3]"), {""}, 65, {"acc.json", "curves[0].p", "sum to"}},
        {ONE("[]"), {""}, 65, {"acc.json", "curves[0].p", "empty"}},
        {ONE("[0.5]"), {"--budget", "0"}, 64, {"--budget", "at least 1"}},
        {ONE("[0.5]"), {"--depth", "0"}, 64, {"--depth", "at least 1"}},
        {ONE("[0.5]"), {"--width", "0"}, 64, {"--width", "at least 1"}},
        {ONE("[0.5]"), {"--budget", "-5"}, 64, {"--budget"}},
        {ONE("[0.5]"), {"--budget", "12x"}, 64, {"--budget", "not an integer"}},
        {GOOD, {"--curve", "zzz"}, 64, {"acc.json", "no curve named \"zzz\"", "\"a\", \"b\""}},
        {GOOD, {""}, 64, {"acc.json", "--curve", "\"a\", \"b\""}},
        {ONE("[0.5]"), {"--budget", "100000", "--depth", "1000"}, 64, {"limit"}},
        {"", {"-o", "@DIR/missing/plan.json"}, 73, {"@DIR/missing/plan.json", "cannot create"}},
        {"", {"-o", "@DIR"}, 73, {"is a directory"}},
        {"", {"--table", "@DIR/missing/t.json"}, 73, {"t.json", "cannot create"}},
        {"", {"--frobnicate"}, 64, {"unknown option"}},
        {"", {"--curve", "a"}, 64, {"--curve needs --acceptance"}},
    };
    return cr_make_param_array(cli_case, cases, sizeof cases / sizeof *cases);
}

static char *subst(const char *s, const char *dir, const char *out)
{
    const char *tok = strstr(s, "@DIR") ? "@DIR" : strstr(s, "@OUT") ? "@OUT" : NULL;
    if (!tok) {
        char *d = strdup(s);
        cr_assert_not_null(d);
        return d;
    }
    const char *rep = tok[1] == 'D' ? dir : out;
    const char *at = strstr(s, tok);
    size_t n = strlen(s) + strlen(rep) + 1;
    char *r = malloc(n);
    cr_assert_not_null(r);
    snprintf(r, n, "%.*s%s%s", (int)(at - s), s, rep, at + 4);
    return r;
}

ParameterizedTest(cli_case *cc, cli_plan, bad_input_is_refused_without_touching_the_output)
{
    char *dir = tu_tmpdir();
    char *acc = tu_path(dir, "acc.json"), *outp = tu_path(dir, "plan.json");
    tu_write(outp, "OLD CONTENT\n");
    char *argv[24];
    int a = 0;
    argv[a++] = (char *)bin();
    if (cc->acc[0]) {
        tu_write(acc, cc->acc);
        argv[a++] = "--acceptance";
        argv[a++] = acc;
    }
    int has_o = 0;
    for (int i = 0; i < 8 && cc->args[i][0]; i++) {
        argv[a++] = subst(cc->args[i], dir, outp);
        if (!strcmp(cc->args[i], "-o"))
            has_o = 1;
    }
    if (!has_o) {
        argv[a++] = "-o";
        argv[a++] = outp;
    }
    argv[a] = NULL;
    char *out, *err;
    int rc = tu_run(argv, &out, &err);
    cr_assert_eq(rc, cc->status, "exit %d, expected %d; stderr: %s", rc, cc->status, err);
    cr_assert(strncmp(err, "sequoia-plan: ", 14) == 0 || strstr(err, "\nsequoia-plan: "),
              "message starts with the tool's name: %s", err);
    for (int i = 0; i < 3; i++) {
        if (!cc->expect[i][0])
            continue;
        char *want = subst(cc->expect[i], dir, outp);
        cr_assert(strstr(err, want), "stderr '%s' lacks '%s'", err, want);
        free(want);
    }
    char *old = tu_read(outp, NULL);
    cr_assert_str_eq(old, "OLD CONTENT\n", "the existing output was modified");
    free(old);
    cr_assert_eq(tu_count_entries(dir), cc->acc[0] ? 2 : 1, "a stray file was left in the directory");
    free(out);
    free(err);
    tu_rmtree(dir);
    free(dir);
    free(acc);
    free(outp);
}

Test(cli_plan, missing_acceptance_file_is_exit_66)
{
    char *out, *err;
    char *argv[] = {(char *)bin(), "--acceptance", "/nonexistent/acc.json", NULL};
    cr_assert_eq(tu_run(argv, &out, &err), 66, "%s", err);
    cr_assert(strstr(err, "/nonexistent/acc.json") && strstr(err, "cannot open"), "%s", err);
    cr_assert_str_eq(out, "");
    free(out);
    free(err);
}

/* ---- hardware-aware planning ---------------------------------------------------------------- */

#define DEMO_PROFILE "{\"format\":\"sequoia-profile\",\"version\":1,\"device\":\"demo\",\"points\":[" \
    "{\"tokens\":1,\"median_ms\":10},{\"tokens\":2,\"median_ms\":10},{\"tokens\":4,\"median_ms\":10}," \
    "{\"tokens\":8,\"median_ms\":12},{\"tokens\":16,\"median_ms\":14},{\"tokens\":32,\"median_ms\":18}]}"

Test(cli_plan, target_profile_picks_the_fastest_tree_and_fills_the_hardware_section)
{
    char *dir = tu_tmpdir(), *prof = tu_path(dir, "t.json"), *out = tu_path(dir, "plan.json");
    tu_write(prof, DEMO_PROFILE);
    char *argv[] = {(char *)bin(), "-n", "32", "-d", "10", "--target-profile", prof, "--draft-ms",
                    "0.3", "--sizes", "measured", "-o", out, NULL};
    char *so, *se;
    cr_assert_eq(tu_run(argv, &so, &se), 0, "%s", se);
    cr_assert(strstr(so, "predicted speedup by size"), "%s", so);
    sq_plan *plan;
    sq_error e = {0};
    cr_assert_eq(sq_plan_load(out, &plan, &e), 0, "%s", e.msg);
    cr_assert_eq(plan->tree->n, 8, "the documented choice for the App. E curve");
    cr_assert_not_null(plan->hardware);
    const cJSON *s = cJSON_GetObjectItem(plan->hardware, "predicted_speedup");
    cr_assert(cJSON_IsNumber(s) && fabs(s->valuedouble - 2.6841) < 1e-4);
    cr_assert_str_eq(cJSON_GetObjectItem(plan->hardware, "target_profile")->valuestring, prof);
    sq_plan_free(plan);
    free(so);
    free(se);
    tu_rmtree(dir);
    free(dir);
    free(prof);
    free(out);
}

Test(cli_plan, bad_profiles_and_ranges_are_refused)
{
    char *dir = tu_tmpdir(), *prof = tu_path(dir, "t.json"), *out = tu_path(dir, "plan.json");
    struct {
        const char *profile;
        const char *extra;
        int status;
        const char *expect;
    } cases[] = {
        {"{\"format\":\"sequoia-profile\",\"version\":1,\"points\":[]}", NULL, 65, "points: empty"},
        {"{\"format\":\"sequoia-profile\",\"version\":1,\"points\":[{\"tokens\":4,\"median_ms\":1},"
         "{\"tokens\":2,\"median_ms\":1}]}", NULL, 65, "points[1].tokens"},
        {DEMO_PROFILE, NULL, 64, "outside the profile's measured range [1, 32]"},
        {DEMO_PROFILE, "linear", 0, NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        tu_write(prof, cases[i].profile);
        char *argv[] = {(char *)bin(), "-n", "64", "-d", "6", "--target-profile", prof,
                        "--draft-ms", "0.3", "-o", out,
                        cases[i].extra ? "--extrapolate" : NULL, (char *)cases[i].extra, NULL};
        char *so, *se;
        int rc = tu_run(argv, &so, &se);
        cr_assert_eq(rc, cases[i].status, "case %zu: exit %d: %s", i, rc, se);
        if (cases[i].expect)
            cr_assert(strstr(se, cases[i].expect) && strstr(se, "t.json"), "case %zu: %s", i, se);
        cr_assert_eq(tu_exists(out), rc == 0, "case %zu: output only on success", i);
        free(so);
        free(se);
    }
    char *argv[] = {(char *)bin(), "--target-profile", prof, NULL};
    char *so, *se;
    cr_assert_eq(tu_run(argv, &so, &se), 64);
    cr_assert(strstr(se, "--draft-profile") && strstr(se, "--draft-ms"), "%s", se);
    free(so);
    free(se);
    tu_rmtree(dir);
    free(dir);
    free(prof);
    free(out);
}

Test(cli_plan, embedded_curves_can_be_named_and_match_the_shipped_file)
{
    char *out, *err;
    char *argv[] = {(char *)bin(), "--acceptance", "kjv-byte-pair", "-n", "32", "-d", "6", NULL};
    cr_assert_eq(tu_run(argv, &out, &err), 0, "%s", err);
    cr_assert(strstr(err, "embedded curve \"kjv-byte-pair\""), "%s", err);
    /* the embedded vector is the pipeline's stochastic@T0.6 curve, rounded to 6 decimals */
    char *path = tu_source_path("data/pipeline/curves.json");
    sq_curve_set *set;
    sq_error e = {0};
    cr_assert_eq(sq_curve_set_load(path, &set, &e), 0, "%s", e.msg);
    const sq_curve *shipped, *emb = sq_curve_builtin("kjv-byte-pair", NULL);
    cr_assert_eq(sq_curve_set_select(set, "stochastic@T0.6", path, &shipped, &e), 0, "%s", e.msg);
    cr_assert_eq(emb->width, shipped->width);
    for (int i = 0; i < emb->width; i++)
        cr_assert(fabs(emb->p[i] - shipped->p[i]) <= 5e-7, "p[%d]", i);
    cr_assert_null(sq_curve_builtin("nope", NULL));
    cr_assert_eq(sq_curve_builtin("paper-appE", NULL), sq_curve_default());
    sq_curve_set_free(set);
    free(path);
    free(out);
    free(err);
}

/* Issue 14: a usage error is the only line printed; the default-curve notice comes only after
 * the work succeeded. */
Test(cli_plan, default_curve_notice_never_precedes_a_usage_error)
{
    char *a[] = {(char *)bin(), "--budget", "1000000", "--depth", "1000", "-o", "-", NULL};
    char *out, *err;
    cr_assert_eq(tu_run(a, &out, &err), 64, "%s", err);
    cr_assert(!strstr(err, "no --acceptance given"), "%s", err);
    cr_assert(strchr(err, '\n') == err + strlen(err) - 1, "one line: %s", err);
    free(out);
    free(err);
    char *b[] = {(char *)bin(), "--budget", "8", "-q", NULL};
    cr_assert_eq(tu_run(b, &out, &err), 0, "%s", err);
    cr_assert(strstr(err, "no --acceptance given"), "the notice after a run: %s", err);
    free(out);
    free(err);
}

/* Issue 14: an imported tree equal to the optimum sums its terms in another order; the summary
 * says +0.0%, never -0.0%. */
Test(cli_plan, an_imported_optimal_tree_is_plus_zero_percent)
{
    char *dir = tu_tmpdir(), *ch = tu_path(dir, "ch.json"), *dot = tu_path(dir, "t.dot");
    char *a[] = {(char *)bin(), "-q", "-n", "100", "-d", "6", "--export", "trtllm",
                 "--max-non-leaves", "64", "-o", ch, NULL};
    char *out, *err;
    cr_assert_eq(tu_run(a, &out, &err), 0, "%s", err);
    free(out);
    free(err);
    char *b[] = {(char *)bin(), "--import", "choices", ch, "--export", "dot", "-o", dot, NULL};
    cr_assert_eq(tu_run(b, &out, &err), 0, "%s", err);
    cr_assert(strstr(out, "(this tree: +0.0%)") || strstr(err, "(this tree: +0.0%)"), "%s%s", out,
              err);
    cr_assert(!strstr(out, "-0.0%") && !strstr(err, "-0.0%"), "%s%s", out, err);
    free(out);
    free(err);
    tu_rmtree(dir);
}
