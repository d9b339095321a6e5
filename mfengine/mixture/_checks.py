"""Checks of binary data, class labels and mixture parameters, as plain functions.

The Bernoulli mixtures (:mod:`mfengine.mixture.model`) and
:class:`~mfengine.GenerativeClassifier` (:mod:`mfengine.classify`) run them once per call;
every message names the argument in the words of the public API.
"""
import numpy as np
from sklearn.utils import check_array
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import validate_data

from mfengine._validation import check_binary, check_missing
from mfengine.mixture._problem import MixtureParams

__all__ = ["EPS", "MAX_ITER_LIMIT", "MAX_SIZE", "binary_input_tags", "validate_array",
           "check_binary_values", "validate_binary", "check_targets", "check_known_labels",
           "check_class_log_prior", "check_mixture_params"]

#: Component probabilities are kept in [EPS, 1 - EPS] so that no log is -inf, even with alpha=0.
EPS = 1e-10
#: Largest iteration budget (EM iterations, epochs) accepted: larger budgets would run for days
#: or allocate schedules that do not fit in memory.
MAX_ITER_LIMIT = 10**6
#: Largest size (components, batch, sweeps) accepted: what a C int holds.
MAX_SIZE = 2**31 - 1


def binary_input_tags(tags):
    """Input tags of an estimator of binary (0/1) data.

    scikit-learn's tags have no flag for binary-only input; the closest true statement is
    ``positive_only`` (X must be non-negative).  NaN is accepted only under a ``missing`` mask,
    so ``allow_nan`` stays False; sparse input is refused with a TypeError naming X.
    """
    tags.input_tags.positive_only = True
    tags.input_tags.allow_nan = False
    tags.input_tags.sparse = False
    return tags


def validate_array(estimator, X, *, reset, y="no_validation"):
    """scikit-learn's ``validate_data`` with the settings of every binary-data estimator.

    X becomes a C-contiguous float64 2-D array with at least one row and one column; a sparse
    X is a TypeError; ``n_features_in_`` is set (``reset=True``) or checked.  NaN is let
    through, for :func:`check_binary_values` to judge against the missing mask.  With ``y``
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


def check_binary_values(X, missing=None):
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


def validate_binary(estimator, X, *, reset, missing=None):
    """:func:`validate_array` then :func:`check_binary_values`: returns ``(X, observed)``."""
    return check_binary_values(validate_array(estimator, X, reset=reset), missing)


def check_targets(y):
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


def check_known_labels(y, classes, name="y"):
    """Raise ValueError when ``y`` holds labels that are not in ``classes``."""
    unseen = np.setdiff1d(np.unique(y), classes)
    if unseen.size:
        raise ValueError(
            f"{name} contains labels not seen during fit: {unseen.tolist()[:10]}; "
            f"known classes (classes_): {classes.tolist()}"
        )


def check_class_log_prior(estimator):
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


def check_mixture_params(means, weights, n_features, prefix=""):
    """Validate mixture parameters (possibly assigned after fit) before they are used.

    ``means`` (K, n_features) strictly inside (0, 1); ``weights`` (K,) non-negative, summing
    to 1.  Returns them as a :class:`~mfengine.mixture._problem.MixtureParams` of float64
    arrays; ``prefix`` starts every message (a class's mixture names its class).
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
            f"them in [{EPS:g}, 1 - {EPS:g}]"
        )
    if not (np.all(weights >= 0.0) and np.all(np.isfinite(weights))
            and abs(weights.sum() - 1.0) <= 1e-8):
        raise ValueError(
            f"{prefix}weights_ must be non-negative and sum to 1, got sum {weights.sum()!r}"
        )
    return MixtureParams(means, weights)
