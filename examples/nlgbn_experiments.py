"""Frey & Hinton (1999), sections 3-4, reproduced with mfengine's NLGBN.

    python examples/nlgbn_experiments.py [OUTDIR]            # everything (default nlgbn_output/)
    python examples/nlgbn_experiments.py --quick              # 20 EM iterations, 1 restart, 2 splits
    python examples/nlgbn_experiments.py --skip-digits        # only the bars / stereo bounds
    python examples/nlgbn_experiments.py --skip-features      # only the digit classification
    python examples/nlgbn_experiments.py --loglik-only        # only part 3 (issue 13)

1. Feature extraction (section 3): binary-rectified-linear and binary-binary-linear networks
   (1 top unit; 16 middle units for the 6x6 continuous bars, 20 for the 2x12-pixel stereo pairs)
   trained by variational EM (100 iterations) on 1000 patterns of each of the four data sets
   (noise-free and noisy).  Prints the per-pattern log-probability bound on the training set
   beside the paper's and saves the training examples and the middle-to-visible weights (the
   paper's Figs. 1-2) as PNG.  Each network is trained from ``--restarts`` random
   initialisations; the table shows the best bound and the spread.
2. Grey-level digit classification (section 4, Fig. 3): one model per class, classification by
   Bayes' rule (eq. 9) with the bound as the class likelihood, on scikit-learn's bundled 8x8
   grey digits (1797 images, grey levels 0-16; the paper used 11000 CEDAR images, which are not
   redistributable).  The images are shuffled and cut into ``--splits`` disjoint chunks; pair k
   trains on chunk k and tests on chunk k+1 (so both the training sets and the test sets are
   disjoint).  Methods: k-nearest neighbours (k by leave-one-out), a mixture of diagonal
   Gaussians, factor analysis and 1- and 2-hidden-layer rectified NLGBNs; model sizes are chosen
   by the validation log-probability (bound) on 1/3 of each class's training data, then the chosen
   model is retrained on all of it; visible variances are kept >= 0.01 in the four model-based
   methods.  Prints mean error +- sd and paired t-test p-values (scipy.stats.ttest_rel), and
   saves a bar chart.
3. Honest log-likelihoods and imputation (issue 13): for the bars networks of part 1 trained on
   noisy bars, the held-out bound F beside the importance-sampled ln p(x) (K = 1000 and 10000,
   +- its standard error) -- the gap F leaves -- and the right half of each held-out pattern
   filled in by ``NLGBN.impute`` beside the per-pixel mean and scikit-learn's FactorAnalysis
   conditional mean (RMSE on the hidden pixels).
"""
import argparse
import os
import sys
import time

import numpy as np

import mfengine as mf
from mfengine._progress import progress_bar

PAPER_BOUNDS = {  # Frey & Hinton (1999), sections 3.1-3.2, nats per pattern
    ("bars", False, "rectified"): 27.4,
    ("bars", True, "rectified"): -60.3,
    ("bars", False, "binary"): -48.3,
    ("bars", True, "binary"): -65.6,
    ("stereo", False, "rectified"): 1.0,
    ("stereo", True, "rectified"): -43.7,
    ("stereo", False, "binary"): -37.8,
    ("stereo", True, "binary"): -46.1,
}


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


# ------------------------------------------------------------------ feature extraction
def make_data(kind, noisy, n, seed):
    if kind == "bars":
        return mf.datasets.make_continuous_bars(n, noisy=noisy, random_state=seed)
    return mf.datasets.make_stereo(n, noisy=noisy, random_state=seed)


def show_patterns(ax_grid, rows, kind, vmax=None):
    """Draw each row of ``rows`` into one axis: a 6x6 image (bars) or the two 12-pixel stereo
    images stacked (left above right); grey = 0, white positive, black negative."""
    vmax = vmax or np.abs(rows).max() or 1.0
    for ax, r in zip(ax_grid, rows):
        img = r.reshape(6, 6) if kind == "bars" else r.reshape(2, 12)
        ax.imshow(img, cmap="gray", vmin=-vmax, vmax=vmax, interpolation="nearest")
        ax.set_xticks([])
        ax.set_yticks([])
    for ax in ax_grid[len(rows):]:
        ax.axis("off")


