/* libsequoia/base/svg: escaping, the axes' mapping and ticks, well-formed output. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "libsequoia/base/svg.h"

static char *capture(void (*draw)(FILE *))
{
    /* static: the stream writes through these pointers until fclose (a local's address handed
     * to the stream reads to GCC's -O3 as a pointer that may outlive it) */
    static char *buf;
    static size_t len;
    buf = NULL;
    len = 0;
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

/* log10 ticks: powers of ten when three or more fall in the range, else 1-2-5, else 1..9. */
Test(svg_base, log_ticks_rule)
{
    double t[40];
    int n = sq_svg_log_ticks(1e-4, 1, t, 40);
    cr_assert_eq(n, 5);
    for (int i = 0; i < n; i++)
        cr_assert_float_eq(t[i], pow(10, i - 4), 1e-15);
    n = sq_svg_log_ticks(1.1, 260, t, 40);   /* 10, 100: two powers, so 1-2-5 */
    const double want[] = {2, 5, 10, 20, 50, 100, 200};
    cr_assert_eq(n, 7);
    for (int i = 0; i < n; i++)
        cr_assert_float_eq(t[i], want[i], 1e-12);
    n = sq_svg_log_ticks(2.5, 4.5, t, 40);   /* no 1-2-5 multiple but 5? none: 1..9 */
    cr_assert_eq(n, 2);   /* 3 and 4: as many as there are */
    cr_assert_float_eq(t[0], 3, 1e-12);
    cr_assert_float_eq(t[1], 4, 1e-12);
}

static void draw_parts(FILE *fp)
{
    double px[3] = {1, 2.25, 3}, py[3] = {4, 5, 6.04};
    sq_svg_polyline(fp, px, py, 3, "red", 1.5);
    sq_svg_polyline_begin(fp, "red", 1.5, NULL);
    for (int i = 0; i < 3; i++)
        sq_svg_polyline_point(fp, i == 0, px[i], py[i]);
    sq_svg_polyline_end(fp);
    sq_svg_marker(fp, 10, 20, 3.5, "#123", NULL, "point", "a < b");
    sq_svg_marker(fp, 10, 20, 2, "white", "#123", NULL, NULL);
    sq_svg_error_bar(fp, 5, 10, 30, 4, "#89b", "whisker");
    sq_svg_line(fp, 0, 1, 2, 3, "#555", 2, "6 4");
}

/* The point-by-point polyline is the array one; markers, error bars and lines as documented. */
Test(svg_base, markers_error_bars_and_lines)
{
    char *s = capture(draw_parts);
    const char *poly = "<polyline fill=\"none\" stroke=\"red\" stroke-width=\"1.5\" "
                       "points=\"1.0,4.0 2.2,5.0 3.0,6.0\"/>\n";
    char *second = strstr(s, poly);
    cr_assert(second == s && strstr(second + 1, poly), "%s", s);
    cr_assert(strstr(s, "<circle class=\"point\" cx=\"10.0\" cy=\"20.0\" r=\"3.5\" fill=\"#123\">"
                        "<title>a &lt; b</title></circle>\n"), "%s", s);
    cr_assert(strstr(s, "<circle cx=\"10.0\" cy=\"20.0\" r=\"2\" fill=\"white\" stroke=\"#123\"/>\n"),
              "%s", s);
    cr_assert(strstr(s, "<path class=\"whisker\" d=\"M5.0 10.0V30.0M1.0 10.0h8M1.0 30.0h8\" "
                        "stroke=\"#89b\" fill=\"none\"/>\n"), "%s", s);
    cr_assert(strstr(s, "<line x1=\"0.0\" y1=\"1.0\" x2=\"2.0\" y2=\"3.0\" stroke=\"#555\" "
                        "stroke-width=\"2\" stroke-dasharray=\"6 4\"/>\n"), "%s", s);
    free(s);
}

static void draw_log_axes(FILE *fp)
{
    sq_svg_axes a = {.x0 = 50, .y0 = 20, .w = 200, .h = 100, .xmin = 0, .xmax = 3,
                     .ymin = log10(2), .ymax = log10(300), .xlog2 = 1, .ylog = 1};
    sq_svg_axes_draw(fp, &a, "n", "ms");
}

/* The axes record their scales and ranges (data units) on their group. */
Test(svg_base, axes_group_records_the_ranges)
{
    char *s = capture(draw_log_axes);
    cr_assert(strncmp(s, "<g class=\"axes\" data-x-scale=\"log2\" data-x-min=\"1\" data-x-max=\"8\" "
                         "data-y-scale=\"log10\" data-y-min=\"2\" data-y-max=\"300\">\n", 86) == 0,
              "%s", s);
    cr_assert(strstr(s, "data-y-max=\"300\""), "%s", s);
    cr_assert(strstr(s, ">200<") && strstr(s, ">50<"), "1-2-5 ticks over 2..300 (two powers of ten): %s", s);
    cr_assert(strstr(s, "</g>\n"));
    free(s);
}
