"""``mfengine.infer``: one entry point for every model and mean-field method."""
import numbers
from dataclasses import dataclass, field

import numpy as np

from mfengine._validation import effective_n_threads

__all__ = ["infer", "gradient", "InferenceResult", "METHODS"]

METHODS = ("gaussian", "sjj", "plefka11", "plefka12", "plefka22")
#: Methods for belief nets over any DAG (a layered net is converted with ``to_dag``).
DAG_METHODS = ("sjj", "plefka11", "plefka12", "plefka22")

_PROGRESS_CHUNK = 4096  # patterns per kernel call when a progress bar is shown


@dataclass
class InferenceResult:
    """The mean-field solution for a batch of patterns.

    Attributes
    ----------
    bound : ndarray (n_patterns,)
        The objective at the solution, per pattern, in nats: a lower bound on ln P(v) for
        "gaussian" (up to its Gaussian approximation) and "sjj"; for the Plefka methods the
        approximation -G of ln P(v), which may lie on either side of it.  For a
        ``BeliefNetBatch`` the shape is (n_nets,) or (n_nets, m), following ``V``.
    mu, xi : list of ndarray, or ndarray
        Layered nets: one (n_patterns, sizes[l]) array per layer, visible layer included.
        Visible ``mu`` is the data.  With "gaussian", at a missing visible entry ``mu`` is
        ``xi``, the approximate predictive probability of a 1, and top-layer ``xi`` is
        sigmoid(bias) (its value does not enter the bound).  DAG nets: one (n_patterns,
        n_units) array each (batches: (n_nets, [m,] n_units)).  With "sjj", ``xi`` holds each
        unit's variational parameter; the Plefka methods have none (``xi`` is None).
    n_sweeps : ndarray of int (n_patterns,)
        Sweeps (or fixed-point iterations) taken per pattern.
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
        n = self.bound.size
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
        raise ValueError(
            "method 'gaussian' (Saul & Jordan's Gaussian-approximated bound) is implemented for "
            "layered sigmoid nets (SigmoidBeliefNet); for a BeliefNet use one of "
            f"{DAG_METHODS}"
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
    model : SigmoidBeliefNet, BeliefNet, BeliefNetBatch, or a pair (weights, biases)
        With plain arrays no model object is needed: ``weights[l]`` of shape
        (sizes[l+1], sizes[l]) and ``biases[l]`` of shape (sizes[l],), layers top first.
        A list of BeliefNet with one structure is treated as a BeliefNetBatch.
        Safe to call from many Python threads at once (each call owns its state, and the
        compiled loop runs without the GIL).
    V : (n_patterns, n_visible) array of 0/1 (a BeliefNetBatch: (n_nets, [m,] n_visible))
        Visible data.  float32, integer or boolean input is converted to float64; entries
        must be 0 or 1 except where ``missing`` is True (there they may be anything, NaN too).
    method : {"gaussian", "sjj", "plefka11", "plefka12", "plefka22"}
        "gaussian": Saul & Jordan's Gaussian-approximated bound (eq. 24), solved by cyclic
        stepwise ascent: each hidden mean by a bracketed safeguarded Newton maximiser in the
        logit, each xi by a safeguarded Newton root of its fixed-point equation; every update
        raises the bound.  Sweeps alternate bottom-up and top-down.  Layered sigmoid nets only.
        "sjj": the strict lower bound of Saul, Jaakkola & Jordan (any DAG), by coordinate
        ascent: every update raises it.  "plefka11", "plefka12", "plefka22": the Plefka
        schemes G11, G12, G22 of Bhattacharyya & Keerthi; ``bound`` is -G, an approximation
        of ln P(v) that is not a bound.  The DAG methods take a BeliefNet, a BeliefNetBatch
        (many nets with one structure, solved in one parallel call) or a layered net.
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
    if method in DAG_METHODS:
        return _infer_dag(model, V, method, tol, max_sweeps, missing, n_threads, init_mu,
                          inner_tol, progress)
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


def _check_common(tol, max_sweeps, inner_tol):
    if isinstance(tol, bool) or not (isinstance(tol, numbers.Real) and tol > 0 and np.isfinite(tol)):
        raise ValueError(f"tol must be a positive number, got {tol!r}")
    if isinstance(max_sweeps, bool) or not isinstance(max_sweeps, numbers.Integral) or max_sweeps < 1:
        raise ValueError(f"max_sweeps must be a positive integer, got {max_sweeps!r}")
    if inner_tol is not None and not (isinstance(inner_tol, numbers.Real) and inner_tol > 0):
        raise ValueError(f"inner_tol must be a positive number, got {inner_tol!r}")


def dag_items(model, V, missing=None):
    """The items the DAG kernels solve: ``(batch, clamp, net_of, shape, layered)``.

    ``batch`` is a BeliefNetBatch; ``clamp`` (n_items, n_units) holds each clamped unit's
    value and NaN at free ones (hidden, or visible and missing); ``net_of`` the net of each
    item; ``shape`` the leading shape of the result; ``layered`` the SigmoidBeliefNet the
    model came from (or None), to split the answer into layers.
    """
    from mfengine.sbn.dag import BeliefNet, BeliefNetBatch
    from mfengine.sbn.layered import SigmoidBeliefNet

    layered = None
    if isinstance(model, (tuple, list)) and model and all(isinstance(m, BeliefNet) for m in model):
        model = BeliefNetBatch.from_nets(model)
    elif isinstance(model, (tuple, list)) and len(model) == 2:
        model = SigmoidBeliefNet.from_params(model[0], model[1])
    if isinstance(model, SigmoidBeliefNet):
        model._check_params()
        layered = model
        model = model.to_dag()
    if isinstance(model, BeliefNet):
        V, miss = model._check_data(V, missing)
        if miss is not None:
            V = np.where(miss, np.nan, V)
        batch = BeliefNetBatch(model.W[None], model.h[None], model.visible, model.activation)
        batch.structure = model.structure
        clamp = np.full((V.shape[0], model.n_units), np.nan)
        clamp[:, model.visible] = V
        return batch, clamp, np.zeros(V.shape[0], dtype=np.intp), (V.shape[0],), layered
    if isinstance(model, BeliefNetBatch):
        if missing is not None:
            raise ValueError("missing is not supported for a BeliefNetBatch; solve nets one by one")
        V3, squeeze = model._check_data(V)
        k, m = V3.shape[:2]
        clamp = np.full((k * m, model.n_units), np.nan)
        clamp[:, model.visible] = V3.reshape(k * m, -1)
        shape = (k,) if squeeze else (k, m)
        return model, clamp, np.repeat(np.arange(k, dtype=np.intp), m), shape, None
    raise TypeError("model must be a SigmoidBeliefNet, BeliefNet, BeliefNetBatch, a list of "
                    f"BeliefNet or a pair (weights, biases), got {type(model).__name__}")


def solve_items(batch, clamp, net_of, method, tol, max_sweeps, n_threads, init_mu=None,
                inner_tol=None, init_xi=None):
    """Run a DAG method's kernel on prepared items; returns (bound, mu, xi, n_sweeps, converged)."""
    s = batch.structure
    w = s.pack(batch.W)
    if method == "sjj":
        from mfengine.sbn import sjj

        gtol = _inner_tol(tol) if inner_tol is None else float(inner_tol)
        return sjj.solve(s, w, batch.h, net_of, clamp, tol=tol, inner_tol=gtol,
                         max_sweeps=max_sweeps, n_threads=n_threads, init_mu=init_mu,
                         init_xi=init_xi, activation=batch.activation)
    from mfengine.sbn import plefka

    order = int(method[-2:])
    G, u, n_iter, conv = plefka.solve(s, w, batch.h, net_of, clamp, order, batch.activation,
                                      tol=tol, max_iter=max_sweeps, n_threads=n_threads,
                                      init_u=init_mu)
    return -G, u, None, n_iter, conv


