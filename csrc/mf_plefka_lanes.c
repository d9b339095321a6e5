/* The lane-wise loops of the Plefka kernel's blocked dense path and the head of its
 * per-pattern iteration (declared, with what each computes, in mf_plefka.h): the means of a
 * row of logits, the sigmoid units' terms of G11 / G12 and their partial derivatives, the
 * gradient of a row, and the fixed-point image.  Written so that GCC vectorises them across
 * the lanes: no library call in the loops (mf_exp.h's exponential, the series below for the
 * logarithm), selects instead of branches. */
#include <math.h>
#include "mf_exp.h"
#include "mf_plefka.h"

/* Run-time dispatch (as csrc/mf_sbn.c): a baseline x86-64 body and an x86-64-v3 one, chosen by
 * the loader; off for -march=native builds and other compilers. */
#if defined(MF_TARGET_CLONES) && defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define MFP_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define MFP_CLONES
#endif

/* log(1 + e) for e in [0, 1] without a library call (vectorisable): 2 atanh(z) with
 * z = e / (2 + e), or ln 2 + 2 atanh((e - 1) / (e + 3)) above sqrt(2) - 1, so |z| <= 0.1716
 * and the odd series to z^21 is exact to about 1e-18 relative; big is 1 in the second case. */
static inline double mfp_log1p_z(double z, double big)
{
    double z2 = z * z;
    double p = 1.0 / 21.0;
    p = p * z2 + 1.0 / 19.0;
    p = p * z2 + 1.0 / 17.0;
    p = p * z2 + 1.0 / 15.0;
    p = p * z2 + 1.0 / 13.0;
    p = p * z2 + 1.0 / 11.0;
    p = p * z2 + 1.0 / 9.0;
    p = p * z2 + 1.0 / 7.0;
    p = p * z2 + 1.0 / 5.0;
    p = p * z2 + 1.0 / 3.0;
    p = p * z2 + 1.0;
    return big * 0.69314718055994530942 + 2.0 * z * p;
}

/* log(1 + num / den) for 0 <= num <= den (one division): with num / den = e^-|x| from
 * mf_exp_parts, the log(1 + e^-|x|) of a softplus. */
static inline double mfp_log1p_nd(double num, double den)
{
    double big = num > 0.41421356237309503 * den ? 1.0 : 0.0;
    return mfp_log1p_z((num - big * den) / (num + (2.0 + big) * den), big);
}

MFP_CLONES int mfp_image(long nf, double tmax, int sat_ok, const double *restrict t,
                         const double *restrict g, const double *restrict u,
                         const double *restrict v, double *restrict dt, double *restrict q,
                         double *res_out)
{
    long i;
    double res = 0.0;
    int clipped = 0, bad = 0;
#pragma omp simd reduction(max:res) reduction(|:clipped) reduction(|:bad)
    for (i = 0; i < nf; i++) {
        double x = t[i] - g[i], num, den;
        bad |= !(fabs(x) < INFINITY);
        clipped |= ((x > tmax) & !(sat_ok & (t[i] >= tmax)))
                   | ((x < -tmax) & !(sat_ok & (t[i] <= -tmax)));
        x = x > tmax ? tmax : (x < -tmax ? -tmax : x);
        dt[i] = x - t[i];
        mf_exp_parts(-fabs(x), &num, &den);
        double sg = (x >= 0.0 ? den : num) / (den + num);
        double d = fabs(sg - u[i]);
        res = d > res ? d : res;
        q[i] = v[i] * g[i];
    }
    *res_out = res;
    return clipped | (bad << 1);
}

MFP_CLONES void mfp_means_free(long m, const double *restrict T, double *restrict U,
                               double *restrict V, double *restrict C, double *restrict negH)
{
    long l;
    for (l = 0; l < m; l++) {
        double t = T[l], num, den;
        mf_exp_parts(-fabs(t), &num, &den);
        double dd = 1.0 / (den + num);
        double s0 = den * dd, s1 = num * dd;
        double s = t >= 0.0 ? s0 : s1, sm = t >= 0.0 ? s1 : s0;
        double L = (t > 0.0 ? t : 0.0) + mfp_log1p_nd(num, den);
        U[l] = s;
        V[l] = s * sm;
        C[l] = sm - s;
        negH[l] += s * t - L;
    }
}

/* Not cloned: the free lanes go through mfp_means_free's dispatched body, the rest is copies. */
void mfp_means_mixed(long m, int all_fixed, const double *T, const double *UF, double *U,
                     double *V, double *C, double *negH, double *H)
{
    long l;
    if (!all_fixed) {
        for (l = 0; l < m; l++)
            H[l] = 0.0;
        mfp_means_free(m, T, U, V, C, H);
    }
    for (l = 0; l < m; l++) {
        double uf = UF[l];
        if (uf == uf) {
            U[l] = uf;
            V[l] = 0.0;
            C[l] = 1.0 - 2.0 * uf;
        } else {
            negH[l] += H[l];
        }
    }
}

MFP_CLONES void mfp_sig_coef12(long m, const double *restrict M, const double *restrict U,
                               const double *restrict Vi, double *restrict F,
                               double *restrict UB, double *restrict MB, double *restrict VB)
{
    long l;
    for (l = 0; l < m; l++) {
        double x = M[l], u = U[l], num, den;
        mf_exp_parts(-fabs(x), &num, &den);
        double dd = 1.0 / (den + num);
        double s0 = den * dd, s1 = num * dd;
        double s = x >= 0.0 ? s0 : s1, q = x >= 0.0 ? s1 : s0;
        double L = (x > 0.0 ? x : 0.0) + mfp_log1p_nd(num, den);
        double g2 = -s * q;
        double vi = Vi[l];
        UB[l] = -x;
        VB[l] = -0.5 * g2;
        MB[l] = s - u - 0.5 * (g2 * (q - s)) * vi;
        F[l] += (L - u * x) - 0.5 * g2 * vi;
    }
}

MFP_CLONES void mfp_sig_coef11(long m, const double *restrict M, const double *restrict U,
                               double *restrict F, double *restrict UB, double *restrict MB)
{
    long l;
    for (l = 0; l < m; l++) {
        double x = M[l], u = U[l], num, den;
        mf_exp_parts(-fabs(x), &num, &den);
        double dd = 1.0 / (den + num);
        double s = x >= 0.0 ? den * dd : num * dd;
        double L = (x > 0.0 ? x : 0.0) + mfp_log1p_nd(num, den);
        UB[l] = -x;
        MB[l] = s - u;
        F[l] += L - u * x;
    }
}

MFP_CLONES void mfp_gu_row(long m, int order, const double *restrict UB,
                           const double *restrict VBAR, const double *restrict C,
                           const double *restrict GUM, const double *restrict T,
                           double *restrict GU)
{
    long l;
    if (order >= 12)
        for (l = 0; l < m; l++)
            GU[l] = UB[l] + VBAR[l] * C[l] + GUM[l] + T[l];
    else
        for (l = 0; l < m; l++)
            GU[l] = UB[l] + GUM[l] + T[l];
}
