/* Two error tiers (docs/design.md §10).
 *
 *  - SQ_ASSERT: a broken internal invariant (a programming error). Prints file:line and aborts.
 *               Never used for input, nor for running out of memory (docs/design.md §10).
 *  - sq_error:  a recoverable failure (bad file, bad option, I/O). Library functions return a
 *               status from the table below and fill an sq_error with a message that names the
 *               file, the field and the problem, e.g.
 *                   acc.json: curves[0].p[3]: value 1.7 is not a probability
 *               Only a tool's main() prints it (prefixed by the tool's name) and exits.
 *
 * The status values are the process exit codes, borrowed from sysexits.h. */
#ifndef SQ_BASE_ERROR_H
#define SQ_BASE_ERROR_H

#include <stdio.h>
#include <stdlib.h>

#include "libsequoia/base/api.h"

SQ_BEGIN_DECLS

enum sq_status {
    SQ_OK        = 0,
    SQ_EFAIL     = 1,   /* a check the user asked for failed (e.g. a regression in --compare)  */
    SQ_EUSAGE    = 64,  /* bad command line, or a request past a documented limit               */
    SQ_EDATA     = 65,  /* an input file is malformed or its values are invalid                 */
    SQ_ENOINPUT  = 66,  /* an input file does not exist or cannot be opened                     */
    SQ_EUNAVAILABLE = 69, /* a library the request needs cannot be loaded (the CUDA module)       */
    SQ_ESOFTWARE = 70,  /* internal error (out of memory)                                       */
    SQ_ECANTCREAT= 73,  /* an output file cannot be created                                     */
    SQ_EIO       = 74,  /* read or write error                                                  */
};

#define SQ_ERROR_MSG_MAX 1024

/* Why a failure happened, for a caller that reacts to one cause (a hint, a retry): set by the
 * functions whose documentation names it, so that no caller reads the message's wording. */
enum sq_cause {
    SQ_CAUSE_NONE = 0,
    SQ_CAUSE_OUT_OF_RANGE,   /* outside a profile's measured range, and no extrapolation mode
                                (libsequoia/format/profile.h, sq_profile_ms)                  */
};

typedef struct sq_error {
    int  status;                  /* enum sq_status; SQ_OK when nothing happened        */
    int  cause;                   /* enum sq_cause of the recorded failure              */
    char msg[SQ_ERROR_MSG_MAX];   /* "file: field: problem", without the tool's name    */
} sq_error;

/* Records the first failure in err (later ones are ignored) and returns status, so that
 * callers can write `return sq_error_set(err, SQ_EDATA, "%s: p: empty", path);`.
 * err may be NULL. */
SQ_API
int sq_error_set(sq_error *err, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* The same, for an allocation failure. */
SQ_API
int sq_error_oom(sq_error *err, const char *what);

/* Human-readable name of a status, for --help and the README's exit-code table. */
SQ_API
const char *sq_status_name(int status);

#define SQ_ASSERT(cond)                                                                  \
    do {                                                                                 \
        if (!(cond)) {                                                                   \
            fprintf(stderr, "%s:%d: internal error: assertion '%s' failed\n", __FILE__,   \
                    __LINE__, #cond);                                                    \
            abort();                                                                     \
        }                                                                                \
    } while (0)

SQ_END_DECLS

#endif
