"""Slow, obviously-right NumPy/SciPy references for nonlinear Gaussian belief networks.

Everything here follows Frey & Hinton (1999) literally: M and V by the closed forms of
Appendix C (and by numerical integration of eqs. 6-7), the bound by eq. 8, its gradient by
eq. 12, an E-step by SciPy's L-BFGS on the whole bound, the sufficient statistics by eq. 13 and
the M-step by eqs. 14-15 solved unit by unit.  None of it calls the compiled kernel.
"""
import functools

import numpy as np
from scipy import integrate, optimize
from scipy.special import ndtr
from scipy.stats import norm

TYPES = ("linear", "binary", "rectified", "sigmoidal")


def unit_output(kind, x):
    if kind == "linear":
        return x
    if kind == "binary":
        return 1.0 if x >= 0 else 0.0
    if kind == "rectified":
        return max(x, 0.0)
    return float(ndtr(x))


def moments_quad(kind, mu, sigma):
    """(M, V) of f(x), x ~ N(mu, sigma^2), by adaptive quadrature (eqs. 6-7); the kink of the
    binary and rectified functions at 0 is passed to the integrator."""
    lo, hi = mu - 14 * sigma, mu + 14 * sigma
    pts = [0.0] if lo < 0.0 < hi else None

    def integral(g):
        return integrate.quad(
            lambda x: norm.pdf(x, mu, sigma) * g(x), lo, hi, points=pts, epsabs=1e-15,
            epsrel=1e-12, limit=400,
        )[0]

    M = integral(lambda x: unit_output(kind, x))
    V = integral(lambda x: (unit_output(kind, x) - M) ** 2)
    return M, V


def moments(kind, mu, s):
    """M and V of Appendix C (V' of eq. 27 for sigmoidal units), vectorised; s = log sigma^2."""
    mu = np.asarray(mu, dtype=float)
    sig = np.exp(0.5 * np.asarray(s, dtype=float))
    if kind == "linear":
        return mu, sig**2
    if kind == "binary":
        t = mu / sig
        return ndtr(t), ndtr(t) * ndtr(-t)
    if kind == "rectified":
        t = mu / sig
        M = mu * ndtr(t) + sig * norm.pdf(t)
        V = (mu**2 + sig**2) * ndtr(t) + mu * sig * norm.pdf(t) - M**2
        return M, V
    tau = mu / np.sqrt(1.0 + sig**2)
    M = ndtr(tau)
    return M, ndtr(tau) * ndtr(-tau) * sig**2 / (sig**2 + np.pi / 2)


def _sizes(net):
    """Layer sizes of a fitted (or parameterised) network, from its biases."""
    return tuple(b.shape[0] for b in net.biases_)


def _split(net):
    offs = np.concatenate([[0], np.cumsum(_sizes(net))])
    return offs


def bound(net, X, mu_h, s_h):
    """F of eq. 8 per pattern; mu_h, s_h (n, n_hidden), layers concatenated top first."""
    X = np.asarray(X, dtype=float)
    sizes = _sizes(net)
    L = len(sizes)
    offs = _split(net)
    n = X.shape[0]
    F = np.zeros(n)
    Ms, Vs = [], []
    for l in range(L):
        if l < L - 1:
            mu = mu_h[:, offs[l]:offs[l + 1]]
            s = s_h[:, offs[l]:offs[l + 1]]
            M = np.empty_like(mu)
            V = np.empty_like(mu)
            for k, kind in enumerate(net.units_[l]):
                M[:, k], V[:, k] = moments(kind, mu[:, k], s[:, k])
        else:
            mu, s, M, V = X, None, None, None
        psi2 = net.variances_[l]
        net_in = net.biases_[l] + (Ms[-1] @ net.weights_[l - 1].T if l > 0 else 0.0)
        spread = Vs[-1] @ (net.weights_[l - 1] ** 2).T if l > 0 else 0.0
        F -= (((mu - net_in) ** 2 + spread) / (2.0 * psi2)).sum(axis=1)
        F -= 0.5 * np.log(2.0 * np.pi * psi2).sum()
        if s is not None:
            F += (0.5 * (1.0 + np.log(2.0 * np.pi) + s - np.exp(s) / psi2)).sum(axis=1)
        Ms.append(M)
        Vs.append(V)
    return F


