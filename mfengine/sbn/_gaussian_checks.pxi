# Argument checks and conversion at the Python boundary (part of _gaussian.pyx).
#
# Every array and scalar a Python entry point receives is checked here, immediately before the
# compiled code touches memory: the model's current parameters against the layer sizes (the
# lengths of its bias vectors), the data against the net, the state and the visiting order
# against the data.  Errors are ValueError naming the argument.  _flatten then lays the
# parameters out as the kernel reads them.

_SIZE_LIMIT = np.iinfo(np.intp).max // 64   # unit and weight counts: byte sizes cannot overflow


def _positive(x, name):
    """A positive finite float."""
    return check_tol(x, name)


def _count(x, name, low=1):
    """An integer in [low, the largest intp]."""
    return check_int(x, name, low, np.iinfo(np.intp).max)


def _array(a, name, dtype, shape, writable=False):
    """``a`` itself, after checking that it is a C-contiguous ndarray of ``dtype`` and ``shape``
    (writable if asked)."""
    if not isinstance(a, np.ndarray):
        raise ValueError(f"{name} must be a numpy array, got {type(a).__name__}")
    if a.dtype != dtype:
        raise ValueError(f"{name} must have dtype {np.dtype(dtype)}, got {a.dtype}")
    if a.shape != shape:
        raise ValueError(f"{name} must have shape {shape}, got {a.shape}")
    if not a.flags.c_contiguous:
        raise ValueError(f"{name} must be C-contiguous")
    if writable and not a.flags.writeable:
        raise ValueError(f"{name} must be writable")
    return a


def _mask(miss, name, shape):
    """None, or the missing-entry mask as C-contiguous uint8 (bool is viewed as uint8)."""
    if miss is None:
        return None
    if isinstance(miss, np.ndarray) and miss.dtype == np.bool_:
        miss = miss.view(np.uint8)
    return _array(miss, name, np.uint8, shape)


def _check_binary(V, miss, name):
    if V.size == 0:
        return
    bad = (V != 0.0) & (V != 1.0)
    if miss is not None:
        bad &= miss == 0
    if bad.any():
        raise ValueError(f"{name} must be 0 or 1 at every observed entry")


def _check_data(V, miss, n_visible):
    """The data and its missing-entry mask, checked: V a C-contiguous float64 (n, n_visible)
    array, 0 or 1 at every observed entry; miss None or (n, n_visible) uint8 (or bool)."""
    if not isinstance(V, np.ndarray) or V.ndim != 2:
        raise ValueError(f"V must be a 2-D numpy array, got {getattr(V, 'shape', type(V).__name__)}")
    shape = (V.shape[0], n_visible)
    V = _array(V, "V", np.float64, shape)
    miss = _mask(miss, "missing", shape)
    _check_binary(V, miss, "V")
    return V, miss


def _check_means(a, name):
    if a.size and not ((a >= 0.0) & (a <= 1.0)).all():
        raise ValueError(f"{name} must lie in [0, 1] (and contain no NaN)")


def _check_counts(sizes):
    """Layer sizes whose unit and weight counts have byte sizes that fit the index type."""
    n_units = sum(sizes)
    n_weights = sum(a * b for a, b in zip(sizes, sizes[1:]))
    if n_units > _SIZE_LIMIT or n_weights > _SIZE_LIMIT:
        raise ValueError(f"layer sizes {sizes} give a net too large to address "
                         f"({n_units} units, {n_weights} weights)")


def _parameter(a, name, shape, writable):
    """One weight matrix or bias vector of the model: a float64 array of ``shape`` (writable
    when the epoch writes it back), finite, and within the kernel's range."""
    if not isinstance(a, np.ndarray):
        raise ValueError(f"{name} must be a numpy array, got {type(a).__name__}")
    if a.dtype != np.float64:
        raise ValueError(f"{name} must have dtype float64, got {a.dtype}")
    if a.shape != shape:
        raise ValueError(f"{name} must have shape {shape} (from the bias vectors' lengths), "
                         f"got {a.shape}")
    if writable and not a.flags.writeable:
        raise ValueError(f"{name} must be writable")
    big = np.abs(a).max()
    if not np.isfinite(big):
        raise ValueError(f"{name} contains NaN or infinite values")
    if big > MF_SBN_PARAM_LIMIT:
        raise ValueError(
            f"{name} has an entry of magnitude {big:.3g}; the Gaussian method accepts "
            f"|value| <= {MF_SBN_PARAM_LIMIT:g} (its input variances grow as weight^2 and would "
            f"overflow)")
    return a


