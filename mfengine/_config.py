"""Build and run-time facts: ``mfengine.show_config()``."""
import sys

__all__ = ["get_config", "show_config"]


def get_config():
    """A dict of build facts: version, OpenMP, default threads, dispatch, compile flags."""
    import numpy as np

    from mfengine import __version__, _openmp
    from mfengine._validation import effective_n_threads

    try:
        from mfengine._build_config import BUILD_INFO
    except ImportError:
        BUILD_INFO = {}
    return {
        "version": __version__,
        "python": sys.version.split()[0],
        "numpy": np.__version__,
        "openmp": _openmp.openmp_enabled(),
        "default_n_threads": effective_n_threads(None),
        "runtime_dispatch": _openmp.dispatch_enabled(),
        "native": BUILD_INFO.get("native"),
        "compile_args": BUILD_INFO.get("compile_args"),
        "define_macros": BUILD_INFO.get("define_macros"),
        "compiler": BUILD_INFO.get("compiler"),
        "cython": BUILD_INFO.get("cython"),
    }


def show_config(file=None):
    """Print the version, whether OpenMP is on, the default thread count and the compile flags."""
    cfg = get_config()
    out = file or sys.stdout
    print("mfengine", cfg["version"], file=out)
    for key in ("python", "numpy", "cython", "compiler"):
        print(f"  {key:<18} {cfg[key]}", file=out)
    print(f"  {'openmp':<18} {'on' if cfg['openmp'] else 'off'}", file=out)
    print(f"  {'default threads':<18} {cfg['default_n_threads']}", file=out)
    print(f"  {'runtime dispatch':<18} {'AVX2+FMA / baseline (target_clones)' if cfg['runtime_dispatch'] else 'off'}", file=out)
    print(f"  {'-march=native':<18} {'yes' if cfg['native'] else 'no'}", file=out)
    print(f"  {'compile flags':<18} {' '.join(cfg['compile_args'] or [])}", file=out)
    print(f"  {'macros':<18} {' '.join(cfg['define_macros'] or [])}", file=out)
