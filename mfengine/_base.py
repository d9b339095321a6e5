"""What every model family shares: the result base, the convergence warning, persistence.

Every estimator of mfengine (``SigmoidBeliefNet``, ``BeliefNet``, ``NLGBN``, ``ContextHMM``,
``GenerativeClassifier``) is a scikit-learn estimator: hyperparameters are constructor
arguments stored unchanged (so ``get_params``, ``set_params`` and ``clone`` work), fitted
parameters end in ``_``.  This module adds the pieces scikit-learn has no name for:

* :class:`InferenceResult`, the base of every family's answer to ``infer``;
* :class:`ConvergenceWarning` and :func:`warn_unconverged`, so that no solve that stopped
  early returns silently;
* :class:`PersistMixin` (``model.save(path)``; :func:`load` and the format live in
  :mod:`mfengine._persist`);
* data beyond one in-memory array: every estimator's ``infer``, ``score_samples``, ``score``,
  ``predict``, ``predict_proba``, ``predict_log_proba`` and ``fit`` (wrapped once, in
  ``PersistMixin.__init_subclass__``) hand a dask collection to :mod:`mfengine._dask`
  (lazy, block by block; data-parallel fit), and an on-disk array (a NumPy memmap, a zarr or
  h5py array) to :func:`map_chunked`, which reads it a chunk of rows at a time.  Arrays in
  memory take the families' own code, untouched; dask is imported only when a dask
  collection arrives.  The dependency runs one way: :mod:`mfengine._dask` imports nothing
  from this module, and a family's data-parallel fit is its own ``_dask_fit`` hook.
"""
import copy
import functools
import mmap
import numbers
import os
import sys
import warnings
from dataclasses import dataclass, field

import numpy as np

from mfengine import _persist
from mfengine._persist import FORMAT_VERSION, load  # noqa: F401  (their home before)
from mfengine._validation import validate_params

try:  # a subclass of scikit-learn's, so that filters on either one catch both
    from sklearn.exceptions import ConvergenceWarning as _SkConvergenceWarning
except ImportError:  # pragma: no cover - scikit-learn is a dependency of the estimator layer
    _SkConvergenceWarning = UserWarning

__all__ = [
    "ConvergenceWarning",
    "InferenceResult",
    "PersistMixin",
    "fit_chunked",
    "load",
    "map_chunked",
    "score_chunked",
    "warn_unconverged",
    "FORMAT_VERSION",
]

# Warnings point at the first frame outside this directory (see user_stacklevel).
_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


class ConvergenceWarning(_SkConvergenceWarning):
    """A mean-field solve or a training run stopped before meeting its tolerance.

    A subclass of scikit-learn's ``ConvergenceWarning``: a filter on either one applies.

    Examples
    --------
    >>> import warnings
    >>> import mfengine as mf
    >>> net = mf.SigmoidBeliefNet([4, 8, 16], weight_scale=4.0, random_state=0)
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     _ = net.infer(net.sample(50, random_state=1), max_iter=1)
    >>> any(issubclass(w.category, mf.ConvergenceWarning) for w in caught)
    True
    """


def user_stacklevel():
    """The ``stacklevel`` that makes a warning point at the caller's code, outside mfengine.

    Call it as the argument of ``warnings.warn`` inside the package: it counts the frames from
    the function calling ``warnings.warn`` back to the first one whose file lies outside the
    mfengine package (the user's line, or the library that called mfengine), however many of
    the package's own functions and wrappers lie between.

    Returns
    -------
    stacklevel : int
        For ``warnings.warn(..., stacklevel=user_stacklevel())``.
    """
    frame = sys._getframe(1)   # the function that calls warnings.warn
    level = 1
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE_DIR):
        frame = frame.f_back
        level += 1
    return level


