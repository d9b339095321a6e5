"""Dask collections in, lazy answers out; data-parallel ``fit`` on a dask array.

Every estimator's ``infer``, ``score_samples``, ``score``, ``predict``, ``predict_proba``,
``predict_log_proba``, ``decode`` and ``fit`` come here (through the wrapper that
``mfengine._base.PersistMixin`` puts around them) when their data argument is a dask
collection; dask is imported then, never by ``import mfengine``.  Install it with
``pip install "mfengine[dask]"``.

Answers (rows are independent patterns: SigmoidBeliefNet, BeliefNet, NLGBN, the classifiers)
    ``X`` is a 2-D ``dask.array`` chunked by rows (column chunks are joined first).
    ``score_samples``, ``predict``, ``predict_proba`` and ``predict_log_proba`` return lazy
    dask arrays built by ``map_blocks``: one task per block of rows, each calling the model's
    own method on that block, so no block ever leaves its worker.  ``infer`` returns the
    family's result class whose per-pattern fields (``bound``, ``converged``, ``n_iter``,
    ``mu``, ``xi``, ...) are lazy dask arrays sharing one solve per block (compute several
    with one ``dask.compute``); ``method`` and ``tol`` are plain values.  ``score`` returns a
    float (it computes, like scikit-learn's meaning of the verb).  Arguments with one row per
    pattern (``missing``, ``init_mu``), dask or NumPy, follow ``X``'s blocks.  A
    ConvergenceWarning raised on a worker is not shown on the client: look at the lazy
    ``converged`` of ``infer``.  Sampled estimates (``score_samples(X, method="importance",
    random_state=seed)``) draw each block's patterns from streams numbered within the block,
    so they are valid estimates but not the numbers of the same call on the whole array.

Sequences (ContextHMM)
    * a 2-D dask array of time steps with ``lengths`` (a plain sequence of ints, hmmlearn's
      convention): the blocks are moved to the nearest sequence boundaries (no sequence is
      split), and the answers are lazy dask arrays over those blocks (``predict``,
      ``predict_proba``; ``score_samples`` and ``decode`` a pair (lazy 0-d total, lazy
      array); ``infer`` a result whose per-sequence and per-step fields are lazy);
    * a ``dask.bag.Bag`` whose items are (T_i, n_features) arrays: a bag of the per-sequence
      answers (``bag.map``);
    * a list of ``dask.delayed`` sequences: a list of delayed per-sequence answers.

Streaming ``partial_fit``
    ``model.partial_fit(X)`` on a dask array is one pass over its row blocks in order, each
    block computed and given to the family's own ``partial_fit`` (dask-ml's ``Incremental``
    pattern): the data reach the client one block at a time.  The pass is
    ``mfengine._outofcore``'s, the one on-disk arrays take; this module gives it the blocks
    (:func:`block_reader`).

Data-parallel fit (the pattern of dask-ml's k-means: partitions compute, the client updates)
    ``X`` (a dask array chunked by rows) is persisted once, so each block stays on a worker;
    every step sends the current parameters to every partition, each partition returns a
    small sum, and the client updates the parameters.  Per-pattern state that the
    single-machine fit keeps between steps (mean-field solutions used as warm starts) stays
    on the workers as persisted blocks.

    * ``NLGBN`` (variational EM): each partition runs the E-step on its rows, warm-started
      from its previous posteriors, and returns its summed sufficient statistics and bound;
      the client sums them and does the M-step.
    * ``SigmoidBeliefNet`` and ``BeliefNet`` (mini-batch gradient ascent): the client draws the
      same permutation as ``fit``; for each mini-batch every partition solves the batch's
      patterns it holds and returns their summed gradient; the client adds the partitions'
      gradients and takes the step ``learning_rate / batch_size`` times the sum.
    * ``ContextHMM`` (Baum-Welch, then mean-field EM): each partition (whole sequences) returns
      its summed statistics; the client does the M-steps.

    For the same seed and schedule the fitted parameters equal those of ``fit`` on the same
    data in memory up to round-off (the sums are added in another order: partition by
    partition); tests/common/test_dask.py checks 1e-9.  One round trip per mini-batch: the paper's
    on-line rule (``batch_size=1``) is inherently sequential and runs, correctly but slowly,
    with one round trip per pattern; use a mini-batch schedule on a cluster.
    * ``GenerativeClassifier``: the net of each class as SigmoidBeliefNet above, on that
      class's rows (the labels are read on the client), classes one after another.

    ``missing``, ``callback``, ``BeliefNetBatch``, ``MixtureClassifier`` and
    ``BernoulliMixture`` have no data-parallel fit (a TypeError or ValueError says so).

The protocol a family implements (this module imports no family)
    ``model._dask_fit(parts, y=None)`` trains the model and returns it; ``parts`` is a
    :class:`Partitions` over ``X``'s row blocks (for sequence models, blocks of whole
    sequences, with their ``lengths``), ``y`` the labels read on the client (classifiers).
    The family keeps its own loop and asks the partitions for sums:
    ``parts.step(func, shared, extra, states)`` runs ``func(block, state, shared, extra_k)``
    where each block is (``func``: a module-level function or static method of the family,
    e.g. ``mfengine.hmm._solve.partition_estep``) and returns the small answers and the new per-block
    states (warm starts, left on the workers); ``parts.map``, ``parts.split``,
    ``parts.take``, ``parts.gather`` and ``parts.mean_and_std`` cover validation,
    mini-batches, sub-models' data, k-means on the client and data scales.  The families run
    the very loop of their in-memory ``fit`` (``ContextHMM._em``, ``NLGBN._em``,
    ``mfengine.sbn._learn.ascend``) with a step that sums over partitions;
    SigmoidBeliefNet's "gaussian" epochs are compiled in memory, so its hook has a loop of
    its own.  A model without ``_dask_fit`` has no data-parallel fit (a TypeError says so),
    except ``GenerativeClassifier``, whose hook (:func:`_fit_classifier`) still lives here.
"""
import copy
import dataclasses
import inspect
import uuid
import warnings

