"""Mixtures of products of Bernoulli distributions, fit by EM (Saul & Jordan's baseline).

:class:`BernoulliMixture` is the density model; :class:`MixtureClassifier` fits one per class.
Pure NumPy: the E- and M-steps are in ``mfengine.mixture._learn``, the log-likelihoods in
``mfengine.mixture._solve``.
"""
from mfengine.mixture.model import BernoulliMixture, MixtureClassifier

__all__ = ["BernoulliMixture", "MixtureClassifier"]
