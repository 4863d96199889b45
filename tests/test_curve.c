/* Acceptance-curve files (docs/design.md §7.1): parsing, selection, and every bad input the planner
 * must reject with a message naming the file and the field. */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "libsequoia/format/curve.h"
#include "libsequoia/base/json.h"
#include "tests/testutil.h"

static int load_text(const char *text, sq_curve_set **set, sq_error *err)
{
    cJSON *root;
    *set = NULL;
    int rc = sq_json_parse("acc.json", text, strlen(text), &root, err);
    if (rc)
        return rc;
    rc = sq_curve_set_from_json(root, "acc.json", set, err);
    cJSON_Delete(root);
    return rc;
}

#define HEAD "{\"format\":\"sequoia-acceptance\",\"version\":1,\"curves\":"

Test(curve, reads_every_field)
{
    const char *text = HEAD "[{\"name\":\"stochastic@T0.6\",\"mode\":\"stochastic\","
                       "\"temperature\":0.6,\"top_p\":1.0,\"p\":[0.634,0.108,0.05],"
                       "\"stderr\":[0.004,0.002,0.001],\"reject\":0.208,\"p_by_depth\":null,"
                       "\"positions\":120000,\"sequences\":400,\"stats\":{\"n\":3}}],"
                       "\"source\":{\"corpus\":[\"c4.h5\"]}}";
    sq_curve_set *set;
    sq_error err = {0};
    cr_assert_eq(load_text(text, &set, &err), 0, "%s", err.msg);
    cr_assert_eq(set->n, 1);
    const sq_curve *c = &set->curves[0];
    cr_assert_str_eq(c->name, "stochastic@T0.6");
    cr_assert_eq(c->width, 3);
    cr_assert(fabs(c->p[1] - 0.108) < 1e-15);
    cr_assert(fabs(c->stderr_p[2] - 0.001) < 1e-15);
    cr_assert(fabs(c->reject - 0.208) < 1e-12);
    cr_assert_eq(c->positions, 120000);
    cr_assert_eq(c->sequences, 400);
    cr_assert_not_null(cJSON_GetObjectItem(c->extra, "stats"), "unknown members are kept");
    cr_assert_not_null(set->source);
    cr_assert_str_eq(sq_curve_rank_semantics(c), "sampled-without-replacement");
    sq_curve_set_free(set);
}

Test(curve, round_trips_through_json)
{
    const char *text = HEAD "[{\"name\":\"a\",\"mode\":\"greedy\",\"temperature\":0,"
                       "\"p\":[0.5,0.25],\"p_by_depth\":[[0.5,0.25],[0.4,0.1]],\"stats\":[1,2]}]}";
    sq_curve_set *set, *again;
    sq_error err = {0};
    cr_assert_eq(load_text(text, &set, &err), 0, "%s", err.msg);
    cJSON *j = sq_curve_set_to_json(set);
    char *out = sq_json_to_string(j, NULL);
    cJSON_Delete(j);
    cr_assert_eq(load_text(out, &again, &err), 0, "%s", err.msg);
    const sq_curve *a = &set->curves[0], *b = &again->curves[0];
    cr_assert_eq(b->depth_rows, 2);
    cr_assert_eq(memcmp(a->p_by_depth, b->p_by_depth, 4 * sizeof(double)), 0);
    cr_assert_str_eq(b->mode, "greedy");
    cr_assert_str_eq(sq_curve_rank_semantics(b), "draft-topk");
    cr_assert_eq(sq_curve_p(b, 1, 2), 0.25);
    cr_assert_eq(sq_curve_p(b, 2, 1), 0.4);
    cr_assert_eq(sq_curve_p(b, 7, 1), 0.4, "deeper levels reuse the last row");
    cr_assert_eq(sq_curve_p(b, 1, 3), 0.0, "ranks past the width have p = 0");
    cr_assert_not_null(cJSON_GetObjectItem(b->extra, "stats"));
    cr_assert_null(b->stderr_by_depth);
    cr_assert_null(strstr(out, "stderr_by_depth"), "written only when the curve has it");
    free(out);
    sq_curve_set_free(set);
    sq_curve_set_free(again);
}

