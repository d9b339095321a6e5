"""Kernel: the Plefka schemes G11, G12, G22 of Bhattacharyya & Keerthi for DAG belief nets.

Called only from ``mfengine.sbn.plefka``, which validates every input; the entry points still
check every size, index and option they read and return ``MF_EBADARG`` (``mf_status.h``), and
report per item MF_OK, MF_ENOMEM or MF_EOVERFLOW (G or its gradient not finite: weights too
large for the expansion, ``w^2 u (1 - u)`` beyond the double range; computed as w (w v) so that
saturated means keep it finite).

Units are in topological order; the net is read through the compressed parent/child lists of
``DagStructure`` (``par_ptr``/``par_idx`` with the weights in parent order, ``ch_ptr``/
``ch_idx``/``ch_w``).  Per unit i, with means u, v = u (1 - u), c = 1 - 2u:

    Mbar_i = h_i + sum_j w_ij u_j,   V_i = <X_i^2> = sum_j w_ij^2 v_j,
    a_n, b_n = n-th derivatives of ln f and ln(1 - f) at Mbar_i,
    g_n = u_i a_n + (1 - u_i) b_n,   d_n = a_n - b_n.

    F11 = - sum_i g0_i
    F12 = F11 - 1/2 sum_i g2_i V_i
    F22 = F12 - 1/2 [ sum_{j<l} alpha_jl^2 v_j v_l + sum_i d2_i^2 v_i T_i ]
          alpha_jl = [j -> l] (d1_l w_lj + 1/2 d2_l w_lj^2 c_j) + sum_{i: j,l parents of i} g2_i w_ij w_il
          T_i = sum_{j<l parents of i} w_ij^2 v_j w_il^2 v_l = 1/2 (V_i^2 - sum_j w_ij^4 v_j^2)

and G = sum_{free i} [u_i ln u_i + (1 - u_i) ln(1 - u_i)] + F (docs/plefka.md derives F22).
Barren units (free, no clamped descendant; ``barren_of_clamp``) sum out of P(clamped units)
exactly and are left out of every sum here, the entropy's too: ``core`` gives them zero
coefficients, so they carry no term and nothing of theirs reaches their parents (G is the one
of the net with them deleted); a solve then sets their means from their parents' solved means
(``set_barren_means``).
``core`` evaluates F and, in reverse mode, its partial derivatives with respect to every u,
every Mbar (= dF/dh) and every weight.  Cost per evaluation: O(nnz) for G11 and G12; for G22
O(nnz + sum_i fanin_i^2) <= O(nnz * max fan-in) (the alpha of all co-parent pairs).

The solver works in t = logit(u) for the free units, |t| <= T_MAX = 700.  Its step is the paper's
fixed-point iteration t <- -dF/du (eq. 73), which is also a descent direction of G in t; a
full step is taken when it lowers G (Armijo) and does not overshoot the minimum along the step
(the derivative there is below half the initial one in magnitude).  Otherwise -- and this is
what a period-2 oscillation between u and its image always triggers -- the minimum of G on the
segment between the two points is searched for (safeguarded secant on the directional
derivative, or interpolation when G rises), and the iteration restarts from it.  Every
accepted step lowers G, so the iteration cannot cycle.  Converged: max_i |sigmoid(image_i) -
u_i| <= tol with no free unit pushed against the bound |t| = T_MAX.  A trial point where G is
+inf or overflows is rejected like any point where G rises.

For G11 and G12 a unit on the bound whose image lies beyond it counts as converged (its
coordinate minimum is a mean a double cannot tell from 0 or 1), and items the iteration leaves
unconverged within the budget are solved again by coordinate descent on G (``cd_item``: one
unit at a time, the root of dG/du_j bracketed and found by regula falsi, each move kept only
if it lowers G; O(its children) per evaluation; every third point the squared extrapolation
of the two sweeps before it, kept when it lowers G: ``cd_extrapolate``), kept when it
converges or ends lower.  Its sweeps share max_iter with the iteration's steps (a sweep costs
some hundred times a step on a dense net): an item whose iteration spent the budget gets none.
The coordinate descent has three quarters of what is left; where it ends unconverged (creeping
along a valley of G, the units that could explain one observation trading places), the
fixed-point iteration goes on from its point with the rest, without giving up early
(``cd_body``).  With that fallback to come, the iteration gives up as soon as it stops making
progress (a window of PROG_WINDOW = 20 iterations lowers G by at most tol, or by more than half
what the window before did: a crawl, not a convergence), and at the first window past half the
budget, instead of spending its whole budget; the coordinate descent then starts from the
iteration's answer when it ran at least one window, else from the starting point.

Layered sigmoid nets (every unit's parents one contiguous range shared by consecutive units)
are solved, for orders 11 and 12, in blocks of up to 64 patterns of one net (``solve_block``):
Mbar, V and the reverse pass by matrix products over the block (the project's own,
csrc/mf_gemm.h: no BLAS), the per-unit terms lane-wise, each pattern running solve_item's
steps as a resumable state machine (``ps_begin``/``ps_consume``).
Blocks are cut from the items and the structure alone, never from the thread count.

``mf_plefka_solve`` and ``mf_plefka_gradient`` (declared in ``_plefka.pxd``) are the C API: one
net in CSR form, every argument checked (MF_EBADARG, nothing written).

Noisy-OR: Mbar_i = 0 happens only when h_i = 0 and every parent with w_ij > 0 has u_j = 0.  A
free unit for which that holds given the clamped units is surely off: the solver fixes it at
0 (exact).  A unit with u_i > 0 and Mbar_i = 0 makes G = +inf (a result, reported with MF_OK,
not an error; a barren unit has no term and cannot); terms multiplied by v_i = 0 are skipped,
so no inf * 0 arises.
"""
import numpy as np

from cython.parallel cimport prange, parallel

cdef extern from "mf_parallel.h" nogil:
    # an OpenMP loop in plain C: the C entry points run with no interpreter at all
    enum: MF_MAX_THREADS
    ctypedef void (*mf_body_fn)(void *ctx, Py_ssize_t i, int thread) noexcept nogil
    int mf_clamp_threads(Py_ssize_t n_threads, Py_ssize_t n_items)
    void mf_parallel_for(Py_ssize_t n, int n_threads, mf_body_fn body, void *ctx)
from libc.math cimport log, log1p, expm1, fabs, sqrt, INFINITY, NAN
from libc.stdlib cimport malloc, free
from libc.string cimport memset
from mfengine._typedefs cimport intp_t, int8_t, uint8_t
from mfengine.sbn._dag cimport (Dag, check_dag, check_items, capi_check_net, capi_dag, MF_OK, MF_NOT_CONVERGED, MF_EBADARG,
                                 MF_ENOMEM, MF_EOVERFLOW, barren_of_clamp,
                                 barren_means, barren_means_sig)

# the blocked path's matrix products: the project's own (csrc/mf_gemm.h), so that the kernel
# needs no SciPy/BLAS and starts no BLAS threads inside its OpenMP threads
cdef extern from "mf_gemm.h" nogil:
    void mf_gemm_nn(Py_ssize_t nr, Py_ssize_t nl, Py_ssize_t k, const double *A, Py_ssize_t lda,
                    const double *B, Py_ssize_t ldb, double *C, Py_ssize_t ldc)
    void mf_gemm_tn(Py_ssize_t nr, Py_ssize_t nl, Py_ssize_t k, const double *A, Py_ssize_t lda,
                    const double *B, Py_ssize_t ldb, double *C, Py_ssize_t ldc)

cdef extern from "mf_numerics.h" nogil:
    double mf_log1pexp(double x)
    double mf_sigmoid(double x)

# Lane-wise loops of the blocked dense path (patterns are the contiguous, vectorised dimension:
# every pattern's arithmetic is the same whatever the other lanes hold).
cdef extern from *:
    """
    #include <math.h>
    #include "mf_exp.h"
    #if defined(MF_TARGET_CLONES) && defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
    #define MFP_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
    #else
    #define MFP_CLONES
    #endif

    /* log(1 + e) for e in [0, 1] without a library call (vectorisable): 2 atanh(z) with
     * z = e / (2 + e), or ln 2 + 2 atanh((e - 1) / (e + 3)) above sqrt(2) - 1, so |z| <= 0.1716
     * and the odd series to z^21 is exact to about 1e-18 relative. */
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

    static inline double mfp_log1p01(double e)
    {
        double big = e > 0.41421356237309503 ? 1.0 : 0.0;
        return mfp_log1p_z((e - big) / (e + 2.0 + big), big);
    }

    /* log(1 + num / den) for 0 <= num <= den (one division). */
    static inline double mfp_log1p_nd(double num, double den)
    {
        double big = num > 0.41421356237309503 * den ? 1.0 : 0.0;
        return mfp_log1p_z((num - big * den) / (num + (2.0 + big) * den), big);
    }

    /* The head of the Plefka solver's iteration over nf free units: the fixed-point image
     * x = t - g clipped to [-tmax, tmax], the step dt = x - t, q = v g (dG/dt), and
     * max |sigmoid(x) - u| in *res; bit 1 of the result: some x was clipped (with sat_ok,
     * not counting an x beyond the bound that t already sits on), bit 2: some x was not
     * finite. */
    MFP_CLONES static int mfp_image(long nf, double tmax, int sat_ok, const double *restrict t,
                                    const double *restrict g, const double *restrict u,
                                    const double *restrict v, double *restrict dt,
                                    double *restrict q, double *res_out)
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

    /* One free unit's row over m lanes: logits T -> u, u (1 - u), 1 - 2u, and
     * negH += u t - log(1 + e^t). */
    MFP_CLONES static void mfp_means_free(long m, const double *restrict T,
                                          double *restrict U, double *restrict V,
                                          double *restrict C, double *restrict negH)
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

    /* A row with fixed lanes (UF not NaN; all of them when all_fixed) and free ones;
     * H is m doubles of scratch. */
    static void mfp_means_mixed(long m, int all_fixed, const double *T, const double *UF,
                                double *U, double *V, double *C, double *negH, double *H)
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

    /* Sigmoid unit i over m lanes at Mbar = M, mean U, V_i = Vi: F += -g0 (- 1/2 g2 V_i for
     * order 12); UB = dF/du_i (partial), MB = dF/dMbar_i, VB = dF/dV_i. */
    MFP_CLONES static void mfp_sig_coef12(long m, const double *restrict M,
                                          const double *restrict U, const double *restrict Vi,
                                          double *restrict F, double *restrict UB,
                                          double *restrict MB, double *restrict VB)
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

    MFP_CLONES static void mfp_sig_coef11(long m, const double *restrict M,
                                          const double *restrict U, double *restrict F,
                                          double *restrict UB, double *restrict MB)
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

    /* sum_i a[i] b[i] in four interleaved partial sums, ((s0 + s1) + (s2 + s3)): one fixed
     * order, but four chains of additions instead of one, so the quasi-Newton recursion's
     * short dot products are not bound by the latency of a single chain. */
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

    /* dG/du of one unit row over m lanes (free lanes: + t, the entropy's derivative). */
    MFP_CLONES static void mfp_gu_row(long m, int order, const double *restrict UB,
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
    """
    void mfp_means_free(long m, const double *T, double *U, double *V, double *C,
                        double *negH) noexcept nogil
    void mfp_means_mixed(long m, int all_fixed, const double *T, const double *UF, double *U,
                         double *V, double *C, double *negH, double *H) noexcept nogil
    void mfp_sig_coef12(long m, const double *M, const double *U, const double *Vi, double *F,
                        double *UB, double *MB, double *VB) noexcept nogil
    void mfp_sig_coef11(long m, const double *M, const double *U, double *F, double *UB,
                        double *MB) noexcept nogil
    void mfp_gu_row(long m, int order, const double *UB, const double *VBAR, const double *C,
                    const double *GUM, const double *T, double *GU) noexcept nogil
    double mfp_log1p01(double e) noexcept nogil
    double mfp_dot(long n, const double *a, const double *b) noexcept nogil
    double mfp_dot3(long n, const double *a, const double *b, const double *c) noexcept nogil
    int mfp_image(long nf, double tmax, int sat_ok, const double *t, const double *g, const double *u,
                  const double *v, double *dt, double *q, double *res_out) noexcept nogil

DEF SIGMOID = 0
DEF NOISY_OR = 1
DEF T_MAX = 700.0       # |logit(u)| bound for free units (e^-700 is still a normal double); a
                        # trial point where G overflows (noisy-OR, Mbar ~ 0) is rejected
DEF C_ARMIJO = 1e-4     # sufficient decrease
DEF C_CURV = 0.5        # a step overshoots when the directional derivative there exceeds this
DEF NOISE = 1e-12       # relative round-off allowed in comparisons of G
DEF MAX_LS = 40         # evaluations per line search
DEF MAX_STALLS = 10     # consecutive accepted steps that neither lower G nor move u by tol: give up
DEF PROG_WINDOW = 20    # early_cd: G's decrease is compared over windows of this many iterations
DEF PROG_RATIO = 0.5    # early_cd: give up when a window lowers G by more than this times the last
DEF MEM = 5             # curvature pairs kept by the quasi-Newton correction

# An item's outcome inside the kernel: MF_OK, MF_EOVERFLOW (G or its gradient left the double
# range) or G_INF, not an error: G = +inf because a unit with u > 0 has ln f(Mbar) = -inf
# (noisy-OR, clamped units that are impossible).  The per-item status written out holds the
# codes of mf_status.h only (G_INF is reported as MF_OK with G = +inf).
DEF G_INF = 1


cdef struct Net:
    Dag g           # the structure
    int act
    int order
    double t_max
    int accel       # 0: plain fixed-point steps; 1: quasi-Newton after the first line search; 2: always
    int sat_ok      # a unit on the bound |t| = t_max whose image lies beyond it counts as converged
    int early_cd    # coordinate descent follows: solve_item gives up once it stops making progress


