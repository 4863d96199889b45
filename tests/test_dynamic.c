/* Suite 'dynamic': the engines' dynamic trees (issue 26): the envelope rules, the Monte-Carlo
 * predictor against exact oracles, the cost per round and the envelope search against exhaustive
 * evaluation, the dynamic plan file, and the tools (sequoia-accept's "dynamic" key,
 * sequoia-plan --engine sglang|trtllm-dynamic). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "libsequoia/base/json.h"
#include "libsequoia/format/corpus.h"
#include "libsequoia/format/dynplan.h"
#include "planner/dynamic.h"
#include "tests/testutil.h"

/* ---- rules -------------------------------------------------------------------------------------- */

Test(dynamic, envelope_rules_name_the_rule_and_the_engine)
{
    sq_error e = {0};
    /* SGLang: N - 1 <= K + (L - 1) K^2 */
    cr_assert_eq(sq_dyn_envelope_check(SQ_ENGINE_SGLANG, 5, 4, 16, "--envelope", &e), 0);
    cr_assert_eq(sq_dyn_envelope_check(SQ_ENGINE_SGLANG, 2, 2, 7, "x", &e), 0);   /* 6 = 2 + 4 */
    e = (sq_error){0};
    cr_assert_eq(sq_dyn_envelope_check(SQ_ENGINE_SGLANG, 2, 2, 8, "--envelope 2,2,8", &e),
                 SQ_EUSAGE);
    cr_assert(strstr(e.msg, "N - 1 <= K + (L - 1) K^2") && strstr(e.msg, "SGLang") &&
              strstr(e.msg, "--envelope 2,2,8"), "%s", e.msg);
    /* SGLang K = 1: a chain */
    cr_assert_eq(sq_dyn_envelope_check(SQ_ENGINE_SGLANG, 3, 1, 4, NULL, NULL), 0);
    e = (sq_error){0};
    cr_assert_eq(sq_dyn_envelope_check(SQ_ENGINE_SGLANG, 3, 1, 3, NULL, &e), SQ_EUSAGE);
    cr_assert(strstr(e.msg, "K = 1") && strstr(e.msg, "SGLang"), "%s", e.msg);
    /* TensorRT-LLM: L <= N - 1 <= K L */
    cr_assert_eq(sq_dyn_envelope_check(SQ_ENGINE_TRTLLM_DYNAMIC, 3, 4, 13, NULL, NULL), 0);
    e = (sq_error){0};
    cr_assert_eq(sq_dyn_envelope_check(SQ_ENGINE_TRTLLM_DYNAMIC, 3, 4, 14, NULL, &e), SQ_EUSAGE);
    cr_assert(strstr(e.msg, "N - 1 <= K L") && strstr(e.msg, "TensorRT-LLM"), "%s", e.msg);
    e = (sq_error){0};
    cr_assert_eq(sq_dyn_envelope_check(SQ_ENGINE_TRTLLM_DYNAMIC, 4, 4, 4, NULL, &e), SQ_EUSAGE);
    cr_assert(strstr(e.msg, "N - 1 >= L"), "%s", e.msg);
    /* both: K = 0, L = 0, N = 1 */
    int bad[][3] = {{3, 0, 4}, {0, 2, 3}, {2, 2, 1}};
    for (int i = 0; i < 3; i++)
        for (int g = 0; g < 2; g++) {
            e = (sq_error){0};
            cr_assert_eq(sq_dyn_envelope_check(g ? SQ_ENGINE_TRTLLM_DYNAMIC : SQ_ENGINE_SGLANG,
                                               bad[i][0], bad[i][1], bad[i][2], NULL, &e),
                         SQ_EUSAGE);
            cr_assert(strstr(e.msg, "K >= 1"), "%s", e.msg);
        }
    /* a static-tree engine */
    e = (sq_error){0};
    cr_assert_eq(sq_dyn_envelope_check(SQ_ENGINE_VLLM, 3, 2, 5, NULL, &e), SQ_EUSAGE);
    cr_assert(strstr(e.msg, "static trees"), "%s", e.msg);
    /* the format's function is the same rule (the runtime calls it) */
    cr_assert_eq(sq_dynplan_envelope_check("sglang", 2, 2, 8, NULL, NULL), SQ_EUSAGE);
    cr_assert_eq(sq_dynplan_envelope_check("trtllm-dynamic", 2, 2, 5, NULL, NULL), 0);
}

/* ---- an independent implementation of the engine's tree, for the oracles -------------------- */

#define OMAX 512

typedef struct onode {
    double score;
    int level, parent, rank;   /* parent: index into the node list (-1: the root)        */
    int sample;                /* whose draft probabilities its children get (-1: n/a)    */
} onode;

/* Builds the engine's candidates from a function giving each expanded node's sorted draft
 * probabilities, then marks the N - 1 best (score desc, ties to the earlier candidate). The
 * candidates are listed level by level, each level's in (kept parent order, rank) order. */
typedef const double *(*qfun)(void *user, int node, const onode *nodes);

static int oracle_tree(int L, int K, int N, const double *root_q, qfun q, void *user,
                       onode *nodes, int *in_tree)
{
    int n = 0, kept[16], nk = 0;
    for (int k = 0; k < K; k++) {
        nodes[n] = (onode){root_q[k], 1, -1, k, -1};
        kept[nk++] = n++;
    }
    for (int l = 2; l <= L; l++) {
        int first = n;
        for (int i = 0; i < nk; i++) {
            const double *qp = q(user, kept[i], nodes);
            for (int k = 0; k < K; k++)
                nodes[n++] = (onode){nodes[kept[i]].score * qp[k], l, kept[i], k, -1};
        }
        /* the K best of this level, best first (ties: earlier) */
        nk = 0;
        int used[OMAX] = {0};
        for (int t = 0; t < K; t++) {
            int b = -1;
            for (int j = first; j < n; j++)
                if (!used[j] && (b < 0 || nodes[j].score > nodes[b].score))
                    b = j;
            used[b] = 1;
            kept[nk++] = b;
        }
    }
    for (int j = 0; j < n; j++) {
        int before = 0;
        for (int i = 0; i < n; i++)
            before += nodes[i].score > nodes[j].score ||
                      (nodes[i].score == nodes[j].score && i < j);
        in_tree[j] = before < N - 1;
    }
    return n;
}

/* A context-free world: every node's draft probabilities are q, every rank r is accepted with
 * probability a[r] (topk: the target's probability of the r-th draft token). Then
 * E = 1 + sum over tree nodes of the product of a along the path (exact). */
static const double *cf_q(void *user, int node, const onode *nodes)
{
    (void)node;
    (void)nodes;
    return user;
}

static double context_free_exact(int L, int K, int N, const double *q, const double *a)
{
    onode nodes[OMAX];
    int in[OMAX];
    int n = oracle_tree(L, K, N, q, cf_q, (void *)q, nodes, in);
    double E = 1;
    for (int j = 0; j < n; j++) {
        if (!in[j])
            continue;
        double p = 1;
        for (int v = j; v >= 0; v = nodes[v].parent)
            p *= a[nodes[v].rank];
        E += p;
    }
    return E;
}

static sq_dyn_samples *uniform_samples(int n, int K, const double *q, const double *a)
{
    double *Q = malloc((size_t)n * K * sizeof *Q), *A = malloc((size_t)n * K * sizeof *A);
    for (int i = 0; i < n; i++) {
        memcpy(Q + (size_t)i * K, q, (size_t)K * sizeof *q);
        memcpy(A + (size_t)i * K, a, (size_t)K * sizeof *a);
    }
    int seg[1] = {n};
    sq_dyn_samples *s = NULL;
    sq_error e = {0};
    cr_assert_eq(sq_dyn_samples_new(n, K, Q, A, seg, 1, &s, &e), 0, "%s", e.msg);
    free(Q);
    free(A);
    return s;
}

Test(dynamic, predictor_matches_the_exact_value_of_a_context_free_draft)
{
    const double q[4] = {0.55, 0.25, 0.12, 0.05};
    const double a[4] = {0.45, 0.2, 0.1, 0.05};   /* target-only sampling */
    sq_dyn_samples *s = uniform_samples(64, 4, q, a);
    int env[][3] = {{1, 2, 3}, {2, 2, 5}, {3, 3, 10}, {4, 2, 9}, {3, 4, 20}, {5, 3, 16}};
    sq_dyn_predict_params p = {.trials = 40000, .seed = 3, .method = SQ_DYN_METHOD_ROOTS};
    for (size_t i = 0; i < sizeof env / sizeof *env; i++) {
        int L = env[i][0], K = env[i][1], N = env[i][2];
        double E, se, exact = context_free_exact(L, K, N, q, a);
        sq_error e = {0};
        cr_assert_eq(sq_dyn_predict(s, L, K, N, &p, &E, &se, NULL, &e), 0, "%s", e.msg);
        cr_expect(fabs(E - exact) <= 4 * se + 1e-9, "L %d K %d N %d: %.5f ± %.5f, exact %.5f",
                  L, K, N, E, se, exact);
    }
    sq_dyn_samples_free(s);
    /* greedy: the target's argmax is rank 1 with probability 1 -> deterministic */
    const double g[4] = {1, 0, 0, 0};
    s = uniform_samples(16, 4, q, g);
    for (size_t i = 0; i < sizeof env / sizeof *env; i++) {
        int L = env[i][0], K = env[i][1], N = env[i][2];
        double E, se;
        cr_assert_eq(sq_dyn_predict(s, L, K, N, &p, &E, &se, NULL, NULL), 0);
        cr_expect_float_eq(E, context_free_exact(L, K, N, q, g), 1e-12, "L %d K %d N %d", L, K,
                           N);
        cr_expect_eq(se, 0);
    }
    sq_dyn_samples_free(s);
}

/* An exact enumeration for L = 2 with varying positions: three consecutive samples (a segment),
 * roots 0 and 1 (each has a successor), the on-path child at the next sample, off-path nodes at
 * a uniformly drawn sample, the accepted ranks drawn from the acceptance vectors. */
typedef struct enum_ctx {
    const double *q, *a;
    int K;
    int sample_of_l1[16];   /* the sample whose probabilities each level-1 node's children get */
} enum_ctx;

static const double *enum_q(void *user, int node, const onode *nodes)
{
    (void)nodes;
    enum_ctx *c = user;
    return c->q + (size_t)c->sample_of_l1[node] * c->K;
}

static double enumerate_L2(const double *q, const double *a, int K, int N)
{
    const int S = 3;
    double total = 0;
    for (int root = 0; root < 2; root++) {
        double rest = 1;
        for (int k = 0; k < K; k++)
            rest -= a[root * K + k];
        for (int tr = -1; tr < K; tr++) {
            double ptr = tr < 0 ? rest : a[root * K + tr];
            if (ptr <= 0)
                continue;
            /* each off-path level-1 node draws a sample; enumerate all combinations */
            int n_off = tr < 0 ? K : K - 1, combos = 1;
            for (int i = 0; i < n_off; i++)
                combos *= S;
            for (int cmb = 0; cmb < combos; cmb++) {
                enum_ctx c = {q, a, K, {0}};
                int x = cmb;
                for (int k = 0; k < K; k++) {
                    if (k == tr)
                        c.sample_of_l1[k] = root + 1;
                    else {
                        c.sample_of_l1[k] = x % S;
                        x /= S;
                    }
                }
                double pc = ptr / combos;
                /* the path's rank at level 2: drawn at sample root + 1 */
                int nx = root + 1;
                double rest2 = 1;
                for (int k = 0; k < K; k++)
                    rest2 -= a[nx * K + k];
                for (int t2 = -1; t2 < K; t2++) {
                    double p2 = tr < 0 ? (t2 < 0 ? 1 : 0) : t2 < 0 ? rest2 : a[nx * K + t2];
                    if (p2 <= 0)
                        continue;
                    onode nodes[OMAX];
                    int in[OMAX];
                    int n = oracle_tree(2, K, N, q + (size_t)root * K, enum_q, &c, nodes, in);
                    int len = 0;
                    if (tr >= 0 && in[tr]) {
                        len = 1;
                        for (int j = K; j < n && t2 >= 0; j++)
                            if (nodes[j].parent == tr && nodes[j].rank == t2 && in[j])
                                len = 2;
                    }
                    total += 0.5 * pc * p2 * (1 + len);
                }
            }
        }
    }
    return total;
}

