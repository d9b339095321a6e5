"""The strict mean-field bound of Saul, Jaakkola & Jordan for DAG belief nets.

Low-level entry points over a ``DagStructure`` and batches of nets sharing it; ``mf.infer``
(method "sjj") and the belief nets' ``fit`` call these.  For sigmoid units the bound is
(Saul, Jaakkola & Jordan 1996)::

    L = sum_{free i} H(mu_i) + sum_i [ (mu_i - xi_i) <z_i> - ln(<e^{-xi_i z_i}> + <e^{(1-xi_i) z_i}>) ]

It lies below ln P(clamped units) for every mu and xi in [0, 1], for any finite weights: the
kernel (``mfengine/sbn/_sjj.pyx``) evaluates it without cancellation between large numbers,
so that with no free unit it equals ln P exactly and otherwise it stays below it up to the
rounding of its own sums (relative 1e-16).  Coordinate ascent raises it at every step.  Nets of
moderate scale (``|h_i| + sum |W|`` over each unit's edges at most 256: ordinary nets) are
solved by the kernel's fast path, which keeps products of the per-edge factors instead of
their logarithms and reports the same bound with its own rounding allowance; larger ones by
the careful path.  The C API ``mf_sjj_solve`` (``mfengine/sbn/_sjj.pxd``) runs the same
solve over raw buffers.

Every function here validates its arguments (shapes, dtypes, finiteness, ranges, the
consistency of the structure's index arrays) before any compiled code runs, and raises a
``ValueError`` or ``TypeError`` naming the argument.
"""

import numpy as np
from scipy.special import expit

from mfengine._validation import (Options, as_array, check_binary, check_int, check_real, check_value,
                                  effective_n_threads)
from mfengine.sbn._structure import DagStructure

__all__ = ["solve", "evaluate", "gradient"]

ACTIVATIONS = ("sigmoid", "noisy_or")

#: Largest sum over the units of a net of ``|h_i| + sum_j |W_ij|`` that the kernels accept:
#: every intermediate of the bound (and the bound itself) then stays below the double range.
MAX_NET_SCALE = 2.0 ** 1020

_STRUCTURE_ARRAYS = DagStructure.ARRAYS
_INTP_MAX = np.iinfo(np.intp).max


def _kernel():
    try:
        from mfengine.sbn import _sjj
    except ImportError as exc:  # pragma: no cover - depends on the build
        raise ImportError(
            "mfengine.sbn._sjj is not built; run `pip install .` (or `python setup.py "
            "build_ext --inplace`) in the mfengine source tree"
        ) from exc
    return _sjj


# ---------------------------------------------------------------------------- validation
def as_matrix(X, name, n_cols=None, allow_nan=False):
    """Convert ``X`` to a C-contiguous float64 2-D array (a copy where needed).

    Unlike the estimators' data checks, empty arrays are fine here (0 items, or a net without
    edges); NaN is refused unless ``allow_nan``, infinity always.

    Parameters
    ----------
    X : array_like
        Numeric (bool, integer or float) 2-D data.
    name : str
        The argument's name, for the error messages.
    n_cols : int, optional
        The number of columns required.
    allow_nan : bool, default False
        Whether NaN entries are allowed.

    Returns
    -------
    arr : ndarray of shape (n_rows, n_cols)
        The array as float64, C-contiguous.

    Raises
    ------
    TypeError
        For a non-numeric dtype.
    ValueError
        For a wrong number of dimensions or columns, NaN (unless allowed) or infinity.

    Examples
    --------
    >>> as_matrix([[0, 1]], "clamp", n_cols=2)
    array([[0., 1.]])
    """
    if isinstance(X, np.ndarray) and X.dtype == object:
        raise TypeError(f"{name} has dtype object; pass a numeric array")
    arr = as_array(X, name)
    if arr.dtype.kind not in "biuf":
        raise TypeError(f"{name} must be numeric, got dtype {arr.dtype}")
    if arr.ndim != 2:
        raise ValueError(f"{name} must be a 2-D array, got shape {arr.shape}")
    if n_cols is not None and arr.shape[1] != n_cols:
        raise ValueError(f"{name} must have {n_cols} columns, got {arr.shape[1]}")
    arr = np.ascontiguousarray(arr, dtype=np.float64)
    bad = np.isinf(arr) if allow_nan else ~np.isfinite(arr)
    if np.any(bad):
        raise ValueError(f"{name} contains {'infinite' if allow_nan else 'NaN or infinite'} values")
    return arr


