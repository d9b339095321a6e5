"""Kernel: Gaussian-approximated mean field for layered sigmoid belief nets (Saul & Jordan).

Called from the layered sigmoid belief net's inference and training (``run``, ``fit_epoch``),
and from C and Cython callers through the C-level API (``mfengine.solver``).  Every entry point
checks its arguments against the net's sizes before any memory is touched.

State per pattern (all units, layers concatenated top first): ``mu``, ``xi``, and the cached
``m`` (mean input), ``s`` (input variance) and ``sig = sigmoid(m + (1/2 - xi) s)``.

One sweep: recompute m, s, sig exactly from mu; then for each hidden layer (bottom-up on even
sweeps, top-down on odd ones) update every unit's mu with the children's xi held fixed, then
re-solve the xi of the layer below (its input statistics have changed).  Each mu update is a
bracketed, safeguarded Newton search in t = logit(mu) on the exact 1-D objective; each xi
update is a safeguarded Newton root of xi = sigmoid(m + (1/2 - xi) s).  Both raise the bound.

The first evaluation of a mu update reads the children's cached sig and needs no exp; a unit
already at its optimum costs one pass over its children with no transcendental call.
"""
import numbers
import operator

import numpy as np

from cython.parallel cimport prange, parallel
from libc.float cimport DBL_MAX
from libc.math cimport fabs, log, sqrt
from libc.stdlib cimport malloc, free
from mfengine._typedefs cimport intp_t, uint8_t, int8_t

cdef extern from "<stdint.h>" nogil:
    const Py_ssize_t PTRDIFF_MAX

cdef extern from "mf_numerics.h" nogil:
    void mf_sig_u(double a, double *sig, double *u)
    double mf_log1pexp(double x)
    double mf_sigmoid(double x)

cdef extern from "mf_parallel.h" nogil:
    const int MF_MAX_THREADS
    ctypedef void (*mf_body_fn)(void *ctx, Py_ssize_t i, int thread) noexcept nogil
    int mf_clamp_threads(Py_ssize_t n_threads, Py_ssize_t n_items)
    void mf_parallel_for(Py_ssize_t n, int n_threads, mf_body_fn body, void *ctx)

cdef extern from "mf_sbn.h" nogil:
    const double MF_SBN_PARAM_LIMIT
    void mf_sbn_children_eval(Py_ssize_t n, const double *J, const double *J2,
                              const double *m, const double *s, const double *xi,
                              const double *muc, const double *obs,
                              double dmu, double dvar, double tk, int want_f, int want_u,
                              double *sig_out, double *u_out, double *out)
    void mf_sbn_children_cached(Py_ssize_t n, const double *J, const double *J2,
                                const double *xi, const double *sig, const double *muc,
                                const double *obs, double tk, double *out)
    double mf_sbn_children_value(Py_ssize_t n, const double *m, const double *s, const double *xi,
                                 const double *u, const double *muc, const double *obs)
    void mf_sbn_sig_u_all(Py_ssize_t n, const double *m, const double *s, const double *xi,
                          double *sig, double *u)
    double mf_sbn_layer_bound(Py_ssize_t n, const double *mu, const double *t, const double *m,
                              const double *s, const double *xi, const double *obs)
    void mf_sbn_children_commit_taylor(Py_ssize_t n, const double *J, const double *J2,
                                       const double *xi, double dmu, double dvar, double *m,
                                       double *s, double *sig, double *u)
    void mf_sbn_children_commit(Py_ssize_t n, const double *J, const double *J2, double dmu,
                                double dvar, double *m, double *s, double *sig, double *u,
                                const double *sig_new, const double *u_new, int want_u)

# Means are kept at sigmoid(t) with |t| <= T_MAX; mu itself may round to 0 or 1 (t ~ +-37),
# which is harmless: the entropy and the searches work with t.
DEF T_MAX = 40.0
DEF T_TOL = 1e-11      # bracket width (in t) at which a mu search stops
DEF MAX_IT = 100       # evaluations per 1-D solve, a safety net (typically 0 to 4)
DEF CONCAVE_LIMIT = 4.0
DEF PROBE_T = 8.0        # where the other basin of a non-concave 1-D problem is probed
DEF PROBE_BELOW = 0.02   # ... when its maximum has mu in (PROBE_BELOW, 1 - PROBE_BELOW)
DEF F_NOISE = 1e-14       # relative round-off of a 1-D objective value
DEF RECOMPUTE_EVERY = 4   # sweeps between exact recomputations of the cached statistics
DEF DA_LAZY = 3e-3        # a step moving no child's input by more than this updates sig by Taylor

cdef struct Net:
    Py_ssize_t n_layers
    Py_ssize_t n_units
    const intp_t *sizes
    const intp_t *offset      # first unit of layer l
    const intp_t *woff        # first weight of block l (layer l -> layer l+1)
    const double *WT          # block l: (sizes[l], sizes[l+1]), row j = unit j's outgoing weights
    const double *WT2         # squares of WT
    const double *bias
    const int8_t *need_u      # layer l's u cache is read (some parent's 1-D problem may be non-concave)
    const double *jmax        # per hidden unit: max_c |J_ck|, max_c J_ck^2, and
    const double *j2max       #   C2 = 1/4 sum_c (|J_ck| + J_ck^2 / 2)^2 (a curvature bound)
    const double *c2

cdef struct Work:
    double *t           # logit of mu for hidden units (mu = sigmoid(t)); kept beside mu
    double *m
    double *s
    double *sig
    double *u           # 1 + e^{-|a|}, a = m + (1/2 - xi) s: log(1 + e^a) = max(a, 0) + log u
    double *buf0        # sig and u at trial points (two of each: trial and best)
    double *buf1
    double *buf2
    double *ubuf0
    double *ubuf1
    double *ubuf2
    double *ones
    double *obs
    int any_missing     # some visible unit of the current pattern is missing
    double gain_tol     # a mu update whose predicted gain in L is below this is not made
    const double *net_jmax   # the net's per-unit static bounds (see Net)
    const double *net_j2max
    const double *net_c2


cdef void init_logits(const Net *net, double *mu, Work *w) noexcept nogil:
    """t = logit(mu) for every hidden unit, clamped to |t| <= T_MAX, and mu = sigmoid(t)."""
    cdef Py_ssize_t i
    cdef double t, p
    for i in range(net.offset[net.n_layers - 1]):
        p = mu[i]
        if p <= 0.0:
            t = -T_MAX
        elif p >= 1.0:
            t = T_MAX
        else:
            t = log(p) - log(1.0 - p)
            t = -T_MAX if t < -T_MAX else (T_MAX if t > T_MAX else t)
        w.t[i] = t
        mu[i] = mf_sigmoid(t)


