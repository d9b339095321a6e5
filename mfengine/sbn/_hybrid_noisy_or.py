"""A certified lower bound on ln P(findings) of a bipartite noisy-OR net: some positive findings
exact, the others transformed (Jaakkola & Jordan's hybrid treatment of diagnosis nets).

The net is the one of :mod:`mfengine.sbn._exact_noisy_or`: diseases ``d_j`` with
``P(d_j = 1) = 1 - exp(-hd_j)``, findings with ``P(f = 0 | d) = exp(-x_f)``,
``x_f = h_f + sum_j w_fj d_j``.  Negative findings factorise over the diseases and are absorbed
exactly.  A positive finding's factor ``P(f = 1 | d) = exp(F(x_f))``, ``F(x) = ln(1 - e^{-x})``,
couples its parents; the exact engine sums over them with a junction tree, whose tables grow
as 2**width.  Here a positive finding is either

* exact: kept as it is, in the junction tree; or
* transformed: ``F`` is concave, and ``x_f = sum_j q_j (h_f + w_fj d_j / q_j)`` for any ``q``
  on the simplex over f's parents (``q_j > 0`` where it is used; a parent with ``q_j = 0`` is
  left out of the sum, and the others' ``q`` still sum to 1), so by Jensen's inequality

      F(x_f) >= sum_j q_j F(h_f + w_fj d_j / q_j)
              = sum_j [ d_j q_j F(h_f + w_fj / q_j) + (1 - d_j) q_j F(h_f) ]

  (``d_j`` is 0 or 1, so ``F(h + w d / q) = d F(h + w / q) + (1 - d) F(h)``).  The right side
  is a sum of one term per parent: the finding's factor becomes a product of per-disease
  factors, ``exp(a1_j)`` for ``d_j = 1`` and ``exp(a0_j)`` for ``d_j = 0`` with
  ``a1_j = q_j F(h_f + w_fj / q_j)`` and ``a0_j = q_j F(h_f)``, which multiply the disease's
  prior like a negative finding does.  For h_f > 0, F(h_f) is finite, ``a1_j - a0_j > 0`` (F
  increases) and ``q F(h + w / q) -> 0`` as ``q -> 0`` (F is bounded on [h, inf) and tends to
  0), so a parent's terms vanish continuously as its ``q_j`` does.  For h_f = 0 (no leak)
  F(0) = -inf: every parent with ``q_j > 0`` must then be on, and the useful choice is a single
  parent ``j*`` (q a vertex), giving ``P(f = 1 | d) >= d_j* (1 - e^{-w_fj*})``.

Every factor of a transformed finding is at most the finding's own, so
``B(E, q) = ln sum_d P(d) prod_{f neg} P(f=0|d) prod_{f in E} P(f=1|d)
prod_{f not in E} G_f(d; q_f)`` is a lower bound on ln P(e) for every exact set E and every
q; it is computed exactly by the engine of ``_exact_noisy_or`` (the transformed findings'
factors absorbed into the priors, the exact ones in the junction tree), so the bound is
certified up to rounding.  With every
positive exact it is ln P(e) itself.

The q are raised by EM, which never lowers B: with ``pi`` the posterior of the current
transformed model (E-step: the engine's marginals), ``B(q') >= B(q) + E_pi[ln G(d; q') -
ln G(d; q)]``, and each finding's part of that expectation depends only on the marginals
``p_j = pi(d_j = 1)`` of its parents:

    g_f(q) = sum_j q_j [ p_j F(h_f + w_fj / q_j) + (1 - p_j) F(h_f) ],

concave on the simplex (each term is a perspective of a concave function).  M-step: with
``u_j = w_fj / q_j``, ``dg/dq_j = p_j Gam(u_j) + F(h_f)`` with ``Gam(u) = F(h + u) - F(h) -
u F'(h + u)``, which increases from 0 (u = 0) to ``-F(h)`` (u -> inf).  The optimum has
``p_j Gam(u_j) = lam`` for the parents with ``q_j > 0`` and ``q_j = 0`` for those with
``p_j (-F(h)) <= lam``; ``lam`` is found by a safeguarded Newton iteration (bisection when a
step leaves the bracket) on ``ln sum_j q_j(lam) = 0`` and each ``u_j`` by a safeguarded Newton
iteration on ``Gam(u) = lam / p_j`` in ln u.  A finding with one parent is exact under the
transformation (its q is 1).

Which positives are exact: all of them when their junction tree's largest table is within
``max_width`` diseases (and their number within ``max_exact``): the bound is then ln P(e).
Otherwise greedily, from none: at each step the transformed finding with the largest
predicted gain whose addition keeps the width within ``max_width`` joins the exact set, and EM
runs to convergence again.  The predicted gain of making f exact, the other q held, is
exactly ``ln E_pi[P(f = 1 | d) / G_f(d)]``; it is evaluated with ``pi`` taken as factorised
over its marginals, in closed form since both ``P(f = 1 | d) = 1 - e^{-h} prod_j e^{-w_j d_j}``
and ``1 / G_f`` are products over the parents:

    E[P / G] = prod_j E[e^{-a(d_j)}] - e^{-h_f} prod_j E[e^{-w_j d_j - a(d_j)}].

Moving a finding to the exact set with the other q held cannot lower B (its factor rises to
the finding's own) and EM from there cannot either, so along the greedy path the bound never
falls: the answer with ``max_exact = k + 1`` is never below the answer with ``max_exact = k``.

Arrays in, arrays out: nothing here knows about the estimators.
"""
import numbers
import time

