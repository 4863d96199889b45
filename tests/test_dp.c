/* The Sequoia DP against oracles: brute-force enumeration of every ordered tree up to 10 nodes,
 * the official solver's tables, the reference values of docs/design.md §3.1, and the plain
 * O(N²·D·B) solver (tests/dp_reference.c), which the fast one must equal bit for bit. */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "planner/baseline.h"
#include "libsequoia/format/curve.h"
#include "planner/dp.h"
#include "tests/dp_reference.h"
#include "libsequoia/base/json.h"
#include "libsequoia/format/plan.h"
#include "tests/testutil.h"

/* F(T) through the allocating form of sq_tree_expected_tokens (libsequoia/format/tree.h). */
static double tree_F(const sq_tree *t, const sq_curve *c)
{
    double F = 0;
    cr_assert_eq(sq_tree_score(t, c, &F, NULL), SQ_OK, "out of memory");
    return F;
}

#define MAXN 10

/* ---- brute force ------------------------------------------------------------------------ */

typedef struct {
    int n, depth, width;
    double f;
} shape;

static shape *shapes;
static int nshapes;

/* Decodes a Dyck word of length 2(n-1) into an ordered tree and scores it: '(' creates the next
 * child of the current node and descends, ')' climbs back. */
static shape score_word(const char *w, int n, const sq_curve *c)
{
    int parent[MAXN], kids[MAXN] = {0}, depth[MAXN];
    double f[MAXN];
    int cur = 0, next = 1, maxd = 0, maxw = 0;
    depth[0] = 0;
    f[0] = 1.0;
    double total = 1.0;
    for (int i = 0; w[i]; i++) {
        if (w[i] == '(') {
            int v = next++;
            parent[v] = cur;
            int rank = ++kids[cur];
            if (rank > maxw)
                maxw = rank;
            depth[v] = depth[cur] + 1;
            if (depth[v] > maxd)
                maxd = depth[v];
            f[v] = f[cur] * sq_curve_p(c, depth[v], rank);
            total += f[v];
            cur = v;
        } else {
            cur = parent[cur];
        }
    }
    return (shape){n, maxd + 1, maxw, total};
}

static void enumerate(char *w, int pos, int open, int len, int n, const sq_curve *c)
{
    if (pos == len) {
        w[pos] = '\0';
        shapes[nshapes++] = score_word(w, n, c);
        return;
    }
    int closed = pos - open;
    if (open < len / 2) {
        w[pos] = '(';
        enumerate(w, pos + 1, open + 1, len, n, c);
    }
    if (closed < open) {
        w[pos] = ')';
        enumerate(w, pos + 1, open, len, n, c);
    }
}

static void all_shapes(const sq_curve *c)
{
    /* Σ_{n=1..10} Catalan(n-1) = 6918 trees */
    shapes = realloc(shapes, 7000 * sizeof *shapes);
    nshapes = 0;
    char w[2 * MAXN + 1];
    for (int n = 1; n <= MAXN; n++)
        enumerate(w, 0, 0, 2 * (n - 1), n, c);
    cr_assert_eq(nshapes, 6918);
}

