"""Tables 1 and 2 of Bhattacharyya & Keerthi: accuracy of G11, G12, G22, SJJ (and the
Gaussian-approximated bound of Saul & Jordan) on 10,000 random 2x4x6 belief nets.

    python bench/accuracy/plefka_tables.py                   # 10,000 nets per setting, PNGs in bench/results/
    python bench/accuracy/plefka_tables.py --n-nets 1000     # quicker

The measure is E = -G / ln Z - 1 (for a bound L: L / ln Z - 1), averaged over nets, with ln Z
the exact log-probability of the clamped visible units by enumeration.  Besides the mean, the
tables give the mean over the nets whose solve converged and the median: noisy-OR G22 is
unbounded below where a unit's input tends to 0, and a few such nets dominate its plain mean.
Histograms show the central 99% of nets.  Table 1: sigmoid nets,
weights and biases uniform in [-1, 1] and in [-5, 5], the six bottom units clamped to 0.
Table 2: noisy-OR nets, weights and biases uniform in [0, 0.25] and in [0.2, 0.8]; for each
net the visible states with the largest and the smallest ln Z.  Needs matplotlib for the
histograms (Figs. 2-9 of the paper).
"""
import argparse
import os
import time
import warnings

import numpy as np

import mfengine as mf
from mfengine.sbn.batch import BeliefNetBatch

SIZES = (2, 4, 6)
METHODS = ("plefka11", "plefka12", "plefka22", "sjj")
LABEL = {"plefka11": "G11", "plefka12": "G12", "plefka22": "G22", "sjj": "SJJ", "gaussian": "Gaussian"}
# The paper's Table 1 (sigmoid) and Table 2 (noisy-OR) means of E.
PAPER_T1 = {(-1, 1): {"plefka11": -0.0404, "plefka12": 0.0155, "plefka22": 0.0029, "sjj": 0.0157},
            (-5, 5): {"plefka11": -0.0440, "plefka12": 0.0231, "plefka22": -0.0456, "sjj": 0.0962}}
PAPER_T2 = {((0, 0.25), "max"): {"plefka11": 0.001, "plefka12": 0.028, "plefka22": 0.445},
            ((0, 0.25), "min"): {"plefka11": -0.061, "plefka12": 0.011, "plefka22": 0.320},
            ((0.2, 0.8), "max"): {"plefka11": -0.156, "plefka12": 0.052, "plefka22": 0.090},
            ((0.2, 0.8), "min"): {"plefka11": -0.029, "plefka12": 0.015, "plefka22": 0.211}}


def random_nets(rng, lo, hi, n_nets, activation):
    n = sum(SIZES)
    off = np.cumsum((0,) + SIZES)
    W = np.zeros((n_nets, n, n))
    for l in range(len(SIZES) - 1):
        W[:, off[l + 1]:off[l + 2], off[l]:off[l + 1]] = rng.uniform(lo, hi, (n_nets, SIZES[l + 1], SIZES[l]))
    h = rng.uniform(lo, hi, (n_nets, n))
    return BeliefNetBatch(W, h, np.arange(off[-2], n), activation)


def gaussian_bounds(batch, V):
    """Saul & Jordan's bound, one layered net at a time (the kernel takes one net per call)."""
    off = np.cumsum((0,) + SIZES)
    out = np.empty(len(batch))
    for k in range(len(batch)):
        weights = [batch.W[k, off[l + 1]:off[l + 2], off[l]:off[l + 1]] for l in range(len(SIZES) - 1)]
        biases = [batch.h[k, off[l]:off[l + 1]] for l in range(len(SIZES))]
        out[k] = mf.infer((weights, biases), V[k:k + 1], method="gaussian", n_threads=1).bound[0]
    return out


def run_setting(batch, V, lnz, methods, threads, tol):
    E, timing, unconv = {}, {}, {}
    for m in methods:
        t = time.perf_counter()
        if m == "gaussian":
            bound, conv = gaussian_bounds(batch, V), None
        else:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", mf.ConvergenceWarning)  # counted in the table
                r = mf.infer(batch, V, method=m, tol=tol, max_iter=1000, n_threads=threads)
            bound, conv = r.bound, r.converged
        timing[m] = time.perf_counter() - t
        E[m] = bound / lnz - 1.0
        unconv[m] = np.zeros(bound.shape, bool) if conv is None else ~conv
    return E, timing, unconv


