"""The estimator protocol of the belief nets (issue 10, item 1; issue 14 for parameters
assigned after construction): SigmoidBeliefNet, BeliefNet and BeliefNetBatch speak the same
language as scikit-learn's estimators.

Every net here is small, so the whole module runs in a few seconds.  A check that reveals a
defect of the library is a strict xfail whose reason says what is wrong.
"""
import inspect
import json
import os
import pickle
import re
import subprocess
import sys
import tempfile
import textwrap
import warnings

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.exceptions import NotFittedError
from sklearn.utils.validation import check_is_fitted

import mfengine as mf
from mfengine.sbn import _gaussian, plefka, sjj

SIZES = [2, 3, 6]
DAG_METHODS = ["sjj", "plefka11", "plefka12", "plefka22"]
ALL_METHODS = ["gaussian"] + DAG_METHODS
CLASSES = ["SigmoidBeliefNet", "BeliefNet", "BeliefNetBatch"]


# ----------------------------------------------------------------------------- small models
def dag_weights(seed=0, scale=1.0):
    """A noisy-OR net over 6 units (3 hidden, then 3 visible), every edge j < i present."""
    rng = np.random.default_rng(seed)
    return np.tril(rng.uniform(0.05, 1.0, (6, 6)), -1) * scale, np.full(6, 0.1)


def make(kind, **params):
    """A fresh, unfitted model of class ``kind`` with ``params``."""
    params.setdefault("progress", False)
    if kind == "SigmoidBeliefNet":
        params.setdefault("random_state", 0)
        return mf.SigmoidBeliefNet(SIZES, **params)
    W, h = dag_weights()
    if kind == "BeliefNet":
        params.setdefault("random_state", 0)
        return mf.BeliefNet(W, h, [3, 4, 5], "noisy_or", **params)
    return mf.BeliefNetBatch(np.stack([W, 0.5 * W, 0.8 * W]), np.stack([h, 2 * h, h]), [3, 4, 5],
                             "noisy_or", **params)


def data(kind, n=20, seed=0):
    """Binary data for a model of class ``kind``: (n, n_visible), or (n_nets, n, n_visible)."""
    if kind == "SigmoidBeliefNet":
        teacher = mf.SigmoidBeliefNet(SIZES, weight_scale=2.0, random_state=1)
        return teacher.sample(n, random_state=seed)
    if kind == "BeliefNet":
        return make("BeliefNet").sample(n, random_state=seed)
    return np.random.default_rng(seed).integers(0, 2, (3, n, 3)).astype(np.float64)


def hard(kind, **params):
    """A model with large weights: mean-field solves need many sweeps, Plefka breaks down."""
    params.setdefault("progress", False)
    if kind == "SigmoidBeliefNet":
        return mf.SigmoidBeliefNet(SIZES, weight_scale=10.0, random_state=0, **params)
    rng = np.random.default_rng(0)
    W = np.tril(rng.normal(0, 10.0, (8, 8)), -1)
    h = rng.normal(0, 1, 8)
    if kind == "BeliefNet":
        return mf.BeliefNet(W, h, [5, 6, 7], **params)
    return mf.BeliefNetBatch(np.stack([W, 1.2 * W]), np.stack([h, h]), [5, 6, 7], **params)


def hard_data(kind, n=30):
    if kind == "BeliefNetBatch":
        return np.random.default_rng(1).integers(0, 2, (2, n, 3)).astype(np.float64)
    return hard(kind).sample(n, random_state=1)


def params_equal(a, b):
    """Equal get_params dicts (arrays compared by value, everything else with ==)."""
    assert a.keys() == b.keys()
    for k in a:
        if isinstance(a[k], np.ndarray) or isinstance(b[k], np.ndarray):
            assert type(a[k]) is type(b[k]), k
            np.testing.assert_array_equal(a[k], b[k], err_msg=k)
        else:
            assert a[k] == b[k], k
            assert type(a[k]) is type(b[k]), k


def fitted_arrays(model):
    """The fitted parameters of a model, as a flat list of arrays."""
    if isinstance(model, mf.SigmoidBeliefNet):
        return list(model.weights_) + list(model.biases_)
    return [model.W_, model.h_]


def assert_results_identical(a, b):
    assert type(a) is type(b) and a.method == b.method and a.tol == b.tol
    np.testing.assert_array_equal(a.bound, b.bound)
    np.testing.assert_array_equal(a.converged, b.converged)
    np.testing.assert_array_equal(a.n_iter, b.n_iter)
    for x, y in ((a.mu, b.mu), (a.xi, b.xi)):
        assert (x is None) == (y is None)
        if isinstance(x, list):
            assert len(x) == len(y)
            for p, q in zip(x, y):
                np.testing.assert_array_equal(p, q)
        elif x is not None:
            np.testing.assert_array_equal(x, y)


