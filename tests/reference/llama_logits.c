/* llama_logits: the logits of a token sequence from llama.cpp's C API (llama.h), the outside
 * reference of tests/reference/README.md. Built by tests/reference/gen_reference.py against a
 * llama.cpp build (never by meson; llama.cpp is not a dependency of the project):
 *
 *     cc -std=c11 -O2 llama_logits.c -I SRC/include -I SRC/ggml/include \
 *        -L BUILD/bin -lllama -lggml -lggml-base -Wl,-rpath,BUILD/bin -o llama_logits
 *
 *     llama_logits MODEL.gguf TOKENS [OUT.f32] [--yarn-beta-fast=V] [--yarn-beta-slow=V]
 *
 * TOKENS holds whitespace-separated token ids. The whole sequence is evaluated twice, on two
 * fresh contexts: once as one batch (positions 0..n-1, logits of every row) and once one token
 * per llama_decode call (the KV cache path, sliding-window caches included). The batch rows are
 * written to OUT.f32 as n x vocab little-endian float32 (or printed as text, one row per line,
 * without OUT); the largest difference between the two runs goes to stderr. The K/V caches are
 * F32 and flash attention is off, so an F32 model is computed in float32 throughout. The
 * --yarn-beta-* options set llama_context_params' overrides (llama.cpp's LLAMA architecture does
 * not read the GGUF's yarn betas; README.md, "Tolerances").
 * Exit status: 0 ok, 64 usage, 65 bad tokens, 66 no model, 70 llama.cpp failure. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llama.h"

static void quiet_log(enum ggml_log_level level, const char *text, void *user)
{
    (void)user;
    if (level == GGML_LOG_LEVEL_ERROR || level == GGML_LOG_LEVEL_WARN)
        fputs(text, stderr);
}

static int read_tokens(const char *path, llama_token **out, int *n)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "llama_logits: %s: cannot open\n", path);
        return 66;
    }
    int cap = 64, len = 0;
    llama_token *t = malloc(sizeof *t * (size_t)cap);
    long v;
    while (t && fscanf(f, "%ld", &v) == 1) {
        if (len == cap) {
            cap *= 2;
            llama_token *nt = realloc(t, sizeof *t * (size_t)cap);
            if (!nt) {
                free(t);
                t = NULL;
                break;
            }
            t = nt;
        }
        t[len++] = (llama_token)v;
    }
    int bad = !feof(f);
    fclose(f);
    if (!t || bad || len == 0) {
        fprintf(stderr, "llama_logits: %s: expected whitespace-separated token ids\n", path);
        free(t);
        return 65;
    }
    *out = t;
    *n = len;
    return 0;
}

static float beta_fast = -1.0f, beta_slow = -1.0f;   /* < 0: llama.cpp's own */

static struct llama_context *new_ctx(struct llama_model *model, int n)
{
    struct llama_context_params cp = llama_context_default_params();
    if (beta_fast >= 0.0f)
        cp.yarn_beta_fast = beta_fast;
    if (beta_slow >= 0.0f)
        cp.yarn_beta_slow = beta_slow;
    cp.n_ctx = (uint32_t)(n < 64 ? 64 : n);
    cp.n_batch = cp.n_ctx;
    cp.n_ubatch = cp.n_ctx;
    cp.n_seq_max = 1;
    cp.n_threads = 1;
    cp.n_threads_batch = 1;
    cp.type_k = GGML_TYPE_F32;
    cp.type_v = GGML_TYPE_F32;
    cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
    cp.swa_full = true;
    cp.no_perf = true;
    return llama_init_from_model(model, cp);
}

/* Decodes tokens [0, n) in calls of `step` tokens; copies every row's logits to out. */
static int run(struct llama_model *model, const llama_token *tok, int n, int step, int nv,
               float *out)
{
    struct llama_context *ctx = new_ctx(model, n);
    if (!ctx) {
        fprintf(stderr, "llama_logits: llama_init_from_model failed\n");
        return 70;
    }
    struct llama_batch b = llama_batch_init(step, 0, 1);
    int rc = 0;
    for (int s = 0; s < n && rc == 0; s += step) {
        int m = n - s < step ? n - s : step;
        b.n_tokens = m;
        for (int i = 0; i < m; i++) {
            b.token[i] = tok[s + i];
            b.pos[i] = s + i;
            b.n_seq_id[i] = 1;
            b.seq_id[i][0] = 0;
            b.logits[i] = 1;
        }
        int r = llama_decode(ctx, b);
        if (r != 0) {
            fprintf(stderr, "llama_logits: llama_decode returned %d at position %d\n", r, s);
            rc = 70;
            break;
        }
        for (int i = 0; i < m; i++) {
            const float *l = llama_get_logits_ith(ctx, i);
            if (!l) {
                fprintf(stderr, "llama_logits: no logits for row %d\n", s + i);
                rc = 70;
                break;
            }
            memcpy(out + (size_t)(s + i) * (size_t)nv, l, sizeof(float) * (size_t)nv);
        }
    }
    llama_batch_free(b);
    llama_free(ctx);
    return rc;
}

