"""Speed of the strict (SJJ) bound on the paper's layered sigmoid net, against PyTorch L-BFGS.

    nice -n 10 python bench/speed/sjj_speed.py                  # 1000 patterns, both peers
    nice -n 10 python bench/speed/sjj_speed.py --peers per_item  # the faster peer only (~30 s)
    nice -n 10 python bench/speed/sjj_speed.py --n 300          # a quicker run

The case (``bench/dag_cases.py``, "layered"): ``mf.SigmoidBeliefNet([4, 12, 36, 100],
random_state=0)`` -- weights N(0, 1/fan_in), zero biases -- and 1000 binary patterns sampled
from it (``random_state=1``); tol 1e-6.

* mfengine: ``mf.infer(net, V, method="sjj", tol=1e-6, n_threads=t)`` for t = 1 and 2 in
  turn, the best wall clock of ``--repeats`` rounds (at least 5; and the process CPU time of
  that one-thread run, which a busy machine disturbs less), with the mean and largest number
  of sweeps, and beside them the machine's own two-thread scaling (``_common.core_scaling``).
* The PyTorch peers of ``bench/peers/torch_dag.py`` (float64, ``torch.set_num_threads(1)``),
  which maximise the same bound over every pattern's mean logits and xi logits:
  "per_item" -- one L-BFGS per pattern, run in lockstep over the batch (each pattern its own
  history and line search; stops at max |gradient| <= 1e-6); "joint" -- ``torch.optim.LBFGS``
  on the sum over all patterns (strong Wolfe; stops at max |gradient| <= 1e-6).

* The kernel's careful path (``fast=False``: the algorithm before the fast path, per-edge
  logarithms, every 1-D problem solved to the end) on the first ``--careful`` patterns, one
  thread, CPU time: the before/after ratio in the same run.

Printed: patterns/s of each, mfengine's speed-up over each peer (same inputs, same run), the
largest and mean difference of the bounds per pattern (nats), the two-thread speed-up and
whether one and two threads give bit-identical answers, and the load (``os.getloadavg``) at
the start and the end.  Compare ratios, not absolute figures, across machines and loads.
"""
import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # bench/
import _paths  # noqa: E402,F401  (bench/ and its folders on sys.path)

import _common  # noqa: E402
import mfengine as mf  # noqa: E402
from dag_cases import TOL, make_case  # noqa: E402

TARGET_RATE = 2000.0      # patterns/s, one thread (issue 11)
TARGET_PEER_RATIO = 20.0  # x the PyTorch peer
TARGET_THREADS = 1.8      # two threads / one thread
MAX_BOUND_DIFF = 1e-5     # nats per pattern


def run_mf(case, threads):
    return mf.infer(case.model, case.V, method="sjj", tol=TOL, n_threads=threads)


def run_peer(case, which):
    import torch_dag as peer

    if not peer.torch_available():
        return None, peer.torch_why_unavailable()
    fn = peer.torch_solve_per_item if which == "per_item" else peer.torch_solve
    t0 = time.perf_counter()
    out = fn(case, "sjj", threads=1, tol=TOL)
    out.seconds = time.perf_counter() - t0
    return out, None


