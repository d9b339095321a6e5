"""ContextHMM's output variances (``covariance_type``, ``covars_``): the bound and ln P(x)
against an enumeration with the true Gaussian density, the variances' M-step against
hmmlearn and against the bound's own maximum, scale invariance, checks and files."""
import itertools
import warnings

import numpy as np
import pytest
from hmmlearn.hmm import GaussianHMM
from scipy.special import logsumexp
from scipy.stats import norm

import mfengine as mf
from mfengine._base import ConvergenceWarning
from mfengine._validation import InvalidParameterError
from mfengine.hmm import _learn, _solve


def model(covariance_type="diag", context="both", D=2, seed=0):
    rng = np.random.default_rng(seed)
    h = mf.ContextHMM(2, D, lag=2, context=context, covariance_type=covariance_type,
                      progress=False)
    h.startprob_ = np.array([0.6, 0.4])
    h.transmat_ = np.array([[0.8, 0.2], [0.3, 0.7]])
    h.means_ = rng.normal(size=(2, D)) * 2.0
    if context in ("right", "both"):
        h.right_means_ = 0.5 * rng.normal(size=(2, D))
    if context in ("left", "both"):
        h.left_means_ = 0.5 * rng.normal(size=(2, D))
    v = rng.uniform(0.3, 3.0, D)
    h.covars_ = np.full(2, v[0]) if covariance_type == "spherical" else np.tile(v, (2, 1))
    return h


def variances(h):
    c = np.asarray(h.covars_, dtype=float)
    return np.full(h.means_.shape[1], c[0]) if c.ndim == 1 else c[0]


def output_means(h, s):
    """The output means of the path ``s``."""
    L = h.lag
    m = h.means_[s].copy()
    if h.context in ("right", "both"):
        m[:-L] += h.right_means_[s[L:]]
    if h.context in ("left", "both"):
        m[L:] += h.left_means_[s[:-L]]
    return m


def enumerate_loglik(h, X):
    """ln P(x) by summing P(x, s) over every path, with scipy's Gaussian density."""
    T = X.shape[0]
    sd = np.sqrt(variances(h))
    seen = ~np.isnan(X)
    terms = []
    for path in itertools.product(range(2), repeat=T):
        s = np.array(path)
        lp = np.log(h.startprob_[s[0]]) + np.log(h.transmat_[s[:-1], s[1:]]).sum()
        lp += norm.logpdf(X, output_means(h, s), sd)[seen].sum()
        terms.append(lp)
    return logsumexp(terms)


@pytest.mark.parametrize("covariance_type", ["diag", "spherical"])
@pytest.mark.parametrize("context", ["right", "left", "both"])
def test_bounds_against_enumeration_with_missing_values(covariance_type, context):
    h = model(covariance_type, context)
    X, _ = h.sample(8, random_state=3)
    X[2, 1] = np.nan
    X[5] = np.nan             # a missing frame
    exact = enumerate_loglik(h, X)
    assert h.score(X, method="exact") == pytest.approx(exact, rel=0, abs=1e-9)
    structured, naive = h.score(X), h.score(X, method="naive")
    assert naive <= structured + 1e-9
    assert structured <= exact + 1e-9
    # with the context tables at zero the structured bound is the exact log-likelihood,
    # hmmlearn's with the same (per-state, here equal) diagonal covariances
    h.right_means_ = np.zeros_like(h.means_)
    h.left_means_ = np.zeros_like(h.means_)
    Xo, _ = h.sample(40, random_state=4)
    o = GaussianHMM(2, covariance_type="diag", init_params="", params="")
    o.startprob_, o.transmat_, o.means_ = h.startprob_, h.transmat_, h.means_
    o.covars_ = np.tile(variances(h), (2, 1))
    assert h.score(Xo) == pytest.approx(o.score(Xo), rel=1e-12)
    assert h.score(Xo, method="exact") == pytest.approx(o.score(Xo), rel=1e-12)


def test_decode_log_probability_is_the_joint_with_the_variances():
    h = model("diag", "both")
    X, _ = h.sample(30, random_state=5)
    logprob, path = h.decode(X)
    sd = np.sqrt(variances(h))
    ref = (np.log(h.startprob_[path[0]]) + np.log(h.transmat_[path[:-1], path[1:]]).sum()
           + norm.logpdf(X, output_means(h, path), sd).sum())
    assert logprob == pytest.approx(ref, rel=1e-12)


def test_sample_has_the_variances():
    h = model("diag", "right", D=3)
    X, s = h.sample(20000, random_state=6)
    np.testing.assert_allclose((X - output_means(h, s)).var(axis=0), variances(h), rtol=0.05)


