"""ContextHMM: kernels against slow references, bounds against exact likelihoods, learning."""
import numpy as np
import pytest
from hmmlearn.hmm import GaussianHMM
from scipy.special import roots_hermitenorm

import mfengine as mf
from mfengine.hmm import _chain

import reference_hmm as R


def random_hmm(n=3, D=2, lag=2, context="both", sep=1.5, cscale=0.5, sticky=1.0, seed=0,
               **kw):
    rng = np.random.default_rng(seed)
    h = mf.ContextHMM(n, D, lag=lag, context=context, sweep_tol=1e-13, max_sweeps=400, **kw)
    h.means_ = sep * rng.normal(size=(n, D))
    A = rng.random((n, n)) + sticky * np.eye(n)
    h.transmat_ = A / A.sum(1, keepdims=True)
    sp = rng.random(n) + 0.2
    h.startprob_ = sp / sp.sum()
    if context in ("right", "both"):
        h.right_means_ = cscale * rng.normal(size=(n, D))
    if context in ("left", "both"):
        h.left_means_ = cscale * rng.normal(size=(n, D))
    return h


CONTEXTS = ["right", "left", "both"]


# ------------------------------------------------------------------------------------------
# kernels against references

def test_forward_backward_matches_log_space_reference():
    rng = np.random.default_rng(1)
    for T, n in [(1, 3), (2, 2), (40, 4), (300, 3)]:
        pi = rng.random(n); pi /= pi.sum()
        A = rng.random((n, n)); A[0, 1] = 0.0; A /= A.sum(1, keepdims=True)
        logpot = 30 * rng.normal(size=(T, n))   # large spreads: scaling must hold up
        g, xi, lz = _chain.forward_backward(pi, A, logpot)
        g2, xi2, lz2 = R.forward_backward(pi, A, logpot)
        np.testing.assert_allclose(lz, lz2, rtol=1e-12, atol=1e-10)
        np.testing.assert_allclose(g, g2, rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(xi, xi2, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("context", CONTEXTS)
@pytest.mark.parametrize("lag", [1, 2, 3])
def test_exact_matches_brute_force(context, lag):
    h = random_hmm(n=2, lag=lag, context=context, seed=lag)
    p = R.params_of(h)
    for T in (1, 3, 7):
        X, _ = h.sample(T, random_state=T)
        assert h.score(X, method="exact") == pytest.approx(R.brute_force_loglik(p, X), abs=1e-10)


@pytest.mark.parametrize("context", CONTEXTS)
def test_exact_matches_augmented_reference_on_longer_sequences(context):
    h = random_hmm(n=3, lag=2, context=context, seed=5)
    p = R.params_of(h)
    Xs = [h.sample(T, random_state=T)[0] for T in (25, 4, 40)]
    got = h.score_sequences(Xs, method="exact")
    want = [R.augmented_loglik(p, X) for X in Xs]
    np.testing.assert_allclose(got, want, rtol=1e-11)


@pytest.mark.parametrize("context", CONTEXTS)
def test_naive_bound_is_the_elbo_of_its_marginals(context):
    h = random_hmm(context=context, seed=11)
    p = R.params_of(h)
    X, _ = h.sample(6, random_state=2)
    r = h.infer(X, method="naive")
    assert r.bound[0] == pytest.approx(R.naive_elbo(p, X, r.gamma), abs=1e-10)
    q0 = R.forward_backward(p["pi"], p["A"], R._site_terms(p, X))[0]
    q, hist = R.naive_solve(p, X, q0, tol=1e-13)
    assert r.bound[0] == pytest.approx(hist[-1], abs=1e-8)
    np.testing.assert_allclose(r.gamma, q, atol=1e-6)


@pytest.mark.parametrize("context", CONTEXTS)
def test_structured_matches_slow_reference(context):
    h = random_hmm(context=context, seed=12)
    p = R.params_of(h)
    X, _ = h.sample(6, random_state=3)
    Xc, off = h._check_X(X, None)
    r = h._run(Xc, off, "structured")
    # the bound the kernel reports is the one of the chain Q it returns (enumerated)
    b, g = R.structured_bound(p, X, r["logpot"])
    assert r["bound"][0] == pytest.approx(b, abs=1e-8)
    np.testing.assert_allclose(r["gamma"], g, atol=1e-12)
    # and the whole iteration, from both starts, gives the same answer
    q0 = R.forward_backward(p["pi"], p["A"], R._site_terms(p, X))[0]
    qn, _ = R.naive_solve(p, X, q0, tol=1e-13)
    b1 = R.structured_solve(p, X, tol=1e-13)[0]
    b2 = R.structured_solve(p, X, init=qn, tol=1e-13)[0]
    assert r["bound"][0] == pytest.approx(max(b1, b2), abs=1e-7)


def test_link_variable_identity():
    """exp(-a b) = exp(-lam^2 a^2/2 - b^2/(2 lam^2)) E_{z~N(0,1)} exp(z (lam a - b / lam))."""
    z, w = roots_hermitenorm(80)
    w = w / w.sum()
    for a, b, lam in [(0.3, -1.2, 0.7), (2.0, 1.5, 1.3), (-1.0, 0.4, 2.5)]:
        rhs = np.exp(-0.5 * lam**2 * a**2 - 0.5 * b**2 / lam**2) * np.sum(w * np.exp(z * (lam * a - b / lam)))
        assert rhs == pytest.approx(np.exp(-a * b), rel=1e-12)


# ------------------------------------------------------------------------------------------
# bounds against exact likelihoods

def test_zero_context_structured_equals_exact_equals_first_order_hmm():
    h = random_hmm(n=3, D=2, lag=3, context="both", cscale=0.0, seed=4)
    assert not np.any(h.right_means_) and not np.any(h.left_means_)
    Xs = [h.sample(T, random_state=T)[0] for T in (50, 7, 1, 120)]
    lengths = [len(X) for X in Xs]
    X = np.concatenate(Xs)
    st = h.score_sequences(X, lengths)
    ex = h.score_sequences(X, lengths, method="exact")
    ref = [R.first_order_loglik(h.startprob_, h.transmat_, h.means_, x) for x in Xs]
    np.testing.assert_allclose(st, ref, rtol=1e-12)
    np.testing.assert_allclose(ex, ref, rtol=1e-12)
    oracle = GaussianHMM(n_components=3, covariance_type="spherical", init_params="", params="")
    oracle.startprob_ = h.startprob_
    oracle.transmat_ = h.transmat_
    oracle.means_ = h.means_
    oracle.covars_ = np.ones(3)
    assert h.score(X, lengths) == pytest.approx(oracle.score(X, lengths), rel=1e-10)
    assert h.score(X, lengths, method="naive") <= h.score(X, lengths) + 1e-9


@pytest.mark.parametrize("context", CONTEXTS)
def test_bounds_below_exact(context):
    for seed in range(6):
        h = random_hmm(n=3, lag=2, context=context, seed=seed, cscale=[0.2, 1.0][seed % 2],
                       sep=[0.7, 2.0, 4.0][seed % 3])
        X, _ = h.sample(30, random_state=seed)
        ex = h.score(X, method="exact")
        assert h.score(X) <= ex + 1e-9
        assert h.score(X, method="naive") <= ex + 1e-9


def test_structured_above_naive_when_context_is_weak():
    # the regime the approximation is built for (Saul & Jordan 1996, sec. 3): context weak
    # next to the first-order structure; the chain's exact correlations then dominate
    for context in CONTEXTS:
        for seed in range(6):
            h = random_hmm(n=3, lag=2, context=context, seed=seed, sep=0.7, cscale=0.1,
                           sticky=3.0)
            Xs = [h.sample(60, random_state=100 + seed)[0], h.sample(25, random_state=seed)[0]]
            st = h.score_sequences(Xs)
            nv = h.score_sequences(Xs, method="naive")
            assert np.all(st >= nv), (context, seed, st - nv)


@pytest.mark.parametrize("method", ["structured", "naive"])
@pytest.mark.parametrize("context", CONTEXTS)
def test_bound_never_decreases_over_sweeps(method, context):
    for seed in range(4):
        h = random_hmm(n=4, lag=3, context=context, seed=seed, cscale=0.8, sep=1.0)
        X, _ = h.sample(80, random_state=seed)
        r = h.infer(X, method=method)
        hist = r.history[0][: r.n_sweeps[0] + 1]
        assert np.all(np.isfinite(hist))
        assert np.all(np.diff(hist) >= -1e-12 * np.abs(hist[:-1])), np.diff(hist)
        assert r.bound[0] == hist[-1]


def test_several_sequences_list_and_lengths_agree_and_threads_do_not_matter():
    h = random_hmm(n=3, lag=2, context="both", seed=7)
    Xs = [h.sample(T, random_state=T)[0] for T in (33, 2, 17, 50, 9)]
    lengths = [len(X) for X in Xs]
    X = np.concatenate(Xs)
    for method in ("structured", "naive", "exact"):
        a = h.score_sequences(Xs, method=method)
        b = h.score_sequences(X, lengths, method=method)
        single = [h.score(x, method=method) for x in Xs]
        np.testing.assert_array_equal(a, b)
        np.testing.assert_allclose(a, single, rtol=1e-13)
    h.n_threads = 1
    r1 = h.infer(X, lengths)
    h.n_threads = 2
    r2 = h.infer(X, lengths)
    np.testing.assert_array_equal(r1.bound, r2.bound)
    np.testing.assert_array_equal(r1.gamma, r2.gamma)
    Xro = X.copy()
    Xro.setflags(write=False)
    np.testing.assert_array_equal(h.score_sequences(Xro, lengths), r1.bound)


# ------------------------------------------------------------------------------------------
# sampling and learning

def test_sample_follows_the_model():
    h = random_hmm(n=3, D=2, lag=2, context="both", seed=8, cscale=1.0)
    X, S = h.sample(20000, random_state=0)
    assert X.shape == (20000, 2) and S.shape == (20000,)
    mean = R.output_means(R.params_of(h), S)
    resid = X - mean
    np.testing.assert_allclose(resid.mean(0), 0, atol=0.03)
    np.testing.assert_allclose(np.cov(resid.T), np.eye(2), atol=0.05)
    counts = np.zeros((3, 3))
    np.add.at(counts, (S[:-1], S[1:]), 1)
    np.testing.assert_allclose(counts / counts.sum(1, keepdims=True), h.transmat_, atol=0.03)


def test_fit_bound_never_decreases_and_context_model_wins_on_context_data():
    rng = np.random.default_rng(0)
    n, D, lag = 3, 2, 2
    true = mf.ContextHMM(n, D, lag=lag, context="both")
    true.means_ = 3.0 * np.array([[1, 0], [-0.5, 0.87], [-0.5, -0.87]])
    A = rng.random((n, n)) + np.eye(n)
    true.transmat_ = A / A.sum(1, keepdims=True)
    true.right_means_ = 0.8 * rng.normal(size=(n, D))
    true.left_means_ = 0.8 * rng.normal(size=(n, D))
    train = [true.sample(150, random_state=s)[0] for s in range(4)]
    test = [true.sample(150, random_state=50 + s)[0] for s in range(2)]
    h = mf.ContextHMM(n, D, lag=lag, context="both", n_iter=15, n_iter_bw=30, random_state=0)
    h.fit(train, progress=False)
    for phase in ("baum_welch", "mean_field"):
        hist = np.asarray(h.history_[phase])
        assert len(hist) >= 2
        assert np.all(np.diff(hist) >= -1e-9 * np.abs(hist[:-1])), (phase, np.diff(hist))
    first = mf.ContextHMM(n, D, lag=lag, context="both", n_iter=0, n_iter_bw=30, random_state=0)
    first.fit(train, progress=False)
    assert not np.any(first.right_means_)
    assert h.score(test) > first.score(test) + 0.05 * 300
    # the output means of every (s_t, s_{t+lag}, s_{t-lag}) match the truth up to relabelling
    # (a constant can move between the three tables, so only their sums are identifiable)
    order = [int(np.argmin(((true.means_[k] - h.means_) ** 2).sum(1))) for k in range(n)]
    assert sorted(order) == list(range(n))

    def full(m, o):
        U, V, W = m.means_[o], m.right_means_[o], m.left_means_[o]
        return U[:, None, None] + V[None, :, None] + W[None, None, :]

    np.testing.assert_allclose(full(h, order), full(true, list(range(n))), atol=0.6)


def test_fit_progress_bar_runs(capsys):
    h = mf.ContextHMM(2, 1, lag=1, context="right", n_iter=2, n_iter_bw=2, random_state=0)
    X = np.random.default_rng(0).normal(size=(40, 1))
    assert h.fit(X, progress=True) is h
    assert len(h.history_["baum_welch"]) + len(h.history_["mean_field"]) <= 4


# ------------------------------------------------------------------------------------------
# bad input

def test_bad_input_raises_clear_errors():
    h = random_hmm(n=3, D=2, lag=2, context="right", seed=0)
    X, _ = h.sample(10, random_state=0)
    with pytest.raises(ValueError, match="X must have 2 columns"):
        h.score(X[:, :1])
    with pytest.raises(ValueError, match="X must be a 2-D"):
        h.score(X[:, 0])
    Xn = X.copy(); Xn[3, 1] = np.nan
    with pytest.raises(ValueError, match="X contains NaN"):
        h.score(Xn)
    with pytest.raises(TypeError, match="X has dtype object"):
        h.score(X.astype(object))
    with pytest.raises(ValueError, match="lengths sum to 9"):
        h.score(X, lengths=[4, 5])
    with pytest.raises(ValueError, match="lengths must all be >= 1"):
        h.score(X, lengths=[10, 0])
    with pytest.raises(ValueError, match="method must be one of"):
        h.score(X, method="gibbs")
    with pytest.raises(ValueError, match="context must be one of"):
        mf.ContextHMM(3, 2, lag=2, context="middle")
    with pytest.raises(ValueError, match="lag must be an integer >= 1"):
        mf.ContextHMM(3, 2, lag=0)
    with pytest.raises(ValueError, match="means_ is not set"):
        mf.ContextHMM(3, 2).score(X)
    bad = random_hmm(n=3, context="right", seed=0)
    bad.transmat_ = np.ones((3, 3))
    with pytest.raises(ValueError, match="transmat_ rows"):
        bad.score(X)
    bad = random_hmm(n=3, context="right", seed=0)
    bad.means_ = np.zeros((2, 2))
    with pytest.raises(ValueError, match=r"means_ must have shape \(3, 2\)"):
        bad.score(X)
    bad = random_hmm(n=3, context="right", seed=0)
    bad.left_means_ = np.ones((3, 2))
    with pytest.raises(ValueError, match="left_means_ must be all zeros"):
        bad.score(X)
    big = random_hmm(n=5, D=2, lag=6, context="both", seed=0)
    Xb, _ = big.sample(40, random_state=0)
    with pytest.raises(ValueError, match="max_augmented_states"):
        big.score(Xb, method="exact")
    assert np.isfinite(big.score(Xb))
    with pytest.raises(ValueError, match="'structured' or 'naive'"):
        h.infer(X, method="exact")
    imp = random_hmm(n=3, context="right", seed=0)
    imp.startprob_ = np.array([1.0, 0.0, 0.0])
    imp.transmat_ = np.eye(3)
    imp.means_ = np.array([[0.0, 0.0], [50.0, 0.0], [0.0, 50.0]])
    assert np.isfinite(imp.score(X, method="exact"))  # unlikely but possible
