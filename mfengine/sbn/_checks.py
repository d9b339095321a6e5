"""The belief nets' checks of their parameters and data: plain functions, called by the
estimators once per call before anything is handed to a kernel (:mod:`mfengine.sbn._solve`).
Every error names the argument at fault (see :mod:`mfengine._validation`)."""
import numpy as np

from mfengine._validation import (Options, as_array, as_float_matrix, check_binary,
                                  check_missing, check_sizes, check_sparse, check_value,
                                  sizes_from_biases)
from mfengine.sbn._structure import ACTIVATIONS, _is_sparse

__all__ = ["check_activation", "check_weights", "check_visible", "check_dag_data",
           "check_batch_data", "check_layered_data", "check_layered_params", "w_shape",
           "is_sparse_batch", "edges"]


def is_sparse_batch(W):
    """Whether W is a batch's weights given as a sequence of scipy.sparse matrices."""
    return isinstance(W, (list, tuple)) and len(W) > 0 and any(_is_sparse(w) for w in W)


def w_shape(W, name="W_"):
    """The shape of W: (n_units, n_units), (n_nets, n_units, n_units), or that of a sparse
    batch (a list of CSR matrices)."""
    if is_sparse_batch(W):
        return (len(W),) + tuple(getattr(W[0], "shape", None) or as_array(W[0], name).shape)
    return tuple(W.shape) if _is_sparse(W) else as_array(W, name).shape


def edges(W, batch):
    """What DagStructure reads: the nonzero pattern of W (over every net of a batch)."""
    if isinstance(W, list):          # a sparse batch: the union of the nets' nonzero entries
        import scipy.sparse

        coo = [w.tocoo() for w in W]
        rows = np.concatenate([c.row[c.data != 0.0] for c in coo])
        cols = np.concatenate([c.col[c.data != 0.0] for c in coo])
        pattern = scipy.sparse.csr_matrix((np.ones(rows.size), (rows, cols)), shape=W[0].shape)
        pattern.sum_duplicates()
        return pattern
    if _is_sparse(W):
        return W
    return np.any(W != 0.0, axis=0) if batch else W != 0.0


def check_activation(activation):
    return check_value(activation, "activation", [Options(*ACTIVATIONS)])


def check_weights(W, h, activation, batch, names=("W", "h"), copy=False):
    """W and h as float64 arrays: square, strictly lower triangular, finite; noisy-OR
    parameters non-negative.  ``batch``: W is (n_nets, n, n) and h (n_nets, n).  ``names``
    are the names errors use; ``copy`` forces fresh arrays (never the caller's)."""
    name_W, name_h = names
    if _is_sparse(W) and not batch:
        return check_sparse_weights(W, h, activation, names, copy)
    if batch and is_sparse_batch(W):
        return check_sparse_batch(W, h, activation, names, copy)
    if batch and _is_sparse(W):
        raise TypeError(f"{name_W}: a batch's weights are (n_nets, n_units, n_units); give sparse "
                        f"ones as a list of n_nets scipy.sparse matrices, got one {W.shape} matrix")
    if copy:
        W, h = np.array(as_array(W, name_W)), np.array(as_array(h, name_h))
    W = as_array(W, name_W)
    if W.dtype.kind not in "biuf":
        raise TypeError(f"{name_W} must be numeric, got dtype {W.dtype}")
    nd = 3 if batch else 2
    if W.ndim != nd or W.shape[-1] != W.shape[-2] or W.shape[-1] < 1 or (batch and W.shape[0] < 1):
        want = "(n_nets, n_units, n_units) with n_nets >= 1" if batch else "square (n_units, n_units)"
        raise ValueError(f"{name_W} must be a {want} array, got shape {W.shape}")
    W = np.ascontiguousarray(W, dtype=np.float64)
    n = W.shape[-1]
    if not np.all(np.isfinite(W)):
        raise ValueError(f"{name_W} contains NaN or infinite values")
    upper = np.triu(np.ones((n, n), dtype=bool))
    bad = (W != 0.0) & upper
    if np.any(bad):
        idx = tuple(int(k) for k in np.argwhere(bad)[0])
        raise ValueError(
            f"{name_W} must be strictly lower triangular (units in topological order): "
            f"{name_W}{list(idx)} = {W[idx]!r} is a weight from unit {idx[-1]} to unit {idx[-2]} "
            "with j >= i")
    h = as_array(h, name_h)
    if h.dtype.kind not in "biuf":
        raise TypeError(f"{name_h} must be numeric, got dtype {h.dtype}")
    want = W.shape[:-1]
    if h.shape != want:
        raise ValueError(f"{name_h} must have shape {want}, got {h.shape}")
    h = np.ascontiguousarray(h, dtype=np.float64)
    if not np.all(np.isfinite(h)):
        raise ValueError(f"{name_h} contains NaN or infinite values")
    if activation == "noisy_or":
        if np.any(W < 0):
            raise ValueError(f"noisy-OR units need non-negative weights; {name_W} has negative entries")
        if np.any(h < 0):
            raise ValueError(f"noisy-OR units need non-negative biases; {name_h} has negative entries")
    return W, h