import numpy as np

from mfengine.sbn._exact_noisy_or import (_case, _check_evidence, _check_sparse_weights,
                                          _check_vector, _check_width, _log1mexp, _plan)

__all__ = ["hybrid_bipartite", "DEFAULT_HYBRID_MAX_WIDTH"]

#: Largest table of the hybrid's junction tree, as a number of diseases.  Smaller than the
#: exact engine's limit: the tree is calibrated once per EM iteration and once more per
#: greedy step, so its cost multiplies.
DEFAULT_HYBRID_MAX_WIDTH = 16

#: Default most EM iterations per EM run (one run per greedy step, and the last).
DEFAULT_MAX_ITER = 200

# iterations of the M-step's safeguarded Newton solves (each converges in a handful; these
# only bound the work on pathological input)
_OUTER_ITER = 100
_INNER_ITER = 100
# the M-step's multiplier is solved until sum_j q_j is 1 to this (then q is divided by it)
_SUM_TOL = 1e-10


# ------------------------------------------------------------------------------ numerics
# The functions below run under np.errstate(all="ignore") set once by their callers
# (``hybrid_bipartite``, ``_mstep``): F(0) = -inf and 0 * inf are expected values there, and
# the context manager itself costs more than the arithmetic on these short arrays.
_LN2 = float(np.log(2.0))


def _F(x):
    """F(x) = ln(1 - e^{-x}) for x >= 0 (F(0) = -inf), to a few ulp at both ends."""
    x = np.asarray(x, dtype=np.float64)
    return np.where(x > _LN2, np.log1p(-np.exp(-x)), np.log(-np.expm1(-x)))


def _gamma(u, h, Fh):
    """Gam(u) = F(h + u) - F(h) - u F'(h + u) and dGam/d(ln u) = u^2 e^{-x} / (1 - e^{-x})^2,
    x = h + u, written with e^{-x} so that nothing overflows for large x."""
    x = h + u
    ex = np.exp(-x)
    om = -np.expm1(-x)                            # 1 - e^{-x}
    r = ex / om                                   # F'(x)
    Fx = np.where(x > _LN2, np.log1p(-ex), np.log(om))
    return Fx - Fh - u * r, u * u * r / om


# ------------------------------------------------------------------------------ the M-step
def _seg_max(v, seg, n):
    out = np.full(n, -np.inf)
    np.maximum.at(out, seg, v)
    return out


