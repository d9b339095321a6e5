"""The DAG kernels' entry points (sjj.solve / evaluate / gradient, plefka.solve / objective /
gradient) validate everything they read before any compiled code runs, and the compiled
entry points check sizes and indices themselves (MF_EBADARG) instead of trusting the caller."""
import numpy as np
import pytest
import scipy.sparse as sp

import mfengine as mf
from mfengine.sbn import _plefka, _sjj, plefka, sjj
from mfengine.sbn._solve import inner_tol_for
from mfengine.sbn.dag import DagStructure


@pytest.fixture
def case():
    rng = np.random.default_rng(0)
    W = np.tril(rng.normal(size=(4, 4)), -1)
    s = DagStructure(W != 0)
    clamp = np.full((3, 4), np.nan)
    clamp[:, 2:] = [[0, 1], [1, 1], [0, 0]]
    mu = np.full((3, 4), 0.5)
    return dict(s=s, w=s.pack(W)[None], h=np.zeros((1, 4)), net_of=np.zeros(3, dtype=np.intp),
                clamp=clamp, mu=mu, xi=np.full((3, 4), 0.5))


def _entries(c):
    """Every entry point, as a function of the (possibly edited) arguments."""
    return {
        "sjj.solve": lambda a: sjj.solve(a["s"], a["w"], a["h"], a["net_of"], a["clamp"]),
        "sjj.evaluate": lambda a: sjj.evaluate(a["s"], a["w"], a["h"], a["net_of"], a["clamp"],
                                               a["mu"], a["xi"]),
        "sjj.gradient": lambda a: sjj.gradient(a["s"], a["w"], a["h"], a["net_of"], a["clamp"],
                                               a["mu"], a["xi"]),
        "plefka.solve": lambda a: plefka.solve(a["s"], a["w"], a["h"], a["net_of"], a["clamp"],
                                               12, "sigmoid"),
        "plefka.objective": lambda a: plefka.objective(a["s"], a["w"], a["h"], a["net_of"],
                                                       a["clamp"], a["mu"], 12, "sigmoid"),
        "plefka.gradient": lambda a: plefka.gradient(a["s"], a["w"], a["h"], a["net_of"],
                                                     a["clamp"], a["mu"], 12, "sigmoid"),
    }


ENTRIES = ["sjj.solve", "sjj.evaluate", "sjj.gradient", "plefka.solve", "plefka.objective",
           "plefka.gradient"]


@pytest.mark.parametrize("entry", ENTRIES)
@pytest.mark.parametrize("array", ["par_ptr", "par_idx", "ch_ptr", "ch_idx", "ch_w"])
@pytest.mark.parametrize("value", [-1, 100, 2**62, 5])
def test_corrupted_structure_is_refused_by_name(case, entry, array, value):
    """A structure whose index arrays were edited (plefka died with SIGSEGV on
    par_ptr[-1] = 2**62 and answered for another net with par_ptr[-1] = 5)."""
    s = case["s"]
    arr = getattr(s, array).copy()
    if arr[-1] == value:            # not an edit: the structure is still valid
        _entries(case)[entry](case)
        return
    arr[-1] = value
    setattr(s, array, arr)
    with pytest.raises(ValueError, match="structure"):
        _entries(case)[entry](case)


@pytest.mark.parametrize("entry", ENTRIES)
def test_structure_of_the_wrong_kind_is_refused_by_name(case, entry):
    f = _entries(case)[entry]
    s = case["s"]
    s.par_idx = s.par_idx.astype(float)
    with pytest.raises(TypeError, match="structure.par_idx"):
        f(case)
    s.par_idx = s.par_idx.astype(np.intp)
    s.n_units = 3
    with pytest.raises(ValueError, match="structure.n_units"):
        f(case)
    s.n_units = 4
    s.ch_idx = s.ch_idx[:-1]
    with pytest.raises(ValueError, match="child lists"):
        f(case)
    case["s"] = object()
    with pytest.raises(TypeError, match="structure must be a DagStructure"):
        f(case)


