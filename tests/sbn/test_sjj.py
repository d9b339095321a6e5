"""The strict SJJ bounds (sigmoid and noisy-OR) against enumeration and slow references."""
import numpy as np
import pytest
from scipy.optimize import minimize, minimize_scalar

import mfengine as mf
from mfengine.sbn import sjj
from mfengine.sbn.batch import BeliefNetBatch
from mfengine.sbn.dag import DagStructure

from reference_sjj import (barren_mask, log_joint_dense, mean_field_elbo, sjj_noisy_or,
                           sjj_sigmoid)


def layered_arrays(rng, sizes, lo, hi, n_nets):
    n = sum(sizes)
    off = np.cumsum([0] + list(sizes))
    W = np.zeros((n_nets, n, n))
    for l in range(len(sizes) - 1):
        W[:, off[l + 1]:off[l + 2], off[l]:off[l + 1]] = rng.uniform(lo, hi, (n_nets, sizes[l + 1], sizes[l]))
    h = rng.uniform(lo, hi, (n_nets, n))
    return W, h, np.arange(off[-2], n)


def layered_batch(rng, sizes, lo, hi, n_nets, activation="sigmoid"):
    W, h, visible = layered_arrays(rng, sizes, lo, hi, n_nets)
    return BeliefNetBatch(W, h, visible, activation)


class Dag:
    """A random DAG net: the model, and its dense arrays kept here (the tests do not depend
    on the model's attribute names)."""

    def __init__(self, W, h, visible, activation):
        self.W, self.h, self.activation = W, h, activation
        self.visible = np.zeros(len(h), dtype=bool)
        self.visible[visible] = True
        self.structure = DagStructure(W != 0)
        self.model = mf.BeliefNet(W, h, visible, activation)

    def log_joint(self, S):
        return log_joint_dense(self.W, self.h, self.activation)(S)

    def exact_log_likelihood(self, V, **kw):
        return self.model.exact_log_likelihood(V, **kw)


def random_dag(rng, n, n_visible, activation="sigmoid", scale=2.0, density=0.6):
    W = np.tril(rng.uniform(-scale, scale, (n, n)), -1) * (rng.random((n, n)) < density)
    h = rng.uniform(-scale, scale, n)
    if activation == "noisy_or":
        W, h = np.abs(W), np.abs(h) + 0.05
    return Dag(W, h, np.arange(n - n_visible, n), activation)


CASES = [("sigmoid", -1, 1), ("sigmoid", -5, 5), ("noisy_or", 0.0, 0.25), ("noisy_or", 0.2, 0.8)]


@pytest.mark.parametrize("activation,lo,hi", CASES)
def test_never_above_exact_on_1000_nets(activation, lo, hi):
    rng = np.random.default_rng(0)
    batch = layered_batch(rng, [2, 4, 6], lo, hi, 1000, activation)
    V = rng.integers(0, 2, (1000, 2, 6)).astype(float)
    r = mf.infer(batch, V, method="sjj", n_threads=2)
    lnp = batch.exact_log_likelihood(V)
    assert r.bound.shape == (1000, 2) and r.converged.mean() > 0.99
    assert np.all(r.bound <= lnp + 1e-9), (r.bound - lnp).max()
    # and not vacuous: within a few nats of ln P for these small nets
    assert np.median(lnp - r.bound) < 1.0   # and not vacuous (ln P is about -6 here)


@pytest.mark.parametrize("activation", ["sigmoid", "noisy_or"])
def test_ascent_is_monotone(activation):
    rng = np.random.default_rng(1)
    W, h, visible = layered_arrays(rng, [3, 5, 8], 0.0 if activation == "noisy_or" else -4, 4, 200)
    if activation == "noisy_or":
        h = h + 0.05
    V = rng.integers(0, 2, (200, 8)).astype(float)
    s = DagStructure(W[0] != 0)
    clamp = np.full((200, s.n_units), np.nan)
    clamp[:, visible] = V
    *_, hist = sjj.solve(s, s.pack(W), h, np.arange(200), clamp, tol=1e-12,
                         max_sweeps=300, record=True, activation=activation)
    steps = np.diff(hist, axis=1)
    ok = ~np.isnan(steps)
    # the last entry is the reported bound, which carries its rounding allowance (about
    # 1e-13 per unit), the others the bound after each sweep
    assert ok.sum() > 1000 and np.all(steps[ok] >= -1e-12 * (1 + np.abs(hist[:, 1:][ok])))


