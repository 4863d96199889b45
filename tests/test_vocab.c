/* Draft and target vocabularies that differ by padding rows (docs/runtime.md, "Vocabularies that
 * differ by padding"): sq_models_check_vocab's shared range and its rule, greedy speculative
 * decoding equal to target-only greedy decoding over the shared range, the corpus dump's
 * columns, the run report's sizes, and the refusals (a gap that is not padding, a tokenizer
 * longer than the shared range). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "libsequoia/base/json.h"
#include "libsequoia/format/corpus.h"
#include "libsequoia/format/plan.h"
#include "runtime/model.h"
#include "runtime/prefill.h"
#include "runtime/specdec.h"
#include "runtime/st_writer.h"
#include "tests/testutil.h"

static char *write_model(const char *dir, const char *name, uint64_t seed, int vocab, int layers)
{
    char *path = tu_path(dir, name);
    sq_random_model_params p = sq_random_model_default_params();
    p.seed = seed;
    p.config.vocab_size = vocab;
    p.config.n_layers = layers;
    sq_error err = {0};
    cr_assert_eq(sq_model_write_random(path, &p, &err), 0, "%s", err.msg);
    return path;
}

static sq_model *load(const char *path)
{
    sq_model *m;
    sq_error err = {0};
    cr_assert_eq(sq_model_load(path, &m, &err), 0, "%s", err.msg);
    return m;
}

static sq_plan *plan_of(const int *parent, int n)
{
    int rank[64] = {0}, cnt[64] = {0};
    for (int i = 1; i < n; i++)
        rank[i] = ++cnt[parent[i]];
    sq_tree *t;
    sq_error err = {0};
    cr_assert_eq(sq_tree_from_parents(parent, rank, n, &t, "test", &err), 0, "%s", err.msg);
    const double p[4] = {0.5, 0.2, 0.1, 0.05};
    sq_curve c = {0};
    cr_assert_eq(sq_curve_init(&c, "test", "stochastic", p, 4, &err), 0, "%s", err.msg);
    sq_plan *plan;
    cr_assert_eq(sq_plan_new(t, &c, 0, 0, 0, &plan, &err), 0, "%s", err.msg);
    sq_curve_clear(&c);
    return plan;
}

static const char *run_bin(void)
{
    const char *b = getenv("SQ_RUN_BIN");
    cr_assert_not_null(b, "SQ_RUN_BIN is set by meson");
    return b;
}

Test(vocab, the_shared_range_and_the_padding_rule)
{
    char *dir = tu_tmpdir();
    char *a = write_model(dir, "a", 1, 256, 1), *b = write_model(dir, "b", 2, 320, 1);
    char *c = write_model(dir, "c", 3, 300, 1), *d = write_model(dir, "d", 4, 1024, 1);
    sq_model *ma = load(a), *mb = load(b), *mc = load(c), *md = load(d);
    sq_error err = {0};
    int vs = 0;
    /* 320 = 5 * 64, gap 64 <= 128: padding, both ways round */
    cr_assert_eq(sq_models_check_vocab(ma, mb, a, b, 0, &vs, &err), 0, "%s", err.msg);
    cr_assert_eq(vs, 256);
    cr_assert_eq(sq_models_check_vocab(mb, ma, b, a, 0, &vs, &err), 0, "%s", err.msg);
    cr_assert_eq(vs, 256);
    cr_assert_eq(sq_models_check_vocab(ma, ma, a, a, 0, &vs, &err), 0, "%s", err.msg);
    cr_assert_eq(vs, 256);
    /* 300 is no multiple of 64; 1024 is 768 rows away (more than 128 and 1%) */
    cr_assert_eq(sq_models_check_vocab(ma, mc, a, c, 0, &vs, &err), SQ_EDATA);
    cr_assert(strstr(err.msg, "/a/config.json: vocab_size: 256") &&
              strstr(err.msg, "/c/config.json's 300") && strstr(err.msg, "multiple of 64"),
              "%s", err.msg);
    err = (sq_error){0};
    cr_assert_eq(sq_models_check_vocab(md, ma, d, a, 0, &vs, &err), SQ_EDATA);
    cr_assert(strstr(err.msg, "1024") && strstr(err.msg, "256") && strstr(err.msg, "padding"),
              "%s", err.msg);
    /* with a tokenizer, its length decides: every real id in the shared range */
    err = (sq_error){0};
    cr_assert_eq(sq_models_check_vocab(md, ma, d, a, 200, &vs, &err), 0, "%s", err.msg);
    cr_assert_eq(vs, 256);
    cr_assert_eq(sq_models_check_vocab(ma, mb, a, b, 300, &vs, &err), SQ_EDATA);
    cr_assert(strstr(err.msg, "/b/tokenizer.json has 300 token ids") &&
              strstr(err.msg, "beyond 256"), "%s", err.msg);
    sq_model_free(ma);
    sq_model_free(mb);
    sq_model_free(mc);
    sq_model_free(md);
    free(a);
    free(b);
    free(c);
    free(d);
    tu_rmtree(dir);
}