cdef void recompute_stats(const Net *net, const double *mu, const double *xi, Work *w) noexcept nogil:
    """m, s and sig of every unit, exactly, from the current means."""
    cdef Py_ssize_t l, j, c, nc, npar, coff, poff, i
    cdef const double *row
    cdef const double *row2
    cdef double muj, vj
    cdef double *m = w.m
    cdef double *s = w.s
    for i in range(net.sizes[0]):
        m[i] = net.bias[i]
        s[i] = 0.0
    for l in range(net.n_layers - 1):
        npar = net.sizes[l]
        nc = net.sizes[l + 1]
        poff = net.offset[l]
        coff = net.offset[l + 1]
        for c in range(nc):
            m[coff + c] = net.bias[coff + c]
            s[coff + c] = 0.0
        for j in range(npar):
            muj = mu[poff + j]
            vj = muj * (1.0 - muj)
            row = net.WT + net.woff[l] + j * nc
            row2 = net.WT2 + net.woff[l] + j * nc
            for c in range(nc):
                m[coff + c] += row[c] * muj
                s[coff + c] += row2[c] * vj
    mf_sbn_sig_u_all(net.n_units, m, s, xi, w.sig, w.u)


cdef double pattern_bound(const Net *net, const double *mu, const double *xi, const Work *w) noexcept nogil:
    """L(mu, xi) from the cached m and s (Saul & Jordan eq. 24; missing visible terms left out)."""
    cdef Py_ssize_t vis_off = net.offset[net.n_layers - 1]
    cdef double total = mf_sbn_layer_bound(vis_off, mu, w.t, w.m, w.s, xi, NULL)
    total += mf_sbn_layer_bound(net.sizes[net.n_layers - 1], mu + vis_off, NULL, w.m + vis_off,
                                w.s + vis_off, xi + vis_off, w.obs)
    return total


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


cdef void sweep_layer(const Net *net, Py_ssize_t l, double *mu, double *xi, Work *w,
                      double gtol) noexcept nogil:
    """Update every mu of hidden layer l, then re-solve the xi of layer l + 1."""
    cdef Py_ssize_t k
    for k in range(net.sizes[l]):
        update_mu(net, l, k, mu, xi, w, gtol)
    refresh_xi(net, l + 1, xi, w, gtol)


cdef inline Py_ssize_t turnaround_skip(const Net *net, Py_ssize_t l, Py_ssize_t sweep) noexcept nogil:
    """1 if a pass should not begin with hidden layer l, the layer the previous pass ended on.

    Only with two or more hidden layers, after the first pass, and when every unit of layer l
    has sum_c J_ck^2 < 4 (need_u of its children is 0): then its 1-D problems are concave and
    its units are weakly coupled through their shared children, so updating the layer again
    straight away gains little.  Strongly coupled layers (explaining away) are updated again.
    """
    if sweep == 0 or net.n_layers < 3:
        return 0
    return 1 if net.need_u[l + 1] == 0 else 0


cdef int8_t solve_pattern(const Net *net, const double *v, const uint8_t *miss,
                          double *mu, double *xi, Work *w, double tol, double gtol,
                          Py_ssize_t max_sweeps, double *bound_out,
                          intp_t *sweeps_out) noexcept nogil:
    cdef Py_ssize_t vis = net.n_layers - 1, voff = net.offset[vis], nv = net.sizes[vis]
    cdef Py_ssize_t i, l, sweep, skip
    cdef double Lold, Lnew, Lold2
    cdef int8_t converged = 0
    w.any_missing = 0
    for i in range(nv):
        if miss != NULL and miss[i]:
            w.obs[i] = 0.0
            w.any_missing = 1
            mu[voff + i] = 0.5
        else:
            w.obs[i] = 1.0
            mu[voff + i] = v[i]
    for i in range(net.n_units):
        xi[i] = 0.5         # every xi must be finite before the first recompute_stats reads it
    init_logits(net, mu, w)
    recompute_stats(net, mu, xi, w)
    for i in range(net.sizes[0]):
        xi[i] = w.sig[i]
    for l in range(1, net.n_layers):
        refresh_xi(net, l, xi, w, gtol)
    Lold = pattern_bound(net, mu, xi, w)
    Lold2 = -1e300
    sweeps_out[0] = max_sweeps
    for sweep in range(max_sweeps):
        if sweep > 0 and sweep % RECOMPUTE_EVERY == 0:
            # m, s and sig are kept up to date incrementally; an exact recomputation now and
            # then stops round-off from accumulating.
            recompute_stats(net, mu, xi, w)
        # Passes alternate bottom-up and top-down.  A pass skips the layer the previous pass
        # ended on when that layer is weakly coupled (turnaround_skip): 2,1,0 | 1,2 | 1,0 | ...
        if sweep % 2 == 0:
            skip = turnaround_skip(net, vis - 1, sweep)
            for l in range(vis - 1 - skip, -1, -1):
                sweep_layer(net, l, mu, xi, w, gtol)
        else:
            skip = turnaround_skip(net, 0, sweep)
            for l in range(skip, vis):
                sweep_layer(net, l, mu, xi, w, gtol)
        Lnew = pattern_bound(net, mu, xi, w)
        # A pass that skipped a layer only counts together with the pass before it (which
        # updated the skipped layer): a pass over pinned units alone changes L by nothing.
        if fabs(Lnew - Lold) < tol and (skip == 0 or fabs(Lnew - Lold2) < tol):
            converged = 1
            sweeps_out[0] = sweep + 1
            Lold = Lnew
            break
        Lold2 = Lold
        Lold = Lnew
    # Report the bound from freshly computed statistics (no incremental round-off).  L <= 0
    # holds exactly for every mu in [0, 1] and xi (Saul & Jordan's bound on <ln(1 + e^z)>
    # makes each visible unit's terms at most <ln sigmoid(+-z)> and each hidden unit's at most
    # <max_mu [H(mu) + mu z] - ln(1 + e^z)> = 0), so a positive value is round-off in adding
    # up terms that cancel (with parameters near 1e17 they can be ~1e2 apart); 0 is closer.
    recompute_stats(net, mu, xi, w)
    bound_out[0] = pattern_bound(net, mu, xi, w)
    if bound_out[0] > 0.0:
        bound_out[0] = 0.0
    for i in range(nv):
        if w.obs[i] == 0.0:
            mu[voff + i] = xi[voff + i]
    return converged


cdef inline Py_ssize_t WORK_SIZE(Py_ssize_t U, Py_ssize_t width, Py_ssize_t nv) noexcept nogil:
    return 5 * U + 7 * width + nv


cdef Work make_work(double *scratch, const Net *net, Py_ssize_t width, Py_ssize_t nv,
                    double gain_tol=0.0) noexcept nogil:
    """Carve one thread's scratch block into the per-pattern work arrays."""
    cdef Work w
    cdef Py_ssize_t i, U = net.n_units
    w.gain_tol = gain_tol
    w.net_jmax = net.jmax
    w.net_j2max = net.j2max
    w.net_c2 = net.c2
    w.any_missing = 0
    w.m = scratch
    w.s = scratch + U
    w.sig = scratch + 2 * U
    w.t = scratch + 3 * U
    w.u = scratch + 4 * U
    w.buf0 = scratch + 5 * U
    w.buf1 = scratch + 5 * U + width
    w.buf2 = scratch + 5 * U + 2 * width
    w.ubuf0 = scratch + 5 * U + 3 * width
    w.ubuf1 = scratch + 5 * U + 4 * width
    w.ubuf2 = scratch + 5 * U + 5 * width
    w.ones = scratch + 5 * U + 6 * width
    w.obs = scratch + 5 * U + 7 * width
    for i in range(width):
        w.ones[i] = 1.0
    return w


