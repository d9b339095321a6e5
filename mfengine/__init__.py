"""mfengine: compiled mean-field inference and learning for belief networks.

Every model family is a scikit-learn estimator with the same verbs: ``infer``,
``score_samples``, ``score``, ``fit``, ``sample``, ``save`` (and ``mfengine.load``).

>>> import mfengine as mf
>>> net = mf.SigmoidBeliefNet([4, 12, 36, 100], random_state=0)
>>> X = net.sample(1000, random_state=1)
>>> r = mf.infer(net, X, tol=1e-6)
>>> r.bound.shape
(1000,)
"""
import importlib

__version__ = "0.2.0.dev0"

try:
    from mfengine import _openmp  # noqa: F401  (compiled; fails if the package was not built)
    from mfengine.sbn import _gaussian, _plefka, _sjj  # noqa: F401
except ImportError as exc:  # pragma: no cover - exercised only on an unbuilt source tree
    if exc.name and not exc.name.startswith("mfengine"):
        raise  # a missing dependency (numpy, scipy, scikit-learn), named by Python itself
    raise ImportError(
        "mfengine's compiled extensions are missing or failed to load "
        f"({exc}). Install the package with 'pip install .' (which compiles them) rather than "
        "importing it from an unbuilt source tree."
    ) from exc

from mfengine._base import (ConvergenceWarning, InferenceResult, LogLikelihoodEstimate,
                            PosteriorMarginalsEstimate)
from mfengine._outofcore import fit_chunked, map_chunked, score_chunked
from mfengine._persist import load
from mfengine._config import get_config, get_include, show_config
from mfengine.inference import gradient, infer
from mfengine.sbn import BeliefNet, BeliefNetBatch, BeliefNetResult, SigmoidBeliefNet

# Names whose modules load on first use (they pull in more of scikit-learn, or matplotlib).
_LAZY = {
    "NLGBN": "mfengine.nlgbn",
    "ContextHMM": "mfengine.hmm",
    "GenerativeClassifier": "mfengine.classify",
    "BernoulliMixture": "mfengine.mixture",
    "MixtureClassifier": "mfengine.mixture",
    "datasets": None,
}

__all__ = [
    "__version__",
    "SigmoidBeliefNet",
    "BeliefNet",
    "BeliefNetBatch",
    "NLGBN",
    "ContextHMM",
    "GenerativeClassifier",
    "BernoulliMixture",
    "MixtureClassifier",
    "InferenceResult",
    "LogLikelihoodEstimate",
    "PosteriorMarginalsEstimate",
    "BeliefNetResult",
    "ConvergenceWarning",
    "infer",
    "gradient",
    "load",
    "map_chunked",
    "score_chunked",
    "fit_chunked",
    "datasets",
    "show_config",
    "get_config",
    "get_include",
]


def __getattr__(name):
    if name in _LAZY:
        if _LAZY[name] is None:
            return importlib.import_module(f"mfengine.{name}")
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'mfengine' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(__all__))
