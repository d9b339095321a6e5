"""Kernel: the strict mean-field lower bound of Saul, Jaakkola & Jordan for DAG nets (sigmoid
units; noisy-OR units with the analogous bound described further down).

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
  child's A and B through one factor, cached per edge by the xi pass.  Taking that factor
  out of the cached log-products (a subtraction) leaves, per child, two numbers P_c, R_c such that the child's log-sum is
  m_c + ln((1 - mu) P_c + mu R_c); the 1-D objective
  H(mu) + mu c0 - sum_c ln((1 - mu) P_c + mu R_c) then costs O(children) per evaluation with
  no exponential.  Its stationary points lie in t in [g(0), g(1)] (g below); a bracketed
  safeguarded Newton search in t from the current point climbs to a local maximum, and the
  move is kept only if the exact 1-D objective rose.
* the bound is read from the caches, O(n_units); the item stops when it changed by less than
  tol.  The xi pass recomputes every cache from scratch, so rounding drift never builds up,
  and the reported bound is recomputed from scratch at the final mu and xi.
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


cdef inline double l1p_tilt(double mu, double x, double *acc) noexcept nogil:
    """Adds ln(1 - mu + mu e^x) to acc[0] and returns tilt(mu, x), from one exp and one log."""
    cdef double e, d
    if x <= 0.0:
        e = exp(x)
        d = 1.0 + mu * (e - 1.0)
        acc[0] += log(d)
        return mu * e / d
    e = exp(-x)
    d = mu + (1.0 - mu) * e
    acc[0] += x + log(d)
    return mu / d


cdef inline double lse(double a, double b) noexcept nogil:
    if a >= b:
        return a + log1p(exp(b - a))
    return b + log1p(exp(a - b))


cdef inline double clip_logit(double mu) noexcept nogil:
    """logit(mu) clipped to [-T_MAX, T_MAX] (mu = 0 or 1 included; NaN gives 0)."""
    cdef double t = log(mu) - log1p(-mu)
    if t > T_MAX:
        return T_MAX
    if t < -T_MAX:
        return -T_MAX
    if t != t:
        return 0.0
    return t


cdef inline void init_means(Py_ssize_t n, const double *clamp, double *mu, double *t,
                            uint8_t *free_) noexcept nogil:
    """Clamped units (a value in ``clamp``; NaN marks a free one) take their values; free
    means are kept at sigmoid(t) with |t| <= T_MAX."""
    cdef Py_ssize_t i
    for i in range(n):
        if clamp[i] == clamp[i]:
            free_[i] = 0
            mu[i] = clamp[i]
            t[i] = 0.0
        else:
            free_[i] = 1
            t[i] = clip_logit(mu[i])
            mu[i] = mf_sigmoid(t[i])


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
                     double xi0, double Z, double gtol, double *A, double *B, double *fa,
                     double *fb) noexcept nogil:
    """Minimise phi(xi) = xi Z + ln(e^A(xi) + e^B(xi)) over [0, 1]; returns xi.  A, B and the
    per-edge log-factors fa[k] = ln(1 - mu_j + mu_j e^{-xi W_ij}), fb[k] (with (1 - xi) W_ij)
    are left at the returned xi."""
    cdef double lo = 0.0, hi = 1.0, xi = xi0, x, wk, r, a, b, da, db, d2a, d2b, pa, pb, fk
    cdef double d1, d2, step, xn, xi_eval = -1.0
    cdef Py_ssize_t k, j, it
    for it in range(MAX_IT):
        xi_eval = xi
        a = -xi * h
        b = (1.0 - xi) * h
        da = -h
        db = -h
        d2a = 0.0
        d2b = 0.0
        for k in range(g.par_ptr[i], g.par_ptr[i + 1]):
            j = g.par_idx[k]
            wk = w[k]
            fk = 0.0
            r = l1p_tilt(mu[j], -xi * wk, &fk)
            fa[k] = fk
            a += fk
            da -= wk * r
            d2a += wk * wk * r * (1.0 - r)
            fk = 0.0
            r = l1p_tilt(mu[j], (1.0 - xi) * wk, &fk)
            fb[k] = fk
            b += fk
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
    if xi != xi_eval:          # the evaluation budget ran out after a step: refresh the caches
        a = -xi * h
        b = (1.0 - xi) * h
        for k in range(g.par_ptr[i], g.par_ptr[i + 1]):
            fa[k] = l1p(mu[g.par_idx[k]], -xi * w[k])
            fb[k] = l1p(mu[g.par_idx[k]], (1.0 - xi) * w[k])
            a += fa[k]
            b += fb[k]
        A[0] = a
        B[0] = b
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


cdef inline double cached_bound(Py_ssize_t n, const double *mu, const double *t,
                               const double *xi, const uint8_t *free_, const double *Z,
                               const double *A, const double *B) noexcept nogil:
    """The bound from the cached Z, A, B: O(n_units)."""
    cdef double total = 0.0
    cdef Py_ssize_t i
    for i in range(n):
        total += (mu[i] - xi[i]) * Z[i] - lse(A[i], B[i])
        if free_[i]:
            total += entropy_t(t[i])
    return total


cdef int update_mu(const Dag *g, const double *w, Py_ssize_t k, double *mu, double *t,
                   const double *xi, double *Z, double *A, double *B, double *P, double *R,
                   double *a_out, double *b_out, double *fa, double *fb,
                   double gtol) noexcept nogil:
    """Move mu_k to a local maximum of the bound uphill from where it is; 1 if it moved.
    Each child's log-products lose k's factor by a subtraction (the cached fa, fb)."""
    cdef Py_ssize_t k0 = g.ch_ptr[k], nc = g.ch_ptr[k + 1] - k0, q, c, e
    cdef double c0 = Z[k], wk, al, be, a, b, m, mk = mu[k]
    for q in range(nc):
        c = g.ch_idx[k0 + q]
        e = g.ch_w[k0 + q]
        wk = w[e]
        c0 += (mu[c] - xi[c]) * wk
        al = -xi[c] * wk
        be = (1.0 - xi[c]) * wk
        a = A[c] - fa[e]
        b = B[c] - fb[e]
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
        e = g.ch_w[k0 + q]
        wk = w[e]
        Z[c] += wk * (mun - mk)
        fa[e] = l1p(mun, -xi[c] * wk)
        fb[e] = l1p(mun, (1.0 - xi[c]) * wk)
        A[c] = a_out[q] + fa[e]
        B[c] = b_out[q] + fb[e]
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
    cdef double *fa = work + 9 * n
    cdef double *fb = work + 9 * n + g.par_ptr[n]
    cdef double bnd, prev, z
    init_means(n, clamp, mu, t, free_)
    for i in range(n):
        if not (0.0 <= xi[i] <= 1.0):
            xi[i] = 0.5
    prev = sweep_bound(g, w, h, mu, t, xi, free_, Z, A, B)
    if hist != NULL:
        hist[0] = prev
    cdef int converged = 0
    sweep = 0
    while sweep < max_sweeps:
        # the xi pass recomputes every unit's Z, A, B and per-edge factors from scratch, so
        # the caches never drift by more than one sweep of incremental mu updates
        for i in range(n):
            z = h[i]
            for k in range(g.par_ptr[i], g.par_ptr[i + 1]):
                z += w[k] * mu[g.par_idx[k]]
            Z[i] = z
            xi[i] = solve_xi(g, w, h[i], i, mu, xi[i], z, gtol, &A[i], &B[i], fa, fb)
        for i in range(n):
            k = i if sweep % 2 == 0 else n - 1 - i
            if free_[k]:
                update_mu(g, w, k, mu, t, xi, Z, A, B, P, R, aa, bb, fa, fb, gtol)
        sweep += 1
        bnd = cached_bound(n, mu, t, xi, free_, Z, A, B)
        if hist != NULL:
            hist[sweep] = bnd
        if fabs(bnd - prev) < tol:
            prev = bnd
            converged = 1
            break
        prev = bnd
    # the reported bound is recomputed from scratch at the final mu, xi
    bound_out[0] = sweep_bound(g, w, h, mu, t, xi, free_, Z, A, B)
    if hist != NULL:
        hist[sweep] = bound_out[0]
    sweeps_out[0] = sweep
    return converged


# ---------------------------------------------------------------------------- noisy-OR
# For noisy-OR units (f(z) = 1 - e^{-z}, non-negative weights, positive biases) the analogue
# of the bound above uses the concavity of g(z) = ln(1 - e^{-z}) (Jaakkola & Jordan's bound
# for positive findings): for q_ij >= 0 with sum_j q_ij = 1,
#     g(h_i + sum_j W_ij S_j) >= sum_j q_ij g(h_i + W_ij S_j / q_ij),
# whose average under a factorised q is exact.  With D_ij = g(h_i + W_ij / q_ij) - g(h_i),
#     L = sum_{free i} H(mu_i) + sum_i [ -(1 - mu_i) Z_i + mu_i (g(h_i) + sum_j q_ij mu_j D_ij) ].
# L is linear in each mu_k apart from its entropy, so mu_k = sigmoid(dL/dmu_k) exactly; q_i is
# a concave problem on the simplex, solved through its optimality conditions (below).

cdef inline double gnor(double x) noexcept nogil:
    """ln(1 - e^{-x}) for x > 0."""
    return log(-expm1(-x))


cdef inline double psi_nor(double h, double gh, double y, double *dpsi) noexcept nogil:
    """psi(y) = g(h + y) - g(h) - y g'(h + y) and its derivative y e^{-x} / (1 - e^{-x})^2."""
    cdef double x = h + y, em = exp(-x), om = -expm1(-x)
    dpsi[0] = y * em / (om * om)
    return log(om) - gh - y * em / om


