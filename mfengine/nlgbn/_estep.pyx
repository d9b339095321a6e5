"""Kernel: the variational E-step of nonlinear Gaussian belief networks (Frey & Hinton).

Called only from ``mfengine.nlgbn.model``; the wrapper validates every input.

Layout: units of all layers concatenated, top layer first; the last layer is visible and its
pre-activations are the data.  ``WT`` holds, for each pair of adjacent layers l -> l+1, the block
``weights[l].T`` (sizes[l], sizes[l+1]) row-major at ``woff[l]``: row j = unit j's outgoing
weights.  ``prec`` is 1 / psi^2 per unit, ``acoef[j] = sum_c w_cj^2 prec_c / 2`` per unit
(0 for visible units).

Per pattern the state is mu and s = log sigma^2 of every hidden unit; the kernel caches each
hidden unit's output mean M and variance V and every unit's mean net input n.  One sweep visits
the hidden units layer by layer (top-down on even sweeps, bottom-up on odd ones) and maximises
the bound over each unit's (mu, s) with the others fixed (mf_nlgbn_unit_solve): every step
raises F.  Sweeps stop when one gains less than ``tol`` nats.  Then n is recomputed exactly and
the bound F (eq. 11) evaluated.

Sufficient statistics (eq. 13) are accumulated per block of BLOCK consecutive patterns, in
pattern order, so that the sum over blocks (done by the caller, in block order) is the same for
any number of threads.
"""
import numpy as np

from cython.parallel cimport prange, parallel
from libc.math cimport exp, log, isfinite, M_PI
from libc.stdlib cimport malloc, free
from mfengine._typedefs cimport intp_t, int8_t

cdef extern from "mf_nlgbn.h" nogil:
    ctypedef struct mf_nlgbn_moments:
        double M, S, V
        double M_mu, M_s, S_mu, S_s, V_mu, V_s
        double M_mumu, M_mus, M_ss
        double S_mumu, S_mus, S_ss
    void mf_nlgbn_moments_eval(int type, double mu, double s, int order, mf_nlgbn_moments *out)
    double mf_nlgbn_unit_solve(int type, double n, double prec, double A, double B, double gtol,
                               int max_it, double *mu, double *s, mf_nlgbn_moments *mo)

BLOCK = 64          # patterns per block of sufficient statistics
DEF C_BLOCK = 64
DEF UNIT_MAX_IT = 50

STATUS_OK = 0
STATUS_NONFINITE = 1


cdef struct Net:
    Py_ssize_t n_layers
    Py_ssize_t n_units
    Py_ssize_t n_hidden
    const intp_t *sizes
    const intp_t *offset
    const intp_t *woff
    const int8_t *types
    const double *WT
    const double *bias
    const double *prec
    const double *acoef
    const intp_t *soff      # statistics layout: per boundary l, its block at soff[l]


cdef void net_inputs(const Net *net, const double *M, double *nn) noexcept nogil:
    """n_i = bias_i + sum_j w_ij M_j for every unit (top layer: bias)."""
    cdef Py_ssize_t l, j, c, nc, poff, coff
    cdef const double *row
    cdef double mj
    for c in range(net.n_units):
        nn[c] = net.bias[c]
    for l in range(net.n_layers - 1):
        nc = net.sizes[l + 1]
        poff = net.offset[l]
        coff = net.offset[l + 1]
        for j in range(net.sizes[l]):
            mj = M[poff + j]
            row = net.WT + net.woff[l] + j * nc
            for c in range(nc):
                nn[coff + c] += row[c] * mj


cdef double pattern_bound(const Net *net, const double *mu, const double *s, const double *nn,
                          const double *V) noexcept nogil:
    """F of eq. 11 from the cached net inputs and output variances (mu includes the data)."""
    cdef Py_ssize_t i, H = net.n_hidden
    cdef double total = 0.0, d, p
    for i in range(net.n_units):
        p = net.prec[i]
        d = mu[i] - nn[i]
        total += -0.5 * p * d * d + 0.5 * log(p / (2.0 * M_PI))
    for i in range(H):
        total += -net.acoef[i] * V[i] + 0.5 * (1.0 + log(2.0 * M_PI) + s[i] - net.prec[i] * exp(s[i]))
    return total


