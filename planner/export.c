#include "planner/export.h"

#include <stdlib.h>
#include <string.h>

#include "libsequoia/base/json.h"
#include "planner/svg.h"

static const char *const format_names[SQ_EXPORT_COUNT] = {
    [SQ_EXPORT_TRTLLM] = "trtllm", [SQ_EXPORT_MEDUSA] = "medusa", [SQ_EXPORT_EAGLE] = "eagle",
    [SQ_EXPORT_VLLM] = "vllm",     [SQ_EXPORT_GROWMAP] = "growmap", [SQ_EXPORT_DOT] = "dot",
    [SQ_EXPORT_SVG] = "svg",
};

int sq_export_format_parse(const char *name)
{
    for (int f = 0; f < SQ_EXPORT_COUNT; f++)
        if (strcmp(name, format_names[f]) == 0)
            return f;
    return -1;
}

const char *sq_export_format_name(sq_export_format f)
{
    SQ_ASSERT(f >= 0 && f < SQ_EXPORT_COUNT);
    return format_names[f];
}

const char *sq_export_format_list(void)
{
    return "trtllm, medusa, eagle, vllm, growmap, dot, svg";
}

int sq_engine_parse(const char *name)
{
    if (strcmp(name, "vllm") == 0)
        return SQ_ENGINE_VLLM;
    if (strcmp(name, "trtllm") == 0)
        return SQ_ENGINE_TRTLLM;
    if (strcmp(name, "medusa") == 0 || strcmp(name, "eagle") == 0)
        return SQ_ENGINE_MEDUSA;
    return -1;
}

const char *sq_engine_name(sq_engine e)
{
    switch (e) {
    case SQ_ENGINE_VLLM: return "vllm";
    case SQ_ENGINE_TRTLLM: return "trtllm";
    case SQ_ENGINE_MEDUSA: return "medusa";
    default: return "none";
    }
}

sq_engine sq_export_engine(sq_export_format f)
{
    switch (f) {
    case SQ_EXPORT_TRTLLM: return SQ_ENGINE_TRTLLM;
    case SQ_EXPORT_MEDUSA:
    case SQ_EXPORT_EAGLE: return SQ_ENGINE_MEDUSA;
    case SQ_EXPORT_VLLM: return SQ_ENGINE_VLLM;
    default: return SQ_ENGINE_NONE;
    }
}

sq_engine_limits sq_engine_limits_of(sq_engine e, int max_non_leaves)
{
    sq_engine_limits l = {.max_path = 0, .max_rank0 = -1, .max_non_leaves = 0, .level_uniform = 0};
    switch (e) {
    case SQ_ENGINE_VLLM:
        l.level_uniform = 1;
        break;
    case SQ_ENGINE_TRTLLM:
        l.max_path = SQ_TRTLLM_MAX_PATH;
        l.max_rank0 = SQ_TRTLLM_MAX_RANK0;
        l.max_non_leaves = max_non_leaves > 0 ? max_non_leaves : 0;
        break;
    case SQ_ENGINE_MEDUSA:
        l.max_rank0 = SQ_MEDUSA_MAX_RANK0;
        break;
    default:
        break;
    }
    return l;
}

sq_export_params sq_export_default_params(void)
{
    return (sq_export_params){.max_non_leaves = 0, .check_limits = 1};
}

void sq_export_rank_path(FILE *fp, const sq_tree *t, int v, int tuple)
{
    int len = t->depth[v];
    int stack[64];
    int *path = len <= 64 ? stack : malloc((size_t)len * sizeof *path);
    SQ_ASSERT(path);
    for (int u = v, i = len - 1; u > 0; u = t->parent[u], i--)
        path[i] = t->rank[u] - 1;
    fputc(tuple ? '(' : '[', fp);
    for (int i = 0; i < len; i++)
        fprintf(fp, i ? ", %d" : "%d", path[i]);
    if (tuple && len == 1)
        fputc(',', fp);
    fputc(tuple ? ')' : ']', fp);
    if (path != stack)
        free(path);
}

/* The rank path of v as a string, for messages (truncated with "..." when long). */
static const char *path_str(const sq_tree *t, int v, char *buf, size_t cap)
{
    char *s = NULL;
    size_t len = 0;
    FILE *fp = open_memstream(&s, &len);
    if (!fp)
        return "?";
    sq_export_rank_path(fp, t, v, 0);
    fclose(fp);
    if (len + 1 > cap && cap > 4)
        snprintf(buf, cap, "%.*s...]", (int)(cap - 6), s);
    else
        snprintf(buf, cap, "%s", s);
    free(s);
    return buf;
}

