"""Baseline generative classifier: mixtures of independent Bernoulli pixels (Saul & Jordan, sec. 3).

Within each mixture component the pixels are independent binary variables; the model is fit by
EM.  ``MixtureClassifier`` fits one mixture per class and labels a pattern by the largest
log-likelihood plus log prior.  Missing pixels are marginalised exactly: they simply drop out of
the per-component product.  Pure NumPy, vectorised over patterns and components, computed in
log space.

Both estimators are scikit-learn estimators (``BaseEstimator`` with ``DensityMixin`` or
``ClassifierMixin``) and save with ``model.save(path)`` / ``mfengine.load(path)``.  Each verb
checks once (:mod:`mfengine.mixture._checks`) and calls :mod:`mfengine.mixture._learn` (EM)
or :mod:`mfengine.mixture._solve` (log-likelihoods, draws) on a
:class:`~mfengine.mixture._problem.MixtureParams`.
"""
import numbers

import numpy as np
from sklearn.base import BaseEstimator, DensityMixin
from sklearn.utils.validation import check_is_fitted

from mfengine._base import PersistMixin, warn_unconverged
from mfengine._validation import RANDOM_STATE, Interval, check_int, check_random_state, check_real
from mfengine.mixture._checks import (MAX_ITER_LIMIT, MAX_SIZE, binary_input_tags,
                                      check_binary_values, check_class_log_prior,
                                      check_mixture_params, check_targets, validate_array,
                                      validate_binary)
from mfengine.mixture._classifier import _GenerativeClassifierMixin
from mfengine.mixture._learn import fit_em
from mfengine.mixture._solve import draw, log_prob

__all__ = ["BernoulliMixture", "MixtureClassifier"]


