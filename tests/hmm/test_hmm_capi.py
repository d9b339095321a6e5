"""The context-HMM kernels' C API (issue 11, item 4): mfengine/hmm/_chain.pxd.

mf_hmm_fb_infer, mf_hmm_structured_infer, mf_hmm_structured_infer_starts,
mf_hmm_naive_infer and mf_hmm_infer_diag are noexcept nogil functions over raw pointers that
return the status codes of mf_status.h.  Checked here: the same numbers
as the Python API (bit for bit, for any thread count), every MF_EBADARG condition of the
contract, and that an outside Cython extension can cimport and call them; for
mf_hmm_infer_diag (diagonal output variances), the numbers of the unit-covariance entry points
on data and tables whitened in NumPy, bounds below the exact likelihood enumerated by brute
force, and with no variances the old entry points bit for bit.
"""
import itertools
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import mfengine
from mfengine.hmm import _chain

import reference_hmm as R
from test_hmm import random_hmm, shifted

MF_OK, MF_NOT_CONVERGED, MF_EBADARG = 0, 1, -1


def model_and_data(context="both"):
    h = random_hmm(n=3, D=2, lag=2, context=context, seed=1, cscale=0.7)
    Xs = [h.sample(T, random_state=T)[0] for T in (30, 7, 12)]
    Xs[0][3] = np.nan
    Xs[2][5, 1] = np.nan
    X, lengths = np.concatenate(Xs), np.array([30, 7, 12], dtype=np.intp)
    # the data and means exactly as the Python API hands them over
    P, Xc = shifted(h, X, np.concatenate([[0], np.cumsum(lengths)]))
    P = (P.startprob, P.transmat, *P.tables)   # the kernel's five arrays
    return h, X, lengths, P, Xc


CODES = {"right": 1, "left": 2, "both": 3}


@pytest.mark.parametrize("method", ["structured", "naive"])
@pytest.mark.parametrize("context", ["right", "left", "both"])
def test_c_api_gives_the_python_api_numbers(method, context):
    h, X, lengths, P, Xc = model_and_data(context)
    r = h.infer(X, lengths, method=method)
    for threads in (1, 2, 4):   # 4 > the 3 sequences: the starts (naive: the sequences) apart
        st, bound, gamma, logpot, ns, conv = _chain._capi_selftest(
            method, *P, 2, CODES[context], Xc, lengths, h.infer_max_iter, h.infer_tol, threads)
        assert st == MF_OK
        np.testing.assert_array_equal(bound, r.bound)
        np.testing.assert_array_equal(gamma, r.posteriors)
        np.testing.assert_array_equal(ns, r.n_iter)
        np.testing.assert_array_equal(conv, r.converged)
        if method == "structured":
            np.testing.assert_array_equal(logpot, r.potentials)
    # a budget too small: results written, MF_NOT_CONVERGED
    st, bound, *_ , conv = _chain._capi_selftest(method, *P, 2, CODES[context], Xc, lengths, 1,
                                                 0.0, 1)
    assert st == MF_NOT_CONVERGED and not conv.all() and np.all(np.isfinite(bound))


@pytest.mark.parametrize("starts", ["link", "naive-link", "first-order", "own-means",
                                    ("first-order", "own-means"),
                                    ("link", "naive-link", "first-order", "own-means")])
def test_c_api_with_a_mask_of_starts_gives_the_python_api_numbers(starts):
    h, X, lengths, P, Xc = model_and_data()
    default = h.infer(X, lengths)
    r = h.set_params(starts=starts).infer(X, lengths)
    mask = _chain.start_mask(starts)
    for threads in (1, 2, 4):
        st, bound, gamma, logpot, ns, conv = _chain._capi_selftest(
            "structured", *P, 2, 3, Xc, lengths, h.infer_max_iter, h.infer_tol, threads, mask)
        assert st == MF_OK
        np.testing.assert_array_equal(bound, r.bound)
        np.testing.assert_array_equal(gamma, r.posteriors)
        np.testing.assert_array_equal(logpot, r.potentials)
        np.testing.assert_array_equal(ns, r.n_iter)
        np.testing.assert_array_equal(conv, r.converged)
    # a subset runs other ascents than the four (their potentials differ in the last digits),
    # so these equalities would fail if the mask were not passed on; all four is the default
    if len(starts) == 4 and not isinstance(starts, str):
        np.testing.assert_array_equal(r.potentials, default.potentials)
    else:
        assert not np.array_equal(r.potentials, default.potentials)


