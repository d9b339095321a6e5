"""The kernel's numerics, tested from outside.

The kernel computes exp through its own vectorisable routine (csrc/mf_exp.h) and
log(1 + e^a) as max(a, 0) + log of a running product of (1 + e^{-|a|}) factors; nothing compiled
exposes them directly.  They are checked here through what they produce:

* the reported bound against ``evaluate_bound`` (NumPy and the C library's exp/log) at the
  same (mu, xi), over many patterns and saturated regimes (biases +-30 to +-700, huge weights,
  a layer wider than the kernel's 512-factor product chunks);
* the top layer's xi, which is sigmoid(bias) as the kernel computes it, against scipy's expit
  to a few ulps over [-700, 700];
* every xi below the top at its fixed point, with the residual evaluated by NumPy.
"""
import numpy as np
import pytest
from scipy.special import expit

import mfengine as mf
from mfengine.sbn import _gaussian

EPS = np.finfo(np.float64).eps


def infer(net, V, missing=None, tol=1e-6, inner_tol=None):
    """The Gaussian kernel called as the net's ``infer`` calls it."""
    gain_rule = inner_tol is None
    if inner_tol is None:
        inner_tol = min(1e-3, max(1e-13, 0.1 * np.sqrt(tol)))
    V = np.ascontiguousarray(V, dtype=np.float64)
    if missing is not None:
        missing = np.ascontiguousarray(missing, dtype=np.uint8)
        V = np.where(missing, 0.0, V)
    return _gaussian.run(net, V, missing, None, tol, inner_tol, 200, 1, gain_rule)


def make_net(sizes, weight_scale, bias, seed):
    rng = np.random.default_rng(seed)
    base = mf.SigmoidBeliefNet(sizes, weight_scale=weight_scale, random_state=rng)
    return mf.SigmoidBeliefNet.from_params(base.weights, [bias(rng, n) for n in sizes])


def term_magnitude(net, V, mu, xi, missing=None):
    """Sum over the bound's terms of their absolute values, per pattern: the scale of the
    rounding error of any evaluation of L that adds those terms up in floating point."""
    obs = np.ones(V.shape) if missing is None else 1.0 - missing
    mu = list(mu[:-1]) + [np.where(np.isfinite(V), V, 0.0)]
    total = np.zeros(len(V))
    for l in range(len(net.sizes)):
        if l == 0:
            m, s = np.broadcast_to(net.biases[0], mu[0].shape), np.zeros(mu[0].shape)
        else:
            m = mu[l - 1] @ net.weights[l - 1].T + net.biases[l]
            s = (mu[l - 1] * (1 - mu[l - 1])) @ (net.weights[l - 1] ** 2).T
        a = m + (0.5 - xi[l]) * s
        t = np.abs(mu[l] * m) + 0.5 * xi[l] ** 2 * s + np.logaddexp(0, a) + np.maximum(a, 0)
        if l == len(net.sizes) - 1:
            t = t * obs
        else:
            # the entropy, as log(1 + e^u) - mu u with u = logit(mu)
            with np.errstate(divide="ignore"):
                u = np.clip(np.log(mu[l]) - np.log1p(-mu[l]), -40, 40)
            t = t + np.logaddexp(0, u) + np.abs(mu[l] * u)
        total += t.sum(axis=1)
    return total


REGIMES = {
    "moderate": (1.0, lambda r, n: r.normal(0, 1, n)),
    "bias+-30": (1.0, lambda r, n: 30.0 * r.choice([-1, 1], n)),
    "bias U(-40,40)": (2.0, lambda r, n: r.uniform(-40, 40, n)),
    "weights x20": (20.0, lambda r, n: r.normal(0, 1, n)),
    "weights x50, bias+-30": (50.0, lambda r, n: 30.0 * r.choice([-1, 1], n)),
    "bias+-300": (5.0, lambda r, n: 300.0 * r.choice([-1, 1], n)),
    "bias+-700": (5.0, lambda r, n: 700.0 * r.choice([-1, 1], n)),
}


