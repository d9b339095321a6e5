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
    pattern): the data reach the client one block at a time.

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
    partition); tests/test_dask.py checks 1e-9.  One round trip per mini-batch: the paper's
    on-line rule (``batch_size=1``) is inherently sequential and runs, correctly but slowly,
    with one round trip per pattern; use a mini-batch schedule on a cluster.
    * ``GenerativeClassifier``: the net of each class as SigmoidBeliefNet above, on that
      class's rows (the labels are read on the client), classes one after another.

    ``missing``, ``callback``, ``BeliefNetBatch``, ``MixtureClassifier`` and
    ``BernoulliMixture`` have no data-parallel fit (a TypeError or ValueError says so).
"""
import copy
import inspect
import numbers
import uuid
import warnings

import numpy as np

from mfengine._base import InferenceResult, user_stacklevel, warn_unconverged

__all__ = ["route", "fit", "lazy_map"]


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
    if name == "partial_fit":
        return _partial_fit_blocks(model, args, kwargs)
    if name == "score":
        return _score(model, args, kwargs)
    if name == "decode":
        raise TypeError(f"{type(model).__name__}.decode takes no dask collection")
    X, rest, kw = _split_X(args, kwargs)
    return lazy_map(model, name, X, *rest, **kw)


def _partial_fit_blocks(model, args, kwargs):
    """``partial_fit`` on a dask array: one pass over its row blocks in order, each block
    computed and handed to the model's own ``partial_fit`` in turn (dask-ml's Incremental
    pattern: the data stream through the client one block at a time)."""
    from mfengine._base import _partial_fit_pass

    X, rest, kw = _split_X(args, kwargs)
    X = _rows_array(X, f"{type(model).__name__}.partial_fit")
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
    return _partial_fit_pass(model, (X,) + tuple(rest), kw, chunk_size=chunk, reader=read)


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
    if not isinstance(template, InferenceResult):
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
            return _fit_hmm(model, X[0], X[1])
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
        return _fit_hmm(model, X, lengths, **kw)
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
class _Partitions:
    """The row blocks of a persisted dask array and one state object per block.

    ``step(func, shared, extra)`` runs ``func(block, state, shared, extra[k])`` on every
    block k (``extra[k] is False`` skips it), keeps each new state on its worker (persisted)
    and returns the small first outputs, computed."""

    def __init__(self, X):
        dask, _ = _dask()
        self.X = X.persist()
        self.blocks = list(self.X.to_delayed().ravel())
        self.sizes = np.array(self.X.chunks[0], dtype=np.intp)
        self.offsets = np.concatenate([[0], np.cumsum(self.sizes)]).astype(np.intp)
        self.states = [None] * len(self.blocks)

    def step(self, func, shared, extra=None):
        dask, _ = _dask()
        node = dask.delayed(shared, name=f"mfengine-step-{uuid.uuid4().hex}")
        call = dask.delayed(func, nout=2, pure=True)
        which, smalls, states = [], [], []
        for k, b in enumerate(self.blocks):
            e = None if extra is None else extra[k]
            if e is False:
                continue
            small, state = call(b, self.states[k], node, e)
            which.append(k)
            smalls.append(small)
            states.append(state)
        smalls, states = dask.persist(smalls, states)
        out = dask.compute(*smalls)
        new = list(self.states)
        for k, s in zip(which, states):
            new[k] = s
        return list(zip(which, out)), new


def fit(model, X, y=None, missing=None, **kwargs):
    """Train ``model`` data-parallel on a dask array (see the module docstring).

    Parameters
    ----------
    model : SigmoidBeliefNet, BeliefNet, NLGBN or ContextHMM
        The model; its hyperparameters say how to train, as for ``fit``.
    X : dask.array.Array of shape (n_patterns, n_features)
        Training data chunked by rows.
    y : None
        Ignored.
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
        For a family without a data-parallel fit (the classifiers, BeliefNetBatch).
    """
    from mfengine.sbn.dag import BeliefNet
    from mfengine.sbn.layered import SigmoidBeliefNet

    name = type(model).__name__
    if missing is not None:
        raise ValueError(f"{name}.fit on a dask array does not support missing; fit on an "
                         "in-memory array for missing entries")
    if type(model).__module__.startswith("mfengine.hmm"):
        return _sequences(model, "fit", (X,), kwargs)
    X = _rows_array(X, f"{name}.fit")
    if isinstance(model, SigmoidBeliefNet):
        return _fit_sbn(model, X)
    if isinstance(model, BeliefNet):
        return _fit_dag(model, X)
    if type(model).__module__.startswith("mfengine.nlgbn"):
        return _fit_nlgbn(model, X)
    if type(model).__name__ == "GenerativeClassifier":
        return _fit_classifier(model, X, y)
    raise TypeError(f"{name}.fit has no data-parallel form: fit it on an in-memory array "
                    "(for example X.compute())")


def _check_rows(block, net):
    """Validate a block on its worker; returns its column sums and row count."""
    V, _ = net._check_data(np.asarray(block))
    return V.sum(axis=0), V.shape[0]


def _sbn_step(block, state, shared, local):
    """One partition's part of one mini-batch: solve its patterns ``local`` (block rows) and
    sum their gradients at the solutions."""
    net, itol, imax, warm = shared
    V, _ = net._check_data(np.asarray(block)[local])
    H = net.n_hidden
    init = None if state is None else state[local]
    r = net._infer(V, None, method="gaussian", tol=itol, max_iter=imax, init_mu=init,
                   progress=False)
    gW, gb = net._gradient_from_solution(V, None, r.mu, r.xi)
    if warm:
        if state is None:
            state = np.full((np.shape(block)[0], H), 0.5)
        else:
            state = state.copy()
        state[local] = np.concatenate(r.mu[:-1], axis=1)
    return (gW, gb, float(r.bound.sum()), r.converged), state


def _batch_plan(order, offsets, batch_size):
    """Per mini-batch, per partition: the batch's rows held by the partition (block-local
    indices, in the order of the permutation), or False."""
    n = order.shape[0]
    owner = np.searchsorted(offsets, order, side="right") - 1
    plans = []
    for a in range(0, n, batch_size):
        idx, own = order[a:a + batch_size], owner[a:a + batch_size]
        plans.append([(idx[own == k] - offsets[k]) if np.any(own == k) else False
                      for k in range(len(offsets) - 1)])
    return plans


def _fit_sbn(net, X):
    """SigmoidBeliefNet.fit, data-parallel: the same steps as the compiled epoch loop."""
    from mfengine._progress import progress_bar
    from mfengine._validation import check_random_state
    from mfengine.sbn._hyper import check_callback, check_flag, check_int, check_tol, schedule, stop
    from mfengine.sbn._solve import DAG_METHODS
    from mfengine.sbn.layered import METHODS, PAPER_RATES

    dask, _ = _dask()
    method = net.method
    if not isinstance(method, str) or method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    warm = check_flag(net.warm_start, "warm_start")
    if check_callback(net.callback) is not None:
        raise ValueError("SigmoidBeliefNet.fit on a dask array does not take a callback")
    if not warm or "weights_" not in vars(net):
        net._init_params(X.shape[1])
    net._check_params()
    if X.shape[1] != net.biases_[-1].shape[0]:
        raise ValueError(f"X must have {net.biases_[-1].shape[0]} columns (the visible units), "
                         f"got {X.shape[1]}")
    if X.shape[0] < 1:
        raise ValueError("X has no patterns: fit needs at least one")
    if method in DAG_METHODS:
        return _fit_sbn_dag(net, X)
    parts = _Partitions(X)
    sums = dask.compute(*[dask.delayed(_check_rows, pure=True)(b, net) for b in parts.blocks])
    n = int(sum(s[1] for s in sums))
    net.n_features_in_ = X.shape[1]
    rates = schedule(net.max_iter, net.learning_rate, PAPER_RATES)
    batch_size = check_int(net.batch_size, "batch_size", 1)
    batch_size = min(batch_size, max(n, 1))
    tol = check_tol(net.tol, "tol", allow_none=True)
    itol = check_tol(net.infer_tol, "infer_tol")
    imax = check_int(net.infer_max_iter, "infer_max_iter", 1)
    progress = check_flag(net.progress, "progress")
    rng = check_random_state(net.random_state)
    if check_flag(net.init_visible_biases, "init_visible_biases"):
        p = np.sum([s[0] for s in sums], axis=0) / n
        p = np.clip(p, 1.0 / (n + 2), 1.0 - 1.0 / (n + 2))
        net.biases_[-1] = np.log(p) - np.log1p(-p)
    history, converged = [], []
    n_batches = (n + batch_size - 1) // batch_size
    bar = progress_bar(total=len(rates) * n_batches, desc="fit (dask)", disable=not progress,
                       unit="batch")
    try:
        for lr in rates:
            if not warm:
                parts.states = [None] * len(parts.blocks)
            order = rng.permutation(n).astype(np.intp)
            total = 0.0
            for plan in _batch_plan(order, parts.offsets, batch_size):
                size = sum(len(p) for p in plan if p is not False)
                shared = (copy.deepcopy(net), itol, imax, warm)
                outs, parts.states = parts.step(_sbn_step, shared, plan)
                step = float(lr) / size
                gW = [sum(o[0][l] for _, o in outs) for l in range(len(net.weights_))]
                gb = [sum(o[1][l] for _, o in outs) for l in range(len(net.biases_))]
                for l, g in enumerate(gW):
                    net.weights_[l] += step * g
                for l, g in enumerate(gb):
                    net.biases_[l] += step * g
                total += sum(o[2] for _, o in outs)
                converged.extend(o[3] for _, o in outs)
                net._check_params()
                bar.update(1)
            history.append(total / n)
            bar.set_postfix(bound=f"{history[-1]:.3f}")
            if stop(history, tol):
                break
    finally:
        bar.close()
    return net._finish_fit(history, tol, len(rates))


def _fit_sbn_dag(net, X):
    """SigmoidBeliefNet.fit with a DAG method: train ``to_dag()`` data-parallel, copy back."""
    dag = net.to_dag()
    sizes = net._sizes()
    off = np.concatenate([[0], np.cumsum(sizes)])
    _fit_dag(dag, X)
    W, h = dag.W_, dag.h_
    net.weights_ = [np.ascontiguousarray(W[off[l + 1]:off[l + 2], off[l]:off[l + 1]])
                    for l in range(len(sizes) - 1)]
    net.biases_ = [h[off[l]:off[l + 1]].copy() for l in range(len(sizes))]
    net.history_, net.n_iter_ = dag.history_, dag.n_iter_
    net.n_features_in_ = X.shape[1]
    return net


def _dag_step(block, state, shared, local):
    """One partition's part of one mini-batch of BeliefNet.fit (see mfengine.sbn.learning)."""
    from mfengine.sbn._solve import dag_items, solve_items
    from mfengine.sbn.learning import objective_gradient

    net, method, itol, imax = shared
    batch, w, clamp, _, _ = dag_items(net, np.asarray(block)[local])
    h = batch.h_
    m = clamp.shape[0]
    nb = np.shape(block)[0]
    if state is None:
        mu_state, xi_state = np.full((nb, net.n_units), 0.5), None
    else:
        mu_state, xi_state = state[0].copy(), None if state[1] is None else state[1].copy()
    net_of = np.zeros(m, dtype=np.intp)
    init_xi = None if xi_state is None else xi_state[local]
    bound, mu, xi, _, conv = solve_items(batch, w, clamp, net_of, method, itol, imax, 1,
                                         mu_state[local], None, init_xi)
    gw, gh = objective_gradient(batch, w, h, clamp, net_of, method, mu, xi)
    mu_state[local] = mu
    if xi is not None:
        if xi_state is None:
            xi_state = np.empty((nb, xi.shape[1]))
            if net.activation == "noisy_or":
                s = batch._structure
                k = np.diff(s.par_ptr)
                xi_state[:] = np.repeat(1.0 / np.maximum(k, 1), k)
            else:
                xi_state[:] = 0.5
        xi_state[local] = xi
    return (gw.sum(axis=0), gh.sum(axis=0), float(bound.sum()), np.asarray(conv, dtype=bool)), \
        (mu_state, xi_state)


