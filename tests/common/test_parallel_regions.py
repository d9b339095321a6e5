"""A static check of every OpenMP region in the Cython sources.

Cython makes a variable private to each thread of a ``parallel``/``prange`` region only where
the region assigns it.  A variable the region only writes through a pointer (``&x`` passed to a
kernel as an output) stays SHARED, so two threads overwrite each other's result: the Plefka
coordinate-descent pass once returned another item's G, iteration count and converged flag
this way, a race no run on one thread can show.  Every ``&x`` inside a parallel region must
therefore be assigned in that region, unless ``x`` is one of the read-only structures below.
"""
import re
from pathlib import Path

import pytest

SOURCES = Path(__file__).resolve().parents[2] / "mfengine"

#: Passed by address but only ever read inside the regions: the net or DAG description, and
#: the placeholder a kernel gets for an empty weight array.
READ_ONLY = {"net", "g", "dummy", "dummy_w"}


def _regions(path):
    lines = path.read_text().splitlines()
    for k, line in enumerate(lines):
        m = re.match(r"(\s*)with .*\bparallel\(", line)
        if not m:
            continue
        indent = len(m.group(1))
        body = []
        for nxt in lines[k + 1:]:
            if nxt.strip() and len(nxt) - len(nxt.lstrip()) <= indent:
                break
            body.append(nxt.split("#", 1)[0])
        yield k + 1, "\n".join(body)


FILES = sorted(p for ext in ("*.pyx", "*.pxi") for p in SOURCES.rglob(ext))


def test_the_sources_are_there():
    # the tests run from the repository, beside the sources they check
    assert len(FILES) >= 10
    # (several kernels run their threads through the plain-C mf_parallel_for instead)
    assert sum(1 for f in FILES for _ in _regions(f)) >= 5


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_outputs_written_through_pointers_are_thread_private(path):
    for line, text in _regions(path):
        outs = set(re.findall(r"&([A-Za-z_]\w*)\b(?!\s*[\[.])", text)) - READ_ONLY
        for name in outs:
            assert re.search(rf"^\s*{name}\s*=[^=]", text, re.M), (
                f"{path.name} line {line}: &{name} in a parallel region that never assigns "
                f"{name}: Cython leaves it shared between the threads")


def test_the_check_finds_the_race_it_was_written_for(tmp_path):
    bad = tmp_path / "bad.pyx"
    bad.write_text("def f():\n    with nogil, parallel(num_threads=2):\n"
                   "        for p in prange(10):\n            st = solve(&G2)\n")
    with pytest.raises(AssertionError, match="&G2"):
        test_outputs_written_through_pointers_are_thread_private(bad)


def test_core_probe_times_the_same_work_on_any_thread_count():
    """The machine probe the benchmarks print beside their thread comparisons: a positive,
    finite time for one and two threads, and bad arguments refused by name.  (How the two
    times compare depends on the machine's load; the benchmarks report it, a test cannot.)"""
    from mfengine import _openmp

    t1 = min(_openmp.core_probe(1, kib=64, iters=200) for _ in range(3))
    t2 = min(_openmp.core_probe(2, kib=64, iters=200) for _ in range(3))
    assert 0.0 < t1 < 10.0 and 0.0 < t2 < 10.0
    for bad in (dict(n_threads=0), dict(n_threads=1, kib=0), dict(n_threads=1, iters=0)):
        with pytest.raises(ValueError, match="positive"):
            _openmp.core_probe(**bad)
