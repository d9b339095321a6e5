"""The memory check (issue 14 item 5): every family's kernels under valgrind's memcheck.

    python bench/tools/memcheck.py                    # ~6 min on 2 cores: 60 fuzz cases per family
    python bench/tools/memcheck.py --per-family 10    # a quicker look (~3 min)
    python bench/tools/memcheck.py --keep vg.xml      # keep valgrind's XML report

One Python process runs under ``valgrind --tool=memcheck`` with ``PYTHONMALLOC=malloc`` (so
that every Python object is a malloc block valgrind watches) and two OpenMP threads: first a
loop of valid calls of every family (infer with every method, score, fit, sample, exact
enumeration, save/load, the kernels' own entry points), then the fuzz suite's hostile cases
(tests/fuzz/cases.py, drawn with a fixed seed: NaN/inf/huge values, wrong shapes and dtypes,
parameters and hyperparameters assigned after construction), each run in-process and its
exception caught.  Valgrind writes an XML report; this script keeps only the errors whose
stack passes through one of mfengine's compiled modules (``mfengine/**/*.so``), or through
scipy.sparse's compiled routines that are handed what mfengine checked (the sparse structures
of model files -- the ``load`` family's damaged and crafted files of every model -- and of
user weights) -- invalid
reads and writes, invalid frees, uses of uninitialised values, and definite leaks whose
allocation came from mfengine -- and counts the rest (CPython's, numpy's, OpenMP's, the
dynamic loader's) as noise without judging it.

Exit status 1 when an error in mfengine's code was found.  See docs/maintainers.rst.
"""
import argparse
import collections
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET

HERE = os.path.dirname(os.path.abspath(__file__))
TESTS = os.path.join(HERE, "..", "..", "tests")

#: Families whose fuzz cases run in the loop, and entries left out because they are slow
#: under valgrind (a fit of an HMM or a classifier is covered by the valid calls).
SLOW_ENTRIES = {("ContextHMM", "fit"), ("GenerativeClassifier", "fit")}

