"""Kernel: inference in context-sensitive HMMs (Saul & Jordan 1996, sec. 3), over many sequences.

Called only from ``mfengine.hmm._solve``, with inputs that ``mfengine.hmm.model`` validated
once per call (shapes, dtypes, C order, finite values, probability vectors, integer ranges;
``mfengine.hmm._checks``).  This module
checks again what it needs for memory safety (array shapes against each other, the sequence
offsets, lag, sweep budget, tolerance, thread count), and the C functions check their sizes
once more, so no call can read or write out of bounds.  The loops are plain C in
``csrc/mf_hmm_*.c`` (one idea per file, see ``csrc/mf_hmm_internal.h``): a scaled forward-backward pass, Viterbi, structured mean field (the chain
exact, the long-range couplings in mean field; the bound is the chain's exact mean-field
objective, maximised by coordinate ascent over its potentials), fully factorised mean field,
and the exact likelihood by forward recursion over the augmented state.  Sequences are
independent and are spread over OpenMP threads; each is handled by one thread from start to
end, so the answers do not depend on the number of threads.

C API
-----
Five ``noexcept nogil`` functions, declared in ``mfengine/hmm/_chain.pxd`` for other Cython
modules (``from mfengine.hmm._chain cimport mf_hmm_structured_infer, MF_OK``; compile with
``include_dirs=[mfengine.get_include()]``).  Arrays are row-major doubles the caller allocates;
the status codes are those of ``mf_status.h``: MF_OK (0); MF_NOT_CONVERGED (1): results written,
some sequence stopped at ``max_sweeps``; MF_EBADARG (-1): a bad argument, nothing written;
MF_ENOMEM (-2) / MF_EOVERFLOW (-3): scratch memory could not be had / its size overflows
(outputs of some sequences may then be written).

``mf_hmm_fb_infer(T, n, startprob, transmat, logpot, gamma, xi_sum, logz)``: forward-backward
for the chain Q(s) ~ startprob[s_0] prod transmat[s_t, s_t+1] prod exp(logpot[t, s_t]):
``gamma`` (T, n) the marginals, ``xi_sum`` (n, n, or NULL) the summed pairwise marginals of
neighbours, ``*logz`` the log normaliser (-inf when every path has probability zero).
MF_EBADARG: T < 1, n < 1, a NULL pointer (xi_sum may be NULL), startprob or a row of transmat
not a probability vector (entries >= 0 and finite, sum within 1e-8 of 1), a logpot entry NaN
or above 1e300 (-inf is allowed: a forbidden state).

``mf_hmm_structured_infer(n, D, lag, context, startprob, transmat, U, V, W, n_seq, lengths, X,
max_sweeps, tol, n_threads, gamma, logpot, bound, n_sweeps, converged)`` and
``mf_hmm_naive_infer(...)`` (the same without ``logpot``): structured / fully factorised mean
field on n_seq sequences, as ``ContextHMM.infer(method=...)`` (the structured one: ascents
from the four starts, the best kept).  Model: n states, D output dimensions, ``lag`` >= 1,
``context`` 1 (right), 2 (left) or 3 (both); ``startprob`` (n,), ``transmat`` (n, n); ``U``,
``V``, ``W`` (n, D) the own-state, right- and left-context means (V read only with right
context, W only with left; either may then be NULL).  ``lengths`` (n_seq,) >= 1; ``X``
(sum(lengths), D) the sequences concatenated, NaN = a missing value (marginalised).  Outputs:
``gamma`` (sum(lengths), n) the marginals of Q, ``logpot`` (sum(lengths), n) the potentials
h_t of the chain Q (structured only), ``bound`` (n_seq,) the bound on ln P(x) in nats (-inf:
the sequence has probability zero; NaN: its arithmetic left the double range), ``n_sweeps``
(n_seq,), ``converged`` (n_seq,) 1 / 0.  Sweeps stop when one raises the bound by at most
``tol`` * length.  ``n_threads`` is clamped to [1, 256]: OpenMP over sequences, or, with
fewer sequences than threads, over each structured solve's starts, one sequence after another
(the numbers do not depend on it).  MF_EBADARG: n, D or lag < 1; context not in 1..3; a NULL
model pointer (V, W as above); startprob / a transmat row not a probability vector; a mean
NaN, infinite or above 1e100 in magnitude; n_seq < 0; max_sweeps < 0; tol NaN, negative or
infinite; with n_seq > 0: lengths, X or an output NULL, a length < 1, an infinite entry of X.
MF_EOVERFLOW: n > 2^20, n * D > 2^40, or sum(lengths) * max(n, D) > 2^62.  n_seq = 0 is a
valid call that writes nothing.

``mf_hmm_structured_infer_starts(...)``: ``mf_hmm_structured_infer`` with one more argument,
``unsigned starts`` after ``n_threads``, the mask of the starts to run, as
``ContextHMM(starts=...)``: a nonzero combination of ``MF_HMM_START_LINK`` (1),
``MF_HMM_START_NAIVE_LINK`` (2), ``MF_HMM_START_FIRST_ORDER`` (4) and ``MF_HMM_START_OWN_MEANS``
(8), declared in the ``.pxd`` (in C: ``MFENGINE_HMM_START_*`` of ``mfengine_solver.h``);
``MF_HMM_ALL_STARTS`` (15) is ``mf_hmm_structured_infer``.  When the naive-link start alone
has no finite naive solution, the link start stands in for it; a sequence without context
couplings (length <= lag) runs its one ascent whatever the mask.  MF_EBADARG also for a mask
of 0 or with another bit set.

``mf_hmm_infer_diag(method, starts, n, D, lag, context, startprob, transmat, U, V, W,
variances, n_seq, lengths, X, max_sweeps, tol, n_threads, gamma, logpot, bound, n_sweeps,
converged)``: either solver with a diagonal output covariance, x_t ~ N(U[s_t] + V[s_t+lag] +
W[s_t-lag], diag(variances)).  ``method`` ``MF_HMM_METHOD_STRUCTURED`` (0) or
``MF_HMM_METHOD_NAIVE`` (1) (in C: ``MFENGINE_HMM_METHOD_*``); ``starts`` the mask of
``mf_hmm_structured_infer_starts`` (read by the structured method only); ``variances`` (D,)
one per output dimension, shared by the states, or NULL (unit covariance: then the numbers of
``mf_hmm_structured_infer_starts`` / ``mf_hmm_naive_infer`` bit for bit); ``logpot`` written
by the structured method only (may be NULL for the naive one); the rest as above.  It whitens:
with sigma_d = sqrt(variances[d]) the unit-covariance solver runs on U, V, W and X divided
column-wise by sigma (exact, as N(x; m, sigma^2) = N(x / sigma; m / sigma, 1) / sigma), so
``gamma`` and ``logpot`` are those of the whitened problem and ``bound`` is its bound less the
sum over the observed entries (t, d) of ln sigma_d.  The tables are copied once a call, each
sequence's rows into a scratch of its thread's (never a copy of all of X).  MF_EBADARG also:
a method other than 0 and 1; a variance NaN, infinite, zero or negative; a mean over sigma_d
above 1e100 in magnitude, or an entry of X over sigma_d infinite.

What cannot be checked is that each buffer holds the entries
stated.  The Python API first centres the model (``mfengine.hmm._problem.centred``): it
subtracts from U, V and W the mean of each one's rows, and from each row x_t of X the sum of those means over the
tables whose term x_t's mean has (U always; V when t + lag, W when t - lag lies in the
sequence).  Every residual x_t - m_t is unchanged, so the bound is one in any coordinates, but
the structured solver's starts depend on them: do the same to get its numbers, and to keep data
far from the origin accurate.
"""
import numpy as np

