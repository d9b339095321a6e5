# The C-level API (part of _gaussian.pyx): mf_sbn_gaussian_infer / mf_sbn_gaussian_gradient,
# for Cython callers (mfengine/solver.pxd) and, exported, for C callers (mfengine_solver.h).
#
# The contract (layouts, units, status codes) is written in mfengine/solver.pxd.  Nothing from
# the caller is trusted: every size, pointer and value is checked before anything is read
# beyond the sizes themselves, every size computation is checked for overflow, and on an error
# nothing is written.

cdef struct OwnedNet:
    Net net
    void *block


cdef inline bint add_ok(Py_ssize_t a, Py_ssize_t b, Py_ssize_t *out) noexcept nogil:
    """out = a + b for a, b >= 0, unless that overflows."""
    if b > PTRDIFF_MAX - a:
        return False
    out[0] = a + b
    return True


cdef inline bint mul_ok(Py_ssize_t a, Py_ssize_t b, Py_ssize_t *out) noexcept nogil:
    """out = a * b for a, b >= 0, unless that overflows."""
    if a != 0 and b > PTRDIFF_MAX / a:
        return False
    out[0] = a * b
    return True


cdef inline bint in_range(double x) noexcept nogil:
    """Finite, and within the parameter range of the kernel (false for NaN)."""
    return fabs(x) <= MF_SBN_PARAM_LIMIT


cdef int net_size(Py_ssize_t n_layers, const Py_ssize_t *sizes, Py_ssize_t *U, Py_ssize_t *W,
                  Py_ssize_t *width, Py_ssize_t *nbytes) noexcept nogil:
    """Check the layer sizes; the unit and weight counts, the widest layer, and the bytes of
    build_net's block (every product and sum overflow-checked: MF_EOVERFLOW)."""
    cdef Py_ssize_t l, prod, t
    if n_layers < 2 or sizes == NULL:
        return MF_EBADARG
    U[0] = 0
    W[0] = 0
    width[0] = 0
    for l in range(n_layers):
        if sizes[l] < 1:
            return MF_EBADARG
    for l in range(n_layers):
        if not add_ok(U[0], sizes[l], U):
            return MF_EOVERFLOW
        width[0] = sizes[l] if sizes[l] > width[0] else width[0]
        if l + 1 < n_layers:
            if not mul_ok(sizes[l], sizes[l + 1], &prod) or not add_ok(W[0], prod, W):
                return MF_EOVERFLOW
    # (3 L + 1) intp + (2 W + 4 U) doubles + L int8
    if (not mul_ok(3, n_layers, &t) or not add_ok(t, 1, &t)
            or not mul_ok(t, sizeof(intp_t), nbytes)
            or not mul_ok(2, W[0], &t) or not mul_ok(4, U[0], &prod) or not add_ok(t, prod, &t)
            or not mul_ok(t, sizeof(double), &t) or not add_ok(nbytes[0], t, nbytes)
            or not add_ok(nbytes[0], n_layers, nbytes)):
        return MF_EOVERFLOW
    return MF_OK


