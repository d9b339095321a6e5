"""The one EM loop of the package: NLGBN's variational EM, ContextHMM's Baum-Welch and
mean-field EM, and the Bernoulli mixtures' EM all run through :func:`run_em`.

A family hands over its E-step and M-step as functions of its parameters (whatever object
holds them; the loop only passes it around):

``e_step(params) -> (objective, stats)``
    The objective at ``params`` (a bound on, or the value of, the log-likelihood) and the
    statistics the M-step needs.
``m_step(params, stats) -> params``
    New parameters from the statistics.

and an :class:`EMMonitor` that keeps the history of the objective and says when its gain
fell below the tolerance (hmmlearn's ``ConvergenceMonitor`` has the same role).  The loop
alternates E, M, E, M, ...; an E-step whose objective is below the previous one (EM never
lowers it, so this is rounding at the precision limit, or a numerical failure) is handed to
``fell``, which decides whether to undo the last M-step; an E- or M-step may also raise
:class:`StepFailed`, which undoes it.
"""
import numpy as np

__all__ = ["EMMonitor", "StepFailed", "run_em"]


class StepFailed(Exception):
    """Raised by an E- or M-step that cannot go on (a number left the double range): the loop
    goes back to the parameters of the previous E-step and stops; ``reason`` says why."""

    def __init__(self, reason):
        super().__init__(reason)
        self.reason = reason


class EMMonitor:
    """The objective of each recorded E-step, and whether EM has converged.

    Parameters
    ----------
    tol : float or None
        EM has converged once an E-step's objective rises by less than ``tol`` over the
        previous one (``strict=False``: by at most ``tol``).  None: never by the gain.
    strict : bool, default=True
        Whether a gain equal to ``tol`` is converged (False) or not (True).
    """

    def __init__(self, tol, strict=True):
        self.tol = tol
        self.strict = strict
        self.history = []
        self.converged = False
        self.stopped = None      # why the loop stopped early: None, "tol", "fell", or a reason

    def report(self, value, prev):
        """Record ``value``; returns whether its gain over ``prev`` meets the tolerance."""
        self.history.append(value)
        if self.tol is None:
            return False
        gain = value - prev
        return bool(gain < self.tol if self.strict else gain <= self.tol)


def _stop_at_saved(saved, params, value, stats):
    """The default answer to an objective that fell: the parameters before the last M-step,
    and stop (EM cannot raise it any further at this precision)."""
    return saved[0], saved[1], saved[2], True


def run_em(params, e_step, m_step, n_steps, monitor, *, last="record", fell=None,
           on_record=None):
    """Alternate E- and M-steps from ``params``; returns ``(params, value, stats)`` of the
    last E-step kept.

    Parameters
    ----------
    params : object
        The starting parameters (passed to ``e_step`` and ``m_step`` only).
    e_step, m_step : callable
        See the module docstring.  Either may raise :class:`StepFailed`.
    n_steps : int
        M-steps at most.
    monitor : EMMonitor
        Records the objective of every E-step before an M-step (and, with
        ``last="record"``, of the last one); ``monitor.converged`` is set when the
        tolerance, or a fall of the objective, stopped the loop; ``monitor.stopped`` says
        which.
    last : {"record", "check", "none"}
        What follows the last M-step: an E-step whose objective is recorded ("record"), an
        E-step that only checks that the objective did not fall ("check"), or nothing
        ("none": the parameters of the last M-step are returned unevaluated, with the
        value and statistics of the E-step before it).
    fell : callable, optional
        ``fell(saved, params, value, stats) -> (params, value, stats, stop)`` when an
        E-step's objective is below the previous one; ``saved`` is ``(params, value,
        stats)`` of that previous E-step.  Default: go back to ``saved`` and stop (counted
        as converged).
    on_record : callable, optional
        ``on_record(value, stats)`` after each recorded objective (a progress bar; a warm
        start for the next E-step).
    """
    fell = _stop_at_saved if fell is None else fell
    prev, saved = -np.inf, None
    value = stats = None
    for it in range(n_steps + (0 if last == "none" else 1)):
        try:
            value, stats = e_step(params)
        except StepFailed as exc:
            if saved is None:
                raise
            params, value, stats = saved
            monitor.stopped = exc.reason
            break
        if saved is not None and not value >= prev:
            params, value, stats, stop = fell(saved, params, value, stats)
            if stop:
                monitor.converged, monitor.stopped = True, "fell"
                break
        if it == n_steps:
            if last == "record":
                monitor.converged = monitor.report(value, prev)
                if monitor.converged:
                    monitor.stopped = "tol"
                if on_record is not None:
                    on_record(value, stats)
            break
        if monitor.report(value, prev):
            monitor.converged, monitor.stopped = True, "tol"
            if on_record is not None:
                on_record(value, stats)
            break
        if on_record is not None:
            on_record(value, stats)
        prev, saved = value, (params, value, stats)
        try:
            params = m_step(params, stats)
        except StepFailed as exc:
            params, value, stats = saved
            monitor.stopped = exc.reason
            break
    return params, value, stats
