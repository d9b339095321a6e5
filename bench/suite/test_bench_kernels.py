"""Microbenchmarks of every compiled kernel family on main, at several sizes.

    pytest bench/suite --benchmark-only -k kernels                 # run
    pytest bench/suite --benchmark-only --benchmark-autosave       # save (.benchmarks/)
    pytest bench/suite --benchmark-only --benchmark-compare        # compare with the last save

Each benchmark times one call on inputs built once, and records its throughput in
``extra_info``.  Nothing here asserts a timing; each checks that the result is sane.
"""
import numpy as np
import pytest

import mfengine as mf

INFER_SIZES = [(4, 12, 36, 100), (8, 24, 64), (10, 50, 200), (20, 100, 400)]
FIT_SIZES = [(8, 24, 64), (4, 12, 36, 100)]
ENUM_SIZES = [(2, 4, 8), (4, 8, 16), (4, 12, 30)]


def _data(sizes, n, seed=0):
    net = mf.SigmoidBeliefNet(list(sizes), random_state=seed)
    return net, net.sample(n, random_state=seed + 1)


@pytest.mark.parametrize("sizes", INFER_SIZES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("n_threads", [1, 2])
def test_kernels_infer(benchmark, sizes, n_threads):
    """mf.infer (Gaussian mean field), tol 1e-6, weights N(0, 1/fan-in)."""
    net, V = _data(sizes, 400)
    r = benchmark.pedantic(mf.infer, args=(net, V), kwargs={"n_threads": n_threads},
                           rounds=3, iterations=1, warmup_rounds=1)
    assert r.converged.all()
    benchmark.extra_info["patterns_per_s"] = V.shape[0] / benchmark.stats.stats.min
    benchmark.extra_info["weights"] = net.n_weights


@pytest.mark.parametrize("sizes", FIT_SIZES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("batch_size", [1, 20])
def test_kernels_fit_epoch(benchmark, sizes, batch_size):
    """One compiled training epoch (solve, exact gradient, update) over 200 patterns."""
    _, V = _data(sizes, 200)

    def one_epoch():
        net = mf.SigmoidBeliefNet(list(sizes), weight_scale=0.5, random_state=3, max_iter=1,
                                  learning_rate=0.05, batch_size=batch_size, progress=False)
        return net.fit(V).history_

    hist = benchmark.pedantic(one_epoch, rounds=3, iterations=1, warmup_rounds=1)
    assert np.isfinite(hist).all()
    benchmark.extra_info["patterns_per_s"] = V.shape[0] / benchmark.stats.stats.min


@pytest.mark.parametrize("sizes", INFER_SIZES[:3], ids=lambda s: "x".join(map(str, s)))
def test_kernels_gradient(benchmark, sizes):
    """The gradient of the summed bound at a given mean-field solution."""
    net, V = _data(sizes, 400)
    r = mf.infer(net, V)
    gW, gb = benchmark.pedantic(mf.gradient, args=(net, V), kwargs={"result": r},
                                rounds=5, iterations=1, warmup_rounds=1)
    assert all(np.isfinite(g).all() for g in gW + gb)
    benchmark.extra_info["patterns_per_s"] = V.shape[0] / benchmark.stats.stats.min


@pytest.mark.parametrize("sizes", ENUM_SIZES, ids=lambda s: "x".join(map(str, s)))
def test_kernels_exact_log_likelihood(benchmark, sizes):
    """Exact ln P(v) by enumeration over the hidden states (the tests' oracle)."""
    net, V = _data(sizes, 200)
    ll = benchmark.pedantic(net.exact_log_likelihood, args=(V,), rounds=3, iterations=1)
    assert np.isfinite(ll).all()
    benchmark.extra_info["patterns_per_s"] = V.shape[0] / benchmark.stats.stats.min
    benchmark.extra_info["hidden_states"] = 2 ** net.n_hidden
