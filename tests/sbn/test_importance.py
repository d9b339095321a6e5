"""Importance-sampled ln P(x) (``log_likelihood``, ``score_samples(method="importance")``) of
the sigmoid and noisy-OR belief nets, checked against exact enumeration.

Calibration: on 200 small random nets per family and activation, the estimate lies within 3
of its standard errors of the exact ln P(x) in at least 95% of the patterns; the error shrinks
as the number of samples grows; the answer does not depend on the thread count."""
import warnings

import numpy as np
import pytest

import mfengine as mf

N_NETS = 200


def random_dag(rng, activation, n_units=9, n_visible=4, scale=2.0):
    W = np.tril(rng.normal(0.0, scale, (n_units, n_units)), -1)
    W *= rng.random(W.shape) < 0.7
    h = rng.normal(0.0, 1.0, n_units)
    if activation == "noisy_or":
        W, h = np.abs(W), 0.5 * np.abs(h) + 0.05
    visible = np.zeros(n_units, dtype=bool)
    visible[-n_visible:] = True
    return mf.BeliefNet(W, h, visible, activation, progress=False)


def z_scores(est, exact):
    return (np.asarray(est.estimate) - exact) / np.asarray(est.stderr)


def assert_calibrated(z, what):
    share = float(np.mean(np.abs(z) < 3.0))
    assert share >= 0.95, f"{what}: only {share:.3f} of the estimates lie within 3 SE"
    # and the standard errors are not grossly inflated: most errors use a good part of them
    assert np.mean(np.abs(z) < 0.5) < 0.7, f"{what}: standard errors too large"


@pytest.mark.parametrize("activation", ["sigmoid", "noisy_or"])
def test_calibrated_on_random_dags(activation):
    rng = np.random.default_rng(1 if activation == "sigmoid" else 2)
    z = []
    for k in range(N_NETS):
        net = random_dag(rng, activation)
        X = net.sample(3, random_state=k)
        est = net.log_likelihood(X, n_samples=400, random_state=k)
        assert est.estimate.shape == est.stderr.shape == est.ess.shape == est.bound.shape == (3,)
        assert np.all((est.ess > 1.0) & (est.ess <= 400 + 1e-9))
        exact = net.exact_log_likelihood(X)
        assert np.all(est.bound <= exact + 1e-9)     # sjj: a strict lower bound
        z.append(z_scores(est, exact))
    assert_calibrated(np.concatenate(z), f"BeliefNet({activation!r})")


@pytest.mark.parametrize("method", ["gaussian", "sjj"])
def test_calibrated_on_random_layered_nets(method):
    z = []
    for k in range(N_NETS):
        net = mf.SigmoidBeliefNet([2, 4, 6], weight_scale=3.0, method=method, random_state=k,
                                  progress=False)
        X = net.sample(3, random_state=k)
        est = net.log_likelihood(X, n_samples=400, random_state=k)
        z.append(z_scores(est, net.exact_log_likelihood(X)))
    assert_calibrated(np.concatenate(z), f"SigmoidBeliefNet(method={method!r})")


@pytest.mark.parametrize("activation", ["sigmoid", "noisy_or"])
def test_calibrated_on_a_batch(activation):
    rng = np.random.default_rng(3)
    nets = [random_dag(rng, activation) for _ in range(N_NETS)]
    batch = mf.BeliefNetBatch.from_nets(nets, progress=False)
    X = np.stack([net.sample(2, random_state=k) for k, net in enumerate(nets)])
    est = batch.log_likelihood(X, n_samples=400, random_state=0)
    assert est.estimate.shape == (N_NETS, 2)
    assert_calibrated(z_scores(est, batch.exact_log_likelihood(X)).ravel(),
                      f"BeliefNetBatch({activation!r})")
    one = batch.log_likelihood(X[:, 0], n_samples=50, random_state=0)
    assert one.estimate.shape == (N_NETS,)