from cython.parallel cimport prange
from mfengine._typedefs cimport float64_t, intp_t

from libc.math cimport isfinite, isnan, fabs
from libc.stdlib cimport malloc, free

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
    int MF_HMM_STRUCTURED
    int MF_HMM_NAIVE
    int MF_HMM_EXACT
    int MF_HMM_LINK
    int MF_HMM_CHAIN
    int mf_hmm_work_size(int method, const mf_hmm_model *m, Py_ssize_t T, Py_ssize_t *nbytes)
    Py_ssize_t mf_hmm_fb_work_size(Py_ssize_t T, Py_ssize_t n)
    int mf_hmm_forward_backward(Py_ssize_t T, Py_ssize_t n, const double *startprob,
                                const double *transmat, const double *logpot, double *gamma,
                                double *xi_sum, double *work, double *logz)
    int mf_hmm_viterbi(Py_ssize_t T, Py_ssize_t n, const double *startprob,
                       const double *transmat, const double *logpot, Py_ssize_t *path,
                       double *logq)
    int mf_hmm_sample_chain(Py_ssize_t T, Py_ssize_t n, const double *startprob,
                            const double *transmat, const double *logpot, Py_ssize_t n_draws,
                            const double *u, Py_ssize_t *paths, double *work)
    int mf_hmm_link(const mf_hmm_model *m, Py_ssize_t T, const double *X, Py_ssize_t max_sweeps,
                    double tol, const double *init, double *gamma, double *history,
                    Py_ssize_t hist_len, Py_ssize_t *n_sweeps, double *bound, double *logpot)
    int mf_hmm_chain_objective(const mf_hmm_model *m, Py_ssize_t T, const double *X,
                               const double *logpot, double *gamma, double *xi_sum,
                               double *pair1, double *pair2, double *value)
    int mf_hmm_ascent(const mf_hmm_model *m, Py_ssize_t T, const double *X, Py_ssize_t max_sweeps,
                      double tol, double *logpot, double *history, Py_ssize_t hist_len,
                      Py_ssize_t *n_sweeps, double *value)
    int mf_hmm_structured(const mf_hmm_model *m, Py_ssize_t T, const double *X,
                          Py_ssize_t max_sweeps, double tol, const double *init, double *gamma,
                          double *xi_sum, double *history, Py_ssize_t hist_len,
                          Py_ssize_t *n_sweeps, double *bound, double *logpot, double *stat_H,
                          double *stat_g)
    int mf_hmm_structured_threads(const mf_hmm_model *m, Py_ssize_t T, const double *X,
                                  Py_ssize_t max_sweeps, double tol, const double *init,
                                  double *gamma, double *xi_sum, double *history,
                                  Py_ssize_t hist_len, Py_ssize_t *n_sweeps, double *bound,
                                  double *logpot, double *stat_H, double *stat_g, int n_threads)
    int mf_hmm_structured_starts(const mf_hmm_model *m, Py_ssize_t T, const double *X,
                                 Py_ssize_t max_sweeps, double tol, const double *init,
                                 double *gamma, double *xi_sum, double *history,
                                 Py_ssize_t hist_len, Py_ssize_t *n_sweeps, double *bound,
                                 double *logpot, double *stat_H, double *stat_g, int n_threads,
                                 unsigned starts)
    int mf_hmm_naive(const mf_hmm_model *m, Py_ssize_t T, const double *X, Py_ssize_t max_sweeps,
                     double tol, double *gamma, double *history, Py_ssize_t hist_len,
                     Py_ssize_t *n_sweeps, double *bound)
    int mf_hmm_threads_by_starts(int structured, unsigned starts, Py_ssize_t n_seq,
                                 int n_threads)
    Py_ssize_t mf_hmm_exact_states(const mf_hmm_model *m, Py_ssize_t T)
    int mf_hmm_exact(const mf_hmm_model *m, Py_ssize_t T, const double *X, double *loglik)
    double MF_HMM_PRE_TOL
    double MF_HMM_SCREEN_TOL

cdef extern from "mf_hmm_internal.h" nogil:
    int mf_hmm__lowrank_mode
    int MF_HMM_N_STARTS


