/* The tokenizers of libsequoia/text (issue 25; docs/tokenizer.md): small hand-made
 * tokenizer.json files of each supported kind, with the ids derived by hand in the comments,
 * and bad input. Comparisons on real vocabularies against the Hugging Face JavaScript
 * implementation live elsewhere (they need npm). */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "libsequoia/text/tokenizer.h"
#include "tests/testutil.h"

/* The JSON below writes " as ` so that it stays readable; tj() turns it back. */
static char *tj(const char *s)
{
    char *r = strdup(s);
    cr_assert_not_null(r);
    for (char *p = r; *p; p++)
        if (*p == '`')
            *p = '"';
    return r;
}

/* A model directory holding tokenizer.json (and the two config files when not NULL). */
static char *model_dir(const char *tok, const char *cfg, const char *gen)
{
    char *dir = tu_tmpdir();
    const char *names[3] = {"tokenizer.json", "tokenizer_config.json", "generation_config.json"};
    const char *texts[3] = {tok, cfg, gen};
    for (int i = 0; i < 3; i++) {
        if (!texts[i])
            continue;
        char *p = tu_path(dir, names[i]);
        char *t = tj(texts[i]);
        tu_write(p, t);
        free(t);
        free(p);
    }
    return dir;
}

static sq_tokenizer *load_ok(const char *dir)
{
    sq_tokenizer *t = NULL;
    sq_error err = {0};
    int rc = sq_tokenizer_load(dir, &t, &err);
    cr_assert_eq(rc, SQ_OK, "load: %s", err.msg);
    cr_assert_not_null(t);
    return t;
}

static void expect_ids(const sq_tokenizer *t, const char *text, size_t len, int add_special,
                       const int32_t *want, size_t n_want)
{
    int32_t *ids = NULL;
    size_t n = 0;
    sq_error err = {0};
    int rc = sq_tokenizer_encode(t, text, len, add_special, &ids, &n, &err);
    cr_assert_eq(rc, SQ_OK, "encode \"%s\": %s", text, err.msg);
    char got[512] = "", exp[512] = "";
    for (size_t i = 0; i < n && strlen(got) < 480; i++)
        snprintf(got + strlen(got), sizeof got - strlen(got), " %d", ids[i]);
    for (size_t i = 0; i < n_want && strlen(exp) < 480; i++)
        snprintf(exp + strlen(exp), sizeof exp - strlen(exp), " %d", want[i]);
    cr_assert_str_eq(got, exp, "encode \"%s\" (special %d): got [%s], want [%s]", text,
                     add_special, got, exp);
    free(ids);
}

#define EXPECT(t, text, special, ...)                                                      \
    do {                                                                                   \
        const int32_t want_[] = {__VA_ARGS__};                                             \
        expect_ids(t, text, strlen(text), special, want_, sizeof want_ / sizeof want_[0]); \
    } while (0)

static void expect_text(const sq_tokenizer *t, const int32_t *ids, size_t n, int skip,
                        const char *want)
{
    char *text = NULL;
    size_t len = 0;
    sq_error err = {0};
    int rc = sq_tokenizer_decode(t, ids, n, skip, &text, &len, &err);
    cr_assert_eq(rc, SQ_OK, "decode: %s", err.msg);
    cr_assert_eq(len, strlen(want), "decode: got \"%s\", want \"%s\"", text, want);
    cr_assert_str_eq(text, want);
    free(text);
}

#define DECODE(t, skip, want, ...)                                                         \
    do {                                                                                   \
        const int32_t ids_[] = {__VA_ARGS__};                                              \
        expect_text(t, ids_, sizeof ids_ / sizeof ids_[0], skip, want);                   \
    } while (0)