def test_error_shrinks_with_the_number_of_samples():
    rng = np.random.default_rng(4)
    nets = [random_dag(rng, "sigmoid", n_units=12, n_visible=6, scale=3.0) for _ in range(30)]
    data = [(net, net.sample(4, random_state=k)) for k, net in enumerate(nets)]
    exact = [net.exact_log_likelihood(X) for net, X in data]
    rmse, se = [], []
    for K in (30, 300, 3000):
        err, s = [], []
        for (net, X), ex in zip(data, exact):
            est = net.log_likelihood(X, n_samples=K, random_state=7)
            err.append(est.estimate - ex)
            s.append(est.stderr)
        rmse.append(float(np.sqrt(np.mean(np.concatenate(err) ** 2))))
        se.append(float(np.mean(np.concatenate(s))))
    assert rmse[0] > rmse[1] > rmse[2], rmse
    assert rmse[2] < 0.4 * rmse[0], rmse
    # the standard error falls like 1 / sqrt(K): a factor ~10 over a factor 100 in K
    assert 4.0 < se[0] / se[2] < 25.0, se


def test_same_answer_for_any_thread_count_and_seed_reproducible():
    net = mf.SigmoidBeliefNet([4, 8, 16], weight_scale=2.0, random_state=0, progress=False)
    X = net.sample(64, random_state=1)
    a = net.log_likelihood(X, n_samples=200, random_state=5, n_threads=1)
    b = net.log_likelihood(X, n_samples=200, random_state=5, n_threads=2)
    c = net.log_likelihood(X, n_samples=200, random_state=5, n_threads=3)
    for other in (b, c):
        np.testing.assert_array_equal(a.estimate, other.estimate)
        np.testing.assert_array_equal(a.stderr, other.stderr)
        np.testing.assert_array_equal(a.ess, other.ess)
    d = net.log_likelihood(X, n_samples=200, random_state=6)
    assert not np.array_equal(a.estimate, d.estimate)
    # a pattern's stream depends on its index, not on the other patterns' values
    X2 = X.copy()
    X2[1:] = 1.0 - X2[1:]
    e = net.log_likelihood(X2, n_samples=200, random_state=5)
    assert e.estimate[0] == a.estimate[0]


def test_score_samples_method_importance():
    W = np.tril(np.random.default_rng(0).uniform(0, 1, (7, 7)), -1)
    net = mf.BeliefNet(W, np.full(7, 0.2), visible=[4, 5, 6], activation="noisy_or",
                       progress=False)
    X = net.sample(10, random_state=0)
    est = net.log_likelihood(X, n_samples=300, random_state=3)
    np.testing.assert_array_equal(
        net.score_samples(X, method="importance", n_samples=300, random_state=3), est.estimate)
    np.testing.assert_array_equal(net.score_samples(X), est.bound)
    np.testing.assert_array_equal(net.score_samples(X), net.infer(X).bound)
    assert est.method == "importance" and est.n_samples == 300
    sbn = mf.SigmoidBeliefNet([2, 3, 5], random_state=0, progress=False)
    V = sbn.sample(6, random_state=0)
    np.testing.assert_array_equal(
        sbn.score_samples(V, method="importance", n_samples=50, random_state=1),
        sbn.log_likelihood(V, n_samples=50, random_state=1).estimate)
    np.testing.assert_array_equal(sbn.score_samples(V, method="sjj"),
                                  sbn.infer(V, method="sjj").bound)
    np.testing.assert_array_equal(sbn.score_samples(V), sbn.infer(V).bound)


