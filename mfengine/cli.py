"""The ``mfengine`` console command.

``mfengine demo``   re-runs the paper's digit experiments (Saul & Jordan, sec. 3) on the small
                    8x8 digit set bundled with scikit-learn: mean-field classifier vs k-nearest
                    neighbours vs Bernoulli mixtures, the missing-pixel experiment, and three
                    figures.
``mfengine config`` prints the build configuration (``mfengine.show_config()``).
"""
import argparse
import os
import sys
import time

import numpy as np

__all__ = ["main", "run_demo"]

# The paper's own results (10x10 binary NIST digits, 6000 training images per class),
# shown for reference only.
PAPER_ERRORS = {
    "mean field": "4.9-5.2 (5 runs)",
    "knn": {1: "6.3", 3: "5.8", 5: "5.5"},
    "mixture": "5.9-6.2 (5 runs, K=40, 10 EM its)",
}
PAPER_MISSING = "mean field 5% error at f=0 degrading gradually to 12% at f=0.5 (paper's text, Fig. 4)"

MISSING_FRACTIONS = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5)
KNN_KS = (1, 3, 5)


def _configs(quick):
    """Settings of the full and the --quick demo."""
    if quick:
        return dict(
            classifier=dict(hidden=(4, 12), max_iter=4),
            mixture_components=(2, 5),
            mixture_alphas=(1.0,),
            mixture_iter=20,
            cv_folds=2,
            n_samples=4,
        )
    return dict(
        classifier=dict(),  # GenerativeClassifier's own defaults
        mixture_components=(1, 2, 3, 5, 10, 20, 40),
        mixture_alphas=(0.1, 1.0),
        mixture_iter=50,
        cv_folds=3,
        n_samples=10,
    )


def _print(*args):
    print(*args, flush=True)


def _pct(err):
    return f"{100.0 * err:5.2f}"