/* ---- byte-level BPE (Llama-3, Qwen) ---------------------------------------------------------
 * Words: the Split regex isolates " ?letters", " ?other" and spaces; ByteLevel maps bytes to
 * characters (space is Ġ). Merges by rank:
 *   0 h e -> he(9)  1 l l -> ll(10)  2 he ll -> hell(11)  3 hell o -> hello(12)
 *   4 Ġ w -> Ġw(13) 5 o r -> or(14)  6 Ġw or -> Ġwor(15)
 * "hello" : h e l l o -> he l l o -> he ll o -> hell o -> hello            = [12]
 * " world": Ġ w o r l d -> Ġw o r l d -> Ġw or l d -> Ġwor l d              = [15 2 7]
 * "!"                                                                       = [8]
 * Added: <|end|> 16 (special), <|begin|> 18 (special, the template's BOS), <mask> 19 (lstrip),
 * wor 20 (single_word), <r> 21 (rstrip). Ã 22 and © 23 are the bytes of é (C3 A9). Ġworld 17
 * is in the vocabulary but no merge makes it (ignore_merges picks it whole). */
#define BYTELEVEL_VOCAB                                                                      \
    "{`h`:0,`e`:1,`l`:2,`o`:3,`Ġ`:4,`w`:5,`r`:6,`d`:7,`!`:8,`he`:9,`ll`:10,`hell`:11,"       \
    "`hello`:12,`Ġw`:13,`or`:14,`Ġwor`:15,`<|end|>`:16,`Ġworld`:17,`<|begin|>`:18,"           \
    "`<mask>`:19,`wor`:20,`<r>`:21,`Ã`:22,`©`:23}"
#define BYTELEVEL_ADDED                                                                      \
    "[{`id`:16,`content`:`<|end|>`,`single_word`:false,`lstrip`:false,`rstrip`:false,"       \
    "`normalized`:false,`special`:true},"                                                    \
    "{`id`:18,`content`:`<|begin|>`,`single_word`:false,`lstrip`:false,`rstrip`:false,"      \
    "`normalized`:false,`special`:true},"                                                    \
    "{`id`:19,`content`:`<mask>`,`single_word`:false,`lstrip`:true,`rstrip`:false,"          \
    "`normalized`:false,`special`:true},"                                                    \
    "{`id`:20,`content`:`wor`,`single_word`:true,`lstrip`:false,`rstrip`:false,"             \
    "`normalized`:false,`special`:false},"                                                   \
    "{`id`:21,`content`:`<r>`,`single_word`:false,`lstrip`:false,`rstrip`:true,"             \
    "`normalized`:false,`special`:false}]"
#define BYTELEVEL_PRE                                                                        \
    "{`type`:`Sequence`,`pretokenizers`:[{`type`:`Split`,`pattern`:{`Regex`:"                \
    "` ?\\\\p{L}+| ?[^\\\\s\\\\p{L}]+|\\\\s+`},`behavior`:`Isolated`,`invert`:false},"        \
    "{`type`:`ByteLevel`,`add_prefix_space`:false,`trim_offsets`:false,`use_regex`:false}]}"
#define BYTELEVEL_POST                                                                       \
    "{`type`:`Sequence`,`processors`:[{`type`:`ByteLevel`},{`type`:`TemplateProcessing`,"    \
    "`single`:[{`SpecialToken`:{`id`:`<|begin|>`,`type_id`:0}},{`Sequence`:{`id`:`A`,"       \
    "`type_id`:0}}],`pair`:[],`special_tokens`:{`<|begin|>`:{`id`:`<|begin|>`,`ids`:[18],"    \
    "`tokens`:[`<|begin|>`]}}}]}"

static char *bytelevel_json(const char *merges, const char *normalizer, int ignore_merges)
{
    static char buf[8192];
    snprintf(buf, sizeof buf,
             "{`version`:`1.0`,`added_tokens`:" BYTELEVEL_ADDED ",`normalizer`:%s,"
             "`pre_tokenizer`:" BYTELEVEL_PRE ",`post_processor`:" BYTELEVEL_POST ","
             "`decoder`:{`type`:`ByteLevel`,`add_prefix_space`:true,`trim_offsets`:true,"
             "`use_regex`:true},`model`:{`type`:`BPE`,`dropout`:null,`unk_token`:null,"
             "`continuing_subword_prefix`:``,`end_of_word_suffix`:``,`fuse_unk`:false,"
             "`byte_fallback`:false,`ignore_merges`:%s,`vocab`:" BYTELEVEL_VOCAB
             ",`merges`:%s}}",
             normalizer, ignore_merges ? "true" : "false", merges);
    return buf;
}