cdef struct Work:
    double *M
    double *V
    double *T
    double *g0
    double *g1
    double *g2
    double *g3
    double *d0
    double *d1
    double *d2
    double *d3
    double *u
    double *v
    double *c
    double *ubar
    double *vbar
    double *cbar
    double *mbar
    double *A
    double *Abar
    double *t       # solver: current logits, trial logits, step, three gradient buffers
    double *tt
    double *dt
    double *ga
    double *gb
    double *gc
    double *q       # solver: dG/dt = v dG/du at t, its previous value, v at t, a direction
    double *qprev
    double *vcur
    double *dq
    double *Sm      # MEM x n steps and gradient changes (ring), 1 / (s.y), two-loop scratch
    double *Ym
    double *rho
    double *alph
    intp_t *touched
    int8_t *mark
    int8_t *fixed   # clamped units, barren ones and (noisy-OR) free units that are surely off
    uint8_t *barren # free units with no clamped descendant: no term at all (summed out)
    uint8_t *free_  # the item's free units (NaN in clamp), for mark_barren


cdef inline Py_ssize_t WORK_DOUBLES(Py_ssize_t n) noexcept nogil:
    return (30 + 2 * MEM) * n + 2 * MEM + 1


cdef inline Py_ssize_t WORK_BYTES(Py_ssize_t n) noexcept nogil:
    # the bytes after the doubles and indices rounded up to whole doubles: what follows a
    # block (cd_body's u2, mf_plefka_gradient's gu) stays aligned
    return WORK_DOUBLES(n) * sizeof(double) + n * sizeof(intp_t) + (4 * n + 23) // 8 * 8


cdef Work make_work(char *block, Py_ssize_t n) noexcept nogil:
    """Carve one thread's scratch block into the work arrays."""
    cdef Work W
    cdef double *d = <double *> block
    W.M = d
    W.V = d + n
    W.T = d + 2 * n
    W.g0 = d + 3 * n
    W.g1 = d + 4 * n
    W.g2 = d + 5 * n
    W.g3 = d + 6 * n
    W.d0 = d + 7 * n
    W.d1 = d + 8 * n
    W.d2 = d + 9 * n
    W.d3 = d + 10 * n
    W.u = d + 11 * n
    W.v = d + 12 * n
    W.c = d + 13 * n
    W.ubar = d + 14 * n
    W.vbar = d + 15 * n
    W.cbar = d + 16 * n
    W.mbar = d + 17 * n
    W.A = d + 18 * n
    W.Abar = d + 19 * n
    W.t = d + 20 * n
    W.tt = d + 21 * n
    W.dt = d + 22 * n
    W.ga = d + 23 * n
    W.gb = d + 24 * n
    W.gc = d + 25 * n
    W.q = d + 26 * n
    W.qprev = d + 27 * n
    W.vcur = d + 28 * n
    W.dq = d + 29 * n
    W.Sm = d + 30 * n
    W.Ym = d + (30 + MEM) * n
    W.rho = d + (30 + 2 * MEM) * n
    W.alph = W.rho + MEM
    W.touched = <intp_t *> (d + WORK_DOUBLES(n))
    W.mark = <int8_t *> (W.touched + n)
    W.fixed = W.mark + n
    W.barren = <uint8_t *> (W.fixed + n)
    W.free_ = W.barren + n
    memset(W.mark, 0, n)
    memset(W.barren, 0, n)
    memset(W.A, 0, n * sizeof(double))
    return W


cdef inline void set_barren_means(const Net *net, const double *w, const double *h,
                                  const uint8_t *barren, double *u) noexcept nogil:
    """The barren units' means from their parents' solved ones: sigmoid(h + W u), or the
    noisy-OR predictive 1 - e^{-h} prod (1 - u + u e^{-W}) (as in the strict-bound kernel)."""
    if net.act == SIGMOID:
        barren_means_sig(&net.g, w, h, barren, u)
    else:
        barren_means(&net.g, w, h, barren, u)


cdef Py_ssize_t fix_units(const Net *net, const double *w, const double *h, const double *clamp,
                          Work *W) noexcept nogil:
    """W.fixed, and u, v, c at the fixed units, for one item: the clamped units, the barren
    ones (summed out: every term of theirs left out, so G is the one of the net with them
    deleted), and (noisy-OR) the free units with zero bias whose weighted parents are all
    clamped off, surely off (u = 0, exact).  Returns the number of barren units."""
    cdef Py_ssize_t i, e, k, nb
    cdef double x
    cdef int surely_off
    nb = barren_of_clamp(&net.g, clamp, W.free_, W.barren)
    for i in range(net.g.n):
        x = clamp[i]
        W.fixed[i] = 1
        if x == x:
            W.u[i] = x
            W.v[i] = 0.0
            W.c[i] = 1.0 - 2.0 * x
            continue
        if W.barren[i]:
            W.u[i] = 0.0        # never read: no term of a barren unit is evaluated
            W.v[i] = 0.0
            W.c[i] = 1.0
            continue
        W.fixed[i] = 0
        if net.act == NOISY_OR and h[i] == 0.0:
            surely_off = 1
            for e in range(net.g.par_ptr[i], net.g.par_ptr[i + 1]):
                k = net.g.par_idx[e]
                if w[e] != 0.0 and not (W.fixed[k] and W.u[k] == 0.0):
                    surely_off = 0
                    break
            if surely_off:
                W.fixed[i] = 1
                W.u[i] = 0.0
                W.v[i] = 0.0
                W.c[i] = 1.0
    return nb


cdef double eval_setup(const Net *net, const double *clamp, const double *u,
                       Work *W) noexcept nogil:
    """W.fixed, W.barren and u, v, c of one item at the given means, for ``core`` (the
    evaluation entry points): clamped units at their values, barren ones left out (their u
    is not read), the free ones at u.  Returns the free units' sum u ln u + (1-u) ln(1-u)."""
    cdef Py_ssize_t i
    cdef double x, negH = 0.0
    barren_of_clamp(&net.g, clamp, W.free_, W.barren)
    for i in range(net.g.n):
        x = clamp[i]
        W.fixed[i] = x == x or W.barren[i]
        if W.barren[i]:
            x = 0.0
        elif not W.fixed[i]:
            x = u[i]
            if x > 0.0:
                negH = negH + x * log(x)
            if x < 1.0:
                negH = negH + (1.0 - x) * log1p(-x)
        W.u[i] = x
        W.v[i] = x * (1.0 - x)
        W.c[i] = 1.0 - 2.0 * x
    return negH


cdef inline int coeffs(double M, double u, int act, Work *W, Py_ssize_t i) noexcept nogil:
    """g_n = u a_n + (1 - u) b_n and d_n = a_n - b_n (n = 0..3) of unit i at Mbar_i = M.

    Returns 1 when ln f(M) = -inf while u > 0 (noisy-OR with M = 0): G is +inf.  For a
    noisy-OR unit with M = 0 and u = 0 the d_n (infinite) are set to 0: they only ever enter
    multiplied by v_i = 0.
    """
    cdef double s, q, a0, r, rr
    if act == SIGMOID:
        s = mf_sigmoid(M)
        q = mf_sigmoid(-M)
        a0 = -mf_log1pexp(-M)
        W.g0[i] = u * a0 - (1.0 - u) * mf_log1pexp(M)
        W.g1[i] = u - s
        W.g2[i] = -s * q
        W.g3[i] = -s * q * (q - s)
        W.d0[i] = M
        W.d1[i] = 1.0
        W.d2[i] = 0.0
        W.d3[i] = 0.0
        return 0
    # noisy-OR: ln f = ln(1 - e^{-M}) (derivatives r, -r (1 + r), r (1 + r)(1 + 2r) with
    # r = 1 / (e^M - 1)); ln(1 - f) = -M (derivatives -1, 0, 0)
    if M > 0.0:
        r = 1.0 / expm1(M)
        rr = r * (1.0 + r)
        a0 = log(-expm1(-M))
        W.g0[i] = (u * a0 if u > 0.0 else 0.0) - (1.0 - u) * M
        W.g1[i] = u * (1.0 + r) - 1.0
        W.g2[i] = -u * rr
        W.g3[i] = u * rr * (1.0 + 2.0 * r)
        W.d0[i] = a0 + M
        W.d1[i] = 1.0 + r
        W.d2[i] = -rr
        W.d3[i] = rr * (1.0 + 2.0 * r)
        return 0
    W.g0[i] = 0.0
    W.g1[i] = -1.0
    W.g2[i] = 0.0
    W.g3[i] = 0.0
    W.d0[i] = 0.0
    W.d1[i] = 0.0
    W.d2[i] = 0.0
    W.d3[i] = 0.0
    return 1 if u > 0.0 else 0


cdef inline void touch(Work *W, Py_ssize_t l, Py_ssize_t *nt) noexcept nogil:
    if not W.mark[l]:
        W.mark[l] = 1
        W.touched[nt[0]] = l
        nt[0] += 1


cdef int core(const Net *net, const double *w, const double *h, Work *W, int want_grad,
              double *gu, double *wbar, double *F) noexcept nogil:
    """F = G minus its entropy part, at the means in W.u (W.v, W.c consistent with them).

    With want_grad: gu[k] = dF/du_k for every unit k, W.mbar[i] = dF/dh_i and, if wbar is not
    NULL, wbar[e] = dF/dw_e (partial derivatives, every other mean held fixed).
    Returns MF_OK, or G_INF (F = +inf; no derivatives).
    """
    cdef Py_ssize_t n = net.g.n, i, e, k, j, l, ce, f, ew, nt, q
    cdef const intp_t *par_ptr = net.g.par_ptr
    cdef const intp_t *par_idx = net.g.par_idx
    cdef const intp_t *ch_ptr = net.g.ch_ptr
    cdef const intp_t *ch_idx = net.g.ch_idx
    cdef const intp_t *ch_w = net.g.ch_w
    cdef int order = net.order, act = net.act, inf = 0
    cdef double *u = W.u
    cdef double *v = W.v
    cdef double *c = W.c
    cdef double *A = W.A
    cdef double *Abar = W.Abar
    cdef double m, vv, we, wf, Fv = 0.0, Spair = 0.0, Stri = 0.0, s, ab, gsum, tb, Vb, x
    cdef double gi2, vj, s4
    for i in range(n):
        m = h[i]
        vv = 0.0
        if W.barren[i]:
            # summed out: every coefficient 0, so no term of G and nothing to its parents
            W.M[i] = m
            W.V[i] = vv
            W.g0[i] = W.g1[i] = W.g2[i] = W.g3[i] = 0.0
            W.d0[i] = W.d1[i] = W.d2[i] = W.d3[i] = 0.0
            continue
        for e in range(par_ptr[i], par_ptr[i + 1]):
            k = par_idx[e]
            we = w[e]
            m = m + we * u[k]
            vv = vv + we * (we * v[k])      # w^2 v, not overflowing where v is tiny
        W.M[i] = m
        W.V[i] = vv
        if act == NOISY_OR and u[i] == 0.0 and m > 0.0 and W.fixed[i]:
            # clamped off (most findings of a diagnosis case): ln(1 - f(M)) = -M, linear, no
            # exp or log; its d_n would enter only its own dG/du, which no caller reads
            W.g0[i] = -m
            W.g1[i] = -1.0
            W.g2[i] = W.g3[i] = 0.0
            W.d0[i] = W.d1[i] = W.d2[i] = W.d3[i] = 0.0
            continue
        inf |= coeffs(m, u[i], act, W, i)
    if inf:
        F[0] = INFINITY
        return G_INF
    for i in range(n):
        Fv -= W.g0[i]
    if order >= 12:
        for i in range(n):
            Fv -= 0.5 * W.g2[i] * W.V[i]
    if want_grad:
        for i in range(n):
            W.ubar[i] = -W.d0[i]
            W.mbar[i] = -W.g1[i]
            W.vbar[i] = 0.0
            W.cbar[i] = 0.0
            if order >= 12:
                W.ubar[i] -= 0.5 * W.d2[i] * W.V[i]
                W.mbar[i] -= 0.5 * W.g3[i] * W.V[i]
        if wbar != NULL:
            memset(wbar, 0, net.g.nnz * sizeof(double))
    if order == 22:
        # triples {j, l, i} (noisy-OR only: d2 = 0 for the sigmoid)
        if act == NOISY_OR:
            for i in range(n):
                W.T[i] = 0.0
                if v[i] > 0.0:
                    s4 = 0.0
                    for e in range(par_ptr[i], par_ptr[i + 1]):
                        we = w[e] * (w[e] * v[par_idx[e]])
                        s4 = s4 + we * we
                    W.T[i] = 0.5 * (W.V[i] * W.V[i] - s4)
                    Stri += W.d2[i] * W.d2[i] * v[i] * W.T[i]
        # pairs {l, j}, l < j: alpha_lj gathered in A[l] for one j at a time
        for j in range(n):
            vj = v[j]
            if vj <= 0.0:
                continue
            nt = 0
            for ce in range(ch_ptr[j], ch_ptr[j + 1]):
                i = ch_idx[ce]
                we = w[ch_w[ce]]
                gi2 = W.g2[i]
                for f in range(par_ptr[i], par_ptr[i + 1]):
                    l = par_idx[f]
                    if l >= j:
                        break
                    if v[l] <= 0.0:
                        continue
                    touch(W, l, &nt)
                    A[l] += gi2 * we * w[f]
            for f in range(par_ptr[j], par_ptr[j + 1]):
                l = par_idx[f]
                if v[l] <= 0.0:
                    continue
                touch(W, l, &nt)
                wf = w[f]
                A[l] += W.d1[j] * wf + 0.5 * W.d2[j] * wf * wf * c[l]
            s = 0.0
            for q in range(nt):
                l = W.touched[q]
                s = s + A[l] * A[l] * v[l]
            Spair += vj * s
            if want_grad:
                W.vbar[j] -= 0.5 * s
                for q in range(nt):
                    l = W.touched[q]
                    Abar[l] = -vj * A[l] * v[l]
                    W.vbar[l] -= 0.5 * vj * A[l] * A[l]
                for ce in range(ch_ptr[j], ch_ptr[j + 1]):
                    i = ch_idx[ce]
                    ew = ch_w[ce]
                    we = w[ew]
                    gi2 = W.g2[i]
                    gsum = 0.0
                    for f in range(par_ptr[i], par_ptr[i + 1]):
                        l = par_idx[f]
                        if l >= j:
                            break
                        if v[l] <= 0.0:
                            continue
                        ab = Abar[l]
                        gsum = gsum + ab * we * w[f]
                        if wbar != NULL:
                            wbar[ew] += ab * gi2 * w[f]
                            wbar[f] += ab * gi2 * we
                    W.ubar[i] += gsum * W.d2[i]
                    W.mbar[i] += gsum * W.g3[i]
                for f in range(par_ptr[j], par_ptr[j + 1]):
                    l = par_idx[f]
                    if v[l] <= 0.0:
                        continue
                    ab = Abar[l]
                    wf = w[f]
                    W.mbar[j] += ab * (W.d2[j] * wf + 0.5 * W.d3[j] * wf * wf * c[l])
                    if wbar != NULL:
                        wbar[f] += ab * (W.d1[j] + W.d2[j] * wf * c[l])
                    W.cbar[l] += ab * 0.5 * W.d2[j] * wf * wf
            for q in range(nt):
                l = W.touched[q]
                A[l] = 0.0
                W.mark[l] = 0
        Fv -= 0.5 * (Spair + Stri)
    F[0] = Fv
    if not want_grad:
        return MF_OK
    # adjoints of V_i (and of T_i for G22 noisy-OR) onto v and w
    for i in range(n):
        Vb = -0.5 * W.g2[i] if order >= 12 else 0.0
        tb = 0.0
        if order == 22 and act == NOISY_OR and v[i] > 0.0:
            tb = -0.5 * W.d2[i] * W.d2[i] * v[i]
            W.mbar[i] -= W.d2[i] * W.d3[i] * v[i] * W.T[i]
            W.vbar[i] -= 0.5 * W.d2[i] * W.d2[i] * W.T[i]
            Vb = Vb + tb * W.V[i]
        if Vb == 0.0 and tb == 0.0:
            continue
        for e in range(par_ptr[i], par_ptr[i + 1]):
            k = par_idx[e]
            we = w[e]
            x = Vb - tb * we * (we * v[k])
            W.vbar[k] += we * (we * x)
            if wbar != NULL:
                wbar[e] += 2.0 * we * (v[k] * x)
    for k in range(n):
        gu[k] = W.ubar[k] + W.vbar[k] * c[k] - 2.0 * W.cbar[k]
    for i in range(n):
        m = W.mbar[i]
        for e in range(par_ptr[i], par_ptr[i + 1]):
            k = par_idx[e]
            gu[k] += m * w[e]
            if wbar != NULL:
                wbar[e] += m * u[k]
    return MF_OK