def warn_unconverged(converged, what, hint):
    """Warn (with :class:`ConvergenceWarning`) when some entries of ``converged`` are False.

    The warning points at the first caller outside mfengine (see :func:`user_stacklevel`).

    Parameters
    ----------
    converged : array_like of bool
        One flag per pattern (or sequence, or net).
    what : str
        The call that solved them, for example ``"infer(method='sjj')"``.
    hint : str
        What to try, for example ``"raise max_iter or loosen tol"``.

    Returns
    -------
    n_unconverged : int
        How many entries of ``converged`` are False.
    """
    converged = np.asarray(converged, dtype=bool)
    bad = int(converged.size - np.count_nonzero(converged))
    if bad:
        warnings.warn(
            f"{what}: {bad} of {converged.size} solves did not converge within the iteration "
            f"budget; {hint}",
            ConvergenceWarning,
            stacklevel=user_stacklevel(),
        )
    return bad


@dataclass(repr=False)
class InferenceResult:
    """The mean-field solution for a batch of patterns (or sequences).

    Every family's ``infer`` returns a subclass of this class, which adds the family's
    variational parameters.

    Parameters
    ----------
    bound : ndarray
        The objective at the solution, per pattern (or sequence), in nats.  A lower bound on
        ln P(x) except for the Plefka methods, whose ``bound`` is -G, an approximation of
        ln P(x) that may lie on either side of it.
    converged : ndarray of bool
        Whether each solve met its tolerance.
    n_iter : ndarray of int
        Sweeps (or iterations) taken per pattern.
    method : str
        The mean-field method that produced the result.
    tol : float, optional
        The tolerance of the solve.

    Examples
    --------
    >>> import mfengine as mf
    >>> net = mf.SigmoidBeliefNet([2, 4, 8], random_state=0)
    >>> isinstance(net.infer(net.sample(3, random_state=1)), mf.InferenceResult)
    True
    """

    bound: np.ndarray
    converged: np.ndarray
    n_iter: np.ndarray
    method: str
    tol: float = field(default=None)

    def __repr__(self):
        n = int(np.size(self.bound))
        mean = float(np.mean(self.bound)) if n else float("nan")
        return (
            f"{type(self).__name__}(method={self.method!r}, n={n}, mean_bound={mean:.6g}, "
            f"converged={int(np.count_nonzero(self.converged))}/{np.size(self.converged)})"
        )


@dataclass(repr=False)
class LogLikelihoodEstimate:
    """A sampled estimate of ln P(x) per pattern, with its standard error.

    Returned by ``log_likelihood(X, ...)`` of the latent-variable families; their
    ``score_samples(X, method="importance", ...)`` returns ``estimate`` alone.

    Parameters
    ----------
    estimate : ndarray of shape (n_patterns,)
        The estimate of ln P(x) per pattern, in nats: the log of the average importance weight.
    stderr : ndarray of shape (n_patterns,)
        Its standard error (delta method on the log of the mean weight).
    bound : ndarray of shape (n_patterns,)
        The mean-field objective of the proposal, for comparison (nan where none is computed).
    n_samples : int
        Samples drawn per pattern.
    ess : ndarray of shape (n_patterns,)
        Effective sample size of the weights per pattern, (sum w)^2 / sum w^2.
    method : str
        ``"importance"`` or ``"ais"``.

    Examples
    --------
    >>> import numpy as np
    >>> import mfengine as mf
    >>> est = mf.LogLikelihoodEstimate(np.array([-3.0]), np.array([0.01]), np.array([-3.2]),
    ...                                100, np.array([80.0]), "importance")
    >>> est
    LogLikelihoodEstimate(method='importance', n=1, n_samples=100, mean=-3, mean_stderr=0.01)
    """

    estimate: np.ndarray
    stderr: np.ndarray
    bound: np.ndarray
    n_samples: int
    ess: np.ndarray
    method: str = "importance"

    def __repr__(self):
        n = int(np.size(self.estimate))
        mean = float(np.mean(self.estimate)) if n else float("nan")
        se = float(np.sqrt(np.sum(np.square(self.stderr)))) / n if n else float("nan")
        return (f"{type(self).__name__}(method={self.method!r}, n={n}, "
                f"n_samples={self.n_samples}, mean={mean:.6g}, mean_stderr={se:.3g})")


