"""The SJJ bound is strict: never above exact ln P(v), at any finite weight scale.

Until the kernel's log-factors were rewritten, ``ln(1 - mu + mu e^x)`` was computed as
``x + log1p((1 - mu) expm1(-x))``, which cancels catastrophically when mu is small and x large
(mu = 4e-18, x = 47: 40 nats too much; mu = 0: -inf, so that a clamped-off parent with a
weight of 100 made a unit's term 0 instead of ln(1 - f(h))), and the unit's term added and
subtracted numbers of size xi * z.  These tests compare the bound with enumeration
(``exact_log_likelihood``) over weight scales from 1 to 1e300, and the kernel's evaluation with
60-digit decimal arithmetic.

The slack allowed above ln P is 1e-12 (1 + |ln P|): ln P itself is computed by enumeration in
double precision, with a relative rounding error of a few 1e-16; the kernel's own rounding is
inside the bound (it reports its value minus an upper bound on its rounding error, see
``mfengine/sbn/_sjj.pyx``).  Over 10^5 random nets the largest excess measured was 5e-15
(1 + |ln P|), all of it the enumeration's rounding.
"""
from decimal import Decimal

import numpy as np
import pytest

import mfengine as mf
from mfengine.sbn import sjj
from mfengine.sbn.dag import DagStructure

from reference_sjj import sjj_sigmoid_exact

SCALES = [1, 5, 20, 50, 100, 1e3, 1e17, 1e300]
SLACK = 1e-12


def _solve(W, h, clamp, **kw):
    s = DagStructure(np.tril(np.ones(W.shape[-2:], dtype=bool), -1))
    w = s.pack(W if W.ndim == 3 else W[None])
    h = h if h.ndim == 2 else h[None]
    net_of = np.arange(clamp.shape[0]) if h.shape[0] > 1 else np.zeros(clamp.shape[0], np.intp)
    return sjj.solve(s, w, h, net_of, clamp, **kw)


# ---------------------------------------------------------------------------- the repros
@pytest.mark.parametrize("w", [40.0, 50.0, 100.0, 1e3, 1e17, 1e300, -1e300])
def test_no_hidden_unit_gives_exactly_ln_p(w):
    """The issue's repro: with every unit clamped the bound is ln P itself (it gave -0.974
    for ln P = -1.528 at w = 100, and 2e-6 too much at w = 50)."""
    net = mf.BeliefNet([[0, 0], [w, 0]], [0.5, -0.3], visible=[0, 1])
    for V in np.array([[0.0, 0.0], [0.0, 1.0], [1.0, 0.0], [1.0, 1.0]]):
        exact = net.exact_log_likelihood(V[None])
        bound = mf.infer(net, V[None], method="sjj").bound
        np.testing.assert_allclose(bound, exact, rtol=1e-14, atol=0)
    assert mf.infer(net, np.zeros((1, 2)), method="sjj").bound[0] == pytest.approx(-1.5284322, abs=1e-7)


def test_four_one_two_nets_with_weights_near_47():
    """The issue's 4-1-2 repro: weights up to 47 and a valid init_mu at 0, 1 or in between
    gave up to +81 nats above ln P (+40 in the issue's case)."""
    rng = np.random.default_rng(0)
    n = 7
    mask = np.zeros((n, n), dtype=bool)
    mask[4, :4] = True
    mask[5:, 4] = True
    s = DagStructure(mask)
    k = 300
    W = np.where(mask, rng.uniform(-47, 47, (k, n, n)), 0.0)
    h = rng.uniform(-5, 5, (k, n))
    V = rng.integers(0, 2, (k, 2)).astype(float)
    clamp = np.full((k, n), np.nan)
    clamp[:, 5:] = V
    init = np.where(rng.random((k, n)) < 0.5, rng.integers(0, 2, (k, n)), rng.random((k, n)))
    bound, mu, *_ = sjj.solve(s, s.pack(W), h, np.arange(k), clamp, init_mu=init)
    exact = mf.BeliefNetBatch(W, h, [5, 6]).exact_log_likelihood(V)
    assert np.all(np.isfinite(bound)) and np.all(bound <= exact + SLACK * (1 + np.abs(exact)))


