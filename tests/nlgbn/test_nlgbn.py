"""Nonlinear Gaussian belief networks: unit functions, bound, E-step, M-step, EM, inputs.

Oracles: numerical integration and finite differences for the unit functions (Frey & Hinton,
App. C); the literal eq. 8 / eq. 12 / L-BFGS / eqs. 13-15 references of reference_nlgbn.py;
the exact Gaussian marginal and scikit-learn's FactorAnalysis for one linear hidden unit; exact
log p(x) by integration over one hidden unit of any type.
"""
import copy
import warnings

import numpy as np
import pytest
from scipy.stats import multivariate_normal
from sklearn.exceptions import NotFittedError

import mfengine as mf
from mfengine import _base as mf_base
from mfengine.nlgbn import _estep
from mfengine.nlgbn.model import UNIT_TYPES

import reference_nlgbn as ref

CODE = {k: i for i, k in enumerate(UNIT_TYPES)}


def random_net(sizes, units, seed, scale=1.0):
    rng = np.random.default_rng(seed)
    weights = [rng.normal(0.0, scale / np.sqrt(a), size=(b, a)) for a, b in zip(sizes[:-1], sizes[1:])]
    biases = [rng.normal(0.0, 0.7, size=s) for s in sizes]
    variances = [rng.uniform(0.3, 2.0, size=s) for s in sizes]
    return mf.NLGBN.from_params(weights, biases, variances, units=units)


MIXED = [["binary", "sigmoidal"], ["rectified", "linear", "binary", "sigmoidal"], "linear"]


