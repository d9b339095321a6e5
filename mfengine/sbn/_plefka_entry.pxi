# The Python entry points (part of _plefka.pyx), called by mfengine.sbn.plefka with validated
# arrays: ``solve`` and ``evaluate`` write into the caller's buffers and return a status code of
# mf_status.h, whose values the wrapper reads as STATUS_*.  ``check_args`` checks again every
# size, index and option they read (MF_EBADARG, nothing written).

cdef int check_args(const intp_t[::1] par_ptr, const intp_t[::1] par_idx,
                    const intp_t[::1] ch_ptr, const intp_t[::1] ch_idx, const intp_t[::1] ch_w,
                    const double[:, ::1] w, const double[:, ::1] h, const intp_t[::1] net_of,
                    const double[:, ::1] clamp, int order, int act, int n_threads,
                    Dag *g) noexcept nogil:
    if check_dag(par_ptr, par_idx, ch_ptr, ch_idx, ch_w, g) != MF_OK:
        return MF_EBADARG
    if check_items(g, w, h, net_of, clamp) != MF_OK:
        return MF_EBADARG
    if not (order == 11 or order == 12 or order == 22) or not (act == SIGMOID or act == NOISY_OR):
        return MF_EBADARG
    if n_threads < 1:
        return MF_EBADARG
    return MF_OK


def solve(const intp_t[::1] par_ptr, const intp_t[::1] par_idx, const intp_t[::1] ch_ptr,
          const intp_t[::1] ch_idx, const intp_t[::1] ch_w, const double[:, ::1] w,
          const double[:, ::1] h, const intp_t[::1] net_of, const double[:, ::1] clamp,
          const double[:, ::1] init, bint has_init, int order, int act, double tol,
          Py_ssize_t max_iter, double[::1] G, double[:, ::1] u, intp_t[::1] n_iter,
          int8_t[::1] conv, int8_t[::1] status, int n_threads, int accel=1, int cd=1):
    """Solve dG/du = 0 for every item (outputs in the caller's buffers).

    accel: 0 plain fixed-point steps (with the line search), 1 quasi-Newton corrections once a
    line search was needed, 2 quasi-Newton corrections from the second step on.  cd: 1 (orders
    11 and 12) solve the items left unconverged again by coordinate descent on G, counting a
    unit on the bound |t| = T_MAX whose image lies beyond it as converged; 0 the fixed-point
    iteration only, any unit pushed against the bound unconverged.  Returns MF_OK,
    or MF_EBADARG (nothing written) when a size, index or option is inconsistent; status[p]
    is MF_OK, MF_ENOMEM (no scratch space for the item's thread) or MF_EOVERFLOW (G is not
    finite at the starting point: the weights are too large for this expansion)."""
    cdef Dag g
    cdef Net net
    if check_args(par_ptr, par_idx, ch_ptr, ch_idx, ch_w, w, h, net_of, clamp, order, act,
                  n_threads, &g) != MF_OK:
        return MF_EBADARG
    cdef Py_ssize_t p, n_items = clamp.shape[0]
    if n_items == 0:
        return MF_OK
    if (u.shape[0] != n_items or u.shape[1] != g.n or G.shape[0] != n_items
            or n_iter.shape[0] != n_items or conv.shape[0] != n_items
            or status.shape[0] != n_items or max_iter < 0 or not (tol > 0.0)
            or not (0 <= accel <= 2)
            or (has_init and (init.shape[0] != n_items or init.shape[1] != g.n))):
        return MF_EBADARG
    fill_net(&net, &g, order, act, accel)
    net.sat_ok = order <= 12 and cd != 0
    cdef int rc
    with nogil:
        rc = run_solve(&net, &w[0, 0] if g.nnz > 0 else NULL, w.shape[1], &h[0, 0], h.shape[1],
                       &net_of[0], n_items, &clamp[0, 0], &init[0, 0] if has_init else NULL,
                       tol, max_iter, n_threads, cd, &G[0], &u[0, 0], &n_iter[0], &conv[0],
                       &status[0])
    if rc == MF_ENOMEM:
        status[:] = MF_ENOMEM
    return MF_OK


