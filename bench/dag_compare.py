"""mf.infer's DAG methods "sjj" and "plefka12" against a NumPy and a PyTorch peer (one process).

    python bench/dag_compare.py                  # both models, both methods (~2-3 min)
    python bench/dag_compare.py --models batch --methods sjj
    python bench/dag_compare.py --no-torch

Models (the same inputs for every implementation):

* ``batch``   -- a ``mf.BeliefNetBatch`` of 10,000 random layered 2x4x6 sigmoid nets, weights
  and biases uniform in [-1, 1] (``bench/plefka_tables.random_nets``, seed 0), the six bottom
  units clamped to 0; one item per net (the setting of Bhattacharyya & Keerthi's Table 1);
* ``layered`` -- ``mf.SigmoidBeliefNet([4, 12, 36, 100], random_state=0)`` (weights
  N(0, 1/fan_in), zero biases: Saul & Jordan's net), 1000 patterns sampled from it
  (``random_state=1``); mf.infer converts it to a DAG.

Objectives (written out once per peer, for layered nets; mu_l / u_l the means of layer l, the
bottom layer clamped to the data, t = logit(mu) of the hidden units):

* "sjj", maximised over mu and xi (Saul, Jaakkola & Jordan; ``mfengine/sbn/_sjj.pyx``)::

      L = sum_hidden H(mu_i) + sum_i [(mu_i - xi_i) Z_i - ln(e^{A_i} + e^{B_i})]
      Z_i = h_i + sum_j W_ij mu_j,   A_i = -xi_i h_i + sum_j ln(1 - mu_j + mu_j e^{-xi_i W_ij}),
      B_i = (1 - xi_i) h_i + sum_j ln(1 - mu_j + mu_j e^{(1 - xi_i) W_ij})

  (for a top unit the bracket is mu_i h_i - ln(1 + e^{h_i}) whatever xi_i, so top units have
  no xi here);
* "plefka12", minimised over the hidden u (Bhattacharyya & Keerthi, eq. 42; sigmoid units)::

      G12 = sum_hidden [u ln u + (1 - u) ln(1 - u)] - sum_i [u_i M_i - ln(1 + e^{M_i})]
            + 1/2 sum_i sigma'(M_i) V_i,     M_i = h_i + sum_j W_ij u_j,  V_i = sum_j W_ij^2 u_j (1 - u_j)

  mf.infer reports ``bound = -G12``; so do the peers.

Before timing, each peer's objective is evaluated at mf.infer's solution and must equal mf's
reported bound to 1e-9 nats per item (so the three really optimise one function).

Peers (float64, items batched; every item stops on the same kind of criterion as mf.infer's
Plefka kernel: the largest residual of the mean-field equations, |dObjective/dt| in the
logits ~ |sigmoid(image) - mu|, at most ``--tol``, default 1e-6; mf's sjj stops when a sweep
changes the bound by less than tol):

* NumPy -- the mean-field fixed-point iteration in the logits, t <- image(t) (for sjj the
  image is dE/dmu, for G12 it is -dF/du, eq. 73 of Bhattacharyya & Keerthi), used as a search
  direction: ``image - t`` is the gradient in t scaled by 1 / (mu (1 - mu)), hence an ascent
  (descent) direction.  The full step is taken when it passes an Armijo test, otherwise it is
  halved, per item.  For sjj every iteration first minimises each unit's convex
  phi(xi) = xi Z + ln(e^A + e^B) exactly (safeguarded Newton, all units and items at once:
  with mu fixed the xi decouple).  All updates of all units and items are vectorised; the loop
  over iterations runs only over items not yet converged.  BLAS limited to one thread.
* PyTorch L-BFGS per item -- autograd on the same objective over the unconstrained logits of
  every hidden mu (and of every xi below the top layer, for sjj); one L-BFGS per item (history
  10, its own step scale and backtracking Armijo line search), all items in lockstep as
  (n_items, ...) tensors, converged items dropped (``_t_batched_lbfgs``).
* PyTorch joint L-BFGS -- ``torch.optim.LBFGS`` (strong-Wolfe line search, history 10) on the
  sum of the items' objectives over the same logits, one tensor for all items (items do not
  interact, so the sum's optimum is every item's optimum), as ``bench/torch_impl.py`` does for
  the Gaussian bound.  Its shared history and step cannot adapt to 10,000 differently curved
  items: on the batch model it needs ~900 iterations for sjj (the per-item version: 46 on
  average), and more the more items it is given, so it runs on a subset there (its rate on a
  subset overstates its rate on all items).

PyTorch runs with torch.set_num_threads(1).

Agreement, per item, d = peer's bound - mf's bound (nats).  sjj: mean |d| < 1e-4 asserted.
plefka12 (G12 may have several local minima): mean d < 1e-4 asserted, i.e. the peers do not
reach a lower G12 than mf on average.  Timings are reported, never asserted.  Throughput is
items per second of wall time, best of ``--repeats`` for mf; each peer runs once (after an
untimed warm-up on 8 items) on the first ``PEER_ITEMS`` items (the column "items timed" of
the table); "per CPU-s" divides by the CPU time of the calling thread (1-thread runs only), the
figure least disturbed by other work on a shared machine.
"""
import argparse
import os
import sys
import time
from dataclasses import dataclass, field

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import mfengine as mf  # noqa: E402

import _common  # noqa: E402
from plefka_tables import random_nets  # noqa: E402