def _fit_dag(net, X):
    """BeliefNet.fit (mfengine.sbn.learning.fit_dag), data-parallel."""
    from mfengine._progress import progress_bar
    from mfengine._validation import check_random_state
    from mfengine.sbn._hyper import check_callback, check_flag, check_int, check_tol, schedule, stop
    from mfengine.sbn._solve import DAG_METHODS, check_solve_args
    from mfengine.sbn.learning import MIN_NOISY_OR_BIAS

    dask, _ = _dask()
    method = net.method
    if method not in DAG_METHODS:
        raise ValueError(f"method must be one of {DAG_METHODS}, got {method!r}")
    if getattr(net, "_batch", False):
        raise TypeError("BeliefNetBatch.fit has no data-parallel form")
    _, itol, imax, _ = check_solve_args(method, net.infer_tol, net.infer_max_iter, None,
                                        names=("infer_tol", "infer_max_iter"))
    rates = schedule(net.max_iter, net.learning_rate, 0.1)
    batch_size = check_int(net.batch_size, "batch_size", 1)
    tol = check_tol(net.tol, "tol", allow_none=True)
    progress = check_flag(net.progress, "progress")
    if check_callback(net.callback) is not None:
        raise ValueError("BeliefNet.fit on a dask array does not take a callback")
    if not check_flag(net.warm_start, "warm_start"):
        for k in ("W_", "h_", "visible_"):
            vars(net).pop(k, None)
    net._params()
    parts = _Partitions(X)
    n = int(parts.offsets[-1])
    if n == 0:
        raise ValueError("X has no patterns: fit needs at least one")
    dask.compute(*[dask.delayed(_check_rows, pure=True)(b, net) for b in parts.blocks])
    rng = check_random_state(net.random_state)
    noisy = net.activation == "noisy_or"
    w = net._packed_w().copy()
    h = net.h_[None].copy()
    if noisy and method == "sjj":
        np.maximum(h, MIN_NOISY_OR_BIAS, out=h)
    history, converged = [], []
    n_batches = (n + batch_size - 1) // batch_size
    bar = progress_bar(total=len(rates) * n_batches, desc=f"fit ({method}, dask)",
                       disable=not progress, unit="batch")
    try:
        for epoch, lr in enumerate(rates):
            order = rng.permutation(n)
            total = 0.0
            for plan in _batch_plan(order, parts.offsets, batch_size):
                size = sum(len(p) for p in plan if p is not False)
                net._set_learned(w[0].copy(), h[0].copy())
                shared = (copy.deepcopy(net), method, itol, imax)
                outs, parts.states = parts.step(_dag_step, shared, plan)
                step = lr / size
                w[0] += step * sum(o[0] for _, o in outs)
                h[0] += step * sum(o[1] for _, o in outs)
                if noisy:
                    np.maximum(w, 0.0, out=w)
                    np.maximum(h, MIN_NOISY_OR_BIAS, out=h)
                total += sum(o[2] for _, o in outs)
                converged.extend(o[3] for _, o in outs)
                bar.update(1)
            history.append(total / n)
            if stop(history, tol):
                break
    finally:
        bar.close()
    net._set_learned(w[0], h[0].copy())
    net._params()
    warn_unconverged(np.concatenate(converged), f"BeliefNet.fit(method={method!r}): the "
                     "mean-field solves", "raise infer_max_iter or loosen infer_tol")
    net.history_ = np.asarray(history, dtype=np.float64)
    net.n_iter_ = len(history)
    net.n_features_in_ = int(np.count_nonzero(net.visible_))
    if tol is not None and not stop(history, tol):
        warn_unconverged([False], "BeliefNet.fit",
                         f"the mean objective still changed by more than tol={tol} in the last "
                         f"of {len(rates)} epochs; raise max_iter or loosen tol")
    return net


