"""ContextHMM never corrupts memory (issue 14): one test per root cause found by fuzzing.

Every hazard runs in a child process (``python -c ...``), so that a crash, an abort from the
allocator or a hang is a failed test rather than a dead test run.  The child prints what it
saw; the parent checks the exit code and the output.
"""
import os
import subprocess
import sys
import textwrap

import pytest

PRELUDE = """
import numpy as np, warnings
import mfengine as mf
from mfengine.hmm import _chain
warnings.simplefilter("ignore")
def model(lag=2, context="both", **kw):
    h = mf.ContextHMM(2, 1, lag=lag, context=context, progress=False, **kw)
    h.means_ = np.array([[0.0], [1.0]])
    h.transmat_ = np.array([[0.9, 0.1], [0.2, 0.8]])
    if context in ("right", "both"):
        h.right_means_ = np.array([[0.3], [-0.2]])
    if context in ("left", "both"):
        h.left_means_ = np.array([[0.1], [0.4]])
    return h
X = np.sin(np.arange(30.0))[:, None] + 0.5
def err(f):
    try:
        f()
    except Exception as e:
        return f"{type(e).__name__}: {e}"
    return "no error"
# after the call: churn the heap, so that a corruption it left shows up here
junk = [np.ones(1000 + k) for k in range(2000)]
"""


def child(code, timeout=240):
    """Run ``code`` after PRELUDE in a fresh interpreter; return its stdout (asserting exit 0)."""
    src = PRELUDE + textwrap.dedent(code) + "\njunk = [np.ones(1000 + k) for k in range(2000)]\nprint('CHILD-OK')\n"
    res = subprocess.run([sys.executable, "-c", src], capture_output=True, text=True,
                         timeout=timeout, env={**os.environ, "OMP_NUM_THREADS": "2"})
    assert res.returncode == 0, f"child exited with {res.returncode}\n{res.stdout}\n{res.stderr[-3000:]}"
    assert "CHILD-OK" in res.stdout
    return res.stdout


# ------------------------------------------------------------------------------------------
# 1. a huge lag: no buffer sized by it, and lag >= T is exactly the first-order model

def test_huge_lag_is_the_first_order_model():
    out = child("""
    for method in ("structured", "naive", "exact"):
        # the same model with its context weights at zero: a first-order HMM
        first = model(lag=1)
        first.right_means_ = np.zeros((2, 1)); first.left_means_ = np.zeros((2, 1))
        want = model(lag=len(X)).score(X, method=method)
        assert abs(want - first.score(X, method=method)) < 1e-12 * abs(want)
        for lag in (30, 31, 10**9, 2**57, 2**62, 2**63 - 1):
            for context in ("right", "left", "both"):
                got = model(lag=lag, context=context).score(X, method=method)
                assert got == want, (method, lag, context, got, want)
        print(method, "same")
    # the issue's reproducer
    h = mf.ContextHMM(2, 1, lag=2**62, context="right"); h.means_ = np.array([[0.], [1.]])
    print("repro", np.isfinite(h.score(np.zeros((30, 1)))))
    """)
    assert out.count("same") == 3 and "repro True" in out


def test_huge_lag_at_the_kernel_boundary():
    # the compiled entry point itself turns a lag >= T into the first-order model
    out = child("""
    sp = np.array([0.5, 0.5]); A = np.array([[0.9, 0.1], [0.2, 0.8]])
    U = np.array([[0.], [1.]]); V = np.array([[0.3], [-0.2]]); W = np.array([[0.1], [0.4]])
    off = np.array([0, 30], dtype=np.intp)
    for method in ("structured", "naive", "exact"):
        fo = _chain.run(method, sp, A, U, V, W, 1, False, False, X, off, 100, 1e-10, True, 1)
        for lag in (30, 2**57, 2**62, 2**63 - 1):
            r = _chain.run(method, sp, A, U, V, W, lag, True, True, X, off, 100, 1e-10, True, 1)
            assert r["bound"][0] == fo["bound"][0], (method, lag)
        print(method, "same")
    """)
    assert out.count("same") == 3


