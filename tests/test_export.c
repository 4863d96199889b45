/* Engine exports, imports, engine limits, engine-constrained planning and SVG pictures
 * (planner/export.h, import.h, engine.h, svg.h; sequoia-plan --export/--import/--engine). */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "libsequoia/format/curve.h"
#include "planner/dp.h"
#include "planner/engine.h"
#include "planner/export.h"
#include "planner/import.h"
#include "libsequoia/base/json.h"
#include "libsequoia/format/plan.h"
#include "planner/svg.h"
#include "libsequoia/format/tree.h"
#include "tests/testutil.h"

/* F(T) through the allocating form of sq_tree_expected_tokens (libsequoia/format/tree.h). */
static double tree_F(const sq_tree *t, const sq_curve *c)
{
    double F = 0;
    cr_assert_eq(sq_tree_score(t, c, &F, NULL), SQ_OK, "out of memory");
    return F;
}

/* ---- helpers ----------------------------------------------------------------------------- */

static sq_tree *tree_of(const int *parent, const int *rank, int n)
{
    sq_tree *t = NULL;
    sq_error err = {0};
    cr_assert_eq(sq_tree_from_parents(parent, rank, n, &t, "test", &err), 0, "%s", err.msg);
    return t;
}

/* A random tree of n nodes: node i hangs under a uniformly drawn earlier node. */
static sq_tree *random_tree(int n, unsigned *seed)
{
    int *parent = malloc((size_t)n * sizeof *parent), *rank = malloc((size_t)n * sizeof *rank);
    int *kids = calloc((size_t)n, sizeof *kids);
    cr_assert(parent && rank && kids);
    parent[0] = -1;
    rank[0] = 0;
    for (int i = 1; i < n; i++) {
        parent[i] = (int)(rand_r(seed) % (unsigned)i);
        rank[i] = ++kids[parent[i]];
    }
    sq_tree *t = tree_of(parent, rank, n);
    free(parent);
    free(rank);
    free(kids);
    return t;
}

static sq_plan *plan_of(sq_tree *t, const sq_curve *c)
{
    sq_plan *p = NULL;
    sq_error err = {0};
    cr_assert_eq(sq_plan_new(t, c ? c : sq_curve_default(), 0, 0, 0, &p, &err), 0, "%s", err.msg);
    return p;
}

static char *export_str(const sq_plan *p, sq_export_format f, int check)
{
    sq_export_params ep = sq_export_default_params();
    ep.check_limits = check;
    char *s = NULL;
    size_t len = 0;
    sq_error err = {0};
    cr_assert_eq(sq_export_to_string(p, f, &ep, "test", &s, &len, &err), 0, "%s", err.msg);
    cr_assert_eq(strlen(s), len);
    return s;
}

static void assert_same_tree(const sq_tree *a, const sq_tree *b, const char *what)
{
    cr_assert_eq(a->n, b->n, "%s: size %d vs %d", what, a->n, b->n);
    for (int i = 0; i < a->n; i++) {
        cr_assert_eq(a->parent[i], b->parent[i], "%s: node %d parent", what, i);
        cr_assert_eq(a->rank[i], b->rank[i], "%s: node %d rank", what, i);
        cr_assert_eq(a->depth[i], b->depth[i], "%s: node %d depth", what, i);
    }
}

static sq_tree *import_str(const char *text, sq_import_format fmt)
{
    sq_tree *t = NULL;
    sq_error err = {0};
    if (fmt == SQ_IMPORT_CHOICES) {
        cr_assert_eq(sq_import_choices_text(text, "test", &t, &err), 0, "%s", err.msg);
    } else {
        cJSON *j = NULL;
        cr_assert_eq(sq_json_parse("test", text, strlen(text), &j, &err), 0, "%s", err.msg);
        cr_assert_eq(sq_import_growmap_json(j, "test", &t, &err), 0, "%s", err.msg);
        cJSON_Delete(j);
    }
    return t;
}

/* The engines' own reading of a choices list, reimplemented: the list of paths as written,
 * then the checks the engines make (sorted by (length, lexicographic) — vLLM sorts, TensorRT-LLM
 * sorts by prefix keys —, every prefix present, no duplicate, and the rank limits). */
typedef struct {
    int  n;
    int  len[4096];
    int  v[4096][64];
} choices;

static void engine_parse(const char *s, int tuple, choices *C)
{
    C->n = 0;
    const char *p = s;
    if (tuple) {
        cr_assert_eq(*p, '"', "vllm string starts with a quote: %s", s);
        p++;
    }
    cr_assert_eq(*p, '[');
    p++;
    char open = tuple ? '(' : '[', close = tuple ? ')' : ']';
    while (*p && *p != ']') {
        if (*p == ',' || *p == ' ') {
            p++;
            continue;
        }
        cr_assert_eq(*p, open, "unexpected '%c' in %s", *p, s);
        p++;
        int k = 0;
        while (*p != close) {
            if (*p == ',' || *p == ' ') {
                p++;
                continue;
            }
            char *end;
            long x = strtol(p, &end, 10);
            cr_assert(end != p, "not a number at %s", p);
            cr_assert(k < 64);
            C->v[C->n][k++] = (int)x;
            p = end;
        }
        if (tuple && k == 1)
            cr_assert_eq(p[-1], ',', "a 1-tuple is written (0,)");
        p++;
        C->len[C->n++] = k;
        cr_assert(C->n < 4096);
    }
    cr_assert_eq(*p, ']');
    p++;
    if (tuple) {
        cr_assert_eq(*p, '"');
        p++;
    }
    cr_assert_str_eq(p, "\n");
}

static int path_cmp(const choices *C, int i, const int *v, int len)
{
    if (C->len[i] != len)
        return C->len[i] < len ? -1 : 1;
    for (int k = 0; k < len; k++)
        if (C->v[i][k] != v[k])
            return C->v[i][k] < v[k] ? -1 : 1;
    return 0;
}

static void engine_checks(const choices *C, int max_rank0, int max_path)
{
    for (int i = 0; i < C->n; i++) {
        if (i > 0)
            cr_assert_lt(path_cmp(C, i - 1, C->v[i], C->len[i]), 0,
                         "paths %d and %d not strictly sorted by (length, lexicographic)", i - 1, i);
        if (C->len[i] > 1) {
            int found = 0;
            for (int j = 0; j < i && !found; j++)
                found = path_cmp(C, j, C->v[i], C->len[i] - 1) == 0;
            cr_assert(found, "path %d: prefix missing", i);
        }
        for (int k = 0; k < C->len[i]; k++) {
            cr_assert_geq(C->v[i][k], 0);
            if (max_rank0 >= 0)
                cr_assert_leq(C->v[i][k], max_rank0, "path %d: rank %d", i, C->v[i][k]);
        }
        if (max_path)
            cr_assert_leq(C->len[i], max_path);
    }
}

