# Included by _sjj.pyx: the noisy-OR kernel of the strict bound.
# For noisy-OR units (f(z) = 1 - e^{-z}, non-negative weights, positive biases) the analogue
# of the bound above uses the concavity of g(z) = ln(1 - e^{-z}) (Jaakkola & Jordan's bound
# for positive findings): for q_ij >= 0 with sum_j q_ij = 1,
#     g(h_i + sum_j W_ij S_j) >= sum_j q_ij g(h_i + W_ij S_j / q_ij),
# whose average under a factorised q is exact.  With D_ij = g(h_i + W_ij / q_ij) - g(h_i),
#     L = sum_{free i} H(mu_i) + sum_i [ -(1 - mu_i) Z_i + mu_i (g(h_i) + sum_j q_ij mu_j D_ij) ].
# L is linear in each mu_k apart from its entropy, so mu_k = sigmoid(dL/dmu_k) exactly; q_i is
# a concave problem on the simplex, solved through its optimality conditions (below).

cdef inline double gnor(double x) noexcept nogil:
    """ln(1 - e^{-x}) for x > 0 (0 at x = inf)."""
    return log(-expm1(-x))


cdef inline double psi_nor(double h, double gh, double y, double *dpsi) noexcept nogil:
    """psi(y) = g(h + y) - g(h) - y g'(h + y) and its derivative y e^{-x} / (1 - e^{-x})^2."""
    cdef double x = h + y, em = exp(-x), om = -expm1(-x)
    dpsi[0] = y * em / (om * om) if em > 0.0 else 0.0
    return log(om) - gh - (y * em / om if em > 0.0 else 0.0)


cdef double invert_psi(double h, double gh, double c, double y) noexcept nogil:
    """The y >= 0 with psi(y) = c, for 0 < c < -g(h) (psi increases from 0 to -g(h))."""
    cdef double lo = 0.0, hi = -1.0, f, d, yn
    cdef Py_ssize_t it
    if not (y > 0.0 and y < 1e300):
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
            if not (yn > lo) or yn == y:
                yn = 2.0 * y + 1.0
        elif not (lo < yn < hi) or yn == y:
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
    lam_used = lam
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
                if d > 0.0:
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
        if not (lo < ln < hi) or ln == lam:
            ln = 0.5 * (lo + hi)
        lam = ln
    # the new q (normalised onto the simplex), kept if it does not lower the term
    S = 0.0
    for k in range(k0, k1):
        qold[k] = q[k]
        q[k] = 0.0
        if w[k] > 0.0 and mu[g.par_idx[k]] * G0 > lam_used and y[k] > 0.0:
            q[k] = w[k] / y[k]
            S += q[k]
    if S > 0.0 and S < 1e300:
        for k in range(k0, k1):
            q[k] /= S
    new = edge_terms(g, w, h, i, mu, q) if (S > 0.0 and S < 1e300) else old - 1.0
    if not (new >= old):
        for k in range(k0, k1):
            q[k] = qold[k]


cdef double nor_bound(const Dag *g, const double *w, const double *h, const double *mu,
                      const double *nu, const double *q, const uint8_t *free_,
                      double *Z) noexcept nogil:
    cdef double total = 0.0, z
    cdef Py_ssize_t i, k
    for i in range(g.n):
        z = h[i]
        for k in range(g.par_ptr[i], g.par_ptr[i + 1]):
            z += w[k] * mu[g.par_idx[k]]
        Z[i] = z
        total -= nu[i] * z
        if mu[i] > 0.0:
            total += mu[i] * (gnor(h[i]) + edge_terms(g, w, h[i], i, mu, q))
        if free_[i]:
            total += entropy(mu[i], nu[i])
    return total


cdef void update_mu_nor(const Dag *g, const double *w, const double *h, Py_ssize_t k,
                        double *mu, double *nu, double *t, const double *q,
                        double *Z) noexcept nogil:
    """mu_k = sigmoid(dL/dmu_k): the exact maximiser (L is H(mu_k) + linear)."""
    cdef double c = Z[k] + gnor(h[k]) + edge_terms(g, w, h[k], k, mu, q), wk, qk, tn, mun, nun
    cdef double dmu
    cdef Py_ssize_t a, cc, e
    for a in range(g.ch_ptr[k], g.ch_ptr[k + 1]):
        cc = g.ch_idx[a]
        e = g.ch_w[a]
        wk = w[e]
        c -= nu[cc] * wk
        qk = q[e]
        if qk > 0.0 and mu[cc] > 0.0:
            c += mu[cc] * qk * (gnor(h[cc] + wk / qk) - gnor(h[cc]))
    tn = c
    if tn > T_MAX:
        tn = T_MAX
    elif tn < -T_MAX:
        tn = -T_MAX
    elif not (tn == tn):
        return
    set_mean(tn, &mun, &nun)
    dmu = (nu[k] - nun) if mu[k] + mun > 1.0 else (mun - mu[k])
    for a in range(g.ch_ptr[k], g.ch_ptr[k + 1]):
        Z[g.ch_idx[a]] += w[g.ch_w[a]] * dmu
    mu[k] = mun
    nu[k] = nun
    t[k] = tn


cdef int solve_item_nor(const Dag *g, const double *w, const double *h, const double *clamp,
                        double *mu, double *q, double *hist, double tol,
                        Py_ssize_t max_sweeps, double *work, double *bound_out,
                        intp_t *sweeps_out) noexcept nogil:
    cdef Py_ssize_t n = g.n, i, k, sweep, nnz = g.par_ptr[g.n]
    cdef double *nu = work
    cdef double *t = work + n
    cdef double *Z = work + 2 * n
    cdef double *y = work + 3 * n
    cdef double *qold = work + 3 * n + nnz
    cdef uint8_t *free_ = <uint8_t *> (work + 3 * n + 2 * nnz)
    cdef double bnd, prev, S
    init_means(n, clamp, mu, nu, t, free_)
    for i in range(n):
        # q on the simplex over the unit's positive weights (uniform if not given)
        S = 0.0
        for k in range(g.par_ptr[i], g.par_ptr[i + 1]):
            if not (q[k] >= 0.0 and q[k] < 1e300) or w[k] <= 0.0:
                q[k] = 0.0
            S += q[k]
        if not (S > 0.0):
            for k in range(g.par_ptr[i], g.par_ptr[i + 1]):
                q[k] = 1.0 if w[k] > 0.0 else 0.0
                S += q[k]
        if S > 0.0:
            for k in range(g.par_ptr[i], g.par_ptr[i + 1]):
                q[k] /= S
    prev = nor_bound(g, w, h, mu, nu, q, free_, Z)
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
                update_mu_nor(g, w, h, k, mu, nu, t, q, Z)
        sweep += 1
        bnd = nor_bound(g, w, h, mu, nu, q, free_, Z)
        if hist != NULL:
            hist[sweep] = bnd
        if fabs(bnd - prev) < tol + REL_FLOOR * fabs(bnd):
            prev = bnd
            converged = 1
            break
        prev = bnd
    bound_out[0] = prev
    sweeps_out[0] = sweep
    return converged
