# Included by _sjj.pyx: the noisy-OR kernel of the strict bound.
# For noisy-OR units (f(z) = 1 - e^{-z}, non-negative weights, positive biases) the analogue
# of the bound above uses the concavity of g(z) = ln(1 - e^{-z}) (Jaakkola & Jordan's bound
# for positive findings): for q_ij >= 0 with sum_j q_ij = 1,
#     g(h_i + sum_j W_ij S_j) >= sum_j q_ij g(h_i + W_ij S_j / q_ij),
# whose average under a factorised q is exact.  With D_ij = g(h_i + W_ij / q_ij) - g(h_i),
#     L = sum_{free i} H(mu_i) + sum_i [ -(1 - mu_i) Z_i + mu_i (g(h_i) + sum_j q_ij mu_j D_ij) ].
# L is linear in each mu_k apart from its entropy, so mu_k = sigmoid(dL/dmu_k) exactly; q_i is
# a concave problem on the simplex, solved through its optimality conditions (below).

# Barren units (mark_barren in _dag.pxd; e.g. an unrecorded finding of a diagnosis net) are
# dropped from an item's solve (no mean update, no term of the bound, no q, not
# children of their parents), so the bound is that of the net with them deleted; their mean
# is then set to the predictive probability under q (barren_means in _dag.pxd).


cdef inline double gnor(double x) noexcept nogil:
    """ln(1 - e^{-x}) for x > 0 (0 at x = inf)."""
    return log(-expm1(-x))


cdef inline double psi_nor(double h, double gh, double y, double *dpsi) noexcept nogil:
    """psi(y) = g(h + y) - g(h) - y g'(h + y) and its derivative y e^{-x} / (1 - e^{-x})^2,
    x = h + y, from one exponential and one log (e^{-x} and 1 - e^{-x} are each taken from the
    one of exp / expm1 that gives it to a few ulp, the other as 1 minus it)."""
    cdef double x = h + y, em, om, r
    if x > 0.6931471805599453:
        em = exp(-x)
        om = 1.0 - em
    else:
        om = -expm1(-x)
        em = 1.0 - om
    r = em / om
    dpsi[0] = y * r / om
    return log(om) - gh - y * r


cdef double invert_psi(double h, double gh, double c, double y, double *dlast) noexcept nogil:
    """The y >= 0 with psi(y) = c, for 0 < c < -g(h) (psi increases from 0 to -g(h)), by a
    bracketed Newton search from y; ``dlast`` receives psi' at the last point evaluated."""
    cdef double lo = 0.0, hi = -1.0, f, d = 0.0, yn
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
    dlast[0] = d
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
                y[k] = invert_psi(h, gh, lam / mj, y[k], &d)
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


cdef double nor_bound_skip(const Dag *g, const double *w, const double *h, const double *mu,
                           const double *nu, const double *q, const uint8_t *free_,
                           const uint8_t *skip, double *Z) noexcept nogil:
    """The bound; units with ``skip[i]`` (barren units; ``skip`` may be NULL) left out."""
    cdef double total = 0.0, z
    cdef Py_ssize_t i, k
    for i in range(g.n):
        if skip != NULL and skip[i]:
            continue
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
                        double *Z, const uint8_t *barren) noexcept nogil:
    """mu_k = sigmoid(dL/dmu_k): the exact maximiser (L is H(mu_k) + linear)."""
    cdef double c = Z[k] + gnor(h[k]) + edge_terms(g, w, h[k], k, mu, q), wk, qk, tn, mun, nun
    cdef double dmu
    cdef Py_ssize_t a, cc, e
    for a in range(g.ch_ptr[k], g.ch_ptr[k + 1]):
        cc = g.ch_idx[a]
        if barren[cc]:
            continue
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


