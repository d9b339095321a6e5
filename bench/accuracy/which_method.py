"""Which method when: every inference method of every family against the exact answer (where
it is computable) or an importance-sampled ln P(x), with its time.

    python bench/accuracy/which_method.py            # about 3-6 minutes on 2 cores
    python bench/accuracy/which_method.py --quick    # fewer patterns and cases (about 1 min)
    python bench/accuracy/which_method.py --markdown # the table as Markdown (for the docs)

Workloads (each scored on held-out data; one thread, so that the times compare):

* **digits**: a 4-12-64 sigmoid belief net trained on scikit-learn's 8x8 digits
  (``mf.datasets.load_binary_digits``), small enough (16 hidden units) for exact ln P(x) and
  exact posteriors by enumeration.  Error of ln P(x) (the bound minus exact, nats per image)
  and of the hidden units' posterior means.
* **diagnosis, tractable**: ``mf.datasets.make_diagnosis_net()`` (600 diseases, 4,000
  findings), cases with 12-18 positive findings, 300 negative, the rest unrecorded; exact by
  ``method="exact"``.  Error of ln P(x) and of the disease posteriors (mean over the diseases
  adjacent to a positive finding; the worst single disease).
* **diagnosis, full**: full sampled cases (every finding recorded, about 230 positive):
  beyond exact; the gap to an importance-sampled ln P(x) (AIS, with its standard error) and how
  often a method contradicts the certified lower bound.
* **context HMM**: a 3-state, lag-2 ContextHMM with context on both sides; exact ln P(X) by
  forward-backward over the augmented state (``score(method="exact")``).
* **NLGBN**: a binary-rectified-linear net on noisy continuous bars; no exact answer: the gap
  to an importance-sampled ln P(x), and the mean-field posterior means' distance from the
  importance-sampled ones (``posterior_marginals``), in posterior standard deviations.

Every figure is computed in the run that prints it.
"""
import argparse
import os
import sys
import time
import warnings

import numpy as np

import mfengine as mf

RESULTS = []


def timed(f, *a, **k):
    t0 = time.perf_counter()
    out = f(*a, **k)
    return out, time.perf_counter() - t0


def row(workload, method, what, err, per, unit, note=""):
    RESULTS.append(dict(workload=workload, method=method, what=what, err=err, per=per,
                        unit=unit, note=note))
    print(f"  {method:<10} {what:<38} {err:<28} {per * 1e3:9.3f} ms/{unit}  {note}", flush=True)


def digits(n_test):
    print("\n[digits] 4-12-64 sigmoid belief net, 8x8 binarised digits", flush=True)
    Xtr, Xte, _, _ = mf.datasets.load_binary_digits()
    net = mf.SigmoidBeliefNet([4, 12, 64], max_iter=20, learning_rate=0.05, batch_size=10,
                              random_state=0, progress=False, n_threads=1)
    net.fit(Xtr)
    X = Xte[:n_test]
    exact = net.exact_log_likelihood(X)
    dag = net.to_dag()
    post = dag.infer(X, method="exact").mu[:, :16]
    for m in ("gaussian", "sjj", "plefka11", "plefka12", "plefka22"):
        r, dt = timed(net.infer, X, method=m, n_threads=1)
        mu = np.concatenate(r.mu[:-1], axis=1)
        d = r.bound - exact
        row("digits", m, "ln P error (mean, min..max)", f"{d.mean():+.3f} ({d.min():+.2f}..{d.max():+.2f})",
            dt / len(X), "image", f"posterior means: mean |err| {np.abs(mu - post).mean():.4f}")
    for m, k in (("importance", 1000), ("ais", 100)):
        e, dt = timed(net.log_likelihood, X, n_samples=k, method=m, random_state=0,
                      n_threads=1)
        d = e.estimate - exact
        row("digits", m, f"ln P error (K={k}; mean SE)", f"{d.mean():+.4f} (SE {e.stderr.mean():.4f})",
            dt / len(X), "image")
    r, dt = timed(dag.infer, X, method="exact")
    row("digits", "exact", "ln P (enumeration, 2**16 states)", "0 (reference)", dt / len(X), "image")


def diagnosis_cases(net, n, k_range, seed):
    """Cases with K positives (K drawn from k_range), 300 negatives, the rest unrecorded."""
    rng = np.random.default_rng(seed)
    X = net.sample(n, random_state=seed)
    miss = np.ones(X.shape, dtype=bool)
    for i in range(n):
        pos, neg = np.flatnonzero(X[i] == 1), np.flatnonzero(X[i] == 0)
        k = min(int(rng.integers(k_range[0], k_range[1] + 1)), pos.size)
        miss[i, rng.choice(pos, k, replace=False)] = False
        miss[i, rng.choice(neg, min(300, neg.size), replace=False)] = False
    return X, miss


