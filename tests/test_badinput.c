/* Suite 'badinput' (issue 9): the catalogue of bad inputs of docs/robustness.md, "Bad inputs".
 *
 * Every row of that table that no other suite covers is a case here, run through the
 * real tool: the exit code, the words of the message (file, field, problem), and that the
 * output given with -o is untouched and no temporary file is left. The cases share one scratch
 * "world" of bad files built by make_world(). Row names (the `id` field) are the ones the README
 * cites as badinput::ID. */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <hdf5.h>

#include "libsequoia/format/corpus.h"
#include "runtime/st_writer.h"
#include "tests/testutil.h"

#define OLD_TEXT "previous output\n"

/* ---- the world of bad files -------------------------------------------------------------- */

#define CURVE(p) "{\"format\":\"sequoia-acceptance\",\"version\":1,\"curves\":[{\"name\":\"a\",\"p\":" p "}]}"
#define PLAN_HEAD "{\"format\":\"sequoia-plan\",\"version\":1,"
#define PLAN_BODY "\"depth\":3,\"expected_tokens\":2,\"rank_semantics\":\"draft-topk\",\"nodes\":" \
                  "{\"parent\":[-1,0,0,1],\"rank\":[0,1,2,1],\"depth\":[0,1,1,2]}," \
                  "\"acceptance\":{\"name\":\"t\",\"p\":[0.5,0.25]}}"
#define PROF(pts) "{\"format\":\"sequoia-profile\",\"version\":1,\"points\":" pts "}"
#define LLAMA "{\"model_type\":\"llama\",\"hidden_size\":64,\"intermediate_size\":96," \
              "\"num_hidden_layers\":2,\"num_attention_heads\":4,\"num_key_value_heads\":2," \
              "\"vocab_size\":97,\"max_position_embeddings\":512"

static void put(const char *dir, const char *name, const char *text)
{
    char *p = tu_path(dir, name);
    tu_write(p, text);
    free(p);
}

static void put_bytes(const char *dir, const char *name, const void *data, size_t n)
{
    char *p = tu_path(dir, name);
    FILE *fp = fopen(p, "wb");
    cr_assert_not_null(fp, "%s", p);
    cr_assert_eq(fwrite(data, 1, n, fp), n);
    cr_assert_eq(fclose(fp), 0);
    free(p);
}

/* A small valid corpus. */
static void good_corpus(const char *path)
{
    sq_corpus_writer_params p = sq_corpus_writer_default_params();
    p.vocab = 8;
    p.draft = "d";
    p.target = "t";
    sq_corpus_writer *w;
    sq_error err = {0};
    cr_assert_eq(sq_corpus_writer_open(path, &p, &w, &err), 0, "%s", err.msg);
    float t[8], d[8];
    for (int r = 0; r < 20; r++) {
        for (int j = 0; j < 8; j++) {
            t[j] = (float)((r * 7 + j * 3) % 11);
            d[j] = (float)((r * 5 + j) % 7);
        }
        cr_assert_eq(sq_corpus_writer_append(w, t, d, NULL, 1, &err), 0, "%s", err.msg);
    }
    cr_assert_eq(sq_corpus_writer_commit(w, &err), 0, "%s", err.msg);
}

/* A good corpus with /tokens whose row `row` is then overwritten with `id` (the writer refuses
 * ids outside [0, V), so the bad one is written with HDF5 directly). */
static void corpus_with_token(const char *path, int row, int id)
{
    sq_corpus_writer_params p = sq_corpus_writer_default_params();
    p.vocab = 8;
    p.draft = "d";
    p.target = "t";
    sq_corpus_writer *w;
    sq_error err = {0};
    cr_assert_eq(sq_corpus_writer_open(path, &p, &w, &err), 0, "%s", err.msg);
    float t[8], d[8];
    for (int r = 0; r < 20; r++) {
        for (int j = 0; j < 8; j++) {
            t[j] = (float)((r * 7 + j * 3) % 11);
            d[j] = (float)((r * 5 + j) % 7);
        }
        int32_t tok = r % 8;
        cr_assert_eq(sq_corpus_writer_append(w, t, d, &tok, 1, &err), 0, "%s", err.msg);
    }
    cr_assert_eq(sq_corpus_writer_commit(w, &err), 0, "%s", err.msg);
    hid_t f = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
    cr_assert(f >= 0);
    hid_t ds = H5Dopen2(f, "/tokens", H5P_DEFAULT);
    cr_assert(ds >= 0);
    hid_t fs = H5Dget_space(ds);
    hsize_t start = (hsize_t)row, one = 1;
    H5Sselect_hyperslab(fs, H5S_SELECT_SET, &start, NULL, &one, NULL);
    hid_t ms = H5Screate_simple(1, &one, NULL);
    int32_t v = id;
    cr_assert(H5Dwrite(ds, H5T_NATIVE_INT32, ms, fs, H5P_DEFAULT, &v) >= 0);
    H5Sclose(ms);
    H5Sclose(fs);
    H5Dclose(ds);
    H5Fclose(f);
}

/* A good corpus whose first chunk of /target/logits is overwritten with garbage: it opens,
 * and the chunk no longer inflates. */
static void corpus_with_bad_chunk(const char *path)
{
    good_corpus(path);
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    cr_assert(f >= 0);
    hid_t ds = H5Dopen2(f, "/target/logits", H5P_DEFAULT);
    cr_assert(ds >= 0);
    hsize_t offset[2] = {0, 0};
    unsigned mask;
    haddr_t addr;
    hsize_t size;
    cr_assert(H5Dget_chunk_info_by_coord(ds, offset, &mask, &addr, &size) >= 0);
    H5Dclose(ds);
    H5Fclose(f);
    cr_assert(size > 4);
    int fd = open(path, O_WRONLY);
    cr_assert(fd >= 0);
    unsigned char junk[4096];
    for (size_t i = 0; i < sizeof junk; i++)
        junk[i] = (unsigned char)(0xa5 ^ (i * 29));
    size_t n = size - 2 < sizeof junk ? size - 2 : sizeof junk;
    cr_assert_eq(pwrite(fd, junk, n, (off_t)addr + 2), (ssize_t)n);
    close(fd);
}