def check_structure(structure):
    """Check the five index arrays of a ``DagStructure`` and return them as ``intp``.

    The arrays must describe one DAG in topological order: ``par_ptr`` and ``ch_ptr`` run
    from 0 to nnz without decreasing, every parent index is below its child's, each unit's
    parents are listed in increasing order and once each (a repeated edge would make the
    factorised averages wrong), and the child
    lists (``ch_ptr``, ``ch_idx``, ``ch_w``) list exactly the edges of the parent lists.  The
    cost is linear in the number of edges, or O(1) for a ``DagStructure`` whose read-only
    arrays are still the ones its constructor built (consistent by construction).

    Parameters
    ----------
    structure : DagStructure
        Any object with the attributes ``par_ptr``, ``par_idx``, ``ch_ptr``, ``ch_idx`` and
        ``ch_w`` (and, if present, ``n_units`` and ``nnz`` consistent with them).

    Returns
    -------
    arrays : tuple of ndarray
        ``(par_ptr, par_idx, ch_ptr, ch_idx, ch_w)`` as C-contiguous ``intp`` arrays.

    Raises
    ------
    TypeError
        When ``structure`` lacks an array or an array is not 1-D integer.
    ValueError
        When the arrays are inconsistent (the message names the array).

    Examples
    --------
    >>> import numpy as np
    >>> from mfengine.sbn.dag import DagStructure
    >>> par_ptr, par_idx, *_ = check_structure(DagStructure(np.tril(np.ones((3, 3)), -1) != 0))
    >>> par_ptr.tolist(), par_idx.tolist()
    ([0, 0, 1, 3], [0, 0, 1])
    """
    if isinstance(structure, DagStructure):
        sealed = structure.sealed()       # as its constructor built it: consistent
        if sealed is not None:
            return sealed
    if not all(hasattr(structure, name) for name in _STRUCTURE_ARRAYS):
        raise TypeError(f"structure must be a DagStructure, got {type(structure).__name__}")
    arrays = []
    for name in _STRUCTURE_ARRAYS:
        a = np.asarray(getattr(structure, name))
        if a.ndim != 1 or (a.size and a.dtype.kind not in "iu"):
            raise TypeError(f"structure.{name} must be a 1-D integer array, got dtype {a.dtype} "
                            f"and shape {a.shape}")
        if a.size and (a.min() < 0 or a.max() > _INTP_MAX):
            raise ValueError(f"structure.{name} has entries outside [0, {_INTP_MAX}]")
        arrays.append(np.ascontiguousarray(a, dtype=np.intp))
    par_ptr, par_idx, ch_ptr, ch_idx, ch_w = arrays
    n, nnz = par_ptr.size - 1, par_idx.size
    if n < 0:
        raise ValueError("structure.par_ptr must have n_units + 1 entries, got none")
    n_units, n_edges = getattr(structure, "n_units", n), getattr(structure, "nnz", nnz)
    if n_units != n or n_edges != nnz:
        raise ValueError(f"structure.n_units and structure.nnz ({n_units!r}, {n_edges!r}) "
                         f"disagree with its arrays ({n}, {nnz})")
    if ch_ptr.size != n + 1 or ch_idx.size != nnz or ch_w.size != nnz:
        raise ValueError(f"structure's child lists must have {n + 1}, {nnz} and {nnz} entries "
                         f"(ch_ptr, ch_idx, ch_w), got {ch_ptr.size}, {ch_idx.size}, {ch_w.size}")
    for name, ptr in (("par_ptr", par_ptr), ("ch_ptr", ch_ptr)):
        if ptr[0] != 0 or ptr[-1] != nnz or np.any(np.diff(ptr) < 0):
            raise ValueError(f"structure.{name} must rise from 0 to nnz = {nnz} without decreasing")
    child = np.repeat(np.arange(n, dtype=np.intp), np.diff(par_ptr))
    if np.any(par_idx >= child):
        raise ValueError("structure.par_idx must list parents j < i for each unit i "
                         "(units in topological order)")
    first = np.zeros(nnz, dtype=bool)
    first[par_ptr[:-1][np.diff(par_ptr) > 0]] = True
    if nnz and np.any(np.diff(par_idx)[~first[1:]] <= 0):
        raise ValueError("structure.par_idx must list each unit's parents in increasing order, "
                         "each once")
    if np.any(ch_w >= nnz) or np.any(np.bincount(ch_w, minlength=nnz) != 1):
        raise ValueError("structure.ch_w must be a permutation of the nnz edges")
    parent = np.repeat(np.arange(n, dtype=np.intp), np.diff(ch_ptr))
    if not (np.array_equal(par_idx[ch_w], parent) and np.array_equal(child[ch_w], ch_idx)):
        raise ValueError("structure's child lists (ch_ptr, ch_idx, ch_w) do not list the edges "
                         "of its parent lists (par_ptr, par_idx)")
    return tuple(arrays)


