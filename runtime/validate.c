/* --validate checks (validate.h). */
#include "runtime/validate.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "libsequoia/base/json.h"
#include "libsequoia/verify/verify.h"

double sq_validate_attn_tol(sq_backend_kind backend)
{
    return backend == SQ_BACKEND_CUDA ? 2e-2 : 1e-4;
}

void sq_validate_greedy(const int32_t *gen, const int32_t *base, int n, sq_validation *val)
{
    val->greedy_checked = 1;
    val->greedy_ok = 1;
    val->greedy_first_mismatch = -1;
    for (int i = 0; i < n; i++)
        if (gen[i] != base[i]) {
            val->greedy_ok = 0;
            val->greedy_first_mismatch = i;
            break;
        }
}

int sq_validation_pass(const sq_validation *val)
{
    return val->attn_ok && (!val->greedy_checked || val->greedy_ok) &&
           (!val->dist_checked || val->dist_ok);
}

/* The chi-square tests of R samples (first[i], second[i]) of the first two tokens generated
 * after `prompt` against the target's own distribution (computed with sd): first token
 * ~ P(. | prompt), pair ~ P(a | prompt) P(b | prompt, a). Fills first, pair and
 * pair_first_tokens of *val. */
static int dist_test(sq_specdec *sd, const int32_t *prompt, int L, const int32_t *first,
                     const int32_t *second, int R, sq_validation *val, sq_error *err)
{
    int V = sq_specdec_vocab(sd), rc = SQ_OK;
    int32_t *ctx = malloc(((size_t)L + 1) * sizeof *ctx);
    double *p0 = malloc((size_t)V * sizeof *p0), *p1 = malloc((size_t)V * sizeof *p1);
    double *cnt = calloc((size_t)V, sizeof *cnt);
    int32_t *order = malloc((size_t)V * sizeof *order);
    double *pp = NULL, *pc = NULL;
    if (!ctx || !p0 || !p1 || !cnt || !order) {
        rc = sq_error_oom(err, "validation");
        goto done;
    }
    if ((rc = sq_specdec_target_probs(sd, prompt, L, p0, err)))
        goto done;
    for (int i = 0; i < R; i++)
        cnt[first[i]] += 1;
    val->first = sq_chisq_gof(cnt, p0, V, 5.0);
    /* pair bins: (a, b) for the likeliest first tokens a, then one bin for every other a */
    if ((rc = sq_topk_d(p0, V, V < SQ_VALIDATE_MAX_FIRST_BINS ? V : SQ_VALIDATE_MAX_FIRST_BINS,
                        order, err)))
        goto done;
    int A = 0;
    while (A < V && A < SQ_VALIDATE_MAX_FIRST_BINS && p0[order[A]] * R >= 5.0)
        A++;
    size_t nb = (size_t)A * V + 1;
    pp = calloc(nb, sizeof *pp);
    pc = calloc(nb, sizeof *pc);
    if (!pp || !pc) {
        rc = sq_error_oom(err, "validation bins");
        goto done;
    }
    memcpy(ctx, prompt, (size_t)L * sizeof *ctx);
    double rest = 1.0;
    for (int j = 0; j < A; j++) {
        ctx[L] = order[j];
        if ((rc = sq_specdec_target_probs(sd, ctx, L + 1, p1, err)))
            goto done;
        for (int b = 0; b < V; b++)
            pp[(size_t)j * V + b] = p0[order[j]] * p1[b];
        rest -= p0[order[j]];
    }
    pp[nb - 1] = rest > 0.0 ? rest : 0.0;
    for (int i = 0; i < R; i++) {
        int j = 0;
        while (j < A && order[j] != first[i])
            j++;
        pc[j < A ? (size_t)j * V + second[i] : nb - 1] += 1;
    }
    val->pair = sq_chisq_gof(pc, pp, (int)nb, 5.0);
    val->pair_first_tokens = A;
done:
    free(ctx);
    free(p0);
    free(p1);
    free(cnt);
    free(order);
    free(pp);
    free(pc);
    return rc;
}

static int dist_pass(const sq_validation *val)
{
    return val->first.p_value >= SQ_VALIDATE_P_MIN && val->pair.p_value >= SQ_VALIDATE_P_MIN;
}

/* The seed of the i-th (from 0) draw of the distribution test. */
static uint64_t dist_seed(uint64_t seed, int i)
{
    return seed + 0x51ed27ull * (uint64_t)(i + 1);
}

/* The distribution test drawn by a group of B decoders (sq_specdec_step_group): `samples`
 * draws in rounds of B, round i reseeding decoder k with sq_specdec_batch_seed_of of the i-th
 * seed, every decoder k on prompts[k] (plen[k] tokens), steps until each has two tokens; then
 * one test per distinct prompt (validate.h). B = 1 is sq_validate_distribution. */
