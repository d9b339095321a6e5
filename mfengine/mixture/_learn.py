"""EM for a Bernoulli mixture: the E-step, the MAP M-step and the start, as functions of
arrays and :class:`~mfengine.mixture._problem.MixtureParams` records; the loop is
:func:`mfengine._em.run_em`.  The estimators set their attributes from the :class:`EMFit`
that :func:`fit_em` returns."""
from dataclasses import dataclass

import numpy as np
from scipy.special import logsumexp

from mfengine._em import EMMonitor, run_em
from mfengine.mixture._checks import EPS
from mfengine.mixture._problem import MixtureParams

__all__ = ["initial_params", "log_prior", "e_step", "m_step", "EMFit", "fit_em"]


def initial_params(X, K, rng):
    """K distinct patterns (with repeats only when n < K), blended with the mean; uniform
    weights."""
    n = X.shape[0]
    idx = rng.choice(n, size=K, replace=n < K)
    means = np.clip(0.5 * X[idx] + 0.5 * X.mean(axis=0), EPS, 1.0 - EPS)
    return MixtureParams(means, np.full(K, 1.0 / K))


def log_prior(params, alpha):
    """The log of the Beta(1 + alpha) and Dirichlet(1 + alpha) priors (up to a constant)."""
    if alpha == 0.0:
        return 0.0
    means, weights = params.means, params.weights
    return alpha * (np.sum(np.log(means)) + np.sum(np.log1p(-means)) + np.sum(np.log(weights)))


def e_step(X, params, alpha):
    """The penalised objective per pattern (mean log-likelihood plus log prior / n) and the
    statistics of the M-step: ``(objective, (joint, log_px, ll))``, the (n, K) log-joint of
    every pattern and component, each pattern's ln P(x), and their mean."""
    log_p, log_q = np.log(params.means), np.log1p(-params.means)
    joint = X @ log_p.T + (1.0 - X) @ log_q.T + np.log(params.weights)
    log_px = logsumexp(joint, axis=1)
    ll = float(log_px.mean())
    return ll + log_prior(params, alpha) / X.shape[0], (joint, log_px, ll)


def m_step(X, params, stats, alpha):
    """MAP under the Beta / Dirichlet priors from the E-step's statistics."""
    n, K = X.shape[0], params.n_components
    joint, log_px, _ = stats
    resp = np.exp(joint - log_px[:, None])
    Nk = resp.sum(axis=0)
    p = (resp.T @ X + alpha) / (Nk[:, None] + 2.0 * alpha)
    # A component with no responsibility and alpha=0 keeps its old means.
    empty = Nk + 2.0 * alpha <= 0.0
    if np.any(empty):
        p[empty] = params.means[empty]
    weights = np.maximum((Nk + alpha) / (n + K * alpha), 1e-300)
    return MixtureParams(np.clip(p, EPS, 1.0 - EPS), weights / weights.sum())


@dataclass(frozen=True, eq=False)
class EMFit:
    """What :func:`fit_em` learned: the parameters, the EM iterations run, whether ``tol`` was
    met, and the mean log-likelihood and the penalised objective at the start of each
    iteration and after the last."""

    params: MixtureParams
    n_iter: int
    converged: bool
    log_likelihood_history: np.ndarray
    history: np.ndarray


def fit_em(X, K, max_iter, alpha, tol, rng):
    """EM for a Bernoulli mixture on binary ``X`` (:func:`mfengine._em.run_em`)."""
    ll_hist = []

    def on_record(value, stats):
        _, _, ll = stats
        ll_hist.append(ll)

    monitor = EMMonitor(tol)
    params, _, _ = run_em(
        initial_params(X, K, rng), lambda params: e_step(X, params, alpha),
        lambda params, stats: m_step(X, params, stats, alpha), max_iter, monitor,
        fell=lambda saved, params, value, stats: (params, value, stats, False),
        on_record=on_record)
    return EMFit(params, len(monitor.history) - 1, monitor.converged, np.array(ll_hist),
                 np.array(monitor.history))