def run_demo(out="demo_output", seed=0, quick=False, progress=True):
    """Run the demo: train, compare, print tables and write three PNGs into ``out``.

    Every number printed is computed in this run, except the rows labelled as the paper's.

    Parameters
    ----------
    out : str or path-like, default="demo_output"
        Directory for the figures (created if needed).
    seed : int, default=0
        Seed of the training runs and of the missing-pixel masks; the train/test split is
        fixed.
    quick : bool, default=False
        A much smaller, faster configuration (for tests).
    progress : bool, default=True
        Show progress bars on long fits.

    Returns
    -------
    dict
        The test errors (``error_mean_field``, ``error_knn``, ``error_mixture``,
        ``error_mixture_40``), the choices made by cross-validation (``k_best``, ``K_best``,
        ``alpha_best``), the missing-pixel results (``missing_fractions``,
        ``missing_errors``), the figure paths (``figures``) and the run time (``seconds``).

    Raises
    ------
    ImportError
        If scikit-learn or matplotlib is missing.

    See Also
    --------
    main : The console command that calls it.
    """
    from mfengine import __version__
    from mfengine.baselines import MixtureClassifier
    from mfengine.classify import GenerativeClassifier
    from mfengine.datasets import DIGITS_SHAPE, load_binary_digits
    from mfengine.plot import plot_bound_history, plot_missing_curve, plot_samples
    from mfengine._validation import effective_n_threads

    try:
        from sklearn.model_selection import StratifiedKFold, cross_val_score
        from sklearn.neighbors import KNeighborsClassifier
    except ImportError as exc:
        raise ImportError(
            "the demo needs scikit-learn for k-nearest neighbours and its digit images; install "
            "it with 'pip install mfengine[demo]'."
        ) from exc

    t_start = time.perf_counter()
    cfg = _configs(quick)
    X_train, X_test, y_train, y_test = load_binary_digits()
    n_classes = np.unique(y_train).size
    _print(f"mfengine {__version__} demo{' (--quick)' if quick else ''}: Saul & Jordan sec. 3 on "
           f"scikit-learn's 8x8 digits thresholded at 8/16")
    _print(f"  {X_train.shape[0]} training / {X_test.shape[0]} test images, {X_train.shape[1]} "
           f"binary pixels, {n_classes} classes; seed {seed}; {effective_n_threads(None)} threads")
    _print()

    # ---------------------------------------------------------------- mean-field classifier
    t0 = time.perf_counter()
    clf = GenerativeClassifier(random_state=seed, progress=progress, **cfg["classifier"])
    clf.fit(X_train, y_train)
    t_fit = time.perf_counter() - t0
    t0 = time.perf_counter()
    err_mf = 1.0 - clf.score(X_test, y_test)
    t_pred = time.perf_counter() - t0
    sizes = "x".join(str(s) for s in clf.nets_[0].sizes)
    lr = clf.learning_rate
    from mfengine.classify import default_schedule

    rates = default_schedule(clf.max_iter) if lr is None else lr
    _print(f"mean field: one {sizes} net per class, {clf.max_iter} epochs, batch {clf.batch_size}, "
           f"learning rates {_describe_rates(rates)}; trained in {t_fit:.1f} s, "
           f"test set scored in {t_pred:.1f} s")

    # ---------------------------------------------------------------- k-nearest neighbours
    t0 = time.perf_counter()
    cv = StratifiedKFold(cfg["cv_folds"], shuffle=True, random_state=seed)
    knn_cv = {k: float(np.mean(cross_val_score(KNeighborsClassifier(n_neighbors=k), X_train,
                                               y_train, cv=cv)))
              for k in KNN_KS}
    k_best = max(KNN_KS, key=lambda k: (knn_cv[k], -k))
    knn_err = {k: 1.0 - KNeighborsClassifier(n_neighbors=k).fit(X_train, y_train).score(X_test, y_test)
               for k in KNN_KS}
    _print(f"kNN: {cfg['cv_folds']}-fold CV error on the training split "
           + ", ".join(f"k={k}: {_pct(1 - knn_cv[k]).strip()}%" for k in KNN_KS)
           + f" -> k={k_best} chosen ({time.perf_counter() - t0:.1f} s)")

    # ---------------------------------------------------------------- Bernoulli mixtures
    t0 = time.perf_counter()
    mix_cv = {}
    for alpha in cfg["mixture_alphas"]:
        for K in cfg["mixture_components"]:
            errs = []
            for tr, va in cv.split(X_train, y_train):
                m = MixtureClassifier(n_components=K, max_iter=cfg["mixture_iter"], tol=None,
                                      alpha=alpha, random_state=seed)
                errs.append(1.0 - m.fit(X_train[tr], y_train[tr]).score(X_train[va], y_train[va]))
            mix_cv[K, alpha] = float(np.mean(errs))
    K_best, a_best = min(mix_cv, key=lambda key: (mix_cv[key], key[0], -key[1]))
    mix = MixtureClassifier(n_components=K_best, max_iter=cfg["mixture_iter"], tol=None,
                            alpha=a_best, random_state=seed)
    mix.fit(X_train, y_train)
    err_mix = 1.0 - mix.score(X_test, y_test)
    mix40 = MixtureClassifier(n_components=40, max_iter=10, tol=None,  # the paper's fixed budget
                              random_state=seed).fit(X_train, y_train)
    err_mix40 = 1.0 - mix40.score(X_test, y_test)
    _print(f"mixture: {cfg['cv_folds']}-fold CV error (%) on the training split, "
           f"{cfg['mixture_iter']} EM iterations each:")
    for alpha in cfg["mixture_alphas"]:
        _print(f"  smoothing alpha={alpha:g}: "
               + ", ".join(f"K={K}: {_pct(mix_cv[K, alpha]).strip()}"
                           for K in cfg["mixture_components"]))
    _print(f"  -> K={K_best}, alpha={a_best:g} chosen ({time.perf_counter() - t0:.1f} s)")
    _print()

    # ---------------------------------------------------------------- table
    rows = [
        (f"mean-field SBN ({sizes})", err_mf, PAPER_ERRORS["mean field"]),
    ]
    for k in KNN_KS:
        tag = "  <- CV choice" if k == k_best else ""
        rows.append((f"kNN, k={k}{tag}", knn_err[k], PAPER_ERRORS["knn"][k]))
    rows.append((f"Bernoulli mixture, K={K_best}, alpha={a_best:g} (CV)", err_mix, "-"))
    rows.append(("Bernoulli mixture, K=40, 10 EM its", err_mix40, PAPER_ERRORS["mixture"]))
    w = max(len(r[0]) for r in rows) + 2
    _print(f"Test error (%), {X_test.shape[0]} test images")
    header = f"{'method':<{w}}{'this run':>9}   paper (10x10 NIST, for reference only)"
    _print(header)
    _print("-" * len(header))
    for name, err, paper in rows:
        _print(f"{name:<{w}}{_pct(err):>9}   {paper}")
    _print()

    # ---------------------------------------------------------------- missing pixels
    t0 = time.perf_counter()
    # One uniform draw per test pixel; the pixels with u < f are missing, so the missing sets
    # are nested as f grows.
    u = np.random.default_rng(seed).random(X_test.shape)
    errs_mf, errs_mix = [], []
    for f in MISSING_FRACTIONS:
        miss = u < f
        Xm = np.where(miss, np.nan, X_test)
        errs_mf.append(1.0 - clf.score(Xm, y_test, missing=miss))
        errs_mix.append(1.0 - mix.score(Xm, y_test, missing=miss))
    _print(f"Test error (%) with a fraction f of test pixels missing at random (seed {seed}, "
           f"nested masks), marginalised ({time.perf_counter() - t0:.1f} s)")
    _print(f"{'f':>5}  {'mean field':>10}  {'mixture K=' + str(K_best):>13}")
    for f, a, b in zip(MISSING_FRACTIONS, errs_mf, errs_mix):
        _print(f"{f:5.1f}  {_pct(a):>10}  {_pct(b):>13}")
    _print(f"(paper, for reference: {PAPER_MISSING})")
    _print()

    # ---------------------------------------------------------------- figures
    t0 = time.perf_counter()
    os.makedirs(out, exist_ok=True)
    paths = [
        plot_bound_history({str(c): h for c, h in zip(clf.classes_, clf.history_)},
                           os.path.join(out, "bound_per_epoch.png"), n_visible=X_train.shape[1],
                           title="Mean-field bound per epoch (cf. paper Fig. 2)"),
        plot_samples(clf.nets_, os.path.join(out, "samples.png"), n_per_class=cfg["n_samples"],
                     labels=clf.classes_, image_shape=DIGITS_SHAPE, random_state=seed,
                     title="Samples from each digit's net (cf. paper Fig. 3)"),
        plot_missing_curve(MISSING_FRACTIONS,
                           {"mean field": errs_mf, f"mixture (K={K_best})": errs_mix},
                           os.path.join(out, "missing_pixels.png"),
                           title="Test error vs missing pixels (cf. paper Fig. 4)"),
    ]
    _print(f"Figures ({time.perf_counter() - t0:.1f} s):")
    for p in paths:
        _print(f"  {p}")
    total = time.perf_counter() - t_start
    _print(f"Total time: {total:.1f} s")
    return dict(
        error_mean_field=err_mf, error_knn=knn_err, k_best=k_best, error_mixture=err_mix,
        K_best=K_best, alpha_best=a_best, error_mixture_40=err_mix40, missing_fractions=list(MISSING_FRACTIONS),
        missing_errors={"mean field": errs_mf, "mixture": errs_mix}, figures=paths,
        seconds=total,
    )


