"""ContextHMM structured solver: which of its starts wins, and the other numbers of
docs/derivations/context_hmm.rst that examples/context_hmm.py does not print.

    python bench/studies/hmm_start_detail.py               # parts 1-3, the 160 instances of
                                                           # part 3 of examples/context_hmm.py
                                                           # (about 10 s)
    python bench/studies/hmm_start_detail.py --grid        # part 1 on the 162 of
                                                           # bench/studies/hmm_starts.py too
    python bench/studies/hmm_start_detail.py --decode 400  # part 4 only, on 400 instances
    python bench/studies/hmm_start_detail.py --random 3000 # part 5 only, on 3000 random models
    python bench/studies/hmm_start_detail.py --threads 5   # part 6 only, 5 rounds
    python bench/studies/hmm_start_detail.py --halving     # part 7 only (about 15 s)

1. The starts.  The solver (mf_hmm_structured, csrc/mf_hmm.h) runs four starts -- 0: the link
   solution from the first-order posterior, 1: the link solution from the naive marginals (the
   link and naive solves to PRE_TOL), 2: the first-order posterior, 3: the first-order
   posterior of the model with its context means left out -- each ascent to SCREEN_TOL, and
   takes the best on to ``infer_tol``.  Here each start is rebuilt in Python through the
   one-chain kernels of ``mfengine.hmm._chain`` and EVERY start's ascent is taken on to
   ``infer_tol``, so that for each instance one sees: the start the solver keeps (the
   emulation is checked against ``ContextHMM.infer``), the start whose full ascent is highest
   when one is highest by more than 1e-6 nats ("unique winner"), what the solver would report
   without each start (the mean loss of bound), how often the screen keeps a start whose full
   ascent is not the highest, and a further candidate start, the chain whose marginals equal
   the naive solution's (iterative proportional fitting), ascended to ``infer_tol``.
2. The link columns of the "How the bounds compare" table: the link bound of the iteration
   from the first-order posterior (to ``infer_tol``) and the exact objective F of its chain,
   gaps to the exact ln P(x), means over 20; how often the link bound is above the naive one;
   how often the structured bound is below the naive one, and whether 100 ascents from random
   potentials find a higher chain there.
3. The same instances at the data's raw origin (no centring: the kernels called directly on
   the uncentred means and data): structured, naive and link gaps, means over 20.
4. (--decode N) Viterbi on the structured chain Q against the exact MAP path (enumeration), on
   the first N instances of tests/hmm/test_hmm_decode.py's generator.
5. (--random N) Structured against naive on N random models (lag 1 apart from lags 2-3): how
   often structured is below naive beyond the stopping tolerance, by how much, and whether
   ascents from random potentials find a chain above the structured bound there.
6. (--threads R) The issue-11 workload of bench/speed/hmm_speed.py (n = 10, lag 5, both, T = 1000,
   one sequence): wall time of the structured score on one and on two threads (the four starts
   run apart), best of 3 each, in R rounds; each round first and last measures how many cores
   two busy threads of this process get (2.0: both cores free), since on a shared machine a
   round where another process holds a core says nothing about threads.
7. (--halving) Successive halving of the starts, simulated from every start's full ascent on
   the 162 instances of bench/studies/hmm_starts.py, the 160 of part 3 and the issue-11
   sequence: after k sweeps only the `keep` starts with the highest F go on to the screen (the
   rest stopped), the screen then keeping the best of them as the solver does.  Printed per
   (keep, k): the share of the sweeps (screens and the kept continuation) it would save, and
   how many bounds it would lower against the solver's.
"""
import argparse
import os
import sys
import time
import warnings

import numpy as np

import mfengine as mf
from mfengine.hmm import _chain

HERE = os.path.dirname(os.path.abspath(__file__))
BENCH = os.path.dirname(HERE)
REPO = os.path.dirname(BENCH)
START_NAMES = ("link from first-order", "link from naive", "first-order", "own terms only")
EPS = 1e-6