# ----------------------------------------------------------------------------- clone, params
@pytest.mark.parametrize("kind", CLASSES)
def test_clone_gives_an_unfitted_copy_with_equal_parameters(kind):
    model = make(kind, infer_tol=1e-7)
    X = data(kind)
    if hasattr(model, "fit"):
        model.fit(X)
    else:
        model.infer(X)
    assert model.__sklearn_is_fitted__()
    c = clone(model)
    assert type(c) is type(model) and c is not model
    params_equal(c.get_params(), model.get_params())
    fitted = [k for k in vars(c) if k.endswith("_") and not k.startswith("_")]
    assert fitted == []
    assert not c.__sklearn_is_fitted__()
    if hasattr(model, "fit"):   # scikit-learn's check (it needs a fit method)
        check_is_fitted(model)
        with pytest.raises(NotFittedError):
            check_is_fitted(c)
    # the clone holds copies: it scores like the original's constructor parameters
    if kind != "SigmoidBeliefNet":
        assert c.W is not model.W
    np.testing.assert_array_equal(clone(make(kind)).score_samples(X), make(kind).score_samples(X))


@pytest.mark.parametrize("kind", CLASSES)
def test_get_params_set_params_round_trip(kind):
    model = make(kind)
    params = model.get_params()
    assert params == model.get_params(deep=False)
    # every constructor argument is a parameter, stored unchanged under its name
    names = [p for p in inspect.signature(type(model).__init__).parameters if p != "self"]
    assert sorted(params) == sorted(names)
    other = make(kind, infer_tol=1e-3, infer_max_iter=7, n_threads=1, method="plefka12")
    assert other.set_params(**params) is other
    params_equal(other.get_params(), params)
    for k, v in params.items():
        assert other.get_params()[k] is v, k   # set_params stores the very objects
    assert model.set_params(infer_tol=2e-5).get_params()["infer_tol"] == 2e-5
    with pytest.raises(ValueError, match="no_such_parameter"):
        model.set_params(no_such_parameter=1)


def test_parameters_are_validated_at_first_use_not_in_the_constructor():
    bad = [mf.SigmoidBeliefNet([2, 0, 3]), mf.SigmoidBeliefNet(SIZES, method="newton"),
           mf.BeliefNet(np.full((3, 3), np.nan), np.zeros(3), [2]),
           mf.BeliefNetBatch(np.zeros((2, 3, 3)), np.zeros(3), [2])]
    for model in bad:
        clone(model)          # construction, get_params and clone accept anything
    with pytest.raises(ValueError, match="sizes"):
        bad[0].sample(1)
    with pytest.raises(ValueError, match="method"):
        bad[1].infer(np.zeros((1, 3)))
    with pytest.raises(ValueError, match="W contains NaN"):
        bad[2].infer(np.zeros((1, 1)))
    with pytest.raises(ValueError, match=r"h must have shape \(2, 3\)"):
        bad[3].infer(np.zeros((2, 1)))


@pytest.mark.parametrize("kind", CLASSES)
def test_random_state_defaults_to_none(kind):
    cls = getattr(mf, kind)
    init = inspect.signature(cls.__init__).parameters
    if kind == "BeliefNetBatch":
        # nothing in a batch is random (no fit, no initial draw)
        assert "random_state" not in init
    else:
        assert init["random_state"].default is None
    if hasattr(cls, "sample"):
        assert inspect.signature(cls.sample).parameters["random_state"].default is None
        assert inspect.signature(cls.sample).parameters["n_samples"].default == 1


# ----------------------------------------------------------------------------- fit
FIT_KINDS = [("SigmoidBeliefNet", "gaussian"), ("SigmoidBeliefNet", "sjj"), ("BeliefNet", "sjj")]


@pytest.mark.parametrize("kind, method", FIT_KINDS)
def test_fit_returns_self_with_history(kind, method):
    model = make(kind, method=method, max_iter=3)
    X = data(kind, n=60)
    assert model.fit(X) is model
    assert isinstance(model.history_, np.ndarray) and model.history_.dtype == np.float64
    assert model.n_iter_ == 3 and model.history_.shape == (model.n_iter_,)
    assert np.all(np.isfinite(model.history_)) and np.all(model.history_ <= 0.0)
    # y is accepted and ignored, as in scikit-learn
    again = clone(model).fit(X, None)
    np.testing.assert_array_equal(again.history_, model.history_)


