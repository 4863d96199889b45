/* The engine table and everything read from it: names and their lists, limits, the checks and
 * their refusals, envelopes, what to pass alongside an export, the summary's verdicts
 * (planner/engine.h has the row, planner/export.h the functions; docs/engines.md the engines,
 * their versions and sources). A new engine is one row here (docs/engines.md, "Adding an
 * engine"). */
#include "planner/engine.h"

#include <stdlib.h>
#include <string.h>
#include <threads.h>

#include "libsequoia/format/dynplan.h"
#include "planner/engine_private.h"
#include "planner/export.h"

/* ---- what goes alongside an export ------------------------------------------------------ */

static void need_vllm(const sq_tree *t, int max_non_leaves, char *buf, size_t cap)
{
    (void)max_non_leaves;
    snprintf(buf, cap, "pass num_speculative_tokens %d with speculative_token_tree (vLLM after "
             "PR #42121 drafts chains only: sequoia-plan --ladder's vllm-schedule)", t->n - 1);
}

static void need_trtllm(const sq_tree *t, int max_non_leaves, char *buf, size_t cap)
{
    int L = sq_tree_depth(t) - 1, n = t->n;
    snprintf(buf, cap, "engine build: --max_draft_len >= %d, EAGLE --num_eagle_layers %d "
             "(every path must reach it) and --max_non_leaves_per_layer %d, Medusa >= %d heads; "
             "LLM API (two-model path, before PR #18210): max_draft_len=%d, "
             "max_total_draft_tokens=%d",
             n - 1, L, max_non_leaves > 0 ? max_non_leaves : SQ_TRTLLM_MAX_NON_LEAVES, L, L,
             n - 1);
}

static void need_medusa(const sq_tree *t, int max_non_leaves, char *buf, size_t cap)
{
    (void)max_non_leaves;
    snprintf(buf, cap, "pass medusa_choices; the checkpoint needs >= %d Medusa heads",
             sq_tree_depth(t) - 1);
}

static void need_eagle(const sq_tree *t, int max_non_leaves, char *buf, size_t cap)
{
    (void)t;
    (void)max_non_leaves;
    snprintf(buf, cap, "replace the tree in eagle/model/choices.py (cnets.init_tree drafts "
             "with it; tree_choices= alone is not enough)");
}

static void need_sglang(const sq_tree *t, int max_non_leaves, char *buf, size_t cap)
{
    (void)max_non_leaves;
    sq_envelope env;
    if (sq_envelope_of(t, SQ_ENGINE_SGLANG, &env, "plan", NULL) == SQ_OK)
        snprintf(buf, cap, "--speculative-num-steps %d --speculative-eagle-topk %d "
                 "--speculative-num-draft-tokens %d", env.steps, env.topk, env.draft_tokens);
    else
        snprintf(buf, cap, "-");
}

static void need_trtllm_dynamic(const sq_tree *t, int max_non_leaves, char *buf, size_t cap)
{
    (void)max_non_leaves;
    sq_envelope env;
    if (sq_envelope_of(t, SQ_ENGINE_TRTLLM_DYNAMIC, &env, "plan", NULL) == SQ_OK)
        snprintf(buf, cap, "use_dynamic_tree=True, dynamic_tree_max_topK=%d, max_draft_len=%d, "
                 "max_total_draft_tokens=%d", env.topk, env.steps, env.draft_tokens);
    else
        snprintf(buf, cap, "-");
}

/* ---- the envelope engines' rules and exports ------------------------------------------- */

/* The envelope engines' rules (SGLang's N - 1 <= K + (L - 1) K^2 and N = L + 1 when K = 1,
 * TensorRT-LLM's L <= N - 1 <= K L, with their sources) are stated once, in
 * libsequoia/format/dynplan.c, sq_dynplan_envelope_check: sq_engine_envelope_check below calls
 * it, as the planner and the run do. */

static void envelope_sglang(FILE *fp, int L, int K, int N)
{
    fprintf(fp, "{\"engine\": \"sglang\", \"server_args\": {\"speculative_num_steps\": %d, "
            "\"speculative_eagle_topk\": %d, \"speculative_num_draft_tokens\": %d}, "
            "\"flags\": \"--speculative-num-steps %d --speculative-eagle-topk %d "
            "--speculative-num-draft-tokens %d\"}", L, K, N, L, K, N);
}

static void envelope_trtllm_dynamic(FILE *fp, int L, int K, int N)
{
    fprintf(fp, "{\"use_dynamic_tree\": true, \"dynamic_tree_max_topK\": %d, "
            "\"max_draft_len\": %d, \"max_total_draft_tokens\": %d}", K, L, N - 1);
}