import numpy as np

__all__ = ["route", "fit", "lazy_map", "block_reader", "Partitions"]


def _dask():
    try:
        import dask
        import dask.array as da
    except ImportError as exc:  # pragma: no cover - only without the extra
        raise ImportError("a dask collection was passed, but dask is not installed: "
                          "pip install \"mfengine[dask]\"") from exc
    return dask, da


def _is_dask_array(x):
    return type(x).__module__.startswith("dask.array") and hasattr(x, "chunks")


def _model_node(model):
    """The model as one graph node (a frozen copy: later changes do not reach lazy answers)."""
    dask, _ = _dask()
    return dask.delayed(copy.deepcopy(model), name=f"mfengine-model-{uuid.uuid4().hex}")


def _split_X(args, kwargs):
    args = list(args)
    if args:
        return args.pop(0), args, dict(kwargs)
    kwargs = dict(kwargs)
    return kwargs.pop("X"), args, kwargs


def _rows_array(X, what):
    """``X`` as a 2-D dask array with one chunk across the columns."""
    _, da = _dask()
    if not _is_dask_array(X):
        raise TypeError(f"{what} takes a dask array chunked by rows, got {type(X).__name__} "
                        "(a dask bag or a list of delayed sequences only for ContextHMM)")
    if X.ndim != 2:
        raise ValueError(f"X must be a 2-D dask array (n_patterns, n_features), got "
                         f"{X.ndim} dimensions")
    if any(np.isnan(c) for c in X.chunks[0]):
        X = X.compute_chunk_sizes()
    if X.numblocks[1] != 1:
        X = X.rechunk({1: -1})
    return X


# ------------------------------------------------------------------ routing
def route(model, name, func, args, kwargs):
    """Answer ``model.<name>(*args, **kwargs)`` whose data argument is a dask collection.

    Parameters
    ----------
    model : estimator
        The mfengine model.
    name : str
        The verb.
    func : callable
        The unwrapped method (for its signature).
    args : tuple
        Positional arguments after ``self`` (the first is the data).
    kwargs : dict
        Keyword arguments.

    Returns
    -------
    answer
        Lazy where the verb returns arrays (see the module docstring); ``fit`` returns the
        model.
    """
    params = inspect.signature(func).parameters
    if "lengths" in params:
        return _sequences(model, name, args, kwargs)
    if name == "fit":
        return fit(model, *args, **kwargs)
    if name == "partial_fit":    # mfengine._outofcore streams it, reading blocks with block_reader
        raise TypeError("partial_fit on a dask array is one pass of mfengine._outofcore's "
                        "streaming loop over block_reader's blocks, not a routed call")
    if name == "score":
        return _score(model, args, kwargs)
    if name == "decode":
        raise TypeError(f"{type(model).__name__}.decode takes no dask collection")
    X, rest, kw = _split_X(args, kwargs)
    return lazy_map(model, name, X, *rest, **kw)