/* A corpus whose attributes and dataset extents claim V columns (never written: chunked). */
static void claiming_corpus(const char *path, long long V)
{
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    cr_assert(f >= 0);
    hid_t t = H5Tcopy(H5T_C_S1);
    H5Tset_size(t, H5T_VARIABLE);
    hid_t sc = H5Screate(H5S_SCALAR);
    const char *vals[3] = {"sequoia-corpus", "d", "t"}, *names[3] = {"format", "draft", "target"};
    for (int i = 0; i < 3; i++) {
        hid_t a = H5Acreate2(f, names[i], t, sc, H5P_DEFAULT, H5P_DEFAULT);
        H5Awrite(a, t, &vals[i]);
        H5Aclose(a);
    }
    long long ints[2] = {1, V};
    const char *inames[2] = {"version", "vocab_size"};
    for (int i = 0; i < 2; i++) {
        hid_t a = H5Acreate2(f, inames[i], H5T_STD_I64LE, sc, H5P_DEFAULT, H5P_DEFAULT);
        H5Awrite(a, H5T_NATIVE_LLONG, &ints[i]);
        H5Aclose(a);
    }
    hsize_t dims[2] = {4, (hsize_t)V}, chunk[2] = {1, 1024};
    hid_t sp = H5Screate_simple(2, dims, NULL);
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    H5Pset_chunk(dcpl, 2, chunk);
    hid_t lcpl = H5Pcreate(H5P_LINK_CREATE);
    H5Pset_create_intermediate_group(lcpl, 1);
    hid_t d1 = H5Dcreate2(f, "/target/logits", H5T_IEEE_F32LE, sp, lcpl, dcpl, H5P_DEFAULT);
    hid_t d2 = H5Dcreate2(f, "/draft/logits", H5T_IEEE_F32LE, sp, lcpl, dcpl, H5P_DEFAULT);
    cr_assert(d1 >= 0 && d2 >= 0);
    H5Dclose(d1);
    H5Dclose(d2);
    H5Pclose(lcpl);
    H5Pclose(dcpl);
    H5Sclose(sp);
    H5Sclose(sc);
    H5Tclose(t);
    H5Fclose(f);
}

/* A safetensors file of one F32 tensor with the given shape and data_offsets, and `pad` data
 * bytes. */
static void put_safetensors(const char *dir, const char *name, const char *shape, const char *offs,
                            size_t pad)
{
    char hdr[512];
    int n = snprintf(hdr, sizeof hdr, "{\"model.norm.weight\":{\"dtype\":\"F32\",\"shape\":%s,"
                     "\"data_offsets\":%s}}", shape, offs);
    size_t total = 8 + (size_t)n + pad;
    unsigned char *buf = calloc(total, 1);
    for (int i = 0; i < 8; i++)
        buf[i] = (unsigned char)((uint64_t)n >> (8 * i));
    memcpy(buf + 8, hdr, (size_t)n);
    put_bytes(dir, name, buf, total);
    free(buf);
}

static void model_dir(const char *dir, const char *name, const char *config)
{
    char *p = tu_path(dir, name);
    cr_assert_eq(mkdir(p, 0755), 0, "%s", p);
    put(p, "config.json", config);
    free(p);
}

static void make_world(const char *dir)
{
    put(dir, "curve.json", CURVE("[0.6,0.2]"));
    put(dir, "empty.json", "");
    put(dir, "trunc.json", "{\"format\":\"sequoia-acceptance\",\"version\":1,\"curves\":[{\"na");
    put_bytes(dir, "png.json", "\x89PNG\r\n\x1a\n\0\0\0\rIHDR", 16);
    put(dir, "nan.json", CURVE("[0.5,NaN]"));
    put(dir, "inf.json", CURVE("[0.5,1e999]"));
    put(dir, "neg.json", CURVE("[0.5,-0.25]"));
    put(dir, "dup.json", "{\"format\":\"sequoia-acceptance\",\"version\":1,\"version\":1,\"curves\":[]}");
    put(dir, "badutf8.json", "{\"format\":\"sequoia-acceptance\",\"version\":1,\"curves\":[{\"name\":"
                             "\"caf\xe9\",\"p\":[0.5]}]}");
    put(dir, "acc-\xff\xfe.json", CURVE("[0.6,0.2]"));
    put(dir, "plan-huge.json", PLAN_HEAD "\"size\":1000000000," PLAN_BODY);
    put(dir, "plan-neg.json", PLAN_HEAD "\"size\":-4," PLAN_BODY);
    put(dir, "plan-dup.json", PLAN_HEAD "\"size\":4,\"size\":4," PLAN_BODY);
    put(dir, "plan-nan.json", PLAN_HEAD "\"size\":4,\"depth\":3,\"expected_tokens\":1e999,"
                              "\"rank_semantics\":\"draft-topk\",\"nodes\":{\"parent\":[-1,0,0,1],"
                              "\"rank\":[0,1,2,1],\"depth\":[0,1,1,2]},\"acceptance\":{\"name\":\"t\","
                              "\"p\":[0.5,0.25]}}");
    put(dir, "prof-huge.json", PROF("[{\"tokens\":1099511627776,\"median_ms\":1}]"));
    put(dir, "prof-neg.json", PROF("[{\"tokens\":-3,\"median_ms\":1}]"));
    put(dir, "prof-inf.json", PROF("[{\"tokens\":1,\"median_ms\":1e999}]"));
    put(dir, "prof-dup.json", "{\"format\":\"sequoia-profile\",\"version\":1,\"points\":[],\"points\":[]}");
    put(dir, "prof-huge.csv", "tokens,ms\n1099511627776,1\n");
    put(dir, "prof-nan.csv", "tokens,ms\n1,nan\n");
    put(dir, "prof-inf.csv", "tokens,ms\n1,inf\n");
    put(dir, "prof-neg.csv", "tokens,ms\n-2,1\n");
    put(dir, "prof-empty.csv", "");
    put(dir, "tokens.txt", "1 2 3 4 5 6\n");
    char *p = tu_path(dir, "corpus.h5");
    good_corpus(p);
    size_t len;
    char *bytes = tu_read(p, &len);
    put_bytes(dir, "corpus-trunc.h5", bytes, len / 2);
    free(bytes);
    free(p);
    put(dir, "corpus-empty.h5", "");
    p = tu_path(dir, "corpus-badchunk.h5");
    corpus_with_bad_chunk(p);
    free(p);
    put(dir, "deep.json", "");
    p = tu_path(dir, "deep.json");
    FILE *deep = fopen(p, "w");
    cr_assert_not_null(deep);
    for (int i = 0; i < 1500; i++)
        fputc('[', deep);
    for (int i = 0; i < 1500; i++)
        fputc(']', deep);
    fputc('\n', deep);
    cr_assert_eq(fclose(deep), 0);
    free(p);
    p = tu_path(dir, "corpus-tok999.h5");
    corpus_with_token(p, 5, 999);
    free(p);
    p = tu_path(dir, "corpus-tokneg.h5");
    corpus_with_token(p, 13, -3);
    free(p);
    put(dir, "corpus-json.h5", CURVE("[0.5]"));
    p = tu_path(dir, "corpus-v31.h5");
    claiming_corpus(p, 1LL << 31);
    free(p);
    p = tu_path(dir, "corpus-v30.h5");
    claiming_corpus(p, 1LL << 30);
    free(p);
    /* a directory, and symlinks to it where files are expected */
    p = tu_path(dir, "adir");
    cr_assert_eq(mkdir(p, 0755), 0);
    const char *links[] = {"link.json", "link.h5", "link.csv", "link.txt"};
    for (int i = 0; i < 4; i++) {
        char *l = tu_path(dir, links[i]);
        cr_assert_eq(symlink(p, l), 0, "%s", l);
        free(l);
    }
    free(p);
    /* models: one good, and bad config.json / model.safetensors next to its config */
    p = tu_path(dir, "model");
    sq_random_model_params rp = sq_random_model_default_params();
    sq_error err = {0};
    cr_assert_eq(sq_model_write_random(p, &rp, &err), 0, "%s", err.msg);
    free(p);
    model_dir(dir, "m-cfg-empty", "");
    model_dir(dir, "m-cfg-nan", LLAMA ",\"rms_norm_eps\":NaN}");
    model_dir(dir, "m-cfg-inf", LLAMA ",\"rope_theta\":1e999}");
    model_dir(dir, "m-cfg-dup", LLAMA ",\"vocab_size\":97}");
    model_dir(dir, "m-cfg-neg", "{\"model_type\":\"llama\",\"hidden_size\":-64,\"intermediate_size\":96,"
                                "\"num_hidden_layers\":2,\"num_attention_heads\":4,\"vocab_size\":97}");
    model_dir(dir, "m-cfg-huge", "{\"model_type\":\"llama\",\"hidden_size\":1099511627776,"
                                 "\"intermediate_size\":96,\"num_hidden_layers\":2,"
                                 "\"num_attention_heads\":4,\"vocab_size\":97}");
    model_dir(dir, "m-st-huge", LLAMA "}");
    p = tu_path(dir, "m-st-huge");
    put_safetensors(p, "model.safetensors", "[1000000,1000000]", "[0,4000000000000]", 64);
    free(p);
    model_dir(dir, "m-st-neg", LLAMA "}");
    p = tu_path(dir, "m-st-neg");
    put_safetensors(p, "model.safetensors", "[-64]", "[0,256]", 256);
    free(p);
    model_dir(dir, "m-st-empty", LLAMA "}");
    p = tu_path(dir, "m-st-empty");
    put(p, "model.safetensors", "");
    free(p);
    model_dir(dir, "m-st-link", LLAMA "}");
    p = tu_path(dir, "m-st-link");
    char *l = tu_path(p, "model.safetensors"), *target = tu_path(dir, "adir");
    cr_assert_eq(symlink(target, l), 0);
    free(l);
    free(target);
    free(p);
    /* a dangling and a looping model.safetensors symlink (issue 14) */
    model_dir(dir, "m-st-dangling", LLAMA "}");
    p = tu_path(dir, "m-st-dangling");
    l = tu_path(p, "model.safetensors");
    cr_assert_eq(symlink("gone.safetensors", l), 0);
    free(l);
    free(p);
    model_dir(dir, "m-st-loop", LLAMA "}");
    p = tu_path(dir, "m-st-loop");
    l = tu_path(p, "model.safetensors");
    cr_assert_eq(symlink("model.safetensors", l), 0);
    free(l);
    free(p);
}