int sq_engine_check(const sq_tree *t, sq_engine e, int max_non_leaves, const char *file,
                    sq_error *err)
{
    sq_engine_limits lim = sq_engine_limits_of(e, max_non_leaves);
    char p1[160], p2[160];
    for (int v = 1; v < t->n; v++) {
        if (lim.max_path && t->depth[v] > lim.max_path)
            return sq_error_set(err, SQ_EDATA,
                                "%s: %s: node %s is %d tokens deep, but TensorRT-LLM takes at most "
                                "%d speculated tokens per path (tree depth %d with the root); plan "
                                "with --depth %d or --engine trtllm",
                                file, sq_engine_name(e), path_str(t, v, p1, sizeof p1), t->depth[v],
                                lim.max_path, lim.max_path + 1, lim.max_path + 1);
        if (lim.max_rank0 >= 0 && t->rank[v] - 1 > lim.max_rank0)
            return sq_error_set(err, SQ_EDATA,
                                "%s: %s: node %s has 0-based rank %d, but %s takes ranks 0..%d "
                                "(%s); plan with --width %d or --engine %s",
                                file, sq_engine_name(e), path_str(t, v, p1, sizeof p1),
                                t->rank[v] - 1,
                                e == SQ_ENGINE_TRTLLM ? "TensorRT-LLM" : "Medusa/EAGLE-1",
                                lim.max_rank0,
                                e == SQ_ENGINE_TRTLLM ? "4-bit rank prefixes"
                                                      : "top-10 candidates per step",
                                lim.max_rank0 + 1, sq_engine_name(e));
    }
    if (!lim.max_non_leaves && !lim.level_uniform)
        return SQ_OK;

    int levels = sq_tree_depth(t);
    int *kids = calloc((size_t)t->n, sizeof *kids);
    if (!kids)
        return sq_error_oom(err, "engine check");
    for (int v = 1; v < t->n; v++)
        kids[t->parent[v]]++;
    int rc = SQ_OK;
    if (lim.max_non_leaves) {
        int *nl = calloc((size_t)levels, sizeof *nl);
        if (!nl) {
            free(kids);
            return sq_error_oom(err, "engine check");
        }
        for (int v = 0; v < t->n; v++)
            if (kids[v])
                nl[t->depth[v]]++;
        for (int l = 0; l < levels && !rc; l++)
            if (nl[l] > lim.max_non_leaves)
                rc = sq_error_set(err, SQ_EDATA,
                                  "%s: %s: level %d has %d nodes with children, but the engine "
                                  "allows %d (max_non_leaves_per_layer); plan with --engine trtllm "
                                  "--max-non-leaves %d",
                                  file, sq_engine_name(e), l, nl[l], lim.max_non_leaves,
                                  lim.max_non_leaves);
        free(nl);
    }
    if (!rc && lim.level_uniform) {
        /* Nodes of a level are contiguous (breadth-first order). */
        int first = 0;
        for (int v = 1; v < t->n && !rc; v++) {
            if (t->depth[v] != t->depth[first]) {
                first = v;
                continue;
            }
            if (kids[v] != kids[first])
                rc = sq_error_set(err, SQ_EDATA,
                                  "%s: %s: level %d: node %s has %d children but node %s has %d; "
                                  "vLLM's EAGLE proposer drafts the same number of children for "
                                  "every node of a level (a k_1 x k_2 x ... tree): plan with "
                                  "--engine vllm",
                                  file, sq_engine_name(e), t->depth[v],
                                  first == 0 ? "root" : path_str(t, first, p1, sizeof p1),
                                  kids[first], path_str(t, v, p2, sizeof p2), kids[v]);
        }
    }
    free(kids);
    return rc;
}

static void write_choices(FILE *fp, const sq_tree *t, int tuple)
{
    if (tuple)
        fputc('"', fp);
    fputc('[', fp);
    for (int v = 1; v < t->n; v++) {
        if (v > 1)
            fputs(", ", fp);
        sq_export_rank_path(fp, t, v, tuple);
    }
    fputc(']', fp);
    if (tuple)
        fputc('"', fp);
    fputc('\n', fp);
}

static void int_row(FILE *fp, const int *v, int n)
{
    fputc('[', fp);
    for (int i = 0; i < n; i++)
        fprintf(fp, i ? ", %d" : "%d", v[i]);
    fputc(']', fp);
}

/* Written directly (the mask has n^2 entries), in the layout sq_json_print gives: two-space
 * indents, arrays of numbers on one line. */
