"""Belief networks over any DAG: sigmoid or noisy-OR units (Saul, Jaakkola & Jordan;
Bhattacharyya & Keerthi).

Units are in topological order.  Unit i fires with probability f(z_i), with
``z_i = h[i] + sum_{j < i} W[i, j] S_j`` and f the sigmoid 1/(1 + e^{-z}), or the noisy-OR
1 - e^{-z} (non-negative weights and biases).  A boolean mask says which units are visible.

This module holds the models (one net, or a batch of nets sharing a structure), ancestral
sampling and exact enumeration; ``mf.infer`` runs the mean-field methods on them.
"""
import numbers

import numpy as np

from mfengine._validation import as_float_matrix, check_binary, check_missing, check_random_state

__all__ = ["BeliefNet", "BeliefNetBatch", "DagStructure", "ACTIVATIONS"]

ACTIVATIONS = ("sigmoid", "noisy_or")

#: Largest number of hidden units that ``exact_log_likelihood`` enumerates by default.
MAX_ENUMERATED_HIDDEN = 20


def _log_probs(z, activation):
    """ln f(z) and ln(1 - f(z)), stably (for noisy-OR, ln f(0) = -inf)."""
    if activation == "sigmoid":
        return -np.logaddexp(0.0, -z), -np.logaddexp(0.0, z)
    # noisy-OR: f = 1 - e^{-z}; ln f = log(-expm1(-z)), ln(1 - f) = -z
    with np.errstate(divide="ignore"):
        return np.log(-np.expm1(-z)), -z


def _logsumexp(a, axis):
    amax = np.max(a, axis=axis, keepdims=True)
    amax = np.where(np.isfinite(amax), amax, 0.0)
    with np.errstate(divide="ignore"):
        out = np.log(np.sum(np.exp(a - amax), axis=axis, keepdims=True)) + amax
    return np.squeeze(out, axis=axis)


class DagStructure:
    """The sparsity pattern of a DAG in the compressed form every DAG kernel reads.

    Built from a boolean (n_units, n_units) mask of nonzero weights (``mask[i, j]``: an edge
    from j to i, j < i).  All arrays are C-contiguous ``intp``:

    par_ptr (n_units + 1,), par_idx (nnz,)
        The parents of unit i are ``par_idx[par_ptr[i]:par_ptr[i + 1]]``, ascending.  The
        weights of the edges are stored in this same order: ``w[k]`` is the weight of the
        edge ``par_idx[k] -> i``, so a net's weights are one (nnz,) vector, and a batch of nets
        sharing the pattern is an (n_nets, nnz) array.
    ch_ptr (n_units + 1,), ch_idx (nnz,), ch_w (nnz,)
        The children of unit j are ``ch_idx[ch_ptr[j]:ch_ptr[j + 1]]``, ascending; the weight
        of the edge j -> ``ch_idx[k]`` is ``w[ch_w[k]]``.
    """

    def __init__(self, mask):
        mask = np.asarray(mask, dtype=bool)
        n = mask.shape[0]
        rows, cols = np.nonzero(mask)  # row-major: grouped by child i, parents ascending
        self.n_units = n
        self.nnz = rows.size
        self.par_ptr = np.zeros(n + 1, dtype=np.intp)
        np.cumsum(np.bincount(rows, minlength=n), out=self.par_ptr[1:])
        self.par_idx = np.ascontiguousarray(cols, dtype=np.intp)
        order = np.lexsort((rows, cols))  # grouped by parent j, children ascending
        self.ch_ptr = np.zeros(n + 1, dtype=np.intp)
        np.cumsum(np.bincount(cols, minlength=n), out=self.ch_ptr[1:])
        self.ch_idx = np.ascontiguousarray(rows[order], dtype=np.intp)
        self.ch_w = np.ascontiguousarray(order, dtype=np.intp)
        self._rows = rows
        self._cols = cols

    def pack(self, W):
        """The (..., nnz) weight vectors of dense (..., n_units, n_units) matrices ``W``."""
        return np.ascontiguousarray(np.asarray(W, dtype=np.float64)[..., self._rows, self._cols])

    def unpack(self, w):
        """Dense (..., n_units, n_units) matrices from (..., nnz) weight vectors ``w``."""
        w = np.asarray(w, dtype=np.float64)
        out = np.zeros(w.shape[:-1] + (self.n_units, self.n_units))
        out[..., self._rows, self._cols] = w
        return out

    def same_as(self, other):
        return (self.n_units == other.n_units and self.nnz == other.nnz
                and np.array_equal(self.par_idx, other.par_idx)
                and np.array_equal(self.par_ptr, other.par_ptr))


