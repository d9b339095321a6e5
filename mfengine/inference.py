"""``mfengine.infer``: one entry point for every model and mean-field method."""
import numbers
from dataclasses import dataclass, field

import numpy as np

from mfengine._validation import effective_n_threads

__all__ = ["infer", "gradient", "InferenceResult", "METHODS"]

METHODS = ("gaussian",)

_PROGRESS_CHUNK = 4096  # patterns per kernel call when a progress bar is shown


@dataclass
class InferenceResult:
    """The mean-field solution for a batch of patterns.

    Attributes
    ----------
    bound : ndarray (n_patterns,)
        The bound at the solution, per pattern, in nats.
    mu, xi : list of ndarray
        One (n_patterns, sizes[l]) array per layer, visible layer included.  Visible ``mu`` is
        the data; at a missing visible entry it is ``xi``, the approximate predictive
        probability of a 1.  Top-layer ``xi`` is sigmoid(bias) (its value does not enter the
        bound, since the top layer has no input variance).
    n_sweeps : ndarray of int (n_patterns,)
        Sweeps (alternating bottom-up and top-down passes) taken per pattern.
    converged : ndarray of bool (n_patterns,)
        Whether the bound changed by less than ``tol`` in the last sweep.
    method : str
    """

    bound: np.ndarray
    mu: list
    xi: list
    n_sweeps: np.ndarray
    converged: np.ndarray
    method: str = "gaussian"
    tol: float = field(default=1e-6, repr=False)

    def __repr__(self):
        n = self.bound.shape[0]
        return (
            f"InferenceResult(method={self.method!r}, n_patterns={n}, "
            f"mean_bound={self.bound.mean() if n else float('nan'):.6g}, "
            f"converged={int(self.converged.sum())}/{n})"
        )


def as_model(model):
    """A SigmoidBeliefNet from ``model`` or from a pair ``(weights, biases)`` of array lists."""
    from mfengine.sbn.dag import BeliefNet
    from mfengine.sbn.layered import SigmoidBeliefNet

    if isinstance(model, SigmoidBeliefNet):
        return model
    if isinstance(model, BeliefNet):
        raise NotImplementedError(
            "mean-field inference for BeliefNet (methods 'sjj', 'plefka11', 'plefka12', "
            "'plefka22') is not implemented yet; a layered sigmoid net can use "
            "SigmoidBeliefNet with method='gaussian'"
        )
    if isinstance(model, (tuple, list)) and len(model) == 2:
        return SigmoidBeliefNet.from_params(model[0], model[1])
    raise TypeError(
        f"model must be a SigmoidBeliefNet or a pair (weights, biases), got {type(model).__name__}"
    )


def gradient(model, V, result=None, missing=None, **infer_kwargs):
    """Gradient of the summed bound at the mean-field solution, for a model or plain arrays.

    ``model`` is a SigmoidBeliefNet or a pair ``(weights, biases)``; the rest as in
    ``SigmoidBeliefNet.gradient``.  Returns ``(grad_weights, grad_biases)``.
    """
    return as_model(model).gradient(V, result=result, missing=missing, **infer_kwargs)


def _inner_tol(tol):
    # Each unit's 1-D solve stops when |dL/dmu| (and the xi residual) falls below this.  The
    # bound's error from stopping there is about inner_tol**2 / 8 per unit, so the square root
    # keeps it well under the outer tolerance.
    return float(min(1e-3, max(1e-13, 0.1 * np.sqrt(tol))))


