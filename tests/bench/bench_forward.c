/* bench-forward: speed of the CPU forward against the machine's floor (issues 4 and 16).
 *
 *   bench-forward [--model DIR] [--dim D] [--layers L] [--hidden H] [--vocab V] [--heads N]
 *                 [--kv-heads K] [--threads T] [--reps R] [--tree N] [--context C]
 *                 [--max-n M] [--dir DIR]
 *
 * In one run it measures
 *   1. the machine's memory bandwidth: the best of several memcpy's of a 1 GiB buffer,
 *      counted as bytes read + bytes written per second;
 *   2. the sustained SGEMM rate on the model's own matrix shapes: for every n and every
 *      distinct weight shape, out (n, d_out) = in (n, d_in) W^T repeated on one hot matrix,
 *      both with the runtime's product (runtime/cpu_matmul.h) and with OpenBLAS alone (sgemv
 *      for n = 1); the faster counts, so that the rate is compute, not memory;
 *   3. for n = 1, 2, 4, ..., M (default 128) tokens after a C-token prefix: the median time of
 *      an n-token forward (a random tree of n nodes, then dropped), the median time of the same
 *      GEMMs alone on the model's weights in the forward's order (what attention, norms, RoPE
 *      and activations add is the difference), and the floor
 *          max(weight bytes / bandwidth, sum over matrices of their GEMM time at the hot rate)
 *      with the ratio forward / floor (issue 16's target: <= 1.15 for every n);
 *   4. one-token decoding (forward + commit) as a fraction of the bandwidth (issue 4: >= 50%),
 *      and an N-node tree (default 64) against one token (issue 4: <= 3x).
 * The model is a random F32 Llama of the given shape (default ~110M parameters, untied), or
 * the Hugging Face directory of --model. Targets are printed, not asserted. */
#include <getopt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <gsl/gsl_cblas.h>

#include "libsequoia/base/stats.h"
#include "runtime/backend.h"
#include "runtime/model.h"
#include "runtime/st_writer.h"
#include "runtime/cpu_matmul.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* CPU seconds of the whole process (all threads): on a loaded machine, wall time says little. */
static double cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static double memcpy_bandwidth(void)
{
    size_t bytes = (size_t)1 << 30;
    char *a = malloc(bytes), *b = malloc(bytes);
    if (!a || !b) {
        free(a);
        free(b);
        return 0;
    }
    memset(a, 1, bytes);
    memset(b, 2, bytes);
    double best = 1e30;
    for (int r = 0; r < 5; r++) {
        double t0 = now_s();
        memcpy(r % 2 ? a : b, r % 2 ? b : a, bytes);
        double t = now_s() - t0;
        if (t < best)
            best = t;
    }
    volatile char sink = a[12345] + b[54321];
    (void)sink;
    free(a);
    free(b);
    return 2.0 * (double)bytes / best;
}

static void die(const char *what, const sq_error *err)
{
    fprintf(stderr, "bench-forward: %s: %s\n", what, err->msg);
    exit(1);
}

/* The weight matrices of one forward in the runtime's order: (d_out, d_in, data). */
typedef struct mat {
    int          d_out, d_in;
    const float *w;
} mat;

static int model_matrices(const sq_model *m, mat *out)
{
    const sq_model_config *c = &m->config;
    int q = c->n_heads * c->head_dim, kv = c->n_kv_heads * c->head_dim, k = 0;
    for (int l = 0; l < c->n_layers; l++) {
        const sq_layer_weights *lw = &m->w.layers[l];
        out[k++] = (mat){q, c->dim, lw->t[SQ_L_WQ].p};
        out[k++] = (mat){kv, c->dim, lw->t[SQ_L_WK].p};
        out[k++] = (mat){kv, c->dim, lw->t[SQ_L_WV].p};
        out[k++] = (mat){c->dim, q, lw->t[SQ_L_WO].p};
        out[k++] = (mat){c->hidden_dim, c->dim, lw->t[SQ_L_GATE].p};
        out[k++] = (mat){c->hidden_dim, c->dim, lw->t[SQ_L_UP].p};
        out[k++] = (mat){c->dim, c->hidden_dim, lw->t[SQ_L_DOWN].p};
    }
    out[k++] = (mat){c->vocab_size, c->dim, m->w.t[SQ_M_LM_HEAD].p};
    return k;
}

