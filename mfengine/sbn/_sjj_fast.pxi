# The fast sigmoid path's Cython side (part of _sjj.pyx).
#
# The sweep itself is plain C (csrc/mf_sjj_fast.c, declared in csrc/mf_sjj.h); this file
# decides which items take it (net_is_fast: FAST_SCALE), lays out its state in the thread's
# scratch (fast_extra, barren_extra; the per-unit records of large nets, REC_MIN_UNITS),
# computes the reported bound from its result (fast_bound_at, with the careful evaluation of
# the units whose parents are all clamped), cuts barren units off an item on either path
# (solve_item_cut), and solves one sigmoid item on the path that fits (solve_item_sig).  Also
# the benchmarks' same-run switches of the large-net layouts (_set_prefetch, _set_records).

DEF REC_MIN_UNITS = 16384   # units from which the fast path keeps a record per unit (MF_SJJ_REC)
DEF FAST_SCALE = 256.0  # |h_i| + sum_in |W|, and sum_out |W|, at most this for every unit: fast path

# The benchmarks' same-run switch of the large-net layout (the answers do not depend on it):
# one interleaved record per unit from REC_MIN_UNITS units (the prefetch switch is the C's).
cdef bint records_on = True


def _set_prefetch(bint on):
    """Whether the sweeps prefetch the next unit's scattered state on large nets (for the
    benchmarks' same-run comparisons; the answers do not depend on it); returns the previous
    setting."""
    cdef bint old = mf_sjj_fast_set_prefetch(on)
    return old


def _set_records(bint on):
    """Whether the fast sigmoid sweep keeps one interleaved record per unit on large nets (for
    the benchmarks' same-run comparisons; the answers do not depend on it); returns the
    previous setting."""
    global records_on
    cdef bint old = records_on
    records_on = on
    return old


cdef inline Py_ssize_t fast_extra(Py_ssize_t n, Py_ssize_t nnz, Py_ssize_t maxin,
                                  Py_ssize_t maxout) noexcept nogil:
    """Doubles of thread scratch beyond the careful path's 14 n + 3 nnz doubles: 3 n bytes
    (free, big or careful, barren units; rounded up), the fast path's per-unit trial and
    per-child scratch, the net cache (weights in child order, e^w), the units' records on
    large nets (REC_MIN_UNITS; 8 n doubles, and 8 to align them to 64 bytes), e^w in child
    order and two more per-child arrays (records mode), and the key.  When some item has
    barren units, BARREN_EXTRA more after the key (see solve_item_sig)."""
    return (3 * n + 15) // 8 + 1 + 2 * maxin + 7 * maxout + 4 * nnz + 8 * n + 8 + 2


cdef inline Py_ssize_t barren_extra(Py_ssize_t nnz) noexcept nogil:
    """Doubles of thread scratch after the key for an item with barren units: its copies of the
    child-order weights and e^w with the edges into them cut (fast path), or of the weights
    (careful path) in the same place."""
    return 2 * nnz


cdef int net_is_fast(const Dag *g, const double *w, const double *h) noexcept nogil:
    """1 if every unit has |h_i| + sum |W| over its in-edges and sum |W| over its out-edges
    both at most FAST_SCALE (then no product of the fast path leaves the double range)."""
    cdef Py_ssize_t i, k
    cdef double s, t
    for i in range(g.n):
        s = fabs(h[i])
        for k in range(g.par_ptr[i], g.par_ptr[i + 1]):
            s += fabs(w[k])
        t = 0.0
        for k in range(g.ch_ptr[i], g.ch_ptr[i + 1]):
            t += fabs(w[g.ch_w[k]])
        if not (s <= FAST_SCALE and t <= FAST_SCALE):
            return 0
    return 1


cdef double fast_bound_at(const Dag *g, const double *w, const double *h, const mf_sjj_fast_state *s,
                          const uint8_t *skip, uint8_t *careful, double *scratch) noexcept nogil:
    """bound_at's value for a net on the fast path (within FAST_SCALE, see net_is_fast, so
    no product below over- or underflows), with one exponential and no logarithm per edge.

    A unit whose parents are all clamped is evaluated as bound_at does (exactly ln f(z) or
    ln(1 - f(z)) when the unit is clamped too).  Any other unit's term is computed as
    (mu - xi) Z - ln(e^{-xi h} prod FA + e^{(1 - xi) h} prod FB), FA = nu + mu e^{-xi W},
    FB = nu + mu e^{(1 - xi) W}, and carries the allowance (fan-in + 8) eps M' with
    M' = |h| + |Z| + |term| + 1 + sum over parents (4 |W| + 1).  Units marked in ``skip``
    (NULL: none) are left out.  That covers its rounding:
    each factor is within 8 u + |W| u of its value (u = eps / 2: an exponential of 2 ulp, the
    rounding of x W, of e^W and of the sum), so ln of the product of the k factors is within
    u (10 k + sum |W|) plus u |ln S|, ln S itself within |h| + sum |W| + 1 of 0; Z is within
    (k + 1) u (|h| + sum |W|), and the last three operations add u (|Z| + |ln S| + |term|):
    all of it below 2 (k + 8) u M' term by term.  (M' replaces bound_at's |ea| + |eb| per
    free parent by its upper bound |W|: 0 <= ea <= |xi W| and 0 <= eb <= |(1 - xi) W|.)"""
    cdef double total = 0.0, err = 0.0
    cdef Py_ssize_t i, nnz = g.nnz
    mf_sjj_fast_final(s, skip, careful, &total, &err)
    for i in range(g.n):
        if careful[i]:
            unit_bound(g, w, h, i, s.mu, s.nu, s.xi, s.free_, scratch, scratch + nnz,
                       scratch + 2 * nnz, &total, &err)
    return total - err