VALID_CALLS = r'''
import os, tempfile, warnings
import numpy as np
import mfengine as mf
from mfengine.sbn import sjj, plefka
from mfengine.sbn.dag import DagStructure
warnings.simplefilter("ignore")
rng = np.random.default_rng(0)

# layered sigmoid belief net: every method, missing data, gradient, fit (both paths)
net = mf.SigmoidBeliefNet([2, 4, 6], random_state=0, max_iter=2, progress=False)
X = net.sample(40, random_state=1)
for method in ("gaussian", "sjj", "plefka11", "plefka12", "plefka22"):
    net.infer(X, method=method)
    net.infer(X, method=method, n_threads=2)
miss = rng.random(X.shape) < 0.2
net.infer(np.where(miss, np.nan, X), missing=miss)
net.gradient(X)
net.score_samples(X); net.score(X); net.exact_log_likelihood(X)
net.log_likelihood(X, n_samples=20, random_state=0, n_threads=2)
net.log_likelihood(X, n_samples=4, method="ais", n_steps=3, random_state=0, n_threads=2)
net.posterior_marginals(X, n_samples=20, random_state=0, n_threads=2)
net.fit(X)
mf.SigmoidBeliefNet([2, 4, 6], method="sjj", max_iter=2, random_state=0, progress=False).fit(X)
p = net.save(os.path.join(tempfile.mkdtemp(), "sbn")); mf.load(p).score_samples(X)
mf.infer((net.weights_, net.biases_), X)

# DAG nets, sigmoid and noisy-OR, one net and a batch
for act in ("sigmoid", "noisy_or"):
    W = np.tril(rng.uniform(0, 1, (7, 7)) if act == "noisy_or" else rng.normal(size=(7, 7)), -1)
    h = rng.uniform(0.1, 1, 7) if act == "noisy_or" else rng.normal(size=7)
    d = mf.BeliefNet(W, h, visible=[4, 5, 6], activation=act, max_iter=2, batch_size=8,
                     progress=False)
    V = d.sample(30, random_state=2)
    for method in ("sjj", "plefka11", "plefka12", "plefka22"):
        d.infer(V, method=method, n_threads=2)
    d.exact_log_likelihood(V); d.fit(V)
    Wb = np.stack([W * s for s in (0.5, 1.0, 2.0, 50.0)]); hb = np.stack([h] * 4)
    b = mf.BeliefNetBatch(Wb, hb, [4, 5, 6], activation=act, progress=False)
    Vb = b.sample(3, random_state=3)
    for method in ("sjj", "plefka11", "plefka12", "plefka22"):
        b.infer(Vb, method=method, n_threads=2)
    b.exact_log_likelihood(Vb)
    import scipy.sparse
    bs = mf.BeliefNetBatch([scipy.sparse.csr_matrix(w) for w in Wb], hb, [4, 5, 6],
                           activation=act, progress=False)            # a sparse batch
    bs.sample(3, random_state=3)
    for method in ("sjj", "plefka12"):
        bs.infer(Vb, method=method, n_threads=2)
    # missing entries: barren units summed out (per item, blocks, batch, chunked scores)
    mv = rng.random(V.shape) < 0.4
    for method in ("sjj", "plefka11", "plefka12", "plefka22"):
        d.infer(np.where(mv, np.nan, V), missing=mv, method=method, n_threads=2)
        b.infer(Vb, missing=rng.random(Vb.shape) < 0.4, method=method, n_threads=2)
        net.infer(np.where(miss, np.nan, X), missing=miss, method=method, n_threads=2)
    from mfengine.sbn import _solve
    _solve.XI_CHUNK_DOUBLES, keep = 64, _solve.XI_CHUNK_DOUBLES     # chunks of a few items
    d.score_samples(V, mv); d.impute(V, mv); b.exact_log_likelihood(Vb, Vb < 0.5)
    d.posterior_marginals(V, mv, n_samples=20, random_state=0, n_threads=2)
    b.posterior_marginals(Vb, n_samples=20, random_state=0, n_threads=2)
    b.exact_log_likelihood(Vb[:, 0], Vb[:, 0] < 0.5)
    _solve.XI_CHUNK_DOUBLES = keep
s = DagStructure(W != 0)
clamp = np.full((5, 7), np.nan); clamp[:, 4:] = V[:5]
sjj.solve(s, s.pack(W)[None], h[None], np.zeros(5, dtype=np.intp), clamp,
          activation="noisy_or", record=True)
plefka.solve(s, s.pack(W)[None], h[None], np.zeros(5, dtype=np.intp), clamp, 22, "noisy_or")
clamp[:, 6] = np.nan                                   # a missing leaf: barren
plefka.gradient(s, s.pack(W)[None], h[None], np.zeros(5, dtype=np.intp), clamp,
                np.where(np.isnan(clamp), 0.5, clamp), 12, "noisy_or")
# the Plefka fallback (coordinate descent, then the fixed-point iteration from its point) on
# diagnosis cases with most findings unrecorded
dn = mf.datasets.make_diagnosis_net(random_state=0)
Xd = dn.sample(8, random_state=1)
dn.infer(Xd, rng.random(Xd.shape) < 0.95, method="plefka11", n_threads=2)

# NLGBN: every unit type, fit, bound_at
for units in (None, "binary", "sigmoidal", "linear"):
    g = mf.NLGBN([2, 3, 5], units=units, max_iter=2, random_state=0, progress=False)
    Xg = g.sample(20, random_state=1)
    g.fit(Xg); r = g.infer(Xg, n_threads=2); g.score(Xg)
    Xm = np.where(rng.random(Xg.shape) < 0.3, np.nan, Xg)
    g.log_likelihood(Xm, n_samples=20, random_state=0, n_threads=2)
    g.posterior_marginals(Xm, n_samples=20, random_state=0, n_threads=2)
    g.bound_at(Xg, np.concatenate(r.mu[:-1], axis=1), np.concatenate(r.sigma[:-1], axis=1))

# ContextHMM: every method and context, fit, decoding
for context in ("right", "left", "both"):
    hm = mf.ContextHMM(3, 2, lag=2, context=context, max_iter=2, bw_max_iter=2, random_state=0,
                       progress=False)
    Xh = rng.normal(size=(40, 2)) + np.repeat(np.arange(4.0), 10)[:, None]
    hm.fit(Xh, lengths=[15, 25])
    for method in ("structured", "naive", "exact"):
        hm.score(Xh, [15, 25], method=method)
    hm.predict(Xh, [15, 25]); hm.decode(Xh, [15, 25], algorithm="map"); hm.sample(20)
    hm.set_params(lag=100, n_threads=2).score(Xh, [15, 25], method="structured")
    for starts in ("own-means", ("first-order", "naive-link"), "link"):   # a subset of starts
        hm.set_params(lag=2, starts=starts, n_threads=2).score(Xh[:25], method="structured")
    hm.set_params(starts="all", n_threads=1)

# GenerativeClassifier
Xc = (rng.random((24, 6)) < 0.5).astype(float); yc = np.repeat([0, 1, 2], 8)
c = mf.GenerativeClassifier(hidden=(2,), max_iter=2, random_state=0, progress=False).fit(Xc, yc)
c.predict_proba(Xc); c.score(Xc, yc); c.class_bounds(Xc, missing=rng.random(Xc.shape) < 0.1)
'''


