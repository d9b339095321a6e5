"""Kernel: the strict mean-field lower bound of Saul, Jaakkola & Jordan for DAG nets (sigmoid
units; noisy-OR units with the analogous bound described further down).

Called only from ``mfengine.sbn.sjj``, which validates every input; the entry points still
check every size and index they read and return ``MF_EBADARG`` (``mf_status.h``) instead of
trusting their caller.

With z_i = h_i + sum_j W_ij S_j and a factorised q with means mu (clamped units hold their
values), ``<ln(1 + e^z)> <= xi <z> + ln(<e^{-xi z}> + <e^{(1 - xi) z}>)`` for any xi in [0, 1],
and the averages are exact products over the parents:
``ln <e^{a z_i}> = a h_i + sum_j ln(1 - mu_j + mu_j e^{a W_ij})``.  Hence

    L = sum_{free i} H(mu_i) + sum_i [ (mu_i - xi_i) Z_i - ln(e^{A_i} + e^{B_i}) ]

with Z_i = <z_i>, A_i = ln <e^{-xi_i z_i}>, B_i = ln <e^{(1 - xi_i) z_i}>: a lower bound on
ln P(clamped units) for every mu and xi in [0, 1].

Numerics (why the bound stays below ln P for any finite weights)
-----------------------------------------------------------------
The bound is evaluated as written at the stored doubles mu and nu = 1 - mu (nu is kept
separately, as sigmoid(-t), so that a mean near 1 is resolved as finely as one near 0: free
means are sigmoid(t) with |t| <= T_MAX = 700), and no piece cancels large numbers:

* The per-edge log-factor f(m, x) = ln(nu + m e^x) is the log of a sum of two non-negative
  numbers (for x > 0, x + ln(m + nu e^{-x})).  The former form, x + log1p((1 - m) expm1(-x)),
  cancelled catastrophically when m was small and x large -- with m = 4e-18 and x = 47 it
  returned 40 nats too much, and -inf for m = 0 (a clamped-off parent of weight 100 made its
  child's term 0 instead of ln(1 - f(h))) -- which is where the strict bound went above ln P.
  Clamped parents (m = 0 or 1) are exact: factors 0 and W m.
* The unit's term is rearranged around the centred log-moments
  At = A + xi Z = sum_j [f(mu_j, -xi W_ij) + xi W_ij mu_j] >= 0,
  Bt = B - (1 - xi) Z >= 0 (sums of non-negative numbers) and D = B - A = h + sum_e d_e,
  d_e = f(mu_j, (1 - xi) W) - f(mu_j, -xi W):

      (mu - xi) Z - ln(e^A + e^B) = mu Z - At - log1pexp(D)          (D <= 0)
                                  = -(1 - mu) Z - Bt - log1pexp(-D)  (D > 0)

  so that no term of size xi Z is added and subtracted again.  With only clamped parents
  At = Bt = 0 and D = Z bit for bit, and the term is the ln f(z) or ln(1 - f(z)) that
  enumeration computes.
* Entropies are computed from the stored mu and nu.
* What remains is the rounding of the sums themselves, which at huge weights can still be
  large in absolute terms (eps * 1e300) exactly where the optimal xi makes large terms cancel.
  The reported bound (``bound_at``) is therefore the computed one minus an upper bound on its
  rounding error, (fan-in + 8) eps times the magnitudes added, for every unit whose term
  involves a mean other than 0 or 1: about 1e-13 per unit on ordinary nets, nothing when no
  unit is free.

State per item: mu, nu and t per unit; Z, At, Bt, D per unit; dd = d_e, ea and eb (the
centred per-edge terms of At and Bt) per edge.  One sweep:

* xi of every unit: phi(xi) = ln(e^At + e^(Z + Bt)) is convex in xi, with phi'(0) <= 0 <=
  phi'(1); a safeguarded Newton search on [0, 1] minimises it (O(fan-in) per evaluation).  This
  pass recomputes every cache from scratch, so rounding drift never builds up.
* mu of every free unit (forward on even sweeps, backward on odd ones): mu_k enters each
  child's A and B through one factor.  Taking d_e out of D_c leaves the child's log-sum as
  const + ln((1 - mu) P_c + mu R_c) for two numbers P_c, R_c, and the 1-D objective
  H(mu) + mu c0 - sum_c ln((1 - mu) P_c + mu R_c) costs O(children) per evaluation with no
  exponential.  Its stationary points lie in t in [g(0), g(1)]; a bracketed safeguarded Newton
  search in t from the current point climbs to a local maximum, and the move is kept only if
  the exact 1-D objective rose (the sum of the children's log-ratios taken as the log of their
  product, a few logs per update).  The children's caches are then updated from the
  exponentials already taken.  For a unit whose |h| + sum |W| exceeds BIG_SCALE, so that the
  subtraction D_c - d_e could lose more than about 1e-13, the sums are re-added from the
  per-edge values instead (O(fan-in); ordinary nets never need it).
* the bound from the caches, O(n_units); the item stops when a sweep changed it by less than
  tol (or than 1e-13 of its size, its round-off).  The bound reported is recomputed from
  scratch at the final mu and xi, with its rounding allowance.

Fast path (nets of moderate scale)
----------------------------------
Where every unit has |h_i| + sum |W| over its in-edges and sum |W| over its out-edges both
<= FAST_SCALE = 256 (so that no product below leaves the double range: a unit's S lies within
e^{+-(|h| + sum_in |W|)}, its pa and pb above e^{-520}, a mean update's products of the
children's ratios within e^{+-sum_out |W|}; ordinary nets, e.g. weights N(0, 1/fan-in)), a sigmoid
item is solved by the plain C of ``mf_sjj_fast_solve`` (csrc/mf_sjj_fast.c; vectorised;
compiled for x86-64 and x86-64-v3 and chosen at load time where the build has
MF_TARGET_CLONES), from the same start and to the same stopping rule, with the same kind of
steps:

* state: per edge a = e^{-xi_c W} and b = e^{(1 - xi_c) W} (taken when xi_c changes, b = a e^W
  with e^W cached per net); per unit pa = e^A / S, pb = e^B / S (S = e^A + e^B), ln S when last
  recomputed and the ratio by which S changed since, and Z.  The factors of unit c are
  FA = nu_j + mu_j a, FB = nu_j + mu_j b, S = e^{-xi h} prod FA + e^{(1 - xi) h} prod FB: products,
  not sums of logarithms.
* xi of every unit, one safeguarded Newton step per sweep from the derivatives at the current
  means (1 division per edge), kept only if phi = ln S + xi Z fell (1 exponential and 1
  division per edge); the unit's caches are recomputed from scratch either way.  Any xi in
  [0, 1] gives a valid bound, and the xi problem is convex, so one step per sweep converges
  with the means: 12.7 sweeps on the 4x12x36x100 net, as the careful path.
* mu of every free unit: the children's P and R above from the cached pa, pb and the edge's
  factors (1 division per child), the same bracketed search in t with the gradient step as
  first trial (it always lies inside the bracket, whose far end is only computed if needed),
  the same gain test (products of the children's ratios, one logarithm), and the children's
  pa, pb, S-ratio and Z updated by multiplication: no exponential or logarithm per child.
* the reported bound: units whose parents are all clamped as bound_at; every other unit's
  term in product form (one exponential, no logarithm per edge) with an allowance
  (fan-in + 8) eps M', M' = |h| + |Z| + |term| + 1 + sum over parents (4 |W| + 1), which covers
  its rounding (see fast_bound_at).  So the reported bound is strict on either path
  (tests/sbn/test_sjj_strict.py checks both against 60-digit arithmetic and enumeration).

The solve's argument ``fast=False`` keeps every item on the careful path (tests compare the
two).  Per edge and sweep the fast path costs about 1 exponential (only for units whose xi
moves), 4 divisions and 40 other floating-point operations, against 2-6 exponentials and
logarithms per Newton evaluation on the careful path.

Large sparse nets (REC_MIN_UNITS = 2^14 units and more, whose state outgrows the caches).
When a unit's parents or children lie anywhere in the net, every edge of a sweep reads the
state of another unit at a random place: per edge and sweep the xi pass read a parent's mu and
nu and scattered two factors into child order, the mean pass read a child's pa, pb, mu and xi
and updated its pa, pb, Z and S-ratio, about 10 cache lines from 10 arrays, so that the cost
per edge rose from 33 ns (in cache) to 130 ns at 1e7 edges.  On such nets the fast path keeps
each unit's mu, nu, pa, pb, xi, Z and S-ratio in one 64-byte record (copied in and out around
the solve), keeps the per-edge factors as pairs in parent order only (the mean pass takes a
child edge's factors anew from the child's xi, read with its record, and the child-order w and
e^w: the same expressions, so the same doubles), prefetches the next unit's parents' or
children's records one unit ahead: one random line per edge in each pass, 41-46 ns per
edge at 1e7 edges (bench/speed/sparse_scaling.py: 10 sweeps, best of 2 calls; 88 without the
prefetch).  The arithmetic is the plain layout's up to the order of some vectorised
sums (equal to rounding), and the same for any thread count.  (Transparent huge pages for the
scratch were tried and left out: no gain with parents anywhere, 35 -> 58 ns per edge with
local parents at 1e7 edges.  So was prefetching 2 to 4 units ahead instead of one: with
parents anywhere at 1e7 edges 37.5-40.5 ns per edge against 40.7-42.2 with one, timed the same
way in the same runs (a few per cent, about the spread between runs), and no change with
local parents (28-29 ns); left at one.  The records, 64 MB at 1e6 units, outgrow the 32 MB
last-level cache there.)

One extension module, one idea per source file (Cython ``include``, so that every call between
them stays a direct C call): _sjj_terms.pxi (one unit's log-factors, entropies, means and xi
problem), _sjj_careful.pxi (the bound from caches and from scratch, and the careful path's
mean updates and item solve), _sjj_fast.pxi (the fast path's choice, state layout and reported
bound; its sweep is plain C in csrc/mf_sjj_fast.c), _sjj_nor.pxi (the noisy-OR kernel),
_sjj_items.pxi (every item of a call, in parallel), _sjj_run.pxi (solve and evaluate) and
_sjj_capi.pxi (the C-level API).
"""
import numpy as np

