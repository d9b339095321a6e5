"""The checks of NLGBN's parameters, hyperparameters and data: plain functions, called by the
estimator once per call before anything is handed to the solver (:mod:`mfengine.nlgbn._solve`)
or the M-step (:mod:`mfengine.nlgbn._learn`).  Every error names the argument at fault, in the
words of the public API, and scalar mistakes raise through :mod:`mfengine._validation`'s
policy (``InvalidParameterError``, ``check_int``, ``check_real``, ``check_value``)."""
import numbers
import os

import numpy as np
from sklearn.utils import check_array

from mfengine._validation import (
    N_THREADS,
    check_flag,
    check_int,
    check_real,
    check_sizes,
    check_value,
    effective_n_threads,
    sizes_from_biases,
)

__all__ = ["UNIT_TYPES", "_check_n_threads", "_check_layer_sizes", "_check_units",
           "_param_array", "_param_list", "_check_given_params", "_check_X", "_check_data",
           "_check_posterior", "_check_min_variance", "_check_infer_args", "_check_fit_args"]

#: The unit types, in the order of their codes in the compiled kernel.
UNIT_TYPES = ("linear", "binary", "rectified", "sigmoidal")
_CODE = {name: code for code, name in enumerate(UNIT_TYPES)}

_INTP_MAX = int(np.iinfo(np.intp).max)
_TINY = np.finfo(np.float64).tiny


def _check_n_threads(n_threads, name="n_threads"):
    """OpenMP thread count: ``effective_n_threads``'s answer, clamped to the cores there are."""
    check_value(n_threads, name, [N_THREADS])
    n = effective_n_threads(None if n_threads is None else int(n_threads))
    return int(max(1, min(n, os.cpu_count() or 1)))


def _check_layer_sizes(sizes, n_features=None):
    """``sizes`` as a tuple of ints (check_sizes), refusing NaN, inf and huge networks first; a
    last entry None is the number of columns of the training data, ``n_features``."""
    if isinstance(sizes, (str, bytes)) or not hasattr(sizes, "__len__"):
        raise TypeError(f"sizes must be a sequence of layer sizes, got {sizes!r}")
    if len(sizes) and sizes[-1] is None:
        if n_features is None:
            raise ValueError(
                f"sizes={list(sizes)} leaves the number of visible units to the data: fit the "
                "model before sampling or scoring with it (or give sizes[-1])"
            )
        sizes = list(sizes[:-1]) + [n_features]
    for n in sizes:
        if isinstance(n, numbers.Real) and not isinstance(n, numbers.Integral) and not np.isfinite(n):
            raise ValueError(f"sizes must hold whole numbers of units, got {sizes!r}")
    sizes = check_sizes(sizes)
    n_weights = sum(a * b for a, b in zip(sizes[:-1], sizes[1:]))
    stat = 4 * sum(sizes) + sum((a + 1) ** 2 + b * (a + 1) for a, b in zip(sizes[:-1], sizes[1:]))
    if max(n_weights, stat, sum(sizes)) > _INTP_MAX // 16:
        raise ValueError(f"sizes={list(sizes)} is too large: the network's arrays would not fit "
                         "in memory's address range")
    return sizes


def _check_units(units, sizes, name="units"):
    """One tuple of type names per layer; ``name`` is the argument's public name."""
    L = len(sizes)
    if units is None:
        units = ["rectified"] * (L - 1) + ["linear"]
    elif isinstance(units, str):
        units = [units] * (L - 1) + ["linear"]
    if isinstance(units, (str, bytes)) or not hasattr(units, "__len__") or len(units) != L:
        raise ValueError(f"{name} must give one entry per layer ({L} layers), got {units!r}")
    out = []
    for l, spec in enumerate(units):
        if isinstance(spec, str):
            names = [spec] * sizes[l]
        else:
            try:
                names = list(spec)
            except TypeError:
                raise TypeError(f"{name}[{l}] must be a type name or a sequence of "
                                f"{sizes[l]} type names, got {spec!r}") from None
        if len(names) != sizes[l]:
            raise ValueError(
                f"{name}[{l}] must be a type name or {sizes[l]} type names, got {spec!r}"
            )
        for kind in names:
            if not isinstance(kind, str) or kind not in _CODE:
                raise ValueError(
                    f"{name}[{l}] contains unknown unit type {kind!r}; choose from {UNIT_TYPES}"
                )
        out.append(tuple(str(k) for k in names))
    if any(kind != "linear" for kind in out[-1]):
        raise ValueError(
            f"{name} of the visible (last) layer must be 'linear': the data are the visible "
            "units' pre-activations"
        )
    return tuple(out)


