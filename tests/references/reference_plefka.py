"""Slow, obviously-right NumPy references for the Plefka schemes G11, G12, G22
(Bhattacharyya & Keerthi), used only by tests/sbn/test_plefka.py.

Everything here works on ONE item with a dense (n, n) weight matrix ``W`` (``W[i, j]`` from j
to i, j < i), a bias vector ``h``, a clamp row (0/1, NaN for a free unit) and a mean vector
``u``.  The mathematics is in docs/derivations/plefka.rst; the two routes to the second Plefka term are
kept independent:

* ``second_term_closed``: expand -E_2 (the C = 2 Taylor energy) into multilinear monomials of
  the centred variables s_k = S_k - u_k (using s_k^2 = v_k + (1 - 2 u_k) s_k) and return
  -1/2 sum over monomials of degree >= 2 of coef^2 prod v_k;
* ``second_term_bruteforce``: enumerate every joint state of the free units under the product
  distribution and form -1/2 [Var(E_2) - sum_i Cov(E_2, S_i)^2 / (u_i (1 - u_i))] directly.
"""
from collections import defaultdict

import numpy as np
from scipy.special import expit, xlogy

from reference_sjj import barren_mask


def log_f_derivatives(M, activation):
    """(a, b): the derivatives of order 0..3 of ln f and ln(1 - f) at M, each (4,) + M.shape."""
    M = np.asarray(M, dtype=np.float64)
    if activation == "sigmoid":
        s, q = expit(M), expit(-M)
        a2 = -s * q
        a3 = -s * q * (q - s)
        a = np.array([-np.logaddexp(0.0, -M), q, a2, a3])
        b = np.array([-np.logaddexp(0.0, M), -s, a2, a3])
        return a, b
    if activation == "noisy_or":
        with np.errstate(divide="ignore"):
            r = 1.0 / np.expm1(M)
            a0 = np.log(-np.expm1(-M))
        a = np.array([a0, r, -r * (1.0 + r), r * (1.0 + r) * (1.0 + 2.0 * r)])
        b = np.array([-M, -np.ones_like(M), np.zeros_like(M), np.zeros_like(M)])
        return a, b
    raise ValueError(activation)


def _mix(u, a, b):
    """u a + (1 - u) b with 0 * inf counted as 0."""
    with np.errstate(invalid="ignore"):
        return np.where(u > 0, u * a, 0.0) + np.where(u < 1, (1.0 - u) * b, 0.0)


def _means(clamp, u):
    free = np.isnan(clamp)
    return free, np.where(free, u, clamp)


def neg_entropy(clamp, u):
    free, uu = _means(clamp, u)
    return float(np.sum(np.where(free, xlogy(uu, uu) + xlogy(1.0 - uu, 1.0 - uu), 0.0)))


def second_term_closed(W, h, clamp, u, activation):
    """The second Plefka term with the C = 2 Taylor energy, by multilinear expansion."""
    n = len(h)
    free, u = _means(clamp, u)
    v = u * (1.0 - u)
    c = 1.0 - 2.0 * u
    M = h + W @ u
    a, b = log_f_derivatives(M, activation)
    g2 = _mix(u, a[2], b[2])
    with np.errstate(invalid="ignore"):
        d1, d2 = a[1] - b[1], a[2] - b[2]
    coef = defaultdict(float)
    for i in range(n):
        for j in range(i):
            if v[i] * v[j] > 0:
                coef[(j, i)] += d1[i] * W[i, j] + 0.5 * d2[i] * W[i, j] ** 2 * c[j]
            for l in range(j + 1, i):
                if v[j] * v[l] > 0:
                    coef[(j, l)] += g2[i] * W[i, j] * W[i, l]
                    if v[i] > 0:
                        coef[(j, l, i)] += d2[i] * W[i, j] * W[i, l]
    return -0.5 * sum(val ** 2 * np.prod(v[list(A)]) for A, val in coef.items())


def objective(W, h, clamp, u, order, activation, edges=None):
    """G_order of one item (Bhattacharyya & Keerthi, eqs. 42-51; entropy terms of clamped units
    vanish) on the net with its barren units deleted: the free units with no clamped
    descendant (found by ``reference_sjj.barren_mask`` over ``edges``, else the nonzero
    weights), which sum out of P(clamped units) exactly."""
    keep = ~barren_mask(W, np.isnan(clamp), edges)
    W, h, clamp, u = W[np.ix_(keep, keep)], h[keep], clamp[keep], u[keep]
    free, uu = _means(clamp, u)
    v = uu * (1.0 - uu)
    M = h + W @ uu
    a, b = log_f_derivatives(M, activation)
    G = neg_entropy(clamp, u) - float(np.sum(_mix(uu, a[0], b[0])))
    if order >= 12:
        V = (W ** 2) @ v
        G -= 0.5 * float(np.sum(_mix(uu, a[2], b[2]) * V))
    if order == 22:
        G += second_term_closed(W, h, clamp, u, activation)
    return G


def _taylor_energy(W, h, u, S, activation):
    """E_2(S) for every row of S: each unit's -ln P(S_i | parents) expanded to second order in
    X_i = sum_j W_ij (S_j - u_j) around Mbar_i = h_i + sum_j W_ij u_j."""
    M = h + W @ u
    a, b = log_f_derivatives(M, activation)
    X = (S - u) @ W.T
    on = a[0] + a[1] * X + 0.5 * a[2] * X ** 2
    off = b[0] + b[1] * X + 0.5 * b[2] * X ** 2
    with np.errstate(invalid="ignore"):
        return -np.sum(np.where(S > 0, on, 0.0) + np.where(S > 0, 0.0, off), axis=1)


def _product_states(clamp, u):
    """Every joint state of the units with 0 < u < 1 (others fixed), and its probability."""
    free, u = _means(clamp, u)
    idx = np.flatnonzero((u > 0) & (u < 1))
    K = idx.size
    bits = ((np.arange(2 ** K)[:, None] >> np.arange(K)) & 1).astype(np.float64)
    S = np.tile(u, (2 ** K, 1))
    S[:, idx] = bits
    p = np.prod(np.where(bits > 0, u[idx], 1.0 - u[idx]), axis=1)
    return S, p, idx, u


def second_term_bruteforce(W, h, clamp, u, activation):
    """-1/2 [Var(E_2) - sum_i Cov(E_2, S_i)^2 / (u_i (1 - u_i))] by enumeration."""
    S, p, idx, uu = _product_states(clamp, u)
    E = _taylor_energy(W, h, uu, S, activation)
    mean = np.sum(p * E)
    var = np.sum(p * (E - mean) ** 2)
    corr = 0.0
    for k in idx:
        cov = np.sum(p * (E - mean) * (S[:, k] - uu[k]))
        corr += cov ** 2 / (uu[k] * (1.0 - uu[k]))
    return -0.5 * (var - corr)


def mean_taylor_energy_bruteforce(W, h, clamp, u, activation):
    """<E_2> under the product distribution, by enumeration (= G12 minus the entropy part)."""
    S, p, _, uu = _product_states(clamp, u)
    return float(np.sum(p * _taylor_energy(W, h, uu, S, activation)))


def objective_batch(structure, w, h, net_of, clamp, u, order, activation):
    """``objective`` for every item of a batch (dense matrices from the structure)."""
    Wd = structure.unpack(w)
    edges = structure.unpack(np.ones((1, np.shape(w)[-1])))[0] != 0
    return np.array([
        objective(Wd[net_of[p]], h[net_of[p]], clamp[p], u[p], order, activation, edges)
        for p in range(clamp.shape[0])
    ])