@pytest.mark.parametrize("activation", ["sigmoid", "noisy_or"])
def test_kernel_matches_reference_and_lies_below_the_mean_field_objective(activation):
    rng = np.random.default_rng(2)
    for trial in range(20):
        net = random_dag(rng, 7, 3, activation)
        s = net.structure
        free = ~net.visible
        clamp = np.full((1, 7), np.nan)
        clamp[0, net.visible] = rng.integers(0, 2, 3)
        mu = np.where(free, rng.uniform(0.01, 0.99, 7), clamp[0])
        # free units with no clamped descendant are summed out exactly: the bound is that of
        # the net without them
        k = ~barren_mask(net.W, free)
        if activation == "sigmoid":
            xi = rng.uniform(0, 1, 7)
            ref = sjj_sigmoid(net.W[np.ix_(k, k)], net.h[k], mu[k], xi[k], free[k])
            assert ref == sjj_sigmoid(net.W, net.h, mu, xi, free)  # the reference leaves them out
            q = xi
        else:
            Q = rng.random((7, 7)) * (net.W > 0)
            Q /= np.maximum(Q.sum(axis=1, keepdims=True), 1e-300)
            ref = sjj_noisy_or(net.W[np.ix_(k, k)], net.h[k], mu[k], Q[np.ix_(k, k)], free[k])
            q = s.pack(Q)
        kept = log_joint_dense(net.W[np.ix_(k, k)], net.h[k], activation)
        elbo = mean_field_elbo(kept, mu[k], free[k])
        got = sjj.evaluate(s, s.pack(net.W)[None], net.h[None], np.zeros(1, np.intp), clamp,
                           mu[None], q[None], activation=activation)[0]
        assert got == pytest.approx(ref, rel=1e-11, abs=1e-11)
        assert ref <= elbo + 1e-10


def test_sigmoid_solution_is_optimal_in_each_coordinate():
    rng = np.random.default_rng(3)
    for trial in range(10):
        net = random_dag(rng, 8, 3)
        s = net.structure
        free = ~net.visible
        v = rng.integers(0, 2, (1, 3)).astype(float)
        r = mf.infer(net.model, v, method="sjj", tol=1e-13, inner_tol=1e-12)
        mu, xi = r.mu[0].copy(), r.xi[0].copy()
        base = sjj_sigmoid(net.W, net.h, mu, xi, free)
        assert base == pytest.approx(r.bound[0], abs=1e-10)
        for i in range(8):  # each xi minimises its unit's term (maximises L)
            f = lambda x: -sjj_sigmoid(net.W, net.h, mu, np.where(np.arange(8) == i, x, xi), free)
            best = minimize_scalar(f, bounds=(0, 1), method="bounded", options={"xatol": 1e-12})
            assert -best.fun <= base + 1e-9
        for i in np.flatnonzero(free):  # each free mean is stationary
            e = 1e-6
            up = mu.copy(); up[i] += e
            dn = mu.copy(); dn[i] -= e
            d = (sjj_sigmoid(net.W, net.h, up, xi, free) - sjj_sigmoid(net.W, net.h, dn, xi, free)) / (2 * e)
            assert abs(d) < 1e-4 or mu[i] < 1e-12 or mu[i] > 1 - 1e-12


# slow: finite differences over ten nets; tests/sbn/test_noisy_or_sjj.py checks the noisy-OR
# solution against the slow reference
@pytest.mark.slow
def test_noisy_or_q_is_optimal():
    rng = np.random.default_rng(4)
    for trial in range(10):
        net = random_dag(rng, 7, 3, "noisy_or", scale=1.0, density=1.0)
        s = net.structure
        free = ~net.visible
        v = np.ones((1, 3))
        r = mf.infer(net.model, v, method="sjj", tol=1e-13)
        mu, q = r.mu[0], r.xi[0]
        Q = s.unpack(q)
        base = sjj_noisy_or(net.W, net.h, mu, Q, free)
        for i in range(3, 7):  # units with several parents: compare with a generic optimiser
            par = np.flatnonzero(net.W[i])

            def neg(x, i=i, par=par):
                Q2 = Q.copy()
                Q2[i, par] = np.abs(x) / np.abs(x).sum()
                return -sjj_noisy_or(net.W, net.h, mu, Q2, free)

            res = minimize(neg, Q[i, par] + 1e-3, method="Nelder-Mead",
                           options={"xatol": 1e-10, "fatol": 1e-13, "maxiter": 20000})
            assert -res.fun <= base + 1e-7