def _param_array(value, name, shape):
    """A model parameter as a float64 C-contiguous copy of the given shape with finite values."""
    if isinstance(value, np.ndarray) and value.dtype == object:
        raise TypeError(f"{name} has dtype object; it must be a numeric array")
    try:
        arr = np.asarray(value)
    except Exception as exc:  # noqa: BLE001 - numpy's message is kept
        raise TypeError(f"{name} could not be converted to an array: {exc}") from exc
    if arr.dtype.kind not in "biuf":
        raise TypeError(f"{name} must be a numeric array, got dtype {arr.dtype}")
    if shape is not None and arr.shape != tuple(shape):
        raise ValueError(f"{name} must have shape {tuple(shape)}, got {arr.shape}")
    arr = np.array(arr, dtype=np.float64, order="C")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} contains NaN or infinite values")
    return arr


def _param_list(value, name, length):
    if isinstance(value, np.ndarray) or not isinstance(value, (list, tuple)):
        raise TypeError(f"{name} must be a list of arrays, one per layer, got {type(value).__name__}")
    if length is not None and len(value) != length:
        raise ValueError(f"{name} must hold {length} arrays, got {len(value)}")
    return list(value)



def _check_given_params(weights, biases, variances):
    """``NLGBN.from_params``' arguments: the layer sizes and float64 copies of the weights,
    biases and variances (lists), of shapes that fit one another, finite, variances positive."""
    weights, biases, variances = list(weights), list(biases), list(variances)
    if len(weights) < 1 or len(biases) != len(weights) + 1 or len(variances) != len(biases):
        raise ValueError(
            "need one weight matrix between adjacent layers and one bias and one variance "
            f"vector per layer; got {len(weights)} weight matrices, {len(biases)} bias "
            f"vectors and {len(variances)} variance vectors"
        )
    sizes = sizes_from_biases(biases)
    W = [_param_array(w, f"weights[{l}]", (sizes[l + 1], sizes[l])) for l, w in enumerate(weights)]
    B = [_param_array(b, f"biases[{l}]", (sizes[l],)) for l, b in enumerate(biases)]
    V = [_param_array(v, f"variances[{l}]", (sizes[l],)) for l, v in enumerate(variances)]
    for l, v in enumerate(V):
        if np.any(v < _TINY):
            raise ValueError(f"variances[{l}] must be finite and positive")
    return sizes, W, B, V


def _check_X(X, n_features, name="X", allow_nan=False):
    """X (or ``name``) as a float64 C-ordered 2-D array, finite (``allow_nan``: True, NaN
    allowed; "all": NaN and infinity, the caller checks them), with ``n_features`` columns
    (None: any)."""
    if isinstance(X, np.ndarray) and X.dtype.kind in "USV":
        raise TypeError(f"{name} must be numeric, got dtype {X.dtype}")
    try:
        X = check_array(X, dtype=np.float64, order="C", ensure_min_samples=0,
                        input_name=name,
                        ensure_all_finite=({"all": False, True: "allow-nan"}.get(allow_nan, True)))
    except TypeError as exc:
        raise TypeError(f"{name}: {exc}") from exc
    except ValueError as exc:
        msg = str(exc).split("\n")[0]
        if "convert" in msg:
            raise TypeError(f"{name} must be numeric: {msg}") from exc
        if name not in msg:
            msg = f"{name}: {msg}"
        raise ValueError(msg) from exc
    if n_features is not None and X.shape[1] != n_features:
        said = (f"X has {X.shape[1]} features, but NLGBN is expecting {n_features} features "
                "as input: " if name == "X" else "")
        raise ValueError(f"{said}{name} must have {n_features} columns (one per visible "
                         f"unit: the last of sizes, or the rows of weights_[-1]), got "
                         f"{X.shape[1]}")
    return X

