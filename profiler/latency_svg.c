#include "profiler/latency_svg.h"

#include <math.h>

#include "libsequoia/base/io.h"

#define W 720.0
#define H 420.0
#define ML 70.0  /* margins */
#define MR 20.0
#define MT 40.0
#define MB 50.0

static void xml_text(FILE *fp, const char *s)
{
    for (; *s; s++) {
        switch (*s) {
        case '<': fputs("&lt;", fp); break;
        case '>': fputs("&gt;", fp); break;
        case '&': fputs("&amp;", fp); break;
        case '"': fputs("&quot;", fp); break;
        default: fputc(*s, fp);
        }
    }
}

void sq_latency_svg_write(FILE *fp, const sq_profile *p, const char *title, double unstable)
{
    int tmin = p->points[0].tokens, tmax = tmin;
    for (int i = 1; i < p->n; i++) {
        tmin = p->points[i].tokens < tmin ? p->points[i].tokens : tmin;
        tmax = p->points[i].tokens > tmax ? p->points[i].tokens : tmax;
    }
    double x0 = log2(tmin), x1 = log2(tmax);
    if (x1 - x0 < 1)
        x1 = x0 + 1;
    double ymax = 0;
    for (int i = 0; i < p->n; i++) {
        double v = isnan(p->points[i].p90_ms) ? p->points[i].median_ms : p->points[i].p90_ms;
        if (v > ymax)
            ymax = v;
    }
    /* a round upper bound: 1, 2 or 5 times a power of ten */
    double mag = pow(10, floor(log10(ymax))), top = mag;
    while (top < ymax)
        top = top == mag ? 2 * mag : top == 2 * mag ? 5 * mag : 10 * mag;
#define PX(tok) (ML + (log2(tok) - x0) / (x1 - x0) * (W - ML - MR))
#define PY(ms) (H - MB - (ms) / top * (H - MT - MB))
    fprintf(fp, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
                "viewBox=\"0 0 %.0f %.0f\" font-family=\"sans-serif\" font-size=\"12\">\n",
            W, H, W, H);
    fprintf(fp, "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n<text x=\"%.0f\" "
                "y=\"22\" font-size=\"14\">", ML);
    xml_text(fp, title);
    fputs("</text>\n", fp);
    /* axes and grid */
    for (int k = 0; k <= 5; k++) {
        double v = top * k / 5, y = PY(v);
        fprintf(fp, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>"
                    "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%g</text>\n",
                ML, y, W - MR, y, ML - 6, y + 4, v);
    }
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
                "forward time (ms)</text>\n", (MT + H - MB) / 2);
    /* p10-p90 bars, the median line, points (red when unstable) */
    for (int i = 0; i < p->n; i++) {
        const sq_profile_point *q = &p->points[i];
        if (!isnan(q->p10_ms) && !isnan(q->p90_ms))
            fprintf(fp, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#89b\"/>\n",
                    PX(q->tokens), PY(q->p10_ms), PX(q->tokens), PY(q->p90_ms));
    }
    /* the median line: one per batch size (points are ordered by batch, then tokens), with a
     * legend when there is more than one */
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
                    ML + 10, MT + 10 + 16.0 * nb, ML + 30, MT + 10 + 16.0 * nb, col, ML + 36,
                    MT + 14 + 16.0 * nb, p->points[i].batch);
        nb++;
    }
    for (int i = 0; i < p->n; i++) {
        const sq_profile_point *q = &p->points[i];
        int bad = !isnan(q->p10_ms) && !isnan(q->p90_ms) &&
                  (q->p90_ms - q->p10_ms) / q->median_ms > unstable;
        fprintf(fp, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3.5\" fill=\"%s\"><title>batch %d, %d tokens: "
                    "%.4g ms median%s</title></circle>\n",
                PX(q->tokens), PY(q->median_ms), bad ? "#c0392b" : "#1f5fa8", q->batch, q->tokens,
                q->median_ms, bad ? " (unstable)" : "");
    }
    fputs("</svg>\n", fp);
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