Test(dynamic, predictor_matches_an_exact_enumeration_over_positions)
{
    enum { K = 2 };
    const double q[3 * K] = {0.7, 0.2, 0.5, 0.45, 0.9, 0.05};
    const double a[3 * K] = {0.6, 0.15, 0.3, 0.4, 0.8, 0.1};
    int seg[1] = {3};
    sq_dyn_samples *s = NULL;
    cr_assert_eq(sq_dyn_samples_new(3, K, q, a, seg, 1, &s, NULL), 0);
    sq_dyn_predict_params p = {.trials = 200000, .seed = 11, .method = SQ_DYN_METHOD_ROOTS};
    for (int N = 2; N <= 1 + K + K * K; N++) {
        double E, se, exact = enumerate_L2(q, a, K, N);
        cr_assert_eq(sq_dyn_predict(s, 2, K, N, &p, &E, &se, NULL, NULL), 0);
        cr_expect(fabs(E - exact) <= 4 * se + 1e-9, "N %d: %.5f ± %.5f, exact %.5f", N, E, se,
                  exact);
    }
    sq_dyn_samples_free(s);
}

Test(dynamic, the_text_path_is_the_drawn_path_on_greedy_text)
{
    /* greedy acceptance vectors whose argmax rank is the text's next token: both paths agree
     * trial by trial (they consume the same random numbers) */
    enum { n = 40, K = 3 };
    double q[n * K], a[n * K];
    unsigned x = 5;
    sq_dyn_samples *s = NULL;
    for (int i = 0; i < n; i++) {
        x = x * 1103515245u + 12345u;
        double top = 0.4 + (x >> 16) % 50 / 100.0;
        q[i * K] = top, q[i * K + 1] = (1 - top) * 0.6, q[i * K + 2] = (1 - top) * 0.3;
        for (int k = 0; k < K; k++)
            a[i * K + k] = k == (int)((x >> 8) % 4) ? 1 : 0;   /* rank 3 of 4: none */
    }
    int seg[2] = {25, 15};
    cr_assert_eq(sq_dyn_samples_new(n, K, q, a, seg, 2, &s, NULL), 0);
    s->text_rank = malloc(n * sizeof *s->text_rank);
    for (int i = 0; i < n; i++) {
        s->text_rank[i] = -1;
        for (int k = 0; k < K; k++)
            if (a[i * K + k] == 1)
                s->text_rank[i] = k;
    }
    sq_dyn_predict_params d = {.trials = 3000, .seed = 9, .path = SQ_DYN_PATH_DRAW};
    sq_dyn_predict_params t = d;
    t.path = SQ_DYN_PATH_TEXT;
    double Ed, Et;
    cr_assert_eq(sq_dyn_predict(s, 4, 3, 12, &d, &Ed, NULL, NULL, NULL), 0);
    cr_assert_eq(sq_dyn_predict(s, 4, 3, 12, &t, &Et, NULL, NULL, NULL), 0);
    cr_expect_float_eq(Ed, Et, 1e-12);
    free(s->text_rank);
    s->text_rank = NULL;
    sq_error e = {0};
    cr_expect_eq(sq_dyn_predict(s, 4, 3, 12, &t, &Et, NULL, NULL, &e), SQ_EUSAGE);
    cr_expect(strstr(e.msg, "next_rank"), "%s", e.msg);
    sq_dyn_samples_free(s);
}

/* Greedy with the argmax always rank 1: the path is rank 1 at every level, its nodes carry q,
 * every other node the off-path context's q_off; the tree is then fixed and the accepted length
 * is how deep the rank-1 chain stays in it. */
typedef struct off_ctx {
    const double *q, *q_off;
} off_ctx;

static const double *off_q(void *user, int node, const onode *nodes)
{
    off_ctx *c = user;
    for (int v = node; v >= 0; v = nodes[v].parent)
        if (nodes[v].rank != 0)
            return c->q_off;
    return c->q;
}

Test(dynamic, off_path_nodes_take_the_off_path_contexts)
{
    const double q[3] = {0.5, 0.3, 0.15}, q_off[3] = {0.9, 0.05, 0.03};
    /* the statistics as sequoia-accept writes them: 6 positions in one segment, one off-path
     * context */
    char json[4096];
    int len = snprintf(json, sizeof json, "{\"dynamic\": {\"format\": \"sequoia-dynamic-stats\", "
                       "\"version\": 1, \"topk\": 3, \"segments\": [[0, 6, 0]], "
                       "\"draft_topk\": [");
    for (int i = 0; i < 6; i++)
        len += snprintf(json + len, sizeof json - len, "%s[0.5, 0.3, 0.15]", i ? ", " : "");
    len += snprintf(json + len, sizeof json - len, "], \"accept\": {\"greedy@T0\": [");
    for (int i = 0; i < 6; i++)
        len += snprintf(json + len, sizeof json - len, "%s[1, 0, 0]", i ? ", " : "");
    snprintf(json + len, sizeof json - len, "]}, \"offpath_topk\": [[0.9, 0.05, 0.03]]}}");
    cJSON *root = cJSON_Parse(json);
    cr_assert_not_null(root);
    sq_dyn_samples *s = NULL;
    sq_error e = {0};
    cr_assert_eq(sq_dyn_samples_from_json(root, "s.json", "greedy@T0", &s, &e), 0, "%s", e.msg);
    cr_assert_eq(s->n_off, 1);
    off_ctx c = {q, q_off};
    int env[][3] = {{2, 2, 4}, {3, 3, 8}, {4, 3, 12}, {5, 2, 9}, {4, 3, 30}};
    for (size_t i = 0; i < sizeof env / sizeof *env; i++) {
        int L = env[i][0], K = env[i][1], N = env[i][2];
        onode nodes[OMAX];
        int in[OMAX];
        int n = oracle_tree(L, K, N, q, off_q, &c, nodes, in), depth = 0;
        for (int d = 1, at = 0; d <= L; d++) {   /* the rank-1 chain */
            int found = -1;
            for (int j = 0; j < n; j++)
                if (nodes[j].level == d && nodes[j].rank == 0 &&
                    (d == 1 ? nodes[j].parent < 0 : nodes[j].parent == at))
                    found = j;
            if (found < 0 || !in[found])
                break;
            at = found;
            depth = d;
        }
        double E, se;
        sq_dyn_predict_params p = {.trials = 500, .seed = 4, .method = SQ_DYN_METHOD_ROOTS};
        cr_assert_eq(sq_dyn_predict(s, L, K, N, &p, &E, &se, NULL, &e), 0, "%s", e.msg);
        cr_expect_float_eq(E, 1.0 + depth, 1e-12, "L %d K %d N %d: %g against %d", L, K, N, E,
                           1 + depth);
    }
    sq_dyn_samples_free(s);
    cJSON_Delete(root);
}

/* The replay: greedy along a text whose argmax ranks are known, with K = 1 (the chain of the
 * draft's top-1 tokens, all of whose L nodes are in the tree when N = L + 1). A step at x
 * accepts the run of rank-1 positions from x, at most L, and emits one more token; tokens/step is
 * tokens over steps. */
/* The statistics' members the predictor does not use are checked too, where the format says
 * what they are (docs/formats.md, "dynamic"): a draft temperature other than 1 (the predictor
 * assumes the engines' temperature-1 scores), a seed or a count of corpora that is no count, a
 * segment that is not [row0, length, corpus] of integers, a calibration table of another shape. */
Test(dynamic, statistics_members_the_predictor_ignores_are_checked)
{
    static const char good[] =
        "{\"dynamic\": {\"format\": \"sequoia-dynamic-stats\", \"version\": 1, \"topk\": 2, "
        "\"draft_temperature\": 1, \"seed\": 3, \"corpora\": 1, \"segments\": [[0, 2, 0], "
        "[7, 1, 0]], \"draft_topk\": [[0.6, 0.3], [0.5, 0.5], [0.9, 0.1]], \"accept\": "
        "{\"greedy@T0\": [[1, 0], [0, 1], [0, 0]]}, \"calibration\": {\"bins\": [0, 0.5, 1], "
        "\"greedy@T0\": {\"count\": [[0, 3], [3, 0]], \"mean_accept\": [[0, 0.3], [0.3, 0]]}}}}";
    static const struct {
        const char *from, *to, *msg;
    } bad[] = {
        {"\"draft_temperature\": 1", "\"draft_temperature\": -1", "dynamic.draft_temperature: -1"},
        {"\"seed\": 3", "\"seed\": \"x\"", "dynamic.seed: expected an integer seed"},
        {"\"seed\": 3", "\"seed\": 1.5", "dynamic.seed: expected an integer seed"},
        {"\"corpora\": 1", "\"corpora\": -5", "dynamic.corpora: expected a count of corpora"},
        {"[[0, 2, 0]", "[[\"x\", 2, 0]", "dynamic.segments[0][0]: expected the first row"},
        {"[[0, 2, 0]", "[[-4, 2, 0]", "dynamic.segments[0][0]: expected the first row"},
        {"[7, 1, 0]", "[7, 1]", "dynamic.segments[1]: expected [row0, length >= 1, corpus]"},
        {"[7, 1, 0]", "[7, 1, 0, 4]", "dynamic.segments[1]: expected [row0, length >= 1, corpus]"},
        {"[7, 1, 0]", "[7, 1, 1]", "dynamic.segments[1][2]: expected a corpus index, an integer "
                                   "in [0, 1) (dynamic.corpora)"},
        {"[0, 0.5, 1]", "[0, 0.7, 0.5]", "dynamic.calibration.bins[2]: expected increasing"},
        {"[[0, 3], [3, 0]]", "[[0, 3]]", "dynamic.calibration.greedy@T0: expected \"count\" and"},
        {"[[0, 3], [3, 0]]", "[[0, -3], [3, 0]]", "dynamic.calibration.greedy@T0.count[0][1]"},
        {"[[0, 0.3], [0.3, 0]]", "[[0, 1.3], [0.3, 0]]",
         "dynamic.calibration.greedy@T0.mean_accept[0][1]: expected a probability"},
        {"\"calibration\": {", "\"calibration\": {\"topk@T1\": {}, ",
         "dynamic.calibration.topk@T1: not a configuration of dynamic.accept"},
    };
    sq_dyn_samples *s = NULL;
    sq_error e = {0};
    cJSON *root = cJSON_Parse(good);
    cr_assert_eq(sq_dyn_samples_from_json(root, "s.json", "greedy@T0", &s, &e), SQ_OK, "%s",
                 e.msg);
    sq_dyn_samples_free(s);
    cJSON_Delete(root);
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char text[2048];
        const char *at = strstr(good, bad[i].from);
        cr_assert(at, "%s", bad[i].from);
        snprintf(text, sizeof text, "%.*s%s%s", (int)(at - good), good, bad[i].to,
                 at + strlen(bad[i].from));
        cr_assert(root = cJSON_Parse(text), "%s", text);
        e = (sq_error){0};
        s = NULL;
        cr_expect_eq(sq_dyn_samples_from_json(root, "s.json", "greedy@T0", &s, &e), SQ_EDATA,
                     "%s", bad[i].to);
        cr_expect(strstr(e.msg, "s.json: ") && strstr(e.msg, bad[i].msg), "expected \"%s\" in: %s",
                  bad[i].msg, e.msg);
        sq_dyn_samples_free(s);
        cJSON_Delete(root);
    }
}

