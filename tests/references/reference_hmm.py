"""Slow, obviously-right NumPy references for context-sensitive HMMs (Saul & Jordan 1996, eq. 23).

Model: P(s) = pi[s_0] prod A[s_t, s_{t+1}];  x_t ~ N(U[s_t] + V[s_{t+lag}] + W[s_{t-lag}], I),
the V term only with right context and t + lag < T, the W term only with left context and
t - lag >= 0.  ``params`` is a dict with keys pi, A, U, V, W, lag, right, left.

NaN entries of X are missing values: every term that involves them is left out.

Nothing here is fast: the likelihood and every mean-field bound are computed by enumerating all
n^T state sequences (tiny T only), by a log-space forward-backward, or by a forward recursion
over the augmented state written independently of the kernel (dicts of state tuples, each output
emitted when the last state it depends on enters the window).
"""
import itertools

import numpy as np
from scipy.special import logsumexp, xlogy

LAM2_MIN, LAM2_MAX = 1e-6, 1e6   # the kernel's clip of lambda^2 (csrc/mf_hmm.h)


def params_of(h):
    """The parameters of a ContextHMM as a plain dict (unset ones at their defaults: uniform
    startprob_ and transmat_, zero context means)."""
    n, D = h.n_states, np.shape(h.means_)[1]
    get = lambda name, default: np.asarray(default if getattr(h, name, None) is None
                                           else getattr(h, name), float)
    return dict(pi=get("startprob_", np.full(n, 1.0 / n)),
                A=get("transmat_", np.full((n, n), 1.0 / n)),
                U=np.asarray(h.means_, float), V=get("right_means_", np.zeros((n, D))),
                W=get("left_means_", np.zeros((n, D))), lag=h.lag,
                right=h.context in ("right", "both"), left=h.context in ("left", "both"))


def output_means(p, S):
    """(T, D) output means for one state sequence S."""
    S = np.asarray(S)
    T, lag = len(S), p["lag"]
    mean = p["U"][S].copy()
    for t in range(T):
        if p["right"] and t + lag < T:
            mean[t] += p["V"][S[t + lag]]
        if p["left"] and t - lag >= 0:
            mean[t] += p["W"][S[t - lag]]
    return mean


def log_prior(p, S):
    S = np.asarray(S)
    with np.errstate(divide="ignore"):
        return np.log(p["pi"][S[0]]) + np.sum(np.log(p["A"][S[:-1], S[1:]]))


def log_emission(p, X, S):
    """ln p(x | s); NaN entries of X are missing and left out (the model's covariance is the
    identity, so the observed coordinates are Gaussian on their own)."""
    seen = ~np.isnan(X)
    r = (X - output_means(p, S))[seen]
    return -0.5 * np.sum(r * r) - 0.5 * np.count_nonzero(seen) * np.log(2 * np.pi)


def all_paths(n, T):
    return [np.array(S) for S in itertools.product(range(n), repeat=T)]


def brute_force_loglik(p, X):
    """ln P(x) by summing P(s, x) over all n^T state sequences."""
    n = len(p["pi"])
    return logsumexp([log_prior(p, S) + log_emission(p, X, S) for S in all_paths(n, len(X))])


def forward_backward(pi, A, logpot):
    """Log-space forward-backward for Q(s) ~ pi[s_0] prod A prod exp(logpot[t, s_t]).

    Returns gamma (T, n), the summed pairwise marginals (n, n) and ln Z.
    """
    T, n = logpot.shape
    with np.errstate(divide="ignore"):
        lpi, lA = np.log(pi), np.log(A)
    la = np.empty((T, n))
    lb = np.zeros((T, n))
    la[0] = lpi + logpot[0]
    for t in range(1, T):
        la[t] = logsumexp(la[t - 1][:, None] + lA, axis=0) + logpot[t]
    for t in range(T - 2, -1, -1):
        lb[t] = logsumexp(lA + (logpot[t + 1] + lb[t + 1])[None, :], axis=1)
    lz = logsumexp(la[-1])
    gamma = np.exp(la + lb - lz)
    xi = np.zeros((n, n))
    for t in range(T - 1):
        xi += np.exp(la[t][:, None] + lA + (logpot[t + 1] + lb[t + 1])[None, :] - lz)
    return gamma, xi, lz


