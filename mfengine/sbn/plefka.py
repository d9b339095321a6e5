"""The Plefka schemes G11, G12 and G22 of Bhattacharyya & Keerthi for DAG belief nets.

For sigmoid or noisy-OR units (``mfengine.sbn.dag``), ``-G`` approximates ln P(clamped units).
With ``Mbar_i = h_i + sum_j w_ij u_j`` and ``V_i = sum_j w_ij^2 u_j (1 - u_j)``:

    G11 = sum_{free i} [u_i ln u_i + (1 - u_i) ln(1 - u_i)]
          - sum_i [u_i ln f(Mbar_i) + (1 - u_i) ln(1 - f(Mbar_i))]
    G12 = G11 - 1/2 sum_i g2_i V_i,   g2_i = u_i (ln f)''(Mbar_i) + (1 - u_i) (ln(1 - f))''(Mbar_i)
    G22 = G12 - 1/2 [Var(E_2) - sum_i Cov(E_2, S_i)^2 / (u_i (1 - u_i))]

(Bhattacharyya & Keerthi, eqs. 20, 42-51, 72; E_2 is the energy expanded to second order around
Mbar, the averages are under the product distribution with means u).  The G22 term in closed
form is derived in ``docs/derivations/plefka.rst``: it is minus one half of the variance of the part of
E_2 of degree two and more in the centred variables S_k - u_k.  Clamped units hold their
values (0 or 1) and carry no entropy term; free units are hidden units or missing visible ones.

Barren units -- free units none of whose descendants is clamped (a missing leaf, a hidden unit
whose children are all barren) -- sum out of P(clamped units) exactly, so every scheme is taken
on the net with them deleted: they carry no term of G and nothing of theirs reaches their
parents (the sums above run over the other units), and ``solve`` sets each one's mean from its
parents' solved means afterwards, top-down: sigmoid(h_i + sum_j w_ij u_j), or for noisy-OR
1 - e^{-h_i} prod_j (1 - u_j + u_j e^{-w_ij}) (as ``mfengine.sbn.sjj`` does).  Whether a unit
is barren follows from the structure (a zero weight in it is still an edge) and the clamp.

The mean-field solution solves dG/du = 0 for the free units by the paper's fixed-point
iteration (eq. 73) with a line search on the segment between the current point and its image
whenever the plain step would raise G or overshoot (which is what a period-2 oscillation does),
every accepted step lowering G; stiff items then switch to quasi-Newton-corrected steps (see
``solve``'s ``accelerate`` and the kernel ``mfengine/sbn/_plefka.pyx``).  For G11 and G12, items
that iteration leaves unconverged are solved again by coordinate descent on G (``solve``'s
``coordinate_descent``), which converges on stiff sparse nets such as diagnosis-style noisy-OR
nets.  Layered sigmoid nets are solved in blocks of patterns with matrix products (BLAS).  One evaluation of G
and of all its derivatives costs O(nnz) for G11 and G12 and O(nnz * max fan-in) for G22
(precisely O(nnz + sum_i fanin_i^2)); items run in parallel with OpenMP and the answers do not
depend on the number of threads.

Every function validates its arguments (shapes, dtypes, finiteness, ranges, the consistency of
the structure's index arrays; ``mfengine.sbn.sjj.check_nets``) before any compiled code runs.
Weights so large that G leaves the double range (``|w|^2 u (1 - u)`` beyond 1e308, so |w|
above about 1e154 for G12 and G22) are handled by starting those items from the G11 solution,
where the means are saturated; where G is still not finite a ``OverflowError`` says so.
"""
import numbers

import numpy as np

from mfengine._validation import (Satisfies, check_flag, check_int, check_tol, check_value,
                                  effective_n_threads)
from mfengine.sbn.sjj import barren_mask, check_means, check_nets

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


def _check_common(structure, w, h, net_of, clamp, order, activation):
    check_value(order, "order", [Satisfies(lambda v: isinstance(v, numbers.Integral)
                                          and not isinstance(v, bool) and int(v) in ORDERS,
                                          f"one of {ORDERS}")])
    arrays, w, h, net_of, clamp = check_nets(structure, w, h, net_of, clamp, activation)
    return arrays, w, h, net_of, clamp, int(order), _ACT_CODE[activation]