def check_nets(structure, w, h, net_of, clamp, activation):
    """Validate the arrays that every DAG kernel (SJJ and Plefka) reads.

    Refused, with the offending argument named: sizes inconsistent with ``structure``,
    non-finite weights or biases, ``net_of`` outside ``[0, n_nets)``, clamped values other
    than 0 and 1 (NaN marks a free unit), weights so large that a net's bound would leave the
    double range (``sum_i |h_i| + sum_j |W_ij|`` above ``MAX_NET_SCALE``), and for noisy-OR
    units negative weights or biases.

    Parameters
    ----------
    structure : DagStructure
        The sparsity pattern (checked by `check_structure`).
    w : array_like of shape (n_nets, nnz)
        Weights in the structure's parent order.
    h : array_like of shape (n_nets, n_units)
        Biases.
    net_of : array_like of int, shape (n_items,)
        The net of each item.
    clamp : array_like of shape (n_items, n_units)
        0 or 1 at clamped units, NaN at free ones.
    activation : {"sigmoid", "noisy_or"}
        The units' activation.

    Returns
    -------
    arrays : tuple of ndarray
        The structure's index arrays, as `check_structure` returns them.
    w, h : ndarray
        As C-contiguous float64.
    net_of : ndarray
        As C-contiguous ``intp``.
    clamp : ndarray
        As C-contiguous float64.

    Raises
    ------
    TypeError, ValueError
        For an argument of the wrong type, shape or range.

    Examples
    --------
    >>> import numpy as np
    >>> from mfengine.sbn.dag import DagStructure
    >>> s = DagStructure(np.array([[False, False], [True, False]]))
    >>> check_nets(s, [[1.0]], [[0.0, 0.0, 0.0]], [0], [[np.nan, 1.0]], "sigmoid")
    Traceback (most recent call last):
    ...
    ValueError: h must have 2 columns, got 3
    """
    check_value(activation, "activation", [Options(*ACTIVATIONS)])
    arrays = check_structure(structure)
    n, nnz = arrays[0].size - 1, arrays[1].size
    w = as_matrix(w, "w", n_cols=nnz)
    h = as_matrix(h, "h", n_cols=n)
    if h.shape[0] != w.shape[0]:
        raise ValueError(f"w and h must describe the same number of nets, got {w.shape[0]} and "
                         f"{h.shape[0]}")
    net_of = as_array(net_of, "net_of")
    if net_of.ndim != 1 or (net_of.size and net_of.dtype.kind not in "iu"):
        raise TypeError(f"net_of must be a 1-D integer array, got dtype {net_of.dtype} and "
                        f"shape {net_of.shape}")
    if net_of.size and (net_of.min() < 0 or net_of.max() >= w.shape[0]):
        raise ValueError(f"net_of must index the {w.shape[0]} nets of w and h, got values in "
                         f"[{net_of.min()}, {net_of.max()}]")
    net_of = np.ascontiguousarray(net_of, dtype=np.intp)
    clamp = as_matrix(clamp, "clamp", n_cols=n, allow_nan=True)
    if clamp.shape[0] != net_of.shape[0]:
        raise ValueError(f"clamp has {clamp.shape[0]} rows but net_of has {net_of.shape[0]} items")
    free = np.isnan(clamp)
    if not np.all((clamp == 0.0) | (clamp == 1.0) | free):   # the fast test, then the message
        check_binary(clamp, "clamp", ignore=free)
    with np.errstate(over="ignore"):
        scale = np.abs(w).sum(axis=1) + np.abs(h).sum(axis=1)
    if scale.size and not np.all(scale <= MAX_NET_SCALE):
        k = int(np.argmax(~(scale <= MAX_NET_SCALE)))
        raise ValueError(
            f"the weights and biases (w and h; a model's W_ and h_, or weights_ and biases_) "
            f"are too large to evaluate in double precision: net {k} has "
            f"sum_i (|h_i| + sum_j |W_ij|) = {scale[k]:.3g}, above {MAX_NET_SCALE:.3g}")
    if activation == "noisy_or":
        if np.any(w < 0):
            raise ValueError("noisy-OR units need non-negative weights; w has negative entries")
        if np.any(h < 0):
            raise ValueError("noisy-OR units need non-negative biases; h has negative entries")
    return arrays, w, h, net_of, clamp


