#include "profiler/stability.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "libsequoia/base/stats.h"

void sq_profile_stability(const sq_profile *p, double unstable, double severe, double load1,
                          int cores, int threads, sq_stability *out)
{
    memset(out, 0, sizeof *out);
    double *sp = malloc((size_t)(p->n > 0 ? p->n : 1) * sizeof *sp);
    int m = 0;
    for (int i = 0; i < p->n; i++) {
        const sq_profile_point *q = &p->points[i];
        if (isnan(q->p10_ms) || isnan(q->p90_ms) || !(q->median_ms > 0))
            continue;
        double s = (q->p90_ms - q->p10_ms) / q->median_ms;
        out->n_unstable += s > unstable;
        if (sp)
            sp[m++] = s;
    }
    out->median_spread = m > 0 ? sq_quantile(sp, m, 0.5) : 0.0;
    free(sp);
    /* a profile noisy throughout (median spread over `unstable`) has no noise to hide a fall
     * behind: there a fall beyond the tolerance is one */
    int few = 0;   /* a point of fewer samples than SQ_STABILITY_MIN_SAMPLES */
    for (int i = 0; i < p->n; i++)
        few |= p->points[i].samples < SQ_STABILITY_MIN_SAMPLES;
    out->noisy = out->median_spread > unstable && !few;
    int flags = out->noisy ? SQ_FALLS_IGNORE_SPREAD : 0;
    out->n_falls = sq_profile_falls(p, SQ_PROFILE_FALL_TOL, flags, out->falls,
                                    SQ_STABILITY_MAX_FALLS);
    if (p->step && p->step->n[SQ_STEP_TARGET] > 1) {
        sq_profile view = {.n = p->step->n[SQ_STEP_TARGET], .points = p->step->pts[SQ_STEP_TARGET]};
        out->n_step_falls = sq_profile_falls(&view, SQ_PROFILE_FALL_TOL, flags, out->step_falls,
                                             SQ_STABILITY_MAX_FALLS);
    }
    out->load1 = load1;
    out->cores = cores;
    out->threads = threads;
    out->busy = !isnan(load1) && cores > 0 && load1 > cores - (threads > 0 ? threads : cores) + 0.5;
    out->disagree = out->median_spread > severe;
    out->few = few;
    /* a point of fewer samples cannot be judged: the problems are said, not refused */
    out->refuse = (out->n_falls + out->n_step_falls > 0 || out->disagree) && !few;
}

void sq_stability_text(const sq_stability *s, char *buf, size_t cap)
{
    size_t len = 0;
    if (cap)
        buf[0] = '\0';
#define ADD(...)                                                                                 \
    do {                                                                                         \
        if (len < cap)                                                                           \
            len += (size_t)snprintf(buf + len, cap - len, __VA_ARGS__);                          \
    } while (0)
    char text[1024];
    if (s->n_falls) {
        int n = s->n_falls < SQ_STABILITY_MAX_FALLS ? s->n_falls : SQ_STABILITY_MAX_FALLS;
        sq_profile_falls_text(s->falls, n, text, sizeof text);
        ADD("the time falls as the token count grows at %d point%s: %s%s", s->n_falls,
            s->n_falls == 1 ? "" : "s", text, s->noisy ? " (on points whose p10-p90 spread is "
            "wide throughout)" : "");
    }
    if (s->n_step_falls) {
        int n = s->n_step_falls < SQ_STABILITY_MAX_FALLS ? s->n_step_falls
                                                         : SQ_STABILITY_MAX_FALLS;
        sq_profile_falls_text(s->step_falls, n, text, sizeof text);
        ADD("%sthe step section's target forward falls at %d point%s: %s", len ? "; " : "",
            s->n_step_falls, s->n_step_falls == 1 ? "" : "s", text);
    }
    if (s->disagree)
        ADD("%sthe rounds disagree: the median p10-p90 spread is %.0f%% of the median", len ? "; "
            : "", 100 * s->median_spread);
    if (len && s->few)
        ADD(" (not refused: fewer than %d samples a point cannot be judged; --repeat %d or more)",
            SQ_STABILITY_MIN_SAMPLES, SQ_STABILITY_MIN_SAMPLES);
    if (s->busy)
        ADD("%sthe machine was busy at start: load average %.2f on %d cores for %d thread%s",
            len ? "; " : "", s->load1, s->cores, s->threads, s->threads == 1 ? "" : "s");
#undef ADD
}

double sq_load_average(void)
{
    FILE *fp = fopen("/proc/loadavg", "r");
    if (!fp)
        return NAN;
    double x = NAN;
    if (fscanf(fp, "%lf", &x) != 1)
        x = NAN;
    fclose(fp);
    return x;
}