@pytest.mark.parametrize("mask", [0, 16, 31, 1 << 31, 2**32 - 1])
def test_c_api_refuses_a_mask_of_no_start_or_an_unknown_one_writing_nothing(mask):
    h, X, lengths, P, Xc = model_and_data()
    st, bound, gamma, logpot, ns, conv = _chain._capi_selftest(
        "structured", *P, 2, 3, Xc, lengths, h.infer_max_iter, h.infer_tol, 1, mask)
    assert st == MF_EBADARG
    assert not (bound.any() or gamma.any() or logpot.any() or ns.any() or conv.any())


def test_c_api_refuses_every_bad_argument():
    h, X, lengths, P, Xc = model_and_data()
    sp, A, U, V, W = P

    def call(sp=sp, A=A, U=U, V=V, W=W, lag=2, context=3, X=Xc, lengths=lengths, max_sweeps=50,
             tol=1e-9, method="structured"):
        return _chain._capi_selftest(method, np.ascontiguousarray(sp), np.ascontiguousarray(A),
                                     np.ascontiguousarray(U), np.ascontiguousarray(V),
                                     np.ascontiguousarray(W), lag, context,
                                     np.ascontiguousarray(X), np.asarray(lengths, np.intp),
                                     max_sweeps, tol, 1)[0]

    assert call() == MF_OK
    bad = {
        "lag < 1": dict(lag=0),
        "context 0": dict(context=0),
        "context 4": dict(context=4),
        "startprob not summing to 1": dict(sp=sp * 0.9),
        "negative startprob": dict(sp=np.array([1.5, -0.5, 0.0])),
        "NaN startprob": dict(sp=np.array([np.nan, 0.5, 0.5])),
        "transmat row not summing to 1": dict(A=A * 1.01),
        "negative transmat": dict(A=np.array([[1.2, -0.2, 0.0], A[1], A[2]])),
        "NaN in means": dict(U=np.where(np.arange(6).reshape(3, 2) == 4, np.nan, U)),
        "means beyond 1e100": dict(V=V + 1e101),
        "inf in left means": dict(W=np.where(np.arange(6).reshape(3, 2) == 0, np.inf, W)),
        "inf in X": dict(X=np.where(np.arange(Xc.size).reshape(Xc.shape) == 7, np.inf, Xc)),
        "a length of 0": dict(lengths=[30, 0, 19]),
        "a negative length": dict(lengths=[30, -7, 26]),
        "negative max_sweeps": dict(max_sweeps=-1),
        "negative tol": dict(tol=-1e-9),
        "NaN tol": dict(tol=np.nan),
        "infinite tol": dict(tol=np.inf),
    }
    for what, kw in bad.items():
        for method in ("structured", "naive"):
            assert call(method=method, **kw) == MF_EBADARG, what
    # NaN in X is a missing value, not an error; no sequences is a valid call
    assert call(X=np.full_like(Xc, np.nan)) == MF_OK
    assert call(lengths=np.zeros(0, np.intp)) == MF_OK


