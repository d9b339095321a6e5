"""What every model family shares: the result base, the convergence warning, persistence.

Every estimator of mfengine (``SigmoidBeliefNet``, ``BeliefNet``, ``NLGBN``, ``ContextHMM``,
``GenerativeClassifier``) is a scikit-learn estimator: hyperparameters are constructor
arguments stored unchanged (so ``get_params``, ``set_params`` and ``clone`` work), fitted
parameters end in ``_``.  This module adds the pieces scikit-learn has no name for:

* :class:`InferenceResult`, the base of every family's answer to ``infer``;
* :class:`ConvergenceWarning` and :func:`warn_unconverged`, so that no solve that stopped
  early returns silently;
* :class:`PersistMixin` (``model.save(path)``; :func:`load` and the format live in
  :mod:`mfengine._persist`);
* the routing of every estimator's verbs to dask collections and on-disk arrays
  (``PersistMixin.__init_subclass__``; the routes live in :mod:`mfengine._outofcore`).
"""
import os
import sys
import warnings
from dataclasses import dataclass, field

import numpy as np

from mfengine import _persist
from mfengine._persist import FORMAT_VERSION, load  # noqa: F401  (their home before)
from mfengine._validation import validate_params

try:  # a subclass of scikit-learn's, so that filters on either one catch both
    from sklearn.exceptions import ConvergenceWarning as _SkConvergenceWarning
except ImportError:  # pragma: no cover - scikit-learn is a dependency of the estimator layer
    _SkConvergenceWarning = UserWarning

__all__ = [
    "ConvergenceWarning",
    "InferenceResult",
    "PersistMixin",
    "load",
    "warn_unconverged",
    "FORMAT_VERSION",
]

# Warnings point at the first frame outside this directory (see user_stacklevel).
_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


class ConvergenceWarning(_SkConvergenceWarning):
    """A mean-field solve or a training run stopped before meeting its tolerance.

    A subclass of scikit-learn's ``ConvergenceWarning``: a filter on either one applies.

    Examples
    --------
    >>> import warnings
    >>> import mfengine as mf
    >>> net = mf.SigmoidBeliefNet([4, 8, 16], weight_scale=4.0, random_state=0)
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     _ = net.infer(net.sample(50, random_state=1), max_iter=1)
    >>> any(issubclass(w.category, mf.ConvergenceWarning) for w in caught)
    True
    """


def user_stacklevel():
    """The ``stacklevel`` that makes a warning point at the caller's code, outside mfengine.

    Call it as the argument of ``warnings.warn`` inside the package: it counts the frames from
    the function calling ``warnings.warn`` back to the first one whose file lies outside the
    mfengine package (the user's line, or the library that called mfengine), however many of
    the package's own functions and wrappers lie between.

    Returns
    -------
    stacklevel : int
        For ``warnings.warn(..., stacklevel=user_stacklevel())``.
    """
    frame = sys._getframe(1)   # the function that calls warnings.warn
    level = 1
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE_DIR):
        frame = frame.f_back
        level += 1
    return level


def warn_unconverged(converged, what, hint):
    """Warn (with :class:`ConvergenceWarning`) when some entries of ``converged`` are False.

    The warning points at the first caller outside mfengine (see :func:`user_stacklevel`).

    Parameters
    ----------
    converged : array_like of bool
        One flag per pattern (or sequence, or net).
    what : str
        The call that solved them, for example ``"infer(method='sjj')"``.
    hint : str
        What to try, for example ``"raise max_iter or loosen tol"``.

    Returns
    -------
    n_unconverged : int
        How many entries of ``converged`` are False.
    """
    converged = np.asarray(converged, dtype=bool)
    bad = int(converged.size - np.count_nonzero(converged))
    if bad:
        warnings.warn(
            f"{what}: {bad} of {converged.size} solves did not converge within the iteration "
            f"budget; {hint}",
            ConvergenceWarning,
            stacklevel=user_stacklevel(),
        )
    return bad


