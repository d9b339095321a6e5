"""The compiled Gaussian mean-field kernel against the slow reference in tests/references/reference.py,
update-by-update monotonicity of the bound (via the kernel's private ``trace``), and the
stationarity conditions at the solution."""
import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from scipy.special import expit

import mfengine as mf
from mfengine.sbn import _gaussian

try:
    from . import reference as ref
except ImportError:  # tests/ is not a package: conftest.py puts references/ on sys.path
    import reference as ref

TIGHT = dict(tol=1e-12, inner_tol=1e-10, max_sweeps=500)


def infer(net, V, missing=None, tol=1e-6, max_sweeps=200, inner_tol=None, init_mu=None,
          n_threads=1):
    """The kernel called as the net's ``infer`` calls it (inner_tol=None: the default inner
    tolerance with the gain rule on)."""
    gain_rule = inner_tol is None
    if inner_tol is None:
        inner_tol = min(1e-3, max(1e-13, 0.1 * np.sqrt(tol)))
    V = np.ascontiguousarray(V, dtype=np.float64)
    if missing is not None:
        missing = np.ascontiguousarray(missing, dtype=np.uint8)
        V = np.where(missing, 0.0, V)
    return _gaussian.run(net.weights, net.biases, V, missing, init_mu, tol, inner_tol, max_sweeps, n_threads,
                         gain_rule)


def random_net(sizes, weight_scale, seed, bias_scale=0.5):
    """A net with N(0, weight_scale^2 / fan_in) weights and N(0, bias_scale^2) biases."""
    rng = np.random.default_rng(seed)
    base = mf.SigmoidBeliefNet(sizes, weight_scale=weight_scale, random_state=rng)
    biases = [rng.normal(0.0, bias_scale, n) for n in sizes]
    return mf.SigmoidBeliefNet.from_params(base.weights, biases)


def distinct_patterns(n_visible, n, seed):
    """n distinct random binary vectors (all of them if there are fewer than n)."""
    rng = np.random.default_rng(seed)
    n = min(n, 2**n_visible)
    seen, out = set(), []
    while len(out) < n:
        v = rng.integers(0, 2, n_visible)
        if tuple(v) not in seen:
            seen.add(tuple(v))
            out.append(v)
    return np.array(out, dtype=np.float64)


def row(result, p):
    """Pattern p of an InferenceResult as (mu, xi) lists of 1-D arrays."""
    return [m[p] for m in result.mu], [x[p] for x in result.xi]


def assert_same_solution(r, p, q, atol=1e-7):
    mu, xi = row(r, p)
    for l, (a, b) in enumerate(zip(mu, q["mu"])):
        np.testing.assert_allclose(a, b, rtol=0, atol=atol, err_msg=f"mu of layer {l}, pattern {p}")
    # the top layer's xi is sigmoid(bias); its value does not enter the bound
    for l, (a, b) in enumerate(zip(xi, q["xi"])):
        np.testing.assert_allclose(a, b, rtol=0, atol=atol, err_msg=f"xi of layer {l}, pattern {p}")
    assert r.bound[p] == pytest.approx(q["bound"], rel=0, abs=atol)
    assert r.n_sweeps[p] == q["n_sweeps"]
    assert bool(r.converged[p]) == q["converged"]


# ----------------------------------------------------------------------------- the reference itself
def test_reference_derivative_matches_finite_differences():
    """The hand-written dL/dmu_k used to polish the reference's 1-D maxima is the derivative of
    the reference bound (central differences), for every hidden unit, with a missing entry."""
    net = random_net([2, 3, 5], 1.5, seed=0)
    W, B = net.weights, net.biases
    rng = np.random.default_rng(1)
    mu = [rng.uniform(0.1, 0.9, n) for n in net.sizes[:-1]] + [np.array([1.0, 0, 1, 1, 0])]
    xi = [rng.uniform(0.05, 0.95, n) for n in net.sizes]
    obs = np.array([1.0, 1, 0, 1, 1])
    h = 1e-6
    for l in range(2):
        for k in range(net.sizes[l]):
            up = [m.copy() for m in mu]
            dn = [m.copy() for m in mu]
            up[l][k] += h
            dn[l][k] -= h
            fd = (ref.bound(W, B, up, xi, obs) - ref.bound(W, B, dn, xi, obs)) / (2 * h)
            assert ref.dbound_dmu(W, B, mu, xi, obs, l, k) == pytest.approx(fd, rel=1e-7, abs=1e-8)


