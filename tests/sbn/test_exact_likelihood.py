"""Exact ln P(v) by enumeration, checked against brute force over every joint state, and the
Gaussian-approximated mean-field bound compared with it."""
import itertools

import numpy as np
import pytest

import mfengine as mf


def random_net(sizes, weight_scale, seed, bias_scale=1.0):
    rng = np.random.default_rng(seed)
    base = mf.SigmoidBeliefNet(sizes, weight_scale=weight_scale, random_state=rng)
    return mf.SigmoidBeliefNet.from_params(base.weights, [rng.normal(0, bias_scale, n) for n in sizes])


def all_binary(n):
    return np.array(list(itertools.product([0.0, 1.0], repeat=n)))


def brute_force_log_likelihood(net, V):
    """ln P(v) = ln sum over every hidden configuration of prod_i P(S_i | parents), written
    from the model's definition with plain loops (no code shared with the library)."""
    sizes = net.sizes
    H = sum(sizes[:-1])
    out = []
    for v in V:
        total = 0.0
        for hidden in itertools.product([0, 1], repeat=H):
            layers, off = [], 0
            for n in sizes[:-1]:
                layers.append(np.array(hidden[off : off + n], dtype=float))
                off += n
            layers.append(np.asarray(v, dtype=float))
            p = 1.0
            for l, S in enumerate(layers):
                z = net.biases[l] if l == 0 else net.biases[l] + net.weights[l - 1] @ layers[l - 1]
                on = 1.0 / (1.0 + np.exp(-z))
                p *= np.prod(np.where(S == 1, on, 1.0 - on))
            total += p
        out.append(np.log(total))
    return np.array(out)


TINY = [[1, 2], [2, 3], [1, 2, 3], [2, 2, 2, 2], [3, 1, 4]]


@pytest.mark.parametrize("sizes", TINY, ids=lambda s: "x".join(map(str, s)))
def test_exact_log_likelihood_matches_brute_force(sizes):
    net = random_net(sizes, 2.0, seed=len(sizes) + sum(sizes))
    V = all_binary(sizes[-1])
    np.testing.assert_allclose(net.exact_log_likelihood(V), brute_force_log_likelihood(net, V),
                               rtol=1e-12, atol=1e-13)


@pytest.mark.parametrize("sizes", [[2, 3, 5], [3, 4], [2, 2, 2, 6], [1, 12, 4], [9, 2, 3]],
                         ids=lambda s: "x".join(map(str, s)))
def test_exact_likelihood_sums_to_one(sizes):
    net = random_net(sizes, 3.0, seed=1)
    V = all_binary(sizes[-1])
    total = np.exp(net.exact_log_likelihood(V)).sum()
    assert total == pytest.approx(1.0, abs=1e-12)


def test_exact_likelihood_marginalises_missing_entries():
    """ln P(v_obs) = ln sum over the missing entries' values of P(v); the missing entries'
    stored values (NaN, 0, 1, anything) do not matter."""
    sizes = [2, 3, 5]
    net = random_net(sizes, 2.0, seed=3)
    rng = np.random.default_rng(4)
    V = rng.integers(0, 2, (12, 5)).astype(float)
    missing = rng.random(V.shape) < 0.4
    missing[0] = True  # nothing observed: ln P = 0
    missing[1] = False  # everything observed
    expected = []
    for v, m in zip(V, missing):
        idx = np.nonzero(m)[0]
        completions = []
        for bits in itertools.product([0.0, 1.0], repeat=len(idx)):
            c = v.copy()
            c[idx] = bits
            completions.append(c)
        expected.append(np.logaddexp.reduce(net.exact_log_likelihood(np.array(completions))))
    Vn = np.where(missing, np.nan, V)
    got = net.exact_log_likelihood(Vn, missing=missing)
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12)
    assert got[0] == pytest.approx(0.0, abs=1e-12)
    Vw = np.where(missing, 0.37, V)  # any value is allowed at a missing entry
    np.testing.assert_allclose(net.exact_log_likelihood(Vw, missing=missing), got, rtol=1e-13)
    # a 1-D mask applies to every pattern
    m1 = np.array([True, False, False, True, False])
    np.testing.assert_allclose(
        net.exact_log_likelihood(V, missing=m1),
        net.exact_log_likelihood(V, missing=np.broadcast_to(m1, V.shape)),
        rtol=1e-14,
    )


