"""Decoding accuracy of ContextHMM when the data are scaled, with the paper's unit covariance
held fixed and with learnt variances (``covariance_type="diag"`` / ``"spherical"``).

    python bench/accuracy/hmm_scaling.py              # about a minute on 2 cores
    python bench/accuracy/hmm_scaling.py --scales 1 5 0.2

Data: 3 states, 2 features, lag 2, both contexts, unit noise, 2,000 steps drawn from a fixed
model.  Each model is fitted from the same seed on ``scale * X`` and decodes ``scale * X``;
accuracy is the share of states decoded right under the best relabelling.
"""
import argparse
import itertools
import time
import warnings

import numpy as np

import mfengine as mf


def data(T, seed):
    rng = np.random.default_rng(seed)
    g = mf.ContextHMM(3, 2, lag=2, context="both")
    g.means_ = np.array([[0.0, 0.0], [3.0, 0.0], [0.0, 3.0]])
    g.right_means_ = 0.4 * rng.standard_normal((3, 2))
    g.left_means_ = 0.4 * rng.standard_normal((3, 2))
    g.transmat_ = np.full((3, 3), 0.05) + 0.85 * np.eye(3)
    return g.sample(T, random_state=seed + 1)


def accuracy(path, states):
    return max(float(np.mean(np.array(p)[path] == states))
               for p in itertools.permutations(range(3)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scales", type=float, nargs="+", default=[1.0, 5.0])
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    X, states = data(args.steps, args.seed)
    print(f"{'covariance':<22} " + " ".join(f"{'x' + format(s, 'g'):>8}" for s in args.scales)
          + "   covars_[0] at the first scale")
    for name, kw in (("unit (held fixed)", dict(params="stmrl", init_params="stmrl")),
                     ("diag (learnt)", dict(covariance_type="diag")),
                     ("spherical (learnt)", dict(covariance_type="spherical"))):
        accs, first = [], None
        t0 = time.perf_counter()
        for scale in args.scales:
            h = mf.ContextHMM(3, 2, lag=2, context="both", max_iter=30, random_state=0,
                              progress=False, **kw)
            if "params" in kw:
                h.covars_ = np.ones((3, 2))
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", mf.ConvergenceWarning)
                h.fit(scale * X)
            accs.append(accuracy(h.predict(scale * X), states))
            first = h.covars_[0] if first is None else first
        print(f"{name:<22} " + " ".join(f"{a:>8.4f}" for a in accs)
              + f"   {np.round(first, 4)}   ({time.perf_counter() - t0:.1f} s)")


if __name__ == "__main__":
    main()
