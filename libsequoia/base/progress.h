/* One progress line on a terminal, the same for every tool (docs/robustness.md):
 *
 *     \rPROG: LABEL: DONE/TOTAL UNIT (PCT%), RATE UNIT/s
 *
 * redrawn in place at most ten times a second, and ended with a newline. Nothing is printed
 * when standard error is not a terminal or the tool runs with --quiet, so logs and pipes never
 * see carriage returns. A step that may be quick (a plan solve) asks for a delay: its line
 * appears only once the step has run that long. SQ_PROGRESS_DELAY_MS in the environment
 * replaces every delay (the tests set 0). */
#ifndef SQ_BASE_PROGRESS_H
#define SQ_BASE_PROGRESS_H

#include <stdint.h>

typedef struct sq_progress {
    int         enabled;     /* a terminal and not quiet                      */
    int         shown;       /* something was drawn: end with a newline       */
    const char *prog;
    const char *unit;
    char        label[256];
    double      t0, last;    /* ms (sq_now_ms)                                */
    double      delay;       /* ms before the first line                      */
} sq_progress;

/* Starts a line for one step. quiet: the tool's --quiet. delay_ms: see above. */
void sq_progress_start(sq_progress *p, const char *prog, const char *label, const char *unit,
                       int quiet, double delay_ms);

/* done of total units are finished (total > 0). Cheap when nothing is drawn. */
void sq_progress_update(sq_progress *p, int64_t done, int64_t total);

/* Ends the line (a newline when something was drawn). */
void sq_progress_end(sq_progress *p);

/* The plain callback shape the libraries take: user is an sq_progress. */
void sq_progress_callback(void *user, int64_t done, int64_t total);

#endif
