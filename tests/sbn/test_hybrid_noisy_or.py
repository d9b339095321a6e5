"""The hybrid bound of bipartite noisy-OR nets (``_hybrid_noisy_or.hybrid_bipartite``, and
``BeliefNet.infer(method="hybrid")``): some positive findings exact, the rest transformed by
Jensen's inequality (Jaakkola & Jordan 1999), against enumeration over every disease state and
the exact engine: a lower bound on ln P(e), equal to it when every positive is exact,
non-decreasing in ``max_exact``, never lowered by EM, and its refusals."""
import numpy as np
import pytest
import scipy.sparse

import mfengine as mf
from mfengine.sbn import _hybrid_noisy_or as H
from mfengine.sbn._exact_noisy_or import bipartite_blocks, exact_bipartite
from mfengine.sbn._hybrid_noisy_or import hybrid_bipartite


def enumerate_log_p(hd, hf, W, e):
    """ln P(recorded findings) by summing over all 2**n_diseases disease states."""
    W = W.toarray() if scipy.sparse.issparse(W) else np.asarray(W, dtype=float)
    nd = hd.size
    D = ((np.arange(2**nd)[:, None] >> np.arange(nd)) & 1).astype(float)
    with np.errstate(divide="ignore"):
        lp = np.where(D == 1, np.log(-np.expm1(-hd)), -hd).sum(axis=1)
        z = hf + D @ W.T
        on, off = np.log(-np.expm1(-z)), -z
    rec = ~np.isnan(e)
    lj = lp + np.where(e[rec] == 1, on[:, rec], off[:, rec]).sum(axis=1)
    top = lj.max()
    return top + np.log(np.sum(np.exp(lj - top)))


def random_net(seed, nd=10, nf=14, density=0.35, leak=0.05):
    rng = np.random.default_rng(seed)
    hd = rng.uniform(0.05, 0.6, nd)
    W = rng.uniform(0.2, 2.5, (nf, nd)) * (rng.random((nf, nd)) < density)
    hf = np.full(nf, leak) if leak is not None else np.zeros(nf)
    return hd, hf, W


def cases(hd, hf, W, n, seed, p_miss=0.2):
    """Evidence drawn from the net (diseases, then findings), some findings unrecorded."""
    rng = np.random.default_rng(seed)
    d = (rng.random((n, hd.size)) < -np.expm1(-hd)).astype(float)
    f = (rng.random((n, hf.size)) < -np.expm1(-(hf + d @ W.T))).astype(float)
    f[rng.random(f.shape) < p_miss] = np.nan
    return f


@pytest.mark.parametrize("seed", range(6))
def test_bound_below_exact_and_equal_when_all_exact(seed):
    hd, hf, W = random_net(seed)
    E = cases(hd, hf, W, 8, seed + 100)
    ref = np.array([enumerate_log_p(hd, hf, W, e) for e in E])
    exact, marg_x, _ = exact_bipartite(hd, hf, scipy.sparse.csr_matrix(W), E)
    np.testing.assert_allclose(exact, ref, atol=1e-9)
    lb0, _, _ = hybrid_bipartite(hd, hf, W, E, max_exact=0)
    assert np.all(lb0 <= ref + 1e-9)
    lb, marg, info = hybrid_bipartite(hd, hf, W, E)            # every positive exact
    assert info["exact"].all()
    np.testing.assert_allclose(lb, ref, atol=1e-9)
    np.testing.assert_allclose(marg, marg_x, atol=1e-9)
    assert np.all(info["n_exact"] == info["n_positive"])


@pytest.mark.parametrize("leak", [0.05, 0.5, 0.0])
@pytest.mark.parametrize("seed", range(4))
def test_monotone_in_max_exact(seed, leak):
    hd, hf, W = random_net(seed, nd=11, nf=16, density=0.4, leak=leak)
    E = cases(hd, hf, W, 6, seed + 200, p_miss=0.1)
    ref = np.array([enumerate_log_p(hd, hf, W, e) for e in E])
    prev = np.full(E.shape[0], -np.inf)
    for k in range(9):
        lb, _, info = hybrid_bipartite(hd, hf, W, E, max_exact=k)
        assert np.all(lb <= ref + 1e-9), k
        assert np.all(lb >= prev - 1e-9), k
        assert np.all(info["n_exact"] <= info["n_positive"])
        prev = lb
    lb, _, _ = hybrid_bipartite(hd, hf, W, E, max_exact=None)
    np.testing.assert_allclose(lb, ref, atol=1e-9)


@pytest.mark.parametrize("seed", range(4))
def test_em_never_lowers_the_bound(seed):
    hd, hf, W = random_net(seed, nd=12, nf=16, density=0.45)
    E = cases(hd, hf, W, 4, seed + 300, p_miss=0.0)
    Ws = scipy.sparse.csr_matrix(W)
    for i in range(E.shape[0]):
        pos = np.flatnonzero(E[i] == 1)
        neg = (E[i] == 0).astype(float)
        l1 = np.log(-np.expm1(-hd)) - Ws.T @ neg
        prob = H._Problem(pos, l1, Ws, hd, hf, 16, i)
        for n_ex in (0, min(2, pos.size)):
            exact = np.zeros(pos.size, dtype=bool)
            exact[:n_ex] = True
            q, lam, u = H._start(prob)
            trace = []
            with np.errstate(all="ignore"):
                H._em(prob, exact, q, lam, u, 1e-12, 50, trace)
            t = np.array(trace)
            accepted = t[:-1] if t.size > 1 and not t[-1] >= t[-2] else t
            assert np.all(np.diff(accepted) >= -1e-12)


