/* SVG primitives every picture of the toolkit is drawn with (the planner's tree, curve and
 * table pictures, the profiler's latency picture): the document, escaped text, lines and
 * polylines, markers with a tooltip, error bars, and plot axes with grid and ticks.
 * Self-contained SVG 1.1, no plotting dependency. */
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

/* The same, point by point (for lines that skip points or are computed on the fly): begin,
 * then sq_svg_polyline_point for each point (`first`: 1 for the first one), then end. dash is
 * a stroke-dasharray ("6 4") or NULL. */
void sq_svg_polyline_begin(FILE *fp, const char *stroke, double width, const char *dash);
void sq_svg_polyline_point(FILE *fp, int first, double x, double y);
void sq_svg_polyline_end(FILE *fp);

/* <line> from (x1, y1) to (x2, y2); dash as for polylines (NULL: solid). */
void sq_svg_line(FILE *fp, double x1, double y1, double x2, double y2, const char *stroke,
                 double width, const char *dash);

/* A data point: <circle> of radius r at (x, y), filled, outlined when stroke is not NULL, with
 * class `cls` (NULL: none) and a tooltip (<title>, escaped; NULL: none). */
void sq_svg_marker(FILE *fp, double x, double y, double r, const char *fill, const char *stroke,
                   const char *cls, const char *tooltip);

/* A vertical error bar at x from y1 to y2 (pixels) with caps `cap` pixels each side, class
 * `cls` (NULL: none). */
void sq_svg_error_bar(FILE *fp, double x, double y1, double y2, double cap, const char *stroke,
                      const char *cls);

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

/* The ticks of a log10 axis over [lo, hi] (data units, lo > 0), ascending, at most cap: the
 * powers of ten when there are three or more; else 1, 2 and 5 times them; else 1 to 9 times
 * them. Returns how many. */
int sq_svg_log_ticks(double lo, double hi, double *t, int cap);

/* The frame, grid lines with tick labels on both axes, and the axis labels (escaped), in
 * <g class="axes"> whose data-x-scale / data-y-scale ("linear", "log2", "log10") and
 * data-x-min ... data-y-max (data units) record what is drawn, for tools and tests. */
void sq_svg_axes_draw(FILE *fp, const sq_svg_axes *a, const char *xlabel, const char *ylabel);

#endif
