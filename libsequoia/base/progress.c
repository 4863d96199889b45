#include "libsequoia/base/progress.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "libsequoia/base/cli.h"

void sq_progress_start(sq_progress *p, const char *prog, const char *label, const char *unit,
                       int quiet, double delay_ms)
{
    memset(p, 0, sizeof *p);
    p->enabled = !quiet && isatty(STDERR_FILENO);
    p->prog = prog;
    p->unit = unit;
    snprintf(p->label, sizeof p->label, "%s", label);
    const char *env = getenv("SQ_PROGRESS_DELAY_MS");
    if (env && *env) {
        char *end;
        double d = strtod(env, &end);
        if (*end == '\0' && d >= 0)
            delay_ms = d;
    }
    p->delay = delay_ms;
    p->t0 = sq_now_ms();
    p->last = -1e300;
}

void sq_progress_update(sq_progress *p, int64_t done, int64_t total)
{
    if (!p->enabled || total <= 0)
        return;
    double now = sq_now_ms();
    if (now - p->t0 < p->delay)
        return;
    if (now - p->last < 100 && done < total)
        return;
    p->last = now;
    double dt = (now - p->t0) / 1e3;
    fprintf(stderr, "\r%s: %s: %lld/%lld %s (%.0f%%), %.0f %s/s   ", p->prog, p->label,
            (long long)done, (long long)total, p->unit, 100.0 * (double)done / (double)total,
            dt > 0 ? (double)done / dt : 0.0, p->unit);
    fflush(stderr);
    p->shown = 1;
}

void sq_progress_end(sq_progress *p)
{
    if (p->shown)
        fputc('\n', stderr);
    p->shown = 0;
}

void sq_progress_callback(void *user, int64_t done, int64_t total)
{
    sq_progress_update((sq_progress *)user, done, total);
}
