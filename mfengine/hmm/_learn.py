"""ContextHMM's learning on problem records: the M-steps, the initial means, and fit's two
phases of EM (Baum-Welch on the first-order model, then mean-field EM), each run by
:func:`mfengine._em.run_em`.

The M-steps are functions of the E-step's statistics (a :class:`~mfengine.hmm._solve.ChainSolution`
with ``want_stats``) and of an :class:`~mfengine.hmm._problem.HMMParams`, returning new
parameter arrays.  :func:`fit_em` takes the E-step as a function of the parameters (fit's
runs on the array in memory, the data-parallel fit's sums over partitions) and returns the
learned parameters with the history; the estimator sets its attributes from them.
"""
import warnings
from dataclasses import dataclass

import numpy as np

from mfengine._em import EMMonitor, run_em
from mfengine._progress import progress_bar
from mfengine.hmm._checks import MAX_VARIANCE
from mfengine.hmm._problem import HMMParams
from mfengine.hmm._solve import ChainSolution

__all__ = ["initial_means", "initial_variances", "mstep_chain", "mstep_means",
           "mstep_variances", "EMFit", "fit_em"]


def initial_means(data, n_states, rng):
    """The k-means centres of the training data (``data()``, read here only) as the
    starting means: missing frames left out, missing coordinates of the others at the
    column mean."""
    from sklearn.cluster import KMeans

    km = KMeans(n_clusters=n_states, n_init=10, random_state=int(rng.integers(2**31 - 1)))
    with warnings.catch_warnings():
        # fewer distinct points than states: KMeans says so; the means are still usable
        warnings.filterwarnings("ignore", module="sklearn")
        Xc = data()
        rows = Xc[~np.isnan(Xc).all(axis=1)]
        rows = np.where(np.isnan(rows), np.nanmean(Xc, axis=0), rows)
        return np.ascontiguousarray(km.fit(rows).cluster_centers_, dtype=np.float64)


def initial_variances(data, covariance_type, min_covar):
    """hmmlearn's starting covariance, shared by the states: the variance of each column of
    the training data (``data()``; missing values left out) plus ``min_covar``, averaged over
    the columns for ``"spherical"``.  Returns (n_features,)."""
    Xc = data()
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=RuntimeWarning)   # a column seen once
        v = np.nanvar(Xc, axis=0)
    v = np.where(np.isfinite(v), v, 0.0) + float(min_covar)
    if covariance_type == "spherical":
        v = np.full_like(v, v.mean())
    return np.ascontiguousarray(v, dtype=np.float64)


def mstep_chain(params, stats, offsets, update):
    """New ``(startprob, transmat)`` from the E-step's marginals, for the codes "s" and "t"
    in ``update`` (the others come back as they were)."""
    sp, A = params.startprob, params.transmat
    if "s" in update:
        g0 = stats.gamma[offsets[:-1]].sum(0)
        sp = g0 / g0.sum()
    if "t" in update:
        xi = stats.xi.sum(0)
        rows = xi.sum(1)
        A = np.array(A, dtype=np.float64)
        ok = rows > 0
        A[ok] = xi[ok] / rows[ok, None]
    return np.ascontiguousarray(sp), np.ascontiguousarray(A)


def mstep_means(params, stats, tables):
    """Maximise the bound over the mean tables in ``tables`` (0 = means, 1 = right, 2 =
    left) with Q and the other tables held fixed: one linear solve per output dimension.
    Returns ``(means, right_means, left_means)``; with no tables, the same arrays."""
    if not tables:
        return params.tables
    n = params.n_states
    H = stats.H.sum(0)
    g = stats.g.sum(0)
    idx = np.concatenate([np.arange(k * n, (k + 1) * n) for k in tables])
    theta = np.concatenate(params.tables, axis=0)
    for d in range(theta.shape[1]):
        Hd = H[d]
        rhs = g[d][idx] - Hd[idx] @ theta[:, d]
        theta[idx, d] += np.linalg.lstsq(Hd[np.ix_(idx, idx)], rhs, rcond=1e-12)[0]
    return (np.ascontiguousarray(theta[:n]), np.ascontiguousarray(theta[n:2 * n]),
            np.ascontiguousarray(theta[2 * n:]))


def mstep_variances(params, stats, covariance_type, min_covar):
    """Maximise the bound over the variances with Q and the tables (those of ``params``)
    held fixed: each feature's expected squared residual per observed value (pooled over
    the features for ``"spherical"``), at least ``min_covar`` (the bound is unimodal in
    each variance, so the clipped value is the constrained maximum).  A feature with no
    observed value keeps its variance.  Returns (n_features,)."""
    H, g = stats.H.sum(0), stats.g.sum(0)
    xx, count = stats.xx.sum(0), stats.n_obs.sum(0).astype(np.float64)
    theta = np.concatenate(params.tables, axis=0)          # (3n, D)
    # per feature: xx_d - 2 g_d.theta_d + theta_d.H_d.theta_d, the squared residuals divided
    # by the current variance (precision-weighted statistics)
    quad = np.einsum("id,dij,jd->d", theta, H, theta) - 2.0 * np.einsum("di,id->d", g, theta)
    sq = np.maximum(xx + quad, 0.0) * params.variances    # in the data's units
    v = params.variances.copy()
    if covariance_type == "spherical":
        if count.sum() > 0:
            v[:] = sq.sum() / count.sum()
    else:
        seen = count > 0
        v[seen] = sq[seen] / count[seen]
    return np.ascontiguousarray(np.clip(v, float(min_covar), MAX_VARIANCE))


