/* Unit functions and the one-unit solver of variational inference in nonlinear Gaussian belief
 * networks (Frey & Hinton 1999, "Variational learning in nonlinear Gaussian belief networks",
 * eqs. 6-8 and Appendix C).  Plain C, no Python; called from mfengine/nlgbn/_estep.pyx.
 *
 * A unit's pre-activation x has the variational density N(mu, sigma^2); s = log sigma^2 is the
 * second variational parameter.  For its output f(x) the functions give the mean M, the second
 * moment S = E[f(x)^2] and the variance V = S - M^2, with their first and second derivatives
 * with respect to mu and s.  For sigmoidal units (f = Phi) V is the paper's upper bound V'
 * (eq. 27) and S = M^2 + V'.  Unit types:
 *   linear     f(x) = x           M = mu, V = sigma^2                                  (eq. 17)
 *   binary     f(x) = [x >= 0]    M = Phi(mu / sigma), V = M (1 - M)                   (eq. 20)
 *   rectified  f(x) = max(x, 0)   M = mu Phi(t) + sigma phi(t), t = mu / sigma         (eq. 24)
 *   sigmoidal  f(x) = Phi(x)      M = Phi(mu / sqrt(1 + sigma^2)), V' of eq. 27.
 *
 * One unit's part of the bound F (eq. 8), all other variational parameters fixed, is
 *   g(mu, s) = -prec (mu - n)^2 / 2 + s / 2 - prec e^s / 2 + B M(mu, s) - A S(mu, s) + const,
 * with n the unit's mean net input, prec = 1 / psi^2 its model precision,
 * A = sum_c w_c^2 prec_c / 2 and B = sum_c w_c prec_c (mu_c - n_c + w_c M) over its children c.
 */
#ifndef MF_NLGBN_H
#define MF_NLGBN_H

#include <stddef.h>
#include "mf_status.h"