Test(dynamic, replay_counts_tokens_over_steps_as_a_decoder)
{
    enum { n = 90, K = 2 };
    double q[n * K], a[n * K];
    int rank[n];
    unsigned x = 17;
    for (int i = 0; i < n; i++) {
        x = x * 1103515245u + 12345u;
        rank[i] = (x >> 16) % 5 == 0 ? 1 : 0;   /* 80% of positions accept rank 1 */
        if (i == 39 || i == 74 || i == 89)
            rank[i] = 1;   /* a run's path never goes past its last position */
        q[i * K] = 0.7, q[i * K + 1] = 0.2;
        a[i * K] = rank[i] == 0, a[i * K + 1] = rank[i] == 1;
    }
    int seg[3] = {40, 35, 15};
    sq_dyn_samples *s = NULL;
    cr_assert_eq(sq_dyn_samples_new(n, K, q, a, seg, 3, &s, NULL), 0);
    for (int L = 1; L <= 6; L++) {
        double tokens = 0, steps = 0;
        for (int g = 0, x0 = 0; g < 3; x0 += seg[g++])
            for (int at = x0; at < x0 + seg[g];) {
                int acc = 0;
                while (acc < L && at + acc < x0 + seg[g] && rank[at + acc] == 0)
                    acc++;
                int t = acc + 1;
                tokens += t;
                steps += 1;
                at += t;
            }
        sq_dyn_predict_params p = {.trials = 1, .seed = 2, .method = SQ_DYN_METHOD_REPLAY};
        double E, se;
        cr_assert_eq(sq_dyn_predict(s, L, 1, L + 1, &p, &E, &se, NULL, NULL), 0);
        cr_expect_float_eq(E, tokens / steps, 1e-12, "L %d: %g against %g", L, E, tokens / steps);
    }
    sq_dyn_samples_free(s);
}

Test(dynamic, predictions_grow_with_the_envelope_and_the_grid_agrees_with_single_calls)
{
    const double q[4] = {0.5, 0.3, 0.1, 0.05};
    const double a[4] = {0.5, 0.2, 0.1, 0.05};
    sq_dyn_samples *s = uniform_samples(32, 4, q, a);
    sq_dyn_predict_params p = {.trials = 5000, .seed = 2};
    sq_dyn_grid *g = NULL;
    cr_assert_eq(sq_dyn_grid_new(s, 4, 3, 20, &p, &g, NULL), 0);
    for (int K = 1; K <= 3; K++)
        for (int L = 1; L <= 4; L++)
            for (int N = 3; N <= 20; N++) {
                cr_expect(sq_dyn_grid_at(g, L, K, N, NULL) >= sq_dyn_grid_at(g, L, K, N - 1, NULL),
                          "N");
                double E;
                if (L == 4 && (N == 7 || N == 20)) {
                    cr_assert_eq(sq_dyn_predict(s, L, K, N, &p, &E, NULL, NULL, NULL), 0);
                    /* the grid's K-th run uses the same trials as a single call with max L */
                    cr_expect_float_eq(E, sq_dyn_grid_at(g, L, K, N, NULL), 1e-12);
                }
            }
    sq_dyn_grid_free(g);
    sq_dyn_samples_free(s);
}

/* ---- cost and search ----------------------------------------------------------------------------- */

/* t(b, n) = base_b + slope * n, points at n = 1..max. */
static sq_profile *linear_profile(const int *batches, int nb, double base, double slope, int max)
{
    sq_profile *p = calloc(1, sizeof *p);
    p->device = strdup("test");
    p->backend = strdup("cpu");
    p->dtype = strdup("f32");
    p->prefix = 0;
    p->n = nb * max;
    p->points = calloc((size_t)p->n, sizeof *p->points);
    for (int b = 0; b < nb; b++)
        for (int t = 1; t <= max; t++)
            p->points[b * max + t - 1] = (sq_profile_point){batches[b], t,
                base * batches[b] + slope * t * batches[b], NAN, NAN, 0};
    return p;
}

Test(dynamic, cost_per_round_follows_the_engines)
{
    int b[1] = {1};
    sq_profile *t = linear_profile(b, 1, 10, 1, 200), *d = linear_profile(b, 1, 1, 0.1, 200);
    sq_dyn_cost c;
    cr_assert_eq(sq_dyn_round_ms(SQ_ENGINE_SGLANG, t, d, 0, 1, 5, 4, 16, SQ_EXTRAPOLATE_NONE, &c,
                                 NULL), 0);
    /* verify 16; 4 forwards of 4 tokens; extend of 16 */
    cr_expect_float_eq(c.target_ms, 26, 1e-9);
    cr_expect_float_eq(c.draft_ms, 4 * 1.4 + 2.6, 1e-9);
    cr_assert_eq(sq_dyn_round_ms(SQ_ENGINE_TRTLLM_DYNAMIC, t, d, 0, 1, 5, 4, 16,
                                 SQ_EXTRAPOLATE_NONE, &c, NULL), 0);
    /* step 0 of L + 1 = 6 tokens, then 4, 8, 12, 16 tokens: (L+1) + K L (L-1)/2 = 46 tokens */
    cr_expect_float_eq(c.draft_ms, 5 * 1 + 0.1 * (6 + 4 + 8 + 12 + 16), 1e-9);
    cr_assert_eq(sq_dyn_round_ms(SQ_ENGINE_SGLANG, t, NULL, 0.5, 1, 5, 4, 16, SQ_EXTRAPOLATE_NONE,
                                 &c, NULL), 0);
    cr_expect_float_eq(c.draft_ms, 2.5, 1e-9);
    sq_profile_free(t);
    sq_profile_free(d);
}

/* A step section on profile t: each part's table at tokens 1..max[part], a + b * tokens. */
static void add_step(sq_profile *t, const int *max, const double *a, const double *b)
{
    t->step = calloc(1, sizeof *t->step);
    for (int part = 0; part < SQ_STEP_PARTS; part++) {
        t->step->n[part] = max[part];
        t->step->pts[part] = calloc((size_t)max[part], sizeof *t->step->pts[part]);
        for (int x = 1; x <= max[part]; x++)
            t->step->pts[part][x - 1] = (sq_profile_point){1, x, a[part] + b[part] * x, NAN, NAN,
                                                           0};
    }
}

Test(dynamic, cost_per_round_in_step)
{
    int b[2] = {1, 8};
    sq_profile *t = linear_profile(b, 2, 10, 1, 200), *d = linear_profile(b, 2, 1, 0.1, 200);
    /* in-step: the verify twice the steady stream (20 + 2n), draft_first 0.5 + 0.1 n (n <= 8),
     * draft_level 1 + 0.2 w (w <= 8), overhead 0.01 n */
    const int max[SQ_STEP_PARTS] = {32, 8, 8, 32, 0};   /* no expand part: priced 0 */
    const double a[SQ_STEP_PARTS] = {20, 0.5, 1, 0, 0}, sl[SQ_STEP_PARTS] = {2, 0.1, 0.2, 0.01, 0};
    sq_dyn_cost steady, c;
    cr_assert_eq(sq_dyn_round_ms(SQ_ENGINE_SGLANG, t, d, 0, 1, 3, 4, 16, SQ_EXTRAPOLATE_NONE,
                                 &steady, NULL), 0);
    add_step(t, max, a, sl);
    sq_error err = {0};
    /* sglang 3,4,16 after 2 accepted tokens: T(16) + O(16) + D_first(2) + 2 D_level(4) */
    cr_assert_eq(sq_dyn_round_ms_accepted(SQ_ENGINE_SGLANG, t, d, 0, 1, 3, 4, 16, 2,
                                          SQ_EXTRAPOLATE_NONE, &c, &err), 0, "%s", err.msg);
    cr_expect_float_eq(c.target_ms, 52 + 0.16, 1e-9);
    cr_expect_float_eq(c.draft_ms, 0.7 + 2 * 1.8, 1e-9);
    cr_expect_float_eq(c.round_ms, 52.16 + 4.3, 1e-9);
    cr_expect(c.round_ms > steady.round_ms);
    /* trtllm-dynamic: the levels re-run i K tokens: D_level(4) + D_level(8) */
    cr_assert_eq(sq_dyn_round_ms_accepted(SQ_ENGINE_TRTLLM_DYNAMIC, t, d, 0, 1, 3, 4, 12, 2,
                                          SQ_EXTRAPOLATE_NONE, &c, &err), 0, "%s", err.msg);
    cr_expect_float_eq(c.draft_ms, 0.7 + 1.8 + 2.6, 1e-9);
    /* accepted unknown: SGLang's extend of N = 16 tokens, past the table: the draft's steady
     * time scaled at the table's end, 2.6 * D_first(8) / t_draft(8) */
    cr_assert_eq(sq_dyn_round_ms(SQ_ENGINE_SGLANG, t, d, 0, 1, 3, 4, 16, SQ_EXTRAPOLATE_NONE, &c,
                                 &err), 0, "%s", err.msg);
    cr_expect_float_eq(c.draft_ms, 2.6 * 1.3 / 1.8 + 2 * 1.8, 1e-9);
    /* batch 8: the step section is batch 1; the steady stream prices it as before */
    cr_assert_eq(sq_dyn_round_ms_accepted(SQ_ENGINE_SGLANG, t, d, 0, 8, 3, 4, 16, 2,
                                          SQ_EXTRAPOLATE_NONE, &c, &err), 0, "%s", err.msg);
    cr_expect_float_eq(c.target_ms, 8 * 10 + 8 * 16, 1e-9);
    cr_expect_float_eq(c.draft_ms, 2 * (8 * 1 + 0.1 * 4 * 8) + 8 * 1 + 0.1 * 16 * 8, 1e-9);
    sq_profile_free(t);
    sq_profile_free(d);
}

/* sequoia-run's round adds the tree's growth, 1 + (L - 1) K expanded nodes a sequence at the
 * step section's expand cost X(K); the engines' rounds do not (they grow on the GPU). */
