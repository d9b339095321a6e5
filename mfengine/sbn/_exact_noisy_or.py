"""Exact inference in bipartite noisy-OR diagnosis nets (the QMR-DT shape).

Diseases ``d_j`` are roots with ``P(d_j = 1) = 1 - exp(-hd_j)``; findings are their children
with ``P(f = 0 | d) = exp(-hf_f - sum_j W_fj d_j)``.  For each case (findings recorded as 0 or
1, the others unrecorded) the engine returns ln P(recorded findings) and every disease's
posterior, exactly, in one pass:

1. Unrecorded findings sum out (their factor is 1).
2. Negative findings factorise over the diseases: they multiply each disease's odds by
   ``exp(-sum_{f neg} W_fj)`` and P(e) by ``exp(-sum_{f neg} hf_f)`` times the changed
   normalisers, O(edges) for all cases at once.
3. A disease with no positive child keeps that absorbed prior as its posterior.
4. A disease that is a parent of one positive finding only ("private") sums out into that
   finding's factor, which keeps the noisy-OR form ``1 - c_f exp(-sum_shared W_fj d_j)``; so each
   positive finding becomes a table over its shared parents (parents of two or more positives).
5. Positive findings linked by shared parents form components, solved independently by a
   junction tree over the shared diseases (greedy min-fill elimination order, the elimination
   cliques as the tree, small neighbouring cliques merged; a small component is one table),
   calibrated by one upward and one downward pass.  The shared diseases' posteriors come from
   the clique beliefs; a private disease's from its finding's belief over the shared parents
   times the local posterior of the disease given those parents and the finding.

The tables are built and summed up in log space (``log1mexp``, ``logaddexp``, log-sum-exp), so
that no number of positive findings underflows; the downward pass carries beliefs normalised
to sum 1, whose marginals are sums of non-negative terms.  There is no signed sum that could
cancel (unlike Quickscore's sum over the subsets of the positive findings).

Arrays in, arrays out: nothing here knows about the estimators.
"""
import numbers
import time
from typing import NamedTuple

import numpy as np
import scipy.sparse
from scipy.sparse.csgraph import connected_components

from mfengine._validation import as_float_matrix, check_missing

__all__ = ["BipartiteBlocks", "bipartite_blocks", "exact_bipartite", "DEFAULT_MAX_WIDTH"]

#: Largest table, as a number of diseases (2**width float64 entries: 256 MB at 25).
DEFAULT_MAX_WIDTH = 25

_LN2 = float(np.log(2.0))

# cases handled per block of the vectorised negative-finding step (bounds its memory)
_BLOCK = 1024


# ------------------------------------------------------------------------------ numerics
def _log1mexp(x):
    """ln(1 - e^x) for x <= 0, accurate at both ends (expm1 near 0, log1p far from it)."""
    x = np.asarray(x, dtype=np.float64)
    with np.errstate(divide="ignore"):
        return np.where(x > -_LN2, np.log(-np.expm1(x)), np.log1p(-np.exp(x)))


def _lse(a, axis):
    """ln sum exp over ``axis`` (an int or a tuple); all -inf gives -inf, never NaN."""
    m = np.max(a, axis=axis, keepdims=True)
    m[~np.isfinite(m)] = 0.0
    with np.errstate(divide="ignore"):
        out = np.log(np.sum(np.exp(a - m), axis=axis, keepdims=True))
    out += m
    return np.squeeze(out, axis=axis)


# int.bit_count arrived in Python 3.10; the package supports 3.9
_popcount = getattr(int, "bit_count", None) or (lambda x: bin(x).count("1"))


def _bits(mask):
    """The set bits of a Python int, lowest first."""
    out = []
    while mask:
        low = mask & -mask
        out.append(low.bit_length() - 1)
        mask ^= low
    return out


# ------------------------------------------------------------------------------ checks
def _check_width(max_width):
    if isinstance(max_width, (bool, np.bool_)) or not isinstance(max_width, numbers.Integral) \
            or not 0 <= max_width <= 60:
        raise ValueError(f"max_width must be an integer in [0, 60], got {max_width!r}")
    return int(max_width)