cdef double solve_pattern(const Net *net, const double *x, double *mu, double *s, double *nn,
                          double *M, double *V, double tol, double utol, Py_ssize_t max_sweeps,
                          intp_t *sweeps, int *status) noexcept nogil:
    """Coordinate ascent on one pattern's bound; mu (n_units) holds the hidden means and
    receives the data in its visible part; s (n_hidden).  Returns F at the end."""
    cdef Py_ssize_t H = net.n_hidden, L = net.n_layers, nv = net.sizes[L - 1]
    cdef Py_ssize_t i, j, c, l, li, nc, coff, sw
    cdef const double *row
    cdef double B, p, gain, g, dM, Mold
    cdef mf_nlgbn_moments mo
    for i in range(nv):
        mu[H + i] = x[i]
    for i in range(H):
        mf_nlgbn_moments_eval(net.types[i], mu[i], s[i], 0, &mo)
        M[i] = mo.M
        V[i] = mo.V
    net_inputs(net, M, nn)
    sw = 0
    while sw < max_sweeps:
        gain = 0.0
        for li in range(L - 1):
            l = li if sw % 2 == 0 else L - 2 - li
            nc = net.sizes[l + 1]
            coff = net.offset[l + 1]
            for j in range(net.offset[l], net.offset[l + 1]):
                row = net.WT + net.woff[l] + (j - net.offset[l]) * nc
                Mold = M[j]
                B = 0.0
                for c in range(nc):
                    B += row[c] * net.prec[coff + c] * (mu[coff + c] - nn[coff + c] + row[c] * Mold)
                g = mf_nlgbn_unit_solve(net.types[j], nn[j], net.prec[j], net.acoef[j], B, utol,
                                        UNIT_MAX_IT, &mu[j], &s[j], &mo)
                if g < 0.0:
                    status[0] = 1
                    g = 0.0
                M[j] = mo.M
                V[j] = mo.V
                dM = mo.M - Mold
                if dM != 0.0:
                    for c in range(nc):
                        nn[coff + c] += row[c] * dM
                gain += g
        sw += 1
        if gain < tol:
            break
    sweeps[0] = sw
    net_inputs(net, M, nn)          # exact, free of the drift of the incremental updates
    p = pattern_bound(net, mu, s, nn, V)
    if not isfinite(p):
        status[0] = 1
    return p


cdef void accumulate(const Net *net, const double *mu, const double *s, const double *M,
                     const double *V, double *st) noexcept nogil:
    """Add one pattern to the statistics block st: per unit sum mu, mu^2, sigma^2 and V (4 U
    numbers, sigma^2 = V = 0 for visible units), then per boundary l with P = sizes[l] parents and
    C = sizes[l+1] children: sum of mt mt' ((P+1)^2, mt = [1, M of layer l]) and of mu_c mt'
    (C (P+1))."""
    cdef Py_ssize_t U = net.n_units, H = net.n_hidden, i, l, a, b, c, P, C, poff, coff
    cdef double *aa
    cdef double *cc
    cdef double ma, mc
    for i in range(U):
        st[i] += mu[i]
        st[U + i] += mu[i] * mu[i]
    for i in range(H):
        st[2 * U + i] += exp(s[i])
        st[3 * U + i] += V[i]
    for l in range(net.n_layers - 1):
        P = net.sizes[l]
        C = net.sizes[l + 1]
        poff = net.offset[l]
        coff = net.offset[l + 1]
        aa = st + net.soff[l]
        cc = aa + (P + 1) * (P + 1)
        aa[0] += 1.0
        for b in range(P):
            aa[1 + b] += M[poff + b]
        for a in range(P):
            ma = M[poff + a]
            aa[(a + 1) * (P + 1)] += ma
            for b in range(P):
                aa[(a + 1) * (P + 1) + 1 + b] += ma * M[poff + b]
        for c in range(C):
            mc = mu[coff + c]
            cc[c * (P + 1)] += mc
            for b in range(P):
                cc[c * (P + 1) + 1 + b] += mc * M[poff + b]


