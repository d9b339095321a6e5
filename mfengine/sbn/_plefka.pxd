# The C API of the Plefka kernel (mfengine.sbn._plefka), for mfengine/solver.pxd to cimport:
#
#     from mfengine.sbn._plefka cimport mf_plefka_solve, mf_plefka_gradient
#
# Contract: section 2 of mfengine/solver.pxd (the mean-field solve of the Plefka schemes G11,
# G12, G22 of Bhattacharyya & Keerthi for one DAG belief net of sigmoid or noisy-OR units in
# CSR form, and G with its gradient in the weights and biases).  Both functions are noexcept nogil,
# check every size, pointer and value they read before reading anything else (MF_EBADARG,
# nothing written), and return a code of mf_status.h.
cdef int mf_plefka_solve(Py_ssize_t n_units, Py_ssize_t nnz, const Py_ssize_t *par_ptr,
                         const Py_ssize_t *par_idx, const double *weights,
                         const double *biases, int activation, int order, Py_ssize_t n_items,
                         const double *clamp, const double *init, double tol,
                         Py_ssize_t max_iter, int n_threads, double *G, double *u,
                         Py_ssize_t *n_iter, signed char *converged) noexcept nogil

cdef int mf_plefka_gradient(Py_ssize_t n_units, Py_ssize_t nnz, const Py_ssize_t *par_ptr,
                            const Py_ssize_t *par_idx, const double *weights,
                            const double *biases, int activation, int order,
                            Py_ssize_t n_items, const double *clamp, const double *u,
                            double *G, double *grad_weights, double *grad_biases) noexcept nogil
