"""Inpainting digits with a sigmoid belief net: fill in the bottom half of held-out images.

A ``SigmoidBeliefNet`` (Saul & Jordan's mean-field learning) is trained on scikit-learn's 8x8
digits thresholded to {0, 1} (``mf.datasets.load_binary_digits``: 1257 training and 540 test
images).  For each test image the bottom four rows (32 pixels) are marked missing, and
``net.impute`` fills them with the posterior predictive probability of a 1: by mean field
(the default), or estimated by importance sampling (``method="importance"``).  The
per-pixel log-loss (nats, lower is better) and error rate of those probabilities are compared
with two baselines trained on the same images:

* the pixel marginals (each pixel's frequency of 1 in the training set, ignoring the top half);
* a ``BernoulliMixture`` (EM), whose conditional P(x_j = 1 | top half) is exact:
  sum_k P(k | top half) p_kj.

Per-pixel probabilities are judged pixel by pixel; the joint log-loss of the whole bottom half,
-ln P(bottom | top) / 32, needs ln P(x) and ln P(top) of the net, which mean field only
bounds.  ``net.log_likelihood(X, missing=...)`` (importance sampling, with its standard
error) estimates both, and the mixture's are exact, so the example reports that too.  With
``--loglik`` it also prints the mean-field bound beside the importance estimate (and the
exact value when the net is small enough to enumerate) for the digit nets: the gap that the
estimate reveals.

Run::

    python examples/inpainting.py --out inpainting_output          # about a minute
    python examples/inpainting.py --out inpainting_output --loglik # and the likelihood tables
                                                                   # (a few more minutes)

The figure (``inpainting.png`` in ``--out``) shows test images, their masked top halves, and
the bottom halves filled in by the net and by the mixture (grey levels are probabilities).
"""
import argparse
import os
import time

import numpy as np
from scipy.special import logsumexp

import mfengine as mf
from mfengine.mixture import BernoulliMixture
from mfengine.datasets import load_binary_digits

EPS = 1e-6  # probabilities are clipped to [EPS, 1 - EPS] before taking logs


def log_loss(X, P, mask):
    """Mean per-pixel log-loss (nats) of probabilities P for the binary pixels X[mask]."""
    p = np.clip(P[mask], EPS, 1.0 - EPS)
    x = X[mask]
    return float(-np.mean(x * np.log(p) + (1.0 - x) * np.log1p(-p)))


def error_rate(X, P, mask):
    return float(np.mean((P[mask] > 0.5) != (X[mask] > 0.5)))


def mixture_conditional(mix, X, observed):
    """P(x_j = 1 | observed pixels) under a BernoulliMixture, for every pixel."""
    lp, lq = np.log(mix.means_), np.log1p(-mix.means_)
    obs = observed.astype(np.float64)
    joint = (X * obs) @ lp.T + ((1.0 - X) * obs) @ lq.T + np.log(mix.weights_)
    resp = np.exp(joint - logsumexp(joint, axis=1, keepdims=True))
    return resp @ mix.means_


def mixture_log_prob(mix, X, observed=None):
    """Exact ln P(x_observed) under a BernoulliMixture."""
    lp, lq = np.log(mix.means_), np.log1p(-mix.means_)
    obs = np.ones_like(X) if observed is None else observed.astype(np.float64)
    joint = (X * obs) @ lp.T + ((1.0 - X) * obs) @ lq.T + np.log(mix.weights_)
    return logsumexp(joint, axis=1)