/* The paths must be the tree's nodes 1..n-1 in order. */
static void paths_match_tree(const choices *C, const sq_tree *t)
{
    cr_assert_eq(C->n, t->n - 1);
    for (int v = 1; v < t->n; v++) {
        cr_assert_eq(C->len[v - 1], t->depth[v]);
        for (int u = v, k = t->depth[v] - 1; u > 0; u = t->parent[u], k--)
            cr_assert_eq(C->v[v - 1][k], t->rank[u] - 1, "node %d", v);
    }
}

static sq_dp *solve(int N, int D, int W, const sq_curve *c)
{
    sq_dp_params p = sq_dp_default_params();
    p.budget = N;
    p.depth = D;
    p.width = W;
    p.curve = c ? c : sq_curve_default();
    sq_dp *dp = NULL;
    sq_error err = {0};
    cr_assert_eq(sq_dp_solve(&p, &dp, &err), 0, "%s", err.msg);
    return dp;
}

/* ---- known small trees ------------------------------------------------------------------- */

Test(export, small_tree_gives_the_documented_strings)
{
    /* root -> [0], [1]; [0] -> [0, 0] */
    int parent[] = {-1, 0, 0, 1}, rank[] = {0, 1, 2, 1};
    sq_plan *p = plan_of(tree_of(parent, rank, 4), NULL);
    char *s = export_str(p, SQ_EXPORT_TRTLLM, 1);
    cr_assert_str_eq(s, "[[0], [1], [0, 0]]\n");
    free(s);
    s = export_str(p, SQ_EXPORT_MEDUSA, 1);
    cr_assert_str_eq(s, "[[0], [1], [0, 0]]\n");
    free(s);
    s = export_str(p, SQ_EXPORT_EAGLE, 1);
    cr_assert_str_eq(s, "[[0], [1], [0, 0]]\n");
    free(s);
    /* not level-uniform: [0] has a child, [1] none */
    s = export_str(p, SQ_EXPORT_VLLM, 0);
    cr_assert_str_eq(s, "\"[(0,), (1,), (0, 0)]\"\n");
    free(s);
    s = export_str(p, SQ_EXPORT_GROWMAP, 1);
    cr_assert_str_eq(s, "{\n"
                        "  \"roots\": [\n    [0],\n    [1, 2],\n    [3]\n  ],\n"
                        "  \"branches\": [\n    [2],\n    [1, 0],\n    [0]\n  ],\n"
                        "  \"Successors\": [\n    [1, 2],\n    [3],\n    [],\n    []\n  ],\n"
                        "  \"mask\": [\n    [1, 0, 0, 0],\n    [1, 1, 0, 0],\n    [1, 0, 1, 0],\n"
                        "    [1, 1, 0, 1]\n  ],\n"
                        "  \"depth\": [0, 1, 1, 2],\n  \"size\": 4\n}\n");
    free(s);
    s = export_str(p, SQ_EXPORT_DOT, 1);
    cr_assert(strstr(s, "digraph") && strstr(s, "n0 -> n1;") && strstr(s, "n0 -> n2;") &&
              strstr(s, "n1 -> n3;"), "%s", s);
    free(s);
    sq_plan_free(p);
}

Test(export, root_only_and_chain)
{
    int parent[] = {-1, 0, 1}, rank[] = {0, 1, 1};
    sq_plan *p = plan_of(tree_of(parent, rank, 1), NULL);
    /* the writer alone writes an empty list; an export checked for the engine refuses it, as
     * every engine does (issue 27: one rule, planner/engines.c) */
    char *s = export_str(p, SQ_EXPORT_TRTLLM, 0);
    cr_assert_str_eq(s, "[]\n");
    free(s);
    sq_export_params ep = sq_export_default_params();
    size_t len = 0;
    sq_error err = {0};
    s = NULL;
    cr_assert_eq(sq_export_to_string(p, SQ_EXPORT_TRTLLM, &ep, "test", &s, &len, &err), SQ_EDATA);
    cr_assert(strstr(err.msg, "root-only"), "%s", err.msg);
    cr_assert_null(s);
    sq_plan_free(p);
    p = plan_of(tree_of(parent, rank, 3), NULL);
    s = export_str(p, SQ_EXPORT_VLLM, 1);
    cr_assert_str_eq(s, "\"[(0,), (0, 0)]\"\n");
    free(s);
    sq_plan_free(p);
}

/* ---- round trips ------------------------------------------------------------------------- */

static void round_trip_all(const sq_plan *p, const char *what)
{
    static const sq_export_format rank_formats[] = {SQ_EXPORT_TRTLLM, SQ_EXPORT_MEDUSA,
                                                    SQ_EXPORT_EAGLE, SQ_EXPORT_VLLM};
    for (size_t i = 0; i < 4; i++) {
        char *s = export_str(p, rank_formats[i], 0);
        choices *C = malloc(sizeof *C);
        cr_assert_not_null(C);
        engine_parse(s, rank_formats[i] == SQ_EXPORT_VLLM, C);
        engine_checks(C, -1, 0);
        paths_match_tree(C, p->tree);
        free(C);
        sq_tree *back = import_str(s, SQ_IMPORT_CHOICES);
        assert_same_tree(p->tree, back, what);
        sq_plan *q = plan_of(back, &p->acceptance);
        cr_assert_float_eq(q->expected_tokens, p->expected_tokens, 1e-12, "%s", what);
        sq_plan_free(q);
        free(s);
    }
    char *g = export_str(p, SQ_EXPORT_GROWMAP, 0);
    sq_tree *back = import_str(g, SQ_IMPORT_GROWMAP);
    assert_same_tree(p->tree, back, what);
    sq_tree_free(back);
    free(g);
}

Test(export, dp_plans_of_many_sizes_round_trip_through_every_format)
{
    sq_dp *dp = solve(160, 12, 0, NULL);
    int depths[] = {2, 3, 5, 8, 12};
    for (size_t di = 0; di < sizeof depths / sizeof *depths; di++)
        for (int n = 1; n <= 160; n += (n < 40 ? 1 : 7)) {
            if (!isfinite(sq_dp_best(dp, n, depths[di])))
                continue;
            sq_tree *t = NULL;
            sq_error err = {0};
            cr_assert_eq(sq_dp_tree(dp, n, depths[di], &t, &err), 0, "%s", err.msg);
            sq_plan *p = plan_of(t, NULL);
            char what[64];
            snprintf(what, sizeof what, "DP plan n=%d d=%d", n, depths[di]);
            round_trip_all(p, what);
            sq_plan_free(p);
        }
    sq_dp_free(dp);
}