from cython.parallel cimport prange, parallel, threadid

cdef extern from "mf_parallel.h" nogil:
    # an OpenMP loop in plain C: the C entry point runs with no interpreter at all
    ctypedef void (*mf_body_fn)(void *ctx, Py_ssize_t i, int thread) noexcept nogil
    int mf_clamp_threads(Py_ssize_t n_threads, Py_ssize_t n_items)
    void mf_parallel_for(Py_ssize_t n, int n_threads, mf_body_fn body, void *ctx)
    void mf_small_pages(void *p, size_t n_bytes)
from libc.math cimport fabs, log, log1p, exp, expm1, sqrt, NAN
from libc.stdlib cimport malloc, free
from libc.stdint cimport uintptr_t
from mfengine._typedefs cimport intp_t, uint8_t, int8_t
from mfengine.sbn._dag cimport (Dag, check_dag, check_items, capi_check_net, capi_dag, MF_OK, MF_NOT_CONVERGED,
                                MF_EBADARG, MF_ENOMEM, MF_EOVERFLOW, mark_barren,
                                barren_of_clamp, barren_means, barren_means_sig)

cdef extern from "Python.h":
    const Py_ssize_t PY_SSIZE_T_MAX

cdef extern from "mf_numerics.h" nogil:
    double mf_log1pexp(double x)
    double mf_sigmoid(double x)
    void mf_exp_parts(double x, double *num, double *den)

