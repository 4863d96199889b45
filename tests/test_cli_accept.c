/* Suite 'cli-accept': the sequoia-accept tool (issue 3): outputs, merge, compare, determinism
 * and every bad input (clear message naming file and dataset, documented exit code, and no
 * output file). Corpora are written with the corpus writer, and damaged with the HDF5 API. */
#include <criterion/criterion.h>
#include <gsl/gsl_errno.h>
#include <hdf5.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "libsequoia/format/corpus.h"
#include "libsequoia/format/curve.h"
#include "libsequoia/base/json.h"
#include "tests/testutil.h"

static const char *bin(void)
{
    const char *b = getenv("SQ_ACCEPT_BIN");
    cr_assert(b, "SQ_ACCEPT_BIN is not set");
    return b;
}

/* Runs sequoia-accept with up to 30 arguments. */
static int run(char **out, char **err, const char *const *args)
{
    char *argv[32];
    int n = 0;
    argv[n++] = (char *)bin();
    for (; args[n - 1] && n < 31; n++)
        argv[n] = (char *)args[n - 1];
    argv[n] = NULL;
    return tu_run(argv, out, err);
}

/* A corpus whose rows cycle through `kinds` patterns: row kind j has target logits
 * log(P_j) and draft logits log(Q_j) for small hand-made P, Q over V = 6. */
#define V6 6
static const double Pk[3][V6] = {
    {0.50, 0.20, 0.10, 0.10, 0.05, 0.05},
    {0.05, 0.60, 0.15, 0.10, 0.05, 0.05},
    {0.10, 0.10, 0.10, 0.40, 0.20, 0.10},
};
static const double Qk[3][V6] = {
    {0.40, 0.30, 0.10, 0.10, 0.05, 0.05},
    {0.30, 0.35, 0.15, 0.10, 0.05, 0.05},
    {0.05, 0.10, 0.15, 0.20, 0.40, 0.10},
};

typedef struct corpus_spec {
    int seqs, len;      /* sequences and positions per sequence            */
    int kind0;          /* first row kind                                  */
    int worse_draft;    /* 1: the draft is flattened (a worse draft model)  */
    int topk;           /* 0 dense, else sparse top-K                      */
    int no_offsets;     /* 1: a single sequence without /seq_offsets       */
    const char *draft;
} corpus_spec;

static void write_corpus(const char *path, const corpus_spec *cs)
{
    sq_error err = {0};
    sq_corpus_writer_params p = sq_corpus_writer_default_params();
    p.vocab = V6;
    p.topk = cs->topk;
    p.draft = cs->draft ? cs->draft : "tiny-draft";
    p.target = "tiny-target";
    sq_corpus_writer *w;
    cr_assert_eq(sq_corpus_writer_open(path, &p, &w, &err), SQ_OK, "%s", err.msg);
    int row = 0;
    for (int s = 0; s < cs->seqs; s++) {
        for (int t = 0; t < cs->len; t++, row++) {
            int k = (cs->kind0 + row) % 3;
            float tl[V6], dl[V6];
            for (int i = 0; i < V6; i++) {
                tl[i] = (float)log(Pk[k][i]);
                dl[i] = (float)(cs->worse_draft ? 0.3 * log(Qk[k][i]) : log(Qk[k][i]));
            }
            cr_assert_eq(sq_corpus_writer_append(w, tl, dl, NULL, 1, &err), SQ_OK, "%s", err.msg);
        }
        if (!cs->no_offsets)
            cr_assert_eq(sq_corpus_writer_end_sequence(w, &err), SQ_OK, "%s", err.msg);
    }
    cr_assert_eq(sq_corpus_writer_commit(w, &err), SQ_OK, "%s", err.msg);
}

static char *dir;

static void setup(void)
{
    gsl_set_error_handler_off();
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    dir = tu_tmpdir();
}

static void teardown(void)
{
    tu_rmtree(dir);
    free(dir);
}

TestSuite(cli_accept, .init = setup, .fini = teardown);

static char *P(const char *name)
{
    return tu_path(dir, name);
}

static sq_curve_set *load(const char *path)
{
    sq_curve_set *set;
    sq_error err = {0};
    cr_assert_eq(sq_curve_set_load(path, &set, &err), SQ_OK, "%s", err.msg);
    return set;
}

Test(cli_accept, help_lists_every_mode_with_examples)
{
    char *out, *err;
    cr_assert_eq(run(&out, &err, (const char *[]){"--help", NULL}), 0);
    for (const char *w = "stochastic specinfer greedy topk --merge --compare Examples Exit";
         *w;) {
        char word[32];
        int n = 0;
        while (w[n] && w[n] != ' ')
            n++;
        snprintf(word, sizeof word, "%.*s", n, w);
        cr_assert(strstr(out, word), "--help lacks %s", word);
        w += n + (w[n] == ' ');
    }
    free(out);
    free(err);
}

/* Greedy and topk against hand computation over the three row kinds:
 *  kind 0: argmax P = 0; draft order 0, 1, 2|3 (ties by index) -> greedy rank 1
 *  kind 1: argmax P = 1; draft order 1, 0, 2 -> rank 1
 *  kind 2: argmax P = 3; draft order 4, 3, 2 -> rank 2 */
