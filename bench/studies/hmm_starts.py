"""ContextHMM structured solver: its screened starts against full ascents from every start.

The solver (mf_hmm_structured) runs four starts -- the link solutions from the first-order
posterior and from the naive marginals, the first-order posterior, and the first-order
posterior without the context means -- each ascent only to SCREEN_TOL (1e-5 nats per step,
the link / naive solves to PRE_TOL, 1e-3), and takes the best on to ``infer_tol``.  The
procedure it replaces ran the first three starts, link / naive solves included, all the way to
``infer_tol`` and kept the best (rebuilt here with today's ascent, so that the comparison
isolates the starts and the screen).  This script runs both on the same random instances in one
run (the full procedure through the one-chain kernels of ``mfengine.hmm._chain``) and prints
how often the solver's bound is higher, equal or lower, by how much, and the time of each.

    python bench/studies/hmm_starts.py            # 162 instances, about 20 s on one idle core
    python bench/studies/hmm_starts.py --quick    # 81 instances (T = 300 only)

Instances: n in (3, 5, 10) states, D = 2, lag in (1, 2, 5), context right / left / both,
T in (300, 1000), context means of scale 0.3, 1 and 3 against own-state means of scale 2,
sticky random transitions; one sequence sampled from each model.
"""
import argparse
import itertools
import time
import warnings

import numpy as np

import mfengine as mf
from mfengine.hmm import _chain


def instance_grid(lengths=(300, 1000)):
    """The instances' (n, lag, context, T, context scale), in seed order (seed = position)."""
    return list(itertools.product((3, 5, 10), (1, 2, 5), ("both", "right", "left"), lengths,
                                  (0.3, 1.0, 3.0)))


def make_model(n, lag, context, cscale, seed, D=2):
    rng = np.random.default_rng(seed)
    h = mf.ContextHMM(n, D, lag=lag, context=context, n_threads=1, progress=False)
    h.means_ = 2.0 * rng.normal(size=(n, D))
    h.right_means_ = (cscale * rng.normal(size=(n, D)) if context != "left"
                      else np.zeros((n, D)))
    h.left_means_ = (cscale * rng.normal(size=(n, D)) if context != "right"
                     else np.zeros((n, D)))
    A = rng.random((n, n)) + 5.0 * np.eye(n)
    h.transmat_ = A / A.sum(1, keepdims=True)
    h.startprob_ = np.full(n, 1.0 / n)
    return h


def full_starts(h, X):
    """The previous procedure: three starts, every solve and ascent to infer_tol; best F."""
    P, Xs = h._shifted(X)
    args = P + (min(h.lag, len(X)), h._right, h._left)
    mi, tol = h.infer_max_iter, h.infer_tol
    qn = np.ascontiguousarray(h.infer(X, method="naive").posteriors)
    starts = [_chain.link(*args, Xs, mi, tol)[2], _chain.link(*args, Xs, mi, tol, qn)[2],
              site_terms(P, Xs, h.lag, h._right, h._left)]
    return max(_chain.ascent(*args, Xs, s0, mi, tol)[0] for s0 in starts)


def site_terms(P, Xs, lag, right, left):
    """The first-order posterior's potentials: every term of ln p(x | s) in s_t alone."""
    _, _, U, V, W = P
    e = Xs @ U.T - 0.5 * (U * U).sum(1)
    if right:
        e[lag:] += Xs[:-lag] @ V.T - 0.5 * (V * V).sum(1)
    if left:
        e[:-lag] += Xs[lag:] @ W.T - 0.5 * (W * W).sum(1)
    return np.ascontiguousarray(e)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    a = ap.parse_args()
    warnings.simplefilter("ignore")
    lengths = (300,) if a.quick else (300, 1000)
    grid = instance_grid(lengths)
    diffs, t_new, t_old, worse = [], 0.0, 0.0, []
    for seed, (n, lag, context, T, cs) in enumerate(grid):
        h = make_model(n, lag, context, cs, seed)
        X, _ = h.sample(T, random_state=seed + 100)
        t = time.process_time()
        new = float(h.infer(X, method="structured").bound[0])
        t_new += time.process_time() - t
        t = time.process_time()
        old = float(full_starts(h, X))
        t_old += time.process_time() - t
        diffs.append(new - old)
        if new - old < -1e-6:
            worse.append((n, lag, context, T, cs, new - old))
    d = np.array(diffs)
    up, down = d > 1e-6, d < -1e-6
    print(f"{len(d)} instances; bound of the solver minus the best full ascent from 3 starts:")
    print(f"  higher by > 1e-6 nats: {up.sum():4d}" + (
        f"   (mean {d[up].mean():.3f}, largest {d.max():.3f} nats)" if up.any() else ""))
    print(f"  within 1e-6 nats:      {(~up & ~down).sum():4d}")
    print(f"  lower by > 1e-6 nats:  {down.sum():4d}" + (
        f"   (mean {d[down].mean():.3f}, largest {-d.min():.3f} nats)" if down.any() else ""))
    for w in worse:
        print(f"    n={w[0]} lag={w[1]} {w[2]} T={w[3]} context scale {w[4]}: {w[5]:+.4f}")
    print(f"  mean difference {d.mean():+.4f} nats")
    print(f"time, one thread (CPU): solver {t_new:.2f} s, full ascents {t_old:.2f} s "
          f"({t_old / t_new:.2f} x)")


if __name__ == "__main__":
    main()