def test_lag_2_63_minus_1_naive_is_lag_T():
    # t + lag overflowed in the naive kernel: a different answer from any lag >= T
    out = child("""
    a = model(lag=2**63 - 1).score(X, method="naive")
    b = model(lag=len(X)).score(X, method="naive")
    c = model(lag=10**12).score(X, method="naive")
    print("equal", a == b == c)
    """)
    assert "equal True" in out


# ------------------------------------------------------------------------------------------
# 2. lengths whose integer sum wraps around to len(X)

def test_lengths_whose_sum_wraps_are_refused():
    out = child("""
    X = np.zeros((10, 1))
    calls = {"structured": lambda h, L: h.score(X, lengths=L, method="structured"),
             "naive": lambda h, L: h.score(X, lengths=L, method="naive"),
             "exact": lambda h, L: h.score(X, lengths=L, method="exact"),
             "infer": lambda h, L: h.infer(X, lengths=L),
             "fit": lambda h, L: h.fit(X, lengths=L)}
    for name, call in calls.items():
        for L in ([2**62, 2**62, 2**63 - 1, 11],
                  np.array([2**62, 2**62, 2**63 - 1, 11], dtype=np.int64),
                  np.array([2**63, 2**63, 10], dtype=np.uint64),
                  [2**64, -2**64 + 10], [5, 5.0], [2**70, 10], [3, 3, 4, 0], [-1, 11]):
            h = model(lag=1)
            print(name, err(lambda: call(h, L)))
    """)
    lines = [l for l in out.splitlines() if l.split(" ")[0] in
             ("structured", "naive", "exact", "infer", "fit")]
    assert len(lines) == 40 and all(" ValueError: lengths" in l for l in lines), out


def test_offsets_are_checked_at_the_kernel_boundary():
    out = child("""
    sp = np.array([0.5, 0.5]); A = np.array([[0.9, 0.1], [0.2, 0.8]])
    U = np.array([[0.], [1.]]); V = np.array([[0.3], [-0.2]]); W = np.array([[0.1], [0.4]])
    for off in ([0, 2**62, 30], [0, 31], [0, 20, 10, 30], [1, 30], [0, 0, 30], [0]):
        print(err(lambda: _chain.run("structured", sp, A, U, V, W, 2, True, True, X,
                                     np.array(off, dtype=np.intp), 5, 1e-10, False, 1)))
    """)
    lines = [l for l in out.splitlines() if l.startswith(("ValueError", "no error"))]
    assert len(lines) == 6 and all("lengths" in l for l in lines), out


# ------------------------------------------------------------------------------------------
# 3. and 4. hyperparameters assigned after construction

def test_sweep_budget_and_lag_assigned_after_construction():
    out = child("""
    for method in ("structured", "naive", "exact"):
        for bad in (-1, -2**63, 2**63, 2**64, 1.5, "3", None, True):
            h = model()
            h.infer_max_iter = bad
            print("budget", err(lambda: h.score(X, method=method)))
            print("budget", err(lambda: h.infer(X, method=method)))
        h = model()
        h.infer_max_iter = 2**62      # a huge budget is valid: the history buffer stays small
        print("huge", np.isfinite(h.score(X, method=method)))
        for bad in (-1, -2**63, 0, 2**63, 2**64, 2.0, "2", None):
            h = model()
            h.lag = bad
            print("lag", err(lambda: h.score(X, method=method)))
            print("lag", err(lambda: h.sample(5)))
    """)
    budget = [l for l in out.splitlines() if l.startswith("budget")]
    lag = [l for l in out.splitlines() if l.startswith("lag")]
    assert len(budget) == 48 and all(l.startswith("budget InvalidParameterError: The 'infer_max_iter' parameter")
                                     for l in budget), out
    assert len(lag) == 48 and all(l.startswith("lag InvalidParameterError: The 'lag' parameter") for l in lag), out
    assert out.count("huge True") == 3


