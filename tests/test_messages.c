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

/* ---- token ids out of range, given as written --------------------------------------------- */

/* dir/name: an HDF5 file whose /tokens is `n` values of type `type` (replacing any /tokens). */
static void write_tokens_h5(const char *path, int create, hid_t type, const void *v, hsize_t n)
{
    hid_t f = create ? H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT)
                     : H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
    cr_assert_geq(f, 0, "%s", path);
    if (!create)
        cr_assert_geq(H5Ldelete(f, "tokens", H5P_DEFAULT), 0);
    hid_t s = H5Screate_simple(1, &n, NULL);
    hid_t d = H5Dcreate2(f, "tokens", type, s, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    cr_assert_geq(d, 0);
    cr_assert_geq(H5Dwrite(d, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, v), 0);
    H5Dclose(d);
    H5Sclose(s);
    H5Fclose(f);
}

Test(messages, token_ids_out_of_range_are_given_as_written)
{
    char *dir = tu_tmpdir();
    char *draft = tu_source_path("data/models/draft"), *target = tu_source_path("data/models/target");
    char *plan = tu_source_path("data/ladder/plans/plan-b1.json");
    char *of = tu_path(dir, "out.txt");
    /* prompts: text with 20 digits and with 2^40, HDF5 int64 2^40 and uint64 2^64 - 1 */
    char *t20 = put(dir, "t20.txt", "1 12345678901234567890 3\n");
    char *t40 = put(dir, "t40.txt", "1 1099511627776\n");
    char *h40 = tu_path(dir, "h40.h5"), *h64 = tu_path(dir, "h64.h5");
    int64_t v40[] = {1, 2, (int64_t)1 << 40};
    uint64_t v64[] = {1, 2, UINT64_MAX};
    write_tokens_h5(h40, 1, H5T_STD_I64LE, v40, 3);
    write_tokens_h5(h64, 1, H5T_STD_U64LE, v64, 3);
    const struct { const char *prompt, *expect; } cases[] = {
        {t20, "line 1: token 1: id 12345678901234567890 is out of range (token ids are 0 to 2147483647)"},
        {t40, "line 1: token 1: id 1099511627776 is out of range (token ids are 0 to 2147483647)"},
        {h40, "/tokens[2]: id 1099511627776 is out of range"},
        {h64, "/tokens[2]: id 18446744073709551615 is out of range"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        const char *argv[] = {bin("SQ_RUN_BIN"), "--draft", draft, "--target", target, "--plan",
                              plan, "--prompt", cases[i].prompt, "-n", "2", "-q", "-o", of, NULL};
        char *err = NULL;
        cr_assert_eq(run(argv, NULL, &err), 65, "%s: %s", cases[i].prompt, err);
        cr_assert(strstr(err, cases[i].expect), "'%s' lacks '%s'", err, cases[i].expect);
        free(err);
    }
    /* a corpus whose /tokens holds 2^40 (int64) or 2^64 - 1 (uint64): HDF5 read them as
     * 2147483647 */
    char *tf = put(dir, "t.txt", "1 2 3 4\n"), *corpus = tu_path(dir, "c.h5");
    const char *dump[] = {bin("SQ_RUN_BIN"), "dump", "--draft", draft, "--target", target,
                          "--tokens", tf, "-o", corpus, "-q", NULL};
    char *err = NULL;
    cr_assert_eq(run(dump, NULL, &err), 0, "%s", err);
    free(err);
    char *acc = tu_path(dir, "acc.json");
    for (int k = 0; k < 2; k++) {
        if (k == 0)
            write_tokens_h5(corpus, 0, H5T_STD_I64LE, v40, 3);
        else
            write_tokens_h5(corpus, 0, H5T_STD_U64LE, v64, 3);
        const char *argv[] = {bin("SQ_ACCEPT_BIN"), corpus, "-q", "-o", acc, NULL};
        cr_assert_eq(run(argv, NULL, &err), 65, "%s", err);
        const char *expect = k == 0 ? "/tokens: row 2: token id 1099511627776 is outside the "
                                      "vocabulary [0, 256)"
                                    : "/tokens: row 2: token id 18446744073709551615 is outside";
        cr_assert(strstr(err, expect), "'%s' lacks '%s'", err, expect);
        free(err);
    }
    /* sequoia-run tokenize --decode */
    char *ids = put(dir, "ids.txt", "1 12345678901234567890\n");
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "%s tokenize --model %s --decode < %s", bin("SQ_RUN_BIN"), target, ids);
    const char *sh[] = {"/bin/sh", "-c", cmd, NULL};
    cr_assert_eq(run(sh, NULL, &err), 65, "%s", err);
    cr_assert(strstr(err, "id 12345678901234567890 is not a token id: it is out of range"), "%s", err);
    free(err);
    free(ids);
    free(acc);
    free(tf);
    free(corpus);
    free(t20);
    free(t40);
    free(h40);
    free(h64);
    free(of);
    free(draft);
    free(target);
    free(plan);
    tu_rmtree(dir);
    free(dir);
}