cdef double invert_psi(double h, double gh, double c, double y) noexcept nogil:
    """The y >= 0 with psi(y) = c, for 0 < c < -g(h) (psi increases from 0 to -g(h))."""
    cdef double lo = 0.0, hi = -1.0, f, d, yn
    cdef Py_ssize_t it
    if not (y > 0.0):
        y = 1.0
    for it in range(MAX_IT):
        f = psi_nor(h, gh, y, &d) - c
        if fabs(f) <= 1e-14 * (c + 1e-300):
            break
        if f > 0.0:
            hi = y
        else:
            lo = y
        if hi > 0.0 and hi - lo <= 1e-15 * hi:
            break
        yn = y - f / d if d > 0.0 else -1.0
        if hi < 0.0:            # no upper end yet: Newton, or double
            if not (yn > lo):
                yn = 2.0 * y + 1.0
        elif not (lo < yn < hi):
            yn = 0.5 * (lo + hi)
        y = yn
    return y


cdef double edge_terms(const Dag *g, const double *w, double h, Py_ssize_t i, const double *mu,
                       const double *q) noexcept nogil:
    """sum_j q_ij mu_j D_ij for unit i."""
    cdef double total = 0.0, gh = gnor(h)
    cdef Py_ssize_t k
    for k in range(g.par_ptr[i], g.par_ptr[i + 1]):
        if q[k] > 0.0 and mu[g.par_idx[k]] > 0.0:
            total += q[k] * mu[g.par_idx[k]] * (gnor(h + w[k] / q[k]) - gh)
    return total


