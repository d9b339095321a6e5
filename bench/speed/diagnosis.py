"""Mean-field inference on a diagnosis-style noisy-OR net (the shape of QMR-DT).

    python bench/speed/diagnosis.py                    # 600 diseases, 4000 findings, 200 cases
    python bench/speed/diagnosis.py --cases 400 --seed 1 --methods sjj,plefka11,plefka12

The net comes from ``mf.datasets.make_diagnosis_net`` (sparse weights, each finding with 10
random parent diseases, leak biases 0.005-0.01).  The cases are findings sampled from the net
(a few hundred positive findings each, the rest negative).  The script prints:

* the time and traced peak memory of building the net;
* for each method, on ONE thread: cases per second (wall clock), the fraction of cases whose
  solve converged, the mean objective (a lower bound on ln P(findings) for "sjj"; -G for the
  Plefka schemes) and the mean sweeps;
* for "sjj": the same solve on one and two threads in turn, three times each, every result
  kept alive as a user would (the speed-up, and whether every number is identical), and a
  same-run peer: a NumPy implementation of the same bound and the same
  fixed point (negative findings absorbed into the diseases' biases, q of every positive
  finding by Newton's method on its optimality conditions vectorised over the findings, the
  diseases' means in closed form), with the largest difference of the two bounds.

Run it under ``nice`` on a shared machine; the ratios, measured in the same run, are what to
compare across machines.

Fresh memory: the noisy-OR result holds a q per edge (cases x edges doubles, 64 MB for 200
cases), a new array per call.  NumPy asks for transparent huge pages on arrays of 4 MB or more;
where the system then compacts memory at fault time (``/sys/kernel/mm/transparent_hugepage``,
``defrag`` = madvise), filling that array as huge pages can cost as much CPU as the solve
itself, and unevenly (on a 2-core VM with those settings: 1.5-2.1 ms of CPU per case instead
of 1.1, two threads 1.16-1.89x one thread instead of 1.91-1.93x).  The kernel therefore advises
the system to back the means and q arrays it allocates and fills with ordinary pages
(``mf_small_pages``, MADV_NOHUGEPAGE), whatever NumPy asked for; the script prints NumPy's
request and the system's settings, and ``NUMPY_MADVISE_HUGEPAGE=0 python bench/speed/diagnosis.py``
should now print the same speeds as without it.
"""
import argparse
import os
import sys
import time
import tracemalloc
import warnings

import numpy as np
from scipy.special import entr

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # bench/
import _paths  # noqa: E402,F401  (bench/ and its folders on sys.path)

import _common  # noqa: E402
import mfengine as mf  # noqa: E402


# ---------------------------------------------------------------------------- the NumPy peer
def _g(x):
    """ln(1 - e^{-x})."""
    return np.log(-np.expm1(-x))


def _psi_parts(h, y):
    """psi(y) = g(h + y) - g(h) - y g'(h + y) as G0 - ph (ph >= 0, no cancellation), and psi'."""
    x = h + y
    om = -np.expm1(-x)
    u = 1.0 - om
    r = u / om
    return y * r - np.log(om), y * r / om


