"""How often a Plefka posterior explains less than the evidence requires, on leak-less
noisy-OR nets (where the strict bound, and so the certificate, does not exist).

    python bench/accuracy/evidence_support.py [--nets 30] [--patterns 5]

Random bipartite nets: 10 diseases (priors U(0.01, 0.4)) above 14 findings without leaks
(bias 0), each link present with probability 0.35 and weight U(0.05, 3).  A finding observed
on needs one of its diseases present, so under the exact posterior its diseases' marginals sum
to at least 1 (printed: the smallest such sum of ``method="exact"``).  For each Plefka method
the share of positive findings whose parents' means sum to less than 1 - 1e-6, and the share
of patterns that ``infer`` flags (warns about; ``converged`` False).

Measured 2026-11-29 (30 nets, 5 patterns each, 727 positive findings with parents): exact
smallest sum 1.0; falling short: plefka11 65%, plefka12 48%, plefka22 47% of the findings;
patterns not converged (flagged): 129, 123 and 127 of 150.
"""
import argparse
import warnings

import numpy as np

import mfengine as mf


def leakless_net(seed, nd=10, nf=14, density=0.35):
    r = np.random.default_rng(seed)
    W = np.zeros((nd + nf, nd + nf))
    W[nd:, :nd] = r.uniform(0.05, 3.0, (nf, nd)) * (r.random((nf, nd)) < density)
    h = np.concatenate([r.uniform(0.01, 0.4, nd), np.zeros(nf)])
    visible = np.zeros(nd + nf, dtype=bool)
    visible[nd:] = True
    return mf.BeliefNet(W, h, visible, "noisy_or", progress=False), W, nd


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nets", type=int, default=30)
    ap.add_argument("--patterns", type=int, default=5)
    args = ap.parse_args(argv)
    methods = ("plefka11", "plefka12", "plefka22")
    sums = {m: [] for m in methods + ("exact",)}
    flagged = {m: 0 for m in methods}
    n_pat = 0
    for seed in range(args.nets):
        net, W, nd = leakless_net(seed)
        X = net.sample(args.patterns, random_state=seed)
        n_pat += X.shape[0]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            res = {m: net.infer(X, method=m) for m in methods + ("exact",)}
        for m in methods:
            flagged[m] += int(np.sum(~res[m].converged))
        for p in range(X.shape[0]):
            for f in np.flatnonzero(X[p] == 1):
                pa = np.flatnonzero(W[nd + f, :nd] > 0)
                if pa.size:
                    for m in sums:
                        sums[m].append(res[m].mu[p, pa].sum())
    n = len(sums["exact"])
    print(f"{args.nets} nets x {args.patterns} patterns, {n} positive findings with parents; "
          f"exact: smallest sum of the parents' marginals {min(sums['exact']):.6f}")
    for m in methods:
        s = np.array(sums[m])
        print(f"  {m}: {np.mean(s < 1 - 1e-6):.0%} of the findings fall short (smallest sum "
              f"{s.min():.3g}); {flagged[m]} of {n_pat} patterns not converged (flagged)")


if __name__ == "__main__":
    main()