@pytest.mark.parametrize("entry", ENTRIES)
def test_arrays_inconsistent_with_the_structure_are_refused_by_name(case, entry):
    f = _entries(case)[entry]
    bad = {
        "w": [np.zeros((1, case["w"].shape[1] + 1)), np.zeros((1, case["w"].shape[1] - 1)),
              np.full_like(case["w"], np.nan), np.full_like(case["w"], np.inf),
              case["w"].astype(str), case["w"][0]],
        "h": [np.zeros((1, 5)), np.zeros((2, 4)), np.full((1, 4), np.nan)],
        "net_of": [np.ones(3, dtype=np.intp), np.full(3, -1), np.zeros(3), np.zeros(2, np.intp),
                   np.array([0, 0, 2**62])],
        "clamp": [np.full((3, 4), 0.5), np.full((3, 4), np.inf), np.zeros((3, 5))],
    }
    for name, values in bad.items():
        for v in values:
            args = dict(case, **{name: v})
            with pytest.raises((ValueError, TypeError), match=name):
                f(args)


def test_a_batch_whose_h_was_replaced_by_a_wider_array_is_refused():
    """The issue's out-of-bounds read: the unit count was taken from h.shape[1]."""
    rng = np.random.default_rng(1)
    W = np.tril(rng.normal(size=(3, 4, 4)), -1)
    s = DagStructure(np.tril(np.ones((4, 4), dtype=bool), -1))
    clamp = np.full((3, 4), np.nan)
    clamp[:, 3] = 1.0
    with pytest.raises(ValueError, match="h must have 4 columns"):
        sjj.solve(s, s.pack(W), np.zeros((3, 40)), np.arange(3), clamp)
    with pytest.raises(ValueError, match="w must have 6 columns"):
        sjj.solve(s, s.pack(W)[:, :5], np.zeros((3, 4)), np.arange(3), clamp)
    batch = mf.BeliefNetBatch(W, np.zeros((3, 4)), [3])
    mf.infer(batch, np.ones((3, 1)), method="sjj")
    batch.h_ = np.zeros((3, 40))
    with pytest.raises(ValueError, match="h_"):
        mf.infer(batch, np.ones((3, 1)), method="sjj")


def test_options_are_checked_by_name(case):
    a = [case[k] for k in ("s", "w", "h", "net_of", "clamp")]
    for kw, match in [({"tol": -1.0}, "tol"), ({"tol": np.nan}, "tol"), ({"tol": "1"}, "tol"),
                      ({"inner_tol": np.inf}, "inner_tol"), ({"max_sweeps": -1}, "max_sweeps"),
                      ({"max_sweeps": True}, "max_sweeps"), ({"max_sweeps": 2**63}, "max_sweeps"),
                      ({"max_sweeps": 1.5}, "max_sweeps"), ({"n_threads": 0}, "n_threads"),
                      ({"activation": "relu"}, "activation"),
                      ({"init_mu": np.full((3, 4), 2.0)}, "init_mu"),
                      ({"init_mu": np.full((3, 4), np.nan)}, "init_mu"),
                      ({"init_mu": np.full((2, 4), 0.5)}, "init_mu"),
                      ({"init_xi": np.full((3, 4), -0.5)}, "init_xi"),
                      ({"init_xi": np.full((3, 3), 0.5)}, "init_xi")]:
        with pytest.raises((ValueError, TypeError), match=match):
            sjj.solve(*a, **kw)
    for kw, match in [({"tol": 0.0}, "tol"), ({"max_iter": -1}, "max_iter"),
                      ({"n_threads": "2"}, "n_threads"), ({"accelerate": "yes"}, "accelerate"),
                      ({"init_u": np.full((3, 4), -1.0)}, "init_u")]:
        with pytest.raises((ValueError, TypeError), match=match):
            plefka.solve(*a, 12, "sigmoid", **kw)
    for order in (13, 12.0, True, "12"):
        with pytest.raises(ValueError, match="order"):
            plefka.solve(*a, order, "sigmoid")
    with pytest.raises(ValueError, match="mu"):
        sjj.evaluate(*a, np.full((3, 4), 1.5), case["xi"])
    with pytest.raises(ValueError, match="xi"):
        sjj.evaluate(*a, case["mu"], np.full((3, 4), 1.5))


