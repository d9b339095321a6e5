# The solver of one pattern (part of _gaussian.pyx): initialisation, the sweep schedule
# (passes alternate bottom-up and top-down), and the stopping rule on the bound.

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
    """Solve one pattern v (miss: NULL or nonzero at missing entries).

    mu (n_units,): the starting hidden means on entry; on exit the hidden means, the visible
    data, and xi at a missing visible entry.  xi (n_units,): out.  Returns 1 when the bound
    changed by less than tol in a sweep within max_sweeps, else 0; the bound (recomputed from
    scratch) in bound_out, the sweeps made in sweeps_out.
    """
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
    # holds exactly for binary data and every mu in [0, 1] and xi (Saul & Jordan's bound on
    # <ln(1 + e^z)> makes each visible unit's terms at most <ln sigmoid(+-z)>, and each hidden
    # unit's at most <max_mu [H(mu) + mu z] - ln(1 + e^z)> = 0), so a positive value is the
    # round-off of adding up large terms that cancel (its size grows with the parameters: the
    # spacing of doubles near 1e17 is 16); 0 is then the closer answer.
    recompute_stats(net, mu, xi, w)
    bound_out[0] = pattern_bound(net, mu, xi, w)
    if bound_out[0] > 0.0:
        bound_out[0] = 0.0
    for i in range(nv):
        if w.obs[i] == 0.0:
            mu[voff + i] = xi[voff + i]
    return converged