/* Greedy tree decoding equals target-only greedy decoding over the shared range, whichever
 * model has the padding rows; no id of the padding rows is ever produced. */
Test(vocab, greedy_over_the_shared_range_equals_target_only_greedy)
{
    char *dir = tu_tmpdir();
    char *small = write_model(dir, "small", 5, 256, 1), *big = write_model(dir, "big", 6, 320, 2);
    char *small2 = write_model(dir, "small2", 7, 256, 2);
    sq_model *ms = load(small), *mb = load(big), *ms2 = load(small2);
    const int tree[] = {-1, 0, 0, 1, 1, 2, 3, 5};
    sq_plan *plan = plan_of(tree, 8);
    const sq_model *pairs[2][2] = {{ms, mb}, {mb, ms2}};   /* {draft, target} */
    const int32_t prompt[] = {3, 17, 42, 250, 9};
    for (int k = 0; k < 2; k++) {
        sq_specdec_params prm = sq_specdec_default_params();
        prm.mode = SQ_MODE_GREEDY;
        prm.temperature = 0.0;
        prm.threads = 1;
        sq_specdec *sd;
        sq_error err = {0};
        cr_assert_eq(sq_specdec_new(pairs[k][0], pairs[k][1], plan, &prm, "plan.json", &sd, &err),
                     0, "%s", err.msg);
        cr_assert_eq(sq_specdec_vocab(sd), 256);
        int32_t spec[40], base[40];
        int steps = 0;
        cr_assert_eq(sq_specdec_generate(sd, prompt, 5, 40, spec, NULL, &steps, NULL, &err), 0,
                     "%s", err.msg);
        cr_assert_eq(sq_specdec_autoregressive(sd, prompt, 5, 40, 0, base, &err), 0, "%s",
                     err.msg);
        for (int i = 0; i < 40; i++) {
            cr_assert_eq(spec[i], base[i], "pair %d token %d: %d vs %d", k, i, spec[i], base[i]);
            cr_assert(spec[i] >= 0 && spec[i] < 256, "pair %d token %d: %d", k, i, spec[i]);
        }
        /* the baseline's first token is the argmax of the target's first 256 logits */
        const sq_model *t = pairs[k][1];
        int tv = sq_model_get_config(t)->vocab_size;
        sq_context_params cp = sq_context_default_params();
        cp.max_context = 16;
        cp.max_pending = 8;
        cp.threads = 1;
        sq_context *ctx;
        cr_assert_eq(sq_context_new(t, &cp, &ctx, &err), 0, "%s", err.msg);
        float *lg = malloc((size_t)5 * tv * sizeof *lg);
        cr_assert_eq(sq_forward_causal(ctx, prompt, 5, lg, &err), 0, "%s", err.msg);
        const float *last = lg + (size_t)4 * tv;
        int best = 0;
        for (int x = 1; x < 256; x++)
            if (last[x] > last[best])
                best = x;
        cr_assert_eq(base[0], best);
        free(lg);
        sq_context_free(ctx);
        sq_specdec_free(sd);
    }
    /* sampling runs over the shared range too */
    sq_specdec_params prm = sq_specdec_default_params();
    prm.threads = 1;
    prm.seed = 3;
    sq_specdec *sd;
    sq_error err = {0};
    cr_assert_eq(sq_specdec_new(ms, mb, plan, &prm, "plan.json", &sd, &err), 0, "%s", err.msg);
    int32_t out[30];
    int steps = 0;
    cr_assert_eq(sq_specdec_generate(sd, prompt, 5, 30, out, NULL, &steps, NULL, &err), 0, "%s",
                 err.msg);
    for (int i = 0; i < 30; i++)
        cr_assert(out[i] >= 0 && out[i] < 256, "token %d: %d", i, out[i]);
    sq_specdec_free(sd);
    sq_plan_free(plan);
    sq_model_free(ms);
    sq_model_free(mb);
    sq_model_free(ms2);
    free(small);
    free(big);
    free(small2);
    tu_rmtree(dir);
}

