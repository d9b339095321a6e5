"""mf.infer's DAG methods "sjj", "plefka11" and "plefka12" against a NumPy and a PyTorch peer
(one process).

    python bench/speed/dag_compare.py                  # both models, sjj and plefka12 (~2-3 min)
    python bench/speed/dag_compare.py --models layered --methods plefka11,plefka12 --no-joint
                                                 # issue 11's Plefka target (~20 s)
    python bench/speed/dag_compare.py --models batch --methods sjj
    python bench/speed/dag_compare.py --no-torch

Models (the same inputs for every implementation):

* ``batch``   -- a ``mf.BeliefNetBatch`` of 10,000 random layered 2x4x6 sigmoid nets, weights
  and biases uniform in [-1, 1] (``bench/accuracy/plefka_tables.random_nets``, seed 0), the six
  bottom units clamped to 0; one item per net (the setting of Bhattacharyya & Keerthi's Table 1);
* ``layered`` -- ``mf.SigmoidBeliefNet([4, 12, 36, 100], random_state=0)`` (weights
  N(0, 1/fan_in), zero biases: Saul & Jordan's net), 1000 patterns sampled from it
  (``random_state=1``); mf.infer converts it to a DAG.

Objectives (written out once per peer, for layered nets; mu_l / u_l the means of layer l, the
bottom layer clamped to the data, t = logit(mu) of the hidden units):

* "sjj", maximised over mu and xi (Saul, Jaakkola & Jordan; ``mfengine/sbn/_sjj.pyx``)::

      L = sum_hidden H(mu_i) + sum_i [(mu_i - xi_i) Z_i - ln(e^{A_i} + e^{B_i})]
      Z_i = h_i + sum_j W_ij mu_j,   A_i = -xi_i h_i + sum_j ln(1 - mu_j + mu_j e^{-xi_i W_ij}),
      B_i = (1 - xi_i) h_i + sum_j ln(1 - mu_j + mu_j e^{(1 - xi_i) W_ij})

  (for a top unit the bracket is mu_i h_i - ln(1 + e^{h_i}) whatever xi_i, so top units have
  no xi here);
* "plefka12" (and "plefka11": the same without the last term), minimised over the hidden u
  (Bhattacharyya & Keerthi, eq. 42; sigmoid units)::

      G12 = sum_hidden [u ln u + (1 - u) ln(1 - u)] - sum_i [u_i M_i - ln(1 + e^{M_i})]
            + 1/2 sum_i sigma'(M_i) V_i,     M_i = h_i + sum_j W_ij u_j,  V_i = sum_j W_ij^2 u_j (1 - u_j)

  mf.infer reports ``bound = -G12``; so do the peers.

Before timing, each peer's objective is evaluated at mf.infer's solution and must equal mf's
reported bound to 1e-9 nats per item (so the three really optimise one function).

Peers (float64, items batched; every item stops on the same kind of criterion as mf.infer's
Plefka kernel: the largest residual of the mean-field equations, |dObjective/dt| in the
logits ~ |sigmoid(image) - mu|, at most ``--tol``, default 1e-6; mf's sjj stops when a sweep
changes the bound by less than tol):

* NumPy -- the mean-field fixed-point iteration in the logits, t <- image(t) (for sjj the
  image is dE/dmu, for G12 it is -dF/du, eq. 73 of Bhattacharyya & Keerthi), used as a search
  direction: ``image - t`` is the gradient in t scaled by 1 / (mu (1 - mu)), hence an ascent
  (descent) direction.  The full step is taken when it passes an Armijo test, otherwise it is
  halved, per item.  For sjj every iteration first minimises each unit's convex
  phi(xi) = xi Z + ln(e^A + e^B) exactly (safeguarded Newton, all units and items at once:
  with mu fixed the xi decouple).  All updates of all units and items are vectorised; the loop
  over iterations runs only over items not yet converged.  BLAS limited to one thread.
* PyTorch L-BFGS per item -- autograd on the same objective over the unconstrained logits of
  every hidden mu (and of every xi below the top layer, for sjj); one L-BFGS per item (history
  10, its own step scale and backtracking Armijo line search), all items in lockstep as
  (n_items, ...) tensors, converged items dropped (``_t_batched_lbfgs``).
* PyTorch joint L-BFGS -- ``torch.optim.LBFGS`` (strong-Wolfe line search, history 10) on the
  sum of the items' objectives over the same logits, one tensor for all items (items do not
  interact, so the sum's optimum is every item's optimum), as
  ``bench/peers/torch_gaussian.py`` does for the Gaussian bound.  Its shared history and step
  cannot adapt to 10,000 differently curved items: on the batch model it needs ~900 iterations
  for sjj (the per-item version: 46 on average), and more the more items it is given, so it
  runs on a subset there (its rate on a subset overstates its rate on all items).

PyTorch runs with torch.set_num_threads(1).

Agreement, per item, d = peer's bound - mf's bound (nats).  sjj: mean |d| < 1e-4 asserted.
plefka12 (G12 may have several local minima): mean d < 1e-4 asserted, i.e. the peers do not
reach a lower G12 than mf on average.  Timings are reported, never asserted.  Throughput is
items per second of wall time, best of ``--repeats`` rounds for mf, one and two threads in turn
in each round (NumPy's BLAS held to one thread; a round that brings mf's calls to 16 s is the
last); each peer, best of ``--peer-repeats`` runs (default 5, as mf; none started once its runs
have taken 20 s), after an untimed warm-up on 8 items, on the first ``PEER_ITEMS`` items (the
column "items timed" of the table); "per CPU-s" divides by the CPU time of the calling thread
(1-thread runs only), the figure least disturbed by other work on a shared machine.
"""
import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # bench/
import _paths  # noqa: E402,F401  (bench/ and its folders on sys.path)

