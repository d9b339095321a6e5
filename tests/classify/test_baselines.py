"""Bernoulli-mixture baseline: EM monotonicity, exact marginalisation, classifier sanity."""
import itertools

import numpy as np
import pytest

import scipy.sparse as sp
from sklearn.exceptions import NotFittedError

import mfengine as mf
from mfengine._base import ConvergenceWarning
from mfengine.mixture import BernoulliMixture, MixtureClassifier


def _random_binary(n, d, seed):
    rng = np.random.default_rng(seed)
    # a planted 3-component mixture so that EM has structure to find
    protos = rng.random((3, d))
    z = rng.integers(0, 3, size=n)
    return (rng.random((n, d)) < protos[z]).astype(np.float64)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_em_never_decreases_log_likelihood(seed):
    X = _random_binary(300, 12, seed)
    m = BernoulliMixture(n_components=4, max_iter=40, alpha=0.0, tol=None, random_state=seed).fit(X)
    ll = m.log_likelihood_history_
    assert ll.shape == (41,)
    assert np.all(np.diff(ll) >= -1e-9), np.diff(ll).min()
    assert ll[-1] > ll[0]


@pytest.mark.parametrize("alpha", [0.5, 2.0])
def test_em_never_decreases_penalised_objective(alpha):
    X = _random_binary(200, 10, 5)
    m = BernoulliMixture(n_components=5, max_iter=30, alpha=alpha, tol=None, random_state=1).fit(X)
    assert np.all(np.diff(m.history_) >= -1e-9)


def test_probabilities_sum_to_one_over_all_patterns():
    X = _random_binary(100, 6, 3)
    m = BernoulliMixture(n_components=3, max_iter=20, tol=None, random_state=0).fit(X)
    all_x = np.array(list(itertools.product([0.0, 1.0], repeat=6)))
    assert np.isclose(np.exp(m.score_samples(all_x)).sum(), 1.0, atol=1e-12)


def test_score_samples_missing_equals_brute_force_marginalisation():
    rng = np.random.default_rng(0)
    d = 6
    X = _random_binary(150, d, 4)
    m = BernoulliMixture(n_components=3, max_iter=20, tol=None, random_state=0).fit(X)
    V = (rng.random((8, d)) < 0.5).astype(np.float64)
    miss = rng.random((8, d)) < 0.4
    miss[0] = False  # nothing missing
    miss[1] = True  # everything missing: ln P = 0
    got = m.score_samples(np.where(miss, np.nan, V), missing=miss)
    for i in range(V.shape[0]):
        idx = np.flatnonzero(miss[i])
        completions = np.repeat(V[i][None, :], 2 ** idx.size, axis=0)
        if idx.size:
            completions[:, idx] = np.array(list(itertools.product([0.0, 1.0], repeat=idx.size)))
        brute = np.logaddexp.reduce(m.score_samples(completions))
        assert np.isclose(got[i], brute, rtol=0, atol=1e-10), (i, got[i], brute)
    assert np.isclose(got[1], 0.0, atol=1e-12)


def test_one_dimensional_missing_mask_applies_to_every_row():
    X = _random_binary(80, 5, 7)
    m = BernoulliMixture(n_components=2, random_state=0).fit(X)
    mask = np.array([True, False, False, True, False])
    a = m.score_samples(X, missing=mask)
    b = m.score_samples(X, missing=np.broadcast_to(mask, X.shape).copy())
    np.testing.assert_array_equal(a, b)


def test_mixture_validation_errors():
    m = BernoulliMixture()
    with pytest.raises(NotFittedError):
        m.score_samples(np.zeros((1, 3)))
    with pytest.raises(ValueError, match="binary"):
        m.fit(np.full((4, 3), 0.5))
    with pytest.raises(ValueError, match="NaN"):
        m.fit(np.array([[0.0, np.nan]]))
    with pytest.raises(ValueError, match="n_components"):
        BernoulliMixture(n_components=0).fit(np.zeros((3, 2)))
    with pytest.raises(ValueError, match="n_components"):
        BernoulliMixture(n_components=2**40).fit(np.zeros((3, 2)))
    with pytest.raises(ValueError, match="max_iter"):  # refused at once rather than a hang
        BernoulliMixture(max_iter=2**62, tol=None).fit(np.zeros((3, 2)))
    with pytest.raises(ValueError, match="alpha"):
        BernoulliMixture(alpha=np.nan).fit(np.zeros((3, 2)))
    with pytest.raises(TypeError, match="tol"):
        BernoulliMixture(tol="1e-3").fit(np.zeros((3, 2)))
    m.fit(np.eye(3))
    with pytest.raises(ValueError, match="X has 4 features, but BernoulliMixture is expecting 3"):
        m.score_samples(np.zeros((2, 4)))
    with pytest.raises(ValueError, match="not marked missing"):
        m.score_samples(np.array([[np.nan, 0.0, 1.0]]), missing=np.array([[False, True, False]]))


