#include "planner/svg.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "planner/baseline.h"
#include "libsequoia/base/io.h"
#include "libsequoia/base/svg.h"

static const char *const palette[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e",
                                      "#9467bd", "#8c564b", "#e377c2", "#17becf"};
#define PALETTE_N ((int)(sizeof palette / sizeof *palette))

/* Light to dark blue by t in [0, 1]. */
static void blue(double t, char *buf, size_t cap)
{
    if (!(t >= 0))
        t = 0;
    if (t > 1)
        t = 1;
    int r = (int)lround(222 + (8 - 222) * t), g = (int)lround(235 + (69 - 235) * t),
        b = (int)lround(247 + (148 - 247) * t);
    snprintf(buf, cap, "#%02x%02x%02x", r, g, b);
}

/* Writes via an atomic output. */
typedef int (*writer_fn)(FILE *fp, const void *a, const void *b, sq_error *err);

static int write_atomic(const char *path, writer_fn fn, const void *a, const void *b,
                        sq_error *err)
{
    sq_out *out = NULL;
    int rc = sq_out_open(&out, path, err);
    if (rc)
        return rc;
    if ((rc = fn(sq_out_stream(out), a, b, err))) {
        sq_out_abort(out);
        return rc;
    }
    return sq_out_commit(out, err);
}

/* ---- plan ----------------------------------------------------------------------------- */

#define SVG_PLOT_MAX 3000.0   /* widest plot of a tree, in pixels                           */
#define SVG_DOT_MIN 3.0       /* narrowest column of a node, in pixels                      */

/* The levels of more than agg_over nodes, as columns of SVG_DOT_MIN pixels at y0 + dy * level:
 * one rectangle per column that holds nodes, coloured by their largest f, with a tooltip. */
static int svg_plan_columns(FILE *fp, const sq_tree *t, const double *f, const double *x,
                            const int *widths, int agg_over, int levels, int slots, double dx,
                            double x0, double y0, double dy, double lmin, sq_error *err)
{
    const int cols = (int)ceil(slots * dx / SVG_DOT_MIN) + 1;
    int *cnt = malloc((size_t)cols * sizeof *cnt), *rlo = malloc((size_t)cols * sizeof *rlo);
    int *rhi = malloc((size_t)cols * sizeof *rhi);
    double *fhi = malloc((size_t)cols * sizeof *fhi), *flo = malloc((size_t)cols * sizeof *flo);
    if (!cnt || !rlo || !rhi || !fhi || !flo) {
        free(cnt), free(rlo), free(rhi), free(fhi), free(flo);
        return sq_error_oom(err, "svg");
    }
    for (int l = 0; l < levels; l++) {
        if (widths[l] <= agg_over)
            continue;
        for (int c = 0; c < cols; c++)
            cnt[c] = 0;
        for (int v = 0; v < t->n; v++) {
            if (t->depth[v] != l)
                continue;
            int c = (int)floor(dx * (x[v] + 0.5) / SVG_DOT_MIN);
            c = c < 0 ? 0 : c >= cols ? cols - 1 : c;
            if (!cnt[c]++) {
                rlo[c] = rhi[c] = t->rank[v];
                flo[c] = fhi[c] = f[v];
            }
            rlo[c] = t->rank[v] < rlo[c] ? t->rank[v] : rlo[c];
            rhi[c] = t->rank[v] > rhi[c] ? t->rank[v] : rhi[c];
            flo[c] = fmin(flo[c], f[v]);
            fhi[c] = fmax(fhi[c], f[v]);
        }
        for (int c = 0; c < cols; c++) {
            if (!cnt[c])
                continue;
            char col[16];
            blue(fhi[c] > 0 ? 1.0 - log10(fhi[c]) / lmin : 0.0, col, sizeof col);
            fprintf(fp, "<g><title>level %d: %d node%s, ranks %d..%d, f = %.3g..%.3g</title>"
                        "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"12\" fill=\"%s\"/>"
                        "</g>\n", l, cnt[c], cnt[c] == 1 ? "" : "s", rlo[c], rhi[c], flo[c],
                    fhi[c], x0 + SVG_DOT_MIN * c, y0 + dy * l - 6, SVG_DOT_MIN, col);
        }
    }
    free(cnt), free(rlo), free(rhi), free(fhi), free(flo);
    return SQ_OK;
}

