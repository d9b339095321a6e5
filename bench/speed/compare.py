"""Side-by-side comparison of mf.infer with the NumPy and PyTorch peers (outside pytest).

    python bench/speed/compare.py              # both weight scales, 1000 patterns each (~1 min)
    python bench/speed/compare.py --scaling    # time per sweep against the number of weights
    python bench/speed/compare.py --n 200 --no-torch
    python bench/speed/compare.py --torch-threads 1,2   # also PyTorch on 2 threads

For each case (the 4x12x36x100 net with weights N(0, 1/fan_in) and with weights N(0, 1); the
same nets and data as the pytest-benchmark suite, see ``_common``) it prints one row per
method: threads, patterns/s, mean bound, the difference from mf's bounds, the fraction of
patterns converged by the method's own criterion, its iteration count, and the "polish gain":
what the NumPy solver still gains, per pattern, when warm-started from that method's solution
(~0 means the method stopped at a local maximum of the bound; the NumPy solver is used so that
the check does not rely on the library under test).  Then the ratios mf/NumPy, mf/PyTorch and
2 threads / 1 thread, and the library's targets with the measured figure beside each.

The "per CPU-s" column (1-thread runs only) divides by the CPU time of the calling thread in
the same run, which does not count time spent waiting for a core: on a shared, busy machine it
is the figure least disturbed by other work.  mf runs one and two threads in turn, best of
``--repeats`` rounds (default 5); every peer is timed best-of-``--repeats``, except that it
stops repeating once it has used ``--budget`` seconds (default 4), so the slow runs are timed
once.  NumPy's BLAS is limited to one thread (also while the case is sampled: OpenBLAS threads
left spinning after a product would take the core of mf's second thread); PyTorch runs with
torch.set_num_threads(threads).  Timings on a
shared machine are noisy: the load average is printed before and after.
"""
import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # bench/
import _paths  # noqa: E402,F401  (bench/ and its folders on sys.path)

import numpy as np  # noqa: E402

import mfengine as mf  # noqa: E402

import _common  # noqa: E402
import torch_gaussian  # noqa: E402

TARGETS = """\
targets (1 thread unless stated; measured wall-time value in brackets; met/NOT met judged on it):
  scale1   mf >= 5000 patterns/s                      [{s1_mf1:.0f}; per CPU-s {s1_mf1c:.0f}]  {ok1}
  scale1   mf >= 3x PyTorch L-BFGS                    [{s1_rt:.2f}x; CPU time {s1_rtc:.2f}x]  {ok2}
  normal01 mf >= 1000 patterns/s                      [{n1_mf1:.0f}; per CPU-s {n1_mf1c:.0f}]  {ok3}
  normal01 every mf pattern converged                 [{n1_conv:.4f}]  {ok4}
  2 threads >= 1.8x one thread (scale1 / normal01)    [{s1_tt:.2f}x / {n1_tt:.2f}x]  {ok5}
  scaling slope 0.9-1.1 above ~6e4 weights            (python bench/speed/compare.py --scaling)"""


_POLISH = {}


def _fmt_row(case, out, ref, n):
    st = _common.agreement(out.bound, ref.bound)
    key = (case.name, out.bound.tobytes())          # mf's 1- and 2-thread answers are identical
    if key not in _POLISH:
        _POLISH[key] = _common.polish_gain(case, out.mu_hidden, out.bound)
    gain = _POLISH[key]
    pg_mean, pg_max = gain.mean(), gain.max()
    warn = ""
    if out.method == "mfengine" and pg_max >= _common.MAX_POLISH_GAIN:
        warn = (f"\n     !! mf stopped below a maximum on {(gain >= _common.MAX_POLISH_GAIN).mean():.1%}"
                f" of the patterns (NumPy polish gains up to {pg_max:.3g} nats)")
    cpu = f"{n / out.cpu_seconds:9.1f}" if out.threads == 1 else f"{'-':>9s}"
    return (f"  {out.method:15s} {out.threads:>3d}  {n / out.seconds:10.1f}  {cpu}"
            f"  {out.bound.mean():12.6f}"
            f"  {st['mean_diff']:+10.2e}  {st['mean_abs_diff']:9.2e}  {st['frac_within_1e-3']:7.3f}"
            f"  {out.converged.mean():6.3f}  {out.iterations:>20s}  {pg_mean:9.2e} / {pg_max:8.2e}"
            + warn)