def _inner(target, gap, w, he, Fhe, v):
    """Solve Gam(e^v) = target for v in [ln w, ln 745] (one entry per edge); ``gap`` is
    ``-F(h) - target`` (> 0, computed by the caller without cancellation) and ``v`` the start.

    Newton's method on psi(v) = ln Gam - ln(-F(h) - Gam) = ln target - ln gap, bisecting
    whenever a step leaves the bracket: psi is close to 2 v + const for small u = e^v (Gam
    ~ u^2) and to u for large u (-F(h) - Gam = -F(h + u) + u F'(h + u) ~ (1 + u) e^{-h-u}),
    so neither end is flat, as Gam itself is at large u.  Both Gam and its complement are
    computed directly.  Below ln w the edge's q would exceed 1 (the solve stops there); at
    ln 745 the complement underflows.  Returns v and dGam/dv there."""
    lo, hi = np.log(w), np.full(w.size, np.log(745.0))
    goal = np.log(target) - np.log(gap)
    # where Gam(w) already reaches the target the answer is the floor (q = 1): found here,
    # not by bisecting down to it
    g_lo, d_lo = _gamma(w, he, Fhe)
    floor = g_lo >= target
    v = np.where(floor, lo, np.minimum(np.maximum(v, lo), hi))
    dgv = np.where(floor, d_lo, 1.0)
    todo = np.flatnonzero(~floor)
    for _ in range(_INNER_ITER):
        if not todo.size:
            break
        vt = v[todo]
        u = np.exp(vt)
        x = he[todo] + u
        ex = np.exp(-x)
        om = -np.expm1(-x)
        r = ex / om
        Fx = np.where(x > _LN2, np.log1p(-ex), np.log(om))
        comp = u * r - Fx                             # -F(h) - Gam >= 0
        gam = Fx - Fhe[todo] - u * r
        d = u * u * r / om                            # dGam/dv
        dgv[todo] = d
        f = np.log(gam) - np.log(comp) - goal[todo]
        below = f < 0
        lt, ht = np.where(below, vt, lo[todo]), np.where(below, hi[todo], vt)
        lo[todo], hi[todo] = lt, ht
        vn = vt - f / (d / gam + d / comp)
        # a Newton step inside the bracket (its ends included: a root found exactly is
        # one) is taken, else the bracket is halved
        vn = np.where((vn >= lt) & (vn <= ht), vn, 0.5 * (lt + ht))
        v[todo] = vn
        scale = 1e-12 * np.maximum(1.0, np.abs(vn))
        todo = todo[(np.abs(vn - vt) > scale) & (ht - lt > scale) & (f != 0.0)]
    return v, dgv


def _mstep(w, p, seg, h, lam, u0):
    """Maximise each transformed finding's ``g_f(q)`` over its simplex (see the module
    docstring).

    Parameters
    ----------
    w, p : ndarray of shape (n_edges,)
        Each edge's weight (> 0) and its disease's posterior marginal; the edges of one
        finding are contiguous.
    seg : ndarray of int of shape (n_edges,)
        Each edge's finding (0 .. n_f - 1, non-decreasing).
    h : ndarray of shape (n_f,)
        The findings' leak biases, all > 0.
    lam : ndarray of shape (n_f,)
        A starting multiplier of each finding (NaN: none); overwritten with the solution's.
    u0 : ndarray of shape (n_edges,)
        Starting ``u = w / q`` of each edge (inf or NaN: none).

    Returns
    -------
    q : ndarray of shape (n_edges,)
        On each finding's simplex (sum 1 up to rounding), or NaN throughout a finding whose
        parents all have ``p = 0`` (every q is then optimal: the caller keeps its old ones).
    u : ndarray of shape (n_edges,)
        ``w / q`` (inf where q is 0).

    Notes
    -----
    ``sum_j q_j(lam)`` decreases continuously in ``lam``, but in double precision it jumps
    at a parent's threshold ``lam = p_j (-F(h))``: one rounding step of ``lam`` below it, that
    parent's ``u_j`` is where ``-F(h) - Gam`` falls to that step (``u`` near 37 for ``lam``
    near 1, so ``q_j`` near ``w_j / 37``), and above it ``q_j`` is 0.  When the solution lies
    in that jump the bracket of ``lam`` shrinks to the threshold, and the parent (its term
    ``q_j (F(h + w_j / q_j) - F(h))`` is then linear in ``q_j`` to double precision) takes
    what the others leave of the sum 1.
    """
    with np.errstate(all="ignore"):
        return _mstep_solve(w, p, seg, h, lam, u0)


