"""Belief networks over any DAG: sigmoid or noisy-OR units (Saul, Jaakkola & Jordan;
Bhattacharyya & Keerthi).

Units are in topological order.  Unit i fires with probability f(z_i), with
``z_i = h[i] + sum_{j < i} W[i, j] S_j`` and f the sigmoid 1/(1 + e^{-z}), or the noisy-OR
1 - e^{-z} (non-negative weights and biases).  A boolean mask says which units are visible.

This module holds the base of the DAG nets and ``BeliefNet`` (one net); ``BeliefNetBatch``
(many nets of one structure) is in :mod:`mfengine.sbn.batch`.
"""

import contextlib
import copy
import functools
import numbers

import numpy as np

from mfengine._base import warn_unconverged
from mfengine._validation import (ARRAY_LIKE, BOOLEAN, CALLABLE, LEARNING_RATE, MAX_ITER_LIMIT,
                                  N_THREADS, POSITIVE_TOL, RANDOM_STATE, Interval, Options,
                                  as_array, as_float_matrix, check_binary, check_callback,
                                  check_flag, check_int, check_random_state, check_tol,
                                  check_value)
from mfengine.sbn._checks import (check_activation, check_dag_data,
                                  check_visible, check_weights, edges, is_sparse_batch, w_shape)
from mfengine.sbn._exact import (MAX_ENUMERATED_HIDDEN, log_joint_checked, log_probs,
                                 log_sum_states, sum_log_probs)
from mfengine.sbn._exact_noisy_or import bipartite_blocks
from mfengine.sbn._result import BeliefNetResult
from mfengine.sbn._learn import check_partition, fit_items, fit_partitions, schedule, stop
from mfengine.sbn._problem import DagNets
from mfengine.sbn._solve import (DAG_METHODS, check_solve_args, report, run_dag, run_exact,
                                 run_hybrid)
from mfengine.sbn._structure import ACTIVATIONS, DagStructure, _is_sparse
from mfengine.sbn.model import BeliefNetModel

__all__ = ["BeliefNet", "DagStructure", "ACTIVATIONS"]



def _draw_uniforms(rng, shape, n_samples):
    """Uniforms of ``shape`` for the compiled sampler, or a MemoryError naming n_samples."""
    try:
        return rng.random(shape)
    except MemoryError:
        raise MemoryError(f"n_samples={n_samples}: the draws need {8 * int(np.prod(shape)):,} "
                          "bytes; draw fewer samples at a time") from None

# the attributes _params copies from the constructor's parameters, and their parameters
_COPIED = (("W_", "W"), ("h_", "h"), ("visible_", "visible"))


_COMMON_CONSTRAINTS = {
    "W": [ARRAY_LIKE],
    "h": [ARRAY_LIKE],
    "visible": [ARRAY_LIKE],
    "activation": [Options(*ACTIVATIONS)],
    "method": [Options(*DAG_METHODS)],
    "infer_tol": [POSITIVE_TOL],
    "infer_max_iter": [Interval(numbers.Integral, 1, 2**31 - 1)],
    "n_threads": [N_THREADS],
    "progress": [BOOLEAN],
}