class NumpyDiagnosisSJJ:
    """The strict SJJ bound of a bipartite noisy-OR net (diseases are roots, findings their
    children), solved for one case at a time with NumPy arrays.  The same bound and the same
    coordinate ascent as the kernel: q of every positive finding, then every disease's mean
    (in a bipartite net the diseases' updates are independent, so one vectorised step is the
    kernel's sweep), until the bound changes by less than ``tol``."""

    def __init__(self, net):
        W = net.W_.tocsr()
        W.sort_indices()
        self.nd = int((~net.visible_).sum())
        self.h = np.asarray(net.h_, dtype=float)
        self.W = W
        self.hd = self.h[:self.nd]
        self.ghd = _g(self.hd)
        ptr, idx, data = W.indptr, W.indices, W.data
        rows = W[self.nd:]
        self.fan = np.diff(rows.indptr)
        if np.any(self.fan != self.fan[0]):
            raise ValueError("the peer needs the same number of parents for every finding")
        F = int(self.fan[0])
        self.par = rows.indices.reshape(-1, F)
        self.wf = rows.data.reshape(-1, F)
        self.WfT = rows[:, :self.nd].T.tocsr()     # (diseases, findings)

    def solve(self, x, tol=1e-6, max_sweeps=200):
        nd, hd, ghd = self.nd, self.hd, self.ghd
        hf = self.h[nd:]
        pos = np.flatnonzero(x > 0)
        neg = x <= 0
        # negative findings: -z_i, linear in the diseases' means
        cfix = -(self.WfT @ neg.astype(float))
        C0 = -hf[neg].sum()
        par, w = self.par[pos], self.wf[pos]
        h = hf[pos][:, None]
        gh = _g(h)
        G0 = -gh
        q = np.where(w > 0, 1.0, 0.0)
        q /= q.sum(axis=1, keepdims=True)
        D = np.where(q > 0, _g(h + w / np.where(q > 0, q, 1.0)) - gh, 0.0)
        mu = np.full(nd, 0.5)
        lam = np.full((pos.size, 1), -1.0)

        def bound(mu, q, D):
            H = entr(mu) + entr(1.0 - mu)
            m = mu[par]
            return (C0 + np.sum(H + mu * cfix - (1 - mu) * hd + mu * ghd)
                    + np.sum(gh[:, 0] + np.sum(q * m * D, axis=1)))

        prev = bound(mu, q, D)
        sweeps, converged = 0, False
        while sweeps < max_sweeps:
            q, D, lam = self._update_q(mu[par], w, h, gh, G0, q, D, lam)
            c = hd + ghd + cfix + np.bincount(par.ravel(), (q * D).ravel(), minlength=nd)
            mu = 1.0 / (1.0 + np.exp(-np.clip(c, -700, 700)))
            sweeps += 1
            b = bound(mu, q, D)
            if abs(b - prev) < tol + 1e-13 * abs(b):
                prev, converged = b, True
                break
            prev = b
        return prev, sweeps, converged

    @staticmethod
    def _update_q(m, w, h, gh, G0, q, D, lam, iters=50):
        old = np.sum(q * m * D, axis=1)
        lam_max = np.max(np.where(w > 0, m * G0, 0.0), axis=1, keepdims=True)
        y = np.where((q > 0) & (w > 0), w / np.where(q > 0, q, 1.0), 1.0)
        cold = ~((lam > 0) & (lam < lam_max))
        if cold.any():          # start from the mean slope at the current q
            ph, _ = _psi_parts(h, y)
            ok = (q > 0) & (w > 0)
            s = np.sum(np.where(ok, q * m * (G0 - ph), 0.0), axis=1, keepdims=True)
            s /= np.maximum(np.sum(np.where(ok, q, 0.0), axis=1, keepdims=True), 1e-300)
            s = np.where((s > 0) & (s < lam_max), s, 0.5 * lam_max)
            lam = np.where(cold, s, lam)
        live = np.ones(lam.shape, dtype=bool)
        with np.errstate(all="ignore"):
            for _ in range(iters):
                act = (w > 0) & (m * G0 > lam)
                ph, dps = _psi_parts(h, y)
                ps = G0 - ph
                c = lam / m
                low = c <= 0.5 * G0
                rho = np.where(low, np.log(ps / c), np.log(ph / (G0 - c)))
                dy = np.where(low, dps / ps, -dps / ph)
                dl = np.where(low, -1.0 / lam, 1.0 / (m * G0 - lam))
                r0 = np.sum(np.where(act, w / y, 0.0), axis=1, keepdims=True) - 1.0
                b = w / (y * y * dy)
                num = np.sum(np.where(act, b * rho, 0.0), axis=1, keepdims=True)
                den = np.sum(np.where(act, b * dl, 0.0), axis=1, keepdims=True)
                res = np.max(np.where(act, np.abs(rho), 0.0), axis=1, keepdims=True)
                live &= ~((np.abs(r0) <= 1e-12) & (res <= 1e-10))
                if not live.any():
                    break
                lnew = lam - (r0 + num) / den
                lnew = np.where(lnew > 0, lnew, 0.25 * lam)
                lnew = np.where(lnew < lam_max, lnew, 0.5 * (lam + lam_max))
                lnew = np.where(live, lnew, lam)
                yn = y + (-rho - dl * (lnew - lam)) / dy
                yn = np.clip(yn, 0.125 * y, 8.0 * y + 8.0)
                enter = (w > 0) & (m * G0 > lnew) & ~act      # newly active: a rough start
                ystart = np.maximum(-np.log(np.maximum(G0 - lnew / m, 1e-300)) - h, w)
                y = np.where(live & act, yn, np.where(live & enter, ystart, y))
                lam = lnew
        act = (w > 0) & (m * G0 > lam)
        qn = np.where(act, w / y, 0.0)
        qn /= qn.sum(axis=1, keepdims=True)
        Dn = np.where(qn > 0, _g(h + w / np.where(qn > 0, qn, 1.0)) - gh, 0.0)
        keep = (np.sum(qn * m * Dn, axis=1) >= old)[:, None] & np.all(np.isfinite(qn), axis=1)[:, None]
        return np.where(keep, qn, q), np.where(keep, Dn, D), np.where(keep, lam, -1.0)


# ---------------------------------------------------------------------------- the bench
def _timed(f):
    t0 = time.perf_counter()
    r = f()
    return r, time.perf_counter() - t0


def _timed_cpu(f):
    """Wall and CPU time (of every thread of the process) of f()."""
    c0 = time.process_time()
    t0 = time.perf_counter()
    r = f()
    return r, time.perf_counter() - t0, time.process_time() - c0


