"""Kernel: inference in context-sensitive HMMs (Saul & Jordan 1996, sec. 3), over many sequences.

Called only from ``mfengine.hmm.model``; the wrapper validates every input (shapes, dtypes,
C order, finite values, probability vectors) and the kernel trusts it.  The loops are plain C in
``csrc/mf_hmm.c``: a scaled forward-backward pass, structured mean field (the chain exact, the
long-range couplings in mean field; the bound is the chain's exact mean-field objective,
maximised by coordinate ascent over its potentials), fully factorised mean field, and the exact
likelihood by forward recursion over the augmented state.  Sequences are independent and are
spread over OpenMP threads; each is handled by one thread from start to end, so the answers do
not depend on the number of threads.
"""
import numpy as np

from cython.parallel cimport prange
from mfengine._typedefs cimport float64_t, intp_t

cdef extern from "mf_hmm.h" nogil:
    ctypedef struct mf_hmm_model:
        Py_ssize_t n
        Py_ssize_t D
        Py_ssize_t lag
        int right
        int left
        const double *startprob
        const double *transmat
        const double *U
        const double *V
        const double *W
    int MF_HMM_OK
    int MF_HMM_ENOMEM
    int MF_HMM_IMPOSSIBLE
    int MF_HMM_NONFINITE
    Py_ssize_t mf_hmm_fb_work_size(Py_ssize_t T, Py_ssize_t n)
    int mf_hmm_forward_backward(Py_ssize_t T, Py_ssize_t n, const double *startprob,
                                const double *transmat, const double *logpot, double *gamma,
                                double *xi_sum, double *work, double *logz)
    int mf_hmm_link(const mf_hmm_model *m, Py_ssize_t T, const double *X, int max_sweeps,
                    double tol, const double *init, double *gamma, double *history,
                    int *n_sweeps, double *bound, double *logpot)
    int mf_hmm_chain_objective(const mf_hmm_model *m, Py_ssize_t T, const double *X,
                               const double *logpot, double *gamma, double *xi_sum,
                               double *pair1, double *pair2, double *value)
    int mf_hmm_ascent(const mf_hmm_model *m, Py_ssize_t T, const double *X, int max_sweeps,
                      double tol, double *logpot, double *history, int *n_sweeps,
                      double *value)
    int mf_hmm_structured(const mf_hmm_model *m, Py_ssize_t T, const double *X, int max_sweeps,
                          double tol, const double *init, double *gamma, double *xi_sum,
                          double *history, int *n_sweeps, double *bound, double *logpot,
                          double *stat_H, double *stat_g)
    int mf_hmm_naive(const mf_hmm_model *m, Py_ssize_t T, const double *X, int max_sweeps,
                     double tol, double *gamma, double *history, int *n_sweeps, double *bound)
    Py_ssize_t mf_hmm_exact_states(const mf_hmm_model *m, Py_ssize_t T)
    int mf_hmm_exact(const mf_hmm_model *m, Py_ssize_t T, const double *X, double *loglik)

DEF METHOD_STRUCTURED = 0
DEF METHOD_NAIVE = 1
DEF METHOD_EXACT = 2

_METHODS = {"structured": METHOD_STRUCTURED, "naive": METHOD_NAIVE, "exact": METHOD_EXACT}


def _raise_status(int status, Py_ssize_t seq):
    where = f"sequence {seq}"
    if status == MF_HMM_ENOMEM:
        raise MemoryError(f"out of memory while processing {where}")
    if status == MF_HMM_IMPOSSIBLE:
        raise ValueError(
            f"X: {where} has probability zero under the model (startprob_/transmat_ rule out "
            "every state path that could produce it)"
        )
    if status == MF_HMM_NONFINITE:
        raise ValueError(f"a non-finite value arose while processing {where}; check X and the parameters")
    raise RuntimeError(f"internal error {status} while processing {where}")