def block_reader(X, what):
    """A dask array's row blocks read in order, one at a time, for a streaming pass.

    ``partial_fit`` on a dask array is :func:`mfengine._outofcore._partial_fit_pass` (the pass
    over chunks that on-disk arrays take too) reading its chunks from here: each block is
    computed and handed to the family's own ``partial_fit`` in turn (dask-ml's Incremental
    pattern: the data stream through the client one block at a time).

    Parameters
    ----------
    X : dask.array.Array of shape (n_patterns, n_features)
        The patterns, chunked by rows.
    what : str
        The call, for error messages.

    Returns
    -------
    X : dask.array.Array
        ``X`` with one chunk across the columns and (if its row chunks were uneven) rows
        rechunked so that equal chunks map to blocks.
    chunk : int
        Rows per chunk of the pass.
    read : callable
        ``read(a, b)``: rows ``a:b`` (one whole block) as a NumPy array.
    """
    X = _rows_array(X, what)
    edges = np.concatenate([[0], np.cumsum(X.chunks[0])])
    rows = {int(a): k for k, a in enumerate(edges[:-1])}

    def read(a, b):
        k = rows[a]
        if b != edges[k + 1]:
            raise AssertionError("partial_fit blocks must follow the dask chunks")
        return np.asarray(X.blocks[k].compute())

    chunk = int(max(X.chunks[0])) if len(set(X.chunks[0][:-1])) <= 1 else None
    if chunk is None:     # uneven blocks: rechunk to the largest so that blocks map to chunks
        chunk = int(max(X.chunks[0]))
        X = X.rechunk({0: chunk})
        edges = np.concatenate([[0], np.cumsum(X.chunks[0])])
        rows = {int(a): k for k, a in enumerate(edges[:-1])}
    return X, chunk, read


def _call_block(block, *aligned, model, verb, n_args, keys, static_args, static_kwargs):
    """One block's answer: ``model.<name>`` on NumPy data (so on the worker it is the
    family's own code)."""
    values = list(static_args)
    kw = dict(static_kwargs)
    for k, v in zip(keys, aligned):
        if isinstance(k, int):
            values[k] = v
        else:
            kw[k] = v
    return getattr(model, verb)(np.asarray(block), *values[:n_args], **kw)


