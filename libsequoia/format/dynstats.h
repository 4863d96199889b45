/* The "dynamic" object of a curves file: the statistics a prediction of the engines' dynamic
 * trees needs (docs/formats.md, "dynamic"; docs/planning.md, "Dynamic trees"). sequoia-accept
 * writes it (planner/accept/dynstats.h) and merges it (--merge), sequoia-plan reads it
 * (planner/dynamic.h); both check it with the one function below, so that a merge never writes
 * statistics the planner would refuse. */
#ifndef SQ_FORMAT_DYNSTATS_H
#define SQ_FORMAT_DYNSTATS_H

#include <cjson/cJSON.h>

#include "libsequoia/base/error.h"

#define SQ_DYNSTATS_KEY "dynamic"
#define SQ_DYNSTATS_FORMAT "sequoia-dynamic-stats"
#define SQ_DYNSTATS_VERSION 1
#define SQ_DYNSTATS_MAX_TOPK 16
#define SQ_DYNSTATS_MAX_SAMPLES 10000000   /* positions (rows of draft_topk), off-path rows */
#define SQ_DYNSTATS_MAX_CORPORA (1 << 20)
/* A row of probabilities (draft_topk, offpath_topk, an accept list) sums to at most 1; its
 * numbers are rounded to 5 significant digits, hence the margin. */
#define SQ_DYNSTATS_ROW_SUM 1.001

/* What a checked object holds. */
typedef struct sq_dynstats_shape {
    int topk;        /* K                                                              */
    int corpora;     /* "corpora", 0 when absent                                       */
    int has_seed;    /* 1 when "seed" is present                                       */
    int segments;    /* entries of "segments"                                          */
    int samples;     /* n: the segments' total length, the rows of draft_topk, of each
                        accept list and of next_rank                                   */
    int offpath;     /* rows of "offpath_topk", 0 when absent                          */
    int configs;     /* configurations in "accept"                                     */
    int next_rank;   /* 1 when "next_rank" is present                                  */
} sq_dynstats_shape;

/* Checks the whole object d (the value of the key "dynamic" of `file`) against the format:
 * format and version; topk in 1..SQ_DYNSTATS_MAX_TOPK; draft_temperature (when present) 1, the
 * temperature the predictor assumes; seed (when present) an integer in [0, 2^64); corpora (when
 * present) an integer in 1..SQ_DYNSTATS_MAX_CORPORA; segments a non-empty array of [row0 >= 0,
 * length >= 1, corpus index in [0, corpora)] (integers) totalling at most
 * SQ_DYNSTATS_MAX_SAMPLES; draft_topk and offpath_topk (when present) rows of K probabilities
 * sorted in decreasing order; accept an object of configurations, each with as many rows of K
 * probabilities as the segments hold positions; every row summing to at most
 * SQ_DYNSTATS_ROW_SUM; next_rank (when present) one integer in [-1, K) per position; calibration
 * (when present) "bins" (increasing, in [0, 1]) and, for configurations of accept, "count"
 * (integers >= 0) and "mean_accept" (probabilities), one row of K per bin. A JSON null counts
 * as absent. *shape (may be NULL) receives the sizes. Errors: SQ_EDATA naming the file and the
 * field, "F: dynamic.segments[3][2]: ...". */
int sq_dynstats_check(const cJSON *d, const char *file, sq_dynstats_shape *shape, sq_error *err);

#endif