def _set_lowrank_mode(int mode):
    """Tests only: 0 picks the chain's path by cost (the default), 1 takes the low-rank path
    whenever it applies, 2 never (the full-matrix path), 3 the low-rank path with its right rows
    recomputed in blocks.  Returns the previous mode."""
    global mf_hmm__lowrank_mode
    if mode not in (0, 1, 2, 3):
        raise ValueError(f"mode must be 0, 1, 2 or 3, got {mode}")
    cdef int old = mf_hmm__lowrank_mode
    mf_hmm__lowrank_mode = mode
    return old


#: Tolerances (nats per time step) of the structured solver's starts: the link / naive solves
#: that place two of them, and the ascents from all four before the best goes on (mf_hmm.h).
PRE_TOL = MF_HMM_PRE_TOL
SCREEN_TOL = MF_HMM_SCREEN_TOL
#: How many starts a structured solve runs (on separate threads when it has them).
N_STARTS = MF_HMM_N_STARTS
#: The starts by name, in the solver's order (bit k of the kernel's mask: start k).
START_NAMES = ("link", "naive-link", "first-order", "own-means")

#: Longest per-sequence history kept (the bound before the first sweep and after each of the
#: first HISTORY_MAX sweeps), so that a large sweep budget never needs a large buffer.
HISTORY_MAX = 1000

_METHODS = {"structured": MF_HMM_STRUCTURED, "naive": MF_HMM_NAIVE, "exact": MF_HMM_EXACT}
_PTRDIFF_MAX = 2**63 - 1


cdef _fill_model(mf_hmm_model *m, const float64_t[::1] startprob,
                 const float64_t[:, ::1] transmat, const float64_t[:, ::1] U,
                 const float64_t[:, ::1] V, const float64_t[:, ::1] W, Py_ssize_t lag,
                 bint right, bint left, Py_ssize_t D):
    """Fill ``m`` after checking that the arrays agree with each other and with ``D``."""
    cdef Py_ssize_t n = U.shape[0]
    if n < 1 or U.shape[1] != D or D < 1:
        raise ValueError(f"means_ must have shape (n_states, {D}), got {(U.shape[0], U.shape[1])}")
    if startprob.shape[0] != n:
        raise ValueError(f"startprob_ must have shape ({n},), got ({startprob.shape[0]},)")
    if transmat.shape[0] != n or transmat.shape[1] != n:
        raise ValueError(f"transmat_ must have shape ({n}, {n}), got "
                         f"{(transmat.shape[0], transmat.shape[1])}")
    if V.shape[0] != n or V.shape[1] != D:
        raise ValueError(f"right_means_ must have shape ({n}, {D}), got {(V.shape[0], V.shape[1])}")
    if W.shape[0] != n or W.shape[1] != D:
        raise ValueError(f"left_means_ must have shape ({n}, {D}), got {(W.shape[0], W.shape[1])}")
    if lag < 1:
        raise ValueError(f"lag must be an integer >= 1, got {lag}")
    m.n = n
    m.D = D
    m.lag = lag
    m.right = right
    m.left = left
    m.startprob = &startprob[0]
    m.transmat = &transmat[0, 0]
    m.U = &U[0, 0]
    m.V = &V[0, 0]
    m.W = &W[0, 0]


cdef _check_sweeps(Py_ssize_t max_sweeps, double tol):
    if max_sweeps < 0:
        raise ValueError(f"infer_max_iter must be an integer >= 0, got {max_sweeps}")
    if not (tol >= 0.0) or tol == np.inf:
        raise ValueError(f"infer_tol must be a finite number >= 0, got {tol}")


cdef object _nbytes(int method, mf_hmm_model *m, Py_ssize_t T):
    cdef Py_ssize_t nbytes = -1
    if mf_hmm_work_size(method, m, T, &nbytes) != MF_OK:
        return None
    return nbytes


cdef _raise_status(int status, Py_ssize_t seq, Py_ssize_t T, object nbytes, str what):
    where = f"sequence {seq} (length {T})"
    if status == MF_ENOMEM:
        size = "an unknown amount" if nbytes is None else f"{nbytes} bytes ({nbytes / 2**30:.3g} GiB)"
        raise MemoryError(f"{what}: out of memory: {where} needs {size} of scratch memory")
    if status == MF_EOVERFLOW:
        raise MemoryError(f"{what}: {where} would need more than {_PTRDIFF_MAX} bytes of scratch "
                          "memory (the size overflows)")
    if status == MF_EBADARG:
        raise ValueError(f"{what}: the kernel refused its arguments for {where}")
    raise RuntimeError(f"{what}: internal error {status} for {where}")


cdef _check_offsets(const intp_t[::1] offsets, Py_ssize_t N):
    cdef Py_ssize_t s, n_seq = offsets.shape[0] - 1
    if n_seq < 1 or offsets[0] != 0 or offsets[n_seq] != N:
        raise ValueError(f"lengths must be >= 1 and sum to the {N} rows of X")
    for s in range(n_seq):
        if offsets[s + 1] <= offsets[s]:
            raise ValueError(f"lengths must all be >= 1 and sum to the {N} rows of X")


def _check_value(double value, Py_ssize_t seq, str method):
    """Turn a -inf / NaN bound of sequence ``seq`` into a clear error."""
    if value == -np.inf:
        if method == "naive":
            raise ValueError(
                f"method='naive' cannot score sequence {seq}: a fully factorised q puts mass on "
                "every pair of neighbouring states, so it needs startprob_ and transmat_ without "
                "the zeros that rule out this sequence's paths; use method='structured' or 'exact'"
            )
        raise ValueError(
            f"X: sequence {seq} has probability zero under the model (startprob_/transmat_ rule "
            "out every state path that could produce it)"
        )
    if value != value or value == np.inf:
        raise ValueError(
            f"X: the log-probability of sequence {seq} left the range of float64 (X or the "
            "means are too large in magnitude; values beyond about 1e150 overflow their squares)"
        )


