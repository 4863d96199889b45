/* bench-decode16: one-token CPU decoding with 16-bit weights against the machine's copy
 * bandwidth, and the process's peak memory (issue 24, docs/runtime.md "16-bit weights on the
 * CPU"). A program, not a test: nothing is asserted.
 *
 *   bench-decode16 [--config config.json] [--dtype bf16|f16|f32] [--threads T] [--reps R]
 *                  [--prefix P] [--isa auto|scalar|avx2|avx512]
 *                  [--dim D --layers L --hidden H --vocab V --heads N --kv-heads K]
 *
 * In one run:
 *   1. a model of the shape (config.json, or the options; default a ~100M-parameter shape so
 *      that `meson test --benchmark` stays short) with random weights made in the dtype, as
 *      sequoia-profile makes them (sq_model_new_random_dtype: 2 bytes per matrix parameter in
 *      16 bits);
 *   2. after a prefix of P tokens, R one-token steps (forward + commit): the median step, the
 *      weights one forward reads (sq_weights_read_bytes: every matrix but the embedding) over
 *      it in GB/s, and that rate as a fraction of the copy's read rate;
 *   3. the peak resident memory (getrusage ru_maxrss) against the weights' bytes;
 *   4. then, the model freed (so that its buffers do not count in the peak), the copy bandwidth:
 *      the best of 5 memcpy's of a 512 MiB buffer, counted as bytes read + bytes written per
 *      second (what a streaming kernel can move), and the read rate alone (half of that).
 * It prints the CPU model (/proc/cpuinfo) and the products' instruction set (runtime/cpu_matmul.h). */
#include <getopt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "runtime/config.h"
#include "runtime/cpu_matmul.h"
#include "runtime/memory.h"
#include "runtime/model.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* bytes read + written per second of the best of 5 copies of `bytes` */
static double copy_bandwidth(size_t bytes)
{
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
        best = t < best ? t : best;
    }
    volatile char sink = (char)(a[12345] + b[54321]);
    (void)sink;
    free(a);
    free(b);
    return 2.0 * (double)bytes / best;
}

