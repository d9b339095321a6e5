"""Sparse DAG belief nets: time per sweep against the number of edges, and the cost of
building a large net.

    nice -n 10 python bench/speed/sparse_scaling.py                  # 1e3 .. 1e7 edges, sjj
    nice -n 10 python bench/speed/sparse_scaling.py --max-edges 1e6 --runs sjj:noisy_or:uniform,plefka11:sigmoid:local
    nice -n 10 python bench/speed/sparse_scaling.py --runs sjj:sigmoid:uniform:plain,sjj:sigmoid:uniform
                                          # before/after the sjj kernel's large-net layout

Random DAGs with a fixed mean fan-in (default 10): n_units = edges / fan-in, each edge a
child i drawn uniformly and a parent uniformly below it ("uniform": anywhere below, so that
the parents' means are read from all over memory, the worst case for the caches) or among the
1000 units just below it ("local", as in a layered net); sigmoid weights N(0, 1/fan-in) and
biases 0, or noisy-OR weights U(0, 2/fan-in) and biases 0.05; the last 10% of the units
visible; given to ``mf.BeliefNet`` as a scipy.sparse CSR matrix.  Each point runs in its own child process (so that its peak resident
memory, ``ru_maxrss``, is its own): build the net, draw a few patterns from it
(``BeliefNet.sample``, compiled ancestral sampling), and time ``infer`` on one thread with
fixed budgets (tol 1e-300) of 1 and 1 + --sweeps sweeps (default 10), each --repeat times
(default 2), keeping the shortest; time per sweep = the difference of the two times / the
difference of the sweeps taken (so each pattern's set-up, which the first run also pays, is not
counted), from the wall clock and from the CPU time of the process.  (The set-up of the largest
nets -- their structures rebuilt and about 1.5 GB of scratch faulted in -- takes 1-2 s and
varies by up to half a second from call to call, as much as a sweep there: with 3 sweeps and
one call per budget the time per sweep at 1e7 edges, parents anywhere, read anything from 22 to
62 ns per edge from run to run; with 10 sweeps, best of 2, 41-46.)  The log-log slope of time per sweep against edges is fitted
by least squares over all points (1e3 to 1e7 edges by default; target 0.9-1.1: linear in
edges), and again from --fit-above edges (default 1e4), which leaves out the smallest nets, each
with its verdict.  First, the build time and peak memory
of a net of 1e5 units and 1e6 edges (targets: under 2 s, under 500 MB).
"""
import argparse
import json
import os
import resource
import subprocess
import sys
import time
import warnings

import numpy as np


