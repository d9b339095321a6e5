/* mfengine's mean-field solvers for C callers.  The contract (layouts, units, status codes,
 * every MF_EBADARG condition) is written in mfengine/solver.pxd and mfengine.solver's
 * docstring; these are the same functions.
 *
 * Linkable symbols, each in its family's compiled module: mfengine_sbn_gaussian_* in
 * mfengine/sbn/_gaussian*.so, mfengine_plefka_* in mfengine/sbn/_plefka*.so, mfengine_hmm_* in
 * mfengine/hmm/_chain*.so, mfengine_nlgbn_infer in mfengine/nlgbn/_estep*.so,
 * mfengine_sjj_solve in mfengine/sbn/_sjj*.so.  Link against that file and against libpython,
 * which the module needs to load.  None needs a running interpreter (their threads run in
 * plain C); in a process that runs Python they may be called with or without the GIL.
 *
 * The same functions are also reachable through their extension module's Cython capsules once
 * Python runs in the process: include Python.h before this header, start the interpreter (the
 * one mfengine is installed in), and
 *     mfengine_plefka_solve_fn solve =
 *         (mfengine_plefka_solve_fn) mfengine_capi_import("mfengine.sbn._plefka",
 *                                                         "mf_plefka_solve");
 * (NULL with a Python exception set when absent).  The pointer stays valid while the
 * interpreter runs; the functions themselves need no GIL.
 *     module                 capsule names            linkable as
 *     mfengine.sbn._gaussian mf_sbn_gaussian_infer,   mfengine_sbn_gaussian_infer,
 *                            mf_sbn_gaussian_gradient mfengine_sbn_gaussian_gradient
 *     mfengine.sbn._sjj      mf_sjj_solve             mfengine_sjj_solve
 *     mfengine.sbn._plefka   mf_plefka_solve,         mfengine_plefka_solve,
 *                            mf_plefka_gradient       mfengine_plefka_gradient
 *     mfengine.hmm._chain    mf_hmm_fb_infer,         mfengine_hmm_fb_infer,
 *                            mf_hmm_structured_infer, mfengine_hmm_structured_infer,
 *                            mf_hmm_structured_infer_starts,
 *                                                     mfengine_hmm_structured_infer_starts,
 *                            mf_hmm_naive_infer,      mfengine_hmm_naive_infer,
 *                            mf_hmm_infer_diag        mfengine_hmm_infer_diag
 *     mfengine.nlgbn._estep  mf_nlgbn_infer           mfengine_nlgbn_infer
 */
#ifndef MFENGINE_SOLVER_H
#define MFENGINE_SOLVER_H

#include <stddef.h>
#include "mf_status.h"   /* MF_OK, MF_NOT_CONVERGED, MF_EBADARG, MF_ENOMEM, MF_EOVERFLOW */