def _moment_grads(kind, mu, s):
    """dM/dmu, dM/ds, dV/dmu, dV/ds of the Appendix C formulas, as printed there (App. C eqs.
    18, 22, 28), except the rectified dV/d log sigma^2, whose printed form sigma^2 Phi -
    sigma M Phi has Phi where the derivative of eq. 24 has phi: sigma^2 Phi - sigma M phi."""
    sig = np.exp(0.5 * s)
    if kind == "linear":
        one = np.ones_like(mu)
        return one, 0.0 * one, 0.0 * one, sig**2
    if kind == "binary":
        t = mu / sig
        p, P = norm.pdf(t), ndtr(t)
        return p / sig, -mu / (2 * sig) * p, p / sig * (1 - 2 * P), -mu / (2 * sig) * p * (1 - 2 * P)
    if kind == "rectified":
        t = mu / sig
        p, P = norm.pdf(t), ndtr(t)
        M = mu * P + sig * p
        return P, sig / 2 * p, 2 * mu * P + 2 * sig * p - 2 * M * P, sig**2 * P - sig * M * p
    r = np.sqrt(1 + sig**2)
    tau = mu / r
    p, P = norm.pdf(tau), ndtr(tau)
    c = sig**2 / (sig**2 + np.pi / 2)
    Mmu = p / r
    Ms = -mu * sig**2 / (2 * r**3) * p
    Vmu = c / r * p * (1 - 2 * P)
    Vs = c * ((np.pi / 2) / (sig**2 + np.pi / 2) * P * (1 - P) - mu * sig**2 / (2 * r**3) * p * (1 - 2 * P))
    return Mmu, Ms, Vmu, Vs


def gradient(net, X, mu_h, s_h):
    """dF/dmu and dF/d log sigma^2 of eq. 12, (n, n_hidden) each."""
    sizes = _sizes(net)
    L = len(sizes)
    offs = _split(net)
    H = offs[L - 1]
    n = X.shape[0]
    M = np.zeros((n, H))
    dd = {}
    for l in range(L - 1):
        for k, kind in enumerate(net.units_[l]):
            i = offs[l] + k
            M[:, i], _ = moments(kind, mu_h[:, i], s_h[:, i])
            dd[i] = _moment_grads(kind, mu_h[:, i], s_h[:, i])
    gmu = np.zeros((n, H))
    gs = np.zeros((n, H))
    # residual e_i = (n_i - mu_i) / psi_i^2 for every unit
    resid = []
    for l in range(L):
        mu = X if l == L - 1 else mu_h[:, offs[l]:offs[l + 1]]
        net_in = net.biases_[l] + (M[:, offs[l - 1]:offs[l]] @ net.weights_[l - 1].T if l > 0 else 0.0)
        resid.append((net_in - mu) / net.variances_[l])
    for l in range(L - 1):
        W = net.weights_[l]
        back = resid[l + 1] @ W                        # sum_c w_cj (n_c - mu_c) / psi_c^2
        back2 = (W**2 / (2 * net.variances_[l + 1][:, None])).sum(axis=0)
        for k in range(sizes[l]):
            i = offs[l] + k
            Mmu, Ms, Vmu, Vs = dd[i]
            gmu[:, i] = resid[l][:, k] - Mmu * back[:, k] - Vmu * back2[k]
            gs[:, i] = (-Vs * back2[k] - Ms * back[:, k]
                        - np.exp(s_h[:, i]) / (2 * net.variances_[l][k]) + 0.5)
    return gmu, gs


