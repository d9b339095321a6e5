# Inference from Python (part of _gaussian.pyx): ``run`` solves every pattern of a data set in
# parallel; ``trace`` records the bound around every single update of one pattern, for tests.

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


def run(weights, biases, V, miss, init_mu, tol, inner_tol, max_sweeps, n_threads,
        gain_rule=True):
    """Solve every pattern of V under the layered net (``weights``, ``biases``: one array per
    pair of layers and per layer, top first); returns a GaussianSolution.

    V (n, n_visible) float64 C-contiguous, 0 or 1 where observed; miss None or (n, n_visible)
    uint8/bool (nonzero = missing); init_mu None or (n, n_hidden) in [0, 1] (hidden layers
    concatenated; default 0.5); tol > 0 (per-pattern stopping rule on the bound), inner_tol > 0
    (tolerance of each 1-D solve); max_sweeps >= 1; n_threads an integer (clamped to
    [1, min(n, MF_MAX_THREADS)]).
    gain_rule: also skip a mu update whose predicted gain is below tol / (10 n_hidden) (so that
    the skipped updates cost at most tol / 10 per sweep); off, only |dL/dmu| <= inner_tol stops.
    """
    flat = _flatten(weights, biases)
    sizes_a, offset_a = flat[0], flat[1]
    cdef Py_ssize_t L = sizes_a.shape[0], U = offset_a[L]
    cdef Py_ssize_t nv = sizes_a[L - 1], H = U - nv
    cdef Py_ssize_t width = int(sizes_a.max())
    V, miss = _check_data(V, miss, nv)
    cdef Py_ssize_t n = V.shape[0]
    cdef double tol_ = _positive(tol, "tol")
    cdef double gtol = _positive(inner_tol, "inner_tol")
    cdef Py_ssize_t max_sweeps_ = _count(max_sweeps, "max_sweeps")
    if isinstance(n_threads, bool) or not isinstance(n_threads, numbers.Integral):
        raise ValueError(f"n_threads must be an integer, got {n_threads!r}")
    cdef int n_threads_ = max(1, min(n_threads, n, MF_MAX_THREADS))
    # updates gaining less than this are skipped: at most tol / 10 per sweep in all
    cdef double gain_tol = tol_ / (10.0 * max(H, 1)) if gain_rule else 0.0
    cdef Net net
    fill_net(&net, flat)

    mu_a = np.empty((n, U), dtype=np.float64)
    if init_mu is None:
        mu_a[:, :H] = 0.5
    else:
        try:
            init = np.asarray(init_mu, dtype=np.float64)
        except (TypeError, ValueError):
            raise ValueError(f"init_mu must be an array of means, got {type(init_mu).__name__}") from None
        if init.shape != (n, H):
            raise ValueError(f"init_mu must have shape {(n, H)} (hidden layers concatenated), got {init.shape}")
        _check_means(init, "init_mu")
        lim = 1.0 / (1.0 + np.exp(T_MAX))
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
    cdef double *scratch = NULL       # (one block per thread, allocated in the parallel block)
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


cdef double exact_bound(const Net *net, const double *mu, const double *xi, const Work *w,
                        Work *w2) noexcept:
    """The bound from statistics recomputed into a separate work area (the solver's cache untouched)."""
    cdef Py_ssize_t i
    for i in range(net.offset[net.n_layers - 1]):
        w2.t[i] = w.t[i]
    recompute_stats(net, mu, xi, w2)
    return pattern_bound(net, mu, xi, w2)


def trace(weights, biases, v, missing_row=None, max_sweeps=20, inner_tol=1e-8, gain_tol=0.0):
    """Run the solver on ONE pattern and record the exact bound around every single update.

    For tests: returns a dict of arrays ``kind`` (0 = a mu update, 1 = a xi update), ``unit``
    (flat unit index, layers concatenated top first), ``before`` and ``after`` (the bound
    recomputed from scratch before and after the update), and the final ``mu`` and ``xi``.
    Follows the same sweep order as ``run``; no convergence test (all ``max_sweeps`` sweeps
    run).  ``gain_tol`` > 0 turns on the default mode's shortcuts (skipped negligible updates,
    unevaluated short steps), as ``run`` does with gain_tol = tol / (10 n_hidden).
    """
    flat = _flatten(weights, biases)
    sizes_a, offset_a = flat[0], flat[1]
    cdef Net net
    fill_net(&net, flat)
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
