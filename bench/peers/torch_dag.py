"""The PyTorch peers of bench/speed/dag_compare.py: L-BFGS per item and joint L-BFGS on the same
objectives (see that script's docstring)."""

import numpy as np

from dag_cases import TOL, Outcome


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
    """Per-item bound (sjj: L; plefka12: -G12; plefka11: -G11) at logits T (hidden mu) and S (xi of layers 1..)."""
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
            k2 = 0.5 if method == "plefka12" else 0.0       # plefka11: no variance term
            out = out + (mus[c] * M - sp(M) - k2 * s * (1.0 - s) * Vv).sum(dim=1)
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