static int write_growmap(FILE *fp, const sq_tree *t, sq_error *err)
{
    int n = t->n, levels = sq_tree_depth(t);
    int *kids = calloc((size_t)n, sizeof *kids);
    int *first = malloc((size_t)n * sizeof *first);   /* first child of each node, or -1 */
    int *start = malloc(((size_t)levels + 1) * sizeof *start);
    char *mrow = malloc((size_t)n * 3 + 4);
    if (!kids || !first || !start || !mrow) {
        free(kids);
        free(first);
        free(start);
        free(mrow);
        return sq_error_oom(err, "growmap");
    }
    for (int v = 0; v < n; v++)
        first[v] = -1;
    for (int v = 1; v < n; v++) {
        int p = t->parent[v];
        if (first[p] < 0)
            first[p] = v;
        kids[p]++;
    }
    /* level l holds the nodes [start[l], start[l+1]) (breadth-first order) */
    for (int l = 0, v = 0; l <= levels; l++) {
        start[l] = v;
        while (v < n && t->depth[v] == l)
            v++;
    }
    /* roots[l]: the ids of level l (every level, the leaves' too, as tree_search.py writes
     * them); branches[l][j]: the children of roots[l][j]. */
    fputs("{\n  \"roots\": [\n", fp);
    for (int l = 0; l < levels; l++) {
        fputs("    [", fp);
        for (int v = start[l]; v < start[l + 1]; v++)
            fprintf(fp, v > start[l] ? ", %d" : "%d", v);
        fputs(l + 1 < levels ? "],\n" : "]\n", fp);
    }
    fputs("  ],\n  \"branches\": [\n", fp);
    for (int l = 0; l < levels; l++) {
        fputs("    ", fp);
        int_row(fp, kids + start[l], start[l + 1] - start[l]);
        fputs(l + 1 < levels ? ",\n" : "\n", fp);
    }
    fputs("  ],\n  \"Successors\": [\n", fp);
    for (int v = 0; v < n; v++) {
        fputs("    [", fp);
        for (int c = 0; c < kids[v]; c++)
            fprintf(fp, c ? ", %d" : "%d", first[v] + c);
        fputs(v + 1 < n ? "],\n" : "]\n", fp);
    }
    /* mask[i][j] = 1 when j is i or an ancestor of i */
    fputs("  ],\n  \"mask\": [\n", fp);
    for (int i = 0; i < n; i++) {
        char *m = mrow;
        *m++ = '[';
        for (int j = 0; j < n; j++) {
            if (j) {
                *m++ = ',';
                *m++ = ' ';
            }
            *m++ = '0';
        }
        *m++ = ']';
        *m = 0;
        for (int u = i; u >= 0; u = t->parent[u])
            mrow[1 + 3 * u] = '1';
        fprintf(fp, "    %s%s\n", mrow, i + 1 < n ? "," : "");
    }
    fputs("  ],\n  \"depth\": ", fp);
    int_row(fp, t->depth, n);
    fprintf(fp, ",\n  \"size\": %d\n}\n", n);
    free(kids);
    free(first);
    free(start);
    free(mrow);
    return SQ_OK;
}

static void write_dot(FILE *fp, const sq_plan *plan)
{
    const sq_tree *t = plan->tree;
    double *f = malloc((size_t)t->n * sizeof *f);
    SQ_ASSERT(f);
    sq_tree_expected_tokens(t, &plan->acceptance, f);
    fprintf(fp, "// Sequoia plan: %d nodes, depth %d, %.6g expected tokens/step\n", t->n,
            sq_tree_depth(t), plan->expected_tokens);
    fprintf(fp, "digraph sequoia_plan {\n");
    fprintf(fp, "  graph [rankdir=TB, labelloc=t, label=\"Sequoia plan: %d nodes, depth %d, "
                "F = %.4f\"];\n", t->n, sq_tree_depth(t), plan->expected_tokens);
    fprintf(fp, "  node [shape=circle, fontsize=9, margin=0.02];\n");
    fprintf(fp, "  n0 [label=\"root\\n1\"];\n");
    for (int v = 1; v < t->n; v++)
        fprintf(fp, "  n%d [label=\"%d\\n%.3g\"];\n", v, t->rank[v], f[v]);
    for (int v = 1; v < t->n; v++)
        fprintf(fp, "  n%d -> n%d;\n", t->parent[v], v);
    fprintf(fp, "}\n");
    free(f);
}

int sq_export_write(FILE *fp, const sq_plan *plan, sq_export_format f,
                    const sq_export_params *params, const char *file, sq_error *err)
{
    sq_export_params def = sq_export_default_params();
    if (!params)
        params = &def;
    const sq_tree *t = plan->tree;
    sq_engine e = sq_export_engine(f);
    int rc;
    if (params->check_limits && e != SQ_ENGINE_NONE &&
        (rc = sq_engine_check(t, e, params->max_non_leaves, file, err)))
        return rc;
    switch (f) {
    case SQ_EXPORT_TRTLLM:
    case SQ_EXPORT_MEDUSA:
    case SQ_EXPORT_EAGLE:
        write_choices(fp, t, 0);
        return SQ_OK;
    case SQ_EXPORT_VLLM:
        write_choices(fp, t, 1);
        return SQ_OK;
    case SQ_EXPORT_GROWMAP:
        return write_growmap(fp, t, err);
    case SQ_EXPORT_DOT:
        write_dot(fp, plan);
        return SQ_OK;
    case SQ_EXPORT_SVG:
        return sq_svg_plan_write(fp, plan, err);
    default:
        SQ_ASSERT(!"unknown export format");
        return SQ_ESOFTWARE;
    }
}

int sq_export_to_string(const sq_plan *plan, sq_export_format f, const sq_export_params *params,
                        const char *file, char **out, size_t *len, sq_error *err)
{
    *out = NULL;
    *len = 0;
    char *buf = NULL;
    size_t n = 0;
    FILE *fp = open_memstream(&buf, &n);
    if (!fp)
        return sq_error_oom(err, "export");
    int rc = sq_export_write(fp, plan, f, params, file, err);
    if (fclose(fp) != 0 && !rc)
        rc = sq_error_oom(err, "export");
    if (rc) {
        free(buf);
        return rc;
    }
    *out = buf;
    *len = n;
    return SQ_OK;
}