cdef void update_q(const Dag *g, const double *w, double h, Py_ssize_t i, const double *mu,
                   double *q, double *y, double *qold) noexcept nogil:
    """Maximise sum_j q_j mu_j D_j over the simplex.  Each term is concave in q_j with slope
    mu_j psi(W_ij / q_j); at the optimum every q_j > 0 has slope lam, and q_j = 0 where
    mu_j psi(inf) = mu_j (-g(h)) <= lam.  lam is found by a safeguarded Newton search on
    sum_j q_j(lam) = 1; the new q is kept only if it raises the unit's term."""
    cdef Py_ssize_t k0 = g.par_ptr[i], k1 = g.par_ptr[i + 1], k, it
    cdef double gh = gnor(h), G0 = -gh, lam_max = 0.0, lam, lo, hi, S, dS, d, mj, ln
    cdef double old, new, lam_used
    if k1 == k0:
        return
    for k in range(k0, k1):
        mj = mu[g.par_idx[k]]
        if w[k] > 0.0 and mj * G0 > lam_max:
            lam_max = mj * G0
    if lam_max <= 0.0:
        return
    old = edge_terms(g, w, h, i, mu, q)
    # start from the slopes at the current q
    lam = 0.0
    S = 0.0
    for k in range(k0, k1):
        mj = mu[g.par_idx[k]]
        if q[k] > 0.0 and w[k] > 0.0 and mj > 0.0:
            y[k] = w[k] / q[k]
            lam += q[k] * mj * psi_nor(h, gh, y[k], &d)
            S += q[k]
        else:
            y[k] = 1.0
    lam = lam / S if S > 0.0 else 0.5 * lam_max
    if not (0.0 < lam < lam_max):
        lam = 0.5 * lam_max
    lo = 0.0
    hi = lam_max
    for it in range(MAX_IT):
        S = 0.0
        dS = 0.0
        lam_used = lam
        for k in range(k0, k1):
            mj = mu[g.par_idx[k]]
            if w[k] > 0.0 and mj * G0 > lam:
                y[k] = invert_psi(h, gh, lam / mj, y[k])
                psi_nor(h, gh, y[k], &d)
                S += w[k] / y[k]
                dS -= w[k] / (y[k] * y[k]) / (mj * d)
        if fabs(S - 1.0) <= 1e-12:
            break
        if S > 1.0:
            lo = lam
        else:
            hi = lam
        if hi - lo <= 1e-15 * hi:
            break
        ln = lam - (S - 1.0) / dS if dS < 0.0 else -1.0
        if not (lo < ln < hi):
            ln = 0.5 * (lo + hi)
        lam = ln
    # the new q (normalised onto the simplex), kept if it does not lower the term
    S = 0.0
    for k in range(k0, k1):
        qold[k] = q[k]
        q[k] = 0.0
        if w[k] > 0.0 and mu[g.par_idx[k]] * G0 > lam_used:
            q[k] = w[k] / y[k]
            S += q[k]
    if S > 0.0:
        for k in range(k0, k1):
            q[k] /= S
    new = edge_terms(g, w, h, i, mu, q)
    if not (new >= old):
        for k in range(k0, k1):
            q[k] = qold[k]


