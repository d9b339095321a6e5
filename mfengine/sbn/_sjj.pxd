# The C API of the strict-bound (SJJ) kernel (mfengine.sbn._sjj), for mfengine/solver.pxd to
# cimport:
#
#     from mfengine.sbn._sjj cimport mf_sjj_solve
#
# Contract: section 2 of mfengine/solver.pxd (Saul, Jaakkola & Jordan's strict lower bound on
# ln P(clamped units), maximised over the means and the variational parameters of every item,
# for one DAG belief net of sigmoid or noisy-OR units in CSR form, as mfengine.sbn.sjj.solve).
# The function is noexcept nogil, checks every size, pointer and value it reads before it
# writes anything (MF_EBADARG, nothing written), and returns a code of mf_status.h.
cdef int mf_sjj_solve(Py_ssize_t n_units, Py_ssize_t nnz, const Py_ssize_t *par_ptr,
                      const Py_ssize_t *par_idx, const double *weights, const double *biases,
                      int activation, Py_ssize_t n_items, const double *clamp,
                      const double *init_mu, const double *init_xi, double tol,
                      double inner_tol, Py_ssize_t max_sweeps, int n_threads, double *bound,
                      double *mu, double *xi, Py_ssize_t *n_sweeps,
                      signed char *converged) noexcept nogil
