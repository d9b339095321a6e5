# What the DAG kernels (mfengine.sbn._sjj, mfengine.sbn._plefka) share: the compressed
# structure of a DAG, the status codes of csrc/mf_status.h, and the checks every kernel entry
# point runs before it reads anything (all inline: nothing is imported at run time).
from mfengine._typedefs cimport intp_t

cdef extern from "mf_status.h" nogil:
    enum:
        MF_OK
        MF_NOT_CONVERGED
        MF_EBADARG
        MF_ENOMEM
        MF_EOVERFLOW


cdef struct Dag:
    Py_ssize_t n
    Py_ssize_t nnz
    const intp_t *par_ptr
    const intp_t *par_idx
    const intp_t *ch_ptr
    const intp_t *ch_idx
    const intp_t *ch_w


cdef inline int check_dag(const intp_t[::1] par_ptr, const intp_t[::1] par_idx,
                          const intp_t[::1] ch_ptr, const intp_t[::1] ch_idx,
                          const intp_t[::1] ch_w, Dag *g) noexcept nogil:
    """Fill g from the structure arrays if every pointer and index is in range (then no
    index is ever read out of bounds); MF_EBADARG otherwise, g untouched.  O(n + nnz)."""
    cdef Py_ssize_t n = par_ptr.shape[0] - 1, nnz = par_idx.shape[0], i, k
    if n < 0 or ch_ptr.shape[0] != n + 1 or ch_idx.shape[0] != nnz or ch_w.shape[0] != nnz:
        return MF_EBADARG
    if par_ptr[0] != 0 or ch_ptr[0] != 0 or par_ptr[n] != nnz or ch_ptr[n] != nnz:
        return MF_EBADARG
    for i in range(n):
        if par_ptr[i + 1] < par_ptr[i] or ch_ptr[i + 1] < ch_ptr[i]:
            return MF_EBADARG
    for k in range(nnz):
        if not (0 <= par_idx[k] < n and 0 <= ch_idx[k] < n and 0 <= ch_w[k] < nnz):
            return MF_EBADARG
    g.n = n
    g.nnz = nnz
    g.par_ptr = &par_ptr[0]
    g.par_idx = &par_idx[0] if nnz else NULL
    g.ch_ptr = &ch_ptr[0]
    g.ch_idx = &ch_idx[0] if nnz else NULL
    g.ch_w = &ch_w[0] if nnz else NULL
    return MF_OK


cdef inline int check_items(const Dag *g, const double[:, ::1] w, const double[:, ::1] h,
                            const intp_t[::1] net_of, const double[:, ::1] clamp) noexcept nogil:
    """MF_EBADARG unless w is (n_nets, nnz), h (n_nets, n), clamp (n_items, n) and every
    net_of in [0, n_nets)."""
    cdef Py_ssize_t p
    if w.shape[1] != g.nnz or h.shape[1] != g.n or w.shape[0] != h.shape[0]:
        return MF_EBADARG
    if clamp.shape[1] != g.n or net_of.shape[0] != clamp.shape[0]:
        return MF_EBADARG
    for p in range(net_of.shape[0]):
        if not (0 <= net_of[p] < h.shape[0]):
            return MF_EBADARG
    return MF_OK
