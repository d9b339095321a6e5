"""ContextHMM: kernels against slow references, bounds against exact likelihoods, learning."""
import numpy as np
import pytest
from hmmlearn.hmm import GaussianHMM
from scipy.special import roots_hermitenorm
from sklearn.exceptions import NotFittedError

import mfengine as mf
from mfengine.hmm import _chain, _learn
from mfengine.hmm._problem import centred
from mfengine.hmm._solve import solve

import reference_hmm as R


def random_hmm(n=3, D=2, lag=2, context="both", sep=1.5, cscale=0.5, sticky=1.0, seed=0,
               **kw):
    rng = np.random.default_rng(seed)
    h = mf.ContextHMM(n, D, lag=lag, context=context, infer_tol=1e-13, infer_max_iter=400,
                      progress=False, **kw)
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
    got = h.infer(Xs, method="exact").bound
    want = [R.augmented_loglik(p, X) for X in Xs]
    np.testing.assert_allclose(got, want, rtol=1e-11)


@pytest.mark.parametrize("context", CONTEXTS)
def test_naive_bound_is_the_elbo_of_its_marginals(context):
    h = random_hmm(context=context, seed=11)
    p = R.params_of(h)
    X, _ = h.sample(6, random_state=2)
    r = h.infer(X, method="naive")
    assert r.bound[0] == pytest.approx(R.naive_elbo(p, X, r.posteriors), abs=1e-10)
    q0 = R.forward_backward(p["pi"], p["A"], R._site_terms(p, X))[0]
    q, hist = R.naive_solve(p, X, q0, tol=1e-13)
    assert r.bound[0] == pytest.approx(hist[-1], abs=1e-8)
    np.testing.assert_allclose(r.posteriors, q, atol=1e-6)


def kernel_args(h):
    p = h._params()
    return p.startprob, p.transmat, *p.tables, h.lag, h._right, h._left


@pytest.mark.parametrize("context", CONTEXTS)
@pytest.mark.parametrize("lag", [1, 2, 3])
def test_chain_objective_matches_enumeration(context, lag):
    h = random_hmm(n=3, lag=lag, context=context, seed=20 + lag, cscale=1.0)
    p = R.params_of(h)
    rng = np.random.default_rng(lag)
    for T in (1, 2, 7):
        X, _ = h.sample(T, random_state=T)
        logpot = 2.0 * rng.normal(size=(T, 3))
        val, g, xi, p1, p2 = _chain.chain_objective(*kernel_args(h), X, logpot)
        assert val == pytest.approx(R.exact_elbo(p, X, logpot), abs=1e-10)
        g_ref = R.link_bound(p, X, logpot)[1]
        np.testing.assert_allclose(g, g_ref, atol=1e-12)
        np.testing.assert_allclose(xi, R.chain_pair_marginals(p, logpot, 1), atol=1e-12)
        np.testing.assert_allclose(p1, R.chain_pair_marginals(p, logpot, lag), atol=1e-12)
        np.testing.assert_allclose(p2, R.chain_pair_marginals(p, logpot, 2 * lag), atol=1e-12)
        # a valid bound for any chain, and above the link bound of the same chain
        assert val <= R.brute_force_loglik(p, X) + 1e-10
        assert val >= R.link_bound(p, X, logpot)[0] - 1e-10


@pytest.mark.parametrize("context", CONTEXTS)
@pytest.mark.parametrize("lag", [1, 2])
def test_coordinate_sweep_matches_enumeration(context, lag):
    h = random_hmm(n=3, lag=lag, context=context, seed=30 + lag, cscale=1.0)
    p = R.params_of(h)
    X, _ = h.sample(6, random_state=lag)
    logpot = np.random.default_rng(lag).normal(size=(6, 3))
    val, h1, hist = _chain.ascent(*kernel_args(h), X, logpot, 1, 0.0)
    h_ref = R.coordinate_sweep(p, X, logpot)
    np.testing.assert_allclose(h1, h_ref, atol=1e-10)
    assert hist[0] == pytest.approx(R.exact_elbo(p, X, logpot), abs=1e-10)
    assert val == hist[1] == pytest.approx(R.exact_elbo(p, X, h_ref), abs=1e-10)
    # the last coordinate is at its maximum: no change of h_{T-1} raises the objective
    rng = np.random.default_rng(0)
    for _ in range(10):
        hp = h_ref.copy()
        hp[-1] += rng.normal(scale=0.5, size=3)
        assert R.exact_elbo(p, X, hp) <= val + 1e-10


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_every_third_sweep_starts_from_the_squared_extrapolation(seed):
    # the kernel's three-sweep cycle, rebuilt from single plain sweeps and NumPy: h0 -> h1 -> h2
    # by coordinate sweeps, hp = h0 - 2 a r + a^2 v (r = h1 - h0, v = h2 - 2 h1 + h0,
    # a = -|r|/|v| clipped to [-100, -1]), a sweep from hp kept only if it ends above h2
    h = random_hmm(n=3, lag=2, context="both", seed=40 + seed, cscale=0.8)
    X, _ = h.sample(30, random_state=seed)
    args = kernel_args(h)
    # six sweeps in, where the steps shrink geometrically and the extrapolation goes beyond h2
    h0 = _chain.ascent(*args, X, np.random.default_rng(seed).normal(size=(30, 3)), 6, 0.0)[1]
    F1, h1, _ = _chain.ascent(*args, X, h0, 1, 0.0)
    F2, h2, _ = _chain.ascent(*args, X, h1, 1, 0.0)
    r, v = h1 - h0, h2 - 2 * h1 + h0
    a = min(max(-np.sqrt((r * r).sum() / (v * v).sum()), -100.0), -1.0)
    assert a < -1.2   # (a = -1 would give h2 itself)
    F3, h3, _ = _chain.ascent(*args, X, h0 - 2 * a * r + a * a * v, 1, 0.0)
    kept = F3 >= F2
    val, hh, hist = _chain.ascent(*args, X, h0, 3, 0.0)
    np.testing.assert_allclose(hist, [hist[0], F1, F2, F3 if kept else F2], rtol=1e-12)
    np.testing.assert_allclose(hh, h3 if kept else h2, rtol=1e-10, atol=1e-10)
    assert val == hist[-1]


