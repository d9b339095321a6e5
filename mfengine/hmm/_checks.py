"""Checks of ContextHMM's hyperparameters, parameters and data, as plain functions.

Each verb of :class:`~mfengine.ContextHMM` runs them once, before it builds the problem
record (:mod:`mfengine.hmm._problem`); nothing below reads the estimator.  Integers are
checked as Python integers (so nothing wraps around) against what a C ``ptrdiff_t`` holds;
every message names the argument in the words of the public API.
"""
import numbers
import os

import numpy as np
from sklearn.exceptions import NotFittedError

from mfengine._validation import INTP_MAX as INT64_MAX
from mfengine._validation import (N_THREADS, Options, as_array, as_float_matrix, check_int,
                                  check_value)
from mfengine._validation import check_real as _check_real
from mfengine._validation import effective_n_threads
from mfengine.hmm._chain import START_NAMES
from mfengine.hmm._problem import HMMParams

__all__ = ["INT64_MAX", "CONTEXTS", "METHODS", "ALGORITHMS", "PARAM_CODES", "MAX_MAGNITUDE",
           "check_int", "check_real", "check_lengths", "n_threads_for", "check_starts",
           "check_method", "n_features_of", "check_params", "check_covars", "as_data", "check_data",
           "fit_n_features", "check_fit_data", "check_near_centre", "COVARIANCE_TYPES",
           "MIN_VARIANCE", "MAX_VARIANCE"]

CONTEXTS = ("right", "left", "both")
METHODS = ("structured", "naive", "exact")
ALGORITHMS = ("viterbi", "map")
PARAM_CODES = "stmcrl"
COVARIANCE_TYPES = ("spherical", "diag")
#: The range of an output variance accepted (the kernel solves the model whose data and
#: tables are divided by its square root; those too are held to MAX_MAGNITUDE).
MIN_VARIANCE = 1e-100
MAX_VARIANCE = 1e200
# how far from 1 a row of transmat_ (or startprob_) may sum; beyond _PROB_EXACT (rounding) it
# is then divided by its sum
_PROB_TOL = 1e-6
_PROB_EXACT = 1e-12
#: Largest distance of a mean (from the centre of means_) or a data value (from the centre of
#: its mean, see mfengine.hmm._problem.centred) accepted: squares of 1e100 summed over any
#: sequence stay far inside the float64 range.
MAX_MAGNITUDE = 1e100


def check_real(value, name, allow_none=False):
    """``value`` as a finite float >= 0 (or None when ``allow_none``)."""
    return _check_real(value, name, 0, None, "left", allow_none)


def check_lengths(lengths, n_rows):
    """Turn ``lengths`` into the offsets (n_sequences + 1,) of the sequences in ``n_rows`` rows.

    Each length is compared with ``n_rows`` as a Python integer before anything is summed, so
    that no integer type (int64, uint64) can wrap around to a sum that looks right.

    Parameters
    ----------
    lengths : array_like of int
        Lengths of the concatenated sequences (hmmlearn's convention).
    n_rows : int
        Rows of X.

    Returns
    -------
    offsets : ndarray of intp, shape (n_sequences + 1,)
        Sequence s is rows ``offsets[s]:offsets[s + 1]``.

    Raises
    ------
    ValueError
        If ``lengths`` is not a non-empty 1-D integer sequence whose entries are >= 1 and sum
        to ``n_rows``.

    Examples
    --------
    >>> check_lengths([2, 3], 5)
    array([0, 2, 5])
    """
    arr = lengths if isinstance(lengths, np.ndarray) else np.asarray(lengths, dtype=object)
    if arr.ndim != 1 or arr.size == 0:
        raise ValueError("lengths must be a non-empty 1-D sequence of integers")
    if arr.dtype.kind == "O":
        ok = all(isinstance(v, numbers.Integral) and not isinstance(v, (bool, np.bool_))
                 for v in arr)
    else:
        ok = arr.dtype.kind in "iu"
    if not ok:
        raise ValueError(f"lengths must be a non-empty 1-D sequence of integers, got {lengths!r}"[:300])
    if arr.size > n_rows:
        raise ValueError(f"lengths has {arr.size} entries but X has only {n_rows} rows")
    vals = [int(v) for v in arr]
    if min(vals) < 1:
        raise ValueError("lengths must all be >= 1: an empty sequence (a 0 in lengths, or an "
                         "empty array in a list X of sequences) is not allowed")
    if max(vals) > n_rows:
        raise ValueError(f"lengths must each be at most the {n_rows} rows of X, got {max(vals)}")
    total = sum(vals)
    if total != n_rows:
        raise ValueError(f"lengths sum to {total} but X has {n_rows} rows")
    offsets = np.zeros(len(vals) + 1, dtype=np.intp)
    np.cumsum(np.asarray(vals, dtype=np.intp), out=offsets[1:])
    return offsets