BATCH_SIZES = (2, 4, 6)
N_NETS = 10000
LAYERED_SIZES = (4, 12, 36, 100)
N_PATTERNS = 1000
TOL = 1e-6
XI_TOL = 1e-10       # |phi'(xi)| at which the NumPy peer's xi solves stop
METHODS = ("sjj", "plefka12")
MODELS = {
    "batch": "10,000 random 2x4x6 nets, W, h ~ U[-1, 1], visible = 0",
    "layered": "4x12x36x100, W ~ N(0, 1/fan_in), 1000 sampled patterns",
}
# Asserted agreement (see the module docstring).
MAX_MEAN_ABS_DIFF_SJJ = 1e-4
MAX_MEAN_DIFF_G12 = 1e-4
MAX_OBJECTIVE_MISMATCH = 1e-9


# ---------------------------------------------------------------------------- cases
@dataclass
class Case:
    """One model with its data, as mf.infer takes it and as layers for the peers.

    ``W[l]`` is (n_items or 1, sizes[l + 1], sizes[l]), ``b[l]`` (n_items or 1, sizes[l]):
    per item for the batch of nets, shared (leading dimension 1) for the single net."""
    name: str
    description: str
    model: object
    V: np.ndarray
    W: list
    b: list
    sizes: tuple

    @property
    def n_items(self):
        return self.V.shape[0]

    def subset(self, n):
        """The first n items (the same nets and data, for the slow peers)."""
        if n is None or n >= self.n_items:
            return self
        W = [w[:n] if w.shape[0] > 1 else w for w in self.W]
        b = [v[:n] if v.shape[0] > 1 else v for v in self.b]
        model = self.model
        if isinstance(model, mf.BeliefNetBatch):
            model = mf.BeliefNetBatch(model.W[:n], model.h[:n], model.visible, model.activation)
        return Case(self.name, self.description, model, self.V[:n], W, b, self.sizes)


def make_case(name, n=None):
    if name == "batch":
        n = N_NETS if n is None else n
        batch = random_nets(np.random.default_rng(0), -1.0, 1.0, n, "sigmoid")
        off = np.cumsum((0,) + BATCH_SIZES)
        W = [np.ascontiguousarray(batch.W[:, off[l + 1]:off[l + 2], off[l]:off[l + 1]])
             for l in range(len(BATCH_SIZES) - 1)]
        b = [np.ascontiguousarray(batch.h[:, off[l]:off[l + 1]]) for l in range(len(BATCH_SIZES))]
        V = np.zeros((n, BATCH_SIZES[-1]))
        return Case(name, MODELS[name], batch, V, W, b, BATCH_SIZES)
    if name == "layered":
        n = N_PATTERNS if n is None else n
        net = mf.SigmoidBeliefNet(list(LAYERED_SIZES), random_state=0)
        V = net.sample(n, random_state=1)
        W = [np.asarray(w, dtype=np.float64)[None] for w in net.weights]
        b = [np.asarray(v, dtype=np.float64)[None] for v in net.biases]
        return Case(name, MODELS[name], net, V, W, b, LAYERED_SIZES)
    raise ValueError(f"unknown model {name!r}; one of {sorted(MODELS)}")


@dataclass
class Outcome:
    impl: str
    threads: int
    bound: np.ndarray           # (n_items,) nats: L for sjj, -G12 for plefka12
    converged: np.ndarray
    iterations: str
    mu: list = None             # hidden layers, (n_items, sizes[l]) each
    xi: list = None             # sjj: layers 1.., (n_items, sizes[l]) each
    seconds: float = float("nan")
    cpu_seconds: float = float("nan")
    extra: dict = field(default_factory=dict)


def run_mf(case, method, threads, tol=TOL):
    r = mf.infer(case.model, case.V, method=method, tol=tol, n_threads=threads)
    L = len(case.sizes)
    if isinstance(r.mu, list):                      # a layered net: one array per layer
        mu, xi = r.mu[:-1], None if r.xi is None else r.xi[1:]
    else:                                           # a batch: (n_nets, n_units)
        off = np.cumsum((0,) + case.sizes)
        mu = [r.mu[:, off[l]:off[l + 1]] for l in range(L - 1)]
        xi = None if r.xi is None else [r.xi[:, off[l]:off[l + 1]] for l in range(1, L)]
    sweeps = np.asarray(r.n_sweeps).ravel()
    return Outcome("mfengine", threads, np.asarray(r.bound).ravel(),
                   np.asarray(r.converged).ravel(),
                   f"{sweeps.mean():.1f}/{sweeps.max()} sweeps", mu, xi)


# ---------------------------------------------------------------------------- NumPy pieces
def _sigmoid(x):
    return 0.5 * (1.0 + np.tanh(0.5 * x))


def _softplus(x):
    return np.logaddexp(0.0, x)


def _entropy_t(t):
    """Binary entropy of sigmoid(t), from t."""
    mu = _sigmoid(t)
    return mu * _softplus(-t) + (1.0 - mu) * _softplus(t)


def _mv(W, p):
    """sum_j W[n, i, j] p[n, j] (W per item, or shared with leading dimension 1)."""
    if W.shape[0] == 1:
        return p @ W[0].T
    return np.einsum("nij,nj->ni", W, p)


def _vm(q, W):
    """sum_i q[n, i] W[n, i, j]."""
    if W.shape[0] == 1:
        return q @ W[0]
    return np.einsum("ni,nij->nj", q, W)