Test(cli_accept, greedy_and_topk_curves_match_hand_computation)
{
    char *c = P("c.h5"), *o = P("o.json");
    corpus_spec cs = {.seqs = 4, .len = 6};
    write_corpus(c, &cs);
    char *out, *err;
    int rc = run(&out, &err, (const char *[]){c, "--mode", "greedy,topk", "--temperature", "1",
                                              "--width", "3", "-o", o, "--quiet", NULL});
    cr_assert_eq(rc, 0, "%s", err);
    sq_curve_set *set = load(o);
    cr_assert_eq(set->n, 2);
    const sq_curve *g = &set->curves[0], *t = &set->curves[1];
    cr_assert_str_eq(g->name, "greedy@T0");
    cr_assert_str_eq(t->name, "topk@T1");
    cr_assert(fabs(g->p[0] - 2.0 / 3) < 1e-12 && fabs(g->p[1] - 1.0 / 3) < 1e-12 && g->p[2] == 0);
    double e[3] = {0, 0, 0};
    const int order[3][3] = {{0, 1, 2}, {1, 0, 2}, {4, 3, 2}};
    for (int k = 0; k < 3; k++)
        for (int r = 0; r < 3; r++)
            e[r] += Pk[k][order[k][r]] / 3;
    for (int r = 0; r < 3; r++)
        cr_assert(fabs(t->p[r] - e[r]) < 1e-6, "topk p[%d] %.8f vs %.8f", r, t->p[r], e[r]);
    cr_assert_eq(t->positions, 24);
    cr_assert_eq(t->sequences, 4);
    cr_assert_str_eq(sq_curve_rank_semantics(t), "draft-topk");
    /* source: name, SHA-256 and models */
    const cJSON *src = set->source;
    cr_assert(src);
    cr_assert_str_eq(cJSON_GetArrayItem(sq_json_field(src, "corpus"), 0)->valuestring, "c.h5");
    cr_assert_eq(strlen(cJSON_GetArrayItem(sq_json_field(src, "sha256"), 0)->valuestring), 64);
    cr_assert_str_eq(sq_json_field(src, "draft")->valuestring, "tiny-draft");
    cr_assert_str_eq(sq_json_field(src, "target")->valuestring, "tiny-target");
    sq_curve_set_free(set);
    free(out);
    free(err);
    free(c);
    free(o);
}

Test(cli_accept, sampled_curves_are_deterministic_for_a_seed_whatever_the_threads)
{
    char *c = P("c.h5"), *o1 = P("o1.json"), *o2 = P("o2.json"), *o3 = P("o3.json");
    corpus_spec cs = {.seqs = 10, .len = 7};
    write_corpus(c, &cs);
    cr_assert_eq(run(NULL, NULL, (const char *[]){c, "-m", "stochastic,specinfer", "-T", "0.7,1",
                                                  "-w", "4", "-k", "3", "-s", "11", "-j", "1",
                                                  "-q", "-o", o1, NULL}), 0);
    cr_assert_eq(run(NULL, NULL, (const char *[]){c, "-m", "stochastic,specinfer", "-T", "0.7,1",
                                                  "-w", "4", "-k", "3", "-s", "11", "-j", "2",
                                                  "-q", "-o", o2, NULL}), 0);
    cr_assert_eq(run(NULL, NULL, (const char *[]){c, "-m", "stochastic,specinfer", "-T", "0.7,1",
                                                  "-w", "4", "-k", "3", "-s", "12", "-q", "-o", o3,
                                                  NULL}), 0);
    char *a = tu_read(o1, NULL), *b = tu_read(o2, NULL), *d = tu_read(o3, NULL);
    cr_assert_str_eq(a, b, "--threads 1 and 2 differ");
    cr_assert_str_neq(a, d, "--seed has no effect");
    sq_curve_set *set = load(o1);
    cr_assert_eq(set->n, 4);
    for (int i = 0; i < set->n; i++) {
        double s = 0;
        for (int k = 0; k < set->curves[i].width; k++)
            s += set->curves[i].p[k];
        cr_assert(s <= 1 + 1e-12);
        cr_assert(set->curves[i].stderr_p);
    }
    sq_curve_set_free(set);
    free(a);
    free(b);
    free(d);
    free(c);
    free(o1);
    free(o2);
    free(o3);
}