Test(export, random_trees_round_trip_through_every_format)
{
    unsigned seed = 12345;
    for (int it = 0; it < 300; it++) {
        int n = 1 + (int)(rand_r(&seed) % (it < 250 ? 60u : 400u));
        sq_plan *p = plan_of(random_tree(n, &seed), NULL);
        char what[64];
        snprintf(what, sizeof what, "random tree %d (n=%d)", it, n);
        round_trip_all(p, what);
        sq_plan_free(p);
    }
}

Test(export, importer_accepts_any_order_python_assignments_and_comments)
{
    const char *a = "[[0, 0], [1], [0]]";
    const char *b = "# Medusa-style\nmy_tree = [(0,), (0, 0),\n   (1,),]\n";
    const char *c = "'[(1,),(0,),(0,0)]'";
    sq_tree *ta = import_str(a, SQ_IMPORT_CHOICES), *tb = import_str(b, SQ_IMPORT_CHOICES);
    sq_tree *tc = import_str(c, SQ_IMPORT_CHOICES);
    assert_same_tree(ta, tb, "b");
    assert_same_tree(ta, tc, "c");
    cr_assert_eq(ta->n, 4);
    sq_tree_free(ta);
    sq_tree_free(tb);
    sq_tree_free(tc);
}

Test(export, shipped_medusa_tree_and_specinfer_tree)
{
    char *path = tu_source_path("examples/trees/mc_sim_7b_63.json");
    sq_tree *t = NULL;
    sq_error err = {0};
    cr_assert_eq(sq_import_tree(path, SQ_IMPORT_CHOICES, &t, &err), 0, "%s", err.msg);
    cr_assert_eq(t->n, 64);
    cr_assert_eq(sq_tree_depth(t), 5);
    int w[5];
    sq_tree_level_widths(t, w);
    int want[5] = {1, 10, 28, 23, 2};
    for (int l = 0; l < 5; l++)
        cr_assert_eq(w[l], want[l], "level %d", l);
    cr_assert_eq(sq_engine_check(t, SQ_ENGINE_MEDUSA, 0, "t", NULL), 0);
    cr_assert_eq(sq_engine_check(t, SQ_ENGINE_TRTLLM, 0, "t", NULL), 0);
    cr_assert_eq(sq_engine_check(t, SQ_ENGINE_VLLM, 0, "t", NULL), SQ_EDATA);
    /* the optimal tree of the same size and depth is at least as good */
    sq_plan *p = plan_of(t, NULL);
    sq_dp *dp = solve(64, 5, 0, NULL);
    cr_assert_geq(sq_dp_best(dp, 64, 5), p->expected_tokens - 1e-12);
    sq_dp_free(dp);
    sq_plan_free(p);
    free(path);

    path = tu_source_path("examples/trees/specinfer_5x8.json");
    cr_assert_eq(sq_import_tree(path, SQ_IMPORT_CHOICES, &t, &err), 0, "%s", err.msg);
    cr_assert_eq(t->n, 41);
    cr_assert_eq(sq_tree_depth(t), 9);
    cr_assert_eq(sq_engine_check(t, SQ_ENGINE_VLLM, 0, "t", NULL), 0);   /* 5 x 1 x ... x 1 */
    p = plan_of(t, NULL);
    /* F of k x L: 1 + (p_1 + ... + p_5)(1 + p_1 + ... + p_1^7) */
    const sq_curve *c = sq_curve_default();
    double s5 = 0, g = 0;
    for (int r = 1; r <= 5; r++)
        s5 += c->p[r - 1];
    for (int j = 0; j < 8; j++)
        g += pow(c->p[0], j);
    cr_assert_float_eq(p->expected_tokens, 1 + s5 * g, 1e-12);
    sq_plan_free(p);
    free(path);
}

/* ---- bad imports ------------------------------------------------------------------------- */

typedef struct {
    char text[400];
    char expect[2][80];
} bad_case;

ParameterizedTestParameters(export, malformed_choices_are_refused_with_the_reason)
{
    static bad_case cases[] = {
        {"[[0], [0, 0, 1], [0, 0, 0]]", {"prefix [0, 0] is missing", "path [0, 0, 0]"}},
        {"[[0], [1], [0]]", {"both the path [0]", "entries"}},
        {"[[0], [-1]]", {"negative rank", "line 1, column 8"}},
        {"[[0], [2000000]]", {"rank too large (at most 1048576)", "column 8"}},
        {"[[0], [2]]", {"sibling [1] is missing", "[2]"}},
        {"[[0], []]", {"empty path", "column 8"}},
        {"[[0], [1]", {"expected ',' or ']'", "end of the file"}},
        {"[[0], [x]]", {"expected a rank", "column 8"}},
        {"[[0] [1]]", {"expected ',' or ']'", "column 6"}},
        {"{\"a\": 1}", {"expected '['", "line 1, column 1"}},
        {"[[0], [1]] trailing", {"unexpected text after the list"}},
        {"", {"expected '['"}},
        {"[[0], [0.5]]", {"expected ',' or the end of the path"}},
    };
    return cr_make_param_array(bad_case, cases, sizeof cases / sizeof *cases);
}

ParameterizedTest(bad_case *bc, export, malformed_choices_are_refused_with_the_reason)
{
    sq_tree *t = NULL;
    sq_error err = {0};
    cr_assert_eq(sq_import_choices_text(bc->text, "c.json", &t, &err), SQ_EDATA, "%s", bc->text);
    cr_assert_null(t);
    cr_assert(strncmp(err.msg, "c.json: ", 8) == 0, "%s", err.msg);
    for (int i = 0; i < 2; i++)
        if (bc->expect[i][0])
            cr_assert(strstr(err.msg, bc->expect[i]), "'%s' lacks '%s'", err.msg, bc->expect[i]);
}

#define GM_OK "\"roots\":[[0],[1,2],[3]],\"branches\":[[2],[1,0],[0]],\"Successors\":[[1,2],[3],[],[]]," \
              "\"depth\":[0,1,1,2],\"size\":4"
#define MASK_OK "\"mask\":[[1,0,0,0],[1,1,0,0],[1,0,1,0],[1,1,0,1]]"