static void cpu_model(char *buf, size_t cap)
{
    snprintf(buf, cap, "unknown CPU");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f)
        return;
    char line[512];
    while (fgets(line, sizeof line, f))
        if (strncmp(line, "model name", 10) == 0) {
            char *c = strchr(line, ':');
            if (c) {
                c += 1 + (c[1] == ' ');
                c[strcspn(c, "\n")] = 0;
                snprintf(buf, cap, "%s", c);
            }
            break;
        }
    fclose(f);
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    sq_cpu_blas_reexec(argv);
    const char *config = NULL, *dtype_name = "bf16", *isa = "auto";
    int threads = 0, reps = 20, prefix = 32;
    sq_model_config c = {0};
    c.dim = 768;
    c.hidden_dim = 2048;
    c.n_layers = 12;
    c.n_heads = 12;
    c.n_kv_heads = 4;
    c.vocab_size = 32000;
    c.max_position = 4096;
    c.rope_theta = 10000.0f;
    c.norm_eps = 1e-5f;
    static const struct option opts[] = {
        {"config", required_argument, NULL, 'c'}, {"dtype", required_argument, NULL, 't'},
        {"threads", required_argument, NULL, 'T'}, {"reps", required_argument, NULL, 'r'},
        {"prefix", required_argument, NULL, 'p'}, {"isa", required_argument, NULL, 'i'},
        {"dim", required_argument, NULL, 'd'}, {"layers", required_argument, NULL, 'l'},
        {"hidden", required_argument, NULL, 'H'}, {"vocab", required_argument, NULL, 'v'},
        {"heads", required_argument, NULL, 'n'}, {"kv-heads", required_argument, NULL, 'k'},
        {NULL, 0, NULL, 0}};
    int ch;
    while ((ch = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (ch) {
        case 'c': config = optarg; break;
        case 't': dtype_name = optarg; break;
        case 'T': threads = atoi(optarg); break;
        case 'r': reps = atoi(optarg); break;
        case 'p': prefix = atoi(optarg); break;
        case 'i': isa = optarg; break;
        case 'd': c.dim = atoi(optarg); break;
        case 'l': c.n_layers = atoi(optarg); break;
        case 'H': c.hidden_dim = atoi(optarg); break;
        case 'v': c.vocab_size = atoi(optarg); break;
        case 'n': c.n_heads = atoi(optarg); break;
        case 'k': c.n_kv_heads = atoi(optarg); break;
        default: return 64;
        }
    }
    sq_error err = {0};
    int rc;
    if (config && (rc = sq_model_config_load(config, &c, &err))) {
        fprintf(stderr, "bench-decode16: %s\n", err.msg);
        return rc;
    }
    if (!config)
        c.head_dim = c.dim / c.n_heads;
    sq_weight_dtype dt;
    if (sq_weight_dtype_parse(dtype_name, &dt)) {
        fprintf(stderr, "bench-decode16: --dtype: f32, f16 or bf16\n");
        return 64;
    }
    static const char *const isas[] = {"auto", "scalar", "avx2", "avx512"};
    for (int i = 0; i < 4; i++)
        if (!strcmp(isa, isas[i]) && sq_cpu_isa_set((sq_cpu_isa)i)) {
            fprintf(stderr, "bench-decode16: --isa %s: this CPU lacks it\n", isa);
            return 69;
        }
    if (reps < 1 || prefix < 1 || prefix + reps + 1 > c.max_position) {
        fprintf(stderr, "bench-decode16: --reps and --prefix must be >= 1 and fit the context\n");
        return 64;
    }

    char cpu[256];
    cpu_model(cpu, sizeof cpu);
    printf("CPU: %s; products on %s\n", cpu, sq_cpu_isa_name(sq_cpu_isa_get()));

    sq_model *m;
    double t0 = now_s();
    if ((rc = sq_model_new_random_dtype(&c, 1, dt, &m, &err))) {
        fprintf(stderr, "bench-decode16: %s\n", err.msg);
        return rc;
    }
    const sq_model_config *mc = sq_model_get_config(m);
    const double params = (double)sq_model_config_params(mc);
    printf("model: dim %d, %d layers, hidden %d, %d/%d heads, vocab %d: %.3f B parameters in %s, "
           "%.2f GB of weights (made in %.1f s)\n", mc->dim, mc->n_layers, mc->hidden_dim,
           mc->n_heads, mc->n_kv_heads, mc->vocab_size, params / 1e9, dtype_name,
           sq_weights_bytes(mc) / 1e9, now_s() - t0);

    sq_context_params cp = sq_context_default_params();
    cp.threads = threads;
    cp.max_context = prefix + reps + 2;
    cp.max_pending = prefix;
    sq_context *ctx;
    if ((rc = sq_context_new(m, &cp, &ctx, &err))) {
        fprintf(stderr, "bench-decode16: %s\n", err.msg);
        sq_model_free(m);
        return rc;
    }
    int32_t *tok = malloc(sizeof(int32_t) * (size_t)prefix), *pos = malloc(sizeof(int32_t) *
                                                                            (size_t)prefix);
    uint8_t *mask = calloc((size_t)prefix * (size_t)prefix, 1);
    float *logits = malloc(sizeof(float) * (size_t)mc->vocab_size * (size_t)prefix);
    double *step = malloc(sizeof(double) * (size_t)reps);
    if (!tok || !pos || !mask || !logits || !step) {
        fprintf(stderr, "bench-decode16: out of memory\n");
        return 70;
    }
    for (int i = 0; i < prefix; i++) {
        tok[i] = (i * 7919 + 13) % mc->vocab_size;
        pos[i] = i;
        for (int j = 0; j <= i; j++)
            mask[(size_t)i * prefix + j] = 1;
    }
    int32_t keep[1] = {0};
    rc = sq_context_forward(ctx, tok, pos, mask, prefix, logits, &err);
    if (!rc) {
        int32_t *all = malloc(sizeof(int32_t) * (size_t)prefix);
        for (int i = 0; i < prefix; i++)
            all[i] = i;
        rc = sq_context_commit(ctx, all, prefix, &err);
        free(all);
    }
    const uint8_t one = 1;
    for (int r = 0; r < reps && !rc; r++) {
        int32_t t = (r * 31 + 5) % mc->vocab_size, p = prefix + r;
        double s0 = now_s();
        rc = sq_context_forward(ctx, &t, &p, &one, 1, logits, &err) ||
             sq_context_commit(ctx, keep, 1, &err);
        step[r] = now_s() - s0;
    }
    if (rc) {
        fprintf(stderr, "bench-decode16: %s\n", err.msg);
        return 70;
    }
    qsort(step, (size_t)reps, sizeof *step, cmp_d);
    const double med = step[reps / 2];
    const double read = sq_weights_read_bytes(mc, sq_context_dtype(ctx));
    const sq_model_config shape = *mc;
    mc = &shape;
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);   /* before the copy's buffers */
    const double owned = (double)sq_model_owned_bytes(m);
    sq_context_free(ctx);
    sq_model_free(m);
    /* the copy after the model is gone: its 1 GiB does not count in the peak */
    double copy = copy_bandwidth((size_t)512 << 20);
    printf("copy bandwidth: %.2f GB/s read + written (%.2f GB/s read)\n", copy / 1e9,
           copy / 2e9);
    printf("decode: median %.3f ms per token (best %.3f) over %d steps after %d tokens, %d "
           "threads\n", med * 1e3, step[0] * 1e3, reps, prefix,
           threads ? threads : (int)sysconf(_SC_NPROCESSORS_ONLN));
    printf("weights read per forward: %.3f GB (%s) -> %.2f GB/s = %.0f%% of the copy's read rate "
           "(%.0f%% at the best step)\n", read / 1e9, dtype_name,
           read / med / 1e9, 100 * read / med / (copy / 2), 100 * read / step[0] / (copy / 2));
    printf("peak memory: %.2f GB resident (weights %.2f GB, model-owned %.2f GB)\n",
           (double)ru.ru_maxrss * 1024 / 1e9, sq_weights_bytes(mc) / 1e9,
           owned / 1e9);
    free(tok), free(pos), free(mask), free(logits), free(step);
    return 0;
}
