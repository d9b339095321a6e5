# C-level entry points of the Gaussian mean-field solver; the contract is in mfengine/solver.pxd.
# The status codes are the one enum of every mfengine kernel, csrc/mf_status.h (a cimporting
# extension compiles with include_dirs=[mfengine.get_include()], where that header is installed).

cdef extern from "mf_status.h":
    enum:
        MF_OK
        MF_NOT_CONVERGED
        MF_EBADARG
        MF_ENOMEM
        MF_EOVERFLOW

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