def _infer_dag(model, V, method, tol, max_sweeps, missing, n_threads, init_mu, inner_tol,
               progress):
    _check_common(tol, max_sweeps, inner_tol)
    batch, clamp, net_of, shape, layered = dag_items(model, V, missing)
    n = clamp.shape[0]
    mu0 = None
    if init_mu is not None:
        hid = ~batch.visible
        init_mu = np.asarray(init_mu, dtype=np.float64)
        if init_mu.shape != (n, int(hid.sum())):
            raise ValueError(f"init_mu must have shape {(n, int(hid.sum()))} (the hidden units in "
                             f"order), got {init_mu.shape}")
        if not np.all((init_mu >= 0.0) & (init_mu <= 1.0)):
            raise ValueError("init_mu must lie in [0, 1] (and contain no NaN)")
        mu0 = np.full(clamp.shape, 0.5)
        mu0[:, hid] = init_mu
    n_threads = max(1, min(effective_n_threads(n_threads), n // 16))
    chunk = n if (not progress or n <= _PROGRESS_CHUNK) else _PROGRESS_CHUNK
    parts = []
    bar = None
    if chunk < n:
        from mfengine._progress import progress_bar

        bar = progress_bar(total=n, desc=f"infer ({method})", unit="pattern")
    try:
        for a in range(0, n, chunk):
            sl = slice(a, a + chunk)
            parts.append(solve_items(batch, clamp[sl], net_of[sl], method, float(tol),
                                     int(max_sweeps), n_threads,
                                     None if mu0 is None else mu0[sl], inner_tol))
            if bar is not None:
                bar.update(parts[-1][0].shape[0])
    finally:
        if bar is not None:
            bar.close()
    bound = np.concatenate([p[0] for p in parts])
    mu = np.concatenate([p[1] for p in parts])
    xi = None if parts[0][2] is None else np.concatenate([p[2] for p in parts])
    n_sweeps = np.concatenate([p[3] for p in parts])
    conv = np.concatenate([p[4] for p in parts])
    if layered is not None:
        splits = np.cumsum(layered.sizes)[:-1]
        mu = [np.ascontiguousarray(a) for a in np.split(mu, splits, axis=1)]
        if xi is not None:
            xi = [np.ascontiguousarray(a) for a in np.split(xi, splits, axis=1)]
    else:
        mu = mu.reshape(shape + (-1,))
        xi = None if xi is None else xi.reshape(shape + (-1,))
    return InferenceResult(bound=bound.reshape(shape), mu=mu, xi=xi,
                           n_sweeps=n_sweeps.reshape(shape), converged=conv.reshape(shape),
                           method=method, tol=tol)