# ---------------------------------------------------------------------- unit functions
@pytest.mark.parametrize("kind", UNIT_TYPES)
def test_moments_against_quadrature(kind):
    mus = np.array([-3.0, -1.1, -0.2, 0.0, 0.4, 1.7, 3.5])
    logvars = np.array([-2.5, 0.0, 1.2])
    mu, lv = (a.ravel() for a in np.meshgrid(mus, logvars))
    got = _estep.moments(CODE[kind], mu, lv)
    for i in range(mu.size):
        M, V = ref.moments_quad(kind, mu[i], np.exp(0.5 * lv[i]))
        assert got["M"][i] == pytest.approx(M, rel=1e-9, abs=1e-13)
        if kind == "sigmoidal":
            # V' is an upper bound on the true output variance (eq. 27)
            assert got["V"][i] >= V * (1 - 1e-9)
        else:
            assert got["V"][i] == pytest.approx(V, rel=1e-8, abs=1e-13)
        assert got["S"][i] == pytest.approx(got["V"][i] + got["M"][i] ** 2, rel=1e-12, abs=1e-15)
    Mr, Vr = ref.moments(kind, mu, lv)
    np.testing.assert_allclose(got["M"], Mr, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(got["V"], Vr, rtol=1e-10, atol=1e-14)


def test_moments_extreme_arguments_stay_finite_and_accurate():
    # far tails of the rectified unit: the mean and variance of (t + z)_+ for t = -30, against
    # the asymptotic series phi(t) (1/t^2 - 3/t^4 + 15/t^6 ...) and (2/|t|^3 - 12/|t|^5 ...)
    t = 30.0
    phi = np.exp(-0.5 * t * t) / np.sqrt(2 * np.pi)
    m1 = phi * (1 / t**2 - 3 / t**4 + 15 / t**6 - 105 / t**8 + 945 / t**10)
    m2 = phi * (2 / t**3 - 12 / t**5 + 90 / t**7 - 840 / t**9 + 9450 / t**11)
    got = _estep.moments(CODE["rectified"], np.array([-t]), np.array([0.0]))
    assert got["M"][0] == pytest.approx(m1, rel=1e-11)
    assert got["S"][0] == pytest.approx(m2, rel=1e-11)
    for kind in UNIT_TYPES:
        got = _estep.moments(CODE[kind], np.array([-500.0, 500.0, 1e-3]), np.array([-50.0, 40.0, 0.0]))
        for key, val in got.items():
            assert np.all(np.isfinite(val)), (kind, key)
        assert np.all(got["V"] >= 0)


@pytest.mark.parametrize("kind", UNIT_TYPES)
def test_moment_derivatives_finite_differences(kind):
    rng = np.random.default_rng(3)
    mu = rng.uniform(-3, 3, 60)
    lv = rng.uniform(-2, 1.5, 60)
    h = 1e-5
    got = _estep.moments(CODE[kind], mu, lv)

    def fd(key, var):
        dmu, ds = (h, 0.0) if var == "mu" else (0.0, h)
        plus = _estep.moments(CODE[kind], mu + dmu, lv + ds)[key]
        minus = _estep.moments(CODE[kind], mu - dmu, lv - ds)[key]
        return (plus - minus) / (2 * h)

    for q in "MSV":
        for var in ("mu", "s"):
            np.testing.assert_allclose(got[f"{q}_{var}"], fd(q, var), rtol=1e-6, atol=1e-8)
    for q in "MS":
        for a, b in (("mu", "mu"), ("mu", "s"), ("s", "s")):
            np.testing.assert_allclose(got[f"{q}_{a}{b}"], fd(f"{q}_{a}", b), rtol=1e-6, atol=1e-8)
    # and the first derivatives agree with the printed formulas of Appendix C
    Mmu, Ms, Vmu, Vs = ref._moment_grads(kind, mu, lv)
    for key, val in (("M_mu", Mmu), ("M_s", Ms), ("V_mu", Vmu), ("V_s", Vs)):
        np.testing.assert_allclose(got[key], val, rtol=1e-10, atol=1e-14)


# ---------------------------------------------------------------------- bound and E-step
def test_bound_matches_reference_eq8():
    net = random_net([2, 4, 5], MIXED, seed=1)
    rng = np.random.default_rng(0)
    X = net.sample(9, random_state=2)
    mu = rng.normal(size=(9, 6))
    lv = rng.normal(0.0, 0.6, size=(9, 6))
    got = net.bound_at(X, mu, np.exp(0.5 * lv))
    np.testing.assert_allclose(got, ref.bound(net, X, mu, lv), rtol=1e-12)


def test_reference_gradient_is_the_gradient():
    net = random_net([2, 4, 5], MIXED, seed=4)
    rng = np.random.default_rng(1)
    X = net.sample(3, random_state=5)
    mu = rng.normal(size=(3, 6))
    lv = rng.normal(0.0, 0.5, size=(3, 6))
    gm, gs = ref.gradient(net, X, mu, lv)
    h = 1e-6
    for i in range(6):
        e = np.zeros(6)
        e[i] = h
        fm = (ref.bound(net, X, mu + e, lv) - ref.bound(net, X, mu - e, lv)) / (2 * h)
        fs = (ref.bound(net, X, mu, lv + e) - ref.bound(net, X, mu, lv - e)) / (2 * h)
        np.testing.assert_allclose(gm[:, i], fm, rtol=1e-6, atol=1e-7)
        np.testing.assert_allclose(gs[:, i], fs, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("units", [MIXED, ["rectified", "rectified", "linear"], "sigmoidal"])
def test_estep_matches_reference_optimiser(units):
    net = random_net([2, 4, 5], units, seed=7)
    X = net.sample(6, random_state=8)
    r = net.infer(X, tol=1e-11)
    mu_h = np.hstack(r.mu[:-1])
    lv_h = 2 * np.log(np.hstack(r.sigma[:-1]))
    # the kernel's bound is eq. 8 at its own solution ...
    np.testing.assert_allclose(r.bound, ref.bound(net, X, mu_h, lv_h), rtol=1e-12)
    # ... which is a stationary point of eq. 8 (gradient of eq. 12) ...
    gm, gs = ref.gradient(net, X, mu_h, lv_h)
    assert np.abs(gm).max() < 1e-4 and np.abs(gs).max() < 1e-4
    # ... and as high as L-BFGS on the whole bound from the same starting point
    mu0, lv0 = net._initial_state(X.shape[0])
    _, _, F = ref.estep(net, X, mu0, lv0)
    np.testing.assert_allclose(r.bound, F, rtol=0, atol=1e-7)


def test_estep_bound_never_decreases_over_sweeps():
    net = random_net([2, 5, 6], MIXED[:1] + [["rectified", "binary", "sigmoidal", "rectified", "binary"], "linear"],
                     seed=11, scale=2.0)
    X = net.sample(40, random_state=12)
    mu0, lv0 = net._initial_state(X.shape[0])
    prev = None
    for k in range(0, 12):
        mu, lv = mu0.copy(), lv0.copy()
        F = net._estep(X, mu, lv, 1e-300, k, 1)[0]
        np.testing.assert_allclose(F, ref.bound(net, X, mu, lv), rtol=1e-11)
        if prev is not None:
            assert np.all(F >= prev - 1e-11 * np.abs(prev))
        prev = F


def test_warm_start_from_solution_keeps_it():
    net = random_net([2, 4, 5], MIXED, seed=13)
    X = net.sample(10, random_state=14)
    mu, lv = net._initial_state(10)
    F1 = net._estep(X, mu, lv, 1e-10, 1000, 1)[0]
    F2, sweeps, converged, _ = net._estep(X, mu, lv, 1e-10, 1000, 1)
    assert np.all(F2 >= F1 - 1e-12 * np.abs(F1))
    assert np.all(sweeps == 1) and np.all(converged)


@pytest.mark.parametrize("kind", UNIT_TYPES)
def test_bound_below_exact_log_marginal_one_hidden_unit(kind):
    rng = np.random.default_rng(21)
    net = mf.NLGBN.from_params(
        [rng.normal(0, 1.5, size=(3, 1))], [np.array([0.3]), rng.normal(size=3)],
        [np.array([1.2]), np.array([0.3, 0.5, 0.8])], units=[kind, "linear"],
    )
    X = net.sample(5, random_state=22)
    exact = ref.log_marginal_one_hidden(net, X)
    F = net.infer(X, tol=1e-10).bound
    assert np.all(F <= exact + 1e-8)
    if kind == "linear":
        np.testing.assert_allclose(F, exact, rtol=1e-8)
    else:
        assert np.all(F > exact - 2.0)      # the Gaussian q is not exact, but it is close


def test_single_linear_hidden_unit_is_exact():
    rng = np.random.default_rng(5)
    D = 6
    w = rng.normal(size=(D, 1))
    net = mf.NLGBN.from_params([w], [np.array([0.4]), rng.normal(size=D)],
                               [np.array([2.3]), rng.uniform(0.2, 1.0, D)], units="linear")
    X = net.sample(40, random_state=6)
    cov = 2.3 * w @ w.T + np.diag(net.variances_[1])
    mean = net.biases_[1] + w[:, 0] * 0.4
    exact = multivariate_normal(mean, cov).logpdf(X)
    np.testing.assert_allclose(net.score_samples(X), exact, rtol=1e-12)


def test_fit_single_linear_hidden_unit_matches_factor_analysis():
    from sklearn.decomposition import FactorAnalysis

    rng = np.random.default_rng(9)
    D, n = 5, 400
    w = rng.normal(size=D)
    X = np.outer(rng.normal(size=n), w) + rng.normal(size=D) + rng.normal(size=(n, D)) * rng.uniform(0.3, 1.0, D)
    fa = FactorAnalysis(n_components=1, tol=1e-12, max_iter=20000, svd_method="lapack").fit(X)
    net = mf.NLGBN([1, D], units="linear", max_iter=1500, infer_tol=1e-12, random_state=0,
                   progress=False)
    assert net.fit(X) is net
    history = net.history_
    assert np.all(np.diff(history) >= 0)
    assert history.shape == (net.n_iter_ + 1,)
    # with one hidden unit q is exact: the bound is the log-likelihood
    assert history[-1] == pytest.approx(fa.score(X), abs=1e-5)
    w_net = net.weights_[0][:, 0] * np.sqrt(net.variances_[0][0])
    np.testing.assert_allclose(np.outer(w_net, w_net) + np.diag(net.variances_[1]),
                               fa.get_covariance(), rtol=1e-3, atol=1e-4)
    np.testing.assert_allclose(net.biases_[1] + net.weights_[0][:, 0] * net.biases_[0][0], X.mean(axis=0),
                               atol=1e-8)
    # and the per-pattern bound is FactorAnalysis's per-pattern log-likelihood
    np.testing.assert_allclose(net.score_samples(X), fa.score_samples(X), rtol=0, atol=1e-4)


# ---------------------------------------------------------------------- M-step and EM
def test_sufficient_statistics_and_m_step_match_reference():
    net = random_net([2, 4, 5], MIXED, seed=31)
    X = net.sample(150, random_state=32)   # more than two blocks of statistics
    mu, lv = net._initial_state(X.shape[0])
    _, _, _, stats = net._estep(X, mu, lv, 1e-8, 200, 2, want_stats=True)
    st = stats.sum(axis=0) / X.shape[0]
    R = ref.sufficient_statistics(net, X, mu, lv)
    sizes = ref._sizes(net)
    U = sum(sizes)
    offs = np.concatenate([[0], np.cumsum(sizes)])
    np.testing.assert_allclose(st[:U], np.concatenate(R["mu"]), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(st[U:2 * U], np.concatenate(R["mu2"]), rtol=1e-12)
    np.testing.assert_allclose(st[2 * U:3 * U], np.concatenate(R["s2"]), rtol=1e-12)
    np.testing.assert_allclose(st[3 * U:3 * U + offs[-2]], np.concatenate(R["b"]), rtol=1e-11)
    soff = net._flat()["soff"]
    for l in range(2):
        P, C = sizes[l], sizes[l + 1]
        a = st[soff[l]:soff[l] + (P + 1) ** 2].reshape(P + 1, P + 1)
        c = st[soff[l] + (P + 1) ** 2:soff[l] + (P + 1) ** 2 + C * (P + 1)].reshape(C, P + 1)
        np.testing.assert_allclose(a, R["a"][l], rtol=1e-12)
        np.testing.assert_allclose(c, R["c"][l], rtol=1e-12, atol=1e-14)
    W, B, V = ref.m_step(net, R)
    F_before = ref.bound(net, X, mu, lv).sum()
    net._m_step(st, 0.01)
    for l in range(2):
        np.testing.assert_allclose(net.weights_[l], W[l], rtol=1e-8, atol=1e-10)
    for l in range(3):
        np.testing.assert_allclose(net.biases_[l], B[l], rtol=1e-8, atol=1e-10)
        np.testing.assert_allclose(net.variances_[l], V[l], rtol=1e-8, atol=1e-10)
    # the M-step maximises the bound at fixed q: perturbing any parameter lowers it
    F_after = ref.bound(net, X, mu, lv).sum()
    assert F_after >= F_before
    rng = np.random.default_rng(0)
    for _ in range(5):
        other = copy.deepcopy(net)
        other.weights_[1] = other.weights_[1] + 1e-3 * rng.normal(size=other.weights_[1].shape)
        other.variances_[1] = other.variances_[1] * np.exp(1e-3 * rng.normal(size=4))
        assert ref.bound(other, X, mu, lv).sum() < F_after


def test_em_bound_never_decreases_and_variances_floor():
    X = mf.datasets.make_continuous_bars(200, random_state=0)
    net = mf.NLGBN([1, 8, 36], units=["binary", "rectified", "linear"], max_iter=25,
                   random_state=0, progress=False)
    mu, lv = net._fit(X)
    history = net.history_
    assert history.shape == (26,) and net.n_iter_ == 25
    assert np.all(np.diff(history) >= 0)
    assert history[-1] > history[0] + 10
    assert np.all(net.variances_[-1] >= 0.01)
    # the last entry of the history is the bound on the training data at the final parameters
    assert net.bound_at(X, mu, np.exp(0.5 * lv)).mean() == pytest.approx(history[-1], rel=1e-12)


def test_thread_count_does_not_change_answers():
    X = mf.datasets.make_stereo(300, noisy=True, random_state=1)
    nets = []
    for threads in (1, 2):
        net = mf.NLGBN([1, 6, 24], units=["binary", "rectified", "linear"], max_iter=4,
                       n_threads=threads, random_state=3, progress=False).fit(X)
        nets.append((net, net.history_, net.infer(X, n_threads=threads)))
    (a, ha, ra), (b, hb, rb) = nets
    np.testing.assert_array_equal(ha, hb)
    for l in range(2):
        np.testing.assert_array_equal(a.weights_[l], b.weights_[l])
    for l in range(3):
        np.testing.assert_array_equal(a.variances_[l], b.variances_[l])
    np.testing.assert_array_equal(ra.bound, rb.bound)
    np.testing.assert_array_equal(ra.mu[1], rb.mu[1])


def test_read_only_input():
    net = random_net([2, 4, 5], MIXED, seed=2)
    X = net.sample(5, random_state=3)
    X.setflags(write=False)
    np.testing.assert_array_equal(net.score_samples(X), net.score_samples(X.copy()))


# ---------------------------------------------------------------------- model surface
def test_sample_moments_of_a_linear_net():
    rng = np.random.default_rng(0)
    w = rng.normal(size=(3, 1))
    net = mf.NLGBN.from_params([w], [np.array([1.0]), np.array([0.0, 1.0, -1.0])],
                               [np.array([0.5]), np.array([0.2, 0.3, 0.4])], units="linear")
    X = net.sample(200000, random_state=1)
    np.testing.assert_allclose(X.mean(axis=0), [w[0, 0], 1 + w[1, 0], -1 + w[2, 0]], atol=0.01)
    np.testing.assert_allclose(np.cov(X.T), 0.5 * w @ w.T + np.diag([0.2, 0.3, 0.4]), atol=0.02)
    layers = net.sample(4, random_state=2, return_all=True)
    assert [a.shape for a in layers] == [(4, 1), (4, 3)]


def test_sample_binary_top_unit_switches_its_children():
    net = mf.NLGBN.from_params([np.array([[5.0], [-5.0]])], [np.array([0.0]), np.zeros(2)],
                               [np.array([1.0]), np.full(2, 1e-4)], units="binary")
    top, X = net.sample(1000, random_state=0, return_all=True)
    on = top[:, 0] >= 0
    np.testing.assert_allclose(X[on], np.tile([5.0, -5.0], (on.sum(), 1)), atol=0.1)
    np.testing.assert_allclose(X[~on], 0.0, atol=0.1)


def test_infer_result_and_from_params_round_trip():
    net = random_net([2, 4, 5], MIXED, seed=3)
    X = net.sample(8, random_state=1)
    r = net.infer(X)
    assert isinstance(r, mf_base.InferenceResult) and r.method == "nlgbn"
    assert r.bound.shape == (8,) and r.converged.dtype == bool and np.all(r.converged)
    assert r.n_iter.shape == (8,) and np.all(r.n_iter >= 1) and r.tol == 1e-6
    assert [m.shape for m in r.mu] == [(8, 2), (8, 4), (8, 5)]
    assert [s.shape for s in r.sigma] == [(8, 2), (8, 4), (8, 5)]
    np.testing.assert_array_equal(r.mu[-1], X)
    assert np.all(r.sigma[-1] == 0) and np.all(r.sigma[0] > 0)
    twin = mf.NLGBN.from_params(net.weights, net.biases, net.variances, net.units)
    np.testing.assert_array_equal(twin.score_samples(X), r.bound)
    assert twin.score(X) == r.bound.mean()
    assert twin.units_ == net.units_ and twin.sizes == [2, 4, 5]
    assert twin.units_[1] == ("rectified", "linear", "binary", "sigmoidal")
    assert "NLGBN" in repr(twin) and "mean_bound" in repr(r)


def test_bad_input_raises_clear_errors():
    net = mf.NLGBN([2, 3, 4], random_state=0, progress=False)
    X = net.sample(5, random_state=0)
    with pytest.raises(ValueError, match="X must have 4 columns"):
        net.fit(X[:, :3])
    with pytest.raises(ValueError, match="X.*2D"):
        net.score_samples(X[0])
    bad = X.copy()
    bad[1, 2] = np.nan                                   # NaN marks a missing entry
    miss = np.zeros(X.shape, dtype=bool)
    miss[1, 2] = True
    np.testing.assert_array_equal(net.infer(bad).bound, net.infer(X, miss).bound)
    bad[1, 2] = np.inf
    with pytest.raises(ValueError, match="X contains infinity"):
        net.infer(bad)
    with pytest.raises(ValueError, match="X contains infinity"):
        net.fit(bad)
    with pytest.raises(ValueError, match="missing must have shape"):
        net.infer(X, miss[:, :2])
    with pytest.raises(TypeError, match="missing must be a boolean mask"):
        net.infer(X, miss * 0.5)
    np.testing.assert_array_equal(net.score_samples(X.astype(object)), net.score_samples(X))
    with pytest.raises(TypeError, match="X"):
        net.score_samples(np.array([["a"] * 4]))
    with pytest.raises(ValueError, match="X must hold at least one pattern"):
        net.fit(X[:0])
    with pytest.raises(ValueError, match="X must hold at least one pattern"):
        net.score(X[:0])
    assert net.score_samples(X[:0]).shape == (0,)
    with pytest.raises(ValueError, match="unknown unit type"):
        mf.NLGBN([2, 3], units=["tanh", "linear"]).sample()
    with pytest.raises(ValueError, match="visible"):
        mf.NLGBN([2, 3], units=["binary", "binary"]).fit(np.zeros((3, 3)))
    with pytest.raises(ValueError, match="units\\[1\\]"):
        mf.NLGBN([2, 3, 4], units=["binary", ["rectified"] * 2, "linear"]).sample()
    with pytest.raises(ValueError, match="one entry per layer"):
        mf.NLGBN([2, 3, 4], units=["binary", "linear"]).sample()
    with pytest.raises(ValueError, match="at least two layers"):
        mf.NLGBN([3]).sample()
    with pytest.raises(TypeError, match="sizes"):
        mf.NLGBN("abc").sample()
    with pytest.raises(ValueError, match="variances\\[1\\]"):
        mf.NLGBN.from_params(net.weights, net.biases, [np.ones(2), np.zeros(3), np.ones(4)])
    with pytest.raises(ValueError, match="weights\\[0\\] must have shape"):
        mf.NLGBN.from_params([np.ones((2, 3)), net.weights[1]], net.biases, net.variances)
    with pytest.raises(ValueError, match="max_iter"):
        net.set_params(max_iter=-1).fit(X)
    net.set_params(max_iter=100)
    with pytest.raises(ValueError, match="tol"):
        net.infer(X, tol=0.0)
    with pytest.raises(ValueError, match="min_variance"):
        net.set_params(min_variance=-1.0).fit(X)
    net.set_params(min_variance=0.01)
    with pytest.raises(ValueError, match="n_threads"):
        net.infer(X, n_threads=0)
    with pytest.raises(ValueError, match="sigma must be positive"):
        net.bound_at(X, np.zeros((5, 5)), np.zeros((5, 5)))


# ---------------------------------------------------------------------- protocol
BARS_NET = dict(sizes=[1, 8, 36], units=["binary", "rectified", "linear"])


def test_constructor_stores_hyperparameters_and_clone_works():
    from sklearn.base import BaseEstimator, clone

    g = mf.NLGBN(**BARS_NET, weight_scale=0.5, max_iter=7, tol=1e-3, infer_tol=1e-5,
                 infer_max_iter=30, min_variance=0.02, warm_start=True, n_threads=1,
                 random_state=4, progress=False)
    assert isinstance(g, BaseEstimator) and isinstance(g, mf_base.PersistMixin)
    params = g.get_params()
    assert params == dict(BARS_NET, weight_scale=0.5, max_iter=7, tol=1e-3, infer_tol=1e-5,
                          infer_max_iter=30, min_variance=0.02, warm_start=True, n_threads=1,
                          random_state=4, progress=False)
    assert params["units"] is BARS_NET["units"]          # stored unchanged
    assert not any(k.endswith("_") for k in vars(g))      # nothing drawn before it is needed
    X = mf.datasets.make_continuous_bars(60, random_state=0)
    with pytest.warns(mf_base.ConvergenceWarning, match="tol=0.001"):
        g.fit(X)
    twin = clone(g)
    assert twin.get_params() == g.get_params() and not hasattr(twin, "weights_")
    # clone of a fitted model with an int seed refits to the same parameters
    with pytest.warns(mf_base.ConvergenceWarning, match="tol=0.001"):
        twin.fit(X)
    np.testing.assert_array_equal(twin.history_, g.history_)
    with pytest.raises(NotFittedError):
        mf.NLGBN([2, 3]).weights
    with pytest.raises(AttributeError):
        g.weights = []                                    # the aliases are read-only
    assert g.weights is g.weights_ and g.biases is g.biases_ and g.variances is g.variances_


@pytest.mark.parametrize("model", [
    dict(sizes=[2, None]),
    dict(sizes=[1, 3, None], units=["binary", ["rectified", "sigmoidal", "binary"], "linear"]),
])
def test_scikit_learn_check_estimator(model):
    # sizes[-1] = None takes the visible units from the data, so that scikit-learn's checks
    # (which fit on data of several widths) apply; one check is skipped by scikit-learn itself
    # (array API input, only with SCIPY_ARRAY_API set)
    from sklearn.utils.estimator_checks import check_estimator

    g = mf.NLGBN(**model, max_iter=3, random_state=0, progress=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        results = check_estimator(g, on_fail=None)
    failed = [f"{r['check_name']}: {r['exception']}" for r in results if r["status"] == "failed"]
    assert failed == []
    assert sum(r["status"] == "passed" for r in results) >= 35


def test_visible_units_from_the_data():
    X = mf.datasets.make_continuous_bars(40, random_state=0)
    g = mf.NLGBN([1, 4, None], units=["binary", "rectified", "linear"], max_iter=2,
                 random_state=0, progress=False)
    with pytest.raises(ValueError, match="fit the model before sampling"):
        g.sample(3)
    g.fit(X)
    assert g.sizes == [1, 4, None] and g.n_features_in_ == 36
    assert g.weights_[1].shape == (36, 4) and g.sample(2).shape == (2, 36)
    with pytest.raises(ValueError, match="X has 5 features, but NLGBN is expecting 36"):
        g.score(X[:, :5])
    assert g.fit(X[:, :7]).weights_[1].shape == (7, 4)      # a cold start follows the data


def test_parameters_are_drawn_lazily_and_deterministically():
    g = mf.NLGBN([1, 16, 36], units=["binary", "rectified", "linear"], random_state=0)
    S = g.sample(10, random_state=1)
    assert S.shape == (10, 36) and np.all(np.isfinite(S))
    assert [w.shape for w in g.weights_] == [(16, 1), (36, 16)]
    h = mf.NLGBN([1, 16, 36], units=["binary", "rectified", "linear"], random_state=0)
    np.testing.assert_array_equal(h.score_samples(S), g.score_samples(S))
    np.testing.assert_array_equal(h.weights_[1], g.weights_[1])
    assert g.units_ == (("binary",), ("rectified",) * 16, ("linear",) * 36)


def test_fit_returns_self_history_and_tol():
    X = mf.datasets.make_continuous_bars(100, random_state=0)
    g = mf.NLGBN(**BARS_NET, max_iter=200, tol=0.05, random_state=0, progress=False)
    assert g.fit(X) is g
    assert 1 <= g.n_iter_ < 200 and g.history_.shape == (g.n_iter_ + 1,)
    assert np.all(np.diff(g.history_) >= 0)
    assert g.history_[-1] - g.history_[-2] <= 0.05 < g.history_[1] - g.history_[0]
    with pytest.warns(mf_base.ConvergenceWarning, match="max_iter=2"):
        g.set_params(max_iter=2, tol=1e-9).fit(X)
    assert g.n_iter_ == 2
    # warm_start continues from the current parameters; a cold start redraws them
    g.set_params(max_iter=3, tol=None, warm_start=True)
    before = g.score(X)
    g.fit(X)
    assert g.history_[0] >= before - 1e-9 and g.n_iter_ == 3
    assert g.set_params(warm_start=False).fit(X).history_[0] < g.history_[-1] - 1.0


def test_progress_bar_shows_only_when_asked_and_after_the_delay(capfd, monkeypatch):
    X = mf.datasets.make_continuous_bars(40, random_state=0)
    monkeypatch.delenv("MFENGINE_PROGRESS_DELAY", raising=False)
    mf.NLGBN(**BARS_NET, max_iter=3, random_state=0).fit(X)      # a short run: no bar
    assert capfd.readouterr().err == ""
    monkeypatch.setenv("MFENGINE_PROGRESS_DELAY", "0")
    mf.NLGBN(**BARS_NET, max_iter=3, random_state=0, progress=False).fit(X)
    assert capfd.readouterr().err == ""
    mf.NLGBN(**BARS_NET, max_iter=3, random_state=0, progress=True).fit(X)
    assert "NLGBN EM" in capfd.readouterr().err


def test_unconverged_estep_warns():
    X = mf.datasets.make_continuous_bars(50, noisy=True, random_state=0)
    g = mf.NLGBN(**BARS_NET, max_iter=2, infer_max_iter=1, random_state=0, progress=False)
    with pytest.warns(mf_base.ConvergenceWarning, match="NLGBN.fit.*did not converge"):
        g.fit(X)
    with pytest.warns(mf_base.ConvergenceWarning, match="NLGBN.infer: 50 of 50"):
        r = g.infer(X)
    assert not r.converged.any() and np.all(r.n_iter == 1)
    with pytest.warns(mf_base.ConvergenceWarning, match="NLGBN.score_samples"):
        g.score_samples(X)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert g.infer(X, max_iter=1000).converged.all()


def test_save_load_round_trip_is_bit_identical(tmp_path):
    X = mf.datasets.make_stereo(80, noisy=True, random_state=0)
    g = mf.NLGBN([1, 5, 24], units=["binary", ["rectified", "sigmoidal", "binary", "linear", "rectified"],
                                    "linear"], max_iter=4, random_state=2, progress=False).fit(X)
    path = g.save(tmp_path / "g")
    back = mf_base.load(path)
    assert type(back) is mf.NLGBN and back.get_params() == g.get_params()
    np.testing.assert_array_equal(back.score_samples(X), g.score_samples(X))
    np.testing.assert_array_equal(back.history_, g.history_)
    assert back.units_ == g.units_ and back.n_iter_ == g.n_iter_
    np.testing.assert_array_equal(back.sample(5, random_state=3), g.sample(5, random_state=3))


def test_pickle_does_not_grow_with_the_training_set():
    import pickle

    sizes = []
    for n in (100, 10_000):
        X = mf.datasets.make_continuous_bars(n, random_state=0)
        g = mf.NLGBN(**BARS_NET, max_iter=2, infer_max_iter=20, random_state=0,
                     progress=False)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", mf_base.ConvergenceWarning)
            g.fit(X)
        assert g.n_iter_ == 2
        sizes.append(len(pickle.dumps(g)))
    assert sizes[0] == sizes[1] < 10_000


# ---------------------------------------------------------------------- documentation
PUBLIC = ["mfengine.nlgbn.model", "mfengine.nlgbn.NLGBN", "mfengine.nlgbn.NLGBNInference"] + [
    f"mfengine.nlgbn.NLGBN.{name}" for name in (
        "fit", "infer", "score_samples", "score", "sample", "bound_at", "from_params",
        "weights", "biases", "variances", "impute", "log_likelihood", "partial_fit",
        "sample_posterior")
]


@pytest.mark.parametrize("name", PUBLIC)
def test_numpydoc_validation(name):
    validate = pytest.importorskip("numpydoc.validate").validate
    # extended summaries, See Also and Examples are optional on methods (scikit-learn's rule);
    # the classes carry examples, run below
    errors = [(code, msg) for code, msg in validate(name)["errors"]
              if code not in ("ES01", "SA01") and not (code == "EX01" and name.count(".") > 2)]
    assert errors == []


def test_docstring_examples_run():
    import doctest

    import mfengine.nlgbn
    import mfengine.nlgbn.model

    for module in (mfengine.nlgbn.model, mfengine.nlgbn):
        result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
        assert result.failed == 0
    assert doctest.testmod(mfengine.nlgbn.model).attempted >= 8
    assert mfengine.nlgbn.__doc__ and "NLGBN" in mfengine.nlgbn.__doc__


# ---------------------------------------------------------------------- data sets
def test_continuous_bars():
    X = mf.datasets.make_continuous_bars(4000, random_state=0)
    assert X.shape == (4000, 36)
    img = X.reshape(-1, 6, 6)
    rows_const = np.all(img == img[:, :, :1], axis=(1, 2))     # horizontal bars
    cols_const = np.all(img == img[:, :1, :], axis=(1, 2))     # vertical bars
    assert np.all(rows_const | cols_const)
    assert X.min() >= 0 and X.max() <= 5
    # each bar is on with probability 0.3 and intensity U[0, 5] (mean 2.5)
    bars = np.where(rows_const[:, None], img[:, :, 0], img[:, 0, :])
    assert np.mean(bars > 0) == pytest.approx(0.3, abs=0.02)
    assert bars[bars > 0].mean() == pytest.approx(2.5, abs=0.1)
    only_h = rows_const & ~cols_const
    only_v = cols_const & ~rows_const
    assert only_h.sum() / (only_h.sum() + only_v.sum()) == pytest.approx(0.5, abs=0.03)
    noisy = mf.datasets.make_continuous_bars(4000, noisy=True, random_state=0)
    assert np.var(noisy - X) == pytest.approx(1.0, abs=0.03)
    np.testing.assert_array_equal(mf.datasets.make_continuous_bars(3, random_state=5),
                                  mf.datasets.make_continuous_bars(3, random_state=5))


def test_stereo():
    X = mf.datasets.make_stereo(3000, random_state=0)
    assert X.shape == (3000, 24)
    left, right = X[:, :12], X[:, 12:]
    assert X.min() >= 0
    # the right image is the left one shifted by one pixel, one way or the other (up to what
    # enters or leaves at the edges)
    shifted_r = np.abs(right[:, 3:9] - left[:, 2:8]).max(axis=1) < 1e-12
    shifted_l = np.abs(right[:, 3:9] - left[:, 4:10]).max(axis=1) < 1e-12
    assert np.all(shifted_r | shifted_l)
    assert shifted_r.mean() == pytest.approx(0.5, abs=0.03)
    # four dots of mean brightness 2.5, each of total activity b sqrt(2 pi) (blur 1 pixel),
    # minus what falls outside [0, 12]
    total = left.sum(axis=1).mean()
    assert 0.85 * 4 * 2.5 * np.sqrt(2 * np.pi) < total < 4 * 2.5 * np.sqrt(2 * np.pi)
    noisy = mf.datasets.make_stereo(3000, noisy=True, random_state=0)
    assert np.var(noisy - X) == pytest.approx(1.0, abs=0.03)
    with pytest.raises(ValueError, match="'n' parameter of make_stereo must be"):
        mf.datasets.make_stereo(-1)
    with pytest.raises(ValueError, match="blur"):
        mf.datasets.make_stereo(3, blur=0.0)


def test_infer_result_does_not_share_memory_with_X():
    """The visible layer of infer's result is a copy: editing it leaves the caller's X alone."""
    g = mf.NLGBN([2, 6], units="linear", random_state=0, progress=False)
    X = g.sample(5, random_state=1)
    r = g.infer(X)
    assert not np.shares_memory(r.mu[-1], X)
    np.testing.assert_array_equal(r.mu[-1], X)
