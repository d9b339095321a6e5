"""The compiled training epoch against a plain Python epoch built from infer + gradient."""
import numpy as np
import pytest

import mfengine as mf
from mfengine.inference import _inner_tol
from mfengine.sbn import _gaussian


def python_epoch(net, V, order, lr, batch_size, tol, missing=None):
    total = 0.0
    for s in range(0, len(order), batch_size):
        idx = order[s : s + batch_size]
        mb = None if missing is None else missing[idx]
        r = mf.infer(net, V[idx], tol=tol, max_sweeps=500, missing=mb)
        total += r.bound.sum()
        gW, gb = net.gradient(V[idx], result=r, missing=mb)
        for w, g in zip(net.weights, gW):
            w += lr / len(idx) * g
        for b, g in zip(net.biases, gb):
            b += lr / len(idx) * g
    return total


@pytest.mark.parametrize("batch_size", [1, 7, 60])
@pytest.mark.parametrize("with_missing", [False, True])
def test_compiled_epoch_matches_python_epoch(batch_size, with_missing):
    true = mf.SigmoidBeliefNet([2, 4, 8], weight_scale=2.0, random_state=0)
    V = true.sample(60, random_state=1)
    missing = None
    if with_missing:
        missing = np.random.default_rng(4).random(V.shape) < 0.2
        V = np.where(missing, np.nan, V)
    a = mf.SigmoidBeliefNet([2, 4, 8], weight_scale=0.5, random_state=3)
    b = a.copy()
    order = np.random.default_rng(5).permutation(60).astype(np.intp)
    state = np.full((60, 14), 0.5)
    miss_u8 = None if missing is None else missing.astype(np.uint8)
    Vk = np.nan_to_num(V)
    total = _gaussian.fit_epoch(a, Vk, miss_u8, order, 0.1, batch_size, 1e-10, _inner_tol(1e-10),
                                500, state)
    total_ref = python_epoch(b, V, order, 0.1, batch_size, 1e-10, missing)
    assert total == pytest.approx(total_ref, rel=1e-12, abs=1e-9)
    for x, y in zip(a.weights + a.biases, b.weights + b.biases):
        np.testing.assert_allclose(x, y, rtol=0, atol=1e-11)
    # the parameters really moved
    c = mf.SigmoidBeliefNet([2, 4, 8], weight_scale=0.5, random_state=3)
    assert max(np.abs(x - y).max() for x, y in zip(a.weights, c.weights)) > 1e-3


def test_fit_history_is_the_mean_bound_before_each_update():
    true = mf.SigmoidBeliefNet([2, 4, 8], weight_scale=2.0, random_state=0)
    V = true.sample(40, random_state=1)
    net = mf.SigmoidBeliefNet([2, 4, 8], weight_scale=0.5, random_state=3)
    ref = net.copy()
    hist = net.fit(V, epochs=1, learning_rate=0.0, batch_size=5, init_visible_biases=False,
                   progress=False, tol=1e-10)
    # with a zero learning rate the history is just the mean converged bound
    r = mf.infer(ref, V, tol=1e-10)
    assert hist[0] == pytest.approx(r.bound.mean(), abs=1e-8)


def test_fit_rejects_divergence():
    V = mf.SigmoidBeliefNet([2, 6], random_state=0).sample(30, random_state=1)
    net = mf.SigmoidBeliefNet([2, 6], random_state=0)
    with pytest.raises(FloatingPointError, match="learning rate"):
        net.fit(V, epochs=3, learning_rate=1e308, progress=False)


# --------------------------------------------------------------------------- solver edge cases
# (kept here beside the other tests written with the kernel's internals in view)

@pytest.mark.parametrize("init", [1e-9, 1e-12, 1.0 - 1e-12])
@pytest.mark.parametrize("inner_tol", [None, 1e-4])
def test_saturated_start_still_moves(init, inner_tol):
    """A mean started next to 0 or 1 moves when its derivative says so: the default rule that
    skips updates with a negligible predicted gain must not freeze saturated units."""
    net = mf.SigmoidBeliefNet.from_params([np.array([[1.0]])], [np.array([0.0]), np.array([0.0])])
    V = np.array([[1.0]])
    ref = mf.infer(net, V, tol=1e-12, inner_tol=1e-10)
    r = mf.infer(net, V, init_mu=[[init]], inner_tol=inner_tol)
    assert r.mu[0][0, 0] == pytest.approx(ref.mu[0][0, 0], abs=1e-3)
    assert r.bound[0] == pytest.approx(ref.bound[0], abs=1e-6)
    # one hidden unit over one visible unit: the 1-D problem is concave and the bound is
    # within the Gaussian approximation of ln P(v)
    assert abs(r.bound[0] - net.exact_log_likelihood(V)[0]) < 0.05


def test_shallow_maximum_at_the_symmetric_start_is_left_for_the_far_better_one():
    """By symmetry the derivative is exactly 0 at mu = 0.5, the default start, and with the
    children's xi at their values there mu = 0.5 is a (very shallow) local maximum of this
    unit's non-concave 1-D objective, some 15 nats below the maxima near either end.  The
    solver's probe of the other end must find them."""
    J = 20.0
    net = mf.SigmoidBeliefNet.from_params([np.array([[J], [J]])], [np.zeros(1), np.array([-J / 2, -J / 2])])
    V = np.array([[1.0, 0.0]])
    stuck = net.evaluate_bound(V, [np.array([[0.5]]), V], [np.array([[0.5]]), np.full((1, 2), 0.5)])
    for inner_tol in (None, 1e-6):
        r = mf.infer(net, V, inner_tol=inner_tol)
        m = r.mu[0][0, 0]
        assert m < 0.1 or m > 0.9
        assert r.bound[0] > stuck[0] + 5.0
        # the Gaussian-approximated bound is close to the exact value (not necessarily below)
        assert abs(r.bound[0] - net.exact_log_likelihood(V)[0]) < 0.1


