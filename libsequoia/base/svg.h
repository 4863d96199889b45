/* SVG primitives every picture of the toolkit is drawn with (the planner's tree, curve and
 * table pictures, the profiler's latency picture): the document, escaped text, polylines and
 * plot axes with grid and ticks. Self-contained SVG 1.1, no plotting dependency. */
#ifndef SQ_BASE_SVG_H
#define SQ_BASE_SVG_H

#include <stdio.h>

/* XML-escapes s (& < > ") and drops control characters other than tab. NULL writes nothing. */
void sq_svg_escape(FILE *fp, const char *s);

/* The XML declaration, <svg> of w x h pixels with a <title> and a white background. */
void sq_svg_begin(FILE *fp, double w, double h, const char *title);
void sq_svg_end(FILE *fp);

/* <text> at (x, y): size in pixels, anchor "start", "middle" or "end" (NULL: start), fill
 * (NULL: black), bold, the text escaped. */
void sq_svg_text(FILE *fp, double x, double y, double size, const char *anchor, const char *fill,
                 int bold, const char *text);

/* <polyline> through n points (pixels), no fill. */
void sq_svg_polyline(FILE *fp, const double *px, const double *py, int n, const char *stroke,
                     double width);

/* A plot area and the data ranges it maps. x is linear, or log2 (xlog2: x values are positive,
 * ticks at powers of two); y is linear, or log10 (ylog). Ranges are in the axis' own units:
 * log2 x / log10 y when the axis is logarithmic. */
typedef struct sq_svg_axes {
    double x0, y0, w, h;        /* plot area (pixels), y0 at the top                */
    double xmin, xmax;
    double ymin, ymax;
    int    xlog2, ylog;
} sq_svg_axes;

double sq_svg_x(const sq_svg_axes *a, double x);   /* data -> pixels */
double sq_svg_y(const sq_svg_axes *a, double y);

/* A round tick step (1, 2 or 5 times a power of ten) for about `ticks` ticks over range. */
double sq_svg_nice_step(double range, int ticks);

/* The frame, grid lines with tick labels on both axes, and the axis labels (escaped). */
void sq_svg_axes_draw(FILE *fp, const sq_svg_axes *a, const char *xlabel, const char *ylabel);

#endif