def test_ascent_converges_to_a_stationary_point():
    # central finite differences of the kernel's objective vanish at the ascent's limit
    h = random_hmm(n=3, lag=2, context="both", seed=2, cscale=0.7)
    X, _ = h.sample(15, random_state=4)
    args = kernel_args(h)
    val, hh, hist = _chain.ascent(*args, X, np.zeros((15, 3)), 2000, 0.0)
    assert len(hist) >= 3 and np.all(np.diff(hist) >= -1e-12 * abs(val))

    def fd_grad(h0, eps=1e-5):
        grad = np.zeros_like(h0)
        for t in range(h0.shape[0]):
            for i in range(h0.shape[1]):
                hp, hm = h0.copy(), h0.copy()
                hp[t, i] += eps
                hm[t, i] -= eps
                grad[t, i] = (_chain.chain_objective(*args, X, hp)[0]
                              - _chain.chain_objective(*args, X, hm)[0]) / (2 * eps)
        return grad

    assert np.max(np.abs(fd_grad(hh))) < 1e-6
    assert np.max(np.abs(fd_grad(np.zeros((15, 3))))) > 1e-2   # the check can fail


# "both" runs by default; "right" and "left" (also checked against enumeration) are slow
@pytest.mark.parametrize("context", [pytest.param(c, marks=pytest.mark.slow) if c != "both" else c
                                     for c in CONTEXTS])
def test_link_iteration_matches_slow_reference(context):
    h = random_hmm(context=context, seed=12)
    p = R.params_of(h)
    X, _ = h.sample(6, random_state=3)
    args = kernel_args(h)
    q0 = R.forward_backward(p["pi"], p["A"], R._site_terms(p, X))[0]
    qn, _ = R.naive_solve(p, X, q0, tol=1e-13)
    for init in (None, qn):
        b, g, logpot, hist = _chain.link(*args, X, 400, 1e-13, init)
        # the link bound of the chain it returns (enumerated), and the whole iteration
        b_ref, g_ref = R.link_bound(p, X, logpot)
        assert b == pytest.approx(b_ref, abs=1e-8)
        np.testing.assert_allclose(g, g_ref, atol=1e-12)
        assert b == pytest.approx(R.link_solve(p, X, init=init, tol=1e-13)[0], abs=1e-7)
        assert np.all(np.diff(hist) >= -1e-12 * np.abs(hist[:-1]))


def shifted(h, Xc, off):
    """The parameters (an HMMParams) and data in the centred coordinates the model hands the
    kernel (``mfengine.hmm._problem.centred``)."""
    P, centre = centred(h._params(), h.lag, h.context, Xc.shape, off)
    return P, np.ascontiguousarray(Xc - centre)


def shifted_run(h, X, **kw):
    """The kernel's inputs exactly as the model passes them (data and means in the centred
    coordinates of ``mfengine.hmm._problem.centred``) and its structured result (its fields
    that are set, by name)."""
    Xc, off = h._check_X(X, None)
    P, Xs = shifted(h, Xc, off)
    r = solve(h._problem(), P, Xs, off, "structured", **kw)
    return ((P.startprob, P.transmat, *P.tables, h.lag, h._right, h._left), Xs,
            {k: v for k, v in vars(r).items() if v is not None})


