"""Fixtures of the benchmark suite: ``pytest bench/suite --benchmark-only``.

The nets, the data and mf.infer's 1-thread reference solution are built once per session;
every benchmark then times one call on the same inputs.  At the end a ratio table
(mfengine / NumPy, mfengine / PyTorch, 2 threads / 1 thread) is printed from the
patterns-per-second figures the benchmarks record in ``benchmark.extra_info``.
"""
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # bench/

import _paths  # noqa: E402,F401  (bench/ and its folders: _common, the peers, dag_compare)
import _common  # noqa: E402

_THROUGHPUT = {}   # (case, method, threads) -> patterns/s (best round)
_FINGERPRINT = _common.extension_fingerprint()


@pytest.fixture(scope="session")
def cases():
    return {}


@pytest.fixture(scope="session", params=sorted(_common.CASES))
def case(request, cases):
    name = request.param
    if name not in cases:
        cases[name] = _common.make_case(name)
    return cases[name]


@pytest.fixture(scope="session")
def _references():
    return {}


@pytest.fixture(scope="session")
def reference(case, _references):
    """mf.infer on 1 thread (untimed): the bounds every method is compared with."""
    if case.name not in _references:
        _references[case.name] = _common.run_mf(case, 1)
    return _references[case.name]


@pytest.fixture
def record():
    """record(benchmark, case, method, threads): store patterns/s in extra_info and for the
    end-of-run ratio table."""
    def _record(benchmark, case, method, threads, **info):
        n = case.V.shape[0]
        best = benchmark.stats.stats.min
        mean = benchmark.stats.stats.mean
        benchmark.extra_info["patterns_per_s"] = n / best
        benchmark.extra_info["patterns_per_s_mean"] = n / mean
        benchmark.extra_info["n_patterns"] = n
        benchmark.extra_info["threads"] = threads
        benchmark.extra_info.update(info)
        _THROUGHPUT[(case.name, method, threads)] = n / best
    return _record


def pytest_terminal_summary(terminalreporter):
    tr = terminalreporter
    if _common.extension_fingerprint() != _FINGERPRINT:
        tr.section("WARNING")
        tr.write_line(_common.REBUILT_WARNING)
    if not _THROUGHPUT:
        return
    tr.section("mfengine throughput ratios (best round, patterns/s)")
    for name in sorted({k[0] for k in _THROUGHPUT}):
        g = lambda m, t: _THROUGHPUT.get((name, m, t))  # noqa: E731
        tr.write_line(f"{name}: {_common.CASES[name]}")
        for (c, m, t), v in sorted(_THROUGHPUT.items()):
            if c == name:
                tr.write_line(f"    {m:8s} {t} thread(s): {v:10.1f} patterns/s")
        pairs = [("mf/NumPy (1 thread)", g("mf", 1), g("numpy", 1)),
                 ("mf/PyTorch (1 thread each)", g("mf", 1), g("torch", 1)),
                 ("mf 2 threads / 1 thread", g("mf", 2), g("mf", 1)),
                 ("PyTorch 2 threads / 1 thread", g("torch", 2), g("torch", 1))]
        for label, a, b in pairs:
            if a and b:
                tr.write_line(f"    {label:30s} {a / b:8.2f}x")
