/* The families' features on the CUDA backend (issue 24), run against the emulation: Llama-3 and
 * yarn RoPE, attention/MLP biases, an explicit head_dim, tied embeddings, Qwen2's q/k/v biases
 * and window rule, Qwen3's q/k norms, Mistral's windows, Gemma-2 (norms, GeGLU, soft caps,
 * query_pre_attn_scalar, windows) and Gemma-3 (q/k norms, local RoPE base): the CUDA logits
 * equal the CPU's within the 16-bit tolerance of tests/test_cuda.c, all at once, token by token
 * with commits, and for the nodes of a tree after a prefix (windows by position). What the
 * CUDA body cannot do is refused by name with SQ_EUSAGE (exit 64). */
#include <criterion/criterion.h>
#include <criterion/logging.h>
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

enum { LLAMA3, QWEN2, QWEN3, MISTRAL_WINDOW, GEMMA2, GEMMA3, YARN, N_OK, GEMMA_NARROW = N_OK,
       N_ALL };

static sq_random_model_params config_of(int f)
{
    sq_random_model_params p = sq_random_model_default_params();
    sq_model_config *c = &p.config;
    c->n_layers = 3;
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
        c->sliding_window = 3;
        c->layer_sliding[0] = 6;   /* layers 1, 2: max_window_layers 1 */
        break;
    case QWEN3:
        c->arch = SQ_ARCH_QWEN3;
        c->head_dim = 32;
        c->qk_norm = 1;
        break;
    case MISTRAL_WINDOW:
        c->arch = SQ_ARCH_MISTRAL;
        c->head_dim = 8;
        c->sliding_window = 3;
        c->layer_sliding[0] = 7;
        break;
    case GEMMA2:
    case GEMMA_NARROW:
        c->arch = SQ_ARCH_GEMMA2;
        c->gemma = 1;
        c->act = SQ_ACT_GELU_TANH;
        c->head_dim = 24;
        c->query_pre_attn_scalar = 20;
        c->attn_softcap = 0.3f;   /* below the scores of random weights: it bites */
        c->final_softcap = 3;
        c->tied_embeddings = 1;
        c->sliding_window = 3;
        c->layer_sliding[0] = 5;   /* layers 0, 2 */
        if (f == GEMMA_NARROW)
            c->hidden_dim = 24;
        break;
    case GEMMA3:
        c->arch = SQ_ARCH_GEMMA3;
        c->gemma = 1;
        c->act = SQ_ACT_GELU_TANH;
        c->qk_norm = 1;
        c->query_pre_attn_scalar = 16;
        c->tied_embeddings = 1;
        c->rope_theta = 1000000;
        c->rope = (sq_rope_params){.type = SQ_ROPE_LINEAR, .factor = 8};
        c->rope_local.theta = 10000;
        c->sliding_window = 3;
        c->layer_sliding[0] = 3;   /* layers 0, 1; layer 2 global */
        break;
    case YARN:
        c->rope = (sq_rope_params){.type = SQ_ROPE_YARN, .factor = 4, .original_max_position = 256};
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

static double worst;   /* the largest |cpu - cuda| relative to the largest |logit| */

static void compare(const float *a, const float *b, size_t n, int f, const char *what)
{
    double mx = 0, d = 0;
    for (size_t i = 0; i < n; i++) {
        mx = fmax(mx, fabs(a[i]));
        d = fmax(d, fabs(a[i] - b[i]));
    }
    worst = fmax(worst, d / fmax(mx, 1));
    cr_assert(d <= 1e-2 * fmax(mx, 1), "family %d, %s: max |cpu - cuda| %g (logits up to %g)",
              f, what, d, mx);
}

/* The same calls on both contexts, logits compared. */
static void both(sq_context *cpu, sq_context *gpu, const int32_t *tok, const int32_t *pos,
                 const uint8_t *mask, int n, int V, int f, const char *what)
{
    float *a = malloc(sizeof(float) * (size_t)n * V), *b = malloc(sizeof(float) * (size_t)n * V);
    sq_error err = {0};
    cr_assert_eq(sq_context_forward(cpu, tok, pos, mask, n, a, &err), 0, "%s", err.msg);
    cr_assert_eq(sq_context_forward(gpu, tok, pos, mask, n, b, &err), 0, "%s", err.msg);
    compare(a, b, (size_t)n * V, f, what);
    free(a);
    free(b);
}

static void commit_both(sq_context *cpu, sq_context *gpu, const int32_t *keep, int n)
{
    sq_error err = {0};
    cr_assert_eq(sq_context_commit(cpu, keep, n, &err), 0, "%s", err.msg);
    cr_assert_eq(sq_context_commit(gpu, keep, n, &err), 0, "%s", err.msg);
}

Test(emu_families, cuda_equals_cpu_for_every_family)
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
        both(cpu, gpu, tok, pos, mask, N, V, f, "all at once");
        /* token by token with commits: windows over committed slots */
        sq_context_reset(cpu);
        sq_context_reset(gpu);
        const uint8_t one = 1;
        const int32_t keep0 = 0;
        for (int i = 0; i < N; i++) {
            both(cpu, gpu, &tok[i], &pos[i], &one, 1, V, f, "token by token");
            commit_both(cpu, gpu, &keep0, 1);
        }
        /* a tree after the N committed tokens: node i at position N + depth */
        const int parent[7] = {-1, 0, 0, 1, 3, 4, 2};
        int32_t tt[7], tp[7];
        uint8_t tm[49] = {0};
        int depth[7];
        for (int i = 0; i < 7; i++) {
            depth[i] = parent[i] < 0 ? 0 : depth[parent[i]] + 1;
            tt[i] = 30 + i;
            tp[i] = N + depth[i];
            for (int a = i; a >= 0; a = parent[a])
                tm[i * 7 + a] = 1;
        }
        both(cpu, gpu, tt, tp, tm, 7, V, f, "tree");
        const int32_t path_keep[4] = {0, 1, 3, 4};
        commit_both(cpu, gpu, path_keep, 4);
        const int32_t nt = 50, np = N + 4;
        both(cpu, gpu, &nt, &np, &one, 1, V, f, "after the commit");
        sq_context_free(cpu);
        sq_context_free(gpu);
        sq_model_free(m);
        free(path);
    }
    cr_log_info("largest |cpu - cuda| / largest |logit|: %g", worst);
    tu_rmtree(dir);
}