def _l1p_parts(mu, x):
    """For ln(1 - mu + mu e^x) (elementwise, stable): the value, the tilted mean
    mu e^x / (1 - mu + mu e^x) and the derivative in mu, (e^x - 1) / (1 - mu + mu e^x)."""
    pos = x > 0.0
    em = np.expm1(-np.abs(x))                  # e^{-|x|} - 1, in (-1, 0]
    m = np.where(pos, 1.0 - mu, mu)
    d = 1.0 + m * em                           # (1 - mu + mu e^x) e^{-max(x, 0)}
    val = np.maximum(x, 0.0) + np.log1p(m * em)
    tilt = np.where(pos, mu, mu * (em + 1.0)) / d
    dmu = np.where(pos, -em, em) / d
    return val, tilt, dmu


def _l1p(mu, x):
    pos = x > 0.0
    m = np.where(pos, 1.0 - mu, mu)
    return np.maximum(x, 0.0) + np.log1p(m * np.expm1(-np.abs(x)))


def np_sjj_objective(case_W, case_b, mus, xis, want_grad=False):
    """SJJ bound per item; ``mus`` all layers (visible last), ``xis`` layers 1..; with
    want_grad also dE/dmu for every hidden layer (E = the bound without the entropies)."""
    nl = len(mus)
    b0 = case_b[0]
    L = (mus[0] * b0 - _softplus(b0)).sum(axis=1)
    grads = [np.broadcast_to(b0, mus[0].shape).copy()] + [None] * (nl - 2) if want_grad else None
    for l in range(nl - 1):
        c = l + 1
        W, bc, x = case_W[l], case_b[c], xis[l]
        pm = mus[l][:, None, :]
        Z = bc + _mv(W, mus[l])
        xa = -x[:, :, None] * W
        xb = (1.0 - x)[:, :, None] * W
        if want_grad:
            va, _, da = _l1p_parts(pm, xa)
            vb, _, db = _l1p_parts(pm, xb)
        else:
            va, vb = _l1p(pm, xa), _l1p(pm, xb)
        A = -x * bc + va.sum(axis=2)
        B = (1.0 - x) * bc + vb.sum(axis=2)
        L = L + ((mus[c] - x) * Z - np.logaddexp(A, B)).sum(axis=1)
        if want_grad:
            pa = _sigmoid(A - B)
            g = _vm(mus[c] - x, W) - np.einsum("ni,nij->nj", pa, da) \
                - np.einsum("ni,nij->nj", 1.0 - pa, db)
            grads[l] = grads[l] + g
            if c < nl - 1:
                grads[c] = Z
    for l in range(nl - 1):
        mu = mus[l]
        with np.errstate(divide="ignore", invalid="ignore"):
            h = -mu * np.log(mu) - (1.0 - mu) * np.log1p(-mu)
        L = L + np.where((mu > 0.0) & (mu < 1.0), h, 0.0).sum(axis=1)
    return (L, grads) if want_grad else L


def np_g12_objective(case_W, case_b, us, want_grad=False):
    """G12 per item; ``us`` all layers (visible last); with want_grad also dF/du for every
    hidden layer (F = G12 without the negative entropies)."""
    nl = len(us)
    b0 = case_b[0]
    G = -(us[0] * b0 - _softplus(b0)).sum(axis=1)
    grads = [-np.broadcast_to(b0, us[0].shape)] + [None] * (nl - 2) if want_grad else None
    for l in range(nl - 1):
        c = l + 1
        W, bc, p = case_W[l], case_b[c], us[l]
        M = bc + _mv(W, p)
        W2 = W * W
        Vv = _mv(W2, p * (1.0 - p))
        s = _sigmoid(M)
        s1 = s * (1.0 - s)
        G = G + (-(us[c] * M - _softplus(M)) + 0.5 * s1 * Vv).sum(axis=1)
        if want_grad:
            coef = (s - us[c]) + 0.5 * s1 * (1.0 - 2.0 * s) * Vv
            grads[l] = grads[l] + _vm(coef, W) + 0.5 * (1.0 - 2.0 * p) * _vm(s1, W2)
            if c < nl - 1:
                grads[c] = -M
    for l in range(nl - 1):
        u = us[l]
        with np.errstate(divide="ignore", invalid="ignore"):
            ne = u * np.log(u) + (1.0 - u) * np.log1p(-u)
        G = G + np.where((u > 0.0) & (u < 1.0), ne, 0.0).sum(axis=1)
    return (G, grads) if want_grad else G


