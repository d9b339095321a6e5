"""The DAG methods with missing visible units: summed out, against kept as free units.

    nice -n 10 python bench/accuracy/dag_missing.py                   # about a minute
    nice -n 10 python bench/accuracy/dag_missing.py --n 300 --methods sjj   # quicker

A missing visible unit at the bottom of a layered net has no observed descendant: it sums out
of P(observed) exactly, and every DAG method ("sjj" and the Plefka schemes) leaves it out of
the solve and of the objective (its mean is then sigmoid(h + W mu) from its parents' solved
means).  The comparison in the same run is the objective with those units kept as free units
of the solve: each missing unit is given a clamped child through a zero weight (every visible
unit gets one; each child's factor is a constant, sigmoid(0) = 1/2, so n_visible ln 2 is added
back), which makes a missing unit count as a free unit without changing anything else.

Cases: ``mf.SigmoidBeliefNet([4, 12, 36, 100], random_state=0)`` with 1000 of its samples
(``random_state=1``), 0-50% of the pixels missing at random (the Gaussian-approximated bound of
``method="gaussian"`` beside it); and ``[3, 6, 12]`` (``weight_scale=1.5``) with 500 samples and
30% missing, where exact ln P is enumerated.  One thread, tol 1e-6 (1e-8 on the small net).
Printed per method: the mean objective per pattern (the bound for "sjj", -G for the Plefka
schemes) summed out and kept, the mean and smallest difference per pattern (where nothing is
missing the two solves differ only within tol), the mean iterations of each and the
patterns/s of ``infer`` (CPU time; the kept solve runs on a larger net and is not timed); on
the small net also the mean |exact - objective| of each.
"""
import argparse
import time

import numpy as np
import scipy.sparse

import mfengine as mf
from mfengine.sbn import plefka, sjj
from mfengine.sbn._structure import DagStructure


def kept_as_free(net, X, miss, tol, method):
    """The objective with the missing units solved as free units (not summed out): each
    visible unit gets a child clamped to 1 through a zero weight (bias 0), ln 2 added back
    per child.  Returns (objective, iterations)."""
    nets, items, _, _ = net._dag_problem(X, miss)
    s, w, clamp, net_of = nets.structure, nets.w, items.clamp, items.net_of
    n, nv = s.n_units, X.shape[1]
    vis = np.flatnonzero(nets.visible)
    # n_visible more units, the k-th a child of vis[k]; appended, so that the parent order of
    # the old units is unchanged and the new edges come last
    rows = np.concatenate([np.repeat(np.arange(n), np.diff(s.par_ptr)), n + np.arange(nv)])
    cols = np.concatenate([s.par_idx, vis])
    mask = scipy.sparse.csr_matrix((np.ones(rows.size), (rows, cols)), shape=(n + nv, n + nv))
    big = DagStructure(mask)
    wb = np.concatenate([w[0], np.zeros(nv)])[None]
    hb = np.concatenate([nets.h[0], np.zeros(nv)])[None]
    cb = np.concatenate([clamp, np.ones((clamp.shape[0], nv))], axis=1)
    if method == "sjj":
        bound, mu, xi, iters, _ = sjj.solve(big, wb, hb, net_of, cb, tol=tol, n_threads=1)
        return bound + nv * np.log(2.0), iters
    G, u, iters, conv = plefka.solve(big, wb, hb, net_of, cb, int(method[-2:]), "sigmoid",
                                     tol=tol, n_threads=1)
    return -G + nv * np.log(2.0), iters


def row(name, method, net, X, miss, tol, exact=None, gaussian=None):
    t = time.process_time()
    r = net.infer(X, miss, method=method, tol=tol, n_threads=1)
    dt = time.process_time() - t
    kept, iters = kept_as_free(net, X, miss, tol, method)
    line = (f"{name:22s} {method:9s} {r.bound.mean():10.4f} {kept.mean():10.4f} "
            f"{np.mean(r.bound - kept):8.4f} {np.min(r.bound - kept):9.2e} "
            f"{r.n_iter.mean():6.1f} {iters.mean():6.1f} {len(X) / dt:8.0f}")
    if gaussian is not None:
        line += f" {gaussian:10.4f}"
    if exact is not None:
        line += (f"   exact {exact.mean():.4f}: mean |exact - objective| "
                 f"{np.mean(np.abs(exact - r.bound)):.4f} summed out, "
                 f"{np.mean(np.abs(exact - kept)):.4f} kept")
    print(line, flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1000, help="patterns of the layered net")
    ap.add_argument("--methods", default="sjj,plefka11,plefka12,plefka22",
                    help="comma-separated DAG methods")
    a = ap.parse_args()
    methods = a.methods.split(",")
    print(f"{'case':22s} {'method':9s} {'summed':>10s} {'kept':>10s} {'diff':>8s} "
          f"{'min diff':>9s} {'iters':>6s} {'kept':>6s} {'pat/s':>8s} {'gaussian':>10s}")
    net = mf.SigmoidBeliefNet([4, 12, 36, 100], random_state=0, progress=False)
    X = net.sample(a.n, random_state=1)
    rng = np.random.default_rng(2)
    for frac in (0.0, 0.1, 0.3, 0.5):
        miss = rng.random(X.shape) < frac
        g = net.infer(X, miss, method="gaussian", tol=1e-6, n_threads=1).bound.mean()
        for m in methods:
            row(f"4x12x36x100, {frac:.0%} miss", m, net, X, miss, 1e-6, gaussian=g)
    small = mf.SigmoidBeliefNet([3, 6, 12], weight_scale=1.5, random_state=3, progress=False)
    Xs = small.sample(500, random_state=4)
    miss = np.random.default_rng(5).random(Xs.shape) < 0.3
    exact = small.exact_log_likelihood(Xs, missing=miss)
    for m in methods:
        row("3x6x12, 30% miss", m, small, Xs, miss, 1e-8, exact)


if __name__ == "__main__":
    main()
