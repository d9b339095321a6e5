"""scikit-learn's estimator checks on every mfengine estimator.

Every estimator is one entry of ``ENTRIES``: an instance with small (fast) settings, whether
it takes binary (0/1) data only, and the checks it is expected to fail with the reason.  The
checks run strictly: an expected failure that passes is a test failure, so the lists stay
true.

scikit-learn's checks feed continuous data (uniform draws, blobs) and its tags have no flag for
"binary input only", so an estimator of binary data fails every check that needs a successful
fit on such data.  Those checks are listed in ``BINARY_ONLY`` and run a second time on a
subclass that maps each non-negative finite entry of X to a bit before calling the real
method (``binary_variant``); NaN, infinity, negative values, sparse matrices, strings and
complex numbers pass through unchanged, so the real input validation is still what the checks
see.  Every check of ``BINARY_ONLY`` must pass there: that shows the failures on continuous
data come from binary-only input and from nothing else.

To add an estimator: append one ``Entry`` (``binary=True`` adds the second run).
"""
import inspect
from dataclasses import dataclass, field

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.utils.estimator_checks import parametrize_with_checks

from mfengine.baselines import BernoulliMixture, MixtureClassifier
from mfengine.classify import GenerativeClassifier
from mfengine.hmm import ContextHMM
from mfengine.nlgbn import NLGBN
from mfengine.sbn import BeliefNet, SigmoidBeliefNet

_CONTINUOUS = "binary-only input: the check fits on continuous X, which is refused"
_HMMLEARN = ("hmmlearn's meanings: the second argument of fit/score is lengths, where the "
             "check passes y; score is a total and score_samples a (logprob, posteriors) pair")
_FIXED_WIDTH = ("the net's structure fixes its visible units (3): the check fits data of "
                "another width, which is refused with a clear error")

#: Checks that fail for an estimator of binary data only because they fit on continuous X.
BINARY_ONLY = {
    name: _CONTINUOUS
    for name in [
        "check_classifier_data_not_an_array",
        "check_classifiers_classes",
        "check_classifiers_train",
        "check_dict_unchanged",
        "check_dont_overwrite_parameters",
        "check_dtype_object",
        "check_estimators_dtypes",
        "check_estimators_fit_returns_self",
        "check_estimators_nan_inf",
        "check_estimators_overwrite_params",
        "check_estimators_pickle",
        "check_f_contiguous_array_estimator",
        "check_fit2d_1feature",
        "check_fit2d_predict1d",
        "check_fit_check_is_fitted",
        "check_fit_idempotent",
        "check_fit_score_takes_y",
        "check_methods_sample_order_invariance",
        "check_methods_subset_invariance",
        "check_n_features_in",
        "check_n_features_in_after_fitting",
        "check_non_transformer_estimators_n_iter",
        "check_pipeline_consistency",
        "check_readonly_memmap_input",
        "check_supervised_y_2d",
    ]
}


@dataclass
class Entry:
    """One estimator under test.

    estimator : an instance with small settings.
    binary : whether it takes binary data only (adds the run on ``binary_variant``).
    expected : further checks expected to fail, {check name: reason}.
    binary_expected : checks expected to fail even on the binary variant, {name: reason}.
    """

    estimator: object
    binary: bool = False
    expected: dict = field(default_factory=dict)
    binary_expected: dict = field(default_factory=dict)


ENTRIES = [
    Entry(GenerativeClassifier(hidden=(2,), max_iter=2, progress=False), binary=True),
    Entry(MixtureClassifier(n_components=2, max_iter=5, tol=None), binary=True),
    # a classifier refuses one sample (one class) before it looks at X; a density model fits
    Entry(BernoulliMixture(n_components=2, max_iter=5, tol=None), binary=True,
          expected={"check_fit2d_1sample": _CONTINUOUS}),
    # the visible layer's size (None) comes from X, as a density model's should
    Entry(SigmoidBeliefNet([2, None], max_iter=2, progress=False), binary=True,
          expected={"check_fit2d_1sample": _CONTINUOUS}),
    # a BeliefNet's visible units are fixed by its structure (W, visible): a check that fits
    # data of another width cannot apply to it
    Entry(BeliefNet(np.tril(np.full((5, 5), 0.5), -1), np.zeros(5), visible=[2, 3, 4],
                    max_iter=2, batch_size=10, progress=False), binary=True,
          expected={k: _FIXED_WIDTH for k in ("check_positive_only_tag_during_fit",
                                              "check_fit2d_1sample")},
          binary_expected={k: _FIXED_WIDTH for k in (
              "check_estimators_overwrite_params", "check_estimators_fit_returns_self",
              "check_readonly_memmap_input", "check_n_features_in_after_fitting",
              "check_positive_only_tag_during_fit", "check_estimators_dtypes",
              "check_dtype_object", "check_fit2d_1sample", "check_fit2d_1feature",
              "check_fit_idempotent", "check_fit_check_is_fitted", "check_n_features_in")}),
    Entry(NLGBN([2, None], max_iter=3, tol=None, progress=False)),
    # ContextHMM keeps hmmlearn's meanings: the second argument of fit and score is lengths
    # (scikit-learn's checks pass y there), score is the total log-probability bound and
    # score_samples returns (logprob, posteriors)
    Entry(ContextHMM(n_states=2, lag=1, max_iter=2, bw_max_iter=2, tol=None, progress=False),
          expected={k: _HMMLEARN for k in (
              "check_dict_unchanged", "check_dont_overwrite_parameters", "check_dtype_object",
              "check_estimators_dtypes", "check_estimators_fit_returns_self",
              "check_estimators_overwrite_params",
              "check_estimators_pickle", "check_estimators_pickle(readonly_memmap=True)",
              "check_f_contiguous_array_estimator", "check_fit2d_1feature",
              "check_fit2d_1sample", "check_fit2d_predict1d", "check_fit_check_is_fitted",
              "check_fit_idempotent", "check_fit_score_takes_y",
              "check_methods_sample_order_invariance", "check_methods_subset_invariance",
              "check_n_features_in", "check_n_features_in_after_fitting",
              "check_pipeline_consistency", "check_positive_only_tag_during_fit",
              "check_readonly_memmap_input")}),
]


