"""Threads, input conversion and input errors of the public entry points."""
import copy

import numpy as np
import pytest

import mfengine as mf


@pytest.fixture(scope="module")
def net():
    rng = np.random.default_rng(0)
    base = mf.SigmoidBeliefNet([3, 5, 4, 8], weight_scale=2.0, random_state=rng)
    return mf.SigmoidBeliefNet.from_params(base.weights, [rng.normal(0, 1, n) for n in base.sizes])


@pytest.fixture(scope="module")
def V(net):
    return net.sample(400, random_state=1)


def copy_of(net):
    """An independent copy of ``net`` (``SigmoidBeliefNet.copy`` is broken: see
    test_copy_is_a_deep_copy)."""
    return copy.deepcopy(net)


def assert_identical(a, b):
    """Bit-for-bit equal InferenceResults."""
    np.testing.assert_array_equal(a.bound, b.bound)
    np.testing.assert_array_equal(a.n_iter, b.n_iter)
    np.testing.assert_array_equal(a.converged, b.converged)
    for x, y in zip(a.mu + a.xi, b.mu + b.xi):
        np.testing.assert_array_equal(x, y)


# ----------------------------------------------------------------------------- threads
@pytest.mark.parametrize("with_missing", [False, True])
def test_same_answer_for_any_thread_count(net, V, with_missing):
    missing = (np.random.default_rng(2).random(V.shape) < 0.2) if with_missing else None
    runs = [mf.infer(net, V, missing=missing, tol=1e-8, n_threads=k) for k in (1, 2, -1, None)]
    for r in runs[1:]:
        assert_identical(runs[0], r)
    # each pattern's answer does not depend on the batch it is solved in either
    single = mf.infer(net, V[37:38], missing=None if missing is None else missing[37:38], tol=1e-8,
                      n_threads=1)
    np.testing.assert_array_equal(single.bound, runs[0].bound[37:38])


def test_threads_with_large_batch(net):
    V = net.sample(3000, random_state=5)
    assert_identical(mf.infer(net, V, n_threads=1), mf.infer(net, V, n_threads=2))


# ----------------------------------------------------------------------------- conversions
def test_read_only_inputs(net, V):
    expected = mf.infer(net, V, tol=1e-8)
    ll = net.exact_log_likelihood(V[:50])
    grad = net.gradient(V[:50], tol=1e-8)
    Vr = V.copy()
    Vr.setflags(write=False)
    ro = copy_of(net)
    for a in ro.weights + ro.biases:
        a.setflags(write=False)
    assert_identical(mf.infer(ro, Vr, tol=1e-8), expected)
    np.testing.assert_array_equal(ro.exact_log_likelihood(Vr[:50]), ll)
    g2 = ro.gradient(Vr[:50], tol=1e-8)
    for a, b in zip(grad[0] + grad[1], g2[0] + g2[1]):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(ro.evaluate_bound(Vr, expected.mu, expected.xi), net.evaluate_bound(V, expected.mu, expected.xi))
    # read-only missing mask and init_mu
    missing = np.random.default_rng(3).random(V.shape) < 0.2
    init = np.random.default_rng(4).uniform(0.1, 0.9, (len(V), 12))
    want = mf.infer(net, V, missing=missing, init_mu=init, tol=1e-8)
    missing.setflags(write=False)
    init.setflags(write=False)
    assert_identical(mf.infer(ro, Vr, missing=missing, init_mu=init, tol=1e-8), want)


@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.int8, np.uint8, np.bool_])
def test_other_dtypes_are_converted(net, V, dtype):
    expected = mf.infer(net, V, tol=1e-8)
    assert_identical(mf.infer(net, V.astype(dtype), tol=1e-8), expected)
    np.testing.assert_array_equal(net.exact_log_likelihood(V[:20].astype(dtype)), net.exact_log_likelihood(V[:20]))


