# The objective (part of _plefka.pyx).  ``core`` evaluates F = G minus its entropy part at the
# means in Work and, in reverse mode, its partial derivatives with respect to every mean, every
# Mbar (= dF/dh) and every weight, by the formulas of the module docstring: O(nnz) for G11 and
# G12, O(nnz + sum_i fanin_i^2) for G22.  ``coeffs`` gives one unit's g_n and d_n (sigmoid or
# noisy-OR), ``eval_t`` G and dG/du at the free units' logits (what the solvers call), and
# ``dir_deriv`` / ``max_du`` the two reductions over a step that solve_item's tests read.

cdef inline int coeffs(double M, double u, int act, Work *W, Py_ssize_t i) noexcept nogil:
    """g_n = u a_n + (1 - u) b_n and d_n = a_n - b_n (n = 0..3) of unit i at Mbar_i = M.

    Returns 1 when ln f(M) = -inf while u > 0 (noisy-OR with M = 0): G is +inf.  For a
    noisy-OR unit with M = 0 and u = 0 the d_n (infinite) are set to 0: they only ever enter
    multiplied by v_i = 0.
    """
    cdef double s, q, a0, r, rr
    if act == SIGMOID:
        s = mf_sigmoid(M)
        q = mf_sigmoid(-M)
        a0 = -mf_log1pexp(-M)
        W.g0[i] = u * a0 - (1.0 - u) * mf_log1pexp(M)
        W.g1[i] = u - s
        W.g2[i] = -s * q
        W.g3[i] = -s * q * (q - s)
        W.d0[i] = M
        W.d1[i] = 1.0
        W.d2[i] = 0.0
        W.d3[i] = 0.0
        return 0
    # noisy-OR: ln f = ln(1 - e^{-M}) (derivatives r, -r (1 + r), r (1 + r)(1 + 2r) with
    # r = 1 / (e^M - 1)); ln(1 - f) = -M (derivatives -1, 0, 0)
    if M > 0.0:
        r = 1.0 / expm1(M)
        rr = r * (1.0 + r)
        a0 = log(-expm1(-M))
        W.g0[i] = (u * a0 if u > 0.0 else 0.0) - (1.0 - u) * M
        W.g1[i] = u * (1.0 + r) - 1.0
        W.g2[i] = -u * rr
        W.g3[i] = u * rr * (1.0 + 2.0 * r)
        W.d0[i] = a0 + M
        W.d1[i] = 1.0 + r
        W.d2[i] = -rr
        W.d3[i] = rr * (1.0 + 2.0 * r)
        return 0
    W.g0[i] = 0.0
    W.g1[i] = -1.0
    W.g2[i] = 0.0
    W.g3[i] = 0.0
    W.d0[i] = 0.0
    W.d1[i] = 0.0
    W.d2[i] = 0.0
    W.d3[i] = 0.0
    return 1 if u > 0.0 else 0


cdef inline void touch(Work *W, Py_ssize_t l, Py_ssize_t *nt) noexcept nogil:
    if not W.mark[l]:
        W.mark[l] = 1
        W.touched[nt[0]] = l
        nt[0] += 1


