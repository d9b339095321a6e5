"""Slow, obviously-right NumPy/SciPy reference for the Gaussian-approximated mean-field bound
of a layered sigmoid belief net (Saul & Jordan 1996, eqs. 8-9 and 24), for ONE pattern.

Nothing here is fast or clever.  The bound is written straight from the formula

    L = sum_{i hidden} H(mu_i)
        + sum_{i observed} [ mu_i m_i - 1/2 xi_i^2 s_i - ln(1 + exp(m_i + (1/2 - xi_i) s_i)) ],
    m_i = h_i + sum_j J_ij mu_j,   s_i = sum_j J_ij^2 mu_j (1 - mu_j)   (top layer: m = h, s = 0),

and the solver follows the kernel's documented path so that both reach the same point:

* hidden mu start at 0.5 (or ``init_mu``); the top layer's xi is sigmoid(h); every other
  layer's xi is solved at its fixed point xi = sigmoid(m + (1/2 - xi) s) (``scipy.optimize.brentq``
  on the residual, whose root in [0, 1] is unique);
* sweep 0 goes bottom-up over the hidden layers (the one just above the visible layer first),
  sweep 1 top-down, and so on; in a layer the units are visited in index order, each mu_k is
  moved to the maximiser of L over mu_k with everything else (the children's xi included) held
  fixed, and after the whole layer the xi of the layer below are re-solved;
* stop when |L_new - L_old| < tol after a sweep.

The 1-D maximisation over mu_k recomputes the full bound at every trial point
(``scipy.optimize.minimize_scalar(method="bounded")`` on -L).  A minimiser that only sees
function values can place the optimum only to about sqrt(machine epsilon) (the objective is flat
to second order there), so the result is then polished with ``brentq`` on the analytic
derivative dL/dmu_k (written out below from the formula; ``tests/sbn/test_gaussian_kernel.py``
checks it against finite differences of ``bound``).  For a strictly concave 1-D problem
(sum_c J_ck^2 < 4) this is THE maximiser.  Otherwise the 1-D problem may have several local
maxima and ``solve(rule=...)`` says which one to take: "global" (the default) the highest one
(a grid in logit(mu_k), the best cell refined), "uphill" the one reached by walking uphill from
the current value, which is what the kernel's bracketed search does (it guarantees only a local
maximum at least as high as the current value).
"""
import numpy as np
from scipy.optimize import brentq, minimize_scalar
from scipy.special import expit, xlogy

# The reference keeps hidden means inside [MU_LO, MU_HI]; the kernel keeps them at
# sigmoid(t) with |t| <= 40, which moderate nets never reach.
MU_LO = 1e-15
MU_HI = 1.0 - 1e-15


# ----------------------------------------------------------------------------- the bound
def entropy(p):
    """Binary entropy in nats, H(0) = H(1) = 0."""
    p = np.asarray(p, dtype=np.float64)
    return -xlogy(p, p) - xlogy(1.0 - p, 1.0 - p)


def log1pexp(x):
    return np.logaddexp(0.0, x)


def layer_stats(weights, biases, mu, l):
    """m and s of every unit of layer l given the means of layer l - 1."""
    if l == 0:
        return np.array(biases[0], dtype=np.float64), np.zeros(len(biases[0]))
    J = weights[l - 1]
    m = biases[l] + mu[l - 1] @ J.T
    s = (mu[l - 1] * (1.0 - mu[l - 1])) @ (J**2).T
    return m, s


def bound(weights, biases, mu, xi, obs=None):
    """L(mu, xi) for one pattern.  ``mu`` and ``xi`` hold one 1-D array per layer; ``mu[-1]``
    is the visible vector (any value where unobserved), ``obs`` is 1 where observed.

    The arrays may also carry leading batch axes (e.g. ``mu[l]`` of shape (B, sizes[l])) to
    evaluate several points at once; the result then has the batch shape."""
    n_layers = len(biases)
    if obs is None:
        obs = np.ones(len(biases[-1]))
    total = 0.0
    for l in range(n_layers):
        m, s = layer_stats(weights, biases, mu, l)
        term = mu[l] * m - 0.5 * xi[l] ** 2 * s - log1pexp(m + (0.5 - xi[l]) * s)
        if l == n_layers - 1:
            total = total + np.sum(np.where(obs > 0, term, 0.0), axis=-1)
        else:
            total = total + np.sum(entropy(mu[l]) + term, axis=-1)
    return total[()] if np.ndim(total) else float(total)