def check_means(u, clamp, name, skip=None):
    """Check means against the clamped units and return them with the clamped values in.

    Parameters
    ----------
    u : array_like of shape (n_items, n_units)
        Means; they must lie in [0, 1] (and not be NaN) at the free units.
    clamp : ndarray of shape (n_items, n_units)
        0 or 1 at clamped units, NaN at free ones.
    name : str
        The argument's name, for the error messages.
    skip : ndarray of bool of shape (n_items, n_units), optional
        Free units whose means are not read (barren units, see ``barren_mask``): their
        entries may hold anything and are returned as 0.5.

    Returns
    -------
    u : ndarray of shape (n_items, n_units)
        The means, with the clamped units' values from ``clamp`` (and 0.5 at ``skip``).

    Raises
    ------
    ValueError
        For a wrong shape, or means outside [0, 1] at free units.

    Examples
    --------
    >>> import numpy as np
    >>> check_means([[0.3, 0.5]], np.array([[np.nan, 1.0]]), "init_mu")
    array([[0.3, 1. ]])
    """
    u = as_matrix(u, name, n_cols=clamp.shape[1], allow_nan=True)
    if u.shape[0] != clamp.shape[0]:
        raise ValueError(f"{name} must have {clamp.shape[0]} rows (one per item), got {u.shape[0]}")
    free = np.isnan(clamp)
    if skip is not None:
        u = np.where(skip, 0.5, u)
    uf = u[free]
    if not np.all((uf >= 0.0) & (uf <= 1.0)):
        raise ValueError(f"{name} must lie in [0, 1] at the free units (and contain no NaN there)")
    return np.ascontiguousarray(np.where(free, u, clamp))


def barren_mask(arrays, clamp):
    """The barren units of every item, bool (n_items, n_units): free units (NaN in ``clamp``)
    none of whose descendants is clamped, which sum out of P(clamped units) exactly.
    ``arrays`` are the checked structure arrays (par_ptr, par_idx, ch_ptr, ch_idx, ch_w)."""
    barren = np.zeros(clamp.shape, dtype=np.uint8)
    if _kernel().barren_units(*arrays, clamp, barren) != 0:  # pragma: no cover - checked
        raise ValueError("structure: inconsistent parent and child lists")
    return barren.astype(bool)


def _check_xi(xi, n_items, n_cols, noisy, name):
    xi = as_matrix(xi, name, n_cols=n_cols)
    if xi.shape[0] != n_items:
        raise ValueError(f"{name} must have {n_items} rows (one per item), got {xi.shape[0]}")
    if noisy and np.any(xi < 0.0):
        raise ValueError(f"{name} (noisy-OR: the q of every edge) must be non-negative")
    if not noisy and not np.all((xi >= 0.0) & (xi <= 1.0)):
        raise ValueError(f"{name} must lie in [0, 1]")
    return xi.copy()


def _raise_status(rc, status, what, nbytes):
    _sjj = _kernel()
    if rc == _sjj.STATUS_EBADARG:   # pragma: no cover - the checks above make this unreachable
        raise ValueError(f"{what}: the kernel refused its arguments (inconsistent sizes)")
    if np.any(status == _sjj.STATUS_ENOMEM):
        raise MemoryError(f"{what}: could not allocate up to {nbytes} bytes of scratch space "
                          "per thread")


