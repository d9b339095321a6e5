"""Sigmoid belief networks: layered nets with the Gaussian-approximated mean-field bound."""
from mfengine.sbn.layered import SigmoidBeliefNet

__all__ = ["SigmoidBeliefNet"]
