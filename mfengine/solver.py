"""mfengine.solver: the mean-field solvers for other Cython libraries.

    from mfengine.solver cimport mf_sbn_gaussian_infer, MF_OK

A cimporting extension compiles with include_dirs=[mfengine.get_include()] (the status codes
are the enum of the installed header mf_status.h).  The contract (the same text is
mfengine.solver's module docstring, help(mfengine.solver), and the C header
csrc/mfengine_solver.h declares the same functions for C callers under the names
mfengine_sbn_gaussian_infer / mfengine_sbn_gaussian_gradient):

Every function is noexcept nogil, takes raw pointers and sizes, writes its outputs through
pointers the caller allocated, and returns a status code:
  MF_OK (0) success; MF_NOT_CONVERGED (1) results written, some pattern reached max_sweeps;
  MF_EBADARG (-1) a bad argument (nothing written); MF_ENOMEM (-2) out of memory (nothing
  written); MF_EOVERFLOW (-3) a size or offset computed from the sizes would overflow
  ptrdiff_t (nothing written).
Every argument is checked before anything is read beyond `sizes`; MF_EBADARG means one of:
n_layers < 2; sizes NULL or some sizes[l] < 1; n_patterns < 0; weights or biases NULL, or an
entry that is NaN, infinite or of magnitude above 1e50; an output or data pointer NULL while
n_patterns > 0 (missing may always be NULL); an observed entry of V other than 0.0 and 1.0; a
mean or xi that must lie in [0, 1] and does not; tol not positive and finite; inner_tol NaN
or infinite; max_sweeps < 1.  n_threads is clamped to [1, min(n_patterns, 256)].  What cannot
be checked is that each buffer really holds the number of entries stated below.

Layered sigmoid belief net, L = n_layers layers, top first, the last one visible;
sizes[l] units in layer l; U = sum(sizes) units, n_visible = sizes[L-1].
  weights  the L-1 matrices concatenated: block l is (sizes[l+1], sizes[l]), row-major,
           entry [i, j] the weight from unit j of layer l to unit i of layer l+1
           (mfengine.SigmoidBeliefNet.weights[l].ravel()); finite, |w| <= 1e50.
  biases   (U,) layers concatenated top first; finite, |h| <= 1e50.
  V        (n_patterns, n_visible) row-major, every observed entry 0.0 or 1.0.
  missing  NULL, or (n_patterns, n_visible) bytes: nonzero = missing (left out of the bound).
  mu, xi   (n_patterns, U) row-major, layers concatenated top first.

mf_sbn_gaussian_infer: Saul & Jordan's Gaussian-approximated mean field (as mfengine.infer).
  mu: on entry the hidden entries hold the starting means in [0, 1] (0.5 for a cold start);
      on exit every entry: hidden means, visible data (xi at a missing entry).
  xi: out.  bound (n_patterns,): out, the bound on ln P(v) in nats.  n_sweeps (n_patterns,):
  out.  converged (n_patterns,): out, 1 if the bound changed by less than tol in the last
  sweep.  inner_tol <= 0 selects mfengine.infer's defaults (and its shortcuts); n_threads
  OpenMP threads over patterns (results do not depend on it).

mf_sbn_gaussian_gradient: the gradient of the bound summed over patterns at (mu, xi) (the
  output of mf_sbn_gaussian_infer), as mfengine.SigmoidBeliefNet.gradient: grad_weights in
  the layout of weights, grad_biases (U,).  mu's hidden entries and its visible entries at
  missing positions, and every xi, in [0, 1] (mu's observed visible entries are not read:
  V's are used).  Deterministic, one thread.
"""

import enum
import inspect

__all__ = ["Status", "MF_OK", "MF_NOT_CONVERGED", "MF_EBADARG", "MF_ENOMEM", "MF_EOVERFLOW"]


class Status(enum.IntEnum):
    """The status codes of every mfengine kernel (csrc/mf_status.h).

    For Python code that checks the value a Cython wrapper of the solvers returns.  The
    members are ints (``Status.EBADARG == -1``); ``Status(code)`` names a code.

    Parameters
    ----------
    value : int
        A status code.

    Attributes
    ----------
    OK : int
        0: success.
    NOT_CONVERGED : int
        1: results written; some pattern reached its sweep budget.
    EBADARG : int
        -1: a bad argument (size, pointer or value); nothing written.
    ENOMEM : int
        -2: a scratch allocation failed; nothing written.
    EOVERFLOW : int
        -3: a size or offset computed from the sizes would overflow ptrdiff_t; nothing
        written.

    Raises
    ------
    ValueError
        If ``value`` is not one of the codes.

    See Also
    --------
    MF_OK, MF_NOT_CONVERGED, MF_EBADARG, MF_ENOMEM, MF_EOVERFLOW : The same values by their C
        names.

    Examples
    --------
    >>> from mfengine.solver import Status, MF_EBADARG
    >>> Status(-1)
    <Status.EBADARG: -1>
    >>> MF_EBADARG == -1, Status(MF_EBADARG).name
    (True, 'EBADARG')
    """

    OK = 0
    NOT_CONVERGED = 1
    EBADARG = -1
    ENOMEM = -2
    EOVERFLOW = -3


# Status(code) is the only call: its signature for help() and numpydoc (not EnumType's).
Status.__signature__ = inspect.Signature(
    [inspect.Parameter("value", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=int)])

#: 0, success (``Status.OK``).
MF_OK = Status.OK
#: 1, results written, some pattern reached max_sweeps (``Status.NOT_CONVERGED``).
MF_NOT_CONVERGED = Status.NOT_CONVERGED
#: -1, a bad argument, nothing written (``Status.EBADARG``).
MF_EBADARG = Status.EBADARG
#: -2, out of memory, nothing written (``Status.ENOMEM``).
MF_ENOMEM = Status.ENOMEM
#: -3, a size computed from the sizes would overflow ptrdiff_t, nothing written
#: (``Status.EOVERFLOW``).
MF_EOVERFLOW = Status.EOVERFLOW
