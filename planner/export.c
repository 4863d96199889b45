#include "planner/export.h"

#include <stdlib.h>
#include <string.h>

#include "libsequoia/base/json.h"
#include "planner/svg.h"

static const char *const format_names[SQ_EXPORT_COUNT] = {
    [SQ_EXPORT_TRTLLM] = "trtllm", [SQ_EXPORT_MEDUSA] = "medusa", [SQ_EXPORT_EAGLE] = "eagle",
    [SQ_EXPORT_VLLM] = "vllm",     [SQ_EXPORT_GROWMAP] = "growmap", [SQ_EXPORT_DOT] = "dot",
    [SQ_EXPORT_SVG] = "svg",       [SQ_EXPORT_SGLANG] = "sglang",
    [SQ_EXPORT_TRTLLM_DYNAMIC] = "trtllm-dynamic",
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
    return "trtllm, medusa, eagle, vllm, growmap, dot, svg, sglang, trtllm-dynamic";
}

static const char *const engine_names[SQ_ENGINE_COUNT] = {
    [SQ_ENGINE_NONE] = "none",     [SQ_ENGINE_VLLM] = "vllm",   [SQ_ENGINE_TRTLLM] = "trtllm",
    [SQ_ENGINE_MEDUSA] = "medusa", [SQ_ENGINE_EAGLE] = "eagle", [SQ_ENGINE_SGLANG] = "sglang",
    [SQ_ENGINE_TRTLLM_DYNAMIC] = "trtllm-dynamic",
};

int sq_engine_parse(const char *name)
{
    for (int e = SQ_ENGINE_VLLM; e < SQ_ENGINE_COUNT; e++)
        if (strcmp(name, engine_names[e]) == 0)
            return e;
    return -1;
}

const char *sq_engine_name(sq_engine e)
{
    return e > SQ_ENGINE_NONE && e < SQ_ENGINE_COUNT ? engine_names[e] : "none";
}

const char *sq_engine_list(void)
{
    return "vllm, trtllm, medusa, eagle, sglang, trtllm-dynamic";
}

int sq_engine_is_envelope(sq_engine e)
{
    return e == SQ_ENGINE_SGLANG || e == SQ_ENGINE_TRTLLM_DYNAMIC;
}

sq_engine sq_export_engine(sq_export_format f)
{
    switch (f) {
    case SQ_EXPORT_TRTLLM: return SQ_ENGINE_TRTLLM;
    case SQ_EXPORT_MEDUSA: return SQ_ENGINE_MEDUSA;
    case SQ_EXPORT_EAGLE: return SQ_ENGINE_EAGLE;
    case SQ_EXPORT_VLLM: return SQ_ENGINE_VLLM;
    case SQ_EXPORT_SGLANG: return SQ_ENGINE_SGLANG;
    case SQ_EXPORT_TRTLLM_DYNAMIC: return SQ_ENGINE_TRTLLM_DYNAMIC;
    default: return SQ_ENGINE_NONE;
    }
}

