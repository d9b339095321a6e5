"""SigmoidBeliefNet.fit: gradient ascent on the mean-field bound raises it, and a net trained on
data from a known small net generalises (exact held-out log-likelihood)."""
import copy

import numpy as np
import pytest
from sklearn.base import clone

import mfengine as mf

SIZES = [2, 4, 8]
# the per-pattern solve of the training runs below (fit's former defaults tol=1e-4,
# max_sweeps=100, now the constructor's infer_tol and infer_max_iter)
SOLVE = dict(infer_tol=1e-4, infer_max_iter=100)


@pytest.fixture(scope="module")
def data():
    """2000 training and 2000 held-out patterns from a known [2, 4, 8] net."""
    teacher = mf.SigmoidBeliefNet(SIZES, weight_scale=4.0, random_state=0)
    rng = np.random.default_rng(1)
    teacher = mf.SigmoidBeliefNet.from_params(teacher.weights, [rng.normal(0, 1, n) for n in SIZES])
    return teacher, teacher.sample(2000, random_state=1), teacher.sample(2000, random_state=2)


def independent_pixels_ll(V_train, V_test):
    """Held-out log-likelihood of the best model with independent visible units."""
    n = len(V_train)
    p = np.clip(V_train.mean(axis=0), 1 / (n + 2), 1 - 1 / (n + 2))
    return np.mean(V_test @ np.log(p) + (1 - V_test) @ np.log1p(-p))


def check_history_rises(history):
    """Increasing overall: last above first, the best of the second half at least the best of
    the first half, and no epoch-to-epoch drop beyond stochastic-gradient noise (0.02 nats)."""
    assert np.all(np.isfinite(history))
    assert history[-1] > history[0] + 0.02
    half = len(history) // 2
    assert history[half:].max() >= history[:half].max()
    assert np.min(np.diff(history)) > -0.02


@pytest.mark.parametrize(
    "batch_size, warm_start, epochs, learning_rate",
    [(1, False, None, None), (1, True, None, None), (20, False, 30, 0.2), (20, True, 30, 0.2)],
    ids=["online", "online-warm", "minibatch", "minibatch-warm"],
)
def test_fit_raises_the_bound_and_generalises(data, batch_size, warm_start, epochs, learning_rate):
    teacher, V, Vt = data
    params = dict(learning_rate=learning_rate, batch_size=batch_size, warm_start=warm_start,
                  progress=False, random_state=3, **SOLVE)
    if epochs is not None:
        params["max_iter"] = epochs
    net = mf.SigmoidBeliefNet(SIZES, **params)
    before = mf.infer(net, V, tol=1e-6).bound.mean()   # draws the parameters from random_state
    untrained = copy.deepcopy(net)
    assert net.fit(V) is net
    history = net.history_
    # with warm_start=False fit redraws the same parameters from random_state=3
    assert history.shape == ((8,) if epochs is None else (epochs,))  # None: the paper's schedule
    assert net.n_iter_ == len(history)
    check_history_rises(history)
    after = mf.infer(net, V, tol=1e-6).bound.mean()
    assert after > before
    ll = {
        "teacher": teacher.exact_log_likelihood(Vt).mean(),
        "learned": net.exact_log_likelihood(Vt).mean(),
        "untrained": untrained.exact_log_likelihood(Vt).mean(),
        "independent": independent_pixels_ll(V, Vt),
    }
    print(f"\nbatch={batch_size} warm={warm_start}: bound {history[0]:.4f} -> {history[-1]:.4f}; "
          "held-out ln P: " + ", ".join(f"{k} {v:.4f}" for k, v in ll.items()))
    assert ll["learned"] > ll["untrained"]
    # the hidden units learned structure beyond the pixel means
    assert ll["learned"] > ll["independent"]
    # and nothing can beat the true model on held-out data by more than sampling noise
    assert ll["learned"] < ll["teacher"] + 0.02


def test_warm_start_changes_the_path_not_the_quality(data):
    """warm_start=True on a net without parameters starts from the same draw as a fresh fit,
    and then also starts each pattern's solve from its previous solution."""
    _, V, _ = data
    a = mf.SigmoidBeliefNet(SIZES, max_iter=4, learning_rate=0.05, progress=False,
                            random_state=3, **SOLVE)
    b = clone(a).set_params(warm_start=True)
    ha = a.fit(V[:500]).history_
    hb = b.fit(V[:500]).history_
    # the first epoch starts every pattern at 0.5 either way
    assert ha[0] == pytest.approx(hb[0], abs=1e-9)
    # later epochs start from different points (so the option does something) ...
    assert not np.array_equal(ha, hb)
    # ... and reach solutions of the same quality
    np.testing.assert_allclose(ha, hb, atol=0.01)