def _check_vector(v, name, n=None):
    arr = np.asarray(v)
    if arr.dtype.kind not in "biuf":
        raise TypeError(f"{name} must be a numeric array, got dtype {arr.dtype}")
    if arr.ndim != 1 or (n is not None and arr.shape[0] != n):
        want = "(n,)" if n is None else f"({n},)"
        raise ValueError(f"{name} must have shape {want}, got {arr.shape}")
    arr = np.ascontiguousarray(arr, dtype=np.float64)
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} contains NaN or infinite values")
    if np.any(arr < 0):
        raise ValueError(f"{name} must be non-negative (noisy-OR biases); found "
                         f"{arr[arr < 0][0]!r} at index {int(np.flatnonzero(arr < 0)[0])}")
    return arr


def _check_sparse_weights(W, name, shape=None):
    """``W`` (dense or scipy.sparse) as a canonical float64 CSR copy: duplicates summed, explicit
    zeros dropped (a zero weight is no dependence), indices sorted; finite and non-negative."""
    if scipy.sparse.issparse(W):
        if W.ndim != 2:
            raise ValueError(f"{name} must be 2-D, got shape {W.shape}")
        if W.dtype.kind not in "biuf":
            raise TypeError(f"{name} must be numeric, got dtype {W.dtype}")
        M = scipy.sparse.csr_matrix(W, dtype=np.float64, copy=True)
    else:
        arr = np.asarray(W)
        if arr.dtype.kind not in "biuf":
            raise TypeError(f"{name} must be a numeric array or a scipy.sparse matrix, got "
                            f"dtype {arr.dtype}")
        if arr.ndim != 2:
            raise ValueError(f"{name} must be 2-D, got shape {arr.shape}")
        M = scipy.sparse.csr_matrix(arr.astype(np.float64))
    if shape is not None and M.shape != tuple(shape):
        raise ValueError(f"{name} must have shape {tuple(shape)}, got {M.shape}")
    M.sum_duplicates()
    if not np.all(np.isfinite(M.data)):
        raise ValueError(f"{name} contains NaN or infinite values")
    if np.any(M.data < 0):
        k = int(np.flatnonzero(M.data < 0)[0])
        row = int(np.searchsorted(M.indptr, k, side="right") - 1)
        raise ValueError(f"{name} must be non-negative (noisy-OR weights); found "
                         f"{M.data[k]!r} at ({row}, {int(M.indices[k])})")
    M.eliminate_zeros()
    M.sort_indices()
    return M


def _check_evidence(evidence, missing, n_findings):
    """The recorded positives and negatives as two boolean (n_cases, n_findings) arrays."""
    E = as_float_matrix(evidence, "evidence", n_cols=n_findings, allow_nan=True,
                        cols_from=" (one per finding)")
    unrecorded = np.isnan(E)
    miss = check_missing(missing, E.shape)
    if miss is not None:
        unrecorded |= miss.astype(bool)
    pos = (E == 1.0) & ~unrecorded
    neg = (E == 0.0) & ~unrecorded
    bad = ~(pos | neg | unrecorded)
    if bad.any():
        r, c = np.argwhere(bad)[0]
        raise ValueError(f"evidence must hold 0, 1 or NaN (unrecorded); found {E[r, c]!r} in "
                         f"case {int(r)}, finding {int(c)}")
    return pos, neg


# ------------------------------------------------------------------------------ the net
class BipartiteBlocks(NamedTuple):
    """The blocks of a bipartite noisy-OR net that ``exact_bipartite`` takes.

    Made by ``bipartite_blocks``; a named tuple, so it also unpacks in this order.

    Parameters
    ----------
    h_disease : ndarray of shape (n_diseases,)
        The diseases' biases (prior ``P(d_j = 1) = 1 - exp(-h_disease[j])``).
    h_finding : ndarray of shape (n_findings,)
        The findings' leak biases.
    W_fd : scipy.sparse.csr_matrix of shape (n_findings, n_diseases)
        ``W_fd[f, j]``: the weight from disease j to finding f.
    diseases : ndarray of int of shape (n_diseases,)
        The net's unit index of each disease (the hidden units, increasing).
    findings : ndarray of int of shape (n_findings,)
        The net's unit index of each finding (the visible units, increasing: column k of the
        data is finding k).

    Examples
    --------
    >>> import mfengine as mf
    >>> from mfengine.sbn._exact_noisy_or import bipartite_blocks
    >>> net = mf.datasets.make_diagnosis_net(5, 9, 2, random_state=0)
    >>> h_disease, h_finding, W_fd, diseases, findings = bipartite_blocks(net.W, net.h, net.visible)
    >>> W_fd.shape, findings.tolist()
    ((9, 5), [5, 6, 7, 8, 9, 10, 11, 12, 13])
    """

    h_disease: np.ndarray
    h_finding: np.ndarray
    W_fd: scipy.sparse.csr_matrix
    diseases: np.ndarray
    findings: np.ndarray


