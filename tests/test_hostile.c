/* Suite 'hostile' (issue 27): crashes, hangs, data loss and silent wrong results found by
 * trying the tools on hostile files and hosts. Each test is named in docs/robustness.md,
 * "Hostile inputs and hosts", with what went wrong and what happens now.
 *
 * Tests never write to a real /dev path: FIFOs are made with mkfifo in a scratch folder. A
 * tool that could hang runs under timeout(1), so that a regression fails instead of hanging. */
#include <criterion/criterion.h>

#include <errno.h>
#include <math.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "libsequoia/base/cli.h"
#include "libsequoia/base/io.h"
#include "runtime/st_writer.h"
#include "tests/testutil.h"

#define CURVE "{\"format\":\"sequoia-acceptance\",\"version\":1,\"curves\":[{\"name\":\"a\"," \
              "\"p\":[0.6,0.2,0.1]}]}"
#define PLAN "{\"format\":\"sequoia-plan\",\"version\":1,\"size\":4,\"depth\":3," \
             "\"expected_tokens\":2,\"rank_semantics\":\"draft-topk\",\"nodes\":" \
             "{\"parent\":[-1,0,0,1],\"rank\":[0,1,2,1],\"depth\":[0,1,1,2]}," \
             "\"acceptance\":{\"name\":\"t\",\"p\":[0.5,0.25]}}"

static const char *bin(const char *env)
{
    const char *b = getenv(env);
    cr_assert_not_null(b, "%s is not set (run through meson test)", env);
    return b;
}

static void put(const char *dir, const char *name, const char *text)
{
    char *p = tu_path(dir, name);
    tu_write(p, text);
    free(p);
}

/* argv (NULL-terminated) run under `timeout SECS`: 124 when it had to be stopped. */
static int run_limited(int secs, const char *const *argv, char **out, char **err)
{
    const char *full[64];
    char s[16];
    snprintf(s, sizeof s, "%d", secs);
    int n = 0;
    full[n++] = "/usr/bin/timeout";
    full[n++] = s;
    for (int i = 0; argv[i] && n < 63; i++)
        full[n++] = argv[i];
    full[n] = NULL;
    return tu_run((char *const *)full, out, err);
}

/* A small random model in dir/name. */
static char *random_model(const char *dir, const char *name, uint64_t seed)
{
    char *p = tu_path(dir, name);
    sq_random_model_params rp = sq_random_model_default_params();
    rp.seed = seed;
    sq_error err = {0};
    cr_assert_eq(sq_model_write_random(p, &rp, &err), 0, "%s", err.msg);
    return p;
}

static char *fifo(const char *dir, const char *name)
{
    char *p = tu_path(dir, name);
    cr_assert_eq(mkfifo(p, 0600), 0, "%s: %s", p, strerror(errno));
    return p;
}

/* ---- C3: a FIFO as any input ------------------------------------------------------------- */

Test(hostile, c3_fifo_inputs_are_refused_without_blocking, .timeout = 240)
{
    char *dir = tu_tmpdir();
    put(dir, "curve.json", CURVE);
    put(dir, "plan.json", PLAN);
    put(dir, "tokens.txt", "1 2 3 4 5 6 7 8\n");
    char *model = random_model(dir, "model", 1);
    char *ff = fifo(dir, "fifo");
    /* model directories whose config.json or model.safetensors is a FIFO */
    char *mcfg = random_model(dir, "m-cfg", 1), *mst = random_model(dir, "m-st", 1);
    char *c = tu_path(mcfg, "config.json"), *s = tu_path(mst, "model.safetensors");
    cr_assert_eq(unlink(c), 0);
    cr_assert_eq(mkfifo(c, 0600), 0);
    cr_assert_eq(unlink(s), 0);
    cr_assert_eq(mkfifo(s, 0600), 0);
    char *out = tu_path(dir, "out");
    char *curve = tu_path(dir, "curve.json"), *plan = tu_path(dir, "plan.json");
    char *tokens = tu_path(dir, "tokens.txt");
    const char *P = bin("SQ_PLAN_BIN"), *A = bin("SQ_ACCEPT_BIN"), *F = bin("SQ_PROFILE_BIN"),
               *R = bin("SQ_RUN_BIN");
    struct {
        const char *what;
        const char *argv[24];
    } cases[] = {
        {"plan --acceptance", {P, "--acceptance", ff, "-o", out, NULL}},
        {"plan --plan", {P, "--plan", ff, "--export", "dot", "-o", out, NULL}},
        {"plan --target-profile", {P, "--acceptance", curve, "--target-profile", ff,
                                   "--draft-ms", "1", "-o", out, NULL}},
        {"accept corpus", {A, ff, "-q", "-o", out, NULL}},
        {"profile --import", {F, "--import", ff, "-o", out, NULL}},
        {"run --plan", {R, "--draft", model, "--target", model, "--plan", ff, "--prompt", tokens,
                        "-q", "-o", out, NULL}},
        {"run --prompt", {R, "--draft", model, "--target", model, "--plan", plan, "--prompt", ff,
                          "-q", "-o", out, NULL}},
        {"dump --tokens", {R, "dump", "--draft", model, "--target", model, "--tokens", ff, "-q",
                           "-o", out, NULL}},
        {"DIR/config.json", {R, "dump", "--draft", mcfg, "--target", model, "--tokens", tokens,
                             "-q", "-o", out, NULL}},
        {"DIR/model.safetensors", {R, "dump", "--draft", mst, "--target", model, "--tokens",
                                   tokens, "-q", "-o", out, NULL}},
        {"profile --model DIR/model.safetensors", {F, "--model", mst, "--tokens", "1", "--repeat",
                                                   "1", "--no-refine", "-o", out, NULL}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *e = NULL;
        int rc = run_limited(20, cases[i].argv, NULL, &e);
        cr_expect_neq(rc, 124, "%s: the tool blocked on the FIFO", cases[i].what);
        cr_expect_eq(rc, 65, "%s: exit %d: %s", cases[i].what, rc, e);
        cr_expect(e && strstr(e, "not a regular file (a FIFO)"), "%s: %s", cases[i].what, e);
        cr_expect(!tu_exists(out), "%s: wrote an output", cases[i].what);
        free(e);
    }
    tu_rmtree(dir);
}

/* '-' reads a JSON or text input from standard input, as '-' writes an output there. */
Test(hostile, c3_dash_reads_an_input_from_standard_input, .timeout = 60)
{
    char *dir = tu_tmpdir();
    put(dir, "curve.json", CURVE);
    char *curve = tu_path(dir, "curve.json"), *out = tu_path(dir, "plan.json");
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "%s --acceptance - --budget 8 --depth 3 -o '%s' < '%s'",
             bin("SQ_PLAN_BIN"), out, curve);
    const char *argv[] = {"/bin/sh", "-c", cmd, NULL};
    char *e = NULL;
    int rc = run_limited(30, argv, NULL, &e);
    cr_assert_eq(rc, 0, "exit %d: %s", rc, e);
    cr_assert(tu_exists(out));
    free(e);
    tu_rmtree(dir);
}

