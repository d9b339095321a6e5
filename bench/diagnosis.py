"""Mean-field inference on a diagnosis-style noisy-OR net (the shape of QMR-DT), one thread.

    python bench/diagnosis.py                    # 600 diseases, 4000 findings, 20 cases
    python bench/diagnosis.py --cases 100 --seed 1

The net comes from ``mf.datasets.make_diagnosis_net`` (sparse weights, each finding with 10
random parent diseases, leak biases 0.005-0.01).  The cases are findings sampled from the net.
For each method the script prints cases per second, the fraction of cases whose solve
converged, the mean objective (a lower bound on ln P(findings) for "sjj"; -G for the Plefka
schemes) and the mean iterations, plus the time and traced peak memory of building the net.
"""
import argparse
import time
import tracemalloc
import warnings

import mfengine as mf


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--diseases", type=int, default=600)
    ap.add_argument("--findings", type=int, default=4000)
    ap.add_argument("--parents", type=int, default=10)
    ap.add_argument("--cases", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--methods", default="sjj,plefka11,plefka12")
    args = ap.parse_args(argv)

    tracemalloc.start()
    t0 = time.perf_counter()
    net = mf.datasets.make_diagnosis_net(args.diseases, args.findings, args.parents,
                                         random_state=args.seed)
    net.set_params(progress=False, n_threads=1)
    net.sample(0)   # checks the parameters and builds the structure
    built = time.perf_counter() - t0
    peak = tracemalloc.get_traced_memory()[1] / 1e6
    tracemalloc.stop()
    X = net.sample(args.cases, random_state=args.seed + 1)
    print(f"net: {args.diseases} diseases, {args.findings} findings, {net.n_weights} edges; "
          f"built in {built:.2f} s, traced peak {peak:.0f} MB; {args.cases} cases, "
          f"{X.sum(axis=1).mean():.0f} positive findings on average")
    print(f"{'method':<10} {'cases/s':>9} {'converged':>10} {'mean objective':>15} {'iterations':>11}")
    for method in args.methods.split(","):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            t0 = time.perf_counter()
            try:
                r = net.infer(X, method=method)
            except (ValueError, OverflowError) as exc:
                print(f"{method:<10} failed: {exc}")
                continue
            dt = time.perf_counter() - t0
        print(f"{method:<10} {args.cases / dt:9.1f} {r.converged.mean():10.2f} "
              f"{r.bound.mean():15.2f} {r.n_iter.mean():11.1f}")


if __name__ == "__main__":
    main()
