# The per-item solver (part of _plefka.pyx).  ``solve_item`` runs one item's fixed-point
# iteration t <- -dF/du (the module docstring's: the Armijo and overshoot tests of the full
# step, the line search on the segment to the image otherwise, the stall and, with early_cd,
# progress tests) with quasi-Newton corrections of the step: ``qn_direction``, the L-BFGS
# two-loop recursion over the last MEM curvature pairs, scaled by diag(1 / v), capped and bent
# back into the box.  Every item the blocked path does not take (nets that are not layered,
# noisy-OR units, G22, short runs of one net) goes through it, and so does the polish after the
# coordinate descent.

cdef int solve_item(const Net *net, const double *w, const double *h, const double *clamp,
                    const double *init, Work *W, double tol, Py_ssize_t max_iter,
                    double *G_out, double *u_out, intp_t *n_iter, int8_t *conv) noexcept nogil:
    cdef Py_ssize_t n = net.g.n, i, e, k, it = 0, ls
    cdef double x, G, G1, D, D1, res, noise, lo, hi, flo, fhi, dlo, dhi, lam, f, d, den, span
    cdef double *t = W.t
    cdef double *tt = W.tt
    cdef double *dt = W.dt
    cdef double *gcur = W.ga
    cdef double *gtry = W.gb
    cdef double *glo = W.gc
    cdef double *tmp
    cdef int status = MF_OK, clipped, found, finite, pending = 0, qn = net.accel == 2
    cdef double tmax = net.t_max, step, sy, ss, yy, Dq
    cdef Py_ssize_t mem = 0, head = 0, stalls = 0, it_mark = 0, n_barren
    cdef double G_mark, dG_prev = INFINITY
    conv[0] = 0
    n_iter[0] = 0
    n_barren = fix_units(net, w, h, clamp, W)
    for i in range(n):
        if not W.fixed[i]:
            x = 0.5 if init == NULL else init[i]
            if x <= 0.0:
                t[i] = -tmax
            elif x >= 1.0:
                t[i] = tmax
            else:
                t[i] = log(x) - log1p(-x)
                t[i] = -tmax if t[i] < -tmax else (tmax if t[i] > tmax else t[i])
    G = eval_t(net, w, h, W, t, 1, gcur, &status)
    G_mark = G
    while status == MF_OK:
        # the fixed-point image t_img = t - dG/du = -dF/du, its distance in u, and the slope
        res = 0.0
        clipped = 0
        finite = 1
        for i in range(n):
            if W.fixed[i]:
                continue
            x = t[i] - gcur[i]
            if not (fabs(x) < INFINITY):
                finite = 0
            if x > tmax:
                x = tmax
                clipped |= not (net.sat_ok and t[i] >= tmax)
            elif x < -tmax:
                x = -tmax
                clipped |= not (net.sat_ok and t[i] <= -tmax)
            dt[i] = x - t[i]
            f = mf_sigmoid(t[i])
            x = fabs(mf_sigmoid(x) - f)
            if x > res:
                res = x
            W.vcur[i] = f * mf_sigmoid(-t[i])
            W.q[i] = W.vcur[i] * gcur[i]        # dG/dt
        if not finite:
            break       # the gradient overflowed at an accepted point (noisy-OR near Mbar = 0)
        if res <= tol:
            conv[0] = not clipped
            break
        if it >= max_iter:
            break
        if net.early_cd and it >= it_mark + PROG_WINDOW:
            # coordinate descent takes over (from the start) as soon as the iteration stops
            # making progress: a window of PROG_WINDOW iterations lowered G by at most tol, or
            # by more than PROG_RATIO times the window before (G's decrease not shrinking: a
            # crawl, e.g. units creeping towards the bound, not a convergence; a linear one at
            # that pace would need some 40 windows per factor 1e3 of the residual); and at the
            # first window past half the budget, which is left to the coordinate descent (on
            # diagnosis-style noisy-OR nets G can keep falling by shrinking steps while one
            # unit's residual crawls, and the iteration would spend the budget on it)
            if G_mark - G <= tol or G_mark - G > PROG_RATIO * dG_prev or 2 * it >= max_iter:
                break
            dG_prev = G_mark - G
            G_mark = G
            it_mark = it
        if pending:     # complete the curvature pair of the last step: y = change of dG/dt
            pending = 0
            sy = 0.0
            ss = 0.0
            yy = 0.0
            for i in range(n):
                if not W.fixed[i]:
                    x = W.q[i] - W.qprev[i]
                    W.Ym[head * n + i] = x
                    sy = sy + W.Sm[head * n + i] * x
                    ss = ss + W.Sm[head * n + i] * W.Sm[head * n + i]
                    yy = yy + x * x
            if sy > 1e-10 * sqrt(ss * yy) and sy < INFINITY:
                W.rho[head] = 1.0 / sy
                head = (head + 1) % MEM
                if mem < MEM:
                    mem += 1
        for i in range(n):
            W.qprev[i] = W.q[i]
        D = 0.0
        for i in range(n):
            if not W.fixed[i]:
                D += W.q[i] * dt[i]
        if qn and mem > 0 and qn_direction(net, W, t, dt, mem, head):
            Dq = 0.0
            for i in range(n):
                if not W.fixed[i]:
                    Dq += W.q[i] * W.dq[i]
            if Dq < 0.0:
                tmp = dt; dt = W.dq; W.dq = tmp
                D = Dq
            else:
                mem = 0     # not a descent direction: forget the pairs, take the fixed-point step
        if not (D < 0.0):
            break
        it += 1
        noise = NOISE * (1.0 + fabs(G))
        # the full fixed-point step
        for i in range(n):
            if not W.fixed[i]:
                tt[i] = t[i] + dt[i]
        G1 = eval_t(net, w, h, W, tt, 1, gtry, &status)
        if status != MF_OK:
            status = MF_OK      # a trial point where G is +inf or overflows is just rejected
            G1 = INFINITY
        D1 = dir_deriv(net, W, gtry, dt) if G1 < INFINITY else INFINITY
        if G1 <= G + C_ARMIJO * D + noise and D1 <= -C_CURV * D:
            tmp = t; t = tt; tt = tmp
            tmp = gcur; gcur = gtry; gtry = tmp
            stalls = stalls + 1 if (G1 >= G and max_du(net, W, dt, 1.0) <= tol) else 0
            G = G1
            if stalls >= MAX_STALLS:
                break
            for i in range(n):
                W.Sm[head * n + i] = dt[i]
            pending = 1
            continue
        if net.accel == 1:
            qn = 1
        # line search on the segment t + lam dt, lam in (0, 1): the minimum of G there
        lo = 0.0
        flo = G
        dlo = D
        hi = 1.0
        fhi = G1
        dhi = D1
        found = 0
        for ls in range(MAX_LS):
            span = hi - lo
            if dhi > 0.0 and dhi < INFINITY and fhi <= G + C_ARMIJO * hi * D + noise:
                lam = lo - dlo * span / (dhi - dlo)          # secant on the slope
            else:
                den = 2.0 * (fhi - flo - dlo * span)          # quadratic through flo, dlo, fhi
                lam = lo - dlo * span * span / den if (den > 0.0 and fhi < INFINITY) else lo + 0.5 * span
            if lam < lo + 0.1 * span:
                lam = lo + 0.1 * span
            elif lam > hi - 0.1 * span:
                lam = hi - 0.1 * span
            for i in range(n):
                if not W.fixed[i]:
                    tt[i] = t[i] + lam * dt[i]
            f = eval_t(net, w, h, W, tt, 1, gtry, &status)
            if status != MF_OK:
                status = MF_OK
                f = INFINITY
            d = dir_deriv(net, W, gtry, dt) if f < INFINITY else INFINITY
            if not (f <= G + C_ARMIJO * lam * D + noise and f <= flo + noise):
                hi = lam
                fhi = f
                dhi = d
            elif fabs(d) <= -C_CURV * D:
                found = 1
                break
            elif d > 0.0:
                hi = lam
                fhi = f
                dhi = d
            else:
                lo = lam
                flo = f
                dlo = d
                tmp = glo; glo = gtry; gtry = tmp
            if hi - lo <= 1e-13:
                break
        if found:
            tmp = t; t = tt; tt = tmp
            tmp = gcur; gcur = gtry; gtry = tmp
            stalls = stalls + 1 if (f >= G and max_du(net, W, dt, lam) <= tol) else 0
            G = f
            step = lam
        elif lo > 0.0:
            for i in range(n):
                if not W.fixed[i]:
                    t[i] = t[i] + lo * dt[i]
            tmp = gcur; gcur = glo; glo = tmp
            stalls = stalls + 1 if (flo >= G and max_du(net, W, dt, lo) <= tol) else 0
            G = flo
            step = lo
        else:
            break       # no decrease found along a descent direction: round-off floor
        if stalls >= MAX_STALLS:
            break       # steps accepted within round-off only: G is flat here
        for i in range(n):
            W.Sm[head * n + i] = step * dt[i]
        pending = 1
    n_iter[0] = it
    G_out[0] = G if status != MF_EOVERFLOW else NAN
    for i in range(n):
        u_out[i] = W.u[i] if W.fixed[i] else mf_sigmoid(t[i])
    if n_barren:
        set_barren_means(net, w, h, W.barren, u_out)
    if status != MF_OK:
        conv[0] = 0
    return status