/* ---- C4: an output whose reader went away ------------------------------------------------ */

/* A child that opens the FIFO for reading with a one-page pipe, reads one byte and exits. */
static pid_t early_reader(const char *path)
{
    pid_t pid = fork();
    cr_assert(pid >= 0);
    if (pid == 0) {
        alarm(30);
        int fd = open(path, O_RDONLY);
        if (fd < 0)
            _exit(1);
#ifdef F_SETPIPE_SZ
        fcntl(fd, F_SETPIPE_SZ, 4096);
#endif
        char c;
        ssize_t r = read(fd, &c, 1);
        _exit(r == 1 ? 0 : 2);
    }
    return pid;
}

Test(hostile, c4_fifo_output_whose_reader_exits_is_exit_74, .timeout = 120)
{
    char *dir = tu_tmpdir();
    put(dir, "curve.json", CURVE);
    char *curve = tu_path(dir, "curve.json"), *ff = fifo(dir, "fifo");
    pid_t r = early_reader(ff);
    /* a plan of 8000 nodes is about 250 KB of JSON, more than a pipe holds */
    const char *argv[] = {bin("SQ_PLAN_BIN"), "--acceptance", curve, "--budget", "8000",
                          "--depth", "12", "-o", ff, NULL};
    char *e = NULL;
    int rc = run_limited(60, argv, NULL, &e);
    int st;
    waitpid(r, &st, 0);
    cr_assert_eq(rc, 74, "exit %d (141 is death by SIGPIPE): %s", rc, e);
    cr_assert(e && strstr(e, ff) && strstr(e, "Broken pipe"), "%s", e);
    free(e);
    /* standard output to a pipe closed early: the same */
    char *sink = tu_path(dir, "sink");
    const char *sh[] = {"/bin/bash", "-c",
                        "set -o pipefail; \"$0\" --acceptance \"$1\" --budget 8000 --depth 12 "
                        "-o - | head -c 1 > \"$2\"", bin("SQ_PLAN_BIN"), curve, sink, NULL};
    rc = run_limited(60, sh, NULL, &e);
    cr_assert_eq(rc, 74, "exit %d: %s", rc, e);
    cr_assert(e && strstr(e, "standard output") && strstr(e, "Broken pipe"), "%s", e);
    free(e);
    tu_rmtree(dir);
}

/* ---- D1: a ladder's plans and its -o on one file ------------------------------------------ */

static void batch_profile(const char *path, double fixed, double per_row)
{
    FILE *fp = fopen(path, "w");
    cr_assert_not_null(fp);
    fprintf(fp, "{\"format\":\"sequoia-profile\",\"version\":2,\"points\":[");
    int b[] = {1, 2, 4};
    for (int i = 0; i < 3; i++)
        for (int n = 1; n <= 16; n++)
            fprintf(fp, "%s{\"batch\":%d,\"tokens\":%d,\"median_ms\":%.6f}", i || n > 1 ? "," : "",
                    b[i], n, fixed + per_row * (b[i] * n > 8 ? b[i] * n - 8 : 0));
    fprintf(fp, "]}\n");
    cr_assert_eq(fclose(fp), 0);
}

Test(hostile, d1_ladder_output_inside_its_plans_folder_is_refused, .timeout = 60)
{
    char *dir = tu_tmpdir();
    char *t = tu_path(dir, "t.json"), *o = tu_path(dir, "plan-b1.json");
    batch_profile(t, 1.0, 0.05);
    const char *argv[] = {bin("SQ_PLAN_BIN"), "--ladder", "--target-profile", t, "--draft-ms",
                          "0.1", "-n", "16", "-d", "4", "-o", o, "--ladder-plans", dir, NULL};
    char *e = NULL;
    int rc = run_limited(60, argv, NULL, &e);
    cr_assert_eq(rc, 64, "exit %d: %s", rc, e);
    cr_assert(e && strstr(e, "-o") && strstr(e, "--ladder-plans") && strstr(e, "same file"),
              "%s", e);
    cr_assert(!tu_exists(o), "an output was written");
    free(e);
    /* a rung's plan over the target profile itself */
    char *t1 = tu_path(dir, "plan-b2.json");
    batch_profile(t1, 1.0, 0.05);
    char *o2 = tu_path(dir, "ladder.json");
    const char *argv2[] = {bin("SQ_PLAN_BIN"), "--ladder", "--target-profile", t1, "--draft-ms",
                           "0.1", "-n", "16", "-d", "4", "-o", o2, "--ladder-plans", dir, NULL};
    size_t before_len, after_len;
    char *before = tu_read(t1, &before_len);
    rc = run_limited(60, argv2, NULL, &e);
    cr_assert_eq(rc, 64, "exit %d: %s", rc, e);
    cr_assert(e && strstr(e, "--target-profile"), "%s", e);
    char *after = tu_read(t1, &after_len);
    cr_assert(before_len == after_len && memcmp(before, after, before_len) == 0,
              "the input was overwritten");
    cr_assert(!tu_exists(o2));
    free(e);
    tu_rmtree(dir);
}

