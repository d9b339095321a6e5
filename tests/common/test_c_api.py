"""The C-level API: an outside Cython extension that cimports mfengine.solver, and a C program
through mfengine_solver.h, both built against the installed package only; every bad argument
refused with a status code (called through ctypes in a child process, so that a crash is a
test failure); the contract text and the status codes the same everywhere."""
import json
import os
import re
import subprocess
import sys
import sysconfig
import textwrap
from types import SimpleNamespace

import numpy as np
import pytest

import mfengine
import mfengine as mf
import mfengine.solver
from mfengine.hmm import _chain
from mfengine.sbn import _gaussian, _sjj, plefka, sjj
from mfengine.sbn._solve import inner_tol_for
from mfengine.sbn.dag import DagStructure

try:
    from . import reference as ref
except ImportError:  # tests/ is not a package: conftest.py puts references/ on sys.path
    import reference as ref

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _get_include():
    """Where the installed package keeps its C headers (mfengine_solver.h, mf_status.h)."""
    return mfengine.get_include()


def _net_and_data():
    rng = np.random.default_rng(2)
    sizes = [3, 7, 16]
    weights = [rng.normal(0, 1.5 / np.sqrt(sizes[l]), (sizes[l + 1], sizes[l])) for l in range(2)]
    biases = [rng.normal(0, 0.5, n) for n in sizes]
    net = SimpleNamespace(weights=weights, biases=biases, sizes=sizes)
    V = (rng.random((40, 16)) < 0.4).astype(float)
    missing = np.zeros(V.shape, dtype=bool)
    missing[::3, ::4] = True
    return net, V, missing


def _kernel(net, V, missing=None, tol=1e-6):
    """mfengine's own call of the kernel with the default inner tolerance (what the C API's
    inner_tol <= 0 selects)."""
    miss = None if missing is None else missing.astype(np.uint8)
    return _gaussian.run(net.weights, net.biases, V, miss, None, tol, min(1e-3, max(1e-13, 0.1 * np.sqrt(tol))),
                         200, 1, True)


def _reference_gradient(net, V, missing, r):
    gW = [np.zeros_like(w) for w in net.weights]
    gb = [np.zeros_like(b) for b in net.biases]
    for p in range(len(V)):
        mu = [m[p] for m in r.mu[:-1]] + [V[p]]
        w, b = ref.gradient(net.weights, net.biases, mu, [x[p] for x in r.xi], 1.0 - missing[p])
        for acc, g in zip(gW + gb, w + b):
            acc += g
    return gW, gb


