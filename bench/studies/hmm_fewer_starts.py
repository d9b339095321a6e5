"""ContextHMM structured solver with fewer starts: what ``starts=`` saves and what it costs.

The solver runs four starts by default ("link", "naive-link", "first-order", "own-means"),
screens them and takes the best on to ``infer_tol``.  ``ContextHMM(starts=...)`` runs a subset
(one start alone is not screened).  This script scores, through ``ContextHMM.score``:

1. the issue-11 workload of ``bench/speed/hmm_speed.py`` (n = 10, lag 5, context both, T = 1000)
   with every setting, against hmmlearn's ``GaussianHMM.score`` on the same sequence in the
   same run (ratio = mfengine time / hmmlearn time, CPU time, best of --repeat);
2. the 162 random instances of ``bench/studies/hmm_starts.py`` with every setting: total CPU time
   against the default, and the bound against the default's on each instance (mean and
   largest loss, how many instances end lower by more than 1e-6 and by more than 0.1 nats,
   how many end higher).

    python bench/studies/hmm_fewer_starts.py            # about a minute on one idle core
    python bench/studies/hmm_fewer_starts.py --quick    # 81 instances (T = 300 only)
"""
import argparse
import os
import sys
import time
import warnings

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))  # bench/

import _paths  # noqa: E402,F401  (speed/, for hmm_speed)
import _common  # noqa: E402,F401  (thread settings of the benchmarks)
from hmm_speed import best_time as cpu_best  # noqa: E402  (CPU time, best of n)
from hmm_speed import make_model as workload_model  # noqa: E402
from hmm_starts import instance_grid, make_model as grid_model  # noqa: E402

SETTINGS = [
    ("all", 1e-10),
    ("link", 1e-10),
    ("naive-link", 1e-10),
    ("first-order", 1e-10),
    ("own-means", 1e-10),
    (("naive-link", "own-means"), 1e-10),
    (("first-order", "own-means"), 1e-10),
    ("own-means", 1e-8),
    ("all", 1e-8),
]


def label(starts, tol):
    s = starts if isinstance(starts, str) else "+".join(starts)
    return f"{s}, infer_tol {tol:g}"


def part1(repeat):
    from hmmlearn.hmm import GaussianHMM

    h = workload_model()
    X, _ = h.sample(1000, random_state=1)
    g = GaussianHMM(h.n_states, covariance_type="spherical", init_params="", params="")
    g.startprob_, g.transmat_, g.means_ = h.startprob_, h.transmat_, h.means_
    g.covars_ = np.ones(h.n_states)
    t_ref, _ = cpu_best(lambda: g.score(X), max(repeat, 20))
    print(f"[1] n=10, lag=5, both, T=1000: hmmlearn GaussianHMM.score {t_ref * 1e3:.2f} ms "
          f"(CPU, best of {max(repeat, 20)})")
    print(f"    {'setting':44s} {'ms':>7s} {'x hmmlearn':>10s} {'bound':>16s} {'- default':>10s}")
    ref = None
    for starts, tol in SETTINGS:
        h.set_params(starts=starts, infer_tol=tol)
        t, b = cpu_best(lambda: h.score(X), repeat)
        if ref is None:
            ref = b
        print(f"    {label(starts, tol):44s} {t * 1e3:7.1f} {t / t_ref:10.1f} {b:16.6f} "
              f"{b - ref:+10.2e}")


def part2(quick):
    lengths = (300,) if quick else (300, 1000)
    grid = instance_grid(lengths)
    bounds = np.zeros((len(SETTINGS), len(grid)))
    times = np.zeros(len(SETTINGS))
    for j, (n, lag, context, T, cs) in enumerate(grid):
        h = grid_model(n, lag, context, cs, j)
        X, _ = h.sample(T, random_state=j + 100)
        for i, (starts, tol) in enumerate(SETTINGS):
            h.set_params(starts=starts, infer_tol=tol)
            t = time.process_time()
            bounds[i, j] = h.score(X)
            times[i] += time.process_time() - t
    print(f"\n[2] {len(grid)} instances of bench/studies/hmm_starts.py; bound minus the default's "
          "(all starts, infer_tol 1e-10), nats; CPU time over all instances")
    print(f"    {'setting':44s} {'time s':>7s} {'x default':>9s} {'mean':>8s} {'largest':>8s} "
          f"{'<-1e-6':>7s} {'<-0.1':>6s} {'>1e-6':>6s}")
    for i, (starts, tol) in enumerate(SETTINGS):
        d = bounds[i] - bounds[0]
        print(f"    {label(starts, tol):44s} {times[i]:7.2f} {times[i] / times[0]:9.2f} "
              f"{d.mean():+8.3f} {min(d.min(), 0.0):+8.2f} {(d < -1e-6).sum():7d} "
              f"{(d < -0.1).sum():6d} {(d > 1e-6).sum():6d}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--repeat", type=int, default=5)
    a = ap.parse_args()
    warnings.simplefilter("ignore")
    print(f"load average {os.getloadavg()[0]:.2f}")
    part1(a.repeat)
    part2(a.quick)
    print(f"load average {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
