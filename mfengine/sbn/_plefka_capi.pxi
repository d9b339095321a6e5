# The C API (part of _plefka.pyx): mf_plefka_solve and mf_plefka_gradient, declared in
# mfengine/sbn/_plefka.pxd for Cython callers (the contract is section 2 of
# mfengine/solver.pxd, and the docstring of mf_plefka_solve below) and exported as
# mfengine_plefka_solve / mfengine_plefka_gradient for C callers (csrc/mfengine_solver.h);
# _capi_solve and _capi_gradient call them on buffers, for tests.  Nothing from the caller is
# trusted: every size, pointer and value is checked before anything else is read (MF_EBADARG,
# nothing written).

DEF CAPI_MAX_THREADS = 256
DEF CAPI_MAX_SCALE = 8.98846567431158e+307      # 2^1023: sum |h| + sum |w| of the net


cdef int capi_check_items(Py_ssize_t n_units, Py_ssize_t n_items, const double *clamp,
                          const double *means) noexcept nogil:
    """clamp entries NaN, 0.0 or 1.0; means (if not NULL) in [0, 1] at the free units."""
    cdef Py_ssize_t p, i
    cdef double x
    if n_items > 0 and n_units > 0 and clamp == NULL:
        return MF_EBADARG
    for p in range(n_items * n_units):
        x = clamp[p]
        if x == x:
            if not (x == 0.0 or x == 1.0):
                return MF_EBADARG
        elif means != NULL and not (0.0 <= means[p] <= 1.0):
            return MF_EBADARG
    return MF_OK


cdef int mf_plefka_solve(Py_ssize_t n_units, Py_ssize_t nnz, const Py_ssize_t *par_ptr,
                         const Py_ssize_t *par_idx, const double *weights,
                         const double *biases, int activation, int order, Py_ssize_t n_items,
                         const double *clamp, const double *init, double tol,
                         Py_ssize_t max_iter, int n_threads, double *G, double *u,
                         Py_ssize_t *n_iter, signed char *converged) noexcept nogil:
    """The Plefka solve (mfengine.sbn.plefka.solve with its defaults: quasi-Newton corrections,
    the coordinate-descent fallback, items whose G overflows restarted from the G11 solution)
    over one net in CSR form; the contract is section 2 of mfengine/solver.pxd."""
    cdef Net net
    cdef Dag g
    cdef intp_t *ch = NULL
    cdef int8_t *status = NULL
    cdef Py_ssize_t p, i, n = n_units
    cdef int rc, st, all_ok = 1, over = 0
    cdef double *u11 = NULL
    cdef double G11
    cdef intp_t it11
    cdef int8_t c11, s11
    # the activation and scheme, the structure, finite values (sum |h| + sum |w| <= 2^1023),
    # noisy-OR signs
    if not (activation == SIGMOID or activation == NOISY_OR) or not (
            order == 11 or order == 12 or order == 22) or capi_check_net(
            n_units, nnz, par_ptr, par_idx, weights, biases, activation == NOISY_OR, False,
            CAPI_MAX_SCALE) != MF_OK:
        return MF_EBADARG
    if n_items < 0 or not (tol > 0.0 and tol < INFINITY) or max_iter < 0:
        return MF_EBADARG
    if n_items > 0 and (G == NULL or n_iter == NULL or converged == NULL
                        or (n_units > 0 and u == NULL)):
        return MF_EBADARG
    if n_units > 0 and n_items > (<Py_ssize_t> 0x7fffffffffffffff) // 8 // n_units:
        return MF_EOVERFLOW
    if capi_check_items(n_units, n_items, clamp, init) != MF_OK:
        return MF_EBADARG
    if n_items == 0:
        return MF_OK
    n_threads = 1 if n_threads < 1 else (CAPI_MAX_THREADS if n_threads > CAPI_MAX_THREADS
                                         else n_threads)
    if capi_dag(n, nnz, par_ptr, par_idx, &g, &ch) != MF_OK:
        return MF_ENOMEM
    status = <int8_t *> malloc(n_items)
    u11 = <double *> malloc((n + 1) * sizeof(double))
    if status == NULL or u11 == NULL:
        free(ch)
        free(status)
        free(u11)
        return MF_ENOMEM
    fill_net(&net, &g, order, activation, 1)
    net.sat_ok = order <= 12
    rc = run_solve(&net, weights, 0, biases, 0, NULL, n_items, clamp, init, tol, max_iter,
                   n_threads, 1, G, u, n_iter, <int8_t *> converged, status)
    if rc == MF_OK:
        for p in range(n_items):
            if status[p] == MF_ENOMEM:
                rc = MF_ENOMEM
                break
    if rc == MF_OK and order != 11:
        # items whose G overflows at the start: from the G11 solution, then from it rounded
        for p in range(n_items):
            if status[p] != MF_EOVERFLOW:
                continue
            net.order = 11
            net.sat_ok = 1
            st = run_solve(&net, weights, 0, biases, 0, NULL, 1, clamp + p * n,
                           init + p * n if init != NULL else NULL, tol, max_iter, 1, 1,
                           &G11, u11, &it11, &c11, &s11)
            net.order = order
            net.sat_ok = order <= 12
            if st != MF_OK or s11 != MF_OK:
                continue
            for k in range(2):
                if k == 1:
                    for i in range(n):
                        u11[i] = 0.0 if u11[i] < 0.5 else 1.0
                st = run_solve(&net, weights, 0, biases, 0, NULL, 1, clamp + p * n, u11, tol,
                               max_iter, 1, 1, &G[p], u + p * n, &n_iter[p],
                               <int8_t *> &converged[p], &status[p])
                if st != MF_OK or status[p] != MF_EOVERFLOW:
                    break
    if rc == MF_OK:
        for p in range(n_items):
            if status[p] == MF_ENOMEM:
                rc = MF_ENOMEM
            elif status[p] == MF_EOVERFLOW:
                over = 1
                converged[p] = 0
            elif not converged[p]:
                all_ok = 0
    free(ch)
    free(status)
    free(u11)
    if rc != MF_OK:
        return rc
    if over:
        return MF_EOVERFLOW
    return MF_OK if all_ok else MF_NOT_CONVERGED


