# The bound and the careful sigmoid path (part of _sjj.pyx).
#
# The bound from the caches (cached_bound, the stopping test) and from scratch with its
# rounding allowance (unit_bound, bound_at: the reported bound of the careful path, of the
# fast path's units with only clamped parents, and of evaluate); one mean's bracketed Newton
# search in t with the gain test and the children's cache updates (update_mu), the units whose
# sums are re-added rather than subtracted from (mark_big), and the coordinate ascent of one
# item (solve_item).  Nets beyond the fast path's scale (FAST_SCALE), and every item with
# fast=False, are solved here.

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
