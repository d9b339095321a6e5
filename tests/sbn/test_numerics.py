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
    return _gaussian.run(net.weights, net.biases, V, missing, None, tol, inner_tol, 200, 1, gain_rule)


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
    exp branch points; beyond, at most the floor of the kernel's exp, e^-708, off."""
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
    # below -708 the kernel's exp has its floor e^-708 ~ 3.3e-308 (csrc/mf_exp.h)
    want = expit(far.astype(np.longdouble)).astype(np.float64)
    np.testing.assert_allclose(xi, want, rtol=4 * EPS, atol=3.4e-308)


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


# ----------------------------------------------------------------------------- csrc/mf_numerics.h
# The shared scalar numerics of every kernel, compiled as they are (a small C program that
# includes the header) and compared with long-double NumPy/SciPy references.
NUMERICS_PROGRAM = r"""
#include <stdio.h>
#include <string.h>
#include "mf_numerics.h"

int main(void) {
    char name[64];
    long n;
    while (scanf("%63s %ld", name, &n) == 2) {
        for (long i = 0; i < n; i++) {
            double x, y = 0.0, r;
            if (scanf("%lf %lf", &x, &y) != 2) return 2;
            if (!strcmp(name, "exp_neg")) r = mf_exp_neg(x);
            else if (!strcmp(name, "log1pexp")) r = mf_log1pexp(x);
            else if (!strcmp(name, "sigmoid")) r = mf_sigmoid(x);
            else if (!strcmp(name, "sig_u")) { double s, u; mf_sig_u(x, &s, &u); r = y ? u : s; }
            else if (!strcmp(name, "log_sigmoid")) r = mf_log_sigmoid(x);
            else if (!strcmp(name, "logit")) r = mf_logit(x);
            else if (!strcmp(name, "logaddexp")) r = mf_logaddexp(x, y);
            else if (!strcmp(name, "log1mexp")) r = mf_log1mexp(x);
            else if (!strcmp(name, "entropy_logit")) r = mf_entropy_logit(x);
            else if (!strcmp(name, "log_mix_exp")) r = mf_log_mix_exp(x, y);
            else if (!strcmp(name, "norm_pdf")) r = mf_norm_pdf(x);
            else if (!strcmp(name, "norm_cdf")) r = mf_norm_cdf(x);
            else return 3;
            printf("%a\n", r);
        }
    }
    return 0;
}
"""


@pytest.fixture(scope="module")
def numerics(tmp_path_factory):
    """Evaluate a function of mf_numerics.h: numerics(name, x, y=0) -> array of doubles."""
    import os
    import subprocess
    import sysconfig

    tmp = tmp_path_factory.mktemp("numerics")
    (tmp / "prog.c").write_text(NUMERICS_PROGRAM)
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    cc = (sysconfig.get_config_var("CC") or "cc").split()
    # the flags of the build (no -ffast-math: the header must be right under them)
    cmd = cc + ["-O3", "-std=c99", "-fno-math-errno", "-fno-trapping-math",
                f"-I{os.path.join(repo, 'csrc')}", "prog.c", "-o", "prog", "-lm"]
    res = subprocess.run(cmd, cwd=tmp, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr

    def run(name, x, y=0.0):
        x, y = np.broadcast_arrays(np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64))
        text = f"{name} {x.size}\n" + "\n".join(f"{float(a).hex()} {float(b).hex()}"
                                                for a, b in zip(x.ravel(), y.ravel()))
        out = subprocess.run([str(tmp / "prog")], input=text, capture_output=True, text=True,
                             timeout=60)
        assert out.returncode == 0, out.stderr
        return np.array([float.fromhex(v) for v in out.stdout.split()]).reshape(x.shape)

    return run


LD = np.longdouble