Test(dynamic, runtime_round_prices_each_expanded_node)
{
    int b[2] = {1, 8};
    sq_profile *t = linear_profile(b, 2, 10, 1, 200), *d = linear_profile(b, 2, 1, 0.1, 200);
    /* the same section without, then with, the expand table */
    const int max[2][SQ_STEP_PARTS] = {{32, 8, 8, 32, 0}, {32, 8, 8, 32, 8}};
    const double a[SQ_STEP_PARTS] = {20, 0.5, 1, 0, 0.003};
    const double sl[SQ_STEP_PARTS] = {2, 0.1, 0.2, 0.01, 0.0001};
    sq_error err = {0};
    sq_dyn_cost run[2][2], eng[2];   /* [without, with][batch] */
    for (int w = 0; w < 2; w++) {
        add_step(t, max[w], a, sl);
        for (int i = 0; i < 2; i++)
            cr_assert_eq(sq_dyn_round_ms_runtime(t, d, 0, b[i], 3, 4, 16, 2, SQ_EXTRAPOLATE_NONE,
                                                 &run[w][i], &err), 0, "%s", err.msg);
        cr_assert_eq(sq_dyn_round_ms_accepted(SQ_ENGINE_SGLANG, t, d, 0, 1, 3, 4, 16, 2,
                                              SQ_EXTRAPOLATE_NONE, &eng[w], &err), 0, "%s",
                     err.msg);
        for (int part = 0; part < SQ_STEP_PARTS; part++)
            free(t->step->pts[part]);
        free(t->step);
        t->step = NULL;
    }
    const double x4 = 0.003 + 0.0001 * 4;   /* X(4) */
    for (int i = 0; i < 2; i++) {
        /* L = 3, K = 4: the root and the 4 kept nodes of level 1: 1 + 2 * 4 = 9 per sequence */
        cr_expect_float_eq(run[1][i].target_ms - run[0][i].target_ms, b[i] * 9 * x4, 1e-12,
                           "batch %d", b[i]);
        cr_expect_float_eq(run[1][i].round_ms - run[0][i].round_ms, b[i] * 9 * x4, 1e-12);
        cr_expect_float_eq(run[1][i].draft_ms, run[0][i].draft_ms, 1e-12);
    }
    cr_expect_float_eq(eng[1].round_ms, eng[0].round_ms, 1e-12, "the engine's round is unchanged");
    sq_profile_free(t);
    sq_profile_free(d);
}

Test(dynamic, search_agrees_with_exhaustive_evaluation)
{
    const double q[4] = {0.6, 0.2, 0.1, 0.05};
    const double a[4] = {0.55, 0.2, 0.08, 0.03};
    sq_dyn_samples *s = uniform_samples(32, 4, q, a);
    sq_dyn_predict_params p = {.trials = 4000, .seed = 5};
    sq_dyn_grid *g = NULL;
    cr_assert_eq(sq_dyn_grid_new(s, 5, 4, 24, &p, &g, NULL), 0);
    int bs[2] = {1, 8};
    sq_profile *t = linear_profile(bs, 2, 5, 0.2, 64), *d = linear_profile(bs, 2, 0.5, 0.05, 64);
    for (int e = 0; e < 2; e++)
        for (int bi = 0; bi < 2; bi++) {
            sq_engine eng = e ? SQ_ENGINE_TRTLLM_DYNAMIC : SQ_ENGINE_SGLANG;
            sq_dyn_search_params sp = {.engine = eng, .batch = bs[bi], .target = t, .draft = d};
            sq_dyn_choice best[4];
            int n = 0;
            double plain;
            sq_error err = {0};
            cr_assert_eq(sq_dyn_search(g, &sp, best, 4, &n, &plain, &err), 0, "%s", err.msg);
            /* exhaustive */
            double top = -1;
            int tl = 0, tk = 0, tn = 0;
            for (int K = 1; K <= 4; K++)
                for (int L = 1; L <= 5; L++)
                    for (int N = 2; N <= 24; N++) {
                        if (sq_dyn_envelope_check(eng, L, K, N, NULL, NULL))
                            continue;
                        sq_dyn_cost c;
                        cr_assert_eq(sq_dyn_round_ms(eng, t, d, 0, bs[bi], L, K, N,
                                                     SQ_EXTRAPOLATE_NONE, &c, NULL), 0);
                        double r = bs[bi] * sq_dyn_grid_at(g, L, K, N, NULL) / c.round_ms * 1000;
                        if (r > top) {
                            top = r;
                            tl = L, tk = K, tn = N;
                        }
                    }
            cr_expect_float_eq(best[0].tokens_per_second, top, 1e-9 * top);
            cr_expect(best[0].steps == tl && best[0].topk == tk && best[0].nodes == tn,
                      "%d,%d,%d against %d,%d,%d", best[0].steps, best[0].topk, best[0].nodes,
                      tl, tk, tn);
            for (int i = 1; i < n; i++)
                cr_expect(best[i].tokens_per_second <= best[i - 1].tokens_per_second);
            cr_expect_float_eq(plain, bs[bi] / (t->points[bi * 64].median_ms) * 1000, 1e-9);
        }
    /* a batch size the profiles lack */
    sq_dyn_search_params sp = {.engine = SQ_ENGINE_SGLANG, .batch = 3, .target = t, .draft = d};
    sq_dyn_choice best[1];
    int n;
    double plain;
    cr_assert_neq(sq_dyn_search(g, &sp, best, 1, &n, &plain, NULL), 0);
    sq_profile_free(t);
    sq_profile_free(d);
    sq_dyn_grid_free(g);
    sq_dyn_samples_free(s);
}

/* --cost-model sequoia-run: the search picks the argmax of sequoia-run's predicted tokens/s
 * (sq_dyn_round_ms_runtime with the grid's catch-up), found here by brute force over the
 * envelope grid; the engine's model (the default) still picks the engine's argmax. */
Test(dynamic, search_by_sequoia_runs_cost_is_its_argmax)
{
    const double q[4] = {0.6, 0.2, 0.1, 0.05};
    const double a[4] = {0.55, 0.2, 0.08, 0.03};
    sq_dyn_samples *s = uniform_samples(32, 4, q, a);
    sq_dyn_predict_params p = {.trials = 4000, .seed = 5};
    sq_dyn_grid *g = NULL;
    cr_assert_eq(sq_dyn_grid_new(s, 5, 4, 24, &p, &g, NULL), 0);
    int bs[2] = {1, 8};
    /* a draft whose forwards grow with their tokens: the engines' rounds and sequoia-run's
     * differ (TensorRT-LLM's draft re-runs its context) */
    sq_profile *t = linear_profile(bs, 2, 5, 0.2, 64), *d = linear_profile(bs, 2, 0.5, 0.3, 64);
    int differ = 0;
    for (int e = 0; e < 2; e++)
        for (int bi = 0; bi < 2; bi++) {
            sq_engine eng = e ? SQ_ENGINE_TRTLLM_DYNAMIC : SQ_ENGINE_SGLANG;
            sq_dyn_search_params sp = {.engine = eng, .batch = bs[bi], .target = t, .draft = d,
                                       .cost_model = SQ_COST_SEQUOIA_RUN};
            sq_dyn_choice best[4], eb[1];
            int n = 0, ne = 0;
            double plain;
            sq_error err = {0};
            cr_assert_eq(sq_dyn_search(g, &sp, best, 4, &n, &plain, &err), 0, "%s", err.msg);
            sp.cost_model = SQ_COST_ENGINE;
            cr_assert_eq(sq_dyn_search(g, &sp, eb, 1, &ne, &plain, &err), 0, "%s", err.msg);
            double top = -1, etop = -1;
            int tl = 0, tk = 0, tn = 0;
            for (int K = 1; K <= 4; K++)
                for (int L = 1; L <= 5; L++)
                    for (int N = 2; N <= 24; N++) {
                        if (sq_dyn_envelope_check(eng, L, K, N, NULL, NULL))
                            continue;
                        double E = sq_dyn_grid_at(g, L, K, N, NULL);
                        sq_dyn_cost c, ce;
                        cr_assert_eq(sq_dyn_round_ms_runtime(t, d, 0, bs[bi], L, K, N,
                                                             sq_dyn_grid_catchup(g, L, K, N),
                                                             SQ_EXTRAPOLATE_NONE, &c, NULL), 0);
                        cr_assert_eq(sq_dyn_round_ms(eng, t, d, 0, bs[bi], L, K, N,
                                                     SQ_EXTRAPOLATE_NONE, &ce, NULL), 0);
                        double r = bs[bi] * E / c.round_ms * 1000;
                        double re = bs[bi] * E / ce.round_ms * 1000;
                        if (r > top) {
                            top = r;
                            tl = L, tk = K, tn = N;
                        }
                        etop = re > etop ? re : etop;
                    }
            cr_expect_float_eq(best[0].run_tokens_per_second, top, 1e-9 * top);
            cr_expect(best[0].steps == tl && best[0].topk == tk && best[0].nodes == tn,
                      "%d,%d,%d against %d,%d,%d", best[0].steps, best[0].topk, best[0].nodes,
                      tl, tk, tn);
            for (int i = 1; i < n; i++)
                cr_expect(best[i].run_tokens_per_second <= best[i - 1].run_tokens_per_second);
            cr_expect_float_eq(eb[0].tokens_per_second, etop, 1e-9 * etop);
            differ += eb[0].steps != best[0].steps || eb[0].topk != best[0].topk ||
                      eb[0].nodes != best[0].nodes;
        }
    cr_expect(differ > 0, "the two models chose alike everywhere: the test shows nothing");
    sq_profile_free(t);
    sq_profile_free(d);
    sq_dyn_grid_free(g);
    sq_dyn_samples_free(s);
}

/* ---- the dynamic plan file --------------------------------------------------------------------------- */

static const char *GOOD =
    "{\"format\": \"sequoia-dynamic-plan\", \"version\": 1, \"engine\": \"sglang\", "
    "\"mode\": \"topk\", \"temperature\": 1, \"top_p\": 1, "
    "\"envelope\": {\"steps\": 5, \"topk\": 4, \"nodes\": 16}, \"expected_tokens\": 3.25, "
    "\"prediction\": {\"method\": \"monte-carlo\"}, "
    "\"curves\": {\"file\": \"c.json\", \"sha256\": "
    "\"00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff\"}, "
    "\"hardware\": {\"round_ms\": 3.5, \"tokens_per_second\": 900}, "
    "\"ladder\": [{\"batch\": 1, \"envelope\": {\"steps\": 5, \"topk\": 4, \"nodes\": 16}, "
    "\"speculate\": true, \"expected_tokens\": 3.25, \"tokens_per_second\": 900}, "
    "{\"batch\": 4, \"envelope\": {\"steps\": 2, \"topk\": 1, \"nodes\": 3}, "
    "\"speculate\": false, \"expected_tokens\": 1.5, \"tokens_per_second\": 2000}]}";

