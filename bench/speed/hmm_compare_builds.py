"""ContextHMM structured bounds of this build against another build of mfengine, instance by instance.

Scores the 162 random instances of ``bench/studies/hmm_starts.py`` and the issue-11 sequence
of ``bench/speed/hmm_speed.py`` with ``method="structured"`` under this build and under the
build found at ``--other`` (a source tree built in place, for example a ``git worktree`` of an
older commit after ``python setup.py build_ext --inplace``), each in its own process, and
prints, by context scale, how the bounds differ (this build minus the other) and the CPU time
each took.

    git worktree add /tmp/old 18ec21f && (cd /tmp/old && python setup.py -q build_ext --inplace)
    python bench/speed/hmm_compare_builds.py --other /tmp/old
    python bench/speed/hmm_compare_builds.py --other /tmp/old --starts own-means --infer-tol 1e-8

``--starts`` and ``--infer-tol`` set this build's solver (the other build runs its defaults).
The instances are generated here, once, and handed to both processes, so that both score the
same numbers whatever either build's sampler does.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
BENCH = os.path.dirname(HERE)
REPO = os.path.dirname(BENCH)
ATTRS = ("means_", "right_means_", "left_means_", "transmat_", "startprob_")
CONTEXTS = ("both", "right", "left")

# Run in a child process with the build under test first on the path.  It reads the instances
# and writes (bound, CPU seconds) per instance; it sets the parameters as attributes, which
# every build of ContextHMM accepts, and passes only the keyword arguments it was given.
SCORER = r"""
import inspect, json, sys, time, warnings
import numpy as np
import mfengine as mf
warnings.simplefilter("ignore")
d = np.load(sys.argv[1])
kw = json.loads(sys.argv[3])
if "progress" in inspect.signature(mf.ContextHMM).parameters:
    kw["progress"] = False
out = []
for k in json.loads(sys.argv[4]):
    n, lag, c, T = (int(v) for v in d["shape" + k])
    h = mf.ContextHMM(n, 2, lag=lag, context=%r[c], n_threads=1, **kw)
    for a in %r:
        setattr(h, a, d[a + k].copy())
    t = time.process_time()
    b = h.score(d["X" + k], method="structured")
    out.append((float(b), time.process_time() - t))
np.save(sys.argv[2], np.array(out))
print(mf.__file__)
""" % (CONTEXTS, ATTRS)


def instances():
    """The issue-11 sequence ("B") and the 162 of bench/studies/hmm_starts.py, with their scales."""
    sys.path.insert(0, BENCH)
    import _paths  # noqa: F401  (studies/ on sys.path, for hmm_starts)
    import hmm_speed
    import hmm_starts
    data, keys, scales = {}, [], []

    def put(k, h, X, shape):
        for a in ATTRS:
            data[a + k] = getattr(h, a)
        data["X" + k] = X
        data["shape" + k] = np.array(shape)
        keys.append(k)

    h = hmm_speed.make_model()
    X, _ = h.sample(1000, random_state=1)
    put("B", h, X, (10, 5, 0, 1000))
    scales.append(0.3)
    for seed, (n, lag, context, T, cs) in enumerate(hmm_starts.instance_grid()):
        h = hmm_starts.make_model(n, lag, context, cs, seed)
        X, _ = h.sample(T, random_state=seed + 100)
        put(str(seed), h, X, (n, lag, CONTEXTS.index(context), T))
        scales.append(cs)
    return data, keys, np.array(scales)


def score(tree, npz, keys, kw, tmp, tag):
    out = os.path.join(tmp, tag + ".npy")
    env = dict(os.environ, PYTHONPATH=tree, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    r = subprocess.run([sys.executable, "-c", SCORER, npz, out, json.dumps(kw), json.dumps(keys)],
                       env=env, capture_output=True, text=True, cwd=tmp)
    if r.returncode:
        sys.exit(f"scoring under {tree} failed:\n{r.stderr}")
    print(f"  {tag}: {r.stdout.strip()}")
    return np.load(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--other", required=True, help="source tree of the other build, built in place")
    ap.add_argument("--starts", default=None, help="this build's starts= (default: its default)")
    ap.add_argument("--infer-tol", type=float, default=None, help="this build's infer_tol")
    a = ap.parse_args()
    kw = {}
    if a.starts is not None:
        kw["starts"] = a.starts.split(",") if "," in a.starts else a.starts
    if a.infer_tol is not None:
        kw["infer_tol"] = a.infer_tol
    data, keys, scales = instances()
    with tempfile.TemporaryDirectory() as tmp:
        npz = os.path.join(tmp, "instances.npz")
        np.savez(npz, **data)
        print("builds:")
        this = score(REPO, npz, keys, kw, tmp, "this")
        other = score(os.path.abspath(a.other), npz, keys, {}, tmp, "other")
    d = this[:, 0] - other[:, 0]
    print(f"\nthis build {kw or '(defaults)'} minus the other (defaults), structured bound, nats")
    print(f"issue-11 sequence: {this[0, 0]:.6f} - {other[0, 0]:.6f} = {d[0]:+.2e}; "
          f"CPU {this[0, 1] * 1e3:.1f} ms vs {other[0, 1] * 1e3:.1f} ms")
    print(f"{'context scale':>14} {'mean':>9} {'min':>10} {'max':>9} {'lower >1e-3':>12} "
          f"{'lower >0.1':>11} {'higher >0.1':>12} {'CPU s this/other':>17}")
    for lab, m in [(f"{c:g}", scales[1:] == c) for c in (0.3, 1.0, 3.0)] + [("all", scales[1:] > 0)]:
        dd = d[1:][m]
        print(f"{lab:>14} {dd.mean():+9.3f} {dd.min():+10.3f} {dd.max():+9.3f} "
              f"{(dd < -1e-3).sum():12d} {(dd < -0.1).sum():11d} {(dd > 0.1).sum():12d} "
              f"{this[1:, 1][m].sum():8.2f}/{other[1:, 1][m].sum():.2f}")


if __name__ == "__main__":
    main()