def test_exact_likelihood_agrees_with_log_joint_and_sampling():
    """ln P(v) = ln sum_h P(h, v) with log_joint, and the sampler draws from the same model:
    empirical frequencies of the visible vectors match exp(ln P) (chi-square-free check: every
    vector with probability > 2% within 5 standard errors)."""
    sizes = [2, 3, 4]
    net = random_net(sizes, 2.5, seed=5)
    V = all_binary(4)
    H = all_binary(5)
    ll = np.empty(len(V))
    for i, v in enumerate(V):
        layers = [H[:, :2], H[:, 2:], np.broadcast_to(v, (len(H), 4))]
        ll[i] = np.logaddexp.reduce(net.log_joint(layers))
    np.testing.assert_allclose(net.exact_log_likelihood(V), ll, rtol=1e-12)
    n = 40000
    S = net.sample(n, random_state=0)
    codes = (S @ (2 ** np.arange(3, -1, -1))).astype(int)
    freq = np.bincount(codes, minlength=16) / n
    p = np.exp(ll)
    big = p > 0.02
    se = np.sqrt(p * (1 - p) / n)
    assert np.all(np.abs(freq - p)[big] < 5 * se[big])


def test_exact_likelihood_refuses_large_nets():
    net = mf.SigmoidBeliefNet([10, 11, 3], random_state=0)
    V = np.zeros((1, 3))
    with pytest.raises(ValueError, match="max_hidden"):
        net.exact_log_likelihood(V)
    small = mf.SigmoidBeliefNet([3, 4, 3], random_state=0)
    with pytest.raises(ValueError, match="max_hidden"):
        small.exact_log_likelihood(V, max_hidden=6)
    assert np.isfinite(small.exact_log_likelihood(V, max_hidden=7)).all()


# ----------------------------------------------------------------------------- bound vs exact
@pytest.mark.parametrize(
    "sizes, weight_scale, max_rel_gap",
    [
        ([2, 4, 8], 0.5, 0.02),
        ([2, 4, 8], 1.0, 0.05),
        ([3, 6, 12], 1.0, 0.05),
        ([4, 8, 16], 1.0, 0.05),
        ([2, 5, 5, 10], 1.0, 0.08),
        ([2, 4, 8], 3.0, None),
        ([4, 8, 16], 3.0, None),
    ],
)
def test_bound_close_to_exact_log_likelihood(sizes, weight_scale, max_rel_gap):
    """The Gaussian-approximated bound is only approximately a lower bound, so no inequality is
    asserted: for moderate weights its mean distance to ln P(v) must be a small fraction of
    |ln P(v)|; for large weights the figures are only printed.  Data are sampled from the net."""
    gaps = []
    for seed in range(3):
        net = random_net(sizes, weight_scale, seed=100 + seed, bias_scale=0.5)
        V = net.sample(200, random_state=seed)
        exact = net.exact_log_likelihood(V)
        bound = mf.infer(net, V, tol=1e-9, max_iter=2000).bound   # (weights of scale 3 need
        gaps.append((bound - exact, exact))                        # more than 200 sweeps)
    d = np.concatenate([g for g, _ in gaps])
    e = np.concatenate([x for _, x in gaps])
    rel = np.mean(np.abs(d)) / np.mean(np.abs(e))
    print(f"\n{sizes} ws={weight_scale}: mean ln P = {e.mean():.4f}, mean (L - ln P) = {d.mean():+.4f}, "
          f"mean |L - ln P| = {np.mean(np.abs(d)):.4f} ({100 * rel:.2f}% of |ln P|), "
          f"L > ln P in {100 * np.mean(d > 0):.1f}% of patterns, max L - ln P = {d.max():+.4f}")
    assert np.all(np.isfinite(d))
    if max_rel_gap is not None:
        assert rel < max_rel_gap


