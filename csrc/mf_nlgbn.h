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
 * (order 2) of a unit of the given type at (mu, s).  Fields beyond the order are not written. */
void mf_nlgbn_moments_eval(int type, double mu, double s, int order, mf_nlgbn_moments *out);

/* Raise the one-unit objective g above from (*mu, *s): closed form for linear units, otherwise
 * a safeguarded Newton method (the Hessian shifted to be negative definite where it is not, a
 * backtracking line search that accepts only increases of g) that stops when the predicted gain
 * of a further step is below gtol or after max_it steps.  On return *mu, *s hold the new point
 * and *mo its moments (order 0 at least).  Returns the gain in g (>= 0), or a negative value if
 * a non-finite number appeared (the point is then left unchanged). */
double mf_nlgbn_unit_solve(int type, double n, double prec, double A, double B, double gtol,
                           int max_it, double *mu, double *s, mf_nlgbn_moments *mo);

#ifdef __cplusplus
}
#endif

#endif