Test(cli_accept, merge_equals_one_run_over_the_union)
{
    char *a = P("a.h5"), *b = P("b.h5"), *ja = P("a.json"), *jb = P("b.json"), *jab = P("ab.json"),
         *jm = P("m.json");
    corpus_spec ca = {.seqs = 5, .len = 4}, cb = {.seqs = 3, .len = 9, .kind0 = 1};
    write_corpus(a, &ca);
    write_corpus(b, &cb);
    const char *common[] = {"-m", "stochastic,greedy,topk,specinfer", "-T", "0.8", "-w", "3",
                            "-k", "2", "-s", "5", "-q"};
    const char *args[20];
    int n;
#define ARGS(first, second, outp)                                                              \
    do {                                                                                       \
        n = 0;                                                                                 \
        args[n++] = first;                                                                     \
        if (second)                                                                            \
            args[n++] = second;                                                                \
        for (size_t i = 0; i < sizeof common / sizeof *common; i++)                            \
            args[n++] = common[i];                                                             \
        args[n++] = "-o";                                                                      \
        args[n++] = outp;                                                                      \
        args[n] = NULL;                                                                        \
    } while (0)
    ARGS(a, NULL, ja);
    cr_assert_eq(run(NULL, NULL, args), 0);
    ARGS(b, NULL, jb);
    cr_assert_eq(run(NULL, NULL, args), 0);
    ARGS(a, b, jab);
    cr_assert_eq(run(NULL, NULL, args), 0);
    char *err;
    cr_assert_eq(run(NULL, &err, (const char *[]){"--merge", ja, jb, "-o", jm, NULL}), 0, "%s", err);
    free(err);
    char *x = tu_read(jab, NULL), *y = tu_read(jm, NULL);
    cr_assert_str_eq(x, y, "merge differs from the single run over both shards");
    sq_curve_set *set = load(jm);
    cr_assert_eq(set->curves[0].positions, 20 + 27);
    cr_assert_eq(set->curves[0].sequences, 8);
    sq_curve_set_free(set);
    /* merging a shard with itself is refused: the corpora are not disjoint */
    char *jbad = P("bad.json");
    cr_assert_eq(run(NULL, &err, (const char *[]){"--merge", ja, ja, "-o", jbad, NULL}), 65);
    cr_assert(strstr(err, "not disjoint"), "%s", err);
    cr_assert(!tu_exists(jbad));
    free(err);
    free(x);
    free(y);
    free(a);
    free(b);
    free(ja);
    free(jb);
    free(jab);
    free(jm);
    free(jbad);
}

Test(cli_accept, compare_flags_a_significant_drop_only)
{
    char *good = P("good.h5"), *bad = P("bad.h5"), *good2 = P("good2.h5");
    corpus_spec g = {.seqs = 30, .len = 6}, b = {.seqs = 30, .len = 6, .worse_draft = 1},
                g2 = {.seqs = 30, .len = 6, .kind0 = 1};
    write_corpus(good, &g);
    write_corpus(bad, &b);
    write_corpus(good2, &g2);
    char *jg = P("g.json"), *jb = P("b.json"), *jg2 = P("g2.json");
    const char *const opts[] = {"-m", "greedy", "-w", "4", "-q", "-o"};
    (void)opts;
    cr_assert_eq(run(NULL, NULL, (const char *[]){good, "-m", "stochastic", "-T", "0.5", "-w", "4",
                                                  "-q", "-o", jg, NULL}), 0);
    cr_assert_eq(run(NULL, NULL, (const char *[]){bad, "-m", "stochastic", "-T", "0.5", "-w", "4",
                                                  "-q", "-o", jb, NULL}), 0);
    cr_assert_eq(run(NULL, NULL, (const char *[]){good2, "-m", "stochastic", "-T", "0.5", "-w", "4",
                                                   "-q", "-o", jg2, NULL}), 0);
    char *out, *err;
    /* same population, another sample: no significant drop */
    int rc = run(&out, &err, (const char *[]){"--compare", jg, jg2, "--budget", "16", "--depth",
                                              "4", NULL});
    cr_assert_eq(rc, 0, "%s%s", out, err);
    cr_assert(strstr(out, "no significant drop"), "%s", out);
    cr_assert(strstr(out, "expected tokens/step"), "%s", out);
    free(out);
    free(err);
    /* a worse draft: exit 1 */
    rc = run(&out, &err, (const char *[]){"--compare", jg, jb, "--budget", "16", "--depth", "4",
                                          "--sigma", "3", NULL});
    cr_assert_eq(rc, 1, "%s%s", out, err);
    cr_assert(strstr(out, "SIGNIFICANT DROP"), "%s", out);
    cr_assert(strstr(out, "rank"), "%s", out);
    free(out);
    free(err);
    /* the other way round is an improvement */
    rc = run(&out, &err, (const char *[]){"--compare", jb, jg, NULL});
    cr_assert_eq(rc, 0, "%s%s", out, err);
    free(out);
    free(err);
    /* an impossible sigma makes any drop insignificant */
    rc = run(&out, &err, (const char *[]){"--compare", jg, jb, "--budget", "16", "--depth", "4",
                                          "--sigma", "1e9", NULL});
    cr_assert_eq(rc, 0, "%s%s", out, err);
    free(out);
    free(err);
    free(good);
    free(bad);
    free(good2);
    free(jg);
    free(jb);
    free(jg2);
}

Test(cli_accept, sparse_corpus_says_tokens_outside_top_k_count_as_zero)
{
    char *c = P("s.h5"), *o = P("o.json");
    corpus_spec cs = {.seqs = 3, .len = 5, .topk = 3};
    write_corpus(c, &cs);
    char *err;
    cr_assert_eq(run(NULL, &err, (const char *[]){c, "-m", "stochastic", "-w", "4", "-q", "-o", o,
                                                  NULL}), 0, "%s", err);
    cr_assert(strstr(err, "outside the stored top-K count as probability 0"), "%s", err);
    sq_curve_set *set = load(o);
    cr_assert(cJSON_IsTrue(sq_json_field(set->source, "sparse")));
    /* the draft proposes at most its 3 stored tokens: rank 4 is never accepted */
    cr_assert_eq(set->curves[0].p[3], 0.0);
    sq_curve_set_free(set);
    free(err);
    free(c);
    free(o);
}

