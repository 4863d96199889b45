/* sequoia-profile as a user runs it: a profile of a random-weight model of a given shape, the
 * SVG, the CSV import, and the bad inputs of issue 5. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "libsequoia/base/svg.h"
#include "libsequoia/format/profile.h"
#include "profiler/latency_svg.h"
#include "profiler/measure.h"
#include "runtime/model.h"
#include "tests/testutil.h"

#define TINY_CONFIG "{\"architectures\":[\"LlamaForCausalLM\"],\"hidden_size\":64," \
    "\"intermediate_size\":128,\"num_hidden_layers\":2,\"num_attention_heads\":4," \
    "\"num_key_value_heads\":2,\"vocab_size\":64,\"max_position_embeddings\":64}"

static const char *bin(void)
{
    const char *b = getenv("SQ_PROFILE_BIN");
    cr_assert_not_null(b, "SQ_PROFILE_BIN is not set (run through meson test)");
    return b;
}

static char *dir, *config, *out;

static void setup(void)
{
    dir = tu_tmpdir();
    config = tu_path(dir, "config.json");
    out = tu_path(dir, "profile.json");
    tu_write(config, TINY_CONFIG);
}

static void teardown(void)
{
    tu_rmtree(dir);
    free(dir);
    free(config);
    free(out);
}

TestSuite(cli_profile, .init = setup, .fini = teardown);

Test(cli_profile, profiles_a_shape_from_config_json)
{
    char *svg = tu_path(dir, "curve.svg");
    char *argv[] = {(char *)bin(), "--model", config, "--tokens", "1,2,4,8", "--prefix", "16",
                    "--warmup", "1", "--repeat", "3", "-o", out, "--svg", svg, "--quiet", NULL};
    char *so, *se;
    cr_assert_eq(tu_run(argv, &so, &se), 0, "%s", se);
    sq_profile *p;
    sq_error e = {0};
    cr_assert_eq(sq_profile_load(out, &p, &e), 0, "%s", e.msg);
    cr_assert_eq(p->n, 4, "an explicit list is measured as given");
    for (int i = 0; i < 4; i++) {
        cr_assert_eq(p->points[i].tokens, 1 << i);
        cr_assert_eq(p->points[i].samples, 3);
        cr_assert(p->points[i].p10_ms <= p->points[i].median_ms &&
                  p->points[i].median_ms <= p->points[i].p90_ms);
    }
    cr_assert_eq(p->prefix, 16);
    cr_assert_str_eq(p->backend, "cpu");
    cr_assert_not_null(p->model);
    cr_assert_eq(cJSON_GetObjectItem(p->model, "n_layers")->valueint, 2);
    cr_assert_str_eq(cJSON_GetObjectItem(p->model, "weights")->valuestring, "random");
    char *s = tu_read(svg, NULL);
    cr_assert(s && strstr(s, "<svg") && strstr(s, "</svg>"));
    int circles = 0;
    for (char *c = s; (c = strstr(c, "<circle class=\"")); c++)
        circles += !strncmp(c + 15, "point\"", 6) || !strncmp(c + 15, "unstable\"", 9);
    cr_assert_eq(circles, 4, "one marker per point");
    sq_profile_free(p);
    free(s);
    free(svg);
    free(so);
    free(se);
}

Test(cli_profile, batch_sizes_give_a_version_2_profile_with_one_curve_per_batch)
{
    char *svg = tu_path(dir, "curve.svg");
    char *argv[] = {(char *)bin(), "--model", config, "--tokens", "1,2,4", "--batch", "1,2,3",
                    "--prefix", "8", "--warmup", "0", "--repeat", "2", "-o", out, "--svg", svg,
                    "--quiet", NULL};
    char *so, *se;
    cr_assert_eq(tu_run(argv, &so, &se), 0, "%s", se);
    sq_profile *p;
    sq_error e = {0};
    cr_assert_eq(sq_profile_load(out, &p, &e), 0, "%s", e.msg);
    cr_assert_eq(p->n, 9);
    int b[8];
    cr_assert_eq(sq_profile_batches(p, b, 8), 3);
    cr_assert(b[0] == 1 && b[1] == 2 && b[2] == 3);
    for (int i = 0; i < 9; i++) {
        cr_assert_eq(p->points[i].batch, 1 + i / 3);
        cr_assert_eq(p->points[i].tokens, 1 << (i % 3));
    }
    char *j = tu_read(out, NULL);
    cr_assert(strstr(j, "\"version\": 2"), "a batched profile is version 2");
    char *s = tu_read(svg, NULL);
    int lines = 0;
    for (char *c = s; (c = strstr(c, "<polyline")); c++)
        lines++;
    cr_assert_eq(lines, 3, "one line per batch size");
    cr_assert(strstr(s, "batch 3"), "a legend names each batch size");
    /* batch sizes past the machine's memory: refused up front with the bytes needed */
    char *huge[] = {(char *)bin(), "--model", config, "--tokens", "64", "--batch", "65536",
                    "--prefix", "0", "-o", out, "--quiet", NULL};
    free(so);
    free(se);
    /* a tiny model with a long context: 65536 KV caches of a million slots */
    tu_write(config, "{\"architectures\":[\"LlamaForCausalLM\"],\"hidden_size\":64,"
             "\"intermediate_size\":128,\"num_hidden_layers\":2,\"num_attention_heads\":4,"
             "\"num_key_value_heads\":2,\"vocab_size\":64,\"max_position_embeddings\":2000000}");
    huge[8] = "1000000";
    cr_assert_eq(tu_run(huge, &so, &se), 64, "%s", se);
    cr_assert(strstr(se, "--batch 65536") && strstr(se, "bytes"), "%s", se);
    sq_profile_free(p);
    free(j);
    free(s);
    free(svg);
    free(so);
    free(se);
}

