"""What every classifier built from one generative model per class shares: the
prediction verbs (:class:`_GenerativeClassifierMixin`, used by
:class:`~mfengine.MixtureClassifier` and :class:`~mfengine.GenerativeClassifier`), the
normalisation of class scores, and the accuracy of ``score``."""
import numpy as np
from scipy.special import logsumexp
from sklearn.base import ClassifierMixin

from mfengine.mixture._checks import check_known_labels

__all__ = ["_GenerativeClassifierMixin", "normalise_log", "accuracy"]


def normalise_log(joint):
    """Rows of ``joint`` (log-scores) minus their log-sum-exp, so that exp of a row sums to 1.

    Each row is first shifted by its maximum: with scores near 1e100 the log-sum-exp would
    otherwise absorb ln(n_classes) and the probabilities would not sum to 1."""
    z = joint - np.max(joint, axis=1, keepdims=True)
    return z - logsumexp(z, axis=1, keepdims=True)


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
        return normalise_log(self._joint(X, missing))

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
        return accuracy(self, X, y, sample_weight, missing)


def accuracy(clf, X, y, sample_weight, missing):
    """The (weighted) fraction of patterns of X that ``clf`` labels as ``y`` (labels not seen
    during fit refused)."""
    from sklearn.metrics import accuracy_score

    pred = clf.predict(X, missing=missing)
    y = np.asarray(y)
    if y.ndim == 2 and y.shape[1] == 1:
        y = y.ravel()
    if y.shape != pred.shape:
        raise ValueError(f"y must have shape {pred.shape}, one label per pattern, got {y.shape}")
    check_known_labels(y, clf.classes_)
    try:
        return float(accuracy_score(y, pred, sample_weight=sample_weight))
    except (TypeError, ValueError) as exc:
        raise type(exc)(f"y (or sample_weight): {exc}") from exc