# ---------------------------------------------------------------------------- every scale
def _random_nets(rng, n, k, scale):
    W = np.tril(rng.uniform(-1, 1, (k, n, n)), -1) * (rng.random((k, n, n)) < 0.7) * scale
    h = rng.uniform(-1, 1, (k, n)) * np.where(rng.random((k, 1)) < 0.5, scale, 1.0)
    return W, h


@pytest.mark.parametrize("scale", SCALES)
def test_never_above_exact_at_any_weight_scale(scale):
    """Random nets of 2 to 6 units, every number of visible units, weights and (half of the
    nets) biases uniform in [-scale, scale]: the bound is finite, at most ln P (up to the
    enumeration's rounding), and equal to it when every unit is visible."""
    rng = np.random.default_rng(int(np.log10(scale) * 7) + 1)
    k = 40
    for n in range(2, 7):
        for n_visible in range(1, n + 1):
            W, h = _random_nets(rng, n, k, scale)
            visible = np.arange(n - n_visible, n)
            V = rng.integers(0, 2, (k, n_visible)).astype(float)
            clamp = np.full((k, n), np.nan)
            clamp[:, visible] = V
            bound, mu, xi, _, conv = _solve(W, h, clamp)
            exact = mf.BeliefNetBatch(W, h, visible).exact_log_likelihood(V)
            assert np.all(np.isfinite(bound)) and np.all(bound <= 0.0)
            assert np.all((mu >= 0) & (mu <= 1)) and np.all((xi >= 0) & (xi <= 1))
            excess = (bound - exact) / (1 + np.abs(exact))
            assert excess.max() <= SLACK, (scale, n, n_visible, excess.max())
            if n_visible == n:
                np.testing.assert_allclose(bound, exact, rtol=1e-13, atol=1e-300)
            assert conv.mean() > 0.9


@pytest.mark.parametrize("scale", [0.5, 20, 1e3, 1e17, 1e300])
def test_noisy_or_never_above_exact_at_any_weight_scale(scale):
    rng = np.random.default_rng(3)
    k = 40
    for n in range(2, 6):
        for n_visible in range(1, n + 1):
            W, h = _random_nets(rng, n, k, scale)
            W, h = np.abs(W), np.abs(h) + 1e-3
            visible = np.arange(n - n_visible, n)
            V = rng.integers(0, 2, (k, n_visible)).astype(float)
            clamp = np.full((k, n), np.nan)
            clamp[:, visible] = V
            bound, *_ = _solve(W, h, clamp, activation="noisy_or")
            exact = mf.BeliefNetBatch(W, h, visible, "noisy_or").exact_log_likelihood(V)
            assert np.all(np.isfinite(bound))
            assert np.all(bound <= exact + SLACK * (1 + np.abs(exact)))


# ---------------------------------------------------------------------------- the evaluation
MEANS = [0.0, 1.0, 1e-300, 1e-20, 1e-9, 0.3, 0.5, 1 - 1e-9, 1 - 2**-52]


