"""Scaling study: mf.infer's time per sweep against the number of weights (1 thread).

    python bench/speed/scaling.py            (or: python bench/speed/compare.py --scaling)

Nets of three equal layers [w, w, w] (2 w^2 weights, from ~1e3 to ~1e6), weights
N(0, 1/fan_in) (``weight_scale=1``, so the inputs stay O(1) at every width), a batch sampled
from each net, tol 1e-6.  Time per sweep = best wall time of the batch / total sweeps taken by
its patterns (so it includes each pattern's set-up, amortised over its sweeps); the same is
given from the CPU time of the calling thread (a 1-thread run computes there), which does not
count time spent waiting for a core and so is the steadier figure on a busy machine.  The batch
shrinks as the net grows to keep each point near a second.  The log-log slope is fitted by
least squares to the points above ``--fit-above`` weights (default 6e4); a slope of 1 means the
cost of a sweep is linear in the number of weights.
"""
import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # bench/
import _paths  # noqa: E402,F401  (bench/ and its folders on sys.path)

import numpy as np  # noqa: E402

import mfengine as mf  # noqa: E402


def measure(width, n, repeats=2, tol=1e-6, threads=1):
    net = mf.SigmoidBeliefNet([width] * 3, weight_scale=1.0, random_state=0)
    V = net.sample(n, random_state=1)
    best, best_cpu = float("inf"), float("inf")
    for _ in range(repeats):
        c0 = time.thread_time()
        t0 = time.perf_counter()
        r = mf.infer(net, V, tol=tol, n_threads=threads)
        best = min(best, time.perf_counter() - t0)
        best_cpu = min(best_cpu, time.thread_time() - c0)
    sweeps = int(r.n_iter.sum())
    return net.n_weights, n, sweeps, best, best / sweeps, best_cpu / sweeps, float(r.converged.mean())


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--points", type=int, default=13, help="number of net sizes")
    ap.add_argument("--min-weights", type=float, default=1e3)
    ap.add_argument("--max-weights", type=float, default=1e6)
    ap.add_argument("--work", type=float, default=2e7,
                    help="batch size = clip(work / n_weights, 16, 2000)")
    ap.add_argument("--fit-above", type=float, default=6e4)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args(argv)

    import _common
    fingerprint = _common.extension_fingerprint()
    targets = np.geomspace(args.min_weights, args.max_weights, args.points)
    widths = sorted({int(round(np.sqrt(t / 2.0))) for t in targets})
    print("mf.infer time per sweep, nets [w, w, w], weights N(0, 1/fan_in), tol 1e-6, 1 thread")
    print(f"load average {', '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"  {'width':>6s} {'weights':>9s} {'patterns':>8s} {'sweeps':>8s} {'time (s)':>9s}"
          f" {'us/sweep':>10s} {'CPU us/sweep':>12s} {'CPU ns/weight/sweep':>20s} {'conv':>6s}")
    rows = []
    for w in widths:
        n = int(np.clip(args.work / (2 * w * w), 16, 2000))
        nw, n, sweeps, t, per, per_cpu, conv = measure(w, n, repeats=args.repeats)
        rows.append((nw, per, per_cpu))
        print(f"  {w:6d} {nw:9d} {n:8d} {sweeps:8d} {t:9.3f} {per * 1e6:10.2f} {per_cpu * 1e6:12.2f}"
              f" {per_cpu / nw * 1e9:20.3f} {conv:6.3f}")
    x = np.log10([r[0] for r in rows])
    sel = np.array([r[0] for r in rows]) >= args.fit_above
    print()
    for label, col in (("wall time", 1), ("CPU time ", 2)):
        y = np.log10([r[col] for r in rows])
        slope_all = np.polyfit(x, y, 1)[0]
        line = f"log-log slope of {label} per sweep vs weights: all points {slope_all:.3f}"
        if sel.sum() >= 2:
            slope = np.polyfit(x[sel], y[sel], 1)[0]
            line += (f"; above {args.fit_above:.0e} weights ({sel.sum()} points) {slope:.3f}"
                     f"  (target 0.9-1.1: {'met' if 0.9 <= slope <= 1.1 else 'NOT met'})")
        print(line)
        local = np.diff(y) / np.diff(x)
        print(f"  local slopes ({label.strip()}): " + " ".join(f"{s:.2f}" for s in local))
    print(f"load average {', '.join(f'{x:.2f}' for x in os.getloadavg())}")
    if _common.extension_fingerprint() != fingerprint:
        print(_common.REBUILT_WARNING)
    return 0


if __name__ == "__main__":
    sys.exit(main())
