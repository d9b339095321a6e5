"""Learning an NLGBN, on problem records and arrays: the starting parameters, the M-step of
variational EM (eqs. 14 and 15 of Frey & Hinton), the hooks that run EM through
:func:`mfengine._em.run_em`, and the stepwise update of ``partial_fit``.

Nothing here imports, receives or calls back into the estimator: each function takes the
network record (:class:`mfengine.nlgbn._problem.Network`), statistics and settings, and returns
new parameter arrays (the estimator assigns them).
"""
import warnings

import numpy as np

from mfengine._base import ConvergenceWarning, user_stacklevel, warn_unconverged
from mfengine._em import EMMonitor, StepFailed, run_em
from mfengine._progress import progress_bar
from mfengine.nlgbn._checks import _TINY
from mfengine.nlgbn._problem import Network
from mfengine.nlgbn._solve import HINT, partition_estep, prior_state, solve, warm_estep

__all__ = ["MIN_HIDDEN_VARIANCE", "initial_params", "floored_variances", "m_step",
           "batch_estep", "blend", "memory_estep", "partitions_estep", "em", "warn_undone",
           "warn_tol"]

#: Smallest model variance of a hidden unit after an M-step.
MIN_HIDDEN_VARIANCE = 1e-6


def initial_params(sizes, scale, min_variance, rng):
    """The parameters a model starts from: weights drawn from N(0, scale**2 / fan_in) (rng's
    draws, layer by layer), biases 0, variances 1 (visible ones ``max(1, min_variance)``)."""
    try:
        weights = [
            rng.normal(0.0, scale / np.sqrt(sizes[l]), size=(sizes[l + 1], sizes[l]))
            for l in range(len(sizes) - 1)
        ]
    except MemoryError:
        n_weights = sum(a * b for a, b in zip(sizes[:-1], sizes[1:]))
        raise MemoryError(f"sizes={list(sizes)}: the weights need {8 * n_weights} bytes") from None
    biases = [np.zeros(n) for n in sizes]
    variances = [np.ones(n) for n in sizes]
    variances[-1][:] = max(1.0, min_variance)
    return weights, biases, variances


def floored_variances(net, min_variance):
    """The variances of ``net`` raised to their floors (the M-step's constraint set, so that no
    step can lower the bound), or None when none is below its floor."""
    floors = [MIN_HIDDEN_VARIANCE] * (len(net.sizes) - 1) + [min_variance]
    if any(np.any(v < f) for v, f in zip(net.variances, floors)):
        return [np.maximum(v, f) for v, f in zip(net.variances, floors)]
    return None


