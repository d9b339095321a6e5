"""Layered sigmoid belief networks (Saul & Jordan): the model, exact enumeration and learning.

Layers are listed top first; the last layer is visible.  Unit i of layer l+1 fires with
probability ``sigmoid(biases[l+1][i] + weights[l][i] @ S^l)``; top-layer units with
``sigmoid(biases[0])``.
"""
import numbers

import numpy as np

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
    check_random_state,
    check_sizes,
    sizes_from_biases,
)
from mfengine._validation import check_flag, check_int, check_real
from mfengine.sbn._checks import check_layered_data, check_layered_params
from mfengine.sbn._exact import (MAX_ENUMERATED_HIDDEN, finite_log_p, layered_log_joint_top,
                                 layered_log_likelihood)
from mfengine.sbn._gaussian_ref import gaussian_bound, gaussian_gradient
from mfengine.sbn._layered_fit import LayeredLearning
from mfengine.sbn._problem import LayeredNet
from mfengine.sbn._result import BeliefNetResult
from mfengine.sbn._solve import (
    DAG_METHODS,
    METHODS,
    check_solve_args,
    report,
    run_dag,
    run_gaussian,
)
from mfengine.sbn._structure import DagStructure
from mfengine.sbn.model import BeliefNetModel

__all__ = ["SigmoidBeliefNet", "MAX_ENUMERATED_HIDDEN"]




class SigmoidBeliefNet(LayeredLearning, BeliefNetModel):
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
        """Re-validate parameters that users may have edited or replaced (converted to float64
        arrays in place, so the kernels and ``fit``'s in-place updates see float64)."""
        self.weights_, self.biases_ = check_layered_params(self.weights_, self.biases_,
                                                           self.sizes)

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
        return check_layered_data(V, missing, self.biases_[-1].shape[0], name, min_rows)

    # ------------------------------------------------------------------ inference
    def infer(self, X, missing=None, *, method=None, tol=None, max_iter=None, n_threads=None,
              init_mu=None, inner_tol=None, progress=None, max_exact=None):
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
        max_exact : None
            The budget of ``BeliefNet.infer(method="hybrid")`` on bipartite noisy-OR nets,
            kept here so that every belief net's ``infer`` takes the same arguments; a
            layered net has no such method, and any value but None is refused.

        Returns
        -------
        result : BeliefNetResult
            ``bound``, ``converged``, ``n_iter`` per pattern, and ``mu``, ``xi``: one
            (n_patterns, sizes[l]) array per layer.

        Raises
        ------
        ValueError
            For ``max_exact`` other than None.

        Warns
        -----
        ConvergenceWarning
            When some pattern's solve reached ``max_iter`` sweeps.
        """
        if max_exact is not None:
            raise ValueError("max_exact is for BeliefNet.infer(method='hybrid') on a bipartite "
                             f"noisy-OR net; a SigmoidBeliefNet has no such method, got "
                             f"max_exact={max_exact!r}")
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
            return finite_log_p(layered_log_joint_top(self.weights_, self.biases_, layers),
                                "log_joint")

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
        return layered_log_likelihood(self.weights_, self.biases_, V, miss)

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
        mu, xi = self._check_solution(mu, xi, V.shape[0], "")
        return gaussian_bound(self.weights_, self.biases_, V, miss, mu, xi)

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
        return gaussian_gradient(self.weights_, self.biases_, V, miss, mu, xi)


def _check_n_samples(n_samples):
    """``n_samples`` as an int in [0, 2**31 - 1], named in the error."""
    return check_int(n_samples, "n_samples", 0, 2**31 - 1)


def _sigmoid(x):
    return np.exp(-np.logaddexp(0.0, -x))