ParameterizedTestParameters(export, malformed_growmaps_are_refused_with_the_reason)
{
    static bad_case cases[] = {
        {"{" GM_OK "}", {"mask: missing"}},
        {"{\"roots\":[[0],[1,2],[3]],\"branches\":[[2],[2,0],[0]],\"Successors\":[[1,2],[3],[],[]],"
         "\"depth\":[0,1,1,2],\"size\":4," MASK_OK "}", {"branches[1][0]: 2", "has 1 successors"}},
        {"{\"roots\":[[0],[1,2],[3]],\"branches\":[[2],[1],[0]],\"Successors\":[[1,2],[3],[],[]],"
         "\"depth\":[0,1,1,2],\"size\":4," MASK_OK "}", {"branches[1]: 1 entries, but roots[1] lists 2",
                                                         "match roots"}},
        {"{\"roots\":[[0],[1,2]],\"branches\":[[2],[1,0],[0]],\"Successors\":[[1,2],[3],[],[]],"
         "\"depth\":[0,1,1,2],\"size\":4," MASK_OK "}", {"branches: 3 levels, but roots has 2"}},
        {"{\"roots\":[[0],[1,2],[3]],\"branches\":[[2],[1,0],[0]],\"Successors\":[[1,2],[3],[],[1]],"
         "\"depth\":[0,1,1,2],\"size\":4," MASK_OK "}", {"Successors[3][0]", "already a successor"}},
        {"{\"roots\":[[0],[1,2],[3]],\"branches\":[[2],[1,0],[0]],\"Successors\":[[1,2],[3],[],[]],"
         "\"depth\":[0,1,2,2],\"size\":4," MASK_OK "}", {"depth[2]: 2"}},
        {"{" GM_OK ",\"mask\":[[1,0,0,0],[1,1,0,0],[1,0,1,0],[1,0,1,1]]}", {"mask[3][1]: 0"}},
        {"{\"roots\":[[0],[1,2],[3]],\"branches\":[[2],[1,0],[0]],\"Successors\":[[1,2],[3],[]],"
         "\"depth\":[0,1,1,2],\"size\":4," MASK_OK "}", {"Successors: expected an array of 4"}},
        {"{\"roots\":[[0],[2,1],[3]],\"branches\":[[2],[0,1],[0]],\"Successors\":[[1,2],[3],[],[]],"
         "\"depth\":[0,1,1,2],\"size\":5," MASK_OK "}", {"Successors: expected an array of 5"}},
        {"[1, 2]", {"expected a JSON object"}},
    };
    return cr_make_param_array(bad_case, cases, sizeof cases / sizeof *cases);
}

ParameterizedTest(bad_case *bc, export, malformed_growmaps_are_refused_with_the_reason)
{
    cJSON *j = NULL;
    sq_error err = {0};
    cr_assert_eq(sq_json_parse("g.json", bc->text, strlen(bc->text), &j, &err), 0, "%s", err.msg);
    sq_tree *t = NULL;
    cr_assert_eq(sq_import_growmap_json(j, "g.json", &t, &err), SQ_EDATA, "%s", bc->text);
    cr_assert_null(t);
    cr_assert(strncmp(err.msg, "g.json: ", 8) == 0, "%s", err.msg);
    for (int i = 0; i < 2; i++)
        if (bc->expect[i][0])
            cr_assert(strstr(err.msg, bc->expect[i]), "'%s' lacks '%s'", err.msg, bc->expect[i]);
    cJSON_Delete(j);
}

Test(export, growmap_in_another_node_order_imports_to_the_canonical_tree)
{
    /* UMbreLLa-style ids: level 1 lists 2 before 1; node 2 is the root's first successor */
    const char *g = "{\"roots\":[[0],[2,1],[3]],\"branches\":[[2],[1,0],[0]],"
                    "\"Successors\":[[2,1],[],[3],[]],\"mask\":[[1,0,0,0],[1,1,0,0],[1,0,1,0],"
                    "[1,0,1,1]],\"depth\":[0,1,1,2],\"size\":4}";
    sq_tree *t = import_str(g, SQ_IMPORT_GROWMAP);
    int parent[] = {-1, 0, 0, 1}, rank[] = {0, 1, 2, 1};
    sq_tree *want = tree_of(parent, rank, 4);
    assert_same_tree(want, t, "reordered growmap");
    sq_tree_free(t);
    sq_tree_free(want);
}

/* ---- engine limits ----------------------------------------------------------------------- */

/* A chain of `len` speculated tokens. */
static sq_tree *chain(int len)
{
    int n = len + 1;
    int *parent = malloc((size_t)n * sizeof *parent), *rank = malloc((size_t)n * sizeof *rank);
    for (int i = 0; i < n; i++) {
        parent[i] = i - 1;
        rank[i] = i ? 1 : 0;
    }
    sq_tree *t = tree_of(parent, rank, n);
    free(parent);
    free(rank);
    return t;
}

/* The root with `k` children. */
static sq_tree *star(int k)
{
    int n = k + 1;
    int *parent = malloc((size_t)n * sizeof *parent), *rank = malloc((size_t)n * sizeof *rank);
    for (int i = 0; i < n; i++) {
        parent[i] = i ? 0 : -1;
        rank[i] = i;
    }
    sq_tree *t = tree_of(parent, rank, n);
    free(parent);
    free(rank);
    return t;
}

static void expect_refusal(const sq_tree *t, sq_engine e, int mnl, const char *a, const char *b)
{
    sq_error err = {0};
    cr_assert_eq(sq_engine_check(t, e, mnl, "p.json", &err), SQ_EDATA, "%s should be refused",
                 sq_engine_name(e));
    cr_assert(strstr(err.msg, "p.json: ") == err.msg, "%s", err.msg);
    cr_assert(strstr(err.msg, a), "'%s' lacks '%s'", err.msg, a);
    if (b)
        cr_assert(strstr(err.msg, b), "'%s' lacks '%s'", err.msg, b);
}

Test(export, trtllm_limits_are_exact)
{
    sq_tree *t = chain(8);   /* 8 speculated tokens: computePrefix's shifts stay below 32 */
    cr_assert_eq(sq_engine_check(t, SQ_ENGINE_TRTLLM, 0, "p", NULL), 0);
    sq_tree_free(t);
    t = chain(9);
    expect_refusal(t, SQ_ENGINE_TRTLLM, 0, "9 tokens deep", "at most 8");
    cr_assert_eq(sq_engine_check(t, SQ_ENGINE_MEDUSA, 0, "p", NULL), 0);
    sq_tree_free(t);
    t = star(16);
    cr_assert_eq(sq_engine_check(t, SQ_ENGINE_TRTLLM, 0, "p", NULL), 0);
    sq_tree_free(t);
    t = star(17);
    expect_refusal(t, SQ_ENGINE_TRTLLM, 0, "node [16] has 0-based rank 16", "ranks 0..15");
    sq_tree_free(t);
    /* non-leaves per level: root -> 3 children, each with one child */
    int parent[] = {-1, 0, 0, 0, 1, 2, 3}, rank[] = {0, 1, 2, 3, 1, 1, 1};
    t = tree_of(parent, rank, 7);
    cr_assert_eq(sq_engine_check(t, SQ_ENGINE_TRTLLM, 3, "p", NULL), 0);
    cr_assert_eq(sq_engine_check(t, SQ_ENGINE_TRTLLM, 0, "p", NULL), 0);
    expect_refusal(t, SQ_ENGINE_TRTLLM, 2, "level 1 has 3 nodes with children", "allows 2");
    sq_tree_free(t);
}