def _np_solve_xi(W, bc, p, xi, gtol, max_it=60):
    """Minimise phi(xi) = xi Z + ln(e^A + e^B) (convex on [0, 1]) for every unit of a layer and
    every item: safeguarded Newton from ``xi``, bisection when a step leaves the bracket."""
    Z = bc + _mv(W, p)
    pm = p[:, None, :]
    x = xi.copy()
    lo = np.zeros_like(x)
    hi = np.ones_like(x)
    rows = np.arange(x.shape[0])
    Wr, Zr, bcr, pmr = W, Z, bc, pm
    for _ in range(max_it):
        xr = x[rows]
        xa = -xr[:, :, None] * Wr
        xb = (1.0 - xr)[:, :, None] * Wr
        va, ra, _ = _l1p_parts(pmr, xa)
        vb, rb, _ = _l1p_parts(pmr, xb)
        A = -xr * bcr + va.sum(axis=2)
        B = (1.0 - xr) * bcr + vb.sum(axis=2)
        da = -bcr - (Wr * ra).sum(axis=2)
        db = -bcr - (Wr * rb).sum(axis=2)
        d2a = (Wr * Wr * ra * (1.0 - ra)).sum(axis=2)
        d2b = (Wr * Wr * rb * (1.0 - rb)).sum(axis=2)
        pa = _sigmoid(A - B)
        pb = 1.0 - pa
        d1 = Zr + pa * da + pb * db
        todo = (np.abs(d1) > gtol) & (hi[rows] - lo[rows] > 1e-15)
        if not todo.any():
            break
        lor, hir = lo[rows], hi[rows]
        hir = np.where(todo & (d1 > 0.0), xr, hir)
        lor = np.where(todo & (d1 <= 0.0), xr, lor)
        d2 = pa * (d2a + da * da) + pb * (d2b + db * db) - (pa * da + pb * db) ** 2
        with np.errstate(divide="ignore", invalid="ignore"):
            xn = np.where(d2 > 0.0, xr - d1 / d2, -1.0)
        xn = np.where((xn > lor) & (xn < hir), xn, 0.5 * (lor + hir))
        x[rows] = np.where(todo, xn, xr)
        lo[rows], hi[rows] = lor, hir
        keep = todo.any(axis=1)
        if not keep.all():
            rows = rows[keep]
            Zr, pmr = Zr[keep], pmr[keep]
            if Wr.shape[0] > 1:
                Wr, bcr = Wr[keep], bcr[keep]
    return x


def _pick(arrs, idx):
    return [a if a.shape[0] == 1 else a[idx] for a in arrs]


def np_solve(case, method, tol=TOL, max_iter=2000, c_armijo=1e-4, max_halvings=40):
    """The NumPy peer (see the module docstring); returns an Outcome (bound, converged, ...)."""
    sizes = case.sizes
    nl = len(sizes)
    n = case.n_items
    sjj = method == "sjj"
    t = [np.zeros((n, k)) for k in sizes[:-1]]                  # mu = 1/2
    xi = [np.full((n, k), 0.5) for k in sizes[1:]] if sjj else None
    V = np.asarray(case.V, dtype=np.float64)
    bound = np.empty(n)
    iters = np.zeros(n, dtype=np.intp)
    conv = np.zeros(n, dtype=bool)
    act = np.arange(n)
    sign = 1.0 if sjj else -1.0           # maximise L, or minimise G12 (maximise -G12)

    def objective(W, b, tt, Vv, xx, want_grad):
        mus = [_sigmoid(a) for a in tt] + [Vv]
        if sjj:
            return np_sjj_objective(W, b, mus, xx, want_grad)
        out = np_g12_objective(W, b, mus, want_grad)
        if want_grad:
            return -out[0], [-g for g in out[1]]     # the image of t is then +grad
        return -out

    for it in range(1, max_iter + 1):
        if act.size == 0:
            break
        W, b = _pick(case.W, act), _pick(case.b, act)
        ta = [a[act] for a in t]
        Va = V[act]
        xa = None
        if sjj:
            mus = [_sigmoid(a) for a in ta] + [Va]
            xa = [_np_solve_xi(W[l], b[l + 1], mus[l], xi[l][act], XI_TOL) for l in range(nl - 1)]
            for l in range(nl - 1):
                xi[l][act] = xa[l]
        f0, g = objective(W, b, ta, Va, xa, True)
        d = [gi - ti for gi, ti in zip(g, ta)]                  # image - t: an ascent direction
        v = [_sigmoid(ti) * (1.0 - _sigmoid(ti)) for ti in ta]
        res = np.max(np.concatenate([np.abs(_sigmoid(gi) - _sigmoid(ti)) for gi, ti in zip(g, ta)],
                                    axis=1), axis=1)
        slope = sum((di * di * vi).sum(axis=1) for di, vi in zip(d, v))
        done = res <= tol
        bound[act] = f0
        iters[act] = it - 1
        conv[act[done]] = True
        # Armijo backtracking along d, per item, for the items not yet converged
        pend = np.flatnonzero(~done)
        alpha = np.ones(pend.size)
        for _ in range(max_halvings):
            if pend.size == 0:
                break
            idx = act[pend]
            Wp, bp = _pick(case.W, idx), _pick(case.b, idx)
            tn = [ta[l][pend] + alpha[:, None] * d[l][pend] for l in range(nl - 1)]
            xp = [a[pend] for a in xa] if sjj else None
            f1 = objective(Wp, bp, tn, Va[pend], xp, False)
            ok = f1 >= f0[pend] + c_armijo * alpha * slope[pend]
            for l in range(nl - 1):
                t[l][idx[ok]] = tn[l][ok]
            pend, alpha = pend[~ok], 0.5 * alpha[~ok]
        # an item whose step cannot be made to pass (round-off level) stops where it is
        stuck = np.zeros(act.size, dtype=bool)
        stuck[pend] = True
        act = act[~(done | stuck)]
    if act.size:
        W, b = _pick(case.W, act), _pick(case.b, act)
        mus = [_sigmoid(a[act]) for a in t] + [V[act]]
        xa = [_np_solve_xi(W[l], b[l + 1], mus[l], xi[l][act], XI_TOL) for l in range(nl - 1)] \
            if sjj else None
        bound[act] = objective(W, b, [a[act] for a in t], V[act], xa, False)
        iters[act] = max_iter
    mu = [_sigmoid(a) for a in t]
    return Outcome("NumPy", 1, bound, conv, f"{iters.mean():.1f}/{iters.max()} it", mu, xi)


# ---------------------------------------------------------------------------- PyTorch peer
_torch = None
_torch_error = None


