"""Standard errors of the importance-sampled posterior marginals (``_solve.importance(...,
predict=True, predict_stderr=True)``, the kernel ``_importance.estimate(..., pred_se=...)``).

1. Against a slow reference: the kernel's sampler replayed in Python (the same splitmix64
   streams, the same draws), its self-normalised estimates and their delta-method standard
   errors sqrt(sum w^2 (x - m)^2) / sum w computed in two passes from the stored weights,
   with the estimate's resolution (K + 16) ulps |m| added in quadrature.
2. Asking for the standard errors leaves every other output bit for bit as it was, for any
   thread count, and a read-only input changes nothing.
3. Calibration against exact posteriors by enumeration: over many small random nets, patterns
   and seeds, |estimate - exact| <= 1.96 SE for about 95% of the free units (the observed
   coverage is printed with ``pytest -s``).
"""
import warnings

import numpy as np
import pytest

import mfengine as mf
from mfengine.sbn._solve import IMPORTANCE_EPS, IMPORTANCE_MIX, importance

MASK64 = (1 << 64) - 1
#: The resolution of a sampled estimate of K draws, (K + 16) ulps (mf_se_with_resolution in
#: csrc/mf_numerics.h).
ULP = np.finfo(float).eps


# ---------------------------------------------------------------------------- nets and data
def random_dag(rng, activation, n_units=10, n_visible=4, scale=2.0, density=0.6):
    W = np.tril(rng.normal(0.0, scale, (n_units, n_units)), -1)
    W *= rng.random(W.shape) < density
    h = rng.normal(0.0, 1.0, n_units)
    if activation == "noisy_or":
        W, h = np.abs(W), 0.5 * np.abs(h) + 0.05
    visible = np.zeros(n_units, dtype=bool)
    visible[-n_visible:] = True
    return mf.BeliefNet(W, h, visible, activation, progress=False)


def sampled_marginals(net, X, miss, n_samples, seed, n_threads=1, stderr=True,
                      rao_blackwell=False):
    """``importance(..., predict=True)`` on the mean-field (sjj) proposal of ``net``."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", mf.ConvergenceWarning)
        r = net._solve(X, miss, keep="mu")
    nets, items, _, _ = net._dag_problem(X, miss)
    return importance(nets, items, net._flat_means(r), r.bound, n_samples, seed, n_threads,
                      False, predict=True, predict_stderr=stderr,
                      rao_blackwell=rao_blackwell)


# ---------------------------------------------------------------------------- the reference
def _mix64(z):
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return z ^ (z >> 31)


class _Stream:
    """The kernel's per-item splitmix64 stream of doubles in [0, 1)."""

    def __init__(self, seed, item):
        self.state = _mix64(seed ^ _mix64(item + 1))

    def uniform(self):
        self.state = (self.state + 0x9E3779B97F4A7C15) & MASK64
        return (_mix64(self.state) >> 11) * (1.0 / 9007199254740992.0)


def _log_f(z, on, noisy_or):
    if noisy_or:
        if on:
            return np.log(-np.expm1(-z)) if z > 0.0 else -np.inf
        return -z
    return -np.logaddexp(0.0, -z) if on else -np.logaddexp(0.0, z)


def _needed_log_joint(s, w, h, state, needed, noisy):
    """ln P of the needed units' states (clamped and needed free ones), from scratch."""
    n = s.n_units
    z = h.copy()
    for i in range(n):
        if state[i]:
            for e in range(s.ch_ptr[i], s.ch_ptr[i + 1]):
                z[s.ch_idx[e]] += w[s.ch_w[e]]
    return sum(_log_f(z[i], state[i], noisy) for i in range(n) if needed[i])