OUTSIDE_PYX = textwrap.dedent(
    """
    # cython: language_level=3
    import numpy as np
    from mfengine.hmm._chain cimport (mf_hmm_fb_infer, mf_hmm_structured_infer,
                                      mf_hmm_structured_infer_starts, mf_hmm_naive_infer,
                                      mf_hmm_infer_diag, MF_OK, MF_EBADARG, MF_HMM_START_LINK,
                                      MF_HMM_START_NAIVE_LINK, MF_HMM_START_FIRST_ORDER,
                                      MF_HMM_START_OWN_MEANS, MF_HMM_ALL_STARTS,
                                      MF_HMM_METHOD_STRUCTURED, MF_HMM_METHOD_NAIVE)

    def start_bits():
        return (MF_HMM_START_LINK, MF_HMM_START_NAIVE_LINK, MF_HMM_START_FIRST_ORDER,
                MF_HMM_START_OWN_MEANS, MF_HMM_ALL_STARTS)

    def methods():
        return MF_HMM_METHOD_STRUCTURED, MF_HMM_METHOD_NAIVE

    def fb(double[::1] sp, double[:, ::1] A, double[:, ::1] logpot):
        cdef Py_ssize_t T = logpot.shape[0], n = logpot.shape[1]
        cdef double[:, ::1] gamma = np.empty((T, n))
        cdef double[:, ::1] xi = np.empty((n, n))
        cdef double logz = 0.0
        cdef int status
        with nogil:
            status = mf_hmm_fb_infer(T, n, &sp[0], &A[0, 0], &logpot[0, 0], &gamma[0, 0],
                                     &xi[0, 0], &logz)
        return status, np.asarray(gamma), np.asarray(xi), logz

    def infer(str method, double[::1] sp, double[:, ::1] A, double[:, ::1] U, double[:, ::1] V,
              double[:, ::1] W, Py_ssize_t lag, int context, double[:, ::1] X,
              Py_ssize_t[::1] lengths, Py_ssize_t max_sweeps, double tol, int n_threads):
        cdef Py_ssize_t n = U.shape[0], D = U.shape[1], N = X.shape[0], k = lengths.shape[0]
        cdef double[::1] bound = np.zeros(k)
        cdef double[:, ::1] gamma = np.zeros((N, n))
        cdef double[:, ::1] logpot = np.zeros((N, n))
        cdef Py_ssize_t[::1] ns = np.zeros(k, dtype=np.intp)
        cdef signed char[::1] conv = np.zeros(k, dtype=np.int8)
        cdef int status
        cdef bint structured = method == "structured", own = method == "own-means"
        with nogil:
            if own:
                status = mf_hmm_structured_infer_starts(
                    n, D, lag, context, &sp[0], &A[0, 0], &U[0, 0], &V[0, 0], &W[0, 0], k,
                    &lengths[0], &X[0, 0], max_sweeps, tol, n_threads, MF_HMM_START_OWN_MEANS,
                    &gamma[0, 0], &logpot[0, 0], &bound[0], &ns[0], &conv[0])
            elif structured:
                status = mf_hmm_structured_infer(n, D, lag, context, &sp[0], &A[0, 0], &U[0, 0],
                                                 &V[0, 0], &W[0, 0], k, &lengths[0], &X[0, 0],
                                                 max_sweeps, tol, n_threads, &gamma[0, 0],
                                                 &logpot[0, 0], &bound[0], &ns[0], &conv[0])
            else:
                status = mf_hmm_naive_infer(n, D, lag, context, &sp[0], &A[0, 0], &U[0, 0],
                                            &V[0, 0], &W[0, 0], k, &lengths[0], &X[0, 0],
                                            max_sweeps, tol, n_threads, &gamma[0, 0], &bound[0],
                                            &ns[0], &conv[0])
        return status, np.asarray(bound), np.asarray(gamma), np.asarray(logpot)

    def bad_calls():
        cdef double p[4]
        p[0], p[1] = 1.0, 0.0
        return (mf_hmm_fb_infer(0, 1, p, p, p, p, NULL, p) == MF_EBADARG,
                mf_hmm_fb_infer(1, 1, NULL, p, p, p, NULL, p) == MF_EBADARG,
                mf_hmm_structured_infer(0, 1, 1, 1, p, p, p, p, p, 0, NULL, NULL, 1, 0.0, 1,
                                        NULL, NULL, NULL, NULL, NULL) == MF_EBADARG,
                mf_hmm_naive_infer(1, 0, 1, 1, p, p, p, p, p, 0, NULL, NULL, 1, 0.0, 1,
                                   NULL, NULL, NULL, NULL) == MF_EBADARG,
                mf_hmm_structured_infer(1, 1, 1, 1, p, p, p, p, p, 1, NULL, p, 1, 0.0, 1,
                                        p, p, p, NULL, NULL) == MF_EBADARG,
                mf_hmm_structured_infer_starts(1, 1, 1, 1, p, p, p, p, p, 0, NULL, NULL, 1, 0.0,
                                               1, 0, NULL, NULL, NULL, NULL, NULL)
                == MF_EBADARG,
                # a valid model and no sequences, but a start that does not exist
                mf_hmm_structured_infer_starts(1, 1, 1, 1, p, p, p, p, p, 0, NULL, NULL, 1, 0.0,
                                               1, 16, NULL, NULL, NULL, NULL, NULL)
                == MF_EBADARG,
                mf_hmm_structured_infer_starts(1, 1, 1, 1, p, p, p, p, p, 0, NULL, NULL, 1, 0.0,
                                               1, 8, NULL, NULL, NULL, NULL, NULL)
                == MF_OK,
                # a method that does not exist; then a variance of 0 (p[1])
                mf_hmm_infer_diag(2, 15, 1, 1, 1, 1, p, p, p, p, p, NULL, 0, NULL, NULL, 1, 0.0,
                                  1, NULL, NULL, NULL, NULL, NULL) == MF_EBADARG,
                mf_hmm_infer_diag(MF_HMM_METHOD_NAIVE, 0, 1, 1, 1, 1, p, p, p, p, p, &p[1], 0,
                                  NULL, NULL, 1, 0.0, 1, NULL, NULL, NULL, NULL, NULL)
                == MF_EBADARG,
                mf_hmm_infer_diag(MF_HMM_METHOD_NAIVE, 0, 1, 1, 1, 1, p, p, p, p, p, p, 0, NULL,
                                  NULL, 1, 0.0, 1, NULL, NULL, NULL, NULL, NULL) == MF_OK)
    """
)

