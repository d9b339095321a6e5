"""The strict mean-field bound of Saul, Jaakkola & Jordan for sigmoid DAG belief nets.

Low-level entry points over a ``DagStructure`` and batches of nets sharing it; ``mf.infer``
(method "sjj") and ``BeliefNet.fit`` call these.  The bound (DESIGN §4)::

    L = sum_{free i} H(mu_i) + sum_i [ (mu_i - xi_i) <z_i> - ln(<e^{-xi_i z_i}> + <e^{(1-xi_i) z_i}>) ]

is below ln P(clamped units) for every mu and xi in [0, 1]; coordinate ascent raises it at
every step (see ``mfengine/sbn/_sjj.pyx``).
"""
import numpy as np

__all__ = ["solve", "evaluate", "gradient"]


def _args(structure, w, h, net_of, clamp):
    return (structure.par_ptr, structure.par_idx, structure.ch_ptr, structure.ch_idx,
            structure.ch_w, w, h, net_of, clamp)


def solve(structure, w, h, net_of, clamp, tol=1e-6, inner_tol=1e-9, max_sweeps=200, n_threads=1,
          init_mu=None, init_xi=None, record=False, activation="sigmoid"):
    """Coordinate ascent on the SJJ bound for every item.

    Parameters
    ----------
    structure : DagStructure
    w : (n_nets, nnz) float64, weights in ``structure``'s parent order
    h : (n_nets, n_units) float64, biases
    net_of : (n_items,) intp, the net of each item
    clamp : (n_items, n_units) float64, the value (0/1) of a clamped unit, NaN for a free one
    tol : stop an item when a sweep changes its bound by less than this
    inner_tol : tolerance of each 1-D solve, on |dL/dmu| and |dphi/dxi|
    init_mu, init_xi : (n_items, n_units) starting points (default 0.5)
    record : also return the bound after every sweep, (n_items, max_sweeps + 1), NaN-padded
    activation : "sigmoid", or "noisy_or" (positive biases needed).  For noisy-OR the
        variational parameters are q per edge: ``xi`` is (n_items, nnz) in parent order,
        each unit's q on the simplex over its parents (``init_xi`` default: uniform).

    Returns
    -------
    bound, mu, xi, n_sweeps, converged[, history]
    """
    from mfengine.sbn import _sjj

    n_items, n = clamp.shape
    noisy = activation == "noisy_or"
    if noisy and np.any(h <= 0.0):
        raise ValueError("the SJJ bound for noisy-OR units needs positive biases (a leak): with "
                         "h = 0 a unit whose parents are all off can never fire, and the bound "
                         "is -inf; h has entries <= 0")
    mu = np.full((n_items, n), 0.5) if init_mu is None else np.array(init_mu, dtype=np.float64)
    n_xi = structure.nnz if noisy else n
    if init_xi is None:
        xi = np.full((n_items, n_xi), -1.0 if noisy else 0.5)   # -1: uniform q
    else:
        xi = np.array(init_xi, dtype=np.float64)
    bound = np.empty(n_items)
    n_sweeps = np.zeros(n_items, dtype=np.intp)
    conv = np.zeros(n_items, dtype=np.uint8)
    hist = np.full((n_items, max_sweeps + 1), np.nan) if record else np.empty((0, 0))
    _sjj.solve(*_args(structure, w, h, net_of, clamp), mu, xi, bound, n_sweeps, conv, hist,
               float(tol), float(inner_tol), int(max_sweeps), int(n_threads), noisy)
    out = (bound, mu, xi, n_sweeps, conv.astype(bool))
    return out + (hist,) if record else out


def evaluate(structure, w, h, net_of, clamp, mu, xi, activation="sigmoid"):
    """The SJJ bound at given ``mu`` and ``xi`` (noisy-OR: q per edge; free units' entropies
    included), per item."""
    from mfengine.sbn import _sjj

    bound = np.empty(clamp.shape[0])
    _sjj.evaluate(*_args(structure, w, h, net_of, clamp), np.ascontiguousarray(mu, dtype=np.float64),
                  np.ascontiguousarray(xi, dtype=np.float64), bound, activation == "noisy_or")
    return bound


def _l1p(mu, x):
    """ln(1 - mu + mu e^x), elementwise and stable."""
    pos = x > 0
    xs = np.where(pos, -x, x)
    m = np.where(pos, 1.0 - mu, mu)
    return np.where(pos, x, 0.0) + np.log1p(m * np.expm1(xs))


def _tilt(mu, x):
    """mu e^x / (1 - mu + mu e^x), elementwise and stable."""
    pos = x > 0
    e = np.exp(np.where(pos, -x, x))
    return np.where(pos, mu / (mu + (1.0 - mu) * e), mu * e / (1.0 - mu + mu * e))


def _segment_sum(vals, ptr):
    """Sums of ``vals[..., ptr[i]:ptr[i+1]]`` for every i (empty segments give 0)."""
    c = np.concatenate([np.zeros(vals.shape[:-1] + (1,)), np.cumsum(vals, axis=-1)], axis=-1)
    return c[..., ptr[1:]] - c[..., ptr[:-1]]


def gradient(structure, w, h, net_of, clamp, mu, xi, activation="sigmoid"):
    """Partial derivatives of the SJJ bound in the weights and biases at fixed ``mu``, ``xi``
    (noisy-OR: q per edge).

    At a solution of the mean-field equations (mu stationary, xi minimising) these are the
    total derivatives of the bound, the learning signal.  Returns ``(dL/dw (n_items, nnz),
    dL/dh (n_items, n_units))``, per item.
    """
    mu = np.where(np.isnan(clamp), mu, clamp)
    W = w[net_of]                                   # (n_items, nnz)
    H = h[net_of]                                   # (n_items, n)
    child = np.repeat(np.arange(structure.n_units), np.diff(structure.par_ptr))
    mu_p = mu[:, structure.par_idx]                 # parent means, per edge
    if activation == "noisy_or":
        return _gradient_noisy_or(structure, W, H, mu, mu_p, child, xi)
    xi_c = xi[:, child]                             # the child's xi, per edge
    xa = -xi_c * W
    xb = (1.0 - xi_c) * W
    A = -xi * H + _segment_sum(_l1p(mu_p, xa), structure.par_ptr)
    B = (1.0 - xi) * H + _segment_sum(_l1p(mu_p, xb), structure.par_ptr)
    pb = 1.0 / (1.0 + np.exp(A - B))                # weight of the (1 - xi) term
    pa = 1.0 - pb
    gh = mu - pb
    gw = ((mu - xi)[:, child] * mu_p
          + pa[:, child] * xi_c * _tilt(mu_p, xa)
          - pb[:, child] * (1.0 - xi_c) * _tilt(mu_p, xb))
    return gw, gh


def _dgnor(x):
    """g'(x) for g(x) = ln(1 - e^{-x}): 1 / (e^x - 1), 0 at x = inf."""
    with np.errstate(over="ignore"):
        return 1.0 / np.expm1(x)


def _gradient_noisy_or(structure, W, H, mu, mu_p, child, q):
    with np.errstate(divide="ignore", invalid="ignore"):
        x = np.where(q > 0, H[:, child] + W / q, np.inf)
    dg = _dgnor(x)                                  # g'(h_i + w_ij / q_ij), per edge
    mu_c = mu[:, child]
    gw = -(1.0 - mu_c) * mu_p + mu_c * mu_p * dg
    dgh = _dgnor(H)
    edge = _segment_sum(q * mu_p * (dg - dgh[:, child]), structure.par_ptr)
    gh = -(1.0 - mu) + mu * (dgh + edge)
    return gw, gh