cdef void accumulate_gradient(const Net *net, const double *mu, const double *xi, const Work *w,
                              double *delta, double *q, double *gWT, double *gb) noexcept nogil:
    """Add one pattern's gradient of L to (gWT, gb), at its solution (m, s, sig exact in w).

    dL/dh_i = mu_i - sig_i and dL/dJ_ij = (mu_i - sig_i) mu_j - J_ij mu_j (1 - mu_j) q_i with
    q_i = xi_i^2 + (1 - 2 xi_i) sig_i (Saul & Jordan eqs. 10-11 without assuming xi = sig);
    missing visible units contribute nothing.  gWT has the layout of net.WT.
    """
    cdef Py_ssize_t i, l, j, c, nc, npar, coff, poff
    cdef Py_ssize_t voff = net.offset[net.n_layers - 1]
    cdef double o, muj, vj
    cdef const double *wrow
    cdef double *grow
    for i in range(net.n_units):
        o = w.obs[i - voff] if i >= voff else 1.0
        delta[i] = o * (mu[i] - w.sig[i])
        q[i] = o * (xi[i] * xi[i] + (1.0 - 2.0 * xi[i]) * w.sig[i])
        gb[i] += delta[i]
    for l in range(net.n_layers - 1):
        npar = net.sizes[l]
        nc = net.sizes[l + 1]
        poff = net.offset[l]
        coff = net.offset[l + 1]
        for j in range(npar):
            muj = mu[poff + j]
            vj = muj * (1.0 - muj)
            wrow = net.WT + net.woff[l] + j * nc
            grow = gWT + net.woff[l] + j * nc
            for c in range(nc):
                grow[c] += delta[coff + c] * muj - wrow[c] * vj * q[coff + c]


cdef void update_static(const Net *net, int8_t *need_u, double *jmax, double *j2max,
                        double *c2) noexcept nogil:
    """Recompute what _flatten derives from the weights: need_u[l + 1] = 1 when some unit of
    layer l has sum_c J_ck^2 >= 4, and each unit's max |J|, max J^2 and C2."""
    cdef Py_ssize_t l, j, c, nc, k
    cdef const double *row
    cdef const double *row2
    cdef double tot, a, mx, mx2, cc
    for l in range(net.n_layers - 1):
        nc = net.sizes[l + 1]
        need_u[l + 1] = 0
        for j in range(net.sizes[l]):
            k = net.offset[l] + j
            row = net.WT + net.woff[l] + j * nc
            row2 = net.WT2 + net.woff[l] + j * nc
            tot = 0.0
            mx = 0.0
            mx2 = 0.0
            cc = 0.0
            for c in range(nc):
                tot += row2[c]
                a = fabs(row[c])
                mx = a if a > mx else mx
                mx2 = row2[c] if row2[c] > mx2 else mx2
                cc += (a + 0.5 * row2[c]) * (a + 0.5 * row2[c])
            jmax[k] = mx
            j2max[k] = mx2
            c2[k] = 0.25 * cc
            if tot >= 4.0 * (1.0 - 1e-9):
                need_u[l + 1] = 1



# ----------------------------------------------------------------------------- Python entry points
# Every array and scalar is checked here, immediately before the compiled code touches memory:
# the model's current parameters against its sizes, the data against the net, the state and the
# visiting order against the data.  Errors are ValueError naming the argument.

_SIZE_LIMIT = np.iinfo(np.intp).max // 64   # unit and weight counts: byte sizes cannot overflow


class GaussianSolution:
    """What ``run`` returns: the per-pattern bound and the variational parameters.

    Attributes: ``bound`` (n,), ``mu`` and ``xi`` (one (n, sizes[l]) array per layer, top
    first), ``n_sweeps`` (n,) (also as ``n_iter``), ``converged`` (n,) bool, ``method``
    ("gaussian") and ``tol``.
    """

    def __init__(self, bound, mu, xi, n_sweeps, converged, tol):
        self.bound = bound
        self.mu = mu
        self.xi = xi
        self.n_sweeps = n_sweeps
        self.converged = converged
        self.method = "gaussian"
        self.tol = tol

    @property
    def n_iter(self):
        return self.n_sweeps

    def __repr__(self):
        return (f"GaussianSolution(n_patterns={self.bound.shape[0]}, "
                f"converged={int(self.converged.sum())}/{self.converged.shape[0]})")


def _positive(x, name):
    """A positive finite float."""
    if isinstance(x, bool) or not isinstance(x, numbers.Real) or not (0.0 < x < np.inf):
        raise ValueError(f"{name} must be a positive finite number, got {x!r}")
    return float(x)


def _count(x, name, low=1):
    """An integer in [low, the largest intp]."""
    if isinstance(x, bool) or not isinstance(x, numbers.Integral) or not (low <= x <= np.iinfo(np.intp).max):
        raise ValueError(f"{name} must be an integer in [{low}, {np.iinfo(np.intp).max}], got {x!r}")
    return int(x)


def _array(a, name, dtype, shape, writable=False):
    """``a`` itself, after checking that it is a C-contiguous ndarray of ``dtype`` and ``shape``
    (writable if asked)."""
    if not isinstance(a, np.ndarray):
        raise ValueError(f"{name} must be a numpy array, got {type(a).__name__}")
    if a.dtype != dtype:
        raise ValueError(f"{name} must have dtype {np.dtype(dtype)}, got {a.dtype}")
    if a.shape != shape:
        raise ValueError(f"{name} must have shape {shape}, got {a.shape}")
    if not a.flags.c_contiguous:
        raise ValueError(f"{name} must be C-contiguous")
    if writable and not a.flags.writeable:
        raise ValueError(f"{name} must be writable")
    return a


def _mask(miss, name, shape):
    """None, or the missing-entry mask as C-contiguous uint8 (bool is viewed as uint8)."""
    if miss is None:
        return None
    if isinstance(miss, np.ndarray) and miss.dtype == np.bool_:
        miss = miss.view(np.uint8)
    return _array(miss, name, np.uint8, shape)


def _check_binary(V, miss, name):
    if V.size == 0:
        return
    bad = (V != 0.0) & (V != 1.0)
    if miss is not None:
        bad &= miss == 0
    if bad.any():
        raise ValueError(f"{name} must be 0 or 1 at every observed entry")


def _check_means(a, name):
    if a.size and not ((a >= 0.0) & (a <= 1.0)).all():
        raise ValueError(f"{name} must lie in [0, 1] (and contain no NaN)")


def _check_counts(sizes):
    """Layer sizes whose unit and weight counts have byte sizes that fit the index type."""
    n_units = sum(sizes)
    n_weights = sum(a * b for a, b in zip(sizes, sizes[1:]))
    if n_units > _SIZE_LIMIT or n_weights > _SIZE_LIMIT:
        raise ValueError(f"layer sizes {sizes} give a net too large to address "
                         f"({n_units} units, {n_weights} weights)")


