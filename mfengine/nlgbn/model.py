"""Nonlinear Gaussian belief networks (Frey & Hinton): the estimator, :class:`NLGBN`.

Unit i has a Gaussian pre-activation ``x_i ~ N(b_i + sum_j w_ij f_j(x_j), psi_i^2)`` whose
parents j are the units of the layer above; its output f_i(x_i) is linear, binary (step),
rectified or sigmoidal (the cumulative Gaussian Phi).  Layers are listed top first; the last
layer is visible (linear) and the data are its pre-activations.  Inference maximises the bound
F of Frey & Hinton (eqs. 8 and 11) over a factorised Gaussian q(x_i) = N(mu_i, sigma_i^2) of
the hidden units; learning is variational EM.

Each verb checks its arguments and the model's current parameters once (``_checks``; values a
user assigned after construction included), builds the problem record (``_problem.Network``)
and hands plain arrays to the solver (``_solve``: the compiled E-step ``_estep`` over
``csrc/mf_nlgbn_estep.c``, which checks their layout again, coordinate ascent over every pattern's (mu, log sigma^2) that also
accumulates the sufficient statistics of eq. 13) or to the learning (``_learn``: the M-step of
eqs. 14 and 15 and the EM hooks of ``mfengine._em.run_em``); it then sets the attributes from
what they return, or wraps it (``_result.NLGBNInference``).
"""
import numbers

import numpy as np
from sklearn.base import BaseEstimator
from sklearn.exceptions import NotFittedError

from mfengine._base import PersistMixin, warn_unconverged
from mfengine._validation import (BOOLEAN, N_THREADS, POSITIVE_TOL, RANDOM_STATE, Interval,
                                  Options, Satisfies, check_flag, check_int, check_random_state,
                                  check_real, check_value)
from mfengine.nlgbn._checks import (UNIT_TYPES, _INTP_MAX, _TINY, _check_data, _check_fit_args,
                                    _check_given_params, _check_infer_args, _check_layer_sizes,
                                    _check_min_variance, _check_n_threads, _check_posterior,
                                    _check_units, _check_X, _param_array)
from mfengine.nlgbn._learn import (batch_estep, blend, em, floored_variances, initial_params,
                                   m_step, memory_estep, partitions_estep, warn_tol, warn_undone)
from mfengine.nlgbn._problem import Network
from mfengine.nlgbn._result import NLGBNInference
from mfengine.nlgbn._solve import (HINT, ancestral_sample, draw_posterior, importance,
                                   infer_posterior, prior_state, solve, split_layers)

__all__ = ["NLGBN", "NLGBNInference", "UNIT_TYPES"]


