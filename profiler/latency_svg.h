/* The picture of a latency profile: median forward time (log10 axis spanning the data) against
 * new tokens (log2 axis), with p10–p90 whiskers, unstable points in red and a legend for both.
 * Self-contained SVG, written atomically. <g id="y-axis"> carries the time range drawn. */
#ifndef SQ_PROFILER_LATENCY_SVG_H
#define SQ_PROFILER_LATENCY_SVG_H

#include <stdio.h>

#include "libsequoia/format/profile.h"

void sq_latency_svg_write(FILE *fp, const sq_profile *p, const char *title, double unstable);
int sq_latency_svg(const sq_profile *p, const char *title, double unstable, const char *path,
                   sq_error *err);

#endif
