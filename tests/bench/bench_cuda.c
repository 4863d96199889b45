/* bench-cuda: the CUDA backend's two targets of issue 7, measured in one run.
 *
 *   bench-cuda [--config config.json] [--dtype f16|bf16] [--offload] [--prefix L] [--tree N]
 *              [--reps R] [--copy-mb MB] [--json OUT.json]
 *
 *   1. the device's memory bandwidth: the best of several device-to-device copies of 2 GiB
 *      (--copy-mb),
 *      counted as bytes read + bytes written per second;
 *   2. one-token decoding of a random model of the config's shape (default: the public
 *      Llama-2-7B shape) in 16-bit weights after an L-token prefix (default 512): the median
 *      forward time, and the weight bytes it streams (every layer's matrices and norms, the LM
 *      head, one embedding row) per second, as a fraction of 1. Target: >= 70%.
 *   3. verifying an N-node random tree (default 128) in one forward, as a multiple of 2.
 *      Target: <= 1.5x.
 * Targets are printed (and written to --json), never asserted. Without a CUDA device it says
 * so and exits 77 (meson reports a skipped benchmark). */
#include <getopt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/config.h"
#include "runtime/cuda_sample.h"
#include "runtime/model.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static void llama2_7b(sq_model_config *c)
{
    memset(c, 0, sizeof *c);
    c->dim = 4096;
    c->hidden_dim = 11008;
    c->n_layers = 32;
    c->n_heads = 32;
    c->n_kv_heads = 32;
    c->head_dim = 128;
    c->vocab_size = 32000;
    c->max_position = 4096;
    c->rope_theta = 10000.0f;
    c->norm_eps = 1e-5f;
    strcpy(c->dtype, "F16");
}

/* Bytes one decode step reads from the weights: 16-bit matrices, float32 norms. */
static double decode_weight_bytes(const sq_model_config *c)
{
    double dim = c->dim, hid = c->hidden_dim, V = c->vocab_size;
    double q = (double)c->n_heads * c->head_dim, kv = (double)c->n_kv_heads * c->head_dim;
    double layer = 2.0 * (q * dim + 2.0 * kv * dim + dim * q + 3.0 * hid * dim) + 2.0 * dim * 4.0;
    return c->n_layers * layer + 2.0 * V * dim + 4.0 * dim + 2.0 * dim;
}