@pytest.mark.parametrize("context", CONTEXTS)
def test_structured_is_the_best_ascent_from_its_starts(context):
    h = random_hmm(context=context, seed=12, cscale=1.0)
    p = R.params_of(h)
    X, _ = h.sample(7, random_state=3)
    args, Xs, r = shifted_run(h, X, want_stats=True)
    # the reported bound is the exact objective of the chain returned (enumerated)
    assert r["bound"][0] == pytest.approx(R.exact_elbo(p, X, r["logpot"]), abs=1e-10)
    np.testing.assert_allclose(r["gamma"], R.link_bound(p, X, r["logpot"])[1], atol=1e-12)
    np.testing.assert_allclose(r["xi"][0], R.chain_pair_marginals(p, r["logpot"], 1), atol=1e-12)
    # without the M-step statistics the neighbours' marginals come from the low-rank path
    old = _chain._set_lowrank_mode(1)
    try:
        r_nostats = shifted_run(h, X)[2]
    finally:
        _chain._set_lowrank_mode(old)
    np.testing.assert_array_equal(r_nostats["logpot"], r["logpot"])
    np.testing.assert_allclose(r_nostats["xi"][0], R.chain_pair_marginals(p, r["logpot"], 1),
                               atol=1e-12)
    # the starts: the link solutions from both inits (to the looser PRE_TOL), the first-order
    # posterior, and the first-order posterior without the context means
    # the first-order posterior's potentials, in the centred coordinates the kernel is given
    pc = dict(p, U=args[2], V=args[3], W=args[4])
    e = R._site_terms(pc, Xs)
    own = R._site_terms(dict(pc, right=False, left=False), Xs)
    mi, tol = h.infer_max_iter, h.infer_tol
    ptol, stol = max(tol, _chain.PRE_TOL), max(tol, _chain.SCREEN_TOL)
    qn = h.infer(X, method="naive", tol=ptol).posteriors
    starts = [_chain.link(*args, Xs, mi, ptol)[2], _chain.link(*args, Xs, mi, ptol, qn)[2], e,
              own]
    # each start's ascent to the screen's tolerance; the best goes on to infer_tol
    screened = [_chain.ascent(*args, Xs, s0, mi, stol) for s0 in starts]
    k = int(np.argmax([F for F, _, _ in screened]))
    F, _, hist = _chain.ascent(*args, Xs, screened[k][1], mi - (len(screened[k][2]) - 1), tol)
    # (the ascent's values use the sweeps' expanded form; the reported bound is the same
    # objective evaluated without cancellation: equal to rounding)
    assert r["bound"][0] == pytest.approx(F, rel=1e-13, abs=1e-12)
    assert r["n_sweeps"][0] == len(screened[k][2]) - 1 + len(hist) - 1
    np.testing.assert_allclose(r["history"][0][: r["n_sweeps"][0] + 1],
                               np.concatenate([screened[k][2], hist[1:]]), rtol=1e-13)
    for s0 in starts:
        assert r["bound"][0] >= R.link_bound(p, X, s0)[0] - 1e-12
        assert r["bound"][0] >= R.exact_elbo(p, X, s0) - 1e-12


def start_potentials(h, args, Xs, X):
    """The four starts of the structured solver, by name (the link / naive solves to PRE_TOL)."""
    p = R.params_of(h)
    mi, tol = h.infer_max_iter, h.infer_tol
    ptol = max(tol, _chain.PRE_TOL)
    qn = h.infer(X, method="naive", tol=ptol).posteriors
    pc = dict(p, U=args[2], V=args[3], W=args[4])   # the centred coordinates of the kernel
    return {"link": _chain.link(*args, Xs, mi, ptol)[2],
            "naive-link": _chain.link(*args, Xs, mi, ptol, qn)[2],
            "first-order": R._site_terms(pc, Xs),
            "own-means": R._site_terms(dict(pc, right=False, left=False), Xs)}


@pytest.mark.parametrize("context", CONTEXTS)
def test_fewer_starts_run_only_those(context):
    """starts=: one start alone is ascended straight to infer_tol (no screen); several are
    screened, the best going on; every start named, in any order, is the default, bit for bit;
    threads change nothing.  (Strong context means: the starts end on at least three different
    maxima in every context.)"""
    h = random_hmm(context=context, seed=21, cscale=3.0)
    X, _ = h.sample(40, random_state=3)
    args, Xs, r_all = shifted_run(h, X)
    pots = start_potentials(h, args, Xs, X)
    mi, tol = h.infer_max_iter, h.infer_tol
    stol = max(tol, _chain.SCREEN_TOL)
    for name, s0 in pots.items():
        h.starts = name
        r = shifted_run(h, X)[2]
        F, hs, hist = _chain.ascent(*args, Xs, s0, mi, tol)
        assert r["bound"][0] == pytest.approx(F, rel=1e-13, abs=1e-12), name
        # (the kernel forms the first-order starts' potentials in its own order: to rounding)
        np.testing.assert_allclose(r["logpot"], hs, rtol=1e-11, atol=1e-11, err_msg=name)
        assert r["n_sweeps"][0] == len(hist) - 1
        assert h.score(X) == r["bound"][0]
    for pair in [("first-order", "own-means"), ("naive-link", "link")]:
        h.starts = pair
        r = shifted_run(h, X)[2]
        screened = [_chain.ascent(*args, Xs, pots[k], mi, stol) for k in pair]
        # the first of the pair in the solver's order wins a tie
        order = sorted(range(2), key=lambda j: _chain.START_NAMES.index(pair[j]))
        k = max(order, key=lambda j: (screened[j][0], -order.index(j)))
        F, hs, _ = _chain.ascent(*args, Xs, screened[k][1], mi - (len(screened[k][2]) - 1), tol)
        assert r["bound"][0] == pytest.approx(F, rel=1e-13, abs=1e-12), pair
        np.testing.assert_allclose(r["logpot"], hs, rtol=1e-11, atol=1e-11)
        runs = [h.set_params(n_threads=t).infer(X) for t in (1, 2)]
        np.testing.assert_array_equal(runs[0].potentials, runs[1].potentials)
        np.testing.assert_array_equal(runs[0].bound, runs[1].bound)
        h.n_threads = None
    h.starts = ["own-means", "first-order", "naive-link", "link"]
    r = shifted_run(h, X)[2]
    for key in r:
        np.testing.assert_array_equal(r[key], r_all[key], err_msg=key)