def field(weights, biases, mu, xi, obs, l, k):
    """The derivative of L with respect to mu_k, entropy term left out, for hidden unit k of
    layer l (so dL/dmu_k = field - logit(mu_k)), differentiated by hand from ``bound``:

    m_k + sum_c obs_c [ J_ck (mu_c - sig_c) - 1/2 J_ck^2 (1 - 2 mu_k) (xi_c^2 + (1 - 2 xi_c) sig_c) ],
    sig_c = sigmoid(m_c + (1/2 - xi_c) s_c), c running over layer l + 1.
    """
    n_layers = len(biases)
    mk = layer_stats(weights, biases, mu, l)[0][k]
    p = mu[l][k]
    mc, sc = layer_stats(weights, biases, mu, l + 1)
    sig = expit(mc + (0.5 - xi[l + 1]) * sc)
    J = weights[l][:, k]
    terms = J * (mu[l + 1] - sig) - 0.5 * J**2 * (1.0 - 2.0 * p) * (
        xi[l + 1] ** 2 + (1.0 - 2.0 * xi[l + 1]) * sig
    )
    if l + 1 == n_layers - 1:
        terms = np.where(obs > 0, terms, 0.0)
    return float(mk + np.sum(terms))


def dbound_dmu(weights, biases, mu, xi, obs, l, k):
    """dL/dmu_k = ln((1 - mu_k)/mu_k) + field (see ``field``)."""
    p = mu[l][k]
    return np.log1p(-p) - np.log(p) + field(weights, biases, mu, xi, obs, l, k)


def gradient(weights, biases, mu, xi, obs=None):
    """dL/dJ and dL/dh for one pattern at (mu, xi), held fixed (Saul & Jordan eqs. 10-11,
    without assuming xi at its fixed point), differentiated by hand from ``bound``:

    dL/dh_i = obs_i (mu_i - sig_i),
    dL/dJ_ij = obs_i [ (mu_i - sig_i) mu_j - J_ij mu_j (1 - mu_j) (xi_i^2 + (1 - 2 xi_i) sig_i) ],
    sig_i = sigmoid(m_i + (1/2 - xi_i) s_i).  Returns (grad_weights, grad_biases) as lists.
    """
    n_layers = len(biases)
    if obs is None:
        obs = np.ones(len(biases[-1]))
    gW, gb = [], []
    for l in range(n_layers):
        m, s = layer_stats(weights, biases, mu, l)
        sig = expit(m + (0.5 - xi[l]) * s)
        o = obs if l == n_layers - 1 else 1.0
        delta = o * (mu[l] - sig)
        q = o * (xi[l] ** 2 + (1.0 - 2.0 * xi[l]) * sig)
        gb.append(delta)
        if l > 0:
            var = mu[l - 1] * (1.0 - mu[l - 1])
            gW.append(np.outer(delta, mu[l - 1]) - weights[l - 1] * np.outer(q, var))
    return gW, gb


def exact_log_likelihood(weights, biases, v, missing=None):
    """ln P(v) of one pattern by enumerating every hidden state (and every value of the missing
    visible entries, which sums them out).  Small nets only."""
    weights = [np.asarray(w, dtype=np.float64) for w in weights]
    biases = [np.asarray(b, dtype=np.float64) for b in biases]
    sizes = [len(b) for b in biases]
    v = np.asarray(v, dtype=np.float64)
    free = np.zeros(sizes[-1], dtype=bool) if missing is None else np.asarray(missing, dtype=bool)
    n_free = sum(sizes[:-1]) + int(free.sum())
    states = ((np.arange(2**n_free)[:, None] >> np.arange(n_free)) & 1).astype(np.float64)
    offs = np.cumsum([0] + sizes[:-1])
    layers = [states[:, offs[l] : offs[l + 1]] for l in range(len(sizes) - 1)]
    vis = np.broadcast_to(np.where(free, 0.0, v), (len(states), sizes[-1])).copy()
    vis[:, free] = states[:, offs[-1] :]
    layers.append(vis)
    logp = np.zeros(len(states))
    for l, x in enumerate(layers):
        z = biases[l] + (layers[l - 1] @ weights[l - 1].T if l > 0 else 0.0)
        logp += np.sum(x * z - np.logaddexp(0.0, z), axis=1)
    return float(np.logaddexp.reduce(logp))


