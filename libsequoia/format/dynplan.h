/* Dynamic plans (issue 26; docs/formats.md, "Dynamic plan"): what sequoia-plan --engine
 * sglang|trtllm-dynamic writes for an engine that grows its own tree each step. Not a tree but an
 * envelope L,K,N (L draft steps, K top-K per kept node, N nodes including the root), the predicted
 * tokens per step of the engine's dynamic tree in it, and optionally the hardware choice and a
 * ladder of envelopes by batch size.
 *
 *   {"format": "sequoia-dynamic-plan", "version": 1, "engine": "sglang"|"trtllm-dynamic",
 *    "mode": "greedy"|"topk"|"stochastic", "temperature": T, "top_p": p,
 *    "envelope": {"steps": L, "topk": K, "nodes": N},
 *    "expected_tokens": E, "prediction": {"method": "...", ...},
 *    "curves": {"file": "...", "sha256": "..."},
 *    "hardware": {...} (optional), "ladder": [{"batch": b, "envelope": {...}, "speculate": true,
 *    "expected_tokens": E, "tokens_per_second": R, "sequoia_run": {"draft_catchup_tokens": c,
 *    "round_ms": r, "tokens_per_second": R', "predicted_speedup": S'} (optional)}, ...]
 *    (optional)}
 *
 * The envelope rules of the engines live here, in one function, so that the planner
 * (planner/dynamic.h, sq_dyn_envelope_check) and the runtime (which cannot include planner/)
 * apply the same ones. */
#ifndef SQ_FORMAT_DYNPLAN_H
#define SQ_FORMAT_DYNPLAN_H

#include <cjson/cJSON.h>

#include "libsequoia/base/api.h"
#include "libsequoia/base/error.h"
#include "libsequoia/format/mode.h"

SQ_BEGIN_DECLS

#define SQ_DYNPLAN_FORMAT "sequoia-dynamic-plan"
#define SQ_DYNPLAN_VERSION 1
/* this toolkit's limits on a dynamic plan (the file's fields, the planner's envelopes), not the
 * engines' rules */
#define SQ_DYNPLAN_MAX_STEPS 16
#define SQ_DYNPLAN_MAX_TOPK 16
#define SQ_DYNPLAN_MAX_NODES 4096
#define SQ_DYNPLAN_MAX_LADDER 64

/* The engines' rules for an envelope, stated once (the planner's sq_dyn_envelope_check, the
 * exports' sq_engine_envelope_check and the run's sq_dyntree_check call this). SQ_EUSAGE with a
 * message naming the rule and the engine, prefixed with `what` (e.g. "--envelope 3,4,40"; may
 * be NULL) and "envelope L,K,N (L,K,N)":
 *   both: K >= 1, L >= 1, N >= 2;
 *   "sglang": N - 1 <= K + (L - 1) K^2, the candidates its tree chooses from
 *     (python/sglang/srt/speculative/eagle_utils.py, organize_draft_results: torch.topk of
 *     num_draft_token - 1 over them), and K = 1 means a chain, N = L + 1 (server_args.py sets
 *     speculative_num_draft_tokens to speculative_num_steps + 1 when speculative_eagle_topk is 1);
 *   "trtllm-dynamic": L <= N - 1 <= K L (tensorrt_llm/llmapi/llm_args.py, EagleDecodingConfig's
 *     validator: max_draft_len <= max_total_draft_tokens <= dynamic_tree_max_topK *
 *     max_draft_len).
 * Another engine name is SQ_EUSAGE too. Only the engines' rules, for any int (no overflow): a
 * caller's own limits (the plan file's and the planner's L, K <= 16, N <= 4096 below; the run's
 * grown tree within SQ_PLAN_MAX_NODES) are the caller's. */
/* "--envelope L,K,N": three decimal integers, each within int. SQ_EUSAGE naming --envelope,
 * the text as typed and the field: "'a,4,8': L (draft steps) is not an integer", "'4294967299,2,6':
 * L (draft steps) 4294967299 is out of range (...)", "three integers L,K,N are needed",
 * "unexpected 'x' after N". Only the form: the rules are sq_dynplan_envelope_check's and the
 * limits the caller's. One parser for sequoia-plan and sequoia-run (runtime/dyntree.h). */
SQ_API
int sq_dynplan_envelope_parse(const char *s, int *L, int *K, int *N, sq_error *err);

/* The file's "envelope" object {"steps": L, "topk": K, "nodes": N} (NULL if out of memory). */
SQ_API
cJSON *sq_dynplan_envelope_json(int steps, int topk, int nodes);

SQ_API
int sq_dynplan_envelope_check(const char *engine, int steps, int topk, int nodes,
                              const char *what, sq_error *err);

typedef struct sq_dynplan_rung {
    int    batch, steps, topk, nodes, speculate;
    double expected_tokens, tokens_per_second;
    /* the rung's "sequoia_run" object (optional; run_tokens_per_second 0 when absent):
     * sequoia-run's round of the rung's envelope at its batch size, as a plan's
     * hardware.sequoia_run for that batch size alone (docs/formats.md) */
    double run_catchup, run_round_ms, run_tokens_per_second, run_speedup;
} sq_dynplan_rung;

typedef struct sq_dynplan {
    char    engine[32];          /* "sglang" or "trtllm-dynamic"                          */
    sq_mode mode;                /* greedy, topk or stochastic (specinfer is refused)      */
    double  temperature, top_p;
    int     steps, topk, nodes;  /* the envelope L, K, N                                  */
    double  expected_tokens;     /* predicted tokens per step                             */
    cJSON  *prediction;          /* the "prediction" object (method, detail), or NULL     */
    char   *curves_file;         /* the curves it was predicted from, or NULL             */
    char    curves_sha256[65];
    cJSON  *hardware;            /* the "hardware" object, or NULL                        */
    int     n_ladder;
    sq_dynplan_rung *ladder;     /* (n_ladder) batch strictly increasing                  */
} sq_dynplan;

SQ_API
void sq_dynplan_free(sq_dynplan *p);

/* 1 when root is a dynamic plan ("format": "sequoia-dynamic-plan"), 0 otherwise (a static plan
 * or anything else), so that a tool taking a plan can tell which loader to call. */
SQ_API
int sq_dynplan_sniff(const cJSON *root);

/* Validates every field (SQ_EDATA naming the file and the field, e.g. "p.json: envelope.nodes:
 * ..."): format and version, engine, mode, temperature >= 0 (0 only for greedy), top_p in
 * (0, 1], the envelope against the engine's rules, 1 <= expected_tokens <= L + 1, the objects'
 * types, the ladder's batches strictly increasing and their envelopes. */
SQ_API
int sq_dynplan_from_json(const cJSON *root, const char *file, sq_dynplan **out, sq_error *err);
SQ_API
int sq_dynplan_load(const char *file, sq_dynplan **out, sq_error *err);

SQ_API
cJSON *sq_dynplan_to_json(const sq_dynplan *p);   /* NULL if out of memory */
/* Atomically (sq_json_save); "-" is standard output. */
SQ_API
int sq_dynplan_save(const char *file, const sq_dynplan *p, sq_error *err);

SQ_END_DECLS

#endif