/* ---- a version 1 profile with batch fields ------------------------------------------------- */

Test(messages, a_version_1_profile_with_batch_fields_is_refused_naming_version_2)
{
    char *dir = tu_tmpdir();
    /* batch 4 read as batch 1 (silently planned with another batch's times), or an error
     * about token order that did not say why */
    const char *texts[] = {
        "{\"format\":\"sequoia-profile\",\"version\":1,\"points\":[{\"batch\":4,\"tokens\":1,"
        "\"median_ms\":1},{\"batch\":4,\"tokens\":64,\"median_ms\":2}]}",
        "{\"format\":\"sequoia-profile\",\"version\":1,\"points\":[{\"tokens\":1,\"median_ms\":1},"
        "{\"tokens\":64,\"median_ms\":2},{\"batch\":2,\"tokens\":1,\"median_ms\":1.5}]}",
    };
    const char *at[] = {"points[0].batch", "points[2].batch"};
    char *pf = tu_path(dir, "plan.json");
    for (int i = 0; i < 2; i++) {
        char *prof = put(dir, "t.json", texts[i]);
        const char *argv[] = {bin("SQ_PLAN_BIN"), "--target-profile", prof, "--draft-ms", "0.1",
                              "-n", "8", "-d", "4", "-o", pf, NULL};
        char *err = NULL;
        cr_assert_eq(run(argv, NULL, &err), 65, "%s", err);
        cr_assert(strstr(err, at[i]) && strstr(err, "a version 1 profile has no batch sizes") &&
                  strstr(err, "version 2"), "%s", err);
        cr_assert(!tu_exists(pf));
        free(err);
        free(prof);
    }
    free(pf);
    tu_rmtree(dir);
    free(dir);
}

/* ---- --import CSV with a batch column ------------------------------------------------------ */

