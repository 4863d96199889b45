#include "planner/table.h"

#include <math.h>
#include <stdlib.h>

#include "libsequoia/base/io.h"
#include "libsequoia/base/json.h"

cJSON *sq_table_to_json(const sq_dp *dp, const sq_curve *curve)
{
    int N = sq_dp_budget(dp), D = sq_dp_depth(dp);
    sq_json_build b = sq_json_build_begin();
    cJSON *o = cJSON_CreateObject();
    sq_json_add(o, "format", cJSON_CreateString(SQ_TABLE_FORMAT));
    sq_json_add(o, "version", cJSON_CreateNumber(SQ_TABLE_VERSION));
    sq_json_add(o, "budget", cJSON_CreateNumber(N));
    sq_json_add(o, "depth", cJSON_CreateNumber(D));
    sq_json_add(o, "width", cJSON_CreateNumber(sq_dp_width(dp)));
    sq_json_add(o, "curve", cJSON_CreateString(curve->name ? curve->name : ""));
    cJSON *rows = cJSON_CreateArray();
    for (int n = 0; n <= N && rows; n++) {
        cJSON *row = cJSON_CreateArray();
        for (int d = 0; d <= D && row; d++) {
            double v = sq_dp_best(dp, n, d);
            sq_json_append(row, isfinite(v) ? cJSON_CreateNumber(v) : cJSON_CreateNull());
        }
        sq_json_append(rows, row);
    }
    sq_json_add(o, "expected_tokens", rows);
    return sq_json_build_end(b, o);
}

int sq_table_save(const char *file, const sq_dp *dp, const sq_curve *curve, sq_error *err)
{
    cJSON *o = sq_table_to_json(dp, curve);
    int rc = sq_json_save(file, o, err);
    cJSON_Delete(o);
    return rc;
}