def test_reference_xi_minimises_its_convex_term():
    """xi_fixed_point is the minimiser over [0, 1] of 1/2 xi^2 s + log(1 + e^{m + (1/2 - xi) s})."""
    rng = np.random.default_rng(0)
    grid = np.linspace(0, 1, 100001)
    for m, s in zip(rng.normal(0, 3, 20), rng.uniform(0, 20, 20)):
        x = ref.xi_fixed_point(m, s)
        vals = 0.5 * grid**2 * s + np.logaddexp(0, m + (0.5 - grid) * s)
        assert abs(x - grid[np.argmin(vals)]) <= 1e-5
        assert x == pytest.approx(expit(m + (0.5 - x) * s), abs=1e-15)


# ----------------------------------------------------------------------------- kernel vs reference
SHAPES = [[3, 5], [2, 4, 6], [3, 5, 4, 8], [1, 3, 10]]


@pytest.mark.parametrize("weight_scale", [0.5, 1.0, 2.0])
@pytest.mark.parametrize("sizes", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_kernel_matches_reference(sizes, weight_scale):
    """Same mu, xi, bound (1e-7), sweep count and convergence flag as the reference, which
    follows the same sweep order with scipy's 1-D solvers."""
    net = random_net(sizes, weight_scale, seed=10 * len(sizes) + int(4 * weight_scale))
    V = distinct_patterns(sizes[-1], 3 if sum(sizes) < 15 else 2, seed=1)
    r = infer(net, V, **TIGHT)
    for p in range(len(V)):
        q = ref.solve(net, V[p], tol=TIGHT["tol"], max_sweeps=TIGHT["max_sweeps"])
        assert q["converged"]
        assert_same_solution(r, p, q)
    # the path, not only the end point: the state after each of the first sweeps (far from
    # the fixed point, where the order of the updates matters most)
    for k in (1, 2, 3):
        rk = infer(net, V[:1], tol=1e-300, max_sweeps=k, inner_tol=TIGHT["inner_tol"])
        qk = ref.solve(net, V[0], tol=1e-300, max_sweeps=k)
        for l, (a, b) in enumerate(zip(rk.mu, qk["mu"])):
            np.testing.assert_allclose(a[0], b, rtol=0, atol=1e-8, err_msg=f"mu of layer {l} after {k} sweeps")
        assert rk.bound[0] == pytest.approx(qk["bound"], abs=1e-10)


@pytest.mark.parametrize("sizes", [[2, 4, 6], [3, 5, 4, 8]], ids=lambda s: "x".join(map(str, s)))
def test_kernel_matches_reference_with_missing_entries(sizes):
    """Missing visible entries drop out of the bound; their visible mu is reported as xi."""
    net = random_net(sizes, 1.5, seed=3)
    V = distinct_patterns(sizes[-1], 3, seed=2)
    rng = np.random.default_rng(3)
    missing = rng.random(V.shape) < 0.35
    missing[0, :] = False
    missing[0, 1] = True  # at least one missing entry in every pattern
    missing[1, 0] = True
    missing[2, -1] = True
    Vm = V.copy()
    Vm[missing] = np.nan  # any value is allowed at a missing entry
    Vm[2, missing[2]] = 7.0
    r = infer(net, Vm, missing=missing, **TIGHT)
    for p in range(len(V)):
        q = ref.solve(net, V[p], missing=missing[p], tol=TIGHT["tol"], max_sweeps=TIGHT["max_sweeps"])
        assert_same_solution(r, p, q)
        vis_mu = r.mu[-1][p]
        np.testing.assert_array_equal(vis_mu[~missing[p]], V[p, ~missing[p]])
        np.testing.assert_array_equal(vis_mu[missing[p]], r.xi[-1][p, missing[p]])
    # the missing entries really were left out: the same patterns fully observed differ
    full = infer(net, V, **TIGHT)
    assert np.all(np.abs(full.bound - r.bound) > 1e-6)


def test_kernel_matches_reference_from_init_mu():
    """A warm start (init_mu) is followed the same way."""
    sizes = [3, 5, 4, 8]
    net = random_net(sizes, 1.0, seed=4)
    V = distinct_patterns(sizes[-1], 2, seed=5)
    init = np.random.default_rng(6).uniform(0.02, 0.98, (2, 12))
    r = infer(net, V, init_mu=init, **TIGHT)
    for p in range(2):
        q = ref.solve(net, V[p], init_mu=init[p], tol=TIGHT["tol"], max_sweeps=TIGHT["max_sweeps"])
        assert_same_solution(r, p, q)


def test_zero_weights_textbook_case():
    """With all weights zero every unit is independent: mu = xi = sigmoid(bias) for hidden units
    and the bound is exactly ln P(v) = sum_i [v_i h_i - ln(1 + e^{h_i})] over visible units."""
    rng = np.random.default_rng(0)
    sizes = [3, 4, 6]
    biases = [rng.normal(0, 2, n) for n in sizes]
    net = mf.SigmoidBeliefNet.from_params([np.zeros((4, 3)), np.zeros((6, 4))], biases)
    V = distinct_patterns(6, 8, seed=1)
    r = infer(net, V, tol=1e-12)
    for l in range(2):
        np.testing.assert_allclose(r.mu[l], np.broadcast_to(expit(biases[l]), r.mu[l].shape), rtol=1e-12)
    for l in range(3):
        np.testing.assert_allclose(r.xi[l], np.broadcast_to(expit(biases[l]), r.xi[l].shape), rtol=1e-12)
    h = biases[-1]
    exact = V @ h - np.sum(np.logaddexp(0, h))
    np.testing.assert_allclose(r.bound, exact, rtol=1e-12)
    np.testing.assert_allclose(net.exact_log_likelihood(V), exact, rtol=1e-12)


# ----------------------------------------------------------------------------- large weights
def check_stationary(net, mu, xi, missing=None, g_tol=1e-4, gt_tol=2e-5, xi_tol=1e-9):
    """The mean-field conditions at a converged solution (tol=1e-12).

    * dL/dmu_k = field_k - logit(mu_k) = 0 for interior means: |dL/dmu| < g_tol where
      mu(1 - mu) >= 0.01, and everywhere |dL/dt| = mu(1 - mu) |dL/dmu| < gt_tol with t = logit(mu).
      (Near 0 or 1 the bound is flat in mu to within round-off: when mu ~ 1e-12 a change of
      t by 0.1 moves L by ~1e-15, below what comparing values of L can resolve, so there only
      the derivative in t is meaningful.)
    * A mean pinned at the edge of what the kernel represents (|t| > 39) has its field pushing
      outward (field >= 39 at the top, <= -39 at the bottom).
    * Every xi below the top layer at its fixed point: |xi - sigmoid(m + (1/2 - xi) s)| < xi_tol.
    Returns the largest |dL/dmu| over the interior means.
    """
    f, t, r = ref.stationarity(net, mu, xi, missing)
    worst = 0.0
    for l in range(len(f)):
        p = np.asarray(mu[l])
        pinned = np.abs(t[l]) > 39
        assert np.all(np.sign(t[l][pinned]) * f[l][pinned] >= 39), (l, f[l], t[l])
        g = np.where(pinned, 0.0, f[l] - np.where(pinned, 0.0, t[l]))
        var = p * (1 - p)
        assert np.max(np.abs(var * g)) < gt_tol, f"|dL/dt| = {np.max(np.abs(var * g)):.2e}"
        firm = var >= 0.01
        worst = max(worst, float(np.max(np.abs(g[firm]), initial=0.0)))
    assert worst < g_tol, f"|dL/dmu| = {worst:.2e} at an interior mean"
    for l in range(1, len(r)):
        assert np.max(np.abs(r[l])) < xi_tol, f"xi residual {np.max(np.abs(r[l])):.2e} in layer {l}"
    return worst


# the first and the last case run by default, the others are slow
@pytest.mark.parametrize(
    "sizes, weight_scale, n_patterns",
    [([2, 4, 6], 4.0, 4)]
    + [pytest.param(*case, marks=pytest.mark.slow) for case in
       [([2, 4, 6], 8.0, 4), ([2, 4, 6], 12.0, 4), ([2, 6, 6], 12.0, 4), ([3, 5, 4, 8], 8.0, 2)]]
    + [([3, 5, 4, 8], 12.0, 3)],
)
def test_kernel_with_large_weights(sizes, weight_scale, n_patterns):
    """Large weights: the 1-D problems in mu_k are no longer concave (sum_c J_ck^2 >> 4) and can
    have two local maxima.  The kernel climbs to a local maximum at least as high as the current
    value and, when that maximum lies away from both ends, also tries the other end's; it is
    compared with the reference run with the same rule ("probe").  Where both land in the same
    basin they must agree tightly.  Where they do not (the kernel's Newton step may jump over a
    valley to another, higher, local maximum; the reference's grid walk never does), both must
    satisfy the stationarity conditions to tight tolerance and the kernel's bound must not be
    worse than the reference's beyond round-off: if the kernel took a lower local maximum than
    the uphill one, it would fail here.
    """
    net = random_net(sizes, weight_scale, seed=5, bias_scale=0.0)
    assert max(np.max((w**2).sum(axis=0)) for w in net.weights) > 4.0  # non-concave regime
    V = distinct_patterns(sizes[-1], n_patterns, seed=3)
    r = infer(net, V, **TIGHT)
    assert r.converged.all()
    report = []
    for p in range(len(V)):
        q = ref.solve(net, V[p], tol=TIGHT["tol"], max_sweeps=TIGHT["max_sweeps"], rule="probe")
        mu, xi = row(r, p)
        gap = max(np.max(np.abs(a - b)) for a, b in zip(mu, q["mu"]))
        worst = check_stationary(net, mu, xi)
        check_stationary(net, q["mu"], q["xi"])
        if gap < 1e-6:
            assert_same_solution(r, p, q)
        else:
            assert r.bound[p] >= q["bound"] - 1e-9
        report.append(f"{gap:.0e}/{r.bound[p] - q['bound']:+.2e}/{worst:.0e}")
    print(f"\n{sizes} ws={weight_scale}: max|mu diff| / kernel - reference bound / max|dL/dmu|:",
          " ".join(report))


def test_kernel_versus_global_one_dimensional_maxima():
    """For information (printed): how the kernel's final bound compares with a reference that
    moves every mu_k to the GLOBAL maximum of its 1-D problem.  Neither dominates: a different
    path leads to a different local maximum of L.  Both must be stationary."""
    sizes, ws = [2, 4, 6], 12.0
    net = random_net(sizes, ws, seed=5, bias_scale=0.0)
    V = distinct_patterns(sizes[-1], 4, seed=3)
    r = infer(net, V, **TIGHT)
    diffs = []
    for p in range(len(V)):
        q = ref.solve(net, V[p], tol=TIGHT["tol"], max_sweeps=TIGHT["max_sweeps"], rule="global")
        check_stationary(net, q["mu"], q["xi"])
        check_stationary(net, *row(r, p))
        diffs.append(r.bound[p] - q["bound"])
    print(f"\n{sizes} ws={ws}: kernel - global-1D reference bound per pattern:",
          " ".join(f"{d:+.3f}" for d in diffs))


# ----------------------------------------------------------------------------- monotonicity
def plain_xi_step_lowers_bound(net, v):
    """Whether one step of the paper's plain iteration xi <- sigmoid(m + (1/2 - xi) s), from
    some xi in [0, 1], lowers L for some unit of this net and pattern (hidden means at 0.5)."""
    mu = [np.full(n, 0.5) for n in net.sizes[:-1]] + [v]
    for l in range(1, len(net.sizes)):
        m, s = ref.layer_stats(net.weights, net.biases, mu, l)
        for x0 in np.linspace(0, 1, 11):
            x1 = expit(m + (0.5 - x0) * s)
            f = lambda x: -0.5 * x**2 * s - np.logaddexp(0, m + (0.5 - x) * s)
            if np.any(f(x1) < f(x0) - 1e-9):
                return True
    return False


MONO_CASES = [([3, 5], 1.0), ([2, 4, 6], 2.0), ([3, 5, 4, 8], 1.0), ([2, 4, 6], 3.0),
              ([3, 5, 4, 8], 5.0), ([1, 3, 10], 8.0), ([4, 8, 12], 6.0), ([2, 20, 30], 8.0)]


@pytest.mark.parametrize("sizes, weight_scale", MONO_CASES)
@pytest.mark.parametrize("with_missing", [False, True])
def test_every_update_raises_the_bound(sizes, weight_scale, with_missing):
    """Every single mu update and xi update raises (never lowers, beyond 1e-10 of round-off)
    the bound recomputed from scratch, including weights so large that the paper's plain xi
    iteration would lower it."""
    net = random_net(sizes, weight_scale, seed=7)
    V = distinct_patterns(sizes[-1], 3, seed=8)
    rng = np.random.default_rng(9)
    large = weight_scale >= 5
    n_up = 0
    for p in range(len(V)):
        miss = (rng.random(sizes[-1]) < 0.3) if with_missing else None
        tr = _gaussian.trace(net.weights, net.biases, V[p], missing_row=miss, max_sweeps=12, inner_tol=1e-10)
        kind, before, after = tr["kind"], tr["before"], tr["after"]
        # every unit of every layer a pass visits: one mu update per hidden unit of the layer
        # and one xi update per unit of the layer below (passes may skip a weakly coupled
        # turnaround layer, the same rule as the reference's)
        expected = 0
        for sweep in range(12):
            layers = ref.pass_layers(net, sweep)
            expected += sum(sizes[l] + sizes[l + 1] for l in layers)
        assert len(kind) == expected
        assert set(np.unique(kind)) == {0, 1}
        drop = before - after
        worst = int(np.argmax(drop))
        assert drop[worst] <= 1e-10, (
            f"update {worst} ({'mu' if kind[worst] == 0 else 'xi'} of unit {tr['unit'][worst]}) "
            f"lowered the bound by {drop[worst]:.3e}"
        )
        # the recorded values are the reference's bound at the kernel's states: consecutive
        # updates chain (after of one = before of the next)
        np.testing.assert_allclose(after[:-1], before[1:], rtol=0, atol=1e-12)
        n_up += int(np.sum(after - before > 1e-10))
        # the trace follows the real solver: the same state as infer after as many sweeps (up
        # to the 1-D solves' tolerance; the two refresh their cached statistics on different
        # schedules, so round-off differs)
        r = infer(net, V[p][None], missing=None if miss is None else miss[None], tol=1e-300,
                     max_sweeps=12, inner_tol=1e-10)
        flat_mu = np.concatenate([m[0] for m in r.mu[:-1]])
        np.testing.assert_allclose(tr["mu"][: len(flat_mu)], flat_mu, rtol=0, atol=1e-7)
        np.testing.assert_allclose(r.bound[0], after[-1], rtol=0, atol=1e-7)
    assert n_up > 0  # the test is not vacuous
    if large:
        # the regime where a plain xi step can lower the bound
        assert any(plain_xi_step_lowers_bound(net, v) for v in V)


def test_trace_bound_is_the_reference_bound():
    """The trace's 'after' values are the bound as the reference computes it at the trace's
    final state."""
    sizes = [2, 4, 6]
    net = random_net(sizes, 3.0, seed=1)
    v = distinct_patterns(6, 1, seed=2)[0]
    tr = _gaussian.trace(net.weights, net.biases, v, max_sweeps=5, inner_tol=1e-10)
    offs = np.cumsum([0] + sizes)
    mu = [tr["mu"][offs[l] : offs[l + 1]] for l in range(len(sizes))]
    xi = [tr["xi"][offs[l] : offs[l + 1]] for l in range(len(sizes))]
    mu[-1] = v
    assert tr["after"][-1] == pytest.approx(ref.bound(net.weights, net.biases, mu, xi), rel=1e-12)


# ----------------------------------------------------------------------------- extreme values
class PlainNet:
    """What the kernel reads of a model: lists of float64 ``weights`` and ``biases``."""

    def __init__(self, weights, biases):
        self.weights = [np.array(w, dtype=np.float64) for w in weights]
        self.biases = [np.array(b, dtype=np.float64) for b in biases]
        self.sizes = [len(b) for b in self.biases]


@pytest.mark.parametrize("where, value", [
    ("weights", 1e300), ("weights", -1e300), ("weights", 1e155), ("weights", -1.5e50),
    ("weights", np.nan), ("weights", np.inf), ("biases", 1e300), ("biases", -np.inf),
    ("biases", 2e50)])
def test_parameters_beyond_the_kernel_range_are_refused(where, value):
    """The NaN of a weight at +-1e300 came from squaring it: J^2 overflows to inf beyond
    ~1.3e154 (and the 1-D problems' curvature terms, ~J^4, beyond ~1e77); the input variance
    s = J^2 mu (1 - mu) is then inf, or inf * 0 = NaN at a saturated parent, and NaN spread
    through sigmoid(m + (1/2 - xi) s) into xi, every mean and the bound.  Parameters beyond
    1e50 (or not finite) are refused with an error naming them."""
    net = PlainNet([np.full((3, 2), 0.3), np.full((4, 3), -0.2)], [np.zeros(2), np.zeros(3), np.zeros(4)])
    if where == "weights":
        net.weights[1][2, 1] = value
    else:
        net.biases[1][2] = value
    with pytest.raises(ValueError, match=rf"{where}\[1\]"):
        infer(net, np.ones((2, 4)))


def test_extreme_finite_parameters_give_a_finite_bound_in_range():
    """Random small nets with weights and biases of every magnitude up to the limit 1e50 (a
    few entries at the extremes), missing entries, both inner modes: every bound finite and
    <= 0 (L <= 0 holds exactly for the Gaussian bound on binary data), every mean and xi in
    [0, 1], and no floating-point warning."""
    for seed in range(300):
        rng = np.random.default_rng(seed)
        sizes = [int(n) for n in rng.integers(1, 7, rng.integers(2, 5))]
        wexp, bexp = rng.uniform(-3, 50, 2)
        W = [rng.normal(0, 10**wexp, (sizes[l + 1], sizes[l])) for l in range(len(sizes) - 1)]
        b = [rng.normal(0, 10**bexp, n) for n in sizes]
        for _ in range(rng.integers(0, 4)):
            a = W[rng.integers(len(W))] if rng.random() < 0.7 else b[rng.integers(len(b))]
            a.flat[rng.integers(a.size)] = rng.choice([-1, 1]) * 10 ** rng.uniform(0, 50)
        net = PlainNet([np.clip(w, -1e50, 1e50) for w in W], [np.clip(x, -1e50, 1e50) for x in b])
        V = rng.integers(0, 2, (5, sizes[-1])).astype(float)
        missing = rng.random(V.shape) < 0.2
        with np.errstate(all="raise"):
            r = infer(net, V, missing=missing, max_sweeps=50,
                      inner_tol=None if seed % 2 else 1e-6)
        assert np.all(np.isfinite(r.bound)) and np.all(r.bound <= 0.0), (seed, r.bound)
        for x in r.mu + r.xi:
            assert np.all((x >= 0.0) & (x <= 1.0)), seed


def test_a_weight_of_1e300_no_longer_gives_nan():
    """The issue's repro: one weight at +-1e300 gave a NaN bound and NaN means; at the largest
    accepted magnitude the answer is finite and in range."""
    for value in (1e300, -1e300):
        net = PlainNet([np.array([[value], [0.3]])], [np.zeros(1), np.zeros(2)])
        with pytest.raises(ValueError, match="weights\\[0\\].*1e\\+50"):
            infer(net, np.array([[1.0, 0.0], [0.0, 1.0]]))
        net.weights[0][0, 0] = np.sign(value) * 1e50
        r = infer(net, np.array([[1.0, 0.0], [0.0, 1.0]]))
        assert np.all(np.isfinite(r.bound)) and np.all(r.bound <= 0)
        assert np.all((r.mu[0] >= 0) & (r.mu[0] <= 1))


# ----------------------------------------------------------------------------- argument checks
RUN_CASES = {
    # python statements applied to net, V, miss, init, kw: expected words in the ValueError
    "wider weight": ("net.weights[0] = np.zeros((3, 5))", "weights[0]"),
    "longer bias": ("net.biases[2] = np.zeros(9)", "weights[1]"),
    "float32 weight": ("net.weights[1] = net.weights[1].astype(np.float32)", "weights[1]"),
    "one layer": ("net.weights = []; net.biases = net.biases[:1]", "bias vectors"),
    "scalar bias": ("net.biases[0] = np.float64(1.0)", "biases[0]"),
    "float32 V": ("V = V.astype(np.float32)", "V must have dtype"),
    "Fortran V": ("V = np.asfortranarray(V)", "V must be C-contiguous"),
    "list V": ("V = V.tolist()", "V must be a 2-D"),
    "wide V": ("V = np.zeros((6, 5))", "V must have shape"),
    "2 in V": ("V[0, 0] = 2.0", "V must be 0 or 1"),
    "missing shape": ("miss = np.zeros((5, 4), np.uint8)", "missing must have shape"),
    "missing float": ("miss = np.zeros((6, 4))", "missing must have dtype"),
    "init_mu shape": ("init = np.full((6, 4), 0.5)", "init_mu must have shape"),
    "init_mu NaN": ("init = np.full((6, 5), 0.5); init[0, 0] = np.nan", "init_mu"),
    "init_mu above 1": ("init = np.full((6, 5), 0.5); init[0, 0] = 1.01", "init_mu"),
    "zero tol": ("kw['tol'] = 0.0", "tol"),
    "infinite tol": ("kw['tol'] = np.inf", "tol"),
    "string tol": ("kw['tol'] = '1e-6'", "tol"),
    "NaN inner_tol": ("kw['inner_tol'] = np.nan", "inner_tol"),
    "zero max_sweeps": ("kw['max_sweeps'] = 0", "max_sweeps"),
    "huge max_sweeps": ("kw['max_sweeps'] = 2**64", "max_sweeps"),
    "float n_threads": ("kw['n_threads'] = 1.5", "n_threads"),
}

RUN_CHILD = textwrap.dedent(
    """
    import json, sys
    import numpy as np
    from mfengine.sbn import _gaussian

    class Net:
        def __init__(self):
            rng = np.random.default_rng(0)
            self.weights = [rng.normal(0, 1, (3, 2)), rng.normal(0, 1, (4, 3))]
            self.biases = [np.zeros(2), np.zeros(3), np.zeros(4)]
            self.sizes = [2, 3, 4]

    out = {}
    for name, code in json.loads(sys.argv[1]).items():
        net = Net()
        V = (np.arange(24).reshape(6, 4) % 3 == 0).astype(float)
        miss, init = None, None
        kw = dict(tol=1e-6, inner_tol=1e-4, max_sweeps=50, n_threads=1)
        exec(code)
        try:
            r = _gaussian.run(net.weights, net.biases, V, miss, init, kw['tol'], kw['inner_tol'], kw['max_sweeps'],
                              kw['n_threads'], True)
            out[name] = ["ok", repr(r.bound)]
        except Exception as e:
            out[name] = ["ValueError" if isinstance(e, ValueError) else type(e).__name__, str(e)]
    print(json.dumps(out))
    """
)


def test_run_checks_every_argument_before_touching_memory():
    """Each bad argument of the kernel's Python entry point gives a ValueError naming it; run
    in a child process, so that a crash fails the test instead of ending the run."""
    res = subprocess.run([sys.executable, "-c", RUN_CHILD,
                          json.dumps({k: v[0] for k, v in RUN_CASES.items()})],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, f"child process died ({res.returncode}):\n{res.stderr[-3000:]}"
    got = json.loads(res.stdout)
    for name, (_, words) in RUN_CASES.items():
        kind, message = got[name]
        assert kind == "ValueError", f"{name}: {kind}: {message}"
        assert words in message, f"{name}: {message!r} does not name {words!r}"


def test_run_edge_sizes():
    """No patterns gives empty results; any thread count is clamped (same answer); a boolean
    missing mask is taken as uint8."""
    net = random_net([2, 3, 4], 1.0, seed=0)
    r = infer(net, np.zeros((0, 4)))
    assert r.bound.shape == (0,) and [m.shape for m in r.mu] == [(0, 2), (0, 3), (0, 4)]
    V = distinct_patterns(4, 10, seed=1)
    one = infer(net, V, n_threads=1).bound
    for nt in (0, -5, 2**31 - 1, 10**30):
        np.testing.assert_array_equal(_gaussian.run(net.weights, net.biases, V, None, None, 1e-6, 1e-4, 200, nt, True).bound,
                                      _gaussian.run(net.weights, net.biases, V, None, None, 1e-6, 1e-4, 200, 1, True).bound)
    miss = np.zeros(V.shape, dtype=bool)
    miss[0, 0] = True
    np.testing.assert_array_equal(
        _gaussian.run(net.weights, net.biases, V, miss, None, 1e-6, 1e-4, 200, 1, True).bound,
        _gaussian.run(net.weights, net.biases, V, miss.astype(np.uint8), None, 1e-6, 1e-4, 200, 1, True).bound)
    assert np.isfinite(one).all()