# ---------------------------------------------------------------------------- entry points
def solve(structure, w, h, net_of, clamp, tol=1e-6, inner_tol=1e-9, max_sweeps=200, n_threads=1,
          init_mu=None, init_xi=None, record=False, activation="sigmoid"):
    """Maximise the SJJ bound over the means and xi of every item by coordinate ascent.

    Each sweep minimises every unit's xi (a convex 1-D problem) and then moves every free
    mean to a local maximum of the bound along its coordinate; every step raises the bound.
    The bound reported is the computed one minus an upper bound on its rounding error, so
    it stays below ln P(clamped units) at any finite weights (equal to it when no unit is
    free).

    Free units with no clamped descendant ("barren": every child barren, e.g. a missing
    visible unit at the bottom of the net) sum out of P(clamped units) exactly, and the solve
    leaves them out: the bound is that of the net with them deleted, whose maximum is never
    below (and usually above) the one that treating them as free units would give.  Their
    reported means are predictive ones, set top-down from their parents' solved means:
    sigmoid(h_i + sum_j W_ij mu_j) (what a mean-field solve gives a unit without children),
    for noisy-OR
    1 - e^{-h_i} prod_j (1 - mu_j + mu_j e^{-W_ij}) (exact for factorised parents).

    Parameters
    ----------
    structure : DagStructure
        The sparsity pattern shared by every net.
    w : array_like of shape (n_nets, nnz)
        Weights of each net in ``structure``'s parent order (finite).
    h : array_like of shape (n_nets, n_units)
        Biases (finite; positive for noisy-OR units).
    net_of : array_like of int, shape (n_items,)
        The net of each item, in ``[0, n_nets)``.
    clamp : array_like of shape (n_items, n_units)
        The value (0 or 1) of a clamped unit, NaN for a free one (hidden, or missing).
    tol : float, default 1e-6
        Stop an item when a sweep changes its bound by less than this.
    inner_tol : float, default 1e-9
        Tolerance of each 1-D solve, on ``|dL/dmu|`` and ``|dphi/dxi|``.
    max_sweeps : int, default 200
        Sweeps per item at most (0: the bound at the starting point).
    n_threads : int or None, default 1
        OpenMP threads (None: ``OMP_NUM_THREADS`` or all cores; clamped to at least 1).  The
        answers do not depend on it.
    init_mu : array of shape (n_items, n_units), optional
        Starting means of the free units, in [0, 1] (values at clamped units are ignored);
        default 0.5.
    init_xi : array, optional
        Starting xi, (n_items, n_units) in [0, 1] (default 0.5); for noisy-OR the starting q,
        (n_items, nnz), non-negative (each unit's row is normalised; default uniform).
    record : bool, default False
        Also return the bound after every sweep.
    activation : {"sigmoid", "noisy_or"}, default "sigmoid"
        For noisy-OR the variational parameters are one q per edge: ``xi`` is (n_items, nnz)
        in parent order, each unit's q on the simplex over its parents.

    Returns
    -------
    bound : ndarray of shape (n_items,)
        The bound at the solution, below ln P(clamped units).
    mu : ndarray of shape (n_items, n_units)
        The means (clamped units hold their values).
    xi : ndarray of shape (n_items, n_units), or (n_items, nnz) for noisy-OR
        The variational parameters at the solution.
    n_sweeps : intp ndarray of shape (n_items,)
        Sweeps taken.
    converged : bool ndarray of shape (n_items,)
        Whether the last sweep changed the bound by less than ``tol`` (or than its round-off,
        1e-13 of its size).
    history : ndarray of shape (n_items, max_sweeps + 1)
        Only with ``record``: the bound at the starting point and after every sweep, the last
        one the reported bound, NaN-padded.

    Raises
    ------
    TypeError, ValueError
        For arguments of the wrong type, shape or range (the message names the argument).
    MemoryError
        When a thread cannot allocate its scratch space.

    See Also
    --------
    evaluate : The bound at given means and xi.
    gradient : Its derivatives in the weights and biases.

    Examples
    --------
    >>> import numpy as np
    >>> from mfengine.sbn.dag import DagStructure
    >>> W = np.array([[0.0, 0.0], [2.0, 0.0]])       # unit 0 -> unit 1
    >>> s = DagStructure(W != 0)
    >>> clamp = np.array([[np.nan, 1.0]])              # unit 0 hidden, unit 1 seen on
    >>> bound, mu, xi, n_sweeps, converged = solve(s, s.pack(W)[None], np.zeros((1, 2)),
    ...                                            np.zeros(1, dtype=np.intp), clamp)
    >>> bool(bound[0] <= np.log(0.5 * (0.5 + 1 / (1 + np.exp(-2.0)))))
    True
    """
    check_value(activation, "activation", [Options(*ACTIVATIONS)])
    arrays, w, h, net_of, clamp = check_nets(structure, w, h, net_of, clamp, activation)
    tol = check_real(tol, "tol", 0, None)
    inner_tol = check_real(inner_tol, "inner_tol", 0, None)
    max_sweeps = check_int(max_sweeps, "max_sweeps", 0, _INTP_MAX - 1)
    threads = effective_n_threads(n_threads)
    noisy = activation == "noisy_or"
    if noisy and np.any(h <= 0.0):
        raise ValueError("the SJJ bound for noisy-OR units needs positive biases (a leak): with "
                         "h = 0 a unit whose parents are all off can never fire, and the bound "
                         "is -inf; the biases h (h_ of a BeliefNet or BeliefNetBatch) have "
                         f"{int(np.sum(h <= 0.0))} entries <= 0")
    n_items, n = clamp.shape
    nnz = arrays[1].size
    # Outputs the kernel starts from its defaults (means 0.5, xi 0.5, noisy-OR q uniform) are
    # left unwritten here: each item's rows are first written by the thread that solves it,
    # so that the page faults of fresh memory (n_items x nnz q for noisy-OR) are taken by all
    # the threads, not serially before the kernel.
    fill_mu, fill_xi = init_mu is None, init_xi is None
    if fill_mu:
        mu = np.empty((n_items, n))
    else:
        mu = check_means(init_mu, clamp, "init_mu")
    n_xi = nnz if noisy else n
    if fill_xi:
        xi = np.empty((n_items, n_xi))
    else:
        xi = _check_xi(init_xi, n_items, n_xi, noisy, "init_xi")
    bound = np.empty(n_items)
    n_sweeps = np.zeros(n_items, dtype=np.intp)
    conv = np.zeros(n_items, dtype=np.uint8)
    status = np.zeros(n_items, dtype=np.int8)
    hist = np.full((n_items, max_sweeps + 1), np.nan) if record else np.empty((0, 0))
    _sjj = _kernel()
    rc = _sjj.solve(*arrays, w, h, net_of, clamp, mu, xi, bound, n_sweeps, conv, status, hist,
                    tol, inner_tol, max_sweeps, threads, noisy, True, fill_mu, fill_xi)
    # the kernel's per-thread scratch, at most (run_items: fan-in and fan-out <= nnz)
    _raise_status(rc, status, "sjj.solve", (23 * n + 18 * nnz) * 8 + 128)
    out = (bound, mu, xi, n_sweeps, conv.astype(bool))
    return out + (hist,) if record else out