cdef int build_net(Py_ssize_t n_layers, const Py_ssize_t *sizes, const double *weights,
                   const double *biases, OwnedNet *out) noexcept nogil:
    """Check the arguments and build the solver's net (one malloc'd block) from raw arrays."""
    cdef Py_ssize_t l, i, j, c, U, W, width, nbytes
    cdef char *p
    cdef intp_t *isz
    cdef intp_t *off
    cdef intp_t *woff
    cdef double *WT
    cdef double *WT2
    cdef double *bias
    cdef double *jmax
    cdef double *j2max
    cdef double *c2
    cdef int8_t *need_u
    cdef int status = net_size(n_layers, sizes, &U, &W, &width, &nbytes)
    if status != MF_OK:
        return status
    if weights == NULL or biases == NULL:
        return MF_EBADARG
    for i in range(W):
        if not in_range(weights[i]):
            return MF_EBADARG
    for i in range(U):
        if not in_range(biases[i]):
            return MF_EBADARG
    p = <char *> malloc(nbytes)
    if p == NULL:
        return MF_ENOMEM
    out.block = p
    WT = <double *> p
    WT2 = WT + W
    bias = WT2 + W
    jmax = bias + U
    j2max = jmax + U
    c2 = j2max + U
    isz = <intp_t *> (c2 + U)
    off = isz + n_layers
    woff = off + n_layers + 1
    need_u = <int8_t *> (woff + n_layers)
    off[0] = 0
    woff[0] = 0
    for l in range(n_layers):
        isz[l] = sizes[l]
        off[l + 1] = off[l] + sizes[l]
        if l + 1 < n_layers:
            woff[l + 1] = woff[l] + sizes[l] * sizes[l + 1]
    need_u[0] = 0
    for l in range(n_layers - 1):
        # weights block l is (sizes[l+1], sizes[l]) row-major; WT block l is its transpose
        for c in range(sizes[l + 1]):
            for j in range(sizes[l]):
                WT[woff[l] + j * sizes[l + 1] + c] = weights[woff[l] + c * sizes[l] + j]
    for i in range(W):
        WT2[i] = WT[i] * WT[i]
    for i in range(U):
        bias[i] = biases[i]
        jmax[i] = 0.0
        j2max[i] = 0.0
        c2[i] = 0.0
    out.net.n_layers = n_layers
    out.net.n_units = U
    out.net.sizes = isz
    out.net.offset = off
    out.net.woff = woff
    out.net.WT = WT
    out.net.WT2 = WT2
    out.net.bias = bias
    out.net.need_u = need_u
    out.net.jmax = jmax
    out.net.j2max = j2max
    out.net.c2 = c2
    update_static(&out.net, need_u, jmax, j2max, c2)
    return MF_OK


cdef int check_data(Py_ssize_t n, Py_ssize_t nv, Py_ssize_t U, const double *V,
                    const unsigned char *missing) noexcept nogil:
    """n >= 0 patterns whose sizes n nv and n U fit (MF_EOVERFLOW), V given when n > 0, and
    every observed entry of V 0 or 1."""
    cdef Py_ssize_t i, nnv, nU
    if n < 0:
        return MF_EBADARG
    if not mul_ok(n, nv, &nnv) or not mul_ok(n, U, &nU):
        return MF_EOVERFLOW
    if n > 0 and V == NULL:
        return MF_EBADARG
    for i in range(nnv):
        if (missing == NULL or not missing[i]) and not (V[i] == 0.0 or V[i] == 1.0):
            return MF_EBADARG
    return MF_OK


cdef inline bint is_mean(double x) noexcept nogil:
    return x >= 0.0 and x <= 1.0      # false for NaN


cdef struct InferJob:
    const Net *net
    const double *V
    const unsigned char *missing
    double *mu
    double *xi
    double *bound
    Py_ssize_t *n_sweeps
    signed char *converged
    double tol, gtol, gain_tol
    Py_ssize_t max_sweeps, U, nv, width, stride
    double *scratch             # one block of stride doubles per thread


cdef void infer_body(void *ctx, Py_ssize_t p, int thread) noexcept nogil:
    cdef InferJob *job = <InferJob *> ctx
    cdef Work w = make_work(job.scratch + thread * job.stride, job.net, job.width, job.nv,
                            job.gain_tol)
    cdef intp_t sw = 0
    job.converged[p] = solve_pattern(job.net, job.V + p * job.nv,
                                     job.missing + p * job.nv if job.missing != NULL else NULL,
                                     job.mu + p * job.U, job.xi + p * job.U, &w, job.tol,
                                     job.gtol, job.max_sweeps, job.bound + p, &sw)
    job.n_sweeps[p] = sw


