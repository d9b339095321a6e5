# Coordinate descent on G (part of _plefka.pyx): the fallback for items the fixed-point
# iteration leaves unconverged (orders 11 and 12): stiff sparse nets such as the
# diagnosis-style noisy-OR nets, whose per-unit curvatures differ by orders of magnitude, so
# that no common step length works for all units at once.  One unit at a time, G is minimised
# over its logit with the others held fixed: G11 and G12 depend on u_j through its entropy, its
# own term (linear in u_j) and its children's terms (through their Mbar_i and V_i), so each
# one-dimensional problem costs O(children).  Its derivative g(t) = dG/du_j = t + c(u_j) goes
# to -inf as t -> -inf and +inf as t -> +inf (the entropy), so a root exists; it is bracketed
# from the current point in the descent direction (steps doubled while G falls and the slope
# keeps its sign, quartered when G rises past a bump) and found by safeguarded regula falsi
# (Illinois), and the move is kept only if it lowers G.  So G never rises and the sweeps cannot
# cycle.  A unit whose minimum lies beyond |t| = T_MAX sits on the bound: no stationary point
# inside (0, 1), reported as not converged.

DEF CD_ROOT_ITERS = 60


cdef inline double cd_phi(const Net *net, const double *w, Work *W, Py_ssize_t j, double t,
                          double own, double *g_out) noexcept nogil:
    """G as a function of unit j's logit t, up to a constant (the other means fixed; W.M and
    W.V hold every Mbar and V at the current u_j), and g = dG/du_j there.  +inf (g = -inf)
    where a noisy-OR child's ln f(Mbar) is -inf."""
    cdef double s = mf_sigmoid(t), sm = mf_sigmoid(-t)
    cdef double du = s - W.u[j], dv = s * sm - W.v[j], c = sm - s
    cdef double phi = s * t - mf_log1pexp(t) + s * own, g = t + own, we, Mi, Vi
    cdef Py_ssize_t ce, i
    cdef int order = net.order
    for ce in range(net.g.ch_ptr[j], net.g.ch_ptr[j + 1]):
        i = net.g.ch_idx[ce]
        if W.barren[i]:
            continue        # summed out: no term
        we = w[net.g.ch_w[ce]]
        Mi = W.M[i] + we * du
        if Mi < 0.0 and net.act == NOISY_OR:
            Mi = 0.0        # round-off below a zero input
        if net.act == NOISY_OR and W.u[i] == 0.0 and Mi > 0.0 and W.fixed[i]:
            phi += Mi       # clamped off: its term -ln(1 - f(Mi)) = Mi, linear (g1 = -1, g2 = 0)
            g += we
            continue
        if coeffs(Mi, W.u[i], net.act, W, i):
            g_out[0] = -INFINITY
            return INFINITY
        phi -= W.g0[i]
        g -= we * W.g1[i]
        if order >= 12:
            Vi = W.V[i] + we * (we * dv)
            if Vi < 0.0:
                Vi = 0.0
            phi -= 0.5 * W.g2[i] * Vi
            g -= we * (0.5 * W.g3[i] * Vi) + we * (we * c) * (0.5 * W.g2[i])
    g_out[0] = g
    return phi


cdef void cd_sync(const Net *net, const double *w, const double *h, Work *W) noexcept nogil:
    """Mbar and V of every unit from the current means."""
    cdef Py_ssize_t i, e, k
    cdef double m, vv
    for i in range(net.g.n):
        m = h[i]
        vv = 0.0
        for e in range(net.g.par_ptr[i], net.g.par_ptr[i + 1]):
            k = net.g.par_idx[e]
            m = m + w[e] * W.u[k]
            vv = vv + w[e] * (w[e] * W.v[k])
        W.M[i] = m
        W.V[i] = vv


cdef void cd_set(const Net *net, const double *w, Work *W, Py_ssize_t j, double t) noexcept nogil:
    """Move unit j to logit t, updating its children's Mbar and V."""
    cdef double s = mf_sigmoid(t), sm = mf_sigmoid(-t)
    cdef double du = s - W.u[j], dv = s * sm - W.v[j], we
    cdef Py_ssize_t ce, i
    for ce in range(net.g.ch_ptr[j], net.g.ch_ptr[j + 1]):
        i = net.g.ch_idx[ce]
        we = w[net.g.ch_w[ce]]
        W.M[i] += we * du
        W.V[i] += we * (we * dv)
    W.u[j] = s
    W.v[j] = s * sm
    W.c[j] = sm - s
    W.t[j] = t


DEF CD_EXTRA_MAX = 100.0    # the squared extrapolation's step, at most this many plain steps