Test(export, medusa_limits_are_exact)
{
    sq_tree *t = star(10);
    cr_assert_eq(sq_engine_check(t, SQ_ENGINE_MEDUSA, 0, "p", NULL), 0);
    sq_tree_free(t);
    t = star(11);
    expect_refusal(t, SQ_ENGINE_MEDUSA, 0, "node [10] has 0-based rank 10", "ranks 0..9");
    sq_plan *p = plan_of(t, NULL);
    sq_error err = {0};
    char *s = NULL;
    size_t len;
    cr_assert_eq(sq_export_to_string(p, SQ_EXPORT_EAGLE, NULL, "p", &s, &len, &err), SQ_EDATA);
    cr_assert_null(s, "nothing is written on a refusal");
    sq_plan_free(p);
}

Test(export, vllm_needs_level_uniform_trees)
{
    int k[] = {3, 2, 1};
    sq_tree *t = sq_uniform_tree(k, 3);
    cr_assert_eq(t->n, 1 + 3 + 6 + 6);
    cr_assert_eq(sq_engine_check(t, SQ_ENGINE_VLLM, 0, "p", NULL), 0);
    sq_tree_free(t);
    /* [0] has 2 children, [1] has 1 */
    int parent[] = {-1, 0, 0, 1, 1, 2}, rank[] = {0, 1, 2, 1, 2, 1};
    t = tree_of(parent, rank, 6);
    expect_refusal(t, SQ_ENGINE_VLLM, 0, "level 1: node [0] has 2 children but node [1] has 1",
                   "k_1 x k_2");
    sq_tree_free(t);
    /* a leaf beside a non-leaf on one level */
    int parent2[] = {-1, 0, 0, 1}, rank2[] = {0, 1, 2, 1};
    t = tree_of(parent2, rank2, 4);
    expect_refusal(t, SQ_ENGINE_VLLM, 0, "node [1] has 0", NULL);
    sq_tree_free(t);
}

/* ---- level-uniform search against brute force --------------------------------------------- */

static double brute_best;

static void brute(const sq_curve *c, int N, int D, int W, int l, long long m, long long used,
                  int *k)
{
    sq_tree *t = sq_uniform_tree(k, l);
    double F = tree_F(t, c);
    sq_tree_free(t);
    if (F > brute_best)
        brute_best = F;
    if (l + 2 > D)
        return;
    for (int kk = 1; kk <= W && used + m * kk <= N; kk++) {
        k[l] = kk;
        brute(c, N, D, W, l + 1, m * kk, used + m * kk, k);
    }
}

static void make_curve(sq_curve *c, unsigned *seed, int W, int rows)
{
    double p[16], left = 1.0;
    for (int i = 0; i < W; i++) {
        /* random, not monotone, with some zeros */
        double x = (rand_r(seed) % 5 == 0) ? 0.0 : left * (rand_r(seed) % 1000) / 1600.0;
        p[i] = x;
        left -= x;
    }
    sq_error err = {0};
    cr_assert_eq(sq_curve_init(c, "r", "stochastic", p, W, &err), 0, "%s", err.msg);
    if (rows) {
        c->depth_rows = rows;
        c->p_by_depth = malloc((size_t)rows * (size_t)W * sizeof(double));
        for (int r = 0; r < rows; r++) {
            double lft = 1.0;
            for (int i = 0; i < W; i++) {
                double x = lft * (rand_r(seed) % 1000) / 1800.0;
                c->p_by_depth[r * W + i] = x;
                lft -= x;
            }
        }
    }
}

Test(export, level_uniform_search_matches_brute_force)
{
    unsigned seed = 7;
    int k[64];
    for (int it = 0; it < 60; it++) {
        sq_curve c;
        int W = 1 + (int)(rand_r(&seed) % 6);
        make_curve(&c, &seed, W, it % 3 == 0 ? 1 + it % 4 : 0);
        const sq_curve *cs[2] = {&c, sq_curve_default()};
        for (int ci = 0; ci < 2; ci++)
            for (int N = 1; N <= 40; N += 1 + (int)(rand_r(&seed) % 4))
                for (int D = 1; D <= 7; D += 2) {
                    int width = ci ? 5 : (int)(rand_r(&seed) % 4);   /* 0 = the curve's */
                    int Weff = width ? width : cs[ci]->width;
                    if (Weff > cs[ci]->width)
                        Weff = cs[ci]->width;
                    brute_best = 1.0;
                    int kk[64];
                    brute(cs[ci], N, D, Weff, 0, 1, 1, kk);
                    int levels = 0;
                    double F = 0;
                    sq_error err = {0};
                    cr_assert_eq(sq_uniform_search(cs[ci], N, D, width, k, &levels, &F, &err), 0,
                                 "%s", err.msg);
                    cr_assert_float_eq(F, brute_best, 1e-12, "N=%d D=%d W=%d: %g vs brute %g", N,
                                       D, width, F, brute_best);
                    sq_tree *t = sq_uniform_tree(k, levels);
                    cr_assert_leq(t->n, N);
                    cr_assert_leq(sq_tree_depth(t), D);
                    cr_assert_float_eq(tree_F(t, cs[ci]), F, 1e-12);
                    sq_tree_free(t);
                }
        sq_curve_clear(&c);
    }
}

Test(export, level_uniform_search_refuses_past_its_limit)
{
    int k[64];
    int levels;
    double F;
    sq_error err = {0};
    cr_assert_eq(sq_uniform_search(sq_curve_default(), 4096, 64, 0, k, &levels, &F, &err),
                 SQ_EUSAGE);
    cr_assert(strstr(err.msg, "limit"), "%s", err.msg);
}

/* ---- engine-constrained plans -------------------------------------------------------------- */