def save_figure(path, kind, panels):
    """Rows of small images, one block of rows per panel: (title, rows); at most 16 bar images
    or 10 stereo pairs per row."""
    plt = _plt()
    ncol = 16 if kind == "bars" else 10
    lines = []
    for title, rows in panels:
        for start in range(0, len(rows), ncol):
            lines.append((title if start == 0 else None, rows[start:start + ncol]))
    wide, high = (1.0, 1.25) if kind == "bars" else (1.6, 0.75)
    fig, axes = plt.subplots(len(lines), ncol, figsize=(wide * ncol, high * len(lines)), squeeze=False)
    for i, (title, rows) in enumerate(lines):
        show_patterns(list(axes[i]), rows, kind)
        if title:
            axes[i][0].text(0.0, 1.12, title, fontsize=8, transform=axes[i][0].transAxes,
                            ha="left", va="bottom")
    fig.subplots_adjust(left=0.01, right=0.99, bottom=0.02, top=0.92, wspace=0.08, hspace=0.6)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def feature_experiments(args, outdir):
    rows = []
    for kind in ("bars", "stereo"):
        middle = 16 if kind == "bars" else 20
        n_vis = 36 if kind == "bars" else 24
        for noisy in (False, True):
            X = make_data(kind, noisy, args.n, seed=1 if noisy else 0)
            panels = [("training examples", X[:8])]
            for hidden in ("rectified", "binary"):
                results = []
                for r in range(args.restarts):
                    net = mf.NLGBN([1, middle, n_vis], units=["binary", hidden, "linear"],
                                   max_iter=args.n_iter, n_threads=args.n_threads,
                                   random_state=100 * r + 7, progress=not args.no_progress)
                    t0 = time.perf_counter()
                    hist = net.fit(X).history_
                    results.append((hist[-1], time.perf_counter() - t0, net, hist))
                best = max(results, key=lambda t: t[0])
                bounds = np.array([t[0] for t in results])
                row = dict(data=kind, noisy=noisy, hidden=hidden, best=best[0], mean=bounds.mean(),
                           sd=bounds.std(ddof=1) if len(bounds) > 1 else 0.0,
                           paper=PAPER_BOUNDS[(kind, noisy, hidden)],
                           seconds=np.mean([t[1] for t in results]),
                           top_weights=best[2].weights_[0][:, 0])
                rows.append(row)
                W = best[2].weights_[1].T        # (middle, visible): each row one unit's weights
                order = np.argsort(-np.abs(W).sum(axis=1))
                panels.append((f"{hidden} middle units: weights to the image (bound {best[0]:.1f})",
                               W[order]))
                print(f"  {kind:6s} {'noisy' if noisy else 'clean':5s} binary-{hidden}-linear: "
                      f"bound {best[0]:8.2f} nats (paper {row['paper']:6.1f}), "
                      f"{row['seconds']:.1f} s per fit", flush=True)
            name = f"{kind}_{'noisy' if noisy else 'clean'}.png"
            save_figure(os.path.join(outdir, name), kind, panels)
    print()
    print(f"log-probability bounds per training pattern (nats), {args.n} patterns, "
          f"{args.n_iter} EM iterations, best of {args.restarts} restarts")
    print(f"{'data':8s} {'noise':6s} {'network':26s} {'mfengine':>9s} {'mean+-sd':>15s} {'paper':>7s}")
    for r in rows:
        net = f"binary-{r['hidden']}-linear"
        print(f"{r['data']:8s} {'noisy' if r['noisy'] else 'clean':6s} {net:26s} {r['best']:9.1f} "
              f"{r['mean']:8.1f}+-{r['sd']:<5.1f} {r['paper']:7.1f}")
    return rows


