/* Small dense matrix products for the kernels, so that they need no external BLAS.
 *
 *   mf_gemm_nn(nr, nl, k, A, lda, B, ldb, C, ldc):  C[i][l] += sum_p A[i][p] B[p][l]
 *   mf_gemm_tn(nr, nl, k, A, lda, B, ldb, C, ldc):  C[i][l] += sum_p A[p][i] B[p][l]
 *   mf_gemm_nn_set(nr, nl, k, A, lda, B, ldb, C, ldc):  C[i][l] = sum_p A[i][p] B[p][l]
 *
 * Row-major, X[i][j] = X[i * ldx + j]; i < nr, l < nl, p < k.  The lane index l (in the
 * kernels: the patterns of a block) is the contiguous, vectorised dimension.  C must not
 * overlap A or B.
 *
 * Every element of C is summed in one fixed order, C + A_0 B_0 + A_1 B_1 + ... in increasing
 * p (mf_gemm_nn_set: 0 + A_0 B_0 + ..., the bits of zeroing C first), by every code path
 * (full tiles and edges alike; the build contracts no products into FMAs, -std=c99), so a result depends neither on the shapes around it (which lanes share a
 * block, where the tiles fall) nor on threads: these are plain sequential loops that start
 * no threads of their own, unlike an external BLAS inside the kernels' OpenMP regions.
 *
 * Cache blocking: k is cut in panels of MF_GEMM_KC, and within a panel a strip of
 * MF_GEMM_NL lanes of B (KC x NL doubles, 16 KB) is reused by every tile of MF_GEMM_MR rows
 * of C, whose MR x NL sums stay in registers across the panel.  The loops are plain C, the
 * lane loops under `omp simd` (-fopenmp or -fopenmp-simd, as setup.py builds):
 * SSE2 by default, AVX2 in the x86-64-v3 clone when MF_TARGET_CLONES is set (as for mf_exp.h's
 * callers).  Measured on this machine (100 x 36 times 36 x 64, the layered benchmark's largest
 * product): ~18 GFLOP/s with SSE2, ~40 with AVX2, one core.
 */
#ifndef MF_GEMM_H
#define MF_GEMM_H

#include <stddef.h>

#if defined(MF_TARGET_CLONES) && defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define MF_GEMM_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define MF_GEMM_CLONES
#endif

#if defined(__GNUC__)
#define MF_GEMM_UNUSED __attribute__((unused))
/* the helpers must be inlined into each clone to be compiled for its target */
#define MF_GEMM_INLINE static inline __attribute__((always_inline))
#else
#define MF_GEMM_UNUSED
#define MF_GEMM_INLINE static inline
#endif

#define MF_GEMM_MR 4     /* rows of C per tile (mf_gemm__tile is written for 4) */
#define MF_GEMM_NL 8     /* lanes of C per tile */
#define MF_GEMM_KC 256   /* length of a panel of the inner dimension */

/* One MR x NL tile over kc terms: A(r, p) = a[r * ars + p * aps]; the sums start from C, or
 * from 0 with zero.  (Written with the lane loop innermost under `omp simd`: without it GCC
 * vectorises across p, with gathers.) */
MF_GEMM_INLINE void mf_gemm__tile(ptrdiff_t kc, const double *restrict a, ptrdiff_t ars,
                                  ptrdiff_t aps, const double *restrict b, ptrdiff_t ldb,
                                  double *restrict c, ptrdiff_t ldc, int zero)
{
    double c0[MF_GEMM_NL], c1[MF_GEMM_NL], c2[MF_GEMM_NL], c3[MF_GEMM_NL];
    for (int l = 0; l < MF_GEMM_NL; l++) {
        c0[l] = zero ? 0.0 : c[l];
        c1[l] = zero ? 0.0 : c[ldc + l];
        c2[l] = zero ? 0.0 : c[2 * ldc + l];
        c3[l] = zero ? 0.0 : c[3 * ldc + l];
    }
    for (ptrdiff_t p = 0; p < kc; p++) {
        const double *restrict ap = a + p * aps;
        const double *restrict bp = b + p * ldb;
        const double x0 = ap[0], x1 = ap[ars], x2 = ap[2 * ars], x3 = ap[3 * ars];
        #pragma omp simd
        for (int l = 0; l < MF_GEMM_NL; l++) {
            c0[l] += x0 * bp[l];
            c1[l] += x1 * bp[l];
            c2[l] += x2 * bp[l];
            c3[l] += x3 * bp[l];
        }
    }
    for (int l = 0; l < MF_GEMM_NL; l++) {
        c[l] = c0[l];
        c[ldc + l] = c1[l];
        c[2 * ldc + l] = c2[l];
        c[3 * ldc + l] = c3[l];
    }
}

/* One row of NL lanes over kc terms. */
MF_GEMM_INLINE void mf_gemm__row(ptrdiff_t kc, const double *restrict a, ptrdiff_t aps,
                                 const double *restrict b, ptrdiff_t ldb, double *restrict c,
                                 int zero)
{
    double acc[MF_GEMM_NL];
    for (int l = 0; l < MF_GEMM_NL; l++)
        acc[l] = zero ? 0.0 : c[l];
    for (ptrdiff_t p = 0; p < kc; p++) {
        const double ar = a[p * aps];
        const double *restrict bp = b + p * ldb;
        #pragma omp simd
        for (int l = 0; l < MF_GEMM_NL; l++)
            acc[l] += ar * bp[l];
    }
    for (int l = 0; l < MF_GEMM_NL; l++)
        c[l] = acc[l];
}

