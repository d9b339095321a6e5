"""Checks of the PyTorch SBN peer on a tiny net (2-3-5), where every expectation can be
enumerated: the IS estimate against mfengine's exact ln P(x), the VIMCO leave-one-out
baselines against a loop, and the averaged VIMCO and NVIL gradients against the exact
gradients of E[L_K] and of the ELBO.  ``python -m pytest bench/peers -q`` (about 10 s)."""
import itertools
import math
import os
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch_sbn_amortized as peer_mod  # noqa: E402

SIZES = (2, 3, 5)
D = torch.float64


def tiny_peer(seed=0):
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    peer = peer_mod.Peer(SIZES, rng.uniform(0.2, 0.8, SIZES[-1]), dtype=D)
    with torch.no_grad():
        for p in peer.parameters():
            p.add_(torch.randn(p.shape, dtype=D) * 0.7)
    return peer


def states(n):
    return torch.tensor(list(itertools.product([0.0, 1.0], repeat=n)), dtype=D)


def exact_terms(peer, x):
    """ln p(x, h) and ln q(h | x) (differentiable) over every joint hidden state h."""
    H1, H2 = states(SIZES[1]), states(SIZES[0])
    h1 = H1.repeat_interleave(H2.shape[0], 0)
    h2 = H2.repeat(H1.shape[0], 1)
    b = peer_mod.bern_logp
    F = torch.nn.functional
    z1 = F.linear(x - peer.centre, peer.R1, peer.c1).expand(h1.shape[0], -1)
    log_q = b(h1, z1) + b(h2, F.linear(h1, peer.R0, peer.c0))
    log_p = (b(h2, peer.b0.expand_as(h2)) + b(h1, F.linear(h2, peer.W0, peer.b1))
             + b(x.expand(h1.shape[0], -1), F.linear(h1, peer.W1, peer.b2)))
    return log_p, log_q


def test_is_estimate_matches_mfengine_exact(tmp_path):
    mf = pytest.importorskip("mfengine")
    peer = tiny_peer()
    path = tmp_path / "tiny.npz"
    np.savez(path, **peer.export())
    net = peer_mod.load_mfengine_net(str(path), progress=False)
    X = net.sample(6, random_state=1)
    exact = net.exact_log_likelihood(X)
    again = peer_mod.peer_from_npz(str(path))
    est, se = peer_mod.is_estimate(again, torch.as_tensor(X), 20000, seed=0)
    assert np.all(np.abs(est - exact) < 5 * se + 1e-3), (est, exact, se)
    for x, e in zip(torch.as_tensor(X), exact):        # and by enumeration with the peer
        lp, _ = exact_terms(peer, x[None, :])
        assert abs(float(torch.logsumexp(lp.detach(), 0)) - e) < 1e-9
    assert isinstance(net, mf.SigmoidBeliefNet)


def test_vimco_leave_one_out():
    k, b = 4, 3
    f = torch.randn(k, b, dtype=D) * 3
    loo = peer_mod.leave_one_out(f)
    for j in range(k):
        for i in range(b):
            g = [f[m, i] for m in range(k) if m != j]
            vals = torch.stack(g + [sum(g) / (k - 1)])
            assert abs(float(torch.logsumexp(vals, 0) - math.log(k) - loo[j, i])) < 1e-12


def flat_grad(loss, params):
    g = torch.autograd.grad(loss, params, retain_graph=True)
    return torch.cat([t.reshape(-1) for t in g])


def grads_of(est, x, params, seed):
    """Minus the .grad that ``est.gradients`` sets: the ascent direction, flattened."""
    for p in est.params:
        p.grad = None
    torch.manual_seed(seed)
    est.gradients(x)
    return -torch.cat([p.grad.reshape(-1) for p in params])


@pytest.mark.parametrize("grad", ["manual", "autograd"])
def test_vimco_gradient_is_unbiased(grad):
    """Mean of VIMCO's gradient over many draws = gradient of E[L_K], enumerated."""
    peer = tiny_peer(1)
    params = list(peer.parameters())
    x = torch.tensor([[1.0, 0.0, 1.0, 1.0, 0.0]], dtype=D)
    k = 3
    log_p, log_q = exact_terms(peer, x)
    f = log_p - log_q
    n = f.shape[0]
    idx = torch.tensor(list(itertools.product(range(n), repeat=k)))      # every K-tuple
    bound = torch.logsumexp(f[idx], 1) - math.log(k)
    weight = torch.exp(log_q[idx].sum(1))
    exact = flat_grad((weight * bound).sum(), params)
    mc = grads_of(peer_mod.Vimco(peer, k, grad=grad), x.expand(200000, -1), params, 2)
    err = (mc - exact).abs().max() / exact.abs().max()
    assert err < 0.03, float(err)


@pytest.mark.parametrize("grad", ["manual", "autograd"])
def test_nvil_gradient_is_unbiased(grad):
    """NVIL's p and q gradients average to the ELBO's, up to the positive variance scale."""
    peer = tiny_peer(3)
    x = torch.tensor([[0.0, 1.0, 1.0, 0.0, 1.0]], dtype=D)
    log_p, log_q = exact_terms(peer, x)
    elbo = (torch.exp(log_q) * (log_p - log_q)).sum()
    pp, qp = peer.p_parameters(), peer.q_parameters()
    est = peer_mod.Nvil(peer, SIZES[-1], dtype=D, grad=grad)
    g = grads_of(est, x.expand(200000, -1), pp + qp, 4)
    scale = max(1.0, math.sqrt(est.v))          # the signal is divided by this
    n_p = sum(t.numel() for t in pp)
    g_p, g_q = g[:n_p], g[n_p:] * scale
    for mc, exact in ((g_p, flat_grad(elbo, pp)), (g_q, flat_grad(elbo, qp))):
        err = (mc - exact).abs().max() / exact.abs().max()
        assert err < 0.05, float(err)


@pytest.mark.parametrize("method", ["vimco", "nvil"])
def test_manual_gradients_equal_autograd(method):
    """Same random stream, same draws: the hand-derived gradients are autograd's, on the
    full-size net (float64)."""
    rng = np.random.default_rng(5)
    sizes = (20, 30, 50)
    x = torch.as_tensor((rng.random((7, sizes[-1])) < 0.4).astype(float))
    out = []
    for grad in ("manual", "autograd"):
        torch.manual_seed(6)
        peer = peer_mod.Peer(sizes, np.full(sizes[-1], 0.3), dtype=D)
        est = (peer_mod.Vimco(peer, 5, grad=grad) if method == "vimco"
               else peer_mod.Nvil(peer, sizes[-1], dtype=D, grad=grad))
        est.c, est.v, est.started = 1.0, 4.0, True           # NVIL: a non-trivial scale
        out.append(grads_of(est, x, list(peer.parameters()), 7))
    torch.testing.assert_close(out[0], out[1], rtol=1e-10, atol=1e-12)
