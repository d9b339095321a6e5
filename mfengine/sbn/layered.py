"""Layered sigmoid belief networks (Saul & Jordan): the model, exact enumeration and learning.

Layers are listed top first; the last layer is visible.  Unit i of layer l+1 fires with
probability ``sigmoid(biases[l+1][i] + weights[l][i] @ S^l)``; top-layer units with
``sigmoid(biases[0])``.
"""
import copy
import numbers

import numpy as np
from scipy.special import logsumexp

from mfengine._base import warn_unconverged
from mfengine._validation import (
    as_array,
    BOOLEAN,
    CALLABLE,
    LAYER_SIZES,
    LEARNING_RATE,
    MAX_ITER_LIMIT,
    N_THREADS,
    POSITIVE_TOL,
    RANDOM_STATE,
    Interval,
    Options,
    as_float_matrix,
    check_binary,
    check_missing,
    check_random_state,
    check_sizes,
    sizes_from_biases,
)
from mfengine._validation import (check_callback, check_flag, check_int, check_real, check_tol,
                                  check_value)
from mfengine.sbn._learn import fit_items, schedule, stop
from mfengine.sbn._problem import LayeredNet
from mfengine.sbn._result import BeliefNetResult
from mfengine.sbn._solve import (
    DAG_METHODS,
    METHODS,
    check_solve_args,
    inner_tol_for,
    report,
    run_dag,
    run_gaussian,
)
from mfengine.sbn._structure import DagStructure
from mfengine.sbn.model import BeliefNetModel

__all__ = ["SigmoidBeliefNet", "MAX_ENUMERATED_HIDDEN"]

#: Largest number of hidden units that ``exact_log_likelihood`` enumerates by default
#: (2**20 joint hidden states).
MAX_ENUMERATED_HIDDEN = 20

# The paper's schedule (Saul & Jordan, section 3): 0.02 for the first half of the epochs
# (four of eight), then 0.005.
PAPER_RATES = (0.02, 0.005)


def _log_sigmoid(x):
    return -np.logaddexp(0.0, -x)


def _entropy(p):
    with np.errstate(divide="ignore", invalid="ignore"):
        h = -p * np.log(p) - (1.0 - p) * np.log1p(-p)
    return np.where((p <= 0.0) | (p >= 1.0), 0.0, h)


