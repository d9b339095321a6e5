"""Baseline generative classifier: mixtures of independent Bernoulli pixels (Saul & Jordan, sec. 3).

Within each mixture component the pixels are independent binary variables; the model is fit by
EM.  ``MixtureClassifier`` fits one mixture per class and labels a pattern by the largest
log-likelihood plus log prior.  Missing pixels are marginalised exactly: they simply drop out of
the per-component product.  Pure NumPy, vectorised over patterns and components, computed in
log space.
"""
import numbers

import numpy as np

from mfengine._validation import as_float_matrix, check_binary, check_missing, check_random_state

__all__ = ["BernoulliMixture", "MixtureClassifier", "NotFittedError"]

# Component probabilities are kept in [_EPS, 1 - _EPS] so that no log is -inf, even with alpha=0.
_EPS = 1e-10


class NotFittedError(ValueError, AttributeError):
    """Raised when an estimator is used before ``fit`` (a ValueError and an AttributeError,
    like scikit-learn's exception of the same name)."""


class _ParamsMixin:
    """``get_params``/``set_params`` in scikit-learn's style, without importing scikit-learn.

    Parameters are the keyword arguments of ``__init__``, stored unchanged as attributes, so
    ``sklearn.base.clone`` and grid searches work on these estimators.
    """

    @classmethod
    def _param_names(cls):
        import inspect

        sig = inspect.signature(cls.__init__)
        return sorted(p.name for p in sig.parameters.values()
                      if p.name != "self" and p.kind != p.VAR_KEYWORD)

    def get_params(self, deep=True):
        """The estimator's parameters as a dict (``deep`` is accepted for compatibility)."""
        return {name: getattr(self, name) for name in self._param_names()}

    def set_params(self, **params):
        """Set parameters by name; unknown names raise ValueError.  Returns ``self``."""
        valid = set(self._param_names())
        for name, value in params.items():
            if name not in valid:
                raise ValueError(
                    f"invalid parameter {name!r} for {type(self).__name__}; valid parameters: "
                    f"{sorted(valid)}"
                )
            setattr(self, name, value)
        return self

    def __repr__(self):
        args = ", ".join(f"{k}={v!r}" for k, v in self.get_params().items())
        return f"{type(self).__name__}({args})"


class _ClassifierMixin(_ParamsMixin):
    """Marks an estimator as a classifier for scikit-learn (``cross_val_score``, ``clone``,
    ``is_classifier``) without importing scikit-learn at module import."""

    _estimator_type = "classifier"  # scikit-learn < 1.6

    def __sklearn_tags__(self):
        """scikit-learn (>= 1.6) estimator tags: a classifier on 2-D binary input."""
        from sklearn.utils import ClassifierTags, InputTags, Tags, TargetTags

        return Tags(estimator_type="classifier", target_tags=TargetTags(required=True),
                    classifier_tags=ClassifierTags(), input_tags=InputTags(allow_nan=True))


def _logsumexp(a, axis):
    amax = np.max(a, axis=axis, keepdims=True)
    amax = np.where(np.isfinite(amax), amax, 0.0)
    out = np.log(np.sum(np.exp(a - amax), axis=axis, keepdims=True)) + amax
    return np.squeeze(out, axis=axis)


def _check_binary_data(X, name, n_features=None, missing=None):
    """Validate a binary data matrix (entries under ``missing`` may be anything, NaN included).

    Returns ``(X, observed)``: X as float64 with missing entries set to 0, and the observed-mask
    as float64 (or None when nothing is missing).
    """
    X = as_float_matrix(X, name, n_cols=n_features, allow_nan=missing is not None)
    miss = check_missing(missing, X.shape)
    if miss is None:
        check_binary(X, name)
        return X, None
    miss = miss.astype(bool)
    if np.any(~np.isfinite(X) & ~miss):
        raise ValueError(f"{name} contains NaN or infinite values at entries not marked missing")
    check_binary(X, name, ignore=miss)
    X = np.where(miss, 0.0, X)
    return X, (~miss).astype(np.float64)