#ifdef __cplusplus
extern "C" {
#endif

/* ---- linkable symbols ---- */

int mfengine_sbn_gaussian_infer(
    ptrdiff_t n_layers, const ptrdiff_t *sizes, const double *weights, const double *biases,
    ptrdiff_t n_patterns, const double *V, const unsigned char *missing,
    double tol, double inner_tol, ptrdiff_t max_sweeps, int n_threads,
    double *mu, double *xi, double *bound, ptrdiff_t *n_sweeps, signed char *converged);

int mfengine_sbn_gaussian_gradient(
    ptrdiff_t n_layers, const ptrdiff_t *sizes, const double *weights, const double *biases,
    ptrdiff_t n_patterns, const double *V, const unsigned char *missing,
    const double *mu, const double *xi, double *grad_weights, double *grad_biases);

int mfengine_sjj_solve(
    ptrdiff_t n_units, ptrdiff_t nnz, const ptrdiff_t *par_ptr, const ptrdiff_t *par_idx,
    const double *weights, const double *biases, int activation, ptrdiff_t n_items,
    const double *clamp, const double *init_mu, const double *init_xi, double tol,
    double inner_tol, ptrdiff_t max_sweeps, int n_threads, double *bound, double *mu,
    double *xi, ptrdiff_t *n_sweeps, signed char *converged);

/* The context-HMM entry points, plain C in mfengine/hmm/_chain*.so: no interpreter needed
 * (link against that file, and against libpython, which the module needs to load).  The same
 * functions as the capsules mf_hmm_fb_infer, mf_hmm_structured_infer,
 * mf_hmm_structured_infer_starts, mf_hmm_naive_infer, mf_hmm_infer_diag.  All but the last
 * take unit output covariance; mfengine_hmm_infer_diag takes a diagonal one (variances, one a
 * dimension, NULL for the identity) and either method. */

/* The starts of the structured solver, the bits of mfengine_hmm_structured_infer_starts's
 * mask (ContextHMM(starts=...)'s names "link", "naive-link", "first-order", "own-means");
 * mfengine_hmm_structured_infer runs all four. */
#define MFENGINE_HMM_START_LINK 1u          /* the link solution from the first-order posterior */
#define MFENGINE_HMM_START_NAIVE_LINK 2u    /* the link solution from the naive marginals */
#define MFENGINE_HMM_START_FIRST_ORDER 4u   /* the first-order posterior */
#define MFENGINE_HMM_START_OWN_MEANS 8u     /* ... of the model with its context means left out */
#define MFENGINE_HMM_ALL_STARTS 15u

/* The methods of mfengine_hmm_infer_diag. */
#define MFENGINE_HMM_METHOD_STRUCTURED 0    /* ContextHMM.infer(method="structured") */
#define MFENGINE_HMM_METHOD_NAIVE 1         /* ContextHMM.infer(method="naive") */

int mfengine_hmm_fb_infer(
    ptrdiff_t T, ptrdiff_t n, const double *startprob, const double *transmat,
    const double *logpot, double *gamma, double *xi_sum, double *logz);

int mfengine_hmm_structured_infer(
    ptrdiff_t n, ptrdiff_t D, ptrdiff_t lag, int context, const double *startprob,
    const double *transmat, const double *U, const double *V, const double *W,
    ptrdiff_t n_seq, const ptrdiff_t *lengths, const double *X, ptrdiff_t max_sweeps,
    double tol, int n_threads, double *gamma, double *logpot, double *bound,
    ptrdiff_t *n_sweeps, signed char *converged);

int mfengine_hmm_structured_infer_starts(
    ptrdiff_t n, ptrdiff_t D, ptrdiff_t lag, int context, const double *startprob,
    const double *transmat, const double *U, const double *V, const double *W,
    ptrdiff_t n_seq, const ptrdiff_t *lengths, const double *X, ptrdiff_t max_sweeps,
    double tol, int n_threads, unsigned starts, double *gamma, double *logpot, double *bound,
    ptrdiff_t *n_sweeps, signed char *converged);

int mfengine_hmm_naive_infer(
    ptrdiff_t n, ptrdiff_t D, ptrdiff_t lag, int context, const double *startprob,
    const double *transmat, const double *U, const double *V, const double *W,
    ptrdiff_t n_seq, const ptrdiff_t *lengths, const double *X, ptrdiff_t max_sweeps,
    double tol, int n_threads, double *gamma, double *bound, ptrdiff_t *n_sweeps,
    signed char *converged);

/* method MFENGINE_HMM_METHOD_*, starts the mask (structured only), variances (D) or NULL;
 * logpot is written by the structured method only (may be NULL for the naive one). */
int mfengine_hmm_infer_diag(
    int method, unsigned starts, ptrdiff_t n, ptrdiff_t D, ptrdiff_t lag, int context,
    const double *startprob, const double *transmat, const double *U, const double *V,
    const double *W, const double *variances, ptrdiff_t n_seq, const ptrdiff_t *lengths,
    const double *X, ptrdiff_t max_sweeps, double tol, int n_threads, double *gamma,
    double *logpot, double *bound, ptrdiff_t *n_sweeps, signed char *converged);

/* The NLGBN E-step, plain C in mfengine/nlgbn/_estep*.so: no interpreter needed (the same
 * function as the capsule mf_nlgbn_infer). */
int mfengine_nlgbn_infer(
    ptrdiff_t n_layers, const ptrdiff_t *sizes, const signed char *types,
    const double *weights, const double *biases, const double *variances,
    ptrdiff_t n_patterns, const double *X, const unsigned char *missing,
    double tol, ptrdiff_t max_sweeps, int warm_start, int n_threads,
    double *mu, double *logvar, double *bound, ptrdiff_t *n_sweeps,
    unsigned char *converged);

/* The Plefka schemes, in mfengine/sbn/_plefka*.so: no interpreter needed (the same functions
 * as the capsules mf_plefka_solve, mf_plefka_gradient). */
int mfengine_plefka_solve(
    ptrdiff_t n_units, ptrdiff_t nnz, const ptrdiff_t *par_ptr, const ptrdiff_t *par_idx,
    const double *weights, const double *biases, int activation, int order, ptrdiff_t n_items,
    const double *clamp, const double *init, double tol, ptrdiff_t max_iter, int n_threads,
    double *G, double *u, ptrdiff_t *n_iter, signed char *converged);

int mfengine_plefka_gradient(
    ptrdiff_t n_units, ptrdiff_t nnz, const ptrdiff_t *par_ptr, const ptrdiff_t *par_idx,
    const double *weights, const double *biases, int activation, int order, ptrdiff_t n_items,
    const double *clamp, const double *u, double *G, double *grad_weights,
    double *grad_biases);

/* ---- reachable through the capsules: the functions' types ---- */

typedef int (*mfengine_plefka_solve_fn)(
    ptrdiff_t n_units, ptrdiff_t nnz, const ptrdiff_t *par_ptr, const ptrdiff_t *par_idx,
    const double *weights, const double *biases, int activation, int order, ptrdiff_t n_items,
    const double *clamp, const double *init, double tol, ptrdiff_t max_iter, int n_threads,
    double *G, double *u, ptrdiff_t *n_iter, signed char *converged);

typedef int (*mfengine_plefka_gradient_fn)(
    ptrdiff_t n_units, ptrdiff_t nnz, const ptrdiff_t *par_ptr, const ptrdiff_t *par_idx,
    const double *weights, const double *biases, int activation, int order, ptrdiff_t n_items,
    const double *clamp, const double *u, double *G, double *grad_weights,
    double *grad_biases);

typedef int (*mfengine_hmm_fb_infer_fn)(
    ptrdiff_t T, ptrdiff_t n, const double *startprob, const double *transmat,
    const double *logpot, double *gamma, double *xi_sum, double *logz);

typedef int (*mfengine_hmm_structured_infer_fn)(
    ptrdiff_t n, ptrdiff_t D, ptrdiff_t lag, int context, const double *startprob,
    const double *transmat, const double *U, const double *V, const double *W,
    ptrdiff_t n_seq, const ptrdiff_t *lengths, const double *X, ptrdiff_t max_sweeps,
    double tol, int n_threads, double *gamma, double *logpot, double *bound,
    ptrdiff_t *n_sweeps, signed char *converged);

typedef int (*mfengine_hmm_structured_infer_starts_fn)(
    ptrdiff_t n, ptrdiff_t D, ptrdiff_t lag, int context, const double *startprob,
    const double *transmat, const double *U, const double *V, const double *W,
    ptrdiff_t n_seq, const ptrdiff_t *lengths, const double *X, ptrdiff_t max_sweeps,
    double tol, int n_threads, unsigned starts, double *gamma, double *logpot, double *bound,
    ptrdiff_t *n_sweeps, signed char *converged);

typedef int (*mfengine_hmm_naive_infer_fn)(
    ptrdiff_t n, ptrdiff_t D, ptrdiff_t lag, int context, const double *startprob,
    const double *transmat, const double *U, const double *V, const double *W,
    ptrdiff_t n_seq, const ptrdiff_t *lengths, const double *X, ptrdiff_t max_sweeps,
    double tol, int n_threads, double *gamma, double *bound, ptrdiff_t *n_sweeps,
    signed char *converged);

typedef int (*mfengine_hmm_infer_diag_fn)(
    int method, unsigned starts, ptrdiff_t n, ptrdiff_t D, ptrdiff_t lag, int context,
    const double *startprob, const double *transmat, const double *U, const double *V,
    const double *W, const double *variances, ptrdiff_t n_seq, const ptrdiff_t *lengths,
    const double *X, ptrdiff_t max_sweeps, double tol, int n_threads, double *gamma,
    double *logpot, double *bound, ptrdiff_t *n_sweeps, signed char *converged);

typedef int (*mfengine_nlgbn_infer_fn)(
    ptrdiff_t n_layers, const ptrdiff_t *sizes, const signed char *types,
    const double *weights, const double *biases, const double *variances,
    ptrdiff_t n_patterns, const double *X, const unsigned char *missing,
    double tol, ptrdiff_t max_sweeps, int warm_start, int n_threads,
    double *mu, double *logvar, double *bound, ptrdiff_t *n_sweeps,
    unsigned char *converged);

#ifdef Py_PYTHON_H
/* The C function `name` exported by the extension module `module` (imported if need be),
 * from its Cython capsule; NULL with a Python exception set if there is none.  Call with the
 * GIL held. */
static inline void *mfengine_capi_import(const char *module, const char *name) {
    void *fn = NULL;
    PyObject *mod = PyImport_ImportModule(module), *table, *capsule;
    if (mod == NULL)
        return NULL;
    table = PyObject_GetAttrString(mod, "__pyx_capi__");
    Py_DECREF(mod);
    if (table == NULL)
        return NULL;
    capsule = PyDict_Check(table) ? PyDict_GetItemString(table, name) : NULL;
    if (capsule == NULL)
        PyErr_Format(PyExc_AttributeError, "%s exports no C function %s", module, name);
    else
        fn = PyCapsule_GetPointer(capsule, PyCapsule_GetName(capsule));
    Py_DECREF(table);
    return fn;
}
#endif

#ifdef __cplusplus
}
#endif

#endif
