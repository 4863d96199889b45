/* sequoia-run --validate: checks that the runtime does what the plan and the verification rule
 * say (docs/runtime.md).
 *
 *  - tree attention: for a few steps, the target's logits of every tree node equal a plain
 *    forward over the node's root path (max |difference| within a tolerance: F32 compute on the
 *    CPU, 16-bit GEMM inputs on CUDA);
 *  - greedy: the output equals target-only greedy decoding, token for token;
 *  - sampled modes: over many seeds, the first generated token follows the target's
 *    P(. | prompt) and the first two follow P(a | prompt) P(b | prompt, a) (chi-square goodness
 *    of fit; fails below SQ_VALIDATE_P_MIN). */
#ifndef SQ_RUNTIME_VALIDATE_H
#define SQ_RUNTIME_VALIDATE_H

#include <stdint.h>

#include <cjson/cJSON.h>

#include "libsequoia/base/error.h"
#include "libsequoia/base/stats.h"
#include "runtime/model.h"
#include "runtime/specdec.h"

#define SQ_VALIDATE_P_MIN 0.001        /* a goodness-of-fit test fails below this p-value     */
#define SQ_VALIDATE_ATTN_STEPS 3       /* steps whose tree attention is checked               */
#define SQ_VALIDATE_MAX_FIRST_BINS 32  /* first tokens whose successors the pair test resolves */

typedef struct sq_validation {
    int    ran;
    int    attn_ok;
    double attn_max_diff, attn_tol;
    int    greedy_checked, greedy_ok, greedy_first_mismatch;
    int    dist_checked, dist_ok, seeds;
    int    dist_groups;   /* distinct prompts tested (a batch may read several)        */
    sq_chisq first, pair;
    int    pair_first_tokens;
} sq_validation;

/* The tree-attention tolerance of a backend: 1e-4 (CPU), 2e-2 (CUDA). */
double sq_validate_attn_tol(sq_backend_kind backend);

/* Runs SQ_VALIDATE_ATTN_STEPS steps from the prompt with the attention check on. */
int sq_validate_attention(sq_specdec *sd, const int32_t *prompt, int L, double tol,
                          sq_validation *val, sq_error *err);

/* Compares gen with the target-only greedy output base (n tokens each). */
void sq_validate_greedy(const int32_t *gen, const int32_t *base, int n, sq_validation *val);

/* The distribution test over `seeds` runs, the i-th seeded with seed + 0x51ed27 (i + 1).
 * progress (may be NULL) is told the seeds done, with `user` (sequoia-run's progress line).
 * The test of sq_validate_distribution_batch on the group of one decoder (one implementation:
 * the same draws, statistics and p-values as a batch of one). */
int sq_validate_distribution(sq_specdec *sd, uint64_t seed, int seeds, const int32_t *prompt,
                             int L, sq_validation *val,
                             void (*progress)(void *user, int64_t done, int64_t total),
                             void *user, sq_error *err);

/* The same test drawn inside a batch (sequoia-run --batch): `samples` draws in rounds of B,
 * round i reseeding the batch with the i-th seed of sq_validate_distribution (sequence k's
 * generator from sq_specdec_batch_seed_of), every sequence k on prompts[k] (plen[k] tokens),
 * batch steps until each has two tokens. Sequences that read the same prompt are pooled (their
 * draws are independent); each distinct prompt is tested on its own, the check passes when
 * every one passes, and *val holds the statistics of the one with the smallest p-value. */
int sq_validate_distribution_batch(sq_specdec_batch *bt, uint64_t seed, int samples,
                                   const int32_t *const *prompts, const int *plen,
                                   sq_validation *val,
                                   void (*progress)(void *user, int64_t done, int64_t total),
                                   void *user, sq_error *err);

/* Every check that ran passed. */
int sq_validation_pass(const sq_validation *val);

/* The report's "validation" object, or NULL when out of memory. */
cJSON *sq_validation_to_json(const sq_validation *val);

#endif
