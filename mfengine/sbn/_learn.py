"""Learning belief nets by gradient ascent on a DAG mean-field objective ("sjj", "plefka11",
"plefka12", "plefka22"), on problem records: the training loop of ``BeliefNet.fit`` and of
``SigmoidBeliefNet.fit`` with a DAG method.

Each step solves the mean-field problem for a batch of patterns in one compiled, parallel
call (warm-started from each pattern's previous solution), then moves the weights and biases
along the gradient of the objective summed over the batch, divided by the batch size.  At a
solution the mean-field variables are stationary, so the partial derivatives in the
parameters are the total ones.  Noisy-OR parameters are kept feasible by projection (weights
>= 0, biases >= ``MIN_NOISY_OR_BIAS``).

Arrays in, arrays out: the loop takes a ``DagNets`` record and the items of the data
(:mod:`mfengine.sbn._problem`) and returns the learned weights and biases with the history;
the estimator sets its attributes from them.  The only way back to the caller during the
loop is ``on_epoch``, given when the user asked for a callback.
"""
import warnings

import numpy as np

from mfengine._base import user_stacklevel
from mfengine._validation import LEARNING_RATE, MAX_ITER_LIMIT, check_int, check_value
from mfengine.sbn._solve import solve_items

__all__ = ["MIN_NOISY_OR_BIAS", "schedule", "stop", "objective_gradient", "fit_items", "fit_partitions",
           "ascend", "check_partition", "partition_gradient", "initial_xi"]

#: Smallest noisy-OR bias kept during learning: a zero bias makes a unit with all parents off
#: unable to fire, and the bounds -inf.
MIN_NOISY_OR_BIAS = 1e-3


def schedule(max_iter, learning_rate, default):
    """One learning rate per epoch: ``learning_rate`` repeated, or the given sequence (one per
    epoch, as many as ``max_iter``), or ``default`` (a rate, or a pair (first half, second
    half))."""
    max_iter = check_int(max_iter, "max_iter", 1, MAX_ITER_LIMIT)
    check_value(learning_rate, "learning_rate", [LEARNING_RATE])
    if learning_rate is None:
        if isinstance(default, tuple):
            half = (max_iter + 1) // 2
            return [default[0]] * half + [default[1]] * (max_iter - half)
        return [default] * max_iter
    if np.ndim(learning_rate) == 0:
        return [float(learning_rate)] * max_iter
    rates = [float(r) for r in learning_rate]
    if len(rates) != max_iter:
        raise ValueError(f"learning_rate holds {len(rates)} per-epoch rates but max_iter={max_iter}")
    return rates


def stop(history, tol):
    """Whether the last epoch's objective changed by less than ``tol`` from the one before."""
    return tol is not None and len(history) >= 2 and abs(history[-1] - history[-2]) < tol


def objective_gradient(nets, w, h, clamp, net_of, method, mu, xi):
    """Gradient of the objective (the bound, or -G) in (w, h), per item."""
    s = nets.structure
    if method == "sjj":
        from mfengine.sbn import sjj

        return sjj.gradient(s, w, h, net_of, clamp, mu, xi, activation=nets.activation)
    from mfengine.sbn import plefka

    gw, gh = plefka.gradient(s, w, h, net_of, clamp, mu, int(method[-2:]), nets.activation)
    return -gw, -gh


def initial_xi(nets, n, width):
    """The first variational parameters of the sjj solve for ``n`` patterns: each noisy-OR
    unit's q uniform over its parents; 0.5 for sigmoid units."""
    xi = np.empty((n, width))
    if nets.noisy_or:
        k = np.diff(nets.structure.par_ptr)
        xi[:] = np.repeat(1.0 / np.maximum(k, 1), k)
    else:
        xi[:] = 0.5
    return xi