def test_sample_shape_and_values():
    m = BernoulliMixture(n_components=2, random_state=0).fit(_random_binary(50, 4, 0))
    S = m.sample(20, random_state=1)
    assert S.shape == (20, 4) and set(np.unique(S)) <= {0.0, 1.0}


@pytest.fixture(scope="module")
def digits():
    pytest.importorskip("sklearn")
    from mfengine.datasets import load_binary_digits

    return load_binary_digits()


def test_load_binary_digits(digits):
    X_train, X_test, y_train, y_test = digits
    assert X_train.shape == (1257, 64) and X_test.shape == (540, 64)
    assert X_train.dtype == np.float64 and set(np.unique(X_train)) == {0.0, 1.0}
    assert set(np.unique(y_train)) == set(range(10))
    # stratified: every class has about 30% of its images in the test split
    counts = np.bincount(y_test) / (np.bincount(y_test) + np.bincount(y_train))
    assert np.all(np.abs(counts - 0.3) < 0.02)
    # fixed split
    again = __import__("mfengine.datasets", fromlist=["x"]).load_binary_digits()
    np.testing.assert_array_equal(again[0], X_train)


def test_mixture_classifier_on_digits(digits):
    X_train, X_test, y_train, y_test = digits
    clf = MixtureClassifier(n_components=5, max_iter=30, tol=None, random_state=0).fit(X_train, y_train)
    assert clf.score(X_test, y_test) > 0.85  # chance is 0.1
    P = clf.predict_proba(X_test[:20])
    assert P.shape == (20, 10)
    np.testing.assert_allclose(P.sum(axis=1), 1.0, atol=1e-12)
    np.testing.assert_array_equal(clf.classes_[P.argmax(axis=1)], clf.predict(X_test[:20]))
    rng = np.random.default_rng(0)
    miss = rng.random(X_test.shape) < 0.3
    assert clf.score(np.where(miss, np.nan, X_test), y_test, missing=miss) > 0.75
    ll = clf.class_log_likelihoods(X_test[:5])
    np.testing.assert_allclose(ll[:, 3], clf.mixtures_[3].score_samples(X_test[:5]))


def test_mixture_classifier_labels_and_errors():
    X = _random_binary(60, 5, 1)
    y = np.array(["a", "b", "c"] * 20)
    clf = MixtureClassifier(n_components=2, random_state=0).fit(X, y)
    assert list(clf.classes_) == ["a", "b", "c"]
    assert set(clf.predict(X)) <= {"a", "b", "c"}
    with pytest.raises(ValueError, match="not seen during fit"):
        clf.score(X[:3], ["a", "b", "z"])
    with pytest.raises(ValueError, match="inconsistent numbers of samples"):
        MixtureClassifier().fit(X, y[:-1])
    with pytest.raises(ValueError, match="two classes"):
        MixtureClassifier().fit(X, np.zeros(60))
    with pytest.raises(NotFittedError):
        MixtureClassifier().predict(X)


def test_get_params_and_clone():
    sk_base = pytest.importorskip("sklearn.base")
    clf = MixtureClassifier(n_components=7, alpha=0.5)
    assert clf.get_params()["n_components"] == 7
    c2 = sk_base.clone(clf)
    assert c2.get_params() == clf.get_params() and c2 is not clf
    clf.set_params(max_iter=3)
    assert clf.max_iter == 3
    with pytest.raises(ValueError, match="(?i)invalid parameter"):
        clf.set_params(bogus=1)


