"""The C API of the NLGBN E-step (issue 11 item 4): mf_nlgbn_infer, a noexcept nogil function
over raw pointers declared in mfengine/nlgbn/_estep.pxd, against the Python API, and every
MF_EBADARG / MF_EOVERFLOW condition of its contract (section 4 of mfengine/solver.pxd)."""
import numpy as np
import pytest

import mfengine as mf
from mfengine.nlgbn import _estep
from mfengine.nlgbn.model import UNIT_TYPES

MF_OK, MF_NOT_CONVERGED, MF_EBADARG, MF_ENOMEM, MF_EOVERFLOW = 0, 1, -1, -2, -3
CODE = {k: i for i, k in enumerate(UNIT_TYPES)}
MIXED = [["binary", "sigmoidal"], ["rectified", "linear", "binary", "sigmoidal"], "linear"]


def random_net(sizes, units, seed):
    rng = np.random.default_rng(seed)
    weights = [rng.normal(0.0, 1.0 / np.sqrt(a), size=(b, a)) for a, b in zip(sizes[:-1], sizes[1:])]
    biases = [rng.normal(0.0, 0.7, size=s) for s in sizes]
    variances = [rng.uniform(0.3, 2.0, size=s) for s in sizes]
    return mf.NLGBN.from_params(weights, biases, variances, units=units)


def raw(net):
    return dict(
        n_layers=len(net.biases_),
        sizes=np.array([b.shape[0] for b in net.biases_], dtype=np.intp),
        types=np.array([CODE[k] for layer in net.units_ for k in layer], dtype=np.int8),
        weights=np.concatenate([w.ravel() for w in net.weights_]),
        biases=np.concatenate(net.biases_), variances=np.concatenate(net.variances_))


def call(net, X, missing=None, tol=1e-6, max_sweeps=1000, warm=0, threads=1, mu=None,
         lv=None, **over):
    a = raw(net)
    a.update({k: v for k, v in over.items() if k in a})
    n = X.shape[0]
    H = int(sum(b.shape[0] for b in net.biases_[:-1]))
    mu = np.zeros(n * H) if mu is None else mu.ravel().copy()
    lv = np.zeros(n * H) if lv is None else lv.ravel().copy()
    out = dict(bound=np.full(n, np.nan), n_sweeps=np.zeros(n, dtype=np.intp),
               converged=np.zeros(n, dtype=np.uint8))
    miss = None if missing is None else np.ascontiguousarray(missing, dtype=np.uint8).ravel()
    rc = _estep._capi_infer(a["n_layers"], a["sizes"], a["types"], a["weights"], a["biases"],
                            a["variances"], np.ascontiguousarray(X, dtype=float).ravel(), miss,
                            tol, max_sweeps, warm, threads, mu, lv, out["bound"],
                            out["n_sweeps"], out["converged"],
                            **{k: v for k, v in over.items() if k in ("null_X", "n_patterns")})
    return rc, mu.reshape(n, H), lv.reshape(n, H), out


@pytest.mark.parametrize("threads", [1, 2])
def test_same_numbers_as_the_python_api(threads):
    net = random_net([2, 4, 6], MIXED, seed=1)
    X = net.sample(150, random_state=2)
    rc, mu, lv, out = call(net, X, threads=threads)
    r = net.infer(X, n_threads=1)
    assert rc == MF_OK
    np.testing.assert_allclose(out["bound"], r.bound, rtol=1e-10)
    np.testing.assert_allclose(mu, np.hstack(r.mu[:-1]), rtol=1e-7, atol=1e-8)
    np.testing.assert_allclose(np.exp(0.5 * lv), np.hstack(r.sigma[:-1]), rtol=1e-7)
    np.testing.assert_array_equal(out["converged"].astype(bool), r.converged)
    # missing entries, as infer(X, missing)
    miss = np.random.default_rng(3).random(X.shape) < 0.3
    Xn = np.where(miss, np.nan, X)
    rc, mu, lv, out = call(net, Xn, miss, threads=threads)
    assert rc == MF_OK
    np.testing.assert_allclose(out["bound"], net.infer(X, miss).bound, rtol=1e-10)
    # a warm start from the solution stays there (one sweep)
    rc2, mu2, lv2, out2 = call(net, Xn, miss, warm=1, mu=mu, lv=lv, tol=1e-6)
    assert rc2 == MF_OK and np.all(out2["n_sweeps"] <= 2)
    assert np.all(out2["bound"] >= out["bound"] - 1e-9)
    # a budget of one sweep: MF_NOT_CONVERGED, results written
    rc, _, _, out = call(net, X, max_sweeps=1, tol=1e-12)
    assert rc == MF_NOT_CONVERGED and np.all(np.isfinite(out["bound"]))
    # no pattern: MF_OK, nothing read
    rc, *_ = call(net, X[:0])
    assert rc == MF_OK