static void check_against_brute_force(const sq_curve *c)
{
    all_shapes(c);
    for (int B = 1; B <= MAXN - 1; B++) {
        sq_dp_params prm = {.budget = MAXN, .depth = MAXN, .width = B, .curve = c};
        sq_dp *dp;
        sq_error err = {0};
        cr_assert_eq(sq_dp_solve(&prm, &dp, &err), 0, "%s", err.msg);
        for (int n = 0; n <= MAXN; n++) {
            for (int d = 0; d <= MAXN; d++) {
                double brute = -INFINITY;
                for (int i = 0; i < nshapes; i++)
                    if (shapes[i].n == n && shapes[i].depth <= d && shapes[i].width <= B &&
                        shapes[i].f > brute)
                        brute = shapes[i].f;
                double got = sq_dp_best(dp, n, d);
                if (isinf(brute)) {
                    cr_assert(isinf(got) && got < 0, "n=%d d=%d B=%d: DP %g, no tree exists", n, d,
                              B, got);
                    continue;
                }
                cr_assert(fabs(got - brute) <= 1e-12, "n=%d d=%d B=%d: DP %.15g, brute force %.15g",
                          n, d, B, got, brute);
                /* the reconstructed tree is valid, within bounds, and worth what the DP says */
                sq_tree *t;
                cr_assert_eq(sq_dp_tree(dp, n, d, &t, &err), 0, "%s", err.msg);
                cr_assert_eq(t->n, n);
                cr_assert_eq(sq_tree_validate(t, "dp", &err), 0, "%s", err.msg);
                cr_assert_leq(sq_tree_depth(t), d);
                cr_assert_leq(sq_tree_max_children(t), B);
                cr_assert(fabs(tree_F(t, c) - got) <= 1e-12);
                sq_tree_free(t);
            }
        }
        sq_dp_free(dp);
    }
}

static void random_vector(unsigned seed, int w, double *p, double zero_frac)
{
    srand(seed);
    double s = 0;
    for (int i = 0; i < w; i++) {
        p[i] = (rand() / (double)RAND_MAX < zero_frac) ? 0.0 : rand() / (double)RAND_MAX;
        s += p[i];
    }
    double mass = 0.5 + 0.5 * rand() / (double)RAND_MAX; /* Σp in [0.5, 1] */
    for (int i = 0; i < w; i++)
        p[i] = s > 0 ? p[i] / s * mass : 0;
}

Test(dp, brute_force_on_appendix_e_vector)
{
    check_against_brute_force(sq_curve_default());
}

Test(dp, brute_force_on_random_vectors)
{
    /* widths shorter and longer than the tree, unsorted entries, zeros and exact ties */
    const int widths[] = {1, 3, 4, 7, 12};
    for (unsigned seed = 1; seed <= 10; seed++) {
        int w = widths[seed % 5];
        double p[12];
        random_vector(seed, w, p, seed % 3 == 0 ? 0.3 : 0.0);
        if (seed % 4 == 0 && w > 2)
            p[2] = p[1]; /* a tie */
        sq_curve c;
        sq_error err = {0};
        cr_assert_eq(sq_curve_init(&c, "random", "stochastic", p, w, &err), 0, "%s", err.msg);
        check_against_brute_force(&c);
        sq_curve_clear(&c);
    }
}

Test(dp, brute_force_with_depth_dependent_acceptance)
{
    for (unsigned seed = 100; seed < 104; seed++) {
        const int w = 4, rows = 1 + (int)(seed % 4);
        double p[4];
        random_vector(seed, w, p, 0.0);
        sq_curve c;
        sq_error err = {0};
        cr_assert_eq(sq_curve_init(&c, "bydepth", "stochastic", p, w, &err), 0);
        c.depth_rows = rows;
        c.p_by_depth = malloc(sizeof(double) * (size_t)(rows * w));
        for (int r = 0; r < rows; r++)
            random_vector(seed * 31 + (unsigned)r, w, c.p_by_depth + r * w, 0.0);
        check_against_brute_force(&c);
        sq_curve_clear(&c);
    }
}

/* ---- the official solver's tables ------------------------------------------------------- */

