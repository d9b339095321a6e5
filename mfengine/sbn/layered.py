"""Layered sigmoid belief networks (Saul & Jordan): the model, exact enumeration and learning.

Layers are listed top first; the last layer is visible.  Unit i of layer l+1 fires with
probability ``sigmoid(biases[l+1][i] + weights[l][i] @ S^l)``; top-layer units with
``sigmoid(biases[0])``.
"""
import numbers

import numpy as np

from mfengine._validation import (
    as_float_matrix,
    check_binary,
    check_missing,
    check_random_state,
    check_sizes,
    sizes_from_biases,
)

__all__ = ["SigmoidBeliefNet", "MAX_ENUMERATED_HIDDEN"]

#: Largest number of hidden units that ``exact_log_likelihood`` enumerates by default
#: (2**20 joint hidden states).
MAX_ENUMERATED_HIDDEN = 20

# The paper's schedule (Saul & Jordan, section 3): 0.02 for four epochs, then 0.005 for four.
PAPER_SCHEDULE = (0.02,) * 4 + (0.005,) * 4


def _log_sigmoid(x):
    return -np.logaddexp(0.0, -x)


def _entropy(p):
    with np.errstate(divide="ignore", invalid="ignore"):
        h = -p * np.log(p) - (1.0 - p) * np.log1p(-p)
    return np.where((p <= 0.0) | (p >= 1.0), 0.0, h)


