# The blocked dense path (part of _plefka.pyx).  Layered (dense) nets: every unit's parents
# are one contiguous range of units and consecutive units share it (a "group": rows i0..i1 of
# a dense weight matrix over parents p0..p0+K, stored contiguously in w; find_groups).  A block
# of patterns of one net is then evaluated together (block_eval): the means of all its
# patterns as (unit x pattern) arrays, Mbar and V by matrix products (mf_gemm_nn), the
# per-unit terms lane-wise (csrc/mf_plefka_lanes.c), the reverse pass by transposed products
# (mf_gemm_tn).  Each pattern runs the same solver as solve_item (the same steps, tests and
# line search) as a resumable state machine (_plefka_pattern.pxi): every round of solve_block
# evaluates the pending trial points of all unfinished patterns of the block at once.  Blocks
# are cut from the items alone (runs of one net, at most BLOCK items, fewer when the items are
# few: see run_solve), never from the thread count; a pattern's answer does not depend on the
# block it shares either (its state machine is its own and every product sums in one fixed
# order), so the answers are the same for any number of threads.

DEF BLOCK = 64          # patterns per block, at most
DEF BLOCK_SPLIT = 32    # items are cut into at least this many blocks while a block keeps ...
DEF BLOCK_LEAST = 16    # ... at least this many patterns: the threads' shares then differ by
                        # at most about half a block (1000 patterns: 32 blocks of 32, which
                        # two threads split 1.90x against 1.83x with 16 blocks of 64)
DEF BLOCK_MIN = 8       # shorter runs of one net go through the per-item path


cdef struct Group:
    Py_ssize_t i0       # rows i0..i1-1
    Py_ssize_t i1
    Py_ssize_t p0       # parents p0..p0+K-1
    Py_ssize_t K
    Py_ssize_t e0       # w[e0 + (i - i0) K + j] = w_{i, p0 + j}


cdef void block_eval(const Net *net, const Group *groups, Py_ssize_t n_groups, const double *w,
                     const double *w2, const double *h, double *bw, const intp_t *rowfree,
                     const intp_t *rowbarren, const uint8_t *BM, Py_ssize_t m,
                     int refresh) noexcept nogil:
    """G and dG/du (free lanes) of m patterns at once; lane-major arrays of stride m in bw.
    Rows of units fixed in every lane keep their means from the last call unless refresh.
    Lanes marked in BM (row-major n x m; rowbarren[k] of them in row k) are barren units:
    their terms are left out of F and nothing of theirs reaches their parents."""
    cdef Py_ssize_t n = net.g.n, k, l, g, nr, a
    cdef int order = net.order
    cdef double *T = bw
    cdef double *UF = bw + n * m
    cdef double *U = bw + 2 * n * m
    cdef double *Vv = bw + 3 * n * m
    cdef double *C = bw + 4 * n * m
    cdef double *M = bw + 5 * n * m
    cdef double *V = bw + 6 * n * m
    cdef double *UB = bw + 7 * n * m
    cdef double *MB = bw + 8 * n * m
    cdef double *VB = bw + 9 * n * m
    cdef double *GUM = bw + 10 * n * m
    cdef double *VBAR = bw + 11 * n * m
    cdef double *GU = bw + 12 * n * m
    cdef double *negH = bw + 13 * n * m
    cdef double *F = negH + m
    cdef double *Fk = F + m         # row k's terms alone, when some of its lanes are barren
    cdef double *Fr
    cdef const Group *gr
    cdef int need
    for l in range(m):
        negH[l] = 0.0
        F[l] = 0.0
    for k in range(n):
        if rowfree[k] == m:
            mfp_means_free(m, T + k * m, U + k * m, Vv + k * m, C + k * m, negH)
        elif refresh or rowfree[k] > 0:
            mfp_means_mixed(m, rowfree[k] == 0, T + k * m, UF + k * m, U + k * m, Vv + k * m,
                            C + k * m, negH, GU)
        for l in range(m):
            M[k * m + l] = h[k]
            V[k * m + l] = 0.0
            GUM[k * m + l] = 0.0
            VBAR[k * m + l] = 0.0
    for g in range(n_groups):
        gr = &groups[g]
        nr = gr.i1 - gr.i0
        # M[i] += sum_j w_ij U[j], V[i] += sum_j w_ij^2 Vv[j]   (rows: units, lanes: patterns)
        mf_gemm_nn(nr, m, gr.K, w + gr.e0, gr.K, U + gr.p0 * m, m, M + gr.i0 * m, m)
        if order >= 12:
            mf_gemm_nn(nr, m, gr.K, w2 + gr.e0, gr.K, Vv + gr.p0 * m, m, V + gr.i0 * m, m)
    for k in range(n):
        Fr = F
        if rowbarren[k]:
            Fr = Fk
            for l in range(m):
                Fk[l] = 0.0
        if order >= 12:
            mfp_sig_coef12(m, M + k * m, U + k * m, V + k * m, Fr, UB + k * m, MB + k * m,
                           VB + k * m)
        else:
            mfp_sig_coef11(m, M + k * m, U + k * m, Fr, UB + k * m, MB + k * m)
        if rowbarren[k]:
            for l in range(m):
                if BM[k * m + l]:
                    UB[k * m + l] = 0.0
                    MB[k * m + l] = 0.0
                    if order >= 12:
                        VB[k * m + l] = 0.0
                else:
                    F[l] += Fk[l]
    for g in range(n_groups):
        gr = &groups[g]
        need = 0
        for a in range(gr.p0, gr.p0 + gr.K):
            if rowfree[a]:
                need = 1
                break
        if not need:
            continue
        nr = gr.i1 - gr.i0
        # GUM[j] += sum_i w_ij MB[i], VBAR[j] += sum_i w_ij^2 VB[i]   (the reverse pass)
        mf_gemm_tn(gr.K, m, nr, w + gr.e0, gr.K, MB + gr.i0 * m, m, GUM + gr.p0 * m, m)
        if order >= 12:
            mf_gemm_tn(gr.K, m, nr, w2 + gr.e0, gr.K, VB + gr.i0 * m, m, VBAR + gr.p0 * m, m)
    for k in range(n):
        if rowfree[k]:
            mfp_gu_row(m, order, UB + k * m, VBAR + k * m, C + k * m, GUM + k * m, T + k * m,
                       GU + k * m)
    for l in range(m):
        F[l] = negH[l] + F[l]


