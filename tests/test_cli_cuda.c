/* The CUDA options of sequoia-profile and sequoia-run (--backend cuda, --dtype, --offload) on
 * any machine: misuse is a usage error (exit 64) with a message naming the option, and nothing
 * is written. Requests that need a device, on a machine without one (or a build without CUDA),
 * also end in exit 64 with the reason. What the backend computes is the 'cuda' suite's. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/model.h"
#include "tests/llama_config.h"
#include "tests/testutil.h"

static const char *tool(const char *env)
{
    const char *p = getenv(env);
    cr_assert(p, "%s is not set (run through meson test)", env);
    return p;
}

static char *config_7b(void)
{
    return tu_source_path("examples/configs/llama2-7b.json");
}

static void expect_usage(char **argv, const char *out, const char *needle)
{
    char *so, *se;
    int rc = tu_run(argv, &so, &se);
    cr_assert_eq(rc, 64, "%s: exit %d: %s", argv[0], rc, se);
    cr_assert(strstr(se, needle), "'%s' lacks '%s'", se, needle);
    cr_assert(!tu_exists(out), "%s was written", out);
    free(so);
    free(se);
}

Test(cli_cuda, profile_offload_needs_the_cuda_backend)
{
    char *dir = tu_tmpdir(), *out = tu_path(dir, "p.json"), *cfg = config_7b();
    char *argv[] = {(char *)tool("SQ_PROFILE_BIN"), "--model", cfg, "--offload", "-o", out, NULL};
    expect_usage(argv, out, "--offload");
    free(dir);
    free(out);
    free(cfg);
}

/* Issue 24: the CPU takes f32, f16 and bf16 (docs/runtime.md, "16-bit weights on the CPU");
 * an unknown dtype is refused before any weights are made. */
Test(cli_cuda, profile_cpu_refuses_unknown_dtypes)
{
    char *dir = tu_tmpdir(), *out = tu_path(dir, "p.json"), *cfg = config_7b();
    char *argv[] = {(char *)tool("SQ_PROFILE_BIN"), "--model", cfg, "--dtype", "f8", "-o", out,
                    NULL};
    expect_usage(argv, out, "unknown dtype 'f8'");
    free(dir);
    free(out);
    free(cfg);
}

Test(cli_cuda, profile_on_cuda_without_a_device_says_why)
{
    if (sq_cuda_device_count(NULL) > 0)
        cr_skip_test("a CUDA device is present: the 'cuda' suite covers it");
    /* a small shape, so that the host can make its random weights before the device is asked */
    char *dir = tu_tmpdir(), *out = tu_path(dir, "p.json"), *cfg = tu_path(dir, "config.json");
    tu_write(cfg, "{\"architectures\": [\"LlamaForCausalLM\"], \"hidden_size\": 64, "
                  "\"intermediate_size\": 128, \"num_hidden_layers\": 2, "
                  "\"num_attention_heads\": 4, \"vocab_size\": 100, "
                  "\"max_position_embeddings\": 128}");
    char *argv[] = {(char *)tool("SQ_PROFILE_BIN"), "--model", cfg, "--backend", "cuda",
                    "--offload", "--tokens", "1,2", "--prefix", "4", "-o", out, NULL};
    expect_usage(argv, out, "CUDA");
    free(dir);
    free(out);
    free(cfg);
}