#define SGLANG_PER_BATCH                                                                       \
    "SGLang fixes --speculative-num-steps, --speculative-eagle-topk and "                      \
    "--speculative-num-draft-tokens when the server starts (python/sglang/srt/server_args.py); " \
    "its adaptive mode (--speculative-adaptive, PRs #21599 and #24055) only switches "          \
    "speculative_num_steps, per batch size, with --speculative-eagle-topk 1. For one tree per "  \
    "batch size run one server per row behind a router that sends each concurrency level to "   \
    "its row, or start one server with the row of the batch size served most; a row with "      \
    "speculate false is a server without --speculative-algorithm."

#define TRTLLM_DYNAMIC_PER_BATCH                                                               \
    "TensorRT-LLM sizes the dynamic tree's buffers from dynamic_tree_max_topK, max_draft_len "  \
    "and max_total_draft_tokens when the LLM is built "                                         \
    "(tensorrt_llm/_torch/speculative/eagle3_dynamic_tree.py), so one EagleDecodingConfig "     \
    "serves every batch size. For one tree per batch size run one LLM per row behind a router " \
    "that sends each concurrency level to its row, or build one LLM with the row of the batch "  \
    "size served most; a row with speculate false is an LLM without speculative_config. For "   \
    "chains, draft_len_schedule varies the draft length with the batch size "                   \
    "(sequoia-plan --ladder --schedule)."

/* ---- the table ------------------------------------------------------------------------------ */

#define ENVELOPE_SUMMARY "envelopes, every version: the topk, steps and draft tokens with the best " \
                         "static tree; with --target-profile, the fastest"

static const sq_engine_info engine_table[SQ_ENGINE_COUNT] = {
    [SQ_ENGINE_VLLM] = {
        .id = SQ_ENGINE_VLLM, .name = "vllm", .display = "vLLM",
        .versions = "vLLM 0.11 until PR #42121 of 2026-05-08, speculative_token_tree; later "
                    "vLLM: chains only",
        .summary = "best k_1 x k_2 x ... tree, exact; speculative_token_tree of vLLM before "
                   "PR #42121, later vLLM takes chains only",
        .format = SQ_EXPORT_VLLM,
        .limits = {.max_rank0 = -1, .level_uniform = 1},
        .uniform_note = "vLLM's EAGLE proposer drafts the same number of children for every node "
                        "of a level (a k_1 x k_2 x ... tree)",
        .write = sqe_write_tuples, .plan = sqe_plan_uniform, .requirements = need_vllm,
    },
    [SQ_ENGINE_TRTLLM] = {
        .id = SQ_ENGINE_TRTLLM, .name = "trtllm", .display = "TensorRT-LLM",
        .versions = "TensorRT-LLM <= 1.3, eagle_choices/medusa_choices, two-model path; "
                    "eagle_choices removed by PR #18210 of 2026-08",
        .summary = "static choices of <= 1.3, eagle_choices removed by PR #18210: ranks <= 15, "
                   "8 speculated tokens per path, <= M non-leaves per level, not 32k+1 nodes",
        .format = SQ_EXPORT_TRTLLM,
        .limits = {.max_path = SQ_TRTLLM_MAX_PATH, .max_rank0 = SQ_TRTLLM_MAX_RANK0,
                   .max_non_leaves = SQ_TRTLLM_MAX_NON_LEAVES, .no_32k_plus_1 = 1},
        .path_note = "computePrefix in speculativeChoicesUtils.cpp shifts a 32-bit int by "
                     "4 x (length - 1), undefined from 9 tokens on, and on x86 the prefixes "
                     "collide and nodes get the wrong parent with no error",
        .rank_note = "4-bit rank prefixes",
        .write = sqe_write_choices, .plan = sqe_plan_rank_limited, .requirements = need_trtllm,
    },
    [SQ_ENGINE_MEDUSA] = {
        .id = SQ_ENGINE_MEDUSA, .name = "medusa", .display = "Medusa",
        .versions = "FasterDecoding/Medusa",
        .summary = "ranks <= 9",
        .format = SQ_EXPORT_MEDUSA,
        .limits = {.max_rank0 = SQ_MEDUSA_MAX_RANK0},
        .rank_note = "top-10 candidates per step",
        .write = sqe_write_choices, .plan = sqe_plan_rank_limited, .requirements = need_medusa,
    },
    [SQ_ENGINE_EAGLE] = {
        .id = SQ_ENGINE_EAGLE, .name = "eagle", .display = "EAGLE-1",
        .versions = "EAGLE-1, SafeAILab/EAGLE v1",
        .summary = "EAGLE-1: ranks <= 9, its parent rule, depth >= 3",
        .format = SQ_EXPORT_EAGLE,
        .limits = {.max_rank0 = SQ_EAGLE_MAX_RANK0, .min_path = 2, .deep_first = 1},
        .min_path_note = "generate_tree_buffers in eagle/model/utils_c.py has no non-leaf below "
                         "the root and fails with IndexError",
        .rank_note = "top-10 candidates per step",
        .write = sqe_write_choices, .plan = sqe_plan_eagle, .requirements = need_eagle,
    },
    [SQ_ENGINE_SGLANG] = {
        .id = SQ_ENGINE_SGLANG, .name = "sglang", .display = "SGLang",
        .versions = "SGLang EAGLE/EAGLE3, every version: envelopes, no static tree",
        .summary = ENVELOPE_SUMMARY,
        .format = SQ_EXPORT_SGLANG,
        .limits = {.max_rank0 = -1, .min_path = 1},
        .envelope = 1, .counts_root = 1,
        .write = sqe_write_sglang, .plan = sqe_plan_envelope, .requirements = need_sglang,
        .write_envelope = envelope_sglang,
        .per_batch_note = SGLANG_PER_BATCH,
    },
    [SQ_ENGINE_TRTLLM_DYNAMIC] = {
        .id = SQ_ENGINE_TRTLLM_DYNAMIC, .name = "trtllm-dynamic", .display = "TensorRT-LLM",
        .versions = "TensorRT-LLM PyTorch backend, EagleDecodingConfig use_dynamic_tree: "
                    "envelopes",
        .summary = ENVELOPE_SUMMARY,
        .format = SQ_EXPORT_TRTLLM_DYNAMIC,
        .limits = {.max_rank0 = -1, .min_path = 1},
        .envelope = 1,
        .write = sqe_write_trtllm_dynamic, .plan = sqe_plan_envelope,
        .requirements = need_trtllm_dynamic,
        .write_envelope = envelope_trtllm_dynamic,
        .per_batch_note = TRTLLM_DYNAMIC_PER_BATCH,
    },
};

