/* Vectorised per-child loops of the Gaussian-approximated mean-field solver for layered
 * sigmoid belief nets (Saul & Jordan, eqs. 8-9, 17-24).  See mfengine/sbn/_gaussian.pyx for
 * the solver that calls them.
 *
 * A hidden unit k with children c (weights J_c = J_ck, J2_c = J_ck^2) changes its mean from
 * mu0 to mu = mu0 + dmu (so mu(1-mu) changes by dvar).  Each child's input statistics move to
 *   m_c + J_c dmu,   s_c + J2_c dvar,   a_c = m_c + (1/2 - xi_c) s_c.
 * Both functions return, summed over children with weight obs_c (0 for a missing visible child):
 *   out[0] = sum_c [ J_c (mu_c - sig_c) - 1/2 J2_c tk q_c ],           q_c = xi_c^2 + (1 - 2 xi_c) sig_c
 *   out[1] = sum_c [ J2_c q_c - sig_c (1 - sig_c) (J_c + (1/2 - xi_c) J2_c tk)^2 ]
 * with tk = 1 - 2 mu and sig_c = sigmoid(a_c): the children's part of dL/dmu and d2L/dmu2.
 */
#ifndef MF_SBN_H
#define MF_SBN_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The largest |weight| or |bias| the Gaussian kernel accepts.  Its input variances grow as
 * weight^2 and the curvatures of its 1-D problems as weight^4 (times a unit count): beyond
 * about 1e77 those overflow to inf, and inf times a saturated unit's zero variance is NaN.
 * Up to 1e50 every intermediate quantity stays finite for any net that fits in memory, so the
 * bound is finite; larger parameters are refused (MF_EBADARG, ValueError). */
#define MF_SBN_PARAM_LIMIT 1e50

/* Full evaluation at a trial point: one exp per child; sig_out[c] receives sig_c and, if want_u
 * or want_f, u_out[c] = 1 + e^{-|a_c|}.  When want_f is 0, obs may be NULL (no child missing).  If want_f, out[2] = sum_c obs_c [ mu_c m_c' - 1/2 xi_c^2 s_c'
 * - log(1 + exp(a_c)) ] (the children's part of L at the trial point). */
void mf_sbn_children_eval(ptrdiff_t n, const double *J, const double *J2,
                          const double *m, const double *s, const double *xi,
                          const double *muc, const double *obs,
                          double dmu, double dvar, double tk, int want_f, int want_u,
                          double *sig_out, double *u_out, double *out);

/* Evaluation at the current point from the children's cached sig (no exp).  Also returns
 * out[2] = sum_c obs_c J2_c max(xi_c^2, (1 - xi_c)^2), the curvature bound: when it is below 4
 * the 1-D objective in mu_k is strictly concave on [0, 1]. */
void mf_sbn_children_cached(ptrdiff_t n, const double *J, const double *J2,
                            const double *xi, const double *sig, const double *muc,
                            const double *obs, double tk, double *out);

/* The children's part of L at the current point, sum_c obs_c [ mu_c m_c - 1/2 xi_c^2 s_c
 * - log(1 + exp(a_c)) ], from the cached u (no exp; a few logs). */
double mf_sbn_children_value(ptrdiff_t n, const double *m, const double *s, const double *xi,
                             const double *u, const double *muc, const double *obs);

/* sig = sigmoid(a) and u = 1 + e^{-|a|}, a = m + (1/2 - xi) s, for n units (the cache). */
void mf_sbn_sig_u_all(ptrdiff_t n, const double *m, const double *s, const double *xi,
                      double *sig, double *u);

/* Sum over the n units of one layer of their terms in the bound L:
 *   obs_i [ mu_i m_i - 1/2 xi_i^2 s_i - log(1 + exp(m_i + (1/2 - xi_i) s_i)) ]  (+ H(mu_i) if t)
 * where, for a hidden layer, t holds the logits of mu (mu_i = sigmoid(t_i)) and the binary
 * entropy is H(mu) = log(1 + e^t) - mu t; pass t = NULL for the visible layer.  obs = NULL means
 * every unit is observed.  Vectorised; a few logs per layer instead of several per unit. */
double mf_sbn_layer_bound(ptrdiff_t n, const double *mu, const double *t, const double *m,
                          const double *s, const double *xi, const double *obs);

/* After a mean moves by dmu (variance by dvar): m_c += J_c dmu, s_c += J2_c dvar, and the
 * cache takes the values computed at the new point: sig_c = sig_new_c (and u_c = u_new_c if
 * want_u). */
void mf_sbn_children_commit(ptrdiff_t n, const double *J, const double *J2, double dmu, double dvar,
                            double *m, double *s, double *sig, double *u,
                            const double *sig_new, const double *u_new, int want_u);

/* A small move (every |da_c| a few 1e-3): m_c += J_c dmu, s_c += J2_c dvar, and sig_c moved by
 * its second-order Taylor expansion in da_c = J_c dmu + (1/2 - xi_c) J2_c dvar (error below
 * |da|^3 / 48), with no exp; u (if not NULL) follows as 1 / max(sig, 1 - sig). */
void mf_sbn_children_commit_taylor(ptrdiff_t n, const double *J, const double *J2, const double *xi,
                                   double dmu, double dvar, double *m, double *s, double *sig,
                                   double *u);

/* Build facts: 1 when the kernels were compiled with run-time ISA dispatch (target_clones). */
int mf_sbn_dispatch_enabled(void);

#ifdef __cplusplus
}
#endif

#endif
