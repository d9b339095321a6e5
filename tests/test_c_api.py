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
import mfengine.solver
from mfengine.sbn import _gaussian

try:
    from . import reference as ref
except ImportError:  # tests/ is not a package: pytest puts it on sys.path
    import reference as ref

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


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
    return _gaussian.run(net, V, miss, None, tol, min(1e-3, max(1e-13, 0.1 * np.sqrt(tol))),
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
    import os, sys, mfengine
    from setuptools import setup, Extension
    from Cython.Build import cythonize
    # the installed package's .pxd files (found by location, as an editable install is not a
    # directory on sys.path) and its C headers
    where = os.path.dirname(os.path.dirname(mfengine.__file__))
    include = sys.argv.pop()
    setup(name="outside",
          ext_modules=cythonize([Extension("outside", ["outside.pyx"], include_dirs=[include])],
                                include_path=[where]))
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
    _run([sys.executable, "setup.py", "build_ext", "--inplace", "-q", _get_include()], tmp_path, env)
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
    r = _kernel(net, V, missing)
    assert int(out["status"]) == 0
    np.testing.assert_array_equal(out["bound"], r.bound)
    np.testing.assert_array_equal(out["mu"], np.concatenate(r.mu, axis=1))
    gW, gb = _reference_gradient(net, V, missing, r)
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
