"""Context-sensitive HMMs with structured mean field (Saul & Jordan 1996).

:class:`ContextHMM` is the estimator (hmmlearn's verbs: ``fit``, ``score``, ``score_samples``,
``predict``, ``predict_proba``, ``decode``, ``sample``; mfengine's ``infer``);
:class:`HMMInferenceResult` is what its ``infer`` returns.  The compiled kernel is the private
``mfengine.hmm._chain`` (C sources ``csrc/mf_hmm_*.c``).
"""
from mfengine.hmm.model import ContextHMM, HMMInferenceResult

__all__ = ["ContextHMM", "HMMInferenceResult"]