def first_order_loglik(pi, A, U, X):
    """ln P(x) of a first-order HMM with unit-covariance Gaussian outputs of means U."""
    D = X.shape[1]
    logpot = -0.5 * ((X[:, None, :] - U[None]) ** 2).sum(-1) - 0.5 * D * np.log(2 * np.pi)
    return forward_backward(pi, A, logpot)[2]


def augmented_loglik(p, X):
    """ln P(x) by a forward recursion over tuples of the last w states (w = 1 + lag per context).

    Output x_t is emitted as soon as the latest state it depends on (s_{t+lag} with right
    context, else s_t) has entered the window.
    """
    n, T, lag = len(p["pi"]), len(X), p["lag"]
    w = min(T, 1 + lag * (p["right"] + p["left"]))
    D = X.shape[1]
    with np.errstate(divide="ignore"):
        lpi, lA = np.log(p["pi"]), np.log(p["A"])

    def emit(t, states_by_time):
        m = p["U"][states_by_time[t]].copy()
        if p["right"] and t + lag < T:
            m = m + p["V"][states_by_time[t + lag]]
        if p["left"] and t - lag >= 0:
            m = m + p["W"][states_by_time[t - lag]]
        r = X[t] - m
        seen = ~np.isnan(r)   # missing coordinates left out
        return -0.5 * r[seen] @ r[seen] - 0.5 * np.count_nonzero(seen) * np.log(2 * np.pi)

    def last_needed(t):
        return min(T - 1, t + lag) if p["right"] else t

    emitted_at = {}
    for t in range(T):
        emitted_at.setdefault(last_needed(t), []).append(t)
    # alpha over tuples (s_{u-w+1} .. s_u) (shorter at the start)
    alpha = {(s,): lpi[s] for s in range(n)}
    for u in range(T):
        if u > 0:
            new = {}
            for key, val in alpha.items():
                for s in range(n):
                    k2 = (key + (s,))[-w:]
                    v = val + lA[key[-1], s]
                    new[k2] = np.logaddexp(new.get(k2, -np.inf), v)
            alpha = new
        if u in emitted_at:
            for key in alpha:
                by_time = {u - len(key) + 1 + j: s for j, s in enumerate(key)}
                alpha[key] = alpha[key] + sum(emit(t, by_time) for t in emitted_at[u])
    return logsumexp(list(alpha.values()))


# ------------------------------------------------------------------------------------------
# mean-field bounds by enumeration

def _pairs(p, T):
    """Couplings -a(s_sa) . b(s_sb): (table_a, sa, table_b, sb) for every output."""
    out, lag = [], p["lag"]
    for t in range(T):
        r = p["right"] and t + lag < T
        l_ = p["left"] and t - lag >= 0
        if r:
            out.append(("U", t, "V", t + lag))
        if l_:
            out.append(("U", t, "W", t - lag))
        if r and l_:
            out.append(("V", t + lag, "W", t - lag))
    return out


def _site_terms(p, X):
    """e[t, i]: the terms of ln p(x | s) that involve s_t alone (kernel's split, rewritten);
    missing (NaN) coordinates contribute nothing."""
    T, lag = len(X), p["lag"]
    U, V, W = p["U"], p["V"], p["W"]
    M = (~np.isnan(X)).astype(float)
    X0 = np.where(np.isnan(X), 0.0, X)
    e = X0 @ U.T - 0.5 * M @ (U * U).T
    for t in range(T):
        if p["right"] and t >= lag:
            e[t] += X0[t - lag] @ V.T - 0.5 * M[t - lag] @ (V * V).T
        if p["left"] and t + lag < T:
            e[t] += X0[t + lag] @ W.T - 0.5 * M[t + lag] @ (W * W).T
    return e


def _output_of(ta, sa, sb):
    """The output whose mean holds the coupling (ta at sa, other end at sb)."""
    return sa if ta == "U" else (sa + sb) // 2


def naive_elbo(p, X, q):
    """E_q[ln P(s, x)] + H(q) for the product distribution q (T, n), by enumeration."""
    T, n = q.shape
    total = 0.0
    for S in all_paths(n, T):
        w = np.prod(q[np.arange(T), S])
        if w == 0.0:
            continue
        total += w * (log_prior(p, S) + log_emission(p, X, S))
    return total - np.sum(xlogy(q, q))


def chain_q(p, logpot):
    """All paths and their probabilities under Q(s) ~ P(s) prod exp(logpot[t, s_t])."""
    T, n = logpot.shape
    paths = all_paths(n, T)
    lw = np.array([log_prior(p, S) + logpot[np.arange(T), S].sum() for S in paths])
    lq = lw - logsumexp(lw)
    return paths, np.exp(lq), lq