cdef double eval_t(const Net *net, const double *w, const double *h, Work *W, const double *t,
                   int want_grad, double *gu, int *status) noexcept nogil:
    """G at the free logits t (fixed units as set in W); with want_grad, gu[i] = dG/du_i for
    the free units.  W.u, W.v, W.c are left at this point."""
    cdef Py_ssize_t i, n = net.g.n
    cdef double ti, s, sm, negH = 0.0, F
    for i in range(n):
        if W.fixed[i]:
            continue
        ti = t[i]
        s = mf_sigmoid(ti)
        sm = mf_sigmoid(-ti)
        W.u[i] = s
        W.v[i] = s * sm
        W.c[i] = sm - s
        negH += s * ti - mf_log1pexp(ti)
    status[0] = core(net, w, h, W, want_grad, gu, NULL, &F)
    if status[0] != MF_OK:
        return INFINITY
    if want_grad:
        for i in range(n):
            if not W.fixed[i]:
                gu[i] += t[i]
    F = negH + F
    if not (fabs(F) < INFINITY):     # NaN or +-inf: G left the double range
        status[0] = MF_EOVERFLOW
    return F


cdef inline double dir_deriv(const Net *net, const Work *W, const double *g,
                             const double *dt) noexcept nogil:
    """d/dlambda G(t + lambda dt) at the point whose v is in W.v and gradient dG/du is g."""
    cdef Py_ssize_t i
    cdef double D = 0.0
    for i in range(net.g.n):
        if not W.fixed[i]:
            D += g[i] * W.v[i] * dt[i]
    return D


cdef inline double max_du(const Net *net, const Work *W, const double *dt,
                          double step) noexcept nogil:
    """About how far a step of step * dt in t moves the means: max_i v_i |step dt_i|."""
    cdef Py_ssize_t i
    cdef double m = 0.0, x
    for i in range(net.g.n):
        if not W.fixed[i]:
            x = W.vcur[i] * fabs(step * dt[i])
            if x > m:
                m = x
    return m


cdef int solve_item(const Net *net, const double *w, const double *h, const double *clamp,
                    const double *init, Work *W, double tol, Py_ssize_t max_iter,
                    double *G_out, double *u_out, intp_t *n_iter, int8_t *conv) noexcept nogil:
    cdef Py_ssize_t n = net.g.n, i, e, k, it = 0, ls
    cdef double x, G, G1, D, D1, res, noise, lo, hi, flo, fhi, dlo, dhi, lam, f, d, den, span
    cdef double *t = W.t
    cdef double *tt = W.tt
    cdef double *dt = W.dt
    cdef double *gcur = W.ga
    cdef double *gtry = W.gb
    cdef double *glo = W.gc
    cdef double *tmp
    cdef int status = MF_OK, clipped, found, finite, pending = 0, qn = net.accel == 2
    cdef double tmax = net.t_max, step, sy, ss, yy, Dq
    cdef Py_ssize_t mem = 0, head = 0, stalls = 0, it_mark = 0, n_barren
    cdef double G_mark, dG_prev = INFINITY
    conv[0] = 0
    n_iter[0] = 0
    n_barren = fix_units(net, w, h, clamp, W)
    for i in range(n):
        if not W.fixed[i]:
            x = 0.5 if init == NULL else init[i]
            if x <= 0.0:
                t[i] = -tmax
            elif x >= 1.0:
                t[i] = tmax
            else:
                t[i] = log(x) - log1p(-x)
                t[i] = -tmax if t[i] < -tmax else (tmax if t[i] > tmax else t[i])
    G = eval_t(net, w, h, W, t, 1, gcur, &status)
    G_mark = G
    while status == MF_OK:
        # the fixed-point image t_img = t - dG/du = -dF/du, its distance in u, and the slope
        res = 0.0
        clipped = 0
        finite = 1
        for i in range(n):
            if W.fixed[i]:
                continue
            x = t[i] - gcur[i]
            if not (fabs(x) < INFINITY):
                finite = 0
            if x > tmax:
                x = tmax
                clipped |= not (net.sat_ok and t[i] >= tmax)
            elif x < -tmax:
                x = -tmax
                clipped |= not (net.sat_ok and t[i] <= -tmax)
            dt[i] = x - t[i]
            f = mf_sigmoid(t[i])
            x = fabs(mf_sigmoid(x) - f)
            if x > res:
                res = x
            W.vcur[i] = f * mf_sigmoid(-t[i])
            W.q[i] = W.vcur[i] * gcur[i]        # dG/dt
        if not finite:
            break       # the gradient overflowed at an accepted point (noisy-OR near Mbar = 0)
        if res <= tol:
            conv[0] = not clipped
            break
        if it >= max_iter:
            break
        if net.early_cd and it >= it_mark + PROG_WINDOW:
            # coordinate descent takes over (from the start) as soon as the iteration stops
            # making progress: a window of PROG_WINDOW iterations lowered G by at most tol, or
            # by more than PROG_RATIO times the window before (G's decrease not shrinking: a
            # crawl, e.g. units creeping towards the bound, not a convergence; a linear one at
            # that pace would need some 40 windows per factor 1e3 of the residual); and at the
            # first window past half the budget, which is left to the coordinate descent (on
            # diagnosis-style noisy-OR nets G can keep falling by shrinking steps while one
            # unit's residual crawls, and the iteration would spend the budget on it)
            if G_mark - G <= tol or G_mark - G > PROG_RATIO * dG_prev or 2 * it >= max_iter:
                break
            dG_prev = G_mark - G
            G_mark = G
            it_mark = it
        if pending:     # complete the curvature pair of the last step: y = change of dG/dt
            pending = 0
            sy = 0.0
            ss = 0.0
            yy = 0.0
            for i in range(n):
                if not W.fixed[i]:
                    x = W.q[i] - W.qprev[i]
                    W.Ym[head * n + i] = x
                    sy = sy + W.Sm[head * n + i] * x
                    ss = ss + W.Sm[head * n + i] * W.Sm[head * n + i]
                    yy = yy + x * x
            if sy > 1e-10 * sqrt(ss * yy) and sy < INFINITY:
                W.rho[head] = 1.0 / sy
                head = (head + 1) % MEM
                if mem < MEM:
                    mem += 1
        for i in range(n):
            W.qprev[i] = W.q[i]
        D = 0.0
        for i in range(n):
            if not W.fixed[i]:
                D += W.q[i] * dt[i]
        if qn and mem > 0 and qn_direction(net, W, t, dt, mem, head):
            Dq = 0.0
            for i in range(n):
                if not W.fixed[i]:
                    Dq += W.q[i] * W.dq[i]
            if Dq < 0.0:
                tmp = dt; dt = W.dq; W.dq = tmp
                D = Dq
            else:
                mem = 0     # not a descent direction: forget the pairs, take the fixed-point step
        if not (D < 0.0):
            break
        it += 1
        noise = NOISE * (1.0 + fabs(G))
        # the full fixed-point step
        for i in range(n):
            if not W.fixed[i]:
                tt[i] = t[i] + dt[i]
        G1 = eval_t(net, w, h, W, tt, 1, gtry, &status)
        if status != MF_OK:
            status = MF_OK      # a trial point where G is +inf or overflows is just rejected
            G1 = INFINITY
        D1 = dir_deriv(net, W, gtry, dt) if G1 < INFINITY else INFINITY
        if G1 <= G + C_ARMIJO * D + noise and D1 <= -C_CURV * D:
            tmp = t; t = tt; tt = tmp
            tmp = gcur; gcur = gtry; gtry = tmp
            stalls = stalls + 1 if (G1 >= G and max_du(net, W, dt, 1.0) <= tol) else 0
            G = G1
            if stalls >= MAX_STALLS:
                break
            for i in range(n):
                W.Sm[head * n + i] = dt[i]
            pending = 1
            continue
        if net.accel == 1:
            qn = 1
        # line search on the segment t + lam dt, lam in (0, 1): the minimum of G there
        lo = 0.0
        flo = G
        dlo = D
        hi = 1.0
        fhi = G1
        dhi = D1
        found = 0
        for ls in range(MAX_LS):
            span = hi - lo
            if dhi > 0.0 and dhi < INFINITY and fhi <= G + C_ARMIJO * hi * D + noise:
                lam = lo - dlo * span / (dhi - dlo)          # secant on the slope
            else:
                den = 2.0 * (fhi - flo - dlo * span)          # quadratic through flo, dlo, fhi
                lam = lo - dlo * span * span / den if (den > 0.0 and fhi < INFINITY) else lo + 0.5 * span
            if lam < lo + 0.1 * span:
                lam = lo + 0.1 * span
            elif lam > hi - 0.1 * span:
                lam = hi - 0.1 * span
            for i in range(n):
                if not W.fixed[i]:
                    tt[i] = t[i] + lam * dt[i]
            f = eval_t(net, w, h, W, tt, 1, gtry, &status)
            if status != MF_OK:
                status = MF_OK
                f = INFINITY
            d = dir_deriv(net, W, gtry, dt) if f < INFINITY else INFINITY
            if not (f <= G + C_ARMIJO * lam * D + noise and f <= flo + noise):
                hi = lam
                fhi = f
                dhi = d
            elif fabs(d) <= -C_CURV * D:
                found = 1
                break
            elif d > 0.0:
                hi = lam
                fhi = f
                dhi = d
            else:
                lo = lam
                flo = f
                dlo = d
                tmp = glo; glo = gtry; gtry = tmp
            if hi - lo <= 1e-13:
                break
        if found:
            tmp = t; t = tt; tt = tmp
            tmp = gcur; gcur = gtry; gtry = tmp
            stalls = stalls + 1 if (f >= G and max_du(net, W, dt, lam) <= tol) else 0
            G = f
            step = lam
        elif lo > 0.0:
            for i in range(n):
                if not W.fixed[i]:
                    t[i] = t[i] + lo * dt[i]
            tmp = gcur; gcur = glo; glo = tmp
            stalls = stalls + 1 if (flo >= G and max_du(net, W, dt, lo) <= tol) else 0
            G = flo
            step = lo
        else:
            break       # no decrease found along a descent direction: round-off floor
        if stalls >= MAX_STALLS:
            break       # steps accepted within round-off only: G is flat here
        for i in range(n):
            W.Sm[head * n + i] = step * dt[i]
        pending = 1
    n_iter[0] = it
    G_out[0] = G if status != MF_EOVERFLOW else NAN
    for i in range(n):
        u_out[i] = W.u[i] if W.fixed[i] else mf_sigmoid(t[i])
    if n_barren:
        set_barren_means(net, w, h, W.barren, u_out)
    if status != MF_OK:
        conv[0] = 0
    return status


# ------------------------------------------------------------------ coordinate descent on G
# The fallback for items the fixed-point iteration leaves unconverged (orders 11 and 12): stiff
# sparse nets such as the diagnosis-style noisy-OR nets, whose per-unit curvatures differ by
# orders of magnitude, so that no common step length works for all units at once.  One unit at
# a time, G is minimised over its logit with the others held fixed: G11 and G12 depend on u_j
# through its entropy, its own term (linear in u_j) and its children's terms (through their
# Mbar_i and V_i), so each one-dimensional problem costs O(children).  Its derivative
# g(t) = dG/du_j = t + c(u_j) goes to -inf as t -> -inf and +inf as t -> +inf (the entropy),
# so a root exists; it is bracketed from the current point in the descent direction (steps
# doubled while G falls and the slope keeps its sign, quartered when G rises past a bump) and
# found by safeguarded regula falsi (Illinois), and the move is kept only if it lowers G.  So G
# never rises and the sweeps cannot cycle.  A unit whose minimum lies beyond |t| = T_MAX sits on
# the bound: no stationary point inside (0, 1), reported as not converged.
DEF CD_ROOT_ITERS = 60