def _check_data(X, missing, n_features):
    """X (NaN allowed: a missing entry) and the missing mask: returns (X with its missing
    entries set to 0, uint8 mask or None when nothing is missing).  ``missing`` may be None,
    a boolean (n_patterns, n_features) mask or one (n_features,) row for every pattern;
    NaN entries of X are missing too."""
    X = _check_X(X, n_features, allow_nan=True if missing is None else "all")
    nan = np.isnan(X)
    if missing is None:
        miss = nan
    else:
        arr = np.asarray(missing)
        if arr.dtype != np.bool_:
            if arr.dtype.kind in "iu" and np.all((arr == 0) | (arr == 1)):
                arr = arr.astype(bool)
            else:
                raise TypeError(f"missing must be a boolean mask, got dtype {arr.dtype}")
        if arr.ndim == 1 and arr.shape[0] == X.shape[1]:
            arr = np.broadcast_to(arr, X.shape)
        if arr.shape != X.shape:
            raise ValueError(f"missing must have shape {X.shape} (or ({X.shape[1]},)), got "
                             f"{arr.shape}")
        miss = arr | nan
        if np.any(np.isinf(X) & ~miss):
            raise ValueError("X contains infinity at entries not marked missing")
    if not miss.any():
        return X, None
    X = np.where(miss, 0.0, X)
    return np.ascontiguousarray(X), np.ascontiguousarray(miss, dtype=np.uint8)

def _check_posterior(X, mu, sigma, n_features, n_hidden):
    """``bound_at``'s data and posterior: X, a copy of mu (the solver writes to it) and
    log sigma^2, each C-ordered float64 with one row per pattern; sigma positive."""
    X = _check_X(X, n_features)
    mu = _check_X(mu, n_hidden, "mu").copy()
    sigma = _check_X(sigma, n_hidden, "sigma")
    if mu.shape[0] != X.shape[0] or sigma.shape[0] != X.shape[0]:
        raise ValueError("mu and sigma must have one row per pattern of X")
    if np.any(sigma <= 0):
        raise ValueError("sigma must be positive")
    return X, mu, np.ascontiguousarray(2.0 * np.log(sigma))


def _check_min_variance(min_variance):
    """The floor of the visible variances: positive, its inverse finite."""
    value = check_real(min_variance, "min_variance", 0.0, closed='right')
    if not np.isfinite(1.0 / value) or value < _TINY:
        raise ValueError(f"min_variance must be at least {_TINY:g}, got {value!r}")
    return value


def _check_infer_args(tol, max_iter, n_threads, infer_tol, infer_max_iter, default_n_threads):
    """The solve's settings: each given argument (``tol``, ``max_iter``, ``n_threads``), or
    the estimator's default (``infer_tol``, ``infer_max_iter``, its ``n_threads``), named as
    the user gave it."""
    tol = check_real(infer_tol if tol is None else tol,
                     "infer_tol" if tol is None else "tol", 0.0, closed='right')
    max_iter = check_int(infer_max_iter if max_iter is None else max_iter,
                         "infer_max_iter" if max_iter is None else "max_iter", 1)
    if n_threads is None:
        n_threads = _check_n_threads(default_n_threads)
    else:
        n_threads = _check_n_threads(n_threads)
    return tol, max_iter, n_threads


def _check_fit_args(max_iter, tol, infer_tol, infer_max_iter, min_variance, warm_start,
                    n_threads, progress):
    """The hyperparameters of ``fit`` and ``partial_fit`` (the estimator's values), checked:
    a dict of them."""
    return dict(
        max_iter=check_int(max_iter, "max_iter", 0),
        tol=None if tol is None else check_real(tol, "tol", 0.0),
        infer_tol=check_real(infer_tol, "infer_tol", 0.0, closed='right'),
        infer_max_iter=check_int(infer_max_iter, "infer_max_iter", 1),
        min_variance=_check_min_variance(min_variance),
        warm_start=check_flag(warm_start, "warm_start"),
        n_threads=_check_n_threads(n_threads),
        progress=check_flag(progress, "progress"),
    )
