"""The ``mfengine`` console command.

``mfengine demo``   re-runs the paper's digit experiments (Saul & Jordan, sec. 3) on the small
                    8x8 digit set bundled with scikit-learn: mean-field classifier vs k-nearest
                    neighbours vs Bernoulli mixtures, the missing-pixel experiment, and three
                    figures.
``mfengine config`` prints the build configuration (``mfengine.show_config()``).
``mfengine diagnose`` draws a case from a diagnosis-style noisy-OR net (the shape of QMR-DT,
                    ``mfengine.datasets.make_diagnosis_net``) and prints the most probable
                    diseases by mean field (``method="sjj"``), the present ones marked.
"""
import argparse
import os
import sys
import time

import numpy as np

__all__ = ["main", "run_demo", "run_diagnose"]

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
    from mfengine.mixture import MixtureClassifier
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


def run_diagnose(n_diseases=600, n_findings=4000, parents_per_finding=10, present=2,
                 observe=1.0, top=10, seed=0, n_threads=1, out=print):
    """Draw one case from a diagnosis-style net and rank the diseases by mean field.

    The net is ``mfengine.datasets.make_diagnosis_net(n_diseases, n_findings,
    parents_per_finding, random_state=seed)``.  The case has ``present`` diseases present
    (chosen at random) and all others absent; its findings are drawn from the net given those
    diseases, and each is recorded with probability ``observe``.  An unrecorded noisy-OR finding
    drops out of the joint distribution exactly, so the posterior is computed on the net of the
    recorded findings: ``BeliefNet.infer(x, method="sjj")``, whose means are the posterior
    disease probabilities under the factorised approximation.

    Parameters
    ----------
    n_diseases, n_findings, parents_per_finding : int, default=600, 4000, 10
        The net's shape.
    present : int, default=2
        Diseases present in the case.
    observe : float, default=1.0
        Probability that a finding is recorded, in (0, 1].
    top : int, default=10
        Diseases listed.
    seed : int, default=0
        Seed of the net and of the case.
    n_threads : int, default=1
        OpenMP threads of the solve.
    out : callable, default=print
        Where the report lines go.

    Returns
    -------
    dict
        ``posterior`` (ndarray of shape (n_diseases,)), ``prior`` (the diseases' prior
        probabilities), ``present`` (indices of the present diseases), ``ranking`` (diseases
        by decreasing posterior), ``bound`` (the sjj lower bound on ln P(recorded findings)),
        ``n_positive``, ``n_negative``, ``seconds`` (the solve) and ``net`` (the net solved).

    Raises
    ------
    ValueError
        If an argument is out of range.

    See Also
    --------
    mfengine.datasets.make_diagnosis_net : The net.

    Examples
    --------
    >>> from mfengine.cli import run_diagnose
    >>> r = run_diagnose(40, 300, 3, present=1, seed=1, out=lambda s: None)
    >>> r["posterior"].shape
    (40,)
    """
    import warnings

    import scipy.sparse

    from mfengine import ConvergenceWarning
    from mfengine.datasets import make_diagnosis_net
    from mfengine.sbn import BeliefNet

    if isinstance(present, bool) or not isinstance(present, int) or not 0 <= present <= n_diseases:
        raise ValueError(f"present must be an integer in [0, n_diseases={n_diseases}], got "
                         f"{present!r}")
    if not (isinstance(observe, (int, float)) and 0.0 < observe <= 1.0):
        raise ValueError(f"observe must be a probability in (0, 1], got {observe!r}")
    if isinstance(top, bool) or not isinstance(top, int) or top < 1:
        raise ValueError(f"top must be a positive integer, got {top!r}")
    net = make_diagnosis_net(n_diseases, n_findings, parents_per_finding, random_state=seed)
    W = scipy.sparse.csr_matrix(net.W)
    h = np.asarray(net.h, dtype=np.float64)
    hd, hf, Wf = h[:n_diseases], h[n_diseases:], W[n_diseases:, :n_diseases].tocsr()
    rng = np.random.default_rng([seed, 1])
    d = np.zeros(n_diseases)
    where = np.sort(rng.choice(n_diseases, size=present, replace=False))
    d[where] = 1.0
    x = (rng.random(n_findings) < -np.expm1(-(hf + Wf @ d))).astype(np.float64)
    rec = (np.flatnonzero(rng.random(n_findings) < observe) if observe < 1.0
           else np.arange(n_findings))
    if observe < 1.0:
        m = rec.size
        Wc = scipy.sparse.bmat([[scipy.sparse.csr_matrix((n_diseases, n_diseases)), None],
                                [Wf[rec], scipy.sparse.csr_matrix((m, m))]], format="csr")
        vis = np.zeros(n_diseases + m, dtype=bool)
        vis[n_diseases:] = True
        net = BeliefNet(Wc, np.concatenate([hd, hf[rec]]), vis, activation="noisy_or")
    net.set_params(progress=False, n_threads=n_threads)
    net.sample(0)   # checks the parameters and builds the structure, outside the timing
    xr = x[rec]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        t0 = time.perf_counter()
        r = net.infer(xr[None, :], method="sjj")
        dt = time.perf_counter() - t0
    post = r.mu[0, :n_diseases].copy()
    prior = -np.expm1(-hd)
    ranking = np.argsort(-post, kind="stable")
    n_pos = int(xr.sum())
    out(f"net: {n_diseases} diseases, {n_findings} findings, {parents_per_finding} parent diseases "
        f"per finding (make_diagnosis_net, seed {seed})")
    out(f"case: {present} present disease(s) {where.tolist()}; {rec.size} findings recorded "
        f"({n_pos} positive, {rec.size - n_pos} negative)")
    out(f"mean field (sjj): {dt * 1e3:.1f} ms, {int(r.n_iter[0])} sweeps"
        f"{'' if r.converged[0] else ' (NOT converged)'}, bound on ln P(findings) "
        f"{r.bound[0]:.2f} nats")
    out(f"{'rank':>4}  {'disease':>7}  {'posterior':>9}  {'prior':>7}")
    for k, j in enumerate(ranking[:top]):
        mark = "  * present" if d[j] else ""
        out(f"{k + 1:>4}  {j:>7}  {post[j]:>9.4f}  {prior[j]:>7.4f}{mark}")
    return dict(posterior=post, prior=prior, present=where, ranking=ranking,
                bound=float(r.bound[0]), n_positive=n_pos, n_negative=int(rec.size - n_pos),
                seconds=dt, net=net, findings=xr)


