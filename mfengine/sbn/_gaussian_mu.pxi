# The 1-D maximiser in one mean (part of _gaussian.pyx): the bound as a function of mu_k alone
# (k's entropy, mu_k m_k and its children's terms), searched in t = logit(mu_k) by bracketed,
# safeguarded Newton steps; every accepted step raises the bound.  One evaluation costs
# O(children) through the vectorised loops of csrc/mf_sbn.c.

cdef inline bint small_gain(double g, double gp, double v, double gain_tol) noexcept nogil:
    """A Newton step from here would gain less than gain_tol, and the quadratic model that says
    so can be trusted (a short step, |g / gp| < 1/2, from a point that is not saturated)."""
    return (gain_tol > 0.0 and gp < 0.0 and v > 1e-12 and fabs(g) < -0.5 * gp
            and g * g * v <= -2.0 * gp * gain_tol)


cdef struct Point:
    # one point of a 1-D search in t = logit(mu_k)
    double t, mu, g, gp, f
    double *sig           # children's sig and u at this point (NULL: the unit's current state,
    double *u             # i.e. the cache)


cdef struct Problem:
    # what every evaluation of unit k's 1-D objective needs
    const double *J
    const double *J2
    Py_ssize_t nc
    double *mc
    double *sc
    const double *xic
    const double *muc
    const double *obs
    const double *obs_grad
    double *sigc
    double *uc
    double mk, mu0, v0, gtol, gain_tol
    double jmax, j2max, c2
    int concave, want_u


cdef inline void evaluate(const Problem *P, double x, double *sig, double *u, Point *pt) noexcept nogil:
    cdef double out[3]
    cdef double mux = mf_sigmoid(x), vx
    vx = mux * (1.0 - mux)
    mf_sbn_children_eval(P.nc, P.J, P.J2, P.mc, P.sc, P.xic, P.muc,
                         P.obs if not P.concave else P.obs_grad, mux - P.mu0, vx - P.v0,
                         1.0 - 2.0 * mux, not P.concave, P.want_u, sig, u, out)
    pt.t = x
    pt.mu = mux
    pt.g = -x + P.mk + out[0]
    pt.gp = -1.0 + out[1] * vx
    pt.f = 0.0
    if not P.concave:
        pt.f = mf_log1pexp(x) - mux * x + mux * P.mk + out[2]
    pt.sig = sig
    pt.u = u


cdef inline bint settled(const Problem *P, const Point *b) noexcept nogil:
    return fabs(b.g) <= P.gtol or small_gain(b.g, b.gp, b.mu * (1.0 - b.mu), P.gain_tol)


cdef void climb(const Problem *P, Point *best, double *slot_x, double *ux, double *slot_y,
                double *uy) noexcept nogil:
    """Bracketed safeguarded Newton from ``best`` towards a local maximum; ``best`` is updated.

    The search interval always holds a local maximum whose value is at least the best value
    seen: it starts as [t, T_MAX] or [-T_MAX, t] by the sign of g (towards larger mu if g = 0),
    trial points are Newton steps from the best point, or bisections when a step leaves the
    interval.  When the curvature bound says the problem is strictly concave, g is decreasing
    and its sign alone moves the bracket; otherwise a trial is accepted only if it does not
    lower the objective (a tie within round-off is decided by the derivative).  Trials are
    written alternately into the two slots; ``best``'s own buffers are never overwritten
    while it is still the best point.
    """
    cdef double lo, hi, x, tb
    cdef Point trial
    cdef int it, accept, cur = 0, left_stationary = best.g == 0.0
    cdef double *slots[2]
    cdef double *uslots[2]
    slots[0] = slot_x
    slots[1] = slot_y
    uslots[0] = ux
    uslots[1] = uy
    if best.g >= 0.0:
        lo = best.t
        hi = T_MAX
    else:
        lo = -T_MAX
        hi = best.t
    for it in range(MAX_IT):
        if hi - lo <= T_TOL:
            break
        tb = best.t
        x = lo - 1.0
        if best.gp < 0.0 and best.g != 0.0:
            x = tb - best.g / best.gp
        elif left_stationary and it == 0:
            x = tb + 1.0          # leaving a stationary point that is not a maximum
        if not (x > lo and x < hi):
            x = 0.5 * (lo + hi)
        evaluate(P, x, slots[cur], uslots[cur], &trial)
        accept = P.concave or trial.f >= best.f - F_NOISE * (1.0 + fabs(best.f))
        if accept:
            if trial.g > 0.0:
                lo = x
            else:
                hi = x
            best[0] = trial
            cur = 1 - cur
            if settled(P, best):
                break
        else:
            if x > tb:
                hi = x
            else:
                lo = x


