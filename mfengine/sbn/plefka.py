"""The Plefka schemes G11, G12 and G22 of Bhattacharyya & Keerthi for DAG belief nets.

For sigmoid or noisy-OR units (``mfengine.sbn.dag``), ``-G`` approximates ln P(clamped units).
With ``Mbar_i = h_i + sum_j w_ij u_j`` and ``V_i = sum_j w_ij^2 u_j (1 - u_j)``:

    G11 = sum_{free i} [u_i ln u_i + (1 - u_i) ln(1 - u_i)]
          - sum_i [u_i ln f(Mbar_i) + (1 - u_i) ln(1 - f(Mbar_i))]
    G12 = G11 - 1/2 sum_i g2_i V_i,   g2_i = u_i (ln f)''(Mbar_i) + (1 - u_i) (ln(1 - f))''(Mbar_i)
    G22 = G12 - 1/2 [Var(E_2) - sum_i Cov(E_2, S_i)^2 / (u_i (1 - u_i))]

(Bhattacharyya & Keerthi, eqs. 20, 42-51, 72; E_2 is the energy expanded to second order around
Mbar, the averages are under the product distribution with means u).  The G22 term in closed
form is derived in ``docs/plefka.md``: it is minus one half of the variance of the part of
E_2 of degree two and more in the centred variables S_k - u_k.  Clamped units hold their
values (0 or 1) and carry no entropy term; free units are hidden units or missing visible ones.

The mean-field solution solves dG/du = 0 for the free units by the paper's fixed-point
iteration (eq. 73) with a line search on the segment between the current point and its image
whenever the plain step would raise G or overshoot (which is what a period-2 oscillation does),
every accepted step lowering G; stiff items then switch to quasi-Newton-corrected steps (see
``solve``'s ``accelerate`` and the kernel ``mfengine/sbn/_plefka.pyx``).  One evaluation of G
and of all its derivatives costs O(nnz) for G11 and G12 and O(nnz * max fan-in) for G22
(precisely O(nnz + sum_i fanin_i^2)); items run in parallel with OpenMP and the answers do not
depend on the number of threads.
"""
import numbers

import numpy as np

from mfengine._validation import as_float_matrix, check_binary, effective_n_threads
from mfengine.sbn.dag import ACTIVATIONS, DagStructure

try:
    from mfengine.sbn import _plefka
except ImportError as exc:  # pragma: no cover - depends on the build
    raise ImportError(
        "mfengine.sbn._plefka is not built; run `pip install .` (or `python setup.py "
        "build_ext --inplace`) in the mfengine source tree"
    ) from exc

__all__ = ["ORDERS", "solve", "objective", "gradient", "gradient_u"]

#: The schemes: 11 = G11 (first Plefka order, first-order Taylor energy), 12 = G12, 22 = G22.
ORDERS = (11, 12, 22)

_ACT_CODE = {"sigmoid": 0, "noisy_or": 1}
_ST_NOMEM, _ST_INF, _ST_NAN = -1, 1, 2


def _check_common(structure, w, h, net_of, clamp, order, activation):
    if not isinstance(structure, DagStructure):
        raise TypeError(f"structure must be a DagStructure, got {type(structure).__name__}")
    if isinstance(order, bool) or not isinstance(order, numbers.Integral) or int(order) not in ORDERS:
        raise ValueError(f"order must be one of {ORDERS}, got {order!r}")
    if activation not in ACTIVATIONS:
        raise ValueError(f"activation must be one of {ACTIVATIONS}, got {activation!r}")
    n, nnz = structure.n_units, structure.nnz
    w = as_float_matrix(w, "w", n_cols=nnz)
    h = as_float_matrix(h, "h", n_cols=n)
    if h.shape[0] != w.shape[0]:
        raise ValueError(f"w and h must describe the same number of nets, got {w.shape[0]} and {h.shape[0]}")
    net_of = np.asarray(net_of)
    if net_of.ndim != 1 or (net_of.size and net_of.dtype.kind not in "iu"):
        raise TypeError(f"net_of must be a 1-D integer array, got dtype {net_of.dtype} and shape {net_of.shape}")
    net_of = np.ascontiguousarray(net_of, dtype=np.intp)
    if net_of.size and (net_of.min() < 0 or net_of.max() >= w.shape[0]):
        raise ValueError(f"net_of must index the {w.shape[0]} nets of w and h, got values in "
                         f"[{net_of.min()}, {net_of.max()}]")
    clamp = as_float_matrix(clamp, "clamp", n_cols=n, allow_nan=True)
    if clamp.shape[0] != net_of.shape[0]:
        raise ValueError(f"clamp has {clamp.shape[0]} rows but net_of has {net_of.shape[0]} items")
    if np.any(np.isinf(clamp)):
        raise ValueError("clamp contains infinite values (use 0/1 for clamped units, NaN for free ones)")
    check_binary(clamp, "clamp", ignore=np.isnan(clamp))
    if activation == "noisy_or":
        if np.any(w < 0):
            raise ValueError("noisy-OR units need non-negative weights; w has negative entries")
        if np.any(h < 0):
            raise ValueError("noisy-OR units need non-negative biases; h has negative entries")
    return w, h, net_of, clamp, int(order), _ACT_CODE[activation]