def forward_backward(const float64_t[::1] startprob, const float64_t[:, ::1] transmat,
                     const float64_t[:, ::1] logpot):
    """Scaled forward-backward on one chain with log-potentials ``logpot`` (T, n).

    Returns ``(gamma, xi_sum, logz)``: the marginals (T, n), the summed pairwise marginals of
    consecutive states (n, n), and ln sum_s startprob[s_0] prod transmat prod exp(logpot).
    """
    cdef Py_ssize_t T = logpot.shape[0], n = logpot.shape[1]
    if T < 1 or n < 1 or startprob.shape[0] != n or transmat.shape[0] != n \
            or transmat.shape[1] != n:
        raise ValueError("forward_backward: startprob (n,), transmat (n, n) and logpot (T, n) "
                         "with T, n >= 1 are required")
    cdef Py_ssize_t wsize = mf_hmm_fb_work_size(T, n)
    if wsize < 0:
        _raise_status(MF_EOVERFLOW, 0, T, None, "forward_backward")
    cdef float64_t[:, ::1] gamma = np.empty((T, n))
    cdef float64_t[:, ::1] xi = np.empty((n, n))
    cdef float64_t[::1] work = np.empty(wsize)
    cdef double logz = 0.0
    cdef int status
    with nogil:
        status = mf_hmm_forward_backward(T, n, &startprob[0], &transmat[0, 0], &logpot[0, 0],
                                         &gamma[0, 0], &xi[0, 0], &work[0], &logz)
    if status != MF_OK:
        _raise_status(status, 0, T, wsize * 8, "forward_backward")
    _check_value(logz, 0, "structured")
    return np.asarray(gamma), np.asarray(xi), logz


def viterbi(const float64_t[::1] startprob, const float64_t[:, ::1] transmat,
            const float64_t[:, ::1] logpot, const intp_t[::1] offsets):
    """Most probable path of the chain P(s) prod exp(logpot[t, s_t]) of every sequence
    ``offsets[s]:offsets[s+1]``.  Returns ``(paths, logq)``: the states (N,) and, per sequence,
    ln max_s P(s) prod exp(logpot)."""
    cdef Py_ssize_t N = logpot.shape[0], n = logpot.shape[1], n_seq = offsets.shape[0] - 1, s
    _check_offsets(offsets, N)
    if n < 1 or startprob.shape[0] != n or transmat.shape[0] != n or transmat.shape[1] != n:
        raise ValueError("viterbi: startprob (n,), transmat (n, n) and logpot (N, n) disagree")
    cdef intp_t[::1] path = np.zeros(N, dtype=np.intp)
    cdef float64_t[::1] logq = np.zeros(n_seq)
    cdef int[::1] status = np.zeros(n_seq, dtype=np.intc)
    with nogil:
        for s in range(n_seq):
            status[s] = mf_hmm_viterbi(offsets[s + 1] - offsets[s], n, &startprob[0],
                                       &transmat[0, 0], &logpot[offsets[s], 0],
                                       <Py_ssize_t *>&path[offsets[s]], &logq[s])
    for s in range(n_seq):
        if status[s] != MF_OK:
            _raise_status(status[s], s, offsets[s + 1] - offsets[s],
                          (offsets[s + 1] - offsets[s]) * n * 8, "decode")
    return np.asarray(path), np.asarray(logq)


def sample_chain(const float64_t[::1] startprob, const float64_t[:, ::1] transmat,
                 const float64_t[:, ::1] logpot, const float64_t[:, ::1] u):
    """Paths drawn from the chain Q(s) ~ P(s) prod exp(logpot[t, s_t]) of one sequence (forward
    filtering, backward sampling), one per row of the uniforms ``u`` (n_draws, T).  Returns the
    states (n_draws, T)."""
    cdef Py_ssize_t T = logpot.shape[0], n = logpot.shape[1], k = u.shape[0]
    if T < 1 or n < 1 or startprob.shape[0] != n or transmat.shape[0] != n \
            or transmat.shape[1] != n or u.shape[1] != T:
        raise ValueError("sample_chain: startprob (n,), transmat (n, n), logpot (T, n) and "
                         "u (n_draws, T) disagree")
    cdef Py_ssize_t wsize = mf_hmm_fb_work_size(T, n)
    if wsize < 0:
        _raise_status(MF_EOVERFLOW, 0, T, None, "sample_posterior")
    cdef float64_t[::1] work = np.empty(wsize)
    cdef intp_t[:, ::1] paths = np.zeros((k, T), dtype=np.intp)
    cdef int status
    with nogil:
        status = mf_hmm_sample_chain(T, n, &startprob[0], &transmat[0, 0], &logpot[0, 0], k,
                                     &u[0, 0] if k > 0 else NULL,
                                     <Py_ssize_t *>&paths[0, 0] if k > 0 else NULL, &work[0])
    if status != MF_OK:
        _raise_status(status, 0, T, wsize * 8, "sample_posterior")
    return np.asarray(paths)


def exact_states(Py_ssize_t n, Py_ssize_t lag, bint right, bint left, Py_ssize_t T):
    """Size n^w of the augmented state space that method 'exact' walks for a length-T sequence
    (-1 on overflow)."""
    cdef mf_hmm_model m
    if n < 1 or lag < 1 or T < 1:
        raise ValueError("exact_states: n, lag and T must be >= 1")
    m.n = n
    m.D = 1
    m.lag = lag
    m.right = right
    m.left = left
    return mf_hmm_exact_states(&m, T)


cdef _check_X(const float64_t[:, ::1] X, Py_ssize_t D, str what):
    if X.shape[0] < 1 or X.shape[1] != D:
        raise ValueError(f"{what}: X must have shape (T >= 1, {D}), got {(X.shape[0], X.shape[1])}")


