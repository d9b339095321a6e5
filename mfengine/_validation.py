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
    check_value(seed, "random_state", [RANDOM_STATE])
    if isinstance(seed, np.random.Generator):
        return seed
    if isinstance(seed, np.random.RandomState):
        return np.random.default_rng(seed.randint(0, 2**31 - 1))
    return np.random.default_rng(seed)


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
        check_value(n_threads, "n_threads", [N_THREADS])
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
        b = as_array(b, f"biases[{l}]")
        if b.ndim != 1 or b.shape[0] < 1:
            raise ValueError(f"biases[{l}] must be 1-D with at least one unit, got shape {b.shape}")
        sizes.append(b.shape[0])
    return check_sizes(sizes)


# ------------------------------------------------------------------ declared constraints
class InvalidParameterError(ValueError, TypeError):
    """A hyperparameter or argument outside its declared constraints.

    Both a ``ValueError`` and a ``TypeError`` (as scikit-learn's error of the same name), so
    that the same mistake raises the same exception in every family, whether the value has
    the wrong type or the right type and a wrong value.
    """


class Interval:
    """Numbers of ``kind`` (``numbers.Integral`` or ``numbers.Real``) in [left, right], with
    ``closed`` saying which ends belong ("both", "left", "right", "neither"); None is an
    open end.  Booleans are never numbers here, and a real must be finite."""

    def __init__(self, kind, left, right, closed="both"):
        self.kind, self.left, self.right, self.closed = kind, left, right, closed

    def __call__(self, v):
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, self.kind):
            return False
        if self.kind is numbers.Real and not np.isfinite(float(v)):
            return False
        lo_ok = self.left is None or (v >= self.left if self.closed in ("both", "left")
                                      else v > self.left)
        hi_ok = self.right is None or (v <= self.right if self.closed in ("both", "right")
                                       else v < self.right)
        return bool(lo_ok and hi_ok)

    def __str__(self):
        what = "an int" if self.kind is numbers.Integral else "a finite float"
        if self.left is None and self.right is None:
            return what
        lo = "-inf" if self.left is None else repr(self.left)
        hi = "inf" if self.right is None else repr(self.right)
        lb = "[" if self.closed in ("both", "left") and self.left is not None else "("
        rb = "]" if self.closed in ("both", "right") and self.right is not None else ")"
        return f"{what} in the range {lb}{lo}, {hi}{rb}"


class Options:
    """One of a fixed set of strings."""

    def __init__(self, *options):
        self.options = tuple(options)

    def __call__(self, v):
        return isinstance(v, str) and v in self.options

    def __str__(self):
        return "a str among " + ", ".join(repr(o) for o in self.options)


class Satisfies:
    """A value that ``test`` accepts; ``description`` says what that is."""

    def __init__(self, test, description):
        self.test, self.description = test, description

    def __call__(self, v):
        try:
            return bool(self.test(v))
        except (TypeError, ValueError, OverflowError):
            return False

    def __str__(self):
        return self.description


def _is_flag(v):
    return isinstance(v, (bool, np.bool_))


def _is_seed(v):
    if isinstance(v, (np.random.Generator, np.random.RandomState)) or v is None:
        return True
    return isinstance(v, numbers.Integral) and not _is_flag(v) and v >= 0


#: Constraints that recur in every family.
BOOLEAN = Satisfies(_is_flag, "True or False")
RANDOM_STATE = Satisfies(_is_seed, "None, a non-negative int or a numpy Generator")
CALLABLE = Satisfies(callable, "a callable")
N_THREADS = Satisfies(lambda v: v is None or (isinstance(v, numbers.Integral) and not _is_flag(v)
                                               and v != 0),
                      "None or a non-zero int (negative: all cores but |n| - 1)")
POSITIVE_TOL = Interval(numbers.Real, 0, None, closed="neither")
#: Most sweeps or epochs of any loop: far beyond any useful budget, far inside int32.
MAX_ITER_LIMIT = 10**9


def describe(constraints):
    """The constraints of one parameter in words, joined by "or"."""
    parts = ["None" if c is None else str(c) for c in constraints]
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " or " + parts[-1]


def check_value(value, name, constraints, owner=None):
    """``value`` if it meets one of ``constraints`` (None in the list admits None), else an
    :class:`InvalidParameterError` naming ``name`` (and ``owner``, the class or function)."""
    for c in constraints:
        if (value is None) if c is None else c(value):
            return value
    where = f" of {owner}" if owner else ""
    raise InvalidParameterError(f"The {name!r} parameter{where} must be {describe(constraints)}. "
                                f"Got {value!r} instead.")


def validate_params(estimator):
    """Check every hyperparameter of ``estimator`` against its class's declared
    ``_parameter_constraints`` (``{name: [constraint, ...]}``); raises
    :class:`InvalidParameterError` for the first that meets none."""
    owner = type(estimator).__name__
    for name, constraints in type(estimator)._parameter_constraints.items():
        check_value(getattr(estimator, name), name, constraints, owner)