def evaluate(structure, w, h, net_of, clamp, mu, xi, activation="sigmoid", n_threads=1):
    """Evaluate the SJJ bound at given means and variational parameters, per item.

    The value is the one `solve` reports at its solution: the bound minus an upper bound on
    its own rounding error, so that it never exceeds the exactly computed bound.  Free units
    with no clamped descendant are summed out exactly, as in `solve`: they add nothing.

    Parameters
    ----------
    structure : DagStructure
        The sparsity pattern shared by every net.
    w : array_like of shape (n_nets, nnz)
        Weights of each net in ``structure``'s parent order.
    h : array_like of shape (n_nets, n_units)
        Biases.
    net_of : array_like of int, shape (n_items,)
        The net of each item, in ``[0, n_nets)``.
    clamp : array_like of shape (n_items, n_units)
        The value (0 or 1) of a clamped unit, NaN for a free one.
    mu : array_like of shape (n_items, n_units)
        Means of the free units, in [0, 1] (values at clamped and barren units are ignored).
    xi : array_like
        (n_items, n_units) in [0, 1]; for noisy-OR the q of every edge, (n_items, nnz),
        non-negative (each unit's q should lie on the simplex over its parents).
    activation : {"sigmoid", "noisy_or"}, default "sigmoid"
        The units' activation.
    n_threads : int or None, default 1
        OpenMP threads (None: ``OMP_NUM_THREADS`` or all cores).

    Returns
    -------
    bound : ndarray of shape (n_items,)
        The bound, free units' entropies included.

    Raises
    ------
    TypeError, ValueError
        For arguments of the wrong type, shape or range.
    MemoryError
        When a thread cannot allocate its scratch space.

    See Also
    --------
    solve : The bound maximised over mu and xi.

    Examples
    --------
    >>> import numpy as np
    >>> from mfengine.sbn.dag import DagStructure
    >>> s = DagStructure(np.array([[False, False], [True, False]]))
    >>> clamp = np.array([[0.0, 1.0]])                 # both units clamped: the bound is ln P
    >>> b = evaluate(s, [[3.0]], [[0.0, -1.0]], [0], clamp, clamp, [[0.5, 0.5]])
    >>> bool(np.isclose(b[0], -np.log(2) - np.log1p(np.exp(1.0))))
    True
    """
    arrays, w, h, net_of, clamp = check_nets(structure, w, h, net_of, clamp, activation)
    noisy = activation == "noisy_or"
    n_items, n = clamp.shape
    nnz = arrays[1].size
    mu = check_means(mu, clamp, "mu", skip=barren_mask(arrays, clamp))
    xi = _check_xi(xi, n_items, nnz if noisy else n, noisy, "xi")
    bound = np.empty(n_items)
    status = np.zeros(n_items, dtype=np.int8)
    rc = _kernel().evaluate(*arrays, w, h, net_of, clamp, mu, xi, bound, status, noisy,
                            effective_n_threads(n_threads))
    _raise_status(rc, status, "sjj.evaluate", (4 * n + 3 * nnz) * 8 + 3 * n + 16)
    return bound


#: evaluate_half's products stay in the double range while every unit's |h| + sum_in |w| is
#: at most this (each product lies within exp(+-500))
_HALF_SCALE = 1000.0


