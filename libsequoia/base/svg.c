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

void sq_svg_polyline(FILE *fp, const double *px, const double *py, int n, const char *stroke,
                     double width)
{
    fprintf(fp, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"%g\" points=\"", stroke,
            width);
    for (int i = 0; i < n; i++)
        fprintf(fp, "%s%.1f,%.1f", i ? " " : "", px[i], py[i]);
    fprintf(fp, "\"/>\n");
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

static void grid_line(FILE *fp, double x1, double y1, double x2, double y2)
{
    fprintf(fp, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>", x1, y1,
            x2, y2);
}

void sq_svg_axes_draw(FILE *fp, const sq_svg_axes *a, const char *xlabel, const char *ylabel)
{
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
        for (int e = (int)ceil(a->ymin - 1e-9); e <= (int)floor(a->ymax + 1e-9); e++) {
            double py = sq_svg_y(a, pow(10, e));
            grid_line(fp, a->x0, py, a->x0 + a->w, py);
            snprintf(label, sizeof label, "%g", pow(10, e));
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
    fprintf(fp, "</text>\n");
}