cdef _check_pot(const float64_t[:, ::1] pot, Py_ssize_t T, Py_ssize_t n, str name):
    if pot.shape[0] != T or pot.shape[1] != n:
        raise ValueError(f"{name} must have shape ({T}, {n}), got {(pot.shape[0], pot.shape[1])}")


def link(const float64_t[::1] startprob, const float64_t[:, ::1] transmat,
         const float64_t[:, ::1] U, const float64_t[:, ::1] V, const float64_t[:, ::1] W,
         Py_ssize_t lag, bint right, bint left, const float64_t[:, ::1] X,
         Py_ssize_t max_sweeps, double tol, init=None):
    """The link-bound iteration on one sequence (a starting point of structured mean field).

    ``init``: marginals (T, n) that set the first links, or None (the first-order posterior).
    Returns ``(bound, gamma, logpot, history)``, history up to the last sweep (at most
    HISTORY_MAX + 1 entries).
    """
    cdef mf_hmm_model m
    _fill_model(&m, startprob, transmat, U, V, W, lag, right, left, U.shape[1])
    _check_X(X, m.D, "link")
    _check_sweeps(max_sweeps, tol)
    cdef Py_ssize_t T = X.shape[0], n = m.n
    cdef Py_ssize_t hist_len = min(max_sweeps, HISTORY_MAX) + 1
    cdef float64_t[:, ::1] gamma = np.empty((T, n))
    cdef float64_t[:, ::1] logpot = np.empty((T, n))
    cdef float64_t[::1] history = np.full(hist_len, np.nan)
    cdef const float64_t[:, ::1] init_ = init if init is not None else np.zeros((1, n))
    cdef bint has_init = init is not None
    if has_init:
        _check_pot(init_, T, n, "init")
    cdef Py_ssize_t ns = 0
    cdef int status
    cdef double bound = 0.0
    with nogil:
        status = mf_hmm_link(&m, T, &X[0, 0], max_sweeps, tol,
                             &init_[0, 0] if has_init else NULL, &gamma[0, 0], &history[0],
                             hist_len, &ns, &bound, &logpot[0, 0])
    if status != MF_OK and status != MF_NOT_CONVERGED:
        _raise_status(status, 0, T, _nbytes(MF_HMM_LINK, &m, T), "link")
    _check_value(bound, 0, "structured")
    return bound, np.asarray(gamma), np.asarray(logpot), np.asarray(history)[: min(ns, hist_len - 1) + 1]


def chain_objective(const float64_t[::1] startprob, const float64_t[:, ::1] transmat,
                    const float64_t[:, ::1] U, const float64_t[:, ::1] V,
                    const float64_t[:, ::1] W, Py_ssize_t lag, bint right, bint left,
                    const float64_t[:, ::1] X, const float64_t[:, ::1] logpot):
    """E_Q[ln P(s, x)] + H(Q) of the chain Q ~ P(s) prod exp(logpot[t, s_t]) on one sequence.

    Returns ``(value, gamma, xi_sum, pair1, pair2)``: the objective, the marginals, and the summed
    pairwise marginals at distance 1, lag and 2 lag.
    """
    cdef mf_hmm_model m
    _fill_model(&m, startprob, transmat, U, V, W, lag, right, left, U.shape[1])
    _check_X(X, m.D, "chain_objective")
    cdef Py_ssize_t T = X.shape[0], n = m.n
    _check_pot(logpot, T, n, "logpot")
    cdef float64_t[:, ::1] gamma = np.empty((T, n))
    cdef float64_t[:, ::1] xi = np.empty((n, n))
    cdef float64_t[:, ::1] p1 = np.empty((n, n))
    cdef float64_t[:, ::1] p2 = np.empty((n, n))
    cdef double value = 0.0
    cdef int status
    with nogil:
        status = mf_hmm_chain_objective(&m, T, &X[0, 0], &logpot[0, 0], &gamma[0, 0],
                                        &xi[0, 0], &p1[0, 0], &p2[0, 0], &value)
    if status != MF_OK:
        _raise_status(status, 0, T, _nbytes(MF_HMM_CHAIN, &m, T), "chain_objective")
    _check_value(value, 0, "structured")
    return value, np.asarray(gamma), np.asarray(xi), np.asarray(p1), np.asarray(p2)


def ascent(const float64_t[::1] startprob, const float64_t[:, ::1] transmat,
           const float64_t[:, ::1] U, const float64_t[:, ::1] V, const float64_t[:, ::1] W,
           Py_ssize_t lag, bint right, bint left, const float64_t[:, ::1] X,
           const float64_t[:, ::1] logpot, Py_ssize_t max_sweeps, double tol):
    """Coordinate ascent on the chain objective from the potentials ``logpot`` (not modified).

    Returns ``(value, logpot, history)``.
    """
    cdef mf_hmm_model m
    _fill_model(&m, startprob, transmat, U, V, W, lag, right, left, U.shape[1])
    _check_X(X, m.D, "ascent")
    _check_sweeps(max_sweeps, tol)
    cdef Py_ssize_t T = X.shape[0], n = m.n
    _check_pot(logpot, T, n, "logpot")
    cdef Py_ssize_t hist_len = min(max_sweeps, HISTORY_MAX) + 1
    cdef float64_t[:, ::1] h = np.array(logpot, dtype=np.float64, order="C")
    cdef float64_t[::1] history = np.full(hist_len, np.nan)
    cdef double value = 0.0
    cdef Py_ssize_t ns = 0
    cdef int status
    with nogil:
        status = mf_hmm_ascent(&m, T, &X[0, 0], max_sweeps, tol, &h[0, 0], &history[0],
                               hist_len, &ns, &value)
    if status != MF_OK and status != MF_NOT_CONVERGED:
        _raise_status(status, 0, T, _nbytes(MF_HMM_CHAIN, &m, T), "ascent")
    _check_value(value, 0, "structured")
    return value, np.asarray(h), np.asarray(history)[: min(ns, hist_len - 1) + 1]


