"""NLGBN with hostile input never crashes, never returns NaN or a falling history, and names
the offending argument (issue 14).

Every group of cases runs in a child interpreter (``python tests/nlgbn/test_nlgbn_safety.py GROUP``)
so that a crash of the compiled code is a failed test, not a dead test run; the child checks
each case against its expectation and prints the failures as JSON.  Expectations:

* ``FINITE``: the call returns; every number in its result is finite (for ``fit``: the history
  is finite and never decreases);
* ``(exception classes, names)``: the call raises one of the classes, with a message that
  contains one of the names (the argument in the words of the public API);
* ``(FINITE, exception classes, names)``: either of the above.
"""
import json
import os
import re
import subprocess
import sys
import warnings

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
FINITE = "finite"
PARAMS = ("weights_", "biases_", "variances_", "units_")


# ------------------------------------------------------------------------------ the child
def _net(**kw):
    import mfengine as mf

    kw = dict(dict(sizes=[1, 4, 12], units=["binary", "rectified", "linear"], max_iter=2,
                   random_state=0, progress=False), **kw)
    return mf.NLGBN(**kw)


def _data(n=30):
    rng = np.random.default_rng(0)
    return rng.normal(size=(n, 12)) + (rng.random((n, 1)) < 0.3) * 2.0


def _fitted():
    g = _net()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        g.fit(_data())
    return g


def _edited(attr, layer, value):
    g = _fitted()
    if layer is None:
        setattr(g, attr, value)
    else:
        getattr(g, attr)[layer] = value
    return g


def _all_finite(out):
    import mfengine as mf

    if isinstance(out, mf.NLGBN):
        h = out.history_
        return bool(np.all(np.isfinite(h)) and np.all(np.diff(h) >= 0)), "history"
    if hasattr(out, "bound"):
        arrays = [out.bound] + list(out.mu) + list(out.sigma)
        return all(bool(np.all(np.isfinite(a))) for a in arrays), "infer result"
    if isinstance(out, list):
        return all(bool(np.all(np.isfinite(a))) for a in out), "list"
    return bool(np.all(np.isfinite(np.asarray(out, dtype=float)))), "array"


def _check(label, fn, expect):
    """Run one case; return None if it met its expectation, else the reason."""
    if expect[0] == FINITE:             # (FINITE, classes, names): either outcome is fine
        reason = _check(label, fn, FINITE)
        return reason if reason is None or "raised" not in reason else _check(label, fn, expect[1:])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            out = fn()
        except Exception as exc:  # noqa: BLE001 - every outcome is classified below
            if expect == FINITE:
                return f"{label}: raised {type(exc).__name__}: {exc}"
            classes, names = expect
            if not isinstance(exc, classes):
                return f"{label}: raised {type(exc).__name__} ({exc}), expected {classes}"
            if not any(n in str(exc) for n in names):
                return f"{label}: message {str(exc)!r} names none of {names}"
            return None
    if expect != FINITE:
        return f"{label}: returned instead of raising {expect[0]}"
    ok, what = _all_finite(out)
    return None if ok else f"{label}: the {what} holds NaN/inf (or a falling history)"


def _operations(g, X):
    H = 5
    return {
        "infer": lambda: g.infer(X),
        "score_samples": lambda: g.score_samples(X),
        "score": lambda: g.score(X),
        "sample": lambda: g.sample(4, random_state=0),
        "sample_all": lambda: g.sample(4, random_state=0, return_all=True),
        "bound_at": lambda: g.bound_at(X, np.zeros((X.shape[0], H)), np.ones((X.shape[0], H))),
        "fit_warm": lambda: g.set_params(warm_start=True).fit(X),
    }


