/* The export formats: one table (name, engine, writer, --help note) and the writers. The
 * engines' limits and their writers' rows are the engine table's (planner/engines.c). */
#include "planner/export.h"

#include <stdlib.h>
#include <string.h>
#include <threads.h>

#include "libsequoia/base/json.h"
#include "planner/engine.h"
#include "planner/engine_private.h"
#include "planner/svg.h"

static int write_growmap(FILE *fp, const sq_plan *plan, const char *file, sq_error *err);
static int write_dot(FILE *fp, const sq_plan *plan, const char *file, sq_error *err);
static int write_svg(FILE *fp, const sq_plan *plan, const char *file, sq_error *err);

static const sq_export_format_info format_table[SQ_EXPORT_COUNT] = {
    [SQ_EXPORT_TRTLLM] = {"trtllm", SQ_ENGINE_TRTLLM, NULL, "choices lists"},
    [SQ_EXPORT_MEDUSA] = {"medusa", SQ_ENGINE_MEDUSA, NULL, "choices lists"},
    [SQ_EXPORT_EAGLE] = {"eagle", SQ_ENGINE_EAGLE, NULL, "choices lists"},
    [SQ_EXPORT_VLLM] = {"vllm", SQ_ENGINE_VLLM, NULL,
                        "speculative_token_tree string, vLLM before PR #42121"},
    [SQ_EXPORT_GROWMAP] = {"growmap", SQ_ENGINE_NONE, write_growmap, "Sequoia/UMbreLLa JSON"},
    [SQ_EXPORT_DOT] = {"dot", SQ_ENGINE_NONE, write_dot, "Graphviz"},
    [SQ_EXPORT_SVG] = {"svg", SQ_ENGINE_NONE, write_svg, "picture"},
    [SQ_EXPORT_SGLANG] = {"sglang", SQ_ENGINE_SGLANG, NULL, "server flags"},
    [SQ_EXPORT_TRTLLM_DYNAMIC] = {"trtllm-dynamic", SQ_ENGINE_TRTLLM_DYNAMIC, NULL,
                                  "EagleDecodingConfig fields, JSON"},
};

const sq_export_format_info *sq_export_format_info_of(sq_export_format f)
{
    return f >= 0 && f < SQ_EXPORT_COUNT ? &format_table[f] : NULL;
}

sq_export_writer sq_export_writer_of(sq_export_format f)
{
    const sq_export_format_info *fi = sq_export_format_info_of(f);
    SQ_ASSERT(fi);
    const sq_engine_info *in = sq_engine_info_of(fi->engine);
    return in ? in->write : fi->write;
}

int sq_export_format_parse(const char *name)
{
    for (int f = 0; f < SQ_EXPORT_COUNT; f++)
        if (strcmp(name, format_table[f].name) == 0)
            return f;
    return -1;
}

const char *sq_export_format_name(sq_export_format f)
{
    SQ_ASSERT(f >= 0 && f < SQ_EXPORT_COUNT);
    return format_table[f].name;
}

static char format_list[256];

static void make_format_list(void)
{
    size_t len = 0;
    for (int f = 0; f < SQ_EXPORT_COUNT; f++) {
        int w = snprintf(format_list + len, sizeof format_list - len, "%s%s", len ? ", " : "",
                         format_table[f].name);
        SQ_ASSERT(w > 0 && (size_t)w < sizeof format_list - len);
        len += (size_t)w;
    }
}

const char *sq_export_format_list(void)
{
    static once_flag once = ONCE_FLAG_INIT;
    call_once(&once, make_format_list);
    return format_list;
}

sq_engine sq_export_engine(sq_export_format f)
{
    const sq_export_format_info *fi = sq_export_format_info_of(f);
    return fi ? fi->engine : SQ_ENGINE_NONE;
}

sq_export_params sq_export_default_params(void)
{
    return (sq_export_params){.max_non_leaves = 0, .check_limits = 1};
}

int sq_export_rank_path(FILE *fp, const sq_tree *t, int v, int tuple, sq_error *err)
{
    int len = t->depth[v];
    int stack[64];
    int *path = len <= 64 ? stack : malloc((size_t)len * sizeof *path);
    if (!path)
        return sq_error_oom(err, "a rank path");
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
    return SQ_OK;
}

static int write_paths(FILE *fp, const sq_tree *t, int tuple, sq_error *err)
{
    if (tuple)
        fputc('"', fp);
    fputc('[', fp);
    for (int v = 1; v < t->n; v++) {
        if (v > 1)
            fputs(", ", fp);
        int rc = sq_export_rank_path(fp, t, v, tuple, err);
        if (rc)
            return rc;
    }
    fputc(']', fp);
    if (tuple)
        fputc('"', fp);
    fputc('\n', fp);
    return SQ_OK;
}

int sqe_write_choices(FILE *fp, const sq_plan *plan, const char *file, sq_error *err)
{
    (void)file;
    return write_paths(fp, plan->tree, 0, err);
}

int sqe_write_tuples(FILE *fp, const sq_plan *plan, const char *file, sq_error *err)
{
    (void)file;
    return write_paths(fp, plan->tree, 1, err);
}