/* ---- cases ------------------------------------------------------------------------------- */

enum { PLAN, ACCEPT, PROFILE, RUN };
static const char *const tool_env[] = {"SQ_PLAN_BIN", "SQ_ACCEPT_BIN", "SQ_PROFILE_BIN", "SQ_RUN_BIN"};

typedef struct {
    const char *id;           /* docs/robustness.md cites badinput::<id>                       */
    int         tool;
    const char *args[14];     /* "@/x" is x in the scratch world; "@OUT" the output file       */
    int         status;
    const char *expect[3];    /* substrings of stderr                                         */
} bad_case;

#define OUT "@OUT"
static const bad_case cases[] = {
    /* empty, truncated, wrong type */
    {"empty_curve", PLAN, {"--acceptance", "@/empty.json", "-o", OUT}, 65, {"empty.json", "empty file"}},
    {"truncated_curve", PLAN, {"--acceptance", "@/trunc.json", "-o", OUT}, 65, {"trunc.json:1:", "malformed JSON"}},
    {"binary_as_curve", PLAN, {"--acceptance", "@/png.json", "-o", OUT}, 65, {"png.json", "NUL byte"}},
    {"plan_as_curve", PLAN, {"--acceptance", "@/plan-huge.json", "-o", OUT}, 65, {"plan-huge.json", "format", "sequoia-plan"}},
    {"curve_as_plan", PLAN, {"--plan", "@/curve.json", "--export", "trtllm", "-o", OUT}, 65, {"curve.json", "format", "sequoia-acceptance"}},
    {"empty_profile_csv", PROFILE, {"--import", "@/prof-empty.csv", "-o", OUT}, 65, {"prof-empty.csv"}},
    {"empty_corpus", ACCEPT, {"@/corpus-empty.h5", "-q", "-o", OUT}, 65, {"corpus-empty.h5", "not an HDF5 file"}},
    {"truncated_corpus", ACCEPT, {"@/corpus-trunc.h5", "-q", "-o", OUT}, 65, {"corpus-trunc.h5"}},
    /* damage and depth reported as what they are (issue 14) */
    {"corrupt_corpus_chunk", ACCEPT, {"@/corpus-badchunk.h5", "-q", "-o", OUT}, 65, {"corpus-badchunk.h5", "/target/logits", "damaged"}},
    {"json_nested_too_deep", PLAN, {"--acceptance", "@/deep.json", "-o", OUT}, 65, {"deep.json:1:1001", "nested too deep"}},
    /* token ids outside [0, V) (issue 14) */
    {"corpus_token_id_past_vocab", ACCEPT, {"@/corpus-tok999.h5", "-q", "-o", OUT}, 65, {"corpus-tok999.h5", "/tokens: row 5", "token id 999 is outside the vocabulary [0, 8)"}},
    {"corpus_token_id_negative", ACCEPT, {"@/corpus-tokneg.h5", "-q", "-o", OUT}, 65, {"corpus-tokneg.h5", "/tokens: row 13", "token id -3"}},
    {"json_as_corpus", ACCEPT, {"@/corpus-json.h5", "-q", "-o", OUT}, 65, {"corpus-json.h5", "not an HDF5 file"}},
    {"empty_config", RUN, {"dump", "--draft", "@/m-cfg-empty", "--target", "@/model", "--tokens", "@/tokens.txt", "-o", OUT}, 65, {"config.json", "empty file"}},
    {"empty_safetensors", RUN, {"dump", "--draft", "@/m-st-empty", "--target", "@/model", "--tokens", "@/tokens.txt", "-o", OUT}, 65, {"model.safetensors"}},
    {"curve_as_tokens", RUN, {"dump", "--draft", "@/model", "--target", "@/model", "--tokens", "@/curve.json", "-o", OUT}, 65, {"curve.json"}},
    /* NaN and infinity */
    {"nan_in_curve", PLAN, {"--acceptance", "@/nan.json", "-o", OUT}, 65, {"nan.json:1:", "malformed JSON"}},
    {"inf_in_curve", PLAN, {"--acceptance", "@/inf.json", "-o", OUT}, 65, {"inf.json", "curves[0].p[1]", "not finite"}},
    {"inf_in_plan", PLAN, {"--plan", "@/plan-nan.json", "--export", "trtllm", "-o", OUT}, 65, {"plan-nan.json", "expected_tokens"}},
    {"inf_in_profile", PLAN, {"--target-profile", "@/prof-inf.json", "--draft-ms", "1", "-o", OUT}, 65, {"prof-inf.json", "points[0].median_ms"}},
    {"nan_in_profile_csv", PROFILE, {"--import", "@/prof-nan.csv", "-o", OUT}, 65, {"prof-nan.csv:2"}},
    {"inf_in_profile_csv", PROFILE, {"--import", "@/prof-inf.csv", "-o", OUT}, 65, {"prof-inf.csv:2"}},
    {"nan_in_config", RUN, {"dump", "--draft", "@/m-cfg-nan", "--target", "@/model", "--tokens", "@/tokens.txt", "-o", OUT}, 65, {"config.json:1:", "malformed JSON"}},
    {"inf_in_config", RUN, {"dump", "--draft", "@/m-cfg-inf", "--target", "@/model", "--tokens", "@/tokens.txt", "-o", OUT}, 65, {"config.json", "rope_theta"}},
    /* negative sizes */
    {"negative_probability", PLAN, {"--acceptance", "@/neg.json", "-o", OUT}, 65, {"neg.json", "curves[0].p[1]", "not a probability"}},
    {"negative_plan_size", PLAN, {"--plan", "@/plan-neg.json", "--export", "trtllm", "-o", OUT}, 65, {"plan-neg.json", "size"}},
    {"negative_profile_tokens", PLAN, {"--target-profile", "@/prof-neg.json", "--draft-ms", "1", "-o", OUT}, 65, {"prof-neg.json", "points[0].tokens"}},
    {"negative_csv_tokens", PROFILE, {"--import", "@/prof-neg.csv", "-o", OUT}, 65, {"prof-neg.csv:2", "tokens"}},
    {"negative_hidden_size", RUN, {"dump", "--draft", "@/m-cfg-neg", "--target", "@/model", "--tokens", "@/tokens.txt", "-o", OUT}, 65, {"config.json", "hidden_size"}},
    {"negative_tensor_shape", RUN, {"dump", "--draft", "@/m-st-neg", "--target", "@/model", "--tokens", "@/tokens.txt", "-o", OUT}, 65, {"model.safetensors", "model.norm.weight"}},
    {"negative_budget", PLAN, {"--budget", "-5", "-o", OUT}, 64, {"--budget"}},
    /* huge sizes, refused up front with the cap in the message */
    {"huge_budget_times_depth", PLAN, {"--budget", "1000000", "--depth", "1000", "-o", OUT}, 64, {"limit", "134217728"}},
    {"plan_of_1e9_nodes", PLAN, {"--plan", "@/plan-huge.json", "--export", "trtllm", "-o", OUT}, 65, {"plan-huge.json", "size", "1048576"}},
    {"profile_of_2e40_tokens", PLAN, {"--target-profile", "@/prof-huge.json", "--draft-ms", "1", "-o", OUT}, 65, {"prof-huge.json", "points[0].tokens", "16777216"}},
    {"csv_of_2e40_tokens", PROFILE, {"--import", "@/prof-huge.csv", "-o", OUT}, 65, {"prof-huge.csv:2", "16777216"}},
    {"corpus_of_v_2e31", ACCEPT, {"@/corpus-v31.h5", "-q", "-o", OUT}, 65, {"corpus-v31.h5", "vocab_size", "16777216"}},
    {"corpus_of_v_2e30", ACCEPT, {"@/corpus-v30.h5", "-q", "-o", OUT}, 65, {"corpus-v30.h5", "vocab_size", "16777216"}},
    {"tensor_of_1e12_elements", RUN, {"dump", "--draft", "@/m-st-huge", "--target", "@/model", "--tokens", "@/tokens.txt", "-o", OUT}, 65, {"model.safetensors", "model.norm.weight"}},
    {"config_hidden_2e40", RUN, {"dump", "--draft", "@/m-cfg-huge", "--target", "@/model", "--tokens", "@/tokens.txt", "-o", OUT}, 65, {"config.json", "hidden_size"}},
    /* duplicate JSON keys */
    {"duplicate_key_curve", PLAN, {"--acceptance", "@/dup.json", "-o", OUT}, 65, {"dup.json", "\"version\" appears twice"}},
    {"duplicate_key_plan", PLAN, {"--plan", "@/plan-dup.json", "--export", "trtllm", "-o", OUT}, 65, {"plan-dup.json", "\"size\" appears twice"}},
    {"duplicate_key_profile", PLAN, {"--target-profile", "@/prof-dup.json", "--draft-ms", "1", "-o", OUT}, 65, {"prof-dup.json", "\"points\" appears twice"}},
    {"duplicate_key_config", RUN, {"dump", "--draft", "@/m-cfg-dup", "--target", "@/model", "--tokens", "@/tokens.txt", "-o", OUT}, 65, {"config.json", "\"vocab_size\" appears twice"}},
    /* non-UTF-8 */
    {"invalid_utf8_in_json", PLAN, {"--acceptance", "@/badutf8.json", "-o", OUT}, 65, {"badutf8.json:1:", "invalid UTF-8", "0xe9"}},
    {"missing_non_utf8_name", PLAN, {"--acceptance", "@/nope-\xff.json", "-o", OUT}, 66, {"nope-\xff.json", "No such file"}},
    /* a symlink to a directory where a file is expected */
    {"dir_link_as_curve", PLAN, {"--acceptance", "@/link.json", "-o", OUT}, 65, {"link.json", "directory"}},
    {"dir_link_as_plan", PLAN, {"--plan", "@/link.json", "--export", "dot", "-o", OUT}, 65, {"link.json", "directory"}},
    {"dir_link_as_profile", PLAN, {"--target-profile", "@/link.json", "--draft-ms", "1", "-o", OUT}, 65, {"link.json", "directory"}},
    {"dir_link_as_csv", PROFILE, {"--import", "@/link.csv", "-o", OUT}, 65, {"link.csv", "directory"}},
    {"dir_link_as_corpus", ACCEPT, {"@/link.h5", "-q", "-o", OUT}, 65, {"link.h5", "directory"}},
    {"dir_link_as_tokens", RUN, {"dump", "--draft", "@/model", "--target", "@/model", "--tokens", "@/link.txt", "-o", OUT}, 65, {"link.txt", "directory"}},
    {"dir_link_as_safetensors", RUN, {"dump", "--draft", "@/m-st-link", "--target", "@/model", "--tokens", "@/tokens.txt", "-o", OUT}, 65, {"model.safetensors", "not a regular file"}},
    /* a broken checkpoint is an error naming the file, never random weights (issue 14) */
    {"dangling_safetensors_run", RUN, {"dump", "--draft", "@/m-st-dangling", "--target", "@/model", "--tokens", "@/tokens.txt", "-o", OUT}, 66, {"m-st-dangling/model.safetensors", "dangling symlink"}},
    {"looping_safetensors_run", RUN, {"dump", "--draft", "@/m-st-loop", "--target", "@/model", "--tokens", "@/tokens.txt", "-o", OUT}, 66, {"m-st-loop/model.safetensors", "symlink loop"}},
    {"dangling_safetensors_profile", PROFILE, {"--model", "@/m-st-dangling", "-o", OUT}, 66, {"m-st-dangling/model.safetensors", "dangling symlink"}},
    {"looping_safetensors_profile", PROFILE, {"--model", "@/m-st-loop", "-o", OUT}, 66, {"m-st-loop/model.safetensors", "symlink loop"}},
    {"no_checkpoint_profile", PROFILE, {"--model", "@/m-cfg-neg", "-o", OUT}, 66, {"m-cfg-neg", "--random-weights"}},
    {"dir_link_as_output", PLAN, {"-o", "@/link.json"}, 73, {"link.json", "is a directory"}},
};

