"""Context-sensitive hidden Markov models (Saul & Jordan 1996, sec. 3, eq. 23).

The structured mean-field bound keeps the first-order chain exact (forward-backward) and treats
the long-range couplings between the state at t and the states at t +- lag in mean field
(Saul & Jordan 1996, sec. 2.3): Q is the model's chain with free per-site potentials, and the
bound is Q's exact mean-field objective E_Q[ln P(s, x)] + H(Q), maximised by coordinate ascent
over the potentials from several starts (one of them the paper's link-variable solution).  The
derivation, written for this model's Gaussian outputs, is in ``docs/context_hmm.md``.
"""
import numbers
import os
from dataclasses import dataclass

import numpy as np

from mfengine._progress import progress_bar
from mfengine._validation import as_float_matrix, check_random_state, effective_n_threads

try:
    from mfengine.hmm import _chain
except ImportError as exc:  # pragma: no cover - only on an unbuilt source tree
    raise ImportError(
        "mfengine.hmm._chain (the compiled HMM kernel) is missing; install the package with "
        f"'pip install .' so that it is compiled ({exc})"
    ) from exc

__all__ = ["ContextHMM", "HMMInferenceResult"]

_CONTEXTS = ("right", "left", "both")
_METHODS = ("structured", "naive", "exact")


@dataclass
class HMMInferenceResult:
    """What :meth:`ContextHMM.infer` returns.

    Attributes
    ----------
    bound : ndarray of shape (n_sequences,)
        Lower bound on ln P(x) of each sequence, in nats.
    gamma : ndarray of shape (n_samples, n_states)
        Marginals Q(S_t = i) of the approximating distribution, sequences concatenated.
    n_sweeps : ndarray of shape (n_sequences,)
        Mean-field sweeps made for each sequence.
    converged : ndarray of shape (n_sequences,)
        Whether the bound stopped rising (by at most ``sweep_tol`` per time step) before
        ``max_sweeps`` sweeps.
    history : ndarray of shape (n_sequences, max_sweeps + 1)
        The bound after each sweep, NaN after the last.  For ``"structured"``: the coordinate-ascent
        sweeps of the kept start (entry 0: its starting chain); for ``"naive"``: entry 0 is the
        first-order posterior's marginals as the product Q.
    """

    bound: np.ndarray
    gamma: np.ndarray
    n_sweeps: np.ndarray
    converged: np.ndarray
    history: np.ndarray


_INT64_MAX = 2**63 - 1


def _check_int(value, name, low, high=_INT64_MAX):
    """``value`` as a Python int in [low, high] (high defaults to what a C ptrdiff_t holds)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or not low <= value <= high:
        raise ValueError(f"{name} must be an integer >= {low}"
                         + (f" and <= {high}" if high != _INT64_MAX else "") + f", got {value!r}")
    return int(value)


def _check_real(value, name):
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not np.isfinite(value) \
            or value < 0:
        raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
    return float(value)


def _check_lengths(lengths, n_rows):
    """Offsets (n_seq + 1,) of the sequences, refusing lengths that do not tile ``n_rows``.

    Each length is checked against ``n_rows`` as a Python integer before anything is summed, so
    no integer type can wrap around."""
    arr = np.asarray(lengths) if not isinstance(lengths, np.ndarray) else lengths
    if arr.ndim != 1 or arr.size == 0:
        raise ValueError("lengths must be a non-empty 1-D sequence of integers")
    if arr.dtype.kind not in "iuO" or (arr.dtype.kind == "O" and not all(
            isinstance(v, numbers.Integral) and not isinstance(v, bool) for v in arr)):
        raise ValueError(f"lengths must be a non-empty 1-D sequence of integers, got dtype {arr.dtype}")
    if arr.size > n_rows:
        raise ValueError(f"lengths has {arr.size} entries but X has only {n_rows} rows")
    vals = [int(v) for v in arr]
    if min(vals) < 1:
        raise ValueError("lengths must all be >= 1 (empty sequences are not allowed)")
    if max(vals) > n_rows:
        raise ValueError(f"lengths must each be at most the {n_rows} rows of X, got {max(vals)}")
    total = sum(vals)
    if total != n_rows:
        raise ValueError(f"lengths sum to {total} but X has {n_rows} rows")
    offsets = np.zeros(len(vals) + 1, dtype=np.intp)
    np.cumsum(np.asarray(vals, dtype=np.intp), out=offsets[1:])
    return offsets


def _n_threads(n_threads, n_items):
    """Threads for the kernel: ``n_threads`` (None: OMP_NUM_THREADS or all cores), at most the
    machine's core count and the number of sequences, at least 1."""
    if n_threads is not None and (isinstance(n_threads, bool)
                                  or not isinstance(n_threads, numbers.Integral)):
        raise ValueError(f"n_threads must be a non-zero integer or None, got {n_threads!r}")
    if n_threads is not None and abs(n_threads) > _INT64_MAX:
        n_threads = _INT64_MAX if n_threads > 0 else -1
    n = effective_n_threads(n_threads)
    return int(max(1, min(n, os.cpu_count() or 1, n_items)))