def group_attribute_edits():
    X = _data()
    bad = (ValueError, TypeError)
    edits = {
        "variances_ NaN": (("variances_", 1, np.full(4, np.nan)), (bad, ["variances_[1]"])),
        "variances_ negative": (("variances_", 2, -np.ones(12)), (bad, ["variances_[2]"])),
        "variances_ zero": (("variances_", 0, np.zeros(1)), (bad, ["variances_[0]"])),
        "variances_ subnormal": (("variances_", 2, np.full(12, 1e-320)), (bad, ["variances_[2]"])),
        "variances_ inf": (("variances_", 1, np.full(4, np.inf)), (bad, ["variances_[1]"])),
        "variances_ wrong shape": (("variances_", 1, np.ones(5)), (bad, ["variances_[1]"])),
        "weights_ NaN": (("weights_", 0, np.full((4, 1), np.nan)), (bad, ["weights_[0]"])),
        "weights_ -inf": (("weights_", 1, np.full((12, 4), -np.inf)), (bad, ["weights_[1]"])),
        "weights_ wider": (("weights_", 1, np.ones((12, 9))), (bad, ["weights_[1]"])),
        "weights_ 1-D": (("weights_", 0, np.ones(4)), (bad, ["weights_[0]"])),
        "weights_ strings": (("weights_", 0, np.array([["a"]] * 4)), (bad, ["weights_[0]"])),
        "weights_ object": (("weights_", 0, np.array([[None]] * 4)), (bad, ["weights_[0]"])),
        "biases_ NaN": (("biases_", 2, np.full(12, np.nan)), (bad, ["biases_[2]"])),
        "biases_ longer": (("biases_", 1, np.zeros(7)), (bad, list(PARAMS))),
        "biases_ 2-D": (("biases_", 1, np.zeros((4, 1))), (bad, ["biases_[1]"])),
        "weights_ not a list": (("weights_", None, "abc"), (bad, ["weights_"])),
        "weights_ one short": (("weights_", None, [np.ones((4, 1))]), (bad, ["weights_"])),
        "biases_ one layer": (("biases_", None, [np.zeros(1)]), (bad, ["biases_"])),
        "variances_ array": (("variances_", None, np.ones((3, 4))), (bad, ["variances_"])),
        "units_ unknown type": (("units_", None, (("tanh",), ("rectified",) * 4, ("linear",) * 12)),
                                (bad, ["units_"])),
        "units_ too short": (("units_", None, (("binary",),)), (bad, ["units_"])),
        "units_ visible not linear": (("units_", None, (("binary",), ("rectified",) * 4,
                                                        ("binary",) * 12)), (bad, ["units_"])),
        "units_ None": (("units_", None, None), (bad, ["units_"])),
    }
    failures = []
    for label, (edit, expect) in edits.items():
        for op, fn in _operations(_edited(*edit), X).items():
            failures.append(_check(f"{label} / {op}", fn, expect))
    # extreme but finite values: a finite answer or an error that names the parameters
    extreme = {
        "variances_ 1e300": ("variances_", 2, np.full(12, 1e300)),
        "variances_ 1e-300": ("variances_", 2, np.full(12, 1e-300)),
        "weights_ 1e100": ("weights_", 1, np.full((12, 4), 1e100)),
        "weights_ 1e300": ("weights_", 1, np.full((12, 4), 1e300)),
        "weights_[0] 1e300": ("weights_", 0, np.full((4, 1), 1e300)),
        "biases_ 1e300": ("biases_", 1, np.full(4, 1e300)),
        "biases_ -1e300": ("biases_", 2, np.full(12, -1e300)),
        "biases_ int": ("biases_", 1, np.ones(4, dtype=np.int64)),
        "weights_ float32": ("weights_", 1, np.ones((12, 4), dtype=np.float32)),
        "weights_ Fortran": ("weights_", 1, np.asfortranarray(np.ones((12, 4)))),
    }
    for label, edit in extreme.items():
        for op, fn in _operations(_edited(*edit), X).items():
            reason = _check(f"{label} / {op}", fn, FINITE)
            if reason is not None and "raised ValueError" in reason:
                reason = _check(f"{label} / {op}", fn, ((ValueError,), list(PARAMS)))
            failures.append(reason)
    # an edit between two calls is seen by the second one
    g = _fitted()
    g.score(X)
    g.variances_[2][3] = -1.0
    failures.append(_check("edit after a call", lambda: g.score(X), (bad, ["variances_[2]"])))
    return failures