class _VisibleUnits:
    """Unit counts from the ``visible`` mask (shared by BeliefNet and BeliefNetBatch)."""

    @property
    def n_visible(self):
        return int(self.visible.sum())

    @property
    def n_hidden(self):
        return self.n_units - self.n_visible


class BeliefNet(_VisibleUnits):
    """A belief network over a DAG with sigmoid or noisy-OR units.

    Parameters
    ----------
    W : (n_units, n_units) array
        ``W[i, j]`` is the weight from unit j to unit i; nonzero only for j < i (units in
        topological order).
    h : (n_units,) array
        Biases.
    visible : (n_units,) boolean mask, or a sequence of visible unit indices
    activation : {"sigmoid", "noisy_or"}
        Noisy-OR units need non-negative weights and biases.

    Attributes
    ----------
    W, h : float64 arrays (copies)
    visible : boolean mask
    parents, children : list of int arrays
        Each unit's parents and children (the nonzero weights), so that work per unit is
        proportional to its number of nonzero weights.
    structure : DagStructure
        The same lists in the compressed form the compiled kernels read
        (``structure.pack(W)`` gives the weights in its order).
    """

    def __init__(self, W, h, visible, activation="sigmoid"):
        if activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {ACTIVATIONS}, got {activation!r}")
        W = np.array(W, dtype=np.float64)
        if W.ndim != 2 or W.shape[0] != W.shape[1] or W.shape[0] < 1:
            raise ValueError(f"W must be a square (n_units, n_units) array, got shape {W.shape}")
        n = W.shape[0]
        if not np.all(np.isfinite(W)):
            raise ValueError("W contains NaN or infinite values")
        if np.any(np.triu(W) != 0.0):
            i, j = np.argwhere(np.triu(W) != 0.0)[0]
            raise ValueError(
                f"W must be strictly lower triangular (units in topological order): "
                f"W[{i}, {j}] = {W[i, j]!r} is a weight from unit {j} to unit {i} with j >= i"
            )
        h = np.array(h, dtype=np.float64)
        if h.shape != (n,):
            raise ValueError(f"h must have shape ({n},), got {h.shape}")
        if not np.all(np.isfinite(h)):
            raise ValueError("h contains NaN or infinite values")
        if activation == "noisy_or":
            if np.any(W < 0):
                raise ValueError("noisy-OR units need non-negative weights; W has negative entries")
            if np.any(h < 0):
                raise ValueError("noisy-OR units need non-negative biases; h has negative entries")
        vis = np.asarray(visible)
        if vis.dtype == np.bool_:
            if vis.shape != (n,):
                raise ValueError(f"visible as a mask must have shape ({n},), got {vis.shape}")
            mask = vis.copy()
        else:
            if vis.ndim != 1 or (vis.size and vis.dtype.kind not in "iu"):
                raise TypeError("visible must be a boolean mask or a sequence of unit indices")
            if vis.size and (vis.min() < 0 or vis.max() >= n):
                raise ValueError(f"visible indices must lie in [0, {n}), got {vis.tolist()}")
            mask = np.zeros(n, dtype=bool)
            mask[vis.astype(np.intp)] = True
        if not mask.any():
            raise ValueError("visible selects no unit: at least one unit must be visible")
        self.W = W
        self.h = h
        self.visible = mask
        self.activation = activation
        self.parents = [np.flatnonzero(W[i, :]) for i in range(n)]
        self.children = [np.flatnonzero(W[:, j]) for j in range(n)]
        self.structure = DagStructure(W != 0.0)

    @property
    def n_units(self):
        return self.W.shape[0]

    @property
    def n_weights(self):
        """Number of nonzero weights."""
        return int(np.count_nonzero(self.W))

    def __repr__(self):
        return (f"BeliefNet(n_units={self.n_units}, n_visible={self.n_visible}, "
                f"n_weights={self.n_weights}, activation={self.activation!r})")

    def _set_params(self, W, h):
        """New weights and biases on the same edges (learning); the edge set is kept, even
        where a weight has become zero."""
        self.W = np.ascontiguousarray(W, dtype=np.float64)
        self.h = np.ascontiguousarray(h, dtype=np.float64)

    # ------------------------------------------------------------------ learning
    def fit(self, V, method="sjj", epochs=10, learning_rate=0.1, batch_size=100, tol=1e-6,
            max_sweeps=200, n_threads=None, random_state=None, progress=True, callback=None):
        """Learn the weights and biases by gradient ascent on a mean-field objective.

        Each step solves the mean-field problem of ``batch_size`` patterns (in parallel,
        warm-started from their previous solutions) and follows the gradient of the objective
        summed over them, times ``learning_rate / batch_size``.  Only existing edges learn.
        Noisy-OR weights are kept >= 0 and biases >= 1e-3.

        Parameters
        ----------
        V : (n, n_visible) binary array
        method : {"sjj", "plefka11", "plefka12", "plefka22"}
            The objective: the strict SJJ bound, or -G of a Plefka scheme.
        epochs, learning_rate, batch_size : the schedule
        tol, max_sweeps : stopping rule of each mean-field solve (see ``mfengine.infer``)
        n_threads : OpenMP threads for each batch's solve
        random_state : seed for the order of the patterns
        progress : show a progress bar
        callback : called as ``callback(epoch, net, mean_objective)`` after each epoch

        Returns
        -------
        history : ndarray (epochs,), the mean objective per pattern in each epoch
        """
        from mfengine.sbn.learning import fit_dag

        return fit_dag(self, V, method=method, epochs=epochs, learning_rate=learning_rate,
                       batch_size=batch_size, tol=tol, max_sweeps=max_sweeps,
                       n_threads=n_threads, random_state=random_state, progress=progress,
                       callback=callback)

    # ------------------------------------------------------------------ generative model
    def sample(self, n, random_state=None, return_all=False):
        """Draw ``n`` patterns by ancestral sampling: the (n, n_visible) visible vectors, or
        with ``return_all=True`` the (n, n_units) states of every unit."""
        if not isinstance(n, numbers.Integral) or isinstance(n, bool) or n < 0:
            raise ValueError(f"n must be a non-negative integer, got {n!r}")
        rng = check_random_state(random_state)
        S = np.zeros((n, self.n_units))
        for i in range(self.n_units):
            z = self.h[i] + S[:, self.parents[i]] @ self.W[i, self.parents[i]]
            p = np.exp(_log_probs(z, self.activation)[0])
            S[:, i] = rng.random(n) < p
        return S if return_all else S[:, self.visible]

    def log_joint(self, S):
        """ln P(S) for complete configurations, an (n, n_units) array of 0/1."""
        S = as_float_matrix(S, "S", n_cols=self.n_units)
        check_binary(S, "S")
        return self._log_joint(S)

    def _log_joint(self, S):
        z = S @ self.W.T + self.h
        l1, l0 = _log_probs(z, self.activation)
        # 0 * (-inf) must count as 0 (a noisy-OR unit with z = 0 is off for sure)
        return np.sum(np.where(S > 0, l1, 0.0) + np.where(S > 0, 0.0, l0), axis=-1)

    def _check_data(self, V, missing=None):
        """V as C-contiguous float64 (n, n_visible), binary outside the missing entries, and
        the missing mask as bool (or None)."""
        V = as_float_matrix(V, "V", n_cols=self.n_visible, allow_nan=missing is not None)
        miss = check_missing(missing, V.shape)
        if miss is None:
            check_binary(V, "V")
            return V, None
        miss = miss.astype(bool)
        if np.any(~np.isfinite(V) & ~miss):
            raise ValueError("V contains NaN or infinite values at entries not marked missing")
        check_binary(V, "V", ignore=miss)
        return V, miss

    def exact_log_likelihood(self, V, missing=None, max_hidden=MAX_ENUMERATED_HIDDEN):
        """Exact ln P(v) per pattern, summing over every joint state of the hidden units
        (and of missing visible ones).  A ValueError above ``max_hidden`` hidden units."""
        V, miss = self._check_data(V, missing)
        vis = np.flatnonzero(self.visible)
        Vz = np.where(np.isfinite(V), V, 0.0)
        out = np.empty(V.shape[0])
        if miss is None:
            groups = [(np.zeros(vis.size, dtype=bool), np.arange(V.shape[0]))]
        else:
            keys, inverse = np.unique(miss, axis=0, return_inverse=True)
            groups = [(keys[g], np.flatnonzero(inverse.ravel() == g)) for g in range(len(keys))]
        for mask, rows in groups:
            # a missing visible unit is summed over like a hidden one (it may have children)
            summed = np.sort(np.concatenate([np.flatnonzero(~self.visible), vis[mask]]))
            if summed.size > max_hidden:
                raise ValueError(
                    f"exact_log_likelihood enumerates 2**(hidden + missing) states; here that is "
                    f"{summed.size} units, above max_hidden={max_hidden}"
                )
            out[rows] = self._enumerate(Vz[rows][:, ~mask], vis[~mask], summed)
        return out

    def _enumerate(self, v, clamped, summed):
        """ln sum over the states of ``summed`` of P(S), with units ``clamped`` set to v."""
        K = summed.size
        states = ((np.arange(2**K)[:, None] >> np.arange(K)) & 1).astype(np.float64)
        out = np.empty(v.shape[0])
        chunk = max(1, 2**21 // max(1, 2**K * self.n_units))
        for start in range(0, v.shape[0], chunk):
            vc = v[start : start + chunk]
            S = np.empty((vc.shape[0], 2**K, self.n_units))
            S[:, :, summed] = states[None, :, :]
            S[:, :, clamped] = vc[:, None, :]
            out[start : start + chunk] = _logsumexp(self._log_joint(S), axis=1)
        return out


def _check_batch_params(W, h, activation):
    W = np.array(W, dtype=np.float64)
    if W.ndim != 3 or W.shape[1] != W.shape[2] or W.shape[1] < 1:
        raise ValueError(f"W must be an (n_nets, n_units, n_units) array, got shape {W.shape}")
    n_nets, n = W.shape[0], W.shape[1]
    if not np.all(np.isfinite(W)):
        raise ValueError("W contains NaN or infinite values")
    upper = np.triu(np.ones((n, n), dtype=bool))
    if np.any(W[:, upper] != 0.0):
        k, i, j = np.argwhere((W != 0.0) & upper)[0]
        raise ValueError(f"W must be strictly lower triangular in each net: W[{k}, {i}, {j}] = "
                         f"{W[k, i, j]!r} is a weight from unit {j} to unit {i} with j >= i")
    h = np.array(h, dtype=np.float64)
    if h.shape != (n_nets, n):
        raise ValueError(f"h must have shape ({n_nets}, {n}), got {h.shape}")
    if not np.all(np.isfinite(h)):
        raise ValueError("h contains NaN or infinite values")
    if activation == "noisy_or" and (np.any(W < 0) or np.any(h < 0)):
        raise ValueError("noisy-OR units need non-negative weights and biases; "
                         f"{'W' if np.any(W < 0) else 'h'} has negative entries")
    return W, h


class BeliefNetBatch(_VisibleUnits):
    """Many belief nets over one DAG: the same edges, visible units and activation, each with
    its own weights and biases.  ``mf.infer`` solves all of them in one compiled, parallel call.

    Parameters
    ----------
    W : (n_nets, n_units, n_units) array
        ``W[k, i, j]`` is net k's weight from unit j to unit i (j < i).  The edge set is every
        (i, j) that is nonzero in at least one net.
    h : (n_nets, n_units) array
    visible : boolean mask or sequence of indices, shared by every net
    activation : {"sigmoid", "noisy_or"}

    Indexing gives one ``BeliefNet``; ``len`` is the number of nets.
    """

    def __init__(self, W, h, visible, activation="sigmoid"):
        if activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {ACTIVATIONS}, got {activation!r}")
        W, h = _check_batch_params(W, h, activation)
        template = BeliefNet(np.zeros(W.shape[1:]), np.zeros(W.shape[1]), visible)
        self.W = W
        self.h = h
        self.visible = template.visible
        self.activation = activation
        self.structure = DagStructure(np.any(W != 0.0, axis=0))

    @classmethod
    def from_nets(cls, nets):
        """A batch from a sequence of ``BeliefNet`` with the same visible units and activation."""
        nets = list(nets)
        if not nets or not all(isinstance(n, BeliefNet) for n in nets):
            raise TypeError("from_nets needs a non-empty sequence of BeliefNet")
        first = nets[0]
        for k, net in enumerate(nets):
            if net.n_units != first.n_units or not np.array_equal(net.visible, first.visible):
                raise ValueError(f"nets[{k}] has other units or visible units than nets[0]")
            if net.activation != first.activation:
                raise ValueError(f"nets[{k}] has activation {net.activation!r}, nets[0] "
                                 f"{first.activation!r}")
        return cls(np.stack([n.W for n in nets]), np.stack([n.h for n in nets]), first.visible,
                   first.activation)

    def __len__(self):
        return self.W.shape[0]

    def __getitem__(self, k):
        return BeliefNet(self.W[k], self.h[k], self.visible, self.activation)

    @property
    def n_nets(self):
        return self.W.shape[0]

    @property
    def n_units(self):
        return self.W.shape[1]

    def __repr__(self):
        return (f"BeliefNetBatch(n_nets={self.n_nets}, n_units={self.n_units}, "
                f"n_visible={self.n_visible}, activation={self.activation!r})")

    def _check_data(self, V):
        """V as (n_nets, m, n_visible) float64 (a (n_nets, n_visible) array means m = 1)."""
        V = np.asarray(V)
        if V.dtype.kind not in "biuf":
            raise TypeError(f"V must be numeric, got dtype {V.dtype}")
        squeeze = V.ndim == 2
        if squeeze:
            V = V[:, None, :]
        if V.ndim != 3 or V.shape[0] != self.n_nets or V.shape[2] != self.n_visible:
            raise ValueError(f"V must have shape ({self.n_nets}, {self.n_visible}) or "
                             f"({self.n_nets}, m, {self.n_visible}), got {np.shape(V)}")
        V = np.ascontiguousarray(V, dtype=np.float64)
        if not np.all(np.isfinite(V)):
            raise ValueError("V contains NaN or infinite values")
        check_binary(V, "V")
        return V, squeeze

    def log_joint(self, S):
        """ln P(S) per net for complete states S of shape (n_nets, ..., n_units)."""
        S = np.asarray(S, dtype=np.float64)
        z = np.einsum("k...j,kij->k...i", S, self.W) + self.h.reshape(
            (self.n_nets,) + (1,) * (S.ndim - 2) + (self.n_units,))
        l1, l0 = _log_probs(z, self.activation)
        return np.sum(np.where(S > 0, l1, 0.0) + np.where(S > 0, 0.0, l0), axis=-1)

    def exact_log_likelihood(self, V, max_hidden=MAX_ENUMERATED_HIDDEN):
        """Exact ln P(v) for every net and pattern by enumerating the hidden states: V of shape
        (n_nets, n_visible) gives (n_nets,), (n_nets, m, n_visible) gives (n_nets, m)."""
        V, squeeze = self._check_data(V)
        K = self.n_hidden
        if K > max_hidden:
            raise ValueError(f"exact_log_likelihood enumerates 2**n_hidden states; n_hidden = {K} "
                             f"is above max_hidden={max_hidden}")
        hid = np.flatnonzero(~self.visible)
        states = ((np.arange(2**K)[:, None] >> np.arange(K)) & 1).astype(np.float64)
        m = V.shape[1]
        out = np.empty((self.n_nets, m))
        chunk = max(1, 2**22 // max(1, m * 2**K * self.n_units))
        for a in range(0, self.n_nets, chunk):
            sub = slice(a, a + chunk)
            k = V[sub].shape[0]
            S = np.empty((k, m, 2**K, self.n_units))
            S[:, :, :, hid] = states
            S[:, :, :, self.visible] = V[sub][:, :, None, :]
            part = BeliefNetBatch.__new__(BeliefNetBatch)
            part.W, part.h, part.activation, part.visible = self.W[sub], self.h[sub], self.activation, self.visible
            out[sub] = _logsumexp(part.log_joint(S), axis=2)
        return out[:, 0] if squeeze else out
