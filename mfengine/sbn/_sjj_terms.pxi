# One unit's numbers on the careful sigmoid path, and those every path shares (part of _sjj.pyx).
#
# The per-edge log-factor f(m, x) = ln(nu + m e^x) with its tilted mean (l1p_tilt), the
# entropy, a unit's term (mu - xi) Z - ln(e^A + e^B) from the centred At, Bt and D
# (unit_term), means kept as sigmoid(t) with their complements (set_mean, clip_logit,
# init_means), and the xi problem: phi(xi) and its derivatives (xi_eval), the caches a unit
# keeps at its xi (centre), the safeguarded Newton search on [0, 1] (solve_xi) and the pass
# over every unit that also recomputes every cache from scratch (xi_pass).

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