cdef extern from "mf_sjj.h" nogil:
    # the fast sigmoid path (csrc/mf_sjj_fast.c); the contract is in the header
    const int MF_SJJ_REC
    ctypedef struct mf_sjj_fast_state:
        Py_ssize_t n
        const intp_t *par_ptr
        const intp_t *par_idx
        const intp_t *ch_ptr
        const intp_t *ch_idx
        const intp_t *ch_w
        const intp_t *pos
        const intp_t *pfirst
        const intp_t *cfirst
        const double *w
        const double *h
        const double *wq
        const double *ew
        const double *ewq
        double *Aq
        double *Bq
        const uint8_t *free_
        const uint8_t *skip
        double *mu
        double *nu
        double *t
        double *xi
        double *Z
        double *pa
        double *pb
        double *lnS
        double *isacc
        double *gA
        double *gB
        double *hA2
        double *hB2
        double *gD
        Py_ssize_t stride
        double *al
        double *be
        double *ap
        double *bp
        double *aq
        double *bq
        double *ta
        double *tb
        double *Ph
        double *Rh
        double *iA
        double *iB
        double *Iv
    int mf_sjj_fast_solve(mf_sjj_fast_state *s, double *hist, double tol, double gtol,
                          Py_ssize_t max_sweeps, double rel_floor, intp_t *sweeps_out) noexcept
    void mf_sjj_fast_final(const mf_sjj_fast_state *s, const uint8_t *skip, uint8_t *careful,
                           double *total, double *err) noexcept
    int mf_sjj_fast_set_prefetch(int on) noexcept

DEF T_MAX = 700.0     # free means are sigmoid(t) with |t| <= T_MAX: mu and 1 - mu >= 9.8e-305
DEF T_TOL = 1e-12      # bracket width (in t) at which a search stops
DEF MAX_IT = 100       # evaluations per 1-D solve, a safety net
DEF REL_FLOOR = 1e-13   # a change of the bound below this fraction of it is round-off (tol's floor)
DEF BIG_SCALE = 1024.0  # |h_i| + sum_j |W_ij| above which unit i's cached sums are re-added, not subtracted from
DEF EPS = 2.220446049250313e-16   # the double's machine epsilon

include "_sjj_terms.pxi"
include "_sjj_careful.pxi"
include "_sjj_fast.pxi"
include "_sjj_nor.pxi"
include "_sjj_items.pxi"
include "_sjj_run.pxi"
include "_sjj_capi.pxi"

#: Status codes of ``mf_status.h``, for the Python wrapper.
STATUS_OK = MF_OK
STATUS_EBADARG = MF_EBADARG
STATUS_ENOMEM = MF_ENOMEM
STATUS_NOT_CONVERGED = MF_NOT_CONVERGED
STATUS_EOVERFLOW = MF_EOVERFLOW