/* The commit helper itself: two outputs on one file are refused, nothing is written. */
Test(hostile, d1_commit_refuses_two_outputs_on_one_file)
{
    char *dir = tu_tmpdir();
    char *a = tu_path(dir, "x.json");
    char b[4096];
    snprintf(b, sizeof b, "%s/./x.json", dir);
    sq_out *outs[2];
    sq_error err = {0};
    cr_assert_eq(sq_out_open(&outs[0], a, &err), 0);
    cr_assert_eq(sq_out_open(&outs[1], b, &err), 0);
    fputs("one\n", sq_out_stream(outs[0]));
    fputs("two\n", sq_out_stream(outs[1]));
    cr_assert_eq(sq_cli_commit(outs, 2, &err), SQ_EUSAGE);
    cr_assert(strstr(err.msg, "same file"), "%s", err.msg);
    cr_assert(!tu_exists(a));
    cr_assert_eq(tu_count_entries(dir), 0, "a temporary file was left");
    tu_rmtree(dir);
}

/* ---- D6: outputs over a model's own files ---------------------------------------------------- */

/* One refusal: the tool exits 64 before any work, names the output and the model's option, and
 * the file's bytes are unchanged. */
static void expect_model_file_kept(const char *const *argv, const char *file, const char *opt)
{
    size_t before_len, after_len;
    char *before = tu_read(file, &before_len);
    char *e = NULL;
    int rc = run_limited(120, argv, NULL, &e);
    cr_assert_eq(rc, 64, "%s over %s: exit %d: %s", argv[1], file, rc, e);
    cr_assert(e && strstr(e, file) && strstr(e, opt) && strstr(e, "refusing to overwrite an input"),
              "%s", e);
    char *after = tu_read(file, &after_len);
    cr_assert(before_len == after_len && memcmp(before, after, before_len) == 0,
              "%s was overwritten", file);
    free(before);
    free(after);
    free(e);
}

/* Every output option of sequoia-run, its dump and sequoia-profile refuses to replace a file
 * that the tools read from a model directory (config.json, the checkpoint or a shard,
 * tokenizer.json): found by a second hostile-input audit, where `-o DIR/config.json` replaced
 * the target's config with exit 0. Another file in the directory stays writable. */
Test(hostile, d6_outputs_never_replace_a_models_files, .timeout = 600)
{
    char *dir = tu_tmpdir();
    char *d = random_model(dir, "d", 1), *t = random_model(dir, "t", 2);
    put(dir, "plan.json", PLAN);
    put(dir, "tokens.txt", "1 2 3 4 5 6 7 8\n");
    put(t, "tokenizer.json", "{}");
    put(t, "part-00002-of-00002.safetensors", "a shard's bytes");
    char *plan = tu_path(dir, "plan.json"), *tokens = tu_path(dir, "tokens.txt");
    char *t_cfg = tu_path(t, "config.json"), *d_st = tu_path(d, "model.safetensors");
    char *t_tok = tu_path(t, "tokenizer.json");
    char *t_shard = tu_path(t, "part-00002-of-00002.safetensors");
    const char *R = bin("SQ_RUN_BIN"), *F = bin("SQ_PROFILE_BIN");
#define RUN_ARGS R, "--draft", d, "--target", t, "--plan", plan, "--prompt", tokens, "-n", "8", "-q"
    const char *a1[] = {RUN_ARGS, "-o", t_cfg, NULL};
    expect_model_file_kept(a1, t_cfg, "--target");
    const char *a2[] = {RUN_ARGS, "--report", d_st, NULL};
    expect_model_file_kept(a2, d_st, "--draft");
    const char *a3[] = {RUN_ARGS, "--text", t_tok, NULL};
    expect_model_file_kept(a3, t_tok, "--target");
    const char *a4[] = {R, "dump", "--draft", d, "--target", t, "--tokens", tokens, "-q", "-o",
                        t_shard, NULL};
    expect_model_file_kept(a4, t_shard, "--target");
    const char *a5[] = {F, "--model", t, "--tokens", "1,2", "--repeat", "2", "-q", "--force",
                        "-o", t_cfg, NULL};
    expect_model_file_kept(a5, t_cfg, "--model");
    char *prof = tu_path(dir, "p.json");
    const char *a6[] = {F, "--model", t, "--draft", d, "--tokens", "1,2", "--repeat", "2", "-q",
                        "--force", "-o", prof, "--svg", d_st, NULL};
    expect_model_file_kept(a6, d_st, "--draft");
    /* an output of another name inside the model's directory is written */
    char *mine = tu_path(t, "ids.txt");
    const char *ok[] = {R, "--draft", d, "--target", d, "--plan", plan, "--prompt", tokens, "-n",
                        "8", "-q", "-o", mine, NULL};
    char *e = NULL;
    int rc = run_limited(120, ok, NULL, &e);
    cr_assert_eq(rc, 0, "exit %d: %s", rc, e);
    cr_assert(tu_exists(mine));
    free(e);
#undef RUN_ARGS
    tu_rmtree(dir);
}

/* ---- D3: dump --resume into an existing folder ----------------------------------------------- */

Test(hostile, d3_dump_resume_into_a_directory_is_refused_up_front, .timeout = 120)
{
    char *dir = tu_tmpdir();
    put(dir, "tokens.txt", "1 2 3 4 5 6 7 8 9 10\n");
    char *model = random_model(dir, "model", 1), *tokens = tu_path(dir, "tokens.txt");
    char *out = tu_path(dir, "existing");
    cr_assert_eq(mkdir(out, 0755), 0);
    const char *argv[] = {bin("SQ_RUN_BIN"), "dump", "--draft", model, "--target", model,
                          "--tokens", tokens, "--resume", "-q", "-o", out, NULL};
    char *e = NULL;
    int rc = run_limited(60, argv, NULL, &e);
    cr_assert_eq(rc, 73, "exit %d: %s", rc, e);
    /* refused before the work: the message of the up-front check, no dump summary */
    cr_assert(e && strstr(e, "is a directory, expected a file path"), "%s", e);
    cr_assert(!strstr(e, "positions"), "the dump ran first: %s", e);
    char *partial = tu_path(dir, "existing.partial");
    cr_assert(!tu_exists(partial));
    free(e);
    tu_rmtree(dir);
}

/* ---- D5: example scripts and their output folder ------------------------------------------- */

