"""Kernel: the variational E-step of nonlinear Gaussian belief networks (Frey & Hinton).

Called only from ``mfengine.nlgbn.model``, which validates the model and the data; this module
checks again at the boundary of the compiled code (the shapes of every array against one
another, and the network's layout and values through ``mf_nlgbn_net_check``), so that no call
can read or write out of bounds whatever it is given.

The layout of the network's arrays and the algorithm are described in ``csrc/mf_nlgbn.h``;
the per-block work is done by ``mf_nlgbn_estep_block`` (``csrc/mf_nlgbn_estep.c``) and this
module only spreads the blocks over OpenMP threads.

Sufficient statistics (eq. 13) are accumulated per block of BLOCK consecutive patterns, in
pattern order, so that the sum over blocks (done by the caller, in block order) is the same for
any number of threads.
"""
import numpy as np

from cython.parallel cimport prange, parallel
from libc.stdlib cimport malloc, free
from libc.math cimport isfinite, log
from mfengine._typedefs cimport intp_t, int8_t, uint8_t

cdef extern from "mf_nlgbn.h" nogil:
    ctypedef struct mf_nlgbn_moments:
        double M, S, V
        double M_mu, M_s, S_mu, S_s, V_mu, V_s
        double M_mumu, M_mus, M_ss
        double S_mumu, S_mus, S_ss
    ctypedef struct mf_nlgbn_net:
        Py_ssize_t n_layers
        const Py_ssize_t *sizes
        const Py_ssize_t *offset
        const Py_ssize_t *woff
        const Py_ssize_t *soff
        const signed char *types
        const double *WT
        const double *bias
        const double *prec
        const double *acoef
        Py_ssize_t n_units, n_hidden, n_visible, n_weights, stat_size, scratch_size
        int checked
    int mf_nlgbn_moments_eval(int type, double mu, double s, int order, mf_nlgbn_moments *out)
    int mf_nlgbn_net_check(mf_nlgbn_net *net, Py_ssize_t len_sizes, Py_ssize_t len_offset,
                           Py_ssize_t len_woff, Py_ssize_t len_soff, Py_ssize_t len_types,
                           Py_ssize_t len_WT, Py_ssize_t len_bias, Py_ssize_t len_prec,
                           Py_ssize_t len_acoef, Py_ssize_t stat_size)
    int mf_nlgbn_estep_block(const mf_nlgbn_net *net, Py_ssize_t n, const double *X, double *mu,
                             double *logvar, double tol, double unit_tol, Py_ssize_t max_sweeps,
                             double *bound, Py_ssize_t *n_sweeps, unsigned char *converged,
                             double *stats, double *scratch)
    int mf_nlgbn_estep_block_miss(const mf_nlgbn_net *net, Py_ssize_t n, const double *X,
                                  const unsigned char *miss, double *mu, double *logvar,
                                  double tol, double unit_tol, Py_ssize_t max_sweeps,
                                  double *bound, Py_ssize_t *n_sweeps, unsigned char *converged,
                                  double *stats, double *scratch)
    Py_ssize_t mf_nlgbn_is_scratch(const mf_nlgbn_net *net)
    int mf_nlgbn_is_pattern(const mf_nlgbn_net *net, const double *x, const unsigned char *miss,
                            const double *mu, const double *logvar, Py_ssize_t n_samples,
                            unsigned long long seed, unsigned long long index, double *estimate,
                            double *stderr_out, double *ess, double *mean, double *mean_se,
                            double *sd, double *scratch)

BLOCK = 64          # patterns per block of sufficient statistics
DEF C_BLOCK = 64

#: Status codes of csrc/mf_status.h, as returned by ``estep``.
STATUS_OK = MF_OK
STATUS_NOT_CONVERGED = MF_NOT_CONVERGED

#: The unit types' codes (MF_NLGBN_* in csrc/mf_nlgbn.h).
N_UNIT_TYPES = 4


def _need(ok, message):
    if not ok:
        raise ValueError(message)