def link_value(abar, bbar, va, vb, lam2=None):
    """Best value of the link variable's part of the bound, for one coupling and dimension.

    With z ~ N(m, 1): E[lam z a - lam^2 a^2 / 2 - z b / lam - b^2 / (2 lam^2)] - m^2 / 2 at
    m = lam abar - bbar / lam (written out, not simplified).  lam2 None: the kernel's rule.
    """
    if lam2 is None:
        if va > 0 and vb > 0:
            lam2 = np.sqrt(vb / va)
        elif va > 0:
            lam2 = LAM2_MIN
        elif vb > 0:
            lam2 = LAM2_MAX
        else:
            lam2 = 1.0
        lam2 = min(max(lam2, LAM2_MIN), LAM2_MAX)
    lam = np.sqrt(lam2)
    m = lam * abar - bbar / lam
    Ea2, Eb2 = va + abar ** 2, vb + bbar ** 2
    return lam * m * abar - 0.5 * lam2 * Ea2 - m * bbar / lam - 0.5 * Eb2 / lam2 - 0.5 * m * m


def _const_col(tab, d):
    return np.all(tab[:, d] == tab[0, d])


def link_bound(p, X, logpot):
    """The link bound of the chain Q ~ P(s) prod exp(logpot), links at their optimum.

    E_Q[ln P(s)] + H(Q) + E_Q[site terms] by enumeration, plus for each coupling and dimension
    the link value (or -abar bbar when one end's column is constant over states: then the
    coupling is a single-site term and needs no link).  Returns (bound, gamma).
    """
    T, n = logpot.shape
    D = X.shape[1]
    paths, q, lq = chain_q(p, logpot)
    e = _site_terms(p, X)
    gamma = np.zeros((T, n))
    seen = ~np.isnan(X)
    val = -0.5 * np.sum(X[seen] ** 2) - 0.5 * np.count_nonzero(seen) * np.log(2 * np.pi)
    for S, w, l in zip(paths, q, lq):
        gamma[np.arange(T), S] += w
        if w > 0:
            val += w * (log_prior(p, S) - l + e[np.arange(T), S].sum())
    tabs = {"U": p["U"], "V": p["V"], "W": p["W"]}
    for ta, sa, tb, sb in _pairs(p, T):
        A, B = tabs[ta], tabs[tb]
        for d in range(D):
            if np.isnan(X[_output_of(ta, sa, sb), d]):
                continue
            abar, bbar = gamma[sa] @ A[:, d], gamma[sb] @ B[:, d]
            if _const_col(A, d) or _const_col(B, d):
                val -= abar * bbar
                continue
            va = gamma[sa] @ (A[:, d] - abar) ** 2
            vb = gamma[sb] @ (B[:, d] - bbar) ** 2
            val += link_value(abar, bbar, va, vb)
    return val, gamma


def exact_elbo(p, X, logpot):
    """E_Q[ln P(s, x)] + H(Q) for the chain Q ~ P(s) prod exp(logpot), by enumeration."""
    paths, q, lq = chain_q(p, logpot)
    return sum(w * (log_prior(p, S) + log_emission(p, X, S) - l)
               for S, w, l in zip(paths, q, lq) if w > 0)


def chain_pair_marginals(p, logpot, k):
    """sum_t Q(s_t = i, s_{t+k} = j) over t = 0 .. T-1-k, by enumeration."""
    T, n = logpot.shape
    paths, q, _ = chain_q(p, logpot)
    out = np.zeros((n, n))
    for S, w in zip(paths, q):
        for t in range(T - k):
            out[S[t], S[t + k]] += w
    return out