Test(cli_accept, single_sequence_corpus_uses_batch_means)
{
    char *c = P("one.h5"), *o = P("o.json");
    corpus_spec cs = {.seqs = 1, .len = 100, .no_offsets = 1};
    write_corpus(c, &cs);
    char *err;
    cr_assert_eq(run(NULL, &err, (const char *[]){c, "-m", "topk", "-w", "2", "-q", "-o", o,
                                                  NULL}), 0, "%s", err);
    cr_assert(strstr(err, "batch") && strstr(err, "one.h5 holds one sequence"), "%s", err);
    char *text = tu_read(o, NULL);
    cr_assert(strstr(text, "\"unit\": \"batch\""), "%s", text);
    cr_assert(strstr(text, "\"units\": 32"), "%s", text);
    free(text);
    free(err);
    free(c);
    free(o);
}

/* Issue 14: one sequence recorded in /seq_offsets is not "a corpus without /seq_offsets". */
Test(cli_accept, single_sequence_notice_is_true_with_seq_offsets)
{
    char *c = P("one-off.h5"), *o = P("o.json");
    corpus_spec cs = {.seqs = 1, .len = 100};
    write_corpus(c, &cs);
    char *err;
    cr_assert_eq(run(NULL, &err, (const char *[]){c, "-m", "topk", "-w", "2", "-q", "-o", o,
                                                  NULL}), 0, "%s", err);
    cr_assert(!strstr(err, "without /seq_offsets") && strstr(err, "one-off.h5 holds one sequence"),
              "%s", err);
    free(err);
    free(c);
    free(o);
}

/* ---- bad input: message, exit status, no output ------------------------------------------- */

/* Runs with a corpus and extra arguments writing out/x.json; checks the exit status, that stderr
 * holds every needle, and that no file appeared in out/. */
static void expect_failure(const char *corpus, int status, const char *const *extra,
                           const char *n1, const char *n2)
{
    char *outdir = P("out");
    mkdir(outdir, 0755);
    char *o = tu_path(outdir, "x.json");
    const char *args[32];
    int n = 0;
    if (corpus)
        args[n++] = corpus;
    for (int i = 0; extra && extra[i]; i++)
        args[n++] = extra[i];
    args[n++] = "-o";
    args[n++] = o;
    args[n] = NULL;
    char *out, *err;
    int rc = run(&out, &err, args);
    cr_assert_eq(rc, status, "exit %d, expected %d: %s", rc, status, err);
    if (n1)
        cr_assert(strstr(err, n1), "stderr lacks \"%s\": %s", n1, err);
    if (n2)
        cr_assert(strstr(err, n2), "stderr lacks \"%s\": %s", n2, err);
    cr_assert(strncmp(err, "sequoia-accept: ", 16) == 0, "%s", err);
    cr_assert_eq(tu_count_entries(outdir), 0, "an output file was left behind");
    free(out);
    free(err);
    free(o);
    free(outdir);
}

static char *good_corpus(void)
{
    char *c = P("good.h5");
    if (!tu_exists(c)) {
        corpus_spec cs = {.seqs = 3, .len = 4};
        write_corpus(c, &cs);
    }
    return c;
}

Test(cli_accept, bad_options_are_usage_errors)
{
    char *c = good_corpus();
    expect_failure(c, 64, (const char *[]){"-T", "-0.5", NULL}, "--temperature", ">= 0");
    expect_failure(c, 64, (const char *[]){"--top-p", "0", NULL}, "--top-p", "(0, 1]");
    expect_failure(c, 64, (const char *[]){"--top-p", "1.5", NULL}, "--top-p", "(0, 1]");
    expect_failure(c, 64, (const char *[]){"--width", "0", NULL}, "--width", NULL);
    expect_failure(c, 64, (const char *[]){"--samples", "0", NULL}, "--samples", NULL);
    expect_failure(c, 64, (const char *[]){"-m", "stochastic", "-T", "0", NULL}, "greedy",
                   "--temperature 0");
    expect_failure(c, 64, (const char *[]){"-m", "topk", "-T", "0.5,0", NULL}, "greedy", NULL);
    expect_failure(c, 64, (const char *[]){"-m", "beam", NULL}, "unknown mode", NULL);
    expect_failure(NULL, 64, NULL, "no corpus", NULL);
    expect_failure(c, 64, (const char *[]){"--budget", "8", NULL}, "--compare", NULL);
    free(c);
}

static hid_t open_rw(const char *path)
{
    hid_t f = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
    cr_assert(f >= 0);
    return f;
}

