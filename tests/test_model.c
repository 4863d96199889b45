/* Suite 'model': safetensors reading and writing, config.json, weight loading and the CPU
 * forward (runtime/model.h). The forward is checked against a plain reference written below
 * (double accumulation, straightforward loops, no BLAS), on tiny random models that
 * sq_model_write_random creates. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <malloc.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <criterion/criterion.h>
#include <gsl/gsl_cblas.h>

#include "libsequoia/base/json.h"
#include "runtime/arch.h"
#include "runtime/backend.h"
#include "runtime/config.h"
#include "runtime/memory.h"
#include "runtime/model.h"
#include "runtime/safetensors.h"
#include "runtime/st_writer.h"
#include "tests/testutil.h"

/* ---- small utilities -------------------------------------------------------------------- */

/* Paths from tu_path/tu_tmpdir are freed after each test (so that LeakSanitizer stays quiet). */
static char *kept[256];
static int n_kept;

static char *keep_str(char *p)
{
    if (n_kept < 256)
        kept[n_kept++] = p;
    return p;
}

static void free_kept(void)
{
    while (n_kept > 0)
        free(kept[--n_kept]);
}

TestSuite(model, .fini = free_kept);

#define tu_path(dir, name) keep_str(tu_path(dir, name))
#define tu_tmpdir() keep_str(tu_tmpdir())

static uint64_t rng_state = 12345;

static uint32_t rnd(void)
{
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(rng_state >> 33);
}

static int rnd_below(int n)
{
    return (int)(rnd() % (uint32_t)n);
}

static void write_bytes(const char *path, const void *data, size_t len)
{
    FILE *fp = fopen(path, "wb");
    cr_assert(fp);
    cr_assert_eq(fwrite(data, 1, len, fp), len);
    cr_assert_eq(fclose(fp), 0);
}

/* A safetensors file with the given header text (length field = strlen(header) unless
 * hlen_override is nonzero) followed by data_len bytes of 0x3c. */
static char *make_st(const char *dir, const char *header, size_t data_len, uint64_t hlen_override)
{
    char *path = tu_path(dir, "t.safetensors");
    size_t hl = strlen(header);
    size_t total = 8 + hl + data_len;
    unsigned char *buf = malloc(total);
    cr_assert(buf);
    uint64_t v = hlen_override ? hlen_override : hl;
    for (int i = 0; i < 8; i++)
        buf[i] = (unsigned char)(v >> (8 * i));
    memcpy(buf + 8, header, hl);
    memset(buf + 8 + hl, 0x3c, data_len);
    write_bytes(path, buf, total);
    free(buf);
    return path;
}

/* Opens `path` expecting failure with `status` and a message holding every non-NULL needle. */
static void expect_st_fail(const char *path, int status, const char *n1, const char *n2)
{
    sq_st_file *f = (sq_st_file *)0x1;
    sq_error err = {0};
    int rc = sq_st_open(path, &f, &err);
    cr_assert_eq(rc, status, "expected status %d, got %d (%s)", status, rc, err.msg);
    cr_assert_null(f);
    cr_assert(strstr(err.msg, path), "message does not name the file: %s", err.msg);
    if (n1)
        cr_assert(strstr(err.msg, n1), "message lacks \"%s\": %s", n1, err.msg);
    if (n2)
        cr_assert(strstr(err.msg, n2), "message lacks \"%s\": %s", n2, err.msg);
}

/* ---- conversions ---------------------------------------------------------------------- */

/* binary16 decoded from its definition. */
static double half_value(uint16_t h)
{
    int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
    double v;
    if (e == 0)
        v = ldexp(m, -24);
    else if (e == 31)
        v = m ? NAN : INFINITY;
    else
        v = ldexp(1024 + m, e - 25);
    return s ? -v : v;
}

/* The conversions themselves (libsequoia/base/half.h) are tested in tests/test_half.c. */

/* ---- safetensors: round trip ---------------------------------------------------------- */

Test(model, safetensors_round_trip_in_every_float_dtype_with_metadata)
{
    char *dir = tu_tmpdir();
    char *path = tu_path(dir, "rt.safetensors");
    float vals[3][60];
    for (int t = 0; t < 3; t++)
        for (int i = 0; i < 60; i++)
            vals[t][i] = ((float)rnd_below(20001) - 10000.0f) / 777.0f;
    const sq_st_dtype dts[3] = {SQ_ST_F32, SQ_ST_F16, SQ_ST_BF16};
    const char *names[3] = {"w.f32", "w.f16", "w.bf16"};
    const int64_t shapes[3][3] = {{3, 4, 5}, {60, 0, 0}, {6, 10, 0}};
    const int ndims[3] = {3, 1, 2};
    sq_error err = {0};
    sq_st_writer *w = sq_st_writer_new();
    cr_assert(w);
    cr_assert_eq(sq_st_writer_metadata(w, "format", "pt", &err), 0);
    for (int t = 0; t < 3; t++)
        cr_assert_eq(sq_st_writer_add(w, names[t], dts[t], ndims[t], shapes[t], &err), 0);
    int64_t scalar_shape[1] = {0};
    cr_assert_eq(sq_st_writer_add(w, "empty", SQ_ST_F32, 1, scalar_shape, &err), 0);
    cr_assert_eq(sq_st_writer_add(w, "scalar", SQ_ST_F32, 0, NULL, &err), 0);
    cr_assert_eq(sq_st_writer_add(w, "w.f32", SQ_ST_F32, 0, NULL, &err), SQ_EUSAGE);
    err.status = 0;
    cr_assert_eq(sq_st_writer_begin(w, path, &err), 0, "%s", err.msg);
    cr_assert_not(tu_exists(path), "the file appears before finish");
    /* in pieces that cross tensor boundaries */
    float all[181];
    memcpy(all, vals[0], sizeof vals[0]);
    memcpy(all + 60, vals[1], sizeof vals[1]);
    memcpy(all + 120, vals[2], sizeof vals[2]);
    all[180] = 42.5f;
    cr_assert_eq(sq_st_writer_put(w, all, 77, &err), 0, "%s", err.msg);
    cr_assert_eq(sq_st_writer_put(w, all + 77, 104, &err), 0, "%s", err.msg);
    cr_assert_eq(sq_st_writer_put(w, all, 1, &err), SQ_EUSAGE);
    err.status = 0;
    cr_assert_eq(sq_st_writer_finish(w, &err), 0, "%s", err.msg);
    sq_st_writer_free(w);

    sq_st_file *f;
    cr_assert_eq(sq_st_open(path, &f, &err), 0, "%s", err.msg);
    cr_assert_eq(f->n_tensors, 5);
    cr_assert_str_eq(sq_st_metadata(f, "format"), "pt");
    cr_assert_null(sq_st_metadata(f, "nope"));
    cr_assert_null(sq_st_find(f, "nope"));
    for (int t = 0; t < 3; t++) {
        const sq_st_tensor *st = sq_st_find(f, names[t]);
        cr_assert(st);
        cr_assert_eq(st->dtype, dts[t]);
        cr_assert_eq(st->ndim, ndims[t]);
        cr_assert_eq(st->numel, 60);
        float back[60];
        cr_assert_eq(sq_st_to_f32(st->dtype, st->data, back, 60), 0);
        for (int i = 0; i < 60; i++) {
            float want = dts[t] == SQ_ST_F32   ? vals[t][i]
                         : dts[t] == SQ_ST_F16 ? (float)half_value(sq_f32_to_f16(vals[t][i]))
                                               : sq_bf16_to_f32(sq_f32_to_bf16(vals[t][i]));
            cr_assert_eq(back[i], want, "%s[%d]", names[t], i);
            double rel = dts[t] == SQ_ST_F32 ? 0 : dts[t] == SQ_ST_F16 ? 1.0 / 2048 : 1.0 / 256;
            cr_assert(fabs(back[i] - vals[t][i]) <= rel * fabs(vals[t][i]) + 1e-7);
        }
    }
    const sq_st_tensor *sc = sq_st_find(f, "scalar");
    cr_assert_eq(sc->ndim, 0);
    cr_assert_eq(sc->numel, 1);
    float v;
    sq_st_to_f32(SQ_ST_F32, sc->data, &v, 1);
    cr_assert_eq(v, 42.5f);
    cr_assert_eq(sq_st_find(f, "empty")->nbytes, 0);
    sq_st_close(f);
    tu_rmtree(dir);
}

Test(model, safetensors_writer_leaves_no_file_when_not_finished)
{
    char *dir = tu_tmpdir();
    char *path = tu_path(dir, "half.safetensors");
    sq_error err = {0};
    sq_st_writer *w = sq_st_writer_new();
    int64_t shape[1] = {10};
    sq_st_writer_add(w, "a", SQ_ST_F32, 1, shape, &err);
    cr_assert_eq(sq_st_writer_begin(w, path, &err), 0);
    float v[4] = {1, 2, 3, 4};
    sq_st_writer_put(w, v, 4, &err);
    cr_assert_eq(sq_st_writer_finish(w, &err), SQ_EUSAGE);
    cr_assert(strstr(err.msg, "16 of 40"), "%s", err.msg);
    sq_st_writer_free(w);
    cr_assert_eq(tu_count_entries(dir), 0);
    tu_rmtree(dir);
}

/* ---- safetensors: bad input ------------------------------------------------------------ */

Test(model, safetensors_refuses_files_shorter_than_the_length_field)
{
    char *dir = tu_tmpdir();
    char *path = tu_path(dir, "t.safetensors");
    write_bytes(path, "\x05\x00\x00", 3);
    expect_st_fail(path, SQ_EDATA, "too short", NULL);
    write_bytes(path, "", 0);
    expect_st_fail(path, SQ_EDATA, "0 bytes", NULL);
    tu_rmtree(dir);
}

Test(model, safetensors_refuses_a_missing_file_with_no_input)
{
    char *dir = tu_tmpdir();
    char *path = tu_path(dir, "absent.safetensors");
    expect_st_fail(path, SQ_ENOINPUT, "cannot open", NULL);
    tu_rmtree(dir);
}

Test(model, safetensors_refuses_huge_or_past_the_end_header_lengths)
{
    char *dir = tu_tmpdir();
    const char *h = "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}";
    const uint64_t bad[] = {UINT64_MAX, 1ull << 63, 1ull << 40, strlen(h) + 5};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char *p = make_st(dir, h, 4, bad[i]);
        char num[32];
        snprintf(num, sizeof num, "%llu", (unsigned long long)bad[i]);
        expect_st_fail(p, SQ_EDATA, "header length", num);
    }
    char *p = make_st(dir, h, 4, 0);
    /* a zero length */
    FILE *fp = fopen(p, "r+b");
    fwrite("\0\0\0\0\0\0\0\0", 1, 8, fp);
    fclose(fp);
    expect_st_fail(p, SQ_EDATA, "header length is 0", NULL);
    tu_rmtree(dir);
}

Test(model, safetensors_refuses_a_header_that_is_not_json_or_not_an_object)
{
    char *dir = tu_tmpdir();
    char *p = make_st(dir, "{\"a\": [1, 2", 16, 0);
    expect_st_fail(p, SQ_EDATA, "malformed JSON", NULL);
    p = make_st(dir, "\xff\xfe binary", 16, 0);
    expect_st_fail(p, SQ_EDATA, "UTF-8", NULL);
    p = make_st(dir, "[1, 2]", 16, 0);
    expect_st_fail(p, SQ_EDATA, "expected a JSON object", NULL);
    p = make_st(dir, "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                     "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8, 0);
    expect_st_fail(p, SQ_EDATA, "appears twice", NULL);
    tu_rmtree(dir);
}