def _parameter(a, name, shape, writable):
    """One weight matrix or bias vector of the model: a float64 array of ``shape`` (writable
    when the epoch writes it back), finite, and within the kernel's range."""
    if not isinstance(a, np.ndarray):
        raise ValueError(f"{name} must be a numpy array, got {type(a).__name__}")
    if a.dtype != np.float64:
        raise ValueError(f"{name} must have dtype float64, got {a.dtype}")
    if a.shape != shape:
        raise ValueError(f"{name} must have shape {shape} (from the bias vectors' lengths), "
                         f"got {a.shape}")
    if writable and not a.flags.writeable:
        raise ValueError(f"{name} must be writable")
    big = np.abs(a).max()
    if not np.isfinite(big):
        raise ValueError(f"{name} contains NaN or infinite values")
    if big > MF_SBN_PARAM_LIMIT:
        raise ValueError(
            f"{name} has an entry of magnitude {big:.3g}; the Gaussian method accepts "
            f"|value| <= {MF_SBN_PARAM_LIMIT:g} (its input variances grow as weight^2 and would "
            f"overflow)")
    return a


def _flatten(model, writable=False):
    """The model's parameters, checked, in the kernel's layout:
    (sizes, offset, woff, WT, WT2, bias, need_u, jmax, j2max, c2).

    The layer sizes are the lengths of the bias vectors (at least two layers); every weight
    matrix is checked against them."""
    weights, biases = list(model.weights), list(model.biases)
    if len(biases) < 2 or len(weights) != len(biases) - 1:
        raise ValueError(f"a layered net needs at least 2 bias vectors and one weight matrix "
                         f"fewer, got {len(weights)} weight matrices and {len(biases)} bias vectors")
    sizes_l = []
    for l, b in enumerate(biases):
        if not isinstance(b, np.ndarray) or b.ndim != 1 or b.shape[0] < 1:
            raise ValueError(f"biases[{l}] must be a non-empty 1-D numpy array, got "
                             f"{getattr(b, 'shape', type(b).__name__)}")
        sizes_l.append(b.shape[0])
    _check_counts(sizes_l)
    L = len(sizes_l)
    weights = [_parameter(weights[l], f"weights[{l}]", (sizes_l[l + 1], sizes_l[l]), writable)
               for l in range(L - 1)]
    biases = [_parameter(biases[l], f"biases[{l}]", (sizes_l[l],), writable) for l in range(L)]
    sizes = np.asarray(sizes_l, dtype=np.intp)
    offset = np.zeros(L + 1, dtype=np.intp)
    offset[1:] = np.cumsum(sizes)
    woff = np.zeros(L, dtype=np.intp)
    woff[1:] = np.cumsum([w.size for w in weights])
    WT = np.ascontiguousarray(np.concatenate([w.T.ravel() for w in weights]))
    bias = np.ascontiguousarray(np.concatenate(biases))
    # A unit's 1-D problem is certainly concave when the sum of its squared outgoing weights is
    # below 4; only the children of units that fail this test ever need the u cache.
    need_u = np.zeros(L, dtype=np.int8)
    for l, w in enumerate(weights):
        need_u[l + 1] = np.any((w * w).sum(axis=0) >= 4.0 * (1.0 - 1e-9))
    # per hidden unit: max |J|, max J^2 and C2 = 1/4 sum_c (|J_ck| + J_ck^2 / 2)^2 over children
    n_units = int(offset[L])
    jmax = np.zeros(n_units)
    j2max = np.zeros(n_units)
    c2 = np.zeros(n_units)
    for l, w in enumerate(weights):
        a = np.abs(w)
        jmax[offset[l]:offset[l + 1]] = a.max(axis=0)
        j2max[offset[l]:offset[l + 1]] = (a * a).max(axis=0)
        c2[offset[l]:offset[l + 1]] = 0.25 * ((a + 0.5 * a * a) ** 2).sum(axis=0)
    return sizes, offset, woff, WT, WT * WT, bias, need_u, jmax, j2max, c2


cdef void fill_net(Net *net, const intp_t[::1] sizes, const intp_t[::1] offset,
                   const intp_t[::1] woff, const double[::1] WT, const double[::1] WT2,
                   const double[::1] bias, const int8_t[::1] need_u, const double[::1] jmax,
                   const double[::1] j2max, const double[::1] c2) noexcept:
    net.n_layers = sizes.shape[0]
    net.n_units = offset[sizes.shape[0]]
    net.sizes = &sizes[0]
    net.offset = &offset[0]
    net.woff = &woff[0]
    net.WT = &WT[0]
    net.WT2 = &WT2[0]
    net.bias = &bias[0]
    net.need_u = &need_u[0]
    net.jmax = &jmax[0]
    net.j2max = &j2max[0]
    net.c2 = &c2[0]


def run(model, V, miss, init_mu, tol, inner_tol, max_sweeps, n_threads, gain_rule=True):
    """Solve every pattern of V; returns a GaussianSolution.

    V (n, n_visible) float64 C-contiguous, 0 or 1 where observed; miss None or (n, n_visible)
    uint8/bool (nonzero = missing); init_mu None or (n, n_hidden) in [0, 1] (hidden layers
    concatenated; default 0.5); tol > 0 (per-pattern stopping rule on the bound), inner_tol > 0
    (tolerance of each 1-D solve); max_sweeps >= 1; n_threads (clamped to [1, n]).
    gain_rule: also skip a mu update whose predicted gain is below tol / (10 n_hidden) (so that
    the skipped updates cost at most tol / 10 per sweep); off, only |dL/dmu| <= inner_tol stops.
    """
    flat = _flatten(model)
    sizes_a, offset_a = flat[0], flat[1]
    cdef Py_ssize_t L = sizes_a.shape[0], U = offset_a[L]
    cdef Py_ssize_t nv = sizes_a[L - 1], H = U - nv
    cdef Py_ssize_t width = int(sizes_a.max())
    if not isinstance(V, np.ndarray) or V.ndim != 2:
        raise ValueError(f"V must be a 2-D numpy array, got {type(V).__name__}")
    cdef Py_ssize_t n = V.shape[0]
    V = _array(V, "V", np.float64, (n, nv))
    miss = _mask(miss, "missing", (n, nv))
    _check_binary(V, miss, "V")
    cdef double tol_ = _positive(tol, "tol")
    cdef double gtol = _positive(inner_tol, "inner_tol")
    cdef Py_ssize_t max_sweeps_ = _count(max_sweeps, "max_sweeps")
    if isinstance(n_threads, bool) or not isinstance(n_threads, numbers.Integral):
        raise ValueError(f"n_threads must be an integer, got {n_threads!r}")
    cdef int n_threads_ = max(1, min(n_threads, n, MF_MAX_THREADS))
    # updates gaining less than this are skipped: at most tol / 10 per sweep in all
    cdef double gain_tol = tol_ / (10.0 * max(H, 1)) if gain_rule else 0.0
    cdef Net net
    fill_net(&net, flat[0], flat[1], flat[2], flat[3], flat[4], flat[5], flat[6], flat[7],
             flat[8], flat[9])

    mu_a = np.empty((n, U), dtype=np.float64)
    if init_mu is None:
        mu_a[:, :H] = 0.5
    else:
        init = np.asarray(init_mu, dtype=np.float64)
        if init.shape != (n, H):
            raise ValueError(f"init_mu must have shape {(n, H)} (hidden layers concatenated), got {init.shape}")
        _check_means(init, "init_mu")
        lim = 1.0 / (1.0 + np.exp(40.0))
        mu_a[:, :H] = np.clip(init, lim, 1.0 - lim)
    xi_a = np.empty((n, U), dtype=np.float64)
    bound_a = np.empty(n, dtype=np.float64)
    sweeps_a = np.zeros(n, dtype=np.intp)
    status_a = np.zeros(n, dtype=np.int8)
    cdef const double[:, ::1] Vv = V
    cdef double[:, ::1] mu = mu_a
    cdef double[:, ::1] xi = xi_a
    cdef double[::1] bound = bound_a
    cdef intp_t[::1] sweeps = sweeps_a
    cdef int8_t[::1] status = status_a
    cdef const uint8_t[:, ::1] missv
    cdef bint has_miss = miss is not None
    missv = miss if has_miss else np.zeros((1, 1), dtype=np.uint8)

    cdef Py_ssize_t p
    cdef double *scratch
    cdef Work w
    cdef Py_ssize_t wsize = WORK_SIZE(U, width, nv)
    cdef const uint8_t *mrow
    with nogil, parallel(num_threads=n_threads_):
        scratch = <double *> malloc(wsize * sizeof(double))
        for p in prange(n, schedule="dynamic", chunksize=4):
            if scratch == NULL:
                status[p] = -1
                continue
            w = make_work(scratch, &net, width, nv, gain_tol)
            mrow = &missv[p, 0] if has_miss else NULL
            status[p] = solve_pattern(&net, &Vv[p, 0], mrow, &mu[p, 0], &xi[p, 0], &w, tol_,
                                      gtol, max_sweeps_, &bound[p], &sweeps[p])
        free(scratch)
    if np.any(status_a < 0):
        raise MemoryError(f"could not allocate {wsize * 8} bytes of per-thread scratch space")

    splits = offset_a[1:L]
    mus = [np.ascontiguousarray(a) for a in np.split(mu_a, splits, axis=1)]
    xis = [np.ascontiguousarray(a) for a in np.split(xi_a, splits, axis=1)]
    return GaussianSolution(bound_a, mus, xis, sweeps_a, status_a.astype(bool), tol_)