def estep(net, X, mu0, s0, gtol=1e-10):
    """Maximise eq. 8 over (mu, log sigma^2) of every hidden unit of each pattern with L-BFGS,
    from (mu0, s0).  Returns mu, s, F."""
    H = mu0.shape[1]
    mu_out, s_out, F = np.empty_like(mu0), np.empty_like(s0), np.empty(X.shape[0])
    for p in range(X.shape[0]):
        x = X[p:p + 1]

        def fun(z):
            m, s = z[:H][None], z[H:][None]
            gm, gs = gradient(net, x, m, s)
            return -bound(net, x, m, s)[0], -np.concatenate([gm[0], gs[0]])

        res = optimize.minimize(fun, np.concatenate([mu0[p], s0[p]]), jac=True, method="L-BFGS-B",
                                options=dict(maxiter=20000, gtol=gtol, ftol=1e-15, maxcor=30))
        mu_out[p], s_out[p] = res.x[:H], res.x[H:]
        F[p] = -res.fun
    return mu_out, s_out, F


def sufficient_statistics(net, X, mu_h, s_h):
    """The averages of eq. 13 as dicts keyed by layer: a[l] ((P+1)x(P+1), index 0 = bias),
    b[l] (P,), c[l] (C x (P+1)) for the boundary l -> l+1; plus per layer the means of mu,
    mu^2 and sigma^2."""
    L = len(_sizes(net))
    offs = _split(net)
    T = X.shape[0]
    out = {"a": [], "b": [], "c": [], "mu": [], "mu2": [], "s2": []}
    layers_mu = [mu_h[:, offs[l]:offs[l + 1]] for l in range(L - 1)] + [X]
    for l in range(L):
        out["mu"].append(layers_mu[l].mean(axis=0))
        out["mu2"].append((layers_mu[l] ** 2).mean(axis=0))
        out["s2"].append(np.exp(s_h[:, offs[l]:offs[l + 1]]).mean(axis=0) if l < L - 1
                         else np.zeros(_sizes(net)[l]))
    for l in range(L - 1):
        M = np.empty((T, _sizes(net)[l]))
        V = np.empty((T, _sizes(net)[l]))
        for k, kind in enumerate(net.units_[l]):
            M[:, k], V[:, k] = moments(kind, mu_h[:, offs[l] + k], s_h[:, offs[l] + k])
        mt = np.hstack([np.ones((T, 1)), M])
        out["a"].append(mt.T @ mt / T)
        out["b"].append(V.mean(axis=0))
        out["c"].append(layers_mu[l + 1].T @ mt / T)
    return out


def m_step(net, st, min_variance=0.01):
    """Eq. 14 unit by unit (SVD least squares), then eq. 15 with d_j at the new weights.
    Returns (weights, biases, variances) lists."""
    L = len(_sizes(net))
    weights, biases, variances = [], [st["mu"][0].copy()], [
        st["mu2"][0] - st["mu"][0] ** 2 + st["s2"][0]
    ]
    for l in range(L - 1):
        a, b, c = st["a"][l], np.concatenate([[0.0], st["b"][l]]), st["c"][l]
        W = np.empty((_sizes(net)[l + 1], _sizes(net)[l]))
        bias = np.empty(_sizes(net)[l + 1])
        psi2 = np.empty(_sizes(net)[l + 1])
        for i in range(_sizes(net)[l + 1]):
            K = a + np.diag(b)
            w = np.linalg.lstsq(K, c[i], rcond=None)[0]
            bias[i], W[i] = w[0], w[1:]
            d = st["mu2"][l + 1][i] - 2 * w @ c[i] + w @ a @ w
            psi2[i] = d + st["s2"][l + 1][i] + (w**2 * b).sum()
        weights.append(W)
        biases.append(bias)
        variances.append(psi2)
    variances = [np.maximum(v, min_variance if l == L - 1 else 1e-6) for l, v in enumerate(variances)]
    return weights, biases, variances


