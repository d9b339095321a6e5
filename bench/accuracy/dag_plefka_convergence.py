"""Convergence of plefka11/plefka12 on the diagnosis-style noisy-OR net (issue 11, item 3).

    python bench/accuracy/dag_plefka_convergence.py                 # 20 cases, seed 0 (~1 min)
    python bench/accuracy/dag_plefka_convergence.py --cases 50 --seed 1
    python bench/accuracy/dag_plefka_convergence.py --cases 100 --unrecorded 0.95   # ~200 findings a case

The net and cases are drawn as ``bench/speed/diagnosis.py`` draws them:
``mf.datasets.make_diagnosis_net(600, 4000, 10, random_state=seed)`` (600 diseases, 4000
findings, 10 parents per finding, leak biases 0.005-0.01) and ``net.sample(cases,
random_state=seed + 1)``; the findings are clamped, the diseases free; ``infer``'s defaults
(tol 1e-6, 200 iterations), one thread.

"before" is the fixed-point iteration alone (``plefka.solve(..., coordinate_descent=False)``:
the solver as it was, where a unit pushed against |logit u| = 700 leaves its case
unconverged); "after" adds the coordinate-descent fallback (the default, what ``net.infer``
runs).  Printed per scheme: the converged fraction, the mean G at the answer (lower is better:
both minimise G), the cases per second and the mean iterations (fixed-point iterations plus
coordinate-descent sweeps).

``--unrecorded F``: each finding is unrecorded (missing) with probability F, as in a real
case, where most of the 4000 findings are never examined (``numpy.random.default_rng(seed +
2)``).  Unrecorded findings have no clamped descendant: they sum out of P exactly, and the
Plefka schemes leave them out (and every disease all of whose findings are unrecorded).
"""
import argparse
import time
import warnings

import numpy as np

import mfengine as mf
from mfengine.sbn import plefka


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--diseases", type=int, default=600)
    ap.add_argument("--findings", type=int, default=4000)
    ap.add_argument("--parents", type=int, default=10)
    ap.add_argument("--cases", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--unrecorded", type=float, default=0.0,
                    help="probability that a finding is unrecorded (missing)")
    args = ap.parse_args(argv)
    net = mf.datasets.make_diagnosis_net(args.diseases, args.findings, args.parents,
                                         random_state=args.seed)
    net.set_params(progress=False, n_threads=1)
    X = net.sample(args.cases, random_state=args.seed + 1)
    miss = (np.random.default_rng(args.seed + 2).random(X.shape) < args.unrecorded
            if args.unrecorded > 0 else None)
    nets, items, _, _ = net._dag_problem(X, miss)
    s, w, clamp, net_of = nets.structure, nets.w, items.clamp, items.net_of
    print(f"diagnosis net: {args.diseases} diseases, {args.findings} findings, {net.n_weights} "
          f"edges, seed {args.seed}; {args.cases} cases, {args.unrecorded:.0%} of the findings "
          f"unrecorded; tol {net.infer_tol:g}, max_iter "
          f"{net.infer_max_iter}, 1 thread")
    print(f"{'scheme':<9} {'solver':<28} {'converged':>9} {'mean G':>10} {'cases/s':>8} "
          f"{'iterations':>10}")
    for order in (11, 12):
        for label, cd in (("before: fixed point only", False),
                          ("after: + coordinate descent", True)):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                t0 = time.perf_counter()
                G, u, n_iter, conv = plefka.solve(s, w, nets.h, net_of, clamp, order,
                                                  "noisy_or", tol=net.infer_tol,
                                                  max_iter=net.infer_max_iter, n_threads=1,
                                                  coordinate_descent=cd)
                dt = time.perf_counter() - t0
            print(f"plefka{order:<3} {label:<28} {conv.mean():9.2f} {G.mean():10.2f} "
                  f"{args.cases / dt:8.2f} {n_iter.mean():10.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