class SigmoidBeliefNet:
    """A layered sigmoid belief network.

    Parameters
    ----------
    sizes : sequence of int
        Units per layer, top layer first; the last entry is the number of visible units.
        At least two layers.
    weight_scale : float, default 1.0
        Initial weights are drawn from N(0, weight_scale**2 / fan_in); biases start at zero.
    random_state : None, int or numpy.random.Generator
        Seed for the initial weights.

    Attributes
    ----------
    sizes : tuple of int
    weights : list of ndarray
        ``weights[l]`` has shape ``(sizes[l+1], sizes[l])``: from layer l to layer l+1.
    biases : list of ndarray
        ``biases[l]`` has shape ``(sizes[l],)``.
    """

    def __init__(self, sizes, weight_scale=1.0, random_state=None):
        sizes = self._check_sizes(sizes)
        if not (isinstance(weight_scale, numbers.Real) and np.isfinite(weight_scale) and weight_scale >= 0):
            raise ValueError(f"weight_scale must be a finite non-negative number, got {weight_scale!r}")
        rng = check_random_state(random_state)
        weights = [
            rng.normal(0.0, weight_scale / np.sqrt(sizes[l]), size=(sizes[l + 1], sizes[l]))
            for l in range(len(sizes) - 1)
        ]
        biases = [np.zeros(n) for n in sizes]
        self._set(weights, biases)

    # ------------------------------------------------------------------ construction
    _check_sizes = staticmethod(check_sizes)

    @classmethod
    def from_params(cls, weights, biases):
        """Build a network from ``weights`` (list of (sizes[l+1], sizes[l]) arrays) and
        ``biases`` (list of (sizes[l],) arrays).  The arrays are copied."""
        net = cls.__new__(cls)
        weights = list(weights)
        biases = list(biases)
        if len(biases) != len(weights) + 1 or len(weights) < 1:
            raise ValueError(
                f"need one bias vector per layer and one weight matrix between layers; got "
                f"{len(weights)} weight matrices and {len(biases)} bias vectors"
            )
        sizes = sizes_from_biases(biases)
        W = []
        for l, w in enumerate(weights):
            w = np.array(w, dtype=np.float64, order="C")
            if w.shape != (sizes[l + 1], sizes[l]):
                raise ValueError(
                    f"weights[{l}] must have shape {(sizes[l + 1], sizes[l])} to match biases, got {w.shape}"
                )
            if not np.all(np.isfinite(w)):
                raise ValueError(f"weights[{l}] contains NaN or infinite values")
            W.append(w)
        B = []
        for l, b in enumerate(biases):
            b = np.array(b, dtype=np.float64)
            if not np.all(np.isfinite(b)):
                raise ValueError(f"biases[{l}] contains NaN or infinite values")
            B.append(b)
        net._set(W, B)
        return net

    def _set(self, weights, biases):
        self.weights = weights
        self.biases = biases

    def copy(self):
        """A deep copy of the network."""
        return type(self).from_params(self.weights, self.biases)

    def to_dag(self):
        """The same network as a ``BeliefNet`` over a DAG: units numbered layer by layer, top
        first; the bottom layer visible; sigmoid units."""
        from mfengine.sbn.dag import BeliefNet

        sizes = self.sizes
        off = np.concatenate([[0], np.cumsum(sizes)])
        W = np.zeros((off[-1], off[-1]))
        for l, w in enumerate(self.weights):
            W[off[l + 1] : off[l + 2], off[l] : off[l + 1]] = w
        visible = np.zeros(off[-1], dtype=bool)
        visible[off[-2] :] = True
        return BeliefNet(W, np.concatenate(self.biases), visible, activation="sigmoid")

    @property
    def sizes(self):
        return tuple(b.shape[0] for b in self.biases)

    @property
    def n_visible(self):
        return self.biases[-1].shape[0]

    @property
    def n_hidden(self):
        return sum(b.shape[0] for b in self.biases[:-1])

    @property
    def n_weights(self):
        return sum(w.size for w in self.weights)

    def __repr__(self):
        return f"SigmoidBeliefNet(sizes={list(self.sizes)})"

    # ------------------------------------------------------------------ checks
    def _check_params(self):
        """Re-validate parameters that users may have edited in place.

        Parameters replaced by arrays of another numeric dtype (or by lists) are converted to
        float64 arrays in place, so the kernels (and ``fit``'s in-place updates) see float64."""
        if len(self.biases) != len(self.weights) + 1 or len(self.weights) < 1:
            raise ValueError(
                f"need one bias vector per layer and one weight matrix between layers; got "
                f"{len(self.weights)} weight matrices and {len(self.biases)} bias vectors"
            )
        for name, arrays, ndim in (("biases", self.biases, 1), ("weights", self.weights, 2)):
            for l, a in enumerate(arrays):
                arr = np.asarray(a)
                if arr.dtype.kind not in "biuf":
                    raise TypeError(f"{name}[{l}] must be numeric, got dtype {arr.dtype}")
                if arr.ndim != ndim:
                    raise ValueError(f"{name}[{l}] must be {ndim}-D, got shape {arr.shape}")
                if arr.dtype != np.float64:
                    arrays[l] = arr.astype(np.float64)
        sizes = self.sizes
        for l, w in enumerate(self.weights):
            if w.shape != (sizes[l + 1], sizes[l]):
                raise ValueError(f"weights[{l}] has shape {w.shape}, expected {(sizes[l + 1], sizes[l])}")
            if not np.all(np.isfinite(w)):
                raise ValueError(f"weights[{l}] contains NaN or infinite values")
        for l, b in enumerate(self.biases):
            if not np.all(np.isfinite(b)):
                raise ValueError(f"biases[{l}] contains NaN or infinite values")

    def _check_solution(self, mu, xi, n, name):
        """mu and xi (one (n, sizes[l]) array per layer, as in an InferenceResult) as float64
        arrays, refusing wrong shapes and values outside [0, 1].  The visible entry of mu is
        not checked and comes back as None (the callers replace it by the data)."""
        sizes = self.sizes
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

    def _check_data(self, V, missing=None, name="V"):
        V = as_float_matrix(V, name, n_cols=self.n_visible, allow_nan=missing is not None)
        miss = check_missing(missing, V.shape)
        if miss is not None:
            bad = ~np.isfinite(V) & ~miss.astype(bool)
            if np.any(bad):
                raise ValueError(f"{name} contains NaN or infinite values at entries not marked missing")
            check_binary(V, name, ignore=miss.astype(bool))
        else:
            check_binary(V, name)
        return V, miss

    # ------------------------------------------------------------------ generative model
    def sample(self, n, random_state=None, return_all=False):
        """Draw ``n`` patterns by ancestral sampling.

        Returns the (n, n_visible) visible vectors, or with ``return_all=True`` a list with one
        (n, sizes[l]) array per layer.
        """
        if not isinstance(n, numbers.Integral) or n < 0:
            raise ValueError(f"n must be a non-negative integer, got {n!r}")
        rng = check_random_state(random_state)
        self._check_params()
        layers = []
        p = np.broadcast_to(1.0 / (1.0 + np.exp(-self.biases[0])), (n, self.sizes[0]))
        S = (rng.random(p.shape) < p).astype(np.float64)
        layers.append(S)
        for w, b in zip(self.weights, self.biases[1:]):
            p = 1.0 / (1.0 + np.exp(-(S @ w.T + b)))
            S = (rng.random(p.shape) < p).astype(np.float64)
            layers.append(S)
        return layers if return_all else layers[-1]

    def log_joint(self, layers):
        """ln P(S) for complete configurations given as one (n, sizes[l]) array per layer."""
        if len(layers) != len(self.sizes):
            raise ValueError(f"layers must hold one array per layer ({len(self.sizes)}), got {len(layers)}")
        return self._log_joint_top(layers)

    def _log_joint_top(self, layers):
        """ln P of the top ``len(layers)`` layers' states (the layers below summed out)."""
        z = np.broadcast_to(self.biases[0], layers[0].shape)
        total = np.sum(layers[0] * z - np.logaddexp(0.0, z), axis=1)
        for l in range(len(layers) - 1):
            z = layers[l] @ self.weights[l].T + self.biases[l + 1]
            total += np.sum(layers[l + 1] * z - np.logaddexp(0.0, z), axis=1)
        return total

    def exact_log_likelihood(self, V, missing=None, max_hidden=MAX_ENUMERATED_HIDDEN):
        """Exact ln P(v) per pattern by enumerating every joint hidden state.

        Missing visible units (``missing`` True) are summed out exactly.  The cost is
        2**n_hidden hidden states; above ``max_hidden`` hidden units a ValueError is raised.
        """
        self._check_params()
        V, miss = self._check_data(V, missing)
        H = self.n_hidden
        if H > max_hidden:
            raise ValueError(
                f"exact_log_likelihood enumerates 2**n_hidden states; this net has {H} hidden "
                f"units, above max_hidden={max_hidden}"
            )
        obs = None if miss is None else 1.0 - miss
        Vz = np.where(np.isfinite(V), V, 0.0)
        sizes = self.sizes
        nh_last = sizes[-2]
        n_upper = H - nh_last
        # log prior of every state of the last hidden layer, summing out the layers above
        last_states = ((np.arange(2**nh_last)[:, None] >> np.arange(nh_last)) & 1).astype(np.float64)
        if n_upper == 0:
            z = self.biases[0]
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
                zl = layers[-1] @ self.weights[-2].T + self.biases[-2]  # (chunk, nh_last)
                lp = last_states @ zl.T - np.sum(np.logaddexp(0.0, zl), axis=1)[None, :]
                lp = lp + lp_upper[None, :]  # (2**nh_last, chunk)
                log_prior_last = np.logaddexp(log_prior_last, _logsumexp(lp, axis=1))
        zv = last_states @ self.weights[-1].T + self.biases[-1]  # (2^nl, n_vis)
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
            out[start : start + step] = _logsumexp(ll + log_prior_last[None, :], axis=1)
        return out

    # ------------------------------------------------------------------ the bound
    def evaluate_bound(self, V, mu, xi, missing=None):
        """The Gaussian-approximated bound L(mu, xi) per pattern (Saul & Jordan eq. 24), in nats.

        ``mu`` and ``xi`` are lists with one (n, sizes[l]) array per layer (as in an
        ``InferenceResult``); the visible entry of ``mu`` is ignored and replaced by ``V``.
        A plain NumPy evaluation, used for checks and by the training loop's diagnostics.
        """
        self._check_params()
        V, miss = self._check_data(V, missing)
        mu, xi = self._check_solution(mu, xi, V.shape[0], "")
        mu = mu[:-1] + [np.where(np.isfinite(V), V, 0.0)]
        total = np.zeros(V.shape[0])
        for l in range(len(self.sizes)):
            if l == 0:
                m = np.broadcast_to(self.biases[0], mu[0].shape)
                s = np.zeros_like(m)
            else:
                m = mu[l - 1] @ self.weights[l - 1].T + self.biases[l]
                s = (mu[l - 1] * (1.0 - mu[l - 1])) @ (self.weights[l - 1] ** 2).T
            term = mu[l] * m - 0.5 * xi[l] ** 2 * s - np.logaddexp(0.0, m + (0.5 - xi[l]) * s)
            if l == len(self.sizes) - 1:
                if miss is not None:
                    term = term * (1.0 - miss)
            else:
                term = term + _entropy(mu[l])
            total += term.sum(axis=1)
        return total

    def gradient(self, V, result=None, missing=None, **infer_kwargs):
        """Gradient of the summed bound with respect to the weights and biases.

        At the mean-field solution ``result`` (computed with ``mfengine.infer`` when not given)
        this is Saul & Jordan eqs. 10-11, written without assuming xi sits exactly at its fixed
        point:  dL/dh_i = mu_i - sig_i,
        dL/dJ_ij = (mu_i - sig_i) mu_j - J_ij mu_j (1 - mu_j) (xi_i^2 + (1 - 2 xi_i) sig_i),
        with sig_i = sigmoid(m_i + (1/2 - xi_i) s_i)  (= xi_i at the fixed point).

        Returns ``(grad_weights, grad_biases)``: lists shaped like ``weights`` and ``biases``,
        summed over patterns.
        """
        from mfengine.inference import infer

        self._check_params()
        V, miss = self._check_data(V, missing)
        if result is None:
            result = infer(self, V, missing=missing, **infer_kwargs)
        mu, xi = self._check_solution(result.mu, result.xi, V.shape[0], "result.")
        return self._gradient_from_solution(V, miss, mu, xi)

    def _gradient_from_solution(self, V, miss, mu, xi):
        mu = list(mu[:-1]) + [np.where(np.isfinite(V), V, 0.0)]
        gW, gb = [], []
        for l in range(len(self.sizes)):
            if l == 0:
                m = np.broadcast_to(self.biases[0], mu[0].shape)
                s = 0.0
            else:
                var = mu[l - 1] * (1.0 - mu[l - 1])
                m = mu[l - 1] @ self.weights[l - 1].T + self.biases[l]
                s = var @ (self.weights[l - 1] ** 2).T
            sig = 1.0 / (1.0 + np.exp(-(m + (0.5 - xi[l]) * s)))
            delta = mu[l] - sig
            if l == len(self.sizes) - 1 and miss is not None:
                obs = 1.0 - miss
                delta = delta * obs
            gb.append(delta.sum(axis=0))
            if l > 0:
                q = xi[l] ** 2 + (1.0 - 2.0 * xi[l]) * sig
                if l == len(self.sizes) - 1 and miss is not None:
                    q = q * obs
                gW.append(delta.T @ mu[l - 1] - self.weights[l - 1] * (q.T @ var))
        return gW, gb

    # ------------------------------------------------------------------ learning
    def _fit_dag(self, *args):
        return _fit_dag_impl(self, *args)

    def fit(
        self,
        V,
        epochs=None,
        learning_rate=None,
        batch_size=1,
        method="gaussian",
        init_visible_biases=True,
        warm_start=False,
        missing=None,
        tol=1e-4,
        max_sweeps=100,
        n_threads=None,
        random_state=None,
        progress=True,
        callback=None,
    ):
        """Learn the weights and biases by gradient ascent on the mean-field bound.

        Each step solves the mean-field equations for a batch of patterns, then moves the
        parameters along the exact gradient of the bound at those solutions (as ``gradient``
        computes it), scaled by ``learning_rate / batch_size``.  ``batch_size=1`` is the paper's
        on-line rule.  Each epoch runs compiled, without the GIL.

        Parameters
        ----------
        V : (n, n_visible) binary array
        epochs : int, optional
            Passes over the data.  Default: the length of ``learning_rate`` if it is a sequence,
            else 8.
        learning_rate : float or sequence of float, optional
            One rate for every epoch, or one per epoch.  Default: the paper's schedule,
            0.02 for four epochs then 0.005 for four.
        batch_size : int, default 1
        method : {"gaussian", "sjj", "plefka11", "plefka12", "plefka22"}
            The objective.  The DAG methods train the net as a ``BeliefNet`` (see
            ``BeliefNet.fit``: batches solved in parallel, ``learning_rate`` a single number,
            default 0.1, ``epochs`` default 10; ``init_visible_biases`` and ``warm_start`` do
            not apply, each pattern always restarts from its previous solution).
        init_visible_biases : bool, default True
            First set the visible biases to the logits of the pixel means (the paper's first
            pass through the data).
        warm_start : bool, default False
            Start each pattern's mean-field solve from its solution in the previous epoch.
        missing : boolean mask, optional
            Missing visible entries, left out of the bound.
        tol, max_sweeps : stopping rule of each pattern's mean-field solve (see ``mfengine.infer``).
        n_threads : accepted for symmetry with ``infer``; an epoch runs on one thread (its
            updates are sequential).  Train several networks at once from Python threads: the
            compiled epoch releases the GIL.
        random_state : seed for the order in which patterns are visited.
        progress : bool, default True
            Show a progress bar (needs tqdm).
        callback : callable, optional
            Called as ``callback(epoch, net, mean_bound)`` after each epoch.

        Returns
        -------
        history : ndarray of shape (epochs,)
            The mean bound per pattern (nats) over each epoch, each pattern scored at its
            mean-field solution just before its update (the quantity of the paper's Fig. 2).
        """
        from mfengine._progress import progress_bar
        from mfengine.inference import _inner_tol
        from mfengine.sbn import _gaussian

        from mfengine.inference import DAG_METHODS

        if method in DAG_METHODS:
            return self._fit_dag(V, method, epochs, learning_rate, batch_size, missing, tol,
                                 max_sweeps, n_threads, random_state, progress, callback)
        if method != "gaussian":
            raise ValueError(f"method must be one of {('gaussian',) + DAG_METHODS}, got {method!r}")
        self._check_params()
        V, miss = self._check_data(V, missing)
        n = V.shape[0]
        if n == 0:
            raise ValueError("V has no patterns")
        rates = _schedule(epochs, learning_rate)
        if not isinstance(batch_size, numbers.Integral) or batch_size < 1:
            raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")
        if not (isinstance(tol, numbers.Real) and tol > 0):
            raise ValueError(f"tol must be a positive number, got {tol!r}")
        if not isinstance(max_sweeps, numbers.Integral) or max_sweeps < 1:
            raise ValueError(f"max_sweeps must be a positive integer, got {max_sweeps!r}")
        rng = check_random_state(random_state)
        if init_visible_biases:
            if miss is None:
                p = V.mean(axis=0)
            else:
                obs = 1.0 - miss
                p = (np.where(obs > 0, V, 0.0)).sum(axis=0) / np.maximum(obs.sum(axis=0), 1.0)
            p = np.clip(p, 1.0 / (n + 2), 1.0 - 1.0 / (n + 2))
            self.biases[-1] = np.log(p) - np.log1p(-p)
        Vk = np.where(np.isfinite(V), V, 0.0) if miss is not None else V
        n_units = sum(self.sizes)
        state = np.full((n, n_units), 0.5)
        history = np.empty(len(rates))
        batches_per_epoch = (n + batch_size - 1) // batch_size
        bar = progress_bar(total=len(rates) * batches_per_epoch, desc="fit", disable=not progress,
                           unit="batch")
        try:
            for epoch, lr in enumerate(rates):
                if not warm_start:
                    state[:, : self.n_hidden] = 0.5
                order = rng.permutation(n).astype(np.intp)
                total = _gaussian.fit_epoch(self, Vk, miss, order, float(lr), int(batch_size),
                                            float(tol), _inner_tol(tol), int(max_sweeps), state,
                                            bar.update)
                history[epoch] = total / n
                bar.set_postfix(bound=f"{history[epoch]:.3f}")
                if callback is not None:
                    callback(epoch, self, history[epoch])
        finally:
            bar.close()
        return history