def reference_marginals(nets, clamp_row, q_row, n_samples, seed, item, rao_blackwell=False):
    """One item's estimates and standard errors, the sampler replayed draw by draw: the
    defensive mixture of the kernel's docstring, barren free units drawn from the prior and
    counted by their Rao-Blackwellised P(on | parents).  Two passes over stored weights.
    With ``rao_blackwell``, a needed free unit counts by its conditional given the draw's
    other units, from the needed units' joint recomputed with the unit on and off."""
    s = nets.structure
    w, h = nets.w[0], nets.h[0]
    n = s.n_units
    noisy = nets.noisy_or
    free = np.isnan(clamp_row)
    needed = ~free.copy()
    for i in range(n - 1, -1, -1):
        if free[i] and np.any(needed[s.ch_idx[s.ch_ptr[i]:s.ch_ptr[i + 1]]]):
            needed[i] = True
    qc = np.clip(q_row, IMPORTANCE_EPS, 1.0 - IMPORTANCE_EPS)
    lq1, lq0 = np.log(qc), np.log1p(-qc)
    stream = _Stream(seed, item)
    lws, xs = np.empty(n_samples), np.zeros((n_samples, n))
    for k in range(n_samples):
        prior = stream.uniform() < IMPORTANCE_MIX
        z = h.copy()
        lp = lprior = lmf = 0.0
        for i in range(n):
            if not free[i]:
                on = clamp_row[i] > 0.5
                lp += _log_f(z[i], on, noisy)
            else:
                pon = -np.expm1(-z[i]) if noisy else 1.0 / (1.0 + np.exp(-z[i]))
                if not needed[i]:
                    xs[k, i] = pon
                    on = stream.uniform() < pon
                else:
                    u = stream.uniform()
                    on = u < (pon if prior else np.exp(lq1[i]))
                    l_ = _log_f(z[i], on, noisy)
                    lp += l_
                    lprior += l_
                    lmf += lq1[i] if on else lq0[i]
                    xs[k, i] = float(on)
            if on:
                for e in range(s.ch_ptr[i], s.ch_ptr[i + 1]):
                    z[s.ch_idx[e]] += w[s.ch_w[e]]
        lws[k] = lp - np.logaddexp(np.log1p(-IMPORTANCE_MIX) + lmf,
                                   np.log(IMPORTANCE_MIX) + lprior)
        if rao_blackwell and lws[k] > -np.inf:
            state = np.where(free, xs[k] > 0.5, clamp_row > 0.5)
            for i in np.flatnonzero(free & needed):
                on, off = state.copy(), state.copy()
                on[i], off[i] = True, False
                with np.errstate(invalid="ignore"):
                    d = (_needed_log_joint(s, w, h, on, needed, noisy)
                         - _needed_log_joint(s, w, h, off, needed, noisy))
                xs[k, i] = 1.0 / (1.0 + np.exp(-d)) if not np.isnan(d) else xs[k, i]
    wts = np.exp(lws - lws.max())
    m = wts @ xs / wts.sum()
    se = np.hypot(np.sqrt((wts**2) @ (xs - m) ** 2) / wts.sum(), (n_samples + 16) * ULP * m)
    return np.where(free, m, clamp_row), np.where(free, se, 0.0)


@pytest.mark.parametrize("rao_blackwell", [False, True])
@pytest.mark.parametrize("activation", ["sigmoid", "noisy_or"])
def test_matches_the_replayed_sampler(activation, rao_blackwell):
    rng = np.random.default_rng(3)
    for k in range(3):
        net = random_dag(rng, activation, n_units=8, n_visible=3)
        X = net.sample(3, random_state=k)
        miss = np.zeros(X.shape, dtype=bool)
        miss[1, 0] = True                     # a missing visible unit (barren or not)
        est, pred, se = sampled_marginals(net, X, miss, 300, 77 + k,
                                          rao_blackwell=rao_blackwell)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", mf.ConvergenceWarning)
            r = net._solve(X, miss, keep="mu")
        nets, items, _, _ = net._dag_problem(X, miss)
        q = net._flat_means(r)
        for p in range(X.shape[0]):
            m_ref, se_ref = reference_marginals(nets, items.clamp[p], q[p], 300, 77 + k, p,
                                                rao_blackwell)
            np.testing.assert_allclose(pred[p], np.minimum(m_ref, 1.0), rtol=1e-9, atol=1e-12)
            np.testing.assert_allclose(se[p], se_ref, rtol=1e-8, atol=1e-17)
            assert np.any(se_ref > 0.0)


