"""scikit-learn's estimator checks on every mfengine estimator.

Every estimator is one entry of ``ENTRIES``: an instance with small (fast) settings, whether
it takes binary (0/1) data only, and the checks that cannot apply to it, with the reason.  A
check that cannot apply is not run (it is filtered out of scikit-learn's list, not marked as an
expected failure); every other check must pass.  The lists are kept true by two tests:
``test_not_applicable_checks_are_listed`` prints them (``pytest -rP`` shows the print) and
asserts that every listed check is a check of the installed scikit-learn (so a renamed or
removed check cannot linger), and ``test_not_applicable_checks_do_fail`` runs the listed checks
quietly and asserts that each one fails (so a check that starts to pass comes off the list).
Checks that scikit-learn runs only with SciPy's array API support switched on (``IN_A_CHILD``)
run in a child process, by the same rules.

scikit-learn's checks feed continuous data (uniform draws, blobs) and its tags have no flag for
"binary input only", so an estimator of binary data fails every check that needs a successful
fit on such data.  Those checks are listed in ``BINARY_ONLY`` and run on a subclass that maps
each non-negative finite entry of X to a bit before calling the real method
(``binary_variant``); NaN, infinity, negative values, sparse matrices, strings and complex
numbers pass through unchanged, so the real input validation is still what the checks see.
Every check of ``BINARY_ONLY`` must pass there: that shows the failures on continuous data come
from binary-only input and from nothing else.

Checks are matched by the name of the check function, as scikit-learn's own
``expected_failed_checks`` is, so a name covers every instance of the check (e.g. both
``check_estimators_pickle`` and ``check_estimators_pickle(readonly_memmap=True)``).

To add an estimator: append one ``Entry`` (``binary=True`` adds the run on binary data).
"""
import functools
import inspect
import json
import os
import subprocess
import sys
import unittest
import warnings
from dataclasses import dataclass, field

import numpy as np
import pytest
import scipy.sparse as sp

try:  # scikit-learn >= 1.6 (the package's minimum): the public generator of the checks
    from sklearn.utils.estimator_checks import estimator_checks_generator
except ImportError:  # pragma: no cover - an older scikit-learn
    from sklearn.utils.estimator_checks import check_estimator

    def estimator_checks_generator(estimator):
        return check_estimator(estimator, generate_only=True)

from mfengine.mixture import BernoulliMixture, MixtureClassifier
from mfengine.classify import GenerativeClassifier
from mfengine.hmm import ContextHMM
from mfengine.nlgbn import NLGBN
from mfengine.sbn import BeliefNet, SigmoidBeliefNet

_CONTINUOUS = "binary-only input: the check fits on continuous X, which is refused"
_HMMLEARN = ("hmmlearn's meanings: the second argument of fit/score is lengths, where the "
             "check passes y; score is a total and score_samples a (logprob, posteriors) pair")
_FIXED_WIDTH = ("the net's structure fixes its visible units (3): the check fits data of "
                "another width, which is refused with a clear error")