#define MERGES_STR "[`h e`,`l l`,`he ll`,`hell o`,`Ġ w`,`o r`,`Ġw or`]"
#define MERGES_LIST "[[`h`,`e`],[`l`,`l`],[`he`,`ll`],[`hell`,`o`],[`Ġ`,`w`],[`o`,`r`],[`Ġw`,`or`]]"

Test(tokenizer, bytelevel_bpe_by_rank)
{
    char *dir = model_dir(bytelevel_json(MERGES_STR, "null", 0), NULL, NULL);
    sq_tokenizer *t = load_ok(dir);
    EXPECT(t, "hello world!", 0, 12, 15, 2, 7, 8);
    EXPECT(t, "hello world!", 1, 18, 12, 15, 2, 7, 8);
    /* Ties go to the leftmost pair: l l l -> ll l. */
    EXPECT(t, "lll", 0, 10, 2);
    /* A word no merge applies to: its characters. */
    EXPECT(t, "dhe", 0, 7, 9);
    /* An empty text: nothing, or the template's BOS alone. */
    expect_ids(t, "", 0, 0, NULL, 0);
    EXPECT(t, "", 1, 18);
    cr_assert_eq(sq_tokenizer_vocab_size(t), 24);
    cr_assert_eq(sq_tokenizer_bos(t), 18);
    int n_eos = -1;
    sq_tokenizer_eos(t, &n_eos);
    cr_assert_eq(n_eos, 0);
    sq_tokenizer_free(t);
    tu_rmtree(dir);
}

Test(tokenizer, merges_as_pairs_give_the_same_tokenizer)
{
    char *d1 = model_dir(bytelevel_json(MERGES_STR, "null", 0), NULL, NULL);
    char *d2 = model_dir(bytelevel_json(MERGES_LIST, "null", 0), NULL, NULL);
    char *d3 = model_dir(bytelevel_json("[`h e`,`l l`,`he ll`,`hell o`,`Ġ w`,`o r`]", "null", 0),
                         NULL, NULL);
    sq_tokenizer *a = load_ok(d1), *b = load_ok(d2), *c = load_ok(d3);
    EXPECT(b, "hello world!", 0, 12, 15, 2, 7, 8);
    cr_assert_eq(sq_tokenizer_same(a, b), 1);
    cr_assert_eq(sq_tokenizer_same(a, c), 0, "one merge fewer is another tokenizer");
    /* Without Ġw or -> Ġwor: Ġw or l d. */
    EXPECT(c, " world", 0, 13, 14, 2, 7);
    sq_tokenizer_free(a);
    sq_tokenizer_free(b);
    sq_tokenizer_free(c);
    tu_rmtree(d1);
    tu_rmtree(d2);
    tu_rmtree(d3);
}

Test(tokenizer, ignore_merges_takes_a_whole_word_in_the_vocabulary)
{
    char *dir = model_dir(bytelevel_json(MERGES_STR, "null", 1), NULL, NULL);
    sq_tokenizer *t = load_ok(dir);
    EXPECT(t, "hello world!", 0, 12, 17, 8);
    sq_tokenizer_free(t);
    tu_rmtree(dir);
}

