/* SVG primitives (svg.h). */
#include "libsequoia/base/svg.h"

#include <math.h>

void sq_svg_escape(FILE *fp, const char *s)
{
    for (; s && *s; s++) {
        switch (*s) {
        case '&': fputs("&amp;", fp); break;
        case '<': fputs("&lt;", fp); break;
        case '>': fputs("&gt;", fp); break;
        case '"': fputs("&quot;", fp); break;
        default:
            if ((unsigned char)*s >= 0x20 || *s == '\t')
                fputc(*s, fp);
        }
    }
}

void sq_svg_begin(FILE *fp, double w, double h, const char *title)
{
    fprintf(fp, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    fprintf(fp, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
                "viewBox=\"0 0 %.0f %.0f\" font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\">\n",
            w, h, w, h);
    fprintf(fp, "<title>");
    sq_svg_escape(fp, title);
    fprintf(fp, "</title>\n<rect x=\"0\" y=\"0\" width=\"%.0f\" height=\"%.0f\" fill=\"white\"/>\n",
            w, h);
}

void sq_svg_end(FILE *fp)
{
    fprintf(fp, "</svg>\n");
}

void sq_svg_text(FILE *fp, double x, double y, double size, const char *anchor, const char *fill,
                 int bold, const char *text)
{
    fprintf(fp, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"%g\"", x, y, size);
    if (anchor && *anchor)
        fprintf(fp, " text-anchor=\"%s\"", anchor);
    if (fill && *fill)
        fprintf(fp, " fill=\"%s\"", fill);
    if (bold)
        fprintf(fp, " font-weight=\"bold\"");
    fputc('>', fp);
    sq_svg_escape(fp, text);
    fprintf(fp, "</text>\n");
}

void sq_svg_polyline_begin(FILE *fp, const char *stroke, double width, const char *dash)
{
    fprintf(fp, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"%g\"", stroke, width);
    if (dash)
        fprintf(fp, " stroke-dasharray=\"%s\"", dash);
    fputs(" points=\"", fp);
}

void sq_svg_polyline_point(FILE *fp, int first, double x, double y)
{
    fprintf(fp, "%s%.1f,%.1f", first ? "" : " ", x, y);
}

void sq_svg_polyline_end(FILE *fp)
{
    fprintf(fp, "\"/>\n");
}

void sq_svg_polyline(FILE *fp, const double *px, const double *py, int n, const char *stroke,
                     double width)
{
    sq_svg_polyline_begin(fp, stroke, width, NULL);
    for (int i = 0; i < n; i++)
        sq_svg_polyline_point(fp, i == 0, px[i], py[i]);
    sq_svg_polyline_end(fp);
}

void sq_svg_line(FILE *fp, double x1, double y1, double x2, double y2, const char *stroke,
                 double width, const char *dash)
{
    fprintf(fp, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" "
                "stroke-width=\"%g\"", x1, y1, x2, y2, stroke, width);
    if (dash)
        fprintf(fp, " stroke-dasharray=\"%s\"", dash);
    fputs("/>\n", fp);
}

void sq_svg_marker(FILE *fp, double x, double y, double r, const char *fill, const char *stroke,
                   const char *cls, const char *tooltip)
{
    fputs("<circle", fp);
    if (cls)
        fprintf(fp, " class=\"%s\"", cls);
    fprintf(fp, " cx=\"%.1f\" cy=\"%.1f\" r=\"%g\" fill=\"%s\"", x, y, r, fill);
    if (stroke)
        fprintf(fp, " stroke=\"%s\"", stroke);
    if (!tooltip) {
        fputs("/>\n", fp);
        return;
    }
    fputs("><title>", fp);
    sq_svg_escape(fp, tooltip);
    fputs("</title></circle>\n", fp);
}

void sq_svg_error_bar(FILE *fp, double x, double y1, double y2, double cap, const char *stroke,
                      const char *cls)
{
    fputs("<path", fp);
    if (cls)
        fprintf(fp, " class=\"%s\"", cls);
    fprintf(fp, " d=\"M%.1f %.1fV%.1fM%.1f %.1fh%gM%.1f %.1fh%g\" stroke=\"%s\" fill=\"none\"/>\n",
            x, y1, y2, x - cap, y1, 2 * cap, x - cap, y2, 2 * cap, stroke);
}

double sq_svg_x(const sq_svg_axes *a, double x)
{
    double v = a->xlog2 ? log2(x) : x;
    return a->x0 + (v - a->xmin) / (a->xmax - a->xmin) * a->w;
}

double sq_svg_y(const sq_svg_axes *a, double y)
{
    double v = a->ylog ? log10(y) : y;
    return a->y0 + a->h - (v - a->ymin) / (a->ymax - a->ymin) * a->h;
}

double sq_svg_nice_step(double range, int ticks)
{
    if (!(range > 0))
        return 1;
    double raw = range / ticks, mag = pow(10, floor(log10(raw)));
    double m = raw / mag;
    return (m < 1.5 ? 1 : m < 3.5 ? 2 : m < 7.5 ? 5 : 10) * mag;
}

int sq_svg_log_ticks(double lo, double hi, double *t, int cap)
{
    static const double m[] = {1, 2, 5, 1, 2, 3, 4, 5, 6, 7, 8, 9};
    static const int first[] = {0, 0, 3}, count[] = {1, 3, 9};   /* 10^e; 1-2-5; 1..9 */
    int n = 0;
    for (int pass = 0; pass < 3 && n < 3; pass++) {
        n = 0;
        for (double e = floor(log10(lo)); e <= ceil(log10(hi)) && n < cap; e += 1)
            for (int k = 0; k < count[pass] && n < cap; k++) {
                double v = m[first[pass] + k] * pow(10, e);
                if (v >= lo * (1 - 1e-12) && v <= hi * (1 + 1e-12))
                    t[n++] = v;
            }
    }
    return n;
}

static const char *scale_name(int log, int base)
{
    return !log ? "linear" : base == 2 ? "log2" : "log10";
}

static void grid_line(FILE *fp, double x1, double y1, double x2, double y2)
{
    fprintf(fp, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>", x1, y1,
            x2, y2);
}

void sq_svg_axes_draw(FILE *fp, const sq_svg_axes *a, const char *xlabel, const char *ylabel)
{
    fprintf(fp, "<g class=\"axes\" data-x-scale=\"%s\" data-x-min=\"%.6g\" data-x-max=\"%.6g\" "
                "data-y-scale=\"%s\" data-y-min=\"%.6g\" data-y-max=\"%.6g\">\n",
            scale_name(a->xlog2, 2), a->xlog2 ? pow(2, a->xmin) : a->xmin,
            a->xlog2 ? pow(2, a->xmax) : a->xmax, scale_name(a->ylog, 10),
            a->ylog ? pow(10, a->ymin) : a->ymin, a->ylog ? pow(10, a->ymax) : a->ymax);
    fprintf(fp, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"none\" "
                "stroke=\"#333\"/>\n", a->x0, a->y0, a->w, a->h);
    char label[32];
    if (a->xlog2) {
        for (double e = ceil(a->xmin - 1e-9); e <= a->xmax + 1e-9; e += 1) {
            double px = sq_svg_x(a, pow(2, e));
            grid_line(fp, px, a->y0, px, a->y0 + a->h);
            snprintf(label, sizeof label, "%.0f", pow(2, e));
            sq_svg_text(fp, px, a->y0 + a->h + 15, 11, "middle", NULL, 0, label);
        }
    } else {
        double xs = sq_svg_nice_step(a->xmax - a->xmin, 10);
        if (xs < 1)
            xs = 1;
        for (double xv = ceil(a->xmin / xs) * xs; xv <= a->xmax + 1e-9; xv += xs) {
            double px = sq_svg_x(a, xv);
            grid_line(fp, px, a->y0, px, a->y0 + a->h);
            snprintf(label, sizeof label, "%g", xv);
            sq_svg_text(fp, px, a->y0 + a->h + 15, 11, "middle", NULL, 0, label);
        }
    }
    if (a->ylog) {
        double t[40];
        int nt = sq_svg_log_ticks(pow(10, a->ymin), pow(10, a->ymax), t, 40);
        for (int k = 0; k < nt; k++) {
            double py = sq_svg_y(a, t[k]);
            grid_line(fp, a->x0, py, a->x0 + a->w, py);
            snprintf(label, sizeof label, "%g", t[k]);
            sq_svg_text(fp, a->x0 - 5, py + 4, 11, "end", NULL, 0, label);
        }
    } else {
        double ys = sq_svg_nice_step(a->ymax - a->ymin, 8);
        for (double yv = ceil(a->ymin / ys) * ys; yv <= a->ymax + 1e-9; yv += ys) {
            double py = sq_svg_y(a, yv);
            grid_line(fp, a->x0, py, a->x0 + a->w, py);
            snprintf(label, sizeof label, "%g", yv);
            sq_svg_text(fp, a->x0 - 5, py + 4, 11, "end", NULL, 0, label);
        }
    }
    sq_svg_text(fp, a->x0 + a->w / 2, a->y0 + a->h + 36, 13, "middle", NULL, 0, xlabel);
    fprintf(fp, "<text transform=\"translate(%.1f %.1f) rotate(-90)\" font-size=\"13\" "
                "text-anchor=\"middle\">", a->x0 - 48, a->y0 + a->h / 2);
    sq_svg_escape(fp, ylabel);
    fprintf(fp, "</text>\n</g>\n");
}