static void check_reference(const char *file, int drop_first)
{
    char *path = tu_source_path(file);
    cJSON *root;
    sq_error err = {0};
    cr_assert_eq(sq_json_load(path, &root, &err), 0, "%s", err.msg);
    const cJSON *pj = cJSON_GetObjectItem(root, "p");
    int w = cJSON_GetArraySize(pj) - drop_first;
    double *p = malloc(sizeof(double) * (size_t)w);
    for (int i = 0; i < w; i++)
        p[i] = cJSON_GetArrayItem(pj, i + drop_first)->valuedouble;
    sq_curve c;
    cr_assert_eq(sq_curve_init(&c, "ref", "stochastic", p, w, &err), 0, "%s", err.msg);
    sq_dp_params prm = {.budget = 128, .depth = 10, .width = 0, .curve = &c};
    sq_dp *dp;
    cr_assert_eq(sq_dp_solve(&prm, &dp, &err), 0, "%s", err.msg);
    const cJSON *res = cJSON_GetObjectItem(root, "results");
    int checked = 0;
    for (int n = 0; n <= 128; n++) {
        const cJSON *row = cJSON_GetArrayItem(res, n);
        for (int d = 0; d <= 10; d++) {
            const cJSON *v = cJSON_GetArrayItem(row, d);
            double got = sq_dp_best(dp, n, d);
            if (cJSON_IsNull(v)) {
                cr_assert(isinf(got), "%s: n=%d d=%d: official null, ours %g", file, n, d, got);
            } else {
                cr_assert(fabs(got - v->valuedouble) <= 2e-4, "%s: n=%d d=%d: official %.6f, ours %.6f",
                          file, n, d, v->valuedouble, got);
                checked++;
            }
        }
    }
    cr_assert_gt(checked, 1000);
    sq_dp_free(dp);
    sq_curve_clear(&c);
    free(p);
    cJSON_Delete(root);
    free(path);
}

Test(dp, matches_official_table_for_appendix_e_vector)
{
    check_reference("tests/data/reference/official_appe_table.json", 0);
}

Test(dp, matches_official_table_for_shipped_demo_vector)
{
    /* p[0] is the official solver's unused slot */
    check_reference("tests/data/reference/official_demo_table.json", 1);
}

typedef struct {
    int n, d;
    double expect; /* NAN: no tree */
} ref_value;

ParameterizedTestParameters(dp, design_reference_values)
{
    static ref_value v[] = {
        {128, 10, 6.3194}, {64, 10, 5.7392}, {16, 10, 4.5234},
        {8, 5, 3.4553},    {4, 4, 2.8333},   {64, 2, NAN},
    };
    return cr_make_param_array(ref_value, v, sizeof v / sizeof *v);
}

ParameterizedTest(ref_value *v, dp, design_reference_values)
{
    sq_dp_params prm = sq_dp_default_params();
    sq_dp *dp;
    sq_error err = {0};
    cr_assert_eq(sq_dp_solve(&prm, &dp, &err), 0, "%s", err.msg);
    double got = sq_dp_best(dp, v->n, v->d);
    if (isnan(v->expect))
        cr_assert(isinf(got) && got < 0, "Best[%d][%d] should not exist, got %g", v->n, v->d, got);
    else
        cr_assert(fabs(got - v->expect) < 5e-5, "Best[%d][%d] = %.6f, expected %.4f", v->n, v->d,
                  got, v->expect);
    sq_dp_free(dp);
}

/* ---- structure, limits, determinism ------------------------------------------------------- */

Test(dp, best_is_monotone_in_size_and_depth)
{
    sq_dp_params prm = sq_dp_default_params();
    prm.budget = 200;
    prm.depth = 12;
    sq_dp *dp;
    sq_error err = {0};
    cr_assert_eq(sq_dp_solve(&prm, &dp, &err), 0);
    for (int n = 1; n <= 200; n++)
        for (int d = 1; d <= 12; d++) {
            double v = sq_dp_best(dp, n, d);
            if (!isfinite(v))
                continue;
            cr_assert_geq(sq_dp_best(dp, n, d + 1), v);
            /* when n+1 nodes fit at all, the optimal n-tree is not full and can take a leaf */
            double next = sq_dp_best(dp, n + 1, d);
            if (n < 200 && isfinite(next))
                cr_assert_geq(next, v, "Best[%d][%d] < Best[%d][%d]", n + 1, d, n, d);
        }
    sq_dp_free(dp);
}

