/* Context-sensitive hidden Markov models (Saul & Jordan 1996, sec. 3 and eq. 23): the scaled
 * forward-backward pass, structured and fully factorised mean field, and the exact likelihood by
 * forward recursion over the augmented state (S_{t-lag}, ..., S_{t+lag}).
 *
 * Model (one sequence x_0 .. x_{T-1}, states s_t in 0..n-1, D-dimensional outputs):
 *   P(s) = startprob[s_0] prod_t transmat[s_t, s_{t+1}],
 *   x_t ~ N(U[s_t] + V[s_{t+lag}] + W[s_{t-lag}], I),
 * where the V term is present only with right context and t + lag < T, the W term only with
 * left context and t - lag >= 0.  A NaN entry of X is a missing value: every term of
 * ln p(x | s) that involves it is left out (marginalised: the covariance is the identity, so
 * the observed coordinates of an output are Gaussian on their own; a row of NaN is a missing
 * frame, whose whole emission drops out).  X must hold no infinities.  A lag >= T therefore leaves the first-order model: every
 * function below treats it so (and never forms t + lag), whatever the lag's size.  The
 * derivation of the mean-field updates is in docs/derivations/context_hmm.rst; mfengine/hmm/_chain.pyx calls
 * these functions.
 *
 * A diagonal output covariance diag(variances) is served above these functions by whitening:
 * the data and the tables divided column-wise by sqrt(variances), the bound less the sum of
 * ln sqrt(variances[d]) over the observed entries (the C entry point mfengine_hmm_infer_diag
 * of mf_hmm_capi.c; the entry points for outside callers are listed in mfengine_solver.h).
 *
 * Conventions: matrices are row-major and contiguous; outputs go to caller-allocated buffers;
 * every function returns a status of mf_status.h and never prints:
 *   MF_OK             results written;
 *   MF_NOT_CONVERGED  results written, but the iteration stopped at its budget (max_sweeps)
 *                     before the bound stopped rising by more than tol * T;
 *   MF_EBADARG        a size or pointer is invalid (n, D, T, lag < 1, max_sweeps < 0, tol NaN
 *                     or negative, a NULL input); nothing written;
 *   MF_EOVERFLOW      a scratch size would overflow ptrdiff_t / size_t; nothing written;
 *   MF_ENOMEM         a scratch allocation failed (its size: the *_work_size functions).
 * A sequence with probability zero under the model gets the bound (or log-likelihood) -inf;
 * one whose arithmetic leaves the range of a double (values near 1e154 and above) gets NaN;
 * the other outputs are then undefined.  The caller turns either into an error.
 * The functions are re-entrant (no global state), so sequences may be processed on different
 * threads.  `history` buffers have a capacity hist_len >= 1: entry k is written only when
 * k < hist_len, so a large sweep budget never needs a large buffer. */
#ifndef MF_HMM_H
#define MF_HMM_H

#include <stddef.h>

#include "mf_status.h"
#include "mfengine_solver.h"   /* MFENGINE_HMM_START_*, the starts' bits */

