/* The engines' dynamic trees (runtime/dyntree.h, issue 26) on the CUDA backend, run against the
 * emulation: greedy decoding with SGLang's and TensorRT-LLM's trees equals the backend's own
 * target-only greedy decoding (a first mismatch only where the target's two best logits are a
 * near tie within the f16 tolerance of tests/test_cuda.c), each step verifying N nodes, and a
 * batch of three on CUDA decodes what each sequence decodes alone. */
#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/dyntree.h"
#include "runtime/model.h"
#include "runtime/prefill.h"
#include "runtime/specdec.h"
#include "tests/cuda-emu/sharp.h"
#include "tests/testutil.h"

enum { V = 48, NEW = 24 };

static void need_device(void)
{
    sq_error err = {0};
    if (sq_cuda_device_count(&err) < 1)
        cr_skip_test("no CUDA device (%s)", err.msg);
}

static sq_model *tiny_model(uint64_t seed, int layers)
{
    sq_model_config c = {0};
    c.dim = 64;
    c.hidden_dim = 160;
    c.n_layers = layers;
    c.n_heads = 4;
    c.n_kv_heads = 2;
    c.head_dim = 16;
    c.vocab_size = V;
    c.max_position = 512;
    c.rope_theta = 10000.0f;
    c.norm_eps = 1e-5f;
    strcpy(c.dtype, "F32");
    sq_model *m;
    sq_error err = {0};
    cr_assert_eq(sq_model_new_random(&c, seed, &m, &err), 0, "%s", err.msg);
    sq_test_sharpen(m);
    return m;
}

static sq_specdec_params cuda_params(void)
{
    sq_specdec_params prm = sq_specdec_default_params();
    prm.mode = SQ_MODE_GREEDY;
    prm.temperature = 0.0;
    prm.backend = SQ_BACKEND_CUDA;
    prm.dtype = SQ_DTYPE_F16;
    prm.max_context = 256;
    prm.record_tree = 1;
    return prm;
}

/* A first mismatch at token `first` must be a near tie of the target's logits there (the CPU's
 * f32 forward over the sequence so far). */
static void near_tie(const sq_model *target, const int32_t *prompt, int plen, const int32_t *ar,
                     int first, int32_t spec_tok)
{
    sq_context_params p = sq_context_default_params();
    p.max_context = 256;
    p.max_pending = 128;
    p.threads = 1;
    sq_context *tc;
    sq_error err = {0};
    cr_assert_eq(sq_context_new(target, &p, &tc, &err), 0, "%s", err.msg);
    int32_t seq[64];
    memcpy(seq, prompt, (size_t)plen * sizeof *seq);
    memcpy(seq + plen, ar, (size_t)first * sizeof *ar);
    int len = plen + first;
    float *lg = malloc((size_t)len * V * sizeof *lg);
    cr_assert_eq(sq_forward_causal(tc, seq, len, lg, &err), 0, "%s", err.msg);
    const float *row = lg + (size_t)(len - 1) * V;
    double top = -INFINITY, mx = 0;
    for (int t = 0; t < V; t++) {
        top = row[t] > top ? row[t] : top;
        mx = fabs(row[t]) > mx ? fabs(row[t]) : mx;
    }
    double allowed = 1e-2 * mx;
    cr_log_warn("token %d: speculative %d, target %d (logits %.6g, %.6g; best %.6g)", first,
                spec_tok, ar[first], row[spec_tok], row[ar[first]], top);
    cr_assert(row[spec_tok] >= top - allowed && row[ar[first]] >= top - allowed,
              "token %d: speculative %d and target %d are not a near tie (allowed %.3g)", first,
              spec_tok, ar[first], allowed);
    free(lg);
    sq_context_free(tc);
}

