/* sq-corpus-check: a test tool that opens a corpus with the C reader, streams every row and
 * prints what it saw, so that tests written in other languages (tests/interop/) can compare it
 * with what they wrote. Not installed.
 *
 *   sq-corpus-check CORPUS.h5 [BLOCK_ROWS]
 *
 * Output, one item a line:
 *   rows N / vocab V / sparse 0|1 / topk K / tokens 0|1 / sequences S / offsets o0 o1 ... /
 *   draft NAME / target NAME / block B, then per row:
 *   row R TARGET_ARGMAX DRAFT_ARGMAX TARGET_SUM DRAFT_SUM TOKEN
 * where the argmax is the first largest logit and the sums add the finite logits in double.
 * Exit codes: 0, or the library's status (65 bad data, 66 missing file, ...), the message on
 * stderr as "sq-corpus-check: file: dataset: problem". */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "libsequoia/format/corpus.h"

static void row_stats(const float *v, int V, int *arg, double *sum)
{
    int a = 0;
    double s = 0.0;
    for (int j = 0; j < V; j++) {
        if (v[j] > v[a])
            a = j;
        if (isfinite(v[j]))
            s += v[j];
    }
    *arg = a;
    *sum = s;
}

int main(int argc, char **argv)
{
    if (argc < 2 || argc > 3) {
        fprintf(stderr, "usage: sq-corpus-check CORPUS.h5 [BLOCK_ROWS]\n");
        return SQ_EUSAGE;
    }
    sq_error err = {0};
    sq_corpus *c;
    int rc = sq_corpus_open(argv[1], &c, &err);
    if (rc) {
        fprintf(stderr, "sq-corpus-check: %s\n", err.msg);
        return rc;
    }
    const sq_corpus_info *in = sq_corpus_get_info(c);
    int B = argc == 3 ? atoi(argv[2]) : sq_corpus_block_rows(c);
    if (B < 1) {
        fprintf(stderr, "sq-corpus-check: block rows must be >= 1\n");
        sq_corpus_close(c);
        return SQ_EUSAGE;
    }
    printf("rows %lld\nvocab %d\nsparse %d\ntopk %d\ntokens %d\nsequences %lld\noffsets",
           (long long)in->rows, in->vocab, in->sparse, in->topk, in->has_tokens,
           (long long)in->sequences);
    const int64_t *off = sq_corpus_seq_offsets(c);
    for (int64_t s = 0; s <= in->sequences; s++)
        printf(" %lld", (long long)off[s]);
    printf("\ndraft %s\ntarget %s\nblock %d\n", in->draft, in->target, B);
    size_t V = (size_t)in->vocab;
    float *t = malloc((size_t)B * V * sizeof *t), *d = malloc((size_t)B * V * sizeof *d);
    int32_t *tok = malloc((size_t)B * sizeof *tok);
    if (!t || !d || !tok) {
        fprintf(stderr, "sq-corpus-check: out of memory\n");
        return SQ_ESOFTWARE;
    }
    for (int64_t r = 0; r < in->rows && rc == SQ_OK; r += B) {
        int n = (int)(in->rows - r < B ? in->rows - r : B);
        rc = sq_corpus_read(c, r, n, t, d, tok, &err);
        for (int i = 0; i < n && rc == SQ_OK; i++) {
            int ta, da;
            double ts, ds;
            row_stats(t + (size_t)i * V, in->vocab, &ta, &ts);
            row_stats(d + (size_t)i * V, in->vocab, &da, &ds);
            printf("row %lld %d %d %.17g %.17g %d\n", (long long)(r + i), ta, da, ts, ds,
                   (int)tok[i]);
        }
    }
    free(t);
    free(d);
    free(tok);
    sq_corpus_close(c);
    if (rc) {
        fprintf(stderr, "sq-corpus-check: %s\n", err.msg);
        return rc;
    }
    if (fclose(stdout) != 0)
        return SQ_EIO;
    return 0;
}
