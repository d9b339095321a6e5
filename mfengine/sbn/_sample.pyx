"""Kernel: ancestral sampling of DAG belief nets (sigmoid and noisy-OR units).

Called only from ``BeliefNet.sample`` and ``BeliefNetBatch.sample`` (mfengine/sbn/dag.py),
which check the parameters; the entry point still checks every size and index it reads and
returns ``MF_EBADARG`` (``mf_status.h``) instead of trusting its caller.

Each row of ``U`` is one draw: it holds uniform numbers in [0, 1) on entry (drawn by the
caller from its seeded generator, so that the draw does not depend on the thread count) and
the sampled states 0.0 / 1.0 on return.  Units are visited in index order, which is a
topological order (every parent j of unit i has j < i, checked); unit i is on when
``U[r, i] < P(S_i = 1 | parents)``, with ``z_i = h_i + sum_j W_ij S_j`` over the CSR parent
list and ``P = sigmoid(z)`` or ``1 - exp(-z)`` (noisy-OR).  The uniform of unit i is read just
before it is overwritten by the state, so one array serves as input and output.  Cost:
O(nnz) per draw, no O(n_units**2) anywhere; rows are split over ``n_threads`` threads.
"""
from cython.parallel cimport prange
from libc.math cimport expm1
from mfengine._typedefs cimport intp_t
from mfengine.sbn._dag cimport MF_OK, MF_EBADARG

cdef extern from "mf_numerics.h" nogil:
    double mf_sigmoid(double x)


cdef inline void draw_row(Py_ssize_t n, const intp_t *par_ptr, const intp_t *par_idx,
                          const double *w, const double *h, double *row,
                          bint noisy_or) noexcept nogil:
    cdef Py_ssize_t i, k
    cdef double z, p
    for i in range(n):
        z = h[i]
        for k in range(par_ptr[i], par_ptr[i + 1]):
            z += w[k] * row[par_idx[k]]
        if noisy_or:
            p = -expm1(-z) if z > 0.0 else 0.0
        else:
            p = mf_sigmoid(z)
        row[i] = 1.0 if row[i] < p else 0.0


cdef int check_rows(Py_ssize_t n, const intp_t *par_ptr, const intp_t *par_idx,
                    const intp_t *net_of, Py_ssize_t n_rows, Py_ssize_t n_nets) noexcept nogil:
    """MF_OK if the parent lists are ordered CSR with every parent before its child and every
    net_of in [0, n_nets); MF_EBADARG otherwise.  O(n + nnz + n_rows)."""
    cdef Py_ssize_t i, k, r
    for i in range(n):
        if par_ptr[i + 1] < par_ptr[i]:
            return MF_EBADARG
        for k in range(par_ptr[i], par_ptr[i + 1]):
            if not (0 <= par_idx[k] < i):
                return MF_EBADARG
    for r in range(n_rows):
        if not (0 <= net_of[r] < n_nets):
            return MF_EBADARG
    return MF_OK


def sample(const intp_t[::1] par_ptr, const intp_t[::1] par_idx, const double[:, ::1] w,
           const double[:, ::1] h, const intp_t[::1] net_of, double[:, ::1] U,
           bint noisy_or=False, int n_threads=1):
    """Overwrite each row of ``U`` (n_rows, n_units; uniforms in [0, 1) on entry) with a draw
    of the net ``net_of[row]`` (weights ``w[net]`` in the order of ``par_idx``, biases
    ``h[net]``).  Returns MF_OK, or MF_EBADARG (nothing written) when a size or an index is
    inconsistent or a parent does not precede its child."""
    cdef Py_ssize_t n = par_ptr.shape[0] - 1, nnz = par_idx.shape[0], n_rows = U.shape[0]
    cdef Py_ssize_t i, k, r
    if n < 0 or U.shape[1] != n or h.shape[1] != n or w.shape[1] != nnz \
            or w.shape[0] != h.shape[0] or net_of.shape[0] != n_rows or n_threads < 1:
        return MF_EBADARG
    if par_ptr[0] != 0 or par_ptr[n] != nnz:
        return MF_EBADARG
    if check_rows(n, &par_ptr[0], &par_idx[0] if nnz else NULL, &net_of[0] if n_rows else NULL,
                  n_rows, h.shape[0]) != MF_OK:
        return MF_EBADARG
    if n_rows == 0 or n == 0:
        return MF_OK
    cdef const intp_t *pp = &par_ptr[0]
    cdef const intp_t *pi = &par_idx[0] if nnz else NULL
    cdef double dummy = 0.0
    for r in prange(n_rows, nogil=True, schedule="static", num_threads=n_threads):
        draw_row(n, pp, pi, &w[net_of[r], 0] if nnz else &dummy, &h[net_of[r], 0], &U[r, 0],
                 noisy_or)
    return MF_OK


#: Status codes of ``mf_status.h``, for the Python wrapper.
STATUS_OK = MF_OK
STATUS_EBADARG = MF_EBADARG
