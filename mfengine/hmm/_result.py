"""The answer of :meth:`ContextHMM.infer <mfengine.ContextHMM.infer>`."""
from dataclasses import dataclass, field

import numpy as np

from mfengine._base import InferenceResult

__all__ = ["HMMInferenceResult"]


@dataclass(repr=False)
class HMMInferenceResult(InferenceResult):
    """What :meth:`ContextHMM.infer` returns: the mean-field solution of every sequence.

    A subclass of :class:`mfengine.InferenceResult`, the answer of every family's ``infer``.

    Parameters
    ----------
    bound : ndarray of shape (n_sequences,)
        Lower bound on ln P(x) of each sequence, in nats (``method="exact"``: ln P(x) itself).
    converged : ndarray of bool, shape (n_sequences,)
        Whether the solve of each sequence stopped because a sweep raised the bound by at most
        ``tol`` nats per time step (rather than by reaching ``max_iter`` sweeps).
    n_iter : ndarray of int, shape (n_sequences,)
        Sweeps made for each sequence (for ``"structured"``: those of the kept start).
    method : str
        ``"structured"``, ``"naive"`` or ``"exact"``.
    tol : float, optional
        The per-time-step tolerance used.
    posteriors : ndarray of shape (n_samples, n_states), optional
        Marginals Q(S_t = i) of the approximating distribution, sequences concatenated
        (None for ``"exact"``).
    potentials : ndarray of shape (n_samples, n_states), optional
        For ``"structured"``: the log-potentials h_t of the chain
        Q(s) ~ startprob[s_0] prod transmat[s_t, s_t+1] prod exp(h_t(s_t)) -- the variational
        parameters; None otherwise.
    history : ndarray of shape (n_sequences, min(max_iter, 1000) + 1), optional
        The bound before the first sweep and after each sweep, NaN after the last.  For
        ``"structured"``: the sweeps of the kept start; for ``"naive"``: entry 0 is the
        first-order posterior's marginals taken as the product Q.
    lengths : ndarray of int, shape (n_sequences,), optional
        Lengths of the sequences.

    See Also
    --------
    ContextHMM.infer : Returns this result.

    Examples
    --------
    >>> import numpy as np
    >>> import mfengine as mf
    >>> h = mf.ContextHMM(2, 1, lag=3, context="right")
    >>> h.means_ = np.array([[-1.0], [1.0]])
    >>> h.right_means_ = np.array([[0.5], [-0.5]])
    >>> X, _ = h.sample(40, random_state=0)
    >>> r = h.infer(X, lengths=[15, 25])
    >>> r.bound.shape, r.posteriors.shape, bool(r.converged.all())
    ((2,), (40, 2), True)
    """

    posteriors: np.ndarray = field(default=None)
    potentials: np.ndarray = field(default=None)
    history: np.ndarray = field(default=None)
    lengths: np.ndarray = field(default=None)
