/* Lane-wise loops of the Plefka kernel (mfengine/sbn/_plefka.pyx) for its blocked dense path,
 * and the short dot products of its per-pattern quasi-Newton recursion.
 *
 * The blocked path evaluates a block of m patterns of one layered sigmoid net at once, its
 * arrays stored unit-major with the patterns contiguous (row k of an n x m array holds unit
 * k of every pattern, one "lane" per pattern).  The functions below run along one such row:
 * every lane's arithmetic is the same whatever the other lanes hold, so a pattern's answer
 * does not depend on the block it shares.  Notation as in the kernel's docstring: t = logit(u),
 * v = u (1 - u), c = 1 - 2u, Mbar the mean input of a unit, V its input variance.  Plain C
 * (pointers and sizes, no Python); mirrored in the kernel by `cdef extern from "mf_plefka.h"`.
 *
 * The loops themselves are in mf_plefka_lanes.c (compiled twice where the build has run-time
 * dispatch, baseline x86-64 and x86-64-v3, with the same bits: the build contracts no
 * multiply-add).  The dot products stay here, static inline: the recursion calls them on a
 * few dozen doubles at a time, where a call would cost more than the arithmetic. */
#ifndef MF_PLEFKA_H
#define MF_PLEFKA_H

#ifdef __cplusplus
extern "C" {
#endif

/* Private to the kernel's extension module: not exported from it. */
#if defined(__GNUC__)
#define MF_PLEFKA_INTERNAL __attribute__((visibility("hidden")))
#else
#define MF_PLEFKA_INTERNAL
#endif

/* The head of the solver's iteration over nf free units: the fixed-point image
 * x = t - g clipped to [-tmax, tmax], the step dt = x - t, q = v g (dG/dt), and
 * max |sigmoid(x) - u| in *res_out.  Bit 1 of the result: some x was clipped (with sat_ok,
 * not counting an x beyond the bound that t already sits on); bit 2: some x was not finite. */
MF_PLEFKA_INTERNAL int mfp_image(long nf, double tmax, int sat_ok, const double *t,
                                 const double *g, const double *u, const double *v, double *dt,
                                 double *q, double *res_out);

/* One free unit's row over m lanes: logits T -> U = u, V = u (1 - u), C = 1 - 2u, and
 * negH += u t - log(1 + e^t) (the entropy part of G). */
MF_PLEFKA_INTERNAL void mfp_means_free(long m, const double *T, double *U, double *V,
                                       double *C, double *negH);

/* A row with fixed lanes (UF not NaN there; every lane when all_fixed) and free ones: the
 * fixed lanes take u = UF, v = 0, c = 1 - 2 UF and add nothing to negH.  H is m doubles of
 * scratch. */
MF_PLEFKA_INTERNAL void mfp_means_mixed(long m, int all_fixed, const double *T,
                                        const double *UF, double *U, double *V, double *C,
                                        double *negH, double *H);

/* Sigmoid unit i over m lanes at Mbar = M, mean U and V_i = Vi: F += -g0 - 1/2 g2 V_i (order
 * 12); UB = dF/du_i (partial), MB = dF/dMbar_i, VB = dF/dV_i. */
MF_PLEFKA_INTERNAL void mfp_sig_coef12(long m, const double *M, const double *U,
                                       const double *Vi, double *F, double *UB, double *MB,
                                       double *VB);

/* The same for order 11: F += -g0; UB, MB. */
MF_PLEFKA_INTERNAL void mfp_sig_coef11(long m, const double *M, const double *U, double *F,
                                       double *UB, double *MB);

/* dG/du of one unit's row over m lanes from the reverse pass (GUM = sum over the children of
 * w dF/dMbar, VBAR = dF/dv), plus t, the entropy's derivative. */
MF_PLEFKA_INTERNAL void mfp_gu_row(long m, int order, const double *UB, const double *VBAR,
                                   const double *C, const double *GUM, const double *T,
                                   double *GU);

/* sum_i a[i] b[i] in four interleaved partial sums, ((s0 + s1) + (s2 + s3)): one fixed order,
 * but four chains of additions instead of one, so that the quasi-Newton recursion's short dot
 * products are not bound by the latency of a single chain. */
static inline double mfp_dot(long n, const double *restrict a, const double *restrict b)
{
    double s0 = 0.0, s1 = 0.0, s2 = 0.0, s3 = 0.0;
    long i = 0;
    for (; i + 4 <= n; i += 4) {
        s0 += a[i] * b[i];
        s1 += a[i + 1] * b[i + 1];
        s2 += a[i + 2] * b[i + 2];
        s3 += a[i + 3] * b[i + 3];
    }
    for (; i < n; i++)
        s0 += a[i] * b[i];
    return (s0 + s1) + (s2 + s3);
}

/* sum_i a[i] b[i] c[i], in the same four partial sums. */
static inline double mfp_dot3(long n, const double *restrict a, const double *restrict b,
                              const double *restrict c)
{
    double s0 = 0.0, s1 = 0.0, s2 = 0.0, s3 = 0.0;
    long i = 0;
    for (; i + 4 <= n; i += 4) {
        s0 += a[i] * b[i] * c[i];
        s1 += a[i + 1] * b[i + 1] * c[i + 1];
        s2 += a[i + 2] * b[i + 2] * c[i + 2];
        s3 += a[i + 3] * b[i + 3] * c[i + 3];
    }
    for (; i < n; i++)
        s0 += a[i] * b[i] * c[i];
    return (s0 + s1) + (s2 + s3);
}

#ifdef __cplusplus
}
#endif

#endif