import mfengine as mf  # noqa: E402,F401

import _common  # noqa: E402
from dag_cases import (  # noqa: E402
    MAX_MEAN_ABS_DIFF_SJJ,
    MAX_MEAN_DIFF_G12,
    MAX_OBJECTIVE_MISMATCH,
    N_NETS,
    METHODS,
    N_PATTERNS,
    TOL,
    make_case,
    run_mf,
)
from numpy_dag import (  # noqa: E402
    np_g12_objective,
    np_sjj_objective,
    np_solve,
)
import torch_dag  # noqa: E402
from torch_dag import (  # noqa: E402
    _t_objective,
    torch_available,
    torch_solve,
    torch_solve_per_item,
    torch_why_unavailable,
)

# ---------------------------------------------------------------------------- checks
def objective_mismatch(case, method, ref):
    """max |NumPy objective at mf's solution - mf's bound| over items (nats)."""
    mus = list(ref.mu) + [np.asarray(case.V, dtype=np.float64)]
    if method == "sjj":
        val = np_sjj_objective(case.W, case.b, mus, ref.xi)
    else:
        val = -np_g12_objective(case.W, case.b, mus, order=11 if method == "plefka11" else 12)
    out = {"numpy": float(np.max(np.abs(val - ref.bound)))}
    if torch_available():
        torch = torch_dag._torch

        def logit(p):
            with np.errstate(divide="ignore"):
                return np.clip(np.log(p) - np.log1p(-p), -745.0, 745.0)

        T = torch.as_tensor(np.concatenate([logit(m) for m in ref.mu], axis=1))
        S = None
        if method == "sjj":
            S = torch.as_tensor(np.concatenate([logit(x) for x in ref.xi], axis=1))
        with torch.no_grad():
            tv = _t_objective(method, [torch.as_tensor(w) for w in case.W],
                              [torch.as_tensor(v) for v in case.b], T, S,
                              torch.as_tensor(np.asarray(case.V, dtype=np.float64)),
                              case.sizes).numpy()
        out["torch"] = float(np.max(np.abs(tv - ref.bound)))
    return out


def agreement(bound, ref_bound):
    d = np.asarray(bound) - np.asarray(ref_bound)
    return {"mean_diff": float(d.mean()), "mean_abs_diff": float(np.abs(d).mean()),
            "max_abs_diff": float(np.abs(d).max()),
            "frac_within_1e-4": float(np.mean(np.abs(d) <= 1e-4))}


def check_agreement(method, st, label):
    if method == "sjj":
        assert st["mean_abs_diff"] < MAX_MEAN_ABS_DIFF_SJJ, f"{label}: {st}"
    else:
        assert st["mean_diff"] < MAX_MEAN_DIFF_G12, f"{label}: {st}"


# ---------------------------------------------------------------------------- driver
def _keep(out, best):
    out.seconds, out.cpu_seconds = best[0], best[1]
    out.extra["cpu_per_wall"] = best[2] / best[0]
    return out


def timed(fn, *args, repeats=1, budget=None, **kw):
    """Best wall time of up to ``repeats`` runs of ``fn``, none started once ``budget``
    seconds are spent; with it the CPU time of the calling thread in that run, and the
    process's CPU time over the wall time (``extra["cpu_per_wall"]``): about the number of
    cores the run had; a 2-thread run that shows ~1 did not get a second core."""
    best, out, spent = None, None, 0.0
    for _ in range(repeats):
        o, m = _common.measure(fn, *args, **kw)
        if best is None or m[0] < best[0]:
            best, out = m, o
        spent += m[0]
        if budget is not None and spent >= budget:
            break
    return _keep(out, best)


