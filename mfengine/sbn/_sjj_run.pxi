# The Python entry points (part of _sjj.pyx).
#
# solve and evaluate, called by mfengine.sbn.sjj with validated, C-ordered arrays: each checks
# the structure, the sizes and the indices again (MF_EBADARG, nothing written), then runs
# without the GIL; evaluate sums the bound at given means and variational parameters, per
# item, on OpenMP threads.

def solve(const intp_t[::1] par_ptr, const intp_t[::1] par_idx, const intp_t[::1] ch_ptr,
          const intp_t[::1] ch_idx, const intp_t[::1] ch_w, const double[:, ::1] w,
          const double[:, ::1] h, const intp_t[::1] net_of, const double[:, ::1] clamp,
          double[:, ::1] mu, double[:, ::1] xi, double[::1] bound, intp_t[::1] n_sweeps,
          uint8_t[::1] converged, int8_t[::1] status, double[:, ::1] history, double tol,
          double gtol, Py_ssize_t max_sweeps, int n_threads, bint noisy_or=False,
          bint fast=True, bint fill_mu=False, bint fill_xi=False):
    """Solve every item in place (see the module docstring).  ``history`` is (n_items,
    max_sweeps + 1) to record the bound after each sweep, or (0, 0) for none.  With
    ``noisy_or``, ``xi`` is (n_items, nnz): the q of every edge, in parent order.  ``fast``
    False keeps every sigmoid item on the careful path (for tests that compare the two).
    ``fill_mu`` / ``fill_xi``: ``mu`` / ``xi`` are uninitialised (np.empty); the kernel
    writes the default start (means 0.5; xi 0.5, noisy-OR q uniform) into each item's rows
    inside the parallel loop, so that the threads take the first-touch page faults, and
    their whole pages are marked for ordinary rather than huge pages first (``mf_small_pages``
    in ``csrc/mf_parallel.h``; advice to the system, nothing else changes).

    Returns MF_OK, or MF_EBADARG (nothing written) when a size or an index is inconsistent;
    ``status[p]`` is MF_ENOMEM for an item whose thread could not allocate its scratch space.
    """
    cdef Dag g
    if check_dag(par_ptr, par_idx, ch_ptr, ch_idx, ch_w, &g) != MF_OK:
        return MF_EBADARG
    if check_items(&g, w, h, net_of, clamp) != MF_OK:
        return MF_EBADARG
    cdef Py_ssize_t n_items = clamp.shape[0], p, n = g.n, nnz = par_idx.shape[0]
    cdef Py_ssize_t n_xi = nnz if noisy_or else n
    if (mu.shape[0] != n_items or mu.shape[1] != n or xi.shape[0] != n_items
            or xi.shape[1] != n_xi or bound.shape[0] != n_items or n_sweeps.shape[0] != n_items
            or converged.shape[0] != n_items or status.shape[0] != n_items
            or max_sweeps < 0 or n_threads < 1 or not (tol >= 0.0) or not (gtol >= 0.0)):
        return MF_EBADARG
    cdef bint record = history.shape[0] > 0
    if record and (history.shape[0] != n_items or history.shape[1] != max_sweeps + 1):
        return MF_EBADARG
    cdef intp_t *pos = NULL
    cdef Py_ssize_t maxin = 0, maxout = 0
    cdef int rc
    with nogil:
        # mu / xi to fill are the caller's np.empty arrays, not touched yet: ordinary pages
        # (NumPy asks for huge pages from 4 MB; faulting in the 64 MB q of 200 diagnosis
        # cases as huge pages took 1.5-2.1 ms of CPU per case instead of 1.1, and held two
        # threads to 1.6-1.9x one).  The C entry point leaves its caller's memory alone.
        if fill_mu:
            mf_small_pages(&mu[0, 0] if n_items and n else NULL,
                           <size_t> n_items * <size_t> n * sizeof(double))
        if fill_xi:
            mf_small_pages(&xi[0, 0] if n_items and n_xi else NULL,
                           <size_t> n_items * <size_t> n_xi * sizeof(double))
        rc = prepare_sig(&g, noisy_or, &pos, &maxin, &maxout)
        if rc == MF_OK:
            rc = run_items(&g, pos, maxin, maxout, &w[0, 0] if w.shape[0] and nnz else NULL,
                           &h[0, 0] if h.shape[0] and n else NULL, n_items,
                           &net_of[0] if n_items else NULL, &clamp[0, 0] if n_items and n else NULL,
                           &mu[0, 0] if n_items and n else NULL,
                           &xi[0, 0] if n_items and n_xi else NULL,
                           &history[0, 0] if record else NULL, &bound[0] if n_items else NULL,
                           &n_sweeps[0] if n_items else NULL,
                           &converged[0] if n_items else NULL, tol, gtol, max_sweeps,
                           n_threads, noisy_or, fast, fill_mu, fill_xi)
        free(pos)
    if rc == MF_ENOMEM or rc == MF_EOVERFLOW:     # scratch that cannot be had
        for p in range(n_items):
            status[p] = MF_ENOMEM
        return MF_OK
    if rc == MF_OK:
        for p in range(n_items):
            status[p] = MF_OK
    return rc


