"""Running the HMM kernel on problem records (:mod:`mfengine.hmm._problem`): arrays in,
arrays out.  Nothing here reads an estimator.

The compiled kernel :mod:`mfengine.hmm._chain` answers ``run`` with a dict; :func:`solve`
turns it into a :class:`ChainSolution` right here, so that nothing above this module indexes
it.  Besides the solves: fit's E-step (the structured starts solved in centred coordinates,
the partitions' E-step of the data-parallel fit), the decoders and samplers that read a
solution, and two NumPy computations of the model itself (ln P(x, s) of a path, drawing a
sequence).
"""
import dataclasses
from dataclasses import dataclass

import numpy as np

from mfengine.hmm import _chain
from mfengine.hmm._checks import check_data, n_threads_for
from mfengine.hmm._problem import centred

__all__ = ["ChainSolution", "check_exact_size", "solve", "solve_from_starts", "estep",
           "partition_estep", "combine_partitions", "viterbi", "draw_paths", "log_joint",
           "sample_sequence"]

_HALF_LOG_2PI = 0.5 * np.log(2.0 * np.pi)


@dataclass(frozen=True, eq=False)
class ChainSolution:
    """The kernel's answer for every sequence of one solve.

    Parameters
    ----------
    bound : ndarray of shape (n_seq,)
        The bound on ln P(x) (``"exact"``: ln P(x)).
    n_sweeps : ndarray of intp, shape (n_seq,)
        Sweeps made.
    converged : ndarray of bool, shape (n_seq,)
        Whether each solve met its tolerance.
    gamma : ndarray of shape (N, n_states), optional
        Q's marginals (the mean-field methods).
    history : ndarray of shape (n_seq, min(max_iter, HISTORY_MAX) + 1), optional
        The bound before and after each sweep, NaN after the last (the mean-field methods).
    xi : ndarray of shape (n_seq, n_states, n_states), optional
        Q's summed pairwise marginals of neighbours ("structured").
    logpot : ndarray of shape (N, n_states), optional
        The log-potentials of the chain Q ("structured").
    H : ndarray of shape (n_seq, D, 3 n_states, 3 n_states), optional
        The M-step's quadratic term in the mean tables (with ``want_stats``).
    g : ndarray of shape (n_seq, D, 3 n_states), optional
        The M-step's linear term (with ``want_stats``).
    xx : ndarray of shape (n_seq, D), optional
        The sum over observed outputs of x_td^2 / v_d (with ``want_stats``; v the
        variances).  ``H``, ``g`` and ``xx`` are precision-weighted: with Q held fixed the
        bound is, as a function of the tables theta_d = (U[:, d], V[:, d], W[:, d]) in the
        data's units, -1/2 sum_d (xx_d - 2 g_d.theta_d + theta_d.H_d.theta_d) plus terms free
        of them, and v_d times the bracket is the expected sum of feature d's squared
        residuals (the variances' M-step).
    n_obs : ndarray of intp, shape (n_seq, D), optional
        Observed values of each feature (with ``want_stats``).

    In the data-parallel fit (:func:`combine_partitions`) a "sequence" is a partition:
    ``gamma`` holds each partition's summed first-step marginals, ``logpot`` its warm starts.
    """

    bound: np.ndarray
    n_sweeps: np.ndarray
    converged: np.ndarray
    gamma: np.ndarray = None
    history: np.ndarray = None
    xi: np.ndarray = None
    logpot: object = None
    H: np.ndarray = None
    g: np.ndarray = None
    xx: np.ndarray = None
    n_obs: np.ndarray = None


def _from_kernel(out, sigma=None, log_sigma=None, xx=None, n_obs=None):
    """The kernel's dict as a ChainSolution (absent entries None), for the model whose
    whitened form (:meth:`~mfengine.hmm._problem.HMMParams.whitened`, ``sigma``) the kernel
    solved: ``log_sigma`` (n_seq,) the sum of ln sigma_d over each sequence's observed
    values, taken off the bound and its history; H and g back in the data's units (divided
    by v_d and sigma_d); ``xx``, ``n_obs`` the data's statistics."""
    bound, history, H, g = out["bound"], out.get("history"), out.get("H"), out.get("g")
    if sigma is not None:
        bound = bound - log_sigma
        if history is not None:
            history = history - log_sigma[:, None]
        if H is not None:
            H = H / (sigma * sigma)[None, :, None, None]
            g = g / sigma[None, :, None]
    return ChainSolution(bound=bound, n_sweeps=out["n_sweeps"], converged=out["converged"],
                         gamma=out.get("gamma"), history=history, xi=out.get("xi"),
                         logpot=out.get("logpot"), H=H, g=g, xx=xx, n_obs=n_obs)


def _per_sequence(values, offsets):
    """(n_seq, D) sums of the rows of ``values`` (N, D) over each sequence."""
    return np.add.reduceat(values, offsets[:-1], axis=0) if values.shape[0] else values