Test(messages, csv_import_reads_a_batch_column_into_a_version_2_profile)
{
    char *dir = tu_tmpdir();
    /* any column order; repeated (batch, tokens) rows combine into their median */
    char *csv = put(dir, "engine.csv", "# measured in vLLM\ntokens, batch, us\n1,1,1000\n8,1,2000\n"
                                       "1,4,2500\n8,4,5000\n8,4,6000\n8,4,7000\n");
    sq_profile *p = NULL;
    sq_error e = {0};
    cr_assert_eq(sq_profile_from_csv(csv, "vllm", &p, &e), 0, "%s", e.msg);
    cr_assert_eq(p->n, 4);
    int batches[4], tokens[4] = {1, 8, 1, 8};
    double ms[4] = {1, 2, 2.5, 6};
    cr_assert_eq(sq_profile_batches(p, batches, 4), 2);
    cr_assert(batches[0] == 1 && batches[1] == 4);
    for (int i = 0; i < 4; i++) {
        cr_assert_eq(p->points[i].batch, i < 2 ? 1 : 4);
        cr_assert_eq(p->points[i].tokens, tokens[i]);
        cr_assert_float_eq(p->points[i].median_ms, ms[i], 1e-9);
    }
    cr_assert_eq(p->points[3].samples, 3);
    sq_profile_free(p);

    /* the tool writes a version 2 profile that the ladder reads */
    char *prof = tu_path(dir, "t.json"), *lad = tu_path(dir, "ladder.json");
    const char *imp[] = {bin("SQ_PROFILE_BIN"), "--import", csv, "-o", prof, NULL};
    char *err = NULL, *so = NULL;
    cr_assert_eq(run(imp, NULL, &err), 0, "%s", err);
    free(err);
    char *text = tu_read(prof, NULL);
    cr_assert(strstr(text, "\"version\": 2") && strstr(text, "\"batch\": 4"), "%s", text);
    free(text);
    const char *ladder[] = {bin("SQ_PLAN_BIN"), "--ladder", "--target-profile", prof, "--draft-ms",
                            "0.1", "-n", "8", "-d", "4", "-o", lad, NULL};
    cr_assert_eq(run(ladder, &so, &err), 0, "%s", err);
    text = tu_read(lad, NULL);
    cr_assert(strstr(text, "\"batch\": 4"), "%s", text);
    free(text);
    free(so);
    free(err);

    /* bad headers and rows name the line and the column */
    const char *bad[][2] = {
        {"tokens,ms,extra\n1,2,3\n", "engine.csv:1: column 3 is \"extra\""},
        {"batch,tokens,tokens\n1,2,3\n", "column 3 is \"tokens\" again"},
        {"batch,ms\n1,2\n", "a batch column comes with tokens and a time"},
        /* a second time column is no column "again"; a column named twice is no time unit */
        {"tokens,ms,us\n1,2,3\n",
         "engine.csv:1: column 3 is \"us\", a second time column (column 2 is \"ms\")"},
        {"tokens,tokens\n1,2\n",
         "engine.csv:1: column 2 is \"tokens\" again (expected a time column: ms, "},
        {"tokens,msec\n1,2\n", "engine.csv:1: unknown time column \"msec\" (expected a time "
                                "column: ms, "},
        {"batch,tokens,ms,x\n1,2,3,4\n", "4 columns"},
        {"batch,tokens,ms\n0,1,1\n", "engine.csv:2: batch: \"0\" is not an integer in [1, 65536]"},
        {"batch,tokens,ms\n1,1\n", "engine.csv:2: 2 columns where the header has 3"},
        {"batch,tokens,ms\n1,1,1\n2,1,1\n1,2,2\n", NULL},   /* rows in any order */
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        tu_write(csv, bad[i][0]);
        sq_error e2 = {0};
        p = NULL;
        int rc = sq_profile_from_csv(csv, "x", &p, &e2);
        if (!bad[i][1]) {
            cr_assert_eq(rc, 0, "%s", e2.msg);
            cr_assert(p->n == 3 && p->points[2].batch == 2);
            sq_profile_free(p);
            continue;
        }
        cr_assert_eq(rc, SQ_EDATA, "%s", bad[i][0]);
        cr_assert(strstr(e2.msg, bad[i][1]), "'%s' lacks '%s'", e2.msg, bad[i][1]);
    }
    free(csv);
    free(prof);
    free(lad);
    tu_rmtree(dir);
    free(dir);
}

/* ---- a byte order mark at the start of a text input ----------------------------------------- */

#define BOM "\xef\xbb\xbf"
#define CURVE "{\"format\":\"sequoia-acceptance\",\"version\":1,\"curves\":[{\"name\":\"a\"," \
              "\"p\":[0.6,0.2,0.1]}]}"

/* Runs argv (its output file `out`); returns what it wrote, or NULL after a failure whose
 * stderr is left in *err. */
static char *output_of(const char *const *argv, const char *out, int want_rc, char **err)
{
    int rc = run(argv, NULL, err);
    cr_assert_eq(rc, want_rc, "%s: exit %d: %s", argv[0], rc, *err);
    return rc ? NULL : tu_read(out, NULL);
}