def forward_backward(const float64_t[::1] startprob, const float64_t[:, ::1] transmat,
                     const float64_t[:, ::1] logpot):
    """Scaled forward-backward on one chain with log-potentials ``logpot`` (T, n).

    Returns ``(gamma, xi_sum, logz)``: the marginals (T, n), the summed pairwise marginals of
    consecutive states (n, n), and ln sum_s startprob[s_0] prod transmat prod exp(logpot).
    """
    cdef Py_ssize_t T = logpot.shape[0], n = logpot.shape[1]
    cdef float64_t[:, ::1] gamma = np.empty((T, n))
    cdef float64_t[:, ::1] xi = np.empty((n, n))
    cdef float64_t[::1] work = np.empty(mf_hmm_fb_work_size(T, n))
    cdef double logz = 0.0
    cdef int status
    with nogil:
        status = mf_hmm_forward_backward(T, n, &startprob[0], &transmat[0, 0], &logpot[0, 0],
                                         &gamma[0, 0], &xi[0, 0], &work[0], &logz)
    if status != MF_HMM_OK:
        _raise_status(status, 0)
    return np.asarray(gamma), np.asarray(xi), logz


def exact_states(Py_ssize_t n, Py_ssize_t lag, bint right, bint left, Py_ssize_t T):
    """Size n^w of the augmented state space that method 'exact' walks for a length-T sequence
    (-1 on overflow)."""
    cdef mf_hmm_model m
    m.n = n
    m.D = 1
    m.lag = lag
    m.right = right
    m.left = left
    return mf_hmm_exact_states(&m, T)


cdef void _fill_model(mf_hmm_model *m, const float64_t[::1] startprob,
                      const float64_t[:, ::1] transmat, const float64_t[:, ::1] U,
                      const float64_t[:, ::1] V, const float64_t[:, ::1] W, Py_ssize_t lag,
                      bint right, bint left):
    m.n = U.shape[0]
    m.D = U.shape[1]
    m.lag = lag
    m.right = right
    m.left = left
    m.startprob = &startprob[0]
    m.transmat = &transmat[0, 0]
    m.U = &U[0, 0]
    m.V = &V[0, 0]
    m.W = &W[0, 0]


def link(const float64_t[::1] startprob, const float64_t[:, ::1] transmat,
         const float64_t[:, ::1] U, const float64_t[:, ::1] V, const float64_t[:, ::1] W,
         Py_ssize_t lag, bint right, bint left, const float64_t[:, ::1] X, int max_sweeps,
         double tol, init=None):
    """The link-bound iteration on one sequence (a starting point of structured mean field).

    ``init``: marginals (T, n) that set the first links, or None (the first-order posterior).
    Returns ``(bound, gamma, logpot, history)``, history NaN after the last sweep.
    """
    cdef mf_hmm_model m
    cdef Py_ssize_t T = X.shape[0], n = U.shape[0]
    cdef float64_t[:, ::1] gamma = np.empty((T, n))
    cdef float64_t[:, ::1] logpot = np.empty((T, n))
    cdef float64_t[::1] history = np.full(max_sweeps + 1, np.nan)
    cdef const float64_t[:, ::1] init_ = init if init is not None else np.zeros((1, n))
    cdef bint has_init = init is not None
    cdef int ns = 0, status
    cdef double bound = 0.0
    _fill_model(&m, startprob, transmat, U, V, W, lag, right, left)
    with nogil:
        status = mf_hmm_link(&m, T, &X[0, 0], max_sweeps, tol,
                             &init_[0, 0] if has_init else NULL, &gamma[0, 0], &history[0],
                             &ns, &bound, &logpot[0, 0])
    if status != MF_HMM_OK:
        _raise_status(status, 0)
    return bound, np.asarray(gamma), np.asarray(logpot), np.asarray(history)[: ns + 1]