cdef void solve_block(const Net *net, const Group *groups, Py_ssize_t n_groups, const double *w,
                      const double *h, const double *clamp, const double *init, Py_ssize_t cnt,
                      char *mem, double tol, Py_ssize_t max_iter, double *G_out, double *u_out,
                      intp_t *n_iter, int8_t *conv, int8_t *status) noexcept nogil:
    """Solve cnt consecutive items of one net (rows of clamp/init/u_out of length n)."""
    cdef Py_ssize_t n = net.g.n, nnz = net.g.nnz, a, i, j, k, l, m, e, nf
    cdef double *bw = <double *> mem
    cdef double *w2 = bw + 13 * n * BLOCK + 3 * BLOCK
    cdef double *psd = w2 + nnz
    cdef PS *ps = <PS *> (psd + BLOCK * PS_DOUBLES(n))
    cdef intp_t *lanes = <intp_t *> (ps + BLOCK)
    cdef intp_t *rowfree = lanes + BLOCK
    cdef intp_t *fis = rowfree + n
    cdef intp_t *rowbarren = fis + BLOCK * n
    cdef uint8_t *psb = <uint8_t *> (rowbarren + n)     # BLOCK x n: each pattern's barren units
    cdef uint8_t *BM = psb + BLOCK * n                  # n x m: the same, lane-major
    cdef uint8_t *free_ = BM + BLOCK * n
    cdef PS *P
    cdef double x, tmax = net.t_max
    cdef double *T
    cdef double *UF
    cdef double *GU
    cdef double *U
    cdef double *V
    cdef double *Gv
    cdef Py_ssize_t prev_m = -1
    cdef int changed
    for e in range(nnz):
        w2[e] = w[e] * w[e]
    for a in range(cnt):
        P = &ps[a]
        ps_carve(P, psd + a * PS_DOUBLES(n), fis + a * n, n)
        P.it = 0
        P.ls = 0
        P.mem = 0
        P.head = 0
        P.stalls = 0
        P.pending = 0
        P.qn = net.accel == 2
        P.status = MF_OK
        P.conv = 0
        P.G = INFINITY
        P.barren = psb + a * n
        P.n_barren = barren_of_clamp(&net.g, clamp + a * n, free_, P.barren)
        nf = 0
        for i in range(n):
            x = clamp[a * n + i]
            if x == x or P.barren[i]:
                P.uf[i] = x if x == x else 0.0  # a barren lane: fixed, its terms left out
                continue
            P.uf[i] = NAN
            P.fi[nf] = i
            x = 0.5 if init == NULL else init[a * n + i]
            if x <= 0.0:
                x = -tmax
            elif x >= 1.0:
                x = tmax
            else:
                x = log(x) - log1p(-x)
                x = -tmax if x < -tmax else (tmax if x > tmax else x)
            P.t[nf] = x
            P.tt[nf] = x
            nf += 1
        P.nf = nf
        P.phase = PH_INIT
    while True:
        m = 0
        for a in range(cnt):
            if ps[a].phase != PH_DONE:
                lanes[m] = a
                m += 1
        if m == 0:
            break
        T = bw
        UF = bw + n * m
        changed = m != prev_m       # finished patterns never come back: same m, same lanes
        prev_m = m
        if changed:
            for k in range(n):
                rowfree[k] = 0
                rowbarren[k] = 0
            for l in range(m):
                P = &ps[lanes[l]]
                for j in range(P.nf):
                    rowfree[P.fi[j]] += 1
                if P.n_barren:
                    for k in range(n):
                        BM[k * m + l] = P.barren[k]
                        rowbarren[k] += P.barren[k]
                else:
                    for k in range(n):
                        BM[k * m + l] = 0
            for k in range(n):
                if rowfree[k] < m:
                    for l in range(m):
                        UF[k * m + l] = ps[lanes[l]].uf[k]
                        T[k * m + l] = 0.0
        for l in range(m):
            P = &ps[lanes[l]]
            for j in range(P.nf):
                T[P.fi[j] * m + l] = P.tt[j]
        block_eval(net, groups, n_groups, w, w2, h, bw, rowfree, rowbarren, BM, m, changed)
        GU = bw + 12 * n * m
        U = bw + 2 * n * m
        V = bw + 3 * n * m
        Gv = bw + 13 * n * m + m
        for l in range(m):
            a = lanes[l]
            P = &ps[a]
            for j in range(P.nf):
                k = P.fi[j] * m + l
                P.gtry[j] = GU[k]
                P.utry[j] = U[k]
                P.vtry[j] = V[k]
            x = Gv[l]
            if not ps_consume(net, P, x, MF_OK if fabs(x) < INFINITY else MF_EOVERFLOW, tol,
                              max_iter):
                ps_finish(net, P, &G_out[a], &u_out[a * n], &n_iter[a], &conv[a], &status[a])
                if P.n_barren:
                    set_barren_means(net, w, h, P.barren, &u_out[a * n])


