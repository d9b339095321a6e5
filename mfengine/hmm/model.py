"""Context-sensitive hidden Markov models (Saul & Jordan 1996, sec. 3, eq. 23): the estimator.

The structured mean-field bound keeps the first-order chain exact (forward-backward) and treats
the long-range couplings between the state at t and the states at t +- lag in mean field
(Saul & Jordan 1996, sec. 2.3): Q is the model's chain with free per-site potentials, and the
bound is Q's exact mean-field objective E_Q[ln P(s, x)] + H(Q), maximised by coordinate ascent
over the potentials from several starts (one of them the paper's link-variable solution).  The
derivation, written for this model's Gaussian outputs, is in ``docs/derivations/context_hmm.rst``.

The estimator speaks hmmlearn's language (``fit(X, lengths)``, ``score``, ``score_samples``,
``predict``, ``predict_proba``, ``decode``, ``sample``, ``params`` / ``init_params``), with
mfengine's ``infer`` and ``sample_posterior`` beside it.  NaN entries of X are missing values,
marginalised everywhere.

Each verb checks once (:mod:`mfengine.hmm._checks`), builds the problem records
(:mod:`mfengine.hmm._problem`), and calls :mod:`mfengine.hmm._solve` (the kernel) or
:mod:`mfengine.hmm._learn` (EM); the answers come back as arrays and records.
"""
import numbers
import warnings

import numpy as np
from sklearn.base import BaseEstimator

from mfengine._base import ConvergenceWarning, PersistMixin, user_stacklevel, warn_unconverged
from mfengine._validation import (BOOLEAN, N_THREADS, RANDOM_STATE, Interval, Options, Satisfies,
                                  check_random_state, check_value, validate_params)
from mfengine.hmm._checks import (ALGORITHMS, CONTEXTS, COVARIANCE_TYPES, INT64_MAX,
                                  MAX_MAGNITUDE, MAX_VARIANCE, METHODS, MIN_VARIANCE,
                                  PARAM_CODES, check_data, check_fit_data, check_int,
                                  check_method, check_near_centre, check_params, check_real,
                                  check_starts, fit_n_features, n_features_of)
from mfengine.hmm._chain import START_NAMES
from mfengine.hmm._learn import fit_em, initial_means, initial_variances
from mfengine.hmm._problem import ChainProblem, centred
from mfengine.hmm._result import HMMInferenceResult
from mfengine.hmm._solve import (check_exact_size, combine_partitions, draw_paths, estep,
                                 log_joint, partition_estep, sample_sequence, solve, viterbi)

__all__ = ["ContextHMM", "HMMInferenceResult"]

_UNCONVERGED_HINT = "raise infer_max_iter or loosen infer_tol"