def bipartite_blocks(W, h, visible, activation="noisy_or"):
    """Split a belief net's parameters into the blocks of a bipartite noisy-OR diagnosis net.

    The hidden units are the diseases and must be roots; the visible units are the findings
    and may have only hidden parents.  Anything else is refused.

    Parameters
    ----------
    W : array_like or scipy.sparse matrix of shape (n_units, n_units)
        ``W[i, j]`` is the weight from unit j to unit i (non-negative).
    h : array_like of shape (n_units,)
        Biases (non-negative).
    visible : array_like
        A boolean mask of shape (n_units,), or strictly increasing indices of the visible units.
    activation : str, default="noisy_or"
        The net's activation; only "noisy_or" is accepted.

    Returns
    -------
    blocks : BipartiteBlocks
        ``(h_disease, h_finding, W_fd, diseases, findings)``: copies, the caller's arrays are
        left as they are.

    Raises
    ------
    ValueError
        Naming the argument: a sigmoid (or other) activation, a shape mismatch, a negative or
        non-finite weight or bias, a hidden unit with a parent, a visible unit with a visible
        parent.

    Examples
    --------
    >>> import mfengine as mf
    >>> from mfengine.sbn._exact_noisy_or import bipartite_blocks
    >>> net = mf.datasets.make_diagnosis_net(20, 50, 3, random_state=0)
    >>> b = bipartite_blocks(net.W, net.h, net.visible, net.activation)
    >>> b.W_fd.shape, b.diseases[:3], b.findings[:3]
    ((50, 20), array([0, 1, 2]), array([20, 21, 22]))
    """
    if activation != "noisy_or":
        raise ValueError(f"activation must be 'noisy_or' for exact bipartite inference, got "
                         f"{activation!r}")
    Wc = _check_sparse_weights(W, "W")
    n = Wc.shape[0]
    if Wc.shape[1] != n:
        raise ValueError(f"W must be square (n_units, n_units), got shape {Wc.shape}")
    hc = _check_vector(h, "h", n)
    vis = np.asarray(visible)
    if vis.dtype == np.bool_:
        if vis.shape != (n,):
            raise ValueError(f"visible must be a boolean mask of shape ({n},) or increasing "
                             f"indices, got a mask of shape {vis.shape}")
        mask = vis.copy()
    else:
        if vis.dtype.kind not in "iu" or vis.ndim != 1:
            raise ValueError(f"visible must be a boolean mask of shape ({n},) or a 1-D array "
                             f"of unit indices, got dtype {vis.dtype} and shape {vis.shape}")
        if vis.size and (vis.min() < 0 or vis.max() >= n or np.any(np.diff(vis) <= 0)):
            raise ValueError(f"visible indices must be strictly increasing in [0, {n})")
        mask = np.zeros(n, dtype=bool)
        mask[vis] = True
    diseases = np.flatnonzero(~mask)
    findings = np.flatnonzero(mask)
    rows = np.repeat(np.arange(n), np.diff(Wc.indptr))
    cols = Wc.indices
    bad = ~mask[rows]
    if bad.any():
        k = int(np.flatnonzero(bad)[0])
        raise ValueError(f"W: hidden unit {int(rows[k])} (a disease) has a parent (unit "
                         f"{int(cols[k])}); a bipartite diagnosis net's hidden units are roots")
    bad = mask[cols]
    if bad.any():
        k = int(np.flatnonzero(bad)[0])
        raise ValueError(f"W: visible unit {int(rows[k])} (a finding) has a visible parent "
                         f"(unit {int(cols[k])}); findings may only have hidden parents")
    W_fd = Wc[findings][:, diseases].tocsr()
    W_fd.sort_indices()
    return BipartiteBlocks(hc[diseases].copy(), hc[findings].copy(), W_fd, diseases, findings)