/* Any rows, nl < NL lanes, over kc terms (the lane edge). */
MF_GEMM_INLINE void mf_gemm__edge(ptrdiff_t nr, ptrdiff_t nl, ptrdiff_t kc,
                                 const double *restrict a, ptrdiff_t ars, ptrdiff_t aps,
                                 const double *restrict b, ptrdiff_t ldb, double *restrict c,
                                 ptrdiff_t ldc, int zero)
{
    for (ptrdiff_t r = 0; r < nr; r++)
        for (ptrdiff_t l = 0; l < nl; l++) {
            double s = zero ? 0.0 : c[r * ldc + l];
            for (ptrdiff_t p = 0; p < kc; p++)
                s += a[r * ars + p * aps] * b[p * ldb + l];
            c[r * ldc + l] = s;
        }
}

/* One panel of kc terms: C += op(A) B, or C = op(A) B with zero (a constant where it is
 * inlined, so that each tile's sums start in registers either way). */
MF_GEMM_INLINE void mf_gemm__panel(ptrdiff_t nr, ptrdiff_t nl, ptrdiff_t kc,
                                  const double *restrict ap, ptrdiff_t ars, ptrdiff_t aps,
                                  const double *restrict bp, ptrdiff_t ldb, double *restrict c,
                                  ptrdiff_t ldc, int zero)
{
    ptrdiff_t l0 = 0;
    for (; l0 + MF_GEMM_NL <= nl; l0 += MF_GEMM_NL) {
        ptrdiff_t r0 = 0;
        for (; r0 + MF_GEMM_MR <= nr; r0 += MF_GEMM_MR)
            mf_gemm__tile(kc, ap + r0 * ars, ars, aps, bp + l0, ldb, c + r0 * ldc + l0, ldc, zero);
        for (; r0 < nr; r0++)
            mf_gemm__row(kc, ap + r0 * ars, aps, bp + l0, ldb, c + r0 * ldc + l0, zero);
    }
    if (l0 < nl)
        mf_gemm__edge(nr, nl - l0, kc, ap, ars, aps, bp + l0, ldb, c + l0, ldc, zero);
}

/* C += op(A) B with A(r, p) = a[r * ars + p * aps]; C = op(A) B with set (k >= 1). */
MF_GEMM_INLINE void mf_gemm__run(ptrdiff_t nr, ptrdiff_t nl, ptrdiff_t k,
                                const double *restrict a, ptrdiff_t ars, ptrdiff_t aps,
                                const double *restrict b, ptrdiff_t ldb, double *restrict c,
                                ptrdiff_t ldc, int set)
{
    for (ptrdiff_t p0 = 0; p0 < k; p0 += MF_GEMM_KC) {
        const ptrdiff_t kc = k - p0 < MF_GEMM_KC ? k - p0 : MF_GEMM_KC;
        if (set && p0 == 0)
            mf_gemm__panel(nr, nl, kc, a, ars, aps, b, ldb, c, ldc, 1);
        else
            mf_gemm__panel(nr, nl, kc, a + p0 * aps, ars, aps, b + p0 * ldb, ldb, c, ldc, 0);
    }
}

/* C[i][l] += sum_p A[i][p] B[p][l]   (A: nr x k, B: k x nl, C: nr x nl, row-major). */
MF_GEMM_CLONES MF_GEMM_UNUSED
static void mf_gemm_nn(ptrdiff_t nr, ptrdiff_t nl, ptrdiff_t k, const double *restrict A,
                       ptrdiff_t lda, const double *restrict B, ptrdiff_t ldb,
                       double *restrict C, ptrdiff_t ldc)
{
    mf_gemm__run(nr, nl, k, A, lda, 1, B, ldb, C, ldc, 0);
}

/* C[i][l] = sum_p A[i][p] B[p][l]   (as mf_gemm_nn on a zeroed C, without the zeroing; k >= 1). */
MF_GEMM_CLONES MF_GEMM_UNUSED
static void mf_gemm_nn_set(ptrdiff_t nr, ptrdiff_t nl, ptrdiff_t k, const double *restrict A,
                           ptrdiff_t lda, const double *restrict B, ptrdiff_t ldb,
                           double *restrict C, ptrdiff_t ldc)
{
    mf_gemm__run(nr, nl, k, A, lda, 1, B, ldb, C, ldc, 1);
}

/* C[i][l] += sum_p A[p][i] B[p][l]   (A: k x nr, B: k x nl, C: nr x nl, row-major). */
MF_GEMM_CLONES MF_GEMM_UNUSED
static void mf_gemm_tn(ptrdiff_t nr, ptrdiff_t nl, ptrdiff_t k, const double *restrict A,
                       ptrdiff_t lda, const double *restrict B, ptrdiff_t ldb,
                       double *restrict C, ptrdiff_t ldc)
{
    mf_gemm__run(nr, nl, k, A, 1, lda, B, ldb, C, ldc, 0);
}

#endif