def _build_parser():
    parser = argparse.ArgumentParser(
        prog="mfengine",
        description="Mean-field inference and learning in belief networks.",
    )
    sub = parser.add_subparsers(dest="command", metavar="{demo,config,diagnose}")
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
    diag = sub.add_parser(
        "diagnose",
        help="rank the diseases of a case drawn from a diagnosis-style noisy-OR net (mean field)",
        description="Build a QMR-DT-shaped noisy-OR net (mfengine.datasets.make_diagnosis_net), "
                    "draw a case with a few present diseases, and print the most probable "
                    "diseases by mean field (method 'sjj'); present diseases are marked.",
    )
    diag.add_argument("--diseases", type=int, default=600, help="number of diseases (600)")
    diag.add_argument("--findings", type=int, default=4000, help="number of findings (4000)")
    diag.add_argument("--parents", type=int, default=10, help="parent diseases per finding (10)")
    diag.add_argument("--present", type=int, default=2, help="present diseases in the case (2)")
    diag.add_argument("--observe", type=float, default=1.0,
                      help="probability that a finding is recorded (default 1: all)")
    diag.add_argument("--top", type=int, default=10, help="diseases listed (10)")
    diag.add_argument("--seed", type=int, default=0, help="seed of the net and the case (0)")
    diag.add_argument("--threads", type=int, default=1, help="OpenMP threads (1)")
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
        dependency or ``diagnose`` gets an argument out of range.

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
    if args.command == "diagnose":
        try:
            run_diagnose(args.diseases, args.findings, args.parents, present=args.present,
                         observe=args.observe, top=args.top, seed=args.seed,
                         n_threads=args.threads)
        except ValueError as exc:
            print(f"mfengine diagnose: {exc}", file=sys.stderr)
            return 2
        return 0
    parser.print_help()
    return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