Test(export, engine_plans_satisfy_the_limits_and_cost_at_most_the_optimum)
{
    sq_engine engines[] = {SQ_ENGINE_VLLM, SQ_ENGINE_TRTLLM, SQ_ENGINE_MEDUSA};
    int budgets[] = {2, 9, 33, 64, 128};
    int depths[] = {3, 6, 10, 20};
    for (size_t e = 0; e < 3; e++)
        for (size_t bi = 0; bi < 5; bi++)
            for (size_t di = 0; di < 4; di++)
                for (int mnl = 0; mnl <= 3; mnl += 3) {
                    if (mnl && engines[e] != SQ_ENGINE_TRTLLM)
                        continue;
                    sq_engine_plan_params p = sq_engine_plan_default_params();
                    p.engine = engines[e];
                    p.budget = budgets[bi];
                    p.depth = depths[di];
                    p.max_non_leaves = mnl;
                    sq_engine_plan_result r;
                    sq_error err = {0};
                    cr_assert_eq(sq_engine_plan(&p, &r, &err), 0, "%s", err.msg);
                    cr_assert_eq(sq_engine_check(r.tree, engines[e], mnl, "p", &err), 0, "%s",
                                 err.msg);
                    cr_assert_leq(r.tree->n, p.budget);
                    cr_assert_leq(sq_tree_depth(r.tree), p.depth);
                    sq_dp *dp = solve(p.budget, p.depth, 0, NULL);
                    double opt = sq_dp_best(dp, p.budget, p.depth);
                    if (!isfinite(opt)) {   /* budget past what the depth can hold */
                        opt = -INFINITY;
                        for (int n = 1; n <= p.budget; n++)
                            opt = fmax(opt, sq_dp_best(dp, n, p.depth));
                    }
                    cr_assert_leq(r.expected_tokens, opt + 1e-12);
                    if (engines[e] == SQ_ENGINE_MEDUSA) {
                        /* exact: the DP with width 10 */
                        sq_dp *d10 = solve(p.budget, p.depth, 10, NULL);
                        double o10 = -INFINITY;
                        for (int n = 1; n <= p.budget; n++)
                            o10 = fmax(o10, sq_dp_best(d10, n, p.depth));
                        cr_assert_float_eq(r.expected_tokens, o10, 1e-12);
                        cr_assert(r.exact);
                        sq_dp_free(d10);
                    }
                    sq_dp_free(dp);
                    sq_tree_free(r.tree);
                }
}

/* ---- SVG ---------------------------------------------------------------------------------- */

static int count(const char *s, const char *needle)
{
    int c = 0;
    for (const char *p = strstr(s, needle); p; p = strstr(p + 1, needle))
        c++;
    return c;
}

/* Tags balance: every <x ...> is closed by </x> or is self-closing, in nesting order. */
static void assert_well_formed(const char *s)
{
    char stack[64][32];
    int top = 0;
    cr_assert(strncmp(s, "<?xml", 5) == 0);
    for (const char *p = strchr(s, '<'); p; p = strchr(p + 1, '<')) {
        if (p[1] == '?' || p[1] == '!')
            continue;
        const char *end = strchr(p, '>');
        cr_assert_not_null(end, "unterminated tag");
        if (p[1] == '/') {
            cr_assert_gt(top, 0, "closing tag without an opening one");
            size_t n = strcspn(p + 2, " >");
            cr_assert(strlen(stack[top - 1]) == n && !strncmp(stack[top - 1], p + 2, n),
                      "</%.*s> closes <%s>", (int)n, p + 2, stack[top - 1]);
            top--;
        } else if (end[-1] != '/') {
            size_t n = strcspn(p + 1, " >");
            cr_assert_lt(n, 32);
            cr_assert_lt(top, 64);
            memcpy(stack[top], p + 1, n);
            stack[top++][n] = 0;
        }
        /* no raw '<' or '&' inside attribute values or text */
        for (const char *q = p + 1; q < end; q++)
            cr_assert_neq(*q, '<');
    }
    cr_assert_eq(top, 0, "%d tags left open", top);
    cr_assert_eq(count(s, "<svg"), 1);
}

static void render_check(const char *path)
{
    if (access("/usr/bin/rsvg-convert", X_OK) != 0)
        return;   /* librsvg2-bin is in setup.sh; without it only the structure is checked */
    char png[4200];
    snprintf(png, sizeof png, "%s.png", path);
    char *argv[] = {"/usr/bin/rsvg-convert", (char *)path, "-o", png, NULL};
    char *out, *err;
    cr_assert_eq(tu_run(argv, &out, &err), 0, "rsvg-convert %s: %s", path, err);
    cr_assert(tu_exists(png));
    free(out);
    free(err);
}

Test(export, plan_svg_is_well_formed_with_one_circle_per_node)
{
    char *dir = tu_tmpdir();
    sq_dp *dp = solve(1024, 12, 0, NULL);
    int sizes[] = {1, 2, 20, 128, 300, 1024};
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
        sq_tree *t = NULL;
        sq_error err = {0};
        cr_assert_eq(sq_dp_tree(dp, sizes[i], 12, &t, &err), 0, "%s", err.msg);
        sq_plan *p = plan_of(t, NULL);
        char name[32];
        snprintf(name, sizeof name, "plan%d.svg", sizes[i]);
        char *path = tu_path(dir, name);
        cr_assert_eq(sq_svg_plan(p, path, &err), 0, "%s", err.msg);
        char *s = tu_read(path, NULL);
        assert_well_formed(s);
        cr_assert_eq(count(s, "<circle"), sizes[i], "circles for %d nodes", sizes[i]);
        cr_assert_eq(count(s, "<title>"), sizes[i] + 1, "a tooltip per node, and the title");
        if (sizes[i] > 1 && sizes[i] <= SQ_SVG_LABEL_MAX)
            cr_assert(strstr(s, ">0.77<"), "f of the first child is printed");
        cr_assert(strstr(s, "nodes, "), "level widths at the side");
        /* the export gives the same picture */
        char *x = export_str(p, SQ_EXPORT_SVG, 1);
        cr_assert_str_eq(x, s);
        free(x);
        render_check(path);
        free(s);
        free(path);
        sq_plan_free(p);
    }
    sq_dp_free(dp);
    tu_rmtree(dir);
    free(dir);
}

/* A 20000-node plan (issue 27: it drew a 36933 x 420 px strip) stays within about 3200 px: its
 * levels of more than 1000 nodes are aggregated into columns, every node of them counted once
 * in a column's tooltip; the narrower levels keep one circle per node. */
