"""``NLGBN.posterior_marginals``: importance-sampled posterior means and standard deviations of
every unit, with standard errors.

Oracles: the exact Gaussian posterior of a linear net (closed form, any depth); for binary,
rectified and sigmoidal units the exact posterior moments by Gauss-Legendre quadrature over one
or two hidden units (reference_nlgbn.posterior_moments_quadrature, checked here against the
closed form, reference_nlgbn.posterior_moments_linear, on a linear net first).
"""
import warnings

import numpy as np
import pytest

import mfengine as mf

import reference_nlgbn as ref


def random_net(sizes, units, seed, scale=1.0, vis=(0.3, 1.0)):
    rng = np.random.default_rng(seed)
    weights = [rng.normal(0.0, scale / np.sqrt(a), size=(b, a))
               for a, b in zip(sizes[:-1], sizes[1:])]
    biases = [rng.normal(0.0, 0.7, size=s) for s in sizes]
    variances = ([rng.uniform(0.5, 1.5, size=s) for s in sizes[:-1]]
                 + [rng.uniform(*vis, size=sizes[-1])])
    return mf.NLGBN.from_params(weights, biases, variances, units=units)


def _within(est, exact, free, k=3.0):
    """Share of the free entries within k standard errors of the exact mean."""
    return float(np.mean((np.abs(est.mean - exact) <= k * est.stderr)[free]))


def test_the_quadrature_oracle_matches_the_closed_form():
    net = random_net([2, 5], "linear", seed=1)
    X = net.sample(6, random_state=2)
    X[::2, 1] = np.nan
    m, s = ref.posterior_moments_quadrature(net, X)
    m0, s0 = ref.posterior_moments_linear(net, X)
    np.testing.assert_allclose(m, m0, rtol=1e-8, atol=1e-8)
    np.testing.assert_allclose(s, s0, rtol=1e-8, atol=1e-8)


def test_linear_net_against_the_exact_gaussian_posterior():
    net = random_net([2, 3, 6], "linear", seed=5)
    X = net.sample(30, random_state=6)
    X[np.random.default_rng(7).random(X.shape) < 0.25] = np.nan
    est = net.posterior_marginals(X, n_samples=4000, random_state=8)
    exact, sd = ref.posterior_moments_linear(net, X)
    free = np.zeros(exact.shape, dtype=bool)
    free[:, :5] = True
    free[:, 5:] = np.isnan(X)
    assert est.mean.shape == est.stderr.shape == est.sd.shape == (30, 11)
    assert np.all(est.stderr[free] > 0) and np.all(np.isfinite(est.mean))
    assert _within(est, exact, free) >= 0.95 and _within(est, exact, free, 5.0) == 1.0
    # the sampled sd converges to the exact posterior's, which mean-field's q understates
    np.testing.assert_allclose(est.sd[free], sd[free], rtol=0.1)
    q = net.infer(X)
    q_sd = np.concatenate(q.sigma[:-1], axis=1)
    assert np.mean(q_sd) < 0.95 * np.mean(sd[:, :5])
    assert np.mean(np.abs(est.sd[:, :5] - sd[:, :5])) < 0.3 * np.mean(np.abs(q_sd - sd[:, :5]))


@pytest.mark.parametrize("units", [["binary"], ["rectified"], ["sigmoidal"],
                                   ["binary", "rectified"], ["sigmoidal", "linear"]])
def test_nonlinear_units_against_quadrature(units):
    net = random_net([len(units), 5], [units, "linear"], seed=11, scale=2.0, vis=(0.2, 0.5))
    X = net.sample(20, random_state=12)
    X[1::3, 2] = np.nan
    est = net.posterior_marginals(X, n_samples=6000, random_state=13)
    exact, sd = ref.posterior_moments_quadrature(net, X)
    H = len(units)
    free = np.zeros(exact.shape, dtype=bool)
    free[:, :H] = True
    free[:, H:] = np.isnan(X)
    assert _within(est, exact, free) >= 0.95 and _within(est, exact, free, 5.0) == 1.0
    np.testing.assert_allclose(est.sd[free], sd[free], rtol=0.15)
    # sampling converges where the Gaussian q cannot: more samples, closer to the exact mean
    more = net.posterior_marginals(X, n_samples=24000, random_state=14)
    assert np.mean(np.abs(more.mean - exact)[free]) < np.mean(np.abs(est.mean - exact)[free])


def test_observed_entries_read_their_value_and_the_samples_are_log_likelihoods():
    net = random_net([2, 3, 4], [["binary", "sigmoidal"], "rectified", "linear"], seed=1)
    X = net.sample(12, random_state=2)
    X[::4, 0] = np.nan
    est = net.posterior_marginals(X, n_samples=500, random_state=3)
    obs = ~np.isnan(X)
    np.testing.assert_array_equal(est.mean[:, 5:][obs], X[obs])
    assert np.all(est.stderr[:, 5:][obs] == 0.0) and np.all(est.sd[:, 5:][obs] == 0.0)
    assert np.all(est.stderr[:, 5:][~obs] > 0.0) and np.all(est.sd[:, 5:][~obs] > 0.0)
    ll = net.log_likelihood(X, n_samples=500, random_state=3)
    np.testing.assert_array_equal(est.log_likelihood.estimate, ll.estimate)
    np.testing.assert_array_equal(est.log_likelihood.stderr, ll.stderr)
    np.testing.assert_array_equal(est.ess, ll.ess)
    assert est.n_samples == 500 and isinstance(est, mf.PosteriorMarginalsEstimate)
    # a mask and NaN are the same thing
    Xz, miss = np.nan_to_num(X), np.isnan(X)
    same = net.posterior_marginals(Xz, miss, n_samples=500, random_state=3)
    np.testing.assert_array_equal(same.mean, est.mean)


def test_reproducible_thread_independent_and_shrinking_with_samples():
    net = random_net([2, 4, 6], [["binary", "sigmoidal"], "rectified", "linear"], seed=3)
    X = net.sample(16, random_state=4)
    one = net.posterior_marginals(X, n_samples=2000, random_state=5, n_threads=1)
    two = net.posterior_marginals(X, n_samples=2000, random_state=5, n_threads=2)
    for a in ("mean", "stderr", "sd", "ess"):
        np.testing.assert_array_equal(getattr(one, a), getattr(two, a))
    other = net.posterior_marginals(X, n_samples=2000, random_state=6)
    assert not np.array_equal(other.mean, one.mean)
    more = net.posterior_marginals(X, n_samples=8000, random_state=7)
    ratio = np.median(more.stderr[:, :6] / one.stderr[:, :6])
    assert 0.35 < ratio < 0.7                                 # ~ 1 / sqrt(4)


def test_few_samples_warn_and_bad_arguments_are_named():
    net = random_net([1, 3], "linear", seed=0)
    X = net.sample(3, random_state=0)
    with pytest.warns(RuntimeWarning, match="effective sample size is below 10"):
        net.posterior_marginals(X, n_samples=5, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        net.posterior_marginals(X, n_samples=2000, random_state=0)
    for bad in (1, 0, 2.5, "many", True):
        with pytest.raises((ValueError, TypeError), match="n_samples"):
            net.posterior_marginals(X, n_samples=bad)
    with pytest.raises(ValueError, match="X"):
        net.posterior_marginals(np.ones((2, 4)))
    with pytest.raises(ValueError, match="missing"):
        net.posterior_marginals(X, np.zeros((3, 2), dtype=bool))
    with pytest.raises(ValueError, match="random_state"):
        net.posterior_marginals(X, random_state="seed")