Test(dp, optimal_tree_beats_chain_and_k_by_l)
{
    const sq_curve *c = sq_curve_default();
    sq_dp_params prm = sq_dp_default_params();
    sq_dp *dp;
    sq_error err = {0};
    cr_assert_eq(sq_dp_solve(&prm, &dp, &err), 0);
    int len, k, L;
    double chain = sq_baseline_chain(c, 128, 10, &len);
    double kxl = sq_baseline_kxl(c, 128, 10, 31, &k, &L);
    cr_assert_eq(len, 10);
    /* the chain is itself a tree of size 10 and depth 10: the DP must be at least as good */
    cr_assert_geq(sq_dp_best(dp, 10, 10) + 1e-12, chain);
    cr_assert_geq(sq_dp_best(dp, 1 + k * L, 10) + 1e-12, kxl);
    /* closed form of the chain: Σ p1^i */
    double expect = 0, f = 1;
    for (int i = 0; i < 10; i++, f *= c->p[0])
        expect += f;
    cr_assert(fabs(chain - expect) < 1e-12);
    sq_dp_free(dp);
}

Test(dp, refuses_requests_past_the_limits_at_once)
{
    sq_error err = {0};
    sq_dp_params prm = sq_dp_default_params();
    prm.budget = 1000000;
    prm.depth = 1000;
    sq_dp *dp = NULL;
    cr_assert_eq(sq_dp_solve(&prm, &dp, &err), SQ_EUSAGE);
    cr_assert_null(dp);
    cr_assert(strstr(err.msg, "limit"), "%s", err.msg);

    /* issue 17's sizes are inside the limits; one step past the cells limit is refused, and
     * the message gives the limit */
    sq_error ok = {0};
    prm = (sq_dp_params){.budget = 16384, .depth = 64, .width = 64, .curve = sq_curve_default()};
    cr_assert_eq(sq_dp_check(&prm, &ok), 0, "%s", ok.msg);
    prm.budget = 4096;
    cr_assert_eq(sq_dp_check(&prm, &ok), 0, "%s", ok.msg);
    prm = (sq_dp_params){.budget = 16384, .depth = 64, .width = 128, .curve = sq_curve_default()};
    sq_error past = {0};
    cr_assert_eq(sq_dp_solve(&prm, &dp, &past), SQ_EUSAGE);
    cr_assert_null(dp);
    char limit[32];
    snprintf(limit, sizeof limit, "%lld", (long long)SQ_DP_MAX_CELLS);
    cr_assert(strstr(past.msg, limit), "%s", past.msg);
    /* the work limit: cells within bounds, but N²·D·B/2 past it */
    prm = (sq_dp_params){.budget = 1 << 20, .depth = 2, .width = 2, .curve = sq_curve_default()};
    sq_error past2 = {0};
    cr_assert_eq(sq_dp_check(&prm, &past2), SQ_EUSAGE);
    snprintf(limit, sizeof limit, "%lld", (long long)SQ_DP_MAX_WORK);
    cr_assert(strstr(past2.msg, limit), "%s", past2.msg);

    sq_error err2 = {0};
    prm = sq_dp_default_params();
    prm.budget = 0;
    cr_assert_eq(sq_dp_check(&prm, &err2), SQ_EUSAGE);
    cr_assert(strstr(err2.msg, "budget: 0"), "%s", err2.msg);
}

Test(dp, depth_and_width_beyond_the_budget_are_unbounded)
{
    /* D = N and B = N-1 make the bounds vacuous (docs/design.md §3.1); larger values give the
     * same solve */
    sq_error err = {0};
    sq_dp *a, *b;
    sq_dp_params pa = {.budget = 40, .depth = 40, .width = 39, .curve = sq_curve_default()};
    sq_dp_params pb = {.budget = 40, .depth = 4000, .width = 4000, .curve = sq_curve_default()};
    cr_assert_eq(sq_dp_solve(&pa, &a, &err), 0);
    cr_assert_eq(sq_dp_solve(&pb, &b, &err), 0);
    for (int n = 0; n <= 40; n++)
        cr_assert_eq(sq_dp_best(a, n, 40), sq_dp_best(b, n, 4000));
    sq_dp_free(a);
    sq_dp_free(b);
}

