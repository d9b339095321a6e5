"""Learning DAG belief nets by gradient ascent on a mean-field objective ("sjj", "plefka11",
"plefka12", "plefka22"), for ``BeliefNet.fit`` and ``SigmoidBeliefNet.fit(method=...)``.

Each step solves the mean-field problem for a batch of patterns in one compiled, parallel
call (warm-started from each pattern's previous solution), then moves the weights and biases
along the gradient of the objective summed over the batch, divided by the batch size.  At a
solution the mean-field variables are stationary, so the partial derivatives in the
parameters are the total ones.  Noisy-OR parameters are kept feasible by projection (weights
>= 0, biases >= ``min_bias``).
"""
import numbers
import warnings

import numpy as np

from mfengine._validation import check_random_state, effective_n_threads

__all__ = ["fit_dag", "objective_gradient"]

#: Smallest noisy-OR bias kept during learning: a zero bias makes a unit with all parents off
#: unable to fire, and the bounds -inf.
MIN_NOISY_OR_BIAS = 1e-3


def objective_gradient(batch, w, clamp, net_of, method, mu, xi):
    """Gradient of the objective (the bound, or -G) in (w, h), per item."""
    s = batch.structure
    if method == "sjj":
        from mfengine.sbn import sjj

        return sjj.gradient(s, w, batch.h, net_of, clamp, mu, xi, activation=batch.activation)
    from mfengine.sbn import plefka

    gw, gh = plefka.gradient(s, w, batch.h, net_of, clamp, mu, int(method[-2:]), batch.activation)
    return -gw, -gh


def fit_dag(net, V, method="sjj", epochs=10, learning_rate=0.1, batch_size=100, tol=1e-6,
            max_sweeps=200, n_threads=None, random_state=None, progress=True, callback=None):
    """Train ``net`` (a BeliefNet, changed in place) on binary ``V``; returns the history.

    Returns
    -------
    history : ndarray (epochs,)
        The mean objective per pattern over each epoch, each pattern scored at its
        mean-field solution just before the update that used it.
    """
    from mfengine._progress import progress_bar
    from mfengine.inference import DAG_METHODS, dag_items, solve_items
    from mfengine.sbn.dag import BeliefNetBatch

    if method not in DAG_METHODS:
        raise ValueError(f"method must be one of {DAG_METHODS}, got {method!r}")
    if isinstance(epochs, bool) or not isinstance(epochs, numbers.Integral) or epochs < 1:
        raise ValueError(f"epochs must be a positive integer, got {epochs!r}")
    if not (isinstance(learning_rate, numbers.Real) and np.isfinite(learning_rate) and learning_rate > 0):
        raise ValueError(f"learning_rate must be a positive number, got {learning_rate!r}")
    if isinstance(batch_size, bool) or not isinstance(batch_size, numbers.Integral) or batch_size < 1:
        raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")
    batch, clamp, _, _, _ = dag_items(net, V)
    n = clamp.shape[0]
    if n == 0:
        raise ValueError("V has no patterns")
    rng = check_random_state(random_state)
    noisy = net.activation == "noisy_or"
    if noisy and method == "sjj":
        batch.h = np.maximum(batch.h, MIN_NOISY_OR_BIAS)
    s = batch.structure
    w = s.pack(batch.W)            # (1, nnz): one net
    n_threads = effective_n_threads(n_threads)
    mu_state = np.full(clamp.shape, 0.5)
    xi_state = None
    history = np.empty(epochs)
    n_batches = (n + batch_size - 1) // batch_size
    bar = progress_bar(total=epochs * n_batches, desc=f"fit ({method})", disable=not progress,
                       unit="batch")
    warned = False
    try:
        for epoch in range(epochs):
            order = rng.permutation(n)
            total = 0.0
            for a in range(0, n, batch_size):
                idx = order[a:a + batch_size]
                one = BeliefNetBatch.__new__(BeliefNetBatch)
                one.W, one.h, one.visible, one.activation, one.structure = (
                    None, batch.h, batch.visible, batch.activation, s)
                nt = max(1, min(n_threads, idx.size // 16))
                net_of = np.zeros(idx.size, dtype=np.intp)
                init_xi = None if xi_state is None else xi_state[idx]
                bound, mu, xi, _, _ = _solve(one, w, clamp[idx], net_of, method, tol, max_sweeps,
                                             nt, mu_state[idx], init_xi)
                mu_state[idx] = mu
                if xi is not None:
                    if xi_state is None:
                        xi_state = np.full((n, xi.shape[1]), -1.0 if noisy else 0.5)
                    xi_state[idx] = xi
                total += bound.sum()
                gw, gh = objective_gradient(one, w, clamp[idx], net_of, method, mu, xi)
                step = learning_rate / idx.size
                w[0] += step * gw.sum(axis=0)
                batch.h[0] += step * gh.sum(axis=0)
                if noisy:
                    np.maximum(w, 0.0, out=w)
                    np.maximum(batch.h, MIN_NOISY_OR_BIAS, out=batch.h)
                bar.update(1)
            history[epoch] = total / n
            bar.set_postfix(objective=f"{history[epoch]:.4f}")
            if not (history[epoch] <= 0.0) and not warned:
                # ln P(v) <= 0 for binary data: an objective above 0 (or NaN) means the
                # approximation has broken down, and its gradient no longer means anything
                warnings.warn(
                    f"fit(method={method!r}): the mean objective is {history[epoch]:.4g} nats per "
                    f"pattern in epoch {epoch}, above 0, which no log-probability of binary data "
                    "can be; the approximation has broken down (the Plefka objectives are not "
                    "bounds and can grow without limit with the weights). Lower the learning "
                    "rate or use method='sjj', a true lower bound.",
                    RuntimeWarning, stacklevel=3)
                warned = True
            if callback is not None:
                net._set_params(s.unpack(w[0]), batch.h[0])
                callback(epoch, net, history[epoch])
    finally:
        bar.close()
    net._set_params(s.unpack(w[0]), batch.h[0].copy())
    return history


def _solve(one, w, clamp, net_of, method, tol, max_sweeps, n_threads, init_mu, init_xi):
    s = one.structure
    if method == "sjj":
        from mfengine.inference import _inner_tol
        from mfengine.sbn import sjj

        return sjj.solve(s, w, one.h, net_of, clamp, tol=tol, inner_tol=_inner_tol(tol),
                         max_sweeps=max_sweeps, n_threads=n_threads, init_mu=init_mu,
                         init_xi=init_xi, activation=one.activation)
    from mfengine.sbn import plefka

    G, u, n_iter, conv = plefka.solve(s, w, one.h, net_of, clamp, int(method[-2:]),
                                      one.activation, tol=tol, max_iter=max_sweeps,
                                      n_threads=n_threads, init_u=init_mu)
    return -G, u, None, n_iter, conv