cdef int mf_plefka_gradient(Py_ssize_t n_units, Py_ssize_t nnz, const Py_ssize_t *par_ptr,
                            const Py_ssize_t *par_idx, const double *weights,
                            const double *biases, int activation, int order,
                            Py_ssize_t n_items, const double *clamp, const double *u,
                            double *G, double *grad_weights, double *grad_biases) noexcept nogil:
    """G per item at the means u and dG/dw, dG/dh summed over the items (partial derivatives,
    the means held fixed: total ones at a solution of mf_plefka_solve); one thread."""
    cdef Net net
    cdef Dag g
    cdef intp_t *ch = NULL
    cdef char *block = NULL
    cdef double *gu
    cdef double *wbar
    cdef Work W
    cdef Py_ssize_t p, i, e, n = n_units
    cdef double x, negH, F
    cdef int st, rc = MF_OK
    # the activation and scheme, the structure, finite values (sum |h| + sum |w| <= 2^1023),
    # noisy-OR signs
    if not (activation == SIGMOID or activation == NOISY_OR) or not (
            order == 11 or order == 12 or order == 22) or capi_check_net(
            n_units, nnz, par_ptr, par_idx, weights, biases, activation == NOISY_OR, False,
            CAPI_MAX_SCALE) != MF_OK:
        return MF_EBADARG
    if n_items < 0 or (n_items > 0 and n_units > 0 and u == NULL):
        return MF_EBADARG
    if (n_items > 0 and G == NULL) or (nnz > 0 and grad_weights == NULL) or (
            n_units > 0 and grad_biases == NULL):
        return MF_EBADARG
    if n_units > 0 and n_items > (<Py_ssize_t> 0x7fffffffffffffff) // 8 // n_units:
        return MF_EOVERFLOW
    if capi_check_items(n_units, n_items, clamp, u) != MF_OK:
        return MF_EBADARG
    if capi_dag(n, nnz, par_ptr, par_idx, &g, &ch) != MF_OK:
        return MF_ENOMEM
    block = <char *> malloc(WORK_BYTES(n) + (n + nnz + 1) * sizeof(double))
    if block == NULL:
        free(ch)
        return MF_ENOMEM
    gu = <double *> (block + WORK_BYTES(n))
    wbar = gu + n
    fill_net(&net, &g, order, activation, 0)
    for e in range(nnz):
        grad_weights[e] = 0.0
    for i in range(n):
        grad_biases[i] = 0.0
    for p in range(n_items):
        W = make_work(block, n)
        negH = eval_setup(&net, clamp + p * n, u + p * n, &W)
        F = 0.0
        st = core(&net, weights if nnz > 0 else NULL, biases, &W, 1, gu, wbar, &F)
        if st != MF_OK:
            G[p] = INFINITY
            rc = MF_EBADARG         # G = +inf: no gradient (noisy-OR data impossible)
            continue
        G[p] = negH + F
        if not (fabs(G[p]) < INFINITY):
            rc = MF_EOVERFLOW
        for i in range(n):
            grad_biases[i] += W.mbar[i]
        for e in range(nnz):
            grad_weights[e] += wbar[e]
    for i in range(n):
        if not (fabs(grad_biases[i]) < INFINITY):
            rc = MF_EOVERFLOW if rc == MF_OK else rc
    for e in range(nnz):
        if not (fabs(grad_weights[e]) < INFINITY):
            rc = MF_EOVERFLOW if rc == MF_OK else rc
    free(block)
    free(ch)
    return rc


