#include "planner/import.h"

#include <ctype.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "libsequoia/base/io.h"
#include "libsequoia/base/json.h"
#include "libsequoia/base/utf8.h"

#define MAX_RANK0 (1 << 20)

int sq_import_format_parse(const char *name)
{
    if (strcmp(name, "choices") == 0)
        return SQ_IMPORT_CHOICES;
    if (strcmp(name, "growmap") == 0)
        return SQ_IMPORT_GROWMAP;
    return -1;
}

/* ---- choices ------------------------------------------------------------------------- */

typedef struct paths {
    int  n, cap;          /* paths                                   */
    int *off;             /* (n) start of path i in `val`            */
    int *len;             /* (n) its length                          */
    int  nval, capval;
    int *val;             /* (nval) 0-based ranks, paths back to back */
} paths;

typedef struct parser {
    const char *text, *at, *file;
    sq_error   *err;
} parser;

/* the limits the messages below quote */
_Static_assert(MAX_RANK0 == 1048576, "\"rank too large (at most 1048576)\"");
_Static_assert(SQ_IMPORT_MAX_NODES - 1 == 16383, "\"too many paths for a plan (at most 16383)\"");

static int perr(parser *ps, const char *problem)
{
    int line = 1, col = 1;
    for (const char *c = ps->text; c < ps->at; c++) {
        if (*c == '\n') {
            line++;
            col = 1;
        } else {
            col++;
        }
    }
    if (!*ps->at)
        return sq_error_set(ps->err, SQ_EDATA, "%s: line %d, column %d: %s (at the end of the file)",
                            ps->file, line, col, problem);
    return sq_error_set(ps->err, SQ_EDATA, "%s: line %d, column %d: %s (found '%c')", ps->file, line,
                        col, problem, isprint((unsigned char)*ps->at) ? *ps->at : '?');
}

static void skip_ws(parser *ps)
{
    for (;;) {
        while (*ps->at && isspace((unsigned char)*ps->at))
            ps->at++;
        if (*ps->at == '#') {   /* Python comment */
            while (*ps->at && *ps->at != '\n')
                ps->at++;
        } else if (*ps->at == '\\' && ps->at[1] == '\n') {
            ps->at += 2;
        } else {
            return;
        }
    }
}

static int grow(int **a, int *cap, int need)
{
    if (need <= *cap)
        return 0;
    int c = *cap ? *cap : 64;
    while (c < need)
        c *= 2;
    int *b = realloc(*a, (size_t)c * sizeof *b);
    if (!b)
        return -1;
    *a = b;
    *cap = c;
    return 0;
}

static int parse_path(parser *ps, paths *P)
{
    char open = *ps->at, close = open == '[' ? ']' : ')';
    ps->at++;
    int start = P->nval, count = 0;
    skip_ws(ps);
    while (*ps->at != close) {
        if (count > 0) {
            if (*ps->at != ',')
                return perr(ps, "expected ',' or the end of the path");
            ps->at++;
            skip_ws(ps);
            if (*ps->at == close)   /* trailing comma, as in (0,) */
                break;
        }
        const char *num = ps->at;
        if (*ps->at == '-' || *ps->at == '+')
            ps->at++;
        if (!isdigit((unsigned char)*ps->at)) {
            ps->at = num;
            return perr(ps, "expected a rank (a non-negative integer)");
        }
        long v = 0;
        while (isdigit((unsigned char)*ps->at)) {
            if (v <= MAX_RANK0)
                v = v * 10 + (*ps->at - '0');
            ps->at++;
        }
        if (*num == '-' && v > 0) {
            ps->at = num;
            return perr(ps, "negative rank: ranks are 0-based positions among siblings");
        }
        if (v > MAX_RANK0) {
            ps->at = num;
            return perr(ps, "rank too large (at most 1048576)");
        }
        if (P->nval - start >= 4096) {
            ps->at = num;
            return perr(ps, "path longer than 4096 ranks");
        }
        if (grow(&P->val, &P->capval, P->nval + 1))
            return sq_error_oom(ps->err, "choices");
        P->val[P->nval++] = (int)v;
        count++;
        skip_ws(ps);
    }
    if (count == 0)
        return perr(ps, "empty path: the root is implicit, list only speculated nodes");
    ps->at++;
    if (P->n >= SQ_IMPORT_MAX_NODES - 1)
        return perr(ps, "too many paths for a plan (at most 16383, 16384 nodes with the root)");
    if (grow(&P->off, &P->cap, P->n + 1))
        return sq_error_oom(ps->err, "choices");
    int cap = P->cap;   /* off and len grow together */
    int *nl = realloc(P->len, (size_t)cap * sizeof *nl);
    if (!nl)
        return sq_error_oom(ps->err, "choices");
    P->len = nl;
    P->off[P->n] = start;
    P->len[P->n] = count;
    P->n++;
    return SQ_OK;
}

