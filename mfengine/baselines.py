"""Baseline generative classifier: mixtures of independent Bernoulli pixels (Saul & Jordan, sec. 3).

Within each mixture component the pixels are independent binary variables; the model is fit by
EM.  ``MixtureClassifier`` fits one mixture per class and labels a pattern by the largest
log-likelihood plus log prior.  Missing pixels are marginalised exactly: they simply drop out of
the per-component product.  Pure NumPy, vectorised over patterns and components, computed in
log space.

Both estimators are scikit-learn estimators (``BaseEstimator`` with ``DensityMixin`` or
``ClassifierMixin``) and save with ``model.save(path)`` / ``mfengine.load(path)``.
"""
import numbers

import numpy as np
from scipy.special import logsumexp
from sklearn.base import BaseEstimator, ClassifierMixin, DensityMixin
from sklearn.utils import check_array
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted, validate_data

from mfengine._base import PersistMixin, warn_unconverged
from mfengine._em import EMMonitor, run_em
from mfengine._validation import (RANDOM_STATE, Interval, check_binary, check_int,
                                  check_missing, check_random_state, check_real)

__all__ = ["BernoulliMixture", "MixtureClassifier"]

# Component probabilities are kept in [_EPS, 1 - _EPS] so that no log is -inf, even with alpha=0.
_EPS = 1e-10


# --------------------------------------------------------------------------- shared checks
# (used by mfengine.classify too; generic enough for mfengine._validation, see the report)
#: Largest iteration budget (EM iterations, epochs) accepted: larger budgets would run for days
#: or allocate schedules that do not fit in memory.
_MAX_ITER_LIMIT = 10**6
#: Largest size (components, batch, sweeps) accepted: what a C int holds.
_MAX_SIZE = 2**31 - 1


def _binary_input_tags(tags):
    """Input tags of an estimator of binary (0/1) data.

    scikit-learn's tags have no flag for binary-only input; the closest true statement is
    ``positive_only`` (X must be non-negative).  NaN is accepted only under a ``missing`` mask,
    so ``allow_nan`` stays False; sparse input is refused with a TypeError naming X.
    """
    tags.input_tags.positive_only = True
    tags.input_tags.allow_nan = False
    tags.input_tags.sparse = False
    return tags


def _validate_array(estimator, X, *, reset, y="no_validation"):
    """scikit-learn's ``validate_data`` with the settings of every binary-data estimator.

    X becomes a C-contiguous float64 2-D array with at least one row and one column; a sparse
    X is a TypeError; ``n_features_in_`` is set (``reset=True``) or checked.  NaN is let
    through, for ``_check_binary_values`` to judge against the missing mask.  With ``y``
    (also None) returns ``(X, y)``; a classifier's y=None is refused there.
    """
    kw = dict(dtype=np.float64, order="C", accept_sparse=False, ensure_all_finite=False)
    # scikit-learn's own message for complex input prints the whole array and names no argument
    if getattr(getattr(X, "dtype", None), "kind", None) == "c":
        raise ValueError("Complex data not supported in X: X must be binary (0/1)")
    # scikit-learn's messages ("Expected 2D array, got 1D array instead", "Unknown label type")
    # do not say which argument is at fault: say it
    def named(exc, name):
        msg = str(exc)
        return msg if msg.startswith(name) else f"{name}: {msg}"

    if isinstance(y, str) and y == "no_validation":
        try:
            return validate_data(estimator, X, reset=reset, **kw)
        except (TypeError, ValueError) as exc:
            raise type(exc)(named(exc, "X")) from exc
    try:
        return validate_data(estimator, X, y, reset=reset, **kw)
    except (TypeError, ValueError) as exc:
        try:
            check_array(X, **kw)
        except (TypeError, ValueError):
            raise type(exc)(named(exc, "X")) from exc
        raise type(exc)(named(exc, "y")) from exc


def _check_binary_values(X, missing=None):
    """Refuse infinity, NaN outside ``missing``, negative values and anything but 0 and 1
    (as the nets do: a missing entry may hold NaN or any finite value).

    Returns ``(X, observed)``: X with missing entries set to 0, and the observed-mask as
    float64 (None when nothing is missing).
    """
    miss = check_missing(missing, X.shape)
    if miss is None:
        if not np.all(np.isfinite(X)):
            raise ValueError(
                "X contains NaN or infinite values; mark missing entries with the missing mask "
                "(values under it may be NaN)"
            )
        ignore = None
    else:
        ignore = miss.astype(bool)
        if np.any(np.isinf(X)):
            raise ValueError("X contains infinite values (a missing entry may hold NaN or any "
                             "finite value)")
        if np.any(np.isnan(X) & ~ignore):
            raise ValueError("X contains NaN values at entries not marked missing")
    vals = X if ignore is None else X[~ignore]
    if np.any(vals < 0.0):
        raise ValueError(
            f"Negative values in data passed to X (found {vals[vals < 0.0].ravel()[0]!r}): X "
            f"must be binary (0/1)"
        )
    check_binary(X, "X", ignore=ignore)
    if ignore is None:
        return X, None
    return np.where(ignore, 0.0, X), (~ignore).astype(np.float64)


