"""ContextHMM with missing values (issue 13, item 3): NaN entries of X are marginalised.

A row of NaN is a missing frame (its whole emission drops out); a NaN in some coordinates of a
row drops those coordinates only (the output covariance is the identity, so the observed
coordinates are Gaussian on their own).  Every quantity is checked against enumeration with the
missing terms removed (reference_hmm), and the exact likelihood against a quadrature over the
missing value itself.
"""
import warnings

import numpy as np
import pytest
from scipy.integrate import trapezoid   # np.trapezoid is NumPy 2 only; the floor is 1.23

from mfengine.hmm import _chain

import reference_hmm as R
from test_hmm import CONTEXTS, kernel_args, random_hmm, shifted_run


def with_missing(X, rows=(), cells=()):
    Xm = np.array(X, dtype=float)
    for t in rows:
        Xm[t] = np.nan
    for t, d in cells:
        Xm[t, d] = np.nan
    return Xm


@pytest.mark.parametrize("context", CONTEXTS)
@pytest.mark.parametrize("lag", [1, 2])
def test_exact_with_missing_values_matches_enumeration(context, lag):
    h = random_hmm(n=2, lag=lag, context=context, seed=40 + lag, cscale=1.0)
    p = R.params_of(h)
    X, _ = h.sample(7, random_state=lag)
    for rows, cells in [((3,), ()), ((0, 6), ()), ((), ((2, 1), (5, 0))), ((1,), ((4, 0),)),
                        (range(7), ())]:
        Xm = with_missing(X, rows, cells)
        assert h.score(Xm, method="exact") == pytest.approx(R.brute_force_loglik(p, Xm), abs=1e-10)
    # the augmented-state reference, written independently, on longer sequences
    h3 = random_hmm(n=3, lag=2, context=context, seed=5)
    X3, _ = h3.sample(30, random_state=2)
    Xm = with_missing(X3, (0, 4, 5, 17, 29), ((8, 0), (9, 1), (20, 0)))
    assert h3.score(Xm, method="exact") == pytest.approx(
        R.augmented_loglik(R.params_of(h3), Xm), rel=1e-11)


def test_a_missing_frame_integrates_the_value_out():
    # ln P(x with x_t missing) = ln of the integral over x_t of P(x): a quadrature over the value
    h = random_hmm(n=3, D=1, lag=2, context="both", seed=3, cscale=1.0)
    X, _ = h.sample(6, random_state=1)
    grid = np.linspace(-40.0, 40.0, 8001)
    for t in (0, 2, 5):
        Xu = np.repeat(X[None], len(grid), axis=0)   # one sequence per value of x_t
        Xu[:, t, 0] = grid
        vals = h.infer(Xu.reshape(-1, 1), lengths=[6] * len(grid), method="exact").bound
        mx = vals.max()
        integral = mx + np.log(trapezoid(np.exp(vals - mx), grid))
        assert h.score(with_missing(X, (t,)), method="exact") == pytest.approx(integral, abs=1e-9)


def test_an_all_missing_sequence_has_likelihood_one():
    h = random_hmm(n=3, lag=2, context="both", seed=1)
    X = np.full((9, 2), np.nan)
    for method in ("exact", "structured"):
        assert h.score(X, method=method) == pytest.approx(0.0, abs=1e-12)
    # a product q cannot hold the prior's dependence between neighbours: a gap, never above
    assert -5.0 < h.score(X, method="naive") < -1e-3
    # its marginals are the prior's
    q = h.predict_proba(X)
    prior = [h.startprob_]
    for _ in range(8):
        prior.append(prior[-1] @ h.transmat_)
    np.testing.assert_allclose(q, prior, atol=1e-12)