def n_threads_for(n_threads, n_items):
    """Count the OpenMP threads for a kernel call over ``n_items`` sequences.

    Parameters
    ----------
    n_threads : int or None
        Requested threads (None: ``OMP_NUM_THREADS`` or all cores; negative: counted back from
        the number of cores); any integer size.
    n_items : int
        Sequences in the call.

    Returns
    -------
    n : int
        ``n_threads`` clamped to [1, min(cores, n_items)] before it reaches OpenMP.

    Raises
    ------
    ValueError
        If ``n_threads`` is not a non-zero integer or None.

    Examples
    --------
    >>> n_threads_for(10**9, 1)
    1
    """
    check_value(n_threads, "n_threads", [N_THREADS])
    if n_threads is not None:
        n_threads = max(-(os.cpu_count() or 1) - 1, min(int(n_threads), INT64_MAX))
    n = effective_n_threads(n_threads)
    return int(max(1, min(n, os.cpu_count() or 1, n_items)))


def check_starts(st):
    """``st`` (a value of ``starts``) as a tuple of start names, or None for all of them."""
    if isinstance(st, str) and st == "all":
        return None
    names = (st,) if isinstance(st, str) else st
    ok = isinstance(names, (tuple, list)) and len(names) > 0 and all(
        isinstance(k, str) and k in START_NAMES for k in names)
    if not ok or len(set(names)) != len(names):
        raise ValueError(f"starts must be 'all', one of {START_NAMES} or a sequence "
                         f"of them without repeats, got {st!r}")
    return tuple(names)


def check_method(method, name="method", allowed=METHODS):
    """``method`` if it is one of ``allowed``, else ContextHMM's InvalidParameterError."""
    return check_value(method, name, [Options(*allowed)], "ContextHMM")


def _not_fitted(owner):
    return NotFittedError(
        f"This {owner} has no means_: call fit() or assign means_ "
        "(an array of shape (n_states, n_features))")


def n_features_of(n_features, means, owner, X=None):
    """The output dimension: ``n_features``, else the columns of ``means`` (when 2-D), else
    None when data ``X`` are given (they say), else NotFittedError."""
    if n_features is not None:
        return int(n_features)
    if means is not None and as_array(means, "means_").ndim == 2:
        return int(np.shape(means)[1])
    if X is not None:
        return None     # the data say (and are checked for being 2-D)
    raise _not_fitted(owner)


def _check_prob(value, name, shape, rows):
    A = as_array(value, name)
    if A.dtype.kind not in "biuf":
        raise TypeError(f"{name} must be numeric, got dtype {A.dtype}")
    A = np.ascontiguousarray(A, dtype=np.float64)
    if A.shape != shape:
        raise ValueError(f"{name} must have shape {shape} (n_states = {shape[0]}), got {A.shape}")
    what = "rows must be probability vectors" if rows else "must be a probability vector"
    if not np.all(np.isfinite(A)) or np.any(A < 0):
        raise ValueError(f"{name} {what} (non-negative, summing to 1); it has "
                         f"{'non-finite' if not np.all(np.isfinite(A)) else 'negative'} "
                         "entries")
    sums = A.sum(-1)
    off = np.abs(sums - 1.0) > _PROB_TOL
    if np.any(off):
        where = f"row {int(np.argmax(off))} sums" if rows else "it sums"
        raise ValueError(f"{name} {what} (non-negative, summing to 1 within "
                         f"{_PROB_TOL:g}); {where} to {float(sums[off][0])!r}")
    # sums within the tolerance but off by more than rounding (float32 input, rounded
    # decimals): divided by their sums; sums within rounding of 1 are left as they are
    fix = np.abs(sums - 1.0) > _PROB_EXACT
    if np.any(fix):
        A = A.copy()
        A[fix] /= sums[fix][..., None]
    return A


def _check_table(M, name, n, D, present, context):
    M = np.zeros((n, D)) if M is None else as_array(M, name)
    if M.dtype.kind not in "biuf":
        raise TypeError(f"{name} must be numeric, got dtype {M.dtype}")
    M = np.ascontiguousarray(M, dtype=np.float64)
    if M.shape != (n, D):
        raise ValueError(f"{name} must have shape (n_states, n_features) = ({n}, {D}), "
                         f"got {M.shape}")
    if not np.all(np.isfinite(M)):
        raise ValueError(f"{name} contains NaN or infinite values")
    big = float(np.max(np.abs(M - M.mean(axis=0)) if name == "means_" else np.abs(M)))
    if big > MAX_MAGNITUDE:
        raise ValueError(
            f"{name} has entries {big:.3g} away from "
            f"{'their centre' if name == 'means_' else 'zero'}: beyond "
            f"{MAX_MAGNITUDE:g} their squares, summed over a sequence, leave the range "
            "of float64")
    if not present and np.any(M != 0):
        raise ValueError(f"{name} must be all zeros: context={context!r} has no "
                         f"{name.split('_')[0]} context")
    return M


