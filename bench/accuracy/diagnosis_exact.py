"""Exact inference on the diagnosis net: accuracy against an independent junction tree, speed
by number of positive findings, and the mean-field methods' errors against exact.

    python bench/accuracy/diagnosis_exact.py                      # the defaults below
    python bench/accuracy/diagnosis_exact.py --cases 100 --per-k 30 --ks 12,15,18,20,25,30,40,50

The net is ``mf.datasets.make_diagnosis_net(random_state=0)`` (600 diseases, 4,000 findings,
10 parents per finding).  A case is drawn from the net (``net.sample``: a full set of findings,
a few hundred of them positive); K of the sampled positives are kept at random, 300 of the
sampled negatives, and every other finding is unrecorded (NaN).

1. Accuracy: ``--cases`` cases with K drawn uniformly from 12..20.  The oracle is pyAgrum's
   junction tree (``LazyPropagation``) on a net built here from the model's definition: every
   disease adjacent to a recorded finding, with its prior as CPT; the K positive findings as
   nodes with their noisy-OR CPTs written out in full, observed 1.  The 300 negatives are
   absorbed, not entered as nodes (entered as nodes, each would join its ten parents in one
   clique, and the junction tree over 300 such overlapping sets would be far too wide): the
   script sums each disease's weights to the negative findings, s_j, enters the likelihood
   [1, exp(-s_j)] on the disease as soft evidence, and adds -sum h_f of the negatives to
   ln P(e) -- the factorisation P(f = 0 | d) = exp(-h_f) prod_j exp(-W_fj d_j).  Diseases
   adjacent to no recorded finding keep their prior and add nothing to ln P(e); they are
   compared with the prior directly.  Before the run, the oracle builder is checked against
   enumeration over every disease state on small nets of the same kind.
2. Speed: for each K of ``--ks``, ``--per-k`` cases, each solved by its own call of the engine
   on one thread (the call's validation included), ``--repeat`` times with the fastest kept
   (one time above K = 30); median and worst over the cases, the width (diseases in the
   largest table), and how many cases the width limit refused.
3. Mean-field: ``net.infer(X, missing=mask, method=m, n_threads=1)`` on the accuracy cases;
   the diseases' posteriors are the first 600 columns of the result's ``mu``; mean absolute
   error over every disease, over the diseases adjacent to a positive finding, the worst
   single error, and the time per case (one call for all cases, divided by their number).

Run it under ``nice`` on a shared machine; times are wall clock.

Measured 2026-11-28 on a shared 2-core VM (load average about 3), the defaults: ln P(e) and
every marginal agree with pyAgrum to 1.4e-14 and 2.2e-15 on all 100 cases; per case 2.0, 2.9,
3.6, 4.3 ms median (worst 3.0-9.9) for K = 12, 15, 18, 20; 14 ms (worst 80) at K = 25, 36 ms
(worst 1.3 s) at K = 30; at K = 40, 25 of 30 cases need a table over more than 25 diseases.
With ``--ks 33,36,40,45 --seed 1``: 2, 13, 29 and 30 of 30 cases refused.  Mean field against
exact: sjj mean error 0.0034 (0.015 on the diseases adjacent to a positive), worst 0.99;
plefka11 0.0065 / 0.029 / 0.92; plefka12 0.0059 / 0.026 / 1.00.
"""
import os

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_v] = "1"          # one thread, set before NumPy loads its BLAS

import argparse  # noqa: E402
import shlex  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402

import numpy as np  # noqa: E402

import mfengine as mf  # noqa: E402
from mfengine.sbn._exact_noisy_or import bipartite_blocks, exact_bipartite  # noqa: E402


# ---------------------------------------------------------------------------- the cases
def draw_cases(net, ks, n_negative, rng):
    """One evidence row per entry of ``ks``: a case sampled from the net, K of its positives
    kept at random, ``n_negative`` of its negatives, the rest NaN (unrecorded)."""
    rows = []
    for K in ks:
        while True:
            x = net.sample(1, random_state=rng)[0]
            pos, neg = np.flatnonzero(x == 1), np.flatnonzero(x == 0)
            if pos.size >= K and neg.size >= n_negative:
                break
        e = np.full(x.size, np.nan)
        e[rng.choice(pos, K, replace=False)] = 1.0
        e[rng.choice(neg, n_negative, replace=False)] = 0.0
        rows.append(e)
    return np.array(rows)


