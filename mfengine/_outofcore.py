"""Data beyond one array in memory: every estimator's verbs on a dask collection or an
on-disk array, and the chunked loops.

Every estimator's ``infer``, ``score_samples``, ``score``, ``predict``, ``predict_proba``,
``predict_log_proba``, ``decode``, ``fit`` and ``partial_fit`` (wrapped once, when the class
is made: :class:`mfengine._base.PersistMixin`) hand a dask collection to
:mod:`mfengine._dask` (lazy, block by block; data-parallel fit), and an on-disk array (a
NumPy memmap, a zarr or h5py array) to :func:`map_chunked`, which reads it a chunk of rows at
a time.  Arrays in memory take the families' own code, untouched; dask is imported only when
a dask collection arrives.  The dependency runs one way: :mod:`mfengine._dask` imports
nothing from this module, and a family's data-parallel fit is its own ``_dask_fit`` hook.
"""
import copy
import functools
import mmap
import numbers
import warnings

import numpy as np

from mfengine._base import InferenceResult, user_stacklevel
from mfengine._validation import Options, check_value

__all__ = ["ROUTED_METHODS", "data_kind", "fit_chunked", "map_chunked", "score_chunked"]


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
    >>> from mfengine._outofcore import map_chunked
    >>> net = mf.SigmoidBeliefNet([2, 4, 8], random_state=0)
    >>> X = net.sample(100, random_state=1)
    >>> path = os.path.join(tempfile.mkdtemp(), "X.u8")
    >>> disk = np.memmap(path, dtype=np.uint8, mode="w+", shape=X.shape)
    >>> disk[:] = X
    >>> b = map_chunked(net, "score_samples", disk, chunk_size=32)
    >>> bool(np.allclose(b, net.score_samples(X), rtol=0, atol=1e-12))
    True
    """
    check_value(method, "method", [Options("infer", "score_samples", "score", "predict",
                                           "predict_proba", "predict_log_proba")], "map_chunked")
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
    >>> from mfengine._outofcore import score_chunked
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
    >>> from mfengine._outofcore import fit_chunked
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