def evaluate_half(structure, w, h, net_of, clamp, mu, n_threads=1):
    """The sigmoid SJJ bound at given means with every xi at 1/2: ``evaluate(structure, w, h,
    net_of, clamp, mu, 0.5)``, the same number up to rounding, in one pass over the edges
    (no transcendental function per edge; about 10 times faster than `evaluate` on a
    4x12x36x100 net).  A net with a unit whose |h| + sum of |incoming w| exceeds 1,000 is
    evaluated by `evaluate` itself.  This is the certificate a Plefka answer on a sigmoid net
    is held against.

    Parameters
    ----------
    structure, w, h, net_of, clamp, mu, n_threads
        As for `evaluate` (sigmoid units only).

    Returns
    -------
    bound : ndarray of shape (n_items,)
        The bound, free units' entropies included, minus an allowance for its rounding.

    See Also
    --------
    evaluate : The bound at any xi.

    Examples
    --------
    >>> import numpy as np
    >>> from mfengine.sbn.dag import DagStructure
    >>> s = DagStructure(np.array([[False, False], [True, False]]))
    >>> clamp = np.array([[np.nan, 1.0]])
    >>> a = evaluate_half(s, [[3.0]], [[0.0, -1.0]], [0], clamp, [[0.3, 0.0]])
    >>> b = evaluate(s, [[3.0]], [[0.0, -1.0]], [0], clamp, [[0.3, 0.0]], [[0.5, 0.5]])
    >>> bool(np.isclose(a[0], b[0], rtol=1e-12))
    True
    """
    arrays, w, h, net_of, clamp = check_nets(structure, w, h, net_of, clamp, "sigmoid")
    par_ptr = arrays[0]
    # every unit's sum of |incoming w| (a zero column keeps reduceat's indices in range; a unit
    # without parents, whose segment is empty, gets 0)
    padded = np.concatenate([np.abs(w), np.zeros((w.shape[0], 1))], axis=1)
    scale = np.abs(h) + np.add.reduceat(padded, par_ptr[:-1], axis=1) * (np.diff(par_ptr) > 0)
    if not np.all(scale <= _HALF_SCALE):
        n = clamp.shape[1]
        return evaluate(structure, w, h, net_of, clamp, mu, np.full((clamp.shape[0], n), 0.5),
                        n_threads=n_threads)
    mu = check_means(mu, clamp, "mu", skip=barren_mask(arrays, clamp))
    bound = np.empty(clamp.shape[0])
    rc = _kernel().evaluate_half(*arrays, w, h, np.exp(0.5 * w), np.exp(-0.5 * w),
                                 np.exp(0.5 * h), np.exp(-0.5 * h), net_of, clamp, mu, bound,
                                 effective_n_threads(n_threads))
    _raise_status(rc, np.zeros(0, dtype=np.int8), "sjj.evaluate_half", 0)
    if np.isnan(bound).any():        # only where a thread had no scratch space
        raise MemoryError("sjj.evaluate_half: could not allocate "
                          f"{10 * clamp.shape[1] + 16} bytes of scratch space per thread")
    return bound


# ---------------------------------------------------------------------------- gradient
def _l1p_tilt(m, x):
    """ln(1 - m + m e^x) and the tilted mean m e^x / (1 - m + m e^x), elementwise, accurate
    for every finite x and exact for m = 0 or 1 (the kernel's ``l1p_tilt``)."""
    nu = 1.0 - m
    neg = x <= 0.0
    with np.errstate(over="ignore", under="ignore", divide="ignore", invalid="ignore"):
        e = np.exp(np.where(neg, x, -x))
        lead = np.where(neg, m, nu)         # the term multiplied by e^{-|x|} - 1
        other = np.where(neg, nu, m)
        u = lead * (e - 1.0)
        d = np.where(u > -0.5, 1.0 + u, other + lead * e)
        f = np.where(u > -0.5, np.log1p(u), np.log(d)) + np.where(neg, 0.0, x)
        r = np.where(neg, m * e, m) / d
    f = np.where(m == 0.0, 0.0, np.where(nu == 0.0, x, f))
    r = np.where(m == 0.0, 0.0, np.where(nu == 0.0, 1.0, r))
    return f, r


def _segment_sum(vals, ptr):
    """Sums of ``vals[..., ptr[i]:ptr[i+1]]`` for every i (empty segments give 0), each from
    its own terms (no differences of running sums)."""
    out = np.zeros(vals.shape[:-1] + (ptr.size - 1,))
    full = np.diff(ptr) > 0
    if np.any(full):
        out[..., full] = np.add.reduceat(vals, ptr[:-1][full], axis=-1)
    return out