def test_scikit_learn_estimators():
    from sklearn.base import is_classifier

    assert is_classifier(MixtureClassifier())
    assert BernoulliMixture().__sklearn_tags__().estimator_type == "density_estimator"
    for est in (BernoulliMixture(), MixtureClassifier()):
        assert est.random_state is None  # the protocol's default
        tags = est.__sklearn_tags__().input_tags
        assert tags.positive_only and not tags.allow_nan and not tags.sparse


def test_refuses_sparse_continuous_targets_and_empty_input():
    X = _random_binary(40, 5, 2)
    y = np.arange(40) % 2
    for est, args in ((BernoulliMixture(n_components=2), ()), (MixtureClassifier(n_components=2), (y,))):
        with pytest.raises(TypeError, match="Sparse data was passed for X"):
            est.fit(sp.csr_matrix(X), *args)
        with pytest.raises(ValueError, match="0 sample"):
            est.fit(X[:0], *[a[:0] for a in args])
    with pytest.raises(ValueError, match="Unknown label type: continuous"):
        MixtureClassifier(n_components=2).fit(X, np.linspace(0.0, 1.0, 40))
    with pytest.raises(ValueError, match="one class"):
        MixtureClassifier(n_components=2).fit(X, np.zeros(40))
    clf = MixtureClassifier(n_components=2, random_state=0).fit(X, y)
    with pytest.raises(ValueError, match="0 sample"):
        clf.score(X[:0], y[:0])
    with pytest.raises(ValueError, match="Negative values in data"):
        clf.predict(-X)


def test_parameters_assigned_after_fit_are_checked():
    X = _random_binary(40, 5, 2)
    y = np.arange(40) % 2
    clf = MixtureClassifier(n_components=2, random_state=0).fit(X, y)
    for bad in (np.array([np.nan, 0.0]), np.array([np.inf, -1.0]), np.full(2, -np.inf), np.zeros(3)):
        clf.class_log_prior_ = bad
        with pytest.raises(ValueError, match="class_log_prior_"):
            clf.predict_proba(X)
    clf.class_log_prior_ = np.array([-1e300, -5.0])  # extreme but valid: finite answers
    assert np.all(np.isfinite(clf.predict_proba(X)))
    m = BernoulliMixture(n_components=2, random_state=0).fit(X)
    good = m.means_.copy()
    for bad in (np.where(good > 0.5, np.nan, good), np.where(good > 0.5, 1.0, good), good[:, :3]):
        m.means_ = bad
        with pytest.raises(ValueError, match="means_"):
            m.score_samples(X)
    m.means_ = good
    m.weights_ = np.array([0.7, 0.7])
    with pytest.raises(ValueError, match="weights_"):
        m.sample(3)


def test_convergence_warning_and_fixed_budget():
    X = _random_binary(200, 10, 5)
    with pytest.warns(ConvergenceWarning, match="max_iter=1"):
        m = BernoulliMixture(n_components=4, max_iter=1, tol=1e-12, random_state=0).fit(X)
    assert not m.converged_ and m.n_iter_ == 1
    with pytest.warns(ConvergenceWarning, match="MixtureClassifier.fit"):
        MixtureClassifier(n_components=4, max_iter=1, tol=1e-12, random_state=0).fit(X, np.arange(200) % 2)
    m = BernoulliMixture(n_components=4, max_iter=500, tol=1e-3, random_state=0).fit(X)
    assert m.converged_ and m.n_iter_ < 500 and m.history_[-1] - m.history_[-2] < 1e-3
    m = BernoulliMixture(n_components=4, max_iter=7, tol=None, random_state=0).fit(X)
    assert m.n_iter_ == 7 and m.history_.shape == (8,) and not m.converged_


def test_save_load_round_trip(tmp_path):
    X = _random_binary(60, 6, 3)
    y = np.array([0, 1, 2] * 20)
    clf = MixtureClassifier(n_components=2, random_state=0).fit(X, y)
    clf2 = mf._base.load(clf.save(tmp_path / "mix"))
    assert clf2.get_params() == clf.get_params()
    np.testing.assert_array_equal(clf2.predict_log_proba(X), clf.predict_log_proba(X))
    m = clf.mixtures_[1]
    np.testing.assert_array_equal(m.score_samples(X), clf.class_log_likelihoods(X)[:, 1])
    m2 = mf._base.load(m.save(tmp_path / "one"))
    np.testing.assert_array_equal(m2.score_samples(X), m.score_samples(X))
