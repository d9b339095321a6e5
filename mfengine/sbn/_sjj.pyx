"""Kernel: the strict mean-field lower bound of Saul, Jaakkola & Jordan for sigmoid DAG nets.

Called only from ``mfengine.sbn.sjj``; the wrapper validates every input.

With z_i = h_i + sum_j W_ij S_j and a factorised q with means mu (clamped units hold their
values), ``<ln(1 + e^z)> <= xi <z> + ln(<e^{-xi z}> + <e^{(1 - xi) z}>)`` for any xi in [0, 1],
and the averages are exact products over the parents:
``ln <e^{a z_i}> = a h_i + sum_j ln(1 - mu_j + mu_j e^{a W_ij})``.  Hence

    L = sum_{free i} H(mu_i) + sum_i [ (mu_i - xi_i) Z_i - ln(e^{A_i} + e^{B_i}) ]

with Z_i = <z_i>, A_i = ln <e^{-xi_i z_i}>, B_i = ln <e^{(1 - xi_i) z_i}>: a lower bound on
ln P(clamped units) for every mu and xi in [0, 1].

State per item: mu and t = logit(mu) per unit, and the cached Z, A, B per unit.  One sweep:

* xi of every unit: phi(xi) = xi Z + ln(e^A + e^B) is convex in xi, with phi'(0) <= 0 <=
  phi'(1); a safeguarded Newton search on [0, 1] minimises it (O(fan-in) per evaluation).
* mu of every free unit (forward on even sweeps, backward on odd ones): mu_k enters each
  child's A and B through one factor.  Taking that factor out of the cached log-products
  leaves, per child, two numbers P_c, R_c such that the child's log-sum is
  m_c + ln((1 - mu) P_c + mu R_c); the 1-D objective
  H(mu) + mu c0 - sum_c ln((1 - mu) P_c + mu R_c) then costs O(children) per evaluation with
  no exponential.  Its stationary points lie in t in [g(0), g(1)] (g below); a bracketed
  safeguarded Newton search in t from the current point climbs to a local maximum, and the
  move is kept only if the exact 1-D objective rose.
* the bound is recomputed from scratch (which also clears rounding drift of the caches); the
  item stops when it changed by less than tol.
"""
import numpy as np

from cython.parallel cimport prange, parallel
from libc.math cimport fabs, log, log1p, exp, expm1, isfinite
from libc.stdlib cimport malloc, free
from mfengine._typedefs cimport intp_t, uint8_t

cdef extern from "mf_numerics.h" nogil:
    double mf_log1pexp(double x)
    double mf_sigmoid(double x)

DEF T_MAX = 40.0       # means are kept at sigmoid(t) with |t| <= T_MAX
DEF T_TOL = 1e-12      # bracket width (in t) at which a search stops
DEF MAX_IT = 100       # evaluations per 1-D solve, a safety net

cdef struct Dag:
    Py_ssize_t n
    const intp_t *par_ptr
    const intp_t *par_idx
    const intp_t *ch_ptr
    const intp_t *ch_idx
    const intp_t *ch_w


cdef inline double l1p(double mu, double x) noexcept nogil:
    """ln(1 - mu + mu e^x), accurate for every x and mu in [0, 1]."""
    if x <= 0.0:
        return log1p(mu * expm1(x))
    return x + log1p((1.0 - mu) * expm1(-x))


cdef inline double tilt(double mu, double x) noexcept nogil:
    """mu e^x / (1 - mu + mu e^x): the mean of a {0,1} unit under the tilted average."""
    if x <= 0.0:
        return mu * exp(x) / (1.0 + mu * expm1(x))
    return mu / (mu + (1.0 - mu) * exp(-x))


cdef inline double lse(double a, double b) noexcept nogil:
    if a >= b:
        return a + log1p(exp(b - a))
    return b + log1p(exp(a - b))


cdef inline double entropy_t(double t) noexcept nogil:
    """Binary entropy of sigmoid(t), from t (exact near 0 and 1)."""
    cdef double mu = mf_sigmoid(t)
    return mu * mf_log1pexp(-t) + (1.0 - mu) * mf_log1pexp(t)


