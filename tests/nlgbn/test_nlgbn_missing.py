"""NLGBN with missing visible entries (issue 13 item 2): marginalised in infer, score_samples
and fit; impute returns the posterior predictive means.

Oracles: for linear units the Gaussian conditional mean and the exact marginal log-likelihood of
the observed part (NumPy); for any units, the net with the missing visible units removed (a
visible unit has no children, so marginalising it is the same as deleting it), solved by the
L-BFGS reference of reference_nlgbn.py.
"""
import warnings

import numpy as np
import pytest
from scipy.stats import multivariate_normal

import mfengine as mf

import reference_nlgbn as ref

MIXED = [["binary", "sigmoidal"], ["rectified", "linear", "binary", "sigmoidal"], "linear"]


def random_net(sizes, units, seed, scale=1.0):
    rng = np.random.default_rng(seed)
    weights = [rng.normal(0.0, scale / np.sqrt(a), size=(b, a)) for a, b in zip(sizes[:-1], sizes[1:])]
    biases = [rng.normal(0.0, 0.7, size=s) for s in sizes]
    variances = [rng.uniform(0.3, 2.0, size=s) for s in sizes]
    return mf.NLGBN.from_params(weights, biases, variances, units=units)


def linear_marginal(net):
    """Mean and covariance of the visible units of a net of linear units."""
    m = net.biases_[0].copy()
    C = np.diag(net.variances_[0])
    for W, b, v in zip(net.weights_, net.biases_[1:], net.variances_[1:]):
        m = b + W @ m
        C = W @ C @ W.T + np.diag(v)
    return m, C


def sub_net(net, keep):
    """The net with only the visible units ``keep`` (a boolean vector)."""
    W = [w.copy() for w in net.weights_]
    W[-1] = W[-1][keep]
    B = [b.copy() for b in net.biases_]
    B[-1] = B[-1][keep]
    V = [v.copy() for v in net.variances_]
    V[-1] = V[-1][keep]
    units = [list(u) for u in net.units_]
    units[-1] = [u for u, k in zip(units[-1], keep) if k]
    return mf.NLGBN.from_params(W, B, V, units=units)


def _mask(shape, frac, seed):
    rng = np.random.default_rng(seed)
    miss = rng.random(shape) < frac
    miss[:, 0] = False                        # every pattern keeps an observed entry
    return miss


def test_linear_impute_is_the_gaussian_conditional_mean():
    net = random_net([2, 3, 7], "linear", seed=1)
    net.set_params(infer_tol=1e-14, infer_max_iter=100000)   # coordinate ascent to the end
    X = net.sample(30, random_state=2)
    miss = _mask(X.shape, 0.4, 3)
    m, C = linear_marginal(net)
    filled = net.impute(np.where(miss, np.nan, X))
    for p in range(X.shape[0]):
        o, u = ~miss[p], miss[p]
        want = m[u] + C[np.ix_(u, o)] @ np.linalg.solve(C[np.ix_(o, o)], X[p, o] - m[o])
        np.testing.assert_allclose(filled[p, u], want, rtol=1e-6, atol=1e-6)
        np.testing.assert_array_equal(filled[p, o], X[p, o])
    # the same through the mask, whatever the missing entries hold
    junk = np.where(miss, 1e300, X)
    np.testing.assert_allclose(net.impute(junk, miss), filled, rtol=1e-12, atol=0)


def test_linear_one_hidden_unit_bound_is_the_exact_marginal_of_the_observed_part():
    rng = np.random.default_rng(4)
    D = 6
    w = rng.normal(size=(D, 1))
    net = mf.NLGBN.from_params([w], [np.array([0.4]), rng.normal(size=D)],
                               [np.array([2.3]), rng.uniform(0.2, 1.0, D)], units="linear")
    X = net.sample(25, random_state=5)
    miss = _mask(X.shape, 0.5, 6)
    m, C = linear_marginal(net)
    exact = np.array([multivariate_normal(m[~mp], C[np.ix_(~mp, ~mp)]).logpdf(x[~mp])
                      for x, mp in zip(X, miss)])
    np.testing.assert_allclose(net.score_samples(X, miss), exact, rtol=1e-10)
    # deeper linear nets: the bound stays below the exact marginal of the observed part
    deep = random_net([2, 3, 6], "linear", seed=7)
    m, C = linear_marginal(deep)
    exact = np.array([multivariate_normal(m[~mp], C[np.ix_(~mp, ~mp)]).logpdf(x[~mp])
                      for x, mp in zip(X, miss)])
    F = deep.score_samples(X, miss)
    assert np.all(F <= exact + 1e-9) and np.all(F > exact - 3.0)