# ------------------------------------------------------------------ digit classification
def _class_split(y, rng, frac=1.0 / 3.0):
    """Indices (fit, validation) with ``frac`` of each class held out."""
    fit_idx, val_idx = [], []
    for c in np.unique(y):
        idx = rng.permutation(np.flatnonzero(y == c))
        k = max(1, int(round(frac * idx.size)))
        val_idx.append(idx[:k])
        fit_idx.append(idx[k:])
    return np.concatenate(fit_idx), np.concatenate(val_idx)


class PerClass:
    """One density model per class, classification by Bayes' rule (eq. 9); the model size is
    chosen by the validation log-probability on 1/3 of each class's data, then the chosen
    model is retrained on all of the class's data."""

    def __init__(self, make, sizes, seed=0):
        self.make, self.sizes, self.seed = make, sizes, seed

    def fit(self, X, y):
        rng = np.random.default_rng(self.seed)
        self.classes_ = np.unique(y)
        self.log_prior_ = np.log(np.array([np.mean(y == c) for c in self.classes_]))
        self.models_, self.chosen_ = [], []
        for c in self.classes_:
            Xc = X[y == c]
            fit_idx, val_idx = _class_split(np.zeros(len(Xc)), rng)
            scores = []
            for size in self.sizes:
                model = self.make(size, Xc[fit_idx])
                scores.append(model.logp(Xc[val_idx]).mean())
            best = self.sizes[int(np.argmax(scores))]
            self.chosen_.append(best)
            self.models_.append(self.make(best, Xc))
        return self

    def predict(self, X):
        L = np.column_stack([m.logp(X) for m in self.models_]) + self.log_prior_
        return self.classes_[np.argmax(L, axis=1)]


class _GMM:
    def __init__(self, k, X, seed):
        from sklearn.mixture import GaussianMixture

        k = min(k, len(X))
        self.m = GaussianMixture(k, covariance_type="diag", reg_covar=0.01, n_init=2,
                                 random_state=seed).fit(X)

    def logp(self, X):
        return self.m.score_samples(X)


class _FA:
    def __init__(self, q, X, seed):
        from sklearn.decomposition import FactorAnalysis

        self.m = FactorAnalysis(n_components=min(q, X.shape[1]), random_state=seed).fit(X)
        self.m.noise_variance_ = np.maximum(self.m.noise_variance_, 0.01)

    def logp(self, X):
        return self.m.score_samples(X)


class _Net:
    def __init__(self, hidden, X, seed, n_iter, n_threads):
        sizes = list(hidden) + [X.shape[1]]
        self.m = mf.NLGBN(sizes, units="rectified", max_iter=n_iter, n_threads=n_threads,
                          random_state=seed, progress=False).fit(X)

    def logp(self, X):
        return self.m.score_samples(X)


def knn_fit_predict(Xtr, ytr, Xte, ks=(1, 3, 5, 7, 9)):
    """k-nearest neighbours with k chosen by leave-one-out accuracy on the training set."""
    d = ((Xtr[:, None, :] - Xtr[None, :, :]) ** 2).sum(-1)
    np.fill_diagonal(d, np.inf)
    order = np.argsort(d, axis=1)
    best_k, best_acc = ks[0], -1.0
    for k in ks:
        votes = ytr[order[:, :k]]
        pred = np.array([np.bincount(v, minlength=10).argmax() for v in votes])
        acc = np.mean(pred == ytr)
        if acc > best_acc:
            best_k, best_acc = k, acc
    dte = ((Xte[:, None, :] - Xtr[None, :, :]) ** 2).sum(-1)
    votes = ytr[np.argsort(dte, axis=1)[:, :best_k]]
    return np.array([np.bincount(v, minlength=10).argmax() for v in votes]), best_k