def group_data():
    import scipy.sparse

    g = _fitted()
    X = _data()
    bad = (ValueError, TypeError)
    Xn = X.copy()
    Xn[3, 4] = np.nan
    Xi = X.copy()
    Xi[0, 0] = np.inf
    cases = {
        "X NaN (missing)": (lambda: g.infer(Xn), FINITE),      # NaN marks a missing entry
        "X NaN fit (missing)": (lambda: g.fit(Xn), FINITE),
        "X inf": (lambda: g.score_samples(Xi), (bad, ["X"])),
        "X wrong columns": (lambda: g.infer(X[:, :5]), (bad, ["X must have 12 columns"])),
        "X 1-D": (lambda: g.score_samples(X[0]), (bad, ["X"])),
        "X 3-D": (lambda: g.score_samples(X[None]), (bad, ["X"])),
        "X no columns": (lambda: g.score_samples(X[:, :0]), (bad, ["X"])),
        "X strings": (lambda: g.score_samples(np.array([["a"] * 12])), (bad, ["X"])),
        "X object strings": (lambda: g.score_samples(np.array([["a"] * 12], dtype=object)), (bad, ["X"])),
        "X complex": (lambda: g.score_samples(X + 1j), (bad, ["X"])),
        "X sparse": (lambda: g.score_samples(scipy.sparse.csr_matrix(X)), (bad, ["X"])),
        "X None": (lambda: g.score_samples(None), (bad, ["X"])),
        "X ragged": (lambda: g.score_samples([[1.0] * 12, [1.0] * 3]), (bad, ["X"])),
        "X empty fit": (lambda: g.fit(X[:0]), ((ValueError,), ["X must hold at least one pattern"])),
        "X empty score": (lambda: g.score(X[:0]), ((ValueError,), ["X must hold at least one pattern"])),
        "X empty infer": (lambda: g.infer(X[:0]), FINITE),
        "X empty sample": (lambda: g.sample(0), FINITE),
        "X 1e300": (lambda: g.infer(X * 1e300), ((ValueError,), ["X"])),
        "X 1e150": (lambda: g.infer(X * 1e150), FINITE),
        "X 1e17 fit": (lambda: _net(max_iter=10).fit(X * 1e17), FINITE),
        "X 1e150 fit": (lambda: _net(max_iter=10).fit(X * 1e150), FINITE),
        "X 1e-150 fit": (lambda: _net(max_iter=10).fit(X * 1e-150), FINITE),
        "X constant fit": (lambda: _net(max_iter=10).fit(np.ones((30, 12))), FINITE),
        "X one row fit": (lambda: _net(max_iter=5).fit(X[:1]), FINITE),
        "mu NaN": (lambda: g.bound_at(X, np.full((30, 5), np.nan), np.ones((30, 5))), (bad, ["mu"])),
        "sigma 0": (lambda: g.bound_at(X, np.zeros((30, 5)), np.zeros((30, 5))), (bad, ["sigma"])),
        "sigma 1e300": (lambda: g.bound_at(X, np.zeros((30, 5)), np.full((30, 5), 1e300)), (bad, ["sigma"])),
        "sigma rows": (lambda: g.bound_at(X, np.zeros((3, 5)), np.ones((3, 5))), (bad, ["mu and sigma"])),
        "sigma cols": (lambda: g.bound_at(X, np.zeros((30, 5)), np.ones((30, 4))), (bad, ["sigma"])),
    }
    failures = [_check(label, fn, expect) for label, (fn, expect) in cases.items()]
    # other layouts and dtypes give the same answer
    ref = g.score_samples(X)
    for label, Y in (("Fortran", np.asfortranarray(X)), ("strided", np.repeat(X, 2, axis=1)[:, ::2]),
                     ("list", X.tolist()), ("read-only", X.copy())):
        if label == "read-only":
            Y.setflags(write=False)
        if not np.array_equal(g.score_samples(Y), ref):
            failures.append(f"X {label}: a different answer")
    return failures


