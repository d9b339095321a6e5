"""Running the belief-net kernels on problem records (:mod:`mfengine.sbn._problem`): arrays
in, arrays out.  Argument checks of one solve, chunking for the progress bar, the DAG
methods' dispatch, and the sampled ln P(x).  Nothing here reads an estimator."""
import warnings

import numpy as np

from mfengine._base import user_stacklevel, warn_unconverged
from mfengine._validation import (Options, check_int, check_random_state, check_tol,
                                  check_value, effective_n_threads)
from mfengine.sbn._result import BeliefNetResult, concatenate_results

__all__ = ["METHODS", "DAG_METHODS", "inner_tol_for", "check_solve_args", "run_gaussian",
           "solve_items", "run_dag", "run_exact", "run_hybrid", "certificate", "certified",
           "evidence_support", "EVIDENCE_SLACK", "report", "SAMPLED_METHODS",
           "check_sampling_args", "importance"]

METHODS = ("gaussian", "sjj", "plefka11", "plefka12", "plefka22")
#: Methods for belief nets over any DAG (a layered net is converted with ``to_dag``).
DAG_METHODS = ("sjj", "plefka11", "plefka12", "plefka22")

PROGRESS_CHUNK = 4096  # patterns per kernel call when a progress bar is shown
#: A noisy-OR "sjj" solve whose caller keeps only the bounds (or the means) runs in chunks of
#: items whose q (one per edge and item) take at most this many doubles (32 MB), dropped after
#: each chunk: the peak memory then does not grow with the number of items times the number of
#: edges.  (The other DAG solves are not cut: their variational parameters are no larger than
#: the means, and the Plefka schemes' blocked path gives a short run of items other roundings.)
XI_CHUNK_DOUBLES = 2**22
MAX_ITER_LIMIT = 2**31 - 1  # the kernels count sweeps in C ints


def inner_tol_for(tol):
    """Each unit's 1-D solve stops when |dL/dmu| (and the xi residual) falls below this.

    The bound's error from stopping there is about inner_tol**2 / 8 per unit, so the square
    root keeps it well under the outer tolerance."""
    return float(min(1e-3, max(1e-13, 0.1 * np.sqrt(tol))))


def check_solve_args(method, tol, max_iter, inner_tol, names=("tol", "max_iter")):
    """Validate one solve's method and stopping rule; returns them as Python scalars.

    ``names`` are the names errors use for tol and max_iter (the constructor's
    ``infer_tol``/``infer_max_iter`` when the values came from there)."""
    check_value(method, "method", [Options(*METHODS)])
    return (method, check_tol(tol, names[0]), check_int(max_iter, names[1], 1, MAX_ITER_LIMIT),
            check_tol(inner_tol, "inner_tol", allow_none=True))