# ------------------------------------------------------------- data beyond one array in memory
#: The verbs that accept a dask collection (all of them) or an on-disk array (all but fit).
ROUTED_METHODS = ("infer", "score_samples", "score", "predict", "predict_proba",
                  "predict_log_proba", "decode", "fit", "partial_fit")

#: Default rows per chunk of :func:`map_chunked`: about 2**22 values (32 MB as float64).
CHUNK_VALUES = 1 << 22


def data_kind(X):
    """How ``X`` is held: ``"dask"``, ``"disk"`` or None (an array in memory, or anything else).

    ``"dask"``: a dask collection (array, bag, delayed) or a list of delayed objects;
    ``"disk"``: a NumPy memmap, a zarr array or an h5py dataset.  Neither dask nor zarr is
    imported: the test reads the type's module name.

    Parameters
    ----------
    X : object
        The data argument of a call.

    Returns
    -------
    kind : {"dask", "disk"} or None
        Where the rows of ``X`` live.
    """
    t = type(X)
    if t is np.ndarray:
        return None
    mod = getattr(t, "__module__", None) or ""
    if mod == "dask" or mod.startswith("dask."):
        return "dask"
    if isinstance(X, (list, tuple)) and X:
        first = getattr(type(X[0]), "__module__", None) or ""
        if first.startswith("dask."):
            return "dask"
    if isinstance(X, np.memmap) or mod.startswith(("zarr.", "h5py.")):
        return "disk"
    return None


def _sequence_model(func):
    """Whether the method takes ``lengths`` (its rows are time steps of sequences)."""
    import inspect

    try:
        return "lengths" in inspect.signature(func).parameters
    except (TypeError, ValueError):  # pragma: no cover - a builtin
        return False


def _route_call(model, name, func, sequences, kind, args, kwargs):
    """The routed call of a verb whose data argument is of ``kind`` ("dask" or "disk")."""
    if getattr(model, "_batch", False):     # BeliefNetBatch: row k belongs to net k
        if kind == "dask":
            raise TypeError(f"{type(model).__name__}.{name} takes no dask collection (its rows "
                            "are its nets, not independent patterns): pass an in-memory array")
        return func(model, *args, **kwargs)
    if kind == "dask":
        from mfengine import _dask

        if name == "partial_fit":   # the on-disk arrays' streaming pass, over the dask blocks
            args, kwargs = list(args), dict(kwargs)
            X = args.pop(0) if args else kwargs.pop("X")
            X, chunk, read = _dask.block_reader(X, f"{type(model).__name__}.partial_fit")
            return _partial_fit_pass(model, (X, *args), kwargs, chunk_size=chunk, reader=read)
        return _dask.route(model, name, func, args, kwargs)
    # an on-disk array: rows are independent patterns except for the sequence models, whose
    # chunks hold whole sequences
    if sequences:
        if name == "fit":
            return func(model, *args, **kwargs)
        return _map_sequences_chunked(model, name, args, kwargs)
    if name == "fit" or (name == "score" and hasattr(model, "predict")):
        return func(model, *args, **kwargs)
    if name == "partial_fit":
        return _partial_fit_pass(model, args, kwargs)
    return _map_chunked(model, name, args, kwargs)


def _make_wrapper(func, name, sequences, data_kind, route_call):
    """The routed version of the verb ``func`` (see :func:`_route`)."""
    def routed(self, *args, **kwargs):
        kind = data_kind(args[0] if args else kwargs.get("X"))
        if kind is None:
            return func(self, *args, **kwargs)
        return route_call(self, name, func, sequences, kind, args, kwargs)
    return routed


def _route(name, func):
    """``func`` (a public verb) wrapped so that dask collections go to mfengine._dask and
    on-disk arrays to :func:`map_chunked`; anything else calls ``func`` itself."""
    routed = functools.wraps(func)(
        _make_wrapper(func, name, _sequence_model(func), data_kind, _route_call))
    routed._mf_routed = True
    return routed