Test(dynamic, plan_file_round_trip)
{
    char *dir = tu_tmpdir(), *f = tu_path(dir, "p.json"), *g = tu_path(dir, "q.json");
    tu_write(f, GOOD);
    sq_dynplan *p = NULL;
    sq_error e = {0};
    cr_assert_eq(sq_dynplan_load(f, &p, &e), 0, "%s", e.msg);
    cr_expect_str_eq(p->engine, "sglang");
    cr_expect_eq(p->mode, SQ_MODE_TOPK);
    cr_expect(p->steps == 5 && p->topk == 4 && p->nodes == 16);
    cr_expect_float_eq(p->expected_tokens, 3.25, 0);
    cr_expect_eq(p->n_ladder, 2);
    cr_expect(p->ladder[1].batch == 4 && !p->ladder[1].speculate && p->ladder[1].nodes == 3);
    cr_expect_str_eq(p->curves_file, "c.json");
    cr_assert_eq(sq_dynplan_save(g, p, &e), 0, "%s", e.msg);
    sq_dynplan *q = NULL;
    cr_assert_eq(sq_dynplan_load(g, &q, &e), 0, "%s", e.msg);
    cJSON *a = sq_dynplan_to_json(p), *b = sq_dynplan_to_json(q);
    char *sa = cJSON_PrintUnformatted(a), *sb = cJSON_PrintUnformatted(b);
    cr_expect_str_eq(sa, sb);
    cJSON *root = NULL;
    cr_assert_eq(sq_json_load(g, &root, NULL), 0);
    cr_expect(sq_dynplan_sniff(root));
    cJSON_Delete(root);
    cJSON *stat = cJSON_Parse("{\"format\": \"sequoia-plan\"}");
    cr_expect(!sq_dynplan_sniff(stat));
    cJSON_Delete(stat);
    free(sa);
    free(sb);
    cJSON_Delete(a);
    cJSON_Delete(b);
    sq_dynplan_free(p);
    sq_dynplan_free(q);
    tu_rmtree(dir);
}

/* Replaces the first occurrence of `from` in GOOD with `to`. */
static char *mutate(const char *from, const char *to)
{
    const char *at = strstr(GOOD, from);
    cr_assert_not_null(at, "%s", from);
    size_t n = strlen(GOOD) - strlen(from) + strlen(to) + 1;
    char *s = malloc(n);
    snprintf(s, n, "%.*s%s%s", (int)(at - GOOD), GOOD, to, at + strlen(from));
    return s;
}

Test(dynamic, plan_file_refusals_name_the_file_and_the_field)
{
    struct { const char *from, *to, *field; } bad[] = {
        {"\"sequoia-dynamic-plan\"", "\"sequoia-plan\"", "format"},
        {"\"version\": 1", "\"version\": 2", "version"},
        {"\"sglang\"", "\"vllm\"", "engine"},
        {"\"topk\", \"temperature\"", "\"specinfer\", \"temperature\"", "mode"},
        {"\"temperature\": 1", "\"temperature\": 0", "temperature"},
        {"\"top_p\": 1", "\"top_p\": 0", "top_p"},
        {"\"nodes\": 16}, \"expected", "\"nodes\": 90}, \"expected", "N - 1 <= K + (L - 1) K^2"},
        {"\"steps\": 5, \"topk\": 4, \"nodes\": 16}, \"exp", "\"steps\": 5, \"topk\": 0, "
         "\"nodes\": 16}, \"exp", "envelope.topk"},
        {"\"expected_tokens\": 3.25, \"pred", "\"expected_tokens\": 7, \"pred", "expected_tokens"},
        {"\"method\": \"monte-carlo\"", "\"how\": 1", "prediction.method"},
        {"\"00112233", "\"zz112233", "curves.sha256"},
        {"\"round_ms\": 3.5", "\"round_ms\": -1", "hardware.round_ms"},
        /* sequoia_run's figures are numbers: "fast" and [] were kept */
        {"\"round_ms\": 3.5", "\"round_ms\": 3.5, \"sequoia_run\": {\"tokens_per_second\": "
         "\"fast\"}", "hardware.sequoia_run.tokens_per_second"},
        {"\"round_ms\": 3.5", "\"round_ms\": 3.5, \"sequoia_run\": {\"round_ms\": []}",
         "hardware.sequoia_run.round_ms"},
        {"\"batch\": 4", "\"batch\": 1", "ladder[1].batch"},
        {"\"speculate\": false", "\"speculate\": 0", "ladder[1].speculate"},
        {"\"tokens_per_second\": 2000", "\"tokens_per_second\": 0", "ladder[1].tokens_per_second"},
        {"\"nodes\": 3}", "\"nodes\": 2}", "K = 1"},
    };
    char *dir = tu_tmpdir(), *f = tu_path(dir, "p.json");
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char *text = mutate(bad[i].from, bad[i].to);
        tu_write(f, text);
        sq_dynplan *p = NULL;
        sq_error e = {0};
        cr_expect_eq(sq_dynplan_load(f, &p, &e), SQ_EDATA, "%s: %s", bad[i].field, e.msg);
        cr_expect(strstr(e.msg, "p.json") && strstr(e.msg, bad[i].field), "%s: %s",
                  bad[i].field, e.msg);
        cr_expect_null(p);
        free(text);
    }
    sq_error e = {0};
    sq_dynplan *p = NULL;
    cr_expect_eq(sq_dynplan_load(tu_path(dir, "none.json"), &p, &e), SQ_ENOINPUT, "%s", e.msg);
    tu_rmtree(dir);
}

/* ---- the tools --------------------------------------------------------------------------------------- */

static const char *env_bin(const char *name)
{
    const char *b = getenv(name);
    cr_assert_not_null(b, "%s is not set (run through meson test)", name);
    return b;
}

/* A corpus of 3 sequences of 40 positions over a vocabulary of 12: the draft close to the
 * target. */
static void write_corpus(const char *path)
{
    sq_corpus_writer_params wp = sq_corpus_writer_default_params();
    wp.vocab = 12;
    wp.draft = "d";
    wp.target = "t";
    sq_corpus_writer *w = NULL;
    sq_error e = {0};
    cr_assert_eq(sq_corpus_writer_open(path, &wp, &w, &e), 0, "%s", e.msg);
    unsigned x = 7;
    for (int s = 0; s < 3; s++) {
        float t[40 * 12], d[40 * 12];
        for (int i = 0; i < 40 * 12; i++) {
            x = x * 1103515245u + 12345u;
            t[i] = (float)((x >> 16) % 1000) / 150.0f;
            x = x * 1103515245u + 12345u;
            d[i] = t[i] + (float)((x >> 16) % 1000) / 1000.0f;
        }
        int32_t tok[40];
        for (int i = 0; i < 40; i++)
            tok[i] = (int32_t)((i * 7 + s) % 12);
        cr_assert_eq(sq_corpus_writer_append(w, t, d, tok, 40, &e), 0, "%s", e.msg);
        cr_assert_eq(sq_corpus_writer_end_sequence(w, &e), 0, "%s", e.msg);
    }
    cr_assert_eq(sq_corpus_writer_commit(w, &e), 0, "%s", e.msg);
}

static int run_tool(const char *bin, const char **args, char **out, char **err)
{
    const char *argv[40];
    int n = 0;
    argv[n++] = bin;
    for (int i = 0; args[i]; i++)
        argv[n++] = args[i];
    argv[n] = NULL;
    return tu_run((char *const *)argv, out, err);
}

Test(dynamic, accept_writes_the_statistics_and_plan_reads_them, .timeout = 120)
{
    char *dir = tu_tmpdir(), *c = tu_path(dir, "c.h5"), *j = tu_path(dir, "c.json");
    char *pl = tu_path(dir, "p.json"), *none = tu_path(dir, "none.json");
    write_corpus(c);
    char *err = NULL, *out = NULL;
    int rc = run_tool(env_bin("SQ_ACCEPT_BIN"), (const char *[]){c, "-m", "greedy,topk,specinfer",
                      "-T", "1", "-w", "4", "-q", "--dynamic-skip", "4", "-o", j, NULL}, NULL,
                      &err);
    cr_assert_eq(rc, 0, "%s", err);
    free(err);
    cJSON *root = NULL;
    cr_assert_eq(sq_json_load(j, &root, NULL), 0);
    const cJSON *dyn = sq_json_field(root, "dynamic");
    cr_assert_not_null(dyn);
    cr_expect_eq(cJSON_GetArraySize(sq_json_field(dyn, "draft_topk")), 3 * 36);
    const cJSON *acc = sq_json_field(dyn, "accept");
    cr_expect(sq_json_field(acc, "greedy@T0") && sq_json_field(acc, "topk@T1"));
    cr_expect_null(sq_json_field(acc, "specinfer@T1"));
    cr_expect_eq(cJSON_GetArraySize(sq_json_field(dyn, "next_rank")), 3 * 36);
    cr_expect_null(sq_json_field(dyn, "offpath_topk"));
    sq_dyn_samples *s = NULL;
    sq_error e = {0};
    cr_assert_eq(sq_dyn_samples_from_json(root, j, "topk@T1", &s, &e), 0, "%s", e.msg);
    cr_expect_eq(s->K, 8);
    sq_dyn_samples_free(s);
    e = (sq_error){0};
    cr_expect_eq(sq_dyn_samples_from_json(root, j, "stochastic@T1", &s, &e), SQ_EDATA);
    cr_expect(strstr(e.msg, "greedy@T0") && strstr(e.msg, "stochastic@T1"), "%s", e.msg);
    cJSON_Delete(root);

    /* off-path contexts: where they start, then a corpus of them (here any 3 sequences) */
    char *br = tu_path(dir, "branches.txt"), *j2 = tu_path(dir, "c2.json");
    rc = run_tool(env_bin("SQ_ACCEPT_BIN"), (const char *[]){c, "-m", "greedy", "-w", "4", "-q",
                  "--dynamic-skip", "4", "--dynamic-branches", br, "--dynamic-offpath", c, "-o",
                  j2, NULL}, NULL, &err);
    cr_assert_eq(rc, 0, "%s", err);
    free(err);
    char *bt = tu_read(br, NULL);
    int lines = 0, cols = 0;
    for (char *l = bt; l && *l; lines++) {
        int c0, s0, p0, w0;
        cols += sscanf(l, "%d %d %d %d", &c0, &s0, &p0, &w0) == 4 && c0 == 0 && s0 >= 0 &&
                s0 < 3 && p0 >= 4 && p0 < 40 && w0 >= 0 && w0 < 12;
        l = strchr(l, '\n');
        l = l ? l + 1 : NULL;
    }
    cr_expect(lines == (3 * 36 + 3) / 4 && cols == lines, "%d lines, %d good: %s", lines, cols,
              bt);
    free(bt);
    cJSON *r2 = NULL;
    cr_assert_eq(sq_json_load(j2, &r2, NULL), 0);
    cr_expect_eq(cJSON_GetArraySize(sq_json_field(sq_json_field(r2, "dynamic"), "offpath_topk")),
                 3);
    cJSON_Delete(r2);

    /* a prediction of one envelope */
    rc = run_tool(env_bin("SQ_PLAN_BIN"), (const char *[]){"-a", j, "--engine", "sglang",
                  "--envelope", "3,2,6", "--mode", "topk", "--temperature", "1", "--trials",
                  "2000", "-o", pl, NULL}, &out, &err);
    cr_assert_eq(rc, 0, "%s", err);
    cr_expect(out && strstr(out, "tokens/step") && strstr(out, "--speculative-num-steps 3"),
              "%s", out);
    free(out);
    free(err);
    sq_dynplan *p = NULL;
    cr_assert_eq(sq_dynplan_load(pl, &p, &e), 0, "%s", e.msg);
    cr_expect(p->steps == 3 && p->topk == 2 && p->nodes == 6 && p->mode == SQ_MODE_TOPK);
    cr_expect(p->expected_tokens >= 1 && p->expected_tokens <= 4);
    sq_dynplan_free(p);

    /* refusals: an envelope outside the rules (64), several configurations (64), curves
     * without the statistics (65, naming the file and the key) */
    rc = run_tool(env_bin("SQ_PLAN_BIN"), (const char *[]){"-a", j, "--engine",
                  "trtllm-dynamic", "--envelope", "3,2,8", "--mode", "greedy", "-o", pl, NULL},
                  NULL, &err);
    cr_expect_eq(rc, 64, "%s", err);
    cr_expect(err && strstr(err, "N - 1 <= K L") && strstr(err, "TensorRT-LLM"), "%s", err);
    free(err);
    rc = run_tool(env_bin("SQ_PLAN_BIN"), (const char *[]){"-a", j, "--engine", "sglang",
                  "--envelope", "3,2,6", "-o", pl, NULL}, NULL, &err);
    cr_expect_eq(rc, 64, "%s", err);
    cr_expect(err && strstr(err, "--mode"), "%s", err);
    free(err);
    rc = run_tool(env_bin("SQ_ACCEPT_BIN"), (const char *[]){c, "-m", "greedy", "-w", "4", "-q",
                  "--dynamic-samples", "0", "-o", none, NULL}, NULL, &err);
    cr_assert_eq(rc, 0, "%s", err);
    free(err);
    rc = run_tool(env_bin("SQ_PLAN_BIN"), (const char *[]){"-a", none, "--engine", "sglang",
                  "--envelope", "3,2,6", "-o", pl, NULL}, NULL, &err);
    cr_expect_eq(rc, 65, "%s", err);
    cr_expect(err && strstr(err, "none.json") && strstr(err, "\"dynamic\""), "%s", err);
    free(err);
    tu_rmtree(dir);
}