cdef int core(const Net *net, const double *w, const double *h, Work *W, int want_grad,
              double *gu, double *wbar, double *F) noexcept nogil:
    """F = G minus its entropy part, at the means in W.u (W.v, W.c consistent with them).

    With want_grad: gu[k] = dF/du_k for every unit k, W.mbar[i] = dF/dh_i and, if wbar is not
    NULL, wbar[e] = dF/dw_e (partial derivatives, every other mean held fixed).
    Returns MF_OK, or G_INF (F = +inf; no derivatives).
    """
    cdef Py_ssize_t n = net.g.n, i, e, k, j, l, ce, f, ew, nt, q
    cdef const intp_t *par_ptr = net.g.par_ptr
    cdef const intp_t *par_idx = net.g.par_idx
    cdef const intp_t *ch_ptr = net.g.ch_ptr
    cdef const intp_t *ch_idx = net.g.ch_idx
    cdef const intp_t *ch_w = net.g.ch_w
    cdef int order = net.order, act = net.act, inf = 0
    cdef double *u = W.u
    cdef double *v = W.v
    cdef double *c = W.c
    cdef double *A = W.A
    cdef double *Abar = W.Abar
    cdef double m, vv, we, wf, Fv = 0.0, Spair = 0.0, Stri = 0.0, s, ab, gsum, tb, Vb, x
    cdef double gi2, vj, s4
    for i in range(n):
        m = h[i]
        vv = 0.0
        if W.barren[i]:
            # summed out: every coefficient 0, so no term of G and nothing to its parents
            W.M[i] = m
            W.V[i] = vv
            W.g0[i] = W.g1[i] = W.g2[i] = W.g3[i] = 0.0
            W.d0[i] = W.d1[i] = W.d2[i] = W.d3[i] = 0.0
            continue
        for e in range(par_ptr[i], par_ptr[i + 1]):
            k = par_idx[e]
            we = w[e]
            m = m + we * u[k]
            vv = vv + we * (we * v[k])      # w^2 v, not overflowing where v is tiny
        W.M[i] = m
        W.V[i] = vv
        if act == NOISY_OR and u[i] == 0.0 and m > 0.0 and W.fixed[i]:
            # clamped off (most findings of a diagnosis case): ln(1 - f(M)) = -M, linear, no
            # exp or log; its d_n would enter only its own dG/du, which no caller reads
            W.g0[i] = -m
            W.g1[i] = -1.0
            W.g2[i] = W.g3[i] = 0.0
            W.d0[i] = W.d1[i] = W.d2[i] = W.d3[i] = 0.0
            continue
        inf |= coeffs(m, u[i], act, W, i)
    if inf:
        F[0] = INFINITY
        return G_INF
    for i in range(n):
        Fv -= W.g0[i]
    if order >= 12:
        for i in range(n):
            Fv -= 0.5 * W.g2[i] * W.V[i]
    if want_grad:
        for i in range(n):
            W.ubar[i] = -W.d0[i]
            W.mbar[i] = -W.g1[i]
            W.vbar[i] = 0.0
            W.cbar[i] = 0.0
            if order >= 12:
                W.ubar[i] -= 0.5 * W.d2[i] * W.V[i]
                W.mbar[i] -= 0.5 * W.g3[i] * W.V[i]
        if wbar != NULL:
            memset(wbar, 0, net.g.nnz * sizeof(double))
    if order == 22:
        # triples {j, l, i} (noisy-OR only: d2 = 0 for the sigmoid)
        if act == NOISY_OR:
            for i in range(n):
                W.T[i] = 0.0
                if v[i] > 0.0:
                    s4 = 0.0
                    for e in range(par_ptr[i], par_ptr[i + 1]):
                        we = w[e] * (w[e] * v[par_idx[e]])
                        s4 = s4 + we * we
                    W.T[i] = 0.5 * (W.V[i] * W.V[i] - s4)
                    Stri += W.d2[i] * W.d2[i] * v[i] * W.T[i]
        # pairs {l, j}, l < j: alpha_lj gathered in A[l] for one j at a time
        for j in range(n):
            vj = v[j]
            if vj <= 0.0:
                continue
            nt = 0
            for ce in range(ch_ptr[j], ch_ptr[j + 1]):
                i = ch_idx[ce]
                we = w[ch_w[ce]]
                gi2 = W.g2[i]
                for f in range(par_ptr[i], par_ptr[i + 1]):
                    l = par_idx[f]
                    if l >= j:
                        break
                    if v[l] <= 0.0:
                        continue
                    touch(W, l, &nt)
                    A[l] += gi2 * we * w[f]
            for f in range(par_ptr[j], par_ptr[j + 1]):
                l = par_idx[f]
                if v[l] <= 0.0:
                    continue
                touch(W, l, &nt)
                wf = w[f]
                A[l] += W.d1[j] * wf + 0.5 * W.d2[j] * wf * wf * c[l]
            s = 0.0
            for q in range(nt):
                l = W.touched[q]
                s = s + A[l] * A[l] * v[l]
            Spair += vj * s
            if want_grad:
                W.vbar[j] -= 0.5 * s
                for q in range(nt):
                    l = W.touched[q]
                    Abar[l] = -vj * A[l] * v[l]
                    W.vbar[l] -= 0.5 * vj * A[l] * A[l]
                for ce in range(ch_ptr[j], ch_ptr[j + 1]):
                    i = ch_idx[ce]
                    ew = ch_w[ce]
                    we = w[ew]
                    gi2 = W.g2[i]
                    gsum = 0.0
                    for f in range(par_ptr[i], par_ptr[i + 1]):
                        l = par_idx[f]
                        if l >= j:
                            break
                        if v[l] <= 0.0:
                            continue
                        ab = Abar[l]
                        gsum = gsum + ab * we * w[f]
                        if wbar != NULL:
                            wbar[ew] += ab * gi2 * w[f]
                            wbar[f] += ab * gi2 * we
                    W.ubar[i] += gsum * W.d2[i]
                    W.mbar[i] += gsum * W.g3[i]
                for f in range(par_ptr[j], par_ptr[j + 1]):
                    l = par_idx[f]
                    if v[l] <= 0.0:
                        continue
                    ab = Abar[l]
                    wf = w[f]
                    W.mbar[j] += ab * (W.d2[j] * wf + 0.5 * W.d3[j] * wf * wf * c[l])
                    if wbar != NULL:
                        wbar[f] += ab * (W.d1[j] + W.d2[j] * wf * c[l])
                    W.cbar[l] += ab * 0.5 * W.d2[j] * wf * wf
            for q in range(nt):
                l = W.touched[q]
                A[l] = 0.0
                W.mark[l] = 0
        Fv -= 0.5 * (Spair + Stri)
    F[0] = Fv
    if not want_grad:
        return MF_OK
    # adjoints of V_i (and of T_i for G22 noisy-OR) onto v and w
    for i in range(n):
        Vb = -0.5 * W.g2[i] if order >= 12 else 0.0
        tb = 0.0
        if order == 22 and act == NOISY_OR and v[i] > 0.0:
            tb = -0.5 * W.d2[i] * W.d2[i] * v[i]
            W.mbar[i] -= W.d2[i] * W.d3[i] * v[i] * W.T[i]
            W.vbar[i] -= 0.5 * W.d2[i] * W.d2[i] * W.T[i]
            Vb = Vb + tb * W.V[i]
        if Vb == 0.0 and tb == 0.0:
            continue
        for e in range(par_ptr[i], par_ptr[i + 1]):
            k = par_idx[e]
            we = w[e]
            x = Vb - tb * we * (we * v[k])
            W.vbar[k] += we * (we * x)
            if wbar != NULL:
                wbar[e] += 2.0 * we * (v[k] * x)
    for k in range(n):
        gu[k] = W.ubar[k] + W.vbar[k] * c[k] - 2.0 * W.cbar[k]
    for i in range(n):
        m = W.mbar[i]
        for e in range(par_ptr[i], par_ptr[i + 1]):
            k = par_idx[e]
            gu[k] += m * w[e]
            if wbar != NULL:
                wbar[e] += m * u[k]
    return MF_OK