def histograms(E, title, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    fig, axes = plt.subplots(1, len(E), figsize=(3.2 * len(E), 2.8))
    for ax, (m, e) in zip(np.atleast_1d(axes), E.items()):
        lo, hi = np.percentile(e[np.isfinite(e)], [0.5, 99.5])   # a few wild items would hide the rest
        ax.hist(np.clip(e[np.isfinite(e)], lo, hi), bins=60, color="0.3")
        ax.set_title(f"{LABEL[m]}: mean {np.mean(e):.4f}, median {np.median(e):.4f}", fontsize=8)
        ax.set_xlabel("E = -G / ln Z - 1", fontsize=8)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def report(rows, paper, header):
    print(header)
    print("| method | mean E | paper's mean E | mean E, converged nets | median E | unconverged | time (s) |")
    print("|---|---|---|---|---|---|---|")
    for m, (e, unconv, t) in rows.items():
        p = paper.get(m)
        conv_mean = np.mean(e[~unconv]) if np.any(~unconv) else np.nan
        print(f"| {LABEL[m]} | {np.mean(e):.4f} | {'-' if p is None else f'{p:.4f}'} | "
              f"{conv_mean:.4f} | {np.median(e):.4f} | {int(unconv.sum())} | {t:.2f} |")
    print()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n-nets", type=int, default=10000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--tol", type=float, default=1e-9)
    ap.add_argument("--out", default=os.path.join("bench", "results", "plefka_tables"))
    args = ap.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    rng = np.random.default_rng(args.seed)
    n = args.n_nets
    print(f"{n} random 2x4x6 nets per setting, seed {args.seed}, tol {args.tol}\n")

    fig = 2
    for lo, hi in [(-1, 1), (-5, 5)]:
        batch = random_nets(rng, lo, hi, n, "sigmoid")
        V = np.zeros((n, SIZES[-1]))
        lnz = batch.exact_log_likelihood(V)
        E, timing, unconv = run_setting(batch, V, lnz, METHODS + ("gaussian",), args.threads, args.tol)
        report({m: (E[m], unconv[m], timing[m]) for m in E}, PAPER_T1[(lo, hi)],
               f"### Table 1, sigmoid, weights and biases in [{lo}, {hi}], visible units clamped to 0")
        histograms(E, f"sigmoid 2x4x6, weights in [{lo},{hi}]",
                   os.path.join(args.out, f"table1_sigmoid_{lo}_{hi}.png"))

    all_states = ((np.arange(64)[:, None] >> np.arange(6)[::-1]) & 1).astype(float)
    for lo, hi in [(0.0, 0.25), (0.2, 0.8)]:
        batch = random_nets(rng, lo, hi, n, "noisy_or")
        lnz_all = batch.exact_log_likelihood(np.broadcast_to(all_states, (n, 64, 6)))
        for which, pick in [("max", np.argmax), ("min", np.argmin)]:
            idx = pick(lnz_all, axis=1)
            V = all_states[idx]
            lnz = lnz_all[np.arange(n), idx]
            E, timing, unconv = run_setting(batch, V, lnz, METHODS, args.threads, args.tol)
            report({m: (E[m], unconv[m], timing[m]) for m in E}, PAPER_T2[((lo, hi), which)],
                   f"### Table 2, noisy-OR, weights and biases in [{lo}, {hi}], the visible state with "
                   f"the {which}imum ln Z (SJJ: the noisy-OR strict bound; no Gaussian method for noisy-OR)")
            histograms(E, f"noisy-OR 2x4x6, weights in [{lo},{hi}], ln Z {which}",
                       os.path.join(args.out, f"table2_noisy_or_{lo}_{hi}_{which}.png"))
    print(f"histograms in {args.out}/")


if __name__ == "__main__":
    main()