def test_n_threads_none_and_huge_are_clamped(case):
    a = [case[k] for k in ("s", "w", "h", "net_of", "clamp")]
    ref = sjj.solve(*a, n_threads=1)[0]
    for n_threads in (None, -1, 2**31, 2**62):
        np.testing.assert_array_equal(sjj.solve(*a, n_threads=n_threads)[0], ref)
        plefka.solve(*a, 12, "sigmoid", n_threads=n_threads)


@pytest.mark.parametrize("activation", ["sigmoid", "noisy_or"])
def test_zero_items_give_empty_answers(case, activation):
    s, w, h = case["s"], np.abs(case["w"]), case["h"] + 0.1
    clamp, net_of = np.zeros((0, 4)), np.zeros(0, dtype=np.intp)
    bound, mu, xi, n_sweeps, conv, hist = sjj.solve(s, w, h, net_of, clamp, record=True,
                                                    activation=activation)
    assert bound.shape == (0,) and mu.shape == (0, 4) and conv.shape == (0,)
    assert hist.shape == (0, 201) and n_sweeps.shape == (0,)
    assert xi.shape == ((0, s.nnz) if activation == "noisy_or" else (0, 4))
    assert sjj.evaluate(s, w, h, net_of, clamp, mu, xi, activation=activation).shape == (0,)
    gw, gh = sjj.gradient(s, w, h, net_of, clamp, mu, xi, activation=activation)
    assert gw.shape == (0, s.nnz) and gh.shape == (0, 4)
    G, u, n_iter, conv = plefka.solve(s, w, h, net_of, clamp, 22, activation)
    assert G.shape == (0,) and u.shape == (0, 4)
    assert plefka.objective(s, w, h, net_of, clamp, u, 12, activation).shape == (0,)
    assert plefka.gradient(s, w, h, net_of, clamp, u, 12, activation)[0].shape == (0, s.nnz)
    # and no net at all when there is no item
    assert sjj.solve(s, w[:0], h[:0], net_of, clamp)[0].shape == (0,)


def test_a_net_without_edges_and_max_sweeps_zero():
    s = DagStructure(np.zeros((3, 3), dtype=bool))
    h = np.array([[0.3, -1.0, 2.0]])
    clamp = np.array([[np.nan, 1.0, 0.0]])
    bound, mu, *_ = sjj.solve(s, np.zeros((1, 0)), h, np.zeros(1, np.intp), clamp)
    # a parentless free unit is exact too: its mean is sigmoid(h) and it adds nothing
    expected = -np.logaddexp(0, 1.0) - np.logaddexp(0, 2.0)
    assert bound[0] == pytest.approx(expected, abs=1e-12) and bound[0] <= expected
    b0 = sjj.solve(s, np.zeros((1, 0)), h, np.zeros(1, np.intp), clamp, max_sweeps=0)[0]
    assert np.isfinite(b0[0]) and b0[0] <= bound[0] + 1e-12


def test_read_only_and_non_contiguous_inputs(case):
    a = {k: v for k, v in case.items()}
    ref = sjj.solve(a["s"], a["w"], a["h"], a["net_of"], a["clamp"])[0]
    w = np.asfortranarray(np.repeat(a["w"], 2, axis=0))[::2]
    h = a["h"].copy()
    clamp = np.asfortranarray(a["clamp"])
    for x in (w, h, clamp):
        x.flags.writeable = False
    np.testing.assert_array_equal(sjj.solve(a["s"], w, h, a["net_of"].astype(np.int32),
                                            clamp)[0], ref)