static char *subst(const char *arg, const char *dir, const char *out)
{
    char *r;
    if (!strcmp(arg, OUT))
        r = strdup(out);
    else if (!strncmp(arg, "@/", 2))
        r = tu_path(dir, arg + 2);
    else
        r = strdup(arg);
    cr_assert_not_null(r);
    return r;
}

static int count_temps(const char *dir)
{
    DIR *d = opendir(dir);
    cr_assert_not_null(d);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        n += strstr(e->d_name, ".tmp-") != NULL;
    closedir(d);
    return n;
}

/* Runs case c in a fresh world; returns stderr (to free). */
static void run_case(const bad_case *c)
{
    char *dir = tu_tmpdir();
    make_world(dir);
    char *out = tu_path(dir, "out.file");
    tu_write(out, OLD_TEXT);
    const char *bin = getenv(tool_env[c->tool]);
    cr_assert_not_null(bin, "%s is set by meson", tool_env[c->tool]);
    char *argv[20];
    int n = 0;
    argv[n++] = (char *)bin;
    for (int i = 0; c->args[i]; i++)
        argv[n++] = subst(c->args[i], dir, out);
    argv[n] = NULL;
    char *se = NULL, *so = NULL;
    int st = tu_run(argv, &so, &se);
    cr_assert_eq(st, c->status, "%s: exit %d, expected %d; stderr: %s", c->id, st, c->status, se);
    for (int i = 0; i < 3 && c->expect[i]; i++)
        cr_assert(strstr(se, c->expect[i]), "%s: stderr lacks \"%s\": %s", c->id, c->expect[i], se);
    /* SQ_BADINPUT_DUMP=FILE: append "id<TAB>exit<TAB>message" (for docs/robustness.md) */
    const char *dump = getenv("SQ_BADINPUT_DUMP");
    if (dump) {
        FILE *fp = fopen(dump, "a");
        if (fp) {
            fprintf(fp, "%s\t%d\t%s", c->id, st, se);
            fclose(fp);
        }
    }
    /* one line, prefixed by the tool's name */
    cr_assert(strncmp(se, "sequoia-", 8) == 0, "%s: %s", c->id, se);
    size_t len;
    char *now = tu_read(out, &len);
    cr_assert(now && !strcmp(now, OLD_TEXT), "%s: the output was changed", c->id);
    free(now);
    cr_assert_eq(count_temps(dir), 0, "%s: a temporary file remains", c->id);
    for (int i = 1; i < n; i++)
        free(argv[i]);
    free(so);
    free(se);
    free(out);
    tu_rmtree(dir);
}

