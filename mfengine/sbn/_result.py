"""The answer of ``infer`` for the belief nets (layered and DAG, every method)."""
from dataclasses import dataclass

import numpy as np

from mfengine._base import InferenceResult

__all__ = ["BeliefNetResult"]


@dataclass(repr=False)
class BeliefNetResult(InferenceResult):
    """The mean-field solution of a belief net for a batch of patterns.

    Parameters
    ----------
    bound : ndarray of shape (n_patterns,)
        The objective at the solution, per pattern, in nats: a lower bound on ln P(v) for
        "gaussian" (up to its Gaussian approximation) and "sjj"; for the Plefka methods the
        approximation -G of ln P(v), which may lie on either side of it.  For a
        ``BeliefNetBatch`` the shape is (n_nets,) or (n_nets, m), following ``X``.
    converged : ndarray of bool, shaped like ``bound``
        Whether the solve converged to a solution the package stands behind: its objective
        changed by less than ``tol`` in the last sweep and, for the Plefka methods, its -G
        is not contradicted by a certificate (at most 0, not below the certified lower
        bound in ``certificate``, and explaining the evidence: see ``evidence_support``).
        "exact" results are always converged.
    n_iter : ndarray of int, shaped like ``bound``
        Sweeps (or fixed-point iterations) taken per pattern.
    method : str
        "gaussian", "sjj", "plefka11", "plefka12", "plefka22", "exact" or "hybrid".
    tol : float
        The tolerance of the solve.
    mu : list of ndarray, or ndarray
        Layered nets: one (n_patterns, sizes[l]) array per layer, visible layer included
        (visible ``mu`` is the data; with "gaussian", at a missing visible entry it is the
        approximate predictive probability of a 1).  DAG nets: one (n_patterns, n_units)
        array (batches: (n_nets, [m,] n_units)).
    xi : list of ndarray, ndarray, or None
        Each unit's variational parameter ("gaussian" and "sjj"), laid out like ``mu``; for
        noisy-OR units ("sjj") the q of every edge instead, (n_patterns, nnz) in the
        structure's parent order; None for the Plefka methods, which have none.
    certificate : ndarray or None
        For the Plefka methods on DAG nets: a certified lower bound on ln P(v) for the same
        patterns (the strict "sjj" bound: solved, warm-started at the Plefka means, on
        noisy-OR nets; evaluated at the Plefka means on sigmoid nets), shaped like
        ``bound``.  A -G below it contradicts the certificate (the Plefka solution is then
        not a good approximation: ``converged`` is False there and the call warns).  None
        for the other methods.
    evidence_support : ndarray or None
        For the Plefka methods on noisy-OR nets with units of bias 0 (no leak): per pattern,
        the smallest sum of the parents' posterior means over the units observed on that
        have no leak (+inf where there is none).  Such a unit cannot be on unless a parent
        is, so under the exact posterior the sum is at least 1; below 1 the posterior
        explains less than the evidence requires (``converged`` is False there and the call
        warns).  None otherwise.

    See Also
    --------
    mfengine.InferenceResult : The base every family's result shares.

    Examples
    --------
    >>> import mfengine as mf
    >>> net = mf.SigmoidBeliefNet([2, 4, 8], random_state=0)
    >>> r = net.infer(net.sample(5, random_state=1))
    >>> r.bound.shape, len(r.mu), bool(r.converged.all())
    ((5,), 3, True)
    """

    mu: object = None
    xi: object = None
    certificate: object = None
    evidence_support: object = None


def concatenate_results(parts, method, tol):
    """One ``BeliefNetResult`` from results of consecutive chunks of patterns."""
    def cat(xs):
        if xs[0] is None:
            return None
        if isinstance(xs[0], list):
            return [np.concatenate([x[l] for x in xs]) for l in range(len(xs[0]))]
        return np.concatenate(xs)

    return BeliefNetResult(
        bound=np.concatenate([r.bound for r in parts]),
        converged=np.concatenate([r.converged for r in parts]),
        n_iter=np.concatenate([r.n_iter for r in parts]),
        method=method,
        tol=tol,
        mu=cat([r.mu for r in parts]),
        xi=cat([r.xi for r in parts]),
        certificate=cat([r.certificate for r in parts]),
        evidence_support=cat([r.evidence_support for r in parts]),
    )
