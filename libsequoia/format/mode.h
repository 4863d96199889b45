/* The verification modes: the one table of their names and properties (docs/estimator.md,
 * "Verification rule"). The estimator, the runtime, the curve and plan formats and the tools all
 * name, parse and classify modes through it.
 *
 * The mode names and their rank semantics are part of the curve and plan file formats
 * (docs/formats.md), so the table lives with the formats; the verifier (libsequoia/verify/)
 * includes it from here. Header-only, including nothing of ours.
 *
 *   mode        candidates (children)              target       rank semantics of a plan
 *   stochastic  drawn from Q without replacement   sampled at T sampled-without-replacement
 *   specinfer   drawn from Q with replacement      sampled at T sampled-with-replacement
 *   greedy      the draft's top-k by logit         argmax       draft-topk
 *   topk        the draft's top-k by logit         sampled at T draft-topk
 *
 * "Sampled" (sq_mode_is_sampled) means the first column: the candidates are a random sample of
 * the draft's distribution Q, so the estimator averages random draws per position and a plan's
 * ranks are draw orders. Top-k draws the target's token at random too, but its candidates, and
 * therefore its per-position acceptance, are exact: it is not "sampled". */
#ifndef SQ_FORMAT_MODE_H
#define SQ_FORMAT_MODE_H

#include <string.h>

/* C linkage for C++ programs (as SQ_BEGIN_DECLS of libsequoia/base/api.h does; this header
 * includes nothing of ours). */
#ifdef __cplusplus
extern "C" {
#endif

typedef enum sq_mode {
    SQ_MODE_STOCHASTIC = 0,
    SQ_MODE_SPECINFER  = 1,
    SQ_MODE_GREEDY     = 2,
    SQ_MODE_TOPK       = 3,
} sq_mode;

#define SQ_MODE_COUNT 4

/* For messages: the mode names in table order. */
#define SQ_MODE_NAMES "stochastic, specinfer, greedy or topk"

typedef struct sq_mode_info {
    const char *name;
    const char *rank_semantics;   /* of the plans built for the mode          */
    int         sampled;          /* candidates drawn at random from Q         */
    int         sampled_target;   /* the emitted token drawn from P at T > 0  */
} sq_mode_info;

/* The table's row of a mode (NULL for a value outside the enum). */
static inline const sq_mode_info *sq_mode_get(sq_mode mode)
{
    /* in enum order, without designators, which C++ lacks (the header is public) */
    static const sq_mode_info table[SQ_MODE_COUNT] = {
        {"stochastic", "sampled-without-replacement", 1, 1},   /* SQ_MODE_STOCHASTIC */
        {"specinfer", "sampled-with-replacement", 1, 1},       /* SQ_MODE_SPECINFER  */
        {"greedy", "draft-topk", 0, 0},                        /* SQ_MODE_GREEDY     */
        {"topk", "draft-topk", 0, 1},                          /* SQ_MODE_TOPK       */
    };
    return (unsigned)mode < SQ_MODE_COUNT ? &table[mode] : NULL;
}

/* "stochastic", "specinfer", "greedy", "topk" -> mode: 0, or -1 for anything else. */
static inline int sq_mode_parse(const char *name, sq_mode *out)
{
    for (int m = 0; m < SQ_MODE_COUNT && name; m++)
        if (strcmp(name, sq_mode_get((sq_mode)m)->name) == 0) {
            *out = (sq_mode)m;
            return 0;
        }
    return -1;
}

static inline const char *sq_mode_name(sq_mode mode)
{
    const sq_mode_info *i = sq_mode_get(mode);
    return i ? i->name : "unknown";
}

/* The plan rank semantics that match a mode. */
static inline const char *sq_mode_rank_semantics(sq_mode mode)
{
    const sq_mode_info *i = sq_mode_get(mode);
    return i ? i->rank_semantics : "unknown";
}

/* 1 for a rank semantics some mode has ("sampled-without-replacement", ...). */
static inline int sq_mode_rank_semantics_known(const char *sem)
{
    for (int m = 0; m < SQ_MODE_COUNT && sem; m++)
        if (strcmp(sem, sq_mode_get((sq_mode)m)->rank_semantics) == 0)
            return 1;
    return 0;
}

/* 1 for the modes whose candidates are a random sample of the draft (stochastic, specinfer). */
static inline int sq_mode_is_sampled(sq_mode mode)
{
    const sq_mode_info *i = sq_mode_get(mode);
    return i && i->sampled;
}

/* The temperature at which the target's distribution P is taken in a mode run at T: 0 for
 * greedy (one-hot argmax), T otherwise. */
static inline double sq_mode_target_temperature(sq_mode mode, double temperature)
{
    const sq_mode_info *i = sq_mode_get(mode);
    return i && i->sampled_target ? temperature : 0.0;
}

#ifdef __cplusplus
}
#endif

#endif