Test(emu_dyntree, greedy_dynamic_trees_equal_target_greedy_on_cuda)
{
    need_device();
    sq_model *draft = tiny_model(2, 1), *target = tiny_model(1, 2);
    const struct {
        sq_dyn_engine e;
        int L, K, N;
    } envs[] = {{SQ_DYN_SGLANG, 3, 3, 10}, {SQ_DYN_TRTLLM, 4, 2, 8}};
    const int32_t prompt[4] = {1, 2, 3, 4};
    sq_error err = {0};
    for (int i = 0; i < 2; i++) {
        sq_plan *plan;
        cr_assert_eq(sq_dyntree_plan(envs[i].L, envs[i].K, &plan, &err), 0, "%s", err.msg);
        sq_specdec_params prm = cuda_params();
        sq_specdec *sd;
        cr_assert_eq(sq_specdec_new(draft, target, plan, &prm, "envelope", &sd, &err), 0, "%s",
                     err.msg);
        sq_dyntree *dt;
        cr_assert_eq(sq_dyntree_new(envs[i].e, envs[i].L, envs[i].K, envs[i].N, V, &dt, &err),
                     0, "%s", err.msg);
        sq_dyntree_attach(sd, dt);
        int32_t spec[NEW], ar[NEW];
        int st[NEW], steps;
        static sq_step_info infos[NEW];
        memset(infos, 0, sizeof infos);
        cr_assert_eq(sq_specdec_generate(sd, prompt, 4, NEW, spec, st, &steps, infos, &err), 0,
                     "%s", err.msg);
        for (int s = 0; s < steps; s++) {
            cr_assert_eq(infos[s].nodes, envs[i].N, "step %d verifies N nodes", s);
            cr_assert_eq(infos[s].tree_accepted + 1, infos[s].tokens);
            sq_step_info_clear(&infos[s]);
        }
        cr_assert_eq(sq_specdec_autoregressive(sd, prompt, 4, NEW, 0, ar, &err), 0, "%s",
                     err.msg);
        int first = -1;
        for (int j = 0; j < NEW && first < 0; j++)
            if (spec[j] != ar[j])
                first = j;
        if (first >= 0)
            near_tie(target, prompt, 4, ar, first, spec[first]);
        sq_specdec_free(sd);
        sq_dyntree_free(dt);
        sq_plan_free(plan);
    }
    sq_model_free(draft);
    sq_model_free(target);
}

Test(emu_dyntree, a_cuda_batch_decodes_what_its_members_decode_alone)
{
    need_device();
    sq_model *draft = tiny_model(2, 1), *target = tiny_model(1, 2);
    enum { B = 3 };
    sq_error err = {0};
    sq_plan *plan;
    cr_assert_eq(sq_dyntree_plan(3, 2, &plan, &err), 0, "%s", err.msg);
    sq_specdec_params prm = cuda_params();
    sq_specdec_batch *bt;
    cr_assert_eq(sq_specdec_batch_new(draft, target, plan, &prm, "envelope", B, &bt, &err), 0,
                 "%s", err.msg);
    sq_dyntree *dt;
    cr_assert_eq(sq_dyntree_new(SQ_DYN_SGLANG, 3, 2, 6, V, &dt, &err), 0, "%s", err.msg);
    sq_dyntree_attach_batch(bt, dt);
    const int32_t p0[] = {1, 2, 3}, p1[] = {9, 8, 7, 6, 5}, p2[] = {4};
    const int32_t *prompts[B] = {p0, p1, p2};
    const int plen[B] = {3, 5, 1};
    static int32_t gen[B][NEW];
    int32_t *outs[B] = {gen[0], gen[1], gen[2]};
    int steps[B], bsteps;
    cr_assert_eq(sq_specdec_batch_generate(bt, prompts, plen, NEW, outs, steps, &bsteps, NULL,
                                           &err), 0, "%s", err.msg);
    for (int k = 0; k < B; k++) {
        int32_t alone[NEW];
        int st[NEW], ns;
        cr_assert_eq(sq_specdec_generate(sq_specdec_batch_member(bt, k), prompts[k], plen[k],
                                         NEW, alone, st, &ns, NULL, &err), 0, "%s", err.msg);
        /* the batched forward's rows may round differently: equal up to a near tie */
        int first = -1;
        for (int j = 0; j < NEW && first < 0; j++)
            if (alone[j] != gen[k][j])
                first = j;
        if (first >= 0)
            near_tie(target, prompts[k], plen[k], alone, first, gen[k][first]);
    }
    sq_specdec_batch_free(bt);
    sq_dyntree_free(dt);
    sq_plan_free(plan);
    sq_model_free(draft);
    sq_model_free(target);
}