class _DagModel(BeliefNetModel):
    """What BeliefNet and BeliefNetBatch share: parameters checked before every use."""

    _batch = False
    _saved_state = {"W_": "weights", "h_": "array", "visible_": "array", "activation_": "name",
                    "history_": "vector", "n_iter_": "count", "n_features_in_": "count",
                    "_copies": "names", "_edges_saved": "sparse"}

    def _check_fitted(self):
        """``mf.load``: the parameters as the first call would check them, on a shallow copy
        (a loaded net copies ``W``, ``h``, ``visible`` at its first call, as the saved one)."""
        copy.copy(self)._params()

    def _params(self):
        """Check (and on first use copy) the parameters; returns self.

        ``W_``, ``h_``, ``visible_`` start as copies of the constructor's ``W``, ``h``,
        ``visible`` (an attribute that is missing is copied).  Each stays a copy until ``fit``
        learns it or the user assigns it; while it is a copy, a new ``W``, ``h`` or
        ``visible`` (``set_params`` or assignment) is copied afresh at the next call.  After
        ``fit``, another ``activation`` than the weights were learned for (``activation_``)
        is refused.  All or nothing: a refused call changes none of them.  ``save`` keeps
        which attributes are copies and, where the constructor's ``W`` would not rebuild it,
        the edge set, so a loaded model behaves as this one."""
        activation = check_activation(self.activation)
        d = vars(self)
        src = d.get("_src") or {}
        copies = {k for k, _ in _COPIED if k in d and k in src and src[k][1] is d[k]}
        fill = [k for k, p in _COPIED
                if k not in d or (k in copies and src[k][0] is not getattr(self, p))]
        cur = {k: d.get(k) for k, _ in _COPIED}
        structure = d.get("_structure")
        renewed = False
        if fill:
            W, h = check_weights(self.W, self.h, activation, self._batch, copy=True)
            visible = check_visible(self.visible, w_shape(W)[-1])
            fresh = {"W_": W, "h_": h, "visible_": visible}
            for k in fill:
                cur[k] = fresh[k]
            if "W_" in fill:
                structure, renewed = DagStructure(edges(W, self._batch)), True
        learned = None if renewed else d.get("activation_")
        if learned is not None and learned != activation:
            raise ValueError(
                f"activation={self.activation!r}, but W_ and h_ were learned by fit for "
                f"{learned!r} units: fit again (with warm_start=False) or set activation back")
        shape = w_shape(cur["W_"])
        if structure is not None and tuple(shape[-2:]) != (structure.n_units, structure.n_units):
            raise ValueError(f"W_ must have shape {(structure.n_units, structure.n_units)} per net "
                             f"(the net's units), got {shape}")
        now = copies | set(fill)
        try:
            W, h = check_weights(cur["W_"], cur["h_"], activation, self._batch, names=("W_", "h_"))
        except (TypeError, ValueError):
            if "W_" in now or "h_" in now:   # the constructor's W or h at fault: name them
                check_weights(self.W, self.h, activation, self._batch)
            raise
        n = w_shape(W)[-1]
        vis = as_array(cur["visible_"], "visible_")
        if vis.dtype != np.bool_ or vis.shape != (n,) or not vis.any():
            raise ValueError(f"visible_ must be a boolean mask of shape ({n},) with a visible unit")
        if structure is None or structure.n_units != n:   # (a loaded net's: _after_load)
            structure = self._rebuilt_structure(W, activation)
        if not structure.covers(W):
            raise ValueError("W_ has nonzero weights off the net's edges (the nonzero pattern of "
                             "W); build a new net to change the structure")
        # every check passed: only now is anything changed
        d["W_"], d["h_"], d["visible_"], d["_structure"] = W, h, vis, structure
        if renewed:
            d.pop("activation_", None)
        d["_src"] = {k: (getattr(self, p) if k in fill else src[k][0], d[k])
                     for k, p in _COPIED if k in now}
        return self

    def _after_load(self):
        """``mf.load``: the attributes saved as copies are copies of the loaded parameters,
        and the saved edge set is the net's (nothing else is filled in or checked before the
        first call, as in the saved net)."""
        d = vars(self)
        loaded = d.pop("_copies", None)
        if loaded is not None:
            d["_src"] = {k: (getattr(self, p), d[k]) for k, p in _COPIED if k in loaded and k in d}
        saved = d.pop("_edges_saved", None)
        if saved is not None:
            try:
                d["_structure"] = DagStructure(saved)
            except (TypeError, ValueError, IndexError):
                pass    # a damaged file: the edges are rebuilt, and checked, at the first call

    def _rebuilt_structure(self, W, activation):
        """The edges of a model that has W_ (checked: ``W``) but no structure (after load, or
        when W_ was assigned): the constructor's ``W``'s when they cover W_ (a learned weight
        may be exactly 0 on an edge), else W_'s own."""
        W0 = self.W
        if not (_is_sparse(W0) or is_sparse_batch(W0)):
            W0 = np.asarray(W0)
        same = is_sparse_batch(W0) == isinstance(W, list) and (
            (len(W0),) + tuple(np.shape(W0[0])) if is_sparse_batch(W0) else w_shape(W0)
        ) == w_shape(W)
        if same:
            try:    # check W as the constructor would
                W0 = check_weights(list(W0) if is_sparse_batch(W0) else W0, self.h, activation,
                                    self._batch)[0]
                s = DagStructure(edges(W0, self._batch))
                if s.covers(W):
                    return s
            except (TypeError, ValueError):
                pass
        return DagStructure(edges(W, self._batch))

    def _saved_private(self):
        """What ``save`` keeps beside the fitted attributes, and which it leaves out: the
        attributes that are copies of the parameters (``_copies``), a copy whose parameter
        was replaced since (left out: the loaded net copies the new parameter, as this one
        would at its next call), and the net's edge set (``_edges_saved``).  Returns
        ``(extra, leave_out)``."""
        d = vars(self)
        src = d.get("_src") or {}
        copied = [k for k, _ in _COPIED if k in d and k in src and src[k][1] is d[k]]
        stale = tuple(k for k, p in _COPIED if k in copied and src[k][0] is not getattr(self, p))
        extra = {"_copies": [k for k in copied if k not in stale]}
        s = d.get("_structure")
        if s is not None:
            import scipy.sparse

            extra["_edges_saved"] = scipy.sparse.csr_matrix(
                (np.ones(s.nnz), s.par_idx, s.par_ptr), shape=(s.n_units, s.n_units))
        return extra, stale

    def __sklearn_is_fitted__(self):
        return "W_" in vars(self)

    def _packed_w(self):
        """The checked weights as the kernels read them: (n_nets, nnz) in edge order."""
        w = self._structure.pack(self.W_)
        return w if w.ndim == 2 else w[None]

    def _nets(self):
        """The checked parameters as the DAG kernels read them (a ``DagNets``)."""
        self._params()
        h = np.ascontiguousarray(self.h_, dtype=np.float64)
        return DagNets(self._structure, self._packed_w(), h if self._batch else h[None],
                       self.visible_, self.activation, batch=self._batch)

    def _dag_problem(self, X, missing=None, items=True):
        """``(DagNets, Items, V, miss)``: the checked parameters and data of one call."""
        nets = self._nets()
        V, miss = self._check_data(X, missing)
        return nets, nets.items(V, miss) if items else None, V, miss

    def _visible_mask(self):
        return self._params().visible_

    def _flat_means(self, result):
        return result.mu.reshape(-1, result.mu.shape[-1])

    def _draw_states(self, result, rng, n_samples):
        mu = result.mu
        return (rng.random((n_samples,) + mu.shape) < mu).astype(np.float64)

    @property
    def structure(self):
        """The edges in the compressed form the kernels read (a ``DagStructure``)."""
        return self._params()._structure

    @property
    def n_units(self):
        """Number of units."""
        return w_shape(self._params().W_)[-1]

    @property
    def n_visible(self):
        """Number of visible units."""
        return int(self._params().visible_.sum())

    @property
    def n_hidden(self):
        """Number of hidden units."""
        return self.n_units - self.n_visible

    @property
    def n_weights(self):
        """Number of edges (weights that may be nonzero)."""
        return self.structure.nnz

    def _check_kwargs(self, method, tol, max_iter, inner_tol, n_threads, progress):
        method = check_value(self.method if method is None else method, "method",
                             [Options(*DAG_METHODS)], type(self).__name__)
        return (*check_solve_args(method, self.infer_tol if tol is None else tol,
                                  self.infer_max_iter if max_iter is None else max_iter, inner_tol,
                                  names=("infer_tol" if tol is None else "tol",
                                         "infer_max_iter" if max_iter is None else "max_iter")),
                self.n_threads if n_threads is None else n_threads,
                check_flag(self.progress if progress is None else progress, "progress"))

    def infer(self, X, missing=None, *, method=None, tol=None, max_iter=None, n_threads=None,
              init_mu=None, inner_tol=None, progress=None, max_exact=None):
        """Solve the mean-field problem of every pattern.

        Parameters
        ----------
        X : array_like
            Binary data: (n_patterns, n_visible) for a BeliefNet; (n_nets, n_visible) or
            (n_nets, m, n_visible) for a BeliefNetBatch (one row, or m rows, per net).
        missing : array_like of bool, optional
            Missing visible entries, marginalised exactly: X's shape, or (n_visible,) for
            every pattern (X may hold NaN or any finite value there).
        method : {"sjj", "plefka11", "plefka12", "plefka22", "exact", "hybrid"}, optional
            Default: the model's ``method``.  "sjj": the strict lower bound of Saul, Jaakkola
            & Jordan, by coordinate ascent (every update raises it).  "plefka11/12/22":
            -G of the Plefka schemes of Bhattacharyya & Keerthi, an approximation of ln P(v)
            that is not a bound.  "exact" (a ``BeliefNet``): the exact ln P(v) as ``bound``
            and the exact posterior means as ``mu``, by a junction tree over the positive
            findings' parents on a bipartite noisy-OR net (diseases and findings: every case
            whose largest table is within ``2**25`` entries, typically up to 30-40 positive
            findings on a 600-disease net), else by enumerating the hidden and missing units
            (at most 20); beyond either a ValueError names the size.  On the junction-tree
            path the unrecorded findings' means are not computed (NaN).  "hybrid" (a
            ``BeliefNet`` that is a bipartite noisy-OR net): Jaakkola & Jordan's (1999)
            certified lower bound on ln P(v), some positive findings handled exactly (a
            junction tree whose tables hold at most ``2**16`` entries) and the rest by the
            variational transformation, their parameters raised by EM; the positives join
            the exact part greedily by predicted gain, up to ``max_exact`` of them, and the
            bound never falls as ``max_exact`` grows.  When every positive fits, it is the
            exact answer.  ``mu`` holds the diseases' posteriors under the transformed
            model (the unrecorded findings' NaN).
        tol : float, optional
            Stop an item when its objective changes by less than ``tol`` nats in a sweep
            (with "hybrid": an EM iteration; default 1e-6).  Default: ``infer_tol``.
        max_iter : int, optional
            Most sweeps per item (with "hybrid": EM iterations per EM run; default 200).
            Default: ``infer_max_iter``.
        n_threads : int, optional
            OpenMP threads over items; answers do not depend on it.
        init_mu : array_like of shape (n_items, n_hidden), optional
            Starting means of the hidden units, in unit order.
        inner_tol : float, optional
            Tolerance of each 1-D solve ("sjj").
        progress : bool, optional
            Default: the model's ``progress``.
        max_exact : int, optional
            "hybrid" only: most positive findings handled exactly per pattern; None (the
            default) as many as the junction tree's size allows, 0 none.

        Returns
        -------
        result : BeliefNetResult
            ``bound``, ``converged``, ``n_iter`` per item, ``mu`` and ``xi`` of shape
            ``bound.shape + (n_units,)`` (noisy-OR: ``xi`` holds the q of every edge,
            ``bound.shape + (nnz,)``; None for the Plefka methods).  ``score_samples`` and
            the other methods that need only the bounds or the means do not keep ``xi`` (and
            for noisy-OR "sjj" solve in chunks whose q take at most 32 MB).

        Warns
        -----
        ConvergenceWarning
            When some item's solve reached ``max_iter``.
        RuntimeWarning
            When a Plefka objective leaves the range of a log-probability.
        """
        if max_exact is not None and not (isinstance(method, str) and method == "hybrid"):
            raise ValueError(f"max_exact is for method='hybrid' only, got method={method!r}")
        return self._solve(X, missing, method, tol, max_iter, n_threads, init_mu, inner_tol,
                           progress, max_exact=max_exact)

    def _solve(self, X, missing=None, method=None, tol=None, max_iter=None, n_threads=None,
               init_mu=None, inner_tol=None, progress=None, keep="all", max_exact=None):
        """``infer``, keeping all of the result, or (``keep``) only the means ("mu") or the
        bounds ("bound"): see ``run_dag``."""
        if isinstance(method, str) and method == "exact":
            return self._solve_exact(X, missing, keep)
        if isinstance(method, str) and method == "hybrid":
            return self._solve_hybrid(X, missing, keep, tol, max_iter, max_exact)
        method, tol, max_iter, inner_tol, n_threads, progress = self._check_kwargs(
            method, tol, max_iter, inner_tol, n_threads, progress)
        nets, items, _, _ = self._dag_problem(X, missing)
        r = run_dag(nets, items, method, tol, max_iter, inner_tol, n_threads, init_mu, progress,
                    keep)
        return report(r, f"{type(self).__name__}.infer(method={method!r})")

    def _solve_exact(self, X, missing, keep):
        """``infer(method="exact")``: ``_solve.run_exact`` on the checked arrays."""
        if self._batch:
            raise ValueError("method='exact' is for a BeliefNet; score a batch's nets with "
                             "exact_log_likelihood, or one net at a time (batch[k])")
        _, _, V, miss = self._dag_problem(X, missing, items=False)
        return run_exact(self._bipartite_blocks(), self.W_, self.h_, self.activation,
                         self.visible_, V, miss, keep)

    def _solve_hybrid(self, X, missing, keep, tol, max_iter, max_exact):
        """``infer(method="hybrid")``: ``_solve.run_hybrid`` on the checked arrays."""
        if self._batch:
            raise ValueError("method='hybrid' is for a BeliefNet; solve one net of a batch at "
                             "a time (batch[k])")
        _, _, V, miss = self._dag_problem(X, missing, items=False)
        blocks = self._bipartite_blocks()
        if blocks is None:
            raise ValueError("method='hybrid' needs a bipartite noisy-OR net (diseases above "
                             "findings, as mf.datasets.make_diagnosis_net builds); this net is "
                             f"not one (activation={self.activation!r}): use method='exact' "
                             "(enumeration) or a mean-field method")
        return run_hybrid(blocks, self.n_units, V, miss, keep, tol, max_iter, max_exact)

    def _bipartite_blocks(self):
        """The net's diagnosis-net blocks (``_exact_noisy_or.bipartite_blocks``), or None when
        it is not a bipartite noisy-OR net; kept while W_ and h_ stay the same objects."""
        d = vars(self)
        cached = d.get("_bipartite")
        if cached is not None and cached[0] is d["W_"] and cached[1] is d["h_"]:
            return cached[2]
        blocks = None
        if self.activation == "noisy_or":
            try:
                blocks = bipartite_blocks(self.W_, self.h_, self.visible_, "noisy_or")
            except ValueError:      # not bipartite: enumeration
                blocks = None
        d["_bipartite"] = (d["W_"], d["h_"], blocks)
        return blocks