# ---------------------------------------------------------------------------- same bits
@pytest.mark.parametrize("activation", ["sigmoid", "noisy_or"])
def test_other_outputs_bit_identical_and_thread_count_independent(activation):
    rng = np.random.default_rng(8)
    net = random_dag(rng, activation, n_units=12, n_visible=5)
    X = net.sample(40, random_state=1)
    miss = rng.random(X.shape) < 0.3
    base, pred0 = sampled_marginals(net, X, miss, 400, 5, stderr=False)
    for nt in (1, 2):
        est, pred, se = sampled_marginals(net, X, miss, 400, 5, n_threads=nt)
        np.testing.assert_array_equal(pred, pred0)
        for name in ("estimate", "stderr", "ess"):
            np.testing.assert_array_equal(getattr(est, name), getattr(base, name))
        if nt == 1:
            se1 = se
        else:
            np.testing.assert_array_equal(se, se1)
    free = np.isnan(net._dag_problem(X, miss)[1].clamp)
    assert np.all(se1[~free] == 0.0) and np.all(np.isfinite(se1)) and np.all(se1[free] >= 0)
    # read-only inputs
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", mf.ConvergenceWarning)
        r = net._solve(X, miss, keep="mu")
    nets, items, _, _ = net._dag_problem(X, miss)
    mu = net._flat_means(r).copy()
    mu.setflags(write=False)
    _, _, se_ro = importance(nets, items, mu, r.bound, 400, 5, 1, False, predict=True,
                             predict_stderr=True)
    np.testing.assert_array_equal(se_ro, se1)


def test_stderr_needs_predict_and_shrinks_like_one_over_root_n():
    rng = np.random.default_rng(4)
    net = random_dag(rng, "sigmoid", n_units=10, n_visible=4)
    X = net.sample(30, random_state=2)
    with pytest.raises(ValueError, match="predict_stderr"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", mf.ConvergenceWarning)
            r = net._solve(X, None, keep="mu")
        nets, items, _, _ = net._dag_problem(X, None)
        importance(nets, items, net._flat_means(r), r.bound, 100, 0, 1, False,
                   predict_stderr=True)
    _, _, se1 = sampled_marginals(net, X, None, 500, 1)
    _, _, se2 = sampled_marginals(net, X, None, 8000, 1)
    free = se1 > 0
    ratio = np.median(se1[free] / np.maximum(se2[free], 1e-300))
    assert 3.0 < ratio < 5.5, ratio         # sqrt(16) = 4


def test_impossible_pattern_gives_nan_stderr():
    # a noisy-OR unit with zero bias and no parent on can never be on: observing it on has
    # probability 0, every weight is 0, and the marginals and their errors are NaN
    W = np.zeros((3, 3))
    W[2, 0] = 1.0
    h = np.array([0.5, 0.5, 0.0])
    net = mf.BeliefNet(W, h, np.array([False, False, True]), "noisy_or", progress=False)
    X = np.array([[1.0]])
    nets, items, _, _ = net._dag_problem(X, None)
    q = np.zeros((1, 3))                       # unit 0 always off: the weights are all 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        _, pred, se = importance(nets, items, q, np.zeros(1), 50, 0, 1, False, predict=True,
                                 predict_stderr=True)
    # the prior share of the proposal turns unit 0 on at times: not impossible after all
    assert np.all(np.isfinite(pred[0, :2]))
    h2 = np.array([0.0, 0.5, 0.0])             # now unit 0 can never be on either
    net2 = mf.BeliefNet(W, h2, np.array([False, False, True]), "noisy_or", progress=False)
    nets2, items2, _, _ = net2._dag_problem(X, None)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        _, pred2, se2 = importance(nets2, items2, q, np.zeros(1), 50, 0, 1, False,
                                   predict=True, predict_stderr=True)
    assert np.all(np.isnan(pred2[0, :2])) and np.all(np.isnan(se2[0, :2]))
    assert se2[0, 2] == 0.0


