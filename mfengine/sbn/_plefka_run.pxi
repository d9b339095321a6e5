# The runner (part of _plefka.pyx).  ``run_solve`` cuts the items into blocks (runs of
# consecutive items of one net, cut from the items alone, never from the thread count), gives
# every thread its scratch and runs ``solve_body`` over the blocks -- the blocked dense path
# when it applies, else solve_item one item at a time -- then ``cd_body``, the
# coordinate-descent fallback, over the items left unconverged.  The threads are plain C
# (mf_parallel_for): no interpreter is needed, so the C API runs the same code.

cdef struct SolveJob:       # run_solve's loops, for mf_parallel_for (plain C threads)
    Net *net
    const double *w
    Py_ssize_t w_stride
    const double *h
    Py_ssize_t h_stride
    const intp_t *net_of
    const double *clamp
    const double *init
    double tol
    Py_ssize_t max_iter
    double *G
    double *u
    intp_t *n_iter
    int8_t *conv
    int8_t *status
    const intp_t *bstart
    Group *groups
    Py_ssize_t ng
    int use_blocks
    char **block            # one scratch block per thread (NULL: that thread's items fail)
    char **bmem             # one dense-block scratch per thread (NULL: per item instead)


cdef void solve_body(void *ctx, Py_ssize_t b, int thread) noexcept nogil:
    """Block b of items: the blocked dense path when it applies, else one item at a time."""
    cdef SolveJob *j = <SolveJob *> ctx
    cdef Net *net = j.net
    cdef Py_ssize_t n = net.g.n, nnz = net.g.nnz, p, e
    cdef Py_ssize_t np_ = j.bstart[b], nq = j.bstart[b + 1] - j.bstart[b]
    cdef char *block = j.block[thread]
    cdef char *bmem = j.bmem[thread] if j.use_blocks else NULL
    cdef const double *wrow = j.w + (j.net_of[np_] * j.w_stride if j.net_of != NULL else 0)
    cdef const double *irow
    cdef double wmax
    cdef Work W
    cdef int st
    if j.use_blocks and nq >= BLOCK_MIN and bmem != NULL:
        wmax = 0.0
        for e in range(nnz):
            if fabs(wrow[e]) > wmax:
                wmax = fabs(wrow[e])
        if wmax <= 1e150:
            solve_block(net, j.groups, j.ng, wrow,
                        j.h + (j.net_of[np_] * j.h_stride if j.net_of != NULL else 0),
                        j.clamp + np_ * n, j.init + np_ * n if j.init != NULL else NULL, nq,
                        bmem, j.tol, j.max_iter, j.G + np_, j.u + np_ * n, j.n_iter + np_,
                        j.conv + np_, j.status + np_)
            return
    for p in range(j.bstart[b], j.bstart[b + 1]):
        if block == NULL:
            j.status[p] = MF_ENOMEM
            continue
        W = make_work(block, n)
        wrow = (j.w + (j.net_of[p] * j.w_stride if j.net_of != NULL else 0)) if nnz > 0 else NULL
        irow = j.init + p * n if j.init != NULL else NULL
        st = solve_item(net, wrow, j.h + (j.net_of[p] * j.h_stride if j.net_of != NULL else 0),
                        j.clamp + p * n, irow, &W, j.tol, j.max_iter, &j.G[p], j.u + p * n,
                        &j.n_iter[p], &j.conv[p])
        j.status[p] = MF_OK if st == G_INF else st


cdef void cd_body(void *ctx, Py_ssize_t p, int thread) noexcept nogil:
    """Item p, left unconverged with a finite G by the fixed-point iteration: coordinate
    descent on G from the same start, with three quarters of what is left of the budget; where
    it ends unconverged too (creeping along a valley of G, where one unit at a time barely
    moves), the fixed-point iteration (line search, quasi-Newton corrections, no early give-up)
    goes on from its point with the rest, and is kept if it converges or ends lower.  The answer is kept if it
    converges or ends below the iteration's."""
    cdef SolveJob *j = <SolveJob *> ctx
    cdef Net *net = j.net
    cdef Net polish
    cdef Py_ssize_t n = net.g.n, e
    cdef char *block = j.block[thread]
    cdef const double *wrow
    cdef const double *irow
    cdef const double *hrow
    cdef double *u2
    cdef double *u3
    cdef double G2 = INFINITY, G3 = INFINITY
    cdef intp_t it2 = 0, it3 = 0, rem
    cdef int8_t conv2 = 0, conv3 = 0
    cdef Work W
    cdef int st
    # the sweeps share the item's budget with the iteration before them: an item that spent it
    # all (the caller's max_iter too small for it) stays as the iteration left it
    if j.conv[p] or j.status[p] != MF_OK or not (j.G[p] < INFINITY) or j.n_iter[p] >= j.max_iter:
        return
    if block == NULL:
        j.status[p] = MF_ENOMEM
        return
    W = make_work(block, n)
    u2 = <double *> (block + WORK_BYTES(n))
    u3 = u2 + n
    wrow = (j.w + (j.net_of[p] * j.w_stride if j.net_of != NULL else 0)) if net.g.nnz > 0 else NULL
    hrow = j.h + (j.net_of[p] * j.h_stride if j.net_of != NULL else 0)
    # from the fixed-point iteration's answer when it ran at least a window (it gave up on
    # progress or its budget: its point is the better start), else from the start
    if j.n_iter[p] >= PROG_WINDOW:
        irow = j.u + p * n
    else:
        irow = j.init + p * n if j.init != NULL else NULL
    rem = j.max_iter - j.n_iter[p]
    st = cd_item(net, wrow, hrow, j.clamp + p * n, irow, &W, j.tol, rem - rem // 4, &G2, u2,
                 &it2, &conv2)
    if st == MF_OK and not conv2 and G2 < INFINITY and rem - it2 > 0:
        polish = net[0]             # (a copy: the net is shared by the threads)
        polish.early_cd = 0
        if solve_item(&polish, wrow, hrow, j.clamp + p * n, u2, &W, j.tol, rem - it2, &G3, u3,
                      &it3, &conv3) == MF_OK and (conv3 or G3 < G2):
            G2 = G3
            conv2 = conv3
            for e in range(n):
                u2[e] = u3[e]
        it2 += it3
    if st == MF_OK and (conv2 or G2 < j.G[p]):
        j.G[p] = G2
        j.conv[p] = conv2
        for e in range(n):
            j.u[p * n + e] = u2[e]
    j.n_iter[p] += it2


