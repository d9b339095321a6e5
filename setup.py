"""Build the Cython/C extensions of mfengine.

Environment switches read at build time:
  MFENGINE_NATIVE=1    compile for the build machine (-march=native); the wheel then only runs
                       on machines like it.  Default: portable x86-64 code, with the hot loops
                       carrying a second AVX2+FMA body chosen at run time (GCC target_clones).
  MFENGINE_NO_OPENMP=1 build without OpenMP (everything runs single-threaded).
  MFENGINE_DEBUG=1     turn Cython's bounds and initialisation checks back on, -O0 -g.
  MFENGINE_ONLY=a,b    build only the named extension modules (e.g. mfengine.sbn._sjj).
"""
import glob
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile

import numpy as np
from Cython.Build import cythonize
from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext


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

# Every extension: (module name, Cython source, plain-C sources as glob patterns).  An entry
# whose .pyx is not in the tree is skipped, so one model family can be added without touching
# the others; a family's C code may be split over files matching its pattern.
EXTENSIONS = [
    ("mfengine._openmp", "mfengine/_openmp.pyx", ["csrc/mf_sbn.c", "csrc/mf_parallel.c"]),
    ("mfengine.sbn._gaussian", "mfengine/sbn/_gaussian.pyx", ["csrc/mf_sbn.c", "csrc/mf_parallel.c"]),
    ("mfengine.sbn._sjj", "mfengine/sbn/_sjj.pyx", []),
    ("mfengine.sbn._plefka", "mfengine/sbn/_plefka.pyx", []),
    ("mfengine.nlgbn._estep", "mfengine/nlgbn/_estep.pyx", ["csrc/mf_nlgbn*.c"]),
    ("mfengine.hmm._chain", "mfengine/hmm/_chain.pyx", ["csrc/mf_hmm*.c"]),
]


def ext(name, pyx, csrc):
    return Extension(
        name,
        sources=[pyx] + sorted(f for pattern in csrc for f in glob.glob(pattern)),
        include_dirs=["csrc", np.get_include()],
        define_macros=macros,
        extra_compile_args=compile_args,
        extra_link_args=link_args,
    )


# MFENGINE_ONLY=name[,name...] builds just those extensions (for working on one kernel).
ONLY = [n.strip() for n in os.environ.get("MFENGINE_ONLY", "").split(",") if n.strip()]
extensions = [
    ext(name, pyx, csrc)
    for name, pyx, csrc in EXTENSIONS
    if os.path.exists(pyx) and (not ONLY or name in ONLY)
]


class BuildExt(build_ext):
    """Records the build's facts in mfengine/_build_config.py for show_config()."""

    def run(self):
        super().run()
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
        targets = [os.path.join(self.build_lib, "mfengine", "_build_config.py")]
        if self.inplace:
            targets = [os.path.join("mfengine", "_build_config.py")]
        for path in targets:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w") as fh:
                fh.write(text)


setup(
    ext_modules=cythonize(
        extensions,
        compiler_directives=directives,
        include_path=["mfengine"],
    ),
    cmdclass={"build_ext": BuildExt},
)