cdef int work_size(Py_ssize_t U, Py_ssize_t width, Py_ssize_t nv, Py_ssize_t extra,
                   Py_ssize_t copies, Py_ssize_t *stride, Py_ssize_t *nbytes) noexcept nogil:
    """stride = WORK_SIZE(U, width, nv) + extra doubles, nbytes = copies * stride * 8, unless
    that overflows."""
    cdef Py_ssize_t a, b
    if (not mul_ok(5, U, &a) or not mul_ok(7, width, &b) or not add_ok(a, b, &a)
            or not add_ok(a, nv, &a) or not add_ok(a, extra, stride)
            or not mul_ok(stride[0], copies, &a) or not mul_ok(a, sizeof(double), nbytes)):
        return MF_EOVERFLOW
    return MF_OK


cdef int mf_sbn_gaussian_infer(
        Py_ssize_t n_layers, const Py_ssize_t *sizes, const double *weights, const double *biases,
        Py_ssize_t n_patterns, const double *V, const unsigned char *missing,
        double tol, double inner_tol, Py_ssize_t max_sweeps, int n_threads,
        double *mu, double *xi, double *bound, Py_ssize_t *n_sweeps,
        signed char *converged) noexcept nogil:
    cdef OwnedNet own
    cdef Py_ssize_t U, W, nv, H, width, nbytes, stride, p, i
    cdef double gtol, gain_tol
    cdef int status = net_size(n_layers, sizes, &U, &W, &width, &nbytes)
    if status != MF_OK:
        return status
    nv = sizes[n_layers - 1]
    H = U - nv
    status = check_data(n_patterns, nv, U, V, missing)
    if status != MF_OK:
        return status
    if not (tol > 0.0 and tol <= DBL_MAX) or not (inner_tol <= DBL_MAX) or max_sweeps < 1:
        return MF_EBADARG
    if n_patterns > 0 and (mu == NULL or xi == NULL or bound == NULL or n_sweeps == NULL
                           or converged == NULL):
        return MF_EBADARG
    for p in range(n_patterns):
        for i in range(H):
            if not is_mean(mu[p * U + i]):
                return MF_EBADARG
    n_threads = mf_clamp_threads(n_threads, n_patterns)
    status = work_size(U, width, nv, 0, n_threads, &stride, &nbytes)
    if status != MF_OK:
        return status
    status = build_net(n_layers, sizes, weights, biases, &own)
    if status != MF_OK:
        return status
    if inner_tol > 0.0:
        gtol = inner_tol
        gain_tol = 0.0
    else:
        # the defaults of mfengine's infer
        gtol = 0.1 * sqrt(tol)
        gtol = 1e-13 if gtol < 1e-13 else (1e-3 if gtol > 1e-3 else gtol)
        gain_tol = tol / (10.0 * (H if H > 1 else 1))
    cdef InferJob job
    job.net = &own.net
    job.V = V
    job.missing = missing
    job.mu = mu
    job.xi = xi
    job.bound = bound
    job.n_sweeps = n_sweeps
    job.converged = converged
    job.tol = tol
    job.gtol = gtol
    job.gain_tol = gain_tol
    job.max_sweeps = max_sweeps
    job.U = U
    job.nv = nv
    job.width = width
    job.stride = stride
    job.scratch = <double *> malloc(nbytes)
    if job.scratch == NULL:
        free(own.block)
        return MF_ENOMEM
    mf_parallel_for(n_patterns, n_threads, infer_body, &job)
    free(job.scratch)
    free(own.block)
    for p in range(n_patterns):
        if not converged[p]:
            return MF_NOT_CONVERGED
    return MF_OK


