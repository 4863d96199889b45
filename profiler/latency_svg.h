/* The picture of a latency profile: median forward time (log10 axis spanning the data) against
 * new tokens (log2 axis), with p10–p90 whiskers, unstable points in red and a legend for both.
 * Drawn with the shared SVG primitives (libsequoia/base/svg.h), written atomically; the axes'
 * <g class="axes"> carries the time range drawn (data-y-min, data-y-max, in ms). */
#ifndef SQ_PROFILER_LATENCY_SVG_H
#define SQ_PROFILER_LATENCY_SVG_H

#include <stdio.h>

#include "libsequoia/format/profile.h"

void sq_latency_svg_write(FILE *fp, const sq_profile *p, const char *title, double unstable);
int sq_latency_svg(const sq_profile *p, const char *title, double unstable, const char *path,
                   sq_error *err);

#endif