def ulps(got, want):
    """|got - want| in units of the spacing of doubles at want (the smallest subnormal, 5e-324,
    where want is subnormal); 0 where both agree exactly, infinities and NaN included."""
    want64 = np.asarray(want, dtype=np.float64)
    same = (got == want64) | (np.isnan(got) & np.isnan(want64))
    with np.errstate(invalid="ignore", over="ignore"):
        err = np.abs(np.asarray(got, dtype=LD) - np.asarray(want, dtype=LD))
        err = np.asarray(err / np.spacing(np.abs(want64)), dtype=np.float64)
    return np.where(same, 0.0, err)


GRID = np.concatenate([np.linspace(-800, 800, 3201), np.linspace(-40, 40, 1601),
                       np.geomspace(1e-300, 1, 200), -np.geomspace(1e-300, 1, 200),
                       [0.0, -0.0, 18.0, 33.3, -37.0, 36.9, 708.0, -708.0, 709.7, -745.0]])


def test_numerics_exp_neg(numerics):
    x = np.concatenate([-np.abs(GRID), np.log(2) * np.arange(-1100, 1) / 2])
    got = numerics("exp_neg", x)
    want = np.exp(x.astype(LD))
    # 2 ulp where e^x is normal; where it is subnormal (x < -708), 2 units of the smallest
    assert ulps(got, want).max() <= 2
    assert np.all(got[x < -708] < 2.3e-308) and np.all(got[x < -745.2] == 0.0)
    np.testing.assert_array_equal(numerics("exp_neg", [-800.0, -746.5, 0.0, 3.0]), [0, 0, 1, 1])
    assert np.isnan(numerics("exp_neg", [np.nan]))[0]


def test_numerics_log1pexp_sigmoid_log_sigmoid(numerics):
    x = GRID
    xl = x.astype(LD)
    ref_log1pexp = np.where(xl < 30, np.log1p(np.exp(np.minimum(xl, 30))), xl + np.log1p(np.exp(-xl)))
    assert ulps(numerics("log1pexp", x), ref_log1pexp).max() <= 2
    # within 4 ulp where x >= -708; below, the floor e^-708 of the kernels' exp (documented)
    hi = x >= -708
    for name in ("sigmoid", "sig_u"):
        got = numerics(name, x)
        assert ulps(got[hi], expit(xl[hi])).max() <= 4
        assert np.all(np.abs(got[~hi] - expit(xl[~hi]).astype(np.float64)) < 3.4e-308)
    ref_u = 1 + np.exp(-np.abs(xl))
    assert ulps(numerics("sig_u", x, 1.0), ref_u).max() <= 4
    assert ulps(numerics("log_sigmoid", x), -np.where(-xl < 30, np.log1p(np.exp(np.minimum(-xl, 30))),
                                                       -xl + np.log1p(np.exp(xl)))).max() <= 2
    ends = numerics("sigmoid", [np.inf, 1e308])
    np.testing.assert_array_equal(ends, [1.0, 1.0])
    np.testing.assert_array_equal(numerics("log1pexp", [-np.inf, np.inf, 1e308]), [0.0, np.inf, 1e308])
    assert np.all(np.isnan(numerics("sigmoid", [np.nan])))