def _nlgbn_step(block, state, shared, _):
    """One partition's E-step of NLGBN's EM, warm-started from its previous posteriors."""
    model, net, solve = shared
    Xb, miss = model._check_data(np.asarray(block), None, net.sizes[-1])  # NaN = missing
    if state is None:
        mu, lv = net.prior_state(Xb.shape[0])
    else:
        mu, lv = state[0].copy(), state[1].copy()
    bound, _, conv, stats = model._solve(Xb, mu, lv, want_stats=True, flat=net.flat(),
                                         miss=miss, **solve)
    return (float(bound.sum()), stats.sum(axis=0), conv), (mu, lv)


def _fit_nlgbn(model, X):
    """NLGBN.fit (variational EM), data-parallel: E-steps on the partitions, the M-step on
    the client from the summed sufficient statistics."""
    from mfengine._base import ConvergenceWarning
    from mfengine._progress import progress_bar
    from mfengine.nlgbn.model import _HINT, MIN_HIDDEN_VARIANCE

    p = model._check_fit_params()
    drawn = not (p["warm_start"] and model._has_params())
    if drawn:
        model._draw_params(n_features=X.shape[1])
    net = model._network()
    if X.shape[1] != net.sizes[-1]:
        raise ValueError(f"X must have {net.sizes[-1]} columns (one per visible unit), got "
                         f"{X.shape[1]}")
    if X.shape[0] == 0:
        raise ValueError("X must hold at least one pattern to fit")
    floors = [MIN_HIDDEN_VARIANCE] * (len(net.sizes) - 1) + [p["min_variance"]]
    if any(np.any(v < f) for v, f in zip(net.variances, floors)):
        model.variances_ = [np.maximum(v, f) for v, f in zip(net.variances, floors)]
        net = model._network()
    model.n_features_in_ = X.shape[1]
    parts = _Partitions(X)
    n = int(parts.offsets[-1])
    solve = dict(tol=p["infer_tol"], max_sweeps=p["infer_max_iter"], n_threads=p["n_threads"])

    def estep(net):
        outs, states = parts.step(_nlgbn_step, (copy.deepcopy(model), net, solve))
        outs = [o for _, o in outs]
        bound = sum(o[0] for o in outs)
        stats = np.sum([o[1] for o in outs], axis=0)
        conv = np.concatenate([o[2] for o in outs])
        return bound, stats, conv, states

    total, stats, conv, parts.states = estep(net)
    history = [total / n]
    met_tol = False
    with progress_bar(total=p["max_iter"], desc="NLGBN EM (dask)", disable=not p["progress"]) as bar:
        for it in range(p["max_iter"]):
            saved = (model.weights_, model.biases_, model.variances_, parts.states, conv)
            problem = None
            try:
                model._m_step(stats / n, p["min_variance"], net)
                net = model._network()
                total, stats, conv, parts.states = estep(net)
                new = total / n
                if not new >= history[-1]:
                    drop = history[-1] - new
                    problem = (f"the bound fell by {drop:.3g} nats per pattern"
                               if drop > 1e-9 * max(1.0, abs(history[-1])) else "")
            except ValueError as exc:
                problem = f"a number was not finite ({exc})"
            if problem is not None:
                model.weights_, model.biases_, model.variances_, parts.states, conv = saved
                if problem:
                    warnings.warn(f"NLGBN.fit: EM iteration {it + 1} was undone because "
                                  f"{problem}; the model keeps the parameters of iteration {it}",
                                  ConvergenceWarning, stacklevel=user_stacklevel())
                met_tol = not problem
                break
            gain = new - history[-1]
            history.append(new)
            bar.update(1)
            if p["tol"] is not None and gain <= p["tol"]:
                met_tol = True
                break
    model.history_ = np.array(history)
    model.n_iter_ = len(history) - 1
    if p["tol"] is not None and not met_tol and p["max_iter"] > 0:
        warnings.warn(f"NLGBN.fit: the bound still rose by more than tol={p['tol']:g} nats per "
                      f"pattern after max_iter={p['max_iter']} EM iterations; raise max_iter or "
                      "tol", ConvergenceWarning, stacklevel=user_stacklevel())
    warn_unconverged(conv, "NLGBN.fit (the last E-step)", _HINT)
    return model