def check_exact_size(n_states, lag, context, offsets, max_augmented_states):
    """Refuse an exact solve whose augmented state space exceeds ``max_augmented_states``."""
    right, left = context in ("right", "both"), context in ("left", "both")
    longest = int(np.max(np.diff(offsets)))
    # a lag >= a sequence's length leaves it first-order, and so does every larger lag
    clamped = min(int(lag), longest)
    size = _chain.exact_states(int(n_states), clamped, right, left, longest)
    if size < 0 or size > max_augmented_states:
        w = min(longest, 1 + clamped * (right + left))
        raise ValueError(
            f"method='exact' walks n_states**w = {n_states}**{w} augmented states "
            f"(lag={lag}, context={context!r}), more than "
            f"max_augmented_states={max_augmented_states}; use method='structured' "
            "or raise max_augmented_states"
        )


def solve(problem, params, X, offsets, method, want_stats=False, first_order=False,
          init=None):
    """Run the kernel on data and parameters already in centred coordinates
    (:func:`~mfengine.hmm._problem.centred`, or fit's shift).

    ``first_order``: the context tables left out (Baum-Welch's E-step); ``init``: chain
    potentials (N, n) to start the structured ascent from; ``want_stats``: the M-step
    statistics ``H`` and ``g`` too.  Returns a :class:`ChainSolution`."""
    right = problem.right and not first_order
    left = problem.left and not first_order
    longest = int(np.max(np.diff(offsets)))
    # a lag >= a sequence's length leaves it first-order, and so does every larger lag
    lag = min(int(problem.lag), longest)
    # threads over sequences; a structured solve can also run its starts apart
    n_starts = _chain.N_STARTS if problem.starts is None else len(problem.starts)
    n_items = (len(offsets) - 1) * (n_starts if method == "structured" else 1)
    n_threads = n_threads_for(problem.n_threads, n_items)
    seen = xx = n_obs = sigma = log_sigma = None
    if want_stats or not params.unit:
        seen = ~np.isnan(X)
    if not params.unit:
        # the kernel's model has unit variances: it solves the whitened one
        params, sigma = params.whitened()
        X = np.ascontiguousarray(X / sigma)
        log_sigma = _per_sequence(seen.astype(np.float64), offsets) @ np.log(sigma)
    if want_stats:
        xx = _per_sequence(np.where(seen, X * X, 0.0), offsets)
        n_obs = _per_sequence(seen.astype(np.intp), offsets)
    return _from_kernel(_chain.run(
        method, params.startprob, params.transmat, params.means, params.right_means,
        params.left_means, lag, right, left, X, offsets, problem.max_iter, problem.tol,
        want_stats, n_threads, init, problem.starts), sigma, log_sigma, xx, n_obs)


def solve_from_starts(problem, params, X, offsets):
    """fit's mean-field E-step without a warm start, the one that runs the structured
    solver's starts: solved in the coordinates of :func:`~mfengine.hmm._problem.centred` (so
    that the starts do not depend on how fit's origin splits between the tables), with the
    M-step statistics mapped back to ``params``'.  In those coordinates the bound is
    F_c(theta - c) = F(theta), c the tables' row means, so H is the same and g = g_c + H c."""
    params_c, centre = centred(params, problem.lag, problem.context, X.shape, offsets)
    r = solve(problem, params_c, np.ascontiguousarray(X - centre), offsets, "structured",
              want_stats=True)
    c = np.concatenate([np.broadcast_to(M.mean(axis=0), M.shape)
                        for M in params.tables])   # (3n, D)
    # and the squared data so that xx - 2 g.theta + theta.H.theta (the expected squared
    # residuals) is the same in both: xx = xx_c + c.H.c + 2 g_c.c
    xx = r.xx + np.einsum("id,sdij,jd->sd", c, r.H, c) + 2.0 * np.einsum("sdi,id->sd", r.g, c)
    return dataclasses.replace(r, g=r.g + np.einsum("sdij,jd->sdi", r.H, c), xx=xx)


def estep(problem, params, X, offsets, first_order=False, init=None):
    """fit's mean-field E-step in fit's coordinates, with the M-step statistics: from the
    first-order chain or warm-started from ``init`` as given, else by the structured
    solver's starts (:func:`solve_from_starts`)."""
    if first_order or init is not None:
        return solve(problem, params, X, offsets, "structured", want_stats=True,
                     first_order=first_order, init=init)
    return solve_from_starts(problem, params, X, offsets)


