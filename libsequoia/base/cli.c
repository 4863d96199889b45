/* Shared command-line helpers (see cli.h). */
#include "libsequoia/base/cli.h"

#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

int sq_cli_int(const char *prog, const char *opt, const char *s, int lo, int hi, int *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (end == s || *end) {
        fprintf(stderr, "%s: %s: '%s' is not an integer\n", prog, opt, s);
        return SQ_EUSAGE;
    }
    /* an integer past long long or int is out of range, not "not an integer" */
    if (errno == ERANGE || v < INT_MIN || v > INT_MAX) {
        if (s[strspn(s, " \t")] == '-')
            fprintf(stderr, "%s: %s: '%s' is out of range (at least %d)\n", prog, opt, s, lo);
        else
            fprintf(stderr, "%s: %s: '%s' is out of range (at most %d)\n", prog, opt, s, hi);
        return SQ_EUSAGE;
    }
    if (v < lo || v > hi) {
        if (hi == INT_MAX)
            fprintf(stderr, "%s: %s: %lld, must be at least %d\n", prog, opt, v, lo);
        else if (lo == INT_MIN)
            fprintf(stderr, "%s: %s: %lld, must be at most %d\n", prog, opt, v, hi);
        else
            fprintf(stderr, "%s: %s: %lld, must be between %d and %d\n", prog, opt, v, lo, hi);
        return SQ_EUSAGE;
    }
    *out = (int)v;
    return SQ_OK;
}

int sq_cli_u64(const char *prog, const char *opt, const char *s, uint64_t max, uint64_t *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (end == s || *end || s[strspn(s, " \t")] == '-') {
        fprintf(stderr, "%s: %s: '%s' is not a non-negative integer\n", prog, opt, s);
        return SQ_EUSAGE;
    }
    if (errno == ERANGE) {   /* past 2^64 - 1: an integer, out of range */
        fprintf(stderr, "%s: %s: '%s' is out of range (at most %llu)\n", prog, opt, s,
                (unsigned long long)max);
        return SQ_EUSAGE;
    }
    if (v > max) {
        fprintf(stderr, "%s: %s: %llu, must be at most %llu\n", prog, opt, v,
                (unsigned long long)max);
        return SQ_EUSAGE;
    }
    *out = (uint64_t)v;
    return SQ_OK;
}

static int online_cores(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (n > SQ_MAX_THREADS ? SQ_MAX_THREADS : (int)n) : 1;
}

int sq_cli_threads(const char *prog, const char *opt, const char *s, int *out)
{
    int v;
    if (sq_cli_int(prog, opt, s, 0, INT_MAX, &v))
        return SQ_EUSAGE;
    int cores = online_cores();
    int hi = 4 * cores < SQ_MAX_THREADS ? 4 * cores : SQ_MAX_THREADS;
    if (v > hi) {
        fprintf(stderr, "%s: %s: %d, must be between 0 and %d (0: all cores; at most 4 x the "
                "%d online cores, and at most %d)\n", prog, opt, v, hi, cores, SQ_MAX_THREADS);
        return SQ_EUSAGE;
    }
    *out = v;
    return SQ_OK;
}

int sq_cli_threads_used(int threads)
{
    if (threads <= 0)
        return online_cores();
    return threads > SQ_MAX_THREADS ? SQ_MAX_THREADS : threads;
}

int sq_cli_double(const char *prog, const char *opt, const char *s, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    /* an underflow (ERANGE with a result of magnitude below DBL_MIN) is still the number
     * typed, to the nearest double: only an overflow or a non-number is refused */
    if (end == s || *end || !isfinite(v) || (errno && fabs(v) >= DBL_MIN)) {
        fprintf(stderr, "%s: %s: '%s' is not a finite number\n", prog, opt, s);
        return SQ_EUSAGE;
    }
    *out = v;
    return SQ_OK;
}

int sq_cli_bad_option(const char *prog, int c, char **argv, int optind_now)
{
    if (c == ':')
        fprintf(stderr, "%s: option '%s' needs a value (see --help)\n", prog, argv[optind_now - 1]);
    else
        fprintf(stderr, "%s: unknown option '%s' (see --help)\n", prog, argv[optind_now - 1]);
    return SQ_EUSAGE;
}

void sq_cli_hint(sq_error *err, const char *fmt, ...)
{
    if (!err || err->status == SQ_OK)
        return;
    size_t used = strlen(err->msg);
    if (used + 3 >= sizeof err->msg)
        return;
    memcpy(err->msg + used, "; ", 3);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->msg + used + 2, sizeof err->msg - used - 2, fmt, ap);
    va_end(ap);
}

double sq_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

int sq_cli_commit(sq_out **outs, int n, sq_error *err)
{
    int rc = SQ_OK;
    sq_path_use *uses = calloc(n > 0 ? (size_t)n : 1, sizeof *uses);
    if (!uses)
        rc = sq_error_oom(err, "the list of outputs");
    for (int i = 0; !rc && i < n; i++)
        uses[i] = (sq_path_use){"output", outs[i] ? sq_out_path(outs[i]) : NULL};
    if (!rc)
        rc = sq_paths_check(NULL, 0, uses, n, err);
    free(uses);
    for (int i = 0; i < n && !rc; i++)
        if (outs[i])
            rc = sq_out_prepare(outs[i], err);
    for (int i = 0; i < n; i++) {
        if (!outs[i])
            continue;
        if (rc)
            sq_out_abort(outs[i]);
        else
            rc = sq_out_commit(outs[i], err);
        outs[i] = NULL;
    }
    return rc;
}

int sq_cli_finish(const char *prog, int rc)
{
    if (fclose(stdout) != 0 && rc == SQ_OK) {
        fprintf(stderr, "%s: standard output: %s\n", prog, strerror(errno));
        return SQ_EIO;
    }
    return rc;
}