def _hmm_step(block, state, shared, lengths):
    """One partition's E-step of ContextHMM.fit (whole sequences): its summed statistics;
    the chain's log-potentials stay on the worker as the next warm start."""
    model, P, shift, first_order, use_init = shared
    Xc, offsets = model._check_X(np.asarray(block), lengths, n_features=shift.shape[0])
    Xs = np.ascontiguousarray(Xc - shift)
    r = model._solve(Xs, offsets, "structured", P, want_stats=True, first_order=first_order,
                     init=state if use_init else None)
    small = {"bound": float(r["bound"].sum()), "converged": r["converged"],
             "gamma": r["gamma"][offsets[:-1]].sum(0)}
    for key in ("xi", "H", "g"):
        if r.get(key) is not None:
            small[key] = r[key].sum(0)
    return small, r.get("logpot")


def _hmm_stats(outs):
    """The partitions' sums in the layout ContextHMM's M-steps read (one row per partition,
    the first step of each 'sequence' being its summed first-step marginals)."""
    outs = [o for _, o in outs]
    r = {"bound": np.array([o["bound"] for o in outs]),
         "converged": np.concatenate([o["converged"] for o in outs]),
         "gamma": np.array([o["gamma"] for o in outs])}
    for key in ("xi", "H", "g"):
        if key in outs[0]:
            r[key] = np.array([o[key] for o in outs])
    return r, np.arange(len(outs) + 1)


