"""Workload 1: medical-diagnosis-style inference on a QMR-DT-shaped noisy-OR net (issue 12).

    python examples/diagnosis_workload.py                      # the default run (a few minutes)
    python examples/diagnosis_workload.py --quick              # a small smoke run
    python examples/diagnosis_workload.py --out diag_output --cases 20 --subnets 20 --sweeps 4000

The net is ``mf.datasets.make_diagnosis_net(600, 4000, 10)``: 600 diseases (roots, prior
probabilities 0.001-0.02), 4,000 findings, each with 10 random parent diseases (links
0.05-0.95, leaks 0.005-0.01).  A *case* is drawn from the net's own generative model
conditioned on a few present diseases (1 to ``--max-present``, all others absent): the findings
are sampled given those diseases, so a case has a few dozen positive and thousands of negative
findings.  For each case the script computes the posterior probability of every disease

* by mean field: ``net.infer(x, method="sjj")`` (the strict lower bound of Saul, Jaakkola &
  Jordan, coordinate ascent), the marginals being the variational means ``mu``;
* (a) on sub-networks of ``--sub-diseases`` (<= 20) diseases with ALL their findings (the
  edges from the other diseases dropped), exactly, by enumerating the 2^20 disease
  configurations in vectorised NumPy chunks.  Negative findings factorise over diseases
  (ln P(f=0 | d) = -leak - sum_j w_fj d_j), so they fold into each disease's prior odds; only
  the positive findings are evaluated per configuration;
* (b) at full size, by a long Gibbs sampler (NumPy, vectorised over ``--chains`` independent
  chains).  The negative findings are folded in exactly as above; diseases with no positive
  finding are then independent a posteriori and their marginals are exact; the others are
  updated by a chromatic (graph-coloured) Gibbs sweep: diseases that share no positive finding
  are conditionally independent and are drawn at once.  Its Monte Carlo error is the standard
  error of the marginal across the independent chains (each chain's own average, so
  autocorrelation is accounted for).  The same sampler also runs on the sub-networks, where
  its error against the exact answer is shown.

Each case is run in regimes by ``--observe``: q=1, every finding observed (the cases are then
nearly certain: a present disease shows about 30 positive findings, so the posterior sits at 0
or 1), and q<1, each finding recorded with probability q and the others unrecorded, which leaves
the posterior genuinely uncertain.  With q<1 the mean field runs two ways: through the public
``missing=`` mask on the full net, and on a net holding only the observed findings (an
unobserved noisy-OR finding drops out of the joint exactly, so both are the same problem).

The table gives the mean absolute error of the marginals (over all diseases, and over the
diseases linked to a positive finding, where the inference problem actually is), the largest
error, how often the top-ranked disease agrees with the reference (the disease the method ranks
first has a reference marginal within 0.01 of the reference's largest, so ties at 1.0 count
as agreement), and the time per case.
A figure (mean field vs reference marginals) goes to ``--out``.  Jaakkola & Jordan (1999)
reported "under a second" per QMR-DT case.
"""
import argparse
import os
import sys
import time
import warnings

import numpy as np
import scipy.sparse as sp

import mfengine as mf


# ----------------------------------------------------------------------- the model's pieces
def net_parts(net, n_diseases):
    """(disease biases, finding-by-disease weights as CSR, finding leaks) of a bipartite net."""
    W = sp.csr_matrix(net.W)
    h = np.asarray(net.h, dtype=np.float64)
    return h[:n_diseases].copy(), W[n_diseases:, :n_diseases].tocsr(), h[n_diseases:].copy()


def log1mexp(z):
    """ln(1 - e^{-z}) for z > 0, stably."""
    return np.where(z > 0.6931471805599453, np.log1p(-np.exp(-z)), np.log(-np.expm1(-z)))


def draw_case(hd, Wf, hf, rng, max_present):
    """Findings of a case with 1..max_present present diseases (the others absent)."""
    n_d = hd.size
    k = int(rng.integers(1, max_present + 1))
    present = np.sort(rng.choice(n_d, size=k, replace=False))
    d = np.zeros(n_d)
    d[present] = 1.0
    z = hf + Wf @ d
    x = (rng.random(hf.size) < -np.expm1(-z)).astype(np.float64)
    return x, present