def test_the_compiled_entry_points_check_their_sizes(case):
    """Called directly with inconsistent arrays, the kernels return MF_EBADARG and write
    nothing (the wrappers never let this happen)."""
    s = case["s"]
    arrays = (s.par_ptr, s.par_idx, s.ch_ptr, s.ch_idx, s.ch_w)
    n_items = 3
    mu = np.full((n_items, 4), 0.5)
    xi = np.full((n_items, 4), 0.5)
    bound = np.full(n_items, 7.0)
    out = (np.zeros(n_items, np.intp), np.zeros(n_items, np.uint8), np.zeros(n_items, np.int8))
    for w, h, net_of in [(case["w"], np.zeros((1, 40)), case["net_of"]),
                         (case["w"][:, :2], case["h"], case["net_of"]),
                         (case["w"], case["h"], np.array([0, 0, 5], dtype=np.intp))]:
        rc = _sjj.solve(*arrays, w, h, net_of, case["clamp"], mu, xi, bound, *out,
                        np.empty((0, 0)), 1e-6, 1e-9, 10, 1, False)
        assert rc == _sjj.STATUS_EBADARG and np.all(bound == 7.0)
    bad_ptr = s.par_ptr.copy()
    bad_ptr[-1] = 2**62
    rc = _sjj.evaluate(bad_ptr, *arrays[1:], case["w"], case["h"], case["net_of"], case["clamp"],
                       mu, xi, bound, out[2], False, 1)
    assert rc == _sjj.STATUS_EBADARG and np.all(bound == 7.0)
    G = np.full(n_items, 7.0)
    rc = _plefka.solve(bad_ptr, *arrays[1:], case["w"], case["h"], case["net_of"], case["clamp"],
                       np.zeros((1, 1)), False, 12, 0, 1e-10, 10, G, np.zeros((n_items, 4)),
                       np.zeros(n_items, np.intp), np.zeros(n_items, np.int8),
                       np.zeros(n_items, np.int8), 1)
    assert rc == _plefka.STATUS_EBADARG and np.all(G == 7.0)
    rc = _plefka.evaluate(*arrays, case["w"], case["h"], case["net_of"], case["clamp"],
                          np.zeros((2, 4)), 12, 0, False, G, np.zeros((1, 1)), np.zeros((1, 1)),
                          np.zeros((1, 1)), np.zeros(n_items, np.int8), 1)
    assert rc == _plefka.STATUS_EBADARG and np.all(G == 7.0)


def test_a_structure_with_a_repeated_parent_is_refused():
    """Two edges from one parent to one unit make the factorised average a product over
    edges that is not the average (the bound would not be one): refused by name."""
    s = DagStructure(np.tril(np.ones((3, 3), dtype=bool), -1))
    s.par_idx = np.array([0, 0, 0], dtype=np.intp)        # unit 2's parents: 0, 0
    s.ch_ptr = np.array([0, 3, 3, 3], dtype=np.intp)
    s.ch_idx = np.array([1, 2, 2], dtype=np.intp)
    s.ch_w = np.array([0, 1, 2], dtype=np.intp)
    with pytest.raises(ValueError, match="structure.par_idx"):
        sjj.solve(s, np.ones((1, 3)), np.zeros((1, 3)), [0], [[np.nan, np.nan, 1.0]])


# ---------------------------------------------------------------------------- the C API
def _capi_case(rng, activation, n_items=7):
    n = 9
    mask = np.tril(rng.random((n, n)) < 0.6, -1)
    s = DagStructure(mask)
    W = np.where(mask, rng.uniform(-2, 2, (n, n)), 0.0)
    h = rng.uniform(-1, 1, n)
    if activation == "noisy_or":
        W, h = np.abs(W), np.abs(h) + 0.05
    clamp = np.full((n_items, n), np.nan)
    clamp[:, 5:] = rng.integers(0, 2, (n_items, 4))
    clamp[1, 6] = np.nan                              # a missing visible unit
    return s, s.pack(W), h, clamp