static int parse_choices(parser *ps, paths *P)
{
    skip_ws(ps);
    /* an optional "name =" in front, as in medusa_choices.py */
    if (isalpha((unsigned char)*ps->at) || *ps->at == '_') {
        while (isalnum((unsigned char)*ps->at) || *ps->at == '_')
            ps->at++;
        skip_ws(ps);
        if (*ps->at != '=')
            return perr(ps, "expected '=' after a name, or a list of rank paths");
        ps->at++;
        skip_ws(ps);
    }
    int quoted = 0;
    if (*ps->at == '"' || *ps->at == '\'') {
        quoted = *ps->at;
        ps->at++;
        skip_ws(ps);
    }
    if (*ps->at != '[')
        return perr(ps, "expected '[' to open the list of rank paths");
    ps->at++;
    skip_ws(ps);
    int rc, count = 0;
    while (*ps->at != ']') {
        if (count > 0) {
            if (*ps->at != ',')
                return perr(ps, "expected ',' or ']' after a path");
            ps->at++;
            skip_ws(ps);
            if (*ps->at == ']')
                break;
        }
        if (*ps->at != '[' && *ps->at != '(')
            return perr(ps, "expected a rank path such as [0, 1] or (0, 1)");
        if ((rc = parse_path(ps, P)))
            return rc;
        count++;
        skip_ws(ps);
    }
    ps->at++;
    skip_ws(ps);
    if (quoted) {
        if (*ps->at != quoted)
            return perr(ps, "expected the closing quote");
        ps->at++;
        skip_ws(ps);
    }
    if (*ps->at == ';' || *ps->at == ',')
        ps->at++;
    skip_ws(ps);
    if (*ps->at)
        return perr(ps, "unexpected text after the list");
    return SQ_OK;
}

static const paths *sort_ctx;

static int cmp_path_vals(const int *a, int la, const int *b, int lb)
{
    if (la != lb)
        return la < lb ? -1 : 1;
    for (int i = 0; i < la; i++)
        if (a[i] != b[i])
            return a[i] < b[i] ? -1 : 1;
    return 0;
}

static int cmp_idx(const void *x, const void *y)
{
    int i = *(const int *)x, j = *(const int *)y;
    const paths *P = sort_ctx;
    int c = cmp_path_vals(P->val + P->off[i], P->len[i], P->val + P->off[j], P->len[j]);
    return c ? c : (i < j ? -1 : i > j);
}

/* Position in `order` (sorted) of the path (vals, len), or -1. */
static int find_path(const paths *P, const int *order, const int *vals, int len)
{
    int lo = 0, hi = P->n - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2, i = order[mid];
        int c = cmp_path_vals(P->val + P->off[i], P->len[i], vals, len);
        if (c == 0)
            return mid;
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid - 1;
    }
    return -1;
}

static const char *fmt_path(const int *v, int len, char *buf, size_t cap)
{
    size_t used = 0;
    buf[0] = 0;
    used += (size_t)snprintf(buf, cap, "[");
    for (int i = 0; i < len && used < cap; i++) {
        if (used + 16 >= cap) {
            snprintf(buf + used, cap - used, "...");
            used = cap;
            break;
        }
        used += (size_t)snprintf(buf + used, cap - used, i ? ", %d" : "%d", v[i]);
    }
    if (used < cap)
        snprintf(buf + used, cap - used, "]");
    return buf;
}

