"""Context-sensitive HMMs (Saul & Jordan 1996, sec. 3): Figure 1 and the accompanying numbers.

    python examples/context_hmm.py [OUTPUT_DIR]        (default: hmm_output/)

1. Figure 1: 2-D outputs of a first-order HMM and of a context-sensitive HMM (n = 5 states,
   context at t +- 5), side by side, with samples from the models fitted to each
   (figure1.png).
2. Held-out bound per time step, on data generated with context, of the fitted first-order
   model and the fitted context model (and of the generating model).
3. On small instances (n = 3, lag = 2 and 1, T = 40), the gaps structured - exact and
   naive - exact.
4. Time of structured mean field against the exact augmented-state recursion as lag grows.
5. Missing frames (rows of NaN, marginalised; hmmlearn refuses them): the held-out bound of
   models fitted with 0%, 20% and 50% of the training frames missing, and how often the states
   under missing frames are decoded right (structured Viterbi, naive marginals, and the
   first-order model, which sees no context).
Everything printed is also written to OUTPUT_DIR/results.txt.
"""
import os
import sys
import time

import numpy as np

import mfengine as mf


def lines_out(path):
    fh = open(path, "w")

    def out(s=""):
        print(s)
        fh.write(s + "\n")
        fh.flush()

    return out


def figure1_models(rng, n=5, D=2, lag=5, context_scale=0.6):
    ang = 2 * np.pi * np.arange(n) / n
    means = 5.0 * np.c_[np.cos(ang), np.sin(ang)]
    A = rng.random((n, n)) + 2.0 * np.eye(n)
    A /= A.sum(1, keepdims=True)
    first = mf.ContextHMM(n, D, lag=lag, context="both")
    first.means_, first.transmat_ = means, A
    ctx = mf.ContextHMM(n, D, lag=lag, context="both")
    ctx.means_, ctx.transmat_ = means, A
    ctx.right_means_ = context_scale * rng.normal(size=(n, D))
    ctx.left_means_ = context_scale * rng.normal(size=(n, D))
    return first, ctx


def gap_instance(lag, context_scale, seed, **kw):
    """Part 3's instance ``seed``: n = 3, D = 2, context both, T = 40 (``kw`` to ContextHMM)."""
    r2 = np.random.default_rng(1000 + seed)
    h = mf.ContextHMM(3, 2, lag=lag, context="both", **kw)
    h.means_ = 2.0 * r2.normal(size=(3, 2))
    A = r2.random((3, 3)) + 2 * np.eye(3)
    h.transmat_ = A / A.sum(1, keepdims=True)
    h.right_means_ = context_scale * r2.normal(size=(3, 2))
    h.left_means_ = context_scale * r2.normal(size=(3, 2))
    X, _ = h.sample(40, random_state=seed)
    return h, X


