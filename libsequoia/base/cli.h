/* What every tool's command line shares: number parsing with the tool's own message, the clock,
 * the multi-output commit and the final check of standard output.
 *
 * The parsers print "PROG: OPT: problem" on stderr and return SQ_EUSAGE, so that a getopt loop
 * can write `if (sq_cli_int(PROG, "--depth", optarg, 1, INT_MAX, &d)) return SQ_EUSAGE;`. */
#ifndef SQ_BASE_CLI_H
#define SQ_BASE_CLI_H

#include <limits.h>
#include <stdint.h>

#include "libsequoia/base/error.h"
#include "libsequoia/base/io.h"

/* A decimal integer in [lo, hi]. Messages: "'12x' is not an integer"; past int
 * "'99999999999' is out of range (at most HI)" (or "(at least LO)" for a negative one); out of
 * range "5, must be at least 10" (hi == INT_MAX), "5, must be at most 3" (lo == INT_MIN), else
 * "5, must be between 10 and 20". */
int sq_cli_int(const char *prog, const char *opt, const char *s, int lo, int hi, int *out);

/* A non-negative decimal integer <= max: "'-1' is not a non-negative integer",
 * "N, must be at most MAX"; past 2^64 - 1 "'N' is out of range (at most MAX)". */
int sq_cli_u64(const char *prog, const char *opt, const char *s, uint64_t max, uint64_t *out);

/* The most CPU threads a tool takes: the CPU backend's pool is at most this large
 * (runtime/cpu.c), and --threads is at most 4 x the online cores within it. */
#define SQ_MAX_THREADS 256

/* --threads: 0 (all online cores) or a count in [1, min(SQ_MAX_THREADS, 4 x online cores)]:
 * "--threads: 9999, must be between 0 and 8 (at most 4 x the 2 online cores)". A larger count
 * would only oversubscribe the CPU, and a profile records the count it ran with. */
int sq_cli_threads(const char *prog, const char *opt, const char *s, int *out);

/* The threads that --threads T (0: all online cores) runs with. */
int sq_cli_threads_used(int threads);

/* A finite number: "'abc' is not a finite number". */
int sq_cli_double(const char *prog, const char *opt, const char *s, double *out);

/* getopt_long's ':' (missing value) or '?' (unknown option) as a usage error; returns
 * SQ_EUSAGE. `optind` is getopt's after the call that returned c. */
int sq_cli_bad_option(const char *prog, int c, char **argv, int optind_now);

/* Appends "; HINT" to err's message: the tool names its own flag for a problem a library
 * reported in the library's words. Does nothing when err holds no failure. */
void sq_cli_hint(sq_error *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Monotonic clock, milliseconds. */
double sq_now_ms(void);

/* Several atomic outputs committed together: every non-NULL outs[i] is first prepared (written
 * out and synced), and only when all are prepared are they renamed, in order; a failure aborts
 * every output not yet committed, so that a full disk leaves every destination as it was.
 * Two outputs that name the same file (sq_paths_check: "A and B: name the same file; one
 * output would be lost", SQ_EUSAGE) are refused before anything is prepared, so that one never
 * silently replaces the other. Sets every outs[i] to NULL. Returns the first error. */
int sq_cli_commit(sq_out **outs, int n, sq_error *err);

/* The exit path of a tool: closes standard output, and when that fails (a full disk under
 * `> file`, a closed pipe) on an otherwise successful run prints "PROG: standard output: ..."
 * and returns SQ_EIO. Otherwise returns rc. */
int sq_cli_finish(const char *prog, int rc);

#endif