Test(cli_profile, default_counts_are_powers_of_two_refined_where_the_curve_bends)
{
    char *argv[] = {(char *)bin(), "--model", config, "--max-tokens", "16", "--prefix", "8",
                    "--warmup", "0", "--repeat", "2", "-o", out, "--quiet", NULL};
    char *so, *se;
    cr_assert_eq(tu_run(argv, &so, &se), 0, "%s", se);
    sq_profile *p;
    sq_error e = {0};
    cr_assert_eq(sq_profile_load(out, &p, &e), 0, "%s", e.msg);
    /* 1, 2, 4, 8, 16 are always there; midpoints only in between */
    int seen = 0;
    for (int i = 0; i < p->n; i++)
        if ((p->points[i].tokens & (p->points[i].tokens - 1)) == 0)
            seen++;
    cr_assert_eq(seen, 5);
    cr_assert_eq(p->points[p->n - 1].tokens, 16);
    sq_profile_free(p);
    free(so);
    free(se);
}

Test(cli_profile, imports_an_engine_csv)
{
    char *csv = tu_path(dir, "vllm.csv");
    tu_write(csv, "tokens,ms\n1,20.5\n16,21\n64,30\n");
    char *argv[] = {(char *)bin(), "--import", csv, "--engine", "vllm", "-o", out, NULL};
    char *so, *se;
    cr_assert_eq(tu_run(argv, &so, &se), 0, "%s", se);
    sq_profile *p;
    sq_error e = {0};
    cr_assert_eq(sq_profile_load(out, &p, &e), 0, "%s", e.msg);
    cr_assert_eq(p->n, 3);
    cr_assert_str_eq(p->backend, "vllm");
    cr_assert_eq(p->points[2].median_ms, 30);
    sq_profile_free(p);
    tu_write(csv, "tokens,minutes\n1,2\n");
    free(so);
    free(se);
    cr_assert_eq(tu_run(argv, &so, &se), 65);
    cr_assert(strstr(se, "vllm.csv") && strstr(se, "minutes"), "%s", se);
    free(so);
    free(se);
    free(csv);
}

