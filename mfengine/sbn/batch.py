"""Many belief nets over one DAG (``BeliefNetBatch``), solved in one compiled, parallel call:
the same units, visible units and activation, each net with its own weights and biases."""
import numpy as np

from mfengine._validation import as_array, check_binary, check_flag, check_int, check_random_state
from mfengine.sbn._checks import check_batch_data, w_shape
from mfengine.sbn._exact import (MAX_ENUMERATED_HIDDEN, log_joint_checked, log_probs,
                                 log_sum_states, sum_log_probs)
from mfengine.sbn._structure import _is_sparse
from mfengine.sbn.dag import BeliefNet, _COMMON_CONSTRAINTS, _DagModel, _draw_uniforms

__all__ = ["BeliefNetBatch"]


class BeliefNetBatch(_DagModel):
    """Many belief nets over one DAG, solved in one compiled, parallel call.

    The nets share their edges, visible units and activation; each has its own weights and
    biases.

    Parameters
    ----------
    W : array_like of shape (n_nets, n_units, n_units), or a list of scipy.sparse matrices
        ``W[k, i, j]`` is net k's weight from unit j to unit i (j < i).  The edge set is every
        (i, j) that is nonzero in at least one net.  A list (or tuple) of n_nets scipy.sparse
        (n_units, n_units) matrices gives the same nets without any n_units x n_units array:
        construction, ``sample`` and inference then take memory and time linear in the
        nonzero entries; inference and sampling give the dense batch's answers bit for bit
        (exact enumeration, which sums the sparse products in another order, to rounding).
    h : array_like of shape (n_nets, n_units)
        Biases.
    visible : array_like
        A boolean mask or strictly increasing indices, shared by every net.
    activation : {"sigmoid", "noisy_or"}, default="sigmoid"
        The units' activation.
    method : {"sjj", "plefka11", "plefka12", "plefka22"}, default="sjj"
        The objective of ``infer`` and ``score_samples``.
    infer_tol : float, default=1e-6
        Tolerance of each mean-field solve.
    infer_max_iter : int, default=200
        Most sweeps of one solve.
    n_threads : int, optional
        OpenMP threads over nets and patterns.
    progress : bool, default=True
        Show a progress bar on calls that run longer than two seconds.

    Attributes
    ----------
    W_, h_ : ndarray
        The checked float64 parameters (``W_`` a list of CSR matrices for a sparse ``W``).
    visible_ : ndarray of bool of shape (n_units,)
        The visible units.

    See Also
    --------
    BeliefNet : One net.

    Examples
    --------
    >>> import numpy as np
    >>> import mfengine as mf
    >>> W = np.tril(np.random.default_rng(0).uniform(0, 1, (100, 6, 6)), -1)
    >>> batch = mf.BeliefNetBatch(W, np.full((100, 6), 0.1), [3, 4, 5], "noisy_or")
    >>> batch.score_samples(np.zeros((100, 3))).shape
    (100,)
    """

    _batch = True
    _parameter_constraints = _COMMON_CONSTRAINTS

    def __init__(self, W, h, visible, activation="sigmoid", *, method="sjj", infer_tol=1e-6,
                 infer_max_iter=200, n_threads=None, progress=True):
        self.W = W
        self.h = h
        self.visible = visible
        self.activation = activation
        self.method = method
        self.infer_tol = infer_tol
        self.infer_max_iter = infer_max_iter
        self.n_threads = n_threads
        self.progress = progress

    @classmethod
    def from_nets(cls, nets, **params):
        """A batch from ``BeliefNet`` objects with the same visible units and activation.

        The batch is sparse when any net is (``W_`` a list of CSR matrices, nothing of size
        n_units**2).

        Parameters
        ----------
        nets : sequence of BeliefNet
            The nets, non-empty.
        **params
            Constructor parameters of the batch.

        Returns
        -------
        batch : BeliefNetBatch
        """
        nets = list(nets)
        if not nets or not all(isinstance(n, BeliefNet) for n in nets):
            raise TypeError("from_nets needs a non-empty sequence of BeliefNet")
        first = nets[0]._params()
        for k, net in enumerate(nets):
            net._params()
            if net.n_units != first.n_units or not np.array_equal(net.visible_, first.visible_):
                raise ValueError(f"nets[{k}] has other units or visible units than nets[0]")
            if net.activation != first.activation:
                raise ValueError(f"nets[{k}] has activation {net.activation!r}, nets[0] "
                                 f"{first.activation!r}")
        if any(_is_sparse(n.W_) for n in nets):   # sparse nets stay sparse: nothing n_units**2
            import scipy.sparse

            W = [n.W_.copy() if _is_sparse(n.W_) else scipy.sparse.csr_matrix(n.W_) for n in nets]
        else:
            W = np.stack([n.W_ for n in nets])
        return cls(W, np.stack([n.h_ for n in nets]), first.visible_, first.activation, **params)

    def __len__(self):
        return w_shape(self._params().W_)[0]

    def __getitem__(self, k):
        if isinstance(k, (bool, np.bool_)) or not isinstance(k, (int, np.integer)):
            raise TypeError(f"a BeliefNetBatch is indexed by a net number k (an int), got {k!r}")
        n_nets = len(self)
        if not -n_nets <= k < n_nets:
            raise IndexError(f"net index k={k} is out of range for {n_nets} nets")
        # the net's own copies (editing them leaves the batch alone) and the batch's settings
        shared = {k: v for k, v in self.get_params(deep=False).items()
                  if k not in ("W", "h", "visible", "activation")}
        W = self.W_[k]
        return BeliefNet(W.copy(), self.h_[k].copy(), self.visible_.copy(), self.activation,
                         **shared)

    @property
    def n_nets(self):
        """Number of nets."""
        return len(self)


    def _check_data(self, X, missing=None):
        return check_batch_data(X, missing, w_shape(self.W_)[0], int(self.visible_.sum()))

    def log_joint(self, S):
        """The log-probability ln P(S) of complete states, per net.

        Parameters
        ----------
        S : array_like of shape (n_nets, ..., n_units)
            Binary states.

        Returns
        -------
        log_p : ndarray of shape (n_nets, ...)
            The log-probability under each net, in nats.
        """
        self._params()
        try:
            S = as_array(S, "S", np.float64)
        except (TypeError, ValueError) as exc:
            raise type(exc)(f"S must be an array of 0/1 states: {exc}") from exc
        n_nets, n_units = w_shape(self.W_)[0], w_shape(self.W_)[-1]
        if S.ndim < 2 or S.shape[0] != n_nets or S.shape[-1] != n_units:
            raise ValueError(f"S must have shape ({n_nets}, ..., {n_units}), got {S.shape}")
        check_binary(S, "S")
        return log_joint_checked(self._log_joint(S, self.W_, self.h_))

    def _log_joint(self, S, W, h):
        """ln P of the states S under each net and where it overflowed (``sum_log_probs``)."""
        if isinstance(W, list):      # a sparse batch: net by net, no n_units**2 array
            z = np.empty(S.shape)
            for k, Wk in enumerate(W):
                flat = S[k].reshape(-1, S.shape[-1])
                z[k] = (np.asarray((Wk @ flat.T).T) + h[k]).reshape(S.shape[1:])
        else:
            z = np.einsum("k...j,kij->k...i", S, W) + h.reshape(
                (W.shape[0],) + (1,) * (S.ndim - 2) + (W.shape[-1],))
        l1, l0 = log_probs(z, self.activation)
        return sum_log_probs(S, l1, l0)

    def sample(self, n_samples=1, random_state=None, return_all=False):
        """Draw patterns from every net by ancestral sampling.

        Parameters
        ----------
        n_samples : int, default=1
            Patterns per net.
        random_state : None, int or numpy.random.Generator, default=None
            Seed of the draw.
        return_all : bool, default=False
            Return the states of every unit instead of the visible ones.

        Returns
        -------
        X : ndarray of shape (n_nets, n_samples, n_visible), or (n_nets, n_samples, n_units)
            The sampled states (0.0 or 1.0) of every net.
        """
        n_samples = check_int(n_samples, "n_samples", 0, 2**31 - 1)
        return_all = check_flag(return_all, "return_all")
        rng = check_random_state(random_state)
        self._params()
        from mfengine._validation import effective_n_threads
        from mfengine.sbn import _sample

        s = self._structure
        W = self._packed_w()                      # (n_nets, nnz)
        k = W.shape[0]
        # uniforms from the seeded generator, overwritten by the states in compiled code
        S = _draw_uniforms(rng, (k, n_samples, s.n_units), n_samples)
        rc = _sample.sample(s.par_ptr, s.par_idx, W,
                            np.ascontiguousarray(self.h_, dtype=np.float64),
                            np.repeat(np.arange(k, dtype=np.intp), n_samples),
                            S.reshape(k * n_samples, s.n_units),
                            self.activation == "noisy_or", effective_n_threads(self.n_threads))
        if rc != _sample.STATUS_OK:
            raise RuntimeError(f"mfengine: the sampling kernel refused its arguments (status {rc})")
        return S if return_all else S[:, :, self.visible_]

    def exact_log_likelihood(self, X, missing=None, max_hidden=MAX_ENUMERATED_HIDDEN):
        """Exact ln P(v) of every net and pattern, by enumerating the hidden states.

        Parameters
        ----------
        X : array_like of shape (n_nets, n_visible) or (n_nets, m, n_visible)
            Binary data.
        missing : array_like of bool, optional
            Missing entries (X's shape, or (n_visible,) for every pattern), summed over like
            hidden units, net by net as ``BeliefNet.exact_log_likelihood`` does (units with
            no observed descendant sum out exactly and are not enumerated).
        max_hidden : int, default=20
            Refuse to enumerate more hidden (and missing) units than this.

        Returns
        -------
        log_p : ndarray of shape (n_nets,) or (n_nets, m)
            The log-probability of each net's pattern(s), in nats.

        Raises
        ------
        ValueError
            Above ``max_hidden`` hidden units.
        """
        self._params()
        V, miss = self._check_data(X, missing)
        max_hidden = check_int(max_hidden, "max_hidden", 0, 2**31 - 1)
        squeeze = V.ndim == 2
        if squeeze:
            V = V[:, None, :]
        if miss is not None:            # net by net (about 10x slower than the batch's sum)
            out = np.array([self[k].exact_log_likelihood(V[k], miss.reshape(V.shape)[k],
                                                         max_hidden)
                            for k in range(V.shape[0])])
            return out[:, 0] if squeeze else out
        K = self.n_hidden
        if K > max_hidden:
            raise ValueError(f"exact_log_likelihood enumerates 2**n_hidden states; n_hidden = {K} "
                             f"is above max_hidden={max_hidden}")
        n_nets, n_units = w_shape(self.W_)[0], w_shape(self.W_)[-1]
        hid = np.flatnonzero(~self.visible_)
        states = ((np.arange(2**K)[:, None] >> np.arange(K)) & 1).astype(np.float64)
        m = V.shape[1]
        out = np.empty((n_nets, m))
        chunk = max(1, 2**22 // max(1, m * 2**K * n_units))
        for a in range(0, n_nets, chunk):
            sub = slice(a, a + chunk)
            k = V[sub].shape[0]
            S = np.empty((k, m, 2**K, n_units))
            S[:, :, :, hid] = states
            S[:, :, :, self.visible_] = V[sub][:, :, None, :]
            out[sub] = log_sum_states(self._log_joint(S, self.W_[sub], self.h_[sub]), axis=2)
        return out[:, 0] if squeeze else out