cdef int solve_item_nor_plain(const Dag *g, const double *w, const double *h, const double *clamp,
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
    cdef uint8_t *barren = free_ + n
    cdef double bnd, prev, S
    init_means(n, clamp, mu, nu, t, free_)
    mark_barren(g, free_, barren)
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
    prev = nor_bound_skip(g, w, h, mu, nu, q, free_, barren, Z)
    if hist != NULL:
        hist[0] = prev
    cdef int converged = 0
    sweep = 0
    while sweep < max_sweeps:
        for i in range(n):
            if mu[i] > 0.0 and not barren[i]:
                update_q(g, w, h[i], i, mu, q, y, qold)
        for i in range(n):
            k = i if sweep % 2 == 0 else n - 1 - i
            if free_[k] and not barren[k]:
                update_mu_nor(g, w, h, k, mu, nu, t, q, Z, barren)
        sweep += 1
        bnd = nor_bound_skip(g, w, h, mu, nu, q, free_, barren, Z)
        if hist != NULL:
            hist[sweep] = bnd
        if fabs(bnd - prev) < tol + REL_FLOOR * fabs(bnd):
            prev = bnd
            converged = 1
            break
        prev = bnd
    barren_means(g, w, h, barren, mu)
    bound_out[0] = prev
    sweeps_out[0] = sweep
    return converged


# ---------------------------------------------------------------------------- the fast path
# solve_item_nor works on the same bound and the same coordinate updates as
# solve_item_nor_plain (its fallback when scratch space cannot be allocated), but sorts the
# units of each item once:
#  * units clamped to 0 (the negative findings of a diagnosis net) have the term -Z_i =
#    -h_i - sum_j W_ij mu_j, linear in their parents' means and free of q: they are absorbed
#    once per item into a constant C0 and a coefficient cfix_j per free parent (O(edges), no
#    exponential), and never visited again;
#  * q-units, the free units and the units clamped to a value > 0 (positive findings), carry
#    mu_i (g(h_i) + sum_j q_ij mu_j D_ij); D_ij = g(h_i + W_ij / q_ij) - g(h_i) is cached per
#    edge and recomputed only when q_i changes;
#  * a free unit's update reads its own parents and its q-unit children only (a compact child
#    list built per item), so a disease none of whose findings is positive costs O(1) a sweep
#    (its mean is the closed form sigmoid(h + g(h) + cfix) from the first sweep on).
# The bound after a sweep is C0 + sum_{free k} [H(mu_k) + mu_k cfix_k - (1 - mu_k) Z_k]
# + sum_{q-units i} mu_i (g(h_i) + sum_j q_ij mu_j D_ij), O(units + q-unit edges).

DEF JOINT_IT = 40      # Newton steps of joint_q per q update before the nested search takes over
DEF JOINT_TOL = 1e-10  # the largest residual (log form) of a solved q


cdef int joint_q(const Dag *g, const double *w, double h, double gh, Py_ssize_t i,
                 const double *mu, double *y, double *rho, double *dy, double *dl,
                 double *lam_io, double lam_max, Py_ssize_t max_it) noexcept nogil:
    """Newton's method on the whole optimality system of update_q: mu_j psi(y_j) = lam for the
    edges with mu_j G0 > lam (G0 = -g(h)), sum_j W_ij / y_j = 1 (q_j = W_ij / y_j), one psi
    per edge per step instead of a 1-D inversion per edge per step of lam.  Each edge's
    equation is taken in log form, log(mu_j psi(y_j) / lam) = 0 where psi is below G0 / 2 and
    log((G0 - psi(y_j)) / (G0 - lam / mu_j)) = 0 above it, so that both the rise of psi from
    0 and its exponential approach to G0 are nearly linear in y.  Returns 1 once the edges'
    residuals are below JOINT_TOL and the simplex constraint's below 1e-12, or all below 1e-8
    and no longer shrinking (their own rounding floor); y and lam_io then hold the solution.
    Returns 0 if it gave up after max_it steps or met a non-finite value (the caller then
    falls back to the nested search)."""
    cdef Py_ssize_t k0 = g.par_ptr[i], k1 = g.par_ptr[i + 1], k, it
    cdef double G0 = -gh, lam = lam_io[0], r0, num, den, res, mj, yk, x, u, om, r, ps, ph, dps
    cdef double c, b, dlam, lnew, yn, d, rmax, res_prev = 1e300
    for it in range(max_it + 1):
        r0 = -1.0
        num = 0.0
        den = 0.0
        res = 0.0
        for k in range(k0, k1):
            mj = mu[g.par_idx[k]]
            if not (w[k] > 0.0 and mj * G0 > lam):
                continue
            yk = y[k]
            x = h + yk
            if x > 0.6931471805599453:
                u = exp(-x)
                om = 1.0 - u
            else:
                om = -expm1(-x)
                u = 1.0 - om
            r = u / om
            ph = yk * r - log(om)          # G0 - psi(y) >= 0, without cancellation
            ps = G0 - ph
            dps = yk * r / om
            c = lam / mj
            if c <= 0.5 * G0:
                if not (ps > 0.0 and dps > 0.0):
                    return 0
                rho[k] = log(ps / c)
                dy[k] = dps / ps
                dl[k] = -1.0 / lam
            else:
                if not (ph > 0.0 and dps > 0.0):
                    return 0
                rho[k] = log(ph / (G0 - c))
                dy[k] = -dps / ph
                dl[k] = 1.0 / (mj * G0 - lam)
            r0 += w[k] / yk
            b = w[k] / (yk * yk * dy[k])
            num += b * rho[k]
            den += b * dl[k]
            if fabs(rho[k]) > res:
                res = fabs(rho[k])
        if not (fabs(r0) <= 1e300 and res <= 1e300 and den < 0.0):
            return 0
        rmax = res if res > fabs(r0) else fabs(r0)
        if (fabs(r0) <= 1e-12 and res <= JOINT_TOL) or (rmax <= 1e-8 and rmax > 0.1 * res_prev):
            lam_io[0] = lam
            return 1
        res_prev = rmax
        dlam = -(r0 + num) / den
        lnew = lam + dlam
        if not (lnew > 0.0):
            lnew = 0.25 * lam
        elif not (lnew < lam_max):
            lnew = 0.5 * (lam + lam_max)
        dlam = lnew - lam
        for k in range(k0, k1):
            mj = mu[g.par_idx[k]]
            if not (w[k] > 0.0 and mj * G0 > lnew):
                continue
            if mj * G0 > lam:
                yk = y[k]
                yn = yk + (-rho[k] - dl[k] * dlam) / dy[k]
                if not (yn >= 0.125 * yk):
                    yn = 0.125 * yk
                elif not (yn <= 8.0 * yk + 8.0):
                    yn = 8.0 * yk + 8.0
                y[k] = yn
            else:               # an edge that enters the active set
                y[k] = invert_psi(h, gh, lnew / mj, y[k], &d)
        lam = lnew
    return 0


cdef double nested_lam(const Dag *g, const double *w, double h, double gh, Py_ssize_t i,
                       const double *mu, double *y, double lam, double lam_max) noexcept nogil:
    """update_q's search: safeguarded Newton on lam with sum_j W_ij / y_j(lam) = 1, each
    y_j(lam) a 1-D inversion of psi (warm-started from y); returns the last lam used, y at it."""
    cdef Py_ssize_t k0 = g.par_ptr[i], k1 = g.par_ptr[i + 1], k, it
    cdef double G0 = -gh, lo = 0.0, hi = lam_max, S, dS, d, mj, ln, yk, lam_used = lam
    for it in range(MAX_IT):
        S = 0.0
        dS = 0.0
        lam_used = lam
        for k in range(k0, k1):
            mj = mu[g.par_idx[k]]
            if w[k] > 0.0 and mj * G0 > lam:
                yk = invert_psi(h, gh, lam / mj, y[k], &d)
                y[k] = yk
                S += w[k] / yk
                if d > 0.0:
                    dS -= w[k] / (yk * yk) / (mj * d)
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
    return lam_used


cdef int try_q(const Dag *g, const double *w, double h, double gh, Py_ssize_t i,
               const double *mu, double *q, double *y, double *qn, double *Dc, double lam,
               double old) noexcept nogil:
    """The q of the y on the edges active at lam (mu_j G0 > lam), normalised onto the simplex,
    and its D; kept (1 returned) only if sum_j q_j mu_j D_j is not below ``old``."""
    cdef Py_ssize_t k0 = g.par_ptr[i], k1 = g.par_ptr[i + 1], k
    cdef double G0 = -gh, S = 0.0, new = 0.0, qk, mj
    for k in range(k0, k1):
        qn[k] = 0.0
        if w[k] > 0.0 and mu[g.par_idx[k]] * G0 > lam and y[k] > 0.0:
            qn[k] = w[k] / y[k]
            S += qn[k]
    if not (S > 0.0 and S < 1e300):
        return 0
    for k in range(k0, k1):
        qk = qn[k] / S
        qn[k] = qk
        y[k] = 0.0
        if qk > 0.0:
            y[k] = gnor(h + w[k] / qk) - gh
            mj = mu[g.par_idx[k]]
            if mj > 0.0:
                new += qk * mj * y[k]
    if not (new >= old):
        return 0
    for k in range(k0, k1):
        q[k] = qn[k]
        Dc[k] = y[k]
    return 1


cdef void update_q_fast(const Dag *g, const double *w, double h, double gh, Py_ssize_t i,
                        const double *mu, double *q, double *y, double *qn, double *Dc,
                        double *lamc, double *rho, double *dl) noexcept nogil:
    """update_q with the cached D, a warm-started multiplier and Newton's method on the whole
    optimality system (joint_q, capped at JOINT_IT steps; a cold start from q proportional
    to the weights); the nested search of update_q is the fallback when joint_q gives up.  The
    new q and its D are kept only if they do not lower the unit's term."""
    cdef Py_ssize_t k0 = g.par_ptr[i], k1 = g.par_ptr[i + 1], k
    cdef double G0 = -gh, lam_max = 0.0, lam, S, d, mj, old, psi
    cdef int rc
    if k1 == k0:
        return
    old = 0.0
    for k in range(k0, k1):
        mj = mu[g.par_idx[k]]
        if w[k] > 0.0 and mj * G0 > lam_max:
            lam_max = mj * G0
        if q[k] > 0.0 and mj > 0.0:
            old += q[k] * mj * Dc[k]
    if lam_max <= 0.0:
        return
    lam = lamc[0]
    if 0.0 < lam < lam_max:
        for k in range(k0, k1):
            y[k] = w[k] / q[k] if (q[k] > 0.0 and w[k] > 0.0) else 1.0
    else:
        # a cold start: q proportional to the weights, y_j = sum_k W_ik for every edge, and
        # lam the mean slope there (the exact solution when the parents' means are equal, as
        # in the first sweep)
        S = 0.0
        for k in range(k0, k1):
            if w[k] > 0.0 and mu[g.par_idx[k]] > 0.0:
                S += w[k]
        lam = 0.0
        if S > 0.0:
            psi = psi_nor(h, gh, S, &d)
            for k in range(k0, k1):
                y[k] = S
                mj = mu[g.par_idx[k]]
                if w[k] > 0.0 and mj > 0.0:
                    lam += (w[k] / S) * mj * psi
        if not (0.0 < lam < lam_max):
            lam = 0.5 * lam_max
            for k in range(k0, k1):
                y[k] = w[k] / q[k] if (q[k] > 0.0 and w[k] > 0.0) else 1.0
    rc = joint_q(g, w, h, gh, i, mu, y, rho, qn, dl, &lam, lam_max, JOINT_IT)
    if rc:
        if try_q(g, w, h, gh, i, mu, q, y, qn, Dc, lam, old):
            lamc[0] = lam
        return                  # (not kept: the current q is as good, to rounding)
    lam = lamc[0] if 0.0 < lamc[0] < lam_max else 0.5 * lam_max
    for k in range(k0, k1):
        y[k] = w[k] / q[k] if (q[k] > 0.0 and w[k] > 0.0) else 1.0
    lam = nested_lam(g, w, h, gh, i, mu, y, lam, lam_max)
    if try_q(g, w, h, gh, i, mu, q, y, qn, Dc, lam, old):
        lamc[0] = lam


cdef void update_mu_fast(const Dag *g, const double *w, Py_ssize_t k, double *mu, double *nu,
                         double *t, const double *q, const double *Dc, double *Z,
                         const double *gh, const double *cfix, const intp_t *ach_ptr,
                         const intp_t *ach, const uint8_t *free_) noexcept nogil:
    """mu_k = sigmoid(dL/dmu_k) (update_mu_nor), reading k's parents and q-unit children."""
    cdef double c = Z[k] + gh[k] + cfix[k], tn, mun, nun, dmu, qe
    cdef Py_ssize_t a, f, pos, cc, e
    for f in range(g.par_ptr[k], g.par_ptr[k + 1]):
        if q[f] > 0.0 and mu[g.par_idx[f]] > 0.0:
            c += q[f] * mu[g.par_idx[f]] * Dc[f]
    for a in range(ach_ptr[k], ach_ptr[k + 1]):
        pos = ach[a]
        cc = g.ch_idx[pos]
        e = g.ch_w[pos]
        if free_[cc]:
            c -= nu[cc] * w[e]
        qe = q[e]
        if qe > 0.0 and mu[cc] > 0.0:
            c += mu[cc] * qe * Dc[e]
    tn = c
    if tn > T_MAX:
        tn = T_MAX
    elif tn < -T_MAX:
        tn = -T_MAX
    elif not (tn == tn):
        return
    set_mean(tn, &mun, &nun)
    dmu = (nu[k] - nun) if mu[k] + mun > 1.0 else (mun - mu[k])
    for a in range(ach_ptr[k], ach_ptr[k + 1]):
        pos = ach[a]
        cc = g.ch_idx[pos]
        if free_[cc]:
            Z[cc] += w[g.ch_w[pos]] * dmu
    mu[k] = mun
    nu[k] = nun
    t[k] = tn


cdef double fast_bound(const Dag *g, const double *w, const double *h, const double *mu,
                       const double *nu, const double *q, const double *Dc, double *Z,
                       const double *gh, const double *cfix, double C0, const uint8_t *free_,
                       const uint8_t *act) noexcept nogil:
    """The bound from C0, cfix and the cached D (see above); free units' Z from scratch."""
    cdef double total = C0, z, e
    cdef Py_ssize_t i, k, j
    for i in range(g.n):
        if free_[i]:
            z = h[i]
            for k in range(g.par_ptr[i], g.par_ptr[i + 1]):
                z += w[k] * mu[g.par_idx[k]]
            Z[i] = z
            total += entropy(mu[i], nu[i]) + mu[i] * cfix[i] - nu[i] * z
        if act[i]:
            e = gh[i]
            for k in range(g.par_ptr[i], g.par_ptr[i + 1]):
                j = g.par_idx[k]
                if q[k] > 0.0 and mu[j] > 0.0:
                    e += q[k] * mu[j] * Dc[k]
            total += mu[i] * e
    return total


cdef int solve_item_nor(const Dag *g, const double *w, const double *h, const double *clamp,
                        double *mu, double *q, double *hist, double tol,
                        Py_ssize_t max_sweeps, double *work, double *bound_out,
                        intp_t *sweeps_out) noexcept nogil:
    """Coordinate ascent for one noisy-OR item (q of every unit, then every free mean,
    forward and backward in turn); returns 1 if it converged.  ``work`` is only used by the
    fallback when this function's own scratch space cannot be allocated."""
    cdef Py_ssize_t n = g.n, nnz = g.par_ptr[g.n], i, k, a, j, sweep, nq = 0, na
    cdef size_t nbytes = ((6 * <size_t> n + 5 * <size_t> nnz) * sizeof(double)
                          + (2 * <size_t> n + 1 + <size_t> nnz) * sizeof(intp_t)
                          + 3 * <size_t> n + 16)
    cdef char *mem = <char *> malloc(nbytes)
    if mem == NULL:
        return solve_item_nor_plain(g, w, h, clamp, mu, q, hist, tol, max_sweeps, work,
                                    bound_out, sweeps_out)
    cdef double *nu = <double *> mem
    cdef double *t = nu + n
    cdef double *gh = nu + 2 * n
    cdef double *cfix = nu + 3 * n
    cdef double *Z = nu + 4 * n
    cdef double *lamc = nu + 5 * n
    cdef double *y = nu + 6 * n
    cdef double *qn = y + nnz
    cdef double *Dc = y + 2 * nnz
    cdef double *rho = y + 3 * nnz
    cdef double *dl = y + 4 * nnz
    cdef intp_t *ach_ptr = <intp_t *> (y + 5 * nnz)
    cdef intp_t *ach = ach_ptr + n + 1
    cdef intp_t *qlist = ach + nnz
    cdef uint8_t *free_ = <uint8_t *> (qlist + n)
    cdef uint8_t *act = free_ + n
    cdef uint8_t *barren = free_ + 2 * n
    cdef double S, C0 = 0.0, bnd, prev, c
    cdef int converged = 0
    init_means(n, clamp, mu, nu, t, free_)
    mark_barren(g, free_, barren)
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
        act[i] = 1 if ((free_[i] or mu[i] > 0.0) and not barren[i]) else 0
        cfix[i] = 0.0
        lamc[i] = -1.0
        gh[i] = gnor(h[i]) if act[i] else 0.0
        if act[i] and g.par_ptr[i + 1] > g.par_ptr[i]:
            qlist[nq] = i
            nq += 1
    # clamped units: -(1 - v) Z into C0 and the free parents' cfix
    for i in range(n):
        if free_[i] or nu[i] == 0.0:
            continue
        C0 -= nu[i] * h[i]
        for k in range(g.par_ptr[i], g.par_ptr[i + 1]):
            j = g.par_idx[k]
            if free_[j]:
                cfix[j] -= nu[i] * w[k]
            else:
                C0 -= nu[i] * w[k] * mu[j]
    # barren units are left out from here on (the clamped units' loop above skipped them as
    # free units; none of them is a parent of a clamped unit)
    for i in range(n):
        if barren[i]:
            free_[i] = 0
    # the compact child lists of free units: positions in ch_idx of q-unit children
    na = 0
    for j in range(n):
        ach_ptr[j] = na
        if free_[j]:
            for a in range(g.ch_ptr[j], g.ch_ptr[j + 1]):
                if act[g.ch_idx[a]]:
                    ach[na] = a
                    na += 1
    ach_ptr[n] = na
    # the cached D of every q-unit edge
    for a in range(nq):
        i = qlist[a]
        for k in range(g.par_ptr[i], g.par_ptr[i + 1]):
            Dc[k] = gnor(h[i] + w[k] / q[k]) - gh[i] if q[k] > 0.0 else 0.0
    prev = fast_bound(g, w, h, mu, nu, q, Dc, Z, gh, cfix, C0, free_, act)
    if hist != NULL:
        hist[0] = prev
    sweep = 0
    while sweep < max_sweeps:
        for a in range(nq):
            i = qlist[a]
            update_q_fast(g, w, h[i], gh[i], i, mu, q, y, qn, Dc, &lamc[i], rho, dl)
        for i in range(n):
            k = i if sweep % 2 == 0 else n - 1 - i
            if free_[k]:
                update_mu_fast(g, w, k, mu, nu, t, q, Dc, Z, gh, cfix, ach_ptr, ach, free_)
        sweep += 1
        bnd = fast_bound(g, w, h, mu, nu, q, Dc, Z, gh, cfix, C0, free_, act)
        if hist != NULL:
            hist[sweep] = bnd
        if fabs(bnd - prev) < tol + REL_FLOOR * fabs(bnd):
            prev = bnd
            converged = 1
            break
        prev = bnd
    barren_means(g, w, h, barren, mu)
    free(mem)
    bound_out[0] = prev
    sweeps_out[0] = sweep
    return converged


def barren_units(const intp_t[::1] par_ptr, const intp_t[::1] par_idx, const intp_t[::1] ch_ptr,
                 const intp_t[::1] ch_idx, const intp_t[::1] ch_w, const double[:, ::1] clamp,
                 uint8_t[:, ::1] out):
    """Mark in ``out`` (n_items, n_units) the barren units of every item: free (NaN in
    ``clamp``) with every child barren, the units the solve sums out (their own weights and
    bias then do not enter the bound: its gradient in them is 0).  Returns MF_OK,
    or MF_EBADARG (nothing written) for an inconsistent structure or shape."""
    cdef Dag g
    if check_dag(par_ptr, par_idx, ch_ptr, ch_idx, ch_w, &g) != MF_OK:
        return MF_EBADARG
    cdef Py_ssize_t n_items = clamp.shape[0], n = g.n, p, i
    if clamp.shape[1] != n or out.shape[0] != n_items or out.shape[1] != n:
        return MF_EBADARG
    if n == 0 or n_items == 0:
        return MF_OK
    cdef uint8_t *free_ = <uint8_t *> malloc(<size_t> n)
    if free_ == NULL:
        raise MemoryError()
    with nogil:
        for p in range(n_items):
            barren_of_clamp(&g, &clamp[p, 0], free_, &out[p, 0])
    free(free_)
    return MF_OK
