# Every item of a call, in parallel (part of _sjj.pyx).
#
# The sigmoid nets' edge positions and runs of consecutive parents or children (prepare_sig),
# the job that run_items hands to mf_parallel_for (plain C threads: the C entry point needs no
# interpreter), the threads' first touch of the outputs (fill_body), one item in its thread's
# scratch on the noisy-OR or the sigmoid kernel (item_body), and run_items, which allocates
# every thread's scratch at once before anything is written.

cdef int prepare_sig(const Dag *g, bint noisy_or, intp_t **pos_out, Py_ssize_t *maxin,
                     Py_ssize_t *maxout) noexcept nogil:
    """For sigmoid units: check that ch_w is a permutation of the edges (MF_EBADARG) and
    allocate, in *pos_out, each unit's first parent and first child when those are runs of
    consecutive units (-1 otherwise: the fast path then indexes them directly), and the
    largest fan-in and fan-out.  Nothing for noisy-OR units (*pos_out NULL)."""
    cdef Py_ssize_t n = g.n, nnz = g.nnz, i, q
    cdef intp_t *pos
    pos_out[0] = NULL
    maxin[0] = 0
    maxout[0] = 0
    if noisy_or:
        return MF_OK
    pos = <intp_t *> malloc((nnz + 2 * n + 1) * sizeof(intp_t))
    if pos == NULL:
        return MF_ENOMEM
    for q in range(nnz):
        pos[q] = -1
    for q in range(nnz):
        if pos[g.ch_w[q]] != -1:
            free(pos)
            return MF_EBADARG
        pos[g.ch_w[q]] = q
    for i in range(n):
        pos[nnz + i] = g.par_idx[g.par_ptr[i]] if g.par_ptr[i + 1] > g.par_ptr[i] else -1
        for q in range(g.par_ptr[i], g.par_ptr[i + 1]):
            if g.par_idx[q] != pos[nnz + i] + (q - g.par_ptr[i]):
                pos[nnz + i] = -1
                break
        pos[nnz + n + i] = g.ch_idx[g.ch_ptr[i]] if g.ch_ptr[i + 1] > g.ch_ptr[i] else -1
        for q in range(g.ch_ptr[i], g.ch_ptr[i + 1]):
            if g.ch_idx[q] != pos[nnz + n + i] + (q - g.ch_ptr[i]):
                pos[nnz + n + i] = -1
                break
        if g.par_ptr[i + 1] - g.par_ptr[i] > maxin[0]:
            maxin[0] = g.par_ptr[i + 1] - g.par_ptr[i]
        if g.ch_ptr[i + 1] - g.ch_ptr[i] > maxout[0]:
            maxout[0] = g.ch_ptr[i + 1] - g.ch_ptr[i]
    pos_out[0] = pos
    return MF_OK


cdef struct ItemsJob:       # run_items' loops, for mf_parallel_for (plain C threads)
    const Dag *g
    const intp_t *pos
    Py_ssize_t maxin, maxout, n, nnz, n_xi, n_items, max_sweeps, stride
    const double *w
    const double *h
    const intp_t *net_of
    const double *clamp
    double *mu
    double *xi
    double *history
    double *bound
    intp_t *n_sweeps
    uint8_t *converged
    double tol, gtol, xi0
    bint noisy_or, fill_mu, fill_xi, room
    double *scratch
    int nt


