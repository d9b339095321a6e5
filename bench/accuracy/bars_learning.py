"""The bars problem of Bhattacharyya & Keerthi (section 6, Fig. 10): learn 1x8x16 sigmoid and
noisy-OR nets on 4x4 bar images with each mean-field objective, then score the learned nets by
the exact log-likelihood per pattern (enumerating the 9 hidden units).

    python bench/accuracy/bars_learning.py                            # the paper's setting: 10 restarts, 500 epochs
    python bench/accuracy/bars_learning.py --restarts 3 --epochs 100  # quicker

Data: 2000 images, all bars vertical or all horizontal with probability 1/2, each bar on with
probability 1/2 (``mf.datasets.make_bars``).  Every method starts each restart from the same
random net.  Prints a table (mean and standard deviation over restarts, and the best run) and
saves the scatter of Fig. 10 as a PNG.  Restarts run in parallel processes (--jobs).
"""
import argparse
import os
import time
from concurrent.futures import ProcessPoolExecutor

import numpy as np

import mfengine as mf

METHODS = ("sjj", "plefka11", "plefka12", "plefka22")
LABEL = {"plefka11": "G11", "plefka12": "G12", "plefka22": "G22", "sjj": "SJJ"}
SIZES = (1, 8, 16)


def initial_net(activation, seed, **params):
    rng = np.random.default_rng(seed)
    n = sum(SIZES)
    off = np.cumsum((0,) + SIZES)
    W = np.zeros((n, n))
    for l in range(len(SIZES) - 1):
        shape = (SIZES[l + 1], SIZES[l])
        W[off[l + 1]:off[l + 2], off[l]:off[l + 1]] = (
            rng.uniform(0.05, 0.5, shape) if activation == "noisy_or" else rng.normal(0.0, 0.5, shape))
    h = np.full(n, 0.1) if activation == "noisy_or" else np.zeros(n)
    return mf.BeliefNet(W, h, np.arange(off[-2], n), activation, **params)


def one_run(job):
    """Train one net.  A run breaks down when its objective leaves the range of a
    log-probability (above 0, or not finite) or when training leaves the net with a lower
    exact likelihood than it started with."""
    import warnings

    activation, method, seed, X, epochs, lr, batch_size = job
    net = initial_net(activation, seed, method=method, max_iter=epochs, learning_rate=lr,
                      batch_size=batch_size, n_threads=1, random_state=seed, progress=False)
    start_ll = float(net.exact_log_likelihood(X).mean())
    t = time.perf_counter()
    with warnings.catch_warnings():
        # counted below instead: objectives above 0 (RuntimeWarning) and unconverged solves
        warnings.simplefilter("ignore", RuntimeWarning)
        warnings.simplefilter("ignore", mf.ConvergenceWarning)
        try:
            net.fit(X)
            ll = float(net.exact_log_likelihood(X).mean())
            final = float(net.history_[-1])
        except (FloatingPointError, ValueError):
            ll = final = float("nan")
    elapsed = time.perf_counter() - t
    broke = not (np.isfinite(ll) and final <= 0.0) or ll < start_ll
    return activation, method, seed, ll, final, elapsed, broke


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--restarts", type=int, default=10)
    ap.add_argument("--epochs", type=int, default=500)
    ap.add_argument("--patterns", type=int, default=2000)
    ap.add_argument("--learning-rate", type=float, default=0.2)
    ap.add_argument("--batch-size", type=int, default=50)
    ap.add_argument("--methods", default=",".join(METHODS))
    ap.add_argument("--activations", default="sigmoid,noisy_or")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--out", default=os.path.join("bench", "results", "bars"))
    args = ap.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    X = mf.datasets.make_bars(args.patterns, random_state=1234)
    methods = args.methods.split(",")
    acts = args.activations.split(",")
    jobs = [(a, m, r, X, args.epochs, args.learning_rate, args.batch_size)
            for a in acts for r in range(args.restarts) for m in methods]
    print(f"bars: {args.patterns} patterns, 1x8x16 nets, {args.epochs} epochs, learning rate "
          f"{args.learning_rate}, batch {args.batch_size}, {args.restarts} restarts, {args.jobs} processes")
    results = []
    from mfengine._progress import progress_bar

    t0 = time.perf_counter()
    with ProcessPoolExecutor(max_workers=args.jobs) as pool, \
            progress_bar(total=len(jobs), desc="bars", unit="run") as bar:
        for res in pool.map(one_run, jobs):
            results.append(res)
            bar.update(1)
    wall = time.perf_counter() - t0
    # the data's own entropy bounds every model: ln P(x) <= ln of the empirical frequency
    _, counts = np.unique(X, axis=0, return_counts=True)
    best = float(np.sum(counts * np.log(counts / X.shape[0])) / X.shape[0])
    print(f"\nexact log-likelihood per pattern after training (nats); the empirical "
          f"distribution scores {best:.3f}\n")
    print("A run breaks down when its objective leaves the range of a log-probability (above 0, or "
          "not finite)\nor training leaves the net worse than it started; the statistics are over "
          "the other runs.\n")
    print("| activation | method | broke down | mean | sd | best | worst | final objective (mean) | s per run |")
    print("|---|---|---|---|---|---|---|---|---|")
    for a in acts:
        for m in methods:
            ll = np.array([r[3] for r in results if r[0] == a and r[1] == m])
            ob = np.array([r[4] for r in results if r[0] == a and r[1] == m])
            tt = np.array([r[5] for r in results if r[0] == a and r[1] == m])
            ok = ~np.array([r[6] for r in results if r[0] == a and r[1] == m], dtype=bool)
            stats = (f"{ll[ok].mean():.3f} | {ll[ok].std():.3f} | {ll[ok].max():.3f} | {ll[ok].min():.3f} | "
                     f"{ob[ok].mean():.3f}") if ok.any() else "- | - | - | - | -"
            print(f"| {a} | {LABEL[m]} | {int((~ok).sum())}/{ll.size} | {stats} | {tt.mean():.1f} |")
    print(f"\nwall time {wall:.0f} s")
    csv = os.path.join(args.out, "bars_runs.csv")
    with open(csv, "w") as fh:
        fh.write("activation,method,seed,exact_ll,final_objective,seconds,broke_down\n")
        for r in results:
            fh.write(",".join(str(x) for x in r) + "\n")
    print(f"per-run results: {csv}")
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    fig, axes = plt.subplots(1, len(acts), figsize=(4.5 * len(acts), 3.4), squeeze=False)
    for ax, a in zip(axes[0], acts):
        labels = []
        for k, m in enumerate(methods):
            runs = [r for r in results if r[0] == a and r[1] == m]
            ll = [r[3] for r in runs if not r[6]]
            ax.plot(np.full(len(ll), k) + np.linspace(-0.15, 0.15, len(ll)), ll, "o", ms=4)
            n_broke = sum(r[6] for r in runs)
            labels.append(LABEL[m] + (f"\n({n_broke} broke down)" if n_broke else ""))
        ax.axhline(best, color="0.5", ls="--", lw=0.8)
        ax.set_xticks(range(len(methods)), labels)
        ax.set_ylabel("exact log-likelihood per pattern")
        ax.set_title(f"{a} 1x8x16 on bars")
    fig.tight_layout()
    path = os.path.join(args.out, "bars_fig10.png")
    fig.savefig(path, dpi=110)
    print(f"figure: {path}")


if __name__ == "__main__":
    main()