def _capi_call(s, w, h, clamp, activation, init_mu=None, init_xi=None, tol=1e-9, inner_tol=0.0,
               max_sweeps=200, n_threads=1, n_items=None, n_units=None, nnz=None, **over):
    n_items = clamp.shape[0] if n_items is None else n_items
    n = s.n_units if n_units is None else n_units
    nnz_ = s.nnz if nnz is None else nnz
    n_xi = s.nnz if activation == "noisy_or" else s.n_units
    out = dict(bound=np.full(clamp.shape[0], 7.0), mu=np.full(clamp.size, 7.0),
               xi=np.full(clamp.shape[0] * n_xi, 7.0),
               n_sweeps=np.zeros(clamp.shape[0], np.intp),
               converged=np.zeros(clamp.shape[0], np.int8))
    args = dict(par_ptr=s.par_ptr, par_idx=s.par_idx, weights=w, biases=h,
                clamp_buf=clamp.ravel())
    args.update(over)
    rc = _sjj._capi_solve(n, nnz_, args["par_ptr"], args["par_idx"], args["weights"],
                          args["biases"], 1 if activation == "noisy_or" else 0, n_items,
                          args["clamp_buf"], init_mu, init_xi, tol, inner_tol, max_sweeps,
                          n_threads, out["bound"], out["mu"], out["xi"], out["n_sweeps"],
                          out["converged"])
    return rc, out


@pytest.mark.parametrize("activation", ["sigmoid", "noisy_or"])
def test_c_api_gives_the_numbers_of_the_python_api(activation):
    rng = np.random.default_rng(20)
    s, w, h, clamp = _capi_case(rng, activation)
    k = clamp.shape[0]
    for init in (False, True):
        kw, ckw = {}, {}
        if init:
            init_mu = np.where(np.isnan(clamp), rng.random(clamp.shape), 0.3)
            n_xi = s.nnz if activation == "noisy_or" else s.n_units
            init_xi = rng.random((k, n_xi))
            kw = dict(init_mu=init_mu, init_xi=init_xi)
            ckw = dict(init_mu=init_mu.ravel(), init_xi=init_xi.ravel())
        ref = sjj.solve(s, w[None], h[None], np.zeros(k, np.intp), clamp, tol=1e-9,
                        inner_tol=inner_tol_for(1e-9), activation=activation, **kw)
        for n_threads in (1, 2):
            rc, out = _capi_call(s, w, h, clamp, activation, n_threads=n_threads, **ckw)
            assert rc in (_sjj.STATUS_OK, _sjj.STATUS_NOT_CONVERGED)
            assert (rc == _sjj.STATUS_OK) == bool(np.all(ref[4]))
            np.testing.assert_array_equal(out["bound"], ref[0])
            np.testing.assert_array_equal(out["mu"].reshape(k, -1), ref[1])
            np.testing.assert_array_equal(out["xi"].reshape(k, -1), ref[2])
            np.testing.assert_array_equal(out["n_sweeps"], ref[3])
            np.testing.assert_array_equal(out["converged"].astype(bool), ref[4])