ParameterizedTestParameters(badinput, rejected_with_message_and_exit_code)
{
    static int idx[sizeof cases / sizeof *cases];
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        idx[i] = (int)i;
    return cr_make_param_array(int, idx, sizeof idx / sizeof *idx);
}

ParameterizedTest(int *i, badinput, rejected_with_message_and_exit_code, .timeout = 60)
{
    run_case(&cases[*i]);
}

/* ---- rows that need more than one command ----------------------------------------------- */

Test(badinput, non_utf8_file_name_is_a_name_like_any_other)
{
    char *dir = tu_tmpdir();
    make_world(dir);
    char *acc = tu_path(dir, "acc-\xff\xfe.json"), *out = tu_path(dir, "plan-\xff.json");
    char *argv[] = {getenv("SQ_PLAN_BIN"), "-q", "--acceptance", acc, "--budget", "8", "-o", out, NULL};
    char *se = NULL;
    cr_assert_eq(tu_run(argv, NULL, &se), 0, "%s", se);
    size_t len;
    char *plan = tu_read(out, &len);
    cr_assert_not_null(plan);
    cr_assert(strstr(plan, "\"format\": \"sequoia-plan\""));
    free(plan);
    free(se);
    tu_rmtree(dir);
}

Test(badinput, non_utf8_names_never_reach_json_outputs)
{
    /* a corpus whose model names are not UTF-8: the curve file written from it is valid JSON
     * (invalid bytes become U+FFFD) and loads again */
    char *dir = tu_tmpdir();
    char *corpus = tu_path(dir, "c-\xff.h5"), *out = tu_path(dir, "curves.json");
    sq_corpus_writer_params p = sq_corpus_writer_default_params();
    p.vocab = 8;
    p.draft = "draft-\xff\xfe";
    p.target = "target-\xc3";
    sq_corpus_writer *w;
    sq_error err = {0};
    cr_assert_eq(sq_corpus_writer_open(corpus, &p, &w, &err), 0, "%s", err.msg);
    float t[8] = {1, 2, 3, 4, 5, 6, 7, 8}, d[8] = {8, 7, 6, 5, 4, 3, 2, 1};
    for (int r = 0; r < 10; r++)
        cr_assert_eq(sq_corpus_writer_append(w, t, d, NULL, 1, &err), 0, "%s", err.msg);
    cr_assert_eq(sq_corpus_writer_commit(w, &err), 0, "%s", err.msg);
    char *argv[] = {getenv("SQ_ACCEPT_BIN"), corpus, "--mode", "greedy", "--width", "4", "-q", "-o",
                    out, NULL};
    char *se = NULL;
    cr_assert_eq(tu_run(argv, NULL, &se), 0, "%s", se);
    free(se);
    char *plan_out = tu_path(dir, "plan.json");   /* never a real /dev path (issue 14) */
    char *argv2[] = {getenv("SQ_PLAN_BIN"), "-q", "--acceptance", out, "--budget", "4", "-o",
                     plan_out, NULL};
    cr_assert_eq(tu_run(argv2, NULL, &se), 0, "the curve file reads back: %s", se);
    size_t len;
    char *text = tu_read(out, &len);
    cr_assert(strstr(text, "\xef\xbf\xbd"), "U+FFFD replaces the invalid bytes: %s", text);
    free(text);
    free(se);
    free(plan_out);
    tu_rmtree(dir);
}

