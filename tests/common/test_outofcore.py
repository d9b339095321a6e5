"""Data larger than memory without a cluster: on-disk arrays scored a chunk of rows at a time.

``infer``, ``score_samples``, ``score``, ``predict`` and ``predict_proba`` take a NumPy memmap
(or a zarr array) and read it chunk by chunk (mfengine._outofcore.map_chunked): the answers equal
the in-memory ones, a progress bar shows, and the memory used does not grow with the number
of patterns.
"""
import os
import subprocess
import sys
import textwrap
import warnings

import numpy as np
import pytest

import mfengine as mf
from mfengine._outofcore import map_chunked, score_chunked


@pytest.fixture(scope="module")
def net_and_disk(tmp_path_factory):
    net = mf.SigmoidBeliefNet([3, 6, 16], random_state=0, progress=False)
    X = net.sample(300, random_state=1)
    path = tmp_path_factory.mktemp("ooc") / "X.u8"
    disk = np.memmap(path, dtype=np.uint8, mode="w+", shape=X.shape)
    disk[:] = X
    disk.flush()
    return net, X, np.memmap(path, dtype=np.uint8, mode="r", shape=X.shape)


def test_memmap_answers_equal_in_memory(net_and_disk):
    net, X, disk = net_and_disk
    assert np.array_equal(net.score_samples(disk), net.score_samples(X))
    assert np.array_equal(map_chunked(net, "score_samples", disk, chunk_size=7),
                          net.score_samples(X))
    r, R = map_chunked(net, "infer", disk, chunk_size=50), net.infer(X)
    assert isinstance(r, mf.BeliefNetResult) and r.method == R.method
    for a, b in zip([r.bound, r.n_iter] + r.mu + r.xi, [R.bound, R.n_iter] + R.mu + R.xi):
        assert np.array_equal(a, b)
    assert net.score(disk) == net.score(X)
    miss = np.zeros(X.shape, dtype=bool)
    miss[::2, :5] = True
    assert np.array_equal(score_chunked(net, disk, chunk_size=64, missing=miss),
                          net.score_samples(X, miss))


def test_other_families_on_disk(tmp_path):
    g = mf.NLGBN([2, 4, 6], random_state=0, progress=False)
    Xg = g.sample(120, random_state=2)
    disk = np.memmap(tmp_path / "g.f4", dtype=np.float32, mode="w+", shape=Xg.shape)
    disk[:] = Xg
    # float32 on disk: each chunk is converted, so the answer is that of the float32 values
    assert np.array_equal(map_chunked(g, "score_samples", disk, chunk_size=40),
                          g.score_samples(Xg.astype(np.float32)))
    rng = np.random.default_rng(0)
    Xc = (rng.random((90, 10)) < np.where(np.arange(90) % 2 == 0, 0.2, 0.8)[:, None]) * 1.0
    y = np.arange(90) % 2
    clf = mf.GenerativeClassifier(hidden=(2, 4), max_iter=2, progress=False,
                                  random_state=0).fit(Xc, y)
    d = np.memmap(tmp_path / "c.u8", dtype=np.uint8, mode="w+", shape=Xc.shape)
    d[:] = Xc
    assert np.array_equal(clf.predict(d), clf.predict(Xc))
    assert np.array_equal(map_chunked(clf, "predict_proba", d, chunk_size=25),
                          clf.predict_proba(Xc))
    assert clf.score(d, y) == clf.score(Xc, y)


def test_zarr_array(net_and_disk):
    zarr = pytest.importorskip("zarr", reason="zarr not installed")
    net, X, _ = net_and_disk
    z = zarr.zeros(shape=X.shape, chunks=(64, X.shape[1]), dtype="u1")
    z[:] = X.astype(np.uint8)
    assert np.array_equal(net.score_samples(z), net.score_samples(X))
    assert np.array_equal(score_chunked(net, z, chunk_size=100), net.score_samples(X))


def test_progress_bar(net_and_disk, monkeypatch, capsys):
    pytest.importorskip("tqdm", reason="tqdm not installed")
    net, X, disk = net_and_disk
    monkeypatch.setenv("MFENGINE_PROGRESS_DELAY", "0")
    score_chunked(net, disk, chunk_size=100, progress=True)
    assert "pattern" in capsys.readouterr().err
    score_chunked(net, disk, chunk_size=100, progress=False)
    assert capsys.readouterr().err == ""


def test_one_warning_for_all_chunks(net_and_disk):
    net = mf.SigmoidBeliefNet([4, 8, 16], weight_scale=4.0, random_state=0, progress=False)
    X = net.sample(200, random_state=1)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        map_chunked(net, "infer", X, chunk_size=50, max_iter=1)
    mine = [w for w in caught if issubclass(w.category, mf.ConvergenceWarning)]
    assert len(mine) == 1 and "chunks)" in str(mine[0].message)


def test_bad_arguments(net_and_disk):
    net, _, disk = net_and_disk
    with pytest.raises(ValueError, match="chunk_size"):
        score_chunked(net, disk, chunk_size=0)
    with pytest.raises(ValueError, match="method"):
        map_chunked(net, "fit", disk)


