/* Statistics for validating a run: a chi-square goodness-of-fit test against exact
 * probabilities, a mean with a confidence interval for correlated series, and quantiles of
 * timings. */
#ifndef SQ_BASE_STATS_H
#define SQ_BASE_STATS_H

typedef struct sq_chisq {
    double stat;      /* Pearson's X^2                                            */
    int    df;        /* degrees of freedom: bins after pooling - 1               */
    int    bins;      /* bins after pooling                                       */
    double p_value;   /* P(X^2_df >= stat); 1 when df = 0                          */
    double n;         /* observations                                             */
} sq_chisq;

/* Goodness of fit of `counts` (nbins observations) to the exact probabilities `probs`
 * (summing to 1 over the bins, or less: the remainder is an implicit last bin with no
 * observations expected beyond it). Bins whose expected count is below min_expected (5 is the
 * textbook rule) are pooled into one bin, which is kept if its expected count reaches
 * min_expected, otherwise merged into the smallest remaining bin. An observation in a bin of
 * probability 0 gives p_value 0. */
sq_chisq sq_chisq_gof(const double *counts, const double *probs, int nbins, double min_expected);

typedef struct sq_mean_ci {
    double mean;
    double stddev;    /* of the individual values                                  */
    double stderr_;   /* of the mean, from batch means                             */
    double lo, hi;    /* 95% interval: mean -/+ t_{0.975, batches-1} * stderr_      */
    int    n;
    int    batches;   /* batch means over consecutive values (sqrt(n) batches)     */
} sq_mean_ci;

/* Mean of x[0..n) and its 95% confidence interval. Consecutive values may be correlated (the
 * steps of one generation), so the standard error comes from the means of about sqrt(n)
 * consecutive batches; with fewer than 4 values the interval is infinite. */
sq_mean_ci sq_mean_ci_batch(const double *x, int n);

/* The p-th quantile (0..1) of v[0..n), n >= 1, by linear interpolation between the order
 * statistics (p = 0.5: the median); sorts v. */
double sq_quantile(double *v, int n, double p);

#endif