def log_marginal_one_hidden(net, X):
    """Exact log p(x) of a net with ONE hidden unit (any type) and linear visible units, by
    numerical integration over the hidden pre-activation (for a binary unit: the two-component
    mixture)."""
    (kind,) = net.units_[0]
    b, psi2 = net.biases_[0][0], net.variances_[0][0]
    w, c, vv = net.weights_[0][:, 0], net.biases_[1], net.variances_[1]

    def log_lik(x, f):
        return norm.logpdf(x, c + w * f, np.sqrt(vv)).sum()

    out = np.empty(X.shape[0])
    for p, x in enumerate(X):
        if kind == "binary":
            p1 = ndtr(b / np.sqrt(psi2))
            out[p] = np.logaddexp(np.log1p(-p1) + log_lik(x, 0.0), np.log(p1) + log_lik(x, 1.0))
            continue
        # integrate exp(log p(h) + log p(x | h) - ref) for stability
        grid = np.linspace(b - 12 * np.sqrt(psi2), b + 12 * np.sqrt(psi2), 4001)
        vals = np.array([norm.logpdf(h, b, np.sqrt(psi2)) + log_lik(x, unit_output(kind, h)) for h in grid])
        ref = vals.max()
        pts = [0.0] if grid[0] < 0 < grid[-1] else None
        val = integrate.quad(
            lambda h: np.exp(norm.logpdf(h, b, np.sqrt(psi2)) + log_lik(x, unit_output(kind, h)) - ref),
            grid[0], grid[-1], points=pts, limit=400, epsrel=1e-11,
        )[0]
        out[p] = ref + np.log(val)
    return out


@functools.lru_cache(maxsize=8)
def _leggauss(n):
    return np.polynomial.legendre.leggauss(n)


def _gl_nodes(lo, hi, n, kink=0.0):
    """Gauss-Legendre nodes and weights on [lo, hi], split at ``kink`` when it lies inside."""
    x, w = _leggauss(n)
    pieces = [(lo, kink), (kink, hi)] if lo < kink < hi else [(lo, hi)]
    nodes, weights = [], []
    for a, b in pieces:
        nodes.append(0.5 * (b - a) * x + 0.5 * (a + b))
        weights.append(0.5 * (b - a) * w)
    return np.concatenate(nodes), np.concatenate(weights)


def log_marginal_quadrature(net, X, n_nodes=None, width=10.0):
    """Exact ln p(x) of a two-layer net with one or two hidden units (any types) and linear
    visible units, by Gauss-Legendre quadrature over each hidden pre-activation (the interval
    mean +- ``width`` sd, split at 0 where the unit's output has its kink), tensor product for
    two units; NaN entries of X are missing (left out).  Accurate to ~1e-10 relative for the
    moderate weights and variances of the tests."""
    H, logw, mean, sd = _quadrature_grid(net, n_nodes, width)
    return np.array([np.logaddexp.reduce(a) for a in _log_joint(logw, mean, sd, X)])


def _quadrature_grid(net, n_nodes, width):
    """The quadrature nodes over the hidden pre-activations (n_nodes, n_hidden), their log
    prior weights, the visible means b + W f(h) at each node and the visible sds."""
    sizes = _sizes(net)
    assert len(sizes) == 2 and sizes[0] in (1, 2)
    if n_nodes is None:
        n_nodes = 200 if sizes[0] == 1 else 50     # per piece and axis
    axes = []
    for k, kind in enumerate(net.units_[0]):
        b, sd = net.biases_[0][k], np.sqrt(net.variances_[0][k])
        h, w = _gl_nodes(b - width * sd, b + width * sd, n_nodes)
        logw = np.log(w) + norm.logpdf(h, b, sd)
        f = {"linear": h, "binary": (h >= 0).astype(float), "rectified": np.maximum(h, 0.0),
             "sigmoidal": ndtr(h)}[kind]
        axes.append((h, f, logw))
    if len(axes) == 1:
        H, F, logw = axes[0][0][:, None], axes[0][1][:, None], axes[0][2]
    else:
        H = np.stack(np.meshgrid(axes[0][0], axes[1][0], indexing="ij"), -1).reshape(-1, 2)
        F = np.stack(np.meshgrid(axes[0][1], axes[1][1], indexing="ij"), -1).reshape(-1, 2)
        logw = (axes[0][2][:, None] + axes[1][2][None, :]).ravel()
    mean = net.biases_[1][None, :] + F @ net.weights_[0].T          # (n_nodes, n_visible)
    return H, logw, mean, np.sqrt(net.variances_[1])