def test_naive_link_start_alone_falls_back_to_the_link_start():
    """Where zeros in the transitions leave no finite naive solution, the naive-link start is
    skipped; alone, the link start stands in for it."""
    h = mf.ContextHMM(n_states=3, n_features=1, lag=2, context="right", progress=False)
    h.startprob_ = np.array([1.0, 0.0, 0.0])
    h.transmat_ = np.array([[0.5, 0.5, 0.0], [0.0, 0.5, 0.5], [0.5, 0.0, 0.5]])
    h.means_ = np.array([[-1.0], [0.0], [1.0]])
    h.right_means_ = np.array([[0.5], [-0.5], [0.2]])
    X, _ = h.sample(50, random_state=1)
    with pytest.raises(ValueError, match="method='naive' cannot score"):
        h.score(X, method="naive")
    link = h.set_params(starts="link").infer(X)
    alone = h.set_params(starts="naive-link").infer(X)
    np.testing.assert_array_equal(alone.potentials, link.potentials)
    assert alone.bound[0] == link.bound[0]
    assert alone.bound[0] <= h.score(X, method="exact") + 1e-9


def test_starts_are_validated_and_kept():
    h = random_hmm(n=3, D=2, lag=2, context="both", seed=0)
    X, _ = h.sample(30, random_state=0)
    for bad in ["bogus", (), ("link", "link"), ("link", 3), 3, None, {"link": 1}]:
        h.starts = bad
        with pytest.raises(ValueError, match="'starts' parameter of ContextHMM must be 'all', one of"):
            h.score(X)
    h.starts = ("own-means", "link")
    from sklearn.base import clone
    assert clone(h).get_params()["starts"] == ("own-means", "link")
    b = h.score(X)
    # the names reach the kernel in the solver's order whatever order they are given in
    assert h.set_params(starts=["link", "own-means"]).score(X) == b


@pytest.mark.parametrize("context", CONTEXTS)
def test_mstep_statistics_are_the_objective_in_the_means(context):
    # with Q held fixed the objective is -1/2 th^T H_d th + g_d^T th + const in the means
    h = random_hmm(n=3, D=2, lag=2, context=context, seed=9, cscale=0.8)
    X, _ = h.sample(25, random_state=9)
    (sp, A, U, V, W, lag, right, left), Xs, r = shifted_run(h, X, want_stats=True)
    H, g = r["H"][0], r["g"][0]

    def quad(U, V, W):
        th = np.concatenate([U, V, W])
        return sum(-0.5 * th[:, d] @ H[d] @ th[:, d] + g[d] @ th[:, d] for d in range(2))

    def obj(U, V, W):
        return _chain.chain_objective(sp, A, U, V, W, lag, right, left, Xs, r["logpot"])[0]

    rng = np.random.default_rng(0)
    for _ in range(3):
        dU, dV, dW = (rng.normal(size=(3, 2)) for _ in range(3))
        dV *= h._right
        dW *= h._left
        got = obj(U + dU, V + dV, W + dW) - obj(U, V, W)
        assert got == pytest.approx(quad(U + dU, V + dV, W + dW) - quad(U, V, W), abs=1e-9)


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
    st = h.infer(X, lengths).bound
    ex = h.infer(X, lengths, method="exact").bound
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


def test_structured_at_least_naive_for_lag_two_and_more():
    # measured, not proven (docs/derivations/context_hmm.rst): from weak to strong context, lag >= 2
    for context in CONTEXTS:
        for lag in (2, 3):
            for k, cscale in enumerate((0.1, 0.3, 1.0, 3.0)):
                h = random_hmm(n=3, lag=lag, context=context, seed=10 * lag + k, sep=1.5,
                               cscale=cscale, sticky=1.0)
                Xs = [h.sample(40, random_state=100 * k + s)[0] for s in range(3)]
                st = h.infer(Xs).bound
                nv = h.infer(Xs, method="naive").bound
                assert np.all(st >= nv - 1e-9 * 40), (context, lag, cscale, st - nv)


