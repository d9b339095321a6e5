/* Context-sensitive hidden Markov models (Saul & Jordan 1996, sec. 3 and eq. 23): the scaled
 * forward-backward pass, structured and fully factorised mean field, and the exact likelihood by
 * forward recursion over the augmented state (S_{t-lag}, ..., S_{t+lag}).
 *
 * Model (one sequence x_0 .. x_{T-1}, states s_t in 0..n-1, D-dimensional outputs):
 *   P(s) = startprob[s_0] prod_t transmat[s_t, s_{t+1}],
 *   x_t ~ N(U[s_t] + V[s_{t+lag}] + W[s_{t-lag}], I),
 * where the V term is present only with right context and t + lag < T, the W term only with
 * left context and t - lag >= 0.  The derivation of the mean-field updates is in
 * docs/context_hmm.md; mfengine/hmm/_chain.pyx calls these functions.
 *
 * Conventions: matrices are row-major and contiguous; outputs go to caller-allocated buffers;
 * every function returns MF_HMM_OK or an error status and never prints.  The functions are
 * re-entrant (no global state), so sequences may be processed on different threads.
 */
#ifndef MF_HMM_H
#define MF_HMM_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define MF_HMM_OK 0
#define MF_HMM_ENOMEM 1       /* scratch allocation failed */
#define MF_HMM_IMPOSSIBLE 2   /* the sequence has probability zero under the model */
#define MF_HMM_NONFINITE 3    /* a NaN or infinite value appeared */

/* lambda^2 of a link variable is kept in [MF_HMM_LAM2_MIN, MF_HMM_LAM2_MAX]; any value gives a
 * valid bound, the clip only stops a degenerate marginal from producing 0 or infinity. */
#define MF_HMM_LAM2_MIN 1e-6
#define MF_HMM_LAM2_MAX 1e6

typedef struct {
    ptrdiff_t n;           /* number of hidden states */
    ptrdiff_t D;           /* output dimension */
    ptrdiff_t lag;         /* context distance, >= 1 */
    int right, left;       /* which contexts are in the model */
    const double *startprob;   /* (n,) */
    const double *transmat;    /* (n, n) */
    const double *U;           /* (n, D) own-state means */
    const double *V;           /* (n, D) right-context means (read only when right) */
    const double *W;           /* (n, D) left-context means (read only when left) */
} mf_hmm_model;

/* Doubles of scratch that mf_hmm_forward_backward needs. */
ptrdiff_t mf_hmm_fb_work_size(ptrdiff_t T, ptrdiff_t n);

/* Scaled forward-backward for the chain Q(s) ~ P(s) prod_t exp(logpot[t, s_t]).
 * gamma (T, n) receives the marginals, xi_sum (n, n, may be NULL) the sum over t of the
 * pairwise marginals of (s_t, s_{t+1}), *logz = ln sum_s P(s) prod_t exp(logpot[t, s_t]).
 * Cost O(T n^2), memory O(T n). */
int mf_hmm_forward_backward(ptrdiff_t T, ptrdiff_t n, const double *startprob,
                            const double *transmat, const double *logpot, double *gamma,
                            double *xi_sum, double *work, double *logz);

/* Structured mean field: the chain exact, each long-range coupling -a(s).b(s') replaced by a
 * Gaussian link variable (docs/context_hmm.md).  Runs until the bound rises by no more than
 * tol * T over one sweep, or max_sweeps sweeps.
 * init (T, n) or NULL: marginals that set the first links (NULL: the first-order posterior,
 * i.e. the chain with the couplings left out, is the starting Q).
 * Outputs: gamma (T, n); xi_sum (n, n) or NULL; history (max_sweeps + 1) the bound after each
 * sweep (entry 0: the first-order posterior), the unused tail left untouched; *n_sweeps;
 * *bound (nats); logpot (T, n) or NULL: the chain potentials that produced gamma.
 * With stat_H (D, 3n, 3n) and stat_g (D, 3n) not NULL they receive the M-step statistics: the
 * bound, as a function of the means with Q and the links held fixed, is for each output
 * dimension d  -1/2 th^T H_d th + g_d^T th + const,  th = (U[:, d], V[:, d], W[:, d]). */
int mf_hmm_structured(const mf_hmm_model *m, ptrdiff_t T, const double *X, int max_sweeps,
                      double tol, const double *init, double *gamma, double *xi_sum, double *history, int *n_sweeps,
                      double *bound, double *logpot, double *stat_H, double *stat_g);

/* mf_hmm_structured run twice, from the first-order posterior (init = NULL) and from the
 * marginals of mf_hmm_naive; the outputs are those of the run with the higher bound (the first
 * run's on a tie).  Both runs optimise the same bound over the same family, so this is a
 * restart, not a different approximation. */
int mf_hmm_structured_best(const mf_hmm_model *m, ptrdiff_t T, const double *X, int max_sweeps,
                           double tol, double *gamma, double *xi_sum, double *history,
                           int *n_sweeps, double *bound, double *logpot, double *stat_H,
                           double *stat_g);

/* Fully factorised mean field Q(s) = prod_t q_t(s_t), started from the first-order posterior
 * (the chain with the context couplings left out), sweeps alternately forward and backward in
 * t, each q_t set to its exact coordinate-wise maximiser.  Outputs as for mf_hmm_structured. */
int mf_hmm_naive(const mf_hmm_model *m, ptrdiff_t T, const double *X, int max_sweeps, double tol,
                 double *gamma, double *history, int *n_sweeps, double *bound);

/* Number of states of the augmented chain used by mf_hmm_exact: n^w with
 * w = min(T, 1 + lag*right + lag*left); -1 if that overflows a ptrdiff_t. */
ptrdiff_t mf_hmm_exact_states(const mf_hmm_model *m, ptrdiff_t T);

/* Exact ln P(x) by a scaled forward recursion over windows (s_k, ..., s_{k+w-1}).
 * Cost O(T n^{w+1} + T n^w D), memory O(n^w + T). */
int mf_hmm_exact(const mf_hmm_model *m, ptrdiff_t T, const double *X, double *loglik);

#ifdef __cplusplus
}
#endif

#endif