def group_hyperparameters():
    import mfengine as mf

    X = _data()
    g = _fitted()
    bad = (ValueError, TypeError)
    cases = {
        "min_variance 1e300": (lambda: _net(min_variance=1e300, max_iter=5).fit(X), FINITE),
        "min_variance 1e300 warm": (lambda: _fitted().set_params(min_variance=1e300, warm_start=True).fit(X), FINITE),
        "min_variance 1e-300": (lambda: _net(min_variance=1e-300, max_iter=5).fit(X), FINITE),
        "min_variance 1e-320": (lambda: _net(min_variance=1e-320).fit(X), (bad, ["min_variance"])),
        "min_variance NaN": (lambda: _net(min_variance=np.nan).fit(X), (bad, ["min_variance"])),
        "min_variance 0": (lambda: _net(min_variance=0.0).fit(X), (bad, ["min_variance"])),
        "min_variance str": (lambda: _net(min_variance="0.1").fit(X), (bad, ["min_variance"])),
        "sizes NaN": (lambda: mf.NLGBN([np.nan, 3]).sample(), (bad, ["sizes"])),
        "sizes inf": (lambda: mf.NLGBN([np.inf, 3]).sample(), (bad, ["sizes"])),
        "sizes 2.5": (lambda: mf.NLGBN([2.5, 3]).sample(), (bad, ["sizes"])),
        "sizes 2**62": (lambda: mf.NLGBN([2**62, 3]).sample(), (bad, ["sizes"])),
        "sizes 2**31 x2": (lambda: mf.NLGBN([2**31, 2**31]).sample(), (bad, ["sizes"])),
        "sizes 1e5 x2": (lambda: mf.NLGBN([100_000, 100_000]).sample(), ((MemoryError, ValueError), ["sizes"])),
        "sizes 0": (lambda: mf.NLGBN([0, 3]).sample(), (bad, ["sizes"])),
        "sizes -1": (lambda: mf.NLGBN([-1, 3]).sample(), (bad, ["sizes"])),
        "sizes str": (lambda: mf.NLGBN("abc").sample(), (bad, ["sizes"])),
        "sizes one layer": (lambda: mf.NLGBN([3]).sample(), (bad, ["sizes"])),
        "units bad": (lambda: mf.NLGBN([2, 3], units=5).sample(), (bad, ["units"])),
        "units nested int": (lambda: mf.NLGBN([2, 3], units=[5, "linear"]).sample(), (bad, ["units[0]"])),
        "max_iter 2**70": (lambda: _net(max_iter=2**70).fit(X), (bad, ["max_iter"])),
        "max_iter -1": (lambda: _net(max_iter=-1).fit(X), (bad, ["max_iter"])),
        "max_iter 1.5": (lambda: _net(max_iter=1.5).fit(X), (bad, ["max_iter"])),
        "max_iter 0": (lambda: _net(max_iter=0).fit(X), FINITE),
        "tol NaN": (lambda: _net(tol=np.nan).fit(X), (bad, ["tol"])),
        "tol -1": (lambda: _net(tol=-1.0).fit(X), (bad, ["tol"])),
        "infer_max_iter 2**63": (lambda: g.set_params(infer_max_iter=2**63).infer(X), (bad, ["infer_max_iter"])),
        "infer_max_iter 0": (lambda: _net(infer_max_iter=0).fit(X), (bad, ["infer_max_iter"])),
        "infer max_iter 2**62": (lambda: _fitted().infer(X, max_iter=2**62), FINITE),
        "infer max_iter 2**64": (lambda: _fitted().infer(X, max_iter=2**64), (bad, ["max_iter"])),
        "infer max_iter -2**63": (lambda: _fitted().infer(X, max_iter=-2**63), (bad, ["max_iter"])),
        "infer_tol NaN": (lambda: _net(infer_tol=np.nan).fit(X), (bad, ["infer_tol"])),
        "infer_tol str": (lambda: _fitted().set_params(infer_tol="0.1").infer(X), (bad, ["infer_tol"])),
        "infer tol 0": (lambda: _fitted().infer(X, tol=0.0), (bad, ["tol"])),
        "infer tol inf": (lambda: _fitted().infer(X, tol=np.inf), (bad, ["tol"])),
        "n_threads 2**40": (lambda: _fitted().infer(X, n_threads=2**40), FINITE),
        "n_threads 2**70": (lambda: _net(n_threads=2**70).fit(X), FINITE),
        "n_threads -2**63": (lambda: _fitted().infer(X, n_threads=-2**63), FINITE),
        "n_threads 0": (lambda: _fitted().infer(X, n_threads=0), (bad, ["n_threads"])),
        "n_threads 1.5": (lambda: _net(n_threads=1.5).fit(X), (bad, ["n_threads"])),
        "n_threads bound_at": (lambda: _fitted().bound_at(X, np.zeros((30, 5)), np.ones((30, 5)), n_threads=2**63),
                               FINITE),
        "n_samples 2**62": (lambda: g.sample(2**62), ((ValueError, MemoryError), ["n_samples"])),
        "n_samples 2**40": (lambda: g.sample(2**40), ((ValueError, MemoryError), ["n_samples"])),
        "n_samples -1": (lambda: g.sample(-1), (bad, ["n_samples"])),
        "n_samples 2.0": (lambda: g.sample(2.0), (bad, ["n_samples"])),
        "random_state str": (lambda: g.sample(2, random_state="x"), (bad, ["random_state"])),
        "random_state -1": (lambda: g.sample(2, random_state=-1), (bad, ["random_state"])),
        "random_state -1 fit": (lambda: _net(random_state=-1).fit(X), (bad, ["random_state"])),
        "weight_scale 1e300": (lambda: _net(weight_scale=1e300).sample(2), (bad, ["weight_scale"])),
        "weight_scale NaN": (lambda: _net(weight_scale=np.nan).fit(X), (bad, ["weight_scale"])),
        "weight_scale -1": (lambda: _net(weight_scale=-1.0).fit(X), (bad, ["weight_scale"])),
        "weight_scale 1e100 fit": (lambda: _net(weight_scale=1e100, max_iter=5).fit(X),
                                   (FINITE, (ValueError,), ["weight_scale"])),
        "weight_scale 1e30 fit": (lambda: _net(weight_scale=1e30, max_iter=5).fit(X),
                                  (FINITE, (ValueError,), ["weight_scale"])),
        "weight_scale 0 fit": (lambda: _net(weight_scale=0.0, max_iter=5).fit(X), FINITE),
        "warm_start str": (lambda: _net(warm_start="yes").fit(X), (bad, ["warm_start"])),
        "progress 2": (lambda: _net(progress=2).fit(X), (bad, ["progress"])),
    }
    return [_check(label, fn, expect) for label, (fn, expect) in cases.items()]