def test_structured_can_lose_to_naive_at_lag_one():
    # at lag 1 the couplings act on the very pairs (s_t, s_t+1) whose dependence the family fixes
    # to the model's transitions; here the best chain of the family (300 random starts) stays
    # below the naive bound (docs/derivations/context_hmm.rst)
    h = random_hmm(n=2, D=1, lag=1, context="right", seed=30, cscale=3.0, sep=1.0, sticky=0.0)
    X, _ = h.sample(8, random_state=30)
    args = kernel_args(h)
    nv, st, ex = (h.score(X, method=m) for m in ("naive", "structured", "exact"))
    assert st < nv - 0.1 and nv <= ex
    rng = np.random.default_rng(0)
    best = max(_chain.ascent(*args, X, rng.normal(scale=3.0, size=(8, 2)), 400, 0.0)[0]
               for _ in range(30))
    assert best == pytest.approx(st, abs=1e-8)


@pytest.mark.parametrize("method", ["structured", "naive"])
@pytest.mark.parametrize("context", CONTEXTS)
def test_bound_never_decreases_over_sweeps(method, context):
    for seed in range(4):
        h = random_hmm(n=4, lag=3, context=context, seed=seed, cscale=0.8, sep=1.0)
        X, _ = h.sample(80, random_state=seed)
        r = h.infer(X, method=method)
        hist = r.history[0][: r.n_iter[0] + 1]
        assert np.all(np.isfinite(hist))
        assert np.all(np.diff(hist) >= -1e-12 * np.abs(hist[:-1])), np.diff(hist)
        # naive: the history is the careful evaluation itself; structured: the sweeps' own
        # (expanded) values, the reported bound re-evaluated without cancellation
        if method == "naive":
            assert r.bound[0] == hist[-1]
        else:
            assert r.bound[0] == pytest.approx(hist[-1], rel=1e-13, abs=1e-12)


def test_several_sequences_list_and_lengths_agree_and_threads_do_not_matter():
    h = random_hmm(n=3, lag=2, context="both", seed=7)
    Xs = [h.sample(T, random_state=T)[0] for T in (33, 2, 17, 50, 9)]
    lengths = [len(X) for X in Xs]
    X = np.concatenate(Xs)
    for method in ("structured", "naive", "exact"):
        a = h.infer(Xs, method=method).bound
        b = h.infer(X, lengths, method=method).bound
        single = [h.score(x, method=method) for x in Xs]
        np.testing.assert_array_equal(a, b)
        np.testing.assert_allclose(a, single, rtol=1e-13)
    h.n_threads = 1
    r1 = h.infer(X, lengths)
    h.n_threads = 2
    r2 = h.infer(X, lengths)
    np.testing.assert_array_equal(r1.bound, r2.bound)
    np.testing.assert_array_equal(r1.posteriors, r2.posteriors)
    Xro = X.copy()
    Xro.setflags(write=False)
    np.testing.assert_array_equal(h.infer(Xro, lengths).bound, r1.bound)


def test_one_sequence_runs_its_starts_on_threads_with_the_same_answer():
    """With fewer sequences than threads, a structured solve runs its three starts on separate
    threads (each in a block of its own): every output is the same, bit for bit, for 1-4
    threads, with and without the M-step statistics."""
    h = random_hmm(n=4, lag=3, context="both", seed=5, cscale=0.8)
    X, _ = h.sample(120, random_state=2)
    X[7, 1] = np.nan
    Xc, off = h._check_X(X, None)
    P, Xs = shifted(h, Xc, off)
    args = (P.startprob, P.transmat, *P.tables, h.lag, h._right, h._left, Xs, off, 60, 1e-10)
    for stats in (False, True):
        runs = [_chain.run("structured", *args, stats, t) for t in (1, 2, 3, 4)]
        for r in runs[1:]:
            assert r.keys() == runs[0].keys()
            for key in r:
                np.testing.assert_array_equal(r[key], runs[0][key], err_msg=key)
    h.n_threads = 1
    r1 = h.infer(X)
    h.n_threads = 2
    r2 = h.infer(X)
    np.testing.assert_array_equal(r1.bound, r2.bound)
    np.testing.assert_array_equal(r1.potentials, r2.potentials)


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


def phases(h):
    """history_ split into its Baum-Welch and mean-field parts."""
    return h.history_[: h.bw_n_iter_], h.history_[h.bw_n_iter_:]


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
    h = mf.ContextHMM(n, D, lag=lag, context="both", max_iter=15, bw_max_iter=30,
                      random_state=0, progress=False)
    assert h.fit(train) is h
    assert isinstance(h.history_, np.ndarray) and h.n_iter_ == len(h.history_)
    for hist in phases(h):
        assert len(hist) >= 2
        assert np.all(np.diff(hist) >= 0), np.diff(hist)
    first = mf.ContextHMM(n, D, lag=lag, context="both", max_iter=0, bw_max_iter=30,
                          random_state=0, progress=False)
    first.fit(train)
    assert not np.any(first.right_means_) and first.bw_n_iter_ == first.n_iter_
    assert h.score(test) > first.score(test) + 0.05 * 300
    # the output means of every (s_t, s_{t+lag}, s_{t-lag}) match the truth up to relabelling
    # (a constant can move between the three tables, so only their sums are identifiable)
    order = [int(np.argmin(((true.means_[k] - h.means_) ** 2).sum(1))) for k in range(n)]
    assert sorted(order) == list(range(n))

    def full(m, o):
        U, V, W = m.means_[o], m.right_means_[o], m.left_means_[o]
        return U[:, None, None] + V[None, :, None] + W[None, None, :]

    np.testing.assert_allclose(full(h, order), full(true, list(range(n))), atol=0.6)


