"""Peak memory of scoring data larger than memory: on-disk arrays read a chunk at a time.

Writes binary patterns of 784 pixels as uint8 to one file (10^6 patterns: 784 MB; the 10^5
run reads its first rows), then, in a fresh child process per measurement, scores them with
``model.score_samples(X)`` where ``X`` is

* ``memmap``: a NumPy memmap of the file (mfengine reads it chunk by chunk and hands the
  pages back to the OS after each chunk: mfengine._outofcore.map_chunked);
* ``zarr``: a zarr array copied from it (if zarr is installed; 10^5 patterns by default);
* ``memory``: the whole array loaded as float64 first (the usual way; 10^5 patterns only by
  default, since 10^6 would need 6.3 GB).

Each child reports its resident size before scoring, the peak resident size during scoring
(Linux: VmHWM, reset through /proc/self/clear_refs just before; elsewhere ru_maxrss), the
peak of memory traced by tracemalloc during scoring (NumPy's buffers included), and the time.

Models: ``bm`` a BernoulliMixture (10 components; fast, so 10^6 patterns take seconds) and
``sbn`` a SigmoidBeliefNet [4, 784] (mean-field solves: about 0.25 ms a pattern, so by
default only 10^5 patterns, memmap and memory; ``--all`` runs every combination).

Usage::

    nice -n 10 python bench/speed/memory_outofcore.py      # about 1.5 minutes on 2 busy cores
    python bench/speed/memory_outofcore.py --sizes 100000 --models bm --storage memmap memory
"""
import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
import tracemalloc

import numpy as np

N_PIXELS = 784


def _status(field):
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) / 1024.0     # kB -> MB
    except OSError:
        pass
    return None


