# The net in the kernel's layout and one pattern's cached statistics (part of _gaussian.pyx).
#
# Net: the weights of block l (layer l -> layer l + 1) stored transposed, so that row j holds
# unit j's outgoing weights, with their squares and the per-unit static bounds the 1-D
# maximiser uses.  Work: one thread's per-pattern arrays, carved from one scratch block.
# recompute_stats gives m, s and sig of every unit exactly from the means; pattern_bound
# adds up the bound from them.

cdef struct Net:
    Py_ssize_t n_layers
    Py_ssize_t n_units
    const intp_t *sizes
    const intp_t *offset      # first unit of layer l
    const intp_t *woff        # first weight of block l (layer l -> layer l+1)
    const double *WT          # block l: (sizes[l], sizes[l+1]), row j = unit j's outgoing weights
    const double *WT2         # squares of WT
    const double *bias
    const int8_t *need_u      # layer l's u cache is read (some parent's 1-D problem may be non-concave)
    const double *jmax        # per hidden unit: max_c |J_ck|, max_c J_ck^2, and
    const double *j2max       #   C2 = 1/4 sum_c (|J_ck| + J_ck^2 / 2)^2 (a curvature bound)
    const double *c2

cdef struct Work:
    double *t           # logit of mu for hidden units (mu = sigmoid(t)); kept beside mu
    double *m
    double *s
    double *sig
    double *u           # 1 + e^{-|a|}, a = m + (1/2 - xi) s: log(1 + e^a) = max(a, 0) + log u
    double *buf0        # sig and u at trial points (two of each: trial and best)
    double *buf1
    double *buf2
    double *ubuf0
    double *ubuf1
    double *ubuf2
    double *ones
    double *obs
    int any_missing     # some visible unit of the current pattern is missing
    double gain_tol     # a mu update whose predicted gain in L is below this is not made
    const double *net_jmax   # the net's per-unit static bounds (see Net)
    const double *net_j2max
    const double *net_c2


cdef void init_logits(const Net *net, double *mu, Work *w) noexcept nogil:
    """t = logit(mu) for every hidden unit, clamped to |t| <= T_MAX, and mu = sigmoid(t)."""
    cdef Py_ssize_t i
    cdef double t, p
    for i in range(net.offset[net.n_layers - 1]):
        p = mu[i]
        if p <= 0.0:
            t = -T_MAX
        elif p >= 1.0:
            t = T_MAX
        else:
            t = log(p) - log(1.0 - p)
            t = -T_MAX if t < -T_MAX else (T_MAX if t > T_MAX else t)
        w.t[i] = t
        mu[i] = mf_sigmoid(t)


cdef void recompute_stats(const Net *net, const double *mu, const double *xi, Work *w) noexcept nogil:
    """m, s and sig of every unit, exactly, from the current means."""
    cdef Py_ssize_t l, j, c, nc, npar, coff, poff, i
    cdef const double *row
    cdef const double *row2
    cdef double muj, vj
    cdef double *m = w.m
    cdef double *s = w.s
    for i in range(net.sizes[0]):
        m[i] = net.bias[i]
        s[i] = 0.0
    for l in range(net.n_layers - 1):
        npar = net.sizes[l]
        nc = net.sizes[l + 1]
        poff = net.offset[l]
        coff = net.offset[l + 1]
        for c in range(nc):
            m[coff + c] = net.bias[coff + c]
            s[coff + c] = 0.0
        for j in range(npar):
            muj = mu[poff + j]
            vj = muj * (1.0 - muj)
            row = net.WT + net.woff[l] + j * nc
            row2 = net.WT2 + net.woff[l] + j * nc
            for c in range(nc):
                m[coff + c] += row[c] * muj
                s[coff + c] += row2[c] * vj
    mf_sbn_sig_u_all(net.n_units, m, s, xi, w.sig, w.u)


cdef double pattern_bound(const Net *net, const double *mu, const double *xi, const Work *w) noexcept nogil:
    """L(mu, xi) from the cached m and s (Saul & Jordan eq. 24; missing visible terms left out)."""
    cdef Py_ssize_t vis_off = net.offset[net.n_layers - 1]
    cdef double total = mf_sbn_layer_bound(vis_off, mu, w.t, w.m, w.s, xi, NULL)
    total += mf_sbn_layer_bound(net.sizes[net.n_layers - 1], mu + vis_off, NULL, w.m + vis_off,
                                w.s + vis_off, xi + vis_off, w.obs)
    return total


cdef inline Py_ssize_t WORK_SIZE(Py_ssize_t U, Py_ssize_t width, Py_ssize_t nv) noexcept nogil:
    return 5 * U + 7 * width + nv


cdef Work make_work(double *scratch, const Net *net, Py_ssize_t width, Py_ssize_t nv,
                    double gain_tol=0.0) noexcept nogil:
    """Carve one thread's scratch block into the per-pattern work arrays."""
    cdef Work w
    cdef Py_ssize_t i, U = net.n_units
    w.gain_tol = gain_tol
    w.net_jmax = net.jmax
    w.net_j2max = net.j2max
    w.net_c2 = net.c2
    w.any_missing = 0
    w.m = scratch
    w.s = scratch + U
    w.sig = scratch + 2 * U
    w.t = scratch + 3 * U
    w.u = scratch + 4 * U
    w.buf0 = scratch + 5 * U
    w.buf1 = scratch + 5 * U + width
    w.buf2 = scratch + 5 * U + 2 * width
    w.ubuf0 = scratch + 5 * U + 3 * width
    w.ubuf1 = scratch + 5 * U + 4 * width
    w.ubuf2 = scratch + 5 * U + 5 * width
    w.ones = scratch + 5 * U + 6 * width
    w.obs = scratch + 5 * U + 7 * width
    for i in range(width):
        w.ones[i] = 1.0
    return w


cdef void update_static(const Net *net, int8_t *need_u, double *jmax, double *j2max,
                        double *c2) noexcept nogil:
    """The 1-D maximiser's static bounds, from the weights (they move during learning).

    need_u[l + 1] = 1 when some unit of layer l has sum_c J_ck^2 >= 4: its 1-D problem may be
    non-concave, and its children keep the u cache; below 4 it is certainly concave.  For each
    hidden unit: max_c |J_ck|, max_c J_ck^2 and C2 = 1/4 sum_c (|J_ck| + J_ck^2 / 2)^2.  The
    entries of the visible layer and need_u[0] are left as they are (zero)."""
    cdef Py_ssize_t l, j, c, nc, k
    cdef const double *row
    cdef const double *row2
    cdef double tot, a, mx, mx2, cc
    for l in range(net.n_layers - 1):
        nc = net.sizes[l + 1]
        need_u[l + 1] = 0
        for j in range(net.sizes[l]):
            k = net.offset[l] + j
            row = net.WT + net.woff[l] + j * nc
            row2 = net.WT2 + net.woff[l] + j * nc
            tot = 0.0
            mx = 0.0
            mx2 = 0.0
            cc = 0.0
            for c in range(nc):
                tot += row2[c]
                a = fabs(row[c])
                mx = a if a > mx else mx
                mx2 = row2[c] if row2[c] > mx2 else mx2
                cc += (a + 0.5 * row2[c]) * (a + 0.5 * row2[c])
            jmax[k] = mx
            j2max[k] = mx2
            c2[k] = 0.25 * cc
            if tot >= 4.0 * (1.0 - 1e-9):
                need_u[l + 1] = 1
