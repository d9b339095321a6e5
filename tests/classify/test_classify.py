"""GenerativeClassifier: one mean-field sigmoid belief net per class."""
import numpy as np
import pytest

import mfengine as mf
import scipy.sparse as sp
from sklearn.exceptions import NotFittedError

from mfengine._base import ConvergenceWarning, load
from mfengine.classify import GenerativeClassifier, default_schedule

QUICK = dict(hidden=(4, 12), max_iter=4, progress=False)


@pytest.fixture(scope="module")
def digits():
    pytest.importorskip("sklearn")
    from mfengine.datasets import load_binary_digits

    return load_binary_digits()


@pytest.fixture(scope="module")
def fitted(digits):
    X_train, _, y_train, _ = digits
    return GenerativeClassifier(random_state=0, **QUICK).fit(X_train, y_train)


def test_lazy_export():
    assert mf.GenerativeClassifier is GenerativeClassifier


def test_fitted_attributes(fitted, digits):
    X_train = digits[0]
    assert list(fitted.classes_) == list(range(10))
    assert len(fitted.nets_) == 10
    assert all(list(net.sizes) == [4, 12, 64] for net in fitted.nets_)
    assert len(fitted.history_) == 10 and all(h.shape == (4,) for h in fitted.history_)
    assert np.all(np.isfinite(fitted.history_))
    np.testing.assert_array_equal(fitted.n_iter_, np.full(10, 4))
    assert [w.shape for w in fitted.net_weights_[3]] == [(12, 4), (64, 12)]
    assert [b.shape for b in fitted.net_biases_[3]] == [(4,), (12,), (64,)]
    np.testing.assert_allclose(np.exp(fitted.class_log_prior_).sum(), 1.0)
    assert fitted.n_features_in_ == X_train.shape[1]
    # the bound rises during training (first epoch vs last), for every class
    assert all(h[-1] > h[0] for h in fitted.history_)


def test_shapes_and_probabilities(fitted, digits):
    X_test = digits[1][:50]
    B = fitted.class_bounds(X_test)
    assert B.shape == (50, 10) and np.all(np.isfinite(B)) and np.all(B < 0)
    P = fitted.predict_proba(X_test)
    assert P.shape == (50, 10)
    np.testing.assert_allclose(P.sum(axis=1), 1.0, atol=1e-12)
    assert np.all(P >= 0)
    pred = fitted.predict(X_test)
    assert pred.shape == (50,)
    np.testing.assert_array_equal(pred, fitted.classes_[np.argmax(B + fitted.class_log_prior_, axis=1)])
    np.testing.assert_array_equal(pred, fitted.classes_[P.argmax(axis=1)])
    np.testing.assert_allclose(np.exp(fitted.predict_log_proba(X_test)), P)


def test_class_bounds_match_the_nets(fitted, digits):
    X = digits[1][:10]
    B = fitted.class_bounds(X)
    net = fitted.nets_[2]
    assert net.infer_tol == fitted.infer_tol and net.infer_max_iter == fitted.infer_max_iter
    np.testing.assert_array_equal(B[:, 2], net.score_samples(X))
    np.testing.assert_array_equal(B[:, 2], mf.infer(net, X).bound)
    # nets_ are copies: editing one leaves the classifier alone
    net.weights_[0][...] = 0.0
    np.testing.assert_array_equal(fitted.class_bounds(X), B)


def test_beats_chance_by_a_wide_margin(fitted, digits):
    _, X_test, _, y_test = digits
    assert fitted.score(X_test, y_test) > 0.8  # chance is 0.1


def test_missing_pixels(fitted, digits):
    _, X_test, _, y_test = digits
    rng = np.random.default_rng(0)
    miss = rng.random(X_test.shape) < 0.3
    Xm = np.where(miss, np.nan, X_test)  # NaN allowed under the mask
    acc = fitted.score(Xm, y_test, missing=miss)
    assert acc > 0.7
    # values under the mask do not matter
    np.testing.assert_array_equal(
        fitted.class_bounds(X_test[:20], missing=miss[:20]),
        fitted.class_bounds(np.where(miss[:20], 1.0, X_test[:20]), missing=miss[:20]),
    )
    # a 1-D mask applies to every pattern
    mask = np.zeros(64, dtype=bool)
    mask[:16] = True
    B1 = fitted.class_bounds(X_test[:5], missing=mask)
    B2 = fitted.class_bounds(X_test[:5], missing=np.tile(mask, (5, 1)))
    np.testing.assert_allclose(B1, B2)
    # marginalising pixels raises the likelihood of what is left
    assert np.all(B1 > fitted.class_bounds(X_test[:5]) - 1e-6)