def check_sparse_weights(W, h, activation, names, copy):
    """The checks of ``check_weights`` for one scipy.sparse W, in time linear in its nonzero
    entries; W comes back as a CSR matrix of float64 with sorted indices."""
    name_W, name_h = names
    if W.ndim != 2 or W.shape[0] != W.shape[1] or W.shape[0] < 1:
        raise ValueError(f"{name_W} must be a square (n_units, n_units) matrix, got shape {W.shape}")
    if W.dtype.kind not in "biuf":
        raise TypeError(f"{name_W} must be numeric, got dtype {W.dtype}")
    W = check_sparse(W, name_W).astype(np.float64, copy=copy)
    W.sum_duplicates()
    W.sort_indices()
    if not np.all(np.isfinite(W.data)):
        raise ValueError(f"{name_W} contains NaN or infinite values")
    coo = W.tocoo()
    bad = (coo.data != 0.0) & (coo.col >= coo.row)
    if np.any(bad):
        k = int(np.flatnonzero(bad)[0])
        i, j = int(coo.row[k]), int(coo.col[k])
        raise ValueError(
            f"{name_W} must be strictly lower triangular (units in topological order): "
            f"{name_W}[{i}, {j}] = {coo.data[k]!r} is a weight from unit {j} to unit {i} with "
            "j >= i")
    n = W.shape[0]
    h = as_array(h, name_h)
    if h.dtype.kind not in "biuf":
        raise TypeError(f"{name_h} must be numeric, got dtype {h.dtype}")
    if h.shape != (n,):
        raise ValueError(f"{name_h} must have shape {(n,)}, got {h.shape}")
    h = np.array(h, dtype=np.float64) if copy else np.ascontiguousarray(h, dtype=np.float64)
    if not np.all(np.isfinite(h)):
        raise ValueError(f"{name_h} contains NaN or infinite values")
    if activation == "noisy_or":
        if np.any(W.data < 0):
            raise ValueError(f"noisy-OR units need non-negative weights; {name_W} has negative entries")
        if np.any(h < 0):
            raise ValueError(f"noisy-OR units need non-negative biases; {name_h} has negative entries")
    return W, h


def check_sparse_batch(W, h, activation, names, copy):
    """The checks of ``check_weights`` for a batch given as a sequence of n_nets scipy.sparse
    (n_units, n_units) matrices (an entry may also be a dense array): a list of CSR matrices
    of float64 with sorted indices, and h as an (n_nets, n_units) array; time linear in the
    nonzero entries."""
    import scipy.sparse

    name_W, name_h = names
    h = as_array(h, name_h)
    if h.dtype.kind not in "biuf":
        raise TypeError(f"{name_h} must be numeric, got dtype {h.dtype}")
    if h.ndim != 2 or h.shape[0] != len(W):
        raise ValueError(f"{name_h} must have shape (n_nets, n_units) with n_nets = {len(W)} "
                         f"(the matrices of {name_W}), got {h.shape}")
    out, hs = [], []
    for k, Wk in enumerate(W):
        if not _is_sparse(Wk):
            A = as_array(Wk, f"{name_W}[{k}]")
            if A.dtype.kind not in "biuf" or A.ndim != 2:
                raise TypeError(f"{name_W}[{k}] must be a scipy.sparse matrix or a 2-D numeric "
                                f"array, got {type(Wk).__name__}")
            Wk = scipy.sparse.csr_matrix(A)
        if out and Wk.shape != out[0].shape:
            raise ValueError(f"{name_W}[{k}] has shape {Wk.shape}, {name_W}[0] {out[0].shape}: "
                             "the nets of a batch have the same units")
        Wk, hk = check_sparse_weights(Wk, h[k], activation, (f"{name_W}[{k}]", f"{name_h}[{k}]"),
                                       copy)
        out.append(Wk)
        hs.append(hk)
    return out, np.ascontiguousarray(np.stack(hs))