def chain_objective(const float64_t[::1] startprob, const float64_t[:, ::1] transmat,
                    const float64_t[:, ::1] U, const float64_t[:, ::1] V,
                    const float64_t[:, ::1] W, Py_ssize_t lag, bint right, bint left,
                    const float64_t[:, ::1] X, const float64_t[:, ::1] logpot):
    """E_Q[ln P(s, x)] + H(Q) of the chain Q ~ P(s) prod exp(logpot[t, s_t]) on one sequence.

    Returns ``(value, gamma, xi_sum, pair1, pair2)``: the objective, the marginals, and the summed
    pairwise marginals at distance 1, lag and 2 lag.
    """
    cdef mf_hmm_model m
    cdef Py_ssize_t T = X.shape[0], n = U.shape[0]
    cdef float64_t[:, ::1] gamma = np.empty((T, n))
    cdef float64_t[:, ::1] xi = np.empty((n, n))
    cdef float64_t[:, ::1] p1 = np.empty((n, n))
    cdef float64_t[:, ::1] p2 = np.empty((n, n))
    cdef double value = 0.0
    cdef int status
    _fill_model(&m, startprob, transmat, U, V, W, lag, right, left)
    with nogil:
        status = mf_hmm_chain_objective(&m, T, &X[0, 0], &logpot[0, 0], &gamma[0, 0],
                                        &xi[0, 0], &p1[0, 0], &p2[0, 0], &value)
    if status != MF_HMM_OK:
        _raise_status(status, 0)
    return value, np.asarray(gamma), np.asarray(xi), np.asarray(p1), np.asarray(p2)


def ascent(const float64_t[::1] startprob, const float64_t[:, ::1] transmat,
           const float64_t[:, ::1] U, const float64_t[:, ::1] V, const float64_t[:, ::1] W,
           Py_ssize_t lag, bint right, bint left, const float64_t[:, ::1] X,
           const float64_t[:, ::1] logpot, int max_sweeps, double tol):
    """Coordinate ascent on the chain objective from the potentials ``logpot`` (not modified).

    Returns ``(value, logpot, history)``.
    """
    cdef mf_hmm_model m
    cdef Py_ssize_t T = X.shape[0]
    cdef float64_t[:, ::1] h = np.array(logpot, dtype=np.float64, order="C")
    cdef float64_t[::1] history = np.full(max_sweeps + 1, np.nan)
    cdef double value = 0.0
    cdef int ns = 0, status
    _fill_model(&m, startprob, transmat, U, V, W, lag, right, left)
    with nogil:
        status = mf_hmm_ascent(&m, T, &X[0, 0], max_sweeps, tol, &h[0, 0], &history[0], &ns,
                               &value)
    if status != MF_HMM_OK:
        _raise_status(status, 0)
    return value, np.asarray(h), np.asarray(history)[: ns + 1]


cdef int run_one(int method, const mf_hmm_model *m, Py_ssize_t T, const double *X,
                 int max_sweeps, double tol, const double *init, double *gamma, double *xi,
                 double *history, int *n_sweeps, double *bound, double *logpot, double *H,
                 double *g) noexcept nogil:
    if method == METHOD_STRUCTURED:
        return mf_hmm_structured(m, T, X, max_sweeps, tol, init, gamma, xi, history, n_sweeps,
                                 bound, logpot, H, g)
    if method == METHOD_NAIVE:
        return mf_hmm_naive(m, T, X, max_sweeps, tol, gamma, history, n_sweeps, bound)
    n_sweeps[0] = 0
    return mf_hmm_exact(m, T, X, bound)