def fit_epoch(model, V, miss, order, learning_rate, batch_size, tol, inner_tol, max_sweeps,
              state, progress_callback=None):
    """One epoch of gradient ascent on the bound, compiled end to end.

    Patterns are visited in ``order`` (n,) intp, values in [0, n); each batch's patterns are
    solved from the hidden means in ``state`` ((n, n_units) float64, C-contiguous, writable;
    a warm start when it holds the previous epoch's solutions, else reset to 0.5 by the
    caller), their gradients summed at the solutions, and the parameters moved by
    learning_rate / len(batch) times the sum.  ``V`` (n, n_visible) float64 C-contiguous, 0 or
    1 where observed; ``miss`` None or (n, n_visible) uint8/bool.  ``model``'s weights and
    biases are updated in place at the end (not at all if the epoch fails).  Returns the sum
    over patterns of the bound (each at its solution before its batch's update).
    ``progress_callback(k)`` is called (with the GIL) every few hundred patterns with the
    number of batches done since the last call.

    Every argument, and every parameter of the model against its sizes, is checked before
    anything is read; a parameter that leaves the kernel's range during the epoch (a learning
    rate that is too large) raises FloatingPointError and leaves the model unchanged.
    """
    flat = _flatten(model, writable=True)
    sizes_a, offset_a, woff_a = flat[0], flat[1], flat[2]
    cdef Py_ssize_t L = sizes_a.shape[0], U = offset_a[L]
    cdef Py_ssize_t nv = sizes_a[L - 1], width = int(sizes_a.max())
    if not isinstance(V, np.ndarray) or V.ndim != 2:
        raise ValueError(f"V must be a 2-D numpy array, got {type(V).__name__}")
    cdef Py_ssize_t n = V.shape[0]
    V = _array(V, "V", np.float64, (n, nv))
    miss = _mask(miss, "missing", (n, nv))
    _check_binary(V, miss, "V")
    order = _array(order, "order", np.intp, (n,))
    if n and not ((order >= 0) & (order < n)).all():
        raise ValueError(f"order must hold pattern indices in [0, {n})")
    state = _array(state, "state", np.float64, (n, U), writable=True)
    _check_means(state[:, :U - nv], "state (hidden means)")
    lr = learning_rate
    if isinstance(lr, bool) or not isinstance(lr, numbers.Real) or not np.isfinite(lr):
        raise ValueError(f"learning_rate must be a finite number, got {lr!r}")
    cdef double learning_rate_ = float(lr)
    # a batch never holds more than the n patterns
    cdef Py_ssize_t batch = min(_count(batch_size, "batch_size"), max(n, 1))
    cdef double tol_ = _positive(tol, "tol")
    cdef double gtol = _positive(inner_tol, "inner_tol")
    cdef Py_ssize_t max_sweeps_ = _count(max_sweeps, "max_sweeps")
    if progress_callback is not None and not callable(progress_callback):
        raise ValueError(f"progress_callback must be callable or None, got {progress_callback!r}")

    WT_a = np.array(flat[3])
    WT2_a = WT_a * WT_a
    bias_a = np.array(flat[5])
    # recomputed after every update (the weights move)
    need_u_a = np.array(flat[6])
    jmax_a = np.array(flat[7])
    j2max_a = np.array(flat[8])
    c2_a = np.array(flat[9])
    cdef int8_t[::1] need_u = need_u_a
    cdef double[::1] jmax = jmax_a
    cdef double[::1] j2max = j2max_a
    cdef double[::1] c2 = c2_a
    cdef double[::1] WT = WT_a
    cdef double[::1] WT2 = WT2_a
    cdef double[::1] bias = bias_a
    cdef Net net
    fill_net(&net, flat[0], flat[1], flat[2], WT_a, WT2_a, bias_a, need_u_a, jmax_a, j2max_a, c2_a)
    cdef Py_ssize_t nw = WT_a.shape[0]
    cdef double[::1] scratch = np.empty(WORK_SIZE(U, width, nv))
    cdef double[::1] xi = np.empty(U)
    cdef double[::1] delta = np.empty(U)
    cdef double[::1] q = np.empty(U)
    cdef double[::1] gWT = np.zeros(nw)
    cdef double[::1] gb = np.zeros(U)
    cdef Work w = make_work(&scratch[0], &net, width, nv, tol_ / (10.0 * max(U - nv, 1)))
    cdef bint has_miss = miss is not None
    cdef const uint8_t[:, ::1] missv = miss if has_miss else np.zeros((1, 1), dtype=np.uint8)
    cdef const double[:, ::1] Vv = V
    cdef const intp_t[::1] orderv = order
    cdef double[:, ::1] statev = state
    cdef Py_ssize_t start, stop, b, e, p, i, chunk = max(1, 256 // batch)
    cdef double total = 0.0, step, bnd
    cdef intp_t sw
    cdef const uint8_t *mrow
    cdef bint out_of_range = False
    for start in range(0, n, batch * chunk):
        stop = min(n, start + batch * chunk)
        with nogil:
            b = start
            while b < stop and not out_of_range:
                e = min(b + batch, n)
                for i in range(b, e):
                    p = orderv[i]
                    mrow = &missv[p, 0] if has_miss else NULL
                    solve_pattern(&net, &Vv[p, 0], mrow, &statev[p, 0], &xi[0], &w, tol_, gtol,
                                  max_sweeps_, &bnd, &sw)
                    total += bnd
                    accumulate_gradient(&net, &statev[p, 0], &xi[0], &w, &delta[0], &q[0],
                                        &gWT[0], &gb[0])
                step = learning_rate_ / (e - b)
                for i in range(nw):
                    WT[i] += step * gWT[i]
                    WT2[i] = WT[i] * WT[i]
                    gWT[i] = 0.0
                    out_of_range |= not (fabs(WT[i]) <= MF_SBN_PARAM_LIMIT)
                for i in range(U):
                    bias[i] += step * gb[i]
                    gb[i] = 0.0
                    out_of_range |= not (fabs(bias[i]) <= MF_SBN_PARAM_LIMIT)
                update_static(&net, &need_u[0], &jmax[0], &j2max[0], &c2[0])
                b += batch
        if out_of_range:
            break
        if progress_callback is not None:
            progress_callback((stop - start + batch - 1) // batch)
    if out_of_range:
        raise FloatingPointError(
            f"the parameters left the range of the Gaussian method (finite, |value| <= "
            f"{MF_SBN_PARAM_LIMIT:g}) during learning; lower the learning rate")
    # the progress callback may have edited the model: check again before writing it back
    if not np.array_equal(_flatten(model, writable=True)[0], sizes_a):
        raise ValueError("the model's layer sizes changed during the epoch")
    for l in range(L - 1):
        block = WT_a[woff_a[l]:woff_a[l] + sizes_a[l] * sizes_a[l + 1]]
        model.weights[l][...] = block.reshape(sizes_a[l], sizes_a[l + 1]).T
    for l in range(L):
        model.biases[l][...] = bias_a[offset_a[l]:offset_a[l + 1]]
    return total


cdef double exact_bound(const Net *net, const double *mu, const double *xi, const Work *w,
                        Work *w2) noexcept:
    """The bound from statistics recomputed into a separate work area (the solver's cache untouched)."""
    cdef Py_ssize_t i
    for i in range(net.offset[net.n_layers - 1]):
        w2.t[i] = w.t[i]
    recompute_stats(net, mu, xi, w2)
    return pattern_bound(net, mu, xi, w2)


def trace(model, v, missing_row=None, max_sweeps=20, inner_tol=1e-8, gain_tol=0.0):
    """Run the solver on ONE pattern and record the exact bound around every single update.

    For tests: returns a dict of arrays ``kind`` (0 = a mu update, 1 = a xi update), ``unit``
    (flat unit index, layers concatenated top first), ``before`` and ``after`` (the bound
    recomputed from scratch before and after the update), and the final ``mu`` and ``xi``.
    Follows the same sweep order as ``run``; no convergence test (all ``max_sweeps`` sweeps
    run).  ``gain_tol`` > 0 turns on the default mode's shortcuts (skipped negligible updates,
    unevaluated short steps), as ``run`` does with gain_tol = tol / (10 n_hidden).
    """
    flat = _flatten(model)
    sizes_a, offset_a = flat[0], flat[1]
    cdef Net net
    fill_net(&net, flat[0], flat[1], flat[2], flat[3], flat[4], flat[5], flat[6], flat[7], flat[8], flat[9])
    cdef Py_ssize_t U = net.n_units, L = net.n_layers, nv = sizes_a[L - 1]
    cdef Py_ssize_t width = int(sizes_a.max()), vis = L - 1, voff = offset_a[L - 1]
    cdef const double[::1] vv = _array(np.ascontiguousarray(v, dtype=np.float64), "v",
                                       np.float64, (nv,))
    mrow = None if missing_row is None else _array(
        np.ascontiguousarray(missing_row, dtype=np.uint8), "missing_row", np.uint8, (nv,))
    _check_binary(np.asarray(vv)[None], None if mrow is None else mrow[None], "v")
    cdef Py_ssize_t n_sweeps = _count(max_sweeps, "max_sweeps", low=0)
    cdef double gtol = _positive(inner_tol, "inner_tol")
    cdef double gain = 0.0 if gain_tol == 0 else _positive(gain_tol, "gain_tol")
    cdef double[::1] scratch = np.empty(WORK_SIZE(U, width, nv))
    cdef double[::1] scratch2 = np.empty(WORK_SIZE(U, width, nv))
    cdef double[::1] mu = np.full(U, 0.5)
    cdef double[::1] xi = np.full(U, 0.5)
    cdef Work w = make_work(&scratch[0], &net, width, nv, gain)
    cdef Work w2 = make_work(&scratch2[0], &net, width, nv)
    cdef Py_ssize_t i, l, k, sweep
    w.any_missing = 0
    for i in range(nv):
        if mrow is not None and mrow[i]:
            w.obs[i] = 0.0
            w.any_missing = 1
        else:
            w.obs[i] = 1.0
            mu[voff + i] = vv[i]
        w2.obs[i] = w.obs[i]
    init_logits(&net, &mu[0], &w)
    recompute_stats(&net, &mu[0], &xi[0], &w)
    for i in range(net.sizes[0]):
        xi[i] = w.sig[i]
    for l in range(1, L):
        refresh_xi(&net, l, &xi[0], &w, gtol)
    kinds, units, before, after = [], [], [], []

    for sweep in range(n_sweeps):
        if sweep > 0 and sweep % RECOMPUTE_EVERY == 0:     # run's schedule
            recompute_stats(&net, &mu[0], &xi[0], &w)
        if sweep % 2 == 0:
            layers = range(vis - 1 - turnaround_skip(&net, vis - 1, sweep), -1, -1)
        else:
            layers = range(turnaround_skip(&net, 0, sweep), vis)
        for l in layers:
            for k in range(net.sizes[l]):
                b = exact_bound(&net, &mu[0], &xi[0], &w, &w2)
                update_mu(&net, l, k, &mu[0], &xi[0], &w, gtol)
                kinds.append(0)
                units.append(offset_a[l] + k)
                before.append(b)
                after.append(exact_bound(&net, &mu[0], &xi[0], &w, &w2))
            for i in range(offset_a[l + 1], offset_a[l + 1] + net.sizes[l + 1]):
                b = exact_bound(&net, &mu[0], &xi[0], &w, &w2)
                refresh_xi_unit(i, &xi[0], &w, gtol, gain > 0.0)
                kinds.append(1)
                units.append(i)
                before.append(b)
                after.append(exact_bound(&net, &mu[0], &xi[0], &w, &w2))
    return {"kind": np.array(kinds), "unit": np.array(units), "before": np.array(before),
            "after": np.array(after), "mu": np.asarray(mu).copy(), "xi": np.asarray(xi).copy()}


# ----------------------------------------------------------------------------- C-level API
# The contract (layouts, units, status codes) is written in mfengine/solver.pxd.  Nothing from
# the caller is trusted: every size, pointer and value is checked before anything is read
# beyond the sizes themselves, every size computation is checked for overflow, and on an error
# nothing is written.

cdef struct OwnedNet:
    Net net
    void *block


cdef inline bint add_ok(Py_ssize_t a, Py_ssize_t b, Py_ssize_t *out) noexcept nogil:
    """out = a + b for a, b >= 0, unless that overflows."""
    if b > PTRDIFF_MAX - a:
        return False
    out[0] = a + b
    return True


cdef inline bint mul_ok(Py_ssize_t a, Py_ssize_t b, Py_ssize_t *out) noexcept nogil:
    """out = a * b for a, b >= 0, unless that overflows."""
    if a != 0 and b > PTRDIFF_MAX / a:
        return False
    out[0] = a * b
    return True


cdef inline bint in_range(double x) noexcept nogil:
    """Finite, and within the parameter range of the kernel (false for NaN)."""
    return fabs(x) <= MF_SBN_PARAM_LIMIT


cdef int net_size(Py_ssize_t n_layers, const Py_ssize_t *sizes, Py_ssize_t *U, Py_ssize_t *W,
                  Py_ssize_t *width, Py_ssize_t *nbytes) noexcept nogil:
    """Check the layer sizes; the unit and weight counts, the widest layer, and the bytes of
    build_net's block (every product and sum overflow-checked: MF_EOVERFLOW)."""
    cdef Py_ssize_t l, prod, t
    if n_layers < 2 or sizes == NULL:
        return MF_EBADARG
    U[0] = 0
    W[0] = 0
    width[0] = 0
    for l in range(n_layers):
        if sizes[l] < 1:
            return MF_EBADARG
    for l in range(n_layers):
        if not add_ok(U[0], sizes[l], U):
            return MF_EOVERFLOW
        width[0] = sizes[l] if sizes[l] > width[0] else width[0]
        if l + 1 < n_layers:
            if not mul_ok(sizes[l], sizes[l + 1], &prod) or not add_ok(W[0], prod, W):
                return MF_EOVERFLOW
    # (3 L + 1) intp + (2 W + 4 U) doubles + L int8
    if (not mul_ok(3, n_layers, &t) or not add_ok(t, 1, &t)
            or not mul_ok(t, sizeof(intp_t), nbytes)
            or not mul_ok(2, W[0], &t) or not mul_ok(4, U[0], &prod) or not add_ok(t, prod, &t)
            or not mul_ok(t, sizeof(double), &t) or not add_ok(nbytes[0], t, nbytes)
            or not add_ok(nbytes[0], n_layers, nbytes)):
        return MF_EOVERFLOW
    return MF_OK


cdef int build_net(Py_ssize_t n_layers, const Py_ssize_t *sizes, const double *weights,
                   const double *biases, OwnedNet *out) noexcept nogil:
    """Check the arguments and build the solver's net (one malloc'd block) from raw arrays."""
    cdef Py_ssize_t l, i, j, c, U, W, width, nbytes
    cdef char *p
    cdef intp_t *isz
    cdef intp_t *off
    cdef intp_t *woff
    cdef double *WT
    cdef double *WT2
    cdef double *bias
    cdef double *jmax
    cdef double *j2max
    cdef double *c2
    cdef int8_t *need_u
    cdef int status = net_size(n_layers, sizes, &U, &W, &width, &nbytes)
    if status != MF_OK:
        return status
    if weights == NULL or biases == NULL:
        return MF_EBADARG
    for i in range(W):
        if not in_range(weights[i]):
            return MF_EBADARG
    for i in range(U):
        if not in_range(biases[i]):
            return MF_EBADARG
    p = <char *> malloc(nbytes)
    if p == NULL:
        return MF_ENOMEM
    out.block = p
    WT = <double *> p
    WT2 = WT + W
    bias = WT2 + W
    jmax = bias + U
    j2max = jmax + U
    c2 = j2max + U
    isz = <intp_t *> (c2 + U)
    off = isz + n_layers
    woff = off + n_layers + 1
    need_u = <int8_t *> (woff + n_layers)
    off[0] = 0
    woff[0] = 0
    for l in range(n_layers):
        isz[l] = sizes[l]
        off[l + 1] = off[l] + sizes[l]
        if l + 1 < n_layers:
            woff[l + 1] = woff[l] + sizes[l] * sizes[l + 1]
    need_u[0] = 0
    for l in range(n_layers - 1):
        # weights block l is (sizes[l+1], sizes[l]) row-major; WT block l is its transpose
        for c in range(sizes[l + 1]):
            for j in range(sizes[l]):
                WT[woff[l] + j * sizes[l + 1] + c] = weights[woff[l] + c * sizes[l] + j]
    for i in range(W):
        WT2[i] = WT[i] * WT[i]
    for i in range(U):
        bias[i] = biases[i]
        jmax[i] = 0.0
        j2max[i] = 0.0
        c2[i] = 0.0
    out.net.n_layers = n_layers
    out.net.n_units = U
    out.net.sizes = isz
    out.net.offset = off
    out.net.woff = woff
    out.net.WT = WT
    out.net.WT2 = WT2
    out.net.bias = bias
    out.net.need_u = need_u
    out.net.jmax = jmax
    out.net.j2max = j2max
    out.net.c2 = c2
    update_static(&out.net, need_u, jmax, j2max, c2)
    return MF_OK


cdef int check_data(Py_ssize_t n, Py_ssize_t nv, Py_ssize_t U, const double *V,
                    const unsigned char *missing) noexcept nogil:
    """n >= 0 patterns whose sizes n nv and n U fit (MF_EOVERFLOW), V given when n > 0, and
    every observed entry of V 0 or 1."""
    cdef Py_ssize_t i, nnv, nU
    if n < 0:
        return MF_EBADARG
    if not mul_ok(n, nv, &nnv) or not mul_ok(n, U, &nU):
        return MF_EOVERFLOW
    if n > 0 and V == NULL:
        return MF_EBADARG
    for i in range(nnv):
        if (missing == NULL or not missing[i]) and not (V[i] == 0.0 or V[i] == 1.0):
            return MF_EBADARG
    return MF_OK


cdef inline bint is_mean(double x) noexcept nogil:
    return x >= 0.0 and x <= 1.0      # false for NaN


cdef struct InferJob:
    const Net *net
    const double *V
    const unsigned char *missing
    double *mu
    double *xi
    double *bound
    Py_ssize_t *n_sweeps
    signed char *converged
    double tol, gtol, gain_tol
    Py_ssize_t max_sweeps, U, nv, width, stride
    double *scratch             # one block of stride doubles per thread


cdef void infer_body(void *ctx, Py_ssize_t p, int thread) noexcept nogil:
    cdef InferJob *job = <InferJob *> ctx
    cdef Work w = make_work(job.scratch + thread * job.stride, job.net, job.width, job.nv,
                            job.gain_tol)
    cdef intp_t sw = 0
    job.converged[p] = solve_pattern(job.net, job.V + p * job.nv,
                                     job.missing + p * job.nv if job.missing != NULL else NULL,
                                     job.mu + p * job.U, job.xi + p * job.U, &w, job.tol,
                                     job.gtol, job.max_sweeps, job.bound + p, &sw)
    job.n_sweeps[p] = sw


cdef int work_size(Py_ssize_t U, Py_ssize_t width, Py_ssize_t nv, Py_ssize_t extra,
                   Py_ssize_t copies, Py_ssize_t *stride, Py_ssize_t *nbytes) noexcept nogil:
    """stride = WORK_SIZE(U, width, nv) + extra doubles, nbytes = copies * stride * 8, unless
    that overflows."""
    cdef Py_ssize_t a, b
    if (not mul_ok(5, U, &a) or not mul_ok(7, width, &b) or not add_ok(a, b, &a)
            or not add_ok(a, nv, &a) or not add_ok(a, extra, stride)
            or not mul_ok(stride[0], copies, &a) or not mul_ok(a, sizeof(double), nbytes)):
        return MF_EOVERFLOW
    return MF_OK


cdef int mf_sbn_gaussian_infer(
        Py_ssize_t n_layers, const Py_ssize_t *sizes, const double *weights, const double *biases,
        Py_ssize_t n_patterns, const double *V, const unsigned char *missing,
        double tol, double inner_tol, Py_ssize_t max_sweeps, int n_threads,
        double *mu, double *xi, double *bound, Py_ssize_t *n_sweeps,
        signed char *converged) noexcept nogil:
    cdef OwnedNet own
    cdef Py_ssize_t U, W, nv, H, width, nbytes, stride, p, i
    cdef double gtol, gain_tol
    cdef int status = net_size(n_layers, sizes, &U, &W, &width, &nbytes)
    if status != MF_OK:
        return status
    nv = sizes[n_layers - 1]
    H = U - nv
    status = check_data(n_patterns, nv, U, V, missing)
    if status != MF_OK:
        return status
    if not (tol > 0.0 and tol <= DBL_MAX) or not (inner_tol <= DBL_MAX) or max_sweeps < 1:
        return MF_EBADARG
    if n_patterns > 0 and (mu == NULL or xi == NULL or bound == NULL or n_sweeps == NULL
                           or converged == NULL):
        return MF_EBADARG
    for p in range(n_patterns):
        for i in range(H):
            if not is_mean(mu[p * U + i]):
                return MF_EBADARG
    n_threads = mf_clamp_threads(n_threads, n_patterns)
    status = work_size(U, width, nv, 0, n_threads, &stride, &nbytes)
    if status != MF_OK:
        return status
    status = build_net(n_layers, sizes, weights, biases, &own)
    if status != MF_OK:
        return status
    if inner_tol > 0.0:
        gtol = inner_tol
        gain_tol = 0.0
    else:
        # the defaults of mfengine's infer
        gtol = 0.1 * sqrt(tol)
        gtol = 1e-13 if gtol < 1e-13 else (1e-3 if gtol > 1e-3 else gtol)
        gain_tol = tol / (10.0 * (H if H > 1 else 1))
    cdef InferJob job
    job.net = &own.net
    job.V = V
    job.missing = missing
    job.mu = mu
    job.xi = xi
    job.bound = bound
    job.n_sweeps = n_sweeps
    job.converged = converged
    job.tol = tol
    job.gtol = gtol
    job.gain_tol = gain_tol
    job.max_sweeps = max_sweeps
    job.U = U
    job.nv = nv
    job.width = width
    job.stride = stride
    job.scratch = <double *> malloc(nbytes)
    if job.scratch == NULL:
        free(own.block)
        return MF_ENOMEM
    mf_parallel_for(n_patterns, n_threads, infer_body, &job)
    free(job.scratch)
    free(own.block)
    for p in range(n_patterns):
        if not converged[p]:
            return MF_NOT_CONVERGED
    return MF_OK


cdef int mf_sbn_gaussian_gradient(
        Py_ssize_t n_layers, const Py_ssize_t *sizes, const double *weights, const double *biases,
        Py_ssize_t n_patterns, const double *V, const unsigned char *missing,
        const double *mu, const double *xi, double *grad_weights,
        double *grad_biases) noexcept nogil:
    cdef OwnedNet own
    cdef Py_ssize_t U, nv, width, p, i, l, j, c, W, nbytes, stride
    cdef double *scratch
    cdef double *gWT
    cdef double *delta
    cdef double *q
    cdef double *murow
    cdef Work w
    cdef int status = net_size(n_layers, sizes, &U, &W, &width, &nbytes)
    if status != MF_OK:
        return status
    nv = sizes[n_layers - 1]
    status = check_data(n_patterns, nv, U, V, missing)
    if status != MF_OK:
        return status
    if grad_weights == NULL or grad_biases == NULL:
        return MF_EBADARG
    if n_patterns > 0 and (mu == NULL or xi == NULL):
        return MF_EBADARG
    # every mean the gradient reads (hidden, and visible where missing) and every xi in [0, 1]
    for p in range(n_patterns):
        for i in range(U):
            if not is_mean(xi[p * U + i]):
                return MF_EBADARG
            if i < U - nv or (missing != NULL and missing[p * nv + i - (U - nv)]):
                if not is_mean(mu[p * U + i]):
                    return MF_EBADARG
    # W + 3 U doubles beside the work arrays: the transposed gradient, delta, q, one row of mu
    if not mul_ok(3, U, &i) or not add_ok(W, i, &i):
        return MF_EOVERFLOW
    status = work_size(U, width, nv, i, 1, &stride, &nbytes)
    if status != MF_OK:
        return status
    status = build_net(n_layers, sizes, weights, biases, &own)
    if status != MF_OK:
        return status
    scratch = <double *> malloc(nbytes)
    if scratch == NULL:
        free(own.block)
        return MF_ENOMEM
    gWT = scratch + WORK_SIZE(U, width, nv)
    delta = gWT + W
    q = delta + U
    murow = q + U
    for i in range(W):
        gWT[i] = 0.0
    for i in range(U):
        grad_biases[i] = 0.0
    w = make_work(scratch, &own.net, width, nv, 0.0)
    for p in range(n_patterns):
        for i in range(U):
            murow[i] = mu[p * U + i]
        for i in range(nv):
            w.obs[i] = 0.0 if (missing != NULL and missing[p * nv + i]) else 1.0
            if w.obs[i] != 0.0:
                murow[U - nv + i] = V[p * nv + i]
        recompute_stats(&own.net, murow, xi + p * U, &w)
        accumulate_gradient(&own.net, murow, xi + p * U, &w, delta, q, gWT, grad_biases)
    for l in range(n_layers - 1):
        for c in range(sizes[l + 1]):
            for j in range(sizes[l]):
                grad_weights[own.net.woff[l] + c * sizes[l] + j] = gWT[own.net.woff[l] + j * sizes[l + 1] + c]
    free(scratch)
    free(own.block)
    return MF_OK


# Exported C symbols for C callers (csrc/mfengine_solver.h); the same functions as above.
cdef public int mfengine_sbn_gaussian_infer(
        Py_ssize_t n_layers, const Py_ssize_t *sizes, const double *weights, const double *biases,
        Py_ssize_t n_patterns, const double *V, const unsigned char *missing,
        double tol, double inner_tol, Py_ssize_t max_sweeps, int n_threads,
        double *mu, double *xi, double *bound, Py_ssize_t *n_sweeps,
        signed char *converged) noexcept nogil:
    return mf_sbn_gaussian_infer(n_layers, sizes, weights, biases, n_patterns, V, missing, tol,
                                 inner_tol, max_sweeps, n_threads, mu, xi, bound, n_sweeps,
                                 converged)


cdef public int mfengine_sbn_gaussian_gradient(
        Py_ssize_t n_layers, const Py_ssize_t *sizes, const double *weights, const double *biases,
        Py_ssize_t n_patterns, const double *V, const unsigned char *missing,
        const double *mu, const double *xi, double *grad_weights,
        double *grad_biases) noexcept nogil:
    return mf_sbn_gaussian_gradient(n_layers, sizes, weights, biases, n_patterns, V, missing, mu,
                                    xi, grad_weights, grad_biases)