Test(dp, same_input_gives_byte_identical_plan)
{
    char *text[2];
    for (int r = 0; r < 2; r++) {
        sq_dp_params prm = sq_dp_default_params();
        sq_dp *dp;
        sq_tree *t;
        sq_plan *plan;
        sq_error err = {0};
        cr_assert_eq(sq_dp_solve(&prm, &dp, &err), 0);
        cr_assert_eq(sq_dp_tree(dp, 128, 10, &t, &err), 0);
        cr_assert_eq(sq_plan_new(t, prm.curve, 128, 10, 31, &plan, &err), 0);
        cJSON *j = sq_plan_to_json(plan);
        text[r] = sq_json_to_string(j, NULL);
        cJSON_Delete(j);
        sq_plan_free(plan);
        sq_dp_free(dp);
    }
    cr_assert_str_eq(text[0], text[1]);
    free(text[0]);
    free(text[1]);
}

Test(dp, ties_go_to_better_ranked_children)
{
    /* all ranks equal: every child subtree is worth the same, the rule must still pick one
     * deterministically with non-increasing subtree sizes by rank (0.25 keeps the sums exact,
     * so the ties are real ties) */
    double p[4] = {0.25, 0.25, 0.25, 0.25};
    sq_curve c;
    sq_error err = {0};
    cr_assert_eq(sq_curve_init(&c, "flat", "stochastic", p, 4, &err), 0);
    sq_dp_params prm = {.budget = 30, .depth = 5, .width = 0, .curve = &c};
    sq_dp *dp;
    sq_tree *t;
    cr_assert_eq(sq_dp_solve(&prm, &dp, &err), 0);
    cr_assert_eq(sq_dp_tree(dp, 30, 5, &t, &err), 0);
    /* subtree sizes */
    int size[30];
    for (int i = 0; i < 30; i++)
        size[i] = 1;
    for (int i = 29; i > 0; i--)
        size[t->parent[i]] += size[i];
    for (int i = 2; i < 30; i++)
        if (t->parent[i] == t->parent[i - 1])
            cr_assert_geq(size[i - 1], size[i], "node %d (rank %d) has a smaller subtree than its "
                          "next sibling", i - 1, t->rank[i - 1]);
    sq_tree_free(t);
    sq_dp_free(dp);
    sq_curve_clear(&c);
}

/* sq_dp_best_size against the definition: the smallest n whose Best[n][d] is the maximum over
 * n <= budget, for random curves, depths and widths (small widths make the budget unreachable). */
Test(dp, best_size_is_the_smallest_size_reaching_the_best_value)
{
    srand(12);
    for (int trial = 0; trial < 60; trial++) {
        double p[6];
        int W = 1 + rand() % 6;
        double sum = 0;
        for (int k = 0; k < W; k++)
            sum += p[k] = (k ? p[k - 1] : 1.0) * (0.1 + 0.8 * rand() / (double)RAND_MAX);
        for (int k = 0; k < W; k++)   /* a verifier accepts at most one child: sum <= 1 */
            p[k] /= sum * (1.0 + rand() / (double)RAND_MAX);
        sq_curve c;
        sq_error err = {0};
        cr_assert_eq(sq_curve_init(&c, "r", "stochastic", p, W, &err), 0, "%s", err.msg);
        sq_dp_params prm = sq_dp_default_params();
        prm.curve = &c;
        prm.budget = 1 + rand() % 40;
        prm.depth = 1 + rand() % 6;
        prm.width = 1 + rand() % 3;
        sq_dp *dp;
        cr_assert_eq(sq_dp_solve(&prm, &dp, &err), 0, "%s", err.msg);
        for (int d = 1; d <= sq_dp_depth(dp); d++) {
            double best = -INFINITY;
            for (int n = 1; n <= prm.budget; n++)
                best = fmax(best, sq_dp_best(dp, n, d));
            int expect = 1;
            while (sq_dp_best(dp, expect, d) != best)
                expect++;
            cr_assert_eq(sq_dp_best_size(dp, d), expect, "budget %d depth %d width %d, d %d",
                         prm.budget, prm.depth, prm.width, d);
        }
        sq_dp_free(dp);
        sq_curve_clear(&c);
    }
}