def _mstep_solve(w, p, seg, h, lam, u0):
    """The body of ``_mstep`` (under its errstate)."""
    n_f = h.size
    Fh = _F(h)
    ce = -Fh[seg]                                    # Gam's supremum, > 0
    he, Fhe = h[seg], Fh[seg]
    thr = p * ce                                     # lam at which q_j reaches 0
    lam_hi = _seg_max(thr, seg, n_f)                 # S(lam_hi) = 0
    g_w, _ = _gamma(w, he, Fhe)
    lam_lo = _seg_max(p * g_w, seg, n_f)             # some q_j >= 1 there: S >= 1
    live = lam_hi > 0.0
    x_lo = np.where(live, np.log(lam_lo), 0.0)
    x_hi = np.where(live, np.log(np.where(live, lam_hi, 1.0)), 0.0)
    x = np.log(np.where(lam > 0, lam, np.nan))
    x = np.where((x > x_lo) & (x < x_hi), x, 0.5 * (np.maximum(x_lo, x_hi - 40.0) + x_hi))
    v = np.log(np.where(np.isfinite(u0) & (u0 > 0), u0, w))
    q = np.zeros(w.size)
    conv = ~live
    stuck = np.zeros(n_f, dtype=bool)
    for _ in range(_OUTER_ITER):
        open_f = ~(conv | stuck)
        if not open_f.any():
            break
        e = np.flatnonzero(open_f[seg])
        lam_e = np.exp(x)[seg[e]]
        target = lam_e / p[e]                         # inf where p = 0: inactive
        act = lam_e < thr[e]
        ea = e[act]
        v[ea], dgv = _inner(target[act], (thr[ea] - lam_e[act]) / p[ea], w[ea], he[ea],
                            Fhe[ea], v[ea])
        q[e] = 0.0
        q[ea] = w[ea] / np.exp(v[ea])
        S = np.bincount(seg[e], weights=q[e], minlength=n_f)
        # dS / d ln lam = sum_j -q_j d ln u_j / d ln lam = sum_j -q_j Gam(u_j) / (dGam/dv)
        dS = np.bincount(seg[ea], weights=-q[ea] * target[act] / dgv, minlength=n_f)
        conv |= open_f & (np.abs(S - 1.0) <= _SUM_TOL)
        open_f &= ~conv
        x_lo = np.where(open_f & (S > 1.0), x, x_lo)
        x_hi = np.where(open_f & (S < 1.0), x, x_hi)
        xn = x - np.log(S) * S / dS                    # Newton on ln S(ln lam) = 0
        xn = np.where((xn > x_lo) & (xn < x_hi), xn, 0.5 * (x_lo + x_hi))
        stuck |= open_f & ((x_hi - x_lo) <= 4e-16 * np.maximum(1.0, np.abs(x)))
        move = open_f & ~stuck
        # first-order prediction of each u at the new lam (d ln u / d ln lam = Gam / dGam/dv):
        # the inner Newton iteration then starts close
        dx = np.where(move, xn - x, 0.0)
        v[ea] += np.clip(target[act] / dgv * dx[seg[ea]], -2.0, 2.0)
        x = np.where(move, xn, x)
    if stuck.any():
        # the solution sits in a jump (see Notes): the others at lam_hi, the flat parents
        # (threshold at the bracket) share the rest in proportion to their weights
        e = np.flatnonzero(stuck[seg])
        flat = np.abs(np.log(thr[e]) - x_hi[seg[e]]) <= 1e-12 * np.maximum(
            1.0, np.abs(x_hi[seg[e]]))
        lam_e = np.exp(x_hi)[seg[e]]
        target = lam_e / p[e]
        act = (lam_e < thr[e]) & ~flat
        ea = e[act]
        v[ea], _ = _inner(target[act], (thr[ea] - lam_e[act]) / p[ea], w[ea], he[ea],
                             Fhe[ea], v[ea])
        q[e] = 0.0
        q[ea] = w[ea] / np.exp(v[ea])
        rest = 1.0 - np.bincount(seg[e], weights=q[e], minlength=n_f)
        wf = np.bincount(seg[e[flat]], weights=w[e[flat]], minlength=n_f)
        ef = e[flat]
        q[ef] = np.maximum(rest[seg[ef]], 0.0) * w[ef] / wf[seg[ef]]
        x = np.where(stuck, x_hi, x)
    lam[:] = np.where(live, np.exp(x), np.nan)
    # on the simplex to rounding (a finding that met neither test is only rescaled)
    S = np.bincount(seg, weights=q, minlength=n_f)
    q = q / S[seg]
    q[~live[seg]] = np.nan
    u = np.where(q > 0, w / np.where(q > 0, q, 1.0), np.inf)
    return q, u


def _g_value(q, w, p, seg, h, n_f):
    """Each finding's M-step objective g_f(q) (the expected log of its transformed factor)."""
    a1, a0 = _factors(q, w, h[seg])
    with np.errstate(invalid="ignore"):
        t = np.where(p > 0, p * a1, 0.0) + np.where(p < 1, (1.0 - p) * a0, 0.0)
    return np.bincount(seg, weights=t, minlength=n_f)


def _factors(q, w, he):
    """Each edge's a1 = q F(h + w / q) and a0 = q F(h) (both 0 where q = 0)."""
    pos = q > 0
    qs = np.where(pos, q, 1.0)
    with np.errstate(invalid="ignore", over="ignore"):
        a1 = np.where(pos, qs * _F(he + w / qs), 0.0)
        a0 = np.where(pos, qs * _F(he), 0.0)
    return a1, a0