def fold_negatives(hd, Wf, hf, x, observed=None):
    """Fold the negative findings into the diseases' log prior odds.

    Findings not ``observed`` are left out (a noisy-OR finding summed over its two values
    drops out of the joint exactly).

    Returns (a, Wp, hp, const): ``a`` the log odds of each disease given the negative findings
    alone, ``Wp``/``hp`` the weights and leaks of the positive findings, and ``const`` the
    configuration-independent part of ln P(findings, all diseases absent) so that
    ln P(x, d) = const + a.d + sum_pos ln(1 - exp(-(hp + Wp d))).
    """
    obs = np.ones(x.size, dtype=bool) if observed is None else observed
    pos = (x > 0.5) & obs
    neg = (x <= 0.5) & obs
    a = np.log(np.expm1(hd)) - np.asarray(Wf[neg].sum(axis=0)).ravel()
    const = -hd.sum() - hf[neg].sum()
    return a, Wf[pos].tocsr(), hf[pos].copy(), const


# ----------------------------------------------------------------------- exact enumeration
def exact_posterior(a, Wp, hp, const, chunk=1 << 16):
    """Exact disease marginals and ln P(findings) by enumerating all 2^n configurations."""
    n = a.size
    if n > 24:
        raise ValueError(f"{n} diseases are too many to enumerate")
    Wd = np.ascontiguousarray(Wp.toarray().T)          # (n, n_pos)
    shifts = np.arange(n, dtype=np.int64)
    total = 1 << n
    m, s, sd = -np.inf, 0.0, np.zeros(n)
    for start in range(0, total, chunk):
        idx = np.arange(start, min(start + chunk, total), dtype=np.int64)
        bits = ((idx[:, None] >> shifts) & 1).astype(np.float64)
        lp = bits @ a + log1mexp(hp + bits @ Wd).sum(axis=1)
        mc = lp.max()
        if mc > m:
            scale = np.exp(m - mc) if np.isfinite(m) else 0.0
            s, sd, m = s * scale, sd * scale, mc
        w = np.exp(lp - m)
        s += w.sum()
        sd += w @ bits
    return sd / s, const + m + np.log(s)


# ----------------------------------------------------------------------- Gibbs sampler
def _colour(Wp_act):
    """Greedy colouring of the diseases so that no two of one colour share a positive finding."""
    B = (Wp_act != 0).astype(np.int32)
    conflict = (B.T @ B).tocsr()
    n = conflict.shape[0]
    colour = -np.ones(n, dtype=np.int64)
    order = np.argsort(-np.diff(conflict.indptr), kind="stable")
    for j in order:
        nb = conflict.indices[conflict.indptr[j]:conflict.indptr[j + 1]]
        used = set(colour[nb][colour[nb] >= 0].tolist())
        c = 0
        while c in used:
            c += 1
        colour[j] = c
    return colour


def gibbs_posterior(a, Wp, hp, n_chains=256, n_sweeps=2000, burn_in=500, rng=None):
    """Disease marginals by chromatic Gibbs sampling, vectorised over independent chains.

    Returns (marginals, standard errors, number of colours, number of sampled diseases).
    """
    rng = np.random.default_rng(rng)
    n = a.size
    p0 = 1.0 / (1.0 + np.exp(-a))            # exact for diseases with no positive finding
    marg, se = p0.copy(), np.zeros(n)
    active = np.unique(Wp.indices)
    if active.size == 0:
        return marg, se, 0, 0
    Wa = Wp[:, active].tocsc()
    aa = a[active]
    colour = _colour(Wa)
    groups = []
    for c in range(colour.max() + 1):
        cols = np.flatnonzero(colour == c)
        sub = Wa[:, cols].tocoo()               # edges (finding f, local disease, weight)
        inc = sp.csr_matrix((np.ones(sub.nnz), (np.arange(sub.nnz), sub.col)),
                            shape=(sub.nnz, cols.size))
        groups.append((cols, sub.row.astype(np.intp), sub.col.astype(np.intp), sub.data,
                       inc, Wa[:, cols].T.tocsr()))
    D = (rng.random((n_chains, active.size)) < 1.0 / (1.0 + np.exp(-aa))).astype(np.float64)
    Z = hp + (Wa @ D.T).T                        # (chains, n_pos) noisy-OR inputs
    acc = np.zeros_like(D)
    for sweep in range(n_sweeps):
        for cols, f, jl, w, inc, WcT in groups:
            Dc = D[:, cols]
            zm = Z[:, f] - w * Dc[:, jl]         # input of finding f without this disease
            term = log1mexp(zm + w) - log1mexp(zm)
            llr = aa[cols] + (inc.T @ term.T).T
            new = (rng.random(Dc.shape) < 1.0 / (1.0 + np.exp(-llr))).astype(np.float64)
            delta = new - Dc
            if delta.any():
                Z += (WcT.T @ delta.T).T
                D[:, cols] = new
        if sweep >= burn_in:
            acc += D
    per_chain = acc / (n_sweeps - burn_in)
    marg[active] = per_chain.mean(axis=0)
    se[active] = per_chain.std(axis=0, ddof=1) / np.sqrt(n_chains)
    return marg, se, int(colour.max() + 1), int(active.size)


