# C-level entry points of the context-HMM kernels (mfengine.hmm._chain), for other Cython
# libraries:
#
#     from mfengine.hmm._chain cimport mf_hmm_structured_infer, MF_OK
#
# A cimporting extension compiles with include_dirs=[mfengine.get_include()] (the status codes
# are the enum of the installed header mf_status.h).  The contract is in the docstring of
# mfengine.hmm._chain (the section "C API") and in section 3 of mfengine/solver.pxd; in short:
#
# Every function is noexcept nogil, takes raw pointers and sizes (row-major arrays), writes its
# outputs through pointers the caller allocated, and returns MF_OK, MF_NOT_CONVERGED (results
# written, some sequence reached max_sweeps), MF_EBADARG (a bad argument; nothing written),
# MF_ENOMEM or MF_EOVERFLOW.  Model: n states, D output dimensions, lag >= 1, context 1 (right),
# 2 (left) or 3 (both); startprob (n,), transmat (n, n) probability vectors (rows summing to 1
# within 1e-8); U, V, W (n, D) the own-state, right-context and left-context means (V read only
# with right context, W only with left; may be NULL otherwise), finite, |entry| <= 1e100.
# Sequences: n_seq >= 0 of lengths[s] >= 1 rows, concatenated in X (sum(lengths), D); a NaN
# entry of X is a missing value (marginalised), infinities are refused.  mf_hmm_infer_diag takes
# either method and a diagonal output covariance: variances (D,) each finite and > 0, or NULL
# for the identity of the others.

cdef extern from "mf_status.h":
    enum:
        MF_OK
        MF_NOT_CONVERGED
        MF_EBADARG
        MF_ENOMEM
        MF_EOVERFLOW

# The bits of mf_hmm_structured_infer_starts's mask (ContextHMM(starts=...)'s "link",
# "naive-link", "first-order", "own-means"); mf_hmm_structured_infer runs all four.
cdef extern from "mfengine_solver.h":
    enum:
        MF_HMM_START_LINK "MFENGINE_HMM_START_LINK"
        MF_HMM_START_NAIVE_LINK "MFENGINE_HMM_START_NAIVE_LINK"
        MF_HMM_START_FIRST_ORDER "MFENGINE_HMM_START_FIRST_ORDER"
        MF_HMM_START_OWN_MEANS "MFENGINE_HMM_START_OWN_MEANS"
        MF_HMM_ALL_STARTS "MFENGINE_HMM_ALL_STARTS"
        # mf_hmm_infer_diag's methods: structured or fully factorised (naive) mean field
        MF_HMM_METHOD_STRUCTURED "MFENGINE_HMM_METHOD_STRUCTURED"
        MF_HMM_METHOD_NAIVE "MFENGINE_HMM_METHOD_NAIVE"

cdef int mf_hmm_fb_infer(
    Py_ssize_t T, Py_ssize_t n, const double *startprob, const double *transmat,
    const double *logpot, double *gamma, double *xi_sum, double *logz) noexcept nogil

cdef int mf_hmm_structured_infer(
    Py_ssize_t n, Py_ssize_t D, Py_ssize_t lag, int context, const double *startprob,
    const double *transmat, const double *U, const double *V, const double *W,
    Py_ssize_t n_seq, const Py_ssize_t *lengths, const double *X, Py_ssize_t max_sweeps,
    double tol, int n_threads, double *gamma, double *logpot, double *bound,
    Py_ssize_t *n_sweeps, signed char *converged) noexcept nogil

cdef int mf_hmm_structured_infer_starts(
    Py_ssize_t n, Py_ssize_t D, Py_ssize_t lag, int context, const double *startprob,
    const double *transmat, const double *U, const double *V, const double *W,
    Py_ssize_t n_seq, const Py_ssize_t *lengths, const double *X, Py_ssize_t max_sweeps,
    double tol, int n_threads, unsigned starts, double *gamma, double *logpot, double *bound,
    Py_ssize_t *n_sweeps, signed char *converged) noexcept nogil

cdef int mf_hmm_naive_infer(
    Py_ssize_t n, Py_ssize_t D, Py_ssize_t lag, int context, const double *startprob,
    const double *transmat, const double *U, const double *V, const double *W,
    Py_ssize_t n_seq, const Py_ssize_t *lengths, const double *X, Py_ssize_t max_sweeps,
    double tol, int n_threads, double *gamma, double *bound, Py_ssize_t *n_sweeps,
    signed char *converged) noexcept nogil

cdef int mf_hmm_infer_diag(
    int method, unsigned starts, Py_ssize_t n, Py_ssize_t D, Py_ssize_t lag, int context,
    const double *startprob, const double *transmat, const double *U, const double *V,
    const double *W, const double *variances, Py_ssize_t n_seq, const Py_ssize_t *lengths,
    const double *X, Py_ssize_t max_sweeps, double tol, int n_threads, double *gamma,
    double *logpot, double *bound, Py_ssize_t *n_sweeps, signed char *converged) noexcept nogil