cdef inline void cd_point(const Net *net, Work *W, const double *t) noexcept nogil:
    """Set every free unit's logit, mean, variance and 1 - 2u from t."""
    cdef Py_ssize_t i
    cdef double s, sm
    for i in range(net.g.n):
        if W.fixed[i]:
            continue
        s = mf_sigmoid(t[i])
        sm = mf_sigmoid(-t[i])
        W.t[i] = t[i]
        W.u[i] = s
        W.v[i] = s * sm
        W.c[i] = sm - s


cdef int cd_extrapolate(const Net *net, const double *w, const double *h, Work *W,
                        const double *t0, const double *t1, double *t2, double G2,
                        double *G_out) noexcept nogil:
    """The squared extrapolation (SQUAREM, Varadhan & Roland 2008) of two sweeps t0 -> t1 -> t2
    (t2 = W.t, where G = G2): tp = t0 - 2 a r + a^2 d with r = t1 - t0, d = t2 - 2 t1 + t0 and
    a = -|r| / |d| clipped to [-CD_EXTRA_MAX, -1] (a = -1 would give t2), each logit clipped to
    the bound.  Returns 1 with W at tp, G(tp) in G_out and dG/du in W.ga when G(tp) < G2, else
    0 with W back at t2 (kept in ``t2``).  The coordinate descent converges linearly along the
    valleys of diagnosis-style nets (the residual halving every four to five sweeps), which the
    extrapolation shortens; the evaluation at tp is the convergence test's of the next point,
    so an extrapolation costs one evaluation of G and its gradient per two sweeps."""
    cdef Py_ssize_t i, n = net.g.n
    cdef double rr = 0.0, dd = 0.0, r, d, a, x, tmax = net.t_max, Gp
    cdef int status = MF_OK
    for i in range(n):
        if W.fixed[i]:
            continue
        r = t1[i] - t0[i]
        d = W.t[i] - 2.0 * t1[i] + t0[i]
        rr += r * r
        dd += d * d
    if not (rr > 0.0 and dd > 0.0 and rr < INFINITY and dd < INFINITY):
        return 0
    a = -sqrt(rr / dd)
    if a >= -1.0:
        return 0
    if a < -CD_EXTRA_MAX:
        a = -CD_EXTRA_MAX
    for i in range(n):
        t2[i] = W.t[i]
        if W.fixed[i]:
            continue
        x = t0[i] - 2.0 * a * (t1[i] - t0[i]) + a * a * (t2[i] - 2.0 * t1[i] + t0[i])
        if not (x > -tmax):         # (NaN too)
            x = -tmax if x == x else t2[i]
        elif x > tmax:
            x = tmax
        W.t[i] = x
    Gp = eval_t(net, w, h, W, W.t, 1, W.ga, &status)
    if status == MF_OK and Gp < G2:
        G_out[0] = Gp
        return 1
    cd_point(net, W, t2)
    return 0


