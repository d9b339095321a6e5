"""Kernel: Gaussian-approximated mean field for layered sigmoid belief nets (Saul & Jordan).

Called only from ``mfengine.inference.infer``; the wrapper validates every input.

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
import numpy as np

from cython.parallel cimport prange, parallel
from libc.math cimport fabs, log
from libc.stdlib cimport malloc, free
from mfengine._typedefs cimport float64_t, intp_t, uint8_t, int8_t

cdef extern from "mf_numerics.h" nogil:
    double mf_log1pexp(double x)
    double mf_sigmoid(double x)
    double mf_entropy(double p)

cdef extern from "mf_sbn.h" nogil:
    void mf_sbn_children_eval(Py_ssize_t n, const double *J, const double *J2,
                              const double *m, const double *s, const double *xi,
                              const double *muc, const double *obs,
                              double dmu, double dvar, double tk, int want_f,
                              double *sig_out, double *out)
    void mf_sbn_children_cached(Py_ssize_t n, const double *J, const double *J2,
                                const double *xi, const double *sig, const double *muc,
                                const double *obs, double tk, double *out)

# Means are kept at sigmoid(t) with |t| <= T_MAX (mu >= 4e-18 away from 0 and 1).
DEF T_MAX = 40.0
DEF T_TOL = 1e-11      # bracket width (in t) at which a mu search stops
DEF MAX_IT = 100       # evaluations per 1-D solve, a safety net (typically 0 to 4)
DEF CONCAVE_LIMIT = 4.0

cdef struct Net:
    Py_ssize_t n_layers
    Py_ssize_t n_units
    const intp_t *sizes
    const intp_t *offset      # first unit of layer l
    const intp_t *woff        # first weight of block l (layer l -> layer l+1)
    const double *WT          # block l: (sizes[l], sizes[l+1]), row j = unit j's outgoing weights
    const double *WT2         # squares of WT
    const double *bias

cdef struct Work:
    double *m
    double *s
    double *sig
    double *buf0
    double *buf1
    double *ones
    double *obs


cdef inline double sigmoid_t(double t) noexcept nogil:
    return mf_sigmoid(t)


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
    for i in range(net.n_units):
        w.sig[i] = mf_sigmoid(m[i] + (0.5 - xi[i]) * s[i])


cdef double pattern_bound(const Net *net, const double *mu, const double *xi, const Work *w) noexcept nogil:
    """L(mu, xi) from the cached m and s (Saul & Jordan eq. 24; missing visible terms left out)."""
    cdef Py_ssize_t i, vis_off = net.offset[net.n_layers - 1]
    cdef double total = 0.0
    for i in range(net.n_units):
        if i >= vis_off:
            if w.obs[i - vis_off] == 0.0:
                continue
        else:
            total += mf_entropy(mu[i])
        total += (mu[i] * w.m[i] - 0.5 * xi[i] * xi[i] * w.s[i]
                  - mf_log1pexp(w.m[i] + (0.5 - xi[i]) * w.s[i]))
    return total


cdef void refresh_xi(const Net *net, Py_ssize_t l, double *xi, Work *w, double gtol) noexcept nogil:
    """Solve xi = sigmoid(m + (1/2 - xi) s) for every unit of layer l (safeguarded Newton).

    The residual r(xi) = xi - sigmoid(m + (1/2 - xi) s) is strictly increasing on [0, 1] with
    r(0) < 0 < r(1); its root minimises the convex term 1/2 xi^2 s + log(1 + e^{m + (1/2 - xi) s}),
    so moving xi to it raises the bound.
    """
    cdef Py_ssize_t i, it, off = net.offset[l]
    cdef double x, r, sg, lo, hi, xn, m, s
    for i in range(off, off + net.sizes[l]):
        m = w.m[i]
        s = w.s[i]
        x = xi[i]
        sg = w.sig[i]
        if s <= 0.0:
            xi[i] = sg          # no input variance: sig does not depend on xi
            continue
        r = x - sg
        if fabs(r) <= gtol:
            continue
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
            sg = mf_sigmoid(m + (0.5 - x) * s)
            r = x - sg
            if fabs(r) <= gtol or hi - lo <= 1e-15:
                break
        xi[i] = x
        w.sig[i] = sg


cdef void solve_mu(Py_ssize_t k, const double *J, const double *J2, Py_ssize_t nc,
                   double *mu, double *mc, double *sc, const double *xic, double *sigc,
                   const double *muc, const double *obs, Work *w, double gtol) noexcept nogil:
    """Maximise the bound over mu_k in [0, 1], all else fixed; update the children's cache.

    The objective (k's entropy, mu_k m_k and its children's terms) is searched in t = logit(mu).
    g(t) = dL/dmu (same sign as dL/dt) is bracketed: the search interval always holds a local
    maximum whose value is at least the best value seen.  Trial points are Newton steps from
    the best point, or bisections when a step leaves the interval.  When the curvature bound
    says the objective is strictly concave in mu, g is decreasing and the sign of g alone
    moves the bracket; otherwise a trial is accepted only if it does not lower the objective.
    """
    cdef double out[3]
    cdef double mu0 = mu[k], v0 = mu0 * (1.0 - mu0), mk
    cdef double t0, g, gp, f0 = 0.0, tb, gb, gpb, fb, mub, lo, hi, x, mux, vx, gx, gpx, fx = 0.0
    cdef int concave, accept, moved = 0, it, cur = 0
    cdef double *bufs[2]
    cdef double *best = NULL
    cdef Py_ssize_t c
    bufs[0] = w.buf0
    bufs[1] = w.buf1
    mk = w.m[k]
    if mu0 <= 0.0:
        t0 = -T_MAX
    elif mu0 >= 1.0:
        t0 = T_MAX
    else:
        t0 = log(mu0) - log(1.0 - mu0)
        t0 = -T_MAX if t0 < -T_MAX else (T_MAX if t0 > T_MAX else t0)
    mf_sbn_children_cached(nc, J, J2, xic, sigc, muc, obs, 1.0 - 2.0 * mu0, out)
    concave = out[2] < CONCAVE_LIMIT
    g = -t0 + mk + out[0]
    gp = -1.0 + out[1] * v0
    if fabs(g) <= gtol:
        return
    if not concave:
        mf_sbn_children_eval(nc, J, J2, mc, sc, xic, muc, obs, 0.0, 0.0, 1.0 - 2.0 * mu0, 1,
                             bufs[cur], out)
        f0 = mf_entropy(mu0) + mu0 * mk + out[2]
    tb = t0
    gb = g
    gpb = gp
    fb = f0
    mub = mu0
    if gb > 0.0:
        lo = t0
        hi = T_MAX
    else:
        lo = -T_MAX
        hi = t0
    for it in range(MAX_IT):
        if hi - lo <= T_TOL:
            break
        x = lo - 1.0
        if gpb < 0.0:
            x = tb - gb / gpb
        if not (x > lo and x < hi):
            x = 0.5 * (lo + hi)
        mux = mf_sigmoid(x)
        vx = mux * (1.0 - mux)
        mf_sbn_children_eval(nc, J, J2, mc, sc, xic, muc, obs, mux - mu0, vx - v0,
                             1.0 - 2.0 * mux, not concave, bufs[cur], out)
        gx = -x + mk + out[0]
        gpx = -1.0 + out[1] * vx
        accept = concave
        if not concave:
            fx = mf_entropy(mux) + mux * mk + out[2]
            accept = fx >= fb
        if accept:
            if gx > 0.0:
                lo = x
            else:
                hi = x
            tb = x
            gb = gx
            gpb = gpx
            fb = fx
            mub = mux
            best = bufs[cur]
            cur = 1 - cur
            moved = 1
            if fabs(gb) <= gtol:
                break
        else:
            if x > tb:
                hi = x
            else:
                lo = x
    if moved:
        mu[k] = mub
        for c in range(nc):
            mc[c] += J[c] * (mub - mu0)
            sc[c] += J2[c] * (mub * (1.0 - mub) - v0)
            sigc[c] = best[c]


cdef void sweep_layer(const Net *net, Py_ssize_t l, double *mu, double *xi, Work *w,
                      double gtol) noexcept nogil:
    """Update every mu of hidden layer l, then re-solve the xi of layer l + 1."""
    cdef Py_ssize_t k, nc = net.sizes[l + 1], coff = net.offset[l + 1]
    cdef const double *obs = w.obs if l + 1 == net.n_layers - 1 else w.ones
    for k in range(net.sizes[l]):
        solve_mu(net.offset[l] + k,
                 net.WT + net.woff[l] + k * nc, net.WT2 + net.woff[l] + k * nc, nc,
                 mu, w.m + coff, w.s + coff, xi + coff, w.sig + coff, mu + coff, obs, w, gtol)
    refresh_xi(net, l + 1, xi, w, gtol)


cdef int8_t solve_pattern(const Net *net, const double *v, const uint8_t *miss,
                          double *mu, double *xi, Work *w, double tol, double gtol,
                          Py_ssize_t max_sweeps, double *bound_out,
                          intp_t *sweeps_out) noexcept nogil:
    cdef Py_ssize_t vis = net.n_layers - 1, voff = net.offset[vis], nv = net.sizes[vis]
    cdef Py_ssize_t i, l, sweep
    cdef double Lold, Lnew
    cdef int8_t converged = 0
    for i in range(nv):
        if miss != NULL and miss[i]:
            w.obs[i] = 0.0
            mu[voff + i] = 0.5
        else:
            w.obs[i] = 1.0
            mu[voff + i] = v[i]
    for i in range(net.offset[1], net.n_units):
        xi[i] = 0.5
    recompute_stats(net, mu, xi, w)
    for i in range(net.sizes[0]):
        xi[i] = w.sig[i]
    for l in range(1, net.n_layers):
        refresh_xi(net, l, xi, w, gtol)
    Lold = pattern_bound(net, mu, xi, w)
    sweeps_out[0] = max_sweeps
    for sweep in range(max_sweeps):
        if sweep > 0:
            recompute_stats(net, mu, xi, w)
        if sweep % 2 == 0:
            for l in range(vis - 1, -1, -1):
                sweep_layer(net, l, mu, xi, w, gtol)
        else:
            for l in range(vis):
                sweep_layer(net, l, mu, xi, w, gtol)
        Lnew = pattern_bound(net, mu, xi, w)
        if fabs(Lnew - Lold) < tol:
            converged = 1
            sweeps_out[0] = sweep + 1
            Lold = Lnew
            break
        Lold = Lnew
    # report the bound from freshly computed statistics (no incremental round-off)
    recompute_stats(net, mu, xi, w)
    bound_out[0] = pattern_bound(net, mu, xi, w)
    for i in range(nv):
        if w.obs[i] == 0.0:
            mu[voff + i] = xi[voff + i]
    return converged


cdef Work make_work(double *scratch, Py_ssize_t U, Py_ssize_t width, Py_ssize_t nv) noexcept nogil:
    """Carve one thread's scratch block into the per-pattern work arrays."""
    cdef Work w
    cdef Py_ssize_t i
    w.m = scratch
    w.s = scratch + U
    w.sig = scratch + 2 * U
    w.buf0 = scratch + 3 * U
    w.buf1 = scratch + 3 * U + width
    w.ones = scratch + 3 * U + 2 * width
    w.obs = scratch + 3 * U + 3 * width
    for i in range(width):
        w.ones[i] = 1.0
    return w