Test(tokenizer, added_tokens_in_the_raw_text)
{
    char *dir = model_dir(bytelevel_json(MERGES_STR, "null", 0), NULL, NULL);
    sq_tokenizer *t = load_ok(dir);
    /* Literal special tokens are matched with or without add_special. */
    EXPECT(t, "hello<|end|>", 0, 12, 16);
    EXPECT(t, "<|begin|>hello", 1, 18, 18, 12);
    /* lstrip: the space before <mask> goes with it; without it the space is its own word. */
    EXPECT(t, "hello <mask>", 0, 12, 19);
    EXPECT(t, "hello <|end|>", 0, 12, 4, 16);
    /* rstrip: the spaces after <r> go with it. */
    EXPECT(t, "<r>  hello", 0, 21, 12);
    /* single_word: "wor" alone is the added token, inside "world" it is not. */
    EXPECT(t, "wor", 0, 20);
    EXPECT(t, "hello wor!", 0, 12, 4, 20, 8);
    EXPECT(t, "world", 0, 5, 14, 2, 7);
    /* Decoding: special tokens kept or skipped. */
    DECODE(t, 0, "hello world!<|end|>", 12, 15, 2, 7, 8, 16);
    DECODE(t, 1, "hello world!", 18, 12, 15, 2, 7, 8, 16);
    sq_tokenizer_free(t);
    tu_rmtree(dir);
}

Test(tokenizer, bytelevel_decode_is_lossy_only_on_broken_bytes)
{
    char *dir = model_dir(bytelevel_json(MERGES_STR, "null", 0), NULL, NULL);
    sq_tokenizer *t = load_ok(dir);
    EXPECT(t, "é", 0, 22, 23);
    DECODE(t, 0, "é", 22, 23);
    /* C3 alone is no UTF-8: U+FFFD. */
    DECODE(t, 0, "h\xef\xbf\xbd", 0, 22);
    sq_tokenizer_free(t);
    tu_rmtree(dir);
}

Test(tokenizer, nfc_normalizer)
{
    char *dir = model_dir(bytelevel_json(MERGES_STR, "{`type`:`NFC`}", 0), NULL, NULL);
    sq_tokenizer *t = load_ok(dir);
    /* e + U+0301 composes to é (C3 A9): the same ids as é itself. */
    EXPECT(t, "e\xcc\x81", 0, 22, 23);
    EXPECT(t, "\xc3\xa9", 0, 22, 23);
    sq_tokenizer_free(t);
    tu_rmtree(dir);
}

Test(tokenizer, config_files_give_eos_and_bos)
{
    const char *cfg = "{`add_bos_token`:true,`bos_token`:{`__type`:`AddedToken`,`content`:`<|begin|>`},"
                      "`eos_token`:`<|end|>`}";
    char *d1 = model_dir(bytelevel_json(MERGES_STR, "null", 0), cfg, NULL);
    sq_tokenizer *t = load_ok(d1);
    int n = 0;
    const int32_t *eos = sq_tokenizer_eos(t, &n);
    cr_assert_eq(n, 1);
    cr_assert_eq(eos[0], 16);
    cr_assert_eq(sq_tokenizer_bos(t), 18);
    EXPECT(t, "hello", 1, 18, 12);
    sq_tokenizer_free(t);
    /* generation_config.json's list wins over eos_token; add_eos_token appends EOS. */
    const char *cfg2 = "{`add_bos_token`:false,`add_eos_token`:true,`eos_token`:`<|end|>`}";
    char *d2 = model_dir(bytelevel_json(MERGES_STR, "null", 0), cfg2, "{`eos_token_id`:[16,8]}");
    t = load_ok(d2);
    eos = sq_tokenizer_eos(t, &n);
    cr_assert_eq(n, 2);
    cr_assert_eq(eos[0], 16);
    cr_assert_eq(eos[1], 8);
    EXPECT(t, "hello", 1, 12, 16);
    EXPECT(t, "hello", 0, 12);
    sq_tokenizer_free(t);
    /* A single number works too; the path may name tokenizer.json itself. */
    char *d3 = model_dir(bytelevel_json(MERGES_STR, "null", 0), NULL, "{`eos_token_id`:8}");
    char *file = tu_path(d3, "tokenizer.json");
    t = load_ok(file);
    eos = sq_tokenizer_eos(t, &n);
    cr_assert_eq(n, 1);
    cr_assert_eq(eos[0], 8);
    sq_tokenizer_free(t);
    free(file);
    tu_rmtree(d1);
    tu_rmtree(d2);
    tu_rmtree(d3);
}