def _release_pages(X):
    """Drop the pages of a memmap that reading mapped into this process (they stay in the
    OS page cache), so that its resident size stays that of one chunk."""
    m = getattr(X, "_mmap", None)
    if m is None or getattr(X, "mode", "c") == "c" or not hasattr(m, "madvise"):
        return
    try:
        m.madvise(mmap.MADV_DONTNEED)
    except (OSError, ValueError, AttributeError):  # pragma: no cover - platform without it
        pass


def _concat_results(parts, name):
    """One answer from the answers of consecutive chunks of rows."""
    first = parts[0]
    if isinstance(first, np.ndarray):
        return np.concatenate(parts, axis=0)
    if isinstance(first, InferenceResult):
        out = copy.copy(first)
        rows = [int(np.shape(p.bound)[0]) for p in parts]

        def cat(values):
            v0 = values[0]
            if isinstance(v0, np.ndarray) and v0.ndim >= 1 and v0.shape[0] == rows[0]:
                return np.concatenate(values, axis=0)
            if (isinstance(v0, list) and v0 and all(isinstance(a, np.ndarray) and a.ndim >= 1
                                                    and a.shape[0] == rows[0] for a in v0)):
                return [np.concatenate([v[k] for v in values], axis=0) for k in range(len(v0))]
            return v0

        for key in vars(first):
            setattr(out, key, cat([getattr(p, key) for p in parts]))
        return out
    raise TypeError(f"{name} returned {type(first).__name__}, which map_chunked cannot join")


