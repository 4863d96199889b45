/* The CUDA backend as a module loaded at run time (runtime/cuda_load.c, docs/cuda.md): a CPU run
 * maps no CUDA library (the tools link none; a CPU forward loads none), the CPU tools start and
 * work where the CUDA libraries cannot be loaded (an address-space limit that the CUDA libraries
 * do not fit in), and --backend cuda without a loadable module exits 69 naming the file that
 * failed. Built with -DSQ_HAVE_CUDA where the build has the CUDA backend; without it,
 * --backend cuda keeps saying "this build has no CUDA backend" (exit 64). */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "runtime/model.h"
#include "tests/testutil.h"

static const char *const cuda_libs[] = {"libcudart", "libcublas", "libsequoia-cuda"};

static const char *tool(const char *env)
{
    const char *p = getenv(env);
    cr_assert(p, "%s is not set (run through meson test)", env);
    return p;
}

/* NULL, or the first CUDA library named in text */
static const char *cuda_lib_in(const char *text)
{
    for (size_t i = 0; i < sizeof cuda_libs / sizeof *cuda_libs; i++)
        if (text && strstr(text, cuda_libs[i]))
            return cuda_libs[i];
    return NULL;
}

/* sequoia-run on the shipped pair, root-only plan, 2 new tokens, with extra arguments */
static int run_tiny(const char *extra1, const char *extra2, char **so, char **se)
{
    char *dir = tu_tmpdir(), *plan = tu_path(dir, "root.json"), *prompt = tu_path(dir, "p.txt");
    char *out = tu_path(dir, "out.txt");
    char *draft = tu_source_path("data/models/draft"), *target = tu_source_path("data/models/target");
    char *curves = tu_source_path("data/pipeline/curves.json");
    char *pargv[] = {(char *)tool("SQ_PLAN_BIN"), "-a", curves, "-c", "greedy@T0", "-n", "1",
                     "-d", "1", "-o", plan, NULL};
    char *pso, *pse;
    cr_assert_eq(tu_run(pargv, &pso, &pse), 0, "sequoia-plan: %s", pse);
    free(pso), free(pse), free(curves);
    tu_write(prompt, "10 20 30 40\n");
    char *argv[] = {(char *)tool("SQ_RUN_BIN"), "--draft", draft, "--target", target, "--plan",
                    plan, "--prompt", prompt, "-n", "2", "--no-baseline", "--mode", "greedy",
                    "-q", "-o", out, (char *)extra1, (char *)extra2, NULL};
    int rc = tu_run(argv, so, se);
    if (rc == 0) {
        char *text = tu_read(out, NULL);
        cr_assert(text && strlen(text) > 1, "no tokens written: '%s'", text ? text : "");
        free(text);
    }
    tu_rmtree(dir);
    free(plan), free(prompt), free(out), free(draft), free(target);
    return rc;
}

Test(cuda_module, tools_link_no_cuda_library)
{
    /* what the dynamic loader maps when the tool starts (ldd's mechanism: nothing runs) */
    const char *bins[] = {tool("SQ_RUN_BIN"), tool("SQ_PROFILE_BIN"), tool("SQ_PLAN_BIN")};
    setenv("LD_TRACE_LOADED_OBJECTS", "1", 1);
    for (int i = 0; i < 3; i++) {
        char *argv[] = {(char *)bins[i], NULL}, *so, *se;
        int rc = tu_run(argv, &so, &se);
        cr_assert_eq(rc, 0, "%s: exit %d: %s", bins[i], rc, se);
        cr_assert(strstr(so, "libc.so"), "%s: no library list: %s", bins[i], so);
        cr_assert_null(cuda_lib_in(so), "%s links %s:\n%s", bins[i], cuda_lib_in(so), so);
        free(so), free(se);
    }
}

Test(cuda_module, a_cpu_forward_maps_no_cuda_library)
{
    char *dir = tu_source_path("data/models/draft");
    sq_model *m;
    sq_error err = {0};
    cr_assert_eq(sq_model_load(dir, &m, &err), 0, "%s", err.msg);
    sq_context_params p = sq_context_default_params();
    p.max_context = 16;
    p.threads = 1;
    sq_context *ctx;
    cr_assert_eq(sq_context_new(m, &p, &ctx, &err), 0, "%s", err.msg);
    int32_t tok[2] = {10, 20}, pos[2] = {0, 1};
    uint8_t mask[4] = {1, 0, 1, 1};
    float *logits = malloc(2 * sizeof(float) * (size_t)sq_model_get_config(m)->vocab_size);
    cr_assert_eq(sq_context_forward(ctx, tok, pos, mask, 2, logits, &err), 0, "%s", err.msg);
    char *maps = tu_read("/proc/self/maps", NULL);
    cr_assert(maps && strstr(maps, "libopenblas"), "no /proc/self/maps, or no OpenBLAS in it");
    cr_assert_null(cuda_lib_in(maps), "a CPU forward mapped %s", cuda_lib_in(maps));
    free(maps), free(logits), free(dir);
    sq_context_free(ctx);
    sq_model_free(m);
}