def _template(model, name, X, args, kwargs):
    """The answer for one all-zero pattern (its shapes and dtypes), computing one real row
    only when zeros are refused."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return getattr(model, name)(np.zeros((1, X.shape[1])), *args, **kwargs)
        except (ValueError, TypeError, FloatingPointError):
            return getattr(model, name)(np.asarray(X[:1].compute()), *args, **kwargs)


def lazy_map(model, name, X, *args, **kwargs):
    """``model.<name>(X, *args, **kwargs)`` block by block over a dask array, lazily.

    Parameters
    ----------
    model : estimator
        An mfengine model whose rows are independent patterns.
    name : str
        ``"infer"``, ``"score_samples"``, ``"predict"``, ``"predict_proba"`` or
        ``"predict_log_proba"``.
    X : dask.array.Array of shape (n_patterns, n_features)
        The patterns, chunked by rows.
    *args, **kwargs
        The method's other arguments; arrays with one row per pattern are split with ``X``.

    Returns
    -------
    answer : dask.array.Array or InferenceResult
        A lazy array with ``X``'s row chunks, or (``infer``) the family's result whose
        per-pattern fields are lazy arrays.
    """
    dask, da = _dask()
    X = _rows_array(X, f"{type(model).__name__}.{name}")
    n = X.shape[0]
    row_chunks = X.chunks[0]

    # arguments with one row per pattern go block by block with X; the rest stay as they are
    keys, aligned = [], []
    static_args = list(args)
    static_kwargs = dict(kwargs)
    for k, v in list(enumerate(args)) + list(kwargs.items()):
        is_rows = (_is_dask_array(v) or isinstance(v, np.ndarray)) and v.ndim == 2 and v.shape[0] == n
        if not is_rows:
            if _is_dask_array(v):
                raise ValueError(f"argument {k!r}: a dask array here must have one row per "
                                 f"pattern of X ({n}), got shape {v.shape}")
            continue
        arr = v if _is_dask_array(v) else da.from_array(v, chunks=(row_chunks, -1))
        aligned.append(arr.rechunk((row_chunks, -1)))
        keys.append(k)
        if isinstance(k, int):
            static_args[k] = None
        else:
            static_kwargs.pop(k)
    tmpl_args = [np.zeros((1,) + tuple(a.shape[1:]), dtype=a.dtype) if isinstance(k, int) else None
                 for k, a in zip(keys, aligned)]
    t_args = list(static_args)
    for k, a in zip(keys, tmpl_args):
        if isinstance(k, int):
            t_args[k] = None
    template = _template(model, name, X, t_args, static_kwargs)
    node = _model_node(model)
    call = dict(model=node, verb=name, n_args=len(args), keys=keys, static_args=static_args,
                static_kwargs=static_kwargs)

    if isinstance(template, np.ndarray) and template.ndim in (1, 2):
        if template.ndim == 1:
            return da.map_blocks(_call_block, X, *aligned, drop_axis=1, dtype=template.dtype,
                                 meta=np.empty((0,), template.dtype), **call)
        return da.map_blocks(_call_block, X, *aligned, chunks=(row_chunks, template.shape[1:]),
                             dtype=template.dtype,
                             meta=np.empty((0,) * template.ndim, template.dtype), **call)
    if not dataclasses.is_dataclass(template):     # every family's infer result is one
        raise TypeError(f"{type(model).__name__}.{name} returns {type(template).__name__}, "
                        "which has no lazy form")
    # infer: one delayed solve per block, every per-pattern field a lazy view of it
    blocks = X.to_delayed().ravel()
    aligned_blocks = [a.to_delayed().ravel() for a in aligned]
    solve = dask.delayed(_call_block, pure=True)
    parts = [solve(b, *[ab[i] for ab in aligned_blocks], **call) for i, b in enumerate(blocks)]
    return _lazy_result(template, parts, [row_chunks], 1)


def _get_field(result, key, index):
    value = getattr(result, key)
    return np.asarray(value if index is None else value[index])


def _lazy_field(parts, sizes, key, index, proto):
    dask, da = _dask()
    get = dask.delayed(_get_field, pure=True)
    return da.concatenate([
        da.from_delayed(get(p, key, index), shape=(int(m),) + proto.shape[1:], dtype=proto.dtype,
                        meta=np.empty((0,) * proto.ndim, proto.dtype))
        for p, m in zip(parts, sizes)], axis=0)


def _lazy_result(template, parts, sizes_by_rows, *template_rows):
    """The template result with its per-row fields replaced by lazy concatenations of the
    parts' fields; ``template_rows[k]`` rows in the template mean ``sizes_by_rows[k]``."""
    out = copy.copy(template)
    for key, value in vars(template).items():
        for rows, sizes in zip(template_rows, sizes_by_rows):
            if isinstance(value, np.ndarray) and value.ndim >= 1 and value.shape[0] == rows:
                setattr(out, key, _lazy_field(parts, sizes, key, None, value))
                break
            if (isinstance(value, list) and value and all(
                    isinstance(a, np.ndarray) and a.ndim >= 1 and a.shape[0] == rows for a in value)):
                setattr(out, key, [_lazy_field(parts, sizes, key, i, a) for i, a in enumerate(value)])
                break
    return out


