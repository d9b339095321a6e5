"""BeliefNet over a DAG (sigmoid and noisy-OR): validation, sampling, exact enumeration."""
import itertools
import warnings

import numpy as np
import pytest

import mfengine as mf


def random_dag(n, activation, seed, density=0.6, scale=1.5, n_visible=3):
    rng = np.random.default_rng(seed)
    W = np.tril(rng.normal(0, scale, (n, n)), -1) * (rng.random((n, n)) < density)
    h = rng.normal(0, 1, n)
    if activation == "noisy_or":
        W, h = np.abs(W) * 0.6, np.abs(h) * 0.4
    visible = np.zeros(n, dtype=bool)
    visible[rng.choice(n, n_visible, replace=False)] = True
    return mf.BeliefNet(W, h, visible, activation=activation)


def brute_force_log_p(net, v, missing=None):
    """ln P(v) by an explicit loop over every joint state of all units."""
    total = 0.0
    vis = np.flatnonzero(net.visible_)
    for bits in itertools.product([0.0, 1.0], repeat=net.n_units):
        S = np.array(bits)
        keep = [missing is not None and missing[k] or S[i] == v[k] for k, i in enumerate(vis)]
        if not all(keep):
            continue
        p = 1.0
        for i in range(net.n_units):
            z = net.h_[i] + net.W_[i] @ S
            f = 1 / (1 + np.exp(-z)) if net.activation == "sigmoid" else 1 - np.exp(-z)
            p *= f if S[i] else 1 - f
        total += p
    return np.log(total)