def check_covars(covars, covariance_type, n, D):
    """The output variances (D,) from ``covars_`` in hmmlearn's compact shape: (n_states,)
    for ``"spherical"``, (n_states, n_features) for ``"diag"``, the same row for every state
    (one covariance shared by the states; None: the identity, the paper's model)."""
    if covars is None:
        return np.ones(D)
    C = as_array(covars, "covars_")
    if C.dtype.kind not in "biuf":
        raise TypeError(f"covars_ must be numeric, got dtype {C.dtype}")
    C = np.asarray(C, dtype=np.float64)
    shape = (n,) if covariance_type == "spherical" else (n, D)
    if C.shape != shape:
        names = "(n_states,)" if covariance_type == "spherical" else "(n_states, n_features)"
        raise ValueError(f"covars_ must have shape {names} = {shape} for "
                         f"covariance_type={covariance_type!r}, got {C.shape}")
    if not np.all((C >= MIN_VARIANCE) & (C <= MAX_VARIANCE)):
        bad = C.ravel()[np.flatnonzero(~((C >= MIN_VARIANCE) & (C <= MAX_VARIANCE)))[0]]
        raise ValueError(f"covars_ must hold variances in [{MIN_VARIANCE:g}, "
                         f"{MAX_VARIANCE:g}], got {bad!r}")
    if np.any(C != C[:1]):
        raise ValueError(
            "covars_ must have the same row for every state: ContextHMM's states share one "
            f"{'variance' if covariance_type == 'spherical' else 'diagonal covariance'} (with "
            "a covariance per state, the precision of the state at t would couple the "
            "context states to it through x_t, outside the structured posterior's family); "
            "give one covariance, e.g. np.tile(v, (n_states, 1))")
    return np.ascontiguousarray(np.broadcast_to(C[0], (D,)), dtype=np.float64)


def check_params(n_states, n_features, context, startprob, transmat, means, right_means,
                 left_means, owner="ContextHMM", covars=None, covariance_type="diag"):
    """The model's parameters (the fitted attributes, also ones assigned by hand), validated,
    as an :class:`~mfengine.hmm._problem.HMMParams` of C-contiguous float64 arrays (defaults
    filled in: uniform ``startprob``/``transmat``, zero context tables, unit variances).
    ``owner`` is the class name an unfitted model's error names."""
    n = int(n_states)
    if means is None:
        raise _not_fitted(owner)
    means = as_array(means, "means_")
    D = n_features_of(n_features, means, owner)
    if n_features is not None and np.ndim(means) == 2 and np.shape(means)[1] != D:
        raise ValueError(
            f"n_features={n_features!r} disagrees with means_, which has "
            f"{np.shape(means)[1]} columns (n_features must be None or the number of columns "
            "of means_)")
    U = _check_table(means, "means_", n, D, True, context)
    V = _check_table(right_means, "right_means_", n, D, context in ("right", "both"), context)
    W = _check_table(left_means, "left_means_", n, D, context in ("left", "both"), context)
    sp = np.full(n, 1.0 / n) if startprob is None else _check_prob(startprob, "startprob_",
                                                                     (n,), False)
    A = np.full((n, n), 1.0 / n) if transmat is None else _check_prob(transmat, "transmat_",
                                                                       (n, n), True)
    params = HMMParams(sp, A, U, V, W, check_covars(covars, covariance_type, n, D))
    if not params.unit:
        sigma = np.sqrt(params.variances)
        for M, name in ((U - U.mean(axis=0), "means_"), (V, "right_means_"),
                        (W, "left_means_")):
            big = float(np.max(np.abs(M) / sigma))
            if big > MAX_MAGNITUDE:
                raise ValueError(
                    f"{name} has entries {big:.3g} standard deviations (sqrt(covars_)) away "
                    f"from {'their centre' if name == 'means_' else 'zero'}: beyond "
                    f"{MAX_MAGNITUDE:g} their squares, summed over a sequence, leave the "
                    "range of float64")
    return params