def _check_positive_int(value, name):
    if not isinstance(value, numbers.Integral) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return int(value)


class BernoulliMixture(_ParamsMixin):
    """A mixture of products of Bernoulli distributions, fit by EM.

    ``P(x) = sum_k pi_k prod_d p_kd^x_d (1 - p_kd)^(1 - x_d)``.

    Parameters
    ----------
    n_components : int, default 10
        Number of mixture components K.
    n_iter : int, default 50
        Maximum number of EM iterations (the paper used 10).
    alpha : float, default 1.0
        Additive smoothing: a symmetric Beta(1 + alpha, 1 + alpha) prior on every pixel
        probability and a Dirichlet(1 + alpha) prior on the mixing weights, so the M-step is
        ``p_kd = (sum_n r_nk x_nd + alpha) / (N_k + 2 alpha)`` and
        ``pi_k = (N_k + alpha) / (N + K alpha)``.  With ``alpha=0`` this is maximum-likelihood
        EM.  EM never decreases the penalised objective (log-likelihood plus log prior); with
        ``alpha=0`` that is the log-likelihood itself.
    tol : float, default 1e-6
        Stop when the mean objective per pattern improves by less than ``tol`` nats.
        ``tol=0`` runs all ``n_iter`` iterations.
    random_state : None, int or numpy.random.Generator
        Seed for the initialisation: the component means start halfway between K distinct
        random training patterns and the overall pixel means.

    Attributes
    ----------
    weights_ : ndarray (n_components,)
        Mixing proportions pi_k.
    means_ : ndarray (n_components, n_features)
        Pixel probabilities p_kd.
    log_likelihood_history_ : ndarray
        Mean log-likelihood per pattern (nats) at the start of each EM iteration and after the
        last one.
    objective_history_ : ndarray
        The same for the penalised objective (log-likelihood plus log prior, per pattern).
    n_iter_ : int
        EM iterations run.
    converged_ : bool
    """

    def __init__(self, n_components=10, n_iter=50, alpha=1.0, tol=1e-6, random_state=None):
        self.n_components = n_components
        self.n_iter = n_iter
        self.alpha = alpha
        self.tol = tol
        self.random_state = random_state

    # ------------------------------------------------------------------ helpers
    def _check_hyper(self):
        K = _check_positive_int(self.n_components, "n_components")
        n_iter = self.n_iter
        if not isinstance(n_iter, numbers.Integral) or isinstance(n_iter, bool) or n_iter < 0:
            raise ValueError(f"n_iter must be a non-negative integer, got {n_iter!r}")
        if not (isinstance(self.alpha, numbers.Real) and np.isfinite(self.alpha) and self.alpha >= 0):
            raise ValueError(f"alpha must be a finite non-negative number, got {self.alpha!r}")
        if not (isinstance(self.tol, numbers.Real) and self.tol >= 0):
            raise ValueError(f"tol must be a non-negative number, got {self.tol!r}")
        return K, int(n_iter), float(self.alpha), float(self.tol)

    def _check_fitted(self):
        if not hasattr(self, "means_"):
            raise NotFittedError(f"this {type(self).__name__} is not fitted yet; call fit first")

    @staticmethod
    def _component_log_prob(X, obs, log_p, log_q):
        """(n, K) array of ln P(x_obs | component k)."""
        if obs is None:
            return X @ log_p.T + (1.0 - X) @ log_q.T
        return X @ log_p.T + (obs - X) @ log_q.T

    def _log_prior(self, alpha):
        if alpha == 0.0:
            return 0.0
        return alpha * (np.sum(np.log(self.means_)) + np.sum(np.log1p(-self.means_))
                        + np.sum(np.log(self.weights_)))

    # ------------------------------------------------------------------ API
    def fit(self, X):
        """Fit the mixture to the binary (n_samples, n_features) array ``X`` by EM.

        Returns ``self``.
        """
        K, n_iter, alpha, tol = self._check_hyper()
        X, _ = _check_binary_data(X, "X")
        n, d = X.shape
        if n == 0:
            raise ValueError("X has no patterns")
        rng = check_random_state(self.random_state)
        # Initialise: K distinct patterns (with repeats only when n < K), blended with the mean.
        idx = rng.choice(n, size=K, replace=n < K)
        p = 0.5 * X[idx] + 0.5 * X.mean(axis=0)
        self.means_ = np.clip(p, _EPS, 1.0 - _EPS)
        self.weights_ = np.full(K, 1.0 / K)
        self.n_features_in_ = d
        ll_hist, obj_hist = [], []
        prev = -np.inf
        self.converged_ = False
        it = 0
        for it in range(n_iter + 1):
            # E-step (also gives the objective at the current parameters)
            log_p, log_q = np.log(self.means_), np.log1p(-self.means_)
            joint = self._component_log_prob(X, None, log_p, log_q) + np.log(self.weights_)
            log_px = _logsumexp(joint, axis=1)
            ll = float(log_px.mean())
            obj = ll + self._log_prior(alpha) / n
            ll_hist.append(ll)
            obj_hist.append(obj)
            if it == n_iter or (tol > 0 and obj - prev < tol):
                self.converged_ = tol > 0 and obj - prev < tol
                break
            prev = obj
            resp = np.exp(joint - log_px[:, None])
            # M-step (MAP under the Beta / Dirichlet priors)
            Nk = resp.sum(axis=0)
            p = (resp.T @ X + alpha) / (Nk[:, None] + 2.0 * alpha)
            # A component with no responsibility and alpha=0 keeps its old means.
            empty = Nk + 2.0 * alpha <= 0.0
            if np.any(empty):
                p[empty] = self.means_[empty]
            self.means_ = np.clip(p, _EPS, 1.0 - _EPS)
            w = (Nk + alpha) / (n + K * alpha)
            self.weights_ = np.maximum(w, 1e-300)
            self.weights_ /= self.weights_.sum()
        self.n_iter_ = it
        self.log_likelihood_history_ = np.array(ll_hist)
        self.objective_history_ = np.array(obj_hist)
        return self

    def score_samples(self, X, missing=None):
        """Exact log-likelihood ln P(x) of each pattern, in nats.

        ``missing`` (boolean, (n_samples, n_features) or (n_features,)) marks pixels that are
        summed out: the result is then ln P(observed pixels).  Entries under the mask may hold
        any value (NaN too).
        """
        self._check_fitted()
        X, obs = _check_binary_data(X, "X", n_features=self.n_features_in_, missing=missing)
        joint = self._component_log_prob(X, obs, np.log(self.means_), np.log1p(-self.means_))
        return _logsumexp(joint + np.log(self.weights_), axis=1)

    def score(self, X, missing=None):
        """Mean log-likelihood per pattern (nats)."""
        return float(np.mean(self.score_samples(X, missing=missing)))

    def sample(self, n, random_state=None):
        """Draw ``n`` binary patterns from the mixture.  Returns an (n, n_features) array."""
        self._check_fitted()
        if not isinstance(n, numbers.Integral) or n < 0:
            raise ValueError(f"n must be a non-negative integer, got {n!r}")
        rng = check_random_state(random_state)
        comp = rng.choice(self.weights_.shape[0], size=n, p=self.weights_)
        return (rng.random((n, self.n_features_in_)) < self.means_[comp]).astype(np.float64)