static int dist_group(sq_specdec *const *sd, int B, uint64_t seed, int samples,
                      const int32_t *const *prompts, const int *plen, sq_validation *val,
                      void (*progress)(void *user, int64_t done, int64_t total), void *user,
                      sq_error *err)
{
    const int rounds = (samples + B - 1) / B;
    const int D = sq_specdec_depth(sd[0]);
    const size_t cells = (size_t)rounds * (size_t)B;
    int rc = SQ_OK;
    int32_t *first = malloc(cells * sizeof *first), *second = malloc(cells * sizeof *second);
    int32_t *gf = malloc(cells * sizeof *gf), *gs = malloc(cells * sizeof *gs);
    int32_t *buf = malloc((size_t)B * (size_t)D * sizeof *buf);
    int32_t **outs = malloc((size_t)B * sizeof *outs);
    int *got = malloc((size_t)B * sizeof *got), *ntok = malloc((size_t)B * sizeof *ntok);
    int *active = malloc((size_t)B * sizeof *active), *done_g = calloc((size_t)B, sizeof *done_g);
    if (!first || !second || !gf || !gs || !buf || !outs || !got || !ntok || !active || !done_g) {
        rc = sq_error_oom(err, "validation");
        goto done;
    }
    for (int k = 0; k < B; k++)
        outs[k] = buf + (size_t)k * D;
    /* the draws: round i reseeds the group (decoder k from sq_specdec_batch_seed_of) and steps
     * it, every decoder on its own prompt, until each has two tokens */
    for (int i = 0; i < rounds && !rc; i++) {
        if (progress)
            progress(user, (int64_t)i * B, (int64_t)rounds * B);
        for (int k = 0; k < B && !rc; k++) {
            sq_specdec_seed(sd[k], sq_specdec_batch_seed_of(dist_seed(seed, i), k));
            rc = sq_specdec_start(sd[k], prompts[k], plen[k], err);
        }
        if (rc)
            break;
        for (int k = 0; k < B; k++)
            got[k] = 0;
        for (;;) {
            int any = 0;
            for (int k = 0; k < B; k++)
                any |= active[k] = got[k] < 2;
            if (!any)
                break;
            if ((rc = sq_specdec_step_group(sd, B, active, outs, ntok, NULL, err)))
                break;
            for (int k = 0; k < B; k++)
                for (int j = 0; j < ntok[k] && got[k] < 2; j++, got[k]++)
                    (got[k] == 0 ? first : second)[(size_t)i * B + k] = outs[k][j];
        }
    }
    if (!rc && progress)
        progress(user, (int64_t)rounds * B, (int64_t)rounds * B);
    /* one test per distinct prompt, over the samples of the decoders that read it; the
     * reported statistics are those of the group with the smallest p-value */
    int groups = 0, ok = 1;
    sq_validation worst = {0};
    for (int k = 0; k < B && !rc; k++) {
        if (done_g[k])
            continue;
        int R = 0;
        for (int k2 = k; k2 < B; k2++) {
            if (done_g[k2] || prompts[k2] != prompts[k] || plen[k2] != plen[k])
                continue;
            done_g[k2] = 1;
            for (int i = 0; i < rounds; i++) {
                gf[R] = first[(size_t)i * B + k2];
                gs[R++] = second[(size_t)i * B + k2];
            }
        }
        sq_validation g = {0};
        if ((rc = dist_test(sd[k], prompts[k], plen[k], gf, gs, R, &g, err)))
            break;
        int pass = dist_pass(&g);
        double pmin = fmin(g.first.p_value, g.pair.p_value);
        if (groups == 0 || pmin < fmin(worst.first.p_value, worst.pair.p_value))
            worst = g;
        ok &= pass;
        groups++;
    }
    if (rc)
        goto done;
    val->first = worst.first;
    val->pair = worst.pair;
    val->pair_first_tokens = worst.pair_first_tokens;
    val->dist_checked = 1;
    val->seeds = (int)cells;
    val->dist_groups = groups;
    val->dist_ok = ok;
done:
    free(first);
    free(second);
    free(gf);
    free(gs);
    free(buf);
    free(outs);
    free(got);
    free(ntok);
    free(active);
    free(done_g);
    return rc;
}

int sq_validate_distribution(sq_specdec *sd, uint64_t seed, int seeds, const int32_t *prompt,
                             int L, sq_validation *val,
                             void (*progress)(void *user, int64_t done, int64_t total),
                             void *user, sq_error *err)
{
    return dist_group(&sd, 1, seed, seeds, &prompt, &L, val, progress, user, err);
}