Test(cuda_module, a_cpu_run_loads_no_cuda_library)
{
    /* LD_DEBUG=files: the dynamic loader reports every object it opens, dlopen's included */
    setenv("LD_DEBUG", "files", 1);
    char *so, *se;
    int rc = run_tiny(NULL, NULL, &so, &se);
    cr_assert_eq(rc, 0, "exit %d: %s", rc, se);
    cr_assert(strstr(se, "libopenblas"), "LD_DEBUG=files printed nothing: %s", se);
    cr_assert_null(cuda_lib_in(se), "a CPU run loaded %s", cuda_lib_in(se));
    free(so), free(se);
#ifdef SQ_HAVE_CUDA
    /* the control: --backend cuda does load the module (and fails later, without a device) */
    rc = run_tiny("--backend", "cuda", &so, &se);
    cr_assert(strstr(se, "libsequoia-cuda"), "--backend cuda (exit %d) loaded no module: %s", rc,
              se);
    free(so), free(se);
#endif
}

/* --backend cuda of sequoia-run and sequoia-profile: the exit status and a needle of stderr */
static void expect_cuda_refused(int want_rc, const char *needle)
{
    char *so, *se;
    int rc = run_tiny("--backend", "cuda", &so, &se);
    cr_assert_eq(rc, want_rc, "sequoia-run: exit %d: %s", rc, se);
    cr_assert(strstr(se, needle), "sequoia-run: '%s' lacks '%s'", se, needle);
    free(so), free(se);
    char *dir = tu_tmpdir(), *out = tu_path(dir, "p.json"), *cfg = tu_path(dir, "config.json");
    tu_write(cfg, "{\"architectures\": [\"LlamaForCausalLM\"], \"hidden_size\": 64, "
                  "\"intermediate_size\": 128, \"num_hidden_layers\": 2, "
                  "\"num_attention_heads\": 4, \"vocab_size\": 100, "
                  "\"max_position_embeddings\": 128}");
    char *argv[] = {(char *)tool("SQ_PROFILE_BIN"), "--model", cfg, "--backend", "cuda",
                    "--tokens", "1,2", "--prefix", "4", "-o", out, NULL};
    rc = tu_run(argv, &so, &se);
    cr_assert_eq(rc, want_rc, "sequoia-profile: exit %d: %s", rc, se);
    cr_assert(strstr(se, needle), "sequoia-profile: '%s' lacks '%s'", se, needle);
    cr_assert(!tu_exists(out), "%s was written", out);
    free(so), free(se), free(out), free(cfg);
    tu_rmtree(dir);
    free(dir);
}

Test(cuda_module, cuda_without_its_module_exits_69_naming_the_file)
{
#ifdef SQ_HAVE_CUDA
    char *dir = tu_tmpdir(), *missing = tu_path(dir, "nowhere/libsequoia-cuda.so");
    setenv("SQ_CUDA_MODULE", missing, 1);
    expect_cuda_refused(69, missing);
    /* a file that is no shared object at all */
    char *bad = tu_path(dir, "libsequoia-cuda.so");
    tu_write(bad, "not an ELF file\n");
    setenv("SQ_CUDA_MODULE", bad, 1);
    expect_cuda_refused(69, bad);
    free(missing), free(bad);
    tu_rmtree(dir);
    free(dir);
#else
    expect_cuda_refused(64, "this build has no CUDA backend");
#endif
}

Test(cuda_module, the_library_says_why_the_module_is_unavailable)
{
#ifdef SQ_HAVE_CUDA
    setenv("SQ_CUDA_MODULE", "/nonexistent-sequoia-test/libsequoia-cuda.so", 1);
    const int want = SQ_EUNAVAILABLE;
#else
    const int want = SQ_EUSAGE;
#endif
    sq_error err = {0};
    cr_assert_eq(sq_cuda_device_count(&err), 0);
    cr_assert_eq(err.status, want, "%d: %s", err.status, err.msg);
    /* the first outcome stays: a context says the same */
    char *dir = tu_source_path("data/models/draft");
    sq_model *m;
    sq_error e2 = {0};
    cr_assert_eq(sq_model_load(dir, &m, &e2), 0, "%s", e2.msg);
    sq_context_params p = sq_context_default_params();
    p.backend = SQ_BACKEND_CUDA;
    sq_context *ctx = (sq_context *)0x1;
    cr_assert_eq(sq_context_new(m, &p, &ctx, &e2), want, "%s", e2.msg);
    cr_assert_null(ctx);
    cr_assert_str_eq(e2.msg, err.msg);
    sq_model_free(m);
    free(dir);
}

Test(cuda_module, cpu_tools_work_where_the_cuda_libraries_cannot_be_loaded)
{
#ifdef SQ_TEST_SANITIZED
    cr_skip_test("a sanitizer's shadow memory does not fit in a 700 MB address space");
#endif
    /* ulimit -v 700000, as a new user's session may have: the CUDA libraries (cuBLASLt alone
     * maps ~500 MB) do not fit, the CPU tools must */
    struct rlimit rl = {700000 * 1024UL, 700000 * 1024UL};
    cr_assert_eq(setrlimit(RLIMIT_AS, &rl), 0);
    char *so, *se;
    int rc = run_tiny(NULL, NULL, &so, &se);
    cr_assert_eq(rc, 0, "the CPU run under ulimit -v 700000: exit %d: %s", rc, se);
    free(so), free(se);
#ifdef SQ_HAVE_CUDA
    rc = run_tiny("--backend", "cuda", &so, &se);
    /* 69 naming the library that did not load, or (a CUDA build small enough to load) the
     * absence of a device, 64 */
    cr_assert(rc == 69 || rc == 64, "--backend cuda under ulimit -v 700000: exit %d: %s", rc, se);
    if (rc == 69)
        cr_assert(strstr(se, ".so"), "exit 69 without naming a library: %s", se);
    free(so), free(se);
#endif
}
