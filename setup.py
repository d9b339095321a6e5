"""Build the Cython/C extensions of mfengine.

Environment switches read at build time:
  MFENGINE_NATIVE=1    compile for the build machine (-march=native); the wheel then only runs
                       on machines like it.  Default: portable x86-64 code, with the hot loops
                       carrying a second AVX2+FMA body chosen at run time (GCC target_clones).
  MFENGINE_NO_OPENMP=1 build without OpenMP (everything runs single-threaded).
  MFENGINE_DEBUG=1     turn Cython's bounds and initialisation checks back on, -O0 -g.
  MFENGINE_ONLY=a,b    development only: build just the named extension modules (e.g.
                       mfengine.sbn._sjj) in place (`python setup.py build_ext --inplace`, or an
                       editable install); the others are neither checked nor built.  A build
                       into a wheel refuses it, so a release always carries every kernel.

A build never leaves a kernel out quietly: every extension of the table below must have its
.pyx and at least one file for each of its C patterns (else the build stops before anything
is compiled, naming what is missing), a compile error stops it, and after compiling it checks
that every module was written.  The public C header csrc/mfengine_solver.h and the headers it
includes (and csrc/mf_status.h) are copied into the package as mfengine/include/, which
``mfengine.get_include()`` returns, so C and Cython callers build against the installation.
"""
import glob
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile

import numpy as np
from Cython.Build import cythonize
from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.command.build_py import build_py


def _flag(name):
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")


NATIVE = _flag("MFENGINE_NATIVE")
DEBUG = _flag("MFENGINE_DEBUG")


def _compiler_accepts(flags, code="int main(void){return 0;}\n", link=True):
    """Whether the C compiler Python was built with compiles (and links) ``code`` with ``flags``."""
    cc = (sysconfig.get_config_var("CC") or "cc").split()
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "probe.c")
        with open(src, "w") as fh:
            fh.write(code)
        cmd = cc + flags + [src, "-o", os.path.join(tmp, "probe")]
        if not link:
            cmd = cc + flags + ["-c", src, "-o", os.path.join(tmp, "probe.o")]
        try:
            res = subprocess.run(cmd, capture_output=True, timeout=120)
        except (OSError, subprocess.SubprocessError):
            return False
        return res.returncode == 0


OMP_PROBE = "#include <omp.h>\nint main(void){return omp_get_max_threads() > 0 ? 0 : 1;}\n"
CLONES_PROBE = (
    '__attribute__((target_clones("arch=x86-64-v3","default"))) '
    "double f(double x){return x*x;}\nint main(void){return (int)f(1.0)-1;}\n"
)

OPENMP = (not _flag("MFENGINE_NO_OPENMP")) and _compiler_accepts(["-fopenmp"], OMP_PROBE)
if not OPENMP and not _flag("MFENGINE_NO_OPENMP"):
    print("mfengine: the compiler does not support OpenMP; building single-threaded", file=sys.stderr)

compile_args = ["-O0", "-g"] if DEBUG else ["-O3", "-g0"]
compile_args += ["-fno-math-errno", "-fno-trapping-math", "-std=c99"]
link_args = []
macros = [("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")]
if OPENMP:
    compile_args.append("-fopenmp")
    link_args.append("-fopenmp")
elif _compiler_accepts(["-fopenmp-simd"], link=False):
    compile_args.append("-fopenmp-simd")
if NATIVE:
    compile_args.append("-march=native")
elif _compiler_accepts([], CLONES_PROBE):
    macros.append(("MF_TARGET_CLONES", "1"))
DISPATCH = any(m[0] == "MF_TARGET_CLONES" for m in macros)

directives = {
    "language_level": 3,
    "boundscheck": DEBUG,
    "wraparound": False,
    "initializedcheck": DEBUG,
    "cdivision": True,
    "embedsignature": True,
}

# Every extension: (module name, Cython source, plain-C sources as glob patterns).  Every entry
# is built (MFENGINE_ONLY narrows that for development); a family's C code may be split over
# files matching its pattern, and each pattern must match at least one file.
EXTENSIONS = [
    ("mfengine._openmp", "mfengine/_openmp.pyx", ["csrc/mf_openmp.c", "csrc/mf_sbn.c",
                                                   "csrc/mf_parallel.c"]),
    ("mfengine.sbn._gaussian", "mfengine/sbn/_gaussian.pyx", ["csrc/mf_sbn.c", "csrc/mf_parallel.c"]),
    ("mfengine.sbn._sjj", "mfengine/sbn/_sjj.pyx", ["csrc/mf_sjj*.c", "csrc/mf_parallel.c"]),
    ("mfengine.sbn._plefka", "mfengine/sbn/_plefka.pyx", ["csrc/mf_plefka*.c", "csrc/mf_parallel.c"]),
    ("mfengine.sbn._importance", "mfengine/sbn/_importance.pyx", []),
    ("mfengine.sbn._sample", "mfengine/sbn/_sample.pyx", []),
    ("mfengine.nlgbn._estep", "mfengine/nlgbn/_estep.pyx", ["csrc/mf_nlgbn*.c", "csrc/mf_parallel.c"]),
    ("mfengine.hmm._chain", "mfengine/hmm/_chain.pyx", ["csrc/mf_hmm*.c", "csrc/mf_parallel.c"]),
]


class BuildError(RuntimeError):
    """The source tree cannot give a complete build of mfengine."""