def _hugepages():
    """NumPy's request for transparent huge pages on large arrays, and the kernel's settings."""
    try:
        asks = bool(np._core.multiarray._get_madvise_hugepage())
    except AttributeError:   # a NumPy without the switch
        asks = None
    out = f"numpy madvise hugepage: {asks}"
    for name in ("enabled", "defrag"):
        try:
            with open(f"/sys/kernel/mm/transparent_hugepage/{name}") as f:
                out += f", THP {name}: {f.read().strip()}"
        except OSError:
            pass
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--diseases", type=int, default=600)
    ap.add_argument("--findings", type=int, default=4000)
    ap.add_argument("--parents", type=int, default=10)
    ap.add_argument("--cases", type=int, default=200)
    ap.add_argument("--peer-cases", type=int, default=50,
                    help="cases the NumPy peer solves (the first ones; it is slower)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--methods", default="sjj")
    args = ap.parse_args(argv)

    print(f"load average: {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs; {_hugepages()}")
    tracemalloc.start()
    t0 = time.perf_counter()
    net = mf.datasets.make_diagnosis_net(args.diseases, args.findings, args.parents,
                                         random_state=args.seed)
    net.set_params(progress=False, n_threads=1)
    net.sample(0)   # checks the parameters and builds the structure
    built = time.perf_counter() - t0
    peak = tracemalloc.get_traced_memory()[1] / 1e6
    tracemalloc.stop()
    X = net.sample(args.cases, random_state=args.seed + 1)
    print(f"net: {args.diseases} diseases, {args.findings} findings, {net.n_weights} edges; "
          f"built in {built:.2f} s, traced peak {peak:.0f} MB; {args.cases} cases, "
          f"{X.sum(axis=1).mean():.0f} positive findings on average")
    print(f"{'method':<10} {'cases/s':>9} {'converged':>10} {'mean objective':>15} {'sweeps':>8}")
    res = {}
    for method in args.methods.split(","):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            net.infer(X[:2], method=method)            # warm-up (imports, first touch)
            try:
                r, dt = _timed(lambda: net.infer(X, method=method, n_threads=1))
            except (ValueError, OverflowError) as exc:
                print(f"{method:<10} failed: {exc}")
                continue
        res[method] = (r, dt)
        print(f"{method:<10} {args.cases / dt:9.1f} {r.converged.mean():10.2f} "
              f"{r.bound.mean():15.4f} {r.n_iter.mean():8.2f}")
    if "sjj" in res:
        r1, dt1w = res["sjj"]
        # one and two threads in turn (1, 2, 1, 2, 1, 2), every result kept alive as a user
        # would: each call writes fresh memory (noisy-OR: a q per edge, cases x edges doubles),
        # whose first-touch page faults are part of its cost.  The first timing above is not
        # used here: it may land in memory the process has just freed, cheaper to touch, which
        # would favour whichever thread count ran first.
        runs = {1: [], 2: []}
        probe = [_common.core_scaling()]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for _ in range(3):
                for nt in (1, 2):
                    runs[nt].append(_timed_cpu(lambda: net.infer(X, method="sjj", n_threads=nt)))
        probe.append(_common.core_scaling())
        (r1b, dt1, cpu1), (r2, dt2, cpu2) = (min(runs[nt], key=lambda t: t[1]) for nt in (1, 2))
        med = {nt: float(np.median([t[1] for t in runs[nt]])) for nt in (1, 2)}
        cpu_all = {nt: " ".join(f"{t[2] / args.cases * 1e3:.2f}" for t in runs[nt]) for nt in (1, 2)}
        same = (np.array_equal(r1.bound, r2.bound) and np.array_equal(r1.mu, r2.mu)
                and np.array_equal(r1.xi, r2.xi) and np.array_equal(r1b.xi, r2.xi))
        print(f"sjj, 1 thread: {args.cases / dt1:.1f} cases/s wall (best of 3, results kept; "
              f"the first call, above: {args.cases / dt1w:.1f}), CPU "
              f"{cpu1 / args.cases * 1e3:.3f} ms per case ({args.cases / cpu1:.0f} cases per "
              "CPU second: the speed on an idle core)")
        print(f"sjj, 2 threads: {args.cases / dt2:.1f} cases/s wall, {dt1 / dt2:.2f}x one thread "
              f"(best of 3 runs each, in turn with one thread; median {med[1] / med[2]:.2f}x; on "
              f"a busy machine the second core may not be free); CPU ms per case of each run, "
              f"1 thread {cpu_all[1]}, 2 threads {cpu_all[2]} (fresh memory costs CPU: see the module docstring); CPU "
              f"{cpu2 / args.cases * 1e3:.3f} ms per case; results identical: {same}; the "
              f"machine's own two-thread scaling (a C loop, not mfengine) before / after: "
              f"{probe[0]:.2f}x / {probe[1]:.2f}x")
        peer = NumpyDiagnosisSJJ(net)
        k = min(args.peer_cases, args.cases)
        out, dtp = _timed(lambda: [peer.solve(x, tol=net.infer_tol) for x in X[:k]])
        bp = np.array([o[0] for o in out])
        print(f"NumPy peer (same bound, same fixed point), {k} cases: {k / dtp:.1f} cases/s, "
              f"{np.mean([o[1] for o in out]):.2f} sweeps; mfengine is "
              f"{(k / dtp and (args.cases / dt1) / (k / dtp)):.1f}x it; "
              f"largest |bound difference| {np.max(np.abs(bp - r1.bound[:k])):.2e} nats")


if __name__ == "__main__":
    main()