OUTSIDE_PYX = textwrap.dedent(
    """
    # cython: language_level=3
    import numpy as np
    from libc.math cimport NAN
    from mfengine.solver cimport (
        MF_OK, MF_NOT_CONVERGED, MF_EBADARG, mf_sbn_gaussian_infer, mf_sbn_gaussian_gradient,
        mf_sjj_solve, mf_plefka_solve, mf_plefka_gradient, mf_hmm_fb_infer,
        mf_hmm_structured_infer, mf_hmm_structured_infer_starts, mf_hmm_naive_infer,
        mf_hmm_infer_diag, mf_nlgbn_infer, MF_HMM_START_NAIVE_LINK, MF_HMM_START_OWN_MEANS,
        MF_HMM_ALL_STARTS, MF_HMM_METHOD_STRUCTURED, MF_HMM_METHOD_NAIVE)

    def gaussian_infer(sizes, weights, biases, V, missing, double tol):
        cdef Py_ssize_t[::1] sz = np.ascontiguousarray(sizes, dtype=np.intp)
        cdef const double[::1] w = np.ascontiguousarray(weights, dtype=np.float64)
        cdef const double[::1] b = np.ascontiguousarray(biases, dtype=np.float64)
        cdef const double[:, ::1] v = np.ascontiguousarray(V, dtype=np.float64)
        cdef const unsigned char[:, ::1] m = np.ascontiguousarray(missing, dtype=np.uint8)
        cdef Py_ssize_t n = v.shape[0], U = int(np.sum(sizes))
        cdef double[:, ::1] mu = np.full((n, U), 0.5)
        cdef double[:, ::1] xi = np.empty((n, U))
        cdef double[::1] bound = np.empty(n)
        cdef Py_ssize_t[::1] sweeps = np.empty(n, dtype=np.intp)
        cdef signed char[::1] conv = np.empty(n, dtype=np.int8)
        cdef int status
        with nogil:
            status = mf_sbn_gaussian_infer(sz.shape[0], &sz[0], &w[0], &b[0], n, &v[0, 0],
                                           &m[0, 0], tol, 0.0, 200, 2, &mu[0, 0], &xi[0, 0],
                                           &bound[0], &sweeps[0], &conv[0])
        return status, np.asarray(bound), np.asarray(mu), np.asarray(xi)

    def gaussian_gradient(sizes, weights, biases, V, missing, mu, xi):
        cdef Py_ssize_t[::1] sz = np.ascontiguousarray(sizes, dtype=np.intp)
        cdef const double[::1] w = np.ascontiguousarray(weights, dtype=np.float64)
        cdef const double[::1] b = np.ascontiguousarray(biases, dtype=np.float64)
        cdef const double[:, ::1] v = np.ascontiguousarray(V, dtype=np.float64)
        cdef const unsigned char[:, ::1] m = np.ascontiguousarray(missing, dtype=np.uint8)
        cdef const double[:, ::1] mu_ = mu
        cdef const double[:, ::1] xi_ = xi
        cdef double[::1] gw = np.empty(w.shape[0])
        cdef double[::1] gb = np.empty(b.shape[0])
        cdef int status
        with nogil:
            status = mf_sbn_gaussian_gradient(sz.shape[0], &sz[0], &w[0], &b[0], v.shape[0],
                                              &v[0, 0], &m[0, 0], &mu_[0, 0], &xi_[0, 0],
                                              &gw[0], &gb[0])
        return status, np.asarray(gw), np.asarray(gb)

    def sjj(const Py_ssize_t[::1] pp, const Py_ssize_t[::1] pi, const double[::1] w,
            const double[::1] h, int act, const double[:, ::1] clamp,
            const double[:, ::1] init_mu, const double[:, ::1] init_xi, double tol,
            int n_threads):
        cdef Py_ssize_t n = h.shape[0], nnz = w.shape[0], k = clamp.shape[0]
        cdef double[::1] bound = np.empty(k)
        cdef double[:, ::1] mu = np.empty((k, n))
        cdef double[:, ::1] xi = np.empty((k, nnz if act == 1 else n))
        cdef Py_ssize_t[::1] ns = np.empty(k, dtype=np.intp)
        cdef signed char[::1] conv = np.empty(k, dtype=np.int8)
        cdef const double *im = NULL if init_mu is None else &init_mu[0, 0]
        cdef const double *ix = NULL if init_xi is None else &init_xi[0, 0]
        cdef int status
        with nogil:
            status = mf_sjj_solve(n, nnz, &pp[0], &pi[0], &w[0], &h[0], act, k, &clamp[0, 0],
                                  im, ix, tol, 0.0, 200, n_threads, &bound[0], &mu[0, 0],
                                  &xi[0, 0], &ns[0], &conv[0])
        return (status, np.asarray(bound), np.asarray(mu), np.asarray(xi), np.asarray(ns),
                np.asarray(conv))

    def plefka(const Py_ssize_t[::1] pp, const Py_ssize_t[::1] pi, const double[::1] w,
               const double[::1] h, int act, int order, const double[:, ::1] clamp,
               int n_threads):
        cdef Py_ssize_t n = h.shape[0], nnz = w.shape[0], k = clamp.shape[0]
        cdef double[::1] G = np.empty(k)
        cdef double[:, ::1] u = np.empty((k, n))
        cdef Py_ssize_t[::1] it = np.empty(k, dtype=np.intp)
        cdef signed char[::1] conv = np.empty(k, dtype=np.int8)
        cdef double[::1] G2 = np.empty(k)
        cdef double[::1] gw = np.empty(nnz)
        cdef double[::1] gh = np.empty(n)
        cdef int status, status2
        with nogil:
            status = mf_plefka_solve(n, nnz, &pp[0], &pi[0], &w[0], &h[0], act, order, k,
                                     &clamp[0, 0], NULL, 1e-10, 500, n_threads, &G[0],
                                     &u[0, 0], &it[0], &conv[0])
            status2 = mf_plefka_gradient(n, nnz, &pp[0], &pi[0], &w[0], &h[0], act, order, k,
                                         &clamp[0, 0], &u[0, 0], &G2[0], &gw[0], &gh[0])
        return (status, np.asarray(G), np.asarray(u), np.asarray(it), np.asarray(conv),
                status2, np.asarray(G2), np.asarray(gw), np.asarray(gh))

    def hmm_fb(const double[::1] sp, const double[:, ::1] A, const double[:, ::1] logpot):
        cdef Py_ssize_t T = logpot.shape[0], n = logpot.shape[1]
        cdef double[:, ::1] gamma = np.empty((T, n))
        cdef double[:, ::1] xi = np.empty((n, n))
        cdef double logz = 0.0
        cdef int status
        with nogil:
            status = mf_hmm_fb_infer(T, n, &sp[0], &A[0, 0], &logpot[0, 0], &gamma[0, 0],
                                     &xi[0, 0], &logz)
        return status, np.asarray(gamma), np.asarray(xi), logz

    # method "structured", "naive", "two starts", or "diag structured" / "diag naive":
    # mf_hmm_infer_diag with the variances var (None: NULL)
    def hmm(str method, const double[::1] sp, const double[:, ::1] A, const double[:, ::1] U,
            const double[:, ::1] V, const double[:, ::1] W, Py_ssize_t lag, int context,
            const double[:, ::1] X, const Py_ssize_t[::1] lengths, Py_ssize_t max_sweeps,
            double tol, int n_threads, const double[::1] var=None):
        cdef Py_ssize_t n = U.shape[0], D = U.shape[1], N = X.shape[0], k = lengths.shape[0]
        cdef double[::1] bound = np.empty(k)
        cdef double[:, ::1] gamma = np.empty((N, n))
        cdef double[:, ::1] logpot = np.empty((N, n))
        cdef Py_ssize_t[::1] ns = np.empty(k, dtype=np.intp)
        cdef signed char[::1] conv = np.empty(k, dtype=np.int8)
        cdef bint structured = method == "structured", two = method == "two starts"
        cdef bint diag = method.startswith("diag ")
        cdef int code = (MF_HMM_METHOD_NAIVE if method.endswith("naive")
                         else MF_HMM_METHOD_STRUCTURED)
        cdef const double *vp = NULL
        cdef int status
        if var is not None:
            vp = &var[0]
        with nogil:
            if diag:
                status = mf_hmm_infer_diag(code, MF_HMM_ALL_STARTS, n, D, lag, context, &sp[0],
                                           &A[0, 0], &U[0, 0], &V[0, 0], &W[0, 0], vp, k,
                                           &lengths[0], &X[0, 0], max_sweeps, tol, n_threads,
                                           &gamma[0, 0], &logpot[0, 0], &bound[0], &ns[0],
                                           &conv[0])
            elif two:
                status = mf_hmm_structured_infer_starts(
                    n, D, lag, context, &sp[0], &A[0, 0], &U[0, 0], &V[0, 0], &W[0, 0], k,
                    &lengths[0], &X[0, 0], max_sweeps, tol, n_threads,
                    MF_HMM_START_NAIVE_LINK | MF_HMM_START_OWN_MEANS, &gamma[0, 0],
                    &logpot[0, 0], &bound[0], &ns[0], &conv[0])
            elif structured:
                status = mf_hmm_structured_infer(n, D, lag, context, &sp[0], &A[0, 0], &U[0, 0],
                                                 &V[0, 0], &W[0, 0], k, &lengths[0], &X[0, 0],
                                                 max_sweeps, tol, n_threads, &gamma[0, 0],
                                                 &logpot[0, 0], &bound[0], &ns[0], &conv[0])
            else:
                status = mf_hmm_naive_infer(n, D, lag, context, &sp[0], &A[0, 0], &U[0, 0],
                                            &V[0, 0], &W[0, 0], k, &lengths[0], &X[0, 0],
                                            max_sweeps, tol, n_threads, &gamma[0, 0],
                                            &bound[0], &ns[0], &conv[0])
        return (status, np.asarray(bound), np.asarray(gamma), np.asarray(logpot),
                np.asarray(ns), np.asarray(conv))

    def nlgbn(const Py_ssize_t[::1] sizes, const signed char[::1] types, const double[::1] w,
              const double[::1] b, const double[::1] var, const double[:, ::1] X,
              const unsigned char[:, ::1] miss, double tol, Py_ssize_t max_sweeps,
              int n_threads):
        cdef Py_ssize_t n = X.shape[0], H = int(np.sum(sizes[:sizes.shape[0] - 1]))
        cdef double[:, ::1] mu = np.empty((n, H))
        cdef double[:, ::1] lv = np.empty((n, H))
        cdef double[::1] bound = np.empty(n)
        cdef Py_ssize_t[::1] ns = np.empty(n, dtype=np.intp)
        cdef unsigned char[::1] conv = np.empty(n, dtype=np.uint8)
        cdef int status
        with nogil:
            status = mf_nlgbn_infer(sizes.shape[0], &sizes[0], &types[0], &w[0], &b[0], &var[0],
                                    n, &X[0, 0], &miss[0, 0], tol, max_sweeps, 0, n_threads,
                                    &mu[0, 0], &lv[0, 0], &bound[0], &ns[0], &conv[0])
        return (status, np.asarray(bound), np.asarray(mu), np.asarray(lv), np.asarray(ns),
                np.asarray(conv))

    # Spot checks of MF_EBADARG: a tiny valid call per function, then one argument made bad
    # (a NULL pointer, a negative size, a NaN).  Returns (status, outputs untouched).
    def bad(str fn, str case):
        cdef Py_ssize_t pp[3]
        cdef Py_ssize_t pi[1]
        cdef Py_ssize_t sizes[2]
        cdef Py_ssize_t lengths[1]
        cdef double w[2]
        cdef double h[3]
        cdef double data[6]
        cdef double sp[2]
        cdef double A[4]
        cdef double U[2]
        cdef double VW[2]
        cdef double vv[1]
        cdef double mu[3]
        cdef double var[3]
        cdef signed char types[3]
        cdef double[::1] out = np.full(16, -7.0)
        cdef Py_ssize_t[::1] ns = np.full(1, -7, dtype=np.intp)
        cdef signed char[::1] cv = np.full(1, -7, dtype=np.int8)
        cdef Py_ssize_t n = 2, k = 1, nnz = 1
        cdef double tol = 1e-9
        cdef int status = 99
        pp[0], pp[1], pp[2], pi[0] = 0, 0, 1, 0
        sizes[0], sizes[1], lengths[0] = 1, 2, 3
        w[0], w[1], h[0], h[1], h[2] = 0.5, -0.3, 0.1, -0.2, 0.3
        data[0], data[1], data[2], data[3], data[4], data[5] = NAN, 1.0, 0.5, -0.2, 1.0, 0.0
        sp[0], sp[1], A[0], A[1], A[2], A[3] = 0.5, 0.5, 0.9, 0.1, 0.2, 0.8
        U[0], U[1], VW[0], VW[1], vv[0] = -1.0, 1.0, 0.1, -0.1, 0.5
        mu[0], mu[1], mu[2] = 0.5, 0.5, 0.5
        var[0], var[1], var[2], types[0], types[1], types[2] = 1.0, 0.5, 2.0, 2, 0, 0
        cdef Py_ssize_t *ppp = pp
        cdef Py_ssize_t *szp = sizes
        cdef double *spp = sp
        cdef double *X = data
        cdef double *up = &data[2]
        cdef double *gam = &out[0]
        if case == "NULL":
            ppp, szp, spp, X, up, gam = NULL, NULL, NULL, NULL, NULL, NULL
        if case == "negative size":
            n, k, nnz = -1, -1, -1
        if case == "NaN":
            w[0], data[2], data[3], h[0], tol, U[0] = NAN, NAN, NAN, NAN, NAN, NAN
        if fn == "gaussian":    # a net 1 -> 2, one pattern
            status = mf_sbn_gaussian_infer(2, szp, w, h, k,
                                           &data[4], NULL, 1e-6, 0.0, 100, 1, mu, &out[0],
                                           &out[3], &ns[0], &cv[0])
        elif fn == "sjj":       # unit 0 -> unit 1, unit 0 free, unit 1 clamped on
            status = mf_sjj_solve(n, nnz, ppp, pi, w, h, 0, k, data, NULL, NULL, tol, 0.0, 100,
                                  1, &out[0], &out[1], &out[3], &ns[0], &cv[0])
        elif fn == "plefka_solve":
            status = mf_plefka_solve(n, nnz, ppp, pi, w, h, 0, 12, k, data, NULL,
                                     1e-10 if tol == tol else tol, 100, 1, &out[0], &out[1],
                                     &ns[0], &cv[0])
        elif fn == "plefka_gradient":   # at u = (1.0, clamped): NaN makes a free mean NaN
            status = mf_plefka_gradient(n, nnz, ppp, pi, w, h, 0, 12, k, data,
                                        up, &out[0],
                                        &out[1], &out[2])
        elif fn == "hmm_fb":    # T = 3, n = 2, log-potentials data[:6] (NaN at [0] removed)
            data[0] = 0.0
            status = mf_hmm_fb_infer(3 if case != "negative size" else -1, 2, spp, A,
                                     data, &out[0], &out[6], &out[10])
        elif fn in ("hmm_structured", "hmm_naive"):  # n = 2, D = 1, lag 1, both contexts
            if case == "negative size":
                lengths[0] = -3
            if fn == "hmm_structured":
                status = mf_hmm_structured_infer(2, 1, 1, 3, sp, A, U, VW, VW, 1, lengths,
                                                 X, 100,
                                                 tol, 1, &out[0], &out[6], &out[12], &ns[0],
                                                 &cv[0])
            else:
                status = mf_hmm_naive_infer(2, 1, 1, 3, sp, A, U, VW, VW, 1, lengths, &data[3],
                                            100, tol, 1, gam,
                                            &out[12], &ns[0], &cv[0])
        elif fn == "hmm_diag":  # as hmm_structured, output variance 0.5 (NaN: only it)
            if case == "negative size":
                lengths[0] = -3
            if case == "NaN":
                U[0], vv[0] = -1.0, NAN
            status = mf_hmm_infer_diag(MF_HMM_METHOD_STRUCTURED, MF_HMM_ALL_STARTS, 2, 1, 1, 3,
                                       sp, A, U, VW, VW, vv, 1, lengths, X, 100, tol, 1,
                                       &out[0], &out[6], &out[12], &ns[0], &cv[0])
        elif fn == "nlgbn":     # a net 1 -> 2 (rectified top unit), one pattern
            status = mf_nlgbn_infer(2, szp, types, w, h, var, k, &data[4], NULL, tol, 100, 0,
                                    1, &out[0], &out[1], &out[2], &ns[0],
                                    <unsigned char *> &cv[0])
        untouched = bool(np.all(np.asarray(out) == -7.0)) and ns[0] == -7 and cv[0] == -7
        if fn == "gaussian":
            untouched = untouched and mu[0] == 0.5 and mu[1] == 0.5 and mu[2] == 0.5
        return status, untouched
    """
)

OUTSIDE_SETUP = textwrap.dedent(
    """
    import os, sys, mfengine
    from setuptools import setup, Extension
    from Cython.Build import cythonize
    # the installed package's .pxd files (found by location, as an editable install is not a
    # directory on sys.path) and its C headers
    where = os.path.dirname(os.path.dirname(mfengine.__file__))
    include = sys.argv.pop()
    setup(name="outside",
          ext_modules=cythonize([Extension("outside", ["outside.pyx"], include_dirs=[include])],
                                include_path=[where], quiet=True))
    """
)

BAD_CASES = ["valid", "NULL", "negative size", "NaN"]
FAMILIES = ["gaussian", "sjj", "plefka_solve", "plefka_gradient", "hmm_fb", "hmm_structured",
            "hmm_naive", "hmm_diag", "nlgbn"]


def _run(cmd, cwd, env=None, **kw):
    res = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, env=env, timeout=600,
                         **kw)
    assert res.returncode == 0, f"{' '.join(cmd)} failed:\n{res.stdout}\n{res.stderr}"
    return res.stdout


def _dag_case(activation, seed=5, n=12, k=20):
    """A random DAG net in CSR form (sigmoid or noisy-OR) and k items, units 7.. clamped (one
    clamped entry made missing)."""
    rng = np.random.default_rng(seed)
    mask = np.tril(rng.random((n, n)) < 0.5, -1)
    mask[np.arange(1, n), np.arange(n - 1)] = True
    S = DagStructure(mask)
    W = np.where(mask, rng.uniform(-1.5, 1.5, (n, n)), 0.0)
    h = rng.uniform(-1, 1, n)
    if activation == "noisy_or":
        W, h = np.abs(W), np.abs(h) + 0.05
    clamp = np.full((k, n), np.nan)
    clamp[:, 7:] = rng.integers(0, 2, (k, n - 7))
    clamp[2, 9] = np.nan
    init_mu = np.where(np.isnan(clamp), rng.random(clamp.shape), 0.0)
    init_xi = rng.random((k, S.nnz if activation == "noisy_or" else n))
    return dict(S=S, pp=np.ascontiguousarray(S.par_ptr, np.intp),
                pi=np.ascontiguousarray(S.par_idx, np.intp), w=S.pack(W), h=h, clamp=clamp,
                init_mu=init_mu, init_xi=init_xi, act=int(activation == "noisy_or"))