def part3_model(lag, cs, seed):
    """The instances of examples/context_hmm.py, part 3 (same draws)."""
    sys.path.insert(0, os.path.join(REPO, "examples"))
    from context_hmm import gap_instance
    return gap_instance(lag, cs, seed, n_threads=1, progress=False)


def site_terms(P, Xs, lag, right, left, own_only=False):
    """Potentials of the first-order posterior: every term of ln p(x | s) in s_t alone (with
    ``own_only``, only the own-state emission terms: the model without its context means)."""
    _, _, U, V, W = P
    e = Xs @ U.T - 0.5 * (U * U).sum(1)
    if not own_only:
        if right:
            e[lag:] += Xs[:-lag] @ V.T - 0.5 * (V * V).sum(1)
        if left:
            e[:-lag] += Xs[lag:] @ W.T - 0.5 * (W * W).sum(1)
    return np.ascontiguousarray(e)


def ipf_potentials(sp, A, q, e0, passes=500, tol=1e-11):
    """Potentials of the chain with the model's transitions whose marginals are q (T, n):
    iterative proportional fitting, one time step at a time, from the potentials e0."""
    h = e0.copy()
    for _ in range(passes):
        for t in range(len(q)):
            g = _chain.forward_backward(sp, A, h)[0]
            h[t] += np.log(q[t]) - np.log(g[t])
        if np.max(np.abs(_chain.forward_backward(sp, A, h)[0] - q)) < tol:
            break
    return h


def starts_of(h, X, with_ipf=False):
    """Every start of the solver, screened and then continued to infer_tol.

    Returns (screen values (4,), full values (4,), sweeps of the screen (4,), histories of the
    full ascents, the solver's bound, the IPF start's full value or None)."""
    P, Xs = h._shifted(X)
    T = len(X)
    lag = min(int(h.lag), T)
    args = P + (lag, h._right, h._left)
    mi, tol = int(h.infer_max_iter), float(h.infer_tol)
    ptol, stol = max(tol, _chain.PRE_TOL), max(tol, _chain.SCREEN_TOL)
    offsets = np.array([0, T], dtype=np.intp)
    qn = _chain.run("naive", *P, lag, h._right, h._left, Xs, offsets, mi, ptol, False, 1)["gamma"]
    pots = [_chain.link(*args, Xs, mi, ptol)[2],
            _chain.link(*args, Xs, mi, ptol, np.ascontiguousarray(qn))[2],
            site_terms(P, Xs, lag, h._right, h._left),
            site_terms(P, Xs, lag, h._right, h._left, own_only=True)]
    screen, full, nscreen, hists = [], [], [], []
    for s0 in pots:
        v, hs, hist = _chain.ascent(*args, Xs, s0, mi, stol)
        ns = len(hist) - 1
        screen.append(v)
        nscreen.append(ns)
        if ns < mi and stol > tol:
            v2, _, hist2 = _chain.ascent(*args, Xs, hs, mi - ns, tol)
            hist = np.concatenate([hist, hist2[1:]])
            v = v2
        full.append(v)
        hists.append(hist)
    solver = float(h.infer(X, method="structured").bound[0])
    ipf = None
    if with_ipf:
        qfull = _chain.run("naive", *P, lag, h._right, h._left, Xs, offsets, mi, tol, False,
                           1)["gamma"]
        hp = ipf_potentials(P[0], P[1], np.ascontiguousarray(qfull), pots[2])
        ipf = _chain.ascent(*args, Xs, hp, mi, tol)[0]
    return np.array(screen), np.array(full), np.array(nscreen), hists, solver, ipf


def pick(screen, full, subset):
    """The solver's answer using only the starts in ``subset``: the best screen value (the
    first on a tie) is continued."""
    k = max(subset, key=lambda j: (screen[j], -j))
    return full[k], k


def pick2(screen, full):
    """Two finalists: the two best screen values go on, the higher final value is kept."""
    order = sorted(range(4), key=lambda j: (-screen[j], j))[:2]
    return max(full[order[0]], full[order[1]])


