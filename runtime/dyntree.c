/* The dynamic trees of SGLang and TensorRT-LLM as runtime/specdec.h hooks: see dyntree.h and
 * docs/runtime.md, "Dynamic trees (SGLang, TensorRT-LLM)". Written from the engines' sources
 * (read, not copied): SGLang python/sglang/srt/speculative/eagle_utils.py (select_top_k_tokens,
 * organize_draft_results) and eagle_worker.py (draft_forward: the draft's softmax at
 * temperature 1, then fast_topk); TensorRT-LLM tensorrt_llm/_torch/speculative/
 * eagle3_dynamic_tree.py (_sample_softmax_topk, _select_topk_draft_tokens,
 * _resample_final_tokens) and tensorrt_llm/llmapi/llm_args.py (EagleDecodingConfig's
 * dynamic-tree validator). */
#include "runtime/dyntree.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "libsequoia/format/dynplan.h"
#include "libsequoia/verify/rule.h"
#include "libsequoia/verify/verify.h"

struct sq_dyntree {
    sq_dyn_engine     engine;
    int               L, K, N, V;
    double           *prob;     /* (V) the draft's softmax at temperature 1                 */
    double           *score;    /* (capacity) scores of a level's candidates, or all nodes   */
    int32_t          *idx;      /* (capacity) a top-k selection                              */
    sq_ranked        *heap;     /* (capacity)                                                */
    sq_tree_children *kids;     /* (K) the children added on the level being grown           */
};

static const char *const ENGINE_NAMES[] = {"sglang", "trtllm-dynamic"};

const char *sq_dyn_engine_name(sq_dyn_engine e)
{
    return e == SQ_DYN_TRTLLM ? ENGINE_NAMES[1] : ENGINE_NAMES[0];
}

int sq_dyn_engine_parse(const char *name, sq_dyn_engine *out, sq_error *err)
{
    for (int e = 0; e < 2; e++)
        if (name && strcmp(name, ENGINE_NAMES[e]) == 0) {
            *out = (sq_dyn_engine)e;
            return SQ_OK;
        }
    return sq_error_set(err, SQ_EUSAGE, "--engine: '%.100s' is not an engine of dynamic trees "
                        "(sglang or trtllm-dynamic)", name ? name : "");
}

int sq_dyntree_parse_envelope(const char *s, int *L, int *K, int *N, sq_error *err)
{
    static const char *const field[] = {"L (draft steps)", "K (top-K)", "N (nodes, the root "
                                        "included)"};
    int v[3];
    const char *p = s ? s : "";
    for (int i = 0; i < 3; i++) {
        char *end;
        errno = 0;
        long x = strtol(p, &end, 10);
        if (end == p)
            return sq_error_set(err, SQ_EUSAGE, "--envelope: '%.100s': %s is not an integer "
                                "(the form is L,K,N)", s ? s : "", field[i]);
        if (errno == ERANGE || x < INT_MIN || x > INT_MAX)   /* an integer, but too large */
            return sq_error_set(err, SQ_EUSAGE, "--envelope: '%.100s': %s is out of range (at "
                                "most %d)", s ? s : "", field[i], INT_MAX);
        v[i] = (int)x;
        if (i < 2 && *end != ',')
            return sq_error_set(err, SQ_EUSAGE, "--envelope: '%.100s': three integers L,K,N "
                                "are needed (after %s)", s ? s : "", field[i]);
        if (i == 2 && *end != '\0')
            return sq_error_set(err, SQ_EUSAGE, "--envelope: '%.100s': unexpected '%.20s' after "
                                "N (the form is L,K,N)", s ? s : "", end);
        p = end + 1;
    }
    *L = v[0];
    *K = v[1];
    *N = v[2];
    return SQ_OK;
}

int sq_dyntree_capacity(int L, int K)
{
    long long c = 1 + (long long)K + (long long)(L - 1) * K * K;
    return c > INT_MAX || c < 1 ? -1 : (int)c;
}