def torch_available():
    global _torch, _torch_error
    if _torch is None and _torch_error is None:
        try:
            import torch
            _torch = torch
        except Exception as exc:          # ImportError, or a broken install
            _torch_error = f"{type(exc).__name__}: {exc}"
    return _torch is not None


def torch_why_unavailable():
    torch_available()
    return None if _torch is not None else f"PyTorch cannot be imported ({_torch_error})"


def _t_l1p(mu, x):
    torch = _torch
    pos = x > 0.0
    m = torch.where(pos, 1.0 - mu, mu)
    return torch.clamp(x, min=0.0) + torch.log1p(m * torch.expm1(-x.abs()))


def _t_mv(W, p):
    if W.shape[0] == 1:
        return p @ W[0].T
    return _torch.einsum("nij,nj->ni", W, p)


def _t_objective(method, W, b, T, S, Vt, sizes):
    """Per-item bound (sjj: L; plefka12: -G12) at logits T (hidden mu) and S (xi of layers 1..)."""
    torch = _torch
    sp = torch.nn.functional.softplus
    nl = len(sizes)
    ts = list(torch.split(T, list(sizes[:-1]), dim=1))
    mus = [torch.sigmoid(a) for a in ts] + [Vt]
    out = sum((sp(a) - mu * a).sum(dim=1) for a, mu in zip(ts, mus[:-1]))     # entropies
    out = out + (mus[0] * b[0] - sp(b[0])).sum(dim=1)                          # top layer
    if method == "sjj":
        xis = [torch.sigmoid(a) for a in torch.split(S, list(sizes[1:]), dim=1)]
    for l in range(nl - 1):
        c = l + 1
        p = mus[l]
        if method == "sjj":
            x = xis[l]
            Z = b[c] + _t_mv(W[l], p)
            pm = p[:, None, :]
            A = -x * b[c] + _t_l1p(pm, -x[:, :, None] * W[l]).sum(dim=2)
            B = (1.0 - x) * b[c] + _t_l1p(pm, (1.0 - x)[:, :, None] * W[l]).sum(dim=2)
            out = out + ((mus[c] - x) * Z - torch.logaddexp(A, B)).sum(dim=1)
        else:
            M = b[c] + _t_mv(W[l], p)
            Vv = _t_mv(W[l] * W[l], p * (1.0 - p))
            s = torch.sigmoid(M)
            out = out + (mus[c] * M - sp(M) - 0.5 * s * (1.0 - s) * Vv).sum(dim=1)
    return out


def torch_solve(case, method, threads=1, tol=TOL, max_iter=20000, history_size=10):
    """The PyTorch peer (see the module docstring): one ``LBFGS.step`` on the sum of the items'
    objectives, which returns when every |dObjective/dlogit| <= tol (``tolerance_grad``), when
    the summed objective stops changing (a stalled line search) or after ``max_iter``."""
    if not torch_available():
        raise RuntimeError(torch_why_unavailable())
    torch = _torch
    old = torch.get_num_threads()
    torch.set_num_threads(int(threads))
    try:
        f64 = torch.float64
        W = [torch.as_tensor(w, dtype=f64) for w in case.W]
        b = [torch.as_tensor(v, dtype=f64) for v in case.b]
        Vt = torch.as_tensor(np.asarray(case.V, dtype=np.float64))
        n, sizes = case.n_items, case.sizes
        params = [torch.zeros((n, sum(sizes[:-1])), dtype=f64, requires_grad=True)]   # mu = 1/2
        if method == "sjj":
            params.append(torch.full((n, sum(sizes[1:])), 0.0, dtype=f64, requires_grad=True))
        S = params[1] if method == "sjj" else None
        opt = torch.optim.LBFGS(params, lr=1.0, max_iter=max_iter, max_eval=2 * max_iter,
                                history_size=history_size, tolerance_grad=tol,
                                tolerance_change=1e-300, line_search_fn="strong_wolfe")

        def closure():
            opt.zero_grad()
            loss = -_t_objective(method, W, b, params[0], S, Vt, sizes).sum()
            loss.backward()
            return loss

        opt.step(closure)
        st = opt.state[opt._params[0]]
        n_iter, n_evals = int(st.get("n_iter", 0)), int(st.get("func_evals", 0))
        per_item = _t_objective(method, W, b, params[0], S, Vt, sizes)
        for p in params:
            p.grad = None
        per_item.sum().backward()
        g = torch.cat([p.grad.abs().max(dim=1).values[:, None] for p in params], dim=1)
        conv = (g.max(dim=1).values <= tol).numpy().copy()
        reason = ("every |grad| <= tol" if conv.all() else
                  "max_iter" if n_iter >= max_iter else "no progress (line search stalled)")
        with torch.no_grad():
            mu = [torch.sigmoid(a).numpy().copy()
                  for a in torch.split(params[0].detach(), list(sizes[:-1]), dim=1)]
        return Outcome("PyTorch joint L-BFGS", threads, per_item.detach().numpy().copy(), conv,
                       f"{n_iter} it/{n_evals} evals", mu, None, extra={"stop_reason": reason})
    finally:
        torch.set_num_threads(old)


