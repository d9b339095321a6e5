"""NLGBN.partial_fit (issue 12 item 2): online (stepwise) EM on mini-batches."""
import warnings

import numpy as np
import pytest

import mfengine as mf


def _data(n=600, seed=0):
    return mf.datasets.make_continuous_bars(n, noisy=True, random_state=seed)


def _params(g):
    return [a.copy() for a in g.weights_ + g.biases_ + g.variances_]


def test_first_call_is_fits_first_em_update():
    X = _data(300)
    a = mf.NLGBN([1, 6, 36], units=["binary", "rectified", "linear"], random_state=1,
                 progress=False)
    a.sample(1)                                   # draws the parameters
    b = mf.NLGBN([1, 6, 36], units=["binary", "rectified", "linear"], random_state=1,
                 max_iter=1, warm_start=True, progress=False)
    b.sample(1)
    for p, q in zip(_params(a), _params(b)):
        np.testing.assert_array_equal(p, q)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        a.partial_fit(X)
        b.fit(X)
    # one E-step from the prior means, then the M-step on the batch's statistics: the same
    # update as fit's first EM iteration (the same code path, so to rounding)
    for p, q in zip(_params(a), _params(b)):
        np.testing.assert_allclose(p, q, rtol=1e-12, atol=1e-12)
    assert a.n_batches_ == 1 and a.history_.shape == (1,)
    assert a.history_[0] == pytest.approx(b.history_[0], rel=1e-12)
    # a model without parameters draws them on the first call (as fit does)
    c = mf.NLGBN([1, 6, 36], units=["binary", "rectified", "linear"], random_state=1,
                 progress=False).partial_fit(X)
    for p, q in zip(_params(a), _params(c)):
        np.testing.assert_allclose(p, q, rtol=1e-12, atol=1e-12)


def test_repeated_partial_fit_over_chunks_raises_the_bound():
    X = _data(800, seed=2)
    g = mf.NLGBN([1, 8, 36], units=["binary", "rectified", "linear"], random_state=3,
                 progress=False)
    g.sample(1)
    start = g.score(X)
    scores = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for epoch in range(3):
            for chunk in np.array_split(X, 8):
                g.partial_fit(chunk)
            scores.append(g.score(X))
    print("bound per pattern: start", start, "after each epoch", scores)
    assert scores[0] > start + 5.0
    assert scores[-1] > scores[0]
    assert g.n_batches_ == 24 and g.history_.shape == (24,)
    # the running statistics are kept (and saved) with the parameters
    assert g.stats_.ndim == 1 and np.all(np.isfinite(g.stats_))


def test_partial_fit_after_fit_continues_and_accepts_missing(tmp_path):
    X = _data(200, seed=4)
    g = mf.NLGBN([1, 5, 36], units=["binary", "rectified", "linear"], max_iter=3,
                 random_state=5, progress=False).fit(X)
    assert g.n_batches_ == 1 and g.stats_.shape[0] > 0
    before = g.score(X)
    Xm = X.copy()
    Xm[::3, :10] = np.nan
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        g.partial_fit(Xm)
    assert g.n_batches_ == 2 and np.isfinite(g.score(X))
    assert g.score(X) > before - 1.0
    g.save(tmp_path / "g.npz")
    h = mf.load(tmp_path / "g.npz")
    np.testing.assert_array_equal(h.stats_, g.stats_)
    # a wrong running statistic is refused, naming it
    g.stats_ = g.stats_[:-1]
    with pytest.raises(ValueError, match="stats_"):
        g.partial_fit(X)
    with pytest.raises(ValueError, match="X"):
        g.partial_fit(X[:0])
