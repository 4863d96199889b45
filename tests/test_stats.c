/* libsequoia/base/stats: quantiles against the order statistics they interpolate, and the
 * batch-means interval's coverage on independent normal series (a closed-form oracle: the
 * true mean is known). The chi-square test is exercised by the verify and rule suites. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <gsl/gsl_randist.h>
#include <gsl/gsl_rng.h>

#include "libsequoia/base/stats.h"

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

Test(stats, quantile_interpolates_the_order_statistics)
{
    gsl_rng *r = gsl_rng_alloc(gsl_rng_mt19937);
    gsl_rng_set(r, 11);
    double v[64], sorted[64], w[64];
    for (int trial = 0; trial < 500; trial++) {
        int n = 1 + (int)gsl_rng_uniform_int(r, 64);
        for (int i = 0; i < n; i++)
            v[i] = trial % 3 ? gsl_ran_gaussian(r, 10.0) : (double)gsl_rng_uniform_int(r, 4);
        memcpy(sorted, v, (size_t)n * sizeof *v);
        qsort(sorted, (size_t)n, sizeof *v, cmp);
        /* at p = k / (n - 1) the quantile is the k-th order statistic */
        for (int k = 0; k < n; k++) {
            memcpy(w, v, (size_t)n * sizeof *v);
            double p = n > 1 ? (double)k / (n - 1) : 0.5;
            cr_assert_float_eq(sq_quantile(w, n, p), sorted[n > 1 ? k : 0], 1e-9);
        }
        /* between them, the straight line; the median of an odd count is the middle value */
        memcpy(w, v, (size_t)n * sizeof *v);
        double p = gsl_rng_uniform(r), q = sq_quantile(w, n, p);
        double pos = p * (n - 1);
        int lo = (int)floor(pos), hi = lo + 1 < n ? lo + 1 : lo;
        cr_assert_float_eq(q, sorted[lo] + (pos - lo) * (sorted[hi] - sorted[lo]), 1e-9);
        memcpy(w, v, (size_t)n * sizeof *v);
        if (n % 2)
            cr_assert_eq(sq_quantile(w, n, 0.5), sorted[n / 2]);
        else
            cr_assert_float_eq(sq_quantile(w, n, 0.5),
                               0.5 * (sorted[n / 2 - 1] + sorted[n / 2]), 1e-9);
    }
    gsl_rng_free(r);
}

Test(stats, the_mean_interval_covers_the_true_mean_about_95_percent)
{
    gsl_rng *r = gsl_rng_alloc(gsl_rng_mt19937);
    gsl_rng_set(r, 12);
    enum { TRIALS = 2000, N = 400 };
    double *x = malloc(N * sizeof *x);
    int covered = 0;
    for (int t = 0; t < TRIALS; t++) {
        for (int i = 0; i < N; i++)
            x[i] = 3.0 + gsl_ran_gaussian(r, 2.0);
        sq_mean_ci c = sq_mean_ci_batch(x, N);
        cr_assert(c.lo < c.mean && c.mean < c.hi);
        covered += c.lo <= 3.0 && 3.0 <= c.hi;
    }
    /* binomial(2000, 0.95): sd 9.7 draws; 5 sd either side */
    cr_assert(covered >= 1900 - 49 && covered <= 1900 + 49, "coverage %d of %d", covered, TRIALS);
    free(x);
    gsl_rng_free(r);
}