def _check_means(u, clamp, name):
    u = as_float_matrix(u, name, n_cols=clamp.shape[1], allow_nan=True)
    if u.shape[0] != clamp.shape[0]:
        raise ValueError(f"{name} must have {clamp.shape[0]} rows (one per item), got {u.shape[0]}")
    free = np.isnan(clamp)
    uf = u[free]
    if not np.all((uf >= 0.0) & (uf <= 1.0)):
        raise ValueError(f"{name} must lie in [0, 1] at the free units (and contain no NaN there)")
    return np.ascontiguousarray(np.where(free, u, clamp))


def _args(structure):
    return (structure.par_ptr, structure.par_idx, structure.ch_ptr, structure.ch_idx, structure.ch_w)


def _raise_status(status, what):
    if np.any(status == _ST_NOMEM):
        raise MemoryError(f"could not allocate per-thread scratch space for {what}")
    if np.any(status == _ST_NAN):
        bad = np.flatnonzero(status == _ST_NAN)
        raise FloatingPointError(
            f"{what}: a non-finite value appeared for items {bad[:10].tolist()} (overflow; "
            f"weights or inputs too close to 0 for noisy-OR units?)"
        )


def solve(structure, w, h, net_of, clamp, order, activation, tol=1e-10, max_iter=500, n_threads=1,
          init_u=None, accelerate=True):
    """Solve the mean-field equations dG/du = 0 of a Plefka scheme for a batch of items.

    Parameters
    ----------
    structure : DagStructure
        The sparsity pattern shared by every net.
    w : (n_nets, nnz) float array
        Weights of each net in the structure's parent order.
    h : (n_nets, n_units) float array
        Biases.
    net_of : (n_items,) int array
        The net of each item.
    clamp : (n_items, n_units) float array
        0.0 or 1.0 for a clamped unit, NaN for a free one (hidden, or a missing visible unit).
    order : {11, 12, 22}
        The scheme G11, G12 or G22.
    activation : {"sigmoid", "noisy_or"}
    tol : float, default 1e-10
        Converged when every free mean is within ``tol`` of its fixed-point image
        ``sigmoid(-dF/du)``.
    max_iter : int, default 500
        Fixed-point iterations (each possibly with a line search) per item.
    n_threads : int or None, default 1
        OpenMP threads (None: ``OMP_NUM_THREADS`` or all cores).  The answers do not depend on it.
    init_u : (n_items, n_units) float array, optional
        Starting means of the free units (values at clamped units are ignored); default 0.5.
    accelerate : bool, default True
        Once an item's plain fixed-point step has needed a line search (an oscillation or an
        overshoot), correct its later steps with limited-memory quasi-Newton (L-BFGS)
        information, the fixed-point step serving as the initial inverse Hessian.  This
        changes nothing where the plain iteration converges smoothly and makes stiff items
        (large weights) converge in a few tens of iterations instead of hundreds.  False: the
        paper's iteration with its line-search fix only.

    Returns
    -------
    G : (n_items,) ndarray
        G_order at the solution; ``-G`` approximates ln P(clamped units).  ``+inf`` where the
        clamped units are impossible (a clamped-on noisy-OR unit whose input is surely 0).
    u : (n_items, n_units) ndarray
        The solution; clamped units hold their values.  A free noisy-OR unit with zero bias
        whose weighted parents are all clamped off is surely off and gets u = 0.
    n_iter : (n_items,) intp ndarray
        Iterations taken.
    converged : (n_items,) bool ndarray
        Whether a stationary point was reached (False also when a free mean is pushed against
        the bound |logit u| = 40, where G may have no stationary point, or when G = +inf).
    """
    w, h, net_of, clamp, order, act = _check_common(structure, w, h, net_of, clamp, order, activation)
    if not (isinstance(tol, numbers.Real) and np.isfinite(tol) and tol > 0):
        raise ValueError(f"tol must be a positive number, got {tol!r}")
    if isinstance(max_iter, bool) or not isinstance(max_iter, numbers.Integral) or max_iter < 0:
        raise ValueError(f"max_iter must be a non-negative integer, got {max_iter!r}")
    n_items = clamp.shape[0]
    if init_u is None:
        init = np.zeros((1, 1))
    else:
        init = _check_means(init_u, clamp, "init_u")
    threads = effective_n_threads(n_threads)
    G = np.empty(n_items)
    u = np.empty((n_items, structure.n_units))
    n_iter = np.zeros(n_items, dtype=np.intp)
    conv = np.zeros(n_items, dtype=np.int8)
    status = np.zeros(n_items, dtype=np.int8)
    _plefka.solve(*_args(structure), w, h, net_of, clamp, init, init_u is not None, order, act,
                  float(tol), int(max_iter), G, u, n_iter, conv, status, threads, 1 if accelerate else 0)
    _raise_status(status, "plefka.solve")
    return G, u, n_iter, conv.astype(bool)