def random_dag(n_units, n_edges, seed=0, window=None, activation="sigmoid"):
    """A random DAG: each edge a child i drawn uniformly and a parent uniformly below it
    (``window``: among the ``window`` units just below it, as in a layered net)."""
    import scipy.sparse

    rng = np.random.default_rng(seed)
    i = rng.integers(1, n_units, n_edges)
    span = i if window is None else np.minimum(i, window)
    j = i - 1 - (rng.random(n_edges) * span).astype(np.int64)   # a parent below the child
    fan = max(n_edges / n_units, 1.0)
    if activation == "noisy_or":
        w = rng.uniform(0.0, 2.0 / fan, n_edges)
        h = np.full(n_units, 0.05)
    else:
        w = rng.normal(0.0, 1.0 / np.sqrt(fan), n_edges)
        h = np.zeros(n_units)
    W = scipy.sparse.csr_matrix((w, (i, j)), shape=(n_units, n_units))
    visible = np.arange(n_units - max(n_units // 10, 1), n_units)
    return W, h, visible


def rss_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def child_build(n_units, n_edges):
    """Build time and memory of one net (run in a child process)."""
    import tracemalloc

    import mfengine as mf

    W, h, vis = random_dag(n_units, n_edges)
    before = rss_mb()
    tracemalloc.start()
    t0 = time.perf_counter()
    net = mf.BeliefNet(W, h, vis)
    net.sample(0)                 # checks the parameters and builds the structure
    built = time.perf_counter() - t0
    traced = tracemalloc.get_traced_memory()[1] / 1e6
    tracemalloc.stop()
    t0 = time.perf_counter()
    net.sample(10, random_state=0)
    sampled = time.perf_counter() - t0
    return dict(n_units=n_units, edges=int(net.n_weights), build_s=built, traced_mb=traced,
                rss_before_mb=before, rss_peak_mb=rss_mb(), sample10_s=sampled)


def child_sweep(n_edges, fan_in, method, sweeps, work, window, activation, plain=False,
                repeat=2):
    """Time per sweep of one method on one net (run in a child process); ``plain``: the sjj
    kernel without its large-net layout (records and prefetch), for before/after; each budget
    timed ``repeat`` times, the shortest wall and CPU times kept."""
    import mfengine as mf

    if plain:
        from mfengine.sbn import _sjj

        _sjj._set_records(False)
        _sjj._set_prefetch(False)

    n_units = max(int(n_edges / fan_in), 2)
    W, h, vis = random_dag(n_units, n_edges, window=window, activation=activation)
    net = mf.BeliefNet(W, h, vis, activation=activation, progress=False, n_threads=1)
    n_pat = int(np.clip(work / n_edges, 1, 64))
    X = net.sample(n_pat, random_state=1)
    runs = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        net.infer(X[:1], method=method, tol=1e-300, max_iter=1)     # warm-up
        for budget in (1, 1 + sweeps):
            best_w = best_c = np.inf
            for _ in range(repeat):
                c0 = time.process_time()
                t0 = time.perf_counter()
                r = net.infer(X, method=method, tol=1e-300, max_iter=budget)
                best_w = min(best_w, time.perf_counter() - t0)
                best_c = min(best_c, time.process_time() - c0)
            runs[budget] = (best_w, best_c, float(np.sum(r.n_iter)))
    # the marginal cost of a sweep: the set-up of each pattern (allocation, first pass)
    # cancels between the two budgets
    (w1, c1, s1), (w2, c2, s2) = runs[1], runs[1 + sweeps]
    total = s2 - s1
    return dict(edges=int(net.n_weights), n_units=n_units, patterns=n_pat, sweeps=total,
                wall_per_sweep=max(w2 - w1, 1e-9) / total, cpu_per_sweep=max(c2 - c1, 1e-9) / total,
                setup_per_pattern=max(w1 - (w2 - w1) / sweeps, 0.0) / n_pat, rss_peak_mb=rss_mb())


def run_child(args):
    out = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", json.dumps(args)],
                         capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(out.stderr[-2000:])
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--min-edges", type=float, default=1e3)
    ap.add_argument("--max-edges", type=float, default=1e7)
    ap.add_argument("--points", type=int, default=9)
    ap.add_argument("--fan-in", type=float, default=10.0)
    ap.add_argument("--runs", default="sjj:sigmoid:local,sjj:sigmoid:uniform,sjj:noisy_or:local",
                    help="comma-separated method:activation:parents[:plain], parents 'uniform' "
                         "(any unit below the child) or 'local' (among the --window units below "
                         "it); ':plain' runs the sjj kernel without its large-net layout "
                         "(records and prefetch), the before of a same-run comparison")
    ap.add_argument("--window", type=int, default=1000)
    ap.add_argument("--sweeps", type=int, default=10,
                    help="sweeps per pattern (tol 1e-300: a fixed budget)")
    ap.add_argument("--repeat", type=int, default=2,
                    help="timings of each budget, the shortest kept")
    ap.add_argument("--work", type=float, default=3e6,
                    help="patterns = clip(work / edges, 1, 64)")
    ap.add_argument("--fit-above", type=float, default=1e4)
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        a = json.loads(args.child)
        r = child_build(*a["build"]) if "build" in a else child_sweep(*a["sweep"])
        print(json.dumps(r))
        return 0

    print(f"load average {', '.join(f'{x:.2f}' for x in os.getloadavg())} "
          f"on {os.cpu_count()} CPUs")
    b = run_child({"build": [100_000, 1_000_000]})
    print(f"build: {b['n_units']} units, {b['edges']} edges: BeliefNet built and checked in "
          f"{b['build_s']:.2f} s (target < 2 s: {'met' if b['build_s'] < 2 else 'NOT met'}); "
          f"traced peak {b['traced_mb']:.0f} MB; process peak RSS {b['rss_peak_mb']:.0f} MB "
          f"({b['rss_before_mb']:.0f} MB with the interpreter, SciPy and the input matrix) "
          f"(target < 500 MB: {'met' if b['rss_peak_mb'] < 500 else 'NOT met'}); "
          f"10 samples in {b['sample10_s']:.3f} s")
    targets = np.geomspace(args.min_edges, args.max_edges, args.points)
    for run in args.runs.split(","):
        method, activation, parents, *rest = run.split(":")
        plain = rest == ["plain"]
        window = args.window if parents == "local" else None
        print(f"\n{method}{' (plain layout)' if plain else ''}, {activation} units, parents {parents}"
              f"{f' (within {window} units)' if window else ''}: time per sweep, fan-in "
              f"{args.fan_in:g}, 1 thread, {args.sweeps} sweeps per pattern, best of "
              f"{args.repeat}")
        print(f"  {'edges':>9s} {'units':>8s} {'patterns':>8s} {'us/sweep':>11s} "
              f"{'CPU us/sweep':>12s} {'CPU ns/edge':>11s} {'setup ms/pattern':>16s} "
              f"{'peak RSS MB':>11s}")
        rows = []
        for m in targets:
            r = run_child({"sweep": [int(m), args.fan_in, method, args.sweeps, args.work, window,
                                     activation, plain, args.repeat]})
            rows.append(r)
            print(f"  {r['edges']:9d} {r['n_units']:8d} {r['patterns']:8d} "
                  f"{r['wall_per_sweep'] * 1e6:11.1f} {r['cpu_per_sweep'] * 1e6:12.1f} "
                  f"{r['cpu_per_sweep'] / r['edges'] * 1e9:11.2f} "
                  f"{r['setup_per_pattern'] * 1e3:16.2f} {r['rss_peak_mb']:11.0f}",
                  flush=True)
        x = np.log10([r["edges"] for r in rows])
        sel = np.array([r["edges"] for r in rows]) >= args.fit_above
        for label, key in (("wall", "wall_per_sweep"), ("CPU ", "cpu_per_sweep")):
            y = np.log10([r[key] for r in rows])
            s_all = np.polyfit(x, y, 1)[0]
            line = (f"  log-log slope ({label}) of time per sweep vs edges: all points {s_all:.3f} "
                    f"({within(s_all)})")
            if sel.sum() >= 2:
                s = np.polyfit(x[sel], y[sel], 1)[0]
                line += f"; from {args.fit_above:.0e} edges {s:.3f} ({within(s)})"
            print(line)
    print(f"load average {', '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


def within(slope):
    """The verdict on one fitted slope: linear in edges means 0.9-1.1."""
    return f"0.9-1.1: {'met' if 0.9 <= slope <= 1.1 else 'NOT met'}"


if __name__ == "__main__":
    sys.exit(main())