# ----------------------------------------------------------------------------- updates
def xi_fixed_point(m, s):
    """The root in [0, 1] of r(x) = x - sigmoid(m + (1/2 - x) s)  (r(0) < 0 < r(1), r increasing)."""
    if s == 0.0:
        return float(expit(m))
    r = lambda x: x - expit(m + (0.5 - x) * s)
    return brentq(r, 0.0, 1.0, xtol=1e-15, rtol=4 * np.finfo(float).eps, maxiter=500)


def solve_xi_layer(weights, biases, mu, xi, l):
    m, s = layer_stats(weights, biases, mu, l)
    xi[l] = np.array([xi_fixed_point(m[i], s[i]) for i in range(len(m))])


def _polish(f, df, x, lo, hi):
    """Refine a value-based maximiser x of f by a root of its derivative df nearby, if any."""
    for h in (1e-9, 1e-7, 1e-5):
        a, b = max(lo, x - h * max(x, 1e-3)), min(hi, x + h * max(x, 1e-3))
        ga, gb = df(a), df(b)
        if ga > 0.0 > gb:
            y = brentq(df, a, b, xtol=1e-16, rtol=4 * np.finfo(float).eps, maxiter=500)
            # keep the polished point only if it is not worse than round-off allows
            if f(y) >= f(x) - 1e-12:
                return y
            return x
    return x


def _uphill_bracket(f_batch, t0, g0):
    """Bracket, in mu, of the local maximum reached by walking uphill from t0 = logit(mu_k):
    step along a grid of spacing 0.01 in t, in the direction of the derivative's sign g0,
    until the objective first drops; the maximum lies within one step of the last rising point."""
    step = 0.01 if g0 >= 0 else -0.01   # from a stationary point: towards larger mu
    t_end = 34.0 * np.sign(step)
    last_t, last_f = t0, f_batch(np.array([t0]))[0]
    while True:
        ts = last_t + step * np.arange(1, 257)
        ts = ts[(ts - t_end) * np.sign(step) <= 0]
        if len(ts) == 0:
            break
        vals = f_batch(ts)
        drops = np.nonzero(np.diff(np.concatenate([[last_f], vals])) < 0)[0]
        if len(drops):
            j = int(drops[0])  # the objective rises up to ts[j - 1] (last_t if j == 0), drops at ts[j]
            if j > 0:
                last_t = ts[j - 1]
            break
        last_t, last_f = ts[-1], vals[-1]
    return max(expit(last_t - 0.01), MU_LO), min(expit(last_t + 0.01), MU_HI)