sq_engine_limits sq_engine_limits_of(sq_engine e, int max_non_leaves)
{
    sq_engine_limits l = {.max_rank0 = -1};
    switch (e) {
    case SQ_ENGINE_VLLM:
        l.level_uniform = 1;
        break;
    case SQ_ENGINE_TRTLLM:
        l.max_path = SQ_TRTLLM_MAX_PATH;
        l.max_rank0 = SQ_TRTLLM_MAX_RANK0;
        l.max_non_leaves = max_non_leaves > 0 ? max_non_leaves : SQ_TRTLLM_MAX_NON_LEAVES;
        l.no_32k_plus_1 = 1;
        break;
    case SQ_ENGINE_MEDUSA:
        l.max_rank0 = SQ_MEDUSA_MAX_RANK0;
        break;
    case SQ_ENGINE_EAGLE:
        l.max_rank0 = SQ_EAGLE_MAX_RANK0;
        l.min_path = 2;
        l.deep_first = 1;
        break;
    case SQ_ENGINE_SGLANG:
    case SQ_ENGINE_TRTLLM_DYNAMIC:
        l.min_path = 1;
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

/* The rank path of v as a string, for messages (truncated with "..." when long). */
static const char *path_str(const sq_tree *t, int v, char *buf, size_t cap)
{
    char *s = NULL;
    size_t len = 0;
    FILE *fp = open_memstream(&s, &len);
    if (!fp)
        return "?";
    int rc = sq_export_rank_path(fp, t, v, 0, NULL);
    if (fclose(fp) != 0 || rc) {
        free(s);
        return "?";
    }
    if (len + 1 > cap && cap > 4)
        snprintf(buf, cap, "%.*s...]", (int)(cap - 6), s);
    else
        snprintf(buf, cap, "%s", s);
    free(s);
    return buf;
}

/* Children of every node (calloc'd). */
static int *count_kids(const sq_tree *t)
{
    int *kids = calloc((size_t)t->n, sizeof *kids);
    if (kids)
        for (int v = 1; v < t->n; v++)
            kids[t->parent[v]]++;
    return kids;
}

/* EAGLE-1 (SafeAILab/EAGLE branch v1, eagle/model/utils_c.py generate_tree_buffers and
 * cnets.py topK_genrate): the draft runs level by level over the non-leaves only, and the
 * row of the previous level's output that a non-leaf is drafted from is the number of
 * parent changes before it among its own level's non-leaves. That row is its parent only if
 * the parents of non-leaves are the first non-leaves of their level. Nodes are in rank-path
 * order, level by level. */
/* The first child of v, or -1, for v that only grows from call to call: nodes are breadth-first
 * with siblings contiguous (libsequoia/format/tree.h), so parents are non-decreasing in node
 * order and the cursor only moves forward (O(n) over a walk, nothing allocated). */
typedef struct child_cursor {
    const sq_tree *t;
    int at;
} child_cursor;

static int first_child(child_cursor *c, int v)
{
    while (c->at < c->t->n && c->t->parent[c->at] < v)
        c->at++;
    return c->at < c->t->n && c->t->parent[c->at] == v ? c->at : -1;
}

int sq_eagle_deep_first(const sq_tree *t, int *bad_early, int *bad_late)
{
    int ok = 1;
    child_cursor kids = {t, 1}, grandkids = {t, 1};
    int shallow_seen = -1;   /* a non-leaf without non-leaf children on the current level */
    for (int v = 1; v < t->n && ok; v++) {
        if (t->depth[v] != t->depth[v - 1])
            shallow_seen = -1;
        int c = first_child(&kids, v);
        if (c < 0)
            continue;
        int deep = 0;   /* v has a non-leaf child */
        for (; c < t->n && t->parent[c] == v && !deep; c++)
            deep = first_child(&grandkids, c) >= 0;
        if (!deep) {
            if (shallow_seen < 0)
                shallow_seen = v;
        } else if (shallow_seen >= 0) {
            ok = 0;
            if (bad_early)
                *bad_early = shallow_seen;
            if (bad_late)
                *bad_late = v;
        }
    }
    return ok;
}

int sq_engine_check(const sq_tree *t, sq_engine e, int max_non_leaves, const char *file,
                    sq_error *err)
{
    sq_engine_limits lim = sq_engine_limits_of(e, max_non_leaves);
    const char *en = sq_engine_name(e);
    char p1[160], p2[160];
    int levels = sq_tree_depth(t);
    if (lim.min_path && levels - 1 < lim.min_path) {
        if (e == SQ_ENGINE_EAGLE)
            return sq_error_set(err, SQ_EDATA,
                                "%s: %s: the tree has %d level%s below the root, but EAGLE-1 needs "
                                "a path of at least 2 tokens (with only depth-1 paths "
                                "generate_tree_buffers in eagle/model/utils_c.py has no non-leaf "
                                "below the root and fails with IndexError); plan with a depth of 3 "
                                "or more and a budget of 3 or more", file, en, levels - 1,
                                levels - 1 == 1 ? "" : "s");
        return sq_error_set(err, SQ_EDATA, "%s: %s: a root-only tree has no draft step; plan with "
                            "a budget of 2 or more", file, en);
    }
    if (lim.no_32k_plus_1 && t->n > 1 && (t->n - 1) % 32 == 0)
        return sq_error_set(err, SQ_EDATA,
                            "%s: %s: %d draft tokens (%d nodes) is a multiple of 32: TensorRT-LLM's "
                            "C++ runtime packs the mask of max_draft_len + 1 tokens into "
                            "divUp(max_draft_len, 32) words, so at max_draft_len %d the last token "
                            "loses its own bit, and the Python runtime's _medusa_setup in versions "
                            "without the empty-chunk guard raises ValueError; plan with a budget "
                            "of %d, or for engine trtllm", file, en, t->n - 1, t->n, t->n - 1, t->n - 1);
    for (int v = 1; v < t->n; v++) {
        if (lim.max_path && t->depth[v] > lim.max_path)
            return sq_error_set(err, SQ_EDATA,
                                "%s: %s: node %s is %d tokens deep, but TensorRT-LLM takes at most "
                                "%d speculated tokens per path (tree depth %d with the root): "
                                "computePrefix in speculativeChoicesUtils.cpp shifts a 32-bit int by "
                                "4 x (length - 1), undefined from 9 tokens on, and on x86 the "
                                "prefixes collide and nodes get the wrong parent with no error; "
                                "plan with a depth of %d, or for engine trtllm",
                                file, en, path_str(t, v, p1, sizeof p1), t->depth[v],
                                lim.max_path, lim.max_path + 1, lim.max_path + 1);
        if (lim.max_rank0 >= 0 && t->rank[v] - 1 > lim.max_rank0)
            return sq_error_set(err, SQ_EDATA,
                                "%s: %s: node %s has 0-based rank %d, but %s takes ranks 0..%d "
                                "(%s); plan with a width of %d, or for engine %s",
                                file, en, path_str(t, v, p1, sizeof p1), t->rank[v] - 1,
                                e == SQ_ENGINE_TRTLLM ? "TensorRT-LLM"
                                : e == SQ_ENGINE_EAGLE ? "EAGLE-1" : "Medusa",
                                lim.max_rank0,
                                e == SQ_ENGINE_TRTLLM ? "4-bit rank prefixes"
                                                      : "top-10 candidates per step",
                                lim.max_rank0 + 1, en);
    }
    if (lim.deep_first) {
        int early = 0, late = 0;
        if (!sq_eagle_deep_first(t, &early, &late))
            return sq_error_set(err, SQ_EDATA,
                                "%s: %s: level %d: node %s has children with children but comes after "
                                "node %s, whose children are all leaves; EAGLE-1's draft "
                                "(eagle/model/utils_c.py generate_tree_buffers, cnets.py "
                                "topK_genrate) finds a node's parent by counting parent changes "
                                "among its level's non-leaves, so %s's children would be drafted "
                                "from another node's hidden state; plan for engine eagle",
                                file, en, t->depth[late], path_str(t, late, p1, sizeof p1),
                                path_str(t, early, p2, sizeof p2), p1);
    }
    if (!lim.max_non_leaves && !lim.level_uniform)
        return SQ_OK;

    int *kids = count_kids(t);
    if (!kids)
        return sq_error_oom(err, "engine check");
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
                                  "allows %d (max_non_leaves_per_layer%s); plan for engine trtllm "
                                  "with max_non_leaves %d, or build the engine with a larger "
                                  "max_non_leaves_per_layer and plan with that value",
                                  file, en, l, nl[l], lim.max_non_leaves,
                                  max_non_leaves > 0 ? "" : ", convert_checkpoint.py's default",
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
                                  "every node of a level (a k_1 x k_2 x ... tree): plan for "
                                  "engine vllm",
                                  file, en, t->depth[v],
                                  first == 0 ? "root" : path_str(t, first, p1, sizeof p1),
                                  kids[first], path_str(t, v, p2, sizeof p2), kids[v]);
        }
    }
    free(kids);
    return rc;
}