def evaluate(const intp_t[::1] par_ptr, const intp_t[::1] par_idx, const intp_t[::1] ch_ptr,
             const intp_t[::1] ch_idx, const intp_t[::1] ch_w, const double[:, ::1] w,
             const double[:, ::1] h, const intp_t[::1] net_of, const double[:, ::1] clamp,
             const double[:, ::1] u, int order, int act, bint want_grad, double[::1] G,
             double[:, ::1] gu, double[:, ::1] gw, double[:, ::1] gh, int8_t[::1] status,
             int n_threads):
    """G at the given means (free units' u in [0, 1]; barren units' not read); with want_grad
    also dG/du (free units; 0 for clamped and barren ones; +-inf where a free u is exactly 0
    or 1, the entropy's derivative),
    dG/dw and dG/dh, all partial (the other means held fixed).

    Returns MF_OK or MF_EBADARG (nothing written); status[p] is MF_OK (G may be +inf: a unit
    with u > 0 whose ln f(Mbar) is -inf), MF_ENOMEM or MF_EOVERFLOW (G or its gradient is
    not finite)."""
    cdef Dag g
    cdef Net net
    if check_args(par_ptr, par_idx, ch_ptr, ch_idx, ch_w, w, h, net_of, clamp, order, act,
                  n_threads, &g) != MF_OK:
        return MF_EBADARG
    cdef Py_ssize_t p, i, n = g.n, n_items = clamp.shape[0], nbytes = WORK_BYTES(g.n)
    if (u.shape[0] != n_items or u.shape[1] != n or G.shape[0] != n_items
            or status.shape[0] != n_items):
        return MF_EBADARG
    if want_grad and (gu.shape[0] != n_items or gu.shape[1] != n or gh.shape[0] != n_items
                      or gh.shape[1] != n or gw.shape[0] != n_items or gw.shape[1] != g.nnz):
        return MF_EBADARG
    fill_net(&net, &g, order, act, 0)
    cdef char *block
    cdef Work W
    cdef double x, negH, F
    cdef int st
    cdef const double *wrow
    cdef double *wbar
    block = NULL
    with nogil, parallel(num_threads=n_threads):
        block = <char *> malloc(nbytes)
        for p in prange(n_items, schedule="dynamic", chunksize=8):
            if block == NULL:
                status[p] = MF_ENOMEM
                continue
            W = make_work(block, n)
            negH = eval_setup(&net, &clamp[p, 0] if n > 0 else NULL, &u[p, 0] if n > 0 else NULL,
                              &W)
            wrow = &w[net_of[p], 0] if net.g.nnz > 0 else NULL
            wbar = &gw[p, 0] if (want_grad and net.g.nnz > 0) else NULL
            F = 0.0
            st = core(&net, wrow, &h[net_of[p], 0], &W, want_grad, &gu[p, 0] if want_grad else NULL,
                      wbar, &F)
            G[p] = negH + F if st == MF_OK else INFINITY
            status[p] = MF_OK
            if st == MF_OK and not (fabs(G[p]) < INFINITY):
                status[p] = MF_EOVERFLOW
            if want_grad and st == MF_OK:
                for i in range(n):
                    gh[p, i] = W.mbar[i]
                    if not (fabs(gu[p, i]) < INFINITY and fabs(gh[p, i]) < INFINITY):
                        status[p] = MF_EOVERFLOW
                    # the entropy's derivative log(u / (1 - u)): +-inf at a free mean of
                    # exactly 0 or 1 (saturated, not an overflow; the caller decides)
                    if W.fixed[i]:
                        gu[p, i] = 0.0
                    else:
                        x = W.u[i]
                        gu[p, i] += log(x) - log1p(-x)
                for i in range(net.g.nnz):
                    if not (fabs(gw[p, i]) < INFINITY):
                        status[p] = MF_EOVERFLOW
        free(block)
    return MF_OK


#: Status codes of ``mf_status.h``, for the Python wrapper.
STATUS_OK = MF_OK
STATUS_EBADARG = MF_EBADARG
STATUS_ENOMEM = MF_ENOMEM
STATUS_EOVERFLOW = MF_EOVERFLOW
