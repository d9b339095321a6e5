"""Plain NumPy implementation of mfengine's Gaussian mean-field solver (the benchmark's peer).

Same bound and the same algorithm as ``mfengine/sbn/_gaussian.pyx``, written the way a careful
NumPy user would write it: every operation is vectorised over the batch of patterns (and over a
unit's children), never over units, which coordinate ascent must visit one at a time.

The bound (Saul & Jordan, eq. 24), per pattern, layers top first, the last one visible::

    L = sum_{i hidden} H(mu_i)
        + sum_i [ mu_i m_i - 1/2 xi_i^2 s_i - log(1 + exp(m_i + (1/2 - xi_i) s_i)) ]
    m_i = h_i + sum_j J_ij mu_j,   s_i = sum_j J_ij^2 mu_j (1 - mu_j)   (parents j; top: s = 0)

Algorithm (the compiled kernel's as of commit 608390c, step for step; later kernel refinements
such as skipping updates whose predicted gain is below tol / (10 n_hidden) are not copied):

* start from mu = 1/2 for every hidden unit and every xi at its fixed point;
* one sweep visits the hidden layers bottom-up (even sweeps) or top-down (odd sweeps); in a
  layer it maximises L over each mu_k in turn with the children's xi fixed, then re-solves the
  xi of the layer below;
* the 1-D maximisation over mu_k is a bracketed, safeguarded Newton search for the root of
  dL/dmu in t = logit(mu) (bisection when a Newton step leaves the bracket).  When the
  curvature bound ``sum_c J_ck^2 max(xi_c^2, (1 - xi_c)^2) < 4`` holds the 1-D problem is
  strictly concave and the sign of dL/dmu moves the bracket; otherwise a trial point is
  accepted only if it does not lower L, so every update raises the bound;
* xi_c solves xi = sigmoid(m_c + (1/2 - xi) s_c) by safeguarded Newton (the root minimises a
  convex function of xi, so the update raises L);
* a pattern stops when its bound changes by less than ``tol`` in a sweep; only the patterns
  still running take part in the next sweep.

NumPy-specific choices (none changes the iterates beyond round-off): while layer l is updated
the children's pre-activations ``a_c = m_c + (1/2 - xi_c) s_c`` and ``sig_c = sigmoid(a_c)`` are
cached per pattern and moved by ``J_ck dmu + (1/2 - xi_c) J_ck^2 dvar`` after each accepted
update; the per-layer constants ``sum_c mu_c J_ck`` and ``sum_c xi_c^2 J_ck^2`` come from one
matrix product per layer; the 1-D searches of a unit run for all patterns at once, dropping
the patterns whose search has finished.  Missing visible data are not supported here.
"""
from dataclasses import dataclass

import numpy as np

__all__ = ["infer", "bound", "NumpyResult", "inner_tol"]

T_MAX = 40.0         # |logit(mu)| is kept below this (mu at least 4e-18 from 0 and 1)
T_TOL = 1e-11        # bracket width in t at which a 1-D search stops
MAX_IT = 100         # safety net on the iterations of one 1-D solve
CONCAVE_LIMIT = 4.0  # curvature bound below which the 1-D problem is strictly concave


def inner_tol(tol):
    """Tolerance of the 1-D solves on |dL/dmu| and the xi residual (the same rule as mf.infer)."""
    return float(min(1e-3, max(1e-13, 0.03 * np.sqrt(tol))))


@dataclass
class NumpyResult:
    bound: np.ndarray       # (n,) nats
    mu: list                # one (n, sizes[l]) array per layer, visible included
    xi: list
    n_iter: np.ndarray    # (n,) int
    converged: np.ndarray   # (n,) bool: bound changed by < tol in the last sweep


# ---------------------------------------------------------------------------- numerics
def sigmoid(a):
    """1 / (1 + e^-a); exp overflows to inf for a < -709 and the result is then exactly 0."""
    with np.errstate(over="ignore"):
        x = np.negative(a)
        np.exp(x, out=x)
    x += 1.0
    return np.reciprocal(x, out=x)


def log1pexp(a):
    return np.logaddexp(0.0, a)


def entropy(p):
    with np.errstate(divide="ignore", invalid="ignore"):
        h = -p * np.log(p) - (1.0 - p) * np.log1p(-p)
    return np.where((p <= 0.0) | (p >= 1.0), 0.0, h)