def _raise_status(rc, status, what, order, n, act=0):
    if rc == _plefka.STATUS_EBADARG:   # pragma: no cover - the checks make this unreachable
        raise ValueError(f"{what}: the kernel refused its arguments (inconsistent sizes)")
    if np.any(status == _plefka.STATUS_ENOMEM):
        raise MemoryError(f"{what}: could not allocate {8 * (42 * n + 11) + 12 * n + 24} bytes "
                          "of scratch space per thread")
    if np.any(status == _plefka.STATUS_EOVERFLOW):
        bad = np.flatnonzero(status == _plefka.STATUS_EOVERFLOW)
        cause = ("the weights w (W and W_ of a BeliefNet, weights_ of a SigmoidBeliefNet) are "
                 "too large for this expansion "
                 "(its terms in w^2 u (1 - u), "
                 "w^4 for G22, leave the double range: |w| above about 1e154 for G12, 1e77 for "
                 "G22)")
        if act == _ACT_CODE["noisy_or"]:
            cause = ("the weights w (W and W_ of a BeliefNet) are too large, or the biases h "
                     "(h and h_) too close to 0, for this "
                     "expansion (its noisy-OR terms grow as w^2 and as 1 / (e^h - 1): |w| above "
                     "about 1e77, or h below about 1e-150, leave the double range)")
        raise OverflowError(
            f"{what}: G{order} is not finite for items {bad[:10].tolist()}: {cause}; use "
            f"{'smaller weights' if act != _ACT_CODE['noisy_or'] else 'smaller weights or larger biases'}, "
            f"order 11, or the SJJ bound (sjj.solve)")