def check_visible(visible, n):
    """The boolean mask of the visible units, from a mask or increasing unit indices."""
    vis = as_array(visible, "visible")
    if vis.dtype == np.bool_:
        if vis.shape != (n,):
            raise ValueError(f"visible as a mask must have shape ({n},), got {vis.shape}")
        mask = vis.copy()
    else:
        if vis.ndim != 1 or (vis.size and vis.dtype.kind not in "iu"):
            raise TypeError("visible must be a boolean mask or a sequence of unit indices")
        if vis.size and (vis.min() < 0 or vis.max() >= n):
            raise ValueError(f"visible indices must lie in [0, {n}), got {vis.tolist()}")
        # in range, so exact as intp: np.diff of unsigned indices would wrap around ([4, 3] as
        # uint64 would pass for increasing)
        vis = vis.astype(np.intp)
        if np.any(np.diff(vis) <= 0):
            raise ValueError(
                f"visible indices must be strictly increasing (column k of X is unit "
                f"visible[k], in unit order), got {vis.tolist()}; reorder the columns of X "
                "to match sorted indices")
        mask = np.zeros(n, dtype=bool)
        mask[vis.astype(np.intp)] = True
    if not mask.any():
        raise ValueError("visible selects no unit: at least one unit must be visible")
    return mask



def check_dag_data(X, missing, n_visible):
    """X as C-contiguous float64 (n, n_visible), binary outside the missing entries, and the
    missing mask as bool (or None)."""
    V = as_float_matrix(X, "X", n_cols=n_visible, allow_nan=missing is not None)
    miss = check_missing(missing, V.shape)
    if miss is None:
        check_binary(V, "X")
        return V, None
    miss = miss.astype(bool)
    if np.any(~np.isfinite(V) & ~miss):
        raise ValueError("X contains NaN or infinite values at entries not marked missing")
    check_binary(V, "X", ignore=miss)
    return V, miss


def check_batch_data(X, missing, n_nets, n_visible):
    """X as C-contiguous float64 of shape (n_nets, n_visible) or (n_nets, m, n_visible),
    binary outside the missing entries, and the missing mask as bool of X's shape (one of
    shape (n_visible,) applies to every pattern), or None."""
    V = as_array(X, "X")
    if V.dtype.kind not in "biuf":
        raise TypeError(f"X must be numeric, got dtype {V.dtype}")
    if V.ndim not in (2, 3) or V.shape[0] != n_nets or V.shape[-1] != n_visible:
        raise ValueError(f"X must have shape ({n_nets}, {n_visible}) or "
                         f"({n_nets}, m, {n_visible}), got {np.shape(X)}")
    V = np.ascontiguousarray(V, dtype=np.float64)
    if np.any(np.isinf(V)):
        raise ValueError("X contains infinite values (only NaN may stand at a missing entry)")
    if missing is None:
        if np.any(np.isnan(V)):
            raise ValueError("X contains NaN or infinite values")
        check_binary(V, "X")
        return V, None
    shape = np.shape(missing)
    if shape not in (V.shape, (n_visible,)):
        raise ValueError(f"missing must have X's shape {V.shape} (or ({n_visible},)), got "
                         f"{shape}")
    flat = (-1, n_visible)
    miss = check_missing(np.reshape(missing, flat) if shape == V.shape else missing,
                         V.reshape(flat).shape).astype(bool).reshape(V.shape)
    if np.any(np.isnan(V) & ~miss):
        raise ValueError("X contains NaN or infinite values at entries not marked missing")
    check_binary(V, "X", ignore=miss)
    return V, miss


