/* Scalar numerics shared by the kernels: stable log(1 + e^x) and the sigmoid.
 * Plain C, no Python; every function is static inline so Cython calls cost nothing. */
#ifndef MF_NUMERICS_H
#define MF_NUMERICS_H

#include <math.h>
#include "mf_exp.h"

/* log(1 + exp(x)), piecewise so that it is accurate for every finite x. */
static inline double mf_log1pexp(double x)
{
    if (x <= -37.0) return exp(x);
    if (x <= 18.0) return log1p(exp(x));
    if (x <= 33.3) return x + exp(-x);
    return x;
}

/* 1 / (1 + exp(-x)) without overflow for any x; one division. */
static inline double mf_sigmoid(double x)
{
    double num, den;    /* e^{-|x|} = num / den */
    mf_exp_parts(-fabs(x), &num, &den);
    return (x >= 0.0 ? den : num) / (den + num);
}

/* sigmoid(a) and u = 1 + e^{-|a|} (so that log(1 + e^a) = max(a, 0) + log u), from one exp
 * and one division. */
static inline void mf_sig_u(double a, double *sig, double *u)
{
    double num, den;    /* e^{-|a|} = num / den */
    mf_exp_parts(-fabs(a), &num, &den);
    double dn = den + num;
    double r = 1.0 / (den * dn);
    *sig = (a >= 0.0 ? den : num) * den * r;
    *u = dn * dn * r;
}

#endif