def _t_batched_lbfgs(fg, X, tol, m=10, max_iter=2000, c1=1e-4, max_ls=40):
    """Minimise n independent functions at once: L-BFGS per item (its own history, step scale
    and backtracking Armijo line search), run in lockstep on the items not yet converged.

    ``fg(idx, Xs)`` returns the values (len(idx),) and gradients of items ``idx`` at ``Xs``.
    An item stops when max |gradient| <= tol, or when its line search fails (round-off).
    Returns X, f, g, iterations per item, item-evaluations per item, and the stalled mask."""
    torch = _torch
    n, d = X.shape
    idx_all = torch.arange(n)
    f, g = fg(idx_all, X)
    S = torch.zeros((m, n, d), dtype=X.dtype)
    Y = torch.zeros((m, n, d), dtype=X.dtype)
    rho = torch.zeros((m, n), dtype=X.dtype)
    gamma = torch.ones(n, dtype=X.dtype)
    iters = torch.zeros(n, dtype=torch.long)
    evals = torch.ones(n, dtype=torch.long)
    stalled = torch.zeros(n, dtype=torch.bool)
    act = idx_all[g.abs().amax(dim=1) > tol]
    for k in range(max_iter):
        if act.numel() == 0:
            break
        ga, fa, Xa = g[act], f[act], X[act]
        # two-loop recursion, newest pair first (pairs with rho = 0 are skipped)
        q = ga.clone()
        slots = [(k - 1 - j) % m for j in range(min(k, m))]
        al = []
        for j in slots:
            a = rho[j, act] * (S[j, act] * q).sum(dim=1)
            q -= a[:, None] * Y[j, act]
            al.append(a)
        r = q * gamma[act][:, None]
        for j, a in zip(reversed(slots), reversed(al)):
            be = rho[j, act] * (Y[j, act] * r).sum(dim=1)
            r += S[j, act] * (a - be)[:, None]
        dvec = -r
        gd = (ga * dvec).sum(dim=1)
        bad = ~(gd < 0.0)                       # not a descent direction: steepest descent
        if bad.any():
            dvec[bad] = -ga[bad]
            gd = (ga * dvec).sum(dim=1)
        t = torch.ones(act.numel(), dtype=X.dtype)
        if k == 0:
            t = torch.clamp(1.0 / ga.abs().sum(dim=1), max=1.0)
        # backtracking line search (quadratic interpolation, step cut to [0.1, 0.5] of itself)
        newX, newf, newg = Xa.clone(), fa.clone(), ga.clone()
        ok_all = torch.zeros(act.numel(), dtype=torch.bool)
        pend = torch.arange(act.numel())
        for _ in range(max_ls):
            if pend.numel() == 0:
                break
            Xt = Xa[pend] + t[pend, None] * dvec[pend]
            ft, gt = fg(act[pend], Xt)
            evals[act[pend]] += 1
            ok = ft <= fa[pend] + c1 * t[pend] * gd[pend]
            acc = pend[ok]
            newX[acc], newf[acc], newg[acc] = Xt[ok], ft[ok], gt[ok]
            ok_all[acc] = True
            fail = pend[~ok]
            tf = t[fail]
            den = 2.0 * (ft[~ok] - fa[fail] - gd[fail] * tf)
            tn = -gd[fail] * tf * tf / den
            tn = torch.where(torch.isfinite(tn), tn, 0.5 * tf)
            t[fail] = torch.minimum(torch.maximum(tn, 0.1 * tf), 0.5 * tf)
            pend = fail
        s_, y_ = newX - Xa, newg - ga
        sy = (s_ * y_).sum(dim=1)
        good = ok_all & (sy > 1e-10 * s_.norm(dim=1) * y_.norm(dim=1))
        slot = k % m
        S[slot, act] = torch.where(good[:, None], s_, 0.0)
        Y[slot, act] = torch.where(good[:, None], y_, 0.0)
        rho[slot, act] = torch.where(good, 1.0 / torch.where(good, sy, 1.0), 0.0)
        gamma[act] = torch.where(good, sy / torch.where(good, (y_ * y_).sum(dim=1), 1.0),
                                 gamma[act])
        X[act], f[act], g[act] = newX, newf, newg
        iters[act] += 1
        stalled[act[~ok_all]] = True
        act = act[ok_all & (newg.abs().amax(dim=1) > tol)]
    return X, f, g, iters, evals, stalled


def torch_solve_per_item(case, method, threads=1, tol=TOL, max_iter=2000, history_size=10):
    """The PyTorch peer with one L-BFGS per item (``_t_batched_lbfgs``) on the same objective
    and logits as ``torch_solve``; stops each item when its max |dObjective/dlogit| <= tol."""
    if not torch_available():
        raise RuntimeError(torch_why_unavailable())
    torch = _torch
    old = torch.get_num_threads()
    torch.set_num_threads(int(threads))
    try:
        f64 = torch.float64
        W = [torch.as_tensor(w, dtype=f64) for w in case.W]
        b = [torch.as_tensor(v, dtype=f64) for v in case.b]
        Vt = torch.as_tensor(np.asarray(case.V, dtype=np.float64))
        n, sizes = case.n_items, case.sizes
        n_mu = sum(sizes[:-1])
        d = n_mu + (sum(sizes[1:]) if method == "sjj" else 0)

        def fg(idx, Xs):
            whole = idx.numel() == n
            Ws = W if whole else [w if w.shape[0] == 1 else w[idx] for w in W]
            bs = b if whole else [v if v.shape[0] == 1 else v[idx] for v in b]
            Xs = Xs.detach().requires_grad_(True)
            S = Xs[:, n_mu:] if method == "sjj" else None
            fv = -_t_objective(method, Ws, bs, Xs[:, :n_mu], S, Vt if whole else Vt[idx], sizes)
            gr, = torch.autograd.grad(fv.sum(), Xs)
            return fv.detach(), gr

        X, f, g, iters, evals, stalled = _t_batched_lbfgs(
            fg, torch.zeros((n, d), dtype=f64), tol, m=history_size, max_iter=max_iter)
        conv = (g.abs().amax(dim=1) <= tol).numpy().copy()
        mu = [torch.sigmoid(a).numpy().copy() for a in torch.split(X[:, :n_mu], list(sizes[:-1]), dim=1)]
        it = iters.numpy()
        ev = evals.numpy()
        return Outcome("PyTorch L-BFGS per item", threads, (-f).numpy().copy(), conv,
                       f"{it.mean():.1f}/{it.max()} it, {ev.mean():.1f} evals", mu, None,
                       extra={"stop_reason": f"{int(stalled.sum())} stalled" if stalled.any() else ""})
    finally:
        torch.set_num_threads(old)