def run(str method, const float64_t[::1] startprob, const float64_t[:, ::1] transmat,
        const float64_t[:, ::1] U, const float64_t[:, ::1] V, const float64_t[:, ::1] W,
        Py_ssize_t lag, bint right, bint left, const float64_t[:, ::1] X,
        const intp_t[::1] offsets, int max_sweeps, double tol, bint want_stats, int n_threads,
        init=None):
    """Inference on every sequence X[offsets[s]:offsets[s+1]].

    ``init`` (N, n) or None: for 'structured', chain potentials to start the ascent from (a warm
    start; None: the best of several starts).  Returns a dict with ``bound`` (n_seq,),
    ``n_sweeps`` (n_seq,) and, for the mean-field methods, ``gamma`` (N, n) and ``history`` (n_seq, max_sweeps + 1; NaN after the last sweep);
    for 'structured' also ``xi`` (n_seq, n, n) and ``logpot`` (N, n), and with ``want_stats``
    the M-step statistics ``H`` (n_seq, D, 3n, 3n) and ``g`` (n_seq, D, 3n).
    """
    cdef int meth = _METHODS[method]
    cdef Py_ssize_t n = U.shape[0], D = U.shape[1], N = X.shape[0]
    cdef Py_ssize_t n_seq = offsets.shape[0] - 1, K = 3 * n, s, T
    cdef bint mf = meth != METHOD_EXACT
    cdef bint stats = want_stats and meth == METHOD_STRUCTURED
    cdef float64_t[::1] bound = np.zeros(n_seq)
    cdef int[::1] n_sweeps = np.zeros(n_seq, dtype=np.intc)
    cdef int[::1] status = np.zeros(n_seq, dtype=np.intc)
    cdef float64_t[:, ::1] gamma = np.zeros((N if mf else 1, n))
    cdef float64_t[:, ::1] history = np.full((n_seq if mf else 1, max_sweeps + 1), np.nan)
    cdef float64_t[:, :, ::1] xi = np.zeros((n_seq if meth == METHOD_STRUCTURED else 1, n, n))
    cdef float64_t[:, ::1] logpot = np.zeros((N if meth == METHOD_STRUCTURED else 1, n))
    cdef float64_t[:, :, :, ::1] H = np.zeros((n_seq if stats else 1, D, K, K))
    cdef float64_t[:, :, ::1] g = np.zeros((n_seq if stats else 1, D, K))
    cdef bint has_init = init is not None and meth == METHOD_STRUCTURED
    cdef const float64_t[:, ::1] init_ = init if has_init else np.zeros((1, n))
    cdef mf_hmm_model m
    _fill_model(&m, startprob, transmat, U, V, W, lag, right, left)
    with nogil:
        for s in prange(n_seq, schedule="dynamic", num_threads=n_threads):
            T = offsets[s + 1] - offsets[s]
            status[s] = run_one(
                meth, &m, T, &X[offsets[s], 0], max_sweeps, tol,
                &init_[offsets[s], 0] if has_init else NULL,
                &gamma[offsets[s], 0] if mf else NULL,
                &xi[s, 0, 0] if meth == METHOD_STRUCTURED else NULL,
                &history[s, 0] if mf else NULL,
                &n_sweeps[s], &bound[s],
                &logpot[offsets[s], 0] if meth == METHOD_STRUCTURED else NULL,
                &H[s, 0, 0, 0] if stats else NULL,
                &g[s, 0, 0] if stats else NULL)
    for s in range(n_seq):
        if status[s] == MF_HMM_IMPOSSIBLE and meth == METHOD_NAIVE:
            raise ValueError(
                f"method='naive' cannot score sequence {s}: a fully factorised q puts mass on "
                "every pair of neighbouring states, so it needs startprob_ and transmat_ without "
                "the zeros that rule out this sequence's paths; use method='structured' or 'exact'"
            )
        if status[s] != MF_HMM_OK:
            _raise_status(status[s], s)
    out = {"bound": np.asarray(bound), "n_sweeps": np.asarray(n_sweeps)}
    if mf:
        out["gamma"] = np.asarray(gamma)
        out["history"] = np.asarray(history)
    if meth == METHOD_STRUCTURED:
        out["xi"] = np.asarray(xi)
        out["logpot"] = np.asarray(logpot)
    if stats:
        out["H"] = np.asarray(H)
        out["g"] = np.asarray(g)
    return out