def _map_chunked(model, name, args, kwargs, chunk_size=None, progress=None):
    X = args[0] if args else kwargs.pop("X")
    args = args[1:]
    shape = tuple(X.shape)
    if len(shape) != 2:
        raise ValueError(f"X must be a 2-D array of patterns (n_patterns, n_features) to be "
                         f"read in chunks, got shape {shape}")
    n, d = shape
    if chunk_size is None:
        chunk_size = max(1, CHUNK_VALUES // max(d, 1))
        store = getattr(X, "chunks", None)     # zarr and h5py: whole storage chunks per read
        if isinstance(store, tuple) and store and isinstance(store[0], numbers.Integral):
            chunk_size = max(int(store[0]), chunk_size // int(store[0]) * int(store[0]))
    elif (isinstance(chunk_size, (bool, np.bool_)) or not isinstance(chunk_size, numbers.Integral)
          or chunk_size < 1):
        raise ValueError(f"chunk_size must be a positive integer (rows per chunk), got "
                         f"{chunk_size!r}")
    chunk_size = int(chunk_size)
    if progress is None:
        progress = getattr(model, "progress", True)
    progress = bool(progress) if isinstance(progress, (bool, np.bool_)) else True
    score = name == "score"
    method = getattr(model, "score_samples" if score else name)

    def rows(value, a, b):     # arguments with one row per pattern follow X's chunks
        if (hasattr(value, "shape") and hasattr(value, "__getitem__") and len(value.shape) >= 2
                and value.shape[0] == n and not isinstance(value, (str, bytes))):
            return np.asarray(value[a:b])
        return value

    if score:      # score(X, y=None, missing=None): y is ignored by the density models
        args = args[1:]
        kwargs = {k: v for k, v in kwargs.items() if k != "y"}
    from mfengine._progress import progress_bar

    parts, caught = [], []
    with progress_bar(total=n, desc=f"{type(model).__name__}.{name}", disable=not progress,
                      unit="pattern") as bar:
        for a in range(0, n, chunk_size):
            b = min(n, a + chunk_size)
            block = np.array(X[a:b])
            with warnings.catch_warnings(record=True) as got:
                warnings.simplefilter("always")
                parts.append(method(block, *[rows(v, a, b) for v in args],
                                    **{k: rows(v, a, b) for k, v in kwargs.items()}))
            caught.extend(got)
            del block
            _release_pages(X)
            bar.update(b - a)
    if n == 0:
        parts.append(method(np.array(X[0:0]), *args, **kwargs))
    seen = set()
    for w in caught:   # each distinct warning once, not once per chunk
        key = (w.category, str(w.message).split(":")[0])
        if key not in seen:
            seen.add(key)
            count = sum(1 for v in caught if (v.category, str(v.message).split(":")[0]) == key)
            extra = f" (in {count} of {len(parts)} chunks)" if len(parts) > 1 else ""
            warnings.warn(f"{w.message}{extra}", w.category, stacklevel=user_stacklevel())
    out = _concat_results(parts, name)
    if score:
        if out.size == 0:
            raise ValueError("X has no patterns: the mean bound of no pattern is undefined")
        return float(np.mean(out))
    return out


def _map_sequences_chunked(model, name, args, kwargs, chunk_size=None, progress=None):
    """A sequence model's verb on an on-disk array of time steps with ``lengths``: chunks of
    whole sequences (about CHUNK_VALUES values each), answers joined."""
    X = args[0] if args else kwargs.pop("X")
    args = list(args[1:])
    lengths = args.pop(0) if args else kwargs.pop("lengths", None)
    if len(X.shape) != 2:
        raise ValueError(f"X must be a 2-D array of time steps (n_steps, n_features) to be read "
                         f"in chunks, got shape {tuple(X.shape)}")
    N = int(X.shape[0])
    lengths = np.array([N] if lengths is None else lengths)
    if lengths.ndim != 1 or lengths.dtype.kind not in "iu" or np.any(lengths < 1) or (
            int(lengths.sum()) != N):
        raise ValueError(f"lengths must be positive integers summing to the rows of X ({N})")
    rows = chunk_size or max(1, CHUNK_VALUES // max(int(X.shape[1]), 1))
    ends = np.cumsum(lengths)
    groups, first = [], 0
    while first < len(lengths):       # sequences [first, last) per chunk, at least one each
        start = 0 if first == 0 else int(ends[first - 1])
        last = max(first + 1, int(np.searchsorted(ends, start + rows, side="right")))
        groups.append((first, last))
        first = last
    if progress is None:
        progress = getattr(model, "progress", True)
    progress = bool(progress) if isinstance(progress, (bool, np.bool_)) else True
    from mfengine._progress import progress_bar

    method = getattr(model, name)
    parts = []
    with progress_bar(total=N, desc=f"{type(model).__name__}.{name}", disable=not progress,
                      unit="step") as bar:
        for a, b in groups:
            start = 0 if a == 0 else int(ends[a - 1])
            stop = int(ends[b - 1])
            parts.append(method(np.array(X[start:stop]), lengths[a:b], *args, **kwargs))
            _release_pages(X)
            bar.update(stop - start)
    first = parts[0]
    if name == "score":
        return float(sum(parts))
    if isinstance(first, tuple):        # score_samples, decode: (total, per-step array)
        return float(sum(p[0] for p in parts)), np.concatenate([p[1] for p in parts], axis=0)
    if isinstance(first, np.ndarray):
        return np.concatenate(parts, axis=0)
    if isinstance(first, InferenceResult):
        out = copy.copy(first)
        counts = [(int(np.shape(p.bound)[0]), int(np.sum(p.lengths))) for p in parts]
        for key, v0 in vars(first).items():
            if isinstance(v0, np.ndarray) and v0.ndim >= 1 and v0.shape[0] in counts[0]:
                axis_rows = 0 if v0.shape[0] == counts[0][0] else 1
                if all(np.shape(getattr(p, key))[0] == c[axis_rows] for p, c in zip(parts, counts)):
                    setattr(out, key, np.concatenate([getattr(p, key) for p in parts], axis=0))
        return out
    raise TypeError(f"{name} returned {type(first).__name__}, which cannot be joined")


def map_chunked(model, method, X, *args, chunk_size=None, progress=None, **kwargs):
    """Call ``model.<method>`` on ``X`` a chunk of rows at a time and join the answers.

    For data that does not fit in memory (a NumPy memmap, a zarr array, an h5py dataset, or
    anything sliceable by rows): each chunk is read, converted to the dtype the model wants
    (so ``uint8`` or ``float32`` on disk costs 1 or 4 bytes per value there, 8 only for the
    chunk in memory), solved and released; memory stays that of one chunk plus the answer.
    A memmap's pages are handed back to the OS after every chunk.  ``infer``,
    ``score_samples``, ``predict``, ``predict_proba`` and ``score`` of every row-wise family
    take this path by themselves when given an on-disk array; the answers equal those of the
    whole array in memory (patterns are solved independently), except sampled estimates
    (``method="importance"``), whose random streams are numbered within each chunk.

    Parameters
    ----------
    model : estimator
        A fitted mfengine model.
    method : str
        ``"infer"``, ``"score_samples"``, ``"score"``, ``"predict"``, ``"predict_proba"`` or
        ``"predict_log_proba"``.
    X : array-like of shape (n_patterns, n_features)
        The patterns, sliceable by rows (``X[a:b]``).
    *args
        Further positional arguments of the method; arrays with one row per pattern (for
        example ``missing``) are sliced with ``X``.
    chunk_size : int, optional
        Rows per chunk.  Default: about 2**22 values per chunk (32 MB as float64), rounded
        to whole storage chunks of a zarr or h5py array.
    progress : bool, optional
        Show a progress bar (after two seconds).  Default: the model's ``progress``.
    **kwargs
        Further keyword arguments of the method, sliced like ``args``.

    Returns
    -------
    answer
        What the method returns for the whole of ``X``: the per-chunk arrays (or the fields
        of the per-chunk inference results) joined along the rows; for ``"score"`` the mean.

    Raises
    ------
    ValueError
        If ``X`` is not 2-D or ``chunk_size`` is not a positive integer, or as the method.

    Examples
    --------
    >>> import os, tempfile
    >>> import numpy as np
    >>> import mfengine as mf
    >>> from mfengine._base import map_chunked
    >>> net = mf.SigmoidBeliefNet([2, 4, 8], random_state=0)
    >>> X = net.sample(100, random_state=1)
    >>> path = os.path.join(tempfile.mkdtemp(), "X.u8")
    >>> disk = np.memmap(path, dtype=np.uint8, mode="w+", shape=X.shape)
    >>> disk[:] = X
    >>> b = map_chunked(net, "score_samples", disk, chunk_size=32)
    >>> bool(np.allclose(b, net.score_samples(X), rtol=0, atol=1e-12))
    True
    """
    if not isinstance(method, str) or method not in ROUTED_METHODS or method in ("fit", "decode"):
        raise ValueError(f"method must be one of 'infer', 'score_samples', 'score', 'predict', "
                         f"'predict_proba', 'predict_log_proba', got {method!r}")
    return _map_chunked(model, method, (X,) + args, dict(kwargs), chunk_size, progress)


def score_chunked(model, X, chunk_size=None, progress=None, **kwargs):
    """``model.score_samples(X)`` a chunk of rows at a time: see :func:`map_chunked`.

    Parameters
    ----------
    model : estimator
        A fitted mfengine model.
    X : array-like of shape (n_patterns, n_features)
        The patterns: a memmap, zarr or h5py array, or any array sliceable by rows.
    chunk_size : int, optional
        Rows per chunk (default: about 2**22 values).
    progress : bool, optional
        Show a progress bar (after two seconds).  Default: the model's ``progress``.
    **kwargs
        Passed to ``score_samples`` (arrays with one row per pattern are sliced with ``X``).

    Returns
    -------
    bound : ndarray of shape (n_patterns,)
        The per-pattern bound (or log-likelihood), in nats.

    Examples
    --------
    >>> import numpy as np
    >>> import mfengine as mf
    >>> from mfengine._base import score_chunked
    >>> net = mf.SigmoidBeliefNet([2, 4, 8], random_state=0)
    >>> X = net.sample(10, random_state=1)
    >>> score_chunked(net, X, chunk_size=3).shape
    (10,)
    """
    return map_chunked(model, "score_samples", X, chunk_size=chunk_size, progress=progress,
                       **kwargs)


def _default_chunk_rows(model, X, chunk_size):
    """Rows per chunk: ``chunk_size``, or about CHUNK_VALUES values rounded down to whole
    mini-batches of the model (so that a pass makes the steps of a pass over the whole array)."""
    if chunk_size is not None:
        if (isinstance(chunk_size, (bool, np.bool_)) or not isinstance(chunk_size, numbers.Integral)
                or chunk_size < 1):
            raise ValueError(f"chunk_size must be a positive integer (rows per chunk), got "
                             f"{chunk_size!r}")
        return int(chunk_size)
    rows = max(1, CHUNK_VALUES // max(int(X.shape[1]), 1))
    batch = getattr(model, "batch_size", None)
    if isinstance(batch, numbers.Integral) and not isinstance(batch, bool) and batch >= 1:
        rows = max(int(batch), rows // int(batch) * int(batch))
    return rows


def _join_history(model, k, sizes):
    """The last ``k`` entries of ``history_`` (one per chunk) joined into one, weighted by the
    chunks' sizes, so that a pass over chunks adds one entry like a pass over one array."""
    if k <= 1 or "history_" not in vars(model):
        return
    h = np.asarray(model.history_, dtype=np.float64)
    joined = float(np.dot(h[-k:], sizes) / np.sum(sizes))
    model.history_ = np.concatenate([h[:-k], [joined]])
    model.n_iter_ = int(model.history_.shape[0])


def _partial_fit_pass(model, args, kwargs, chunk_size=None, progress=None, rng=None,
                      reader=None):
    """One ``partial_fit`` pass over the rows of ``X`` (args[0]), a chunk at a time."""
    X = args[0] if args else kwargs.pop("X")
    args = args[1:]
    if len(X.shape) != 2:
        raise ValueError(f"X must be a 2-D array of patterns, got shape {tuple(X.shape)}")
    n = int(X.shape[0])
    rows = _default_chunk_rows(model, X, chunk_size)
    starts = list(range(0, n, rows))
    if rng is not None:
        starts = [starts[i] for i in rng.permutation(len(starts))]
    if progress is None:
        progress = getattr(model, "progress", True)
    progress = bool(progress) if isinstance(progress, (bool, np.bool_)) else True
    read = reader if reader is not None else (lambda a, b: np.array(X[a:b]))
    from mfengine._progress import progress_bar

    def cut(value, a, b, perm):
        if (hasattr(value, "shape") and hasattr(value, "__getitem__") and len(value.shape) >= 2
                and value.shape[0] == n):
            v = np.asarray(value[a:b])
            return v if perm is None else v[perm]
        return value

    method = getattr(model, "partial_fit")
    sizes = []
    with progress_bar(total=n, desc=f"{type(model).__name__}.partial_fit", disable=not progress,
                      unit="pattern") as bar:
        for a in starts:
            b = min(n, a + rows)
            block = read(a, b)
            perm = None if rng is None else rng.permutation(b - a)
            if perm is not None:
                block = block[perm]
            method(block, *[cut(v, a, b, perm) for v in args],
                   **{k: cut(v, a, b, perm) for k, v in kwargs.items()})
            sizes.append(b - a)
            del block
            _release_pages(X)
            bar.update(b - a)
    _join_history(model, len(sizes), np.asarray(sizes, dtype=np.float64))
    return model


def fit_chunked(model, X, n_epochs=1, *, chunk_size=None, shuffle=True, random_state=None,
                progress=None, **kwargs):
    """Train on data larger than memory: epochs of ``partial_fit`` over chunks of rows.

    Each epoch reads every chunk once: in a random order of chunks and a random order of the
    rows inside each chunk when ``shuffle`` (a shuffle that never needs two chunks in memory),
    else in the order of the rows.  Memory stays that of one chunk.  ``model.partial_fit(X)``
    on an on-disk array (a memmap, zarr or h5py array) or a dask array makes one such pass in
    row order by itself; with ``chunk_size`` a multiple of ``batch_size`` (the default is) the
    steps are those of ``partial_fit`` on the whole array.

    Parameters
    ----------
    model : estimator with partial_fit
        A SigmoidBeliefNet or BeliefNet (or any estimator with ``partial_fit``).  Each call
        uses the first rate of its ``learning_rate`` schedule.
    X : array-like of shape (n_patterns, n_features)
        Training patterns, sliceable by rows: a memmap, a zarr or h5py array, an array.
    n_epochs : int, default=1
        Passes over the data.
    chunk_size : int, optional
        Rows per chunk.  Default: about 2**22 values, rounded down to whole ``batch_size``
        mini-batches.
    shuffle : bool, default=True
        Visit chunks, and rows within a chunk, in a random order in each epoch.
    random_state : None, int or numpy.random.Generator, default=None
        Seed of the shuffles.
    progress : bool, optional
        Show a progress bar (after two seconds).  Default: the model's ``progress``.
    **kwargs
        Passed to ``partial_fit`` (arrays with one row per pattern, such as ``missing``, are
        cut and shuffled with ``X``).

    Returns
    -------
    model : estimator
        The model; its ``history_`` gains one entry per epoch (the mean bound over the epoch's
        patterns, each at its solution before its step).

    Raises
    ------
    TypeError
        If the model has no ``partial_fit``.
    ValueError
        If ``n_epochs`` or ``chunk_size`` is not a positive integer, or as ``partial_fit``.

    Examples
    --------
    >>> import mfengine as mf
    >>> from mfengine._base import fit_chunked
    >>> net = mf.SigmoidBeliefNet([2, 4, 8], batch_size=10, random_state=0, progress=False)
    >>> X = net.sample(200, random_state=1)
    >>> fit_chunked(net, X, n_epochs=3, chunk_size=50, random_state=0).history_.shape
    (3,)
    """
    if not hasattr(model, "partial_fit"):
        raise TypeError(f"{type(model).__name__} has no partial_fit: fit_chunked cannot train it")
    if (isinstance(n_epochs, (bool, np.bool_)) or not isinstance(n_epochs, numbers.Integral)
            or n_epochs < 1):
        raise ValueError(f"n_epochs must be a positive integer, got {n_epochs!r}")
    rng = np.random.default_rng(random_state) if shuffle else None
    for _ in range(int(n_epochs)):
        _partial_fit_pass(model, (X,), dict(kwargs), chunk_size, progress, rng)
    return model


class PersistMixin:
    """``save(path)``: the model in a portable, versioned ``.npz`` file, read by ``mf.load``.

    The file holds the constructor parameters and the fitted attributes (names ending in
    ``_``) as plain arrays and JSON, a format version and the package version; nothing is
    pickled.  ``mf.load`` checks a file in full before it builds a model from it
    (:mod:`mfengine._persist`); a subclass declares what it saves:

    ``_saved_state``
        ``{fitted attribute: kind}``, every attribute ``load`` may set (kinds:
        ``mfengine._persist._KINDS``);
    ``_saved_together``
        groups of those attributes that are present together or not at all;
    ``_check_loaded()``
        the model's own checks of its parameters and fitted attributes, run by ``load``.

    Every subclass's verbs in ``ROUTED_METHODS`` are wrapped once, when the class is made:
    a dask collection goes to :mod:`mfengine._dask` (lazy answers, data-parallel ``fit``), an
    on-disk array to :func:`map_chunked`; an array in memory reaches the method unchanged.
    """

    def __init_subclass__(cls, **kwargs):
        for name in ROUTED_METHODS:
            func = getattr(cls, name, None)
            if callable(func) and type(func).__name__ == "function" and not getattr(
                    func, "_mf_routed", False):
                setattr(cls, name, _route(name, func))
        super().__init_subclass__(**kwargs)

    def save(self, path):
        """Write the model to ``path`` (a ``.npz`` file; the suffix is added if missing).

        Parameters
        ----------
        path : str or os.PathLike
            Where to write.

        Returns
        -------
        path : str
            The file written.

        Raises
        ------
        TypeError
            If ``path`` is neither a str nor a path-like object.
        """
        return _persist.save(self, path)

    def _check_loaded(self):
        """``mf.load``'s last check: the hyperparameters against the class's declared
        ``_parameter_constraints``, then the model's own checks of its fitted attributes."""
        validate_params(self)
        self._check_fitted()

    def _check_fitted(self):
        """The family's checks of its fitted attributes as ``load`` set them (a hook)."""
