"""A Plefka posterior that explains less than the evidence requires (issue: answers users can
trust).  On a noisy-OR net a unit observed on with bias 0 (no leak) cannot be on unless a
parent is, so the exact posterior's parent marginals sum to at least 1 there; a posterior
whose sum falls below 1 warns, names the methods to use, and is not ``converged``.  These nets
have no strict bound (it needs every bias positive), so this is the check that holds there."""
import warnings

import numpy as np
import pytest

import mfengine as mf


def leakless_net(seed, nd=10, nf=14, density=0.35):
    r = np.random.default_rng(seed)
    W = np.zeros((nd + nf, nd + nf))
    W[nd:, :nd] = r.uniform(0.05, 3.0, (nf, nd)) * (r.random((nf, nd)) < density)
    h = np.concatenate([r.uniform(0.01, 0.4, nd), np.zeros(nf)])
    visible = np.zeros(nd + nf, dtype=bool)
    visible[nd:] = True
    return mf.BeliefNet(W, h, visible, "noisy_or", progress=False), W, nd


def support_by_hand(W, nd, X, mu):
    """The smallest sum of the parents' means over each pattern's positive findings."""
    out = np.full(X.shape[0], np.inf)
    for p in range(X.shape[0]):
        for f in np.flatnonzero(X[p] == 1):
            pa = np.flatnonzero(W[nd + f, :nd] > 0)
            out[p] = min(out[p], mu[p, pa].sum())
    return out


@pytest.mark.parametrize("method", ["plefka11", "plefka12", "plefka22"])
def test_short_posteriors_warn_and_are_not_converged(method):
    flagged = 0
    for seed in range(4):
        net, W, nd = leakless_net(seed)
        X = net.sample(6, random_state=seed)
        exact = net.infer(X, method="exact")
        # the constraint holds for the exact posterior
        assert np.all(support_by_hand(W, nd, X, exact.mu) >= 1.0 - 1e-9)
        with warnings.catch_warnings(record=True) as record:
            warnings.simplefilter("always")
            r = net.infer(X, method=method)
        np.testing.assert_allclose(r.evidence_support, support_by_hand(W, nd, X, r.mu),
                                   rtol=1e-12)
        short = r.evidence_support < 1.0 - 1e-6
        msgs = [str(w.message) for w in record if "less than the evidence" in str(w.message)]
        if short.any():
            flagged += 1
            assert len(msgs) == 1 and f"{int(short.sum())} of 6 patterns" in msgs[0]
            assert "method='exact'" in msgs[0]
            assert not np.any(r.converged[short])
        else:
            assert not msgs
    assert flagged > 0, "some of these Plefka answers should fall short of the evidence"


def test_nets_with_leaks_and_other_methods_have_nothing_to_check():
    net = mf.datasets.make_diagnosis_net(8, 20, 3, random_state=0)
    X = net.sample(3, random_state=1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert net.infer(X, method="plefka11").evidence_support is None
        assert net.infer(X, method="sjj").evidence_support is None
    leakless, _, _ = leakless_net(0)
    assert leakless.infer(leakless.sample(2, random_state=0), method="exact").evidence_support \
        is None


def test_batch_reshapes_the_support():
    nets = [leakless_net(s)[0] for s in range(3)]
    batch = mf.BeliefNetBatch.from_nets(nets)
    X = np.stack([n.sample(1, random_state=k)[0] for k, n in enumerate(nets)])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        r = batch.infer(X, method="plefka11")
        for k, n in enumerate(nets):
            one = n.infer(X[k:k + 1], method="plefka11")
            np.testing.assert_allclose(r.evidence_support[k], one.evidence_support[0],
                                       rtol=1e-9)
    assert r.evidence_support.shape == (3,)