@dataclass(repr=False)
class InferenceResult:
    """The mean-field solution for a batch of patterns (or sequences).

    Every family's ``infer`` returns a subclass of this class, which adds the family's
    variational parameters.

    Parameters
    ----------
    bound : ndarray
        The objective at the solution, per pattern (or sequence), in nats.  A lower bound on
        ln P(x) except for the Plefka methods, whose ``bound`` is -G, an approximation of
        ln P(x) that may lie on either side of it.
    converged : ndarray of bool
        Whether each solve met its tolerance.
    n_iter : ndarray of int
        Sweeps (or iterations) taken per pattern.
    method : str
        The mean-field method that produced the result.
    tol : float, optional
        The tolerance of the solve.

    Examples
    --------
    >>> import mfengine as mf
    >>> net = mf.SigmoidBeliefNet([2, 4, 8], random_state=0)
    >>> isinstance(net.infer(net.sample(3, random_state=1)), mf.InferenceResult)
    True
    """

    bound: np.ndarray
    converged: np.ndarray
    n_iter: np.ndarray
    method: str
    tol: float = field(default=None)

    def __repr__(self):
        n = int(np.size(self.bound))
        mean = float(np.mean(self.bound)) if n else float("nan")
        return (
            f"{type(self).__name__}(method={self.method!r}, n={n}, mean_bound={mean:.6g}, "
            f"converged={int(np.count_nonzero(self.converged))}/{np.size(self.converged)})"
        )


@dataclass(repr=False)
class LogLikelihoodEstimate:
    """A sampled estimate of ln P(x) per pattern, with its standard error.

    Returned by ``log_likelihood(X, ...)`` of the latent-variable families; their
    ``score_samples(X, method="importance", ...)`` returns ``estimate`` alone.

    Parameters
    ----------
    estimate : ndarray of shape (n_patterns,)
        The estimate of ln P(x) per pattern, in nats: the log of the average importance weight.
    stderr : ndarray of shape (n_patterns,)
        Its standard error (delta method on the log of the mean weight).
    bound : ndarray of shape (n_patterns,)
        The mean-field objective of the proposal, for comparison (nan where none is computed).
    n_samples : int
        Samples drawn per pattern.
    ess : ndarray of shape (n_patterns,)
        Effective sample size of the weights per pattern, (sum w)^2 / sum w^2.
    method : str
        ``"importance"`` or ``"ais"``.

    Examples
    --------
    >>> import numpy as np
    >>> import mfengine as mf
    >>> est = mf.LogLikelihoodEstimate(np.array([-3.0]), np.array([0.01]), np.array([-3.2]),
    ...                                100, np.array([80.0]), "importance")
    >>> est
    LogLikelihoodEstimate(method='importance', n=1, n_samples=100, mean=-3, mean_stderr=0.01)
    """

    estimate: np.ndarray
    stderr: np.ndarray
    bound: np.ndarray
    n_samples: int
    ess: np.ndarray
    method: str = "importance"

    def __repr__(self):
        n = int(np.size(self.estimate))
        mean = float(np.mean(self.estimate)) if n else float("nan")
        se = float(np.sqrt(np.sum(np.square(self.stderr)))) / n if n else float("nan")
        return (f"{type(self).__name__}(method={self.method!r}, n={n}, "
                f"n_samples={self.n_samples}, mean={mean:.6g}, mean_stderr={se:.3g})")


#: ``posterior_marginals`` warns for a pattern whose importance weights' effective sample size
#: is below this: its standard errors then rest on a handful of samples.
MIN_MARGINALS_ESS = 10


def warn_low_marginals_ess(ess, n_samples):
    """``posterior_marginals``' warning when some pattern's effective sample size is below
    MIN_MARGINALS_ESS."""
    ess = np.asarray(ess)
    low = ess < MIN_MARGINALS_ESS
    if np.any(low):
        warnings.warn(
            f"posterior_marginals: the effective sample size is below "
            f"{MIN_MARGINALS_ESS} on {int(low.sum())} of {low.size} patterns (smallest "
            f"{float(np.min(ess)):.3g} of {n_samples} samples): a few samples carry "
            "the estimate there, and its standard errors may understate its error (the "
            "mean-field proposal is far from the posterior, or the posterior sits on a "
            "few states); compare with another seed or more samples", RuntimeWarning,
            stacklevel=user_stacklevel())