def solve(structure, w, h, net_of, clamp, order, activation, tol=1e-10, max_iter=500, n_threads=1,
          init_u=None, accelerate=True, coordinate_descent=True):
    """Solve the mean-field equations dG/du = 0 of a Plefka scheme for a batch of items.

    The paper's fixed-point iteration with a line search wherever the plain step would raise
    G or overshoot, every accepted step lowering G (see the module docstring).

    Parameters
    ----------
    structure : DagStructure
        The sparsity pattern shared by every net.
    w : array_like of shape (n_nets, nnz)
        Weights of each net in the structure's parent order (finite; non-negative for
        noisy-OR units).
    h : array_like of shape (n_nets, n_units)
        Biases (finite; non-negative for noisy-OR units).
    net_of : array_like of int, shape (n_items,)
        The net of each item, in ``[0, n_nets)``.
    clamp : array_like of shape (n_items, n_units)
        0.0 or 1.0 for a clamped unit, NaN for a free one (hidden, or a missing visible unit).
    order : {11, 12, 22}
        The scheme G11, G12 or G22.
    activation : {"sigmoid", "noisy_or"}
        The units' activation.
    tol : float, default 1e-10
        Converged when every free mean is within ``tol`` of its fixed-point image
        ``sigmoid(-dF/du)``.
    max_iter : int, default 500
        Fixed-point iterations (each possibly with a line search) per item, together with
        the coordinate-descent sweeps of the fallback: an item on which the iteration gives up
        has the rest of the budget for them; one that spent it all keeps the iteration's
        answer.
    n_threads : int or None, default 1
        OpenMP threads (None: ``OMP_NUM_THREADS`` or all cores; clamped to at least 1).  The
        answers do not depend on it.
    init_u : array_like of shape (n_items, n_units), optional
        Starting means of the free units, in [0, 1] (values at clamped and barren units are
        ignored); default 0.5.
    accelerate : bool, default True
        Once an item's plain fixed-point step has needed a line search (an oscillation or an
        overshoot), correct its later steps with limited-memory quasi-Newton (L-BFGS)
        information, the fixed-point step serving as the initial inverse Hessian.  This
        changes nothing where the plain iteration converges smoothly and makes stiff items
        (large weights) converge in a few tens of iterations instead of hundreds.  False: the
        paper's iteration with its line-search fix only.
    coordinate_descent : bool, default True
        Orders 11 and 12: solve the items the fixed-point iteration leaves unconverged again,
        from the same start, by coordinate descent on G (one unit at a time, each move
        lowering G, every third point extrapolated from the two sweeps before it when that
        lowers G; the iteration leaves it at least half of ``max_iter`` once it has run 20
        iterations, and it takes up to three quarters of what the iteration left; where it
        ends unconverged, creeping along a valley of G, the fixed-point iteration, with its
        line search and quasi-Newton corrections, goes on from its point with the rest),
        keeping that answer when it converges or ends lower.  This is what makes stiff sparse
        nets converge (diagnosis-style noisy-OR nets, whose units' curvatures differ by orders
        of magnitude).  A unit whose minimum lies beyond the bound |logit u| = 700 (u below
        1e-304 or within that of 1) then counts as converged on the bound.  False: the
        fixed-point iteration only, and any unit pushed against the bound leaves its item
        unconverged (the behaviour before this option).

    Returns
    -------
    G : ndarray of shape (n_items,)
        G_order at the solution; ``-G`` approximates ln P(clamped units).  ``+inf`` where the
        clamped units are impossible (a clamped-on noisy-OR unit whose input is surely 0).
    u : ndarray of shape (n_items, n_units)
        The solution; clamped units hold their values, barren units (see the module
        docstring) their predictive means from their parents'.  A free noisy-OR unit with
        zero bias whose weighted parents are all clamped off is surely off and gets u = 0.
    n_iter : intp ndarray of shape (n_items,)
        Iterations taken (fixed-point iterations plus coordinate-descent sweeps).
    converged : bool ndarray of shape (n_items,)
        Whether a stationary point was reached (False also when a free mean is pushed against
        the bound |logit u| = 700, where G may have no stationary point, or when G = +inf;
        with ``coordinate_descent``, a G11/G12 mean on the bound whose image lies beyond it
        counts as converged).

    Raises
    ------
    TypeError, ValueError
        For arguments of the wrong type, shape or range (the message names the argument).
    OverflowError
        When G is not finite at the starting point even from the G11 solution (weights far
        too large for this expansion).
    MemoryError
        When a thread cannot allocate its scratch space.

    See Also
    --------
    objective : G at given means.
    gradient : Its derivatives in the weights and biases.

    Notes
    -----
    An item whose G (order 12 or 22) overflows at its starting point -- weights above about
    1e154, where ``w^2 u (1 - u)`` at u = 0.5 leaves the double range -- is solved again from
    the G11 solution, where such units are saturated.

    Examples
    --------
    >>> import numpy as np
    >>> from mfengine.sbn.dag import DagStructure
    >>> W = np.array([[0.0, 0.0], [2.0, 0.0]])
    >>> s = DagStructure(W != 0)
    >>> G, u, n_iter, converged = solve(s, s.pack(W)[None], np.zeros((1, 2)),
    ...                                 np.zeros(1, dtype=np.intp), np.array([[np.nan, 1.0]]),
    ...                                 12, "sigmoid")
    >>> bool(converged[0]), u.shape
    (True, (1, 2))
    """
    arrays, w, h, net_of, clamp, order, act = _check_common(structure, w, h, net_of, clamp,
                                                            order, activation)
    check_tol(tol, "tol")
    check_int(max_iter, "max_iter", 0, np.iinfo(np.intp).max - 1)
    check_flag(accelerate, "accelerate")
    cd = check_flag(coordinate_descent, "coordinate_descent")
    init = None if init_u is None else check_means(init_u, clamp, "init_u",
                                                   skip=barren_mask(arrays, clamp))
    threads = effective_n_threads(n_threads)
    G, u, n_iter, conv, status = _solve(arrays, w, h, net_of, clamp, init, order, act,
                                        float(tol), int(max_iter), threads, bool(accelerate), cd)
    bad = np.flatnonzero(status == _plefka.STATUS_EOVERFLOW)
    if bad.size and order != 11:
        # start those items from the G11 solution, where units with huge weights saturate,
        # and failing that from it rounded to 0/1 (u (1 - u) = 1e-304: w^2 u (1 - u) finite)
        _, u11, _, _, st11 = _solve(arrays, w, h, net_of[bad], clamp[bad],
                                    None if init is None else init[bad], 11, act, float(tol),
                                    int(max_iter), threads, bool(accelerate), cd)
        for start in (u11, np.round(u11)):
            ok = (st11 == _plefka.STATUS_OK) & (status[bad] == _plefka.STATUS_EOVERFLOW)
            if not np.any(ok):
                break
            out = _solve(arrays, w, h, net_of[bad[ok]], clamp[bad[ok]], start[ok], order, act,
                         float(tol), int(max_iter), threads, bool(accelerate), cd)
            for full, part in zip((G, u, n_iter, conv, status), out):
                full[bad[ok]] = part
    _raise_status(_plefka.STATUS_OK, status, "plefka.solve", order, clamp.shape[1], act)
    return G, u, n_iter, conv.astype(bool)