int sq_svg_plan_write(FILE *fp, const sq_plan *plan, sq_error *err)
{
    const sq_tree *t = plan->tree;
    int n = t->n, levels = sq_tree_depth(t);
    double *f = malloc((size_t)n * sizeof *f), *x = malloc((size_t)n * sizeof *x);
    int *kids = calloc((size_t)n, sizeof *kids), *first = malloc((size_t)n * sizeof *first);
    int *stack = malloc((size_t)n * sizeof *stack), *widths = calloc((size_t)levels, sizeof *widths);
    double *lsum = calloc((size_t)levels, sizeof *lsum);
    if (!f || !x || !kids || !first || !stack || !widths || !lsum) {
        free(f), free(x), free(kids), free(first), free(stack), free(widths), free(lsum);
        return sq_error_oom(err, "svg");
    }
    int rc;
    sq_tree_expected_tokens(t, &plan->acceptance, f);
    for (int v = 0; v < n; v++)
        first[v] = -1;
    for (int v = 1; v < n; v++) {
        if (first[t->parent[v]] < 0)
            first[t->parent[v]] = v;
        kids[t->parent[v]]++;
    }
    for (int v = 0; v < n; v++) {
        widths[t->depth[v]]++;
        lsum[t->depth[v]] += f[v];
    }
    /* Leaves take consecutive slots in depth-first order; a parent sits above the middle of
     * its children (children come after their parent in breadth-first order). */
    int top = 0, slots = 0;
    stack[top++] = 0;
    while (top) {
        int v = stack[--top];
        if (!kids[v])
            x[v] = slots++;
        for (int c = kids[v] - 1; c >= 0; c--)
            stack[top++] = first[v] + c;
    }
    for (int v = n - 1; v >= 0; v--)
        if (kids[v])
            x[v] = 0.5 * (x[first[v]] + x[first[v] + kids[v] - 1]);

    int labels = n <= SQ_SVG_LABEL_MAX;
    /* At most SVG_PLOT_MAX / SVG_DOT_MIN leaves get their own column; a wider tree is squeezed
     * into SVG_PLOT_MAX pixels, and its levels of more than that many nodes are aggregated:
     * drawn as columns of SVG_DOT_MIN pixels, each the nodes that fall there (colour: their
     * largest f; tooltip: how many, their ranks and f), without edges. */
    double dx = labels ? 34 : fmax(SVG_DOT_MIN, fmin(14.0, SVG_PLOT_MAX / slots));
    if (!labels && slots * SVG_DOT_MIN > SVG_PLOT_MAX)
        dx = SVG_PLOT_MAX / slots;
    const int agg_over = (int)(SVG_PLOT_MAX / SVG_DOT_MIN);   /* nodes of a level drawn apart */
    int aggregated = 0;
    for (int l = 0; l < levels; l++)
        aggregated += !labels && widths[l] > agg_over;
    double dy = labels ? 72 : 48;
    double r = labels ? 12 : fmax(1.2, fmin(5.0, dx * 0.42));
    double left = 30, topm = 70, panel = 210;
    double plot_w = fmax(slots * dx, 560);
    double W = left + plot_w + panel, H = topm + (levels - 1) * dy + 40 + 70;
    double fmin_pos = 1.0;
    for (int v = 0; v < n; v++)
        if (f[v] > 0 && f[v] < fmin_pos)
            fmin_pos = f[v];
    double lmin = log10(fmin_pos) < -1e-9 ? log10(fmin_pos) : -1.0;

    char title[256];
    snprintf(title, sizeof title, "Sequoia plan: %d nodes, depth %d, %.4f expected tokens/step", n,
             levels, plan->expected_tokens);
    sq_svg_begin(fp, W, H, title);
    fprintf(fp, "<text x=\"%.0f\" y=\"28\" font-size=\"18\" font-weight=\"bold\">", left);
    sq_svg_escape(fp, title);
    fprintf(fp, "</text>\n<text x=\"%.0f\" y=\"48\" font-size=\"12\" fill=\"#444\">curve ", left);
    sq_svg_escape(fp, plan->acceptance.name);
    fprintf(fp, " (%s); %s", plan->rank_semantics,
            labels ? "node label: rank, and score f(v) below; colour: f(v)"
                   : "colour: score f(v); hover a node for its rank, path and score");
    if (aggregated)
        fprintf(fp, "; levels of more than %d nodes: columns of nodes (colour: largest f)",
                agg_over);
    fprintf(fp, "</text>\n");

#define PX(v) (left + dx * (x[v] + 0.5) + (plot_w - slots * dx) / 2)
#define PY(v) (topm + 20 + dy * t->depth[v])
#define AGG(v) (!labels && widths[t->depth[v]] > agg_over)
    /* edges, one path (none into an aggregated level) */
    if (n > 1) {
        fprintf(fp, "<path fill=\"none\" stroke=\"#9aa\" stroke-width=\"%.2f\" d=\"",
                labels ? 1.2 : 0.6);
        for (int v = 1; v < n; v++)
            if (!AGG(v))
                fprintf(fp, "M%.1f %.1fL%.1f %.1f", PX(t->parent[v]), PY(t->parent[v]), PX(v),
                        PY(v));
        fprintf(fp, "\"/>\n");
    }
    /* aggregated levels: one column per SVG_DOT_MIN pixels */
    if (aggregated && (rc = svg_plan_columns(fp, t, f, x, widths, agg_over, levels, slots, dx,
                                             left + (plot_w - slots * dx) / 2, topm + 20, dy,
                                             lmin, err))) {
        free(f), free(x), free(kids), free(first), free(stack), free(widths), free(lsum);
        return rc;
    }
    /* nodes */
    for (int v = 0; v < n; v++) {
        if (AGG(v))
            continue;
        char col[16];
        double tcol = f[v] > 0 ? 1.0 - log10(f[v]) / lmin : 0.0;
        blue(tcol, col, sizeof col);
        fprintf(fp, "<g><title>");
        if (v == 0) {
            fprintf(fp, "root, f = 1");
        } else {
            fprintf(fp, "node %d, path ", v);
            int path[64], len = 0;
            for (int u = v; u > 0 && len < 64; u = t->parent[u])
                path[len++] = t->rank[u] - 1;
            fputc('[', fp);
            for (int i = len - 1; i >= 0; i--)
                fprintf(fp, i == len - 1 ? "%d" : ", %d", path[i]);
            fprintf(fp, "%s], rank %d, f = %.6g", t->depth[v] > 64 ? ", ..." : "", t->rank[v], f[v]);
        }
        fprintf(fp, "</title><circle cx=\"%.1f\" cy=\"%.1f\" r=\"%.1f\" fill=\"%s\" stroke=\"#234\" "
                    "stroke-width=\"%.2f\"/>", PX(v), PY(v), r, col, labels ? 1.0 : 0.3);
        if (labels) {
            fprintf(fp, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"10\" text-anchor=\"middle\" "
                        "fill=\"%s\">%s", PX(v), PY(v) + 3.5, tcol > 0.55 ? "white" : "black",
                    v == 0 ? "R" : "");
            if (v)
                fprintf(fp, "%d", t->rank[v]);
            fprintf(fp, "</text><text x=\"%.1f\" y=\"%.1f\" font-size=\"8\" text-anchor=\"middle\" "
                        "fill=\"#333\">%.2g</text>", PX(v), PY(v) + r + 9, f[v]);
        }
        fprintf(fp, "</g>\n");
    }
    /* level widths at the side */
    double px = left + plot_w + 20;
    fprintf(fp, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"12\" font-weight=\"bold\">level: nodes, "
                "&#931;f</text>\n", px, topm);
    for (int l = 0; l < levels; l++)
        fprintf(fp, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"12\">%d: %d nodes, %.3f</text>\n", px,
                topm + 20 + dy * l + 4, l, widths[l], lsum[l]);
    /* legend: colour scale (rectangles) */
    double ly = topm + (levels - 1) * dy + 70;
    fprintf(fp, "<text x=\"%.0f\" y=\"%.1f\" font-size=\"11\">f(v):</text>\n", left, ly + 11);
    for (int i = 0; i < 20; i++) {
        char col[16];
        blue(i / 19.0, col, sizeof col);
        fprintf(fp, "<rect x=\"%.1f\" y=\"%.1f\" width=\"10\" height=\"14\" fill=\"%s\"/>\n",
                left + 40 + 10 * i, ly, col);
    }
    fprintf(fp, "<text x=\"%.0f\" y=\"%.1f\" font-size=\"10\">%.2g</text>\n", left + 40, ly + 26,
            pow(10, lmin));
    fprintf(fp, "<text x=\"%.0f\" y=\"%.1f\" font-size=\"10\" text-anchor=\"end\">1</text>\n",
            left + 240, ly + 26);
    fprintf(fp, "<text x=\"%.0f\" y=\"%.1f\" font-size=\"10\" fill=\"#444\">(log scale)</text>\n",
            left + 250, ly + 11);
#undef AGG
#undef PX
#undef PY
    sq_svg_end(fp);
    free(f), free(x), free(kids), free(first), free(stack), free(widths), free(lsum);
    return SQ_OK;
}