Test(curve, selects_by_name_and_refuses_ambiguity)
{
    const char *text = HEAD "[{\"name\":\"greedy\",\"p\":[0.5]},{\"name\":\"stochastic@T1\","
                       "\"p\":[0.6,0.1]}]}";
    sq_curve_set *set;
    sq_error err = {0};
    cr_assert_eq(load_text(text, &set, &err), 0, "%s", err.msg);
    const sq_curve *c;
    cr_assert_eq(sq_curve_set_select(set, "stochastic@T1", "acc.json", &c, &err), 0);
    cr_assert_eq(c->width, 2);
    sq_error e1 = {0}, e2 = {0};
    cr_assert_eq(sq_curve_set_select(set, NULL, "acc.json", &c, &e1), SQ_EUSAGE);
    cr_assert(strstr(e1.msg, "acc.json") && strstr(e1.msg, "\"greedy\"") &&
              strstr(e1.msg, "\"stochastic@T1\"") && strstr(e1.msg, "choose one by name"), "%s", e1.msg);
    cr_assert_eq(sq_curve_set_select(set, "nope", "acc.json", &c, &e2), SQ_EUSAGE);
    cr_assert(strstr(e2.msg, "no curve named \"nope\"") && strstr(e2.msg, "\"greedy\""), "%s",
              e2.msg);
    sq_curve_set_free(set);
}

Test(curve, default_is_the_appendix_e_vector)
{
    const sq_curve *c = sq_curve_default();
    cr_assert_eq(c->width, 31);
    cr_assert_eq(c->p[0], 0.7732);
    cr_assert_eq(c->p[30], 0.0001);
    sq_error err = {0};
    cr_assert_eq(sq_curve_validate(c, "default", "", &err), 0, "%s", err.msg);
    cr_assert(strstr(sq_curve_default_provenance, "App. E"));
}

typedef struct {
    char text[400];
    char expect[3][80]; /* substrings of the message */
} bad_case;

ParameterizedTestParameters(curve, rejects_bad_input_naming_file_and_field)
{
    static bad_case cases[] = {
        {"{\"format\":\"sequoia-acceptance\",", {"acc.json:1:", "malformed JSON", ""}},
        {"", {"acc.json", "empty file", ""}},
        {"[1,2]", {"acc.json", "object at the top level", ""}},
        {"{\"format\":\"other\",\"version\":1,\"curves\":[]}", {"acc.json", "format", "other"}},
        {"{\"format\":\"sequoia-acceptance\",\"version\":2,\"curves\":[{\"p\":[0.5]}]}",
         {"acc.json", "version", "2 is not supported"}},
        {"{\"format\":\"sequoia-acceptance\",\"version\":1}", {"acc.json", "curves", "missing"}},
        {HEAD "[]}", {"acc.json", "curves", "empty"}},
        {HEAD "[{\"name\":\"a\",\"p\":[0.5,1.7]}]}", {"acc.json", "curves[0].p[1]", "not a probability"}},
        {HEAD "[{\"name\":\"a\",\"p\":[-0.1]}]}", {"acc.json", "curves[0].p[0]", "not a probability"}},
        {HEAD "[{\"name\":\"a\",\"p\":[0.5,1e999]}]}", {"acc.json", "curves[0].p[1]", "not finite"}},
        {HEAD "[{\"name\":\"a\",\"p\":[0.5,NaN]}]}", {"acc.json", "malformed JSON", ""}},
        {HEAD "[{\"name\":\"a\",\"p\":[0.7,0.4]}]}", {"acc.json", "curves[0].p", "sum to 1.1"}},
        {HEAD "[{\"name\":\"a\",\"p\":[]}]}", {"acc.json", "curves[0].p", "empty"}},
        {HEAD "[{\"name\":\"a\"}]}", {"acc.json", "curves[0].p", "missing"}},
        {HEAD "[{\"name\":\"a\",\"p\":[0.5,\"x\"]}]}", {"acc.json", "curves[0].p[1]", "expected a number"}},
        {HEAD "[{\"name\":\"a\",\"p\":[0.5],\"p\":[0.6]}]}", {"acc.json", "\"p\"", "twice"}},
        {HEAD "[{\"name\":\"a\",\"p\":[0.5],\"mode\":\"beam\"}]}", {"acc.json", "curves[0].mode", "beam"}},
        {HEAD "[{\"name\":\"a\",\"p\":[0.5],\"reject\":0.9}]}", {"acc.json", "curves[0].reject", "disagrees"}},
        {HEAD "[{\"name\":\"a\",\"p\":[0.5],\"temperature\":-1}]}", {"acc.json", "curves[0].temperature", ">= 0"}},
        {HEAD "[{\"name\":\"a\",\"p\":[0.5],\"top_p\":1.5}]}", {"acc.json", "curves[0].top_p", "(0, 1]"}},
        {HEAD "[{\"name\":\"a\",\"p\":[0.5],\"stderr\":[0.1,0.2]}]}", {"acc.json", "curves[0].stderr", "2 entries"}},
        {HEAD "[{\"name\":\"a\",\"p\":[0.5,0.1],\"p_by_depth\":[[0.5]]}]}", {"acc.json", "curves[0].p_by_depth[0]", "1 entries"}},
        {HEAD "[{\"name\":\"a\",\"p\":[0.5],\"p_by_depth\":[[0.9],[1.2]]}]}", {"acc.json", "curves[0].p_by_depth[1][0]", "not a probability"}},
        {HEAD "[{\"name\":\"a\",\"p\":[0.5],\"stderr_by_depth\":[[0.1]]}]}", {"acc.json", "curves[0].stderr_by_depth", "without p_by_depth"}},
        {HEAD "[{\"name\":\"a\",\"p\":[0.5],\"p_by_depth\":[[0.5],[0.4]],\"stderr_by_depth\":[[0.1]]}]}", {"acc.json", "curves[0].stderr_by_depth", "1 rows but p_by_depth has 2"}},
        {HEAD "[{\"name\":\"a\",\"p\":[0.5],\"p_by_depth\":[[0.5]],\"stderr_by_depth\":[[-0.1]]}]}", {"acc.json", "curves[0].stderr_by_depth[0][0]", ">= 0"}},
        {HEAD "[{\"name\":\"a\",\"p\":[0.5,0.1],\"p_by_depth\":[[0.5,0.1]],\"stderr_by_depth\":[[0.1]]}]}", {"acc.json", "curves[0].stderr_by_depth[0]", "1 entries"}},
        {HEAD "[{\"name\":\"a\",\"p\":[0.5]},{\"name\":\"a\",\"p\":[0.5]}]}", {"acc.json", "curves[1].name", "also the name"}},
        {HEAD "[{\"name\":\"a\",\"p\":[0.5],\"positions\":-3}]}", {"acc.json", "curves[0].positions", "integer"}},
    };
    return cr_make_param_array(bad_case, cases, sizeof cases / sizeof *cases);
}

