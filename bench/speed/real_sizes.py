"""Inference at real sizes: a 200-200-784 sigmoid belief net on binarised 28x28 images, against
its arithmetic floor and the PyTorch L-BFGS peer of the same bound, in the same run.

    python bench/speed/real_sizes.py                       # train a net (~5-10 min), then time
    python bench/speed/real_sizes.py --save NET.npz        # ... and keep the trained net
    python bench/speed/real_sizes.py --net NET.npz         # time a net trained before
    python bench/speed/real_sizes.py --n-train 500 --epochs 1 --n-test 50   # a quick look

Data: Fashion-MNIST from Debian's ``dataset-fashion-mnist`` package
(``mf.datasets.load_fashion_mnist``, pixels > 127 are 1); nothing is downloaded.

What is timed, on ``--n-test`` held-out images:

* ``infer`` (method "gaussian", tol 1e-6), one thread and two; patterns per second, the mean
  number of sweeps, and whether the two thread counts give the same bits.
* **the arithmetic floor**: a sweep of the Gaussian kernel needs, for every layer pair, the
  children's mean inputs and input variances (``mu @ W.T`` and ``(mu (1 - mu)) @ (W**2).T``)
  and the parents' gradient terms (two products of the same size back); done as four blocked
  matrix products over the same patterns (NumPy's BLAS, one thread), times the kernel's mean
  number of sweeps.  A second floor counts one ``exp`` per weight per sweep (every update of a
  unit evaluates each child's sigmoid at least once in the kernel's algorithm), timed as
  ``np.exp`` over an array of that many entries.  Neither floor includes anything else the
  kernel does (the 1-D searches, the xi fixed points, the bound), so both are optimistic.
* ``infer(method="sjj")``, the certified bound, on the first ``--n-sjj`` images, one thread.
* the PyTorch (CPU, float64) L-BFGS peer of the same bound (``bench/peers/torch_gaussian.py``)
  on the first ``--n-torch`` images, one thread, when torch is installed.

Every figure is computed in the run that prints it.
"""
import argparse
import os
import sys
import time

for _v in ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "OMP_NUM_THREADS"):
    os.environ.setdefault(_v, "1")   # NumPy's BLAS on one thread: the floor is a 1-thread floor

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import _paths  # noqa: E402,F401  (bench/ and its folders on sys.path)

import numpy as np  # noqa: E402

import mfengine as mf  # noqa: E402

import torch_gaussian  # noqa: E402

SIZES = [200, 200, 784]


def load_data(n_train, n_test):
    if not os.path.isdir(mf.datasets.FASHION_MNIST_DIR):
        sys.exit(f"Fashion-MNIST not found in {mf.datasets.FASHION_MNIST_DIR}: install "
                 "Debian's dataset-fashion-mnist package (apt-get install dataset-fashion-mnist)")
    X_train, X_test = mf.datasets.load_fashion_mnist()
    return X_train[:n_train], X_test[:n_test]


def train(X, epochs, seed):
    net = mf.SigmoidBeliefNet(SIZES, max_iter=epochs, batch_size=20, n_threads=2,
                              random_state=seed, progress=True)
    t0 = time.perf_counter()
    net.fit(X)
    dt = time.perf_counter() - t0
    print(f"trained {'-'.join(map(str, SIZES))} on {X.shape[0]} images x {epochs} epochs in "
          f"{dt:.0f} s ({X.shape[0] * epochs / dt:.1f} patterns/s, 2 threads, batch 20)")
    return net


def best_of(f, repeats, budget=60.0):
    """The smallest wall time of up to ``repeats`` calls (no new call once ``budget`` s have
    been spent) and the last call's output."""
    best, spent, out = np.inf, 0.0, None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = f()
        dt = time.perf_counter() - t0
        best, spent = min(best, dt), spent + dt
        if spent > budget:
            break
    return best, out


def gemm_floor(net, n, repeats):
    """Seconds of one sweep's four matrix products per layer pair over n patterns."""
    rng = np.random.default_rng(0)
    Ws = [np.ascontiguousarray(W) for W in net.weights]       # (n_child, n_parent)
    W2s = [W * W for W in Ws]
    mus = [rng.random((n, W.shape[1])) for W in Ws]
    gs = [rng.random((n, W.shape[0])) for W in Ws]

    def sweep():
        s = 0.0
        for W, W2, mu, g in zip(Ws, W2s, mus, gs):
            a = mu @ W.T                          # children's mean inputs
            b = (mu * (1.0 - mu)) @ W2.T          # children's input variances
            c = g @ W                             # parents' gradient, mean part
            d = g @ W2                            # parents' gradient, variance part
            s += a[0, 0] + b[0, 0] + c[0, 0] + d[0, 0]
        return s

    sweep()
    return best_of(sweep, repeats, budget=20.0)[0]