def test_reproducible(digits):
    X_train, X_test, y_train, _ = digits
    sub = np.concatenate([np.flatnonzero(y_train == c)[:15] for c in range(3)])
    a = GenerativeClassifier(hidden=(3, 6), max_iter=2, random_state=5).fit(X_train[sub], y_train[sub])
    b = GenerativeClassifier(hidden=(3, 6), max_iter=2, random_state=5).fit(X_train[sub], y_train[sub])
    np.testing.assert_array_equal(a.history_, b.history_)
    np.testing.assert_array_equal(a.predict(X_test[:30]), b.predict(X_test[:30]))


def test_string_labels_and_progress():
    rng = np.random.default_rng(0)
    X = (rng.random((30, 9)) < 0.5).astype(float)
    y = np.array(["cat", "dog"] * 15)
    clf = GenerativeClassifier(hidden=(2,), max_iter=2, learning_rate=[0.05, 0.01],
                               progress=True).fit(X, y)
    assert list(clf.classes_) == ["cat", "dog"]
    assert set(clf.predict(X)) <= {"cat", "dog"}
    assert np.shape(clf.history_) == (2, 2)


def test_input_validation():
    rng = np.random.default_rng(0)
    X = (rng.random((20, 6)) < 0.5).astype(float)
    y = np.arange(20) % 2
    small = dict(hidden=(2,), max_iter=1, progress=False)
    with pytest.raises(ValueError, match="binary"):
        GenerativeClassifier(**small).fit(X * 0.5, y)
    with pytest.raises(ValueError, match="NaN"):
        GenerativeClassifier(**small).fit(np.where(X > 0, np.nan, 0.0), y)
    with pytest.raises(ValueError, match="inconsistent numbers of samples"):
        GenerativeClassifier(**small).fit(X, y[:-1])
    with pytest.raises(ValueError, match="1d array"):
        GenerativeClassifier(**small).fit(X, np.zeros((20, 2)))
    with pytest.raises(ValueError, match="2D array"):
        GenerativeClassifier(**small).fit(X[0], y[:1])
    with pytest.raises(ValueError, match="one class only"):
        GenerativeClassifier(**small).fit(X, np.zeros(20))
    with pytest.raises(ValueError, match="hidden"):
        GenerativeClassifier(hidden=(0, 3), max_iter=1).fit(X, y)
    with pytest.raises(ValueError, match="max_iter"):
        GenerativeClassifier(hidden=(2,), max_iter=0).fit(X, y)
    with pytest.raises(ValueError, match="learning_rate has 3"):
        GenerativeClassifier(hidden=(2,), max_iter=2, learning_rate=[0.1, 0.1, 0.1]).fit(X, y)
    with pytest.raises(TypeError, match="learning_rate"):
        GenerativeClassifier(hidden=(2,), max_iter=3, learning_rate="0.1").fit(X, y)
    with pytest.raises(ValueError, match="batch_size"):
        GenerativeClassifier(hidden=(2,), max_iter=1, batch_size=0).fit(X, y)
    with pytest.raises(ValueError, match="infer_tol"):
        GenerativeClassifier(hidden=(2,), max_iter=1, infer_tol=-1.0).fit(X, y)
    with pytest.raises(ValueError, match="infer_max_iter"):
        GenerativeClassifier(hidden=(2,), max_iter=1, infer_max_iter=0).fit(X, y)
    with pytest.raises(TypeError, match="warm_start"):
        GenerativeClassifier(hidden=(2,), max_iter=1, warm_start="yes").fit(X, y)
    for name, value in (("max_iter", 2**62), ("batch_size", 2**40), ("infer_max_iter", 2**31)):
        with pytest.raises(ValueError, match=name):  # refused at once: no hang, no MemoryError
            GenerativeClassifier(hidden=(2,), **{"max_iter": 1, name: value}).fit(X, y)
    with pytest.raises(TypeError, match="max_iter"):
        GenerativeClassifier(hidden=(2,), max_iter=True).fit(X, y)
    with pytest.raises(NotFittedError):
        GenerativeClassifier().predict(X)
    with pytest.raises(ValueError):  # NotFittedError is a ValueError, like scikit-learn's
        GenerativeClassifier().predict_proba(X)
    clf = GenerativeClassifier(**small).fit(X, y)
    with pytest.raises(ValueError, match="X has 5 features, but GenerativeClassifier is expecting 6"):
        clf.predict(np.zeros((3, 5)))
    with pytest.raises(ValueError, match="not seen during fit"):
        clf.score(X[:3], [0, 1, 7])
    with pytest.raises(ValueError, match="missing"):
        clf.predict(X, missing=np.zeros((20, 5), dtype=bool))
    with pytest.raises(ValueError, match="not marked missing"):
        clf.predict(np.where(X > 0, np.nan, 0.0), missing=np.zeros_like(X, dtype=bool))