/* ---- SentencePiece-style BPE (Llama-2, Mistral, Gemma) --------------------------------------
 * Vocabulary: <unk> 0, <s> 1, </s> 2, <0xC3> 3, <0xA9> 4, ▁ 5, h 6, i 7, ▁h 8, ▁hi 9.
 * Merges: 0 ▁ h -> ▁h, 1 ▁h i -> ▁hi. */
#define SPM_VOCAB "{`<unk>`:0,`<s>`:1,`</s>`:2,`<0xC3>`:3,`<0xA9>`:4,`▁`:5,`h`:6,`i`:7,`▁h`:8,`▁hi`:9}"
#define SPM_ADDED                                                                            \
    "[{`id`:0,`content`:`<unk>`,`single_word`:false,`lstrip`:false,`rstrip`:false,"          \
    "`normalized`:false,`special`:true},{`id`:1,`content`:`<s>`,`single_word`:false,"        \
    "`lstrip`:false,`rstrip`:false,`normalized`:false,`special`:true},{`id`:2,`content`:"    \
    "`</s>`,`single_word`:false,`lstrip`:false,`rstrip`:false,`normalized`:false,"           \
    "`special`:true}]"
#define SPM_POST                                                                             \
    "{`type`:`TemplateProcessing`,`single`:[{`SpecialToken`:{`id`:`<s>`,`type_id`:0}},"      \
    "{`Sequence`:{`id`:`A`,`type_id`:0}}],`pair`:[],`special_tokens`:{`<s>`:{`id`:`<s>`,"    \
    "`ids`:[1],`tokens`:[`<s>`]}}}"

static char *spm_json(const char *normalizer, const char *pre, const char *decoder)
{
    static char buf[8192];
    snprintf(buf, sizeof buf,
             "{`version`:`1.0`,`added_tokens`:" SPM_ADDED ",`normalizer`:%s,`pre_tokenizer`:%s,"
             "`post_processor`:" SPM_POST ",`decoder`:%s,`model`:{`type`:`BPE`,`dropout`:null,"
             "`unk_token`:`<unk>`,`continuing_subword_prefix`:null,`end_of_word_suffix`:null,"
             "`fuse_unk`:true,`byte_fallback`:true,`vocab`:" SPM_VOCAB ",`merges`:[`▁ h`,`▁h i`]}}",
             normalizer, pre, decoder);
    return buf;
}

#define LLAMA2_NORM                                                                          \
    "{`type`:`Sequence`,`normalizers`:[{`type`:`Prepend`,`prepend`:`▁`},{`type`:`Replace`,"  \
    "`pattern`:{`String`:` `},`content`:`▁`}]}"
#define LLAMA2_DEC                                                                           \
    "{`type`:`Sequence`,`decoders`:[{`type`:`Replace`,`pattern`:{`String`:`▁`},`content`:"   \
    "` `},{`type`:`ByteFallback`},{`type`:`Fuse`},{`type`:`Strip`,`content`:` `,`start`:1,"  \
    "`stop`:0}]}"