/* ---- the fast solver equals the plain one, bit for bit ------------------------------------ */

/* Both solvers on the same parameters: every Best[n][d] bitwise, d up to one past the bound,
 * and, when trees is set, the optimal tree of every feasible (n, d) node for node. */
static void expect_same(const sq_dp_params *prm, int trees, const char *what)
{
    sq_dp *f;
    sq_dpref *r;
    sq_error err = {0};
    cr_assert_eq(sq_dp_solve(prm, &f, &err), 0, "%s: %s", what, err.msg);
    cr_assert_eq(sq_dpref_solve(prm, &r, &err), 0, "%s: %s", what, err.msg);
    const int N = sq_dp_budget(f), D = sq_dp_depth(f);
    for (int d = 0; d <= D + 1; d++)
        for (int n = 0; n <= N; n++) {
            double a = sq_dp_best(f, n, d), b = sq_dpref_best(r, n, d);
            cr_assert(memcmp(&a, &b, sizeof a) == 0, "%s: Best[%d][%d] fast %.17g, plain %.17g",
                      what, n, d, a, b);
        }
    if (trees) {
        for (int d = 1; d <= D; d++)
            for (int n = 1; n <= N; n++) {
                if (!isfinite(sq_dp_best(f, n, d)))
                    continue;
                sq_tree *ta, *tb;
                cr_assert_eq(sq_dp_tree(f, n, d, &ta, &err), 0, "%s: %s", what, err.msg);
                cr_assert_eq(sq_dpref_tree(r, n, d, &tb, &err), 0, "%s: %s", what, err.msg);
                cr_assert_eq(ta->n, tb->n);
                for (int i = 0; i < n; i++)
                    cr_assert(ta->parent[i] == tb->parent[i] && ta->rank[i] == tb->rank[i],
                              "%s: tree n=%d d=%d differs at node %d", what, n, d, i);
                sq_tree_free(ta);
                sq_tree_free(tb);
            }
    }
    sq_dp_free(f);
    sq_dpref_free(r);
}

Test(dp, fast_equals_plain_on_every_size_and_depth_up_to_512_and_24)
{
    /* the App. E vector at every (n <= 512, d <= 24), values and trees, at its own width, a
     * narrow one, and one past its 31 ranks (zero p) */
    const int widths[] = {0, 4, 64};
    for (int i = 0; i < 3; i++) {
        sq_dp_params prm = {.budget = 512, .depth = 24, .width = widths[i],
                            .curve = sq_curve_default(), .threads = 1 + i % 2};
        char what[64];
        snprintf(what, sizeof what, "App. E, 512/24/%d", widths[i]);
        expect_same(&prm, 1, what);
    }
}

