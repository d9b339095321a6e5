# C-level entry points of the Gaussian mean-field solver; the contract is in mfengine/solver.pxd.
from mfengine._typedefs cimport intp_t

cdef enum:
    MF_OK = 0
    MF_NOT_CONVERGED = 1
    MF_EBADARG = -1
    MF_ENOMEM = -2

cdef int mf_sbn_gaussian_infer(
    Py_ssize_t n_layers, const Py_ssize_t *sizes, const double *weights, const double *biases,
    Py_ssize_t n_patterns, const double *V, const unsigned char *missing,
    double tol, double inner_tol, Py_ssize_t max_sweeps, int n_threads,
    double *mu, double *xi, double *bound, Py_ssize_t *n_sweeps,
    signed char *converged) noexcept nogil

cdef int mf_sbn_gaussian_gradient(
    Py_ssize_t n_layers, const Py_ssize_t *sizes, const double *weights, const double *biases,
    Py_ssize_t n_patterns, const double *V, const unsigned char *missing,
    const double *mu, const double *xi, double *grad_weights, double *grad_biases) noexcept nogil