def test_non_contiguous_inputs(net, V):
    expected = mf.infer(net, V, tol=1e-8)
    F = np.asfortranarray(V)
    assert not F.flags.c_contiguous
    assert_identical(mf.infer(net, F[:, ::1], tol=1e-8), expected)
    wide = np.repeat(V, 2, axis=1)[:, ::2]  # strided view
    assert not wide.flags.c_contiguous
    assert_identical(mf.infer(net, wide, tol=1e-8), expected)
    rev = V[::-1][::-1]
    assert_identical(mf.infer(net, V[::-2], tol=1e-8), mf.infer(net, np.ascontiguousarray(V[::-2]), tol=1e-8))
    assert_identical(mf.infer(net, rev, tol=1e-8), expected)
    # nested lists
    assert_identical(mf.infer(net, V[:40].tolist(), tol=1e-8), mf.infer(net, V[:40], tol=1e-8))
    # Fortran-ordered, strided missing mask and init_mu
    missing = np.random.default_rng(3).random(V.shape) < 0.2
    init = np.random.default_rng(4).uniform(0.1, 0.9, (len(V), 24))[:, ::2]
    want = mf.infer(net, V, missing=missing, init_mu=np.ascontiguousarray(init), tol=1e-8)
    assert_identical(mf.infer(net, F, missing=np.asfortranarray(missing), init_mu=init, tol=1e-8), want)
    # non-contiguous parameters (edited in place by a user)
    nc = copy_of(net)
    nc.weights_ = [np.asfortranarray(w) for w in nc.weights_]
    assert not nc.weights_[1].flags.c_contiguous
    assert_identical(mf.infer(nc, V, tol=1e-8), expected)


def test_empty_batch(net):
    r = mf.infer(net, np.zeros((0, 8)))
    assert r.bound.shape == (0,)
    assert [m.shape for m in r.mu] == [(0, n) for n in net.sizes]
    assert net.exact_log_likelihood(np.zeros((0, 8))).shape == (0,)


# ----------------------------------------------------------------------------- errors
def test_bad_V(net, V):
    with pytest.raises(ValueError, match="X must be a 2-D array"):
        mf.infer(net, V[0])
    with pytest.raises(ValueError, match="X must be a 2-D array"):
        mf.infer(net, V[None])
    with pytest.raises(ValueError, match="X must have 8 columns"):
        mf.infer(net, V[:, :7])
    bad = V.copy()
    bad[3, 2] = np.nan
    with pytest.raises(ValueError, match="X contains NaN"):
        mf.infer(net, bad)
    bad[3, 2] = np.inf
    with pytest.raises(ValueError, match="X contains NaN"):
        mf.infer(net, bad)
    for value in (0.5, 2.0, -1.0):
        bad = V.copy()
        bad[5, 1] = value
        with pytest.raises(ValueError, match="X must be binary"):
            mf.infer(net, bad)
        with pytest.raises(ValueError, match="X must be binary"):
            net.exact_log_likelihood(bad)
        with pytest.raises(ValueError, match="X must be binary"):
            copy_of(net).set_params(max_iter=1, progress=False).fit(bad)
    with pytest.raises(TypeError, match="X must be numeric"):
        mf.infer(net, V.astype(str))
    # numbers stored as objects are converted (as scikit-learn does); anything else is refused
    np.testing.assert_array_equal(mf.infer(net, V.astype(object)).bound, mf.infer(net, V).bound)
    odd = V.astype(object)
    odd[0, 0] = {"a": 1}
    with pytest.raises(TypeError, match="X has dtype object"):
        mf.infer(net, odd)
    with pytest.raises(ValueError, match="Complex data not supported: X"):
        mf.infer(net, V.astype(complex))
    # NaN is allowed only where marked missing
    missing = np.zeros(V.shape, bool)
    missing[0, 0] = True
    bad = V.copy()
    bad[1, 1] = np.nan
    with pytest.raises(ValueError, match="X contains NaN or infinite values at entries not marked missing"):
        mf.infer(net, bad, missing=missing)
    bad = V.copy()
    bad[1, 1] = 0.5
    with pytest.raises(ValueError, match="X must be binary"):
        mf.infer(net, bad, missing=missing)


