# C-level entry point of the NLGBN E-step; the contract is the docstring of mf_nlgbn_infer in
# _estep.pyx and section 4 of mfengine/solver.pxd.  The status codes are the one enum
# of every mfengine kernel, csrc/mf_status.h (a cimporting extension compiles with
# include_dirs=[mfengine.get_include()], where that header is installed).

cdef extern from "mf_status.h":
    enum:
        MF_OK
        MF_NOT_CONVERGED
        MF_EBADARG
        MF_ENOMEM
        MF_EOVERFLOW

cdef int mf_nlgbn_infer(
    Py_ssize_t n_layers, const Py_ssize_t *sizes, const signed char *types,
    const double *weights, const double *biases, const double *variances,
    Py_ssize_t n_patterns, const double *X, const unsigned char *missing,
    double tol, Py_ssize_t max_sweeps, int warm_start, int n_threads,
    double *mu, double *logvar, double *bound, Py_ssize_t *n_sweeps,
    unsigned char *converged) noexcept nogil