OUTSIDE_SETUP = textwrap.dedent(
    """
    import os, sys, mfengine
    from setuptools import setup, Extension
    from Cython.Build import cythonize
    where = os.path.dirname(os.path.dirname(mfengine.__file__))
    setup(name="outside_hmm",
          ext_modules=cythonize([Extension("outside_hmm", ["outside_hmm.pyx"],
                                           include_dirs=[mfengine.get_include()])],
                                include_path=[where], quiet=True))
    """
)


# slow: a second outside build; common/test_c_api.py's outside extension cimports the HMM
# entry points too
@pytest.mark.slow
def test_an_outside_cython_extension_cimports_the_c_api(tmp_path):
    pytest.importorskip("Cython", reason="building an outside extension needs Cython")
    (tmp_path / "outside_hmm.pyx").write_text(OUTSIDE_PYX)
    (tmp_path / "setup.py").write_text(OUTSIDE_SETUP)
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    res = subprocess.run([sys.executable, "setup.py", "build_ext", "--inplace", "-q"],
                         cwd=tmp_path, capture_output=True, text=True, env=env, timeout=600)
    assert res.returncode == 0, res.stdout + res.stderr
    h, X, lengths, P, Xc = model_and_data()
    np.savez(tmp_path / "in.npz", X=Xc, lengths=lengths, sp=P[0], A=P[1], U=P[2], V=P[3],
             W=P[4], logpot=R._site_terms(R.params_of(h), X[:30]) * 0.3)
    script = textwrap.dedent(
        f"""
        import numpy as np, outside_hmm as o
        d = np.load({str(tmp_path / 'in.npz')!r})
        out = {{}}
        for m in ("structured", "naive", "own-means"):
            s, b, g, lp = o.infer(m, d["sp"], d["A"], d["U"], d["V"], d["W"], 2, 3, d["X"],
                                  d["lengths"], 400, 1e-13, 2)
            out[m + "_status"], out[m + "_bound"], out[m + "_gamma"] = s, b, g
            out[m + "_logpot"] = lp
        s, g, xi, lz = o.fb(d["sp"], d["A"], np.ascontiguousarray(np.nan_to_num(d["logpot"])))
        out.update(fb_status=s, fb_gamma=g, fb_xi=xi, fb_logz=lz, bad=o.bad_calls(),
                   bits=o.start_bits(), methods=o.methods())
        np.savez({str(tmp_path / 'out.npz')!r}, **out)
        """
    )
    res = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True,
                         text=True, env=env, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    out = np.load(tmp_path / "out.npz")
    for m in ("structured", "naive"):
        r = h.infer(X, lengths, method=m)
        assert out[m + "_status"] == MF_OK
        np.testing.assert_array_equal(out[m + "_bound"], r.bound)
        np.testing.assert_array_equal(out[m + "_gamma"], r.posteriors)
    np.testing.assert_array_equal(out["structured_logpot"], h.infer(X, lengths).potentials)
    # the mask of starts: its bits are the Python API's, and one start gives its numbers
    names = ("link", "naive-link", "first-order", "own-means")
    assert list(out["bits"]) == [_chain.start_mask(s) for s in names] + [_chain.start_mask(names)]
    r = h.set_params(starts="own-means").infer(X, lengths)
    assert out["own-means_status"] == MF_OK
    np.testing.assert_array_equal(out["own-means_bound"], r.bound)
    np.testing.assert_array_equal(out["own-means_gamma"], r.posteriors)
    np.testing.assert_array_equal(out["own-means_logpot"], r.potentials)
    # mf_hmm_infer_diag's method codes (its numbers from an outside extension: test_c_api)
    assert list(out["methods"]) == [METHODS["structured"], METHODS["naive"]]
    lp = np.nan_to_num(np.load(tmp_path / "in.npz")["logpot"])
    g, xi, lz = R.forward_backward(P[0], P[1], lp)
    assert out["fb_status"] == MF_OK
    assert float(out["fb_logz"]) == pytest.approx(lz, rel=1e-12)
    np.testing.assert_allclose(out["fb_gamma"], g, atol=1e-12)
    np.testing.assert_allclose(out["fb_xi"], xi, atol=1e-12)
    assert out["bad"].all()