cdef void unit_moments(const Dag *g, const double *w, double h, Py_ssize_t i, const double *mu,
                       double xi, double *Z, double *A, double *B) noexcept nogil:
    cdef Py_ssize_t k, j
    cdef double z = h, a = -xi * h, b = (1.0 - xi) * h, wk
    for k in range(g.par_ptr[i], g.par_ptr[i + 1]):
        j = g.par_idx[k]
        wk = w[k]
        z += wk * mu[j]
        a += l1p(mu[j], -xi * wk)
        b += l1p(mu[j], (1.0 - xi) * wk)
    Z[0] = z
    A[0] = a
    B[0] = b


cdef double solve_xi(const Dag *g, const double *w, double h, Py_ssize_t i, const double *mu,
                     double xi0, double Z, double gtol, double *A, double *B) noexcept nogil:
    """Minimise phi(xi) = xi Z + ln(e^A(xi) + e^B(xi)) over [0, 1]; returns xi (A, B updated)."""
    cdef double lo = 0.0, hi = 1.0, xi = xi0, x, wk, r, a, b, da, db, d2a, d2b, pa, pb
    cdef double d1, d2, step, xn
    cdef Py_ssize_t k, j, it
    for it in range(MAX_IT):
        a = -xi * h
        b = (1.0 - xi) * h
        da = -h
        db = -h
        d2a = 0.0
        d2b = 0.0
        for k in range(g.par_ptr[i], g.par_ptr[i + 1]):
            j = g.par_idx[k]
            wk = w[k]
            x = -xi * wk
            a += l1p(mu[j], x)
            r = tilt(mu[j], x)
            da -= wk * r
            d2a += wk * wk * r * (1.0 - r)
            x = (1.0 - xi) * wk
            b += l1p(mu[j], x)
            r = tilt(mu[j], x)
            db -= wk * r
            d2b += wk * wk * r * (1.0 - r)
        pa = 1.0 / (1.0 + exp(b - a))
        pb = 1.0 - pa
        d1 = Z + pa * da + pb * db
        A[0] = a
        B[0] = b
        if fabs(d1) <= gtol:
            break
        if d1 > 0.0:
            hi = xi
        else:
            lo = xi
        if hi - lo <= 1e-15:
            break
        d2 = pa * (d2a + da * da) + pb * (d2b + db * db) - (pa * da + pb * db) ** 2
        xn = xi - d1 / d2 if d2 > 0.0 else -1.0
        if not (lo < xn < hi):
            xn = 0.5 * (lo + hi)
        xi = xn
    return xi


cdef inline double sweep_bound(const Dag *g, const double *w, const double *h,
                               const double *mu, const double *t, const double *xi,
                               const uint8_t *free_, double *Z, double *A, double *B) noexcept nogil:
    """The bound from scratch; refreshes the caches Z, A, B."""
    cdef double total = 0.0
    cdef Py_ssize_t i
    for i in range(g.n):
        unit_moments(g, w, h[i], i, mu, xi[i], &Z[i], &A[i], &B[i])
        total += (mu[i] - xi[i]) * Z[i] - lse(A[i], B[i])
        if free_[i]:
            total += entropy_t(t[i])
    return total


