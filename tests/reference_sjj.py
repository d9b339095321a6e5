"""Slow, obviously-right references for the SJJ bounds, from dense weight matrices."""
import itertools

import numpy as np


def _lmoment(mu_par, w_row, a):
    """ln <e^{a sum_j w_j S_j}> under independent S_j ~ Bernoulli(mu_j)."""
    return float(np.sum(np.log(1.0 - mu_par + mu_par * np.exp(a * w_row))))


def sjj_sigmoid(W, h, mu, xi, free):
    """L = sum_free H(mu) + sum_i [(mu_i - xi_i) <z_i> - ln(<e^{-xi z_i}> + <e^{(1-xi) z_i}>)]."""
    n = len(h)
    total = 0.0
    for i in range(n):
        z = h[i] + W[i] @ mu
        la = -xi[i] * h[i] + _lmoment(mu, W[i], -xi[i])
        lb = (1.0 - xi[i]) * h[i] + _lmoment(mu, W[i], 1.0 - xi[i])
        total += (mu[i] - xi[i]) * z - np.logaddexp(la, lb)
        if free[i] and 0.0 < mu[i] < 1.0:
            total -= mu[i] * np.log(mu[i]) + (1.0 - mu[i]) * np.log(1.0 - mu[i])
    return total


def sjj_noisy_or(W, h, mu, Q, free):
    """L = sum_free H(mu) + sum_i [-(1 - mu_i) <z_i> + mu_i sum_j Q_ij <g(h_i + W_ij S_j / Q_ij)>]
    with g(x) = ln(1 - e^{-x}) (a unit without parents: mu_i g(h_i)); Q is (n, n) with rows
    on the simplex over each unit's parents."""
    g = lambda x: np.log(-np.expm1(-x))
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
                    else:
                        avg += 0.0
                avg += (1.0 - Q[i, par].sum()) * g(h[i])  # rows that do not sum to 1
                total += mu[i] * avg
        if free[i] and 0.0 < mu[i] < 1.0:
            total -= mu[i] * np.log(mu[i]) + (1.0 - mu[i]) * np.log(1.0 - mu[i])
    return total


def mean_field_elbo(net, mu, free):
    """The exact mean-field objective <ln P(S)>_q + H(q) for a factorised q with means ``mu``
    (clamped units hold their 0/1 values), by enumerating every state of the free units."""
    free_idx = np.flatnonzero(free)
    total = 0.0
    for bits in itertools.product([0.0, 1.0], repeat=free_idx.size):
        S = mu.copy()
        S[free_idx] = bits
        p = np.prod(np.where(np.array(bits) > 0, mu[free_idx], 1.0 - mu[free_idx]))
        if p > 0:
            total += p * (net.log_joint(S[None])[0] - np.log(p))
    return total
