"""The Bernoulli mixtures' computations on a :class:`~mfengine.mixture._problem.MixtureParams`:
arrays in, arrays out (NumPy, vectorised over patterns and components, in log space)."""
import numpy as np
from scipy.special import logsumexp

__all__ = ["log_prob", "draw"]


def log_prob(X, observed, params):
    """(n_samples,) ln P(x_observed) under one mixture (``observed``: the observed-mask as
    float64, None when nothing is missing; missing pixels drop out of each product)."""
    log_p, log_q = np.log(params.means), np.log1p(-params.means)
    if observed is None:
        joint = X @ log_p.T + (1.0 - X) @ log_q.T
    else:
        joint = X @ log_p.T + (observed - X) @ log_q.T
    with np.errstate(divide="ignore"):
        return logsumexp(joint + np.log(params.weights), axis=1)


def draw(params, n, rng):
    """``n`` binary patterns (float64 0/1) drawn from the mixture."""
    comp = rng.choice(params.n_components, size=n, p=params.weights)
    return (rng.random((n, params.means.shape[1])) < params.means[comp]).astype(np.float64)
