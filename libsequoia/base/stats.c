#include "libsequoia/base/stats.h"

#include <math.h>
#include <stdlib.h>

#include <gsl/gsl_cdf.h>
#include <gsl/gsl_errno.h>

#include "libsequoia/base/error.h"

sq_chisq sq_chisq_gof(const double *counts, const double *probs, int nbins, double min_expected)
{
    sq_chisq r = {0};
    double n = 0.0, psum = 0.0;
    for (int i = 0; i < nbins; i++) {
        n += counts[i];
        psum += probs[i];
    }
    r.n = n;
    /* Bins: the ones kept (expected count >= min_expected), then a pool of the small ones plus
     * the implicit remainder. Two passes over the input instead of a copy of the bins, so that
     * nothing is allocated (docs/design.md §10, out of memory); the sums run in the same order. */
    int m = 0, s = -1;   /* bins kept; the kept bin with the smallest expected count */
    double pool_e = psum < 1.0 ? (1.0 - psum) * n : 0.0, pool_o = 0.0;
    for (int i = 0; i < nbins; i++) {
        double e = probs[i] * n;
        if (probs[i] <= 0.0 && counts[i] > 0.0) {
            r.stat = INFINITY;
            r.p_value = 0.0;
            r.bins = nbins;
            r.df = nbins - 1;
            return r;
        }
        if (e >= min_expected) {
            if (s < 0 || e < probs[s] * n)
                s = i;
            m++;
        } else {
            pool_e += e;
            pool_o += counts[i];
        }
    }
    /* The pool is a bin of its own when it is large enough (or nothing else is left), else it
     * joins the kept bin with the smallest expected count. */
    int pool_alone = pool_e >= min_expected || m == 0;
    int pool_joins = !pool_alone && (pool_e > 0.0 || pool_o > 0.0);
    double x2 = 0.0;
    for (int i = 0; i < nbins; i++) {
        double e = probs[i] * n, o = counts[i];
        if (e < min_expected)
            continue;
        if (pool_joins && i == s) {
            e += pool_e;
            o += pool_o;
        }
        if (e > 0.0)
            x2 += (o - e) * (o - e) / e;
        else if (o > 0.0)
            x2 = INFINITY;
    }
    if (pool_alone) {
        if (pool_e > 0.0)
            x2 += (pool_o - pool_e) * (pool_o - pool_e) / pool_e;
        else if (pool_o > 0.0)
            x2 = INFINITY;
        m++;
    }
    r.stat = x2;
    r.bins = m;
    r.df = m - 1;
    if (r.df < 1)
        r.p_value = 1.0;
    else if (!isfinite(x2))
        r.p_value = 0.0;
    else
        r.p_value = gsl_cdf_chisq_Q(x2, (double)r.df);
    return r;
}

static double batch_mean(const double *x, int per)
{
    double t = 0.0;
    for (int i = 0; i < per; i++)
        t += x[i];
    return t / per;
}

sq_mean_ci sq_mean_ci_batch(const double *x, int n)
{
    sq_mean_ci r = {0};
    r.n = n;
    if (n <= 0) {
        r.mean = r.stddev = r.stderr_ = NAN;
        r.lo = -INFINITY;
        r.hi = INFINITY;
        return r;
    }
    double s = 0.0;
    for (int i = 0; i < n; i++)
        s += x[i];
    r.mean = s / n;
    double ss = 0.0;
    for (int i = 0; i < n; i++)
        ss += (x[i] - r.mean) * (x[i] - r.mean);
    r.stddev = n > 1 ? sqrt(ss / (n - 1)) : 0.0;
    if (n < 4) {
        r.stderr_ = INFINITY;
        r.lo = -INFINITY;
        r.hi = INFINITY;
        r.batches = n;
        return r;
    }
    int b = (int)floor(sqrt((double)n));
    if (b < 2)
        b = 2;
    int per = n / b;   /* the first n % b values are left out of the batches */
    int skip = n - per * b;
    /* Batch means computed twice (mean, then spread) rather than stored: nothing is allocated
     * (docs/design.md §10, out of memory), and the sums run in the same order. */
    double bm = 0.0, bss = 0.0;
    for (int j = 0; j < b; j++)
        bm += batch_mean(x + skip + j * per, per);
    bm /= b;
    for (int j = 0; j < b; j++) {
        double d = batch_mean(x + skip + j * per, per) - bm;
        bss += d * d;
    }
    double var_batch = bss / (b - 1);             /* variance of a batch mean      */
    r.stderr_ = sqrt(var_batch / b);
    /* Never report less spread than the independent-values formula would. */
    double se_iid = r.stddev / sqrt((double)n);
    if (r.stderr_ < se_iid)
        r.stderr_ = se_iid;
    gsl_set_error_handler_off();
    double t = gsl_cdf_tdist_Pinv(0.975, (double)(b - 1));
    r.batches = b;
    r.lo = r.mean - t * r.stderr_;
    r.hi = r.mean + t * r.stderr_;
    return r;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double sq_quantile(double *v, int n, double p)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    if (n == 1)
        return v[0];
    double pos = p * (n - 1);
    int lo = (int)floor(pos);
    if (lo >= n - 1)
        return v[n - 1];
    return v[lo] + (pos - lo) * (v[lo + 1] - v[lo]);
}