@pytest.mark.parametrize("activation", ["sigmoid", "noisy_or"])
def test_gradient_matches_finite_differences(activation):
    rng = np.random.default_rng(5)
    net = random_dag(rng, 8, 3, activation, scale=1.5)
    s = net.structure
    clamp = np.full((4, 8), np.nan)
    clamp[:, 5:] = rng.integers(0, 2, (4, 3))
    clamp[3, 6] = np.nan   # a missing visible unit is free
    w, h, no = s.pack(net.W)[None], net.h[None], np.zeros(4, np.intp)
    _, mu, xi, _, _ = sjj.solve(s, w, h, no, clamp, activation=activation)
    gw, gh = sjj.gradient(s, w, h, no, clamp, mu, xi, activation=activation)
    ev = lambda w, h: sjj.evaluate(s, w, h, no, clamp, mu, xi, activation=activation)
    e = 1e-6
    for k in range(s.nnz):
        d = np.zeros_like(w); d[0, k] = e
        np.testing.assert_allclose((ev(w + d, h) - ev(w - d, h)) / (2 * e), gw[:, k], atol=1e-7)
    for k in range(8):
        d = np.zeros_like(h); d[0, k] = e
        np.testing.assert_allclose((ev(w, h + d) - ev(w, h - d)) / (2 * e), gh[:, k], atol=1e-7)


@pytest.mark.parametrize("activation", ["sigmoid", "noisy_or"])
def test_no_hidden_units_gives_the_exact_likelihood(activation):
    rng = np.random.default_rng(6)
    net = random_dag(rng, 6, 6, activation)
    V = rng.integers(0, 2, (20, 6)).astype(float)
    r = mf.infer(net.model, V, method="sjj")
    exact = net.exact_log_likelihood(V)
    if activation == "sigmoid":
        np.testing.assert_allclose(r.bound, exact, rtol=1e-12, atol=1e-12)
    else:   # the concavity bound is exact only for units with at most one parent
        assert np.all(r.bound <= exact + 1e-12)


def test_missing_visible_units_are_summed_over():
    rng = np.random.default_rng(7)
    net = random_dag(rng, 9, 4)
    V = rng.integers(0, 2, (50, 4)).astype(float)
    miss = rng.random((50, 4)) < 0.3
    r = mf.infer(net.model, V, method="sjj", missing=miss)
    exact = net.exact_log_likelihood(np.where(miss, np.nan, V), missing=miss)
    assert np.all(r.bound <= exact + 1e-10)
    full = mf.infer(net.model, V, method="sjj")
    assert np.all(r.bound >= full.bound - 1e-9)   # marginalising can only raise ln P


def test_layered_net_through_infer():
    net = mf.SigmoidBeliefNet([2, 4, 6], random_state=0)
    V = net.sample(30, random_state=1)
    r = mf.infer(net, V, method="sjj")
    assert [m.shape for m in r.mu] == [(30, 2), (30, 4), (30, 6)]
    np.testing.assert_array_equal(r.mu[-1], V)
    assert np.all(r.bound <= net.exact_log_likelihood(V) + 1e-10)


@pytest.mark.parametrize("activation", ["sigmoid", "noisy_or"])
def test_thread_count_does_not_change_the_answer(activation):
    rng = np.random.default_rng(8)
    batch = layered_batch(rng, [2, 4, 6], 0.0 if activation == "noisy_or" else -3, 3, 300, activation)
    V = rng.integers(0, 2, (300, 6)).astype(float)
    a = mf.infer(batch, V, method="sjj", n_threads=1)
    b = mf.infer(batch, V, method="sjj", n_threads=2)
    np.testing.assert_array_equal(a.bound, b.bound)
    np.testing.assert_array_equal(a.mu, b.mu)


