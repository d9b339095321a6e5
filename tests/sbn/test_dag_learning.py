"""Learning DAG nets with the mean-field objectives (BeliefNet.fit, SigmoidBeliefNet.fit)."""
import numpy as np
import pytest

import mfengine as mf


def bars_net(activation, seed, **params):
    rng = np.random.default_rng(seed)
    sizes = [1, 4, 9]
    n = sum(sizes)
    off = np.cumsum([0] + sizes)
    W = np.zeros((n, n))
    for l in range(2):
        block = rng.uniform(0.05, 0.5, (sizes[l + 1], sizes[l]))
        W[off[l + 1]:off[l + 2], off[l]:off[l + 1]] = block if activation == "noisy_or" else block - 0.25
    h = np.full(n, 0.1) if activation == "noisy_or" else np.zeros(n)
    return mf.BeliefNet(W, h, np.arange(off[-2], n), activation, **params)


@pytest.mark.parametrize("activation", ["sigmoid", "noisy_or"])
def test_sjj_learning_raises_the_likelihood(activation):
    X = mf.datasets.make_bars(400, size=3, random_state=0)
    net = bars_net(activation, 0, method="sjj", max_iter=15, learning_rate=0.3, batch_size=20,
                   progress=False, random_state=0)
    before = net.exact_log_likelihood(X).mean()
    assert net.fit(X) is net
    hist = net.history_
    assert hist.shape == (15,) and net.n_iter_ == 15
    after = net.exact_log_likelihood(X).mean()
    assert after > before + 0.5
    assert hist[-1] > hist[0]
    assert hist[-1] <= after + 1e-9          # the bound stays below the likelihood
    if activation == "noisy_or":
        assert net.W_.min() >= 0.0 and net.h_.min() >= 1e-3


def test_layered_fit_with_sjj_updates_the_layers():
    seen = []
    net = mf.SigmoidBeliefNet([2, 4, 6], method="sjj", max_iter=10, learning_rate=0.3,
                              batch_size=30, progress=False, random_state=0,
                              callback=lambda e, n, b: seen.append(b))
    V = mf.SigmoidBeliefNet([2, 4, 6], random_state=5).sample(300, random_state=1)
    w0 = [w.copy() for w in net.weights]
    before = net.exact_log_likelihood(V).mean()
    net.fit(V)
    # fit (warm_start=False) redraws the same parameters from random_state before training
    assert len(seen) == 10
    np.testing.assert_array_equal(seen, net.history_)
    assert any(not np.array_equal(a, b) for a, b in zip(w0, net.weights))
    assert net.exact_log_likelihood(V).mean() > before


def test_fit_rejects_bad_arguments():
    X = mf.datasets.make_bars(10, size=3, random_state=0)

    def fit(**params):
        return bars_net("sigmoid", 1, progress=False, **params).fit(X)

    with pytest.raises(ValueError, match="method"):
        fit(method="gaussian")
    with pytest.raises(ValueError, match="max_iter"):
        fit(max_iter=0)
    with pytest.raises(ValueError, match="learning_rate"):
        fit(learning_rate=-1.0)
    with pytest.raises(ValueError, match="batch_size"):
        fit(batch_size=0)
    with pytest.raises(ValueError, match="binary"):
        bars_net("sigmoid", 1, progress=False).fit(X * 0.5)