Test(hostile, d5_example_scripts_write_where_the_caller_says_never_into_the_repository)
{
    /* one helper (examples/out_dir.sh) decides for every example that writes a folder;
     * dynamic_grid.sh requires the folder, so only the relative case applies to it */
    const char *scripts[] = {"examples/ladder.sh", "examples/pipeline.sh", "examples/speedup.sh",
                             "examples/stepcost.sh", "examples/dynamic_grid.sh"};
    char *root = tu_source_path("");
    char *dir = tu_tmpdir();
    for (int i = 0; i < 5; i++) {
        char *script = tu_source_path(scripts[i]);
        char cmd[8192];
        /* a relative folder is the caller's */
        snprintf(cmd, sizeof cmd, "cd '%s' && PRINT_OUT=1 '%s' rel", dir, script);
        const char *a1[] = {"/bin/sh", "-c", cmd, NULL};
        char *out = NULL, *e = NULL;
        int rc = run_limited(30, a1, &out, &e);
        cr_assert_eq(rc, 0, "%s: exit %d: %s", scripts[i], rc, e);
        char want[4200];
        snprintf(want, sizeof want, "%s/rel\n", dir);
        cr_expect_str_eq(out, want, "%s", scripts[i]);
        free(out);
        free(e);
        if (strstr(scripts[i], "dynamic_grid")) {
            free(script);
            continue;
        }
        /* no argument: a fresh folder outside the repository */
        snprintf(cmd, sizeof cmd, "cd '%s' && TMPDIR='%s' PRINT_OUT=1 '%s'", root, dir, script);
        const char *a2[] = {"/bin/sh", "-c", cmd, NULL};
        rc = run_limited(30, a2, &out, &e);
        cr_assert_eq(rc, 0, "%s: exit %d: %s", scripts[i], rc, e);
        cr_expect(out && strncmp(out, dir, strlen(dir)) == 0, "%s: default folder %s", scripts[i],
                  out);
        free(out);
        free(e);
        free(script);
    }
    tu_rmtree(dir);
}

/* ---- W5: NaN weights in the target ------------------------------------------------------ */

/* Overwrites every value of the F32 tensor `name` in dir/model.safetensors with `v`. */
static void poison_tensor(const char *dir, const char *name, float v)
{
    char *p = tu_path(dir, "model.safetensors");
    size_t len;
    unsigned char *b = (unsigned char *)tu_read(p, &len);
    cr_assert(b && len > 8);
    uint64_t hl = 0;
    for (int i = 7; i >= 0; i--)
        hl = (hl << 8) | b[i];
    char *hdr = strndup((char *)b + 8, (size_t)hl);
    char key[256];
    snprintf(key, sizeof key, "\"%s\"", name);
    char *at = strstr(hdr, key);
    cr_assert_not_null(at, "%s not in the checkpoint", name);
    char *offs = strstr(at, "\"data_offsets\"");
    cr_assert_not_null(offs);
    unsigned long long a = 0, e = 0;
    cr_assert_eq(sscanf(strchr(offs, '[') + 1, "%llu , %llu", &a, &e), 2);
    for (unsigned long long o = a; o + 4 <= e; o += 4)
        memcpy(b + 8 + hl + o, &v, 4);
    FILE *fp = fopen(p, "wb");
    cr_assert_not_null(fp);
    cr_assert_eq(fwrite(b, 1, len, fp), len);
    cr_assert_eq(fclose(fp), 0);
    free(hdr);
    free(b);
    free(p);
}

Test(hostile, w5_nan_weights_in_the_target_stop_every_mode_with_exit_65, .timeout = 240)
{
    char *dir = tu_tmpdir();
    put(dir, "plan.json", PLAN);
    put(dir, "tokens.txt", "1 2 3 4 5 6 7 8\n");
    char *draft = random_model(dir, "draft", 1), *target = random_model(dir, "target", 2);
    poison_tensor(target, "model.norm.weight", NAN);
    char *plan = tu_path(dir, "plan.json"), *tokens = tu_path(dir, "tokens.txt");
    char *out = tu_path(dir, "out.txt");
    const char *modes[] = {"greedy", "stochastic", "specinfer", "topk"};
    for (int i = 0; i < 4; i++) {
        const char *argv[] = {bin("SQ_RUN_BIN"), "--draft", draft, "--target", target, "--plan",
                              plan, "--prompt", tokens, "-n", "8", "--mode", modes[i], "-q",
                              "-o", out, i == 0 ? "--validate" : NULL, NULL};
        char *e = NULL;
        int rc = run_limited(120, argv, NULL, &e);
        cr_expect_eq(rc, 65, "--mode %s: exit %d: %s", modes[i], rc, e);
        cr_expect(e && strstr(e, "NaN") && strstr(e, "not finite"), "--mode %s: %s", modes[i], e);
        cr_expect(!tu_exists(out), "--mode %s wrote an output", modes[i]);
        free(e);
    }
    tu_rmtree(dir);
}

/* The draft's logits follow the same rule: a NaN draft was accepted silently, and looked like a
 * poor acceptance rate (docs/robustness.md). Decoding (a plan, an --engine tree, a batch) and
 * dump stop with exit 65 and write nothing. */