@pytest.mark.parametrize("kind, method", FIT_KINDS)
def test_tol_stops_fit_early_and_warns_when_not_met(kind, method):
    X = data(kind, n=60)
    loose = make(kind, method=method, max_iter=20, tol=1.0)
    with warnings.catch_warnings():
        warnings.simplefilter("error", mf.ConvergenceWarning)
        loose.fit(X)
    assert loose.n_iter_ < 20
    assert loose.history_.shape == (loose.n_iter_,)
    assert abs(loose.history_[-1] - loose.history_[-2]) < 1.0
    tight = make(kind, method=method, max_iter=2, tol=1e-12)
    with pytest.warns(mf.ConvergenceWarning, match="tol"):
        tight.fit(X)
    assert tight.n_iter_ == 2
    # tol=None: a fixed budget of max_iter epochs, without a warning
    fixed = make(kind, method=method, max_iter=4, tol=None)
    with warnings.catch_warnings():
        warnings.simplefilter("error", mf.ConvergenceWarning)
        fixed.fit(X)
    assert fixed.n_iter_ == 4


@pytest.mark.parametrize("kind, method", FIT_KINDS)
def test_warm_start(kind, method):
    X = data(kind, n=60)
    cold = make(kind, method=method, max_iter=2, random_state=3)
    first = [a.copy() for a in fitted_arrays(cold.fit(X))]
    h1 = cold.history_.copy()
    cold.fit(X)   # warm_start=False: restarts from the same parameters
    for a, b in zip(first, fitted_arrays(cold)):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(cold.history_, h1)
    warm = make(kind, method=method, max_iter=2, random_state=3, warm_start=True)
    warm.fit(X)
    # the first fit starts from the same parameters (its first epoch is the same)
    assert warm.history_[0] == h1[0]
    after_first = [a.copy() for a in fitted_arrays(warm)]
    warm.fit(X)   # continues from the fitted parameters
    assert any(not np.array_equal(a, b) for a, b in zip(after_first, fitted_arrays(warm)))
    assert any(not np.array_equal(a, b) for a, b in zip(first, fitted_arrays(warm)))
    assert not np.array_equal(warm.history_, h1)
    assert warm.history_[0] > h1[0]


# ----------------------------------------------------------------------------- score, infer
@pytest.mark.parametrize("kind", CLASSES)
def test_score_is_the_mean_of_score_samples(kind):
    model = make(kind)
    X = data(kind)
    s = model.score_samples(X)
    assert s.shape == np.shape(model.infer(X).bound)
    assert model.score(X) == float(np.mean(s))
    assert isinstance(model.score(X), float)
    np.testing.assert_array_equal(s, model.infer(X).bound)


@pytest.mark.parametrize("kind", CLASSES)
@pytest.mark.parametrize("method", ALL_METHODS)
def test_mf_infer_is_model_infer(kind, method):
    model = make(kind)
    X = data(kind)
    if kind != "SigmoidBeliefNet" and method == "gaussian":
        # the Gaussian bound is for layered nets: both refuse it alike
        with pytest.raises(ValueError, match=f"'method' parameter of {kind} must be a str among"):
            mf.infer(model, X, method=method)
        with pytest.raises(ValueError, match=f"'method' parameter of {kind} must be a str among"):
            model.infer(X, method=method)
        return
    assert_results_identical(mf.infer(model, X, method=method), model.infer(X, method=method))
    kw = dict(method=method, tol=1e-8, max_iter=50, n_threads=1)
    assert_results_identical(mf.infer(model, X, **kw), model.infer(X, **kw))


@pytest.mark.parametrize("kind", CLASSES)
def test_unconverged_infer_warns_with_the_count(kind):
    model = hard(kind)
    X = hard_data(kind)
    with pytest.warns(mf.ConvergenceWarning) as record:
        r = model.infer(X, max_iter=1)
    bad = int(np.count_nonzero(~r.converged))
    assert bad > 0
    messages = [str(w.message) for w in record if issubclass(w.category, mf.ConvergenceWarning)]
    assert len(messages) == 1
    m = re.search(r"(\d+) of (\d+) solves did not converge", messages[0])
    assert m is not None, messages[0]
    assert (int(m.group(1)), int(m.group(2))) == (bad, r.converged.size)
    assert "max_iter" in messages[0]   # and says what to try
    # a solve that converges does not warn
    with warnings.catch_warnings():
        warnings.simplefilter("error", mf.ConvergenceWarning)
        make(kind).infer(data(kind))


