"""Context-sensitive HMMs with structured mean field (Saul & Jordan 1996)."""
from mfengine.hmm.model import ContextHMM, HMMInferenceResult

__all__ = ["ContextHMM", "HMMInferenceResult"]