def _score(model, args, kwargs):
    X, rest, kw = _split_X(args, kwargs)
    if hasattr(model, "predict"):      # a classifier: accuracy
        y = rest[0] if rest else kw.pop("y", None)
        if kw.get("sample_weight") is not None or (len(rest) > 1 and rest[1] is not None):
            raise TypeError("score with sample_weight takes no dask collection")
        missing = kw.get("missing")
        labels = lazy_map(model, "predict", X, missing=missing) if missing is not None else \
            lazy_map(model, "predict", X)
        return float((labels == y).mean().compute())
    rest = rest[1:] if rest else rest     # y: ignored by the density models
    kw.pop("y", None)
    bound = lazy_map(model, "score_samples", X, *rest, **kw)
    if bound.shape[0] == 0:
        raise ValueError("X has no patterns: the mean bound of no pattern is undefined")
    return float(bound.mean().compute())


# ------------------------------------------------------------------ sequences (ContextHMM)
def _sequence_blocks(lengths, row_chunks):
    """Block boundaries at sequence ends, each the first sequence end at or after one of the
    array's own chunk boundaries."""
    ends = np.cumsum(lengths)
    bounds = []
    for c in np.cumsum(row_chunks)[:-1]:
        k = int(np.searchsorted(ends, c))
        if k < len(ends) and (not bounds or ends[k] > bounds[-1]) and ends[k] < ends[-1]:
            bounds.append(int(ends[k]))
    edges = [0] + bounds + [int(ends[-1])]
    return tuple(np.diff(edges).tolist()), edges


def _hmm_block(block, *, model, verb, lengths_by_block, kwargs, block_id=None):
    lengths = lengths_by_block[block_id[0]]
    out = getattr(model, verb)(np.asarray(block), lengths, **kwargs)
    return out


def _hmm_part(block, lengths, model, name, kwargs):
    return getattr(model, name)(np.asarray(block), lengths, **kwargs)


def _sequences(model, name, args, kwargs):
    dask, da = _dask()
    X, rest, kw = _split_X(args, kwargs)
    lengths = rest.pop(0) if rest else kw.pop("lengths", None)
    if rest:
        raise TypeError(f"ContextHMM.{name} with a dask collection: pass the arguments after "
                        "lengths by keyword")
    what = f"ContextHMM.{name}"
    if type(X).__module__.startswith("dask.bag"):
        if lengths is not None:
            raise ValueError("lengths must be None when X is a dask bag of sequences")
        if name == "fit":
            raise TypeError("ContextHMM.fit takes a 2-D dask array with lengths, not a bag")
        node = _model_node(model)
        return X.map(lambda seq, m: getattr(m, name)(np.asarray(seq), **kw), node)
    if isinstance(X, (list, tuple)):
        if lengths is not None:
            raise ValueError("lengths must be None when X is a list of delayed sequences")
        if name == "fit":
            X = _stack_sequences(X)
            return _fit_sequences(model, X[0], X[1])
        node = _model_node(model)
        call = dask.delayed(_hmm_part, pure=True)
        return [call(seq, None, node, name, kw) for seq in X]
    X = _rows_array(X, what)
    N = X.shape[0]
    if lengths is None:
        lengths = np.array([N])
    lengths = np.asarray(lengths)
    if lengths.ndim != 1 or lengths.dtype.kind not in "iu" or np.any(lengths < 1) or lengths.sum() != N:
        raise ValueError(f"lengths must be positive integers summing to the rows of X ({N})")
    if name == "fit":
        return _fit_sequences(model, X, lengths, **kw)
    row_chunks, edges = _sequence_blocks(lengths, X.chunks[0])
    X = X.rechunk((row_chunks, -1))
    ends = np.cumsum(lengths)
    starts = np.searchsorted(ends, edges[:-1], side="right")
    stops = np.searchsorted(ends, edges[1:], side="right")
    by_block = [lengths[a:b] for a, b in zip(starts, stops)]
    seq_counts = tuple(int(b - a) for a, b in zip(starts, stops))
    node = _model_node(model)
    D = X.shape[1]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        template = getattr(model, name)(np.zeros((3, D)), [3], **kw)
    if name in ("predict", "predict_proba"):
        tmpl = np.asarray(template)
        return da.map_blocks(_hmm_block, X, chunks=(row_chunks,) + tmpl.shape[1:],
                             drop_axis=None if tmpl.ndim == 2 else 1, dtype=tmpl.dtype,
                             meta=np.empty((0,) * tmpl.ndim, tmpl.dtype), model=node, verb=name,
                             lengths_by_block=by_block, kwargs=kw)
    blocks = X.to_delayed().ravel()
    call = dask.delayed(_hmm_part, pure=True)
    parts = [call(b, L, node, name, kw) for b, L in zip(blocks, by_block)]
    if name == "score":
        return float(sum(dask.compute(*parts)))
    if name in ("score_samples", "decode"):
        first = [dask.delayed(lambda r: r[0], pure=True)(p) for p in parts]
        total = da.from_delayed(dask.delayed(sum, pure=True)(first), shape=(), dtype=np.float64)
        arr = np.asarray(template[1])
        second = da.concatenate([
            da.from_delayed(dask.delayed(lambda r: np.asarray(r[1]), pure=True)(p),
                            shape=(int(m),) + arr.shape[1:], dtype=arr.dtype)
            for p, m in zip(parts, row_chunks)], axis=0)
        return total, second
    if name == "infer":
        return _lazy_result(template, parts, [seq_counts, row_chunks], 1, 3)
    raise TypeError(f"{what} takes no dask collection")


