# One pattern of the blocked path as a resumable state machine (part of _plefka.pyx).  PS holds
# what are solve_item's locals, over the pattern's free units only; ``ps_begin`` runs the head
# of solve_item's loop (the convergence test, the curvature pair of the last step, the next
# direction) and sets the full step's trial point; ``ps_consume`` takes G, dG/du, u and v at
# the pending trial point (evaluated for the whole block at once by block_eval) and sets the
# next one -- a line-search point, or the next iteration's full step -- or finishes the pattern
# (``ps_finish``).  The steps, tests and line search are solve_item's; the reductions run in
# the four partial sums of mfp_dot (csrc/mf_plefka.h).

# the phase of a pattern: its first point pending, a full step pending, a line-search point
# pending, finished
DEF PH_INIT = 0
DEF PH_FULL = 1
DEF PH_LS = 2
DEF PH_DONE = 3


cdef struct PS:         # one pattern's solver state (solve_item's locals), over its free units
    Py_ssize_t nf       # free units fi[0..nf)
    intp_t *fi
    uint8_t *barren     # n: the pattern's barren units (fixed lanes whose terms are left out)
    Py_ssize_t n_barren
    double *uf          # n: the fixed units' values, NaN at free ones
    double *t           # nf each: logits, trial logits, step, dG/du at t / trial / lo,
    double *tt          # u and v at t / trial / lo, dG/dt at t and before, a direction
    double *dt
    double *gcur
    double *gtry
    double *glo
    double *ucur
    double *utry
    double *ulo
    double *vcur
    double *vtry
    double *vlo
    double *q
    double *qprev
    double *dq
    double *Sm          # MEM x nf
    double *Ym
    double rho[MEM]
    double alph[MEM]
    double G
    double D
    double noise
    double lo
    double hi
    double flo
    double fhi
    double dlo
    double dhi
    double lam
    Py_ssize_t it
    Py_ssize_t ls
    Py_ssize_t mem
    Py_ssize_t head
    Py_ssize_t stalls
    int pending
    int qn
    int phase
    int status
    int8_t conv


cdef inline Py_ssize_t PS_DOUBLES(Py_ssize_t n) noexcept nogil:
    return (16 + 2 * MEM) * n + n


cdef void ps_carve(PS *P, double *d, intp_t *fi, Py_ssize_t n) noexcept nogil:
    P.uf = d
    d = d + n
    P.t = d
    P.tt = d + n
    P.dt = d + 2 * n
    P.gcur = d + 3 * n
    P.gtry = d + 4 * n
    P.glo = d + 5 * n
    P.ucur = d + 6 * n
    P.utry = d + 7 * n
    P.ulo = d + 8 * n
    P.vcur = d + 9 * n
    P.vtry = d + 10 * n
    P.vlo = d + 11 * n
    P.q = d + 12 * n
    P.qprev = d + 13 * n
    P.dq = d + 14 * n
    P.Sm = d + 16 * n
    P.Ym = d + (16 + MEM) * n
    P.fi = fi


cdef inline void swap(double **a, double **b) noexcept nogil:
    cdef double *tmp = a[0]
    a[0] = b[0]
    b[0] = tmp


cdef void ps_finish(const Net *net, PS *P, double *G_out, double *u_out, intp_t *n_iter,
                    int8_t *conv, int8_t *status) noexcept nogil:
    cdef Py_ssize_t i
    P.phase = PH_DONE
    n_iter[0] = P.it
    G_out[0] = P.G if P.status != MF_EOVERFLOW else NAN
    for i in range(net.g.n):
        u_out[i] = P.uf[i]
    for i in range(P.nf):
        u_out[P.fi[i]] = mf_sigmoid(P.t[i])
    if P.status != MF_OK:
        P.conv = 0
    conv[0] = P.conv
    status[0] = P.status