def _reset_peak():
    """Reset VmHWM to the current RSS (Linux >= 4.0); False where it cannot."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def child(model_path, data_path, n, storage):
    import mfengine as mf

    model = mf.load(model_path)
    if storage == "zarr":
        import zarr

        X = zarr.open_array(data_path, mode="r")
        assert X.shape[0] >= n
        if X.shape[0] != n:
            raise SystemExit("the zarr store must hold exactly n patterns")
    else:
        X = np.memmap(data_path, dtype=np.uint8, mode="r", shape=(n, N_PIXELS))
    rss_before = _status("VmRSS")
    can_reset = _reset_peak()
    maxrss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    tracemalloc.start()
    t = time.perf_counter()
    if storage == "memory":
        X = np.asarray(X, dtype=np.float64)
    bound = model.score_samples(X)
    seconds = time.perf_counter() - t
    traced_peak = tracemalloc.get_traced_memory()[1] / 2**20
    tracemalloc.stop()
    assert bound.shape == (n,) and np.all(np.isfinite(bound))
    peak = _status("VmHWM") if can_reset else resource.getrusage(
        resource.RUSAGE_SELF).ru_maxrss / 1024.0
    print(json.dumps(dict(rss_before=rss_before, peak=peak, traced_peak=traced_peak,
                          seconds=seconds, peak_is_reset=can_reset,
                          maxrss_before=maxrss_before, mean_bound=float(bound.mean()))))


def write_data(path, n, net, chunk=100_000):
    """n patterns: one sample of ``chunk`` patterns from ``net``, its rows shuffled anew for
    every further chunk (sampling 10^6 patterns would take a minute and change nothing)."""
    disk = np.memmap(path, dtype=np.uint8, mode="w+", shape=(n, N_PIXELS))
    base = net.sample(min(n, chunk), random_state=0).astype(np.uint8)
    rng = np.random.default_rng(0)
    for a in range(0, n, chunk):
        b = min(n, a + chunk)
        disk[a:b] = base[rng.permutation(base.shape[0])[:b - a]]
    disk.flush()
    del disk


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[100_000, 1_000_000])
    ap.add_argument("--models", nargs="+", default=["bm", "sbn"], choices=["bm", "sbn"])
    ap.add_argument("--storage", nargs="+", default=["memmap", "zarr", "memory"],
                    choices=["memmap", "zarr", "memory"])
    ap.add_argument("--all", action="store_true",
                    help="every model x size x storage (sbn at 10^6: minutes; memory at 10^6: "
                         "6.3 GB)")
    ap.add_argument("--dir", default=tempfile.gettempdir(), help="where the data go")
    ap.add_argument("--child", nargs=4, metavar=("MODEL", "DATA", "N", "STORAGE"),
                    help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        model_path, data_path, n, storage = args.child
        return child(model_path, data_path, int(n), storage)

    import warnings

    import mfengine as mf

    warnings.simplefilter("ignore", mf.ConvergenceWarning)
    storages = list(args.storage)
    if "zarr" in storages:
        try:
            import zarr
        except ImportError:
            print("zarr is not installed: no zarr rows")
            storages.remove("zarr")
    n_max = max(args.sizes)
    work = tempfile.mkdtemp(prefix="mfengine_ooc_", dir=args.dir)
    data = os.path.join(work, "X.u8")
    net = mf.SigmoidBeliefNet([4, N_PIXELS], random_state=0, progress=False)
    net.biases[-1][:] = -1.0          # sparse images: about 30 % of pixels on
    t = time.perf_counter()
    write_data(data, n_max, net)
    print(f"wrote {n_max} x {N_PIXELS} uint8 patterns ({os.path.getsize(data) / 1e6:.0f} MB) "
          f"in {time.perf_counter() - t:.1f} s to {data}")
    sample = np.asarray(np.memmap(data, dtype=np.uint8, mode="r", shape=(5000, N_PIXELS)),
                        dtype=np.float64)
    models = {
        "bm": mf.BernoulliMixture(10, max_iter=10, tol=None, random_state=0).fit(sample).save(
            os.path.join(work, "bm")),
        "sbn": net.save(os.path.join(work, "sbn")),
    }
    env = dict(os.environ, MFENGINE_PROGRESS_DELAY="100000")
    print(f"load: {os.getloadavg()[0]:.2f} (1-min average)")
    print(f"{'model':<6}{'storage':<9}{'patterns':>10}{'RSS before':>12}{'peak RSS':>10}"
          f"{'peak-before':>13}{'traced peak':>13}{'seconds':>9}")
    try:
        for model in args.models:
            for n in sorted(args.sizes):
                for storage in storages:
                    if not args.all and ((model == "sbn" and (n > 100_000 or storage == "zarr"))
                                         or (storage in ("memory", "zarr") and n > 100_000)):
                        continue
                    path = data
                    if storage == "zarr":
                        path = os.path.join(work, f"X_{n}.zarr")
                        if not os.path.exists(path):
                            src = np.memmap(data, dtype=np.uint8, mode="r", shape=(n, N_PIXELS))
                            z = zarr.open_array(path, mode="w", shape=(n, N_PIXELS),
                                                chunks=(10_000, N_PIXELS), dtype="u1")
                            for a in range(0, n, 100_000):
                                z[a:a + 100_000] = src[a:a + 100_000]
                    out = subprocess.run([sys.executable, os.path.abspath(__file__), "--child",
                                          models[model], path, str(n), storage],
                                         capture_output=True, text=True, env=env)
                    if out.returncode:
                        print(f"{model:<6}{storage:<9}{n:>10}  failed: "
                              f"{out.stderr.strip().splitlines()[-1:]}")
                        continue
                    r = json.loads(out.stdout.strip().splitlines()[-1])
                    print(f"{model:<6}{storage:<9}{n:>10}{r['rss_before']:>10.0f}MB"
                          f"{r['peak']:>8.0f}MB{r['peak'] - r['rss_before']:>11.0f}MB"
                          f"{r['traced_peak']:>11.0f}MB{r['seconds']:>9.1f}", flush=True)
    finally:
        import shutil

        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