def gradient(structure, w, h, net_of, clamp, mu, xi, activation="sigmoid"):
    """Compute the partial derivatives of the SJJ bound in the weights and biases.

    At a solution of the mean-field equations (mu stationary, xi minimising, as `solve`
    returns) these are the total derivatives of the bound: the learning signal.

    Parameters
    ----------
    structure : DagStructure
        The sparsity pattern shared by every net.
    w : array_like of shape (n_nets, nnz)
        Weights of each net in ``structure``'s parent order.
    h : array_like of shape (n_nets, n_units)
        Biases.
    net_of : array_like of int, shape (n_items,)
        The net of each item, in ``[0, n_nets)``.
    clamp : array_like of shape (n_items, n_units)
        The value (0 or 1) of a clamped unit, NaN for a free one.
    mu : array_like of shape (n_items, n_units)
        Means of the free units, in [0, 1] (values at clamped and barren units are ignored).
    xi : array_like
        (n_items, n_units) in [0, 1]; for noisy-OR the q of every edge, (n_items, nnz).
    activation : {"sigmoid", "noisy_or"}, default "sigmoid"
        The units' activation.

    Returns
    -------
    grad_w : ndarray of shape (n_items, nnz)
        The derivatives dL/dw per item, in ``structure``'s parent order.
    grad_h : ndarray of shape (n_items, n_units)
        The derivatives dL/dh per item.

    Raises
    ------
    TypeError, ValueError
        For arguments of the wrong type, shape or range.

    See Also
    --------
    solve : The solution at which these are the total derivatives.

    Examples
    --------
    >>> import numpy as np
    >>> from mfengine.sbn.dag import DagStructure
    >>> s = DagStructure(np.array([[False, False], [True, False]]))
    >>> clamp = np.array([[1.0, 1.0]])
    >>> gw, gh = gradient(s, [[0.0]], [[0.0, 0.0]], [0], clamp, clamp, [[0.5, 0.5]])
    >>> gh.round(3).tolist()                           # 1 - sigmoid(0) for each unit
    [[0.5, 0.5]]
    """
    arrays, w, h, net_of, clamp = check_nets(structure, w, h, net_of, clamp, activation)
    par_ptr, par_idx = arrays[0], arrays[1]
    n_items, n = clamp.shape
    noisy = activation == "noisy_or"
    barren = barren_mask(arrays, clamp)
    mu = check_means(mu, clamp, "mu", skip=barren)
    xi = _check_xi(xi, n_items, par_idx.size if noisy else n, noisy, "xi")
    W = w[net_of]                                   # (n_items, nnz)
    H = h[net_of]                                   # (n_items, n)
    child = np.repeat(np.arange(n), np.diff(par_ptr))
    mu_p = mu[:, par_idx]                           # parent means, per edge
    if noisy:
        gw, gh = _gradient_noisy_or(par_ptr, W, H, mu, mu_p, child, xi)
    else:
        xi_c = xi[:, child]                         # the child's xi, per edge
        fa, ra = _l1p_tilt(mu_p, -xi_c * W)
        fb, rb = _l1p_tilt(mu_p, (1.0 - xi_c) * W)
        D = H + _segment_sum(fb - fa, par_ptr)      # B - A per unit
        pb = expit(D)                               # weight of the (1 - xi) term
        pa = expit(-D)
        gh = mu - pb
        gw = ((mu - xi)[:, child] * mu_p
              + pa[:, child] * xi_c * ra
              - pb[:, child] * (1.0 - xi_c) * rb)
    # units the solve sums out exactly (free, with no clamped descendant) do not enter the
    # bound: its derivative in their weights and bias is 0
    gh[barren] = 0.0
    gw[barren[:, child]] = 0.0
    return gw, gh


def _dgnor(x):
    """g'(x) for g(x) = ln(1 - e^{-x}): 1 / (e^x - 1), 0 at x = inf."""
    with np.errstate(over="ignore", divide="ignore"):
        return 1.0 / np.expm1(x)


def _gradient_noisy_or(par_ptr, W, H, mu, mu_p, child, q):
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        x = np.where(q > 0, H[:, child] + W / q, np.inf)
    dg = _dgnor(x)                                  # g'(h_i + w_ij / q_ij), per edge
    mu_c = mu[:, child]
    gw = -(1.0 - mu_c) * mu_p + mu_c * mu_p * dg
    dgh = _dgnor(H)
    edge = _segment_sum(q * mu_p * (dg - dgh[:, child]), par_ptr)
    gh = -(1.0 - mu) + mu * (dgh + edge)
    return gw, gh