Test(cli_profile, bad_requests_are_refused_without_output)
{
    struct {
        const char *args[6];
        int status;
        const char *expect;
    } cases[] = {
        {{"--tokens", "1,64", "--prefix", "16"}, 64, "past the model's context of 64"},
        {{"--tokens", "4,2"}, 64, "increase strictly"},
        {{"--tokens", "1,2,"}, 64, "comma-separated list"},
        {{"--tokens", "1,,2"}, 64, "comma-separated list"},
        {{"--tokens", "1", "--max-tokens", "4"}, 64, "one of --tokens"},
        {{"--max-tokens", "4", "--tokens", "1"}, 64, "one of --tokens"},
        {{"--backend", "tpu"}, 64, "unknown backend"},
        {{"--backend", "cuda", "--tokens", "1", "--prefix", "4"}, 64, "CUDA"},
        {{"--dtype", "f8"}, 64, "unknown dtype"},
        {{"--repeat", "0"}, 64, "--repeat"},
        {{"--batch", "4,2"}, 64, "increase strictly"},
        {{"--batch", "0"}, 64, "--batch"},
        /* CUDA batches are measured (issue 18): without a device, the device is what fails */
        {{"--backend", "cuda", "--batch", "1,2", "--tokens", "1"}, 64, "CUDA"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char *argv[16];
        int a = 0;
        argv[a++] = (char *)bin();
        argv[a++] = "--model";
        argv[a++] = config;
        for (int j = 0; j < 6 && cases[i].args[j]; j++)
            argv[a++] = (char *)cases[i].args[j];
        argv[a++] = "-o";
        argv[a++] = out;
        argv[a] = NULL;
        char *so, *se;
        int rc = tu_run(argv, &so, &se);
        cr_assert_eq(rc, cases[i].status, "case %zu: exit %d: %s", i, rc, se);
        cr_assert(strstr(se, cases[i].expect), "case %zu: '%s' lacks '%s'", i, se, cases[i].expect);
        cr_assert(!tu_exists(out), "case %zu left an output", i);
        free(so);
        free(se);
    }
    /* a config the runtime refuses names the key */
    tu_write(config, "{\"architectures\":[\"GPT2LMHeadModel\"],\"hidden_size\":64}");
    char *argv[] = {(char *)bin(), "--model", config, "-o", out, NULL};
    char *so, *se;
    cr_assert_eq(tu_run(argv, &so, &se), 65, "%s", se);
    cr_assert(strstr(se, "config.json") && strstr(se, "GPT2LMHeadModel"), "%s", se);
    free(so);
    free(se);
}

/* Issue 14: with no --prefix and no --max-tokens the defaults (512 + 1024) would not fit a
 * 64-position model; they shrink to fit, said in one line. Given values are never changed. */
Test(cli_profile, default_counts_fit_the_models_context)
{
    char *argv[] = {(char *)bin(), "--model", config, "--warmup", "0", "--repeat", "1",
                    "--no-refine", "--threads", "1", "-o", out, "--quiet", NULL};
    char *so, *se;
    cr_assert_eq(tu_run(argv, &so, &se), 0, "%s", se);
    cr_assert(strstr(se, "notice: the model's context is 64 positions: using --prefix 32 and up "
                         "to 32 tokens by default"), "%s", se);
    sq_profile *p;
    sq_error e = {0};
    cr_assert_eq(sq_profile_load(out, &p, &e), 0, "%s", e.msg);
    cr_assert_eq(p->prefix, 32);
    cr_assert_eq(p->points[p->n - 1].tokens, 32);
    cr_assert(p->prefix + p->points[p->n - 1].tokens <= 64);
    /* one thread is "1 thread" */
    cr_assert(strstr(p->device, "(1 thread)"), "%s", p->device);
    sq_profile_free(p);
    free(so);
    free(se);
    /* a given --prefix keeps its value; the default count takes the rest */
    char *argv2[] = {(char *)bin(), "--model", config, "--prefix", "48", "--warmup", "0",
                     "--repeat", "1", "--no-refine", "-o", out, "--quiet", NULL};
    cr_assert_eq(tu_run(argv2, &so, &se), 0, "%s", se);
    cr_assert_eq(sq_profile_load(out, &p, &e), 0, "%s", e.msg);
    cr_assert_eq(p->prefix, 48);
    cr_assert_eq(p->points[p->n - 1].tokens, 16, "%d", p->points[p->n - 1].tokens);
    sq_profile_free(p);
    free(so);
    free(se);
}

Test(cli_profile, version_like_the_other_tools)
{
    char *argv[] = {(char *)bin(), "--version", NULL};
    char *so, *se;
    cr_assert_eq(tu_run(argv, &so, &se), 0, "%s", se);
    cr_assert(strncmp(so, "sequoia-profile ", 16) == 0, "%s", so);
    free(so);
    free(se);
}

/* Issue 14: random weights only on purpose. A directory with no checkpoint is an error that
 * names both ways to ask for them; a dangling or looping model.safetensors symlink is an error
 * naming the file, never a silent fallback to random weights. */
Test(cli_profile, random_weights_only_on_purpose)
{
    char *m = tu_path(dir, "m"), *cfg = tu_path(m, "config.json"), *st = tu_path(m, "model.safetensors");
    cr_assert_eq(mkdir(m, 0755), 0);
    tu_write(cfg, TINY_CONFIG);
    char *argv[] = {(char *)bin(), "--model", m, "--tokens", "1,2", "--prefix", "4", "--warmup",
                    "0", "--repeat", "1", "-o", out, "--quiet", NULL, NULL};
    char *so, *se;
    cr_assert_eq(tu_run(argv, &so, &se), 66, "%s", se);
    cr_assert(strstr(se, m) && strstr(se, "--random-weights") && strstr(se, "config.json"), "%s", se);
    cr_assert(!tu_exists(out));
    free(so);
    free(se);
    argv[14] = "--random-weights";
    cr_assert_eq(tu_run(argv, &so, &se), 0, "%s", se);
    cr_assert(tu_exists(out));
    unlink(out);
    free(so);
    free(se);
    argv[14] = NULL;
    cr_assert_eq(symlink("nowhere.safetensors", st), 0);
    cr_assert_eq(tu_run(argv, &so, &se), 66, "%s", se);
    cr_assert(strstr(se, "model.safetensors") && strstr(se, "dangling symlink"), "%s", se);
    free(so);
    free(se);
    argv[14] = "--random-weights";
    cr_assert_eq(tu_run(argv, &so, &se), 66, "a broken checkpoint is an error even then: %s", se);
    free(so);
    free(se);
    argv[14] = NULL;
    unlink(st);
    cr_assert_eq(symlink("model.safetensors", st), 0);
    cr_assert_eq(tu_run(argv, &so, &se), 66, "%s", se);
    cr_assert(strstr(se, "model.safetensors") && strstr(se, "symlink loop"), "%s", se);
    cr_assert(!tu_exists(out));
    free(so);
    free(se);
}

/* Issue 14: the latency picture. Token counts are on a log axis, so the time axis is log too,
 * spanning the data: forwards a factor apart are as far apart at 1 ms as at 200 ms (on the old
 * linear axis from 0 to 500 every point up to 64 tokens sat flat on the axis). A legend names
 * the unstable points and the p10–p90 whiskers. rsvg-convert renders it. */
Test(cli_profile, latency_picture_has_a_log_time_axis_and_a_legend)
{
    static const double med[] = {1.2, 1.3, 1.5, 2.0, 3.1, 5.2, 9.8, 19, 37, 71, 128};
    sq_profile_point pts[11];
    for (int i = 0; i < 11; i++)
        pts[i] = (sq_profile_point){.batch = 1, .tokens = 1 << i, .median_ms = med[i],
                                    .p10_ms = med[i] * 0.97, .p90_ms = med[i] * 1.04, .samples = 10};
    pts[3].p90_ms = pts[3].median_ms * 1.9;      /* unstable */
    pts[10].p90_ms = 243;
    sq_profile p = {.device = "test", .backend = "cpu", .dtype = "f32", .prefix = 16,
                    .n = 11, .points = pts};
    char *svg = tu_path(dir, "lat.svg");
    sq_error e = {0};
    cr_assert_eq(sq_latency_svg(&p, "test profile", 0.25, svg, &e), 0, "%s", e.msg);
    char *text = tu_read(svg, NULL);
    /* the y range drawn covers the data and no more than 10% beyond it each way */
    const char *ax = strstr(text, "<g class=\"axes\"");
    cr_assert_not_null(ax, "%s", text);
    double ymin = 0, ymax = 0;
    cr_assert_eq(sscanf(strstr(ax, "data-y-min=\"") + 12, "%lf", &ymin), 1);
    cr_assert_eq(sscanf(strstr(ax, "data-y-max=\"") + 12, "%lf", &ymax), 1);
    cr_assert(strstr(ax, "data-y-scale=\"log10\"") && strstr(ax, "data-x-scale=\"log2\""));
    cr_assert(ymin <= 1.2 * 0.97 && ymin >= 1.2 * 0.97 / 1.15, "y axis from %g", ymin);
    cr_assert(ymax >= 243 && ymax <= 243 * 1.15, "y axis to %g for a maximum of 243", ymax);
    /* points: a factor of 1.5 or more in time is at least 15 px apart, whatever the size */
    double cy[11];
    const char *at = text;
    for (int i = 0; i < 11; i++) {
        at = strstr(at, "<circle class=\"");
        cr_assert_not_null(at);
        cr_assert_eq(sscanf(strstr(at, "cy=\"") + 4, "%lf", &cy[i]), 1);
        at++;
    }
    for (int i = 0; i + 1 < 11; i++)
        if (med[i + 1] / med[i] >= 1.5)
            cr_assert(cy[i] - cy[i + 1] >= 15, "points %d and %d: %g and %g px", i, i + 1, cy[i],
                      cy[i + 1]);
    cr_assert(strstr(text, "class=\"unstable\""), "the unstable point is marked");
    /* the legend */
    const char *lg = strstr(text, "id=\"legend\"");
    cr_assert_not_null(lg, "no legend");
    cr_assert(strstr(lg, "unstable") && strstr(lg, "p10\xe2\x80\x93p90") && strstr(lg, "median"),
              "%s", lg);
    /* rendered by rsvg-convert, like the other pictures */
    if (access("/usr/bin/rsvg-convert", X_OK) == 0) {
        char *png = tu_path(dir, "lat.png");
        char *argv[] = {"/usr/bin/rsvg-convert", svg, "-o", png, NULL};
        char *so, *se;
        cr_assert_eq(tu_run(argv, &so, &se), 0, "rsvg-convert: %s", se);
        size_t len;
        char *img = tu_read(png, &len);
        cr_assert(img && len > 1000 && memcmp(img, "\x89PNG", 4) == 0, "no PNG");
        free(img);
        free(so);
        free(se);
        free(png);
    } else {
        cr_log_warn("rsvg-convert is not installed: the picture was not rendered");
    }
    free(text);
    free(svg);
}

/* The latency picture is drawn by the one SVG writer (libsequoia/base/svg.h), not by code of
 * its own: its document header, its axes, its markers and its whiskers are byte for byte what
 * the shared primitives write for the same arguments, and its y ticks are the shared log10
 * tick rule's. */
Test(cli_profile, latency_picture_is_drawn_by_the_shared_svg_writer)
{
    sq_profile_point pts[6];
    for (int i = 0; i < 6; i++)
        pts[i] = (sq_profile_point){.batch = 1 + i / 3, .tokens = 1 << (2 * (i % 3)),
                                    .median_ms = 2.0 + 3 * i, .p10_ms = 1.8 + 3 * i,
                                    .p90_ms = i == 4 ? 40 : 2.3 + 3 * i, .samples = 5};
    sq_profile p = {.device = "test", .backend = "cpu", .dtype = "f32", .prefix = 16, .n = 6,
                    .points = pts};
    char *text = NULL;
    size_t len = 0;
    FILE *fp = open_memstream(&text, &len);
    sq_latency_svg_write(fp, &p, "a <title>", 0.25);
    fclose(fp);

    /* the document: the shared header, one <svg>, closed once */
    char *head = NULL;
    size_t hlen = 0;
    fp = open_memstream(&head, &hlen);
    sq_svg_begin(fp, 720, 420, "a <title>");
    fclose(fp);
    cr_assert(hlen > 0 && strncmp(text, head, hlen) == 0, "not the shared document header:\n%s",
              text);
    cr_assert_null(strstr(text + hlen, "<svg"), "one <svg> element");
    const char *end = strstr(text, "</svg>\n");
    cr_assert(end && end[7] == '\0', "the document ends with </svg>");

    /* the axes: one shared group; replaying sq_svg_axes_draw with the ranges it records gives
     * the same bytes */
    const char *ax = strstr(text, "<g class=\"axes\"");
    cr_assert(ax && !strstr(ax + 1, "<g class=\"axes\""), "one axes group");
    double xmin, xmax, ymin, ymax;
    cr_assert_eq(sscanf(strstr(ax, "data-x-min=\"") + 12, "%lf", &xmin), 1);
    cr_assert_eq(sscanf(strstr(ax, "data-x-max=\"") + 12, "%lf", &xmax), 1);
    cr_assert_eq(sscanf(strstr(ax, "data-y-min=\"") + 12, "%lf", &ymin), 1);
    cr_assert_eq(sscanf(strstr(ax, "data-y-max=\"") + 12, "%lf", &ymax), 1);
    cr_assert_float_eq(xmin, 1, 1e-9);
    cr_assert_float_eq(xmax, 16, 1e-9);
    double ticks[40];
    int nt = sq_svg_log_ticks(ymin, ymax, ticks, 40);
    cr_assert_geq(nt, 3);
    for (int k = 0; k < nt; k++) {
        char label[40];
        snprintf(label, sizeof label, "\">%g</text>", ticks[k]);
        cr_assert(strstr(ax, label), "y tick %g missing", ticks[k]);
    }

    /* every data point: the shared marker at its place, with its tooltip */
    const char *at = text;
    for (int i = 0; i < 6; i++) {
        at = strstr(at, "<circle class=\"");
        cr_assert_not_null(at, "point %d", i);
        double cx, cy;
        cr_assert_eq(sscanf(strstr(at, "cx=\"") + 4, "%lf", &cx), 1);
        cr_assert_eq(sscanf(strstr(at, "cy=\"") + 4, "%lf", &cy), 1);
        int bad = strncmp(at + 15, "unstable", 8) == 0;
        cr_assert_eq(bad, i == 4, "point %d: unstable is the one with a wide spread", i);
        char tip[128], *want = NULL;
        size_t wlen = 0;
        snprintf(tip, sizeof tip, "batch %d, %d tokens: %.4g ms median%s", pts[i].batch,
                 pts[i].tokens, pts[i].median_ms, bad ? " (unstable)" : "");
        fp = open_memstream(&want, &wlen);
        sq_svg_marker(fp, cx, cy, 3.5, bad ? "#c0392b" : "#1f5fa8", NULL,
                      bad ? "unstable" : "point", tip);
        fclose(fp);
        cr_assert(strncmp(at, want, wlen) == 0, "point %d is not the shared marker:\n%.200s\n%s",
                  i, at, want);
        free(want);
        at++;
    }
    /* whiskers: the shared error bar, one per point */
    int whiskers = 0;
    for (const char *w = text; (w = strstr(w, "<path class=\"whisker\" d=\"M")); w++)
        whiskers++;
    cr_assert_eq(whiskers, 6);
    /* a median line per batch size, and no drawing code of the picture's own: every element
     * is one the shared primitives write */
    static const char *const known[] = {"<?xml", "<svg", "<title>", "<rect", "<line", "<text",
                                        "<g ", "</g>", "<polyline", "<path", "<circle", "</svg>"};
    for (const char *e = text; (e = strchr(e, '<')); e++) {
        if (e[1] == '/' && e[2] != 'g' && e[2] != 's')
            continue;   /* closing tags of text, title, circle */
        int ok = 0;
        for (size_t k = 0; k < sizeof known / sizeof *known && !ok; k++)
            ok = strncmp(e, known[k], strlen(known[k])) == 0;
        cr_assert(ok, "an element the shared writer does not write: %.40s", e);
    }
    free(head);
    free(text);
}

/* sq_measure_points times its points in interleaved rounds of SQ_MEASURE_BLOCK samples
 * (docs/design.md §7.3): round r starts at point r mod count, every point gets `repeat`
 * samples, and the contexts are left as they were (each forward's tokens dropped). At batch 2
 * the same holds over both contexts. */
typedef struct rounds_seen {
    int n, done[16], tokens[16];
} rounds_seen;

static void on_round(void *user, int done, int total, int tokens)
{
    rounds_seen *s = user;
    cr_assert_eq(total, 100);
    if (s->n < 16) {
        s->done[s->n] = done;
        s->tokens[s->n] = tokens;
    }
    s->n++;
}

Test(cli_profile, points_are_timed_in_interleaved_rounds)
{
    sq_model_config cfg = {.dim = 64, .hidden_dim = 128, .n_layers = 2, .n_heads = 4,
                           .n_kv_heads = 2, .head_dim = 16, .vocab_size = 64,
                           .max_position = 64, .rope_theta = 10000.0f, .norm_eps = 1e-5f,
                           .dtype = "F32"};
    sq_model *m;
    sq_error e = {0};
    cr_assert_eq(sq_model_new_random(&cfg, 7, &m, &e), 0, "%s", e.msg);
    sq_context_params cp = sq_context_default_params();
    cp.max_context = 64;
    cp.max_pending = 16;
    cp.threads = 1;
    sq_context *ctx[2];
    for (int k = 0; k < 2; k++)
        cr_assert_eq(sq_context_new(m, &cp, &ctx[k], &e), 0, "%s", e.msg);
    sq_measure_params prm = sq_measure_default_params();
    prm.prefix = 8;
    prm.warmup = 1;   /* and SQ_MEASURE_WARMUP_MS of them */
    prm.repeat = 2 * SQ_MEASURE_BLOCK + 2;   /* three rounds */
    for (int k = 0; k < 2; k++)
        cr_assert_eq(sq_measure_prefill(ctx[k], cfg.vocab_size, &prm, &e), 0, "%s", e.msg);
    const int ns[3] = {1, 3, 8};
    for (int b = 1; b <= 2; b++) {
        rounds_seen seen = {0};
        sq_profile_point pts[3];
        cr_assert_eq(sq_measure_points(ctx, b, cfg.vocab_size, ns, 3, &prm, on_round, &seen, 10,
                                       100, pts, &e), 0, "%s", e.msg);
        cr_assert_eq(seen.n, 3, "one progress call per round of %d samples", SQ_MEASURE_BLOCK);
        for (int r = 0; r < 3; r++) {
            cr_assert_eq(seen.tokens[r], ns[r % 3], "round %d starts at point %d", r, r % 3);
            cr_assert_eq(seen.done[r], 10 + r);
        }
        for (int i = 0; i < 3; i++) {
            cr_assert_eq(pts[i].batch, b);
            cr_assert_eq(pts[i].tokens, ns[i]);
            cr_assert_eq(pts[i].samples, prm.repeat);
            cr_assert(pts[i].p10_ms > 0 && pts[i].p10_ms <= pts[i].median_ms &&
                      pts[i].median_ms <= pts[i].p90_ms);
        }
        for (int k = 0; k < 2; k++)
            cr_assert_eq(sq_context_committed(ctx[k]), prm.prefix, "the caches are as they were");
    }
    for (int k = 0; k < 2; k++)
        sq_context_free(ctx[k]);
    sq_model_free(m);
}