def evaluate(const intp_t[::1] par_ptr, const intp_t[::1] par_idx, const intp_t[::1] ch_ptr,
             const intp_t[::1] ch_idx, const intp_t[::1] ch_w, const double[:, ::1] w,
             const double[:, ::1] h, const intp_t[::1] net_of, const double[:, ::1] clamp,
             const double[:, ::1] mu, const double[:, ::1] xi, double[::1] bound,
             int8_t[::1] status, bint noisy_or=False, int n_threads=1):
    """The bound at given mu (free units' values in [0, 1]), xi (noisy-OR: q per edge) into
    ``bound``, free units' entropies included; clamped units are read from ``clamp``.  Free
    units with no clamped descendant (barren) are left out, as the solve sums them out.
    Returns MF_OK or MF_EBADARG (nothing written)."""
    cdef Dag g
    if check_dag(par_ptr, par_idx, ch_ptr, ch_idx, ch_w, &g) != MF_OK:
        return MF_EBADARG
    if check_items(&g, w, h, net_of, clamp) != MF_OK:
        return MF_EBADARG
    cdef Py_ssize_t n = g.n, p, i, n_items = clamp.shape[0], nnz = par_idx.shape[0]
    if (mu.shape[0] != n_items or mu.shape[1] != n or xi.shape[0] != n_items
            or xi.shape[1] != (nnz if noisy_or else n) or bound.shape[0] != n_items
            or status.shape[0] != n_items or n_threads < 1):
        return MF_EBADARG
    cdef size_t nbytes = (4 * <size_t> n + 3 * <size_t> nnz) * sizeof(double) + 3 * <size_t> n + 16
    cdef double *work = NULL
    cdef double *m
    cdef double *nu
    cdef double *Z
    cdef double *dd
    cdef uint8_t *none_
    cdef uint8_t *free_
    cdef uint8_t *barren
    cdef double dummy_w = 0.0, x, total
    with nogil, parallel(num_threads=n_threads):
        work = <double *> malloc(nbytes)
        for p in prange(n_items, schedule="static"):
            if work == NULL:
                status[p] = MF_ENOMEM
                continue
            status[p] = MF_OK
            m = work
            nu = work + n
            Z = work + 2 * n
            dd = work + 3 * n
            none_ = <uint8_t *> (work + 3 * n + 3 * nnz)
            free_ = none_ + n
            barren = free_ + n
            for i in range(n):
                none_[i] = 0       # entropies are added here, from mu (0 ln 0 = 0)
            # the units the solve sums out: no term at all
            barren_of_clamp(&g, &clamp[p, 0], free_, barren)
            total = 0.0
            for i in range(n):
                x = clamp[p, i]
                if not (x == x):
                    x = mu[p, i]
                    if not barren[i]:
                        total = total + entropy(x, 1.0 - x)
                m[i] = x
                nu[i] = 1.0 - x
            if noisy_or:
                total = total + nor_bound_skip(&g, &w[net_of[p], 0] if nnz else &dummy_w,
                                               &h[net_of[p], 0], m, nu,
                                               &xi[p, 0] if nnz else &dummy_w, none_, barren,
                                               Z)
            else:
                total = total + bound_at(&g, &w[net_of[p], 0] if nnz else &dummy_w,
                                         &h[net_of[p], 0], m, nu, &xi[p, 0] if n else &dummy_w,
                                         none_, dd, dd + nnz, dd + 2 * nnz, barren)
            bound[p] = total
        free(work)
    return MF_OK