# ------------------------------------------------------------------------------ the tree
def _min_fill_order(adj):
    """Greedy min-fill elimination order of the graph ``adj`` (a list of neighbour bitmasks),
    ties by degree then index.  Returns the order and each vertex's neighbours (a bitmask) at
    its elimination.  Only the scores of vertices near the eliminated one are recomputed."""
    adj = list(adj)
    m = len(adj)

    def fill(v):
        nb = adj[v]
        # each missing edge among v's neighbours is counted from both of its ends
        return (sum(_popcount(nb & ~adj[u]) - 1 for u in _bits(nb)), _popcount(nb), v)

    score = {v: fill(v) for v in range(m)}
    order, nbrs = [], []
    while score:
        v = min(score, key=score.__getitem__)
        del score[v]
        nb = adj[v]
        order.append(v)
        nbrs.append(nb)
        vb = 1 << v
        touched = nb
        for u in _bits(nb):
            adj[u] = (adj[u] | nb) & ~((1 << u) | vb)
        for u in _bits(nb):
            touched |= adj[u]
        for u in _bits(touched):
            if u in score:
                score[u] = fill(u)
    return order, nbrs


#: Cliques are merged while the merged table has at most 2**_MERGE_WIDTH entries (and a
#: component with at most that many shared diseases is one table, with no ordering): below
#: that size a table costs less than the Python overhead of one more clique.
_MERGE_WIDTH = 10


class _Plan(NamedTuple):
    nodes: list        # each node's variables, sorted; variables are renamed by elimination
    #                    step, so a node's eliminated variables come first and a sorted scope
    #                    is in the node's axis order
    n_elim: list       # how many leading variables of each node it sums out going up
    parent: list       # each node's parent (a later node), -1 at the root
    home: list         # each factor's node
    scopes: list       # each factor's scope, renamed and sorted
    weights: list      # each factor's weights, in scope order
    rename: np.ndarray  # the new name of each original variable
    width: int         # variables of the largest table


def _plan(scopes, weights, m, max_width, merge_width=None):
    """Elimination order, tree and factor homes of one component; no table is allocated.
    When the elimination width exceeds ``max_width`` only ``width`` is meaningful."""
    limit = min(_MERGE_WIDTH if merge_width is None else merge_width, max_width)
    if m <= limit:
        # one table over all shared diseases: no order needed
        rename = np.arange(m)
        new_scopes = [sorted(int(v) for v in s) for s in scopes]
        order_w = [np.asarray(w)[np.argsort(s)] for s, w in zip(scopes, weights)]
        return _Plan([list(range(m))], [m], [-1], [0] * len(scopes), new_scopes, order_w,
                     rename, m)
    adj = [0] * m
    for s in scopes:
        mask = 0
        for v in s:
            mask |= 1 << int(v)
        for v in s:
            adj[v] |= mask & ~(1 << int(v))
    order, nbrs = _min_fill_order(adj)
    rename = np.empty(m, dtype=np.intp)
    rename[order] = np.arange(m)
    cliques = [[k] + sorted(int(rename[u]) for u in _bits(nbrs[k])) for k in range(m)]
    width = max(len(c) for c in cliques)
    new_scopes, new_weights = [], []
    for s, w in zip(scopes, weights):
        r = rename[s]
        o = np.argsort(r)
        new_scopes.append([int(x) for x in r[o]])
        new_weights.append(np.asarray(w)[o])
    if width > max_width:
        return _Plan(None, None, None, None, new_scopes, new_weights, rename, width)
    # merge each clique into its parent (the elimination tree: a clique's parent is its
    # smallest neighbour) while the union stays small or is no larger than either
    members = [set(c) for c in cliques]
    elim = [1] * m
    parent = [c[1] if len(c) > 1 else -1 for c in cliques]
    owner = list(range(m))
    for k in range(m):
        p = parent[k]
        if p < 0:
            continue
        union = members[p] | members[k]
        if len(union) <= max(limit, len(members[p]), len(members[k])):
            members[p] = union
            elim[p] += elim[k]
            owner[k] = p
            members[k] = None

    def find(k):
        while owner[k] != k:
            k = owner[k]
        return k

    alive = [k for k in range(m) if members[k] is not None]
    index = {k: i for i, k in enumerate(alive)}
    nodes = [sorted(members[k]) for k in alive]
    par = [index[find(parent[k])] if parent[k] >= 0 else -1 for k in alive]
    # a factor goes to the smallest node holding its scope (the one holding its first
    # variable's clique always does): there it costs least, going up and coming down
    home = []
    for s in new_scopes:
        best = index[find(s[0])]
        for i, k in enumerate(alive):
            if len(nodes[i]) < len(nodes[best]) and members[k].issuperset(s):
                best = i
        home.append(best)
    return _Plan(nodes, [elim[k] for k in alive], par, home, new_scopes, new_weights, rename,
                 max(len(v) for v in nodes))