def exp_floor(n_weights, n, repeats):
    """Seconds of one exp per weight per pattern (one sweep's sigmoid evaluations), timed on a
    block that stays in the cache (the kernel's arguments are computed, not read from memory)
    and scaled to n * n_weights; the faster of NumPy's exp and PyTorch's (vectorised) where
    torch is installed.  Returns (seconds, ns per exp, whose exp)."""
    block, reps = 1 << 14, 200
    a = np.random.default_rng(1).normal(size=block)
    out = np.empty_like(a)
    candidates = [("NumPy", lambda: np.exp(a, out=out))]
    if torch_gaussian.available():
        torch = torch_gaussian._torch
        ta, tout = torch.from_numpy(a), torch.empty(block, dtype=torch.float64)
        candidates.append(("PyTorch", lambda: torch.exp(ta, out=tout)))
    best = None
    for name, f in candidates:
        def run():
            for _ in range(reps):
                f()
        run()
        ns = best_of(run, repeats, budget=20.0)[0] / (reps * block) * 1e9
        if best is None or ns < best[1]:
            best = (name, ns)
    return best[1] * 1e-9 * n * n_weights, best[1], best[0]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--net", help="a net saved by mfengine (skip training)")
    ap.add_argument("--save", help="save the trained net here")
    ap.add_argument("--n-train", type=int, default=3000, help="training images (default 3000)")
    ap.add_argument("--epochs", type=int, default=3, help="training epochs (default 3)")
    ap.add_argument("--n-test", type=int, default=200, help="held-out images timed (default 200)")
    ap.add_argument("--n-torch", type=int, default=20, help="images for the PyTorch peer")
    ap.add_argument("--n-sjj", type=int, default=20, help="images for method='sjj'")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)

    X_train, X_test = load_data(a.n_train, a.n_test)
    if a.net:
        net = mf.load(a.net)
        print(f"net: {a.net}")
    else:
        net = train(X_train, a.epochs, a.seed)
        if a.save:
            print(f"saved {net.save(a.save)}")
    n = X_test.shape[0]
    n_weights = sum(W.size for W in net.weights)
    print(f"\n{'-'.join(map(str, net.sizes))} net, {n_weights:,} weights; {n} held-out images; "
          f"tol 1e-6; mfengine {mf.__version__}")

    rows = {}
    for t in (1, 2):
        net.infer(X_test[:4], n_threads=t, progress=False)     # warm-up
        sec, r = best_of(lambda: net.infer(X_test, n_threads=t, tol=1e-6, progress=False),
                         a.repeats)
        rows[t] = (sec, r)
    r1 = rows[1][1]
    sweeps = float(np.mean(r1.n_iter))
    same = np.array_equal(rows[1][1].bound, rows[2][1].bound)
    rate1, rate2 = n / rows[1][0], n / rows[2][0]
    ns_w = rows[1][0] / (n * sweeps * n_weights) * 1e9
    print(f"infer, 1 thread : {rate1:9.1f} patterns/s  ({sweeps:.1f} sweeps on average, "
          f"{ns_w:.2f} ns per weight per sweep; mean bound {r1.bound.mean():.3f} nats, "
          f"{r1.converged.mean():.0%} converged)")
    print(f"infer, 2 threads: {rate2:9.1f} patterns/s  ({rate2 / rate1:.2f}x one thread; same "
          f"bits on 1 and 2 threads: {same})")

    if torch_gaussian.available():
        torch_gaussian._torch.set_num_threads(1)
    g = gemm_floor(net, n, a.repeats)
    e, ns_exp, who = exp_floor(n_weights, n, a.repeats)
    floor_g, floor_e = n / (g * sweeps), n / (e * sweeps)
    print(f"floor, 4 blocked matrix products per layer pair per sweep (BLAS, 1 thread): "
          f"{floor_g:9.1f} patterns/s  -> the kernel runs at {rate1 / floor_g:.1%} of it")
    print(f"floor, one exp per weight per sweep ({who}'s exp, {ns_exp:.2f} ns, 1 thread):  "
          f"{floor_e:9.1f} patterns/s  -> the kernel runs at {rate1 / floor_e:.1%} of it")
    both = 1.0 / (1.0 / floor_g + 1.0 / floor_e)
    print(f"both floors together: {both:.1f} patterns/s (a target of 1,000 patterns/s is "
          f"{1000.0 / both:.2f}x of it)")

    if a.n_sjj > 0:
        V = X_test[:a.n_sjj]
        net.infer(V[:2], method="sjj", n_threads=1, progress=False)      # warm-up
        sec, rs = best_of(lambda: net.infer(V, method="sjj", n_threads=1, tol=1e-6,
                                            progress=False), a.repeats)
        print(f"infer(method='sjj'), 1 thread: {a.n_sjj / sec:9.1f} patterns/s on {a.n_sjj} "
              f"images (the certified bound: mean {rs.bound.mean():.3f} nats, "
              f"{rs.converged.mean():.0%} converged; 10,000 images would take "
              f"{1e4 * sec / a.n_sjj / 60:.1f} min)")

    if torch_gaussian.available() and a.n_torch > 0:
        V = X_test[:a.n_torch]
        torch_gaussian.infer(net, V[:2], n_threads=1)               # warm-up
        t0 = time.perf_counter()
        tr = torch_gaussian.infer(net, V, tol=1e-6, n_threads=1)
        tsec = time.perf_counter() - t0
        d = tr.bound - r1.bound[:a.n_torch]
        print(f"PyTorch L-BFGS, 1 thread: {a.n_torch / tsec:9.2f} patterns/s on {a.n_torch} "
              f"images ({tr.stop_reason}); its bound - mfengine's: mean {d.mean():+.2e}, "
              f"max {d.max():+.2e} nats; mfengine / PyTorch: {rate1 / (a.n_torch / tsec):.1f}x")
    else:
        print(f"PyTorch peer skipped: {torch_gaussian.why_unavailable() or 'n_torch = 0'}")


if __name__ == "__main__":
    main()
