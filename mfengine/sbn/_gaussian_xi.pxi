# The xi updates (part of _gaussian.pyx): each xi_i is the root of
# xi = sigmoid(m_i + (1/2 - xi) s_i), found by safeguarded Newton; moving xi there raises the
# bound (the paper's plain iteration can overshoot and lower it once s_i is large).

cdef inline bint lazy_xi(Py_ssize_t i, double x, double r, double s, double sg, double *xi,
                         Work *w) noexcept nogil:
    """One Newton step on the xi residual without an exp, when that is safe.

    The step dx = -r / (1 + s sig (1 - sig)) moves a = m + (1/2 - xi) s by da = -s dx; when
    |da| <= DA_LAZY, sig follows by a second-order Taylor step (as for the means) and u by
    u = 1 / max(sig, 1 - sig).  The xi term phi(xi) = xi^2 s / 2 + log(1 + e^a) is convex with
    phi' = s r and phi'' = s + s^2 sig (1 - sig); over the step sig (1 - sig) grows by at most
    0.1 |da|, and the step provably lowers phi (raises L) when 0.1 s |da| < 1 + s sig (1 - sig).
    """
    cdef double vs = sg * (1.0 - sg), dx, da, sn
    dx = -r / (1.0 + s * vs)
    da = -s * dx
    if fabs(da) > DA_LAZY or 0.1 * s * fabs(da) >= 1.0 + s * vs or not (x + dx > 0.0 and x + dx < 1.0):
        return False
    sn = sg + vs * da * (1.0 + 0.5 * (1.0 - 2.0 * sg) * da)
    xi[i] = x + dx
    w.sig[i] = sn
    w.u[i] = 1.0 / (sn if sn > 0.5 else 1.0 - sn)
    return True


cdef void refresh_xi_unit(Py_ssize_t i, double *xi, Work *w, double gtol, bint lazy) noexcept nogil:
    """Solve xi_i = sigmoid(m_i + (1/2 - xi_i) s_i) by safeguarded Newton; update the cache.

    The residual r(xi) = xi - sigmoid(m + (1/2 - xi) s) is strictly increasing on [0, 1] with
    r(0) < 0 < r(1); its root minimises the convex term 1/2 xi^2 s + log(1 + e^{m + (1/2 - xi) s}),
    so moving xi to it raises the bound.  (The paper's plain iteration xi <- sigmoid(...) can
    overshoot and lower the bound once s is large.)
    """
    cdef Py_ssize_t it
    cdef double x = xi[i], sg = w.sig[i], m = w.m[i], s = w.s[i], r, lo, hi, xn, uu = w.u[i]
    cdef double scale, rtol, den
    if s <= 0.0:
        xi[i] = sg          # no input variance: sig does not depend on xi
        return
    # Stop when the bound's error from the residual r, about s r^2 / (2 (1 + s sig (1 - sig))),
    # is below gtol^2 / 2 (for s up to about 1 this is just |r| <= gtol); tested squared, as
    # most units stop here.
    r = x - sg
    den = 1.0 + s * sg * (1.0 - sg)
    if (r * r * s <= gtol * gtol * den) if s > den else (fabs(r) <= gtol):
        return
    scale = sqrt(s / den)
    rtol = gtol / scale if scale > 1.0 else gtol
    if lazy and lazy_xi(i, x, r, s, sg, xi, w):
        return
    lo = 0.0
    hi = 1.0
    for it in range(MAX_IT):
        if r > 0.0:
            hi = x
        else:
            lo = x
        xn = x - r / (1.0 + s * sg * (1.0 - sg))
        if not (xn > lo and xn < hi):
            xn = 0.5 * (lo + hi)
        x = xn
        mf_sig_u(m + (0.5 - x) * s, &sg, &uu)
        r = x - sg
        if fabs(r) <= rtol or hi - lo <= 1e-15:
            break
    xi[i] = x
    w.sig[i] = sg
    w.u[i] = uu


cdef inline void refresh_xi(const Net *net, Py_ssize_t l, double *xi, Work *w, double gtol) noexcept nogil:
    """Re-solve the xi of every unit of layer l (with the default tolerances a short step may
    be taken without an exp, see lazy_xi)."""
    cdef Py_ssize_t i, off = net.offset[l]
    cdef bint lazy = w.gain_tol > 0.0
    for i in range(off, off + net.sizes[l]):
        refresh_xi_unit(i, xi, w, gtol, lazy)