#ifdef __cplusplus
extern "C" {
#endif

enum {
    MF_NLGBN_LINEAR = 0,
    MF_NLGBN_BINARY = 1,
    MF_NLGBN_RECTIFIED = 2,
    MF_NLGBN_SIGMOIDAL = 3
};

typedef struct {
    double M, S, V;                         /* order >= 0 */
    double M_mu, M_s, S_mu, S_s, V_mu, V_s; /* order >= 1: d/dmu and d/ds, s = log sigma^2 */
    double M_mumu, M_mus, M_ss;             /* order >= 2 */
    double S_mumu, S_mus, S_ss;
} mf_nlgbn_moments;

/* The standard normal cdf and density. */
double mf_nlgbn_Phi(double t);
double mf_nlgbn_phi(double t);

/* M, S, V (order 0), their first derivatives (order 1) and the second derivatives of M and S
 * (order 2) of a unit of the given type at (mu, s).  Fields beyond the order are not written.
 * Returns MF_OK, or MF_EBADARG (nothing written) for an unknown type, an order outside 0..2 or
 * a NULL out. */
int mf_nlgbn_moments_eval(int type, double mu, double s, int order, mf_nlgbn_moments *out);

/* Raise the one-unit objective g above from (*mu, *s): closed form for linear units, otherwise
 * a safeguarded Newton method (the Hessian shifted to be negative definite where it is not, a
 * backtracking line search that accepts only increases of g) that stops when the predicted gain
 * of a further step is below gtol or after max_it steps.  On MF_OK *mu, *s hold the new point,
 * *mo its moments (order 0 at least) and *gain the increase of g (>= 0).  Returns MF_EBADARG
 * (the point left unchanged, *gain = 0) for an unknown type, a NULL pointer, max_it < 0, or
 * arguments at which g is not a finite number. */
int mf_nlgbn_unit_solve(int type, double n, double prec, double A, double B, double gtol,
                        int max_it, double *mu, double *s, mf_nlgbn_moments *mo, double *gain);

/* ------------------------------------------------------------------------------------------
 * A whole layered network and the E-step over a block of patterns (mf_nlgbn_estep.c).
 *
 * Units of all layers are concatenated, top layer first; the last layer is visible and its
 * pre-activations are the data.  WT holds, for each pair of adjacent layers l -> l+1, the block
 * weights[l].T (sizes[l] x sizes[l+1]) row-major at woff[l]: row j = unit j's outgoing weights.
 * prec is 1 / psi^2 per unit and acoef[j] = sum_c w_cj^2 prec_c / 2 per unit (0 for visible
 * units).  The sufficient statistics of one block of patterns are stat_size numbers: per unit
 * the sums of mu, mu^2, sigma^2 and V (4 n_units numbers; sigma^2 = V = 0 for visible units),
 * then per boundary l, at soff[l], with P = sizes[l] parents and C = sizes[l+1] children: the
 * sums of mt mt' ((P+1)^2 numbers, mt = [1, M of layer l]) and of mu_c mt' (C (P+1) numbers).
 *
 * The caller fills the pointer fields and calls mf_nlgbn_net_check once; it fills the derived
 * fields and sets `checked`.  mf_nlgbn_estep_block refuses a net that was not checked.
 */
typedef struct {
    /* filled by the caller */
    ptrdiff_t n_layers;             /* L >= 2 */
    const ptrdiff_t *sizes;         /* [L], each >= 1 */
    const ptrdiff_t *offset;        /* [L + 1]: offset[0] = 0, offset[l + 1] = offset[l] + sizes[l] */
    const ptrdiff_t *woff;          /* [L - 1]: woff[0] = 0, woff[l] = woff[l - 1] + sizes[l - 1] sizes[l] */
    const ptrdiff_t *soff;          /* [L - 1]: soff[0] = 4 n_units, then the blocks above in order */
    const signed char *types;       /* [n_units], MF_NLGBN_* */
    const double *WT;               /* [n_weights], finite */
    const double *bias;             /* [n_units], finite */
    const double *prec;             /* [n_units], finite and > 0 */
    const double *acoef;            /* [n_units], finite and >= 0 */
    /* filled by mf_nlgbn_net_check */
    ptrdiff_t n_units, n_hidden, n_visible, n_weights, stat_size, scratch_size;
    int checked;
} mf_nlgbn_net;

/* Check the layout and the values of a net against the lengths of the caller's arrays (each
 * len_* is the number of elements the caller allocated for that field; stat_size is the length
 * of one block of statistics the caller will pass, or 0 if it will pass none).  Fills the
 * derived fields and sets net->checked on MF_OK; returns MF_EBADARG for any inconsistency, a
 * non-finite weight or bias, a precision that is not finite and positive, or an unknown unit
 * type, and MF_EOVERFLOW when a size or offset would overflow ptrdiff_t. */
int mf_nlgbn_net_check(mf_nlgbn_net *net, ptrdiff_t len_sizes, ptrdiff_t len_offset,
                       ptrdiff_t len_woff, ptrdiff_t len_soff, ptrdiff_t len_types,
                       ptrdiff_t len_WT, ptrdiff_t len_bias, ptrdiff_t len_prec,
                       ptrdiff_t len_acoef, ptrdiff_t stat_size);

/* The E-step on n consecutive patterns: X (n x n_visible), mu and logvar (n x n_hidden, the
 * starting point, overwritten with the solution), all row-major and contiguous.  Coordinate
 * ascent on each pattern's bound F (eq. 11), sweeps over the hidden units alternating top-down
 * and bottom-up, each unit's (mu, log sigma^2) raised by mf_nlgbn_unit_solve; a pattern stops
 * when a sweep gains less than tol nats, or after max_sweeps sweeps (0: only evaluate F at the
 * given point).  Writes bound[n] (F at the end; NaN for a pattern whose solve met a number that
 * is not finite), n_sweeps[n], converged[n] (1 when the last sweep gained less than tol) and,
 * when stats is not NULL, adds the patterns' sufficient statistics to stats[stat_size] (the
 * checked net's).  scratch holds net->scratch_size doubles.
 * Returns MF_OK, MF_NOT_CONVERGED (some pattern used max_sweeps sweeps without meeting tol;
 * results written) or MF_EBADARG (nothing written): net not checked, n < 0, a NULL array,
 * max_sweeps < 0, tol or unit_tol negative or not finite. */
int mf_nlgbn_estep_block(const mf_nlgbn_net *net, ptrdiff_t n, const double *X, double *mu,
                         double *logvar, double tol, double unit_tol, ptrdiff_t max_sweeps,
                         double *bound, ptrdiff_t *n_sweeps, unsigned char *converged,
                         double *stats, double *scratch);

/* mf_nlgbn_estep_block with missing visible entries: miss is NULL (none missing) or
 * (n x n_visible) bytes, nonzero = missing.  A missing entry's value in X is not read; it is
 * marginalised exactly (its term leaves the bound, and its parents' problems lose its
 * contribution).  With stats, a missing entry contributes its expectations under
 * q(h) p(x_c | h): mean n_c, E[x_c^2] = n_c^2 + sum_b w_cb^2 V_b + psi_c^2 (the part beyond
 * n_c^2 in the sigma^2 slot), E[x_c f_b] = n_c M_b + w_cb V_b.  Same statuses. */
int mf_nlgbn_estep_block_miss(const mf_nlgbn_net *net, ptrdiff_t n, const double *X,
                              const unsigned char *miss, double *mu, double *logvar, double tol,
                              double unit_tol, ptrdiff_t max_sweeps, double *bound,
                              ptrdiff_t *n_sweeps, unsigned char *converged, double *stats,
                              double *scratch);

/* ------------------------------------------------------------------------------------------
 * Importance-sampled ln p(x) of one pattern (mf_nlgbn_is.c).
 *
 * The proposal is the defensive mixture over the hidden pre-activations
 *     r(h) = a_p p(h) + (1 - a_p) prod_i [b_q N(h_i; mu_i, sigma_i^2)
 *                                        + b_w N(h_i; mu_i, (MF_NLGBN_IS_WIDE sigma_i)^2)
 *                                        + b_p p(h_i | parents of i)]
 * (mu, sigma^2 = e^logvar: the mean-field posterior, n_hidden each; p(h) the prior; the
 * product drawn top-down, unit by unit, so that a unit may come from its prior conditional
 * given the parents drawn), with a_p = MF_NLGBN_IS_AP and b_q, b_w, b_p = MF_NLGBN_IS_B*.
 * Every weight p(h, x_obs) / r(h) is at most p(x_obs | h) / a_p, bounded, so its variance is
 * finite.
 * Missing visible entries (miss NULL or n_visible bytes, nonzero = missing) are left out of
 * p(x_obs | h), i.e. marginalised exactly.  The K = n_samples draws come from the generator
 * seeded by (seed, index) alone (xoshiro256** seeded through splitmix64), so a pattern's answer
 * does not depend on which thread computes it or in what order.
 * Writes *estimate = log of the mean weight, *stderr = its delta-method standard error
 * sd(w) / (sqrt(K) mean(w)), *ess = (sum w)^2 / sum w^2.
 * Unless mean is NULL (then mean_se and sd are not read), the same weights also give every
 * unit's posterior marginal, n_units each, in unit order: mean[i] = sum_s w_s v_s / sum_s w_s,
 * mean_se[i] = sqrt(sum_s w_s^2 (v_s - mean[i])^2) / sum_s w_s (the delta method's, with the
 * estimate's resolution added in quadrature: mf_se_with_resolution in mf_numerics.h) and sd[i]
 * the self-normalised posterior standard deviation, where v_s is a hidden unit's drawn
 * pre-activation, or a missing entry's mean given the draw, b + W f(h) (Rao-Blackwellised; its
 * sd adds the entry's variance psi^2); an observed entry reads x with mean_se = sd = 0.
 * scratch holds mf_nlgbn_is_scratch(net) doubles.  Returns MF_OK, or MF_EBADARG (nothing
 * written): net not checked, a NULL pointer (mean_se or sd NULL with mean not), n_samples < 2,
 * a non-finite mu or logvar; a pattern whose weights are not finite numbers gets NaN estimates
 * (status MF_EOVERFLOW). */
#define MF_NLGBN_IS_AP 0.1
#define MF_NLGBN_IS_BQ 0.8
#define MF_NLGBN_IS_BW 0.1
#define MF_NLGBN_IS_BP 0.1
#define MF_NLGBN_IS_WIDE 2.0
ptrdiff_t mf_nlgbn_is_scratch(const mf_nlgbn_net *net);
int mf_nlgbn_is_pattern(const mf_nlgbn_net *net, const double *x, const unsigned char *miss,
                        const double *mu, const double *logvar, ptrdiff_t n_samples,
                        unsigned long long seed, unsigned long long index, double *estimate,
                        double *stderr_out, double *ess, double *mean, double *mean_se,
                        double *sd, double *scratch);

#ifdef __cplusplus
}
#endif

#endif