@pytest.mark.filterwarnings("ignore::mfengine.ConvergenceWarning")
def test_missing_entries_are_marginalised():
    rng = np.random.default_rng(5)
    z = []
    for k in range(40):
        net = random_dag(rng, "sigmoid", n_units=10, n_visible=5)
        X = net.sample(5, random_state=k)
        miss = rng.random(X.shape) < 0.3
        Xn = np.where(miss, np.nan, X)
        est = net.log_likelihood(Xn, n_samples=400, random_state=k, missing=miss)
        z.append(z_scores(est, net.exact_log_likelihood(X, missing=miss)))
    for k in range(40):
        sbn = mf.SigmoidBeliefNet([2, 4, 6], weight_scale=2.0, random_state=k, progress=False)
        X = sbn.sample(5, random_state=k)
        miss = rng.random(X.shape) < 0.3
        est = sbn.log_likelihood(X, n_samples=400, random_state=k, missing=miss)
        z.append(z_scores(est, sbn.exact_log_likelihood(X, missing=miss)))
    z = np.concatenate(z)
    assert np.mean(np.abs(z) < 3.0) >= 0.95
    # everything missing: ln P = 0
    net = random_dag(rng, "noisy_or")
    allmiss = np.ones((2, 4), dtype=bool)
    est = net.log_likelihood(np.zeros((2, 4)), n_samples=50, random_state=0, missing=allmiss)
    np.testing.assert_allclose(est.estimate, 0.0, atol=1e-12)


def test_impossible_noisy_or_pattern_is_minus_inf_with_a_warning():
    # unit 1 has bias 0 (the Plefka methods allow it): it fires only through unit 0
    W = np.zeros((2, 2))
    W[1, 0] = 1.0
    X = np.array([[1.0], [0.0]])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", mf.ConvergenceWarning)
        net = mf.BeliefNet(W, np.array([0.5, 0.0]), visible=[1], activation="noisy_or",
                           method="plefka11", progress=False)
        est = net.log_likelihood(X, n_samples=2000, random_state=0)
        assert np.all(np.abs(est.estimate - net.exact_log_likelihood(X)) < 4 * est.stderr)
        # without the edge, x = 1 has probability 0 and x = 0 probability 1
        net = mf.BeliefNet(np.zeros((2, 2)), np.array([0.5, 0.0]), visible=[1],
                           activation="noisy_or", method="plefka11", progress=False)
        with pytest.warns(RuntimeWarning, match="every importance weight is 0 for 1 of 2"):
            est = net.log_likelihood(X, n_samples=10, random_state=0)
    assert est.estimate[0] == -np.inf and est.stderr[0] == np.inf and est.ess[0] == 0.0
    assert est.estimate[1] == 0.0 and est.stderr[1] == 0.0 and est.ess[1] == 10.0


@pytest.mark.parametrize("kwargs, name", [
    (dict(n_samples=1), "n_samples"),
    (dict(n_samples=0), "n_samples"),
    (dict(n_samples=2.5), "n_samples"),
    (dict(n_samples=True), "n_samples"),
    (dict(n_samples=2**40), "n_samples"),
    (dict(method="ais2"), "method"),
    (dict(method="ais", n_steps=0), "n_steps"),
    (dict(method="ais", n_steps=1.5), "n_steps"),
    (dict(method="sjj"), "method"),
    (dict(method=None), "method"),
    (dict(random_state="seed"), "random_state"),
    (dict(random_state=-1), "random_state"),
    (dict(n_threads=0), "n_threads"),
    (dict(progress="yes"), "progress"),
])
def test_bad_arguments_are_named(kwargs, name):
    net = mf.SigmoidBeliefNet([2, 3, 5], random_state=0, progress=False)
    dag = net.to_dag()
    X = net.sample(3, random_state=0)
    for model in (net, dag):
        with pytest.raises((ValueError, TypeError), match=name):
            model.log_likelihood(X, **kwargs)
    with pytest.raises(ValueError, match="X"):
        net.log_likelihood(X[:, :4])
    with pytest.raises(ValueError, match="X"):
        dag.log_likelihood(X + 0.5)