cdef int run_one(int method, const mf_hmm_model *m, Py_ssize_t T, const double *X,
                 Py_ssize_t max_sweeps, double tol, const double *init, double *gamma,
                 double *xi, double *history, Py_ssize_t hist_len, Py_ssize_t *n_sweeps,
                 double *bound, double *logpot, double *H, double *g,
                 int inner_threads, unsigned starts) noexcept nogil:
    """One sequence; ``inner_threads``: threads for the structured method's starts, ``starts``
    their mask."""
    if method == MF_HMM_STRUCTURED:
        return mf_hmm_structured_starts(m, T, X, max_sweeps, tol, init, gamma, xi, history,
                                        hist_len, n_sweeps, bound, logpot, H, g, inner_threads,
                                        starts)
    if method == MF_HMM_NAIVE:
        return mf_hmm_naive(m, T, X, max_sweeps, tol, gamma, history, hist_len, n_sweeps, bound)
    n_sweeps[0] = 0
    return mf_hmm_exact(m, T, X, bound)


def start_mask(starts):
    """The kernel's mask of the structured solver's starts named in ``starts`` (a sequence of
    ``START_NAMES``, at least one), or of all of them for None."""
    if starts is None:
        return MF_HMM_ALL_STARTS
    if isinstance(starts, str):
        starts = (starts,)
    cdef unsigned mask = 0
    for name in starts:
        if name not in START_NAMES:
            raise ValueError(f"starts: unknown start {name!r}; the starts are {START_NAMES}")
        mask |= 1u << START_NAMES.index(name)
    if mask == 0:
        raise ValueError(f"starts must name at least one of {START_NAMES}")
    return mask


def run(str method, const float64_t[::1] startprob, const float64_t[:, ::1] transmat,
        const float64_t[:, ::1] U, const float64_t[:, ::1] V, const float64_t[:, ::1] W,
        Py_ssize_t lag, bint right, bint left, const float64_t[:, ::1] X,
        const intp_t[::1] offsets, Py_ssize_t max_sweeps, double tol, bint want_stats,
        int n_threads, init=None, starts=None):
    """Inference on every sequence X[offsets[s]:offsets[s+1]].

    ``init`` (N, n) or None: for 'structured', chain potentials to start the ascent from (a warm
    start; None: the best of several starts).  ``starts``: for 'structured' without ``init``,
    the names (``START_NAMES``) of the starts to run, or None for all of them.  Returns a dict with ``bound`` (n_seq,),
    ``n_sweeps`` (n_seq,), ``converged`` (n_seq,) and, for the mean-field methods, ``gamma``
    (N, n) and ``history`` (n_seq, min(max_sweeps, HISTORY_MAX) + 1; NaN after the last
    sweep); for 'structured' also ``xi`` (n_seq, n, n) and ``logpot`` (N, n), and with
    ``want_stats`` the M-step statistics ``H`` (n_seq, D, 3n, 3n) and ``g`` (n_seq, D, 3n).
    """
    if method not in _METHODS:
        raise ValueError(f"method must be one of {tuple(_METHODS)}, got {method!r}")
    cdef int meth = _METHODS[method]
    cdef mf_hmm_model m
    _fill_model(&m, startprob, transmat, U, V, W, lag, right, left, X.shape[1])
    _check_sweeps(max_sweeps, tol)
    if n_threads < 1:
        raise ValueError(f"n_threads must be >= 1, got {n_threads}")
    cdef Py_ssize_t n = m.n, D = m.D, N = X.shape[0]
    _check_offsets(offsets, N)
    cdef Py_ssize_t n_seq = offsets.shape[0] - 1, K = 3 * n, s, T
    cdef Py_ssize_t hist_len = min(max_sweeps, HISTORY_MAX) + 1
    cdef bint mf = meth != MF_HMM_EXACT
    cdef bint structured = meth == MF_HMM_STRUCTURED
    cdef bint stats = want_stats and structured
    cdef bint has_init = init is not None and structured
    cdef const float64_t[:, ::1] init_ = init if has_init else np.zeros((1, n))
    cdef unsigned mask = start_mask(starts)
    if has_init:
        _check_pot(init_, N, n, "init")
    cdef float64_t[::1] bound = np.zeros(n_seq)
    cdef Py_ssize_t[::1] n_sweeps = np.zeros(n_seq, dtype=np.intp)
    cdef int[::1] status = np.zeros(n_seq, dtype=np.intc)
    cdef float64_t[:, ::1] gamma = np.zeros((N if mf else 1, n))
    cdef float64_t[:, ::1] history = np.full((n_seq if mf else 1, hist_len), np.nan)
    cdef float64_t[:, :, ::1] xi = np.zeros((n_seq if structured else 1, n, n))
    cdef float64_t[:, ::1] logpot = np.zeros((N if structured else 1, n))
    cdef float64_t[:, :, :, ::1] H = np.zeros((n_seq if stats else 1, D, K, K))
    cdef float64_t[:, :, ::1] g = np.zeros((n_seq if stats else 1, D, K))
    # Threads go over sequences; with fewer sequences than threads, a structured solve that has
    # several starts to run spreads them over the threads instead (the answers are the same
    # either way; a one-thread team is not an active parallel region, so the inner one may use
    # threads).
    cdef bint by_starts = mf_hmm_threads_by_starts(structured and not has_init, mask, n_seq,
                                                   n_threads)
    cdef int outer = 1 if by_starts else n_threads
    cdef int inner = n_threads if by_starts else 1
    with nogil:
        for s in prange(n_seq, schedule="dynamic", num_threads=outer):
            T = offsets[s + 1] - offsets[s]
            status[s] = run_one(
                meth, &m, T, &X[offsets[s], 0], max_sweeps, tol,
                &init_[offsets[s], 0] if has_init else NULL,
                &gamma[offsets[s], 0] if mf else NULL,
                &xi[s, 0, 0] if structured else NULL,
                &history[s, 0] if mf else NULL, hist_len,
                &n_sweeps[s], &bound[s],
                &logpot[offsets[s], 0] if structured else NULL,
                &H[s, 0, 0, 0] if stats else NULL,
                &g[s, 0, 0] if stats else NULL, inner, mask)
    for s in range(n_seq):
        if status[s] != MF_OK and status[s] != MF_NOT_CONVERGED:
            T = offsets[s + 1] - offsets[s]
            _raise_status(status[s], s, T, _nbytes(meth, &m, T), f"method={method!r}")
    for s in range(n_seq):
        _check_value(bound[s], s, method)
    out = {"bound": np.asarray(bound), "n_sweeps": np.asarray(n_sweeps),
           "converged": np.asarray(status) == MF_OK}
    if mf:
        out["gamma"] = np.asarray(gamma)
        out["history"] = np.asarray(history)
    if structured:
        out["xi"] = np.asarray(xi)
        out["logpot"] = np.asarray(logpot)
    if stats:
        out["H"] = np.asarray(H)
        out["g"] = np.asarray(g)
    return out