def digit_experiments(args, outdir):
    from scipy.stats import ttest_rel
    from sklearn.datasets import load_digits

    digits = load_digits()
    X, y = digits.data.astype(np.float64), digits.target
    rng = np.random.default_rng(args.seed)
    perm = rng.permutation(len(X))
    chunks = np.array_split(perm, args.splits)
    methods = ["k-NN", "mixture of diag. Gaussians", "factor analysis", "NLGBN 1 hidden", "NLGBN 2 hidden"]
    errors = {m: [] for m in methods}
    chosen = {m: [] for m in methods}
    total = args.splits * len(methods)
    with progress_bar(total=total, desc="digits", disable=args.no_progress) as bar:
        for k in range(args.splits):
            tr, te = chunks[k], chunks[(k + 1) % args.splits]
            Xtr, ytr, Xte, yte = X[tr], y[tr], X[te], y[te]
            pred, kk = knn_fit_predict(Xtr, ytr, Xte)
            errors["k-NN"].append(np.mean(pred != yte))
            chosen["k-NN"].append(kk)
            bar.update(1)
            specs = {
                "mixture of diag. Gaussians": ([1, 2, 3, 5], lambda s, Z: _GMM(s, Z, args.seed)),
                "factor analysis": ([1, 2, 4, 6, 8, 12], lambda s, Z: _FA(s, Z, args.seed)),
                "NLGBN 1 hidden": ([(h,) for h in (1, 2, 4, 6, 8, 12)],
                                   lambda s, Z: _Net(s, Z, args.seed, args.digit_iter, args.n_threads)),
                "NLGBN 2 hidden": ([(1, 4), (2, 4), (2, 8), (4, 8), (4, 12)],
                                   lambda s, Z: _Net(s, Z, args.seed, args.digit_iter, args.n_threads)),
            }
            for name, (sizes, make) in specs.items():
                clf = PerClass(make, sizes, seed=args.seed + k).fit(Xtr, ytr)
                errors[name].append(np.mean(clf.predict(Xte) != yte))
                chosen[name].append(clf.chosen_)
                bar.update(1)
    E = {m: np.array(v) * 100 for m, v in errors.items()}
    n_tr = len(chunks[0])
    print()
    print(f"digit classification: {args.splits} disjoint train/test pairs of ~{n_tr} images each "
          f"(sklearn 8x8 grey digits), error rate in %")
    for m in methods:
        print(f"  {m:28s} {E[m].mean():6.2f} +- {E[m].std(ddof=1) if args.splits > 1 else 0.0:5.2f}   "
              f"per split: {' '.join(f'{e:5.2f}' for e in E[m])}")
    print("paired t-test p-values (%), row vs column (scipy.stats.ttest_rel):")
    short = ["kNN", "MoG", "FA", "NL1", "NL2"]
    print("       " + " ".join(f"{s:>6s}" for s in short))
    P = np.full((5, 5), np.nan)
    for i, a in enumerate(methods):
        cells = []
        for j, b in enumerate(methods):
            if i == j or args.splits < 2 or np.all(E[a] == E[b]):
                cells.append(f"{'-':>6s}")
                continue
            P[i, j] = ttest_rel(E[a], E[b]).pvalue * 100
            cells.append(f"{P[i, j]:6.1f}")
        print(f"  {short[i]:4s} " + " ".join(cells))
    print("model sizes chosen per class (first split):")
    for m in methods[1:]:
        print(f"  {m:28s} {chosen[m][0]}")
    print(f"  k-NN k per split: {chosen['k-NN']}")
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6.5, 3.5))
    means = [E[m].mean() for m in methods]
    sds = [E[m].std(ddof=1) if args.splits > 1 else 0.0 for m in methods]
    ax.bar(range(5), means, yerr=sds, capsize=4, color=["0.6", "0.5", "0.4", "tab:blue", "tab:green"])
    ax.set_xticks(range(5))
    ax.set_xticklabels(short)
    ax.set_ylabel("test error (%)")
    ax.set_title(f"8x8 grey digits, {args.splits} disjoint splits of ~{n_tr} training images")
    fig.tight_layout()
    fig.savefig(os.path.join(outdir, "digits_error.png"), dpi=110)
    plt.close(fig)
    return E, P