const sq_engine_info *sq_engine_info_of(sq_engine e)
{
    return e > SQ_ENGINE_NONE && e < SQ_ENGINE_COUNT ? &engine_table[e] : NULL;
}

int sq_engine_parse(const char *name)
{
    for (int e = SQ_ENGINE_NONE + 1; e < SQ_ENGINE_COUNT; e++) {
        const sq_engine_info *in = &engine_table[e];
        if (strcmp(name, in->name) == 0)
            return e;
        for (const char *const *a = in->aliases; a && *a; a++)
            if (strcmp(name, *a) == 0)
                return e;
    }
    return -1;
}

const char *sq_engine_name(sq_engine e)
{
    const sq_engine_info *in = sq_engine_info_of(e);
    return in ? in->name : "none";
}

static char engine_list[256];

static void make_engine_list(void)
{
    size_t len = 0;
    for (int e = SQ_ENGINE_NONE + 1; e < SQ_ENGINE_COUNT; e++) {
        int w = snprintf(engine_list + len, sizeof engine_list - len, "%s%s",
                         len ? ", " : "", engine_table[e].name);
        SQ_ASSERT(w > 0 && (size_t)w < sizeof engine_list - len);
        len += (size_t)w;
    }
}

const char *sq_engine_list(void)
{
    static once_flag once = ONCE_FLAG_INIT;
    call_once(&once, make_engine_list);
    return engine_list;
}

int sq_engine_is_envelope(sq_engine e)
{
    const sq_engine_info *in = sq_engine_info_of(e);
    return in && in->envelope;
}

sq_engine_limits sq_engine_limits_of(sq_engine e, int max_non_leaves)
{
    const sq_engine_info *in = sq_engine_info_of(e);
    sq_engine_limits l = in ? in->limits : (sq_engine_limits){.max_rank0 = -1};
    if (l.max_non_leaves && max_non_leaves > 0)
        l.max_non_leaves = max_non_leaves;
    return l;
}

int sq_engine_size_ok(const sq_engine_limits *lim, int n)
{
    return !(lim->no_32k_plus_1 && n > 1 && (n - 1) % 32 == 0);
}

/* ---- checks -------------------------------------------------------------------------------- */

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

/* One rule for every engine: a root-only tree speculates nothing, and no engine takes 0 draft
 * tokens (the static-tree ones would get an empty list, the envelopes 0 steps). */
#define ROOT_ONLY_WHY "a root-only tree has no draft step; plan with a budget of 2 or more"

