"""The strict (SJJ) bound with missing visible units: summed out, against kept as free units.

    nice -n 10 python bench/sjj_missing.py          # about 20 s
    nice -n 10 python bench/sjj_missing.py --n 300  # quicker

A missing visible unit at the bottom of a layered net has no observed descendant: it sums out
of P(observed) exactly, and ``method="sjj"`` leaves it out of the solve and the bound (its
mean is then sigmoid(h + W mu) from its parents' solved means).  The comparison in the same
run is the bound with those units kept as free units of the solve: each missing unit is given
a clamped child through a zero weight (every visible unit gets one; each child's factor is a
constant, sigmoid(0) = 1/2, so n_visible ln 2 is added back), which makes a missing unit count
as a free unit without changing anything else.

Cases: ``mf.SigmoidBeliefNet([4, 12, 36, 100], random_state=0)`` with 1000 of its samples
(``random_state=1``), 0-50% of the pixels missing at random (the Gaussian-approximated bound of
``method="gaussian"`` beside it); and ``[3, 6, 12]`` (``weight_scale=1.5``) with 500 samples and
30% missing, where exact ln P is enumerated.  One thread, tol 1e-6 (1e-8 on the small net).
Printed: the mean bound per pattern of each, the mean and smallest difference per pattern
(where nothing is missing the two solves differ only within tol), the mean sweeps of each and
the patterns/s of ``infer`` (CPU time; the kept solve runs on a larger net and is not timed).
"""
import argparse
import time

import numpy as np
import scipy.sparse

import mfengine as mf
from mfengine.sbn import sjj
from mfengine.sbn._solve import dag_items
from mfengine.sbn._structure import DagStructure


def kept_as_free(net, X, miss, tol):
    """The SJJ bound with the missing units solved as free units (not summed out): each
    visible unit gets a child clamped to 1 through a zero weight (bias 0), ln 2 added back
    per missing unit.  Returns (bound, sweeps)."""
    batch, w, clamp, net_of, _ = dag_items(net, X, miss)
    s = batch._structure
    n, nv = s.n_units, X.shape[1]
    vis = np.flatnonzero(batch.visible_)
    # n_visible more units, the k-th a child of vis[k]; appended, so that the parent order of
    # the old units is unchanged and the new edges come last
    rows = np.concatenate([np.repeat(np.arange(n), np.diff(s.par_ptr)), n + np.arange(nv)])
    cols = np.concatenate([s.par_idx, vis])
    mask = scipy.sparse.csr_matrix((np.ones(rows.size), (rows, cols)), shape=(n + nv, n + nv))
    big = DagStructure(mask)
    wb = np.concatenate([w[0], np.zeros(nv)])[None]
    hb = np.concatenate([batch.h_[0], np.zeros(nv)])[None]
    cb = np.concatenate([clamp, np.ones((clamp.shape[0], nv))], axis=1)
    bound, mu, xi, sweeps, _ = sjj.solve(big, wb, hb, net_of, cb, tol=tol, n_threads=1)
    return bound + nv * np.log(2.0), sweeps


def row(name, net, X, miss, tol, exact=None):
    t = time.process_time()
    r = net.infer(X, miss, method="sjj", tol=tol, n_threads=1)
    dt = time.process_time() - t
    kept, sweeps = kept_as_free(net, X, miss, tol)
    g = net.infer(X, miss, method="gaussian", tol=tol, n_threads=1).bound.mean()
    line = (f"{name:22s} {r.bound.mean():10.4f} {kept.mean():10.4f} "
            f"{np.mean(r.bound - kept):8.4f} {np.min(r.bound - kept):9.2e} "
            f"{r.n_iter.mean():6.1f} {sweeps.mean():6.1f} {len(X) / dt:8.0f} "
            f"{g:10.4f}")
    if exact is not None:
        line += (f"   exact {exact.mean():.4f}: gap {np.mean(exact - r.bound):.4f} summed out, "
                 f"{np.mean(exact - kept):.4f} kept")
    print(line, flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1000, help="patterns of the layered net")
    a = ap.parse_args()
    print(f"{'case':22s} {'summed':>10s} {'kept':>10s} {'gain':>8s} {'min gain':>9s} "
          f"{'sweeps':>6s} {'kept':>6s} {'pat/s':>8s} {'gaussian':>10s}")
    net = mf.SigmoidBeliefNet([4, 12, 36, 100], random_state=0, progress=False)
    X = net.sample(a.n, random_state=1)
    rng = np.random.default_rng(2)
    for frac in (0.0, 0.1, 0.3, 0.5):
        row(f"4x12x36x100, {frac:.0%} miss", net, X, rng.random(X.shape) < frac, 1e-6)
    small = mf.SigmoidBeliefNet([3, 6, 12], weight_scale=1.5, random_state=3, progress=False)
    Xs = small.sample(500, random_state=4)
    miss = np.random.default_rng(5).random(Xs.shape) < 0.3
    row("3x6x12, 30% miss", small, Xs, miss, 1e-8, small.exact_log_likelihood(Xs, missing=miss))


if __name__ == "__main__":
    main()
