#include "profiler/latency_svg.h"

#include <math.h>

#include "libsequoia/base/io.h"
#include "libsequoia/base/svg.h"

#define W 720.0
#define H 420.0
#define ML 70.0  /* margins */
#define MR 20.0
#define MT 40.0
#define MB 50.0

static int is_unstable(const sq_profile_point *q, double unstable)
{
    return !isnan(q->p10_ms) && !isnan(q->p90_ms) && (q->p90_ms - q->p10_ms) / q->median_ms > unstable;
}

/* Drawn with the shared SVG primitives (libsequoia/base/svg.h): the document, the log2 x and
 * log10 y axes with their grid and ticks, the median lines, the markers and the whiskers. */
void sq_latency_svg_write(FILE *fp, const sq_profile *p, const char *title, double unstable)
{
    /* x: log2 of the token count. y: log10 of the time, from just below the fastest p10 to just
     * above the slowest p90, so that times a factor apart are as far apart at 1 ms as at 200 ms
     * (on a linear axis from 0 every small forward sits flat on the axis). */
    double tmin = INFINITY, tmax = -INFINITY;
    for (int i = 0; i < p->n; i++) {
        if (p->points[i].tokens < tmin)
            tmin = p->points[i].tokens;
        if (p->points[i].tokens > tmax)
            tmax = p->points[i].tokens;
    }
    double x0 = log2(tmin), x1 = log2(tmax);
    if (x1 - x0 < 1)
        x1 = x0 + 1;
    double lo = INFINITY, hi = 0;
    int any_bars = 0, any_unstable = 0;
    for (int i = 0; i < p->n; i++) {
        const sq_profile_point *q = &p->points[i];
        double a = isnan(q->p10_ms) ? q->median_ms : q->p10_ms;
        double b = isnan(q->p90_ms) ? q->median_ms : q->p90_ms;
        if (a > 0 && a < lo)
            lo = a;
        if (b > hi)
            hi = b;
        any_bars |= !isnan(q->p10_ms) && !isnan(q->p90_ms);
        any_unstable |= is_unstable(q, unstable);
    }
    if (!(lo > 0) || !(hi > 0)) {
        lo = 1e-3;
        hi = 1;
    }
    /* 10% of room each side (in log terms), and at least a factor of 2 in all */
    double y0 = log10(lo) - 0.04, y1 = log10(hi) + 0.04;
    if (y1 - y0 < log10(2.0)) {
        double mid = (y0 + y1) / 2;
        y0 = mid - log10(2.0) / 2;
        y1 = mid + log10(2.0) / 2;
    }
    sq_svg_axes ax = {.x0 = ML, .y0 = MT, .w = W - ML - MR, .h = H - MT - MB, .xmin = x0,
                      .xmax = x1, .ymin = y0, .ymax = y1, .xlog2 = 1, .ylog = 1};
    sq_svg_begin(fp, W, H, title);
    sq_svg_text(fp, ML, 22, 14, NULL, NULL, 0, title);
    sq_svg_axes_draw(fp, &ax, "new tokens per forward (log scale)",
                     "forward time (ms, log scale)");
    /* p10-p90 whiskers (with caps), the median line per batch size, points (red: unstable) */
    for (int i = 0; i < p->n; i++) {
        const sq_profile_point *q = &p->points[i];
        if (isnan(q->p10_ms) || isnan(q->p90_ms) || !(q->p10_ms > 0))
            continue;
        sq_svg_error_bar(fp, sq_svg_x(&ax, q->tokens), sq_svg_y(&ax, q->p10_ms),
                         sq_svg_y(&ax, q->p90_ms), 4, "#89b", "whisker");
    }
    /* the median line: one per batch size (points are ordered by batch, then tokens), with a
     * legend below the legend of the marks when there is more than one */
    static const char *const colours[] = {"#1f5fa8", "#d35400", "#27ae60", "#8e44ad",
                                          "#c0392b", "#16a085", "#7f8c8d", "#2c3e50"};
    int nb = 0;
    for (int i = 0; i < p->n; i++) {
        if (i > 0 && p->points[i].batch == p->points[i - 1].batch)
            continue;
        const char *col = colours[nb % 8];
        sq_svg_polyline_begin(fp, col, 2, NULL);
        for (int j = i; j < p->n && p->points[j].batch == p->points[i].batch; j++)
            sq_svg_polyline_point(fp, j == i, sq_svg_x(&ax, p->points[j].tokens),
                                  sq_svg_y(&ax, p->points[j].median_ms));
        sq_svg_polyline_end(fp);
        if (p->points[i].batch != 1 || p->points[p->n - 1].batch != 1) {
            char label[32];
            snprintf(label, sizeof label, "batch %d", p->points[i].batch);
            double ly = MT + 70 + 16.0 * nb;
            sq_svg_line(fp, ML + 10, ly, ML + 30, ly, col, 2, NULL);
            sq_svg_text(fp, ML + 36, ly + 4, 12, NULL, NULL, 0, label);
        }
        nb++;
    }
    for (int i = 0; i < p->n; i++) {
        const sq_profile_point *q = &p->points[i];
        int bad = is_unstable(q, unstable);
        char tip[128];
        snprintf(tip, sizeof tip, "batch %d, %d tokens: %.4g ms median%s", q->batch, q->tokens,
                 q->median_ms, bad ? " (unstable)" : "");
        sq_svg_marker(fp, sq_svg_x(&ax, q->tokens), sq_svg_y(&ax, q->median_ms), 3.5,
                      bad ? "#c0392b" : "#1f5fa8", NULL, bad ? "unstable" : "point", tip);
    }
    /* legend, top left inside the plot (the curve rises to the right); its marks are of class
     * "key", so that the data points are the circles of class "point" and "unstable" */
    double lx = ML + 14, ly = MT + 14;
    fputs("<g id=\"legend\">\n", fp);
    sq_svg_marker(fp, lx, ly, 3.5, "#1f5fa8", NULL, "key", NULL);
    sq_svg_text(fp, lx + 12, ly + 4, 12, NULL, NULL, 0, "median of the timed forwards");
    if (any_bars) {
        ly += 18;
        sq_svg_error_bar(fp, lx, ly - 6, ly + 6, 4, "#89b", "key");
        sq_svg_text(fp, lx + 12, ly + 4, 12, NULL, NULL, 0,
                    "p10\u2013p90 of the timed forwards");
    }
    if (any_unstable) {
        ly += 18;
        char label[96];
        snprintf(label, sizeof label, "unstable: p10\u2013p90 spread over %.0f%% of the median",
                 100 * unstable);
        sq_svg_marker(fp, lx, ly, 3.5, "#c0392b", NULL, "key", NULL);
        sq_svg_text(fp, lx + 12, ly + 4, 12, NULL, NULL, 0, label);
    }
    fputs("</g>\n", fp);
    sq_svg_end(fp);
}

int sq_latency_svg(const sq_profile *p, const char *title, double unstable, const char *path,
                   sq_error *err)
{
    sq_out *o;
    int rc = sq_out_open(&o, path, err);
    if (rc)
        return rc;
    sq_latency_svg_write(sq_out_stream(o), p, title, unstable);
    return sq_out_commit(o, err);
}