def test_get_params_set_params_clone():
    clf = GenerativeClassifier(hidden=(3, 5), max_iter=7, random_state=3)
    params = clf.get_params()
    assert params["hidden"] == (3, 5) and params["max_iter"] == 7 and params["random_state"] == 3
    assert set(params) == {"hidden", "max_iter", "learning_rate", "batch_size", "weight_scale",
                           "tol", "infer_tol", "infer_max_iter", "warm_start", "n_threads",
                           "random_state", "progress"}
    clf.set_params(max_iter=2)
    assert clf.max_iter == 2
    with pytest.raises(ValueError, match="(?i)invalid parameter"):
        clf.set_params(nope=1)
    sk_base = pytest.importorskip("sklearn.base")
    c2 = sk_base.clone(clf)
    assert c2.get_params() == clf.get_params()
    assert not hasattr(c2, "nets_")


def test_default_schedule():
    assert default_schedule(4) == [0.1, 0.1, 0.02, 0.02]
    assert default_schedule(3) == [0.1, 0.1, 0.02]
    assert len(default_schedule(GenerativeClassifier().max_iter)) == GenerativeClassifier().max_iter


def test_works_inside_scikit_learn_model_selection(digits):
    pytest.importorskip("sklearn")
    from sklearn.base import is_classifier
    from sklearn.model_selection import cross_val_score

    X_train, _, y_train, _ = digits
    clf = GenerativeClassifier(hidden=(3, 8), max_iter=2, progress=False)
    assert is_classifier(clf)
    scores = cross_val_score(clf, X_train[:300], y_train[:300], cv=2)
    assert scores.shape == (2,) and np.all(scores > 0.5)


# slow: accuracy on a real data set; the small-data tests above check the method
@pytest.mark.slow
def test_default_configuration_on_digits(digits):
    """The tuned defaults (chosen by CV on the training split) keep a low test error."""
    X_train, X_test, y_train, y_test = digits
    clf = GenerativeClassifier(random_state=0).fit(X_train, y_train)
    assert np.shape(clf.history_) == (10, clf.max_iter)
    assert 1.0 - clf.score(X_test, y_test) < 0.07  # 4.3% when the defaults were chosen


def test_scikit_learn_protocol():
    clf = GenerativeClassifier()
    assert clf.random_state is None  # the protocol's default
    tags = clf.__sklearn_tags__()
    assert tags.estimator_type == "classifier"
    assert tags.input_tags.positive_only and not tags.input_tags.allow_nan
    assert not tags.input_tags.sparse


def test_refuses_sparse_continuous_targets_and_empty_input():
    rng = np.random.default_rng(1)
    X = (rng.random((20, 6)) < 0.5).astype(float)
    y = np.arange(20) % 2
    small = dict(hidden=(2,), max_iter=1, progress=False)
    with pytest.raises(TypeError, match="Sparse data was passed for X"):
        GenerativeClassifier(**small).fit(sp.csr_matrix(X), y)
    with pytest.raises(ValueError, match="Unknown label type: continuous"):
        GenerativeClassifier(**small).fit(X, np.linspace(0.0, 1.0, 20))
    clf = GenerativeClassifier(random_state=0, **small).fit(X, y)
    with pytest.raises(TypeError, match="Sparse data was passed for X"):
        clf.predict(sp.csr_matrix(X))
    with pytest.raises(ValueError, match="0 sample"):  # not NaN
        clf.score(X[:0], y[:0])


def test_class_log_prior_assigned_after_fit_is_checked():
    rng = np.random.default_rng(2)
    X = (rng.random((20, 6)) < 0.5).astype(float)
    clf = GenerativeClassifier(hidden=(2,), max_iter=1, random_state=0, progress=False)
    clf.fit(X, np.arange(20) % 2)
    for bad, msg in ((np.array([np.nan, 0.0]), "NaN"), (np.array([np.inf, 0.0]), "inf"),
                     (np.full(2, -np.inf), "every class"), (np.zeros(3), "shape")):
        clf.class_log_prior_ = bad
        for method in (clf.predict, clf.predict_proba, clf.predict_log_proba):
            with pytest.raises(ValueError, match=msg):
                method(X)
    clf.class_log_prior_ = np.array([-1e300, -3.0])  # extreme but valid
    P = clf.predict_proba(X)
    assert np.all(np.isfinite(P)) and np.allclose(P[:, 1], 1.0)


def test_extreme_weight_scale_is_a_clear_error():
    rng = np.random.default_rng(3)
    X = (rng.random((20, 6)) < 0.5).astype(float)
    with pytest.raises(ValueError, match="weight_scale"):
        GenerativeClassifier(hidden=(2,), max_iter=1, weight_scale=1e300, progress=False,
                             random_state=0).fit(X, np.arange(20) % 2)
    with pytest.raises(ValueError, match="weight_scale"):
        GenerativeClassifier(hidden=(2,), max_iter=1, weight_scale=np.nan).fit(X, np.arange(20) % 2)


