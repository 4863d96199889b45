/* The expected-tokens table (sequoia-plan --table):
 *   {"format":"sequoia-table","version":1,"budget":N,"depth":D,"width":B,
 *    "expected_tokens":[[...]]}
 * expected_tokens[n][d] is Best[n][d] for 0 <= n <= N and 0 <= d <= D, null where no tree
 * exists. */
#ifndef SQ_PLANNER_TABLE_H
#define SQ_PLANNER_TABLE_H

#include <cjson/cJSON.h>

#include "libsequoia/base/api.h"
#include "planner/dp.h"

SQ_BEGIN_DECLS

#define SQ_TABLE_FORMAT "sequoia-table"
#define SQ_TABLE_VERSION 1

SQ_API
cJSON *sq_table_to_json(const sq_dp *dp, const sq_curve *curve);
SQ_API
int sq_table_save(const char *file, const sq_dp *dp, const sq_curve *curve, sq_error *err);

SQ_END_DECLS

#endif
