"""Shared by the pytest-benchmark suite and ``speed/compare.py``: the benchmark cases, the three
methods behind one calling convention, and the agreement checks.

Cases (Saul & Jordan's 4x12x36x100 net; 1000 patterns sampled from the net; tol 1e-6):

* ``scale1``  -- ``mf.SigmoidBeliefNet(SIZES, weight_scale=1, random_state=0)``: weights
  N(0, 1/fan_in), zero biases (the paper's setting);
* ``normal01`` -- ``mf.SigmoidBeliefNet.from_params`` with standard-normal weights
  (``np.random.default_rng(0)``), zero biases: strongly coupled, the bound has many local
  maxima.

Agreement tolerances, per pattern, against mf.infer on 1 thread (measured on this machine,
n = 1000; "d" = method's bound - mf's bound, nats):

=========  ======  ====================================  =================================
case       method  measured                              asserted
=========  ======  ====================================  =================================
scale1     NumPy   mean|d| 1e-7, max|d| 6e-7             mean|d| < 1e-5, |mean d| < 1e-5
scale1     torch   mean|d| 3e-7, max|d| 9e-7             mean|d| < 1e-5, |mean d| < 1e-5
normal01   NumPy   mean d 1e-3 (SE 0.005); 97.7% of       |mean d| < max(1e-4, 4 SE)
                   patterns within 1e-3, 1.2% higher,
                   1.1% lower, by up to 3.2 nats
normal01   torch   mean d -1e-3 (SE 0.018, sd 0.58);      |mean d| < max(1e-4, 4 SE), and
                   76% of patterns within 1e-3, 12%       at least half of the patterns
                   higher, 12% lower, by up to ~6 nats    within 1e-3
                   (different local maxima)
=========  ======  ====================================  =================================

SE = standard error of the mean of d, sd(d) / sqrt(n): where the methods may end on different
local maxima, the test is that they find maxima of the same average height; |mean d| < 4 SE
holds for two equally good ascent methods with probability ~0.9999 and a fixed tolerance
would be either meaningless or, at n = 1000 (SE ~0.02 nats), a coin toss.

The NumPy version runs the kernel's algorithm as of commit 608390c step for step (it then
agreed with mf to 2e-7 per pattern on both cases); the kernel has since refined its updates
(e.g. skipping updates whose predicted gain is tiny), which on the N(0, 1) net sends ~2% of
the patterns to a different local maximum, either way.  L-BFGS on the logits is a different
ascent path altogether: with weights N(0, 1/fan_in) it reaches the same maximum; with N(0, 1)
weights a quarter of the patterns end on another local maximum.  So on normal01 only the mean
is compared, for both peers.

Independently of the peers, ``polish_gain`` checks that a solution is a maximum: the NumPy
solver, warm-started from it, must not gain more than ``MAX_POLISH_GAIN`` on any pattern
(measured for mf: mean 5e-7, max 2e-6 nats on both cases).  It exists because an
intermediate kernel build reported every N(0, 1) pattern converged while 30% of them were
still up to 5.9 nats below a maximum -- a fault the mean-bound comparison alone can miss.
"""
import contextlib
import time
from dataclasses import dataclass, field

import numpy as np

import mfengine as mf

import _paths  # noqa: F401  (the peers' folder on sys.path)
import numpy_gaussian
import torch_gaussian

SIZES = (4, 12, 36, 100)
N_PATTERNS = 1000
TOL = 1e-6
MAX_POLISH_GAIN = 1e-3
CASES = {
    "scale1": "4x12x36x100, weights N(0, 1/fan_in)",
    "normal01": "4x12x36x100, weights N(0, 1)",
}

AGREEMENT = {
    ("scale1", "numpy"): {"mean_abs_diff": 1e-5, "mean_diff": 1e-5},
    ("scale1", "torch"): {"mean_abs_diff": 1e-5, "mean_diff": 1e-5},
    ("normal01", "numpy"): {"mean_diff_se": (4.0, 1e-4)},
    ("normal01", "torch"): {"mean_diff_se": (4.0, 1e-4), "min_frac_within_1e-3": 0.5},
}