Test(messages, a_utf8_byte_order_mark_is_skipped_and_utf16_is_refused_naming_it)
{
    char *dir = tu_tmpdir();
    char *draft = tu_source_path("data/models/draft"), *target = tu_source_path("data/models/target");
    char *root = tu_source_path("data/ladder/plans/root.json");
    char *o1 = tu_path(dir, "o1"), *o2 = tu_path(dir, "o2");
    char *e = NULL;
    /* each input with and without the mark gives the same output */
    struct { const char *name, *text; } in[] = {
        {"curve.json", CURVE},          /* JSON (sq_json_parse) */
        {"engine.csv", "tokens,ms\n1,1\n8,2\n"},   /* --import CSV */
        {"prompt.txt", "1 2 3\n"},      /* token ids */
        {"prompt-text.txt", "Hello"},   /* --prompt-text */
        {"choices.txt", "[[0], [1], [0, 0]]"},   /* sequoia-plan --import choices */
    };
    for (size_t i = 0; i < sizeof in / sizeof *in; i++) {
        char *outs[2] = {NULL, NULL};
        for (int b = 0; b < 2; b++) {
            char text[256];
            snprintf(text, sizeof text, "%s%s", b ? BOM : "", in[i].text);
            char *f = put(dir, in[i].name, text), *o = b ? o2 : o1;
            const char *plan[] = {bin("SQ_PLAN_BIN"), "-a", f, "-n", "8", "-d", "4", "-q", "-o", o, NULL};
            const char *imp[] = {bin("SQ_PROFILE_BIN"), "--import", f, "-o", o, NULL};
            const char *ids[] = {bin("SQ_RUN_BIN"), "--draft", draft, "--target", target, "--plan",
                                 root, "--prompt", f, "-n", "4", "--mode", "greedy",
                                 "--no-baseline", "-q", "-o", o, NULL};
            const char *txt[] = {bin("SQ_RUN_BIN"), "--draft", draft, "--target", target, "--plan",
                                 root, "--prompt-text", f, "-n", "4", "--mode", "greedy",
                                 "--no-baseline", "-q", "-o", o, NULL};
            const char *cho[] = {bin("SQ_PLAN_BIN"), "--import", "choices", f, "-q", "-o", o, NULL};
            const char *const *argv[] = {plan, imp, ids, txt, cho};
            outs[b] = output_of(argv[i], o, 0, &e);
            free(e);
            free(f);
        }
        cr_assert_str_eq(outs[0], outs[1], "%s: the mark changed the output", in[i].name);
        free(outs[0]);
        free(outs[1]);
    }
    /* UTF-16 and UTF-32 marks are refused naming them; a mark alone is an empty file */
    const struct { const char *text; size_t len; const char *expect; } bad[] = {
        {"\xff\xfe{\0}\0", 6, "starts with a UTF-16 (little-endian) byte order mark: expected UTF-8 text"},
        {"\xfe\xff\0{\0}", 6, "UTF-16 (big-endian) byte order mark"},
        {"\xff\xfe\0\0{\0\0\0", 8, "UTF-32 (little-endian) byte order mark"},
        {BOM, 3, "empty file, expected JSON (after its UTF-8 byte order mark)"},
    };
    char *f = tu_path(dir, "bad.json");
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        FILE *fp = fopen(f, "wb");
        cr_assert_not_null(fp);
        cr_assert_eq(fwrite(bad[i].text, 1, bad[i].len, fp), bad[i].len);
        fclose(fp);
        const char *plan[] = {bin("SQ_PLAN_BIN"), "-a", f, "-n", "8", "-d", "4", "-q", "-o", o1, NULL};
        cr_assert_eq(run(plan, NULL, &e), 65, "%s", e);
        cr_assert(strstr(e, "bad.json") && strstr(e, bad[i].expect), "'%s' lacks '%s'", e,
                  bad[i].expect);
        free(e);
    }
    /* the same for a token file and a CSV */
    FILE *fp = fopen(f, "wb");
    fwrite("\xff\xfe" "1\0", 1, 4, fp);
    fclose(fp);
    const char *ids[] = {bin("SQ_RUN_BIN"), "--draft", draft, "--target", target, "--plan", root,
                         "--prompt", f, "-n", "4", "-q", "-o", o1, NULL};
    const char *imp[] = {bin("SQ_PROFILE_BIN"), "--import", f, "-o", o1, NULL};
    const char *const *argv2[] = {ids, imp};
    for (int i = 0; i < 2; i++) {
        cr_assert_eq(run(argv2[i], NULL, &e), 65, "%s", e);
        cr_assert(strstr(e, "UTF-16 (little-endian) byte order mark"), "%s", e);
        free(e);
    }
    free(f);
    free(o1);
    free(o2);
    free(draft);
    free(target);
    free(root);
    tu_rmtree(dir);
    free(dir);
}

/* ---- '-' and pipes as inputs ---------------------------------------------------------------- */

/* `cmd` run by /bin/sh in dir (under timeout 60): its exit status, stderr in *err. */
static int sh(const char *cmd, char **err)
{
    const char *argv[] = {"/bin/sh", "-c", cmd, NULL};
    return run(argv, NULL, err);
}