def test_fit_keeps_old_transitions_when_new_ones_lower_the_bound(monkeypatch):
    # Q's family is the chain with the model's transitions: a transition update that moves the
    # family away from the previous Q is refused, so the bound still never falls
    true = random_hmm(n=3, D=2, lag=2, context="both", seed=3, cscale=0.8, sep=3.0, sticky=3.0)
    train = [true.sample(100, random_state=s)[0] for s in range(2)]

    def model(max_iter):
        return mf.ContextHMM(3, 2, lag=2, context="both", max_iter=max_iter, bw_max_iter=10,
                             tol=None, random_state=0, progress=False)

    bw = np.array(model(0).fit(train).transmat_)   # Baum-Welch transitions
    bad = np.array([[0.02, 0.49, 0.49], [0.49, 0.02, 0.49], [0.49, 0.49, 0.02]])
    seen = []
    original = _learn.mstep_chain

    def bad_mstep_chain(P, r, offsets, update):
        if r.H[0, 0, 0, 3] != 0.0 or r.H[0, 0, 0, 6] != 0.0:   # mean-field phase only
            seen.append(np.array(P.transmat))
            return P.startprob, bad
        return original(P, r, offsets, update)

    monkeypatch.setattr(_learn, "mstep_chain", bad_mstep_chain)
    h = model(6).fit(train)
    hist = phases(h)[1]
    assert len(hist) == 6 and np.all(np.diff(hist) >= 0), np.diff(hist)
    assert len(seen) == 6
    for t in seen + [h.transmat_]:     # every bad update was refused
        np.testing.assert_allclose(t, bw, rtol=1e-12)


def test_structured_with_forbidden_transitions():
    h = random_hmm(n=3, D=2, lag=2, context="both", seed=1, cscale=1.0)
    h.transmat_ = np.array([[0.5, 0.5, 0.0], [0.0, 0.5, 0.5], [0.5, 0.0, 0.5]])
    p = R.params_of(h)
    X, _ = h.sample(7, random_state=0)
    r = shifted_run(h, X)[2]
    assert r["bound"][0] == pytest.approx(R.exact_elbo(p, X, r["logpot"]), abs=1e-10)
    assert r["bound"][0] <= R.brute_force_loglik(p, X) + 1e-10
    assert r["bound"][0] > R.exact_elbo(p, X, R._site_terms(p, X)) - 1e-10


def test_fit_draws_a_progress_bar_only_when_asked(capsys, monkeypatch):
    X = np.random.default_rng(0).normal(size=(40, 1))

    def model(progress):
        return mf.ContextHMM(2, 1, lag=1, context="right", max_iter=2, bw_max_iter=2, tol=None,
                             random_state=0, progress=progress)

    # a fit shorter than the bar's delay (2 s by default) prints nothing, bar or not
    monkeypatch.setenv("MFENGINE_PROGRESS_DELAY", "2")
    assert model(True).fit(X) is not None
    assert capsys.readouterr() == ("", "")
    # with no delay the bar is drawn (on stderr) when asked for, and only then
    monkeypatch.setenv("MFENGINE_PROGRESS_DELAY", "0")
    h = model(True)
    assert h.fit(X) is h and 1 <= h.n_iter_ <= 4
    out, err = capsys.readouterr()
    assert out == "" and "ContextHMM.fit" in err
    assert model(False).fit(X) is not None
    assert capsys.readouterr() == ("", "")


# ------------------------------------------------------------------------------------------
# bad input