def extension_fingerprint():
    """(path, mtime, size) of mfengine's compiled modules: if it changes during a run, the
    library was rebuilt underneath it (an in-place rebuild can even change the code a running
    process executes), and that run's figures are not to be trusted."""
    import os
    from mfengine import _openmp
    from mfengine.sbn import _gaussian
    out = []
    for mod in (_openmp, _gaussian):
        st = os.stat(mod.__file__)
        out.append((mod.__file__, st.st_mtime_ns, st.st_size))
    return tuple(out)


REBUILT_WARNING = ("!! mfengine's compiled extension changed on disk during this run (rebuilt "
                   "underneath it): the figures above are not reliable; run again.")


@dataclass
class Case:
    name: str
    description: str
    net: object
    V: np.ndarray


def make_case(name, n=N_PATTERNS):
    if name == "scale1":
        net = mf.SigmoidBeliefNet(SIZES, weight_scale=1.0, random_state=0)
    elif name == "normal01":
        rng = np.random.default_rng(0)
        weights = [rng.standard_normal((SIZES[l + 1], SIZES[l])) for l in range(len(SIZES) - 1)]
        net = mf.SigmoidBeliefNet.from_params(weights, [np.zeros(k) for k in SIZES])
    else:
        raise ValueError(f"unknown case {name!r}")
    V = net.sample(n, random_state=1)
    return Case(name, CASES[name], net, V)


@dataclass
class Outcome:
    method: str
    threads: int
    bound: np.ndarray
    converged: np.ndarray
    mu_hidden: list
    iterations: str          # sweeps (mean / max) or L-BFGS iterations
    seconds: float = float("nan")
    cpu_seconds: float = float("nan")
    extra: dict = field(default_factory=dict)


@contextlib.contextmanager
def blas_threads(n):
    """Limit BLAS (NumPy's matrix products) to n threads, if threadpoolctl is installed."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        yield
        return
    with threadpool_limits(limits=n, user_api="blas"):
        yield


def run_mf(case, threads, tol=TOL):
    r = mf.infer(case.net, case.V, tol=tol, n_threads=threads)
    return Outcome("mfengine", threads, r.bound, r.converged, r.mu[:-1],
                   f"{r.n_iter.mean():.1f}/{r.n_iter.max()} sweeps")


def run_numpy(case, tol=TOL):
    with blas_threads(1):
        r = numpy_gaussian.infer(case.net, case.V, tol=tol)
    return Outcome("NumPy", 1, r.bound, r.converged, r.mu[:-1],
                   f"{r.n_iter.mean():.1f}/{r.n_iter.max()} sweeps")


def run_torch(case, threads, tol=TOL):
    r = torch_gaussian.infer(case.net, case.V, tol=tol, n_threads=threads)
    return Outcome("PyTorch L-BFGS", threads, r.bound, r.converged, r.mu[:-1],
                   f"{r.n_iter} it/{r.n_evals} evals", extra={"stop_reason": r.stop_reason})


def timed(fn, *args, repeats=1, budget=None, **kw):
    """Run fn up to ``repeats`` times (stopping early once ``budget`` seconds have been spent,
    if given); return the last Outcome with the best wall time in ``.seconds`` and the CPU
    time of the calling thread during that run in ``.cpu_seconds``.  A 1-thread run computes
    in the calling thread, so for it the CPU time is the figure least disturbed by other work
    on the machine (it does not count time the thread spent waiting for a core); for
    multi-threaded runs it is meaningless."""
    best, cpu, out, spent = float("inf"), float("nan"), None, 0.0
    for _ in range(repeats):
        c0 = time.thread_time()
        t0 = time.perf_counter()
        out = fn(*args, **kw)
        dt = time.perf_counter() - t0
        dc = time.thread_time() - c0
        if dt < best:
            best, cpu = dt, dc
        spent += dt
        if budget is not None and spent >= budget:
            break
    out.seconds = best
    out.cpu_seconds = cpu
    return out


def core_scaling(rounds=3):
    """This machine's two-thread scaling right now, measured on code that is not mfengine's
    (``mfengine._openmp.core_probe``: cache-bound sums, each thread over its own 512 KiB):
    the best one-thread time over the best two-thread time of ``rounds`` alternating rounds.
    About 2.0 on two free cores; a VM whose virtual cores the host runs on one physical core
    (SMT siblings sharing its L2) gives about 1.3 for this code, and a thread comparison
    printed beside it is bounded by the machine, not by the code."""
    from mfengine import _openmp

    best = {1: float("inf"), 2: float("inf")}
    for _ in range(rounds):
        for t in (1, 2):
            best[t] = min(best[t], _openmp.core_probe(t))
    return best[1] / best[2]


def measure(fn, *args, **kw):
    """One call of ``fn``: (its result, (wall seconds, CPU seconds of the calling thread, CPU
    seconds of the process))."""
    c0, p0, t0 = time.thread_time(), time.process_time(), time.perf_counter()
    out = fn(*args, **kw)
    dt = time.perf_counter() - t0
    return out, (dt, time.thread_time() - c0, time.process_time() - p0)


def timed_threads(fn, threads=(1, 2), repeats=5, budget=None):
    """``fn(t)`` for each thread count t in turn, round after round (a slow spell of a shared
    machine then falls on every thread count alike, not on whichever ran during it), up to
    ``repeats`` rounds, none started once the calls have taken ``budget`` seconds.  Returns
    {t: (outcome, wall seconds, CPU seconds of the calling thread, CPU seconds of the
    process)} of each t's fastest round by wall time."""
    best, spent = {}, 0.0
    for _ in range(repeats):
        for t in threads:
            out, m = measure(fn, t)
            if t not in best or m[0] < best[t][1]:
                best[t] = (out,) + m
            spent += m[0]
        if budget is not None and spent >= budget:
            break
    return best