cdef inline double cd_phi(const Net *net, const double *w, Work *W, Py_ssize_t j, double t,
                          double own, double *g_out) noexcept nogil:
    """G as a function of unit j's logit t, up to a constant (the other means fixed; W.M and
    W.V hold every Mbar and V at the current u_j), and g = dG/du_j there.  +inf (g = -inf)
    where a noisy-OR child's ln f(Mbar) is -inf."""
    cdef double s = mf_sigmoid(t), sm = mf_sigmoid(-t)
    cdef double du = s - W.u[j], dv = s * sm - W.v[j], c = sm - s
    cdef double phi = s * t - mf_log1pexp(t) + s * own, g = t + own, we, Mi, Vi
    cdef Py_ssize_t ce, i
    cdef int order = net.order
    for ce in range(net.g.ch_ptr[j], net.g.ch_ptr[j + 1]):
        i = net.g.ch_idx[ce]
        if W.barren[i]:
            continue        # summed out: no term
        we = w[net.g.ch_w[ce]]
        Mi = W.M[i] + we * du
        if Mi < 0.0 and net.act == NOISY_OR:
            Mi = 0.0        # round-off below a zero input
        if net.act == NOISY_OR and W.u[i] == 0.0 and Mi > 0.0 and W.fixed[i]:
            phi += Mi       # clamped off: its term -ln(1 - f(Mi)) = Mi, linear (g1 = -1, g2 = 0)
            g += we
            continue
        if coeffs(Mi, W.u[i], net.act, W, i):
            g_out[0] = -INFINITY
            return INFINITY
        phi -= W.g0[i]
        g -= we * W.g1[i]
        if order >= 12:
            Vi = W.V[i] + we * (we * dv)
            if Vi < 0.0:
                Vi = 0.0
            phi -= 0.5 * W.g2[i] * Vi
            g -= we * (0.5 * W.g3[i] * Vi) + we * (we * c) * (0.5 * W.g2[i])
    g_out[0] = g
    return phi


cdef void cd_sync(const Net *net, const double *w, const double *h, Work *W) noexcept nogil:
    """Mbar and V of every unit from the current means."""
    cdef Py_ssize_t i, e, k
    cdef double m, vv
    for i in range(net.g.n):
        m = h[i]
        vv = 0.0
        for e in range(net.g.par_ptr[i], net.g.par_ptr[i + 1]):
            k = net.g.par_idx[e]
            m = m + w[e] * W.u[k]
            vv = vv + w[e] * (w[e] * W.v[k])
        W.M[i] = m
        W.V[i] = vv


cdef void cd_set(const Net *net, const double *w, Work *W, Py_ssize_t j, double t) noexcept nogil:
    """Move unit j to logit t, updating its children's Mbar and V."""
    cdef double s = mf_sigmoid(t), sm = mf_sigmoid(-t)
    cdef double du = s - W.u[j], dv = s * sm - W.v[j], we
    cdef Py_ssize_t ce, i
    for ce in range(net.g.ch_ptr[j], net.g.ch_ptr[j + 1]):
        i = net.g.ch_idx[ce]
        we = w[net.g.ch_w[ce]]
        W.M[i] += we * du
        W.V[i] += we * (we * dv)
    W.u[j] = s
    W.v[j] = s * sm
    W.c[j] = sm - s
    W.t[j] = t


DEF CD_EXTRA_MAX = 100.0    # the squared extrapolation's step, at most this many plain steps


cdef inline void cd_point(const Net *net, Work *W, const double *t) noexcept nogil:
    """Set every free unit's logit, mean, variance and 1 - 2u from t."""
    cdef Py_ssize_t i
    cdef double s, sm
    for i in range(net.g.n):
        if W.fixed[i]:
            continue
        s = mf_sigmoid(t[i])
        sm = mf_sigmoid(-t[i])
        W.t[i] = t[i]
        W.u[i] = s
        W.v[i] = s * sm
        W.c[i] = sm - s


cdef int cd_extrapolate(const Net *net, const double *w, const double *h, Work *W,
                        const double *t0, const double *t1, double *t2, double G2,
                        double *G_out) noexcept nogil:
    """The squared extrapolation (SQUAREM, Varadhan & Roland 2008) of two sweeps t0 -> t1 -> t2
    (t2 = W.t, where G = G2): tp = t0 - 2 a r + a^2 d with r = t1 - t0, d = t2 - 2 t1 + t0 and
    a = -|r| / |d| clipped to [-CD_EXTRA_MAX, -1] (a = -1 would give t2), each logit clipped to
    the bound.  Returns 1 with W at tp, G(tp) in G_out and dG/du in W.ga when G(tp) < G2, else
    0 with W back at t2 (kept in ``t2``).  The coordinate descent converges linearly along the
    valleys of diagnosis-style nets (the residual halving every four to five sweeps), which the
    extrapolation shortens; the evaluation at tp is the convergence test's of the next point,
    so an extrapolation costs one evaluation of G and its gradient per two sweeps."""
    cdef Py_ssize_t i, n = net.g.n
    cdef double rr = 0.0, dd = 0.0, r, d, a, x, tmax = net.t_max, Gp
    cdef int status = MF_OK
    for i in range(n):
        if W.fixed[i]:
            continue
        r = t1[i] - t0[i]
        d = W.t[i] - 2.0 * t1[i] + t0[i]
        rr += r * r
        dd += d * d
    if not (rr > 0.0 and dd > 0.0 and rr < INFINITY and dd < INFINITY):
        return 0
    a = -sqrt(rr / dd)
    if a >= -1.0:
        return 0
    if a < -CD_EXTRA_MAX:
        a = -CD_EXTRA_MAX
    for i in range(n):
        t2[i] = W.t[i]
        if W.fixed[i]:
            continue
        x = t0[i] - 2.0 * a * (t1[i] - t0[i]) + a * a * (t2[i] - 2.0 * t1[i] + t0[i])
        if not (x > -tmax):         # (NaN too)
            x = -tmax if x == x else t2[i]
        elif x > tmax:
            x = tmax
        W.t[i] = x
    Gp = eval_t(net, w, h, W, W.t, 1, W.ga, &status)
    if status == MF_OK and Gp < G2:
        G_out[0] = Gp
        return 1
    cd_point(net, W, t2)
    return 0


cdef int cd_item(const Net *net, const double *w, const double *h, const double *clamp,
                 const double *init, Work *W, double tol, Py_ssize_t max_iter,
                 double *G_out, double *u_out, intp_t *n_iter, int8_t *conv) noexcept nogil:
    """Coordinate descent on G (orders 11 and 12) for one item; outputs as solve_item's."""
    cdef Py_ssize_t n = net.g.n, i, e, k, j, sweep = 0, r, n_barren
    cdef double x, tmax = net.t_max, own, g0, phi0, a, b, ga, gb, xm, gx, step, phin, gn
    cdef double res, sweep_res, noise, G, phia, phib
    cdef int side, status = MF_OK, clipped, bound, phase = 0, fresh = 0
    conv[0] = 0
    n_iter[0] = 0
    n_barren = fix_units(net, w, h, clamp, W)
    for i in range(n):
        if W.fixed[i]:
            continue
        x = 0.5 if init == NULL else init[i]
        if x <= 0.0:
            x = -tmax
        elif x >= 1.0:
            x = tmax
        else:
            x = log(x) - log1p(-x)
            x = -tmax if x < -tmax else (tmax if x > tmax else x)
        W.t[i] = x
    cd_point(net, W, W.t)
    while True:
        # the full objective and gradient: the convergence test of solve_item (an accepted
        # extrapolation has evaluated them already)
        if fresh:
            fresh = 0
        else:
            G = eval_t(net, w, h, W, W.t, 1, W.ga, &status)
        if status != MF_OK:
            break
        res = 0.0
        clipped = 0
        for i in range(n):
            if W.fixed[i]:
                continue
            x = W.t[i] - W.ga[i]
            if not (fabs(x) < INFINITY):
                x = -tmax if x < 0.0 else tmax
            if x > tmax:
                x = tmax
                clipped |= W.t[i] < tmax
            elif x < -tmax:
                x = -tmax
                clipped |= W.t[i] > -tmax
            x = fabs(mf_sigmoid(x) - mf_sigmoid(W.t[i]))
            if x > res:
                res = x
        if res <= tol and not clipped:
            conv[0] = 1
            break
        if sweep >= max_iter:
            break
        # every third point is the squared extrapolation of the two sweeps before it, kept
        # when it lowers G (then tested like any point), else the sweeps go on from t2
        if phase == 2:
            phase = 0
            fresh = cd_extrapolate(net, w, h, W, W.Sm, W.Sm + n, W.Sm + 2 * n, G, &G)
            if fresh:
                continue
        for i in range(n):
            W.Sm[phase * n + i] = W.t[i]
        phase += 1
        sweep += 1
        cd_sync(net, w, h, W)
        sweep_res = 0.0
        for j in range(n):
            if W.fixed[j]:
                continue
            # unit j's own term is linear in u_j: slope -d0 - 1/2 d2 V_j at its Mbar_j
            if coeffs(W.M[j], 0.0, net.act, W, j):
                continue
            own = -W.d0[j]
            if net.order >= 12:
                own -= 0.5 * W.d2[j] * W.V[j]
            if not (fabs(own) < INFINITY):
                continue
            a = W.t[j]
            phi0 = cd_phi(net, w, W, j, a, own, &g0)
            if not (fabs(g0) < INFINITY and phi0 < INFINITY):
                continue
            x = a - g0
            x = -tmax if x < -tmax else (tmax if x > tmax else x)
            if x == a or (fabs(mf_sigmoid(x) - W.u[j]) <= 1e-3 * tol and fabs(x) < tmax):
                continue        # at its minimum (or on the bound beyond which it lies)
            # bracket the root of g from a, in the descent direction (-sign g0)
            side = 1 if g0 < 0.0 else -1
            ga = g0
            phia = phi0
            step = x - a
            b = a
            gb = g0
            bound = 0
            for r in range(CD_ROOT_ITERS):
                b = a + step
                b = -tmax if b < -tmax else (tmax if b > tmax else b)
                phib = cd_phi(net, w, W, j, b, own, &gb)
                if not (gb == gb):
                    step = 0.25 * step
                    continue
                if (gb >= 0.0) if side > 0 else (gb <= 0.0):
                    break           # the slope changed sign in (a, b]: a root
                if not (phib <= phia + NOISE * (1.0 + fabs(phia))):
                    step = 0.25 * step      # G rose past a bump: a minimum lies nearer a
                    continue
                if b == tmax or b == -tmax:
                    bound = 1
                    break
                a = b
                ga = gb
                phia = phib
                step = 2.0 * step
            else:
                bound = 2
            if bound == 2:
                xm = a
            elif bound:
                xm = b
            else:
                # root in between a (g on the descent side) and b (g on the other): Illinois
                xm = b
                gx = gb
                for r in range(CD_ROOT_ITERS):
                    if fabs(mf_sigmoid(b) - mf_sigmoid(a)) <= 1e-3 * tol or fabs(b - a) <= 1e-12 * (1.0 + fabs(a)):
                        break
                    if ga < INFINITY and ga > -INFINITY and gb < INFINITY and gb > -INFINITY and gb != ga:
                        xm = b - gb * (b - a) / (gb - ga)
                    else:
                        xm = 0.5 * (a + b)
                    if not ((xm - a) * (xm - b) < 0.0):
                        xm = 0.5 * (a + b)
                    cd_phi(net, w, W, j, xm, own, &gx)
                    if not (gx == gx):
                        gx = -INFINITY if side > 0 else INFINITY
                    if gx == 0.0:
                        break
                    if (gx > 0.0) == (gb > 0.0):
                        b = xm
                        gb = gx
                        ga = 0.5 * ga
                    else:
                        a = b
                        ga = gb
                        b = xm
                        gb = gx
            phin = cd_phi(net, w, W, j, xm, own, &gn)
            noise = NOISE * (1.0 + fabs(phi0))
            if phin <= phi0 + noise:
                x = fabs(mf_sigmoid(xm) - W.u[j])
                if x > sweep_res:
                    sweep_res = x
                cd_set(net, w, W, j, xm)
        if sweep_res == 0.0:
            break       # no unit moved: G cannot be lowered one unit at a time
    n_iter[0] = sweep
    G_out[0] = G if status != MF_EOVERFLOW else NAN
    for i in range(n):
        u_out[i] = W.u[i] if W.fixed[i] else mf_sigmoid(W.t[i])
    if n_barren:
        set_barren_means(net, w, h, W.barren, u_out)
    if status != MF_OK:
        conv[0] = 0
    return status


cdef void fill_net(Net *net, const Dag *g, int order, int act, int accel) noexcept nogil:
    net.g = g[0]
    net.order = order
    net.act = act
    net.t_max = T_MAX
    net.accel = accel
    net.sat_ok = 0
    net.early_cd = 0


cdef int qn_direction(const Net *net, Work *W, const double *t, const double *dt_fp,
                      Py_ssize_t mem, Py_ssize_t head) noexcept nogil:
    """W.dq = -H q by the L-BFGS two-loop recursion over the stored pairs, with the initial
    inverse Hessian gamma diag(1 / v) (gamma = 1 is the fixed-point step), shortened so that
    no logit moves further than the fixed-point step's largest move or 1 (whichever is larger:
    a long step can land where G is flat to round-off, u saturated), then bent back into the
    box |t| <= T_MAX.  Returns 0 if the result is not finite."""
    cdef Py_ssize_t n = net.g.n, i, k, j
    cdef double a, b, yhy, gam, cap = 1.0, big = 0.0
    cdef double *r = W.dq
    cdef double *sj
    cdef double *yj
    for i in range(n):
        r[i] = 0.0 if W.fixed[i] else W.q[i]
    for k in range(mem):
        j = (head - 1 - k + MEM) % MEM
        sj = W.Sm + j * n
        yj = W.Ym + j * n
        a = 0.0
        for i in range(n):
            if not W.fixed[i]:
                a = a + sj[i] * r[i]
        a = a * W.rho[j]
        W.alph[j] = a
        for i in range(n):
            if not W.fixed[i]:
                r[i] -= a * yj[i]
    j = (head - 1 + MEM) % MEM
    yj = W.Ym + j * n
    yhy = 0.0
    for i in range(n):
        if not W.fixed[i]:
            yhy = yhy + yj[i] * yj[i] / W.vcur[i]
    gam = 1.0 / (W.rho[j] * yhy)
    for i in range(n):
        if not W.fixed[i]:
            r[i] *= gam / W.vcur[i]
    for k in range(mem - 1, -1, -1):
        j = (head - 1 - k + MEM) % MEM
        sj = W.Sm + j * n
        yj = W.Ym + j * n
        b = 0.0
        for i in range(n):
            if not W.fixed[i]:
                b = b + yj[i] * r[i]
        b = b * W.rho[j]
        for i in range(n):
            if not W.fixed[i]:
                r[i] += (W.alph[j] - b) * sj[i]
    for i in range(n):
        if not W.fixed[i]:
            if fabs(dt_fp[i]) > cap:
                cap = fabs(dt_fp[i])
            if not (fabs(r[i]) <= big):
                big = fabs(r[i])
    if not (big < INFINITY):
        return 0
    cap = cap / big if big > cap else 1.0
    for i in range(n):
        if W.fixed[i]:
            continue
        a = t[i] - cap * r[i]
        a = -net.t_max if a < -net.t_max else (net.t_max if a > net.t_max else a)
        r[i] = a - t[i]
    return 1