Test(export, a_20000_node_plan_svg_aggregates_its_wide_levels)
{
    char *dir = tu_tmpdir();
    sq_dp *dp = solve(20000, 6, 0, NULL);
    sq_tree *t = NULL;
    sq_error err = {0};
    cr_assert_eq(sq_dp_tree(dp, 20000, 6, &t, &err), 0, "%s", err.msg);
    int widths[6] = {0}, apart = 0, aggregated = 0;
    for (int v = 0; v < t->n; v++)
        widths[t->depth[v]]++;
    for (int l = 0; l < 6; l++) {
        if (widths[l] > 1000)
            aggregated += widths[l];
        else
            apart += widths[l];
    }
    cr_assert(aggregated > 0 && apart > 1, "%d nodes in wide levels, %d in others", aggregated,
              apart);
    sq_plan *p = plan_of(t, NULL);
    char *path = tu_path(dir, "plan20000.svg");
    cr_assert_eq(sq_svg_plan(p, path, &err), 0, "%s", err.msg);
    char *s = tu_read(path, NULL);
    assert_well_formed(s);
    int w = 0, h = 0;
    cr_assert_eq(sscanf(strstr(s, "<svg"), "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" "
                        "height=\"%d\"", &w, &h), 2, "%.200s", s);
    cr_assert(w <= 3300 && h <= 600, "%d x %d px", w, h);
    cr_assert_eq(count(s, "<circle"), apart, "one circle per node of the narrow levels");
    int cols = 0, in_cols = 0;
    for (const char *q = strstr(s, "<title>level "); q; q = strstr(q + 1, "<title>level ")) {
        int l, k;
        cr_assert_eq(sscanf(q, "<title>level %d: %d node", &l, &k), 2, "%.80s", q);
        cr_assert(l >= 0 && l < 6 && widths[l] > 1000 && k >= 1, "%.80s", q);
        cols++;
        in_cols += k;
    }
    cr_assert_eq(in_cols, aggregated, "every node of the wide levels is in one column");
    cr_assert_eq(count(s, "<title>"), apart + cols + 1,
                 "a tooltip per node or column, and the title");
    cr_assert(strstr(s, "columns of nodes"), "the subtitle says so");
    render_check(path);
    free(s);
    free(path);
    sq_plan_free(p);
    sq_dp_free(dp);
    tu_rmtree(dir);
    free(dir);
}

Test(export, curve_and_table_svgs_are_well_formed)
{
    char *dir = tu_tmpdir();
    sq_curve_set set = {.n = 3, .curves = calloc(3, sizeof(sq_curve)), .source = NULL};
    unsigned seed = 3;
    for (int i = 0; i < 3; i++)
        make_curve(&set.curves[i], &seed, 4 + 3 * i, 0);
    free(set.curves[1].name);
    set.curves[1].name = strdup("a<b & \"c\"");
    set.curves[2].stderr_p = calloc(10, sizeof(double));
    for (int k = 0; k < 10; k++)
        set.curves[2].stderr_p[k] = 0.01;
    char *path = tu_path(dir, "curves.svg");
    sq_error err = {0};
    cr_assert_eq(sq_svg_curves(&set, path, &err), 0, "%s", err.msg);
    char *s = tu_read(path, NULL);
    assert_well_formed(s);
    cr_assert(strstr(s, "a&lt;b &amp; &quot;c&quot;"), "names are escaped");
    cr_assert_eq(count(s, "<polyline"), 3);
    render_check(path);
    free(s);
    free(path);
    for (int i = 0; i < 3; i++)
        sq_curve_clear(&set.curves[i]);
    free(set.curves);

    sq_dp *dp = solve(96, 9, 0, NULL);
    path = tu_path(dir, "table.svg");
    cr_assert_eq(sq_svg_table(dp, sq_curve_default(), path, &err), 0, "%s", err.msg);
    s = tu_read(path, NULL);
    assert_well_formed(s);
    cr_assert_eq(count(s, "<polyline"), 6 + 2, "6 depths and 2 baselines");
    cr_assert(strstr(s, "longest chain") && strstr(s, "k x L"));
    render_check(path);
    free(s);
    free(path);
    sq_dp_free(dp);
    tu_rmtree(dir);
    free(dir);
}

/* ---- the CLI ------------------------------------------------------------------------------ */

static const char *bin(void)
{
    const char *b = getenv("SQ_PLAN_BIN");
    cr_assert_not_null(b, "SQ_PLAN_BIN is not set (run through meson test)");
    return b;
}

Test(export, cli_plan_export_import_round_trip)
{
    char *dir = tu_tmpdir();
    char *plan = tu_path(dir, "plan.json"), *ch = tu_path(dir, "c.json");
    char *gm = tu_path(dir, "g.json"), *back = tu_path(dir, "back.json");
    char *out, *err;
    char *a1[] = {(char *)bin(), "-n", "40", "-d", "6", "-q", "-o", plan, NULL};
    cr_assert_eq(tu_run(a1, &out, &err), 0, "%s", err);
    free(out), free(err);
    char *a2[] = {(char *)bin(), "--plan", plan, "--export", "trtllm", "-o", ch, NULL};
    cr_assert_eq(tu_run(a2, &out, &err), 0, "%s", err);
    free(out), free(err);
    char *a3[] = {(char *)bin(), "--import", "choices", ch, "-q", "-o", back, NULL};
    cr_assert_eq(tu_run(a3, &out, &err), 0, "%s", err);
    free(out), free(err);
    sq_plan *p1 = NULL, *p2 = NULL;
    sq_error e = {0};
    cr_assert_eq(sq_plan_load(plan, &p1, &e), 0, "%s", e.msg);
    cr_assert_eq(sq_plan_load(back, &p2, &e), 0, "%s", e.msg);
    assert_same_tree(p1->tree, p2->tree, "cli choices");
    cr_assert_float_eq(p1->expected_tokens, p2->expected_tokens, 1e-12);
    sq_plan_free(p2);
    char *a4[] = {(char *)bin(), "--plan", plan, "--export", "growmap", "-o", gm, NULL};
    cr_assert_eq(tu_run(a4, &out, &err), 0, "%s", err);
    free(out), free(err);
    char *a5[] = {(char *)bin(), "--import", "growmap", gm, NULL};
    cr_assert_eq(tu_run(a5, &out, &err), 0, "%s", err);
    cr_assert(strstr(err, "optimal tree:") && strstr(err, "+0.0%"), "summary on stderr: %s", err);
    cJSON *j = NULL;
    cr_assert_eq(sq_json_parse("stdout", out, strlen(out), &j, &e), 0, "%s", e.msg);
    cr_assert_eq(sq_plan_from_json(j, "stdout", &p2, &e), 0, "%s", e.msg);
    assert_same_tree(p1->tree, p2->tree, "cli growmap");
    cJSON_Delete(j);
    free(out), free(err);
    sq_plan_free(p1);
    sq_plan_free(p2);
    tu_rmtree(dir);
    free(dir), free(plan), free(ch), free(gm), free(back);
}

Test(export, cli_engine_plan_reports_the_cost_and_exports)
{
    char *out, *err;
    char *a[] = {(char *)bin(), "-n", "64", "-d", "6", "--engine", "vllm", "--export", "vllm",
                 NULL};
    cr_assert_eq(tu_run(a, &out, &err), 0, "%s", err);
    cr_assert(out[0] == '"' && strstr(out, "(0,)"), "%s", out);
    cr_assert(strstr(err, "engine:") && strstr(err, "against the unconstrained optimum"), "%s",
              err);
    cr_assert(strstr(err, "vllm (") && strstr(strstr(err, "vllm ("), "): ok;"), "%s", err);
    free(out), free(err);
}