# ---------------------------------------------------------------------------- calibration
def _coverage(kind, n_nets, n_samples, rng):
    z = []
    for k in range(n_nets):
        if kind == "layered":
            layered = mf.SigmoidBeliefNet([3, 5, 6], weight_scale=2.5, random_state=k,
                                          progress=False)
            net = layered
        else:
            net = random_dag(rng, kind, n_units=11, n_visible=5)
        X = net.sample(6, random_state=k)
        miss = rng.random(X.shape) < 0.25
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", mf.ConvergenceWarning)
            exact = enumerate_posteriors(net, X, miss)
        _, pred, se = sampled_marginals(net, X, miss, n_samples, 1000 + k)
        free = np.isnan(net._dag_problem(X, miss)[1].clamp)
        with np.errstate(divide="ignore", invalid="ignore"):
            z.append(np.abs(pred - exact)[free] / se[free])
    return np.concatenate(z)


def enumerate_posteriors(net, X, miss):
    """P(unit = 1 | observed) of every unit, by summing over the free units' states."""
    if isinstance(net, mf.SigmoidBeliefNet):
        dag = net.to_dag()
    else:
        dag = net
    r = dag.infer(X, miss, method="exact")
    return r.mu.reshape(X.shape[0], -1)


@pytest.mark.parametrize("kind", ["sigmoid", "noisy_or", "layered"])
def test_standard_errors_are_calibrated(kind):
    rng = np.random.default_rng({"sigmoid": 1, "noisy_or": 2, "layered": 3}[kind])
    z = _coverage(kind, 40, 2000, rng)
    z = z[~np.isnan(z)]                       # 0/0: estimate exact and SE 0 (a sure unit)
    inside = float(np.mean(z <= 1.96))
    print(f"\n{kind}: {inside:.3f} of {z.size} free-unit marginals within 1.96 SE, "
          f"{np.mean(z <= 3.0):.4f} within 3 SE")
    assert 0.92 <= inside <= 0.98, inside
    assert np.mean(z <= 3.0) >= 0.985


@pytest.mark.parametrize("activation", ["sigmoid", "noisy_or"])
def test_rao_blackwell_keeps_the_draws_and_lowers_the_spread(activation):
    rng = np.random.default_rng(21)
    net = random_dag(rng, activation, n_units=10, n_visible=4)
    X = net.sample(30, random_state=2)
    miss = np.zeros(X.shape, dtype=bool)
    est0, pred0, se0 = sampled_marginals(net, X, miss, 2000, 5)
    est1, pred1, se1 = sampled_marginals(net, X, miss, 2000, 5, rao_blackwell=True)
    for a in ("estimate", "stderr", "ess"):
        np.testing.assert_array_equal(getattr(est0, a), getattr(est1, a))
    one, two = (sampled_marginals(net, X, miss, 2000, 5, n_threads=t, rao_blackwell=True)
                for t in (1, 2))
    np.testing.assert_array_equal(one[1], two[1])
    np.testing.assert_array_equal(one[2], two[2])
    free = se0 > 0
    assert np.median(se1[free] / se0[free]) < 0.9
    nets, items, _, _ = net._dag_problem(X, miss)
    with pytest.raises(ValueError, match="rao_blackwell needs predict"):
        importance(nets, items, np.full((30, 10), 0.5), np.zeros(30), 10, 0, 1, False,
                   rao_blackwell=True)
