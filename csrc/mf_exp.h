/* Vectorisable exponential for the hot loops.
 *
 * mf_exp_parts(x, &num, &den) splits exp(x), x <= 0, as num / den so that a caller that
 * divides anyway (a sigmoid e / (1 + e) = num / (den + num)) pays for one division, not two.
 * num / den has a relative error of about 2 ulp at most against long double exp over
 * [-708, 0] (2.0 ulp measured with SSE2, 1.8 with AVX2+FMA); tests/sbn/test_numerics.py checks it
 * directly (mf_exp_neg of mf_numerics.h), through the kernel's sigmoid against scipy's expit,
 * and through the bound against a NumPy evaluation.
 *
 * Only arithmetic and integer bit operations, so GCC vectorises loops that call it (SSE2 by
 * default, AVX2+FMA in the target_clones variant) with no dependence on the C library's vector
 * math entry points.  Range reduction x = k ln2 + r, |r| <= ln2 / 2; exp(r) by the [6/6] Pade
 * approximant (E + O) / (E - O) with E, O the even and odd parts in r (truncation error
 * below 1e-18 on that interval), a short dependency chain; 2^k assembled in the exponent bits.
 * Inputs below -708 are taken as -708 (e^-708 ~ 3.3e-308, the floor of the result; an exact
 * subnormal result would cost the hot loops a multiplication, ~1.5% of the Gaussian solver):
 * the kernels only ever add the result to a number of order one or multiply it by a bounded
 * factor, and mf_exp_neg (mf_numerics.h) gives the exact tail.  Inputs above 0 are taken as 0.
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
    x = x < -708.0 ? -708.0 : x;
    x = x > 0.0 ? 0.0 : x;
    double kd = x * log2e + shifter;
    uint64_t ki = mf__as_u64(kd);
    kd -= shifter;
    double r = (x - kd * ln2_hi) - kd * ln2_lo;
    double r2 = r * r;
    double E = 1.0 + r2 * (5.0 / 44.0 + r2 * (1.0 / 792.0 + r2 * (1.0 / 665280.0)));
    double O = r * (0.5 + r2 * (1.0 / 66.0 + r2 * (1.0 / 15840.0)));
    /* k in [-1022, 0]: the low bits of ki hold k + 2^51; (k + 1023) lands in the exponent. */
    double scale = mf__as_double((ki + 1023u) << 52);
    *num = scale * (E + O);
    *den = E - O;
}

#endif