@dataclass(frozen=True, eq=False)
class EMFit:
    """What :func:`fit_em` learned.

    Parameters
    ----------
    params : HMMParams
        The last parameters kept (in fit's coordinates).
    history : list of float
        The objective of each iteration: Baum-Welch's, then mean-field EM's.
    bw_n_iter : int
        Of which Baum-Welch.
    converged : bool
        Whether the last phase met its tolerance (or could not rise any further).
    last : ChainSolution or None
        The last E-step's answer (None when no E-step ran).
    """

    params: HMMParams
    history: list
    bw_n_iter: int
    converged: bool
    last: ChainSolution


def fit_em(estep, params, *, n_bw, n_mf, tol, update, tables, draw_right, draw_left, scale,
           rng, progress, desc, covariance_type="diag", min_covar=1e-3):
    """Baum-Welch on the first-order model, then mean-field EM, from ``params``.

    Parameters
    ----------
    estep : callable
        ``estep(params, first_order=False, init=None) -> (stats, offsets)``: the E-step's
        :class:`~mfengine.hmm._solve.ChainSolution` (with the M-step statistics; its rows
        ``offsets[:-1]`` of ``gamma`` are first steps, its ``logpot`` the chain's
        potentials, handed back as ``init`` to warm-start the next E-step).
    params : HMMParams
        The starting parameters.
    n_bw, n_mf : int
        Iterations of each phase at most.
    tol : float or None
        Each phase stops when an iteration raises the objective by less than this (total).
    update : str
        The codes of ``params`` that the M-steps update ("s", "t", "m", "c"; the context
        tables are in ``tables``).
    tables : list of int
        The mean tables mean-field EM's M-step updates (0 = means, 1 = right, 2 = left).
    draw_right, draw_left : bool
        Whether the context tables are drawn, with standard deviation ``scale``, from
        ``rng`` at the start of mean-field EM (they are zero during Baum-Welch).
    progress : bool
        Show a progress bar titled ``desc``.
    covariance_type : {"spherical", "diag"}
        The variances' M-step (code "c" in ``update``): one pooled variance or one per
        feature, each at least ``min_covar``.

    Returns
    -------
    EMFit
    """
    n, D = params.n_states, params.n_features
    last = None

    def _with_variances(P, r):
        # after the tables: the joint maximum over both, one coordinate at a time
        if "c" not in update:
            return P
        return P.replace(variances=mstep_variances(P, r, covariance_type, min_covar))

    with progress_bar(total=n_bw + n_mf, desc=desc, disable=not progress) as bar:
        # -- Baum-Welch on the first-order model (context means ignored)
        def bw_e_step(P):
            r, offsets = estep(P, first_order=True)
            return float(r.bound.sum()), (r, offsets)

        def bw_m_step(P, stats):
            r, offsets = stats
            sp, A = mstep_chain(P, r, offsets, update)
            U, _, _ = mstep_means(P, r, [0] if "m" in update else [])
            P = P.replace(startprob=sp, transmat=A, means=U)
            return _with_variances(P, r)

        def bw_record(value, stats):
            bar.update(1)
            bar.set_postfix(phase="baum-welch", loglik=f"{value:.4f}", refresh=False)

        bw = EMMonitor(tol)
        P, _, stats = run_em(params, bw_e_step, bw_m_step, n_bw, bw, last="none",
                             on_record=bw_record)
        if stats is not None:
            last, _ = stats
        history, converged = list(bw.history), bw.converged
        bw_n_iter = len(history)
        # -- mean-field EM, each E-step's coordinate ascent warm-started from the previous
        # chain's potentials
        if n_mf > 0:
            V, W = P.right_means, P.left_means
            if draw_right:
                V = np.ascontiguousarray(scale * rng.standard_normal((n, D)))
            if draw_left:
                W = np.ascontiguousarray(scale * rng.standard_normal((n, D)))
            P = P.replace(right_means=V, left_means=W)
            logpot = None

            def mf_e_step(P):
                r, offsets = estep(P, init=logpot)
                return float(r.bound.sum()), (r, offsets)

            def mf_m_step(P, stats):
                r, offsets = stats
                sp, A = mstep_chain(P, r, offsets, update)
                U, V, W = mstep_means(P, r, tables)
                return _with_variances(HMMParams(sp, A, U, V, W, P.variances), r)

            def mf_fell(saved, P, value, stats):
                # new transitions put the previous Q outside the chain family; with the old
                # ones it is inside, and the new means alone cannot lower the bound
                P_saved, b_saved, stats_saved = saved
                P_old = P.replace(startprob=P_saved.startprob, transmat=P_saved.transmat)
                b, stats = mf_e_step(P_old)
                if not b >= b_saved:
                    return P_saved, b_saved, stats_saved, True   # rounding at the limit
                return P_old, b, stats, False

            def mf_record(value, stats):
                nonlocal logpot
                r, _ = stats
                logpot = r.logpot
                bar.update(1)
                bar.set_postfix(phase="mean-field EM", bound=f"{value:.4f}", refresh=False)

            mf = EMMonitor(tol)
            P, _, stats = run_em(P, mf_e_step, mf_m_step, n_mf, mf, last="check",
                                 fell=mf_fell, on_record=mf_record)
            last, _ = stats
            history += mf.history
            converged = mf.converged
    return EMFit(P, history, bw_n_iter, converged, last)