Test(dynamic, plan_searches_the_envelopes_for_the_hardware, .timeout = 120)
{
    char *dir = tu_tmpdir(), *c = tu_path(dir, "c.h5"), *j = tu_path(dir, "c.json");
    char *tp = tu_path(dir, "t.json"), *dp = tu_path(dir, "d.json"), *d1 = tu_path(dir, "d1.json");
    char *pl = tu_path(dir, "p.json");
    write_corpus(c);
    char *err = NULL, *out = NULL;
    cr_assert_eq(run_tool(env_bin("SQ_ACCEPT_BIN"), (const char *[]){c, "-m", "greedy", "-w",
                          "4", "-q", "-o", j, NULL}, NULL, &err), 0, "%s", err);
    free(err);
    /* batch profiles 1 and 4, tokens 1..64; the draft's of batch 1 only in d1.json */
    FILE *fp[3] = {fopen(tp, "w"), fopen(dp, "w"), fopen(d1, "w")};
    for (int f = 0; f < 3; f++) {
        fprintf(fp[f], "{\"format\":\"sequoia-profile\",\"version\":2,\"points\":[");
        for (int b = 1; b <= (f == 2 ? 1 : 4); b *= 4)
            for (int n = 1; n <= 64; n++)
                fprintf(fp[f], "%s{\"batch\":%d,\"tokens\":%d,\"median_ms\":%g}",
                        b == 1 && n == 1 ? "" : ",", b, n,
                        f == 0 ? 10.0 * b + 0.3 * n * b : 1.0 * b + 0.05 * n * b);
        fprintf(fp[f], "]}\n");
        fclose(fp[f]);
    }
    int rc = run_tool(env_bin("SQ_PLAN_BIN"), (const char *[]){"-a", j, "--engine", "sglang",
                      "--target-profile", tp, "--draft-profile", dp, "-n", "24", "--trials",
                      "2000", "--ladder", "-o", pl, NULL}, &out, &err);
    cr_assert_eq(rc, 0, "%s", err);
    cr_expect(out && strstr(out, "runner-ups") && strstr(out, "batch 4"), "%s", out);
    free(out);
    free(err);
    sq_dynplan *p = NULL;
    sq_error e = {0};
    cr_assert_eq(sq_dynplan_load(pl, &p, &e), 0, "%s", e.msg);
    cr_expect_eq(p->n_ladder, 2);
    cr_expect(p->nodes <= 24 && p->steps <= 8 && p->topk <= 8);
    cr_expect_not_null(p->hardware);
    cr_expect(p->ladder[0].steps == p->steps && p->ladder[0].nodes == p->nodes);
    sq_dynplan_free(p);
    /* a draft profile without the target's batch size 4 */
    rc = run_tool(env_bin("SQ_PLAN_BIN"), (const char *[]){"-a", j, "--engine", "sglang",
                  "--target-profile", tp, "--draft-profile", d1, "-n", "24", "--trials", "500",
                  "-o", pl, NULL}, NULL, &err);
    cr_expect_eq(rc, 65, "%s", err);
    cr_expect(err && strstr(err, "d1.json") && strstr(err, "batch 4"), "%s", err);
    free(err);
    tu_rmtree(dir);
}

/* Profiles t(b, n) = base b + slope n b at the given batch sizes, tokens 1..64. */
static void write_profile(const char *path, const int *b, int nb, double base, double slope)
{
    FILE *fp = fopen(path, "w");
    cr_assert_not_null(fp);
    fprintf(fp, "{\"format\":\"sequoia-profile\",\"version\":2,\"points\":[");
    for (int i = 0; i < nb; i++)
        for (int n = 1; n <= 64; n++)
            fprintf(fp, "%s{\"batch\":%d,\"tokens\":%d,\"median_ms\":%g}",
                    i == 0 && n == 1 ? "" : ",", b[i], n, base * b[i] + slope * n * b[i]);
    fprintf(fp, "]}\n");
    fclose(fp);
}

static double rt_number(const cJSON *hw, const char *key)
{
    const cJSON *x = sq_json_field(sq_json_field(hw, "sequoia_run"), key);
    cr_assert(cJSON_IsNumber(x), "hardware.sequoia_run.%s", key);
    return x->valuedouble;
}

/* sequoia-plan --cost-model: sequoia-run's model chooses the envelope and the ladder's rungs,
 * the plan and the summary say so; each rung carries sequoia-run's prediction, equal to the plan
 * written for that batch size alone; the default (and --cost-model engine) writes the same plan
 * byte for byte as before; bad values and a missing profile are refused (64). */
Test(dynamic, plan_cost_model_chooses_and_the_ladder_carries_both, .timeout = 120)
{
    char *dir = tu_tmpdir(), *c = tu_path(dir, "c.h5"), *j = tu_path(dir, "c.json");
    char *tp = tu_path(dir, "t.json"), *dp = tu_path(dir, "d.json");
    char *t4 = tu_path(dir, "t4.json"), *d4 = tu_path(dir, "d4.json");
    char *pl = tu_path(dir, "p.json"), *p4 = tu_path(dir, "p4.json");
    char *pe = tu_path(dir, "pe.json"), *pd = tu_path(dir, "pd.json");
    write_corpus(c);
    char *err = NULL, *out = NULL;
    cr_assert_eq(run_tool(env_bin("SQ_ACCEPT_BIN"), (const char *[]){c, "-m", "greedy", "-w",
                          "4", "-q", "-o", j, NULL}, NULL, &err), 0, "%s", err);
    free(err);
    int b14[2] = {1, 4}, b4[1] = {4};
    /* a draft whose forwards cost as much as the target's per token: the models differ */
    write_profile(tp, b14, 2, 10.0, 0.3);
    write_profile(dp, b14, 2, 1.0, 0.4);
    write_profile(t4, b4, 1, 10.0, 0.3);
    write_profile(d4, b4, 1, 1.0, 0.4);
    int rc = run_tool(env_bin("SQ_PLAN_BIN"), (const char *[]){"-a", j, "--engine", "sglang",
                      "--target-profile", tp, "--draft-profile", dp, "-n", "24", "--trials",
                      "2000", "--ladder", "--cost-model", "sequoia-run", "-o", pl, NULL}, &out,
                      &err);
    cr_assert_eq(rc, 0, "%s", err);
    cr_expect(out && strstr(out, "chosen by:      sequoia-run's cost model") &&
              strstr(out, "batch 4: ") && strstr(out, "; sequoia-run "), "%s", out);
    free(out);
    free(err);
    rc = run_tool(env_bin("SQ_PLAN_BIN"), (const char *[]){"-a", j, "--engine", "sglang",
                  "--target-profile", t4, "--draft-profile", d4, "-n", "24", "--trials", "2000",
                  "--cost-model", "sequoia-run", "-o", p4, "-q", NULL}, NULL, &err);
    cr_assert_eq(rc, 0, "%s", err);
    free(err);
    sq_dynplan *p = NULL, *q = NULL;
    sq_error e = {0};
    cr_assert_eq(sq_dynplan_load(pl, &p, &e), 0, "%s", e.msg);
    cr_assert_eq(sq_dynplan_load(p4, &q, &e), 0, "%s", e.msg);
    const cJSON *by = sq_json_field(p->hardware, "chosen_by");
    cr_expect(cJSON_IsString(by) && !strcmp(by->valuestring, "sequoia-run"));
    cr_assert_eq(p->n_ladder, 2);
    /* rung 0 is batch 1, the plan's own hardware section; rung 1 the plan for batch 4 alone */
    const sq_dynplan_rung *g0 = &p->ladder[0], *g1 = &p->ladder[1];
    cr_expect(g0->steps == p->steps && g0->topk == p->topk && g0->nodes == p->nodes);
    cr_expect_float_eq(g0->run_tokens_per_second, rt_number(p->hardware, "tokens_per_second"),
                       1e-9 * g0->run_tokens_per_second);
    cr_expect_float_eq(g0->run_catchup, rt_number(p->hardware, "draft_catchup_tokens"), 1e-12);
    cr_expect(g1->steps == q->steps && g1->topk == q->topk && g1->nodes == q->nodes,
              "rung %d,%d,%d, plan %d,%d,%d", g1->steps, g1->topk, g1->nodes, q->steps, q->topk,
              q->nodes);
    cr_expect_float_eq(g1->run_tokens_per_second, rt_number(q->hardware, "tokens_per_second"),
                       1e-9 * g1->run_tokens_per_second);
    cr_expect_float_eq(g1->run_round_ms, rt_number(q->hardware, "round_ms"), 1e-9);
    cr_expect_float_eq(g1->run_speedup, rt_number(q->hardware, "predicted_speedup"), 1e-9);
    /* the chosen envelope is sequoia-run's fastest: no runner-up beats it by its measure */
    const cJSON *ru;
    cJSON_ArrayForEach(ru, sq_json_field(p->hardware, "runner_ups"))
        cr_expect(sq_json_field(ru, "sequoia_run_tokens_per_second")->valuedouble <=
                  rt_number(p->hardware, "tokens_per_second") * (1 + 1e-12));
    sq_dynplan_free(p);
    sq_dynplan_free(q);
    /* the engine's model: the same plan with --cost-model engine as without the option */
    const char *base[] = {"-a", j, "--engine", "sglang", "--target-profile", tp,
                          "--draft-profile", dp, "-n", "24", "--trials", "2000", "--ladder", "-q",
                          "-o", pd, NULL};
    cr_assert_eq(run_tool(env_bin("SQ_PLAN_BIN"), base, NULL, &err), 0, "%s", err);
    free(err);
    cr_assert_eq(run_tool(env_bin("SQ_PLAN_BIN"), (const char *[]){"-a", j, "--engine", "sglang",
                          "--target-profile", tp, "--draft-profile", dp, "-n", "24", "--trials",
                          "2000", "--ladder", "-q", "--cost-model", "engine", "-o", pe, NULL},
                          NULL, &err), 0, "%s", err);
    free(err);
    char *a1 = tu_read(pd, NULL), *a2 = tu_read(pe, NULL);
    cr_expect_str_eq(a1, a2);
    cr_expect(!strstr(a1, "chosen_by"));
    free(a1);
    free(a2);
    /* refusals */
    rc = run_tool(env_bin("SQ_PLAN_BIN"), (const char *[]){"-a", j, "--engine", "sglang",
                  "--target-profile", tp, "--draft-profile", dp, "--cost-model", "foo", "-o", pl,
                  NULL}, NULL, &err);
    cr_expect_eq(rc, 64, "%s", err);
    cr_expect(err && strstr(err, "--cost-model: unknown model 'foo'"), "%s", err);
    free(err);
    rc = run_tool(env_bin("SQ_PLAN_BIN"), (const char *[]){"-a", j, "--engine", "sglang",
                  "--envelope", "3,2,6", "--mode", "greedy", "--cost-model", "sequoia-run", "-o",
                  pl, NULL}, NULL, &err);
    cr_expect_eq(rc, 64, "%s", err);
    cr_expect(err && strstr(err, "--cost-model") && strstr(err, "--target-profile"), "%s", err);
    free(err);
    tu_rmtree(dir);
}

