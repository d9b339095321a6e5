"""Learning DAG belief nets by gradient ascent on a mean-field objective ("sjj", "plefka11",
"plefka12", "plefka22"), for ``BeliefNet.fit`` and ``SigmoidBeliefNet.fit``.

Each step solves the mean-field problem for a batch of patterns in one compiled, parallel
call (warm-started from each pattern's previous solution), then moves the weights and biases
along the gradient of the objective summed over the batch, divided by the batch size.  At a
solution the mean-field variables are stationary, so the partial derivatives in the
parameters are the total ones.  Noisy-OR parameters are kept feasible by projection (weights
>= 0, biases >= ``MIN_NOISY_OR_BIAS``).
"""
import contextlib
import copy
import warnings

import numpy as np

from mfengine._base import user_stacklevel, warn_unconverged
from mfengine._validation import check_random_state, effective_n_threads
from mfengine.sbn._hyper import check_callback, check_flag, check_int, check_tol, schedule, stop
from mfengine.sbn._solve import DAG_METHODS, check_solve_args, dag_items, solve_items

__all__ = ["fit_dag", "fit_dag_partitions", "objective_gradient"]

#: Smallest noisy-OR bias kept during learning: a zero bias makes a unit with all parents off
#: unable to fire, and the bounds -inf.
MIN_NOISY_OR_BIAS = 1e-3


def objective_gradient(batch, w, h, clamp, net_of, method, mu, xi):
    """Gradient of the objective (the bound, or -G) in (w, h), per item."""
    s = batch._structure
    if method == "sjj":
        from mfengine.sbn import sjj

        return sjj.gradient(s, w, h, net_of, clamp, mu, xi, activation=batch.activation)
    from mfengine.sbn import plefka

    gw, gh = plefka.gradient(s, w, h, net_of, clamp, mu, int(method[-2:]), batch.activation)
    return -gw, -gh


@contextlib.contextmanager
def _refused_leaves_state(net):
    """A fit refused while it sets up (its parameters or data) leaves the net as it was: the
    cold start's dropped W_, h_, visible_ (and everything else) come back."""
    state = dict(vars(net))
    try:
        yield
    except BaseException:
        vars(net).clear()
        vars(net).update(state)
        raise