def _log_joint(logw, mean, sd, X):
    """Per pattern of X (NaN = missing): the log weight of each node, ln p(h) + ln p(x_obs|h)
    times its quadrature weight."""
    for x in np.asarray(X, dtype=float):
        obs = ~np.isnan(x)
        d = (x[obs][None, :] - mean[:, obs]) / sd[obs]
        ll = (-0.5 * (d * d).sum(axis=1) - np.log(sd[obs]).sum()
              - 0.5 * obs.sum() * np.log(2 * np.pi))
        yield logw + ll


def posterior_moments_quadrature(net, X, n_nodes=None, width=10.0):
    """The exact posterior mean and standard deviation of every unit, in unit order (hidden
    pre-activations, then the visible entries: an observed one its value with sd 0, a missing
    one its predictive moments), of the nets of :func:`log_marginal_quadrature`, by the same
    quadrature.  Returns (mean, sd), each (n_patterns, n_units)."""
    H, logw, vmean, vsd = _quadrature_grid(net, n_nodes, width)
    X = np.asarray(X, dtype=float)
    means, sds = [], []
    for x, a in zip(X, _log_joint(logw, vmean, vsd, X)):
        w = np.exp(a - a.max())
        w /= w.sum()
        m_h = w @ H
        v_h = w @ (H - m_h) ** 2
        m_v = w @ vmean
        v_v = w @ (vmean - m_v) ** 2 + vsd ** 2
        miss = np.isnan(x)
        means.append(np.concatenate([m_h, np.where(miss, m_v, x)]))
        sds.append(np.sqrt(np.concatenate([v_h, np.where(miss, v_v, 0.0)])))
    return np.array(means), np.array(sds)


def posterior_moments_linear(net, X):
    """The exact posterior mean and standard deviation of every unit of a linear net of any
    depth, laid out as :func:`posterior_moments_quadrature`'s: the units are jointly Gaussian,
    u = (I - B)^-1 (b + e), and each pattern conditions on its observed (non-NaN) entries."""
    sizes = [b.size for b in net.biases_]
    U, offs = sum(sizes), np.concatenate([[0], np.cumsum(sizes)])
    B = np.zeros((U, U))
    for l, W in enumerate(net.weights_):
        B[offs[l + 1]:offs[l + 2], offs[l]:offs[l + 1]] = W
    T = np.linalg.inv(np.eye(U) - B)
    m = T @ np.concatenate(net.biases_)
    C = T @ np.diag(np.concatenate(net.variances_)) @ T.T
    means, sds = [], []
    for x in np.asarray(X, dtype=float):
        o = np.zeros(U, dtype=bool)
        o[offs[-2]:] = ~np.isnan(x)
        K = np.linalg.solve(C[np.ix_(o, o)], C[o][:, ~o]).T
        mean = np.concatenate([np.zeros(offs[-2]), x])
        mean[~o] = m[~o] + K @ (mean[o] - m[o])
        sd = np.zeros(U)
        sd[~o] = np.sqrt(np.diag(C[np.ix_(~o, ~o)] - K @ C[o][:, ~o]))
        means.append(mean)
        sds.append(sd)
    return np.array(means), np.array(sds)