def m_step(net, st, min_variance):
    """Weights and biases by eq. 14 (one SVD least-squares solve per layer, shared by its
    units), then the model variances by eq. 15 with the mean squared error evaluated at the
    new weights; ``st`` holds the sufficient statistics averaged over patterns (laid out as
    ``net.flat()`` says) and ``min_variance`` is the visible variances' floor.  Returns the new
    ``(weights, biases, variances)`` lists, or raises ValueError if any is not finite."""
    sizes = net.sizes
    U = sum(sizes)
    offset = np.concatenate([[0], np.cumsum(sizes)])
    mean_mu, mean_mu2 = st[:U], st[U:2 * U]
    mean_s2, mean_v = st[2 * U:3 * U], st[3 * U:4 * U]
    flat_soff = net.flat()["soff"]
    L = len(sizes)
    new_b = [None] * L
    new_w = [None] * (L - 1)
    new_v = [None] * L
    sl = slice(offset[0], offset[1])
    with np.errstate(over="ignore", invalid="ignore"):
        new_b[0] = mean_mu[sl].copy()
        new_v[0] = mean_mu2[sl] - mean_mu[sl] ** 2 + mean_s2[sl]
        for l in range(L - 1):
            P, C = sizes[l], sizes[l + 1]
            base = flat_soff[l]
            AA = st[base:base + (P + 1) ** 2].reshape(P + 1, P + 1)
            AA = 0.5 * (AA + AA.T)
            CC = st[base + (P + 1) ** 2:base + (P + 1) ** 2 + C * (P + 1)].reshape(C, P + 1)
            bvec = np.concatenate([[0.0], mean_v[offset[l]:offset[l + 1]]])
            K = AA + np.diag(bvec)
            if not (np.all(np.isfinite(K)) and np.all(np.isfinite(CC))):
                raise ValueError("the sufficient statistics are not finite")
            # both sides scaled by the same power of two (exact): LAPACK's own scaling
            # overflows for statistics near 1e300 (data near 1e150)
            e = -np.frexp(max(np.abs(K).max(), np.abs(CC).max(), _TINY))[1]
            Wt = np.linalg.lstsq(np.ldexp(K, e), np.ldexp(CC.T, e), rcond=None)[0]   # (P + 1, C)
            new_b[l + 1] = Wt[0].copy()
            new_w[l] = np.ascontiguousarray(Wt[1:].T)
            cs = slice(offset[l + 1], offset[l + 2])
            # E[(mu_i - n_i)^2] at the new weights, + sum_k w_ik^2 E[v_k] + E[sigma_i^2]
            mse = mean_mu2[cs] - 2.0 * np.einsum("kc,ck->c", Wt, CC) + np.einsum("kc,kj,jc->c", Wt, AA, Wt)
            new_v[l + 1] = mse + (Wt * Wt * bvec[:, None]).sum(axis=0) + mean_s2[cs]
    for l in range(L):
        floor = min_variance if l == L - 1 else MIN_HIDDEN_VARIANCE
        new_v[l] = np.maximum(new_v[l], floor)
    for l in range(L):
        finite = np.all(np.isfinite(new_b[l])) and np.all(np.isfinite(new_v[l]))
        if l < L - 1:
            finite = finite and np.all(np.isfinite(new_w[l]))
        if not finite:
            raise ValueError("the M-step produced parameters that are not finite")
    return new_w, new_b, new_v


def batch_estep(net, X, miss, p):
    """``partial_fit``'s E-step on a mini-batch, from the prior means: ``(bound, converged,
    statistics averaged over the batch)``; ``p`` as for :func:`memory_estep`."""
    flat = net.flat()
    mu, lv = prior_state(net, X.shape[0])
    bound, _, conv, stats = solve(flat, X, mu, lv, p["infer_tol"], p["infer_max_iter"],
                                  p["n_threads"], want_stats=True, miss=miss)
    return bound, conv, stats.sum(axis=0) / X.shape[0]


def blend(old, batch, t):
    """Stepwise EM (Cappé & Moulines): the running statistics ``old`` of ``t`` batches moved
    towards the new batch's, ``(1 - eta) old + eta batch`` with ``eta = (t + 1) ** -0.6``."""
    eta = (t + 1.0) ** -0.6
    return (1.0 - eta) * old + eta * batch


def _solve_settings(p):
    """The per-pattern solve's settings among fit's checked hyperparameters ``p``."""
    return dict(tol=p["infer_tol"], max_sweeps=p["infer_max_iter"], n_threads=p["n_threads"])


def memory_estep(X, miss, p):
    """``em``'s E-step on the array in memory (the state: every pattern's posterior):
    ``estep(net, state) -> (mean bound, summed statistics, converged, new state)``.
    ``p``: fit's checked hyperparameters (``infer_tol``, ``infer_max_iter``, ``n_threads``)."""
    settings = _solve_settings(p)

    def estep(net, state):
        bound, conv, stats, state = warm_estep(net, X, miss, state, **settings)
        return float(bound.mean()), stats.sum(axis=0), conv, state

    return estep


def partitions_estep(parts, p):
    """``em``'s E-step over the row blocks of a dask array (``parts``: a
    ``mfengine._dask.Partitions``), each run where its block is
    (:func:`mfengine.nlgbn._solve.partition_estep`; the state: the blocks' posteriors, kept
    on the workers); the bounds and statistics are summed on the client.  ``p``: as for
    :func:`memory_estep`."""
    n = parts.shape[0]
    settings = _solve_settings(p)

    def estep(net, states):
        outs, states = parts.step(partition_estep, (net, settings), None, states)
        outs = [o for _, o in outs]
        bound = sum(o[0] for o in outs)
        stats = np.sum([o[1] for o in outs], axis=0)
        return bound / n, stats, np.concatenate([o[2] for o in outs]), states

    return estep