def _hmm_case():
    h = mf.ContextHMM(3, 2, lag=2, context="both", infer_tol=1e-13, infer_max_iter=400,
                      progress=False)
    rng = np.random.default_rng(7)
    h.means_ = 1.5 * rng.normal(size=(3, 2)) + 40.0     # far from the origin: the shift matters
    A = rng.random((3, 3)) + np.eye(3)
    h.transmat_ = A / A.sum(1, keepdims=True)
    sp = rng.random(3) + 0.2
    h.startprob_ = sp / sp.sum()
    h.right_means_ = 0.7 * rng.normal(size=(3, 2))
    h.left_means_ = 0.7 * rng.normal(size=(3, 2))
    X = np.concatenate([h.sample(T, random_state=T)[0] for T in (30, 7, 12)])
    X[3, 0] = np.nan                                      # a missing value
    lengths = np.array([30, 7, 12], dtype=np.intp)
    # the centring the Python API applies (the C API contract): each table less the mean of its
    # rows, each output less the sum of those means over the tables its mean has
    u, v, w = (M.mean(axis=0) for M in (h.means_, h.right_means_, h.left_means_))
    centre = []
    for T in lengths:
        t = np.arange(T)[:, None]
        centre.append(u + v * (t + 2 < T) + w * (t >= 2))
    args = dict(sp=h.startprob_, A=h.transmat_, U=h.means_ - u, V=h.right_means_ - v,
                W=h.left_means_ - w, X=np.ascontiguousarray(X - np.concatenate(centre)),
                lengths=lengths, logpot=rng.normal(size=(30, 3)), var=np.array([0.4, 2.7]))
    return h, X, lengths, args


def _hmm_diag_reference(a, method):
    """mf_hmm_infer_diag's numbers on the HMM case with its variances: the unit-covariance
    entry point on tables and data divided by sqrt(variances) in NumPy (the same bits as the
    C division), each bound less its observed entries' ln sqrt(variance)."""
    s = np.sqrt(a["var"])
    white = [np.ascontiguousarray(a[k] / s) for k in ("U", "V", "W")]
    st, bound, gamma, logpot, ns, conv = _chain._capi_selftest(
        method, a["sp"], a["A"], *white, 2, 3, np.ascontiguousarray(a["X"] / s), a["lengths"],
        400, 1e-13, 1)
    assert st == 0
    correction = np.where(np.isnan(a["X"]), 0.0, 0.5 * np.log(a["var"])).sum(axis=1)
    off = np.concatenate([[0], np.cumsum(a["lengths"])])
    return bound - [correction[i:j].sum() for i, j in zip(off[:-1], off[1:])], gamma, logpot


def _nlgbn_case():
    """A random NLGBN of every unit type, 60 patterns with some entries missing."""
    rng = np.random.default_rng(11)
    sizes = [2, 4, 6]
    weights = [rng.normal(0.0, 1.0 / np.sqrt(a), size=(b, a)) for a, b in zip(sizes, sizes[1:])]
    net = mf.NLGBN.from_params(weights, [rng.normal(0.0, 0.7, size=s) for s in sizes],
                               [rng.uniform(0.3, 2.0, size=s) for s in sizes],
                               units=[["binary", "sigmoidal"],
                                      ["rectified", "linear", "binary", "sigmoidal"], "linear"])
    X = net.sample(60, random_state=12)
    miss = rng.random(X.shape) < 0.3
    code = {"linear": 0, "binary": 1, "rectified": 2, "sigmoidal": 3}
    args = dict(sizes=np.array(sizes, dtype=np.intp),
                types=np.array([code[u] for layer in net.units_ for u in layer], np.int8),
                w=np.concatenate([w.ravel() for w in net.weights_]),
                b=np.concatenate(net.biases_), var=np.concatenate(net.variances_),
                X=np.where(miss, np.nan, X), miss=miss.astype(np.uint8))
    return net, X, miss, args


@pytest.fixture(scope="module")
def outside(tmp_path_factory):
    """The outside extension, built once in its own folder (only the installed mfengine and
    its .pxd files visible), run once in a child process on every family's inputs."""
    pytest.importorskip("Cython", reason="building an outside extension needs Cython")
    tmp = tmp_path_factory.mktemp("outside")
    (tmp / "outside.pyx").write_text(OUTSIDE_PYX)
    (tmp / "setup.py").write_text(OUTSIDE_SETUP)
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    _run([sys.executable, "setup.py", "build_ext", "--inplace", "-q", _get_include()], tmp, env)
    net, V, missing = _net_and_data()
    inputs = dict(sizes=np.array(net.sizes), w=np.concatenate([w.ravel() for w in net.weights]),
                  b=np.concatenate(net.biases), V=V, miss=missing)
    for act in ("sigmoid", "noisy_or"):
        inputs.update({f"{act}_{k}": v for k, v in _dag_case(act).items() if k != "S"})
    inputs.update({"hmm_" + k: v for k, v in _hmm_case()[3].items()})
    inputs.update({"ng_" + k: v for k, v in _nlgbn_case()[3].items()})
    np.savez(tmp / "in.npz", **inputs)
    script = textwrap.dedent(
        f"""
        import json, numpy as np, outside as o
        d = np.load({str(tmp / 'in.npz')!r})
        r = {{}}
        s, r["g_bound"], r["g_mu"], r["g_xi"] = o.gaussian_infer(d['sizes'], d['w'], d['b'],
                                                                 d['V'], d['miss'], 1e-6)
        s2, r["g_gw"], r["g_gb"] = o.gaussian_gradient(d['sizes'], d['w'], d['b'], d['V'],
                                                       d['miss'], r["g_mu"], r["g_xi"])
        r["g_status"] = [s, s2]
        for a in ("sigmoid", "noisy_or"):
            g = lambda k: d[a + "_" + k]
            for init in (0, 1):
                res = o.sjj(g("pp"), g("pi"), g("w"), g("h"), int(g("act")), g("clamp"),
                            g("init_mu") if init else None, g("init_xi") if init else None,
                            1e-9, 2)
                for k, v in zip(("status", "bound", "mu", "xi", "ns", "conv"), res):
                    r[f"sjj_{{a}}_{{init}}_{{k}}"] = v
            for order in (11, 12, 22):
                res = o.plefka(g("pp"), g("pi"), g("w"), g("h"), int(g("act")), order,
                               g("clamp"), 2)
                for k, v in zip(("status", "G", "u", "it", "conv", "gstatus", "gG", "gw", "gh"),
                                res):
                    r[f"pl_{{a}}_{{order}}_{{k}}"] = v
        h = lambda k: d["hmm_" + k]
        res = o.hmm_fb(h("sp"), h("A"), h("logpot"))
        for k, v in zip(("status", "gamma", "xi", "logz"), res):
            r["fb_" + k] = v
        for m in ("structured", "naive", "two starts"):
            res = o.hmm(m, h("sp"), h("A"), h("U"), h("V"), h("W"), 2, 3, h("X"), h("lengths"),
                        400, 1e-13, 2)
            for k, v in zip(("status", "bound", "gamma", "logpot", "ns", "conv"), res):
                r[m + "_" + k] = v
        for m in ("structured", "naive"):
            for var in ("diag", "none"):
                res = o.hmm("diag " + m, h("sp"), h("A"), h("U"), h("V"), h("W"), 2, 3, h("X"),
                            h("lengths"), 400, 1e-13, 2, h("var") if var == "diag" else None)
                for k, v in zip(("status", "bound", "gamma", "logpot", "ns", "conv"), res):
                    r[f"{{m}}_{{var}}_{{k}}"] = v
        g = lambda k: d["ng_" + k]
        res = o.nlgbn(g("sizes"), g("types"), g("w"), g("b"), g("var"), g("X"), g("miss"),
                      1e-6, 1000, 2)
        for k, v in zip(("status", "bound", "mu", "lv", "ns", "conv"), res):
            r["ng_" + k] = v
        np.savez({str(tmp / 'out.npz')!r}, **r)
        bad = {{f"{{f}}: {{c}}": o.bad(f, c) for f in {FAMILIES!r} for c in {BAD_CASES!r}}}
        print(json.dumps(bad))
        """
    )
    (tmp / "run.py").write_text(script)
    bad = json.loads(_run([sys.executable, "run.py"], tmp, env))
    return dict(np.load(tmp / "out.npz")), bad


