"""ContextHMM structured solver: its bound in three coordinate systems of the same model.

The model's residuals x_t - m_t do not depend on where the origin of each mean table lies, but
the solver's first-order starts (the chain with the context couplings left out) do, so the
ascent can end on another local maximum.  This scores the random instances of
``bench/studies/hmm_starts.py`` (162 per draw) with the default solver (four screened starts) in:

* ``means_``: data and means less the mean of the rows of ``means_`` (the build before
  "The origin" in docs/derivations/context_hmm.rst);
* ``raw``: the coordinates the instances were drawn in;
* ``tables``: each table less the mean of its rows, each output less the sum of those means
  over the tables its mean has (``ContextHMM._shifted``, what ``score`` runs),

and prints, per context scale, each system's mean bound minus the best of the three, and how
often it is more than 0.1 nats below the best.

    python bench/studies/hmm_origin.py                  # the 162 of bench/studies/hmm_starts.py
    python bench/studies/hmm_origin.py --seed-offset 1000   # another draw of the same grid
"""
import argparse
import os
import sys
import time
import warnings

import numpy as np

from mfengine.hmm import _chain

HERE = os.path.dirname(os.path.abspath(__file__))
SYSTEMS = ("means_", "raw", "tables")


def coordinates(h, X):
    """(P, X) of one sequence in each system of SYSTEMS."""
    sp, A, U, V, W = h._params()
    c = U.mean(axis=0)
    P, Xs = h._shifted(X)
    return {"means_": ((sp, A, U - c, V, W), X - c), "raw": ((sp, A, U, V, W), X),
            "tables": (P, Xs)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed-offset", type=int, default=0,
                    help="added to every instance's seed (0: bench/studies/hmm_starts.py's draw)")
    a = ap.parse_args()
    sys.path.insert(0, HERE)
    from hmm_starts import instance_grid, make_model
    warnings.simplefilter("ignore")
    grid = instance_grid()
    bounds, scales = np.zeros((len(grid), len(SYSTEMS))), np.zeros(len(grid))
    cpu = np.zeros(len(SYSTEMS))
    for i, (n, lag, context, T, cs) in enumerate(grid):
        h = make_model(n, lag, context, cs, i + a.seed_offset)
        X, _ = h.sample(T, random_state=i + a.seed_offset + 100)
        offsets = np.array([0, T], dtype=np.intp)
        for j, (P, Xs) in enumerate(coordinates(h, X).values()):
            P = tuple(np.ascontiguousarray(p) for p in P)
            t = time.process_time()
            r = _chain.run("structured", *P, min(lag, T), h._right, h._left,
                           np.ascontiguousarray(Xs), offsets, int(h.infer_max_iter),
                           float(h.infer_tol), False, 1)
            cpu[j] += time.process_time() - t
            bounds[i, j] = r["bound"][0]
        scales[i] = cs
    best = bounds.max(axis=1)
    print(f"{len(grid)} instances of bench/studies/hmm_starts.py's grid, seeds + {a.seed_offset}; "
          "structured bound minus the best of the three systems (nats), mean and how many "
          "instances lie more than 0.1 below it")
    print(f"{'context scale':>14}" + "".join(f"{s:>22}" for s in SYSTEMS))
    for lab, m in [(f"{c:g}", scales == c) for c in (0.3, 1.0, 3.0)] + [("all", scales > 0)]:
        d = bounds[m] - best[m, None]
        print(f"{lab:>14}" + "".join(f"{d[:, j].mean():>14.3f} ({(d[:, j] < -0.1).sum():3d})"
                                     for j in range(len(SYSTEMS))))
    print(f"{'CPU s':>14}" + "".join(f"{c:>22.2f}" for c in cpu))
    t = bounds[:, 2] - bounds[:, 0]
    print(f"tables minus means_: mean {t.mean():+.3f}, higher by > 0.1 on {(t > 0.1).sum()}, "
          f"lower by > 0.1 on {(t < -0.1).sum()}, largest loss {t.min():.3f}")


if __name__ == "__main__":
    main()
