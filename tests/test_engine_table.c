/* The engine table (planner/engine.h, planner/engines.c) and the format table (planner/export.h):
 * every row complete, names that look up both ways, the generated name lists, the notes that go
 * with each limit, each limit refused exactly past its value by the check, the export and the
 * summary alike, and plans that keep their engine's limits. Also the machine-readable cause of a
 * profile lookup outside its range (libsequoia/base/error.h), which sequoia-plan's hint reads. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "libsequoia/format/curve.h"
#include "libsequoia/format/plan.h"
#include "libsequoia/format/profile.h"
#include "libsequoia/format/tree.h"
#include "planner/engine.h"
#include "planner/export.h"
#include "planner/hardware.h"
#include "tests/testutil.h"

#define FOR_ENGINES(e) for (sq_engine e = SQ_ENGINE_NONE + 1; e < SQ_ENGINE_COUNT; e++)

/* A tree from the parent of every node but the root; ranks are given in order among siblings. */
static sq_tree *tree_of(const int *parent, int n)
{
    int *par = malloc((size_t)n * sizeof *par), *rank = malloc((size_t)n * sizeof *rank);
    int *kids = calloc((size_t)n, sizeof *kids);
    cr_assert(par && rank && kids);
    par[0] = -1;
    rank[0] = 0;
    for (int v = 1; v < n; v++) {
        par[v] = parent[v - 1];
        rank[v] = ++kids[par[v]];
    }
    sq_tree *t = NULL;
    sq_error err = {0};
    cr_assert_eq(sq_tree_from_parents(par, rank, n, &t, "test", &err), SQ_OK, "%s", err.msg);
    free(par);
    free(rank);
    free(kids);
    return t;
}

/* A chain of `len` tokens below the root. */
static sq_tree *chain(int len)
{
    int parent[64];
    cr_assert(len < 64);
    for (int v = 1; v <= len; v++)
        parent[v - 1] = v - 1;
    return tree_of(parent, len + 1);
}

/* The root with k children, the first of which has one child (a path of 2 tokens). */
static sq_tree *wide(int k)
{
    int parent[64], n = 0;
    cr_assert(k + 1 < 64);
    for (int i = 0; i < k; i++)
        parent[n++] = 0;
    parent[n++] = 1;
    return tree_of(parent, n + 1);
}

/* The root with m children, each with one child: m nodes with children on level 1. */
static sq_tree *non_leaves(int m)
{
    int parent[64], n = 0;
    cr_assert(2 * m < 64);
    for (int i = 0; i < m; i++)
        parent[n++] = 0;
    for (int i = 0; i < m; i++)
        parent[n++] = 1 + i;
    return tree_of(parent, n + 1);
}

/* n nodes (17 < n <= 49) with ranks <= 15 and at most 2 non-leaves per level: the root with
 * 16 children, then the rest under the first (16 at most) and the second. */
static sq_tree *sized(int n)
{
    int parent[64], m = 0;
    cr_assert(n > 17 && n <= 49);
    for (int i = 0; i < 16; i++)
        parent[m++] = 0;
    for (; m < n - 1; m++)
        parent[m] = m < 32 ? 1 : 2;
    return tree_of(parent, n);
}

/* EAGLE-1's parent rule kept (ok = 1) or broken: on level 1, [0] has only leaf children and
 * [1] has a grandchild; kept, the grandchild hangs under [0, 0] instead. */
static sq_tree *deep_first(int ok)
{
    /* nodes: 0 root; 1 [0]; 2 [1]; 3 [0, 0]; 4 [1, 0]; 5 below [0, 0] or [1, 0] */
    int parent[] = {0, 0, 1, 2, ok ? 3 : 4};
    return tree_of(parent, 6);
}

