"""Sigmoid and noisy-OR belief networks: layered nets with the Gaussian-approximated bound,
DAG nets with the strict bound and the Plefka schemes."""
from mfengine.sbn._result import BeliefNetResult
from mfengine.sbn.batch import BeliefNetBatch
from mfengine.sbn.dag import BeliefNet
from mfengine.sbn.layered import SigmoidBeliefNet

__all__ = ["SigmoidBeliefNet", "BeliefNet", "BeliefNetBatch", "BeliefNetResult"]