# ---------------------------------------------------------------------------- checks
def objective_mismatch(case, method, ref):
    """max |NumPy objective at mf's solution - mf's bound| over items (nats)."""
    mus = list(ref.mu) + [np.asarray(case.V, dtype=np.float64)]
    if method == "sjj":
        val = np_sjj_objective(case.W, case.b, mus, ref.xi)
    else:
        val = -np_g12_objective(case.W, case.b, mus)
    out = {"numpy": float(np.max(np.abs(val - ref.bound)))}
    if torch_available():
        torch = _torch

        def logit(p):
            with np.errstate(divide="ignore"):
                return np.clip(np.log(p) - np.log1p(-p), -745.0, 745.0)

        T = torch.as_tensor(np.concatenate([logit(m) for m in ref.mu], axis=1))
        S = None
        if method == "sjj":
            S = torch.as_tensor(np.concatenate([logit(x) for x in ref.xi], axis=1))
        with torch.no_grad():
            tv = _t_objective(method, [torch.as_tensor(w) for w in case.W],
                              [torch.as_tensor(v) for v in case.b], T, S,
                              torch.as_tensor(np.asarray(case.V, dtype=np.float64)),
                              case.sizes).numpy()
        out["torch"] = float(np.max(np.abs(tv - ref.bound)))
    return out


def agreement(bound, ref_bound):
    d = np.asarray(bound) - np.asarray(ref_bound)
    return {"mean_diff": float(d.mean()), "mean_abs_diff": float(np.abs(d).mean()),
            "max_abs_diff": float(np.abs(d).max()),
            "frac_within_1e-4": float(np.mean(np.abs(d) <= 1e-4))}


def check_agreement(method, st, label):
    if method == "sjj":
        assert st["mean_abs_diff"] < MAX_MEAN_ABS_DIFF_SJJ, f"{label}: {st}"
    else:
        assert st["mean_diff"] < MAX_MEAN_DIFF_G12, f"{label}: {st}"


# ---------------------------------------------------------------------------- driver
def timed(fn, *args, repeats=1, budget=None, **kw):
    """Like ``_common.timed`` (best wall time of up to ``repeats`` runs, stopping once
    ``budget`` seconds are spent; CPU time of the calling thread in that run), and also the
    process's CPU time in that run over its wall time (``extra["cpu_per_wall"]``): about the
    number of cores the run had; a 2-thread run that shows ~1 did not get a second core."""
    best, out, spent = None, None, 0.0
    for _ in range(repeats):
        c0, p0, t0 = time.thread_time(), time.process_time(), time.perf_counter()
        o = fn(*args, **kw)
        dt = time.perf_counter() - t0
        dc, dp = time.thread_time() - c0, time.process_time() - p0
        if best is None or dt < best[0]:
            best, out = (dt, dc, dp), o
        spent += dt
        if budget is not None and spent >= budget:
            break
    out.seconds, out.cpu_seconds = best[0], best[1]
    out.extra["cpu_per_wall"] = best[2] / best[0]
    return out


def environment():
    import platform
    bits = [f"python {platform.python_version()}", f"numpy {np.__version__}",
            f"mfengine {getattr(mf, '__version__', '?')}"]
    if torch_available():
        bits.append(f"torch {_torch.__version__}")
    load = os.getloadavg() if hasattr(os, "getloadavg") else ()
    return (f"{', '.join(bits)}; {os.cpu_count()} CPUs; "
            f"load average {', '.join(f'{x:.2f}' for x in load)}")


# Items given to the peers (the first ones of each model): fewer where a peer would take
# more than ~10 s on all of them.  The joint L-BFGS needs more iterations the more items it
# optimises at once (every item must meet the tolerance), so its rate on a subset is an
# upper bound of its rate on all items.
PEER_ITEMS = {("batch", "sjj"): (N_NETS, N_NETS, 1000),
              ("batch", "plefka12"): (N_NETS, N_NETS, N_NETS),
              ("layered", "sjj"): (250, 250, 250),
              ("layered", "plefka12"): (N_PATTERNS, N_PATTERNS, N_PATTERNS)}
PEERS = ("numpy", "torch", "torch_joint")