int sqe_write_sglang(FILE *fp, const sq_plan *plan, const char *file, sq_error *err)
{
    sq_envelope env;
    int rc = sq_envelope_of(plan->tree, SQ_ENGINE_SGLANG, &env, file, err);
    if (!rc)
        fprintf(fp, "--speculative-num-steps %d --speculative-eagle-topk %d "
                "--speculative-num-draft-tokens %d\n", env.steps, env.topk, env.draft_tokens);
    return rc;
}

int sqe_write_trtllm_dynamic(FILE *fp, const sq_plan *plan, const char *file, sq_error *err)
{
    sq_envelope env;
    int rc = sq_envelope_of(plan->tree, SQ_ENGINE_TRTLLM_DYNAMIC, &env, file, err);
    if (!rc) {
        /* the envelope's nodes count the root; TensorRT-LLM's draft tokens do not */
        sq_engine_info_of(SQ_ENGINE_TRTLLM_DYNAMIC)->write_envelope(fp, env.steps, env.topk,
                                                                     env.draft_tokens + 1);
        fputc('\n', fp);
    }
    return rc;
}

/* ---- envelopes (sq_export_envelope, sq_export_envelope_ladder) ------------------------------ */

static int io_status(FILE *fp, const char *file, sq_error *err)
{
    return ferror(fp) ? sq_error_set(err, SQ_EIO, "%s: writing the export failed", file)
                      : SQ_OK;
}

int sq_export_envelope(FILE *fp, sq_engine e, int steps, int topk, int nodes, const char *file,
                       sq_error *err)
{
    int rc = sq_engine_envelope_check(e, steps, topk, nodes, file, err);
    if (rc)
        return rc;
    sq_engine_info_of(e)->write_envelope(fp, steps, topk, nodes);
    fputc('\n', fp);
    return io_status(fp, file, err);
}

int sq_export_envelope_ladder(FILE *fp, sq_engine e, const int *batch, const int *steps,
                              const int *topk, const int *nodes, const int *speculate, int n,
                              const char *file, sq_error *err)
{
    const sq_engine_info *in = sq_engine_info_of(e);
    if (!in || !in->envelope)
        return sq_error_set(err, SQ_EUSAGE, "%s: %s: not an envelope engine (envelopes: sglang, "
                            "trtllm-dynamic)", file, sq_engine_name(e));
    if (n < 1)
        return sq_error_set(err, SQ_EUSAGE, "%s: %s: an envelope ladder needs at least one batch "
                            "size", file, in->name);
    /* every row first: nothing is written when one is refused */
    for (int i = 0; i < n; i++) {
        if (batch[i] < 1 || (i > 0 && batch[i] <= batch[i - 1]))
            return sq_error_set(err, SQ_EUSAGE, "%s: %s: row %d: batch size %d %s: a ladder's "
                                "batch sizes must be >= 1 and strictly increasing", file,
                                in->name, i, batch[i],
                                batch[i] < 1 ? "is below 1" : "does not exceed the row before");
        if (!speculate[i])
            continue;
        char where[256];
        snprintf(where, sizeof where, "%s, batch size %d", file, batch[i]);
        int rc = sq_engine_envelope_check(e, steps[i], topk[i], nodes[i], where, err);
        if (rc)
            return rc;
    }
    fprintf(fp, "{\"engine\": \"%s\",\n \"per_batch\": [", in->name);
    for (int i = 0; i < n; i++) {
        fprintf(fp, "%s\n  {\"batch\": %d, \"speculate\": %s", i ? "," : "", batch[i],
                speculate[i] ? "true" : "false");
        if (speculate[i]) {
            fputs(", \"config\": ", fp);
            in->write_envelope(fp, steps[i], topk[i], nodes[i]);
        }
        fputc('}', fp);
    }
    fputs("\n ],\n \"per_batch_size\": ", fp);
    SQ_ASSERT(!strpbrk(in->per_batch_note, "\"\\\n"));   /* written as a JSON string as is */
    fprintf(fp, "\"%s\"}\n", in->per_batch_note);
    return io_status(fp, file, err);
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
static int write_growmap(FILE *fp, const sq_plan *plan, const char *file, sq_error *err)
{
    (void)file;
    const sq_tree *t = plan->tree;
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

static int write_dot(FILE *fp, const sq_plan *plan, const char *file, sq_error *err)
{
    (void)file;
    const sq_tree *t = plan->tree;
    double *f = malloc((size_t)t->n * sizeof *f);
    if (!f)
        return sq_error_oom(err, "the node scores of the DOT picture");
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
    return SQ_OK;
}

static int write_svg(FILE *fp, const sq_plan *plan, const char *file, sq_error *err)
{
    (void)file;
    return sq_svg_plan_write(fp, plan, err);
}

int sq_export_write(FILE *fp, const sq_plan *plan, sq_export_format f,
                    const sq_export_params *params, const char *file, sq_error *err)
{
    sq_export_params def = sq_export_default_params();
    if (!params)
        params = &def;
    int rc;
    if (params->check_limits &&
        (rc = sq_engine_check(plan->tree, sq_export_engine(f), params->max_non_leaves, file, err)))
        return rc;
    return sq_export_writer_of(f)(fp, plan, file, err);
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