@pytest.mark.parametrize("scale", [1, 20, 47, 1e3, 1e6, 1e17, 1e300])
def test_evaluation_against_60_digit_arithmetic(scale):
    """sjj.evaluate at given (mu, xi), extreme means included (mu = 1e-20 with a weight of
    47 is where the old log-factor lost everything), is never above the bound computed with
    60 digits from the same doubles, beyond the rounding of the final sum; at moderate scales
    it is within 1e-11 (1 + |L|) of it (its rounding allowance included)."""
    rng = np.random.default_rng(int(scale) % 1000 + 5)
    for trial in range(25):
        n = int(rng.integers(2, 7))
        W, h = _random_nets(rng, n, 1, scale)
        W, h = W[0], h[0]
        free = rng.random(n) < 0.6
        mu = np.where(rng.random(n) < 0.5, rng.choice(MEANS, n), rng.random(n))
        mu = np.where(free, mu, rng.integers(0, 2, n).astype(float))
        xi = np.where(rng.random(n) < 0.3, rng.choice([0.0, 1.0, 1 - 2**-52, 1e-17], n),
                      rng.random(n))
        s = DagStructure(W != 0)
        clamp = np.where(free, np.nan, mu)[None]
        got = sjj.evaluate(s, s.pack(W)[None], h[None], np.zeros(1, np.intp), clamp, mu[None],
                           xi[None])[0]
        ref = sjj_sigmoid_exact(W, h, mu, xi, free)
        assert np.isfinite(got)
        assert Decimal(float(got)) <= ref + Decimal(8 * 2.0**-52) * abs(ref) + Decimal(1e-300)
        if scale <= 1e3:
            assert abs(float(ref) - got) <= 1e-11 * (1 + abs(float(ref)))


# ---------------------------------------------------------------------------- extreme values
@pytest.mark.parametrize("activation", ["sigmoid", "noisy_or"])
def test_huge_weights_give_finite_in_range_answers(activation):
    """Weights of 1e17 gave NaN and weights of 1e300 a bound 3e17 too high; now every output
    is finite and in range, the bound at most 0 for binary data."""
    rng = np.random.default_rng(11)
    for scale in (1e17, 1e100, 1e300):
        W, h = _random_nets(rng, 8, 50, scale)
        if activation == "noisy_or":
            W, h = np.abs(W), np.abs(h) + 1e-3
        clamp = np.full((50, 8), np.nan)
        clamp[:, 4:] = rng.integers(0, 2, (50, 4))
        bound, mu, xi, n_sweeps, conv = _solve(W, h, clamp, activation=activation)
        assert np.all(np.isfinite(bound)) and np.all(bound <= 0.0)
        assert np.all((mu >= 0) & (mu <= 1)) and np.all(np.isfinite(xi))
        assert conv.mean() > 0.9


def test_weights_beyond_the_double_range_of_the_bound_are_refused():
    W = np.array([[0.0, 0.0, 0.0], [1e308, 0.0, 0.0], [1e308, -1e308, 0.0]])
    clamp = np.array([[np.nan, np.nan, 1.0]])
    with pytest.raises(ValueError, match="are too large to evaluate in double precision"):
        _solve(W, np.zeros(3), clamp)


def test_the_rounding_allowance_is_small_on_ordinary_nets():
    """The reported bound is the computed one minus an upper bound on its rounding error:
    on a net of ordinary weights that costs less than 1e-11 nats."""
    rng = np.random.default_rng(12)
    W, h = _random_nets(rng, 12, 20, 3.0)
    clamp = np.full((20, 12), np.nan)
    clamp[:, 6:] = rng.integers(0, 2, (20, 6))
    bound, mu, xi, *_ = _solve(W, h, clamp, tol=1e-12)
    s = DagStructure(np.tril(np.ones((12, 12), dtype=bool), -1))
    free = np.isnan(clamp[0])
    for k in range(3):
        ref = float(sjj_sigmoid_exact(W[k], h[k], np.where(free, mu[k], clamp[k]), xi[k], free))
        assert ref - 1e-11 <= bound[k] <= ref


# ---------------------------------------------------------------------------- the fast path
def _kernel_solve(s, w, h, clamp, fast, tol=1e-10):
    """_sjj.solve with the fast path on or off (every net here is within its scale)."""
    from mfengine.sbn import _sjj

    arrays, w, h, net_of, clamp = sjj.check_nets(s, w, h, np.arange(clamp.shape[0]), clamp,
                                                 "sigmoid")
    k, n = clamp.shape
    mu, xi = np.full((k, n), 0.5), np.full((k, n), 0.5)
    bound, sweeps = np.empty(k), np.zeros(k, np.intp)
    conv, status = np.zeros(k, np.uint8), np.zeros(k, np.int8)
    hist = np.full((k, 301), np.nan)
    rc = _sjj.solve(*arrays, w, h, net_of, clamp, mu, xi, bound, sweeps, conv, status, hist,
                    tol, 1e-9, 300, 1, False, fast)
    assert rc == _sjj.STATUS_OK and np.all(status == 0)
    return bound, mu, xi, hist