cdef int cd_item(const Net *net, const double *w, const double *h, const double *clamp,
                 const double *init, Work *W, double tol, Py_ssize_t max_iter,
                 double *G_out, double *u_out, intp_t *n_iter, int8_t *conv) noexcept nogil:
    """Coordinate descent on G (orders 11 and 12) for one item; outputs as solve_item's."""
    cdef Py_ssize_t n = net.g.n, i, e, k, j, sweep = 0, r, n_barren
    cdef double x, tmax = net.t_max, own, g0, phi0, a, b, ga, gb, xm, gx, step, phin, gn
    cdef double res, sweep_res, noise, G, phia, phib
    cdef int side, status = MF_OK, clipped, bound, phase = 0, fresh = 0
    conv[0] = 0
    n_iter[0] = 0
    n_barren = fix_units(net, w, h, clamp, W)
    for i in range(n):
        if W.fixed[i]:
            continue
        x = 0.5 if init == NULL else init[i]
        if x <= 0.0:
            x = -tmax
        elif x >= 1.0:
            x = tmax
        else:
            x = log(x) - log1p(-x)
            x = -tmax if x < -tmax else (tmax if x > tmax else x)
        W.t[i] = x
    cd_point(net, W, W.t)
    while True:
        # the full objective and gradient: the convergence test of solve_item (an accepted
        # extrapolation has evaluated them already)
        if fresh:
            fresh = 0
        else:
            G = eval_t(net, w, h, W, W.t, 1, W.ga, &status)
        if status != MF_OK:
            break
        res = 0.0
        clipped = 0
        for i in range(n):
            if W.fixed[i]:
                continue
            x = W.t[i] - W.ga[i]
            if not (fabs(x) < INFINITY):
                x = -tmax if x < 0.0 else tmax
            if x > tmax:
                x = tmax
                clipped |= W.t[i] < tmax
            elif x < -tmax:
                x = -tmax
                clipped |= W.t[i] > -tmax
            x = fabs(mf_sigmoid(x) - mf_sigmoid(W.t[i]))
            if x > res:
                res = x
        if res <= tol and not clipped:
            conv[0] = 1
            break
        if sweep >= max_iter:
            break
        # every third point is the squared extrapolation of the two sweeps before it, kept
        # when it lowers G (then tested like any point), else the sweeps go on from t2
        if phase == 2:
            phase = 0
            fresh = cd_extrapolate(net, w, h, W, W.Sm, W.Sm + n, W.Sm + 2 * n, G, &G)
            if fresh:
                continue
        for i in range(n):
            W.Sm[phase * n + i] = W.t[i]
        phase += 1
        sweep += 1
        cd_sync(net, w, h, W)
        sweep_res = 0.0
        for j in range(n):
            if W.fixed[j]:
                continue
            # unit j's own term is linear in u_j: slope -d0 - 1/2 d2 V_j at its Mbar_j
            if coeffs(W.M[j], 0.0, net.act, W, j):
                continue
            own = -W.d0[j]
            if net.order >= 12:
                own -= 0.5 * W.d2[j] * W.V[j]
            if not (fabs(own) < INFINITY):
                continue
            a = W.t[j]
            phi0 = cd_phi(net, w, W, j, a, own, &g0)
            if not (fabs(g0) < INFINITY and phi0 < INFINITY):
                continue
            x = a - g0
            x = -tmax if x < -tmax else (tmax if x > tmax else x)
            if x == a or (fabs(mf_sigmoid(x) - W.u[j]) <= 1e-3 * tol and fabs(x) < tmax):
                continue        # at its minimum (or on the bound beyond which it lies)
            # bracket the root of g from a, in the descent direction (-sign g0)
            side = 1 if g0 < 0.0 else -1
            ga = g0
            phia = phi0
            step = x - a
            b = a
            gb = g0
            bound = 0
            for r in range(CD_ROOT_ITERS):
                b = a + step
                b = -tmax if b < -tmax else (tmax if b > tmax else b)
                phib = cd_phi(net, w, W, j, b, own, &gb)
                if not (gb == gb):
                    step = 0.25 * step
                    continue
                if (gb >= 0.0) if side > 0 else (gb <= 0.0):
                    break           # the slope changed sign in (a, b]: a root
                if not (phib <= phia + NOISE * (1.0 + fabs(phia))):
                    step = 0.25 * step      # G rose past a bump: a minimum lies nearer a
                    continue
                if b == tmax or b == -tmax:
                    bound = 1
                    break
                a = b
                ga = gb
                phia = phib
                step = 2.0 * step
            else:
                bound = 2
            if bound == 2:
                xm = a
            elif bound:
                xm = b
            else:
                # root in between a (g on the descent side) and b (g on the other): Illinois
                xm = b
                gx = gb
                for r in range(CD_ROOT_ITERS):
                    if fabs(mf_sigmoid(b) - mf_sigmoid(a)) <= 1e-3 * tol or fabs(b - a) <= 1e-12 * (1.0 + fabs(a)):
                        break
                    if ga < INFINITY and ga > -INFINITY and gb < INFINITY and gb > -INFINITY and gb != ga:
                        xm = b - gb * (b - a) / (gb - ga)
                    else:
                        xm = 0.5 * (a + b)
                    if not ((xm - a) * (xm - b) < 0.0):
                        xm = 0.5 * (a + b)
                    cd_phi(net, w, W, j, xm, own, &gx)
                    if not (gx == gx):
                        gx = -INFINITY if side > 0 else INFINITY
                    if gx == 0.0:
                        break
                    if (gx > 0.0) == (gb > 0.0):
                        b = xm
                        gb = gx
                        ga = 0.5 * ga
                    else:
                        a = b
                        ga = gb
                        b = xm
                        gb = gx
            phin = cd_phi(net, w, W, j, xm, own, &gn)
            noise = NOISE * (1.0 + fabs(phi0))
            if phin <= phi0 + noise:
                x = fabs(mf_sigmoid(xm) - W.u[j])
                if x > sweep_res:
                    sweep_res = x
                cd_set(net, w, W, j, xm)
        if sweep_res == 0.0:
            break       # no unit moved: G cannot be lowered one unit at a time
    n_iter[0] = sweep
    G_out[0] = G if status != MF_EOVERFLOW else NAN
    for i in range(n):
        u_out[i] = W.u[i] if W.fixed[i] else mf_sigmoid(W.t[i])
    if n_barren:
        set_barren_means(net, w, h, W.barren, u_out)
    if status != MF_OK:
        conv[0] = 0
    return status