def _flatten(model):
    sizes = np.asarray(model.sizes, dtype=np.intp)
    offset = np.zeros(len(sizes) + 1, dtype=np.intp)
    offset[1:] = np.cumsum(sizes)
    woff = np.zeros(len(sizes), dtype=np.intp)
    WT = np.ascontiguousarray(np.concatenate([w.T.ravel() for w in model.weights]))
    woff[1:] = np.cumsum([w.size for w in model.weights])
    bias = np.ascontiguousarray(np.concatenate(model.biases))
    return sizes, offset, woff, WT, WT * WT, bias


def run(model, const double[:, ::1] V, miss, init_mu, double tol, double gtol,
        Py_ssize_t max_sweeps, int n_threads):
    """Solve every pattern of V; returns an InferenceResult (see mfengine.inference)."""
    from mfengine.inference import InferenceResult

    sizes_a, offset_a, woff_a, WT_a, WT2_a, bias_a = _flatten(model)
    cdef const intp_t[::1] sizes = sizes_a
    cdef const intp_t[::1] offset = offset_a
    cdef const intp_t[::1] woff = woff_a
    cdef const double[::1] WT = WT_a
    cdef const double[::1] WT2 = WT2_a
    cdef const double[::1] bias = bias_a
    cdef Py_ssize_t n = V.shape[0], U = int(offset_a[-1]), L = sizes_a.shape[0]
    cdef Py_ssize_t H = U - sizes_a[L - 1], nv = sizes_a[L - 1]
    cdef Py_ssize_t width = int(sizes_a.max())

    mu_a = np.empty((n, U), dtype=np.float64)
    if init_mu is None:
        mu_a[:, :H] = 0.5
    else:
        init = np.asarray(init_mu, dtype=np.float64)
        if init.shape != (n, H):
            raise ValueError(f"init_mu must have shape {(n, H)} (hidden layers concatenated), got {init.shape}")
        if not np.all((init >= 0.0) & (init <= 1.0)):
            raise ValueError("init_mu must lie in [0, 1] (and contain no NaN)")
        lim = 1.0 / (1.0 + np.exp(40.0))
        mu_a[:, :H] = np.clip(init, lim, 1.0 - lim)
    xi_a = np.empty((n, U), dtype=np.float64)
    bound_a = np.empty(n, dtype=np.float64)
    sweeps_a = np.zeros(n, dtype=np.intp)
    status_a = np.zeros(n, dtype=np.int8)
    cdef double[:, ::1] mu = mu_a
    cdef double[:, ::1] xi = xi_a
    cdef double[::1] bound = bound_a
    cdef intp_t[::1] sweeps = sweeps_a
    cdef int8_t[::1] status = status_a
    cdef const uint8_t[:, ::1] missv
    cdef bint has_miss = miss is not None
    if has_miss:
        missv = miss
    else:
        missv = np.zeros((1, 1), dtype=np.uint8)

    cdef Net net
    net.n_layers = L
    net.n_units = U
    net.sizes = &sizes[0]
    net.offset = &offset[0]
    net.woff = &woff[0]
    net.WT = &WT[0]
    net.WT2 = &WT2[0]
    net.bias = &bias[0]

    cdef Py_ssize_t p
    cdef double *scratch
    cdef Work w
    cdef Py_ssize_t wsize = 3 * U + 3 * width + nv
    cdef const uint8_t *mrow
    with nogil, parallel(num_threads=n_threads):
        scratch = <double *> malloc(wsize * sizeof(double))
        for p in prange(n, schedule="dynamic", chunksize=4):
            if scratch == NULL:
                status[p] = -1
                continue
            w = make_work(scratch, U, width, nv)
            mrow = &missv[p, 0] if has_miss else NULL
            status[p] = solve_pattern(&net, &V[p, 0], mrow, &mu[p, 0], &xi[p, 0], &w, tol, gtol,
                                      max_sweeps, &bound[p], &sweeps[p])
        free(scratch)
    if np.any(status_a < 0):
        raise MemoryError("could not allocate per-thread scratch space for mfengine.infer")

    splits = offset_a[1:-1]
    mus = [np.ascontiguousarray(a) for a in np.split(mu_a, splits, axis=1)]
    xis = [np.ascontiguousarray(a) for a in np.split(xi_a, splits, axis=1)]
    return InferenceResult(bound=bound_a, mu=mus, xi=xis, n_sweeps=sweeps_a,
                           converged=status_a.astype(bool), method="gaussian", tol=tol)