@pytest.mark.parametrize("regime", list(REGIMES))
@pytest.mark.parametrize("sizes", [[3, 5, 4, 8], [2, 600, 5], [10, 30, 50]], ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("with_missing", [False, True])
def test_reported_bound_matches_numpy_evaluation(sizes, regime, with_missing):
    """|L_kernel - L_numpy| <= 1e-12 |L| + 4 eps S, S the sum of the terms' magnitudes.

    Where the terms do not cancel S ~ |L| and this is a 1e-12 relative test.  With biases of
    +-30 and more, a unit's terms (mu m ~ 30, log(1 + e^m) ~ 30) cancel to ~1e-13, L itself can
    be 1e-13, and neither evaluation knows it better than a few eps S; there the test still
    demands that accuracy."""
    ws, bias = REGIMES[regime]
    net = make_net(sizes, ws, bias, seed=0)
    rng = np.random.default_rng(1)
    V = rng.integers(0, 2, (300 if sum(sizes) < 100 else 50, sizes[-1])).astype(float)
    missing = (rng.random(V.shape) < 0.2) if with_missing else None
    r = infer(net, V, missing=missing, tol=1e-8)
    assert np.all(np.isfinite(r.bound))
    numpy_bound = net.evaluate_bound(V, r.mu, r.xi, missing=missing)
    S = term_magnitude(net, V, r.mu, r.xi, missing)
    err = np.abs(r.bound - numpy_bound)
    allowed = 1e-12 * np.abs(numpy_bound) + 4 * EPS * S
    worst = int(np.argmax(err / allowed))
    assert np.all(err <= allowed), (
        f"pattern {worst}: kernel {r.bound[worst]!r}, numpy {numpy_bound[worst]!r}, "
        f"allowed {allowed[worst]:.2e}"
    )
    if regime in ("moderate", "weights x20"):  # no cancellation: plainly relative
        np.testing.assert_allclose(r.bound, numpy_bound, rtol=1e-12, atol=0)


def test_top_layer_sigmoid_is_accurate_to_a_few_ulps():
    """The top layer's xi is sigmoid(bias) computed by the kernel's exp: within 4 ulps of
    scipy's expit (relative) for every bias in [-700, 700], including the log1pexp and
    exp branch points; beyond, at most the smallest normal number off."""
    rng = np.random.default_rng(0)
    b = np.concatenate([
        np.linspace(-700, 700, 2801),
        rng.uniform(-40, 40, 2000),
        rng.uniform(-1, 1, 500),
        [0.0, 1e-300, -1e-300, 5e-324, 18.0, -18.0, 33.3, -33.3, 36.7, 37.0, -37.0, 37.5, -37.5],
        np.log(2) * np.arange(-1000, 1001) / 2,  # the exp's range-reduction boundaries
    ])
    b = b[np.abs(b) <= 700]
    net = mf.SigmoidBeliefNet.from_params([np.zeros((2, len(b)))], [b, np.zeros(2)])
    xi = infer(net, np.zeros((1, 2))).xi[0][0]
    np.testing.assert_allclose(xi, expit(b), rtol=4 * EPS, atol=0)
    far = np.array([-745.0, -720.0, -708.5, 708.5, 720.0, 745.0])
    net = mf.SigmoidBeliefNet.from_params([np.zeros((2, len(far)))], [far, np.zeros(2)])
    xi = infer(net, np.zeros((1, 2))).xi[0][0]
    np.testing.assert_allclose(xi, expit(far), rtol=4 * EPS, atol=1e-300)


@pytest.mark.parametrize("weight_scale, bias_scale", [(1, 1), (5, 3), (20, 10), (50, 30)])
def test_xi_at_its_fixed_point(weight_scale, bias_scale):
    """Every xi below the top solves xi = sigmoid(m + (1/2 - xi) s) (residual evaluated by
    NumPy): within the requested inner tolerance, and to round-off when that is tiny; at a
    missing visible entry the reported visible mean is that xi."""
    net = make_net([4, 10, 20], weight_scale, lambda r, n: r.normal(0, bias_scale, n), seed=0)
    rng = np.random.default_rng(1)
    V = rng.integers(0, 2, (200, 20)).astype(float)
    missing = rng.random(V.shape) < 0.3
    for inner_tol, allowed in ((1e-13, 1e-13 + 1e-14), (1e-300, 2e-14)):
        r = infer(net, np.where(missing, np.nan, V), missing=missing, tol=1e-10, inner_tol=inner_tol)
        for l in (1, 2):
            m = r.mu[l - 1] @ net.weights[l - 1].T + net.biases[l]
            s = (r.mu[l - 1] * (1 - r.mu[l - 1])) @ (net.weights[l - 1] ** 2).T
            res = r.xi[l] - expit(m + (0.5 - r.xi[l]) * s)
            assert np.max(np.abs(res)) <= allowed, (l, inner_tol, np.max(np.abs(res)))
        np.testing.assert_array_equal(r.mu[-1][missing], r.xi[-1][missing])
        np.testing.assert_array_equal(r.mu[-1][~missing], V[~missing])
        np.testing.assert_allclose(r.xi[0], np.broadcast_to(expit(net.biases[0]), r.xi[0].shape), rtol=4 * EPS)


def test_no_overflow_with_extreme_parameters():
    """Enormous weights and biases: a finite bound, means in [0, 1], no warnings turned errors."""
    rng = np.random.default_rng(2)
    W = [rng.normal(0, 1e3, (6, 3)), rng.normal(0, 1e3, (9, 6))]
    B = [rng.normal(0, 1e3, 3), rng.normal(0, 1e3, 6), rng.normal(0, 1e3, 9)]
    net = mf.SigmoidBeliefNet.from_params(W, B)
    V = rng.integers(0, 2, (50, 9)).astype(float)
    with np.errstate(all="raise"):
        r = infer(net, V, tol=1e-8)
    assert np.all(np.isfinite(r.bound))
    for a in r.mu + r.xi:
        assert np.all((a >= 0) & (a <= 1))
    numpy_bound = net.evaluate_bound(V, r.mu, r.xi)
    S = term_magnitude(net, V, r.mu, r.xi)
    assert np.all(np.abs(r.bound - numpy_bound) <= 1e-12 * np.abs(numpy_bound) + 4 * EPS * S)