def report_starts(rows, label):
    """rows: list of (name, list of starts_of results)."""
    print(f"\n[1] the solver's four starts ({label}); 0: {START_NAMES[0]}, 1: {START_NAMES[1]}, "
          f"2: {START_NAMES[2]}, 3: {START_NAMES[3]}")
    print("    kept: the start the screen keeps; unique winner: the start whose full ascent is "
          f"highest by > {EPS:g} nats; without k: mean loss of the solver's bound (nats) and "
          "how many instances lose > 1e-6; screen loss: instances where the best full ascent "
          "is above the solver's bound by > 1e-6, and the largest such gap; 2 finalists: "
          "instances where taking the two best screened starts on to infer_tol would raise the "
          "bound by > 1e-6; kept: rise after screen: how much the kept start's F rises after "
          "the screen (nats); IPF higher: instances where the IPF start's ascent ends above the "
          "solver's bound by > 1e-6")
    print(f"    {'instances':28s} {'emul.':>7s} {'kept 0/1/2/3':>13s} {'unique winner':>14s} "
          + " ".join(f"{'without ' + str(k):>16s}" for k in range(4))
          + f" {'screen loss':>16s} {'2 finalists':>18s} {'kept: rise after screen':>24s}"
          f" {'IPF higher':>10s}")
    tot = {"kept": np.zeros(4, int), "win": np.zeros(4, int), "loss": np.zeros(4),
           "nloss": np.zeros(4, int), "n": 0, "screen": [], "ipf": 0, "ipf_n": 0, "fin2": [],
           "rise": []}
    for name, res in rows:
        kept, win = np.zeros(4, int), np.zeros(4, int)
        loss, nloss = np.zeros(4), np.zeros(4, int)
        emul, sloss, ipf_hi, ipf_n, fin2, rise = 0.0, [], 0, 0, [], []
        for screen, full, _, _, solver, ipf in res:
            v, k = pick(screen, full, range(4))
            emul = max(emul, abs(v - solver))
            kept[k] += 1
            order = np.argsort(full)[::-1]
            if full[order[0]] - full[order[1]] > EPS:
                win[order[0]] += 1
            for j in range(4):
                d = v - pick(screen, full, [i for i in range(4) if i != j])[0]
                loss[j] += d
                nloss[j] += d > EPS
            sloss.append(full.max() - v)
            fin2.append(pick2(screen, full) - v)
            rise.append(full[k] - screen[k])
            if ipf is not None:
                ipf_n += 1
                ipf_hi += ipf > v + EPS
        m = len(res)
        s, f2 = np.array(sloss), np.array(fin2)
        print(f"    {name:28s} {emul:7.0e} {'/'.join(map(str, kept)):>13s} "
              f"{'/'.join(map(str, win)):>14s} "
              + " ".join(f"{loss[j] / m:>10.4f} ({nloss[j]:2d})" for j in range(4))
              + f" {(s > EPS).sum():3d} (max {s.max():6.3f})"
              + f" {(f2 > EPS).sum():3d} (max {f2.max():+6.3f})"
              + f" median {np.median(rise):7.1e} max {max(rise):7.1e}"
              + (f" {ipf_hi:>5d}/{ipf_n}" if ipf_n else f" {'-':>10s}"))
        tot["kept"] += kept
        tot["win"] += win
        tot["loss"] += loss
        tot["nloss"] += nloss
        tot["n"] += m
        tot["screen"] += sloss
        tot["ipf"] += ipf_hi
        tot["ipf_n"] += ipf_n
        tot["fin2"] += fin2
        tot["rise"] += rise
    s, f2, rs = np.array(tot["screen"]), np.array(tot["fin2"]), np.array(tot["rise"])
    print(f"    {'all ' + str(tot['n']):28s} {'':7s} {'/'.join(map(str, tot['kept'])):>13s} "
          f"{'/'.join(map(str, tot['win'])):>14s} "
          + " ".join(f"{tot['loss'][j] / tot['n']:>10.4f} ({tot['nloss'][j]:2d})" for j in range(4))
          + f" {(s > EPS).sum():3d} (max {s.max():6.3f})"
          + f" {(f2 > EPS).sum():3d} (max {f2.max():+6.3f})"
          + f" median {np.median(rs):7.1e} max {rs.max():7.1e}"
          + (f" {tot['ipf']:>5d}/{tot['ipf_n']}" if tot["ipf_n"] else ""))


