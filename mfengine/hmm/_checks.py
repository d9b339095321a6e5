"""Checks of ContextHMM's hyperparameters and inputs, run immediately before every compiled call.

Integers are checked as Python integers (so nothing wraps around) against what a C
``ptrdiff_t`` holds; every message names the argument in the words of the public API.
"""
import numbers
import os

import numpy as np

from mfengine._validation import INTP_MAX as INT64_MAX
from mfengine._validation import N_THREADS, check_int, check_value
from mfengine._validation import check_real as _check_real
from mfengine._validation import effective_n_threads

__all__ = ["INT64_MAX", "check_int", "check_real", "check_lengths", "n_threads_for"]

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