cdef int ps_qn_direction(PS *P, double tmax) noexcept nogil:
    """qn_direction over the free units (P.dq = the quasi-Newton step, capped and boxed)."""
    cdef Py_ssize_t nf = P.nf, i, k, j, mem = P.mem, head = P.head
    cdef double a, b, yhy, gam, cap = 1.0, big = 0.0
    cdef double *r = P.dq
    cdef double *sj
    cdef double *yj
    for i in range(nf):
        r[i] = P.q[i]
    for k in range(mem):
        j = (head - 1 - k + MEM) % MEM
        sj = P.Sm + j * nf
        yj = P.Ym + j * nf
        a = mfp_dot(nf, sj, r) * P.rho[j]
        P.alph[j] = a
        for i in range(nf):
            r[i] -= a * yj[i]
    j = (head - 1 + MEM) % MEM
    yj = P.Ym + j * nf
    yhy = 0.0
    for i in range(nf):
        yhy = yhy + yj[i] * yj[i] / P.vcur[i]
    gam = 1.0 / (P.rho[j] * yhy)
    for i in range(nf):
        r[i] *= gam / P.vcur[i]
    for k in range(mem - 1, -1, -1):
        j = (head - 1 - k + MEM) % MEM
        sj = P.Sm + j * nf
        yj = P.Ym + j * nf
        b = mfp_dot(nf, yj, r) * P.rho[j]
        for i in range(nf):
            r[i] += (P.alph[j] - b) * sj[i]
    for i in range(nf):
        if fabs(P.dt[i]) > cap:
            cap = fabs(P.dt[i])
        if not (fabs(r[i]) <= big):
            big = fabs(r[i])
    if not (big < INFINITY):
        return 0
    cap = cap / big if big > cap else 1.0
    for i in range(nf):
        a = P.t[i] - cap * r[i]
        a = -tmax if a < -tmax else (tmax if a > tmax else a)
        r[i] = a - P.t[i]
    return 1


cdef inline double ps_max_du(const PS *P, double step) noexcept nogil:
    cdef Py_ssize_t i
    cdef double m = 0.0, x
    for i in range(P.nf):
        x = P.vcur[i] * fabs(step * P.dt[i])
        if x > m:
            m = x
    return m


cdef int ps_begin(const Net *net, PS *P, double tol, Py_ssize_t max_iter) noexcept nogil:
    """The head of solve_item's loop at an accepted point (P.G, P.gcur, P.ucur, P.vcur): the
    convergence test and the next direction; sets the full-step trial point and returns 1, or
    0 when done."""
    cdef Py_ssize_t nf = P.nf, i, hn = P.head * P.nf
    cdef double tmax = net.t_max, res = 0.0, sy, ss, yy, Dq, D
    cdef int clipped, flags
    flags = mfp_image(nf, tmax, net.sat_ok, P.t, P.gcur, P.ucur, P.vcur, P.dt, P.q, &res)
    clipped = flags & 1
    if flags & 2:
        return 0
    if res <= tol:
        P.conv = not clipped
        return 0
    if P.it >= max_iter:
        return 0
    if P.pending:
        P.pending = 0
        for i in range(nf):
            P.Ym[hn + i] = P.q[i] - P.qprev[i]
        sy = mfp_dot(nf, P.Sm + hn, P.Ym + hn)
        ss = mfp_dot(nf, P.Sm + hn, P.Sm + hn)
        yy = mfp_dot(nf, P.Ym + hn, P.Ym + hn)
        if sy > 1e-10 * sqrt(ss * yy) and sy < INFINITY:
            P.rho[P.head] = 1.0 / sy
            P.head = (P.head + 1) % MEM
            if P.mem < MEM:
                P.mem += 1
    for i in range(nf):
        P.qprev[i] = P.q[i]
    D = mfp_dot(nf, P.q, P.dt)
    if P.qn and P.mem > 0 and ps_qn_direction(P, tmax):
        Dq = mfp_dot(nf, P.q, P.dq)
        if Dq < 0.0:
            swap(&P.dt, &P.dq)
            D = Dq
        else:
            P.mem = 0
    if not (D < 0.0):
        return 0
    P.D = D
    P.it += 1
    P.noise = NOISE * (1.0 + fabs(P.G))
    for i in range(nf):
        P.tt[i] = P.t[i] + P.dt[i]
    P.phase = PH_FULL
    return 1