def _validate_binary(estimator, X, *, reset, missing=None):
    """``_validate_array`` then ``_check_binary_values``: returns ``(X, observed)``."""
    return _check_binary_values(_validate_array(estimator, X, reset=reset), missing)


def _check_targets(y):
    """Classification targets: refuses continuous or multi-output y; needs two classes.

    Returns ``(classes, y_index, counts)``.
    """
    try:
        check_classification_targets(y)
    except (TypeError, ValueError) as exc:
        raise type(exc)(f"y: {exc}") from exc
    classes, y_idx, counts = np.unique(y, return_inverse=True, return_counts=True)
    if classes.shape[0] < 2:
        raise ValueError(
            f"y has one class only ({classes.tolist()}); a classifier needs at least two classes"
        )
    return classes, y_idx.ravel(), counts


def _check_known_labels(y, classes, name="y"):
    """Raise ValueError when ``y`` holds labels that are not in ``classes``."""
    unseen = np.setdiff1d(np.unique(y), classes)
    if unseen.size:
        raise ValueError(
            f"{name} contains labels not seen during fit: {unseen.tolist()[:10]}; "
            f"known classes (classes_): {classes.tolist()}"
        )


def _check_class_log_prior(estimator):
    """The estimator's ``class_log_prior_`` as a float64 vector fit for use.

    A user may assign it after fit (for example to change the priors); it must have one entry
    per class, no NaN and no +inf, and at least one class must be possible (not -inf).
    """
    n_classes = estimator.classes_.shape[0]
    try:
        prior = np.asarray(estimator.class_log_prior_, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"class_log_prior_ must be a numeric vector: {exc}") from None
    if prior.shape != (n_classes,):
        raise ValueError(
            f"class_log_prior_ must have shape ({n_classes},), one entry per class, got "
            f"{prior.shape}"
        )
    if np.any(np.isnan(prior)) or np.any(prior == np.inf):
        raise ValueError(f"class_log_prior_ must not contain NaN or +inf, got {prior}")
    if not np.any(np.isfinite(prior)):
        raise ValueError("class_log_prior_ is -inf for every class: no class is possible")
    return prior


def _normalise_log(joint):
    """Rows of ``joint`` (log-scores) minus their log-sum-exp, so that exp of a row sums to 1.

    Each row is first shifted by its maximum: with scores near 1e100 the log-sum-exp would
    otherwise absorb ln(n_classes) and the probabilities would not sum to 1."""
    z = joint - np.max(joint, axis=1, keepdims=True)
    return z - logsumexp(z, axis=1, keepdims=True)


# --------------------------------------------------------------------------- EM
def _em(X, K, max_iter, alpha, tol, rng):
    """EM for a Bernoulli mixture on binary ``X`` (:func:`mfengine._em.run_em`); returns a
    dict of the fitted quantities."""
    n, d = X.shape
    # Initialise: K distinct patterns (with repeats only when n < K), blended with the mean.
    idx = rng.choice(n, size=K, replace=n < K)
    means = np.clip(0.5 * X[idx] + 0.5 * X.mean(axis=0), _EPS, 1.0 - _EPS)
    weights = np.full(K, 1.0 / K)
    ll_hist = []

    def e_step(params):
        means, weights = params
        log_p, log_q = np.log(means), np.log1p(-means)
        joint = X @ log_p.T + (1.0 - X) @ log_q.T + np.log(weights)
        log_px = logsumexp(joint, axis=1)
        ll = float(log_px.mean())
        return ll + _log_prior(means, weights, alpha) / n, (joint, log_px, ll)

    def m_step(params, stats):
        # MAP under the Beta / Dirichlet priors
        means, _ = params
        joint, log_px, _ = stats
        resp = np.exp(joint - log_px[:, None])
        Nk = resp.sum(axis=0)
        p = (resp.T @ X + alpha) / (Nk[:, None] + 2.0 * alpha)
        # A component with no responsibility and alpha=0 keeps its old means.
        empty = Nk + 2.0 * alpha <= 0.0
        if np.any(empty):
            p[empty] = means[empty]
        weights = np.maximum((Nk + alpha) / (n + K * alpha), 1e-300)
        return np.clip(p, _EPS, 1.0 - _EPS), weights / weights.sum()

    monitor = EMMonitor(tol)
    (means, weights), _, _ = run_em(
        (means, weights), e_step, m_step, max_iter, monitor,
        fell=lambda saved, params, value, stats: (params, value, stats, False),
        on_record=lambda value, stats: ll_hist.append(stats[2]))
    return dict(means=means, weights=weights, n_iter=len(monitor.history) - 1,
                converged=monitor.converged, log_likelihood_history=np.array(ll_hist),
                history=np.array(monitor.history))