def _describe_rates(rates):
    """'0.05 x10, 0.01 x10' for a per-epoch list."""
    parts, prev, count = [], None, 0
    for r in list(rates) + [None]:
        if r == prev:
            count += 1
            continue
        if prev is not None:
            parts.append(f"{prev:g} x{count}")
        prev, count = r, 1
    return ", ".join(parts)


def _build_parser():
    parser = argparse.ArgumentParser(
        prog="mfengine",
        description="Mean-field inference and learning in belief networks.",
    )
    sub = parser.add_subparsers(dest="command", metavar="{demo,config}")
    demo = sub.add_parser(
        "demo",
        help="digit classification demo (Saul & Jordan sec. 3) on scikit-learn's 8x8 digits",
        description="Train one mean-field sigmoid belief net per digit, compare with k-nearest "
                    "neighbours and Bernoulli mixtures, run the missing-pixel experiment and save "
                    "three figures.",
    )
    demo.add_argument("--out", default="demo_output",
                      help="directory for the figures (default: ./demo_output)")
    demo.add_argument("--seed", type=int, default=0,
                      help="seed for training and for the missing-pixel masks (default: 0); "
                           "the train/test split is fixed")
    demo.add_argument("--quick", action="store_true",
                      help="a much smaller, faster configuration (for tests)")
    demo.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    sub.add_parser("config", help="print the build configuration (OpenMP, compiler flags)")
    return parser


def main(argv=None):
    """Entry point of the ``mfengine`` command.

    Parameters
    ----------
    argv : list of str, optional
        The arguments (default: ``sys.argv[1:]``).

    Returns
    -------
    int
        The exit status: 0 on success, 1 without a command, 2 when the demo lacks a
        dependency.

    See Also
    --------
    run_demo : What ``mfengine demo`` runs.

    Examples
    --------
    >>> from mfengine.cli import main
    >>> main(["config"])  # doctest: +ELLIPSIS
    mfengine ...
    0
    """
    parser = _build_parser()
    args = parser.parse_args(argv)
    if args.command == "config":
        from mfengine import show_config

        show_config()
        return 0
    if args.command == "demo":
        try:
            run_demo(out=args.out, seed=args.seed, quick=args.quick, progress=not args.no_progress)
        except ImportError as exc:
            print(f"mfengine demo: {exc}", file=sys.stderr)
            return 2
        return 0
    parser.print_help()
    return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
