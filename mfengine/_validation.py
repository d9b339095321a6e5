"""Input checks shared by every public entry point.

The wrappers validate and convert once (dtype, C order, shape, value range); the compiled
kernels trust what they are given.  Every error names the offending argument.
"""
import numbers
import os

import numpy as np

__all__ = [
    "as_float_matrix",
    "check_sizes",
    "sizes_from_biases",
    "check_binary",
    "check_missing",
    "check_random_state",
    "effective_n_threads",
]


def as_float_matrix(X, name, n_cols=None, allow_nan=False, min_rows=0, cols_from=""):
    """Return ``X`` as a C-contiguous float64 2-D array, refusing what cannot be converted.

    Integer, boolean and float32 input is converted (a copy); a 1-D vector is refused rather
    than guessed at, so that a single pattern must be passed as ``X[None, :]``.  Sparse and
    complex input is refused with scikit-learn's wording; ``min_rows`` sets the fewest rows
    accepted (``fit`` needs one, ``infer`` takes none); ``cols_from`` says where ``n_cols``
    comes from, in the message of a wrong width.  ``allow_nan`` lets NaN through (a
    missing entry, for the callers that take them); infinite entries are always refused.
    """
    if hasattr(X, "tocsr") or type(X).__module__.startswith("scipy.sparse"):
        raise TypeError(f"{name} is a sparse matrix; sparse input is not supported: pass a dense "
                        f"array ({name}.toarray())")
    try:
        arr = np.asarray(X)
    except Exception as exc:  # pragma: no cover - numpy's own message is kept
        raise TypeError(f"{name} could not be converted to an array: {exc}") from exc
    if arr.dtype == object:   # numbers stored as objects are converted; anything else refused
        try:
            arr = arr.astype(np.float64)
        except (TypeError, ValueError) as exc:
            raise type(exc)(f"{name} has dtype object with entries that are not numbers ({exc}); "
                            "pass a numeric array") from exc
    if arr.dtype.kind == "c":
        raise ValueError(f"Complex data not supported: {name} has dtype {arr.dtype}")
    if arr.dtype.kind not in "biuf":
        raise TypeError(f"{name} must be numeric, got dtype {arr.dtype}")
    if arr.ndim != 2:
        raise ValueError(
            f"{name} must be a 2-D array of shape (n_patterns, n_features), got shape {arr.shape}"
        )
    if arr.shape[0] < min_rows:
        raise ValueError(f"Found array with {arr.shape[0]} sample(s) (shape={arr.shape}) while a "
                         f"minimum of {min_rows} is required: {name} has no patterns")
    if arr.shape[1] < 1:
        raise ValueError(f"Found array with 0 feature(s) (shape={arr.shape}) while a minimum of 1 "
                         f"is required: {name} has no columns")
    if n_cols is not None and arr.shape[1] != n_cols:
        raise ValueError(f"{name} must have {n_cols} columns{cols_from}, got {arr.shape[1]} "
                         f"({name} has {arr.shape[1]} features, but it is expecting {n_cols} "
                         "features as input)")
    arr = np.ascontiguousarray(arr, dtype=np.float64)
    if not allow_nan and not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} contains NaN or infinite values")
    if allow_nan:   # NaN may mark a missing entry; infinity never
        inf = np.isinf(arr)
        if inf.any():
            row = int(np.flatnonzero(inf.any(axis=1))[0])
            raise ValueError(f"{name} contains infinite values (first in row {row})")
    return arr


def check_binary(V, name, ignore=None):
    """Raise unless every entry of ``V`` (outside the boolean mask ``ignore``) is 0 or 1."""
    vals = V if ignore is None else V[~ignore]
    bad = (vals != 0.0) & (vals != 1.0)
    if np.any(vals < 0.0):   # scikit-learn's wording for the positive_only input tag
        raise ValueError(f"Negative values in data passed to {name}: {name} must be binary (0/1) "
                         f"for binary visible units; found value {vals[vals < 0.0].ravel()[0]!r}")
    if np.any(bad):
        example = vals[bad].ravel()[0]
        raise ValueError(
            f"{name} must be binary (0/1) for binary visible units; found value {example!r}"
        )