# ------------------------------------------------------------------------------------------
# mf_hmm_infer_diag: a diagonal output covariance, by whitening

METHODS = {"structured": 0, "naive": 1}   # MF_HMM_METHOD_STRUCTURED / _NAIVE


def diag_case(context="both"):
    """model_and_data's model and data with output variances (0.3, 2.5): the tables and rows
    scaled column-wise by their root, more missing values (a NaN entry in every sequence and a
    whole missing frame)."""
    h, X, lengths, P, Xc = model_and_data(context)
    var = np.array([0.3, 2.5])
    s = np.sqrt(var)
    sp, A, U, V, W = P
    Xv = Xc * s
    Xv[31, 0] = np.nan
    Xv[40] = np.nan
    return (sp, A, U * s, V * s, W * s), var, np.ascontiguousarray(Xv), lengths


def whitened_reference(method, P, var, X, lengths, starts=None, threads=1):
    """The slow reference: the tables and X divided by sqrt(variances) in NumPy, the old entry
    point on them, and each bound less ln sigma_d summed over its sequence's observed
    entries, one at a time."""
    sp, A, U, V, W = P
    s = np.sqrt(var)
    white = [np.ascontiguousarray(M / s) for M in (U, V, W)]
    st, bound, gamma, logpot, ns, conv = _chain._capi_selftest(
        method, sp, A, *white, 2, 3, np.ascontiguousarray(X / s), lengths, 400, 1e-13, threads,
        starts)
    off = np.concatenate([[0], np.cumsum(lengths)])
    for k in range(len(lengths)):
        for t in range(off[k], off[k + 1]):
            for d in range(X.shape[1]):
                if not np.isnan(X[t, d]):
                    bound[k] -= 0.5 * np.log(var[d])
    return st, bound, gamma, logpot, ns, conv


def diag_call(method, P, var, X, lengths, starts=15, threads=1, lag=2, context=3, **kw):
    sp, A, U, V, W = P
    return _chain._capi_diag_selftest(
        METHODS.get(method, method), starts, sp, A, U, V, W, var, lag, context, X, lengths,
        kw.pop("max_sweeps", 400), kw.pop("tol", 1e-13), threads, **kw)


@pytest.mark.parametrize("method", ["structured", "naive"])
@pytest.mark.parametrize("starts", [15, 5])
def test_diag_is_the_whitened_problem_on_the_unit_covariance_entry_point(method, starts):
    P, var, X, lengths = diag_case()
    ref = whitened_reference(method, P, var, X, lengths,
                             starts if method == "structured" else None)
    assert ref[0] == MF_OK
    for threads in (1, 2, 4):   # 4 > the 3 sequences: the starts apart
        st, bound, gamma, logpot, ns, conv = diag_call(method, P, var, X, lengths, starts,
                                                       threads)
        assert st == MF_OK
        # the same division in C and NumPy: the kernel sees the same bits
        np.testing.assert_array_equal(gamma, ref[2])
        np.testing.assert_array_equal(ns, ref[4])
        np.testing.assert_array_equal(conv.astype(bool), ref[5])
        np.testing.assert_allclose(bound, ref[1], rtol=1e-13, atol=0)
        if method == "structured":
            np.testing.assert_array_equal(logpot, ref[3])
        else:
            assert (logpot == -7.0).all()   # the naive method writes no potentials
        if threads == 1:
            first = bound
        np.testing.assert_array_equal(bound, first)   # identical for any thread count
    # the correction is there: the variances change the bound, not only its coordinates
    assert not np.allclose(bound, _chain._capi_selftest(
        method, *P, 2, 3, X, lengths, 400, 1e-13, 1, starts if method == "structured" else None
    )[1])