class ContextHMM(PersistMixin, BaseEstimator):
    """Hidden Markov model whose outputs depend on the states at t and at t +- lag.

    States ``S_t`` in ``0 .. n_states - 1`` follow a first-order Markov chain with initial
    probabilities ``startprob_`` and transitions ``transmat_``.  The output ``x_t`` in
    R^n_features is Gaussian with mean
    ``means_[S_t] + right_means_[S_{t+lag}] + left_means_[S_{t-lag}]``, where the right-context
    term is present for ``context="right"`` or ``"both"`` and the left-context term for
    ``"left"`` or ``"both"``, and a diagonal covariance ``covars_`` shared by the states
    (``covariance_type``; Saul & Jordan 1996, eq. 23, fix it at the identity).

    A context state that falls outside the sequence (t + lag >= T or t - lag < 0) contributes
    nothing, so the first ``lag`` outputs have no left context and the last ``lag`` no right
    context; every output x_0 .. x_{T-1} is modelled.  A sequence no longer than ``lag`` is
    therefore a first-order HMM, whatever the size of ``lag``.

    Inference is mean field: ``"structured"`` (Q is the model's own chain with free per-site
    potentials, optimised exactly by coordinate ascent), ``"naive"`` (fully factorised), or
    ``"exact"`` (ln P(x) by forward recursion over the augmented state; small lags only).

    NaN entries of X are missing values, marginalised by every verb and method: a row of NaN
    is a missing frame (its whole emission drops out), a NaN coordinate drops only its own
    terms (the covariance is diagonal).  hmmlearn refuses NaN.

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
    params : str, default="stmcrl"
        Parameters that :meth:`fit` updates: any of ``s`` (``startprob_``), ``t`` (``transmat_``),
        ``m`` (``means_``), ``c`` (``covars_``), ``r`` (``right_means_``), ``l``
        (``left_means_``).
    init_params : str, default="stmcrl"
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
        lower: docs/derivations/context_hmm.rst, "Starts", measures both.
    covariance_type : {"diag", "spherical"}, default="diag"
        hmmlearn's names: one variance per feature (``covars_`` of shape (n_states,
        n_features)) or one for all features (shape (n_states,)).  The states share it: every
        row of ``covars_`` is the same.  (A covariance per state would couple the precision
        of the state at t to the context states through x_t, and with ``context="both"``
        three states at once, outside the structured posterior's pairwise family.)  Learned
        in both phases of :meth:`fit` when ``params`` has ``c``; scaling the data scales it,
        and leaves what is decoded unchanged.
    min_covar : float, default=1e-3
        Floor of the learned variances (hmmlearn's name and default).  Also added to the
        data's variance that initialises ``covars_``.

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
    covars_ : ndarray of shape (n_states,) or (n_states, n_features)
        Output variances in hmmlearn's compact shape for ``covariance_type``, the same row
        for every state (ones, the paper's unit covariance, when not set).  hmmlearn's
        ``covars_`` property gives full matrices; ``np.apply_along_axis(np.diag, 1, covars_)``
        does for ``"diag"``.
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
    structured solver's first-order starts (see "The origin" in docs/derivations/context_hmm.rst).

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
        "context": [Options(*CONTEXTS)],
        "method": [Options(*METHODS)],
        "max_iter": [Interval(numbers.Integral, 0, INT64_MAX)],
        "tol": [None, Interval(numbers.Real, 0, None)],
        "bw_max_iter": [Interval(numbers.Integral, 0, INT64_MAX)],
        "infer_max_iter": [Interval(numbers.Integral, 0, INT64_MAX)],
        "infer_tol": [Interval(numbers.Real, 0, None)],
        "starts": [Satisfies(lambda v: check_starts(v) or True,
                             f"'all', one of {START_NAMES} or a sequence of them "
                             "without repeats")],
        "covariance_type": [Options(*COVARIANCE_TYPES)],
        "min_covar": [Interval(numbers.Real, MIN_VARIANCE, MAX_VARIANCE)],
        "algorithm": [Options(*ALGORITHMS)],
        "params": [Satisfies(lambda v: isinstance(v, str) and not set(v) - set(PARAM_CODES),
                             f"a string of the letters {PARAM_CODES!r}")],
        "init_params": [Satisfies(lambda v: isinstance(v, str) and not set(v) - set(PARAM_CODES),
                                  f"a string of the letters {PARAM_CODES!r}")],
        "context_init_scale": [Interval(numbers.Real, 0, None)],
        "max_augmented_states": [Interval(numbers.Integral, 1, INT64_MAX)],
        "warm_start": [BOOLEAN],
        "n_threads": [N_THREADS],
        "random_state": [RANDOM_STATE],
        "progress": [BOOLEAN],
    }
    # files written before ContextHMM had covariances: their models have the unit covariance,
    # which covars_ left unset gives with these
    _params_added = {"covariance_type": "diag", "min_covar": 1e-3}
    _saved_state = {"startprob_": "array", "transmat_": "array", "means_": "array",
                    "right_means_": "array", "left_means_": "array", "covars_": "array",
                    "history_": "vector",
                    "n_iter_": "count", "bw_n_iter_": "count", "converged_": "flag",
                    "n_features_in_": "count"}

    def __init__(self, n_states=2, n_features=None, lag=1, context="right", method="structured",
                 max_iter=50, tol=1e-4, bw_max_iter=50, infer_max_iter=100, infer_tol=1e-10,
                 algorithm="viterbi", params="stmcrl", init_params="stmcrl",
                 context_init_scale=0.1, max_augmented_states=2**20, warm_start=False,
                 n_threads=None, random_state=None, progress=True, starts="all",
                 covariance_type="diag", min_covar=1e-3):
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
        self.covariance_type = covariance_type
        self.min_covar = min_covar
        self.algorithm = algorithm
        self.params = params
        self.init_params = init_params
        self.context_init_scale = context_init_scale
        self.max_augmented_states = max_augmented_states
        self.warm_start = warm_start
        self.n_threads = n_threads
        self.random_state = random_state
        self.progress = progress

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

    # ------------------------------------------------------------- checks and records
    def _covars_of(self, variances):
        """``covars_`` in hmmlearn's compact shape from the shared variances (D,)."""
        n = int(self.n_states)
        if self.covariance_type == "spherical":
            return np.full(n, float(variances[0]))
        return np.ascontiguousarray(np.tile(variances, (n, 1)))

    def _params(self):
        """The parameters, validated (hyperparameters first), as an
        :class:`~mfengine.hmm._problem.HMMParams` (defaults filled in)."""
        validate_params(self)
        return check_params(self.n_states, self.n_features, self.context,
                            getattr(self, "startprob_", None), getattr(self, "transmat_", None),
                            getattr(self, "means_", None), getattr(self, "right_means_", None),
                            getattr(self, "left_means_", None), type(self).__name__,
                            getattr(self, "covars_", None), self.covariance_type)

    def _check_fitted(self):
        """``mf.load``: the loaded parameters as every call checks them."""
        if getattr(self, "means_", None) is not None:
            self._params()

    def _check_X(self, X, lengths, n_features=None):
        """Concatenated (N, n_features) data and offsets (n_seq + 1,) of its sequences
        (``n_features`` None: the model's, else the data's)."""
        if n_features is None:
            n_features = n_features_of(self.n_features, getattr(self, "means_", None),
                                       type(self).__name__, X)
        return check_data(X, lengths, n_features)

    def _problem(self, max_iter=None, tol=None):
        """The :class:`~mfengine.hmm._problem.ChainProblem` of one call: the chain's shape and
        the solves' settings (``max_iter``, ``tol``: this call's overrides of
        ``infer_max_iter``, ``infer_tol``)."""
        max_iter = check_int(self.infer_max_iter if max_iter is None else max_iter,
                             "infer_max_iter" if max_iter is None else "max_iter", 0)
        tol = check_real(self.infer_tol if tol is None else tol,
                         "infer_tol" if tol is None else "tol")
        return ChainProblem(int(self.n_states), int(self.lag), self.context, max_iter, tol,
                            check_starts(self.starts), self.n_threads)

    def _public_solve(self, X, lengths, method, what, max_iter=None, tol=None,
                      allowed=METHODS):
        """The checked solve of a public verb: ``(Xc, offsets, method, params, problem, r)``,
        the data, the parameters and the record it ran with, and its ``ChainSolution``."""
        validate_params(self)
        given = method is not None
        method = check_method(self.method if method is None else method, "method")
        if method not in allowed:
            source = f"method={method!r}" if given else f"the constructor's method={method!r}"
            raise ValueError(
                f"ContextHMM.{what}: {source} gives ln P(X) only, not a posterior over the "
                f"states; pass method='structured' or method='naive' (e.g. "
                f"{what}(X, method='structured'))")
        params = self._params()   # the model first, so that a bad parameter is named before X
        Xc, offsets = self._check_X(X, lengths)
        params_c, centre = centred(params, self.lag, self.context, Xc.shape, offsets)
        check_near_centre(Xc, centre, params.variances)
        if method == "exact":
            check_exact_size(self.n_states, self.lag, self.context, offsets,
                             self.max_augmented_states)
        problem = self._problem(max_iter, tol)
        r = solve(problem, params_c, np.ascontiguousarray(Xc - centre), offsets, method)
        hint = _UNCONVERGED_HINT if max_iter is None and tol is None else "raise max_iter or loosen tol"
        warn_unconverged(r.converged, f"ContextHMM.{what}(method={method!r})", hint)
        return Xc, offsets, method, params, problem, r

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
        _, offsets, method, _, problem, r = self._public_solve(X, lengths, method, "infer",
                                                               max_iter, tol)
        return HMMInferenceResult(
            bound=r.bound, converged=r.converged, n_iter=r.n_sweeps, method=method,
            tol=problem.tol, posteriors=r.gamma, potentials=r.logpot, history=r.history,
            lengths=np.diff(offsets),
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
        *_, r = self._public_solve(X, lengths, method, "score")
        return float(np.sum(r.bound))

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
        *_, r = self._public_solve(X, lengths, method, "score_samples",
                                   allowed=("structured", "naive"))
        return float(np.sum(r.bound)), r.gamma

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
        *_, r = self._public_solve(X, lengths, method, "predict_proba",
                                   allowed=("structured", "naive"))
        return r.gamma

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
        _, path = self._decode(X, lengths, None, method, "predict")
        return path

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
        _, offsets, method, params, _, r = self._public_solve(
            X, lengths, method, "sample_posterior", allowed=("structured", "naive"))
        rng = check_random_state(self.random_state if random_state is None else random_state)
        return draw_paths(method, params, r, offsets, rng, k)

    def _decode(self, X, lengths, algorithm, method, what):
        algorithm = check_value(self.algorithm if algorithm is None else algorithm, "algorithm",
                                [Options(*ALGORITHMS)], "ContextHMM")
        Xc, offsets, method, params, _, r = self._public_solve(
            X, lengths, method, what, allowed=("structured", "naive"))
        if algorithm == "viterbi" and method == "structured":
            path = viterbi(params, r.logpot, offsets)
        else:
            path = np.argmax(r.gamma, axis=1).astype(np.intp)
        return log_joint(params, self.lag, self.context, Xc, offsets, path), path

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
        params = self._params()
        rng = check_random_state(self.random_state if random_state is None else random_state)
        return sample_sequence(params, self.lag, self.context, T, rng)

    # ------------------------------------------------------------------------- learning
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
        validate_params(self)
        Xc, offsets = self._check_X(X, lengths, fit_n_features(X, self.n_features))
        check_fit_data(Xc, self.n_states)
        D = Xc.shape[1]
        rng = check_random_state(self.random_state)
        params, init_right, init_left, warm = self._start(D, rng, lambda: Xc)
        problem = self._problem()
        # every computation of fit runs with data and means shifted by the data's mean
        shift = np.nanmean(Xc, axis=0)
        Xs = np.ascontiguousarray(Xc - shift)

        def fit_estep(P, first_order=False, init=None):
            return estep(problem, P, Xs, offsets, first_order, init), offsets

        return self._em(fit_estep, params, shift, float(np.nanstd(Xc)), Xc.shape[0], rng, warm,
                        init_right, init_left, "ContextHMM.fit")

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

    def _start(self, D, rng, data):
        """fit's starting parameters: the current ones (``warm_start``) or those that
        ``init_params`` asks for, set as hmmlearn does (``data()``: the training data, read
        only for k-means); returns ``(params, init_right, init_left, warm)``: the checked
        ``HMMParams``, and whether each context table is to be drawn at the start of
        mean-field EM."""
        warm = bool(self.warm_start) and getattr(self, "means_", None) is not None
        if warm:
            draw_right = draw_left = False
        else:
            # set the parameters that init_params (or their absence) asks to initialise, as
            # hmmlearn does; the context tables are zero during the Baum-Welch warm-up
            n = int(self.n_states)
            if self._needs_init("s", "startprob_"):
                self.startprob_ = np.full(n, 1.0 / n)
            if self._needs_init("t", "transmat_"):
                self.transmat_ = np.full((n, n), 1.0 / n)
            if self._needs_init("m", "means_"):
                self.means_ = initial_means(data, n, rng)
            if self._needs_init("c", "covars_"):
                v = initial_variances(data, self.covariance_type, self.min_covar)
                self.covars_ = self._covars_of(v)
            draw_right = self._right and self._needs_init("r", "right_means_")
            if not self._right or draw_right:
                self.right_means_ = np.zeros((n, D))
            draw_left = self._left and self._needs_init("l", "left_means_")
            if not self._left or draw_left:
                self.left_means_ = np.zeros((n, D))
        params = self._params()
        if params.n_features != D:
            raise ValueError(f"means_ has {params.n_features} columns but X has {D}")
        return params, draw_right, draw_left, warm

    def _em(self, estep, params, shift, std, n_rows, rng, warm, init_right, init_left, desc):
        """fit's EM: Baum-Welch on the first-order model, then mean-field EM; sets the fitted
        attributes and returns ``self``.

        The one training loop of ContextHMM, whatever holds the data
        (:func:`mfengine.hmm._learn.fit_em`): ``estep(P, first_order=False, init=None)``
        returns ``(r, offsets)``, the E-step's ``ChainSolution`` with the M-step statistics
        at the parameters ``P`` (an ``HMMParams``; data and means shifted by ``shift``):
        ``bound``, ``converged``, ``gamma`` whose rows ``offsets[:-1]`` are first steps,
        ``xi``, ``H``, ``g``, and ``logpot``, the chain's potentials, handed back as ``init``
        to warm-start the next E-step.  ``fit`` computes it on the array in memory, the
        data-parallel fit (:meth:`_dask_fit`) as sums over partitions.  ``std``: the data's
        standard deviation (the scale of the drawn context means); ``n_rows``: the number of
        time steps (``tol`` is per step)."""
        D = params.n_features
        U_start = params.means
        params = params.replace(means=np.ascontiguousarray(params.means - shift))
        far = float(np.max(np.abs(params.means), initial=0.0))
        if warm and far > MAX_MAGNITUDE:
            # (drawn or estimated means lie within the data's range, which fit has checked)
            raise ValueError(
                f"means_ (kept by warm_start) lie {far:.3g} away from the mean of X: beyond "
                f"{MAX_MAGNITUDE:g} their squared distances to the data leave the range of "
                "float64; rescale X or fit without warm_start")
        n_bw = 0 if warm else int(self.bw_max_iter)
        n_mf = int(self.max_iter)
        tables = [k for k, code, present in ((0, "m", True), (1, "r", self._right),
                                             (2, "l", self._left))
                  if code in self.params and present]
        fitted = fit_em(estep, params, n_bw=n_bw, n_mf=n_mf,
                        tol=None if self.tol is None else float(self.tol) * n_rows,
                        update=self.params, tables=tables, draw_right=init_right,
                        draw_left=init_left, scale=float(self.context_init_scale) * std,
                        rng=rng, progress=self.progress, desc=desc,
                        covariance_type=self.covariance_type, min_covar=float(self.min_covar))
        P = fitted.params
        self.startprob_, self.transmat_ = P.startprob, P.transmat
        # means never updated come back bit for bit (no round trip through the shift)
        self.means_ = U_start if P.means is params.means else P.means + shift
        self.right_means_, self.left_means_ = P.right_means, P.left_means
        if "c" in self.params or getattr(self, "covars_", None) is not None:
            self.covars_ = self._covars_of(P.variances)
        self.history_ = np.asarray(fitted.history, dtype=np.float64)
        self.n_iter_ = len(fitted.history)
        self.bw_n_iter_ = fitted.bw_n_iter
        self.converged_ = bool(fitted.converged)
        self.n_features_in_ = D
        if self.tol is not None and not fitted.converged and self.n_iter_ > 0:
            phase = "mean-field EM" if n_mf > 0 else "Baum-Welch"
            warnings.warn(
                f"ContextHMM.fit: {phase} did not meet tol={self.tol} within its "
                f"{n_mf if n_mf > 0 else n_bw} iterations; raise "
                f"{'max_iter' if n_mf > 0 else 'bw_max_iter'} or loosen tol",
                ConvergenceWarning, stacklevel=user_stacklevel())
        if fitted.last is not None:
            warn_unconverged(fitted.last.converged, "ContextHMM.fit (last E-step)",
                             _UNCONVERGED_HINT)
        return self

    # --- dask hook
    # The data-parallel fit of mfengine._dask: it hands over a Partitions object (row blocks
    # of a dask array, each holding whole sequences) and imports nothing from this module.
    def _dask_fit(self, parts, y=None):
        """``fit`` on a dask array: :meth:`_em` with an E-step whose statistics are summed
        over the partitions (:func:`mfengine.hmm._solve.partition_estep` runs where each
        block is, given the problem record and the parameters, never the estimator; the
        chain's potentials stay there as the next warm start); the M-steps run on the
        client.

        ``parts``: a ``mfengine._dask.Partitions`` whose ``lengths`` give the sequences of
        each block.  The k-means of the initial means (scikit-learn's) reads the data on the
        client: set ``means_`` and leave "m" out of ``init_params`` to keep every pass on the
        workers."""
        validate_params(self)
        N, n_cols = parts.shape
        D = int(self.n_features) if self.n_features is not None else n_cols
        if n_cols != D:
            raise ValueError(f"X has {n_cols} features, but n_features={D}")
        n = int(self.n_states)
        if N < n:
            raise ValueError(f"X has {N} rows, fewer than n_states={n}")
        rng = check_random_state(self.random_state)
        params, init_right, init_left, warm = self._start(D, rng, parts.gather)
        shift, std = parts.mean_and_std()
        shift = np.asarray(shift, dtype=np.float64)
        problem = self._problem()

        def dask_estep(P, first_order=False, init=None):
            outs, logpot = parts.step(partition_estep,
                                      (problem, P, shift, first_order, init is not None),
                                      parts.lengths, init)
            return combine_partitions([o for _, o in outs], logpot)

        return self._em(dask_estep, params, shift, float(std), N, rng, warm, init_right,
                        init_left, "ContextHMM.fit (dask)")