def test_fast_path_reaches_the_careful_paths_maximum():
    """Nets of moderate weights (|h| + sum |W| <= 256 per unit) are solved from cached
    products with one Newton step on xi per sweep; they reach the same maximum as the careful
    path (each coordinate solved to the end, per-edge logarithms), ascending at every sweep."""
    rng = np.random.default_rng(30)
    n, k = 10, 60
    mask = np.tril(rng.random((n, n)) < 0.7, -1)
    s = DagStructure(mask)
    W = np.where(mask, rng.normal(0, 0.7, (k, n, n)), 0.0)
    h = rng.normal(0, 0.5, (k, n))
    clamp = np.full((k, n), np.nan)
    clamp[:, 6:] = rng.integers(0, 2, (k, 4))
    fast = _kernel_solve(s, s.pack(W), h, clamp, True)
    careful = _kernel_solve(s, s.pack(W), h, clamp, False)
    np.testing.assert_allclose(fast[0], careful[0], rtol=0, atol=1e-7)
    np.testing.assert_allclose(fast[1], careful[1], rtol=0, atol=1e-3)
    steps = np.diff(fast[3], axis=1)
    ok = ~np.isnan(steps)
    assert np.all(steps[ok] >= -1e-12 * (1 + np.abs(fast[3][:, 1:][ok])))


@pytest.mark.parametrize("scale", [1, 5, 20, 60])
def test_fast_path_reported_bound_against_60_digit_arithmetic(scale):
    """The fast path reports its bound in product form (one exp and no log per edge) minus a
    rounding allowance: never above the bound computed with 60 digits at the returned mu and
    xi, and within 1e-11 (1 + |L|) of it."""
    rng = np.random.default_rng(scale + 40)
    n, k = 7, 12
    W, h = _random_nets(rng, n, k, scale / 7)      # |h| + sum |W| well within the fast scale
    clamp = np.full((k, n), np.nan)
    clamp[:, 4:] = rng.integers(0, 2, (k, 3))
    edges = np.tril(np.ones((n, n), bool), -1)
    s = DagStructure(edges)
    bound, mu, xi, _ = _kernel_solve(s, s.pack(W), h, clamp, True)
    free = np.isnan(clamp[0])
    for p in range(k):
        ref = sjj_sigmoid_exact(W[p], h[p], mu[p], xi[p], free, edges)
        assert Decimal(float(bound[p])) <= ref + Decimal(8 * 2.0**-52) * abs(ref)
        assert abs(float(ref) - bound[p]) <= 1e-11 * (1 + abs(float(ref)))


