"""Dask: lazy, block-by-block answers and data-parallel fit on a real two-process cluster.

One ``distributed.LocalCluster(n_workers=2, processes=True, threads_per_worker=1)`` serves the
whole module.  Each family's answers on a dask array (chunked by rows) are lazy dask arrays
with the input's row chunks and equal the in-memory answers; ``fit`` on a dask array equals
the in-memory ``fit`` with the same seed and schedule to 1e-9 (noisy-OR nets: bit for bit on
one partition; see ``test_noisy_or_fit_partition_order``).
"""
import subprocess
import sys
import warnings

import numpy as np
import pytest

distributed = pytest.importorskip(
    "distributed", reason="dask/distributed not installed: pip install \"mfengine[dask]\"")
da = pytest.importorskip("dask.array", reason="dask[array] not installed")
import dask  # noqa: E402
import dask.bag as db  # noqa: E402

import mfengine as mf  # noqa: E402

TOL = 1e-9


@pytest.fixture(scope="module")
def client():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # distributed's notices about ports and dashboards
        cluster = distributed.LocalCluster(n_workers=2, processes=True, threads_per_worker=1,
                                           dashboard_address=None, memory_limit="1GiB")
        c = distributed.Client(cluster, set_as_default=True)
    try:
        yield c
    finally:
        c.close()
        cluster.close()


def _max_diff(a, b):
    return max(float(np.max(np.abs(np.asarray(u) - np.asarray(v)))) for u, v in zip(a, b))


def _workers_used(client, work):
    with distributed.get_task_stream(client) as ts:
        out = work()
    return out, {t["worker"] for t in ts.data}


@pytest.fixture(scope="module")
def sbn_data():
    net = mf.SigmoidBeliefNet([3, 6, 12], random_state=0, progress=False)
    X = net.sample(64, random_state=1)
    return net, X, da.from_array(X, chunks=(24, 6))     # 3 row blocks, 2 column blocks


def test_import_does_not_import_dask():
    code = ("import sys, mfengine as mf; net = mf.SigmoidBeliefNet([2, 4], random_state=0); "
            "net.score_samples(net.sample(3, random_state=0)); "
            "assert 'dask' not in sys.modules, 'dask imported'")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_sbn_answers_are_lazy_and_equal(client, sbn_data):
    net, X, Xd = sbn_data
    s = net.score_samples(Xd)
    assert isinstance(s, da.Array) and s.chunks == ((24, 24, 16),)
    # one task per block: no output block depends on another input block
    assert s.npartitions == Xd.numblocks[0]
    got, workers = _workers_used(client, s.compute)
    assert np.array_equal(got, net.score_samples(X))
    assert len(workers) == 2
    r = net.infer(Xd)
    R = net.infer(X)
    assert isinstance(r, mf.BeliefNetResult) and isinstance(r.bound, da.Array)
    assert r.method == R.method and r.tol == R.tol
    bound, mu0, xi1, conv = dask.compute(r.bound, r.mu[0], r.xi[1], r.converged)
    assert np.array_equal(bound, R.bound) and np.array_equal(mu0, R.mu[0])
    assert np.array_equal(xi1, R.xi[1]) and np.array_equal(conv, R.converged)
    assert net.score(Xd) == pytest.approx(net.score(X), abs=1e-12)


def test_missing_follows_the_blocks(client, sbn_data):
    net, X, Xd = sbn_data
    miss = np.zeros(X.shape, dtype=bool)
    miss[::3, :4] = True
    want = net.score_samples(X, miss)
    assert np.array_equal(net.score_samples(Xd, da.from_array(miss, chunks=10)).compute(), want)
    assert np.array_equal(net.score_samples(Xd, missing=miss).compute(), want)


