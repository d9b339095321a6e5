"""The long fuzz profile (issue 14): hostile calls to every public entry point of every family.

Draws cases with Hypothesis (fixed seeds, so a run is repeatable), runs each one in a child
process (``tests/fuzz/worker.py``; one child per few hundred cases, restarted after a crash or
a hang), and prints one table per family -- calls, crashes, hangs, silent bad results,
unclear messages, refused valid input -- with a one-line reproducer for every failure kind.

    python bench/tools/fuzz_long.py                      # ~11,500 calls, ~5 min on 2 cores
    python bench/tools/fuzz_long.py --per-family 50      # a quick look
    python bench/tools/fuzz_long.py --family NLGBN --per-family 2000 --seed 7
    python bench/tools/fuzz_long.py --json fuzz.json     # every outcome, for a closer look

Exit status 1 when a crash, a hang or a silent bad result was found.  See docs/maintainers.rst.
"""
import argparse
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests"))

from fuzz import cases as fuzz_cases  # noqa: E402
from fuzz import runner  # noqa: E402


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--per-family", type=int, default=2000,
                   help="cases drawn per family (default 2000; duplicates dropped, and mf.infer "
                        "and load have fewer distinct cases: about 11,500 calls in all)")
    p.add_argument("--family", action="append", choices=sorted(fuzz_cases.FAMILIES),
                   help="only this family (repeatable); default: all")
    p.add_argument("--seed", type=int, default=20140,
                   help="Hypothesis seed (the same seed draws the same cases)")
    p.add_argument("--timeout", type=float, default=30.0, help="seconds per call before a hang")
    p.add_argument("--no-malloc-check", action="store_true",
                   help="run the children without glibc's heap checks (faster, finds less)")
    p.add_argument("--json", help="write every case and its outcome to this file")
    p.add_argument("--all-examples", action="store_true",
                   help="print every failure, not three per kind and family")
    args = p.parse_args(argv)

    families = args.family or list(fuzz_cases.FAMILIES)
    t0 = time.time()
    all_cases = []
    drawn = fuzz_cases.generate_many(families, args.per_family, seed=args.seed)
    for fam in families:
        all_cases += drawn[fam]
        print(f"{fam}: {len(drawn[fam])} cases drawn", flush=True)
    all_cases += [c for c in fuzz_cases.FINDINGS if c["family"] in families]
    print(f"drew {len(all_cases)} cases (with {len(fuzz_cases.FINDINGS)} regression cases) in "
          f"{time.time() - t0:.0f} s; running them ...", flush=True)

    def progress(k, total, last):
        if k % 250 == 0 or k == total:
            print(f"  {k}/{total} calls, {time.time() - t0:.0f} s", flush=True)
        case, res, outcome = last
        if outcome in runner.FAILURES:
            print(f"  ! {outcome} in {case['family']} {case['entry']} / {case['edit']}", flush=True)

    results = runner.run_cases(all_cases, timeout=args.timeout,
                               malloc_check=not args.no_malloc_check, progress=progress)
    table = runner.summarize(results)
    if args.all_examples:
        for fam, row in table.items():
            row["examples"].clear()
        for case, res, outcome in results:
            if outcome not in ("ok", "clean"):
                table[case["family"]]["examples"][outcome].append(runner.describe(case, res))
    print()
    print(runner.format_table(table))
    print(f"\n{len(results)} calls in {time.time() - t0:.0f} s (seed {args.seed})")
    if args.json:
        with open(args.json, "w") as f:
            json.dump([{"case": c, "result": r, "outcome": o} for c, r, o in results], f,
                      indent=1, default=str)
    failures = sum(row.get(k, 0) for row in table.values() for k in runner.FAILURES)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