int sq_validate_distribution_batch(sq_specdec_batch *bt, uint64_t seed, int samples,
                                   const int32_t *const *prompts, const int *plen,
                                   sq_validation *val,
                                   void (*progress)(void *user, int64_t done, int64_t total),
                                   void *user, sq_error *err)
{
    const int B = sq_specdec_batch_size(bt);
    sq_specdec **sd = malloc((size_t)B * sizeof *sd);
    if (!sd)
        return sq_error_oom(err, "validation");
    for (int k = 0; k < B; k++)
        sd[k] = sq_specdec_batch_member(bt, k);
    int rc = dist_group(sd, B, seed, samples, prompts, plen, val, progress, user, err);
    free(sd);
    return rc;
}

int sq_validate_attention(sq_specdec *sd, const int32_t *prompt, int L, double tol,
                          sq_validation *val, sq_error *err)
{
    int D = sq_specdec_depth(sd);
    int32_t *buf = malloc((size_t)D * sizeof *buf);
    if (!buf)
        return sq_error_oom(err, "validation");
    sq_step_info info = {0};
    int rc = sq_specdec_start(sd, prompt, L, err);
    val->attn_max_diff = 0.0;
    sq_specdec_set_check_attention(sd, 1);
    for (int s = 0; s < SQ_VALIDATE_ATTN_STEPS && !rc; s++) {
        if (sq_specdec_length(sd) - 1 + D > sq_specdec_max_context(sd))
            break;
        rc = sq_specdec_step(sd, buf, &info, err);
        if (!rc && !(info.attn_max_diff <= val->attn_max_diff))
            val->attn_max_diff = info.attn_max_diff;
    }
    sq_specdec_set_check_attention(sd, 0);
    sq_step_info_clear(&info);
    free(buf);
    val->attn_tol = tol;
    val->attn_ok = val->attn_max_diff <= tol;
    return rc;
}

static cJSON *chisq_json(const sq_chisq *c, const char *what)
{
    cJSON *o = cJSON_CreateObject();
    sq_json_add(o, "test", cJSON_CreateString(what));
    sq_json_add(o, "samples", cJSON_CreateNumber(c->n));
    sq_json_add(o, "chi2", isfinite(c->stat) ? cJSON_CreateNumber(c->stat) : cJSON_CreateNull());
    sq_json_add(o, "df", cJSON_CreateNumber(c->df));
    sq_json_add(o, "p_value", cJSON_CreateNumber(c->p_value));
    sq_json_add(o, "pass", cJSON_CreateBool(c->p_value >= SQ_VALIDATE_P_MIN));
    return o;
}


cJSON *sq_validation_to_json(const sq_validation *val)
{
    sq_json_build b = sq_json_build_begin();
    cJSON *vj = cJSON_CreateObject();
    cJSON *at = cJSON_CreateObject();
    sq_json_add(at, "max_abs_diff", isfinite(val->attn_max_diff)
                                        ? cJSON_CreateNumber(val->attn_max_diff)
                                        : cJSON_CreateNull());
    sq_json_add(at, "tolerance", cJSON_CreateNumber(val->attn_tol));
    sq_json_add(at, "steps", cJSON_CreateNumber(SQ_VALIDATE_ATTN_STEPS));
    sq_json_add(at, "pass", cJSON_CreateBool(val->attn_ok));
    sq_json_add(vj, "tree_attention", at);
    if (val->greedy_checked) {
        cJSON *g = cJSON_CreateObject();
        sq_json_add(g, "identical_to_target_greedy", cJSON_CreateBool(val->greedy_ok));
        sq_json_add(g, "first_mismatch", cJSON_CreateNumber(val->greedy_first_mismatch));
        sq_json_add(g, "pass", cJSON_CreateBool(val->greedy_ok));
        sq_json_add(vj, "greedy", g);
    }
    if (val->dist_checked) {
        cJSON *dj = cJSON_CreateObject();
        sq_json_add(dj, "seeds", cJSON_CreateNumber(val->seeds));
        if (val->dist_groups > 1)   /* a batch over several prompts: the worst group's tests */
            sq_json_add(dj, "prompts", cJSON_CreateNumber(val->dist_groups));
        sq_json_add(dj, "p_min", cJSON_CreateNumber(SQ_VALIDATE_P_MIN));
        sq_json_add(dj, "first_token",
                    chisq_json(&val->first, "chi-square goodness of fit of the first generated "
                               "token to the target's P(. | prompt)"));
        sq_json_add(dj, "first_two_tokens",
                    chisq_json(&val->pair, "chi-square goodness of fit of (first, second) to "
                               "P(a | prompt) P(b | prompt, a); the likeliest first tokens get "
                               "one bin per successor, the others one bin"));
        sq_json_add(dj, "pair_first_tokens", cJSON_CreateNumber(val->pair_first_tokens));
        sq_json_add(dj, "pass", cJSON_CreateBool(val->dist_ok));
        sq_json_add(vj, "distribution", dj);
    }
    sq_json_add(vj, "pass", cJSON_CreateBool(sq_validation_pass(val)));
    return sq_json_build_end(b, vj);
}