int sq_envelope_of(const sq_tree *t, sq_engine e, sq_envelope *out, const char *file,
                   sq_error *err)
{
    memset(out, 0, sizeof *out);
    if (t->n < 2)
        return sq_error_set(err, SQ_EDATA, "%s: %s: a root-only tree has no draft step; plan "
                            "with a budget of 2 or more", file, sq_engine_name(e));
    int levels = sq_tree_depth(t);
    int *kids = count_kids(t), *nl = calloc((size_t)levels, sizeof *nl);
    if (!kids || !nl) {
        free(kids);
        free(nl);
        return sq_error_oom(err, "envelope");
    }
    int k = 1;
    for (int v = 0; v < t->n; v++) {
        if (kids[v] > k)
            k = kids[v];
        if (kids[v] && ++nl[t->depth[v]] > k)
            k = nl[t->depth[v]];
    }
    free(kids);
    free(nl);
    out->steps = levels - 1;
    out->topk = k;
    out->draft_tokens = e == SQ_ENGINE_SGLANG ? t->n : t->n - 1;
    return SQ_OK;
}

void sq_engine_requirements(const sq_tree *t, sq_engine e, int max_non_leaves, char *buf,
                            size_t cap)
{
    int L = sq_tree_depth(t) - 1, n = t->n;
    sq_envelope env;
    switch (e) {
    case SQ_ENGINE_VLLM:
        snprintf(buf, cap, "pass num_speculative_tokens %d with speculative_token_tree", n - 1);
        break;
    case SQ_ENGINE_TRTLLM:
        snprintf(buf, cap, "engine build: --max_draft_len >= %d, EAGLE --num_eagle_layers %d "
                 "(every path must reach it) and --max_non_leaves_per_layer %d, Medusa >= %d heads; "
                 "LLM API: max_draft_len=%d, max_total_draft_tokens=%d",
                 n - 1, L, max_non_leaves > 0 ? max_non_leaves : SQ_TRTLLM_MAX_NON_LEAVES, L, L,
                 n - 1);
        break;
    case SQ_ENGINE_MEDUSA:
        snprintf(buf, cap, "pass medusa_choices; the checkpoint needs >= %d Medusa heads", L);
        break;
    case SQ_ENGINE_EAGLE:
        snprintf(buf, cap, "replace the tree in eagle/model/choices.py (cnets.init_tree drafts "
                 "with it; tree_choices= alone is not enough)");
        break;
    case SQ_ENGINE_SGLANG:
        if (sq_envelope_of(t, e, &env, "plan", NULL) == SQ_OK)
            snprintf(buf, cap, "--speculative-num-steps %d --speculative-eagle-topk %d "
                     "--speculative-num-draft-tokens %d", env.steps, env.topk, env.draft_tokens);
        else
            snprintf(buf, cap, "-");
        break;
    case SQ_ENGINE_TRTLLM_DYNAMIC:
        if (sq_envelope_of(t, e, &env, "plan", NULL) == SQ_OK)
            snprintf(buf, cap, "use_dynamic_tree=True, dynamic_tree_max_topK=%d, max_draft_len=%d, "
                     "max_total_draft_tokens=%d", env.topk, env.steps, env.draft_tokens);
        else
            snprintf(buf, cap, "-");
        break;
    default:
        snprintf(buf, cap, "-");
    }
}

