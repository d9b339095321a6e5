"""Kernel: Gaussian-approximated mean field for layered sigmoid belief nets (Saul & Jordan).

Called from the layered sigmoid belief net's inference and training (``run``, ``fit_epoch``),
and from C and Cython callers through the C-level API (``mfengine.solver``).  Every entry point
checks its arguments against the net's sizes before any memory is touched.

State per pattern (all units, layers concatenated top first): ``mu``, ``xi``, and the cached
``m`` (mean input), ``s`` (input variance) and ``sig = sigmoid(m + (1/2 - xi) s)``.

One sweep: recompute m, s, sig exactly from mu; then for each hidden layer (bottom-up on even
sweeps, top-down on odd ones) update every unit's mu with the children's xi held fixed, then
re-solve the xi of the layer below (its input statistics have changed).  Each mu update is a
bracketed, safeguarded Newton search in t = logit(mu) on the exact 1-D objective; each xi
update is a safeguarded Newton root of xi = sigmoid(m + (1/2 - xi) s).  Both raise the bound.

The first evaluation of a mu update reads the children's cached sig and needs no exp; a unit
already at its optimum costs one pass over its children with no transcendental call.

One extension module, one idea per source file (Cython ``include``, so every call between them
stays a direct C call): _gaussian_state.pxi (the net's layout and a pattern's cached
statistics), _gaussian_xi.pxi (the xi updates), _gaussian_mu.pxi (the 1-D maximiser in one
mean), _gaussian_sweep.pxi (the solver of one pattern), _gaussian_checks.pxi (argument checks
at the Python boundary), _gaussian_run.pxi (inference from Python), _gaussian_epoch.pxi
(learning) and _gaussian_capi.pxi (the C-level API); the per-child loops are plain C in
csrc/mf_sbn.c.
"""
import numbers

import numpy as np

from mfengine._validation import check_int, check_tol

from cython.parallel cimport prange, parallel
from libc.float cimport DBL_MAX
from libc.math cimport fabs, log, sqrt
from libc.stdlib cimport malloc, free
from mfengine._typedefs cimport intp_t, uint8_t, int8_t

cdef extern from "<stdint.h>" nogil:
    const Py_ssize_t PTRDIFF_MAX

cdef extern from "mf_numerics.h" nogil:
    void mf_sig_u(double a, double *sig, double *u)
    double mf_log1pexp(double x)
    double mf_sigmoid(double x)

cdef extern from "mf_parallel.h" nogil:
    const int MF_MAX_THREADS
    ctypedef void (*mf_body_fn)(void *ctx, Py_ssize_t i, int thread) noexcept nogil
    int mf_clamp_threads(Py_ssize_t n_threads, Py_ssize_t n_items)
    void mf_parallel_for(Py_ssize_t n, int n_threads, mf_body_fn body, void *ctx)

cdef extern from "mf_sbn.h" nogil:
    const double MF_SBN_PARAM_LIMIT
    void mf_sbn_children_eval(Py_ssize_t n, const double *J, const double *J2,
                              const double *m, const double *s, const double *xi,
                              const double *muc, const double *obs,
                              double dmu, double dvar, double tk, int want_f, int want_u,
                              double *sig_out, double *u_out, double *out)
    void mf_sbn_children_cached(Py_ssize_t n, const double *J, const double *J2,
                                const double *xi, const double *sig, const double *muc,
                                const double *obs, double tk, double *out)
    double mf_sbn_children_value(Py_ssize_t n, const double *m, const double *s, const double *xi,
                                 const double *u, const double *muc, const double *obs)
    void mf_sbn_sig_u_all(Py_ssize_t n, const double *m, const double *s, const double *xi,
                          double *sig, double *u)
    double mf_sbn_layer_bound(Py_ssize_t n, const double *mu, const double *t, const double *m,
                              const double *s, const double *xi, const double *obs)
    void mf_sbn_children_commit_taylor(Py_ssize_t n, const double *J, const double *J2,
                                       const double *xi, double dmu, double dvar, double *m,
                                       double *s, double *sig, double *u)
    void mf_sbn_children_commit(Py_ssize_t n, const double *J, const double *J2, double dmu,
                                double dvar, double *m, double *s, double *sig, double *u,
                                const double *sig_new, const double *u_new, int want_u)

# Means are kept at sigmoid(t) with |t| <= T_MAX; mu itself may round to 0 or 1 (t ~ +-37),
# which is harmless: the entropy and the searches work with t.
DEF T_MAX = 40.0
DEF T_TOL = 1e-11      # bracket width (in t) at which a mu search stops
DEF MAX_IT = 100       # evaluations per 1-D solve, a safety net (typically 0 to 4)
DEF CONCAVE_LIMIT = 4.0
DEF PROBE_T = 8.0        # where the other basin of a non-concave 1-D problem is probed
DEF PROBE_BELOW = 0.02   # ... when its maximum has mu in (PROBE_BELOW, 1 - PROBE_BELOW)
DEF F_NOISE = 1e-14       # relative round-off of a 1-D objective value
DEF RECOMPUTE_EVERY = 4   # sweeps between exact recomputations of the cached statistics
DEF DA_LAZY = 3e-3        # a step moving no child's input by more than this updates sig by Taylor

include "_gaussian_state.pxi"
include "_gaussian_xi.pxi"
include "_gaussian_mu.pxi"
include "_gaussian_sweep.pxi"
include "_gaussian_checks.pxi"
include "_gaussian_run.pxi"
include "_gaussian_epoch.pxi"
include "_gaussian_capi.pxi"