# ---------------------------------------------------------------------------- the oracle
def pyagrum_oracle(gum, hd, hf, W, e):
    """ln P(e) and P(d_j = 1 | e) for one case by pyAgrum's LazyPropagation (see the module
    docstring); ``W`` dense (n_findings, n_diseases).  Returns also the number of nodes."""
    pos = np.flatnonzero(e == 1)
    neg = np.flatnonzero(e == 0)
    s = W[neg].sum(axis=0)                                # each disease's negative weight
    adjacent = np.flatnonzero((W[pos].sum(axis=0) > 0) | (s > 0))
    bn = gum.BayesNet("case")
    for j in adjacent:
        bn.add(gum.LabelizedVariable(f"d{j}", f"d{j}", 2))
        p1 = -np.expm1(-hd[j])
        bn.cpt(f"d{j}").fillWith([1.0 - p1, p1])
    for f in pos:
        parents = np.flatnonzero(W[f] > 0)
        bn.add(gum.LabelizedVariable(f"f{f}", f"f{f}", 2))
        for j in parents:
            bn.addArc(f"d{j}", f"f{f}")
        cpt = bn.cpt(f"f{f}")
        names = cpt.names                                 # (f, parents in arc order)
        assert names[0] == f"f{f}" and len(names) == parents.size + 1
        w = np.array([W[f, int(n[1:])] for n in names[1:]])
        # the array's axes are the names reversed: last parent first, the finding last
        grids = np.meshgrid(*([np.array([0.0, 1.0])] * parents.size), indexing="ij")
        z = hf[f] + sum(g * wk for g, wk in zip(grids, w[::-1])) if parents.size else \
            np.array(hf[f])
        p_on = -np.expm1(-z)
        table = np.stack([1.0 - p_on, p_on], axis=-1)
        cpt.fillWith(table.ravel().tolist())
        if parents.size:      # spot check of the layout: every parent on
            inst = {n: 1 for n in names}
            want = -np.expm1(-hf[f] - w.sum())
            assert abs(cpt[inst] - want) <= 1e-15 * max(1.0, want)
    ie = gum.LazyPropagation(bn)
    for f in pos:
        ie.addEvidence(f"f{f}", 1)
    for j in adjacent:
        if s[j] > 0:
            ie.addEvidence(f"d{j}", [1.0, float(np.exp(-s[j]))])
    ie.makeInference()
    log_p = -hf[neg].sum() + np.log(ie.evidenceProbability())
    marg = -np.expm1(-hd)                                 # the others keep their prior
    for j in adjacent:
        marg[j] = ie.posterior(f"d{j}")[1]
    return log_p, marg, bn.size()


def enumerate_exact(hd, hf, W, e):
    """ln P(e) and the disease posteriors by summing over every disease state (small nets)."""
    nd = hd.size
    D = ((np.arange(2**nd)[:, None] >> np.arange(nd)) & 1).astype(float)
    lp = np.where(D == 1, np.log(-np.expm1(-hd)), -hd).sum(axis=1)
    z = hf + D @ W.T
    rec = ~np.isnan(e)
    lj = lp + np.where(e[rec] == 1, np.log(-np.expm1(-z[:, rec])), -z[:, rec]).sum(axis=1)
    top = lj.max()
    wts = np.exp(lj - top)
    return top + np.log(wts.sum()), (wts[:, None] * D).sum(axis=0) / wts.sum()