def _is_rate_schedule(v):
    if v is None:
        return True
    rates = [v] if isinstance(v, numbers.Real) else list(v)
    return all(isinstance(r, numbers.Real) and not _is_flag(r) and 0 <= r < np.inf for r in rates)


#: ``learning_rate`` of the belief nets: a rate, or one per epoch (its length is checked
#: against ``max_iter`` when ``fit`` runs).
LEARNING_RATE = Satisfies(lambda v: not isinstance(v, (str, bytes)) and _is_rate_schedule(v),
                          "None, a finite non-negative float or a sequence of them (one per epoch)")
#: Layer sizes, top first; the last may be None (the number of columns of the data).
LAYER_SIZES = Satisfies(lambda v: check_sizes(v, 1) is not None,
                        "a sequence of at least two layer sizes (ints >= 1; the last may be None)")
#: An argument NumPy can take as an array (deeper checks are the family's).
ARRAY_LIKE = Satisfies(lambda v: v is not None and not isinstance(v, (str, bytes, dict)),
                       "an array-like (or a scipy.sparse matrix)")


# ------------------------------------------------------------------ sparse matrices
def _index_array(a, what, name):
    if not isinstance(a, np.ndarray) or a.ndim != 1 or a.dtype.kind not in "iu":
        raise ValueError(f"{name} is a malformed sparse matrix: its {what} must be a 1-D array "
                         f"of integers")
    if a.dtype.kind == "u" and a.size and a.max() > np.iinfo(np.int64).max:
        raise ValueError(f"{name} is a malformed sparse matrix: its {what} exceed int64")
    return a.astype(np.int64)


def _check_compressed(data, indices, indptr, shape, name):
    """The checks of :func:`csr_from_arrays`; returns (rows, cols, indices, indptr) as int64."""
    if (not isinstance(shape, (tuple, list)) or len(shape) != 2 or not all(
            isinstance(k, numbers.Integral) and not isinstance(k, (bool, np.bool_))
            and 0 <= k <= MAX_UNITS for k in shape)):
        raise ValueError(f"{name} is a malformed sparse matrix: its shape must be two sizes "
                         f"in [0, {MAX_UNITS}], got {shape!r}")
    rows, cols = int(shape[0]), int(shape[1])
    if not isinstance(data, np.ndarray) or data.ndim != 1:
        raise ValueError(f"{name} is a malformed sparse matrix: its data must be a 1-D array")
    indices = _index_array(indices, "indices", name)
    ptr = _index_array(indptr, "indptr", name)
    if ptr.size != rows + 1:
        raise ValueError(f"{name} is a malformed sparse matrix: its indptr must have "
                         f"{rows + 1} entries (rows + 1), got {ptr.size}")
    if data.size != indices.size:
        raise ValueError(f"{name} is a malformed sparse matrix: data and indices must have "
                         f"the same length, got {data.size} and {indices.size}")
    if ptr[0] != 0 or ptr[-1] != indices.size or np.any(np.diff(ptr) < 0):
        raise ValueError(f"{name} is a malformed sparse matrix: its indptr must rise from 0 to "
                         f"the number of stored entries ({indices.size}) without falling")
    if indices.size and (indices.min() < 0 or indices.max() >= cols):
        raise ValueError(f"{name} is a malformed sparse matrix: its column indices must lie "
                         f"in [0, {cols})")
    return rows, cols, indices, ptr


def csr_from_arrays(data, indices, indptr, shape, name):
    """A scipy CSR matrix from its three arrays, checked in full with NumPy first, so that
    scipy never reads out of range: a 2-D shape within ``MAX_UNITS``, a 1-D ``data`` as long
    as ``indices``, an ``indptr`` of rows + 1 entries rising from 0 to ``nnz`` without
    falling, column indices in range.  Duplicate entries are allowed (they add up).  Raises
    ValueError naming ``name``."""
    import scipy.sparse

    rows, cols, indices, ptr = _check_compressed(data, indices, indptr, shape, name)
    idx = np.int32 if max(rows, cols, indices.size) < 2**31 - 1 else np.int64
    return scipy.sparse.csr_matrix((np.array(data), indices.astype(idx), ptr.astype(idx)),
                                   shape=(rows, cols))