typedef struct fixture {
    char *dir, *d256, *t320, *t300, *plan, *prompt;
} fixture;

static fixture fixture_new(void)
{
    fixture f;
    f.dir = tu_tmpdir();
    f.d256 = write_model(f.dir, "draft", 11, 256, 1);
    f.t320 = write_model(f.dir, "target", 12, 320, 2);
    f.t300 = write_model(f.dir, "target300", 13, 300, 2);
    f.plan = tu_path(f.dir, "plan.json");
    const int tree[] = {-1, 0, 0, 1, 2, 3};
    sq_plan *p = plan_of(tree, 6);
    sq_error err = {0};
    cr_assert_eq(sq_plan_save(f.plan, p, &err), 0, "%s", err.msg);
    sq_plan_free(p);
    f.prompt = tu_path(f.dir, "prompt.txt");
    tu_write(f.prompt, "5 17 42 255\n");
    return f;
}

static void fixture_free(fixture *f)
{
    tu_rmtree(f->dir);
    free(f->dir);
    free(f->d256);
    free(f->t320);
    free(f->t300);
    free(f->plan);
    free(f->prompt);
}

Test(vocab, cli_run_validates_greedy_and_reports_both_sizes)
{
    fixture f = fixture_new();
    char *rep = tu_path(f.dir, "report.json");
    char *argv[] = {(char *)run_bin(), "--draft", f.d256, "--target", f.t320, "--plan", f.plan,
                    "--prompt", f.prompt, "-n", "24", "--mode", "greedy", "--report", rep,
                    "--validate", "--threads", "1", NULL};
    char *so = NULL, *se = NULL;
    cr_assert_eq(tu_run(argv, &so, &se), 0, "%s", se);
    cr_assert(strstr(se, "greedy output identical"), "%s", se);
    cJSON *j;
    sq_error err = {0};
    cr_assert_eq(sq_json_load(rep, &j, &err), 0, "%s", err.msg);
    cJSON *s = cJSON_GetObjectItem(j, "setup");
    cr_assert_eq(cJSON_GetObjectItem(s, "vocab_size")->valueint, 256);
    cr_assert_eq(cJSON_GetObjectItem(s, "draft_vocab_size")->valueint, 256);
    cr_assert_eq(cJSON_GetObjectItem(s, "target_vocab_size")->valueint, 320);
    cJSON_Delete(j);
    free(so);
    free(se);
    /* the same models: no per-model sizes */
    char *argv2[] = {(char *)run_bin(), "--draft", f.t320, "--target", f.t320, "--plan", f.plan,
                     "--prompt", f.prompt, "-n", "4", "--mode", "greedy", "--report", rep,
                     "--threads", "1", NULL};
    cr_assert_eq(tu_run(argv2, &so, &se), 0, "%s", se);
    cr_assert_eq(sq_json_load(rep, &j, &err), 0, "%s", err.msg);
    s = cJSON_GetObjectItem(j, "setup");
    cr_assert_eq(cJSON_GetObjectItem(s, "vocab_size")->valueint, 320);
    cr_assert_null(cJSON_GetObjectItem(s, "draft_vocab_size"));
    cJSON_Delete(j);
    free(so);
    free(se);
    free(rep);
    fixture_free(&f);
}