class BernoulliMixture(PersistMixin, DensityMixin, BaseEstimator):
    """A mixture of products of Bernoulli distributions, fit by EM.

    ``P(x) = sum_k pi_k prod_d p_kd^x_d (1 - p_kd)^(1 - x_d)``.

    Parameters
    ----------
    n_components : int, default=10
        Number of mixture components K.
    max_iter : int, default=100
        Most EM iterations (the paper used 10).
    alpha : float, default=1.0
        Additive smoothing: a symmetric Beta(1 + alpha, 1 + alpha) prior on every pixel
        probability and a Dirichlet(1 + alpha) prior on the mixing weights, so the M-step is
        ``p_kd = (sum_n r_nk x_nd + alpha) / (N_k + 2 alpha)`` and
        ``pi_k = (N_k + alpha) / (N + K alpha)``.  With ``alpha=0`` this is maximum-likelihood
        EM.  EM never decreases the penalised objective (log-likelihood plus log prior); with
        ``alpha=0`` that is the log-likelihood itself.
    tol : float or None, default=1e-4
        Stop when the mean objective per pattern improves by less than ``tol`` nats; a
        ``ConvergenceWarning`` when that does not happen within ``max_iter`` iterations.
        ``None`` runs exactly ``max_iter`` iterations.
    random_state : None, int or numpy.random.Generator, default=None
        Seed for the initialisation: the component means start halfway between K distinct
        random training patterns and the overall pixel means.

    Attributes
    ----------
    weights_ : ndarray of shape (n_components,)
        Mixing proportions pi_k.
    means_ : ndarray of shape (n_components, n_features)
        Pixel probabilities p_kd, kept in [1e-10, 1 - 1e-10].
    history_ : ndarray
        The penalised objective (mean log-likelihood plus log prior per pattern, in nats) at
        the start of each EM iteration and after the last one; never decreasing.
    log_likelihood_history_ : ndarray
        The same for the mean log-likelihood alone.
    n_iter_ : int
        EM iterations run.
    converged_ : bool
        Whether ``tol`` was given and met.
    n_features_in_ : int
        Number of pixels seen in ``fit``.

    See Also
    --------
    MixtureClassifier : One mixture per class.

    Examples
    --------
    >>> import numpy as np
    >>> from mfengine import BernoulliMixture
    >>> X = np.array([[1, 1, 0], [1, 1, 0], [0, 0, 1], [0, 1, 1]])
    >>> m = BernoulliMixture(n_components=2, random_state=0).fit(X)
    >>> m.score_samples(X).shape
    (4,)
    >>> bool(m.score(X) < 0)
    True
    """

    _parameter_constraints = {
        "n_components": [Interval(numbers.Integral, 1, MAX_SIZE)],
        "max_iter": [Interval(numbers.Integral, 0, MAX_ITER_LIMIT)],
        "alpha": [Interval(numbers.Real, 0, None)],
        "tol": [None, Interval(numbers.Real, 0, None)],
        "random_state": [RANDOM_STATE],
    }
    _saved_state = {"means_": "array", "weights_": "array", "n_features_in_": "count",
                    "n_iter_": "count", "converged_": "flag", "log_likelihood_history_": "vector",
                    "history_": "vector"}
    _saved_together = (("means_", "weights_", "n_features_in_"),)

    def __init__(self, n_components=10, max_iter=100, alpha=1.0, tol=1e-4, random_state=None):
        self.n_components = n_components
        self.max_iter = max_iter
        self.alpha = alpha
        self.tol = tol
        self.random_state = random_state

    def __sklearn_tags__(self):
        return binary_input_tags(super().__sklearn_tags__())

    def _check_fitted(self):
        """``mf.load``: the loaded means and weights as every call checks them."""
        if "means_" in vars(self):
            self._mixture()

    def _check_hyper(self):
        """``(n_components, max_iter, alpha, tol)``, checked."""
        return (check_int(self.n_components, "n_components", 1, MAX_SIZE),
                check_int(self.max_iter, "max_iter", 0, MAX_ITER_LIMIT),
                check_real(self.alpha, "alpha", 0.0),
                check_real(self.tol, "tol", 0.0, allow_none=True))

    def fit(self, X, y=None):
        """Fit the mixture to binary data by EM.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Binary (0/1) patterns.
        y : None
            Ignored; present for scikit-learn's API.

        Returns
        -------
        BernoulliMixture
            The fitted mixture.

        Raises
        ------
        ValueError
            If X is not a non-empty 2-D array of 0/1 or a hyperparameter is out of range.
        TypeError
            If X is sparse or not numeric.
        """
        K, max_iter, alpha, tol = self._check_hyper()
        X, _ = validate_binary(self, X, reset=True)
        res = fit_em(X, K, max_iter, alpha, tol, check_random_state(self.random_state))
        self.means_ = res.params.means
        self.weights_ = res.params.weights
        self.n_iter_ = res.n_iter
        self.converged_ = res.converged
        self.log_likelihood_history_ = res.log_likelihood_history
        self.history_ = res.history
        if tol is not None and not self.converged_:
            warn_unconverged([False], "BernoulliMixture.fit",
                             f"EM did not improve by less than tol={tol:g} within "
                             f"max_iter={max_iter} iterations; raise max_iter or tol "
                             f"(tol=None runs a fixed budget)")
        return self

    def score_samples(self, X, missing=None):
        """Exact log-likelihood of each pattern, in nats.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Binary patterns; entries under ``missing`` may hold NaN or any finite value.
        missing : array-like of bool, shape (n_samples, n_features) or (n_features,), optional
            Pixels to sum out (a 1-D mask applies to every pattern): the result is then
            ln P(observed pixels).

        Returns
        -------
        ndarray of shape (n_samples,)
            The log-likelihood ln P(x) of each pattern, in nats.

        Raises
        ------
        sklearn.exceptions.NotFittedError
            If the mixture is not fitted.
        ValueError
            If X or ``missing`` is malformed, or ``means_``/``weights_`` were set to invalid
            values.
        """
        check_is_fitted(self)
        X, obs = validate_binary(self, X, reset=False, missing=missing)
        return log_prob(X, obs, self._mixture())

    def score(self, X, y=None, missing=None):
        """Mean log-likelihood per pattern, in nats.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Binary patterns (at least one).
        y : None
            Ignored; present for scikit-learn's API.
        missing : array-like of bool, optional
            As in ``score_samples``.

        Returns
        -------
        float
            The mean of ``score_samples(X, missing)``.
        """
        return float(np.mean(self.score_samples(X, missing=missing)))

    def sample(self, n_samples=1, random_state=None):
        """Draw binary patterns from the mixture.

        Parameters
        ----------
        n_samples : int, default=1
            Number of patterns.
        random_state : None, int or numpy.random.Generator, default=None
            Seed of the draw.

        Returns
        -------
        ndarray of shape (n_samples, n_features)
            The patterns, as float64 0/1.
        """
        check_is_fitted(self)
        n = check_int(n_samples, "n_samples", 0, MAX_SIZE)
        params = self._mixture()
        return draw(params, n, check_random_state(random_state))

    def _mixture(self):
        """The fitted (or assigned) ``means_`` and ``weights_``, checked, as a
        ``MixtureParams``."""
        return check_mixture_params(self.means_, self.weights_, self.n_features_in_)