@pytest.mark.parametrize("kind", CLASSES)
def test_plefka_objective_above_zero_warns(kind):
    model = hard(kind)
    X = hard_data(kind)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", mf.ConvergenceWarning)
        with pytest.warns(RuntimeWarning, match="above 0") as record:
            r = model.infer(X, method="plefka22")
    above = int(np.count_nonzero(~(r.bound <= 0.0)))
    assert above > 0
    msg = [str(w.message) for w in record if w.category is RuntimeWarning][0]
    assert f"{above} of {r.bound.size} patterns" in msg
    # a Plefka objective within range does not warn that it is above 0
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        make(kind).infer(data(kind), method="plefka12")
    assert not [w for w in record if "above 0" in str(w.message)]


@pytest.mark.parametrize("kind", ["BeliefNet", "BeliefNetBatch", "SigmoidBeliefNet"])
def test_plefka_below_the_certified_bound_warns_and_is_not_converged(kind):
    """-G below the strict bound of the same pattern (a certified lower bound on ln P(x))
    contradicts it: the call warns with the numbers and the method to use, and ``converged``
    is False exactly there."""
    model, X = make(kind), data(kind)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        r = model.infer(X, method="plefka12")
    below = r.bound < r.certificate - 1e-9 * np.maximum(1.0, np.abs(r.certificate))
    msg = [str(w.message) for w in record if "certified lower bound" in str(w.message)]
    if kind == "SigmoidBeliefNet":       # this layered net's -G stays above its certificate
        assert not below.any() and not msg
    else:
        assert below.any(), "this net's Plefka answer should contradict its certificate"
        assert len(msg) == 1 and f"{int(below.sum())} of {below.size} patterns" in msg[0]
        assert "method='sjj'" in msg[0]
        assert not np.any(r.converged[below])
    exact = model.exact_log_likelihood(X)          # the certificate is a true lower bound
    assert np.all(r.certificate <= exact + 1e-9 * np.maximum(1.0, np.abs(exact)))


# ----------------------------------------------------------------------------- persistence
@pytest.mark.parametrize("kind", CLASSES)
def test_save_load_round_trip(kind, tmp_path):
    model = make(kind)
    X = data(kind, n=40)
    if hasattr(model, "fit"):
        model.set_params(max_iter=2).fit(X)
    path = model.save(tmp_path / "model")
    assert str(path).endswith(".npz")
    loaded = mf.load(path)
    assert type(loaded) is type(model)
    params_equal(loaded.get_params(), model.get_params())
    np.testing.assert_array_equal(loaded.score_samples(X), model.score_samples(X))
    for a, b in zip(fitted_arrays(loaded), fitted_arrays(model)):
        np.testing.assert_array_equal(a, b)
    if hasattr(model, "fit"):
        np.testing.assert_array_equal(loaded.history_, model.history_)
        assert loaded.n_iter_ == model.n_iter_
    assert_results_identical(loaded.infer(X, method="plefka12"), model.infer(X, method="plefka12"))


def test_load_refuses_a_newer_format(tmp_path):
    path = make("SigmoidBeliefNet").fit(data("SigmoidBeliefNet")).save(tmp_path / "net.npz")
    with np.load(path) as z:
        arrays = {k: z[k] for k in z.files}
    header = json.loads(str(arrays["_header"]))
    assert header["format_version"] == 1
    header["format_version"] = 999
    arrays["_header"] = np.array(json.dumps(header))
    newer = tmp_path / "newer.npz"
    np.savez(newer, **arrays)
    with pytest.raises(ValueError, match="999"):
        mf.load(newer)
    # the unedited file still loads
    assert isinstance(mf.load(path), mf.SigmoidBeliefNet)


@pytest.mark.parametrize("kind, method", FIT_KINDS)
def test_pickle_size_does_not_grow_with_the_training_set(kind, method):
    sizes = []
    for n in (100, 2000):
        model = make(kind, method=method, max_iter=1).fit(data(kind, n=n))
        blob = pickle.dumps(model)
        sizes.append(len(blob))
        np.testing.assert_array_equal(pickle.loads(blob).score_samples(data(kind)),
                                      model.score_samples(data(kind)))
    assert sizes[0] == sizes[1]