def test_outside_extension_gaussian(outside):
    out, _ = outside
    net, V, missing = _net_and_data()
    r = _kernel(net, V, missing)
    assert list(out["g_status"]) == [0, 0]
    np.testing.assert_array_equal(out["g_bound"], r.bound)
    np.testing.assert_array_equal(out["g_mu"], np.concatenate(r.mu, axis=1))
    # the gradient: against the reference implementation (the Python API's gradient is
    # computed by another path), to 1e-10
    gW, gb = _reference_gradient(net, V, missing, r)
    np.testing.assert_allclose(out["g_gw"], np.concatenate([g.ravel() for g in gW]),
                               rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(out["g_gb"], np.concatenate(gb), rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("activation", ["sigmoid", "noisy_or"])
def test_outside_extension_sjj_matches_the_python_api_bit_for_bit(outside, activation):
    out, _ = outside
    c = _dag_case(activation)
    k = c["clamp"].shape[0]
    for init in (0, 1):
        kw = dict(init_mu=c["init_mu"], init_xi=c["init_xi"]) if init else {}
        bound, mu, xi, ns, conv = sjj.solve(c["S"], c["w"][None], c["h"][None],
                                            np.zeros(k, np.intp), c["clamp"], tol=1e-9,
                                            inner_tol=inner_tol_for(1e-9), max_sweeps=200,
                                            activation=activation, **kw)
        o = {key: out[f"sjj_{activation}_{init}_{key}"] for key in
             ("status", "bound", "mu", "xi", "ns", "conv")}
        assert int(o["status"]) == (0 if conv.all() else 1)
        np.testing.assert_array_equal(o["bound"], bound)
        np.testing.assert_array_equal(o["mu"], mu)
        np.testing.assert_array_equal(o["xi"], xi)
        np.testing.assert_array_equal(o["ns"], ns)
        np.testing.assert_array_equal(o["conv"].astype(bool), conv)


@pytest.mark.parametrize("activation", ["sigmoid", "noisy_or"])
@pytest.mark.parametrize("order", [11, 12, 22])
def test_outside_extension_plefka_matches_the_python_api_bit_for_bit(outside, activation, order):
    out, _ = outside
    c = _dag_case(activation)
    net_of = np.zeros(c["clamp"].shape[0], np.intp)
    args = (c["S"], c["w"][None], c["h"][None], net_of, c["clamp"])
    G, u, n_iter, conv = plefka.solve(*args, order, activation)
    o = {key: out[f"pl_{activation}_{order}_{key}"] for key in
         ("status", "G", "u", "it", "conv", "gstatus", "gG", "gw", "gh")}
    assert int(o["status"]) == (0 if conv.all() else 1)
    np.testing.assert_array_equal(o["G"], G)
    np.testing.assert_array_equal(o["u"], u)
    np.testing.assert_array_equal(o["it"], n_iter)
    np.testing.assert_array_equal(o["conv"].astype(bool), conv)
    # the gradient at that solution: summed over items in item order, as the kernel does
    gw, gh = plefka.gradient(*args, u, order, activation)
    assert int(o["gstatus"]) == 0
    np.testing.assert_array_equal(o["gG"], plefka.objective(*args, u, order, activation))
    np.testing.assert_array_equal(o["gw"], gw.sum(axis=0))
    np.testing.assert_array_equal(o["gh"], gh.sum(axis=0))


def test_outside_extension_hmm_matches_the_python_api_bit_for_bit(outside):
    out, _ = outside
    h, X, lengths, a = _hmm_case()
    for method in ("structured", "naive"):
        r = h.infer(X, lengths, method=method)
        assert int(out[method + "_status"]) == 0
        np.testing.assert_array_equal(out[method + "_bound"], r.bound)
        np.testing.assert_array_equal(out[method + "_gamma"], r.posteriors)
        np.testing.assert_array_equal(out[method + "_ns"], r.n_iter)
        np.testing.assert_array_equal(out[method + "_conv"].astype(bool), r.converged)
    np.testing.assert_array_equal(out["structured_logpot"], h.infer(X, lengths).potentials)
    r = h.set_params(starts=("naive-link", "own-means")).infer(X, lengths)
    assert int(out["two starts_status"]) == 0
    for k, v in (("bound", r.bound), ("gamma", r.posteriors), ("logpot", r.potentials),
                 ("ns", r.n_iter)):
        np.testing.assert_array_equal(out["two starts_" + k], v)
    # the two starts give other potentials than all four here, so a mask not passed on fails
    assert not np.array_equal(out["two starts_logpot"], out["structured_logpot"])
    gamma, xi, logz = _chain.forward_backward(a["sp"], a["A"], a["logpot"])
    assert int(out["fb_status"]) == 0
    np.testing.assert_array_equal(out["fb_gamma"], gamma)
    np.testing.assert_array_equal(out["fb_xi"], xi)
    assert float(out["fb_logz"]) == logz


def test_outside_extension_hmm_diag_is_the_whitened_problem(outside):
    """mf_hmm_infer_diag from the outside extension (2 threads): with variances the numbers of
    the unit-covariance solver on the whitened problem, bound corrected; with NULL the old
    entry points' (and so the Python API's), bit for bit."""
    out, _ = outside
    h, X, lengths, a = _hmm_case()
    for method in ("structured", "naive"):
        bound, gamma, logpot = _hmm_diag_reference(a, method)
        assert int(out[method + "_diag_status"]) == 0
        np.testing.assert_array_equal(out[method + "_diag_gamma"], gamma)
        np.testing.assert_allclose(out[method + "_diag_bound"], bound, rtol=1e-13, atol=0)
        assert not np.allclose(out[method + "_diag_bound"], out[method + "_bound"])
        assert int(out[method + "_none_status"]) == 0
        for k in ("bound", "gamma", "ns", "conv"):
            np.testing.assert_array_equal(out[f"{method}_none_{k}"], out[f"{method}_{k}"])
        if method == "structured":
            np.testing.assert_array_equal(out["structured_diag_logpot"], logpot)
            np.testing.assert_array_equal(out["structured_none_logpot"],
                                          out["structured_logpot"])


def test_outside_extension_nlgbn_matches_the_python_api_bit_for_bit(outside):
    out, _ = outside
    net, X, miss, _ = _nlgbn_case()
    r = net.infer(X, miss, tol=1e-6, max_iter=1000)
    assert int(out["ng_status"]) == 0
    np.testing.assert_array_equal(out["ng_bound"], r.bound)
    np.testing.assert_array_equal(out["ng_mu"], np.hstack(r.mu[:-1]))
    np.testing.assert_array_equal(np.exp(0.5 * out["ng_lv"]), np.hstack(r.sigma[:-1]))
    np.testing.assert_array_equal(out["ng_ns"], r.n_iter)
    np.testing.assert_array_equal(out["ng_conv"].astype(bool), r.converged)


def test_outside_extension_bad_arguments_are_refused_with_nothing_written(outside):
    _, bad = outside
    assert set(bad) == {f"{f}: {c}" for f in FAMILIES for c in BAD_CASES}
    for name, (status, untouched) in bad.items():
        if name.endswith("valid"):
            assert status == mfengine.solver.MF_OK and not untouched, name
        else:
            assert status == mfengine.solver.MF_EBADARG and untouched, name


C_PROGRAM = textwrap.dedent(
    r"""
    #include <stdio.h>
    #include <stdlib.h>
    #include "mfengine_solver.h"

    int main(int argc, char **argv) {
        /* reads: L, sizes, weights, biases, n, V from stdin; prints status and bounds */
        ptrdiff_t L, n, U = 0, W = 0, nv;
        if (scanf("%td", &L) != 1) return 2;
        ptrdiff_t *sizes = malloc(L * sizeof *sizes);
        for (ptrdiff_t l = 0; l < L; l++) { if (scanf("%td", &sizes[l]) != 1) return 2; U += sizes[l]; }
        for (ptrdiff_t l = 0; l + 1 < L; l++) W += sizes[l] * sizes[l + 1];
        nv = sizes[L - 1];
        double *w = malloc(W * sizeof *w), *b = malloc(U * sizeof *b);
        for (ptrdiff_t i = 0; i < W; i++) if (scanf("%lf", &w[i]) != 1) return 2;
        for (ptrdiff_t i = 0; i < U; i++) if (scanf("%lf", &b[i]) != 1) return 2;
        if (scanf("%td", &n) != 1) return 2;
        double *V = malloc(n * nv * sizeof *V), *mu = malloc(n * U * sizeof *mu);
        double *xi = malloc(n * U * sizeof *xi), *bound = malloc(n * sizeof *bound);
        ptrdiff_t *sweeps = malloc(n * sizeof *sweeps);
        signed char *conv = malloc(n);
        for (ptrdiff_t i = 0; i < n * nv; i++) if (scanf("%lf", &V[i]) != 1) return 2;
        for (ptrdiff_t i = 0; i < n * U; i++) mu[i] = 0.5;
        int status = mfengine_sbn_gaussian_infer(L, sizes, w, b, n, V, NULL, 1e-6, 0.0, 200, 1,
                                                 mu, xi, bound, sweeps, conv);
        printf("%d\n", status);
        for (ptrdiff_t p = 0; p < n; p++) printf("%.17g\n", bound[p]);
        return 0;
    }
    """
)


def _python_link_flags():
    libdir = sysconfig.get_config_var("LIBDIR") or ""
    ver = sysconfig.get_config_var("LDVERSION") or sysconfig.get_config_var("VERSION")
    flags = [f"-L{libdir}", f"-lpython{ver}", f"-Wl,-rpath,{libdir}"]
    for key in ("LIBS", "SYSLIBS"):
        flags += (sysconfig.get_config_var(key) or "").split()
    return flags


def test_c_program_calls_the_solver_through_the_header(tmp_path):
    cc = (sysconfig.get_config_var("CC") or "cc").split()
    (tmp_path / "prog.c").write_text(C_PROGRAM)
    so = _gaussian.__file__
    cmd = cc + ["-O1", f"-I{_get_include()}", "prog.c", "-o", "prog", so,
                f"-Wl,-rpath,{os.path.dirname(so)}"] + _python_link_flags()
    _run(cmd, tmp_path)
    net, V, _ = _net_and_data()
    text = [str(len(net.sizes)), " ".join(map(str, net.sizes))]
    text += [" ".join(repr(float(x)) for x in np.concatenate([w.ravel() for w in net.weights]))]
    text += [" ".join(repr(float(x)) for x in np.concatenate(net.biases))]
    text += [str(V.shape[0]), " ".join(str(int(x)) for x in V.ravel())]
    res = subprocess.run([str(tmp_path / "prog")], input="\n".join(text), capture_output=True,
                         text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    lines = res.stdout.split()
    assert int(lines[0]) == 0
    bound = np.array([float(x) for x in lines[1:]])
    np.testing.assert_array_equal(bound, _kernel(net, V).bound)


# The C programs' input and output: raw arrays written by the test (name.bin) and read back
# (out_name.bin).
C_IO = textwrap.dedent(
    r"""
    static void *load(const char *name, size_t *count, size_t size) {
        char path[256];
        snprintf(path, sizeof path, "%s.bin", name);
        FILE *f = fopen(path, "rb");
        if (f == NULL) { fprintf(stderr, "no %s\n", path); exit(2); }
        fseek(f, 0, SEEK_END);
        long bytes = ftell(f);
        fseek(f, 0, SEEK_SET);
        void *p = malloc(bytes ? bytes : 1);
        if (fread(p, 1, bytes, f) != (size_t) bytes) exit(2);
        fclose(f);
        if (count) *count = bytes / size;
        return p;
    }

    static void save(const char *name, const void *p, size_t bytes) {
        char path[256];
        snprintf(path, sizeof path, "out_%s.bin", name);
        FILE *f = fopen(path, "wb");
        if (f == NULL || fwrite(p, 1, bytes, f) != bytes) exit(3);
        fclose(f);
    }

    /* The NLGBN case (ng_*.bin) and room for its outputs. */
    typedef struct {
        size_t L;
        ptrdiff_t *sz, np, H, *ns;
        signed char *types;
        double *w, *b, *var, *X, *mu, *lv, *bound;
        unsigned char *miss, *conv;
    } ng_case;

    static ng_case load_nlgbn(void) {
        ng_case g;
        size_t n_x, nu = 0;
        g.sz = load("ng_sizes", &g.L, sizeof(ptrdiff_t));
        g.types = load("ng_types", NULL, 1);
        g.w = load("ng_w", NULL, 8);
        g.b = load("ng_b", NULL, 8);
        g.var = load("ng_var", NULL, 8);
        g.X = load("ng_X", &n_x, 8);
        g.miss = load("ng_miss", NULL, 1);
        for (size_t l = 0; l < g.L; l++) nu += g.sz[l];
        g.H = nu - g.sz[g.L - 1];
        g.np = n_x / g.sz[g.L - 1];
        g.mu = malloc(g.np * g.H * 8);
        g.lv = malloc(g.np * g.H * 8);
        g.bound = malloc(g.np * 8);
        g.ns = malloc(g.np * sizeof(ptrdiff_t));
        g.conv = malloc(g.np);
        return g;
    }

    /* The context-HMM case (sp, A, logpot, U, V, W, X, lengths, var .bin) and room for its
       outputs: n states, D output dimensions, T steps of the forward-backward case, rows of X
       in n_seq sequences, var (D) output variances. */
    typedef struct {
        size_t n, T, n_seq;
        ptrdiff_t D, rows, *len, *ns;
        double *sp, *A, *lp, *U, *V, *W, *X, *var, *gamma, *pot, *xs, *bound;
        signed char *conv;
    } hmm_case;

    static hmm_case load_hmm(void) {
        hmm_case c;
        size_t nU, N;
        c.sp = load("sp", &c.n, 8);
        c.A = load("A", NULL, 8);
        c.lp = load("logpot", &c.T, 8);
        c.U = load("U", &nU, 8);
        c.V = load("V", NULL, 8);
        c.W = load("W", NULL, 8);
        c.X = load("X", &N, 8);
        c.len = load("lengths", &c.n_seq, sizeof(ptrdiff_t));
        c.var = load("var", NULL, 8);
        c.D = nU / c.n;
        c.rows = N / c.D;
        c.T /= c.n;
        c.gamma = malloc(c.rows * c.n * 8);
        c.pot = malloc(c.rows * c.n * 8);
        c.xs = malloc(c.n * c.n * 8);
        c.bound = malloc(c.n_seq * 8);
        c.ns = malloc(c.n_seq * sizeof(ptrdiff_t));
        c.conv = malloc(c.n_seq);
        return c;
    }

    /* The E-step on the case (tol 1e-6, 1000 sweeps, 2 threads) through `ng`, with the unit
       types `types` (NULL: a bad argument); on success its outputs saved as ng_*. */
    static int run_nlgbn(mfengine_nlgbn_infer_fn ng, ng_case *g, const signed char *types) {
        int s = ng(g->L, g->sz, types, g->w, g->b, g->var, g->np, g->X, g->miss, 1e-6, 1000, 0,
                   2, g->mu, g->lv, g->bound, g->ns, g->conv);
        if (s == 0) {
            save("ng_bound", g->bound, g->np * 8);
            save("ng_mu", g->mu, g->np * g->H * 8);
            save("ng_lv", g->lv, g->np * g->H * 8);
        }
        return s;
    }
    """
)


# A C program embedding Python: mfengine_sjj_solve through its linkable symbol, then the
# functions without one through mfengine_capi_import.
# Reads raw arrays written by the test (name.bin), writes its outputs the same way.
C_PROGRAM_ALL = textwrap.dedent(
    r"""
    #include <Python.h>          /* first: the header then defines mfengine_capi_import */
    #include <math.h>
    #include <stdio.h>
    #include <stdlib.h>
    #include "mfengine_solver.h"

    /* load, save, the HMM and NLGBN cases: C_IO */

    #define GET(fn, type, module, name) \
        type fn = (type) mfengine_capi_import(module, name); \
        if (fn == NULL) { PyErr_Print(); return 3; }

    int main(int argc, char **argv) {
        size_t n1, nnz, nc;
        ptrdiff_t *pp = load("pp", &n1, sizeof(ptrdiff_t));
        ptrdiff_t *pi = load("pi", &nnz, sizeof(ptrdiff_t));
        double *w = load("w", NULL, 8), *h = load("h", NULL, 8), *clamp = load("clamp", &nc, 8);
        ptrdiff_t nu = n1 - 1, k = nc / nu;
        double *bound = malloc(k * 8), *mu = malloc(nc * 8), *xi = malloc(nc * 8);
        double *G = malloc(k * 8), *gw = malloc(nnz * 8), *gh = malloc(nu * 8);
        ptrdiff_t *it = malloc(k * sizeof(ptrdiff_t));
        signed char *conv = malloc(k);
        int s;

        /* Python running in the process (the venv's, where mfengine is installed): the
           capsules need it (the linkable symbols do not: test_c_program_without_python_...) */
        PyConfig config;
        PyConfig_InitPythonConfig(&config);
        PyConfig_SetBytesString(&config, &config.program_name, argv[1]);
        if (PyStatus_Exception(Py_InitializeFromConfig(&config))) return 4;
        PyConfig_Clear(&config);

        /* sjj: a linkable symbol, called without the GIL */
        Py_BEGIN_ALLOW_THREADS
        s = mfengine_sjj_solve(nu, nnz, pp, pi, w, h, 0, k, clamp, NULL, NULL, 1e-9, 0.0, 200,
                               2, bound, mu, xi, it, conv);
        printf("sjj %d\n", s);
        save("sjj_bound", bound, k * 8);
        save("sjj_mu", mu, nc * 8);
        save("sjj_xi", xi, nc * 8);
        w[0] = NAN;
        printf("sjj_nan %d\n", mfengine_sjj_solve(nu, nnz, pp, pi, w, h, 0, k, clamp, NULL,
               NULL, 1e-9, 0.0, 200, 1, bound, mu, xi, it, conv));
        printf("sjj_null %d\n", mfengine_sjj_solve(nu, nnz, NULL, pi, w, h, 0, k, clamp, NULL,
               NULL, 1e-9, 0.0, 200, 1, bound, mu, xi, it, conv));
        printf("sjj_negative %d\n", mfengine_sjj_solve(nu, nnz, pp, pi, w, h, 0, -k, clamp,
               NULL, NULL, 1e-9, 0.0, 200, 1, bound, mu, xi, it, conv));
        Py_END_ALLOW_THREADS
        free(w);
        w = load("w", NULL, 8);

        /* the others: through the extension modules' capsules */
        GET(solve, mfengine_plefka_solve_fn, "mfengine.sbn._plefka", "mf_plefka_solve")
        GET(grad, mfengine_plefka_gradient_fn, "mfengine.sbn._plefka", "mf_plefka_gradient")
        GET(fb, mfengine_hmm_fb_infer_fn, "mfengine.hmm._chain", "mf_hmm_fb_infer")
        GET(st, mfengine_hmm_structured_infer_fn, "mfengine.hmm._chain", "mf_hmm_structured_infer")
        GET(nv, mfengine_hmm_naive_infer_fn, "mfengine.hmm._chain", "mf_hmm_naive_infer")
        GET(st1, mfengine_hmm_structured_infer_starts_fn, "mfengine.hmm._chain",
            "mf_hmm_structured_infer_starts")
        GET(dg, mfengine_hmm_infer_diag_fn, "mfengine.hmm._chain", "mf_hmm_infer_diag")
        Py_BEGIN_ALLOW_THREADS     /* the functions are nogil: run them without the GIL */
        s = solve(nu, nnz, pp, pi, w, h, 0, 12, k, clamp, NULL, 1e-10, 500, 2, G, mu, it, conv);
        printf("plefka %d\n", s);
        save("pl_G", G, k * 8);
        save("pl_u", mu, nc * 8);
        s = grad(nu, nnz, pp, pi, w, h, 0, 12, k, clamp, mu, G, gw, gh);
        printf("plefka_gradient %d\n", s);
        save("pl_gw", gw, nnz * 8);
        save("pl_gh", gh, nu * 8);
        printf("plefka_null %d\n", solve(nu, nnz, pp, pi, w, h, 0, 12, k, NULL, NULL, 1e-10,
               500, 1, G, mu, it, conv));
        Py_END_ALLOW_THREADS

        hmm_case c = load_hmm();
        double logz;
        Py_BEGIN_ALLOW_THREADS
        printf("fb %d\n", fb(c.T, c.n, c.sp, c.A, c.lp, c.gamma, c.xs, &logz));
        save("fb_gamma", c.gamma, c.T * c.n * 8);
        save("fb_xi", c.xs, c.n * c.n * 8);
        save("fb_logz", &logz, 8);
        printf("fb_negative %d\n", fb(-1, c.n, c.sp, c.A, c.lp, c.gamma, c.xs, &logz));
        s = st(c.n, c.D, 2, 3, c.sp, c.A, c.U, c.V, c.W, c.n_seq, c.len, c.X, 400, 1e-13, 2,
               c.gamma, c.pot, c.bound, c.ns, c.conv);
        printf("structured %d\n", s);
        save("st_gamma", c.gamma, c.rows * c.n * 8);
        save("st_logpot", c.pot, c.rows * c.n * 8);
        save("st_bound", c.bound, c.n_seq * 8);
        s = st1(c.n, c.D, 2, 3, c.sp, c.A, c.U, c.V, c.W, c.n_seq, c.len, c.X, 400, 1e-13, 2,
                MFENGINE_HMM_START_OWN_MEANS, c.gamma, c.pot, c.bound, c.ns, c.conv);
        printf("own_means %d\n", s);
        save("om_bound", c.bound, c.n_seq * 8);
        save("om_logpot", c.pot, c.rows * c.n * 8);
        s = nv(c.n, c.D, 2, 3, c.sp, c.A, c.U, c.V, c.W, c.n_seq, c.len, c.X, 400, 1e-13, 2,
               c.gamma, c.bound, c.ns, c.conv);
        printf("naive %d\n", s);
        save("nv_gamma", c.gamma, c.rows * c.n * 8);
        save("nv_bound", c.bound, c.n_seq * 8);
        printf("naive_nan %d\n", nv(c.n, c.D, 2, 3, c.sp, c.A, c.U, c.V, c.W, c.n_seq, c.len,
               c.X, 400, NAN, 2, c.gamma, c.bound, c.ns, c.conv));
        s = dg(MFENGINE_HMM_METHOD_STRUCTURED, MFENGINE_HMM_ALL_STARTS, c.n, c.D, 2, 3, c.sp,
               c.A, c.U, c.V, c.W, c.var, c.n_seq, c.len, c.X, 400, 1e-13, 2, c.gamma, c.pot,
               c.bound, c.ns, c.conv);
        printf("diag %d\n", s);
        save("dg_bound", c.bound, c.n_seq * 8);
        save("dg_gamma", c.gamma, c.rows * c.n * 8);
        save("dg_logpot", c.pot, c.rows * c.n * 8);
        printf("diag_bad_method %d\n", dg(2, MFENGINE_HMM_ALL_STARTS, c.n, c.D, 2, 3, c.sp,
               c.A, c.U, c.V, c.W, c.var, c.n_seq, c.len, c.X, 400, 1e-13, 2, c.gamma, c.pot,
               c.bound, c.ns, c.conv));
        Py_END_ALLOW_THREADS

        ng_case g = load_nlgbn();
        GET(ng, mfengine_nlgbn_infer_fn, "mfengine.nlgbn._estep", "mf_nlgbn_infer")
        Py_BEGIN_ALLOW_THREADS
        printf("nlgbn %d\n", run_nlgbn(ng, &g, g.types));
        printf("nlgbn_null %d\n", run_nlgbn(ng, &g, NULL));
        Py_END_ALLOW_THREADS
        Py_FinalizeEx();
        return 0;
    }
    """
).replace("/* load, save, the HMM and NLGBN cases: C_IO */", C_IO)


def test_c_program_reaches_every_function_through_the_header(tmp_path):
    """sjj through its linkable symbol, the Plefka, HMM and NLGBN kernels through
    mfengine_capi_import, in a C program that embeds Python: the Python API's numbers, bit for
    bit."""
    cc = (sysconfig.get_config_var("CC") or "cc").split()
    (tmp_path / "prog_all.c").write_text(C_PROGRAM_ALL)
    so = _sjj.__file__
    cmd = cc + ["-O1", f"-I{_get_include()}", f"-I{sysconfig.get_paths()['include']}",
                "prog_all.c", "-o", "prog_all", so, f"-Wl,-rpath,{os.path.dirname(so)}"]
    _run(cmd + _python_link_flags(), tmp_path)
    c = _dag_case("sigmoid")
    hm, X, lengths, a = _hmm_case()
    net, Xn, miss, ng_args = _nlgbn_case()
    for name, arr in [("pp", c["pp"]), ("pi", c["pi"]), ("w", c["w"]), ("h", c["h"]),
                      ("clamp", c["clamp"])] + [(k, a[k]) for k in a] \
            + [("ng_" + k, v) for k, v in ng_args.items()]:
        np.ascontiguousarray(arr).tofile(tmp_path / f"{name}.bin")
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    lines = _run([str(tmp_path / "prog_all"), sys.executable], tmp_path, env).split("\n")
    status = {line.split()[0]: int(line.split()[1]) for line in lines if line.strip()}
    EB = mfengine.solver.MF_EBADARG
    assert status == dict(sjj=0, sjj_nan=EB, sjj_null=EB, sjj_negative=EB, plefka=0,
                          plefka_gradient=0, plefka_null=EB, fb=0, fb_negative=EB,
                          structured=0, own_means=0, naive=0, naive_nan=EB, diag=0,
                          diag_bad_method=EB, nlgbn=0, nlgbn_null=EB)

    def out(name):
        return np.fromfile(tmp_path / f"out_{name}.bin")

    k, n = c["clamp"].shape
    net_of = np.zeros(k, np.intp)
    args = (c["S"], c["w"][None], c["h"][None], net_of, c["clamp"])
    bound, mu, xi, _, _ = sjj.solve(*args, tol=1e-9, inner_tol=inner_tol_for(1e-9))
    np.testing.assert_array_equal(out("sjj_bound"), bound)
    np.testing.assert_array_equal(out("sjj_mu"), mu.ravel())
    np.testing.assert_array_equal(out("sjj_xi"), xi.ravel())
    G, u, _, _ = plefka.solve(*args, 12, "sigmoid")
    np.testing.assert_array_equal(out("pl_G"), G)
    np.testing.assert_array_equal(out("pl_u"), u.ravel())
    gw, gh = plefka.gradient(*args, u, 12, "sigmoid")
    np.testing.assert_array_equal(out("pl_gw"), gw.sum(axis=0))
    np.testing.assert_array_equal(out("pl_gh"), gh.sum(axis=0))
    gamma, xs, logz = _chain.forward_backward(a["sp"], a["A"], a["logpot"])
    np.testing.assert_array_equal(out("fb_gamma"), gamma.ravel())
    np.testing.assert_array_equal(out("fb_xi"), xs.ravel())
    assert out("fb_logz")[0] == logz
    r = hm.infer(X, lengths, method="structured")
    np.testing.assert_array_equal(out("st_bound"), r.bound)
    np.testing.assert_array_equal(out("st_gamma"), r.posteriors.ravel())
    np.testing.assert_array_equal(out("st_logpot"), r.potentials.ravel())
    r = hm.set_params(starts="own-means").infer(X, lengths, method="structured")
    np.testing.assert_array_equal(out("om_bound"), r.bound)
    np.testing.assert_array_equal(out("om_logpot"), r.potentials.ravel())
    assert not np.array_equal(out("om_logpot"), out("st_logpot"))
    r = hm.set_params(starts="all").infer(X, lengths, method="naive")
    np.testing.assert_array_equal(out("nv_bound"), r.bound)
    np.testing.assert_array_equal(out("nv_gamma"), r.posteriors.ravel())
    bound, gamma, logpot = _hmm_diag_reference(a, "structured")
    np.testing.assert_allclose(out("dg_bound"), bound, rtol=1e-13, atol=0)
    np.testing.assert_array_equal(out("dg_gamma"), gamma.ravel())
    np.testing.assert_array_equal(out("dg_logpot"), logpot.ravel())
    r = net.infer(Xn, miss, tol=1e-6, max_iter=1000)
    np.testing.assert_array_equal(out("ng_bound"), r.bound)
    np.testing.assert_array_equal(out("ng_mu"), np.hstack(r.mu[:-1]).ravel())
    np.testing.assert_array_equal(np.exp(0.5 * out("ng_lv")), np.hstack(r.sigma[:-1]).ravel())


# ----------------------------------------------------------------------------- bad arguments
# Every case starts from one valid call (net [2, 3, 4], 5 patterns) and changes one argument.
# The calls go through ctypes to the exported symbols, all in one child process.
CTYPES_CHILD = textwrap.dedent(
    r"""
    import ctypes as C, json, math, sys
    import numpy as np
    from mfengine.sbn import _gaussian

    lib = C.CDLL(_gaussian.__file__)
    P, I, D = C.c_ssize_t, C.c_int, C.c_double
    ptr = C.c_void_p
    infer = lib.mfengine_sbn_gaussian_infer
    infer.restype = I
    infer.argtypes = [P, ptr, ptr, ptr, P, ptr, ptr, D, D, P, I, ptr, ptr, ptr, ptr, ptr]
    grad = lib.mfengine_sbn_gaussian_gradient
    grad.restype = I
    grad.argtypes = [P, ptr, ptr, ptr, P, ptr, ptr, ptr, ptr, ptr, ptr]

    def addr(a):
        return None if a is None else a.ctypes.data

    def base():
        rng = np.random.default_rng(0)
        a = dict(L=3, sizes=np.array([2, 3, 4], dtype=np.intp),
                 w=rng.normal(0, 1, 18), b=rng.normal(0, 1, 9), n=5,
                 V=(rng.random((5, 4)) < 0.5).astype(float), miss=None, tol=1e-6,
                 inner=0.0, sweeps=100, threads=1)
        a["mu"] = np.full((5, 9), 0.5)
        a["xi"] = np.full((5, 9), -7.0)
        a["bound"] = np.full(5, -7.0)
        a["nsw"] = np.full(5, -7, dtype=np.intp)
        a["conv"] = np.full(5, -7, dtype=np.int8)
        a["gw"] = np.full(18, -7.0)
        a["gb"] = np.full(9, -7.0)
        return a

    def call_infer(a):
        return infer(a["L"], addr(a["sizes"]), addr(a["w"]), addr(a["b"]), a["n"], addr(a["V"]),
                     addr(a["miss"]), a["tol"], a["inner"], a["sweeps"], a["threads"],
                     addr(a["mu"]), addr(a["xi"]), addr(a["bound"]), addr(a["nsw"]),
                     addr(a["conv"]))

    def call_grad(a):
        return grad(a["L"], addr(a["sizes"]), addr(a["w"]), addr(a["b"]), a["n"], addr(a["V"]),
                    addr(a["miss"]), addr(a["mu"]), addr(a["xi"]), addr(a["gw"]), addr(a["gb"]))

    def untouched(a, mu0):
        same = [a[k] is None or bool((a[k] == -7).all())
                for k in ("xi", "bound", "nsw", "conv", "gw", "gb")]
        return all(same) and (mu0 is None or np.array_equal(a["mu"], mu0, equal_nan=True))

    out = {}
    for name, (fn, code) in json.loads(sys.argv[1]).items():
        a = base()
        if fn == "grad":    # a valid solution to start from
            a["xi"][:] = 0.5
            a["mu"][:, 5:] = a["V"]
        exec(code)
        mu0 = None if a["mu"] is None else a["mu"].copy()
        status = call_infer(a) if fn == "infer" else call_grad(a)
        if fn == "grad" and a["xi"] is not None:
            a["xi"][:] = -7.0    # an input here: the check below is on the outputs
        finite = a["bound"] is not None and bool(np.isfinite(a["bound"]).all())
        out[name] = [status, untouched(a, mu0), finite]
    print(json.dumps(out))
    """
)

EBADARG, EOVERFLOW, OK = mfengine.solver.MF_EBADARG, mfengine.solver.MF_EOVERFLOW, mfengine.solver.MF_OK
BAD_CALLS = {
    # name: (function, python statements changing the valid arguments `a`, expected status)
    "valid infer": ("infer", "", OK),
    "one layer": ("infer", "a['L'] = 1", EBADARG),
    "no layers": ("infer", "a['L'] = 0", EBADARG),
    "negative layers": ("infer", "a['L'] = -3", EBADARG),
    "sizes NULL": ("infer", "a['sizes'] = None", EBADARG),
    "empty layer": ("infer", "a['sizes'][1] = 0", EBADARG),
    "negative layer": ("infer", "a['sizes'][1] = -3", EBADARG),
    "unit count overflows": ("infer", "a['sizes'][:] = [2**62, 2**62, 2**62]", EOVERFLOW),
    "weight count overflows": ("infer", "a['sizes'][:] = [2**40, 2**40, 4]", EOVERFLOW),
    "byte count overflows": ("infer", "a['sizes'][:] = [2, 3, 2**61]", EOVERFLOW),
    "negative patterns": ("infer", "a['n'] = -1", EBADARG),
    "pattern entries overflow": ("infer", "a['n'] = 2**62", EOVERFLOW),
    "pattern units overflow": ("infer", "a['n'] = 2**60 + 2**59", EOVERFLOW),
    "weights NULL": ("infer", "a['w'] = None", EBADARG),
    "biases NULL": ("infer", "a['b'] = None", EBADARG),
    "NaN weight": ("infer", "a['w'][3] = math.nan", EBADARG),
    "infinite weight": ("infer", "a['w'][3] = -math.inf", EBADARG),
    "1e300 weight": ("infer", "a['w'][3] = 1e300", EBADARG),
    "1e50 weight": ("infer", "a['w'][3] = -1e50", OK),
    "NaN bias": ("infer", "a['b'][8] = math.nan", EBADARG),
    "1e51 bias": ("infer", "a['b'][0] = 1e51", EBADARG),
    "V NULL": ("infer", "a['V'] = None", EBADARG),
    "0.5 in V": ("infer", "a['V'][2, 1] = 0.5", EBADARG),
    "NaN in V": ("infer", "a['V'][2, 1] = math.nan", EBADARG),
    "NaN at a missing entry": ("infer", "a['V'][2, 1] = math.nan; a['miss'] = np.zeros((5, 4), "
                               "np.uint8); a['miss'][2, 1] = 1", OK),
    "zero tol": ("infer", "a['tol'] = 0.0", EBADARG),
    "negative tol": ("infer", "a['tol'] = -1e-6", EBADARG),
    "NaN tol": ("infer", "a['tol'] = math.nan", EBADARG),
    "infinite tol": ("infer", "a['tol'] = math.inf", EBADARG),
    "NaN inner_tol": ("infer", "a['inner'] = math.nan", EBADARG),
    "infinite inner_tol": ("infer", "a['inner'] = math.inf", EBADARG),
    "negative inner_tol (defaults)": ("infer", "a['inner'] = -1.0", OK),
    "zero max_sweeps": ("infer", "a['sweeps'] = 0", EBADARG),
    "negative max_sweeps": ("infer", "a['sweeps'] = -5", EBADARG),
    "zero threads (clamped)": ("infer", "a['threads'] = 0", OK),
    "negative threads (clamped)": ("infer", "a['threads'] = -7", OK),
    "2**31 - 1 threads (clamped)": ("infer", "a['threads'] = 2**31 - 1", OK),
    "mu NULL": ("infer", "a['mu'] = None", EBADARG),
    "xi NULL": ("infer", "a['xi'] = None", EBADARG),
    "bound NULL": ("infer", "a['bound'] = None", EBADARG),
    "n_sweeps NULL": ("infer", "a['nsw'] = None", EBADARG),
    "converged NULL": ("infer", "a['conv'] = None", EBADARG),
    "start mean above 1": ("infer", "a['mu'][1, 4] = 1.5", EBADARG),
    "NaN start mean": ("infer", "a['mu'][1, 0] = math.nan", EBADARG),
    "no patterns, NULL arrays": ("infer", "a.update(n=0, V=None, mu=None, xi=None, bound=None, "
                                 "nsw=None, conv=None)", OK),
    "valid gradient": ("grad", "", OK),
    "gradient: one layer": ("grad", "a['L'] = 1", EBADARG),
    "gradient: overflow": ("grad", "a['sizes'][:] = [2**40, 2**40, 4]", EOVERFLOW),
    "gradient: mu NULL": ("grad", "a['mu'] = None", EBADARG),
    "gradient: xi NULL": ("grad", "a['xi'] = None", EBADARG),
    "gradient: grad_weights NULL": ("grad", "a['gw'] = None", EBADARG),
    "gradient: grad_biases NULL": ("grad", "a['gb'] = None", EBADARG),
    "gradient: NaN xi": ("grad", "a['xi'][4, 7] = math.nan", EBADARG),
    "gradient: hidden mean 2": ("grad", "a['mu'][0, 1] = 2.0", EBADARG),
    "gradient: observed visible mean unread": ("grad", "a['mu'][0, 6] = 7.0", OK),
    "gradient: missing visible mean 7": ("grad", "a['mu'][0, 6] = 7.0; a['miss'] = "
                                         "np.zeros((5, 4), np.uint8); a['miss'][0, 1] = 1", EBADARG),
    "gradient: 0.5 in V": ("grad", "a['V'][0, 0] = 0.5", EBADARG),
    "gradient: NaN weight": ("grad", "a['w'][0] = math.nan", EBADARG),
}


# A C program with no Python interpreter at all: every family's linkable entry point.
C_PROGRAM_NO_PYTHON = textwrap.dedent(
    r"""
    #include <math.h>
    #include <stdio.h>
    #include <stdlib.h>
    #include "mfengine_solver.h"

    /* load, save, the HMM and NLGBN cases: C_IO */

    int main(void) {
        hmm_case c = load_hmm();
        double logz;
        printf("fb %d\n", mfengine_hmm_fb_infer(c.T, c.n, c.sp, c.A, c.lp, c.gamma, c.xs, &logz));
        save("fb_gamma", c.gamma, c.T * c.n * 8);
        save("fb_logz", &logz, 8);
        printf("fb_negative %d\n", mfengine_hmm_fb_infer(-1, c.n, c.sp, c.A, c.lp, c.gamma, c.xs,
               &logz));
        for (int threads = 1; threads <= 4; threads *= 2) {   /* 4 threads: the starts apart */
            char name[32];
            int s = mfengine_hmm_structured_infer(c.n, c.D, 2, 3, c.sp, c.A, c.U, c.V, c.W,
                                                  c.n_seq, c.len, c.X, 400, 1e-13, threads,
                                                  c.gamma, c.pot, c.bound, c.ns, c.conv);
            printf("structured%d %d\n", threads, s);
            snprintf(name, sizeof name, "st%d_bound", threads);
            save(name, c.bound, c.n_seq * 8);
            snprintf(name, sizeof name, "st%d_gamma", threads);
            save(name, c.gamma, c.rows * c.n * 8);
        }
        /* two starts on 1 and 4 threads */
        for (int threads = 1; threads <= 4; threads *= 4) {
            char name[32];
            int s = mfengine_hmm_structured_infer_starts(
                c.n, c.D, 2, 3, c.sp, c.A, c.U, c.V, c.W, c.n_seq, c.len, c.X, 400, 1e-13,
                threads, MFENGINE_HMM_START_NAIVE_LINK | MFENGINE_HMM_START_OWN_MEANS, c.gamma,
                c.pot, c.bound, c.ns, c.conv);
            printf("two_starts%d %d\n", threads, s);
            snprintf(name, sizeof name, "ts%d_bound", threads);
            save(name, c.bound, c.n_seq * 8);
            snprintf(name, sizeof name, "ts%d_logpot", threads);
            save(name, c.pot, c.rows * c.n * 8);
        }
        printf("no_start %d\n", mfengine_hmm_structured_infer_starts(
               c.n, c.D, 2, 3, c.sp, c.A, c.U, c.V, c.W, c.n_seq, c.len, c.X, 400, 1e-13, 2, 0u,
               c.gamma, c.pot, c.bound, c.ns, c.conv));
        printf("unknown_start %d\n", mfengine_hmm_structured_infer_starts(
               c.n, c.D, 2, 3, c.sp, c.A, c.U, c.V, c.W, c.n_seq, c.len, c.X, 400, 1e-13, 2,
               MFENGINE_HMM_ALL_STARTS + 1u, c.gamma, c.pot, c.bound, c.ns, c.conv));
        int s = mfengine_hmm_naive_infer(c.n, c.D, 2, 3, c.sp, c.A, c.U, c.V, c.W, c.n_seq,
                                         c.len, c.X, 400, 1e-13, 2, c.gamma, c.bound, c.ns,
                                         c.conv);
        printf("naive %d\n", s);
        save("nv_bound", c.bound, c.n_seq * 8);
        printf("naive_nan %d\n", mfengine_hmm_naive_infer(c.n, c.D, 2, 3, c.sp, c.A, c.U, c.V,
               c.W, c.n_seq, c.len, c.X, 400, NAN, 2, c.gamma, c.bound, c.ns, c.conv));
        /* diagonal variances, naive (no logpot), on 1 and 4 threads; then a variance of 0 */
        for (int threads = 1; threads <= 4; threads *= 4) {
            char name[32];
            int s = mfengine_hmm_infer_diag(MFENGINE_HMM_METHOD_NAIVE, 0u, c.n, c.D, 2, 3, c.sp,
                                            c.A, c.U, c.V, c.W, c.var, c.n_seq, c.len, c.X, 400,
                                            1e-13, threads, c.gamma, NULL, c.bound, c.ns,
                                            c.conv);
            printf("diag_naive%d %d\n", threads, s);
            snprintf(name, sizeof name, "dn%d_bound", threads);
            save(name, c.bound, c.n_seq * 8);
            snprintf(name, sizeof name, "dn%d_gamma", threads);
            save(name, c.gamma, c.rows * c.n * 8);
        }
        c.var[0] = 0.0;
        printf("diag_zero_variance %d\n", mfengine_hmm_infer_diag(
               MFENGINE_HMM_METHOD_NAIVE, 0u, c.n, c.D, 2, 3, c.sp, c.A, c.U, c.V, c.W, c.var,
               c.n_seq, c.len, c.X, 400, 1e-13, 2, c.gamma, NULL, c.bound, c.ns, c.conv));
        c.len[0] = 0;
        printf("structured_zero_length %d\n", mfengine_hmm_structured_infer(
               c.n, c.D, 2, 3, c.sp, c.A, c.U, c.V, c.W, c.n_seq, c.len, c.X, 400, 1e-13, 2,
               c.gamma, c.pot, c.bound, c.ns, c.conv));

        ng_case g = load_nlgbn();
        printf("nlgbn %d\n", run_nlgbn(mfengine_nlgbn_infer, &g, g.types));
        g.var[0] = -1.0;
        printf("nlgbn_negative_variance %d\n", run_nlgbn(mfengine_nlgbn_infer, &g, g.types));

        size_t n1, nnz, nc;
        ptrdiff_t *pp = load("pp", &n1, sizeof(ptrdiff_t));
        ptrdiff_t *pi = load("pi", &nnz, sizeof(ptrdiff_t));
        double *w = load("w", NULL, 8), *hb_ = load("h", NULL, 8), *clamp = load("clamp", &nc, 8);
        ptrdiff_t nu = n1 - 1, k = nc / nu;
        double *G = malloc(k * 8), *pu = malloc(nc * 8), *gw = malloc(nnz * 8), *gh = malloc(nu * 8);
        ptrdiff_t *it = malloc(k * sizeof(ptrdiff_t));
        signed char *conv = malloc(k);
        printf("plefka %d\n", mfengine_plefka_solve(nu, nnz, pp, pi, w, hb_, 0, 12, k, clamp,
               NULL, 1e-10, 500, 2, G, pu, it, conv));
        save("pl_G", G, k * 8);
        save("pl_u", pu, nc * 8);
        printf("plefka_gradient %d\n", mfengine_plefka_gradient(nu, nnz, pp, pi, w, hb_, 0, 12,
               k, clamp, pu, G, gw, gh));
        save("pl_gw", gw, nnz * 8);
        save("pl_gh", gh, nu * 8);
        printf("plefka_null %d\n", mfengine_plefka_solve(nu, nnz, pp, pi, w, hb_, 0, 12, k,
               NULL, NULL, 1e-10, 500, 1, G, pu, it, conv));
        double *sb = malloc(k * 8), *smu = malloc(nc * 8), *sxi = malloc(nc * 8);
        printf("sjj %d\n", mfengine_sjj_solve(nu, nnz, pp, pi, w, hb_, 0, k, clamp, NULL, NULL,
               1e-9, 0.0, 200, 2, sb, smu, sxi, it, conv));
        save("sjj_bound", sb, k * 8);
        save("sjj_mu", smu, nc * 8);
        return 0;
    }
    """
).replace("/* load, save, the HMM and NLGBN cases: C_IO */", C_IO)


def test_c_program_without_python_calls_every_family(tmp_path):
    """Every kernel runs its threads in plain C: a C program that never starts Python links
    the families' modules and gets the Python API's numbers bit for bit (sjj and Plefka on 2
    threads; structured on 1, 2 and 4 threads, 4 > the sequences: the starts run apart; two
    of the starts, through their mask, on 1 and 4; naive with diagonal variances on 1 and 4,
    against the whitened problem), and every bad argument refused (the Gaussian pair:
    test_c_program_calls_the_solver_...)."""
    from mfengine.nlgbn import _estep
    from mfengine.sbn import _plefka

    cc = (sysconfig.get_config_var("CC") or "cc").split()
    (tmp_path / "prog_hmm.c").write_text(C_PROGRAM_NO_PYTHON)
    sos = [_chain.__file__, _estep.__file__, _plefka.__file__, _sjj.__file__]
    cmd = cc + ["-O1", f"-I{_get_include()}", "prog_hmm.c", "-o", "prog_hmm"] + sos + [
        f"-Wl,-rpath,{os.path.dirname(so)}" for so in sos] + _python_link_flags()
    _run(cmd, tmp_path)
    hm, X, lengths, a = _hmm_case()
    net, Xn, miss, ng_args = _nlgbn_case()
    c = _dag_case("sigmoid")
    for name, arr in list(a.items()) + [("ng_" + k, v) for k, v in ng_args.items()] + [
            (k, c[k]) for k in ("pp", "pi", "w", "h", "clamp")]:
        np.ascontiguousarray(arr).tofile(tmp_path / f"{name}.bin")
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    lines = _run([str(tmp_path / "prog_hmm")], tmp_path, env).split("\n")
    status = {line.split()[0]: int(line.split()[1]) for line in lines if line.strip()}
    EB = mfengine.solver.MF_EBADARG
    assert status == dict(fb=0, fb_negative=EB, structured1=0, structured2=0, structured4=0,
                          two_starts1=0, two_starts4=0, no_start=EB, unknown_start=EB, naive=0,
                          naive_nan=EB, diag_naive1=0, diag_naive4=0, diag_zero_variance=EB,
                          structured_zero_length=EB, nlgbn=0,
                          nlgbn_negative_variance=EB, plefka=0, plefka_gradient=0,
                          plefka_null=EB, sjj=0)

    def out(name):
        return np.fromfile(tmp_path / f"out_{name}.bin")

    gamma, _, logz = _chain.forward_backward(a["sp"], a["A"], a["logpot"])
    np.testing.assert_array_equal(out("fb_gamma"), gamma.ravel())
    assert out("fb_logz")[0] == logz
    r = hm.infer(X, lengths, method="structured")
    for threads in (1, 2, 4):
        np.testing.assert_array_equal(out(f"st{threads}_bound"), r.bound)
        np.testing.assert_array_equal(out(f"st{threads}_gamma"), r.posteriors.ravel())
    r = hm.set_params(starts=("naive-link", "own-means")).infer(X, lengths)
    assert not np.array_equal(r.potentials, hm.set_params(starts="all").infer(X, lengths)
                              .potentials)
    for threads in (1, 4):
        np.testing.assert_array_equal(out(f"ts{threads}_bound"), r.bound)
        np.testing.assert_array_equal(out(f"ts{threads}_logpot"), r.potentials.ravel())
    np.testing.assert_array_equal(out("nv_bound"), hm.infer(X, lengths, method="naive").bound)
    bound, gamma, _ = _hmm_diag_reference(a, "naive")
    for threads in (1, 4):
        np.testing.assert_allclose(out(f"dn{threads}_bound"), bound, rtol=1e-13, atol=0)
        np.testing.assert_array_equal(out(f"dn{threads}_bound"), out("dn1_bound"))
        np.testing.assert_array_equal(out(f"dn{threads}_gamma"), gamma.ravel())
    r = net.infer(Xn, miss, tol=1e-6, max_iter=1000)
    np.testing.assert_array_equal(out("ng_bound"), r.bound)
    np.testing.assert_array_equal(out("ng_mu"), np.hstack(r.mu[:-1]).ravel())
    np.testing.assert_array_equal(np.exp(0.5 * out("ng_lv")), np.hstack(r.sigma[:-1]).ravel())
    args = (c["S"], c["w"][None], c["h"][None], np.zeros(len(c["clamp"]), np.intp), c["clamp"])
    G, u, _, _ = plefka.solve(*args, 12, "sigmoid")
    np.testing.assert_array_equal(out("pl_G"), G)
    np.testing.assert_array_equal(out("pl_u"), u.ravel())
    gw, gh = plefka.gradient(*args, u, 12, "sigmoid")
    np.testing.assert_array_equal(out("pl_gw"), gw.sum(axis=0))
    np.testing.assert_array_equal(out("pl_gh"), gh.sum(axis=0))
    bound, mu, _, _, _ = sjj.solve(*args, tol=1e-9, inner_tol=inner_tol_for(1e-9))
    np.testing.assert_array_equal(out("sjj_bound"), bound)
    np.testing.assert_array_equal(out("sjj_mu"), mu.ravel())


def test_c_entry_points_refuse_every_bad_argument():
    """Each bad argument gives its status code (MF_EBADARG, or MF_EOVERFLOW for sizes whose
    products overflow ptrdiff_t) with nothing written; the valid variants give MF_OK and a
    finite bound; nothing crashes."""
    cases = {k: [fn, code] for k, (fn, code, _) in BAD_CALLS.items()}
    res = subprocess.run([sys.executable, "-c", CTYPES_CHILD, json.dumps(cases)],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, f"child process died ({res.returncode}):\n{res.stderr[-3000:]}"
    got = json.loads(res.stdout)
    for name, (fn, _, expected) in BAD_CALLS.items():
        status, untouched, finite = got[name]
        assert status == expected, f"{name}: status {status}, expected {expected}"
        if expected < 0:
            assert untouched, f"{name}: an output was written"
        elif fn == "infer" and "no patterns" not in name:
            assert finite and not untouched, f"{name}: no finite bound written"


# ----------------------------------------------------------------------------- one contract
def test_status_codes_are_the_one_enum_of_mf_status_h():
    text = open(os.path.join(REPO, "csrc", "mf_status.h")).read()
    header = {k: int(v) for k, v in re.findall(r"(MF_[A-Z_]+)\s*=\s*(-?\d+)", text)}
    assert header == {k: getattr(mfengine.solver, k) for k in header}
    assert set(header) == {"MF_OK", "MF_NOT_CONVERGED", "MF_EBADARG", "MF_ENOMEM", "MF_EOVERFLOW"}
    solver_h = open(os.path.join(REPO, "csrc", "mfengine_solver.h")).read()
    assert '#include "mf_status.h"' in solver_h and "enum" not in solver_h


def test_contract_text_is_the_same_in_the_pxd_and_the_module_docstring():
    pxd = open(os.path.join(REPO, "mfengine", "solver.pxd")).read().split("\n")
    comment = [line[2:] if line.startswith("# ") else line[1:] for line in pxd
               if line.startswith("#")]
    assert "\n".join(comment).strip() == mfengine.solver.__doc__.strip()


def test_status_names_the_codes_and_its_docstring_runs():
    import doctest

    from mfengine.solver import Status

    assert [int(s) for s in Status] == [0, 1, -1, -2, -3]
    for name in ("OK", "NOT_CONVERGED", "EBADARG", "ENOMEM", "EOVERFLOW"):
        assert getattr(mfengine.solver, "MF_" + name) is Status[name]
    with pytest.raises(ValueError):
        Status(7)
    assert doctest.testmod(mfengine.solver).failed == 0
    numpydoc = pytest.importorskip("numpydoc.validate")
    assert numpydoc.validate("mfengine.solver.Status")["errors"] == []


def _c_types(params):
    """The parameter types of a C parameter list, names dropped, spelled one way."""
    out = []
    for p in params.split(","):
        p = " ".join(p.replace("*", " * ").split())
        p = re.sub(r"\s+\w+$", "", p) if not p.endswith("*") else p
        words = p.replace("Py_ssize_t", "ptrdiff_t").split()
        stars = words.count("*")
        base = [w for w in words if w not in ("*", "const")]
        out.append(("const " if "const" in words else "") + " ".join(base) + " *" * stars)
    return out


def test_header_declares_every_function_of_the_pxd_with_its_capsule_signature():
    """Each function solver.pxd cimports is declared in mfengine_solver.h, linkable
    (mfengine_<name>) or as a capsule's function-pointer type (mfengine_<name>_fn), with the
    parameter types of the compiled function (its Cython capsule's signature)."""
    import importlib

    pxd = open(os.path.join(REPO, "mfengine", "solver.pxd")).read()
    header = open(os.path.join(REPO, "csrc", "mfengine_solver.h")).read()
    decl = {m[0] or m[1]: _c_types(m[2]) for m in re.findall(
        r"int (?:mfengine_(\w+)|\(\*mfengine_(\w+)_fn\))\(([^;]*?)\);", header)}
    imports = re.findall(r"^from (mfengine\.\S+) cimport (\([^)]*\)|.*)$", pxd, re.M)
    seen = 0
    for module, names in imports:
        capi = importlib.import_module(module).__pyx_capi__
        for name in re.findall(r"\bmf_\w+", names):
            key = name[3:]
            assert key in decl, f"{name} is not declared in mfengine_solver.h"
            assert name in mfengine.solver.__doc__, f"{name} has no contract"
            sig = re.match(r"int \((.*)\)$", capi[name].__repr__().split('"')[1]).group(1)
            assert decl[key] == _c_types(sig), name
            seen += 1
    assert seen == len(decl) == 11