/* The versions whose source was read (docs/engines.md has the table). */
static const char *engine_versions(sq_engine e)
{
    switch (e) {
    case SQ_ENGINE_VLLM: return "vLLM 0.11, speculative_token_tree";
    case SQ_ENGINE_TRTLLM: return "TensorRT-LLM <= 1.3, eagle_choices/medusa_choices";
    case SQ_ENGINE_MEDUSA: return "FasterDecoding/Medusa";
    case SQ_ENGINE_EAGLE: return "EAGLE-1, SafeAILab/EAGLE v1";
    case SQ_ENGINE_SGLANG: return "SGLang EAGLE, no static tree";
    case SQ_ENGINE_TRTLLM_DYNAMIC: return "TensorRT-LLM use_dynamic_tree";
    default: return "";
    }
}

void sq_engine_print_status(FILE *fp, const sq_tree *t, int max_non_leaves)
{
    for (int e = SQ_ENGINE_VLLM; e < SQ_ENGINE_COUNT; e++) {
        sq_error err = {0};
        int rc = sq_engine_check(t, (sq_engine)e, max_non_leaves, "plan", &err);
        fprintf(fp, "%-15s %s (%s): ", e == SQ_ENGINE_VLLM ? "engines:" : "",
                sq_engine_name((sq_engine)e), engine_versions((sq_engine)e));
        if (rc) {
            /* the message is "plan: ENGINE: problem; hint" */
            const char *why = err.msg;
            for (int skip = 0; skip < 2 && strstr(why, ": "); skip++)
                why = strstr(why, ": ") + 2;
            fprintf(fp, "refused: %s\n", why);
            continue;
        }
        char req[400];
        sq_engine_requirements(t, (sq_engine)e, max_non_leaves, req, sizeof req);
        if (sq_engine_is_envelope((sq_engine)e))
            fprintf(fp, "envelope %s (can build this tree; it picks its own each step)\n", req);
        else
            fprintf(fp, "ok; %s\n", req);
    }
}

static int write_choices(FILE *fp, const sq_tree *t, int tuple, sq_error *err)
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

static int write_dot(FILE *fp, const sq_plan *plan, sq_error *err)
{
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
        return write_choices(fp, t, 0, err);
    case SQ_EXPORT_VLLM:
        return write_choices(fp, t, 1, err);
    case SQ_EXPORT_GROWMAP:
        return write_growmap(fp, t, err);
    case SQ_EXPORT_DOT:
        return write_dot(fp, plan, err);
    case SQ_EXPORT_SVG:
        return sq_svg_plan_write(fp, plan, err);
    case SQ_EXPORT_SGLANG:
    case SQ_EXPORT_TRTLLM_DYNAMIC: {
        sq_envelope env;
        if ((rc = sq_envelope_of(t, e, &env, file, err)))
            return rc;
        if (f == SQ_EXPORT_SGLANG)
            fprintf(fp, "--speculative-num-steps %d --speculative-eagle-topk %d "
                    "--speculative-num-draft-tokens %d\n", env.steps, env.topk, env.draft_tokens);
        else
            fprintf(fp, "{\"use_dynamic_tree\": true, \"dynamic_tree_max_topK\": %d, "
                    "\"max_draft_len\": %d, \"max_total_draft_tokens\": %d}\n", env.topk,
                    env.steps, env.draft_tokens);
        return SQ_OK;
    }
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