cdef double nor_bound(const Dag *g, const double *w, const double *h, const double *mu,
                      const double *t, const double *q, const uint8_t *free_,
                      double *Z) noexcept nogil:
    cdef double total = 0.0, z
    cdef Py_ssize_t i, k
    for i in range(g.n):
        z = h[i]
        for k in range(g.par_ptr[i], g.par_ptr[i + 1]):
            z += w[k] * mu[g.par_idx[k]]
        Z[i] = z
        total -= (1.0 - mu[i]) * z
        if mu[i] > 0.0:
            total += mu[i] * (gnor(h[i]) + edge_terms(g, w, h[i], i, mu, q))
        if free_[i]:
            total += entropy_t(t[i])
    return total


cdef void update_mu_nor(const Dag *g, const double *w, const double *h, Py_ssize_t k,
                        double *mu, double *t, const double *q, double *Z) noexcept nogil:
    """mu_k = sigmoid(dL/dmu_k): the exact maximiser (L is H(mu_k) + linear)."""
    cdef double c = Z[k] + gnor(h[k]) + edge_terms(g, w, h[k], k, mu, q), wk, qk, tn
    cdef Py_ssize_t a, cc, e
    for a in range(g.ch_ptr[k], g.ch_ptr[k + 1]):
        cc = g.ch_idx[a]
        e = g.ch_w[a]
        wk = w[e]
        c -= (1.0 - mu[cc]) * wk
        qk = q[e]
        if qk > 0.0 and mu[cc] > 0.0:
            c += mu[cc] * qk * (gnor(h[cc] + wk / qk) - gnor(h[cc]))
    tn = c
    if tn > T_MAX:
        tn = T_MAX
    elif tn < -T_MAX:
        tn = -T_MAX
    cdef double mun = mf_sigmoid(tn)
    for a in range(g.ch_ptr[k], g.ch_ptr[k + 1]):
        Z[g.ch_idx[a]] += w[g.ch_w[a]] * (mun - mu[k])
    mu[k] = mun
    t[k] = tn


