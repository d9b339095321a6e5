/* The scalar numerics every mfengine kernel shares: exponentials, log(1 + e^x), the sigmoid and
 * its logarithm, logit, logaddexp, log(1 - e^{-x}), the binary entropy from a logit, the log of
 * a factorised average of e^{aS} for a {0,1} unit, and the standard normal's density and
 * distribution function.  Use these instead of per-family copies.
 *
 * Plain C, no Python; every function is static inline (Cython calls cost nothing, and loops
 * over them vectorise where their bodies allow).  Each is accurate to a few ulps wherever its
 * result is a normal double (where it is subnormal, to a few units of the smallest one, as
 * for exp; mf_sigmoid and mf_sig_u excepted, see there), returns the right limit (0, 1,
 * +-inf) where the exact value is one, and propagates NaN; tests/sbn/test_numerics.py compares
 * each with long-double references. */
#ifndef MF_NUMERICS_H
#define MF_NUMERICS_H

#include <math.h>
#include "mf_exp.h"

/* e^x for x <= 0 (an x > 0 is taken as 0), from the vectorisable mf_exp_parts: within 2 ulp
 * on [-708, 0]; below, subnormal or 0 as e^x is (by squaring e^{x/2}). */
static inline double mf_exp_neg(double x)
{
    double num, den;
    if (x < -708.0) {
        if (x < -746.0)
            return 0.0;                     /* e^x < 2^-1076 rounds to 0 */
        mf_exp_parts(0.5 * x, &num, &den);
        double h = num / den;
        return h * h;
    }
    mf_exp_parts(x, &num, &den);
    return num / den;
}

/* log(1 + exp(x)), piecewise so that it is accurate for every finite x (scikit-learn's _loss
 * split): exp(x) below -37, log1p(exp(x)) to 18, x + exp(-x) to 33.3, x beyond. */
static inline double mf_log1pexp(double x)
{
    if (x <= -37.0) return exp(x);
    if (x <= 18.0) return log1p(exp(x));
    if (x <= 33.3) return x + exp(-x);
    return x;
}

/* 1 / (1 + exp(-x)) without overflow for any x; one division.  Within 4 ulp for x >= -708;
 * below, e^-708 ~ 3.3e-308 (mf_exp_parts' floor: an absolute error below 3.4e-308, harmless
 * where the result is added or multiplied; take logs with mf_log_sigmoid instead). */
static inline double mf_sigmoid(double x)
{
    double num, den;    /* e^{-|x|} = num / den */
    mf_exp_parts(-fabs(x), &num, &den);
    return (x >= 0.0 ? den : num) / (den + num);
}

/* sigmoid(a) and u = 1 + e^{-|a|} (so that log(1 + e^a) = max(a, 0) + log u), from one exp
 * and one division (sigmoid as mf_sigmoid's, with its floor of e^-708 below a = -708). */
static inline void mf_sig_u(double a, double *sig, double *u)
{
    double num, den;    /* e^{-|a|} = num / den */
    mf_exp_parts(-fabs(a), &num, &den);
    double dn = den + num;
    double r = 1.0 / (den * dn);
    *sig = (a >= 0.0 ? den : num) * den * r;
    *u = dn * dn * r;
}

/* log(sigmoid(x)) = -log(1 + e^{-x}), accurate for every x (x itself below -33.3). */
static inline double mf_log_sigmoid(double x)
{
    return -mf_log1pexp(-x);
}

/* logit(p) = log(p / (1 - p)) for p in [0, 1]: -inf at 0, +inf at 1. */
static inline double mf_logit(double p)
{
    return log(p) - log1p(-p);
}

/* log(e^a + e^b) without overflow; -inf is the identity (logaddexp(-inf, b) = b), so that
 * both -inf give -inf rather than NaN. */
static inline double mf_logaddexp(double a, double b)
{
    if (a == -INFINITY) return b;
    if (b == -INFINITY) return a;
    if (a == b) return a + 0.69314718055994530942;           /* also +inf, +inf */
    double hi = a > b ? a : b, lo = a > b ? b : a;
    return hi + log1p(exp(lo - hi));
}