Test(tokenizer, sentencepiece_prepend_replace_byte_fallback)
{
    char *dir = model_dir(spm_json(LLAMA2_NORM, "null", LLAMA2_DEC), NULL, NULL);
    sq_tokenizer *t = load_ok(dir);
    /* "hi" -> ▁hi -> ▁ h i -> ▁h i -> ▁hi. */
    EXPECT(t, "hi", 0, 9);
    EXPECT(t, "hi", 1, 1, 9);
    /* é is not in the vocabulary: its bytes C3 A9. */
    EXPECT(t, "hi é", 0, 9, 5, 3, 4);
    /* x has neither a token nor byte tokens: <unk>, and two of them fuse. */
    EXPECT(t, "xx", 0, 5, 0);
    /* After a literal <s> the section is normalized on its own: ▁ prepended again. */
    EXPECT(t, "<s>hi", 0, 1, 9);
    DECODE(t, 0, "hi é", 9, 5, 3, 4);
    DECODE(t, 1, "hi", 1, 9);
    /* One U+FFFD per byte that is no UTF-8 (Hugging Face's ByteFallback). */
    DECODE(t, 0, "hi \xef\xbf\xbd", 9, 5, 3);
    cr_assert_eq(sq_tokenizer_bos(t), 1);
    sq_tokenizer_free(t);
    tu_rmtree(dir);
}

Test(tokenizer, metaspace_pre_tokenizer_and_decoder)
{
    const char *pre = "{`type`:`Metaspace`,`replacement`:`▁`,`prepend_scheme`:`first`,`split`:false}";
    const char *dec = "{`type`:`Metaspace`,`replacement`:`▁`,`prepend_scheme`:`first`,`split`:false}";
    char *dir = model_dir(spm_json("null", pre, dec), NULL, NULL);
    sq_tokenizer *t = load_ok(dir);
    EXPECT(t, "hi hi", 0, 9, 9);
    /* prepend_scheme first: only the text at offset 0 gets ▁. */
    EXPECT(t, "<s>hi", 0, 1, 6, 7);
    DECODE(t, 0, "hi hi", 9, 9);
    sq_tokenizer_free(t);
    /* split: true cuts before every ▁ (MergedWithNext): the same ids here. */
    const char *pre2 = "{`type`:`Metaspace`,`replacement`:`▁`,`prepend_scheme`:`always`,`split`:true}";
    char *d2 = model_dir(spm_json("null", pre2, dec), NULL, NULL);
    t = load_ok(d2);
    EXPECT(t, "hi hi", 0, 9, 9);
    EXPECT(t, "<s>hi", 0, 1, 9);
    sq_tokenizer_free(t);
    tu_rmtree(dir);
    tu_rmtree(d2);
}

Test(tokenizer, split_behaviours)
{
    /* Gemma's pre-tokenizer: Split on " " MergedWithPrevious, after no normalizer here:
     * "hi hi" -> "hi " "hi"; neither space nor "hi " has a token: h i <unk> | h i. */
    const char *pre = "{`type`:`Split`,`pattern`:{`String`:` `},`behavior`:`MergedWithPrevious`,"
                      "`invert`:false}";
    char *dir = model_dir(spm_json("null", pre, "null"), NULL, NULL);
    sq_tokenizer *t = load_ok(dir);
    EXPECT(t, "hi hi", 0, 6, 7, 0, 6, 7);
    /* Without a decoder the tokens are joined with spaces. */
    DECODE(t, 0, "h i", 6, 7);
    sq_tokenizer_free(t);
    /* Removed drops the spaces. */
    const char *pre2 = "{`type`:`Split`,`pattern`:{`String`:` `},`behavior`:`Removed`,`invert`:false}";
    char *d2 = model_dir(spm_json("null", pre2, "null"), NULL, NULL);
    t = load_ok(d2);
    EXPECT(t, "hi  hi", 0, 6, 7, 6, 7);
    sq_tokenizer_free(t);
    /* MergedWithNext on ▁ after the Llama-2 normalizer: ▁hi ▁hi. */
    const char *pre3 = "{`type`:`Split`,`pattern`:{`String`:`▁`},`behavior`:`MergedWithNext`,"
                       "`invert`:false}";
    char *d3 = model_dir(spm_json(LLAMA2_NORM, pre3, "null"), NULL, NULL);
    t = load_ok(d3);
    EXPECT(t, "hi hi", 0, 9, 9);
    sq_tokenizer_free(t);
    tu_rmtree(dir);
    tu_rmtree(d2);
    tu_rmtree(d3);
}

