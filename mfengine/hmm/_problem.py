"""The problem records of the HMM kernel: plain, checked arrays and settings.

A verb of :class:`~mfengine.ContextHMM` checks its parameters and data once
(:mod:`mfengine.hmm._checks`) and builds these records; everything below it
(:mod:`mfengine.hmm._solve`, :mod:`mfengine.hmm._learn`, the compiled kernel) reads the
records and never the estimator.

``HMMParams``
    The model's parameters: initial and transition probabilities, the three mean tables
    (own state, right context, left context) and the output variances, float64 and
    C-contiguous.
``ChainProblem``
    What one call solves with, besides the parameters: the chain's shape (states, lag,
    context) and the solver's settings (sweeps, tolerance, starts, threads).

:func:`centred` moves parameters and data to the coordinates the kernel is handed.
"""
import dataclasses
from dataclasses import dataclass

import numpy as np

__all__ = ["HMMParams", "ChainProblem", "centred"]


@dataclass(frozen=True, eq=False)
class HMMParams:
    """A context-sensitive HMM's parameters.

    Parameters
    ----------
    startprob : ndarray of shape (n_states,)
        Initial state probabilities.
    transmat : ndarray of shape (n_states, n_states)
        Transition probabilities, rows summing to one.
    means : ndarray of shape (n_states, n_features)
        Own-state output means.
    right_means, left_means : ndarray of shape (n_states, n_features)
        Context output means (zeros for an absent context).
    variances : ndarray of shape (n_features,)
        The output variance of each feature, shared by the states (ones: the paper's unit
        covariance).  The kernel's model has unit covariance; :meth:`whitened` turns a model
        with other variances into one of those (``mfengine.hmm._solve.solve`` does).
    """

    startprob: np.ndarray
    transmat: np.ndarray
    means: np.ndarray
    right_means: np.ndarray
    left_means: np.ndarray
    variances: np.ndarray

    @property
    def n_states(self):
        return self.means.shape[0]

    @property
    def n_features(self):
        return self.means.shape[1]

    @property
    def tables(self):
        """``(means, right_means, left_means)``."""
        return self.means, self.right_means, self.left_means

    @property
    def unit(self):
        """Whether every variance is one (the kernel's model as it stands)."""
        return bool(np.all(self.variances == 1.0))

    def whitened(self):
        """``(params_w, sigma)``: the model of the outputs divided by ``sigma`` =
        sqrt(variances), feature by feature: every table divided by ``sigma``, unit
        variances.  ln N(x; m, s^2) = ln N(x / s; m / s, 1) - ln s, so a bound or ln P(x) of
        the whitened data, less ln s for every observed value, is the model's, and the
        posteriors are the same."""
        sigma = np.sqrt(self.variances)
        U, V, W = (np.ascontiguousarray(M / sigma) for M in self.tables)
        return self.replace(means=U, right_means=V, left_means=W,
                            variances=np.ones_like(sigma)), sigma

    def replace(self, **changes):
        """A copy with the fields in ``changes`` replaced (the others are the same arrays)."""
        return dataclasses.replace(self, **changes)


@dataclass(frozen=True, eq=False)
class ChainProblem:
    """The chain's shape and the settings of the solves of one call.

    Parameters
    ----------
    n_states : int
        States n.
    lag : int
        Distance of the context states.
    context : {"right", "left", "both"}
        Which context states shift the output mean.
    max_iter : int
        Mean-field sweeps per sequence of one solve.
    tol : float
        A solve stops when a sweep raises the bound by at most this many nats per time step.
    starts : tuple of str or None
        The structured solver's starts (None: all of them).
    n_threads : int or None
        Requested OpenMP threads (checked; clamped per solve).
    """

    n_states: int
    lag: int
    context: str
    max_iter: int
    tol: float
    starts: tuple = None
    n_threads: int = None

    @property
    def right(self):
        return self.context in ("right", "both")

    @property
    def left(self):
        return self.context in ("left", "both")


def centred(params, lag, context, shape, offsets=None):
    """The coordinates in which every table is centred (see "The origin" in
    docs/derivations/context_hmm.rst): ``(params_c, centre)``, ``params`` with each mean table less the
    mean of its rows, and the (N, D) array to subtract from the data: at each output x_t the
    sum of those row means over the tables whose term its mean has (``means`` always,
    ``right_means`` when s_{t+lag} lies in its sequence, ``left_means`` when s_{t-lag} does),
    so that every residual x_t - m_t is unchanged.  ``lag``, ``context``: the chain's (as
    ``ChainProblem`` has them); ``shape``: the data's (N, D); ``offsets`` (n_seq + 1,): the
    sequences' boundaries (None: one sequence)."""
    right, left = context in ("right", "both"), context in ("left", "both")
    U, V, W = params.tables
    u, v, w = U.mean(axis=0), V.mean(axis=0), W.mean(axis=0)
    centre = np.broadcast_to(u, shape)
    N = shape[0]
    if (right or left) and N > 0:
        offsets = np.array([0, N] if offsets is None else offsets, dtype=np.intp)
        lengths = np.diff(offsets)
        pos = np.arange(N) - np.repeat(offsets[:-1], lengths)
        lag = min(int(lag), N)   # (a lag >= N has no context term; no overflow)
        centre = centre.copy()
        if right:
            centre[pos + lag < np.repeat(lengths, lengths)] += v
        if left:
            centre[pos >= lag] += w
    return params.replace(means=U - u, right_means=V - v, left_means=W - w), centre
