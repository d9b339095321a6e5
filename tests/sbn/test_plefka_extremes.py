"""Plefka schemes at extreme weights: a finite answer or a clear error, never NaN or inf.

plefka12 with weights of 1e300 returned G = +inf (a bound of -inf through mf.infer): its
second-order term w^2 u (1 - u) overflowed at the starting point u = 0.5.  Now such items are
started from the G11 solution (or that solution rounded to 0/1), where the units with huge
weights are saturated and the term is finite; G22, whose terms go as w^4, says so by name when
it cannot be represented."""
import re

import numpy as np
import pytest

import mfengine as mf
from mfengine.sbn import plefka
from mfengine.sbn.dag import DagStructure


def _nets(rng, k, n, scale, activation):
    W = np.tril(rng.uniform(-1, 1, (k, n, n)), -1) * (rng.random((k, n, n)) < 0.7) * scale
    h = rng.uniform(-1, 1, (k, n)) * np.where(rng.random((k, 1)) < 0.5, scale, 1.0)
    if activation == "noisy_or":
        W, h = np.abs(W), np.abs(h) + 0.01
    clamp = np.full((k, n), np.nan)
    clamp[:, n // 2:] = rng.integers(0, 2, (k, n - n // 2))
    s = DagStructure(np.tril(np.ones((n, n), dtype=bool), -1))
    return s, s.pack(W), h, np.arange(k), clamp


@pytest.mark.parametrize("activation", ["sigmoid", "noisy_or"])
@pytest.mark.parametrize("order", [11, 12])
@pytest.mark.parametrize("scale", [1e17, 1e160, 1e300])
def test_g11_and_g12_stay_finite_at_huge_weights(activation, order, scale):
    rng = np.random.default_rng(0)
    s, w, h, net_of, clamp = _nets(rng, 200, 6, scale, activation)
    G, u, n_iter, conv = plefka.solve(s, w, h, net_of, clamp, order, activation)
    assert np.all(np.isfinite(G))
    assert np.all((u >= 0) & (u <= 1))


@pytest.mark.parametrize("activation", ["sigmoid", "noisy_or"])
def test_g22_is_finite_or_refused_by_name(activation):
    rng = np.random.default_rng(1)
    for scale in (1e17, 1e150, 1e300):
        s, w, h, net_of, clamp = _nets(rng, 100, 6, scale, activation)
        try:
            G, u, _, _ = plefka.solve(s, w, h, net_of, clamp, 22, activation)
        except OverflowError as exc:
            msg = str(exc)
            assert "G22 is not finite" in msg and "are too large" in msg and "W_" in msg
            assert re.search(r"\bW\b", msg), msg      # the constructor's argument, by name
        else:
            assert np.all(np.isfinite(G))


@pytest.mark.filterwarnings("ignore:.*did not converge")
def test_plefka12_through_infer_at_1e300():
    """The issue's repro: mf.infer(..., method='plefka12') with 1e300 weights gave -inf."""
    rng = np.random.default_rng(2)
    W = np.tril(rng.uniform(-1e300, 1e300, (5, 5)), -1)
    net = mf.BeliefNet(W, rng.uniform(-1, 1, 5), [3, 4])
    r = mf.infer(net, np.array([[0.0, 1.0], [1.0, 1.0], [0.0, 0.0]]), method="plefka12")
    assert np.all(np.isfinite(r.bound))


def test_objective_and_gradient_name_the_overflow():
    s = DagStructure(np.tril(np.ones((3, 3), dtype=bool), -1))
    w = np.array([[1e300, 1e300, -1e300]])
    clamp = np.array([[np.nan, np.nan, 1.0]])
    u = np.array([[0.5, 0.5, 1.0]])
    with pytest.raises(OverflowError, match="G12 is not finite"):
        plefka.objective(s, w, np.zeros((1, 3)), np.zeros(1, np.intp), clamp, u, 12, "sigmoid")
    with pytest.raises(OverflowError, match="G22 is not finite"):
        plefka.gradient(s, w, np.zeros((1, 3)), np.zeros(1, np.intp), clamp, u, 22, "sigmoid")
    # saturated means: the same weights give a finite G12 and gradient
    u = np.array([[1e-300, 1 - 2**-53, 1.0]])
    assert np.isfinite(plefka.objective(s, w, np.zeros((1, 3)), np.zeros(1, np.intp), clamp, u,
                                        11, "sigmoid")[0])


def test_impossible_noisy_or_data_is_plus_inf_not_an_error():
    """A clamped-on noisy-OR unit with h = 0 and every parent clamped off: P(v) = 0, so G =
    +inf is the exact answer (and no gradient exists)."""
    s = DagStructure(np.array([[False, False], [True, False]]))
    args = (s, np.array([[1.0]]), np.zeros((1, 2)), np.zeros(1, np.intp),
            np.array([[0.0, 1.0]]))
    G, u, _, conv = plefka.solve(*args, 12, "noisy_or")
    assert G[0] == np.inf and not conv[0]
    with pytest.raises(ValueError, match=r"\+inf"):
        plefka.gradient(*args, np.array([[0.0, 1.0]]), 12, "noisy_or")


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.filterwarnings("ignore:.*did not converge")
@pytest.mark.parametrize("activation", ["sigmoid", "noisy_or"])
@pytest.mark.parametrize("method", ["plefka11", "plefka12"])
@pytest.mark.parametrize("scale", [1e2, 1e3, 1e6])
def test_fit_with_large_weights_stays_finite(method, activation, scale):
    """Issue 14's repro: weights of 1e3 stopped fit with 'G12 is not finite'.  Nothing
    overflowed: the solution saturates free means to exactly 1.0 (sigmoid(700) rounds to 1),
    where the entropy's derivative log(u / (1 - u)) is +inf; that derivative is not part of
    the weight gradient and no longer counts as an overflow."""
    rng = np.random.default_rng(0)
    W = np.tril(rng.normal(size=(5, 5)), -1) * scale
    h = rng.normal(size=5)
    if activation == "noisy_or":
        W, h = np.abs(W), np.abs(h)
    m = mf.BeliefNet(W, h, visible=[0, 4], activation=activation, method=method, max_iter=2,
                     batch_size=3, progress=False)
    X = m.sample(6, random_state=1)
    m.fit(X)
    assert np.all(np.isfinite(m.history_)) and np.all(np.isfinite(m.W_))
    assert np.all(np.isfinite(m.h_))


def test_gradient_at_saturated_free_means():
    """Free units with means exactly 0 or 1 (the last unit clamped, so that none of them is
    barren): the weight gradient is finite (G is); only gradient_u, whose entropy part is
    infinite there, refuses them, naming u."""
    s = DagStructure(np.tril(np.ones((4, 4), dtype=bool), -1))
    w = np.random.default_rng(1).normal(size=(1, 6))
    h = np.zeros((1, 4))
    clamp = np.full((2, 4), np.nan)
    clamp[:, 3] = [1.0, 0.0]
    mu = np.array([[0.0, 1.0, 1.0, 1.0], [1.0, 0.0, 0.0, 0.0]])
    for order in (11, 12, 22):
        gw, gh = plefka.gradient(s, w, h, [0, 0], clamp, mu, order, "sigmoid")
        assert np.all(np.isfinite(gw)) and np.all(np.isfinite(gh))
        # the same as slightly inside (0, 1): the limit is continuous
        inner = np.clip(mu, 1e-12, 1 - 1e-12)
        gw2, gh2 = plefka.gradient(s, w, h, [0, 0], clamp, inner, order, "sigmoid")
        np.testing.assert_allclose(gw, gw2, atol=1e-9)
        np.testing.assert_allclose(gh, gh2, atol=1e-9)
    with pytest.raises(ValueError, match=r"^u: the free means must lie strictly inside"):
        plefka.gradient_u(s, w, h, [0, 0], clamp, mu, 12, "sigmoid")