typedef struct {
    char content[200];
    char args[12][24];
    int  status;
    char expect[2][64];
} cli_bad;

ParameterizedTestParameters(export, cli_bad_imports_and_refused_exports_leave_no_output)
{
    static cli_bad cases[] = {
        {"[[0], [1, 0]]", {"--import", "choices", "@IN"}, 65, {"in.txt", "prefix [1] is missing"}},
        {"[[0], [0]]", {"--import", "choices", "@IN"}, 65, {"in.txt", "both the path [0]"}},
        {"[[0], [-2]]", {"--import", "choices", "@IN"}, 65, {"in.txt", "negative rank"}},
        {"[[0], [1]", {"--import", "choices", "@IN"}, 65, {"in.txt: line 1", "end of the file"}},
        {"{\"roots\":[[0],[1]],\"branches\":[[2],[0]],\"Successors\":[[1],[]],\"mask\":[[1,0],[1,1]],"
         "\"depth\":[0,1],\"size\":2}", {"--import", "growmap", "@IN"}, 65,
         {"in.txt: branches[0][0]: 2", "has 1 successors"}},
        {"[[0], [1], [0, 0]]", {"--import", "choices", "@IN", "--export", "vllm"}, 65,
         {"in.txt: vllm: level 1", "k_1 x k_2"}},
        {"[[0], [1], [2], [3], [4], [5], [6], [7], [8], [9], [10]]",
         {"--import", "choices", "@IN", "--export", "medusa"}, 65, {"0-based rank 10"}},
        {"", {"--import", "choices", "@DIR/nope.txt"}, 66, {"nope.txt"}},
        {"", {"--import", "xml", "@IN"}, 64, {"--import", "unknown format 'xml'"}},
        {"", {"--export", "png"}, 64, {"--export", "unknown format 'png'"}},
        {"", {"--engine", "tgi"}, 64, {"--engine", "unknown engine"}},
        {"", {"--plan", "@IN", "--budget", "5", "--export", "dot"}, 64, {"--plan"}},
        {"[[0]]", {"--import", "choices", "@IN", "--engine", "vllm"}, 64, {"--engine"}},
        {"", {"-n", "300", "-d", "9", "--export", "trtllm", "--width", "2", "--max-non-leaves",
              "128"}, 0, {""}},
        {"", {"-n", "300", "-d", "10", "--export", "trtllm", "--width", "2"}, 65,
         {"9 tokens deep", "at most 8"}},
    };
    return cr_make_param_array(cli_bad, cases, sizeof cases / sizeof *cases);
}

static char *subst2(const char *s, const char *dir, const char *in)
{
    const char *tok = strstr(s, "@DIR") ? "@DIR" : strstr(s, "@IN") ? "@IN" : NULL;
    if (!tok)
        return strdup(s);
    const char *rep = tok[1] == 'D' ? dir : in;
    const char *at = strstr(s, tok);
    size_t n = strlen(s) + strlen(rep) + 1;
    char *r = malloc(n);
    snprintf(r, n, "%.*s%s%s", (int)(at - s), s, rep, at + strlen(tok));
    return r;
}

ParameterizedTest(cli_bad *cc, export, cli_bad_imports_and_refused_exports_leave_no_output)
{
    char *dir = tu_tmpdir();
    char *in = tu_path(dir, "in.txt"), *outp = tu_path(dir, "out.txt");
    int files = 0;
    if (cc->content[0]) {
        tu_write(in, cc->content);
        files = 1;
    }
    char *argv[20];
    int a = 0, nsub = 0;
    argv[a++] = (char *)bin();
    for (int i = 0; i < 12 && cc->args[i][0]; i++, nsub++)
        argv[a++] = subst2(cc->args[i], dir, in);
    argv[a++] = "-o";
    argv[a++] = outp;
    argv[a++] = "-q";
    argv[a] = NULL;
    char *out, *err;
    int rc = tu_run(argv, &out, &err);
    for (int i = 1; i <= nsub; i++)
        free(argv[i]);
    cr_assert_eq(rc, cc->status, "exit %d, expected %d: %s", rc, cc->status, err);
    for (int i = 0; i < 2; i++)
        if (cc->expect[i][0])
            cr_assert(strstr(err, cc->expect[i]), "'%s' lacks '%s'", err, cc->expect[i]);
    if (cc->status) {
        cr_assert(strstr(err, "sequoia-plan: "), "%s", err);
        cr_assert_not(tu_exists(outp), "no output on failure");
        cr_assert_eq(tu_count_entries(dir), files, "a stray file was left behind");
    } else {
        cr_assert(tu_exists(outp));
    }
    free(out), free(err);
    tu_rmtree(dir);
    free(dir), free(in), free(outp);
}

/* --engine solves the DP once: a caller's unconstrained solve, handed over in .solved, gives the
 * same tree as the engine's own solve, whether it is reused (the engine's width limit does not
 * bind) or not (it does, or the budget differs). */
Test(export, engine_plan_with_the_callers_solve_gives_the_same_tree)
{
    sq_engine engines[] = {SQ_ENGINE_TRTLLM, SQ_ENGINE_MEDUSA};
    int widths[] = {0, 4, 12, 20};
    for (int e = 0; e < 2; e++)
        for (int wi = 0; wi < 4; wi++)
            for (int depth = 3; depth <= 24; depth += 7) {
                sq_engine_plan_params p = sq_engine_plan_default_params();
                p.engine = engines[e];
                p.budget = 48;
                p.depth = depth;
                p.width = widths[wi];
                sq_engine_plan_result own, reused;
                sq_error err = {0};
                cr_assert_eq(sq_engine_plan(&p, &own, &err), 0, "%s", err.msg);
                p.solved = solve(p.budget, p.depth, p.width, NULL);
                cr_assert_eq(sq_engine_plan(&p, &reused, &err), 0, "%s", err.msg);
                cr_assert_eq(own.tree->n, reused.tree->n);
                for (int v = 0; v < own.tree->n; v++)
                    cr_assert(own.tree->parent[v] == reused.tree->parent[v] &&
                              own.tree->rank[v] == reused.tree->rank[v],
                              "engine %d width %d depth %d: node %d differs", e, widths[wi],
                              depth, v);
                cr_assert_eq(own.depth, reused.depth);
                cr_assert_eq(own.width, reused.width);
                cr_assert_eq(own.expected_tokens, reused.expected_tokens);
                sq_dp_free(p.solved);
                sq_tree_free(own.tree);
                sq_tree_free(reused.tree);
            }
}
