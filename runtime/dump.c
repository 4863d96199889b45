/* The corpus dump of sequoia-run: see dump.h. */
#include "runtime/dump.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "libsequoia/base/progress.h"
#include "libsequoia/base/sha256.h"
#include "libsequoia/format/corpus.h"
#include "runtime/model.h"
#include "runtime/prefill.h"
#include "runtime/safetensors.h"
#include "runtime/specdec.h"
#include "runtime/tokens.h"

sq_dump_opts sq_dump_default_opts(void)
{
    return (sq_dump_opts){.prog = "sequoia-run", .compression = 1};
}

#define DUMP_CHUNK 128
/* --resume: SIGINT/SIGTERM only set this flag; the dump checkpoints OUT.partial after the chunk
 * in progress and then dies of the signal. */
static volatile sig_atomic_t dump_stop_signal;

static void dump_on_signal(int sig)
{
    dump_stop_signal = sig;
}

/* The identity of a model's weights (issue 27 W2), hashed into h: per checkpoint file its
 * size, its modification time and SHA-256 of its first and last MiB. A checkpoint replaced or
 * rewritten in place changes it. The whole file is not hashed: at about 500 MB/s (SHA-NI, an
 * AMD EPYC) a 14 GB checkpoint would cost half a minute at every resume. */
static int weights_identity(const char *dir, sq_sha256 *h, sq_error *err)
{
    sq_st_set *set;
    int rc = sq_st_set_open(dir, &set, err);
    if (rc)
        return rc;
    const uint64_t MIB = 1u << 20;
    for (int i = 0; i < set->n_files; i++) {
        const sq_st_file *f = set->files[i];
        struct stat st;
        if (stat(f->path, &st) != 0) {
            rc = sq_error_set(err, SQ_EIO, "%s: cannot stat: %s", f->path, strerror(errno));
            break;
        }
        long long id[3] = {(long long)f->file_size, (long long)st.st_mtim.tv_sec,
                           (long long)st.st_mtim.tv_nsec};
        sq_sha256_update(h, id, sizeof id);
        uint64_t head = f->file_size < MIB ? f->file_size : MIB;
        sq_sha256_update(h, f->map, (size_t)head);
        sq_sha256_update(h, (const unsigned char *)f->map + (f->file_size - head), (size_t)head);
    }
    sq_st_set_free(set);
    return rc;
}

/* What a partial dump must have been started with to be resumed: the token ids, the models'
 * directories, weights (weights_identity) and shapes, and every option that changes the
 * rows. */
static int dump_fingerprint(const sq_dump_opts *o, const sq_tokens *toks, int V, int ctxlen,
                            char *out, size_t cap, sq_error *err)
{
    sq_sha256 h;
    uint8_t dg[SQ_SHA256_BYTES];
    char hex[SQ_SHA256_HEX], whex[SQ_SHA256_HEX];
    sq_sha256_init(&h);
    sq_sha256_update(&h, toks->ids, (size_t)toks->n * sizeof *toks->ids);
    sq_sha256_update(&h, toks->offsets, (size_t)(toks->sequences + 1) * sizeof *toks->offsets);
    sq_sha256_final(&h, dg);
    sq_sha256_hex(dg, hex);
    sq_sha256_init(&h);
    int rc = weights_identity(o->draft_dir, &h, err);
    if (!rc)
        rc = weights_identity(o->target_dir, &h, err);
    if (rc)
        return rc;
    sq_sha256_final(&h, dg);
    sq_sha256_hex(dg, whex);
    int n = snprintf(out, cap, "tokens sha256 %s; draft %.1000s; target %.1000s; weights %s; "
                     "V %d; top-k %d; half %d; context %d", hex, o->draft_dir, o->target_dir,
                     whex, V, o->topk, o->half, ctxlen);
    /* the default level adds nothing, so that partial files of earlier versions still resume */
    if (o->compression != 1 && n > 0 && (size_t)n < cap)
        snprintf(out + n, cap - (size_t)n, "; compression %d", o->compression);
    return SQ_OK;
}

/* --resume: one process at a time writes OUT.partial (issue 27 D4). The lock is flock(2) on
 * OUT.partial.lock, which holds the owner's pid; the kernel drops it when the owner dies, so a
 * lock file left by a killed process never blocks. Errors: SQ_ECANTCREAT. */