def _calibrate(plan, logc, lq0, lq1):
    """Junction tree of one component: up in log space, down with normalised beliefs.

    Returns ln E_q[prod_f phi_f], the shared diseases' posteriors (original names), and for
    each factor its posterior over its scope (linear, summing to 1) and the table
    ``x_f = -sum_{j in scope} W_fj d_j`` it was built from: ``phi_f = 1 - exp(logc_f + x_f)``.
    ``lq0``, ``lq1`` are the shared diseases' log priors after the negative findings.
    """
    nodes, n_elim = plan.nodes, plan.n_elim
    nn = len(nodes)
    where = [{v: i for i, v in enumerate(vs)} for vs in nodes]
    lq = np.empty((len(plan.rename), 2))
    lq[plan.rename, 0] = lq0
    lq[plan.rename, 1] = lq1
    xs = []
    assigned = [[] for _ in range(nn)]
    for f, (s, w) in enumerate(zip(plan.scopes, plan.weights)):
        x = np.zeros((2,) * len(s))
        for i in range(len(s)):
            shape = [1] * len(s)
            shape[i] = 2
            x = x + np.array([0.0, -w[i]]).reshape(shape)
        xs.append(x)
        assigned[plan.home[f]].append(f)
    children = [[] for _ in range(nn)]
    for i in range(nn):
        if plan.parent[i] >= 0:
            children[plan.parent[i]].append(i)

    def shape_in(scope, i):
        shape = [1] * len(nodes[i])
        for v in scope:
            shape[where[i][v]] = 2
        return shape

    # upward (collect): each node sums out its eliminated variables, children first
    pot, up = [None] * nn, [None] * nn
    log_z = 0.0
    for i in range(nn):
        vs, ne = nodes[i], n_elim[i]
        t = np.zeros((2,) * len(vs))
        for a in range(ne):
            shape = [1] * len(vs)
            shape[a] = 2
            t += lq[vs[a]].reshape(shape)
        for f in assigned[i]:
            t += _log1mexp(logc[f] + xs[f]).reshape(shape_in(plan.scopes[f], i))
        for c in children[i]:
            t += up[c].reshape(shape_in(nodes[c][n_elim[c]:], i))
        pot[i] = t
        # the eliminated variables lead: sum them out as the rows of a 2-D view
        up[i] = _lse(t.reshape(2**ne, -1), 0).reshape((2,) * (len(vs) - ne))
        if plan.parent[i] < 0:
            log_z += float(up[i])
    # downward (distribute), parents first: a node's normalised belief is its potential plus
    # the message from the rest of the tree (the parent's belief on the separator, less what
    # this node sent up).  Beliefs are kept normalised in linear space, so the messages down
    # are plain sums of non-negative terms; only entries below 1e-308 of a node's total are
    # lost, and with them nothing of the posteriors above that size.
    post = np.empty(len(plan.rename))
    beliefs = [None] * len(plan.scopes)
    P = [None] * nn
    waiting = [len(c) for c in children]       # a belief is dropped once its children have it
    for i in range(nn - 1, -1, -1):
        vs, ne = nodes[i], n_elim[i]
        b = pot[i]
        p = plan.parent[i]
        if p >= 0:
            sep = vs[ne:]
            axes = tuple(a for a, v in enumerate(nodes[p]) if v not in sep)
            marg = P[p].sum(axis=axes) if axes else P[p]
            waiting[p] -= 1
            if not waiting[p]:
                P[p] = None
            with np.errstate(divide="ignore", invalid="ignore"):
                down = np.log(marg) - up[i]
            # where the upward message is zero, so is this node's belief
            down[np.isnan(down)] = -np.inf
            b += down.reshape([1] * ne + [2] * len(sep))
        pot[i] = None
        top = b.max()
        if not np.isfinite(top):                    # evidence of probability zero
            P[i] = np.full(b.shape, np.nan)
        else:
            P[i] = np.exp(b - top)
            P[i] /= P[i].sum()
        # the eliminated variables' posteriors: sum out the separator (contiguous rows), then
        # peel the leading variable off the table, halving it each time
        Q = P[i].reshape(2**ne, -1).sum(axis=1)
        for a in range(ne):
            Q = Q.reshape(2, -1)
            post[vs[a]] = Q[1].sum()
            Q = Q[0] + Q[1]
        for f in assigned[i]:
            axes = tuple(a for a, v in enumerate(vs) if v not in plan.scopes[f])
            beliefs[f] = P[i].sum(axis=axes) if axes else P[i].copy()
        if not waiting[i]:
            P[i] = None
    return log_z, post[plan.rename], beliefs, xs