def screen_losses(cases):
    """Instances where the start the screen keeps is not the one whose full ascent is highest."""
    for desc, (screen, full, nscreen, hists, _, _) in cases:
        v, k = pick(screen, full, range(4))
        b = int(np.argmax(full))
        if full[b] - v <= EPS:
            continue
        print(f"    {desc}: kept start {k} (screen {screen[k]:.4f} after {nscreen[k]} sweeps, "
              f"final {full[k]:.4f}); start {b} screens at {screen[b]:.4f} after {nscreen[b]} "
              f"sweeps and ends at {full[b]:.4f} ({full[b] - v:+.3f})")
        hb = hists[b]
        steps = np.diff(hb)
        print(f"      start {b}'s full ascent, F per sweep: "
              + " ".join(f"{x:.2f}" for x in hb[:: max(1, len(hb) // 30)])
              + f" ({len(hb) - 1} sweeps; gains per sweep, first 40: "
              + " ".join(f"{x:.1e}" for x in steps[:40]) + ")")


def part1(scales, lags):
    rows, cases = [], []
    for lag in lags:
        for cs in scales:
            res = []
            for seed in range(20):
                h, X = part3_model(lag, cs, seed)
                r = starts_of(h, X, with_ipf=True)
                res.append(r)
                cases.append((f"lag {lag} scale {cs} seed {seed}", r))
            rows.append((f"lag {lag}, context scale {cs}", res))
    report_starts(rows, "examples/context_hmm.py part 3: n = 3, both, T = 40")
    screen_losses(cases)


def part1_grid():
    sys.path.insert(0, HERE)
    from hmm_starts import instance_grid, make_model
    grid = instance_grid()
    by_scale, cases = {}, []
    t0 = time.process_time()
    for seed, (n, lag, context, T, cs) in enumerate(grid):
        h = make_model(n, lag, context, cs, seed)
        X, _ = h.sample(T, random_state=seed + 100)
        r = starts_of(h, X)
        by_scale.setdefault((T, cs), []).append(r)
        cases.append((f"n={n} lag={lag} {context} T={T} context scale {cs}", r))
    rows = [(f"T = {T}, context scale {cs}", res) for (T, cs), res in sorted(by_scale.items())]
    report_starts(rows, f"bench/studies/hmm_starts.py's {len(grid)} instances")
    screen_losses(cases)
    print(f"    ({time.process_time() - t0:.0f} s CPU)")


def best_random_ascent(h, X, n_starts, seed=0):
    """The best F over ascents (to 1e-13 nats per step, 400 sweeps) from random potentials."""
    P, Xs = h._shifted(X)
    args = P + (min(int(h.lag), len(X)), h._right, h._left)
    rng = np.random.default_rng(seed)
    return max(_chain.ascent(*args, Xs, rng.normal(scale=3.0, size=(len(X), h.n_states)), 400,
                             1e-13)[0] for _ in range(n_starts))


def part2_3(scales, lags):
    print("\n[2] link iteration from the first-order posterior (to infer_tol) and F of its chain; "
          "link > naive: instances where the link bound is above the naive one; struct < naive: "
          "instances where the structured bound is below the naive one by > 1e-6 nats (the "
          "largest shortfall, and the best of 100 random-start ascents minus the structured "
          "bound on those instances)")
    print("[3] the same instances at the raw origin (kernels on uncentred means and data); "
          "gaps to the exact ln P(x), means over 20")
    print(f"    {'':24s} {'link':>9s} {'F(chain)':>9s} {'link>naive':>10s} "
          f"{'struct<naive':>27s} | {'raw: link':>10s} {'structured':>11s} {'naive':>9s}")
    for lag in lags:
        for cs in scales:
            g = np.zeros(5)
            above, short, rand = 0, [], []
            for seed in range(20):
                h, X = part3_model(lag, cs, seed)
                ex = h.score(X, method="exact")
                st, nv = h.score(X), h.score(X, method="naive")
                mi, tol = int(h.infer_max_iter), float(h.infer_tol)
                T = len(X)
                offsets = np.array([0, T], dtype=np.intp)
                P, Xs = h._shifted(X)
                args = P + (lag, h._right, h._left)
                lb, _, lp, _ = _chain.link(*args, Xs, mi, tol)
                fc = _chain.chain_objective(*args, Xs, lp)[0]
                above += lb > nv
                if st < nv - EPS:
                    short.append(nv - st)
                    rand.append(best_random_ascent(h, X, 100) - st)
                Praw = h._params()
                Xr = np.ascontiguousarray(X)
                argr = Praw + (lag, h._right, h._left)
                lbr = _chain.link(*argr, Xr, mi, tol)[0]
                sr = _chain.run("structured", *argr, Xr, offsets, mi, tol, False, 1)["bound"][0]
                nr = _chain.run("naive", *argr, Xr, offsets, mi, tol, False, 1)["bound"][0]
                g += np.array([lb, fc, lbr, sr, nr]) - ex
            g /= 20
            sh = (f"{len(short):2d} (max {max(short):.3f}, rand {max(rand):+.0e})" if short
                  else f"{0:2d}{'':25s}")
            print(f"    lag {lag}, context scale {cs:<4}     {g[0]:9.3f} {g[1]:9.3f} "
                  f"{above:>7d}/20 {sh:>27s} | {g[2]:10.3f} {g[3]:11.4f} {g[4]:9.3f}")


def part5(n_models, seed=0):
    """Structured against naive on random models (lag 1 apart from lags 2-3)."""
    rng = np.random.default_rng(seed)
    res = {1: [], 2: []}
    fails = []
    for k in range(n_models):
        n = int(rng.integers(2, 5))
        D = int(rng.integers(1, 3))
        lag = int(rng.integers(1, 4))
        context = ("right", "left", "both")[int(rng.integers(3))]
        T = int(rng.integers(10, 61))
        cs = float(np.exp(rng.uniform(np.log(0.1), np.log(6.0))))
        sticky = float(rng.uniform(0.0, 10.0))
        h = mf.ContextHMM(n, D, lag=lag, context=context, n_threads=1, progress=False,
                          max_augmented_states=10**7)
        h.means_ = 1.5 * rng.normal(size=(n, D))
        A = rng.random((n, n)) + sticky * np.eye(n)
        h.transmat_ = A / A.sum(1, keepdims=True)
        sp = rng.random(n) + 0.2
        h.startprob_ = sp / sp.sum()
        if context != "left":
            h.right_means_ = cs * rng.normal(size=(n, D))
        if context != "right":
            h.left_means_ = cs * rng.normal(size=(n, D))
        X, _ = h.sample(T, random_state=k)
        d = h.score(X) - h.score(X, method="naive")
        res[min(lag, 2)].append(d)
        if d < -1e-9 * T:
            fails.append((k, lag, -d, h, X))
    print(f"\n[5] structured - naive on {n_models} random models (n 2-4, D 1-2, lag 1-3, any "
          "context, T 10-60, context scale 0.1-6 log-uniform, self-transition weight 0-10); "
          "below: structured < naive by more than the stopping tolerance 1e-9 T")
    for key, name in ((2, "lag 2-3"), (1, "lag 1")):
        d = np.array(res[key])
        f = [x[2] for x in fails if min(x[1], 2) == key]
        print(f"    {name}: {len(d)} models, {len(f)} below"
              + (f" (median shortfall {np.median(f):.4f}, largest {max(f):.3f} nats)" if f else ""))
    if not fails:
        return
    print(f"    on those {len(fails)}, 30 ascents from random potentials (best F): the models "
          "where they find a chain above the structured bound by > 1e-6 nats")
    n_up = n_above = 0
    for k, lag, short, h, X in fails:
        st = h.score(X)
        gain = best_random_ascent(h, X, 30, seed=k) - st
        if gain <= EPS:
            continue
        n_up += 1
        n_above += gain > short + EPS
        print(f"      model {k} (n={h.n_states}, D={h.n_features}, lag {lag}, {h.context}, "
              f"T={len(X)}): structured {short:.2g} below naive; random starts "
              f"{gain:+.4g} above structured; exact ln P(x) {h.score(X, method='exact') - st:+.4g}"
              " above structured")
    print(f"    {len(fails) - n_up} of {len(fails)}: no random start above the structured bound; "
          f"{n_up}: a random start above it, in {n_above} above the naive bound too")


def part4(n_inst):
    # test_hmm_decode imports its neighbour test_hmm and the reference in tests/references/
    sys.path[:0] = [os.path.join(REPO, "tests", "hmm"), os.path.join(REPO, "tests", "references")]
    from test_hmm_decode import decode_counts
    agree, near, naive_agree, ratios = decode_counts(n_inst)
    print(f"\n[4] decoding, {n_inst} instances of tests/hmm/test_hmm_decode.py: structured Viterbi "
          f"is the exact MAP path in {agree} ({100 * agree / n_inst:.1f}%), within 1% of its "
          f"posterior probability in {near}, worst ratio {min(ratios):.3f}; naive argmax: "
          f"{naive_agree} ({100 * naive_agree / n_inst:.1f}%)")


def cores_free():
    """CPU time over wall time of two threads hashing (2.0 when both cores are free)."""
    import hashlib
    import threading

    def work():
        x = b"a" * 5_000_000
        for _ in range(20):
            hashlib.sha256(x).digest()
    ts = [threading.Thread(target=work) for _ in range(2)]
    w, c = time.perf_counter(), time.process_time()
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return (time.process_time() - c) / (time.perf_counter() - w)


def part6(rounds):
    sys.path.insert(0, BENCH)
    import _paths  # noqa: F401  (speed/, for hmm_speed)
    from hmm_speed import make_model
    h = make_model()
    X, _ = h.sample(1000, random_state=1)     # bench/speed/hmm_speed.py's workload
    print("\n[6] structured score of one T = 1000 sequence (n = 10, lag 5, both), wall time, "
          "best of 3; cores: what two busy threads got before / after the round")
    # one thread: the four screened starts against the kept start's continuation, rebuilt
    # through the one-chain kernels as in part 1
    P, Xs = h._shifted(X)
    T, lag = len(X), int(h.lag)
    args = P + (lag, h._right, h._left)
    mi, tol = int(h.infer_max_iter), float(h.infer_tol)
    ptol, stol = max(tol, _chain.PRE_TOL), max(tol, _chain.SCREEN_TOL)
    c = time.process_time()
    qn = _chain.run("naive", *P, lag, h._right, h._left, Xs, np.array([0, T], dtype=np.intp),
                    mi, ptol, False, 1)["gamma"]
    pots = [_chain.link(*args, Xs, mi, ptol)[2],
            _chain.link(*args, Xs, mi, ptol, np.ascontiguousarray(qn))[2],
            site_terms(P, Xs, lag, h._right, h._left),
            site_terms(P, Xs, lag, h._right, h._left, own_only=True)]
    res = [_chain.ascent(*args, Xs, p, mi, stol) for p in pots]
    t_screen = time.process_time() - c
    k = max(range(4), key=lambda j: (res[j][0], -j))
    c = time.process_time()
    _chain.ascent(*args, Xs, res[k][1], mi - (len(res[k][2]) - 1), tol)
    t_cont = time.process_time() - c
    print(f"    one thread, CPU: the four screened starts {t_screen * 1e3:.0f} ms, the kept "
          f"start's continuation {t_cont * 1e3:.0f} ms ({t_screen / (t_screen + t_cont):.0%} "
          "in the starts)")
    for _ in range(rounds):
        c0 = cores_free()
        t = {}
        for nt in (1, 2):
            h.n_threads = nt
            best = np.inf
            for _ in range(3):
                w = time.perf_counter()
                h.score(X)
                best = min(best, time.perf_counter() - w)
            t[nt] = best
        c1 = cores_free()
        print(f"    cores {c0:.2f} / {c1:.2f}: 1 thread {t[1] * 1e3:.1f} ms, 2 threads "
              f"{t[2] * 1e3:.1f} ms ({t[1] / t[2]:.2f}x)", flush=True)


def part7():
    sys.path.insert(0, BENCH)
    import _paths  # noqa: F401  (speed/, for hmm_speed)
    from hmm_speed import make_model as issue_model
    from hmm_starts import instance_grid, make_model
    cases = []
    for seed, (n, lag, context, T, cs) in enumerate(instance_grid()):
        h = make_model(n, lag, context, cs, seed)
        X, _ = h.sample(T, random_state=seed + 100)
        cases.append((f"n={n} lag={lag} {context} T={T} scale {cs}", starts_of(h, X)))
    for lag in (2, 1):
        for cs in (0.1, 0.3, 1.0, 3.0):
            for seed in range(20):
                cases.append((f"n=3 lag={lag} both T=40 scale {cs} seed {seed}",
                              starts_of(*part3_model(lag, cs, seed))))
    h = issue_model()
    X, _ = h.sample(1000, random_state=1)
    cases.append(("issue-11 sequence", starts_of(h, X)))

    def at(hist, k):
        return hist[min(k, len(hist) - 1)]

    print(f"\n[7] successive halving of the starts, simulated ({len(cases)} instances): after k "
          "sweeps the `keep` highest starts go on to the screen, the others stop")
    print(f"    {'keep':>4s} {'k':>2s} {'sweeps saved':>13s} {'lower > 1e-6':>13s} "
          f"{'lower > 0.1':>12s} {'mean loss':>10s}  largest losses")
    for keep in (2, 3):
        for k in (1, 2, 3, 4, 6):
            losses, saved, total = [], 0, 0
            for desc, (screen, full, ns, hists, _, _) in cases:
                v, kd = pick(screen, full, range(4))
                go = sorted(range(4), key=lambda j: (-at(hists[j], k), j))[:keep]
                losses.append((v - pick(screen, full, go)[0], desc))
                saved += sum(max(0, ns[j] - k) for j in range(4) if j not in go)
                total += sum(ns) + len(hists[kd]) - 1 - ns[kd]
            lv = np.array([x[0] for x in losses])
            worst = sorted(losses, key=lambda x: -x[0])[:2]
            print(f"    {keep:4d} {k:2d} {saved / total:12.0%} {(lv > EPS).sum():13d} "
                  f"{(lv > 0.1).sum():12d} {lv.mean():10.3f}  "
                  + "; ".join(f"{d:.3f} ({w})" for d, w in worst if d > EPS))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--grid", action="store_true",
                    help="part 1 on bench/studies/hmm_starts.py's 162 instances as well")
    ap.add_argument("--decode", type=int, default=0, metavar="N",
                    help="only part 4, on N instances")
    ap.add_argument("--random", type=int, default=0, metavar="N",
                    help="only part 5, on N random models")
    ap.add_argument("--threads", type=int, default=0, metavar="R",
                    help="only part 6, R rounds")
    ap.add_argument("--halving", action="store_true", help="only part 7")
    a = ap.parse_args()
    warnings.simplefilter("ignore")
    print(f"load average {os.getloadavg()[0]:.2f} (2 cores shared)")
    if a.decode:
        part4(a.decode)
        return
    if a.random:
        part5(a.random)
        return
    if a.threads:
        part6(a.threads)
        return
    if a.halving:
        part7()
        return
    scales, lags = (0.1, 0.3, 1.0, 3.0), (2, 1)
    part1(scales, lags)
    part2_3(scales, lags)
    if a.grid:
        part1_grid()


if __name__ == "__main__":
    main()