/* The product the forward uses (runtime/cpu_matmul.h: the skinny kernel or OpenBLAS, on a pool
 * of the forward's threads), or OpenBLAS alone (sgemv for one row): the floor takes the faster
 * of the two, so that it is the best product this machine offers, not only the runtime's. */
static sq_pool *bench_pool;   /* the shared pool the forward uses too */

char *openblas_get_corename(void);   /* OpenBLAS's cblas.h; not in GSL's header */

static void gemm(float *out, const float *in, const float *w, int n, int d_in, int d_out,
                 int blas)
{
    if (!blas)
        sq_cpu_matmul(bench_pool, out, in, w, n, d_in, d_out, 0);
    else if (n == 1)
        cblas_sgemv(CblasRowMajor, CblasNoTrans, d_out, d_in, 1.0f, w, d_in, in, 1, 0.0f, out, 1);
    else
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, d_out, d_in, 1.0f, in, d_in, w,
                    d_in, 0.0f, out, d_out);
}

/* Seconds per call of the (n, d_in) x (d_out, d_in)^T product on one hot matrix: the best of
 * 5 batches of calls, each batch >= 2 ms. */
static double hot_gemm_s(int n, int d_in, int d_out, int blas, float *x, float *y, float *w)
{
    gemm(y, x, w, n, d_in, d_out, blas);
    double t0 = now_s();
    int reps = 0;
    do {
        gemm(y, x, w, n, d_in, d_out, blas);
        reps++;
    } while (now_s() - t0 < 2e-3);
    double best = 1e30;
    for (int b = 0; b < 5; b++) {
        t0 = now_s();
        for (int r = 0; r < reps; r++)
            gemm(y, x, w, n, d_in, d_out, blas);
        double t = (now_s() - t0) / reps;
        if (t < best)
            best = t;
    }
    return best;
}

