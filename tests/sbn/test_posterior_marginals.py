"""``posterior_marginals(X, missing, n_samples=..., random_state=...)`` of the belief nets:
importance-sampled P(unit = 1 | x) with standard errors, against the exact posterior means of
``infer(method="exact")`` (the kernel's own calibration is in test_importance_stderr.py)."""
import warnings

import numpy as np
import pytest

import mfengine as mf


def _quiet(f, *a, **k):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", mf.ConvergenceWarning)
        return f(*a, **k)


def _coverage(est, exact, free):
    """Share of the free units within 3 SE of exact (a unit whose conditional does not
    depend on the draws is estimated exactly but for rounding, which its SE's resolution
    term, (n_samples + 16) ulps of the estimate, covers)."""
    err = np.abs(est.mean - exact)[free]
    return float(np.mean(err <= 3.0 * est.stderr[free]))


@pytest.mark.parametrize("activation", ["sigmoid", "noisy_or"])
def test_belief_net_marginals_match_exact(activation):
    rng = np.random.default_rng(4)
    n_units, n_vis = 9, 4
    W = np.tril(rng.normal(0.0, 1.5, (n_units, n_units)), -1) * (rng.random((9, 9)) < 0.6)
    h = rng.normal(0.0, 1.0, n_units)
    if activation == "noisy_or":
        W, h = np.abs(W), 0.5 * np.abs(h) + 0.05
    visible = np.zeros(n_units, dtype=bool)
    visible[-n_vis:] = True
    net = mf.BeliefNet(W, h, visible, activation, progress=False)
    X = net.sample(12, random_state=1)
    miss = np.zeros(X.shape, dtype=bool)
    miss[::3, 0] = True
    est = _quiet(net.posterior_marginals, X, miss, n_samples=4000, random_state=0)
    exact = net.infer(X, miss, method="exact").mu
    assert isinstance(est, mf.PosteriorMarginalsEstimate)
    assert est.mean.shape == est.stderr.shape == (12, n_units) and est.ess.shape == (12,)
    assert est.n_samples == 4000 and est.log_likelihood.estimate.shape == (12,)
    vis = np.flatnonzero(visible)
    # observed units read their value with no error; free units are covered by 3 SE
    obs = np.zeros(X.shape[0:1] + (n_units,), dtype=bool)
    obs[:, vis] = ~miss
    np.testing.assert_array_equal(est.mean[obs], np.broadcast_to(X, X.shape)[~miss])
    assert np.all(est.stderr[obs] == 0.0)
    assert np.all(est.stderr[~obs] > 0.0)
    assert _coverage(est, exact, ~obs) >= 0.95
    assert np.max(np.abs(est.mean - exact)[~obs]) < 0.05
    # the same samples as log_likelihood: its estimate, bit for bit
    ll = _quiet(net.log_likelihood, X, 4000, random_state=0, missing=miss)
    np.testing.assert_array_equal(est.log_likelihood.estimate, ll.estimate)


def test_layered_net_units_in_order_and_seed_reproducible():
    net = mf.SigmoidBeliefNet([2, 4, 8], weight_scale=2.0, random_state=0, progress=False)
    X = net.sample(6, random_state=3)
    est = net.posterior_marginals(X, n_samples=3000, random_state=5)
    exact = net.to_dag().infer(X, method="exact").mu
    assert est.mean.shape == (6, 14)
    np.testing.assert_array_equal(est.mean[:, 6:], X)
    assert _coverage(est, exact, np.s_[:, :6]) >= 0.95
    again = net.posterior_marginals(X, n_samples=3000, random_state=5, n_threads=2)
    np.testing.assert_array_equal(est.mean, again.mean)
    np.testing.assert_array_equal(est.stderr, again.stderr)
    more = net.posterior_marginals(X, n_samples=12000, random_state=6)
    ratio = np.median(more.stderr[:, :6] / est.stderr[:, :6])
    assert 0.35 < ratio < 0.7                                 # ~ 1 / sqrt(4)


def test_batch_shapes():
    nets = [mf.datasets.make_diagnosis_net(6, 8, 3, random_state=s) for s in range(3)]
    batch = mf.BeliefNetBatch.from_nets(nets)
    X = np.stack([n.sample(1, random_state=k)[0] for k, n in enumerate(nets)])
    est = _quiet(batch.posterior_marginals, X, n_samples=500, random_state=0)
    assert est.mean.shape == (3, nets[0].h.size) and est.ess.shape == (3,)


@pytest.mark.parametrize("bad", [1, 0, -5, 2.5, "many", True])
def test_bad_n_samples_is_named(bad):
    net = mf.SigmoidBeliefNet([2, 4], random_state=0, progress=False)
    X = net.sample(2, random_state=0)
    with pytest.raises((ValueError, TypeError), match="n_samples"):
        net.posterior_marginals(X, n_samples=bad)


def test_bad_data_is_named():
    net = mf.SigmoidBeliefNet([2, 4], random_state=0, progress=False)
    with pytest.raises(ValueError, match="X"):
        net.posterior_marginals(np.full((2, 3), 0.5), n_samples=10)


def test_degenerate_weights_warn():
    # a full diagnosis case (a few hundred positive findings): the mean-field proposal is far
    # from the posterior and a handful of samples carry the weight
    net = mf.datasets.make_diagnosis_net(random_state=0)
    X = net.sample(2, random_state=7)
    with pytest.warns(RuntimeWarning, match="effective sample size is below 10"):
        est = _quiet(net.posterior_marginals, X, n_samples=300, random_state=0)
    assert np.all(est.ess < 10)