static int plan_writer(FILE *fp, const void *a, const void *b, sq_error *err)
{
    (void)b;
    return sq_svg_plan_write(fp, a, err);
}

int sq_svg_plan(const sq_plan *plan, const char *path, sq_error *err)
{
    return write_atomic(path, plan_writer, plan, NULL, err);
}

/* ---- axes ----------------------------------------------------------------------------- */

/* ---- acceptance curves ----------------------------------------------------------------- */

int sq_svg_curves_write(FILE *fp, const sq_curve_set *set, sq_error *err)
{
    if (!set || set->n < 1)
        return sq_error_set(err, SQ_EDATA, "svg: no curve to draw");
    int wmax = 1;
    double pmin = 1.0;
    for (int i = 0; i < set->n; i++) {
        const sq_curve *c = &set->curves[i];
        int w = c->width < SQ_SVG_MAX_RANKS ? c->width : SQ_SVG_MAX_RANKS;
        if (w > wmax)
            wmax = w;
        for (int k = 0; k < w; k++) {
            double lo = c->p[k] - (c->stderr_p ? c->stderr_p[k] : 0);
            if (c->p[k] > 0 && c->p[k] < pmin)
                pmin = c->p[k];
            if (lo > 0 && lo < pmin)
                pmin = lo;
        }
    }
    if (pmin < 1e-6)
        pmin = 1e-6;
    double legend_h = 32.0 * set->n;
    sq_svg_axes a = {.x0 = 80, .y0 = 60, .w = 620, .h = 400, .xmin = 0.5, .xmax = wmax + 0.5,
              .ymin = floor(log10(pmin)), .ymax = 0, .ylog = 1};
    if (a.ymin > -1)
        a.ymin = -1;
    double W = 1060, H = fmax(a.y0 + a.h + 60, a.y0 + legend_h + 40);
    sq_svg_begin(fp, W, H, "Acceptance curves");
    fprintf(fp, "<text x=\"80\" y=\"30\" font-size=\"18\" font-weight=\"bold\">Acceptance "
                "vectors: p_k against rank k (error bars: &#177;1 standard error)</text>\n");
    sq_svg_axes_draw(fp, &a, "rank k (the k-th child tried)", "p_k (log scale)");
    double floor_y = pow(10, a.ymin);
    for (int i = 0; i < set->n; i++) {
        const sq_curve *c = &set->curves[i];
        const char *col = palette[i % PALETTE_N];
        int w = c->width < SQ_SVG_MAX_RANKS ? c->width : SQ_SVG_MAX_RANKS;
        fprintf(fp, "<g><title>");
        sq_svg_escape(fp, c->name);
        fprintf(fp, "</title>\n");
        sq_svg_polyline_begin(fp, col, 1.6, NULL);
        for (int k = 0, first = 1; k < w; k++)
            if (c->p[k] > 0) {
                sq_svg_polyline_point(fp, first, sq_svg_x(&a, k + 1),
                                      sq_svg_y(&a, fmax(c->p[k], floor_y)));
                first = 0;
            }
        sq_svg_polyline_end(fp);
        for (int k = 0; k < w; k++) {
            double p = c->p[k], px = sq_svg_x(&a, k + 1);
            if (c->stderr_p && c->stderr_p[k] > 0) {
                double hi = fmin(1.0, p + c->stderr_p[k]), lo = fmax(floor_y, p - c->stderr_p[k]);
                sq_svg_error_bar(fp, px, sq_svg_y(&a, lo), sq_svg_y(&a, hi), 3, col, NULL);
            }
            char tip[96];
            snprintf(tip, sizeof tip, "p_%d = %.6g%s", k + 1, p,
                     p > 0 ? "" : " (drawn at the axis floor)");
            sq_svg_marker(fp, px, sq_svg_y(&a, fmax(p, floor_y)), 2.8, p > 0 ? col : "white", col,
                          NULL, tip);
        }
        fprintf(fp, "</g>\n");
        double ly = a.y0 + 10 + 32.0 * i;
        char about[160];
        snprintf(about, sizeof about, "%s, %d ranks, \u03a3p = %.3f", c->mode ? c->mode : "?",
                 c->width, 1.0 - c->reject);
        sq_svg_line(fp, 720, ly, 745, ly, col, 2, NULL);
        sq_svg_text(fp, 752, ly + 4, 12, NULL, NULL, 0, c->name);
        sq_svg_text(fp, 752, ly + 17, 10, NULL, "#555", 0, about);
    }
    if (wmax == SQ_SVG_MAX_RANKS)
        fprintf(fp, "<text x=\"80\" y=\"%.1f\" font-size=\"11\" fill=\"#444\">ranks past %d not "
                    "drawn</text>\n", H - 8, SQ_SVG_MAX_RANKS);
    sq_svg_end(fp);
    return SQ_OK;
}