int main(int argc, char **argv)
{
    sq_cpu_blas_reexec(argv);   /* OpenBLAS with the CPU's own kernels: runtime/cpu_matmul.h */
    sq_random_model_params rp = sq_random_model_default_params();
    rp.config.dim = 768;
    rp.config.n_layers = 12;
    rp.config.hidden_dim = 2048;
    rp.config.vocab_size = 16384;
    rp.config.n_heads = 12;
    rp.config.n_kv_heads = 12;
    rp.config.max_position = 4096;
    int threads = 0, reps = 30, tree = 64, context = 128, max_n = 128;
    const char *dir_arg = NULL, *model_arg = NULL;
    static const struct option opts[] = {
        {"dim", required_argument, NULL, 'd'},    {"layers", required_argument, NULL, 'l'},
        {"hidden", required_argument, NULL, 'H'}, {"vocab", required_argument, NULL, 'v'},
        {"heads", required_argument, NULL, 'n'},  {"kv-heads", required_argument, NULL, 'k'},
        {"threads", required_argument, NULL, 't'}, {"reps", required_argument, NULL, 'r'},
        {"tree", required_argument, NULL, 'T'},   {"context", required_argument, NULL, 'c'},
        {"dir", required_argument, NULL, 'D'},    {"model", required_argument, NULL, 'm'},
        {"max-n", required_argument, NULL, 'M'},  {NULL, 0, NULL, 0},
    };
    int o;
    while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        int v = optarg ? atoi(optarg) : 0;
        switch (o) {
        case 'd': rp.config.dim = v; break;
        case 'l': rp.config.n_layers = v; break;
        case 'H': rp.config.hidden_dim = v; break;
        case 'v': rp.config.vocab_size = v; break;
        case 'n': rp.config.n_heads = v; break;
        case 'k': rp.config.n_kv_heads = v; break;
        case 't': threads = v; break;
        case 'r': reps = v > 0 ? v : 1; break;
        case 'T': tree = v > 1 ? v : 2; break;
        case 'c': context = v > 0 ? v : 1; break;
        case 'D': dir_arg = optarg; break;
        case 'm': model_arg = optarg; break;
        case 'M': max_n = v > 0 ? v : 1; break;
        default:
            fprintf(stderr, "usage: bench-forward [--model DIR] [--dim D] [--layers L] "
                            "[--hidden H] [--vocab V] [--heads N] [--kv-heads K] [--threads T] "
                            "[--reps R] [--tree N] [--context C] [--max-n M] [--dir DIR]\n");
            return 64;
        }
    }
    rp.config.head_dim = rp.config.dim / rp.config.n_heads;
    if (threads <= 0) {
        long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
        threads = ncpu > 0 ? (int)ncpu : 1;
    }
    if (!(bench_pool = sq_pool_shared_acquire(threads))) {
        fprintf(stderr, "bench-forward: out of memory for the thread pool\n");
        return 70;
    }
    printf("OpenBLAS kernels: %s\n", openblas_get_corename());

    double bw = memcpy_bandwidth();
    printf("memory bandwidth (1 GiB memcpy, read+write): %.2f GB/s\n", bw / 1e9);

    char tmpl[] = "/tmp/bench-forward-XXXXXX";
    char dir[4096];
    int made_tmp = 0;
    sq_error err = {0};
    double t_write = 0;
    if (model_arg) {
        snprintf(dir, sizeof dir, "%s", model_arg);
    } else {
        if (dir_arg) {
            snprintf(dir, sizeof dir, "%s", dir_arg);
        } else {
            if (!mkdtemp(tmpl)) {
                perror("mkdtemp");
                return 1;
            }
            made_tmp = 1;
            snprintf(dir, sizeof dir, "%s/model", tmpl);
        }
        double t0 = now_s();
        if (sq_model_write_random(dir, &rp, &err))
            die(dir, &err);
        t_write = now_s() - t0;
    }
    sq_model *m;
    double t0 = now_s();
    if (sq_model_load(dir, &m, &err))
        die(dir, &err);
    double t_load = now_s() - t0;
    const sq_model_config *c = sq_model_get_config(m);
    double D = c->dim, V = c->vocab_size;
    mat *mats = malloc(sizeof(mat) * ((size_t)c->n_layers * 7 + 1));
    if (!mats)
        return 70;
    int nmats = model_matrices(m, mats);
    double mat_params = 0;
    int max_in = 1, max_out = 1;
    for (int i = 0; i < nmats; i++) {
        mat_params += (double)mats[i].d_out * mats[i].d_in;
        if (mats[i].d_in > max_in)
            max_in = mats[i].d_in;
        if (mats[i].d_out > max_out)
            max_out = mats[i].d_out;
    }
    double params = (double)sq_model_config_params(c);
    /* bytes one forward must read: every matrix, the norms and (per token) an embedding row */
    double weight_bytes = (mat_params + D * (2.0 * c->n_layers + 1)) * 4.0;
    printf("model: %s: dim %d, layers %d, heads %d/%d, hidden %d, vocab %d: %.1fM parameters, "
           "run as F32 (%s on disk%s, loaded in %.2f s); %d threads\n",
           model_arg ? model_arg : "random", c->dim, c->n_layers, c->n_heads, c->n_kv_heads,
           c->hidden_dim, c->vocab_size, params / 1e6, c->dtype,
           model_arg ? "" : (t_write > 0 ? ", written" : ""), t_load, threads);

    sq_context_params cp = sq_context_default_params();
    cp.max_context = context + reps + 8;
    cp.max_pending = tree > context ? tree : context;
    if (cp.max_pending < max_n)
        cp.max_pending = max_n;
    cp.threads = threads;
    sq_context *ctx;
    if (sq_context_new(m, &cp, &ctx, &err))
        die("context", &err);
    size_t mp = (size_t)cp.max_pending;
    int32_t *tok = malloc(sizeof(int32_t) * mp);
    int32_t *pos = malloc(sizeof(int32_t) * mp);
    int32_t *keep = malloc(sizeof(int32_t) * mp);
    uint8_t *mask = calloc(mp * mp, 1);
    float *logits = malloc(sizeof(float) * mp * (size_t)c->vocab_size);
    double *times = malloc(sizeof(double) * (size_t)reps);
    int *parent = malloc(sizeof(int) * mp), *depth = malloc(sizeof(int) * mp);
    size_t act = mp * (size_t)(max_in > max_out ? max_in : max_out);
    float *gx = malloc(sizeof(float) * act), *gy = malloc(sizeof(float) * act);
    float *hw = malloc(sizeof(float) * (size_t)max_in * (size_t)max_out);
    if (!tok || !pos || !keep || !mask || !logits || !times || !parent || !depth || !gx || !gy ||
        !hw)
        return 70;
    for (size_t i = 0; i < act; i++)
        gx[i] = (float)((i * 2654435761u) % 1000) * 1e-3f - 0.5f;
    for (size_t i = 0; i < (size_t)max_in * max_out; i++)
        hw[i] = (float)((i * 40503u) % 1000) * 1e-3f - 0.5f;
    srand(7);
    /* the prefix */
    for (int i = 0; i < context; i++) {
        tok[i] = rand() % c->vocab_size;
        pos[i] = i;
        keep[i] = i;
        for (int j = 0; j < context; j++)
            mask[(size_t)i * context + j] = j <= i;
    }
    if (sq_context_forward(ctx, tok, pos, mask, context, logits, &err) ||
        sq_context_commit(ctx, keep, context, &err))
        die("prefix", &err);
    int C = context;

    /* n-token forwards against the floor */
    printf("\nn-token forward after a %d-token prefix (median of %d; floor = max(weight bytes / "
           "bandwidth, GEMM FLOPs / hot GEMM rate on these shapes)):\n", C, reps);
    printf("%5s %11s %9s %11s %11s %11s %9s %9s %8s %9s\n", "n", "forward ms", "CPU ms",
           "GEMMs ms", "mem floor", "GEMM floor", "floor ms", "GFLOP/s", "GEMM +%", "vs floor");
    double worst = 0;
    int worst_n = 0;
    for (int n = 1; n <= max_n; n = n < max_n && 2 * n > max_n ? max_n : 2 * n) {
        /* the compute floor: each distinct shape once, hot, times how often it occurs */
        double gemm_floor = 0;
        for (int i = 0; i < nmats; i++) {
            int seen = 0;
            for (int j = 0; j < i && !seen; j++)
                seen = mats[j].d_out == mats[i].d_out && mats[j].d_in == mats[i].d_in;
            if (seen)
                continue;
            int count = 0;
            for (int j = i; j < nmats; j++)
                count += mats[j].d_out == mats[i].d_out && mats[j].d_in == mats[i].d_in;
            double t = hot_gemm_s(n, mats[i].d_in, mats[i].d_out, 0, gx, gy, hw);
            double tb = hot_gemm_s(n, mats[i].d_in, mats[i].d_out, 1, gx, gy, hw);
            t = tb < t ? tb : t;
            gemm_floor += count * t;
        }
        double mem_floor = weight_bytes / bw;
        double floor = mem_floor > gemm_floor ? mem_floor : gemm_floor;
        /* the forward: a random n-node tree, dropped after each forward */
        parent[0] = -1;
        depth[0] = 0;
        for (int i = 1; i < n; i++) {
            parent[i] = rand() % i;
            depth[i] = depth[parent[i]] + 1;
        }
        memset(mask, 0, (size_t)n * (size_t)n);
        for (int i = 0; i < n; i++) {
            tok[i] = rand() % c->vocab_size;
            pos[i] = C + depth[i];
            for (int a = i; a >= 0; a = parent[a])
                mask[(size_t)i * n + a] = 1;
        }
        double fcpu0 = 0;
        for (int r = -2; r < reps; r++) {
            if (r == 0)
                fcpu0 = cpu_s();
            double s = now_s();
            if (sq_context_forward(ctx, tok, pos, mask, n, logits, &err) ||
                sq_context_commit(ctx, NULL, 0, &err))
                die("forward", &err);
            if (r >= 0)
                times[r] = now_s() - s;
        }
        double fcpu = (cpu_s() - fcpu0) / reps;
        double tf = sq_quantile(times, reps, 0.5);
        /* the same GEMMs alone, in order, on the model's weights */
        for (int r = -2; r < reps; r++) {
            double s = now_s();
            for (int i = 0; i < nmats; i++)
                gemm(gy, gx, mats[i].w, n, mats[i].d_in, mats[i].d_out, 0);
            if (r >= 0)
                times[r] = now_s() - s;
        }
        double tg = sq_quantile(times, reps, 0.5);
        double ratio = tf / floor;
        if (ratio > worst) {
            worst = ratio;
            worst_n = n;
        }
        printf("%5d %11.3f %9.3f %11.3f %11.3f %11.3f %9.3f %9.1f %7.1f%% %8.2fx\n", n, tf * 1e3,
               fcpu * 1e3, tg * 1e3, mem_floor * 1e3, gemm_floor * 1e3, floor * 1e3,
               2.0 * n * mat_params / tf / 1e9, 100.0 * (tf - tg) / tg, ratio);
    }
    printf("worst: %.2fx the floor at n = %d (target <= 1.15x for every n)\n", worst, worst_n);

    /* one token at a time */
    double cpu0 = 0;
    for (int r = -2; r < reps; r++) {
        if (r == 0)
            cpu0 = cpu_s();   /* two warm-up steps */
        int32_t t = rand() % c->vocab_size, p = C, k = 0;
        uint8_t one = 1;
        double s = now_s();
        if (sq_context_forward(ctx, &t, &p, &one, 1, logits, &err) ||
            sq_context_commit(ctx, &k, 1, &err))
            die("decode", &err);
        if (r >= 0)
            times[r] = now_s() - s;
        C++;
    }
    double streamed = weight_bytes + D * 4.0;
    double t1 = sq_quantile(times, reps, 0.5), c1 = (cpu_s() - cpu0) / reps;
    printf("\ndecode 1 token (context %d): median %.3f ms (%.3f ms CPU, all threads); streams "
           "%.1f MB of weights at %.2f GB/s = %.0f%% of the memcpy bandwidth (target >= 50%%; above 100%%: the weights sit in the L3 cache)\n",
           context, t1 * 1e3, c1 * 1e3, streamed / 1e6, streamed / t1 / 1e9,
           100.0 * streamed / t1 / bw);

    /* a random tree of `tree` nodes, verified in one forward, then dropped */
    parent[0] = -1;
    depth[0] = 0;
    for (int i = 1; i < tree; i++) {
        parent[i] = rand() % i;
        depth[i] = depth[parent[i]] + 1;
    }
    memset(mask, 0, (size_t)tree * (size_t)tree);
    for (int i = 0; i < tree; i++) {
        tok[i] = rand() % c->vocab_size;
        pos[i] = C + depth[i];
        for (int a = i; a >= 0; a = parent[a])
            mask[(size_t)i * tree + a] = 1;
    }
    for (int r = -2; r < reps; r++) {
        if (r == 0)
            cpu0 = cpu_s();
        double s = now_s();
        if (sq_context_forward(ctx, tok, pos, mask, tree, logits, &err) ||
            sq_context_commit(ctx, NULL, 0, &err))
            die("tree", &err);
        if (r >= 0)
            times[r] = now_s() - s;
    }
    double tt = sq_quantile(times, reps, 0.5), ct = (cpu_s() - cpu0) / reps;
    double flops = 2.0 * tree * (params - V * D);
    printf("verify a %d-node tree: median %.3f ms = %.2fx one token (target <= 3x); %.3f ms CPU "
           "= %.2fx one token's CPU; %.1f GFLOP/s of wall time\n", tree, tt * 1e3, tt / t1,
           ct * 1e3, ct / c1, flops / tt / 1e9);
    sq_context_free(ctx);
    sq_model_free(m);
    free(tok);
    free(pos);
    free(keep);
    free(mask);
    free(logits);
    free(times);
    free(parent);
    free(depth);
    free(gx);
    free(gy);
    free(hw);
    free(mats);
    if (made_tmp) {
        char cmd[8192];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpl);
        if (system(cmd) != 0)
            fprintf(stderr, "bench-forward: could not remove %s\n", tmpl);
    }
    return 0;
}