# ------------------------------------------------------------------------------ the width
def _degeneracy_exceeds(scopes, m, limit):
    """Whether the graph on m vertices in which each scope is a clique has a subgraph whose
    every vertex has more than ``limit`` neighbours (a lower bound on the treewidth: its
    largest minimum degree over the sequence that removes a vertex of least degree)."""
    A = np.zeros((m, m), dtype=bool)
    for sc in scopes:
        A[np.ix_(sc, sc)] = True
    np.fill_diagonal(A, False)
    deg = A.sum(axis=1)
    alive = np.ones(m, dtype=bool)
    for _ in range(m):
        d = np.where(alive, deg, m + 1)
        v = int(np.argmin(d))
        if d[v] > limit:
            return True
        alive[v] = False
        deg -= A[v]
    return False


def _fits(pos, W, max_width, focus=None):
    """Whether the junction tree of ``pos`` as the exact positives stays within ``max_width``
    diseases per table, as ``_exact_noisy_or._case`` would plan it (no table allocated).

    Only the component holding ``pos[focus]`` is checked when ``focus`` is given (the others
    are known to fit).  A component of at most ``max_width`` shared diseases fits whatever
    the order; one whose interaction graph has a subgraph of minimum degree ``max_width`` or
    more cannot (the tree's largest table holds more than that graph's treewidth); between
    the two, the engine's own plan (greedy min-fill) decides.  The second test spares the
    min-fill search, which costs seconds in pure Python on the few-hundred-disease
    components of a fully recorded case."""
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    if pos.size < 2:
        return True
    ptr, idx = W.indptr, W.indices
    lens = ptr[pos + 1] - ptr[pos]
    K = pos.size
    frow = np.repeat(np.arange(K), lens)
    dj = np.concatenate([idx[ptr[f]:ptr[f + 1]] for f in pos])
    _, loc, cnt = np.unique(dj, return_inverse=True, return_counts=True)
    she = np.flatnonzero(cnt[loc] >= 2)
    if not she.size:
        return True
    sv, var = np.unique(loc[she], return_inverse=True)
    g = coo_matrix((np.ones(she.size), (frow[she], K + var)), shape=(K + sv.size, K + sv.size))
    _, lab = connected_components(g, directed=False)
    fr = frow[she]
    comps = np.unique(lab[fr]) if focus is None else np.array([lab[focus]])
    for c in comps:
        V = np.flatnonzero(lab[K:] == c)
        if V.size <= max_width:
            continue
        vmap = np.full(sv.size, -1, dtype=np.intp)
        vmap[V] = np.arange(V.size)
        F = np.unique(fr[lab[fr] == c])
        scopes = [vmap[var[fr == f]] for f in F]
        if _degeneracy_exceeds(scopes, V.size, max_width - 1):
            return False
        if _plan(scopes, [np.ones(s.size) for s in scopes], V.size, max_width).width \
                > max_width:
            return False
    return True


# ------------------------------------------------------------------------------ one case
class _Problem:
    """One case: the negative findings absorbed, the positive findings' edges laid out."""

    def __init__(self, pos, neg_l1, W, hd, hf, max_width, case):
        self.pos = pos
        self.W = W
        self.hf = hf
        self.max_width = max_width
        self.case = case
        self.l0 = -hd                                  # ln P(d_j = 0)
        self.l1 = neg_l1                               # ln P(d_j = 1) - sum_neg w_fj
        ptr = W.indptr
        self.starts = ptr[pos]
        self.lens = ptr[pos + 1] - self.starts
        K = pos.size
        self.frow = np.repeat(np.arange(K), self.lens)
        edge = np.arange(self.lens.sum()) + np.repeat(self.starts - (np.cumsum(self.lens)
                                                                      - self.lens), self.lens)
        self.dj = W.indices[edge]
        self.w = W.data[edge]
        self.hp = hf[pos]

    def evaluate(self, exact, q):
        """B(E, q) and the marginals of the transformed model; ``q`` per edge (read only on
        the transformed findings' edges).  Returns (bound, marginals, width)."""
        T = ~exact[self.frow]
        a1, a0 = _factors(np.where(T, q, 0.0), self.w, self.hp[self.frow])
        nd = self.l0.size
        l1 = self.l1 + np.bincount(self.dj, weights=a1, minlength=nd)
        l0 = self.l0 + np.bincount(self.dj, weights=a0, minlength=nd)
        log_z = np.logaddexp(l0, l1)
        with np.errstate(invalid="ignore"):
            lq0, lq1 = l0 - log_z, l1 - log_z
        bound = float(np.sum(log_z))
        with np.errstate(under="ignore", invalid="ignore"):
            marg = np.exp(lq1)
        width = 0
        if exact.any() and np.isfinite(bound):
            log_e, dis, post, _, _, width = _case(self.pos[exact], self.W, lq0, lq1, self.hf,
                                                   self.max_width, self.case)
            bound += log_e
            marg[dis] = post
        if not bound > -np.inf:
            return -np.inf, np.full(nd, np.nan), width
        return bound, marg, width

    def gains(self, exact, q, marg):
        """The predicted gain ln E[P(f = 1 | d) / G_f(d)] of making each transformed finding
        exact, the posterior taken as factorised over ``marg`` (see the module docstring);
        -inf for the exact ones."""
        K = self.pos.size
        T = ~exact[self.frow]
        a1, a0 = _factors(np.where(T, q, 0.0), self.w, self.hp[self.frow])
        p = marg[self.dj]
        with np.errstate(divide="ignore", invalid="ignore"):
            lp, lnp = np.log(p), np.log1p(-p)
            # ln E[e^{-a}] and ln E[e^{-w d - a}] per edge, 0 * inf read as 0
            e1 = np.where(p > 0, lp - a1, -np.inf)
            e0 = np.where(p < 1, lnp - a0, -np.inf)
            A = np.bincount(self.frow, weights=np.logaddexp(e1, e0), minlength=K)
            B = -self.hp + np.bincount(self.frow, weights=np.logaddexp(e1 - self.w, e0),
                                       minlength=K)
            gain = A + _log1mexp(np.minimum(B - A, 0.0))
        gain[exact] = -np.inf
        return np.where(np.isnan(gain), np.inf, gain)