cdef int update_mu(const Dag *g, const double *w, Py_ssize_t k, double *mu, double *t,
                   const double *xi, double *Z, double *A, double *B, double *P, double *R,
                   double *a_out, double *b_out, double gtol) noexcept nogil:
    """Move mu_k to a local maximum of the bound uphill from where it is; 1 if it moved."""
    cdef Py_ssize_t k0 = g.ch_ptr[k], nc = g.ch_ptr[k + 1] - k0, q, c
    cdef double c0 = Z[k], wk, al, be, a, b, m, mk = mu[k]
    for q in range(nc):
        c = g.ch_idx[k0 + q]
        wk = w[g.ch_w[k0 + q]]
        c0 += (mu[c] - xi[c]) * wk
        al = -xi[c] * wk
        be = (1.0 - xi[c]) * wk
        a = A[c] - l1p(mk, al)
        b = B[c] - l1p(mk, be)
        a_out[q] = a
        b_out[q] = b
        m = a + al if a + al > b + be else b + be
        if a > m:
            m = a
        if b > m:
            m = b
        P[q] = exp(a - m) + exp(b - m)
        R[q] = exp(a + al - m) + exp(b + be - m)

    cdef double t0 = t[k], F0, F, dF, s, den, d, lo, hi, tn, mun, g0, g1
    cdef Py_ssize_t it
    # F(t) = dL/dmu at mu = sigmoid(t): -t + c0 - sum_c (R - P) / ((1 - mu) P + mu R)
    g0 = c0
    g1 = c0
    for q in range(nc):
        g0 -= (R[q] - P[q]) / P[q]
        g1 -= (R[q] - P[q]) / R[q]
    F0 = -t0 + c0
    for q in range(nc):
        F0 -= (R[q] - P[q]) / ((1.0 - mk) * P[q] + mk * R[q])
    if fabs(F0) <= gtol:
        return 0
    if F0 > 0.0:
        lo = t0
        hi = g1 if g1 < T_MAX else T_MAX
        if hi <= lo:
            return 0
    else:
        hi = t0
        lo = g0 if g0 > -T_MAX else -T_MAX
        if lo >= hi:
            return 0
    # both ends of [lo, hi] are known to bracket a stationary point (F(lo) >= 0 >= F(hi)),
    # except where T_MAX clips, in which case the clipped end itself is the answer
    tn = t0 + F0   # first trial: a gradient step, clipped into the bracket
    if not (lo < tn < hi):
        tn = 0.5 * (lo + hi)
    for it in range(MAX_IT):
        mun = mf_sigmoid(tn)
        F = -tn + c0
        dF = 0.0
        for q in range(nc):
            den = (1.0 - mun) * P[q] + mun * R[q]
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
        dF = -1.0 + mun * (1.0 - mun) * dF
        s = tn - F / dF if dF < 0.0 else lo - 1.0
        if not (lo < s < hi):
            s = 0.5 * (lo + hi)
        tn = s
    mun = mf_sigmoid(tn)
    # keep the move only if the exact 1-D objective rose
    cdef double gain = entropy_t(tn) - entropy_t(t0) + (mun - mk) * c0
    for q in range(nc):
        gain -= log(((1.0 - mun) * P[q] + mun * R[q]) / ((1.0 - mk) * P[q] + mk * R[q]))
    if not (gain > 0.0):
        return 0
    mu[k] = mun
    t[k] = tn
    for q in range(nc):
        c = g.ch_idx[k0 + q]
        wk = w[g.ch_w[k0 + q]]
        Z[c] += wk * (mun - mk)
        A[c] = a_out[q] + l1p(mun, -xi[c] * wk)
        B[c] = b_out[q] + l1p(mun, (1.0 - xi[c]) * wk)
    return 1


cdef int solve_item(const Dag *g, const double *w, const double *h, const double *clamp,
                    double *mu, double *xi, double *hist, double tol, double gtol,
                    Py_ssize_t max_sweeps, double *work, double *bound_out,
                    intp_t *sweeps_out) noexcept nogil:
    """Coordinate ascent for one item; returns 1 if it converged."""
    cdef Py_ssize_t n = g.n, i, k, sweep, maxch = 0
    cdef double *t = work
    cdef double *Z = work + n
    cdef double *A = work + 2 * n
    cdef double *B = work + 3 * n
    cdef uint8_t *free_ = <uint8_t *> (work + 4 * n)
    cdef double *P = work + 5 * n
    cdef double *R = work + 6 * n
    cdef double *aa = work + 7 * n
    cdef double *bb = work + 8 * n
    cdef double lim = mf_sigmoid(-T_MAX), bnd, prev
    for i in range(n):
        if clamp[i] == clamp[i]:          # a clamped unit (NaN marks a free one)
            free_[i] = 0
            mu[i] = clamp[i]
            t[i] = 0.0
        else:
            free_[i] = 1
            if mu[i] < lim:
                mu[i] = lim
            elif mu[i] > 1.0 - lim:
                mu[i] = 1.0 - lim
            t[i] = log(mu[i] / (1.0 - mu[i]))
        if not (0.0 <= xi[i] <= 1.0):
            xi[i] = 0.5
    prev = sweep_bound(g, w, h, mu, t, xi, free_, Z, A, B)
    if hist != NULL:
        hist[0] = prev
    cdef int converged = 0
    sweep = 0
    while sweep < max_sweeps:
        for i in range(n):
            xi[i] = solve_xi(g, w, h[i], i, mu, xi[i], Z[i], gtol, &A[i], &B[i])
        for i in range(n):
            k = i if sweep % 2 == 0 else n - 1 - i
            if free_[k]:
                update_mu(g, w, k, mu, t, xi, Z, A, B, P, R, aa, bb, gtol)
        sweep += 1
        bnd = sweep_bound(g, w, h, mu, t, xi, free_, Z, A, B)
        if hist != NULL:
            hist[sweep] = bnd
        if fabs(bnd - prev) < tol:
            prev = bnd
            converged = 1
            break
        prev = bnd
    bound_out[0] = prev
    sweeps_out[0] = sweep
    return converged