static int partial_lock(const char *partial, char **lockp, int *fdp, sq_error *err)
{
    size_t n = strlen(partial) + sizeof ".lock";
    char *lp = malloc(n);
    if (!lp)
        return sq_error_oom(err, "lock path");
    snprintf(lp, n, "%s.lock", partial);
    int fd = open(lp, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (fd < 0) {
        int rc = sq_error_set(err, SQ_ECANTCREAT, "%s: cannot create the lock file: %s", lp,
                              strerror(errno));
        free(lp);
        return rc;
    }
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        int e = errno;
        char buf[32] = "";
        ssize_t r = pread(fd, buf, sizeof buf - 1, 0);
        buf[r > 0 ? r : 0] = '\0';
        long pid = strtol(buf, NULL, 10);
        close(fd);
        free(lp);
        if (e == EWOULDBLOCK && pid > 0)
            return sq_error_set(err, SQ_ECANTCREAT, "%s: locked by another process (pid %ld) "
                                "that is writing it; wait for it to end, or stop it and resume",
                                partial, pid);
        return sq_error_set(err, SQ_ECANTCREAT, "%s: locked by another process (%s)", partial,
                            strerror(e));
    }
    char buf[32];
    int len = snprintf(buf, sizeof buf, "%ld\n", (long)getpid());
    if (ftruncate(fd, 0) != 0 || pwrite(fd, buf, (size_t)len, 0) != len) {
        /* the pid is for the message only: the lock holds without it */
    }
    *lockp = lp;
    *fdp = fd;
    return SQ_OK;
}

static void partial_unlock(char *lockp, int fd)
{
    if (fd >= 0) {
        unlink(lockp);  /* while still holding the lock */
        close(fd);
    }
    free(lockp);
}

/* Packs rows of `stride` floats to their first V columns, (rows, V) in place. */
static void shared_rows(float *x, int rows, int stride, int V)
{
    if (stride == V)
        return;
    for (int r = 1; r < rows; r++)
        memmove(x + (size_t)r * V, x + (size_t)r * stride, (size_t)V * sizeof *x);
}