static int root_only(sq_error *err, const char *file, const char *engine)
{
    return sq_error_set(err, SQ_EDATA, "%s: %s: " ROOT_ONLY_WHY, file, engine);
}

#define OOM_WHY "out of memory while allocating engine check"

/* The first limit of `in` that t breaks: SQ_EDATA with why (the refusal after "FILE: ENGINE: "),
 * SQ_ESOFTWARE (why says out of memory) or SQ_OK. */
static int violation(const sq_tree *t, const sq_engine_info *in, int max_non_leaves, char *why,
                     size_t cap)
{
    sq_engine_limits lim = sq_engine_limits_of(in->id, max_non_leaves);
    const char *en = in->name;
    char p1[160], p2[160];
    int levels = sq_tree_depth(t);
    if (t->n < 2) {
        snprintf(why, cap, ROOT_ONLY_WHY);
        return SQ_EDATA;
    }
    if (lim.min_path && levels - 1 < lim.min_path) {   /* min_path >= 2: 1 is the rule above */
        snprintf(why, cap, "the tree has %d level%s below the root, but %s needs a path of at "
                 "least %d tokens (with only depth-%d paths %s); plan with a depth of %d or "
                 "more and a budget of %d or more", levels - 1, levels - 1 == 1 ? "" : "s",
                 in->display, lim.min_path, lim.min_path - 1, in->min_path_note,
                 lim.min_path + 1, lim.min_path + 1);
        return SQ_EDATA;
    }
    if (!sq_engine_size_ok(&lim, t->n)) {
        snprintf(why, cap, "%d draft tokens (%d nodes) is a multiple of 32: %s's C++ runtime packs "
                 "the mask of max_draft_len + 1 tokens into divUp(max_draft_len, 32) words, so at "
                 "max_draft_len %d the last token loses its own bit, and the Python runtime's "
                 "_medusa_setup in versions without the empty-chunk guard raises ValueError; plan "
                 "with a budget of %d, or for engine %s", t->n - 1, t->n, in->display, t->n - 1,
                 t->n - 1, en);
        return SQ_EDATA;
    }
    for (int v = 1; v < t->n; v++) {
        if (lim.max_path && t->depth[v] > lim.max_path) {
            snprintf(why, cap, "node %s is %d tokens deep, but %s takes at most %d speculated "
                     "tokens per path (tree depth %d with the root): %s; plan with a depth of %d, "
                     "or for engine %s", path_str(t, v, p1, sizeof p1), t->depth[v], in->display,
                     lim.max_path, lim.max_path + 1, in->path_note, lim.max_path + 1, en);
            return SQ_EDATA;
        }
        if (lim.max_rank0 >= 0 && t->rank[v] - 1 > lim.max_rank0) {
            snprintf(why, cap, "node %s has 0-based rank %d, but %s takes ranks 0..%d (%s); plan "
                     "with a width of %d, or for engine %s", path_str(t, v, p1, sizeof p1),
                     t->rank[v] - 1, in->display, lim.max_rank0, in->rank_note,
                     lim.max_rank0 + 1, en);
            return SQ_EDATA;
        }
    }
    if (lim.deep_first) {
        int early = 0, late = 0;
        if (!sq_eagle_deep_first(t, &early, &late)) {
            snprintf(why, cap, "level %d: node %s has children with children but comes after "
                     "node %s, whose children are all leaves; EAGLE-1's draft "
                     "(eagle/model/utils_c.py generate_tree_buffers, cnets.py "
                     "topK_genrate) finds a node's parent by counting parent changes "
                     "among its level's non-leaves, so %s's children would be drafted "
                     "from another node's hidden state; plan for engine %s",
                     t->depth[late], path_str(t, late, p1, sizeof p1),
                     path_str(t, early, p2, sizeof p2), p1, en);
            return SQ_EDATA;
        }
    }
    if (!lim.max_non_leaves && !lim.level_uniform)
        return SQ_OK;

    int *kids = count_kids(t);
    int *nl = lim.max_non_leaves ? calloc((size_t)levels, sizeof *nl) : NULL;
    if (!kids || (lim.max_non_leaves && !nl)) {
        free(kids);
        free(nl);
        snprintf(why, cap, OOM_WHY);
        return SQ_ESOFTWARE;
    }
    int rc = SQ_OK;
    if (lim.max_non_leaves) {
        for (int v = 0; v < t->n; v++)
            if (kids[v])
                nl[t->depth[v]]++;
        for (int l = 0; l < levels && !rc; l++)
            if (nl[l] > lim.max_non_leaves) {
                snprintf(why, cap, "level %d has %d nodes with children, but the engine allows %d "
                         "(max_non_leaves_per_layer%s); plan for engine %s with max_non_leaves "
                         "%d, or build the engine with a larger max_non_leaves_per_layer and plan "
                         "with that value", l, nl[l], lim.max_non_leaves,
                         max_non_leaves > 0 ? "" : ", convert_checkpoint.py's default", en,
                         lim.max_non_leaves);
                rc = SQ_EDATA;
            }
    }
    if (!rc && lim.level_uniform) {
        /* Nodes of a level are contiguous (breadth-first order). */
        int first = 0;
        for (int v = 1; v < t->n && !rc; v++) {
            if (t->depth[v] != t->depth[first]) {
                first = v;
                continue;
            }
            if (kids[v] != kids[first]) {
                snprintf(why, cap, "level %d: node %s has %d children but node %s has %d; %s: "
                         "plan for engine %s", t->depth[v],
                         first == 0 ? "root" : path_str(t, first, p1, sizeof p1), kids[first],
                         path_str(t, v, p2, sizeof p2), kids[v], in->uniform_note, en);
                rc = SQ_EDATA;
            }
        }
    }
    free(kids);
    free(nl);
    return rc;
}