@pytest.mark.parametrize("context", CONTEXTS)
@pytest.mark.parametrize("lag", [1, 2])
def test_chain_objective_and_sweep_with_missing_values_match_enumeration(context, lag):
    h = random_hmm(n=3, lag=lag, context=context, seed=20 + lag, cscale=1.0)
    p = R.params_of(h)
    rng = np.random.default_rng(lag)
    X, _ = h.sample(6, random_state=6)
    for rows, cells in [((2,), ()), ((), ((1, 0), (3, 1))), ((0, 4), ((5, 1),))]:
        Xm = with_missing(X, rows, cells)
        logpot = 2.0 * rng.normal(size=(6, 3))
        val = _chain.chain_objective(*kernel_args(h), Xm, logpot)[0]
        assert val == pytest.approx(R.exact_elbo(p, Xm, logpot), abs=1e-10)
        assert val <= R.brute_force_loglik(p, Xm) + 1e-10
        # one sweep of coordinate ascent, against the same update by enumeration
        v1, h1, hist = _chain.ascent(*kernel_args(h), Xm, logpot, 1, 0.0)
        h_ref = R.coordinate_sweep(p, Xm, logpot)
        np.testing.assert_allclose(h1, h_ref, atol=1e-10)
        assert v1 == pytest.approx(R.exact_elbo(p, Xm, h_ref), abs=1e-10)


# "both" runs by default; "right" and "left" (also checked against enumeration) are slow
@pytest.mark.parametrize("context", [pytest.param(c, marks=pytest.mark.slow) if c != "both" else c
                                     for c in CONTEXTS])
def test_naive_and_link_with_missing_values_match_the_slow_references(context):
    h = random_hmm(context=context, seed=12)
    p = R.params_of(h)
    X, _ = h.sample(6, random_state=3)
    Xm = with_missing(X, (2,), ((4, 1),))
    r = h.infer(Xm, method="naive")
    assert r.bound[0] == pytest.approx(R.naive_elbo(p, Xm, r.posteriors), abs=1e-10)
    q0 = R.forward_backward(p["pi"], p["A"], R._site_terms(p, Xm))[0]
    q, hist = R.naive_solve(p, Xm, q0, tol=1e-13)
    assert r.bound[0] == pytest.approx(hist[-1], abs=1e-8)
    b, g, logpot, _ = _chain.link(*kernel_args(h), Xm, 400, 1e-13)
    assert b == pytest.approx(R.link_bound(p, Xm, logpot)[0], abs=1e-8)
    assert b == pytest.approx(R.link_solve(p, Xm, tol=1e-13)[0], abs=1e-7)
    # structured: the bound is the exact objective of the chain it returns
    s = h.infer(Xm)
    assert s.bound[0] == pytest.approx(R.exact_elbo(p, Xm, s.potentials), abs=1e-10)
    assert s.bound[0] <= h.score(Xm, method="exact") + 1e-10


def test_zero_context_with_missing_frames_is_the_first_order_likelihood():
    h = random_hmm(n=3, D=2, lag=3, context="both", cscale=0.0, seed=4)
    X, _ = h.sample(60, random_state=2)
    Xm = with_missing(X, (0, 10, 11, 12, 59), ((20, 0), (30, 1)))
    p = R.params_of(h)
    ref = R.forward_backward(p["pi"], p["A"], R._site_terms(p, Xm))
    seen = ~np.isnan(Xm)
    ref_ll = ref[2] - 0.5 * np.sum(Xm[seen] ** 2) - 0.5 * seen.sum() * np.log(2 * np.pi)
    for method in ("structured", "exact"):
        assert h.score(Xm, method=method) == pytest.approx(ref_ll, rel=1e-12)
    np.testing.assert_allclose(h.predict_proba(Xm), ref[0], atol=1e-10)


@pytest.mark.parametrize("context", CONTEXTS)
def test_mstep_statistics_with_missing_values_are_the_objective_in_the_means(context):
    h = random_hmm(n=3, D=2, lag=2, context=context, seed=9, cscale=0.8)
    X, _ = h.sample(25, random_state=9)
    Xm = with_missing(X, (3, 12, 24), ((0, 1), (7, 0), (8, 1), (15, 0)))
    (sp, A, U, V, W, lag, right, left), Xs, r = shifted_run(h, Xm, want_stats=True)
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


