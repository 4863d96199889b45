/* Verification of a speculated token tree (docs/design.md, the verifiers), on probability
 * vectors. The rule it follows (distributions, orders, modes) is rule.h and
 * libsequoia/format/mode.h, the same one the acceptance estimator uses (docs/estimator.md,
 * "Verification rule").
 *
 * At an accepted node the target's distribution is P and the draft's Q, both from the logits by
 * sq_probs_from_logits (P at the mode's target temperature, sq_mode_target_temperature). The
 * draft proposes the node's children (sq_verifier_propose) in the order the mode's rank
 * semantics dictate; the verifier tries them in that order (sq_verifier_node) and either accepts
 * one child or emits a bonus token:
 *
 *   SQ_MODE_STOCHASTIC (Sequoia)  children drawn from Q without replacement (Gumbel-top-k);
 *                                 accept x_k w.p. min(1, R(x_k)/Q'(x_k)); on rejection
 *                                 R <- norm(max(R - Q', 0)), Q'(x_k) <- 0, Q' <- norm(Q');
 *                                 bonus ~ R. Lossless.
 *   SQ_MODE_SPECINFER             children i.i.d. from Q, Q' = Q never changes. Lossless.
 *   SQ_MODE_GREEDY                children = draft top-k; accept the child equal to argmax P;
 *                                 bonus = argmax P.
 *   SQ_MODE_TOPK                  children = draft top-k; y ~ P; accept the child equal to y,
 *                                 else bonus = y.
 *
 * Every random draw comes from one GSL generator (mt19937) seeded explicitly, so a run is
 * reproducible from its seed. */
#ifndef SQ_VERIFY_VERIFY_H
#define SQ_VERIFY_VERIFY_H

#include <stdint.h>

#include "libsequoia/base/api.h"
#include "libsequoia/base/error.h"
#include "libsequoia/format/mode.h"
#include "libsequoia/verify/rule.h"

SQ_BEGIN_DECLS

typedef struct sq_verifier sq_verifier;

/* A verifier for vocabularies of `vocab` tokens; NULL when out of memory. */
SQ_API
sq_verifier *sq_verifier_new(int vocab, sq_mode mode, uint64_t seed);
SQ_API
void sq_verifier_free(sq_verifier *v);

SQ_API
sq_mode sq_verifier_mode(const sq_verifier *v);
SQ_API
int sq_verifier_vocab(const sq_verifier *v);

/* Reseeds the generator. */
SQ_API
void sq_verifier_seed(sq_verifier *v, uint64_t seed);

/* sq_probs_from_logits with the verifier's scratch. */
SQ_API
void sq_verifier_probs(sq_verifier *v, const float *logits, double temperature, double top_p,
                       double *probs);

/* Proposes k children from the draft: `q` is the draft's distribution at the node (after
 * temperature and top-p; unused by greedy and top-k) and `logits` its raw logits (used for the
 * top-k modes, whose order must not depend on the temperature). Stochastic: k distinct tokens
 * drawn without replacement (tokens outside Q's support come last, in id order, when k exceeds
 * it). SpecInfer: k i.i.d. draws. Greedy/top-k: sq_draft_topk. */
SQ_API
void sq_verifier_propose(sq_verifier *v, const double *q, const float *logits, int k,
                         int32_t *tokens);

/* Verifies the children tokens[0..k) of one node, given the target's P and the draft's Q there
 * (Q is unused in the greedy/top-k modes). Returns the index of the accepted child, or -1 with
 * *bonus set to the token that ends the step. k = 0 (a leaf) always returns -1. */
SQ_API
int sq_verifier_node(sq_verifier *v, const double *p, const double *q, const int32_t *tokens,
                     int k, int32_t *bonus);

/* One draw from a distribution (V). */
SQ_API
int32_t sq_verifier_sample(sq_verifier *v, const double *probs);

SQ_END_DECLS

#endif