static char *replaced(const char *s, const char *from, const char *to);

Test(tokenizer, normalized_added_tokens_match_the_normalized_text)
{
    /* <x y> (id 10, normalized) is matched as its normalized form <x▁y> after the Replace
     * normalizer; decoding gives its content back. */
    char spm[8192];
    snprintf(spm, sizeof spm, "%s",
             spm_json("{`type`:`Replace`,`pattern`:{`String`:` `},`content`:`▁`}", "null",
                      LLAMA2_DEC));
    char *dir = model_dir(replaced(spm, "`special`:true}]", "`special`:true},{`id`:10,`content`:"
                                   "`<x y>`,`single_word`:false,`lstrip`:false,`rstrip`:false,"
                                   "`normalized`:true,`special`:false}]"),
                          NULL, NULL);
    sq_tokenizer *t = load_ok(dir);
    EXPECT(t, "hi<x y>", 0, 6, 7, 10);
    DECODE(t, 1, "hi<x y>", 6, 7, 10);
    cr_assert_eq(sq_tokenizer_vocab_size(t), 11);
    sq_tokenizer_free(t);
    tu_rmtree(dir);
}

/* ---- bad input --------------------------------------------------------------------------- */

static void expect_load_error(const char *json, int status, const char *needle)
{
    char *dir = model_dir(json, NULL, NULL);
    sq_tokenizer *t = NULL;
    sq_error err = {0};
    int rc = sq_tokenizer_load(dir, &t, &err);
    cr_assert_eq(rc, status, "want %d, got %d: %s", status, rc, err.msg);
    cr_assert_null(t);
    cr_assert(strstr(err.msg, "tokenizer.json"), "the message names the file: %s", err.msg);
    cr_assert(strstr(err.msg, needle), "the message says \"%s\": %s", needle, err.msg);
    tu_rmtree(dir);
}

static char *replaced(const char *s, const char *from, const char *to)
{
    static char buf[8192];
    const char *p = strstr(s, from);
    cr_assert_not_null(p, "%s not in the template", from);
    snprintf(buf, sizeof buf, "%.*s%s%s", (int)(p - s), s, to, p + strlen(from));
    return buf;
}

Test(tokenizer, bad_files_are_refused_by_name)
{
    sq_tokenizer *t = NULL;
    sq_error err = {0};
    char *dir = tu_tmpdir();
    cr_assert_eq(sq_tokenizer_load(dir, &t, &err), SQ_ENOINPUT, "%s", err.msg);
    cr_assert(strstr(err.msg, "tokenizer.json"), "%s", err.msg);
    tu_rmtree(dir);

    expect_load_error("{`model`: {`type`: `BPE`,", SQ_EDATA, "malformed JSON");
    expect_load_error("[1, 2]", SQ_EDATA, "expected a JSON object");
    char spm[8192];
    snprintf(spm, sizeof spm, "%s", spm_json(LLAMA2_NORM, "null", LLAMA2_DEC));
    expect_load_error(replaced(spm, "`type`:`BPE`", "`type`:`WordPiece`"), SQ_EDATA, "WordPiece");
    expect_load_error(replaced(spm, "`type`:`BPE`", "`type`:`Unigram`"), SQ_EDATA, "Unigram");
    expect_load_error(replaced(spm, "`pre_tokenizer`:null", "`pre_tokenizer`:{`type`:`Whitespace`}"),
                      SQ_EDATA, "Whitespace");
    expect_load_error(replaced(spm, "`type`:`Prepend`", "`type`:`Lowercase`"), SQ_EDATA,
                      "Lowercase");
    expect_load_error(replaced(spm, "{`type`:`Fuse`}", "{`type`:`WordPiece`}"), SQ_EDATA,
                      "decoder");
    /* Merges naming tokens the vocabulary does not hold. */
    expect_load_error(replaced(spm, "`▁h i`", "`▁h q`"), SQ_EDATA, "merges[1]");
    expect_load_error(replaced(spm, "`▁h i`", "`▁hi`"), SQ_EDATA, "merges[1]");
    expect_load_error(replaced(spm, "`i`:7", "`i`:7,`j`:7"), SQ_EDATA, "id 7");
    expect_load_error(replaced(spm, "`i`:7", "`i`:-7"), SQ_EDATA, "model.vocab");
    expect_load_error(replaced(spm, "`unk_token`:`<unk>`", "`unk_token`:`<nope>`"), SQ_EDATA,
                      "unk_token");
    expect_load_error(replaced(spm, "`ids`:[1]", "`ids`:[99]"), SQ_EDATA, "special_tokens");
    expect_load_error(replaced(spm, "`content`:`<s>`", "`content`:``"), SQ_EDATA,
                      "added_tokens[1]");
    char bl[8192];
    snprintf(bl, sizeof bl, "%s", bytelevel_json(MERGES_STR, "null", 0));
    expect_load_error(replaced(bl, "`Regex`:` ?", "`Regex`:`(?"), SQ_EDATA, "Regex");
}