class SigmoidBeliefNet(BeliefNetModel):
    """A layered sigmoid belief network, trained and queried by mean field.

    Parameters
    ----------
    sizes : sequence of int
        Units per layer, top layer first; the last entry is the number of visible units.
        At least two layers.
    weight_scale : float, default=1.0
        Initial weights are drawn from N(0, weight_scale**2 / fan_in); biases start at zero.
    method : {"gaussian", "sjj", "plefka11", "plefka12", "plefka22"}, default="gaussian"
        The mean-field objective of ``infer``, ``score_samples`` and ``fit``: Saul & Jordan's
        Gaussian-approximated bound, the strict bound of Saul, Jaakkola & Jordan, or -G of a
        Plefka scheme (Bhattacharyya & Keerthi).  The DAG methods run on ``to_dag()``.
    learning_rate : float or sequence of float, optional
        One rate for every epoch, or one per epoch (as many as ``max_iter``).  Default: with
        "gaussian" the paper's schedule, 0.02 for the first half of the epochs and 0.005 for
        the second (four and four with ``max_iter=8``); with the DAG methods 0.1.
    max_iter : int, default=8
        Epochs (passes over the data) of ``fit``.
    batch_size : int, default=1
        Patterns per parameter update; 1 is the paper's on-line rule.
    tol : float, optional
        Stop ``fit`` early once the mean bound of an epoch rises by less than ``tol`` nats
        over the previous one.  None: run all ``max_iter`` epochs.
    init_visible_biases : bool, default=True
        With "gaussian", ``fit`` first sets the visible biases to the logits of the pixel means
        (the paper's first pass through the data).
    warm_start : bool, default=False
        False: ``fit`` draws fresh parameters; True: it continues from the current ones.
        With "gaussian", True also starts each pattern's solve from its previous solution.
    infer_tol : float, default=1e-6
        Stop a pattern's mean-field solve when its bound changes by less than this (nats)
        in a sweep; also used by ``fit``.
    infer_max_iter : int, default=200
        Most sweeps of one pattern's solve.
    n_threads : int, optional
        OpenMP threads over patterns (default: OMP_NUM_THREADS or all cores); answers do not
        depend on it.
    random_state : None, int or numpy.random.Generator, default=None
        Seed of the initial parameters and of the order in which ``fit`` visits patterns.
    progress : bool, default=True
        Show a progress bar on calls that run longer than two seconds.
    callback : callable, optional
        Called as ``callback(epoch, net, mean_bound)`` after each epoch of ``fit``.

    Attributes
    ----------
    weights_ : list of ndarray
        ``weights_[l]`` has shape ``(sizes[l+1], sizes[l])``: from layer l to layer l+1.
        ``weights`` is the same list.
    biases_ : list of ndarray
        ``biases_[l]`` has shape ``(sizes[l],)``.  ``biases`` is the same list.
    history_ : ndarray of shape (`n_iter_`,)
        After ``fit``: the mean bound per pattern (nats) in each epoch, each pattern scored
        at its mean-field solution just before its update (the quantity of the paper's
        Fig. 2).
    n_iter_ : int
        Epochs run by the last ``fit``.

    See Also
    --------
    BeliefNet : Sigmoid or noisy-OR belief nets over any DAG.
    mfengine.infer : The same solve as ``infer``, on a model or on plain arrays.

    Notes
    -----
    Parameters are drawn on first use (``fit``, or ``sample``/``infer`` before any fit) from
    ``random_state``; ``from_params`` builds a net with given parameters.

    Examples
    --------
    >>> import mfengine as mf
    >>> net = mf.SigmoidBeliefNet([2, 4, 8], random_state=0)
    >>> X = net.sample(100, random_state=1)
    >>> net.score_samples(X).shape
    (100,)
    >>> bool(net.fit(X).history_.shape == (8,))
    True
    """

    _parameter_constraints = {
        "sizes": [LAYER_SIZES],
        "weight_scale": [Interval(numbers.Real, 0, None)],
        "method": [Options(*METHODS)],
        "learning_rate": [LEARNING_RATE],
        "max_iter": [Interval(numbers.Integral, 1, MAX_ITER_LIMIT)],
        "batch_size": [Interval(numbers.Integral, 1, 2**31 - 1)],
        "tol": [None, POSITIVE_TOL],
        "init_visible_biases": [BOOLEAN],
        "warm_start": [BOOLEAN],
        "infer_tol": [POSITIVE_TOL],
        "infer_max_iter": [Interval(numbers.Integral, 1, 2**31 - 1)],
        "n_threads": [N_THREADS],
        "random_state": [RANDOM_STATE],
        "progress": [BOOLEAN],
        "callback": [None, CALLABLE],
    }
    _saved_state = {"weights_": "arrays", "biases_": "arrays", "n_features_in_": "count",
                    "history_": "vector", "n_iter_": "count"}
    _saved_together = (("weights_", "biases_"),)

    def __init__(self, sizes, *, weight_scale=1.0, method="gaussian", learning_rate=None,
                 max_iter=8, batch_size=1, tol=None, init_visible_biases=True, warm_start=False,
                 infer_tol=1e-6, infer_max_iter=200, n_threads=None, random_state=None,
                 progress=True, callback=None):
        self.sizes = sizes
        self.weight_scale = weight_scale
        self.method = method
        self.learning_rate = learning_rate
        self.max_iter = max_iter
        self.batch_size = batch_size
        self.tol = tol
        self.init_visible_biases = init_visible_biases
        self.warm_start = warm_start
        self.infer_tol = infer_tol
        self.infer_max_iter = infer_max_iter
        self.n_threads = n_threads
        self.random_state = random_state
        self.progress = progress
        self.callback = callback

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_params(cls, weights, biases, **params):
        """A network with the given parameters.

        Parameters
        ----------
        weights : sequence of array_like
            ``weights[l]`` of shape (sizes[l+1], sizes[l]).
        biases : sequence of array_like
            ``biases[l]`` of shape (sizes[l],); the layer sizes come from them.
        **params
            Constructor parameters (``warm_start`` defaults to True here, so that ``fit``
            continues from these parameters).

        Returns
        -------
        net : SigmoidBeliefNet
            A net holding copies of the arrays.
        """
        weights = list(weights)
        biases = list(biases)
        if len(biases) != len(weights) + 1 or len(weights) < 1:
            raise ValueError(
                f"weights and biases must hold one weight matrix between layers and one bias "
                f"vector per layer; got {len(weights)} weight matrices (weights) and "
                f"{len(biases)} bias vectors (biases)"
            )
        sizes = sizes_from_biases(biases)
        params.setdefault("warm_start", True)
        net = cls(list(sizes), **params)
        weights = [as_array(w, f"weights[{l}]") for l, w in enumerate(weights)]
        biases = [as_array(b, f"biases[{l}]") for l, b in enumerate(biases)]
        net.weights_ = [np.array(w, dtype=np.float64, order="C") if w.dtype.kind in "biuf"
                        else w for w in weights]
        net.biases_ = [np.array(b, dtype=np.float64) if b.dtype.kind in "biuf"
                       else b for b in biases]
        net._check_params()
        return net

    def _init_params(self, n_visible=None):
        sizes = check_sizes(self.sizes, n_visible)
        scale = check_real(self.weight_scale, "weight_scale", 0, None)
        rng = check_random_state(self.random_state)
        self.weights_ = [
            rng.normal(0.0, scale / np.sqrt(sizes[l]), size=(sizes[l + 1], sizes[l]))
            for l in range(len(sizes) - 1)
        ]
        self.biases_ = [np.zeros(n) for n in sizes]

    def _params(self):
        """The checked parameters, drawn first if the net has none yet."""
        if "weights_" not in vars(self) or "biases_" not in vars(self):
            self._init_params()
        self._check_params()
        return self

    def __sklearn_is_fitted__(self):
        return "weights_" in vars(self)

    def _check_fitted(self):
        """``mf.load``: the loaded weights and biases agree with each other and with sizes."""
        if "weights_" in vars(self):
            self._check_params()

    @property
    def weights(self):
        """The weight matrices (the list ``weights_``; drawn first if the net has none yet)."""
        return self._params().weights_

    @property
    def biases(self):
        """The bias vectors (the list ``biases_``; drawn first if the net has none yet)."""
        return self._params().biases_

    def copy(self):
        """A deep copy of the network (parameters and hyperparameters).

        Returns
        -------
        net : SigmoidBeliefNet
            A new net with copies of the parameters and the same hyperparameters.
        """
        self._params()
        params = {k: v for k, v in self.get_params().items() if k != "sizes"}
        return type(self).from_params(self.weights_, self.biases_, **params)

    def to_dag(self, sparse=False):
        """The same network as a ``BeliefNet`` over a DAG.

        Units are numbered layer by layer, top first; the bottom layer is visible; sigmoid
        units.  The hyperparameters the two classes share (method when it is a DAG method,
        learning rate, batch size, tolerances, threads, seed) carry over, so that both train
        alike.

        Parameters
        ----------
        sparse : bool, default=False
            Give ``W`` as a scipy.sparse CSR matrix of the inter-layer weights, built in
            O(n_units + n_weights) time and memory, instead of a dense (n_units, n_units)
            array (for 10 layers of 1,000 units the dense W would take 800 MB, the weights
            72 MB).  Either way the DAG's edges are the nonzero weights (a ``BeliefNet``'s
            structure is W's nonzero pattern); this net's own ``fit`` with a DAG method trains
            every inter-layer weight, an exact zero included.

        Returns
        -------
        dag : BeliefNet
            The equivalent DAG net, with ``warm_start=True`` so that ``fit`` continues from
            these parameters.
        """
        from mfengine.sbn.dag import BeliefNet

        self._params()
        sizes = self._sizes()
        off = np.concatenate([[0], np.cumsum(sizes)])
        if check_flag(sparse, "sparse"):
            W = self._csr_weights()
        else:
            W = np.zeros((off[-1], off[-1]))
            for l, w in enumerate(self.weights_):
                W[off[l + 1] : off[l + 2], off[l] : off[l + 1]] = w
        visible = np.zeros(off[-1], dtype=bool)
        visible[off[-2] :] = True
        shared = {k: v for k, v in self.get_params().items()
                  if k in ("learning_rate", "max_iter", "batch_size", "tol", "infer_tol",
                           "infer_max_iter", "n_threads", "random_state", "progress")}
        if self.method in DAG_METHODS:
            shared["method"] = self.method
        return BeliefNet(W, np.concatenate(self.biases_), visible, activation="sigmoid",
                         warm_start=True, **shared)

    def _sizes(self):
        return tuple(b.shape[0] for b in self.biases_)

    def _dag_structure(self):
        """``DagStructure.layered`` of the (checked) sizes, kept while they stay."""
        sizes = self._sizes()
        cached = getattr(self, "_layered_structure", None)
        if cached is None or cached[0] != sizes:
            cached = (sizes, DagStructure.layered(sizes))
            self._layered_structure = cached
        return cached[1]

    def _csr_weights(self):
        """The (checked) weights as a scipy.sparse CSR matrix over ``_dag_structure()``."""
        import scipy.sparse

        s = self._dag_structure()
        return scipy.sparse.csr_matrix((self._net().packed_weights(), s.par_idx.copy(),
                                        s.par_ptr.copy()), shape=(s.n_units, s.n_units))

    def _net(self):
        """The checked parameters as the kernels read them (a ``LayeredNet``)."""
        self._params()
        return LayeredNet(self.weights_, self.biases_)

    def _dag_problem(self, X, missing=None, items=True):
        """``(DagNets, Items, V, miss)`` of ``to_dag()`` and the checked data, built in
        O(n_units + n_weights) time and memory: every inter-layer weight is an edge (an
        exactly zero weight too, which ``to_dag()`` drops: it adds exact zeros), no
        n_units x n_units matrix and no second check of the parameters."""
        net = self._net()
        V, miss = self._check_data(X, missing)
        if not items:
            return None, None, V, miss
        nets = net.dag(self._dag_structure())
        return nets, nets.items(V, miss), V, miss

    def _visible_mask(self):
        sizes = self._sizes()
        mask = np.zeros(sum(sizes), dtype=bool)
        mask[sum(sizes[:-1]):] = True
        return mask

    def _flat_means(self, result):
        return np.concatenate(result.mu, axis=1)

    def _draw_states(self, result, rng, n_samples):
        return [(rng.random((n_samples,) + m.shape) < m).astype(np.float64) for m in result.mu]

    @property
    def n_visible(self):
        """Number of visible units (the last layer)."""
        return self._params().biases_[-1].shape[0]

    @property
    def n_hidden(self):
        """Number of hidden units (every layer but the last)."""
        return sum(b.shape[0] for b in self._params().biases_[:-1])

    @property
    def n_weights(self):
        """Number of weights."""
        return sum(w.size for w in self._params().weights_)

    # ------------------------------------------------------------------ checks
    def _check_params(self):
        """Re-validate parameters that users may have edited or replaced.

        Parameters replaced by arrays of another numeric dtype (or by lists) are converted to
        float64 arrays in place, so the kernels (and ``fit``'s in-place updates) see float64."""
        for name in ("weights_", "biases_"):
            value = getattr(self, name)
            if isinstance(value, np.ndarray) or not isinstance(value, (list, tuple)):
                raise TypeError(f"{name} must be a list of arrays (one per layer), got "
                                f"{type(value).__name__}")
            if not isinstance(value, list):
                setattr(self, name, list(value))
        if len(self.biases_) != len(self.weights_) + 1 or len(self.weights_) < 1:
            raise ValueError(
                f"need one bias vector per layer and one weight matrix between layers; got "
                f"{len(self.weights_)} weight matrices (weights_) and {len(self.biases_)} bias "
                "vectors (biases_)"
            )
        for name, arrays, ndim in (("biases_", self.biases_, 1), ("weights_", self.weights_, 2)):
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
        for l, b in enumerate(self.biases_):
            if 0 < l < len(self.weights_):
                rows, cols = self.weights_[l - 1].shape[0], self.weights_[l].shape[1]
                if rows == cols and b.shape[0] != rows:
                    raise ValueError(
                        f"biases_[{l}] has shape {b.shape}, expected ({rows},): weights_[{l - 1}] "
                        f"({self.weights_[l - 1].shape}) and weights_[{l}] "
                        f"({self.weights_[l].shape}) give layer {l} {rows} units")
        want = check_sizes(self.sizes, np.asarray(self.biases_[-1]).shape[0])
        for l, b in enumerate(self.biases_[: len(want)]):
            if b.shape != (want[l],):
                raise ValueError(f"biases_[{l}] has shape {b.shape}, expected ({want[l]},) "
                                 f"(sizes={self.sizes!r})")
        sizes = sizes_from_biases(self.biases_)
        if want != sizes:
            raise ValueError(f"the parameters have layer sizes {list(sizes)} but sizes={self.sizes!r}; "
                             "refit with warm_start=False or build the net with from_params")
        for l, w in enumerate(self.weights_):
            if w.shape != (sizes[l + 1], sizes[l]):
                raise ValueError(f"weights_[{l}] has shape {w.shape}, expected "
                                 f"{(sizes[l + 1], sizes[l])} (the lengths of biases_[{l + 1}] "
                                 f"and biases_[{l}])")
            if not np.all(np.isfinite(w)):
                raise ValueError(f"weights_[{l}] contains NaN or infinite values")
        for l, b in enumerate(self.biases_):
            if not np.all(np.isfinite(b)):
                raise ValueError(f"biases_[{l}] contains NaN or infinite values")

    def _check_solution(self, mu, xi, n, name):
        """mu and xi (one (n, sizes[l]) array per layer, as in an inference result) as float64
        arrays, refusing wrong shapes and values outside [0, 1].  The visible entry of mu is
        not checked and comes back as None (the callers replace it by the data)."""
        sizes = self._sizes()
        out = []
        for label, arrays, top in (("mu", mu, len(sizes) - 1), ("xi", xi, len(sizes))):
            arrays = list(arrays)
            if len(arrays) != len(sizes):
                raise ValueError(f"{name}{label} must hold one array per layer ({len(sizes)}), got {len(arrays)}")
            conv = []
            for l, a in enumerate(arrays):
                if label == "mu" and l == len(sizes) - 1:
                    conv.append(None)  # the visible means: replaced by the data
                    continue
                a = np.asarray(a, dtype=np.float64)
                if a.shape != (n, sizes[l]):
                    raise ValueError(f"{name}{label}[{l}] must have shape {(n, sizes[l])}, got {a.shape}")
                if l < top and not np.all((a >= 0.0) & (a <= 1.0)):
                    raise ValueError(f"{name}{label}[{l}] must lie in [0, 1] (and contain no NaN)")
                conv.append(a)
            out.append(conv)
        return out

    def _check_data(self, V, missing=None, name="X", min_rows=0):
        return _check_layered_data(V, missing, self.biases_[-1].shape[0], name, min_rows)

    # ------------------------------------------------------------------ inference
    def infer(self, X, missing=None, *, method=None, tol=None, max_iter=None, n_threads=None,
              init_mu=None, inner_tol=None, progress=None):
        """Solve the mean-field equations for every pattern of ``X``.

        Parameters
        ----------
        X : array_like of shape (n_patterns, n_visible)
            Binary data.  float32, integer or boolean input is converted to float64; entries
            must be 0 or 1 except where ``missing`` is True (there they may be anything, NaN
            too).
        missing : array_like of bool, shape (n_patterns, n_visible) or (n_visible,), optional
            True marks a missing visible entry.  With "gaussian" it is marginalised exactly
            (its terms leave the bound), and so with the DAG methods (it has no observed
            descendant: it sums out of the solve, its mean then sigmoid(h + W mu) from its
            parents' means).
        method : str, optional
            Default: the net's ``method``.  "gaussian": Saul & Jordan's Gaussian-approximated
            bound (eq. 24), solved by cyclic stepwise ascent in which every update raises the
            bound.  "sjj": the strict lower bound of Saul, Jaakkola & Jordan.  "plefka11",
            "plefka12", "plefka22": -G of the Plefka schemes (not bounds).
        tol : float, optional
            Stop a pattern when its bound changes by less than ``tol`` nats in a sweep.
            Default: ``infer_tol``.
        max_iter : int, optional
            Most sweeps per pattern.  Default: ``infer_max_iter``.
        n_threads : int, optional
            Default: the net's ``n_threads``.
        init_mu : array_like of shape (n_patterns, n_hidden), optional
            Starting hidden means, layers concatenated top first (a warm start); default 0.5.
        inner_tol : float, optional
            Tolerance of each unit's 1-D solve (on the absolute derivative of the bound in mu,
            and on the xi residual).
            Default: ``0.1 * sqrt(tol)`` clipped to [1e-13, 1e-3], with the shortcuts that
            skip updates whose gain is negligible; given explicitly, every 1-D solve runs
            until the derivative in mu is at most ``inner_tol`` in magnitude.
        progress : bool, optional
            Default: the net's ``progress``.

        Returns
        -------
        result : BeliefNetResult
            ``bound``, ``converged``, ``n_iter`` per pattern, and ``mu``, ``xi``: one
            (n_patterns, sizes[l]) array per layer.

        Warns
        -----
        ConvergenceWarning
            When some pattern's solve reached ``max_iter`` sweeps.
        """
        return self._solve(X, missing, method, tol, max_iter, n_threads, init_mu, inner_tol,
                           progress)

    def _solve(self, X, missing=None, method=None, tol=None, max_iter=None, n_threads=None,
               init_mu=None, inner_tol=None, progress=None, keep="all"):
        """``infer``, reported (``keep`` is the DAG nets' option: the layered net keeps the
        whole result)."""
        result = self._infer(X, missing, method, tol, max_iter, n_threads, init_mu, inner_tol,
                             progress)
        return report(result, f"SigmoidBeliefNet.infer(method={result.method!r})")

    def _infer(self, X, missing=None, method=None, tol=None, max_iter=None, n_threads=None,
               init_mu=None, inner_tol=None, progress=None):
        method, tol, max_iter, inner_tol = check_solve_args(
            self.method if method is None else method, self.infer_tol if tol is None else tol,
            self.infer_max_iter if max_iter is None else max_iter, inner_tol,
            names=("infer_tol" if tol is None else "tol",
                   "infer_max_iter" if max_iter is None else "max_iter"))
        progress = check_flag(self.progress if progress is None else progress, "progress")
        n_threads = self.n_threads if n_threads is None else n_threads
        if method == "gaussian":
            net = self._net()
            V, miss = self._check_data(X, missing)
            return run_gaussian(net, V, miss, init_mu, tol, max_iter, inner_tol, n_threads,
                                progress)
        nets, items, _, _ = self._dag_problem(X, missing)
        r = run_dag(nets, items, method, tol, max_iter, inner_tol, n_threads, init_mu, progress)
        splits = np.cumsum(self._sizes())[:-1]
        r.mu = [np.ascontiguousarray(a) for a in np.split(r.mu, splits, axis=1)]
        if r.xi is not None:
            r.xi = [np.ascontiguousarray(a) for a in np.split(r.xi, splits, axis=1)]
        return r

    # ------------------------------------------------------------------ generative model
    def sample(self, n_samples=1, random_state=None, return_all=False):
        """Draw patterns by ancestral sampling.

        Parameters
        ----------
        n_samples : int, default=1
            Number of patterns.
        random_state : None, int or numpy.random.Generator, default=None
            Seed of the draw.
        return_all : bool, default=False
            Also return the hidden layers.

        Returns
        -------
        X : ndarray of shape (n_samples, n_visible), or list of ndarray
            The visible vectors, or with ``return_all=True`` one (n_samples, sizes[l]) array
            per layer.
        """
        n_samples = _check_n_samples(n_samples)
        return_all = check_flag(return_all, "return_all")
        rng = check_random_state(random_state)
        self._params()
        layers = []
        try:
            p = np.broadcast_to(_sigmoid(self.biases_[0]), (n_samples, self.biases_[0].shape[0]))
            S = (rng.random(p.shape) < p).astype(np.float64)
            layers.append(S)
            for w, b in zip(self.weights_, self.biases_[1:]):
                S = (rng.random((n_samples, b.shape[0])) < _sigmoid(S @ w.T + b)).astype(np.float64)
                layers.append(S)
        except MemoryError:
            need = 8 * n_samples * sum(b.shape[0] for b in self.biases_)
            raise MemoryError(f"n_samples={n_samples}: the draws need about {need:,} bytes; "
                              "draw fewer samples at a time") from None
        return layers if return_all else layers[-1]

    def log_joint(self, layers):
        """The log-probability ln P(S) of complete configurations.

        Parameters
        ----------
        layers : sequence of ndarray
            One (n, sizes[l]) binary array per layer.

        Returns
        -------
        log_p : ndarray of shape (n,)
            The log-probability of each configuration, in nats.
        """
        self._params()
        sizes = self._sizes()
        if len(layers) != len(sizes):
            raise ValueError(f"layers must hold one array per layer ({len(sizes)}), got {len(layers)}")
        layers = [as_float_matrix(S, f"layers[{l}]", n_cols=sizes[l]) for l, S in enumerate(layers)]
        for l, S in enumerate(layers):
            check_binary(S, f"layers[{l}]")
            if S.shape[0] != layers[0].shape[0]:
                raise ValueError(f"layers[{l}] has {S.shape[0]} rows but layers[0] has "
                                 f"{layers[0].shape[0]}: one row per joint state in every layer")
        with np.errstate(over="ignore", invalid="ignore"):
            return self._finite_log_p(self._log_joint_top(layers), "log_joint")

    @staticmethod
    def _finite_log_p(log_p, where):
        """``log_p``, refused where it is not finite: a sigmoid net gives every configuration
        a finite log-probability, so -inf or NaN means that a sum left the double range."""
        if not np.all(np.isfinite(log_p)):
            raise OverflowError(
                f"{where}: a log-probability is beyond the range of float64 (below -1.8e308, "
                "or a unit's input is): the weights (weights_) and biases (biases_) are too "
                "large in magnitude for the log-probabilities of the units to be summed")
        return log_p

    def _log_joint_top(self, layers):
        """ln P of the top ``len(layers)`` layers' states (the layers below summed out)."""
        z = np.broadcast_to(self.biases_[0], layers[0].shape)
        total = np.sum(layers[0] * z - np.logaddexp(0.0, z), axis=1)
        for l in range(len(layers) - 1):
            z = layers[l] @ self.weights_[l].T + self.biases_[l + 1]
            total += np.sum(layers[l + 1] * z - np.logaddexp(0.0, z), axis=1)
        return total

    @np.errstate(over="ignore", invalid="ignore")     # a sum out of range is refused at the end
    def exact_log_likelihood(self, X, missing=None, max_hidden=MAX_ENUMERATED_HIDDEN):
        """Exact ln P(x) per pattern by enumerating every joint hidden state.

        Parameters
        ----------
        X : array_like of shape (n_patterns, n_visible)
            Binary data.
        missing : array_like of bool, optional
            Missing visible entries, summed out exactly.
        max_hidden : int, default=20
            Refuse nets with more hidden units (the cost is 2**n_hidden states).

        Returns
        -------
        log_p : ndarray of shape (n_patterns,)
            The log-probability ln P(x) of each pattern, in nats.

        Raises
        ------
        ValueError
            Above ``max_hidden`` hidden units.
        """
        self._params()
        V, miss = self._check_data(X, missing)
        max_hidden = check_int(max_hidden, "max_hidden", 0, 2**31 - 1)
        H = self.n_hidden
        if H > max_hidden:
            raise ValueError(
                f"exact_log_likelihood enumerates 2**n_hidden states; this net has {H} hidden "
                f"units, above max_hidden={max_hidden}"
            )
        obs = None if miss is None else 1.0 - miss
        Vz = np.where(np.isfinite(V), V, 0.0)
        sizes = self._sizes()
        nh_last = sizes[-2]
        n_upper = H - nh_last
        # log prior of every state of the last hidden layer, summing out the layers above
        last_states = ((np.arange(2**nh_last)[:, None] >> np.arange(nh_last)) & 1).astype(np.float64)
        if n_upper == 0:
            z = self.biases_[0]
            log_prior_last = last_states @ z - np.sum(np.logaddexp(0.0, z))
        else:
            log_prior_last = np.full(2**nh_last, -np.inf)
            chunk = max(1, 2**16 // 2**nh_last)
            codes_all = np.arange(2**n_upper)
            for start in range(0, 2**n_upper, chunk):
                codes = codes_all[start : start + chunk]
                bits = ((codes[:, None] >> np.arange(n_upper)) & 1).astype(np.float64)
                layers, off = [], 0
                for n in sizes[:-2]:
                    layers.append(bits[:, off : off + n])
                    off += n
                lp_upper = self._log_joint_top(layers)
                # ln P(last layer = k | layer above = u) for every (k, u) pair
                zl = layers[-1] @ self.weights_[-2].T + self.biases_[-2]  # (chunk, nh_last)
                lp = last_states @ zl.T - np.sum(np.logaddexp(0.0, zl), axis=1)[None, :]
                lp = lp + lp_upper[None, :]  # (2**nh_last, chunk)
                log_prior_last = np.logaddexp(log_prior_last, logsumexp(lp, axis=1))
        zv = last_states @ self.weights_[-1].T + self.biases_[-1]  # (2^nl, n_vis)
        ls1, ls0 = _log_sigmoid(zv), _log_sigmoid(-zv)
        out = np.empty(V.shape[0])
        step = max(1, 2**22 // max(1, 2**nh_last))
        for start in range(0, V.shape[0], step):
            v = Vz[start : start + step]
            if obs is None:
                ll = v @ ls1.T + (1.0 - v) @ ls0.T
            else:
                o = obs[start : start + step]
                ll = (v * o) @ ls1.T + ((1.0 - v) * o) @ ls0.T
            out[start : start + step] = logsumexp(ll + log_prior_last[None, :], axis=1)
        return self._finite_log_p(out, "exact_log_likelihood")

    # ------------------------------------------------------------------ the bound
    def evaluate_bound(self, X, mu, xi, missing=None):
        """The Gaussian-approximated bound L(mu, xi) per pattern (Saul & Jordan eq. 24).

        A plain NumPy evaluation, used for checks.

        Parameters
        ----------
        X : array_like of shape (n_patterns, n_visible)
            Binary data.
        mu, xi : sequence of ndarray
            One (n_patterns, sizes[l]) array per layer (as in an inference result); the
            visible entry of ``mu`` is ignored and replaced by ``X``.
        missing : array_like of bool, optional
            Missing entries, left out of the bound.

        Returns
        -------
        bound : ndarray of shape (n_patterns,)
            In nats.
        """
        self._params()
        V, miss = self._check_data(X, missing)
        sizes = self._sizes()
        mu, xi = self._check_solution(mu, xi, V.shape[0], "")
        mu = mu[:-1] + [np.where(np.isfinite(V), V, 0.0)]
        total = np.zeros(V.shape[0])
        for l in range(len(sizes)):
            if l == 0:
                m = np.broadcast_to(self.biases_[0], mu[0].shape)
                s = np.zeros_like(m)
            else:
                m = mu[l - 1] @ self.weights_[l - 1].T + self.biases_[l]
                s = (mu[l - 1] * (1.0 - mu[l - 1])) @ (self.weights_[l - 1] ** 2).T
            term = mu[l] * m - 0.5 * xi[l] ** 2 * s - np.logaddexp(0.0, m + (0.5 - xi[l]) * s)
            if l == len(sizes) - 1:
                if miss is not None:
                    term = term * (1.0 - miss)
            else:
                term = term + _entropy(mu[l])
            total += term.sum(axis=1)
        return total

    def gradient(self, X, result=None, missing=None, **infer_kwargs):
        """Gradient of the summed Gaussian-approximated bound in the weights and biases.

        At the mean-field solution ``result`` this is Saul & Jordan eqs. 10-11, written
        without assuming xi sits exactly at its fixed point: dL/dh_i = mu_i - sig_i,
        dL/dJ_ij = (mu_i - sig_i) mu_j - J_ij mu_j (1 - mu_j) (xi_i^2 + (1 - 2 xi_i) sig_i),
        with sig_i = sigmoid(m_i + (1/2 - xi_i) s_i) (= xi_i at the fixed point).

        Parameters
        ----------
        X : array_like of shape (n_patterns, n_visible)
            Binary data.
        result : BeliefNetResult, optional
            A "gaussian" solution for ``X``; computed with ``infer`` when not given.
        missing : array_like of bool, optional
            Missing entries.
        **infer_kwargs
            Passed to ``infer`` when ``result`` is not given.

        Returns
        -------
        grad_weights, grad_biases : list of ndarray
            Shaped like ``weights_`` and ``biases_``, summed over patterns.
        """
        self._params()
        V, miss = self._check_data(X, missing)
        if result is None:
            infer_kwargs.setdefault("method", "gaussian")
            result = self.infer(V, missing=missing, **infer_kwargs)
        if not isinstance(result, BeliefNetResult):
            raise TypeError(f"result must be the BeliefNetResult of infer(X, method='gaussian'), "
                            f"got {type(result).__name__}")
        if result.method != "gaussian" or result.xi is None:
            raise ValueError(f"result must be the 'gaussian' solution of X (the gradient is that "
                             f"of the Gaussian-approximated bound), got a {result.method!r} result")
        mu, xi = self._check_solution(result.mu, result.xi, V.shape[0], "result.")
        return self._gradient_from_solution(V, miss, mu, xi)

    def _gradient_from_solution(self, V, miss, mu, xi):
        sizes = self._sizes()
        mu = list(mu[:-1]) + [np.where(np.isfinite(V), V, 0.0)]
        gW, gb = [], []
        for l in range(len(sizes)):
            if l == 0:
                m = np.broadcast_to(self.biases_[0], mu[0].shape)
                s = 0.0
            else:
                var = mu[l - 1] * (1.0 - mu[l - 1])
                m = mu[l - 1] @ self.weights_[l - 1].T + self.biases_[l]
                s = var @ (self.weights_[l - 1] ** 2).T
            sig = _sigmoid(m + (0.5 - xi[l]) * s)
            delta = mu[l] - sig
            if l == len(sizes) - 1 and miss is not None:
                obs = 1.0 - miss
                delta = delta * obs
            gb.append(delta.sum(axis=0))
            if l > 0:
                q = xi[l] ** 2 + (1.0 - 2.0 * xi[l]) * sig
                if l == len(sizes) - 1 and miss is not None:
                    q = q * obs
                gW.append(delta.T @ mu[l - 1] - self.weights_[l - 1] * (q.T @ var))
        return gW, gb

    # ------------------------------------------------------------------ learning
    def fit(self, X, y=None, missing=None):
        """Learn the weights and biases by gradient ascent on the mean-field objective.

        Each step solves the mean-field equations for ``batch_size`` patterns, then moves the
        parameters along the exact gradient of the objective at those solutions, scaled by
        ``learning_rate / batch_size``.  With "gaussian" each epoch runs compiled, without the
        GIL; the DAG methods train ``to_dag()`` (see ``BeliefNet.fit``) and copy the result
        back.

        Parameters
        ----------
        X : array_like of shape (n_patterns, n_visible)
            Binary training data.
        y : None
            Ignored.
        missing : array_like of bool, optional
            Missing visible entries: marginalised ("gaussian" leaves their terms out of the
            bound, the DAG methods sum them out exactly).

        Returns
        -------
        self : SigmoidBeliefNet
            The fitted net; ``history_`` holds the mean bound of each epoch.

        Warns
        -----
        ConvergenceWarning
            When ``tol`` is given and the last epoch still gained more than ``tol``.
        """
        method = check_value(self.method, "method", [Options(*METHODS)], "SigmoidBeliefNet")
        warm = check_flag(self.warm_start, "warm_start")
        check_callback(self.callback)
        drawn = not warm or "weights_" not in vars(self)
        if drawn:
            n_visible = as_float_matrix(X, "X", allow_nan=True).shape[1]
            self._init_params(n_visible)
        self._check_params()
        V, miss = self._check_data(X, missing, min_rows=1)
        self.n_features_in_ = V.shape[1]
        if method in DAG_METHODS:
            if drawn:
                from mfengine.sbn.sjj import MAX_NET_SCALE
                with np.errstate(over="ignore"):
                    total = sum(float(np.abs(W).sum()) for W in self.weights_)
                if not total <= MAX_NET_SCALE:   # the DAG kernels' range (sjj.MAX_NET_SCALE)
                    raise ValueError(
                        f"weight_scale={self.weight_scale!r} draws starting weights too large to "
                        f"evaluate in double precision (sum of |weights_| = {total:.3g}, above "
                        f"{MAX_NET_SCALE:.3g}): lower it")
            try:
                self._fit_dag(V, miss)
                return self
            except OverflowError as exc:
                if not drawn:
                    raise
                raise OverflowError(f"{exc} (the starting weights were drawn with "
                                    f"weight_scale={self.weight_scale!r}: lower it)") from exc
        n = V.shape[0]
        rates, batch_size, tol, itol, imax, progress, rng = self._fit_settings()
        from mfengine._progress import progress_bar
        from mfengine.sbn import _gaussian

        if check_flag(self.init_visible_biases, "init_visible_biases"):
            self._init_visible_biases(V, miss)
        Vk = np.where(np.isfinite(V), V, 0.0) if miss is not None else V
        state = np.full((n, sum(self._sizes())), 0.5)
        history = []
        batches_per_epoch = (n + batch_size - 1) // batch_size
        bar = progress_bar(total=len(rates) * batches_per_epoch, desc="fit", disable=not progress,
                           unit="batch")
        try:
            for epoch, lr in enumerate(rates):
                self._check_params()   # a callback may have replaced a parameter
                if not warm:
                    state[:, : self.n_hidden] = 0.5
                order = rng.permutation(n).astype(np.intp)
                total = _gaussian.fit_epoch(self.weights_, self.biases_, Vk, miss, order,
                                            float(lr), batch_size, itol, inner_tol_for(itol),
                                            imax, state, bar.update)
                history.append(total / n)
                bar.set_postfix(bound=f"{history[-1]:.3f}")
                if self.callback is not None:
                    self.callback(epoch, self, history[-1])
                if stop(history, tol):
                    break
        finally:
            bar.close()
        self._check_params()
        return self._finish_fit(history, tol, len(rates))

    def _fit_settings(self):
        """fit's schedule and solve settings, validated: (rates, batch_size, tol, infer_tol,
        infer_max_iter, progress, random generator)."""
        return (schedule(self.max_iter, self.learning_rate, PAPER_RATES),
                check_int(self.batch_size, "batch_size", 1, 2**31 - 1),
                check_tol(self.tol, "tol", allow_none=True),
                check_tol(self.infer_tol, "infer_tol"),
                check_int(self.infer_max_iter, "infer_max_iter", 1, 2**31 - 1),
                check_flag(self.progress, "progress"),
                check_random_state(self.random_state))

    def _init_visible_biases(self, V, miss):
        """The paper's first pass: visible biases at the logits of the pixel means."""
        n = V.shape[0]
        if miss is None:
            p = V.mean(axis=0)
        else:
            obs = 1.0 - miss
            p = (np.where(obs > 0, V, 0.0)).sum(axis=0) / np.maximum(obs.sum(axis=0), 1.0)
        p = np.clip(p, 1.0 / (n + 2), 1.0 - 1.0 / (n + 2))
        self.biases_[-1] = np.log(p) - np.log1p(-p)

    def partial_fit(self, X, y=None, missing=None):
        """One pass of the training rule over ``X`` (scikit-learn's out-of-core convention).

        The patterns of ``X`` are visited in the order given, ``batch_size`` at a time, each
        step exactly as in ``fit``: solve the mean field (from 0.5), move the parameters along
        the gradient at the solutions.  The first call (a net without parameters) draws them
        from ``random_state`` and, with "gaussian" and ``init_visible_biases``, sets the
        visible biases from this first chunk's pixel means; later calls continue from the
        current parameters whatever ``warm_start`` says.  Each call uses the first rate of the
        schedule (``learning_rate``, or 0.02 for "gaussian" and 0.1 for the DAG methods by
        default); change ``learning_rate`` between calls to follow a schedule.

        ``fit`` with a constant rate (or with ``max_iter=1``) is ``partial_fit`` over each
        epoch's shuffled data: ``fit`` equals one ``partial_fit(X[order])`` per epoch, with
        ``order`` the epoch's permutation drawn from ``random_state`` (with the DAG methods,
        for the first epoch only: ``fit`` then warm-starts each pattern's solve from its
        previous solution, which a chunk of data does not have).

        Parameters
        ----------
        X : array_like of shape (n_patterns, n_visible)
            Binary training data (one chunk).
        y : None
            Ignored.
        missing : array_like of bool, optional
            Missing visible entries: marginalised ("gaussian" leaves their terms out of the
            bound, the DAG methods sum them out exactly).

        Returns
        -------
        self : SigmoidBeliefNet
            ``history_`` gains this pass's mean bound per pattern, and ``n_iter_`` counts the
            passes since the parameters were drawn.

        Examples
        --------
        >>> import mfengine as mf
        >>> net = mf.SigmoidBeliefNet([2, 4, 8], random_state=0, progress=False)
        >>> X = net.sample(200, random_state=1)
        >>> for chunk in (X[:100], X[100:]):
        ...     _ = net.partial_fit(chunk)
        >>> net.n_iter_, net.history_.shape
        (2, (2,))
        """
        method = check_value(self.method, "method", [Options(*METHODS)], "SigmoidBeliefNet")
        first = "weights_" not in vars(self) or "biases_" not in vars(self)
        if first:
            self._init_params(as_float_matrix(X, "X", allow_nan=True).shape[1])
        self._check_params()
        V, miss = self._check_data(X, missing, min_rows=1)
        rate = schedule(self.max_iter, self.learning_rate,
                        0.1 if method in DAG_METHODS else PAPER_RATES)[0]
        history = [] if first or "history_" not in vars(self) else list(self.history_)
        if method in DAG_METHODS:
            _, history_pass = self._fit_dag(V, miss, [rate], partial=True)
            history.append(float(history_pass[-1]))
        else:
            batch_size = check_int(self.batch_size, "batch_size", 1, 2**31 - 1)
            itol = check_tol(self.infer_tol, "infer_tol")
            imax = check_int(self.infer_max_iter, "infer_max_iter", 1, 2**31 - 1)
            from mfengine.sbn import _gaussian

            if first and check_flag(self.init_visible_biases, "init_visible_biases"):
                self._init_visible_biases(V, miss)
            Vk = np.where(np.isfinite(V), V, 0.0) if miss is not None else V
            n = V.shape[0]
            state = np.full((n, sum(self._sizes())), 0.5)
            total = _gaussian.fit_epoch(self.weights_, self.biases_, Vk, miss,
                                        np.arange(n, dtype=np.intp), float(rate), batch_size,
                                        itol, inner_tol_for(itol), imax, state)
            history.append(total / n)
        self._check_params()
        self.n_features_in_ = V.shape[1]
        self.history_ = np.asarray(history, dtype=np.float64)
        self.n_iter_ = len(history)
        return self

    def _set_packed(self, w, h):
        """Weights and biases from the DAG form's packed vectors (``_dag_structure()``'s
        edge order: the layers' weight matrices raveled and concatenated)."""
        sizes = self._sizes()
        off = np.concatenate([[0], np.cumsum([a * b for a, b in zip(sizes[:-1], sizes[1:])])])
        self.weights_ = [np.ascontiguousarray(w[off[l]:off[l + 1]].reshape(sizes[l + 1], sizes[l]))
                         for l in range(len(sizes) - 1)]
        boff = np.concatenate([[0], np.cumsum(sizes)])
        self.biases_ = [h[boff[l]:boff[l + 1]].copy() for l in range(len(sizes))]

    def _finish_fit(self, history, tol, budget):
        self.history_ = np.asarray(history, dtype=np.float64)
        self.n_iter_ = len(history)
        if tol is not None and not stop(history, tol):
            warn_unconverged([False], f"{type(self).__name__}.fit",
                             f"the mean bound still rose by more than tol={tol} in the last of "
                             f"{budget} epochs; raise max_iter or loosen tol")
        return self

    def _fit_dag(self, V, miss, rates=None, partial=False):
        """Train the DAG form of the net (every inter-layer weight an edge) with its DAG
        method on checked data; the weights and biases are set from the result.  Returns
        ``(converged, history)``; ``fit`` sets ``history_`` from it, ``partial_fit`` adds."""
        from mfengine._validation import effective_n_threads

        method = self.method
        _, itol, imax, _ = check_solve_args(method, self.infer_tol, self.infer_max_iter, None,
                                            names=("infer_tol", "infer_max_iter"))
        if rates is None:
            rates = schedule(self.max_iter, self.learning_rate, 0.1)
        batch_size = check_int(self.batch_size, "batch_size", 1, 2**31 - 1)
        tol = None if partial else check_tol(self.tol, "tol", allow_none=True)
        progress = check_flag(self.progress, "progress")
        callback = None if partial else check_callback(self.callback)
        nets = self._net().dag(self._dag_structure())
        items = nets.items(V, miss)
        def after_epoch(epoch, w, h, value):
            self._set_packed(w[0], h[0])
            callback(epoch, self, value)
            # edits the callback made to weights_/biases_ reach the net being trained
            net = self._net()
            return net.packed_weights()[None], np.concatenate(net.biases)[None]

        on_epoch = None if callback is None else after_epoch
        w, h, history, converged = fit_items(
            nets, items, method, itol, imax, rates, batch_size, tol, progress,
            None if partial else check_random_state(self.random_state), partial,
            effective_n_threads(self.n_threads), f"fit ({method})", on_epoch)
        self._set_packed(w[0], h[0])
        self._check_params()
        warn_unconverged(converged, f"SigmoidBeliefNet.fit(method={method!r}): the mean-field "
                         "solves", "raise infer_max_iter or loosen infer_tol")
        if not partial:
            self.history_ = np.asarray(history, dtype=np.float64)
            self.n_iter_ = len(history)
            if tol is not None and not stop(history, tol):
                warn_unconverged([False], "SigmoidBeliefNet.fit",
                                 f"the mean objective still changed by more than tol={tol} in "
                                 f"the last of {len(rates)} epochs; raise max_iter or loosen tol")
        return converged, history

    # --- dask hooks
    # The data-parallel fit of mfengine._dask: it hands over a Partitions object (the row
    # blocks of a dask array) and imports nothing from this module.
    def _dask_fit(self, parts, y=None):
        """``fit`` on a dask array: the steps of the compiled epoch loop, each mini-batch's
        patterns solved where their blocks are (:meth:`_dask_batch_gradient`), their summed
        gradients added on the client.  ``parts``: a ``mfengine._dask.Partitions``."""
        from mfengine._progress import progress_bar

        method = check_value(self.method, "method", [Options(*METHODS)], "SigmoidBeliefNet")
        warm = check_flag(self.warm_start, "warm_start")
        if check_callback(self.callback) is not None:
            raise ValueError("SigmoidBeliefNet.fit on a dask array does not take a callback")
        n_rows, n_cols = parts.shape
        if not warm or "weights_" not in vars(self):
            self._init_params(n_cols)
        self._check_params()
        if n_cols != self.biases_[-1].shape[0]:
            raise ValueError(f"X must have {self.biases_[-1].shape[0]} columns (the visible "
                             f"units), got {n_cols}")
        if n_rows < 1:
            raise ValueError("X has no patterns: fit needs at least one")
        if method in DAG_METHODS:      # the DAG form, trained data-parallel
            self._dask_fit_dag(parts)
            self.n_features_in_ = n_cols
            return self
        sums = parts.map(SigmoidBeliefNet._dask_check_rows, self)
        n = int(sum(s[1] for s in sums))
        self.n_features_in_ = n_cols
        rates, batch_size, tol, itol, imax, progress, rng = self._fit_settings()
        batch_size = min(batch_size, max(n, 1))
        if check_flag(self.init_visible_biases, "init_visible_biases"):
            p = np.sum([s[0] for s in sums], axis=0) / n
            p = np.clip(p, 1.0 / (n + 2), 1.0 - 1.0 / (n + 2))
            self.biases_[-1] = np.log(p) - np.log1p(-p)
        history, converged, states = [], [], None
        n_batches = (n + batch_size - 1) // batch_size
        bar = progress_bar(total=len(rates) * n_batches, desc="fit (dask)", disable=not progress,
                           unit="batch")
        try:
            for lr in rates:
                if not warm:
                    states = None
                order = rng.permutation(n).astype(np.intp)
                total = 0.0
                for a in range(0, n, batch_size):
                    plan = parts.split(order[a:a + batch_size])
                    size = sum(len(p) for p in plan if p is not False)
                    shared = (copy.deepcopy(self), itol, imax, warm)
                    outs, states = parts.step(SigmoidBeliefNet._dask_batch_gradient, shared,
                                              plan, states)
                    step = float(lr) / size
                    gW = [sum(o[0][l] for _, o in outs) for l in range(len(self.weights_))]
                    gb = [sum(o[1][l] for _, o in outs) for l in range(len(self.biases_))]
                    for l, g in enumerate(gW):
                        self.weights_[l] += step * g
                    for l, g in enumerate(gb):
                        self.biases_[l] += step * g
                    total += sum(o[2] for _, o in outs)
                    converged.extend(o[3] for _, o in outs)
                    self._check_params()
                    bar.update(1)
                history.append(total / n)
                bar.set_postfix(bound=f"{history[-1]:.3f}")
                if stop(history, tol):
                    break
        finally:
            bar.close()
        return self._finish_fit(history, tol, len(rates))

    def _dask_fit_dag(self, parts):
        """The DAG form trained data-parallel (``_learn.fit_partitions``)."""
        import functools

        from mfengine.sbn._learn import check_partition, fit_partitions

        method = self.method
        _, itol, imax, _ = check_solve_args(method, self.infer_tol, self.infer_max_iter, None,
                                            names=("infer_tol", "infer_max_iter"))
        rates = schedule(self.max_iter, self.learning_rate, 0.1)
        batch_size = check_int(self.batch_size, "batch_size", 1, 2**31 - 1)
        tol = check_tol(self.tol, "tol", allow_none=True)
        progress = check_flag(self.progress, "progress")
        if int(parts.offsets[-1]) == 0:
            raise ValueError("X has no patterns: fit needs at least one")
        check = functools.partial(_check_layered_data, n_visible=self.n_visible)
        parts.map(check_partition, check)
        nets = self._net().dag(self._dag_structure())
        w, h, history, converged = fit_partitions(
            nets, parts, check, method, itol, imax, rates, batch_size, tol, progress,
            check_random_state(self.random_state), f"fit ({method}, dask)")
        self._set_packed(w[0], h[0])
        self._check_params()
        warn_unconverged(converged, f"SigmoidBeliefNet.fit(method={method!r}): the mean-field "
                         "solves", "raise infer_max_iter or loosen infer_tol")
        return self._finish_fit(history, tol, len(rates))

    @staticmethod
    def _dask_check_rows(block, net):
        """Validate a block where it is; returns its column sums and row count."""
        V, _ = net._check_data(np.asarray(block))
        return V.sum(axis=0), V.shape[0]

    @staticmethod
    def _dask_batch_gradient(block, state, shared, local):
        """One partition's part of one mini-batch (run where the block is): solve its
        patterns ``local`` (block rows) and sum their gradients at the solutions; the
        solutions stay there as warm starts when ``warm_start``."""
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


def _check_layered_data(V, missing, n_visible, name="X", min_rows=0):
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


def _check_n_samples(n_samples):
    """``n_samples`` as an int in [0, 2**31 - 1], named in the error."""
    return check_int(n_samples, "n_samples", 0, 2**31 - 1)


def _sigmoid(x):
    return np.exp(-np.logaddexp(0.0, -x))