# ----------------------------------------------------------------------- mean field
def mean_field(net, x, n_diseases, observed=None):
    """Disease marginals and bound by the sjj mean field, one case, one thread; and its time."""
    missing = None if observed is None else ~observed[None, :]
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", mf.ConvergenceWarning)
        r = net.infer(x[None, :], missing, method="sjj", n_threads=1, progress=False)
    dt = time.perf_counter() - t0
    return (r.mu[0, :n_diseases].copy(), float(r.bound[0]), bool(r.converged[0]),
            int(r.n_iter[0]), dt)


def bipartite_net(hd, Wf, hf):
    """A noisy-OR BeliefNet: the diseases (biases ``hd``), then the findings (``Wf``, ``hf``)."""
    k, m = hd.size, hf.size
    W = sp.bmat([[sp.csr_matrix((k, k)), None], [sp.csr_matrix(Wf), sp.csr_matrix((m, m))]],
                format="csr")
    visible = np.zeros(k + m, dtype=bool)
    visible[k:] = True
    return mf.BeliefNet(W, np.concatenate([hd, hf]), visible, activation="noisy_or",
                        progress=False, n_threads=1)


def subnetwork(hd, Wf, hf, diseases):
    """The sub-network of ``diseases`` with all their findings (edges from others dropped)."""
    Wcols = Wf[:, diseases].tocsr()
    findings = np.flatnonzero(np.diff(Wcols.indptr) > 0)
    Wsub = Wcols[findings].tocsr()
    return hd[diseases].copy(), Wsub, hf[findings].copy()


# ----------------------------------------------------------------------- report
class Stats:
    def __init__(self):
        self.rows = []

    def add(self, ref, est, linked, t_est, t_ref):
        err = np.abs(est - ref)
        self.rows.append(dict(mae=err.mean(),
                              mae_linked=err[linked].mean() if linked.any() else 0.0,
                              max=err.max(),
                              # top-1 agreement, tolerant to ties at the top of the reference
                              top=int(ref[np.argmax(est)] >= ref.max() - 0.01),
                              t_est=t_est, t_ref=t_ref))

    def summary(self):
        g = lambda k: np.array([x[k] for x in self.rows])  # noqa: E731
        return dict(n=len(self.rows), mae=g("mae").mean(), mae_linked=g("mae_linked").mean(),
                    max=g("max").max(), top=g("top").mean(), t_est=np.median(g("t_est")),
                    t_ref=np.median(g("t_ref")))