def run_careful(case, n):
    """The kernel on its careful path (fast=False) for the first n patterns; CPU seconds and
    bounds."""
    from mfengine.sbn import _sjj, sjj
    from mfengine.sbn._solve import inner_tol_for

    nets, items, _, _ = case.model.to_dag()._dag_problem(case.V[:n])
    arrays, w, h, net_of, clamp = sjj.check_nets(nets.structure, nets.w, nets.h, items.net_of,
                                                 items.clamp,
                                                 "sigmoid")
    mu, xi = np.full(clamp.shape, 0.5), np.full(clamp.shape, 0.5)
    bound, sweeps = np.empty(n), np.zeros(n, np.intp)
    conv, status = np.zeros(n, np.uint8), np.zeros(n, np.int8)
    c0 = time.process_time()
    _sjj.solve(*arrays, w, h, net_of, clamp, mu, xi, bound, sweeps, conv, status,
               np.empty((0, 0)), TOL, inner_tol_for(TOL), 200, 1, False, False)
    return time.process_time() - c0, bound, sweeps


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=1000, help="patterns (default 1000)")
    ap.add_argument("--repeats", type=int, default=3, help="mfengine rounds, one and two threads in turn (at least 5)")
    ap.add_argument("--careful", type=int, default=200,
                    help="patterns for the careful-path (before) timing; 0 skips it")
    ap.add_argument("--peers", default="per_item,joint",
                    help="comma-separated PyTorch peers: per_item, joint, or none")
    args = ap.parse_args(argv)
    case = make_case("layered", args.n)
    n = case.n_items
    load0 = os.getloadavg()
    print(f"sjj speed: {case.description}, {n} patterns, tol {TOL:g}; load at start "
          f"{load0[0]:.2f} {load0[1]:.2f} {load0[2]:.2f} ({os.cpu_count()} cores)")
    probe = [_common.core_scaling()]
    with _common.blas_threads(1):
        for t in (1, 2):
            run_mf(case, t)                                          # warm-up
        timed = _common.timed_threads(lambda t: run_mf(case, t), repeats=max(args.repeats, 5))
    probe.append(_common.core_scaling())
    (r1, w1, _, c1), (r2, w2, _, c2) = timed[1], timed[2]
    sweeps = np.asarray(r1.n_iter)
    rate1, rate_cpu, rate2 = n / w1, n / c1, n / w2
    print(f"mfengine 1 thread : {rate1:8.0f} patterns/s wall ({rate_cpu:.0f}/s by CPU time), "
          f"{sweeps.mean():.2f} sweeps (max {sweeps.max()}), converged "
          f"{np.mean(r1.converged):.3f}, mean bound {np.mean(r1.bound):.6f}")
    same = (np.array_equal(r1.bound, r2.bound)
            and all(np.array_equal(a, b) for a, b in zip(r1.mu, r2.mu)))
    print(f"mfengine 2 threads: {rate2:8.0f} patterns/s wall; 2 / 1 threads = {rate2 / rate1:.2f} "
          f"(target >= {TARGET_THREADS}); answers bit-identical: {same}; CPU time 2 threads / "
          f"1 thread = {c2 / c1:.3f} (parallel overhead: with two idle cores the wall-clock "
          f"speed-up would be about {2 * c1 / c2:.2f}); the machine's own two-thread scaling "
          f"(a C loop, not mfengine) before / after: {probe[0]:.2f}x / {probe[1]:.2f}x")
    print(f"target {TARGET_RATE:.0f} patterns/s on one thread: "
          f"{'met' if rate1 >= TARGET_RATE else 'NOT met'} by wall clock, "
          f"{'met' if rate_cpu >= TARGET_RATE else 'NOT met'} by CPU time")
    if args.careful > 0:
        m = min(args.careful, n)
        cpu, bound, sw = run_careful(case, m)
        d = np.asarray(r1.bound)[:m] - bound
        print(f"careful path (before), 1 thread: {m / cpu:8.0f} patterns/s by CPU time, "
              f"{sw.mean():.2f} sweeps; fast / careful = {rate_cpu * cpu / m:.1f}x by CPU time; "
              f"bound fast - careful: max |d| {np.abs(d).max():.2e} nats")
    for which in [p.strip() for p in args.peers.split(",") if p.strip() and p.strip() != "none"]:
        out, why = run_peer(case, which)
        if out is None:
            print(f"PyTorch {which}: skipped ({why})")
            continue
        d = np.asarray(r1.bound) - out.bound
        prate = n / out.seconds
        print(f"PyTorch L-BFGS {which:8s}: {prate:8.1f} patterns/s ({out.iterations}), converged "
              f"{np.mean(out.converged):.3f}; mfengine / peer = {rate1 / prate:.1f}x wall "
              f"(target >= {TARGET_PEER_RATIO:.0f}x); bound mf - peer: max |d| {np.abs(d).max():.2e}, "
              f"mean {d.mean():.2e} nats (target max |d| <= {MAX_BOUND_DIFF:g})")
    load1 = os.getloadavg()
    print(f"load at end {load1[0]:.2f} {load1[1]:.2f} {load1[2]:.2f}")


if __name__ == "__main__":
    main()