def loglik_experiments(args, outdir):
    from sklearn.decomposition import FactorAnalysis

    print("\n== 3. Importance-sampled ln p(x) and imputation (noisy bars, held-out) ==")
    Xtr = mf.datasets.make_continuous_bars(args.n, noisy=True, random_state=args.seed)
    Xte = mf.datasets.make_continuous_bars(500, noisy=True, random_state=args.seed + 1)
    miss = np.zeros(Xte.shape, dtype=bool)
    miss[:, Xte.shape[1] // 2:] = True
    fa = FactorAnalysis(n_components=8, random_state=args.seed).fit(Xtr)
    cov = fa.get_covariance()
    o, u = ~miss[0], miss[0]
    fa_fill = fa.mean_[u] + (Xte[:, o] - fa.mean_[o]) @ np.linalg.solve(cov[np.ix_(o, o)], cov[np.ix_(o, u)])
    rmse = lambda fill: float(np.sqrt(np.mean((fill - Xte[:, u]) ** 2)))   # noqa: E731
    print(f"{'network':24s} {'bound F':>9s} {'ln p, K=1e3':>16s} {'ln p, K=1e4':>16s} "
          f"{'gap':>6s} {'ESS/K':>6s}  imputation RMSE (right half)")
    for mid in ("rectified", "binary"):
        g = mf.NLGBN([1, 16, 36], units=["binary", mid, "linear"], max_iter=args.n_iter,
                     n_threads=args.n_threads, random_state=args.seed,
                     progress=not args.no_progress).fit(Xtr)
        t0 = time.perf_counter()
        e3 = g.log_likelihood(Xte, n_samples=1000, random_state=1)
        e4 = g.log_likelihood(Xte, n_samples=10000, random_state=2)
        dt = time.perf_counter() - t0
        fill = g.impute(Xte, miss)[:, u]
        F = e4.bound.mean()
        name = f"binary-{mid}-linear"
        print(f"{name:24s} {F:9.3f} {e3.estimate.mean():9.3f} +- "
              f"{np.sqrt(np.sum(e3.stderr ** 2)) / len(Xte):.3f} {e4.estimate.mean():9.3f} +- "
              f"{np.sqrt(np.sum(e4.stderr ** 2)) / len(Xte):.3f} {e4.estimate.mean() - F:6.3f} "
              f"{np.mean(e4.ess) / 1e4:6.3f}  NLGBN {rmse(fill):.3f}  ({dt:.1f} s sampling)")
    print(f"baselines: per-pixel training mean RMSE {rmse(np.broadcast_to(Xtr.mean(0)[u], fa_fill.shape)):.3f}, "
          f"FactorAnalysis(8) conditional mean RMSE {rmse(fa_fill):.3f}")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("outdir", nargs="?", default="nlgbn_output")
    p.add_argument("--n", type=int, default=1000, help="training patterns per data set")
    p.add_argument("--n-iter", type=int, default=100, help="EM iterations (paper: 100)")
    p.add_argument("--restarts", type=int, default=3)
    p.add_argument("--splits", type=int, default=4, help="disjoint digit train/test pairs")
    p.add_argument("--digit-iter", type=int, default=100, help="EM iterations per digit model")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--n-threads", type=int, default=None)
    p.add_argument("--quick", action="store_true", help="20 EM iterations, 1 restart, 2 splits")
    p.add_argument("--skip-features", action="store_true")
    p.add_argument("--skip-digits", action="store_true")
    p.add_argument("--no-progress", action="store_true")
    p.add_argument("--loglik-only", action="store_true", help="only part 3")
    args = p.parse_args(argv)
    if args.quick:
        args.n_iter, args.restarts, args.splits, args.digit_iter = 20, 1, 2, 20
    os.makedirs(args.outdir, exist_ok=True)
    t0 = time.perf_counter()
    if not args.skip_features and not args.loglik_only:
        feature_experiments(args, args.outdir)
    if not args.skip_digits and not args.loglik_only:
        digit_experiments(args, args.outdir)
    loglik_experiments(args, args.outdir)
    print(f"\nwrote PNGs to {os.path.abspath(args.outdir)}; total {time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