def test_other_families_answers(client):
    W = np.tril(np.random.default_rng(0).uniform(0, 1, (8, 8)), -1)
    dag = mf.BeliefNet(W, np.full(8, 0.1), visible=[4, 5, 6, 7], activation="noisy_or",
                       progress=False)
    Xn = dag.sample(40, random_state=0)
    got = dag.score_samples(da.from_array(Xn, chunks=15))
    assert isinstance(got, da.Array)
    assert np.array_equal(got.compute(), dag.score_samples(Xn))

    g = mf.NLGBN([2, 4, 6], random_state=0, progress=False)
    Xg = g.sample(50, random_state=2)
    Xgd = da.from_array(Xg, chunks=20)
    assert np.array_equal(g.score_samples(Xgd).compute(), g.score_samples(Xg))
    r, R = g.infer(Xgd), g.infer(Xg)
    assert np.array_equal(r.sigma[1].compute(), R.sigma[1])

    rng = np.random.default_rng(0)
    Xc = (rng.random((60, 10)) < np.where(np.arange(60) % 2 == 0, 0.2, 0.8)[:, None]) * 1.0
    y = np.arange(60) % 2
    clf = mf.GenerativeClassifier(hidden=(2, 4), max_iter=2, progress=False,
                                  random_state=0).fit(Xc, y)
    Xcd = da.from_array(Xc, chunks=25)
    p = clf.predict(Xcd)
    assert isinstance(p, da.Array) and np.array_equal(p.compute(), clf.predict(Xc))
    proba = clf.predict_proba(Xcd)
    assert proba.chunks == ((25, 25, 10), (2,))
    assert np.array_equal(proba.compute(), clf.predict_proba(Xc))
    assert clf.score(Xcd, y) == clf.score(Xc, y)


@pytest.fixture(scope="module")
def hmm_data():
    h = mf.ContextHMM(2, 1, lag=3, context="right", progress=False)
    h.means_ = np.array([[-1.0], [1.0]])
    h.right_means_ = np.array([[0.5], [-0.5]])
    X, _ = h.sample(200, random_state=0)
    L = np.array([30, 50, 20, 60, 40])
    return h, X, L, da.from_array(X, chunks=45)


def test_hmm_answers(client, hmm_data):
    h, X, L, Xd = hmm_data
    p = h.predict(Xd, L)
    # blocks moved to sequence ends (30+50 | 20 | 60 | 40): no sequence is split
    assert p.chunks == ((80, 20, 60, 40),)
    assert np.array_equal(p.compute(), h.predict(X, L))
    assert np.array_equal(h.predict_proba(Xd, L).compute(), h.predict_proba(X, L))
    total, post = h.score_samples(Xd, L)
    T, G = h.score_samples(X, L)
    assert float(total.compute()) == pytest.approx(T, abs=1e-9)
    assert np.array_equal(post.compute(), G)
    r, R = h.infer(Xd, L), h.infer(X, L)
    assert r.bound.shape == (5,) and r.posteriors.shape == (200, 2)
    assert np.array_equal(r.bound.compute(), R.bound)
    assert h.score(Xd, L) == pytest.approx(h.score(X, L), abs=1e-9)
    seqs = np.split(X, np.cumsum(L)[:-1])
    bag = h.predict(db.from_sequence(seqs, npartitions=2)).compute()
    assert all(np.array_equal(a, h.predict(s)) for a, s in zip(bag, seqs))
    out = dask.compute(*h.predict_proba([dask.delayed(s) for s in seqs]))
    assert all(np.array_equal(a, h.predict_proba(s)) for a, s in zip(out, seqs))


# ------------------------------------------------------------------ data-parallel fit
@pytest.mark.parametrize("params", [
    dict(batch_size=16, max_iter=3, learning_rate=0.05),
    dict(batch_size=16, max_iter=2, learning_rate=0.05, warm_start=True),
    dict(batch_size=32, max_iter=2, method="sjj", learning_rate=0.1),
])
def test_sbn_fit_equals_in_memory(client, sbn_data, params):
    _, X, Xd = sbn_data
    kw = dict(random_state=3, progress=False, **params)
    a = mf.SigmoidBeliefNet([3, 6, 12], **kw).fit(X)
    b, workers = _workers_used(client, lambda: mf.SigmoidBeliefNet([3, 6, 12], **kw).fit(Xd))
    assert len(workers) == 2
    assert _max_diff(a.weights_ + a.biases_, b.weights_ + b.biases_) < TOL
    assert _max_diff([a.history_], [b.history_]) < TOL
    assert a.n_iter_ == b.n_iter_


def test_belief_net_fit_equals_in_memory(client):
    W = np.tril(np.random.default_rng(1).normal(0, 1, (9, 9)), -1)
    kw = dict(visible=[5, 6, 7, 8], activation="sigmoid", progress=False, batch_size=10,
              max_iter=3, random_state=0)
    X = mf.BeliefNet(W, np.zeros(9), **kw).sample(50, random_state=0)
    a = mf.BeliefNet(W, np.zeros(9), **kw).fit(X)
    b = mf.BeliefNet(W, np.zeros(9), **kw).fit(da.from_array(X, chunks=20))
    assert _max_diff([a.W_, a.h_, a.history_], [b.W_, b.h_, b.history_]) < TOL