def solve(const intp_t[::1] par_ptr, const intp_t[::1] par_idx, const intp_t[::1] ch_ptr,
          const intp_t[::1] ch_idx, const intp_t[::1] ch_w, const double[:, ::1] w,
          const double[:, ::1] h, const intp_t[::1] net_of, const double[:, ::1] clamp,
          double[:, ::1] mu, double[:, ::1] xi, double[::1] bound, intp_t[::1] n_sweeps,
          uint8_t[::1] converged, double[:, ::1] history, double tol, double gtol,
          Py_ssize_t max_sweeps, int n_threads):
    """Solve every item in place (see the module docstring).  ``history`` is (n_items,
    max_sweeps + 1) to record the bound after each sweep, or (0, 0) for none."""
    cdef Dag g
    g.n = h.shape[1]
    g.par_ptr = &par_ptr[0]
    g.par_idx = &par_idx[0] if par_idx.shape[0] else NULL
    g.ch_ptr = &ch_ptr[0]
    g.ch_idx = &ch_idx[0] if ch_idx.shape[0] else NULL
    g.ch_w = &ch_w[0] if ch_w.shape[0] else NULL
    cdef Py_ssize_t n_items = clamp.shape[0], p, n = g.n
    cdef bint record = history.shape[0] > 0
    cdef double *work = NULL
    cdef const double *wrow
    cdef double dummy_w = 0.0
    with nogil, parallel(num_threads=n_threads):
        work = <double *> malloc(9 * n * sizeof(double) + 8)
        for p in prange(n_items, schedule="dynamic", chunksize=8):
            if work == NULL:
                converged[p] = 2
                continue
            wrow = &w[net_of[p], 0] if w.shape[1] else &dummy_w
            converged[p] = solve_item(&g, wrow, &h[net_of[p], 0], &clamp[p, 0], &mu[p, 0],
                                      &xi[p, 0], &history[p, 0] if record else NULL, tol, gtol,
                                      max_sweeps, work, &bound[p], &n_sweeps[p])
        free(work)
    if np.any(np.asarray(converged) == 2):
        raise MemoryError("could not allocate per-thread scratch space for the SJJ solver")


def evaluate(const intp_t[::1] par_ptr, const intp_t[::1] par_idx, const intp_t[::1] ch_ptr,
             const intp_t[::1] ch_idx, const intp_t[::1] ch_w, const double[:, ::1] w,
             const double[:, ::1] h, const intp_t[::1] net_of, const double[:, ::1] clamp,
             const double[:, ::1] mu, const double[:, ::1] xi, double[::1] bound):
    """The bound at given mu, xi (clamped units read from ``clamp``), into ``bound``."""
    cdef Dag g
    g.n = h.shape[1]
    g.par_ptr = &par_ptr[0]
    g.par_idx = &par_idx[0] if par_idx.shape[0] else NULL
    g.ch_ptr = &ch_ptr[0]
    g.ch_idx = &ch_idx[0] if ch_idx.shape[0] else NULL
    g.ch_w = &ch_w[0] if ch_w.shape[0] else NULL
    cdef Py_ssize_t n = g.n, p, i
    cdef double dummy_w = 0.0, x
    work_a = np.empty(5 * n + 1, dtype=np.float64)
    cdef double[::1] work = work_a
    cdef double *m = &work[0]
    cdef double *t = &work[n]
    cdef double *Z = &work[2 * n]
    cdef double *A = &work[3 * n]
    cdef double *B = &work[4 * n]
    none_a = np.zeros(n, dtype=np.uint8)   # entropy added below, from mu (0 log 0 = 0)
    cdef uint8_t[::1] none_ = none_a
    for p in range(clamp.shape[0]):
        for i in range(n):
            t[i] = 0.0
            m[i] = clamp[p, i] if clamp[p, i] == clamp[p, i] else mu[p, i]
        bound[p] = sweep_bound(&g, &w[net_of[p], 0] if w.shape[1] else &dummy_w,
                               &h[net_of[p], 0], m, t, &xi[p, 0], &none_[0], Z, A, B)
        for i in range(n):
            if clamp[p, i] != clamp[p, i]:
                x = m[i]
                if 0.0 < x < 1.0:
                    bound[p] -= x * log(x) + (1.0 - x) * log1p(-x)