def estep(const double[:, ::1] X, double[:, ::1] mu, double[:, ::1] logvar,
          const intp_t[::1] sizes, const intp_t[::1] offset, const intp_t[::1] woff,
          const int8_t[::1] types, const double[::1] WT, const double[::1] bias,
          const double[::1] prec, const double[::1] acoef, const intp_t[::1] soff,
          double tol, double unit_tol, Py_ssize_t max_sweeps,
          double[::1] bound, intp_t[::1] n_sweeps, double[:, ::1] stats, int n_threads):
    """Run the E-step on every pattern of X (n, n_visible), in place on mu and logvar
    (n, n_hidden), which hold the starting point.  Writes the bound (n,) and sweep counts (n,);
    with stats of shape (ceil(n / BLOCK), stat_size) also the sufficient statistics per block
    (stats must be zero on entry), otherwise pass an array with 0 rows.  max_sweeps = 0 only
    evaluates the bound at the given point.  Returns a status code (0: fine; 1: a non-finite
    number appeared)."""
    cdef Net net
    net.n_layers = sizes.shape[0]
    net.n_units = offset[net.n_layers]
    net.n_hidden = offset[net.n_layers - 1]
    net.sizes = &sizes[0]
    net.offset = &offset[0]
    net.woff = &woff[0]
    net.types = &types[0]
    net.WT = &WT[0]
    net.bias = &bias[0]
    net.prec = &prec[0]
    net.acoef = &acoef[0]
    net.soff = &soff[0]
    cdef Py_ssize_t n = X.shape[0], U = net.n_units, H = net.n_hidden
    cdef Py_ssize_t nblocks = (n + C_BLOCK - 1) // C_BLOCK, blk, p, i, start, stop
    cdef bint want_stats = stats.shape[0] > 0
    if want_stats and stats.shape[0] != nblocks:
        raise ValueError(f"stats must have {nblocks} rows")
    if n == 0:
        return STATUS_OK
    status_a = np.zeros(nblocks, dtype=np.intc)
    cdef int[::1] status = status_a
    cdef double *buf
    cdef double *mfull
    cdef double *nn
    cdef double *Mb
    cdef double *Vb
    nomem_a = np.zeros(1, dtype=np.intc)
    cdef int[::1] nomem = nomem_a
    with nogil, parallel(num_threads=n_threads):
        buf = <double *> malloc((2 * U + 2 * H + 1) * sizeof(double))
        if buf == NULL:
            nomem[0] = 1
        else:
            mfull = buf
            nn = buf + U
            Mb = buf + 2 * U
            Vb = buf + 2 * U + H
            for blk in prange(nblocks, schedule="dynamic"):
                start = blk * C_BLOCK
                stop = start + C_BLOCK
                if stop > n:
                    stop = n
                for p in range(start, stop):
                    for i in range(H):
                        mfull[i] = mu[p, i]
                    bound[p] = solve_pattern(&net, &X[p, 0], mfull, &logvar[p, 0], nn, Mb, Vb,
                                             tol, unit_tol, max_sweeps, &n_sweeps[p],
                                             &status[blk])
                    for i in range(H):
                        mu[p, i] = mfull[i]
                    if want_stats:
                        accumulate(&net, mfull, &logvar[p, 0], Mb, Vb, &stats[blk, 0])
            free(buf)
    if nomem_a[0]:
        raise MemoryError("could not allocate the E-step's scratch memory")
    return STATUS_NONFINITE if status_a.any() else STATUS_OK


def moments(int unit_type, const double[::1] mu, const double[::1] logvar, int order=2):
    """M, S, V and their derivatives for arrays of (mu, log sigma^2), as a dict of arrays
    (keys M, S, V, M_mu, M_s, S_mu, S_s, V_mu, V_s, M_mumu, M_mus, M_ss, S_mumu, S_mus, S_ss;
    derivatives with respect to mu and s = log sigma^2)."""
    cdef Py_ssize_t n = mu.shape[0], i
    if logvar.shape[0] != n:
        raise ValueError("mu and logvar must have the same length")
    keys = ["M", "S", "V", "M_mu", "M_s", "S_mu", "S_s", "V_mu", "V_s",
            "M_mumu", "M_mus", "M_ss", "S_mumu", "S_mus", "S_ss"]
    out_a = np.full((n, 15), np.nan)
    cdef double[:, ::1] out = out_a
    cdef mf_nlgbn_moments mo
    with nogil:
        for i in range(n):
            mf_nlgbn_moments_eval(unit_type, mu[i], logvar[i], order, &mo)
            out[i, 0] = mo.M
            out[i, 1] = mo.S
            out[i, 2] = mo.V
            if order >= 1:
                out[i, 3] = mo.M_mu
                out[i, 4] = mo.M_s
                out[i, 5] = mo.S_mu
                out[i, 6] = mo.S_s
                out[i, 7] = mo.V_mu
                out[i, 8] = mo.V_s
            if order >= 2:
                out[i, 9] = mo.M_mumu
                out[i, 10] = mo.M_mus
                out[i, 11] = mo.M_ss
                out[i, 12] = mo.S_mumu
                out[i, 13] = mo.S_mus
                out[i, 14] = mo.S_ss
    return {k: out_a[:, i].copy() for i, k in enumerate(keys)}