int sq_engine_check(const sq_tree *t, sq_engine e, int max_non_leaves, const char *file,
                    sq_error *err)
{
    const sq_engine_info *in = sq_engine_info_of(e);
    if (!in)
        return SQ_OK;   /* no engine, no limits */
    char why[SQ_ERROR_MSG_MAX];
    int rc = violation(t, in, max_non_leaves, why, sizeof why);
    if (rc == SQ_ESOFTWARE)
        return sq_error_oom(err, "engine check");
    if (rc)
        return sq_error_set(err, rc, "%s: %s: %s", file, in->name, why);
    return SQ_OK;
}

/* ---- envelopes, requirements, verdicts ------------------------------------------------- */

int sq_envelope_of(const sq_tree *t, sq_engine e, sq_envelope *out, const char *file,
                   sq_error *err)
{
    memset(out, 0, sizeof *out);
    if (t->n < 2)
        return root_only(err, file, sq_engine_name(e));
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
    const sq_engine_info *in = sq_engine_info_of(e);
    int L = levels - 1;
    /* TensorRT-LLM takes max_total_draft_tokens <= dynamic_tree_max_topK * max_draft_len only
     * (rule_trtllm_dynamic): a wider topk still holds the tree */
    if (e == SQ_ENGINE_TRTLLM_DYNAMIC && (long long)k * L < t->n - 1)
        k = (t->n - 1 + L - 1) / L;
    out->steps = L;
    out->topk = k;
    out->draft_tokens = in && in->counts_root ? t->n : t->n - 1;
    SQ_ASSERT(!in || !in->envelope || sq_engine_envelope_check(e, L, k, t->n, file, NULL) == SQ_OK);
    return SQ_OK;
}

int sq_engine_envelope_check(sq_engine e, int steps, int topk, int nodes, const char *file,
                             sq_error *err)
{
    const sq_engine_info *in = sq_engine_info_of(e);
    if (!in || !in->envelope)
        return sq_error_set(err, SQ_EUSAGE, "%s: %s: not an envelope engine (envelopes: sglang, "
                            "trtllm-dynamic)", file, sq_engine_name(e));
    return sq_dynplan_envelope_check(in->name, steps, topk, nodes, file, err);
}

void sq_engine_requirements(const sq_tree *t, sq_engine e, int max_non_leaves, char *buf,
                            size_t cap)
{
    const sq_engine_info *in = sq_engine_info_of(e);
    if (in)
        in->requirements(t, max_non_leaves, buf, cap);
    else
        snprintf(buf, cap, "-");
}

void sq_engine_print_status(FILE *fp, const sq_tree *t, int max_non_leaves)
{
    for (int e = SQ_ENGINE_NONE + 1; e < SQ_ENGINE_COUNT; e++) {
        const sq_engine_info *in = &engine_table[e];
        char why[SQ_ERROR_MSG_MAX];
        int rc = violation(t, in, max_non_leaves, why, sizeof why);
        fprintf(fp, "%-15s %s (%s): ", e == SQ_ENGINE_NONE + 1 ? "engines:" : "", in->name,
                in->versions);
        if (rc) {
            fprintf(fp, "refused: %s\n", why);
            continue;
        }
        char req[400];
        in->requirements(t, max_non_leaves, req, sizeof req);
        if (in->envelope)
            fprintf(fp, "envelope %s (can build this tree; it picks its own each step)\n", req);
        else
            fprintf(fp, "ok; %s\n", req);
    }
}