def ext(name, pyx, csrc):
    """The Extension for one table entry; raises BuildError when one of its sources is missing."""
    missing = [] if os.path.isfile(pyx) else [pyx]
    c_files = set()
    for pattern in csrc:
        found = glob.glob(pattern)
        if not found:
            missing.append(pattern)
        c_files.update(found)
    if missing:
        raise BuildError(
            f"mfengine: cannot build {name}: {', '.join(missing)} not found. Every extension of "
            "setup.py's EXTENSIONS table is part of the package; an sdist must ship every .pyx "
            "and csrc/ file (MANIFEST.in). For development, MFENGINE_ONLY=<module> builds "
            "only the named modules in place."
        )
    return Extension(
        name,
        sources=[pyx] + sorted(c_files),
        # a changed header (mf_numerics.h, mf_status.h, ...) rebuilds every kernel
        depends=sorted(glob.glob("csrc/*.h")),
        include_dirs=["csrc", np.get_include()],
        define_macros=macros,
        extra_compile_args=compile_args,
        extra_link_args=link_args,
    )


# MFENGINE_ONLY=name[,name...] builds just those extensions (in place, for working on one kernel).
ONLY = [n.strip() for n in os.environ.get("MFENGINE_ONLY", "").split(",") if n.strip()]
_unknown = sorted(set(ONLY) - {name for name, _, _ in EXTENSIONS})
if _unknown:
    raise BuildError(
        f"mfengine: MFENGINE_ONLY names unknown extension(s) {', '.join(_unknown)}; "
        f"known: {', '.join(name for name, _, _ in EXTENSIONS)}"
    )
extensions = [ext(name, pyx, csrc) for name, pyx, csrc in EXTENSIONS if not ONLY or name in ONLY]

# The C API's headers, installed as mfengine/include/: mfengine_solver.h, mf_status.h, and every
# header they include with #include "..." (followed transitively), so the copy is self-contained.
PUBLIC_HEADERS = ["csrc/mfengine_solver.h", "csrc/mf_status.h"]
_INCLUDE_RE = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.MULTILINE)


def public_headers():
    """Paths of the public headers and of the local headers they include."""
    todo, seen = list(PUBLIC_HEADERS), []
    while todo:
        path = os.path.normpath(todo.pop())
        if path in seen:
            continue
        if not os.path.isfile(path):
            raise BuildError(f"mfengine: the public header {path} is missing from the source tree")
        seen.append(path)
        with open(path) as fh:
            todo += [os.path.join(os.path.dirname(path), inc) for inc in _INCLUDE_RE.findall(fh.read())]
    return sorted(seen)


def copy_headers(package_dir):
    """Write the public headers into <package_dir>/include; returns the paths written."""
    dest = os.path.join(package_dir, "include")
    os.makedirs(dest, exist_ok=True)
    written = []
    for path in public_headers():
        target = os.path.join(dest, os.path.basename(path))
        shutil.copyfile(path, target)
        written.append(target)
    return written


class BuildPy(build_py):
    """Adds the public C headers to the built package as mfengine/include/."""

    def run(self):
        if getattr(self, "editable_mode", False):
            # an editable install imports the source tree: the headers go beside its modules
            copy_headers("mfengine")
            return super().run()
        super().run()
        copy_headers(os.path.join(self.build_lib, "mfengine"))

    def get_outputs(self, include_bytecode=True):
        outputs = super().get_outputs(include_bytecode)
        if getattr(self, "editable_mode", False):
            return outputs
        dest = os.path.join(self.build_lib, "mfengine", "include")
        return outputs + [os.path.join(dest, os.path.basename(p)) for p in public_headers()]


class BuildExt(build_ext):
    """Cythonizes and compiles every extension, checks each was written, and records the
    build's facts in mfengine/_build_config.py for show_config()."""

    def run(self):
        in_place = self.inplace or getattr(self, "editable_mode", False)
        if ONLY and not in_place:
            raise BuildError(
                "mfengine: MFENGINE_ONLY builds part of the package and is for in-place "
                "development builds only (python setup.py build_ext --inplace, or pip install "
                "-e); unset it to build a wheel or install"
            )
        super().run()
        absent = [e.name for e in self.extensions if not os.path.isfile(self.get_ext_fullpath(e.name))]
        if absent:
            raise BuildError(f"mfengine: the build did not produce {', '.join(absent)}")
        if in_place:
            copy_headers("mfengine")
        info = {
            "openmp": OPENMP,
            "native": NATIVE,
            "debug": DEBUG,
            "runtime_dispatch": DISPATCH,
            "compile_args": compile_args,
            "define_macros": [f"{k}={v}" for k, v in macros],
            "compiler": sysconfig.get_config_var("CC"),
            "cython": __import__("Cython").__version__,
            "numpy_build": np.__version__,
        }
        text = (
            '"""Facts about this build of mfengine, written by setup.py (do not edit)."""\n'
            f"BUILD_INFO = {info!r}\n"
        )
        package_dir = "mfengine" if in_place else os.path.join(self.build_lib, "mfengine")
        os.makedirs(package_dir, exist_ok=True)
        with open(os.path.join(package_dir, "_build_config.py"), "w") as fh:
            fh.write(text)

    def build_extensions(self):
        # Cythonized here rather than when setup.py is read, so that making an sdist or the
        # package metadata does not run Cython (the sdist ships the .pyx, not generated C).
        # The Extension objects stay setuptools' own (build_ext has already prepared them);
        # each takes the C sources that cythonize made of its .pyx.
        done = cythonize(
            self.extensions,
            compiler_directives=directives,
            include_path=["mfengine"],
            quiet=not self.verbose,
        )
        sources = {e.name: e.sources for e in done}
        for e in self.extensions:
            e.sources = sources[e.name]
        super().build_extensions()


setup(
    ext_modules=extensions,
    cmdclass={"build_py": BuildPy, "build_ext": BuildExt},
)
