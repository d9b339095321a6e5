"""Nonlinear Gaussian belief networks (Frey & Hinton): linear, binary, rectified and sigmoidal
units, variational inference with a factorised Gaussian posterior, and variational EM."""
from mfengine.nlgbn.model import NLGBN, NLGBNInference, UNIT_TYPES

__all__ = ["NLGBN", "NLGBNInference", "UNIT_TYPES"]