def test_fit_is_reproducible_and_depends_on_the_order(data):
    """The same start (parameters drawn from seed 3); the order of the patterns from
    random_state (from_params nets continue from their parameters: warm_start=True)."""
    _, V, _ = data
    start = mf.SigmoidBeliefNet(SIZES, random_state=3)
    runs = []
    for seed in (0, 0, 1):
        net = mf.SigmoidBeliefNet.from_params(start.weights, start.biases, max_iter=2,
                                              learning_rate=0.05, progress=False,
                                              random_state=seed, **SOLVE)
        h = net.fit(V[:300]).history_
        runs.append((h, net))
    np.testing.assert_array_equal(runs[0][0], runs[1][0])
    for x, y in zip(runs[0][1].weights, runs[1][1].weights):
        np.testing.assert_array_equal(x, y)
    assert not np.array_equal(runs[0][1].weights[0], runs[2][1].weights[0])


def test_zero_learning_rate_sets_only_visible_biases(data):
    """learning_rate=0 leaves the weights and hidden biases alone; init_visible_biases sets the
    visible biases to the logits of the (clipped) pixel means; the history is then the mean
    converged bound of the data under the fixed net."""
    _, V, _ = data
    V = V[:200].copy()
    V[:, 0] = 1.0  # a pixel that is always on: its mean is clipped to 1 - 1/(n+2)
    seen = []
    net = mf.SigmoidBeliefNet(SIZES, max_iter=2, learning_rate=0.0, progress=False,
                              infer_tol=1e-10, infer_max_iter=100, random_state=3,
                              callback=lambda epoch, n, b: seen.append((epoch, n, b)))
    assert net.sample(0).shape == (0, 8)   # draws the parameters, which fit redraws alike
    orig = copy.deepcopy(net)
    h = net.fit(V).history_
    for x, y in zip(net.weights, orig.weights):
        np.testing.assert_array_equal(x, y)
    for x, y in zip(net.biases[:-1], orig.biases[:-1]):
        np.testing.assert_array_equal(x, y)
    n = len(V)
    p = np.clip(V.mean(axis=0), 1 / (n + 2), 1 - 1 / (n + 2))
    np.testing.assert_allclose(net.biases[-1], np.log(p / (1 - p)), rtol=1e-12)
    expected = mf.infer(net, V, tol=1e-10, max_iter=200).bound.mean()
    np.testing.assert_allclose(h, [expected, expected], atol=1e-8)
    assert [e for e, _, _ in seen] == [0, 1]
    assert all(m is net for _, m, _ in seen)
    np.testing.assert_array_equal([b for _, _, b in seen], h)


def test_fit_with_missing_entries(data):
    """Missing entries are left out of the bound; their stored values do not matter, and
    init_visible_biases uses the observed entries only."""
    _, V, _ = data
    V = V[:400]
    missing = np.random.default_rng(5).random(V.shape) < 0.25
    results = []
    for fill in (np.nan, 0.0, 1.0):
        net = mf.SigmoidBeliefNet(SIZES, max_iter=6, learning_rate=0.05, progress=False,
                                  random_state=3, **SOLVE)
        h = net.fit(np.where(missing, fill, V), missing=missing).history_
        results.append((h, net))
    for h, net in results[1:]:
        np.testing.assert_array_equal(h, results[0][0])
        for x, y in zip(net.weights + net.biases, results[0][1].weights + results[0][1].biases):
            np.testing.assert_array_equal(x, y)
    h = results[0][0]
    assert h[-1] > h[0]
    # visible biases were initialised from the observed entries only (a zero learning rate
    # isolates that step)
    net = mf.SigmoidBeliefNet(SIZES, max_iter=1, learning_rate=0.0, progress=False, **SOLVE)
    net.fit(np.where(missing, np.nan, V), missing=missing)
    obs = ~missing
    n = len(V)
    p = np.clip((V * obs).sum(0) / obs.sum(0), 1 / (n + 2), 1 - 1 / (n + 2))
    np.testing.assert_allclose(net.biases[-1], np.log(p / (1 - p)), rtol=1e-12)


def test_fit_argument_errors(data):
    _, V, _ = data

    def net(**params):
        return mf.SigmoidBeliefNet(SIZES, random_state=3, progress=False, **params)

    with pytest.raises(ValueError, match="batch_size"):
        net(batch_size=0).fit(V)
    with pytest.raises(ValueError, match="max_iter"):
        net(max_iter=0).fit(V)
    with pytest.raises(ValueError, match="learning_rate"):
        net(learning_rate=-0.1, max_iter=1).fit(V)
    with pytest.raises(ValueError, match="max_iter"):
        net(max_iter=3, learning_rate=[0.1, 0.1]).fit(V)
    with pytest.raises(ValueError, match="method"):
        net(method="newton").fit(V)
    with pytest.raises(ValueError, match="X"):
        net().fit(V[:, :5])
    with pytest.raises(ValueError, match="patterns"):
        net().fit(V[:0])


# ---------------------------------------------------------------------------- partial_fit
def _perms(seed, n, k):
    rng = np.random.default_rng(seed)
    return [rng.permutation(n) for _ in range(k)]