def maximise_mu(weights, biases, mu, xi, obs, l, k, concave, rule="global"):
    """Move mu_k (hidden unit k of layer l) to the maximiser of L with everything else fixed.

    ``concave``: the 1-D problem is known to be strictly concave, so its maximiser is unique and
    found by a bounded search over the whole interval.  Otherwise ``rule`` picks among the local
    maxima: "global" the highest (best point of a grid in logit(mu), refined between its
    neighbours), "uphill" the one reached by climbing from the current point (a local maximum
    at least as high as the current value), "probe" the kernel's rule: uphill, then, if that
    maximum lies away from both ends, also the one reached from a probe near the other end
    when the probe is higher, keeping the better.
    """

    def f(x):
        old = mu[l][k]
        mu[l][k] = x
        try:
            return bound(weights, biases, mu, xi, obs)
        finally:
            mu[l][k] = old

    def f_batch(ts):  # L at mu_k = sigmoid(t) for every t in ts, in one call
        trial = [np.broadcast_to(m, (len(ts), len(m))).copy() for m in mu]
        trial[l][:, k] = expit(ts)
        return np.atleast_1d(bound(weights, biases, trial, xi, obs))

    def df(x):
        old = mu[l][k]
        mu[l][k] = x
        try:
            return dbound_dmu(weights, biases, mu, xi, obs, l, k)
        finally:
            mu[l][k] = old

    current = mu[l][k]
    if concave:
        lo, hi = MU_LO, MU_HI
    elif rule == "global":
        ts = np.linspace(-34.0, 34.0, 1361)
        i = int(np.argmax(f_batch(ts)))
        lo = MU_LO if i == 0 else expit(ts[i - 1])
        hi = MU_HI if i == len(ts) - 1 else expit(ts[i + 1])
    elif rule in ("uphill", "probe"):
        lo, hi = _uphill_bracket(f_batch, np.log(current) - np.log1p(-current), df(current))
    else:
        raise ValueError(f"unknown rule {rule!r}")
    res = minimize_scalar(lambda x: -f(x), method="bounded", bounds=(lo, hi), options={"xatol": 1e-13})
    x = _polish(f, df, float(res.x), lo, hi)
    if rule == "probe" and not concave and PROBE_BELOW < x < 1.0 - PROBE_BELOW:
        # the kernel's rule: a maximum away from both ends may be a shallow one; probe near the
        # other end (logit -/+ 8) and, if higher there, climb from the probe and keep the better
        tp = -8.0 if x >= 0.5 else 8.0
        mp = expit(tp)
        if f(mp) > f(x) + 1e-14 * (1.0 + abs(f(x))):
            lo2, hi2 = _uphill_bracket(f_batch, tp, df(mp))
            res2 = minimize_scalar(lambda y: -f(y), method="bounded", bounds=(lo2, hi2),
                                   options={"xatol": 1e-13})
            y = _polish(f, df, float(res2.x), lo2, hi2)
            if f(y) > f(x):
                x = y
    # Never move to a clearly worse point than the current one (a grid can miss a narrow peak;
    # it cannot happen when concave).  The slack is round-off: near convergence a move of 1e-7
    # changes L by ~1e-14, below the rounding error of L itself.
    if not concave and f(x) < f(current) - 1e-12:
        x = current
    mu[l][k] = x


PROBE_BELOW = 0.02  # the kernel probes the other basin when 0.02 < mu < 0.98 after climbing


def curvature_bound(weights, l, k, obs):
    """sum_c J_ck^2 over the (observed) children of hidden unit k of layer l: below 4 the
    1-D problem in mu_k is strictly concave, whatever the children's xi."""
    J2 = weights[l][:, k] ** 2
    if l + 1 == len(weights):
        J2 = J2 * obs
    return float(np.sum(J2))


# ----------------------------------------------------------------------------- the solver
def pass_layers(net, sweep):
    """The hidden layers pass ``sweep`` updates, in order.

    Even passes run bottom-up, odd passes top-down.  After the first pass, with two or more
    hidden layers, a pass does not begin with the layer the previous pass ended on when every
    unit of that layer has sum_c J_ck^2 < 4 (weakly coupled).
    """
    n_layers = len(net.sizes)
    layers = list(range(n_layers - 2, -1, -1)) if sweep % 2 == 0 else list(range(n_layers - 1))
    if sweep > 0 and n_layers >= 3:
        first = layers[0]
        if np.all((np.asarray(net.weights[first]) ** 2).sum(axis=0) < 4.0 * (1.0 - 1e-9)):
            layers = layers[1:]
    return layers


