"""Exact ln P(x) of small belief nets by enumeration (the oracle of every bound): the
log-probabilities of complete states and their sums over the free units, written stably."""
import numpy as np
from scipy.special import logsumexp

__all__ = ["MAX_ENUMERATED_HIDDEN", "log_probs", "sum_log_probs", "log_joint_checked",
           "log_sum_states", "finite_log_p", "layered_log_joint_top", "layered_log_likelihood"]

#: Largest number of hidden units that ``exact_log_likelihood`` enumerates by default
#: (2**20 joint hidden states).
MAX_ENUMERATED_HIDDEN = 20


def log_probs(z, activation):
    """ln f(z) and ln(1 - f(z)), stably (for noisy-OR, ln f(0) = -inf)."""
    if activation == "sigmoid":
        return -np.logaddexp(0.0, -z), -np.logaddexp(0.0, z)
    # noisy-OR: f = 1 - e^{-z}; ln f = log(-expm1(-z)), ln(1 - f) = -z
    with np.errstate(divide="ignore"):
        return np.log(-np.expm1(-z)), -z


_LOG_P_OVERFLOW = ("a log-probability is below -1.8e308, beyond the range of float64: the "
                   "weights (W_) and biases (h_) are too large in magnitude for the "
                   "log-probabilities of the units to be summed")


def sum_log_probs(S, l1, l0):
    """ln P of configurations: the sum over units of ln f(z) (units on) or ln(1 - f(z)) (off),
    0 * (-inf) counting as 0 (a noisy-OR unit with z = 0 is off for sure).  Returns the sums
    and where a sum of finite terms left the double range (weights and biases near 1e308):
    there the -inf would wrongly say that the configuration is impossible."""
    terms = np.where(S > 0, l1, 0.0) + np.where(S > 0, 0.0, l0)
    with np.errstate(over="ignore"):
        total = np.sum(terms, axis=-1)
    overflow = ~np.isfinite(total)
    if np.any(overflow):
        overflow &= np.all(np.isfinite(terms), axis=-1)
    return total, overflow


def log_joint_checked(parts):
    """The sums of ``sum_log_probs``, refused where one left the double range."""
    total, overflow = parts
    if np.any(overflow):
        raise OverflowError(f"log_joint: {_LOG_P_OVERFLOW}")
    return total


def log_sum_states(parts, axis):
    """ln of the sum over states (``axis``) of P, from ``sum_log_probs``: a state whose ln P
    overflowed adds nothing where another one is finite; where none is, the sum itself is out
    of range and refused."""
    lp, overflow = parts
    out = logsumexp(lp, axis=axis)
    if np.any(np.isneginf(out) & np.any(overflow, axis=axis)):
        raise OverflowError(f"exact_log_likelihood: {_LOG_P_OVERFLOW}")
    return out


def finite_log_p(log_p, where):
    """``log_p``, refused where it is not finite: a sigmoid net gives every configuration
    a finite log-probability, so -inf or NaN means that a sum left the double range."""
    if not np.all(np.isfinite(log_p)):
        raise OverflowError(
            f"{where}: a log-probability is beyond the range of float64 (below -1.8e308, "
            "or a unit's input is): the weights (weights_) and biases (biases_) are too "
            "large in magnitude for the log-probabilities of the units to be summed")
    return log_p

def layered_log_joint_top(weights, biases, layers):
    """ln P of the top ``len(layers)`` layers' states (the layers below summed out)."""
    z = np.broadcast_to(biases[0], layers[0].shape)
    total = np.sum(layers[0] * z - np.logaddexp(0.0, z), axis=1)
    for l in range(len(layers) - 1):
        z = layers[l] @ weights[l].T + biases[l + 1]
        total += np.sum(layers[l + 1] * z - np.logaddexp(0.0, z), axis=1)
    return total


def log_sigmoid(x):
    """ln sigmoid(x), stably."""
    return -np.logaddexp(0.0, -x)