def _fit_hmm(model, X, lengths, **kwargs):
    """ContextHMM.fit (Baum-Welch, then mean-field EM), data-parallel over whole sequences:
    each partition returns its summed statistics, the client runs the M-steps."""
    from mfengine._base import ConvergenceWarning
    from mfengine._progress import progress_bar
    from mfengine._validation import check_random_state
    from mfengine.hmm.model import _UNCONVERGED_HINT

    dask, da = _dask()
    if kwargs:
        raise TypeError(f"ContextHMM.fit got unexpected arguments {sorted(kwargs)}")
    model._check_hyper(fitting=True)
    D = int(model.n_features) if model.n_features is not None else X.shape[1]
    if X.shape[1] != D:
        raise ValueError(f"X has {X.shape[1]} features, but n_features={D}")
    N = X.shape[0]
    n = int(model.n_states)
    if N < n:
        raise ValueError(f"X has {N} rows, fewer than n_states={n}")
    row_chunks, edges = _sequence_blocks(lengths, X.chunks[0])
    X = X.rechunk((row_chunks, -1))
    ends = np.cumsum(lengths)
    starts = np.searchsorted(ends, edges[:-1], side="right")
    stops = np.searchsorted(ends, edges[1:], side="right")
    by_block = [np.asarray(lengths[a:b]) for a, b in zip(starts, stops)]
    parts = _Partitions(X)
    rng = check_random_state(model.random_state)
    warm = bool(model.warm_start) and getattr(model, "means_", None) is not None
    if warm:
        P, init_right, init_left = model._params(), False, False
        if P[2].shape[1] != D:
            raise ValueError(f"means_ has {P[2].shape[1]} columns but X has {D}")
    else:
        needs_kmeans = "m" in model.init_params or getattr(model, "means_", None) is None
        # k-means of the initial means (scikit-learn's) reads the data on the client; set
        # means_ and leave "m" out of init_params to keep every pass on the workers
        Xc_init = np.asarray(parts.X.compute(), dtype=np.float64) if needs_kmeans else None
        P, init_right, init_left = model._init(Xc_init, D, rng)
        del Xc_init
    Xf = parts.X.astype(np.float64)
    shift, std = dask.compute(Xf.mean(axis=0), Xf.std())
    shift = np.asarray(shift, dtype=np.float64)
    U_start = P[2]
    P = (P[0], P[1], np.ascontiguousarray(P[2] - shift), P[3], P[4])
    U_start_shifted = P[2]
    tol = None if model.tol is None else float(model.tol) * N
    history, bw_n_iter, converged, last_r = [], 0, False, None
    n_bw = 0 if warm else int(model.bw_max_iter)
    n_mf = int(model.max_iter)
    tables = [k for k, code, present in ((0, "m", True), (1, "r", model._right),
                                         (2, "l", model._left))
              if code in model.params and present]
    shipped = copy.deepcopy(model)

    def estep(P, first_order=False, init=None):
        parts.states = init if init is not None else [None] * len(parts.blocks)
        outs, states = parts.step(_hmm_step, (shipped, P, shift, first_order, init is not None),
                                  by_block)
        r, offsets = _hmm_stats(outs)
        r["logpot"] = states
        return r, offsets

    with progress_bar(total=n_bw + n_mf, desc="ContextHMM.fit (dask)",
                      disable=not model.progress) as bar:
        prev, saved = -np.inf, None
        for _ in range(n_bw):
            r, offs = estep(P, first_order=True)
            ll = float(r["bound"].sum())
            if saved is not None and not ll >= prev:
                P, converged = saved, True
                break
            last_r = r
            history.append(ll)
            bar.update(1)
            if tol is not None and ll - prev < tol:
                converged = True
                break
            prev, saved = ll, P
            sp, A = model._mstep_chain(P, r, offs)
            U = model._mstep_means(P, r, [0] if "m" in model.params else [])[0]
            P = (sp, A, U, P[3], P[4])
        bw_n_iter = len(history)
        if n_mf > 0:
            converged = False
            scale = float(model.context_init_scale) * float(std)
            V, W = P[3], P[4]
            if init_right:
                V = np.ascontiguousarray(scale * rng.standard_normal((n, D)))
            if init_left:
                W = np.ascontiguousarray(scale * rng.standard_normal((n, D)))
            P = (P[0], P[1], P[2], V, W)
            prev, logpot, saved = -np.inf, None, None
            for it in range(n_mf + 1):
                r, offs = estep(P, init=logpot)
                b = float(r["bound"].sum())
                if saved is not None and not b >= prev:
                    P_old = (saved[0], saved[1], P[2], P[3], P[4])
                    r, offs = estep(P_old, init=logpot)
                    b = float(r["bound"].sum())
                    if not b >= prev:
                        P, converged = saved, True
                        break
                    P = P_old
                last_r = r
                if it == n_mf:
                    break
                logpot = r["logpot"]
                history.append(b)
                bar.update(1)
                if tol is not None and b - prev < tol:
                    converged = True
                    break
                prev, saved = b, P
                sp, A = model._mstep_chain(P, r, offs)
                P = (sp, A) + model._mstep_means(P, r, tables)
    model.startprob_, model.transmat_ = P[0], P[1]
    model.means_ = U_start if P[2] is U_start_shifted else P[2] + shift
    model.right_means_, model.left_means_ = P[3], P[4]
    model.history_ = np.asarray(history, dtype=np.float64)
    model.n_iter_ = len(history)
    model.bw_n_iter_ = bw_n_iter
    model.converged_ = bool(converged)
    model.n_features_in_ = D
    if model.tol is not None and not converged and model.n_iter_ > 0:
        phase = "mean-field EM" if n_mf > 0 else "Baum-Welch"
        warnings.warn(f"ContextHMM.fit: {phase} did not meet tol={model.tol} within its "
                      f"{n_mf if n_mf > 0 else n_bw} iterations", ConvergenceWarning, stacklevel=user_stacklevel())
    if last_r is not None:
        warn_unconverged(last_r["converged"], "ContextHMM.fit (last E-step)", _UNCONVERGED_HINT)
    return model