/* One refusal or acceptance, the same from the check, the engine's export and its verdict. */
static void expect(const sq_tree *t, sq_engine e, int max_non_leaves, int refused,
                   const char *phrase)
{
    const sq_engine_info *in = sq_engine_info_of(e);
    sq_error err = {0};
    int rc = sq_engine_check(t, e, max_non_leaves, "t.json", &err);
    cr_assert_eq(rc, refused ? SQ_EDATA : SQ_OK, "%s (n %d): %s", in->name, t->n, err.msg);
    if (refused) {
        char prefix[64];
        snprintf(prefix, sizeof prefix, "t.json: %s: ", in->name);
        cr_assert(strncmp(err.msg, prefix, strlen(prefix)) == 0, "%s", err.msg);
        cr_assert(strstr(err.msg, phrase), "%s: expected \"%s\" in: %s", in->name, phrase, err.msg);
    }
    /* the export refuses exactly then, with the same message, and writes nothing */
    sq_plan *plan = NULL;
    sq_tree *copy = NULL;
    cr_assert_eq(sq_tree_from_parents(t->parent, t->rank, t->n, &copy, "test", &err), SQ_OK);
    cr_assert_eq(sq_plan_new(copy, sq_curve_default(), t->n, t->n, t->n, &plan, &err), SQ_OK);
    sq_export_params xp = sq_export_default_params();
    xp.max_non_leaves = max_non_leaves;
    char *s = NULL;
    size_t len = 0;
    sq_error xerr = {0};
    int xrc = sq_export_to_string(plan, in->format, &xp, "t.json", &s, &len, &xerr);
    cr_assert_eq(xrc, rc, "%s: export %d, check %d: %s", in->name, xrc, rc, xerr.msg);
    if (refused)
        cr_assert_str_eq(xerr.msg, err.msg);
    else
        cr_assert(s && len > 0);
    free(s);
    sq_plan_free(plan);
    /* the summary's verdict line for this engine */
    char *out = NULL;
    size_t olen = 0;
    FILE *fp = open_memstream(&out, &olen);
    cr_assert_not_null(fp);
    sq_engine_print_status(fp, t, max_non_leaves);
    fclose(fp);
    char head[128];
    snprintf(head, sizeof head, " %s (%s): %s", in->name, in->versions,
             refused ? "refused: " : in->envelope ? "envelope " : "ok; ");
    cr_assert(strstr(out, head), "no \"%s\" in:\n%s", head, out);
    free(out);
}

Test(engine_table, every_row_is_complete_and_indexed_by_its_id)
{
    cr_assert_null(sq_engine_info_of(SQ_ENGINE_NONE));
    cr_assert_null(sq_engine_info_of(SQ_ENGINE_COUNT));
    cr_assert_null(sq_engine_info_of((sq_engine)-1));
    FOR_ENGINES(e) {
        const sq_engine_info *in = sq_engine_info_of(e);
        cr_assert_not_null(in);
        cr_assert_eq(in->id, e);
        cr_assert(in->name && *in->name && in->display && *in->display);
        cr_assert(in->versions && *in->versions && in->summary && *in->summary, "%s", in->name);
        cr_assert(in->write && in->plan && in->requirements, "%s: a function is missing", in->name);
        /* its format is named as the engine, belongs to it and writes with its writer */
        const sq_export_format_info *fi = sq_export_format_info_of(in->format);
        cr_assert_not_null(fi);
        cr_assert_str_eq(fi->name, in->name);
        cr_assert_eq(fi->engine, e);
        cr_assert_eq(sq_export_engine(in->format), e);
        cr_assert_null(fi->write, "%s: the engine's row holds the writer", in->name);
        cr_assert_eq(sq_export_writer_of(in->format), in->write);
        cr_assert_eq(sq_engine_is_envelope(e), in->envelope);
        cr_assert(!in->counts_root || in->envelope, "%s", in->name);
    }
    cr_assert_not(sq_engine_is_envelope(SQ_ENGINE_NONE));
    for (int f = 0; f < SQ_EXPORT_COUNT; f++) {
        const sq_export_format_info *fi = sq_export_format_info_of((sq_export_format)f);
        cr_assert(fi && fi->name && fi->note && *fi->note);
        cr_assert_not_null(sq_export_writer_of((sq_export_format)f), "%s", fi->name);
        cr_assert_eq(!fi->write, fi->engine != SQ_ENGINE_NONE, "%s", fi->name);
    }
    cr_assert_null(sq_export_format_info_of(SQ_EXPORT_COUNT));
}