def agreement(bound, ref):
    d = np.asarray(bound) - np.asarray(ref)
    return {
        "mean_diff": float(d.mean()),
        "se_mean_diff": float(d.std(ddof=1) / np.sqrt(d.size)) if d.size > 1 else float("nan"),
        "mean_abs_diff": float(np.abs(d).mean()),
        "max_abs_diff": float(np.abs(d).max()),
        "frac_within_1e-3": float(np.mean(np.abs(d) <= 1e-3)),
        "frac_higher_1e-3": float(np.mean(d > 1e-3)),
        "frac_lower_1e-3": float(np.mean(d < -1e-3)),
    }


def check_agreement(case_name, method, bound, ref):
    """Assert the stated tolerance (see the module docstring); returns the statistics."""
    st = agreement(bound, ref)
    lim = AGREEMENT[(case_name, method)]
    msg = f"{method} vs mfengine on {case_name}: {st}"
    if "mean_abs_diff" in lim:
        assert st["mean_abs_diff"] < lim["mean_abs_diff"], msg
    if "mean_diff" in lim:
        assert abs(st["mean_diff"]) < lim["mean_diff"], msg
    if "mean_diff_se" in lim:
        k, floor = lim["mean_diff_se"]
        assert abs(st["mean_diff"]) < max(floor, k * st["se_mean_diff"]), msg
    if "min_frac_within_1e-3" in lim:
        assert st["frac_within_1e-3"] >= lim["min_frac_within_1e-3"], msg
    return st


def polish_gain(case, mu_hidden, bound, tol=TOL):
    """What the NumPy solver still gains when warm-started from a solution, per pattern
    (array, nats).  ~0 everywhere means the solution is a local maximum of the bound.  The
    NumPy solver is used (not mf.infer) so that the check does not depend on the library
    under test."""
    init = np.concatenate(mu_hidden, axis=1)
    with blas_threads(1):
        r = numpy_gaussian.infer(case.net, case.V, tol=tol, init_mu=init)
    return r.bound - bound