cdef double eval_t(const Net *net, const double *w, const double *h, Work *W, const double *t,
                   int want_grad, double *gu, int *status) noexcept nogil:
    """G at the free logits t (fixed units as set in W); with want_grad, gu[i] = dG/du_i for
    the free units.  W.u, W.v, W.c are left at this point."""
    cdef Py_ssize_t i, n = net.g.n
    cdef double ti, s, sm, negH = 0.0, F
    for i in range(n):
        if W.fixed[i]:
            continue
        ti = t[i]
        s = mf_sigmoid(ti)
        sm = mf_sigmoid(-ti)
        W.u[i] = s
        W.v[i] = s * sm
        W.c[i] = sm - s
        negH += s * ti - mf_log1pexp(ti)
    status[0] = core(net, w, h, W, want_grad, gu, NULL, &F)
    if status[0] != MF_OK:
        return INFINITY
    if want_grad:
        for i in range(n):
            if not W.fixed[i]:
                gu[i] += t[i]
    F = negH + F
    if not (fabs(F) < INFINITY):     # NaN or +-inf: G left the double range
        status[0] = MF_EOVERFLOW
    return F


cdef inline double dir_deriv(const Net *net, const Work *W, const double *g,
                             const double *dt) noexcept nogil:
    """d/dlambda G(t + lambda dt) at the point whose v is in W.v and gradient dG/du is g."""
    cdef Py_ssize_t i
    cdef double D = 0.0
    for i in range(net.g.n):
        if not W.fixed[i]:
            D += g[i] * W.v[i] * dt[i]
    return D


cdef inline double max_du(const Net *net, const Work *W, const double *dt,
                          double step) noexcept nogil:
    """About how far a step of step * dt in t moves the means: max_i v_i |step dt_i|."""
    cdef Py_ssize_t i
    cdef double m = 0.0, x
    for i in range(net.g.n):
        if not W.fixed[i]:
            x = W.vcur[i] * fabs(step * dt[i])
            if x > m:
                m = x
    return m