/* A directory nobody can create files in: a 0555 directory, or /sys when we are root (root
 * ignores the mode). NULL when there is none. */
static char *read_only_dir(const char *scratch)
{
    char *ro = tu_path(scratch, "ro");
    cr_assert_eq(mkdir(ro, 0555), 0);
    char *probe = tu_path(ro, "probe");
    int fd = open(probe, O_WRONLY | O_CREAT, 0600);
    if (fd < 0) {
        free(probe);
        return ro;
    }
    close(fd);
    unlink(probe);
    free(probe);
    free(ro);
    fd = open("/sys/sq-probe", O_WRONLY | O_CREAT, 0600);
    if (fd >= 0) {
        close(fd);
        unlink("/sys/sq-probe");
        return NULL;
    }
    return strdup("/sys");
}

Test(badinput, read_only_output_directory_is_exit_73)
{
    char *dir = tu_tmpdir();
    make_world(dir);
    char *ro = read_only_dir(dir);
    if (!ro)
        cr_skip_test("no read-only directory available");
    char *out = tu_path(ro, "plan.json"), *curves = tu_path(ro, "curves.json");
    char *corpus = tu_path(dir, "corpus.h5"), *model = tu_path(dir, "model");
    char *toks = tu_path(dir, "tokens.txt"), *dump = tu_path(ro, "c.h5"), *prof = tu_path(ro, "p.json");
    char *csv = tu_path(dir, "p.csv");
    tu_write(csv, "tokens,ms\n1,2\n4,3\n");
    char *a1[] = {getenv("SQ_PLAN_BIN"), "-q", "-o", out, NULL};
    char *a2[] = {getenv("SQ_ACCEPT_BIN"), corpus, "-q", "-o", curves, NULL};
    char *a3[] = {getenv("SQ_RUN_BIN"), "dump", "--draft", model, "--target", model, "--tokens", toks,
                  "-o", dump, NULL};
    char *a4[] = {getenv("SQ_PROFILE_BIN"), "--import", csv, "-o", prof, NULL};
    char **cmds[] = {a1, a2, a3, a4};
    for (int i = 0; i < 4; i++) {
        char *se = NULL;
        int st = tu_run(cmds[i], NULL, &se);
        cr_assert_eq(st, 73, "%s: exit %d: %s", cmds[i][0], st, se);
        cr_assert(strstr(se, ro) && (strstr(se, "cannot create") || strstr(se, "Permission") ||
                                     strstr(se, "Read-only")), "%s", se);
        free(se);
    }
    tu_rmtree(dir);
}

/* Runs argv under RLIMIT_FSIZE = limit bytes, with SIGXFSZ ignored so that write() fails with
 * EFBIG as on a full disk. */
static int run_limited(char *const argv[], rlim_t limit, char **se)
{
    struct rlimit old, rl = {limit, limit};
    cr_assert_eq(getrlimit(RLIMIT_FSIZE, &old), 0);
    signal(SIGXFSZ, SIG_IGN);
    cr_assert_eq(setrlimit(RLIMIT_FSIZE, &rl), 0);
    int st = tu_run(argv, NULL, se);
    setrlimit(RLIMIT_FSIZE, &old);
    return st;
}

Test(badinput, full_disk_is_exit_74_and_keeps_the_old_output)
{
    char *dir = tu_tmpdir();
    make_world(dir);
    char *table = tu_path(dir, "table.json"), *plan = tu_path(dir, "plan.json");
    char *model = tu_path(dir, "model"), *toks = tu_path(dir, "long.txt"), *dump = tu_path(dir, "c.h5");
    FILE *fp = fopen(toks, "w");
    for (int i = 0; i < 3000; i++)
        fprintf(fp, "%d ", (i * 37) % 97);
    fclose(fp);
    tu_write(table, OLD_TEXT);
    tu_write(plan, OLD_TEXT);
    tu_write(dump, OLD_TEXT);
    char *a1[] = {getenv("SQ_PLAN_BIN"), "-q", "--budget", "512", "--depth", "64", "-o", plan,
                  "--table", table, NULL};
    char *a2[] = {getenv("SQ_RUN_BIN"), "dump", "--draft", model, "--target", model, "--tokens", toks,
                  "--context", "256", "-o", dump, NULL};
    char **cmds[] = {a1, a2};
    for (int i = 0; i < 2; i++) {
        char *se = NULL;
        int st = run_limited(cmds[i], 64 * 1024, &se);
        cr_assert_eq(st, 74, "%s: exit %d: %s", cmds[i][0], st, se);
        cr_assert(strstr(se, dir) && (strstr(se, "write") || strstr(se, "File too large")), "%s", se);
        free(se);
    }
    const char *outs[] = {table, plan, dump};
    for (int i = 0; i < 3; i++) {
        char *now = tu_read(outs[i], NULL);
        cr_assert(now && !strcmp(now, OLD_TEXT), "%s was changed", outs[i]);
        free(now);
    }
    cr_assert_eq(count_temps(dir), 0, "no temporary file remains");
    tu_rmtree(dir);
}

/* `ulimit -f` (issue 14): with SIGXFSZ at its default, as a shell leaves it, the tools ignore
 * it themselves, so the write fails with EFBIG: exit 74 and the temporary file removed, not
 * death by signal (exit 128 + 25 = 153). */
Test(badinput, ulimit_f_is_exit_74_not_death_by_sigxfsz)
{
    char *dir = tu_tmpdir();
    make_world(dir);
    char *table = tu_path(dir, "table.json"), *plan = tu_path(dir, "plan.json");
    char *model = tu_path(dir, "model"), *toks = tu_path(dir, "long.txt"), *dump = tu_path(dir, "c.h5");
    FILE *fp = fopen(toks, "w");
    for (int i = 0; i < 3000; i++)
        fprintf(fp, "%d ", (i * 37) % 97);
    fclose(fp);
    tu_write(table, OLD_TEXT);
    tu_write(plan, OLD_TEXT);
    tu_write(dump, OLD_TEXT);
    char *a1[] = {getenv("SQ_PLAN_BIN"), "-q", "--budget", "512", "--depth", "64", "-o", plan,
                  "--table", table, NULL};
    char *a2[] = {getenv("SQ_RUN_BIN"), "dump", "--draft", model, "--target", model, "--tokens", toks,
                  "--context", "256", "-o", dump, NULL};
    char **cmds[] = {a1, a2};
    signal(SIGXFSZ, SIG_DFL);
    struct rlimit old, rl = {64 * 1024, 64 * 1024};
    cr_assert_eq(getrlimit(RLIMIT_FSIZE, &old), 0);
    for (int i = 0; i < 2; i++) {
        char *se = NULL;
        cr_assert_eq(setrlimit(RLIMIT_FSIZE, &rl), 0);
        int st = tu_run(cmds[i], NULL, &se);
        setrlimit(RLIMIT_FSIZE, &old);
        cr_assert_eq(st, 74, "%s: exit %d (153: killed by SIGXFSZ): %s", cmds[i][0], st, se);
        cr_assert(strstr(se, dir) && strstr(se, "File too large"), "%s", se);
        free(se);
    }
    const char *outs[] = {table, plan, dump};
    for (int i = 0; i < 3; i++) {
        char *now = tu_read(outs[i], NULL);
        cr_assert(now && !strcmp(now, OLD_TEXT), "%s was changed", outs[i]);
        free(now);
    }
    cr_assert_eq(count_temps(dir), 0, "no temporary file remains");
    tu_rmtree(dir);
}