def _private_posteriors(beliefs, xs, logc, fe, lq1e, ae):
    """Posteriors of the private parents of positive findings in tables.

    For private edge e (disease j, finding f = ``fe[e]``): the sum over the states S of f's
    shared parents of f's belief B_f(S) times ``P(d_j = 1 | S, f = 1) = q1_j (1 - e^{a_e +
    x_f(S)}) / (1 - e^{logc_f + x_f(S)})`` (``a_e``: ln of c_f without j's factor, times
    e^{-W_fj}), all edges in one vectorised pass over the concatenated tables.
    """
    lens = np.array([b.size for b in beliefs])
    off = np.cumsum(lens) - lens
    B = np.concatenate([b.ravel() for b in beliefs])
    x = np.concatenate([t.ravel() for t in xs])
    den = _log1mexp(logc[np.repeat(np.arange(lens.size), lens)] + x)
    ln = lens[fe]
    start = np.cumsum(ln) - ln
    idx = np.repeat(off[fe] - start, ln) + np.arange(ln.sum())
    with np.errstate(invalid="ignore", over="ignore"):
        lpsi = np.repeat(lq1e, ln) + _log1mexp(np.repeat(ae, ln) + x[idx]) - den[idx]
    lpsi[B[idx] == 0.0] = -np.inf      # phi_f = 0 there (its belief is zero too)
    return np.add.reduceat(B[idx] * np.exp(lpsi), start)