class BeliefNet(_DagModel):
    """A belief network over a DAG with sigmoid or noisy-OR units.

    Parameters
    ----------
    W : array_like of shape (n_units, n_units)
        ``W[i, j]`` is the weight from unit j to unit i; nonzero only for j < i (units in
        topological order).  Its nonzero pattern is the set of edges, kept by learning.
        The net's weights ``W_`` are a copy of it until ``fit`` learns them: a new ``W`` (or
        ``h``, ``visible``, ``activation``), given before any ``fit``, is used by the next
        call; after ``fit`` it is the start of the next ``fit`` without ``warm_start``.
    h : array_like of shape (n_units,)
        Biases.
    visible : array_like
        A boolean mask of shape (n_units,), or strictly increasing indices of the visible
        units (column k of the data is unit ``visible[k]``).
    activation : {"sigmoid", "noisy_or"}, default="sigmoid"
        Sigmoid units fire with probability 1/(1 + e^{-z}), noisy-OR units with 1 - e^{-z}
        (non-negative weights and biases).  After ``fit``, another activation than the one
        the weights were learned for is refused until the next ``fit``.
    method : {"sjj", "plefka11", "plefka12", "plefka22"}, default="sjj"
        The objective of ``infer``, ``score_samples`` and ``fit``.
    learning_rate : float, optional
        Step of ``fit`` (the gradient summed over a batch, divided by its size).  Default 0.1.
    max_iter : int, default=10
        Epochs of ``fit``.
    batch_size : int, default=100
        Patterns per update; each batch is solved in one parallel call.
    tol : float, optional
        Stop ``fit`` once an epoch's mean objective changes by less than ``tol``.  None: run
        ``max_iter`` epochs.
    warm_start : bool, default=False
        False: ``fit`` starts from ``W`` and ``h``; True: from the current ``W_``, ``h_``.
    infer_tol : float, default=1e-6
        Tolerance of each pattern's mean-field solve (nats per sweep).
    infer_max_iter : int, default=200
        Most sweeps of one solve.
    n_threads : int, optional
        OpenMP threads over patterns.
    random_state : None, int or numpy.random.Generator, default=None
        Seed of the order in which ``fit`` visits patterns.
    progress : bool, default=True
        Show a progress bar on calls that run longer than two seconds.
    callback : callable, optional
        Called as ``callback(epoch, net, mean_objective)`` after each epoch of ``fit``.

    Attributes
    ----------
    W_ : ndarray of shape (n_units, n_units)
        The current weights (a checked float64 copy of ``W``; learned by ``fit``).
    h_ : ndarray of shape (n_units,)
        The current biases.
    visible_ : ndarray of bool of shape (n_units,)
        The visible units.
    history_ : ndarray of shape (`n_iter_`,)
        After ``fit``: the mean objective per pattern in each epoch.
    n_iter_ : int
        Epochs run by the last ``fit``.
    activation_ : str
        After ``fit``: the activation ``W_`` and ``h_`` were learned for.

    See Also
    --------
    BeliefNetBatch : Many nets with one structure, solved in one call.
    SigmoidBeliefNet : Layered sigmoid nets with the Gaussian-approximated bound.

    Examples
    --------
    >>> import numpy as np
    >>> import mfengine as mf
    >>> W = np.tril(np.random.default_rng(0).uniform(0, 1, (6, 6)), -1)
    >>> net = mf.BeliefNet(W, np.full(6, 0.1), visible=[3, 4, 5], activation="noisy_or")
    >>> X = net.sample(50, random_state=0)
    >>> bool(np.all(net.score_samples(X) <= net.exact_log_likelihood(X) + 1e-9))
    True
    """

    _parameter_constraints = {
        **_COMMON_CONSTRAINTS,
        "learning_rate": [LEARNING_RATE],
        "max_iter": [Interval(numbers.Integral, 1, MAX_ITER_LIMIT)],
        "batch_size": [Interval(numbers.Integral, 1, 2**31 - 1)],
        "tol": [None, POSITIVE_TOL],
        "warm_start": [BOOLEAN],
        "random_state": [RANDOM_STATE],
        "callback": [None, CALLABLE],
    }

    def __init__(self, W, h, visible, activation="sigmoid", *, method="sjj", learning_rate=None,
                 max_iter=10, batch_size=100, tol=None, warm_start=False, infer_tol=1e-6,
                 infer_max_iter=200, n_threads=None, random_state=None, progress=True,
                 callback=None):
        self.W = W
        self.h = h
        self.visible = visible
        self.activation = activation
        self.method = method
        self.learning_rate = learning_rate
        self.max_iter = max_iter
        self.batch_size = batch_size
        self.tol = tol
        self.warm_start = warm_start
        self.infer_tol = infer_tol
        self.infer_max_iter = infer_max_iter
        self.n_threads = n_threads
        self.random_state = random_state
        self.progress = progress
        self.callback = callback

    @property
    def parents(self):
        """Each unit's parents: a list of int arrays (the nonzero weights of its row)."""
        s = self.structure
        return [s.par_idx[s.par_ptr[i]:s.par_ptr[i + 1]] for i in range(s.n_units)]

    @property
    def children(self):
        """Each unit's children: a list of int arrays."""
        s = self.structure
        return [s.ch_idx[s.ch_ptr[j]:s.ch_ptr[j + 1]] for j in range(s.n_units)]


    def _set_learned(self, w, h):
        """New weights (an (nnz,) vector on the net's edges) and biases (learning)."""
        self.W_ = self._structure.unpack(w, sparse=_is_sparse(self.W_))
        self.h_ = np.ascontiguousarray(h, dtype=np.float64)
        src = vars(self).get("_src") or {}
        vars(self)["_src"] = {k: v for k, v in src.items() if k == "visible_"}   # W_, h_ learned
        self.activation_ = check_activation(self.activation)

    # ------------------------------------------------------------------ learning
    def fit(self, X, y=None, missing=None):
        """Learn the weights and biases by gradient ascent on the mean-field objective.

        Each step solves the mean-field problem of ``batch_size`` patterns (in parallel,
        warm-started from their previous solutions) and follows the gradient of the objective
        summed over them, times ``learning_rate / batch_size``.  Only existing edges learn.
        Noisy-OR weights are kept >= 0 and biases >= 1e-3.

        Parameters
        ----------
        X : array_like of shape (n_patterns, n_visible)
            Binary training data.
        y : None
            Ignored.
        missing : array_like of bool, optional
            Missing visible entries, marginalised: those with no observed descendant sum
            out of the objective exactly (with every method); the others are free units of
            each solve.

        Returns
        -------
        self : BeliefNet
            The fitted net; ``history_`` holds the mean objective of each epoch.

        Warns
        -----
        ConvergenceWarning
            When ``tol`` is given and not met within ``max_iter`` epochs, or when mean-field
            solves did not converge.
        RuntimeWarning
            When the objective leaves the range of a log-probability (Plefka methods).
        """
        return self._fit(X, missing, partial=False)

    def partial_fit(self, X, y=None, missing=None):
        """One pass of the training rule over ``X`` (scikit-learn's out-of-core convention).

        The patterns of ``X`` are visited in the order given, ``batch_size`` at a time, each
        step as in ``fit``: solve the mean field of the batch (from 0.5), move the weights
        and biases along the gradient.  Every call continues from the current parameters
        (``W_``, ``h_``; ``W`` and ``h`` on the first call) whatever ``warm_start`` says, with
        the first rate of the schedule (``learning_rate``, default 0.1); change
        ``learning_rate`` between calls to follow a schedule.

        The first epoch of ``fit`` equals ``partial_fit(X[order])`` with ``order`` that
        epoch's permutation drawn from ``random_state``; later epochs of ``fit`` warm-start
        each pattern's solve from its previous solution, which a chunk of data does not have.

        Parameters
        ----------
        X : array_like of shape (n_patterns, n_visible)
            Binary training data (one chunk).
        y : None
            Ignored.
        missing : array_like of bool, optional
            Missing visible entries, marginalised: those with no observed descendant sum
            out of the objective exactly (with every method); the others are free units of
            each solve.

        Returns
        -------
        self : BeliefNet
            ``history_`` gains this pass's mean objective per pattern; ``n_iter_`` counts the
            passes.

        Examples
        --------
        >>> import numpy as np
        >>> import mfengine as mf
        >>> W = np.tril(np.full((6, 6), 0.5), -1)
        >>> net = mf.BeliefNet(W, np.full(6, 0.2), visible=[3, 4, 5], progress=False)
        >>> X = net.sample(100, random_state=0)
        >>> net.partial_fit(X[:50]).partial_fit(X[50:]).n_iter_
        2
        """
        return self._fit(X, missing, partial=True)

    def _fit_settings(self):
        """fit's method, solve settings and schedule, validated: (method, infer_tol,
        infer_max_iter, rates, batch_size, tol, progress)."""
        method = check_value(self.method, "method", [Options(*DAG_METHODS)], type(self).__name__)
        _, itol, imax, _ = check_solve_args(method, self.infer_tol, self.infer_max_iter, None,
                                            names=("infer_tol", "infer_max_iter"))
        rates = schedule(self.max_iter, self.learning_rate, 0.1)
        batch_size = check_int(self.batch_size, "batch_size", 1, 2**31 - 1)
        tol = check_tol(self.tol, "tol", allow_none=True)
        progress = check_flag(self.progress, "progress")
        return method, itol, imax, rates, batch_size, tol, progress

    def _fit(self, X, missing, partial):
        """``fit`` (``partial``: ``partial_fit``): the checked parameters and data handed to
        ``mfengine.sbn._learn.fit_items``, the fitted attributes set from its answer."""
        from mfengine._validation import effective_n_threads

        method, itol, imax, rates, batch_size, tol, progress = self._fit_settings()
        callback = check_callback(self.callback)
        past = []
        if partial:
            rates, tol, callback = rates[:1], None, None
            past = list(self.history_) if "history_" in vars(self) else []
        cold = not partial and not check_flag(self.warm_start, "warm_start")
        with _refused_leaves_state(self):
            if cold:
                for k in ("W_", "h_", "visible_"):
                    vars(self).pop(k, None)
            nets, items, _, _ = self._dag_problem(X, missing)
            if items.n == 0:
                raise ValueError(f"Found array with 0 sample(s) (shape={items.clamp.shape}) while "
                                 "a minimum of 1 is required: X has no patterns")
        rng = check_random_state(self.random_state)

        def after_epoch(epoch, w, h, value):
            self._set_learned(w[0], h[0].copy())
            callback(epoch, self, value)
            # the callback may have edited or replaced the parameters: check and use them
            self._params()
            return self._packed_w(), self.h_[None].copy()

        w, h, history, converged = fit_items(
            nets, items, method, itol, imax, rates, batch_size, tol, progress, rng, partial,
            effective_n_threads(self.n_threads), f"fit ({method})",
            None if callback is None else after_epoch)
        return self._finish_fit(w, h, history, converged, past, tol, len(rates), method)

    def _finish_fit(self, w, h, history, converged, past, tol, budget, method):
        self._set_learned(w[0], h[0].copy())
        self._params()
        warn_unconverged(converged, f"BeliefNet.fit(method={method!r}): the mean-field solves",
                         "raise infer_max_iter or loosen infer_tol")
        self.history_ = np.asarray(past + history, dtype=np.float64)
        self.n_iter_ = len(past) + len(history)
        self.n_features_in_ = int(np.count_nonzero(self.visible_))
        if tol is not None and not stop(history, tol):
            warn_unconverged([False], "BeliefNet.fit",
                             f"the mean objective still changed by more than tol={tol} in the "
                             f"last of {budget} epochs; raise max_iter or loosen tol")
        return self

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
            Return the states of every unit instead of the visible ones.

        Returns
        -------
        X : ndarray of shape (n_samples, n_visible), or (n_samples, n_units)
            The sampled states (0.0 or 1.0).
        """
        n_samples = check_int(n_samples, "n_samples", 0, 2**31 - 1)
        return_all = check_flag(return_all, "return_all")
        rng = check_random_state(random_state)
        self._params()
        from mfengine._validation import effective_n_threads
        from mfengine.sbn import _sample

        s = self._structure
        # uniforms from the seeded generator, overwritten by the states in compiled code
        # (O(nnz) per draw over the CSR parent lists; the same draw for any thread count)
        S = _draw_uniforms(rng, (n_samples, s.n_units), n_samples)
        rc = _sample.sample(s.par_ptr, s.par_idx, self._packed_w(),
                            np.ascontiguousarray(self.h_, dtype=np.float64)[None],
                            np.zeros(n_samples, dtype=np.intp), S,
                            self.activation == "noisy_or", effective_n_threads(self.n_threads))
        if rc != _sample.STATUS_OK:
            raise RuntimeError(f"mfengine: the sampling kernel refused its arguments (status {rc})")
        return S if return_all else S[:, self.visible_]

    def log_joint(self, S):
        """The log-probability ln P(S) of complete configurations.

        Parameters
        ----------
        S : array_like of shape (n, n_units)
            Binary states of every unit.

        Returns
        -------
        log_p : ndarray of shape (n,)
            The log-probability of each configuration, in nats.
        """
        self._params()
        S = as_float_matrix(S, "S", n_cols=self.W_.shape[0])
        check_binary(S, "S")
        return log_joint_checked(self._log_joint(S))

    def _log_joint(self, S):
        """ln P of the configurations S and where it overflowed (``sum_log_probs``)."""
        if _is_sparse(self.W_):
            flat = S.reshape(-1, S.shape[-1])
            z = np.asarray((self.W_ @ flat.T).T).reshape(S.shape) + self.h_
        else:
            z = S @ self.W_.T + self.h_
        l1, l0 = log_probs(z, self.activation)
        return sum_log_probs(S, l1, l0)

    def _check_data(self, X, missing=None):
        return check_dag_data(X, missing, int(self.visible_.sum()))

    def exact_log_likelihood(self, X, missing=None, max_hidden=MAX_ENUMERATED_HIDDEN):
        """Exact ln P(x) per pattern, by enumeration or, on a diagnosis net, a junction tree.

        The sum runs over every joint state of the hidden units (and of missing visible
        ones), except the units with no observed descendant (a missing leaf, an unobserved
        chain below it): those sum out exactly (their factors sum to 1) and are dropped
        before enumerating, so they do not count towards ``max_hidden``.  Where that leaves
        more than ``max_hidden`` units on a bipartite noisy-OR net (diseases above findings,
        as ``mf.datasets.make_diagnosis_net`` builds), the patterns are scored by the
        junction tree of ``infer(method="exact")`` instead (``score_samples(X, missing,
        method="exact")``), which is exact for any number of diseases and limited by the
        tree's width.

        Parameters
        ----------
        X : array_like of shape (n_patterns, n_visible)
            Binary data.
        missing : array_like of bool, optional
            Missing visible entries, summed out.
        max_hidden : int, default=20
            Refuse to enumerate more units than this (units that sum out exactly are not
            counted).

        Returns
        -------
        log_p : ndarray of shape (n_patterns,)
            The log-probability ln P(x) of each pattern, in nats.

        Raises
        ------
        ValueError
            When more than ``max_hidden`` units would be summed over on a net that is not
            bipartite noisy-OR, or when a diagnosis case's junction tree is too wide.

        Examples
        --------
        >>> import numpy as np
        >>> import mfengine as mf
        >>> net = mf.datasets.make_diagnosis_net(8, 200, 3, random_state=0)
        >>> X = net.sample(2, random_state=1)
        >>> missing = np.zeros(X.shape, dtype=bool)
        >>> missing[:, 20:] = True                    # 180 unrecorded findings (leaves)
        >>> net.exact_log_likelihood(X, missing).shape
        (2,)
        """
        self._params()
        V, miss = self._check_data(X, missing)
        max_hidden = check_int(max_hidden, "max_hidden", 0, 2**31 - 1)
        vis = np.flatnonzero(self.visible_)
        Vz = np.where(np.isfinite(V), V, 0.0)
        out = np.empty(V.shape[0])
        if miss is None:
            groups = [(np.zeros(vis.size, dtype=bool), np.arange(V.shape[0]))]
        else:
            keys, inverse = np.unique(miss, axis=0, return_inverse=True)
            groups = [(keys[g], np.flatnonzero(inverse.ravel() == g)) for g in range(len(keys))]
        for mask, rows in groups:
            # a missing visible unit is summed over like a hidden one (it may have children);
            # units with no observed descendant sum out exactly and are left out
            free = ~self.visible_.copy()
            free[vis[mask]] = True
            keep = self._observed_ancestry(~free)
            summed = np.flatnonzero(free & keep)
            if summed.size > max_hidden and not self._batch \
                    and self._bipartite_blocks() is not None:
                out[rows] = self._solve_exact(Vz[rows], None if miss is None else miss[rows],
                                              "bound").bound
                continue
            if summed.size > max_hidden:
                raise ValueError(
                    f"exact_log_likelihood enumerates 2**(hidden + missing) states; here that is "
                    f"{summed.size} units (those with an observed descendant), above "
                    f"max_hidden={max_hidden}"
                )
            if keep.all():
                out[rows] = self._enumerate(Vz[rows][:, ~mask], vis[~mask], summed)
            else:
                out[rows] = self._enumerate_kept(Vz[rows][:, ~mask], vis[~mask], summed, keep)
        return out

    def _observed_ancestry(self, observed):
        """The units that are observed or have an observed descendant (boolean mask); the
        others (the units a missing-data sum leaves barren) sum out exactly.  Every parent of
        such a unit is one too."""
        s = self._structure
        keep = np.asarray(observed, dtype=bool).copy()
        frontier = np.flatnonzero(keep)
        while frontier.size:
            lo, hi = s.par_ptr[frontier], s.par_ptr[frontier + 1]
            if not np.any(hi > lo):
                break
            idx = np.concatenate([s.par_idx[a:b] for a, b in zip(lo, hi)])
            new = np.unique(idx[~keep[idx]])
            keep[new] = True
            frontier = new
        return keep

    def _enumerate_kept(self, v, clamped, summed, keep):
        """``_enumerate`` over the units ``keep`` only (closed under parents): the factors of
        the other units are left out (they sum to 1)."""
        K = summed.size
        n_units = self.W_.shape[0]
        states = ((np.arange(2**K)[:, None] >> np.arange(K)) & 1).astype(np.float64)
        out = np.empty(v.shape[0])
        chunk = max(1, 2**21 // max(1, 2**K * n_units))
        W = self.W_[keep][:, keep] if _is_sparse(self.W_) else self.W_[np.ix_(keep, keep)]
        h = self.h_[keep]
        pos = np.cumsum(keep) - 1                   # a kept unit's column in the sub-net
        for start in range(0, v.shape[0], chunk):
            vc = v[start : start + chunk]
            S = np.empty((vc.shape[0], 2**K, h.size))
            S[:, :, pos[summed]] = states[None, :, :]
            S[:, :, pos[clamped]] = vc[:, None, :]
            if _is_sparse(W):
                flat = S.reshape(S.shape[0] * S.shape[1], h.size)
                z = np.asarray((W @ flat.T).T).reshape(S.shape) + h
            else:
                z = S @ W.T + h
            l1, l0 = log_probs(z, self.activation)
            out[start : start + chunk] = log_sum_states(sum_log_probs(S, l1, l0), axis=1)
        return out

    def _enumerate(self, v, clamped, summed):
        """ln sum over the states of ``summed`` of P(S), with units ``clamped`` set to v."""
        K = summed.size
        n_units = self.W_.shape[0]
        states = ((np.arange(2**K)[:, None] >> np.arange(K)) & 1).astype(np.float64)
        out = np.empty(v.shape[0])
        chunk = max(1, 2**21 // max(1, 2**K * n_units))
        for start in range(0, v.shape[0], chunk):
            vc = v[start : start + chunk]
            S = np.empty((vc.shape[0], 2**K, n_units))
            S[:, :, summed] = states[None, :, :]
            S[:, :, clamped] = vc[:, None, :]
            out[start : start + chunk] = log_sum_states(self._log_joint(S), axis=1)
        return out

    # --- dask hooks
    # The data-parallel fit of mfengine._dask: it hands over a Partitions object (the row
    # blocks of a dask array) and imports nothing from this module.
    def _dask_fit(self, parts, y=None):
        """``fit`` on a dask array: ``mfengine.sbn._learn.fit_partitions`` (each mini-batch's
        gradient summed over the partitions).  ``parts``: a ``mfengine._dask.Partitions``.
        No callback and no ``missing``."""
        method, itol, imax, rates, batch_size, tol, progress = self._fit_settings()
        if check_callback(self.callback) is not None:
            raise ValueError("BeliefNet.fit on a dask array does not take a callback")
        with _refused_leaves_state(self):
            if not check_flag(self.warm_start, "warm_start"):
                for k in ("W_", "h_", "visible_"):
                    vars(self).pop(k, None)
            nets = self._nets()
            if int(parts.offsets[-1]) == 0:
                raise ValueError("X has no patterns: fit needs at least one")
            check = functools.partial(check_dag_data, n_visible=int(self.visible_.sum()))
            parts.map(check_partition, check)
        w, h, history, converged = fit_partitions(
            nets, parts, check, method, itol, imax, rates, batch_size, tol, progress,
            check_random_state(self.random_state), f"fit ({method}, dask)")
        return self._finish_fit(w, h, history, converged, [], tol, len(rates), method)


@contextlib.contextmanager
def _refused_leaves_state(net):
    """A fit refused while it sets up (its parameters or data) leaves the net as it was: the
    cold start's dropped W_, h_, visible_ (and everything else) come back."""
    state = dict(vars(net))
    try:
        yield
    except BaseException:
        vars(net).clear()
        vars(net).update(state)
        raise