def test_noisy_or_fit_partition_order(client):
    # The noisy-OR solve skips updates whose gain is below a threshold, a discontinuous rule:
    # summing the mini-batch gradient partition by partition changes it by round-off, which
    # can flip a skip and grow to ~1e-6 after a few epochs.  With one partition the sums are
    # added in the in-memory order and the fit is the same bit for bit.
    W = np.tril(np.random.default_rng(0).uniform(0, 1, (8, 8)), -1)
    kw = dict(visible=[4, 5, 6, 7], activation="noisy_or", progress=False, batch_size=10,
              max_iter=3, random_state=0)
    X = mf.BeliefNet(W, np.full(8, 0.1), **kw).sample(50, random_state=0)
    a = mf.BeliefNet(W, np.full(8, 0.1), **kw).fit(X)
    one = mf.BeliefNet(W, np.full(8, 0.1), **kw).fit(da.from_array(X, chunks=50))
    assert np.array_equal(a.W_, one.W_) and np.array_equal(a.h_, one.h_)
    two = mf.BeliefNet(W, np.full(8, 0.1), **kw).fit(da.from_array(X, chunks=20))
    assert _max_diff([a.W_, a.h_], [two.W_, two.h_]) < 1e-4


def test_nlgbn_fit_equals_in_memory(client):
    kw = dict(random_state=0, max_iter=5, progress=False)
    X = mf.NLGBN([2, 4, 6], **kw).sample(60, random_state=2)
    a = mf.NLGBN([2, 4, 6], **kw).fit(X)
    b, workers = _workers_used(client, lambda: mf.NLGBN([2, 4, 6], **kw).fit(
        da.from_array(X, chunks=25)))
    assert len(workers) == 2
    assert _max_diff(a.weights_ + a.biases_ + a.variances_,
                     b.weights_ + b.biases_ + b.variances_) < TOL
    assert _max_diff([a.history_], [b.history_]) < TOL and a.n_iter_ == b.n_iter_


def test_nlgbn_fit_with_missing_entries_equals_in_memory(client):
    # NaN entries are missing values, marginalised on the workers as in memory
    kw = dict(random_state=0, max_iter=3, progress=False)
    X = mf.NLGBN([2, 4, 6], **kw).sample(60, random_state=2)
    X[np.random.default_rng(3).random(X.shape) < 0.1] = np.nan
    a = mf.NLGBN([2, 4, 6], **kw).fit(X)
    b = mf.NLGBN([2, 4, 6], **kw).fit(da.from_array(X, chunks=25))
    assert _max_diff(a.weights_ + a.biases_ + a.variances_,
                     b.weights_ + b.biases_ + b.variances_) < TOL


@pytest.mark.parametrize("context", ["right", "both"])
def test_hmm_fit_equals_in_memory(client, hmm_data, context):
    _, X, L, Xd = hmm_data
    kw = dict(lag=3, context=context, random_state=0, progress=False, max_iter=4, bw_max_iter=3,
              tol=None)
    a = mf.ContextHMM(2, 1, **kw).fit(X, L)
    b = mf.ContextHMM(2, 1, **kw).fit(Xd, L)
    names = ["startprob_", "transmat_", "means_", "right_means_", "left_means_"]
    assert _max_diff([getattr(a, k) for k in names], [getattr(b, k) for k in names]) < TOL
    assert np.max(np.abs(a.history_ - b.history_)) < TOL * max(1.0, np.max(np.abs(a.history_)))


def test_classifier_fit_equals_in_memory(client):
    rng = np.random.default_rng(0)
    X = (rng.random((90, 10)) < np.where(np.arange(90) % 3 == 0, 0.2, 0.8)[:, None]) * 1.0
    y = np.array(["a", "b", "c"])[np.arange(90) % 3]
    kw = dict(hidden=(2, 4), max_iter=2, batch_size=15, progress=False, random_state=0)
    a = mf.GenerativeClassifier(**kw).fit(X, y)
    b = mf.GenerativeClassifier(**kw).fit(da.from_array(X, chunks=40), da.from_array(y, chunks=40))
    assert list(b.classes_) == ["a", "b", "c"]
    for c in range(3):
        assert _max_diff(a.net_weights_[c] + a.net_biases_[c],
                         b.net_weights_[c] + b.net_biases_[c]) < TOL
    assert np.array_equal(a.class_log_prior_, b.class_log_prior_)