def _rowdot(a, b):
    return np.einsum("ij,ij->i", a, b)


# ---------------------------------------------------------------------------- model pieces
class _Net:
    def __init__(self, net):
        self.W = [np.ascontiguousarray(w, dtype=np.float64) for w in net.weights]
        self.W2 = [w * w for w in self.W]
        self.b = [np.asarray(b, dtype=np.float64) for b in net.biases]
        self.J = [np.ascontiguousarray(w.T) for w in self.W]     # J[l][k]: unit k's outgoing weights
        self.J2 = [j * j for j in self.J]
        self.sizes = [b.shape[0] for b in self.b]

    def stats(self, mu, l):
        """m and s of layer l (exact, from the means of layer l - 1)."""
        n = mu[0].shape[0]
        if l == 0:
            return np.broadcast_to(self.b[0], (n, self.sizes[0])), np.zeros((n, self.sizes[0]))
        p = mu[l - 1]
        return p @ self.W[l - 1].T + self.b[l], (p * (1.0 - p)) @ self.W2[l - 1].T

    def bound(self, mu, xi):
        last = len(mu) - 1
        total = 0.0
        for l in range(last + 1):
            m, s = self.stats(mu, l)
            t = mu[l] * m - 0.5 * xi[l] * xi[l] * s - log1pexp(m + (0.5 - xi[l]) * s)
            if l < last:
                t = t + entropy(mu[l])
            total = total + t.sum(axis=1)
        return total


def _solve_xi(m, s, xi, gtol):
    """Solve xi = sigmoid(m + (1/2 - xi) s) elementwise by safeguarded Newton, in place."""
    sig = sigmoid(m + (0.5 - xi) * s)
    flat = s <= 0.0
    if np.any(flat):                      # no input variance: sig does not depend on xi
        xi[flat] = sig[flat]
    r = xi - sig
    todo = np.nonzero(~flat & (np.abs(r) > gtol))
    if todo[0].size == 0:
        return
    x, sg, r, mm, ss = xi[todo], sig[todo], r[todo], m[todo], s[todo]
    lo = np.zeros_like(x)
    hi = np.ones_like(x)
    pos = np.arange(x.size)               # where the running entries sit in ``todo``
    xo = x.copy()
    for _ in range(MAX_IT):
        up = r > 0.0
        hi = np.where(up, x, hi)
        lo = np.where(up, lo, x)
        xn = x - r / (1.0 + ss * sg * (1.0 - sg))
        bad = ~((xn > lo) & (xn < hi))
        xn[bad] = 0.5 * (lo[bad] + hi[bad])
        x = xn
        sg = sigmoid(mm + (0.5 - x) * ss)
        r = x - sg
        xo[pos] = x
        go = (np.abs(r) > gtol) & (hi - lo > 1e-15)
        if not go.any():
            break
        if not go.all():
            x, sg, r, mm, ss, lo, hi, pos = (v[go] for v in (x, sg, r, mm, ss, lo, hi, pos))
    xi[todo] = xo


# ---------------------------------------------------------------------------- one hidden layer
class _Layer:
    """What the updates of hidden layer l need, for the patterns of the current sweep."""

    def __init__(self, net, mu, xi, l):
        self.mu = mu[l]                                    # updated in place
        self.mk = net.stats(mu, l)[0]                      # m of layer l: fixed while it is updated
        xc = xi[l + 1]
        self.w = 0.5 - xc                                  # children's xi are fixed too
        self.x2 = xc * xc
        mc, sc = net.stats(mu, l + 1)
        self.a = mc + self.w * sc                          # children's pre-activations (cached)
        self.sig = sigmoid(self.a)
        W, W2 = net.W[l], net.W2[l]
        self.cJ = mu[l + 1] @ W                            # sum_c mu_c J_ck      (n, n_l)
        self.x2J2 = self.x2 @ W2                           # sum_c xi_c^2 J_ck^2
        self.curv = np.maximum(self.x2, (1.0 - xc) ** 2) @ W2