def test_noisy_or_needs_a_positive_leak():
    """With h = 0 a noisy-OR unit whose parents are off never fires and the bound is -inf:
    refused by name, through the kernel entry point and through mf.infer."""
    W = np.tril(np.ones((4, 4)), -1)
    h = np.array([0.0, 0.1, 0.1, 0.1])
    s = DagStructure(W != 0)
    clamp = np.array([[np.nan, np.nan, np.nan, 1.0]])
    with pytest.raises(ValueError, match="positive biases"):
        sjj.solve(s, s.pack(W)[None], h[None], np.zeros(1, np.intp), clamp, activation="noisy_or")
    with pytest.raises(ValueError, match="positive biases"):
        mf.infer(mf.BeliefNet(W, h, [3], "noisy_or"), np.ones((1, 1)), method="sjj")


def test_batch_of_nets_equals_nets_one_by_one():
    rng = np.random.default_rng(10)
    nets = [random_dag(rng, 7, 3).model for _ in range(5)]   # the batch's edges: their union
    V = rng.integers(0, 2, (5, 4, 3)).astype(float)
    batch = mf.BeliefNetBatch.from_nets(nets)
    for method in ("sjj", "plefka12"):
        r = mf.infer(batch, V, method=method, tol=1e-10)
        r_list = mf.infer(nets, V, method=method, tol=1e-10)
        np.testing.assert_array_equal(r.bound, r_list.bound)
        for k, net in enumerate(nets):
            one = mf.infer(net, V[k], method=method, tol=1e-10)
            np.testing.assert_allclose(r.bound[k], one.bound, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(batch.exact_log_likelihood(V),
                               [n.exact_log_likelihood(V[k]) for k, n in enumerate(nets)], rtol=1e-12)


@pytest.mark.parametrize("activation", ["sigmoid", "noisy_or"])
def test_default_start_written_by_the_threads_equals_the_explicit_start(activation):
    """sjj.solve leaves mu and xi unwritten (np.empty) when no start is given and the kernel's
    threads write the default start into each item's rows: the same answer, bit for bit, as
    that start given explicitly, on any thread count, whatever the fresh memory held."""
    rng = np.random.default_rng(21)
    net = random_dag(rng, 9, 4, activation)
    s, n = net.structure, len(net.h)
    w, h = s.pack(net.W)[None], net.h[None]
    n_items = 37
    clamp = np.full((n_items, n), np.nan)
    clamp[:, net.visible] = rng.integers(0, 2, (n_items, 4))
    net_of = np.zeros(n_items, np.intp)
    n_xi = s.nnz if activation == "noisy_or" else n
    ref = sjj.solve(s, w, h, net_of, clamp, n_threads=1, activation=activation,
                    init_mu=np.full((n_items, n), 0.5),
                    init_xi=np.full((n_items, n_xi), 1.0 if activation == "noisy_or" else 0.5))
    for n_threads in (1, 2, 3):
        for _ in range(3):      # recycled memory holding other values
            junk = np.full((n_items, max(n, n_xi)), 7.0)
            del junk
            got = sjj.solve(s, w, h, net_of, clamp, n_threads=n_threads, activation=activation)
            for a, b in zip(ref, got):
                np.testing.assert_array_equal(a, b)
    assert np.all(np.isfinite(ref[1])) and np.all(ref[4])


def test_evaluate_half_is_evaluate_at_xi_one_half():
    # the Plefka certificate on sigmoid nets: the bound with every xi at 1/2, one pass over the
    # edges; the same number as evaluate's (and the NumPy reference's), batches of nets,
    # clamped, free and barren units, more than one thread
    rng = np.random.default_rng(11)
    for trial in range(60):
        scale = [0.5, 2.0, 8.0][trial % 3]
        net = random_dag(rng, 9, 4, scale=scale)
        s = net.structure
        n_nets, n_items = 3, 40
        w = s.pack(net.W)[None] * rng.uniform(0.5, 1.5, (n_nets, 1))
        h = net.h[None] * rng.uniform(0.5, 1.5, (n_nets, 1))
        net_of = rng.integers(0, n_nets, n_items).astype(np.intp)
        clamp = np.where(rng.random((n_items, 9)) < 0.5, rng.integers(0, 2, (n_items, 9)), np.nan)
        mu = np.where(np.isnan(clamp), rng.uniform(0.0, 1.0, clamp.shape), clamp)
        mu[rng.random(mu.shape) < 0.1] = 0.0          # means at the ends too
        want = sjj.evaluate(s, w, h, net_of, clamp, mu, np.full(clamp.shape, 0.5))
        got = sjj.evaluate_half(s, w, h, net_of, clamp, mu, n_threads=2)
        np.testing.assert_allclose(got, want, rtol=1e-11, atol=1e-11)
    # against the NumPy reference on the net itself (one net, no rescaling)
    for trial in range(30):
        net = random_dag(rng, 8, 3, scale=3.0)
        s = net.structure
        clamp = np.full((1, 8), np.nan)
        clamp[0, 5:] = rng.integers(0, 2, 3)
        free = np.isnan(clamp[0])
        mu = np.where(free, rng.uniform(0.01, 0.99, 8), clamp[0])
        k = ~barren_mask(net.W, free)
        ref = sjj_sigmoid(net.W[np.ix_(k, k)], net.h[k], mu[k], np.full(k.sum(), 0.5), free[k])
        got = sjj.evaluate_half(s, s.pack(net.W)[None], net.h[None], np.zeros(1, np.intp),
                                clamp, mu[None])[0]
        assert got == pytest.approx(ref, rel=1e-11, abs=1e-11)
        assert got <= net.exact_log_likelihood(clamp[:, 5:])[0] + 1e-12


def test_evaluate_half_hands_large_weights_to_evaluate():
    # beyond |h| + sum |w| of 1,000 the products could leave the double range: evaluate's
    # own careful sum is used
    rng = np.random.default_rng(3)
    net = random_dag(rng, 6, 2, scale=400.0, density=1.0)
    s = net.structure
    clamp = np.array([[np.nan] * 4 + [1.0, 0.0]])
    mu = np.array([[0.2, 0.7, 0.5, 0.9, 1.0, 0.0]])
    got = sjj.evaluate_half(s, s.pack(net.W)[None], net.h[None], np.zeros(1, np.intp), clamp, mu)
    want = sjj.evaluate(s, s.pack(net.W)[None], net.h[None], np.zeros(1, np.intp), clamp, mu,
                        np.full((1, 6), 0.5))
    assert np.isfinite(got[0]) and got[0] == want[0]


def test_evaluate_half_with_units_without_parents_anywhere():
    # units without parents at the end of the order (an empty last segment) and in between
    W = np.zeros((5, 5))
    W[2, 0], W[2, 1], W[3, 2] = 1.5, -2.0, 0.7
    s = DagStructure(W != 0)
    h = np.array([[0.3, -0.2, 0.1, -0.4, 0.5]])
    clamp = np.array([[np.nan, np.nan, np.nan, 1.0, 0.0]])
    mu = np.array([[0.4, 0.6, 0.2, 1.0, 0.0]])
    got = sjj.evaluate_half(s, s.pack(W)[None], h, np.zeros(1, np.intp), clamp, mu)
    want = sjj.evaluate(s, s.pack(W)[None], h, np.zeros(1, np.intp), clamp, mu,
                        np.full((1, 5), 0.5))
    np.testing.assert_allclose(got, want, rtol=1e-12)
    no_edges = DagStructure(np.zeros((3, 3), dtype=bool))
    got = sjj.evaluate_half(no_edges, np.zeros((1, 0)), h[:, :3], np.zeros(1, np.intp),
                            np.array([[1.0, 0.0, np.nan]]), np.array([[1.0, 0.0, 0.5]]))
    want = sjj.evaluate(no_edges, np.zeros((1, 0)), h[:, :3], np.zeros(1, np.intp),
                        np.array([[1.0, 0.0, np.nan]]), np.array([[1.0, 0.0, 0.5]]),
                        np.full((1, 3), 0.5))
    np.testing.assert_allclose(got, want, rtol=1e-12)