class ContextHMM:
    """Hidden Markov model whose outputs depend on the states at t and at t +- lag.

    States ``S_t`` in ``0 .. n_states - 1`` follow a first-order Markov chain with initial
    probabilities ``startprob_`` and transitions ``transmat_``.  The output ``x_t`` in
    R^n_features is Gaussian with unit covariance (Saul & Jordan 1996, eq. 23) and mean

        means_[S_t] + right_means_[S_{t+lag}] + left_means_[S_{t-lag}],

    where the right-context term is present for ``context="right"`` or ``"both"`` and the
    left-context term for ``"left"`` or ``"both"``.

    Sequence ends: a context state that falls outside the sequence (t + lag >= T or t - lag < 0)
    contributes nothing, so the first ``lag`` outputs have no left context and the last ``lag``
    no right context; every output x_0 .. x_{T-1} is modelled.  A sequence shorter than or equal
    to ``lag`` is therefore a first-order HMM.

    Parameters
    ----------
    n_states : int
        Number of hidden states n.
    n_features : int
        Output dimension.
    lag : int, default=1
        Distance of the context states.
    context : {"right", "left", "both"}, default="right"
        Which context states shift the output mean.
    n_iter_bw : int, default=50
        Baum-Welch iterations of :meth:`fit` (first-order model, context means held at zero).
    n_iter : int, default=50
        Mean-field EM iterations of :meth:`fit` after Baum-Welch.
    tol : float, default=1e-4
        :meth:`fit` stops a phase when the bound rises by less than ``tol`` nats per time step.
    max_sweeps : int, default=100
        Mean-field sweeps per inference.
    sweep_tol : float, default=1e-10
        Inference stops when a sweep raises the bound by at most this many nats per time step.
    max_augmented_states : int, default=2**20
        ``score(method="exact")`` refuses an augmented state space (n^w states, w = 1 + lag per
        context, capped at T) larger than this.
    context_init_scale : float, default=0.1
        At the start of mean-field EM the context means are drawn with this standard deviation
        (times the data's standard deviation); 0 starts them at zero, from where the M-step
        moves them as well.
    random_state : None, int or numpy Generator
        Seed for :meth:`fit`'s initialisation and the default of :meth:`sample`.
    n_threads : int or None
        OpenMP threads over sequences (None: ``OMP_NUM_THREADS`` or all cores).

    Attributes
    ----------
    startprob_ : ndarray (n_states,)
    transmat_ : ndarray (n_states, n_states), rows sum to one
    means_ : ndarray (n_states, n_features) or None before fitting or setting
    right_means_, left_means_ : ndarray (n_states, n_features); all zeros for an absent context
    history_ : dict
        After :meth:`fit`: ``"baum_welch"`` (exact log-likelihood per iteration) and
        ``"mean_field"`` (structured bound per iteration), summed over sequences, in nats.

    Examples
    --------
    >>> import mfengine as mf
    >>> h = mf.ContextHMM(n_states=3, n_features=2, lag=2, context="both", random_state=0)
    >>> h.means_ = [[0, 0], [3, 0], [0, 3]]
    >>> h.right_means_ = [[0.3, 0.0], [0.0, 0.3], [-0.3, 0.1]]
    >>> h.left_means_ = [[-0.2, 0.1], [0.2, 0.0], [0.0, -0.2]]
    >>> X, states = h.sample(50, random_state=1)
    >>> h.score(X, method="structured") <= h.score(X, method="exact")
    True
    """

    def __init__(self, n_states, n_features, lag=1, context="right", n_iter_bw=50, n_iter=50,
                 tol=1e-4, max_sweeps=100, sweep_tol=1e-10, max_augmented_states=2**20,
                 context_init_scale=0.1, random_state=None, n_threads=None):
        self.n_states = _check_int(n_states, "n_states", 1)
        self.n_features = _check_int(n_features, "n_features", 1)
        self.lag = _check_int(lag, "lag", 1)
        if context not in _CONTEXTS:
            raise ValueError(f"context must be one of {_CONTEXTS}, got {context!r}")
        self.context = context
        self.n_iter_bw = _check_int(n_iter_bw, "n_iter_bw", 0)
        self.n_iter = _check_int(n_iter, "n_iter", 0)
        self.max_sweeps = _check_int(max_sweeps, "max_sweeps", 0)
        self.max_augmented_states = _check_int(max_augmented_states, "max_augmented_states", 1)
        for name, val in (("tol", tol), ("sweep_tol", sweep_tol),
                          ("context_init_scale", context_init_scale)):
            if not isinstance(val, numbers.Real) or not np.isfinite(val) or val < 0:
                raise ValueError(f"{name} must be a finite number >= 0, got {val!r}")
        self.tol = float(tol)
        self.sweep_tol = float(sweep_tol)
        self.context_init_scale = float(context_init_scale)
        self.random_state = random_state
        self.n_threads = n_threads
        n, D = self.n_states, self.n_features
        self.startprob_ = np.full(n, 1.0 / n)
        self.transmat_ = np.full((n, n), 1.0 / n)
        self.means_ = None
        self.right_means_ = np.zeros((n, D))
        self.left_means_ = np.zeros((n, D))

    # ------------------------------------------------------------------------------------
    @property
    def _right(self):
        return self.context in ("right", "both")

    @property
    def _left(self):
        return self.context in ("left", "both")

    def _check_hyper(self):
        """Validate the hyperparameters as they are now (they may have been assigned)."""
        _check_int(self.n_states, "n_states", 1)
        _check_int(self.n_features, "n_features", 1)
        _check_int(self.lag, "lag", 1)
        if self.context not in _CONTEXTS:
            raise ValueError(f"context must be one of {_CONTEXTS}, got {self.context!r}")
        _check_int(self.max_sweeps, "max_sweeps", 0)
        _check_real(self.sweep_tol, "sweep_tol")
        _check_int(self.max_augmented_states, "max_augmented_states", 1)

    def _params(self):
        """The parameters, validated, as C-contiguous float64 arrays."""
        self._check_hyper()
        n, D = self.n_states, self.n_features
        sp = np.asarray(self.startprob_, dtype=np.float64) if self.startprob_ is not None else None
        if sp is None or sp.shape != (n,):
            raise ValueError(f"startprob_ must have shape ({n},), got "
                             f"{None if sp is None else sp.shape}")
        if not np.all(np.isfinite(sp)) or np.any(sp < 0) or abs(sp.sum() - 1.0) > 1e-8:
            raise ValueError("startprob_ must be a probability vector (non-negative, summing to 1)")
        A = np.asarray(self.transmat_, dtype=np.float64) if self.transmat_ is not None else None
        if A is None or A.shape != (n, n):
            raise ValueError(f"transmat_ must have shape ({n}, {n}), got "
                             f"{None if A is None else A.shape}")
        if not np.all(np.isfinite(A)) or np.any(A < 0) or np.any(np.abs(A.sum(1) - 1.0) > 1e-8):
            raise ValueError("transmat_ rows must be probability vectors (non-negative, summing to 1)")
        if self.means_ is None:
            raise ValueError("means_ is not set: call fit() or assign means_ (n_states, n_features)")
        out = []
        for name, present in (("means_", True), ("right_means_", self._right),
                              ("left_means_", self._left)):
            M = getattr(self, name)
            if M is None:
                M = np.zeros((n, D))
            M = np.asarray(M)
            if M.dtype.kind not in "biuf":
                raise TypeError(f"{name} must be numeric, got dtype {M.dtype}")
            M = np.ascontiguousarray(M, dtype=np.float64)
            if M.shape != (n, D):
                raise ValueError(f"{name} must have shape ({n}, {D}), got {M.shape}")
            if not np.all(np.isfinite(M)):
                raise ValueError(f"{name} contains NaN or infinite values")
            if not present and np.any(M != 0):
                raise ValueError(f"{name} must be all zeros: context={self.context!r} has no "
                                 f"{name.split('_')[0]} context")
            out.append(M)
        return np.ascontiguousarray(sp), np.ascontiguousarray(A), out[0], out[1], out[2]

    def _check_X(self, X, lengths):
        """Concatenated (N, n_features) data and offsets (n_seq + 1,) of its sequences."""
        if isinstance(X, (list, tuple)) and len(X) > 0 and all(np.ndim(x) == 2 for x in X):
            if lengths is not None:
                raise ValueError("lengths must be None when X is a list of sequences")
            parts = [as_float_matrix(x, f"X[{i}]", n_cols=self.n_features) for i, x in enumerate(X)]
            lengths = [p.shape[0] for p in parts]
            Xc = np.ascontiguousarray(np.concatenate(parts, axis=0))
        else:
            Xc = as_float_matrix(X, "X", n_cols=self.n_features)
        N = Xc.shape[0]
        if N == 0:
            raise ValueError("X has no rows")
        return Xc, _check_lengths([N] if lengths is None else lengths, N)

    def _run(self, X, offsets, method, want_stats=False, params=None, first_order=False,
             init=None):
        if method not in _METHODS:
            raise ValueError(f"method must be one of {_METHODS}, got {method!r}")
        sp, A, U, V, W = self._params() if params is None else params
        self._check_hyper()
        right = self._right and not first_order
        left = self._left and not first_order
        longest = int(np.max(np.diff(offsets)))
        # a lag >= a sequence's length leaves it first-order; so does any larger lag
        lag = min(int(self.lag), longest)
        if method == "exact":
            size = _chain.exact_states(self.n_states, lag, right, left, longest)
            if size < 0 or size > self.max_augmented_states:
                w = min(longest, 1 + self.lag * (right + left))
                raise ValueError(
                    f"method='exact' walks n_states**w = {self.n_states}**{w} augmented states "
                    f"(lag={self.lag}, context={self.context!r}), more than "
                    f"max_augmented_states={self.max_augmented_states}; use method='structured' "
                    "or raise max_augmented_states"
                )
        n_threads = _n_threads(self.n_threads, len(offsets) - 1)
        return _chain.run(method, sp, A, U, V, W, lag, right, left, X, offsets,
                          int(self.max_sweeps), float(self.sweep_tol), want_stats, n_threads,
                          init)

    # ------------------------------------------------------------------------------------
    def infer(self, X, lengths=None, method="structured"):
        """Mean-field inference on each sequence.

        Parameters
        ----------
        X : array-like (n_samples, n_features) or list of such arrays
            Sequences, concatenated (with ``lengths``) or as a list.
        lengths : array-like of int, optional
            Lengths of the concatenated sequences (hmmlearn convention); default one sequence.
        method : {"structured", "naive"}
            Structured (the model's chain with free per-site potentials) or fully factorised
            mean field.

        Returns
        -------
        HMMInferenceResult
        """
        if method not in ("structured", "naive"):
            raise ValueError(f"method must be 'structured' or 'naive' for infer(), got {method!r}")
        Xc, offsets = self._check_X(X, lengths)
        r = self._run(Xc, offsets, method)
        return HMMInferenceResult(
            bound=r["bound"], gamma=r["gamma"], n_sweeps=r["n_sweeps"],
            converged=r["converged"], history=r["history"],
        )

    def score_sequences(self, X, lengths=None, method="structured"):
        """ln P(x) of each sequence (``"exact"``) or a lower bound on it, in nats.

        Parameters
        ----------
        X, lengths : as in :meth:`infer`.
        method : {"structured", "naive", "exact"}
            ``"exact"`` runs forward-backward over the augmented state (S_{t-lag} .. S_{t+lag})
            and raises ValueError when that has more than ``max_augmented_states`` states.

        Returns
        -------
        ndarray of shape (n_sequences,)
        """
        Xc, offsets = self._check_X(X, lengths)
        return self._run(Xc, offsets, method)["bound"]

    def score(self, X, lengths=None, method="structured"):
        """Sum over sequences of :meth:`score_sequences` (nats)."""
        return float(np.sum(self.score_sequences(X, lengths, method)))

    def sample(self, n_samples, random_state=None):
        """Draw one sequence of length ``n_samples``.

        Returns
        -------
        X : ndarray (n_samples, n_features)
        states : ndarray (n_samples,) of int
        """
        T = _check_int(n_samples, "n_samples", 1)
        sp, A, U, V, W = self._params()
        rng = check_random_state(self.random_state if random_state is None else random_state)
        n = self.n_states
        states = np.empty(T, dtype=np.intp)
        states[0] = rng.choice(n, p=sp)
        cum = np.cumsum(A, axis=1)
        u = rng.random(T)
        for t in range(1, T):
            states[t] = min(int(np.searchsorted(cum[states[t - 1]], u[t], side="right")), n - 1)
        mean = U[states].copy()
        L = self.lag
        if self._right and T > L:
            mean[:-L] += V[states[L:]]
        if self._left and T > L:
            mean[L:] += W[states[:-L]]
        X = mean + rng.standard_normal((T, self.n_features))
        return X, states

    # ------------------------------------------------------------------------------------
    def _init_params(self, X, rng):
        n, D = self.n_states, self.n_features
        # k-means++ seeding then Lloyd iterations for the state means
        centers = [X[rng.integers(X.shape[0])]]
        for _ in range(1, n):
            d2 = np.min(((X[:, None, :] - np.asarray(centers)[None]) ** 2).sum(-1), axis=1)
            p = d2 / d2.sum() if d2.sum() > 0 else None
            centers.append(X[rng.choice(X.shape[0], p=p)])
        C = np.asarray(centers, dtype=np.float64)
        for _ in range(20):
            lab = np.argmin(((X[:, None, :] - C[None]) ** 2).sum(-1), axis=1)
            for k in range(n):
                if np.any(lab == k):
                    C[k] = X[lab == k].mean(0)
        self.means_ = C
        self.startprob_ = np.full(n, 1.0 / n)
        self.transmat_ = np.full((n, n), 1.0 / n)
        self.right_means_ = np.zeros((n, D))
        self.left_means_ = np.zeros((n, D))

    def _mstep_chain(self, r, offsets):
        n = self.n_states
        g0 = r["gamma"][offsets[:-1]].sum(0)
        self.startprob_ = g0 / g0.sum()
        xi = r["xi"].sum(0)
        rows = xi.sum(1)
        A = np.array(self.transmat_, dtype=np.float64)
        ok = rows > 0
        A[ok] = xi[ok] / rows[ok, None]
        self.transmat_ = A
        del n

    def _mstep_means(self, r, tables):
        """Maximise the bound over the means with Q held fixed (a quadratic)."""
        n = self.n_states
        H = r["H"].sum(0)
        g = r["g"].sum(0)
        idx = np.concatenate([np.arange(k * n, (k + 1) * n) for k in tables])
        theta = np.concatenate([self.means_, self.right_means_, self.left_means_], axis=0)
        for d in range(self.n_features):
            Hd = H[d][np.ix_(idx, idx)]
            th = theta[idx, d]
            step = np.linalg.lstsq(Hd, g[d][idx] - Hd @ th, rcond=1e-12)[0]
            theta[idx, d] = th + step
        self.means_ = theta[:n].copy()
        if 1 in tables:
            self.right_means_ = theta[n:2 * n].copy()
        if 2 in tables:
            self.left_means_ = theta[2 * n:].copy()

    def fit(self, X, lengths=None, progress=True):
        """Baum-Welch for the first-order model, then mean-field EM over all parameters.

        The procedure of Saul & Jordan (1996, sec. 3): the context means are held at zero while
        Baum-Welch fits the first-order HMM (its E-step is exact); then they are released and
        every parameter is re-estimated by EM whose E-step is structured mean field and whose
        M-step maximises the same bound with Q fixed (startprob_ and transmat_ in closed form,
        the three mean tables by one linear solve per output dimension).  When new transitions
        would lower the bound (Q's family is the chain with the model's transitions, so moving
        them moves the family) they are not taken, so the bound never falls.

        Parameters
        ----------
        X, lengths : as in :meth:`infer`.
        progress : bool, default=True
            Show a progress bar with the current bound.

        Returns
        -------
        self
        """
        Xc, offsets = self._check_X(X, lengths)
        N = Xc.shape[0]
        if N < self.n_states:
            raise ValueError(f"X has {N} rows, fewer than n_states={self.n_states}")
        rng = check_random_state(self.random_state)
        self._init_params(Xc, rng)
        self.history_ = {"baum_welch": [], "mean_field": []}
        tables = [0] + ([1] if self._right else []) + ([2] if self._left else [])
        with progress_bar(total=self.n_iter_bw + self.n_iter, desc="ContextHMM.fit",
                          disable=not progress) as bar:
            prev = -np.inf
            for _ in range(self.n_iter_bw):
                r = self._run(Xc, offsets, "structured", want_stats=True, first_order=True)
                ll = float(r["bound"].sum())
                self.history_["baum_welch"].append(ll)
                bar.update(1)
                bar.set_postfix(phase="baum-welch", loglik=f"{ll:.4f}")
                if ll - prev < self.tol * N:
                    break
                prev = ll
                self._mstep_chain(r, offsets)
                self._mstep_means(r, [0])
            if self.n_iter > 0 and len(tables) > 1:
                scale = self.context_init_scale * float(np.std(Xc))
                if self._right:
                    self.right_means_ = scale * rng.standard_normal((self.n_states, self.n_features))
                if self._left:
                    self.left_means_ = scale * rng.standard_normal((self.n_states, self.n_features))
                prev = -np.inf
                logpot, saved = None, None
                for it in range(self.n_iter + 1):
                    # E-step: coordinate ascent warm-started from the previous chain's potentials
                    r = self._run(Xc, offsets, "structured", want_stats=True, init=logpot)
                    b = float(r["bound"].sum())
                    if saved is not None and b < prev:
                        # new transitions put the previous Q outside the chain family; with the
                        # old ones it is inside, and the new means alone cannot lower the bound
                        self.startprob_, self.transmat_ = saved
                        r = self._run(Xc, offsets, "structured", want_stats=True, init=logpot)
                        b = float(r["bound"].sum())
                    if it == self.n_iter:
                        break   # only the check of the last M-step's transitions
                    logpot = r["logpot"]
                    self.history_["mean_field"].append(b)
                    bar.update(1)
                    bar.set_postfix(phase="mean-field EM", bound=f"{b:.4f}")
                    if b - prev < self.tol * N:
                        break
                    prev = b
                    saved = (self.startprob_.copy(), self.transmat_.copy())
                    self._mstep_chain(r, offsets)
                    self._mstep_means(r, tables)
        return self