def _em(prob, exact, q, lam, u, tol, max_iter, trace=None):
    """EM on the q of the transformed findings from ``q`` (updated in place with ``lam`` and
    ``u``); returns (bound, marginals, width, iterations).  ``trace``, a list, receives the
    bound after every step."""
    bound, marg, width = prob.evaluate(exact, q)
    if trace is not None:
        trace.append(bound)
    T = ~exact[prob.frow]
    multi = T & (prob.lens[prob.frow] > 1) & (prob.hp[prob.frow] > 0)
    if not multi.any() or not np.isfinite(bound):
        return bound, marg, width, 0
    edges = np.flatnonzero(multi)
    fids, seg = np.unique(prob.frow[edges], return_inverse=True)
    h = prob.hp[fids]
    n_iter = 0
    lam_f = lam[fids]
    for n_iter in range(1, max_iter + 1):
        q_new, u_new = _mstep(prob.w[edges], marg[prob.dj[edges]], seg, h, lam_f, u[edges])
        keep = np.isnan(q_new)
        q_try = q.copy()
        q_try[edges] = np.where(keep, q[edges], q_new)
        new_bound, new_marg, new_width = prob.evaluate(exact, q_try)
        if trace is not None:
            trace.append(new_bound)
        if not new_bound >= bound:
            # EM cannot lower the bound; only rounding (or an M-step that stopped short)
            # could, and then the previous q stands
            break
        q[:] = q_try
        u[edges] = np.where(keep, u[edges], u_new)
        lam[fids] = lam_f
        gain = new_bound - bound
        bound, marg, width = new_bound, new_marg, new_width
        if gain < tol:
            break
    return bound, marg, width, n_iter


def _vertex_q(prob, marg):
    """q of a finding without leak (h = 0): all on the parent with the largest
    p_j (1 - e^{-w_j}), the others 0 (see the module docstring)."""
    q = np.zeros(prob.w.size)
    zero = np.flatnonzero((prob.hp == 0) & (prob.lens > 0))
    for k in zero:
        e = np.arange(prob.lens[:k].sum(), prob.lens[:k + 1].sum())
        score = marg[prob.dj[e]] * -np.expm1(-prob.w[e])
        q[e[np.argmax(score)]] = 1.0
    return q