def _eval(J, wJ2, sig, cJ, x2J2, tk):
    """The children's parts of dL/dmu_k and d2L/dmu_k^2 (rows: patterns), from their sig.

    With q_c = xi_c^2 + (1 - 2 xi_c) sig_c and tk = 1 - 2 mu_k (see mf_sbn.h):
    d1 = sum_c [J_c (mu_c - sig_c) - 1/2 J_c^2 tk q_c],
    d2 = sum_c [J_c^2 q_c - sig_c (1 - sig_c) (J_c + (1/2 - xi_c) J_c^2 tk)^2]."""
    sJ = sig @ J
    swJ2 = _rowdot(sig, wJ2)
    d1 = cJ - sJ - tk * (0.5 * x2J2 + swJ2)
    ap = wJ2 * tk[:, None]
    ap += J                                                # d a_c / d mu_k
    p = sig * (1.0 - sig)
    p *= ap
    d2 = x2J2 + 2.0 * swJ2 - _rowdot(p, ap)
    return d1, d2


def _solve_unit(net, lay, l, k, gtol):
    """Maximise L over mu_k (unit k of hidden layer l) for every pattern; update the cache."""
    J, J2 = net.J[l][k], net.J2[l][k]
    mucol = lay.mu[:, k]
    mu0 = mucol.copy()
    v0 = mu0 * (1.0 - mu0)
    with np.errstate(divide="ignore"):
        t0 = np.clip(np.log(mu0) - np.log1p(-mu0), -T_MAX, T_MAX)
    mk, cJ, x2J2 = lay.mk[:, k], lay.cJ[:, k], lay.x2J2[:, k]
    wJ2 = lay.w * J2
    # first evaluation at the current point, from the cached sig (no exp)
    d1, d2 = _eval(J, wJ2, lay.sig, cJ, x2J2, 1.0 - 2.0 * mu0)
    g = -t0 + mk + d1
    rows = np.nonzero(np.abs(g) > gtol)[0]
    if rows.size == 0:
        return
    whole = rows.size == mu0.shape[0]
    pick = (lambda v: v) if whole else (lambda v: v[rows])
    gp = -1.0 + d2 * v0
    mu0, v0, mk, cJ, x2J2 = pick(mu0), pick(v0), pick(mk), pick(cJ), pick(x2J2)
    tb, gb, gpb = pick(t0), pick(g), pick(gp)
    concave = pick(lay.curv[:, k]) < CONCAVE_LIMIT
    all_concave = bool(concave.all())
    A, W2r, sigb = pick(lay.a), pick(wJ2), pick(lay.sig).copy()
    mub = mu0.copy()
    lo = np.where(gb > 0.0, tb, -T_MAX)
    hi = np.where(gb > 0.0, T_MAX, tb)
    fb = None
    if not all_concave:
        # L as a function of mu_k, up to a constant: entropy + mu_k m_k + children's terms
        fb = entropy(mu0) + mu0 * mk - log1pexp(A).sum(axis=1)

    pos = np.arange(rows.size)      # positions (in ``rows``) of the searches still running
    Ap, Wp = A, W2r
    for _ in range(MAX_IT):
        go = hi[pos] - lo[pos] > T_TOL
        if not go.all():
            pos, Ap, Wp = pos[go], Ap[go], Wp[go]
        if pos.size == 0:
            break
        tbp, gbp, gpbp, lop, hip = tb[pos], gb[pos], gpb[pos], lo[pos], hi[pos]
        with np.errstate(divide="ignore", invalid="ignore"):
            x = np.where(gpbp < 0.0, tbp - gbp / gpbp, lop - 1.0)
        bad = ~((x > lop) & (x < hip))
        x[bad] = 0.5 * (lop[bad] + hip[bad])
        mux = sigmoid(x)
        vx = mux * (1.0 - mux)
        dmu = mux - mu0[pos]
        dvar = vx - v0[pos]
        ax = Ap + dmu[:, None] * J
        ax += dvar[:, None] * Wp
        sig = sigmoid(ax)
        d1, d2 = _eval(J, Wp, sig, cJ[pos], x2J2[pos], 1.0 - 2.0 * mux)
        gx = -x + mk[pos] + d1
        gpx = -1.0 + d2 * vx
        if all_concave:
            accept = np.ones(pos.size, dtype=bool)
        else:
            fx = (entropy(mux) + mux * mk[pos] + dmu * cJ[pos] - 0.5 * dvar * x2J2[pos]
                  - log1pexp(ax).sum(axis=1))
            accept = concave[pos] | (fx >= fb[pos])
        # an accepted point becomes the bracket end on the side its g points away from; a
        # rejected one (it lowered L) the end on its side of the best point
        as_lo = np.where(accept, gx > 0.0, x <= tbp)
        lo[pos] = np.where(as_lo, x, lop)
        hi[pos] = np.where(as_lo, hip, x)
        ia = pos[accept]
        tb[ia], gb[ia], gpb[ia], mub[ia] = x[accept], gx[accept], gpx[accept], mux[accept]
        sigb[ia] = sig[accept]
        if not all_concave:
            fb[ia] = fx[accept]
        keep = ~(accept & (np.abs(gx) <= gtol))
        if not keep.all():
            pos, Ap, Wp = pos[keep], Ap[keep], Wp[keep]
        if pos.size == 0:
            break

    dmu = mub - mu0
    dvar = mub * (1.0 - mub) - v0
    shift = dmu[:, None] * J
    shift += dvar[:, None] * W2r
    if whole:
        mucol[:] = mub
        lay.a += shift
        lay.sig[:] = sigb
    else:
        mucol[rows] = mub
        lay.a[rows] += shift
        lay.sig[rows] = sigb


