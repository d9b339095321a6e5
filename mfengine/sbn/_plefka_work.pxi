# The kernel's state (part of _plefka.pyx).  Net: the problem as every solver reads it (the
# structure, the activation and scheme, the solver's options).  Work: one thread's per-item
# arrays, carved from one scratch block of WORK_BYTES(n) bytes (make_work), so that a thread
# allocates once for all its items.  Then one item's setup: which units are fixed -- clamped,
# barren (no clamped descendant: summed out), or noisy-OR units surely off -- with their means
# (fix_units for a solve, eval_setup for an evaluation at given means), and after a solve the
# barren units' means from their parents' (set_barren_means).

cdef struct Net:
    Dag g           # the structure
    int act
    int order
    double t_max
    int accel       # 0: plain fixed-point steps; 1: quasi-Newton after the first line search; 2: always
    int sat_ok      # a unit on the bound |t| = t_max whose image lies beyond it counts as converged
    int early_cd    # coordinate descent follows: solve_item gives up once it stops making progress


cdef struct Work:
    double *M
    double *V
    double *T
    double *g0
    double *g1
    double *g2
    double *g3
    double *d0
    double *d1
    double *d2
    double *d3
    double *u
    double *v
    double *c
    double *ubar
    double *vbar
    double *cbar
    double *mbar
    double *A
    double *Abar
    double *t       # solver: current logits, trial logits, step, three gradient buffers
    double *tt
    double *dt
    double *ga
    double *gb
    double *gc
    double *q       # solver: dG/dt = v dG/du at t, its previous value, v at t, a direction
    double *qprev
    double *vcur
    double *dq
    double *Sm      # MEM x n steps and gradient changes (ring), 1 / (s.y), two-loop scratch
    double *Ym
    double *rho
    double *alph
    intp_t *touched
    int8_t *mark
    int8_t *fixed   # clamped units, barren ones and (noisy-OR) free units that are surely off
    uint8_t *barren # free units with no clamped descendant: no term at all (summed out)
    uint8_t *free_  # the item's free units (NaN in clamp), for mark_barren


cdef inline Py_ssize_t WORK_DOUBLES(Py_ssize_t n) noexcept nogil:
    return (30 + 2 * MEM) * n + 2 * MEM + 1


cdef inline Py_ssize_t WORK_BYTES(Py_ssize_t n) noexcept nogil:
    # the bytes after the doubles and indices rounded up to whole doubles: what follows a
    # block (cd_body's u2, mf_plefka_gradient's gu) stays aligned
    return WORK_DOUBLES(n) * sizeof(double) + n * sizeof(intp_t) + (4 * n + 23) // 8 * 8


cdef Work make_work(char *block, Py_ssize_t n) noexcept nogil:
    """Carve one thread's scratch block into the work arrays."""
    cdef Work W
    cdef double *d = <double *> block
    W.M = d
    W.V = d + n
    W.T = d + 2 * n
    W.g0 = d + 3 * n
    W.g1 = d + 4 * n
    W.g2 = d + 5 * n
    W.g3 = d + 6 * n
    W.d0 = d + 7 * n
    W.d1 = d + 8 * n
    W.d2 = d + 9 * n
    W.d3 = d + 10 * n
    W.u = d + 11 * n
    W.v = d + 12 * n
    W.c = d + 13 * n
    W.ubar = d + 14 * n
    W.vbar = d + 15 * n
    W.cbar = d + 16 * n
    W.mbar = d + 17 * n
    W.A = d + 18 * n
    W.Abar = d + 19 * n
    W.t = d + 20 * n
    W.tt = d + 21 * n
    W.dt = d + 22 * n
    W.ga = d + 23 * n
    W.gb = d + 24 * n
    W.gc = d + 25 * n
    W.q = d + 26 * n
    W.qprev = d + 27 * n
    W.vcur = d + 28 * n
    W.dq = d + 29 * n
    W.Sm = d + 30 * n
    W.Ym = d + (30 + MEM) * n
    W.rho = d + (30 + 2 * MEM) * n
    W.alph = W.rho + MEM
    W.touched = <intp_t *> (d + WORK_DOUBLES(n))
    W.mark = <int8_t *> (W.touched + n)
    W.fixed = W.mark + n
    W.barren = <uint8_t *> (W.fixed + n)
    W.free_ = W.barren + n
    memset(W.mark, 0, n)
    memset(W.barren, 0, n)
    memset(W.A, 0, n * sizeof(double))
    return W