def estep(const double[:, ::1] X, double[:, ::1] mu, double[:, ::1] logvar,
          const intp_t[::1] sizes, const intp_t[::1] offset, const intp_t[::1] woff,
          const int8_t[::1] types, const double[::1] WT, const double[::1] bias,
          const double[::1] prec, const double[::1] acoef, const intp_t[::1] soff,
          double tol, double unit_tol, Py_ssize_t max_sweeps,
          double[::1] bound, intp_t[::1] n_sweeps, uint8_t[::1] converged,
          double[:, ::1] stats, int n_threads, const uint8_t[:, ::1] miss=None):
    """Run the E-step on every pattern of X (n, n_visible), in place on mu and logvar
    (n, n_hidden), which hold the starting point.  ``miss`` (None, or (n, n_visible) uint8,
    nonzero = missing) marks visible entries to marginalise (their X values are not read).

    Writes the bound (n,) (NaN for a pattern whose solve met a number that is not finite), the
    sweep counts (n,) and the convergence flags (n,); with stats of shape
    (ceil(n / BLOCK), stat_size) also the sufficient statistics per block (stats must be zero on
    entry), otherwise pass an array with 0 rows.  max_sweeps = 0 only evaluates the bound at
    the given point.  Returns MF_OK or MF_NOT_CONVERGED.  Raises ValueError when the arrays do
    not fit one another or the network is not valid (MF_EBADARG of the C check), OverflowError
    when a size would overflow, MemoryError when the scratch memory cannot be allocated.
    """
    cdef mf_nlgbn_net net
    cdef Py_ssize_t n = X.shape[0], L = sizes.shape[0]
    _need(L >= 2, "the network must have at least two layers (MF_EBADARG)")
    _need(offset.shape[0] == L + 1, "offset must have one entry per layer plus one")
    net.n_layers = L
    net.sizes = &sizes[0]
    net.offset = &offset[0]
    net.woff = &woff[0] if woff.shape[0] > 0 else NULL
    net.soff = &soff[0] if soff.shape[0] > 0 else NULL
    net.types = <const signed char *> &types[0] if types.shape[0] > 0 else NULL
    net.WT = &WT[0] if WT.shape[0] > 0 else NULL
    net.bias = &bias[0] if bias.shape[0] > 0 else NULL
    net.prec = &prec[0] if prec.shape[0] > 0 else NULL
    net.acoef = &acoef[0] if acoef.shape[0] > 0 else NULL
    cdef bint want_stats = stats.shape[0] > 0
    cdef int rc = mf_nlgbn_net_check(&net, sizes.shape[0], offset.shape[0], woff.shape[0],
                                     soff.shape[0], types.shape[0], WT.shape[0], bias.shape[0],
                                     prec.shape[0], acoef.shape[0],
                                     stats.shape[1] if want_stats else 0)
    if rc == MF_EOVERFLOW:
        raise OverflowError("the network's sizes overflow the kernel's index type")
    _need(rc == MF_OK, "the network's arrays are not consistent or not finite (MF_EBADARG)")
    cdef Py_ssize_t U = net.n_units, H = net.n_hidden, nv = net.n_visible
    _need(X.shape[1] == nv, f"X must have {nv} columns, got {X.shape[1]}")
    _need(mu.shape[0] == n and mu.shape[1] == H, f"mu must have shape ({n}, {H})")
    _need(logvar.shape[0] == n and logvar.shape[1] == H, f"logvar must have shape ({n}, {H})")
    _need(bound.shape[0] == n and n_sweeps.shape[0] == n and converged.shape[0] == n,
          f"bound, n_sweeps and converged must have {n} entries")
    cdef Py_ssize_t nblocks = (n + C_BLOCK - 1) // C_BLOCK
    _need(not want_stats or stats.shape[0] == nblocks, f"stats must have {nblocks} rows")
    _need(n_threads >= 1, f"n_threads must be at least 1, got {n_threads}")
    _need(max_sweeps >= 0, f"max_sweeps must be >= 0, got {max_sweeps}")
    _need(tol >= 0 and tol < float("inf"), f"tol must be finite and >= 0, got {tol}")
    _need(unit_tol >= 0 and unit_tol < float("inf"), f"unit_tol must be finite and >= 0")
    cdef const unsigned char *mp = NULL
    if miss is not None:
        _need(miss.shape[0] == n and miss.shape[1] == nv, f"miss must have shape ({n}, {nv})")
        if n > 0:
            mp = <const unsigned char *> &miss[0, 0]
    if n == 0:
        return STATUS_OK
    if H == 0:  # pragma: no cover - L >= 2 and every layer has a unit
        raise ValueError("the network has no hidden unit")
    status_a = np.zeros(nblocks, dtype=np.intc)
    cdef int[::1] status = status_a
    nomem_a = np.zeros(1, dtype=np.intc)
    cdef int[::1] nomem = nomem_a
    cdef double *buf = NULL
    cdef double *st
    cdef Py_ssize_t blk, start, stop
    cdef Py_ssize_t scratch = net.scratch_size
    with nogil, parallel(num_threads=n_threads):
        buf = <double *> malloc(scratch * sizeof(double))
        if buf == NULL:
            nomem[0] = 1
        else:
            for blk in prange(nblocks, schedule="dynamic"):
                start = blk * C_BLOCK
                stop = start + C_BLOCK
                if stop > n:
                    stop = n
                st = &stats[blk, 0] if want_stats else NULL
                status[blk] = mf_nlgbn_estep_block_miss(
                    &net, stop - start, &X[start, 0], mp + start * nv if mp != NULL else NULL,
                    &mu[start, 0], &logvar[start, 0], tol,
                    unit_tol, max_sweeps, &bound[start], &n_sweeps[start],
                    <unsigned char *> &converged[start], st, buf)
            free(buf)
    if nomem_a[0]:
        raise MemoryError(
            f"could not allocate the E-step's scratch memory ({scratch * 8} bytes per thread)")
    if np.any(status_a == MF_EBADARG):  # pragma: no cover - every argument was checked above
        raise ValueError("the E-step refused its arguments (MF_EBADARG)")
    return STATUS_NOT_CONVERGED if np.any(status_a == MF_NOT_CONVERGED) else STATUS_OK


