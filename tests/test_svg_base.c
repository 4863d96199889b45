/* libsequoia/base/svg: escaping, the axes' mapping and ticks, well-formed output. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "libsequoia/base/svg.h"

static char *capture(void (*draw)(FILE *))
{
    char *buf = NULL;
    size_t len = 0;
    FILE *fp = open_memstream(&buf, &len);
    cr_assert_not_null(fp);
    draw(fp);
    fclose(fp);
    return buf;
}

static void draw_escaped(FILE *fp)
{
    sq_svg_escape(fp, "a<b & \"c\">\x01\td");
}

Test(svg_base, escape_and_controls)
{
    char *s = capture(draw_escaped);
    cr_assert_str_eq(s, "a&lt;b &amp; &quot;c&quot;&gt;\td");
    free(s);
}

Test(svg_base, axes_map_the_corners)
{
    sq_svg_axes a = {.x0 = 10, .y0 = 20, .w = 100, .h = 50, .xmin = 0, .xmax = 6, .ymin = 0,
                     .ymax = 2, .xlog2 = 1, .ylog = 1};
    cr_assert_float_eq(sq_svg_x(&a, 1), 10, 1e-12);
    cr_assert_float_eq(sq_svg_x(&a, 64), 110, 1e-12);
    cr_assert_float_eq(sq_svg_x(&a, 8), 60, 1e-12);
    cr_assert_float_eq(sq_svg_y(&a, 1), 70, 1e-12);
    cr_assert_float_eq(sq_svg_y(&a, 100), 20, 1e-12);
    cr_assert_eq(sq_svg_nice_step(10, 10), 1);
    cr_assert_eq(sq_svg_nice_step(100, 8), 10);
    cr_assert_eq(sq_svg_nice_step(7, 2), 5);
}

static void draw_doc(FILE *fp)
{
    sq_svg_axes a = {.x0 = 50, .y0 = 20, .w = 200, .h = 100, .xmin = 0, .xmax = 4, .ymin = 0,
                     .ymax = 30, .xlog2 = 1};
    sq_svg_begin(fp, 300, 160, "t<1>");
    sq_svg_axes_draw(fp, &a, "x & y", "ms");
    double px[2] = {sq_svg_x(&a, 1), sq_svg_x(&a, 16)}, py[2] = {sq_svg_y(&a, 0), sq_svg_y(&a, 30)};
    sq_svg_polyline(fp, px, py, 2, "#123456", 2);
    sq_svg_end(fp);
}

/* One tick label per power of two, escaped labels, the polyline from corner to corner. */
Test(svg_base, document_with_axes_and_polyline)
{
    char *s = capture(draw_doc);
    cr_assert(strstr(s, "<title>t&lt;1&gt;</title>"), "%s", s);
    const char *ticks[] = {">1<", ">2<", ">4<", ">8<", ">16<"};
    for (int i = 0; i < 5; i++)
        cr_assert(strstr(s, ticks[i]), "tick %s missing", ticks[i]);
    cr_assert(strstr(s, ">x &amp; y<"));
    cr_assert(strstr(s, "points=\"50.0,120.0 250.0,20.0\""), "%s", s);
    cr_assert(strstr(s, "</svg>\n"));
    free(s);
}
