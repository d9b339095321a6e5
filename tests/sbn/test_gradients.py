"""SigmoidBeliefNet.gradient against central finite differences of the bound.

Two derivatives are checked:
* the partial derivative at FIXED (mu, xi): finite differences of ``evaluate_bound`` (NumPy)
  with mu and xi held still, at the mean-field solution and at arbitrary (mu, xi);
* the total derivative of the converged bound: finite differences of ``infer(...).bound`` with
  a very tight tolerance.  At a stationary point of L in (mu, xi) the two coincide (envelope
  theorem), so ``gradient`` is also the gradient of what learning maximises.
"""
import numpy as np
import pytest

import mfengine as mf


def random_net(sizes, weight_scale, seed, bias_scale=0.5):
    rng = np.random.default_rng(seed)
    base = mf.SigmoidBeliefNet(sizes, weight_scale=weight_scale, random_state=rng)
    return mf.SigmoidBeliefNet.from_params(base.weights, [rng.normal(0, bias_scale, n) for n in sizes])


def numerical_gradient(net, F, h):
    """Central differences of F(net') over every weight and bias; same layout as gradient()."""
    gW = [np.zeros_like(w) for w in net.weights]
    gb = [np.zeros_like(b) for b in net.biases]
    for grads, attr in ((gW, "weights"), (gb, "biases")):
        for l, g in enumerate(grads):
            for idx in np.ndindex(g.shape):
                vals = []
                for sign in (1, -1):
                    W = [w.copy() for w in net.weights]
                    B = [b.copy() for b in net.biases]
                    (W if attr == "weights" else B)[l][idx] += sign * h
                    vals.append(F(mf.SigmoidBeliefNet.from_params(W, B)))
                g[idx] = (vals[0] - vals[1]) / (2 * h)
    return gW, gb


def max_error(analytic, numeric):
    a = np.concatenate([x.ravel() for x in analytic[0] + analytic[1]])
    n = np.concatenate([x.ravel() for x in numeric[0] + numeric[1]])
    return np.max(np.abs(a - n)), np.max(np.abs(n))


def make_missing(V, seed, frac=0.3):
    missing = np.random.default_rng(seed).random(V.shape) < frac
    missing[0, 0] = True
    return missing


@pytest.mark.parametrize("sizes", [[3, 5], [2, 4, 6], [2, 3, 3, 5]], ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("with_missing", [False, True])
@pytest.mark.parametrize("at", ["solution", "arbitrary"])
def test_partial_derivative_at_fixed_mu_xi(sizes, with_missing, at):
    net = random_net(sizes, 1.5, seed=len(sizes))
    V = net.sample(6, random_state=1)
    missing = make_missing(V, 2) if with_missing else None
    if with_missing:
        V = np.where(missing, np.nan, V)
    if at == "solution":
        r = mf.infer(net, V, missing=missing, tol=1e-10)
    else:
        # the formula must hold for any (mu, xi), not only where xi sits at its fixed point
        rng = np.random.default_rng(3)
        mu = [rng.uniform(0.05, 0.95, (len(V), n)) for n in sizes]
        xi = [rng.uniform(0.05, 0.95, (len(V), n)) for n in sizes]
        r = mf.BeliefNetResult(bound=np.zeros(len(V)), converged=np.ones(len(V), bool),
                               n_iter=np.zeros(len(V), int), method="gaussian", mu=mu, xi=xi)
    analytic = net.gradient(V, result=r, missing=missing)
    F = lambda n2: n2.evaluate_bound(V, r.mu, r.xi, missing=missing).sum()
    numeric = numerical_gradient(net, F, h=1e-5)
    err, scale = max_error(analytic, numeric)
    print(f"\n{sizes} missing={with_missing} at {at}: max |analytic - FD| = {err:.2e} (max |grad| {scale:.2f})")
    assert err <= 1e-7 * max(1.0, scale)
    for a, n in zip(analytic[0] + analytic[1], numeric[0] + numeric[1]):
        assert a.shape == n.shape


@pytest.mark.parametrize("sizes", [[3, 5], [2, 4, 6], [2, 3, 3, 5]], ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("with_missing", [False, True])
def test_total_derivative_of_converged_bound(sizes, with_missing):
    """Envelope theorem: d/dtheta of max_{mu, xi} L = dL/dtheta at the solution."""
    net = random_net(sizes, 1.0, seed=10 + len(sizes))
    V = net.sample(5, random_state=4)
    missing = make_missing(V, 5) if with_missing else None
    tight = dict(missing=missing, tol=1e-13, inner_tol=1e-11, max_iter=2000)
    r = mf.infer(net, V, **tight)
    assert r.converged.all()
    analytic = net.gradient(V, result=r, missing=missing)
    numeric = numerical_gradient(net, lambda n2: mf.infer(n2, V, **tight).bound.sum(), h=1e-5)
    err, scale = max_error(analytic, numeric)
    print(f"\n{sizes} missing={with_missing}: max |analytic - FD of converged bound| = {err:.2e} "
          f"(max |grad| {scale:.2f})")
    assert err <= 1e-4 * max(1.0, scale)


def test_gradient_sums_over_patterns_and_solves_when_not_given_a_result():
    net = random_net([2, 4, 6], 1.0, seed=0)
    V = net.sample(7, random_state=1)
    gW, gb = net.gradient(V, tol=1e-10)
    r = mf.infer(net, V, tol=1e-10)
    gW2, gb2 = net.gradient(V, result=r)
    for a, b in zip(gW + gb, gW2 + gb2):
        np.testing.assert_array_equal(a, b)
    parts = [net.gradient(V[i : i + 1], tol=1e-10) for i in range(len(V))]
    for l in range(len(gW)):
        np.testing.assert_allclose(sum(p[0][l] for p in parts), gW[l], rtol=1e-12, atol=1e-13)
    for l in range(len(gb)):
        np.testing.assert_allclose(sum(p[1][l] for p in parts), gb[l], rtol=1e-12, atol=1e-13)
    for g, w in zip(gW, net.weights):
        assert g.shape == w.shape
    for g, b in zip(gb, net.biases):
        assert g.shape == b.shape


def test_gradient_at_the_xi_fixed_point_is_the_papers_formula():
    """At the xi fixed point the gradient reduces to Saul & Jordan eqs. 10-11:
    dL/dJ_ij = (mu_i - xi_i) mu_j - J_ij xi_i (1 - xi_i) mu_j (1 - mu_j), dL/dh_i = mu_i - xi_i."""
    net = random_net([2, 4, 6], 1.5, seed=3)
    V = net.sample(5, random_state=2)
    r = mf.infer(net, V, tol=1e-12, inner_tol=1e-13)
    gW, gb = net.gradient(V, result=r)
    for l in range(1, 3):
        mu, xi, mp = r.mu[l], r.xi[l], r.mu[l - 1]
        expect = (mu - xi).T @ mp - net.weights[l - 1] * ((xi * (1 - xi)).T @ (mp * (1 - mp)))
        np.testing.assert_allclose(gW[l - 1], expect, rtol=1e-9, atol=1e-11)
        np.testing.assert_allclose(gb[l], (mu - xi).sum(axis=0), rtol=1e-9, atol=1e-11)
    np.testing.assert_allclose(gb[0], (r.mu[0] - r.xi[0]).sum(axis=0), rtol=1e-9, atol=1e-11)