Test(hostile, w5_nan_weights_in_the_draft_stop_runs_and_dumps_with_exit_65, .timeout = 240)
{
    char *dir = tu_tmpdir();
    put(dir, "plan.json", PLAN);
    put(dir, "tokens.txt", "1 2 3 4 5 6 7 8\n");
    char *draft = random_model(dir, "draft", 1), *target = random_model(dir, "target", 2);
    poison_tensor(draft, "model.norm.weight", NAN);
    char *plan = tu_path(dir, "plan.json"), *tokens = tu_path(dir, "tokens.txt");
    char *out = tu_path(dir, "out.txt"), *corpus = tu_path(dir, "c.h5");
    const char *runs[][8] = {
        {"--plan", plan, "--mode", "greedy", NULL},
        {"--plan", plan, "--mode", "stochastic", NULL},
        {"--plan", plan, "--mode", "greedy", "--batch", "2", NULL},
        {"--engine", "sglang", "--envelope", "2,2,4", "--mode", "greedy", NULL},
    };
    for (int i = 0; i < 4; i++) {
        const char *argv[24] = {bin("SQ_RUN_BIN"), "--draft", draft, "--target", target,
                                "--prompt", tokens, "-n", "8", "-q", "-o", out};
        int n = 12;
        for (int k = 0; runs[i][k]; k++)
            argv[n++] = runs[i][k];
        argv[n] = NULL;
        char *e = NULL;
        int rc = run_limited(120, argv, NULL, &e);
        cr_expect_eq(rc, 65, "run %d: exit %d: %s", i, rc, e);
        cr_expect(e && strstr(e, "the draft's logit of token") && strstr(e, "is NaN") &&
                  strstr(e, "not finite"), "run %d: %s", i, e);
        cr_expect(!tu_exists(out), "run %d wrote an output", i);
        free(e);
    }
    const char *dargv[] = {bin("SQ_RUN_BIN"), "dump", "--draft", draft, "--target", target,
                           "--tokens", tokens, "-o", corpus, "-q", NULL};
    char *e = NULL;
    int rc = run_limited(120, dargv, NULL, &e);
    cr_expect_eq(rc, 65, "dump: exit %d: %s", rc, e);
    cr_expect(e && strstr(e, "the draft's logit of token 0 at position 0 is NaN"), "dump: %s", e);
    cr_expect(!tu_exists(corpus), "dump wrote a corpus");
    free(e);
    tu_rmtree(dir);
}

/* ---- W6: prompt files with several sequences -------------------------------------------- */

Test(hostile, w6_prompts_that_a_run_joins_or_leaves_out_are_reported, .timeout = 240)
{
    char *dir = tu_tmpdir();
    put(dir, "plan.json", PLAN);
    put(dir, "three.txt", "1 2 3 4\n\n5 6 7 8\n\n9 10 11 12\n");
    char *model = random_model(dir, "model", 1);
    char *plan = tu_path(dir, "plan.json"), *tokens = tu_path(dir, "three.txt");
    char *out = tu_path(dir, "out.txt");
    const char *a1[] = {bin("SQ_RUN_BIN"), "--draft", model, "--target", model, "--plan", plan,
                        "--prompt", tokens, "-n", "4", "--mode", "greedy", "--no-baseline", "-q",
                        "-o", out, NULL};
    char *e = NULL;
    int rc = run_limited(120, a1, NULL, &e);
    cr_assert_eq(rc, 0, "exit %d: %s", rc, e);
    cr_assert(e && strstr(e, "warning") && strstr(e, "3 sequences") &&
              strstr(e, "one prompt") && strstr(e, "--batch 3"), "%s", e);
    free(e);
    const char *a2[] = {bin("SQ_RUN_BIN"), "--draft", model, "--target", model, "--plan", plan,
                        "--prompt", tokens, "-n", "4", "--mode", "greedy", "--batch", "2",
                        "--no-baseline", "-q", "-o", out, NULL};
    rc = run_limited(120, a2, NULL, &e);
    cr_assert_eq(rc, 0, "exit %d: %s", rc, e);
    cr_assert(e && strstr(e, "warning") && strstr(e, "leaves out the other 1"), "%s", e);
    free(e);
    /* every sequence used: no warning */
    const char *a3[] = {bin("SQ_RUN_BIN"), "--draft", model, "--target", model, "--plan", plan,
                        "--prompt", tokens, "-n", "4", "--mode", "greedy", "--batch", "3",
                        "--no-baseline", "-q", "-o", out, NULL};
    rc = run_limited(120, a3, NULL, &e);
    cr_assert_eq(rc, 0, "exit %d: %s", rc, e);
    cr_assert(!e || !strstr(e, "warning"), "%s", e);
    free(e);
    tu_rmtree(dir);
    free(model);
    free(plan);
    free(tokens);
    free(out);
    free(dir);
}

/* ---- W11: a NUL byte in a token file ----------------------------------------------------- */

Test(hostile, w11_nul_byte_in_a_token_file_is_an_error_naming_line_and_byte, .timeout = 60)
{
    char *dir = tu_tmpdir();
    char *model = random_model(dir, "model", 1);
    char *tokens = tu_path(dir, "nul.txt"), *out = tu_path(dir, "c.h5");
    FILE *fp = fopen(tokens, "wb");
    cr_assert_not_null(fp);
    fwrite("1 2 3\n12\0" "3 4 5\n", 1, 15, fp);
    cr_assert_eq(fclose(fp), 0);
    const char *argv[] = {bin("SQ_RUN_BIN"), "dump", "--draft", model, "--target", model,
                          "--tokens", tokens, "-q", "-o", out, NULL};
    char *e = NULL;
    int rc = run_limited(60, argv, NULL, &e);
    cr_assert_eq(rc, 65, "exit %d: %s", rc, e);
    cr_assert(e && strstr(e, "nul.txt: line 2: NUL byte at byte offset 8"), "%s", e);
    cr_assert(!tu_exists(out));
    free(e);
    tu_rmtree(dir);
}

/* ---- W12: --threads past any sense --------------------------------------------------------- */

Test(hostile, w12_threads_are_bounded_and_the_profile_records_those_used, .timeout = 120)
{
    char *dir = tu_tmpdir();
    char *model = random_model(dir, "model", 1), *out = tu_path(dir, "p.json");
    const char *argv[] = {bin("SQ_PROFILE_BIN"), "--model", model, "--tokens", "1", "--repeat",
                          "2", "--warmup", "0", "--no-refine", "--threads", "9999", "-q", "-o",
                          out, NULL};
    char *e = NULL;
    int rc = run_limited(60, argv, NULL, &e);
    cr_assert_eq(rc, 64, "exit %d: %s", rc, e);
    cr_assert(e && strstr(e, "--threads: 9999, must be between 0 and"), "%s", e);
    cr_assert(!tu_exists(out));
    free(e);
    const char *run[] = {bin("SQ_RUN_BIN"), "dump", "--draft", model, "--target", model,
                         "--tokens", "x", "--threads", "9999", "-o", out, NULL};
    rc = run_limited(60, run, NULL, &e);
    cr_assert_eq(rc, 64, "sequoia-run: exit %d: %s", rc, e);
    free(e);
    /* 0 (all cores) records the count it ran with */
    argv[11] = "0";
    rc = run_limited(60, argv, NULL, &e);
    if (rc != 0 && e && strstr(e, "--force")) {
        /* a noisy machine: a build that refuses unstable profiles takes --force */
        free(e);
        const char *forced[20];
        int n = 0;
        for (; argv[n]; n++)
            forced[n] = argv[n];
        forced[n++] = "--force";
        forced[n] = NULL;
        rc = run_limited(60, forced, NULL, &e);
    }
    cr_assert_eq(rc, 0, "exit %d: %s", rc, e);
    char *text = tu_read(out, NULL);
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    char want[64];
    snprintf(want, sizeof want, "\"threads\": %ld,", cores > 256 ? 256 : cores);
    cr_assert(text && strstr(text, want), "%s not in %s", want, text);
    free(text);
    free(e);
    tu_rmtree(dir);
}