# ----------------------------------------------------------------------------- one training
def test_layered_sjj_and_its_dag_train_identically():
    X = data("SigmoidBeliefNet", n=120)
    for params in (dict(), dict(max_iter=3, learning_rate=0.3, batch_size=20, infer_tol=1e-5)):
        net = make("SigmoidBeliefNet", method="sjj", **params)
        dag = net.to_dag()
        shared = set(net.get_params()) & set(dag.get_params()) - {"warm_start", "callback"}
        params_equal({k: net.get_params()[k] for k in shared},
                     {k: dag.get_params()[k] for k in shared})
        net.fit(X)
        dag.fit(X)
        assert net.n_iter_ == dag.n_iter_
        np.testing.assert_allclose(net.history_, dag.history_, rtol=0, atol=1e-12)
        off = np.cumsum([0] + SIZES)
        for l, w in enumerate(net.weights_):
            np.testing.assert_allclose(w, dag.W_[off[l + 1]:off[l + 2], off[l]:off[l + 1]],
                                       rtol=0, atol=1e-12)
        np.testing.assert_allclose(np.concatenate(net.biases_), dag.h_, rtol=0, atol=1e-12)


# ----------------------------------------------------------------------------- edited parameters
@pytest.fixture
def no_kernel(monkeypatch):
    """Replace every compiled entry point of the belief nets by a trap: a test using this
    fixture fails (AssertionError) if a call reaches compiled code."""
    calls = []

    def trap(*args, **kwargs):
        calls.append(1)
        raise AssertionError("a compiled kernel was called with unchecked parameters")

    for module, name in ((_gaussian, "run"), (_gaussian, "fit_epoch"), (sjj, "solve"),
                         (plefka, "solve")):
        monkeypatch.setattr(module, name, trap)
    return calls


def edited_layered(edit):
    net = make("SigmoidBeliefNet", warm_start=True)
    net.sample(1)            # draws the parameters
    edit(net)
    return net


LAYERED_EDITS = {
    "weights_[0] shape": (lambda n: n.weights_.__setitem__(0, np.zeros((2, 2))), r"weights_\[0\]"),
    "weights_[1] NaN": (lambda n: n.weights_[1].__setitem__((0, 0), np.nan), r"weights_\[1\]"),
    "biases_[2] inf": (lambda n: n.biases_[2].__setitem__(1, np.inf), r"biases_\[2\]"),
    "biases_[1] 2-D": (lambda n: n.biases_.__setitem__(1, np.zeros((3, 1))), r"biases_\[1\]"),
    "weights_ list too short": (lambda n: setattr(n, "weights_", n.weights_[:1]), r"weights_"),
}


@pytest.mark.parametrize("edit", list(LAYERED_EDITS))
@pytest.mark.parametrize("call", ["gaussian", "sjj", "plefka12", "fit", "fit-sjj"])
def test_edited_layered_parameters_are_refused_before_any_kernel(no_kernel, edit, call):
    change, match = LAYERED_EDITS[edit]
    net = edited_layered(change)
    X = data("SigmoidBeliefNet")
    with pytest.raises(ValueError, match=match):
        if call == "fit":
            net.fit(X)
        elif call == "fit-sjj":
            net.set_params(method="sjj").fit(X)
        else:
            net.infer(X, method=call)
    assert no_kernel == []


def test_wider_bias_vector_is_named(no_kernel):
    net = edited_layered(lambda n: n.biases_.__setitem__(1, np.zeros(5)))
    with pytest.raises(ValueError, match=r"biases_\[1\]"):
        net.infer(data("SigmoidBeliefNet"))
    assert no_kernel == []


def dag_edits(n_units, batch):
    lead = (3,) if batch else ()
    return {
        "h_ wider": (lambda m: setattr(m, "h_", np.zeros(lead + (n_units + 3,))), "h_"),
        "W_ wider": (lambda m: setattr(m, "W_", np.zeros(lead + (n_units + 2, n_units + 2))), "W_"),
        "W_ NaN": (lambda m: setattr(m, "W_", np.where(np.tril(np.ones((n_units,) * 2), -1) > 0,
                                                         np.nan, 0.0) * np.ones(lead + (1, 1))),
                   "W_"),
        "h_ NaN": (lambda m: setattr(m, "h_", np.full(lead + (n_units,), np.nan)), "h_"),
    }


@pytest.mark.parametrize("kind", ["BeliefNet", "BeliefNetBatch"])
@pytest.mark.parametrize("edit", ["h_ wider", "W_ wider", "W_ NaN", "h_ NaN"])
@pytest.mark.parametrize("method", ["sjj", "plefka12"])
def test_edited_dag_parameters_are_refused_before_any_kernel(no_kernel, kind, edit, method):
    model = make(kind, warm_start=True) if kind == "BeliefNet" else make(kind)
    X = data(kind)
    assert model.n_units == 6   # first use: copies W and h into W_ and h_
    change, _ = dag_edits(model.n_units, kind == "BeliefNetBatch")[edit]
    change(model)
    with pytest.raises(ValueError):
        model.infer(X, method=method)
    if kind == "BeliefNet":
        with pytest.raises(ValueError):
            model.fit(X)
    assert no_kernel == []