def group_kernel():
    """The compiled entry point refuses inconsistent arrays itself (MF_EBADARG)."""
    from mfengine.nlgbn import _estep

    g = _fitted()
    X = _data(70)
    f = g._flat()
    n = X.shape[0]

    def call(**over):
        args = dict(X=X, mu=np.zeros((n, 5)), logvar=np.zeros((n, 5)), sizes=f["sizes"],
                    offset=f["offset"], woff=f["woff"], types=f["types"], WT=f["WT"],
                    bias=f["bias"], prec=f["prec"], acoef=f["acoef"], soff=f["soff"], tol=1e-6,
                    unit_tol=1e-8, max_sweeps=100, bound=np.empty(n),
                    n_sweeps=np.zeros(n, np.intp), converged=np.zeros(n, np.uint8),
                    stats=np.zeros((2, f["stat_size"])), n_threads=1)
        args.update(over)
        status = _estep.estep(*args.values())
        return np.where(np.isfinite(args["bound"]), args["bound"], 0.0) + status * 0

    def ip(*v):
        return np.array(v, dtype=np.intp)

    bad = ((ValueError, OverflowError), ["MF_EBADARG", "overflow", "must"])
    cases = {
        "valid": (lambda: call(), FINITE),
        "sizes wider than WT": (lambda: call(sizes=ip(1, 30, 12)), bad),
        "one layer": (lambda: call(sizes=ip(17), offset=ip(0, 17)), bad),
        "offset inconsistent": (lambda: call(offset=ip(0, 1, 6, 18)), bad),
        "offset negative": (lambda: call(offset=ip(0, -1, 3, 15)), bad),
        "sizes 2**62": (lambda: call(sizes=ip(1, 2**62, 12), offset=ip(0, 1, 2**62 + 1, 2**62 + 13)), bad),
        "sizes overflow": (lambda: call(sizes=ip(2**62, 2**62, 2**62),
                                        offset=ip(0, 2**62, 2**63 - 1, 2**63 - 1)), bad),
        "woff wrong": (lambda: call(woff=ip(0, 5)), bad),
        "woff short": (lambda: call(woff=ip(0)), bad),
        "soff wrong": (lambda: call(soff=ip(68, 81)), bad),
        "type code 9": (lambda: call(types=np.array([1, 9, 2, 2, 2] + [0] * 12, np.int8)), bad),
        "types short": (lambda: call(types=np.array([1, 2], np.int8)), bad),
        "WT short": (lambda: call(WT=f["WT"][:-1].copy()), bad),
        "WT NaN": (lambda: call(WT=np.full_like(f["WT"], np.nan)), bad),
        "prec 0": (lambda: call(prec=np.zeros(17)), bad),
        "prec inf": (lambda: call(prec=np.full(17, np.inf)), bad),
        "acoef negative": (lambda: call(acoef=-np.ones(17)), bad),
        "bias short": (lambda: call(bias=np.zeros(3)), bad),
        "X columns": (lambda: call(X=np.zeros((n, 3))), bad),
        "mu shape": (lambda: call(mu=np.zeros((n, 4))), bad),
        "logvar rows": (lambda: call(logvar=np.zeros((n - 1, 5))), bad),
        "bound short": (lambda: call(bound=np.empty(3)), bad),
        "stats rows": (lambda: call(stats=np.zeros((5, f["stat_size"]))), bad),
        "stats columns": (lambda: call(stats=np.zeros((2, 7))), bad),
        "n_threads 0": (lambda: call(n_threads=0), bad),
        "max_sweeps -1": (lambda: call(max_sweeps=-1), bad),
        "tol NaN": (lambda: call(tol=np.nan), bad),
        "unit_tol -1": (lambda: call(unit_tol=-1.0), bad),
        "moments type 7": (lambda: _estep.moments(7, np.zeros(2), np.zeros(2)), bad),
        "moments order 3": (lambda: _estep.moments(1, np.zeros(2), np.zeros(2), 3), bad),
        "moments lengths": (lambda: _estep.moments(1, np.zeros(2), np.zeros(3)), bad),
    }
    failures = [_check(label, fn, expect) for label, (fn, expect) in cases.items()]
    # a NaN starting point is reported through the bound (NaN), never crashes
    mu = np.full((n, 5), np.nan)
    bound = np.empty(n)
    _estep.estep(X, mu, np.zeros((n, 5)), f["sizes"], f["offset"], f["woff"], f["types"],
                 f["WT"], f["bias"], f["prec"], f["acoef"], f["soff"], 1e-6, 1e-8, 10, bound,
                 np.zeros(n, np.intp), np.zeros(n, np.uint8), np.zeros((0, f["stat_size"])), 1)
    if not np.all(np.isnan(bound)):
        failures.append("NaN start: the bound is not flagged NaN")
    return failures