Test(emu_families, cuda_refuses_what_it_does_not_compute_by_name)
{
    need_device();
    const char *want[N_ALL] = {[GEMMA_NARROW] = "intermediate_size"};
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

/* A batch of two sequences of a windowed family (each with its own slot positions) on CUDA
 * equals the CPU's batch. */
Test(emu_families, cuda_batch_with_windows_equals_cpu)
{
    need_device();
    char *dir = tu_tmpdir();
    const int fams[] = {MISTRAL_WINDOW, GEMMA3};
    for (size_t fi = 0; fi < sizeof fams / sizeof fams[0]; fi++) {
        const int f = fams[fi];
        sq_random_model_params p = config_of(f);
        char *path = tu_path(dir, "m");
        sq_error err = {0};
        cr_assert_eq(sq_model_write_random(path, &p, &err), 0, "%s", err.msg);
        sq_model *m;
        cr_assert_eq(sq_model_load(path, &m, &err), 0, "%s", err.msg);
        const int V = sq_model_get_config(m)->vocab_size;
        int rc;
        sq_context *c[4];
        for (int k = 0; k < 4; k++) {
            c[k] = ctx_on(m, k < 2 ? SQ_BACKEND_CPU : SQ_BACKEND_CUDA, &err, &rc);
            cr_assert_eq(rc, 0, "%s", err.msg);
        }
        enum { NA = 8, NB = 5 };
        const int32_t ta[NA] = {1, 2, 3, 4, 5, 6, 7, 8}, tb[NB] = {90, 80, 70, 60, 50};
        int32_t pa[NA], pb[NB];
        uint8_t ma[NA * NA], mb[NB * NB];
        for (int i = 0; i < NA; i++) {
            pa[i] = i;
            for (int j = 0; j < NA; j++)
                ma[i * NA + j] = j <= i;
        }
        for (int i = 0; i < NB; i++) {
            pb[i] = i;
            for (int j = 0; j < NB; j++)
                mb[i * NB + j] = j <= i;
        }
        float *l[4][2];
        for (int k = 0; k < 4; k++) {
            l[k][0] = malloc(sizeof(float) * NA * V);
            l[k][1] = malloc(sizeof(float) * NB * V);
        }
        for (int be = 0; be < 2; be++) {
            sq_batch_seq seqs[2] = {{c[2 * be], ta, pa, ma, NA, l[2 * be][0]},
                                    {c[2 * be + 1], tb, pb, mb, NB, l[2 * be + 1][1]}};
            cr_assert_eq(sq_context_forward_batch(seqs, 2, &err), 0, "%s", err.msg);
        }
        compare(l[0][0], l[2][0], (size_t)NA * V, f, "batch, sequence 0");
        compare(l[1][1], l[3][1], (size_t)NB * V, f, "batch, sequence 1");
        for (int k = 0; k < 4; k++) {
            free(l[k][0]);
            free(l[k][1]);
            sq_context_free(c[k]);
        }
        sq_model_free(m);
        tu_rmtree(path);
        free(path);
    }
    tu_rmtree(dir);
}