def check_sparse(A, name):
    """A scipy.sparse matrix (or array) of any format, as CSR, after its structure has been
    checked in full with NumPy (see :func:`csr_from_arrays`), so that no scipy routine (a
    conversion, ``sum_duplicates``) ever reads out of range.

    CSR and CSC input is checked on its own arrays (CSR input comes back as the same object),
    COO input on its coordinates; the other formats are first turned into COO by scipy,
    whose conversions of them index nothing by the stored indices, and then checked the same
    way.  Raises ValueError naming ``name``."""
    shape = getattr(A, "shape", None)
    fmt = getattr(A, "format", None)
    if fmt in ("csr", "csc"):
        major = shape if fmt == "csr" or not isinstance(shape, tuple) else shape[::-1]
        _check_compressed(A.data, A.indices, A.indptr, major, name)
        return A if fmt == "csr" else A.tocsr()
    try:
        coo = A if fmt == "coo" else A.tocoo()
    except (ValueError, IndexError, TypeError, AttributeError) as exc:
        raise ValueError(f"{name} is a malformed sparse matrix ({exc})") from None
    row = _index_array(getattr(coo, "row", None), "row indices", name)
    col = _index_array(getattr(coo, "col", None), "column indices", name)
    data = coo.data
    if (not isinstance(shape, tuple) or len(shape) != 2 or not all(
            isinstance(k, numbers.Integral) and 0 <= k <= MAX_UNITS for k in shape)):
        raise ValueError(f"{name} is a malformed sparse matrix: its shape is {shape!r}")
    if not isinstance(data, np.ndarray) or data.ndim != 1 or not (
            data.size == row.size == col.size):
        raise ValueError(f"{name} is a malformed sparse matrix: data, row and column indices "
                         "must be 1-D arrays of one length")
    if row.size and (row.min() < 0 or row.max() >= shape[0] or col.min() < 0
                     or col.max() >= shape[1]):
        raise ValueError(f"{name} is a malformed sparse matrix: an index lies outside its "
                         f"shape {shape}")
    return coo.tocsr()


class Range:
    """A pair (low, high) of finite numbers with ``lo < low <= high < hi``."""

    def __init__(self, lo, hi):
        self.lo, self.hi = lo, hi

    def __call__(self, v):
        if isinstance(v, (str, bytes, dict)) or not hasattr(v, "__len__") or len(v) != 2:
            return False
        a, b = v
        if not all(isinstance(x, numbers.Real) and not _is_flag(x) for x in (a, b)):
            return False
        return bool(np.isfinite(a) and np.isfinite(b) and self.lo < a <= b < self.hi)

    def __str__(self):
        return f"a pair (low, high) with {self.lo!r} < low <= high < {self.hi!r}"


def validate_args(**constraints):
    """Decorator: check the named arguments of every call of a function against their
    constraints (the functions' counterpart of ``_parameter_constraints``), before it runs."""
    import functools
    import inspect

    def decorate(func):
        signature = inspect.signature(func)

        @functools.wraps(func)
        def checked(*args, **kwargs):
            bound = signature.bind(*args, **kwargs)
            bound.apply_defaults()
            for name, allowed in constraints.items():
                check_value(bound.arguments[name], name, allowed, func.__name__)
            return func(*args, **kwargs)

        return checked

    return decorate


class allocating:
    """``with allocating("n_samples=10**12"):`` -- an allocation that fails inside (a
    MemoryError, or NumPy's "array is too big" / "Maximum allowed dimension" ValueError)
    becomes a MemoryError that names the argument that asked for it."""

    def __init__(self, what):
        self.what = what

    def __enter__(self):
        return self

    def __exit__(self, kind, exc, tb):
        if kind is None:
            return False
        if issubclass(kind, MemoryError) or (issubclass(kind, ValueError) and any(
                s in str(exc) for s in ("too big", "Maximum allowed", "maximum possible"))):
            raise MemoryError(f"{self.what}: the arrays asked for do not fit in memory "
                              f"({exc})") from None
        return False


def as_array(value, name, dtype=None):
    """``np.asarray(value, dtype)``, with an error that names ``name`` when NumPy cannot make
    an array of it (a ragged nested list, an object that is no sequence of numbers)."""
    try:
        return np.asarray(value, dtype=dtype)
    except (ValueError, TypeError, OverflowError) as exc:
        what = ("a ragged nested sequence (its rows differ in length)"
                if "inhomogeneous" in str(exc) else f"not convertible ({exc})")
        raise type(exc)(f"{name} is not an array: {what}") from None


# ------------------------------------------------------------------ scalar arguments
#: The largest value of a C ptrdiff_t (and of numpy's intp) on the supported platforms.
INTP_MAX = 2**63 - 1


def check_int(value, name, low, high=INTP_MAX, owner=None):
    """``value`` as a Python int in [low, high] (a bool is not an int here); else an
    :class:`InvalidParameterError` naming ``name``."""
    return int(check_value(value, name, [Interval(numbers.Integral, low, high)], owner))


def check_real(value, name, low=None, high=None, closed="both", allow_none=False, owner=None):
    """``value`` as a finite float in the interval from ``low`` to ``high`` (``closed`` says
    which ends belong, as :class:`Interval`), or None when ``allow_none``."""
    allowed = [Interval(numbers.Real, low, high, closed)] + ([None] if allow_none else [])
    value = check_value(value, name, allowed, owner)
    return None if value is None else float(value)


def check_tol(value, name, allow_none=False, owner=None):
    """``value`` as a positive finite float (a tolerance), or None when ``allow_none``."""
    return check_real(value, name, 0, None, "neither", allow_none, owner)


def check_flag(value, name, owner=None):
    """``value`` as a bool, refusing anything but True and False."""
    return bool(check_value(value, name, [BOOLEAN], owner))


def check_callback(callback, owner=None):
    """``callback`` if it is None or callable."""
    return check_value(callback, "callback", [None, CALLABLE], owner)