#: Checks that cannot apply to an estimator of binary data only: they fit on continuous X.
BINARY_ONLY = {
    name: _CONTINUOUS
    for name in [
        "check_array_api_input",
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
    binary : whether it takes binary data only (its run leaves out ``BINARY_ONLY``, and a run
        on ``binary_variant`` is added).
    not_applicable : further checks that cannot apply to it, {check name: reason}.
    binary_not_applicable : checks that cannot apply even to the binary variant,
        {check name: reason}.
    """

    estimator: object
    binary: bool = False
    not_applicable: dict = field(default_factory=dict)
    binary_not_applicable: dict = field(default_factory=dict)


ENTRIES = [
    Entry(GenerativeClassifier(hidden=(2,), max_iter=2, progress=False), binary=True),
    Entry(MixtureClassifier(n_components=2, max_iter=5, tol=None), binary=True),
    # a classifier refuses one sample (one class) before it looks at X; a density model fits
    Entry(BernoulliMixture(n_components=2, max_iter=5, tol=None), binary=True,
          not_applicable={"check_fit2d_1sample": _CONTINUOUS}),
    # the visible layer's size (None) comes from X, as a density model's should
    Entry(SigmoidBeliefNet([2, None], max_iter=2, progress=False), binary=True,
          not_applicable={"check_fit2d_1sample": _CONTINUOUS}),
    # a BeliefNet's visible units are fixed by its structure (W, visible): a check that fits
    # data of another width cannot apply to it
    Entry(BeliefNet(np.tril(np.full((5, 5), 0.5), -1), np.zeros(5), visible=[2, 3, 4],
                    max_iter=2, batch_size=10, progress=False), binary=True,
          not_applicable={k: _FIXED_WIDTH for k in ("check_positive_only_tag_during_fit",
                                                    "check_fit2d_1sample",
                                                    "check_array_api_input")},
          binary_not_applicable={k: _FIXED_WIDTH for k in (
              "check_array_api_input", "check_estimators_overwrite_params",
              "check_estimators_fit_returns_self",
              "check_readonly_memmap_input", "check_n_features_in_after_fitting",
              "check_positive_only_tag_during_fit", "check_estimators_dtypes",
              "check_dtype_object", "check_fit2d_1sample", "check_fit2d_1feature",
              "check_fit_idempotent", "check_fit_check_is_fitted", "check_n_features_in")}),
    Entry(NLGBN([2, None], max_iter=3, tol=None, progress=False)),
    # ContextHMM keeps hmmlearn's meanings: the second argument of fit and score is lengths
    # (scikit-learn's checks pass y there), score is the total log-probability bound and
    # score_samples returns (logprob, posteriors)
    Entry(ContextHMM(n_states=2, lag=1, max_iter=2, bw_max_iter=2, tol=None, progress=False),
          not_applicable={k: _HMMLEARN for k in (
              "check_array_api_input", "check_dict_unchanged", "check_dont_overwrite_parameters",
              "check_dtype_object", "check_estimators_dtypes", "check_estimators_fit_returns_self",
              "check_estimators_overwrite_params", "check_estimators_pickle",
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


# ---------------------------------------------------------------------------- the runs
def _check_name(check):
    """The name of the check function, as scikit-learn's expected_failed_checks matches it."""
    while hasattr(check, "__wrapped__"):
        check = check.__wrapped__
    return check.func.__name__ if isinstance(check, functools.partial) else check.__name__


def _check_id(check):
    """The check's name with its keyword arguments: unique among an estimator's checks."""
    kw = check.keywords if isinstance(check, functools.partial) else {}
    args = ",".join(f"{k}={v}" for k, v in kw.items())
    return f"{_check_name(check)}({args})" if args else _check_name(check)


#: Checks that scikit-learn runs only in a process where SciPy's array API support was switched
#: on before SciPy was imported (SCIPY_ARRAY_API=1; it skips them elsewhere).  That setting
#: would change SciPy for the whole suite, so these run in a child process that has it
#: (``test_array_api_checks_in_a_child_process``) and never in this one.
IN_A_CHILD = {"check_array_api_input"}
HERE = os.path.dirname(os.path.abspath(__file__))


@dataclass
class Run:
    """One estimator's run: the checks scikit-learn generates for it, and which of them cannot
    apply ({check name: reason})."""

    estimator: object
    not_applicable: dict
    checks: list = field(init=False)

    def __post_init__(self):
        self.checks = list(estimator_checks_generator(self.estimator))

    def params(self, applicable=True, in_child=False):
        """pytest parameters (estimator, check) of the checks that apply (or cannot apply),
        among those of this process (or of the child process)."""
        name = type(self.estimator).__name__
        return [pytest.param(est, check, id=f"{name}-{_check_id(check)}")
                for est, check in self.checks
                if (_check_name(check) not in self.not_applicable) == applicable
                and (_check_name(check) in IN_A_CHILD) == in_child]


_VARIANTS = [
    (_clone_as(binary_variant(type(e.estimator)), e.estimator), e) for e in ENTRIES if e.binary
]
REAL_RUNS = [Run(e.estimator, {**(BINARY_ONLY if e.binary else {}), **e.not_applicable})
             for e in ENTRIES]
BINARY_RUNS = [Run(v, dict(e.binary_not_applicable)) for v, e in _VARIANTS]


def _outcome(estimator, check):
    """"passed", "failed" or "skipped: <reason>" of one check, its warnings silenced."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            check(estimator)
        except unittest.SkipTest as e:
            return f"skipped: {e}"
        except Exception:
            return "failed"
    return "passed"


def _outcomes(applicable, in_child):
    """{id: outcome} of the checks that apply (or cannot apply) to every estimator."""
    return {p.id: _outcome(*p.values) for run in REAL_RUNS + BINARY_RUNS
            for p in run.params(applicable, in_child)}


@pytest.mark.parametrize("estimator, check", [p for r in REAL_RUNS for p in r.params()])
def test_sklearn_checks(estimator, check):
    check(estimator)


@pytest.mark.parametrize("estimator, check", [p for r in BINARY_RUNS for p in r.params()])
def test_sklearn_checks_on_binary_data(estimator, check):
    check(estimator)


def test_array_api_checks_in_a_child_process():
    """The checks of IN_A_CHILD, in a child process with SCIPY_ARRAY_API=1: each one that
    applies passes, each one that cannot apply fails (none is skipped)."""
    code = ("import json, sys; sys.path.insert(0, sys.argv[1]); import test_estimator_checks as t; "
            "print(json.dumps([t._outcomes(True, True), t._outcomes(False, True)]))")
    proc = subprocess.run([sys.executable, "-c", code, HERE], capture_output=True, text=True,
                          timeout=600, env=dict(os.environ, SCIPY_ARRAY_API="1"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    applies, not_applicable = json.loads(proc.stdout.strip().splitlines()[-1])
    assert {k: v for k, v in applies.items() if v != "passed"} == {}
    assert {k: v for k, v in not_applicable.items() if v != "failed"} == {}


def test_not_applicable_checks_are_listed():
    """Print the checks that are not run, with the reasons (``pytest -s`` or ``-rP`` shows
    them); every listed check is a check of this scikit-learn version, and has a reason."""
    import sklearn
    from sklearn.utils import estimator_checks

    listed = set(BINARY_ONLY).union(*(e.not_applicable for e in ENTRIES),
                                    *(e.binary_not_applicable for e in ENTRIES))
    lines = [f"scikit-learn {sklearn.__version__}"]
    for run in REAL_RUNS + BINARY_RUNS:
        names = {_check_name(c) for _, c in run.checks}
        skipped = {c: r for c, r in run.not_applicable.items() if c in names}
        lines.append(f"{type(run.estimator).__name__}: {len(skipped)} of {len(names)} checks "
                     "not run")
        lines += [f"    {c}: {r}" for c, r in sorted(skipped.items())]
    print("\n" + "\n".join(lines))
    assert all(r for run in REAL_RUNS + BINARY_RUNS for r in run.not_applicable.values())
    unknown = sorted(c for c in listed | IN_A_CHILD
                     if not callable(getattr(estimator_checks, c, None)))
    assert unknown == [], f"scikit-learn {sklearn.__version__} has no such checks: {unknown}"


def test_not_applicable_checks_do_fail():
    """Every check that is not run because it cannot apply does fail on its estimator (a check
    that passes belongs in the run, not on the list)."""
    outcomes = _outcomes(applicable=False, in_child=False)
    assert {k: v for k, v in outcomes.items() if v != "failed"} == {}


def test_binary_variant_maps_only_valid_entries():
    X = np.array([[0.1, 0.3, np.nan], [-1.0, np.inf, 2.6]])
    out = _to_bits(X)
    np.testing.assert_array_equal(out[0, :2], [0.0, 1.0])
    assert np.isnan(out[0, 2]) and out[1, 0] == -1.0 and out[1, 1] == np.inf and out[1, 2] == 0.0
    assert _to_bits(sp.csr_matrix(X)) is not None and sp.issparse(_to_bits(sp.csr_matrix(X)))