def moments(int unit_type, const double[::1] mu, const double[::1] logvar, int order=2):
    """M, S, V and their derivatives for arrays of (mu, log sigma^2), as a dict of arrays
    (keys M, S, V, M_mu, M_s, S_mu, S_s, V_mu, V_s, M_mumu, M_mus, M_ss, S_mumu, S_mus, S_ss;
    derivatives with respect to mu and s = log sigma^2; NaN beyond ``order``)."""
    cdef Py_ssize_t n = mu.shape[0], i
    _need(logvar.shape[0] == n, "mu and logvar must have the same length")
    _need(0 <= unit_type < N_UNIT_TYPES, f"unit_type must be in 0..{N_UNIT_TYPES - 1}, got {unit_type}")
    _need(0 <= order <= 2, f"order must be 0, 1 or 2, got {order}")
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


cdef int _make_net(mf_nlgbn_net *net, const intp_t[::1] sizes, const intp_t[::1] offset,
                   const intp_t[::1] woff, const int8_t[::1] types, const double[::1] WT,
                   const double[::1] bias, const double[::1] prec, const double[::1] acoef,
                   const intp_t[::1] soff) except -9:
    cdef Py_ssize_t L = sizes.shape[0]
    _need(L >= 2, "the network must have at least two layers (MF_EBADARG)")
    _need(offset.shape[0] == L + 1, "offset must have one entry per layer plus one")
    net.n_layers = L
    net.sizes = &sizes[0]
    net.offset = &offset[0]
    net.woff = &woff[0] if woff.shape[0] > 0 else NULL
    net.soff = &soff[0] if soff.shape[0] > 0 else NULL
    net.types = <const signed char *> &types[0] if types.shape[0] > 0 else NULL
    net.WT = &WT[0] if WT.shape[0] > 0 else NULL
    net.bias = &bias[0] if bias.shape[0] > 0 else NULL
    net.prec = &prec[0] if prec.shape[0] > 0 else NULL
    net.acoef = &acoef[0] if acoef.shape[0] > 0 else NULL
    cdef int rc = mf_nlgbn_net_check(net, sizes.shape[0], offset.shape[0], woff.shape[0],
                                     soff.shape[0], types.shape[0], WT.shape[0], bias.shape[0],
                                     prec.shape[0], acoef.shape[0], 0)
    if rc == MF_EOVERFLOW:
        raise OverflowError("the network's sizes overflow the kernel's index type")
    _need(rc == MF_OK, "the network's arrays are not consistent or not finite (MF_EBADARG)")
    return 0