cdef inline void ps_ls_trial(PS *P) noexcept nogil:
    """The next line-search point from the bracket (solve_item's rule)."""
    cdef double span = P.hi - P.lo, lam, den
    cdef Py_ssize_t i
    if P.dhi > 0.0 and P.dhi < INFINITY and P.fhi <= P.G + C_ARMIJO * P.hi * P.D + P.noise:
        lam = P.lo - P.dlo * span / (P.dhi - P.dlo)
    else:
        den = 2.0 * (P.fhi - P.flo - P.dlo * span)
        lam = P.lo - P.dlo * span * span / den if (den > 0.0 and P.fhi < INFINITY) else P.lo + 0.5 * span
    if lam < P.lo + 0.1 * span:
        lam = P.lo + 0.1 * span
    elif lam > P.hi - 0.1 * span:
        lam = P.hi - 0.1 * span
    P.lam = lam
    for i in range(P.nf):
        P.tt[i] = P.t[i] + lam * P.dt[i]
    P.phase = PH_LS


cdef int ps_consume(const Net *net, PS *P, double f, int st, double tol,
                    Py_ssize_t max_iter) noexcept nogil:
    """Take the value f (status st), gradient P.gtry and means P.utry, P.vtry at the pending
    trial point; returns 1 if a new trial point is pending, 0 when the pattern is done."""
    cdef Py_ssize_t nf = P.nf, i, hn
    cdef double d, step
    cdef int found = 0
    if P.phase == PH_INIT:
        P.G = f
        swap(&P.gcur, &P.gtry)
        swap(&P.ucur, &P.utry)
        swap(&P.vcur, &P.vtry)
        P.status = st
        if st != MF_OK:
            return 0
        return ps_begin(net, P, tol, max_iter)
    if st != MF_OK:
        f = INFINITY
    d = INFINITY
    if f < INFINITY:
        d = mfp_dot3(nf, P.gtry, P.vtry, P.dt)
    if P.phase == PH_FULL:
        if f <= P.G + C_ARMIJO * P.D + P.noise and d <= -C_CURV * P.D:
            P.stalls = P.stalls + 1 if (f >= P.G and ps_max_du(P, 1.0) <= tol) else 0
            swap(&P.t, &P.tt)
            swap(&P.gcur, &P.gtry)
            swap(&P.ucur, &P.utry)
            swap(&P.vcur, &P.vtry)
            P.G = f
            if P.stalls >= MAX_STALLS:
                return 0
            hn = P.head * nf
            for i in range(nf):
                P.Sm[hn + i] = P.dt[i]
            P.pending = 1
            return ps_begin(net, P, tol, max_iter)
        if net.accel == 1:
            P.qn = 1
        P.lo = 0.0
        P.flo = P.G
        P.dlo = P.D
        P.hi = 1.0
        P.fhi = f
        P.dhi = d
        P.ls = 0
        ps_ls_trial(P)
        return 1
    # PH_LS: the trial at lam
    if not (f <= P.G + C_ARMIJO * P.lam * P.D + P.noise and f <= P.flo + P.noise):
        P.hi = P.lam
        P.fhi = f
        P.dhi = d
    elif fabs(d) <= -C_CURV * P.D:
        found = 1
    elif d > 0.0:
        P.hi = P.lam
        P.fhi = f
        P.dhi = d
    else:
        P.lo = P.lam
        P.flo = f
        P.dlo = d
        swap(&P.glo, &P.gtry)
        swap(&P.ulo, &P.utry)
        swap(&P.vlo, &P.vtry)
    P.ls += 1
    if not found and P.ls < MAX_LS and not (P.hi - P.lo <= 1e-13):
        ps_ls_trial(P)
        return 1
    if found:
        P.stalls = P.stalls + 1 if (f >= P.G and ps_max_du(P, P.lam) <= tol) else 0
        swap(&P.t, &P.tt)
        swap(&P.gcur, &P.gtry)
        swap(&P.ucur, &P.utry)
        swap(&P.vcur, &P.vtry)
        P.G = f
        step = P.lam
    elif P.lo > 0.0:
        P.stalls = P.stalls + 1 if (P.flo >= P.G and ps_max_du(P, P.lo) <= tol) else 0
        for i in range(nf):
            P.t[i] = P.t[i] + P.lo * P.dt[i]
        swap(&P.gcur, &P.glo)
        swap(&P.ucur, &P.ulo)
        swap(&P.vcur, &P.vlo)
        P.G = P.flo
        step = P.lo
    else:
        return 0
    if P.stalls >= MAX_STALLS:
        return 0
    hn = P.head * nf
    for i in range(nf):
        P.Sm[hn + i] = step * P.dt[i]
    P.pending = 1
    return ps_begin(net, P, tol, max_iter)