@dataclass(repr=False)
class PosteriorMarginalsEstimate:
    """Importance-sampled posterior marginals per pattern, with standard errors.

    Returned by ``posterior_marginals(X, ...)`` of the belief nets (binary units: the mean is
    P(unit = 1 | x)) and of :class:`mfengine.NLGBN` (continuous units: the mean is
    E[pre-activation | x], with the posterior standard deviation ``sd``).

    Parameters
    ----------
    mean : ndarray of shape (n_patterns, n_units)
        The self-normalised estimate of every unit's posterior mean, in unit order (an
        observed unit reads its value).
    stderr : ndarray of shape (n_patterns, n_units)
        Each estimate's standard error: the delta method's sampling error,
        sqrt(sum_s w_s^2 (x_s - mean)^2) / sum_s w_s over the samples' weights w_s and values
        x_s (for binary units each sample's probability of a 1 given its other units), with
        the estimate's float64 resolution (n_samples + 16) * 2**-52 * abs(mean) added in
        quadrature: the bound on the rounding of its sums, below which two runs may differ
        by rounding alone (and where one draw carries the weight, the sampling error alone
        can be smaller than an ulp).  0 at an observed unit, NaN where every weight is 0.
    ess : ndarray of shape (n_patterns,)
        Effective sample size of the weights per pattern, (sum w)^2 / sum w^2.
    n_samples : int
        Samples drawn per pattern.
    log_likelihood : LogLikelihoodEstimate
        The estimate of ln P(x) from the same samples.
    sd : ndarray of shape (n_patterns, n_units) or None
        Continuous units only: the self-normalised estimate of each unit's posterior standard
        deviation (0 at an observed unit); None for binary nets, whose marginal's spread is
        sqrt(mean (1 - mean)).

    Examples
    --------
    >>> import numpy as np
    >>> import mfengine as mf
    >>> est = mf.PosteriorMarginalsEstimate(np.array([[0.2, 1.0]]), np.array([[0.01, 0.0]]),
    ...                                     np.array([80.0]), 100, None)
    >>> est
    PosteriorMarginalsEstimate(n=1, n_units=2, n_samples=100, max_stderr=0.01)
    """

    mean: np.ndarray
    stderr: np.ndarray
    ess: np.ndarray
    n_samples: int
    log_likelihood: object = None
    sd: object = None

    def __repr__(self):
        n = int(np.size(self.ess))
        se = self.stderr[np.isfinite(self.stderr)]
        worst = float(np.max(se)) if se.size else float("nan")
        return (f"{type(self).__name__}(n={n}, n_units={np.shape(self.mean)[-1]}, "
                f"n_samples={self.n_samples}, max_stderr={worst:.3g})")


class PersistMixin:
    """``save(path)``: the model in a portable, versioned ``.npz`` file, read by ``mf.load``.

    The file holds the constructor parameters and the fitted attributes (names ending in
    ``_``) as plain arrays and JSON, a format version and the package version; nothing is
    pickled.  ``mf.load`` checks a file in full before it builds a model from it
    (:mod:`mfengine._persist`); a subclass declares what it saves:

    ``_saved_state``
        ``{fitted attribute: kind}``, every attribute ``load`` may set (kinds:
        ``mfengine._persist._KINDS``);
    ``_saved_together``
        groups of those attributes that are present together or not at all;
    ``_check_loaded()``
        the model's own checks of its parameters and fitted attributes, run by ``load``.

    Every subclass's verbs in ``ROUTED_METHODS`` are wrapped once, when the class is made:
    a dask collection goes to :mod:`mfengine._dask` (lazy answers, data-parallel ``fit``), an
    on-disk array to :func:`map_chunked`; an array in memory reaches the method unchanged.
    """

    def __init_subclass__(cls, **kwargs):
        from mfengine._outofcore import ROUTED_METHODS, _route

        for name in ROUTED_METHODS:
            func = getattr(cls, name, None)
            if callable(func) and type(func).__name__ == "function" and not getattr(
                    func, "_mf_routed", False):
                setattr(cls, name, _route(name, func))
        super().__init_subclass__(**kwargs)

    def save(self, path):
        """Write the model to ``path`` (a ``.npz`` file; the suffix is added if missing).

        Parameters
        ----------
        path : str or os.PathLike
            Where to write.

        Returns
        -------
        path : str
            The file written.

        Raises
        ------
        TypeError
            If ``path`` is neither a str nor a path-like object.
        """
        return _persist.save(self, path)

    def _check_loaded(self):
        """``mf.load``'s last check: the hyperparameters against the class's declared
        ``_parameter_constraints``, then the model's own checks of its fitted attributes."""
        validate_params(self)
        self._check_fitted()

    def _check_fitted(self):
        """The family's checks of its fitted attributes as ``load`` set them (a hook)."""
