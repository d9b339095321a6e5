"""Build and run-time facts: ``mfengine.show_config()``, and ``mfengine.get_include()``."""
import os
import sys

__all__ = ["get_config", "get_include", "show_config"]


def get_include():
    """Return the directory that holds mfengine's C headers.

    The build copies ``mfengine_solver.h`` (the C API of the mean-field solvers) and the
    headers it includes (``mf_status.h``, the status codes) into the installed package, so
    C and Cython callers compile against the installation rather than a source checkout.

    Returns
    -------
    str
        Absolute path of the ``include`` directory inside the installed package: pass it to
        the compiler with ``-I``, or add it to an ``Extension``'s ``include_dirs``.

    Raises
    ------
    FileNotFoundError
        If the headers are not there (an unbuilt source tree: build it with ``pip install .``,
        or ``python setup.py build_ext --inplace`` for development).

    See Also
    --------
    show_config : Print how this installation was built.

    Examples
    --------
    >>> import os
    >>> import mfengine
    >>> os.path.isfile(os.path.join(mfengine.get_include(), "mfengine_solver.h"))
    True
    """
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "include")
    if not os.path.isfile(os.path.join(path, "mfengine_solver.h")):
        raise FileNotFoundError(
            f"mfengine's C headers are not in {path}: build the package (pip install ., or "
            "python setup.py build_ext --inplace in a source checkout) to install them"
        )
    return path


def get_config():
    """Return the facts of this build and installation.

    Returns
    -------
    dict
        Keys ``version``, ``python``, ``numpy`` (the versions in use), ``numpy_build`` (the
        NumPy the kernels were compiled against; None when unknown), ``openmp`` (whether the
        kernels were compiled with OpenMP), ``default_n_threads`` (the thread count used when
        ``n_threads=None``), ``runtime_dispatch`` (whether the hot loops choose an AVX2+FMA
        body at run time), ``native``, ``compile_args``, ``define_macros``, ``compiler``,
        ``cython`` (how the extensions were compiled; None when unknown) and ``include``
        (the directory of the C headers, see :func:`get_include`; None when absent).

    See Also
    --------
    show_config : Print the same facts.

    Examples
    --------
    >>> import mfengine
    >>> cfg = mfengine.get_config()
    >>> cfg["version"] == mfengine.__version__
    True
    """
    import numpy as np

    from mfengine import __version__, _openmp
    from mfengine._validation import effective_n_threads

    try:
        from mfengine._build_config import BUILD_INFO
    except ImportError:
        BUILD_INFO = {}
    try:
        include = get_include()
    except FileNotFoundError:
        include = None
    return {
        "version": __version__,
        "python": sys.version.split()[0],
        "numpy": np.__version__,
        "numpy_build": BUILD_INFO.get("numpy_build"),
        "openmp": _openmp.openmp_enabled(),
        "default_n_threads": effective_n_threads(None),
        "runtime_dispatch": _openmp.dispatch_enabled(),
        "native": BUILD_INFO.get("native"),
        "compile_args": BUILD_INFO.get("compile_args"),
        "define_macros": BUILD_INFO.get("define_macros"),
        "compiler": BUILD_INFO.get("compiler"),
        "cython": BUILD_INFO.get("cython"),
        "include": include,
    }


def show_config(file=None):
    """Print the version, whether OpenMP is on, the default thread count and the compile flags.

    Parameters
    ----------
    file : file-like, optional
        Where to write; standard output when None.

    See Also
    --------
    get_config : The same facts as a dict.

    Examples
    --------
    >>> import io
    >>> import mfengine
    >>> buf = io.StringIO()
    >>> mfengine.show_config(file=buf)
    >>> buf.getvalue().startswith("mfengine")
    True
    """
    cfg = get_config()
    out = file or sys.stdout
    print("mfengine", cfg["version"], file=out)
    for key in ("python", "numpy", "numpy_build", "cython", "compiler"):
        print(f"  {key.replace('_', ' '):<18} {cfg[key]}", file=out)
    print(f"  {'openmp':<18} {'on' if cfg['openmp'] else 'off'}", file=out)
    print(f"  {'default threads':<18} {cfg['default_n_threads']}", file=out)
    print(f"  {'runtime dispatch':<18} {'AVX2+FMA / baseline (target_clones)' if cfg['runtime_dispatch'] else 'off'}", file=out)
    print(f"  {'-march=native':<18} {'yes' if cfg['native'] else 'no'}", file=out)
    print(f"  {'compile flags':<18} {' '.join(cfg['compile_args'] or [])}", file=out)
    print(f"  {'macros':<18} {' '.join(cfg['define_macros'] or [])}", file=out)
    print(f"  {'C headers':<18} {cfg['include'] or 'not installed'}", file=out)