/* ---- W9: two temperatures, one curve name ------------------------------------------------ */

Test(hostile, w9_settings_that_would_share_a_curve_name_are_refused)
{
    char *dir = tu_tmpdir();
    char *corpus = tu_path(dir, "c.h5"), *out = tu_path(dir, "acc.json");
    put(dir, "c.h5", "");
    const char *argv[] = {bin("SQ_ACCEPT_BIN"), corpus, "--mode", "stochastic", "-T",
                          "0.6,0.6000000001", "-q", "-o", out, NULL};
    char *e = NULL;
    int rc = run_limited(60, argv, NULL, &e);
    cr_assert_eq(rc, 64, "exit %d: %s", rc, e);
    cr_assert(e && strstr(e, "\"stochastic@T0.6\""), "%s", e);
    cr_assert(!tu_exists(out));
    free(e);
    tu_rmtree(dir);
}

/* ---- C2: a checkpoint truncated while the model runs --------------------------------------- */

static void copy_file(const char *from, const char *to)
{
    size_t len;
    char *b = tu_read(from, &len);
    cr_assert_not_null(b, "%s", from);
    FILE *fp = fopen(to, "wb");
    cr_assert_not_null(fp, "%s", to);
    cr_assert_eq(fwrite(b, 1, len, fp), len);
    cr_assert_eq(fclose(fp), 0);
    free(b);
}

static char *copy_model(const char *dir, const char *name, const char *shipped)
{
    char *d = tu_path(dir, name);
    cr_assert_eq(mkdir(d, 0755), 0);
    const char *files[] = {"config.json", "model.safetensors"};
    for (int i = 0; i < 2; i++) {
        char rel[256];
        snprintf(rel, sizeof rel, "data/models/%s/%s", shipped, files[i]);
        char *src = tu_source_path(rel), *dst = tu_path(d, files[i]);
        copy_file(src, dst);
        free(src);
        free(dst);
    }
    return d;
}