Test(dp, fast_equals_plain_on_large_solves)
{
    /* where the skipping and the depth saturation do the most: values everywhere, trees at the
     * bounds */
    sq_dp_params prm = {.budget = 1024, .depth = 32, .width = 32, .curve = sq_curve_default(),
                        .threads = 2};
    expect_same(&prm, 0, "App. E, 1024/32/32");
    sq_dp *f;
    sq_dpref *r;
    sq_error err = {0};
    cr_assert_eq(sq_dp_solve(&prm, &f, &err), 0);
    cr_assert_eq(sq_dpref_solve(&prm, &r, &err), 0);
    cr_assert_gt(sq_dp_saturation(f), 0, "the App. E table should stop changing before depth 32");
    for (int d = 1; d <= 32; d += 31) {
        sq_tree *ta, *tb;
        cr_assert_eq(sq_dp_tree(f, 1024, d == 1 ? 32 : d, &ta, &err), 0);
        cr_assert_eq(sq_dpref_tree(r, 1024, d == 1 ? 32 : d, &tb, &err), 0);
        cr_assert_eq(memcmp(ta->parent, tb->parent, 1024 * sizeof *ta->parent), 0);
        cr_assert_eq(memcmp(ta->rank, tb->rank, 1024 * sizeof *ta->rank), 0);
        sq_tree_free(ta);
        sq_tree_free(tb);
    }
    sq_dp_free(f);
    sq_dpref_free(r);
}

static void load_reference_curve(const char *file, int drop_first, sq_curve *c)
{
    char *path = tu_source_path(file);
    cJSON *root;
    sq_error err = {0};
    cr_assert_eq(sq_json_load(path, &root, &err), 0, "%s", err.msg);
    const cJSON *pj = cJSON_GetObjectItem(root, "p");
    int w = cJSON_GetArraySize(pj) - drop_first;
    double *p = malloc(sizeof(double) * (size_t)w);
    for (int i = 0; i < w; i++)
        p[i] = cJSON_GetArrayItem(pj, i + drop_first)->valuedouble;
    cr_assert_eq(sq_curve_init(c, "ref", "stochastic", p, w, &err), 0, "%s", err.msg);
    free(p);
    cJSON_Delete(root);
    free(path);
}

Test(dp, fast_equals_plain_on_the_official_reference_vectors)
{
    const char *files[] = {"tests/data/reference/official_appe_table.json",
                           "tests/data/reference/official_demo_table.json"};
    for (int i = 0; i < 2; i++) {
        sq_curve c;
        load_reference_curve(files[i], i, &c);
        /* the official tables' own bounds, then larger ones */
        sq_dp_params a = {.budget = 128, .depth = 10, .width = 0, .curve = &c, .threads = 1};
        expect_same(&a, 1, files[i]);
        sq_dp_params b = {.budget = 400, .depth = 20, .width = 0, .curve = &c, .threads = 2};
        expect_same(&b, 1, files[i]);
        sq_curve_clear(&c);
    }
}

/* A random curve of one of five kinds: sorted (power-law-like), unsorted, with zeros, with
 * exact ties (multiples of 1/64), or depth-dependent. */
static void random_curve(unsigned seed, sq_curve *c, int *kind_out)
{
    srand(seed);
    const int kind = (int)(seed % 5);
    const int w = 1 + rand() % 70;
    double *p = malloc(sizeof(double) * (size_t)w);
    if (kind == 3) {
        int left = 64;
        for (int i = 0; i < w; i++) {
            int k = left > 0 ? rand() % (left < 6 ? left + 1 : 6) : 0;
            left -= k;
            p[i] = k / 64.0;
        }
    } else {
        random_vector(seed * 7u + 1u, w, p, kind == 2 ? 0.4 : 0.0);
        if (kind == 0) {
            /* sorted, decreasing */
            for (int i = 1; i < w; i++)
                for (int j = i; j > 0 && p[j] > p[j - 1]; j--) {
                    double t = p[j];
                    p[j] = p[j - 1];
                    p[j - 1] = t;
                }
        }
    }
    sq_error err = {0};
    cr_assert_eq(sq_curve_init(c, "random", "stochastic", p, w, &err), 0, "seed %u: %s", seed,
                 err.msg);
    if (kind == 4) {
        const int rows = 1 + rand() % 6;
        c->depth_rows = rows;
        c->p_by_depth = malloc(sizeof(double) * (size_t)(rows * w));
        for (int r = 0; r < rows; r++)
            random_vector(seed * 31u + (unsigned)r, w, c->p_by_depth + (size_t)r * (size_t)w,
                          r % 2 ? 0.3 : 0.0);
    }
    free(p);
    *kind_out = kind;
}