# Exported C symbols for C callers (csrc/mfengine_solver.h): the same functions, linkable, and
# needing no interpreter (their threads run through mf_parallel_for).
cdef public int mfengine_plefka_solve(
        Py_ssize_t n_units, Py_ssize_t nnz, const Py_ssize_t *par_ptr, const Py_ssize_t *par_idx,
        const double *weights, const double *biases, int activation, int order,
        Py_ssize_t n_items, const double *clamp, const double *init, double tol,
        Py_ssize_t max_iter, int n_threads, double *G, double *u, Py_ssize_t *n_iter,
        signed char *converged) noexcept nogil:
    return mf_plefka_solve(n_units, nnz, par_ptr, par_idx, weights, biases, activation, order,
                           n_items, clamp, init, tol, max_iter, n_threads, G, u, n_iter,
                           converged)


cdef public int mfengine_plefka_gradient(
        Py_ssize_t n_units, Py_ssize_t nnz, const Py_ssize_t *par_ptr, const Py_ssize_t *par_idx,
        const double *weights, const double *biases, int activation, int order,
        Py_ssize_t n_items, const double *clamp, const double *u, double *G,
        double *grad_weights, double *grad_biases) noexcept nogil:
    return mf_plefka_gradient(n_units, nnz, par_ptr, par_idx, weights, biases, activation, order,
                              n_items, clamp, u, G, grad_weights, grad_biases)


def _capi_solve(Py_ssize_t n_units, Py_ssize_t nnz, par_ptr, par_idx, weights, biases,
                int activation, int order, Py_ssize_t n_items, clamp, init, double tol,
                Py_ssize_t max_iter, int n_threads, G, u, n_iter, converged):
    """Test hook: mf_plefka_solve on buffers (None passes NULL); returns its status.  The
    sizes are the caller's, unchecked against the buffers: tests only."""
    cdef const Py_ssize_t[::1] pp = par_ptr
    cdef const Py_ssize_t[::1] pi = par_idx
    cdef const double[::1] wv = weights
    cdef const double[::1] hv = biases
    cdef const double[::1] cv = clamp
    cdef const double[::1] iv
    cdef double[::1] Gv = G
    cdef double[::1] uv = u
    cdef Py_ssize_t[::1] itv = n_iter
    cdef signed char[::1] cvv = converged
    cdef const double *ip = NULL
    if init is not None:
        iv = init
        ip = &iv[0] if iv.shape[0] else NULL
    with nogil:
        rc = mf_plefka_solve(n_units, nnz, &pp[0] if pp.shape[0] else NULL,
                             &pi[0] if pi.shape[0] else NULL, &wv[0] if wv.shape[0] else NULL,
                             &hv[0] if hv.shape[0] else NULL, activation, order, n_items,
                             &cv[0] if cv.shape[0] else NULL, ip, tol, max_iter, n_threads,
                             &Gv[0] if Gv.shape[0] else NULL, &uv[0] if uv.shape[0] else NULL,
                             &itv[0] if itv.shape[0] else NULL,
                             &cvv[0] if cvv.shape[0] else NULL)
    return rc


def _capi_gradient(Py_ssize_t n_units, Py_ssize_t nnz, par_ptr, par_idx, weights, biases,
                   int activation, int order, Py_ssize_t n_items, clamp, u, G, grad_weights,
                   grad_biases):
    """Test hook: mf_plefka_gradient on buffers; returns its status (tests only)."""
    cdef const Py_ssize_t[::1] pp = par_ptr
    cdef const Py_ssize_t[::1] pi = par_idx
    cdef const double[::1] wv = weights
    cdef const double[::1] hv = biases
    cdef const double[::1] cv = clamp
    cdef const double[::1] uv = u
    cdef double[::1] Gv = G
    cdef double[::1] gw = grad_weights
    cdef double[::1] gh = grad_biases
    with nogil:
        rc = mf_plefka_gradient(n_units, nnz, &pp[0] if pp.shape[0] else NULL,
                                &pi[0] if pi.shape[0] else NULL,
                                &wv[0] if wv.shape[0] else NULL, &hv[0] if hv.shape[0] else NULL,
                                activation, order, n_items, &cv[0] if cv.shape[0] else NULL,
                                &uv[0] if uv.shape[0] else NULL, &Gv[0] if Gv.shape[0] else NULL,
                                &gw[0] if gw.shape[0] else NULL, &gh[0] if gh.shape[0] else NULL)
    return rc