def test_partial_fit_streams_blocks(client, sbn_data):
    _, X, Xd = sbn_data
    if not hasattr(mf.SigmoidBeliefNet, "partial_fit"):
        pytest.skip("SigmoidBeliefNet has no partial_fit")
    kw = dict(batch_size=8, init_visible_biases=False, random_state=0, progress=False)
    a = mf.SigmoidBeliefNet([3, 6, 12], **kw).partial_fit(X)
    b = mf.SigmoidBeliefNet([3, 6, 12], **kw).partial_fit(Xd)     # blocks of 24 = 3 batches
    assert all(np.array_equal(u, v) for u, v in zip(a.weights_ + a.biases_, b.weights_ + b.biases_))
    assert b.n_iter_ == 1


def test_unsupported_fits_say_so(client, sbn_data):
    _, X, Xd = sbn_data
    with pytest.raises(TypeError, match="no data-parallel form"):
        mf.MixtureClassifier(2).fit(Xd, np.arange(64) % 2)
    with pytest.raises(ValueError, match="missing"):
        mf.SigmoidBeliefNet([3, 6, 12]).fit(Xd, missing=np.zeros(X.shape, dtype=bool))
    W = np.tril(np.random.default_rng(0).uniform(0, 1, (6, 6)), -1)
    batch = mf.BeliefNetBatch.from_nets(
        [mf.BeliefNet(W * s, np.full(6, 0.1), visible=[3, 4, 5]) for s in (0.5, 1.0)])
    with pytest.raises(TypeError, match="rows are its nets"):
        batch.score_samples(da.from_array(np.zeros((2, 3)), chunks=1))
    with pytest.raises(TypeError, match="dask array chunked by rows"):
        mf.SigmoidBeliefNet([3, 6, 12]).score_samples(db.from_sequence([1, 2]))


def _equality_table():
    """Largest |difference| between the data-parallel and the in-memory fit, per family."""
    rng = np.random.default_rng(0)
    net = mf.SigmoidBeliefNet([3, 6, 12], random_state=0, progress=False)
    X = net.sample(64, random_state=1)
    Xd = da.from_array(X, chunks=24)
    rows = []

    def sbn(**kw):
        kw = dict(random_state=3, progress=False, **kw)
        a = mf.SigmoidBeliefNet([3, 6, 12], **kw).fit(X)
        b = mf.SigmoidBeliefNet([3, 6, 12], **kw).fit(Xd)
        return _max_diff(a.weights_ + a.biases_, b.weights_ + b.biases_)

    rows.append(("SigmoidBeliefNet gaussian, batch 16, 3 epochs",
                 sbn(batch_size=16, max_iter=3, learning_rate=0.05)))
    rows.append(("SigmoidBeliefNet gaussian, batch 1 (on-line), 1 epoch",
                 sbn(batch_size=1, max_iter=1, learning_rate=0.05)))
    rows.append(("SigmoidBeliefNet gaussian warm_start, batch 16, 2 epochs",
                 sbn(batch_size=16, max_iter=2, learning_rate=0.05, warm_start=True)))
    rows.append(("SigmoidBeliefNet sjj, batch 32, 2 epochs",
                 sbn(batch_size=32, max_iter=2, method="sjj", learning_rate=0.1)))
    for act, W, h in (("sigmoid", np.tril(rng.normal(0, 1, (9, 9)), -1), np.zeros(9)),
                      ("noisy_or", np.tril(rng.uniform(0, 1, (9, 9)), -1), np.full(9, 0.1))):
        kw = dict(visible=[5, 6, 7, 8], activation=act, progress=False, batch_size=10,
                  max_iter=3, random_state=0)
        Xb = mf.BeliefNet(W, h, **kw).sample(50, random_state=0)
        a = mf.BeliefNet(W, h, **kw).fit(Xb)
        for chunks in (50, 20):
            Xbd = da.from_array(Xb, chunks=chunks)
            b = mf.BeliefNet(W, h, **kw).fit(Xbd)
            rows.append((f"BeliefNet {act} sjj, batch 10, 3 epochs, {Xbd.numblocks[0]} "
                         "partition(s)", _max_diff([a.W_, a.h_], [b.W_, b.h_])))
    kw = dict(random_state=0, max_iter=5, progress=False)
    Xg = mf.NLGBN([2, 4, 6], **kw).sample(60, random_state=2)
    a = mf.NLGBN([2, 4, 6], **kw).fit(Xg)
    b = mf.NLGBN([2, 4, 6], **kw).fit(da.from_array(Xg, chunks=25))
    rows.append(("NLGBN EM, 5 iterations", _max_diff(a.weights_ + a.biases_ + a.variances_,
                                                      b.weights_ + b.biases_ + b.variances_)))
    h = mf.ContextHMM(2, 1, lag=3, context="right", progress=False)
    h.means_, h.right_means_ = np.array([[-1.0], [1.0]]), np.array([[0.5], [-0.5]])
    Xh, _ = h.sample(200, random_state=0)
    L = np.array([30, 50, 20, 60, 40])
    names = ["startprob_", "transmat_", "means_", "right_means_", "left_means_"]
    for context in ("right", "both"):
        kw = dict(lag=3, context=context, random_state=0, progress=False, max_iter=4,
                  bw_max_iter=3, tol=None)
        a = mf.ContextHMM(2, 1, **kw).fit(Xh, L)
        b = mf.ContextHMM(2, 1, **kw).fit(da.from_array(Xh, chunks=45), L)
        rows.append((f"ContextHMM {context}, 3 Baum-Welch + 4 mean-field EM",
                     _max_diff([getattr(a, k) for k in names], [getattr(b, k) for k in names])))
    Xc = (rng.random((90, 10)) < np.where(np.arange(90) % 3 == 0, 0.2, 0.8)[:, None]) * 1.0
    y = np.arange(90) % 3
    kw = dict(hidden=(2, 4), max_iter=2, batch_size=15, progress=False, random_state=0)
    a = mf.GenerativeClassifier(**kw).fit(Xc, y)
    b = mf.GenerativeClassifier(**kw).fit(da.from_array(Xc, chunks=40), y)
    rows.append(("GenerativeClassifier, 3 classes, batch 15, 2 epochs",
                 max(_max_diff(a.net_weights_[c] + a.net_biases_[c],
                               b.net_weights_[c] + b.net_biases_[c]) for c in range(3))))
    return rows