int sq_dump(const sq_dump_opts *o, sq_error *err)
{
    char *lockp = NULL;
    int lockfd = -1;
    int rc;
    sq_model *draft = NULL, *target = NULL;
    sq_tokens *toks = NULL;
    sq_context *dctx = NULL, *tctx = NULL;
    sq_corpus_writer *w = NULL;
    float *tl = NULL, *dl = NULL;
    int32_t *next = NULL;
    int64_t rows = 0, done_rows = 0;
    char *partial = NULL;

    /* An output that can never be renamed into place is refused before the work, not after
     * it (a --resume dump would otherwise lose its partial file at the rename). */
    struct stat ost;
    if (stat(o->out_file, &ost) == 0 && S_ISDIR(ost.st_mode))
        return sq_error_set(err, SQ_ECANTCREAT, "%s: is a directory, expected a file path",
                            o->out_file);
    sq_tokenizer *tok = NULL;
    const char *src = o->tokens_file ? o->tokens_file : o->text_file;
    if ((rc = sq_model_load(o->draft_dir, &draft, err)) ||
        (rc = sq_model_load(o->target_dir, &target, err)))
        goto done;
    const sq_model_config *dc = sq_model_get_config(draft), *tc = sq_model_get_config(target);
    int tok_len = 0;
    if (o->text_file) {   /* documents: the target's tokenizer, shared by the draft */
        rc = sq_tokens_tokenizer(o->prog, o->draft_dir, o->target_dir, "--text", &tok, err);
        if (!rc)
            rc = sq_tokens_check_tokenizer(tok, o->target_dir, tc->vocab_size, err);
        if (!rc)
            rc = sq_tokens_from_text(tok, o->text_file, 1, &toks, err);
    } else {
        rc = sq_tokens_load(o->tokens_file, &toks, err);
        /* vocabularies of different sizes: the tokenizer, when there is one, says which rows
         * are padding */
        if (!rc && dc->vocab_size != tc->vocab_size)
            rc = sq_tokens_tokenizer(o->prog, o->draft_dir, o->target_dir, NULL, &tok, err);
    }
    tok_len = tok ? sq_tokenizer_vocab_size(tok) : 0;
    sq_tokenizer_free(tok);
    if (rc)
        goto done;
    /* the corpus holds the shared range: V columns (docs/runtime.md, "Vocabularies that
     * differ by padding"); a forward writes the model's own tV or dV */
    int V, tV = tc->vocab_size, dV = dc->vocab_size;
    if ((rc = sq_models_check_vocab(draft, target, o->draft_dir, o->target_dir, tok_len, &V,
                                    err)))
        goto done;
    if ((rc = sq_tokens_check_vocab(toks, V, src, err)))
        goto done;
    if (o->topk > V) {
        rc = sq_error_set(err, SQ_EUSAGE, "--top-k: %d exceeds the vocabulary (%d tokens)",
                          o->topk, V);
        goto done;
    }
    int maxpos = dc->max_position < tc->max_position ? dc->max_position : tc->max_position;
    int ctxlen = o->context > 0 ? o->context : (maxpos < 2048 ? maxpos : 2048);
    if (ctxlen > maxpos || ctxlen < 2) {
        rc = sq_error_set(err, SQ_EUSAGE,
                          "--context: %d must be in [2, %d] (max_position_embeddings)", ctxlen,
                          maxpos);
        goto done;
    }
    sq_context_params cp = sq_context_default_params();
    cp.max_context = ctxlen;
    cp.max_pending = DUMP_CHUNK;
    cp.threads = o->threads;
    if ((rc = sq_context_new(draft, &cp, &dctx, err)) ||
        (rc = sq_context_new(target, &cp, &tctx, err)))
        goto done;
    tl = malloc((size_t)DUMP_CHUNK * tV * sizeof *tl);
    dl = malloc((size_t)DUMP_CHUNK * dV * sizeof *dl);
    next = malloc(DUMP_CHUNK * sizeof *next);
    if (!tl || !dl || !next) {
        rc = sq_error_oom(err, "dump buffers");
        goto done;
    }
    sq_corpus_writer_params wp = sq_corpus_writer_default_params();
    wp.vocab = V;
    wp.topk = o->topk;
    wp.half = o->half;
    wp.compression = o->compression;
    wp.draft = o->draft_dir;
    wp.target = o->target_dir;
    if (o->resume) {
        size_t n = strlen(o->out_file) + sizeof ".partial";
        char fp[SQ_CORPUS_MAX_FINGERPRINT + 1];
        partial = malloc(n);
        if (!partial) {
            rc = sq_error_oom(err, "partial path");
            goto done;
        }
        snprintf(partial, n, "%s.partial", o->out_file);
        if ((rc = partial_lock(partial, &lockp, &lockfd, err)))
            goto done;
        if ((rc = dump_fingerprint(o, toks, V, ctxlen, fp, sizeof fp, err)))
            goto done;
        if ((rc = sq_corpus_writer_open_resumable(o->out_file, partial, &wp, fp, &done_rows, &w,
                                                  err)))
            goto done;
        if (done_rows > 0)
            fprintf(stderr, "%s: %s: resuming after %lld positions\n", o->prog, partial,
                    (long long)done_rows);
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = dump_on_signal;
        sigemptyset(&sa.sa_mask);
        sigaction(SIGINT, &sa, NULL);
        sigaction(SIGTERM, &sa, NULL);
        sigaction(SIGHUP, &sa, NULL);
    } else if ((rc = sq_corpus_writer_open(o->out_file, &wp, &w, err))) {
        goto done;
    }
    int64_t total_rows = 0;
    for (int64_t s = 0; s < toks->sequences; s++)
        if (toks->offsets[s + 1] - toks->offsets[s] > 1)
            total_rows += toks->offsets[s + 1] - toks->offsets[s] - 1;
    sq_progress pg;
    sq_progress_start(&pg, o->prog, o->out_file, "positions", o->quiet, 0);
    for (int64_t s = 0; s < toks->sequences; s++) {
        int64_t b = toks->offsets[s], e = toks->offsets[s + 1];
        int64_t before = rows;
        /* a resumed dump skips the sequences the partial file holds whole (their boundary is
         * in it, or is exactly where it stopped) */
        int64_t seq_rows = e - b > 1 ? e - b - 1 : 0;
        if (rows + seq_rows <= done_rows) {
            rows += seq_rows;
            if (seq_rows > 0 && rows == done_rows &&
                (rc = sq_corpus_writer_end_sequence(w, err)))
                goto done;
            continue;
        }
        /* windows of ctxlen tokens; a row for every position that has a next token */
        for (int64_t w0 = b; w0 < e - 1; w0 += ctxlen) {
            int64_t w1 = w0 + ctxlen < e ? w0 + ctxlen : e;
            int64_t win_rows = (w1 < e ? w1 : e - 1) - w0;
            if (rows + win_rows <= done_rows) {  /* whole window already in the file */
                rows += win_rows;
                continue;
            }
            sq_context_reset(dctx);
            sq_context_reset(tctx);
            for (int64_t c0 = w0; c0 < w1; c0 += DUMP_CHUNK) {
                int m = (int)(w1 - c0 < DUMP_CHUNK ? w1 - c0 : DUMP_CHUNK);
                const int32_t *ids = toks->ids + c0;
                if ((rc = sq_forward_causal(tctx, ids, m, tl, err)) ||
                    (rc = sq_forward_causal(dctx, ids, m, dl, err)))
                    goto done;
                shared_rows(tl, m, tV, V);
                shared_rows(dl, m, dV, V);
                int r = 0;
                while (r < m && c0 + r + 1 < e) {
                    next[r] = toks->ids[c0 + r + 1];
                    r++;
                }
                /* rows before done_rows are in the partial file: forward only (KV cache) */
                int skip = rows >= done_rows ? 0 : (int)(done_rows - rows < r ? done_rows - rows : r);
                /* the models' logits are finite, as in decoding (docs/robustness.md) */
                for (int i = skip; i < r; i++)
                    if ((rc = sq_logits_check_finite("target", tl + (size_t)i * V, V,
                                                     c0 - b + i, err)) ||
                        (rc = sq_logits_check_finite("draft", dl + (size_t)i * V, V,
                                                     c0 - b + i, err)))
                        goto done;
                if (r > skip &&
                    (rc = sq_corpus_writer_append(w, tl + (size_t)skip * V, dl + (size_t)skip * V,
                                                  next + skip, r - skip, err)))
                    goto done;
                rows += r;
                sq_progress_update(&pg, rows, total_rows);
                if (dump_stop_signal) {
                    int sig = dump_stop_signal;
                    if ((rc = sq_corpus_writer_checkpoint(w, err)))
                        goto done;
                    sq_corpus_writer_abort(w);  /* keeps the partial file */
                    w = NULL;
                    sq_progress_end(&pg);
                    fprintf(stderr, "%s: %s: interrupted after %lld positions; run the same "
                            "command with --resume to go on\n", o->prog, partial, (long long)rows);
                    partial_unlock(lockp, lockfd);
                    lockp = NULL;
                    lockfd = -1;
                    signal(sig, SIG_DFL);
                    raise(sig);
                    rc = SQ_EFAIL;  /* not reached unless the signal is blocked */
                    goto done;
                }
            }
        }
        if (rows > before && (rc = sq_corpus_writer_end_sequence(w, err)))
            goto done;
    }
    sq_progress_end(&pg);
    if (rows == 0) {
        rc = sq_error_set(err, SQ_EDATA, "%s: no sequence has two tokens: nothing to dump",
                          src);
        goto done;
    }
    rc = sq_corpus_writer_commit(w, err);
    w = NULL;
    if (!rc)
        fprintf(stderr, "%s: %s: %lld positions in %lld sequences, vocabulary %d%s\n",
                o->prog, o->out_file, (long long)rows, (long long)toks->sequences, V,
                o->topk ? " (top-k logits)" : "");
done:
    sq_corpus_writer_abort(w);
    partial_unlock(lockp, lockfd);
    free(tl);
    free(dl);
    free(next);
    free(partial);
    sq_context_free(dctx);
    sq_context_free(tctx);
    sq_tokens_free(toks);
    sq_model_free(draft);
    sq_model_free(target);
    return rc;
}