def compare(case_names, n, repeats, use_torch, torch_threads, budget=4.0):
    results = {}
    header = (f"  {'method':15s} {'thr':>3s}  {'patterns/s':>10s}  {'per CPU-s':>9s}  {'mean bound':>12s}"
              f"  {'mean d':>10s}  {'mean|d|':>9s}  {'|d|<1e-3':>7s}  {'conv':>6s}"
              f"  {'iterations':>20s}  {'polish gain mean / max':>20s}")
    torch_ok = use_torch and torch_gaussian.available()
    if use_torch and not torch_ok:
        print(f"PyTorch peer skipped: {torch_gaussian.why_unavailable()}")
    for name in case_names:
        with _common.blas_threads(1):   # OpenBLAS threads left spinning would take mf's core
            case = _common.make_case(name, n)
        print(f"\n== {name}: {case.description}; {n} patterns sampled from the net; tol {_common.TOL:g}")
        print("   (patterns/s from wall time; per CPU-s = patterns per CPU second of the calling thread,")
        print("    1-thread runs only;")
        print("    d = method's bound - mf's bound per pattern, nats; conv = fraction converged)")
        print(header)
        rows = {}
        for t in (1, 2):
            _common.run_mf(case, t)                                   # warm-up
        probe = [_common.core_scaling()]
        for t, (out, wall, cpu, _) in _common.timed_threads(
                lambda t: _common.run_mf(case, t), repeats=repeats, budget=16.0).items():
            out.seconds, out.cpu_seconds = wall, cpu
            rows[("mf", t)] = out
        probe.append(_common.core_scaling())
        ref = rows[("mf", 1)]
        if not np.array_equal(rows[("mf", 2)].bound, ref.bound):
            print("  !! mf.infer gives different bounds on 1 and 2 threads")
        for t in (1, 2):
            print(_fmt_row(case, rows[("mf", t)], ref, n))
        rows[("numpy", 1)] = _common.timed(_common.run_numpy, case, repeats=repeats, budget=budget)
        print(_fmt_row(case, rows[("numpy", 1)], ref, n))
        if torch_ok:
            for t in torch_threads:
                torch_gaussian.infer(case.net, case.V[:8], n_threads=t)   # warm-up
                rows[("torch", t)] = _common.timed(_common.run_torch, case, t, repeats=repeats,
                                                   budget=budget)
                print(_fmt_row(case, rows[("torch", t)], ref, n))
                if rows[("torch", t)].extra.get("stop_reason", "").startswith("no progress"):
                    print("     (L-BFGS stopped: line search made no progress)")
        rate = {k: n / v.seconds for k, v in rows.items()}
        crate = {k: n / v.cpu_seconds for k, v in rows.items()}
        print("  ratios (patterns/s, wall time; in brackets the same from CPU time):")
        print(f"    mf / NumPy            (1 thread each): {rate[('mf', 1)] / rate[('numpy', 1)]:7.2f}x"
              f"  [{crate[('mf', 1)] / crate[('numpy', 1)]:.2f}x]")
        if ("torch", 1) in rate:
            print(f"    mf / PyTorch L-BFGS   (1 thread each): {rate[('mf', 1)] / rate[('torch', 1)]:7.2f}x"
                  f"  [{crate[('mf', 1)] / crate[('torch', 1)]:.2f}x]")
        if ("torch", 2) in rate:
            print(f"    mf / PyTorch L-BFGS   (2 threads each): {rate[('mf', 2)] / rate[('torch', 2)]:7.2f}x")
        print(f"    mf 2 threads / 1 thread:               {rate[('mf', 2)] / rate[('mf', 1)]:7.2f}x"
              f"  (the machine's own two-thread scaling, a C loop, before / after: "
              f"{probe[0]:.2f}x / {probe[1]:.2f}x)")
        if ("torch", 2) in rate and ("torch", 1) in rate:
            print(f"    PyTorch 2 threads / 1 thread:          {rate[('torch', 2)] / rate[('torch', 1)]:7.2f}x")
        results[name] = (rows, rate)
    return results


