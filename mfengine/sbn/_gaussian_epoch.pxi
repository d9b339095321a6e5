# Learning (part of _gaussian.pyx): the gradient of one pattern's bound at its solution, and
# one compiled epoch of gradient ascent (solve, gradient, update, batch after batch).

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


def fit_epoch(weights, biases, V, miss, order, learning_rate, batch_size, tol, inner_tol,
              max_sweeps, state, progress_callback=None):
    """One epoch of gradient ascent on the bound, compiled end to end.

    Patterns are visited in ``order`` (n,) intp, values in [0, n); each batch's patterns are
    solved from the hidden means in ``state`` ((n, n_units) float64, C-contiguous, writable;
    a warm start when it holds the previous epoch's solutions, else reset to 0.5 by the
    caller), their gradients summed at the solutions, and the parameters moved by
    learning_rate / len(batch) times the sum.  ``V`` (n, n_visible) float64 C-contiguous, 0 or
    1 where observed; ``miss`` None or (n, n_visible) uint8/bool.  The arrays of ``weights``
    and ``biases`` (one per pair of layers and per layer, top first) are updated in place at
    the end (not at all if the epoch fails).  Returns the sum
    over patterns of the bound (each at its solution before its batch's update).
    ``progress_callback(k)`` is called (with the GIL) every few hundred patterns with the
    number of batches done since the last call.

    Every argument, and every parameter against the layer sizes, is checked before
    anything is read; a parameter that leaves the kernel's range during the epoch (a learning
    rate that is too large) raises FloatingPointError and leaves the parameters unchanged.
    """
    flat = _flatten(weights, biases, writable=True)
    sizes_a, offset_a, woff_a = flat[0], flat[1], flat[2]
    cdef Py_ssize_t L = sizes_a.shape[0], U = offset_a[L]
    cdef Py_ssize_t nv = sizes_a[L - 1], width = int(sizes_a.max())
    V, miss = _check_data(V, miss, nv)
    cdef Py_ssize_t n = V.shape[0]
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

    # the epoch updates _flatten's arrays (its own copies) in place; the static bounds are
    # recomputed after every update (the weights move)
    WT_a, bias_a = flat[3], flat[5]
    cdef double[::1] WT = WT_a
    cdef double[::1] WT2 = flat[4]
    cdef double[::1] bias = bias_a
    cdef int8_t[::1] need_u = flat[6]
    cdef double[::1] jmax = flat[7]
    cdef double[::1] j2max = flat[8]
    cdef double[::1] c2 = flat[9]
    cdef Net net
    fill_net(&net, flat)
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
    # the progress callback may have replaced an array of the lists: check them again before
    # writing into them
    if not np.array_equal(_flatten(weights, biases, writable=True)[0], sizes_a):
        raise ValueError("the layer sizes changed during the epoch")
    for l in range(L - 1):
        block = WT_a[woff_a[l]:woff_a[l] + sizes_a[l] * sizes_a[l + 1]]
        weights[l][...] = block.reshape(sizes_a[l], sizes_a[l + 1]).T
    for l in range(L):
        biases[l][...] = bias_a[offset_a[l]:offset_a[l + 1]]
    return total