GROUPS = {
    "attribute_edits": group_attribute_edits,
    "data": group_data,
    "hyperparameters": group_hyperparameters,
    "kernel": group_kernel,
}


def _child(group):
    failures = [f for f in GROUPS[group]() if f is not None]
    print(json.dumps(failures))


# ------------------------------------------------------------------------------ the tests
def run_in_child(args, timeout=300):
    """Run this file with ``args`` in a fresh interpreter; return its last line of output as
    JSON.  A crash (a signal, an abort) or a hang fails the calling test."""
    proc = subprocess.run(
        [sys.executable, os.path.abspath(__file__)] + list(args), capture_output=True,
        text=True, timeout=timeout, cwd=HERE,
    )
    assert proc.returncode == 0, (
        f"the child process died with status {proc.returncode}\n--- stdout\n"
        f"{proc.stdout[-3000:]}\n--- stderr\n{proc.stderr[-3000:]}"
    )
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("group", sorted(GROUPS))
def test_hostile_input_in_a_child_process(group):
    failures = run_in_child([group])
    assert failures == [], "\n".join(failures)


def test_the_child_harness_sees_a_crash():
    # the check above would catch a segfault: a child killed by a signal fails the test
    proc = subprocess.run([sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)"],
                          capture_output=True)
    assert proc.returncode != 0