class NLGBN(PersistMixin, BaseEstimator):
    """A layered nonlinear Gaussian belief network (Frey & Hinton, 1999).

    Each unit has a Gaussian pre-activation whose mean is a weighted sum of the outputs of the
    layer above; its output is linear, binary (step), rectified or sigmoidal.  Inference
    maximises the variational bound F over a factorised Gaussian posterior, per pattern;
    learning is variational EM.  The scikit-learn anchors are ``FactorAnalysis`` (which one
    linear hidden unit reproduces exactly) and ``BernoulliRBM``.

    Parameters
    ----------
    sizes : sequence of int
        Units per layer, top layer first; the last entry is the number of visible units, or
        None to take it from the data at ``fit``.  At least two layers.
    units : None, str or sequence, default None
        Unit types among ``"linear"``, ``"binary"``, ``"rectified"`` and ``"sigmoidal"``.  A
        sequence of one entry per layer, each a type name (the whole layer) or a sequence of
        ``sizes[l]`` names (one per unit); a single name applies to every hidden layer.  The
        visible layer is linear (the data are its pre-activations).  None: rectified hidden
        units.
    weight_scale : float, default 1.0
        Initial weights are drawn from N(0, weight_scale**2 / fan_in); biases start at 0, model
        variances at 1 (visible ones at ``max(1, min_variance)``).  At most 1e100 (larger
        weights overflow the bound in float64).
    max_iter : int, default 100
        EM iterations of ``fit`` (the paper's 100).
    tol : float or None, default None
        ``fit`` stops when an EM iteration raises the mean bound per pattern by no more than
        ``tol`` nats; None runs ``max_iter`` iterations.
    infer_tol : float, default 1e-6
        A pattern's E-step stops when a sweep over its hidden units raises its bound by less
        than ``infer_tol`` nats (the default of ``infer``'s ``tol``).
    infer_max_iter : int, default 1000
        Most sweeps per pattern and E-step (the default of ``infer``'s ``max_iter``).  In
        ``fit`` each E-step starts from the previous one's posterior, so a partial E-step still
        raises the bound.
    min_variance : float, default 0.01
        Visible model variances are kept at or above this (Frey & Hinton, section 4).
    warm_start : bool, default False
        If True, ``fit`` continues from the current parameters instead of drawing new ones.
    n_threads : int or None, default None
        OpenMP threads (None: OMP_NUM_THREADS or every core; a negative value counts back from
        the number of cores); never more than the machine's cores.
    random_state : None, int or numpy.random.Generator, default None
        Seed of the initial parameters.
    progress : bool, default True
        Show a progress bar during ``fit`` (only when it runs longer than 2 s).

    Attributes
    ----------
    weights_ : list of ndarray
        ``weights_[l]`` has shape ``(sizes[l+1], sizes[l])``: from layer l to layer l+1.
    biases_ : list of ndarray
        ``biases_[l]`` has shape ``(sizes[l],)``.
    variances_ : list of ndarray
        The model noise variances psi^2, laid out as ``biases_``.
    units_ : tuple of tuple of str
        The type of every unit, layer by layer.
    n_features_in_ : int
        Number of visible units.
    history_ : ndarray of shape (`n_iter_` + 1,)
        Mean bound per training pattern (nats) after the first E-step and after every EM
        iteration of the last ``fit``; it never decreases.
    n_iter_ : int
        EM iterations run by the last ``fit``.

    The parameters are drawn at the first ``fit``, ``sample``, ``infer`` or ``score`` of a
    model that has none, and may be replaced by assigning these attributes (they are checked
    before every use).  ``weights``, ``biases`` and ``variances`` are read-only aliases.

    See Also
    --------
    sklearn.decomposition.FactorAnalysis : The model with one layer of linear hidden units.
    NLGBNInference : What ``infer`` returns.

    Examples
    --------
    >>> import mfengine as mf
    >>> X = mf.datasets.make_continuous_bars(200, random_state=0)
    >>> g = mf.NLGBN([1, 16, 36], units=["binary", "rectified", "linear"], max_iter=5,
    ...              random_state=0, progress=False).fit(X)
    >>> g.history_.shape
    (6,)
    >>> bool(g.history_[-1] > g.history_[0])
    True
    >>> g.score_samples(X).shape
    (200,)
    >>> g.sample(3, random_state=1).shape
    (3, 36)
    """

    _parameter_constraints = {
        "sizes": [Satisfies(lambda v: _check_layer_sizes(v, 1) is not None,
                            "a sequence of at least two layer sizes (ints >= 1; the last may "
                            "be None) whose arrays fit in memory")],
        "units": [None, Satisfies(lambda v: isinstance(v, str) or (
            hasattr(v, "__len__") and not isinstance(v, bytes)),
            "a unit type name or one entry per layer")],
        "weight_scale": [Interval(numbers.Real, 0, 1e100)],
        "max_iter": [Interval(numbers.Integral, 0, _INTP_MAX)],
        "tol": [None, Interval(numbers.Real, 0, None)],
        "infer_tol": [POSITIVE_TOL],
        "infer_max_iter": [Interval(numbers.Integral, 1, _INTP_MAX)],
        "min_variance": [Interval(numbers.Real, _TINY, None)],
        "warm_start": [BOOLEAN],
        "n_threads": [N_THREADS],
        "random_state": [RANDOM_STATE],
        "progress": [BOOLEAN],
    }
    _saved_state = {"weights_": "arrays", "biases_": "arrays", "variances_": "arrays",
                    "units_": "name table", "n_features_in_": "count", "history_": "vector",
                    "n_iter_": "count", "stats_": "array", "n_batches_": "count"}
    _saved_together = (("weights_", "biases_", "variances_", "units_"), ("stats_", "n_batches_"))

    def __init__(self, sizes, units=None, *, weight_scale=1.0, max_iter=100, tol=None,
                 infer_tol=1e-6, infer_max_iter=1000, min_variance=0.01, warm_start=False,
                 n_threads=None, random_state=None, progress=True):
        self.sizes = sizes
        self.units = units
        self.weight_scale = weight_scale
        self.max_iter = max_iter
        self.tol = tol
        self.infer_tol = infer_tol
        self.infer_max_iter = infer_max_iter
        self.min_variance = min_variance
        self.warm_start = warm_start
        self.n_threads = n_threads
        self.random_state = random_state
        self.progress = progress

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.allow_nan = True       # NaN marks a missing entry (marginalised)
        return tags

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_params(cls, weights, biases, variances, units=None):
        """Build a network from its parameters (the arrays are copied).

        Parameters
        ----------
        weights : list of ndarray
            ``weights[l]`` of shape (sizes[l+1], sizes[l]).
        biases : list of ndarray
            One (sizes[l],) array per layer.
        variances : list of ndarray
            One (sizes[l],) array of positive model variances per layer.
        units : None, str or sequence, default None
            As in the constructor.

        Returns
        -------
        NLGBN
            A model with ``sizes`` and ``units`` set from the arguments and the given
            parameters as its fitted attributes.

        Raises
        ------
        ValueError
            If the lists or the arrays' shapes do not fit one another, a value is not finite or
            a variance is not positive.
        """
        sizes, W, B, V = _check_given_params(weights, biases, variances)
        net = cls(list(sizes), units=units)
        net._set_params(W, B, V, _check_units(units, sizes))
        Network(net.weights_, net.biases_, net.variances_, net.units_).flat()
        return net

    def _set_params(self, weights, biases, variances, units):
        self.weights_ = weights
        self.biases_ = biases
        self.variances_ = variances
        self.units_ = units
        self.n_features_in_ = int(biases[-1].shape[0])

    def _has_params(self):
        return all(hasattr(self, k) for k in ("weights_", "biases_", "variances_", "units_"))

    def _check_fitted(self):
        """``mf.load``: the loaded parameters agree (and ``units`` with ``sizes`` when the
        model has none yet)."""
        if self._has_params():
            self._network().flat()
        else:
            sizes = self.sizes
            if sizes[-1] is not None:
                _check_units(self.units, _check_layer_sizes(sizes))

    def _draw_params(self, n_features=None):
        """Draw initial parameters from the constructor's settings (``n_features``: the
        training data's columns, for ``sizes[-1] = None``)."""
        sizes = _check_layer_sizes(self.sizes, n_features)
        units = _check_units(self.units, sizes)
        # (+ 0.0 turns -0.0, which the check accepts as 0, into the 0.0 NumPy's normal takes)
        scale = check_real(self.weight_scale, "weight_scale", 0.0, 1e100) + 0.0
        min_variance = _check_min_variance(self.min_variance)
        rng = check_random_state(self.random_state)
        self._set_params(*initial_params(sizes, scale, min_variance, rng), units)

    def _network(self):
        """The current parameters, validated (drawn first if the model has none)."""
        if not self._has_params():
            self._draw_params()
        return Network(self.weights_, self.biases_, self.variances_, self.units_)

    def _fitted(self, name):
        if not self._has_params():
            raise NotFittedError(
                f"this NLGBN has no parameters yet: call fit, sample, infer or score first "
                f"(or build it with NLGBN.from_params) before reading {name}"
            )
        return getattr(self, name + "_")

    @property
    def weights(self):
        """Read-only alias of ``weights_``.

        Returns
        -------
        list of ndarray
            The fitted weights.

        Raises
        ------
        sklearn.exceptions.NotFittedError
            If the model has no parameters yet.
        """
        return self._fitted("weights")

    @property
    def biases(self):
        """Read-only alias of ``biases_``.

        Returns
        -------
        list of ndarray
            The fitted biases.

        Raises
        ------
        sklearn.exceptions.NotFittedError
            If the model has no parameters yet.
        """
        return self._fitted("biases")

    @property
    def variances(self):
        """Read-only alias of ``variances_``.

        Returns
        -------
        list of ndarray
            The fitted model variances.

        Raises
        ------
        sklearn.exceptions.NotFittedError
            If the model has no parameters yet.
        """
        return self._fitted("variances")

    # ------------------------------------------------------------------ kernel plumbing
    def _flat(self):
        return self._network().flat()

    def _initial_state(self, n, net=None):
        net = self._network() if net is None else net
        return prior_state(net, n)

    def _estep(self, X, mu, lv, tol, max_sweeps, n_threads, want_stats=False):
        """Test hook: the E-step in place on (mu, lv) with the validated current parameters."""
        n_threads = _check_n_threads(n_threads)
        return solve(self._flat(), X, mu, lv, tol, max_sweeps, n_threads, want_stats)

    # ------------------------------------------------------------------ public API
    def sample(self, n_samples=1, random_state=None, return_all=False):
        """Draw patterns by ancestral sampling.

        Parameters
        ----------
        n_samples : int, default 1
            Number of patterns.
        random_state : None, int or numpy.random.Generator, default None
            Seed of the draw (None: fresh entropy).
        return_all : bool, default False
            Also return every layer's pre-activations.

        Returns
        -------
        ndarray of shape (n_samples, sizes[-1]) or list of ndarray
            Visible vectors.  With ``return_all``, a list of (n_samples, sizes[l])
            pre-activation arrays, one per layer (the last is the visible vectors).

        Raises
        ------
        ValueError
            If an argument or a parameter is invalid, or the samples overflow float64.
        """
        n_samples = check_int(n_samples, "n_samples", 0)
        return_all = check_flag(return_all, "return_all")
        net = self._network()
        rng = check_random_state(random_state)
        return ancestral_sample(net, n_samples, rng, return_all)

    def _infer(self, X, tol, max_iter, n_threads, what, missing=None):
        tol, max_iter, n_threads = _check_infer_args(tol, max_iter, n_threads, self.infer_tol,
                                                     self.infer_max_iter, self.n_threads)
        net = self._network()
        X, miss = _check_data(X, missing, net.sizes[-1])
        mu, lv, bound, sweeps, conv = infer_posterior(net, X, miss, tol, max_iter, n_threads)
        warn_unconverged(conv, what, HINT)
        res = NLGBNInference(bound=bound, converged=conv, n_iter=sweeps, method="nlgbn", tol=tol)
        return net, X, miss, mu, lv, res

    def infer(self, X, missing=None, tol=None, max_iter=None, n_threads=None):
        """Maximise the bound over the variational posterior of each pattern.

        Each pattern's E-step starts at the prior means and raises the bound by coordinate
        ascent over the hidden units' (mu, log sigma^2).

        Parameters
        ----------
        X : array-like of shape (n_patterns, sizes[-1])
            The visible units' values; NaN marks a missing entry.
        missing : array-like of bool, shape (n_patterns, sizes[-1]) or (sizes[-1],), optional
            True marks a missing entry (its value in X is not read), as NaN does.  Missing
            entries are marginalised exactly: their terms leave the bound.
        tol : float, optional
            Stop a pattern when a sweep raises its bound by less than ``tol`` nats (default:
            ``infer_tol``).
        max_iter : int, optional
            Most sweeps per pattern (default: ``infer_max_iter``).
        n_threads : int, optional
            OpenMP threads (default: ``n_threads``).

        Returns
        -------
        NLGBNInference
            The bound per pattern, convergence flags and sweep counts, and the means and
            standard deviations of q per layer.

        Raises
        ------
        ValueError
            If X or an argument is invalid, the model's parameters are invalid, or the bound is
            not a finite number.

        Warns
        -----
        mfengine._base.ConvergenceWarning
            When some patterns used ``max_iter`` sweeps without meeting ``tol``.
        """
        net, X, miss, mu, lv, res = self._infer(X, tol, max_iter, n_threads, "NLGBN.infer",
                                                missing)
        res.mu, res.sigma = split_layers(net, X, miss, mu, lv)
        return res

    def sample_posterior(self, X, n_samples=1, random_state=None, *, missing=None):
        """Draw hidden pre-activations from the variational posterior of each pattern.

        q is a product of Gaussians N(mu, sigma**2) over the hidden units' pre-activations;
        the visible layer keeps the data.

        Parameters
        ----------
        X : array-like of shape (n_patterns, sizes[-1])
            The visible units' values.
        n_samples : int, default=1
            Draws per pattern.
        random_state : None, int or numpy.random.Generator, default=None
            Seed of the draws.
        missing : array-like of bool, optional
            Missing entries (as in :meth:`infer`; NaN marks them too): drawn from their
            predictive distribution given the drawn hidden layer, N(b + W f(h), psi**2).

        Returns
        -------
        list of ndarray
            One (n_samples, n_patterns, sizes[l]) array per layer, top first: draws of the
            pre-activations (apply each unit's nonlinearity for its output); the last layer
            is the data, repeated (with draws at missing entries).
        """
        n_samples = check_int(n_samples, "n_samples", 0, 2**31 - 1)
        rng = check_random_state(random_state)
        net = self._network()
        _, miss = _check_data(X, missing, net.sizes[-1])
        r = self.infer(X, missing)
        return draw_posterior(net, r.mu, r.sigma, miss, n_samples, rng)

    def score_samples(self, X, missing=None, *, method=None, n_samples=1000, random_state=None):
        """The lower bound on ``ln p(x)`` of each pattern, or a sampled estimate, in nats.

        Parameters
        ----------
        X : array-like of shape (n_patterns, sizes[-1])
            The visible units' values; NaN marks a missing entry.
        missing : array-like of bool, optional
            Missing entries (as in :meth:`infer`), marginalised: the score is that of the
            observed part.
        method : {None, "nlgbn", "importance"}, default None
            None or "nlgbn": the bound F at the E-step's solution (``infer(X).bound``).
            "importance": ``log_likelihood(X, n_samples, random_state=...).estimate``.
        n_samples : int, default 1000
            Samples per pattern ("importance" only).
        random_state : None, int or numpy.random.Generator, default None
            Seed of the samples ("importance" only).

        Returns
        -------
        ndarray of shape (n_patterns,)
            The bound, or the estimate of ln p(x), per pattern.

        Raises
        ------
        ValueError
            As :meth:`infer`, or for an unknown ``method``.

        Warns
        -----
        mfengine._base.ConvergenceWarning
            When some patterns' E-steps did not converge.
        """
        if method == "importance":
            return self.log_likelihood(X, n_samples, "importance", random_state,
                                       missing=missing).estimate
        check_value(method, "method", [None, Options("nlgbn", "importance")], "NLGBN")
        return self._infer(X, None, None, None, "NLGBN.score_samples", missing)[-1].bound

    def score(self, X, y=None, missing=None):
        """The mean bound per pattern, in nats.

        Parameters
        ----------
        X : array-like of shape (n_patterns, sizes[-1])
            The visible units' values; at least one pattern.
        y : None
            Ignored.
        missing : array-like of bool, optional
            Missing entries, marginalised (as in :meth:`infer`).

        Returns
        -------
        float
            ``score_samples(X).mean()``.

        Raises
        ------
        ValueError
            If X holds no pattern, or as :meth:`infer`.
        """
        bound = self._infer(X, None, None, None, "NLGBN.score", missing)[-1].bound
        if bound.size == 0:
            raise ValueError("X must hold at least one pattern: score is the mean bound per pattern")
        return float(bound.mean())

    def log_likelihood(self, X, n_samples=1000, method="importance", random_state=None, *,
                       missing=None, n_threads=None):
        """An importance-sampled estimate of ``ln p(x)`` per pattern, with its standard error.

        The proposal is a defensive mixture over the hidden pre-activations: with probability
        0.1 the prior (ancestral sampling), otherwise a top-down draw in which each hidden unit
        comes from its mean-field posterior N(mu, sigma**2) of :meth:`infer` (80%), the same
        with sigma doubled (10%) or its prior given the parents drawn (10%).  Every importance
        weight is at most ten times p(x | h), so their variance is finite.  The estimate is the
        log of the mean weight (consistent, biased low by about ``stderr**2 / 2``, and lower
        still where the proposal misses posterior modes); the standard error is the delta
        method's, sd(w) / (sqrt(K) mean(w)).  Missing entries are marginalised exactly.
        Compiled and parallel over patterns; pattern p draws from a stream seeded by the seed
        and p alone, so the answer does not depend on ``n_threads``.

        Parameters
        ----------
        X : array-like of shape (n_patterns, sizes[-1])
            The visible units' values; NaN marks a missing entry.
        n_samples : int, default 1000
            Samples per pattern, at least 2.
        method : {"importance"}, default "importance"
            The estimator.
        random_state : None, int or numpy.random.Generator, default None
            Seed of the samples.
        missing : array-like of bool, optional
            Missing entries (as in :meth:`infer`).
        n_threads : int, optional
            OpenMP threads over patterns (default: ``n_threads``); the answer does not depend
            on it.

        Returns
        -------
        mfengine.LogLikelihoodEstimate
            ``estimate``, ``stderr``, ``ess`` and the mean-field ``bound`` per pattern.

        Raises
        ------
        ValueError
            For an unknown ``method``, ``n_samples`` below 2, invalid data or parameters, or
            weights that are not finite numbers.

        Examples
        --------
        >>> import numpy as np
        >>> import mfengine as mf
        >>> g = mf.NLGBN([1, 4], units="linear", random_state=0)
        >>> X = g.sample(3, random_state=1)
        >>> est = g.log_likelihood(X, n_samples=500, random_state=0)
        >>> bool(np.all(np.abs(est.estimate - est.bound) < 4 * est.stderr))  # exact q here
        True
        """
        check_value(method, "method", [Options("importance")], "NLGBN.log_likelihood")
        return self._importance(X, n_samples, random_state, missing, n_threads,
                                "NLGBN.log_likelihood")[0]

    def _importance(self, X, n_samples, random_state, missing, n_threads, what,
                    marginals=False):
        """The compiled sampler's answer: ``(LogLikelihoodEstimate, mean, mean_se, sd)``,
        the last three None unless ``marginals``."""
        from mfengine._base import LogLikelihoodEstimate

        n_samples = check_int(n_samples, "n_samples", 2, 2**31 - 1)
        rng = check_random_state(random_state)
        seed = int(rng.integers(0, 2**63, dtype=np.int64))
        net, X, miss, mu, lv, res = self._infer(X, None, None, n_threads, what, missing)
        n_threads = _check_n_threads(self.n_threads if n_threads is None else n_threads)
        out = importance(net, X, miss, mu, lv, n_samples, seed, n_threads, marginals)
        est = LogLikelihoodEstimate(out[0], out[1], res.bound, n_samples, out[2], "importance")
        return (est,) + (tuple(out[3:]) if marginals else (None, None, None))

    def posterior_marginals(self, X, missing=None, *, n_samples=1000, random_state=None,
                            n_threads=None):
        """Importance-sampled posterior means and standard deviations of every unit.

        Self-normalised importance sampling with the proposal of :meth:`log_likelihood` (the
        mean-field posterior of :meth:`infer`, mixed with wider and prior draws): each hidden
        unit's posterior mean of its pre-activation is sum_s w_s h_s / sum_s w_s over the
        samples' weights w_s, consistent as ``n_samples`` grows, with the delta-method
        standard error sqrt(sum_s w_s^2 (h_s - mean)^2) / sum_s w_s (and the estimate's
        rounding bound, (n_samples + 16) ulps of it, added in quadrature: see
        :class:`mfengine.PosteriorMarginalsEstimate`), and its posterior standard deviation
        likewise.  A missing visible entry is Rao-Blackwellised: each
        sample contributes its mean given the hidden draw, b + W f(h), and its standard
        deviation adds the entry's noise psi.  Unlike :meth:`infer`'s Gaussian q, these
        converge to the exact posterior's moments (nonlinear units' posteriors need not be
        Gaussian).  Where the proposal is far from the posterior the weights degenerate:
        ``ess`` then falls towards 1 and the standard errors may understate the error (a
        warning says so below an ess of 10).  Compiled and parallel over patterns; pattern
        p draws from a stream seeded by the seed and p alone, so the answer does not depend
        on ``n_threads``.

        Parameters
        ----------
        X : array-like of shape (n_patterns, sizes[-1])
            The visible units' values; NaN marks a missing entry.
        missing : array-like of bool, optional
            Missing entries (as in :meth:`infer`); their marginals are estimated too.
        n_samples : int, default 1000
            Samples per pattern, at least 2.
        random_state : None, int or numpy.random.Generator, default None
            Seed of the samples.
        n_threads : int, optional
            OpenMP threads over patterns (default: ``n_threads``).

        Returns
        -------
        mfengine.PosteriorMarginalsEstimate
            ``mean``, ``stderr`` and ``sd`` of shape (n_patterns, sum(sizes)), every unit in
            unit order, top layer first (an observed entry reads its value, with ``stderr``
            and ``sd`` 0); ``ess`` per pattern; ``n_samples``; and ``log_likelihood``, the
            :meth:`log_likelihood` estimate from the same samples (bit for bit).

        Raises
        ------
        ValueError
            For ``n_samples`` below 2, invalid data or parameters, or weights that are not
            finite numbers.

        Warns
        -----
        RuntimeWarning
            When some pattern's effective sample size is below 10.

        Examples
        --------
        >>> import numpy as np
        >>> import mfengine as mf
        >>> g = mf.NLGBN([1, 4], units="rectified", random_state=0)
        >>> X = g.sample(3, random_state=1)
        >>> est = g.posterior_marginals(X, n_samples=2000, random_state=0)
        >>> est.mean.shape, bool(np.all(est.stderr[:, :1] > 0)), bool(np.all(est.sd[:, 1:] == 0))
        ((3, 5), True, True)
        """
        from mfengine._base import PosteriorMarginalsEstimate, warn_low_marginals_ess

        est, mean, se, sd = self._importance(X, n_samples, random_state, missing, n_threads,
                                             "NLGBN.posterior_marginals", marginals=True)
        warn_low_marginals_ess(est.ess, est.n_samples)
        return PosteriorMarginalsEstimate(mean=mean, stderr=se, ess=est.ess,
                                          n_samples=est.n_samples, log_likelihood=est, sd=sd)

    def impute(self, X, missing=None):
        """Fill in missing entries with their posterior predictive means.

        The predictive mean of a missing visible entry is ``E_q[b + W f(h)]`` under the
        variational posterior of its pattern given the observed entries (for linear hidden
        units, the exact conditional mean E[x_missing | x_observed]).

        Parameters
        ----------
        X : array-like of shape (n_patterns, sizes[-1])
            The visible units' values; NaN marks a missing entry.
        missing : array-like of bool, optional
            True marks a missing entry (its value in X is ignored); None: the NaN entries.

        Returns
        -------
        ndarray of shape (n_patterns, sizes[-1])
            X as float64 with its missing entries replaced.

        Raises
        ------
        ValueError
            As :meth:`infer`.

        Examples
        --------
        >>> import numpy as np
        >>> import mfengine as mf
        >>> g = mf.NLGBN([2, 6], units="rectified", random_state=0)
        >>> X = g.sample(4, random_state=1)
        >>> X[:, :3] = np.nan
        >>> bool(np.all(np.isfinite(g.impute(X))))
        True
        """
        r = self.infer(X, missing)
        return np.array(r.mu[-1], dtype=np.float64, order="C")

    def bound_at(self, X, mu, sigma, n_threads=None):
        """The bound F (eq. 11) of each pattern at a given variational posterior.

        Parameters
        ----------
        X : array-like of shape (n_patterns, sizes[-1])
            The visible units' values.
        mu : array-like of shape (n_patterns, n_hidden)
            Means of q over the hidden units, layers concatenated top first.
        sigma : array-like of shape (n_patterns, n_hidden)
            Standard deviations of q, positive, laid out as ``mu``.
        n_threads : int, optional
            OpenMP threads (default: ``n_threads``).

        Returns
        -------
        ndarray of shape (n_patterns,)
            F at (mu, sigma).

        Raises
        ------
        ValueError
            If an argument is invalid or the bound is not a finite number.
        """
        n_threads = _check_n_threads(self.n_threads if n_threads is None else n_threads)
        net = self._network()
        X, mu, lv = _check_posterior(X, mu, sigma, net.sizes[-1], sum(net.sizes[:-1]))
        return solve(net.flat(), X, mu, lv, 1.0, 0, n_threads, inputs="X, mu, sigma")[0]

    def _check_fit_params(self):
        return _check_fit_args(self.max_iter, self.tol, self.infer_tol, self.infer_max_iter,
                               self.min_variance, self.warm_start, self.n_threads,
                               self.progress)

    def fit(self, X, y=None, missing=None):
        """Variational EM (Frey & Hinton, section 2.3).

        Each iteration is an M-step followed by an E-step warm-started from the previous
        E-step's posterior for the same pattern (the first E-step starts at the prior means).
        Training stops after ``max_iter`` iterations, when an iteration gains no more than
        ``tol`` nats per pattern, or when float64 can no longer raise the bound (an iteration
        that would lower it is undone), so that ``history_`` never decreases.

        Parameters
        ----------
        X : array-like of shape (n_patterns, sizes[-1])
            Training patterns; at least one.  NaN marks a missing entry.
        y : None
            Ignored.
        missing : array-like of bool, optional
            Missing entries (as in :meth:`infer`): marginalised in the E-step, and in the
            M-step replaced by their expectations under the posterior.

        Returns
        -------
        NLGBN
            The fitted model (``self``).

        Raises
        ------
        ValueError
            If X or a hyperparameter is invalid, or the first E-step's bound is not finite.

        Warns
        -----
        mfengine._base.ConvergenceWarning
            When ``tol`` is given and not met within ``max_iter`` iterations, when an
            iteration was undone because the bound fell, or when the last E-step left patterns
            unconverged.
        """
        self._fit(X, missing)
        return self

    def _fit(self, X, missing=None):
        """fit's work; returns the training posterior (mu, log sigma^2) for the tests."""
        p = self._check_fit_params()
        X, miss = _check_data(X, missing, None)
        net, drawn = self._start_fit(p, X.shape[1])
        X = _check_X(X, net.sizes[-1])
        if X.shape[0] == 0:
            raise ValueError("X must hold at least one pattern to fit")
        return self._em(memory_estep(X, miss, p), p, net, X.shape, drawn, "NLGBN EM")

    def _start_fit(self, p, n_cols):
        """The network fit starts from, and whether this fit drew it (unless ``warm_start``
        keeps the current parameters); ``n_cols``: the data's columns."""
        drawn = not (p["warm_start"] and self._has_params())
        if drawn:
            self._draw_params(n_features=n_cols)
        return self._network(), drawn

    def _variance_floors(self, p, net):
        """The network with every variance raised to its floor (the M-step's constraint set,
        so that no step can lower the bound)."""
        variances = floored_variances(net, p["min_variance"])
        if variances is not None:
            self.variances_ = variances
            net = self._network()
        return net

    def _em(self, estep, p, net, shape, drawn, desc):
        """fit's variational EM (:func:`mfengine.nlgbn._learn.em`, the one training loop of
        NLGBN whatever holds the data) from the current parameters (variances raised to their
        floors first), which it then replaces with the learned ones; returns the last kept
        E-step's state.  ``estep``: the E-step on the array in memory (``fit``) or on a dask
        array's partitions (:meth:`_dask_fit`); ``shape``: the data's; ``drawn``: the
        parameters were drawn by this fit (an overflow in the first E-step then names
        ``weight_scale``)."""
        net = self._variance_floors(p, net)
        self.n_features_in_ = shape[1]
        n = shape[0]
        params, history, stats, conv, state, undone, met_tol = em(
            estep, net, (self.weights_, self.biases_, self.variances_), n, p["max_iter"],
            p["tol"], p["min_variance"], p["progress"], desc, drawn, self.weight_scale)
        self.weights_, self.biases_, self.variances_ = params
        warn_undone(undone, history)
        self.history_ = np.array(history)
        self.n_iter_ = len(history) - 1
        self.stats_ = stats          # where partial_fit continues from
        self.n_batches_ = 1
        warn_tol(p["tol"], p["max_iter"], met_tol, conv)
        return state

    def partial_fit(self, X, y=None, missing=None):
        """One step of online (stepwise) EM on a mini-batch (for data in chunks).

        The first call draws the parameters (unless the model has some, e.g. from ``fit``)
        and does one EM iteration on the batch: an E-step from the prior means, then the
        M-step on the batch's sufficient statistics (the update of ``fit(max_iter=1,
        warm_start=True)`` on the same data).  Later calls blend the batch's statistics into
        the running ones, ``stats_ <- (1 - eta) stats_ + eta s_batch`` with
        ``eta = (n_batches_ + 1) ** -0.6`` (Cappé & Moulines' online EM step sizes), and do
        the M-step on the blend.

        Parameters
        ----------
        X : array-like of shape (n_patterns, sizes[-1])
            A mini-batch; at least one pattern.  NaN marks a missing entry.
        y : None
            Ignored.
        missing : array-like of bool, optional
            Missing entries (as in :meth:`fit`).

        Returns
        -------
        NLGBN
            ``self``; ``history_`` gains the batch's mean bound before the update,
            ``n_batches_`` counts the calls, ``stats_`` holds the running statistics.

        Raises
        ------
        ValueError
            If X or a hyperparameter is invalid, or a number is not finite.
        """
        p = self._check_fit_params()
        X, miss = _check_data(X, missing, None)
        if not self._has_params():
            self._draw_params(n_features=X.shape[1])
            for name in ("stats_", "n_batches_", "history_"):
                self.__dict__.pop(name, None)
        net = self._network()
        X = _check_X(X, net.sizes[-1])
        if X.shape[0] == 0:
            raise ValueError("X must hold at least one pattern for partial_fit")
        net = self._variance_floors(p, net)
        self.n_features_in_ = X.shape[1]
        bound, conv, batch = batch_estep(net, X, miss, p)
        t = getattr(self, "n_batches_", 0)
        old = getattr(self, "stats_", None)
        if t:
            t = check_int(t, "n_batches_", 0)
            old = _param_array(old, "stats_", batch.shape)
            batch = blend(old, batch, t)
        self.weights_, self.biases_, self.variances_ = m_step(net, batch, p["min_variance"])
        self.stats_ = batch
        self.n_batches_ = t + 1
        hist = getattr(self, "history_", None)
        hist = np.asarray(hist, dtype=np.float64).ravel() if hist is not None else np.empty(0)
        self.history_ = np.append(hist, float(bound.mean()))
        self.n_iter_ = self.n_batches_
        warn_unconverged(conv, "NLGBN.partial_fit", HINT)
        return self

    def _m_step(self, st, min_variance, net=None):
        """The M-step (:func:`mfengine.nlgbn._learn.m_step`) on the statistics ``st``
        averaged over patterns: assigns the new parameters (if they are all finite, else
        ValueError)."""
        net = self._network() if net is None else net
        self.weights_, self.biases_, self.variances_ = m_step(net, st, min_variance)

    # --- dask hooks
    # The data-parallel fit of mfengine._dask: it hands over a Partitions object (the row
    # blocks of a dask array) and imports nothing from this module.
    def _dask_fit(self, parts, y=None):
        """``fit`` on a dask array: :meth:`_em` with an E-step run where each block is
        (:func:`mfengine.nlgbn._solve.partition_estep`, warm-started from the block's previous
        posteriors, which stay there) returning the block's summed statistics and bound; the
        M-step runs on the client from their sums.  ``parts``: a ``mfengine._dask.Partitions``."""
        p = self._check_fit_params()
        n, n_cols = parts.shape
        net, drawn = self._start_fit(p, n_cols)
        if n_cols != net.sizes[-1]:
            raise ValueError(f"X must have {net.sizes[-1]} columns (one per visible unit: the "
                             f"last of sizes, or the rows of weights_[-1]), got {n_cols}")
        if n == 0:
            raise ValueError("X must hold at least one pattern to fit")
        self._em(partitions_estep(parts, p), p, net, parts.shape, drawn, "NLGBN EM (dask)")
        return self