static int fail(const char *what, const sq_error *err)
{
    fprintf(stderr, "bench-cuda: %s: %s\n", what, err->msg);
    return 1;
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"config", required_argument, NULL, 'c'}, {"dtype", required_argument, NULL, 'd'},
        {"offload", no_argument, NULL, 'O'},      {"prefix", required_argument, NULL, 'p'},
        {"tree", required_argument, NULL, 't'},   {"reps", required_argument, NULL, 'r'},
        {"json", required_argument, NULL, 'j'},   {"copy-mb", required_argument, NULL, 'm'},
        {NULL, 0, NULL, 0},
    };
    const char *config = NULL, *json = NULL, *dtype = "f16";
    int offload = 0, prefix = 512, tree = 128, reps = 20, copy_mb = 2048, c;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case 'c': config = optarg; break;
        case 'd': dtype = optarg; break;
        case 'O': offload = 1; break;
        case 'p': prefix = atoi(optarg); break;
        case 't': tree = atoi(optarg); break;
        case 'r': reps = atoi(optarg); break;
        case 'j': json = optarg; break;
        case 'm': copy_mb = atoi(optarg); break;
        default:
            fprintf(stderr, "usage: bench-cuda [--config config.json] [--dtype f16|bf16] "
                    "[--offload] [--prefix L] [--tree N] [--reps R] [--copy-mb MB] [--json OUT]\n");
            return 64;
        }
    }
    if (prefix < 1 || tree < 2 || reps < 1 || copy_mb < 1) {
        fprintf(stderr, "bench-cuda: --prefix >= 1, --tree >= 2, --reps >= 1, --copy-mb >= 1\n");
        return 64;
    }
    sq_error err = {0};
    if (sq_cuda_device_count(&err) < 1) {
        printf("bench-cuda: skipped: %s\n", err.msg);
        return 77;
    }
    sq_model_config cfg;
    if (config) {
        if (sq_model_config_load(config, &cfg, &err))
            return fail(config, &err);
    } else {
        llama2_7b(&cfg);
    }

    double copy_gbs = 0.0;
    if (sq_cuda_copy_bandwidth((size_t)copy_mb << 20, 10, &copy_gbs, &err))
        return fail("device-to-device copy", &err);
    printf("device-to-device copy: %.1f GB/s (read + write)\n", copy_gbs);

    double t0 = now_s();
    sq_model *m;
    if (sq_model_new_random_device(&cfg, 1, &m, &err))   /* weights made on the device */
        return fail("random model", &err);
    sq_context_params p = sq_context_default_params();
    p.backend = SQ_BACKEND_CUDA;
    if (sq_weight_dtype_parse(dtype, &p.dtype)) {
        fprintf(stderr, "bench-cuda: --dtype: '%s' is not f16 or bf16\n", dtype);
        return 64;
    }
    p.offload = offload;
    p.max_context = prefix + 1;
    p.max_pending = tree > 256 ? tree : 256;
    sq_context *ctx;
    if (sq_context_new(m, &p, &ctx, &err))
        return fail("context", &err);
    printf("%s, %.2fB parameters, %s%s, ready in %.1f s\n", sq_context_device_name(ctx),
           (double)sq_model_config_params(&cfg) / 1e9, dtype, offload ? ", offload" : "",
           now_s() - t0);

    /* the prefix, in chunks of max_pending */
    int32_t *tok = malloc((size_t)p.max_pending * sizeof *tok);
    int32_t *pos = malloc((size_t)p.max_pending * sizeof *pos);
    int32_t *keep = malloc((size_t)p.max_pending * sizeof *keep);
    uint8_t *mask = malloc((size_t)p.max_pending * p.max_pending);
    float *logits = malloc((size_t)p.max_pending * cfg.vocab_size * sizeof *logits);
    int *parent = malloc((size_t)tree * sizeof *parent), *depth = malloc((size_t)tree * sizeof *depth);
    double *ts = malloc((size_t)reps * sizeof *ts);
    if (!tok || !pos || !keep || !mask || !logits || !parent || !depth || !ts) {
        fprintf(stderr, "bench-cuda: out of memory\n");
        return 70;
    }
    for (int done = 0; done < prefix;) {
        int n = prefix - done < p.max_pending ? prefix - done : p.max_pending;
        memset(mask, 0, (size_t)n * n);
        for (int i = 0; i < n; i++) {
            tok[i] = (done + i) * 7919 % cfg.vocab_size;
            pos[i] = done + i;
            keep[i] = i;
            for (int j = 0; j <= i; j++)
                mask[i * n + j] = 1;
        }
        if (sq_context_forward(ctx, tok, pos, mask, n, logits, &err) ||
            sq_context_commit(ctx, keep, n, &err))
            return fail("prefill", &err);
        done += n;
    }

    /* one token: forward, then drop it (commit nothing) */
    tok[0] = 42;
    pos[0] = prefix;
    mask[0] = 1;
    for (int r = -2; r < reps; r++) {
        double a = now_s();
        if (sq_context_forward(ctx, tok, pos, mask, 1, logits, &err))
            return fail("decode", &err);
        double b = now_s();
        if (r >= 0)
            ts[r] = b - a;
        sq_context_commit(ctx, NULL, 0, &err);
    }
    double t1 = median(ts, reps);

    /* a random tree of `tree` nodes */
    uint64_t s = 12345;
    memset(mask, 0, (size_t)tree * tree);
    for (int i = 0; i < tree; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        parent[i] = i == 0 ? -1 : (int)((s >> 33) % (uint64_t)i);
        depth[i] = i == 0 ? 0 : depth[parent[i]] + 1;
        tok[i] = (int32_t)((s >> 20) % (uint64_t)cfg.vocab_size);
        pos[i] = prefix + depth[i];
        for (int a = i; a >= 0; a = parent[a])
            mask[(size_t)i * tree + a] = 1;
    }
    for (int r = -2; r < reps; r++) {
        double a = now_s();
        if (sq_context_forward(ctx, tok, pos, mask, tree, logits, &err))
            return fail("verify", &err);
        double b = now_s();
        if (r >= 0)
            ts[r] = b - a;
        sq_context_commit(ctx, NULL, 0, &err);
    }
    double tn = median(ts, reps);

    double bytes = decode_weight_bytes(&cfg), weights_gbs = bytes / t1 / 1e9;
    double frac = weights_gbs / copy_gbs, ratio = tn / t1;
    printf("decode 1 token: %.3f ms, weights %.2f GB -> %.1f GB/s = %.1f%% of the copy "
           "bandwidth (target >= 70%%: %s)\n", t1 * 1e3, bytes / 1e9, weights_gbs, 100 * frac,
           frac >= 0.70 ? "met" : "NOT met");
    printf("verify %d tokens: %.3f ms = %.2fx one token (target <= 1.5x: %s); it includes "
           "copying %.1f MB of float32 logits to the host\n", tree, tn * 1e3, ratio,
           ratio <= 1.5 ? "met" : "NOT met", (double)tree * cfg.vocab_size * 4 / 1e6);
    if (json) {
        FILE *fp = fopen(json, "w");
        if (!fp) {
            perror(json);
            return 73;
        }
        fprintf(fp, "{\n  \"device\": \"%s\",\n  \"dtype\": \"%s\",\n  \"offload\": %s,\n"
                "  \"params\": %zu,\n  \"prefix\": %d,\n  \"copy_gb_per_s\": %.3f,\n"
                "  \"decode_ms\": %.4f,\n  \"decode_weight_bytes\": %.0f,\n"
                "  \"decode_gb_per_s\": %.3f,\n  \"decode_fraction_of_copy\": %.4f,\n"
                "  \"target_decode_fraction\": 0.70,\n  \"decode_target_met\": %s,\n"
                "  \"tree\": %d,\n  \"verify_ms\": %.4f,\n  \"verify_ratio\": %.4f,\n"
                "  \"target_verify_ratio\": 1.5,\n  \"verify_target_met\": %s\n}\n",
                sq_context_device_name(ctx), dtype, offload ? "true" : "false",
                sq_model_config_params(&cfg), prefix, copy_gbs, t1 * 1e3, bytes, weights_gbs,
                frac, frac >= 0.70 ? "true" : "false", tree, tn * 1e3, ratio,
                ratio <= 1.5 ? "true" : "false");
        if (fclose(fp)) {
            perror(json);
            return 74;
        }
    }
    sq_context_free(ctx);
    sq_model_free(m);
    free(tok);
    free(pos);
    free(keep);
    free(mask);
    free(logits);
    free(parent);
    free(depth);
    free(ts);
    return 0;
}