def infer(model, V, method="gaussian", tol=1e-6, max_sweeps=200, missing=None, n_threads=None,
          init_mu=None, inner_tol=None, progress=False):
    """Solve the mean-field equations for every pattern in ``V``.

    Parameters
    ----------
    model : SigmoidBeliefNet, or a pair (weights, biases) of lists of arrays
        With plain arrays no model object is needed: ``weights[l]`` of shape
        (sizes[l+1], sizes[l]) and ``biases[l]`` of shape (sizes[l],), layers top first.
        Safe to call from many Python threads at once (each call owns its state, and the
        compiled loop runs without the GIL).
    V : (n_patterns, n_visible) array of 0/1
        Visible data.  float32, integer or boolean input is converted to float64; entries
        must be 0 or 1 except where ``missing`` is True (there they may be anything, NaN too).
    method : {"gaussian"}
        "gaussian": Saul & Jordan's Gaussian-approximated bound (eq. 24), solved by cyclic
        stepwise ascent: each hidden mean by a bracketed safeguarded Newton maximiser in the
        logit, each xi by a safeguarded Newton root of its fixed-point equation; every update
        raises the bound.  Sweeps alternate bottom-up and top-down.
    tol : float, default 1e-6
        Stop a pattern when its bound changes by less than ``tol`` nats in a sweep.
    max_sweeps : int, default 200
    missing : boolean array, (n_patterns, n_visible) or (n_visible,), optional
        True marks a missing visible entry; it is marginalised exactly (its terms leave the bound).
    n_threads : int, optional
        OpenMP threads (patterns are split among them); default OMP_NUM_THREADS or all cores.
        The answer does not depend on it.
    init_mu : (n_patterns, n_hidden) array, optional
        Starting hidden means, layers concatenated top first (a warm start); default 0.5.
    inner_tol : float, optional
        Tolerance of each unit's 1-D solve (on |dL/dmu| and on the xi residual).  Default:
        ``0.1 * sqrt(tol)`` clipped to [1e-13, 1e-3] (the bound's error from the inner solves
        is about inner_tol**2 / 8 per unit); a mean is also left where it is when a Newton
        step would raise the bound by less than tol / (10 n_hidden), and a short Newton step
        that provably raises the bound is taken without re-evaluating the children (their
        cached sigmoids move by a second-order Taylor step).  Given explicitly, every 1-D
        solve runs until |dL/dmu| <= inner_tol.
    progress : bool, default False
        Show a progress bar (tqdm), advancing every few thousand patterns.

    Returns
    -------
    InferenceResult
    """
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    model = as_model(model)
    if isinstance(tol, bool) or not (isinstance(tol, numbers.Real) and tol > 0 and np.isfinite(tol)):
        raise ValueError(f"tol must be a positive number, got {tol!r}")
    if isinstance(max_sweeps, bool) or not isinstance(max_sweeps, numbers.Integral) or max_sweeps < 1:
        raise ValueError(f"max_sweeps must be a positive integer, got {max_sweeps!r}")
    gain_rule = inner_tol is None
    if inner_tol is None:
        inner_tol = _inner_tol(tol)
    elif not (isinstance(inner_tol, numbers.Real) and inner_tol > 0):
        raise ValueError(f"inner_tol must be a positive number, got {inner_tol!r}")
    model._check_params()
    V, miss = model._check_data(V, missing)
    n_threads = effective_n_threads(n_threads)
    # At least 16 patterns per thread: waking threads for a tiny batch costs more than it
    # saves (and much more on a busy machine).  The answer does not depend on it.
    n_threads = max(1, min(n_threads, V.shape[0] // 16))
    from mfengine.sbn import _gaussian

    n = V.shape[0]
    if init_mu is not None:
        n_hidden = model.n_hidden
        init_mu = np.asarray(init_mu, dtype=np.float64)
        if init_mu.shape != (n, n_hidden):
            raise ValueError(
                f"init_mu must have shape {(n, n_hidden)} (hidden layers concatenated), got {init_mu.shape}"
            )
    if not progress or n <= _PROGRESS_CHUNK:
        return _gaussian.run(model, V, miss, init_mu, float(tol), float(inner_tol),
                             int(max_sweeps), n_threads, gain_rule)
    from mfengine._progress import progress_bar

    parts = []
    with progress_bar(total=n, desc="infer", unit="pattern") as bar:
        for start in range(0, n, _PROGRESS_CHUNK):
            sl = slice(start, start + _PROGRESS_CHUNK)
            parts.append(_gaussian.run(model, V[sl], None if miss is None else miss[sl],
                                       None if init_mu is None else init_mu[sl],
                                       float(tol), float(inner_tol), int(max_sweeps), n_threads,
                                       gain_rule))
            bar.update(parts[-1].bound.shape[0])
    return InferenceResult(
        bound=np.concatenate([r.bound for r in parts]),
        mu=[np.concatenate([r.mu[l] for r in parts]) for l in range(len(parts[0].mu))],
        xi=[np.concatenate([r.xi[l] for r in parts]) for l in range(len(parts[0].xi))],
        n_sweeps=np.concatenate([r.n_sweeps for r in parts]),
        converged=np.concatenate([r.converged for r in parts]),
        method=method,
        tol=tol,
    )