def test_bad_parameters_of_the_net(net, V):
    broken = copy_of(net)
    broken.weights[1][0, 0] = np.nan
    with pytest.raises(ValueError, match=r"weights_\[1\]"):
        mf.infer(broken, V)
    with pytest.raises(ValueError, match=r"weights_\[1\]"):
        broken.exact_log_likelihood(V)
    with pytest.raises(ValueError, match=r"weights_\[1\]"):   # fit continues from the edited net
        broken.set_params(max_iter=1, progress=False, warm_start=True).fit(V)
    broken = copy_of(net)
    broken.biases[2][1] = np.inf
    with pytest.raises(ValueError, match=r"biases_\[2\]"):
        mf.infer(broken, V)
    broken = copy_of(net)
    broken.weights[0] = np.zeros((4, 3))
    with pytest.raises(ValueError, match=r"weights_\[0\]"):
        mf.infer(broken, V)
    with pytest.raises(ValueError, match=r"weights_\[0\]"):
        mf.SigmoidBeliefNet.from_params([np.full((5, 3), np.nan), net.weights[1], net.weights[2]], net.biases)
    with pytest.raises(ValueError, match=r"weights_\[1\]"):
        mf.SigmoidBeliefNet.from_params([net.weights[0], np.zeros((3, 3)), net.weights[2]], net.biases)
    with pytest.raises(ValueError, match="bias"):
        mf.SigmoidBeliefNet.from_params(net.weights, net.biases[:-1])
    with pytest.raises(ValueError, match=r"biases\[0\]"):
        mf.SigmoidBeliefNet.from_params(net.weights, [np.zeros((3, 1))] + net.biases[1:])
    with pytest.raises(TypeError, match="model"):
        mf.infer("not a net", V)


def test_edited_parameters_of_other_dtypes(net, V):
    """Parameters edited in place with other dtypes are converted, or refused with a clear
    error naming them; never a low-level buffer error."""
    edited = copy_of(net)
    edited.weights_ = [w.astype(np.float32) for w in net.weights_]
    edited.biases_ = [np.round(b).astype(np.int64) for b in net.biases_]
    reference = mf.SigmoidBeliefNet.from_params(edited.weights_, edited.biases_)
    assert_identical(mf.infer(edited, V[:50], tol=1e-8), mf.infer(reference, V[:50], tol=1e-8))
    np.testing.assert_array_equal(edited.exact_log_likelihood(V[:20]), reference.exact_log_likelihood(V[:20]))
    bad = copy_of(net)
    bad.biases[1] = bad.biases[1][:, None]
    with pytest.raises(ValueError, match=r"biases_\[1\]"):
        mf.infer(bad, V)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(tol=0), "tol"),
        (dict(tol=-1e-3), "tol"),
        (dict(tol=np.nan), "tol"),
        (dict(tol=np.inf), "tol"),
        (dict(tol="small"), "tol"),
        (dict(tol=True), "tol"),
        (dict(max_iter=0), "max_iter"),
        (dict(max_iter=2.5), "max_iter"),
        (dict(max_iter=-3), "max_iter"),
        (dict(max_iter=True), "max_iter"),
        (dict(n_threads=0), "n_threads"),
        (dict(n_threads=1.5), "n_threads"),
        (dict(n_threads="two"), "n_threads"),
        (dict(n_threads=True), "n_threads"),
        (dict(inner_tol=0.0), "inner_tol"),
        (dict(inner_tol=-1.0), "inner_tol"),
        (dict(method="plefka99"), "method"),
    ],
)
def test_bad_solver_arguments(net, V, kwargs, match):
    with pytest.raises(ValueError, match=match):
        mf.infer(net, V[:10], **kwargs)