def _solve(arrays, w, h, net_of, clamp, init, order, act, tol, max_iter, threads, accelerate,
           cd=True):
    n_items, n = clamp.shape
    G = np.empty(n_items)
    u = np.empty((n_items, n))
    n_iter = np.zeros(n_items, dtype=np.intp)
    conv = np.zeros(n_items, dtype=np.int8)
    status = np.zeros(n_items, dtype=np.int8)
    has_init = init is not None
    rc = _plefka.solve(*arrays, w, h, net_of, clamp, init if has_init else np.zeros((1, 1)),
                       has_init, order, act, tol, max_iter, G, u, n_iter, conv, status, threads,
                       1 if accelerate else 0, 1 if cd else 0)
    if rc != _plefka.STATUS_OK or np.any(status == _plefka.STATUS_ENOMEM):
        _raise_status(rc, status, "plefka.solve", order, n, act)
    return G, u, n_iter, conv, status


def _evaluate(structure, w, h, net_of, clamp, u, order, activation, want_grad):
    arrays, w, h, net_of, clamp, order, act = _check_common(structure, w, h, net_of, clamp,
                                                            order, activation)
    barren = barren_mask(arrays, clamp)             # their means are not read
    u = check_means(u, clamp, "u", skip=barren)
    if want_grad == "u":
        free = np.isnan(clamp) & ~barren
        bad = np.flatnonzero(np.any(free & ((u <= 0.0) | (u >= 1.0)), axis=1))
        if bad.size:
            raise ValueError(
                f"u: the free means must lie strictly inside (0, 1) for gradient_u (dG/du "
                f"contains log(u / (1 - u)), infinite at 0 and 1); items {bad[:10].tolist()} "
                f"hold an exact 0 or 1 at a free unit (NaN in clamp)")
    n_items, n = clamp.shape
    nnz = arrays[1].size
    G = np.empty(n_items)
    status = np.zeros(n_items, dtype=np.int8)
    if want_grad:
        gu = np.zeros((n_items, n))
        gw = np.zeros((n_items, nnz))
        gh = np.zeros((n_items, n))
    else:
        gu = gh = gw = np.zeros((1, 1))
    rc = _plefka.evaluate(*arrays, w, h, net_of, clamp, u, order, act, bool(want_grad), G, gu,
                          gw, gh, status, 1)
    _raise_status(rc, status, "plefka", order, n, act)
    if want_grad and np.any(np.isinf(G)):
        bad = np.flatnonzero(np.isinf(G))
        raise ValueError(
            f"G is +inf for items {bad[:10].tolist()} (a noisy-OR unit with mean > 0 has input "
            f"exactly 0, so ln f = -inf): no gradient; a noisy-OR unit needs a positive bias "
            f"(a leak) in h (h_ of a BeliefNet), here {int(np.sum(h <= 0))} of its entries are "
            f"<= 0"
        )
    return G, gu, gw, gh


def objective(structure, w, h, net_of, clamp, u, order, activation):
    """Evaluate G_order at given means, per item.

    Parameters
    ----------
    structure : DagStructure
        The sparsity pattern shared by every net.
    w : array_like of shape (n_nets, nnz)
        Weights of each net in the structure's parent order.
    h : array_like of shape (n_nets, n_units)
        Biases.
    net_of : array_like of int, shape (n_items,)
        The net of each item, in ``[0, n_nets)``.
    clamp : array_like of shape (n_items, n_units)
        0.0 or 1.0 for a clamped unit, NaN for a free one.
    u : array_like of shape (n_items, n_units)
        The free units' means, in [0, 1] (0 ln 0 = 0); values at clamped units and at barren
        units (free, with no clamped descendant: they carry no term) are ignored.
    order : {11, 12, 22}
        The scheme G11, G12 or G22.
    activation : {"sigmoid", "noisy_or"}
        The units' activation.

    Returns
    -------
    G : ndarray of shape (n_items,)
        G_order per item; +inf where a unit with mean > 0 has ln f(Mbar) = -inf (noisy-OR
        with Mbar = 0).

    Raises
    ------
    TypeError, ValueError
        For arguments of the wrong type, shape or range.
    OverflowError
        Where G is not finite for another reason (weights too large for the expansion).

    See Also
    --------
    solve : The stationary point of G.

    Examples
    --------
    >>> import numpy as np
    >>> from mfengine.sbn.dag import DagStructure
    >>> s = DagStructure(np.array([[False, False], [True, False]]))
    >>> args = (s, [[2.0]], [[0.0, 0.0]], [0], np.array([[np.nan, 1.0]]), [[0.5, 1.0]])
    >>> objective(*args, 11, "sigmoid").round(4).tolist()
    [0.3133]
    """
    return _evaluate(structure, w, h, net_of, clamp, u, order, activation, False)[0]