cdef inline Py_ssize_t BLOCK_BYTES(Py_ssize_t n, Py_ssize_t nnz) noexcept nogil:
    return ((13 * n * BLOCK + 3 * BLOCK + nnz + BLOCK * PS_DOUBLES(n)) * sizeof(double)
            + BLOCK * sizeof(PS) + (BLOCK + 2 * n + BLOCK * n) * sizeof(intp_t)
            + 2 * BLOCK * n + n + 64)


cdef Py_ssize_t find_groups(const Net *net, Group *groups) noexcept nogil:
    """The dense groups of the structure (groups may be NULL: count only), or -1 when some
    unit's parents are not one contiguous range of units."""
    cdef Py_ssize_t n = net.g.n, i, j, e0, K, p0, ng = 0
    cdef Py_ssize_t cur_p0 = -1, cur_K = -1
    for i in range(n):
        e0 = net.g.par_ptr[i]
        K = net.g.par_ptr[i + 1] - e0
        if K == 0:
            cur_K = -1
            continue
        p0 = net.g.par_idx[e0]
        for j in range(K):
            if net.g.par_idx[e0 + j] != p0 + j:
                return -1
        if K == cur_K and p0 == cur_p0:
            if groups != NULL:
                groups[ng - 1].i1 = i + 1
            continue
        if groups != NULL:
            groups[ng].i0 = i
            groups[ng].i1 = i + 1
            groups[ng].p0 = p0
            groups[ng].K = K
            groups[ng].e0 = e0
        ng += 1
        cur_K = K
        cur_p0 = p0
    return ng