@pytest.mark.parametrize("with_missing", [False, True])
def test_partial_fit_equals_fit_epochs_gaussian(with_missing):
    """With a constant rate and warm_start=False, each epoch of fit is one partial_fit over
    that epoch's permutation of the data (both solve from 0.5)."""
    gen = mf.SigmoidBeliefNet([3, 6, 12], weight_scale=2.0, random_state=5)
    X = gen.sample(60, random_state=1)
    miss = np.random.default_rng(2).random(X.shape) < 0.2 if with_missing else None
    params = dict(learning_rate=0.05, max_iter=3, batch_size=7, random_state=0, progress=False)
    a = mf.SigmoidBeliefNet([3, 6, 12], **params).fit(X, missing=miss)
    b = mf.SigmoidBeliefNet([3, 6, 12], **params)
    for order in _perms(0, X.shape[0], 3):
        b.partial_fit(X[order], missing=None if miss is None else miss[order])
    for wa, wb in zip(a.weights_ + a.biases_, b.weights_ + b.biases_):
        np.testing.assert_allclose(wa, wb, rtol=0, atol=1e-12)
    np.testing.assert_allclose(a.history_, b.history_, rtol=1e-12)
    assert b.n_iter_ == 3
    # the default schedule: max_iter=1 runs one epoch at 0.02, as partial_fit does
    c = mf.SigmoidBeliefNet([3, 6, 12], max_iter=1, random_state=0, progress=False).fit(X)
    d = mf.SigmoidBeliefNet([3, 6, 12], random_state=0, progress=False)
    d.partial_fit(X[_perms(0, X.shape[0], 1)[0]])
    for wa, wb in zip(c.weights_, d.weights_):
        np.testing.assert_allclose(wa, wb, rtol=0, atol=1e-12)


def test_partial_fit_layered_dag_method_equals_first_epoch():
    gen = mf.SigmoidBeliefNet([2, 4, 8], weight_scale=2.0, random_state=5)
    X = gen.sample(40, random_state=1)
    params = dict(method="sjj", learning_rate=0.1, max_iter=1, batch_size=8, random_state=3,
                  progress=False)
    a = mf.SigmoidBeliefNet([2, 4, 8], **params).fit(X)
    b = mf.SigmoidBeliefNet([2, 4, 8], **params).partial_fit(X[_perms(3, 40, 1)[0]])
    for wa, wb in zip(a.weights_ + a.biases_, b.weights_ + b.biases_):
        np.testing.assert_allclose(wa, wb, rtol=0, atol=1e-12)
    np.testing.assert_allclose(a.history_, b.history_, rtol=1e-12)
    # an all-False mask is no mask: the same step as without one
    c = mf.SigmoidBeliefNet([2, 4, 8], **params).partial_fit(X[_perms(3, 40, 1)[0]],
                                                             missing=np.zeros(X.shape, bool))
    for wb, wc in zip(b.weights_ + b.biases_, c.weights_ + c.biases_):
        np.testing.assert_array_equal(wb, wc)


@pytest.mark.parametrize("activation", ["sigmoid", "noisy_or"])
def test_partial_fit_belief_net_equals_first_epoch(activation):
    rng = np.random.default_rng(0)
    W = np.tril(rng.uniform(0.1, 1.0, (8, 8)), -1)
    h = np.full(8, 0.3)
    gen = mf.BeliefNet(W, h, visible=[4, 5, 6, 7], activation=activation)
    X = gen.sample(50, random_state=1)
    miss = rng.random(X.shape) < 0.2
    W0 = np.tril(np.full((8, 8), 0.4), -1)
    params = dict(activation=activation, learning_rate=0.2, max_iter=1, batch_size=16,
                  random_state=4, progress=False)
    a = mf.BeliefNet(W0, h, [4, 5, 6, 7], **params).fit(X, missing=miss)
    order = _perms(4, 50, 1)[0]
    b = mf.BeliefNet(W0, h, [4, 5, 6, 7], **params).partial_fit(X[order], missing=miss[order])
    np.testing.assert_allclose(a.W_, b.W_, rtol=0, atol=1e-12)
    np.testing.assert_allclose(a.h_, b.h_, rtol=0, atol=1e-12)
    np.testing.assert_allclose(a.history_, b.history_, rtol=1e-12)
    # later calls continue from the current parameters and extend the history
    before = b.W_.copy()
    b.partial_fit(X[:10])
    assert b.n_iter_ == 2 and b.history_.shape == (2,)
    assert not np.array_equal(before, b.W_)
    np.testing.assert_array_equal(b.W_[np.triu_indices(8)], 0.0)   # the edges are kept


def test_partial_fit_continues_after_fit_and_checks_its_input():
    net = mf.SigmoidBeliefNet([2, 3, 6], max_iter=2, random_state=0, progress=False)
    X = net.sample(30, random_state=0)
    net.fit(X)
    w = [a.copy() for a in net.weights_]
    net.partial_fit(X[:5])
    assert net.n_iter_ == 3 and net.history_.shape == (3,)
    assert any(not np.array_equal(a, b) for a, b in zip(w, net.weights_))
    with pytest.raises(ValueError, match="X"):
        net.partial_fit(X[:, :4])
    with pytest.raises(ValueError, match="X"):
        net.partial_fit(X[:0])
    with pytest.raises(ValueError, match="learning_rate"):
        net.set_params(learning_rate=-1.0).partial_fit(X)