def check_oracle(gum, rng):
    """The pyAgrum builder against enumeration on small diagnosis nets (so that the absorbed
    negatives and the CPT layout are known right before they are trusted at full size)."""
    worst = 0.0
    for seed in range(6):
        small = mf.datasets.make_diagnosis_net(12, 60, 4, random_state=seed)
        b = bipartite_blocks(small.W, small.h, small.visible, small.activation)
        W = b.W_fd.toarray()
        for e in draw_cases(small, [4, 6], 20, rng):
            lp, m, _ = pyagrum_oracle(gum, b.h_disease, b.h_finding, W, e)
            lp0, m0 = enumerate_exact(b.h_disease, b.h_finding, W, e)
            worst = max(worst, abs(lp - lp0), np.abs(m - m0).max())
    if worst > 1e-10:
        raise SystemExit(f"the pyAgrum oracle disagrees with enumeration by {worst:.2e}")
    return worst


# ---------------------------------------------------------------------------- the runs
def time_cases(b, E, max_width, repeat):
    """Solve each case by its own call, ``repeat`` times (the fastest counts: the others are
    slowed by whatever else the machine runs); returns times, widths (-1: refused), ln P and
    marginals.  A case refused for its width is not repeated."""
    n, nd = E.shape[0], b.h_disease.size
    t = np.full(n, np.inf)
    width = np.empty(n, dtype=int)
    log_p = np.full(n, np.nan)
    marg = np.full((n, nd), np.nan)
    for i, e in enumerate(E):
        for _ in range(repeat):
            t0 = time.perf_counter()
            try:
                lp, m, info = exact_bipartite(b.h_disease, b.h_finding, b.W_fd, e[None],
                                              max_width=max_width)
            except ValueError as err:
                if "exact inference needs a table" not in str(err):
                    raise
                t[i] = time.perf_counter() - t0
                width[i] = -1
                break
            t[i] = min(t[i], time.perf_counter() - t0)
            width[i] = info["width"][0]
            log_p[i], marg[i] = lp[0], m[0]
    return t, width, log_p, marg


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", type=int, default=100, help="accuracy cases (K in 12..20)")
    ap.add_argument("--per-k", type=int, default=30, help="timed cases per K")
    ap.add_argument("--ks", default="12,15,18,20,25,30,40,50,60", help="K values to time")
    ap.add_argument("--negatives", type=int, default=300)
    ap.add_argument("--max-width", type=int, default=25)
    ap.add_argument("--seed", type=int, default=0, help="seed of the cases (the net: 0)")
    ap.add_argument("--methods", default="sjj,plefka11,plefka12")
    ap.add_argument("--repeat", type=int, default=3,
                    help="timed calls per case, the fastest kept (K > 30: one)")
    ap.add_argument("--no-oracle", action="store_true", help="skip pyAgrum")
    args = ap.parse_args(argv)
    print("command: python bench/accuracy/diagnosis_exact.py " + shlex.join(sys.argv[1:]))
    print(f"numpy {np.__version__}, mfengine {mf.__version__}, one thread; load average at "
          f"start {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores\n")

    rng = np.random.default_rng(args.seed)
    net = mf.datasets.make_diagnosis_net(random_state=0)
    b = bipartite_blocks(net.W, net.h, net.visible, net.activation)
    nd = b.h_disease.size
    Wd = b.W_fd.toarray()

    # ------------------------------------------------------------- accuracy (K 12..20)
    ks = rng.integers(12, 21, args.cases)
    E = draw_cases(net, ks, args.negatives, rng)
    t, width, log_p, marg = time_cases(b, E, args.max_width, args.repeat)
    lp_b, marg_b, info = exact_bipartite(b.h_disease, b.h_finding, b.W_fd, E,
                                         max_width=args.max_width)
    same = max(np.abs(lp_b - log_p).max(), np.abs(marg_b - marg).max())
    print(f"== exact engine, {args.cases} cases, K uniform in 12..20, {args.negatives} negatives")
    print(f"   per case (own call, fastest of {args.repeat}): median {1e3 * np.median(t):.2f} ms, "
          f"worst "
          f"{1e3 * t.max():.2f} ms (K={ks[t.argmax()]}, width {width[t.argmax()]}); "
          f"width median {np.median(width):.0f}, max {width.max()}")
    print(f"   one call for all cases: {1e3 * info['seconds'].sum() / args.cases:.2f} ms per case; "
          f"largest difference from the per-case calls {same:.1e}")

    if not args.no_oracle:
        import pyagrum as gum
        w = check_oracle(gum, np.random.default_rng(12345))
        print(f"\n== oracle: pyAgrum {gum.__version__} LazyPropagation, negatives absorbed as soft "
              f"evidence (builder checked against enumeration on 12 small cases: {w:.1e})")
        d_lp = np.empty(args.cases)
        d_m = np.empty(args.cases)
        t_o = np.empty(args.cases)
        nodes = np.empty(args.cases, dtype=int)
        for i, e in enumerate(E):
            t0 = time.perf_counter()
            lp_o, m_o, nodes[i] = pyagrum_oracle(gum, b.h_disease, b.h_finding, Wd, e)
            t_o[i] = time.perf_counter() - t0
            d_lp[i] = abs(lp_o - log_p[i])
            d_m[i] = np.abs(m_o - marg[i]).max()
        print(f"   {'K':>3} {'cases':>5} {'max|d lnP|':>11} {'max|d marg|':>12} "
              f"{'ln P(e) range':>18} {'pyAgrum s/case':>15}")
        for K in range(12, 21):
            sel = ks == K
            if sel.any():
                print(f"   {K:>3} {sel.sum():>5} {d_lp[sel].max():>11.1e} {d_m[sel].max():>12.1e} "
                      f"{log_p[sel].min():>8.1f}..{log_p[sel].max():>7.1f} "
                      f"{np.median(t_o[sel]):>15.3f}")
        print(f"   all {args.cases:>5} {d_lp.max():>11.1e} {d_m.max():>12.1e}   (target 1e-9); "
              f"pyAgrum nets of {nodes.min()}..{nodes.max()} nodes, worst "
              f"{t_o.max():.2f} s per case")

    # ------------------------------------------------------------- speed by K
    print(f"\n== time per case by K ({args.per_k} cases each, one call per case, fastest of "
          f"{args.repeat} for K <= 30, one thread, max_width {args.max_width})")
    print(f"   {'K':>3} {'median ms':>10} {'worst ms':>9} {'width med':>9} {'max':>4} "
          f"{'refused':>8}")
    for K in [int(k) for k in args.ks.split(",")]:
        Ek = draw_cases(net, [K] * args.per_k, args.negatives, rng)
        tk, wk, _, _ = time_cases(b, Ek, args.max_width, args.repeat if K <= 30 else 1)
        ok = wk >= 0
        med = f"{1e3 * np.median(tk[ok]):>10.2f}" if ok.any() else f"{'-':>10}"
        worst = f"{1e3 * tk[ok].max():>9.1f}" if ok.any() else f"{'-':>9}"
        wmed = f"{np.median(wk[ok]):>9.0f}" if ok.any() else f"{'-':>9}"
        wmax = f"{wk[ok].max():>4}" if ok.any() else f"{'-':>4}"
        print(f"   {K:>3} {med} {worst} {wmed} {wmax} {(~ok).sum():>4}/{args.per_k}")
        if not ok.any():
            break

    # ------------------------------------------------------------- mean field vs exact
    print(f"\n== mean-field posteriors against exact ({args.cases} accuracy cases)")
    print(f"   {'method':>9} {'mean|err|':>10} {'adj. to pos':>12} {'worst':>7} {'ms/case':>8} "
          f"{'converged':>9}")
    X = np.nan_to_num(E)
    mask = np.isnan(E)
    adj = np.zeros((args.cases, nd), dtype=bool)
    for i, e in enumerate(E):
        adj[i, b.W_fd[np.flatnonzero(e == 1)].indices] = True
    for method in args.methods.split(","):
        with warnings.catch_warnings(record=True):
            warnings.simplefilter("always")
            t0 = time.perf_counter()
            r = net.infer(X, missing=mask, method=method, n_threads=1, progress=False)
            tm = (time.perf_counter() - t0) / args.cases
        err = np.abs(np.asarray(r.mu)[:, :nd] - marg)
        print(f"   {method:>9} {err.mean():>10.4f} {err[adj].mean():>12.4f} {err.max():>7.3f} "
              f"{1e3 * tm:>8.2f} {r.converged.mean():>9.0%}")


if __name__ == "__main__":
    main()