Test(vocab, cli_dump_writes_the_shared_columns)
{
    fixture f = fixture_new();
    char *toks = tu_path(f.dir, "text.txt"), *corpus = tu_path(f.dir, "c.h5");
    tu_write(toks, "1 2 3 4 5 6 7\n");
    char *argv[] = {(char *)run_bin(), "dump", "--draft", f.d256, "--target", f.t320,
                    "--tokens", toks, "-o", corpus, "--threads", "1", NULL};
    char *se = NULL;
    cr_assert_eq(tu_run(argv, NULL, &se), 0, "%s", se);
    sq_corpus *c;
    sq_error err = {0};
    cr_assert_eq(sq_corpus_open(corpus, &c, &err), 0, "%s", err.msg);
    const sq_corpus_info *info = sq_corpus_get_info(c);
    cr_assert_eq(info->rows, 6);
    cr_assert_eq(info->vocab, 256);
    float *tl = malloc(6 * 256 * sizeof *tl), *dl = malloc(6 * 256 * sizeof *dl);
    int32_t next[6];
    cr_assert_eq(sq_corpus_read(c, 0, 6, tl, dl, next, &err), 0, "%s", err.msg);
    /* the target's rows are its forward's first 256 columns */
    sq_model *tm = load(f.t320);
    sq_context_params cp = sq_context_default_params();
    cp.max_context = 16;
    cp.max_pending = 8;
    cp.threads = 1;
    sq_context *ctx;
    cr_assert_eq(sq_context_new(tm, &cp, &ctx, &err), 0, "%s", err.msg);
    const int32_t ids[6] = {1, 2, 3, 4, 5, 6};
    float lg[6 * 320];
    cr_assert_eq(sq_forward_causal(ctx, ids, 6, lg, &err), 0, "%s", err.msg);
    for (int r = 0; r < 6; r++)
        for (int x = 0; x < 256; x++)
            cr_assert(fabsf(lg[r * 320 + x] - tl[r * 256 + x]) <= 1e-4f, "row %d logit %d", r,
                      x);
    sq_context_free(ctx);
    sq_model_free(tm);
    free(tl);
    free(dl);
    sq_corpus_close(c);
    free(se);
    free(toks);
    free(corpus);
    fixture_free(&f);
}

Test(vocab, cli_refuses_a_gap_that_is_not_padding)
{
    fixture f = fixture_new();
    char *argv[] = {(char *)run_bin(), "--draft", f.d256, "--target", f.t300, "--plan", f.plan,
                    "--prompt", f.prompt, "-n", "4", "--mode", "greedy", "--threads", "1", NULL};
    char *so = NULL, *se = NULL;
    cr_assert_eq(tu_run(argv, &so, &se), 65, "%s", se);
    cr_assert(strstr(se, "draft/config.json: vocab_size: 256") &&
              strstr(se, "target300/config.json's 300") && strstr(se, "padding"), "%s", se);
    free(so);
    free(se);
    /* the dump refuses the pair alike */
    char *toks = tu_path(f.dir, "text.txt"), *corpus = tu_path(f.dir, "c.h5");
    tu_write(toks, "1 2 3\n");
    char *argv2[] = {(char *)run_bin(), "dump", "--draft", f.d256, "--target", f.t300,
                     "--tokens", toks, "-o", corpus, "--threads", "1", NULL};
    cr_assert_eq(tu_run(argv2, &so, &se), 65, "%s", se);
    cr_assert(strstr(se, "target300/config.json's 300"), "%s", se);
    cr_assert(!tu_exists(corpus));
    free(so);
    free(se);
    free(toks);
    free(corpus);
    fixture_free(&f);
}