# ------------------------------------------------------------------ the blocked dense path
# Layered (dense) nets: every unit's parents are one contiguous range of units and consecutive
# units share it (a "group": rows i0..i1 of a dense weight matrix over parents p0..p0+K, stored
# contiguously in w).  A block of patterns of one net is then evaluated together: the means of
# all its patterns as (unit x pattern) arrays, Mbar and V by matrix products (mf_gemm_nn),
# the per-unit terms lane-wise, the reverse pass by transposed products (mf_gemm_tn).  Each
# pattern runs the same solver as solve_item (the same steps, tests and line search) as a
# resumable state machine: every round evaluates the pending trial points of all unfinished
# patterns of the block at once.  Blocks are cut from the items alone (runs of one net, at most
# BLOCK items, fewer when the items are few: see block_cap), never from the thread count; a
# pattern's answer does not depend on the block it shares either (its state machine is its own
# and every product sums in one fixed order), so the answers are the same for any number of
# threads.
DEF BLOCK = 64          # patterns per block, at most
DEF BLOCK_SPLIT = 32    # items are cut into at least this many blocks while a block keeps ...
DEF BLOCK_LEAST = 16    # ... at least this many patterns: the threads' shares then differ by
                        # at most about half a block (1000 patterns: 32 blocks of 32, which
                        # two threads split 1.90x against 1.83x with 16 blocks of 64)
DEF BLOCK_MIN = 8       # shorter runs of one net go through the per-item path
DEF PH_INIT = 0
DEF PH_FULL = 1
DEF PH_LS = 2
DEF PH_DONE = 3


cdef struct Group:
    Py_ssize_t i0       # rows i0..i1-1
    Py_ssize_t i1
    Py_ssize_t p0       # parents p0..p0+K-1
    Py_ssize_t K
    Py_ssize_t e0       # w[e0 + (i - i0) K + j] = w_{i, p0 + j}


cdef struct PS:         # one pattern's solver state (solve_item's locals), over its free units
    Py_ssize_t nf       # free units fi[0..nf)
    intp_t *fi
    uint8_t *barren     # n: the pattern's barren units (fixed lanes whose terms are left out)
    Py_ssize_t n_barren
    double *uf          # n: the fixed units' values, NaN at free ones
    double *t           # nf each: logits, trial logits, step, dG/du at t / trial / lo,
    double *tt          # u and v at t / trial / lo, dG/dt at t and before, a direction
    double *dt
    double *gcur
    double *gtry
    double *glo
    double *ucur
    double *utry
    double *ulo
    double *vcur
    double *vtry
    double *vlo
    double *q
    double *qprev
    double *dq
    double *Sm          # MEM x nf
    double *Ym
    double rho[MEM]
    double alph[MEM]
    double G
    double D
    double noise
    double lo
    double hi
    double flo
    double fhi
    double dlo
    double dhi
    double lam
    Py_ssize_t it
    Py_ssize_t ls
    Py_ssize_t mem
    Py_ssize_t head
    Py_ssize_t stalls
    int pending
    int qn
    int phase
    int status
    int8_t conv


cdef inline Py_ssize_t PS_DOUBLES(Py_ssize_t n) noexcept nogil:
    return (16 + 2 * MEM) * n + n


cdef void ps_carve(PS *P, double *d, intp_t *fi, Py_ssize_t n) noexcept nogil:
    P.uf = d
    d = d + n
    P.t = d
    P.tt = d + n
    P.dt = d + 2 * n
    P.gcur = d + 3 * n
    P.gtry = d + 4 * n
    P.glo = d + 5 * n
    P.ucur = d + 6 * n
    P.utry = d + 7 * n
    P.ulo = d + 8 * n
    P.vcur = d + 9 * n
    P.vtry = d + 10 * n
    P.vlo = d + 11 * n
    P.q = d + 12 * n
    P.qprev = d + 13 * n
    P.dq = d + 14 * n
    P.Sm = d + 16 * n
    P.Ym = d + (16 + MEM) * n
    P.fi = fi


cdef inline void swap(double **a, double **b) noexcept nogil:
    cdef double *tmp = a[0]
    a[0] = b[0]
    b[0] = tmp


cdef void ps_finish(const Net *net, PS *P, double *G_out, double *u_out, intp_t *n_iter,
                    int8_t *conv, int8_t *status) noexcept nogil:
    cdef Py_ssize_t i
    P.phase = PH_DONE
    n_iter[0] = P.it
    G_out[0] = P.G if P.status != MF_EOVERFLOW else NAN
    for i in range(net.g.n):
        u_out[i] = P.uf[i]
    for i in range(P.nf):
        u_out[P.fi[i]] = mf_sigmoid(P.t[i])
    if P.status != MF_OK:
        P.conv = 0
    conv[0] = P.conv
    status[0] = P.status


cdef int ps_qn_direction(PS *P, double tmax) noexcept nogil:
    """qn_direction over the free units (P.dq = the quasi-Newton step, capped and boxed)."""
    cdef Py_ssize_t nf = P.nf, i, k, j, mem = P.mem, head = P.head
    cdef double a, b, yhy, gam, cap = 1.0, big = 0.0
    cdef double *r = P.dq
    cdef double *sj
    cdef double *yj
    for i in range(nf):
        r[i] = P.q[i]
    for k in range(mem):
        j = (head - 1 - k + MEM) % MEM
        sj = P.Sm + j * nf
        yj = P.Ym + j * nf
        a = mfp_dot(nf, sj, r) * P.rho[j]
        P.alph[j] = a
        for i in range(nf):
            r[i] -= a * yj[i]
    j = (head - 1 + MEM) % MEM
    yj = P.Ym + j * nf
    yhy = 0.0
    for i in range(nf):
        yhy = yhy + yj[i] * yj[i] / P.vcur[i]
    gam = 1.0 / (P.rho[j] * yhy)
    for i in range(nf):
        r[i] *= gam / P.vcur[i]
    for k in range(mem - 1, -1, -1):
        j = (head - 1 - k + MEM) % MEM
        sj = P.Sm + j * nf
        yj = P.Ym + j * nf
        b = mfp_dot(nf, yj, r) * P.rho[j]
        for i in range(nf):
            r[i] += (P.alph[j] - b) * sj[i]
    for i in range(nf):
        if fabs(P.dt[i]) > cap:
            cap = fabs(P.dt[i])
        if not (fabs(r[i]) <= big):
            big = fabs(r[i])
    if not (big < INFINITY):
        return 0
    cap = cap / big if big > cap else 1.0
    for i in range(nf):
        a = P.t[i] - cap * r[i]
        a = -tmax if a < -tmax else (tmax if a > tmax else a)
        r[i] = a - P.t[i]
    return 1


cdef inline double ps_max_du(const PS *P, double step) noexcept nogil:
    cdef Py_ssize_t i
    cdef double m = 0.0, x
    for i in range(P.nf):
        x = P.vcur[i] * fabs(step * P.dt[i])
        if x > m:
            m = x
    return m


cdef int ps_begin(const Net *net, PS *P, double tol, Py_ssize_t max_iter) noexcept nogil:
    """The head of solve_item's loop at an accepted point (P.G, P.gcur, P.ucur, P.vcur): the
    convergence test and the next direction; sets the full-step trial point and returns 1, or
    0 when done."""
    cdef Py_ssize_t nf = P.nf, i, hn = P.head * P.nf
    cdef double tmax = net.t_max, res = 0.0, sy, ss, yy, Dq, D
    cdef int clipped, flags
    flags = mfp_image(nf, tmax, net.sat_ok, P.t, P.gcur, P.ucur, P.vcur, P.dt, P.q, &res)
    clipped = flags & 1
    if flags & 2:
        return 0
    if res <= tol:
        P.conv = not clipped
        return 0
    if P.it >= max_iter:
        return 0
    if P.pending:
        P.pending = 0
        for i in range(nf):
            P.Ym[hn + i] = P.q[i] - P.qprev[i]
        sy = mfp_dot(nf, P.Sm + hn, P.Ym + hn)
        ss = mfp_dot(nf, P.Sm + hn, P.Sm + hn)
        yy = mfp_dot(nf, P.Ym + hn, P.Ym + hn)
        if sy > 1e-10 * sqrt(ss * yy) and sy < INFINITY:
            P.rho[P.head] = 1.0 / sy
            P.head = (P.head + 1) % MEM
            if P.mem < MEM:
                P.mem += 1
    for i in range(nf):
        P.qprev[i] = P.q[i]
    D = mfp_dot(nf, P.q, P.dt)
    if P.qn and P.mem > 0 and ps_qn_direction(P, tmax):
        Dq = mfp_dot(nf, P.q, P.dq)
        if Dq < 0.0:
            swap(&P.dt, &P.dq)
            D = Dq
        else:
            P.mem = 0
    if not (D < 0.0):
        return 0
    P.D = D
    P.it += 1
    P.noise = NOISE * (1.0 + fabs(P.G))
    for i in range(nf):
        P.tt[i] = P.t[i] + P.dt[i]
    P.phase = PH_FULL
    return 1


cdef inline void ps_ls_trial(PS *P) noexcept nogil:
    """The next line-search point from the bracket (solve_item's rule)."""
    cdef double span = P.hi - P.lo, lam, den
    cdef Py_ssize_t i
    if P.dhi > 0.0 and P.dhi < INFINITY and P.fhi <= P.G + C_ARMIJO * P.hi * P.D + P.noise:
        lam = P.lo - P.dlo * span / (P.dhi - P.dlo)
    else:
        den = 2.0 * (P.fhi - P.flo - P.dlo * span)
        lam = P.lo - P.dlo * span * span / den if (den > 0.0 and P.fhi < INFINITY) else P.lo + 0.5 * span
    if lam < P.lo + 0.1 * span:
        lam = P.lo + 0.1 * span
    elif lam > P.hi - 0.1 * span:
        lam = P.hi - 0.1 * span
    P.lam = lam
    for i in range(P.nf):
        P.tt[i] = P.t[i] + lam * P.dt[i]
    P.phase = PH_LS


cdef int ps_consume(const Net *net, PS *P, double f, int st, double tol,
                    Py_ssize_t max_iter) noexcept nogil:
    """Take the value f (status st), gradient P.gtry and means P.utry, P.vtry at the pending
    trial point; returns 1 if a new trial point is pending, 0 when the pattern is done."""
    cdef Py_ssize_t nf = P.nf, i, hn
    cdef double d, step
    cdef int found = 0
    if P.phase == PH_INIT:
        P.G = f
        swap(&P.gcur, &P.gtry)
        swap(&P.ucur, &P.utry)
        swap(&P.vcur, &P.vtry)
        P.status = st
        if st != MF_OK:
            return 0
        return ps_begin(net, P, tol, max_iter)
    if st != MF_OK:
        f = INFINITY
    d = INFINITY
    if f < INFINITY:
        d = mfp_dot3(nf, P.gtry, P.vtry, P.dt)
    if P.phase == PH_FULL:
        if f <= P.G + C_ARMIJO * P.D + P.noise and d <= -C_CURV * P.D:
            P.stalls = P.stalls + 1 if (f >= P.G and ps_max_du(P, 1.0) <= tol) else 0
            swap(&P.t, &P.tt)
            swap(&P.gcur, &P.gtry)
            swap(&P.ucur, &P.utry)
            swap(&P.vcur, &P.vtry)
            P.G = f
            if P.stalls >= MAX_STALLS:
                return 0
            hn = P.head * nf
            for i in range(nf):
                P.Sm[hn + i] = P.dt[i]
            P.pending = 1
            return ps_begin(net, P, tol, max_iter)
        if net.accel == 1:
            P.qn = 1
        P.lo = 0.0
        P.flo = P.G
        P.dlo = P.D
        P.hi = 1.0
        P.fhi = f
        P.dhi = d
        P.ls = 0
        ps_ls_trial(P)
        return 1
    # PH_LS: the trial at lam
    if not (f <= P.G + C_ARMIJO * P.lam * P.D + P.noise and f <= P.flo + P.noise):
        P.hi = P.lam
        P.fhi = f
        P.dhi = d
    elif fabs(d) <= -C_CURV * P.D:
        found = 1
    elif d > 0.0:
        P.hi = P.lam
        P.fhi = f
        P.dhi = d
    else:
        P.lo = P.lam
        P.flo = f
        P.dlo = d
        swap(&P.glo, &P.gtry)
        swap(&P.ulo, &P.utry)
        swap(&P.vlo, &P.vtry)
    P.ls += 1
    if not found and P.ls < MAX_LS and not (P.hi - P.lo <= 1e-13):
        ps_ls_trial(P)
        return 1
    if found:
        P.stalls = P.stalls + 1 if (f >= P.G and ps_max_du(P, P.lam) <= tol) else 0
        swap(&P.t, &P.tt)
        swap(&P.gcur, &P.gtry)
        swap(&P.ucur, &P.utry)
        swap(&P.vcur, &P.vtry)
        P.G = f
        step = P.lam
    elif P.lo > 0.0:
        P.stalls = P.stalls + 1 if (P.flo >= P.G and ps_max_du(P, P.lo) <= tol) else 0
        for i in range(nf):
            P.t[i] = P.t[i] + P.lo * P.dt[i]
        swap(&P.gcur, &P.glo)
        swap(&P.ucur, &P.ulo)
        swap(&P.vcur, &P.vlo)
        P.G = P.flo
        step = P.lo
    else:
        return 0
    if P.stalls >= MAX_STALLS:
        return 0
    hn = P.head * nf
    for i in range(nf):
        P.Sm[hn + i] = step * P.dt[i]
    P.pending = 1
    return ps_begin(net, P, tol, max_iter)