Test(messages, dash_and_pipes_as_inputs_say_what_the_input_needs)
{
    char *dir = tu_tmpdir();
    char *draft = tu_source_path("data/models/draft"), *target = tu_source_path("data/models/target");
    char *root = tu_source_path("data/ladder/plans/root.json");
    char *tf = put(dir, "t.txt", "1 2 3 4\n"), *corpus = tu_path(dir, "c.h5");
    char *o = tu_path(dir, "o.json");
    const char *dump[] = {bin("SQ_RUN_BIN"), "dump", "--draft", draft, "--target", target,
                          "--tokens", tf, "-o", corpus, "-q", NULL};
    char *err = NULL;
    cr_assert_eq(run(dump, NULL, &err), 0, "%s", err);
    free(err);
    char *prof = put(dir, "p.json", "{\"format\":\"sequoia-profile\",\"version\":1,\"points\":"
                                    "[{\"tokens\":1,\"median_ms\":1},{\"tokens\":64,\"median_ms\":2}]}");
    const char *A = bin("SQ_ACCEPT_BIN"), *R = bin("SQ_RUN_BIN"), *P = bin("SQ_PLAN_BIN");
    char cmd[5][4096];
    /* a corpus as '-' was "-: cannot open: No such file or directory" */
    snprintf(cmd[0], sizeof cmd[0], "%s - -q -o %s < %s", A, o, corpus);
    /* a pipe is named a pipe (a named FIFO stays "a FIFO", suite hostile) */
    snprintf(cmd[1], sizeof cmd[1], "cat %s | %s /dev/stdin -q -o %s", corpus, A, o);
    /* an HDF5 token file through '-' was "line 3: NUL byte ..." */
    snprintf(cmd[2], sizeof cmd[2], "%s --draft %s --target %s --plan %s --prompt - -n 2 -q -o %s "
             "< %s", R, draft, target, root, o, corpus);
    /* a model directory as '-' was "-: model directory does not exist" */
    snprintf(cmd[3], sizeof cmd[3], "%s --draft - --target %s --plan %s --prompt %s -n 2 -q -o %s",
             R, target, root, tf, o);
    /* the second '-' read an empty stream: "-: empty file, expected JSON" */
    snprintf(cmd[4], sizeof cmd[4], "%s --target-profile - --draft-profile - -n 8 -d 4 -q -o %s < %s",
             P, o, prof);
    const struct { int rc; const char *expect; } cases[] = {
        {64, "-: standard input cannot be a corpus file: this input is read by seeking or mapping"},
        {65, "/dev/stdin: not a regular file (a pipe): save it to a file, or give '-'"},
        {64, "-: holds an HDF5 file, which is read by seeking: an HDF5 token file must be named"},
        {64, "-: standard input cannot be a model directory"},
        {64, "-: standard input was already read by another input of this run; only one input can "
             "be '-'"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        int rc = sh(cmd[i], &err);
        cr_expect_eq(rc, cases[i].rc, "%s: exit %d: %s", cmd[i], rc, err);
        cr_expect(strstr(err, cases[i].expect), "%s: '%s' lacks '%s'", cmd[i], err, cases[i].expect);
        cr_expect(!tu_exists(o), "%s wrote its output", cmd[i]);
        free(err);
    }
    /* what '-' reads: one input read whole */
    snprintf(cmd[0], sizeof cmd[0], "%s --target-profile - --draft-ms 0.1 -n 8 -d 4 -q -o %s < %s",
             P, o, prof);
    cr_assert_eq(sh(cmd[0], &err), 0, "%s", err);
    free(err);
    /* a plan through '-', static or dynamic: sequoia-run reads it once (it was read twice, and
     * three times since a dynamic plan's settings became the run's: "already read") */
    char *dyn = tu_source_path("data/dynamic/plan-large-sglang-greedy.json");
    const char *plans[] = {root, dyn};
    for (int k = 0; k < 2; k++) {
        snprintf(cmd[0], sizeof cmd[0], "%s --draft %s --target %s --plan - --prompt %s -n 4 -q "
                 "--no-baseline -o %s < %s", R, draft, target, tf, o, plans[k]);
        cr_expect_eq(sh(cmd[0], &err), 0, "%s: %s", cmd[0], err);
        free(err);
        cr_expect(tu_exists(o), "%s wrote nothing", cmd[0]);
        remove(o);
    }
    free(dyn);
    free(prof);
    free(o);
    free(tf);
    free(corpus);
    free(draft);
    free(target);
    free(root);
    tu_rmtree(dir);
    free(dir);
}

/* ---- --batch: what happens to prompts past B, and with fewer than B ------------------------- */

Test(messages, batch_text_says_what_happens_to_extra_and_missing_prompts)
{
    /* the help and the man page name both rules (W6 made extra prompts a warning) */
    const char *help[] = {bin("SQ_RUN_BIN"), "--help", NULL};
    char *out = NULL, *err = NULL;
    cr_assert_eq(run(help, &out, &err), 0);
    cr_assert(strstr(out, "than B decodes the first B and warns of the rest") &&
              strstr(out, "sequence k decodes prompt k mod S"), "%s", out);
    free(out);
    free(err);
    char *man = tu_source_path("man/sequoia-run.1");
    char *text = tu_read(man, NULL);
    cr_assert(strstr(text, "the batch decodes prompt k mod S") &&
              strstr(text, "A file of more than B sequences decodes the first B"), "man page");
    free(text);
    free(man);
    /* and the rule holds: 3 prompts, --batch 5, greedy: sequences 3 and 4 repeat 0 and 1 */
    char *dir = tu_tmpdir();
    char *draft = tu_source_path("data/models/draft"), *target = tu_source_path("data/models/target");
    char *plan = tu_source_path("data/ladder/plans/plan-b4.json");
    char *pf = put(dir, "p.txt", "1 2 3\n\n40 50 60 70\n\n7 8\n"), *of = tu_path(dir, "o.txt");
    const char *argv[] = {bin("SQ_RUN_BIN"), "--draft", draft, "--target", target, "--plan", plan,
                          "--prompt", pf, "-n", "6", "--batch", "5", "--mode", "greedy",
                          "--no-baseline", "-q", "-o", of, NULL};
    cr_assert_eq(run(argv, NULL, &err), 0, "%s", err);
    free(err);
    char *o = tu_read(of, NULL), *line[6] = {0};
    int n = 0;
    for (char *s = strtok(o, "\n"); s && n < 6; s = strtok(NULL, "\n"))
        line[n++] = s;
    cr_assert_eq(n, 5, "%d lines", n);
    cr_assert_str_eq(line[3], line[0]);
    cr_assert_str_eq(line[4], line[1]);
    cr_assert_str_neq(line[0], line[1]);
    free(o);
    free(pf);
    free(of);
    free(draft);
    free(target);
    free(plan);
    tu_rmtree(dir);
    free(dir);
}

/* ---- sequoia-plan(1): profiles of both versions ---------------------------------------------- */

Test(messages, plan_man_page_lists_profile_versions_1_and_2)
{
    char *man = tu_source_path("man/sequoia-plan.1");
    char *text = tu_read(man, NULL);
    /* it listed "format sequoia-profile v1 (read)" while --ladder needs version 2 */
    cr_assert_null(strstr(text, "sequoia\\-profile\nv1 (read)."),
                   "sequoia-plan(1) lists profiles as version 1 only");
    cr_assert(strstr(text, "v1 or v2 (read; v2 adds batch sizes"), "sequoia-plan(1)");
    cr_assert(strstr(text, "file, version 1, or version 2 with batch sizes"), "sequoia-plan(1)");
    free(text);
    free(man);
}

/* ---- the README's CPU figures name the CPU and its instruction-set path ---------------------- */

Test(messages, readme_cpu_figures_name_the_cpu_and_its_isa_path)
{
    char *p = tu_source_path("README.md");
    char *text = tu_read(p, NULL);
    const char *cpu = strstr(text, "CPU figures:");
    cr_assert_not_null(cpu);
    const char *end = strstr(cpu, "GPU figures:");
    cr_assert_not_null(end);
    char para[512];
    snprintf(para, sizeof para, "%.*s", (int)(end - cpu), cpu);
    /* the figures hold on the host they were measured on: which CPU, which kernels */
    cr_assert(strstr(para, "Intel Xeon") && strstr(para, "AVX-512 path") &&
              strstr(para, "SkylakeX"), "%s", para);
    /* the pipeline's figures, measured on another host */
    cr_assert(strstr(text, "What it printed (2-core AMD EPYC with AVX-512"), "README");
    int lines = 0;
    for (const char *q = text; *q; q++)
        lines += *q == '\n';
    cr_assert_leq(lines, 250);
    free(text);
    free(p);
}

/* ---- the example scripts: progress lines, and what a CI over few prompts can test ------------ */

Test(messages, example_scripts_print_progress_lines_and_test_a_prediction_only_with_enough_prompts)
{
    /* progress redrawn with a carriage return ran together in a log: one line each now, or a
     * count redrawn only on a terminal */
    char *sh_path = tu_source_path("examples/speedup.sh");
    char *text = tu_read(sh_path, NULL);
    cr_assert_null(strstr(text, "\\r'"), "examples/speedup.sh draws progress with \\r");
    cr_assert(strstr(text, "prompt $((i + 1)) of $PROMPTS\" >&2"), "speedup.sh progress");
    free(text);
    free(sh_path);
    char *py_path = tu_source_path("examples/dump_corpus.py");
    text = tu_read(py_path, NULL);
    cr_assert(strstr(text, "tty = sys.stderr.isatty()") && strstr(text, "and tty:"),
              "dump_corpus.py redraws its count off a terminal");
    free(text);
    free(py_path);
    /* "inside the 95% CI" from 2 prompts (one degree of freedom, t = 12.7) or 1 (no CI) */
    char *ex = tu_source_path("examples");
    char code[2048];
    snprintf(code, sizeof code,
             "import sys; sys.path.insert(0, '%s'); import speedup as s\n"
             "nan = float('nan')\n"
             "for n, m in ((1, (1.2, nan, nan)), (2, (1.2, 0.5, 2.0)), (16, (1.15, 1.10, 1.21))):\n"
             "    t, w = s.verdict('speedup', 1.32, m, n)\n"
             "    print(n, w, t)\n"
             "print(s.fmt_x((1.2, nan, nan)))\n", ex);
    const char *py = getenv("SQ_PYTHON") ? getenv("SQ_PYTHON") : "python3";
    const char *argv[] = {py, "-B", "-c", code, NULL};
    char *out = NULL, *err = NULL;
    cr_assert_eq(run(argv, &out, &err), 0, "%s", err);
    cr_assert(strstr(out, "1 None predicted speedup 1.320x, measured 1.200x (+10.0%) over 1 prompt: "
                          "too few for a 95% CI test (a single run has no CI"), "%s", out);
    cr_assert(strstr(out, "2 None predicted speedup 1.320x, measured 1.200x (+10.0%) over 2 "
                          "prompts: too few for a 95% CI test (1 degree of freedom, t = 12.7"),
              "%s", out);
    cr_assert(strstr(out, "16 False predicted speedup 1.320x outside the measured 95% CI "
                          "[1.100, 1.210] over 16 prompts"), "%s", out);
    cr_assert(strstr(out, "1.20x (no CI)"), "%s", out);
    free(out);
    free(err);
    free(ex);
}

/* ---- sequoia-accept: the batches a one-sequence corpus is cut into ---------------------------- */

Test(messages, accept_notice_counts_the_batches_a_short_corpus_has)
{
    char *dir = tu_tmpdir();
    char *draft = tu_source_path("data/models/draft"), *target = tu_source_path("data/models/target");
    char *tf = put(dir, "t.txt", "1 2 3 4\n"), *corpus = tu_path(dir, "c.h5");
    char *acc = tu_path(dir, "acc.json");
    const char *dump[] = {bin("SQ_RUN_BIN"), "dump", "--draft", draft, "--target", target,
                          "--tokens", tf, "-o", corpus, "-q", NULL};
    char *err = NULL;
    cr_assert_eq(run(dump, NULL, &err), 0, "%s", err);
    free(err);
    /* 3 positions: 3 batches of one (it said 32) */
    const char *argv[] = {bin("SQ_ACCEPT_BIN"), corpus, "-q", "-o", acc, NULL};
    cr_assert_eq(run(argv, NULL, &err), 0, "%s", err);
    cr_assert(strstr(err, "holds one sequence; its standard errors use 3 contiguous batches"),
              "%s", err);
    free(err);
    free(acc);
    free(tf);
    free(corpus);
    free(draft);
    free(target);
    tu_rmtree(dir);
    free(dir);
}