def compare(models, methods, repeats, use_torch, use_joint, max_peer_items=None, tol=TOL):
    rows, ratios = [], []
    torch_ok = use_torch and torch_available()
    if use_torch and not torch_ok:
        print(f"PyTorch peers skipped: {torch_why_unavailable()}")
    for name in models:
        case = make_case(name)
        for method in methods:
            run_mf(case.subset(32), method, 1, tol)                             # warm-up
            res, n_of = {}, {}
            for t in (1, 2):
                res[("mf", t)] = timed(run_mf, case, method, t, tol, repeats=repeats,
                                               budget=8.0)
                n_of[("mf", t)] = case.n_items
            ref = res[("mf", 1)]
            if not np.array_equal(res[("mf", 2)].bound, ref.bound):
                print(f"  !! mf.infer ({method}) gives different bounds on 1 and 2 threads")
            mism = objective_mismatch(case, method, ref)
            for k, v in mism.items():
                assert v < MAX_OBJECTIVE_MISMATCH, (
                    f"{k} objective at mf's solution differs from mf's {method} bound by {v:.3g}")
            runners = {"numpy": np_solve}
            if torch_ok:
                runners["torch"] = torch_solve_per_item
                if use_joint:
                    runners["torch_joint"] = torch_solve
            for peer, fn in runners.items():
                n = PEER_ITEMS[(name, method)][PEERS.index(peer)]
                if max_peer_items is not None:
                    n = min(n, max_peer_items)
                sub = case.subset(n)
                with _common.blas_threads(1):
                    fn(sub.subset(8), method, tol=tol)                          # warm-up
                    res[(peer, 1)] = timed(fn, sub, method, tol=tol)
                n_of[(peer, 1)] = sub.n_items
            for key, out in res.items():
                n = n_of[key]
                st = agreement(out.bound, ref.bound[:n])
                if key[0] != "mf":
                    check_agreement(method, st, f"{out.impl} vs mfengine, {name}/{method}")
                rate = n / out.seconds
                crate = n / out.cpu_seconds if out.threads == 1 else float("nan")
                rows.append((name, method, out.impl, out.threads, n, rate, crate,
                             out.extra["cpu_per_wall"], float(out.bound.mean()), st,
                             float(out.converged.mean()), out.iterations,
                             out.extra.get("stop_reason", "")))
                out.extra["rate"], out.extra["crate"] = rate, crate
            r = {k: v.extra["rate"] for k, v in res.items()}
            c = {k: v.extra["crate"] for k, v in res.items()}
            for peer in PEERS:
                if (peer, 1) in r:
                    ratios.append((name, method, f"mf / {res[(peer, 1)].impl} (1 thread each)",
                                   r[("mf", 1)] / r[(peer, 1)], c[("mf", 1)] / c[(peer, 1)]))
            ratios.append((name, method, "mf 2 threads / mf 1 thread", r[("mf", 2)] / r[("mf", 1)],
                           float("nan")))
            print(f"  done: {name}/{method}", file=sys.stderr, flush=True)
    return rows, ratios


def print_tables(rows, ratios, tol):
    print(f"\nd = implementation's bound - mf's bound (1 thread), per item, nats; bound = L for "
          f"sjj, -G12 for plefka12; tol {tol:g}.  items/s from wall time; per CPU-s from the "
          f"calling thread's CPU time (1-thread runs); cores used = process CPU time / wall time "
          f"(a 2-thread run near 1.0 did not get a second core: the 2/1-thread ratio then "
          f"says nothing about the kernels).  Peers on fewer items than mf: the first ones.")
    print()
    print("| model | method | implementation | threads | items timed | items/s | per CPU-s "
          "| cores used | mean bound | mean d | mean abs d | converged | iterations |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for (name, method, impl, thr, n, rate, crate, cpw, mb, st, conv, its, why) in rows:
        cs = f"{crate:.0f}" if np.isfinite(crate) else "-"
        note = f" ({why})" if why and not why.startswith("every") else ""
        print(f"| {name} | {method} | {impl} | {thr} | {n} | {rate:.0f} | {cs} | {cpw:.2f} "
              f"| {mb:.6f} | {st['mean_diff']:+.1e} | {st['mean_abs_diff']:.1e} | {conv:.3f} "
              f"| {its}{note} |")
    print()
    print("| model | method | ratio (items/s) | wall time | CPU time |")
    print("|---|---|---|---|---|")
    for (name, method, label, rw, rc) in ratios:
        cs = f"{rc:.2f}x" if np.isfinite(rc) else "-"
        print(f"| {name} | {method} | {label} | {rw:.2f}x | {cs} |")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="batch,layered", help="comma-separated: batch,layered")
    ap.add_argument("--methods", default="sjj,plefka12", help="comma-separated: sjj,plefka12")
    ap.add_argument("--repeats", type=int, default=3,
                    help="timed repeats of mf (best kept; a run longer than 8 s is not repeated)")
    ap.add_argument("--max-peer-items", type=int, default=None,
                    help="give the peers at most this many items (default: see PEER_ITEMS)")
    ap.add_argument("--tol", type=float, default=TOL)
    ap.add_argument("--no-torch", action="store_true", help="leave out the PyTorch peers")
    ap.add_argument("--no-joint", action="store_true",
                    help="leave out the joint torch.optim.LBFGS peer")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    fingerprint = _common.extension_fingerprint()
    print(environment())
    rows, ratios = compare([m for m in args.models.split(",") if m],
                           [m for m in args.methods.split(",") if m], args.repeats,
                           not args.no_torch, not args.no_joint, args.max_peer_items, args.tol)
    print_tables(rows, ratios, args.tol)
    print(f"\nwall time {time.perf_counter() - t0:.0f} s; {environment().split('; ')[-1]}")
    if _common.extension_fingerprint() != fingerprint:
        print(_common.REBUILT_WARNING)
    return 0


if __name__ == "__main__":
    sys.exit(main())