def _case(pos, W, lq0, lq1, h_finding, max_width, case):
    """ln E_q[prod over the positive findings of phi_f] for one case, the diseases adjacent to
    a positive finding with their posteriors, and (n_shared, n_components, width)."""
    ptr, idx, wts = W.indptr, W.indices, W.data
    K = pos.size
    starts = ptr[pos]
    lens = ptr[pos + 1] - starts
    frow = np.repeat(np.arange(K), lens)
    edge = np.arange(lens.sum()) + np.repeat(starts - (np.cumsum(lens) - lens), lens)
    dj, w = idx[edge], wts[edge]
    dis, loc, cnt = np.unique(dj, return_inverse=True, return_counts=True)
    shared_e = cnt[loc] >= 2
    priv = np.flatnonzero(~shared_e)
    # private parents sum out into their finding's constant: ln c_f
    t = np.logaddexp(lq0[dj[priv]], lq1[dj[priv]] - w[priv])
    logc = -h_finding[pos] + np.bincount(frow[priv], weights=t, minlength=K)
    # ln(c_f without j's factor, times e^{-W_fj}) <= ln c_f; clamped so that rounding in t
    # cannot push it above (1 - e^a must stay a probability)
    a = np.minimum(logc[frow[priv]] - t - w[priv], logc[frow[priv]])
    post_d = np.empty(dis.size)
    n_shared, n_comp, width = 0, 0, 0
    she = np.flatnonzero(shared_e)
    has_shared = np.zeros(K, dtype=bool)
    has_shared[frow[she]] = True

    # findings alone in their component: a scalar factor 1 - c_f
    alone = ~has_shared
    n_comp += int(alone.sum())
    lphi = _log1mexp(logc[alone])
    log_e = float(lphi.sum())
    pa = alone[frow[priv]]
    with np.errstate(invalid="ignore"):
        post_d[loc[priv[pa]]] = np.exp(lq1[dj[priv[pa]]] + _log1mexp(a[pa])
                                       - lphi[np.cumsum(alone)[frow[priv[pa]]] - 1])
    if not she.size:
        return log_e, dis, post_d, n_shared, n_comp, width

    # the others: components linked by shared parents, one junction tree each
    sv, var = np.unique(loc[she], return_inverse=True)   # shared diseases, local names
    n_shared = sv.size
    g = scipy.sparse.coo_matrix((np.ones(she.size), (frow[she], K + var)),
                                shape=(K + sv.size, K + sv.size))
    _, lab = connected_components(g, directed=False)
    flab = lab[:K]
    cut = np.searchsorted(frow[she], np.arange(1, K))
    fs_of = np.split(np.arange(she.size), cut)
    comps = np.unique(flab[has_shared])
    n_comp += comps.size
    tables_b, tables_x, order_f = [], [], []
    for c in comps:
        F = np.flatnonzero(flab == c)
        V = np.flatnonzero(lab[K:] == c)                   # shared names in this component
        vmap = np.full(sv.size, -1, dtype=np.intp)
        vmap[V] = np.arange(V.size)
        scopes = [vmap[var[fs_of[f]]] for f in F]
        weights = [w[she[fs_of[f]]] for f in F]
        plan = _plan(scopes, weights, V.size, max_width)
        if plan.width > max_width:
            raise ValueError(
                f"case {case}: exact inference needs a table over {plan.width} diseases "
                f"(2**{plan.width} entries); max_width is {max_width}")
        width = max(width, plan.width)
        dV = sv[V]                                          # into dis
        lz, pv, beliefs, xs = _calibrate(plan, logc[F], lq0[dis[dV]], lq1[dis[dV]])
        log_e += lz
        post_d[dV] = pv
        tables_b += beliefs
        tables_x += xs
        order_f.append(F)
    # the private parents of the findings in tables, all at once
    slot = np.full(K, -1, dtype=np.intp)
    order_f = np.concatenate(order_f)
    slot[order_f] = np.arange(order_f.size)
    pt = np.flatnonzero(~pa)                               # private edges of table findings
    if pt.size:
        fe = slot[frow[priv[pt]]]
        o = np.argsort(fe, kind="stable")
        pt, fe = pt[o], fe[o]
        post_d[loc[priv[pt]]] = _private_posteriors(
            tables_b, tables_x, logc[order_f], fe, lq1[dj[priv[pt]]], a[pt])
    return log_e, dis, post_d, n_shared, n_comp, width


