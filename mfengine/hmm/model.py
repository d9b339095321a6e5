"""Context-sensitive hidden Markov models (Saul & Jordan 1996, sec. 3, eq. 23).

The structured mean-field bound keeps the first-order chain exact (forward-backward) and treats
the long-range couplings between the state at t and the states at t +- lag in mean field
(Saul & Jordan 1996, sec. 2.3): Q is the model's chain with free per-site potentials, and the
bound is Q's exact mean-field objective E_Q[ln P(s, x)] + H(Q), maximised by coordinate ascent
over the potentials from several starts (one of them the paper's link-variable solution).  The
derivation, written for this model's Gaussian outputs, is in ``docs/context_hmm.md``.

The estimator speaks hmmlearn's language (``fit(X, lengths)``, ``score``, ``score_samples``,
``predict``, ``predict_proba``, ``decode``, ``sample``, ``params`` / ``init_params``), with
mfengine's ``infer`` and ``sample_posterior`` beside it.  NaN entries of X are missing values,
marginalised everywhere.
"""
import copy
import numbers
import warnings
from dataclasses import dataclass, field

import numpy as np
from sklearn.base import BaseEstimator
from sklearn.cluster import KMeans
from sklearn.exceptions import NotFittedError

from mfengine._base import InferenceResult, PersistMixin, user_stacklevel, warn_unconverged
from mfengine._base import ConvergenceWarning
from mfengine._em import EMMonitor, run_em
from mfengine._progress import progress_bar
from mfengine._validation import (BOOLEAN, N_THREADS, RANDOM_STATE, Interval, Options, Satisfies,
                                  as_array, as_float_matrix, check_random_state, check_value,
                                  validate_params)
from mfengine.hmm._checks import INT64_MAX, check_int, check_lengths, check_real, n_threads_for

try:
    from mfengine.hmm import _chain
except ImportError as exc:  # pragma: no cover - only on an unbuilt source tree
    raise ImportError(
        "mfengine.hmm._chain (the compiled HMM kernel) is missing; install the package with "
        f"'pip install .' so that it is compiled ({exc})"
    ) from exc

__all__ = ["ContextHMM", "HMMInferenceResult"]

_CONTEXTS = ("right", "left", "both")
# how far from 1 a row of transmat_ (or startprob_) may sum; beyond _PROB_EXACT (rounding) it
# is then divided by its sum
_PROB_TOL = 1e-6
_PROB_EXACT = 1e-12
_METHODS = ("structured", "naive", "exact")
_ALGORITHMS = ("viterbi", "map")
_PARAM_CODES = "stmrl"
_HALF_LOG_2PI = 0.5 * np.log(2.0 * np.pi)
#: Largest distance of a mean (from the centre of means_) or a data value (from the centre of
#: its mean, see ContextHMM._shifted) accepted: squares of 1e100 summed over any sequence stay
#: far inside the float64 range.
_MAX_MAGNITUDE = 1e100
_UNCONVERGED_HINT = "raise infer_max_iter or loosen infer_tol"


def _as_data(X, name, n_cols):
    """X as a float64 C-contiguous matrix; NaN entries are missing values (marginalised),
    infinities are refused."""
    Xc = as_float_matrix(X, name, n_cols=n_cols, allow_nan=True)
    if np.isinf(Xc).any():
        row = int(np.nonzero(np.isinf(Xc).any(axis=1))[0][0])
        raise ValueError(f"{name} contains infinite values (first in row {row}); missing values "
                         "are given as NaN")
    return Xc


@dataclass(repr=False)
class HMMInferenceResult(InferenceResult):
    """What :meth:`ContextHMM.infer` returns: the mean-field solution of every sequence.

    A subclass of :class:`mfengine.InferenceResult`, the answer of every family's ``infer``.

    Parameters
    ----------
    bound : ndarray of shape (n_sequences,)
        Lower bound on ln P(x) of each sequence, in nats (``method="exact"``: ln P(x) itself).
    converged : ndarray of bool, shape (n_sequences,)
        Whether the solve of each sequence stopped because a sweep raised the bound by at most
        ``tol`` nats per time step (rather than by reaching ``max_iter`` sweeps).
    n_iter : ndarray of int, shape (n_sequences,)
        Sweeps made for each sequence (for ``"structured"``: those of the kept start).
    method : str
        ``"structured"``, ``"naive"`` or ``"exact"``.
    tol : float, optional
        The per-time-step tolerance used.
    posteriors : ndarray of shape (n_samples, n_states), optional
        Marginals Q(S_t = i) of the approximating distribution, sequences concatenated
        (None for ``"exact"``).
    potentials : ndarray of shape (n_samples, n_states), optional
        For ``"structured"``: the log-potentials h_t of the chain
        Q(s) ~ startprob[s_0] prod transmat[s_t, s_t+1] prod exp(h_t(s_t)) -- the variational
        parameters; None otherwise.
    history : ndarray of shape (n_sequences, min(max_iter, 1000) + 1), optional
        The bound before the first sweep and after each sweep, NaN after the last.  For
        ``"structured"``: the sweeps of the kept start; for ``"naive"``: entry 0 is the
        first-order posterior's marginals taken as the product Q.
    lengths : ndarray of int, shape (n_sequences,), optional
        Lengths of the sequences.

    See Also
    --------
    ContextHMM.infer : Returns this result.

    Examples
    --------
    >>> import numpy as np
    >>> import mfengine as mf
    >>> h = mf.ContextHMM(2, 1, lag=3, context="right")
    >>> h.means_ = np.array([[-1.0], [1.0]])
    >>> h.right_means_ = np.array([[0.5], [-0.5]])
    >>> X, _ = h.sample(40, random_state=0)
    >>> r = h.infer(X, lengths=[15, 25])
    >>> r.bound.shape, r.posteriors.shape, bool(r.converged.all())
    ((2,), (40, 2), True)
    """

    posteriors: np.ndarray = field(default=None)
    potentials: np.ndarray = field(default=None)
    history: np.ndarray = field(default=None)
    lengths: np.ndarray = field(default=None)