def test_c_api_refuses_bad_arguments_and_writes_nothing():
    rng = np.random.default_rng(21)
    s, w, h, clamp = _capi_case(rng, "sigmoid")
    rc, _ = _capi_call(s, w, h, clamp, "sigmoid")
    assert rc == _sjj.STATUS_OK
    pp_dec = s.par_ptr.copy()
    pp_dec[3], pp_dec[4] = pp_dec[4], pp_dec[3] - 1 if pp_dec[3] > 0 else pp_dec[4] + 1
    pi_self = s.par_idx.copy()
    pi_self[-1] = s.n_units - 1                        # a parent that is not below its child
    pi_neg = s.par_idx.copy()
    pi_neg[0] = -1
    clamp_half = clamp.copy()
    clamp_half[0, 8] = 0.5
    bad = [
        dict(n_units=-1), dict(nnz=-1), dict(n_items=-1), dict(nnz=s.nnz + 1),
        dict(par_ptr=np.zeros(0, np.intp)), dict(par_idx=np.zeros(0, np.intp)),
        dict(weights=np.zeros(0)), dict(biases=np.zeros(0)), dict(clamp_buf=np.zeros(0)),
        dict(par_ptr=pp_dec), dict(par_idx=pi_self), dict(par_idx=pi_neg),
        dict(weights=np.where(np.arange(s.nnz) == 2, np.nan, w)),
        dict(weights=np.where(np.arange(s.nnz) == 2, np.inf, w)),
        dict(weights=np.full(s.nnz, 1e307)), dict(biases=np.full(s.n_units, np.nan)),
        dict(clamp_buf=clamp_half.ravel()), dict(tol=-1.0), dict(tol=np.nan),
        dict(inner_tol=np.inf), dict(max_sweeps=-1),
        dict(init_mu=np.full(clamp.size, 1.5)), dict(init_xi=np.full(clamp.size, -0.1)),
    ]
    for over in bad:
        rc, out = _capi_call(s, w, h, clamp, "sigmoid", **over)
        assert rc == _sjj.STATUS_EBADARG, over
        assert np.all(out["bound"] == 7.0) and np.all(out["mu"] == 7.0), over
    # noisy-OR: negative weights, a bias that is not positive
    sn, wn, hn, cn = _capi_case(rng, "noisy_or")
    for over in (dict(weights=-wn), dict(biases=np.where(np.arange(9) == 0, 0.0, hn))):
        rc, out = _capi_call(sn, wn, hn, cn, "noisy_or", **over)
        assert rc == _sjj.STATUS_EBADARG and np.all(out["bound"] == 7.0)
    # sizes whose products overflow
    rc, _ = _capi_call(s, w, h, clamp, "sigmoid", n_items=2**61)
    assert rc == _sjj.STATUS_EOVERFLOW
    # no item: nothing to do
    rc, out = _capi_call(s, w, h, clamp, "sigmoid", n_items=0)
    assert rc == _sjj.STATUS_OK and np.all(out["bound"] == 7.0)


def test_c_api_reports_items_left_unconverged():
    rng = np.random.default_rng(22)
    s, w, h, clamp = _capi_case(rng, "sigmoid")
    rc, out = _capi_call(s, w, h, clamp, "sigmoid", max_sweeps=1, tol=0.0)
    assert rc == _sjj.STATUS_NOT_CONVERGED and np.all(np.isfinite(out["bound"]))


def test_a_built_structure_is_sealed_and_checked_once():
    """The constructors' arrays are read-only and consistent by construction: check_structure
    returns them without a second look; replacing one (or n_units) brings the full check."""
    W = np.tril(np.random.default_rng(0).normal(size=(6, 6)), -1)
    W[3, 1] = 0.0
    for s in (DagStructure(W != 0), DagStructure(sp.csr_matrix(W)),
              DagStructure.layered([2, 3, 4])):
        full = DagStructure.__new__(DagStructure)
        vars(full).update({k: np.array(v) if isinstance(v, np.ndarray) else v
                           for k, v in vars(s).items() if k != "_sealed_as"})
        assert full.sealed() is None and s.sealed() is not None
        for a, b in zip(sjj.check_structure(s), sjj.check_structure(full)):
            np.testing.assert_array_equal(a, b)
        with pytest.raises(ValueError, match="read-only"):
            s.par_idx[0] = 0
        s.par_idx = s.par_idx.copy()
        assert s.sealed() is None
        s.par_idx[-1] = s.n_units
        with pytest.raises(ValueError, match="structure.par_idx"):
            sjj.check_structure(s)