@pytest.mark.parametrize("kind", ["BeliefNet", "BeliefNetBatch"])
def test_edited_dag_parameters_are_named(kind):
    for edit in ("h_ wider", "W_ NaN", "h_ NaN"):
        model = make(kind)
        model.n_units
        change, name = dag_edits(model.n_units, kind == "BeliefNetBatch")[edit]
        change(model)
        with pytest.raises(ValueError, match=rf"\b{name}\b"):
            model.infer(data(kind))


@pytest.mark.parametrize("kind", ["BeliefNet", "BeliefNetBatch"])
def test_fitted_parameters_do_not_alias_the_constructor_arguments(kind):
    model = make(kind)
    W0, h0 = model.W.copy(), model.h.copy()
    model.n_units
    model.W_[..., 4, 1] = 0.0
    model.h_[..., 0] = 0.5
    np.testing.assert_array_equal(model.W, W0)
    np.testing.assert_array_equal(model.h, h0)


# ----------------------------------------------------------------------------- fit callbacks
CALLBACK_SCRIPT = textwrap.dedent("""
    import numpy as np
    import mfengine as mf

    kind, method = {kind!r}, {method!r}
    if kind == "SigmoidBeliefNet":
        def callback(epoch, net, value):
            net.weights_[1] = np.zeros((9, 9))
        net = mf.SigmoidBeliefNet([2, 3, 6], method=method, max_iter=3, progress=False,
                                  random_state=0, callback=callback)
        X = mf.SigmoidBeliefNet([2, 3, 6], random_state=1).sample(50, random_state=0)
    else:
        def callback(epoch, net, value):
            net.W_ = np.zeros((9, 9))
        W = np.tril(np.random.default_rng(0).uniform(0.05, 1.0, (6, 6)), -1)
        net = mf.BeliefNet(W, np.full(6, 0.1), [3, 4, 5], "noisy_or", method=method,
                           max_iter=3, progress=False, random_state=0, callback=callback)
        X = net.sample(50, random_state=0)
    try:
        net.fit(X)
    except ValueError as exc:
        print("ValueError:", exc)
    else:
        print("fit returned")
""")


def run_callback_child(kind, method):
    code = CALLBACK_SCRIPT.format(kind=kind, method=method)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300)


def test_callback_replacing_a_weight_makes_fit_raise():
    child = run_callback_child("SigmoidBeliefNet", "gaussian")
    assert child.returncode == 0, child.stderr
    assert "ValueError: weights_[1] has shape (9, 9), expected (6, 3)" in child.stdout


@pytest.mark.parametrize("kind", ["SigmoidBeliefNet", "BeliefNet"])
def test_callback_replacing_a_weight_makes_dag_fit_raise(kind):
    child = run_callback_child(kind, "sjj")
    assert child.returncode == 0, child.stderr   # never a crash
    assert "ValueError: " in child.stdout and ("weights_" in child.stdout or "W_" in child.stdout)


# ----------------------------------------------------------------------------- 0 patterns
def empty(kind):
    return data(kind)[..., :0, :]


@pytest.mark.parametrize("kind, method", [
    ("SigmoidBeliefNet", "gaussian"),
    *[(k, m) for k in CLASSES for m in DAG_METHODS],
])
def test_zero_patterns_give_empty_results(kind, method):
    model = make(kind, method=method)
    X = empty(kind)
    r = model.infer(X)
    lead = X.shape[:-1]
    assert r.bound.shape == lead and r.converged.shape == lead and r.n_iter.shape == lead
    assert r.bound.dtype == np.float64
    if kind == "SigmoidBeliefNet":
        assert [m.shape for m in r.mu] == [(0, n) for n in SIZES]
    else:
        assert r.mu.shape == lead + (model.n_units,)
    np.testing.assert_array_equal(model.score_samples(X), np.zeros(lead))
    assert model.score_samples(X).shape == lead
    assert_results_identical(mf.infer(model, X), r)
    with pytest.raises(ValueError, match="no patterns"):
        model.score(X)


@pytest.mark.parametrize("kind", CLASSES)
def test_zero_patterns_exact_and_sample(kind):
    model = make(kind)
    X = empty(kind)
    assert model.exact_log_likelihood(X).shape == X.shape[:-1]
    if hasattr(model, "sample"):
        # one (n_samples, n_visible) draw per net for a batch
        lead = (model.n_nets,) if kind == "BeliefNetBatch" else ()
        assert model.sample(0).shape == lead + (0, 6 if kind == "SigmoidBeliefNet" else 3)