def test_estimate_above_the_strict_bound_on_a_digit_sized_net():
    """64 visible units, 32 hidden: too large for the default enumeration; the estimate sits
    above the strict (sjj) bound, its bias against ln P being far smaller than the gap."""
    net = mf.SigmoidBeliefNet([8, 24, 64], weight_scale=2.0, random_state=0, progress=False)
    X = net.sample(20, random_state=0)
    est = net.log_likelihood(X, n_samples=500, random_state=0)
    sjj = net.score_samples(X, method="sjj")
    assert np.all(np.isfinite(est.estimate)) and np.all(est.stderr > 0)
    assert np.mean(est.estimate) > np.mean(sjj) + 10 * np.sqrt(np.sum(est.stderr ** 2)) / 20


# ---------------------------------------------------------------------------- AIS
@pytest.mark.parametrize("activation", ["sigmoid", "noisy_or"])
def test_ais_calibrated_on_random_dags(activation):
    """200 random nets in one batch (their weights differ; they share the union of edges)."""
    rng = np.random.default_rng(11 if activation == "sigmoid" else 12)
    nets = [random_dag(rng, activation) for _ in range(N_NETS)]
    batch = mf.BeliefNetBatch.from_nets(nets, progress=False)
    X = np.stack([net.sample(2, random_state=k) for k, net in enumerate(nets)])
    est = batch.log_likelihood(X, n_samples=100, method="ais", n_steps=20, random_state=0)
    assert est.method == "ais" and est.n_samples == 100 and est.estimate.shape == (N_NETS, 2)
    assert_calibrated(z_scores(est, batch.exact_log_likelihood(X)).ravel(),
                      f"BeliefNetBatch({activation!r}), ais")


def test_ais_calibrated_on_layered_nets_with_missing_entries():
    rng = np.random.default_rng(13)
    z = []
    for k in range(N_NETS):
        net = mf.SigmoidBeliefNet([2, 4, 6], weight_scale=3.0, random_state=k, progress=False)
        X = net.sample(2, random_state=k)
        miss = rng.random(X.shape) < 0.2
        est = net.log_likelihood(X, n_samples=100, method="ais", n_steps=20, random_state=k,
                                 missing=miss)
        z.append(z_scores(est, net.exact_log_likelihood(X, missing=miss)))
    assert_calibrated(np.concatenate(z), "SigmoidBeliefNet, ais")


def test_ais_error_shrinks_with_more_temperatures_and_beats_importance_on_sharp_posteriors():
    """A net with many visible units per hidden one has a sharp posterior that the factorised
    proposal misses; annealing corrects it."""
    net = mf.SigmoidBeliefNet([3, 10, 60], weight_scale=3.0, random_state=0, progress=False)
    X = net.sample(12, random_state=1)
    exact = net.exact_log_likelihood(X)
    err = {}
    for T in (2, 20, 200):
        est = net.log_likelihood(X, n_samples=20, method="ais", n_steps=T, random_state=2)
        err[T] = float(np.sqrt(np.mean((est.estimate - exact) ** 2)))
    imp = net.log_likelihood(X, n_samples=20 * 20, random_state=2)   # the same work as T=20
    err_imp = float(np.sqrt(np.mean((imp.estimate - exact) ** 2)))
    assert err[2] > err[20] > err[200], err
    assert err[200] < 0.5 * err[2], err
    assert err[20] < err_imp, (err, err_imp)


def test_ais_same_answer_for_any_thread_count():
    net = mf.SigmoidBeliefNet([3, 6, 12], weight_scale=2.0, random_state=0, progress=False)
    X = net.sample(40, random_state=1)
    a = net.log_likelihood(X, n_samples=50, method="ais", n_steps=20, random_state=3,
                           n_threads=1)
    b = net.log_likelihood(X, n_samples=50, method="ais", n_steps=20, random_state=3,
                           n_threads=2)
    np.testing.assert_array_equal(a.estimate, b.estimate)
    np.testing.assert_array_equal(a.stderr, b.stderr)
    np.testing.assert_array_equal(
        net.score_samples(X, method="ais", n_samples=10, random_state=3),
        net.log_likelihood(X, n_samples=10, method="ais", random_state=3).estimate)


