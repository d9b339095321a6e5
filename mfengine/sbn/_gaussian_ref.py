"""The Gaussian-approximated bound of a layered sigmoid net and its gradient, in NumPy
(Saul & Jordan, eqs. 10-11 and 24): arrays in, arrays out.  ``evaluate_bound`` and
``gradient`` of ``SigmoidBeliefNet`` are these functions on checked arguments; the compiled
kernel computes the same quantities (its tests hold it to these)."""
import numpy as np

__all__ = ["gaussian_bound", "gaussian_gradient"]


def _sigmoid(x):
    return np.exp(-np.logaddexp(0.0, -x))


def _entropy(p):
    with np.errstate(divide="ignore", invalid="ignore"):
        h = -p * np.log(p) - (1.0 - p) * np.log1p(-p)
    return np.where((p <= 0.0) | (p >= 1.0), 0.0, h)


def gaussian_bound(weights, biases, V, miss, mu, xi):
    """The bound L(mu, xi) per pattern of the net (``weights``, ``biases``) on checked data
    ``V`` (missing entries marked by ``miss``, left out of the bound), at checked means
    ``mu`` and ``xi`` (one (n, sizes[l]) array per layer; the visible ``mu`` is the data)."""
    sizes = tuple(b.shape[0] for b in biases)
    mu = mu[:-1] + [np.where(np.isfinite(V), V, 0.0)]
    total = np.zeros(V.shape[0])
    for l in range(len(sizes)):
        if l == 0:
            m = np.broadcast_to(biases[0], mu[0].shape)
            s = np.zeros_like(m)
        else:
            m = mu[l - 1] @ weights[l - 1].T + biases[l]
            s = (mu[l - 1] * (1.0 - mu[l - 1])) @ (weights[l - 1] ** 2).T
        term = mu[l] * m - 0.5 * xi[l] ** 2 * s - np.logaddexp(0.0, m + (0.5 - xi[l]) * s)
        if l == len(sizes) - 1:
            if miss is not None:
                term = term * (1.0 - miss)
        else:
            term = term + _entropy(mu[l])
        total += term.sum(axis=1)
    return total


def gaussian_gradient(weights, biases, V, miss, mu, xi):
    """The gradient of the summed bound in the weights and biases at the solution (``mu``,
    ``xi``), without assuming xi at its fixed point: dL/dh_i = mu_i - sig_i,
    dL/dJ_ij = (mu_i - sig_i) mu_j - J_ij mu_j (1 - mu_j) (xi_i^2 + (1 - 2 xi_i) sig_i),
    with sig_i = sigmoid(m_i + (1/2 - xi_i) s_i).  Returns (grad_weights, grad_biases)."""
    sizes = tuple(b.shape[0] for b in biases)
    mu = list(mu[:-1]) + [np.where(np.isfinite(V), V, 0.0)]
    gW, gb = [], []
    for l in range(len(sizes)):
        if l == 0:
            m = np.broadcast_to(biases[0], mu[0].shape)
            s = 0.0
        else:
            var = mu[l - 1] * (1.0 - mu[l - 1])
            m = mu[l - 1] @ weights[l - 1].T + biases[l]
            s = var @ (weights[l - 1] ** 2).T
        sig = _sigmoid(m + (0.5 - xi[l]) * s)
        delta = mu[l] - sig
        if l == len(sizes) - 1 and miss is not None:
            obs = 1.0 - miss
            delta = delta * obs
        gb.append(delta.sum(axis=0))
        if l > 0:
            q = xi[l] ** 2 + (1.0 - 2.0 * xi[l]) * sig
            if l == len(sizes) - 1 and miss is not None:
                q = q * obs
            gW.append(delta.T @ mu[l - 1] - weights[l - 1] * (q.T @ var))
    return gW, gb
