# cython: language_level=3
"""A Cython extension that calls mfengine's Gaussian mean-field solver without the GIL.

Build it with ``python setup_cython.py build_ext --inplace`` (see that file), then::

    >>> import numpy as np, mfengine as mf, gaussian_from_cython
    >>> net = mf.SigmoidBeliefNet([3, 7, 16], random_state=0)
    >>> X = net.sample(40, random_state=1)
    >>> bound = gaussian_from_cython.bounds(net.sizes, net.weights_, net.biases_, X)
    >>> np.allclose(bound, net.score_samples(X))
    True
"""
import numpy as np

from mfengine.solver cimport MF_OK, MF_NOT_CONVERGED, mf_sbn_gaussian_infer


def bounds(sizes, weights, biases, X, double tol=1e-6, int n_threads=1):
    """The Gaussian-approximated bound of every row of X (nats), as score_samples."""
    cdef Py_ssize_t[::1] sz = np.ascontiguousarray(sizes, dtype=np.intp)
    cdef const double[::1] w = np.ascontiguousarray(
        np.concatenate([np.ravel(m) for m in weights]), dtype=np.float64)
    cdef const double[::1] b = np.ascontiguousarray(np.concatenate(biases), dtype=np.float64)
    cdef const double[:, ::1] v = np.ascontiguousarray(X, dtype=np.float64)
    cdef Py_ssize_t n = v.shape[0], units = int(np.sum(sizes))
    cdef double[:, ::1] mu = np.full((n, units), 0.5)      # cold start: every mean 0.5
    cdef double[:, ::1] xi = np.empty((n, units))
    cdef double[::1] bound = np.empty(n)
    cdef Py_ssize_t[::1] sweeps = np.empty(n, dtype=np.intp)
    cdef signed char[::1] converged = np.empty(n, dtype=np.int8)
    cdef int status
    with nogil:
        status = mf_sbn_gaussian_infer(sz.shape[0], &sz[0], &w[0], &b[0], n, &v[0, 0], NULL,
                                       tol, 0.0, 200, n_threads, &mu[0, 0], &xi[0, 0],
                                       &bound[0], &sweeps[0], &converged[0])
    if status not in (MF_OK, MF_NOT_CONVERGED):
        raise ValueError(f"mf_sbn_gaussian_infer returned status {status}")
    return np.asarray(bound)