static int curves_writer(FILE *fp, const void *a, const void *b, sq_error *err)
{
    (void)b;
    return sq_svg_curves_write(fp, a, err);
}

int sq_svg_curves(const sq_curve_set *set, const char *path, sq_error *err)
{
    return write_atomic(path, curves_writer, set, NULL, err);
}

/* ---- expected-tokens table ------------------------------------------------------------- */

int sq_svg_table_write(FILE *fp, const sq_dp *dp, const sq_curve *curve, sq_error *err)
{
    int N = sq_dp_budget(dp), D = sq_dp_depth(dp), B = sq_dp_width(dp);
    int depths[6], nd = 0;
    if (D <= 7) {
        for (int d = 2; d <= D && nd < 6; d++)
            depths[nd++] = d;
        if (nd && depths[nd - 1] != D && D >= 2)
            depths[nd - 1] = D;
    } else {
        for (int i = 0; i < 6; i++) {
            int d = 2 + (int)lround((D - 2) * i / 5.0);
            if (!nd || depths[nd - 1] != d)
                depths[nd++] = d;
        }
    }
    if (nd == 0)
        depths[nd++] = D;
    double fmax_v = 1.0;
    for (int n = 1; n <= N; n++) {
        double b = sq_dp_best(dp, n, D);
        if (isfinite(b) && b > fmax_v)
            fmax_v = b;
    }
    double ys = sq_svg_nice_step(fmax_v - 1.0 > 0.5 ? fmax_v - 1.0 : 0.5, 8);
    sq_svg_axes a = {.x0 = 80, .y0 = 60, .w = 620, .h = 400, .xmin = 1, .xmax = N > 1 ? N : 2,
              .ymin = 1.0, .ymax = ceil(fmax_v / ys) * ys, .ylog = 0};
    if (a.ymax <= a.ymin)
        a.ymax = a.ymin + 1;
    sq_svg_begin(fp, 960, 540, "Expected tokens per step");
    fprintf(fp, "<text x=\"80\" y=\"30\" font-size=\"18\" font-weight=\"bold\">Best expected tokens "
                "per step F(n, d) against tree size n</text>\n<text x=\"80\" y=\"48\" "
                "font-size=\"12\" fill=\"#444\">curve ");
    sq_svg_escape(fp, curve->name);
    fprintf(fp, "; width &#8804; %d; baselines at depth &#8804; %d</text>\n", B, D);
    sq_svg_axes_draw(fp, &a, "tree size n (nodes, root included)", "expected tokens per step F");
    int li = 0;
    for (int i = 0; i < nd; i++, li++) {
        const char *col = palette[i % PALETTE_N];
        sq_svg_polyline_begin(fp, col, 1.8, NULL);
        for (int n = 1, first = 1; n <= N; n++) {
            double b = sq_dp_best(dp, n, depths[i]);
            if (isfinite(b)) {
                sq_svg_polyline_point(fp, first, sq_svg_x(&a, n), sq_svg_y(&a, b));
                first = 0;
            }
        }
        sq_svg_polyline_end(fp);
        char label[64];
        snprintf(label, sizeof label, "optimal tree, depth \u2264 %d", depths[i]);
        sq_svg_line(fp, 720, 70.0 + 18 * li, 745, 70.0 + 18 * li, col, 2, NULL);
        sq_svg_text(fp, 752, 74.0 + 18 * li, 12, NULL, NULL, 0, label);
    }
    /* baselines */
    const char *bcol[2] = {"#555", "#b8860b"};
    const char *bname[2] = {"longest chain", "best k x L (SpecInfer)"};
    for (int b = 0; b < 2; b++, li++) {
        sq_svg_polyline_begin(fp, bcol[b], 1.5, "6 4");
        for (int n = 1; n <= N; n++) {
            int nodes, k, L;
            double v = b == 0 ? sq_baseline_chain(curve, n, D, &nodes)
                              : sq_baseline_kxl(curve, n, D, B, &k, &L);
            sq_svg_polyline_point(fp, n == 1, sq_svg_x(&a, n), sq_svg_y(&a, v));
        }
        sq_svg_polyline_end(fp);
        sq_svg_line(fp, 720, 70.0 + 18 * li, 745, 70.0 + 18 * li, bcol[b], 2, "6 4");
        sq_svg_text(fp, 752, 74.0 + 18 * li, 12, NULL, NULL, 0, bname[b]);
    }
    sq_svg_end(fp);
    return SQ_OK;
}

static int table_writer(FILE *fp, const void *a, const void *b, sq_error *err)
{
    return sq_svg_table_write(fp, a, b, err);
}

int sq_svg_table(const sq_dp *dp, const sq_curve *curve, const char *path, sq_error *err)
{
    return write_atomic(path, table_writer, dp, curve, err);
}