class MixtureClassifier(PersistMixin, _GenerativeClassifierMixin, BaseEstimator):
    """One Bernoulli mixture per class; label = argmax of log-likelihood + log prior.

    Parameters
    ----------
    n_components : int, default=10
        Components per class (the paper used 40 with 6000 images per class).
    max_iter : int, default=100
        Most EM iterations per class.
    alpha : float, default=1.0
        Smoothing of each class's mixture (see ``BernoulliMixture``).
    tol : float or None, default=1e-4
        EM stopping rule of each class's mixture (see ``BernoulliMixture``); one
        ``ConvergenceWarning`` names the classes that did not meet it.
    random_state : None, int or numpy.random.Generator, default=None
        Seeds each class's mixture (independent streams derived from it).

    Attributes
    ----------
    classes_ : ndarray of shape (n_classes,)
        Sorted class labels.
    means_ : ndarray of shape (n_classes, n_components, n_features)
        Pixel probabilities of every component of every class's mixture.
    weights_ : ndarray of shape (n_classes, n_components)
        Mixing proportions of every class's mixture.
    class_log_prior_ : ndarray of shape (n_classes,)
        Log of the class frequencies in the training data.
    n_iter_ : ndarray of shape (n_classes,)
        EM iterations run per class.
    converged_ : ndarray of bool, shape (n_classes,)
        Whether each class's EM met ``tol``.
    history_ : list of ndarray
        Each class's penalised objective per EM iteration (see ``BernoulliMixture``).
    mixtures_ : list of BernoulliMixture
        One fitted mixture per class, in the order of ``classes_``, built on each access
        from (and sharing memory with) ``means_`` and ``weights_``.
    n_features_in_ : int
        Number of pixels seen in ``fit``.

    See Also
    --------
    BernoulliMixture : The per-class density model.
    mfengine.classify.GenerativeClassifier : The same scheme with a sigmoid belief net per class.

    Examples
    --------
    >>> import numpy as np
    >>> from mfengine import MixtureClassifier
    >>> X = np.array([[1, 1, 0], [1, 1, 0], [0, 0, 1], [0, 1, 1]])
    >>> clf = MixtureClassifier(n_components=1, random_state=0).fit(X, [0, 0, 1, 1])
    >>> clf.predict(X).tolist()
    [0, 0, 1, 1]
    """

    _parameter_constraints = {
        "n_components": [Interval(numbers.Integral, 1, MAX_SIZE)],
        "max_iter": [Interval(numbers.Integral, 0, MAX_ITER_LIMIT)],
        "alpha": [Interval(numbers.Real, 0, None)],
        "tol": [None, Interval(numbers.Real, 0, None)],
        "random_state": [RANDOM_STATE],
    }
    _saved_state = {"classes_": "labels", "means_": "array", "weights_": "array",
                    "n_features_in_": "count", "n_iter_": "counts", "converged_": "flags",
                    "history_": "vectors", "class_log_prior_": "vector"}
    _saved_together = (("classes_", "means_", "weights_", "n_features_in_", "class_log_prior_"),)

    def __init__(self, n_components=10, max_iter=100, alpha=1.0, tol=1e-4, random_state=None):
        self.n_components = n_components
        self.max_iter = max_iter
        self.alpha = alpha
        self.tol = tol
        self.random_state = random_state

    def __sklearn_tags__(self):
        return binary_input_tags(super().__sklearn_tags__())

    def _check_fitted(self):
        """``mf.load``: one mixture per class, each as every call checks it, and the priors."""
        if "classes_" in vars(self):
            self._class_mixtures()
            check_class_log_prior(self)

    def fit(self, X, y):
        """Fit one Bernoulli mixture per class.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Binary (0/1) patterns.
        y : array-like of shape (n_samples,)
            Class labels (at least two classes; continuous targets are refused).

        Returns
        -------
        MixtureClassifier
            The fitted classifier.

        Raises
        ------
        ValueError
            If X is not binary, y is not a vector of class labels with at least two classes,
            or a hyperparameter is out of range.
        """
        params = dict(n_components=self.n_components, max_iter=self.max_iter, alpha=self.alpha,
                      tol=self.tol)
        K, max_iter, alpha, tol = BernoulliMixture(**params)._check_hyper()
        X, y = validate_array(self, X, y=y, reset=True)
        classes, y_idx, counts = check_targets(y)
        X, _ = check_binary_values(X)
        rng = check_random_state(self.random_state)
        seeds = rng.integers(0, 2**63 - 1, size=classes.shape[0])
        fits = [fit_em(X[y_idx == c], K, max_iter, alpha, tol,
                       np.random.default_rng(int(seeds[c])))
                for c in range(classes.shape[0])]
        self.classes_ = classes
        self.means_ = np.stack([f.params.means for f in fits])
        self.weights_ = np.stack([f.params.weights for f in fits])
        self.n_iter_ = np.array([f.n_iter for f in fits])
        self.converged_ = np.array([f.converged for f in fits])
        self.history_ = [f.history for f in fits]
        self.class_log_prior_ = np.log(counts / counts.sum())
        if tol is not None:
            bad = classes[~self.converged_].tolist()
            warn_unconverged(self.converged_, "MixtureClassifier.fit",
                             f"EM of classes {bad[:10]} did not meet tol={tol:g} within "
                             f"max_iter={max_iter} iterations; raise max_iter or tol "
                             f"(tol=None runs a fixed budget)")
        return self

    @property
    def mixtures_(self):
        """One fitted ``BernoulliMixture`` per class, in the order of ``classes_``.

        Built on each access; the mixtures share memory with ``means_`` and ``weights_``.

        Returns
        -------
        list of BernoulliMixture
            The class mixtures.
        """
        check_is_fitted(self)
        out = []
        for c in range(len(self.classes_)):
            m = BernoulliMixture(n_components=self.n_components, max_iter=self.max_iter,
                                 alpha=self.alpha, tol=self.tol)
            m.means_, m.weights_ = self.means_[c], self.weights_[c]
            m.n_iter_, m.converged_ = int(self.n_iter_[c]), bool(self.converged_[c])
            m.history_ = self.history_[c]
            m.n_features_in_ = self.n_features_in_
            out.append(m)
        return out

    def class_log_likelihoods(self, X, missing=None):
        """Each class's exact log-likelihood of each pattern.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Binary patterns; entries under ``missing`` may hold NaN or any finite value.
        missing : array-like of bool, shape (n_samples, n_features) or (n_features,), optional
            Pixels to sum out.

        Returns
        -------
        ndarray of shape (n_samples, n_classes)
            The log-likelihood ln P(x | class) under each class's mixture, in nats.
        """
        check_is_fitted(self)
        X, obs = validate_binary(self, X, reset=False, missing=missing)
        mixtures = self._class_mixtures()
        out = np.empty((X.shape[0], len(mixtures)))
        for c, params in enumerate(mixtures):
            out[:, c] = log_prob(X, obs, params)
        return out

    def _class_mixtures(self):
        """The ``MixtureParams`` of every class, checked."""
        means = np.asarray(self.means_, dtype=np.float64)
        weights = np.asarray(self.weights_, dtype=np.float64)
        n_classes = self.classes_.shape[0]
        if means.ndim != 3 or means.shape[0] != n_classes:
            raise ValueError(
                f"means_ must have shape (n_classes={n_classes}, n_components, n_features), "
                f"got {means.shape}"
            )
        if weights.ndim != 2 or weights.shape[0] != n_classes:
            raise ValueError(
                f"weights_ must have shape (n_classes={n_classes}, n_components), got "
                f"{weights.shape}"
            )
        return [check_mixture_params(means[c], weights[c], self.n_features_in_,
                                     prefix=f"class {self.classes_[c]!r}: ")
                for c in range(n_classes)]

    def _joint(self, X, missing):
        ll = self.class_log_likelihoods(X, missing=missing)
        return ll + check_class_log_prior(self)