ParameterizedTest(bad_case *bc, curve, rejects_bad_input_naming_file_and_field)
{
    sq_curve_set *set = (sq_curve_set *)1;
    sq_error err = {0};
    int rc = load_text(bc->text, &set, &err);
    cr_assert_eq(rc, SQ_EDATA, "input %s: status %d (%s)", bc->text, rc, err.msg);
    cr_assert_null(set);
    for (int i = 0; i < 3; i++)
        if (bc->expect[i][0])
            cr_assert(strstr(err.msg, bc->expect[i]), "message '%s' lacks '%s'", err.msg,
                      bc->expect[i]);
}

/* Issue 27: the standard errors of the depth rows round trip and are copied. */
Test(curve, stderr_by_depth_round_trips_and_copies)
{
    const char *text = HEAD "[{\"name\":\"a\",\"p\":[0.5,0.25],\"p_by_depth\":[[0.5,0.25],"
                       "[0.4,0.1]],\"stderr_by_depth\":[[0.01,0.02],[0.03,0.04]]}]}";
    sq_curve_set *set, *again;
    sq_error err = {0};
    cr_assert_eq(load_text(text, &set, &err), 0, "%s", err.msg);
    cJSON *j = sq_curve_set_to_json(set);
    char *out = sq_json_to_string(j, NULL);
    cJSON_Delete(j);
    cr_assert_eq(load_text(out, &again, &err), 0, "%s", err.msg);
    const sq_curve *b = &again->curves[0];
    cr_assert_not_null(b->stderr_by_depth);
    cr_assert_eq(b->stderr_by_depth[3], 0.04);
    cr_assert_null(cJSON_GetObjectItem(b->extra, "stderr_by_depth"), "a field, not an extra");
    sq_curve c;
    cr_assert_eq(sq_curve_copy(&c, b, &err), 0, "%s", err.msg);
    cr_assert(c.stderr_by_depth && c.stderr_by_depth != b->stderr_by_depth);
    cr_assert_eq(memcmp(c.stderr_by_depth, b->stderr_by_depth, 4 * sizeof(double)), 0);
    sq_curve_clear(&c);
    free(out);
    sq_curve_set_free(set);
    sq_curve_set_free(again);
}

Test(curve, missing_file_and_directory_are_reported)
{
    sq_curve_set *set;
    sq_error e1 = {0}, e2 = {0};
    cr_assert_eq(sq_curve_set_load("/nonexistent/acc.json", &set, &e1), SQ_ENOINPUT);
    cr_assert(strstr(e1.msg, "/nonexistent/acc.json"), "%s", e1.msg);
    char *dir = tu_tmpdir();
    cr_assert_eq(sq_curve_set_load(dir, &set, &e2), SQ_EDATA);
    cr_assert(strstr(e2.msg, "is a directory"), "%s", e2.msg);
    tu_rmtree(dir);
    free(dir);
}