def gradient(structure, w, h, net_of, clamp, u, order, activation):
    """Compute the partial derivatives of G_order in the weights and biases.

    At a stationary point of G in the free means (`solve`'s answer) these are the total
    derivatives of G at the solution (Bhattacharyya & Keerthi, section 3.1), used for learning.

    Parameters
    ----------
    structure : DagStructure
        The sparsity pattern shared by every net.
    w : array_like of shape (n_nets, nnz)
        Weights of each net in the structure's parent order.
    h : array_like of shape (n_nets, n_units)
        Biases.
    net_of : array_like of int, shape (n_items,)
        The net of each item, in ``[0, n_nets)``.
    clamp : array_like of shape (n_items, n_units)
        0.0 or 1.0 for a clamped unit, NaN for a free one.
    u : array_like of shape (n_items, n_units)
        The free units' means, in [0, 1] (0 ln 0 = 0); values at clamped units and at barren
        units (free, with no clamped descendant: they carry no term) are ignored.
    order : {11, 12, 22}
        The scheme G11, G12 or G22.
    activation : {"sigmoid", "noisy_or"}
        The units' activation.

    Returns
    -------
    grad_w : ndarray of shape (n_items, nnz)
        The derivatives dG/dw per item, in the structure's parent order (0 on the edges into
        an item's barren units, which G does not depend on).
    grad_h : ndarray of shape (n_items, n_units)
        The derivatives dG/dh per item (0 at barren units).

    Raises
    ------
    TypeError, ValueError
        For arguments of the wrong type, shape or range, and for items where G is +inf.
    OverflowError
        Where G or its gradient is not finite (weights too large for the expansion).

    See Also
    --------
    solve : The stationary point at which these are total derivatives.

    Examples
    --------
    >>> import numpy as np
    >>> from mfengine.sbn.dag import DagStructure
    >>> s = DagStructure(np.array([[False, False], [True, False]]))
    >>> args = (s, [[2.0]], [[0.0, 0.0]], [0], np.array([[np.nan, 1.0]]), [[0.5, 1.0]])
    >>> grad_w, grad_h = gradient(*args, 12, "sigmoid")
    >>> grad_w.shape, grad_h.shape
    ((1, 1), (1, 2))
    """
    _, _, gw, gh = _evaluate(structure, w, h, net_of, clamp, u, order, activation, True)
    return gw, gh


def gradient_u(structure, w, h, net_of, clamp, u, order, activation):
    """Compute dG_order/du_i for the free units at given means (0 at clamped and barren units).

    The mean-field equations are ``gradient_u == 0``.

    Parameters
    ----------
    structure : DagStructure
        The sparsity pattern shared by every net.
    w : array_like of shape (n_nets, nnz)
        Weights of each net in the structure's parent order.
    h : array_like of shape (n_nets, n_units)
        Biases.
    net_of : array_like of int, shape (n_items,)
        The net of each item, in ``[0, n_nets)``.
    clamp : array_like of shape (n_items, n_units)
        0.0 or 1.0 for a clamped unit, NaN for a free one.
    u : array_like of shape (n_items, n_units)
        The free units' means, strictly inside (0, 1); values at clamped and barren units are
        ignored.
    order : {11, 12, 22}
        The scheme G11, G12 or G22.
    activation : {"sigmoid", "noisy_or"}
        The units' activation.

    Returns
    -------
    grad_u : ndarray of shape (n_items, n_units)
        The derivatives dG/du per item.

    Raises
    ------
    TypeError, ValueError
        For arguments of the wrong type, shape or range, and for items where G is +inf.
    OverflowError
        Where G or its gradient is not finite.

    See Also
    --------
    solve : Finds the means where this vanishes.

    Examples
    --------
    >>> import numpy as np
    >>> from mfengine.sbn.dag import DagStructure
    >>> s = DagStructure(np.array([[False, False], [True, False]]))
    >>> args = (s, [[2.0]], [[0.0, 0.0]], [0], np.array([[np.nan, 1.0]]), [[0.5, 1.0]])
    >>> float(gradient_u(*args, 12, "sigmoid")[0, 1])   # a clamped unit
    0.0
    """
    return _evaluate(structure, w, h, net_of, clamp, u, order, activation, "u")[1]