def solve(net, v, missing=None, tol=1e-12, max_sweeps=200, init_mu=None, rule="global"):
    """Mean-field solution for ONE pattern ``v`` (1-D, NaN allowed where ``missing``).

    Returns a dict: ``mu``, ``xi`` (lists, one array per layer; visible mu = v, and xi at a
    missing visible entry), ``bound``, ``n_sweeps``, ``converged``, ``history`` (L after
    initialisation and after every sweep).  ``rule`` ("global" or "uphill", see
    ``maximise_mu``) chooses among the local maxima of a 1-D problem that may be non-concave.
    """
    weights = [np.array(w, dtype=np.float64) for w in net.weights]
    biases = [np.array(b, dtype=np.float64) for b in net.biases]
    sizes = [len(b) for b in biases]
    n_layers = len(sizes)
    v = np.asarray(v, dtype=np.float64)
    obs = np.ones(sizes[-1]) if missing is None else 1.0 - np.asarray(missing, dtype=np.float64)
    if init_mu is None:
        mu = [np.full(n, 0.5) for n in sizes[:-1]]
    else:
        init_mu = np.asarray(init_mu, dtype=np.float64)
        offs = np.cumsum([0] + sizes[:-1])
        mu = [init_mu[offs[l] : offs[l + 1]].copy() for l in range(n_layers - 1)]
    mu.append(np.where(obs > 0, v, 0.5))
    xi = [np.zeros(n) for n in sizes]
    xi[0] = expit(biases[0])
    for l in range(1, n_layers):
        solve_xi_layer(weights, biases, mu, xi, l)
    L_old = bound(weights, biases, mu, xi, obs)
    history = [L_old]
    converged = False
    n_sweeps = max_sweeps
    for sweep in range(max_sweeps):
        layers = pass_layers(net, sweep)
        for l in layers:
            for k in range(sizes[l]):
                concave = curvature_bound(weights, l, k, obs) < 4.0
                maximise_mu(weights, biases, mu, xi, obs, l, k, concave, rule)
            solve_xi_layer(weights, biases, mu, xi, l + 1)
        L_new = bound(weights, biases, mu, xi, obs)
        history.append(L_new)
        # a pass that skipped a layer only counts together with the pass before it
        skipped = len(layers) < n_layers - 1
        if abs(L_new - L_old) < tol and (not skipped or abs(L_new - history[-3]) < tol):
            converged = True
            n_sweeps = sweep + 1
            break
        L_old = L_new
    mu_out = [m.copy() for m in mu]
    mu_out[-1] = np.where(obs > 0, v, xi[-1])
    return {
        "mu": mu_out,
        "xi": [x.copy() for x in xi],
        "bound": bound(weights, biases, mu, xi, obs),
        "n_sweeps": n_sweeps,
        "converged": converged,
        "history": np.array(history),
    }


def stationarity(net, mu, xi, missing=None):
    """The mean-field conditions at (mu, xi) for one pattern.

    Returns (f, t, r): for every hidden layer, ``f[l][k]`` = the field of unit k (``field``:
    dL/dmu_k = f - t) and ``t[l][k]`` = logit(mu_k) (+-inf at mu = 0 or 1), and for every layer
    below the top ``r[l]`` = xi - sigmoid(m + (1/2 - xi) s)  (``r[0]`` is None).  At an interior
    stationary point f = t; a mean pinned at the edge of the representable range has its field
    pushing outward.
    """
    weights = [np.asarray(w, dtype=np.float64) for w in net.weights]
    biases = [np.asarray(b, dtype=np.float64) for b in net.biases]
    n_layers = len(biases)
    obs = np.ones(len(biases[-1])) if missing is None else 1.0 - np.asarray(missing, dtype=np.float64)
    mu = [np.array(m, dtype=np.float64) for m in mu]
    xi = [np.array(x, dtype=np.float64) for x in xi]
    f, t = [], []
    for l in range(n_layers - 1):
        f.append(np.array([field(weights, biases, mu, xi, obs, l, k) for k in range(len(mu[l]))]))
        with np.errstate(divide="ignore"):
            t.append(np.log(mu[l]) - np.log1p(-mu[l]))
    r = [None]
    for l in range(1, n_layers):
        m, s = layer_stats(weights, biases, mu, l)
        r.append(xi[l] - expit(m + (0.5 - xi[l]) * s))
    return f, t, r