def figure(path, X, miss, fills, n=12):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [("test image", X), ("top half given", np.where(miss, 0.5, X))]
    rows += [(name, np.where(miss, P, X)) for name, P in fills]
    fig, axes = plt.subplots(len(rows), n, figsize=(n * 0.8, len(rows) * 0.9))
    for r, (name, imgs) in enumerate(rows):
        for c in range(n):
            ax = axes[r, c]
            ax.imshow(imgs[c].reshape(8, 8), cmap="gray_r", vmin=0, vmax=1)
            ax.set_xticks([])
            ax.set_yticks([])
            if c == 0:
                ax.set_ylabel(name, rotation=0, ha="right", va="center", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def loglik_table(nets, X, n_samples, seed):
    """Bound, importance estimate +- SE and exact ln P (where it can be enumerated) per net."""
    print(f"\nHeld-out ln P(x) per image, nats ({X.shape[0]} test images, "
          f"{n_samples} importance samples per image)")
    header = (f"{'net':<28}{'mean-field bound':>18}{'importance (± SE)':>22}{'exact':>10}"
              f"{'gap':>8}{'ESS':>8}{'time':>8}")
    print(header)
    print("-" * len(header))
    for name, net in nets:
        t0 = time.perf_counter()
        est = net.log_likelihood(X, n_samples=n_samples, random_state=seed)
        t = time.perf_counter() - t0
        se = float(np.sqrt(np.sum(est.stderr ** 2)) / X.shape[0])
        exact = "-"
        if net.n_hidden <= 20:
            exact = f"{float(np.mean(net.exact_log_likelihood(X))):.3f}"
        gap = float(np.mean(est.estimate) - np.mean(est.bound))
        print(f"{name:<28}{np.mean(est.bound):>18.3f}{np.mean(est.estimate):>14.3f} ± {se:<6.3f}"
              f"{exact:>10}{gap:>8.3f}{np.median(est.ess):>8.0f}{t:>7.1f}s")
    print("gap: importance estimate minus bound (how loose the bound is); ESS: median "
          "effective sample size")


def demo_nets_table(X_train, y_train, X_test, y_test, n_samples, seed, ais_chains, ais_steps):
    """The per-class nets of ``mfengine demo`` (GenerativeClassifier's defaults, and the
    --quick demo's 4-12-64 nets, small enough to enumerate): each test image scored under its
    own class's net."""
    from mfengine.classify import GenerativeClassifier

    print(f"\nThe demo's per-class digit nets, each test image under its class's net "
          f"({X_test.shape[0]} images; importance: {n_samples} samples; AIS: {ais_chains} "
          f"chains x {ais_steps} temperatures)")
    header = (f"{'nets':<22}{'bound':>9}{'importance ± SE':>20}{'AIS ± SE':>20}{'exact':>10}"
              f"{'gap':>8}")
    print(header)
    print("-" * len(header))
    for label, kw in (("4-12-64 (--quick)", dict(hidden=(4, 12), max_iter=4)),
                      ("8-24-64 (default)", dict())):
        clf = GenerativeClassifier(random_state=seed, progress=False, **kw).fit(X_train, y_train)
        rows = {k: [] for k in ("bound", "imp", "imp_se", "ais", "ais_se", "exact")}
        for c, net in zip(clf.classes_, clf.nets_):
            Xc = X_test[y_test == c]
            imp = net.log_likelihood(Xc, n_samples=n_samples, random_state=seed)
            ais = net.log_likelihood(Xc, n_samples=ais_chains, method="ais", n_steps=ais_steps,
                                     random_state=seed)
            rows["bound"].append(imp.bound)
            rows["imp"].append(imp.estimate)
            rows["imp_se"].append(imp.stderr)
            rows["ais"].append(ais.estimate)
            rows["ais_se"].append(ais.stderr)
            if net.n_hidden <= 20:
                rows["exact"].append(net.exact_log_likelihood(Xc))
        r = {k: np.concatenate(v) for k, v in rows.items() if v}
        n = r["bound"].size
        se = lambda a: float(np.sqrt(np.sum(a ** 2)) / n)   # noqa: E731
        exact = f"{np.mean(r['exact']):.3f}" if "exact" in r else "-"
        best = np.mean(r["exact"]) if "exact" in r else max(np.mean(r["imp"]), np.mean(r["ais"]))
        print(f"{label:<22}{np.mean(r['bound']):>9.3f}{np.mean(r['imp']):>12.3f} ± "
              f"{se(r['imp_se']):<5.3f}{np.mean(r['ais']):>12.3f} ± {se(r['ais_se']):<5.3f}"
              f"{exact:>10}{best - np.mean(r['bound']):>8.3f}")
    print("gap: exact (or the higher estimate) minus the mean-field bound")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default="inpainting_output", help="directory for the figure")
    parser.add_argument("--sizes", default="8,24", help="hidden layer sizes, top first")
    parser.add_argument("--epochs", type=int, default=16, help="training epochs of the net")
    parser.add_argument("--components", type=int, default=20, help="mixture components")
    parser.add_argument("--samples", type=int, default=2000,
                        help="importance samples per image")
    parser.add_argument("--ais-chains", type=int, default=20, help="AIS chains per image")
    parser.add_argument("--ais-steps", type=int, default=50, help="AIS temperatures")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--loglik", action="store_true",
                        help="also print the bound / importance / exact table for digit nets")
    args = parser.parse_args(argv)

    X_train, X_test, y_train, y_test = load_binary_digits()
    hidden = [int(s) for s in args.sizes.split(",") if s.strip()]
    n_pix = X_test.shape[1]
    miss = np.zeros(X_test.shape, dtype=bool)
    miss[:, n_pix // 2:] = True                     # the bottom four rows
    Xm = np.where(miss, np.nan, X_test)
    print(f"{X_train.shape[0]} training / {X_test.shape[0]} test images of 8x8 binary digits; "
          f"the bottom {n_pix // 2} pixels of each test image are missing")

    t0 = time.perf_counter()
    net = mf.SigmoidBeliefNet(hidden + [n_pix], max_iter=args.epochs, random_state=args.seed,
                              progress=False).fit(X_train)
    print(f"SigmoidBeliefNet {'-'.join(map(str, net.sizes))}: {args.epochs} epochs in "
          f"{time.perf_counter() - t0:.1f} s, training bound {net.history_[-1]:.3f} nats/image")
    t0 = time.perf_counter()
    mix = BernoulliMixture(n_components=args.components, random_state=args.seed).fit(X_train)
    print(f"BernoulliMixture K={args.components}: {time.perf_counter() - t0:.1f} s")

    fills = {}
    fills["SBN impute (gaussian)"] = net.impute(Xm, miss)
    fills["SBN impute (sjj)"] = net.impute(Xm, miss, method="sjj")
    fills["SBN impute (importance)"] = net.impute(Xm, miss, method="importance",
                                                  n_samples=args.samples,
                                                  random_state=args.seed)
    p = np.clip(X_train.mean(axis=0), EPS, 1 - EPS)
    fills["pixel marginals"] = np.broadcast_to(p, X_test.shape)
    fills[f"mixture K={args.components}"] = mixture_conditional(mix, X_test, ~miss)

    # joint conditional log-loss: -ln P(bottom | top) / 32
    est_all = net.log_likelihood(X_test, n_samples=args.samples, random_state=args.seed)
    est_top = net.log_likelihood(Xm, n_samples=args.samples, random_state=args.seed,
                                 missing=miss)
    cond = est_all.estimate - est_top.estimate
    cond_se = np.sqrt(np.sum(est_all.stderr ** 2 + est_top.stderr ** 2)) / X_test.shape[0]
    joint = {"SBN (importance)": (-np.mean(cond) / (n_pix // 2), cond_se / (n_pix // 2))}
    mcond = mixture_log_prob(mix, X_test) - mixture_log_prob(mix, X_test, ~miss)
    joint[f"mixture K={args.components} (exact)"] = (-np.mean(mcond) / (n_pix // 2), 0.0)
    marg = np.sum(np.where(X_test[:, miss[0]] > 0, np.log(p[miss[0]]),
                           np.log1p(-p[miss[0]])), axis=1)
    joint["pixel marginals (exact)"] = (-np.mean(marg) / (n_pix // 2), 0.0)

    print(f"\nBottom half of {X_test.shape[0]} test images: per-pixel predictions")
    header = f"{'model':<26}{'log-loss (nats/pixel)':>24}{'pixel error':>14}"
    print(header)
    print("-" * len(header))
    for name, P in fills.items():
        print(f"{name:<26}{log_loss(X_test, P, miss):>24.4f}"
              f"{100 * error_rate(X_test, P, miss):>13.2f}%")
    print(f"\nJoint: -ln P(bottom half | top half) / {n_pix // 2}, nats per pixel")
    for name, (v, se) in joint.items():
        print(f"{name:<34}{v:>8.4f}" + (f" ± {se:.4f}" if se else ""))

    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, "inpainting.png")
    figure(path, X_test, miss, [("SBN (importance)", fills["SBN impute (importance)"]),
                                ("SBN (gaussian)", fills["SBN impute (gaussian)"]),
                                ("mixture", fills[f"mixture K={args.components}"]),
                                ("marginals", fills["pixel marginals"])])
    print(f"\nfigure: {path}")

    if args.loglik:
        t0 = time.perf_counter()
        small = mf.SigmoidBeliefNet([4, 12, n_pix], max_iter=args.epochs, random_state=args.seed,
                                    progress=False).fit(X_train)
        mid = mf.SigmoidBeliefNet([10, 60, n_pix], max_iter=args.epochs,
                                  random_state=args.seed, progress=False).fit(X_train)
        print(f"(4-12-64 and 10-60-64 nets trained in {time.perf_counter() - t0:.1f} s)")
        loglik_table([("4-12-64 (gaussian)", small), ("4-12-64 (sjj proposal)",
                                                     small.copy().set_params(method="sjj")),
                      (f"{'-'.join(map(str, net.sizes))} (gaussian)", net),
                      ("10-60-64 (gaussian)", mid)], X_test, args.samples, args.seed)
        demo_nets_table(X_train, y_train, X_test, y_test, args.samples, args.seed,
                        args.ais_chains, args.ais_steps)


if __name__ == "__main__":
    main()