def test_bad_input_raises_clear_errors():
    h = random_hmm(n=3, D=2, lag=2, context="right", seed=0)
    X, _ = h.sample(10, random_state=0)
    with pytest.raises(ValueError, match="X must have 2 columns"):
        h.score(X[:, :1])
    with pytest.raises(ValueError, match="X must be a 2-D"):
        h.score(X[:, 0])
    Xn = X.copy(); Xn[3, 1] = np.inf    # NaN is a missing value (test_hmm_missing.py)
    with pytest.raises(ValueError, match="X contains infinite values"):
        h.score(Xn)
    # an object array of numbers is converted (the shared validation's rule); of strings, refused
    assert h.score(X.astype(object)) == h.score(X)
    with pytest.raises((TypeError, ValueError), match="X"):
        h.score(np.full(X.shape, "a", dtype=object))
    with pytest.raises(ValueError, match="lengths sum to 9"):
        h.score(X, lengths=[4, 5])
    with pytest.raises(ValueError, match="lengths must all be >= 1"):
        h.score(X, lengths=[10, 0])
    with pytest.raises(ValueError, match="'method' parameter of ContextHMM must be a str among"):
        h.score(X, method="gibbs")
    with pytest.raises(ValueError, match="'context' parameter of ContextHMM must be a str among"):
        mf.ContextHMM(3, 2, lag=2, context="middle").score(X)
    with pytest.raises(ValueError, match="'lag' parameter of ContextHMM must be an int in the range \\[1,"):
        mf.ContextHMM(3, 2, lag=0).fit(X)
    with pytest.raises(NotFittedError, match="has no means_"):
        mf.ContextHMM(3, 2).score(X)
    bad = random_hmm(n=3, context="right", seed=0)
    bad.transmat_ = np.ones((3, 3))
    with pytest.raises(ValueError, match="transmat_ rows"):
        bad.score(X)
    bad = random_hmm(n=3, context="right", seed=0)
    bad.means_ = np.zeros((2, 2))
    with pytest.raises(ValueError, match=r"means_ must have shape \(n_states, n_features\) = \(3, 2\)"):
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
    with pytest.raises(ValueError, match=r"score_samples: method='exact' gives ln P\(X\) only"):
        h.score_samples(X, method="exact")
    imp = random_hmm(n=3, context="right", seed=0)
    imp.startprob_ = np.array([1.0, 0.0, 0.0])
    imp.transmat_ = np.eye(3)
    imp.means_ = np.array([[0.0, 0.0], [50.0, 0.0], [0.0, 50.0]])
    assert np.isfinite(imp.score(X, method="exact"))  # unlikely but possible


def test_naive_refuses_zero_transitions_with_a_clear_error():
    h = mf.ContextHMM(n_states=3, n_features=1, lag=2, context="right")
    h.startprob_ = np.array([1.0, 0.0, 0.0])
    h.transmat_ = np.array([[0.5, 0.5, 0.0], [0.0, 0.5, 0.5], [0.5, 0.0, 0.5]])
    h.means_ = np.array([[-1.0], [0.0], [1.0]])
    h.right_means_ = np.array([[0.5], [-0.5], [0.2]])
    X, _ = h.sample(50, random_state=1)
    exact = h.score(X, method="exact")
    assert np.isfinite(exact) and h.score(X, method="structured") <= exact + 1e-9
    with pytest.raises(ValueError, match="method='naive' cannot score"):
        h.score(X, method="naive")


@pytest.mark.parametrize("context", CONTEXTS)
def test_low_rank_and_full_matrix_paths_agree(context):
    # the chain objective and sweep have two paths (mf_hmm_chain.c): the coupling energies as
    # n x n matrices and conditional-matrix products, or as sums over output coordinates of
    # products of mean tables with n x D products; same numbers up to rounding, also with
    # missing values and sequences shorter than the lags (blocks of the right rows included)
    worst = 0.0
    try:
        for lag in (1, 2, 3, 6):
            for n, D in ((3, 1), (4, 2), (2, 3)):
                for T in (1, 2, 5, 13, 40, 61):
                    h = random_hmm(n=n, D=D, lag=lag, context=context, seed=lag, cscale=1.0)
                    X, _ = h.sample(T, random_state=1)
                    if T > 7:
                        X[4] = np.nan
                        X[7, 0] = np.nan
                    if T > 60:   # missing outputs at both ends and isolated in the middle
                        X[[0, 30, 59]] = np.nan
                        X[[2, 45, 60], -1] = np.nan
                    lp = np.random.default_rng(0).normal(size=(T, n))
                    out = []
                    for mode in (2, 1, 3):   # full-matrix, low-rank, low-rank in blocks
                        _chain._set_lowrank_mode(mode)
                        out.append(_chain.ascent(*kernel_args(h), X, lp, 3, 0.0))
                    v2, h2, s2 = out[0]
                    for v1, h1, s1 in out[1:]:
                        worst = max(worst, abs(v1 - v2), np.abs(h1 - h2).max(),
                                    np.abs(s1 - s2).max())
    finally:
        _chain._set_lowrank_mode(0)
    assert worst < 1e-11


@pytest.mark.parametrize("v", [1e2, 1e4, 1e7])
def test_exact_method_keeps_the_best_path_far_from_the_means(v):
    """Data thousands of standard deviations from every mean: windows whose emissions differ by
    more than ~745 nats once underflowed in the scaled forward pass, so the exact method lost
    the best path (0.014% too low at 1e4, below the mean-field bounds); it runs in log space."""
    from reference_hmm import brute_force_loglik, params_of

    m = mf.ContextHMM(2, 1, lag=2, context="right", init_params="", progress=False)
    m.startprob_ = np.array([0.5, 0.5])
    m.transmat_ = np.array([[0.9, 0.1], [0.2, 0.8]])
    m.means_ = np.array([[0.0], [1.0]])
    m.right_means_ = np.array([[0.13], [-0.4]])
    X = np.full((12, 1), -v)
    exact = m.score(X, method="exact")
    assert exact == pytest.approx(brute_force_loglik(params_of(m), X), rel=1e-13)
    for method in ("structured", "naive"):
        assert m.score(X, method=method) <= exact + 1e-12 * abs(exact)