def _stack_sequences(seqs):
    """A list of delayed (T_i, D) sequences as one dask array plus lengths (their lengths are
    computed; the data stay where they are)."""
    dask, da = _dask()
    shapes = dask.compute(*[dask.delayed(np.shape, pure=True)(s) for s in seqs])
    arrays = [da.from_delayed(s, shape=sh, dtype=np.float64) for s, sh in zip(seqs, shapes)]
    return da.concatenate(arrays, axis=0), np.array([sh[0] for sh in shapes])


# ------------------------------------------------------------------ data-parallel training
class Partitions:
    """The row blocks of a dask array, as a family's data-parallel fit sees them.

    This is the whole of dask that a family's ``_dask_fit`` hook meets: it never imports
    dask (nor this module) and receives one of these.  The array is persisted (each block
    stays on a worker, the source is read once) the first time its blocks are used;
    per-block state (warm starts) is handed back to the caller and passed in again, and
    lives on the workers as persisted values.

    Attributes
    ----------
    shape : tuple of int
        ``(n_rows, n_features)`` of the whole array.
    sizes : ndarray of intp
        Rows of each block.
    offsets : ndarray of intp
        First row of each block, then the number of rows (``n_blocks + 1`` entries).
    lengths : list of ndarray or None
        For sequence data, the lengths of the whole sequences each block holds.
    """

    def __init__(self, X, lengths=None):
        self._X = X
        self._persisted = None
        self.shape = tuple(int(s) for s in X.shape)
        self.sizes = np.array(X.chunks[0], dtype=np.intp)
        self.offsets = np.concatenate([[0], np.cumsum(self.sizes)]).astype(np.intp)
        self.lengths = lengths

    def _blocks(self):
        if self._persisted is None:
            X = self._X.persist()
            self._persisted = (X, list(X.to_delayed().ravel()))
        return self._persisted

    def step(self, func, shared, extra=None, states=None):
        """Run ``func(block, state, shared, extra[k])`` on every block ``k`` where it runs.

        Parameters
        ----------
        func : callable
            A module-level function or static method (it is shipped to the workers); it
            returns ``(small, new_state)``: ``small`` comes back to the client, ``new_state``
            stays on the worker.
        shared : object
            The same for every block (the current parameters), sent once.
        extra : list, optional
            One value per block; ``False`` skips the block (its state is kept).
        states : list, optional
            One state per block (None: every state None), as returned by an earlier step.

        Returns
        -------
        outs : list of (int, object)
            ``(k, small)`` for each block that ran, in block order (computed).
        states : list
            The new per-block states (lazy values held on the workers).
        """
        dask, _ = _dask()
        _, blocks = self._blocks()
        states = [None] * len(blocks) if states is None else list(states)
        node = dask.delayed(shared, name=f"mfengine-step-{uuid.uuid4().hex}")
        call = dask.delayed(func, nout=2, pure=True)
        which, smalls, new = [], [], []
        for k, b in enumerate(blocks):
            e = None if extra is None else extra[k]
            if e is False:
                continue
            small, state = call(b, states[k], node, e)
            which.append(k)
            smalls.append(small)
            new.append(state)
        smalls, new = dask.persist(smalls, new)
        out = dask.compute(*smalls)
        for k, s in zip(which, new):
            states[k] = s
        return list(zip(which, out)), states

    def map(self, func, *args):
        """``[func(block, *args) for each block]``, run where the blocks are, computed."""
        dask, _ = _dask()
        _, blocks = self._blocks()
        return list(dask.compute(*[dask.delayed(func, pure=True)(b, *args) for b in blocks]))

    def gather(self):
        """The whole array in the client's memory, as float64."""
        X, _ = self._blocks()
        return np.asarray(X.compute(), dtype=np.float64)

    def mean_and_std(self):
        """The column means and the standard deviation of all entries (as float64)."""
        dask, _ = _dask()
        X, _ = self._blocks()
        Xf = X.astype(np.float64)
        return dask.compute(Xf.mean(axis=0), Xf.std())

    def take(self, rows):
        """The rows ``rows`` (global indices) as a lazy dask array chunked by rows: the data
        of a sub-model's own data-parallel fit (a classifier's net of one class)."""
        X = self._X if self._persisted is None else self._persisted[0]
        return _rows_array(X[rows], "the rows taken")

    def split(self, rows):
        """Per block, the rows of ``rows`` (global indices, e.g. one mini-batch) that it
        holds, as block-local indices in the order given, or False where it holds none: a
        ``step``'s ``extra``."""
        offsets = self.offsets
        owner = np.searchsorted(offsets, rows, side="right") - 1
        return [(rows[owner == k] - offsets[k]) if np.any(owner == k) else False
                for k in range(len(offsets) - 1)]