def importance(const double[:, ::1] X, const uint8_t[:, ::1] miss, const double[:, ::1] mu,
               const double[:, ::1] logvar, const intp_t[::1] sizes, const intp_t[::1] offset,
               const intp_t[::1] woff, const int8_t[::1] types, const double[::1] WT,
               const double[::1] bias, const double[::1] prec, const double[::1] acoef,
               const intp_t[::1] soff, Py_ssize_t n_samples, unsigned long long seed,
               double[::1] estimate, double[::1] stderr, double[::1] ess, int n_threads,
               double[:, ::1] mean=None, double[:, ::1] mean_se=None, double[:, ::1] sd=None):
    """Importance-sampled ln p(x) of every pattern of X (see mf_nlgbn_is_pattern in
    csrc/mf_nlgbn.h): the proposal's Gaussian part from (mu, logvar) (n, n_hidden), ``miss``
    None or (n, n_visible) uint8.  Pattern p draws from the stream of (seed, p), so the answer
    does not depend on n_threads.  Writes estimate, stderr, ess (n,), and with ``mean`` (then
    ``mean_se`` and ``sd`` too, each (n, n_units)) every unit's sampled posterior marginal; NaN
    where a pattern's weights were not finite.  Returns the number of such patterns."""
    cdef mf_nlgbn_net net
    _make_net(&net, sizes, offset, woff, types, WT, bias, prec, acoef, soff)
    cdef Py_ssize_t n = X.shape[0], H = net.n_hidden, nv = net.n_visible, p
    _need(X.shape[1] == nv, f"X must have {nv} columns, got {X.shape[1]}")
    _need(mu.shape[0] == n and mu.shape[1] == H, f"mu must have shape ({n}, {H})")
    _need(logvar.shape[0] == n and logvar.shape[1] == H, f"logvar must have shape ({n}, {H})")
    _need(estimate.shape[0] == n and stderr.shape[0] == n and ess.shape[0] == n,
          f"estimate, stderr and ess must have {n} entries")
    _need(n_samples >= 2, f"n_samples must be at least 2, got {n_samples}")
    _need(n_threads >= 1, f"n_threads must be at least 1, got {n_threads}")
    cdef Py_ssize_t U = H + nv
    cdef double *mp_mean = NULL
    cdef double *mp_se = NULL
    cdef double *mp_sd = NULL
    if mean is not None:
        _need(mean_se is not None and sd is not None, "mean_se and sd must come with mean")
        _need(mean.shape[0] == n and mean.shape[1] == U and mean_se.shape[0] == n
              and mean_se.shape[1] == U and sd.shape[0] == n and sd.shape[1] == U,
              f"mean, mean_se and sd must have shape ({n}, {U})")
        if n > 0:
            mp_mean, mp_se, mp_sd = &mean[0, 0], &mean_se[0, 0], &sd[0, 0]
    cdef const unsigned char *mp = NULL
    if miss is not None:
        _need(miss.shape[0] == n and miss.shape[1] == nv, f"miss must have shape ({n}, {nv})")
        if n > 0:
            mp = <const unsigned char *> &miss[0, 0]
    if n == 0:
        return 0
    status_a = np.zeros(n, dtype=np.intc)
    cdef int[::1] status = status_a
    nomem_a = np.zeros(1, dtype=np.intc)
    cdef int[::1] nomem = nomem_a
    cdef double *buf = NULL
    cdef Py_ssize_t scratch = mf_nlgbn_is_scratch(&net)
    with nogil, parallel(num_threads=n_threads):
        buf = <double *> malloc(scratch * sizeof(double))
        if buf == NULL:
            nomem[0] = 1
        else:
            for p in prange(n, schedule="dynamic"):
                status[p] = mf_nlgbn_is_pattern(
                    &net, &X[p, 0], mp + p * nv if mp != NULL else NULL, &mu[p, 0],
                    &logvar[p, 0], n_samples, seed, <unsigned long long> p, &estimate[p],
                    &stderr[p], &ess[p], mp_mean + p * U if mp_mean != NULL else NULL,
                    mp_se + p * U if mp_se != NULL else NULL,
                    mp_sd + p * U if mp_sd != NULL else NULL, buf)
            free(buf)
    if nomem_a[0]:
        raise MemoryError(f"could not allocate the sampler's scratch memory ({scratch * 8} bytes)")
    if np.any(status_a == MF_EBADARG):
        raise ValueError("the sampler refused its arguments (MF_EBADARG): the posterior's mu or "
                         "log-variances are not finite")
    return int(np.sum(status_a == MF_EOVERFLOW))


