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
  (tests/test_sjj_strict.py checks both against 60-digit arithmetic and enumeration).

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
edge at 1e7 edges (bench/sparse_scaling.py: 10 sweeps, best of 2 calls; 88 without the
prefetch).  The arithmetic is the plain layout's up to the order of some vectorised
sums (equal to rounding), and the same for any thread count.  (Transparent huge pages for the
scratch were tried and left out: no gain with parents anywhere, 35 -> 58 ns per edge with
local parents at 1e7 edges.  So was prefetching 2 to 4 units ahead instead of one: with
parents anywhere at 1e7 edges 37.5-40.5 ns per edge against 40.7-42.2 with one, timed the same
way in the same runs (a few per cent, about the spread between runs), and no change with
local parents (28-29 ns); left at one.  The records, 64 MB at 1e6 units, outgrow the 32 MB
last-level cache there.)
"""
import numpy as np

from cython.parallel cimport prange, parallel, threadid

cdef extern from "mf_parallel.h" nogil:
    # an OpenMP loop in plain C: the C entry point runs with no interpreter at all
    ctypedef void (*mf_body_fn)(void *ctx, Py_ssize_t i, int thread) noexcept nogil
    int mf_clamp_threads(Py_ssize_t n_threads, Py_ssize_t n_items)
    void mf_parallel_for(Py_ssize_t n, int n_threads, mf_body_fn body, void *ctx)
    void mf_small_pages(void *p, size_t n_bytes)
from libc.math cimport fabs, log, log1p, exp, expm1, sqrt
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
        int prefetch
    int mf_sjj_fast_solve(mf_sjj_fast_state *s, double *hist, double tol, double gtol,
                          Py_ssize_t max_sweeps, double rel_floor, intp_t *sweeps_out) noexcept
    void mf_sjj_fast_final(const mf_sjj_fast_state *s, const uint8_t *skip, uint8_t *careful,
                           double *total, double *err) noexcept

DEF T_MAX = 700.0     # free means are sigmoid(t) with |t| <= T_MAX: mu and 1 - mu >= 9.8e-305
DEF T_TOL = 1e-12      # bracket width (in t) at which a search stops
DEF MAX_IT = 100       # evaluations per 1-D solve, a safety net
DEF REL_FLOOR = 1e-13   # a change of the bound below this fraction of it is round-off (tol's floor)
DEF BIG_SCALE = 1024.0  # |h_i| + sum_j |W_ij| above which unit i's cached sums are re-added, not subtracted from
DEF EPS = 2.220446049250313e-16   # the double's machine epsilon

cdef inline double l1p_tilt(double m, double nu, double x, double *f, double *rc) noexcept nogil:
    """f = ln(nu + m e^x) and the tilted mean r = m e^x / (nu + m e^x), returned, with rc = 1 - r,
    for 0 < m, nu (m + nu = 1) and any finite x.  The argument of the log is a sum of two
    non-negative numbers (for x > 0 the factor e^x is taken out first), never 1 plus something
    near -1, so f is accurate to a few ulp of max(|x|, 1) however small m or nu is."""
    cdef double e, d, inv
    if x <= 0.0:
        e = m * exp(x)
        d = nu + e
        inv = 1.0 / d
        f[0] = log(d)
        rc[0] = nu * inv
        return e * inv
    e = nu * exp(-x)
    d = m + e
    inv = 1.0 / d
    f[0] = x + log(d)
    rc[0] = e * inv
    return m * inv


cdef inline double entropy(double m, double nu) noexcept nogil:
    """-m ln m - nu ln nu (0 ln 0 = 0)."""
    cdef double s = 0.0
    if m > 0.0:
        s -= m * log(m)
    if nu > 0.0:
        s -= nu * log(nu)
    return s


cdef inline double unit_term(double m, double nu, double Z, double At, double Bt,
                             double D) noexcept nogil:
    """(mu - xi) Z - ln(e^A + e^B) from the centred At, Bt >= 0 and D = B - A."""
    if D > 0.0:
        return -nu * Z - Bt - mf_log1pexp(-D)
    return m * Z - At - mf_log1pexp(D)


cdef inline void set_mean(double t, double *m, double *nu) noexcept nogil:
    """m = sigmoid(t) and nu = sigmoid(-t), each to a few ulp, from one exp and one division."""
    cdef double num, den, r
    mf_exp_parts(-fabs(t), &num, &den)       # e^{-|t|} = num / den
    r = 1.0 / (den + num)
    if t >= 0.0:
        m[0] = den * r
        nu[0] = num * r
    else:
        m[0] = num * r
        nu[0] = den * r


cdef inline double clip_logit(double mu) noexcept nogil:
    """logit(mu) clipped to [-T_MAX, T_MAX] (mu = 0 or 1 included; NaN gives 0)."""
    cdef double t
    if not (mu == mu):
        return 0.0
    if mu <= 0.0:
        return -T_MAX
    if mu >= 1.0:
        return T_MAX
    t = log(mu) - log1p(-mu)
    if t > T_MAX:
        return T_MAX
    if t < -T_MAX:
        return -T_MAX
    return t


cdef inline void init_means(Py_ssize_t n, const double *clamp, double *mu, double *nu, double *t,
                            uint8_t *free_) noexcept nogil:
    """Clamped units (a value in ``clamp``; NaN marks a free one) take their values; free
    means are kept at sigmoid(t) with |t| <= T_MAX."""
    cdef Py_ssize_t i
    for i in range(n):
        if clamp[i] == clamp[i]:
            free_[i] = 0
            mu[i] = clamp[i]
            nu[i] = 1.0 - clamp[i]
            t[i] = 0.0
        else:
            free_[i] = 1
            t[i] = clip_logit(mu[i])
            set_mean(t[i], &mu[i], &nu[i])


cdef void xi_eval(const Dag *g, const double *w, double h, Py_ssize_t i, const double *mu,
                  const double *nu, double xi, double *fa, double *fb, double *D, double *d1,
                  double *d2, bint deriv) noexcept nogil:
    """Unit i at xi: per edge, the log-factors fa = f(mu_j, -xi W_ij), fb = f(mu_j, (1 - xi)
    W_ij) (for a clamped parent, whose factors are exact: 0 and W_ij mu_j), and
    D = h + sum (fb - fa) = B - A; with ``deriv`` also phi'(xi) and phi''(xi) of
    phi = ln(e^At + e^(Z + Bt))."""
    cdef double dsum = h, da = 0.0, db = 0.0, d2a = 0.0, d2b = 0.0
    cdef double m, n_, wk, ra, rb, rca, rcb, pa, pb, f1, f2
    cdef Py_ssize_t k, j
    for k in range(g.par_ptr[i], g.par_ptr[i + 1]):
        j = g.par_idx[k]
        m = mu[j]
        n_ = nu[j]
        wk = w[k]
        if m == 0.0 or n_ == 0.0:       # a clamped parent: exact, no variance
            fa[k] = 0.0
            fb[k] = wk * m
            dsum += fb[k]
            continue
        ra = l1p_tilt(m, n_, -xi * wk, &f1, &rca)
        rb = l1p_tilt(m, n_, (1.0 - xi) * wk, &f2, &rcb)
        fa[k] = f1
        fb[k] = f2
        dsum += f2 - f1
        if deriv:
            da += wk * (m - ra)
            db += wk * (m - rb)
            d2a += (wk * ra) * (wk * rca)
            d2b += (wk * rb) * (wk * rcb)
    D[0] = dsum
    if deriv:
        set_mean(-dsum, &pa, &pb)
        d1[0] = pa * da + pb * db
        d2[0] = pa * d2a + pb * d2b + pa * pb * (da - db) * (da - db)


cdef inline void centre(const Dag *g, const double *w, Py_ssize_t i, const double *mu,
                        const double *nu, double xi, double *dd, double *ea, double *eb,
                        double *At, double *Bt) noexcept nogil:
    """Unit i's caches from the log-factors fa (in ea) and fb (in eb) left by xi_eval at xi:
    dd = fb - fa per edge (the terms of D, bit for bit), and the centred ea = fa + xi W mu >= 0,
    eb = fb - (1 - xi) W mu >= 0 (0 for a clamped parent) with their sums At, Bt."""
    cdef double a = 0.0, b = 0.0, m, wk
    cdef Py_ssize_t k, j
    for k in range(g.par_ptr[i], g.par_ptr[i + 1]):
        dd[k] = eb[k] - ea[k]
        j = g.par_idx[k]
        m = mu[j]
        if m == 0.0 or nu[j] == 0.0:
            ea[k] = 0.0
            eb[k] = 0.0
            continue
        wk = w[k]
        ea[k] = ea[k] + (xi * wk) * m
        eb[k] = eb[k] - ((1.0 - xi) * wk) * m
        a += ea[k]
        b += eb[k]
    At[0] = a
    Bt[0] = b


cdef double solve_xi(const Dag *g, const double *w, double h, Py_ssize_t i, const double *mu,
                     const double *nu, double xi0, double gtol, double *dd, double *ea,
                     double *eb, double *At, double *Bt, double *D) noexcept nogil:
    """Minimise phi(xi) over [0, 1] (safeguarded Newton); returns xi, with unit i's caches
    (At, Bt, D and its edges' dd, ea, eb) left at it.  Any xi in [0, 1] gives a valid bound,
    so a derivative that overflowed (NaN) only makes the search bisect."""
    cdef double lo = 0.0, hi = 1.0, xi = xi0, xe = -1.0, d1 = 0.0, d2 = 0.0, xn
    cdef Py_ssize_t it
    if not (0.0 <= xi <= 1.0):
        xi = 0.5
    for it in range(MAX_IT):
        xe = xi
        xi_eval(g, w, h, i, mu, nu, xi, ea, eb, D, &d1, &d2, 1)
        if fabs(d1) <= gtol:
            break
        if d1 < 0.0:
            lo = xi
        else:
            hi = xi
        if hi - lo <= 1e-15:
            break
        xn = xi - d1 / d2 if d2 > 0.0 else -1.0
        if not (lo < xn < hi) or xn == xi:
            xn = 0.5 * (lo + hi)
        xi = xn
    if xi != xe:               # the budget ran out after a step: evaluate at the returned xi
        xi_eval(g, w, h, i, mu, nu, xi, ea, eb, D, &d1, &d2, 0)
    centre(g, w, i, mu, nu, xi, dd, ea, eb, At, Bt)
    return xi


cdef void xi_pass(const Dag *g, const double *w, const double *h, const double *mu,
                  const double *nu, double *xi, double gtol, double *Z, double *At, double *Bt,
                  double *D, double *dd, double *ea, double *eb) noexcept nogil:
    """Every unit's xi, and every cache from scratch."""
    cdef double z
    cdef Py_ssize_t i, k
    for i in range(g.n):
        z = h[i]
        for k in range(g.par_ptr[i], g.par_ptr[i + 1]):
            z += w[k] * mu[g.par_idx[k]]
        Z[i] = z
        xi[i] = solve_xi(g, w, h[i], i, mu, nu, xi[i], gtol, dd, ea, eb, &At[i], &Bt[i], &D[i])


cdef double cached_bound(Py_ssize_t n, const double *mu, const double *nu,
                         const uint8_t *free_, const double *Z, const double *At,
                         const double *Bt, const double *D, const uint8_t *skip) noexcept nogil:
    """The bound from the caches: O(n_units); the units marked in ``skip`` (NULL: none) left
    out."""
    cdef double total = 0.0
    cdef Py_ssize_t i
    for i in range(n):
        if skip != NULL and skip[i]:
            continue
        total += unit_term(mu[i], nu[i], Z[i], At[i], Bt[i], D[i])
        if free_[i]:
            total += entropy(mu[i], nu[i])
    return total


cdef inline void unit_bound(const Dag *g, const double *w, const double *h, Py_ssize_t i,
                            const double *mu, const double *nu, const double *xi,
                            const uint8_t *free_, double *dd, double *ea, double *eb,
                            double *total, double *err) noexcept nogil:
    """Unit i's term of bound_at (and its entropy if free) added to total, its rounding
    allowance to err."""
    cdef double z, At, Bt, D, d1, d2, term, M, H
    cdef Py_ssize_t k, j, nfree
    z = h[i]
    for k in range(g.par_ptr[i], g.par_ptr[i + 1]):
        z += w[k] * mu[g.par_idx[k]]
    xi_eval(g, w, h[i], i, mu, nu, xi[i], ea, eb, &D, &d1, &d2, 0)
    centre(g, w, i, mu, nu, xi[i], dd, ea, eb, &At, &Bt)
    term = unit_term(mu[i], nu[i], z, At, Bt, D)
    total[0] += term
    if free_[i]:
        H = entropy(mu[i], nu[i])
        total[0] += H
        err[0] += 4.0 * EPS * H
    nfree = 0
    M = fabs(h[i]) + fabs(z) + fabs(term) + 1.0
    for k in range(g.par_ptr[i], g.par_ptr[i + 1]):
        j = g.par_idx[k]
        if mu[j] == 0.0 or nu[j] == 0.0:
            M += fabs(w[k])
        else:
            nfree += 1
            M += 3.0 * fabs(w[k]) + fabs(ea[k]) + fabs(eb[k]) + 1.0
    if nfree > 0 or (mu[i] != 0.0 and nu[i] != 0.0):
        err[0] += (g.par_ptr[i + 1] - g.par_ptr[i] + 8) * EPS * M


cdef double bound_at(const Dag *g, const double *w, const double *h, const double *mu,
                     const double *nu, const double *xi, const uint8_t *free_, double *dd,
                     double *ea, double *eb, const uint8_t *skip) noexcept nogil:
    """The sigmoid bound from scratch at the means (mu, nu = 1 - mu) and xi, with the
    entropies of the units marked in free_, minus an upper bound on its rounding error; the
    units marked in ``skip`` (barren units, summed out; NULL: none) are left out.

    Every unit whose own mean or one of whose parents' means is not 0 or 1 contributes
    (fan-in + 8) eps M to that allowance, M being the sum of the magnitudes of the numbers
    added in its term (|h|, |Z|, |W| per parent, |ea|, |eb| and 1 per free parent, |term|):
    the standard bound on the rounding of a sum of fan-in + 8 terms, each a few ulp off.
    Units whose term involves only clamped values get none: their term is the very
    ln f(z) or ln(1 - f(z)) that enumeration computes.  On ordinary nets the allowance is
    about 1e-13 per unit; with weights near 1e300 it is what keeps the reported value below
    ln P where the optimal xi makes large terms cancel."""
    cdef double total = 0.0, err = 0.0
    cdef Py_ssize_t i
    for i in range(g.n):
        if skip == NULL or not skip[i]:
            unit_bound(g, w, h, i, mu, nu, xi, free_, dd, ea, eb, &total, &err)
    return total - err


cdef int update_mu(const Dag *g, const double *w, const double *h, const uint8_t *big,
                   Py_ssize_t k, double *mu, double *nu, double *t, const double *xi, double *Z,
                   double *At, double *Bt, double *D, double *dd, double *ea, double *eb,
                   double *S, double gtol) noexcept nogil:
    """Move mu_k to a local maximum of the bound uphill from where it is; 1 if it moved.
    S is scratch space for 8 numbers per child."""
    cdef Py_ssize_t k0 = g.ch_ptr[k], nc = g.ch_ptr[k + 1] - k0, q, c, e, f
    cdef double c0, wk, al, be, dl, m, mk = mu[k], nk = nu[k], fa, fb, rc, xa_, xb_
    cdef double *P = S
    cdef double *R = S + nc
    cdef double *dl_out = S + 2 * nc
    cdef double *M = S + 3 * nc
    cdef double *E0 = S + 4 * nc
    cdef double *E1 = S + 5 * nc
    cdef double *E2 = S + 6 * nc
    cdef double *E3 = S + 7 * nc
    if big[k]:
        c0 = h[k]
        for f in range(g.par_ptr[k], g.par_ptr[k + 1]):
            c0 += w[f] * mu[g.par_idx[f]]
        Z[k] = c0
    else:
        c0 = Z[k]
    for q in range(nc):
        c = g.ch_idx[k0 + q]
        e = g.ch_w[k0 + q]
        wk = w[e]
        c0 += (mu[c] - xi[c]) * wk
        al = -xi[c] * wk
        be = (1.0 - xi[c]) * wk
        if big[c]:              # re-add the child's sum without k's edge: no cancellation
            dl = h[c]
            for f in range(g.par_ptr[c], g.par_ptr[c + 1]):
                if f != e:
                    dl += dd[f]
        else:
            dl = D[c] - dd[e]
        dl_out[q] = dl
        # the child's e^A + e^B is e^{A without k} ((1 - mu) (1 + e^dl) + mu (e^al + e^{dl + be}))
        m = 0.0
        if dl > m:
            m = dl
        if al > m:
            m = al
        if dl + be > m:
            m = dl + be
        M[q] = m
        E0[q] = exp(-m)
        E1[q] = exp(dl - m)
        E2[q] = exp(al - m)
        E3[q] = exp(dl + be - m)
        P[q] = E0[q] + E1[q]
        R[q] = E2[q] + E3[q]

    cdef double t0 = t[k], F0, F, dF, s, den, d, lo, hi, tn, mun, nun, g0, g1, dmu, gain, prod
    cdef Py_ssize_t it
    # F(t) = dL/dmu at mu = sigmoid(t): -t + c0 - sum_c (R - P) / ((1 - mu) P + mu R)
    g0 = c0
    g1 = c0
    for q in range(nc):
        g0 -= (R[q] - P[q]) / P[q]
        g1 -= (R[q] - P[q]) / R[q]
    F0 = -t0 + c0
    for q in range(nc):
        F0 -= (R[q] - P[q]) / (nk * P[q] + mk * R[q])
    if fabs(F0) <= gtol:
        return 0
    if F0 > 0.0:
        lo = t0
        hi = g1 if g1 < T_MAX else T_MAX
        if not (hi > lo):
            return 0
    else:
        hi = t0
        lo = g0 if g0 > -T_MAX else -T_MAX
        if not (lo < hi):
            return 0
    # both ends of [lo, hi] are known to bracket a stationary point (F(lo) >= 0 >= F(hi)),
    # except where T_MAX clips, in which case the clipped end itself is the answer
    tn = t0 + F0   # first trial: a gradient step, clipped into the bracket
    if not (lo < tn < hi):
        tn = 0.5 * (lo + hi)
    for it in range(MAX_IT):
        set_mean(tn, &mun, &nun)
        F = -tn + c0
        dF = 0.0
        for q in range(nc):
            den = nun * P[q] + mun * R[q]
            d = (R[q] - P[q]) / den
            F -= d
            dF += d * d
        if fabs(F) <= gtol:
            break
        if F > 0.0:
            lo = tn
        else:
            hi = tn
        if hi - lo <= T_TOL:
            break
        dF = -1.0 + mun * nun * dF
        s = tn - F / dF if dF < 0.0 else lo - 1.0
        if not (lo < s < hi) or s == tn:
            s = 0.5 * (lo + hi)
        tn = s
    set_mean(tn, &mun, &nun)
    # keep the move only if the exact 1-D objective rose
    dmu = (nk - nun) if mk + mun > 1.0 else (mun - mk)
    gain = entropy(mun, nun) - entropy(mk, nk) + dmu * c0
    # minus the sum of the children's log-ratios, from products (few logs)
    prod = 1.0
    for q in range(nc):
        d = (nun * P[q] + mun * R[q]) / (nk * P[q] + mk * R[q])
        if 1e-100 < d < 1e100:
            prod *= d
            if not (1e-200 < prod < 1e200):
                gain -= log(prod)
                prod = 1.0
        else:
            gain -= log(d)
    gain -= log(prod)
    if not (gain > 0.0):
        return 0
    mu[k] = mun
    nu[k] = nun
    t[k] = tn
    for q in range(nc):
        c = g.ch_idx[k0 + q]
        e = g.ch_w[k0 + q]
        wk = w[e]
        xa_ = -xi[c] * wk
        xb_ = (1.0 - xi[c]) * wk
        if M[q] < 700.0 and M[q] - dl_out[q] < 700.0:
            # ln(nu + mu e^al) and ln(nu + mu e^be) from the exponentials already taken
            fa = log(nun * E0[q] + mun * E2[q]) + M[q]
            fb = log(nun * E1[q] + mun * E3[q]) + (M[q] - dl_out[q])
        else:
            l1p_tilt(mun, nun, xa_, &fa, &rc)
            l1p_tilt(mun, nun, xb_, &fb, &rc)
        dd[e] = fb - fa
        D[c] = dl_out[q] + dd[e]
        if big[c]:             # re-add the child's sums: no cancellation
            ea[e] = fa - mun * xa_
            eb[e] = fb - mun * xb_
            At[c] = 0.0
            Bt[c] = 0.0
            Z[c] = h[c]
            for f in range(g.par_ptr[c], g.par_ptr[c + 1]):
                At[c] += ea[f]
                Bt[c] += eb[f]
                Z[c] += w[f] * mu[g.par_idx[f]]
        else:
            Z[c] += wk * dmu
            fa = fa - mun * xa_
            fb = fb - mun * xb_
            At[c] += fa - ea[e]
            Bt[c] += fb - eb[e]
            ea[e] = fa
            eb[e] = fb
    return 1


cdef inline void mark_big(const Dag *g, const double *w, const double *h,
                          uint8_t *big) noexcept nogil:
    cdef Py_ssize_t i, k
    cdef double s
    for i in range(g.n):
        s = fabs(h[i])
        for k in range(g.par_ptr[i], g.par_ptr[i + 1]):
            s += fabs(w[k])
        big[i] = s > BIG_SCALE


cdef int solve_item(const Dag *g, const double *w, const double *h, const double *clamp,
                    double *mu, double *xi, double *hist, double tol, double gtol,
                    Py_ssize_t max_sweeps, double *work, double *bound_out,
                    intp_t *sweeps_out, const uint8_t *skip) noexcept nogil:
    """Coordinate ascent for one item; returns 1 if it converged.  The bound (reported, in the
    history and in the stopping test) leaves out the units marked in ``skip`` (NULL: none);
    the caller has cut them off (their in-edges' weights 0), so nothing else depends on
    them."""
    cdef Py_ssize_t n = g.n, i, k, sweep, nnz = g.par_ptr[g.n]
    cdef double *nu = work
    cdef double *t = work + n
    cdef double *Z = work + 2 * n
    cdef double *At = work + 3 * n
    cdef double *Bt = work + 4 * n
    cdef double *D = work + 5 * n
    cdef double *S = work + 6 * n          # 8 n: scratch of update_mu
    cdef double *dd = work + 14 * n
    cdef double *ea = work + 14 * n + nnz
    cdef double *eb = work + 14 * n + 2 * nnz
    cdef uint8_t *free_ = <uint8_t *> (work + 14 * n + 3 * nnz)
    cdef uint8_t *big = free_ + n
    cdef double bnd, prev
    cdef int converged = 0
    init_means(n, clamp, mu, nu, t, free_)
    mark_big(g, w, h, big)
    for i in range(n):
        if not (0.0 <= xi[i] <= 1.0):
            xi[i] = 0.5
    prev = bound_at(g, w, h, mu, nu, xi, free_, dd, ea, eb, skip)
    if hist != NULL:
        hist[0] = prev
    sweep = 0
    while sweep < max_sweeps:
        # the xi pass recomputes every cache from scratch, so they never drift by more than
        # one sweep of incremental mu updates
        xi_pass(g, w, h, mu, nu, xi, gtol, Z, At, Bt, D, dd, ea, eb)
        for i in range(n):
            k = i if sweep % 2 == 0 else n - 1 - i
            if free_[k]:
                update_mu(g, w, h, big, k, mu, nu, t, xi, Z, At, Bt, D, dd, ea, eb, S, gtol)
        sweep += 1
        bnd = cached_bound(n, mu, nu, free_, Z, At, Bt, D, skip)
        if hist != NULL:
            hist[sweep] = bnd
        if fabs(bnd - prev) < tol + REL_FLOOR * fabs(bnd):
            converged = 1
            break
        prev = bnd
    # the reported bound is recomputed from scratch at the final mu, xi
    bound_out[0] = bound_at(g, w, h, mu, nu, xi, free_, dd, ea, eb, skip)
    if hist != NULL:
        hist[sweep] = bound_out[0]
    sweeps_out[0] = sweep
    return converged


# ---------------------------------------------------------------------------- fast path
DEF REC_MIN_UNITS = 16384   # units from which the fast path keeps a record per unit (MF_SJJ_REC)
DEF FAST_SCALE = 256.0  # |h_i| + sum_in |W|, and sum_out |W|, at most this for every unit: fast path

# The fast path's sweep is plain C (csrc/mf_sjj_fast.c, declared in csrc/mf_sjj.h).  The
# benchmarks' same-run switches of the two large-net layouts; the answers do not depend on them.
cdef bint prefetch_on = True    # prefetch the next unit's scattered state (mf_sjj_fast_state.prefetch)
cdef bint records_on = True     # keep one interleaved record per unit (REC_MIN_UNITS and more)


def _set_prefetch(bint on):
    """Whether the sweeps prefetch the next unit's scattered state on large nets (for the
    benchmarks' same-run comparisons; the answers do not depend on it); returns the previous
    setting."""
    global prefetch_on
    cdef bint old = prefetch_on
    prefetch_on = on
    return old


def _set_records(bint on):
    """Whether the fast sigmoid sweep keeps one interleaved record per unit on large nets (for
    the benchmarks' same-run comparisons; the answers do not depend on it); returns the
    previous setting."""
    global records_on
    cdef bint old = records_on
    records_on = on
    return old


cdef inline Py_ssize_t fast_extra(Py_ssize_t n, Py_ssize_t nnz, Py_ssize_t maxin,
                                  Py_ssize_t maxout) noexcept nogil:
    """Doubles of thread scratch beyond the careful path's 14 n + 3 nnz doubles: 3 n bytes
    (free, big or careful, barren units; rounded up), the fast path's per-unit trial and
    per-child scratch, the net cache (weights in child order, e^w), the units' records on
    large nets (REC_MIN_UNITS; 8 n doubles, and 8 to align them to 64 bytes), e^w in child
    order and two more per-child arrays (records mode), and the key.  When some item has
    barren units, BARREN_EXTRA more after the key (see solve_item_sig)."""
    return (3 * n + 15) // 8 + 1 + 2 * maxin + 7 * maxout + 4 * nnz + 8 * n + 8 + 2


cdef inline Py_ssize_t barren_extra(Py_ssize_t nnz) noexcept nogil:
    """Doubles of thread scratch after the key for an item with barren units: its copies of the
    child-order weights and e^w with the edges into them cut (fast path), or of the weights
    (careful path) in the same place."""
    return 2 * nnz


cdef int net_is_fast(const Dag *g, const double *w, const double *h) noexcept nogil:
    """1 if every unit has |h_i| + sum |W| over its in-edges and sum |W| over its out-edges
    both at most FAST_SCALE (then no product of the fast path leaves the double range)."""
    cdef Py_ssize_t i, k
    cdef double s, t
    for i in range(g.n):
        s = fabs(h[i])
        for k in range(g.par_ptr[i], g.par_ptr[i + 1]):
            s += fabs(w[k])
        t = 0.0
        for k in range(g.ch_ptr[i], g.ch_ptr[i + 1]):
            t += fabs(w[g.ch_w[k]])
        if not (s <= FAST_SCALE and t <= FAST_SCALE):
            return 0
    return 1


cdef double fast_bound_at(const Dag *g, const double *w, const double *h, const mf_sjj_fast_state *s,
                          const uint8_t *skip, uint8_t *careful, double *scratch) noexcept nogil:
    """bound_at's value for a net on the fast path (within FAST_SCALE, see net_is_fast, so
    no product below over- or underflows), with one exponential and no logarithm per edge.

    A unit whose parents are all clamped is evaluated as bound_at does (exactly ln f(z) or
    ln(1 - f(z)) when the unit is clamped too).  Any other unit's term is computed as
    (mu - xi) Z - ln(e^{-xi h} prod FA + e^{(1 - xi) h} prod FB), FA = nu + mu e^{-xi W},
    FB = nu + mu e^{(1 - xi) W}, and carries the allowance (fan-in + 8) eps M' with
    M' = |h| + |Z| + |term| + 1 + sum over parents (4 |W| + 1).  Units marked in ``skip``
    (NULL: none) are left out.  That covers its rounding:
    each factor is within 8 u + |W| u of its value (u = eps / 2: an exponential of 2 ulp, the
    rounding of x W, of e^W and of the sum), so ln of the product of the k factors is within
    u (10 k + sum |W|) plus u |ln S|, ln S itself within |h| + sum |W| + 1 of 0; Z is within
    (k + 1) u (|h| + sum |W|), and the last three operations add u (|Z| + |ln S| + |term|):
    all of it below 2 (k + 8) u M' term by term.  (M' replaces bound_at's |ea| + |eb| per
    free parent by its upper bound |W|: 0 <= ea <= |xi W| and 0 <= eb <= |(1 - xi) W|.)"""
    cdef double total = 0.0, err = 0.0
    cdef Py_ssize_t i, nnz = g.nnz
    mf_sjj_fast_final(s, skip, careful, &total, &err)
    for i in range(g.n):
        if careful[i]:
            unit_bound(g, w, h, i, s.mu, s.nu, s.xi, s.free_, scratch, scratch + nnz,
                       scratch + 2 * nnz, &total, &err)
    return total - err


cdef int solve_item_cut(const Dag *g, const double *w, const double *h, const double *clamp,
                        double *mu, double *xi, double *hist, double tol, double gtol,
                        Py_ssize_t max_sweeps, double *work, double *bound_out,
                        intp_t *sweeps_out, const uint8_t *barren, Py_ssize_t n_barren,
                        double *wb) noexcept nogil:
    """solve_item with the n_barren units marked in ``barren`` cut off (their in-edges' weights
    set to 0 in the copy ``wb`` of w) and left out of the reported bound, their means then set
    by barren_means_sig."""
    cdef Py_ssize_t i, e
    cdef int converged
    if n_barren == 0:
        return solve_item(g, w, h, clamp, mu, xi, hist, tol, gtol, max_sweeps, work,
                          bound_out, sweeps_out, NULL)
    for e in range(g.nnz):
        wb[e] = w[e]
    for i in range(g.n):
        if barren[i]:
            for e in range(g.par_ptr[i], g.par_ptr[i + 1]):
                wb[e] = 0.0
    converged = solve_item(g, wb, h, clamp, mu, xi, hist, tol, gtol, max_sweeps, work,
                           bound_out, sweeps_out, barren)
    barren_means_sig(g, w, h, barren, mu)
    return converged


cdef int solve_item_sig(const Dag *g, const intp_t *pos, Py_ssize_t net, const double *w,
                        const double *h, const double *clamp, double *mu, double *xi,
                        double *hist, double tol, double gtol, Py_ssize_t max_sweeps,
                        double *work, Py_ssize_t maxin, Py_ssize_t maxout, bint room,
                        double *bound_out, intp_t *sweeps_out) noexcept nogil:
    """One sigmoid item: the fast path where the net's scale allows it (FAST_SCALE), the
    careful one (solve_item) otherwise; the reported bound is bound_at's either way.
    ``room``: the thread's scratch has barren_extra(nnz) doubles after the key (run_items
    gives them whenever some item has a free unit without children, which every item with a
    barren unit has).

    Barren units (free, every child barren: no clamped descendant) sum out exactly, as in the
    noisy-OR kernel: they are cut off from the rest of the item's solve, so that its bound is
    the one of the net with them deleted, and their means are then set by barren_means_sig.
    A cut edge's factors are those of a zero weight, 1, so that the parent's mean update sees
    no pull from that child (R = P exactly).  The fast path skips the barren units (no xi
    step, no mean update, no term) and reads the cut edges' child-order weight and e^w from
    copies holding 0 and 1 there; the careful path solves the net with the weights into them
    set to 0 (each barren unit then goes to its own optimum, where its term is 0) and leaves
    them out of the reported bound."""
    cdef Py_ssize_t n = g.n, nnz = g.nnz, i, q, e, n_barren = 0
    cdef double *extra = work + 14 * n + 3 * nnz + (3 * n + 15) // 8 + 1
    cdef double *ta = extra
    cdef double *tb = ta + maxin
    cdef double *Ph = tb + maxin
    cdef double *Rh = Ph + maxout
    cdef double *iA = Rh + maxout
    cdef double *iB = iA + maxout
    cdef double *Iv = iB + maxout
    cdef double *wq = Iv + maxout
    cdef double *ew = wq + nnz
    # the units' records (MF_SJJ_REC doubles each, 64-byte aligned), then the key
    cdef double *rec = <double *> ((<uintptr_t> (ew + 2 * nnz) + 63) & ~(<uintptr_t> 63))
    cdef double *ewq = ew + 2 * nnz + 8 * n + 8
    cdef double *Aq = ewq + nnz
    cdef double *Bq = Aq + maxout
    cdef intp_t *key = <intp_t *> (Bq + maxout)    # [net cached, its fast flag]
    # (room) the item's copies with the edges into barren units cut: the weights (careful
    # path), or in the same place the child-order weights and e^w (fast path)
    cdef double *wb = <double *> (key + 2)
    cdef double *wqb = wb
    cdef double *ewqb = wqb + nnz
    cdef uint8_t *free_ = <uint8_t *> (work + 14 * n + 3 * nnz)
    cdef uint8_t *barren = free_ + 2 * n
    cdef mf_sjj_fast_state s
    cdef int converged
    cdef bint records = n >= REC_MIN_UNITS and records_on
    if room:                     # (without room no item of the run has a barren unit)
        barren_of_clamp(g, clamp, free_, barren)
        for i in range(n):
            n_barren += barren[i]
    if key[0] == -2:
        return solve_item_cut(g, w, h, clamp, mu, xi, hist, tol, gtol, max_sweeps, work,
                              bound_out, sweeps_out, barren, n_barren, wb)
    if key[0] != net:
        key[0] = net
        key[1] = net_is_fast(g, w, h)      # zeroing weights keeps a net fast
        if key[1]:
            for q in range(nnz):
                wq[q] = w[g.ch_w[q]]
                ew[q] = exp(w[q])
            for q in range(nnz):
                ewq[q] = ew[g.ch_w[q]]
    if not key[1]:
        return solve_item_cut(g, w, h, clamp, mu, xi, hist, tol, gtol, max_sweeps, work,
                              bound_out, sweeps_out, barren, n_barren, wb)
    s.wq = wq
    s.ew = ew
    s.ewq = ewq
    s.skip = NULL
    if n_barren:
        for q in range(nnz):
            wqb[q] = wq[q]
            ewqb[q] = ewq[q]
        for i in range(n):
            if barren[i]:
                for e in range(g.par_ptr[i], g.par_ptr[i + 1]):
                    wqb[pos[e]] = 0.0
                    ewqb[pos[e]] = 1.0
        s.wq = wqb
        s.ewq = ewqb
        s.skip = barren
    s.n = n
    s.par_ptr = g.par_ptr
    s.par_idx = g.par_idx
    s.ch_ptr = g.ch_ptr
    s.ch_idx = g.ch_idx
    s.ch_w = g.ch_w
    s.pos = pos
    s.pfirst = pos + nnz
    s.cfirst = pos + nnz + n
    s.w = w
    s.h = h
    s.Aq = Aq
    s.Bq = Bq
    s.free_ = free_
    s.mu = mu
    s.nu = work
    s.t = work + n
    s.xi = xi
    s.Z = work + 2 * n
    s.pa = work + 3 * n
    s.pb = work + 4 * n
    s.lnS = work + 5 * n
    s.isacc = work + 6 * n
    s.gA = work + 7 * n
    s.gB = work + 8 * n
    s.hA2 = work + 9 * n
    s.hB2 = work + 10 * n
    s.gD = work + 11 * n
    s.al = work + 12 * n
    s.be = work + 13 * n
    s.ap = work + 14 * n
    s.bp = work + 14 * n + nnz
    s.aq = work + 14 * n + 2 * nnz
    s.bq = extra + 2 * maxin + 5 * maxout + 2 * nnz
    s.ta = ta
    s.tb = tb
    s.Ph = Ph
    s.Rh = Rh
    s.iA = iA
    s.iB = iB
    s.Iv = Iv
    s.stride = 1
    s.prefetch = prefetch_on
    init_means(n, clamp, mu, s.nu, s.t, free_)
    for i in range(n):
        if not (0.0 <= xi[i] <= 1.0):
            xi[i] = 0.5
    if records:
        # a large net, whose state outgrows the caches: each unit's mu, nu, pa, pb, xi, Z and
        # S-ratio in one 64-byte record, so that the sweep's scattered reads of a parent or a
        # child cost one cache miss each instead of one per array (the same arithmetic)
        for i in range(n):
            rec[8 * i] = mu[i]
            rec[8 * i + 1] = s.nu[i]
            rec[8 * i + 4] = xi[i]
        s.mu = rec
        s.nu = rec + 1
        s.pa = rec + 2
        s.pb = rec + 3
        s.xi = rec + 4
        s.Z = rec + 5
        s.isacc = rec + 6
        s.stride = MF_SJJ_REC
    converged = mf_sjj_fast_solve(&s, hist, tol, gtol, max_sweeps, REL_FLOOR, sweeps_out)
    if records:
        for i in range(n):
            mu[i] = rec[8 * i]
            work[i] = rec[8 * i + 1]
            xi[i] = rec[8 * i + 4]
        s.mu = mu
        s.nu = work
        s.xi = xi
        s.stride = 1
    # the reported bound: from scratch, with its rounding allowance
    bound_out[0] = fast_bound_at(g, w, h, &s, barren if n_barren else NULL, free_ + n,
                                 work + 14 * n)
    if hist != NULL:
        hist[sweeps_out[0]] = bound_out[0]
    if n_barren:
        barren_means_sig(g, w, h, barren, mu)
    return converged


# ---------------------------------------------------------------------------- noisy-OR
include "_sjj_nor.pxi"


# ---------------------------------------------------------------------------- the items
cdef int prepare_sig(const Dag *g, bint noisy_or, intp_t **pos_out, Py_ssize_t *maxin,
                     Py_ssize_t *maxout) noexcept nogil:
    """For sigmoid units: check that ch_w is a permutation of the edges (MF_EBADARG) and
    allocate, in *pos_out, each unit's first parent and first child when those are runs of
    consecutive units (-1 otherwise: the fast path then indexes them directly), and the
    largest fan-in and fan-out.  Nothing for noisy-OR units (*pos_out NULL)."""
    cdef Py_ssize_t n = g.n, nnz = g.nnz, i, q
    cdef intp_t *pos
    pos_out[0] = NULL
    maxin[0] = 0
    maxout[0] = 0
    if noisy_or:
        return MF_OK
    pos = <intp_t *> malloc((nnz + 2 * n + 1) * sizeof(intp_t))
    if pos == NULL:
        return MF_ENOMEM
    for q in range(nnz):
        pos[q] = -1
    for q in range(nnz):
        if pos[g.ch_w[q]] != -1:
            free(pos)
            return MF_EBADARG
        pos[g.ch_w[q]] = q
    for i in range(n):
        pos[nnz + i] = g.par_idx[g.par_ptr[i]] if g.par_ptr[i + 1] > g.par_ptr[i] else -1
        for q in range(g.par_ptr[i], g.par_ptr[i + 1]):
            if g.par_idx[q] != pos[nnz + i] + (q - g.par_ptr[i]):
                pos[nnz + i] = -1
                break
        pos[nnz + n + i] = g.ch_idx[g.ch_ptr[i]] if g.ch_ptr[i + 1] > g.ch_ptr[i] else -1
        for q in range(g.ch_ptr[i], g.ch_ptr[i + 1]):
            if g.ch_idx[q] != pos[nnz + n + i] + (q - g.ch_ptr[i]):
                pos[nnz + n + i] = -1
                break
        if g.par_ptr[i + 1] - g.par_ptr[i] > maxin[0]:
            maxin[0] = g.par_ptr[i + 1] - g.par_ptr[i]
        if g.ch_ptr[i + 1] - g.ch_ptr[i] > maxout[0]:
            maxout[0] = g.ch_ptr[i + 1] - g.ch_ptr[i]
    pos_out[0] = pos
    return MF_OK


cdef struct ItemsJob:       # run_items' loops, for mf_parallel_for (plain C threads)
    const Dag *g
    const intp_t *pos
    Py_ssize_t maxin, maxout, n, nnz, n_xi, n_items, max_sweeps, stride
    const double *w
    const double *h
    const intp_t *net_of
    const double *clamp
    double *mu
    double *xi
    double *history
    double *bound
    intp_t *n_sweeps
    uint8_t *converged
    double tol, gtol, xi0
    bint noisy_or, fill_mu, fill_xi, room
    double *scratch
    int nt


cdef void fill_body(void *ctx, Py_ssize_t c, int thread) noexcept nogil:
    """The default start of the rows of chunk c of nt contiguous chunks."""
    cdef ItemsJob *j = <ItemsJob *> ctx
    cdef Py_ssize_t p, i, n = j.n, n_xi = j.n_xi
    for p in range(c * j.n_items // j.nt, (c + 1) * j.n_items // j.nt):
        if j.fill_mu:
            for i in range(n):
                j.mu[p * n + i] = 0.5
        if j.fill_xi:
            for i in range(n_xi):
                j.xi[p * n_xi + i] = j.xi0


cdef void item_body(void *ctx, Py_ssize_t p, int thread) noexcept nogil:
    """Item p, in the scratch of the thread that runs it."""
    cdef ItemsJob *j = <ItemsJob *> ctx
    cdef Py_ssize_t n = j.n, nnz = j.nnz, n_xi = j.n_xi
    cdef Py_ssize_t net = j.net_of[p] if j.net_of != NULL else 0
    cdef double *work = j.scratch + thread * j.stride
    cdef double *hist = j.history + p * (j.max_sweeps + 1) if j.history != NULL else NULL
    cdef double dummy_w = 0.0
    if j.noisy_or:
        j.converged[p] = solve_item_nor(j.g, j.w + net * nnz if nnz else &dummy_w,
                                        j.h + net * n, j.clamp + p * n, j.mu + p * n,
                                        j.xi + p * n_xi if nnz else &dummy_w, hist, j.tol,
                                        j.max_sweeps, work, j.bound + p, j.n_sweeps + p)
    else:
        j.converged[p] = solve_item_sig(j.g, j.pos, net, j.w + net * nnz if nnz else &dummy_w,
                                        j.h + net * n, j.clamp + p * n, j.mu + p * n,
                                        j.xi + p * n, hist, j.tol, j.gtol, j.max_sweeps, work,
                                        j.maxin, j.maxout, j.room, j.bound + p, j.n_sweeps + p)


cdef int run_items(const Dag *g, const intp_t *pos, Py_ssize_t maxin, Py_ssize_t maxout,
                   const double *w, const double *h, Py_ssize_t n_items, const intp_t *net_of,
                   const double *clamp, double *mu, double *xi, double *history,
                   double *bound, intp_t *n_sweeps, uint8_t *converged, double tol,
                   double gtol, Py_ssize_t max_sweeps, int n_threads, bint noisy_or,
                   bint fast, bint fill_mu, bint fill_xi) noexcept nogil:
    """Solve every item (arguments checked by the caller; net_of NULL: every item on net 0;
    history NULL or (n_items, max_sweeps + 1)).  The scratch of every thread is allocated at
    once before anything is written: MF_ENOMEM or MF_EOVERFLOW (its size would overflow;
    nothing written either way) or MF_OK.

    ``fill_mu`` / ``fill_xi``: ``mu`` / ``xi`` hold nothing yet (the caller allocated them
    without writing them); the threads first write the default start into them (means 0.5;
    xi 0.5, or -1 for noisy-OR: uniform q), each a contiguous block of rows, before the solve.
    The memory is then first touched by the threads in parallel instead of serially by the
    caller: a fresh (n_items, nnz) q array (64 MB for 200 cases of the diagnosis net) costs a
    page fault per page, each zeroed by the kernel, which, taken serially, held two threads to
    1.1x one.  The threads run in plain C (mf_parallel_for): the C entry point needs no
    interpreter."""
    cdef Py_ssize_t n = g.n, nnz = g.nnz, t, p, i
    cdef ItemsJob job
    cdef intp_t *key
    cdef Py_ssize_t base
    if n_items == 0:
        return MF_OK
    n_threads = mf_clamp_threads(n_threads, n_items)
    # an item has barren units iff it has a free unit without children (below a barren unit
    # lie only barren units, down to a childless one): then the threads need room for them
    job.room = 0
    if not noisy_or:
        for p in range(n_items):
            for i in range(n):
                if g.ch_ptr[i + 1] == g.ch_ptr[i] and not (clamp[p * n + i] == clamp[p * n + i]):
                    job.room = 1
                    break
            if job.room:
                break
    # scratch per thread: 14 n + 3 nnz doubles (sigmoid, careful path; the noisy-OR kernel
    # needs less), then for sigmoid 3 n bytes and the fast path's extra (fast_extra), then
    # (room) the barren units' copies
    base = 14 * n + 3 * nnz + (
        (2 * n + 15) // 8 + 3 if noisy_or else fast_extra(n, nnz, maxin, maxout))
    job.stride = base + (barren_extra(nnz) if job.room else 0)
    if <size_t> job.stride > <size_t> PY_SSIZE_T_MAX // sizeof(double) // <size_t> n_threads:
        return MF_EOVERFLOW
    job.scratch = <double *> malloc(<size_t> job.stride * <size_t> n_threads * sizeof(double))
    if job.scratch == NULL:
        return MF_ENOMEM
    for t in range(n_threads):
        key = <intp_t *> (job.scratch + t * job.stride + base - 2)
        key[0] = -1 if fast else -2       # -2: no net is ever cached, no fast path
    job.g = g
    job.pos = pos
    job.maxin = maxin
    job.maxout = maxout
    job.n = n
    job.nnz = nnz
    job.n_xi = nnz if noisy_or else n
    job.n_items = n_items
    job.max_sweeps = max_sweeps
    job.w = w
    job.h = h
    job.net_of = net_of
    job.clamp = clamp
    job.mu = mu
    job.xi = xi
    job.history = history
    job.bound = bound
    job.n_sweeps = n_sweeps
    job.converged = converged
    job.tol = tol
    job.gtol = gtol
    job.xi0 = -1.0 if noisy_or else 0.5
    job.noisy_or = noisy_or
    job.fill_mu = fill_mu
    job.fill_xi = fill_xi
    job.nt = n_threads
    if fill_mu or fill_xi:
        # each thread first touches contiguous blocks of rows: the threads' page faults then
        # never wait on the same page (numpy backs large arrays with 2 MB pages, and the
        # solve's dynamic chunks would interleave the threads within them)
        mf_parallel_for(n_threads, n_threads, fill_body, &job)
    mf_parallel_for(n_items, n_threads, item_body, &job)
    free(job.scratch)
    return MF_OK


# ---------------------------------------------------------------------------- entry points
def solve(const intp_t[::1] par_ptr, const intp_t[::1] par_idx, const intp_t[::1] ch_ptr,
          const intp_t[::1] ch_idx, const intp_t[::1] ch_w, const double[:, ::1] w,
          const double[:, ::1] h, const intp_t[::1] net_of, const double[:, ::1] clamp,
          double[:, ::1] mu, double[:, ::1] xi, double[::1] bound, intp_t[::1] n_sweeps,
          uint8_t[::1] converged, int8_t[::1] status, double[:, ::1] history, double tol,
          double gtol, Py_ssize_t max_sweeps, int n_threads, bint noisy_or=False,
          bint fast=True, bint fill_mu=False, bint fill_xi=False):
    """Solve every item in place (see the module docstring).  ``history`` is (n_items,
    max_sweeps + 1) to record the bound after each sweep, or (0, 0) for none.  With
    ``noisy_or``, ``xi`` is (n_items, nnz): the q of every edge, in parent order.  ``fast``
    False keeps every sigmoid item on the careful path (for tests that compare the two).
    ``fill_mu`` / ``fill_xi``: ``mu`` / ``xi`` are uninitialised (np.empty); the kernel
    writes the default start (means 0.5; xi 0.5, noisy-OR q uniform) into each item's rows
    inside the parallel loop, so that the threads take the first-touch page faults, and
    their whole pages are marked for ordinary rather than huge pages first (``mf_small_pages``
    in ``csrc/mf_parallel.h``; advice to the system, nothing else changes).

    Returns MF_OK, or MF_EBADARG (nothing written) when a size or an index is inconsistent;
    ``status[p]`` is MF_ENOMEM for an item whose thread could not allocate its scratch space.
    """
    cdef Dag g
    if check_dag(par_ptr, par_idx, ch_ptr, ch_idx, ch_w, &g) != MF_OK:
        return MF_EBADARG
    if check_items(&g, w, h, net_of, clamp) != MF_OK:
        return MF_EBADARG
    cdef Py_ssize_t n_items = clamp.shape[0], p, n = g.n, nnz = par_idx.shape[0]
    cdef Py_ssize_t n_xi = nnz if noisy_or else n
    if (mu.shape[0] != n_items or mu.shape[1] != n or xi.shape[0] != n_items
            or xi.shape[1] != n_xi or bound.shape[0] != n_items or n_sweeps.shape[0] != n_items
            or converged.shape[0] != n_items or status.shape[0] != n_items
            or max_sweeps < 0 or n_threads < 1 or not (tol >= 0.0) or not (gtol >= 0.0)):
        return MF_EBADARG
    cdef bint record = history.shape[0] > 0
    if record and (history.shape[0] != n_items or history.shape[1] != max_sweeps + 1):
        return MF_EBADARG
    cdef intp_t *pos = NULL
    cdef Py_ssize_t maxin = 0, maxout = 0
    cdef int rc
    with nogil:
        # mu / xi to fill are the caller's np.empty arrays, not touched yet: ordinary pages
        # (NumPy asks for huge pages from 4 MB; faulting in the 64 MB q of 200 diagnosis
        # cases as huge pages took 1.5-2.1 ms of CPU per case instead of 1.1, and held two
        # threads to 1.6-1.9x one).  The C entry point leaves its caller's memory alone.
        if fill_mu:
            mf_small_pages(&mu[0, 0] if n_items and n else NULL,
                           <size_t> n_items * <size_t> n * sizeof(double))
        if fill_xi:
            mf_small_pages(&xi[0, 0] if n_items and n_xi else NULL,
                           <size_t> n_items * <size_t> n_xi * sizeof(double))
        rc = prepare_sig(&g, noisy_or, &pos, &maxin, &maxout)
        if rc == MF_OK:
            rc = run_items(&g, pos, maxin, maxout, &w[0, 0] if w.shape[0] and nnz else NULL,
                           &h[0, 0] if h.shape[0] and n else NULL, n_items,
                           &net_of[0] if n_items else NULL, &clamp[0, 0] if n_items and n else NULL,
                           &mu[0, 0] if n_items and n else NULL,
                           &xi[0, 0] if n_items and n_xi else NULL,
                           &history[0, 0] if record else NULL, &bound[0] if n_items else NULL,
                           &n_sweeps[0] if n_items else NULL,
                           &converged[0] if n_items else NULL, tol, gtol, max_sweeps,
                           n_threads, noisy_or, fast, fill_mu, fill_xi)
        free(pos)
    if rc == MF_ENOMEM or rc == MF_EOVERFLOW:     # scratch that cannot be had
        for p in range(n_items):
            status[p] = MF_ENOMEM
        return MF_OK
    if rc == MF_OK:
        for p in range(n_items):
            status[p] = MF_OK
    return rc


def evaluate(const intp_t[::1] par_ptr, const intp_t[::1] par_idx, const intp_t[::1] ch_ptr,
             const intp_t[::1] ch_idx, const intp_t[::1] ch_w, const double[:, ::1] w,
             const double[:, ::1] h, const intp_t[::1] net_of, const double[:, ::1] clamp,
             const double[:, ::1] mu, const double[:, ::1] xi, double[::1] bound,
             int8_t[::1] status, bint noisy_or=False, int n_threads=1):
    """The bound at given mu (free units' values in [0, 1]), xi (noisy-OR: q per edge) into
    ``bound``, free units' entropies included; clamped units are read from ``clamp``.  Free
    units with no clamped descendant (barren) are left out, as the solve sums them out.
    Returns MF_OK or MF_EBADARG (nothing written)."""
    cdef Dag g
    if check_dag(par_ptr, par_idx, ch_ptr, ch_idx, ch_w, &g) != MF_OK:
        return MF_EBADARG
    if check_items(&g, w, h, net_of, clamp) != MF_OK:
        return MF_EBADARG
    cdef Py_ssize_t n = g.n, p, i, n_items = clamp.shape[0], nnz = par_idx.shape[0]
    if (mu.shape[0] != n_items or mu.shape[1] != n or xi.shape[0] != n_items
            or xi.shape[1] != (nnz if noisy_or else n) or bound.shape[0] != n_items
            or status.shape[0] != n_items or n_threads < 1):
        return MF_EBADARG
    cdef size_t nbytes = (4 * <size_t> n + 3 * <size_t> nnz) * sizeof(double) + 3 * <size_t> n + 16
    cdef double *work = NULL
    cdef double *m
    cdef double *nu
    cdef double *Z
    cdef double *dd
    cdef uint8_t *none_
    cdef uint8_t *free_
    cdef uint8_t *barren
    cdef double dummy_w = 0.0, x, total
    with nogil, parallel(num_threads=n_threads):
        work = <double *> malloc(nbytes)
        for p in prange(n_items, schedule="static"):
            if work == NULL:
                status[p] = MF_ENOMEM
                continue
            status[p] = MF_OK
            m = work
            nu = work + n
            Z = work + 2 * n
            dd = work + 3 * n
            none_ = <uint8_t *> (work + 3 * n + 3 * nnz)
            free_ = none_ + n
            barren = free_ + n
            for i in range(n):
                none_[i] = 0       # entropies are added here, from mu (0 ln 0 = 0)
            # the units the solve sums out: no term at all
            barren_of_clamp(&g, &clamp[p, 0], free_, barren)
            total = 0.0
            for i in range(n):
                x = clamp[p, i]
                if not (x == x):
                    x = mu[p, i]
                    if not barren[i]:
                        total = total + entropy(x, 1.0 - x)
                m[i] = x
                nu[i] = 1.0 - x
            if noisy_or:
                total = total + nor_bound_skip(&g, &w[net_of[p], 0] if nnz else &dummy_w,
                                               &h[net_of[p], 0], m, nu,
                                               &xi[p, 0] if nnz else &dummy_w, none_, barren,
                                               Z)
            else:
                total = total + bound_at(&g, &w[net_of[p], 0] if nnz else &dummy_w,
                                         &h[net_of[p], 0], m, nu, &xi[p, 0] if n else &dummy_w,
                                         none_, dd, dd + nnz, dd + 2 * nnz, barren)
            bound[p] = total
        free(work)
    return MF_OK


# ---------------------------------------------------------------------------- the C API
# Declared in mfengine/sbn/_sjj.pxd; the contract is section 2 of mfengine/solver.pxd (and the
# docstring of mf_sjj_solve below).
DEF CAPI_MAX_THREADS = 256
DEF CAPI_MAX_SCALE = 1.1235582092889474e+307      # 2^1020: sjj.MAX_NET_SCALE
DEF CAPI_DEFAULT = 0.0                            # inner_tol: the default rule of mf.infer



cdef int mf_sjj_solve(Py_ssize_t n_units, Py_ssize_t nnz, const Py_ssize_t *par_ptr,
                      const Py_ssize_t *par_idx, const double *weights, const double *biases,
                      int activation, Py_ssize_t n_items, const double *clamp,
                      const double *init_mu, const double *init_xi, double tol,
                      double inner_tol, Py_ssize_t max_sweeps, int n_threads, double *bound,
                      double *mu, double *xi, Py_ssize_t *n_sweeps,
                      signed char *converged) noexcept nogil:
    """The strict SJJ bound maximised for every item (mfengine.sbn.sjj.solve) over one net in
    CSR form; the contract is section 2 of mfengine/solver.pxd."""
    cdef Dag g
    cdef intp_t *ch = NULL
    cdef intp_t *pos = NULL
    cdef Py_ssize_t p, i, n = n_units, n_xi = nnz if activation == 1 else n_units, maxin, maxout
    cdef Py_ssize_t big = <Py_ssize_t> 0x7fffffffffffffff
    cdef double x, gtol
    cdef int rc
    # the structure, finite values in the net scale's range, noisy-OR signs with a leak h > 0
    if not (activation == 0 or activation == 1) or capi_check_net(
            n_units, nnz, par_ptr, par_idx, weights, biases, activation == 1, True,
            CAPI_MAX_SCALE) != MF_OK:
        return MF_EBADARG
    if (n_items < 0 or not (tol >= 0.0 and tol <= 1.7976931348623157e308)
            or not (inner_tol >= 0.0 and inner_tol <= 1.7976931348623157e308)
            or max_sweeps < 0 or max_sweeps >= big):
        return MF_EBADARG
    if n_items > 0 and (bound == NULL or n_sweeps == NULL or converged == NULL
                        or (n_units > 0 and (mu == NULL or clamp == NULL))
                        or (n_xi > 0 and xi == NULL)):
        return MF_EBADARG
    # n_items * n_units and n_items * nnz doubles, and the scratch of up to 256 threads (each
    # at most 23 n_units + 20 nnz + 27 doubles: run_items) must be addressable
    if ((n_units > 0 and n_items > big // 8 // n_units)
            or (nnz > 0 and n_items > big // 8 // nnz) or n_units > big // 131072
            or nnz > big // 131072):
        return MF_EOVERFLOW
    for p in range(n_items * n_units):
        x = clamp[p]
        if x == x:
            if not (x == 0.0 or x == 1.0):
                return MF_EBADARG
        elif init_mu != NULL and not (0.0 <= init_mu[p] <= 1.0):
            return MF_EBADARG
    if init_xi != NULL:
        for p in range(n_items * n_xi):
            x = init_xi[p]
            if activation == 0 and not (0.0 <= x <= 1.0):
                return MF_EBADARG
            if activation == 1 and not (0.0 <= x <= 1.7976931348623157e308):
                return MF_EBADARG
    if n_items == 0:
        return MF_OK
    n_threads = 1 if n_threads < 1 else (CAPI_MAX_THREADS if n_threads > CAPI_MAX_THREADS
                                         else n_threads)
    if inner_tol == CAPI_DEFAULT:      # mfengine.sbn._solve.inner_tol_for
        gtol = 0.1 * sqrt(tol)
        gtol = 1e-13 if gtol < 1e-13 else (1e-3 if gtol > 1e-3 else gtol)
    else:
        gtol = inner_tol
    if capi_dag(n, nnz, par_ptr, par_idx, &g, &ch) != MF_OK:
        return MF_ENOMEM
    rc = prepare_sig(&g, activation == 1, &pos, &maxin, &maxout)
    if rc != MF_OK:
        free(ch)
        return rc
    # the starting point: as sjj.solve (means 0.5, xi 0.5, noisy-OR q uniform; the defaults
    # written by run_items' threads); the clamped units' values are set by the kernel
    if init_mu != NULL:
        for p in range(n_items * n_units):
            mu[p] = init_mu[p] if clamp[p] != clamp[p] else 0.5
    if init_xi != NULL:
        for p in range(n_items * n_xi):
            xi[p] = init_xi[p]
    rc = run_items(&g, pos, maxin, maxout, weights, biases, n_items, NULL, clamp, mu, xi, NULL,
                   bound, n_sweeps, <uint8_t *> converged, tol, gtol, max_sweeps, n_threads,
                   activation == 1, 1, init_mu == NULL, init_xi == NULL)
    free(pos)
    free(ch)
    if rc != MF_OK:
        return rc
    for p in range(n_items):
        if not converged[p]:
            return MF_NOT_CONVERGED
    return MF_OK


# Exported C symbol for C callers (csrc/mfengine_solver.h); the same function as above.
cdef public int mfengine_sjj_solve(
        Py_ssize_t n_units, Py_ssize_t nnz, const Py_ssize_t *par_ptr, const Py_ssize_t *par_idx,
        const double *weights, const double *biases, int activation, Py_ssize_t n_items,
        const double *clamp, const double *init_mu, const double *init_xi, double tol,
        double inner_tol, Py_ssize_t max_sweeps, int n_threads, double *bound, double *mu,
        double *xi, Py_ssize_t *n_sweeps, signed char *converged) noexcept nogil:
    return mf_sjj_solve(n_units, nnz, par_ptr, par_idx, weights, biases, activation, n_items,
                        clamp, init_mu, init_xi, tol, inner_tol, max_sweeps, n_threads, bound,
                        mu, xi, n_sweeps, converged)


def _capi_solve(Py_ssize_t n_units, Py_ssize_t nnz, par_ptr, par_idx, weights, biases,
                int activation, Py_ssize_t n_items, clamp, init_mu, init_xi, double tol,
                double inner_tol, Py_ssize_t max_sweeps, int n_threads, bound, mu, xi,
                n_sweeps, converged):
    """Test hook: mf_sjj_solve on buffers (None passes NULL, as does an empty buffer);
    returns its status.  The sizes are the caller's, unchecked against the buffers: tests
    only."""
    cdef const Py_ssize_t[::1] pp = par_ptr
    cdef const Py_ssize_t[::1] pi = par_idx
    cdef const double[::1] wv = weights
    cdef const double[::1] hv = biases
    cdef const double[::1] cv = clamp
    cdef const double[::1] imv
    cdef const double[::1] ixv
    cdef double[::1] bv = bound
    cdef double[::1] mv = mu
    cdef double[::1] xv = xi
    cdef Py_ssize_t[::1] sv = n_sweeps
    cdef signed char[::1] ccv = converged
    cdef const double *imp = NULL
    cdef const double *ixp = NULL
    cdef int rc
    if init_mu is not None:
        imv = init_mu
        imp = &imv[0] if imv.shape[0] else NULL
    if init_xi is not None:
        ixv = init_xi
        ixp = &ixv[0] if ixv.shape[0] else NULL
    with nogil:
        rc = mf_sjj_solve(n_units, nnz, &pp[0] if pp.shape[0] else NULL,
                          &pi[0] if pi.shape[0] else NULL, &wv[0] if wv.shape[0] else NULL,
                          &hv[0] if hv.shape[0] else NULL, activation, n_items,
                          &cv[0] if cv.shape[0] else NULL, imp, ixp, tol, inner_tol,
                          max_sweeps, n_threads, &bv[0] if bv.shape[0] else NULL,
                          &mv[0] if mv.shape[0] else NULL, &xv[0] if xv.shape[0] else NULL,
                          &sv[0] if sv.shape[0] else NULL, &ccv[0] if ccv.shape[0] else NULL)
    return rc


#: Status codes of ``mf_status.h``, for the Python wrapper.
STATUS_OK = MF_OK
STATUS_EBADARG = MF_EBADARG
STATUS_ENOMEM = MF_ENOMEM
STATUS_NOT_CONVERGED = MF_NOT_CONVERGED
STATUS_EOVERFLOW = MF_EOVERFLOW