def _speed_table():
    """Seconds in memory (one thread) and on the cluster (two one-thread workers)."""
    import os
    import time

    from sklearn.base import clone

    rows = []

    def timed(f):
        t = time.perf_counter()
        f()
        return time.perf_counter() - t

    net = mf.SigmoidBeliefNet([8, 64], random_state=0, progress=False, n_threads=1)
    X = net.sample(100_000, random_state=1)
    Xd = da.from_array(X, chunks=25_000).persist()
    rows.append(("SigmoidBeliefNet [8, 64] score_samples, 100,000 patterns",
                 timed(lambda: net.score_samples(X)),
                 timed(lambda: net.score_samples(Xd).compute())))
    kw = dict(random_state=0, progress=False, n_threads=1, batch_size=1000, max_iter=1,
              learning_rate=0.05)
    X2, X2d = X[:20_000], da.from_array(X[:20_000], chunks=10_000)
    rows.append(("SigmoidBeliefNet [8, 64] fit, 20,000 patterns, batch 1000, 1 epoch",
                 timed(lambda: mf.SigmoidBeliefNet([8, 64], **kw).fit(X2)),
                 timed(lambda: mf.SigmoidBeliefNet([8, 64], **kw).fit(X2d))))
    g = mf.NLGBN([4, 64], random_state=0, progress=False, n_threads=1, max_iter=3)
    Xg = g.sample(20_000, random_state=0)
    Xgd = da.from_array(Xg, chunks=10_000)
    rows.append(("NLGBN [4, 64] fit, 20,000 patterns, 3 EM iterations",
                 timed(lambda: clone(g).fit(Xg)),
                 timed(lambda: clone(g).fit(Xgd))))
    return rows, os.getloadavg()[0]


if __name__ == "__main__":      # python tests/common/test_dask.py [--speed]: the equality figures
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cluster = distributed.LocalCluster(n_workers=2, processes=True, threads_per_worker=1,
                                           dashboard_address=None)
        cl = distributed.Client(cluster)
        if "--speed" in sys.argv:
            speed, load = _speed_table()
        else:
            rows = _equality_table()
        cl.close()
        cluster.close()
    if "--speed" in sys.argv:
        print(f"seconds, in memory (1 thread) vs 2-worker LocalCluster (load {load:.1f}):")
        for label, one, two in speed:
            print(f"  {label:<66} {one:7.2f} {two:7.2f}")
    else:
        print("largest |parameter difference|, data-parallel fit on a 2-process LocalCluster "
              "vs fit in memory:")
        for label, value in rows:
            print(f"  {label:<62} {value:.2e}")