Test(engine_table, names_and_aliases_look_up_both_ways_and_never_collide)
{
    const char *seen[64];
    int n = 0;
    FOR_ENGINES(e) {
        const sq_engine_info *in = sq_engine_info_of(e);
        cr_assert_eq(sq_engine_parse(in->name), (int)e, "%s", in->name);
        cr_assert_str_eq(sq_engine_name(e), in->name);
        seen[n++] = in->name;
        for (const char *const *a = in->aliases; a && *a; a++) {
            cr_assert_eq(sq_engine_parse(*a), (int)e, "alias %s", *a);
            /* an alias is no format's name: --export FORMAT stays unambiguous */
            int f = sq_export_format_parse(*a);
            cr_assert(f < 0 || sq_export_engine((sq_export_format)f) == e, "alias %s", *a);
            seen[n++] = *a;
        }
    }
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++)
            cr_assert_str_neq(seen[i], seen[j]);
    cr_assert_str_eq(sq_engine_name(SQ_ENGINE_NONE), "none");
    cr_assert_eq(sq_engine_parse("none"), -1);
    cr_assert_eq(sq_engine_parse("TRTLLM"), -1, "names are case-sensitive");
    cr_assert_eq(sq_engine_parse(""), -1);
    for (int f = 0; f < SQ_EXPORT_COUNT; f++) {
        const char *name = sq_export_format_name((sq_export_format)f);
        cr_assert_eq(sq_export_format_parse(name), f, "%s", name);
        for (int g = f + 1; g < SQ_EXPORT_COUNT; g++)
            cr_assert_str_neq(name, sq_export_format_name((sq_export_format)g));
    }
    cr_assert_eq(sq_export_format_parse("none"), -1);
}

Test(engine_table, name_lists_are_the_tables_in_order)
{
    char want[512] = "";
    FOR_ENGINES(e) {
        if (*want)
            strcat(want, ", ");
        strcat(want, sq_engine_name(e));
    }
    cr_assert_str_eq(sq_engine_list(), want);
    cr_assert_str_eq(sq_engine_list(), "vllm, trtllm, medusa, eagle, sglang, trtllm-dynamic");
    *want = 0;
    for (int f = 0; f < SQ_EXPORT_COUNT; f++) {
        if (*want)
            strcat(want, ", ");
        strcat(want, sq_export_format_name((sq_export_format)f));
    }
    cr_assert_str_eq(sq_export_format_list(), want);
    cr_assert_str_eq(sq_export_format_list(),
                     "trtllm, medusa, eagle, vllm, growmap, dot, svg, sglang, trtllm-dynamic");
}

Test(engine_table, every_limit_has_its_note_and_its_summary)
{
    FOR_ENGINES(e) {
        const sq_engine_info *in = sq_engine_info_of(e);
        sq_engine_limits l = sq_engine_limits_of(e, 0);
        cr_assert_eq(memcmp(&l, &in->limits, sizeof l), 0, "%s: the row's limits", in->name);
        cr_assert_eq(!!in->min_path_note, l.min_path >= 2, "%s", in->name);
        cr_assert_eq(!!in->path_note, l.max_path > 0, "%s", in->name);
        cr_assert_eq(!!in->rank_note, l.max_rank0 >= 0, "%s", in->name);
        cr_assert_eq(!!in->uniform_note, l.level_uniform, "%s", in->name);
        cr_assert(!in->envelope || l.min_path == 1, "%s: an envelope needs a draft step", in->name);
        char phrase[64];
        if (l.max_rank0 >= 0) {
            snprintf(phrase, sizeof phrase, "ranks <= %d", l.max_rank0);
            cr_assert(strstr(in->summary, phrase), "%s: %s", in->name, in->summary);
        }
        if (l.max_path) {
            snprintf(phrase, sizeof phrase, "%d speculated tokens", l.max_path);
            cr_assert(strstr(in->summary, phrase), "%s: %s", in->name, in->summary);
        }
        if (l.min_path >= 2) {
            snprintf(phrase, sizeof phrase, "depth >= %d", l.min_path + 1);
            cr_assert(strstr(in->summary, phrase), "%s: %s", in->name, in->summary);
        }
        if (l.no_32k_plus_1)
            cr_assert(strstr(in->summary, "not 32k+1 nodes"), "%s", in->summary);
        if (l.max_non_leaves) {
            cr_assert(strstr(in->summary, "<= M non-leaves"), "%s", in->summary);
            cr_assert_eq(sq_engine_limits_of(e, 3).max_non_leaves, 3, "--max-non-leaves");
        } else {
            cr_assert_eq(sq_engine_limits_of(e, 3).max_non_leaves, 0, "%s", in->name);
        }
    }
}

Test(engine_table, the_size_rule_is_32k_plus_1)
{
    FOR_ENGINES(e) {
        sq_engine_limits l = sq_engine_limits_of(e, 0);
        for (int n = 1; n <= 300; n++)
            cr_assert_eq(sq_engine_size_ok(&l, n), !(l.no_32k_plus_1 && n > 1 && (n - 1) % 32 == 0),
                         "%s, %d nodes", sq_engine_name(e), n);
    }
}

