"""The problem record of the Bernoulli mixtures: their parameters as plain, checked arrays."""
from dataclasses import dataclass

import numpy as np

__all__ = ["MixtureParams"]


@dataclass(frozen=True, eq=False)
class MixtureParams:
    """One mixture of products of Bernoulli distributions.

    Parameters
    ----------
    means : ndarray of shape (n_components, n_features)
        Pixel probabilities p_kd, strictly inside (0, 1).
    weights : ndarray of shape (n_components,)
        Mixing proportions pi_k, summing to 1.
    """

    means: np.ndarray
    weights: np.ndarray

    @property
    def n_components(self):
        return self.weights.shape[0]
