"""Learning DAG nets with the mean-field objectives (BeliefNet.fit, SigmoidBeliefNet.fit)."""
import numpy as np
import pytest

import mfengine as mf


def bars_net(activation, seed):
    rng = np.random.default_rng(seed)
    sizes = [1, 4, 9]
    n = sum(sizes)
    off = np.cumsum([0] + sizes)
    W = np.zeros((n, n))
    for l in range(2):
        block = rng.uniform(0.05, 0.5, (sizes[l + 1], sizes[l]))
        W[off[l + 1]:off[l + 2], off[l]:off[l + 1]] = block if activation == "noisy_or" else block - 0.25
    h = np.full(n, 0.1) if activation == "noisy_or" else np.zeros(n)
    return mf.BeliefNet(W, h, np.arange(off[-2], n), activation)


@pytest.mark.parametrize("activation", ["sigmoid", "noisy_or"])
def test_sjj_learning_raises_the_likelihood(activation):
    X = mf.datasets.make_bars(400, size=3, random_state=0)
    net = bars_net(activation, 0)
    before = net.exact_log_likelihood(X).mean()
    hist = net.fit(X, method="sjj", epochs=15, learning_rate=0.3, batch_size=20,
                   progress=False, random_state=0)
    after = net.exact_log_likelihood(X).mean()
    assert after > before + 0.5
    assert hist[-1] > hist[0]
    assert hist[-1] <= after + 1e-9          # the bound stays below the likelihood
    if activation == "noisy_or":
        assert net.W.min() >= 0.0 and net.h.min() >= 1e-3


def test_layered_fit_with_sjj_updates_the_layers():
    net = mf.SigmoidBeliefNet([2, 4, 6], random_state=0)
    V = mf.SigmoidBeliefNet([2, 4, 6], random_state=5).sample(300, random_state=1)
    w0 = [w.copy() for w in net.weights]
    before = net.exact_log_likelihood(V).mean()
    seen = []
    net.fit(V, method="sjj", epochs=10, learning_rate=0.3, batch_size=30, progress=False,
            random_state=0, callback=lambda e, n, b: seen.append(b))
    assert len(seen) == 10
    assert any(not np.array_equal(a, b) for a, b in zip(w0, net.weights))
    assert net.exact_log_likelihood(V).mean() > before


def test_fit_rejects_bad_arguments():
    net = bars_net("sigmoid", 1)
    X = mf.datasets.make_bars(10, size=3, random_state=0)
    with pytest.raises(ValueError, match="method"):
        net.fit(X, method="gaussian", progress=False)
    with pytest.raises(ValueError, match="epochs"):
        net.fit(X, epochs=0, progress=False)
    with pytest.raises(ValueError, match="learning_rate"):
        net.fit(X, learning_rate=-1.0, progress=False)
    with pytest.raises(ValueError, match="batch_size"):
        net.fit(X, batch_size=0, progress=False)
    with pytest.raises(ValueError, match="binary"):
        net.fit(X * 0.5, progress=False)