def _fit_dag_impl(self, V, method, epochs, learning_rate, batch_size, missing, tol, max_sweeps,
                  n_threads, random_state, progress, callback):
    if missing is not None:
        raise ValueError(f"missing is not supported by fit with method={method!r}")
    if learning_rate is not None and not isinstance(learning_rate, numbers.Real):
        raise ValueError(f"method={method!r} takes one learning_rate, got {learning_rate!r}")
    self._check_params()
    dag = self.to_dag()
    sizes = self.sizes
    off = np.concatenate([[0], np.cumsum(sizes)])

    def copy_back(d):
        for l in range(len(self.weights)):
            self.weights[l][...] = d.W[off[l + 1]:off[l + 2], off[l]:off[l + 1]]
        for l in range(len(self.biases)):
            self.biases[l][...] = d.h[off[l]:off[l + 1]]

    def cb(epoch, d, value):
        copy_back(d)
        if callback is not None:
            callback(epoch, self, value)

    history = dag.fit(V, method=method, epochs=10 if epochs is None else epochs,
                      learning_rate=0.1 if learning_rate is None else learning_rate,
                      batch_size=batch_size, tol=tol, max_sweeps=max_sweeps,
                      n_threads=n_threads, random_state=random_state, progress=progress,
                      callback=cb)
    copy_back(dag)
    return history


def _schedule(epochs, learning_rate):
    if learning_rate is None:
        rates = list(PAPER_SCHEDULE) if epochs is None else [PAPER_SCHEDULE[0]] * int(epochs)
    elif isinstance(learning_rate, numbers.Real):
        rates = [float(learning_rate)] * (8 if epochs is None else int(epochs))
    else:
        rates = [float(r) for r in learning_rate]
        if epochs is not None and int(epochs) != len(rates):
            raise ValueError(
                f"epochs={epochs} does not match the {len(rates)} per-epoch learning rates given"
            )
    if epochs is not None and (not isinstance(epochs, numbers.Integral) or epochs < 1):
        raise ValueError(f"epochs must be a positive integer, got {epochs!r}")
    if any(not np.isfinite(r) or r < 0 for r in rates):
        raise ValueError(f"learning rates must be finite and non-negative, got {rates}")
    return rates


def _logsumexp(a, axis):
    amax = np.max(a, axis=axis, keepdims=True)
    amax = np.where(np.isfinite(amax), amax, 0.0)
    out = np.log(np.sum(np.exp(a - amax), axis=axis, keepdims=True)) + amax
    return np.squeeze(out, axis=axis)
