"""The answer of ``NLGBN.infer``: the Gaussian posterior of each pattern."""
from dataclasses import dataclass, field

from mfengine._base import InferenceResult

__all__ = ["NLGBNInference"]


@dataclass(repr=False)
class NLGBNInference(InferenceResult):
    """The variational posterior of an :class:`NLGBN` for a batch of patterns.

    Returned by :meth:`NLGBN.infer`; adds the Gaussian q's parameters to the fields of
    :class:`mfengine._base.InferenceResult`.

    Parameters
    ----------
    bound : ndarray of shape (n_patterns,)
        The bound F (eq. 11 of Frey & Hinton), in nats, at the solution: a lower bound on
        ln p(x) for every pattern.
    converged : ndarray of bool, shape (n_patterns,)
        Whether each pattern's last sweep raised its bound by less than ``tol``.
    n_iter : ndarray of int, shape (n_patterns,)
        Sweeps over the hidden units taken per pattern.
    method : str
        ``"nlgbn"``: coordinate ascent over each hidden unit's (mu, log sigma^2).
    tol : float
        The per-pattern tolerance used, nats per sweep.
    mu : list of ndarray
        One (n_patterns, sizes[l]) array per layer, top first, of the means of q over the
        units' pre-activations; in the visible (last) layer the data (at missing entries their
        posterior predictive means).
    sigma : list of ndarray
        The standard deviations of q, laid out as ``mu``; 0 in the visible layer.

    See Also
    --------
    NLGBN.infer : Computes it.

    Examples
    --------
    >>> import mfengine as mf
    >>> g = mf.NLGBN([2, 5], units="rectified", random_state=0)
    >>> r = g.infer(g.sample(4, random_state=1))
    >>> r.method, r.bound.shape, [m.shape for m in r.mu]
    ('nlgbn', (4,), [(4, 2), (4, 5)])
    """

    mu: list = field(default=None)
    sigma: list = field(default=None)