int sq_import_choices_text(const char *text, const char *file, sq_tree **out, sq_error *err)
{
    *out = NULL;
    paths P = {0};
    parser ps = {.text = text, .at = text, .file = file, .err = err};
    int *order = NULL, *parent = NULL, *rank = NULL, *sib = NULL;
    int rc = parse_choices(&ps, &P);
    if (rc)
        goto done;
    int n = P.n + 1;
    order = malloc((size_t)(P.n + 1) * sizeof *order);
    parent = malloc((size_t)n * sizeof *parent);
    rank = malloc((size_t)n * sizeof *rank);
    sib = malloc(4096 * sizeof *sib);
    if (!order || !parent || !rank || !sib) {
        rc = sq_error_oom(err, "choices");
        goto done;
    }
    for (int i = 0; i < P.n; i++)
        order[i] = i;
    sort_ctx = &P;
    qsort(order, (size_t)P.n, sizeof *order, cmp_idx);
    sort_ctx = NULL;
    parent[0] = -1;
    rank[0] = 0;
    char b1[128], b2[128];
    for (int s = 0; s < P.n; s++) {
        int i = order[s];
        const int *v = P.val + P.off[i];
        int len = P.len[i];
        if (s > 0) {
            int j = order[s - 1];
            if (cmp_path_vals(P.val + P.off[j], P.len[j], v, len) == 0) {
                rc = sq_error_set(err, SQ_EDATA, "%s: entries %d and %d are both the path %s",
                                  file, j, i, fmt_path(v, len, b1, sizeof b1));
                goto done;
            }
        }
        int p = 0;
        if (len > 1) {
            int at = find_path(&P, order, v, len - 1);
            if (at < 0) {
                rc = sq_error_set(err, SQ_EDATA,
                                  "%s: entry %d, path %s: its prefix %s is missing (every prefix "
                                  "of a path must be listed)",
                                  file, i, fmt_path(v, len, b1, sizeof b1),
                                  fmt_path(v, len - 1, b2, sizeof b2));
                goto done;
            }
            p = at + 1;
        }
        if (v[len - 1] > 0) {
            /* the sibling one rank better must exist */
            memcpy(sib, v, (size_t)len * sizeof *sib);
            sib[len - 1]--;
            if (find_path(&P, order, sib, len) < 0) {
                fmt_path(sib, len, b2, sizeof b2);
                rc = sq_error_set(err, SQ_EDATA,
                                  "%s: entry %d, path %s: its sibling %s is missing (sibling ranks "
                                  "must run 0, 1, ... without gaps)",
                                  file, i, fmt_path(v, len, b1, sizeof b1), b2);
                goto done;
            }
        }
        parent[s + 1] = p;
        rank[s + 1] = v[len - 1] + 1;
    }
    rc = sq_tree_from_parents(parent, rank, n, out, file, err);
done:
    free(order);
    free(parent);
    free(rank);
    free(sib);
    free(P.off);
    free(P.len);
    free(P.val);
    return rc;
}

/* ---- growmap ------------------------------------------------------------------------- */

/* An array of integers in [lo, hi] of the expected length (-1: any), into a malloc'd buffer. */
static int int_list(const cJSON *arr, long long lo, long long hi, int expect, int **out, int *n,
                    const char *file, const char *ctx, sq_error *err)
{
    *out = NULL;
    *n = 0;
    if (!cJSON_IsArray(arr))
        return sq_error_set(err, SQ_EDATA, "%s: %s: expected an array of integers", file, ctx);
    int len = cJSON_GetArraySize(arr);
    if (expect >= 0 && len != expect)
        return sq_error_set(err, SQ_EDATA, "%s: %s: %d entries, expected %d", file, ctx, len,
                            expect);
    int *v = malloc((size_t)(len ? len : 1) * sizeof *v);
    if (!v)
        return sq_error_oom(err, "growmap");
    int i = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, arr) {
        double d = cJSON_IsNumber(it) ? it->valuedouble : -1e300;
        /* range first: converting an out-of-range double to an integer is undefined */
        if (!cJSON_IsNumber(it) || !(d >= (double)lo && d <= (double)hi) || d != floor(d)) {
            free(v);
            return sq_error_set(err, SQ_EDATA, "%s: %s[%d]: expected an integer in [%lld, %lld]",
                                file, ctx, i, lo, hi);
        }
        v[i++] = (int)d;
    }
    *out = v;
    *n = len;
    return SQ_OK;
}

