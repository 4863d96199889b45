/* bench-run: speculative decoding against target-only decoding on the CPU, for a few plans.
 *
 * Models (random weights, written to a temporary directory): the target is a Llama of
 * dim 256, 6 layers, vocabulary 4096; the draft is the same seed with 1 layer, so it shares the
 * target's embeddings, first layer and head (a self-speculative draft that accepts often). For
 * each plan and mode it generates NEW tokens from a few prompts and prints tokens/step, the
 * plan's expected tokens under a curve measured in the run itself, ms/token speculative vs the
 * target alone, and the share of time spent in draft, target and verification.
 *
 *   bench-run [NEW]      (default 64)
 *
 * SQ_BENCH_BACKEND=cuda in the environment runs both models on the CUDA backend. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "planner/dp.h"
#include "libsequoia/format/plan.h"
#include "runtime/specdec.h"
#include "runtime/st_writer.h"
#include "libsequoia/base/stats.h"
#include "tests/testutil.h"
#include "runtime/cpu_matmul.h"

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void die(const sq_error *err)
{
    fprintf(stderr, "bench-run: %s\n", err->msg);
    exit(1);
}

static sq_plan *make_plan(int n, int d)
{
    sq_dp_params prm = sq_dp_default_params();
    prm.budget = n;
    prm.depth = d;
    sq_dp *dp;
    sq_tree *t;
    sq_plan *plan;
    sq_error err = {0};
    if (sq_dp_solve(&prm, &dp, &err) || sq_dp_tree(dp, n, d, &t, &err) ||
        sq_plan_new(t, prm.curve, n, d, sq_dp_width(dp), &plan, &err))
        die(&err);
    sq_dp_free(dp);
    return plan;
}

int main(int argc, char **argv)
{
    sq_cpu_blas_reexec(argv);   /* OpenBLAS with the CPU's own kernels: runtime/cpu_matmul.h */
    int NEW = argc > 1 ? atoi(argv[1]) : 64;
    if (NEW < 8)
        NEW = 8;
    char *dir = tu_tmpdir();
    char *tp = tu_path(dir, "target"), *dp = tu_path(dir, "draft");
    sq_random_model_params mp = sq_random_model_default_params();
    mp.config.dim = 256;
    mp.config.hidden_dim = 688;
    mp.config.n_heads = 4;
    mp.config.n_kv_heads = 2;
    mp.config.head_dim = 64;
    mp.config.vocab_size = 4096;
    mp.config.max_position = 2048;
    mp.config.n_layers = 6;
    sq_error err = {0};
    if (sq_model_write_random(tp, &mp, &err))
        die(&err);
    mp.config.n_layers = 1;
    if (sq_model_write_random(dp, &mp, &err))
        die(&err);
    sq_model *draft, *target;
    if (sq_model_load(dp, &draft, &err) || sq_model_load(tp, &target, &err))
        die(&err);

    const int sizes[][2] = {{1, 1}, {4, 4}, {8, 5}, {16, 6}, {32, 8}, {64, 10}};
    const sq_mode modes[] = {SQ_MODE_GREEDY, SQ_MODE_STOCHASTIC};
    const int32_t prompts[3][4] = {{11, 420, 3000, 7}, {5, 5, 5, 5}, {4000, 1, 77, 1234}};
    printf("target: dim 256, 6 layers, vocab 4096 (%.1fM parameters); draft: its first layer\n",
           (4096.0 * 256 * 2 + 6 * (256.0 * 256 * 3 + 3 * 256.0 * 688)) / 1e6);
    printf("%-10s %-11s %6s %9s %9s %9s %10s %8s %6s %6s %6s\n", "plan", "mode", "steps",
           "tok/step", "ci95+-", "ms/tok", "ar ms/tok", "speedup", "draft", "target", "verify");
    for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++) {
        sq_plan *plan = make_plan(sizes[s][0], sizes[s][1]);
        for (size_t m = 0; m < sizeof modes / sizeof *modes; m++) {
            sq_specdec_params prm = sq_specdec_default_params();
            prm.mode = modes[m];
            prm.temperature = modes[m] == SQ_MODE_GREEDY ? 0.0 : 1.0;
            prm.seed = 1;
            prm.max_context = 1024;
            const char *be = getenv("SQ_BENCH_BACKEND");   /* cuda: tests/gpu/run.sh */
            if (be && strcmp(be, "cuda") == 0)
                prm.backend = SQ_BACKEND_CUDA;
            sq_specdec *sd;
            if (sq_specdec_new(draft, target, plan, &prm, "plan", &sd, &err))
                die(&err);
            int32_t *out = malloc((size_t)NEW * sizeof *out);
            int *st = malloc((size_t)NEW * sizeof *st);
            sq_step_info *info = calloc((size_t)NEW, sizeof *info);
            double *v = malloc((size_t)NEW * 3 * sizeof *v);
            int nv = 0;
            double spec = 0, ar = 0, dms = 0, tms = 0, vms = 0;
            for (int p = 0; p < 3; p++) {
                int k;
                double t0 = now_ms();
                if (sq_specdec_generate(sd, prompts[p], 4, NEW, out, st, &k, info, &err))
                    die(&err);
                spec += now_ms() - t0;
                for (int i = 0; i < k; i++) {
                    v[nv++] = st[i];
                    dms += info[i].draft_ms;
                    tms += info[i].target_ms;
                    vms += info[i].verify_ms;
                }
                t0 = now_ms();
                if (sq_specdec_autoregressive(sd, prompts[p], 4, NEW, 1, out, &err))
                    die(&err);
                ar += now_ms() - t0;
            }
            sq_mean_ci ci = sq_mean_ci_batch(v, nv);
            char name[32];
            snprintf(name, sizeof name, "%dx%d", sizes[s][0], sizes[s][1]);
            double tot = dms + tms + vms;
            printf("%-10s %-11s %6d %9.3f %9.3f %9.3f %10.3f %8.2f %5.0f%% %5.0f%% %5.1f%%\n",
                   name, sq_mode_name(modes[m]), nv, ci.mean, (ci.hi - ci.lo) / 2,
                   spec / (3.0 * NEW), ar / (3.0 * NEW), ar / spec, 100 * dms / tot,
                   100 * tms / tot, 100 * vms / tot);
            fflush(stdout);
            for (int i = 0; i < NEW; i++)
                sq_step_info_clear(&info[i]);
            free(info);
            free(out);
            free(st);
            free(v);
            sq_specdec_free(sd);
        }
        sq_plan_free(plan);
    }
    sq_model_free(draft);
    sq_model_free(target);
    tu_rmtree(dir);
    return 0;
}
