"""Sparse DAG belief nets: the structure built from scipy.sparse matrices in O(nnz), compiled
ancestral sampling (right distribution, seeded, the same for any thread count, refuses bad
input), and nothing of size n_units**2 anywhere."""
import itertools
import tracemalloc

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.exceptions import ConvergenceWarning

import mfengine as mf
from mfengine.sbn import _sample
from mfengine.sbn._structure import DagStructure

FIELDS = ("par_ptr", "par_idx", "ch_ptr", "ch_idx", "ch_w", "_rows", "_cols")


def random_dense(rng, n, density=0.5, activation="sigmoid"):
    W = np.tril(rng.normal(0, 1.5, (n, n)), -1) * (rng.random((n, n)) < density)
    h = rng.normal(0, 1, n)
    if activation == "noisy_or":
        W, h = np.abs(W), np.abs(h) + 0.05
    return W, h


def test_structure_from_any_sparse_format_equals_the_dense_one():
    rng = np.random.default_rng(0)
    for trial in range(40):
        n = int(rng.integers(1, 25))
        W, _ = random_dense(rng, n, density=rng.random())
        ref = DagStructure(W != 0)
        coo = sp.coo_matrix(W)
        dup = sp.coo_matrix((np.r_[coo.data, coo.data], (np.r_[coo.row, coo.row],
                                                          np.r_[coo.col, coo.col])), shape=(n, n))
        zeros = sp.csr_matrix(W)
        zeros.data[::3] = 0.0                      # explicit zeros are not edges
        for M, dense in ((sp.csr_matrix(W), W), (coo, W), (sp.csc_matrix(W), W), (dup, W),
                         (zeros, zeros.toarray())):
            got, want = DagStructure(M), DagStructure(dense != 0)
            for f in FIELDS:
                assert np.array_equal(getattr(got, f), getattr(want, f)), f
                assert getattr(got, f).dtype == np.intp
        s = DagStructure(sp.csr_matrix(W))
        assert np.array_equal(s.pack(sp.csr_matrix(W)), ref.pack(W))
        assert np.array_equal(s.pack(sp.coo_matrix(W)), ref.pack(W))
        assert s.covers(sp.csr_matrix(W)) and s.covers(W)
        off = np.triu(np.ones((n, n)), 1).T * (W == 0)
        if off.any():
            assert not s.covers(sp.csr_matrix(W + off)) and not s.covers(W + off)


def test_pack_of_a_sparse_matrix_with_another_stored_pattern():
    """Explicit zeros, entries off the edges, duplicates, no edge at all: pack reads each
    edge's entry as the dense matrix gives it (a net whose weights all became 0 used to fail
    with 'setting an array element with a sequence')."""
    rng = np.random.default_rng(3)
    for _ in range(100):
        n = int(rng.integers(1, 8))
        W = np.tril(rng.normal(size=(n, n)), -1) * (rng.random((n, n)) < 0.6)
        s = DagStructure(W != 0)
        C = sp.csr_matrix(np.tril(rng.normal(size=(n, n)), -1))
        C.data[rng.random(C.data.size) < 0.3] = 0.0
        dup = sp.coo_matrix(W)
        dup = sp.coo_matrix((np.r_[dup.data, dup.data], (np.r_[dup.row, dup.row],
                                                         np.r_[dup.col, dup.col])), (n, n))
        for X in (C, sp.coo_matrix(W * (rng.random((n, n)) < 0.5)), dup):
            np.testing.assert_array_equal(s.pack(X), s.pack(X.toarray()))
    net = mf.SigmoidBeliefNet([2, 3], method="plefka12", max_iter=2, random_state=0,
                              progress=False)
    X = net.sample(2, random_state=1)
    net.weights_[0] = np.zeros((3, 2))
    net.warm_start = True
    assert np.all(np.isfinite(net.fit(X).history_))


def test_packed_weights_are_a_copy():
    W = sp.csr_matrix(np.tril(np.ones((4, 4)), -1))
    s = DagStructure(W)
    w = s.pack(W)
    w[:] = 7.0
    assert np.all(W.data == 1.0)


def _exact_distribution(W, h, activation):
    n = len(h)
    S = np.array(list(itertools.product([0.0, 1.0], repeat=n)))
    z = S @ W.T + h
    if activation == "sigmoid":
        p1 = 1 / (1 + np.exp(-z))
    else:
        p1 = -np.expm1(-z)
    return S, np.prod(np.where(S > 0, p1, 1 - p1), axis=1)