Test(cli_cuda, run_backend_dtype_and_offload_are_checked)
{
    char *dir = tu_tmpdir(), *out = tu_path(dir, "out.txt");
    const char *bin = tool("SQ_RUN_BIN");
    struct {
        const char *opt[3];
        const char *needle;
    } cases[] = {
        {{"--backend", "tpu", NULL}, "unknown backend 'tpu'"},
        {{"--dtype", "f8", NULL}, "unknown dtype 'f8'"},
        {{"--offload", NULL, NULL}, "needs --backend cuda"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char *argv[16];
        int a = 0;
        argv[a++] = (char *)bin;
        const char *fixed[] = {"--draft", dir, "--target", dir, "--plan", "p.json", "--prompt",
                               "x.txt", "-o", out};
        for (int k = 0; k < 10; k++)
            argv[a++] = (char *)fixed[k];
        for (int k = 0; k < 3 && cases[i].opt[k]; k++)
            argv[a++] = (char *)cases[i].opt[k];
        argv[a] = NULL;
        expect_usage(argv, out, cases[i].needle);
    }
    free(dir);
    free(out);
}

/* The library side of the same checks (runtime/model.h). */
Test(cli_cuda, context_params_dtype_and_offload_are_checked)
{
    sq_weight_dtype d;
    cr_assert_eq(sq_weight_dtype_parse("f16", &d), 0);
    cr_assert_eq(d, SQ_DTYPE_F16);
    cr_assert_eq(sq_weight_dtype_parse("bf16", &d), 0);
    cr_assert_eq(d, SQ_DTYPE_BF16);
    cr_assert_eq(sq_weight_dtype_parse("f32", &d), 0);
    cr_assert_eq(d, SQ_DTYPE_F32);
    cr_assert_neq(sq_weight_dtype_parse("auto", &d), 0);
    cr_assert_neq(sq_weight_dtype_parse("F16", &d), 0);
    cr_assert_neq(sq_weight_dtype_parse(NULL, &d), 0);
    cr_assert_str_eq(sq_weight_dtype_name(SQ_DTYPE_BF16), "bf16");
    cr_assert_str_eq(sq_weight_dtype_name((sq_weight_dtype)9), "unknown");

    sq_model_config c = tu_llama_config((tu_shape){.dim = 32, .hidden_dim = 64, .n_layers = 1,
                                           .n_heads = 2, .n_kv_heads = 2, .head_dim = 16,
                                           .vocab_size = 50, .max_position = 64});
    sq_model *m;
    sq_error err = {0};
    cr_assert_eq(sq_model_new_random(&c, 3, &m, &err), 0, "%s", err.msg);
    sq_context_params p = sq_context_default_params();
    cr_assert_eq(p.dtype, SQ_DTYPE_AUTO);
    cr_assert_eq(p.offload, 0);
    sq_context *ctx = NULL;
    /* the CPU computes in any of the three (issue 24: an f16 set converted from the model's
     * float32, kept with the model) and has nothing to offload to */
    p.dtype = SQ_DTYPE_F16;
    cr_assert_eq(sq_context_new(m, &p, &ctx, &err), 0, "%s", err.msg);
    cr_assert_eq(sq_context_dtype(ctx), SQ_DTYPE_F16);
    sq_context_free(ctx);
    ctx = NULL;
    p.dtype = (sq_weight_dtype)9;
    cr_assert_eq(sq_context_new(m, &p, &ctx, &err), SQ_EUSAGE);
    cr_assert_null(ctx);
    err = (sq_error){0};
    p.dtype = SQ_DTYPE_AUTO;
    p.offload = 1;
    cr_assert_eq(sq_context_new(m, &p, &ctx, &err), SQ_EUSAGE);
    cr_assert(strstr(err.msg, "offload"), "%s", err.msg);
    err = (sq_error){0};
    /* AUTO resolves to F32 on the CPU, and the device is the CPU */
    p.offload = 0;
    cr_assert_eq(sq_context_new(m, &p, &ctx, &err), 0, "%s", err.msg);
    cr_assert_eq(sq_context_dtype(ctx), SQ_DTYPE_F32);
    cr_assert_str_eq(sq_context_device_name(ctx), "CPU");
    sq_context_free(ctx);
    /* CUDA refuses f32 weights (or, without a device, says there is none) */
    p.backend = SQ_BACKEND_CUDA;
    p.dtype = SQ_DTYPE_F32;
    ctx = NULL;
    cr_assert_eq(sq_context_new(m, &p, &ctx, &err), SQ_EUSAGE);
    cr_assert(strstr(err.msg, "f16 or bf16") || strstr(err.msg, "CUDA"), "%s", err.msg);
    cr_assert_null(ctx);
    sq_model_free(m);
}