cdef void fill_body(void *ctx, Py_ssize_t c, int thread) noexcept nogil:
    """The default start of the rows of chunk c of nt contiguous chunks."""
    cdef ItemsJob *j = <ItemsJob *> ctx
    cdef Py_ssize_t p, i, n = j.n, n_xi = j.n_xi
    for p in range(c * j.n_items // j.nt, (c + 1) * j.n_items // j.nt):
        if j.fill_mu:
            for i in range(n):
                j.mu[p * n + i] = 0.5
        if j.fill_xi:
            for i in range(n_xi):
                j.xi[p * n_xi + i] = j.xi0


cdef void item_body(void *ctx, Py_ssize_t p, int thread) noexcept nogil:
    """Item p, in the scratch of the thread that runs it."""
    cdef ItemsJob *j = <ItemsJob *> ctx
    cdef Py_ssize_t n = j.n, nnz = j.nnz, n_xi = j.n_xi
    cdef Py_ssize_t net = j.net_of[p] if j.net_of != NULL else 0
    cdef double *work = j.scratch + thread * j.stride
    cdef double *hist = j.history + p * (j.max_sweeps + 1) if j.history != NULL else NULL
    cdef double dummy_w = 0.0
    if j.noisy_or:
        j.converged[p] = solve_item_nor(j.g, j.w + net * nnz if nnz else &dummy_w,
                                        j.h + net * n, j.clamp + p * n, j.mu + p * n,
                                        j.xi + p * n_xi if nnz else &dummy_w, hist, j.tol,
                                        j.max_sweeps, work, j.bound + p, j.n_sweeps + p)
    else:
        j.converged[p] = solve_item_sig(j.g, j.pos, net, j.w + net * nnz if nnz else &dummy_w,
                                        j.h + net * n, j.clamp + p * n, j.mu + p * n,
                                        j.xi + p * n, hist, j.tol, j.gtol, j.max_sweeps, work,
                                        j.maxin, j.maxout, j.room, j.bound + p, j.n_sweeps + p)


cdef int run_items(const Dag *g, const intp_t *pos, Py_ssize_t maxin, Py_ssize_t maxout,
                   const double *w, const double *h, Py_ssize_t n_items, const intp_t *net_of,
                   const double *clamp, double *mu, double *xi, double *history,
                   double *bound, intp_t *n_sweeps, uint8_t *converged, double tol,
                   double gtol, Py_ssize_t max_sweeps, int n_threads, bint noisy_or,
                   bint fast, bint fill_mu, bint fill_xi) noexcept nogil:
    """Solve every item (arguments checked by the caller; net_of NULL: every item on net 0;
    history NULL or (n_items, max_sweeps + 1)).  The scratch of every thread is allocated at
    once before anything is written: MF_ENOMEM or MF_EOVERFLOW (its size would overflow;
    nothing written either way) or MF_OK.

    ``fill_mu`` / ``fill_xi``: ``mu`` / ``xi`` hold nothing yet (the caller allocated them
    without writing them); the threads first write the default start into them (means 0.5;
    xi 0.5, or -1 for noisy-OR: uniform q), each a contiguous block of rows, before the solve.
    The memory is then first touched by the threads in parallel instead of serially by the
    caller: a fresh (n_items, nnz) q array (64 MB for 200 cases of the diagnosis net) costs a
    page fault per page, each zeroed by the kernel, which, taken serially, held two threads to
    1.1x one.  The threads run in plain C (mf_parallel_for): the C entry point needs no
    interpreter."""
    cdef Py_ssize_t n = g.n, nnz = g.nnz, t, p, i
    cdef ItemsJob job
    cdef intp_t *key
    cdef Py_ssize_t base
    if n_items == 0:
        return MF_OK
    n_threads = mf_clamp_threads(n_threads, n_items)
    # an item has barren units iff it has a free unit without children (below a barren unit
    # lie only barren units, down to a childless one): then the threads need room for them
    job.room = 0
    if not noisy_or:
        for p in range(n_items):
            for i in range(n):
                if g.ch_ptr[i + 1] == g.ch_ptr[i] and not (clamp[p * n + i] == clamp[p * n + i]):
                    job.room = 1
                    break
            if job.room:
                break
    # scratch per thread: 14 n + 3 nnz doubles (sigmoid, careful path; the noisy-OR kernel
    # needs less), then for sigmoid 3 n bytes and the fast path's extra (fast_extra), then
    # (room) the barren units' copies
    base = 14 * n + 3 * nnz + (
        (2 * n + 15) // 8 + 3 if noisy_or else fast_extra(n, nnz, maxin, maxout))
    job.stride = base + (barren_extra(nnz) if job.room else 0)
    if <size_t> job.stride > <size_t> PY_SSIZE_T_MAX // sizeof(double) // <size_t> n_threads:
        return MF_EOVERFLOW
    job.scratch = <double *> malloc(<size_t> job.stride * <size_t> n_threads * sizeof(double))
    if job.scratch == NULL:
        return MF_ENOMEM
    for t in range(n_threads):
        key = <intp_t *> (job.scratch + t * job.stride + base - 2)
        key[0] = -1 if fast else -2       # -2: no net is ever cached, no fast path
    job.g = g
    job.pos = pos
    job.maxin = maxin
    job.maxout = maxout
    job.n = n
    job.nnz = nnz
    job.n_xi = nnz if noisy_or else n
    job.n_items = n_items
    job.max_sweeps = max_sweeps
    job.w = w
    job.h = h
    job.net_of = net_of
    job.clamp = clamp
    job.mu = mu
    job.xi = xi
    job.history = history
    job.bound = bound
    job.n_sweeps = n_sweeps
    job.converged = converged
    job.tol = tol
    job.gtol = gtol
    job.xi0 = -1.0 if noisy_or else 0.5
    job.noisy_or = noisy_or
    job.fill_mu = fill_mu
    job.fill_xi = fill_xi
    job.nt = n_threads
    if fill_mu or fill_xi:
        # each thread first touches contiguous blocks of rows: the threads' page faults then
        # never wait on the same page (numpy backs large arrays with 2 MB pages, and the
        # solve's dynamic chunks would interleave the threads within them)
        mf_parallel_for(n_threads, n_threads, fill_body, &job)
    mf_parallel_for(n_items, n_threads, item_body, &job)
    free(job.scratch)
    return MF_OK