class ContextHMM(PersistMixin, BaseEstimator):
    """Hidden Markov model whose outputs depend on the states at t and at t +- lag.

    States ``S_t`` in ``0 .. n_states - 1`` follow a first-order Markov chain with initial
    probabilities ``startprob_`` and transitions ``transmat_``.  The output ``x_t`` in
    R^n_features is Gaussian with unit covariance (Saul & Jordan 1996, eq. 23) and mean
    ``means_[S_t] + right_means_[S_{t+lag}] + left_means_[S_{t-lag}]``, where the right-context
    term is present for ``context="right"`` or ``"both"`` and the left-context term for
    ``"left"`` or ``"both"``.

    A context state that falls outside the sequence (t + lag >= T or t - lag < 0) contributes
    nothing, so the first ``lag`` outputs have no left context and the last ``lag`` no right
    context; every output x_0 .. x_{T-1} is modelled.  A sequence no longer than ``lag`` is
    therefore a first-order HMM, whatever the size of ``lag``.

    Inference is mean field: ``"structured"`` (Q is the model's own chain with free per-site
    potentials, optimised exactly by coordinate ascent), ``"naive"`` (fully factorised), or
    ``"exact"`` (ln P(x) by forward recursion over the augmented state; small lags only).

    NaN entries of X are missing values, marginalised by every verb and method: a row of NaN
    is a missing frame (its whole emission drops out), a NaN coordinate drops only its own
    terms (the covariance is the identity).  hmmlearn refuses NaN.

    Parameters
    ----------
    n_states : int, default=2
        Number of hidden states n.
    n_features : int or None, default=None
        Output dimension; None takes it from X in :meth:`fit`, or from ``means_``.
    lag : int, default=1
        Distance of the context states (any integer >= 1).
    context : {"right", "left", "both"}, default="right"
        Which context states shift the output mean.
    method : {"structured", "naive", "exact"}, default="structured"
        Inference method of :meth:`infer`, :meth:`score`, :meth:`score_samples`,
        :meth:`predict`, :meth:`predict_proba` and :meth:`decode` (each takes ``method=`` to
        override it for one call; ``"exact"`` only gives ln P(x), not posteriors).
    max_iter : int, default=50
        Mean-field EM iterations of :meth:`fit` (after the Baum-Welch warm-up).
    tol : float or None, default=1e-4
        :meth:`fit` stops a phase when an iteration raises the objective by less than ``tol``
        nats per time step (the per-sample scale of scikit-learn's ``GaussianMixture``;
        hmmlearn's ``tol`` is the total gain).  None: a fixed budget of iterations.  When
        ``tol`` is given and not met within ``max_iter`` iterations, a ConvergenceWarning.
    bw_max_iter : int, default=50
        Baum-Welch iterations of :meth:`fit` (first-order model, context means held at zero)
        before mean-field EM.
    infer_max_iter : int, default=100
        Mean-field sweeps per sequence of one solve (any integer >= 0).
    infer_tol : float, default=1e-10
        A solve stops when a sweep raises the bound by at most this many nats per time step.
    algorithm : {"viterbi", "map"}, default="viterbi"
        Decoder of :meth:`decode` and :meth:`predict` (as hmmlearn's): ``"viterbi"`` is the
        most probable path of the structured posterior's chain Q, ``"map"`` the most probable
        state of each marginal.
    params : str, default="stmrl"
        Parameters that :meth:`fit` updates: any of ``s`` (``startprob_``), ``t`` (``transmat_``),
        ``m`` (``means_``), ``r`` (``right_means_``), ``l`` (``left_means_``).
    init_params : str, default="stmrl"
        Parameters that :meth:`fit` initialises (same codes).  A parameter left out keeps the
        value it was given before fit (and is initialised only when it was not set); a
        parameter that is set and listed here is overwritten, with a warning, as in hmmlearn.
    context_init_scale : float, default=0.1
        At the start of mean-field EM the context means (when initialised) are drawn with
        this standard deviation times the data's; 0 starts them at zero, from where the M-step
        moves them as well.
    max_augmented_states : int, default=2**20
        ``method="exact"`` refuses an augmented state space (n^w states, w = 1 + lag per
        context, capped at the sequence length) larger than this.
    warm_start : bool, default=False
        When True and the model has parameters (``means_`` set), :meth:`fit` continues
        mean-field EM from them: no initialisation, no Baum-Welch warm-up.
    n_threads : int or None, default=None
        OpenMP threads over sequences (None: ``OMP_NUM_THREADS`` or all cores); clamped to
        the number of cores and of sequences.  The answers do not depend on it.
    random_state : None, int or numpy Generator, default=None
        Seed of :meth:`fit`'s initialisation and the default of :meth:`sample`.
    progress : bool, default=True
        Show a progress bar during :meth:`fit` (it appears only after 2 s).
    starts : "all", str or sequence of str, default="all"
        Where the structured solver's ascent starts (when it has no warm start: :meth:`fit`'s
        later E-steps start from the last one).  ``"all"``: four chains, ``"link"`` (the link
        bound's solution from the first-order posterior), ``"naive-link"`` (the same from the
        naive marginals), ``"first-order"`` (the first-order posterior) and ``"own-means"``
        (that of the model with its context means left out); each ascent runs to a screening
        tolerance and the best goes on to ``infer_tol``.  A name or a sequence of names runs
        only those (one start alone is not screened).  F has several local maxima on strongly
        coupled data and no start is best everywhere, so fewer starts are faster but may end
        lower: docs/context_hmm.md, "Fewer starts", measures both.

    Attributes
    ----------
    startprob_ : ndarray of shape (n_states,)
        Initial state probabilities (uniform when not set).
    transmat_ : ndarray of shape (n_states, n_states)
        Transition probabilities, rows summing to one (uniform when not set).
    means_ : ndarray of shape (n_states, n_features)
        Own-state output means; must be set (or fitted) before scoring.
    right_means_, left_means_ : ndarray of shape (n_states, n_features)
        Context output means (zeros when not set; must stay zero for an absent context).
    history_ : ndarray of shape (`n_iter_`,)
        After :meth:`fit`: the objective of each EM iteration, summed over sequences, in nats:
        the first ``bw_n_iter_`` entries the exact log-likelihood of the first-order model
        (Baum-Welch), the others the structured bound (mean-field EM).  Neither part ever
        decreases: an iteration that would lower it (new transitions that move Q's family, or
        rounding at the precision limit) is refused.
    n_iter_ : int
        Iterations made by :meth:`fit` (``len(history_)``).
    bw_n_iter_ : int
        Of which Baum-Welch.
    converged_ : bool
        Whether the last phase of :meth:`fit` met ``tol`` (or could not rise any further).
    n_features_in_ : int
        Columns of the data seen by :meth:`fit`.

    See Also
    --------
    hmmlearn.hmm.GaussianHMM : The first-order model, with the same verbs.
    HMMInferenceResult : What :meth:`infer` returns.

    Notes
    -----
    Saul, L. K. and Jordan, M. I. (1996), "Exploiting tractable substructures in intractable
    networks", NIPS 8.  The structured bound is never above ln P(x); with all context means
    zero it equals the first-order HMM's log-likelihood.  Inference runs in centred
    coordinates: each mean table less the mean of its rows, each output less the sum of those
    means over the tables its mean has (during ``fit``: data and means less the data's mean).
    That leaves the model unchanged, keeps data far from zero (1e17) accurate and places the
    structured solver's first-order starts (see "The origin" in docs/context_hmm.md).

    Examples
    --------
    >>> import numpy as np
    >>> import mfengine as mf
    >>> h = mf.ContextHMM(n_states=3, n_features=2, lag=2, context="both", random_state=0)
    >>> h.means_ = np.array([[0.0, 0.0], [3.0, 0.0], [0.0, 3.0]])
    >>> h.right_means_ = np.array([[0.3, 0.0], [0.0, 0.3], [-0.3, 0.1]])
    >>> h.left_means_ = np.array([[-0.2, 0.1], [0.2, 0.0], [0.0, -0.2]])
    >>> X, states = h.sample(60, random_state=1)
    >>> bound, exact = h.score(X), h.score(X, method="exact")   # structured bound, ln P(X)
    >>> bool(bound <= exact + 1e-9)
    True
    >>> logprob, posteriors = h.score_samples(X)
    >>> posteriors.shape
    (60, 3)
    >>> fitted = mf.ContextHMM(3, 2, lag=2, context="both", max_iter=5, tol=None,
    ...                        random_state=0, progress=False).fit(X)
    >>> fitted.n_iter_ == len(fitted.history_)
    True
    >>> fitted.predict(X).shape
    (60,)
    """

    _parameter_constraints = {
        "n_states": [Interval(numbers.Integral, 1, INT64_MAX)],
        "n_features": [None, Interval(numbers.Integral, 1, INT64_MAX)],
        "lag": [Interval(numbers.Integral, 1, INT64_MAX)],
        "context": [Options(*_CONTEXTS)],
        "method": [Options(*_METHODS)],
        "max_iter": [Interval(numbers.Integral, 0, INT64_MAX)],
        "tol": [None, Interval(numbers.Real, 0, None)],
        "bw_max_iter": [Interval(numbers.Integral, 0, INT64_MAX)],
        "infer_max_iter": [Interval(numbers.Integral, 0, INT64_MAX)],
        "infer_tol": [Interval(numbers.Real, 0, None)],
        "starts": [Satisfies(lambda v: ContextHMM._start_names_of(v) or True,
                             f"'all', one of {_chain.START_NAMES} or a sequence of them "
                             "without repeats")],
        "algorithm": [Options(*_ALGORITHMS)],
        "params": [Satisfies(lambda v: isinstance(v, str) and not set(v) - set(_PARAM_CODES),
                             f"a string of the letters {_PARAM_CODES!r}")],
        "init_params": [Satisfies(lambda v: isinstance(v, str) and not set(v) - set(_PARAM_CODES),
                                  f"a string of the letters {_PARAM_CODES!r}")],
        "context_init_scale": [Interval(numbers.Real, 0, None)],
        "max_augmented_states": [Interval(numbers.Integral, 1, INT64_MAX)],
        "warm_start": [BOOLEAN],
        "n_threads": [N_THREADS],
        "random_state": [RANDOM_STATE],
        "progress": [BOOLEAN],
    }
    _saved_state = {"startprob_": "array", "transmat_": "array", "means_": "array",
                    "right_means_": "array", "left_means_": "array", "history_": "vector",
                    "n_iter_": "count", "bw_n_iter_": "count", "converged_": "flag",
                    "n_features_in_": "count"}

    def __init__(self, n_states=2, n_features=None, lag=1, context="right", method="structured",
                 max_iter=50, tol=1e-4, bw_max_iter=50, infer_max_iter=100, infer_tol=1e-10,
                 algorithm="viterbi", params="stmrl", init_params="stmrl",
                 context_init_scale=0.1, max_augmented_states=2**20, warm_start=False,
                 n_threads=None, random_state=None, progress=True, starts="all"):
        self.n_states = n_states
        self.n_features = n_features
        self.lag = lag
        self.context = context
        self.method = method
        self.max_iter = max_iter
        self.tol = tol
        self.bw_max_iter = bw_max_iter
        self.infer_max_iter = infer_max_iter
        self.infer_tol = infer_tol
        self.starts = starts
        self.algorithm = algorithm
        self.params = params
        self.init_params = init_params
        self.context_init_scale = context_init_scale
        self.max_augmented_states = max_augmented_states
        self.warm_start = warm_start
        self.n_threads = n_threads
        self.random_state = random_state
        self.progress = progress

    # -------------------------------------------------------------------------- validation
    @property
    def _right(self):
        return self.context in ("right", "both")

    @property
    def _left(self):
        return self.context in ("left", "both")

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.allow_nan = True       # NaN marks a missing value (marginalised)
        return tags

    def _check_hyper(self):
        """Validate every hyperparameter as it is now (any may have been assigned) against the
        declared ``_parameter_constraints``."""
        validate_params(self)

    def _start_names(self):
        """``starts`` as a tuple of start names, or None for all of them."""
        return self._start_names_of(self.starts)

    @staticmethod
    def _start_names_of(st):
        """``st`` (a value of ``starts``) as a tuple of start names, or None for all."""
        if isinstance(st, str) and st == "all":
            return None
        names = (st,) if isinstance(st, str) else st
        ok = isinstance(names, (tuple, list)) and len(names) > 0 and all(
            isinstance(k, str) and k in _chain.START_NAMES for k in names)
        if not ok or len(set(names)) != len(names):
            raise ValueError(f"starts must be 'all', one of {_chain.START_NAMES} or a sequence "
                             f"of them without repeats, got {st!r}")
        return tuple(names)

    @staticmethod
    def _check_method(method, name="method", allowed=_METHODS):
        return check_value(method, name, [Options(*allowed)], "ContextHMM")

    def _n_features(self, X=None):
        if self.n_features is not None:
            return int(self.n_features)
        means = getattr(self, "means_", None)
        if means is not None and as_array(means, "means_").ndim == 2:
            return int(np.shape(means)[1])
        if X is not None:
            return None     # the data say (and are checked for being 2-D)
        raise NotFittedError(
            f"This {type(self).__name__} has no means_: call fit() or assign means_ "
            "(an array of shape (n_states, n_features))")

    @staticmethod
    def _prob(value, name, shape, rows):
        A = as_array(value, name)
        if A.dtype.kind not in "biuf":
            raise TypeError(f"{name} must be numeric, got dtype {A.dtype}")
        A = np.ascontiguousarray(A, dtype=np.float64)
        if A.shape != shape:
            raise ValueError(f"{name} must have shape {shape} (n_states = {shape[0]}), got {A.shape}")
        what = "rows must be probability vectors" if rows else "must be a probability vector"
        if not np.all(np.isfinite(A)) or np.any(A < 0):
            raise ValueError(f"{name} {what} (non-negative, summing to 1); it has "
                             f"{'non-finite' if not np.all(np.isfinite(A)) else 'negative'} "
                             "entries")
        sums = A.sum(-1)
        off = np.abs(sums - 1.0) > _PROB_TOL
        if np.any(off):
            where = f"row {int(np.argmax(off))} sums" if rows else "it sums"
            raise ValueError(f"{name} {what} (non-negative, summing to 1 within "
                             f"{_PROB_TOL:g}); {where} to {float(sums[off][0])!r}")
        # sums within the tolerance but off by more than rounding (float32 input, rounded
        # decimals): divided by their sums; sums within rounding of 1 are left as they are
        fix = np.abs(sums - 1.0) > _PROB_EXACT
        if np.any(fix):
            A = A.copy()
            A[fix] /= sums[fix][..., None]
        return A

    def _params(self):
        """The parameters, validated, as C-contiguous float64 arrays (defaults filled in)."""
        self._check_hyper()
        n = int(self.n_states)
        means = getattr(self, "means_", None)
        if means is None:
            raise NotFittedError(
                f"This {type(self).__name__} has no means_: call fit() or assign means_ "
                "(an array of shape (n_states, n_features))")
        means = as_array(means, "means_")
        D = self._n_features()
        if self.n_features is not None and np.ndim(means) == 2 and np.shape(means)[1] != D:
            raise ValueError(
                f"n_features={self.n_features!r} disagrees with means_, which has "
                f"{np.shape(means)[1]} columns (n_features must be None or the number of columns "
                "of means_)")
        out = []
        for name, present in (("means_", True), ("right_means_", self._right),
                              ("left_means_", self._left)):
            M = getattr(self, name, None)
            M = np.zeros((n, D)) if M is None else as_array(M, name)
            if M.dtype.kind not in "biuf":
                raise TypeError(f"{name} must be numeric, got dtype {M.dtype}")
            M = np.ascontiguousarray(M, dtype=np.float64)
            if M.shape != (n, D):
                raise ValueError(f"{name} must have shape (n_states, n_features) = ({n}, {D}), "
                                 f"got {M.shape}")
            if not np.all(np.isfinite(M)):
                raise ValueError(f"{name} contains NaN or infinite values")
            big = float(np.max(np.abs(M - M.mean(axis=0)) if name == "means_" else np.abs(M)))
            if big > _MAX_MAGNITUDE:
                raise ValueError(
                    f"{name} has entries {big:.3g} away from "
                    f"{'their centre' if name == 'means_' else 'zero'}: beyond "
                    f"{_MAX_MAGNITUDE:g} their squares, summed over a sequence, leave the range "
                    "of float64")
            if not present and np.any(M != 0):
                raise ValueError(f"{name} must be all zeros: context={self.context!r} has no "
                                 f"{name.split('_')[0]} context")
            out.append(M)
        sp = getattr(self, "startprob_", None)
        sp = np.full(n, 1.0 / n) if sp is None else self._prob(sp, "startprob_", (n,), False)
        A = getattr(self, "transmat_", None)
        A = np.full((n, n), 1.0 / n) if A is None else self._prob(A, "transmat_", (n, n), True)
        return sp, A, out[0], out[1], out[2]

    def _check_fitted(self):
        """``mf.load``: the loaded parameters as every call checks them."""
        if getattr(self, "means_", None) is not None:
            self._params()

    def _check_X(self, X, lengths, n_features=None):
        """Concatenated (N, n_features) data and offsets (n_seq + 1,) of its sequences."""
        D = self._n_features(X) if n_features is None else n_features
        if isinstance(X, (list, tuple)) and len(X) > 0 and all(np.ndim(x) == 2 for x in X):
            if lengths is not None:
                raise ValueError("lengths must be None when X is a list of sequences")
            parts = [_as_data(X[0], "X[0]", D)]
            D = parts[0].shape[1]
            parts += [_as_data(x, f"X[{i}]", D) for i, x in enumerate(X) if i]
            lengths = [p.shape[0] for p in parts]
            Xc = np.ascontiguousarray(np.concatenate(parts, axis=0))
        else:
            Xc = _as_data(X, "X", D)
        if Xc.shape[0] == 0:
            raise ValueError("X has no rows")
        return Xc, check_lengths([Xc.shape[0]] if lengths is None else lengths, Xc.shape[0])

    # --------------------------------------------------------------------------- kernels
    def _solve(self, Xs, offsets, method, P, want_stats=False, first_order=False, init=None,
               max_iter=None, tol=None):
        """Run the kernel on data and means already in centred coordinates (``_shifted``, or
        fit's shift).

        ``P`` = (startprob, transmat, U, V, W) as validated float64 arrays."""
        self._check_hyper()
        method = self._check_method(method)
        sp, A, U, V, W = P
        right = self._right and not first_order
        left = self._left and not first_order
        longest = int(np.max(np.diff(offsets)))
        # a lag >= a sequence's length leaves it first-order, and so does every larger lag
        lag = min(int(self.lag), longest)
        if method == "exact":
            size = _chain.exact_states(int(self.n_states), lag, right, left, longest)
            if size < 0 or size > self.max_augmented_states:
                w = min(longest, 1 + lag * (right + left))
                raise ValueError(
                    f"method='exact' walks n_states**w = {self.n_states}**{w} augmented states "
                    f"(lag={self.lag}, context={self.context!r}), more than "
                    f"max_augmented_states={self.max_augmented_states}; use method='structured' "
                    "or raise max_augmented_states"
                )
        max_iter = check_int(self.infer_max_iter if max_iter is None else max_iter,
                             "infer_max_iter" if max_iter is None else "max_iter", 0)
        tol = check_real(self.infer_tol if tol is None else tol,
                         "infer_tol" if tol is None else "tol")
        # threads over sequences; a structured solve can also run its starts apart
        starts = self._start_names()
        n_starts = _chain.N_STARTS if starts is None else len(starts)
        n_items = (len(offsets) - 1) * (n_starts if method == "structured" else 1)
        n_threads = n_threads_for(self.n_threads, n_items)
        return _chain.run(method, sp, A, U, V, W, lag, right, left, Xs, offsets, max_iter, tol,
                          want_stats, n_threads, init, starts)

    def _estep(self, Xs, offsets, P, first_order=False, init=None):
        """fit's mean-field E-step in fit's coordinates, with the M-step statistics: from the
        first-order chain or warm-started from ``init`` as given, else by the structured
        solver's starts (:meth:`_solve_from_starts`)."""
        if first_order or init is not None:
            return self._solve(Xs, offsets, "structured", P, want_stats=True,
                               first_order=first_order, init=init)
        return self._solve_from_starts(Xs, offsets, P)

    def _solve_from_starts(self, Xs, offsets, P):
        """fit's mean-field E-step without a warm start, the one that runs the structured
        solver's starts: solved in the coordinates of :meth:`_centres` (so that the starts do
        not depend on how fit's origin splits between the tables), with the M-step statistics
        mapped back to ``P``'s.  In those coordinates the bound is F_c(theta - c) = F(theta),
        c the tables' row means, so H is the same and g = g_c + H c."""
        Pc, centre = self._centres(P, Xs.shape, offsets)
        r = self._solve(np.ascontiguousarray(Xs - centre), offsets, "structured", Pc,
                        want_stats=True)
        c = np.concatenate([np.broadcast_to(M.mean(axis=0), M.shape) for M in P[2:]])  # (3n, D)
        r["g"] = r["g"] + np.einsum("sdij,jd->sdi", r["H"], c)
        return r

    def _centres(self, P, shape, offsets=None):
        """The coordinates in which every table is centred (see "The origin" in
        docs/context_hmm.md): ``(P_c, centre)``, the parameters ``P`` with each mean table less
        the mean of its rows, and the (N, D) array to subtract from the data: at each output
        x_t the sum of those row means over the tables whose term its mean has (``means_``
        always, ``right_means_`` when s_{t+lag} lies in its sequence, ``left_means_`` when
        s_{t-lag} does), so that every residual x_t - m_t is unchanged.  ``shape``: the data's
        (N, D); ``offsets`` (n_seq + 1,): the sequences' boundaries (None: one sequence)."""
        sp, A, U, V, W = P
        u, v, w = U.mean(axis=0), V.mean(axis=0), W.mean(axis=0)
        centre = np.broadcast_to(u, shape)
        N = shape[0]
        if (self._right or self._left) and N > 0:
            offsets = np.array([0, N] if offsets is None else offsets, dtype=np.intp)
            lengths = np.diff(offsets)
            pos = np.arange(N) - np.repeat(offsets[:-1], lengths)
            lag = min(int(self.lag), N)   # (a lag >= N has no context term; no overflow)
            centre = centre.copy()
            if self._right:
                centre[pos + lag < np.repeat(lengths, lengths)] += v
            if self._left:
                centre[pos >= lag] += w
        return (sp, A, U - u, V - v, W - w), centre

    def _shifted(self, Xc, offsets=None):
        """Validated parameters and data in the centred coordinates of :meth:`_centres`."""
        Pc, centre = self._centres(self._params(), Xc.shape, offsets)
        dev = np.abs(Xc - centre)
        if dev.size and np.nanmax(dev, initial=0.0) > _MAX_MAGNITUDE:
            raise ValueError(
                f"X has values {np.nanmax(dev):.3g} away from the centre of their mean (the "
                "mean of the rows of means_, plus those of right_means_ and left_means_ where "
                f"the context state lies in the sequence): beyond {_MAX_MAGNITUDE:g} their "
                "squares, summed over a sequence, leave the range of float64")
        return Pc, np.ascontiguousarray(Xc - centre)

    def _run(self, Xc, offsets, method, want_stats=False, init=None, max_iter=None, tol=None):
        P, Xs = self._shifted(Xc, offsets)
        return self._solve(Xs, offsets, method, P, want_stats=want_stats, init=init,
                           max_iter=max_iter, tol=tol)

    def _public_solve(self, X, lengths, method, what, max_iter=None, tol=None,
                      allowed=_METHODS):
        self._check_hyper()
        given = method is not None
        method = self._check_method(self.method if method is None else method, "method")
        if method not in allowed:
            source = f"method={method!r}" if given else f"the constructor's method={method!r}"
            raise ValueError(
                f"ContextHMM.{what}: {source} gives ln P(X) only, not a posterior over the "
                f"states; pass method='structured' or method='naive' (e.g. "
                f"{what}(X, method='structured'))")
        self._params()   # the model first, so that a bad parameter is named before X
        Xc, offsets = self._check_X(X, lengths)
        r = self._run(Xc, offsets, method, max_iter=max_iter, tol=tol)
        hint = _UNCONVERGED_HINT if max_iter is None and tol is None else "raise max_iter or loosen tol"
        warn_unconverged(r["converged"], f"ContextHMM.{what}(method={method!r})", hint)
        return Xc, offsets, method, r

    # ------------------------------------------------------------------------ inference
    def infer(self, X, lengths=None, method=None, tol=None, max_iter=None):
        """Mean-field inference on each sequence.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features), or list of such arrays
            Sequences, concatenated (with ``lengths``) or as a list.
        lengths : array-like of int, optional
            Lengths of the concatenated sequences (hmmlearn's convention); default: one
            sequence.
        method : {"structured", "naive", "exact"}, optional
            Overrides the constructor's ``method`` for this call.
        tol : float, optional
            Overrides ``infer_tol`` for this call (nats per time step).
        max_iter : int, optional
            Overrides ``infer_max_iter`` for this call.

        Returns
        -------
        result : HMMInferenceResult
            Per-sequence bound, convergence, sweeps, and the posteriors.

        Raises
        ------
        ValueError
            If X, lengths, a hyperparameter or a parameter is invalid, or a sequence has
            probability zero under the model.
        sklearn.exceptions.NotFittedError
            If ``means_`` is not set.

        Warns
        -----
        ConvergenceWarning
            When the solve of some sequence did not converge within ``max_iter`` sweeps.
        """
        Xc, offsets, method, r = self._public_solve(X, lengths, method, "infer", max_iter, tol)
        used_tol = check_real(self.infer_tol if tol is None else tol, "tol")
        return HMMInferenceResult(
            bound=r["bound"], converged=r["converged"], n_iter=r["n_sweeps"], method=method,
            tol=used_tol, posteriors=r.get("gamma"), potentials=r.get("logpot"),
            history=r.get("history"), lengths=np.diff(offsets),
        )

    def score(self, X, lengths=None, method=None):
        """Total over sequences of the bound on ln P(x) (``"exact"``: ln P(x) itself), in nats.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features), or list of such arrays
            Sequences, concatenated (with ``lengths``) or as a list.
        lengths : array-like of int, optional
            Lengths of the concatenated sequences; default: one sequence.
        method : {"structured", "naive", "exact"}, optional
            Overrides the constructor's ``method``.

        Returns
        -------
        log_prob : float
            As hmmlearn's ``score``: the sum over sequences (the per-sequence values are
            ``infer(X, lengths).bound``).
        """
        return float(np.sum(self._public_solve(X, lengths, method, "score")[3]["bound"]))

    def score_samples(self, X, lengths=None, method=None):
        """The bound on ln P(X) and the posterior marginals of every sample (hmmlearn's meaning).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features), or list of such arrays
            Sequences, concatenated (with ``lengths``) or as a list.
        lengths : array-like of int, optional
            Lengths of the concatenated sequences; default: one sequence.
        method : {"structured", "naive"}, optional
            Overrides the constructor's ``method``.

        Returns
        -------
        log_prob : float
            The bound, summed over sequences.
        posteriors : ndarray of shape (n_samples, n_states)
            Q(S_t = i) for every sample.
        """
        r = self._public_solve(X, lengths, method, "score_samples",
                               allowed=("structured", "naive"))[3]
        return float(np.sum(r["bound"])), r["gamma"]

    def predict_proba(self, X, lengths=None, method=None):
        """Posterior marginals Q(S_t = i) of every sample.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features), or list of such arrays
            Sequences, concatenated (with ``lengths``) or as a list.
        lengths : array-like of int, optional
            Lengths of the concatenated sequences; default: one sequence.
        method : {"structured", "naive"}, optional
            Overrides the constructor's ``method``.

        Returns
        -------
        posteriors : ndarray of shape (n_samples, n_states)
            Rows sum to one.
        """
        return self._public_solve(X, lengths, method, "predict_proba",
                                  allowed=("structured", "naive"))[3]["gamma"]

    def decode(self, X, lengths=None, algorithm=None, method=None):
        """Most likely state sequence under the mean-field posterior.

        ``algorithm="viterbi"`` returns the most probable path of the structured posterior's
        chain Q(s) ~ startprob[s_0] prod transmat prod exp(h_t(s_t)) (the exact Viterbi path of
        the model when the context means are zero); with ``method="naive"`` Q is a product and
        its most probable path is the argmax of each marginal.  ``algorithm="map"`` returns the
        argmax of each marginal.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features), or list of such arrays
            Sequences, concatenated (with ``lengths``) or as a list.
        lengths : array-like of int, optional
            Lengths of the concatenated sequences; default: one sequence.
        algorithm : {"viterbi", "map"}, optional
            Overrides the constructor's ``algorithm``.
        method : {"structured", "naive"}, optional
            Overrides the constructor's ``method``.

        Returns
        -------
        log_prob : float
            The log-probability ln P(x, s) of the decoded path under the model (context terms
            included), summed over sequences.
        state_sequence : ndarray of int, shape (n_samples,)
            The decoded states.
        """
        return self._decode(X, lengths, algorithm, method, "decode")

    def predict(self, X, lengths=None, method=None):
        """Most likely state of every sample (the path of :meth:`decode`).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features), or list of such arrays
            Sequences, concatenated (with ``lengths``) or as a list.
        lengths : array-like of int, optional
            Lengths of the concatenated sequences; default: one sequence.
        method : {"structured", "naive"}, optional
            Overrides the constructor's ``method``.

        Returns
        -------
        state_sequence : ndarray of int, shape (n_samples,)
            The decoded state of every sample (with the constructor's ``algorithm``).
        """
        return self._decode(X, lengths, None, method, "predict")[1]

    def sample_posterior(self, X, n_samples=1, lengths=None, method=None, random_state=None):
        """Draw state sequences from the variational posterior Q of every sequence.

        For ``method="structured"`` Q is the chain Q(s) ~ startprob[s_0] prod transmat
        prod exp(h_t(s_t)) of :meth:`infer` (its ``potentials``), and whole paths are drawn from
        it by forward filtering and backward sampling, so the draws keep Q's dependence between
        neighbouring states; for ``"naive"`` Q is a product and each state is drawn from its
        marginal.  NaN entries of X are missing values (marginalised), as everywhere.

        Parameters
        ----------
        X : array-like of shape (n_samples_X, n_features), or list of such arrays
            Sequences, concatenated (with ``lengths``) or as a list.
        n_samples : int, default=1
            Draws per sequence.
        lengths : array-like of int, optional
            Lengths of the concatenated sequences; default: one sequence.
        method : {"structured", "naive"}, optional
            Overrides the constructor's ``method``.
        random_state : None, int or numpy Generator, optional
            Seed of the draws (the constructor's ``random_state`` when None).  The draws do
            not depend on ``n_threads``.

        Returns
        -------
        states : ndarray of int, shape (n_samples, n_samples_X)
            Row k is draw k of every sequence, concatenated as X.

        Raises
        ------
        ValueError
            If ``n_samples`` is not an integer >= 0, or as :meth:`infer`.

        Examples
        --------
        >>> import numpy as np
        >>> import mfengine as mf
        >>> h = mf.ContextHMM(2, 1, lag=2, context="right")
        >>> h.means_ = np.array([[-1.0], [1.0]])
        >>> h.right_means_ = np.array([[0.3], [-0.3]])
        >>> X, _ = h.sample(20, random_state=0)
        >>> h.sample_posterior(X, n_samples=5, random_state=0).shape
        (5, 20)
        """
        k = check_int(n_samples, "n_samples", 0, 2**31 - 1)
        Xc, offsets, method, r = self._public_solve(
            X, lengths, method, "sample_posterior", allowed=("structured", "naive"))
        rng = check_random_state(self.random_state if random_state is None else random_state)
        N = Xc.shape[0]
        out = np.empty((k, N), dtype=np.intp)
        if method == "structured":
            sp, A = self._params()[:2]
            for a, b in zip(offsets[:-1], offsets[1:]):
                u = rng.random((k, b - a))
                out[:, a:b] = _chain.sample_chain(sp, A, r["logpot"][a:b], u)
        else:
            cum = np.cumsum(r["gamma"], axis=1)
            u = rng.random((k, N)) * cum[None, :, -1]
            out[:] = np.minimum((u[:, :, None] >= cum[None]).sum(-1), cum.shape[1] - 1)
        return out

    def _decode(self, X, lengths, algorithm, method, what):
        algorithm = check_value(self.algorithm if algorithm is None else algorithm, "algorithm",
                                [Options(*_ALGORITHMS)], "ContextHMM")
        Xc, offsets, method, r = self._public_solve(X, lengths, method, what,
                                                    allowed=("structured", "naive"))
        if algorithm == "viterbi" and method == "structured":
            sp, A = self._params()[:2]
            path = _chain.viterbi(sp, A, r["logpot"], offsets)[0]
        else:
            path = np.argmax(r["gamma"], axis=1).astype(np.intp)
        return self._log_joint(Xc, offsets, path), path

    def _log_joint(self, Xc, offsets, path):
        """ln P(x, s) of the state sequence ``path`` under the model, summed over sequences."""
        sp, A, U, V, W = self._params()
        lag = int(self.lag)
        total = 0.0
        with np.errstate(divide="ignore"):
            logA, logsp = np.log(A), np.log(sp)
            for a, b in zip(offsets[:-1], offsets[1:]):
                s, x = path[a:b], Xc[a:b]
                T = b - a
                mean = U[s].copy()
                if self._right and lag < T:
                    mean[:T - lag] += V[s[lag:]]
                if self._left and lag < T:
                    mean[lag:] += W[s[:T - lag]]
                total += logsp[s[0]] + np.sum(logA[s[:-1], s[1:]])
                seen = ~np.isnan(x)    # missing values are marginalised: their terms drop out
                total += -0.5 * np.sum((x - mean)[seen] ** 2) - np.count_nonzero(seen) * _HALF_LOG_2PI
        return float(total)

    def sample(self, n_samples=1, random_state=None):
        """Draw one sequence of length ``n_samples`` from the model.

        Parameters
        ----------
        n_samples : int, default=1
            Length of the sequence.
        random_state : None, int or numpy Generator, optional
            Seed; None uses the constructor's ``random_state``.

        Returns
        -------
        X : ndarray of shape (n_samples, n_features)
            The outputs.
        state_sequence : ndarray of int, shape (n_samples,)
            The hidden states.
        """
        T = check_int(n_samples, "n_samples", 1)
        if T > 2**31 - 1:
            raise ValueError(f"n_samples must be at most 2**31 - 1 time steps, got {T}")
        sp, A, U, V, W = self._params()
        rng = check_random_state(self.random_state if random_state is None else random_state)
        n = int(self.n_states)
        try:
            states = np.empty(T, dtype=np.intp)
            np.empty((T, U.shape[1]))     # the output too must fit, before the long loop
        except MemoryError as exc:
            raise MemoryError(f"n_samples={T} time steps do not fit in memory: {exc}") from exc
        states[0] = rng.choice(n, p=sp)
        cum = np.cumsum(A, axis=1)
        u = rng.random(T)
        for t in range(1, T):
            states[t] = min(int(np.searchsorted(cum[states[t - 1]], u[t], side="right")), n - 1)
        mean = U[states].copy()
        L = int(self.lag)
        if self._right and T > L:
            mean[:-L] += V[states[L:]]
        if self._left and T > L:
            mean[L:] += W[states[:-L]]
        X = mean + rng.standard_normal((T, U.shape[1]))
        return X, states

    # ------------------------------------------------------------------------- learning
    def _needs_init(self, code, name):
        """hmmlearn's rule: initialise when listed in init_params (warning when the attribute
        was set) or when the attribute is not set."""
        if code in self.init_params:
            if getattr(self, name, None) is not None:
                warnings.warn(
                    f"Even though the {name!r} attribute is set, it will be overwritten during "
                    f"initialization because 'init_params' contains {code!r}",
                    UserWarning, stacklevel=user_stacklevel())
            return True
        return getattr(self, name, None) is None

    def _init(self, data, D, rng):
        """Set the parameters that ``init_params`` (or their absence) asks to initialise, as
        hmmlearn does; return them validated, and whether each context table is to be drawn at
        the start of mean-field EM.  ``data()`` gives the training data in memory; it is
        called only for the k-means of the means."""
        n = int(self.n_states)
        if self._needs_init("s", "startprob_"):
            self.startprob_ = np.full(n, 1.0 / n)
        if self._needs_init("t", "transmat_"):
            self.transmat_ = np.full((n, n), 1.0 / n)
        if self._needs_init("m", "means_"):
            km = KMeans(n_clusters=n, n_init=10, random_state=int(rng.integers(2**31 - 1)))
            with warnings.catch_warnings():
                # fewer distinct points than states: KMeans says so; the means are still usable
                warnings.filterwarnings("ignore", module="sklearn")
                # missing frames left out, missing coordinates of the others at the column mean
                Xc = data()
                rows = Xc[~np.isnan(Xc).all(axis=1)]
                rows = np.where(np.isnan(rows), np.nanmean(Xc, axis=0), rows)
                self.means_ = np.ascontiguousarray(km.fit(rows).cluster_centers_, dtype=np.float64)
        draw = {}
        for code, name, present in (("r", "right_means_", self._right),
                                    ("l", "left_means_", self._left)):
            draw[name] = present and self._needs_init(code, name)
            if not present or draw[name]:
                setattr(self, name, np.zeros((n, D)))   # zero during the Baum-Welch warm-up
        P = self._params()
        if P[2].shape[1] != D:
            raise ValueError(f"means_ has {P[2].shape[1]} columns but X has {D}")
        return P, draw["right_means_"], draw["left_means_"]

    def _mstep_chain(self, P, r, offsets):
        """New (startprob, transmat) from the E-step's marginals, as ``params`` allows."""
        sp, A = P[0], P[1]
        if "s" in self.params:
            g0 = r["gamma"][offsets[:-1]].sum(0)
            sp = g0 / g0.sum()
        if "t" in self.params:
            xi = r["xi"].sum(0)
            rows = xi.sum(1)
            A = np.array(A, dtype=np.float64)
            ok = rows > 0
            A[ok] = xi[ok] / rows[ok, None]
        return np.ascontiguousarray(sp), np.ascontiguousarray(A)

    def _mstep_means(self, P, r, tables):
        """Maximise the bound over the mean tables in ``tables`` (0 = means_, 1 = right, 2 =
        left) with Q and the other tables held fixed: one linear solve per output dimension."""
        if not tables:
            return P[2], P[3], P[4]
        n = int(self.n_states)
        H = r["H"].sum(0)
        g = r["g"].sum(0)
        idx = np.concatenate([np.arange(k * n, (k + 1) * n) for k in tables])
        theta = np.concatenate([P[2], P[3], P[4]], axis=0)
        for d in range(theta.shape[1]):
            Hd = H[d]
            rhs = g[d][idx] - Hd[idx] @ theta[:, d]
            theta[idx, d] += np.linalg.lstsq(Hd[np.ix_(idx, idx)], rhs, rcond=1e-12)[0]
        return (np.ascontiguousarray(theta[:n]), np.ascontiguousarray(theta[n:2 * n]),
                np.ascontiguousarray(theta[2 * n:]))

    def fit(self, X, lengths=None):
        """Baum-Welch for the first-order model, then mean-field EM over all parameters.

        The procedure of Saul & Jordan (1996, sec. 3): the context means are held at zero while
        Baum-Welch fits the first-order HMM (its E-step is exact); then they are released and
        the parameters are re-estimated by EM whose E-step is structured mean field and whose
        M-step maximises the same bound with Q fixed (``startprob_`` and ``transmat_`` in closed form,
        the mean tables by one linear solve per output dimension).  When new transitions
        would lower the bound (Q's family is the chain with the model's transitions, so moving
        them moves the family) they are not taken, and an M-step that still lowers it (at the
        precision limit) ends the phase, so neither part of ``history_`` ever decreases.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features), or list of such arrays
            Training sequences, concatenated (with ``lengths``) or as a list.
        lengths : array-like of int, optional
            Lengths of the concatenated sequences; default: one sequence.

        Returns
        -------
        self : ContextHMM
            The fitted model.

        Raises
        ------
        ValueError
            If X, lengths, a hyperparameter or a parameter kept from before fit is invalid.

        Warns
        -----
        ConvergenceWarning
            When ``tol`` is given and the last phase did not meet it within its iterations,
            or when the last E-step left sequences unconverged.
        """
        self._check_hyper()
        # X, or its first sequence when X is a list of them (a ragged one refused by name)
        first = X
        if isinstance(X, (list, tuple)) and X and as_array(X[0], "X[0]").ndim == 2:
            first = X[0]
        first = as_array(first, "X")
        if self.n_features is not None:
            D = int(self.n_features)
        else:   # hmmlearn's rule: the data say how many features
            D = int(first.shape[1]) if first.ndim == 2 else None
        if self.n_features is not None and D is not None:
            if first.ndim == 2 and first.shape[1] != D:
                raise ValueError(f"X has {np.shape(first)[1]} columns but n_features="
                                 f"{self.n_features!r} (n_features must be None or the number "
                                 "of columns of X)")
        Xc, offsets = self._check_X(X, lengths, n_features=D)
        D = Xc.shape[1]
        N = Xc.shape[0]
        n = int(self.n_states)
        if N < n:
            raise ValueError(f"X has {N} rows, fewer than n_states={n}")
        missing = np.isnan(Xc)
        if missing.all(axis=0).any():
            d = int(np.nonzero(missing.all(axis=0))[0][0])
            raise ValueError(f"X: column {d} has no observed value (all NaN), so fit cannot "
                             "estimate the means of that feature")
        n_frames = int(np.count_nonzero(~missing.all(axis=1)))
        if n_frames < n:
            raise ValueError(f"X has {n_frames} rows with an observed value (the others are all "
                             f"NaN: missing frames), fewer than n_states={n}")
        # the means are estimated from X: data spread beyond _MAX_MAGNITUDE would give means
        # the kernels must refuse, so X is named here (measured from the median, which no
        # value can push to infinity)
        dev = np.abs(Xc - np.nanmedian(Xc, axis=0))
        if np.nanmax(dev) > _MAX_MAGNITUDE:
            raise ValueError(
                f"X has values {np.nanmax(dev):.3g} away from the median of their column: beyond "
                f"{_MAX_MAGNITUDE:g} the squared distances fit computes leave the range of "
                "float64; rescale X")
        rng = check_random_state(self.random_state)
        P, init_right, init_left, warm = self._start(D, rng, lambda: Xc)
        # every computation of fit runs with data and means shifted by the data's mean
        shift = np.nanmean(Xc, axis=0)
        Xs = np.ascontiguousarray(Xc - shift)

        def estep(P, first_order=False, init=None):
            return self._estep(Xs, offsets, P, first_order, init), offsets

        return self._em(estep, P, shift, float(np.nanstd(Xc)), N, rng, warm, init_right,
                        init_left, "ContextHMM.fit")

    def _start(self, D, rng, data):
        """fit's starting parameters: the current ones (``warm_start``) or those that
        ``init_params`` asks for (``data()``: the training data, read only for k-means);
        returns ``(P, init_right, init_left, warm)``."""
        warm = bool(self.warm_start) and getattr(self, "means_", None) is not None
        if warm:
            P, init_right, init_left = self._params(), False, False
            if P[2].shape[1] != D:
                raise ValueError(f"means_ has {P[2].shape[1]} columns but X has {D}")
        else:
            P, init_right, init_left = self._init(data, D, rng)
        return P, init_right, init_left, warm

    def _em(self, estep, P, shift, std, n_rows, rng, warm, init_right, init_left, desc):
        """fit's EM: Baum-Welch on the first-order model, then mean-field EM; sets the fitted
        attributes and returns ``self``.

        The one training loop of ContextHMM, whatever holds the data: ``estep(P,
        first_order=False, init=None)`` returns ``(r, offsets)``, the E-step's statistics at
        the parameters ``P`` (data and means shifted by ``shift``) in the layout of the
        kernel's ``want_stats`` answer (``bound``, ``converged``, ``gamma`` whose rows
        ``offsets[:-1]`` are first steps, ``xi``, ``H``, ``g``, and ``logpot``: the chain's
        potentials, handed back as ``init`` to warm-start the next E-step).  ``fit`` computes
        it on the array in memory, the data-parallel fit (:meth:`_dask_fit`) as sums over
        partitions.  ``std``: the data's standard deviation (the scale of the drawn context
        means); ``n_rows``: the number of time steps (``tol`` is per step)."""
        n = int(self.n_states)
        D = P[2].shape[1]
        U_start = P[2]
        P = (P[0], P[1], np.ascontiguousarray(P[2] - shift), P[3], P[4])
        U_start_shifted = P[2]
        far = float(np.max(np.abs(P[2]), initial=0.0))
        if warm and far > _MAX_MAGNITUDE:
            # (drawn or estimated means lie within the data's range, which fit has checked)
            raise ValueError(
                f"means_ (kept by warm_start) lie {far:.3g} away from the mean of X: beyond "
                f"{_MAX_MAGNITUDE:g} their squared distances to the data leave the range of "
                "float64; rescale X or fit without warm_start")
        tol = None if self.tol is None else float(self.tol) * n_rows
        n_bw = 0 if warm else int(self.bw_max_iter)
        n_mf = int(self.max_iter)
        tables = [k for k, code, present in ((0, "m", True), (1, "r", self._right),
                                             (2, "l", self._left))
                  if code in self.params and present]
        last_r = None

        with progress_bar(total=n_bw + n_mf, desc=desc, disable=not self.progress) as bar:
            # -- Baum-Welch on the first-order model (context means ignored)
            def bw_e_step(P):
                r, offsets = estep(P, first_order=True)
                return float(r["bound"].sum()), (r, offsets)

            def bw_m_step(P, stats):
                r, offsets = stats
                sp, A = self._mstep_chain(P, r, offsets)
                U = self._mstep_means(P, r, [0] if "m" in self.params else [])[0]
                return (sp, A, U, P[3], P[4])

            def bw_record(value, stats):
                bar.update(1)
                bar.set_postfix(phase="baum-welch", loglik=f"{value:.4f}", refresh=False)

            bw = EMMonitor(tol)
            P, _, stats = run_em(P, bw_e_step, bw_m_step, n_bw, bw, last="none",
                                 on_record=bw_record)
            if stats is not None:
                last_r = stats[0]
            history, converged = list(bw.history), bw.converged
            bw_n_iter = len(history)
            # -- mean-field EM, each E-step's coordinate ascent warm-started from the previous
            # chain's potentials
            if n_mf > 0:
                scale = float(self.context_init_scale) * std
                V, W = P[3], P[4]
                if init_right:
                    V = np.ascontiguousarray(scale * rng.standard_normal((n, D)))
                if init_left:
                    W = np.ascontiguousarray(scale * rng.standard_normal((n, D)))
                P = (P[0], P[1], P[2], V, W)
                logpot = None

                def mf_e_step(P):
                    r, offsets = estep(P, init=logpot)
                    return float(r["bound"].sum()), (r, offsets)

                def mf_m_step(P, stats):
                    r, offsets = stats
                    sp, A = self._mstep_chain(P, r, offsets)
                    return (sp, A) + self._mstep_means(P, r, tables)

                def mf_fell(saved, P, value, stats):
                    # new transitions put the previous Q outside the chain family; with the old
                    # ones it is inside, and the new means alone cannot lower the bound
                    P_old = (saved[0][0], saved[0][1], P[2], P[3], P[4])
                    b, stats = mf_e_step(P_old)
                    if not b >= saved[1]:
                        return saved[0], saved[1], saved[2], True   # rounding at the limit
                    return P_old, b, stats, False

                def mf_record(value, stats):
                    nonlocal logpot
                    logpot = stats[0]["logpot"]
                    bar.update(1)
                    bar.set_postfix(phase="mean-field EM", bound=f"{value:.4f}", refresh=False)

                mf = EMMonitor(tol)
                P, _, stats = run_em(P, mf_e_step, mf_m_step, n_mf, mf, last="check",
                                     fell=mf_fell, on_record=mf_record)
                last_r = stats[0]
                history += mf.history
                converged = mf.converged

        self.startprob_, self.transmat_ = P[0], P[1]
        # means never updated come back bit for bit (no round trip through the shift)
        self.means_ = U_start if P[2] is U_start_shifted else P[2] + shift
        self.right_means_, self.left_means_ = P[3], P[4]
        self.history_ = np.asarray(history, dtype=np.float64)
        self.n_iter_ = len(history)
        self.bw_n_iter_ = bw_n_iter
        self.converged_ = bool(converged)
        self.n_features_in_ = D
        if self.tol is not None and not converged and self.n_iter_ > 0:
            phase = "mean-field EM" if n_mf > 0 else "Baum-Welch"
            warnings.warn(
                f"ContextHMM.fit: {phase} did not meet tol={self.tol} within its "
                f"{n_mf if n_mf > 0 else n_bw} iterations; raise "
                f"{'max_iter' if n_mf > 0 else 'bw_max_iter'} or loosen tol",
                ConvergenceWarning, stacklevel=user_stacklevel())
        if last_r is not None:
            warn_unconverged(last_r["converged"], "ContextHMM.fit (last E-step)",
                             _UNCONVERGED_HINT)
        return self

    # --- dask hooks
    # The data-parallel fit of mfengine._dask: it hands over a Partitions object (row blocks
    # of a dask array, each holding whole sequences) and imports nothing from this module.
    def _dask_fit(self, parts, y=None):
        """``fit`` on a dask array: :meth:`_em` with an E-step whose statistics are summed
        over the partitions (:meth:`_dask_estep` runs where each block is; the chain's
        potentials stay there as the next warm start); the M-steps run on the client.

        ``parts``: a ``mfengine._dask.Partitions`` whose ``lengths`` give the sequences of
        each block.  The k-means of the initial means (scikit-learn's) reads the data on the
        client: set ``means_`` and leave "m" out of ``init_params`` to keep every pass on the
        workers."""
        self._check_hyper()
        N, n_cols = parts.shape
        D = int(self.n_features) if self.n_features is not None else n_cols
        if n_cols != D:
            raise ValueError(f"X has {n_cols} features, but n_features={D}")
        n = int(self.n_states)
        if N < n:
            raise ValueError(f"X has {N} rows, fewer than n_states={n}")
        rng = check_random_state(self.random_state)
        P, init_right, init_left, warm = self._start(D, rng, parts.gather)
        shift, std = parts.mean_and_std()
        shift = np.asarray(shift, dtype=np.float64)
        shipped = copy.deepcopy(self)

        def estep(P, first_order=False, init=None):
            outs, logpot = parts.step(ContextHMM._dask_estep,
                                      (shipped, P, shift, first_order, init is not None),
                                      parts.lengths, init)
            outs = [o for _, o in outs]
            # one row per partition; its 'first step' is the partition's summed first steps
            r = {"bound": np.array([o["bound"] for o in outs]),
                 "converged": np.concatenate([o["converged"] for o in outs]),
                 "gamma": np.array([o["gamma"] for o in outs]), "logpot": logpot}
            for key in ("xi", "H", "g"):
                if key in outs[0]:
                    r[key] = np.array([o[key] for o in outs])
            return r, np.arange(len(outs) + 1)

        return self._em(estep, P, shift, float(std), N, rng, warm, init_right, init_left,
                        "ContextHMM.fit (dask)")

    @staticmethod
    def _dask_estep(block, state, shared, lengths):
        """One partition's E-step (whole sequences, run where the block is): its summed
        statistics, and the chain's log-potentials as its next warm start."""
        model, P, shift, first_order, use_init = shared
        Xc, offsets = model._check_X(np.asarray(block), lengths, n_features=shift.shape[0])
        Xs = np.ascontiguousarray(Xc - shift)
        r = model._estep(Xs, offsets, P, first_order, state if use_init else None)
        small = {"bound": float(r["bound"].sum()), "converged": r["converged"],
                 "gamma": r["gamma"][offsets[:-1]].sum(0)}
        for key in ("xi", "H", "g"):
            if r.get(key) is not None:
                small[key] = r[key].sum(0)
        return small, r.get("logpot")