/* log(1 - e^{-x}) for x >= 0 (Maechler's split at log 2): -inf at 0, -e^{-x} for large x. */
static inline double mf_log1mexp(double x)
{
    return x <= 0.69314718055994530942 ? log(-expm1(-x)) : log1p(-exp(-x));
}

/* The binary entropy -p log p - (1 - p) log(1 - p) of p = sigmoid(t), from t: exact near
 * p = 0 and 1 where computing p first would lose it.  With a = -|t| (H(t) = H(-t)),
 * H = log(1 + e^a) - a sigmoid(a), two positive terms; below a = -40 that is e^a (1 - a) to
 * within a relative e^a, computed as e^{a + 64} (1 - a) e^{-64} (a + 64 is exact) so that a
 * subnormal result is rounded once. */
static inline double mf_entropy_logit(double t)
{
    double a = -fabs(t);
    if (a < -40.0)
        return exp(a + 64.0) * (1.0 - a) * 1.6038108905486378e-28;    /* e^-64 */
    return mf_log1pexp(a) - mf_sigmoid(a) * a;
}

/* log(1 - p + p e^x) for p in [0, 1] and any x: the log of the average of e^{xS} over a {0,1}
 * unit S with mean p (the factorised averages of mean-field bounds).  Each branch avoids
 * cancellation: log1p(p (e^x - 1)) while that argument is above -1/2 and finite; below,
 * log((1 - p) + p e^x); for x > 709, log1p(p e^x), or x + log p once p e^x overflows. */
static inline double mf_log_mix_exp(double p, double x)
{
    if (x <= 0.0) {
        double y = p * expm1(x);                     /* in [-1, 0] */
        return y > -0.5 ? log1p(y) : log((1.0 - p) + p * exp(x));
    }
    if (x <= 709.0)
        return log1p(p * expm1(x));
    double h = exp(0.5 * x), y = p * h * h;          /* p e^x: e^{-x} < 1e-307 is negligible */
    return y < HUGE_VAL ? log1p(y) : x + log(p);
}

/* The standard normal density 1 / sqrt(2 pi) e^{-t^2 / 2}.  t^2 is formed exactly as
 * hi + lo (Dekker's product), so that the rounding of t^2, which the exp would magnify by
 * t^2 / 2 (360 ulps at |t| = 38), does not enter: a few ulps wherever the result is normal. */
static inline double mf_norm_pdf(double t)
{
    double c = 134217729.0 * t;             /* 2^27 + 1: split t into two 26-bit halves */
    double th = c - (c - t), tl = t - th;
    double hi = t * t;
    double lo = ((th * th - hi) + 2.0 * th * tl) + tl * tl;
    if (!(hi < 1e300))                      /* |t| huge or inf (and NaN): the limit, 0 or NaN */
        return 0.39894228040143267794 * exp(-0.5 * hi);
    return 0.39894228040143267794 * exp(-0.5 * hi) * (1.0 - 0.5 * lo);
}

/* The standard normal distribution function Phi(t) = erfc(-t / sqrt 2) / 2 (as
 * scipy.special.ndtr: in the far left tail the rounding of t / sqrt 2 costs a relative error
 * of about t^2 eps). */
static inline double mf_norm_cdf(double t)
{
    return 0.5 * erfc(-t * 0.70710678118654752440);      /* 1 / sqrt(2) */
}

/* The standard error reported with a sampled estimate m from K draws: the sampling error se
 * together with the resolution of m itself, (K + 16) u |m| (u = 2^-52).  A self-normalised
 * estimate is a ratio of K-term sums of positive terms, each term from the few-ulp numerics
 * above: K u bounds the relative rounding of such a sum (recursive summation), 16 u allows for
 * the terms.  Below that resolution two runs may differ by rounding alone, and where the
 * weights sit on one draw the sampling error alone can be smaller than an ulp of m. */
#define MF_ULP 2.220446049250313080847e-16
static inline double mf_se_with_resolution(double se, double m, double K)
{
    return hypot(se, (K + 16.0) * MF_ULP * m);
}

#endif