cdef bint lazy_step(const Problem *P, const Point *cur, double *tk, double *muk) noexcept nogil:
    """Take the Newton step from the cache without evaluating it, when that is safe.

    Safe means: (1) every child's input moves by at most DA_LAZY, so a second-order Taylor
    update of its cached sig is accurate to ~1e-9 (and the cache is recomputed exactly every
    few sweeps); (2) the step provably raises the bound, concave problem or not:
    F(mu1) - F(mu0) >= g0 dmu - 1/2 (1/v_min + C2) dmu^2, because F'' >= -1/(mu(1-mu)) - C2
    on [0, 1] (the children's q terms are >= 0 and sig(1-sig) a'^2 <= (|J| + J^2/2)^2 / 4),
    and mu(1-mu) >= v_min between the two points.  Returns whether the step was taken.
    """
    cdef double t1 = cur.t - cur.g / cur.gp, mu1, v1, dmu, dvar, vmin
    t1 = -T_MAX if t1 < -T_MAX else (T_MAX if t1 > T_MAX else t1)
    mu1 = mf_sigmoid(t1)
    v1 = mu1 * (1.0 - mu1)
    dmu = mu1 - P.mu0
    dvar = v1 - P.v0
    if P.jmax * fabs(dmu) + 0.5 * P.j2max * fabs(dvar) > DA_LAZY:
        return False
    vmin = v1 if v1 < P.v0 else P.v0
    # (a margin of gain_tol covers the round-off and Taylor drift of the cached derivative)
    if vmin <= 1e-12 or cur.g * dmu - 0.5 * (1.0 / vmin + P.c2) * dmu * dmu <= P.gain_tol:
        return False
    mf_sbn_children_commit_taylor(P.nc, P.J, P.J2, P.xic, dmu, dvar, P.mc, P.sc, P.sigc,
                                  P.uc if P.want_u else NULL)
    muk[0] = mu1
    tk[0] = t1
    return True