Test(tokenizer, bad_config_files)
{
    char *dir = model_dir(bytelevel_json(MERGES_STR, "null", 0), NULL, "{`eos_token_id`:[16,999]}");
    sq_tokenizer *t = NULL;
    sq_error err = {0};
    cr_assert_eq(sq_tokenizer_load(dir, &t, &err), SQ_EDATA);
    cr_assert(strstr(err.msg, "generation_config.json") && strstr(err.msg, "eos_token_id[1]"),
              "%s", err.msg);
    tu_rmtree(dir);
    dir = model_dir(bytelevel_json(MERGES_STR, "null", 0), "{`eos_token`:`<nope>`}", NULL);
    memset(&err, 0, sizeof err);
    cr_assert_eq(sq_tokenizer_load(dir, &t, &err), SQ_EDATA);
    cr_assert(strstr(err.msg, "tokenizer_config.json") && strstr(err.msg, "eos_token"), "%s",
              err.msg);
    tu_rmtree(dir);
}

Test(tokenizer, bad_text_and_bad_ids)
{
    char *dir = model_dir(bytelevel_json(MERGES_STR, "null", 0), NULL, NULL);
    sq_tokenizer *t = load_ok(dir);
    int32_t *ids = NULL;
    size_t n = 0;
    sq_error err = {0};
    cr_assert_eq(sq_tokenizer_encode(t, "he\xffllo", 6, 0, &ids, &n, &err), SQ_EDATA);
    cr_assert(strstr(err.msg, "invalid UTF-8 at byte 2"), "%s", err.msg);
    cr_assert_null(ids);
    /* An embedded NUL is text like any other byte (no token here: dropped). */
    memset(&err, 0, sizeof err);
    cr_assert_eq(sq_tokenizer_encode(t, "h\0e", 3, 0, &ids, &n, &err), SQ_OK, "%s", err.msg);
    cr_assert_eq(n, 2);
    free(ids);
    char *text = NULL;
    size_t len = 0;
    const int32_t bad[] = {12, 24};
    memset(&err, 0, sizeof err);
    cr_assert_eq(sq_tokenizer_decode(t, bad, 2, 0, &text, &len, &err), SQ_EDATA);
    cr_assert(strstr(err.msg, "id 24") && strstr(err.msg, "outside the vocabulary"), "%s",
              err.msg);
    const int32_t neg[] = {-1};
    memset(&err, 0, sizeof err);
    cr_assert_eq(sq_tokenizer_decode(t, neg, 1, 0, &text, &len, &err), SQ_EDATA);
    cr_assert_null(text);
    /* Nothing to decode: an empty string. */
    cr_assert_eq(sq_tokenizer_decode(t, NULL, 0, 0, &text, &len, &err), SQ_OK);
    cr_assert_str_eq(text, "");
    free(text);
    sq_tokenizer_free(t);
    tu_rmtree(dir);
}