static void replace_dataset(const char *path, const char *name, hsize_t rows, hsize_t cols)
{
    hid_t f = open_rw(path);
    cr_assert(H5Ldelete(f, name, H5P_DEFAULT) >= 0);
    hsize_t dims[2] = {rows, cols};
    hid_t sp = H5Screate_simple(2, dims, NULL);
    hid_t d = H5Dcreate2(f, name, H5T_IEEE_F32LE, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    cr_assert(d >= 0);
    float *z = calloc(rows * cols, sizeof *z);
    H5Dwrite(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, z);
    free(z);
    H5Dclose(d);
    H5Sclose(sp);
    H5Fclose(f);
}

Test(cli_accept, missing_and_mismatched_datasets_are_named)
{
    char *c = P("m.h5");
    corpus_spec cs = {.seqs = 2, .len = 6};

    write_corpus(c, &cs);
    hid_t f = open_rw(c);
    cr_assert(H5Ldelete(f, "/draft/logits", H5P_DEFAULT) >= 0);
    H5Fclose(f);
    expect_failure(c, 65, NULL, "m.h5", "/draft/logits");

    write_corpus(c, &cs);
    replace_dataset(c, "/draft/logits", 13, V6);
    expect_failure(c, 65, NULL, "m.h5", "rows");

    write_corpus(c, &cs);
    replace_dataset(c, "/draft/logits", 12, V6 + 1);
    expect_failure(c, 65, NULL, "m.h5", "/draft/logits");

    write_corpus(c, &cs);
    f = open_rw(c);
    hid_t a = H5Aopen(f, "vocab_size", H5P_DEFAULT);
    long long v = V6 + 2;
    H5Awrite(a, H5T_NATIVE_LLONG, &v);
    H5Aclose(a);
    H5Fclose(f);
    expect_failure(c, 65, NULL, "m.h5", "vocab_size");
    free(c);
}

Test(cli_accept, nan_logits_report_the_first_bad_row)
{
    char *c = P("nan.h5");
    corpus_spec cs = {.seqs = 2, .len = 6};
    write_corpus(c, &cs);
    hid_t f = open_rw(c);
    hid_t d = H5Dopen2(f, "/target/logits", H5P_DEFAULT);
    hid_t fs = H5Dget_space(d);
    float bad[2] = {NAN, INFINITY};
    for (int i = 0; i < 2; i++) {
        hsize_t start[2] = {(hsize_t)(7 + 2 * i), 2}, count[2] = {1, 1};
        H5Sselect_hyperslab(fs, H5S_SELECT_SET, start, NULL, count, NULL);
        hid_t ms = H5Screate_simple(2, count, NULL);
        cr_assert(H5Dwrite(d, H5T_NATIVE_FLOAT, ms, fs, H5P_DEFAULT, &bad[i]) >= 0);
        H5Sclose(ms);
    }
    H5Sclose(fs);
    H5Dclose(d);
    H5Fclose(f);
    expect_failure(c, 65, NULL, "/target/logits", "row 7");
    free(c);
}

Test(cli_accept, empty_non_hdf5_truncated_and_missing_files)
{
    /* The writer refuses to produce an empty corpus, so build one with the HDF5 API. */
    char *e = P("empty.h5");
    hid_t f = H5Fcreate(e, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    cr_assert(f >= 0);
    hid_t scalar = H5Screate(H5S_SCALAR);
    const char *names[3][2] = {{"format", "sequoia-corpus"}, {"draft", "d"}, {"target", "t"}};
    for (int i = 0; i < 3; i++) {
        hid_t st = H5Tcopy(H5T_C_S1);
        H5Tset_size(st, strlen(names[i][1]));
        hid_t a = H5Acreate2(f, names[i][0], st, scalar, H5P_DEFAULT, H5P_DEFAULT);
        H5Awrite(a, st, names[i][1]);
        H5Aclose(a);
        H5Tclose(st);
    }
    const long long ints[2] = {1, V6};
    const char *inames[2] = {"version", "vocab_size"};
    for (int i = 0; i < 2; i++) {
        hid_t a = H5Acreate2(f, inames[i], H5T_STD_I64LE, scalar, H5P_DEFAULT, H5P_DEFAULT);
        H5Awrite(a, H5T_NATIVE_LLONG, &ints[i]);
        H5Aclose(a);
    }
    H5Sclose(scalar);
    hsize_t dims[2] = {0, V6};
    hid_t sp = H5Screate_simple(2, dims, NULL);
    for (int m = 0; m < 2; m++) {
        hid_t g = H5Gcreate2(f, m ? "/draft" : "/target", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
        hid_t d = H5Dcreate2(g, "logits", H5T_IEEE_F32LE, sp, H5P_DEFAULT, H5P_DEFAULT,
                             H5P_DEFAULT);
        cr_assert(d >= 0);
        H5Dclose(d);
        H5Gclose(g);
    }
    H5Sclose(sp);
    H5Fclose(f);
    expect_failure(e, 65, NULL, "empty.h5", "empty");

    char *t = P("text.h5");
    tu_write(t, "this is not an HDF5 file\n");
    expect_failure(t, 65, NULL, "text.h5", "HDF5");

    char *g = good_corpus();
    size_t len;
    char *bytes = tu_read(g, &len);
    char *tr = P("trunc.h5");
    FILE *fp = fopen(tr, "wb");
    fwrite(bytes, 1, len / 2, fp);
    fclose(fp);
    expect_failure(tr, 65, NULL, "trunc.h5", NULL);

    char *missing = P("nope.h5");
    expect_failure(missing, 66, NULL, "nope.h5", NULL);

    /* the output directory does not exist */
    char *args_o = P("no/such/dir/x.json");
    char *out, *errs;
    int rc = run(&out, &errs, (const char *[]){g, "-q", "-o", args_o, NULL});
    cr_assert_eq(rc, 73, "%s", errs);
    free(out);
    free(errs);
    free(args_o);
    free(bytes);
    free(e);
    free(t);
    free(g);
    free(tr);
    free(missing);
}

Test(cli_accept, merge_and_compare_reject_bad_curve_files)
{
    char *plain = P("plain.json");
    tu_write(plain, "{\"format\": \"sequoia-acceptance\", \"version\": 1, \"curves\": [{\"name\": "
                    "\"x\", \"p\": [0.5, 0.2]}], \"source\": null}\n");
    char *g = good_corpus(), *jg = P("g.json"), *jm = P("m.json");
    cr_assert_eq(run(NULL, NULL, (const char *[]){g, "-q", "-w", "2", "-o", jg, NULL}), 0);
    char *out, *err;
    int rc = run(&out, &err, (const char *[]){"--merge", jg, plain, "-o", jm, NULL});
    cr_assert_eq(rc, 65, "%s", err);
    cr_assert(strstr(err, "plain.json"), "%s", err);
    cr_assert(!tu_exists(jm));
    free(out);
    free(err);
    char *v2 = P("v2.json");
    tu_write(v2, "{\"format\": \"sequoia-acceptance\", \"version\": 2, \"curves\": []}\n");
    rc = run(&out, &err, (const char *[]){"--compare", jg, v2, NULL});
    cr_assert_eq(rc, 65, "%s", err);
    cr_assert(strstr(err, "v2.json: version"), "%s", err);
    free(out);
    free(err);
    rc = run(&out, &err, (const char *[]){"--compare", jg, NULL});
    cr_assert_eq(rc, 64, "%s", err);
    free(out);
    free(err);
    free(plain);
    free(g);
    free(jg);
    free(jm);
    free(v2);
}

/* A corpus written by examples/dump_corpus.py (h5py, float16) is read back, and the greedy
 * curve equals numpy's computation from the same file (draft ranks: logit descending, lower
 * token id first among ties). Skipped without a python3 that has h5py and numpy. */
Test(cli_accept, h5py_written_corpus_reads_back_and_greedy_matches_numpy)
{
    const char *py = getenv("SQ_PYTHON");
    if (!py || !*py)
        cr_skip_test("SQ_PYTHON is not set (no python3 with h5py and numpy)");
    char *c = P("py.h5"), *o = P("py.json"), *script = tu_source_path("examples/dump_corpus.py");
    char *out, *err;
    int rc = tu_run((char *const[]){(char *)py, script, "--synthetic", c, "--rows", "300", "--vocab",
                                    "64", "--sequences", "5", "--seed", "3", "--quiet", NULL},
                    &out, &err);
    cr_assert_eq(rc, 0, "%s", err);
    free(out);
    free(err);
    rc = run(&out, &err, (const char *[]){c, "-m", "greedy,stochastic", "-T", "0.9", "-w", "4",
                                          "-q", "-o", o, NULL});
    cr_assert_eq(rc, 0, "%s", err);
    free(out);
    free(err);
    static const char check[] =
        "import sys, h5py, numpy as np\n"
        "f = h5py.File(sys.argv[1], 'r')\n"
        "t = f['/target/logits'][...].astype(np.float32)\n"
        "d = f['/draft/logits'][...].astype(np.float32)\n"
        "p = np.zeros(4)\n"
        "for i in range(t.shape[0]):\n"
        "    order = np.lexsort((np.arange(d.shape[1]), -d[i]))[:4]\n"
        "    hit = np.nonzero(order == np.argmax(t[i]))[0]\n"
        "    if hit.size: p[hit[0]] += 1\n"
        "print(' '.join('%.17g' % x for x in p / t.shape[0]))\n";
    rc = tu_run((char *const[]){(char *)py, "-c", (char *)check, c, NULL}, &out, &err);
    cr_assert_eq(rc, 0, "%s", err);
    double e[4];
    cr_assert_eq(sscanf(out, "%lf %lf %lf %lf", &e[0], &e[1], &e[2], &e[3]), 4, "%s", out);
    sq_curve_set *set = load(o);
    const sq_curve *g = &set->curves[0];
    cr_assert_str_eq(g->name, "greedy@T0");
    cr_assert_eq(g->positions, 300);
    cr_assert_eq(g->sequences, 5);
    for (int k = 0; k < 4; k++)
        cr_assert(fabs(g->p[k] - e[k]) < 1e-12, "rank %d: %.6f vs numpy %.6f", k + 1, g->p[k], e[k]);
    cr_assert_str_eq(sq_json_field(set->source, "draft")->valuestring, "synthetic-draft");
    sq_curve_set_free(set);
    free(out);
    free(err);
    free(c);
    free(o);
    free(script);
}

Test(cli_accept, svg_draws_the_curves_written_and_plot_overlays_files)
{
    char *corpus = good_corpus(), *out = P("c.json"), *svg = P("c.svg"), *svg2 = P("both.svg");
    char *so, *se;
    const char *a1[] = {corpus, "--mode", "greedy,stochastic", "--temperature", "0.6", "-o", out,
                        "--svg", svg, "--quiet", NULL};
    cr_assert_eq(run(&so, &se, a1), 0, "%s", se);
    char *pic = tu_read(svg, NULL);
    cr_assert(pic && strstr(pic, "<svg") && strstr(pic, "</svg>"));
    cr_assert(strstr(pic, "greedy@T0") && strstr(pic, "stochastic@T0.6"), "both curves are named");
    free(pic);
    free(so);
    free(se);
    const char *a2[] = {"--plot", out, out, "--svg", svg2, NULL};
    cr_assert_eq(run(&so, &se, a2), 0, "%s", se);
    pic = tu_read(svg2, NULL);
    cr_assert(pic && strstr(pic, "c.json:greedy@T0"), "curves of several files are FILE:NAME");
    free(pic);
    free(so);
    free(se);
    const char *a3[] = {"--plot", out, NULL};
    cr_assert_eq(run(&so, &se, a3), 64);
    cr_assert(strstr(se, "--svg"), "%s", se);
    free(so);
    free(se);
    free(out);
    free(svg);
    free(svg2);
    free(corpus);
}

/* Issue 14: --compare as a CI gate. A curve of BASE that NEW lacks is lost coverage: exit 1
 * naming it, unless --curve limits the comparison; differing widths give a warning naming both
 * files; --quiet quiets the report and the warning; --json FILE writes the comparison. */
Test(cli_accept, compare_is_a_ci_gate)
{
    char *c = P("c.h5");
    corpus_spec cs = {.seqs = 20, .len = 6};
    write_corpus(c, &cs);
    char *base = P("base.json"), *newf = P("new.json"), *wide = P("wide.json"), *js = P("cmp.json");
    char *err = NULL, *out = NULL;
    cr_assert_eq(run(NULL, &err, (const char *[]){c, "-m", "stochastic,greedy", "-w", "4", "-q",
                                                  "-o", base, NULL}), 0, "%s", err);
    free(err);
    cr_assert_eq(run(NULL, &err, (const char *[]){c, "-m", "greedy", "-w", "4", "-q", "-o", newf,
                                                  NULL}), 0, "%s", err);
    free(err);
    cr_assert_eq(run(NULL, &err, (const char *[]){c, "-m", "greedy", "-w", "6", "-q", "-o", wide,
                                                  NULL}), 0, "%s", err);
    free(err);
    sq_curve_set *bs = load(base), *ns = load(newf);
    cr_assert_eq(bs->n, 2);
    cr_assert_eq(ns->n, 1);
    const char *kept = ns->curves[0].name;
    const char *lost = strcmp(bs->curves[0].name, kept) ? bs->curves[0].name : bs->curves[1].name;
    /* NEW lacks a curve: exit 1, the message names it and both files */
    int rc = run(&out, &err, (const char *[]){"--compare", base, newf, NULL});
    cr_assert_eq(rc, 1, "%s%s", out, err);
    cr_assert(strstr(err, lost) && strstr(err, newf) && strstr(err, base) &&
                  strstr(err, "coverage"), "%s", err);
    free(out);
    free(err);
    /* --curve limits the comparison to a curve both have */
    rc = run(&out, &err, (const char *[]){"--compare", base, newf, "--curve", kept, NULL});
    cr_assert_eq(rc, 0, "%s%s", out, err);
    free(out);
    free(err);
    /* differing widths: a warning naming both files and widths */
    rc = run(&out, &err, (const char *[]){"--compare", newf, wide, NULL});
    cr_assert_eq(rc, 0, "%s%s", out, err);
    cr_assert(strstr(err, "warning") && strstr(err, "width 4") && strstr(err, "6") &&
                  strstr(err, newf) && strstr(err, wide), "%s", err);
    free(out);
    free(err);
    /* --quiet: neither the report nor the warning; --json writes the comparison */
    rc = run(&out, &err, (const char *[]){"--compare", newf, wide, "--quiet", "--json", js, NULL});
    cr_assert_eq(rc, 0, "%s%s", out, err);
    cr_assert_str_eq(out, "", "--quiet printed a report");
    cr_assert_str_eq(err, "", "--quiet printed: %s", err);
    char *text = tu_read(js, NULL);
    cr_assert_not_null(text, "--json wrote nothing");
    cJSON *j = cJSON_Parse(text);
    cr_assert_not_null(j, "%s", text);
    cr_assert_str_eq(cJSON_GetObjectItem(j, "format")->valuestring, "sequoia-compare");
    cr_assert_str_eq(cJSON_GetObjectItem(j, "result")->valuestring, "ok");
    const cJSON *curves = cJSON_GetObjectItem(j, "curves");
    cr_assert_eq(cJSON_GetArraySize(curves), 1);
    const cJSON *c0 = cJSON_GetArrayItem(curves, 0);
    cr_assert_eq(cJSON_GetObjectItem(c0, "width_baseline")->valueint, 4);
    cr_assert_eq(cJSON_GetObjectItem(c0, "width_new")->valueint, 6);
    cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(c0, "ranks")), 6);
    cr_assert_not_null(cJSON_GetObjectItem(cJSON_GetObjectItem(c0, "optimal_F"), "new"));
    cJSON_Delete(j);
    free(text);
    free(out);
    free(err);
    /* the missing curve in --json, and --quiet still says why it failed */
    rc = run(&out, &err, (const char *[]){"--compare", base, newf, "-q", "--json", js, NULL});
    cr_assert_eq(rc, 1, "%s%s", out, err);
    cr_assert(strstr(err, lost), "%s", err);
    text = tu_read(js, NULL);
    j = cJSON_Parse(text);
    cr_assert_str_eq(cJSON_GetObjectItem(j, "result")->valuestring, "missing curves");
    cr_assert_str_eq(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "missing_in_new"), 0)->valuestring,
                     lost);
    cJSON_Delete(j);
    free(text);
    free(out);
    free(err);
    sq_curve_set_free(bs);
    sq_curve_set_free(ns);
}

