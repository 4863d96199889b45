/* Acceptance curves (docs/design.md §2, §7.1).
 *
 * A curve is the acceptance vector p = (p_1 .. p_W): p_k is the probability that the k-th
 * child (in the verifier's order) of an accepted node is the accepted one. A curve may also
 * carry a depth-dependent matrix (docs/design.md §3.4) whose row r holds the vector for
 * children at depth r+1; deeper levels reuse the last row, and optionally its standard errors
 * (stderr_by_depth, same shape; sequoia-accept --by-depth writes both, docs/estimator.md). */
#ifndef SQ_FORMAT_CURVE_H
#define SQ_FORMAT_CURVE_H

#include <cjson/cJSON.h>

#include "libsequoia/base/api.h"
#include "libsequoia/base/error.h"

SQ_BEGIN_DECLS

#define SQ_CURVE_FORMAT "sequoia-acceptance"
#define SQ_CURVE_VERSION 1
#define SQ_CURVE_MAX_WIDTH 65536   /* entries in p                     */
#define SQ_CURVE_MAX_ROWS 1024     /* rows in p_by_depth               */
#define SQ_CURVE_MAX_CURVES 4096   /* curves in one file               */
#define SQ_CURVE_SUM_TOL 1e-6      /* Σp may exceed 1 by this rounding  */

typedef struct sq_curve {
    char     *name;        /* "stochastic@T0.6"                                         */
    char     *mode;        /* "stochastic" | "specinfer" | "greedy" | "topk"            */
    double    temperature; /* NAN when unknown                                          */
    double    top_p;       /* NAN when unknown                                          */
    int       width;       /* W                                                         */
    double   *p;           /* (W) p_1..p_W                                              */
    double   *stderr_p;    /* (W) standard errors, or NULL                              */
    double    reject;      /* 1 - Σp                                                    */
    int       depth_rows;  /* rows of p_by_depth; 0 when the curve has none             */
    double   *p_by_depth;  /* (depth_rows, W) row r: children at depth r+1, or NULL     */
    double   *stderr_by_depth; /* (depth_rows, W) their standard errors, or NULL        */
    long long positions;   /* corpus positions behind the estimate; -1 when unknown     */
    long long sequences;   /* corpus sequences behind the estimate; -1 when unknown     */
    cJSON    *extra;       /* other members of the curve object (e.g. "stats"), kept
                              verbatim so that a copy loses nothing; may be NULL        */
} sq_curve;

typedef struct sq_curve_set {
    int       n;
    sq_curve *curves;      /* (n)                                                       */
    cJSON    *source;      /* the "source" object, kept verbatim; may be NULL          */
} sq_curve_set;

/* Fills `c` with the given vector (copied) and recomputes `reject`. Checks it like a file. */
SQ_API
int sq_curve_init(sq_curve *c, const char *name, const char *mode, const double *p, int width,
                  sq_error *err);

/* Deep copy. */
SQ_API
int sq_curve_copy(sq_curve *dst, const sq_curve *src, sq_error *err);

/* Releases what `c` owns (not `c` itself). */
SQ_API
void sq_curve_clear(sq_curve *c);

/* p for the child of rank `rank` (1-based) at depth `depth` (1 = children of the root).
 * Ranks beyond the width have p = 0. */
SQ_API
double sq_curve_p(const sq_curve *c, int depth, int rank);

/* "sampled-without-replacement", "sampled-with-replacement" or "draft-topk"
 * (docs/design.md §7.4). */
SQ_API
const char *sq_curve_rank_semantics(const sq_curve *c);

/* Checks every value of a curve (probabilities, sums, reject). `file` and `ctx` name it. */
SQ_API
int sq_curve_validate(const sq_curve *c, const char *file, const char *ctx, sq_error *err);

/* Parses one curve object; `ctx` is its path, e.g. "curves[0]". */
SQ_API
int sq_curve_from_json(const cJSON *obj, const char *file, const char *ctx, sq_curve *out,
                       sq_error *err);
SQ_API
cJSON *sq_curve_to_json(const sq_curve *c); /* NULL if out of memory */

/* Whole files. */
SQ_API
int sq_curve_set_from_json(const cJSON *root, const char *file, sq_curve_set **out,
                           sq_error *err);
SQ_API
int sq_curve_set_load(const char *file, sq_curve_set **out, sq_error *err);
SQ_API
cJSON *sq_curve_set_to_json(const sq_curve_set *set); /* NULL if out of memory */
SQ_API
int sq_curve_set_save(const char *file, const sq_curve_set *set, sq_error *err);
SQ_API
void sq_curve_set_free(sq_curve_set *set);

/* Picks the curve called `name`, or the only curve when name is NULL. An unknown name and an
 * ambiguous choice are SQ_EUSAGE errors that list the names in the file. */
SQ_API
int sq_curve_set_select(const sq_curve_set *set, const char *name, const char *file,
                        const sq_curve **out, sq_error *err);

/* The embedded default: the paper's App. E vector (Llama3-70B-Instruct target,
 * Llama3-8B-Instruct draft, CNN/DailyMail). Statically allocated; never free it. */
SQ_API
const sq_curve *sq_curve_default(void);
SQ_API
extern const char *const sq_curve_default_provenance;

/* Embedded curves that --acceptance can name instead of a file:
 *   "paper-appE"     the default above;
 *   "kjv-byte-pair"  stochastic@T0.6 of the shipped byte-level pair (data/models), estimated
 *                    by examples/pipeline.sh (data/pipeline/curves.json).
 * Returns NULL for another name; *provenance (may be NULL) gets a one-line description. */
SQ_API
const sq_curve *sq_curve_builtin(const char *name, const char **provenance);

/* "paper-appE, kjv-byte-pair", for messages. */
SQ_API
const char *sq_curve_builtin_names(void);

SQ_END_DECLS

#endif