Test(badinput, huge_plan_is_refused_by_the_runtime_before_allocating, .timeout = 120)
{
    /* the complete 96-ary tree of 4 levels (894049 nodes; the vocabulary has 97 tokens): its
     * tree mask alone would take 8e11 bytes */
    char *dir = tu_tmpdir();
    make_world(dir);
    char *plan = tu_path(dir, "tree.json"), *model = tu_path(dir, "model");
    char *prompt = tu_path(dir, "tokens.txt"), *out = tu_path(dir, "out.txt");
    int k = 96, n = 1 + k + k * k + k * k * k;
    FILE *fp = fopen(plan, "w");
    cr_assert_not_null(fp);
    fprintf(fp, "{\"format\":\"sequoia-plan\",\"version\":1,\"size\":%d,\"depth\":4,"
            "\"expected_tokens\":1.875,\"rank_semantics\":\"draft-topk\",\"nodes\":{\"parent\":[-1",
            n);
    for (int i = 1; i < n; i++)
        fprintf(fp, ",%d", (i - 1) / k);
    fputs("],\"rank\":[0", fp);
    for (int i = 1; i < n; i++)
        fprintf(fp, ",%d", (i - 1) % k + 1);
    fputs("],\"depth\":[0", fp);
    for (int i = 1; i < n; i++)
        fprintf(fp, ",%d", i <= k ? 1 : i <= k + k * k ? 2 : 3);
    fputs("]},\"acceptance\":{\"name\":\"t\",\"mode\":\"greedy\",\"p\":[0.5]}}\n", fp);
    cr_assert_eq(fclose(fp), 0);
    tu_write(out, OLD_TEXT);
    char *argv[] = {getenv("SQ_RUN_BIN"), "--draft", model, "--target", model, "--plan", plan,
                    "--prompt", prompt, "--mode", "greedy", "-n", "4", "-o", out, NULL};
    char *se = NULL;
    int st = tu_run(argv, NULL, &se);
    cr_assert(st == 64 && strstr(se, "894049 nodes") && strstr(se, "80%"), "exit %d: %s", st, se);
    char *now = tu_read(out, NULL);
    cr_assert(now && !strcmp(now, OLD_TEXT));
    free(now);
    free(se);
    tu_rmtree(dir);
}

/* ---- outputs never destroy anything (issue 14) --------------------------------------------- */

/* A private device node in dir (never a real /dev path), or a skipped test. */
static char *private_device(const char *dir, const char *name, unsigned major, unsigned minor)
{
    char *p = tu_path(dir, name);
    int e = tu_mkchar(p, major, minor);
    if (e) {
        tu_rmtree(dir);
        cr_skip_test("mknod %s is not allowed here (%s): device outputs not tested", p, strerror(e));
    }
    return p;
}

/* Every tool's outputs to a device (what `-o /dev/null` and `--table /dev/full` mean): written
 * in place, exit 74 on a write error, and the node is still a character device afterwards. */
Test(badinput, device_outputs_are_written_in_place, .timeout = 120)
{
    char *dir = tu_tmpdir();
    make_world(dir);
    char *null = private_device(dir, "null", 1, 3), *full = private_device(dir, "full", 1, 7);
    char *plan = tu_path(dir, "plan.json"), *corpus = tu_path(dir, "corpus.h5");
    char *model = tu_path(dir, "model"), *toks = tu_path(dir, "tokens.txt");
    char *csv = tu_path(dir, "p.csv");
    tu_write(csv, "tokens,ms\n1,2\n4,3\n");
    tu_write(plan, OLD_TEXT);
    struct {
        char *argv[16];
        int status;
    } runs[] = {
        {{getenv("SQ_PLAN_BIN"), "-q", "-n", "8", "-o", null, "--table", null, "--svg", null}, 0},
        {{getenv("SQ_PLAN_BIN"), "-q", "-n", "8", "-o", plan, "--table", full}, 74},
        {{getenv("SQ_PLAN_BIN"), "-q", "-n", "8", "-o", full}, 74},
        {{getenv("SQ_ACCEPT_BIN"), corpus, "-q", "-o", null}, 0},
        {{getenv("SQ_ACCEPT_BIN"), corpus, "-q", "-o", full}, 74},
        {{getenv("SQ_PROFILE_BIN"), "--import", csv, "-o", null, "--svg", full}, 74},
        {{getenv("SQ_PROFILE_BIN"), "--import", csv, "-o", null, "--svg", null}, 0},
        {{getenv("SQ_RUN_BIN"), "dump", "--draft", model, "--target", model, "--tokens", toks,
          "-o", null}, 0},
        {{getenv("SQ_RUN_BIN"), "dump", "--draft", model, "--target", model, "--tokens", toks,
          "-o", full}, 74},
    };
    for (size_t i = 0; i < sizeof runs / sizeof *runs; i++) {
        char *se = NULL;
        int st = tu_run(runs[i].argv, NULL, &se);
        cr_assert_eq(st, runs[i].status, "case %zu (%s): exit %d: %s", i, runs[i].argv[0], st, se);
        if (st == 74)
            cr_assert(strstr(se, full) && strstr(se, "write error"), "case %zu: %s", i, se);
        cr_assert(tu_is_char_device(null) && tu_is_char_device(full),
                  "case %zu replaced a device node by a file", i);
        free(se);
    }
    char *now = tu_read(plan, NULL);
    cr_assert_str_eq(now, OLD_TEXT, "-o kept its old contents when --table failed");
    free(now);
    cr_assert_eq(count_temps(dir), 0);
    tu_rmtree(dir);
}

/* The same file as input and output, refused before any work with exit 64 naming both
 * options; the input is untouched (also through a symlink). */