@pytest.mark.parametrize("activation", ["sigmoid", "noisy_or"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_exact_log_likelihood_against_brute_force(activation, seed):
    net = random_dag(7, activation, seed)
    V = np.array(list(itertools.product([0.0, 1.0], repeat=3)))
    ll = net.exact_log_likelihood(V)
    for v, x in zip(V, ll):
        assert x == pytest.approx(brute_force_log_p(net, v), rel=1e-10, abs=1e-12)
    # a distribution over the visible units
    assert np.exp(ll).sum() == pytest.approx(1.0, abs=1e-12)
    # missing visible units (which may have children) are summed out exactly
    miss = np.array([[False, True, False], [True, False, True]])
    Vm = np.array([[1.0, np.nan, 0.0], [np.nan, 1.0, np.nan]])
    llm = net.exact_log_likelihood(Vm, missing=miss)
    for v, m, x in zip(Vm, miss, llm):
        assert x == pytest.approx(brute_force_log_p(net, np.nan_to_num(v), m), rel=1e-10)


@pytest.mark.parametrize("activation", ["sigmoid", "noisy_or"])
def test_sampling_matches_exact_probabilities(activation):
    net = random_dag(7, activation, 3)
    V = net.sample(40000, random_state=4)
    configs, counts = np.unique(V, axis=0, return_counts=True)
    p = np.exp(net.exact_log_likelihood(configs))
    freq = counts / counts.sum()
    assert np.max(np.abs(freq - p)) < 4 * np.sqrt(p.max() / 40000) + 1e-3


def test_layered_net_as_dag_has_the_same_likelihood():
    net = mf.SigmoidBeliefNet([2, 4, 6], weight_scale=1.5, random_state=5)
    dag = net.to_dag()
    assert dag.n_units == 12 and dag.n_visible == 6 and dag.n_weights == 8 + 24
    V = net.sample(50, random_state=6)
    np.testing.assert_allclose(dag.exact_log_likelihood(V), net.exact_log_likelihood(V), rtol=1e-12)


@pytest.mark.parametrize("method", ["sjj", "plefka11", "plefka12"])
def test_layered_dag_methods_solve_what_to_dag_solves(method):
    """A layered net's DAG methods build their items in O(weights) (DagStructure.layered):
    the same structure, weights and answers, bit for bit, as ``to_dag()``'s, missing values
    too."""
    net = mf.SigmoidBeliefNet([3, 5, 8], weight_scale=1.5, method=method, random_state=2)
    X = net.sample(30, random_state=3)
    miss = np.random.default_rng(4).random(X.shape) < 0.2
    for m in (None, miss):
        (a, ia, _, _), (b, ib, _, _) = net._dag_problem(X, m), net.to_dag()._dag_problem(X, m)
        assert a.structure.same_as(b.structure)
        assert np.array_equal(a.structure.ch_w, b.structure.ch_w)
        for x, y in ((a.w, b.w), (a.h, b.h), (a.visible, b.visible), (ia.clamp, ib.clamp),
                     (ia.net_of, ib.net_of)):
            np.testing.assert_array_equal(x, y)
        assert ia.shape == ib.shape
        r, d = net.infer(X, m, method=method), net.to_dag().infer(X, m, method=method)
        np.testing.assert_array_equal(r.bound, d.bound)
        np.testing.assert_array_equal(np.concatenate(r.mu, axis=1), d.mu)
    est = net.log_likelihood(X[:4], n_samples=50, random_state=0, method="importance")
    ref = net.to_dag().log_likelihood(X[:4], n_samples=50, random_state=0, method="importance")
    np.testing.assert_array_equal(est.estimate, ref.estimate)
    net.weights_[1][0, 0] = 0.0            # an exact zero: still an edge here, not in to_dag()
    np.testing.assert_allclose(net.infer(X, method=method).bound,
                               net.to_dag().infer(X, method=method).bound, rtol=0, atol=1e-10)


def test_layered_dag_items_allocate_nothing_of_size_n_units_squared():
    """40 layers of 50 units: 97,500 weights, 2,000 units (n_units**2 doubles: 32 MB)."""
    import tracemalloc

    net = mf.SigmoidBeliefNet([50] * 40, random_state=0)
    X = net.sample(4, random_state=1)
    tracemalloc.start()
    nets, items, _, _ = net._dag_problem(X)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert nets.w.shape == (1, 39 * 2500) and nets.structure.nnz == 39 * 2500
    assert peak < 6e6, peak
    r = net.infer(X, method="plefka11")
    assert r.bound.shape == (4,) and np.all(np.isfinite(r.bound))


def test_layered_to_dag_sparse_and_dag_training_allocate_no_n_units_squared():
    """to_dag(sparse=True) is to_dag() as a CSR matrix; the DAG methods' training (which
    runs on it) of 40 layers of 50 units peaks below the 32 MB of one dense W (through the
    dense W: 100 MB; what it holds is the gradient's few (patterns, weights) temporaries),
    and trains as the dense DAG does."""
    import tracemalloc

    small = mf.SigmoidBeliefNet([3, 5, 8], random_state=1)
    np.testing.assert_array_equal(small.to_dag(sparse=True).W.toarray(), small.to_dag().W)
    with pytest.raises(TypeError, match="sparse"):
        small.to_dag(sparse="yes")
    net = mf.SigmoidBeliefNet([50] * 40, method="sjj", random_state=0, progress=False)
    X = net.sample(1, random_state=1)
    dense = net.to_dag().set_params(learning_rate=0.1, random_state=None)
    tracemalloc.start()
    net.partial_fit(X)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 32e6, peak
    dense.partial_fit(X)
    for l, w in enumerate(net.weights_):
        np.testing.assert_allclose(w, dense.W_[50 * (l + 1):50 * (l + 2), 50 * l:50 * (l + 1)],
                                   rtol=0, atol=1e-12)


@pytest.mark.parametrize("method", ["sjj", "plefka11", "plefka12"])
def test_layered_dag_methods_train_a_weight_that_is_exactly_zero(method):
    """Every inter-layer weight is an edge of the layered net, zero or not: a DAG method's
    fit and partial_fit move an exact zero as "gaussian" does, and train it as the dense
    DAG with that entry made an edge does."""
    net = mf.SigmoidBeliefNet([2, 3, 6], method=method, max_iter=2, random_state=0,
                              progress=False)
    X = net.sample(40, random_state=1)
    net.weights_[0][0, 0] = 0.0
    W = net.to_dag().W
    W[2, 0] = 1.0                          # the zero's edge, present in the dense DAG's pattern
    dense = net.to_dag().set_params(W=W, learning_rate=0.1, random_state=None)
    dense._params().W_[2, 0] = 0.0
    net.partial_fit(X)
    dense.partial_fit(X)
    assert net.weights_[0][0, 0] != 0.0
    np.testing.assert_allclose(net.weights_[0], dense.W_[2:5, :2], rtol=0, atol=1e-12)
    net.weights_[0][0, 0] = 0.0
    net.set_params(warm_start=True).fit(X)
    assert net.weights_[0][0, 0] != 0.0


@pytest.mark.parametrize("method", ["sjj", "plefka11"])
def test_layered_dag_methods_train_on_missing_data_as_to_dag_does(method):
    """fit and partial_fit with a DAG method take ``missing`` (a 1-D mask too) and train as
    the DAG does; the mean bound rises."""
    net = mf.SigmoidBeliefNet([2, 4, 8], method=method, max_iter=4, random_state=0,
                              progress=False)
    X = net.sample(60, random_state=1)
    miss = np.random.default_rng(2).random(X.shape) < 0.3
    dag = net.to_dag()
    net.fit(np.where(miss, np.nan, X), missing=miss)
    dag.fit(X, missing=miss)
    np.testing.assert_array_equal(net.history_, dag.history_)
    assert net.history_[-1] > net.history_[0]
    for l, w in enumerate(net.weights_):
        o = [0, 2, 6, 14]
        np.testing.assert_array_equal(w, dag.W_[o[l + 1]:o[l + 2], o[l]:o[l + 1]])
    net.partial_fit(X, missing=miss[0])
    dag.set_params(learning_rate=net.learning_rate)
    dag.partial_fit(X, missing=np.tile(miss[0], (60, 1)))
    assert len(net.history_) == 5 and net.history_[-1] == dag.history_[-1]


def test_noisy_or_refuses_negative_parameters_and_bad_input():
    """Parameters are checked at first use (here ``sample``), not in the constructor."""
    W = np.zeros((3, 3))
    W[2, 0] = -0.5
    with pytest.raises(ValueError, match="non-negative weights"):
        mf.BeliefNet(W, np.zeros(3), [2], activation="noisy_or").sample(1)
    with pytest.raises(ValueError, match="non-negative biases"):
        mf.BeliefNet(np.zeros((3, 3)), [0.0, -1.0, 0.0], [2], activation="noisy_or").sample(1)
    U = np.zeros((3, 3))
    U[0, 2] = 1.0
    with pytest.raises(ValueError, match="lower triangular"):
        mf.BeliefNet(U, np.zeros(3), [2]).sample(1)
    with pytest.raises(ValueError, match="activation"):
        mf.BeliefNet(np.zeros((3, 3)), np.zeros(3), [2], activation="tanh").sample(1)
    with pytest.raises(ValueError, match="no unit"):
        mf.BeliefNet(np.zeros((3, 3)), np.zeros(3), np.zeros(3, dtype=bool)).sample(1)
    net = mf.BeliefNet(np.zeros((3, 3)), np.zeros(3), [2])
    with pytest.raises(ValueError, match="binary"):
        net.exact_log_likelihood([[0.5]])
    with pytest.raises(ValueError, match="max_hidden"):
        random_dag(25, "sigmoid", 0).exact_log_likelihood(np.zeros((1, 3)))
    # "gaussian" needs a layered net: a BeliefNet refuses it, naming the method argument
    with pytest.raises(ValueError, match=r"'method' parameter of BeliefNet must be a str among .* Got 'gaussian'"):
        mf.infer(net, np.zeros((1, 1)), method="gaussian")
    with pytest.raises(ValueError, match=r"'method' parameter of BeliefNet must be a str among .* Got 'gaussian'"):
        mf.BeliefNet(np.zeros((3, 3)), np.zeros(3), [2], method="gaussian").infer(np.zeros((1, 1)))


def test_visible_indices_must_be_increasing():
    """Column k of X is unit visible[k]: unsorted or repeated indices are refused (they used
    to be sorted silently, so column k of X was not unit visible[k])."""
    W = np.zeros((9, 9))
    with pytest.raises(ValueError, match="strictly increasing"):
        mf.BeliefNet(W, np.zeros(9), visible=[8, 6, 7]).sample(1)
    with pytest.raises(ValueError, match="strictly increasing"):
        mf.BeliefNet(W, np.zeros(9), visible=[6, 6, 7]).infer(np.zeros((1, 3)))
    net = mf.BeliefNet(W, np.zeros(9), visible=[6, 7, 8])
    np.testing.assert_array_equal(net.sample(1).shape, (1, 3))
    np.testing.assert_array_equal(np.flatnonzero(net.visible_), [6, 7, 8])
    assert net.visible == [6, 7, 8]  # the constructor's value is kept unchanged


def test_noisy_or_unit_with_zero_input_is_off():
    """z = 0 gives f = 0: such a unit is off with probability 1 (ln P = -inf if it is on)."""
    W = np.zeros((2, 2))
    W[1, 0] = 1.0
    net = mf.BeliefNet(W, [0.0, 0.0], [1], activation="noisy_or")
    ll = net.exact_log_likelihood([[0.0], [1.0]])
    assert ll[0] == pytest.approx(0.0) and ll[1] == -np.inf


@pytest.mark.parametrize("dtype", [np.int64, np.uint64, np.uint8, np.int32])
def test_visible_indices_of_any_integer_dtype_behave_alike(dtype):
    W = np.tril(np.full((5, 5), 0.5), -1)
    net = mf.BeliefNet(W, np.zeros(5), visible=np.array([3, 4], dtype=dtype))
    ref = mf.BeliefNet(W, np.zeros(5), visible=[3, 4])
    X = np.array([[0.0, 1.0], [1.0, 1.0]])
    np.testing.assert_array_equal(mf.infer(net, X).bound, mf.infer(ref, X).bound)
    with pytest.raises(ValueError, match="X must have 2 columns"):
        mf.infer(net, np.zeros((2, 4)))
    # decreasing indices are refused whatever the dtype (unsigned differences wrap around)
    bad = mf.BeliefNet(W, np.zeros(5), visible=np.array([4, 3], dtype=dtype))
    for _ in range(2):      # and the refusal leaves the model as it was: refused again
        with pytest.raises(ValueError, match="visible indices must be strictly increasing"):
            mf.infer(bad, X)


@pytest.mark.parametrize("method", ["gaussian", "plefka22"])
def test_layered_infer_and_gradient_name_a_bad_progress(method):
    """progress given as an array was tested for truth in the chunking (an ambiguous-truth
    ValueError that named nothing); now it is refused by name, as by the other models."""
    net = mf.SigmoidBeliefNet([2, 3], method=method, random_state=0, progress=False)
    X = net.sample(5, random_state=1)
    with pytest.raises(TypeError, match="progress"):
        mf.infer(net, X, method=method, progress=np.array([1, 2]))
    net.progress = np.array([1, 2])
    with pytest.raises(TypeError, match="progress"):
        net.gradient(X)


@pytest.mark.parametrize("activation", ["sigmoid", "noisy_or"])
def test_batch_missing_entries_as_each_net_alone(activation):
    """BeliefNetBatch takes ``missing`` (X's shape, or (n_visible,) for every pattern; NaN
    allowed there): every method's objective, the exact ln P and the sampled estimate equal
    what each net gives alone with its own mask; the strict bound stays below exact ln P."""
    rng = np.random.default_rng(61)
    n, k = 7, 4
    W = np.tril(rng.uniform(0.1, 1.0, (k, n, n)), -1) * (rng.random((n, n)) < 0.7)
    if activation == "sigmoid":
        W = W * rng.choice([-2.0, 2.0], W.shape)
    h = rng.uniform(0.05, 0.5, (k, n))
    vis = [3, 4, 5, 6]
    batch = mf.BeliefNetBatch(W, h, vis, activation, progress=False)
    X = batch.sample(5, random_state=2)                     # (k, 5, 4)
    miss = rng.random(X.shape) < 0.4
    miss[0, 0] = True                                       # a pattern with nothing observed
    Xn = np.where(miss, np.nan, X)
    nets = [mf.BeliefNet(W[j], h[j], vis, activation, progress=False) for j in range(k)]
    exact = batch.exact_log_likelihood(Xn, miss)
    for j in range(k):
        np.testing.assert_allclose(exact[j], nets[j].exact_log_likelihood(X[j], miss[j]),
                                   rtol=1e-13)
    np.testing.assert_allclose(exact[0, 0], 0.0, atol=1e-14)
    for method in ("sjj", "plefka11", "plefka12", "plefka22"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            r = batch.infer(Xn, miss, method=method)
            alone = [nets[j].infer(X[j], miss[j], method=method) for j in range(k)]
        np.testing.assert_array_equal(r.bound, np.stack([a.bound for a in alone]))
        np.testing.assert_array_equal(r.mu, np.stack([a.mu for a in alone]))
        if method == "sjj":
            assert np.all(r.bound <= exact + 1e-12)
    one = miss[1, 2]                                        # one row per net, a shared mask
    np.testing.assert_array_equal(
        batch.score_samples(X[:, 2], one), [nets[j].score_samples(X[j, 2:3], one)[0]
                                            for j in range(k)])
    for mask in (one, miss[:, 2]):                          # 2-D X: exact, per net
        np.testing.assert_allclose(batch.exact_log_likelihood(X[:, 2], mask),
                                   exact[:, 2] if mask is not one else
                                   [nets[j].exact_log_likelihood(X[j, 2:3], one)[0]
                                    for j in range(k)], rtol=1e-13)
    est = batch.log_likelihood(X, n_samples=4000, random_state=3, missing=miss)
    assert est.estimate.shape == (k, 5)
    assert np.all(np.abs(est.estimate - exact) <= 5 * est.stderr + 1e-9)
    with pytest.raises(ValueError, match="missing must have X's shape"):
        batch.infer(X, miss[:, :2])
    with pytest.raises(ValueError, match="not marked missing"):
        batch.infer(Xn, miss & (rng.random(miss.shape) < 0.5))
    with pytest.raises(ValueError, match="NaN"):
        batch.infer(Xn)
    with pytest.raises(ValueError, match="infinite"):      # only NaN may mark a missing entry
        batch.infer(np.where(miss, np.inf, X), miss)


def test_callers_that_need_no_q_solve_in_chunks_with_the_same_answers(monkeypatch):
    """score_samples, impute, sample_posterior and log_likelihood keep only the bounds or the
    means: a noisy-OR "sjj" solve then runs in chunks whose q (one per edge and item) fit in
    XI_CHUNK_DOUBLES and drops them, so its memory does not grow with items x edges.  Here
    the chunks are made 3 items long: the answers are infer's, bit for bit.  The other DAG
    solves are not cut (a layered net's Plefka blocks would round a short run otherwise)."""
    from mfengine.sbn import _solve

    net = random_dag(9, "noisy_or", seed=71, n_visible=4)
    X = net.sample(20, random_state=1)
    miss = np.random.default_rng(2).random(X.shape) < 0.3
    full = net.infer(X, miss)
    calls = []
    solve_items = _solve.solve_items
    monkeypatch.setattr(_solve, "XI_CHUNK_DOUBLES", 3 * net.structure.nnz)
    monkeypatch.setattr(_solve, "solve_items",
                        lambda *a, **k: calls.append(a[3].shape[0]) or solve_items(*a, **k))
    np.testing.assert_array_equal(net.score_samples(X, miss), full.bound)
    assert calls == [3] * 6 + [2]
    np.testing.assert_array_equal(net.impute(X, miss),
                                  np.where(miss, full.mu[:, net.visible_], X))
    np.testing.assert_array_equal(net.sample_posterior(X, 2, miss, random_state=4),
                                  (np.random.default_rng(4).random((2,) + full.mu.shape)
                                   < full.mu).astype(float))
    np.testing.assert_array_equal(
        net.log_likelihood(X, 50, random_state=0, missing=miss).bound, full.bound)
    del calls[:]
    assert net.infer(X, miss).xi.shape == (20, net.structure.nnz)
    assert calls == [20]                               # infer keeps everything: one call
    # a layered net's DAG (Plefka blocks of patterns): score_samples is infer's bound
    layered = mf.SigmoidBeliefNet([3, 6, 10], random_state=0, progress=False).to_dag()
    V = layered.sample(40, random_state=1)
    del calls[:]
    for method in ("plefka11", "plefka12"):
        np.testing.assert_array_equal(layered.score_samples(V, method=method),
                                      layered.infer(V, method=method).bound)
    assert calls == [40] * 4


def test_new_constructor_parameters_before_fit_are_used_and_activation_after_fit_is_checked():
    """Before fit, W_/h_ are copies of W/h: set_params(h=...) or (activation=...) takes effect
    at the next call (it used to keep the first call's copy, and read activation live on it);
    after fit another activation is refused by name; assigned W_ is the model's own."""
    rng = np.random.default_rng(0)
    W = np.tril(rng.uniform(0, 1, (6, 6)), -1)
    X = np.array([[0, 1, 0], [1, 1, 1.0]])
    net = mf.BeliefNet(W, np.full(6, 0.1), [3, 4, 5], "noisy_or", progress=False)
    net.score_samples(X)
    net.set_params(h=np.full(6, 2.0))
    np.testing.assert_array_equal(
        net.score_samples(X), mf.BeliefNet(W, np.full(6, 2.0), [3, 4, 5], "noisy_or").score_samples(X))
    net.set_params(activation="sigmoid")
    np.testing.assert_array_equal(
        net.score_samples(X), mf.BeliefNet(W, np.full(6, 2.0), [3, 4, 5]).score_samples(X))
    net.set_params(max_iter=2).fit(np.tile(X, (5, 1)))
    learned = net.W_.copy()
    net.set_params(activation="noisy_or")
    with pytest.raises(ValueError, match="activation='noisy_or', but W_ and h_ were learned by "
                                         "fit for 'sigmoid'"):
        net.score_samples(X)
    net.set_params(activation="sigmoid", h=np.zeros(6))
    net.score_samples(X)
    np.testing.assert_array_equal(net.W_, learned)    # a new h waits for the next fit
    own = mf.BeliefNet(W, np.full(6, 0.1), [3, 4, 5], progress=False)
    own.W_ = 0.5 * W
    own.h_ = np.full(6, 0.1)
    own.visible_ = np.arange(6) >= 3
    own.set_params(h=np.zeros(6))
    own.score_samples(X)
    np.testing.assert_array_equal(own.W_, 0.5 * W)    # assigned: not overwritten


def test_a_batch_net_is_a_copy_with_the_batch_settings():
    rng = np.random.default_rng(0)
    W = np.tril(rng.uniform(0, 1, (6, 6)), -1)
    h = np.full(6, 0.1)
    X = np.array([[0, 1, 0], [1, 1, 1.0]])
    b = mf.BeliefNetBatch(np.stack([W, W]), np.stack([h, h]), [3, 4, 5], "noisy_or",
                          method="plefka22", infer_tol=1e-9, progress=False)
    assert b[0].method == "plefka22" and b[0].infer_tol == 1e-9
    np.testing.assert_array_equal(b.score_samples(X),
                                  [b[k].score_samples(X[k:k + 1])[0] for k in (0, 1)])
    b[0].h[:] = 5.0
    b[0].W[4, 0] = 9.0
    np.testing.assert_array_equal(b.h_[0], h)
    assert b.W_[0][4, 0] == W[4, 0]


def test_copies_assignments_and_save_load_follow_one_rule(tmp_path):
    """W_, h_, visible_ are copies of W, h, visible until fit learns them or they are assigned:
    a loaded never-fitted net copies a new W too (save leaves the copies out), a loaded
    fitted net keeps refusing another activation (activation_ is saved), an assigned W_ /
    h_ / visible_ (also before the first call) is used and kept, and a fitted net given a new
    W of another pattern still loads.  A sparse net enumerates a pattern whose visible
    entries are all missing."""
    import scipy.sparse as sp

    W = np.array([[0, 0, 0], [0.5, 0, 0], [0.5, 0.5, 0]])
    W2 = np.array([[0, 0, 0], [0.9, 0, 0], [0, 0.9, 0]])     # another nonzero pattern
    h, vis = np.full(3, 0.2), [1, 2]
    X = np.array([[1, 0], [1, 1], [0, 1.0]])
    ref2 = mf.BeliefNet(W2, h, vis).score_samples(X)
    net = mf.BeliefNet(W, h, vis, progress=False)
    net.score_samples(X)
    net.save(tmp_path / "a.npz")
    loaded = mf.load(tmp_path / "a.npz")
    np.testing.assert_array_equal(loaded.set_params(W=W2).score_samples(X), ref2)
    net.set_params(max_iter=2).fit(np.tile(X, (4, 1)))
    assert net.activation_ == "sigmoid"
    net.save(tmp_path / "b.npz")
    fitted = mf.load(tmp_path / "b.npz")
    with pytest.raises(ValueError, match="were learned by fit for 'sigmoid'"):
        fitted.set_params(activation="noisy_or").score_samples(X)
    before = net.set_params(W=W2).score_samples(X)             # W_ learned: kept
    net.save(tmp_path / "c.npz")
    np.testing.assert_array_equal(mf.load(tmp_path / "c.npz").score_samples(X), before)
    a = mf.BeliefNet(W, h, vis)
    a.score_samples(X)
    a.visible_ = np.array([True, False, True])
    a.set_params(activation="noisy_or").score_samples(X)
    np.testing.assert_array_equal(a.visible_, [True, False, True])
    b = mf.BeliefNet(W, h, vis)
    b.W_, b.h_ = 2 * W, h.copy()
    np.testing.assert_array_equal(b.score_samples(X), mf.BeliefNet(2 * W, h, vis).score_samples(X))
    c = mf.BeliefNet(W, h, vis)
    c.W_ = 2 * W
    np.testing.assert_array_equal(c.score_samples(X), mf.BeliefNet(2 * W, h, vis).score_samples(X))
    miss = np.zeros((2, 3, 2), bool)
    miss[:, 0] = True
    Xb = np.stack([X, X])
    dense = mf.BeliefNetBatch(np.stack([W, W]), np.stack([h, h]), vis)
    sparse = mf.BeliefNetBatch([sp.csr_matrix(W)] * 2, np.stack([h, h]), vis)
    np.testing.assert_allclose(sparse.exact_log_likelihood(Xb, miss),
                               dense.exact_log_likelihood(Xb, miss), rtol=1e-13)


def test_each_copy_is_tracked_alone_and_a_loaded_net_is_the_saved_one(tmp_path):
    """Per attribute: an assigned visible_ (or W_) leaves the other copies following W / h;
    in-place edits of W_ and of the constructor's W after the first call are saved as they
    act; a loaded net given a new W before any call copies it; the edge set survives a W of
    another pattern after fit; errors name W while W_ is its copy."""
    W = np.array([[0, 0, 0, 0], [.5, 0, 0, 0], [.5, .5, 0, 0], [0, .4, .3, 0]])
    h, vis = np.full(4, 0.2), [2, 3]
    X = np.array([[1, 0], [1, 1], [0, 1.0], [0, 0]])
    W2 = W.copy()
    W2[3, 1] = 2.0

    def same(a, b):
        np.testing.assert_array_equal(a.score_samples(X), b.score_samples(X))

    def reloaded(net, name):
        return mf.load(net.save(tmp_path / name))

    n = mf.BeliefNet(W, h, vis)
    n.score_samples(X)
    n.visible_ = np.array([0, 1, 0, 1], bool)
    n.set_params(W=W2)
    same(n, mf.BeliefNet(W2, h, [1, 3]))
    n = mf.BeliefNet(W, h, vis)
    n.W_ = 2 * W
    n.score_samples(X)
    n.set_params(h=np.full(4, -0.7))
    same(n, mf.BeliefNet(2 * W, np.full(4, -0.7), vis))
    n = mf.BeliefNet(W, h, vis)
    n.score_samples(X)
    n.W_[3, 1] = 2.0
    same(n, reloaded(n, "a"))
    Wc = W.copy()
    n = mf.BeliefNet(Wc, h, vis)
    n.score_samples(X)
    Wc[3, 1] = 2.0
    same(n, reloaded(n, "b"))
    n = mf.BeliefNet(W, h, vis)
    n.score_samples(X)
    loaded = reloaded(n, "c").set_params(W=W2)
    same(loaded, mf.BeliefNet(W2, h, vis))
    chain = np.array([[0, 0, 0, 0], [.5, 0, 0, 0], [0, .5, 0, 0], [0, 0, .5, 0]])
    full = np.tril(np.full((4, 4), 0.3), -1)
    n = mf.BeliefNet(chain, h, vis, max_iter=2, random_state=0, progress=False)
    n.fit(np.tile(X, (3, 1))).set_params(W=full)
    m = reloaded(n, "d")
    assert m.n_weights == n.n_weights == 3
    same(n, m)
    Wn = W.copy()
    Wn[3, 1] = -0.4
    n = mf.BeliefNet(Wn, h, vis)
    n.score_samples(X)
    with pytest.raises(ValueError, match="non-negative weights; W has negative entries"):
        n.set_params(activation="noisy_or").score_samples(X)


def test_save_between_calls_and_refused_calls_keep_the_rule(tmp_path):
    """save right after set_params(W=...) (before any call), load -> save -> load, a refused
    call (nothing changes), a save of an unusable W_ (refused), an in-place edit
    blamed on W_, and a deleted visible_: the loaded net is the saved one and errors name what
    is at fault."""
    W = np.array([[0, 0, 0, 0], [.5, 0, 0, 0], [.5, .5, 0, 0], [0, .4, .3, 0]])
    h, vis = np.full(4, 0.2), [2, 3]
    X = np.array([[1, 0], [1, 1], [0, 1.0], [0, 0]])
    W2 = W.copy()
    W2[3, 1] = 2.0
    k = iter(range(100))

    def reloaded(net):
        return mf.load(net.save(tmp_path / f"m{next(k)}"))

    def same(a, b):
        np.testing.assert_array_equal(a.score_samples(X), b.score_samples(X))

    n = mf.BeliefNet(W, h, vis)
    n.score_samples(X)
    n.set_params(W=W2)
    same(reloaded(n), mf.BeliefNet(W2, h, vis))
    n = mf.BeliefNet(W, h, vis)
    n.score_samples(X)
    twice = reloaded(reloaded(n)).set_params(W=W2)
    same(twice, mf.BeliefNet(W2, h, vis))
    chain = np.array([[0, 0, 0, 0], [.5, 0, 0, 0], [0, .5, 0, 0], [0, 0, .5, 0]])
    n = mf.BeliefNet(chain, h, vis, max_iter=1, random_state=0, progress=False)
    n.fit(np.tile(X, (3, 1))).set_params(W=np.tril(np.full((4, 4), 0.3), -1))
    assert reloaded(reloaded(n)).n_weights == n.n_weights == 3
    n = mf.BeliefNet(W, h, vis, max_iter=1, progress=False).fit(np.tile(X, (3, 1)))
    n.set_params(visible=[1, 3], activation="noisy_or")
    with pytest.raises(ValueError, match="learned by fit for 'sigmoid'"):
        n.score_samples(X)
    np.testing.assert_array_equal(n.visible_, [False, False, True, True])   # refused: unchanged
    n.set_params(activation="sigmoid", visible=[2, 3]).score_samples(X)
    np.testing.assert_array_equal(n.visible_, [False, False, True, True])
    n = mf.BeliefNet(W, h, vis)
    n.score_samples(X)
    n.W_[3, 1] = -1.0
    with pytest.raises(ValueError, match="non-negative weights; W_ has negative"):
        n.set_params(activation="noisy_or").score_samples(X)
    n = mf.BeliefNet(W, h, vis)
    n.score_samples(X)
    n.W_ = None
    with pytest.raises(ValueError, match="W_"):     # refused by save (load would), by name
        reloaded(n)
    n = mf.BeliefNet(W, h, vis)
    n.score_samples(X)
    del n.visible_
    m = reloaded(n)
    same(m.set_params(W=W2), n.set_params(W=W2))


def test_a_refused_fit_and_a_loaded_uncalled_net_change_nothing(tmp_path):
    """A fit refused at set-up (its data) keeps the learned W_, h_, an assigned visible_ and
    activation_; a never-called net with an assigned attribute saves and loads as it is (the
    rest is copied at its first call, as in the saved net); a stale copy's edges are kept."""
    W = np.array([[0, 0, 0, 0], [.5, 0, 0, 0], [.5, .5, 0, 0], [0, .4, .3, 0]])
    h, vis = np.full(4, 0.2), [2, 3]
    X = np.array([[1, 0], [1, 1], [0, 1.0], [0, 0]])
    n = mf.BeliefNet(W, h, vis, max_iter=1, progress=False).fit(np.tile(X, (3, 1)))
    learned = n.W_.copy()
    n.visible_ = np.array([False, True, False, True])
    with pytest.raises(ValueError, match="X must have 2 columns"):
        n.fit(np.ones((3, 5)))
    np.testing.assert_array_equal(n.W_, learned)
    np.testing.assert_array_equal(n.visible_, [False, True, False, True])
    assert n.activation_ == "sigmoid"
    u = mf.BeliefNet(W, h, vis)
    u.h_ = 2 * h                                   # never called
    m = mf.load(u.save(tmp_path / "u"))
    assert "W_" not in vars(m) and "W_" not in vars(u)
    u.W[3, 1] = m.W[3, 1] = 2.0
    np.testing.assert_array_equal(m.score_samples(X), u.score_samples(X))
    chain = np.array([[0, 0, 0, 0], [.5, 0, 0, 0], [0, .5, 0, 0], [0, 0, .5, 0]])
    full = np.tril(np.full((4, 4), 0.3), -1)
    s = mf.BeliefNet(chain, h, vis)
    s.score_samples(X)
    s.set_params(W=full)
    m = mf.load(s.save(tmp_path / "s"))
    for net in (s, m):
        net.W_ = 0.5 * full
        with pytest.raises(ValueError, match="off the net's edges"):
            net.score_samples(X)
