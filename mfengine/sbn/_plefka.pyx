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

and G = sum_{free i} [u_i ln u_i + (1 - u_i) ln(1 - u_i)] + F (docs/derivations/plefka.rst derives F22).
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

One extension module, one idea per source file (Cython ``include``, so every call between them
stays a direct C call): _plefka_work.pxi (the net and one thread's per-item arrays, an item's
fixed and barren units), _plefka_core.pxi (G and its reverse-mode derivatives),
_plefka_item.pxi (the per-item fixed-point iteration with its line search and quasi-Newton
corrections), _plefka_cd.pxi (the coordinate-descent fallback), _plefka_pattern.pxi and
_plefka_block.pxi (the blocked dense path: one pattern's solver as a state machine, and the
block's evaluation by matrix products), _plefka_run.pxi (blocks, threads and the fallback
over a batch), _plefka_entry.pxi (the Python entry points) and _plefka_capi.pxi (the C API).
Plain C: the lane-wise loops of the blocked path in csrc/mf_plefka_lanes.c (csrc/mf_plefka.h).
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
# every pattern's arithmetic is the same whatever the other lanes hold), and the short dot
# products of the per-pattern quasi-Newton recursion (static inline in the header).
cdef extern from "mf_plefka.h" nogil:
    int mfp_image(long nf, double tmax, int sat_ok, const double *t, const double *g,
                  const double *u, const double *v, double *dt, double *q,
                  double *res_out) noexcept
    void mfp_means_free(long m, const double *T, double *U, double *V, double *C,
                        double *negH) noexcept
    void mfp_means_mixed(long m, int all_fixed, const double *T, const double *UF, double *U,
                         double *V, double *C, double *negH, double *H) noexcept
    void mfp_sig_coef12(long m, const double *M, const double *U, const double *Vi, double *F,
                        double *UB, double *MB, double *VB) noexcept
    void mfp_sig_coef11(long m, const double *M, const double *U, double *F, double *UB,
                        double *MB) noexcept
    void mfp_gu_row(long m, int order, const double *UB, const double *VBAR, const double *C,
                    const double *GUM, const double *T, double *GU) noexcept
    double mfp_dot(long n, const double *a, const double *b) noexcept
    double mfp_dot3(long n, const double *a, const double *b, const double *c) noexcept

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


include "_plefka_work.pxi"
include "_plefka_core.pxi"
include "_plefka_item.pxi"
include "_plefka_cd.pxi"
include "_plefka_pattern.pxi"
include "_plefka_block.pxi"
include "_plefka_run.pxi"
include "_plefka_entry.pxi"
include "_plefka_capi.pxi"