def em(estep, net, params, n, max_iter, tol, min_variance, progress, desc, drawn, weight_scale):
    """Variational EM through :func:`mfengine._em.run_em`, from the network ``net`` (whose
    parameters are ``params`` = (weights, biases, variances), as the estimator holds them).

    ``estep(net, state)`` returns ``(mean bound per pattern, statistics summed over the
    patterns, converged, new state)`` for the network ``net``, warm-started from ``state``
    (None: the prior means), leaving ``state`` itself unchanged (an undone iteration goes back
    to it): :func:`memory_estep` or :func:`partitions_estep`.  ``n``: the number of patterns;
    ``drawn``: the parameters were drawn by this fit with ``weight_scale`` (an overflow in the
    first E-step then names it).

    Returns ``(params, history, stats, converged, state, undone, met_tol)``: the parameters
    of the last E-step kept (an undone iteration's are dropped), the mean bound of every kept
    E-step, that E-step's statistics averaged over the patterns, its convergence flags and
    state, why the last iteration was undone (a list, empty if none was) and whether ``tol``
    was met; the estimator assigns them and warns (:func:`warn_undone`, :func:`warn_tol`).
    """
    undone = []          # why an iteration was undone (a drop of the bound, an overflow)

    def expectation(params):
        net, state, _ = params
        try:
            bound, stats, conv, new_state = estep(net, state)
        except ValueError as exc:
            if state is not None:
                raise StepFailed(f"a number was not finite ({exc})") from None
            if drawn and ("too extreme" in str(exc) or "overflows" in str(exc)):
                raise ValueError(f"{exc}; the initial parameters were drawn with weight_scale="
                                 f"{weight_scale!r}: lower it") from None
            raise
        return bound, (stats, conv, new_state)

    def maximisation(params, stats):
        net = params[0]
        try:
            new = m_step(net, stats[0] / n, min_variance)
            return Network(*new, net.units), stats[2], new
        except ValueError as exc:
            raise StepFailed(f"a number was not finite ({exc})") from None

    def fell(saved, params, value, stats):
        drop = saved[1] - value
        if drop > 1e-9 * max(1.0, abs(saved[1])):
            undone.append(f"the bound fell by {drop:.3g} nats per pattern")
        # else float64 cannot raise it further: converged
        return saved[0], saved[1], saved[2], True

    monitor = EMMonitor(tol, strict=False)
    with progress_bar(total=max_iter, desc=desc, disable=not progress) as bar:
        def on_record(value, stats):
            if len(monitor.history) > 1:
                bar.update(1)
                bar.set_postfix(bound=f"{value:.3f}", refresh=False)  # no print before the delay

        params, _, (kept_stats, conv, state) = run_em(
            (net, None, params), expectation, maximisation, max_iter, monitor, fell=fell,
            on_record=on_record)
    if monitor.stopped not in (None, "tol", "fell"):
        undone.append(monitor.stopped)
    met_tol = monitor.converged and not undone
    return params[2], monitor.history, kept_stats / n, conv, state, undone, met_tol


def warn_undone(undone, history):
    """Warn that the last EM iteration was undone (``undone``: why, first reason first)."""
    if undone:
        it = len(history) - 1
        warnings.warn(
            f"NLGBN.fit: EM iteration {it + 1} was undone because {undone[0]}; the "
            f"model keeps the parameters of iteration {it} (X or the parameters "
            "may be too extreme for float64)",
            ConvergenceWarning, stacklevel=user_stacklevel(),
        )


def warn_tol(tol, max_iter, met_tol, conv):
    """Warn that EM stopped on ``max_iter`` before meeting ``tol``, and that the last E-step
    left patterns unconverged (``conv``: their flags)."""
    if tol is not None and not met_tol and max_iter > 0:
        warnings.warn(
            f"NLGBN.fit: the bound still rose by more than tol={tol:g} nats per pattern "
            f"after max_iter={max_iter} EM iterations; raise max_iter or tol",
            ConvergenceWarning, stacklevel=user_stacklevel(),
        )
    warn_unconverged(conv, "NLGBN.fit (the last E-step)", HINT)