def _evaluate(structure, w, h, net_of, clamp, u, order, activation, want_grad):
    w, h, net_of, clamp, order, act = _check_common(structure, w, h, net_of, clamp, order, activation)
    u = _check_means(u, clamp, "u")
    n_items, n = clamp.shape
    G = np.empty(n_items)
    status = np.zeros(n_items, dtype=np.int8)
    if want_grad:
        gu = np.zeros((n_items, n))
        gw = np.zeros((n_items, structure.nnz))
        gh = np.zeros((n_items, n))
    else:
        gu = gh = np.zeros((1, 1))
        gw = np.zeros((1, 1))
    _plefka.evaluate(*_args(structure), w, h, net_of, clamp, u, order, act, want_grad, G, gu,
                     gw, gh, status, 1)
    _raise_status(status, "plefka")
    if want_grad and np.any(status == _ST_INF):
        bad = np.flatnonzero(status == _ST_INF)
        raise ValueError(
            f"G is +inf for items {bad[:10].tolist()} (a noisy-OR unit with mean > 0 has input "
            f"exactly 0, so ln f = -inf): no gradient"
        )
    return G, gu, gw, gh


def objective(structure, w, h, net_of, clamp, u, order, activation):
    """G_order at the given means, per item.

    Arguments as in ``solve``; ``u`` is (n_items, n_units) with the free units' means in
    [0, 1] (0 ln 0 = 0); its values at clamped units are ignored.  Returns (n_items,) floats,
    +inf where a unit with mean > 0 has ln f(Mbar) = -inf (noisy-OR with Mbar = 0).
    """
    return _evaluate(structure, w, h, net_of, clamp, u, order, activation, False)[0]


def gradient(structure, w, h, net_of, clamp, u, order, activation):
    """Partial derivatives of G_order with respect to the weights and biases at fixed ``u``.

    Arguments as in ``objective``.  Returns ``(dG/dw (n_items, nnz), dG/dh (n_items, n_units))``.
    At a stationary point of G in the free means (``solve``'s answer) these are the total
    derivatives of G at the solution (Bhattacharyya & Keerthi, section 3.1), used for learning.
    A ValueError for items where G is +inf.
    """
    _, _, gw, gh = _evaluate(structure, w, h, net_of, clamp, u, order, activation, True)
    return gw, gh


def gradient_u(structure, w, h, net_of, clamp, u, order, activation):
    """dG_order/du_i for the free units at ``u`` (0 at clamped units), (n_items, n_units).

    The mean-field equations are ``gradient_u == 0``; needs the free means strictly inside (0, 1).
    """
    return _evaluate(structure, w, h, net_of, clamp, u, order, activation, True)[1]