def _check_labels(y, n, name="y"):
    y = np.asarray(y)
    if y.ndim == 2 and y.shape[1] == 1:
        y = y.ravel()
    if y.ndim != 1:
        raise ValueError(f"{name} must be a 1-D array of labels, got shape {y.shape}")
    if y.shape[0] != n:
        raise ValueError(f"{name} has {y.shape[0]} labels but X has {n} patterns")
    if y.dtype.kind == "f" and not np.all(np.isfinite(y)):
        raise ValueError(f"{name} contains NaN or infinite labels")
    if y.dtype == object:
        try:
            np.unique(y)
        except TypeError as exc:
            raise TypeError(f"{name} labels must be mutually comparable: {exc}") from None
    return y


def _check_known_labels(y, classes, name="y"):
    unseen = np.setdiff1d(np.unique(y), classes)
    if unseen.size:
        raise ValueError(
            f"{name} contains labels not seen during fit: {unseen.tolist()[:10]}; "
            f"known classes: {classes.tolist()}"
        )


class MixtureClassifier(_ClassifierMixin):
    """One ``BernoulliMixture`` per class; label = argmax of log-likelihood + log prior.

    Parameters
    ----------
    n_components : int, default 10
        Components per class (the paper used 40 with 6000 images per class).
    n_iter, alpha, tol : passed to each ``BernoulliMixture``.
    random_state : None, int or numpy.random.Generator
        Seeds each class's mixture (independent streams derived from it).

    Attributes
    ----------
    classes_ : ndarray
        Sorted class labels.
    mixtures_ : list of BernoulliMixture
        One per class, in the order of ``classes_``.
    class_log_prior_ : ndarray (n_classes,)
        Log of the class frequencies in the training data.
    n_features_in_ : int
    """

    def __init__(self, n_components=10, n_iter=50, alpha=1.0, tol=1e-6, random_state=0):
        self.n_components = n_components
        self.n_iter = n_iter
        self.alpha = alpha
        self.tol = tol
        self.random_state = random_state

    def fit(self, X, y):
        """Fit one mixture per class on binary ``X`` (n_samples, n_features) with labels ``y``.

        Returns ``self``.
        """
        X, _ = _check_binary_data(X, "X")
        y = _check_labels(y, X.shape[0])
        if X.shape[0] == 0:
            raise ValueError("X has no patterns")
        classes, y_idx, counts = np.unique(y, return_inverse=True, return_counts=True)
        if classes.shape[0] < 2:
            raise ValueError(f"need at least two classes to classify, got {classes.tolist()}")
        rng = check_random_state(self.random_state)
        seeds = rng.integers(0, 2**63 - 1, size=classes.shape[0])
        mixtures = []
        for c in range(classes.shape[0]):
            m = BernoulliMixture(n_components=self.n_components, n_iter=self.n_iter,
                                 alpha=self.alpha, tol=self.tol, random_state=int(seeds[c]))
            mixtures.append(m.fit(X[y_idx == c]))
        self.classes_ = classes
        self.mixtures_ = mixtures
        self.class_log_prior_ = np.log(counts / counts.sum())
        self.n_features_in_ = X.shape[1]
        return self

    def _check_fitted(self):
        if not hasattr(self, "mixtures_"):
            raise NotFittedError(f"this {type(self).__name__} is not fitted yet; call fit first")

    def class_log_likelihoods(self, X, missing=None):
        """(n_samples, n_classes) array: ln P(x | class) under each class's mixture (nats)."""
        self._check_fitted()
        X = as_float_matrix(X, "X", n_cols=self.n_features_in_, allow_nan=missing is not None)
        return np.column_stack([m.score_samples(X, missing=missing) for m in self.mixtures_])

    def predict_log_proba(self, X, missing=None):
        """Log posterior class probabilities, (n_samples, n_classes)."""
        joint = self.class_log_likelihoods(X, missing=missing) + self.class_log_prior_
        return joint - _logsumexp(joint, axis=1)[:, None]

    def predict_proba(self, X, missing=None):
        """Posterior class probabilities, (n_samples, n_classes); rows sum to 1."""
        return np.exp(self.predict_log_proba(X, missing=missing))

    def predict(self, X, missing=None):
        """Most probable class of each pattern."""
        joint = self.class_log_likelihoods(X, missing=missing) + self.class_log_prior_
        return self.classes_[np.argmax(joint, axis=1)]

    def score(self, X, y, missing=None):
        """Classification accuracy on ``X`` with true labels ``y``."""
        pred = self.predict(X, missing=missing)
        y = _check_labels(y, pred.shape[0])
        _check_known_labels(y, self.classes_)
        return float(np.mean(pred == y))