cdef int mf_sbn_gaussian_gradient(
        Py_ssize_t n_layers, const Py_ssize_t *sizes, const double *weights, const double *biases,
        Py_ssize_t n_patterns, const double *V, const unsigned char *missing,
        const double *mu, const double *xi, double *grad_weights,
        double *grad_biases) noexcept nogil:
    cdef OwnedNet own
    cdef Py_ssize_t U, nv, width, p, i, l, j, c, W, nbytes, stride
    cdef double *scratch
    cdef double *gWT
    cdef double *delta
    cdef double *q
    cdef double *murow
    cdef Work w
    cdef int status = net_size(n_layers, sizes, &U, &W, &width, &nbytes)
    if status != MF_OK:
        return status
    nv = sizes[n_layers - 1]
    status = check_data(n_patterns, nv, U, V, missing)
    if status != MF_OK:
        return status
    if grad_weights == NULL or grad_biases == NULL:
        return MF_EBADARG
    if n_patterns > 0 and (mu == NULL or xi == NULL):
        return MF_EBADARG
    # every mean the gradient reads (hidden, and visible where missing) and every xi in [0, 1]
    for p in range(n_patterns):
        for i in range(U):
            if not is_mean(xi[p * U + i]):
                return MF_EBADARG
            if i < U - nv or (missing != NULL and missing[p * nv + i - (U - nv)]):
                if not is_mean(mu[p * U + i]):
                    return MF_EBADARG
    # W + 3 U doubles beside the work arrays: the transposed gradient, delta, q, one row of mu
    if not mul_ok(3, U, &i) or not add_ok(W, i, &i):
        return MF_EOVERFLOW
    status = work_size(U, width, nv, i, 1, &stride, &nbytes)
    if status != MF_OK:
        return status
    status = build_net(n_layers, sizes, weights, biases, &own)
    if status != MF_OK:
        return status
    scratch = <double *> malloc(nbytes)
    if scratch == NULL:
        free(own.block)
        return MF_ENOMEM
    gWT = scratch + WORK_SIZE(U, width, nv)
    delta = gWT + W
    q = delta + U
    murow = q + U
    for i in range(W):
        gWT[i] = 0.0
    for i in range(U):
        grad_biases[i] = 0.0
    w = make_work(scratch, &own.net, width, nv, 0.0)
    for p in range(n_patterns):
        for i in range(U):
            murow[i] = mu[p * U + i]
        for i in range(nv):
            w.obs[i] = 0.0 if (missing != NULL and missing[p * nv + i]) else 1.0
            if w.obs[i] != 0.0:
                murow[U - nv + i] = V[p * nv + i]
        recompute_stats(&own.net, murow, xi + p * U, &w)
        accumulate_gradient(&own.net, murow, xi + p * U, &w, delta, q, gWT, grad_biases)
    for l in range(n_layers - 1):
        for c in range(sizes[l + 1]):
            for j in range(sizes[l]):
                grad_weights[own.net.woff[l] + c * sizes[l] + j] = gWT[own.net.woff[l] + j * sizes[l + 1] + c]
    free(scratch)
    free(own.block)
    return MF_OK


# Exported C symbols for C callers (csrc/mfengine_solver.h); the same functions as above.
cdef public int mfengine_sbn_gaussian_infer(
        Py_ssize_t n_layers, const Py_ssize_t *sizes, const double *weights, const double *biases,
        Py_ssize_t n_patterns, const double *V, const unsigned char *missing,
        double tol, double inner_tol, Py_ssize_t max_sweeps, int n_threads,
        double *mu, double *xi, double *bound, Py_ssize_t *n_sweeps,
        signed char *converged) noexcept nogil:
    return mf_sbn_gaussian_infer(n_layers, sizes, weights, biases, n_patterns, V, missing, tol,
                                 inner_tol, max_sweeps, n_threads, mu, xi, bound, n_sweeps,
                                 converged)


cdef public int mfengine_sbn_gaussian_gradient(
        Py_ssize_t n_layers, const Py_ssize_t *sizes, const double *weights, const double *biases,
        Py_ssize_t n_patterns, const double *V, const unsigned char *missing,
        const double *mu, const double *xi, double *grad_weights,
        double *grad_biases) noexcept nogil:
    return mf_sbn_gaussian_gradient(n_layers, sizes, weights, biases, n_patterns, V, missing, mu,
                                    xi, grad_weights, grad_biases)