def main(outdir="hmm_output"):
    os.makedirs(outdir, exist_ok=True)
    out = lines_out(os.path.join(outdir, "results.txt"))
    rng = np.random.default_rng(0)
    n, D, lag = 5, 2, 5

    # ---- 1. Figure 1 ---------------------------------------------------------------------
    first, ctx = figure1_models(rng, n, D, lag)
    n_train, T = 10, 200
    train_first = [first.sample(T, random_state=s)[0] for s in range(n_train)]
    train_ctx = [ctx.sample(T, random_state=100 + s)[0] for s in range(n_train)]
    test_ctx = [ctx.sample(T, random_state=200 + s)[0] for s in range(n_train)]
    N_test = n_train * T

    t0 = time.perf_counter()
    fit_first = mf.ContextHMM(n, D, lag=lag, context="both", max_iter=0, random_state=0,
                              progress=False)
    fit_first.fit(train_first)
    fit_first_on_ctx = mf.ContextHMM(n, D, lag=lag, context="both", max_iter=0, random_state=0,
                                     progress=False)
    fit_first_on_ctx.fit(train_ctx)
    fit_ctx = mf.ContextHMM(n, D, lag=lag, context="both", max_iter=100, random_state=0)
    fit_ctx.fit(train_ctx)
    t_fit = time.perf_counter() - t0

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(2, 2, figsize=(9, 9), sharex=True, sharey=True)
    Xa, Xb = np.concatenate(train_first), np.concatenate(train_ctx)
    ax[0, 0].scatter(Xa[:, 0], Xa[:, 1], s=2, alpha=0.5)
    ax[0, 0].set_title("first-order HMM (data)")
    ax[0, 1].scatter(Xb[:, 0], Xb[:, 1], s=2, alpha=0.5, color="C1")
    ax[0, 1].set_title(f"context-sensitive HMM, t ± {lag} (data)")
    Sa = np.concatenate([fit_first.sample(T, random_state=300 + s)[0] for s in range(n_train)])
    Sb = np.concatenate([fit_ctx.sample(T, random_state=400 + s)[0] for s in range(n_train)])
    ax[1, 0].scatter(Sa[:, 0], Sa[:, 1], s=2, alpha=0.5)
    ax[1, 0].set_title("sampled from the fitted first-order model")
    ax[1, 1].scatter(Sb[:, 0], Sb[:, 1], s=2, alpha=0.5, color="C1")
    ax[1, 1].set_title("sampled from the fitted context model")
    for a in ax.ravel():
        a.set_aspect("equal")
    fig.suptitle("2-D outputs, n = 5 hidden states (cf. Saul & Jordan 1996, Figure 1)")
    fig.tight_layout()
    fig.savefig(os.path.join(outdir, "figure1.png"), dpi=110)
    plt.close(fig)
    out(f"[1] figure1.png written; fitting the three models took {t_fit:.1f} s")
    mean_field = fit_ctx.history_[fit_ctx.bw_n_iter_:]
    out(f"    Baum-Welch iterations {fit_ctx.bw_n_iter_}, "
        f"mean-field EM iterations {len(mean_field)}")
    out("    training bound per time step, mean-field EM: "
        + " ".join(f"{b / (n_train * T):.4f}" for b in mean_field[:: max(1, len(mean_field) // 8)]))

    # ---- 2. held-out bound per time step ------------------------------------------------
    out()
    out("[2] held-out data generated with context (10 sequences x 200 steps), nats per time step")
    rows = [
        ("generating context model, structured bound", ctx.score(test_ctx) / N_test),
        ("generating context model, naive bound", ctx.score(test_ctx, method="naive") / N_test),
        ("fitted first-order model, exact log-likelihood", fit_first_on_ctx.score(test_ctx) / N_test),
        ("fitted context model, structured bound", fit_ctx.score(test_ctx) / N_test),
        ("fitted context model, naive bound", fit_ctx.score(test_ctx, method="naive") / N_test),
    ]
    for name, v in rows:
        out(f"    {name:50s} {v: .4f}")

    # ---- 3. gaps on small instances ------------------------------------------------------
    for lag3 in (2, 1):
        out()
        out(f"[3] gaps to the exact ln P(x), n = 3, lag = {lag3}, context both, T = 40, "
            "20 instances each")
        out(f"    {'context scale':>13s} {'structured-exact':>17s} {'naive-exact':>12s} "
            f"{'struct>=naive':>14s} {'min struct-naive':>17s}")
        for cs in (0.1, 0.3, 1.0, 3.0):
            gs, gn = [], []
            for seed in range(20):
                h, X = gap_instance(lag3, cs, seed)
                ex = h.score(X, method="exact")
                gs.append(h.score(X) - ex)
                gn.append(h.score(X, method="naive") - ex)
            gs, gn = np.array(gs), np.array(gn)
            out(f"    {cs:13.1f} {gs.mean():17.4f} {gn.mean():12.4f} {np.sum(gs >= gn):>11d}/20 "
                f"{np.min(gs - gn):17.2e}")

    # ---- 4. timing -----------------------------------------------------------------------
    out()
    out("[4] time per sequence (n = 3, context both, T = 200, one thread), seconds")
    out(f"    {'lag':>3s} {'augmented states':>16s} {'exact':>10s} {'structured':>11s} {'naive':>9s}")
    for L in range(1, 7):
        r2 = np.random.default_rng(7)
        # (the naive iteration crawls on some of these: 142 sweeps to infer_tol at lag 1)
        h = mf.ContextHMM(3, 2, lag=L, context="both", n_threads=1, infer_max_iter=500,
                          max_augmented_states=10**7)
        h.means_ = 2.0 * r2.normal(size=(3, 2))
        A = r2.random((3, 3)) + 2 * np.eye(3)
        h.transmat_ = A / A.sum(1, keepdims=True)
        h.right_means_ = 0.3 * r2.normal(size=(3, 2))
        h.left_means_ = 0.3 * r2.normal(size=(3, 2))
        X, _ = h.sample(200, random_state=0)
        times = {}
        for method in ("exact", "structured", "naive"):
            reps = 1 if method == "exact" and L >= 5 else 5
            t0 = time.perf_counter()
            for _ in range(reps):
                h.score(X, method=method)
            times[method] = (time.perf_counter() - t0) / reps
        out(f"    {L:3d} {3 ** (2 * L + 1):16d} {times['exact']:10.4f} {times['structured']:11.5f} "
            f"{times['naive']:9.5f}")

    missing_frames(out, ctx, train_ctx, test_ctx, n, D, lag, T)


def missing_frames(out, ctx, train_ctx, test_ctx, n=5, D=2, lag=5, T=200):
    """Part 5: fitting and decoding with missing frames."""
    rng = np.random.default_rng(5)
    N_test = len(test_ctx) * T
    out()
    out("[5] missing frames (rows of NaN, marginalised), data generated with context")
    out("    fitted with a share of the training frames missing: held-out bound, nats per step")
    for frac in (0.0, 0.2, 0.5):
        train = [np.where(rng.random(len(x))[:, None] < frac, np.nan, x) for x in train_ctx]
        m = mf.ContextHMM(n, D, lag=lag, context="both", max_iter=30, random_state=0,
                          progress=False)
        m.fit(train)
        out(f"    {frac:4.0%} missing: {m.score(test_ctx) / N_test: .4f}")
    out("    states under missing frames (20% of the test frames), share decoded right by the "
        "generating model")
    seqs = [ctx.sample(T, random_state=500 + s) for s in range(len(test_ctx))]
    first = mf.ContextHMM(n, D, lag=lag, context="both")
    first.means_, first.transmat_ = ctx.means_, ctx.transmat_   # the context means left out
    first.startprob_ = getattr(ctx, "startprob_", None)
    hits = {"structured Viterbi": [], "naive marginals": [], "first-order Viterbi": []}
    for X, states in seqs:
        miss = rng.random(T) < 0.2
        Xm = np.where(miss[:, None], np.nan, X)
        for name, path in (("structured Viterbi", ctx.decode(Xm)[1]),
                           ("naive marginals", ctx.decode(Xm, method="naive")[1]),
                           ("first-order Viterbi", first.decode(Xm)[1])):
            hits[name].append((path[miss] == states[miss]).mean())
    for name, v in hits.items():
        out(f"    {name:22s} {np.mean(v):.3f}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "hmm_output")