def _log_prior(means, weights, alpha):
    if alpha == 0.0:
        return 0.0
    return alpha * (np.sum(np.log(means)) + np.sum(np.log1p(-means)) + np.sum(np.log(weights)))


def _check_mixture_params(means, weights, n_features, prefix=""):
    """Validate mixture parameters (possibly assigned after fit) before they are used.

    ``means`` (K, n_features) strictly inside (0, 1); ``weights`` (K,) non-negative, summing
    to 1.  Returns them as float64 arrays.
    """
    means = np.asarray(means, dtype=np.float64)
    weights = np.asarray(weights, dtype=np.float64)
    if means.ndim != 2 or means.shape[1] != n_features or means.shape[0] < 1:
        raise ValueError(
            f"{prefix}means_ must have shape (n_components, {n_features}), got {means.shape}"
        )
    if weights.shape != (means.shape[0],):
        raise ValueError(
            f"{prefix}weights_ must have shape ({means.shape[0]},), one weight per component, "
            f"got {weights.shape}"
        )
    if not np.all((means > 0.0) & (means < 1.0)):
        raise ValueError(
            f"{prefix}means_ must lie strictly between 0 and 1 (and contain no NaN); fit keeps "
            f"them in [{_EPS:g}, 1 - {_EPS:g}]"
        )
    if not (np.all(weights >= 0.0) and np.all(np.isfinite(weights))
            and abs(weights.sum() - 1.0) <= 1e-8):
        raise ValueError(
            f"{prefix}weights_ must be non-negative and sum to 1, got sum {weights.sum()!r}"
        )
    return means, weights


def _mixture_log_prob(X, observed, means, weights):
    """(n_samples,) ln P(x_observed) under one mixture."""
    log_p, log_q = np.log(means), np.log1p(-means)
    if observed is None:
        joint = X @ log_p.T + (1.0 - X) @ log_q.T
    else:
        joint = X @ log_p.T + (observed - X) @ log_q.T
    with np.errstate(divide="ignore"):
        return logsumexp(joint + np.log(weights), axis=1)