@pytest.mark.parametrize("units", [MIXED, ["rectified", "rectified", "linear"], "sigmoidal"])
def test_nonlinear_missing_equals_the_net_without_those_units(units):
    net = random_net([2, 4, 6], units, seed=8)
    X = net.sample(5, random_state=9)
    miss = _mask(X.shape, 0.4, 10)
    r = net.infer(X, miss, tol=1e-11)
    for p in range(X.shape[0]):
        keep = ~miss[p]
        sub = sub_net(net, keep)
        x = X[p:p + 1, keep]
        rs = sub.infer(x, tol=1e-11)
        np.testing.assert_allclose(r.bound[p], rs.bound[0], rtol=1e-9)
        # the slow reference: L-BFGS on eq. 8 of the reduced net from the same start
        mu0, lv0 = sub._initial_state(1)
        _, _, F = ref.estep(sub, x, mu0, lv0)
        np.testing.assert_allclose(r.bound[p], F[0], rtol=0, atol=1e-7)
        # the imputed entries are the predictive means E_q[b + W f(h)] of that posterior
        mu_h = np.concatenate([m[p] for m in r.mu[:-1]])
        lv_h = 2 * np.log(np.concatenate([s[p] for s in r.sigma[:-1]]))
        top = len(net.units_[0])
        M = np.array([ref.moments(k, np.array([mu_h[top + i]]), np.array([lv_h[top + i]]))[0][0]
                      for i, k in enumerate(net.units_[1])])
        pred = net.biases_[-1] + net.weights_[-1] @ M
        np.testing.assert_allclose(r.mu[-1][p, miss[p]], pred[miss[p]], rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(net.impute(X, miss), net.infer(X, miss).mu[-1], rtol=1e-12)


def test_missing_mask_forms_and_errors():
    net = random_net([2, 3, 5], MIXED[:1] + ["rectified", "linear"], seed=11)
    X = net.sample(8, random_state=12)
    row = np.array([False, True, False, False, True])
    full = np.broadcast_to(row, X.shape)
    np.testing.assert_array_equal(net.score_samples(X, row), net.score_samples(X, full))
    np.testing.assert_array_equal(net.score_samples(X, full.astype(int)), net.score_samples(X, full))
    np.testing.assert_array_equal(net.score_samples(X, np.zeros(X.shape, bool)), net.score_samples(X))
    Xn = X.copy()
    Xn[full] = np.nan
    np.testing.assert_array_equal(net.score_samples(Xn), net.score_samples(X, full))
    assert net.score(Xn) == pytest.approx(net.score_samples(X, full).mean())
    with pytest.raises(ValueError, match="missing must have shape"):
        net.infer(X, row[:3])
    with pytest.raises(TypeError, match="missing"):
        net.infer(X, full.astype(float) * 0.5)
    Xi = X.copy()
    Xi[0, 0] = np.inf
    with pytest.raises(ValueError, match="X"):
        net.infer(Xi)
    # an entry marked missing may hold anything, infinity too
    np.testing.assert_array_equal(net.score_samples(np.where(full, np.inf, X), full),
                                  net.score_samples(X, full))


def test_fit_with_missing_is_exact_em_for_one_linear_hidden_unit():
    # with one linear hidden unit q is exact, so the bound is the exact log-likelihood of the
    # observed entries and EM with the missing entries' expected statistics must never lower it
    rng = np.random.default_rng(13)
    D = 5
    true = mf.NLGBN.from_params([rng.normal(size=(D, 1)) * 1.5], [np.zeros(1), rng.normal(size=D)],
                                [np.ones(1), rng.uniform(0.1, 0.4, D)], units="linear")
    X = true.sample(300, random_state=14)
    miss = _mask(X.shape, 0.3, 15)
    g = mf.NLGBN([1, D], units="linear", max_iter=30, infer_tol=1e-12, random_state=0,
                 progress=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        g.fit(np.where(miss, np.nan, X))
    h = g.history_
    assert np.all(np.diff(h) >= -1e-9) and h[-1] > h[0] + 1.0
    m, C = linear_marginal(g)
    exact = np.mean([multivariate_normal(m[~mp], C[np.ix_(~mp, ~mp)]).logpdf(x[~mp])
                     for x, mp in zip(X, miss)])
    assert g.score(X, missing=miss) == pytest.approx(exact, rel=1e-9)
    # the fit on 30% missing entries is close to the fit on complete data
    full = mf.NLGBN([1, D], units="linear", max_iter=30, random_state=0, progress=False).fit(X)
    assert g.score(X) > full.score(X) - 0.1
    # and far better than the mean-imputed data's model on the missing entries
    filled = g.impute(X, miss)
    err = np.abs(filled - X)[miss].mean()
    base = np.abs(np.nanmean(np.where(miss, np.nan, X), axis=0)[None].repeat(len(X), 0) - X)[miss].mean()
    assert err < 0.8 * base


def test_fit_with_missing_nonlinear_bound_never_decreases():
    net = random_net([2, 4, 8], MIXED[:1] + [["rectified", "binary", "sigmoidal", "rectified"], "linear"],
                     seed=16)
    X = net.sample(200, random_state=17)
    miss = _mask(X.shape, 0.25, 18)
    g = mf.NLGBN([2, 4, 8], units=net.units_, max_iter=8, random_state=1, progress=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        g.fit(X, missing=miss)
    assert np.all(np.diff(g.history_) >= 0) and g.history_[-1] > g.history_[0]


def test_sample_posterior_draws_the_missing_entries():
    net = random_net([1, 5], "linear", seed=30)
    X = net.sample(3, random_state=31)
    miss = np.zeros(X.shape, dtype=bool)
    miss[:, 2:] = True
    layers = net.sample_posterior(np.where(miss, np.nan, X), n_samples=20000, random_state=32)
    vis = layers[-1]
    np.testing.assert_array_equal(vis[:, ~miss], np.broadcast_to(X[~miss], (20000, (~miss).sum())))
    # one linear hidden unit: q is exact, so the draws of the missing entries follow the exact
    # conditional distribution: its mean and variance
    m, C = linear_marginal(net)
    o, u = ~miss[0], miss[0]
    K = C[np.ix_(u, o)] @ np.linalg.inv(C[np.ix_(o, o)])
    cond_var = np.diag(C[np.ix_(u, u)] - K @ C[np.ix_(o, u)])
    for p in range(3):
        want = m[u] + K @ (X[p, o] - m[o])
        np.testing.assert_allclose(vis[:, p, u].mean(axis=0), want, atol=0.05)
        np.testing.assert_allclose(vis[:, p, u].var(axis=0), cond_var, rtol=0.1)


def test_hostile_input_to_the_new_verbs_gives_finite_numbers_or_named_errors():
    g = random_net([2, 3, 5], [["binary", "sigmoidal"], "rectified", "linear"], seed=33)
    X = g.sample(6, random_state=1)
    finite = {
        "X 1e100": lambda: g.log_likelihood(X * 1e100, n_samples=50).estimate,
        "X 1e-300": lambda: g.log_likelihood(X * 1e-300, n_samples=50).estimate,
        "all missing": lambda: g.log_likelihood(np.full_like(X, np.nan), n_samples=50).estimate,
        "impute all missing": lambda: g.impute(np.full_like(X, np.nan)),
        "n_threads huge": lambda: g.log_likelihood(X, n_samples=10, n_threads=2**70).estimate,
        "partial_fit all missing": lambda: mf.NLGBN([2, 3, 5], random_state=0, progress=False)
        .partial_fit(np.full_like(X, np.nan)).history_,
    }
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for label, fn in finite.items():
            assert np.all(np.isfinite(fn())), label
    named = {
        "X 1e200": (lambda: g.log_likelihood(X * 1e200, n_samples=50), "X"),
        "n_samples bool": (lambda: g.log_likelihood(X, n_samples=True), "n_samples"),
        "n_samples huge": (lambda: g.log_likelihood(X, n_samples=2**62), "n_samples"),
        "random_state": (lambda: g.log_likelihood(X, n_samples=10, random_state=-1), "random_state"),
        "missing object": (lambda: g.impute(X, np.array([[None] * 5] * 6)), "missing"),
        "missing 3-D": (lambda: g.impute(X, np.zeros((6, 5, 1), bool)), "missing"),
    }
    for label, (fn, name) in named.items():
        with pytest.raises((ValueError, TypeError), match=name):
            fn()
    h = mf.NLGBN([2, 3, 5], random_state=0, progress=False).partial_fit(X)
    h.stats_ = np.full_like(h.stats_, np.nan)
    with pytest.raises(ValueError, match="stats_"):
        h.partial_fit(X)
    h.n_batches_ = "a"
    with pytest.raises(TypeError, match="n_batches_"):
        h.partial_fit(X)