def test_bad_missing_mask(net, V):
    with pytest.raises(ValueError, match="missing must have shape"):
        mf.infer(net, V, missing=np.zeros((len(V), 7), bool))
    with pytest.raises(ValueError, match="missing must have shape"):
        mf.infer(net, V, missing=np.zeros((len(V) - 1, 8), bool))
    with pytest.raises(ValueError, match="missing must have shape"):
        mf.infer(net, V, missing=np.zeros(7, bool))
    with pytest.raises(TypeError, match="missing must be a boolean mask"):
        mf.infer(net, V, missing=np.full(V.shape, 0.5))
    with pytest.raises(TypeError, match="missing must be a boolean mask"):
        mf.infer(net, V, missing=np.full(V.shape, 2))
    with pytest.raises(ValueError, match="missing must have shape"):
        net.exact_log_likelihood(V, missing=np.zeros((3, 8), bool))
    # 0/1 integers are accepted as a mask, and a 1-D mask applies to every pattern
    m = np.zeros(8, np.int64)
    m[2] = 1
    a = mf.infer(net, V[:40], missing=m)
    b = mf.infer(net, V[:40], missing=np.broadcast_to(m.astype(bool), (40, 8)))
    assert_identical(a, b)


def test_bad_init_mu(net, V):
    with pytest.raises(ValueError, match="init_mu"):
        mf.infer(net, V, init_mu=np.full((len(V), 11), 0.5))
    with pytest.raises(ValueError, match="init_mu"):
        mf.infer(net, V, init_mu=np.full(12, 0.5))
    with pytest.raises(ValueError, match="init_mu"):
        mf.infer(net, V, init_mu=np.full((len(V), 12), 1.5))
    with pytest.raises(ValueError, match="init_mu"):
        mf.infer(net, V, init_mu=np.full((len(V), 12), np.nan))


def test_bad_sizes():
    """sizes and weight_scale are stored unchanged and checked at first use (here sample)."""
    for sizes in ([], [3], [3, 0], [2, -1, 4]):
        with pytest.raises(ValueError, match="sizes"):
            mf.SigmoidBeliefNet(sizes).sample(1)
    for sizes in (3, None, [[3], [2]]):
        with pytest.raises(TypeError, match="sizes"):
            mf.SigmoidBeliefNet(sizes).sample(1)
    for sizes in ("ab", [3, 2.5], [3, "x"]):
        with pytest.raises((TypeError, ValueError), match="sizes"):
            mf.SigmoidBeliefNet(sizes).sample(1)
    arr = np.array([2, 3])
    net = mf.SigmoidBeliefNet(arr)
    assert net.get_params()["sizes"] is arr
    assert net.sample(1).shape == (1, 3)
    assert [b.shape for b in net.biases_] == [(2,), (3,)]
    assert [w.shape for w in net.weights_] == [(3, 2)]
    with pytest.raises(ValueError, match="weight_scale"):
        mf.SigmoidBeliefNet([2, 3], weight_scale=-1.0).sample(1)
    with pytest.raises(ValueError, match="weight_scale"):
        mf.SigmoidBeliefNet([2, 3], weight_scale=np.nan).sample(1)


def test_copy_is_a_deep_copy(net, V):
    c = net.copy()
    assert type(c) is type(net) and c.get_params().keys() == net.get_params().keys()
    for a, b in zip(c.weights_ + c.biases_, net.weights_ + net.biases_):
        np.testing.assert_array_equal(a, b)
        assert not np.shares_memory(a, b)
    np.testing.assert_array_equal(c.score_samples(V[:20]), net.score_samples(V[:20]))


def test_exact_log_likelihood_too_many_hidden_units():
    big = mf.SigmoidBeliefNet([5, 16, 4], random_state=0)
    with pytest.raises(ValueError, match="max_hidden"):
        big.exact_log_likelihood(np.zeros((2, 4)))


def test_bad_mu_xi_for_evaluate_bound_and_gradient(net, V):
    r = mf.infer(net, V[:10])
    with pytest.raises(ValueError, match="mu"):
        net.evaluate_bound(V[:10], r.mu[1:], r.xi)
    with pytest.raises(ValueError, match="mu"):
        net.evaluate_bound(V[:10], [m[:5] for m in r.mu], r.xi)
    with pytest.raises(ValueError, match="xi"):
        net.evaluate_bound(V[:10], r.mu, [x[:, :1] for x in r.xi])
    with pytest.raises(ValueError, match="mu"):
        net.evaluate_bound(V[:10], [m * np.nan for m in r.mu[:-1]] + [r.mu[-1]], r.xi)
    with pytest.raises(ValueError, match="mu"):
        net.evaluate_bound(V[:10], [m + 1.0 for m in r.mu[:-1]] + [r.mu[-1]], r.xi)
    with pytest.raises(ValueError, match="result"):
        net.gradient(V[:4], result=r)


