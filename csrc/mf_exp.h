/* Vectorisable exponential for the hot loops.
 *
 * mf_exp_parts(x, &num, &den) splits exp(x), x <= 0, as num / den so that a caller that
 * divides anyway (a sigmoid e / (1 + e) = num / (den + num)) pays for one division, not two.
 * num / den has a relative error of about 2 ulp at most against long double exp over
 * [-708, 0] (2.0 ulp measured with SSE2, 1.8 with AVX2+FMA); tests/test_numerics.py checks it
 * directly (mf_exp_neg of mf_numerics.h), through the kernel's sigmoid against scipy's expit,
 * and through the bound against a NumPy evaluation.
 *
 * Only arithmetic and integer bit operations, so GCC vectorises loops that call it (SSE2 by
 * default, AVX2+FMA in the target_clones variant) with no dependence on the C library's vector
 * math entry points.  Range reduction x = k ln2 + r, |r| <= ln2 / 2; exp(r) by the [6/6] Pade
 * approximant (E + O) / (E - O) with E, O the even and odd parts in r (truncation error
 * below 1e-18 on that interval), a short dependency chain; 2^(k + 60) assembled in the
 * exponent bits and the numerator scaled by 2^-60 at the end, so that results below 2^-1022
 * (x < -708) come out subnormal, or 0 below -745.1, as exp's do, by one rounding.  Inputs
 * below -746 are taken as -746 (whose exp rounds to 0 too); inputs above 0 as 0.
 */
#ifndef MF_EXP_H
#define MF_EXP_H

#include <stdint.h>
#include <string.h>

static inline double mf__as_double(uint64_t u) { double d; memcpy(&d, &u, sizeof d); return d; }
static inline uint64_t mf__as_u64(double d) { uint64_t u; memcpy(&u, &d, sizeof u); return u; }

static inline void mf_exp_parts(double x, double *num, double *den)
{
    const double log2e = 1.4426950408889634074;
    const double ln2_hi = 6.93147180369123816490e-01;
    const double ln2_lo = 1.90821492927058770002e-10;
    const double shifter = 6755399441055744.0; /* 0x1.8p52: rounds to an integer in the low bits */
    x = x < -746.0 ? -746.0 : x;
    x = x > 0.0 ? 0.0 : x;
    double kd = x * log2e + shifter;
    uint64_t ki = mf__as_u64(kd);
    kd -= shifter;
    double r = (x - kd * ln2_hi) - kd * ln2_lo;
    double r2 = r * r;
    double E = 1.0 + r2 * (5.0 / 44.0 + r2 * (1.0 / 792.0 + r2 * (1.0 / 665280.0)));
    double O = r * (0.5 + r2 * (1.0 / 66.0 + r2 * (1.0 / 15840.0)));
    /* k in [-1077, 0]: the low bits of ki hold k + 2^51, and (k + 60) + 1023 in [6, 1083]
     * lands in the exponent: 2^(k + 60) is normal.  The factor 2^-60 is exact for results of
     * 2^-1022 and more; below, the one rounding gives the subnormal result. */
    double scale = mf__as_double((ki + (1023u + 60u)) << 52);
    *num = scale * (E + O) * 0x1p-60;
    *den = E - O;
}

#endif