@pytest.mark.parametrize("activation", ["sigmoid", "noisy_or"])
def test_samples_follow_the_net(activation):
    rng = np.random.default_rng(1)
    W, h = random_dense(rng, 5, density=0.8, activation=activation)
    net = mf.BeliefNet(sp.csr_matrix(W), h, np.arange(5), activation=activation)
    n = 100_000
    S = net.sample(n, random_state=3, return_all=True)
    states, p = _exact_distribution(W, h, activation)
    codes = S @ (2 ** np.arange(4, -1, -1))
    freq = np.bincount(codes.astype(int), minlength=32) / n
    # five standard errors per state
    assert np.all(np.abs(freq - p) <= 5 * np.sqrt(p * (1 - p) / n) + 1e-4)


@pytest.mark.parametrize("activation", ["sigmoid", "noisy_or"])
def test_sampling_is_seeded_and_the_same_for_any_thread_count_and_storage(activation):
    rng = np.random.default_rng(2)
    W, h = random_dense(rng, 30, density=0.3, activation=activation)
    vis = np.arange(20, 30)
    dense = mf.BeliefNet(W, h, vis, activation=activation, n_threads=1)
    sparse = mf.BeliefNet(sp.csr_matrix(W), h, vis, activation=activation, n_threads=2)
    a = dense.sample(300, random_state=5)
    b = sparse.sample(300, random_state=5)
    assert a.shape == (300, 10) and np.array_equal(a, b)
    assert set(np.unique(a)) <= {0.0, 1.0}
    assert not np.array_equal(a, dense.sample(300, random_state=6))
    assert dense.sample(0).shape == (0, 10)
    batch = mf.BeliefNetBatch(np.stack([W, 0.5 * W]), np.stack([h, h]), vis,
                              activation=activation, n_threads=2)
    Sb = batch.sample(200, random_state=1, return_all=True)
    assert Sb.shape == (2, 200, 30)
    assert np.array_equal(Sb, mf.BeliefNetBatch(np.stack([W, 0.5 * W]), np.stack([h, h]), vis,
                                                activation=activation, n_threads=1)
                          .sample(200, random_state=1, return_all=True))
    # the rows of net 1 are draws of net 1 (a unit without parents is on with its own rate)
    roots = np.flatnonzero(~(W != 0).any(axis=1))
    if activation == "sigmoid" and roots.size:
        big = batch.sample(20000, random_state=2, return_all=True)[1][:, roots]
        p = 1 / (1 + np.exp(-h[roots]))
        assert np.all(np.abs(big.mean(axis=0) - p) < 5 * np.sqrt(p * (1 - p) / 20000))


def test_sampling_kernel_refuses_inconsistent_arguments():
    ptr = np.array([0, 0, 1, 2], dtype=np.intp)
    idx = np.array([0, 1], dtype=np.intp)
    w = np.ones((1, 2))
    h = np.zeros((1, 3))
    U = np.full((2, 3), 0.5)
    of = np.zeros(2, dtype=np.intp)
    assert _sample.sample(ptr, idx, w, h, of, U.copy()) == _sample.STATUS_OK
    bad_parent2 = np.array([1, 1], dtype=np.intp)      # unit 1 its own parent
    for args in ((ptr, bad_parent2, w, h, of, U.copy()),
                 (ptr, np.array([0, 3], dtype=np.intp), w, h, of, U.copy()),
                 (np.array([0, 1, 0, 2], dtype=np.intp), idx, w, h, of, U.copy()),
                 (ptr, idx, np.ones((1, 3)), h, of, U.copy()),
                 (ptr, idx, w, np.zeros((2, 3)), of, U.copy()),
                 (ptr, idx, w, h, np.array([0, 1], dtype=np.intp), U.copy()),
                 (ptr, idx, w, h, of, np.full((2, 4), 0.5))):
        V = args[-1].copy()
        assert _sample.sample(*args) == _sample.STATUS_EBADARG
        assert np.array_equal(args[-1], V)             # nothing written


def test_no_quadratic_memory_for_a_large_sparse_net():
    """2 * 10^5 units: anything of size n_units**2 would need 40 GB (bool) or 320 GB."""
    n, m = 200_000, 600_000
    rng = np.random.default_rng(0)
    i = rng.integers(1, n, m)
    j = (rng.random(m) * i).astype(np.int64)
    W = sp.csr_matrix((rng.normal(0, 0.3, m), (i, j)), shape=(n, n))
    tracemalloc.start()
    net = mf.BeliefNet(W, np.zeros(n), np.arange(n - 100, n), progress=False)
    X = net.sample(3, random_state=0)
    with pytest.warns(ConvergenceWarning):        # two sweeps are not enough, and that is said
        r = net.infer(X, method="sjj", max_iter=2, tol=1e-6)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert X.shape == (3, 100) and r.bound.shape == (3,) and np.all(np.isfinite(r.bound))
    assert net.n_weights == DagStructure(W).nnz
    assert peak < 400e6, peak / 1e6


