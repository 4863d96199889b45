/* The families' features on the CUDA backend (issue 24), run against the emulation: what the
 * CUDA layer body computes (Llama-3 RoPE, attention/MLP biases, an explicit head_dim, tied
 * embeddings, Qwen2's q/k/v biases, Qwen3's q/k norms) equals the CPU's logits within the
 * 16-bit tolerance of tests/test_cuda.c; what it does not (sliding windows, Gemma, yarn) is
 * refused by name with SQ_EUSAGE (exit 64) instead of computing other logits. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/arch.h"
#include "runtime/model.h"
#include "runtime/st_writer.h"
#include "tests/testutil.h"

static void need_device(void)
{
    sq_error err = {0};
    if (sq_cuda_device_count(&err) < 1)
        cr_skip_test("no CUDA device (%s)", err.msg);
}

enum { LLAMA3, QWEN2, QWEN3, N_OK, MISTRAL_WINDOW = N_OK, GEMMA2, YARN, N_ALL };

static sq_random_model_params config_of(int f)
{
    sq_random_model_params p = sq_random_model_default_params();
    sq_model_config *c = &p.config;
    c->n_layers = 2;
    c->max_position = 4096;
    p.seed = 7 + (uint64_t)f;
    switch (f) {
    case LLAMA3:
        c->head_dim = 24;
        c->rope = (sq_rope_params){.type = SQ_ROPE_LLAMA3, .factor = 8, .low_freq_factor = 1,
                                   .high_freq_factor = 4, .original_max_position = 64};
        c->rope_theta = 500000;
        c->attn_bias = c->attn_out_bias = c->mlp_bias = 1;
        c->tied_embeddings = 1;
        break;
    case QWEN2:
        c->arch = SQ_ARCH_QWEN2;
        c->attn_bias = 1;
        break;
    case QWEN3:
        c->arch = SQ_ARCH_QWEN3;
        c->head_dim = 32;
        c->qk_norm = 1;
        break;
    case MISTRAL_WINDOW:
        c->arch = SQ_ARCH_MISTRAL;
        c->sliding_window = 4;
        c->layer_sliding[0] = 3;
        break;
    case GEMMA2:
        c->arch = SQ_ARCH_GEMMA2;
        c->gemma = 1;
        c->act = SQ_ACT_GELU_TANH;
        c->query_pre_attn_scalar = 16;
        c->tied_embeddings = 1;
        break;
    case YARN:
        c->rope = (sq_rope_params){.type = SQ_ROPE_YARN, .factor = 4};
        break;
    }
    return p;
}

static sq_context *ctx_on(const sq_model *m, sq_backend_kind be, sq_error *err, int *rc)
{
    sq_context_params cp = sq_context_default_params();
    cp.max_context = 64;
    cp.max_pending = 16;
    cp.threads = 1;
    cp.backend = be;
    cp.dtype = be == SQ_BACKEND_CUDA ? SQ_DTYPE_F16 : SQ_DTYPE_F32;
    sq_context *ctx = NULL;
    *rc = sq_context_new(m, &cp, &ctx, err);
    return ctx;
}

Test(emu_families, cuda_equals_cpu_for_the_features_it_computes)
{
    need_device();
    char *dir = tu_tmpdir();
    enum { N = 10 };
    const int32_t tok[N] = {5, 17, 3, 96, 41, 0, 8, 8, 60, 23};
    int32_t pos[N];
    uint8_t mask[N * N];
    for (int i = 0; i < N; i++) {
        pos[i] = i;
        for (int j = 0; j < N; j++)
            mask[i * N + j] = j <= i;
    }
    for (int f = 0; f < N_OK; f++) {
        sq_random_model_params p = config_of(f);
        char name[16];
        snprintf(name, sizeof name, "m%d", f);
        char *path = tu_path(dir, name);
        sq_error err = {0};
        cr_assert_eq(sq_model_write_random(path, &p, &err), 0, "%s", err.msg);
        sq_model *m;
        cr_assert_eq(sq_model_load(path, &m, &err), 0, "%s", err.msg);
        int rc;
        sq_context *cpu = ctx_on(m, SQ_BACKEND_CPU, &err, &rc);
        cr_assert_eq(rc, 0, "%s", err.msg);
        sq_context *gpu = ctx_on(m, SQ_BACKEND_CUDA, &err, &rc);
        cr_assert_eq(rc, 0, "family %d: %s", f, err.msg);
        const int V = sq_model_get_config(m)->vocab_size;
        float *a = malloc(sizeof(float) * N * V), *b = malloc(sizeof(float) * N * V);
        cr_assert_eq(sq_context_forward(cpu, tok, pos, mask, N, a, &err), 0, "%s", err.msg);
        cr_assert_eq(sq_context_forward(gpu, tok, pos, mask, N, b, &err), 0, "%s", err.msg);
        double mx = 0, d = 0;
        for (int i = 0; i < N * V; i++) {
            mx = fmax(mx, fabs(a[i]));
            d = fmax(d, fabs(a[i] - b[i]));
        }
        cr_assert(d <= 1e-2 * fmax(mx, 1), "family %d: max |cpu - cuda| %g (logits up to %g)", f,
                  d, mx);
        free(a);
        free(b);
        sq_context_free(cpu);
        sq_context_free(gpu);
        sq_model_free(m);
        free(path);
    }
    tu_rmtree(dir);
}

Test(emu_families, cuda_refuses_what_it_does_not_compute_by_name)
{
    need_device();
    const char *want[N_ALL] = {[MISTRAL_WINDOW] = "sliding-window", [GEMMA2] = "Gemma",
                               [YARN] = "yarn"};
    for (int f = N_OK; f < N_ALL; f++) {
        sq_random_model_params p = config_of(f);
        sq_model *m;
        sq_error err = {0};
        cr_assert_eq(sq_model_new_random(&p.config, 1, &m, &err), 0, "%s", err.msg);
        int rc;
        sq_context *ctx = ctx_on(m, SQ_BACKEND_CUDA, &err, &rc);
        cr_assert_eq(rc, SQ_EUSAGE, "family %d: rc %d", f, rc);
        cr_assert_null(ctx);
        cr_assert(strstr(err.msg, want[f]) && strstr(err.msg, "CUDA"), "family %d: %s", f,
                  err.msg);
        sq_model_free(m);
    }
}