cdef int solve_item_cut(const Dag *g, const double *w, const double *h, const double *clamp,
                        double *mu, double *xi, double *hist, double tol, double gtol,
                        Py_ssize_t max_sweeps, double *work, double *bound_out,
                        intp_t *sweeps_out, const uint8_t *barren, Py_ssize_t n_barren,
                        double *wb) noexcept nogil:
    """solve_item with the n_barren units marked in ``barren`` cut off (their in-edges' weights
    set to 0 in the copy ``wb`` of w) and left out of the reported bound, their means then set
    by barren_means_sig."""
    cdef Py_ssize_t i, e
    cdef int converged
    if n_barren == 0:
        return solve_item(g, w, h, clamp, mu, xi, hist, tol, gtol, max_sweeps, work,
                          bound_out, sweeps_out, NULL)
    for e in range(g.nnz):
        wb[e] = w[e]
    for i in range(g.n):
        if barren[i]:
            for e in range(g.par_ptr[i], g.par_ptr[i + 1]):
                wb[e] = 0.0
    converged = solve_item(g, wb, h, clamp, mu, xi, hist, tol, gtol, max_sweeps, work,
                           bound_out, sweeps_out, barren)
    barren_means_sig(g, w, h, barren, mu)
    return converged


cdef int solve_item_sig(const Dag *g, const intp_t *pos, Py_ssize_t net, const double *w,
                        const double *h, const double *clamp, double *mu, double *xi,
                        double *hist, double tol, double gtol, Py_ssize_t max_sweeps,
                        double *work, Py_ssize_t maxin, Py_ssize_t maxout, bint room,
                        double *bound_out, intp_t *sweeps_out) noexcept nogil:
    """One sigmoid item: the fast path where the net's scale allows it (FAST_SCALE), the
    careful one (solve_item) otherwise; the reported bound is bound_at's either way.
    ``room``: the thread's scratch has barren_extra(nnz) doubles after the key (run_items
    gives them whenever some item has a free unit without children, which every item with a
    barren unit has).

    Barren units (free, every child barren: no clamped descendant) sum out exactly, as in the
    noisy-OR kernel: they are cut off from the rest of the item's solve, so that its bound is
    the one of the net with them deleted, and their means are then set by barren_means_sig.
    A cut edge's factors are those of a zero weight, 1, so that the parent's mean update sees
    no pull from that child (R = P exactly).  The fast path skips the barren units (no xi
    step, no mean update, no term) and reads the cut edges' child-order weight and e^w from
    copies holding 0 and 1 there; the careful path solves the net with the weights into them
    set to 0 (each barren unit then goes to its own optimum, where its term is 0) and leaves
    them out of the reported bound."""
    cdef Py_ssize_t n = g.n, nnz = g.nnz, i, q, e, n_barren = 0
    cdef double *extra = work + 14 * n + 3 * nnz + (3 * n + 15) // 8 + 1
    cdef double *ta = extra
    cdef double *tb = ta + maxin
    cdef double *Ph = tb + maxin
    cdef double *Rh = Ph + maxout
    cdef double *iA = Rh + maxout
    cdef double *iB = iA + maxout
    cdef double *Iv = iB + maxout
    cdef double *wq = Iv + maxout
    cdef double *ew = wq + nnz
    # the units' records (MF_SJJ_REC doubles each, 64-byte aligned), then the key
    cdef double *rec = <double *> ((<uintptr_t> (ew + 2 * nnz) + 63) & ~(<uintptr_t> 63))
    cdef double *ewq = ew + 2 * nnz + 8 * n + 8
    cdef double *Aq = ewq + nnz
    cdef double *Bq = Aq + maxout
    cdef intp_t *key = <intp_t *> (Bq + maxout)    # [net cached, its fast flag]
    # (room) the item's copies with the edges into barren units cut: the weights (careful
    # path), or in the same place the child-order weights and e^w (fast path)
    cdef double *wb = <double *> (key + 2)
    cdef double *wqb = wb
    cdef double *ewqb = wqb + nnz
    cdef uint8_t *free_ = <uint8_t *> (work + 14 * n + 3 * nnz)
    cdef uint8_t *barren = free_ + 2 * n
    cdef mf_sjj_fast_state s
    cdef int converged
    cdef bint records = n >= REC_MIN_UNITS and records_on
    if room:                     # (without room no item of the run has a barren unit)
        barren_of_clamp(g, clamp, free_, barren)
        for i in range(n):
            n_barren += barren[i]
    if key[0] == -2:
        return solve_item_cut(g, w, h, clamp, mu, xi, hist, tol, gtol, max_sweeps, work,
                              bound_out, sweeps_out, barren, n_barren, wb)
    if key[0] != net:
        key[0] = net
        key[1] = net_is_fast(g, w, h)      # zeroing weights keeps a net fast
        if key[1]:
            for q in range(nnz):
                wq[q] = w[g.ch_w[q]]
                ew[q] = exp(w[q])
            for q in range(nnz):
                ewq[q] = ew[g.ch_w[q]]
    if not key[1]:
        return solve_item_cut(g, w, h, clamp, mu, xi, hist, tol, gtol, max_sweeps, work,
                              bound_out, sweeps_out, barren, n_barren, wb)
    s.wq = wq
    s.ew = ew
    s.ewq = ewq
    s.skip = NULL
    if n_barren:
        for q in range(nnz):
            wqb[q] = wq[q]
            ewqb[q] = ewq[q]
        for i in range(n):
            if barren[i]:
                for e in range(g.par_ptr[i], g.par_ptr[i + 1]):
                    wqb[pos[e]] = 0.0
                    ewqb[pos[e]] = 1.0
        s.wq = wqb
        s.ewq = ewqb
        s.skip = barren
    s.n = n
    s.par_ptr = g.par_ptr
    s.par_idx = g.par_idx
    s.ch_ptr = g.ch_ptr
    s.ch_idx = g.ch_idx
    s.ch_w = g.ch_w
    s.pos = pos
    s.pfirst = pos + nnz
    s.cfirst = pos + nnz + n
    s.w = w
    s.h = h
    s.Aq = Aq
    s.Bq = Bq
    s.free_ = free_
    s.mu = mu
    s.nu = work
    s.t = work + n
    s.xi = xi
    s.Z = work + 2 * n
    s.pa = work + 3 * n
    s.pb = work + 4 * n
    s.lnS = work + 5 * n
    s.isacc = work + 6 * n
    s.gA = work + 7 * n
    s.gB = work + 8 * n
    s.hA2 = work + 9 * n
    s.hB2 = work + 10 * n
    s.gD = work + 11 * n
    s.al = work + 12 * n
    s.be = work + 13 * n
    s.ap = work + 14 * n
    s.bp = work + 14 * n + nnz
    s.aq = work + 14 * n + 2 * nnz
    s.bq = extra + 2 * maxin + 5 * maxout + 2 * nnz
    s.ta = ta
    s.tb = tb
    s.Ph = Ph
    s.Rh = Rh
    s.iA = iA
    s.iB = iB
    s.Iv = Iv
    s.stride = 1
    init_means(n, clamp, mu, s.nu, s.t, free_)
    for i in range(n):
        if not (0.0 <= xi[i] <= 1.0):
            xi[i] = 0.5
    if records:
        # a large net, whose state outgrows the caches: each unit's mu, nu, pa, pb, xi, Z and
        # S-ratio in one 64-byte record, so that the sweep's scattered reads of a parent or a
        # child cost one cache miss each instead of one per array (the same arithmetic)
        for i in range(n):
            rec[8 * i] = mu[i]
            rec[8 * i + 1] = s.nu[i]
            rec[8 * i + 4] = xi[i]
        s.mu = rec
        s.nu = rec + 1
        s.pa = rec + 2
        s.pb = rec + 3
        s.xi = rec + 4
        s.Z = rec + 5
        s.isacc = rec + 6
        s.stride = MF_SJJ_REC
    converged = mf_sjj_fast_solve(&s, hist, tol, gtol, max_sweeps, REL_FLOOR, sweeps_out)
    if records:
        for i in range(n):
            mu[i] = rec[8 * i]
            work[i] = rec[8 * i + 1]
            xi[i] = rec[8 * i + 4]
        s.mu = mu
        s.nu = work
        s.xi = xi
        s.stride = 1
    # the reported bound: from scratch, with its rounding allowance
    bound_out[0] = fast_bound_at(g, w, h, &s, barren if n_barren else NULL, free_ + n,
                                 work + 14 * n)
    if hist != NULL:
        hist[sweeps_out[0]] = bound_out[0]
    if n_barren:
        barren_means_sig(g, w, h, barren, mu)
    return converged
