"""Sigmoid belief networks: layered nets with the Gaussian-approximated mean-field bound, and
belief nets over any DAG (sigmoid or noisy-OR units)."""
from mfengine.sbn.dag import BeliefNet, BeliefNetBatch
from mfengine.sbn.layered import SigmoidBeliefNet

__all__ = ["SigmoidBeliefNet", "BeliefNet", "BeliefNetBatch"]