cdef void solve_mu(Py_ssize_t k, const double *J, const double *J2, Py_ssize_t nc,
                   double *mu, double *mc, double *sc, const double *xic, double *sigc,
                   double *uc, const double *muc, const double *obs, const double *obs_grad,
                   int want_u, Work *w, double gtol) noexcept nogil:
    """Maximise the bound over mu_k in [0, 1], all else fixed; update the children's cache.

    The objective (k's entropy, mu_k m_k and its children's terms) is searched in t = logit(mu)
    with ``climb``, starting from the current value: every update raises the bound.  When the
    problem may be non-concave (the curvature bound is 4 or more) and the climb ends away from
    both ends of [0, 1], the maximum found may be a shallow one beside a higher one near an
    end: the search then probes near the other end (t = -/+ PROBE_T) and, if that is higher,
    climbs from there too, keeping the better maximum.
    """
    cdef double out[3]
    cdef Problem P
    cdef Point cur, probe
    cdef double *slot_free
    cdef double *uslot_free
    P.J = J
    P.J2 = J2
    P.nc = nc
    P.mc = mc
    P.sc = sc
    P.xic = xic
    P.muc = muc
    P.obs = obs
    P.obs_grad = obs_grad
    P.mk = w.m[k]
    P.mu0 = mu[k]
    P.v0 = P.mu0 * (1.0 - P.mu0)
    P.gtol = gtol
    P.gain_tol = w.gain_tol
    P.want_u = want_u
    P.sigc = sigc
    P.uc = uc
    P.jmax = w.net_jmax[k]
    P.j2max = w.net_j2max[k]
    P.c2 = w.net_c2[k]
    # first evaluation from the cache: no exp (and the objective's value only if needed)
    mf_sbn_children_cached(nc, J, J2, xic, sigc, muc, obs, 1.0 - 2.0 * P.mu0, out)
    # Without a u cache every parent of these children passed the static test sum J^2 < 4
    # (with a margin), so the problem is concave whatever rounding says about out[2].
    P.concave = out[2] < CONCAVE_LIMIT or not want_u
    cur.t = w.t[k]
    cur.mu = P.mu0
    cur.g = -cur.t + P.mk + out[0]
    cur.gp = -1.0 + out[1] * P.v0
    cur.f = 0.0
    cur.sig = NULL
    cur.u = NULL
    if P.concave:
        if settled(&P, &cur):
            return
        # (default tolerances only: an explicit inner_tol asks for every 1-D solve to meet it)
        if P.gain_tol > 0.0 and lazy_step(&P, &cur, w.t + k, mu + k):
            return
        climb(&P, &cur, w.buf0, w.ubuf0, w.buf1, w.ubuf1)
    else:
        # near an end, a short safe step needs no evaluation either (mid-range units always
        # get the full search and the probe of the other end)
        if (P.gain_tol > 0.0 and not settled(&P, &cur) and cur.gp < 0.0
                and (P.mu0 <= PROBE_BELOW or P.mu0 >= 1.0 - PROBE_BELOW)
                and lazy_step(&P, &cur, w.t + k, mu + k)):
            return
        cur.f = (mf_log1pexp(cur.t) - P.mu0 * cur.t + P.mu0 * P.mk
                 + mf_sbn_children_value(nc, mc, sc, xic, uc, muc, obs))
        if settled(&P, &cur):
            if cur.gp >= 0.0:
                cur.g = 0.0       # a stationary point that is not a maximum: climb away
                climb(&P, &cur, w.buf0, w.ubuf0, w.buf1, w.ubuf1)
        else:
            climb(&P, &cur, w.buf0, w.ubuf0, w.buf1, w.ubuf1)
        # A maximum of a non-concave problem away from both ends can be a shallow one (by
        # symmetry mu = 0.5, the default start, may be one) beside a far higher maximum near
        # an end: probe near the opposite end, into the third slot.
        if cur.mu > PROBE_BELOW and cur.mu < 1.0 - PROBE_BELOW:
            evaluate(&P, -PROBE_T if cur.mu >= 0.5 else PROBE_T, w.buf2, w.ubuf2, &probe)
        else:
            probe.f = cur.f
        if probe.f > cur.f + F_NOISE * (1.0 + fabs(cur.f)):
            # climb from the probe with the two slots that do not hold cur's buffers
            if cur.sig == w.buf0:
                slot_free, uslot_free = w.buf1, w.ubuf1
            else:
                slot_free, uslot_free = w.buf0, w.ubuf0
            if not settled(&P, &probe):
                climb(&P, &probe, slot_free, uslot_free, w.buf2, w.ubuf2)
            cur = probe           # the climb never lowers f, so the probe's basin is higher
    if cur.sig != NULL:
        mu[k] = cur.mu
        w.t[k] = cur.t
        mf_sbn_children_commit(nc, J, J2, cur.mu - P.mu0, cur.mu * (1.0 - cur.mu) - P.v0,
                               mc, sc, sigc, uc, cur.sig, cur.u, want_u)


cdef inline void update_mu(const Net *net, Py_ssize_t l, Py_ssize_t k, double *mu, double *xi,
                           Work *w, double gtol) noexcept nogil:
    """Update mu of unit k of hidden layer l."""
    cdef Py_ssize_t nc = net.sizes[l + 1], coff = net.offset[l + 1]
    cdef const double *obs = w.obs if l + 1 == net.n_layers - 1 else w.ones
    # the gradient-only loop skips the mask when no child is missing
    cdef const double *obs_grad = w.obs if (l + 1 == net.n_layers - 1 and w.any_missing) else NULL
    solve_mu(net.offset[l] + k,
             net.WT + net.woff[l] + k * nc, net.WT2 + net.woff[l] + k * nc, nc,
             mu, w.m + coff, w.s + coff, xi + coff, w.sig + coff, w.u + coff, mu + coff, obs,
             obs_grad, net.need_u[l + 1], w, gtol)