def _large_uniform_net(n, nnz, activation, seed=0):
    """Each edge a child drawn uniformly and a parent anywhere below it
    (bench/speed/sparse_scaling's "uniform" nets): the parents' and children's state read from
    all over memory."""
    rng = np.random.default_rng(seed)
    i = rng.integers(1, n, nnz)
    j = i - 1 - (rng.random(nnz) * i).astype(np.int64)
    fan = nnz / n
    if activation == "noisy_or":
        w, h = rng.uniform(0.0, 2.0 / fan, nnz), np.full(n, 0.05)
    else:
        w, h = rng.normal(0.0, 1.0 / np.sqrt(fan), nnz), rng.normal(0.0, 0.5, n)
    W = sp.csr_matrix((w, (i, j)), shape=(n, n))
    return mf.BeliefNet(W, h, np.arange(n - n // 10, n), activation=activation, progress=False)


@pytest.mark.parametrize("activation", ["sigmoid", "noisy_or"])
def test_large_nets_cache_layout_and_prefetch_leave_the_answer(activation):
    """On nets of 2^14 units and more the sweeps prefetch the next unit's scattered state and
    the sigmoid sweep keeps each unit's state in one interleaved record: the same coordinate
    ascent as the plain layout (equal up to rounding: the vectorised sums over strided records
    are added in another order), the same sweeps, and bit-identical for any thread count."""
    from mfengine.sbn import _sjj

    net = _large_uniform_net(20000, 100000, activation)
    X = net.sample(3, random_state=1)
    kw = dict(method="sjj", tol=1e-300, max_iter=4)
    with pytest.warns(ConvergenceWarning):
        fast = net.infer(X, n_threads=1, **kw)
    with pytest.warns(ConvergenceWarning):
        fast2 = net.infer(X, n_threads=2, **kw)
    old = _sjj._set_records(False), _sjj._set_prefetch(False)
    try:
        with pytest.warns(ConvergenceWarning):
            plain = net.infer(X, n_threads=1, **kw)
    finally:
        _sjj._set_records(old[0])
        _sjj._set_prefetch(old[1])
    for a, b in ((fast.bound, fast2.bound), (fast.mu, fast2.mu), (fast.xi, fast2.xi)):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(fast.n_iter, plain.n_iter)
    # (the 1-D searches stop at inner_tol and a step is kept only if it gains, so a rounding
    # difference can move a mean or a xi by ~1e-8 - 1e-6 after a fixed budget of 4 sweeps)
    np.testing.assert_allclose(fast.bound, plain.bound, rtol=1e-10, atol=0)
    np.testing.assert_allclose(fast.mu, plain.mu, rtol=0, atol=1e-4)
    np.testing.assert_allclose(fast.xi, plain.xi, rtol=0, atol=1e-4)
    assert np.abs(fast.mu - plain.mu).mean() < 1e-8
    assert np.all(np.isfinite(fast.bound)) and np.all(fast.bound < 0)
    # the means moved away from the start: the sweeps did work on the record layout
    assert np.abs(fast.mu[:, :1000] - 0.5).max() > 1e-3


@pytest.mark.filterwarnings("ignore:.*the Plefka expansion has broken down:RuntimeWarning")
@pytest.mark.parametrize("activation", ["sigmoid", "noisy_or"])
def test_a_batch_of_sparse_nets_equals_the_dense_batch(activation, tmp_path):
    """BeliefNetBatch with W a list of scipy.sparse matrices (any format, the nets' patterns
    differing): inference and sampling give the dense batch's answers bit for bit, exact
    enumeration to rounding; from_nets
    keeps sparse nets sparse; save/load round trip."""
    rng = np.random.default_rng(3)
    n, vis = 9, [5, 6, 7, 8]
    Ws, hs = zip(*(random_dense(rng, n, 0.5, activation) for _ in range(3)))
    Wd, h = np.stack(Ws), np.stack(hs)
    Wsp = [sp.csr_matrix(Ws[0]), sp.coo_matrix(Ws[1]), sp.csc_array(Ws[2])]
    X = (rng.random((3, 4, 4)) < 0.5).astype(float)
    miss = rng.random(X.shape) < 0.2
    for method in ("sjj", "plefka11", "plefka12", "plefka22"):
        d = mf.BeliefNetBatch(Wd, h, vis, activation, method=method, progress=False)
        s = mf.BeliefNetBatch(Wsp, h, vis, activation, method=method, progress=False)
        np.testing.assert_array_equal(s.score_samples(X), d.score_samples(X))
        np.testing.assert_array_equal(s.score_samples(X, miss), d.score_samples(X, miss))
        rs, rd = s.infer(X), d.infer(X)
        np.testing.assert_array_equal(rs.bound, rd.bound)
        np.testing.assert_array_equal(rs.mu, rd.mu)
    assert s.structure.same_as(d.structure) and len(s) == 3 and s.n_units == n
    assert isinstance(s.W_, list) and all(sp.issparse(w) for w in s.W_)
    # (exact enumeration sums the sparse products in their own order: equal to rounding)
    np.testing.assert_allclose(s.exact_log_likelihood(X), d.exact_log_likelihood(X), rtol=1e-13)
    np.testing.assert_allclose(s.exact_log_likelihood(X, miss), d.exact_log_likelihood(X, miss),
                               rtol=1e-13)
    S = (rng.random((3, 2, n)) < 0.5).astype(float)
    np.testing.assert_allclose(s.log_joint(S), d.log_joint(S), rtol=1e-13)
    np.testing.assert_array_equal(s.sample(50, random_state=1), d.sample(50, random_state=1))
    np.testing.assert_array_equal(s[2].W.toarray(), Ws[2])
    nets = [mf.BeliefNet(sp.csr_matrix(Ws[k]), hs[k], vis, activation) for k in range(3)]
    fb = mf.BeliefNetBatch.from_nets(nets, method="plefka22", progress=False)
    np.testing.assert_array_equal(fb.score_samples(X), s.score_samples(X))
    assert isinstance(fb.W_, list)
    s.save(tmp_path / "b.npz")
    np.testing.assert_array_equal(mf.load(tmp_path / "b.npz").score_samples(X), s.score_samples(X))


def test_a_sparse_batch_refuses_bad_input_by_name_and_stays_linear():
    rng = np.random.default_rng(0)
    W, h = random_dense(rng, 6, 0.6)
    H = np.stack([h, h])
    with pytest.raises(TypeError, match="give sparse ones as a list of n_nets scipy.sparse"):
        mf.BeliefNetBatch(sp.csr_matrix(W), h[None], [3, 4, 5]).n_nets
    with pytest.raises(ValueError, match=r"W\[1\] must be strictly lower triangular"):
        mf.BeliefNetBatch([sp.csr_matrix(W), sp.csr_matrix(W.T)], H, [3, 4, 5]).n_nets
    with pytest.raises(ValueError, match=r"W\[1\] has shape \(7, 7\), W\[0\] \(6, 6\)"):
        mf.BeliefNetBatch([sp.csr_matrix(W), sp.csr_matrix((7, 7))], H, [3, 4, 5]).n_nets
    with pytest.raises(ValueError, match=r"h must have shape \(n_nets, n_units\) with n_nets = 2"):
        mf.BeliefNetBatch([sp.csr_matrix(W)] * 2, h, [3, 4, 5]).n_nets
    with pytest.raises(TypeError, match=r"W\[1\] must be a scipy.sparse matrix or a 2-D numeric"):
        mf.BeliefNetBatch([sp.csr_matrix(W), "x"], H, [3, 4, 5]).n_nets
    with pytest.raises(ValueError, match=r"noisy-OR units need non-negative weights; W\[0\]"):
        mf.BeliefNetBatch([sp.csr_matrix(-np.abs(W))] * 2, np.abs(H), [3, 4, 5], "noisy_or").n_nets
    # 10^5 units per net, two nets: a dense batch would need 160 GB
    n = 100_000
    chain = sp.eye(n, k=-1, format="csr") * 0.5
    tracemalloc.start()
    big = mf.BeliefNet(chain, np.full(n, 0.1), [n - 1], "noisy_or", progress=False)
    b = mf.BeliefNetBatch.from_nets([big, big], progress=False)
    bounds = b.score_samples(np.ones((2, 1)))
    drawn = b.sample(3, random_state=0, return_all=True)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    np.testing.assert_array_equal(bounds, np.repeat(big.score_samples(np.ones((1, 1))), 2))
    assert drawn.shape == (2, 3, n) and peak < 300e6, peak / 1e6