def _flatten(weights, biases, writable=False):
    """A layered net's parameters, checked, in the kernel's layout:
    (sizes, offset, woff, WT, WT2, bias, need_u, jmax, j2max, c2).

    The layer sizes are the lengths of the bias vectors (at least two layers); every weight
    matrix is checked against them."""
    weights, biases = list(weights), list(biases)
    if len(biases) < 2 or len(weights) != len(biases) - 1:
        raise ValueError(f"a layered net needs at least 2 bias vectors and one weight matrix "
                         f"fewer, got {len(weights)} weight matrices and {len(biases)} bias vectors")
    sizes_l = []
    for l, b in enumerate(biases):
        if not isinstance(b, np.ndarray) or b.ndim != 1 or b.shape[0] < 1:
            raise ValueError(f"biases[{l}] must be a non-empty 1-D numpy array, got "
                             f"{getattr(b, 'shape', type(b).__name__)}")
        sizes_l.append(b.shape[0])
    _check_counts(sizes_l)
    L = len(sizes_l)
    weights = [_parameter(weights[l], f"weights[{l}]", (sizes_l[l + 1], sizes_l[l]), writable)
               for l in range(L - 1)]
    biases = [_parameter(biases[l], f"biases[{l}]", (sizes_l[l],), writable) for l in range(L)]
    sizes = np.asarray(sizes_l, dtype=np.intp)
    offset = np.zeros(L + 1, dtype=np.intp)
    offset[1:] = np.cumsum(sizes)
    woff = np.zeros(L, dtype=np.intp)
    woff[1:] = np.cumsum([w.size for w in weights])
    WT = np.ascontiguousarray(np.concatenate([w.T.ravel() for w in weights]))
    bias = np.ascontiguousarray(np.concatenate(biases))
    n_units = int(offset[L])
    # need_u, jmax, j2max, c2: the static bounds of the 1-D maximiser (update_static)
    flat = (sizes, offset, woff, WT, WT * WT, bias, np.zeros(L, dtype=np.int8),
            np.zeros(n_units), np.zeros(n_units), np.zeros(n_units))
    cdef Net net
    fill_net(&net, flat)
    cdef int8_t[::1] need_u = flat[6]
    cdef double[::1] jmax = flat[7]
    cdef double[::1] j2max = flat[8]
    cdef double[::1] c2 = flat[9]
    update_static(&net, &need_u[0], &jmax[0], &j2max[0], &c2[0])
    return flat


cdef void fill_net(Net *net, tuple flat):
    """Point ``net`` at the arrays of ``_flatten``'s tuple (which must outlive it)."""
    cdef const intp_t[::1] sizes = flat[0]
    cdef const intp_t[::1] offset = flat[1]
    cdef const intp_t[::1] woff = flat[2]
    cdef const double[::1] WT = flat[3]
    cdef const double[::1] WT2 = flat[4]
    cdef const double[::1] bias = flat[5]
    cdef const int8_t[::1] need_u = flat[6]
    cdef const double[::1] jmax = flat[7]
    cdef const double[::1] j2max = flat[8]
    cdef const double[::1] c2 = flat[9]
    net.n_layers = sizes.shape[0]
    net.n_units = offset[sizes.shape[0]]
    net.sizes = &sizes[0]
    net.offset = &offset[0]
    net.woff = &woff[0]
    net.WT = &WT[0]
    net.WT2 = &WT2[0]
    net.bias = &bias[0]
    net.need_u = &need_u[0]
    net.jmax = &jmax[0]
    net.j2max = &j2max[0]
    net.c2 = &c2[0]