Test(hostile, c2_checkpoint_truncated_while_running_is_no_sigbus, .timeout = 240)
{
    char *dir = tu_tmpdir();
    put(dir, "p.txt", "1 2 3 4 5 6 7 8\n");
    put(dir, "plan.json", PLAN);
    char *draft = copy_model(dir, "draft", "draft"), *target = copy_model(dir, "target", "large");
    char *plan = tu_path(dir, "plan.json"), *prompt = tu_path(dir, "p.txt");
    char *out = tu_path(dir, "out.txt"), *ckpt = tu_path(target, "model.safetensors");
    char *errf = tu_path(dir, "stderr.txt");
    pid_t pid = fork();
    cr_assert(pid >= 0);
    if (pid == 0) {
        int fd = open(errf, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        dup2(fd, 2);
        execl(bin("SQ_RUN_BIN"), "sequoia-run", "--draft", draft, "--target", target, "--plan",
              plan, "--prompt", prompt, "-n", "1000", "--mode", "greedy", "--no-baseline",
              "--threads", "1", "-q", "-o", out, (char *)NULL);
        _exit(127);
    }
    usleep(1500 * 1000);   /* loaded and decoding */
    int st;
    if (waitpid(pid, &st, WNOHANG) == pid)
        cr_skip_test("the run ended in less than 1.5 s, before the checkpoint could be cut");
    cr_assert_eq(truncate(ckpt, 4096), 0, "%s", strerror(errno));
    cr_assert_eq(waitpid(pid, &st, 0), pid);
    char *e = tu_read(errf, NULL);
    cr_assert(!WIFSIGNALED(st), "killed by signal %d (SIGBUS is %d): %s", WTERMSIG(st), SIGBUS, e);
    int rc = WEXITSTATUS(st);
    /* the mapped weights are gone: exit 74 naming the checkpoint (or 0 if the run finished) */
    cr_assert(rc == 0 || (rc == 74 && strstr(e, "cut short")), "exit %d: %s", rc, e);
    if (rc == 0)
        cr_assert(tu_exists(out));
    free(e);
    tu_rmtree(dir);
}

/* ---- C1: an address-space limit ------------------------------------------------------------ */

/* argv run with RLIMIT_AS at kib KiB (as `ulimit -v`), stopped after secs: 124 then. */
static int run_with_as_limit(long kib, int secs, const char *const *argv, char **e)
{
    char cmd[8192];
    int n = snprintf(cmd, sizeof cmd, "ulimit -v %ld; exec /usr/bin/timeout %d", kib, secs);
    for (int i = 0; argv[i]; i++)
        n += snprintf(cmd + n, sizeof cmd - (size_t)n, " '%s'", argv[i]);
    char *const sh[] = {"/bin/sh", "-c", cmd, NULL};
    return tu_run(sh, NULL, e);
}

Test(hostile, c1_address_space_limit_is_exit_70_never_a_hang, .timeout = 600)
{
    char *dir = tu_tmpdir();
    put(dir, "p.txt", "1 2 3 4 5 6 7 8\n");
    put(dir, "plan.json", PLAN);
    char *model = random_model(dir, "model", 1), *out = tu_path(dir, "out.json");
    char *plan = tu_path(dir, "plan.json"), *prompt = tu_path(dir, "p.txt");
    const char *prof[] = {bin("SQ_PROFILE_BIN"), "--model", model, "--tokens", "1,17,40",
                          "--repeat", "2", "--warmup", "0", "--no-refine", "-q", "-o", out,
                          "--force", NULL};
    const char *run[] = {bin("SQ_RUN_BIN"), "--draft", model, "--target", model, "--plan", plan,
                         "--prompt", prompt, "-n", "16", "--mode", "greedy", "-q", "-o", out,
                         NULL};
    /* a build without --force takes the profile without it */
    char *e = NULL;
    const char *probe[] = {bin("SQ_PROFILE_BIN"), "--help", NULL};
    char *help = NULL;
    tu_run((char *const *)probe, &help, NULL);
    if (!help || !strstr(help, "--force"))
        prof[13] = NULL;
    free(help);
    /* from plenty of room down to too little for anything: somewhere in between OpenBLAS
     * finds no room for its buffers */
    const long limits[] = {1600000, 800000, 500000, 400000, 300000, 250000, 200000, 150000,
                           100000};
    for (size_t i = 0; i < sizeof limits / sizeof limits[0]; i++) {
        const char *const *argvs[2] = {prof, run};
        for (int t = 0; t < 2; t++) {
            int rc = run_with_as_limit(limits[i], 30, argvs[t], &e);
            cr_expect_neq(rc, 124, "%s under ulimit -v %ld: hung", argvs[t][0], limits[i]);
            /* too little room for the dynamic loader itself (127), or for AddressSanitizer's
             * shadow memory or its own allocator in a sanitizer build, is not the tool's doing */
            cr_expect(rc == 0 || rc == 70 ||
                      (rc == 127 && e && strstr(e, "error while loading shared libraries")) ||
                      (e && (strstr(e, "ReserveShadowMemoryRange") ||
                             strstr(e, "AddressSanitizer: internal allocator is out of memory"))),
                      "%s under ulimit -v %ld: exit %d: %s", argvs[t][0], limits[i], rc, e);
            if (rc == 70)
                cr_expect(e && strstr(e, "out of memory"), "%s", e);
            free(e);
            e = NULL;
        }
    }
    tu_rmtree(dir);
}

/* ---- W7/W8: --compare's pairing and its trust in stored statistics ---------------------------- */

/* A curve of two ranks from two units of 50 positions; `p` as written in the file, the stats
 * say p = (0.6, 0.2). */
static void stats_curve(const char *dir, const char *name, const char *cname, const char *mode,
                        double T, const char *p)
{
    char text[2048];
    snprintf(text, sizeof text,
             "{\"format\":\"sequoia-acceptance\",\"version\":1,\"curves\":[{\"name\":\"%s\","
             "\"mode\":\"%s\",\"temperature\":%g,\"top_p\":1,\"p\":%s,\"positions\":100,"
             "\"sequences\":2,\"stats\":{\"estimator\":\"exact\",\"samples\":1,\"seed\":0,"
             "\"unit\":\"sequence\",\"units\":2,\"sum_n\":100,\"sum_n2\":5000,"
             "\"sum_y\":[60,20],\"sum_ny\":[3000,1000],"
             "\"sum_yy\":[[1850,590],[590,202]]}}]}", cname, mode, T, p);
    put(dir, name, text);
}

Test(hostile, w7_compare_refuses_one_name_for_two_settings)
{
    char *dir = tu_tmpdir();
    stats_curve(dir, "base.json", "greedy@T0", "greedy", 0, "[0.6,0.2]");
    stats_curve(dir, "new.json", "greedy@T0", "stochastic", 1, "[0.6,0.2]");
    char *b = tu_path(dir, "base.json"), *n = tu_path(dir, "new.json");
    const char *argv[] = {bin("SQ_ACCEPT_BIN"), "--compare", b, n, "-q", NULL};
    char *e = NULL;
    int rc = run_limited(60, argv, NULL, &e);
    cr_assert_eq(rc, 65, "exit %d: %s", rc, e);
    cr_assert(e && strstr(e, "one name for two settings"), "%s", e);
    free(e);
    /* the same settings compare */
    stats_curve(dir, "new.json", "greedy@T0", "greedy", 0, "[0.6,0.2]");
    rc = run_limited(60, argv, NULL, &e);
    cr_assert_eq(rc, 0, "exit %d: %s", rc, e);
    free(e);
    tu_rmtree(dir);
}

Test(hostile, w8_compare_refuses_stats_that_do_not_reproduce_p)
{
    char *dir = tu_tmpdir();
    stats_curve(dir, "base.json", "greedy@T0", "greedy", 0, "[0.6,0.2]");
    /* p edited down by half, the statistics left as they were */
    stats_curve(dir, "new.json", "greedy@T0", "greedy", 0, "[0.3,0.1]");
    char *b = tu_path(dir, "base.json"), *n = tu_path(dir, "new.json");
    const char *argv[] = {bin("SQ_ACCEPT_BIN"), "--compare", b, n, "-q", NULL};
    char *e = NULL;
    int rc = run_limited(60, argv, NULL, &e);
    cr_assert_eq(rc, 65, "exit %d: %s", rc, e);
    cr_assert(e && strstr(e, "new.json: curves[0].stats: do not reproduce p[0]"), "%s", e);
    free(e);
    tu_rmtree(dir);
}

/* ---- W4: the ladder's summary when batch 1 is plain decoding -------------------------------- */

Test(hostile, w4_ladder_summary_names_the_batch_sizes_that_decode_plainly, .timeout = 60)
{
    char *dir = tu_tmpdir();
    char *t = tu_path(dir, "t.json"), *o = tu_path(dir, "ladder.json");
    /* at batch 1 every extra token costs 5 ms: no tree pays; from batch 2 on, trees are free */
    FILE *fp = fopen(t, "w");
    cr_assert_not_null(fp);
    fprintf(fp, "{\"format\":\"sequoia-profile\",\"version\":2,\"points\":[");
    int b[] = {1, 2, 4};
    for (int i = 0; i < 3; i++)
        for (int n = 1; n <= 16; n++)
            fprintf(fp, "%s{\"batch\":%d,\"tokens\":%d,\"median_ms\":%g}", i || n > 1 ? "," : "",
                    b[i], n, b[i] == 1 ? 1.0 + 5.0 * (n - 1) : 1.0 + 0.01 * n);
    fprintf(fp, "]}\n");
    cr_assert_eq(fclose(fp), 0);
    const char *argv[] = {bin("SQ_PLAN_BIN"), "--ladder", "--target-profile", t, "--draft-ms",
                          "0.1", "-n", "16", "-d", "4", "-o", o, NULL};
    char *out = NULL, *e = NULL;
    int rc = run_limited(60, argv, &out, &e);
    cr_assert_eq(rc, 0, "exit %d: %s", rc, e);
    cr_assert(out && strstr(out, "(plain decoding)"), "%s", out);
    cr_assert(!strstr(out, "pays at every profiled batch size"), "%s", out);
    cr_assert(strstr(out, "plain decoding at batch size 1 (no tree pays there); speculation "
                          "pays at 2, 4"), "%s", out);
    free(out);
    free(e);
    tu_rmtree(dir);
}

/* ---- W10: --engine sglang with a profile compares like with like ----------------------------- */

Test(hostile, w10_envelope_engine_on_hardware_is_compared_in_tokens_per_second, .timeout = 60)
{
    char *dir = tu_tmpdir();
    put(dir, "tp.json", "{\"format\":\"sequoia-profile\",\"version\":1,\"points\":["
                        "{\"tokens\":1,\"median_ms\":10.5},{\"tokens\":2,\"median_ms\":11},"
                        "{\"tokens\":4,\"median_ms\":12},{\"tokens\":8,\"median_ms\":14},"
                        "{\"tokens\":16,\"median_ms\":18},{\"tokens\":32,\"median_ms\":26},"
                        "{\"tokens\":64,\"median_ms\":42},{\"tokens\":128,\"median_ms\":74}]}");
    char *t = tu_path(dir, "tp.json"), *o = tu_path(dir, "e.json");
    const char *argv[] = {bin("SQ_PLAN_BIN"), "--engine", "sglang", "--target-profile", t,
                          "--draft-ms", "1", "-n", "64", "-d", "8", "-o", o, NULL};
    char *out = NULL, *e = NULL;
    int rc = run_limited(60, argv, &out, &e);
    cr_assert_eq(rc, 0, "exit %d: %s", rc, e);
    cr_assert(out && strstr(out, "tokens/s, ") &&
              strstr(out, "against the fastest unconstrained tree on this hardware"), "%s", out);
    cr_assert(!strstr(out, "against the unconstrained optimum"), "%s", out);
    free(out);
    free(e);
    tu_rmtree(dir);
}

/* ---- W13: a plan's hardware object, a batch profile's unstable points ------------------------ */

Test(hostile, w13_plan_hardware_object_is_checked, .timeout = 60)
{
    char *dir = tu_tmpdir();
    /* sequoia_run's figures are numbers too: "fast" and [] were kept (exit 0) */
    const char *bad[] = {"{\"predicted_speedup\":-3}", "{\"time_per_step_ms\":\"fast\"}",
                         "{\"search_budget\":1.5}", "{\"target_device\":7}",
                         "{\"sequoia_run\":{\"tokens_per_second\":\"fast\"}}",
                         "{\"sequoia_run\":{\"time_per_step_ms\":[]}}"};
    const char *field[] = {"hardware.predicted_speedup", "hardware.time_per_step_ms",
                           "hardware.search_budget", "hardware.target_device",
                           "hardware.sequoia_run.tokens_per_second",
                           "hardware.sequoia_run.time_per_step_ms"};
    char *plan = tu_path(dir, "plan.json"), *out = tu_path(dir, "out.dot");
    for (int i = 0; i < 6; i++) {
        char text[2048];
        snprintf(text, sizeof text, "%.*s,\"hardware\":%s}", (int)strlen(PLAN) - 1, PLAN, bad[i]);
        tu_write(plan, text);
        const char *argv[] = {bin("SQ_PLAN_BIN"), "--plan", plan, "--export", "dot", "-o", out,
                              NULL};
        char *e = NULL;
        int rc = run_limited(60, argv, NULL, &e);
        cr_expect_eq(rc, 65, "%s: exit %d: %s", bad[i], rc, e);
        cr_expect(e && strstr(e, field[i]), "%s: %s", bad[i], e);
        free(e);
    }
    /* a good one is kept */
    char text[2048];
    snprintf(text, sizeof text, "%.*s,\"hardware\":{\"predicted_speedup\":1.5,\"draft_ms\":null,"
             "\"target_device\":\"cpu\"}}", (int)strlen(PLAN) - 1, PLAN);
    tu_write(plan, text);
    const char *argv[] = {bin("SQ_PLAN_BIN"), "--plan", plan, "--export", "dot", "-o", out, NULL};
    char *e = NULL;
    int rc = run_limited(60, argv, NULL, &e);
    cr_assert_eq(rc, 0, "exit %d: %s", rc, e);
    free(e);
    tu_rmtree(dir);
}

Test(hostile, w13_batch_profile_keeps_the_batch_of_unstable_points, .timeout = 120)
{
    char *dir = tu_tmpdir();
    char *model = random_model(dir, "model", 1), *out = tu_path(dir, "p.json");
    char *help = NULL;
    const char *probe[] = {bin("SQ_PROFILE_BIN"), "--help", NULL};
    tu_run((char *const *)probe, &help, NULL);
    int force = help && strstr(help, "--force");
    free(help);
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "SQ_TEST_UNSTABLE_THRESHOLD=-1 exec '%s' --model '%s' --batch 1,2 "
             "--tokens 1,2 --repeat 2 --warmup 0 --no-refine -q -o '%s' %s", bin("SQ_PROFILE_BIN"),
             model, out, force ? "--force" : "");
    const char *sh[] = {"/bin/sh", "-c", cmd, NULL};
    char *e = NULL;
    int rc = run_limited(60, sh, NULL, &e);
    cr_assert_eq(rc, 0, "exit %d: %s", rc, e);
    cr_assert(e && strstr(e, "batch x tokens") && strstr(e, "2x2"), "%s", e);
    char *text = tu_read(out, NULL);
    cr_assert(text && strstr(text, "\"unstable_points\""), "%s", text);
    char *at = strstr(text, "\"unstable_points\"");
    cr_assert(strstr(at, "\"batch\": 2") && strstr(at, "\"tokens\": 2"), "%s", at);
    free(text);
    free(e);
    tu_rmtree(dir);
}
