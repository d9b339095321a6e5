"""mfengine: compiled mean-field inference and learning for belief networks.

>>> import mfengine as mf
>>> net = mf.SigmoidBeliefNet([4, 12, 36, 100], random_state=0)
>>> V = net.sample(1000, random_state=1)
>>> r = mf.infer(net, V, tol=1e-6)
>>> r.bound.shape
(1000,)
"""
__version__ = "0.1.0"

try:
    from mfengine import _openmp  # noqa: F401  (compiled; fails if the package was not built)
    from mfengine.sbn import _gaussian, _plefka, _sjj  # noqa: F401
except ImportError as exc:  # pragma: no cover - exercised only on an unbuilt source tree
    raise ImportError(
        "mfengine's compiled extensions are missing or failed to load "
        f"({exc}). Install the package with 'pip install .' (which compiles them) rather than "
        "importing it from an unbuilt source tree."
    ) from exc

from mfengine._config import show_config, get_config
from mfengine.inference import InferenceResult, gradient, infer
from mfengine.sbn import BeliefNet, BeliefNetBatch, SigmoidBeliefNet

__all__ = [
    "__version__",
    "SigmoidBeliefNet",
    "BeliefNet",
    "BeliefNetBatch",
    "InferenceResult",
    "infer",
    "gradient",
    "show_config",
    "get_config",
]


def __getattr__(name):
    # Modules with optional dependencies load on first use.
    if name in ("GenerativeClassifier",):
        from mfengine import classify

        return getattr(classify, name)
    if name in ("BernoulliMixture", "MixtureClassifier"):
        from mfengine import baselines

        return getattr(baselines, name)
    if name == "NLGBN":
        from mfengine.nlgbn import NLGBN

        return NLGBN
    if name == "ContextHMM":
        from mfengine.hmm import ContextHMM

        return ContextHMM
    if name == "datasets":
        import importlib

        return importlib.import_module("mfengine.datasets")
    raise AttributeError(f"module 'mfengine' has no attribute {name!r}")