int sq_import_growmap_json(const cJSON *root, const char *file, sq_tree **out, sq_error *err)
{
    *out = NULL;
    if (!cJSON_IsObject(root))
        return sq_error_set(err, SQ_EDATA, "%s: expected a JSON object (a Sequoia growmap)", file);
    static const char *const fields[] = {"roots", "branches", "Successors", "mask", "depth", "size"};
    for (size_t i = 0; i < sizeof fields / sizeof *fields; i++)
        if (!sq_json_field(root, fields[i]))
            return sq_error_set(err, SQ_EDATA, "%s: %s: missing (a growmap has roots, branches, "
                                "Successors, mask, depth and size)", file, fields[i]);
    long long size = 0;
    int rc = sq_json_get_int(root, "size", 1, 1, SQ_IMPORT_MAX_NODES, &size, file, "", err);
    if (rc)
        return rc;
    int n = (int)size;
    int *parent = malloc((size_t)n * sizeof *parent), *rank = malloc((size_t)n * sizeof *rank);
    int *depth = NULL, *level_of = malloc((size_t)n * sizeof *level_of), *row = NULL;
    int *kids = calloc((size_t)n, sizeof *kids), *level = malloc((size_t)n * sizeof *level);
    int m = 0;
    sq_tree *t = NULL;
    char ctx[96];
    if (!parent || !rank || !level_of || !kids || !level) {
        rc = sq_error_oom(err, "growmap");
        goto done;
    }
    for (int i = 0; i < n; i++) {
        parent[i] = -1;
        level_of[i] = -1;
    }
    /* Successors: parents and ranks */
    const cJSON *succ = sq_json_field(root, "Successors");
    if (!cJSON_IsArray(succ) || cJSON_GetArraySize(succ) != n) {
        rc = sq_error_set(err, SQ_EDATA, "%s: Successors: expected an array of %d lists (size)",
                          file, n);
        goto done;
    }
    for (int v = 0; v < n; v++) {
        snprintf(ctx, sizeof ctx, "Successors[%d]", v);
        if ((rc = int_list(cJSON_GetArrayItem(succ, v), 0, n - 1, -1, &row, &m, file, ctx, err)))
            goto done;
        kids[v] = m;
        for (int j = 0; j < m; j++) {
            int c = row[j];
            if (c == 0) {
                rc = sq_error_set(err, SQ_EDATA, "%s: %s[%d]: node 0 is the root and cannot be a "
                                  "successor", file, ctx, j);
                goto done;
            }
            if (parent[c] >= 0) {
                rc = sq_error_set(err, SQ_EDATA, "%s: %s[%d]: node %d is already a successor of "
                                  "node %d", file, ctx, j, c, parent[c]);
                goto done;
            }
            parent[c] = v;
            rank[c] = j + 1;
        }
        free(row);
        row = NULL;
    }
    rank[0] = 0;
    for (int v = 1; v < n; v++)
        if (parent[v] < 0) {
            rc = sq_error_set(err, SQ_EDATA, "%s: Successors: node %d is no node's successor "
                              "(only the root, node 0, may be)", file, v);
            goto done;
        }
    if ((rc = sq_tree_from_parents(parent, rank, n, &t, file, err)))
        goto done;
    /* depth: each node's level */
    if ((rc = int_list(sq_json_field(root, "depth"), 0, n - 1, n, &depth, &m, file, "depth", err)))
        goto done;
    for (int v = 0; v < n; v++)
        level[v] = v == 0 ? 0 : -1;
    for (int v = 1; v < n; v++) {
        int steps = 0, u = v;
        while (level[u] < 0) {
            u = parent[u];
            steps++;
        }
        int d = level[u] + steps;
        for (u = v; level[u] < 0; u = parent[u])
            level[u] = d--;
    }
    for (int v = 0; v < n; v++) {
        int want = level[v];
        if (depth[v] != want) {
            rc = sq_error_set(err, SQ_EDATA, "%s: depth[%d]: %d, but node %d is %d levels below "
                              "the root (Successors)", file, v, depth[v], v, want);
            goto done;
        }
    }
    /* roots[l] lists the nodes of level l; branches[l][j] the children of roots[l][j] */
    const cJSON *roots = sq_json_field(root, "roots"), *branches = sq_json_field(root, "branches");
    int levels = sq_tree_depth(t);
    if (!cJSON_IsArray(roots) || !cJSON_IsArray(branches)) {
        rc = sq_error_set(err, SQ_EDATA, "%s: roots and branches must be arrays of lists (one per "
                          "level)", file);
        goto done;
    }
    int nr = cJSON_GetArraySize(roots), nb = cJSON_GetArraySize(branches);
    if (nb != nr) {
        rc = sq_error_set(err, SQ_EDATA, "%s: branches: %d levels, but roots has %d (one list "
                          "per level each)", file, nb, nr);
        goto done;
    }
    /* The official writer lists every level, the leaves' included; accept the variant that
     * stops at the last level with children. */
    if (nr != levels && nr != levels - 1) {
        rc = sq_error_set(err, SQ_EDATA, "%s: roots: %d levels, but the tree (Successors) has %d",
                          file, nr, levels);
        goto done;
    }
    for (int l = 0; l < nr; l++) {
        int *ids = NULL, *br = NULL, ni = 0, nbr = 0;
        snprintf(ctx, sizeof ctx, "roots[%d]", l);
        if ((rc = int_list(cJSON_GetArrayItem(roots, l), 0, n - 1, -1, &ids, &ni, file, ctx, err)))
            goto done;
        snprintf(ctx, sizeof ctx, "branches[%d]", l);
        if ((rc = int_list(cJSON_GetArrayItem(branches, l), 0, SQ_IMPORT_MAX_NODES, -1, &br, &nbr,
                           file, ctx, err))) {
            free(ids);
            goto done;
        }
        if (nbr != ni) {
            rc = sq_error_set(err, SQ_EDATA, "%s: branches[%d]: %d entries, but roots[%d] lists %d "
                              "nodes (branches must match roots entry for entry)", file, l, nbr, l,
                              ni);
            free(ids);
            free(br);
            goto done;
        }
        for (int j = 0; j < ni && !rc; j++) {
            int v = ids[j];
            if (level_of[v] >= 0)
                rc = sq_error_set(err, SQ_EDATA, "%s: roots[%d][%d]: node %d is listed twice "
                                  "(also in roots[%d])", file, l, j, v, level_of[v]);
            else if (level[v] != l)
                rc = sq_error_set(err, SQ_EDATA, "%s: roots[%d][%d]: node %d is on level %d, not %d",
                                  file, l, j, v, level[v], l);
            else if (br[j] != kids[v])
                rc = sq_error_set(err, SQ_EDATA, "%s: branches[%d][%d]: %d, but node %d (roots[%d]"
                                  "[%d]) has %d successors", file, l, j, br[j], v, l, j, kids[v]);
            level_of[v] = l;
        }
        free(ids);
        free(br);
        if (rc)
            goto done;
    }
    for (int v = 0; v < n; v++)
        if (level_of[v] < 0 && level[v] < nr) {
            rc = sq_error_set(err, SQ_EDATA, "%s: roots[%d]: node %d of that level is missing",
                              file, level[v], v);
            goto done;
        }
    /* mask[i][j] = 1 exactly when j is i or one of its ancestors */
    const cJSON *mask = sq_json_field(root, "mask");
    if (!cJSON_IsArray(mask) || cJSON_GetArraySize(mask) != n) {
        rc = sq_error_set(err, SQ_EDATA, "%s: mask: expected %d rows (size)", file, n);
        goto done;
    }
    int *anc = calloc((size_t)n, sizeof *anc);
    if (!anc) {
        rc = sq_error_oom(err, "growmap");
        goto done;
    }
    for (int i = 0; i < n && !rc; i++) {
        snprintf(ctx, sizeof ctx, "mask[%d]", i);
        if ((rc = int_list(cJSON_GetArrayItem(mask, i), 0, 1, n, &row, &m, file, ctx, err)))
            break;
        for (int u = i; u >= 0; u = parent[u])
            anc[u] = 1;
        for (int j = 0; j < n && !rc; j++)
            if (row[j] != anc[j])
                rc = sq_error_set(err, SQ_EDATA, "%s: mask[%d][%d]: %d, but node %d %s node %d "
                                  "or one of its ancestors", file, i, j, row[j], j,
                                  anc[j] ? "is" : "is not", i);
        for (int u = i; u >= 0; u = parent[u])
            anc[u] = 0;
        free(row);
        row = NULL;
    }
    free(anc);
done:
    free(row);
    free(parent);
    free(rank);
    free(depth);
    free(level_of);
    free(kids);
    free(level);
    if (rc)
        sq_tree_free(t);
    else
        *out = t;
    return rc;
}