@pytest.mark.parametrize("fast", [True, False])
def test_sigmoid_barren_units_sum_out_exactly(fast):
    """Free units with no clamped descendant sum out of P exactly: here the missing visible
    units 7 and 8 and hidden unit 4, whose only children they are.  On both paths the bound
    is the one of the net with them deleted (the same maximum), never above exact ln P; the
    means of the other units match, each barren unit's mean is sigmoid(h + W mu) of its
    parents' solved means, top-down, and the ascent is monotone."""
    from mfengine.sbn import _sjj

    rng = np.random.default_rng(51)
    n, k = 9, 30
    edges = np.tril(rng.random((n, n)) < 0.7, -1)
    edges[5:7, 4] = False                       # unit 4's children: 7 and 8 only
    edges[7:9, 4] = True
    W = np.where(edges, rng.normal(0, 1.2, (k, n, n)), 0.0)
    h = rng.normal(0, 0.5, (k, n))
    clamp = np.full((k, n), np.nan)
    clamp[:, 5:7] = rng.integers(0, 2, (k, 2))  # 7, 8 missing
    s = DagStructure(edges)
    bound, mu, xi, hist = _kernel_solve(s, s.pack(W), h, clamp, fast, tol=1e-13)
    barren = np.zeros(clamp.shape, np.uint8)
    assert _sjj.barren_units(*sjj.check_structure(s)[:5], clamp, barren) == 0
    assert np.array_equal(np.flatnonzero(barren[0]), [4, 7, 8]) and np.all(barren == barren[0])
    keep = np.array([0, 1, 2, 3, 5, 6])
    sk = DagStructure(edges[np.ix_(keep, keep)])
    Wk = W[:, keep][:, :, keep]
    ref, mu_k, _, _ = _kernel_solve(sk, sk.pack(Wk), h[:, keep], clamp[:, keep], fast, tol=1e-13)
    np.testing.assert_allclose(bound, ref, rtol=0, atol=1e-9)
    np.testing.assert_allclose(mu[:, keep], mu_k, rtol=0, atol=1e-5)
    for p in range(k):
        m = mu[p].copy()
        for i in (4, 7, 8):
            m[i] = 1.0 / (1.0 + np.exp(-(h[p, i] + W[p, i] @ m)))
        np.testing.assert_allclose(mu[p, [4, 7, 8]], m[[4, 7, 8]], rtol=1e-14, atol=1e-15)
    V = np.where(np.isnan(clamp[:, 5:]), 0.0, clamp[:, 5:])
    exact = np.array([mf.BeliefNet(W[p], h[p], np.arange(n) >= 5).exact_log_likelihood(
        V[p:p + 1], missing=np.isnan(clamp[p:p + 1, 5:]))[0] for p in range(k)])
    reduced = mf.BeliefNetBatch(Wk, h[:, keep], keep >= 5).exact_log_likelihood(clamp[:, 5:7])
    np.testing.assert_allclose(exact, reduced, rtol=1e-13)   # they do sum out exactly
    assert np.all(bound <= exact)
    steps = np.diff(hist, axis=1)
    ok = ~np.isnan(steps)
    assert np.all(steps[ok] >= -1e-12 * (1 + np.abs(hist[:, 1:][ok])))
    # the history is of the same bound from its start (barren units left out on both paths)
    mu0, xi0 = np.where(np.isnan(clamp), 0.5, clamp), np.full((k, n), 0.5)
    start = sjj.evaluate(s, s.pack(W), h, np.arange(k), clamp, mu0, xi0)
    np.testing.assert_allclose(hist[:, 0], start, rtol=0, atol=1e-9)


@pytest.mark.parametrize("activation, scale", [("sigmoid", 1.0), ("sigmoid", 100.0),
                                               ("noisy_or", 1.0)])
def test_items_with_and_without_barren_units_solve_as_one_by_one(activation, scale):
    """A batch mixing items with barren units (missing visible units) and items without
    (the threads' scratch then holds the barren units' copies) gives every item the answer
    it gets alone, on one thread and on two, bit for bit; at scale 100 the net is beyond the
    fast path's scale and takes the careful one."""
    rng = np.random.default_rng(52)
    n = 10
    edges = np.tril(rng.random((n, n)) < 0.6, -1)
    s = DagStructure(edges)
    W = np.where(edges, rng.normal(0, scale, (n, n)), 0.0)
    h = rng.normal(0, 0.5, n)
    if activation == "noisy_or":
        W, h = np.abs(W), np.abs(h) + 0.05
    clamp = np.full((12, n), np.nan)
    clamp[:, 6:] = rng.integers(0, 2, (12, 4))
    clamp[::3, 8:] = np.nan                      # every third item: two missing units
    w, hh = s.pack(W)[None], h[None]
    one = [sjj.solve(s, w, hh, [0], clamp[p:p + 1], tol=1e-10, activation=activation)
           for p in range(12)]
    for threads in (1, 2):
        out = sjj.solve(s, w, hh, np.zeros(12, np.intp), clamp, tol=1e-10, n_threads=threads,
                        activation=activation)
        for k in (0, 1, 2, 3):
            np.testing.assert_array_equal(out[k], np.concatenate([o[k] for o in one]))