def print_targets(results):
    if "scale1" not in results or "normal01" not in results:
        return
    s1rows, s1 = results["scale1"]
    n1rows, n1 = results["normal01"]
    yes = lambda c: "met" if c else "NOT met"  # noqa: E731
    s1_rt = s1[("mf", 1)] / s1[("torch", 1)] if ("torch", 1) in s1 else float("nan")
    cpu = lambda rows, k: 1.0 / rows[k].cpu_seconds  # noqa: E731  (ratios only need 1/time)
    s1_rtc = (cpu(s1rows, ("mf", 1)) / cpu(s1rows, ("torch", 1))
              if ("torch", 1) in s1rows else float("nan"))
    n_s1 = s1rows[("mf", 1)].bound.shape[0]
    n_n1 = n1rows[("mf", 1)].bound.shape[0]
    conv = float(n1rows[("mf", 1)].converged.mean())
    s1_tt = s1[("mf", 2)] / s1[("mf", 1)]
    n1_tt = n1[("mf", 2)] / n1[("mf", 1)]
    print()
    print(TARGETS.format(
        s1_mf1=s1[("mf", 1)], ok1=yes(s1[("mf", 1)] >= 5000),
        s1_mf1c=n_s1 * cpu(s1rows, ("mf", 1)), n1_mf1c=n_n1 * cpu(n1rows, ("mf", 1)),
        s1_rt=s1_rt, s1_rtc=s1_rtc, ok2=yes(s1_rt >= 3) if np.isfinite(s1_rt) else "(no PyTorch)",
        n1_mf1=n1[("mf", 1)], ok3=yes(n1[("mf", 1)] >= 1000),
        n1_conv=conv, ok4=yes(conv == 1.0),
        s1_tt=s1_tt, n1_tt=n1_tt, ok5=yes(min(s1_tt, n1_tt) >= 1.8)))


def environment():
    import platform
    bits = [f"python {platform.python_version()}", f"numpy {np.__version__}",
            f"mfengine {mf.__version__}"]
    if torch_gaussian.available():
        bits.append(f"torch {torch_gaussian._torch.__version__}")
    cfg = mf.get_config() if hasattr(mf, "get_config") else {}
    if isinstance(cfg, dict):
        for key in ("openmp", "runtime_dispatch", "native"):
            if key in cfg:
                bits.append(f"{key}={cfg[key]}")
    load = os.getloadavg() if hasattr(os, "getloadavg") else ("?",)
    return (f"{', '.join(bits)}; {os.cpu_count()} CPUs; "
            f"load average {', '.join(f'{x:.2f}' for x in load)}")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=_common.N_PATTERNS, help="patterns per case")
    ap.add_argument("--repeats", type=int, default=5,
                    help="timed rounds of mf, one and two threads in turn (the best of each kept)")
    ap.add_argument("--budget", type=float, default=4.0,
                    help="seconds after which a peer is not repeated")
    ap.add_argument("--cases", default="scale1,normal01", help="comma-separated: scale1,normal01")
    ap.add_argument("--no-torch", action="store_true", help="leave out the PyTorch peer")
    ap.add_argument("--torch-threads", default="1",
                    help="thread counts for the PyTorch peer, e.g. 1,2 (default 1: on a busy "
                         "2-core machine its ~600 tiny parallel regions per N(0,1) run make the "
                         "2-thread run take minutes)")
    ap.add_argument("--scaling", action="store_true",
                    help="run the scaling study (bench/speed/scaling.py) instead of the comparison")
    args = ap.parse_args(argv)
    if args.scaling:
        import scaling
        return scaling.main([])
    t0 = time.perf_counter()
    fingerprint = _common.extension_fingerprint()
    print(environment())
    results = compare([c for c in args.cases.split(",") if c], args.n, args.repeats,
                      not args.no_torch, [int(t) for t in args.torch_threads.split(",") if t],
                      args.budget)
    print_targets(results)
    print(f"\nwall time {time.perf_counter() - t0:.0f} s; {environment().split('; ')[-1]}")
    if _common.extension_fingerprint() != fingerprint:
        print(_common.REBUILT_WARNING)
    return 0


if __name__ == "__main__":
    sys.exit(main())