def fit_dag(net, X, missing=None, partial=False):
    """Train ``net`` (a BeliefNet, changed in place; its hyperparameters say how) on binary
    ``X``; sets ``W_``, ``h_``, ``history_`` (the mean objective per pattern in each epoch,
    each pattern scored at its mean-field solution just before the update that used it) and
    ``n_iter_``, and returns ``net``.

    ``partial``: one pass over ``X`` in the order given, with the first rate of the
    schedule, from the current parameters (``partial_fit``); ``history_`` gains one entry."""
    method, itol, imax, rates, batch_size, tol, progress = _fit_settings(net)
    callback = check_callback(net.callback)
    past = []
    if partial:
        rates, tol, callback = rates[:1], None, None
        past = list(net.history_) if "history_" in vars(net) else []
    cold = not partial and not check_flag(net.warm_start, "warm_start")
    with _refused_leaves_state(net):
        if cold:
            for k in ("W_", "h_", "visible_"):
                vars(net).pop(k, None)
        net._params()
        batch, w, clamp, _, _ = dag_items(net, X, missing)
        n = clamp.shape[0]
        if n == 0:
            raise ValueError(f"Found array with 0 sample(s) (shape={clamp.shape}) while a minimum "
                             "of 1 is required: X has no patterns")
    rng = check_random_state(net.random_state)
    s = batch._structure
    n_threads = effective_n_threads(net.n_threads)
    mu_state = np.full(clamp.shape, 0.5)
    xi_state = None

    def batch_gradient(idx, w, h):
        nonlocal xi_state
        nt = max(1, min(n_threads, idx.size // 16))
        net_of = np.zeros(idx.size, dtype=np.intp)
        init_xi = None if xi_state is None else xi_state[idx]
        batch.h_ = h
        bound, mu, xi, _, conv = solve_items(batch, w, clamp[idx], net_of, method, itol, imax,
                                             nt, mu_state[idx], None, init_xi)
        gw, gh = objective_gradient(batch, w, h, clamp[idx], net_of, method, mu, xi)
        mu_state[idx] = mu
        if xi is not None:
            if xi_state is None:
                xi_state = _initial_xi(net, s, n, xi.shape[1])
            xi_state[idx] = xi
        return gw.sum(axis=0), gh.sum(axis=0), bound.sum(), np.asarray(conv, dtype=bool)

    return _ascend(net, w, batch.h_.copy(), n, rates, batch_size, tol, progress, callback, rng,
                   partial, past, batch_gradient, f"fit ({method})")


def fit_dag_partitions(net, parts):
    """``fit_dag`` on a dask array (``BeliefNet.fit``'s data-parallel form): the same loop
    (:func:`_ascend`), each mini-batch's patterns solved where their blocks are
    (:func:`_partition_gradient`, warm-started from solutions kept there) and the
    partitions' summed gradients added on the client.  ``parts``: a
    ``mfengine._dask.Partitions`` (the only view of dask this module has).  No callback and
    no ``missing``."""
    method, itol, imax, rates, batch_size, tol, progress = _fit_settings(net)
    if check_callback(net.callback) is not None:
        raise ValueError("BeliefNet.fit on a dask array does not take a callback")
    with _refused_leaves_state(net):
        if not check_flag(net.warm_start, "warm_start"):
            for k in ("W_", "h_", "visible_"):
                vars(net).pop(k, None)
        net._params()
        n = int(parts.offsets[-1])
        if n == 0:
            raise ValueError("X has no patterns: fit needs at least one")
        parts.map(_check_block, net)
    rng = check_random_state(net.random_state)
    states = None

    def batch_gradient(idx, w, h):
        nonlocal states
        net._set_learned(w[0].copy(), h[0].copy())
        outs, states = parts.step(_partition_gradient, (copy.deepcopy(net), method, itol, imax),
                                  parts.split(idx), states)
        return (sum(o[0] for _, o in outs), sum(o[1] for _, o in outs),
                sum(o[2] for _, o in outs), np.concatenate([o[3] for _, o in outs]))

    return _ascend(net, net._packed_w().copy(), net.h_[None].copy(), n, rates, batch_size, tol,
                   progress, None, rng, False, [], batch_gradient, f"fit ({method}, dask)")


def _fit_settings(net):
    """fit's method, solve settings and schedule, validated: (method, infer_tol,
    infer_max_iter, rates, batch_size, tol, progress)."""
    method = net.method
    if method not in DAG_METHODS:
        raise ValueError(f"method must be one of {DAG_METHODS}, got {method!r}")
    _, itol, imax, _ = check_solve_args(method, net.infer_tol, net.infer_max_iter, None,
                                        names=("infer_tol", "infer_max_iter"))
    rates = schedule(net.max_iter, net.learning_rate, 0.1)
    batch_size = check_int(net.batch_size, "batch_size", 1)
    tol = check_tol(net.tol, "tol", allow_none=True)
    progress = check_flag(net.progress, "progress")
    return method, itol, imax, rates, batch_size, tol, progress


def _initial_xi(net, s, n, width):
    """The first variational parameters of the sjj solve for ``n`` patterns: each noisy-OR
    unit's q uniform over its parents; 0.5 for sigmoid units."""
    xi = np.empty((n, width))
    if net.activation == "noisy_or":
        k = np.diff(s.par_ptr)
        xi[:] = np.repeat(1.0 / np.maximum(k, 1), k)
    else:
        xi[:] = 0.5
    return xi


def _ascend(net, w, h, n, rates, batch_size, tol, progress, callback, rng, partial, past,
            batch_gradient, desc):
    """The one training loop of ``BeliefNet.fit``: epochs of mini-batch gradient ascent on
    the packed weights ``w`` (1, n_weights) and biases ``h`` (1, n_units), updated in place;
    then the fitted attributes are set and ``net`` is returned.

    ``batch_gradient(idx, w, h)`` solves the patterns ``idx`` at the current parameters and
    returns their summed weight and bias gradients, summed objective and per-pattern
    convergence flags: in memory (:func:`fit_dag`) or summed over partitions
    (:func:`fit_dag_partitions`)."""
    from mfengine._progress import progress_bar

    method = net.method
    noisy = net.activation == "noisy_or"
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
            if callback is not None:
                net._set_learned(w[0], h[0].copy())
                callback(epoch, net, history[-1])
                # the callback may have edited or replaced the parameters: check and use them
                net._params()
                w = net._packed_w()
                h = net.h_[None].copy()
            if stop(history, tol):
                break
    finally:
        bar.close()
    net._set_learned(w[0], h[0].copy())
    net._params()
    warn_unconverged(np.concatenate(converged), f"BeliefNet.fit(method={method!r}): the "
                     "mean-field solves", "raise infer_max_iter or loosen infer_tol")
    net.history_ = np.asarray(past + history, dtype=np.float64)
    net.n_iter_ = len(past) + len(history)
    net.n_features_in_ = int(np.count_nonzero(net.visible_))
    if tol is not None and not stop(history, tol):
        warn_unconverged([False], "BeliefNet.fit",
                         f"the mean objective still changed by more than tol={tol} in the last "
                         f"of {len(rates)} epochs; raise max_iter or loosen tol")
    return net


def _check_block(block, net):
    """Validate one partition's block where it is."""
    net._check_data(np.asarray(block))


def _partition_gradient(block, state, shared, local):
    """One partition's part of one mini-batch of :func:`fit_dag_partitions` (run where the
    block is): solve the patterns ``local`` (block rows), warm-started from the block's
    previous solutions (the state, kept there), and sum their gradients."""
    net, method, itol, imax = shared
    batch, w, clamp, _, _ = dag_items(net, np.asarray(block)[local])
    h = batch.h_
    m = clamp.shape[0]
    nb = np.shape(block)[0]
    if state is None:
        mu_state, xi_state = np.full((nb, net.n_units), 0.5), None
    else:
        mu_state, xi_state = state[0].copy(), None if state[1] is None else state[1].copy()
    net_of = np.zeros(m, dtype=np.intp)
    init_xi = None if xi_state is None else xi_state[local]
    bound, mu, xi, _, conv = solve_items(batch, w, clamp, net_of, method, itol, imax, 1,
                                         mu_state[local], None, init_xi)
    gw, gh = objective_gradient(batch, w, h, clamp, net_of, method, mu, xi)
    mu_state[local] = mu
    if xi is not None:
        if xi_state is None:
            xi_state = _initial_xi(net, batch._structure, nb, xi.shape[1])
        xi_state[local] = xi
    return (gw.sum(axis=0), gh.sum(axis=0), float(bound.sum()), np.asarray(conv, dtype=bool)), \
        (mu_state, xi_state)