def test_every_bad_argument_is_refused():
    net = random_net([2, 3, 4], [["binary", "rectified"], "sigmoidal", "linear"], seed=4)
    X = net.sample(5, random_state=5)
    a = raw(net)
    bad = {
        "n_layers < 2": dict(n_layers=1),
        "sizes NULL": dict(sizes=None),
        "a size < 1": dict(sizes=np.array([2, 0, 4], dtype=np.intp)),
        "types NULL": dict(types=None),
        "type unknown": dict(types=np.r_[a["types"][:-1], 7].astype(np.int8)),
        "type negative": dict(types=np.r_[-1, a["types"][1:]].astype(np.int8)),
        "visible not linear": dict(types=np.r_[a["types"][:-1], 2].astype(np.int8)),
        "weights NULL": dict(weights=None),
        "weight NaN": dict(weights=np.r_[np.nan, a["weights"][1:]]),
        "weight inf": dict(weights=np.r_[a["weights"][:-1], np.inf]),
        "biases NULL": dict(biases=None),
        "bias inf": dict(biases=np.r_[np.inf, a["biases"][1:]]),
        "variances NULL": dict(variances=None),
        "variance 0": dict(variances=np.r_[0.0, a["variances"][1:]]),
        "variance negative": dict(variances=np.r_[a["variances"][:-1], -1.0]),
        "variance NaN": dict(variances=np.r_[np.nan, a["variances"][1:]]),
        "variance subnormal": dict(variances=np.r_[1e-310, a["variances"][1:]]),
        "w^2/psi^2 overflows": dict(weights=np.full_like(a["weights"], 1e200),
                                    variances=np.full_like(a["variances"], 1e-200)),
        "n_patterns < 0": dict(n_patterns=-1),
        "X NULL": dict(null_X=True),
    }
    for label, over in bad.items():
        rc, _, _, out = call(net, X, **over)
        assert rc == MF_EBADARG, label
        assert np.all(np.isnan(out["bound"])), label          # nothing written
    Xn = X.copy()
    Xn[1, 2] = np.nan
    assert call(net, Xn)[0] == MF_EBADARG                      # NaN at an observed entry
    assert call(net, Xn, np.isnan(Xn))[0] == MF_OK             # ... fine when it is missing
    assert call(net, X, tol=0.0)[0] == MF_EBADARG
    assert call(net, X, tol=np.nan)[0] == MF_EBADARG
    assert call(net, X, tol=np.inf)[0] == MF_EBADARG
    assert call(net, X, max_sweeps=0)[0] == MF_EBADARG
    H = 5
    assert call(net, X, warm=1, mu=np.full((5, H), np.nan), lv=np.zeros((5, H)))[0] == MF_EBADARG
    # sizes whose products overflow ptrdiff_t: refused before any array is read
    huge = np.array([2**62, 4], dtype=np.intp)
    rc, *_ = call(net, X, sizes=huge, n_layers=2)
    assert rc == MF_EOVERFLOW
    # n_threads beyond the machine or below 1 is clamped, with the same answer
    r1 = call(net, X, threads=1)[3]["bound"]
    for t in (0, -5, 10**6):
        np.testing.assert_array_equal(call(net, X, threads=t)[3]["bound"], r1)