def fit(model, X, y=None, missing=None, **kwargs):
    """Train ``model`` data-parallel on a dask array (see the module docstring).

    The family does the training: its ``_dask_fit(parts)`` hook (``_dask_fit(parts, y)`` for
    a classifier) receives a :class:`Partitions` over ``X``'s row blocks and drives its own
    loop, asking the partitions for summed statistics or gradients.

    Parameters
    ----------
    model : SigmoidBeliefNet, BeliefNet, NLGBN, ContextHMM or GenerativeClassifier
        The model; its hyperparameters say how to train, as for ``fit``.
    X : dask.array.Array of shape (n_patterns, n_features)
        Training data chunked by rows.
    y : None or array-like
        Ignored, except by a classifier (its labels).
    missing : None
        Missing entries are not supported by the data-parallel fit.
    **kwargs
        ``lengths`` for ContextHMM.

    Returns
    -------
    model
        The fitted model (``history_``, ``n_iter_`` set as by ``fit``).

    Raises
    ------
    TypeError
        For a family without a data-parallel fit (the mixtures, BeliefNetBatch).
    """
    name = type(model).__name__
    if missing is not None:
        raise ValueError(f"{name}.fit on a dask array does not support missing; fit on an "
                         "in-memory array for missing entries")
    if "lengths" in inspect.signature(type(model).fit).parameters:
        return _sequences(model, "fit", (X,), kwargs)
    X = _rows_array(X, f"{name}.fit")
    if _is_dask_array(y):      # labels, one per pattern: read on the client
        y = y.compute()
    hook = getattr(model, "_dask_fit", None)
    if hook is not None:
        return hook(Partitions(X), y)
    raise TypeError(f"{name}.fit has no data-parallel form: fit it on an in-memory array "
                    "(for example X.compute())")


def _fit_sequences(model, X, lengths, **kwargs):
    """A sequence model's data-parallel fit: blocks moved to sequence ends, then its hook."""
    if kwargs:
        raise TypeError(f"{type(model).__name__}.fit got unexpected arguments {sorted(kwargs)}")
    row_chunks, edges = _sequence_blocks(lengths, X.chunks[0])
    X = X.rechunk((row_chunks, -1))
    ends = np.cumsum(lengths)
    starts = np.searchsorted(ends, edges[:-1], side="right")
    stops = np.searchsorted(ends, edges[1:], side="right")
    by_block = [np.asarray(lengths[a:b]) for a, b in zip(starts, stops)]
    return model._dask_fit(Partitions(X, lengths=by_block))