def test_min_variance_huge_keeps_history_monotone():
    import mfengine as mf

    X = _data()
    g = mf.NLGBN([1, 4, 12], units=["binary", "rectified", "linear"], min_variance=1e300,
                 max_iter=10, random_state=0, progress=False).fit(X)
    assert np.all(np.isfinite(g.history_)) and np.all(np.diff(g.history_) >= 0)
    assert np.all(g.variances_[-1] >= 1e300)


def test_n_threads_is_clamped_before_openmp():
    from mfengine.nlgbn.model import _check_n_threads

    cores = os.cpu_count() or 1
    assert _check_n_threads(2**70) <= cores and _check_n_threads(10**6) <= cores
    assert _check_n_threads(-2**63) == 1 and _check_n_threads(1) == 1
    with pytest.raises(ValueError, match="n_threads"):
        _check_n_threads(0)
    with pytest.raises(TypeError, match="n_threads"):
        _check_n_threads(True)


def mfengine_valgrind_errors(log):
    """The error and definite-leak records of a valgrind log whose stack passes through the
    NLGBN kernel (csrc/mf_nlgbn*.c or the _estep extension)."""
    records, current = [], []
    for line in log.splitlines():
        body = re.sub(r"^==\d+==\s?", "", line)
        if not body.strip():
            if current:
                records.append(current)
            current = []
        else:
            current.append(body)
    if current:
        records.append(current)
    kinds = ("Invalid", "Conditional jump", "Use of uninitialised", "Mismatched", "Source and "
             "destination overlap", "Syscall param")
    return ["\n".join(r) for r in records
            if (r[0].startswith(kinds) or "definitely lost" in r[0])
            and any("nlgbn" in x or "_estep" in x for x in r)]


# slow: a few minutes under valgrind (pytest tests/nlgbn/test_nlgbn_safety.py -m slow); skipped
# where valgrind is not installed
@pytest.mark.slow
@pytest.mark.parametrize("group", ["kernel", "data"])
def test_kernel_under_valgrind(group, tmp_path):
    import shutil

    if shutil.which("valgrind") is None:
        pytest.skip("valgrind is not installed")
    log = tmp_path / "valgrind.log"
    env = dict(os.environ, PYTHONMALLOC="malloc", OMP_NUM_THREADS="1")
    proc = subprocess.run(
        ["valgrind", "--leak-check=full", "--show-leak-kinds=definite", "--num-callers=40",
         f"--log-file={log}", sys.executable, os.path.abspath(__file__), group],
        capture_output=True, text=True, timeout=3600, cwd=HERE, env=env,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == []
    text = log.read_text()
    assert "ERROR SUMMARY" in text
    errors = mfengine_valgrind_errors(text)
    assert errors == [], "\n\n".join(errors[:5])


def test_valgrind_log_parser():
    log = """==1== Invalid read of size 8
==1==    at 0x1: solve_pattern (mf_nlgbn_estep.c:120)
==1==    by 0x2: __pyx_pw_8mfengine_5nlgbn_6_estep_1estep
==1==
==1== Invalid read of size 8
==1==    at 0x4023C6C: strncmp (strcmp-sse2.S:160)
==1==
==1== 64 bytes in 1 blocks are definitely lost in loss record 3 of 9
==1==    at 0x3: malloc
==1==    by 0x4: mf_nlgbn_estep_block (mf_nlgbn_estep.c:250)
==1==
"""
    errors = mfengine_valgrind_errors(log)
    assert len(errors) == 2 and "solve_pattern" in errors[0] and "definitely" in errors[1]


if __name__ == "__main__":
    _child(sys.argv[1])