# ---------------------------------------------------------------------------- binary variant
def _to_bits(X):
    """Each non-negative finite entry of a numeric X mapped to a bit; anything else unchanged."""
    if sp.issparse(X) or isinstance(X, (str, bytes)):
        return X
    if hasattr(X, "columns") and hasattr(X, "to_numpy"):  # a DataFrame keeps its column names
        return type(X)(_to_bits(X.to_numpy()), columns=X.columns, index=X.index)
    try:
        arr = np.asarray(X)
    except Exception:  # the estimator's own validation will judge it
        return X
    if arr.dtype == object:  # numbers stored as objects are mapped; strings are not
        try:
            return _to_bits(arr.astype(np.float64)).astype(object)
        except (TypeError, ValueError):
            return X
    if arr.dtype.kind not in "biuf" or arr.ndim == 0:
        return X
    vals = arr.astype(np.float64)
    with np.errstate(invalid="ignore"):
        ok = np.isfinite(vals) & (vals >= 0)
    # an elementwise map, so that subset and order invariance carry over
    bits = np.floor(4.0 * np.where(ok, vals, 0.0)) % 2 if arr.dtype.kind == "f" else np.where(ok, vals, 0) % 2
    out = np.where(ok, bits, vals).astype(arr.dtype)
    if arr.ndim == 2 and arr.flags.f_contiguous and not arr.flags.c_contiguous:
        out = np.asfortranarray(out)
    if isinstance(X, np.ndarray):
        if not X.flags.writeable:
            out.setflags(write=False)
        return out
    if isinstance(X, list):
        return out.tolist()
    try:  # other array-likes (e.g. scikit-learn's _NotAnArray) keep their type
        return type(X)(out)
    except Exception:
        return out


_X_METHODS = ("fit", "partial_fit", "predict", "predict_proba", "predict_log_proba", "score", "score_samples",
              "class_bounds", "class_log_likelihoods")


def binary_variant(cls):
    """A subclass of ``cls`` whose methods map X to bits first (see the module docstring)."""
    name = f"Binary{cls.__name__}"
    if name in globals():
        return globals()[name]

    def wrap(method):
        def wrapped(self, X, *args, **kwargs):
            return method(self, _to_bits(X), *args, **kwargs)

        wrapped.__name__ = method.__name__
        wrapped.__signature__ = inspect.signature(method)
        return wrapped

    def tags(self):
        t = cls.__sklearn_tags__(self)
        if t.classifier_tags is not None:
            t.classifier_tags.poor_score = True  # the bits lose most of the blobs' information
        return t

    ns = {m: wrap(getattr(cls, m)) for m in _X_METHODS if hasattr(cls, m)}
    ns.update(__module__=__name__, __qualname__=name, __sklearn_tags__=tags,
              __init__=cls.__init__)
    sub = type(name, (cls,), ns)
    globals()[name] = sub
    return sub


def _clone_as(cls, est):
    return cls(**est.get_params(deep=False))


# ---------------------------------------------------------------------------- the two runs
_REAL = {id(e.estimator): e for e in ENTRIES}
_VARIANTS = [
    (_clone_as(binary_variant(type(e.estimator)), e.estimator), e) for e in ENTRIES if e.binary
]
_VARIANT = {id(v): e for v, e in _VARIANTS}


def _expected_real(est):
    e = _REAL[id(est)]
    return {**(BINARY_ONLY if e.binary else {}), **e.expected}


def _expected_variant(est):
    return dict(_VARIANT[id(est)].binary_expected)


_STRICT = ({"xfail_strict": True}
           if "xfail_strict" in inspect.signature(parametrize_with_checks).parameters else {})


@parametrize_with_checks([e.estimator for e in ENTRIES], expected_failed_checks=_expected_real,
                         **_STRICT)
def test_sklearn_checks(estimator, check):
    check(estimator)


@parametrize_with_checks([v for v, _ in _VARIANTS], expected_failed_checks=_expected_variant,
                         **_STRICT)
def test_sklearn_checks_on_binary_data(estimator, check):
    check(estimator)


def test_binary_variant_maps_only_valid_entries():
    X = np.array([[0.1, 0.3, np.nan], [-1.0, np.inf, 2.6]])
    out = _to_bits(X)
    np.testing.assert_array_equal(out[0, :2], [0.0, 1.0])
    assert np.isnan(out[0, 2]) and out[1, 0] == -1.0 and out[1, 1] == np.inf and out[1, 2] == 0.0
    assert _to_bits(sp.csr_matrix(X)) is not None and sp.issparse(_to_bits(sp.csr_matrix(X)))