int sq_dyntree_check(sq_dyn_engine e, int L, int K, int N, sq_error *err)
{
    /* the engines' rules, stated once with the dynamic plan format (the planner and the exports
     * call the same function) */
    int rc = sq_dynplan_envelope_check(sq_dyn_engine_name(e), L, K, N, NULL, err);
    if (rc)
        return rc;
    /* then the run's own limit: every candidate a step grows is a node of the decoder's plan */
    long long grown = 1 + (long long)K + (long long)(L - 1) * K * K;
    if ((L > 1 && (long long)K * K > (long long)SQ_PLAN_MAX_NODES / (L - 1)) ||
        grown > SQ_PLAN_MAX_NODES)
        return sq_error_set(err, SQ_EUSAGE, "envelope %d,%d,%d (L,K,N): the grown tree of "
                            "1 + K + (L - 1) K^2 nodes exceeds this toolkit's %d (a limit of the "
                            "run, not of %s)", L, K, N, SQ_PLAN_MAX_NODES, sq_dyn_engine_name(e));
    return SQ_OK;
}

int sq_dyntree_plan(int L, int K, sq_plan **out, sq_error *err)
{
    *out = NULL;
    int n = sq_dyntree_capacity(L, K);
    if (L < 1 || K < 1 || n < 0 || n > SQ_PLAN_MAX_NODES)
        return sq_error_set(err, SQ_EUSAGE, "envelope: L = %d, K = %d: no tree of that size", L,
                            K);
    int *parent = malloc((size_t)n * sizeof *parent), *rank = malloc((size_t)n * sizeof *rank);
    if (!parent || !rank) {
        free(parent);
        free(rank);
        return sq_error_oom(err, "envelope plan");
    }
    parent[0] = -1;
    rank[0] = 0;
    int m = 1, level_first = 0, level_n = 1;
    for (int l = 0; l < L; l++) {
        int next_first = m, parents = level_n < K ? level_n : K;
        for (int j = 0; j < parents; j++)
            for (int r = 0; r < K; r++) {
                parent[m] = level_first + j;
                rank[m++] = r + 1;
            }
        level_first = next_first;
        level_n = m - next_first;
    }
    SQ_ASSERT(m == n);
    sq_tree *t = NULL;
    int rc = sq_tree_from_parents(parent, rank, n, &t, "envelope", err);
    free(parent);
    free(rank);
    if (rc)
        return rc;
    const double p0 = 0.0;
    sq_curve c = {0};
    if ((rc = sq_curve_init(&c, "dynamic-envelope", "greedy", &p0, 1, err))) {
        sq_tree_free(t);
        return rc;
    }
    rc = sq_plan_new(t, &c, 0, L + 1, K, out, err);
    sq_curve_clear(&c);
    return rc;
}

void sq_dyntree_free(sq_dyntree *dt)
{
    if (!dt)
        return;
    free(dt->prob);
    free(dt->score);
    free(dt->idx);
    free(dt->heap);
    free(dt->kids);
    free(dt);
}

int sq_dyntree_new(sq_dyn_engine e, int L, int K, int N, int vocab, sq_dyntree **out,
                   sq_error *err)
{
    *out = NULL;
    int rc = sq_dyntree_check(e, L, K, N, err);
    if (rc)
        return rc;
    if (K > vocab)
        return sq_error_set(err, SQ_EUSAGE, "envelope %d,%d,%d: K = %d exceeds the models' "
                            "vocabulary of %d tokens", L, K, N, K, vocab);
    int cap = sq_dyntree_capacity(L, K);
    sq_dyntree *dt = calloc(1, sizeof *dt);
    if (!dt)
        return sq_error_oom(err, "dynamic tree");
    *dt = (sq_dyntree){.engine = e, .L = L, .K = K, .N = N, .V = vocab};
    dt->prob = malloc((size_t)vocab * sizeof *dt->prob);
    dt->score = malloc((size_t)cap * sizeof *dt->score);
    dt->idx = malloc((size_t)cap * sizeof *dt->idx);
    dt->heap = malloc((size_t)cap * sizeof *dt->heap);
    dt->kids = malloc((size_t)K * sizeof *dt->kids);
    if (!dt->prob || !dt->score || !dt->idx || !dt->heap || !dt->kids) {
        sq_dyntree_free(dt);
        return sq_error_oom(err, "dynamic tree");
    }
    *out = dt;
    return SQ_OK;
}

const int32_t *sq_dyntree_expand(sq_dyntree *dt, const float *logits)
{
    /* the engines' scores: the draft's softmax at temperature 1, its K largest */
    sq_probs_from_logits(logits, dt->V, 1.0, 1.0, dt->prob, NULL);
    sq_topk_keys(dt->prob, dt->V, dt->K, dt->idx, dt->heap);
    return dt->idx;
}