cdef int qn_direction(const Net *net, Work *W, const double *t, const double *dt_fp,
                      Py_ssize_t mem, Py_ssize_t head) noexcept nogil:
    """W.dq = -H q by the L-BFGS two-loop recursion over the stored pairs, with the initial
    inverse Hessian gamma diag(1 / v) (gamma = 1 is the fixed-point step), shortened so that
    no logit moves further than the fixed-point step's largest move or 1 (whichever is larger:
    a long step can land where G is flat to round-off, u saturated), then bent back into the
    box |t| <= T_MAX.  Returns 0 if the result is not finite."""
    cdef Py_ssize_t n = net.g.n, i, k, j
    cdef double a, b, yhy, gam, cap = 1.0, big = 0.0
    cdef double *r = W.dq
    cdef double *sj
    cdef double *yj
    for i in range(n):
        r[i] = 0.0 if W.fixed[i] else W.q[i]
    for k in range(mem):
        j = (head - 1 - k + MEM) % MEM
        sj = W.Sm + j * n
        yj = W.Ym + j * n
        a = 0.0
        for i in range(n):
            if not W.fixed[i]:
                a = a + sj[i] * r[i]
        a = a * W.rho[j]
        W.alph[j] = a
        for i in range(n):
            if not W.fixed[i]:
                r[i] -= a * yj[i]
    j = (head - 1 + MEM) % MEM
    yj = W.Ym + j * n
    yhy = 0.0
    for i in range(n):
        if not W.fixed[i]:
            yhy = yhy + yj[i] * yj[i] / W.vcur[i]
    gam = 1.0 / (W.rho[j] * yhy)
    for i in range(n):
        if not W.fixed[i]:
            r[i] *= gam / W.vcur[i]
    for k in range(mem - 1, -1, -1):
        j = (head - 1 - k + MEM) % MEM
        sj = W.Sm + j * n
        yj = W.Ym + j * n
        b = 0.0
        for i in range(n):
            if not W.fixed[i]:
                b = b + yj[i] * r[i]
        b = b * W.rho[j]
        for i in range(n):
            if not W.fixed[i]:
                r[i] += (W.alph[j] - b) * sj[i]
    for i in range(n):
        if not W.fixed[i]:
            if fabs(dt_fp[i]) > cap:
                cap = fabs(dt_fp[i])
            if not (fabs(r[i]) <= big):
                big = fabs(r[i])
    if not (big < INFINITY):
        return 0
    cap = cap / big if big > cap else 1.0
    for i in range(n):
        if W.fixed[i]:
            continue
        a = t[i] - cap * r[i]
        a = -net.t_max if a < -net.t_max else (net.t_max if a > net.t_max else a)
        r[i] = a - t[i]
    return 1
