/* The verification rule's distributions and orders, written once for the acceptance estimator
 * (planner/accept/), the host verifier (verify.h) and, through the same per-element formulas
 * (formulas.h), the CUDA sampler (runtime/cuda_sample.cu). docs/estimator.md, "Verification
 * rule", states the rule; in short:
 *
 *  - P = softmax(logits / T). NaN and -inf logits weigh 0; if the largest logit is +inf, the
 *    +inf tokens share the mass equally. A row with no usable logit (every one NaN or -inf) is
 *    treated as if all its logits were equal: uniform at T > 0, token 0 at T = 0.
 *  - T = 0: one-hot on the argmax, the lowest token id among ties.
 *  - top-p < 1: the nucleus is every token whose probability is at least tau, where tau is the
 *    largest value such that the tokens of probability >= tau reach top_p (sq_k_nucleus_reaches).
 *    Equivalently: sort the tokens by probability, take the shortest prefix that reaches top_p,
 *    and keep every token tied with the last one taken. Ties at the cut are all kept, so the
 *    nucleus does not depend on token ids. P is renormalised over the nucleus.
 *  - Orders (argmax, the draft's top-k): larger first, the lower token id first among ties; for
 *    the draft's top-k, NaN ranks as -inf, and -inf tokens come last (so k children always
 *    exist, k <= V). */
#ifndef SQ_VERIFY_RULE_H
#define SQ_VERIFY_RULE_H

#include <stdint.h>

#include "libsequoia/base/api.h"
#include "libsequoia/format/mode.h"
#include "libsequoia/base/error.h"

SQ_BEGIN_DECLS

/* probs(V) = the rule's distribution for these logits at temperature T >= 0 and nucleus mass
 * top_p in (0, 1] (top_p >= 1 keeps every token). scratch: V doubles, used when top_p < 1 (may be
 * NULL otherwise). Returns the number of tokens of non-zero probability. */
SQ_API
int sq_probs_from_logits(const float *logits, int V, double temperature, double top_p,
                         double *probs, double *scratch);

/* exp(x) for x <= 0 as the softmax of sq_probs_from_logits computes it (within 2 ulp of the
 * correctly rounded value; the same bits whether the row is processed four values at a time or
 * one). */
SQ_API
double sq_exp_nonpos(double x);

/* Index of the largest usable logit (not NaN, not -inf), lowest index on ties; 0 when none is
 * usable. */
SQ_API
int sq_argmax_f(const float *x, int n);

/* Index of the largest value (lowest index on ties). */
SQ_API
int sq_argmax_d(const double *x, int n);

/* (value, index) scratch of the top-k selections. */
typedef struct sq_ranked {
    double v;
    int    i;
} sq_ranked;

/* The k largest values' indices, largest first, lower index first on ties (0 <= k <= n).
 * heap: k entries. */
SQ_API
void sq_topk_keys(const double *x, int n, int k, int32_t *out, sq_ranked *heap);

/* As sq_topk_keys, with its own scratch (SQ_ESOFTWARE when out of memory). */
SQ_API
int sq_topk_d(const double *x, int n, int k, int32_t *out, sq_error *err);

/* The draft's k best tokens by logit (the candidates of greedy and top-k), best first: the
 * order of sq_k_rank_key, lower id first on ties (0 <= k <= V). keys: V doubles, heap: k
 * entries. */
SQ_API
void sq_draft_topk(const float *logits, int V, int k, int32_t *out, double *keys,
                   sq_ranked *heap);

/* The first half of sq_probs_from_logits at top_p 1 in the common case (T > 0 and a finite
 * largest usable logit): e(V) = the distribution's numerators before the normalisation, and
 * their sum; probs[i] is then exactly e[i] / sum. Returns 0 (e untouched) in every other case:
 * call sq_probs_from_logits then. For a caller that needs a few probabilities, not all V. */
SQ_API
double sq_softmax_numerators(const float *logits, int V, double temperature, double *e);

/* The code paths of the loops above (the argmax, the softmax, the normalisation) and of the
 * estimator's (planner/accept/): every path gives the same bits (docs/estimator.md, "On AVX2
 * hosts and shared cores"). SQ_RULE_ISA_AUTO: the best the CPU has. */
enum {
    SQ_RULE_ISA_AUTO = -1,
    SQ_RULE_ISA_SCALAR = 0,
    SQ_RULE_ISA_AVX2 = 1,
    SQ_RULE_ISA_AVX512 = 2
};

/* The path in use: the forced one (sq_rule_isa_set), else SQ_CPU_ISA=scalar|avx2|avx512 from
 * the environment where the CPU has that path (the runtime's variable: one setting forces
 * both), else the best the CPU has (AVX-512 needs avx512f and avx512vl, AVX2 avx2; only on
 * x86-64 builds with GCC or Clang, else scalar). */
SQ_API
int sq_rule_isa(void);

/* Forces a path (tests and benchmarks; set it before the work starts), or SQ_RULE_ISA_AUTO (the
 * environment's, else the best). Returns 0, or -1 when the CPU or the build lacks that path
 * (nothing is changed then). */
SQ_API
int sq_rule_isa_set(int isa);

/* The name of a path: "scalar", "avx2", "avx512". */
SQ_API
const char *sq_rule_isa_name(int isa);

SQ_END_DECLS

#endif