cdef int solve_item_nor(const Dag *g, const double *w, const double *h, const double *clamp,
                        double *mu, double *q, double *hist, double tol,
                        Py_ssize_t max_sweeps, double *work, double *bound_out,
                        intp_t *sweeps_out) noexcept nogil:
    cdef Py_ssize_t n = g.n, i, k, sweep, nnz = g.par_ptr[g.n]
    cdef double *t = work
    cdef double *Z = work + n
    cdef uint8_t *free_ = <uint8_t *> (work + 2 * n)
    cdef double *y = work + 3 * n
    cdef double *qold = work + 3 * n + nnz
    cdef double bnd, prev, S
    init_means(n, clamp, mu, t, free_)
    for i in range(n):
        # q on the simplex over the unit's positive weights (uniform if not given)
        S = 0.0
        for k in range(g.par_ptr[i], g.par_ptr[i + 1]):
            if not (q[k] >= 0.0) or w[k] <= 0.0:
                q[k] = 0.0
            S += q[k]
        if not (S > 0.0):
            for k in range(g.par_ptr[i], g.par_ptr[i + 1]):
                q[k] = 1.0 if w[k] > 0.0 else 0.0
                S += q[k]
        if S > 0.0:
            for k in range(g.par_ptr[i], g.par_ptr[i + 1]):
                q[k] /= S
    prev = nor_bound(g, w, h, mu, t, q, free_, Z)
    if hist != NULL:
        hist[0] = prev
    cdef int converged = 0
    sweep = 0
    while sweep < max_sweeps:
        for i in range(n):
            if mu[i] > 0.0:
                update_q(g, w, h[i], i, mu, q, y, qold)
        for i in range(n):
            k = i if sweep % 2 == 0 else n - 1 - i
            if free_[k]:
                update_mu_nor(g, w, h, k, mu, t, q, Z)
        sweep += 1
        bnd = nor_bound(g, w, h, mu, t, q, free_, Z)
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
          Py_ssize_t max_sweeps, int n_threads, bint noisy_or=False):
    """Solve every item in place (see the module docstring).  ``history`` is (n_items,
    max_sweeps + 1) to record the bound after each sweep, or (0, 0) for none.  With
    ``noisy_or``, ``xi`` is (n_items, nnz): the q of every edge, in parent order."""
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
        work = <double *> malloc((9 * n + 2 * xi.shape[1] + 2 * par_idx.shape[0]) * sizeof(double) + 8)
        for p in prange(n_items, schedule="dynamic", chunksize=8):
            if work == NULL:
                converged[p] = 2
                continue
            wrow = &w[net_of[p], 0] if w.shape[1] else &dummy_w
            if noisy_or:
                converged[p] = solve_item_nor(&g, wrow, &h[net_of[p], 0], &clamp[p, 0],
                                              &mu[p, 0], &xi[p, 0] if xi.shape[1] else &dummy_w,
                                              &history[p, 0] if record else NULL, tol,
                                              max_sweeps, work, &bound[p], &n_sweeps[p])
            else:
                converged[p] = solve_item(&g, wrow, &h[net_of[p], 0], &clamp[p, 0], &mu[p, 0],
                                          &xi[p, 0], &history[p, 0] if record else NULL, tol,
                                          gtol, max_sweeps, work, &bound[p], &n_sweeps[p])
        free(work)
    if np.any(np.asarray(converged) == 2):
        raise MemoryError("could not allocate per-thread scratch space for the SJJ solver")


def evaluate(const intp_t[::1] par_ptr, const intp_t[::1] par_idx, const intp_t[::1] ch_ptr,
             const intp_t[::1] ch_idx, const intp_t[::1] ch_w, const double[:, ::1] w,
             const double[:, ::1] h, const intp_t[::1] net_of, const double[:, ::1] clamp,
             const double[:, ::1] mu, const double[:, ::1] xi, double[::1] bound,
             bint noisy_or=False):
    """The bound at given mu, xi (noisy-OR: q per edge; clamped units read from ``clamp``),
    into ``bound``."""
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
        if noisy_or:
            bound[p] = nor_bound(&g, &w[net_of[p], 0] if w.shape[1] else &dummy_w,
                                 &h[net_of[p], 0], m, t, &xi[p, 0] if xi.shape[1] else &dummy_w,
                                 &none_[0], Z)
        else:
            bound[p] = sweep_bound(&g, &w[net_of[p], 0] if w.shape[1] else &dummy_w,
                                   &h[net_of[p], 0], m, t, &xi[p, 0], &none_[0], Z, A, B)
        for i in range(n):
            if clamp[p, i] != clamp[p, i]:
                x = m[i]
                if 0.0 < x < 1.0:
                    bound[p] -= x * log(x) + (1.0 - x) * log1p(-x)