cdef void block_eval(const Net *net, const Group *groups, Py_ssize_t n_groups, const double *w,
                     const double *w2, const double *h, double *bw, const intp_t *rowfree,
                     const intp_t *rowbarren, const uint8_t *BM, Py_ssize_t m,
                     int refresh) noexcept nogil:
    """G and dG/du (free lanes) of m patterns at once; lane-major arrays of stride m in bw.
    Rows of units fixed in every lane keep their means from the last call unless refresh.
    Lanes marked in BM (row-major n x m; rowbarren[k] of them in row k) are barren units:
    their terms are left out of F and nothing of theirs reaches their parents."""
    cdef Py_ssize_t n = net.g.n, k, l, g, nr, a
    cdef int order = net.order
    cdef double *T = bw
    cdef double *UF = bw + n * m
    cdef double *U = bw + 2 * n * m
    cdef double *Vv = bw + 3 * n * m
    cdef double *C = bw + 4 * n * m
    cdef double *M = bw + 5 * n * m
    cdef double *V = bw + 6 * n * m
    cdef double *UB = bw + 7 * n * m
    cdef double *MB = bw + 8 * n * m
    cdef double *VB = bw + 9 * n * m
    cdef double *GUM = bw + 10 * n * m
    cdef double *VBAR = bw + 11 * n * m
    cdef double *GU = bw + 12 * n * m
    cdef double *negH = bw + 13 * n * m
    cdef double *F = negH + m
    cdef double *Fk = F + m         # row k's terms alone, when some of its lanes are barren
    cdef double *Fr
    cdef const Group *gr
    cdef int need
    for l in range(m):
        negH[l] = 0.0
        F[l] = 0.0
    for k in range(n):
        if rowfree[k] == m:
            mfp_means_free(m, T + k * m, U + k * m, Vv + k * m, C + k * m, negH)
        elif refresh or rowfree[k] > 0:
            mfp_means_mixed(m, rowfree[k] == 0, T + k * m, UF + k * m, U + k * m, Vv + k * m,
                            C + k * m, negH, GU)
        for l in range(m):
            M[k * m + l] = h[k]
            V[k * m + l] = 0.0
            GUM[k * m + l] = 0.0
            VBAR[k * m + l] = 0.0
    for g in range(n_groups):
        gr = &groups[g]
        nr = gr.i1 - gr.i0
        # M[i] += sum_j w_ij U[j], V[i] += sum_j w_ij^2 Vv[j]   (rows: units, lanes: patterns)
        mf_gemm_nn(nr, m, gr.K, w + gr.e0, gr.K, U + gr.p0 * m, m, M + gr.i0 * m, m)
        if order >= 12:
            mf_gemm_nn(nr, m, gr.K, w2 + gr.e0, gr.K, Vv + gr.p0 * m, m, V + gr.i0 * m, m)
    for k in range(n):
        Fr = F
        if rowbarren[k]:
            Fr = Fk
            for l in range(m):
                Fk[l] = 0.0
        if order >= 12:
            mfp_sig_coef12(m, M + k * m, U + k * m, V + k * m, Fr, UB + k * m, MB + k * m,
                           VB + k * m)
        else:
            mfp_sig_coef11(m, M + k * m, U + k * m, Fr, UB + k * m, MB + k * m)
        if rowbarren[k]:
            for l in range(m):
                if BM[k * m + l]:
                    UB[k * m + l] = 0.0
                    MB[k * m + l] = 0.0
                    if order >= 12:
                        VB[k * m + l] = 0.0
                else:
                    F[l] += Fk[l]
    for g in range(n_groups):
        gr = &groups[g]
        need = 0
        for a in range(gr.p0, gr.p0 + gr.K):
            if rowfree[a]:
                need = 1
                break
        if not need:
            continue
        nr = gr.i1 - gr.i0
        # GUM[j] += sum_i w_ij MB[i], VBAR[j] += sum_i w_ij^2 VB[i]   (the reverse pass)
        mf_gemm_tn(gr.K, m, nr, w + gr.e0, gr.K, MB + gr.i0 * m, m, GUM + gr.p0 * m, m)
        if order >= 12:
            mf_gemm_tn(gr.K, m, nr, w2 + gr.e0, gr.K, VB + gr.i0 * m, m, VBAR + gr.p0 * m, m)
    for k in range(n):
        if rowfree[k]:
            mfp_gu_row(m, order, UB + k * m, VBAR + k * m, C + k * m, GUM + k * m, T + k * m,
                       GU + k * m)
    for l in range(m):
        F[l] = negH[l] + F[l]


cdef void solve_block(const Net *net, const Group *groups, Py_ssize_t n_groups, const double *w,
                      const double *h, const double *clamp, const double *init, Py_ssize_t cnt,
                      char *mem, double tol, Py_ssize_t max_iter, double *G_out, double *u_out,
                      intp_t *n_iter, int8_t *conv, int8_t *status) noexcept nogil:
    """Solve cnt consecutive items of one net (rows of clamp/init/u_out of length n)."""
    cdef Py_ssize_t n = net.g.n, nnz = net.g.nnz, a, i, j, k, l, m, e, nf
    cdef double *bw = <double *> mem
    cdef double *w2 = bw + 13 * n * BLOCK + 3 * BLOCK
    cdef double *psd = w2 + nnz
    cdef PS *ps = <PS *> (psd + BLOCK * PS_DOUBLES(n))
    cdef intp_t *lanes = <intp_t *> (ps + BLOCK)
    cdef intp_t *rowfree = lanes + BLOCK
    cdef intp_t *fis = rowfree + n
    cdef intp_t *rowbarren = fis + BLOCK * n
    cdef uint8_t *psb = <uint8_t *> (rowbarren + n)     # BLOCK x n: each pattern's barren units
    cdef uint8_t *BM = psb + BLOCK * n                  # n x m: the same, lane-major
    cdef uint8_t *free_ = BM + BLOCK * n
    cdef PS *P
    cdef double x, tmax = net.t_max
    cdef double *T
    cdef double *UF
    cdef double *GU
    cdef double *U
    cdef double *V
    cdef double *Gv
    cdef Py_ssize_t prev_m = -1
    cdef int changed
    for e in range(nnz):
        w2[e] = w[e] * w[e]
    for a in range(cnt):
        P = &ps[a]
        ps_carve(P, psd + a * PS_DOUBLES(n), fis + a * n, n)
        P.it = 0
        P.ls = 0
        P.mem = 0
        P.head = 0
        P.stalls = 0
        P.pending = 0
        P.qn = net.accel == 2
        P.status = MF_OK
        P.conv = 0
        P.G = INFINITY
        P.barren = psb + a * n
        P.n_barren = barren_of_clamp(&net.g, clamp + a * n, free_, P.barren)
        nf = 0
        for i in range(n):
            x = clamp[a * n + i]
            if x == x or P.barren[i]:
                P.uf[i] = x if x == x else 0.0  # a barren lane: fixed, its terms left out
                continue
            P.uf[i] = NAN
            P.fi[nf] = i
            x = 0.5 if init == NULL else init[a * n + i]
            if x <= 0.0:
                x = -tmax
            elif x >= 1.0:
                x = tmax
            else:
                x = log(x) - log1p(-x)
                x = -tmax if x < -tmax else (tmax if x > tmax else x)
            P.t[nf] = x
            P.tt[nf] = x
            nf += 1
        P.nf = nf
        P.phase = PH_INIT
    while True:
        m = 0
        for a in range(cnt):
            if ps[a].phase != PH_DONE:
                lanes[m] = a
                m += 1
        if m == 0:
            break
        T = bw
        UF = bw + n * m
        changed = m != prev_m       # finished patterns never come back: same m, same lanes
        prev_m = m
        if changed:
            for k in range(n):
                rowfree[k] = 0
                rowbarren[k] = 0
            for l in range(m):
                P = &ps[lanes[l]]
                for j in range(P.nf):
                    rowfree[P.fi[j]] += 1
                if P.n_barren:
                    for k in range(n):
                        BM[k * m + l] = P.barren[k]
                        rowbarren[k] += P.barren[k]
                else:
                    for k in range(n):
                        BM[k * m + l] = 0
            for k in range(n):
                if rowfree[k] < m:
                    for l in range(m):
                        UF[k * m + l] = ps[lanes[l]].uf[k]
                        T[k * m + l] = 0.0
        for l in range(m):
            P = &ps[lanes[l]]
            for j in range(P.nf):
                T[P.fi[j] * m + l] = P.tt[j]
        block_eval(net, groups, n_groups, w, w2, h, bw, rowfree, rowbarren, BM, m, changed)
        GU = bw + 12 * n * m
        U = bw + 2 * n * m
        V = bw + 3 * n * m
        Gv = bw + 13 * n * m + m
        for l in range(m):
            a = lanes[l]
            P = &ps[a]
            for j in range(P.nf):
                k = P.fi[j] * m + l
                P.gtry[j] = GU[k]
                P.utry[j] = U[k]
                P.vtry[j] = V[k]
            x = Gv[l]
            if not ps_consume(net, P, x, MF_OK if fabs(x) < INFINITY else MF_EOVERFLOW, tol,
                              max_iter):
                ps_finish(net, P, &G_out[a], &u_out[a * n], &n_iter[a], &conv[a], &status[a])
                if P.n_barren:
                    set_barren_means(net, w, h, P.barren, &u_out[a * n])


cdef inline Py_ssize_t BLOCK_BYTES(Py_ssize_t n, Py_ssize_t nnz) noexcept nogil:
    return ((13 * n * BLOCK + 3 * BLOCK + nnz + BLOCK * PS_DOUBLES(n)) * sizeof(double)
            + BLOCK * sizeof(PS) + (BLOCK + 2 * n + BLOCK * n) * sizeof(intp_t)
            + 2 * BLOCK * n + n + 64)


cdef Py_ssize_t find_groups(const Net *net, Group *groups) noexcept nogil:
    """The dense groups of the structure (groups may be NULL: count only), or -1 when some
    unit's parents are not one contiguous range of units."""
    cdef Py_ssize_t n = net.g.n, i, j, e0, K, p0, ng = 0
    cdef Py_ssize_t cur_p0 = -1, cur_K = -1
    for i in range(n):
        e0 = net.g.par_ptr[i]
        K = net.g.par_ptr[i + 1] - e0
        if K == 0:
            cur_K = -1
            continue
        p0 = net.g.par_idx[e0]
        for j in range(K):
            if net.g.par_idx[e0 + j] != p0 + j:
                return -1
        if K == cur_K and p0 == cur_p0:
            if groups != NULL:
                groups[ng - 1].i1 = i + 1
            continue
        if groups != NULL:
            groups[ng].i0 = i
            groups[ng].i1 = i + 1
            groups[ng].p0 = p0
            groups[ng].K = K
            groups[ng].e0 = e0
        ng += 1
        cur_K = K
        cur_p0 = p0
    return ng


cdef int check_args(const intp_t[::1] par_ptr, const intp_t[::1] par_idx,
                    const intp_t[::1] ch_ptr, const intp_t[::1] ch_idx, const intp_t[::1] ch_w,
                    const double[:, ::1] w, const double[:, ::1] h, const intp_t[::1] net_of,
                    const double[:, ::1] clamp, int order, int act, int n_threads,
                    Dag *g) noexcept nogil:
    if check_dag(par_ptr, par_idx, ch_ptr, ch_idx, ch_w, g) != MF_OK:
        return MF_EBADARG
    if check_items(g, w, h, net_of, clamp) != MF_OK:
        return MF_EBADARG
    if not (order == 11 or order == 12 or order == 22) or not (act == SIGMOID or act == NOISY_OR):
        return MF_EBADARG
    if n_threads < 1:
        return MF_EBADARG
    return MF_OK


cdef struct SolveJob:       # run_solve's loops, for mf_parallel_for (plain C threads)
    Net *net
    const double *w
    Py_ssize_t w_stride
    const double *h
    Py_ssize_t h_stride
    const intp_t *net_of
    const double *clamp
    const double *init
    double tol
    Py_ssize_t max_iter
    double *G
    double *u
    intp_t *n_iter
    int8_t *conv
    int8_t *status
    const intp_t *bstart
    Group *groups
    Py_ssize_t ng
    int use_blocks
    char **block            # one scratch block per thread (NULL: that thread's items fail)
    char **bmem             # one dense-block scratch per thread (NULL: per item instead)


cdef void solve_body(void *ctx, Py_ssize_t b, int thread) noexcept nogil:
    """Block b of items: the blocked dense path when it applies, else one item at a time."""
    cdef SolveJob *j = <SolveJob *> ctx
    cdef Net *net = j.net
    cdef Py_ssize_t n = net.g.n, nnz = net.g.nnz, p, e
    cdef Py_ssize_t np_ = j.bstart[b], nq = j.bstart[b + 1] - j.bstart[b]
    cdef char *block = j.block[thread]
    cdef char *bmem = j.bmem[thread] if j.use_blocks else NULL
    cdef const double *wrow = j.w + (j.net_of[np_] * j.w_stride if j.net_of != NULL else 0)
    cdef const double *irow
    cdef double wmax
    cdef Work W
    cdef int st
    if j.use_blocks and nq >= BLOCK_MIN and bmem != NULL:
        wmax = 0.0
        for e in range(nnz):
            if fabs(wrow[e]) > wmax:
                wmax = fabs(wrow[e])
        if wmax <= 1e150:
            solve_block(net, j.groups, j.ng, wrow,
                        j.h + (j.net_of[np_] * j.h_stride if j.net_of != NULL else 0),
                        j.clamp + np_ * n, j.init + np_ * n if j.init != NULL else NULL, nq,
                        bmem, j.tol, j.max_iter, j.G + np_, j.u + np_ * n, j.n_iter + np_,
                        j.conv + np_, j.status + np_)
            return
    for p in range(j.bstart[b], j.bstart[b + 1]):
        if block == NULL:
            j.status[p] = MF_ENOMEM
            continue
        W = make_work(block, n)
        wrow = (j.w + (j.net_of[p] * j.w_stride if j.net_of != NULL else 0)) if nnz > 0 else NULL
        irow = j.init + p * n if j.init != NULL else NULL
        st = solve_item(net, wrow, j.h + (j.net_of[p] * j.h_stride if j.net_of != NULL else 0),
                        j.clamp + p * n, irow, &W, j.tol, j.max_iter, &j.G[p], j.u + p * n,
                        &j.n_iter[p], &j.conv[p])
        j.status[p] = MF_OK if st == G_INF else st