def test_kernel_refuses_bad_sizes_itself():
    # the C entry points check their arguments (MF_EBADARG = -1, MF_EOVERFLOW = -3) rather than
    # trusting the caller; called here through ctypes, below every Python check
    out = child("""
    import ctypes
    lib = ctypes.CDLL(_chain.__file__)
    class Model(ctypes.Structure):
        _fields_ = [("n", ctypes.c_ssize_t), ("D", ctypes.c_ssize_t), ("lag", ctypes.c_ssize_t),
                    ("right", ctypes.c_int), ("left", ctypes.c_int)] + [
                    (k, ctypes.POINTER(ctypes.c_double)) for k in ("sp", "A", "U", "V", "W")]
    P = ctypes.POINTER(ctypes.c_double)
    def ptr(a):
        return a.ctypes.data_as(P)
    sp = np.array([0.5, 0.5]); A = np.array([[0.9, 0.1], [0.2, 0.8]]); U = np.array([[0.], [1.]])
    q = np.zeros((30, 2)); hist = np.zeros(4); ns = ctypes.c_ssize_t(); b = ctypes.c_double()
    f = lib.mf_hmm_naive
    f.argtypes = [ctypes.POINTER(Model), ctypes.c_ssize_t, P, ctypes.c_ssize_t, ctypes.c_double,
                  P, P, ctypes.c_ssize_t, ctypes.POINTER(ctypes.c_ssize_t), P]
    def call(n=2, D=1, lag=2, T=30, ms=3, tol=1e-10, hl=4):
        m = Model(n, D, lag, 1, 1, ptr(sp), ptr(A), ptr(U), ptr(U), ptr(U))
        return f(ctypes.byref(m), T, ptr(X), ms, tol, ptr(q), ptr(hist), hl, ctypes.byref(ns),
                 ctypes.byref(b))
    print("ok", call())
    print("lag", call(lag=-1), call(lag=-2**63), call(lag=0))
    print("sweeps", call(ms=-1), call(tol=float("nan")), call(tol=-1.0), call(hl=0))
    print("sizes", call(T=0), call(n=0), call(D=0), call(T=-5))
    print("overflow", call(T=2**62), call(n=2**40, T=2**30))
    print("lag_big", call(lag=2**63 - 1), hist[0] == hist[0])
    es = lib.mf_hmm_exact_states
    es.restype = ctypes.c_ssize_t
    es.argtypes = [ctypes.POINTER(Model), ctypes.c_ssize_t]
    m = Model(3, 1, 2**62, 1, 1, ptr(sp), ptr(A), ptr(U), ptr(U), ptr(U))
    print("states", es(ctypes.byref(m), 2**62 + 5), es(ctypes.byref(m), 50))
    """)
    assert "ok 1" in out or "ok 0" in out
    assert "lag -1 -1 -1" in out
    assert "sweeps -1 -1 -1 -1" in out
    assert "sizes -1 -1 -1 -1" in out
    assert "overflow -3 -3" in out
    assert "lag_big 0 True" in out or "lag_big 1 True" in out
    assert "states -1 3" in out   # n = 3: lag >= T leaves windows of one state


# ------------------------------------------------------------------------------------------
# threads, memory

def test_thread_count_is_clamped_before_openmp():
    out = child("""
    from mfengine.hmm._checks import n_threads_for as _n_threads
    import os
    ref = model(n_threads=1).score(X)
    for nt in (10**6, 2**31, 2**70, -10**6, -2**70):
        h = model(n_threads=nt)
        print(nt > 0 and 1 <= _n_threads(nt, 5) <= os.cpu_count(), h.score(X) == ref)
    print(err(lambda: model(n_threads=0).score(X)))
    print(err(lambda: model(n_threads=1.5).score(X)))
    """)
    lines = out.splitlines()
    assert sum(l.endswith("True") for l in lines) == 5
    assert out.count("InvalidParameterError: The 'n_threads' parameter") == 2


def test_a_failed_allocation_is_a_memory_error_naming_the_size():
    # 2**33 augmented states: tens of GiB of scratch, refused by malloc under an address-space
    # limit; the error says how much was needed
    out = child("""
    import resource
    resource.setrlimit(resource.RLIMIT_AS, (6 * 2**30, resource.RLIM_INFINITY))
    h = model(lag=16, context="both", max_augmented_states=2**40)
    print(err(lambda: h.score(np.zeros((40, 1)), method="exact")))
    """)
    assert "MemoryError" in out and "bytes" in out and "GiB" in out, out