# --------------------------------------------------------------------------- estimators
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
    >>> from mfengine.baselines import BernoulliMixture
    >>> X = np.array([[1, 1, 0], [1, 1, 0], [0, 0, 1], [0, 1, 1]])
    >>> m = BernoulliMixture(n_components=2, random_state=0).fit(X)
    >>> m.score_samples(X).shape
    (4,)
    >>> bool(m.score(X) < 0)
    True
    """

    _parameter_constraints = {
        "n_components": [Interval(numbers.Integral, 1, _MAX_SIZE)],
        "max_iter": [Interval(numbers.Integral, 0, _MAX_ITER_LIMIT)],
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
        return _binary_input_tags(super().__sklearn_tags__())

    def _check_fitted(self):
        """``mf.load``: the loaded means and weights as every call checks them."""
        if "means_" in vars(self):
            _check_mixture_params(self.means_, self.weights_, self.n_features_in_)

    def _check_hyper(self):
        return (check_int(self.n_components, "n_components", 1, _MAX_SIZE),
                check_int(self.max_iter, "max_iter", 0, _MAX_ITER_LIMIT),
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
        X, _ = _validate_binary(self, X, reset=True)
        res = _em(X, K, max_iter, alpha, tol, check_random_state(self.random_state))
        self.means_ = res["means"]
        self.weights_ = res["weights"]
        self.n_iter_ = res["n_iter"]
        self.converged_ = res["converged"]
        self.log_likelihood_history_ = res["log_likelihood_history"]
        self.history_ = res["history"]
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
        X, obs = _validate_binary(self, X, reset=False, missing=missing)
        means, weights = _check_mixture_params(self.means_, self.weights_, self.n_features_in_)
        return _mixture_log_prob(X, obs, means, weights)

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
        n = check_int(n_samples, "n_samples", 0, _MAX_SIZE)
        means, weights = _check_mixture_params(self.means_, self.weights_, self.n_features_in_)
        rng = check_random_state(random_state)
        comp = rng.choice(weights.shape[0], size=n, p=weights)
        return (rng.random((n, self.n_features_in_)) < means[comp]).astype(np.float64)


class _GenerativeClassifierMixin(ClassifierMixin):
    """Prediction for classifiers built from one generative model per class.

    A subclass provides ``_joint(X, missing)``: the (n_samples, n_classes) array of each
    class's log-likelihood (or its bound) plus its log prior; the class probabilities are its
    softmax over classes.
    """

    def predict_log_proba(self, X, missing=None):
        """Log posterior class probabilities, computed stably in log space.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Binary patterns.
        missing : array-like of bool, optional
            Pixels to sum out (marginalised by each class's model).

        Returns
        -------
        ndarray of shape (n_samples, n_classes)
            The log-probabilities ln P(class | x), columns in the order of ``classes_``.
        """
        return _normalise_log(self._joint(X, missing))

    def predict_proba(self, X, missing=None):
        """Posterior class probabilities: the softmax over classes of log-likelihood + log prior.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Binary patterns.
        missing : array-like of bool, optional
            Pixels to sum out (marginalised by each class's model).

        Returns
        -------
        ndarray of shape (n_samples, n_classes)
            P(class | x); rows sum to 1.
        """
        return np.exp(self.predict_log_proba(X, missing=missing))

    def predict(self, X, missing=None):
        """The most probable class of each pattern.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Binary patterns.
        missing : array-like of bool, optional
            Pixels to sum out (marginalised by each class's model).

        Returns
        -------
        ndarray of shape (n_samples,)
            Labels from ``classes_``.
        """
        joint = self._joint(X, missing)      # checks that the model is fitted first
        return self.classes_[np.argmax(joint, axis=1)]

    def score(self, X, y, sample_weight=None, *, missing=None):
        """Classification accuracy.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Binary patterns (at least one).
        y : array-like of shape (n_samples,)
            True labels; labels not seen during ``fit`` raise ValueError.
        sample_weight : array-like of shape (n_samples,), optional
            Weights of the patterns in the mean.
        missing : array-like of bool, optional
            Pixels to sum out (marginalised by each class's model).

        Returns
        -------
        float
            The (weighted) fraction of patterns labelled correctly.
        """
        return _accuracy(self, X, y, sample_weight, missing)


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
    >>> from mfengine.baselines import MixtureClassifier
    >>> X = np.array([[1, 1, 0], [1, 1, 0], [0, 0, 1], [0, 1, 1]])
    >>> clf = MixtureClassifier(n_components=1, random_state=0).fit(X, [0, 0, 1, 1])
    >>> clf.predict(X).tolist()
    [0, 0, 1, 1]
    """

    _parameter_constraints = {
        "n_components": [Interval(numbers.Integral, 1, _MAX_SIZE)],
        "max_iter": [Interval(numbers.Integral, 0, _MAX_ITER_LIMIT)],
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
        return _binary_input_tags(super().__sklearn_tags__())

    def _check_fitted(self):
        """``mf.load``: one mixture per class, each as every call checks it, and the priors."""
        if "classes_" in vars(self):
            self._class_mixtures()
            _check_class_log_prior(self)

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
        X, y = _validate_array(self, X, y=y, reset=True)
        classes, y_idx, counts = _check_targets(y)
        X, _ = _check_binary_values(X)
        rng = check_random_state(self.random_state)
        seeds = rng.integers(0, 2**63 - 1, size=classes.shape[0])
        fits = [_em(X[y_idx == c], K, max_iter, alpha, tol, np.random.default_rng(int(seeds[c])))
                for c in range(classes.shape[0])]
        self.classes_ = classes
        self.means_ = np.stack([f["means"] for f in fits])
        self.weights_ = np.stack([f["weights"] for f in fits])
        self.n_iter_ = np.array([f["n_iter"] for f in fits])
        self.converged_ = np.array([f["converged"] for f in fits])
        self.history_ = [f["history"] for f in fits]
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
        X, obs = _validate_binary(self, X, reset=False, missing=missing)
        mixtures = self._class_mixtures()
        out = np.empty((X.shape[0], len(mixtures)))
        for c, (m, w) in enumerate(mixtures):
            out[:, c] = _mixture_log_prob(X, obs, m, w)
        return out

    def _class_mixtures(self):
        """``[(means, weights)]`` of every class, checked."""
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
        return [_check_mixture_params(means[c], weights[c], self.n_features_in_,
                                      prefix=f"class {self.classes_[c]!r}: ")
                for c in range(n_classes)]

    def _joint(self, X, missing):
        ll = self.class_log_likelihoods(X, missing=missing)
        return ll + _check_class_log_prior(self)


def _accuracy(clf, X, y, sample_weight, missing):
    from sklearn.metrics import accuracy_score

    pred = clf.predict(X, missing=missing)
    y = np.asarray(y)
    if y.ndim == 2 and y.shape[1] == 1:
        y = y.ravel()
    if y.shape != pred.shape:
        raise ValueError(f"y must have shape {pred.shape}, one label per pattern, got {y.shape}")
    _check_known_labels(y, clf.classes_)
    try:
        return float(accuracy_score(y, pred, sample_weight=sample_weight))
    except (TypeError, ValueError) as exc:
        raise type(exc)(f"y (or sample_weight): {exc}") from exc