# ------------------------------------------------------------------------------------------
# C API (declared in _chain.pxd; contract in the module docstring, section "C API")

cdef extern from "mfengine_solver.h":
    # plain C (csrc/mf_hmm_capi.c): every argument checked, no interpreter needed
    int mfengine_hmm_fb_infer(Py_ssize_t T, Py_ssize_t n, const double *startprob,
                              const double *transmat, const double *logpot, double *gamma,
                              double *xi_sum, double *logz) nogil
    int mfengine_hmm_structured_infer(
        Py_ssize_t n, Py_ssize_t D, Py_ssize_t lag, int context, const double *startprob,
        const double *transmat, const double *U, const double *V, const double *W,
        Py_ssize_t n_seq, const Py_ssize_t *lengths, const double *X, Py_ssize_t max_sweeps,
        double tol, int n_threads, double *gamma, double *logpot, double *bound,
        Py_ssize_t *n_sweeps, signed char *converged) nogil
    int mfengine_hmm_structured_infer_starts(
        Py_ssize_t n, Py_ssize_t D, Py_ssize_t lag, int context, const double *startprob,
        const double *transmat, const double *U, const double *V, const double *W,
        Py_ssize_t n_seq, const Py_ssize_t *lengths, const double *X, Py_ssize_t max_sweeps,
        double tol, int n_threads, unsigned starts, double *gamma, double *logpot,
        double *bound, Py_ssize_t *n_sweeps, signed char *converged) nogil
    int mfengine_hmm_naive_infer(
        Py_ssize_t n, Py_ssize_t D, Py_ssize_t lag, int context, const double *startprob,
        const double *transmat, const double *U, const double *V, const double *W,
        Py_ssize_t n_seq, const Py_ssize_t *lengths, const double *X, Py_ssize_t max_sweeps,
        double tol, int n_threads, double *gamma, double *bound, Py_ssize_t *n_sweeps,
        signed char *converged) nogil
    int mfengine_hmm_infer_diag(
        int method, unsigned starts, Py_ssize_t n, Py_ssize_t D, Py_ssize_t lag, int context,
        const double *startprob, const double *transmat, const double *U, const double *V,
        const double *W, const double *variances, Py_ssize_t n_seq, const Py_ssize_t *lengths,
        const double *X, Py_ssize_t max_sweeps, double tol, int n_threads, double *gamma,
        double *logpot, double *bound, Py_ssize_t *n_sweeps, signed char *converged) nogil


cdef int mf_hmm_fb_infer(Py_ssize_t T, Py_ssize_t n, const double *startprob,
                         const double *transmat, const double *logpot, double *gamma,
                         double *xi_sum, double *logz) noexcept nogil:
    return mfengine_hmm_fb_infer(T, n, startprob, transmat, logpot, gamma, xi_sum, logz)


cdef int mf_hmm_structured_infer(
        Py_ssize_t n, Py_ssize_t D, Py_ssize_t lag, int context, const double *startprob,
        const double *transmat, const double *U, const double *V, const double *W,
        Py_ssize_t n_seq, const Py_ssize_t *lengths, const double *X, Py_ssize_t max_sweeps,
        double tol, int n_threads, double *gamma, double *logpot, double *bound,
        Py_ssize_t *n_sweeps, signed char *converged) noexcept nogil:
    return mfengine_hmm_structured_infer(n, D, lag, context, startprob, transmat, U, V, W, n_seq,
                                         lengths, X, max_sweeps, tol, n_threads, gamma, logpot,
                                         bound, n_sweeps, converged)


cdef int mf_hmm_structured_infer_starts(
        Py_ssize_t n, Py_ssize_t D, Py_ssize_t lag, int context, const double *startprob,
        const double *transmat, const double *U, const double *V, const double *W,
        Py_ssize_t n_seq, const Py_ssize_t *lengths, const double *X, Py_ssize_t max_sweeps,
        double tol, int n_threads, unsigned starts, double *gamma, double *logpot,
        double *bound, Py_ssize_t *n_sweeps, signed char *converged) noexcept nogil:
    return mfengine_hmm_structured_infer_starts(n, D, lag, context, startprob, transmat, U, V, W,
                                                n_seq, lengths, X, max_sweeps, tol, n_threads,
                                                starts, gamma, logpot, bound, n_sweeps,
                                                converged)


cdef int mf_hmm_naive_infer(
        Py_ssize_t n, Py_ssize_t D, Py_ssize_t lag, int context, const double *startprob,
        const double *transmat, const double *U, const double *V, const double *W,
        Py_ssize_t n_seq, const Py_ssize_t *lengths, const double *X, Py_ssize_t max_sweeps,
        double tol, int n_threads, double *gamma, double *bound, Py_ssize_t *n_sweeps,
        signed char *converged) noexcept nogil:
    return mfengine_hmm_naive_infer(n, D, lag, context, startprob, transmat, U, V, W, n_seq,
                                    lengths, X, max_sweeps, tol, n_threads, gamma, bound,
                                    n_sweeps, converged)