def test_log_probabilities_beyond_the_double_range_are_refused_not_minus_inf():
    """Long fuzz, seed 59: biases of 1.8e308 made log_joint sum five finite terms of about
    -1.8e308 to -inf, which says "impossible".  log_joint (of a net and of a batch) now
    refuses such a sum naming W_ and h_; exact enumeration skips states whose ln P overflowed
    when another state is finite (their probability adds nothing), and refuses only a sum
    that is itself out of range."""
    import mfengine as mf

    rng = np.random.default_rng(0)
    W, h = np.tril(rng.normal(size=(5, 5)), -1) * 5.0, rng.normal(size=5)
    net = mf.BeliefNet(W, h, visible=[3, 4], progress=False)
    S = net.sample(3, random_state=2, return_all=True)
    net.h_ = np.full(5, 1.7976931348623157e308)
    with pytest.raises(OverflowError, match=r"log_joint: .*\(W_\) and biases \(h_\)"):
        net.log_joint(S)
    batch = mf.BeliefNetBatch(W[None], h[None], [3, 4], progress=False)
    batch._params().h_ = np.full((1, 5), 1.7976931348623157e308)
    with pytest.raises(OverflowError, match=r"log_joint: .*\(h_\)"):
        batch.log_joint(S[None])
    # unit 0 on makes units 1 and 2 off for sure (weights -1e308): the state with both on
    # has two terms of -1e308, whose sum overflows; every other state is finite
    W2 = np.zeros((3, 3))
    W2[1, 0] = W2[2, 0] = -1e308
    small = mf.BeliefNet(W2, np.zeros(3), visible=[2], progress=False)
    with pytest.raises(OverflowError, match="log_joint"):
        small.log_joint(np.array([[1.0, 1.0, 1.0]]))
    got = small.exact_log_likelihood(np.array([[0.0], [1.0]]))
    # P(x = 1) = P(unit 0 off) sigmoid(0) = 1/4, P(x = 0) = 1/4 + 1/2
    np.testing.assert_allclose(got, np.log([0.75, 0.25]), rtol=1e-12)


def test_layered_log_probabilities_beyond_the_double_range_are_refused():
    """Long fuzz, seed 61: the layered net's log_joint summed terms of -1.8e308 (biases_
    assigned 1.8e308) to -inf.  A sigmoid net gives every configuration a finite ln P, so
    log_joint and exact_log_likelihood refuse a non-finite one naming weights_ and biases_;
    biases of 1e300 still give the finite sums."""
    import mfengine as mf

    m = mf.SigmoidBeliefNet([2, 3], random_state=0, progress=False)
    X = m.sample(5, random_state=1)
    S = m.sample(3, random_state=2, return_all=True)
    m.biases_[1] = np.full(3, 1e300)
    lp = m.log_joint(S)
    off = np.sum(S[1] == 0, axis=1)          # each visible unit off costs ln sigmoid(-1e300)
    np.testing.assert_allclose(lp[off > 0], -1e300 * off[off > 0], rtol=1e-12)
    assert np.all(np.isfinite(m.exact_log_likelihood(X)))
    m.biases_[1] = np.full(3, 1.7976931348623157e308)
    for call in (lambda: m.log_joint(S), lambda: m.exact_log_likelihood(X)):
        with pytest.raises(OverflowError, match=r"\(weights_\) and biases \(biases_\)"):
            call()
    m.biases_[1] = np.zeros(3)
    m.weights_[0] = np.full((3, 2), 1e308)   # a unit's input overflows to inf: NaN terms
    with pytest.raises(OverflowError, match="exact_log_likelihood"):
        m.exact_log_likelihood(X)
