# What the DAG kernels (mfengine.sbn._sjj, mfengine.sbn._plefka) share: the compressed
# structure of a DAG, the status codes of csrc/mf_status.h, and the checks every kernel entry
# point runs before it reads anything (all inline: nothing is imported at run time).
from libc.math cimport fabs, log1p, expm1
from libc.stdlib cimport malloc

from mfengine._typedefs cimport intp_t, uint8_t

cdef extern from "mf_numerics.h" nogil:
    double mf_sigmoid(double x)

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


# ---- barren units: free units none of whose descendants is clamped (free, and every child
# barren; a missing leaf, an unrecorded finding).  They sum out of P(clamped units) exactly
# (their factors and those of their barren descendants sum to 1 whatever the other units'
# states), so the DAG kernels leave them out of an item's solve and set their means afterwards
# from their parents' solved means, top-down.

cdef inline Py_ssize_t mark_barren(const Dag *g, const uint8_t *free_,
                                   uint8_t *barren) noexcept nogil:
    """barren[i] = 1 iff unit i is free and all its children are barren: one pass in reverse
    topological order (children after their parents), O(n + nnz).  Returns their number."""
    cdef Py_ssize_t i, a, count = 0
    cdef uint8_t b
    for i in range(g.n - 1, -1, -1):
        b = 1 if free_[i] else 0
        if b:
            for a in range(g.ch_ptr[i], g.ch_ptr[i + 1]):
                if not barren[g.ch_idx[a]]:
                    b = 0
                    break
        barren[i] = b
        count += b
    return count


cdef inline Py_ssize_t barren_of_clamp(const Dag *g, const double *clamp, uint8_t *free_,
                                       uint8_t *barren) noexcept nogil:
    """An item's free units (NaN in its clamp row) in ``free_`` and its barren ones in
    ``barren`` (mark_barren); returns their number."""
    cdef Py_ssize_t i
    for i in range(g.n):
        free_[i] = 0 if clamp[i] == clamp[i] else 1
    return mark_barren(g, free_, barren)


cdef inline void barren_means_sig(const Dag *g, const double *w, const double *h,
                                  const uint8_t *barren, double *mu) noexcept nogil:
    """Every barren unit's mean set to sigmoid(h_i + sum_j W_ij mu_j), in topological order (a
    barren unit's barren parents are set before it): the mean a mean-field solve gives a
    unit without children, here from its parents' solved means."""
    cdef Py_ssize_t i, k
    cdef double z
    for i in range(g.n):
        if barren[i]:
            z = h[i]
            for k in range(g.par_ptr[i], g.par_ptr[i + 1]):
                z += w[k] * mu[g.par_idx[k]]
            mu[i] = mf_sigmoid(z)


cdef inline void barren_means(const Dag *g, const double *w, const double *h,
                              const uint8_t *barren, double *mu) noexcept nogil:
    """The noisy-OR predictive mean 1 - e^{-h_i} prod_j (1 - mu_j + mu_j e^{-W_ij}) of every
    barren unit (exact for a factorised distribution over its parents), in topological order."""
    cdef Py_ssize_t i, k
    cdef double lp, m
    for i in range(g.n):
        if not barren[i]:
            continue
        lp = -h[i]
        for k in range(g.par_ptr[i], g.par_ptr[i + 1]):
            m = mu[g.par_idx[k]]
            if m > 0.0 and w[k] > 0.0:
                lp += log1p(m * expm1(-w[k]))
        m = -expm1(lp)
        mu[i] = m if m < 1.0 else 1.0


# ---- the C entry points' checks of a net given over raw pointers (mf_sjj_solve,
# mf_plefka_solve, mf_plefka_gradient)

cdef inline int capi_check_net(Py_ssize_t n_units, Py_ssize_t nnz, const Py_ssize_t *par_ptr,
                               const Py_ssize_t *par_idx, const double *weights,
                               const double *biases, bint noisy_or, bint positive_leak,
                               double max_scale) noexcept nogil:
    """The structure (parents before their children, strictly increasing per unit), finite
    weights and biases with sum |h| + sum |w| <= max_scale, and for noisy-OR units w >= 0 and
    h >= 0 (h > 0 with positive_leak); MF_EBADARG otherwise.  The activation code itself is
    the caller's to check."""
    cdef Py_ssize_t i, e
    cdef double scale = 0.0, x
    if n_units < 0 or nnz < 0 or par_ptr == NULL:
        return MF_EBADARG
    if (nnz > 0 and (par_idx == NULL or weights == NULL)) or (n_units > 0 and biases == NULL):
        return MF_EBADARG
    if par_ptr[0] != 0 or par_ptr[n_units] != nnz:
        return MF_EBADARG
    for i in range(n_units):
        if par_ptr[i + 1] < par_ptr[i] or par_ptr[i + 1] > nnz:
            return MF_EBADARG
        for e in range(par_ptr[i], par_ptr[i + 1]):
            if not (0 <= par_idx[e] < i):
                return MF_EBADARG       # parents precede their children
            if e > par_ptr[i] and par_idx[e] <= par_idx[e - 1]:
                return MF_EBADARG       # in increasing order, no repeats
        x = biases[i]
        if not (fabs(x) <= 1.7976931348623157e308):
            return MF_EBADARG
        if noisy_or and not (x > 0.0 if positive_leak else x >= 0.0):
            return MF_EBADARG
        scale += fabs(x)
    for e in range(nnz):
        x = weights[e]
        if not (fabs(x) <= 1.7976931348623157e308) or (noisy_or and not (x >= 0.0)):
            return MF_EBADARG
        scale += fabs(x)
    if not (scale <= max_scale):
        return MF_EBADARG
    return MF_OK


cdef inline int capi_dag(Py_ssize_t n, Py_ssize_t nnz, const Py_ssize_t *par_ptr,
                         const Py_ssize_t *par_idx, Dag *g, intp_t **out) noexcept nogil:
    """g from a checked parent structure, with its child lists (ch_ptr (n + 1), ch_idx (nnz),
    ch_w (nnz)), children in increasing order, in one allocation (*out; the caller frees it);
    MF_ENOMEM if it fails (g untouched)."""
    cdef intp_t *buf = <intp_t *> malloc((n + 2 + 2 * nnz) * sizeof(intp_t))
    cdef intp_t *ch_ptr
    cdef intp_t *ch_idx
    cdef intp_t *ch_w
    cdef Py_ssize_t i, e, k
    if buf == NULL:
        return MF_ENOMEM
    ch_ptr = buf
    ch_idx = buf + n + 1
    ch_w = ch_idx + nnz
    for i in range(n + 1):
        ch_ptr[i] = 0
    for e in range(nnz):
        ch_ptr[par_idx[e] + 1] += 1
    for i in range(n):
        ch_ptr[i + 1] += ch_ptr[i]
    for i in range(n):
        for e in range(par_ptr[i], par_ptr[i + 1]):
            k = par_idx[e]
            ch_idx[ch_ptr[k]] = i
            ch_w[ch_ptr[k]] = e
            ch_ptr[k] += 1
    for i in range(n, 0, -1):
        ch_ptr[i] = ch_ptr[i - 1]
    ch_ptr[0] = 0
    out[0] = buf
    g.n = n
    g.nnz = nnz
    g.par_ptr = par_ptr
    g.par_idx = par_idx
    g.ch_ptr = ch_ptr
    g.ch_idx = ch_idx
    g.ch_w = ch_w
    return MF_OK