@np.errstate(over="ignore", invalid="ignore")     # a sum out of range is refused at the end
def layered_log_likelihood(weights, biases, V, miss):
    """Exact ln P(v) per pattern of a layered sigmoid net (checked parameters and data; the
    missing entries of ``miss`` summed out), by enumerating the states of the hidden layers:
    the layers above the last hidden one are summed out into its prior, in chunks."""
    H = sum(b.shape[0] for b in biases[:-1])
    obs = None if miss is None else 1.0 - miss
    Vz = np.where(np.isfinite(V), V, 0.0)
    sizes = tuple(b.shape[0] for b in biases)
    nh_last = sizes[-2]
    n_upper = H - nh_last
    # log prior of every state of the last hidden layer, summing out the layers above
    last_states = ((np.arange(2**nh_last)[:, None] >> np.arange(nh_last)) & 1).astype(np.float64)
    if n_upper == 0:
        z = biases[0]
        log_prior_last = last_states @ z - np.sum(np.logaddexp(0.0, z))
    else:
        log_prior_last = np.full(2**nh_last, -np.inf)
        chunk = max(1, 2**16 // 2**nh_last)
        codes_all = np.arange(2**n_upper)
        for start in range(0, 2**n_upper, chunk):
            codes = codes_all[start : start + chunk]
            bits = ((codes[:, None] >> np.arange(n_upper)) & 1).astype(np.float64)
            layers, off = [], 0
            for n in sizes[:-2]:
                layers.append(bits[:, off : off + n])
                off += n
            lp_upper = layered_log_joint_top(weights, biases, layers)
            # ln P(last layer = k | layer above = u) for every (k, u) pair
            zl = layers[-1] @ weights[-2].T + biases[-2]  # (chunk, nh_last)
            lp = last_states @ zl.T - np.sum(np.logaddexp(0.0, zl), axis=1)[None, :]
            lp = lp + lp_upper[None, :]  # (2**nh_last, chunk)
            log_prior_last = np.logaddexp(log_prior_last, logsumexp(lp, axis=1))
    zv = last_states @ weights[-1].T + biases[-1]  # (2^nl, n_vis)
    ls1, ls0 = log_sigmoid(zv), log_sigmoid(-zv)
    out = np.empty(V.shape[0])
    step = max(1, 2**22 // max(1, 2**nh_last))
    for start in range(0, V.shape[0], step):
        v = Vz[start : start + step]
        if obs is None:
            ll = v @ ls1.T + (1.0 - v) @ ls0.T
        else:
            o = obs[start : start + step]
            ll = (v * o) @ ls1.T + ((1.0 - v) * o) @ ls0.T
        out[start : start + step] = logsumexp(ll + log_prior_last[None, :], axis=1)
    return finite_log_p(out, "exact_log_likelihood")


def _zs(W, h, S):
    """The units' inputs z = W s + h of the states S (..., n_units), W dense or sparse."""
    if hasattr(W, "tocsr"):
        flat = S.reshape(-1, S.shape[-1])
        return np.asarray((W @ flat.T).T).reshape(S.shape) + h
    return S @ W.T + h


def dag_posterior(W, h, activation, visible, V, miss, max_hidden):
    """Exact ln P(v) and posterior means of every unit of one DAG net, by enumerating the
    joint states of its free units (the hidden ones and, per pattern, the missing visible
    ones): ``(log_p (n,), mu (n, n_units))``; an observed unit's mean is its value.

    ``W`` (dense or sparse), ``h``, ``visible`` (bool mask) are the checked parameters; ``V``
    (n, n_visible) the checked data, ``miss`` its missing mask (bool) or None.  Refuses (a
    ValueError naming ``max_hidden``) a pattern with more than ``max_hidden`` free units."""
    n_units = h.shape[0]
    vis = np.flatnonzero(visible)
    n = V.shape[0]
    log_p, mu = np.empty(n), np.empty((n, n_units))
    Vz = np.where(np.isfinite(V), V, 0.0)
    if miss is None:
        groups = [(np.zeros(vis.size, dtype=bool), np.arange(n))]
    else:
        keys, inverse = np.unique(miss, axis=0, return_inverse=True)
        groups = [(keys[g], np.flatnonzero(inverse.ravel() == g)) for g in range(len(keys))]
    for mask, rows in groups:
        free = ~visible.copy()
        free[vis[mask]] = True
        summed, clamped = np.flatnonzero(free), vis[~mask]
        K = summed.size
        if K > max_hidden:
            raise ValueError(f"exact inference by enumeration sums over 2**{K} joint states of "
                             f"the hidden and missing units, above max_hidden={max_hidden}; "
                             "exact inference of larger nets needs a bipartite noisy-OR net "
                             "(diseases and findings)")
        states = ((np.arange(2**K)[:, None] >> np.arange(K)) & 1).astype(np.float64)
        chunk = max(1, 2**21 // max(1, 2**K * n_units))
        for a in range(0, rows.size, chunk):
            r = rows[a:a + chunk]
            S = np.empty((r.size, 2**K, n_units))
            S[:, :, summed] = states[None, :, :]
            S[:, :, clamped] = Vz[r][:, ~mask][:, None, :]
            with np.errstate(over="ignore", invalid="ignore"):
                l1, l0 = log_probs(_zs(W, h, S), activation)
                lp, overflow = sum_log_probs(S, l1, l0)
            lpx = log_sum_states((lp, overflow), axis=1)
            log_p[r] = lpx
            with np.errstate(invalid="ignore", under="ignore"):
                wts = np.exp(lp - lpx[:, None])
            mu[r] = np.einsum("ck,cku->cu", wts, S)
    return log_p, mu
