"""``BeliefNet.infer(X, missing, method="exact")``: the exact ln P(x) and posterior means,
by the diagnosis-net junction tree (bipartite noisy-OR) or by enumeration (any small DAG),
against brute-force sums over every joint state."""
import itertools

import numpy as np
import pytest

import mfengine as mf


def brute_force(W, h, visible, activation, v, observed):
    """ln P(observed visible entries) and every unit's posterior mean, summing over all
    2**n_units states (the observed units clamped)."""
    n = h.size
    vis = np.flatnonzero(visible)
    lps, states = [], []
    for bits in itertools.product([0.0, 1.0], repeat=n):
        s = np.array(bits)
        if np.any(s[vis[observed]] != v[observed]):
            continue
        z = W @ s + h
        p1 = 1 / (1 + np.exp(-z)) if activation == "sigmoid" else -np.expm1(-z)
        with np.errstate(divide="ignore"):
            lps.append(np.sum(np.where(s > 0, np.log(p1), np.log1p(-p1))))
        states.append(s)
    lps, states = np.array(lps), np.array(states)
    m = lps.max()
    w = np.exp(lps - m)
    return m + np.log(w.sum()), (w[:, None] * states).sum(axis=0) / w.sum()


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_diagnosis_net_exact_matches_brute_force(seed):
    net = mf.datasets.make_diagnosis_net(7, 9, 3, random_state=seed)
    X = net.sample(6, random_state=seed + 10)
    miss = np.random.default_rng(seed).random(X.shape) < 0.3
    r = net.infer(X, miss, method="exact")
    W, h, visible = net.W.toarray(), net.h, net.visible_
    for i in range(X.shape[0]):
        lp, mu = brute_force(W, h, visible, "noisy_or", X[i], ~miss[i])
        assert r.bound[i] == pytest.approx(lp, abs=1e-10)
        np.testing.assert_allclose(r.mu[i, :7], mu[:7], atol=1e-10)      # the diseases
        obs = np.flatnonzero(visible)[~miss[i]]
        np.testing.assert_array_equal(r.mu[i, obs], X[i, ~miss[i]])
        assert np.all(np.isnan(r.mu[i, np.flatnonzero(visible)[miss[i]]]))
    assert r.method == "exact" and r.converged.all() and (r.n_iter == 0).all()
    np.testing.assert_allclose(net.score_samples(X, miss, method="exact"),
                               net.exact_log_likelihood(X, miss), atol=1e-10)


@pytest.mark.parametrize("activation", ["sigmoid", "noisy_or"])
def test_any_small_dag_is_exact_by_enumeration(activation):
    rng = np.random.default_rng(3)
    n = 8
    W = np.tril(rng.uniform(0, 1.5, (n, n)) if activation == "noisy_or"
                else rng.normal(size=(n, n)), -1)
    h = rng.uniform(0.1, 1, n) if activation == "noisy_or" else rng.normal(size=n)
    net = mf.BeliefNet(W, h, [2, 5, 7], activation)      # visible units with children
    X = net.sample(5, random_state=4)
    miss = np.zeros(X.shape, dtype=bool)
    miss[1, 0] = miss[3, 2] = True
    r = net.infer(X, miss, method="exact")
    for i in range(5):
        lp, mu = brute_force(W, h, net.visible_, activation, X[i], ~miss[i])
        assert r.bound[i] == pytest.approx(lp, abs=1e-10)
        np.testing.assert_allclose(r.mu[i], mu, atol=1e-10)
    # every bound of the package lies below it
    assert np.all(net.score_samples(X, miss, method="sjj") <= r.bound + 1e-9)


def test_exact_refuses_what_is_out_of_reach_by_name():
    big = mf.BeliefNet(np.tril(np.full((24, 24), 0.3), -1), np.zeros(24), [23])
    with pytest.raises(ValueError, match="max_hidden=20"):
        big.infer(np.ones((1, 1)), method="exact")
    net = mf.datasets.make_diagnosis_net(60, 400, 8, random_state=0)
    X = net.sample(1, random_state=0)
    X[0] = 1.0                                           # every finding positive
    with pytest.raises(ValueError, match="max_width is 25"):
        net.infer(X, method="exact")
    batch = mf.BeliefNetBatch(np.stack([np.tril(np.full((4, 4), 0.5), -1)] * 2),
                              np.zeros((2, 4)), [3])
    with pytest.raises(ValueError, match="method='exact' is for a BeliefNet"):
        batch.infer(np.zeros((2, 1)), method="exact")
    small = mf.datasets.make_diagnosis_net(6, 10, 2, random_state=0)
    Xs = small.sample(2, random_state=1)
    miss = np.zeros(Xs.shape, dtype=bool)
    miss[:, 0] = True
    with pytest.raises(ValueError, match="impute with method='importance'"):
        small.impute(Xs, miss, method="exact")
    with pytest.raises(ValueError, match="not a factorised posterior"):
        small.sample_posterior(Xs, 2, method="exact")


def test_exact_log_likelihood_takes_the_junction_tree_beyond_enumeration():
    # a diagnosis net's enumeration stops at max_hidden; the junction tree does not
    net = mf.datasets.make_diagnosis_net(7, 9, 3, random_state=1)
    X = net.sample(6, random_state=2)
    miss = np.random.default_rng(3).random(X.shape) < 0.3
    by_tree = net.exact_log_likelihood(X, miss, max_hidden=0)
    np.testing.assert_allclose(by_tree, net.exact_log_likelihood(X, miss), atol=1e-10)
    # a sigmoid net (no junction tree) still refuses by name
    sig = mf.BeliefNet(net.W.toarray(), np.zeros(net.h.size), net.visible_, "sigmoid")
    with pytest.raises(ValueError, match="max_hidden=0"):
        sig.exact_log_likelihood(X, miss, max_hidden=0)
    # the full-size net: tractable cases score exactly, out-of-reach ones name the width
    big = mf.datasets.make_diagnosis_net(random_state=0)
    Xb = big.sample(2, random_state=3)
    keep = np.zeros(Xb.shape, dtype=bool)
    rng = np.random.default_rng(0)
    for p in range(2):
        keep[p, rng.choice(np.flatnonzero(Xb[p] == 1), 12, replace=False)] = True
        keep[p, rng.choice(np.flatnonzero(Xb[p] == 0), 300, replace=False)] = True
    np.testing.assert_allclose(big.exact_log_likelihood(Xb, ~keep),
                               big.score_samples(Xb, ~keep, method="exact"), rtol=1e-13)
    with pytest.raises(ValueError, match="max_width is 25"):
        big.exact_log_likelihood(Xb)