def plot(path, panels):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ncol = 2
    nrow = (len(panels) + ncol - 1) // ncol
    fig, axes = plt.subplots(nrow, ncol, figsize=(5.2 * ncol, 5 * nrow), squeeze=False)
    for ax in axes.ravel()[len(panels):]:
        ax.axis("off")
    for ax, (title, ref, series, err) in zip(axes.ravel(), panels):
        ref = np.concatenate(ref)
        if err is not None:
            err = np.concatenate(err)
        for (label, est), mk in zip(series.items(), ("o", "x", "s")):
            est = np.concatenate(est)
            if err is not None:
                ax.errorbar(ref, est, xerr=2 * err, fmt="none", ecolor="0.75", lw=0.8, zorder=1)
            ax.scatter(ref, est, s=14, alpha=0.6, marker=mk, label=label, zorder=2)
        ax.plot([0, 1], [0, 1], "k--", lw=0.8)
        ax.set_xlim(-0.02, 1.02)
        ax.set_ylim(-0.02, 1.02)
        ax.set_xlabel("reference posterior P(disease | findings)")
        ax.set_ylabel("mean-field (sjj) marginal")
        ax.set_title(title, fontsize=9)
        ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def run_regime(q, net, hd, Wf, hf, args, rng, log):
    """Sub-network cases (exact) and full-size cases (Gibbs) with a fraction ``q`` of the
    findings observed.  Returns the table rows, the notes and the figure panels."""
    partial = q < 1.0
    variants = ("missing=", "restricted net") if partial else ("",)
    label = {"": "mf", "missing=": "mf, missing= mask", "restricted net": "mf, observed-only net"}

    def observe(n):
        return np.ones(n, dtype=bool) if not partial else rng.random(n) < q

    def mf_variants(full_net, shd, sW, shf, x, obs, n_dis):
        out = {}
        for v in variants:
            if v == "restricted net":
                F = np.flatnonzero(obs)
                out[v] = mean_field(bipartite_net(shd, sW[F], shf[F]), x[F], n_dis)
            else:
                out[v] = mean_field(full_net, np.where(obs, x, 0.0), n_dis,
                                    obs if partial else None)
        return out

    rows, notes, panels = [], [], []
    # ------------------------------------------------ (a) sub-networks against exact enumeration
    st = {v: Stats() for v in variants}
    st_g = Stats()
    ref_s, est_s = [], {v: [] for v in variants}
    gaps, npos, nobs = [], [], []
    for s in range(args.subnets):
        diseases = np.sort(rng.choice(args.diseases, args.sub_diseases, replace=False))
        shd, sW, shf = subnetwork(hd, Wf, hf, diseases)
        snet = bipartite_net(shd, sW, shf)
        x, present = draw_case(shd, sW, shf, rng, args.max_present)
        obs = observe(x.size)
        a, Wp, hp, const = fold_negatives(shd, sW, shf, x, obs)
        t1 = time.perf_counter()
        exact, lnp = exact_posterior(a, Wp, hp, const)
        t_exact = time.perf_counter() - t1
        res = mf_variants(snet, shd, sW, shf, x, obs, args.sub_diseases)
        t1 = time.perf_counter()
        gm, gse, _, _ = gibbs_posterior(a, Wp, hp, args.chains, args.sweeps, args.burn_in,
                                        rng=rng.integers(2**32))
        t_g = time.perf_counter() - t1
        linked = np.zeros(args.sub_diseases, dtype=bool)
        linked[np.unique(Wp.indices)] = True
        for v in variants:
            mu, bound, conv, nit, t_mf = res[v]
            st[v].add(exact, mu, linked, t_mf, t_exact)
            est_s[v].append(mu)
        st_g.add(exact, gm, linked, t_g, t_exact)
        ref_s.append(exact)
        b0 = res[variants[-1]][1]
        gaps.append(lnp - b0)
        npos.append(int((x * obs).sum()))
        nobs.append(int(obs.sum()))
        log(f"  sub-net {s}: {args.sub_diseases} diseases, {x.size} findings, {int(obs.sum())} "
            f"observed ({npos[-1]} positive), present {present.tolist()}: exact "
            f"{t_exact * 1e3:.0f} ms; ln P(x) - sjj bound {lnp - b0:.3f} nats; MAE "
            + ", ".join(f"{label[v]} {st[v].rows[-1]['mae']:.4f}" for v in variants)
            + f", Gibbs {st_g.rows[-1]['mae']:.4f}")
    if args.subnets:
        for v in variants:
            rows.append((f"sub-nets, {label[v]} vs exact", st[v], "ms", "ms"))
        rows.append(("sub-nets, Gibbs vs exact", st_g, "s", "ms"))
        notes.append(f"sub-nets ({args.sub_diseases} diseases, all their findings): "
                     f"{np.mean(nobs):.0f} observed findings, {np.mean(npos):.1f} positive per "
                     f"case on average; ln P(x) - sjj bound (observed-only net): mean "
                     f"{np.mean(gaps):.3f}, max {np.max(gaps):.3f}, min {np.min(gaps):.1e} nats")
        panels.append((f"q={q:g}: {args.subnets} sub-networks ({args.sub_diseases} diseases) vs "
                       f"exact enumeration", ref_s, {label[v]: est_s[v] for v in variants}, None))

    # ------------------------------------------------ (b) full size against Gibbs
    st = {v: Stats() for v in variants}
    ref_f, est_f, err_f = [], {v: [] for v in variants}, []
    npos, nobs, ses, ncol, nact, Xb, Ob = [], [], [], [], [], [], []
    for c in range(args.cases):
        x, present = draw_case(hd, Wf, hf, rng, args.max_present)
        obs = observe(x.size)
        a, Wp, hp, const = fold_negatives(hd, Wf, hf, x, obs)
        res = mf_variants(net, hd, Wf, hf, x, obs, args.diseases)
        t1 = time.perf_counter()
        gm, gse, n_colours, n_active = gibbs_posterior(a, Wp, hp, args.chains, args.sweeps,
                                                       args.burn_in, rng=rng.integers(2**32))
        t_g = time.perf_counter() - t1
        linked = np.zeros(args.diseases, dtype=bool)
        linked[np.unique(Wp.indices)] = True
        for v in variants:
            st[v].add(gm, res[v][0], linked, res[v][4], t_g)
            est_f[v].append(res[v][0])
        ref_f.append(gm)
        err_f.append(gse)
        npos.append(int((x * obs).sum()))
        nobs.append(int(obs.sum()))
        ses.append(gse.max())
        ncol.append(n_colours)
        nact.append(n_active)
        Xb.append(np.where(obs, x, 0.0))
        Ob.append(obs)
        top_g = np.argsort(-gm)[:3]
        log(f"  case {c}: {int(obs.sum())} observed findings ({npos[-1]} positive), present "
            f"{present.tolist()}; Gibbs {t_g:.1f} s ({n_active} linked diseases, {n_colours} "
            f"colours, max MC s.e. {gse.max():.4f}); top-3 by Gibbs {top_g.tolist()} "
            f"{np.round(gm[top_g], 3).tolist()}; "
            + "; ".join(f"{label[v]} {np.round(res[v][0][top_g], 3).tolist()} "
                        f"({res[v][4] * 1e3:.1f} ms, {res[v][3]} sweeps"
                        f"{'' if res[v][2] else ', NOT converged'})" for v in variants))
    if args.cases:
        for v in variants:
            rows.append((f"full {args.diseases}x{args.findings}, {label[v]} vs Gibbs", st[v],
                         "ms", "s"))
        notes.append(f"full size: {np.mean(nobs):.0f} observed findings, {np.mean(npos):.1f} "
                     f"positive per case on average; Gibbs {args.chains} chains x {args.sweeps} "
                     f"sweeps ({args.burn_in} burn-in) over {np.mean(nact):.0f} linked diseases "
                     f"({np.mean(ncol):.0f} colours); largest MC s.e. of any marginal "
                     f"{np.max(ses):.4f} (mean of the per-case largest {np.mean(ses):.4f})")
        Xb, Ob = np.array(Xb), np.array(Ob)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", mf.ConvergenceWarning)
            t1 = time.perf_counter()
            net.infer(Xb, ~Ob if partial else None, method="sjj", n_threads=1)
            t_batch = (time.perf_counter() - t1) / len(Xb)
        notes.append(f"mean field on all {len(Xb)} full-size cases in ONE net.infer call"
                     f"{' (missing= mask)' if partial else ''}: {t_batch * 1e3:.2f} ms per case "
                     f"(one thread)")
        panels.append((f"q={q:g}: {args.cases} full-size cases ({args.diseases} diseases) vs "
                       f"Gibbs (bars 2 s.e.)", ref_f, {label[v]: est_f[v] for v in variants},
                       err_f))
    return rows, notes, panels


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="diagnosis_output", help="directory for the figure")
    ap.add_argument("--diseases", type=int, default=600)
    ap.add_argument("--findings", type=int, default=4000)
    ap.add_argument("--parents", type=int, default=10)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--cases", type=int, default=10, help="full-size cases per regime (Gibbs)")
    ap.add_argument("--subnets", type=int, default=10, help="sub-network cases per regime (exact)")
    ap.add_argument("--sub-diseases", type=int, default=20, help="diseases per sub-network (<= 24)")
    ap.add_argument("--max-present", type=int, default=3, help="most present diseases per case")
    ap.add_argument("--observe", default="1,0.3,0.1",
                    help="comma-separated fractions q of the findings observed in a case (the "
                         "others unrecorded, marginalised); one regime each (default 1,0.3,0.1)")
    ap.add_argument("--chains", type=int, default=128)
    ap.add_argument("--sweeps", type=int, default=1500, help="Gibbs sweeps per chain")
    ap.add_argument("--burn-in", type=int, default=300)
    ap.add_argument("--quick", action="store_true", help="a small smoke run")
    args = ap.parse_args(argv)
    if args.quick:
        args.cases, args.subnets, args.sub_diseases = 2, 2, 12
        args.chains, args.sweeps, args.burn_in = 64, 300, 100
    qs = [float(v) for v in args.observe.split(",")]
    if not all(0.0 < q <= 1.0 for q in qs):
        ap.error("--observe fractions must lie in (0, 1]")
    if not 1 <= args.sub_diseases <= 24:
        ap.error("--sub-diseases must lie in 1..24")
    os.makedirs(args.out, exist_ok=True)
    rng = np.random.default_rng(args.seed)

    def log(s=""):
        print(s, flush=True)

    t0 = time.perf_counter()
    net = mf.datasets.make_diagnosis_net(args.diseases, args.findings, args.parents,
                                         random_state=args.seed)
    net.set_params(progress=False, n_threads=1)
    hd, Wf, hf = net_parts(net, args.diseases)
    log(f"net: {args.diseases} diseases, {args.findings} findings, {Wf.nnz} edges "
        f"(make_diagnosis_net, seed {args.seed}), built in {time.perf_counter() - t0:.2f} s")
    log(f"cases: 1..{args.max_present} present diseases, the others absent, findings drawn from "
        f"the net; a fraction q of them observed; mean field = net.infer(x, method='sjj'), one "
        f"case per call, one thread, infer_tol={net.infer_tol:g}")
    all_rows, all_notes, all_panels = [], [], []
    for q in qs:
        log()
        what = ("all findings observed" if q == 1 else
                f"each finding observed with probability {q:g}")
        log(f"regime q={q:g} ({what})")
        rows, notes, panels = run_regime(q, net, hd, Wf, hf, args, rng, log)
        all_rows.append((q, rows))
        all_notes.append((q, notes))
        all_panels += panels

    log()
    log("Posterior disease marginals: mean field (sjj) vs reference; time per case (median; "
        "mean field: one net.infer call per case, one thread)")
    hdr = (f"{'q':>4}  {'setting':<44}{'cases':>6}{'MAE all':>9}{'MAE linked':>11}{'max err':>9}"
           f"{'top-1 agree':>12}{'t method':>11}{'t ref':>9}")
    log(hdr)
    log("-" * len(hdr))
    for q, rows in all_rows:
        for name, st, ue, ur in rows:
            s = st.summary()
            fe = f"{s['t_est'] * 1e3:.1f} ms" if ue == "ms" else f"{s['t_est']:.1f} s"
            fr = f"{s['t_ref'] * 1e3:.0f} ms" if ur == "ms" else f"{s['t_ref']:.1f} s"
            log(f"{q:>4g}  {name:<44}{s['n']:>6}{s['mae']:>9.5f}{s['mae_linked']:>11.5f}"
                f"{s['max']:>9.3f}{100 * s['top']:>11.0f}%{fe:>11}{fr:>9}")
    log()
    for q, notes in all_notes:
        for n in notes:
            log(f"q={q:g}: {n}")
    log("MAE linked: over the diseases that are parents of at least one observed positive "
        "finding (the others' posteriors follow from the negative findings alone).")
    if all_panels:
        try:
            log(f"figure: {plot(os.path.join(args.out, 'diagnosis_marginals.png'), all_panels)}")
        except ImportError:
            log("matplotlib is not installed: no figure")
    return 0


if __name__ == "__main__":
    sys.exit(main())