def diagnosis(n_cases, n_full):
    print("\n[diagnosis] 600 diseases, 4,000 findings (make_diagnosis_net(random_state=0))",
          flush=True)
    net = mf.datasets.make_diagnosis_net(random_state=0)
    net.set_params(n_threads=1, progress=False)
    X, miss = diagnosis_cases(net, n_cases, (12, 18), seed=1)
    ref, dt_exact = timed(net.infer, X, miss, method="exact")
    W = net.W.tocsr()
    nd = 600
    for m in ("sjj", "plefka11", "plefka12"):
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            r, dt = timed(net.infer, X, miss, method=m)
        errs, adj = [], []
        for i in range(len(X)):
            pos = np.flatnonzero((X[i] == 1) & ~miss[i]) + nd
            near = np.unique(W[pos].indices)
            e = np.abs(r.mu[i, :nd] - ref.mu[i, :nd])
            errs.append(e.max())
            adj.append(e[near].mean())
        d = r.bound - ref.bound
        contradicted = int((~r.converged).sum())
        row("diagnosis 12-18 pos.", m, "disease posterior: worst / adjacent",
            f"{max(errs):.3f} / {np.mean(adj):.4f}", dt / len(X), "case",
            f"ln P error {d.mean():+.2f}; not converged or contradicted: {contradicted}/{len(X)}")
    row("diagnosis 12-18 pos.", "exact", "junction tree", "0 (reference)", dt_exact / len(X), "case")
    # full cases
    Xf = net.sample(n_full, random_state=7)
    ais, dt_ais = timed(net.log_likelihood, Xf, n_samples=200, method="ais", n_steps=200,
                        random_state=0)
    for m in ("sjj", "plefka11", "plefka12"):
        with warnings.catch_warnings(record=True):
            warnings.simplefilter("always")
            r, dt = timed(net.infer, Xf, method=m)
        d = r.bound - ais.estimate
        sat = np.mean((r.mu[:, :nd] < 1e-6) | (r.mu[:, :nd] > 1 - 1e-6))
        row("diagnosis full (~230 pos.)", m, "gap to AIS ln P (mean)", f"{d.mean():+.1f} nats",
            dt / len(Xf), "case",
            f"contradicts the certified bound: {int((~r.converged).sum())}/{len(Xf)}; "
            f"posteriors saturated: {sat:.0%}")
    row("diagnosis full (~230 pos.)", "ais", "ln P (200 chains x 200 steps)",
        f"SE {ais.stderr.mean():.2f} nats", dt_ais / len(Xf), "case")


def hmm(T):
    print("\n[context HMM] 3 states, 2 features, lag 2, context both", flush=True)
    h = mf.ContextHMM(n_states=3, n_features=2, lag=2, context="both", init_params="",
                      n_threads=1, progress=False)
    rng = np.random.default_rng(0)
    h.startprob_ = np.full(3, 1 / 3)
    h.transmat_ = np.array([[0.8, 0.1, 0.1], [0.1, 0.8, 0.1], [0.1, 0.1, 0.8]])
    h.means_ = np.array([[-2.0, 0.0], [0.0, 2.0], [2.0, 0.0]])
    h.right_means_ = rng.normal(0, 0.7, (3, 2))
    h.left_means_ = rng.normal(0, 0.7, (3, 2))
    X, states = h.sample(T, random_state=1)
    exact, dt_ex = timed(h.score, X, method="exact")
    for m in ("structured", "naive"):
        b, dt = timed(h.score, X, method=m)
        acc = np.mean(h.predict(X, method=m) == states)
        row("context HMM", m, "ln P error (nats per step)", f"{(b - exact) / T:+.4f}", dt / T,
            "step", f"state accuracy {acc:.3f}")
    row("context HMM", "exact", "augmented-state forward-backward", "0 (reference)", dt_ex / T,
        "step")


def nlgbn(n):
    print("\n[NLGBN] 1-16-36 binary-rectified-linear, noisy continuous bars", flush=True)
    Xtr = mf.datasets.make_continuous_bars(1000, noisy=True, random_state=0)
    Xte = mf.datasets.make_continuous_bars(n, noisy=True, random_state=1)
    g = mf.NLGBN([1, 16, 36], units=["binary", "rectified", "linear"], max_iter=30,
                 random_state=0, progress=False, n_threads=1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        g.fit(Xtr)
    est, dt_is = timed(g.log_likelihood, Xte, n_samples=2000, random_state=0)
    b, dt = timed(g.score_samples, Xte)
    row("NLGBN", "nlgbn", "bound minus IS ln P (mean)", f"{(b - est.estimate).mean():+.3f} nats",
        dt / n, "pattern")
    row("NLGBN", "importance", "ln P (K=2000)", f"SE {est.stderr.mean():.4f}", dt_is / n,
        "pattern")
    # posterior means of the hidden pre-activations: infer's Gaussian q against the sampled
    # marginals (consistent for the exact posterior), in units of the posterior's own sd
    pm, dt_pm = timed(g.posterior_marginals, Xte, n_samples=2000, random_state=1)
    r = g.infer(Xte)
    H = sum(g.sizes[:-1])
    mu_q = np.concatenate(r.mu[:-1], axis=1)
    z = np.abs(mu_q - pm.mean[:, :H]) / pm.sd[:, :H]
    row("NLGBN", "nlgbn", "hidden posterior means vs IS: abs(mu_q - mean) / sd (mean, max)",
        f"{z.mean():.3f}, {z.max():.2f} (IS SE/sd {np.mean(pm.stderr[:, :H] / pm.sd[:, :H]):.3f})",
        dt / n, "pattern")
    row("NLGBN", "posterior_marginals", "hidden means and sds (K=2000)",
        f"SE/sd {np.mean(pm.stderr[:, :H] / pm.sd[:, :H]):.3f}", dt_pm / n, "pattern")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer patterns and cases")
    ap.add_argument("--markdown", action="store_true", help="also print a Markdown table")
    args = ap.parse_args(argv)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    q = args.quick
    print(f"which_method: {time.strftime('%Y-%m-%d')}, mfengine {mf.__version__}, "
          f"load {os.getloadavg()[0]:.1f}", flush=True)
    digits(100 if q else 400)
    diagnosis(10 if q else 40, 3 if q else 10)
    hmm(300 if q else 1000)
    nlgbn(100 if q else 500)
    if args.markdown:
        print("\n| workload | method | measure | error | time | note |\n|---|---|---|---|---|---|")
        for r in RESULTS:
            print(f"| {r['workload']} | {r['method']} | {r['what']} | {r['err']} | "
                  f"{r['per'] * 1e3:.3f} ms per {r['unit']} | {r['note']} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