Test(engine_table, each_limit_is_refused_exactly_past_its_value_everywhere)
{
    FOR_ENGINES(e) {
        const sq_engine_info *in = sq_engine_info_of(e);
        sq_engine_limits l = in->limits;
        sq_tree *t;
        if (l.max_rank0 >= 0) {
            t = wide(l.max_rank0 + 1);
            expect(t, e, 0, 0, NULL);
            sq_tree_free(t);
            t = wide(l.max_rank0 + 2);
            expect(t, e, 0, 1, in->rank_note);
            sq_tree_free(t);
        }
        if (l.max_path) {
            t = chain(l.max_path);
            expect(t, e, 0, 0, NULL);
            sq_tree_free(t);
            t = chain(l.max_path + 1);
            expect(t, e, 0, 1, in->path_note);
            sq_tree_free(t);
        }
        if (l.min_path) {
            t = chain(l.min_path);
            expect(t, e, 0, 0, NULL);
            sq_tree_free(t);
            t = chain(l.min_path - 1);
            expect(t, e, 0, 1, l.min_path >= 2 ? in->min_path_note : "root-only");
            sq_tree_free(t);
        }
        if (l.no_32k_plus_1) {
            t = sized(34);
            expect(t, e, 0, 0, NULL);
            sq_tree_free(t);
            t = sized(33);
            expect(t, e, 0, 1, "is a multiple of 32");
            sq_tree_free(t);
        }
        if (l.max_non_leaves) {
            t = non_leaves(l.max_non_leaves);
            expect(t, e, 0, 0, NULL);
            sq_tree_free(t);
            t = non_leaves(l.max_non_leaves + 1);
            expect(t, e, 0, 1, "nodes with children");
            expect(t, e, l.max_non_leaves + 1, 0, NULL);   /* --max-non-leaves */
            sq_tree_free(t);
        }
        if (l.level_uniform) {
            int parent[] = {0, 0, 1, 1, 2, 2};
            t = tree_of(parent, 7);
            expect(t, e, 0, 0, NULL);
            sq_tree_free(t);
            int bad[] = {0, 0, 1, 1, 2};
            t = tree_of(bad, 6);
            expect(t, e, 0, 1, in->uniform_note);
            sq_tree_free(t);
        }
        if (l.deep_first) {
            t = deep_first(1);
            expect(t, e, 0, 0, NULL);
            sq_tree_free(t);
            t = deep_first(0);
            expect(t, e, 0, 1, "children with children");
            sq_tree_free(t);
        }
    }
}

Test(engine_table, plans_keep_their_engines_limits_and_write)
{
    const int sizes[][2] = {{33, 6}, {64, 10}, {65, 8}, {128, 10}};
    FOR_ENGINES(e) {
        for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
            sq_engine_plan_params p = sq_engine_plan_default_params();
            p.engine = e;
            p.budget = sizes[i][0];
            p.depth = sizes[i][1];
            sq_engine_plan_result r;
            sq_error err = {0};
            cr_assert_eq(sq_engine_plan(&p, &r, &err), SQ_OK, "%s: %s", sq_engine_name(e), err.msg);
            cr_assert_eq(sq_engine_check(r.tree, e, 0, "plan", &err), SQ_OK, "%s %d/%d: %s",
                         sq_engine_name(e), p.budget, p.depth, err.msg);
            sq_engine_limits l = sq_engine_limits_of(e, 0);
            cr_assert(sq_engine_size_ok(&l, r.tree->n));
            cr_assert(r.budget == p.budget || r.budget == p.budget - 1 || !l.no_32k_plus_1);
            char *out = NULL;
            size_t len = 0;
            FILE *fp = open_memstream(&out, &len);
            cr_assert_not_null(fp);
            sq_plan *plan = NULL;
            cr_assert_eq(sq_plan_new(r.tree, sq_curve_default(), p.budget, p.depth, 16, &plan,
                                     &err), SQ_OK);
            cr_assert_eq(sq_engine_info_of(e)->write(fp, plan, "plan", &err), SQ_OK, "%s",
                         err.msg);
            fclose(fp);
            cr_assert(len > 0);
            free(out);
            sq_plan_free(plan);
        }
    }
}

Test(engine_table, unknown_engine_is_refused_by_the_planner)
{
    sq_engine_plan_params p = sq_engine_plan_default_params();
    p.engine = SQ_ENGINE_NONE;
    sq_engine_plan_result r;
    sq_error err = {0};
    cr_assert_eq(sq_engine_plan(&p, &r, &err), SQ_EUSAGE);
    cr_assert_str_eq(err.msg, "engine plan: unknown engine");
    sq_tree *t = chain(3);
    cr_assert_eq(sq_engine_check(t, SQ_ENGINE_NONE, 0, "t", &err), SQ_OK, "no engine, no limits");
    sq_tree_free(t);
}