# ---------------------------------------------------------------------------- driver
def infer(net, V, tol=1e-6, max_sweeps=200, inner_tol_=None, init_mu=None):
    """Maximise the bound for every pattern of V (n, n_visible); returns a NumpyResult.

    ``net`` is anything with ``weights`` and ``biases`` lists (e.g. mf.SigmoidBeliefNet).
    ``init_mu``: optional (n, n_hidden) starting means, hidden layers concatenated top first
    (as in mf.infer); default 1/2."""
    nn = _Net(net)
    gtol = inner_tol(tol) if inner_tol_ is None else float(inner_tol_)
    V = np.ascontiguousarray(V, dtype=np.float64)
    n = V.shape[0]
    sizes = nn.sizes
    L = len(sizes)
    mu = [np.full((n, k), 0.5) for k in sizes[:-1]] + [V.copy()]
    if init_mu is not None:
        init = np.clip(np.asarray(init_mu, dtype=np.float64), 1.0 / (1.0 + np.exp(T_MAX)),
                       1.0 / (1.0 + np.exp(-T_MAX)))
        off = np.cumsum([0] + sizes[:-1])
        for l in range(L - 1):
            mu[l][:] = init[:, off[l]:off[l + 1]]
    xi = [np.full((n, k), 0.5) for k in sizes]
    for l in range(L):
        m, s = nn.stats(mu, l)
        _solve_xi(m, s, xi[l], gtol)
    L_old = nn.bound(mu, xi)

    n_iter = np.full(n, max_sweeps, dtype=np.intp)
    converged = np.zeros(n, dtype=bool)
    active = np.arange(n)
    for sweep in range(max_sweeps):
        if active.size == 0:
            break
        whole = active.size == n
        smu = mu if whole else [a[active] for a in mu]
        sxi = xi if whole else [a[active] for a in xi]
        for l in (range(L - 2, -1, -1) if sweep % 2 == 0 else range(L - 1)):
            lay = _Layer(nn, smu, sxi, l)
            for k in range(sizes[l]):
                _solve_unit(nn, lay, l, k, gtol)
            m, s = nn.stats(smu, l + 1)
            _solve_xi(m, s, sxi[l + 1], gtol)
        L_new = nn.bound(smu, sxi)
        done = np.abs(L_new - L_old[active]) < tol
        L_old[active] = L_new
        if not whole:
            for l in range(L):
                mu[l][active] = smu[l]
                xi[l][active] = sxi[l]
        converged[active[done]] = True
        n_iter[active[done]] = sweep + 1
        active = active[~done]

    return NumpyResult(bound=nn.bound(mu, xi), mu=mu, xi=xi, n_iter=n_iter,
                       converged=converged)


def bound(net, mu_hidden, V):
    """The bound at given hidden means (one (n, sizes[l]) array per hidden layer) with every
    xi at its fixed point -- for cross-checking other implementations."""
    nn = _Net(net)
    V = np.ascontiguousarray(V, dtype=np.float64)
    mu = [np.array(m, dtype=np.float64) for m in mu_hidden] + [V]
    xi = [np.full_like(m, 0.5) for m in mu]
    for l in range(len(mu)):
        m, s = nn.stats(mu, l)
        _solve_xi(m, s, xi[l], 1e-14)
    return nn.bound(mu, xi)