def workload(cases_file):
    """What runs under valgrind: the valid calls, then every hostile case, in-process."""
    sys.path.insert(0, os.path.join(TESTS, "fuzz"))
    import worker  # tests/fuzz/worker.py

    t0 = time.time()
    exec(compile(VALID_CALLS, "<valid calls>", "exec"), {})
    print(f"valid calls done in {time.time() - t0:.0f} s", flush=True)
    with open(cases_file) as f:
        cases = json.load(f)
    counts = collections.Counter()
    for k, case in enumerate(cases):
        res = worker.run_case(case)
        counts[res["outcome"]] += 1
        if (k + 1) % 50 == 0:
            print(f"{k + 1}/{len(cases)} hostile cases, {time.time() - t0:.0f} s", flush=True)
    print(f"hostile cases: {dict(counts)}", flush=True)


# ------------------------------------------------------------------------- the report
def _frames(err):
    out = []
    for stack in err.findall("stack"):
        for fr in stack.findall("frame"):
            out.append({k: (fr.findtext(k) or "") for k in ("obj", "fn", "dir", "file", "line")})
    return out


def _is_mfengine(frame):
    """A frame of mfengine's compiled code, or of scipy.sparse's (whose inputs mfengine checks
    before it hands them over: a model file's sparse structure, a user's sparse weights)."""
    obj = frame["obj"]
    return (("/mfengine/" in obj and obj.endswith(".so")) or "/csrc/" in frame["dir"] + "/"
            or ("/scipy/sparse/" in obj and "sparsetools" in obj))


def parse(xml_path):
    """(mfengine errors, other errors' counts by kind, leak summary) from valgrind's XML."""
    text = open(xml_path, errors="replace").read()
    if "</valgrindoutput>" not in text:      # the run died: close what was written
        text = text[: text.rfind("</error>") + len("</error>")] + "\n</valgrindoutput>\n"
    root = ET.fromstring(text)
    counts = {}
    for pair in root.iter("pair"):
        counts[pair.findtext("unique")] = int(pair.findtext("count"))
    mine, noise = [], collections.Counter()
    for err in root.findall("error"):
        kind = err.findtext("kind")
        what = err.findtext("what") or err.findtext("xwhat/text") or ""
        frames = _frames(err)
        n = counts.get(err.findtext("unique"), 1)
        if kind.startswith("Leak_") and kind != "Leak_DefinitelyLost":
            continue
        if any(_is_mfengine(f) for f in frames):
            mine.append({"kind": kind, "what": what, "count": n, "frames": frames})
        else:
            noise[kind] += n
    return mine, noise


def _print_noise(xml_path, n):
    root = ET.parse(xml_path).getroot()
    groups, first = collections.Counter(), {}
    for err in root.findall("error"):
        frames = _frames(err)
        key = (err.findtext("kind"), tuple(_fmt_frame(f) for f in frames[:3]))
        groups[key] += 1
        first.setdefault(key, err)
    for key, count in groups.most_common(n):
        err = first[key]
        print(f"\n{key[0]} x{count}: " + (err.findtext("what") or err.findtext("xwhat/text") or ""))
        for f in _frames(err)[:14]:
            print("    " + _fmt_frame(f))
        origin = err.find("auxwhat")
        if origin is not None:
            print("  " + origin.text)
            for stack in err.findall("stack")[1:2]:
                for fr in stack.findall("frame")[:14]:
                    print("      " + _fmt_frame({k: (fr.findtext(k) or "") for k in
                                                 ("obj", "fn", "dir", "file", "line")}))