# ------------------------------------------------------------------------------------------
# The C API: declared in _estep.pxd, contract in mfengine/solver.pxd.  The function is plain C
# (csrc/mf_nlgbn_capi.c, every argument checked, no interpreter needed), linkable as
# mfengine_nlgbn_infer; this is its Cython name.
cdef extern from "mfengine_solver.h":
    int mfengine_nlgbn_infer(
        Py_ssize_t n_layers, const Py_ssize_t *sizes, const signed char *types,
        const double *weights, const double *biases, const double *variances,
        Py_ssize_t n_patterns, const double *X, const unsigned char *missing,
        double tol, Py_ssize_t max_sweeps, int warm_start, int n_threads,
        double *mu, double *logvar, double *bound, Py_ssize_t *n_sweeps,
        unsigned char *converged) nogil


cdef int mf_nlgbn_infer(
    Py_ssize_t n_layers, const Py_ssize_t *sizes, const signed char *types,
    const double *weights, const double *biases, const double *variances,
    Py_ssize_t n_patterns, const double *X, const unsigned char *missing,
    double tol, Py_ssize_t max_sweeps, int warm_start, int n_threads,
    double *mu, double *logvar, double *bound, Py_ssize_t *n_sweeps,
    unsigned char *converged) noexcept nogil:
    """The NLGBN E-step over raw arrays (as NLGBN.infer)."""
    return mfengine_nlgbn_infer(n_layers, sizes, types, weights, biases, variances, n_patterns,
                                X, missing, tol, max_sweeps, warm_start, n_threads, mu, logvar,
                                bound, n_sweeps, converged)


def _capi_infer(Py_ssize_t n_layers, sizes, types, weights, biases, variances, X, missing,
                double tol, Py_ssize_t max_sweeps, int warm_start, int n_threads, mu, logvar,
                bound, n_sweeps, converged, bint null_X=False, Py_ssize_t n_patterns=-2):
    """Test hook: call mf_nlgbn_infer on NumPy arrays (any may be None for NULL); returns its
    status."""
    cdef const Py_ssize_t[::1] s_ = sizes
    cdef const int8_t[::1] t_ = types
    cdef const double[::1] w_ = weights
    cdef const double[::1] b_ = biases
    cdef const double[::1] v_ = variances
    cdef const double[::1] x_ = X
    cdef const uint8_t[::1] m_ = missing
    cdef double[::1] mu_ = mu
    cdef double[::1] lv_ = logvar
    cdef double[::1] bd_ = bound
    cdef Py_ssize_t[::1] ns_ = n_sweeps
    cdef uint8_t[::1] cv_ = converged
    cdef Py_ssize_t n = bd_.shape[0] if bd_ is not None else 0
    if n_patterns != -2:
        n = n_patterns
    cdef int rc
    with nogil:
        rc = mf_nlgbn_infer(
            n_layers, &s_[0] if s_ is not None and s_.shape[0] else NULL,
            <const signed char *> &t_[0] if t_ is not None and t_.shape[0] else NULL,
            &w_[0] if w_ is not None and w_.shape[0] else NULL,
            &b_[0] if b_ is not None and b_.shape[0] else NULL,
            &v_[0] if v_ is not None and v_.shape[0] else NULL,
            n, NULL if null_X or x_ is None or x_.shape[0] == 0 else &x_[0],
            <const unsigned char *> &m_[0] if m_ is not None and m_.shape[0] else NULL,
            tol, max_sweeps, warm_start, n_threads,
            &mu_[0] if mu_ is not None and mu_.shape[0] else NULL,
            &lv_[0] if lv_ is not None and lv_.shape[0] else NULL,
            &bd_[0] if bd_ is not None and bd_.shape[0] else NULL,
            &ns_[0] if ns_ is not None and ns_.shape[0] else NULL,
            <unsigned char *> &cv_[0] if cv_ is not None and cv_.shape[0] else NULL)
    return rc