@pytest.mark.parametrize("sizes, weight_scale", [([3, 8, 20], 1.0), ([4, 12, 36], 1.0),
                                                 ([3, 8, 20], 3.0), ([2, 6, 6, 12], 2.0)])
def test_default_mode_shortcuts_never_lower_the_bound(sizes, weight_scale):
    """With the default tolerances the solver skips updates with a negligible predicted gain
    and takes short Newton steps without re-evaluating the children (their cached sigmoids
    move by a Taylor step).  Every such step must still raise the exact bound, and the
    shortcuts must actually be taken (the path differs from the fully evaluated one)."""
    net = mf.SigmoidBeliefNet(sizes, weight_scale=weight_scale, random_state=11)
    V = net.sample(3, random_state=12)
    H = sum(sizes[:-1])
    moved_differently = False
    for v in V:
        fast = _gaussian.trace(net, v, max_sweeps=12, inner_tol=1e-4, gain_tol=1e-6 / (10 * H))
        full = _gaussian.trace(net, v, max_sweeps=12, inner_tol=1e-4)
        drop = fast["before"] - fast["after"]
        scale = 1.0 + np.abs(fast["before"]).max()
        assert drop.max() <= 1e-12 * scale, f"an update lowered the bound by {drop.max():.3e}"
        # the default mode reaches the same bound as the fully evaluated path, to round-off of tol
        assert fast["after"][-1] == pytest.approx(full["after"][-1], abs=1e-5)
        moved_differently |= not np.array_equal(fast["mu"], full["mu"])
    assert moved_differently


def test_classifier_training_is_the_same_on_any_number_of_threads():
    """The class nets train in parallel threads; each has its own seeds, so the fitted
    parameters are identical for 1 and 2 threads."""
    rng = np.random.default_rng(0)
    X = (rng.random((120, 16)) < 0.3).astype(float)
    y = np.repeat([0, 1, 2], 40)
    X[y == 1, :4] = 1.0
    X[y == 2, -4:] = 1.0
    fits = [mf.GenerativeClassifier(hidden=(3, 6), epochs=3, n_threads=nt, random_state=4).fit(X, y)
            for nt in (1, 2)]
    for a, b in zip(fits[0].nets_, fits[1].nets_):
        for wa, wb in zip(a.weights + a.biases, b.weights + b.biases):
            np.testing.assert_array_equal(wa, wb)
    np.testing.assert_array_equal(fits[0].history_, fits[1].history_)
    assert fits[0].score(X, y) > 0.6


# --------------------------------------------------------------------------- for other libraries
def test_plain_arrays_instead_of_a_model():
    net = mf.SigmoidBeliefNet([3, 6, 12], random_state=0)
    V = net.sample(50, random_state=1)
    a = mf.infer(net, V)
    b = mf.infer((net.weights, net.biases), V)
    np.testing.assert_array_equal(a.bound, b.bound)
    gw, gb = mf.gradient((net.weights, net.biases), V, result=b)
    rw, rb = net.gradient(V, result=a)
    for x, y in zip(gw + gb, rw + rb):
        np.testing.assert_array_equal(x, y)
    with pytest.raises(TypeError, match="pair"):
        mf.infer("not a net", V)
    with pytest.raises(ValueError, match="weights\\[0\\]"):
        mf.infer(([np.zeros((5, 3))], [np.zeros(3), np.zeros(6)]), V[:, :6])


def test_many_python_threads_at_once():
    """Concurrent calls from Python threads (the kernel releases the GIL) give exactly the
    answers of sequential calls."""
    from concurrent.futures import ThreadPoolExecutor

    nets = [mf.SigmoidBeliefNet([4, 12, 36], random_state=s) for s in range(4)]
    data = [n.sample(300, random_state=7) for n in nets]
    expected = [mf.infer(n, V, n_threads=1).bound for n, V in zip(nets, data)]
    jobs = [(i % 4, nt) for i in range(16) for nt in (1, 2)]
    with ThreadPoolExecutor(max_workers=8) as pool:
        got = list(pool.map(lambda j: mf.infer((nets[j[0]].weights, nets[j[0]].biases),
                                               data[j[0]], n_threads=j[1]).bound, jobs))
    for (i, _), bound in zip(jobs, got):
        np.testing.assert_array_equal(bound, expected[i])


@pytest.mark.parametrize("inner_tol", [None, 1e-10])
def test_pass_skipping_a_layer_does_not_stop_early(inner_tol):
    """With two hidden layers a pass may skip the layer the previous pass ended on; a pass over
    pinned (saturated) units alone changes the bound by nothing, and must not on its own declare
    convergence.  Restarting from the reported solution must gain nothing."""
    W0 = np.array([[-1.2, 1.4], [-0.8, 0.2]])
    W1 = np.array([[-2.5, -6.7], [-11.3, 0.8], [3.1, -6.9], [-11.7, 14.0]])
    net = mf.SigmoidBeliefNet.from_params([W0, W1], [np.array([-1.3, -2.2]), np.zeros(2), np.zeros(4)])
    V = np.ones((1, 4))
    r = mf.infer(net, V, tol=1e-12, inner_tol=inner_tol)
    assert r.converged.all()
    again = mf.infer(net, V, tol=1e-12, inner_tol=inner_tol,
                     init_mu=np.concatenate(r.mu[:-1], axis=1))
    assert again.bound[0] - r.bound[0] < 1e-9