def _fmt_frame(f):
    where = f"{f['file']}:{f['line']}" if f["file"] else os.path.basename(f["obj"])
    return f"{f['fn'] or '???'} ({where})"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--per-family", type=int, default=60, help="hostile cases per family")
    p.add_argument("--seed", type=int, default=5, help="seed of the hostile cases")
    p.add_argument("--keep", help="copy valgrind's XML report here")
    p.add_argument("--track-origins", action="store_true",
                   help="ask valgrind where uninitialised values come from (slower)")
    p.add_argument("--noise", type=int, default=0, metavar="N",
                   help="also print the N most frequent stacks of the other errors")
    p.add_argument("--workload", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.workload:
        workload(args.workload)
        return 0
    if not shutil.which("valgrind"):
        sys.exit("valgrind is not installed (apt-get install valgrind)")
    sys.path.insert(0, TESTS)
    from fuzz import cases as fuzz_cases

    tmp = tempfile.mkdtemp(prefix="mfengine-memcheck-")
    cases_file = os.path.join(tmp, "cases.json")
    drawn = (fuzz_cases.generate_many(list(fuzz_cases.FAMILIES), args.per_family, args.seed)
             if args.per_family > 0 else {})
    cases = [c for fam in drawn for c in drawn[fam] if (c["family"], c["entry"]) not in SLOW_ENTRIES]
    cases += fuzz_cases.FINDINGS
    # a case that kills the process ends the loop under valgrind: find them natively first,
    # report them, and run only the first one, last, so that valgrind still sees it
    from fuzz import runner
    native = runner.run_cases(cases, timeout=60, trace_crashes=False)
    crashers = [c for c, r, o in native if o in ("crash", "hang")]
    for c in crashers:
        print(f"crashes natively (runs last under valgrind: {c is crashers[0]}): "
              f"{c['family']} {c['entry']} / {c['edit']}\n    {runner.reproducer(c)}")
    cases = [c for c in cases if c not in crashers] + crashers[:1]
    with open(cases_file, "w") as f:
        json.dump(cases, f)
    xml = os.path.join(tmp, "valgrind.xml")
    env = dict(os.environ, PYTHONMALLOC="malloc", OMP_NUM_THREADS="2", OPENBLAS_NUM_THREADS="1",
               MFENGINE_PROGRESS_DELAY="3600")
    cmd = ["valgrind", "--tool=memcheck", "--xml=yes", f"--xml-file={xml}",
           "--leak-check=full", "--show-leak-kinds=definite", "--errors-for-leak-kinds=definite",
           "--num-callers=30", "--error-limit=no", "--child-silent-after-fork=yes",
           f"--track-origins={'yes' if args.track_origins else 'no'}",
           sys.executable, os.path.abspath(__file__), "--workload", cases_file]
    print(f"{len(cases)} hostile cases + the valid calls of every family under valgrind ...",
          flush=True)
    print("$ PYTHONMALLOC=malloc OMP_NUM_THREADS=2 " + " ".join(cmd), flush=True)
    t0 = time.time()
    proc = subprocess.run(cmd, env=env)
    print(f"valgrind finished in {time.time() - t0:.0f} s with exit code {proc.returncode}")
    if args.keep:
        shutil.copy(xml, args.keep)
    mine, noise = parse(xml)
    by_kind = collections.Counter()
    for e in mine:
        by_kind[e["kind"]] += e["count"]
    print("\nerrors in mfengine's compiled code (a stack through mfengine/**/*.so):",
          dict(by_kind) if by_kind else "none")
    for e in mine[:20]:
        print(f"\n{e['kind']} (x{e['count']}): {e['what']}")
        for f in e["frames"][:12]:
            print("    " + _fmt_frame(f))
    print("\nother errors (CPython, numpy, OpenMP, the loader; not judged):",
          dict(noise) if noise else "none")
    if args.noise:
        _print_noise(xml, args.noise)
    ok = proc.returncode == 0 and not mine
    if proc.returncode != 0:
        print(f"the process under valgrind exited with {proc.returncode} (a crash?)")
    print("\nRESULT:", "clean" if ok else "ERRORS IN MFENGINE")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
