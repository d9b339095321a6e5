"""Warnings raised inside mfengine point at the caller's line, however deep the package's own
frames go (the estimator, the routing wrapper of mfengine._base, the solve helpers)."""
import inspect
import warnings

import numpy as np
import pytest

import mfengine as mf


def _here():
    return inspect.currentframe().f_back.f_lineno


def _sbn():
    net = mf.SigmoidBeliefNet([4, 8, 16], weight_scale=4.0, random_state=0, progress=False)
    return net, net.sample(50, random_state=1)


def _calls():
    """(name, thunk) pairs that each raise a warning from deep inside the package."""
    net, X = _sbn()
    g = mf.NLGBN([2, 4, 6], random_state=0, max_iter=2, tol=1e-12, progress=False)
    Xg = g.sample(30, random_state=0)
    h = mf.ContextHMM(2, 1, lag=2, random_state=0, max_iter=2, tol=1e-12, progress=False)
    Xh = np.sin(np.arange(40.0))[:, None]
    W = np.tril(np.random.default_rng(0).uniform(0, 1, (9, 9)), -1)
    d = mf.BeliefNet(W, np.full(9, 0.1), visible=[6, 7, 8], activation="noisy_or", max_iter=1,
                     tol=1e-12, progress=False)
    Xd = d.sample(20, random_state=0)
    return [
        ("SigmoidBeliefNet.infer", lambda: (net.infer(X, max_iter=1), _here())[1]),
        ("mf.infer", lambda: (mf.infer(net, X, max_iter=1), _here())[1]),
        ("NLGBN.fit", lambda: (g.fit(Xg), _here())[1]),
        ("ContextHMM.fit", lambda: (h.fit(Xh), _here())[1]),
        ("BeliefNet.fit", lambda: (d.fit(Xd), _here())[1]),
    ]


@pytest.mark.parametrize("k", range(5))
def test_warning_points_at_the_callers_line(k):
    name, thunk = _calls()[k]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        line = thunk()
    ours = [w for w in caught if issubclass(w.category, mf.ConvergenceWarning)]
    assert ours, f"{name} raised no ConvergenceWarning"
    for w in ours:
        assert w.filename == __file__, (name, w.filename)
        assert w.lineno == line, (name, w.lineno, line)


def test_user_stacklevel_counts_the_package_frames():
    from mfengine._base import user_stacklevel

    # called from outside the package, the caller's own frame is the answer
    assert user_stacklevel() == 1