def environment():
    import platform
    bits = [f"python {platform.python_version()}", f"numpy {np.__version__}",
            f"mfengine {getattr(mf, '__version__', '?')}"]
    if torch_available():
        bits.append(f"torch {torch_dag._torch.__version__}")
    load = os.getloadavg() if hasattr(os, "getloadavg") else ()
    return (f"{', '.join(bits)}; {os.cpu_count()} CPUs; "
            f"load average {', '.join(f'{x:.2f}' for x in load)}")


# Items given to the peers (the first ones of each model): fewer where a peer would take
# more than ~10 s on all of them.  The joint L-BFGS needs more iterations the more items it
# optimises at once (every item must meet the tolerance), so its rate on a subset is an
# upper bound of its rate on all items.
PEER_ITEMS = {("batch", "sjj"): (N_NETS, N_NETS, 1000),
              ("batch", "plefka12"): (N_NETS, N_NETS, N_NETS),
              ("layered", "sjj"): (250, 250, 250),
              ("layered", "plefka12"): (N_PATTERNS, N_PATTERNS, N_PATTERNS),
              ("batch", "plefka11"): (N_NETS, N_NETS, N_NETS),
              ("layered", "plefka11"): (N_PATTERNS, N_PATTERNS, N_PATTERNS)}
PEERS = ("numpy", "torch", "torch_joint")


def compare(models, methods, repeats, use_torch, use_joint, max_peer_items=None, tol=TOL,
            peer_repeats=5):
    rows, ratios = [], []
    torch_ok = use_torch and torch_available()
    if use_torch and not torch_ok:
        print(f"PyTorch peers skipped: {torch_why_unavailable()}")
    for name in models:
        # NumPy's BLAS threads (mfengine uses none) limited to one throughout: after a product
        # (the sampling of the case) OpenBLAS's idle threads spin for a while, taking the second
        # core from mfengine's two-thread run and inflating its one-thread run's CPU time
        with _common.blas_threads(1):
            case = make_case(name)
        for method in methods:
            res, n_of = {}, {}
            with _common.blas_threads(1):
                for t in (1, 2):
                    run_mf(case.subset(32), method, t, tol)                     # warm-up
                probe = _common.core_scaling()
                mine = _common.timed_threads(lambda t: run_mf(case, method, t, tol),
                                             repeats=repeats, budget=16.0)
                PROBES[(name, method)] = (probe, _common.core_scaling())
                for t, (out, wall, cpu, proc) in mine.items():
                    res[("mf", t)] = _keep(out, (wall, cpu, proc))
                    n_of[("mf", t)] = case.n_items
            ref = res[("mf", 1)]
            if not np.array_equal(res[("mf", 2)].bound, ref.bound):
                print(f"  !! mf.infer ({method}) gives different bounds on 1 and 2 threads")
            mism = objective_mismatch(case, method, ref)
            for k, v in mism.items():
                assert v < MAX_OBJECTIVE_MISMATCH, (
                    f"{k} objective at mf's solution differs from mf's {method} bound by {v:.3g}")
            runners = {"numpy": np_solve}
            if torch_ok:
                runners["torch"] = torch_solve_per_item
                if use_joint:
                    runners["torch_joint"] = torch_solve
            for peer, fn in runners.items():
                n = PEER_ITEMS[(name, method)][PEERS.index(peer)]
                if max_peer_items is not None:
                    n = min(n, max_peer_items)
                sub = case.subset(n)
                with _common.blas_threads(1):
                    fn(sub.subset(8), method, tol=tol)                          # warm-up
                    res[(peer, 1)] = timed(fn, sub, method, tol=tol, repeats=peer_repeats,
                                           budget=20.0)
                n_of[(peer, 1)] = sub.n_items
            for key, out in res.items():
                n = n_of[key]
                st = agreement(out.bound, ref.bound[:n])
                if key[0] != "mf":
                    check_agreement(method, st, f"{out.impl} vs mfengine, {name}/{method}")
                rate = n / out.seconds
                crate = n / out.cpu_seconds if out.threads == 1 else float("nan")
                rows.append((name, method, out.impl, out.threads, n, rate, crate,
                             out.extra["cpu_per_wall"], float(out.bound.mean()), st,
                             float(out.converged.mean()), out.iterations,
                             out.extra.get("stop_reason", "")))
                out.extra["rate"], out.extra["crate"] = rate, crate
            r = {k: v.extra["rate"] for k, v in res.items()}
            c = {k: v.extra["crate"] for k, v in res.items()}
            for peer in PEERS:
                if (peer, 1) in r:
                    ratios.append((name, method, f"mf / {res[(peer, 1)].impl} (1 thread each)",
                                   r[("mf", 1)] / r[(peer, 1)], c[("mf", 1)] / c[(peer, 1)]))
            pc = {t: res[("mf", t)].extra["cpu_per_wall"] * res[("mf", t)].seconds
                  for t in (1, 2)}      # process CPU seconds of each run
            ratios.append((name, method, "mf 2 threads / mf 1 thread", r[("mf", 2)] / r[("mf", 1)],
                           pc[1] / pc[2]))
            print(f"  done: {name}/{method}", file=sys.stderr, flush=True)
    return rows, ratios