@pytest.mark.parametrize("method", ["importance", "ais"])
def test_no_patterns_and_extreme_weights(method):
    net = mf.SigmoidBeliefNet([2, 3, 5], random_state=0, progress=False)
    est = net.log_likelihood(np.zeros((0, 5)), n_samples=10, method=method)
    assert est.estimate.shape == est.stderr.shape == (0,)
    est = net.to_dag().log_likelihood(np.zeros((0, 5)), n_samples=10, method=method)
    assert est.estimate.shape == (0,)
    big = mf.SigmoidBeliefNet.from_params([w * 1e3 for w in net.weights_], net.biases_,
                                          progress=False)
    X = big.sample(20, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", mf.ConvergenceWarning)
        est = big.log_likelihood(X, n_samples=200, method=method, n_steps=10, random_state=0)
    # finite and in range; the Gaussian mean field is far off here (its bound is -1218 where
    # ln P = -3.4), so the proposal is poor and only the range is asserted
    assert np.all(np.isfinite(est.estimate)) and np.all(est.estimate <= 0.0)
    assert np.all(np.isfinite(est.stderr)) and np.all(est.stderr >= 0.0)


def _exact_predictive(model, X, miss):
    """P(x_j = 1 | observed entries) of every missing entry, by enumeration."""
    base = model.exact_log_likelihood(X, missing=miss)
    out = np.full(X.shape, np.nan)
    for j in range(X.shape[1]):
        rows = miss[:, j]
        if not rows.any():
            continue
        X1, m1 = X.copy(), miss.copy()
        X1[:, j], m1[:, j] = 1.0, False
        out[rows, j] = np.exp(model.exact_log_likelihood(X1, missing=m1) - base)[rows]
    return out


@pytest.mark.parametrize("kind", ["layered", "sigmoid", "noisy_or"])
def test_impute_importance_matches_the_exact_predictive(kind):
    rng = np.random.default_rng(21)
    errs, mf_errs = [], []
    for k in range(10):
        if kind == "layered":
            model = mf.SigmoidBeliefNet([3, 5, 8], weight_scale=3.0, random_state=k,
                                        progress=False)
        else:
            model = random_dag(rng, kind, n_units=10, n_visible=5)
        X = model.sample(4, random_state=k)
        miss = rng.random(X.shape) < 0.4
        exact = _exact_predictive(model, X, miss)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", mf.ConvergenceWarning)
            filled = model.impute(np.where(miss, np.nan, X), miss, method="importance",
                                  n_samples=4000, random_state=k)
            mean_field = model.impute(X, miss)
        np.testing.assert_array_equal(filled[~miss], X[~miss])
        assert np.all((filled >= 0.0) & (filled <= 1.0))
        errs.append(np.abs(filled - exact)[miss])
        mf_errs.append(np.abs(mean_field - exact)[miss])
    errs, mf_errs = np.concatenate(errs), np.concatenate(mf_errs)
    assert errs.max() < 0.06, errs.max()
    assert errs.mean() < 0.5 * mf_errs.mean(), (errs.mean(), mf_errs.mean())
    again = model.impute(X, miss, method="importance", n_samples=4000, random_state=9)
    np.testing.assert_array_equal(again, model.impute(X, miss, method="importance",
                                                      n_samples=4000, random_state=9))
    with pytest.raises(ValueError, match="n_samples"):
        model.impute(X, miss, method="importance", n_samples=1)


def test_same_estimate_after_save_and_load(tmp_path):
    net = mf.SigmoidBeliefNet([2, 3, 5], random_state=0, progress=False)
    X = net.sample(5, random_state=0)
    for model in (net, net.to_dag()):
        a = model.log_likelihood(X, n_samples=100, random_state=0)
        b = mf.load(model.save(tmp_path / "model.npz")).log_likelihood(X, n_samples=100,
                                                                       random_state=0)
        np.testing.assert_array_equal(a.estimate, b.estimate)
        np.testing.assert_array_equal(a.stderr, b.stderr)