cdef void cd_body(void *ctx, Py_ssize_t p, int thread) noexcept nogil:
    """Item p, left unconverged with a finite G by the fixed-point iteration: coordinate
    descent on G from the same start, with three quarters of what is left of the budget; where
    it ends unconverged too (creeping along a valley of G, where one unit at a time barely
    moves), the fixed-point iteration (line search, quasi-Newton corrections, no early give-up)
    goes on from its point with the rest, and is kept if it converges or ends lower.  The answer is kept if it
    converges or ends below the iteration's."""
    cdef SolveJob *j = <SolveJob *> ctx
    cdef Net *net = j.net
    cdef Net polish
    cdef Py_ssize_t n = net.g.n, e
    cdef char *block = j.block[thread]
    cdef const double *wrow
    cdef const double *irow
    cdef const double *hrow
    cdef double *u2
    cdef double *u3
    cdef double G2 = INFINITY, G3 = INFINITY
    cdef intp_t it2 = 0, it3 = 0, rem
    cdef int8_t conv2 = 0, conv3 = 0
    cdef Work W
    cdef int st
    # the sweeps share the item's budget with the iteration before them: an item that spent it
    # all (the caller's max_iter too small for it) stays as the iteration left it
    if j.conv[p] or j.status[p] != MF_OK or not (j.G[p] < INFINITY) or j.n_iter[p] >= j.max_iter:
        return
    if block == NULL:
        j.status[p] = MF_ENOMEM
        return
    W = make_work(block, n)
    u2 = <double *> (block + WORK_BYTES(n))
    u3 = u2 + n
    wrow = (j.w + (j.net_of[p] * j.w_stride if j.net_of != NULL else 0)) if net.g.nnz > 0 else NULL
    hrow = j.h + (j.net_of[p] * j.h_stride if j.net_of != NULL else 0)
    # from the fixed-point iteration's answer when it ran at least a window (it gave up on
    # progress or its budget: its point is the better start), else from the start
    if j.n_iter[p] >= PROG_WINDOW:
        irow = j.u + p * n
    else:
        irow = j.init + p * n if j.init != NULL else NULL
    rem = j.max_iter - j.n_iter[p]
    st = cd_item(net, wrow, hrow, j.clamp + p * n, irow, &W, j.tol, rem - rem // 4, &G2, u2,
                 &it2, &conv2)
    if st == MF_OK and not conv2 and G2 < INFINITY and rem - it2 > 0:
        polish = net[0]             # (a copy: the net is shared by the threads)
        polish.early_cd = 0
        if solve_item(&polish, wrow, hrow, j.clamp + p * n, u2, &W, j.tol, rem - it2, &G3, u3,
                      &it3, &conv3) == MF_OK and (conv3 or G3 < G2):
            G2 = G3
            conv2 = conv3
            for e in range(n):
                u2[e] = u3[e]
        it2 += it3
    if st == MF_OK and (conv2 or G2 < j.G[p]):
        j.G[p] = G2
        j.conv[p] = conv2
        for e in range(n):
            j.u[p * n + e] = u2[e]
    j.n_iter[p] += it2