# ----------------------------------------------------------------------------- one surface
VERBS = ["infer", "score_samples", "score", "save", "get_params", "set_params", "fit", "sample",
         "exact_log_likelihood"]


def _names(cls, verb):
    params = inspect.signature(getattr(cls, verb)).parameters.values()
    return [(p.name, p.kind, p.default) for p in params]


@pytest.mark.parametrize("verb", [
    v for v in VERBS])
def test_same_verbs_and_argument_names_in_every_class(verb):
    # a batch of nets is not fitted (fit does not apply); every other verb is shared
    classes = [getattr(mf, k) for k in CLASSES]
    have = [cls for cls in classes if hasattr(cls, verb)]
    expected = classes[:2] if verb == "fit" else classes
    assert have == expected, f"{verb}: only in {[c.__name__ for c in have]}"
    first = _names(have[0], verb)
    for cls in have[1:]:
        assert _names(cls, verb) == first, f"{verb}: {cls.__name__} differs from {have[0].__name__}"


def test_shared_hyperparameters_have_the_same_names_and_defaults():
    sig = {k: inspect.signature(getattr(mf, k).__init__).parameters for k in CLASSES}
    for name in ("method", "infer_tol", "infer_max_iter", "n_threads", "progress"):
        assert sig["BeliefNetBatch"][name].default == sig["BeliefNet"][name].default
    for name in ("learning_rate", "max_iter", "batch_size", "tol", "warm_start", "infer_tol",
                 "infer_max_iter", "n_threads", "random_state", "progress", "callback"):
        assert name in sig["SigmoidBeliefNet"] and name in sig["BeliefNet"], name
        assert sig["SigmoidBeliefNet"][name].kind is inspect.Parameter.KEYWORD_ONLY
        assert sig["BeliefNet"][name].kind is inspect.Parameter.KEYWORD_ONLY
    for name in ("tol", "warm_start", "infer_tol", "infer_max_iter", "n_threads", "random_state",
                 "progress", "callback", "learning_rate"):
        assert sig["SigmoidBeliefNet"][name].default == sig["BeliefNet"][name].default, name
    assert sig["SigmoidBeliefNet"]["tol"].default is None
    assert sig["SigmoidBeliefNet"]["warm_start"].default is False


# ----------------------------------------------------------------------------- imputation
@pytest.mark.parametrize("kind, method", [("SigmoidBeliefNet", "gaussian"),
                                          ("SigmoidBeliefNet", "sjj"), ("BeliefNet", "sjj")])
def test_impute_matches_the_exact_conditional(kind, method):
    # one missing entry per pattern: the exact P(x_j = 1 | the other entries) by enumeration
    net = mf.SigmoidBeliefNet([3, 6, 10], random_state=0, progress=False)
    model = net if kind == "SigmoidBeliefNet" else net.to_dag()
    X = net.sample(300, random_state=1)
    rows = np.arange(300)
    j = np.random.default_rng(2).integers(0, 10, 300)
    miss = np.zeros(X.shape, dtype=bool)
    miss[rows, j] = True
    X1 = X.copy()
    X1[rows, j] = 1.0
    exact = np.exp(model.exact_log_likelihood(X1) - model.exact_log_likelihood(X, missing=miss))
    Xn = np.where(miss, np.nan, X)
    filled = model.impute(Xn, miss, method=method)
    np.testing.assert_array_equal(filled[~miss], X[~miss])       # observed entries untouched
    err = np.abs(filled[miss] - exact)
    assert err.mean() < 0.01 and err.max() < 0.05, (err.mean(), err.max())
    # and far better than guessing the true value's complement
    assert err.mean() < 0.1 * np.abs(X[miss] - exact).mean()


def test_impute_needs_a_mask():
    net = mf.SigmoidBeliefNet([2, 4], random_state=0)
    with pytest.raises(ValueError, match="missing"):
        net.impute(net.sample(3, random_state=0), None)