@pytest.mark.parametrize("context", CONTEXTS)
@pytest.mark.parametrize("spread", [1e2, 1e6, 1e10, 1e14])
def test_bounds_stay_below_exact_when_the_means_lie_far_apart(context, spread):
    """A state mean `spread` away from the data and the other means: the sweeps' expanded form
    of ln p(x | s) (x.a - |a|^2/2, -a.b) carries terms of size spread^2 that cancel, and its
    rounding once lifted both bounds above the exact ln P(x) (+5e-4 nats at 1e6, +1e9 at
    1e12).  The reported bounds are evaluated in residual form, and so is the exact oracle
    (it once added a small context mean to a large U before subtracting from x)."""
    from reference_hmm import brute_force_loglik, params_of

    rng = np.random.default_rng(int(np.log10(spread)))
    m = mf.ContextHMM(2, 2, lag=2, context=context, init_params="", progress=False)
    m.startprob_ = np.array([0.5, 0.5])
    m.transmat_ = np.array([[0.9, 0.1], [0.2, 0.8]])
    m.means_ = rng.normal(size=(2, 2))
    m.means_[0, 0] = spread
    m.right_means_ = 0.3 * rng.normal(size=(2, 2)) if context != "left" else np.zeros((2, 2))
    m.left_means_ = 0.3 * rng.normal(size=(2, 2)) if context != "right" else np.zeros((2, 2))
    X = np.sin(np.arange(9.0))[:, None] * np.ones(2) + 0.5
    exact = m.score(X, method="exact")
    # the kernels see x_t - c_t and U - u (u the centre of means_, dragged spread / 2 away by
    # the far state; c_t = u plus the context tables' centres), so each residual x - U - V - W
    # is known to about eps * spread
    eps = np.finfo(float).eps
    assert exact == pytest.approx(brute_force_loglik(params_of(m), X), rel=1e-12 + eps * spread)
    for method in ("structured", "naive"):
        bound = m.score(X, method=method)
        assert np.isfinite(bound) and bound <= exact + 4 * np.finfo(float).eps * abs(exact)
        # the posterior is one path, so each bound is that path's exact value
        assert bound == pytest.approx(exact, rel=1e-12)


def test_probabilities_within_float32_precision_are_accepted(tmp_path):
    """transmat_ / startprob_ summing to 1 within 1e-6 (float32, rounded decimals) are divided
    by their sums, as hmmlearn accepts them; beyond that the error names the row and its sum.
    A 1-D on-disk X is refused by name, as in memory; NaN is allowed (scikit-learn's tag)."""
    h = mf.ContextHMM(2, 1, lag=2, progress=False)
    h.means_ = np.array([[-1.0], [1.0]])
    X = np.linspace(-2, 2, 30)[:, None]
    A = np.array([[0.9, 0.1], [0.2, 0.8]])
    h.transmat_, h.startprob_ = A, np.array([1.0, 2.0]) / 3.0
    ref = h.score(X)
    h.transmat_ = A.astype(np.float32)          # row sums 1 - 2.2e-8, 1 + 1.5e-8
    h.startprob_ = np.array([0.333333, 0.666667])
    assert h.score(X) == pytest.approx(ref, abs=1e-5)
    A32 = A.astype(np.float32).astype(np.float64)
    g = mf.ContextHMM(2, 1, lag=2, progress=False)
    g.means_, g.transmat_ = h.means_, A32 / A32.sum(1, keepdims=True)
    g.startprob_ = np.array([0.333333, 0.666667]) / 1.000000
    assert h.score(X) == g.score(X)
    h.transmat_ = np.array([[0.9, 0.1], [0.2, 0.7]])
    with pytest.raises(ValueError, match=r"transmat_ rows .* row 1 sums to 0.8999"):
        h.score(X)
    h.transmat_ = A
    h.startprob_ = np.array([0.5, -0.5])
    with pytest.raises(ValueError, match="startprob_ must be a probability vector .* negative"):
        h.score(X)
    h.startprob_ = np.array([0.5, 0.5])
    np.save(tmp_path / "x1.npy", np.zeros(10))
    with pytest.raises(ValueError, match="X must be a 2-D array"):
        h.score(np.load(tmp_path / "x1.npy", mmap_mode="r"))
    assert h.__sklearn_tags__().input_tags.allow_nan


def test_positional_parameters_keep_their_places():
    """starts= came last: the parameters before it keep their positions."""
    h = mf.ContextHMM(2, 1, 1, "right", "structured", 50, 1e-4, 50, 100, 1e-10, "map",
                      progress=False)
    assert h.algorithm == "map" and h.starts == "all"
