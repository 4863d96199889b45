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

/* 1, 2 and 5 times the powers of ten inside [lo, hi]; all of 1..9 times them when that gives
 * fewer than three; at most `cap`. */
static int log_ticks(double lo, double hi, double *t, int cap)
{
    static const double fine[] = {1, 2, 3, 4, 5, 6, 7, 8, 9}, coarse[] = {1, 2, 5};
    int n = 0;
    for (int pass = 0; pass < 2 && n < 3; pass++) {
        const double *m = pass ? fine : coarse;
        int nm = pass ? 9 : 3;
        n = 0;
        for (double e = floor(log10(lo)); e <= ceil(log10(hi)) && n < cap; e += 1)
            for (int k = 0; k < nm && n < cap; k++) {
                double v = m[k] * pow(10, e);
                if (v >= lo * (1 - 1e-12) && v <= hi * (1 + 1e-12))
                    t[n++] = v;
            }
    }
    return n;
}

static int is_unstable(const sq_profile_point *q, double unstable)
{
    return !isnan(q->p10_ms) && !isnan(q->p90_ms) && (q->p90_ms - q->p10_ms) / q->median_ms > unstable;
}

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
#define PX(tok) (ML + (log2(tok) - x0) / (x1 - x0) * (W - ML - MR))
#define PY(ms) (H - MB - (log10(ms) - y0) / (y1 - y0) * (H - MT - MB))
    fprintf(fp, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
                "viewBox=\"0 0 %.0f %.0f\" font-family=\"sans-serif\" font-size=\"12\">\n",
            W, H, W, H);
    fprintf(fp, "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n<text x=\"%.0f\" "
                "y=\"22\" font-size=\"14\">", ML);
    sq_svg_escape(fp, title);
    fputs("</text>\n", fp);
    /* axes and grid; the y range is recorded for tools and tests */
    fprintf(fp, "<g id=\"y-axis\" data-scale=\"log10\" data-min-ms=\"%.6g\" data-max-ms=\"%.6g\">\n",
            pow(10, y0), pow(10, y1));
    double ticks[40];
    int nt = log_ticks(pow(10, y0), pow(10, y1), ticks, 40);
    for (int k = 0; k < nt; k++) {
        double y = PY(ticks[k]);
        fprintf(fp, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>"
                    "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%g</text>\n",
                ML, y, W - MR, y, ML - 6, y + 4, ticks[k]);
    }
    fputs("</g>\n", fp);
    for (double e = ceil(x0); e <= x1 + 1e-9; e += 1) {
        double x = ML + (e - x0) / (x1 - x0) * (W - ML - MR);
        fprintf(fp, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#eee\"/>"
                    "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%.0f</text>\n",
                x, MT, x, H - MB, x, H - MB + 16, pow(2, e));
    }
    fprintf(fp, "<line x1=\"%.0f\" y1=\"%.0f\" x2=\"%.0f\" y2=\"%.0f\" stroke=\"black\"/>\n", ML,
            H - MB, W - MR, H - MB);
    fprintf(fp, "<line x1=\"%.0f\" y1=\"%.0f\" x2=\"%.0f\" y2=\"%.0f\" stroke=\"black\"/>\n", ML, MT,
            ML, H - MB);
    fprintf(fp, "<text x=\"%.0f\" y=\"%.0f\" text-anchor=\"middle\">new tokens per forward "
                "(log scale)</text>\n", (ML + W - MR) / 2, H - 12);
    fprintf(fp, "<text transform=\"translate(18 %.0f) rotate(-90)\" text-anchor=\"middle\">"
                "forward time (ms, log scale)</text>\n", (MT + H - MB) / 2);
    /* p10-p90 whiskers (with caps), the median line per batch size, points (red: unstable) */
    for (int i = 0; i < p->n; i++) {
        const sq_profile_point *q = &p->points[i];
        if (isnan(q->p10_ms) || isnan(q->p90_ms) || !(q->p10_ms > 0))
            continue;
        double x = PX(q->tokens), ya = PY(q->p10_ms), yb = PY(q->p90_ms);
        fprintf(fp, "<path class=\"whisker\" d=\"M%.1f %.1fV%.1fM%.1f %.1fh8M%.1f %.1fh8\" "
                    "stroke=\"#89b\" fill=\"none\"/>\n", x, ya, yb, x - 4, ya, x - 4, yb);
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
        fprintf(fp, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\" points=\"", col);
        for (int j = i; j < p->n && p->points[j].batch == p->points[i].batch; j++)
            fprintf(fp, "%s%.1f,%.1f", j > i ? " " : "", PX(p->points[j].tokens),
                    PY(p->points[j].median_ms));
        fputs("\"/>\n", fp);
        if (p->points[i].batch != 1 || p->points[p->n - 1].batch != 1)
            fprintf(fp, "<line x1=\"%.0f\" y1=\"%.0f\" x2=\"%.0f\" y2=\"%.0f\" stroke=\"%s\" "
                        "stroke-width=\"2\"/><text x=\"%.0f\" y=\"%.0f\">batch %d</text>\n",
                    ML + 10, MT + 70 + 16.0 * nb, ML + 30, MT + 70 + 16.0 * nb, col, ML + 36,
                    MT + 74 + 16.0 * nb, p->points[i].batch);
        nb++;
    }
    for (int i = 0; i < p->n; i++) {
        const sq_profile_point *q = &p->points[i];
        int bad = is_unstable(q, unstable);
        fprintf(fp, "<circle class=\"%s\" cx=\"%.1f\" cy=\"%.1f\" r=\"3.5\" fill=\"%s\"><title>batch "
                    "%d, %d tokens: %.4g ms median%s</title></circle>\n", bad ? "unstable" : "point",
                PX(q->tokens), PY(q->median_ms), bad ? "#c0392b" : "#1f5fa8", q->batch, q->tokens,
                q->median_ms, bad ? " (unstable)" : "");
    }
    /* legend, top left inside the plot (the curve rises to the right) */
    double lx = ML + 14, ly = MT + 14;
    fputs("<g id=\"legend\">\n", fp);
    /* ellipses, so that the only circles are the data points */
    fprintf(fp, "<ellipse cx=\"%.1f\" cy=\"%.1f\" rx=\"3.5\" ry=\"3.5\" fill=\"#1f5fa8\"/><text "
                "x=\"%.1f\" y=\"%.1f\">median of the timed forwards</text>\n", lx, ly, lx + 12,
            ly + 4);
    if (any_bars) {
        ly += 18;
        fprintf(fp, "<path d=\"M%.1f %.1fV%.1fM%.1f %.1fh8M%.1f %.1fh8\" stroke=\"#89b\" "
                    "fill=\"none\"/><text x=\"%.1f\" y=\"%.1f\">p10\u2013p90 of the timed "
                    "forwards</text>\n", lx, ly - 6, ly + 6, lx - 4, ly - 6, lx - 4, ly + 6,
                lx + 12, ly + 4);
    }
    if (any_unstable) {
        ly += 18;
        fprintf(fp, "<ellipse cx=\"%.1f\" cy=\"%.1f\" rx=\"3.5\" ry=\"3.5\" fill=\"#c0392b\"/>"
                    "<text x=\"%.1f\" y=\"%.1f\">unstable: p10\u2013p90 spread over %.0f%% of the "
                    "median</text>\n", lx, ly, lx + 12, ly + 4, 100 * unstable);
    }
    fputs("</g>\n</svg>\n", fp);
#undef PX
#undef PY
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