# ----------------------------------------------------------------------------- sparse weights
@pytest.mark.filterwarnings("ignore::mfengine.ConvergenceWarning")  # plefka11 on a few cases
def test_sparse_weights_give_the_dense_answers():
    import scipy.sparse

    net = mf.datasets.make_diagnosis_net(12, 30, 3, random_state=0)
    assert scipy.sparse.issparse(net.W) and net.n_weights == 90
    dense = mf.BeliefNet(net.W.toarray(), net.h, net.visible, "noisy_or", progress=False)
    net.set_params(progress=False)
    X = dense.sample(40, random_state=1)
    np.testing.assert_array_equal(net.sample(40, random_state=1), X)
    for method in ("sjj", "plefka11"):
        np.testing.assert_allclose(net.infer(X, method=method).bound,
                                   dense.infer(X, method=method).bound, rtol=0, atol=1e-12)
    np.testing.assert_allclose(net.exact_log_likelihood(X[:, :], max_hidden=12),
                               dense.exact_log_likelihood(X, max_hidden=12), rtol=1e-12)
    net.set_params(max_iter=2, batch_size=20)
    dense.set_params(max_iter=2, batch_size=20)
    net.set_params(random_state=0).fit(X)
    dense.set_params(random_state=0).fit(X)
    assert scipy.sparse.issparse(net.W_)
    np.testing.assert_allclose(net.W_.toarray(), dense.W_, atol=1e-12)
    np.testing.assert_allclose(net.history_, dense.history_, atol=1e-12)
    path = net.save(os.path.join(tempfile.mkdtemp(), "sparse"))
    np.testing.assert_array_equal(mf.load(path).score_samples(X), net.score_samples(X))


def test_sparse_net_refuses_upper_triangular_weights():
    import scipy.sparse

    W = scipy.sparse.csr_matrix(([0.5], ([0], [1])), shape=(3, 3))
    with pytest.raises(ValueError, match="strictly lower triangular"):
        mf.BeliefNet(W, np.zeros(3), [2]).sample(1)


# ----------------------------------------------------------------------------- posterior samples
def test_posterior_samples_follow_the_mean_field_posterior():
    net = mf.SigmoidBeliefNet([3, 6, 10], random_state=0, progress=False)
    X = net.sample(5, random_state=1)
    r = net.infer(X)
    layers = net.sample_posterior(X, n_samples=4000, random_state=2)
    assert [a.shape for a in layers] == [(4000, 5, n) for n in (3, 6, 10)]
    np.testing.assert_array_equal(layers[-1], np.broadcast_to(X, layers[-1].shape))
    for a, m in zip(layers[:-1], r.mu[:-1]):
        se = np.sqrt(m * (1 - m) / 4000) + 1e-12
        assert np.all(np.abs(a.mean(axis=0) - m) < 5 * se + 1e-9)
    again = net.sample_posterior(X, n_samples=3, random_state=2)
    np.testing.assert_array_equal(again[0], net.sample_posterior(X, 3, random_state=2)[0])

    dag = net.to_dag().set_params(progress=False)
    S = dag.sample_posterior(X, n_samples=2000, random_state=3)
    mu = dag.infer(X).mu
    assert S.shape == (2000, 5, 19)
    np.testing.assert_array_equal(S[:, :, dag.visible_], np.broadcast_to(X, (2000, 5, 10)))
    se = np.sqrt(mu * (1 - mu) / 2000) + 1e-12
    assert np.all(np.abs(S.mean(axis=0) - mu) < 5 * se + 1e-9)

    g = mf.NLGBN([2, 5], units=["linear", "linear"], random_state=0, progress=False)
    Xg = g.sample(4, random_state=1)
    rg = g.infer(Xg)
    draws = g.sample_posterior(Xg, n_samples=20000, random_state=4)
    assert [d.shape for d in draws] == [(20000, 4, 2), (20000, 4, 5)]
    np.testing.assert_allclose(draws[0].mean(axis=0), rg.mu[0], atol=6 * rg.sigma[0].max() / np.sqrt(20000))
    np.testing.assert_allclose(draws[0].std(axis=0), rg.sigma[0], rtol=0.03)
    np.testing.assert_array_equal(draws[1], np.broadcast_to(Xg, draws[1].shape))
    with pytest.raises(ValueError, match="n_samples"):
        g.sample_posterior(Xg, n_samples=-1)


def test_a_bias_vector_of_the_wrong_length_is_blamed_not_the_weights():
    net = mf.SigmoidBeliefNet([2, 3, 2], random_state=0)
    X = np.zeros((2, 2))
    biases = list(net.biases)
    biases[1] = np.zeros(2)
    with pytest.raises(ValueError, match=r"biases_\[1\] has shape \(2,\), expected \(3,\)"):
        mf.infer((net.weights_, biases), X)
    with pytest.raises(ValueError, match=r"biases_\[1\]"):
        mf.SigmoidBeliefNet.from_params(net.weights_, biases)
    weights = list(net.weights_)
    weights[0] = np.zeros((2, 2))
    with pytest.raises(ValueError, match=r"weights_\[0\] has shape \(2, 2\), expected \(3, 2\)"):
        mf.infer((weights, net.biases_), X)