cdef int mf_hmm_infer_diag(
        int method, unsigned starts, Py_ssize_t n, Py_ssize_t D, Py_ssize_t lag, int context,
        const double *startprob, const double *transmat, const double *U, const double *V,
        const double *W, const double *variances, Py_ssize_t n_seq, const Py_ssize_t *lengths,
        const double *X, Py_ssize_t max_sweeps, double tol, int n_threads, double *gamma,
        double *logpot, double *bound, Py_ssize_t *n_sweeps,
        signed char *converged) noexcept nogil:
    return mfengine_hmm_infer_diag(method, starts, n, D, lag, context, startprob, transmat, U, V,
                                   W, variances, n_seq, lengths, X, max_sweeps, tol, n_threads,
                                   gamma, logpot, bound, n_sweeps, converged)


def _capi_selftest(str method, const float64_t[::1] startprob, const float64_t[:, ::1] transmat,
                   const float64_t[:, ::1] U, const float64_t[:, ::1] V,
                   const float64_t[:, ::1] W, Py_ssize_t lag, int context,
                   const float64_t[:, ::1] X, const intp_t[::1] lengths, Py_ssize_t max_sweeps,
                   double tol, int n_threads, starts=None):
    """Tests only: call the C API's structured or naive entry point on arrays (no checks here:
    the C function's own checks are what is tested); with ``starts`` (an int, the mask), the
    structured one that takes the starts.  Returns (status, bound, gamma, logpot, n_sweeps,
    converged)."""
    cdef Py_ssize_t n = U.shape[0], D = U.shape[1], N = X.shape[0], k = lengths.shape[0]
    cdef float64_t[::1] bound = np.zeros(max(k, 1))
    cdef float64_t[:, ::1] gamma = np.zeros((max(N, 1), n))
    cdef float64_t[:, ::1] logpot = np.zeros((max(N, 1), n))
    cdef Py_ssize_t[::1] ns = np.zeros(max(k, 1), dtype=np.intp)
    cdef signed char[::1] conv = np.zeros(max(k, 1), dtype=np.int8)
    cdef int status
    cdef bint is_structured = method == "structured", with_starts = starts is not None
    cdef unsigned mask = starts if with_starts else 0
    with nogil:
        if is_structured and with_starts:
            status = mf_hmm_structured_infer_starts(
                n, D, lag, context, &startprob[0], &transmat[0, 0], &U[0, 0], &V[0, 0], &W[0, 0],
                k, <Py_ssize_t *>&lengths[0], &X[0, 0], max_sweeps, tol, n_threads, mask,
                &gamma[0, 0], &logpot[0, 0], &bound[0], &ns[0], &conv[0])
        elif is_structured:
            status = mf_hmm_structured_infer(n, D, lag, context, &startprob[0], &transmat[0, 0],
                                             &U[0, 0], &V[0, 0], &W[0, 0], k,
                                             <Py_ssize_t *>&lengths[0], &X[0, 0], max_sweeps,
                                             tol, n_threads, &gamma[0, 0], &logpot[0, 0],
                                             &bound[0], &ns[0], &conv[0])
        else:
            status = mf_hmm_naive_infer(n, D, lag, context, &startprob[0], &transmat[0, 0],
                                        &U[0, 0], &V[0, 0], &W[0, 0], k,
                                        <Py_ssize_t *>&lengths[0], &X[0, 0], max_sweeps, tol,
                                        n_threads, &gamma[0, 0], &bound[0], &ns[0], &conv[0])
    return (status, np.asarray(bound)[:k], np.asarray(gamma)[:N], np.asarray(logpot)[:N],
            np.asarray(ns)[:k], np.asarray(conv)[:k].astype(bool))


def _capi_diag_selftest(int method, unsigned starts, const float64_t[::1] startprob,
                        const float64_t[:, ::1] transmat, const float64_t[:, ::1] U,
                        const float64_t[:, ::1] V, const float64_t[:, ::1] W,
                        const float64_t[::1] variances, Py_ssize_t lag, int context,
                        const float64_t[:, ::1] X, const intp_t[::1] lengths,
                        Py_ssize_t max_sweeps, double tol, int n_threads, bint logpot_null=False):
    """Tests only: call mf_hmm_infer_diag on arrays (no checks here: the C function's own are
    what is tested); ``variances`` None passes NULL, and so does ``logpot_null`` for logpot.
    The outputs start at -7 (a value no call writes), so that a refused call can be seen to
    leave them alone.  Returns (status, bound, gamma, logpot, n_sweeps, converged)."""
    cdef Py_ssize_t n = U.shape[0], D = U.shape[1], N = X.shape[0], k = lengths.shape[0]
    cdef float64_t[::1] bound = np.full(max(k, 1), -7.0)
    cdef float64_t[:, ::1] gamma = np.full((max(N, 1), n), -7.0)
    cdef float64_t[:, ::1] logpot = np.full((max(N, 1), n), -7.0)
    cdef Py_ssize_t[::1] ns = np.full(max(k, 1), -7, dtype=np.intp)
    cdef signed char[::1] conv = np.full(max(k, 1), -7, dtype=np.int8)
    cdef const double *var = NULL
    cdef double *lp = NULL if logpot_null else &logpot[0, 0]
    cdef int status
    if variances is not None:
        var = &variances[0]
    with nogil:
        status = mf_hmm_infer_diag(method, starts, n, D, lag, context, &startprob[0],
                                   &transmat[0, 0], &U[0, 0], &V[0, 0], &W[0, 0], var, k,
                                   <Py_ssize_t *>&lengths[0], &X[0, 0], max_sweeps, tol,
                                   n_threads, &gamma[0, 0], lp, &bound[0], &ns[0], &conv[0])
    return (status, np.asarray(bound)[:k], np.asarray(gamma)[:N], np.asarray(logpot)[:N],
            np.asarray(ns)[:k], np.asarray(conv)[:k])