#ifdef __cplusplus
extern "C" {
#endif

/* lambda^2 of a link variable is kept in [MF_HMM_LAM2_MIN, MF_HMM_LAM2_MAX]; any value gives a
 * valid bound, the clip only stops a degenerate marginal from producing 0 or infinity. */
#define MF_HMM_LAM2_MIN 1e-6
#define MF_HMM_LAM2_MAX 1e6

/* Tolerances (nats per time step) of mf_hmm_structured's starts, each the caller's when that
 * is looser.  The link and naive solves that make two of the starts stop at MF_HMM_PRE_TOL:
 * they only place a start.  The starts' ascents stop at MF_HMM_SCREEN_TOL, and only the best
 * of them goes on to the caller's tolerance.  After the screen the kept start rises by a
 * median 0.004 nats (up to 20 on strongly coupled data), while the maxima the starts reach
 * often lie nats apart, so the screen keeps the start that full ascents would keep except
 * where the ranking turns after the screen, e.g. an ascent creeping over a plateau before it
 * climbs again: 2 of 162 instances of bench/studies/hmm_starts.py (docs/derivations/context_hmm.rst). */
#define MF_HMM_PRE_TOL 1e-3
#define MF_HMM_SCREEN_TOL 1e-5

typedef struct {
    ptrdiff_t n;           /* number of hidden states, >= 1 */
    ptrdiff_t D;           /* output dimension, >= 1 */
    ptrdiff_t lag;         /* context distance, >= 1 */
    int right, left;       /* which contexts are in the model */
    const double *startprob;   /* (n,) */
    const double *transmat;    /* (n, n) */
    const double *U;           /* (n, D) own-state means */
    const double *V;           /* (n, D) right-context means (read only when right) */
    const double *W;           /* (n, D) left-context means (read only when left) */
} mf_hmm_model;

/* Methods for mf_hmm_work_size. */
enum { MF_HMM_STRUCTURED = 0, MF_HMM_NAIVE = 1, MF_HMM_EXACT = 2, MF_HMM_LINK = 3,
       MF_HMM_CHAIN = 4 };

/* Bytes of scratch that `method` allocates (at its peak) for one sequence of length T, in
 * *bytes; MF_EBADARG or MF_EOVERFLOW when the arguments are invalid or the size overflows. */
int mf_hmm_work_size(int method, const mf_hmm_model *m, ptrdiff_t T, ptrdiff_t *bytes);

/* Doubles of scratch that mf_hmm_forward_backward needs; -1 on invalid sizes or overflow. */
ptrdiff_t mf_hmm_fb_work_size(ptrdiff_t T, ptrdiff_t n);

/* Scaled forward-backward for the chain Q(s) ~ P(s) prod_t exp(logpot[t, s_t]).
 * gamma (T, n) receives the marginals, xi_sum (n, n, may be NULL) the sum over t of the
 * pairwise marginals of (s_t, s_{t+1}), *logz = ln sum_s P(s) prod_t exp(logpot[t, s_t]);
 * work holds mf_hmm_fb_work_size(T, n) doubles.  Cost O(T n^2), memory O(T n). */
int mf_hmm_forward_backward(ptrdiff_t T, ptrdiff_t n, const double *startprob,
                            const double *transmat, const double *logpot, double *gamma,
                            double *xi_sum, double *work, double *logz);

/* Most probable path of the same chain (Viterbi, in log space): path (T) the states,
 * *logq = ln max_s P(s) prod_t exp(logpot[t, s_t]) (-inf when every path has probability
 * zero).  Ties go to the lowest state.  Cost O(T n^2); scratch allocated inside. */
int mf_hmm_viterbi(ptrdiff_t T, ptrdiff_t n, const double *startprob, const double *transmat,
                   const double *logpot, ptrdiff_t *path, double *logq);

/* Draws of whole paths from the same chain (forward filtering, backward sampling): for draw
 * k = 0 .. n_draws-1, paths[k * T + t] receives s_t, using the uniforms u[k * T + t] in [0, 1)
 * (one per draw and time step, so the caller fixes the randomness and any thread layout gives
 * the same paths); work holds mf_hmm_fb_work_size(T, n) doubles.  MF_EBADARG also when logpot
 * holds NaN / +inf or the chain gives every path probability zero.  Cost O(T n^2 + n_draws T n). */
int mf_hmm_sample_chain(ptrdiff_t T, ptrdiff_t n, const double *startprob, const double *transmat,
                        const double *logpot, ptrdiff_t n_draws, const double *u,
                        ptrdiff_t *paths, double *work);

/* The link bound (docs/derivations/context_hmm.rst, "Link variables"): the chain exact, each long-range
 * coupling -a(s).b(s') replaced by a Gaussian link variable, alternating optimal links and an
 * exact forward-backward for the chain, until the bound rises by no more than tol * T over one
 * sweep, or max_sweeps sweeps.  It serves as a starting point of mf_hmm_structured.
 * init (T, n) or NULL: marginals that set the first links (NULL: the first-order posterior,
 * i.e. the chain with the couplings left out, is the starting Q).
 * Outputs: gamma (T, n); history (hist_len) the link bound after each sweep (entry 0: the
 * first-order posterior when init is NULL, else the first chain), the unused tail left
 * untouched; *n_sweeps; *bound (nats); logpot (T, n) or NULL: the chain potentials. */
int mf_hmm_link(const mf_hmm_model *m, ptrdiff_t T, const double *X, ptrdiff_t max_sweeps,
                double tol, const double *init, double *gamma, double *history,
                ptrdiff_t hist_len, ptrdiff_t *n_sweeps, double *bound, double *logpot);

/* Exact mean-field objective of the chain Q(s) ~ P(s) prod_t exp(logpot[t, s_t]):
 * F = E_Q[ln P(s, x)] + H(Q) (a lower bound on ln P(x)), with every coupling's expectation taken
 * from the chain's pairwise marginals at distance lag and 2 lag.  Cost O(T lag n^3).
 * Outputs (each may be NULL except value): gamma (T, n) marginals; xi_sum (n, n) the sum over t
 * of the pairwise marginals of (s_t, s_{t+1}); pair1 (n, n) the sum over t <= T-1-lag of those of
 * (s_t, s_{t+lag}); pair2 (n, n) the same at distance 2 lag (t <= T-1-2 lag). */
int mf_hmm_chain_objective(const mf_hmm_model *m, ptrdiff_t T, const double *X,
                           const double *logpot, double *gamma, double *xi_sum, double *pair1,
                           double *pair2, double *value);

/* Coordinate ascent on that objective over the potentials logpot[t, :] (in place), one t at a
 * time in increasing t, each set to its exact maximiser given the others.  After every two
 * such sweeps, a third starts from their squared extrapolation (SQUAREM, Varadhan & Roland
 * 2008) and is kept only when it ends higher than the second: F never decreases, and a
 * linearly converging ascent takes about half the sweeps.  Stops when a sweep raises F by at
 * most tol * T, or after max_sweeps sweeps (each counted, kept or not).  history (hist_len): F
 * before the first sweep and after each sweep (the value kept); *n_sweeps; *value: F at the
 * end. */
int mf_hmm_ascent(const mf_hmm_model *m, ptrdiff_t T, const double *X, ptrdiff_t max_sweeps,
                  double tol, double *logpot, double *history, ptrdiff_t hist_len,
                  ptrdiff_t *n_sweeps, double *value);

/* Structured mean field: Q(s) ~ P(s) prod_t exp(logpot[t, s_t]) (the model's own transitions),
 * the bound its exact objective F (mf_hmm_chain_objective), maximised by mf_hmm_ascent.
 * init (T, n) not NULL: one ascent from the chain with potentials init (a warm start).
 * init NULL: ascents from four chains -- the results of mf_hmm_link from the first-order
 * posterior and from the marginals of mf_hmm_naive (skipped when mf_hmm_naive finds no finite
 * start, which zeros in the transitions can cause), both run to the looser of tol and
 * MF_HMM_PRE_TOL, the first-order posterior, and the first-order posterior of the model with
 * its context means left out -- each to the looser of tol and MF_HMM_SCREEN_TOL; the one with
 * the highest F is kept (the first on a tie) and its ascent goes on to tol within what is left
 * of max_sweeps; its convergence is the one reported.
 * Outputs: gamma (T, n); xi_sum (n, n) or NULL; history (hist_len): F over the sweeps of the
 * kept ascent (screen and continuation), the unused tail left untouched; *n_sweeps (both parts);
 * *bound = F; logpot (T, n) or NULL.
 * With stat_H (D, 3n, 3n) and stat_g (D, 3n) not NULL they receive the M-step statistics: F, as
 * a function of the means with Q held fixed, is for each output dimension d
 * -1/2 th^T H_d th + g_d^T th + const,  th = (U[:, d], V[:, d], W[:, d]). */
int mf_hmm_structured(const mf_hmm_model *m, ptrdiff_t T, const double *X, ptrdiff_t max_sweeps,
                      double tol, const double *init, double *gamma, double *xi_sum,
                      double *history, ptrdiff_t hist_len, ptrdiff_t *n_sweeps, double *bound,
                      double *logpot, double *stat_H, double *stat_g);

/* mf_hmm_structured with its four starts (init NULL) run on up to n_threads threads (more
 * than 4 are never used: the starts are independent; fewer than 1 is taken as 1), each extra
 * thread in a chain's scratch of its own, carved with the rest from the solve's one block
 * (at most mf_hmm_work_size once more per extra thread).  Everything it writes is the same
 * for any n_threads. */
int mf_hmm_structured_threads(const mf_hmm_model *m, ptrdiff_t T, const double *X,
                              ptrdiff_t max_sweeps, double tol, const double *init,
                              double *gamma, double *xi_sum, double *history, ptrdiff_t hist_len,
                              ptrdiff_t *n_sweeps, double *bound, double *logpot, double *stat_H,
                              double *stat_g, int n_threads);

/* mf_hmm_structured_threads from the starts in the mask `starts` (a nonzero combination of
 * the MFENGINE_HMM_START_* bits of mfengine_solver.h; MF_EBADARG otherwise), screened as
 * there when there are several;
 * one start alone is not screened, its ascent runs to tol.  When the naive-link start is the
 * only one and is skipped (no finite naive solution), the link start stands in for it.
 * Ignored with init (one ascent from init) or without context couplings. */
int mf_hmm_structured_starts(const mf_hmm_model *m, ptrdiff_t T, const double *X,
                             ptrdiff_t max_sweeps, double tol, const double *init,
                             double *gamma, double *xi_sum, double *history, ptrdiff_t hist_len,
                             ptrdiff_t *n_sweeps, double *bound, double *logpot, double *stat_H,
                             double *stat_g, int n_threads, unsigned starts);

/* Whether a call over n_seq sequences on n_threads threads spreads each structured solve's
 * starts over the threads (fewer sequences than threads, and several starts in the mask)
 * instead of going over the sequences; `structured` false for the naive method or a warm
 * start (one ascent).  The answers are the same either way. */
static inline int mf_hmm_threads_by_starts(int structured, unsigned starts, ptrdiff_t n_seq,
                                           int n_threads)
{
    int n_starts = 0;
    for (; starts; starts >>= 1) n_starts += (int)(starts & 1u);
    return structured && n_starts > 1 && n_seq < n_threads;
}

/* Fully factorised mean field Q(s) = prod_t q_t(s_t), started from the first-order posterior
 * (the chain with the context couplings left out), sweeps alternately forward and backward in
 * t, each q_t set to its exact coordinate-wise maximiser.  Outputs as for mf_hmm_structured.
 * When zeros in startprob / transmat leave no product distribution with a finite bound, the
 * bound is -inf. */
int mf_hmm_naive(const mf_hmm_model *m, ptrdiff_t T, const double *X, ptrdiff_t max_sweeps,
                 double tol, double *gamma, double *history, ptrdiff_t hist_len,
                 ptrdiff_t *n_sweeps, double *bound);

/* Number of states of the augmented chain used by mf_hmm_exact: n^w with
 * w = min(T, 1 + lag*right + lag*left) (w = 1 when lag >= T); -1 if that overflows a ptrdiff_t
 * or the arguments are invalid. */
ptrdiff_t mf_hmm_exact_states(const mf_hmm_model *m, ptrdiff_t T);

/* Exact ln P(x) by a scaled forward recursion over windows (s_k, ..., s_{k+w-1}).
 * Cost O(T n^{w+1} + T n^w D), memory O(n^w + T). */
int mf_hmm_exact(const mf_hmm_model *m, ptrdiff_t T, const double *X, double *loglik);

#ifdef __cplusplus
}
#endif

#endif