/* Issue 27: --by-depth D writes p_by_depth (row 1 = p), stderr_by_depth and stats_by_depth; the
 * rows of shards merge exactly (merge = one run over both); sequoia-plan plans with them; and
 * the option is an estimation option (range checked, refused with --merge and --compare). */
Test(cli_accept, by_depth_rows_merge_exactly_and_feed_the_planner)
{
    char *a = P("da.h5"), *b = P("db.h5"), *ja = P("da.json"), *jb = P("db.json"),
         *jab = P("dab.json"), *jm = P("dm.json"), *plan = P("dplan.json");
    corpus_spec ca = {.seqs = 5, .len = 4, .worse_draft = 1},
                cb = {.seqs = 3, .len = 9, .kind0 = 1, .worse_draft = 1};
    write_corpus(a, &ca);
    write_corpus(b, &cb);
    const char *common[] = {"-m", "stochastic,greedy,topk", "-T", "0.8", "-w", "2", "-s", "5",
                            "--by-depth", "3", "-q"};
    const char *args[20];
    int n;
    ARGS(a, NULL, ja);
    cr_assert_eq(run(NULL, NULL, args), 0);
    ARGS(b, NULL, jb);
    cr_assert_eq(run(NULL, NULL, args), 0);
    ARGS(a, b, jab);
    cr_assert_eq(run(NULL, NULL, args), 0);
    char *err;
    cr_assert_eq(run(NULL, &err, (const char *[]){"--merge", ja, jb, "-o", jm, NULL}), 0, "%s", err);
    free(err);
    char *x = tu_read(jab, NULL), *y = tu_read(jm, NULL);
    cr_assert_str_eq(x, y, "merge differs from the single run over both shards");
    free(x);
    free(y);
    sq_curve_set *set = load(jab);
    cr_assert_eq(set->n, 3);
    for (int i = 0; i < set->n; i++) {
        const sq_curve *c = &set->curves[i];
        cr_assert_eq(c->depth_rows, 3, "%s", c->name);
        cr_assert_not_null(c->stderr_by_depth, "%s", c->name);
        cr_assert_eq(memcmp(c->p_by_depth, c->p, 2 * sizeof(double)), 0, "%s: row 1 is p",
                     c->name);
        cr_assert_eq(memcmp(c->stderr_by_depth, c->stderr_p, 2 * sizeof(double)), 0, "%s",
                     c->name);
        const cJSON *sbd = cJSON_GetObjectItem(c->extra, "stats_by_depth");
        cr_assert_eq(cJSON_GetArraySize(sbd), 3, "%s", c->name);
        /* depth 2 weighs fewer positions than depth 1 (a rejection or a sequence start cuts
         * every chain) */
        double n1 = cJSON_GetObjectItem(cJSON_GetArrayItem(sbd, 0), "sum_n")->valuedouble;
        double n2 = cJSON_GetObjectItem(cJSON_GetArrayItem(sbd, 1), "sum_n")->valuedouble;
        cr_assert(n1 == 20 + 27 && n2 < n1 - 8 + 1e-9, "%s: %g %g", c->name, n1, n2);
    }
    sq_curve_set_free(set);
    /* the planner reads the rows: its plan carries them */
    char *pargv[] = {getenv("SQ_PLAN_BIN"), "-q", "-a", jab, "-c", "stochastic@T0.8", "-n", "8",
                     "-d", "4", "-o", plan, NULL};
    cr_assert_not_null(pargv[0], "SQ_PLAN_BIN is not set");
    cr_assert_eq(tu_run(pargv, NULL, NULL), 0);
    char *ptext = tu_read(plan, NULL);
    cr_assert(strstr(ptext, "\"p_by_depth\"") && strstr(ptext, "\"stderr_by_depth\""), "%s",
              ptext);
    free(ptext);
    /* --compare of a file with itself: every depth compared, no drop */
    char *out;
    cr_assert_eq(run(&out, NULL, (const char *[]){"--compare", jab, jab, NULL}), 0);
    cr_assert(strstr(out, "by depth (rows: 3"), "%s", out);
    free(out);
    free(a);
    free(b);
    free(ja);
    free(jb);
    free(jab);
    free(jm);
    free(plan);
    char *c = good_corpus();
    expect_failure(c, 64, (const char *[]){"--by-depth", "0", NULL}, "--by-depth", NULL);
    expect_failure(c, 64, (const char *[]){"--by-depth", "65", NULL}, "--by-depth", NULL);
    free(c);
}
#undef ARGS