#define PROFILE "{\"format\":\"sequoia-profile\",\"version\":1,\"device\":\"demo\",\"points\":[" \
    "{\"tokens\":1,\"median_ms\":10},{\"tokens\":8,\"median_ms\":12}]}"

Test(engine_table, a_lookup_outside_the_profile_says_so_in_its_cause)
{
    char *dir = tu_tmpdir(), *path = tu_path(dir, "t.json");
    tu_write(path, PROFILE);
    sq_profile *p = NULL;
    sq_error err = {0};
    cr_assert_eq(sq_profile_load(path, &p, &err), SQ_OK, "%s", err.msg);
    double ms;
    cr_assert_eq(sq_profile_ms(p, 4, SQ_EXTRAPOLATE_NONE, &ms, &err), SQ_OK);
    cr_assert_eq(err.cause, SQ_CAUSE_NONE);
    cr_assert_eq(sq_profile_ms(p, 9, SQ_EXTRAPOLATE_NONE, &ms, &err), SQ_EUSAGE);
    cr_assert_eq(err.cause, SQ_CAUSE_OUT_OF_RANGE);
    /* another failure of the same status has no cause */
    sq_error e2 = {0};
    cr_assert_eq(sq_profile_ms_batch(p, 4, 1, SQ_EXTRAPOLATE_NONE, &ms, &e2), SQ_EUSAGE);
    cr_assert_eq(e2.cause, SQ_CAUSE_NONE, "%s", e2.msg);
    /* a later failure does not overwrite the first one's cause */
    sq_error e3 = {0};
    cr_assert_eq(sq_profile_ms_batch(p, 4, 1, SQ_EXTRAPOLATE_NONE, &ms, &e3), SQ_EUSAGE);
    cr_assert_eq(sq_profile_ms(p, 9, SQ_EXTRAPOLATE_NONE, &ms, &e3), SQ_EUSAGE);
    cr_assert_eq(e3.cause, SQ_CAUSE_NONE);
    /* kept through the planner's prefix (planner/hardware.c) */
    sq_hw_params hw = sq_hw_default_params();
    hw.target = p;
    hw.target_file = path;
    sq_tree *t = chain(9);   /* 10 nodes: past the measured 8 tokens */
    sq_error e4 = {0};
    cr_assert_eq(sq_hw_step_ms(&hw, t, 2.0, &ms, &e4), SQ_EUSAGE);
    cr_assert_eq(e4.cause, SQ_CAUSE_OUT_OF_RANGE, "%s", e4.msg);
    cr_assert(strstr(e4.msg, path), "%s", e4.msg);
    sq_tree_free(t);
    sq_profile_free(p);
    tu_rmtree(dir);
    free(dir);
    free(path);
}

/* sequoia-plan names every engine and format of the tables in its help and its messages. */
Test(engine_table, the_tool_lists_every_row)
{
    const char *bin = getenv("SQ_PLAN_BIN");
    cr_assert_not_null(bin, "SQ_PLAN_BIN is not set (run through meson test)");
    char *help[] = {(char *)bin, "--help", NULL};
    char *so, *se;
    cr_assert_eq(tu_run(help, &so, &se), 0);
    /* the text unwrapped: every run of spaces and newlines as one space */
    char *w = so;
    for (const char *r = so; *r; r++)
        if (!(*r == ' ' || *r == '\n') || (w > so && w[-1] != ' '))
            *w++ = *r == '\n' ? ' ' : *r;
    *w = 0;
    FOR_ENGINES(e) {
        const sq_engine_info *in = sq_engine_info_of(e);
        char want[512];
        snprintf(want, sizeof want, "(%s)", in->summary);
        cr_assert(strstr(so, want), "no \"%s\" in --help", want);
        snprintf(want, sizeof want, " %s ", in->name);
        cr_assert(strstr(so, want), "no \"%s\" in --help", want);
    }
    for (int f = 0; f < SQ_EXPORT_COUNT; f++) {
        char want[512];
        snprintf(want, sizeof want, "(%s)", sq_export_format_info_of((sq_export_format)f)->note);
        cr_assert(strstr(so, want), "no \"%s\" in --help", want);
    }
    free(so);
    free(se);
    char *bad[] = {(char *)bin, "--engine", "nope", NULL};
    cr_assert_eq(tu_run(bad, &so, &se), 64);
    char want[512];
    snprintf(want, sizeof want, "(one of: %s)", sq_engine_list());
    cr_assert(strstr(se, want), "%s", se);
    free(so);
    free(se);
}