@pytest.mark.parametrize("method", ["structured", "naive"])
def test_every_verb_takes_missing_values(method):
    h = random_hmm(n=3, lag=2, context="both", seed=7, cscale=0.6)
    Xs = [h.sample(T, random_state=T)[0] for T in (30, 12, 25)]
    Xs = [with_missing(Xs[0], (0, 5, 6), ((9, 1),)), with_missing(Xs[1], range(12)),
          with_missing(Xs[2], (24,), ((3, 0),))]
    X, lengths = np.concatenate(Xs), [30, 12, 25]
    r = h.infer(X, lengths, method=method)
    assert np.all(np.isfinite(r.bound)) and np.all(np.isfinite(r.posteriors))
    assert np.all(r.bound <= h.infer(X, lengths, method="exact").bound + 1e-9)
    hist = r.history[0][: r.n_iter[0] + 1]
    assert np.all(np.diff(hist) >= -1e-12 * np.abs(hist[:-1]))
    assert h.score(X, lengths, method=method) == pytest.approx(r.bound.sum(), rel=1e-13)
    lp, post = h.score_samples(X, lengths, method=method)
    np.testing.assert_array_equal(post, h.predict_proba(X, lengths, method=method))
    assert h.predict(X, lengths, method=method).shape == (67,)
    logp, path = h.decode(X, lengths, method=method)
    # ln P(x_observed, path): the missing terms are left out of the path's log-probability too
    p = R.params_of(h)
    want = sum(R.log_prior(p, path[a:b]) + R.log_emission(p, x, path[a:b])
               for x, a, b in zip(Xs, [0, 30, 42], [30, 42, 67]))
    assert logp == pytest.approx(want, rel=1e-12)
    # the answers do not depend on the thread count
    h.n_threads = 1
    r1 = h.infer(X, lengths, method=method)
    h.n_threads = 2
    r2 = h.infer(X, lengths, method=method)
    np.testing.assert_array_equal(r1.bound, r2.bound)
    np.testing.assert_array_equal(r1.posteriors, r2.posteriors)


def test_fit_with_missing_frames_never_decreases_and_learns():
    truth = random_hmm(n=2, D=2, lag=2, context="right", seed=5, sep=3.0, cscale=0.8)
    Xs = [truth.sample(120, random_state=s)[0] for s in range(3)]
    rng = np.random.default_rng(0)
    Xm = [np.where(rng.random(x.shape[0])[:, None] < 0.2, np.nan, x) for x in Xs]
    Xm[0][5, 1] = np.nan    # and a partly observed row
    import mfengine as mf
    m = mf.ContextHMM(2, lag=2, context="right", max_iter=15, bw_max_iter=15, tol=None,
                      random_state=0, progress=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m.fit(Xm)
    hist = m.history_
    assert np.all(np.isfinite(hist))
    bw = m.bw_n_iter_
    assert np.all(np.diff(hist[:bw]) >= -1e-9 * np.abs(hist[1:bw]))
    assert np.all(np.diff(hist[bw:]) >= -1e-9 * np.abs(hist[bw + 1:]))
    # it learns: on held-out data its exact likelihood is near the true model's (U and the
    # context means share an offset, so the tables themselves are not compared): measured
    # 0.023 nats per step below it (0.020 when fitted on the complete data, 0.71 after
    # Baum-Welch alone)
    Xt = truth.sample(400, random_state=99)[0]
    gap = truth.score(Xt, method="exact") - m.score(Xt, method="exact")
    assert gap < 0.05 * 400
    # the bound counts only what was observed, so it is higher (fewer terms) with missing values
    assert m.score(Xm) > m.score(Xs)


def test_missing_value_errors_name_x():
    import mfengine as mf
    h = random_hmm(n=3, lag=2, context="both", seed=1)
    X, _ = h.sample(10, random_state=0)
    with pytest.raises(ValueError, match=r"X contains infinite values \(first in row 4\)"):
        h.score(with_missing(X) + np.where(np.arange(10)[:, None] == 4, np.inf, 0.0))
    m = mf.ContextHMM(2, progress=False)
    with pytest.raises(ValueError, match="X: column 1 has no observed value"):
        m.fit(with_missing(X, (), [(t, 1) for t in range(10)]))
    with pytest.raises(ValueError, match="1 rows with an observed value"):
        m.fit(with_missing(X, range(1, 10)))