def partition_estep(block, state, shared, lengths):
    """One partition's E-step in the data-parallel fit (whole sequences, run where the
    block is; ``mfengine._dask.Partitions.step`` ships it): its summed statistics, and the
    chain's log-potentials as its next warm start.

    ``shared`` = ``(problem, params, shift, first_order, use_init)``; ``state``: the
    partition's previous log-potentials."""
    problem, params, shift, first_order, use_init = shared
    Xc, offsets = check_data(np.asarray(block), lengths, shift.shape[0])
    X = np.ascontiguousarray(Xc - shift)
    r = estep(problem, params, X, offsets, first_order, state if use_init else None)
    small = ChainSolution(
        bound=float(r.bound.sum()), n_sweeps=None, converged=r.converged,
        gamma=r.gamma[offsets[:-1]].sum(0),
        xi=None if r.xi is None else r.xi.sum(0),
        H=None if r.H is None else r.H.sum(0),
        g=None if r.g is None else r.g.sum(0),
        xx=None if r.xx is None else r.xx.sum(0),
        n_obs=None if r.n_obs is None else r.n_obs.sum(0))
    return small, r.logpot


def combine_partitions(outs, logpot):
    """The partitions' answers of :func:`partition_estep` as one :class:`ChainSolution`
    with one row per partition (its "first step" the partition's summed first steps), and
    the offsets (0, 1, ..., n_parts) that say so; ``logpot`` holds the partitions' warm
    starts."""
    def stack(name):
        if getattr(outs[0], name) is None:
            return None
        return np.array([getattr(o, name) for o in outs])

    r = ChainSolution(bound=np.array([o.bound for o in outs]), n_sweeps=None,
                      converged=np.concatenate([o.converged for o in outs]),
                      gamma=stack("gamma"), xi=stack("xi"), logpot=logpot, H=stack("H"),
                      g=stack("g"), xx=stack("xx"), n_obs=stack("n_obs"))
    return r, np.arange(len(outs) + 1)


def viterbi(params, logpot, offsets):
    """The most probable path of the chain Q(s) ~ startprob[s_0] prod transmat
    prod exp(logpot_t(s_t)) of every sequence, concatenated."""
    return _chain.viterbi(params.startprob, params.transmat, logpot, offsets)[0]


def draw_paths(method, params, solution, offsets, rng, k):
    """``k`` draws of every sequence's path from Q: (k, N).  "structured": whole paths from
    the chain (forward filtering, backward sampling); "naive": each state from its marginal."""
    N = solution.gamma.shape[0]
    out = np.empty((k, N), dtype=np.intp)
    if method == "structured":
        for a, b in zip(offsets[:-1], offsets[1:]):
            u = rng.random((k, b - a))
            out[:, a:b] = _chain.sample_chain(params.startprob, params.transmat,
                                              solution.logpot[a:b], u)
    else:
        cum = np.cumsum(solution.gamma, axis=1)
        u = rng.random((k, N)) * cum[None, :, -1]
        out[:] = np.minimum((u[:, :, None] >= cum[None]).sum(-1), cum.shape[1] - 1)
    return out


def log_joint(params, lag, context, X, offsets, path):
    """ln P(x, s) of the state sequence ``path`` under the model, summed over sequences
    (missing values marginalised: their terms drop out)."""
    right, left = context in ("right", "both"), context in ("left", "both")
    U, V, W = params.tables
    sigma = np.sqrt(params.variances)
    lag = int(lag)
    total = 0.0
    with np.errstate(divide="ignore"):
        logA, logsp = np.log(params.transmat), np.log(params.startprob)
        for a, b in zip(offsets[:-1], offsets[1:]):
            s, x = path[a:b], X[a:b]
            T = b - a
            mean = U[s].copy()
            if right and lag < T:
                mean[:T - lag] += V[s[lag:]]
            if left and lag < T:
                mean[lag:] += W[s[:T - lag]]
            total += logsp[s[0]] + np.sum(logA[s[:-1], s[1:]])
            seen = ~np.isnan(x)    # missing values are marginalised: their terms drop out
            z = ((x - mean) / sigma)[seen]
            total += (-0.5 * np.sum(z ** 2) - np.count_nonzero(seen) * _HALF_LOG_2PI
                      - np.sum(seen @ np.log(sigma)))
    return float(total)


def sample_sequence(params, lag, context, T, rng):
    """One sequence of ``T`` steps drawn from the model: ``(X, states)``."""
    right, left = context in ("right", "both"), context in ("left", "both")
    U, V, W = params.tables
    n = params.n_states
    try:
        states = np.empty(T, dtype=np.intp)
        np.empty((T, U.shape[1]))     # the output too must fit, before the long loop
    except MemoryError as exc:
        raise MemoryError(f"n_samples={T} time steps do not fit in memory: {exc}") from exc
    states[0] = rng.choice(n, p=params.startprob)
    cum = np.cumsum(params.transmat, axis=1)
    u = rng.random(T)
    for t in range(1, T):
        states[t] = min(int(np.searchsorted(cum[states[t - 1]], u[t], side="right")), n - 1)
    mean = U[states].copy()
    L = int(lag)
    if right and T > L:
        mean[:-L] += V[states[L:]]
    if left and T > L:
        mean[L:] += W[states[:-L]]
    X = mean + np.sqrt(params.variances) * rng.standard_normal((T, U.shape[1]))
    return X, states