def test_numerics_logit_logaddexp_log1mexp(numerics):
    from scipy.special import logit

    p = np.concatenate([np.geomspace(1e-300, 0.5, 500), 1 - np.geomspace(1e-16, 0.5, 300), [0.0, 1.0]])
    assert ulps(numerics("logit", p), logit(p.astype(LD))).max() <= 2
    np.testing.assert_array_equal(numerics("logit", [0.0, 1.0]), [-np.inf, np.inf])
    rng = np.random.default_rng(0)
    a = np.concatenate([rng.normal(0, 300, 2000), [-np.inf, -np.inf, np.inf, np.inf, 5.0, 1e308]])
    b = np.concatenate([rng.normal(0, 300, 2000), [-np.inf, 3.0, np.inf, -np.inf, 5.0, 1e308]])
    got = numerics("logaddexp", a, b)
    want = np.logaddexp(a.astype(LD), b.astype(LD))
    assert ulps(got, want).max() <= 2
    np.testing.assert_array_equal(got[-6:], [-np.inf, 3.0, np.inf, np.inf, 5.0 + np.log(2), 1e308])
    x = np.concatenate([np.geomspace(1e-300, 800, 1000), [0.0, np.log(2), 40.0]])
    xl = x.astype(LD)
    with np.errstate(divide="ignore"):      # (both branches are evaluated; x = 0 gives -inf)
        want = np.where(xl < 0.5, np.log(-np.expm1(-xl)), np.log1p(-np.exp(-xl)))
    assert ulps(numerics("log1mexp", x), want).max() <= 2
    assert numerics("log1mexp", [0.0])[0] == -np.inf


def test_numerics_entropy_logit_and_log_mix_exp(numerics):
    t = np.concatenate([np.linspace(-745, 745, 2981), np.linspace(-5, 5, 201)])
    p = expit(-np.abs(t.astype(LD)))     # H(t) = H(-t); the smaller p, in long double
    want = -p * np.log(p) - (1 - p) * np.log1p(-p)
    assert ulps(numerics("entropy_logit", t), want).max() <= 4
    assert numerics("entropy_logit", [0.0])[0] == pytest.approx(np.log(2), rel=1e-15)
    rng = np.random.default_rng(1)
    pm = np.concatenate([rng.random(3000), 10.0 ** rng.uniform(-320, 0, 1000),
                         1 - 10.0 ** rng.uniform(-16, 0, 1000),
                         [0.0, 1.0, 0.0, 1.0, 1e-300, 1 - 1e-16, 1e-310, 0.5]])
    x = np.concatenate([rng.normal(0, 50, 3000), rng.normal(0, 400, 2000),
                        [700.0, -700.0, -700.0, 700.0, 5.0, -5.0, 710.0, 800.0]])
    pl, xl = pm.astype(LD), x.astype(LD)
    # cancellation-free forms in long double (whose exp does not overflow before e^11356)
    y = pl * np.expm1(xl)
    with np.errstate(divide="ignore"):
        want = np.where(y > -0.5, np.log1p(np.maximum(y, -0.5)), np.log((1 - pl) + pl * np.exp(xl)))
    assert ulps(numerics("log_mix_exp", pm, x), want).max() <= 4
    np.testing.assert_array_equal(numerics("log_mix_exp", [0.0, 1.0, 1.0, 0.0], [700.0, -700.0, -np.inf, 800.0]),
                                  [0.0, -700.0, -np.inf, 0.0])


def test_numerics_normal_density_and_distribution(numerics):
    from scipy.special import ndtr

    t = np.concatenate([np.linspace(-38, 38, 1521), [0.0, -np.inf, np.inf]])
    tl = t.astype(LD)
    assert ulps(numerics("norm_pdf", t), np.exp(-tl * tl / 2) / np.sqrt(2 * np.pi, dtype=LD)).max() <= 4
    got = numerics("norm_cdf", t)
    # scipy's ndtr is the same formula where it is normal; in the subnormal tail (t < -37.5)
    # Phi only has to stay positive, below phi(t) / |t| (Mills) and increasing
    normal = ndtr(t) > 1e-300
    want = ndtr(t[normal])
    eps = np.finfo(np.float64).eps
    assert np.all(np.abs(got[normal] - want) <= (4 * t[normal] ** 2 + 8) * eps * want)
    tail = (t < -37.5) & np.isfinite(t)
    assert np.all(got[tail] > 0) and np.all(np.diff(got[tail]) > 0)
    assert np.all(got[tail] <= numerics("norm_pdf", t[tail]) / np.abs(t[tail]) * (1 + 1e-10))
    np.testing.assert_array_equal(got[-2:], [0.0, 1.0])
