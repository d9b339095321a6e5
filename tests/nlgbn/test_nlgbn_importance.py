"""Importance-sampled ln p(x) of NLGBN (issue 13 item 1): mf.LogLikelihoodEstimate from
log_likelihood(X, n_samples, method="importance", random_state), score_samples(method=
"importance").

Oracles: the exact Gaussian marginal for linear units (closed form); for binary, rectified and
sigmoidal units exact ln p(x) by Gauss-Legendre quadrature over one or two hidden units
(reference_nlgbn.log_marginal_quadrature).
"""
import time
import warnings

import numpy as np
import pytest
from scipy.stats import multivariate_normal

import mfengine as mf

import reference_nlgbn as ref


def random_net(sizes, units, seed, scale=1.0, vis=(0.3, 1.0)):
    rng = np.random.default_rng(seed)
    weights = [rng.normal(0.0, scale / np.sqrt(a), size=(b, a)) for a, b in zip(sizes[:-1], sizes[1:])]
    biases = [rng.normal(0.0, 0.7, size=s) for s in sizes]
    variances = [rng.uniform(0.5, 1.5, size=s) for s in sizes[:-1]] + [rng.uniform(*vis, size=sizes[-1])]
    return mf.NLGBN.from_params(weights, biases, variances, units=units)


def linear_marginal(net):
    m = net.biases_[0].copy()
    C = np.diag(net.variances_[0])
    for W, b, v in zip(net.weights_, net.biases_[1:], net.variances_[1:]):
        m = b + W @ m
        C = W @ C @ W.T + np.diag(v)
    return m, C


def test_returns_the_protocol_object_and_is_reproducible():
    net = random_net([2, 4, 6], [["binary", "sigmoidal"], "rectified", "linear"], seed=1)
    X = net.sample(50, random_state=2)
    est = net.log_likelihood(X, n_samples=300, random_state=3, n_threads=1)
    assert isinstance(est, mf.LogLikelihoodEstimate) and est.method == "importance"
    assert est.n_samples == 300
    for a in (est.estimate, est.stderr, est.bound, est.ess):
        assert a.shape == (50,) and np.all(np.isfinite(a))
    assert np.all(est.stderr > 0) and np.all((est.ess >= 1) & (est.ess <= 300))
    np.testing.assert_array_equal(est.bound, net.score_samples(X))
    # the same numbers for any thread count (pattern p's stream depends on the seed and p only)
    two = net.log_likelihood(X, n_samples=300, random_state=3, n_threads=2)
    np.testing.assert_array_equal(est.estimate, two.estimate)
    np.testing.assert_array_equal(est.stderr, two.stderr)
    np.testing.assert_array_equal(
        net.score_samples(X, method="importance", n_samples=300, random_state=3), est.estimate)
    other = net.log_likelihood(X, n_samples=300, random_state=4)
    assert not np.array_equal(other.estimate, est.estimate)
    # the estimate is above the bound on average (it estimates ln p(x) >= F)
    assert np.mean(est.estimate) > np.mean(est.bound)
    with pytest.raises(ValueError, match="n_samples"):
        net.log_likelihood(X, n_samples=1)
    with pytest.raises(ValueError, match="method"):
        net.log_likelihood(X, method="ais")
    with pytest.raises(ValueError, match="method"):
        net.score_samples(X, method="bogus")


def test_linear_units_against_the_exact_gaussian_marginal():
    net = random_net([2, 3, 6], "linear", seed=5)
    X = net.sample(40, random_state=6)
    m, C = linear_marginal(net)
    exact = multivariate_normal(m, C).logpdf(X)
    est = net.log_likelihood(X, n_samples=4000, random_state=7)
    z = (est.estimate - exact) / est.stderr
    assert np.mean(np.abs(z) < 3) >= 0.95 and np.all(np.abs(z) < 5)
    assert np.all(est.stderr < 0.05)
    # with missing entries: the exact marginal of the observed part
    miss = np.random.default_rng(8).random(X.shape) < 0.3
    miss[:, 0] = False
    exact = np.array([multivariate_normal(m[~mp], C[np.ix_(~mp, ~mp)]).logpdf(x[~mp])
                      for x, mp in zip(X, miss)])
    est = net.log_likelihood(np.where(miss, np.nan, X), n_samples=4000, random_state=9)
    z = (est.estimate - exact) / est.stderr
    assert np.mean(np.abs(z) < 3) >= 0.95 and np.all(np.abs(z) < 5)


def test_quadrature_reference_is_exact_for_linear_units():
    for H in (1, 2):
        net = random_net([H, 3], "linear", seed=10 + H)
        X = net.sample(5, random_state=1)
        m, C = linear_marginal(net)
        np.testing.assert_allclose(ref.log_marginal_quadrature(net, X),
                                   multivariate_normal(m, C).logpdf(X), rtol=1e-10)


CALIBRATION_NETS = 200


def calibration(kind, n_nets=CALIBRATION_NETS, n_samples=1000):
    """z-scores of the estimate against exact ln p(x), one pattern per random net (half with
    one hidden unit, half with two)."""
    z = np.empty(n_nets)
    for k in range(n_nets):
        H = 1 + k % 2
        net = random_net([H, 3], [kind, "linear"], seed=1000 + k, scale=1.5)
        x = net.sample(1, random_state=k)
        exact = ref.log_marginal_quadrature(net, x)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            est = net.log_likelihood(x, n_samples=n_samples, random_state=k, n_threads=1)
        z[k] = (est.estimate[0] - exact[0]) / est.stderr[0]
    return z


@pytest.mark.parametrize("kind", ["linear", "binary", "rectified", "sigmoidal"])
def test_calibration_on_200_random_nets(kind):
    t0 = time.perf_counter()
    z = calibration(kind)
    share = np.mean(np.abs(z) < 3)
    print(f"{kind}: {share:.1%} of {z.size} within 3 SE; {time.perf_counter() - t0:.1f} s")
    assert share >= 0.95
    assert abs(np.mean(z)) < 0.5          # no systematic bias beyond the sampling error


def test_error_shrinks_as_the_number_of_samples_grows():
    net = random_net([2, 4], ["rectified", "linear"], seed=20, scale=2.0, vis=(0.1, 0.3))
    X = net.sample(30, random_state=21)
    exact = ref.log_marginal_quadrature(net, X)
    errs, ses = [], []
    for K in (30, 300, 3000):
        est = net.log_likelihood(X, n_samples=K, random_state=22)
        errs.append(np.sqrt(np.mean((est.estimate - exact) ** 2)))
        ses.append(np.mean(est.stderr))
    print("K = 30, 300, 3000: rms error", errs, "mean SE", ses)
    assert errs[0] > errs[1] > errs[2]
    assert errs[2] < errs[0] / 4
