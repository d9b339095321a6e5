"""Slow, obviously-right references for the SJJ bounds, from dense weight matrices."""
import decimal
import itertools
from decimal import Decimal

import numpy as np


def _lmoment(mu_par, w_row, a):
    """ln <e^{a sum_j w_j S_j}> under independent S_j ~ Bernoulli(mu_j)."""
    return float(np.sum(np.log(1.0 - mu_par + mu_par * np.exp(a * w_row))))


def barren_mask(W, free, edges=None):
    """Free units with no clamped descendant (every child barren), found by brute force over
    the descendants (independent of the kernel's reverse pass).  ``W[i, j]``: j -> i; the
    edges are ``edges`` (a boolean mask, the net's structure) or else the nonzero weights."""
    n = len(free)
    reach = (np.asarray(W) != 0 if edges is None else np.asarray(edges)).T.astype(int)
    desc = reach.copy()
    for _ in range(n):
        desc = np.minimum(desc + desc @ reach, 1)
    free = np.asarray(free, dtype=bool)
    return np.array([free[j] and not np.any(desc[j] & ~free) for j in range(n)], dtype=bool)


def sjj_sigmoid(W, h, mu, xi, free, edges=None):
    """L = sum_free H(mu) + sum_i [(mu_i - xi_i) <z_i> - ln(<e^{-xi z_i}> + <e^{(1-xi) z_i}>)],
    the sums over the units that are not barren (a barren unit sums out of P exactly; edges
    as in ``barren_mask``)."""
    n = len(h)
    barren = barren_mask(W, free, edges)
    total = 0.0
    for i in range(n):
        if barren[i]:
            continue
        z = h[i] + W[i] @ mu
        la = -xi[i] * h[i] + _lmoment(mu, W[i], -xi[i])
        lb = (1.0 - xi[i]) * h[i] + _lmoment(mu, W[i], 1.0 - xi[i])
        total += (mu[i] - xi[i]) * z - np.logaddexp(la, lb)
        if free[i] and 0.0 < mu[i] < 1.0:
            total -= mu[i] * np.log(mu[i]) + (1.0 - mu[i]) * np.log(1.0 - mu[i])
    return total


# ---------------------------------------------------------------------------- 60 digits
def _context():
    ctx = decimal.Context(prec=60, Emax=decimal.MAX_EMAX, Emin=decimal.MIN_EMIN)
    ctx.traps[decimal.Underflow] = False
    ctx.traps[decimal.Subnormal] = False
    ctx.traps[decimal.Inexact] = False
    ctx.traps[decimal.Rounded] = False
    return ctx


def _dl1p(m, x):
    """ln(1 - m + m e^x) in Decimal arithmetic, without overflow of e^x."""
    if m == 0:
        return Decimal(0)
    if m == 1:
        return x
    if x > 0:
        return x + (m + (1 - m) * (-x).exp()).ln()
    return (1 - m + m * x.exp()).ln()


def _dlse(a, b):
    big, small = (a, b) if a >= b else (b, a)
    return big + (1 + (small - big).exp()).ln()


def sjj_sigmoid_exact(W, h, mu, xi, free, edges=None):
    """The SJJ bound of ``sjj_sigmoid`` evaluated in 60-digit decimal arithmetic from the
    exact values of the doubles given: the reference for the kernel's rounding at any weight
    scale (barren units left out, as there).  Returns a Decimal."""
    D = lambda x: Decimal(float(x))   # noqa: E731 - the exact value of a double
    barren = barren_mask(W, free, edges)
    with decimal.localcontext(_context()):
        total = Decimal(0)
        for i in range(len(h)):
            if barren[i]:
                continue
            par = np.flatnonzero(W[i])
            m = [D(mu[j]) for j in par]
            w = [D(W[i, j]) for j in par]
            x, hi, mi = D(xi[i]), D(h[i]), D(mu[i])
            z = hi + sum((a * b for a, b in zip(w, m)), Decimal(0))
            la = -x * hi + sum((_dl1p(mj, -x * wj) for mj, wj in zip(m, w)), Decimal(0))
            lb = (1 - x) * hi + sum((_dl1p(mj, (1 - x) * wj) for mj, wj in zip(m, w)), Decimal(0))
            total += (mi - x) * z - _dlse(la, lb)
            if free[i] and 0 < mi < 1:
                total -= mi * mi.ln() + (1 - mi) * (1 - mi).ln()
        return +total


def sjj_noisy_or(W, h, mu, Q, free):
    """L = sum_free H(mu) + sum_i [-(1 - mu_i) <z_i> + mu_i sum_j Q_ij <g(h_i + W_ij S_j / Q_ij)>]
    with g(x) = ln(1 - e^{-x}) (a unit without parents: mu_i g(h_i)); Q is (n, n) with rows
    on the simplex over each unit's parents."""
    g = lambda x: np.log(-np.expm1(-x))   # noqa: E731
    n = len(h)
    total = 0.0
    for i in range(n):
        z = h[i] + W[i] @ mu
        total -= (1.0 - mu[i]) * z
        par = np.flatnonzero(W[i])
        if mu[i] > 0:
            if par.size == 0:
                total += mu[i] * g(h[i])
            else:
                avg = 0.0
                for j in par:
                    if Q[i, j] > 0:
                        avg += Q[i, j] * (mu[j] * g(h[i] + W[i, j] / Q[i, j]) + (1 - mu[j]) * g(h[i]))
                avg += (1.0 - Q[i, par].sum()) * g(h[i])  # rows that do not sum to 1
                total += mu[i] * avg
        if free[i] and 0.0 < mu[i] < 1.0:
            total -= mu[i] * np.log(mu[i]) + (1.0 - mu[i]) * np.log(1.0 - mu[i])
    return total


def mean_field_elbo(log_joint, mu, free):
    """The exact mean-field objective <ln P(S)>_q + H(q) for a factorised q with means ``mu``
    (clamped units hold their 0/1 values), by enumerating every state of the free units;
    ``log_joint`` maps an (n_states, n_units) array of 0/1 to ln P of each state."""
    free_idx = np.flatnonzero(free)
    total = 0.0
    for bits in itertools.product([0.0, 1.0], repeat=free_idx.size):
        S = mu.copy()
        S[free_idx] = bits
        p = np.prod(np.where(np.array(bits) > 0, mu[free_idx], 1.0 - mu[free_idx]))
        if p > 0:
            total += p * (log_joint(S[None])[0] - np.log(p))
    return total


def log_joint_dense(W, h, activation="sigmoid"):
    """ln P(S) of complete states S (rows) of the net (W, h), as a function."""
    def f(S):
        z = S @ W.T + h
        if activation == "sigmoid":
            l1, l0 = -np.logaddexp(0.0, -z), -np.logaddexp(0.0, z)
        else:
            with np.errstate(divide="ignore"):
                l1, l0 = np.log(-np.expm1(-z)), -z
        return np.sum(np.where(S > 0, l1, 0.0) + np.where(S > 0, 0.0, l0), axis=-1)
    return f