/* Level `level` (0 .. L - 1) gives its expanded nodes (the root, then the K kept nodes of each
 * level) their K children, then keeps the K best of the new level for the draft to read. */
int sq_dyntree_grow(sq_tree_grow *g, int level, void *user, sq_error *err)
{
    sq_dyntree *dt = user;
    const sq_specdec_params *prm = sq_tree_grow_params(g);
    const int K = dt->K, V = sq_tree_grow_vocab(g);
    if (prm->mode == SQ_MODE_SPECINFER)
        return sq_error_set(err, SQ_EUSAGE, "%s: the specinfer mode is not run on dynamic trees "
                            "(use greedy, topk or stochastic)", sq_dyn_engine_name(dt->engine));
    if (sq_tree_grow_capacity(g) < sq_dyntree_capacity(dt->L, K) ||
        sq_tree_grow_max_depth(g) < dt->L + 1 || V != dt->V)
        return sq_error_set(err, SQ_EUSAGE, "%s: envelope %d,%d,%d: the decoder holds %d nodes "
                            "over %d levels of a %d-token vocabulary; it needs %d over %d of %d "
                            "(make it with sq_dyntree_plan)", sq_dyn_engine_name(dt->engine),
                            dt->L, K, dt->N, sq_tree_grow_capacity(g),
                            sq_tree_grow_max_depth(g), V, sq_dyntree_capacity(dt->L, K),
                            dt->L + 1, dt->V);
    if (level >= dt->L)
        return SQ_OK;
    int first, cnt = sq_tree_grow_level(g, level, &first), nk = 0;
    for (int u = first; u < first + cnt; u++) {
        if (!sq_tree_grow_expanded(g, u))
            continue;
        SQ_ASSERT(nk < K);
        const float *logits = sq_tree_grow_logits(g, u);
        sq_dyntree_expand(dt, logits);
        double ps = level == 0 ? 1.0 : sq_tree_grow_score(g, u);
        sq_tree_children *ch = &dt->kids[nk++];
        int rc = sq_tree_grow_add(g, u, K, ch, err);
        if (rc)
            return rc;
        for (int j = 0; j < K; j++) {
            ch->scores[j] = ps * dt->prob[dt->idx[j]];
            ch->tokens[j] = dt->idx[j];
            ch->expand[j] = 0;
        }
        if (prm->mode == SQ_MODE_STOCHASTIC)   /* Sequoia's proposal on the same shape */
            sq_verifier_propose(sq_tree_grow_verifier(g), sq_tree_grow_probs(g, u), logits, K,
                                ch->tokens);
    }
    if (level + 1 >= dt->L || nk == 0)
        return SQ_OK;   /* the deepest level: leaves */
    /* the K best of the new level's nk K candidates are read by the draft next */
    int m = nk * K;
    for (int i = 0; i < nk; i++)
        for (int j = 0; j < K; j++)
            dt->score[i * K + j] = dt->kids[i].scores[j];
    int keep = K < m ? K : m;
    sq_topk_keys(dt->score, m, keep, dt->idx, dt->heap);
    for (int s = 0; s < keep; s++)
        dt->kids[dt->idx[s] / K].expand[dt->idx[s] % K] = 1;
    return SQ_OK;
}

/* The N - 1 best of every node grown, by score (the lower index first on ties). */
int sq_dyntree_prune(sq_tree_grow *g, void *user, uint8_t *keep, sq_error *err)
{
    (void)err;
    sq_dyntree *dt = user;
    int n = sq_tree_grow_nodes(g), m = n - 1;
    if (m <= 0)
        return SQ_OK;
    for (int v = 1; v < n; v++)
        dt->score[v - 1] = sq_tree_grow_score(g, v);
    int k = dt->N - 1 < m ? dt->N - 1 : m;
    sq_topk_keys(dt->score, m, k, dt->idx, dt->heap);
    for (int s = 0; s < k; s++)
        keep[dt->idx[s] + 1] = 1;
    return SQ_OK;
}

void sq_dyntree_attach(sq_specdec *sd, sq_dyntree *dt)
{
    sq_specdec_set_grow(sd, sq_dyntree_grow, dt);
    sq_specdec_set_prune(sd, sq_dyntree_prune, dt);
}

void sq_dyntree_attach_batch(sq_specdec_batch *bt, sq_dyntree *dt)
{
    sq_specdec_batch_set_grow(bt, sq_dyntree_grow, dt);
    sq_specdec_batch_set_prune(bt, sq_dyntree_prune, dt);
}
