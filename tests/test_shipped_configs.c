/* The config.json files shipped under data/configs/ (data/configs/README.md) through
 * sequoia-profile: every one passes --dry-run (its shape read, the options checked against it,
 * no weights made), and the smallest is timed for real, random bf16 weights of its full shape.
 * The 7-8B shapes take minutes and 16 GB to fill with random weights; their measured runs are in
 * data/configs/README.md. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "libsequoia/format/profile.h"
#include "tests/testutil.h"

static const struct {
    const char *dir, *arch, *layers;
} shipped[] = {
    {"Llama-3.2-1B", "LlamaForCausalLM", "16 layers"},
    {"Llama-3.1-8B", "LlamaForCausalLM", "32 layers"},
    {"Qwen2.5-0.5B", "Qwen2ForCausalLM", "24 layers"},
    {"Qwen2.5-7B", "Qwen2ForCausalLM", "28 layers"},
    {"Qwen3-0.6B", "Qwen3ForCausalLM", "28 layers"},
    {"Qwen3-8B", "Qwen3ForCausalLM", "36 layers"},
    {"Mistral-7B-v0.3", "MistralForCausalLM", "32 layers"},
    {"gemma-2-2b", "Gemma2ForCausalLM", "26 layers"},
    {"gemma-3-1b-pt", "Gemma3ForCausalLM", "26 layers"},
};

static char *config_of(const char *dir)
{
    char rel[256];
    snprintf(rel, sizeof rel, "data/configs/%s/config.json", dir);
    return tu_source_path(rel);
}

static const char *profile_bin(void)
{
    const char *bin = getenv("SQ_PROFILE_BIN");
    if (!bin || !getenv("SQ_SOURCE_ROOT"))
        cr_skip_test("SQ_PROFILE_BIN or SQ_SOURCE_ROOT is not set (run through meson test)");
    return bin;
}

Test(shipped_configs, every_one_passes_the_dry_run_in_bf16)
{
    const char *bin = profile_bin();
    for (size_t i = 0; i < sizeof shipped / sizeof shipped[0]; i++) {
        char *cfg = config_of(shipped[i].dir);
        char *argv[] = {(char *)bin, "-m", cfg, "--dry-run", "--dtype", "bf16", "--tokens",
                        "1,2,4,8", "--prefix", "512", "--threads", "1", NULL};
        char *so, *se;
        cr_assert_eq(tu_run(argv, &so, &se), 0, "%s: %s", cfg, se);
        cr_assert(strstr(so, shipped[i].arch) && strstr(so, shipped[i].layers) &&
                  strstr(so, "(bf16)") && strstr(so, "would time: 4 token counts"),
                  "%s: %s", cfg, so);
        free(so);
        free(se);
        free(cfg);
    }
}

Test(shipped_configs, the_dry_run_checks_the_context_and_writes_nothing)
{
    const char *bin = profile_bin();
    char *dir = tu_tmpdir(), *out = tu_path(dir, "p.json");
    char *cfg = config_of("gemma-2-2b");   /* max_position_embeddings 8192 */
    char *argv[] = {(char *)bin, "-m", cfg, "--dry-run", "--tokens", "1", "--prefix", "9000",
                    "-o", out, NULL};
    char *so, *se;
    cr_assert_eq(tu_run(argv, &so, &se), 64, "%s", se);
    cr_assert(strstr(se, "max_position_embeddings"), "%s", se);
    free(so);
    free(se);
    char *ok[] = {(char *)bin, "-m", cfg, "--dry-run", "--tokens", "1", "--prefix", "64", "-o",
                  out, NULL};
    cr_assert_eq(tu_run(ok, &so, &se), 0, "%s", se);
    cr_assert(!tu_exists(out), "--dry-run wrote %s", out);
    free(so);
    free(se);
    char *imp[] = {(char *)bin, "--import", cfg, "--dry-run", "-o", out, NULL};
    cr_assert_eq(tu_run(imp, &so, &se), 64, "%s", se);
    free(so);
    free(se);
    free(cfg);
    free(out);
    tu_rmtree(dir);
}

Test(shipped_configs, the_smallest_is_timed_at_its_full_shape, .timeout = 240)
{
    const char *bin = profile_bin();
    char *dir = tu_tmpdir(), *out = tu_path(dir, "p.json");
    char *cfg = config_of("Qwen2.5-0.5B");
    char *argv[] = {(char *)bin, "-m", cfg, "--dtype", "bf16", "--tokens", "1,2", "--prefix",
                    "16", "--repeat", "1", "--warmup", "0", "--threads", "1", "--quiet", "-o",
                    out, NULL};
    char *so, *se;
    cr_assert_eq(tu_run(argv, &so, &se), 0, "%s", se);
    sq_profile *p;
    sq_error err = {0};
    cr_assert_eq(sq_profile_load(out, &p, &err), 0, "%s", err.msg);
    cr_assert_eq(p->n, 2);
    cr_assert_str_eq(p->dtype, "bf16");
    cr_assert(p->points[0].median_ms > 0);
    sq_profile_free(p);
    free(so);
    free(se);
    free(cfg);
    free(out);
    tu_rmtree(dir);
}