def test_sample_arguments(net):
    with pytest.raises(ValueError, match="'n_samples' parameter must be an int in the range \\[0,"):
        net.sample(-1)
    with pytest.raises(TypeError, match="'n_samples' parameter must be an int"):
        net.sample(2.5)
    with pytest.raises(ValueError, match="n_samples"):
        net.sample(2**63)
    with pytest.raises(TypeError, match="return_all"):
        net.sample(2, return_all=np.array([1, 2]))
    assert net.sample(0).shape == (0, 8)
    layers = net.sample(5, random_state=0, return_all=True)
    assert [x.shape for x in layers] == [(5, n) for n in net.sizes]
    np.testing.assert_array_equal(layers[-1], net.sample(5, random_state=0))
    with pytest.raises(TypeError, match="random_state"):
        net.sample(3, random_state="seed")


# --- what the long fuzz found with further seeds (bench/tools/fuzz_long.py --seed 11 / 23 / 47):
# each error names the argument at fault, and valid input is not refused

def test_errors_name_the_argument_found_by_further_fuzz_seeds():
    X = np.sin(np.arange(20.0))[:, None] * np.ones(2) + 0.5
    h = mf.ContextHMM(2, 2, lag=2, context="right", max_iter=2, bw_max_iter=2, random_state=0,
                      progress=False)
    with pytest.raises(ValueError, match="^X has values"):
        h.fit(X * 1e150)                # was: means_ (estimated from X) named
    Xb = X.copy()
    Xb.flat[0] = np.finfo(float).max
    with pytest.raises(ValueError, match="^X has values"):
        h.fit(Xb)

    g = mf.NLGBN([2, 3], max_iter=2, tol=1e-3, random_state=0, progress=False)
    Xn = g.sample(6, random_state=1)
    g.weight_scale = -0.0               # the valid 0 (was NumPy's "scale < 0")
    assert np.all(np.isfinite(g.fit(Xn).history_))
    g2 = mf.NLGBN([2, 3], max_iter=2, tol=1e-3, random_state=0, progress=False)
    g2.sizes = np.array([1, 2])
    with pytest.raises(ValueError, match="sizes"):
        g2.score_samples(Xn)

    s = mf.SigmoidBeliefNet([3, 4], method="plefka12", max_iter=2, random_state=0,
                            progress=False)
    Xs = s.sample(1, random_state=1)
    s.weight_scale = 4e275
    with pytest.raises(OverflowError, match=r"weight_scale=4e\+275"):
        s.fit(Xs)
    # starting weights beyond the DAG kernels' range (long fuzz, seed 73): weight_scale named
    s.set_params(method="sjj", weight_scale=1.7976931348623157e+308)
    with pytest.raises(ValueError, match=r"weight_scale=1.79\d*e\+308 draws starting weights"):
        s.fit(Xs)

    rng = np.random.default_rng(0)
    W = np.tril(rng.uniform(0, 1, (5, 5)), -1) * 5.0
    b = mf.BeliefNet(W, np.zeros(5), visible=[1, 2, 3, 4], activation="noisy_or",
                     method="plefka22", max_iter=2, batch_size=3, progress=False)
    Xo = np.ones((1, 4))
    with pytest.raises(ValueError, match=r"positive bias \(a leak\) in h"):
        b.fit(Xo)


def test_fit_copies_a_read_only_parameter_instead_of_refusing_it():
    m = mf.SigmoidBeliefNet([1, 2, 3], max_iter=2, random_state=0, progress=False)
    X = m.sample(4, random_state=1)
    frozen = np.array(m.weights_[1])
    frozen.setflags(write=False)
    before = frozen.copy()
    m.weights_[1] = frozen
    m.warm_start = True
    m.fit(X)
    np.testing.assert_array_equal(frozen, before)        # the user's array is untouched
    assert m.weights_[1] is not frozen and m.weights_[1].flags.writeable