def _start(prob):
    """Starting q of the transformed findings, with the M-step's multipliers and u: each
    finding's q in proportion to its weights (the M-step's answer when every parent has the
    same marginal: the optimum's u_j = w_j / q_j are then equal), q = 1 for a finding with
    one parent, and for a finding without leak a vertex (see ``_vertex_q``).  Starting from
    the M-step on the diseases' priors instead tends to put each finding's q on one parent
    early, and EM then stays there, often far below (more than 10 nats on some
    diagnosis-net cases)."""
    K = prob.pos.size
    wsum = np.bincount(prob.frow, weights=prob.w, minlength=K)
    q = prob.w / wsum[prob.frow] if prob.w.size else np.zeros(0)
    u = wsum[prob.frow].copy()
    lam = np.full(K, np.nan)
    leak = prob.hp > 0
    if leak.any():
        g, _ = _gamma(wsum[leak], prob.hp[leak], _F(prob.hp[leak]))
        lam[leak] = 0.5 * g                  # p G(u) with every marginal taken as 1/2
    p0 = np.exp(prob.l1 - np.logaddexp(prob.l0, prob.l1))
    vq = _vertex_q(prob, p0)
    leakless = (prob.hp[prob.frow] == 0) & (prob.lens[prob.frow] > 1)
    q[leakless] = vq[leakless]
    u[leakless] = np.where(vq[leakless] > 0, prob.w[leakless], np.inf)
    return q, lam, u


def _solve_case(prob, max_exact, tol, max_iter):
    """The hybrid bound of one case; returns (bound, marginals, n_exact, width, n_iter, exact
    set as a boolean mask over the case's positives)."""
    K = prob.pos.size
    cap = K if max_exact is None else min(K, max_exact)
    # every positive exact when the tree allows it: the bound is then ln P(e)
    if cap == K and _fits(prob.pos, prob.W, prob.max_width):
        exact = np.ones(K, dtype=bool)
        bound, marg, width = prob.evaluate(exact, np.zeros(prob.w.size))
        return bound, marg, K, width, 0, exact
    # parentless positives are exact at no cost (they join no table)
    exact = prob.lens == 0
    n_free = int(exact.sum())
    q, lam, u = _start(prob)
    n_iter = 0
    bound, marg, width, it = _em(prob, exact, q, lam, u, tol, max_iter)
    n_iter += it
    rejected = np.zeros(K, dtype=bool)
    while int(exact.sum()) - n_free < cap:
        gain = prob.gains(exact, q, marg)
        gain[rejected | exact] = -np.inf
        chosen = -1
        for k in np.argsort(-gain, kind="stable"):
            # too little to gain: a finding with one parent is exact already when transformed,
            # and where the transformed posterior sits on one configuration of the diseases
            # (fully recorded cases) every predicted gain is rounding noise
            if not gain[k] > tol:
                break
            trial = exact.copy()
            trial[k] = True
            if _fits(prob.pos[trial], prob.W, prob.max_width,
                     focus=int(np.count_nonzero(trial[:k]))):
                chosen = k
                break
            # the exact set only grows, and with it the tree's treewidth: a finding too
            # wide now is not tried again (min-fill's width only approximates the
            # treewidth, so this is a rule of thumb, not a certainty)
            rejected[k] = True
        if chosen < 0:
            break
        exact[chosen] = True
        bound, marg, width, it = _em(prob, exact, q, lam, u, tol, max_iter)
        n_iter += it
    return bound, marg, int(exact.sum()), width, n_iter, exact