def print_tables(rows, ratios, tol):
    print(f"\nd = implementation's bound - mf's bound (1 thread), per item, nats; bound = L for "
          f"sjj, -G12 for plefka12; tol {tol:g}.  items/s from wall time; per CPU-s from the "
          f"calling thread's CPU time (1-thread runs); cores used = process CPU time / wall time "
          f"(a 2-thread run near 1.0 did not get a second core: the 2/1-thread ratio then "
          f"says nothing about the kernels).  Peers on fewer items than mf: the first ones.")
    print()
    print("| model | method | implementation | threads | items timed | items/s | per CPU-s "
          "| cores used | mean bound | mean d | mean abs d | converged | iterations |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for (name, method, impl, thr, n, rate, crate, cpw, mb, st, conv, its, why) in rows:
        cs = f"{crate:.0f}" if np.isfinite(crate) else "-"
        note = f" ({why})" if why and not why.startswith("every") else ""
        print(f"| {name} | {method} | {impl} | {thr} | {n} | {rate:.0f} | {cs} | {cpw:.2f} "
              f"| {mb:.6f} | {st['mean_diff']:+.1e} | {st['mean_abs_diff']:.1e} | {conv:.3f} "
              f"| {its}{note} |")
    print()
    print("| model | method | ratio (items/s) | wall time | CPU time (2/1 threads: process CPU) |")
    print("|---|---|---|---|---|")
    for (name, method, label, rw, rc) in ratios:
        cs = f"{rc:.2f}x" if np.isfinite(rc) else "-"
        print(f"| {name} | {method} | {label} | {rw:.2f}x | {cs} |")


#: (model, method) -> the machine's own two-thread scaling (``_common.core_scaling``) measured
#: just before and just after mf's thread rounds
PROBES = {}


def targets(ratios):
    """Issue 11's Plefka targets on the layered net, from the ratios above (per CPU-s where
    known: the figure least disturbed by other work on the machine)."""
    for (name, method, label, rw, rc) in ratios:
        if name != "layered" or not method.startswith("plefka"):
            continue
        if "per item" in label:
            r = rc if np.isfinite(rc) else rw
            print(f"target {method}: mf / PyTorch per item, 1 thread = {r:.2f}x (>= 3x: "
                  f"{'met' if r >= 3 else 'NOT met'})")
        elif "2 threads" in label:
            print(f"target {method}: 2 threads / 1 thread = {rw:.2f}x (>= 1.8x: "
                  f"{'met' if rw >= 1.8 else 'NOT met'}; needs two idle cores); items per "
                  f"process CPU-second, 2 threads / 1 thread = {rc:.2f} (1.00: no parallel "
                  f"overhead)")
            if (name, method) in PROBES:
                print(f"  the machine's own two-thread scaling (a cache-bound C loop, not "
                      f"mfengine), before / after: {PROBES[(name, method)][0]:.2f}x / "
                      f"{PROBES[(name, method)][1]:.2f}x (about 2 on two free cores)")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="batch,layered", help="comma-separated: batch,layered")
    ap.add_argument("--methods", default="sjj,plefka12",
                    help="comma-separated: sjj,plefka11,plefka12")
    ap.add_argument("--repeats", type=int, default=5,
                    help="timed rounds of mf, one and two threads in turn (the best of each "
                         "kept; no further round once mf's calls have taken 16 s)")
    ap.add_argument("--peer-repeats", type=int, default=5,
                    help="timed runs of each peer (the best kept; none started after 20 s)")
    ap.add_argument("--max-peer-items", type=int, default=None,
                    help="give the peers at most this many items (default: see PEER_ITEMS)")
    ap.add_argument("--tol", type=float, default=TOL)
    ap.add_argument("--no-torch", action="store_true", help="leave out the PyTorch peers")
    ap.add_argument("--no-joint", action="store_true",
                    help="leave out the joint torch.optim.LBFGS peer")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    fingerprint = _common.extension_fingerprint()
    print(environment())
    rows, ratios = compare([m for m in args.models.split(",") if m],
                           [m for m in args.methods.split(",") if m], args.repeats,
                           not args.no_torch, not args.no_joint, args.max_peer_items, args.tol,
                           args.peer_repeats)
    print_tables(rows, ratios, args.tol)
    targets(ratios)
    print(f"\nwall time {time.perf_counter() - t0:.0f} s; {environment().split('; ')[-1]}")
    if _common.extension_fingerprint() != fingerprint:
        print(_common.REBUILT_WARNING)
    return 0


if __name__ == "__main__":
    sys.exit(main())