# ------------------------------------------------------------------------------ entry point
def exact_bipartite(h_disease, h_finding, W_fd, evidence, missing=None, *,
                    max_width=DEFAULT_MAX_WIDTH):
    """Exact ln P(recorded findings) and disease posteriors of a bipartite noisy-OR net.

    Negative findings are absorbed into the diseases' priors, diseases private to one
    positive finding are summed out analytically, and the positive findings that share
    parents are solved by a log-space junction tree over the shared diseases, one component
    at a time (see the module docstring).

    Parameters
    ----------
    h_disease : array_like of shape (n_diseases,)
        Non-negative disease biases: ``P(d_j = 1) = 1 - exp(-h_disease[j])``.
    h_finding : array_like of shape (n_findings,)
        Non-negative leak biases of the findings.
    W_fd : array_like or scipy.sparse matrix of shape (n_findings, n_diseases)
        Non-negative weights, ``W_fd[f, j]`` from disease j to finding f:
        ``P(f = 0 | d) = exp(-h_finding[f] - sum_j W_fd[f, j] d_j)``.
    evidence : array_like of shape (n_cases, n_findings)
        Each case's findings: 1 (positive), 0 (negative) or NaN (unrecorded).
    missing : array_like of bool, optional
        Unrecorded findings as a mask (True = unrecorded), of ``evidence``'s shape or
        (n_findings,) for every case; such entries of ``evidence`` are ignored.  NaN entries
        are unrecorded too.
    max_width : int, default=25
        Refuse a case whose largest table would hold more than ``2**max_width`` entries (a
        table over more than ``max_width`` diseases); each takes ``8 * 2**width`` bytes.

    Returns
    -------
    log_p : ndarray of shape (n_cases,)
        The log-probability ln P(recorded findings) of each case, in nats; -inf for evidence
        of probability zero.
    marginals : ndarray of shape (n_cases, n_diseases)
        The posteriors ``P(d_j = 1 | evidence)``; NaN throughout a case of probability zero.
    info : dict of ndarray of shape (n_cases,)
        Facts of each case.  "n_positive", "n_negative": recorded findings; "n_shared":
        diseases in the tables (parents of two or more positives); "n_components":
        independent groups of positive findings; "width": diseases in the largest table
        (0 when none); "seconds": time of the case (its share of the vectorised
        negative-finding step included).

    Raises
    ------
    ValueError
        On malformed input (naming the argument), and for a case whose largest table would
        exceed ``2**max_width`` entries; the latter is found from the elimination order
        before any table of that case is allocated.

    Examples
    --------
    >>> import numpy as np
    >>> import mfengine as mf
    >>> from mfengine.sbn._exact_noisy_or import bipartite_blocks, exact_bipartite
    >>> net = mf.datasets.make_diagnosis_net(8, 30, 3, random_state=0)
    >>> b = bipartite_blocks(net.W, net.h, net.visible, net.activation)
    >>> X = net.sample(3, random_state=1)
    >>> X[:, 20:] = np.nan                        # the last ten findings unrecorded
    >>> log_p, marg, info = exact_bipartite(b.h_disease, b.h_finding, b.W_fd, X)
    >>> log_p.shape, marg.shape, sorted(info)[:3]
    ((3,), (3, 8), ['n_components', 'n_negative', 'n_positive'])
    """
    max_width = _check_width(max_width)
    hd = _check_vector(h_disease, "h_disease")
    hf = _check_vector(h_finding, "h_finding")
    W = _check_sparse_weights(W_fd, "W_fd", shape=(hf.size, hd.size))
    pos_all, neg_all = _check_evidence(evidence, missing, hf.size)
    n_cases = pos_all.shape[0]
    nd = hd.size
    log_p = np.empty(n_cases)
    marg = np.empty((n_cases, nd))
    info = {k: np.zeros(n_cases, dtype=np.intp)
            for k in ("n_positive", "n_negative", "n_shared", "n_components", "width")}
    info["seconds"] = np.zeros(n_cases)
    info["n_positive"][:] = pos_all.sum(axis=1)
    info["n_negative"][:] = neg_all.sum(axis=1)
    with np.errstate(divide="ignore"):
        p1 = -np.expm1(-hd)
        lp1 = np.log(p1)                             # ln P(d_j = 1); -inf at a zero bias
    for start in range(0, n_cases, _BLOCK):
        t0 = time.perf_counter()
        rows = slice(start, min(start + _BLOCK, n_cases))
        neg = neg_all[rows].astype(np.float64)
        # negative findings: disease j's state-1 weight is multiplied by exp(-s_j)
        s = np.asarray(W.T @ neg.T).T
        l1 = lp1[None, :] - s
        # ln Z_j = ln(1 - p_j (1 - e^{-s_j})): by log1p where that loses nothing (exactly 0
        # for a disease with no negative child), else as ln(e^{-h_j} + p_j e^{-s_j})
        u = p1[None, :] * -np.expm1(-s)
        log_zj = np.where(u <= 0.5, np.log1p(-np.minimum(u, 0.5)), np.logaddexp(-hd[None, :], l1))
        lq0 = -hd[None, :] - log_zj
        lq1 = l1 - log_zj
        log_p[rows] = -(neg @ hf) + log_zj.sum(axis=1)
        with np.errstate(under="ignore"):
            marg[rows] = np.exp(lq1)
        shared_time = (time.perf_counter() - t0) / neg.shape[0]
        for i in range(rows.start, rows.stop):
            t1 = time.perf_counter()
            r = i - start
            pos = np.flatnonzero(pos_all[i])
            if pos.size:
                log_e, dis, post, n_sh, n_comp, width = _case(
                    pos, W, lq0[r], lq1[r], hf, max_width, i)
                log_p[i] += log_e
                marg[i, dis] = post
                info["n_shared"][i] = n_sh
                info["n_components"][i] = n_comp
                info["width"][i] = width
                if log_p[i] == -np.inf:
                    marg[i] = np.nan
            info["seconds"][i] = shared_time + time.perf_counter() - t1
    return log_p, marg, info
