/* mfengine's mean-field solvers for C callers.  The contract (layouts, units, status codes) is
 * written in mfengine/solver.pxd and mfengine.solver's docstring; these are the same functions.
 *
 * The symbols live in the compiled module mfengine/sbn/_gaussian*.so: link against that file
 * (and against libpython, which the module needs to load; Python itself need not be running). */
#ifndef MFENGINE_SOLVER_H
#define MFENGINE_SOLVER_H

#include <stddef.h>
#include "mf_status.h"   /* MF_OK, MF_NOT_CONVERGED, MF_EBADARG, MF_ENOMEM, MF_EOVERFLOW */

#ifdef __cplusplus
extern "C" {
#endif

int mfengine_sbn_gaussian_infer(
    ptrdiff_t n_layers, const ptrdiff_t *sizes, const double *weights, const double *biases,
    ptrdiff_t n_patterns, const double *V, const unsigned char *missing,
    double tol, double inner_tol, ptrdiff_t max_sweeps, int n_threads,
    double *mu, double *xi, double *bound, ptrdiff_t *n_sweeps, signed char *converged);

int mfengine_sbn_gaussian_gradient(
    ptrdiff_t n_layers, const ptrdiff_t *sizes, const double *weights, const double *biases,
    ptrdiff_t n_patterns, const double *V, const unsigned char *missing,
    const double *mu, const double *xi, double *grad_weights, double *grad_biases);

#ifdef __cplusplus
}
#endif

#endif
