"""The C-level API: an outside Cython extension that cimports mfengine.solver, and a C program
through csrc/mfengine_solver.h, both built against the installed package only."""
import os
import subprocess
import sys
import sysconfig
import textwrap

import numpy as np
import pytest

import mfengine as mf
from mfengine.sbn import _gaussian

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _net_and_data():
    net = mf.SigmoidBeliefNet([3, 7, 16], weight_scale=1.5, random_state=2)
    V = net.sample(40, random_state=3)
    missing = np.zeros(V.shape, dtype=bool)
    missing[::3, ::4] = True
    return net, V, missing


OUTSIDE_PYX = textwrap.dedent(
    """
    # cython: language_level=3
    import numpy as np
    from mfengine.solver cimport (mf_sbn_gaussian_infer, mf_sbn_gaussian_gradient, MF_OK,
                                  MF_NOT_CONVERGED, MF_EBADARG)

    def infer(sizes, weights, biases, V, missing, double tol):
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

    def gradient(sizes, weights, biases, V, missing, mu, xi):
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

    def bad_call():
        cdef Py_ssize_t sz[2]
        cdef double w[1]
        sz[0] = 1
        sz[1] = 0          # an empty layer: refused
        return mf_sbn_gaussian_infer(2, sz, w, w, 0, NULL, NULL, 1e-6, 0.0, 10, 1, NULL, NULL,
                                     NULL, NULL, NULL) == MF_EBADARG
    """
)

OUTSIDE_SETUP = textwrap.dedent(
    """
    import os, mfengine
    from setuptools import setup, Extension
    from Cython.Build import cythonize
    # the installed package's .pxd files (found by location, as an editable install is not a
    # directory on sys.path)
    where = os.path.dirname(os.path.dirname(mfengine.__file__))
    setup(name="outside",
          ext_modules=cythonize([Extension("outside", ["outside.pyx"])], include_path=[where]))
    """
)


def _run(cmd, cwd, env=None):
    res = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, env=env, timeout=600)
    assert res.returncode == 0, f"{' '.join(cmd)} failed:\n{res.stdout}\n{res.stderr}"
    return res.stdout


def test_outside_cython_extension_cimports_the_solver(tmp_path):
    pytest.importorskip("Cython", reason="building an outside extension needs Cython")
    (tmp_path / "outside.pyx").write_text(OUTSIDE_PYX)
    (tmp_path / "setup.py").write_text(OUTSIDE_SETUP)
    # built in its own folder: only the installed mfengine (its .pxd files) is visible
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    _run([sys.executable, "setup.py", "build_ext", "--inplace", "-q"], tmp_path, env)
    net, V, missing = _net_and_data()
    sizes = np.array(net.sizes)
    weights = np.concatenate([w.ravel() for w in net.weights])
    biases = np.concatenate(net.biases)
    script = textwrap.dedent(
        f"""
        import numpy as np, outside
        d = np.load({str(tmp_path / 'in.npz')!r})
        s, bound, mu, xi = outside.infer(d['sizes'], d['w'], d['b'], d['V'], d['miss'], 1e-6)
        s2, gw, gb = outside.gradient(d['sizes'], d['w'], d['b'], d['V'], d['miss'], mu, xi)
        np.savez({str(tmp_path / 'out.npz')!r}, status=s, bound=bound, mu=mu, xi=xi,
                 status2=s2, gw=gw, gb=gb, bad=outside.bad_call())
        """
    )
    np.savez(tmp_path / "in.npz", sizes=sizes, w=weights, b=biases, V=V, miss=missing)
    (tmp_path / "run.py").write_text(script)
    _run([sys.executable, "run.py"], tmp_path, env)
    out = np.load(tmp_path / "out.npz")
    r = mf.infer(net, V, missing=missing, tol=1e-6)
    assert int(out["status"]) == 0
    np.testing.assert_array_equal(out["bound"], r.bound)
    np.testing.assert_array_equal(out["mu"], np.concatenate(r.mu, axis=1))
    gW, gb = net.gradient(V, result=r, missing=missing)
    assert int(out["status2"]) == 0
    np.testing.assert_allclose(out["gw"], np.concatenate([g.ravel() for g in gW]), rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(out["gb"], np.concatenate(gb), rtol=1e-10, atol=1e-10)
    assert bool(out["bad"])


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
    cmd = cc + ["-O1", f"-I{os.path.join(REPO, 'csrc')}", "prog.c", "-o", "prog", so,
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
    np.testing.assert_array_equal(bound, mf.infer(net, V, tol=1e-6).bound)
