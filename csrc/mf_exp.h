/* Vectorisable exponential for the hot loops.
 *
 * mf_exp_nonpos(x) computes exp(x) for x <= 0 with a relative error below 2 ulp (checked
 * against libm in tests/test_numerics.py).  It uses only arithmetic and integer bit operations,
 * so GCC vectorises loops that call it (SSE2 by default, AVX2 in the target_clones variant)
 * without depending on the C library's vector math entry points.
 *
 * Range reduction: x = k ln2 + r with |r| <= ln2/2, exp(r) by a degree-12 Taylor polynomial
 * (truncation error < 2e-17 on that interval), 2^k assembled in the exponent bits.
 * Inputs below -708 are clamped (exp(-708) ~ 3e-308), which is harmless wherever it is used:
 * the result is only ever added to 1 or multiplied by a bounded factor.
 */
#ifndef MF_EXP_H
#define MF_EXP_H

#include <stdint.h>
#include <string.h>

static inline double mf__as_double(uint64_t u) { double d; memcpy(&d, &u, sizeof d); return d; }
static inline uint64_t mf__as_u64(double d) { uint64_t u; memcpy(&u, &d, sizeof u); return u; }

static inline double mf_exp_nonpos(double x)
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
    double p = 1.0 / 479001600.0;
    p = p * r + 1.0 / 39916800.0;
    p = p * r + 1.0 / 3628800.0;
    p = p * r + 1.0 / 362880.0;
    p = p * r + 1.0 / 40320.0;
    p = p * r + 1.0 / 5040.0;
    p = p * r + 1.0 / 720.0;
    p = p * r + 1.0 / 120.0;
    p = p * r + 1.0 / 24.0;
    p = p * r + 1.0 / 6.0;
    p = p * r + 0.5;
    p = p * r + 1.0;
    p = p * r + 1.0;
    /* k in [-1022, 0]: the low bits of ki hold k + 2^51; (k + 1023) lands in the exponent. */
    double scale = mf__as_double((ki + 1023u) << 52);
    return p * scale;
}

#endif