cdef int run_solve(Net *net, const double *w, Py_ssize_t w_stride, const double *h,
                   Py_ssize_t h_stride, const intp_t *net_of, Py_ssize_t n_items,
                   const double *clamp, const double *init, double tol, Py_ssize_t max_iter,
                   int n_threads, int cd, double *G, double *u, intp_t *n_iter, int8_t *conv,
                   int8_t *status) noexcept nogil:
    """The solve of every item, arguments checked (net_of NULL: every item on net 0; init
    NULL: 0.5).  Returns MF_OK or MF_ENOMEM (nothing useful written); per item status as
    `solve` describes.  Threads run in plain C (mf_parallel_for): no interpreter needed."""
    cdef Py_ssize_t n = net.g.n, nnz = net.g.nnz
    cdef Py_ssize_t nbytes = WORK_BYTES(n)
    cdef int order = net.order, act = net.act, nt, t
    cdef Py_ssize_t p, q, n_blocks = 0, ng = -1, bbytes = 0, bcap, nb, sz, e
    cdef Group *groups = NULL
    cdef int use_blocks = 0
    cdef intp_t *bstart
    cdef char *ptrs[2 * MF_MAX_THREADS]
    cdef SolveJob job
    net.early_cd = order <= 12 and cd != 0
    if n_items == 0:
        return MF_OK
    # the blocked dense path: sigmoid units, G11/G12, every unit's parents one contiguous range
    # and few groups of units sharing them (a layered net)
    if act == SIGMOID and order <= 12 and nnz > 0 and n < (1 << 24):
        ng = find_groups(net, NULL)
        if ng > 0 and 4 * ng <= n:
            groups = <Group *> malloc(ng * sizeof(Group))
            if groups != NULL:
                find_groups(net, groups)
                use_blocks = 1
                bbytes = BLOCK_BYTES(n, nnz)
    # blocks: runs of consecutive items of one net, at most bcap items (the items alone decide)
    bcap = (n_items + BLOCK_SPLIT - 1) // BLOCK_SPLIT
    if bcap < BLOCK_LEAST:
        bcap = BLOCK_LEAST
    if bcap > BLOCK:
        bcap = BLOCK
    bstart = <intp_t *> malloc((n_items + 1) * sizeof(intp_t))
    if bstart == NULL:
        free(groups)
        return MF_ENOMEM
    # each run of one net in blocks of sz items, sz a multiple of 8 (the products' tiles are 8
    # patterns wide) near run / ceil(run / bcap); a last piece shorter than BLOCK_MIN is not
    # left alone: the rest is one block when it fits, else two halves
    p = 0
    while p < n_items:
        q = p + 1
        while q < n_items and (net_of == NULL or net_of[q] == net_of[p]):
            q += 1
        nb = (q - p + bcap - 1) // bcap
        sz = ((q - p + nb - 1) // nb + 7) // 8 * 8
        while p < q:
            e = p + sz if p + sz < q else q
            if 0 < q - e < BLOCK_MIN:
                e = q if q - p <= BLOCK else p + (q - p) // 2
            bstart[n_blocks] = p
            n_blocks += 1
            p = e
    bstart[n_blocks] = n_items
    job.net = net
    job.w = w
    job.w_stride = w_stride
    job.h = h
    job.h_stride = h_stride
    job.net_of = net_of
    job.clamp = clamp
    job.init = init
    job.tol = tol
    job.max_iter = max_iter
    job.G = G
    job.u = u
    job.n_iter = n_iter
    job.conv = conv
    job.status = status
    job.bstart = bstart
    job.groups = groups
    job.ng = ng
    job.use_blocks = use_blocks
    job.block = ptrs
    job.bmem = ptrs + MF_MAX_THREADS
    nt = mf_clamp_threads(n_threads, n_blocks)
    for t in range(nt):
        ptrs[t] = <char *> malloc(nbytes)
        ptrs[MF_MAX_THREADS + t] = <char *> malloc(bbytes) if use_blocks else NULL
    mf_parallel_for(n_blocks, nt, solve_body, &job)
    for t in range(nt):
        free(ptrs[t])
        free(ptrs[MF_MAX_THREADS + t])
    free(groups)
    free(bstart)
    # items left unconverged with a finite G: coordinate descent on G from the same start,
    # kept if it converges or ends lower (orders 11 and 12)
    q = 0
    if order <= 12 and cd:
        for p in range(n_items):
            if not conv[p] and status[p] == MF_OK and G[p] < INFINITY and n_iter[p] < max_iter:
                q += 1
    if q > 0:
        nt = mf_clamp_threads(n_threads, q)
        for t in range(nt):
            ptrs[t] = <char *> malloc(nbytes + 2 * n * sizeof(double))
        job.groups = NULL
        job.bstart = NULL
        mf_parallel_for(n_items, nt, cd_body, &job)
        for t in range(nt):
            free(ptrs[t])
    return MF_OK