Test(model, safetensors_refuses_bad_entries_naming_the_tensor)
{
    char *dir = tu_tmpdir();
    const struct {
        const char *header;
        size_t      data;
        const char *n1, *n2;
    } cases[] = {
        {"{\"wq\":{\"dtype\":\"Q4_K\",\"shape\":[2],\"data_offsets\":[0,2]}}", 2, "wq",
         "unknown dtype \"Q4_K\""},
        {"{\"wq\":{\"dtype\":7,\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "wq", "dtype"},
        {"{\"wq\":{\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "wq", "dtype: missing"},
        {"{\"wq\":{\"dtype\":\"F32\",\"data_offsets\":[0,8]}}", 8, "wq", "shape: missing"},
        {"{\"wq\":{\"dtype\":\"F32\",\"shape\":[2]}}", 8, "wq", "data_offsets: missing"},
        {"{\"wq\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", 8, "wq",
         "shape[0]"},
        {"{\"wq\":{\"dtype\":\"F32\",\"shape\":[2.5],\"data_offsets\":[0,8]}}", 8, "wq",
         "shape[0]"},
        {"{\"wq\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[-8,0]}}", 8, "wq",
         "data_offsets"},
        {"{\"wq\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,0]}}", 8, "wq",
         "begin 8 is after end 0"},
        {"{\"wq\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0]}}", 8, "wq",
         "data_offsets"},
        {"{\"wq\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8,9]}}", 8, "wq",
         "data_offsets"},
        {"{\"wq\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 7, "wq",
         "past the end of the data (7 bytes)"},
        {"{\"ok\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
         "\"wk\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[16,32]}}", 20, "wk",
         "past the end"},
        {"{\"wq\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,16]}}", 24, "wq",
         "needs 24"},
        {"{\"wq\":{\"dtype\":\"BF16\",\"shape\":[3],\"data_offsets\":[0,12]}}", 12, "wq",
         "needs 6"},
        {"{\"wq\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,8]}}",
         8, "wq", "overflows"},
        {"{\"wq\":{\"dtype\":\"F32\",\"shape\":[1,2,3,4,5,6,7,8,9],\"data_offsets\":[0,8]}}",
         8, "wq", "9 dimensions"},
        {"{\"wq\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]},"
         "\"wk\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[8,24]}}", 24, "overlap",
         "wq"},
        {"{\"wq\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]},"
         "\"wk\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", 16, "overlap",
         NULL},
        {"{\"wq\":[1,2]}", 8, "wq", "expected an object"},
        {"{\"__metadata__\":{\"a\":1},\"wq\":{\"dtype\":\"F32\",\"shape\":[1],"
         "\"data_offsets\":[0,4]}}", 4, "__metadata__", "not a string"},
        {"{\"__metadata__\":[],\"wq\":{\"dtype\":\"F32\",\"shape\":[1],"
         "\"data_offsets\":[0,4]}}", 4, "__metadata__", NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *p = make_st(dir, cases[i].header, cases[i].data, 0);
        expect_st_fail(p, SQ_EDATA, cases[i].n1, cases[i].n2);
    }
    tu_rmtree(dir);
}

Test(model, safetensors_accepts_gaps_trailing_bytes_and_empty_tensors_anywhere)
{
    char *dir = tu_tmpdir();
    char *p = make_st(dir, "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]},"
                           "\"z\":{\"dtype\":\"F16\",\"shape\":[0,5],\"data_offsets\":[6,6]},"
                           "\"b\":{\"dtype\":\"I8\",\"shape\":[],\"data_offsets\":[8,9]}}   ",
                      12, 0);
    sq_st_file *f;
    sq_error err = {0};
    cr_assert_eq(sq_st_open(p, &f, &err), 0, "%s", err.msg);
    cr_assert_eq(f->n_tensors, 3);
    cr_assert_eq(sq_st_find(f, "b")->dtype, SQ_ST_I8);
    sq_st_close(f);
    tu_rmtree(dir);
}

Test(model, safetensors_refuses_a_truncated_real_file)
{
    char *dir = tu_tmpdir();
    sq_random_model_params rp = sq_random_model_default_params();
    char *mdir = tu_path(dir, "m");
    sq_error err = {0};
    cr_assert_eq(sq_model_write_random(mdir, &rp, &err), 0, "%s", err.msg);
    char *st = tu_path(mdir, "model.safetensors");
    size_t len;
    char *data = tu_read(st, &len);
    write_bytes(st, data, len - 100);
    expect_st_fail(st, SQ_EDATA, "past the end of the data", "truncated");
    sq_model *m = NULL;
    err.status = 0;
    cr_assert_eq(sq_model_load(mdir, &m, &err), SQ_EDATA);
    cr_assert_null(m);
    cr_assert(strstr(err.msg, "truncated"), "%s", err.msg);
    free(data);
    tu_rmtree(dir);
}

/* ---- config.json ---------------------------------------------------------------------- */

static const char *base_config =
    "{\"architectures\": [\"LlamaForCausalLM\"], \"model_type\": \"llama\", \"hidden_size\": 64,"
    " \"intermediate_size\": 96, \"num_hidden_layers\": 2, \"num_attention_heads\": 4,"
    " \"num_key_value_heads\": 2, \"rms_norm_eps\": 1e-05, \"rope_theta\": 500000.0,"
    " \"vocab_size\": 97, \"max_position_embeddings\": 512, \"tie_word_embeddings\": true,"
    " \"hidden_act\": \"silu\", \"rope_scaling\": null, \"torch_dtype\": \"bfloat16\"%s}";

static int parse_config_with(const char *extra, sq_model_config *c, sq_error *err)
{
    char text[2048];
    snprintf(text, sizeof text, base_config, extra);
    cJSON *root = NULL;
    int rc = sq_json_parse("config.json", text, strlen(text), &root, err);
    if (rc)
        return rc;
    rc = sq_model_config_parse("config.json", root, c, err);
    cJSON_Delete(root);
    return rc;
}

Test(model, config_reads_every_field_of_a_llama_config)
{
    sq_model_config c;
    sq_error err = {0};
    cr_assert_eq(parse_config_with("", &c, &err), 0, "%s", err.msg);
    cr_assert_eq(c.dim, 64);
    cr_assert_eq(c.hidden_dim, 96);
    cr_assert_eq(c.n_layers, 2);
    cr_assert_eq(c.n_heads, 4);
    cr_assert_eq(c.n_kv_heads, 2);
    cr_assert_eq(c.head_dim, 16);
    cr_assert_eq(c.vocab_size, 97);
    cr_assert_eq(c.max_position, 512);
    cr_assert_eq(c.rope_theta, 500000.0f);
    cr_assert_eq(c.norm_eps, 1e-5f);
    cr_assert_eq(c.tied_embeddings, 1);
    /* round trip through the writer's JSON */
    cJSON *j = sq_model_config_to_json(&c);
    sq_model_config c2;
    cr_assert_eq(sq_model_config_parse("x", j, &c2, &err), 0, "%s", err.msg);
    cJSON_Delete(j);
    cr_assert_eq(memcmp(&c, &c2, sizeof c), 0);
    /* accepted variants */
    cr_assert_eq(parse_config_with(", \"head_dim\": 16, \"attention_bias\": false", &c, &err),
                 0, "%s", err.msg);
    const char *dflt = "{\"architectures\": [\"LlamaForCausalLM\"], \"hidden_size\": 64, "
                       "\"intermediate_size\": 96, \"num_hidden_layers\": 2, "
                       "\"num_attention_heads\": 4, \"vocab_size\": 9, "
                       "\"rope_scaling\": {\"rope_type\": \"default\"}}";
    cJSON *root;
    cr_assert_eq(sq_json_parse("c", dflt, strlen(dflt), &root, &err), 0);
    cr_assert_eq(sq_model_config_parse("c", root, &c, &err), 0, "%s", err.msg);
    cJSON_Delete(root);
}

Test(model, config_defaults_follow_transformers)
{
    const char *text = "{\"model_type\": \"llama\", \"hidden_size\": 32, \"intermediate_size\": 40,"
                       " \"num_hidden_layers\": 1, \"num_attention_heads\": 2, \"vocab_size\": 10}";
    cJSON *root;
    sq_error err = {0};
    cr_assert_eq(sq_json_parse("c", text, strlen(text), &root, &err), 0);
    sq_model_config c;
    cr_assert_eq(sq_model_config_parse("c", root, &c, &err), 0, "%s", err.msg);
    cJSON_Delete(root);
    cr_assert_eq(c.n_kv_heads, 2);
    cr_assert_eq(c.norm_eps, 1e-6f);
    cr_assert_eq(c.rope_theta, 10000.0f);
    cr_assert_eq(c.max_position, 2048);
    cr_assert_eq(c.tied_embeddings, 0);
}

/* An unknown architecture is "not supported" once; a refused kind says which kind it is. */
Test(model, unsupported_architectures_are_named_once)
{
    const struct {
        const char *text, *says;
    } cases[] = {
        {"{\"architectures\": [\"GPT2LMHeadModel\"], \"hidden_size\": 64}",
         "config.json: architectures: GPT2LMHeadModel is not supported (this runtime loads "},
        {"{\"architectures\": [\"MixtralForCausalLM\"], \"hidden_size\": 64}",
         "config.json: architectures: MixtralForCausalLM is a mixture-of-experts model; not "
         "supported (this runtime loads "},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        sq_model_config c;
        sq_error err = {0};
        cJSON *root;
        cr_assert_eq(sq_json_parse("config.json", cases[i].text, strlen(cases[i].text), &root,
                                   &err), 0);
        cr_assert_eq(sq_model_config_parse("config.json", root, &c, &err), SQ_EDATA);
        cJSON_Delete(root);
        cr_assert(strstr(err.msg, cases[i].says), "case %zu: %s", i, err.msg);
        const char *first = strstr(err.msg, "not supported");
        cr_assert(first && !strstr(first + 1, "not supported"), "said twice: %s", err.msg);
    }
}

Test(model, config_refusals_name_the_key)
{
    const struct {
        const char *extra; /* appended (duplicate keys are avoided by using fresh keys) */
        const char *text;  /* or a whole document */
        const char *n1, *n2;
    } cases[] = {
        {NULL, "{\"architectures\": [\"MixtralForCausalLM\"], \"hidden_size\": 64}",
         "architectures", "MixtralForCausalLM"},
        {NULL, "{\"model_type\": \"gpt2\", \"hidden_size\": 64}", "model_type", "gpt2"},
        {NULL, "{\"hidden_size\": 64}", "architectures", "missing"},
        {NULL, "{\"architectures\": [\"LlamaForCausalLM\"], \"intermediate_size\": 96}",
         "hidden_size", "missing"},
        {NULL, "{\"architectures\": [\"LlamaForCausalLM\"], \"hidden_size\": 64, "
               "\"intermediate_size\": 96, \"num_hidden_layers\": 2, \"num_attention_heads\": 4}",
         "vocab_size", "missing"},
        {NULL, "{\"architectures\": [\"LlamaForCausalLM\"], \"hidden_size\": \"64\"}",
         "hidden_size", "number"},
        {NULL, "{\"architectures\": [\"LlamaForCausalLM\"], \"hidden_size\": -64}",
         "hidden_size", "not an integer in"},
        {", \"head_dim\": 15", NULL, "head_dim", "odd"},
        {", \"attention_bias\": 1", NULL, "attention_bias", NULL},
        {", \"mlp_bias\": \"yes\"", NULL, "mlp_bias", NULL},
        {NULL, "{\"architectures\": [\"LlamaForCausalLM\"], \"hidden_size\": 64, "
               "\"intermediate_size\": 96, \"num_hidden_layers\": 2, \"num_attention_heads\": 4,"
               " \"vocab_size\": 9, \"rope_scaling\": {\"type\": \"longrope\", \"factor\": 2.0}}",
         "rope_scaling.type", "\"longrope\""},
        {NULL, "{\"architectures\": [\"LlamaForCausalLM\"], \"hidden_size\": 64, "
               "\"intermediate_size\": 96, \"num_hidden_layers\": 2, \"num_attention_heads\": 4,"
               " \"vocab_size\": 9, \"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8}}",
         "rope_scaling.low_freq_factor", "missing"},
        {NULL, "{\"architectures\": [\"LlamaForCausalLM\"], \"hidden_size\": 64, "
               "\"intermediate_size\": 96, \"num_hidden_layers\": 2, \"num_attention_heads\": 4,"
               " \"vocab_size\": 9, \"hidden_act\": \"gelu\"}", "hidden_act", "gelu"},
        {NULL, "{\"architectures\": [\"LlamaForCausalLM\"], \"hidden_size\": 64, "
               "\"intermediate_size\": 96, \"num_hidden_layers\": 2, \"num_attention_heads\": 4,"
               " \"num_key_value_heads\": 3, \"vocab_size\": 9}", "num_key_value_heads", NULL},
        {NULL, "{\"architectures\": [\"LlamaForCausalLM\"], \"hidden_size\": 60, "
               "\"intermediate_size\": 96, \"num_hidden_layers\": 2, \"num_attention_heads\": 8,"
               " \"vocab_size\": 9}", "num_attention_heads", "multiple"},
        {NULL, "{\"architectures\": [\"LlamaForCausalLM\"], \"hidden_size\": 60, "
               "\"intermediate_size\": 96, \"num_hidden_layers\": 2, \"num_attention_heads\": 4,"
               " \"vocab_size\": 9}", "head_dim", "odd"},
        {NULL, "{\"architectures\": [\"LlamaForCausalLM\"], \"hidden_size\": 64, "
               "\"intermediate_size\": 96, \"num_hidden_layers\": 2, \"num_attention_heads\": 4,"
               " \"vocab_size\": 9, \"rms_norm_eps\": 0}", "rms_norm_eps", NULL},
        {NULL, "{\"architectures\": [\"LlamaForCausalLM\"], \"hidden_size\": 64, "
               "\"intermediate_size\": 96, \"num_hidden_layers\": 2, \"num_attention_heads\": 4,"
               " \"vocab_size\": 9, \"tie_word_embeddings\": 1}", "tie_word_embeddings", NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        sq_model_config c;
        sq_error err = {0};
        int rc;
        if (cases[i].extra) {
            rc = parse_config_with(cases[i].extra, &c, &err);
        } else {
            cJSON *root;
            cr_assert_eq(sq_json_parse("config.json", cases[i].text, strlen(cases[i].text), &root,
                                       &err), 0, "case %zu", i);
            rc = sq_model_config_parse("config.json", root, &c, &err);
            cJSON_Delete(root);
        }
        cr_assert_eq(rc, SQ_EDATA, "case %zu: rc %d", i, rc);
        cr_assert(strstr(err.msg, "config.json"), "case %zu: %s", i, err.msg);
        cr_assert(strstr(err.msg, cases[i].n1), "case %zu lacks %s: %s", i, cases[i].n1, err.msg);
        if (cases[i].n2)
            cr_assert(strstr(err.msg, cases[i].n2), "case %zu lacks %s: %s", i, cases[i].n2,
                      err.msg);
    }
}

/* ---- loading models ------------------------------------------------------------------ */

static char *write_model(const char *parent, const char *name, const sq_random_model_params *rp)
{
    char *dir = tu_path(parent, name);
    sq_error err = {0};
    cr_assert_eq(sq_model_write_random(dir, rp, &err), 0, "%s", err.msg);
    return dir;
}

static int load_fail(const char *dir, const char *n1, const char *n2)
{
    sq_model *m = NULL;
    sq_error err = {0};
    int rc = sq_model_load(dir, &m, &err);
    cr_assert_neq(rc, 0, "loaded a bad model");
    cr_assert_null(m);
    if (n1)
        cr_assert(strstr(err.msg, n1), "message lacks %s: %s", n1, err.msg);
    if (n2)
        cr_assert(strstr(err.msg, n2), "message lacks %s: %s", n2, err.msg);
    return rc;
}

/* Rewrites <dir>/model.safetensors with tensor `victim` dropped (new_shape NULL), reshaped,
 * or stored as I8 (as_i8). */
static void rewrite_st(const char *dir, const char *victim, const int64_t *new_shape, int ndim,
                       int as_i8)
{
    char *path = tu_path(dir, "model.safetensors");
    char *tmp = tu_path(dir, "orig.safetensors");
    cr_assert_eq(rename(path, tmp), 0);
    sq_st_file *f;
    sq_error err = {0};
    cr_assert_eq(sq_st_open(tmp, &f, &err), 0, "%s", err.msg);
    sq_st_writer *w = sq_st_writer_new();
    for (int i = 0; i < f->n_tensors; i++) {
        const sq_st_tensor *t = &f->tensors[i];
        if (strcmp(t->name, victim) == 0) {
            if (as_i8) {
                int64_t n = (int64_t)t->nbytes;
                cr_assert_eq(sq_st_writer_add(w, t->name, SQ_ST_I8, 1, &n, &err), 0);
            } else if (new_shape) {
                cr_assert_eq(sq_st_writer_add(w, t->name, t->dtype, ndim, new_shape, &err), 0);
            }
            continue;
        }
        cr_assert_eq(sq_st_writer_add(w, t->name, t->dtype, t->ndim, t->shape, &err), 0);
    }
    cr_assert_eq(sq_st_writer_begin(w, path, &err), 0);
    for (int i = 0; i < f->n_tensors; i++) {
        const sq_st_tensor *t = &f->tensors[i];
        if (strcmp(t->name, victim) == 0) {
            if (as_i8) {
                cr_assert_eq(sq_st_writer_put_raw(w, t->data, t->nbytes, &err), 0);
            } else if (new_shape) {
                uint64_t n = sq_st_dtype_size(t->dtype);
                for (int k = 0; k < ndim; k++)
                    n *= (uint64_t)new_shape[k];
                void *z = calloc(n + 1, 1);
                cr_assert_eq(sq_st_writer_put_raw(w, z, n, &err), 0);
                free(z);
            }
            continue;
        }
        cr_assert_eq(sq_st_writer_put_raw(w, t->data, t->nbytes, &err), 0, "%s", err.msg);
    }
    cr_assert_eq(sq_st_writer_finish(w, &err), 0, "%s", err.msg);
    sq_st_writer_free(w);
    sq_st_close(f);
    unlink(tmp);
}

Test(model, load_refuses_a_missing_tensor_naming_it)
{
    char *dir = tu_tmpdir();
    sq_random_model_params rp = sq_random_model_default_params();
    const char *victims[] = {"model.layers.1.mlp.up_proj.weight", "model.norm.weight",
                             "lm_head.weight", "model.embed_tokens.weight",
                             "model.layers.0.input_layernorm.weight"};
    for (size_t i = 0; i < sizeof victims / sizeof victims[0]; i++) {
        char name[16];
        snprintf(name, sizeof name, "m%zu", i);
        char *m = write_model(dir, name, &rp);
        rewrite_st(m, victims[i], NULL, 0, 0);
        cr_assert_eq(load_fail(m, victims[i], "missing"), SQ_EDATA);
    }
    tu_rmtree(dir);
}

Test(model, load_refuses_a_wrong_shape_or_dtype_naming_the_tensor)
{
    char *dir = tu_tmpdir();
    sq_random_model_params rp = sq_random_model_default_params();
    char *m = write_model(dir, "a", &rp);
    int64_t kshape[2] = {64, 64};   /* k_proj must be (kv_dim = 32, 64) with GQA */
    rewrite_st(m, "model.layers.0.self_attn.k_proj.weight", kshape, 2, 0);
    cr_assert_eq(load_fail(m, "model.layers.0.self_attn.k_proj.weight", "[64, 64]"), SQ_EDATA);
    m = write_model(dir, "b", &rp);
    int64_t nshape[2] = {1, 64};
    rewrite_st(m, "model.norm.weight", nshape, 2, 0);
    cr_assert_eq(load_fail(m, "model.norm.weight", "implies [64]"), SQ_EDATA);
    m = write_model(dir, "c", &rp);
    rewrite_st(m, "model.layers.1.mlp.down_proj.weight", NULL, 0, 1);
    cr_assert_eq(load_fail(m, "model.layers.1.mlp.down_proj.weight", "I8"), SQ_EDATA);
    tu_rmtree(dir);
}

Test(model, load_refuses_missing_files_and_directories)
{
    char *dir = tu_tmpdir();
    char *absent = tu_path(dir, "nothing");
    cr_assert_eq(load_fail(absent, "does not exist", NULL), SQ_ENOINPUT);
    sq_random_model_params rp = sq_random_model_default_params();
    char *m = write_model(dir, "a", &rp);
    char *st = tu_path(m, "model.safetensors");
    unlink(st);
    cr_assert_eq(load_fail(m, "model.safetensors.index.json", NULL), SQ_ENOINPUT);
    char *cfg = tu_path(m, "config.json");
    unlink(cfg);
    cr_assert_eq(load_fail(m, "config.json", NULL), SQ_ENOINPUT);
    tu_write(cfg, "{\"architectures\": [\"GPT2LMHeadModel\"]}");
    cr_assert_eq(load_fail(m, "GPT2LMHeadModel", "config.json"), SQ_EDATA);
    tu_rmtree(dir);
}

Test(model, sharded_checkpoints_load_and_bad_indexes_are_refused)
{
    char *dir = tu_tmpdir();
    sq_random_model_params rp = sq_random_model_default_params();
    rp.shards = 3;
    char *m = write_model(dir, "s", &rp);
    cr_assert_not(tu_exists(tu_path(m, "model.safetensors")));
    cr_assert(tu_exists(tu_path(m, "model-00003-of-00003.safetensors")));
    sq_model *model;
    sq_error err = {0};
    cr_assert_eq(sq_model_load(m, &model, &err), 0, "%s", err.msg);
    sq_model_free(model);

    char *index = tu_path(m, "model.safetensors.index.json");
    size_t len;
    char *orig = tu_read(index, &len);
    /* a shard that is not there */
    unlink(tu_path(m, "model-00002-of-00003.safetensors"));
    cr_assert_eq(load_fail(m, "model-00002-of-00003.safetensors", "does not exist"), SQ_ENOINPUT);
    /* a shard name that leaves the directory */
    tu_write(index, "{\"weight_map\": {\"model.norm.weight\": \"../x.safetensors\"}}");
    cr_assert_eq(load_fail(m, "model.norm.weight", "not a file name"), SQ_EDATA);
    /* a tensor its shard does not hold */
    tu_write(index, "{\"weight_map\": {\"model.norm.weight\": "
                    "\"model-00001-of-00003.safetensors\", \"model.embed_tokens.weight\": "
                    "\"model-00003-of-00003.safetensors\"}}");
    int rc = load_fail(m, NULL, NULL);
    cr_assert_eq(rc, SQ_EDATA);
    tu_write(index, "{\"metadata\": {}}");
    cr_assert_eq(load_fail(m, "weight_map", NULL), SQ_EDATA);
    free(orig);
    tu_rmtree(dir);
}

/* ---- the reference forward ------------------------------------------------------------ */

typedef struct ref_layer {
    float *attn_norm, *wq, *wk, *wv, *wo, *ffn_norm, *w_gate, *w_up, *w_down;
} ref_layer;

typedef struct ref_model {
    sq_model_config c;
    float *embed, *norm, *lm_head;
    ref_layer *L;
} ref_model;

/* Reads a tensor and decodes it with the test's own conversions. */
static float *ref_tensor(const sq_st_set *s, const char *name, uint64_t numel)
{
    const sq_st_tensor *t = sq_st_set_find(s, name, NULL);
    cr_assert(t, "%s missing", name);
    cr_assert_eq(t->numel, numel, "%s", name);
    float *out = malloc(numel * sizeof *out);
    const unsigned char *b = t->data;
    for (uint64_t i = 0; i < numel; i++) {
        if (t->dtype == SQ_ST_F32) {
            memcpy(&out[i], b + 4 * i, 4);
        } else {
            uint16_t h = (uint16_t)(b[2 * i] | (b[2 * i + 1] << 8));
            if (t->dtype == SQ_ST_F16) {
                out[i] = (float)half_value(h);
            } else {
                uint32_t u = (uint32_t)h << 16;
                memcpy(&out[i], &u, 4);
            }
        }
    }
    return out;
}

static ref_model *ref_load(const char *dir)
{
    ref_model *r = calloc(1, sizeof *r);
    sq_error err = {0};
    char *cfg = tu_path(dir, "config.json");
    cr_assert_eq(sq_model_config_load(cfg, &r->c, &err), 0, "%s", err.msg);
    sq_st_set *s;
    cr_assert_eq(sq_st_set_open(dir, &s, &err), 0, "%s", err.msg);
    const sq_model_config *c = &r->c;
    uint64_t D = (uint64_t)c->dim, H = (uint64_t)c->hidden_dim, V = (uint64_t)c->vocab_size;
    uint64_t KV = (uint64_t)c->n_kv_heads * c->head_dim;
    r->embed = ref_tensor(s, "model.embed_tokens.weight", V * D);
    r->norm = ref_tensor(s, "model.norm.weight", D);
    r->lm_head = c->tied_embeddings ? r->embed : ref_tensor(s, "lm_head.weight", V * D);
    r->L = calloc((size_t)c->n_layers, sizeof *r->L);
    char nm[128];
#define T(field, suffix, n)                                                    \
    snprintf(nm, sizeof nm, "model.layers.%d.%s", l, suffix);                  \
    r->L[l].field = ref_tensor(s, nm, n)
    for (int l = 0; l < c->n_layers; l++) {
        T(attn_norm, "input_layernorm.weight", D);
        T(wq, "self_attn.q_proj.weight", D * D);
        T(wk, "self_attn.k_proj.weight", KV * D);
        T(wv, "self_attn.v_proj.weight", KV * D);
        T(wo, "self_attn.o_proj.weight", D * D);
        T(ffn_norm, "post_attention_layernorm.weight", D);
        T(w_gate, "mlp.gate_proj.weight", H * D);
        T(w_up, "mlp.up_proj.weight", H * D);
        T(w_down, "mlp.down_proj.weight", D * H);
    }
#undef T
    sq_st_set_free(s);
    return r;
}

static void ref_free(ref_model *r)
{
    for (int l = 0; l < r->c.n_layers; l++) {
        ref_layer *L = &r->L[l];
        float *ps[] = {L->attn_norm, L->wq, L->wk, L->wv, L->wo, L->ffn_norm, L->w_gate, L->w_up,
                       L->w_down};
        for (size_t i = 0; i < 9; i++)
            free(ps[i]);
    }
    free(r->L);
    if (r->lm_head != r->embed)
        free(r->lm_head);
    free(r->embed);
    free(r->norm);
    free(r);
}

static void ref_rmsnorm(double *out, const double *x, const float *w, int d, double eps)
{
    double ss = 0;
    for (int k = 0; k < d; k++)
        ss += x[k] * x[k];
    double s = 1.0 / sqrt(ss / d + eps);
    for (int k = 0; k < d; k++)
        out[k] = w[k] * x[k] * s;
}

/* y = W x with W (rows, cols) */
static void ref_matvec(double *y, const float *W, const double *x, int rows, int cols)
{
    for (int r = 0; r < rows; r++) {
        double a = 0;
        for (int k = 0; k < cols; k++)
            a += (double)W[(size_t)r * cols + k] * x[k];
        y[r] = a;
    }
}

/* rotate_half RoPE at position p on one head vector. */
static void ref_rope(double *v, int hd, int p, double theta)
{
    int half = hd / 2;
    for (int k = 0; k < half; k++) {
        double ang = p * pow(theta, -2.0 * k / hd);
        double a = v[k], b = v[k + half];
        v[k] = a * cos(ang) - b * sin(ang);
        v[k + half] = b * cos(ang) + a * sin(ang);
    }
}

/* Causal forward over tokens[0..T) at positions 0..T-1; logits (T, vocab). */
static void ref_forward(const ref_model *r, const int32_t *tokens, int T, double *logits)
{
    const sq_model_config *c = &r->c;
    int D = c->dim, H = c->hidden_dim, hd = c->head_dim, V = c->vocab_size;
    int KV = c->n_kv_heads * hd, group = c->n_heads / c->n_kv_heads;
    double *x = calloc((size_t)T * D, sizeof *x);
    double *K = calloc((size_t)T * KV, sizeof *K), *Vv = calloc((size_t)T * KV, sizeof *Vv);
    double *Q = calloc((size_t)T * D, sizeof *Q), *att = calloc((size_t)T * D, sizeof *att);
    double *xb = calloc((size_t)D, sizeof *xb), *tmp = calloc((size_t)D, sizeof *tmp);
    double *g = calloc((size_t)H, sizeof *g), *u = calloc((size_t)H, sizeof *u);
    double *sc = calloc((size_t)T, sizeof *sc);
    for (int t = 0; t < T; t++)
        for (int k = 0; k < D; k++)
            x[(size_t)t * D + k] = r->embed[(size_t)tokens[t] * D + k];
    for (int l = 0; l < c->n_layers; l++) {
        const ref_layer *L = &r->L[l];
        for (int t = 0; t < T; t++) {
            ref_rmsnorm(xb, x + (size_t)t * D, L->attn_norm, D, c->norm_eps);
            ref_matvec(Q + (size_t)t * D, L->wq, xb, D, D);
            ref_matvec(K + (size_t)t * KV, L->wk, xb, KV, D);
            ref_matvec(Vv + (size_t)t * KV, L->wv, xb, KV, D);
            for (int h = 0; h < c->n_heads; h++)
                ref_rope(Q + (size_t)t * D + h * hd, hd, t, c->rope_theta);
            for (int h = 0; h < c->n_kv_heads; h++)
                ref_rope(K + (size_t)t * KV + h * hd, hd, t, c->rope_theta);
        }
        for (int t = 0; t < T; t++) {
            for (int h = 0; h < c->n_heads; h++) {
                int kh = h / group;
                double mx = -INFINITY, sum = 0;
                for (int s = 0; s <= t; s++) {
                    double d = 0;
                    for (int e = 0; e < hd; e++)
                        d += Q[(size_t)t * D + h * hd + e] * K[(size_t)s * KV + kh * hd + e];
                    sc[s] = d / sqrt((double)hd);
                    if (sc[s] > mx)
                        mx = sc[s];
                }
                for (int s = 0; s <= t; s++) {
                    sc[s] = exp(sc[s] - mx);
                    sum += sc[s];
                }
                for (int e = 0; e < hd; e++) {
                    double a = 0;
                    for (int s = 0; s <= t; s++)
                        a += sc[s] / sum * Vv[(size_t)s * KV + kh * hd + e];
                    att[(size_t)t * D + h * hd + e] = a;
                }
            }
        }
        for (int t = 0; t < T; t++) {
            double *xt = x + (size_t)t * D;
            ref_matvec(tmp, L->wo, att + (size_t)t * D, D, D);
            for (int k = 0; k < D; k++)
                xt[k] += tmp[k];
            ref_rmsnorm(xb, xt, L->ffn_norm, D, c->norm_eps);
            ref_matvec(g, L->w_gate, xb, H, D);
            ref_matvec(u, L->w_up, xb, H, D);
            for (int k = 0; k < H; k++)
                g[k] = g[k] / (1 + exp(-g[k])) * u[k];
            ref_matvec(tmp, L->w_down, g, D, H);
            for (int k = 0; k < D; k++)
                xt[k] += tmp[k];
        }
    }
    for (int t = 0; t < T; t++) {
        ref_rmsnorm(xb, x + (size_t)t * D, r->norm, D, c->norm_eps);
        ref_matvec(logits + (size_t)t * V, r->lm_head, xb, V, D);
    }
    free(x), free(K), free(Vv), free(Q), free(att), free(xb), free(tmp), free(g), free(u);
    free(sc);
}

/* max |a - b| over n values */
static double max_diff(const float *a, const double *b, int n)
{
    double m = 0;
    for (int i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        if (!(d <= m))
            m = d;   /* NaN propagates */
    }
    return m;
}

/* ---- forward against the reference ------------------------------------------------------ */

typedef struct model_case {
    const char *label;
    const char *dtype;
    int         n_heads, n_kv_heads, tied, shards, layers;
} model_case;

static const model_case cases[] = {
    {"F32 GQA untied", "F32", 4, 2, 0, 1, 2},
    {"F32 MHA tied", "F32", 4, 4, 1, 1, 2},
    {"F32 MQA untied sharded", "F32", 4, 1, 0, 3, 3},
    {"F16 GQA untied", "F16", 4, 2, 0, 1, 2},
    {"BF16 GQA tied", "BF16", 8, 2, 1, 1, 2},
};
#define N_CASES (int)(sizeof cases / sizeof cases[0])

static sq_random_model_params case_params(const model_case *mc, uint64_t seed)
{
    sq_random_model_params rp = sq_random_model_default_params();
    rp.config.n_heads = mc->n_heads;
    rp.config.n_kv_heads = mc->n_kv_heads;
    rp.config.head_dim = rp.config.dim / mc->n_heads;
    rp.config.tied_embeddings = mc->tied;
    rp.config.n_layers = mc->layers;
    rp.config.rope_theta = 500.0f;   /* a small theta makes every rotation count */
    snprintf(rp.config.dtype, sizeof rp.config.dtype, "%s", mc->dtype);
    rp.shards = mc->shards;
    rp.seed = seed;
    return rp;
}

static sq_context *new_ctx(const sq_model *m, int max_context, int max_pending, int threads)
{
    sq_context_params p = sq_context_default_params();
    p.max_context = max_context;
    p.max_pending = max_pending;
    p.threads = threads;
    sq_context *ctx;
    sq_error err = {0};
    cr_assert_eq(sq_context_new(m, &p, &ctx, &err), 0, "%s", err.msg);
    return ctx;
}

#define TOL 1e-4

Test(model, forward_matches_the_plain_reference_in_one_batch_and_token_by_token)
{
    char *dir = tu_tmpdir();
    for (int ci = 0; ci < N_CASES; ci++) {
        const model_case *mc = &cases[ci];
        sq_random_model_params rp = case_params(mc, 100 + (uint64_t)ci);
        char name[8];
        snprintf(name, sizeof name, "m%d", ci);
        char *mdir = write_model(dir, name, &rp);
        sq_model *m;
        sq_error err = {0};
        cr_assert_eq(sq_model_load(mdir, &m, &err), 0, "%s: %s", mc->label, err.msg);
        const sq_model_config *c = sq_model_get_config(m);
        cr_assert_str_eq(c->dtype, mc->dtype);
        cr_assert_eq(c->n_kv_heads, mc->n_kv_heads);
        cr_assert_eq(c->tied_embeddings, mc->tied);
        ref_model *r = ref_load(mdir);
        const int T = 13, V = c->vocab_size;
        int32_t tok[13], pos[13];
        for (int t = 0; t < T; t++) {
            tok[t] = rnd_below(V);
            pos[t] = t;
        }
        double *want = malloc(sizeof(double) * T * V);
        ref_forward(r, tok, T, want);
        float *got = malloc(sizeof(float) * T * V);

        /* all T tokens pending in one call with a causal mask */
        for (int threads = 1; threads <= 2; threads++) {
            sq_context *ctx = new_ctx(m, 64, 16, threads);
            uint8_t mask[13 * 13];
            for (int i = 0; i < T; i++)
                for (int j = 0; j < T; j++)
                    mask[i * T + j] = j <= i;
            cr_assert_eq(sq_context_forward(ctx, tok, pos, mask, T, got, &err), 0, "%s", err.msg);
            double d = max_diff(got, want, T * V);
            cr_assert(d <= TOL, "%s, batch, %d threads: max diff %g", mc->label, threads, d);
            cr_assert_eq(sq_context_pending(ctx), T);
            cr_assert_eq(sq_context_committed(ctx), 0);
            sq_context_free(ctx);
        }
        /* autoregressive: one token, commit, next */
        sq_context *ctx = new_ctx(m, 64, 4, 1);
        for (int t = 0; t < T; t++) {
            uint8_t one = 1;
            int32_t keep = 0;
            cr_assert_eq(sq_context_forward(ctx, &tok[t], &pos[t], &one, 1, got, &err), 0);
            double d = max_diff(got, want + (size_t)t * V, V);
            cr_assert(d <= TOL, "%s, token %d: max diff %g", mc->label, t, d);
            cr_assert_eq(sq_context_commit(ctx, &keep, 1, &err), 0);
        }
        cr_assert_eq(sq_context_committed(ctx), T);
        /* reset drops everything: the same first token gives the same logits */
        sq_context_reset(ctx);
        cr_assert_eq(sq_context_committed(ctx), 0);
        uint8_t one = 1;
        cr_assert_eq(sq_context_forward(ctx, tok, pos, &one, 1, got, &err), 0);
        cr_assert(max_diff(got, want, V) <= TOL);
        sq_context_free(ctx);
        free(got);
        free(want);
        ref_free(r);
        sq_model_free(m);
    }
    tu_rmtree(dir);
}

Test(model, half_precision_models_stay_close_to_the_f32_model_of_the_same_seed)
{
    char *dir = tu_tmpdir();
    const char *dts[3] = {"F32", "F16", "BF16"};
    const double tol[3] = {0, 0.01, 0.06};   /* relative to the largest |logit| */
    float *logits[3];
    double scale = 0;
    for (int d = 0; d < 3; d++) {
        model_case mc = {"", dts[d], 4, 2, 0, 1, 2};
        sq_random_model_params rp = case_params(&mc, 77);
        char *mdir = write_model(dir, dts[d], &rp);
        sq_model *m;
        sq_error err = {0};
        cr_assert_eq(sq_model_load(mdir, &m, &err), 0, "%s", err.msg);
        sq_context *ctx = new_ctx(m, 8, 8, 1);
        int32_t tok[4] = {5, 17, 3, 90}, pos[4] = {0, 1, 2, 3};
        uint8_t mask[16];
        for (int i = 0; i < 16; i++)
            mask[i] = i % 4 <= i / 4;
        logits[d] = malloc(sizeof(float) * 4 * 97);
        cr_assert_eq(sq_context_forward(ctx, tok, pos, mask, 4, logits[d], &err), 0);
        sq_context_free(ctx);
        sq_model_free(m);
    }
    for (int i = 0; i < 4 * 97; i++)
        scale = fmax(scale, fabs(logits[0][i]));
    cr_assert(scale > 1.0, "logits too small to compare: %g", scale);
    for (int d = 1; d < 3; d++) {
        double md = 0, any = 0;
        for (int i = 0; i < 4 * 97; i++) {
            md = fmax(md, fabs(logits[d][i] - logits[0][i]));
            any += logits[d][i] != logits[0][i];
        }
        cr_assert(md <= tol[d] * scale, "%s: max diff %g, scale %g", dts[d], md, scale);
        cr_assert(any > 0, "%s logits identical to F32: the dtype was not applied", dts[d]);
    }
    for (int d = 0; d < 3; d++)
        free(logits[d]);
    tu_rmtree(dir);
}

/* A random tree of n nodes: parent[i] < i, parent[0] = -1. */
static void random_tree(int n, int *parent, int *depth)
{
    parent[0] = -1;
    depth[0] = 0;
    for (int i = 1; i < n; i++) {
        /* favour recent nodes so that trees get deep as well as wide */
        int lo = i > 4 ? i - 4 - rnd_below(i - 3) : 0;
        parent[i] = lo + rnd_below(i - lo);
        depth[i] = depth[parent[i]] + 1;
    }
}

static int is_ancestor_or_self(const int *parent, int a, int i)
{
    for (; i >= 0; i = parent[i])
        if (i == a)
            return 1;
    return 0;
}

Test(model, tree_forward_equals_the_forward_over_each_root_path_and_commit_continues_exactly)
{
    char *dir = tu_tmpdir();
    for (int ci = 0; ci < N_CASES; ci++) {
        const model_case *mc = &cases[ci];
        sq_random_model_params rp = case_params(mc, 500 + (uint64_t)ci);
        char name[8];
        snprintf(name, sizeof name, "t%d", ci);
        char *mdir = write_model(dir, name, &rp);
        sq_model *m;
        sq_error err = {0};
        cr_assert_eq(sq_model_load(mdir, &m, &err), 0, "%s", err.msg);
        ref_model *r = ref_load(mdir);
        const int V = sq_model_get_config(m)->vocab_size;
        for (int trial = 0; trial < 3; trial++) {
            const int PL = 1 + rnd_below(6), N = 6 + rnd_below(20), MORE = 3;
            int parent[32], depth[32];
            random_tree(N, parent, depth);
            int32_t prompt[8], ppos[8], tree_tok[32], tree_pos[32];
            for (int t = 0; t < PL; t++) {
                prompt[t] = rnd_below(V);
                ppos[t] = t;
            }
            for (int i = 0; i < N; i++) {
                tree_tok[i] = rnd_below(V);
                tree_pos[i] = PL + depth[i];
            }
            sq_context *ctx = new_ctx(m, 64, 32, 1 + trial % 2);
            float *lg = malloc(sizeof(float) * 32 * V);
            /* the prompt: one forward, commit all */
            uint8_t pmask[64];
            for (int i = 0; i < PL; i++)
                for (int j = 0; j < PL; j++)
                    pmask[i * PL + j] = j <= i;
            cr_assert_eq(sq_context_forward(ctx, prompt, ppos, pmask, PL, lg, &err), 0);
            int32_t all[8] = {0, 1, 2, 3, 4, 5, 6, 7};
            cr_assert_eq(sq_context_commit(ctx, all, PL, &err), 0);
            /* the tree, in two calls: nodes [0, split) then [split, N) */
            int split = 1 + rnd_below(N - 1);
            float *tl = malloc(sizeof(float) * N * V);
            for (int part = 0; part < 2; part++) {
                int a = part ? split : 0, b = part ? N : split, width = b;
                uint8_t *mask = calloc((size_t)(b - a) * width, 1);
                for (int i = a; i < b; i++)
                    for (int j = 0; j < width; j++)
                        mask[(i - a) * width + j] = (uint8_t)is_ancestor_or_self(parent, j, i);
                cr_assert_eq(sq_context_forward(ctx, tree_tok + a, tree_pos + a, mask, b - a,
                                                tl + (size_t)a * V, &err), 0, "%s", err.msg);
                free(mask);
            }
            cr_assert_eq(sq_context_pending(ctx), N);
            /* each node against the reference over prompt + its root path */
            for (int i = 0; i < N; i++) {
                int32_t seq[64];
                int len = depth[i] + 1;
                memcpy(seq, prompt, sizeof(int32_t) * PL);
                for (int v = i, k = len - 1; v >= 0; v = parent[v], k--)
                    seq[PL + k] = tree_tok[v];
                double *want = malloc(sizeof(double) * (PL + len) * V);
                ref_forward(r, seq, PL + len, want);
                double d = max_diff(tl + (size_t)i * V, want + (size_t)(PL + len - 1) * V, V);
                cr_assert(d <= TOL, "%s trial %d node %d (depth %d): max diff %g", mc->label,
                          trial, i, depth[i], d);
                free(want);
            }
            /* accept the path to the deepest node, then continue with MORE tokens */
            int leaf = 0;
            for (int i = 0; i < N; i++)
                if (depth[i] > depth[leaf])
                    leaf = i;
            int32_t keep[32];
            int nk = depth[leaf] + 1;
            for (int v = leaf, k = nk - 1; v >= 0; v = parent[v], k--)
                keep[k] = v;
            cr_assert_eq(sq_context_commit(ctx, keep, nk, &err), 0, "%s", err.msg);
            cr_assert_eq(sq_context_committed(ctx), PL + nk);
            cr_assert_eq(sq_context_pending(ctx), 0);
            int32_t seq[64], more[3], mpos[3];
            memcpy(seq, prompt, sizeof(int32_t) * PL);
            for (int k = 0; k < nk; k++)
                seq[PL + k] = tree_tok[keep[k]];
            for (int k = 0; k < MORE; k++) {
                more[k] = rnd_below(V);
                mpos[k] = PL + nk + k;
                seq[PL + nk + k] = more[k];
            }
            uint8_t mmask[9];
            for (int i = 0; i < MORE; i++)
                for (int j = 0; j < MORE; j++)
                    mmask[i * MORE + j] = j <= i;
            cr_assert_eq(sq_context_forward(ctx, more, mpos, mmask, MORE, lg, &err), 0);
            int total = PL + nk + MORE;
            double *want = malloc(sizeof(double) * total * V);
            ref_forward(r, seq, total, want);
            double d = max_diff(lg, want + (size_t)(PL + nk) * V, MORE * V);
            cr_assert(d <= TOL, "%s trial %d after commit: max diff %g", mc->label, trial, d);
            free(want);
            free(tl);
            free(lg);
            sq_context_free(ctx);
        }
        ref_free(r);
        sq_model_free(m);
    }
    tu_rmtree(dir);
}

Test(model, commit_accepts_keep_slots_in_any_order)
{
    /* keep {2, 0}: slot 2 becomes committed position C, slot 0 position C+1. Its tokens were
     * fed at the positions they end up at, so the result equals the plain sequence. */
    char *dir = tu_tmpdir();
    sq_random_model_params rp = sq_random_model_default_params();
    char *mdir = write_model(dir, "m", &rp);
    sq_model *m;
    sq_error err = {0};
    cr_assert_eq(sq_model_load(mdir, &m, &err), 0);
    ref_model *r = ref_load(mdir);
    int V = sq_model_get_config(m)->vocab_size;
    sq_context *ctx = new_ctx(m, 16, 8, 1);
    int32_t tok[3] = {7, 8, 9}, pos[3] = {1, 5, 0};
    uint8_t mask[9] = {1, 0, 1, 0, 1, 0, 0, 0, 1};   /* 0 sees 2; 2 sees itself */
    float lg[3 * 97];
    cr_assert_eq(sq_context_forward(ctx, tok, pos, mask, 3, lg, &err), 0);
    int32_t keep[2] = {2, 0};
    cr_assert_eq(sq_context_commit(ctx, keep, 2, &err), 0);
    int32_t nxt = 11, npos = 2;
    uint8_t one = 1;
    cr_assert_eq(sq_context_forward(ctx, &nxt, &npos, &one, 1, lg, &err), 0);
    int32_t seq[3] = {9, 7, 11};
    double want[3 * 97];
    ref_forward(r, seq, 3, want);
    cr_assert(max_diff(lg, want + 2 * V, V) <= TOL);
    ref_free(r);
    sq_context_free(ctx);
    sq_model_free(m);
    tu_rmtree(dir);
}

Test(model, tied_lm_head_stored_in_the_file_is_ignored_like_transformers)
{
    char *dir = tu_tmpdir();
    sq_random_model_params rp = sq_random_model_default_params();
    rp.config.tied_embeddings = 1;
    rp.write_tied_lm_head = 1;
    char *mdir = write_model(dir, "m", &rp);
    sq_model *m;
    sq_error err = {0};
    cr_assert_eq(sq_model_load(mdir, &m, &err), 0, "%s", err.msg);
    ref_model *r = ref_load(mdir);
    sq_context *ctx = new_ctx(m, 4, 4, 1);
    int32_t tok = 3, pos = 0;
    uint8_t one = 1;
    float lg[97];
    double want[97];
    cr_assert_eq(sq_context_forward(ctx, &tok, &pos, &one, 1, lg, &err), 0);
    ref_forward(r, &tok, 1, want);
    cr_assert(max_diff(lg, want, 97) <= TOL);
    sq_context_free(ctx);
    ref_free(r);
    sq_model_free(m);
    tu_rmtree(dir);
}

/* ---- context misuse ------------------------------------------------------------------ */

Test(model, context_refuses_misuse_with_usage_errors_and_keeps_its_state)
{
    char *dir = tu_tmpdir();
    sq_random_model_params rp = sq_random_model_default_params();
    char *mdir = write_model(dir, "m", &rp);
    sq_model *m;
    sq_error err = {0};
    cr_assert_eq(sq_model_load(mdir, &m, &err), 0);

    sq_context_params p = sq_context_default_params();
    p.backend = SQ_BACKEND_CUDA;
    sq_context *ctx = (sq_context *)0x1;
    if (sq_cuda_device_count(NULL) == 0) {   /* no CUDA build, or no GPU: refused */
        cr_assert_eq(sq_context_new(m, &p, &ctx, &err), SQ_EUSAGE);
        cr_assert_null(ctx);
        cr_assert(strstr(err.msg, "this build has no CUDA backend") ||
                  strstr(err.msg, "CUDA device"), "%s", err.msg);
        err = (sq_error){0};
    }
    ctx = (sq_context *)0x1;
    p = sq_context_default_params();
    p.max_pending = 0;
    err.status = 0;
    cr_assert_eq(sq_context_new(m, &p, &ctx, &err), SQ_EUSAGE);

    ctx = new_ctx(m, 3, 2, 1);
    float lg[3 * 97];
    int32_t tok[3] = {1, 2, 3}, pos[3] = {0, 1, 2};
    uint8_t mask[9] = {1, 0, 0, 1, 1, 0, 1, 1, 1};
    err.status = 0;
    cr_assert_eq(sq_context_forward(ctx, tok, pos, mask, 3, lg, &err), SQ_EUSAGE);
    cr_assert(strstr(err.msg, "max_pending 2"), "%s", err.msg);
    int32_t bad_tok[1] = {97};
    err.status = 0;
    cr_assert_eq(sq_context_forward(ctx, bad_tok, pos, mask, 1, lg, &err), SQ_EDATA);
    cr_assert(strstr(err.msg, "97"), "%s", err.msg);
    int32_t neg_pos[1] = {-1};
    err.status = 0;
    cr_assert_eq(sq_context_forward(ctx, tok, neg_pos, mask, 1, lg, &err), SQ_EUSAGE);
    uint8_t zero = 0;
    err.status = 0;
    cr_assert_eq(sq_context_forward(ctx, tok, pos, &zero, 1, lg, &err), SQ_EUSAGE);
    cr_assert(strstr(err.msg, "attends to nothing"), "%s", err.msg);
    cr_assert_eq(sq_context_pending(ctx), 0, "a refused forward changed the state");

    uint8_t m2[4] = {1, 0, 1, 1};
    err.status = 0;
    cr_assert_eq(sq_context_forward(ctx, tok, pos, m2, 2, lg, &err), 0);
    int32_t keep_bad[2] = {0, 2};
    cr_assert_eq(sq_context_commit(ctx, keep_bad, 2, &err), SQ_EUSAGE);
    int32_t keep_dup[2] = {1, 1};
    err.status = 0;
    cr_assert_eq(sq_context_commit(ctx, keep_dup, 2, &err), SQ_EUSAGE);
    cr_assert(strstr(err.msg, "twice"), "%s", err.msg);
    cr_assert_eq(sq_context_pending(ctx), 2);
    int32_t keep[2] = {0, 1};
    err.status = 0;
    cr_assert_eq(sq_context_commit(ctx, keep, 2, &err), 0);
    /* max_context 3: one more fits, two do not */
    cr_assert_eq(sq_context_forward(ctx, tok, pos, m2, 2, lg, &err), 0);
    cr_assert_eq(sq_context_commit(ctx, keep, 2, &err), SQ_EUSAGE);
    cr_assert(strstr(err.msg, "max_context 3"), "%s", err.msg);
    err.status = 0;
    cr_assert_eq(sq_context_commit(ctx, keep, 1, &err), 0);
    cr_assert_eq(sq_context_committed(ctx), 3);
    /* a full context still runs forwards with an empty mask row: committed tokens suffice */
    cr_assert_eq(sq_context_forward(ctx, tok, pos, &zero, 1, lg, &err), 0);
    cr_assert_eq(sq_context_commit(ctx, NULL, 0, &err), 0, "%s", err.msg);
    cr_assert_eq(sq_context_committed(ctx), 3);
    sq_context_free(ctx);
    sq_model_free(m);
    tu_rmtree(dir);
}

Test(model, cblas_resolves_to_openblas_not_the_gsl_reference_blas)
{
    Dl_info info;
    void *sym = dlsym(RTLD_DEFAULT, "cblas_sgemm");
    cr_assert(sym, "cblas_sgemm not found");
    cr_assert(dladdr(sym, &info) && info.dli_fname);
    cr_assert(strstr(info.dli_fname, "openblas"), "cblas_sgemm comes from %s", info.dli_fname);
    (void)cblas_sgemm;
}

Test(model, chunked_prefill_and_threaded_attention_match_the_reference)
{
    /* 160 tokens fed in chunks of 64 (each chunk attends the committed ones plus its causal
     * part), then 64 tokens in one call: large enough for attention to split over threads. */
    char *dir = tu_tmpdir();
    sq_random_model_params rp = sq_random_model_default_params();
    rp.config.rope_theta = 500.0f;
    char *mdir = write_model(dir, "m", &rp);
    sq_model *m;
    sq_error err = {0};
    cr_assert_eq(sq_model_load(mdir, &m, &err), 0);
    ref_model *r = ref_load(mdir);
    const int V = sq_model_get_config(m)->vocab_size, PRE = 160, N = 64, T = PRE + N;
    int32_t tok[224], pos[224];
    for (int t = 0; t < T; t++) {
        tok[t] = rnd_below(V);
        pos[t] = t;
    }
    double *want = malloc(sizeof(double) * T * V);
    ref_forward(r, tok, T, want);
    uint8_t *mask = malloc((size_t)N * N);
    for (int i = 0; i < N; i++)
        for (int j = 0; j < N; j++)
            mask[i * N + j] = j <= i;
    int32_t keep[64];
    for (int k = 0; k < 64; k++)
        keep[k] = k;
    float *lg = malloc(sizeof(float) * N * V);
    for (int threads = 1; threads <= 3; threads++) {
        sq_context *ctx = new_ctx(m, 256, 64, threads);
        for (int a = 0; a < PRE; a += N) {
            int n = PRE - a < N ? PRE - a : N;
            uint8_t *cm = malloc((size_t)n * n);
            for (int i = 0; i < n; i++)
                for (int j = 0; j < n; j++)
                    cm[i * n + j] = j <= i;
            cr_assert_eq(sq_context_forward(ctx, tok + a, pos + a, cm, n, lg, &err), 0);
            double d = max_diff(lg, want + (size_t)a * V, n * V);
            cr_assert(d <= TOL, "%d threads, chunk at %d: max diff %g", threads, a, d);
            cr_assert_eq(sq_context_commit(ctx, keep, n, &err), 0);
            free(cm);
        }
        cr_assert_eq(sq_context_forward(ctx, tok + PRE, pos + PRE, mask, N, lg, &err), 0);
        double d = max_diff(lg, want + (size_t)PRE * V, N * V);
        cr_assert(d <= TOL, "%d threads, last %d tokens: max diff %g", threads, N, d);
        sq_context_free(ctx);
    }
    free(lg);
    free(mask);
    free(want);
    ref_free(r);
    sq_model_free(m);
    tu_rmtree(dir);
}

/* ---- batched forward (sq_context_forward_batch) ----------------------------------------- */

/* B sequences with their own prompts (of different lengths), trees and pending parts go through
 * one batched forward: every node's logits equal the plain reference over its own prompt and
 * root path, and the contexts continue exactly after commit, one sequence at a time. */
Test(model, batched_forward_equals_the_reference_per_sequence_with_different_lengths_and_trees)
{
    char *dir = tu_tmpdir();
    for (int ci = 0; ci < N_CASES; ci++) {
        const model_case *mc = &cases[ci];
        sq_random_model_params rp = case_params(mc, 900 + (uint64_t)ci);
        char name[8];
        snprintf(name, sizeof name, "b%d", ci);
        char *mdir = write_model(dir, name, &rp);
        sq_model *m;
        sq_error err = {0};
        cr_assert_eq(sq_model_load(mdir, &m, &err), 0, "%s", err.msg);
        ref_model *r = ref_load(mdir);
        const int V = sq_model_get_config(m)->vocab_size;
        enum { BMAX = 5 };
        for (int trial = 0; trial < 3; trial++) {
            const int B = 1 + (trial * 2 + ci) % BMAX;
            sq_context *ctx[BMAX];
            int PL[BMAX], N[BMAX], pre[BMAX], parent[BMAX][32], depth[BMAX][32];
            int32_t prompt[BMAX][12], tok[BMAX][32], pos[BMAX][32];
            uint8_t *mask[BMAX];
            float *lg[BMAX];
            sq_batch_seq seqs[BMAX];
            for (int k = 0; k < B; k++) {
                PL[k] = 1 + rnd_below(11);
                N[k] = 2 + rnd_below(20);
                pre[k] = rnd_below(N[k]);   /* nodes already pending before the batch */
                random_tree(N[k], parent[k], depth[k]);
                ctx[k] = new_ctx(m, 64, 32, 1 + (k + trial) % 2);
                lg[k] = malloc(sizeof(float) * 32 * (size_t)V);
                int32_t ppos[12], all[12];
                uint8_t pm[144];
                for (int t = 0; t < PL[k]; t++) {
                    prompt[k][t] = rnd_below(V);
                    ppos[t] = t;
                    all[t] = t;
                    for (int j = 0; j < PL[k]; j++)
                        pm[t * PL[k] + j] = j <= t;
                }
                cr_assert_eq(sq_context_forward(ctx[k], prompt[k], ppos, pm, PL[k], lg[k], &err),
                             0, "%s", err.msg);
                cr_assert_eq(sq_context_commit(ctx[k], all, PL[k], &err), 0, "%s", err.msg);
                for (int i = 0; i < N[k]; i++) {
                    tok[k][i] = rnd_below(V);
                    pos[k][i] = PL[k] + depth[k][i];
                }
                mask[k] = calloc((size_t)N[k] * N[k], 1);
                if (pre[k] > 0) {
                    for (int i = 0; i < pre[k]; i++)
                        for (int j = 0; j < pre[k]; j++)
                            mask[k][i * pre[k] + j] = (uint8_t)is_ancestor_or_self(parent[k], j, i);
                    cr_assert_eq(sq_context_forward(ctx[k], tok[k], pos[k], mask[k], pre[k],
                                                    lg[k], &err), 0, "%s", err.msg);
                }
                for (int i = pre[k]; i < N[k]; i++)
                    for (int j = 0; j < N[k]; j++)
                        mask[k][(i - pre[k]) * N[k] + j] =
                            (uint8_t)is_ancestor_or_self(parent[k], j, i);
                seqs[k] = (sq_batch_seq){ctx[k], tok[k] + pre[k], pos[k] + pre[k], mask[k],
                                         N[k] - pre[k], lg[k] + (size_t)pre[k] * V};
            }
            cr_assert_eq(sq_context_forward_batch(seqs, B, &err), 0, "%s", err.msg);
            for (int k = 0; k < B; k++) {
                cr_assert_eq(sq_context_pending(ctx[k]), N[k]);
                for (int i = pre[k]; i < N[k]; i++) {
                    int32_t seq[64];
                    int len = depth[k][i] + 1;
                    memcpy(seq, prompt[k], sizeof(int32_t) * PL[k]);
                    for (int v = i, j = len - 1; v >= 0; v = parent[k][v], j--)
                        seq[PL[k] + j] = tok[k][v];
                    double *want = malloc(sizeof(double) * (PL[k] + len) * V);
                    ref_forward(r, seq, PL[k] + len, want);
                    double d = max_diff(lg[k] + (size_t)i * V,
                                        want + (size_t)(PL[k] + len - 1) * V, V);
                    cr_assert(d <= TOL, "%s trial %d B %d seq %d node %d: max diff %g", mc->label,
                              trial, B, k, i, d);
                    free(want);
                }
                /* accept the root path of the last node, then one more token alone */
                int32_t keep[32];
                int nk = depth[k][N[k] - 1] + 1;
                for (int v = N[k] - 1, j = nk - 1; v >= 0; v = parent[k][v], j--)
                    keep[j] = v;
                cr_assert_eq(sq_context_commit(ctx[k], keep, nk, &err), 0, "%s", err.msg);
                int32_t seq[64], one = rnd_below(V), opos = PL[k] + nk;
                uint8_t om = 1;
                memcpy(seq, prompt[k], sizeof(int32_t) * PL[k]);
                for (int j = 0; j < nk; j++)
                    seq[PL[k] + j] = tok[k][keep[j]];
                seq[PL[k] + nk] = one;
                cr_assert_eq(sq_context_forward(ctx[k], &one, &opos, &om, 1, lg[k], &err), 0);
                double *want = malloc(sizeof(double) * (PL[k] + nk + 1) * V);
                ref_forward(r, seq, PL[k] + nk + 1, want);
                double d = max_diff(lg[k], want + (size_t)(PL[k] + nk) * V, V);
                cr_assert(d <= TOL, "%s trial %d seq %d after commit: max diff %g", mc->label,
                          trial, k, d);
                free(want);
                free(mask[k]);
                free(lg[k]);
                sq_context_free(ctx[k]);
            }
        }
        ref_free(r);
        sq_model_free(m);
    }
    tu_rmtree(dir);
}

Test(model, batched_forward_refuses_shared_contexts_other_models_and_bad_rows_by_sequence)
{
    char *dir = tu_tmpdir();
    sq_random_model_params rp = sq_random_model_default_params();
    char *m1dir = write_model(dir, "m1", &rp);
    rp.seed = 77;
    char *m2dir = write_model(dir, "m2", &rp);
    sq_model *m1, *m2;
    sq_error err = {0};
    cr_assert_eq(sq_model_load(m1dir, &m1, &err), 0, "%s", err.msg);
    cr_assert_eq(sq_model_load(m2dir, &m2, &err), 0, "%s", err.msg);
    sq_context *a = new_ctx(m1, 16, 8, 1), *b = new_ctx(m1, 16, 8, 1), *c = new_ctx(m2, 16, 8, 1);
    const int V = sq_model_get_config(m1)->vocab_size;
    float *lg = malloc(sizeof(float) * 4 * V);
    int32_t t0 = 1, bad = V, p0 = 0;
    uint8_t one = 1;
    sq_batch_seq s[2] = {{a, &t0, &p0, &one, 1, lg}, {a, &t0, &p0, &one, 1, lg + V}};
    cr_assert_eq(sq_context_forward_batch(s, 2, &err), SQ_EUSAGE);
    cr_assert(strstr(err.msg, "share a context"), "%s", err.msg);
    s[1].ctx = c;
    err = (sq_error){0};
    cr_assert_eq(sq_context_forward_batch(s, 2, &err), SQ_EUSAGE);
    cr_assert(strstr(err.msg, "sequence 1") && strstr(err.msg, "model"), "%s", err.msg);
    err = (sq_error){0};
    s[1] = (sq_batch_seq){b, &bad, &p0, &one, 1, lg + V};
    cr_assert_eq(sq_context_forward_batch(s, 2, &err), SQ_EDATA);
    cr_assert(strstr(err.msg, "sequence 1") && strstr(err.msg, "tokens[0]"), "%s", err.msg);
    err = (sq_error){0};
    cr_assert_eq(sq_context_forward_batch(s, 0, &err), SQ_EUSAGE);
    err = (sq_error){0};
    /* nothing became pending on a refusal */
    cr_assert_eq(sq_context_pending(a), 0);
    cr_assert_eq(sq_context_pending(b), 0);
    s[1].tokens = &t0;
    cr_assert_eq(sq_context_forward_batch(s, 2, &err), 0, "%s", err.msg);
    cr_assert_eq(sq_context_pending(a), 1);
    cr_assert_eq(sq_context_pending(b), 1);
    /* both rows equal the single forward of the same token */
    float *single = malloc(sizeof(float) * V);
    sq_context *d = new_ctx(m1, 16, 8, 1);
    cr_assert_eq(sq_context_forward(d, &t0, &p0, &one, 1, single, &err), 0);
    for (int x = 0; x < V; x++) {
        cr_assert(fabsf(lg[x] - single[x]) <= 1e-5f, "row 0 logit %d", x);
        cr_assert(fabsf(lg[V + x] - single[x]) <= 1e-5f, "row 1 logit %d", x);
    }
    free(single);
    free(lg);
    sq_context_free(a);
    sq_context_free(b);
    sq_context_free(c);
    sq_context_free(d);
    sq_model_free(m1);
    sq_model_free(m2);
    tu_rmtree(dir);
}

/* ---- the architecture table (runtime/arch.h) and the memory estimate (runtime/memory.h) ---- */

/* The parameter count as the Llama layout spells it out, independently of the table. */
static size_t llama_params(const sq_model_config *c)
{
    size_t dim = (size_t)c->dim, hid = (size_t)c->hidden_dim, vocab = (size_t)c->vocab_size;
    size_t q = (size_t)c->n_heads * c->head_dim, kv = (size_t)c->n_kv_heads * c->head_dim;
    size_t layer = 2 * dim + q * dim + 2 * kv * dim + dim * q + 3 * hid * dim;
    return vocab * dim * (c->tied_embeddings ? 1 : 2) + dim + (size_t)c->n_layers * layer;
}

Test(model, arch_table_lists_every_tensor_of_a_written_checkpoint_with_its_config_shape)
{
    char *dir = tu_tmpdir();
    for (int variant = 0; variant < 3; variant++) {
        sq_random_model_params rp = sq_random_model_default_params();
        rp.config.n_layers = 3;
        rp.config.tied_embeddings = variant > 0;
        rp.write_tied_lm_head = variant == 2;
        rp.shards = variant == 1 ? 3 : 1;
        char name[16];
        snprintf(name, sizeof name, "v%d", variant);
        char *m = write_model(dir, name, &rp);
        const sq_model_config *c = &rp.config;
        cr_assert_eq(sq_model_config_params(c), llama_params(c));
        sq_st_set *set;
        sq_error err = {0};
        cr_assert_eq(sq_st_set_open(m, &set, &err), 0, "%s", err.msg);
        sq_model *model;
        cr_assert_eq(sq_model_load(m, &model, &err), 0, "%s", err.msg);
        cr_assert_eq(model->config.arch, SQ_ARCH_LLAMA);
        const int count = sq_arch_count(c);
        cr_assert_eq(count, 9 * 3 + 3);
        int in_file = 0, file_tensors = 0;
        for (int f = 0; f < set->n_files; f++)
            file_tensors += set->files[f]->n_tensors;
        for (int k = 0; k < count; k++) {
            sq_arch_item it;
            sq_arch_tensor_at(c, k, &it);
            const sq_st_file *f = NULL;
            const sq_st_tensor *t = sq_st_set_find(set, it.name, &f);
            if (it.tied && !rp.write_tied_lm_head) {
                cr_assert_null(t, "%s: written though tied", it.name);
            } else {
                cr_assert(t, "%s: not written", it.name);
                in_file++;
                cr_assert_eq(t->ndim, it.ndim, "%s", it.name);
                for (int d = 0; d < it.ndim; d++)
                    cr_assert_eq(t->shape[d], it.shape[d], "%s dim %d", it.name, d);
                cr_assert_eq(t->numel, it.numel, "%s", it.name);
            }
            /* every tensor is loaded into its slot; a tied one is the embedding itself */
            const sq_wt view = *sq_arch_slot(&model->w, &it);
            cr_assert_not_null(view.p, "%s: not loaded", it.name);
            if (it.tied)
                cr_assert_eq(view.p, model->w.t[SQ_M_EMBED].p, "%s", it.name);
        }
        cr_assert_eq(in_file, file_tensors, "variant %d: the file has tensors the table lacks",
                     variant);
        /* every slot the table names is set, and no other */
        for (int l = 0; l < c->n_layers; l++) {
            sq_arch_item items[64];
            const int ni = sq_arch_items(c, l, items, 64);
            for (int sl = 0; sl < SQ_L_COUNT; sl++) {
                int listed = 0;
                for (int j = 0; j < ni; j++)
                    listed |= items[j].t->slot == sl;
                cr_assert_eq(model->w.layers[l].t[sl].p != NULL, listed, "layer %d slot %d", l, sl);
            }
        }
        for (int sl = 0; sl < SQ_M_COUNT; sl++)
            cr_assert_not_null(model->w.t[sl].p, "model slot %d", sl);
        sq_model_free(model);
        sq_st_set_free(set);
    }
    tu_rmtree(dir);
}

Test(model, load_refuses_every_missing_required_tensor_naming_the_directory_and_tensor)
{
    char *dir = tu_tmpdir();
    sq_random_model_params rp = sq_random_model_default_params();
    const int count = sq_arch_count(&rp.config);
    cr_assert_eq(SQ_EDATA, 65);   /* the tools' exit status for it */
    for (int k = 0; k < count; k++) {
        sq_arch_item it;
        sq_arch_tensor_at(&rp.config, k, &it);
        cr_assert(!it.t->optional, "Llama has no optional tensor");
        char name[16];
        snprintf(name, sizeof name, "m%d", k);
        char *m = write_model(dir, name, &rp);
        rewrite_st(m, it.name, NULL, 0, 0);
        sq_model *model = NULL;
        sq_error err = {0};
        cr_assert_eq(sq_model_load(m, &model, &err), SQ_EDATA, "%s", it.name);
        cr_assert_null(model);
        cr_assert(strstr(err.msg, m) && strstr(err.msg, it.name) && strstr(err.msg, "missing"),
                  "%s", err.msg);
    }
    tu_rmtree(dir);
}

/* Writes the float32 weights of `m` as a checkpoint through the table's names and shapes. */
static void write_weights(const sq_model *m, const char *dir)
{
    sq_error err = {0};
    cr_assert_eq(mkdir(dir, 0755), 0);
    cJSON *cj = sq_model_config_to_json(&m->config);
    cr_assert(cj);
    char *text = cJSON_Print(cj);
    tu_write(tu_path(dir, "config.json"), text);
    free(text);
    cJSON_Delete(cj);
    sq_st_writer *w = sq_st_writer_new();
    const int count = sq_arch_count(&m->config);
    sq_weights *ws = (sq_weights *)&m->w;
    for (int pass = 0; pass < 2; pass++) {
        if (pass == 1)
            cr_assert_eq(sq_st_writer_begin(w, tu_path(dir, "model.safetensors"), &err), 0, "%s",
                         err.msg);
        for (int k = 0; k < count; k++) {
            sq_arch_item it;
            sq_arch_tensor_at(&m->config, k, &it);
            if (it.tied)
                continue;
            if (pass == 0)
                cr_assert_eq(sq_st_writer_add(w, it.name, SQ_ST_F32, it.ndim, it.shape, &err), 0,
                             "%s", err.msg);
            else
                cr_assert_eq(sq_st_writer_put(w, sq_arch_slot(ws, &it)->p, (size_t)it.numel, &err),
                             0, "%s", err.msg);
        }
    }
    cr_assert_eq(sq_st_writer_finish(w, &err), 0, "%s", err.msg);
    sq_st_writer_free(w);
}

Test(model, random_weights_written_through_the_table_load_back_bit_for_bit)
{
    char *dir = tu_tmpdir();
    for (int tied = 0; tied < 2; tied++) {
        sq_random_model_params rp = sq_random_model_default_params();
        rp.config.tied_embeddings = tied;
        sq_model *r, *l;
        sq_error err = {0};
        cr_assert_eq(sq_model_new_random(&rp.config, 7, &r, &err), 0, "%s", err.msg);
        cr_assert_eq(r->owned_bytes, (size_t)sq_weights_bytes(&rp.config));
        char *m = tu_path(dir, tied ? "tied" : "untied");
        write_weights(r, m);
        cr_assert_eq(sq_model_load(m, &l, &err), 0, "%s", err.msg);
        const int count = sq_arch_count(&rp.config);
        for (int k = 0; k < count; k++) {
            sq_arch_item it;
            sq_arch_tensor_at(&rp.config, k, &it);
            const void *a = sq_arch_slot(&r->w, &it)->p, *b = sq_arch_slot(&l->w, &it)->p;
            cr_assert(a && b && memcmp(a, b, (size_t)it.numel * sizeof(float)) == 0, "%s",
                      it.name);
        }
        /* and both compute the same logits */
        sq_context_params cp = sq_context_default_params();
        cp.max_context = 16;
        cp.max_pending = 8;
        cp.threads = 1;
        sq_context *ca, *cb;
        cr_assert_eq(sq_context_new(r, &cp, &ca, &err), 0, "%s", err.msg);
        cr_assert_eq(sq_context_new(l, &cp, &cb, &err), 0, "%s", err.msg);
        int32_t tok[3] = {5, 60, 96}, pos[3] = {0, 1, 2};
        uint8_t mask[9] = {1, 0, 0, 1, 1, 0, 1, 1, 1};
        float la[3 * 97], lb[3 * 97];
        cr_assert_eq(sq_context_forward(ca, tok, pos, mask, 3, la, &err), 0, "%s", err.msg);
        cr_assert_eq(sq_context_forward(cb, tok, pos, mask, 3, lb, &err), 0, "%s", err.msg);
        cr_assert_eq(memcmp(la, lb, sizeof la), 0);
        sq_context_free(ca);
        sq_context_free(cb);
        sq_model_free(r);
        sq_model_free(l);
    }
    tu_rmtree(dir);
}

Test(model, config_records_the_architecture_from_its_table)
{
    cr_assert_eq(sq_arch_find("LlamaForCausalLM", 0), SQ_ARCH_LLAMA);
    cr_assert_eq(sq_arch_find("llama", 1), SQ_ARCH_LLAMA);
    cr_assert_eq(sq_arch_find("Qwen3MoeForCausalLM", 0), -1);
    cr_assert_eq(sq_arch_find("Qwen2ForCausalLM", 0), SQ_ARCH_QWEN2);
    cr_assert_null(sq_arch_get(SQ_ARCH_COUNT));
    cr_assert(strncmp(sq_arch_names(0), "LlamaForCausalLM, ", 18) == 0, "%s", sq_arch_names(0));
    const char *texts[] = {
        "{\"architectures\": [\"Foo\", \"LlamaForCausalLM\"], \"hidden_size\": 64, "
        "\"intermediate_size\": 96, \"num_hidden_layers\": 2, \"num_attention_heads\": 4, "
        "\"vocab_size\": 9}",
        "{\"model_type\": \"llama\", \"hidden_size\": 64, \"intermediate_size\": 96, "
        "\"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"vocab_size\": 9}",
    };
    for (size_t i = 0; i < 2; i++) {
        cJSON *root;
        sq_error err = {0};
        cr_assert_eq(sq_json_parse("config.json", texts[i], strlen(texts[i]), &root, &err), 0);
        sq_model_config c;
        c.arch = 42;
        cr_assert_eq(sq_model_config_parse("config.json", root, &c, &err), 0, "%s", err.msg);
        cr_assert_eq(c.arch, SQ_ARCH_LLAMA);
        cJSON_Delete(root);
        cJSON *back = sq_model_config_to_json(&c);
        const cJSON *a = cJSON_GetObjectItemCaseSensitive(back, "architectures");
        cr_assert(cJSON_IsArray(a) && cJSON_IsString(a->child) &&
                  strcmp(a->child->valuestring, "LlamaForCausalLM") == 0);
        cJSON_Delete(back);
    }
}

static size_t heap_in_use(void)
{
    struct mallinfo2 mi = mallinfo2();
    return mi.uordblks + mi.hblkhd;
}

/* Whether mallinfo2 counts this process's allocations (AddressSanitizer's allocator does not). */
static int heap_is_counted(void)
{
    size_t before = heap_in_use();
    void *volatile p = malloc(1 << 20);
    size_t after = heap_in_use();
    free(p);
    return after >= before + (1 << 20);
}

Test(model, memory_estimate_is_what_a_cpu_context_and_a_batch_allocate)
{
    if (!heap_is_counted())
        cr_skip_test("mallinfo2 does not count this allocator's blocks (a sanitizer build)");
    sq_random_model_params rp = sq_random_model_default_params();
    sq_model *m;
    sq_error err = {0};
    cr_assert_eq(sq_model_new_random(&rp.config, 3, &m, &err), 0, "%s", err.msg);
    sq_context_params cp = sq_context_default_params();
    cp.max_context = 2000;
    cp.max_pending = 40;
    cp.threads = 2;
    sq_context *c0, *c1;
    /* the first context acquires the shared thread pool; the second allocates only its own */
    cr_assert_eq(sq_context_new(m, &cp, &c0, &err), 0, "%s", err.msg);
    const double est = sq_cpu_context_bytes(&rp.config, 2000, 40, 2);
    cr_assert_gt(est, 1 << 20);
    size_t before = heap_in_use();
    cr_assert_eq(sq_context_new(m, &cp, &c1, &err), 0, "%s", err.msg);
    double got = (double)(heap_in_use() - before);
    /* the buffers themselves, plus the two structs and the allocator's rounding */
    cr_assert(got >= est && got <= est + 65536, "allocated %.0f bytes, estimated %.0f", got, est);

    /* a batch of 2 x 30 rows: more rows than the first context's scratch holds */
    enum { N = 30 };
    int32_t tok[N], pos[N];
    uint8_t mask[N * N];
    for (int i = 0; i < N; i++) {
        tok[i] = (i * 7) % 97;
        pos[i] = i;
        for (int j = 0; j < N; j++)
            mask[i * N + j] = j <= i;
    }
    float *lg0 = malloc(sizeof(float) * N * 97), *lg1 = malloc(sizeof(float) * N * 97);
    sq_batch_seq seqs[2] = {{c0, tok, pos, mask, N, lg0}, {c1, tok, pos, mask, N, lg1}};
    before = heap_in_use();
    cr_assert_eq(sq_context_forward_batch(seqs, 2, &err), 0, "%s", err.msg);
    got = (double)(heap_in_use() - before);
    const double bound = sq_cpu_batch_bytes(&rp.config, 2 * N);
    cr_assert(got > 0 && got <= bound, "a batch allocated %.0f bytes, bound %.0f", got, bound);
    /* the second sequence's logits equal its single forward's (its own context is fresh) */
    sq_context *c2;
    cr_assert_eq(sq_context_new(m, &cp, &c2, &err), 0, "%s", err.msg);
    float *lg2 = malloc(sizeof(float) * N * 97);
    cr_assert_eq(sq_context_forward(c2, tok, pos, mask, N, lg2, &err), 0, "%s", err.msg);
    for (int i = 0; i < N * 97; i++)
        cr_assert_float_eq(lg1[i], lg2[i], 1e-4f, "logit %d", i);
    free(lg0);
    free(lg1);
    free(lg2);
    sq_context_free(c0);
    sq_context_free(c1);
    sq_context_free(c2);
    sq_model_free(m);
}

Test(model, memory_check_refuses_past_80_percent_with_the_callers_words)
{
    sq_error err = {0};
    cr_assert_eq(sq_memory_check(1.0, &err, "do less", "a job needs %d bytes", 1), SQ_OK);
    cr_assert_eq(sq_memory_check(1e30, &err, "do less", "a job needs %.0f GiB", 1e21), SQ_EUSAGE);
    cr_assert(strstr(err.msg, "a job needs 1000000000000000000000 GiB, more than 80% of this "
                              "machine's ") && strstr(err.msg, " GiB; do less"), "%s", err.msg);
    sq_random_model_params rp = sq_random_model_default_params();
    cr_assert_eq(sq_weights_bytes(&rp.config), 4.0 * (double)llama_params(&rp.config));
    /* random weights past the machine: refused with the figure, before allocating */
    rp.config.n_layers = SQ_MODEL_MAX_LAYERS;
    rp.config.dim = 8192;
    rp.config.hidden_dim = 1 << 16;
    sq_model *m = NULL;
    err = (sq_error){0};
    cr_assert_eq(sq_model_new_random(&rp.config, 1, &m, &err), SQ_EUSAGE);
    cr_assert_null(m);
    cr_assert(strstr(err.msg, "random weights of this shape need") && strstr(err.msg, "80%"),
              "%s", err.msg);
}
