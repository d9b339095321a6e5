# The C-level API (part of _sjj.pyx).
#
# mf_sjj_solve, declared in mfengine/sbn/_sjj.pxd for Cython callers, its exported C symbol
# mfengine_sjj_solve (csrc/mfengine_solver.h) and the test hook _capi_solve.  It checks every
# size, pointer and value it reads before it writes anything, builds the DAG's child lists
# itself, and runs the items in plain C threads; the contract is section 2 of
# mfengine/solver.pxd.

DEF CAPI_MAX_THREADS = 256
DEF CAPI_MAX_SCALE = 1.1235582092889474e+307      # 2^1020: sjj.MAX_NET_SCALE
DEF CAPI_DEFAULT = 0.0                            # inner_tol: the default rule of mf.infer


cdef int mf_sjj_solve(Py_ssize_t n_units, Py_ssize_t nnz, const Py_ssize_t *par_ptr,
                      const Py_ssize_t *par_idx, const double *weights, const double *biases,
                      int activation, Py_ssize_t n_items, const double *clamp,
                      const double *init_mu, const double *init_xi, double tol,
                      double inner_tol, Py_ssize_t max_sweeps, int n_threads, double *bound,
                      double *mu, double *xi, Py_ssize_t *n_sweeps,
                      signed char *converged) noexcept nogil:
    """The strict SJJ bound maximised for every item (mfengine.sbn.sjj.solve) over one net in
    CSR form; the contract is section 2 of mfengine/solver.pxd."""
    cdef Dag g
    cdef intp_t *ch = NULL
    cdef intp_t *pos = NULL
    cdef Py_ssize_t p, i, n = n_units, n_xi = nnz if activation == 1 else n_units, maxin, maxout
    cdef Py_ssize_t big = <Py_ssize_t> 0x7fffffffffffffff
    cdef double x, gtol
    cdef int rc
    # the structure, finite values in the net scale's range, noisy-OR signs with a leak h > 0
    if not (activation == 0 or activation == 1) or capi_check_net(
            n_units, nnz, par_ptr, par_idx, weights, biases, activation == 1, True,
            CAPI_MAX_SCALE) != MF_OK:
        return MF_EBADARG
    if (n_items < 0 or not (tol >= 0.0 and tol <= 1.7976931348623157e308)
            or not (inner_tol >= 0.0 and inner_tol <= 1.7976931348623157e308)
            or max_sweeps < 0 or max_sweeps >= big):
        return MF_EBADARG
    if n_items > 0 and (bound == NULL or n_sweeps == NULL or converged == NULL
                        or (n_units > 0 and (mu == NULL or clamp == NULL))
                        or (n_xi > 0 and xi == NULL)):
        return MF_EBADARG
    # n_items * n_units and n_items * nnz doubles, and the scratch of up to 256 threads (each
    # at most 23 n_units + 20 nnz + 27 doubles: run_items) must be addressable
    if ((n_units > 0 and n_items > big // 8 // n_units)
            or (nnz > 0 and n_items > big // 8 // nnz) or n_units > big // 131072
            or nnz > big // 131072):
        return MF_EOVERFLOW
    for p in range(n_items * n_units):
        x = clamp[p]
        if x == x:
            if not (x == 0.0 or x == 1.0):
                return MF_EBADARG
        elif init_mu != NULL and not (0.0 <= init_mu[p] <= 1.0):
            return MF_EBADARG
    if init_xi != NULL:
        for p in range(n_items * n_xi):
            x = init_xi[p]
            if activation == 0 and not (0.0 <= x <= 1.0):
                return MF_EBADARG
            if activation == 1 and not (0.0 <= x <= 1.7976931348623157e308):
                return MF_EBADARG
    if n_items == 0:
        return MF_OK
    n_threads = 1 if n_threads < 1 else (CAPI_MAX_THREADS if n_threads > CAPI_MAX_THREADS
                                         else n_threads)
    if inner_tol == CAPI_DEFAULT:      # mfengine.sbn._solve.inner_tol_for
        gtol = 0.1 * sqrt(tol)
        gtol = 1e-13 if gtol < 1e-13 else (1e-3 if gtol > 1e-3 else gtol)
    else:
        gtol = inner_tol
    if capi_dag(n, nnz, par_ptr, par_idx, &g, &ch) != MF_OK:
        return MF_ENOMEM
    rc = prepare_sig(&g, activation == 1, &pos, &maxin, &maxout)
    if rc != MF_OK:
        free(ch)
        return rc
    # the starting point: as sjj.solve (means 0.5, xi 0.5, noisy-OR q uniform; the defaults
    # written by run_items' threads); the clamped units' values are set by the kernel
    if init_mu != NULL:
        for p in range(n_items * n_units):
            mu[p] = init_mu[p] if clamp[p] != clamp[p] else 0.5
    if init_xi != NULL:
        for p in range(n_items * n_xi):
            xi[p] = init_xi[p]
    rc = run_items(&g, pos, maxin, maxout, weights, biases, n_items, NULL, clamp, mu, xi, NULL,
                   bound, n_sweeps, <uint8_t *> converged, tol, gtol, max_sweeps, n_threads,
                   activation == 1, 1, init_mu == NULL, init_xi == NULL)
    free(pos)
    free(ch)
    if rc != MF_OK:
        return rc
    for p in range(n_items):
        if not converged[p]:
            return MF_NOT_CONVERGED
    return MF_OK


# Exported C symbol for C callers (csrc/mfengine_solver.h); the same function as above.
cdef public int mfengine_sjj_solve(
        Py_ssize_t n_units, Py_ssize_t nnz, const Py_ssize_t *par_ptr, const Py_ssize_t *par_idx,
        const double *weights, const double *biases, int activation, Py_ssize_t n_items,
        const double *clamp, const double *init_mu, const double *init_xi, double tol,
        double inner_tol, Py_ssize_t max_sweeps, int n_threads, double *bound, double *mu,
        double *xi, Py_ssize_t *n_sweeps, signed char *converged) noexcept nogil:
    return mf_sjj_solve(n_units, nnz, par_ptr, par_idx, weights, biases, activation, n_items,
                        clamp, init_mu, init_xi, tol, inner_tol, max_sweeps, n_threads, bound,
                        mu, xi, n_sweeps, converged)


def _capi_solve(Py_ssize_t n_units, Py_ssize_t nnz, par_ptr, par_idx, weights, biases,
                int activation, Py_ssize_t n_items, clamp, init_mu, init_xi, double tol,
                double inner_tol, Py_ssize_t max_sweeps, int n_threads, bound, mu, xi,
                n_sweeps, converged):
    """Test hook: mf_sjj_solve on buffers (None passes NULL, as does an empty buffer);
    returns its status.  The sizes are the caller's, unchecked against the buffers: tests
    only."""
    cdef const Py_ssize_t[::1] pp = par_ptr
    cdef const Py_ssize_t[::1] pi = par_idx
    cdef const double[::1] wv = weights
    cdef const double[::1] hv = biases
    cdef const double[::1] cv = clamp
    cdef const double[::1] imv
    cdef const double[::1] ixv
    cdef double[::1] bv = bound
    cdef double[::1] mv = mu
    cdef double[::1] xv = xi
    cdef Py_ssize_t[::1] sv = n_sweeps
    cdef signed char[::1] ccv = converged
    cdef const double *imp = NULL
    cdef const double *ixp = NULL
    cdef int rc
    if init_mu is not None:
        imv = init_mu
        imp = &imv[0] if imv.shape[0] else NULL
    if init_xi is not None:
        ixv = init_xi
        ixp = &ixv[0] if ixv.shape[0] else NULL
    with nogil:
        rc = mf_sjj_solve(n_units, nnz, &pp[0] if pp.shape[0] else NULL,
                          &pi[0] if pi.shape[0] else NULL, &wv[0] if wv.shape[0] else NULL,
                          &hv[0] if hv.shape[0] else NULL, activation, n_items,
                          &cv[0] if cv.shape[0] else NULL, imp, ixp, tol, inner_tol,
                          max_sweeps, n_threads, &bv[0] if bv.shape[0] else NULL,
                          &mv[0] if mv.shape[0] else NULL, &xv[0] if xv.shape[0] else NULL,
                          &sv[0] if sv.shape[0] else NULL, &ccv[0] if ccv.shape[0] else NULL)
    return rc