/* The keys of --cost-model in a dynamic plan: a rung's sequoia_run (kept through a round trip,
 * checked naming the rung), hardware.chosen_by and hardware.batch. */
Test(dynamic, plan_file_sequoia_run_rungs_and_chosen_by)
{
    char *dir = tu_tmpdir(), *f = tu_path(dir, "p.json"), *g = tu_path(dir, "q.json");
    const char *rung = "\"tokens_per_second\": 900}, ";
    const char *with = "\"tokens_per_second\": 900, \"sequoia_run\": {\"draft_catchup_tokens\": "
                       "1.25, \"round_ms\": 3, \"tokens_per_second\": 950, "
                       "\"predicted_speedup\": 1.9}}, ";
    /* the hardware's "tokens_per_second": 900} comes first; the rung's is the second */
    const char *at = strstr(strstr(GOOD, "\"ladder\""), rung);
    cr_assert_not_null(at);
    char text[4096];
    snprintf(text, sizeof text, "%.*s%s%s", (int)(at - GOOD), GOOD, with, at + strlen(rung));
    tu_write(f, text);
    sq_dynplan *p = NULL;
    sq_error e = {0};
    cr_assert_eq(sq_dynplan_load(f, &p, &e), 0, "%s", e.msg);
    cr_expect_float_eq(p->ladder[0].run_tokens_per_second, 950, 0);
    cr_expect_float_eq(p->ladder[0].run_catchup, 1.25, 0);
    cr_expect_float_eq(p->ladder[0].run_round_ms, 3, 0);
    cr_expect_float_eq(p->ladder[0].run_speedup, 1.9, 0);
    cr_expect_float_eq(p->ladder[1].run_tokens_per_second, 0, 0, "absent: 0");
    cr_assert_eq(sq_dynplan_save(g, p, &e), 0, "%s", e.msg);
    sq_dynplan *q = NULL;
    cr_assert_eq(sq_dynplan_load(g, &q, &e), 0, "%s", e.msg);
    cr_expect_float_eq(q->ladder[0].run_tokens_per_second, 950, 0);
    cr_expect_float_eq(q->ladder[0].run_speedup, 1.9, 0);
    sq_dynplan_free(p);
    sq_dynplan_free(q);
    struct { const char *from, *to, *field; } bad[] = {
        {"\"tokens_per_second\": 950", "\"tokens_per_second\": 0",
         "ladder[0].sequoia_run.tokens_per_second"},
        {"\"round_ms\": 3,", "\"round_ms\": -3,", "ladder[0].sequoia_run.round_ms"},
        {"\"sequoia_run\": {", "\"sequoia_run\": 1, \"x\": {", "ladder[0].sequoia_run"},
        {"\"round_ms\": 3.5", "\"round_ms\": 3.5, \"chosen_by\": \"foo\"", "hardware.chosen_by"},
        {"\"round_ms\": 3.5", "\"round_ms\": 3.5, \"batch\": 0", "hardware.batch"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        const char *w = strstr(text, bad[i].from);
        cr_assert_not_null(w, "%s", bad[i].from);
        char m[4096];
        snprintf(m, sizeof m, "%.*s%s%s", (int)(w - text), text, bad[i].to,
                 w + strlen(bad[i].from));
        tu_write(f, m);
        p = NULL;
        e = (sq_error){0};
        cr_expect_eq(sq_dynplan_load(f, &p, &e), SQ_EDATA, "%s: %s", bad[i].field, e.msg);
        cr_expect(strstr(e.msg, "p.json") && strstr(e.msg, bad[i].field), "%s: %s",
                  bad[i].field, e.msg);
        sq_dynplan_free(p);
    }
    tu_rmtree(dir);
}

/* sequoia-plan --export of a dynamic plan: -o gets the engine's flags (planner/export.h,
 * sq_export_envelope; with --ladder sq_export_envelope_ladder) and --save-plan the plan; a saved
 * dynamic plan exports the same through --plan (sq_dynplan_sniff). */
Test(dynamic, plan_exports_a_dynamic_plan_as_the_engines_flags, .timeout = 120)
{
    char *dir = tu_tmpdir(), *c = tu_path(dir, "c.h5"), *j = tu_path(dir, "c.json");
    char *pl = tu_path(dir, "p.json"), *fl = tu_path(dir, "flags.json");
    char *f2 = tu_path(dir, "flags2.json"), *tr = tu_path(dir, "trt.json");
    char *tp = tu_path(dir, "t.json"), *lp = tu_path(dir, "lp.json");
    char *lf = tu_path(dir, "lf.json"), *lf2 = tu_path(dir, "lf2.json");
    write_corpus(c);
    char *err = NULL;
    cr_assert_eq(run_tool(env_bin("SQ_ACCEPT_BIN"), (const char *[]){c, "-m", "greedy", "-w",
                          "4", "-q", "-o", j, NULL}, NULL, &err), 0, "%s", err);
    free(err);
    int rc = run_tool(env_bin("SQ_PLAN_BIN"), (const char *[]){"-a", j, "--engine", "sglang",
                      "--envelope", "3,2,6", "--trials", "500", "--export", "sglang", "-o", fl,
                      "--save-plan", pl, "-q", NULL}, NULL, &err);
    cr_assert_eq(rc, 0, "%s", err);
    free(err);
    cJSON *x = NULL;
    cr_assert_eq(sq_json_load(fl, &x, NULL), 0);
    const cJSON *sa = sq_json_field(x, "server_args");
    cr_expect(sq_json_field(sa, "speculative_num_steps")->valueint == 3 &&
              sq_json_field(sa, "speculative_eagle_topk")->valueint == 2 &&
              sq_json_field(sa, "speculative_num_draft_tokens")->valueint == 6);
    cJSON_Delete(x);
    sq_dynplan *p = NULL;
    sq_error e = {0};
    cr_assert_eq(sq_dynplan_load(pl, &p, &e), 0, "--save-plan holds the plan: %s", e.msg);
    cr_expect(p->steps == 3 && p->topk == 2 && p->nodes == 6);
    sq_dynplan_free(p);
    /* the saved plan, exported again */
    rc = run_tool(env_bin("SQ_PLAN_BIN"), (const char *[]){"--plan", pl, "--export", "sglang",
                  "-o", f2, NULL}, NULL, &err);
    cr_assert_eq(rc, 0, "%s", err);
    free(err);
    char *a = tu_read(fl, NULL), *b = tu_read(f2, NULL);
    cr_expect_str_eq(a, b);
    free(a);
    free(b);
    /* another engine's export, an --svg of an envelope: usage errors, nothing written */
    rc = run_tool(env_bin("SQ_PLAN_BIN"), (const char *[]){"--plan", pl, "--export",
                  "trtllm-dynamic", "-o", tr, NULL}, NULL, &err);
    cr_expect_eq(rc, 64, "%s", err);
    cr_expect(err && strstr(err, "p.json") && strstr(err, "--export sglang"), "%s", err);
    cr_expect_neq(access(tr, F_OK), 0);
    free(err);
    rc = run_tool(env_bin("SQ_PLAN_BIN"), (const char *[]){"--plan", pl, "--svg", tr, NULL},
                  NULL, &err);
    cr_expect_eq(rc, 64, "%s", err);
    free(err);
    /* TensorRT-LLM's EagleDecodingConfig fields */
    rc = run_tool(env_bin("SQ_PLAN_BIN"), (const char *[]){"-a", j, "--engine", "trtllm-dynamic",
                  "--envelope", "3,2,6", "--trials", "500", "--export", "trtllm-dynamic", "-o",
                  tr, "-q", NULL}, NULL, &err);
    cr_assert_eq(rc, 0, "%s", err);
    free(err);
    cr_assert_eq(sq_json_load(tr, &x, NULL), 0);
    cr_expect(sq_json_field(x, "max_draft_len")->valueint == 3 &&
              sq_json_field(x, "dynamic_tree_max_topK")->valueint == 2 &&
              sq_json_field(x, "max_total_draft_tokens")->valueint == 5);
    cJSON_Delete(x);
    /* a ladder: one envelope per batch size */
    FILE *fp = fopen(tp, "w");
    cr_assert(fp);
    fprintf(fp, "{\"format\":\"sequoia-profile\",\"version\":2,\"points\":[");
    for (int bb = 1; bb <= 4; bb *= 4)
        for (int n = 1; n <= 64; n++)
            fprintf(fp, "%s{\"batch\":%d,\"tokens\":%d,\"median_ms\":%g}",
                    bb == 1 && n == 1 ? "" : ",", bb, n, 10.0 * bb + 0.3 * n * bb);
    fprintf(fp, "]}\n");
    fclose(fp);
    rc = run_tool(env_bin("SQ_PLAN_BIN"), (const char *[]){"-a", j, "--engine", "sglang",
                  "--target-profile", tp, "--draft-ms", "1", "-n", "24", "--trials", "500",
                  "--ladder", "--export", "sglang", "-o", lf, "--save-plan", lp, "-q", NULL},
                  NULL, &err);
    cr_assert_eq(rc, 0, "%s", err);
    free(err);
    cr_assert_eq(sq_json_load(lf, &x, NULL), 0);
    const cJSON *rows = sq_json_field(x, "per_batch");
    cr_expect_eq(cJSON_GetArraySize(rows), 2);
    cr_expect_eq(sq_json_field(cJSON_GetArrayItem(rows, 1), "batch")->valueint, 4);
    cJSON_Delete(x);
    rc = run_tool(env_bin("SQ_PLAN_BIN"), (const char *[]){"--plan", lp, "--export", "sglang",
                  "-o", lf2, NULL}, NULL, &err);
    cr_assert_eq(rc, 0, "%s", err);
    free(err);
    a = tu_read(lf, NULL);
    b = tu_read(lf2, NULL);
    cr_expect_str_eq(a, b, "the saved ladder exports the same");
    free(a);
    free(b);
    tu_rmtree(dir);
}

/* ---- bad inputs of the dynamic prediction (docs/robustness.md) ------------------------------------- */

/* The curves of write_corpus's corpus, with its dynamic-tree statistics (topk 8), in dir/c.json;
 * `more` (NULL-terminated, may be NULL) adds sequoia-accept options. Returns c.json's path. */
static char *dyn_curves(const char *dir, const char *const *more)
{
    char *c = tu_path(dir, "c.h5"), *j = tu_path(dir, "c.json"), *err = NULL;
    write_corpus(c);
    const char *args[24] = {c, "-m", "greedy", "-w", "4", "-q", "-o", j};
    int n = 8;
    for (int i = 0; more && more[i] && n < 23; i++)
        args[n++] = more[i];
    args[n] = NULL;
    cr_assert_eq(run_tool(env_bin("SQ_ACCEPT_BIN"), args, NULL, &err), 0, "%s", err);
    free(err);
    free(c);
    return j;
}

/* sequoia-plan `args` under `ulimit -v kib` (a shell runs it); the exit status. */
static int plan_with_as_limit(long kib, const char *const *args, char **err)
{
    char cmd[4096];
    int n = snprintf(cmd, sizeof cmd, "ulimit -v %ld; exec '%s'", kib, env_bin("SQ_PLAN_BIN"));
    for (int i = 0; args[i]; i++)
        n += snprintf(cmd + n, sizeof cmd - (size_t)n, " '%s'", args[i]);
    cr_assert(n < (int)sizeof cmd);
    char *const sh[] = {"/bin/sh", "-c", cmd, NULL};
    return tu_run(sh, NULL, err);
}

/* The replay's buffers of --trials 10^7 at L = 8 (about 1.3 GB) do not fit in 600 MB of address
 * space: exit 70 saying what was being allocated, never an abort (docs/robustness.md, "Out of
 * memory"). The cleanup once freed a work space that had never been set up (SIGABRT, 134). */
Test(dynamic, out_of_memory_in_the_prediction_is_exit_70_never_a_signal, .timeout = 120)
{
    char *dir = tu_tmpdir(), *j = dyn_curves(dir, NULL), *pl = tu_path(dir, "p.json"), *err = NULL;
    int rc = plan_with_as_limit(600000, (const char *[]){"-a", j, "--engine", "sglang",
                                "--envelope", "8,8,64", "--mode", "greedy", "--trials",
                                "10000000", "-q", "-o", pl, NULL}, &err);
    /* AddressSanitizer cannot reserve its shadow memory under the limit: not the tool's doing */
    if (!(err && strstr(err, "AddressSanitizer"))) {
        cr_expect_eq(rc, 70, "exit %d: %s", rc, err);
        cr_expect(err && strstr(err, "out of memory while allocating dynamic prediction"), "%s",
                  err);
        cr_expect(!tu_exists(pl), "nothing written");
    }
    free(err);
    tu_rmtree(dir);
}

/* --envelope past int: refused (64) with the number as typed. sscanf's %d once wrapped
 * 4294967299 to 3 and planned 3,2,6 (exit 0), and quoted 99999999999 as 1215752191. The parser
 * is sequoia-run's too (sq_dynplan_envelope_parse). */
Test(dynamic, envelope_numbers_past_int_are_refused_as_typed, .timeout = 120)
{
    char *dir = tu_tmpdir(), *j = dyn_curves(dir, NULL), *pl = tu_path(dir, "p.json"), *err = NULL;
    struct { const char *engine, *envelope, *says; } bad[] = {
        {"sglang", "4294967299,2,6", "L (draft steps) 4294967299 is out of range"},
        {"trtllm-dynamic", "3,4294967298,6", "K (top-K) 4294967298 is out of range"},
        {"sglang", "3,2,4294967302", "N (nodes, the root included) 4294967302 is out of range"},
        {"sglang", "99999999999,2,6", "99999999999 is out of range"},
        {"sglang", "-99999999999,2,6", "-99999999999 is out of range"},
        {"sglang", "99999999999999999999,2,6", "99999999999999999999 is out of range"},
        {"sglang", "3,2,6x", "unexpected 'x' after N"},
        {"sglang", "3,,6", "K (top-K) is not an integer"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        int rc = run_tool(env_bin("SQ_PLAN_BIN"), (const char *[]){"-a", j, "--engine",
                          bad[i].engine, "--envelope", bad[i].envelope, "--mode", "greedy",
                          "--trials", "500", "-q", "-o", pl, NULL}, NULL, &err);
        cr_expect_eq(rc, 64, "%s: exit %d: %s", bad[i].envelope, rc, err);
        cr_expect(err && strstr(err, "--envelope") && strstr(err, bad[i].envelope) &&
                  strstr(err, bad[i].says), "%s: %s", bad[i].envelope, err);
        cr_expect(!err || !strstr(err, "1215752191"), "%s", err);
        cr_expect(!tu_exists(pl), "%s: nothing written", bad[i].envelope);
        free(err);
    }
    /* the shared parser, as sequoia-run calls it */
    int L = 0, K = 0, N = 0;
    sq_error e = {0};
    cr_expect_eq(sq_dynplan_envelope_parse("4294967299,2,6", &L, &K, &N, &e), SQ_EUSAGE);
    cr_expect(strstr(e.msg, "4294967299 is out of range"), "%s", e.msg);
    cr_expect_eq(sq_dynplan_envelope_parse("2147483647,2,6", &L, &K, &N, &e), SQ_OK, "%s", e.msg);
    cr_expect(L == 2147483647 && K == 2 && N == 6);
    tu_rmtree(dir);
}

/* Writes c.json's JSON with `mutate` applied into dir/name; returns its path. */
static char *curves_mutated(const char *dir, const char *c, const char *name,
                            void (*mutate_fn)(cJSON *dyn))
{
    cJSON *root = NULL;
    cr_assert_eq(sq_json_load(c, &root, NULL), 0);
    cJSON *dyn = cJSON_GetObjectItemCaseSensitive(root, "dynamic");
    cr_assert_not_null(dyn);
    mutate_fn(dyn);
    char *path = tu_path(dir, name);
    sq_error e = {0};
    cr_assert_eq(sq_json_save(path, root, &e), 0, "%s", e.msg);
    cJSON_Delete(root);
    return path;
}

static void accept_greedy_null(cJSON *dyn)
{
    cJSON *acc = cJSON_GetObjectItemCaseSensitive(dyn, "accept");
    cr_assert(cJSON_ReplaceItemInObjectCaseSensitive(acc, "greedy@T0", cJSON_CreateNull()));
}

/* dynamic.accept.<configuration>: null is an entry that is not an array, named as such (it was
 * "no configuration "greedy@T0" (it has "greedy@T0")"). */
Test(dynamic, a_null_configuration_is_named_as_not_an_array, .timeout = 120)
{
    char *dir = tu_tmpdir(), *j = dyn_curves(dir, NULL), *pl = tu_path(dir, "p.json"), *err = NULL;
    char *bad = curves_mutated(dir, j, "accept-null.json", accept_greedy_null);
    int rc = run_tool(env_bin("SQ_PLAN_BIN"), (const char *[]){"-a", bad, "--engine", "sglang",
                      "--envelope", "3,2,6", "--mode", "greedy", "--trials", "500", "-q", "-o",
                      pl, NULL}, NULL, &err);
    cr_expect_eq(rc, 65, "exit %d: %s", rc, err);
    cr_expect(err && strstr(err, "accept-null.json: dynamic.accept.greedy@T0: expected an array"),
              "%s", err);
    cr_expect(err && !strstr(err, "no configuration"), "%s", err);
    cr_expect(!tu_exists(pl));
    free(err);
    tu_rmtree(dir);
}

static void drop_next_rank(cJSON *dyn)
{
    cJSON_DeleteItemFromObjectCaseSensitive(dyn, "next_rank");
}

/* --path text with statistics without next_rank: the file's lack, 65 naming the file and the
 * key (it was 64 with neither named). */
Test(dynamic, path_text_without_next_rank_names_the_file_and_the_key, .timeout = 120)
{
    char *dir = tu_tmpdir(), *j = dyn_curves(dir, NULL), *pl = tu_path(dir, "p.json"), *err = NULL;
    char *bad = curves_mutated(dir, j, "no-next-rank.json", drop_next_rank);
    int rc = run_tool(env_bin("SQ_PLAN_BIN"), (const char *[]){"-a", bad, "--engine", "sglang",
                      "--envelope", "3,2,6", "--mode", "greedy", "--path", "text", "--trials",
                      "500", "-q", "-o", pl, NULL}, NULL, &err);
    cr_expect_eq(rc, 65, "exit %d: %s", rc, err);
    cr_expect(err && strstr(err, "no-next-rank.json: no key \"dynamic.next_rank\"") &&
              strstr(err, "--path text"), "%s", err);
    cr_expect(!tu_exists(pl));
    free(err);
    /* the same file along drawn paths needs no next_rank */
    rc = run_tool(env_bin("SQ_PLAN_BIN"), (const char *[]){"-a", bad, "--engine", "sglang",
                  "--envelope", "3,2,6", "--mode", "greedy", "--trials", "500", "-q", "-o", pl,
                  NULL}, NULL, &err);
    cr_expect_eq(rc, 0, "%s", err);
    free(err);
    tu_rmtree(dir);
}

/* An envelope K past the statistics' topk names the file, dynamic.topk and sequoia-accept's
 * option (it was "dynamic prediction: L 3 (1..16), K 4 (1..16, the statistics keep 2 ranks),
 * ..."). */
Test(dynamic, envelope_k_past_the_statistics_topk_names_the_file_and_the_option, .timeout = 120)
{
    char *dir = tu_tmpdir(), *pl = tu_path(dir, "p.json"), *err = NULL;
    char *j = dyn_curves(dir, (const char *[]){"--dynamic-topk", "2", NULL});
    int rc = run_tool(env_bin("SQ_PLAN_BIN"), (const char *[]){"-a", j, "--engine", "sglang",
                      "--envelope", "3,4,10", "--mode", "greedy", "--trials", "500", "-q", "-o",
                      pl, NULL}, NULL, &err);
    cr_expect_eq(rc, 64, "exit %d: %s", rc, err);
    cr_expect(err && strstr(err, "c.json: dynamic.topk is 2; envelope K 4 needs at least 4") &&
              strstr(err, "--dynamic-topk 4"), "%s", err);
    cr_expect(!tu_exists(pl));
    free(err);
    /* K within the statistics' ranks plans */
    rc = run_tool(env_bin("SQ_PLAN_BIN"), (const char *[]){"-a", j, "--engine", "sglang",
                  "--envelope", "3,2,6", "--mode", "greedy", "--trials", "500", "-q", "-o", pl,
                  NULL}, NULL, &err);
    cr_expect_eq(rc, 0, "%s", err);
    free(err);
    tu_rmtree(dir);
}

/* --trials 10^7 at L = 16 needs about 5 GB of replay buffers: refused at once (64) with the
 * limit, not allocated (docs/robustness.md, "Limits"). */
Test(dynamic, trials_past_the_replay_limit_are_refused_at_once, .timeout = 60)
{
    char *dir = tu_tmpdir(), *j = dyn_curves(dir, NULL), *pl = tu_path(dir, "p.json"), *err = NULL;
    int rc = run_tool(env_bin("SQ_PLAN_BIN"), (const char *[]){"-a", j, "--engine", "sglang",
                      "--envelope", "16,2,20", "--mode", "greedy", "--trials", "10000000", "-q",
                      "-o", pl, NULL}, NULL, &err);
    cr_expect_eq(rc, 64, "exit %d: %s", rc, err);
    cr_expect(err && strstr(err, "replay buffers, more than the limit of 2048 MiB") &&
              strstr(err, "--trials"), "%s", err);
    cr_expect(!tu_exists(pl));
    free(err);
    tu_rmtree(dir);
}