def as_data(X, name, n_cols):
    """X as a float64 C-contiguous matrix; NaN entries are missing values (marginalised),
    infinities are refused."""
    Xc = as_float_matrix(X, name, n_cols=n_cols, allow_nan=True)
    if np.isinf(Xc).any():
        row = int(np.nonzero(np.isinf(Xc).any(axis=1))[0][0])
        raise ValueError(f"{name} contains infinite values (first in row {row}); missing values "
                         "are given as NaN")
    return Xc


def check_data(X, lengths, D):
    """Concatenated (N, D) data and offsets (n_seq + 1,) of its sequences (``D`` None: the
    data's columns).  ``X`` is one array of concatenated sequences (with ``lengths``) or a
    list of sequences."""
    if isinstance(X, (list, tuple)) and len(X) > 0 and all(np.ndim(x) == 2 for x in X):
        if lengths is not None:
            raise ValueError("lengths must be None when X is a list of sequences")
        parts = [as_data(X[0], "X[0]", D)]
        D = parts[0].shape[1]
        parts += [as_data(x, f"X[{i}]", D) for i, x in enumerate(X) if i]
        lengths = [p.shape[0] for p in parts]
        Xc = np.ascontiguousarray(np.concatenate(parts, axis=0))
    else:
        Xc = as_data(X, "X", D)
    if Xc.shape[0] == 0:
        raise ValueError("X has no rows")
    return Xc, check_lengths([Xc.shape[0]] if lengths is None else lengths, Xc.shape[0])


def fit_n_features(X, n_features):
    """fit's output dimension: ``n_features``, or the columns of X (of its first sequence
    when X is a list of them; hmmlearn's rule), or None when X is not 2-D (refused by
    :func:`check_data`)."""
    # X, or its first sequence when X is a list of them (a ragged one refused by name)
    first = X
    if isinstance(X, (list, tuple)) and X and as_array(X[0], "X[0]").ndim == 2:
        first = X[0]
    first = as_array(first, "X")
    if n_features is not None:
        D = int(n_features)
    else:   # hmmlearn's rule: the data say how many features
        D = int(first.shape[1]) if first.ndim == 2 else None
    if n_features is not None and D is not None:
        if first.ndim == 2 and first.shape[1] != D:
            raise ValueError(f"X has {np.shape(first)[1]} columns but n_features="
                             f"{n_features!r} (n_features must be None or the number "
                             "of columns of X)")
    return D


def check_fit_data(Xc, n_states):
    """What fit needs of checked data beyond :func:`check_data`: at least ``n_states`` rows
    with an observed value, every column observed somewhere, and no value so far from the
    others that the squared distances fit computes overflow."""
    N = Xc.shape[0]
    n = int(n_states)
    if N < n:
        raise ValueError(f"X has {N} rows, fewer than n_states={n}")
    missing = np.isnan(Xc)
    if missing.all(axis=0).any():
        d = int(np.nonzero(missing.all(axis=0))[0][0])
        raise ValueError(f"X: column {d} has no observed value (all NaN), so fit cannot "
                         "estimate the means of that feature")
    n_frames = int(np.count_nonzero(~missing.all(axis=1)))
    if n_frames < n:
        raise ValueError(f"X has {n_frames} rows with an observed value (the others are all "
                         f"NaN: missing frames), fewer than n_states={n}")
    # the means are estimated from X: data spread beyond MAX_MAGNITUDE would give means
    # the kernels must refuse, so X is named here (measured from the median, which no
    # value can push to infinity)
    dev = np.abs(Xc - np.nanmedian(Xc, axis=0))
    if np.nanmax(dev) > MAX_MAGNITUDE:
        raise ValueError(
            f"X has values {np.nanmax(dev):.3g} away from the median of their column: beyond "
            f"{MAX_MAGNITUDE:g} the squared distances fit computes leave the range of "
            "float64; rescale X")


def check_near_centre(Xc, centre, variances=None):
    """Refuse data too far from the centre of their mean (see
    :func:`mfengine.hmm._problem.centred`), in units of the outputs' standard deviations
    (``variances``, (D,); None: ones)."""
    dev = np.abs(Xc - centre)
    unit = ""
    if variances is not None and not np.all(variances == 1.0):
        dev = dev / np.sqrt(variances)
        unit = " standard deviations (sqrt(covars_))"
    if dev.size and np.nanmax(dev, initial=0.0) > MAX_MAGNITUDE:
        raise ValueError(
            f"X has values {np.nanmax(dev):.3g}{unit} away from the centre of their mean (the "
            "mean of the rows of means_, plus those of right_means_ and left_means_ where "
            f"the context state lies in the sequence): beyond {MAX_MAGNITUDE:g} their "
            "squares, summed over a sequence, leave the range of float64")
