"""The NumPy peer of bench/speed/dag_compare.py: the sjj and G12 objectives and their batched
fixed-point solver (see that script's docstring)."""
import numpy as np

from dag_cases import TOL, XI_TOL, Outcome


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


def np_g12_objective(case_W, case_b, us, want_grad=False, order=12):
    """G12 (G11 for ``order=11``) per item; ``us`` all layers (visible last); with want_grad
    also dF/du for every hidden layer (F = G without the negative entropies)."""
    k2 = 0.5 if order == 12 else 0.0
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
        G = G + (-(us[c] * M - _softplus(M)) + k2 * s1 * Vv).sum(axis=1)
        if want_grad:
            coef = (s - us[c]) + k2 * s1 * (1.0 - 2.0 * s) * Vv
            grads[l] = grads[l] + _vm(coef, W) + k2 * (1.0 - 2.0 * p) * _vm(s1, W2)
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

    def objective(W, b, tt, Vv, xx, want_grad):
        mus = [_sigmoid(a) for a in tt] + [Vv]
        if sjj:
            return np_sjj_objective(W, b, mus, xx, want_grad)
        out = np_g12_objective(W, b, mus, want_grad, order=11 if method == "plefka11" else 12)
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


