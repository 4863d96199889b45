/* sq-dump-logits: our logits of a reference checkpoint, for tests/reference/check_logits.py
 * (test 'families-reference', tests/reference/run_check.sh). Not installed.
 *
 *   sq-dump-logits CKPT_DIR TOKENS OUT
 *
 * CKPT_DIR: a checkpoint that make_checkpoints.py wrote (config.json + model.safetensors);
 * TOKENS: its <variant>.tokens (whitespace-separated decimal ids, all one sequence);
 * OUT: n_tokens x vocab float32 little-endian, row i = the logits after tokens 0..i.
 * The model is loaded and computed on the CPU in its own dtype (sq_context_params' default:
 * F32 checkpoints as f32, BF16 ones as stored), one causal forward over all the tokens
 * (sq_forward_causal, runtime/prefill.h). Exit codes as the project's (sq_error): 0, 64 usage,
 * 65 a malformed token file or checkpoint, 66 a missing file, 70 internal (memory), 73/74 the
 * output; the message on stderr as "sq-dump-logits: file: problem". */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "libsequoia/base/error.h"
#include "runtime/cpu_matmul.h"
#include "runtime/model.h"
#include "runtime/prefill.h"

/* The ids of a text token file, one sequence (blank lines are ignored). */
static int read_tokens(const char *path, int32_t **out, int *n_out, sq_error *err)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return sq_error_set(err, errno == ENOENT ? SQ_ENOINPUT : SQ_EIO, "%s: %s", path,
                            strerror(errno));
    int cap = 64, n = 0, rc = SQ_OK;
    int32_t *ids = malloc((size_t)cap * sizeof *ids);
    char tok[32];
    int c = 0;
    while (rc == SQ_OK && ids) {
        while ((c = fgetc(f)) != EOF && (c == ' ' || c == '\t' || c == '\n' || c == '\r'))
            ;
        if (c == EOF)
            break;
        size_t len = 0;
        int bad = 0;
        for (; c != EOF && c != ' ' && c != '\t' && c != '\n' && c != '\r'; c = fgetc(f)) {
            if (len + 1 < sizeof tok)
                tok[len++] = (char)c;
            else
                bad = 1;
            if (c < '0' || c > '9')
                bad = 1;
        }
        tok[len] = 0;
        if (bad || len == 0 || len > 9) {
            rc = sq_error_set(err, SQ_EDATA, "%s: token %d: '%s%s' is not a token id", path,
                              n, tok, len + 1 >= sizeof tok ? "..." : "");
            break;
        }
        if (n == cap) {
            int32_t *g = realloc(ids, (size_t)(cap *= 2) * sizeof *ids);
            if (!g) {
                free(ids);
                ids = NULL;
                break;
            }
            ids = g;
        }
        ids[n++] = (int32_t)strtol(tok, NULL, 10);
    }
    if (rc == SQ_OK && !ids)
        rc = sq_error_oom(err, "token ids");
    if (rc == SQ_OK && ferror(f))
        rc = sq_error_set(err, SQ_EIO, "%s: read error", path);
    fclose(f);
    if (rc == SQ_OK && n == 0)
        rc = sq_error_set(err, SQ_EDATA, "%s: no token ids", path);
    if (rc) {
        free(ids);
        return rc;
    }
    *out = ids;
    *n_out = n;
    return SQ_OK;
}

static int write_f32_le(const char *path, const float *v, size_t count, sq_error *err)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return sq_error_set(err, SQ_ECANTCREAT, "%s: %s", path, strerror(errno));
    int rc = SQ_OK;
    for (size_t i = 0; i < count && rc == SQ_OK; i++) {
        uint32_t b;
        memcpy(&b, &v[i], 4);
        unsigned char le[4] = {(unsigned char)b, (unsigned char)(b >> 8),
                               (unsigned char)(b >> 16), (unsigned char)(b >> 24)};
        if (fwrite(le, 1, 4, f) != 4)
            rc = sq_error_set(err, SQ_EIO, "%s: write error: %s", path, strerror(errno));
    }
    if (fclose(f) != 0 && rc == SQ_OK)
        rc = sq_error_set(err, SQ_EIO, "%s: write error: %s", path, strerror(errno));
    if (rc)
        remove(path);
    return rc;
}

static int run(const char *dir, const char *tok_path, const char *out_path, sq_error *err)
{
    int32_t *tok = NULL;
    int n = 0;
    int rc = read_tokens(tok_path, &tok, &n, err);
    if (rc)
        return rc;
    sq_model *m = NULL;
    sq_context *ctx = NULL;
    float *logits = NULL;
    rc = sq_model_load(dir, &m, err);
    if (rc)
        goto done;
    const sq_model_config *c = sq_model_get_config(m);
    for (int i = 0; i < n; i++)
        if (tok[i] >= c->vocab_size) {
            rc = sq_error_set(err, SQ_EDATA, "%s: token %d: id %d is not below %s/config.json's "
                              "vocab_size %d", tok_path, i, (int)tok[i], dir, c->vocab_size);
            goto done;
        }
    /* CPU, the model's own dtype; room for the n tokens only (a dynamic RoPE refuses a
     * context past max_position_embeddings) */
    sq_context_params p = sq_context_default_params();
    p.max_pending = n;
    p.max_context = n;
    rc = sq_context_new(m, &p, &ctx, err);
    if (rc)
        goto done;
    logits = malloc((size_t)n * (size_t)c->vocab_size * sizeof *logits);
    if (!logits) {
        rc = sq_error_oom(err, "logits");
        goto done;
    }
    rc = sq_forward_causal(ctx, tok, n, logits, err);
    if (rc == SQ_OK)
        rc = write_f32_le(out_path, logits, (size_t)n * (size_t)c->vocab_size, err);
done:
    free(logits);
    sq_context_free(ctx);
    sq_model_free(m);
    free(tok);
    return rc;
}

int main(int argc, char **argv)
{
    sq_cpu_blas_reexec(argv);   /* as the tools that run models (runtime/cpu_matmul.h) */
    if (argc != 4) {
        fprintf(stderr, "usage: sq-dump-logits CKPT_DIR TOKENS OUT\n");
        return SQ_EUSAGE;
    }
    sq_error err = {0};
    int rc = run(argv[1], argv[2], argv[3], &err);
    if (rc)
        fprintf(stderr, "sq-dump-logits: %s\n", err.msg);
    return rc;
}