# ------------------------------------------------------------------------------ entry point
def hybrid_bipartite(h_disease, h_finding, W_fd, evidence, missing=None, *,
                     max_width=DEFAULT_HYBRID_MAX_WIDTH, max_exact=None, tol=1e-6,
                     max_iter=DEFAULT_MAX_ITER):
    """A certified lower bound on ln P(recorded findings) of a bipartite noisy-OR net, with
    some positive findings exact and the rest transformed (see the module docstring).

    Exact where tractable: when every positive finding fits in a junction tree whose largest
    table is within ``max_width`` diseases (and ``max_exact`` allows them all), the bound is
    ln P(e) and the marginals are exact.  Otherwise positives join the exact set greedily, by
    their predicted gain, while the tree stays within ``max_width`` and their number within
    ``max_exact``; the rest are transformed by Jensen's inequality into per-disease factors
    whose variational parameters EM raises.

    Parameters
    ----------
    h_disease : array_like of shape (n_diseases,)
        Non-negative disease biases: ``P(d_j = 1) = 1 - exp(-h_disease[j])``.
    h_finding : array_like of shape (n_findings,)
        Non-negative leak biases of the findings.
    W_fd : array_like or scipy.sparse matrix of shape (n_findings, n_diseases)
        Non-negative weights: ``P(f = 0 | d) = exp(-h_finding[f] - sum_j W_fd[f, j] d_j)``.
    evidence : array_like of shape (n_cases, n_findings)
        Each case's findings: 1 (positive), 0 (negative) or NaN (unrecorded).
    missing : array_like of bool, optional
        Unrecorded findings as a mask, of ``evidence``'s shape or (n_findings,).
    max_width : int, default=16
        Largest table of the exact part, as a number of diseases (``2**max_width`` entries).
    max_exact : int, optional
        Most positive findings in the exact part (parentless positives, exact at no cost, are
        not counted).  None: as many as ``max_width`` allows.  0: every positive transformed.
    tol : float, default=1e-6
        EM stops when an iteration raises the bound by less than ``tol`` nats.
    max_iter : int, default=200
        Most EM iterations per EM run (one run at the start and one after each finding joins
        the exact set).

    Returns
    -------
    lower_bound : ndarray of shape (n_cases,)
        The bound on ln P(recorded findings), in nats: equal to it where ``info["exact"]``;
        -inf for evidence of probability zero.
    marginals : ndarray of shape (n_cases, n_diseases)
        The diseases' posteriors under the final transformed model (exact where
        ``info["exact"]``); NaN throughout a case whose bound is -inf.
    info : dict of ndarray of shape (n_cases,)
        "n_positive": recorded positives; "n_exact": positives in the exact part (parentless
        ones included); "exact": True where all are; "width": diseases in the largest table;
        "n_iter": EM iterations, summed over the runs; "seconds": time of the case.

    Raises
    ------
    ValueError
        On malformed input, naming the argument.

    Examples
    --------
    >>> import numpy as np
    >>> import mfengine as mf
    >>> from mfengine.sbn._exact_noisy_or import bipartite_blocks, exact_bipartite
    >>> from mfengine.sbn._hybrid_noisy_or import hybrid_bipartite
    >>> net = mf.datasets.make_diagnosis_net(30, 60, 4, random_state=0)
    >>> b = bipartite_blocks(net.W, net.h, net.visible, net.activation)
    >>> X = net.sample(2, random_state=3)
    >>> exact, _, _ = exact_bipartite(b.h_disease, b.h_finding, b.W_fd, X)
    >>> lb, marg, info = hybrid_bipartite(b.h_disease, b.h_finding, b.W_fd, X, max_exact=1)
    >>> bool(np.all(lb <= exact + 1e-9)), marg.shape
    (True, (2, 30))
    """
    max_width = _check_width(max_width)
    if max_exact is not None and (isinstance(max_exact, (bool, np.bool_))
                                  or not isinstance(max_exact, numbers.Integral)
                                  or max_exact < 0):
        raise ValueError(f"max_exact must be None or a non-negative integer, got {max_exact!r}")
    if isinstance(tol, (bool, np.bool_)) or not isinstance(tol, numbers.Real) \
            or not (np.isfinite(tol) and tol > 0):
        raise ValueError(f"tol must be a positive finite number, got {tol!r}")
    if isinstance(max_iter, (bool, np.bool_)) or not isinstance(max_iter, numbers.Integral) \
            or max_iter < 0:
        raise ValueError(f"max_iter must be a non-negative integer, got {max_iter!r}")
    hd = _check_vector(h_disease, "h_disease")
    hf = _check_vector(h_finding, "h_finding")
    W = _check_sparse_weights(W_fd, "W_fd", shape=(hf.size, hd.size))
    pos_all, neg_all = _check_evidence(evidence, missing, hf.size)
    n_cases, nd = pos_all.shape[0], hd.size
    bound = np.empty(n_cases)
    marg = np.empty((n_cases, nd))
    info = {k: np.zeros(n_cases, dtype=np.intp)
            for k in ("n_positive", "n_exact", "width", "n_iter")}
    info["exact"] = np.zeros(n_cases, dtype=bool)
    info["seconds"] = np.zeros(n_cases)
    with np.errstate(divide="ignore"):
        lp1 = np.log(-np.expm1(-hd))
    WT = W.T.tocsr()
    for i in range(n_cases):
        t0 = time.perf_counter()
        neg = neg_all[i].astype(np.float64)
        l1 = lp1 - WT @ neg
        pos = np.flatnonzero(pos_all[i])
        prob = _Problem(pos, l1, W, hd, hf, max_width, i)
        # F(0) = -inf (a finding without leak) and 0 * inf (a parent with q = 0) are expected
        # values here, read as the module docstring says
        with np.errstate(all="ignore"):
            b, m, n_ex, width, n_it, _ = _solve_case(prob, max_exact, float(tol),
                                                     int(max_iter))
        bound[i] = b - float(neg @ hf)
        marg[i] = m
        info["n_positive"][i] = pos.size
        info["n_exact"][i] = n_ex
        info["exact"][i] = n_ex == pos.size
        info["width"][i] = width
        info["n_iter"][i] = n_it
        info["seconds"][i] = time.perf_counter() - t0
    return bound, marg, info