def coordinate_sweep(p, X, logpot):
    """One sweep t = 0 .. T-1 of exact coordinate maximisation of exact_elbo over logpot[t].

    Changing logpot[t] alone re-weights Q's marginal of s_t and keeps Q(rest | s_t), so
    exact_elbo = sum_i r_i E_Q[ln P(s, x) - ln Q(rest | s_t = i) | s_t = i] + H(r) in the new
    marginal r, maximised by r_i ~ exp(that expectation); the potentials giving it are
    logpot[t, i] = E_Q[ln p(x | s) - sum_{u != t} logpot[u, s_u] | s_t = i] (up to a constant).
    Every expectation by enumeration.
    """
    h = np.array(logpot, dtype=float)
    T, n = h.shape
    paths = all_paths(n, T)
    P = np.array(paths)
    le = np.array([log_emission(p, X, S) for S in paths])
    for t in range(T):
        _, q, _ = chain_q(p, h)
        others = le - (h[np.arange(T)[None, :], P].sum(1) - h[t, P[:, t]])
        new = np.zeros(n)
        for i in range(n):
            sel = (P[:, t] == i) & (q > 0)
            new[i] = np.sum(q[sel] * others[sel]) / np.sum(q[sel]) if np.any(sel) else 0.0
        h[t] = new - new.max()
    return h


# ------------------------------------------------------------------------------------------
# the iterations, slowly

def naive_solve(p, X, q0, max_sweeps=200, tol=1e-10):
    """Fully factorised mean field by enumeration: q_t <- exp(E_{q_-t}[ln P(s_t = i, ...)]),
    sweeping forward on even sweeps and backward on odd ones, from q0."""
    q = q0.copy()
    T, n = q.shape
    paths = all_paths(n, T)
    lp = np.array([log_prior(p, S) + log_emission(p, X, S) for S in paths])
    P = np.array(paths)
    hist = [naive_elbo(p, X, q)]
    for sweep in range(max_sweeps):
        order = range(T) if sweep % 2 == 0 else range(T - 1, -1, -1)
        for t in order:
            others = [u for u in range(T) if u != t]
            if others:
                w = np.prod(q[np.array(others)[None, :], P[:, others]], axis=1)
            else:
                w = np.ones(len(paths))
            pot = np.full(n, -np.inf)
            for i in range(n):
                sel = P[:, t] == i
                ww, ll = w[sel], lp[sel]
                ok = ww > 0
                if np.all(np.isfinite(ll[ok])):
                    pot[i] = np.sum(ww[ok] * ll[ok])
            q[t] = np.exp(pot - logsumexp(pot))
        hist.append(naive_elbo(p, X, q))
        if hist[-1] - hist[-2] <= tol * T:
            break
    return q, hist


def link_solve(p, X, init=None, max_sweeps=200, tol=1e-10):
    """The link-bound iteration by enumeration, with explicit link means m and scales lambda.

    From ``init`` marginals (or the first-order posterior): links set from the marginals, the
    chain Q re-solved with the potentials E_z[ln A(s, z)], E_z[ln B(s', z)], repeated until the
    bound rises by at most tol * T.  Returns (bound, gamma, history).
    """
    T = len(X)
    D = X.shape[1]
    e = _site_terms(p, X)
    n = e.shape[1]
    tabs = {"U": p["U"], "V": p["V"], "W": p["W"]}
    pairs = _pairs(p, T)
    logpot = e.copy()
    if init is None:
        bound, gamma = link_bound(p, X, logpot)
        hist = [bound]
    else:
        gamma, hist = init, []
    for _ in range(max_sweeps + (init is not None)):
        logpot = e.copy()
        for ta, sa, tb, sb in pairs:
            A, B = tabs[ta], tabs[tb]
            for d in range(D):
                if np.isnan(X[_output_of(ta, sa, sb), d]):
                    continue
                abar, bbar = gamma[sa] @ A[:, d], gamma[sb] @ B[:, d]
                if _const_col(A, d) or _const_col(B, d):
                    logpot[sa] -= bbar * A[:, d]
                    logpot[sb] -= abar * B[:, d]
                    continue
                va = gamma[sa] @ (A[:, d] - abar) ** 2
                vb = gamma[sb] @ (B[:, d] - bbar) ** 2
                lam2 = np.sqrt(vb / va) if va > 0 and vb > 0 else (LAM2_MIN if va > 0 else LAM2_MAX)
                lam2 = min(max(lam2, LAM2_MIN), LAM2_MAX)
                lam = np.sqrt(lam2)
                m = lam * abar - bbar / lam
                logpot[sa] += lam * m * A[:, d] - 0.5 * lam2 * A[:, d] ** 2
                logpot[sb] += -m / lam * B[:, d] - 0.5 * B[:, d] ** 2 / lam2
        bound, gamma = link_bound(p, X, logpot)
        hist.append(bound)
        if not pairs or (len(hist) > 1 and hist[-1] - hist[-2] <= tol * T):
            break
    return hist[-1], gamma, hist