def _as_means(init_mu):
    """``init_mu`` as a float64 array, with an error that names it."""
    try:
        return np.asarray(init_mu, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise type(exc)(f"init_mu must be an array of means in [0, 1]: {exc}") from exc


def _threads(n_threads, n):
    # At least 16 patterns per thread: waking threads for a tiny batch costs more than it
    # saves.  The answer does not depend on it.
    return max(1, min(effective_n_threads(n_threads), n // 16))


def _chunks(n, progress, desc, most=None):
    """Slices of at most PROGRESS_CHUNK patterns with a bar (and of at most ``most``), or one
    slice without a bar (unless ``most`` cuts it)."""
    from mfengine._progress import progress_bar

    step = PROGRESS_CHUNK if progress else max(n, 1)
    if most is not None:
        step = max(1, min(step, most))
    if n <= step:
        return [slice(0, n)], None
    return ([slice(a, a + step) for a in range(0, n, step)],
            progress_bar(total=n, desc=desc, unit="pattern") if progress else None)


def _run_chunked(n, progress, desc, solve_chunk, method, tol, most=None):
    slices, bar = _chunks(n, progress, desc, most)
    parts = []
    try:
        for sl in slices:
            parts.append(solve_chunk(sl))
            if bar is not None:
                bar.update(min(sl.stop, n) - sl.start)
    finally:
        if bar is not None:
            bar.close()
    return parts[0] if len(parts) == 1 else concatenate_results(parts, method, tol)


def _from_kernel(r, method, tol):
    """The compiled Gaussian kernel's answer as a BeliefNetResult."""
    if isinstance(r, BeliefNetResult):
        return r
    return BeliefNetResult(bound=r.bound, converged=r.converged, n_iter=r.n_iter,
                           method=method, tol=tol, mu=r.mu, xi=r.xi)


def run_gaussian(net, V, miss, init_mu, tol, max_iter, inner_tol, n_threads, progress):
    """Saul & Jordan's Gaussian-approximated mean field of a ``LayeredNet`` on checked data
    (see ``SigmoidBeliefNet.infer``)."""
    from mfengine.sbn import _gaussian

    gain_rule = inner_tol is None
    gtol = inner_tol_for(tol) if inner_tol is None else inner_tol
    n = V.shape[0]
    if init_mu is not None:
        init_mu = _as_means(init_mu)
        if init_mu.shape != (n, net.n_hidden):
            raise ValueError(f"init_mu must have shape {(n, net.n_hidden)} (hidden layers "
                             f"concatenated), got {init_mu.shape}")
    nt = _threads(n_threads, n)

    def chunk(sl):
        r = _gaussian.run(net.weights, net.biases, V[sl], None if miss is None else miss[sl],
                          None if init_mu is None else init_mu[sl], tol, gtol, max_iter, nt,
                          gain_rule)
        return _from_kernel(r, "gaussian", tol)

    return _run_chunked(n, progress, "infer", chunk, "gaussian", tol)


def solve_items(nets, w, h, clamp, net_of, method, tol, max_iter, n_threads, init_mu=None,
                inner_tol=None, init_xi=None):
    """Run a DAG method's kernel on items of ``nets`` (a ``DagNets``) with the weights ``w``
    and biases ``h`` given (learning moves them); returns (bound, mu, xi, n_iter,
    converged)."""
    s = nets.structure
    if method == "sjj":
        from mfengine.sbn import sjj

        gtol = inner_tol_for(tol) if inner_tol is None else float(inner_tol)
        return sjj.solve(s, w, h, net_of, clamp, tol=tol, inner_tol=gtol,
                         max_sweeps=max_iter, n_threads=n_threads, init_mu=init_mu,
                         init_xi=init_xi, activation=nets.activation)
    from mfengine.sbn import plefka

    G, u, n_iter, conv = plefka.solve(s, w, h, net_of, clamp, int(method[-2:]),
                                      nets.activation, tol=tol, max_iter=max_iter,
                                      n_threads=n_threads, init_u=init_mu)
    return -G, u, None, n_iter, conv


def run_dag(nets, items, method, tol, max_iter, inner_tol, n_threads, init_mu, progress,
            keep="all"):
    """A DAG method on the ``items`` of ``nets`` (a ``DagNets``); returns a BeliefNetResult
    with ``mu`` of shape ``items.shape + (n_units,)`` and ``xi`` of ``items.shape +
    (n_units,)`` (noisy-OR "sjj": ``items.shape + (nnz,)``, the q of every edge; None for the
    Plefka methods).  ``init_mu``: (n_items, n_hidden) or None.  ``keep``: "all", "mu"
    (``xi`` None) or "bound" (``mu`` and ``xi`` None); with "mu" or "bound" a noisy-OR "sjj"
    solve runs in chunks of items whose q take at most XI_CHUNK_DOUBLES, each chunk's dropped
    before the next."""
    clamp, net_of, shape = items.clamp, items.net_of, items.shape
    n = clamp.shape[0]
    mu0 = nets.hidden_init(init_mu, n)
    nt = _threads(n_threads, n)

    def chunk(sl):
        bound, mu, xi, n_iter, conv = solve_items(
            nets, nets.w, nets.h, clamp[sl], net_of[sl], method, tol, max_iter, nt,
            None if mu0 is None else mu0[sl], inner_tol)
        cert = support = None
        if method.startswith("plefka"):
            cert = certificate(nets, clamp[sl], net_of[sl], mu, tol, max_iter, nt)
            conv = np.asarray(conv, dtype=bool) & certified(bound, cert)
            support = evidence_support(nets, clamp[sl], net_of[sl], mu)
            if support is not None:
                conv &= support >= 1.0 - EVIDENCE_SLACK
        return BeliefNetResult(bound=bound, converged=conv, n_iter=n_iter, method=method,
                               tol=tol, mu=None if keep == "bound" else mu,
                               xi=xi if keep == "all" else None, certificate=cert,
                               evidence_support=support)

    most = None
    if keep != "all" and method == "sjj" and nets.noisy_or:
        most = max(1, XI_CHUNK_DOUBLES // max(1, nets.w.shape[1]))
    r = _run_chunked(n, progress, f"infer ({method})", chunk, method, tol, most)
    r.bound = r.bound.reshape(shape)
    r.converged = r.converged.reshape(shape)
    r.n_iter = r.n_iter.reshape(shape)
    r.mu = None if r.mu is None else r.mu.reshape(shape + r.mu.shape[-1:])
    r.xi = None if r.xi is None else r.xi.reshape(shape + r.xi.shape[-1:])
    if r.certificate is not None:
        r.certificate = r.certificate.reshape(shape)
    if r.evidence_support is not None:
        r.evidence_support = r.evidence_support.reshape(shape)
    return r


def run_exact(blocks, W, h, activation, visible, V, miss, keep):
    """``method="exact"`` on checked data ``V`` (``miss``: mask or None): the junction tree of
    ``_exact_noisy_or`` when ``blocks`` (the net's ``bipartite_blocks``) is not None, else
    enumeration (``_exact.dag_posterior``) of the net (W, h, activation, visible).  ``keep``
    as in `run_dag`."""
    from mfengine.sbn._exact import MAX_ENUMERATED_HIDDEN, dag_posterior
    from mfengine.sbn._exact_noisy_or import exact_bipartite

    if blocks is not None:
        E = V if miss is None else np.where(miss, np.nan, V)
        log_p, marg, _ = exact_bipartite(blocks.h_disease, blocks.h_finding, blocks.W_fd, E)
        mu = _bipartite_means(blocks, len(h), marg, E)
    else:
        log_p, mu = dag_posterior(W, h, activation, visible, V, miss, MAX_ENUMERATED_HIDDEN)
    n = V.shape[0]
    return BeliefNetResult(bound=log_p, converged=np.ones(n, dtype=bool),
                           n_iter=np.zeros(n, dtype=np.intp), method="exact", tol=0.0,
                           mu=None if keep == "bound" else mu, xi=None)


def run_hybrid(blocks, n_units, V, miss, keep, tol, max_iter, max_exact):
    """``method="hybrid"`` (``_hybrid_noisy_or.hybrid_bipartite``) on checked data of a
    bipartite noisy-OR net whose blocks are ``blocks``; ``tol`` / ``max_iter`` None for the
    defaults."""
    from mfengine.sbn._hybrid_noisy_or import hybrid_bipartite

    E = V if miss is None else np.where(miss, np.nan, V)
    kw = {} if tol is None else {"tol": tol}
    if max_iter is not None:
        kw["max_iter"] = max_iter
    bound, marg, info = hybrid_bipartite(blocks.h_disease, blocks.h_finding, blocks.W_fd, E,
                                         max_exact=max_exact, **kw)
    mu = None if keep == "bound" else _bipartite_means(blocks, n_units, marg, E)
    return BeliefNetResult(bound=bound, converged=np.ones(V.shape[0], dtype=bool),
                           n_iter=info["n_iter"], method="hybrid", tol=kw.get("tol", 1e-6),
                           mu=mu, xi=None)


def _bipartite_means(blocks, n_units, marg, E):
    """Every unit's mean: the diseases' posterior marginals, the findings' data (NaN where
    unrecorded)."""
    mu = np.full((E.shape[0], n_units), np.nan)
    mu[:, blocks.diseases] = marg
    mu[:, blocks.findings] = E
    return mu


def certificate(nets, clamp, net_of, u, tol, max_iter, n_threads):
    """A certified lower bound on ln P(v) for each item, to hold a Plefka answer against: the
    strict ("sjj") bound, which holds at any means and variational parameters.  On noisy-OR
    nets it is solved (warm-started at the Plefka means ``u``; its coordinate ascent only
    raises it), which costs about as much as the Plefka solve; on sigmoid nets it is
    evaluated at ``u`` with every xi at 1/2 (one pass over the edges).  A noisy-OR net with a
    bias at 0 (no leak) has no strict bound to offer (it needs every bias positive): there the
    certificate is the trivial bound -inf, which nothing contradicts."""
    from mfengine.sbn import sjj

    free = np.isnan(clamp)
    start = np.where(free, np.clip(u, 1e-12, 1.0 - 1e-12), 0.5)
    if nets.noisy_or and np.any(np.asarray(nets.h) <= 0.0):
        return np.full(clamp.shape[0], -np.inf)
    if nets.noisy_or:
        return solve_items(nets, nets.w, nets.h, clamp, net_of, "sjj", tol, max_iter, n_threads,
                           start)[0]
    return sjj.evaluate_half(nets.structure, nets.w, nets.h, net_of, clamp, start,
                             n_threads=n_threads)


#: A posterior contradicts the evidence where the means of the possible causes of a positive
#: noisy-OR unit without a leak sum to less than 1 by more than this (see `evidence_support`).
EVIDENCE_SLACK = 1e-6


def evidence_support(nets, clamp, net_of, mu):
    """How much of the evidence a posterior explains, per item: the smallest sum of the
    parents' means (parents joined by a positive weight; an observed parent counts its
    value) over the noisy-OR units observed on whose bias is 0.  Such a unit cannot be on
    unless a parent is, so under the exact posterior that sum is at least P(some parent on
    | v) = 1; a posterior whose sum falls below 1 sums to less than the evidence allows.
    +inf for an item without such a unit; None on sigmoid nets and on nets whose biases are
    all positive (nothing to check)."""
    h = np.asarray(nets.h)
    if not nets.noisy_or or not np.any(h == 0.0):
        return None
    import scipy.sparse as sp

    s = nets.structure
    n = s.n_units
    child = np.repeat(np.arange(n), np.diff(s.par_ptr))          # edge k: par_idx[k] -> child
    m = np.where(np.isnan(clamp), mu, clamp)
    out = np.full(clamp.shape[0], np.inf)
    for k in np.unique(net_of):
        rows = np.flatnonzero(net_of == k)
        on = (clamp[rows] == 1.0) & (h[k] == 0.0)[None, :]
        if not on.any():
            continue
        pos = np.asarray(nets.w)[k] > 0.0
        A = sp.csr_matrix((np.ones(int(pos.sum())), (s.par_idx[pos], child[pos])), shape=(n, n))
        support = np.asarray(A.T @ m[rows].T).T                  # (rows, n): sum of parents' means
        out[rows] = np.min(np.where(on, support, np.inf), axis=1)
    return out


def certified(bound, cert):
    """Where an objective (-G) stands: at most 0 (a log-probability of binary data) and not
    below the certified lower bound ``cert`` beyond round-off."""
    bound = np.asarray(bound, dtype=np.float64)
    slack = 1e-9 * np.maximum(1.0, np.abs(cert))
    return (bound <= 0.0) & (bound >= cert - slack)


def report(result, what):
    """Warn about unconverged patterns, about a Plefka objective outside the range of a
    log-probability (ln P(v) <= 0 for binary data), and about one below the certified lower
    bound of the same patterns; returns ``result``."""
    bound = np.asarray(result.bound)
    cert = getattr(result, "certificate", None)
    contradicted = np.zeros(bound.shape, dtype=bool)
    if result.method.startswith("plefka"):
        above = ~(bound <= 0.0)
        if cert is not None:
            contradicted = ~above & ~certified(bound, cert)
        bad = int(np.count_nonzero(above))
        if bad:
            warnings.warn(
                f"{what}: -G is above 0 (or not finite) for {bad} of {bound.size} "
                "patterns, outside the range of a log-probability of binary data: the Plefka "
                "expansion has broken down for these weights; use method='sjj', a true lower "
                "bound.", RuntimeWarning, stacklevel=user_stacklevel())
        if contradicted.any():
            k = np.flatnonzero(contradicted.ravel())
            eg = ", ".join(f"{bound.ravel()[i]:.6g} < {cert.ravel()[i]:.6g}" for i in k[:3])
            warnings.warn(
                f"{what}: -G lies below the certified lower bound on ln P(x) (the strict "
                f"'sjj' bound) for {k.size} of {bound.size} patterns (-G < bound: {eg}): "
                "the Plefka solution is a poor approximation there (its means cannot be "
                "trusted either); use method='sjj', a certified lower bound with its "
                "posterior, or method='exact' where it is tractable.  `converged` is False "
                "for these patterns.", RuntimeWarning, stacklevel=user_stacklevel())
        support = getattr(result, "evidence_support", None)
        if support is not None:
            short = np.asarray(support) < 1.0 - EVIDENCE_SLACK
            if short.any():
                k = np.flatnonzero(short.ravel())
                eg = ", ".join(f"{np.asarray(support).ravel()[i]:.3g}" for i in k[:3])
                warnings.warn(
                    f"{what}: the posterior explains less than the evidence requires for "
                    f"{k.size} of {bound.size} patterns: a unit observed on that has no leak "
                    "(bias 0) cannot be on unless a parent is, so its parents' posterior "
                    f"means must sum to at least 1, and here they sum to {eg}.  The Plefka "
                    "means cannot be trusted there; use method='exact' or 'hybrid' (a "
                    "diagnosis net), or posterior_marginals (sampled).  `converged` is False "
                    "for these patterns.", RuntimeWarning, stacklevel=user_stacklevel())
                contradicted |= short.reshape(contradicted.shape)
    if result.method.startswith("plefka"):
        contradicted |= ~(bound <= 0.0)      # warned above: not counted as unconverged too
    warn_unconverged(np.asarray(result.converged) | contradicted, what,
                     "raise max_iter (or infer_max_iter) or loosen tol; for the Plefka methods "
                     "try method='sjj', whose coordinate ascent always converges")
    return result


# ---------------------------------------------------------------------------- sampled ln P(v)
#: The methods of ``log_likelihood`` (and of ``score_samples(method=...)`` beyond the bounds).
SAMPLED_METHODS = ("importance", "ais")
#: The prior's share of the importance proposal (defensive mixture): every weight P(s, v) / r(s)
#: is at most 1 / IMPORTANCE_MIX, so the weights' variance is finite whatever the mean field.
IMPORTANCE_MIX = 0.2
#: The mean-field means of the proposal are clipped to [eps, 1 - eps] (a flattened q).
IMPORTANCE_EPS = 0.01
#: Most samples per pattern (the kernel keeps one log-weight per sample per thread: 128 MB).
MAX_SAMPLES = 2**24


#: Default number of temperatures of method="ais".
AIS_STEPS = 100


def check_sampling_args(method, n_samples, random_state, n_steps=AIS_STEPS):
    """``method`` (one of SAMPLED_METHODS), ``n_samples`` (int >= 2), ``n_steps`` (int >= 1;
    "ais") and the 64-bit seed of the per-pattern streams drawn from ``random_state``."""
    check_value(method, "method", [Options(*SAMPLED_METHODS)], "log_likelihood")
    n_samples = check_int(n_samples, "n_samples", 2, MAX_SAMPLES)
    n_steps = check_int(n_steps, "n_steps", 1, 2**31 - 1)
    rng = check_random_state(random_state)
    seed = int(rng.integers(0, 2**63, dtype=np.int64))
    return method, n_samples, n_steps, seed


def importance(nets, items, mu, bound, n_samples, seed, n_threads, progress,
               method="importance", n_steps=AIS_STEPS, predict=False, predict_stderr=False,
               rao_blackwell=False):
    """Importance-sampled (or AIS) ln P(x) of the ``items`` of ``nets`` (a ``DagNets``).

    ``mu`` holds the mean-field means of every unit, shaped ``items.shape + (n_units,)`` as
    ``run_dag`` returns them, and ``bound`` the objective of that solve; the proposal is the
    defensive mixture of the kernel's docstring (mfengine/sbn/_importance.pyx), or for "ais"
    the start of ``n_samples`` annealing chains of ``n_steps`` temperatures.

    Returns a ``LogLikelihoodEstimate`` shaped like ``bound``.  With ``predict`` ("importance"
    only), ``(estimate, pred)``: also the (n_items, n_units) self-normalised estimates of
    P(unit = 1 | data) (see the kernel's ``estimate``; a clamped unit reads its value).  With
    ``predict_stderr`` as well, ``(estimate, pred, pred_se)``: ``pred_se`` holds each of those
    estimates' delta-method standard error, sqrt(sum_s w_s^2 (x_s - pred)^2) / sum_s w_s over
    the samples' weights w_s and values x_s (0 at a clamped unit, NaN where every weight is
    0).  ``pred`` and the ln P(x) estimates are bit for bit the same with or without it, and
    none depends on the thread count.  With ``rao_blackwell`` (only with ``predict``), each
    draw contributes a needed free unit's conditional given the draw's other units instead
    of its sampled value (see the kernel's ``estimate``): the same draws and ln P(x)
    estimates, marginals of lower variance."""
    from mfengine._base import LogLikelihoodEstimate
    from mfengine.sbn import _importance

    w, h, clamp, net_of, shape = nets.w, nets.h, items.clamp, items.net_of, items.shape
    n = clamp.shape[0]
    s = nets.structure
    q = np.ascontiguousarray(np.asarray(mu, dtype=np.float64).reshape(n, s.n_units))
    if not np.all((q >= 0.0) & (q <= 1.0)):
        raise ValueError("the mean-field means of the proposal must lie in [0, 1] (and contain "
                         "no NaN)")
    est, se, ess = np.empty(n), np.empty(n), np.empty(n)
    status = np.zeros(n, dtype=np.int8)
    if rao_blackwell and not predict:
        raise ValueError("rao_blackwell needs predict=True (it changes the predicted marginals)")
    if predict_stderr and not predict:
        raise ValueError("predict_stderr needs predict=True (the standard errors are those of "
                         "the predicted marginals)")
    pred = np.empty((n, s.n_units)) if predict else None
    pred_se = np.empty((n, s.n_units)) if predict and predict_stderr else None
    noisy = nets.noisy_or
    from mfengine._progress import progress_bar

    # unit-draws per pattern; at least 2**18 per thread (waking threads for less costs more
    # than it saves; the answer does not depend on it)
    work = n_samples * (s.n_units + s.nnz + 1) * (n_steps if method == "ais" else 1)
    nt = max(1, min(effective_n_threads(n_threads), n, n * work // 2**18))
    # with a bar: chunks of about 2**26 unit-draws, so that it moves
    step = max(1, n) if not progress else max(nt, 2**26 // work)
    slices = [slice(a, a + step) for a in range(0, n, step)]
    bar = (progress_bar(total=n, desc="log_likelihood", unit="pattern")
           if progress and len(slices) > 1 else None)
    try:
        for sl in slices:
            a, b = sl.start, min(sl.stop, n)
            if method == "ais":
                rc = _importance.ais(s.par_ptr, s.par_idx, s.ch_ptr, s.ch_idx, s.ch_w, w,
                                     h, net_of[a:b], clamp[a:b], q[a:b], n_samples,
                                     n_steps, IMPORTANCE_EPS, seed, a, est[a:b], se[a:b],
                                     ess[a:b], status[a:b], noisy, nt)
            else:
                rc = _importance.estimate(s.par_ptr, s.par_idx, s.ch_ptr, s.ch_idx, s.ch_w, w,
                                          h, net_of[a:b], clamp[a:b], q[a:b], n_samples,
                                          IMPORTANCE_MIX, IMPORTANCE_EPS, seed, a, est[a:b],
                                          se[a:b], ess[a:b], status[a:b], noisy, nt,
                                          None if pred is None else pred[a:b],
                                          None if pred_se is None else pred_se[a:b],
                                          rao_blackwell)
            if rc != 0:
                raise ValueError("the importance sampler refused its arguments (an internal "
                                 "size or index is inconsistent)")
            if np.any(status[a:b] != 0):
                raise MemoryError("the importance sampler could not allocate its scratch space "
                                  f"({n_samples} log-weights per thread); lower n_samples")
            if bar is not None:
                bar.update(b - a)
    finally:
        if bar is not None:
            bar.close()
    # ln P(x) <= 0 for binary data; a mean weight above 1 (chance, near ln P = 0) reads 0
    np.minimum(est, 0.0, out=est)
    zero = ~np.isfinite(est)
    if np.any(zero):
        warnings.warn(
            f"log_likelihood: every importance weight is 0 for {int(zero.sum())} of {n} "
            "patterns (a noisy-OR net that gives them probability 0, or too few samples): "
            "their estimate is -inf with an infinite standard error", RuntimeWarning,
            stacklevel=user_stacklevel())
    result = LogLikelihoodEstimate(estimate=est.reshape(shape), stderr=se.reshape(shape),
                                   bound=np.asarray(bound, dtype=np.float64).reshape(shape),
                                   n_samples=n_samples, ess=ess.reshape(shape), method=method)
    if pred_se is not None:
        return result, pred, pred_se
    return (result, pred) if predict else result