int main(int argc, char **argv)
{
    while (argc > 3 && strncmp(argv[argc - 1], "--yarn-beta-", 12) == 0) {
        const char *o = argv[argc - 1];
        char *end = NULL;
        const char *eq = strchr(o, '=');
        float v = eq ? strtof(eq + 1, &end) : -1.0f;
        if (!eq || end == eq + 1 || *end || v < 0.0f) {
            fprintf(stderr, "llama_logits: %s: expected --yarn-beta-fast=V or --yarn-beta-slow=V\n", o);
            return 64;
        }
        if (strncmp(o, "--yarn-beta-fast=", 17) == 0)
            beta_fast = v;
        else if (strncmp(o, "--yarn-beta-slow=", 17) == 0)
            beta_slow = v;
        else {
            fprintf(stderr, "llama_logits: %s: unknown option\n", o);
            return 64;
        }
        argc--;
    }
    if (argc < 3 || argc > 4) {
        fprintf(stderr, "usage: llama_logits MODEL.gguf TOKENS [OUT.f32] [--yarn-beta-fast=V] "
                "[--yarn-beta-slow=V]\n");
        return 64;
    }
    llama_token *tok = NULL;
    int n = 0;
    int rc = read_tokens(argv[2], &tok, &n);
    if (rc)
        return rc;

    llama_log_set(quiet_log, NULL);
    llama_backend_init();
    struct llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = 0;
    struct llama_model *model = llama_model_load_from_file(argv[1], mp);
    if (!model) {
        fprintf(stderr, "llama_logits: %s: cannot load\n", argv[1]);
        free(tok);
        return 66;
    }
    int nv = llama_vocab_n_tokens(llama_model_get_vocab(model));
    for (int i = 0; i < n; i++)
        if (tok[i] < 0 || tok[i] >= nv) {
            fprintf(stderr, "llama_logits: %s: token %d at %d is outside the vocabulary (%d)\n",
                    argv[2], (int)tok[i], i, nv);
            llama_model_free(model);
            free(tok);
            return 65;
        }
    float *batch = malloc(sizeof(float) * (size_t)n * (size_t)nv);
    float *single = malloc(sizeof(float) * (size_t)n * (size_t)nv);
    if (!batch || !single) {
        fprintf(stderr, "llama_logits: out of memory\n");
        rc = 70;
    }
    if (!rc)
        rc = run(model, tok, n, n, nv, batch);
    if (!rc)
        rc = run(model, tok, n, 1, nv, single);
    if (!rc) {
        double md = 0, mx = 0;
        for (size_t i = 0; i < (size_t)n * (size_t)nv; i++) {
            double d = fabs((double)batch[i] - (double)single[i]);
            md = d > md ? d : md;
            mx = fabs(batch[i]) > mx ? fabs(batch[i]) : mx;
        }
        fprintf(stderr, "llama_logits: %d tokens, vocab %d, max |logit| %.4f, batch vs one by "
                "one: max |diff| %.3g\n", n, nv, mx, md);
        if (argc == 4) {
            FILE *f = fopen(argv[3], "wb");
            if (!f || fwrite(batch, sizeof(float), (size_t)n * (size_t)nv, f) !=
                          (size_t)n * (size_t)nv) {
                fprintf(stderr, "llama_logits: %s: cannot write\n", argv[3]);
                rc = 73;
            }
            if (f && fclose(f) != 0 && !rc) {
                fprintf(stderr, "llama_logits: %s: cannot write\n", argv[3]);
                rc = 74;
            }
        } else {
            for (int r = 0; r < n; r++)
                for (int j = 0; j < nv; j++)
                    printf("%.9g%c", batch[(size_t)r * (size_t)nv + (size_t)j],
                           j + 1 == nv ? '\n' : ' ');
        }
    }
    free(batch);
    free(single);
    llama_model_free(model);
    llama_backend_free();
    free(tok);
    return rc;
}