cdef inline void set_barren_means(const Net *net, const double *w, const double *h,
                                  const uint8_t *barren, double *u) noexcept nogil:
    """The barren units' means from their parents' solved ones: sigmoid(h + W u), or the
    noisy-OR predictive 1 - e^{-h} prod (1 - u + u e^{-W}) (as in the strict-bound kernel)."""
    if net.act == SIGMOID:
        barren_means_sig(&net.g, w, h, barren, u)
    else:
        barren_means(&net.g, w, h, barren, u)


cdef Py_ssize_t fix_units(const Net *net, const double *w, const double *h, const double *clamp,
                          Work *W) noexcept nogil:
    """W.fixed, and u, v, c at the fixed units, for one item: the clamped units, the barren
    ones (summed out: every term of theirs left out, so G is the one of the net with them
    deleted), and (noisy-OR) the free units with zero bias whose weighted parents are all
    clamped off, surely off (u = 0, exact).  Returns the number of barren units."""
    cdef Py_ssize_t i, e, k, nb
    cdef double x
    cdef int surely_off
    nb = barren_of_clamp(&net.g, clamp, W.free_, W.barren)
    for i in range(net.g.n):
        x = clamp[i]
        W.fixed[i] = 1
        if x == x:
            W.u[i] = x
            W.v[i] = 0.0
            W.c[i] = 1.0 - 2.0 * x
            continue
        if W.barren[i]:
            W.u[i] = 0.0        # never read: no term of a barren unit is evaluated
            W.v[i] = 0.0
            W.c[i] = 1.0
            continue
        W.fixed[i] = 0
        if net.act == NOISY_OR and h[i] == 0.0:
            surely_off = 1
            for e in range(net.g.par_ptr[i], net.g.par_ptr[i + 1]):
                k = net.g.par_idx[e]
                if w[e] != 0.0 and not (W.fixed[k] and W.u[k] == 0.0):
                    surely_off = 0
                    break
            if surely_off:
                W.fixed[i] = 1
                W.u[i] = 0.0
                W.v[i] = 0.0
                W.c[i] = 1.0
    return nb


cdef double eval_setup(const Net *net, const double *clamp, const double *u,
                       Work *W) noexcept nogil:
    """W.fixed, W.barren and u, v, c of one item at the given means, for ``core`` (the
    evaluation entry points): clamped units at their values, barren ones left out (their u
    is not read), the free ones at u.  Returns the free units' sum u ln u + (1-u) ln(1-u)."""
    cdef Py_ssize_t i
    cdef double x, negH = 0.0
    barren_of_clamp(&net.g, clamp, W.free_, W.barren)
    for i in range(net.g.n):
        x = clamp[i]
        W.fixed[i] = x == x or W.barren[i]
        if W.barren[i]:
            x = 0.0
        elif not W.fixed[i]:
            x = u[i]
            if x > 0.0:
                negH = negH + x * log(x)
            if x < 1.0:
                negH = negH + (1.0 - x) * log1p(-x)
        W.u[i] = x
        W.v[i] = x * (1.0 - x)
        W.c[i] = 1.0 - 2.0 * x
    return negH


cdef void fill_net(Net *net, const Dag *g, int order, int act, int accel) noexcept nogil:
    net.g = g[0]
    net.order = order
    net.act = act
    net.t_max = T_MAX
    net.accel = accel
    net.sat_ok = 0
    net.early_cd = 0