def test_single_parent_findings_are_exact_when_transformed():
    # each positive finding has one parent: the transformation is exact (q = 1)
    hd = np.array([0.3, 0.2, 0.5])
    hf = np.full(3, 0.1)
    W = np.diag([1.0, 2.0, 0.7])
    E = np.array([[1.0, 1.0, 0.0], [1.0, np.nan, 1.0]])
    lb, _, _ = hybrid_bipartite(hd, hf, W, E, max_exact=0)
    ref = [enumerate_log_p(hd, hf, W, e) for e in E]
    np.testing.assert_allclose(lb, ref, atol=1e-10)


def test_impossible_evidence_gives_minus_inf():
    hd = np.array([0.3, 0.2])
    hf = np.zeros(2)
    W = np.array([[0.0, 0.0], [1.0, 1.0]])           # finding 0 has no parent and no leak
    lb, marg, _ = hybrid_bipartite(hd, hf, W, np.array([[1.0, 0.0]]), max_exact=0)
    assert lb[0] == -np.inf and np.all(np.isnan(marg[0]))


def test_width_limit_falls_back_to_a_bound():
    net = mf.datasets.make_diagnosis_net(40, 120, 8, random_state=1)
    b = bipartite_blocks(net.W, net.h, net.visible, net.activation)
    X = net.sample(3, random_state=2)
    exact, _, _ = exact_bipartite(b.h_disease, b.h_finding, b.W_fd, X)
    lb, marg, info = hybrid_bipartite(b.h_disease, b.h_finding, b.W_fd, X, max_width=4)
    assert np.all(info["width"] <= 4)
    assert np.all(lb <= exact + 1e-9)
    assert np.all((marg >= 0) & (marg <= 1))


@pytest.mark.parametrize("kw, name", [
    ({"max_exact": -1}, "max_exact"), ({"max_exact": 1.5}, "max_exact"),
    ({"max_exact": True}, "max_exact"), ({"tol": 0.0}, "tol"), ({"tol": np.nan}, "tol"),
    ({"max_iter": -1}, "max_iter"), ({"max_width": -1}, "max_width"),
    ({"max_width": 61}, "max_width"),
])
def test_bad_arguments_are_named(kw, name):
    hd, hf, W = random_net(0, nd=4, nf=5)
    E = cases(hd, hf, W, 2, 0)
    with pytest.raises(ValueError, match=name):
        hybrid_bipartite(hd, hf, W, E, **kw)


def test_bad_arrays_are_named():
    hd, hf, W = random_net(0, nd=4, nf=5)
    E = cases(hd, hf, W, 2, 0)
    with pytest.raises(ValueError, match="h_disease"):
        hybrid_bipartite(-hd, hf, W, E)
    with pytest.raises(ValueError, match="W_fd"):
        hybrid_bipartite(hd, hf, W[:, :3], E)
    with pytest.raises(ValueError, match="evidence"):
        hybrid_bipartite(hd, hf, W, np.full((2, 5), 0.5))


# ----------------------------------------------------------------------------- the verb
def test_infer_hybrid_on_a_diagnosis_net():
    net = mf.datasets.make_diagnosis_net(12, 30, 3, random_state=0)
    X = net.sample(5, random_state=1)
    miss = np.random.default_rng(0).random(X.shape) < 0.3
    ex = net.infer(X, miss, method="exact")
    hy = net.infer(X, miss, method="hybrid")
    assert hy.method == "hybrid" and hy.converged.all()
    np.testing.assert_allclose(hy.bound, ex.bound, atol=1e-9)
    np.testing.assert_allclose(hy.mu, ex.mu, atol=1e-9, equal_nan=True)
    prev = np.full(X.shape[0], -np.inf)
    for k in range(4):
        lb = net.infer(X, miss, method="hybrid", max_exact=k).bound
        assert np.all(lb <= ex.bound + 1e-9) and np.all(lb >= prev - 1e-9)
        prev = lb
    np.testing.assert_allclose(net.score_samples(X, miss, method="hybrid"), ex.bound,
                               atol=1e-9)


def test_infer_hybrid_refusals():
    rng = np.random.default_rng(0)
    W = np.tril(np.abs(rng.normal(size=(5, 5))), -1)
    chain = mf.BeliefNet(W, np.full(5, 0.3), [False, False, True, True, True], "noisy_or")
    with pytest.raises(ValueError, match="bipartite noisy-OR"):
        chain.infer(np.ones((1, 3)), method="hybrid")
    sig = mf.BeliefNet(W, np.zeros(5), [False, False, True, True, True], "sigmoid")
    with pytest.raises(ValueError, match="bipartite noisy-OR"):
        sig.infer(np.ones((1, 3)), method="hybrid")
    net = mf.datasets.make_diagnosis_net(6, 10, 2, random_state=0)
    X = net.sample(2, random_state=1)
    with pytest.raises(ValueError, match="max_exact"):
        net.infer(X, method="sjj", max_exact=2)
    with pytest.raises(ValueError, match="max_exact"):
        net.infer(X, method="hybrid", max_exact=-2)
    with pytest.raises(ValueError, match="not a factorised posterior"):
        net.sample_posterior(X, 2, method="hybrid")
    batch = mf.BeliefNetBatch.from_nets([net, net])
    with pytest.raises(ValueError, match="hybrid"):
        batch.infer(X, method="hybrid")


def test_layered_net_refuses_max_exact():
    net = mf.SigmoidBeliefNet([2, 4], random_state=0, progress=False)
    with pytest.raises(ValueError, match="max_exact"):
        net.infer(net.sample(2, random_state=0), max_exact=3)