cdef int run_solve(Net *net, const double *w, Py_ssize_t w_stride, const double *h,
                   Py_ssize_t h_stride, const intp_t *net_of, Py_ssize_t n_items,
                   const double *clamp, const double *init, double tol, Py_ssize_t max_iter,
                   int n_threads, int cd, double *G, double *u, intp_t *n_iter, int8_t *conv,
                   int8_t *status) noexcept nogil:
    """The solve of every item, arguments checked (net_of NULL: every item on net 0; init
    NULL: 0.5).  Returns MF_OK or MF_ENOMEM (nothing useful written); per item status as
    `solve` describes.  Threads run in plain C (mf_parallel_for): no interpreter needed."""
    cdef Py_ssize_t n = net.g.n, nnz = net.g.nnz
    cdef Py_ssize_t nbytes = WORK_BYTES(n)
    cdef int order = net.order, act = net.act, nt, t
    cdef Py_ssize_t p, q, n_blocks = 0, ng = -1, bbytes = 0, bcap, nb, sz, e
    cdef Group *groups = NULL
    cdef int use_blocks = 0
    cdef intp_t *bstart
    cdef char *ptrs[2 * MF_MAX_THREADS]
    cdef SolveJob job
    net.early_cd = order <= 12 and cd != 0
    if n_items == 0:
        return MF_OK
    # the blocked dense path: sigmoid units, G11/G12, every unit's parents one contiguous range
    # and few groups of units sharing them (a layered net)
    if act == SIGMOID and order <= 12 and nnz > 0 and n < (1 << 24):
        ng = find_groups(net, NULL)
        if ng > 0 and 4 * ng <= n:
            groups = <Group *> malloc(ng * sizeof(Group))
            if groups != NULL:
                find_groups(net, groups)
                use_blocks = 1
                bbytes = BLOCK_BYTES(n, nnz)
    # blocks: runs of consecutive items of one net, at most bcap items (the items alone decide)
    bcap = (n_items + BLOCK_SPLIT - 1) // BLOCK_SPLIT
    if bcap < BLOCK_LEAST:
        bcap = BLOCK_LEAST
    if bcap > BLOCK:
        bcap = BLOCK
    bstart = <intp_t *> malloc((n_items + 1) * sizeof(intp_t))
    if bstart == NULL:
        free(groups)
        return MF_ENOMEM
    # each run of one net in blocks of sz items, sz a multiple of 8 (the products' tiles are 8
    # patterns wide) near run / ceil(run / bcap); a last piece shorter than BLOCK_MIN is not
    # left alone: the rest is one block when it fits, else two halves
    p = 0
    while p < n_items:
        q = p + 1
        while q < n_items and (net_of == NULL or net_of[q] == net_of[p]):
            q += 1
        nb = (q - p + bcap - 1) // bcap
        sz = ((q - p + nb - 1) // nb + 7) // 8 * 8
        while p < q:
            e = p + sz if p + sz < q else q
            if 0 < q - e < BLOCK_MIN:
                e = q if q - p <= BLOCK else p + (q - p) // 2
            bstart[n_blocks] = p
            n_blocks += 1
            p = e
    bstart[n_blocks] = n_items
    job.net = net
    job.w = w
    job.w_stride = w_stride
    job.h = h
    job.h_stride = h_stride
    job.net_of = net_of
    job.clamp = clamp
    job.init = init
    job.tol = tol
    job.max_iter = max_iter
    job.G = G
    job.u = u
    job.n_iter = n_iter
    job.conv = conv
    job.status = status
    job.bstart = bstart
    job.groups = groups
    job.ng = ng
    job.use_blocks = use_blocks
    job.block = ptrs
    job.bmem = ptrs + MF_MAX_THREADS
    nt = mf_clamp_threads(n_threads, n_blocks)
    for t in range(nt):
        ptrs[t] = <char *> malloc(nbytes)
        ptrs[MF_MAX_THREADS + t] = <char *> malloc(bbytes) if use_blocks else NULL
    mf_parallel_for(n_blocks, nt, solve_body, &job)
    for t in range(nt):
        free(ptrs[t])
        free(ptrs[MF_MAX_THREADS + t])
    free(groups)
    free(bstart)
    # items left unconverged with a finite G: coordinate descent on G from the same start,
    # kept if it converges or ends lower (orders 11 and 12)
    q = 0
    if order <= 12 and cd:
        for p in range(n_items):
            if not conv[p] and status[p] == MF_OK and G[p] < INFINITY and n_iter[p] < max_iter:
                q += 1
    if q > 0:
        nt = mf_clamp_threads(n_threads, q)
        for t in range(nt):
            ptrs[t] = <char *> malloc(nbytes + 2 * n * sizeof(double))
        job.groups = NULL
        job.bstart = NULL
        mf_parallel_for(n_items, nt, cd_body, &job)
        for t in range(nt):
            free(ptrs[t])
    return MF_OK


def solve(const intp_t[::1] par_ptr, const intp_t[::1] par_idx, const intp_t[::1] ch_ptr,
          const intp_t[::1] ch_idx, const intp_t[::1] ch_w, const double[:, ::1] w,
          const double[:, ::1] h, const intp_t[::1] net_of, const double[:, ::1] clamp,
          const double[:, ::1] init, bint has_init, int order, int act, double tol,
          Py_ssize_t max_iter, double[::1] G, double[:, ::1] u, intp_t[::1] n_iter,
          int8_t[::1] conv, int8_t[::1] status, int n_threads, int accel=1, int cd=1):
    """Solve dG/du = 0 for every item (outputs in the caller's buffers).

    accel: 0 plain fixed-point steps (with the line search), 1 quasi-Newton corrections once a
    line search was needed, 2 quasi-Newton corrections from the second step on.  cd: 1 (orders
    11 and 12) solve the items left unconverged again by coordinate descent on G, counting a
    unit on the bound |t| = T_MAX whose image lies beyond it as converged; 0 the fixed-point
    iteration only, any unit pushed against the bound unconverged.  Returns MF_OK,
    or MF_EBADARG (nothing written) when a size, index or option is inconsistent; status[p]
    is MF_OK, MF_ENOMEM (no scratch space for the item's thread) or MF_EOVERFLOW (G is not
    finite at the starting point: the weights are too large for this expansion)."""
    cdef Dag g
    cdef Net net
    if check_args(par_ptr, par_idx, ch_ptr, ch_idx, ch_w, w, h, net_of, clamp, order, act,
                  n_threads, &g) != MF_OK:
        return MF_EBADARG
    cdef Py_ssize_t p, n_items = clamp.shape[0]
    if n_items == 0:
        return MF_OK
    if (u.shape[0] != n_items or u.shape[1] != g.n or G.shape[0] != n_items
            or n_iter.shape[0] != n_items or conv.shape[0] != n_items
            or status.shape[0] != n_items or max_iter < 0 or not (tol > 0.0)
            or not (0 <= accel <= 2)
            or (has_init and (init.shape[0] != n_items or init.shape[1] != g.n))):
        return MF_EBADARG
    fill_net(&net, &g, order, act, accel)
    net.sat_ok = order <= 12 and cd != 0
    cdef int rc
    with nogil:
        rc = run_solve(&net, &w[0, 0] if g.nnz > 0 else NULL, w.shape[1], &h[0, 0], h.shape[1],
                       &net_of[0], n_items, &clamp[0, 0], &init[0, 0] if has_init else NULL,
                       tol, max_iter, n_threads, cd, &G[0], &u[0, 0], &n_iter[0], &conv[0],
                       &status[0])
    if rc == MF_ENOMEM:
        status[:] = MF_ENOMEM
    return MF_OK


def evaluate(const intp_t[::1] par_ptr, const intp_t[::1] par_idx, const intp_t[::1] ch_ptr,
             const intp_t[::1] ch_idx, const intp_t[::1] ch_w, const double[:, ::1] w,
             const double[:, ::1] h, const intp_t[::1] net_of, const double[:, ::1] clamp,
             const double[:, ::1] u, int order, int act, bint want_grad, double[::1] G,
             double[:, ::1] gu, double[:, ::1] gw, double[:, ::1] gh, int8_t[::1] status,
             int n_threads):
    """G at the given means (free units' u in [0, 1]; barren units' not read); with want_grad
    also dG/du (free units; 0 for clamped and barren ones; +-inf where a free u is exactly 0
    or 1, the entropy's derivative),
    dG/dw and dG/dh, all partial (the other means held fixed).

    Returns MF_OK or MF_EBADARG (nothing written); status[p] is MF_OK (G may be +inf: a unit
    with u > 0 whose ln f(Mbar) is -inf), MF_ENOMEM or MF_EOVERFLOW (G or its gradient is
    not finite)."""
    cdef Dag g
    cdef Net net
    if check_args(par_ptr, par_idx, ch_ptr, ch_idx, ch_w, w, h, net_of, clamp, order, act,
                  n_threads, &g) != MF_OK:
        return MF_EBADARG
    cdef Py_ssize_t p, i, n = g.n, n_items = clamp.shape[0], nbytes = WORK_BYTES(g.n)
    if (u.shape[0] != n_items or u.shape[1] != n or G.shape[0] != n_items
            or status.shape[0] != n_items):
        return MF_EBADARG
    if want_grad and (gu.shape[0] != n_items or gu.shape[1] != n or gh.shape[0] != n_items
                      or gh.shape[1] != n or gw.shape[0] != n_items or gw.shape[1] != g.nnz):
        return MF_EBADARG
    fill_net(&net, &g, order, act, 0)
    cdef char *block
    cdef Work W
    cdef double x, negH, F
    cdef int st
    cdef const double *wrow
    cdef double *wbar
    block = NULL
    with nogil, parallel(num_threads=n_threads):
        block = <char *> malloc(nbytes)
        for p in prange(n_items, schedule="dynamic", chunksize=8):
            if block == NULL:
                status[p] = MF_ENOMEM
                continue
            W = make_work(block, n)
            negH = eval_setup(&net, &clamp[p, 0] if n > 0 else NULL, &u[p, 0] if n > 0 else NULL,
                              &W)
            wrow = &w[net_of[p], 0] if net.g.nnz > 0 else NULL
            wbar = &gw[p, 0] if (want_grad and net.g.nnz > 0) else NULL
            F = 0.0
            st = core(&net, wrow, &h[net_of[p], 0], &W, want_grad, &gu[p, 0] if want_grad else NULL,
                      wbar, &F)
            G[p] = negH + F if st == MF_OK else INFINITY
            status[p] = MF_OK
            if st == MF_OK and not (fabs(G[p]) < INFINITY):
                status[p] = MF_EOVERFLOW
            if want_grad and st == MF_OK:
                for i in range(n):
                    gh[p, i] = W.mbar[i]
                    if not (fabs(gu[p, i]) < INFINITY and fabs(gh[p, i]) < INFINITY):
                        status[p] = MF_EOVERFLOW
                    # the entropy's derivative log(u / (1 - u)): +-inf at a free mean of
                    # exactly 0 or 1 (saturated, not an overflow; the caller decides)
                    if W.fixed[i]:
                        gu[p, i] = 0.0
                    else:
                        x = W.u[i]
                        gu[p, i] += log(x) - log1p(-x)
                for i in range(net.g.nnz):
                    if not (fabs(gw[p, i]) < INFINITY):
                        status[p] = MF_EOVERFLOW
        free(block)
    return MF_OK


# ------------------------------------------------------------------ the C API
# Declared in mfengine/sbn/_plefka.pxd; the contract is section 2 of mfengine/solver.pxd (and the
# docstring of mf_plefka_solve below).
DEF CAPI_MAX_THREADS = 256
DEF CAPI_MAX_SCALE = 8.98846567431158e+307      # 2^1023: sum |h| + sum |w| of the net


cdef int capi_check_items(Py_ssize_t n_units, Py_ssize_t n_items, const double *clamp,
                          const double *means) noexcept nogil:
    """clamp entries NaN, 0.0 or 1.0; means (if not NULL) in [0, 1] at the free units."""
    cdef Py_ssize_t p, i
    cdef double x
    if n_items > 0 and n_units > 0 and clamp == NULL:
        return MF_EBADARG
    for p in range(n_items * n_units):
        x = clamp[p]
        if x == x:
            if not (x == 0.0 or x == 1.0):
                return MF_EBADARG
        elif means != NULL and not (0.0 <= means[p] <= 1.0):
            return MF_EBADARG
    return MF_OK


cdef int mf_plefka_solve(Py_ssize_t n_units, Py_ssize_t nnz, const Py_ssize_t *par_ptr,
                         const Py_ssize_t *par_idx, const double *weights,
                         const double *biases, int activation, int order, Py_ssize_t n_items,
                         const double *clamp, const double *init, double tol,
                         Py_ssize_t max_iter, int n_threads, double *G, double *u,
                         Py_ssize_t *n_iter, signed char *converged) noexcept nogil:
    """The Plefka solve (mfengine.sbn.plefka.solve with its defaults: quasi-Newton corrections,
    the coordinate-descent fallback, items whose G overflows restarted from the G11 solution)
    over one net in CSR form; the contract is section 2 of mfengine/solver.pxd."""
    cdef Net net
    cdef Dag g
    cdef intp_t *ch = NULL
    cdef int8_t *status = NULL
    cdef Py_ssize_t p, i, n = n_units
    cdef int rc, st, all_ok = 1, over = 0
    cdef double *u11 = NULL
    cdef double G11
    cdef intp_t it11
    cdef int8_t c11, s11
    # the activation and scheme, the structure, finite values (sum |h| + sum |w| <= 2^1023),
    # noisy-OR signs
    if not (activation == SIGMOID or activation == NOISY_OR) or not (
            order == 11 or order == 12 or order == 22) or capi_check_net(
            n_units, nnz, par_ptr, par_idx, weights, biases, activation == NOISY_OR, False,
            CAPI_MAX_SCALE) != MF_OK:
        return MF_EBADARG
    if n_items < 0 or not (tol > 0.0 and tol < INFINITY) or max_iter < 0:
        return MF_EBADARG
    if n_items > 0 and (G == NULL or n_iter == NULL or converged == NULL
                        or (n_units > 0 and u == NULL)):
        return MF_EBADARG
    if n_units > 0 and n_items > (<Py_ssize_t> 0x7fffffffffffffff) // 8 // n_units:
        return MF_EOVERFLOW
    if capi_check_items(n_units, n_items, clamp, init) != MF_OK:
        return MF_EBADARG
    if n_items == 0:
        return MF_OK
    n_threads = 1 if n_threads < 1 else (CAPI_MAX_THREADS if n_threads > CAPI_MAX_THREADS
                                         else n_threads)
    if capi_dag(n, nnz, par_ptr, par_idx, &g, &ch) != MF_OK:
        return MF_ENOMEM
    status = <int8_t *> malloc(n_items)
    u11 = <double *> malloc((n + 1) * sizeof(double))
    if status == NULL or u11 == NULL:
        free(ch)
        free(status)
        free(u11)
        return MF_ENOMEM
    fill_net(&net, &g, order, activation, 1)
    net.sat_ok = order <= 12
    rc = run_solve(&net, weights, 0, biases, 0, NULL, n_items, clamp, init, tol, max_iter,
                   n_threads, 1, G, u, n_iter, <int8_t *> converged, status)
    if rc == MF_OK:
        for p in range(n_items):
            if status[p] == MF_ENOMEM:
                rc = MF_ENOMEM
                break
    if rc == MF_OK and order != 11:
        # items whose G overflows at the start: from the G11 solution, then from it rounded
        for p in range(n_items):
            if status[p] != MF_EOVERFLOW:
                continue
            net.order = 11
            net.sat_ok = 1
            st = run_solve(&net, weights, 0, biases, 0, NULL, 1, clamp + p * n,
                           init + p * n if init != NULL else NULL, tol, max_iter, 1, 1,
                           &G11, u11, &it11, &c11, &s11)
            net.order = order
            net.sat_ok = order <= 12
            if st != MF_OK or s11 != MF_OK:
                continue
            for k in range(2):
                if k == 1:
                    for i in range(n):
                        u11[i] = 0.0 if u11[i] < 0.5 else 1.0
                st = run_solve(&net, weights, 0, biases, 0, NULL, 1, clamp + p * n, u11, tol,
                               max_iter, 1, 1, &G[p], u + p * n, &n_iter[p],
                               <int8_t *> &converged[p], &status[p])
                if st != MF_OK or status[p] != MF_EOVERFLOW:
                    break
    if rc == MF_OK:
        for p in range(n_items):
            if status[p] == MF_ENOMEM:
                rc = MF_ENOMEM
            elif status[p] == MF_EOVERFLOW:
                over = 1
                converged[p] = 0
            elif not converged[p]:
                all_ok = 0
    free(ch)
    free(status)
    free(u11)
    if rc != MF_OK:
        return rc
    if over:
        return MF_EOVERFLOW
    return MF_OK if all_ok else MF_NOT_CONVERGED


cdef int mf_plefka_gradient(Py_ssize_t n_units, Py_ssize_t nnz, const Py_ssize_t *par_ptr,
                            const Py_ssize_t *par_idx, const double *weights,
                            const double *biases, int activation, int order,
                            Py_ssize_t n_items, const double *clamp, const double *u,
                            double *G, double *grad_weights, double *grad_biases) noexcept nogil:
    """G per item at the means u and dG/dw, dG/dh summed over the items (partial derivatives,
    the means held fixed: total ones at a solution of mf_plefka_solve); one thread."""
    cdef Net net
    cdef Dag g
    cdef intp_t *ch = NULL
    cdef char *block = NULL
    cdef double *gu
    cdef double *wbar
    cdef Work W
    cdef Py_ssize_t p, i, e, n = n_units
    cdef double x, negH, F
    cdef int st, rc = MF_OK
    # the activation and scheme, the structure, finite values (sum |h| + sum |w| <= 2^1023),
    # noisy-OR signs
    if not (activation == SIGMOID or activation == NOISY_OR) or not (
            order == 11 or order == 12 or order == 22) or capi_check_net(
            n_units, nnz, par_ptr, par_idx, weights, biases, activation == NOISY_OR, False,
            CAPI_MAX_SCALE) != MF_OK:
        return MF_EBADARG
    if n_items < 0 or (n_items > 0 and n_units > 0 and u == NULL):
        return MF_EBADARG
    if (n_items > 0 and G == NULL) or (nnz > 0 and grad_weights == NULL) or (
            n_units > 0 and grad_biases == NULL):
        return MF_EBADARG
    if n_units > 0 and n_items > (<Py_ssize_t> 0x7fffffffffffffff) // 8 // n_units:
        return MF_EOVERFLOW
    if capi_check_items(n_units, n_items, clamp, u) != MF_OK:
        return MF_EBADARG
    if capi_dag(n, nnz, par_ptr, par_idx, &g, &ch) != MF_OK:
        return MF_ENOMEM
    block = <char *> malloc(WORK_BYTES(n) + (n + nnz + 1) * sizeof(double))
    if block == NULL:
        free(ch)
        return MF_ENOMEM
    gu = <double *> (block + WORK_BYTES(n))
    wbar = gu + n
    fill_net(&net, &g, order, activation, 0)
    for e in range(nnz):
        grad_weights[e] = 0.0
    for i in range(n):
        grad_biases[i] = 0.0
    for p in range(n_items):
        W = make_work(block, n)
        negH = eval_setup(&net, clamp + p * n, u + p * n, &W)
        F = 0.0
        st = core(&net, weights if nnz > 0 else NULL, biases, &W, 1, gu, wbar, &F)
        if st != MF_OK:
            G[p] = INFINITY
            rc = MF_EBADARG         # G = +inf: no gradient (noisy-OR data impossible)
            continue
        G[p] = negH + F
        if not (fabs(G[p]) < INFINITY):
            rc = MF_EOVERFLOW
        for i in range(n):
            grad_biases[i] += W.mbar[i]
        for e in range(nnz):
            grad_weights[e] += wbar[e]
    for i in range(n):
        if not (fabs(grad_biases[i]) < INFINITY):
            rc = MF_EOVERFLOW if rc == MF_OK else rc
    for e in range(nnz):
        if not (fabs(grad_weights[e]) < INFINITY):
            rc = MF_EOVERFLOW if rc == MF_OK else rc
    free(block)
    free(ch)
    return rc


# Exported C symbols for C callers (csrc/mfengine_solver.h): the same functions, linkable, and
# needing no interpreter (their threads run through mf_parallel_for).
cdef public int mfengine_plefka_solve(
        Py_ssize_t n_units, Py_ssize_t nnz, const Py_ssize_t *par_ptr, const Py_ssize_t *par_idx,
        const double *weights, const double *biases, int activation, int order,
        Py_ssize_t n_items, const double *clamp, const double *init, double tol,
        Py_ssize_t max_iter, int n_threads, double *G, double *u, Py_ssize_t *n_iter,
        signed char *converged) noexcept nogil:
    return mf_plefka_solve(n_units, nnz, par_ptr, par_idx, weights, biases, activation, order,
                           n_items, clamp, init, tol, max_iter, n_threads, G, u, n_iter,
                           converged)


cdef public int mfengine_plefka_gradient(
        Py_ssize_t n_units, Py_ssize_t nnz, const Py_ssize_t *par_ptr, const Py_ssize_t *par_idx,
        const double *weights, const double *biases, int activation, int order,
        Py_ssize_t n_items, const double *clamp, const double *u, double *G,
        double *grad_weights, double *grad_biases) noexcept nogil:
    return mf_plefka_gradient(n_units, nnz, par_ptr, par_idx, weights, biases, activation, order,
                              n_items, clamp, u, G, grad_weights, grad_biases)


def _capi_solve(Py_ssize_t n_units, Py_ssize_t nnz, par_ptr, par_idx, weights, biases,
                int activation, int order, Py_ssize_t n_items, clamp, init, double tol,
                Py_ssize_t max_iter, int n_threads, G, u, n_iter, converged):
    """Test hook: mf_plefka_solve on buffers (None passes NULL); returns its status.  The
    sizes are the caller's, unchecked against the buffers: tests only."""
    cdef const Py_ssize_t[::1] pp = par_ptr
    cdef const Py_ssize_t[::1] pi = par_idx
    cdef const double[::1] wv = weights
    cdef const double[::1] hv = biases
    cdef const double[::1] cv = clamp
    cdef const double[::1] iv
    cdef double[::1] Gv = G
    cdef double[::1] uv = u
    cdef Py_ssize_t[::1] itv = n_iter
    cdef signed char[::1] cvv = converged
    cdef const double *ip = NULL
    if init is not None:
        iv = init
        ip = &iv[0] if iv.shape[0] else NULL
    with nogil:
        rc = mf_plefka_solve(n_units, nnz, &pp[0] if pp.shape[0] else NULL,
                             &pi[0] if pi.shape[0] else NULL, &wv[0] if wv.shape[0] else NULL,
                             &hv[0] if hv.shape[0] else NULL, activation, order, n_items,
                             &cv[0] if cv.shape[0] else NULL, ip, tol, max_iter, n_threads,
                             &Gv[0] if Gv.shape[0] else NULL, &uv[0] if uv.shape[0] else NULL,
                             &itv[0] if itv.shape[0] else NULL,
                             &cvv[0] if cvv.shape[0] else NULL)
    return rc


def _capi_gradient(Py_ssize_t n_units, Py_ssize_t nnz, par_ptr, par_idx, weights, biases,
                   int activation, int order, Py_ssize_t n_items, clamp, u, G, grad_weights,
                   grad_biases):
    """Test hook: mf_plefka_gradient on buffers; returns its status (tests only)."""
    cdef const Py_ssize_t[::1] pp = par_ptr
    cdef const Py_ssize_t[::1] pi = par_idx
    cdef const double[::1] wv = weights
    cdef const double[::1] hv = biases
    cdef const double[::1] cv = clamp
    cdef const double[::1] uv = u
    cdef double[::1] Gv = G
    cdef double[::1] gw = grad_weights
    cdef double[::1] gh = grad_biases
    with nogil:
        rc = mf_plefka_gradient(n_units, nnz, &pp[0] if pp.shape[0] else NULL,
                                &pi[0] if pi.shape[0] else NULL,
                                &wv[0] if wv.shape[0] else NULL, &hv[0] if hv.shape[0] else NULL,
                                activation, order, n_items, &cv[0] if cv.shape[0] else NULL,
                                &uv[0] if uv.shape[0] else NULL, &Gv[0] if Gv.shape[0] else NULL,
                                &gw[0] if gw.shape[0] else NULL, &gh[0] if gh.shape[0] else NULL)
    return rc


#: Status codes of ``mf_status.h``, for the Python wrapper.
STATUS_OK = MF_OK
STATUS_EBADARG = MF_EBADARG
STATUS_ENOMEM = MF_ENOMEM
STATUS_EOVERFLOW = MF_EOVERFLOW