Test(badinput, output_equal_to_an_input_is_refused)
{
    char *dir = tu_tmpdir();
    make_world(dir);
    char *corpus = tu_path(dir, "corpus.h5"), *clink = tu_path(dir, "corpus-link.h5");
    char *toks = tu_path(dir, "tokens.txt"), *curve = tu_path(dir, "curve.json");
    char *model = tu_path(dir, "model"), *plan = tu_path(dir, "p.json"), *csv = tu_path(dir, "p.csv");
    cr_assert_eq(symlink("corpus.h5", clink), 0);
    tu_write(csv, "tokens,ms\n1,2\n4,3\n");
    char *ap[] = {getenv("SQ_PLAN_BIN"), "-q", "-n", "8", "-o", plan, NULL};
    cr_assert_eq(tu_run(ap, NULL, NULL), 0);
    struct {
        char *argv[14];
        const char *input, *opt_in;
    } runs[] = {
        {{getenv("SQ_ACCEPT_BIN"), corpus, "-q", "-o", corpus}, corpus, "corpus"},
        {{getenv("SQ_ACCEPT_BIN"), corpus, "-q", "-o", clink}, corpus, "corpus"},
        {{getenv("SQ_RUN_BIN"), "dump", "--draft", model, "--target", model, "--tokens", toks,
          "-o", toks}, toks, "--tokens"},
        {{getenv("SQ_PLAN_BIN"), "--acceptance", curve, "-o", curve}, curve, "--acceptance"},
        {{getenv("SQ_PLAN_BIN"), "--plan", plan, "--export", "trtllm", "-o", plan}, plan, "--plan"},
        {{getenv("SQ_PROFILE_BIN"), "--import", csv, "-o", csv}, csv, "--import"},
        {{getenv("SQ_PROFILE_BIN"), "--import", csv, "-o", tu_path(dir, "x.json"), "--svg", csv},
         csv, "--import"},
    };
    for (size_t i = 0; i < sizeof runs / sizeof *runs; i++) {
        size_t n0, n1;
        char *before = tu_read(runs[i].input, &n0), *se = NULL;
        int st = tu_run(runs[i].argv, NULL, &se);
        cr_assert_eq(st, 64, "case %zu: exit %d: %s", i, st, se);
        cr_assert(strstr(se, runs[i].opt_in) && strstr(se, "same file") &&
                      strstr(se, runs[i].input), "case %zu: %s", i, se);
        char *after = tu_read(runs[i].input, &n1);
        cr_assert(n0 == n1 && memcmp(before, after, n0) == 0, "case %zu changed its input", i);
        free(before);
        free(after);
        free(se);
    }
    cr_assert_eq(count_temps(dir), 0);
    tu_rmtree(dir);
}

/* Two outputs on one file: one would be lost silently. Refused the same way, nothing written. */
Test(badinput, two_outputs_on_one_file_are_refused)
{
    char *dir = tu_tmpdir();
    make_world(dir);
    char *x = tu_path(dir, "x.out"), *dotx = tu_path(dir, "./x.out"), *csv = tu_path(dir, "p.csv");
    char *model = tu_path(dir, "model"), *toks = tu_path(dir, "tokens.txt");
    char *plan = tu_path(dir, "p.json");
    tu_write(csv, "tokens,ms\n1,2\n4,3\n");
    char *ap[] = {getenv("SQ_PLAN_BIN"), "-q", "-n", "8", "-o", plan, NULL};
    cr_assert_eq(tu_run(ap, NULL, NULL), 0);
    struct {
        char *argv[16];
        const char *o1, *o2;
    } runs[] = {
        {{getenv("SQ_PLAN_BIN"), "-q", "-n", "8", "-o", x, "--table", x}, "-o", "--table"},
        {{getenv("SQ_PLAN_BIN"), "-q", "-n", "8", "-o", x, "--svg", dotx}, "-o", "--svg"},
        {{getenv("SQ_PLAN_BIN"), "-q", "-n", "8", "--export", "dot", "-o", x, "--save-plan", x},
         "-o", "--save-plan"},
        {{getenv("SQ_PROFILE_BIN"), "--import", csv, "-o", x, "--svg", x}, "-o", "--svg"},
        {{getenv("SQ_RUN_BIN"), "--draft", model, "--target", model, "--plan", plan, "--prompt",
          toks, "-o", x, "--report", x}, "-o", "--report"},
    };
    for (size_t i = 0; i < sizeof runs / sizeof *runs; i++) {
        char *se = NULL;
        int st = tu_run(runs[i].argv, NULL, &se);
        cr_assert_eq(st, 64, "case %zu: exit %d: %s", i, st, se);
        cr_assert(strstr(se, runs[i].o1) && strstr(se, runs[i].o2) && strstr(se, "same file"),
                  "case %zu: %s", i, se);
        cr_assert(!tu_exists(x), "case %zu wrote an output", i);
        free(se);
    }
    tu_rmtree(dir);
}

/* sequoia-accept's --dynamic-offpath is an input and --dynamic-branches an output: neither -o
 * nor --dynamic-branches may overwrite the off-path corpus, and --dynamic-branches and -o may not
 * be one file (sq_paths_check, as every tool's outputs and inputs). */
Test(badinput, accept_dynamic_files_are_checked_against_the_other_files)
{
    char *dir = tu_tmpdir();
    make_world(dir);
    char *corpus = tu_path(dir, "corpus.h5"), *off = tu_path(dir, "off.h5");
    char *x = tu_path(dir, "x.out");
    size_t n0;
    char *bytes = tu_read(corpus, &n0);
    FILE *fp = fopen(off, "wb");
    cr_assert(fp && fwrite(bytes, 1, n0, fp) == n0);
    fclose(fp);
    free(bytes);
    struct {
        char *argv[14];
        const char *o1, *o2;
    } runs[] = {
        {{getenv("SQ_ACCEPT_BIN"), corpus, "-q", "--dynamic-offpath", off, "-o", off}, "-o",
         "--dynamic-offpath"},
        {{getenv("SQ_ACCEPT_BIN"), corpus, "-q", "--dynamic-offpath", off, "--dynamic-branches",
          off, "-o", x}, "--dynamic-branches", "--dynamic-offpath"},
        {{getenv("SQ_ACCEPT_BIN"), corpus, "-q", "--dynamic-branches", x, "-o", x}, "-o",
         "--dynamic-branches"},
        {{getenv("SQ_ACCEPT_BIN"), corpus, "-q", "--dynamic-branches", corpus, "-o", x},
         "--dynamic-branches", "corpus"},
    };
    for (size_t i = 0; i < sizeof runs / sizeof *runs; i++) {
        size_t a0, a1;
        char *before = tu_read(off, &a0), *se = NULL;
        int st = tu_run(runs[i].argv, NULL, &se);
        cr_assert_eq(st, 64, "case %zu: exit %d: %s", i, st, se);
        cr_assert(strstr(se, runs[i].o1) && strstr(se, runs[i].o2) && strstr(se, "same file"),
                  "case %zu: %s", i, se);
        char *after = tu_read(off, &a1);
        cr_assert(a0 == a1 && memcmp(before, after, a0) == 0, "case %zu changed its input", i);
        cr_assert(!tu_exists(x), "case %zu wrote an output", i);
        free(before);
        free(after);
        free(se);
    }
    tu_rmtree(dir);
}
