"""Nonlinear Gaussian belief networks (Frey & Hinton, 1999).

Linear, binary, rectified and sigmoidal units; variational inference with a factorised
Gaussian posterior (compiled, multi-threaded E-step) and variational EM.

* :class:`NLGBN`: the estimator (``fit``, ``infer``, ``score_samples``, ``score``,
  ``sample``, ``save``; ``mfengine.load`` reads a saved model back).
* :class:`NLGBNInference`: what ``NLGBN.infer`` returns.
* ``UNIT_TYPES``: the unit type names.
"""
from mfengine.nlgbn._result import NLGBNInference
from mfengine.nlgbn.model import NLGBN, UNIT_TYPES

__all__ = ["NLGBN", "NLGBNInference", "UNIT_TYPES"]
