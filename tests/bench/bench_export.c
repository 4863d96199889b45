/* Export/import/engine-planning benchmark (issue 6): the level-uniform search for vLLM, the
 * TensorRT-LLM non-leaf repair, every export of a 1024-node plan, importing it back, and its
 * SVG. Medians of several in-process runs; nothing is asserted.
 *
 *   meson test -C build --benchmark --suite bench -v      (or build/tests/bench/bench-export)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "libsequoia/base/stats.h"
#include "planner/dp.h"
#include "planner/engine.h"
#include "planner/export.h"
#include "planner/import.h"
#include "libsequoia/base/json.h"
#include "planner/svg.h"

#define REPS 7

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void die(const sq_error *err)
{
    fprintf(stderr, "bench-export: %s\n", err->msg);
    exit(1);
}

static void bench_engine(sq_engine e, int n, int d, int mnl)
{
    double t[REPS], F = 0;
    for (int r = 0; r < REPS; r++) {
        sq_engine_plan_params p = sq_engine_plan_default_params();
        p.engine = e;
        p.budget = n;
        p.depth = d;
        p.max_non_leaves = mnl;
        sq_engine_plan_result res;
        sq_error err = {0};
        double t0 = now_ms();
        if (sq_engine_plan(&p, &res, &err))
            die(&err);
        t[r] = now_ms() - t0;
        F = res.expected_tokens;
        sq_tree_free(res.tree);
    }
    printf("engine plan %-7s N=%-5d D=%-3d max_non_leaves=%-2d  %9.2f ms   F = %.4f\n",
           sq_engine_name(e), n, d, mnl, sq_quantile(t, REPS, 0.5), F);
}

int main(void)
{
    printf("bench-export: medians of %d runs, App. E curve\n", REPS);
    bench_engine(SQ_ENGINE_VLLM, 128, 10, 0);
    bench_engine(SQ_ENGINE_VLLM, 512, 16, 0);
    bench_engine(SQ_ENGINE_TRTLLM, 128, 10, 0);
    bench_engine(SQ_ENGINE_TRTLLM, 128, 10, 4);
    bench_engine(SQ_ENGINE_MEDUSA, 128, 10, 0);

    /* a 1024-node plan (width 16, depth 16: an engine-exportable tree) */
    sq_dp_params dp_params = sq_dp_default_params();
    dp_params.budget = 1024;
    dp_params.depth = 16;
    dp_params.width = 16;
    sq_dp *dp = NULL;
    sq_tree *t = NULL;
    sq_plan *plan = NULL;
    sq_error err = {0};
    if (sq_dp_solve(&dp_params, &dp, &err) || sq_dp_tree(dp, 1024, 16, &t, &err) ||
        sq_plan_new(t, sq_curve_default(), 1024, 16, 16, &plan, &err))
        die(&err);
    sq_dp_free(dp);
    for (int f = 0; f < SQ_EXPORT_COUNT; f++) {
        double tm[REPS];
        size_t len = 0;
        for (int r = 0; r < REPS; r++) {
            char *s = NULL;
            sq_export_params ep = sq_export_default_params();
            ep.check_limits = 0;   /* a width-16 plan: time the writers, not the refusals */
            double t0 = now_ms();
            if (sq_export_to_string(plan, (sq_export_format)f, &ep, "bench", &s, &len, &err))
                die(&err);
            tm[r] = now_ms() - t0;
            if (r == REPS - 1 && (f == SQ_EXPORT_TRTLLM || f == SQ_EXPORT_GROWMAP)) {
                /* import it back */
                double ti[REPS];
                for (int q = 0; q < REPS; q++) {
                    sq_tree *back = NULL;
                    double t1 = now_ms();
                    if (f == SQ_EXPORT_TRTLLM) {
                        if (sq_import_choices_text(s, "bench", &back, &err))
                            die(&err);
                    } else {
                        cJSON *j = NULL;
                        if (sq_json_parse("bench", s, len, &j, &err) ||
                            sq_import_growmap_json(j, "bench", &back, &err))
                            die(&err);
                        cJSON_Delete(j);
                    }
                    ti[q] = now_ms() - t1;
                    sq_tree_free(back);
                }
                printf("import %-8s 1024 nodes                   %9.2f ms\n",
                       f == SQ_EXPORT_TRTLLM ? "choices" : "growmap", sq_quantile(ti, REPS, 0.5));
            }
            free(s);
        }
        printf("export %-8s 1024 nodes  %9zu bytes   %9.2f ms\n",
               sq_export_format_name((sq_export_format)f), len, sq_quantile(tm, REPS, 0.5));
    }
    sq_plan_free(plan);
    return 0;
}