int sq_import_tree(const char *file, sq_import_format fmt, sq_tree **out, sq_error *err)
{
    *out = NULL;
    if (fmt == SQ_IMPORT_GROWMAP) {
        cJSON *root = NULL;
        int rc = sq_json_load(file, &root, err);
        if (rc)
            return rc;
        rc = sq_import_growmap_json(root, file, out, err);
        cJSON_Delete(root);
        return rc;
    }
    char *text = NULL;
    size_t len = 0;
    int rc = sq_file_read(file, SQ_IMPORT_MAX_BYTES, &text, &len, err);
    if (rc)
        return rc;
    size_t bom = 0;   /* a UTF-8 byte order mark is skipped (issue 27) */
    if ((rc = sq_text_bom(file, text, len, &bom, err))) {
        free(text);
        return rc;
    }
    if (strlen(text) != len) {
        free(text);
        return sq_error_set(err, SQ_EDATA, "%s: contains a NUL byte (not a text file)", file);
    }
    rc = sq_import_choices_text(text + bom, file, out, err);
    free(text);
    return rc;
}

int sq_import_plan(const char *file, sq_import_format fmt, const sq_curve *curve, sq_plan **out,
                   sq_error *err)
{
    *out = NULL;
    sq_tree *t = NULL;
    int rc = sq_import_tree(file, fmt, &t, err);
    if (rc)
        return rc;
    return sq_plan_new(t, curve, 0, 0, 0, out, err);
}