def brute_force_loglik_diag(sp, A, U, V, var, X):
    """Exact ln P(x) of a right-context model (lag 1) by enumerating all n^T state paths, with
    the Gaussian density of diagonal covariance written out (missing entries left out)."""
    n, T = len(sp), len(X)
    logs = []
    for path in itertools.product(range(n), repeat=T):
        lp = np.log(sp[path[0]]) + sum(np.log(A[path[t], path[t + 1]]) for t in range(T - 1))
        for t in range(T):
            m = U[path[t]] + (V[path[t + 1]] if t + 1 < T else 0.0)
            for d in range(X.shape[1]):
                if not np.isnan(X[t, d]):
                    lp += -0.5 * np.log(2 * np.pi * var[d]) - 0.5 * (X[t, d] - m[d]) ** 2 / var[d]
        logs.append(lp)
    return float(np.logaddexp.reduce(logs))


@pytest.mark.parametrize("missing", [False, True])
def test_diag_bounds_against_brute_force_likelihood(missing):
    """n = 2, D = 2, lag 1, right context, T = 6: both bounds lie below the exact ln P(x) of
    the model with its variances; with the context table zero the model is a first-order HMM,
    the structured Q is its posterior and the bound is ln P(x)."""
    rng = np.random.default_rng(3)
    sp = np.array([0.6, 0.4])
    A = np.array([[0.8, 0.2], [0.3, 0.7]])
    U = np.array([[-1.0, 0.5], [1.2, -0.4]])
    V = np.array([[0.6, -0.3], [-0.2, 0.9]])
    var = np.array([0.4, 3.0])
    X = rng.normal(size=(6, 2)) * np.sqrt(var) + U[[0, 0, 1, 1, 0, 1]]
    if missing:
        X[2, 1] = np.nan
        X[4] = np.nan
    lengths = np.array([6], dtype=np.intp)
    for table, equal in ((V, False), (np.zeros_like(V), True)):
        exact = brute_force_loglik_diag(sp, A, U, table, var, X)
        P = (sp, A, U, np.ascontiguousarray(table), np.zeros_like(U))
        for method in ("structured", "naive"):
            st, bound, *_ = diag_call(method, P, var, X, lengths, lag=1, context=1,
                                      tol=1e-14, max_sweeps=1000)
            assert st == MF_OK
            assert bound[0] <= exact + 1e-10, (method, bound[0], exact)
            if equal and method == "structured":
                assert bound[0] == pytest.approx(exact, abs=1e-9)
        # the naive bound is strictly worse on correlated states: the test has teeth
        assert diag_call("naive", P, var, X, lengths, lag=1, context=1)[1][0] < exact - 1e-6


def test_diag_with_null_variances_is_the_unit_covariance_entry_points_bit_for_bit():
    h, X, lengths, P, Xc = model_and_data()
    for threads in (1, 2, 4):
        for starts in (15, 1, 6, 8):
            old = _chain._capi_selftest("structured", *P, 2, 3, Xc, lengths, 400, 1e-13,
                                        threads, starts)
            new = diag_call("structured", P, None, Xc, lengths, starts, threads)
            for a, b in zip(old, new):
                np.testing.assert_array_equal(a, b)
        old = _chain._capi_selftest("naive", *P, 2, 3, Xc, lengths, 400, 1e-13, threads)
        for starts, logpot_null in ((15, False), (0, True), (99, True)):   # starts unread
            new = diag_call("naive", P, None, Xc, lengths, starts, threads,
                            logpot_null=logpot_null)
            for a, b in zip(old[:3] + old[4:], new[:3] + new[4:]):
                np.testing.assert_array_equal(a, b)
        # and the default entry point is the mask of all four
        old = _chain._capi_selftest("structured", *P, 2, 3, Xc, lengths, 400, 1e-13, threads)
        new = diag_call("structured", P, None, Xc, lengths, 15, threads)
        for a, b in zip(old, new):
            np.testing.assert_array_equal(a, b)