def check_missing(missing, shape, name="missing"):
    """Return the missing-value mask as a C-contiguous uint8 array of ``shape`` (or None).

    A mask of shape (n_features,) applies to every pattern.
    """
    if missing is None:
        return None
    arr = np.asarray(missing)
    if arr.dtype != np.bool_:
        if arr.dtype.kind in "iu" and np.all((arr == 0) | (arr == 1)):
            arr = arr.astype(np.bool_)
        else:
            raise TypeError(f"{name} must be a boolean mask, got dtype {arr.dtype}")
    if arr.ndim == 1 and arr.shape[0] == shape[1]:
        arr = np.broadcast_to(arr, shape)
    if arr.shape != tuple(shape):
        raise ValueError(f"{name} must have shape {tuple(shape)} (or ({shape[1]},)), got {arr.shape}")
    return np.ascontiguousarray(arr, dtype=np.uint8)


def check_random_state(seed):
    """Turn ``seed`` (None, int or Generator) into a ``numpy.random.Generator``."""
    if isinstance(seed, np.random.Generator):
        return seed
    if seed is None or isinstance(seed, numbers.Integral):
        if isinstance(seed, (bool, np.bool_)) or (seed is not None and seed < 0):
            raise ValueError(f"random_state must be None, a non-negative int or a numpy "
                             f"Generator, got {seed!r}")
        return np.random.default_rng(seed)
    if isinstance(seed, np.random.RandomState):
        return np.random.default_rng(seed.randint(0, 2**31 - 1))
    raise TypeError(f"random_state must be None, an int or a numpy Generator, got {type(seed).__name__}")


#: Most units in one layer (or net): sizes and offsets then stay far from ptrdiff_t's range.
MAX_UNITS = 2**31 - 1


def effective_n_threads(n_threads):
    """Number of OpenMP threads to use: ``n_threads`` if given, else OMP_NUM_THREADS, else all cores.

    A negative value counts back from the number of cores (-1: all of them).  The answer is
    clamped to [1, 4 * cores]: more threads than that only add overhead, and a huge request
    must not reach OpenMP.
    """
    from mfengine._openmp import openmp_enabled, max_threads

    if n_threads is None:
        env = os.environ.get("OMP_NUM_THREADS", "").split(",")[0].strip()
        n = int(env) if env.isdigit() and int(env) > 0 else max_threads()
    else:
        if isinstance(n_threads, bool) or not isinstance(n_threads, numbers.Integral) or n_threads == 0:
            raise ValueError(f"n_threads must be a non-zero integer or None, got {n_threads!r}")
        n = int(n_threads)
        if n < 0:
            n = max(1, (os.cpu_count() or 1) + 1 + n)
    if not openmp_enabled():
        return 1
    return max(1, min(n, 4 * (os.cpu_count() or 1)))


def check_sizes(sizes, n_visible=None):
    """Layer sizes (top first, visible last) as a tuple of ints: at least two layers, each with
    at least one unit.  A last entry None (the visible size taken from the data) becomes
    ``n_visible``, which must then be given."""
    if isinstance(sizes, (str, bytes)) or not hasattr(sizes, "__len__"):
        raise TypeError(f"sizes must be a sequence of layer sizes, got {sizes!r}")
    checked = []
    sizes = list(sizes)
    if len(sizes) >= 2 and sizes[-1] is None:
        if n_visible is None:
            raise ValueError("sizes ends with None (the visible size taken from X): fit the model "
                             "first, or give the number of visible units")
        sizes[-1] = n_visible
    for n in sizes:
        if isinstance(n, bool) or not isinstance(n, numbers.Real):
            raise TypeError(f"sizes must be a sequence of layer sizes (integers), got {sizes!r}")
        if not np.isfinite(n) or n != int(n):
            raise ValueError(f"sizes must hold whole numbers of units, got {sizes!r}")
        if not 0 < n <= MAX_UNITS:
            raise ValueError(f"every layer needs between 1 and {MAX_UNITS} units, got sizes={sizes!r}")
        checked.append(int(n))
    sizes = tuple(checked)
    if len(sizes) < 2:
        raise ValueError(f"sizes needs at least two layers (hidden and visible), got {sizes}")
    if any(n < 1 for n in sizes):
        raise ValueError(f"every layer needs at least one unit, got sizes={sizes}")
    return sizes


def sizes_from_biases(biases):
    """The checked layer sizes of a net given as one 1-D bias vector per layer."""
    sizes = []
    for l, b in enumerate(biases):
        b = np.asarray(b)
        if b.ndim != 1 or b.shape[0] < 1:
            raise ValueError(f"biases[{l}] must be 1-D with at least one unit, got shape {b.shape}")
        sizes.append(b.shape[0])
    return check_sizes(sizes)