def check_layered_data(V, missing, n_visible, name="X", min_rows=0):
    """Binary data of ``n_visible`` columns (0/1 except under ``missing``) as C-contiguous
    float64, and the missing mask as uint8 (or None)."""
    nv = n_visible
    V = as_float_matrix(V, name, n_cols=nv, allow_nan=missing is not None, min_rows=min_rows,
                        cols_from=f" (one per visible unit: the net's sizes[-1] = {nv})")
    miss = check_missing(missing, V.shape)
    if miss is not None:
        bad = ~np.isfinite(V) & ~miss.astype(bool)
        if np.any(bad):
            raise ValueError(f"{name} contains NaN or infinite values at entries not marked missing")
        check_binary(V, name, ignore=miss.astype(bool))
    else:
        check_binary(V, name)
    return V, miss


def check_layered_params(weights, biases, sizes):
    """A layered net's parameters (``weights_``, ``biases_``, as a user may have edited or
    replaced them) against each other and against ``sizes``: lists of float64 arrays
    (arrays of another numeric dtype, lists and read-only arrays are converted, in the lists
    given), finite, of agreeing shapes.  Returns ``(weights, biases)``."""
    checked = {}
    for name, value in (("weights_", weights), ("biases_", biases)):
        if isinstance(value, np.ndarray) or not isinstance(value, (list, tuple)):
            raise TypeError(f"{name} must be a list of arrays (one per layer), got "
                            f"{type(value).__name__}")
        checked[name] = value if isinstance(value, list) else list(value)
    weights, biases = checked["weights_"], checked["biases_"]
    if len(biases) != len(weights) + 1 or len(weights) < 1:
        raise ValueError(
            f"need one bias vector per layer and one weight matrix between layers; got "
            f"{len(weights)} weight matrices (weights_) and {len(biases)} bias "
            "vectors (biases_)"
        )
    for name, arrays, ndim in (("biases_", biases, 1), ("weights_", weights, 2)):
        for l, a in enumerate(arrays):
            arr = as_array(a, f"{name}[{l}]")
            if arr.dtype.kind not in "biuf":
                raise TypeError(f"{name}[{l}] must be numeric, got dtype {arr.dtype}")
            if arr.ndim != ndim:
                raise ValueError(f"{name}[{l}] must be {ndim}-D, got shape {arr.shape}")
            if (not isinstance(a, np.ndarray) or arr.dtype != np.float64
                    or not arr.flags.c_contiguous or not arr.flags.writeable):
                # (a read-only array is copied: fit updates the parameters in place)
                arrays[l] = np.array(arr, dtype=np.float64, order="C")
    # A bias vector whose length disagrees with both neighbouring weight matrices (which
    # agree with each other) is the odd one: name it rather than the weights.
    for l, b in enumerate(biases):
        if 0 < l < len(weights):
            rows, cols = weights[l - 1].shape[0], weights[l].shape[1]
            if rows == cols and b.shape[0] != rows:
                raise ValueError(
                    f"biases_[{l}] has shape {b.shape}, expected ({rows},): weights_[{l - 1}] "
                    f"({weights[l - 1].shape}) and weights_[{l}] "
                    f"({weights[l].shape}) give layer {l} {rows} units")
    want = check_sizes(sizes, np.asarray(biases[-1]).shape[0])
    for l, b in enumerate(biases[: len(want)]):
        if b.shape != (want[l],):
            raise ValueError(f"biases_[{l}] has shape {b.shape}, expected ({want[l]},) "
                             f"(sizes={sizes!r})")
    sizes = sizes_from_biases(biases)
    if want != sizes:
        raise ValueError(f"the parameters have layer sizes {list(sizes)} but sizes={sizes!r}; "
                         "refit with warm_start=False or build the net with from_params")
    for l, w in enumerate(weights):
        if w.shape != (sizes[l + 1], sizes[l]):
            raise ValueError(f"weights_[{l}] has shape {w.shape}, expected "
                             f"{(sizes[l + 1], sizes[l])} (the lengths of biases_[{l + 1}] "
                             f"and biases_[{l}])")
        if not np.all(np.isfinite(w)):
            raise ValueError(f"weights_[{l}] contains NaN or infinite values")
    for l, b in enumerate(biases):
        if not np.all(np.isfinite(b)):
            raise ValueError(f"biases_[{l}] contains NaN or infinite values")
    return weights, biases