def one_feature_data(seed=1, T=600):
    rng = np.random.default_rng(seed)
    s = [0]
    for _ in range(T - 1):
        s.append(s[-1] if rng.random() < 0.9 else int(rng.integers(3)))
    s = np.array(s)
    return (np.array([0.0, 2.0, 4.0])[s] + 0.7 * rng.standard_normal(T))[:, None]


def start(h, D):
    h.startprob_ = np.full(3, 1 / 3)
    h.transmat_ = np.array([[0.5, 0.3, 0.2], [0.2, 0.6, 0.2], [0.3, 0.3, 0.4]])
    h.means_ = np.linspace(0.3, 3.0, 3)[:, None] + np.arange(D)[None, :] * 0.1
    return h


def test_baum_welch_with_one_feature_is_hmmlearns_tied():
    # with one feature a variance shared by the states is hmmlearn's "tied" covariance
    X = one_feature_data()
    m = start(mf.ContextHMM(3, 1, lag=2, context="both", max_iter=0, bw_max_iter=6, tol=None,
                            init_params="", params="stmc", min_covar=1e-12, progress=False), 1)
    m.covars_ = np.full((3, 1), 2.0)
    m.fit(X)
    o = start(GaussianHMM(3, covariance_type="tied", n_iter=6, tol=0.0, params="stmc",
                          init_params="", implementation="scaling", covars_prior=0.0,
                          covars_weight=0.0, min_covar=1e-12), 1)
    o.covars_ = np.array([[2.0]])
    o.fit(X)
    np.testing.assert_allclose(m.covars_.ravel(), o.covars_.ravel(), rtol=1e-10)
    np.testing.assert_allclose(m.means_, o.means_, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(m.history_, o.monitor_.history, rtol=1e-12)


@pytest.mark.parametrize("covariance_type", ["diag", "spherical"])
def test_first_variance_step_is_the_diagonal_of_hmmlearns_tied(covariance_type):
    # one Baum-Welch iteration from the same start: hmmlearn's tied (full) covariance has
    # our per-feature variances on its diagonal (the means' step does not see the
    # covariance); "spherical" pools them
    rng = np.random.default_rng(2)
    X = np.concatenate([one_feature_data(3) + rng.normal(size=(600, 1)) * [0.0, 0.5, 1.0],
                        one_feature_data(4) * [1.0, -1.0, 2.0]])
    m = start(mf.ContextHMM(3, 3, lag=1, context="right", max_iter=0, bw_max_iter=1,
                            tol=None, init_params="", params="stmc", min_covar=1e-12,
                            covariance_type=covariance_type, progress=False), 3)
    v0 = np.array([1.0, 1.5, 2.0]) if covariance_type == "diag" else np.full(3, 1.5)
    m.covars_ = np.tile(v0, (3, 1)) if covariance_type == "diag" else np.full(3, 1.5)
    m.fit(X, [600, 600])
    o = start(GaussianHMM(3, covariance_type="tied", n_iter=1, tol=0.0, params="stmc",
                          init_params="", implementation="scaling", covars_prior=0.0,
                          covars_weight=0.0, min_covar=1e-12), 3)
    o.covars_ = np.diag(v0)
    o.fit(X, [600, 600])
    d = np.diag(o.covars_[0])
    want = d if covariance_type == "diag" else np.full(3, d.mean())
    got = m.covars_[0] if covariance_type == "diag" else np.full(3, m.covars_[0])
    np.testing.assert_allclose(got, want, rtol=1e-10)


@pytest.mark.parametrize("covariance_type", ["diag", "spherical"])
def test_variance_step_maximises_the_structured_bound_with_q_fixed(covariance_type):
    # the chain Q of one structured E-step held fixed (its potentials, no sweeps): the new
    # variances are the maximum of the bound over the variances, the tables fixed
    h = model(covariance_type, "both", D=2, seed=7)
    X, _ = h.sample(300, random_state=8)
    X[np.random.default_rng(9).random(X.shape) < 0.1] = np.nan
    params = h._params()
    _, offsets = h._check_X(X, None)
    problem = h._problem()
    r = _solve.estep(problem, params, X, offsets)
    v = _learn.mstep_variances(params, r, covariance_type, 1e-12)
    fixed = problem.__class__(**{**problem.__dict__, "max_iter": 0})

    def bound(var):
        P = params.replace(variances=np.ascontiguousarray(var))
        return float(_solve.solve(fixed, P, X, offsets, "structured", init=r.logpot)
                     .bound.sum())

    best = bound(v)
    assert best > bound(params.variances)
    for k in range(2):
        for f in (0.99, 1.01):
            step = np.ones(2)
            if covariance_type == "diag":
                step[k] = f
            else:
                step[:] = f
            assert bound(v * step) < best


def test_variance_statistics_against_numpy_first_order():
    # with the context tables at zero Q is the exact posterior: the expected squared
    # residuals are sum_t sum_s gamma_ts (x_td - U_sd)^2 over the observed values
    h = model("diag", "right", D=3, seed=10)
    h.right_means_ = np.zeros((2, 3))
    X, _ = h.sample(200, random_state=11)
    X[np.random.default_rng(12).random(X.shape) < 0.15] = np.nan
    params = h._params()
    _, offsets = h._check_X(X, None)
    r = _solve.estep(h._problem(), params, X, offsets, first_order=True)
    gamma = h.predict_proba(X)
    res = np.where(np.isnan(X)[:, None, :], 0.0, (X[:, None, :] - h.means_[None]) ** 2)
    want = np.einsum("ts,tsd->d", gamma, res) / np.sum(~np.isnan(X), axis=0)
    got = _learn.mstep_variances(params, r, "diag", 1e-12)
    np.testing.assert_allclose(got, want, rtol=1e-9)


@pytest.mark.parametrize("covariance_type", ["diag", "spherical"])
def test_scaling_the_data_changes_nothing_decoded(covariance_type):
    g = model("diag", "both", D=2, seed=13)
    g.means_ = np.array([[0.0, 0.0], [3.0, 1.0]])
    X, _ = g.sample(400, random_state=14)
    fits = []
    for scale in (1.0, 5.0):
        # (min_covar, added to the starting variances, is the one scale the data do not set)
        h = mf.ContextHMM(2, 2, lag=1, context="both", covariance_type=covariance_type,
                          max_iter=10, bw_max_iter=10, min_covar=1e-12, random_state=0,
                          progress=False)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            h.fit(scale * X)
        fits.append((h, h.predict(scale * X)))
    (a, pa), (b, pb) = fits
    np.testing.assert_array_equal(pa, pb)
    np.testing.assert_allclose(b.covars_, 25.0 * a.covars_, rtol=1e-6)
    np.testing.assert_allclose(b.means_, 5.0 * a.means_, rtol=1e-6, atol=1e-9)
    # ln P of the scaled data is lower by ln 5 per value
    np.testing.assert_allclose(b.history_, a.history_ - X.size * np.log(5.0), rtol=1e-8)
    # the unit covariance (held fixed) does not have that property
    u = mf.ContextHMM(2, 2, lag=1, context="both", params="stmrl", init_params="stmrl",
                      max_iter=10, bw_max_iter=10, random_state=0, progress=False)
    u.covars_ = np.ones((2, 2))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        u.fit(5.0 * X)
    np.testing.assert_array_equal(u.covars_, 1.0)


def test_fit_never_decreases_with_learned_variances():
    g = model("diag", "both", D=2, seed=15)
    X, _ = g.sample(500, random_state=16)
    X[np.random.default_rng(17).random(X.shape) < 0.1] = np.nan
    for covariance_type in ("diag", "spherical"):
        h = mf.ContextHMM(2, 2, lag=1, context="both", covariance_type=covariance_type,
                          max_iter=15, tol=None, random_state=0, progress=False).fit(X)
        for part in (h.history_[:h.bw_n_iter_], h.history_[h.bw_n_iter_:]):
            assert np.all(np.diff(part) >= -1e-9 * np.abs(part[1:]))
        assert h.covars_.shape == ((2,) if covariance_type == "spherical" else (2, 2))
        assert np.all(h.covars_ == h.covars_[:1]) and np.all(h.covars_ >= h.min_covar)


def test_bad_covars_are_refused_by_name():
    h = model("diag", "right")
    X, _ = h.sample(10, random_state=0)
    h.covars_ = np.array([[1.0, 2.0], [1.0, 3.0]])
    with pytest.raises(ValueError, match="covars_ must have the same row for every state"):
        h.score(X)
    h.covars_ = np.ones(2)
    with pytest.raises(ValueError, match=r"covars_ must have shape \(n_states, n_features\)"):
        h.score(X)
    for bad in (0.0, -1.0, np.nan, np.inf):
        h.covars_ = np.full((2, 2), bad)
        with pytest.raises(ValueError, match="covars_ must hold variances in"):
            h.score(X)
    s = model("spherical", "right")
    s.covars_ = np.ones((2, 2))
    with pytest.raises(ValueError, match=r"covars_ must have shape \(n_states,\)"):
        s.score(X)
    with pytest.raises(InvalidParameterError, match="covariance_type"):
        mf.ContextHMM(covariance_type="full").fit(X)
    with pytest.raises(InvalidParameterError, match="min_covar"):
        mf.ContextHMM(min_covar=-1.0).fit(X)


def test_covars_survive_save_and_load(tmp_path):
    h = model("spherical", "both")
    X, _ = h.sample(30, random_state=1)
    path = h.save(tmp_path / "h.npz")
    g = mf.load(path)
    assert g.covariance_type == "spherical"
    np.testing.assert_array_equal(g.covars_, h.covars_)
    assert g.score(X) == h.score(X)