/* The byte tokenizer (256 ids) in the target's directory: a draft of 200 rows leaves ids 200 ..
 * 255 outside the shared range, although 256 = 4 * 64 is 56 rows away (the padding rule alone
 * would accept it). */
Test(vocab, cli_refuses_a_tokenizer_longer_than_the_shared_range)
{
    fixture f = fixture_new();
    char *d200 = write_model(f.dir, "draft200", 14, 200, 1);
    char *t256 = write_model(f.dir, "target256", 15, 256, 2);
    char *src = tu_source_path("data/models/draft/tokenizer.json");
    char *dst = tu_path(t256, "tokenizer.json");
    size_t len = 0;
    char *text = tu_read(src, &len);
    cr_assert_not_null(text, "%s", src);
    FILE *fp = fopen(dst, "wb");
    cr_assert_not_null(fp);
    cr_assert_eq(fwrite(text, 1, len, fp), len);
    fclose(fp);
    tu_write(f.prompt, "5 17 42\n");
    char *argv[] = {(char *)run_bin(), "--draft", d200, "--target", t256, "--plan", f.plan,
                    "--prompt", f.prompt, "-n", "4", "--mode", "greedy", "--threads", "1", NULL};
    char *so = NULL, *se = NULL;
    cr_assert_eq(tu_run(argv, &so, &se), 65, "%s", se);
    cr_assert(strstr(se, "draft200/config.json: vocab_size: 200") &&
              strstr(se, "target256/tokenizer.json has 256 token ids"), "%s", se);
    free(so);
    free(se);
    free(d200);
    free(t256);
    free(src);
    free(dst);
    free(text);
    fixture_free(&f);
}

/* Sampling stays lossless over the shared range: the distribution check of the first two tokens
 * (chi-square against the target's restricted distribution) passes with a draft of 320 rows and
 * a target of 256. */
Test(vocab, cli_stochastic_validate_passes_over_the_shared_range)
{
    fixture f = fixture_new();
    char *rep = tu_path(f.dir, "report.json"), *t256 = write_model(f.dir, "t256", 16, 256, 2);
    char *argv[] = {(char *)run_bin(), "--draft", f.t320, "--target", t256, "--plan", f.plan,
                    "--prompt", f.prompt, "-n", "12", "-m", "stochastic", "-t", "0.8", "-s", "3",
                    "--report", rep, "--validate", "--validate-samples", "400", "--threads", "1",
                    NULL};
    char *so = NULL, *se = NULL;
    cr_assert_eq(tu_run(argv, &so, &se), 0, "%s", se);
    cJSON *j;
    sq_error err = {0};
    cr_assert_eq(sq_json_load(rep, &j, &err), 0, "%s", err.msg);
    cJSON *v = cJSON_GetObjectItem(j, "validation");
    cr_assert(cJSON_IsTrue(cJSON_GetObjectItem(v, "pass")));
    cJSON *s = cJSON_GetObjectItem(j, "setup");
    cr_assert_eq(cJSON_GetObjectItem(s, "vocab_size")->valueint, 256);
    cr_assert_eq(cJSON_GetObjectItem(s, "draft_vocab_size")->valueint, 320);
    cr_assert_eq(cJSON_GetObjectItem(s, "target_vocab_size")->valueint, 256);
    cJSON_Delete(j);
    free(so);
    free(se);
    free(rep);
    free(t256);
    fixture_free(&f);
}
