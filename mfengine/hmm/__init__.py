"""Context-sensitive HMMs with structured mean field (Saul & Jordan 1996).

:class:`ContextHMM` is the estimator (hmmlearn's verbs: ``fit``, ``score``, ``score_samples``,
``predict``, ``predict_proba``, ``decode``, ``sample``; mfengine's ``infer``);
:class:`HMMInferenceResult` is what its ``infer`` returns.  The compiled kernel is the private
``mfengine.hmm._chain`` (C sources ``csrc/mf_hmm_*.c``).
"""
try:
    from mfengine.hmm import _chain  # noqa: F401  (compiled)
except ImportError as exc:  # pragma: no cover - only on an unbuilt source tree
    raise ImportError(
        "mfengine.hmm._chain (the compiled HMM kernel) is missing; install the package with "
        f"'pip install .' so that it is compiled ({exc})"
    ) from exc

from mfengine.hmm._result import HMMInferenceResult
from mfengine.hmm.model import ContextHMM

__all__ = ["ContextHMM", "HMMInferenceResult"]