def evaluate_half(const intp_t[::1] par_ptr, const intp_t[::1] par_idx, const intp_t[::1] ch_ptr,
                  const intp_t[::1] ch_idx, const intp_t[::1] ch_w, const double[:, ::1] w,
                  const double[:, ::1] h, const double[:, ::1] ehalf, const double[:, ::1] emhalf,
                  const double[:, ::1] hhalf, const double[:, ::1] hmhalf,
                  const intp_t[::1] net_of, const double[:, ::1] clamp, const double[:, ::1] mu,
                  double[::1] bound, int n_threads=1):
    """The sigmoid bound with every xi at 1/2, at the means ``mu``, into ``bound``: what
    ``evaluate`` gives for ``xi = 1/2`` (free units' entropies included, barren units left out,
    minus an allowance for its rounding), in one pass over the edges without a transcendental
    per edge: with xi = 1/2 each unit's term needs E[exp(+-z/2)] = exp(+-h/2) prod_j (1 + mu_j
    (exp(+-w_j/2) - 1)), and ``ehalf`` / ``emhalf`` (shaped like ``w``) hold exp(w/2) and
    exp(-w/2), ``hhalf`` / ``hmhalf`` (shaped like ``h``) exp(h/2) and exp(-h/2): one log per
    unit.  The caller keeps every unit's |h| + sum_in |w| within 1,000, so that no product
    leaves the double range.  Returns MF_OK or MF_EBADARG (nothing written)."""
    cdef Dag g
    if check_dag(par_ptr, par_idx, ch_ptr, ch_idx, ch_w, &g) != MF_OK:
        return MF_EBADARG
    if check_items(&g, w, h, net_of, clamp) != MF_OK:
        return MF_EBADARG
    cdef Py_ssize_t n = g.n, p, i, f, k, n_items = clamp.shape[0], nnz = par_idx.shape[0]
    if (mu.shape[0] != n_items or mu.shape[1] != n or bound.shape[0] != n_items
            or ehalf.shape[0] != w.shape[0] or ehalf.shape[1] != w.shape[1]
            or emhalf.shape[0] != w.shape[0] or emhalf.shape[1] != w.shape[1]
            or hhalf.shape[0] != h.shape[0] or hhalf.shape[1] != h.shape[1]
            or hmhalf.shape[0] != h.shape[0] or hmhalf.shape[1] != h.shape[1] or n_threads < 1):
        return MF_EBADARG
    cdef size_t nbytes = <size_t> n * sizeof(double) + 2 * <size_t> n + 16
    cdef double *work = NULL
    cdef double *m
    cdef uint8_t *free_
    cdef uint8_t *barren
    cdef const double *wk
    cdef const double *ep
    cdef const double *em
    cdef double x, z, a, b, term, total, err, scale, s
    with nogil, parallel(num_threads=n_threads):
        work = <double *> malloc(nbytes)
        for p in prange(n_items, schedule="static"):
            if work == NULL:
                bound[p] = NAN
                continue
            m = work
            free_ = <uint8_t *> (work + n)
            barren = free_ + n
            barren_of_clamp(&g, &clamp[p, 0], free_, barren)
            wk = &w[net_of[p], 0] if nnz else NULL
            ep = &ehalf[net_of[p], 0] if nnz else NULL
            em = &emhalf[net_of[p], 0] if nnz else NULL
            total = 0.0
            err = 0.0
            for i in range(n):
                x = clamp[p, i]
                if not (x == x):
                    x = mu[p, i]
                m[i] = x
            for i in range(n):
                if barren[i]:
                    continue
                z = h[net_of[p], i]
                a = 1.0
                b = 1.0
                scale = fabs(z) + 1.0
                for f in range(g.par_ptr[i], g.par_ptr[i + 1]):
                    s = m[g.par_idx[f]]
                    z = z + wk[f] * s
                    a = a * (1.0 + s * (ep[f] - 1.0))
                    b = b * (1.0 + s * (em[f] - 1.0))
                    scale = scale + fabs(wk[f]) + 1.0
                # ln(E exp(z / 2) + E exp(-z / 2))
                term = m[i] * z - 0.5 * z - log(hhalf[net_of[p], i] * a + hmhalf[net_of[p], i] * b)
                total = total + term
                k = g.par_ptr[i + 1] - g.par_ptr[i]
                err = err + (2 * k + 8) * EPS * (scale + fabs(z) + fabs(term))
                if free_[i]:
                    s = entropy(m[i], 1.0 - m[i])
                    total = total + s
                    err = err + 4.0 * EPS * s
            bound[p] = total - err
        free(work)
    return MF_OK
