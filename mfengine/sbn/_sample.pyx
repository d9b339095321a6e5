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
before it is overwritten by the state, so one array serves as input and output.  Rows are
drawn in blocks of up to 16 (fewer for nets of over a million units) whose states are kept
unit-major in a scratch array of at most about 16 MB per thread, so that the weights and the
parent lists are read once per block; each row's sum is taken in the same order whatever the
block, so the draw does not depend on it.  Cost: O(nnz) per draw, no O(n_units**2) anywhere;
blocks are split over ``n_threads`` threads.  Returns MF_ENOMEM if a thread cannot allocate
its scratch array.
"""
from cython.parallel cimport prange, parallel
from libc.math cimport expm1
from libc.stdlib cimport malloc, free
from mfengine._typedefs cimport intp_t
from mfengine.sbn._dag cimport MF_OK, MF_EBADARG, MF_ENOMEM

cdef extern from "mf_numerics.h" nogil:
    double mf_sigmoid(double x)


cdef void draw_rows(Py_ssize_t n, const intp_t *par_ptr, const intp_t *par_idx,
                    const double *w, const double *h, double *U, Py_ssize_t ldu, Py_ssize_t B,
                    double *T, double *z, bint noisy_or) noexcept nogil:
    """Draw the B rows U[0], U[ldu], ... of one net together: T (n x B, unit-major) holds the
    states of the block, so each edge's weight and parent index are read once per block and
    the B parent states it needs are contiguous.  Each row's z_i is summed in the same order
    as one row at a time would (h_i, then the parents in CSR order): the same draw for any
    block size or thread count."""
    cdef Py_ssize_t i, k, b
    cdef double wk, p, u
    cdef const double *tj
    for i in range(n):
        for b in range(B):
            z[b] = h[i]
        for k in range(par_ptr[i], par_ptr[i + 1]):
            wk = w[k]
            tj = T + par_idx[k] * B
            for b in range(B):
                z[b] += wk * tj[b]
        for b in range(B):
            if noisy_or:
                p = -expm1(-z[b]) if z[b] > 0.0 else 0.0
            else:
                p = mf_sigmoid(z[b])
            u = U[b * ldu + i]
            T[i * B + b] = 1.0 if u < p else 0.0
            U[b * ldu + i] = T[i * B + b]


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
    # rows are drawn in blocks of up to B (of one net each); the block's states take
    # n * B doubles per thread, at most about 16 MB
    cdef Py_ssize_t B = 16
    while B > 1 and <double> n * B * 8.0 > 16e6:
        B //= 2
    cdef Py_ssize_t n_blocks = (n_rows + B - 1) // B, blk, r0, r1, rr
    cdef const intp_t *pp = &par_ptr[0]
    cdef const intp_t *pi = &par_idx[0] if nnz else NULL
    cdef double dummy = 0.0
    cdef double *T = NULL
    cdef double *z = NULL
    cdef int failed = 0
    # no more threads than blocks, and one thread for small jobs (waking threads costs more
    # than a draw of a few hundred thousand edge visits; the draw does not depend on it)
    if n_threads > n_blocks:
        n_threads = <int> n_blocks if n_blocks > 0 else 1
    if <double> n_rows * <double> (n + nnz) < 2e5:
        n_threads = 1
    with nogil, parallel(num_threads=n_threads):
        T = <double *> malloc((<size_t> n * B + B) * sizeof(double))
        z = T + n * B if T != NULL else NULL
        for blk in prange(n_blocks, schedule="static"):
            if T == NULL:
                failed = 1
                continue
            r0 = blk * B
            r1 = r0 + B if r0 + B < n_rows else n_rows
            while r0 < r1:          # a run of rows of one net
                rr = r0 + 1
                while rr < r1 and net_of[rr] == net_of[r0]:
                    rr = rr + 1
                draw_rows(n, pp, pi, &w[net_of[r0], 0] if nnz else &dummy, &h[net_of[r0], 0],
                          &U[r0, 0], n, rr - r0, T, z, noisy_or)
                r0 = rr
        free(T)
    if failed:
        return MF_ENOMEM
    return MF_OK


#: Status codes of ``mf_status.h``, for the Python wrapper.
STATUS_OK = MF_OK
STATUS_EBADARG = MF_EBADARG
STATUS_ENOMEM = MF_ENOMEM