def test_save_load_round_trip(tmp_path, fitted, digits):
    X = digits[1][:40]
    clf = load(fitted.save(tmp_path / "clf"))
    assert clf.get_params() == fitted.get_params()
    np.testing.assert_array_equal(clf.class_bounds(X), fitted.class_bounds(X))
    np.testing.assert_array_equal(clf.predict(X), fitted.predict(X))


def _three_classes(n=90, d=12, seed=0):
    rng = np.random.default_rng(seed)
    y = np.repeat([0, 1, 2], n // 3)
    X = (rng.random((n, d)) < 0.3).astype(float)
    X[y == 1, :3] = 1.0
    X[y == 2, -3:] = 1.0
    return X, y


def test_tol_stops_each_net_early():
    X, y = _three_classes()
    clf = GenerativeClassifier(hidden=(2,), max_iter=50, tol=0.5, learning_rate=0.05,
                               random_state=0, progress=False).fit(X, y)
    assert np.all(clf.n_iter_ < 50)
    for h, n in zip(clf.history_, clf.n_iter_):
        assert h.shape == (n,) and abs(h[-1] - h[-2]) < 0.5
    with pytest.warns(ConvergenceWarning, match="tol"):
        GenerativeClassifier(hidden=(2,), max_iter=2, tol=1e-12, random_state=0,
                             progress=False).fit(X, y)


def test_warm_start_continues_training():
    X, y = _three_classes()
    params = dict(hidden=(2,), learning_rate=0.05, random_state=0, progress=False)
    cold = GenerativeClassifier(max_iter=2, **params).fit(X, y)
    warm = GenerativeClassifier(max_iter=2, warm_start=True, **params).fit(X, y)
    np.testing.assert_array_equal(warm.net_weights_[0][0], cold.net_weights_[0][0])
    before = [w.copy() for w in warm.net_weights_[1]]
    warm.fit(X, y)  # two more epochs from where it stopped
    assert not np.array_equal(warm.net_weights_[1][0], before[0])
    assert all(h2[0] > h1[0] - 1e-9 for h1, h2 in zip(cold.history_, warm.history_))
    again = GenerativeClassifier(max_iter=2, **params).fit(X, y)  # cold: the same as before
    np.testing.assert_array_equal(again.net_weights_[1][0], cold.net_weights_[1][0])
    with pytest.raises(ValueError, match="warm_start"):
        warm.fit(X[y < 2], y[y < 2])
    assert list(warm.classes_) == [0, 1, 2] and warm.n_features_in_ == 12


def test_one_convergence_warning_for_all_classes():
    X, y = _three_classes()
    clf = GenerativeClassifier(hidden=(4, 6), max_iter=2, random_state=0, progress=False).fit(X, y)
    clf.set_params(infer_max_iter=1, infer_tol=1e-12)
    with pytest.warns(ConvergenceWarning, match="class_bounds: .* of 270 solves") as rec:
        B = clf.class_bounds(X)
    assert len(rec) == 1 and np.all(np.isfinite(B))


def test_net_parameters_assigned_after_fit_are_checked():
    X, y = _three_classes()
    clf = GenerativeClassifier(hidden=(2,), max_iter=1, random_state=0, progress=False).fit(X, y)
    clf.net_weights_[1][0] = np.full((12, 2), np.nan)
    with pytest.raises(ValueError, match="weights"):
        clf.predict(X)
    clf.net_weights_[1][0] = np.zeros((12, 3))
    with pytest.raises(ValueError, match="weights"):
        clf.predict(X)
    clf.net_weights_ = clf.net_weights_[:2]
    with pytest.raises(ValueError, match="net_weights_"):
        clf.predict(X)


def test_infinity_under_the_missing_mask_is_refused_as_by_the_nets():
    """A missing entry may hold NaN or any finite value, for the classifier as for its nets."""
    rng = np.random.default_rng(0)
    Xc = (rng.random((24, 6)) < 0.5).astype(float)
    y = np.repeat([0, 1], 12)
    clf = GenerativeClassifier(hidden=(2,), max_iter=1, progress=False, random_state=0).fit(Xc, y)
    miss = np.zeros(Xc.shape, bool)
    miss[:, 0] = True
    with pytest.raises(ValueError, match="X contains infinite values"):
        clf.predict(np.where(miss, np.inf, Xc), missing=miss)
    with pytest.raises(ValueError, match="X contains infinite values"):
        clf.nets_[0].score_samples(np.where(miss, np.inf, Xc), miss)
    for fill in (np.nan, 7.0):
        np.testing.assert_array_equal(clf.predict(np.where(miss, fill, Xc), missing=miss),
                                      clf.predict(Xc, missing=miss))
