/* Exact merging of curve files computed on disjoint shards of a corpus (sequoia-accept
 * --merge), and the "source" object both the estimator and the merge write.
 *
 * Each curve's sufficient statistics are sums over independent units, so the statistics of the
 * union are the sums of the shards' (sq_accept_stats_merge): the merged curve is the one a single
 * run over every shard would give, standard errors included. */
#ifndef SQ_ACCEPT_MERGE_H
#define SQ_ACCEPT_MERGE_H

#include <cjson/cJSON.h>

#include "libsequoia/base/error.h"
#include "libsequoia/format/curve.h"

/* The notice a sparse (top-K) corpus gets, in messages and in "source.note". */
extern const char sq_accept_sparse_note[];

/* {"corpus": [...], "sha256": [...], "draft", "target", "vocab_size" (when vocab >= 0),
 *  "sparse", "note" (when sparse), "tool"}, or NULL when out of memory. */
cJSON *sq_accept_source_json(const char *const *corpus, const char *const *sha, int n,
                             const char *draft, const char *target, long long vocab, int sparse,
                             const char *tool);

/* Merges sets[0..n) (read from files[0..n), for messages) into *out (to free: its curves with
 * sq_curve_clear, then out->curves, and cJSON_Delete(out->source)). Checks that the shards
 * come from the same models, that no corpus is counted twice (by SHA-256), that every shard
 * holds the same curves with the same settings, and merges their statistics; a seed that
 * differs between shards becomes null, a unit that differs becomes "mixed". `tool` goes into
 * source.tool. Errors: SQ_EDATA, SQ_ESOFTWARE (out of memory). */
int sq_accept_merge(sq_curve_set *const *sets, char *const *files, int n, const char *tool,
                    sq_curve_set *out, sq_error *err);

#endif