def test_diag_refuses_bad_variances_and_methods_writing_nothing():
    P, var, X, lengths = diag_case()

    def untouched(res):
        return all((np.asarray(a) == -7).all() for a in res[1:])

    assert diag_call("structured", P, var, X, lengths)[0] == MF_OK
    both = ("structured", "naive")
    bad = {   # what: (the change, the methods it is tried with)
        "a zero variance": (dict(var=np.array([0.3, 0.0])), both),
        "a negative variance": (dict(var=np.array([-0.3, 2.5])), both),
        "a NaN variance": (dict(var=np.array([0.3, np.nan])), both),
        "an infinite variance": (dict(var=np.array([np.inf, 2.5])), both),
        "a mean over sigma beyond 1e100": (dict(var=np.array([1e-210, 2.5])), both),
        "an entry of X over sigma infinite": (dict(
            var=np.array([0.3, 1e-300]), P=P[:2] + tuple(np.zeros_like(M) for M in P[2:]),
            X=np.where(np.arange(X.size).reshape(X.shape) == 9, 1e300, X)), both),
        "a NaN tol": (dict(tol=np.nan), both),
        "a length of 0": (dict(lengths=np.array([30, 0, 19], dtype=np.intp)), both),
        "method -1": ({}, (-1,)),
        "method 2": ({}, (2,)),
        "method 7": ({}, (7,)),
        "structured without logpot": (dict(logpot_null=True), ("structured",)),
        "structured with no start": (dict(starts=0), ("structured",)),
        "structured with an unknown start": (dict(starts=16), ("structured",)),
    }
    for what, (kw, methods) in bad.items():
        args = dict(P=P, var=var, X=X, lengths=lengths)
        args.update(kw)
        for method in methods:
            res = diag_call(method, **args)
            assert res[0] == MF_EBADARG, (what, method)
            assert untouched(res), (what, method)
    # no sequences is a valid call (bad variances are refused even then), and the naive
    # method needs neither a mask nor logpot
    empty = np.zeros(0, np.intp)
    assert diag_call("structured", P, var, X, empty)[0] == MF_OK
    assert diag_call("structured", P, np.array([0.3, 0.0]), X, empty)[0] == MF_EBADARG
    assert diag_call("naive", P, var, X, lengths, starts=0, logpot_null=True)[0] == MF_OK


@pytest.mark.parametrize("method", ["structured", "naive"])
@pytest.mark.parametrize("covariance_type", ["diag", "spherical"])
def test_diag_gives_the_python_api_numbers(method, covariance_type):
    """ContextHMM(covariance_type=...) with learned-style variances: the C entry point on the
    centred data and tables the Python API hands its kernel (before it whitens them) gives its
    posteriors, potentials and sweeps bit for bit (the same division), and its bounds to
    rounding (the correction summed in another order)."""
    h, X, lengths, _, _ = model_and_data()
    var = np.array([0.3, 2.5]) if covariance_type == "diag" else np.array([0.7, 0.7])
    h.set_params(covariance_type=covariance_type)
    h.covars_ = h._covars_of(var)
    X = X * np.sqrt(var)
    P, Xc = shifted(h, X, np.concatenate([[0], np.cumsum(lengths)]))
    np.testing.assert_array_equal(P.variances, var)
    r = h.infer(X, lengths, method=method)
    for threads in (1, 2):
        st, bound, gamma, logpot, ns, conv = diag_call(
            method, (P.startprob, P.transmat, *P.tables), P.variances, Xc, lengths,
            threads=threads, max_sweeps=h.infer_max_iter, tol=h.infer_tol)
        assert st == MF_OK
        np.testing.assert_array_equal(gamma, r.posteriors)
        np.testing.assert_array_equal(ns, r.n_iter)
        np.testing.assert_array_equal(conv.astype(bool), r.converged)
        np.testing.assert_allclose(bound, r.bound, rtol=1e-13, atol=0)
        if method == "structured":
            np.testing.assert_array_equal(logpot, r.potentials)