_CHILD = textwrap.dedent("""
    import resource, sys
    import numpy as np
    import mfengine as mf
    path, n = sys.argv[1], int(sys.argv[2])
    model = mf.load(sys.argv[3])
    X = np.memmap(path, dtype=np.uint8, mode="r", shape=(n, 784))
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    b = model.score_samples(X)
    assert b.shape == (n,) and np.all(np.isfinite(b))
    print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before)
""")


# slow: a memory measurement; the answers on disk are checked by the other tests
@pytest.mark.slow
def test_memory_flat_in_the_number_of_patterns(tmp_path):
    # 20,000 and 80,000 patterns of 784 pixels as uint8 on disk (63 MB); in memory as float64
    # they would take 125 and 500 MB.  Scored in chunks, the peak resident size grows by
    # little more than the answer (8 bytes a pattern), not by the data.
    rng = np.random.default_rng(0)
    big = 80_000
    disk = np.memmap(tmp_path / "X.u8", dtype=np.uint8, mode="w+", shape=(big, 784))
    for a in range(0, big, 10_000):
        disk[a:a + 10_000] = rng.random((10_000, 784)) < 0.3
    disk.flush()
    del disk
    model = mf.BernoulliMixture(5, max_iter=2, tol=None, random_state=0).fit(
        (rng.random((500, 784)) < 0.3).astype(np.float64))
    saved = model.save(tmp_path / "bm")
    env = dict(os.environ, MFENGINE_PROGRESS_DELAY="1000")
    grew = {}
    for n in (20_000, big):
        out = subprocess.run([sys.executable, "-c", _CHILD, str(tmp_path / "X.u8"), str(n), saved],
                             check=True, capture_output=True, text=True, env=env)
        grew[n] = int(out.stdout.split()[-1]) / 1024.0     # MB (ru_maxrss is in kB on Linux)
    # in memory the difference would be 375 MB of float64 data (47 MB even as uint8)
    assert grew[big] - grew[20_000] < 16.0, grew


def test_partial_fit_on_disk_is_one_pass(net_and_disk):
    _, X, disk = net_and_disk
    if not hasattr(mf.SigmoidBeliefNet, "partial_fit"):
        pytest.skip("SigmoidBeliefNet has no partial_fit")

    def make():   # visible biases from the data would come from the first chunk only
        return mf.SigmoidBeliefNet([3, 6, 16], batch_size=10, init_visible_biases=False,
                                   random_state=0, progress=False)

    whole = make().partial_fit(X)
    from mfengine._outofcore import _partial_fit_pass

    chunked = _partial_fit_pass(make(), (disk,), {}, chunk_size=50)   # whole mini-batches
    for a, b in zip(whole.weights_ + whole.biases_, chunked.weights_ + chunked.biases_):
        assert np.array_equal(a, b)
    assert chunked.history_.shape == (1,) and chunked.history_[0] == pytest.approx(
        whole.history_[0], abs=1e-12)
    auto = make().partial_fit(disk)          # the default chunk: whole mini-batches too
    assert all(np.array_equal(a, b) for a, b in zip(whole.weights_, auto.weights_))


def test_fit_chunked_epochs(net_and_disk):
    from mfengine._outofcore import fit_chunked

    _, X, disk = net_and_disk
    if not hasattr(mf.SigmoidBeliefNet, "partial_fit"):
        pytest.skip("SigmoidBeliefNet has no partial_fit")
    net = mf.SigmoidBeliefNet([3, 6, 16], batch_size=10, learning_rate=0.05, random_state=0,
                              progress=False)
    fit_chunked(net, disk, n_epochs=4, chunk_size=100, random_state=0)
    assert net.history_.shape == (4,) and net.n_iter_ == 4
    assert net.history_[-1] > net.history_[0]      # it learns
    again = mf.SigmoidBeliefNet([3, 6, 16], batch_size=10, learning_rate=0.05, random_state=0,
                                progress=False)
    fit_chunked(again, disk, n_epochs=4, chunk_size=100, random_state=0)
    assert np.array_equal(net.history_, again.history_)   # the seed fixes the shuffles
    with pytest.raises(TypeError, match="partial_fit"):
        fit_chunked(mf.ContextHMM(2), disk)


def test_hmm_sequences_on_disk(tmp_path):
    from mfengine._outofcore import _map_sequences_chunked

    h = mf.ContextHMM(2, 1, lag=3, context="right", progress=False)
    h.means_ = np.array([[-1.0], [1.0]])
    h.right_means_ = np.array([[0.5], [-0.5]])
    X, _ = h.sample(200, random_state=0)
    L = np.array([30, 50, 20, 60, 40])
    disk = np.memmap(tmp_path / "h.f4", dtype=np.float32, mode="w+", shape=X.shape)
    disk[:] = X
    X32 = X.astype(np.float32)
    assert np.array_equal(h.predict(disk, L), h.predict(X32, L))
    # chunks of whole sequences (60 steps: 30 | 50 | 20 | 60 | 40): the same answers
    r = _map_sequences_chunked(h, "infer", (disk, L), {}, chunk_size=60)
    R = h.infer(X32, L)
    for key in ("bound", "posteriors", "potentials", "lengths", "n_iter"):
        assert np.array_equal(getattr(r, key), getattr(R, key)), key
    total, post = _map_sequences_chunked(h, "score_samples", (disk, L), {}, chunk_size=60)
    T, G = h.score_samples(X32, L)
    assert total == pytest.approx(T, abs=1e-9) and np.array_equal(post, G)
