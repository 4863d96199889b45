/* Suite 'messages' (issue 27, "Messages and docs"): inputs and results that the tools handled
 * but described wrongly: confidence intervals, cut steps, pipes, '-', version-1 profiles with
 * batch fields, token ids out of range, a UTF-8 byte order mark, the CSV import's batch column,
 * the example scripts' statistics. Each test is named in docs/robustness.md ("Messages").
 *
 * Tests never write to a real /dev path: FIFOs are made with mkfifo in a scratch folder, and a
 * tool that could block runs under timeout(1). */
#include <criterion/criterion.h>

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <hdf5.h>

#include "libsequoia/format/profile.h"
#include "tests/testutil.h"

static const char *bin(const char *env)
{
    const char *b = getenv(env);
    cr_assert_not_null(b, "%s is not set (run through meson test)", env);
    return b;
}

static char *put(const char *dir, const char *name, const char *text)
{
    char *p = tu_path(dir, name);
    tu_write(p, text);
    return p;
}

/* argv (NULL-terminated) run under `timeout 60`: 124 when it had to be stopped. */
static int run(const char *const *argv, char **out, char **err)
{
    const char *full[64];
    int n = 0;
    full[n++] = "/usr/bin/timeout";
    full[n++] = "60";
    for (int i = 0; argv[i] && n < 63; i++)
        full[n++] = argv[i];
    full[n] = NULL;
    return tu_run((char *const *)full, out, err);
}

/* ---- confidence intervals and cut steps in sequoia-run's summary --------------------------- */

/* 41 ids of data/heldout.txt (the shipped pair's byte tokenizer) on which the first greedy step
 * of data/pipeline/plan33_optimal.json accepts 8 nodes: 9 tokens in one step. */
#define HELDOUT_PROMPT "32 109 101 101 116 32 116 111 32 98 101 32 112 97 114 116 97 107 101 " \
                       "114 115 32 111 102 32 116 104 101 32 105 110 104 101 114 105 116 97 " \
                       "110 99 101 32\n"

static char *run_summary(const char *dir, const char *prompt, const char *n)
{
    char *draft = tu_source_path("data/models/draft"), *target = tu_source_path("data/models/target");
    char *plan = tu_source_path("data/pipeline/plan33_optimal.json");
    char *pf = put(dir, "prompt.txt", prompt), *of = tu_path(dir, "out.txt");
    const char *argv[] = {bin("SQ_RUN_BIN"), "--draft", draft, "--target", target, "--plan", plan,
                          "--prompt", pf, "-n", n, "--mode", "greedy", "--no-baseline", "-q",
                          "-o", of, NULL};
    char *err = NULL;
    int rc = run(argv, NULL, &err);
    cr_assert_eq(rc, 0, "exit %d: %s", rc, err);
    free(draft);
    free(target);
    free(plan);
    free(pf);
    free(of);
    return err;
}

Test(messages, run_summary_never_prints_an_infinite_ci_nor_one_below_a_token_per_step)
{
    char *dir = tu_tmpdir();
    /* 3 steps: no interval at all (it used to print "95% CI -inf .. inf") */
    char *e = run_summary(dir, "1 2 3 4 5\n", "3");
    cr_assert(strstr(e, "no 95% CI: 3 steps, at least 4 needed"), "%s", e);
    cr_assert_null(strstr(e, "inf"), "%s", e);
    free(e);
    /* 4 steps of 1 or 3 tokens: a t interval from 2 batches (it used to be -4.853 .. 7.853) */
    e = run_summary(dir, "1 2 3 4 5\n", "6");
    const char *ci = strstr(e, "95% CI ");
    cr_assert_not_null(ci, "%s", e);
    double lo = 0, hi = 0;
    cr_assert_eq(sscanf(ci, "95%% CI %lf .. %lf", &lo, &hi), 2, "%s", e);
    cr_assert(lo >= 1.0 && hi <= 9.0 && lo <= hi, "CI %g .. %g outside [1, depth 9]: %s", lo, hi, e);
    free(e);
    tu_rmtree(dir);
    free(dir);
}

Test(messages, run_summary_says_when_the_output_cut_a_step)
{
    char *dir = tu_tmpdir();
    /* one step made 9 tokens, the output keeps 2: "2 tokens in 1 steps: 9.000 tokens/step" */
    char *e = run_summary(dir, HELDOUT_PROMPT, "2");
    cr_assert(strstr(e, "2 tokens in 1 step, which made 9 (the last step was cut at "
                        "--max-new-tokens 2; tokens/step counts all 9): 9.000 tokens/step"),
              "%s", e);
    free(e);
    tu_rmtree(dir);
    free(dir);
}