Test(dp, fast_equals_plain_on_1000_random_curves, .timeout = 600)
{
    int kinds[5] = {0};
    for (unsigned seed = 1; seed <= 1000; seed++) {
        sq_curve c;
        int kind;
        random_curve(seed, &c, &kind);
        kinds[kind]++;
        srand(seed * 2654435761u);
        const int big = kind == 4 ? 90 : 260;
        sq_dp_params prm = {.budget = 2 + rand() % big, .depth = 1 + rand() % (kind == 4 ? 10 : 24),
                            .width = rand() % 3 ? 0 : 1 + rand() % 70, .curve = &c,
                            .threads = 1 + rand() % 3};
        char what[96];
        snprintf(what, sizeof what, "seed %u (kind %d, %d/%d/%d, %d rows)", seed, kind,
                 prm.budget, prm.depth, prm.width, c.depth_rows);
        /* trees for one curve in four (every feasible cell); values for all */
        expect_same(&prm, seed % 4 == 0, what);
        sq_curve_clear(&c);
    }
    for (int k = 0; k < 5; k++)
        cr_assert_eq(kinds[k], 200);
}

Test(dp, result_does_not_depend_on_the_thread_count)
{
    sq_dp_params prm = {.budget = 2000, .depth = 20, .width = 40, .curve = sq_curve_default()};
    sq_dp *one, *many;
    sq_error err = {0};
    prm.threads = 1;
    cr_assert_eq(sq_dp_solve(&prm, &one, &err), 0);
    prm.threads = 3;
    cr_assert_eq(sq_dp_solve(&prm, &many, &err), 0);
    for (int d = 0; d <= 20; d++)
        for (int n = 0; n <= 2000; n++) {
            double a = sq_dp_best(one, n, d), b = sq_dp_best(many, n, d);
            cr_assert(memcmp(&a, &b, sizeof a) == 0, "Best[%d][%d]", n, d);
        }
    sq_tree *ta, *tb;
    cr_assert_eq(sq_dp_tree(one, 2000, 20, &ta, &err), 0);
    cr_assert_eq(sq_dp_tree(many, 2000, 20, &tb, &err), 0);
    cr_assert_eq(memcmp(ta->parent, tb->parent, 2000 * sizeof *ta->parent), 0);
    cr_assert_eq(memcmp(ta->rank, tb->rank, 2000 * sizeof *ta->rank), 0);
    sq_tree_free(ta);
    sq_tree_free(tb);
    sq_dp_free(one);
    sq_dp_free(many);
}

Test(dp, fast_equals_plain_where_splits_tie_exactly)
{
    /* flat and dyadic curves make many splits worth exactly the same: the smallest one must win
     * in the skipping solver too, including at block bounds equal to the incumbent */
    const double flat[][6] = {{0.25, 0.25, 0.25, 0.25, 0, 0},
                              {0.5, 0.25, 0.125, 0.0625, 0.03125, 0.015625},
                              {0.125, 0.125, 0.125, 0.125, 0.125, 0.125},
                              {0.5, 0.5, 0, 0, 0, 0}};
    for (int i = 0; i < 4; i++) {
        sq_curve c;
        sq_error err = {0};
        cr_assert_eq(sq_curve_init(&c, "ties", "stochastic", flat[i], 6, &err), 0, "%s", err.msg);
        for (int D = 3; D <= 12; D += 9) {
            sq_dp_params prm = {.budget = 600, .depth = D, .width = 0, .curve = &c,
                                .threads = 1 + i % 2};
            char what[64];
            snprintf(what, sizeof what, "tie curve %d, 600/%d", i, D);
            expect_same(&prm, 1, what);
        }
        sq_curve_clear(&c);
    }
}