def _fit_classifier(model, X, y):
    """GenerativeClassifier.fit, data-parallel: the net of each class is trained by
    ``_fit_sbn`` on that class's rows (a lazy selection of X's blocks; the labels, one per
    pattern, are read on the client).  Classes are trained one after another, each over the
    whole cluster; the nets equal those of the in-memory fit (same per-class seeds)."""
    from mfengine.baselines import _check_binary_values, _check_int, _check_real, _check_targets
    from mfengine.baselines import _check_flag
    from mfengine._validation import check_random_state
    from mfengine.sbn import SigmoidBeliefNet

    dask, da = _dask()
    hidden = model._hidden_sizes()
    rates = model._rates()
    _check_int(model.batch_size, "batch_size", 1)
    _check_real(model.weight_scale, "weight_scale", 0.0)
    _check_real(model.tol, "tol", 0.0, include_min=False, allow_none=True)
    _check_real(model.infer_tol, "infer_tol", 0.0, include_min=False)
    _check_int(model.infer_max_iter, "infer_max_iter", 1)
    warm = _check_flag(model.warm_start, "warm_start") and hasattr(model, "net_weights_")
    if y is None:
        raise ValueError("y must hold one class label per pattern of X, got None")
    y = np.asarray(y.compute() if _is_dask_array(y) else y)
    if y.ndim != 1 or y.shape[0] != X.shape[0]:
        raise ValueError(f"y must be a 1-D array of {X.shape[0]} labels (one per pattern of X), "
                         f"got shape {y.shape}")
    classes, y_idx, counts = _check_targets(y)
    dask.compute(*[dask.delayed(lambda b: _check_binary_values(
        np.asarray(b, dtype=np.float64))[0].shape, pure=True)(b) for b in X.to_delayed().ravel()])
    if warm and (model.n_features_in_ != X.shape[1]
                 or not np.array_equal(np.asarray(model.classes_), classes)):
        raise ValueError("warm_start=True continues nets of other classes or pixels than X, y "
                         "hold; set warm_start=False to train afresh")
    n_classes = classes.shape[0]
    rngs = [np.random.default_rng(s)
            for s in np.random.SeedSequence(
                check_random_state(model.random_state).integers(0, 2**63 - 1)).spawn(n_classes)]
    sizes = hidden + (X.shape[1],)
    fits = []
    for c in range(n_classes):
        params = dict(learning_rate=rates, max_iter=len(rates), batch_size=model.batch_size,
                      tol=model.tol, infer_tol=model.infer_tol,
                      infer_max_iter=model.infer_max_iter, random_state=rngs[c],
                      progress=False, callback=None)
        if warm:
            net = model._net(c, warm_start=True, **params)
        else:
            net = SigmoidBeliefNet(list(sizes), weight_scale=model.weight_scale, **params)
        Xc = X[np.flatnonzero(y_idx == c)]
        try:
            _fit_sbn(net, _rows_array(Xc, "GenerativeClassifier.fit"))
        except (FloatingPointError, ValueError) as exc:
            raise ValueError(f"training the net of class {classes[c]!r} failed: {exc}") from exc
        fits.append((net.weights_, net.biases_, np.asarray(net.history_, dtype=np.float64)))
    history = [f[2] for f in fits]
    bad = np.array([not np.all(np.isfinite(h)) for h in history])
    if np.any(bad):
        raise ValueError(f"training the nets of classes {classes[bad].tolist()[:10]} gave a "
                         "non-finite mean-field bound: use a smaller weight_scale or "
                         "learning_rate")
    model.classes_ = classes
    model.net_weights_ = [f[0] for f in fits]
    model.net_biases_ = [f[1] for f in fits]
    model.class_log_prior_ = np.log(counts / counts.sum())
    model.history_ = history
    model.n_iter_ = np.array([h.shape[0] for h in history])
    model.n_features_in_ = X.shape[1]
    return model
