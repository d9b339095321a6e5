"""Benchmarks of mf.infer against the NumPy and PyTorch peers on the same inputs.

Run: ``pytest bench/suite --benchmark-only``.  Each benchmark records patterns/s in
``benchmark.extra_info``; correctness is asserted (every mf pattern converged and at a
maximum -- the NumPy solver warm-started from mf's solution gains < 1e-3 nats --, identical
answers for 1 and 2 threads, the peers' bounds within the tolerances stated in ``_common``),
timings never are.  The slow peers run a single timed round.
"""
import numpy as np
import pytest

import _common
import numpy_gaussian
import torch_gaussian

import mfengine as mf

TOL = _common.TOL


@pytest.mark.parametrize("threads", [1, 2])
def test_mfengine(benchmark, case, reference, record, threads):
    r = benchmark(mf.infer, case.net, case.V, tol=TOL, n_threads=threads)
    record(benchmark, case, "mf", threads, mean_bound=float(r.bound.mean()),
           mean_sweeps=float(r.n_iter.mean()), max_sweeps=int(r.n_iter.max()),
           frac_converged=float(r.converged.mean()))
    assert r.converged.all(), f"{(~r.converged).sum()} patterns did not converge"
    # the design promises the same answer for any thread count
    np.testing.assert_array_equal(r.bound, reference.bound)
    if threads == 1:
        # converged must mean "at a maximum": an independent solver started there gains ~0
        gain = _common.polish_gain(case, r.mu[:-1], r.bound)
        benchmark.extra_info["polish_gain_mean"] = float(gain.mean())
        benchmark.extra_info["polish_gain_max"] = float(gain.max())
        assert gain.max() < _common.MAX_POLISH_GAIN, (
            f"mf.infer stopped below a maximum: the NumPy solver started from its solution gains "
            f"up to {gain.max():.3g} nats (mean {gain.mean():.3g}; "
            f"{(gain > _common.MAX_POLISH_GAIN).mean():.1%} of patterns above "
            f"{_common.MAX_POLISH_GAIN:g})")


def test_numpy(benchmark, case, reference, record):
    def run():
        with _common.blas_threads(1):
            return numpy_gaussian.infer(case.net, case.V, tol=TOL)

    r = benchmark.pedantic(run, rounds=1, iterations=1)
    st = _common.check_agreement(case.name, "numpy", r.bound, reference.bound)
    record(benchmark, case, "numpy", 1, mean_bound=float(r.bound.mean()),
           frac_converged=float(r.converged.mean()), **st)
    assert r.converged.all()


@pytest.mark.parametrize("threads", [1, 2])
def test_torch(benchmark, case, reference, record, threads):
    if not torch_gaussian.available():
        pytest.skip(f"PyTorch peer skipped: {torch_gaussian.why_unavailable()}")
    if threads == 2 and case.name == "normal01":
        pytest.skip("PyTorch on 2 threads is timed on scale1 only (normal01 takes ~600 L-BFGS "
                    "iterations of tiny parallel regions: minutes on a busy 2-core machine)")
    torch_gaussian.infer(case.net, case.V[:8], tol=TOL, n_threads=threads)   # warm-up, untimed
    r = benchmark.pedantic(torch_gaussian.infer, args=(case.net, case.V),
                           kwargs={"tol": TOL, "n_threads": threads}, rounds=1, iterations=1)
    st = _common.check_agreement(case.name, "torch", r.bound, reference.bound)
    record(benchmark, case, "torch", threads, mean_bound=float(r.bound.mean()),
           frac_converged=float(r.converged.mean()), lbfgs_iterations=r.n_iter,
           evaluations=r.n_evals, stop_reason=r.stop_reason, **st)