def fit_items(nets, items, method, itol, imax, rates, batch_size, tol, progress, rng, partial,
              n_threads, desc, on_epoch=None):
    """Train the weights and biases of ``nets`` (one net) on ``items``; returns
    ``(w, h, history, converged)`` as :func:`ascend` does.  Each pattern's solve starts from
    its previous solution (its means, and the sjj solve's variational parameters)."""
    clamp = items.clamp
    n = clamp.shape[0]
    mu_state = np.full(clamp.shape, 0.5)
    xi_state = None

    def batch_gradient(idx, w, h):
        nonlocal xi_state
        nt = max(1, min(n_threads, idx.size // 16))
        net_of = np.zeros(idx.size, dtype=np.intp)
        init_xi = None if xi_state is None else xi_state[idx]
        bound, mu, xi, _, conv = solve_items(nets, w, h, clamp[idx], net_of, method, itol, imax,
                                             nt, mu_state[idx], None, init_xi)
        gw, gh = objective_gradient(nets, w, h, clamp[idx], net_of, method, mu, xi)
        mu_state[idx] = mu
        if xi is not None:
            if xi_state is None:
                xi_state = initial_xi(nets, n, xi.shape[1])
            xi_state[idx] = xi
        return gw.sum(axis=0), gh.sum(axis=0), bound.sum(), np.asarray(conv, dtype=bool)

    return ascend(nets, nets.w.copy(), nets.h.copy(), n, method, rates, batch_size, tol,
                  progress, rng, partial, batch_gradient, desc, on_epoch)


def ascend(nets, w, h, n, method, rates, batch_size, tol, progress, rng, partial,
           batch_gradient, desc, on_epoch=None):
    """The one training loop: epochs of mini-batch gradient ascent on the packed weights
    ``w`` (1, n_weights) and biases ``h`` (1, n_units), updated in place.  Returns
    ``(w, h, history, converged)``: the learned parameters, the mean objective per pattern of
    each epoch (each pattern scored at its mean-field solution just before the update that
    used it), and every solve's convergence flag.

    ``batch_gradient(idx, w, h)`` solves the patterns ``idx`` at the current parameters and
    returns their summed weight and bias gradients, summed objective and per-pattern
    convergence flags: in memory (:func:`fit_items`) or summed over partitions (a dask
    array).  ``partial``: one pass in the order of the patterns.  ``on_epoch(epoch, w, h,
    mean_objective)``, when given, runs after each epoch and returns the parameters to go on
    from (the user's callback may change them)."""
    from mfengine._progress import progress_bar

    noisy = nets.noisy_or
    if noisy and method == "sjj":
        np.maximum(h, MIN_NOISY_OR_BIAS, out=h)
    history = []
    converged = []
    n_batches = (n + batch_size - 1) // batch_size
    bar = progress_bar(total=len(rates) * n_batches, desc=desc, disable=not progress,
                       unit="batch")
    warned = False
    try:
        for epoch, lr in enumerate(rates):
            order = np.arange(n) if partial else rng.permutation(n)
            total = 0.0
            for a in range(0, n, batch_size):
                idx = order[a:a + batch_size]
                try:
                    gw, gh, bound, conv = batch_gradient(idx, w, h)
                except OverflowError as exc:
                    raise OverflowError(
                        f"fit(method={method!r}) stopped in epoch {epoch}: the weights W (given, "
                        f"or learned so far with learning_rate={lr}) leave the range of the "
                        f"objective; use smaller weights, a lower learning_rate or "
                        f"method='sjj'. {exc}") from exc
                converged.append(conv)
                total += bound
                step = lr / idx.size
                w[0] += step * gw
                h[0] += step * gh
                if noisy:
                    np.maximum(w, 0.0, out=w)
                    np.maximum(h, MIN_NOISY_OR_BIAS, out=h)
                bar.update(1)
            history.append(total / n)
            bar.set_postfix(objective=f"{history[-1]:.4f}")
            if not (history[-1] <= 0.0) and not warned:
                # ln P(v) <= 0 for binary data: an objective above 0 (or NaN) means the
                # approximation has broken down, and its gradient no longer means anything
                warnings.warn(
                    f"fit(method={method!r}): the mean objective is {history[-1]:.4g} nats per "
                    f"pattern in epoch {epoch}, above 0, which no log-probability of binary data "
                    "can be; the approximation has broken down (the Plefka objectives are not "
                    "bounds and can grow without limit with the weights). Lower the learning "
                    "rate or use method='sjj', a true lower bound.",
                    RuntimeWarning, stacklevel=user_stacklevel())
                warned = True
            if on_epoch is not None:
                w, h = on_epoch(epoch, w, h, history[-1])
            if stop(history, tol):
                break
    finally:
        bar.close()
    return w, h, history, np.concatenate(converged) if converged else np.zeros(0, dtype=bool)


def fit_partitions(nets, parts, check, method, itol, imax, rates, batch_size, tol, progress,
                   rng, desc):
    """:func:`fit_items` on a dask array (``parts``: a ``mfengine._dask.Partitions``, the
    only view of dask this module has): the same loop (:func:`ascend`), each mini-batch's
    patterns solved where their blocks are (:func:`partition_gradient`, warm-started from
    solutions kept there) and the partitions' summed gradients added on the client.
    ``check(rows, missing) -> (V, miss)`` is the estimator's data check (a module-level
    function that can travel to the workers).  No callback."""
    states = None

    def batch_gradient(idx, w, h):
        nonlocal states
        outs, states = parts.step(partition_gradient,
                                  (nets, w.copy(), h.copy(), method, itol, imax, check),
                                  parts.split(idx), states)
        return (sum(o[0] for _, o in outs), sum(o[1] for _, o in outs),
                sum(o[2] for _, o in outs), np.concatenate([o[3] for _, o in outs]))

    n = int(parts.offsets[-1])
    return ascend(nets, nets.w.copy(), nets.h.copy(), n, method, rates, batch_size, tol,
                  progress, rng, False, batch_gradient, desc)


def check_partition(block, check):
    """Check one partition's block where it is (``check(rows, missing)``: a data check)."""
    check(np.asarray(block), None)


def partition_gradient(block, state, shared, local):
    """One partition's part of one mini-batch of a data-parallel fit (run where the block
    is): check the block's rows ``local``, solve them warm-started from the block's previous
    solutions (the state, kept there), and sum their gradients.  ``shared``: ``(nets, w, h,
    method, infer_tol, infer_max_iter, check)`` with ``check(rows, missing) -> (V, miss)``
    the estimator's data check (a module-level function)."""
    nets, w, h, method, itol, imax, check = shared
    V, miss = check(np.asarray(block)[local], None)
    items = nets.items(V, miss)
    clamp = items.clamp
    m = clamp.shape[0]
    nb = np.shape(block)[0]
    if state is None:
        mu_state, xi_state = np.full((nb, nets.n_units), 0.5), None
    else:
        mu_state, xi_state = state[0].copy(), None if state[1] is None else state[1].copy()
    net_of = np.zeros(m, dtype=np.intp)
    init_xi = None if xi_state is None else xi_state[local]
    bound, mu, xi, _, conv = solve_items(nets, w, h, clamp, net_of, method, itol, imax, 1,
                                         mu_state[local], None, init_xi)
    gw, gh = objective_gradient(nets, w, h, clamp, net_of, method, mu, xi)
    mu_state[local] = mu
    if xi is not None:
        if xi_state is None:
            xi_state = initial_xi(nets, nb, xi.shape[1])
        xi_state[local] = xi
    return (gw.sum(axis=0), gh.sum(axis=0), float(bound.sum()), np.asarray(conv, dtype=bool)), \
        (mu_state, xi_state)
