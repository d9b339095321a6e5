/* Unit functions and the one-unit solver for nonlinear Gaussian belief networks; see
 * mf_nlgbn.h for the contract and docs/derivations/nlgbn.rst for the derivations. */
#include <math.h>
#include "mf_nlgbn.h"

#define MF_SQRT1_2 0.70710678118654752440
#define MF_INV_SQRT_2PI 0.39894228040143267794
#define MF_PI_2 1.57079632679489661923

/* log sigma^2 is kept in [S_MIN, S_MAX] (sigma from 1e-13 to 1e13): e^s never overflows. */
#define S_MIN (-60.0)
#define S_MAX (60.0)
#define MAX_STEP_S 3.0      /* largest Newton step in s = log sigma^2 */
#define MAX_HALVINGS 60
#define ARMIJO 1e-4
#define CF_FROM 4.0         /* the rectified tail uses the continued fraction beyond |t| = 4 */
#define CF_DEPTH 80

double mf_nlgbn_Phi(double t) { return 0.5 * erfc(-t * MF_SQRT1_2); }

double mf_nlgbn_phi(double t) { return MF_INV_SQRT_2PI * exp(-0.5 * t * t); }

/* For u >= 0, with z standard normal: Q = Phi(-u) = P(z > u), and the tail moments
 *   m1 = E[(z - u)_+] = phi(u) - u Q,   m2 = E[(z - u)_+^2] = (u^2 + 1) Q - u phi(u),
 * i.e. the mean and second moment of a rectified unit at t = -u, in units of sigma.  Both
 * differences cancel badly for large u, so beyond CF_FROM they come from the continued fraction
 * of the Mills ratio R = Q / phi = 1 / (u + c1), c_k = k / (u + c_{k+1}):
 *   1 - u R = c1 R,   (u^2 + 1) R - u = R c1 c2. */
static void rect_tail(double u, double p, double *Q, double *m1, double *m2)
{
    if (u < CF_FROM) {
        double q = 0.5 * erfc(u * MF_SQRT1_2);
        *Q = q;
        *m1 = p - u * q;
        *m2 = (u * u + 1.0) * q - u * p;
        return;
    }
    double c = 0.0;
    for (int k = CF_DEPTH; k >= 2; k--)
        c = k / (u + c);
    double c2 = c;
    double c1 = 1.0 / (u + c2);
    double R = 1.0 / (u + c1);
    *Q = 0.5 * erfc(u * MF_SQRT1_2);
    *m1 = p * c1 * R;
    *m2 = p * R * c1 * c2;
}

static void linear_moments(double mu, double s, int order, mf_nlgbn_moments *o)
{
    double v = exp(s);
    o->M = mu;
    o->V = v;
    o->S = mu * mu + v;
    if (order < 1) return;
    o->M_mu = 1.0; o->M_s = 0.0;
    o->V_mu = 0.0; o->V_s = v;
    o->S_mu = 2.0 * mu; o->S_s = v;
    if (order < 2) return;
    o->M_mumu = 0.0; o->M_mus = 0.0; o->M_ss = 0.0;
    o->S_mumu = 2.0; o->S_mus = 0.0; o->S_ss = v;
}

static void binary_moments(double mu, double s, int order, mf_nlgbn_moments *o)
{
    double sig = exp(0.5 * s), t = mu / sig;
    double P = 0.5 * erfc(-t * MF_SQRT1_2), Q = 0.5 * erfc(t * MF_SQRT1_2);
    o->M = P;
    o->S = P;
    o->V = P * Q;
    if (order < 1) return;
    double p = mf_nlgbn_phi(t);
    /* t = mu e^{-s/2}: t_mu = 1/sigma, t_s = -t/2, t_mumu = 0, t_mus = -1/(2 sigma), t_ss = t/4 */
    o->M_mu = p / sig;
    o->M_s = -0.5 * t * p;
    o->S_mu = o->M_mu;
    o->S_s = o->M_s;
    o->V_mu = (Q - P) * o->M_mu;
    o->V_s = (Q - P) * o->M_s;
    if (order < 2) return;
    o->M_mumu = -t * p / (sig * sig);
    o->M_mus = 0.5 * p * (t * t - 1.0) / sig;
    o->M_ss = 0.25 * t * p * (1.0 - t * t);
    o->S_mumu = o->M_mumu;
    o->S_mus = o->M_mus;
    o->S_ss = o->M_ss;
}

static void rectified_moments(double mu, double s, int order, mf_nlgbn_moments *o)
{
    double sig = exp(0.5 * s), var = exp(s), t = mu / sig, u = fabs(t);
    double p = mf_nlgbn_phi(u), Q, n1, n2, P, m1, m2, v;
    rect_tail(u, p, &Q, &n1, &n2);
    if (t <= 0.0) {
        P = Q;
        m1 = n1;
        m2 = n2;
        v = n2 - n1 * n1;
    } else {
        /* (t + z)_+ = (t + z) + (-t - z)_+ : mean t + n1, variance 1 - n2 - n1^2 - 2 t n1 */
        P = 0.5 * erfc(-t * MF_SQRT1_2);
        m1 = t + n1;
        m2 = (t * t + 1.0) * P + t * p;
        v = 1.0 - n2 - n1 * n1 - 2.0 * t * n1;
    }
    if (v < 0.0) v = 0.0;
    o->M = sig * m1;
    o->S = var * m2;
    o->V = var * v;
    if (order < 1) return;
    o->M_mu = P;
    o->M_s = 0.5 * sig * p;
    o->S_mu = 2.0 * o->M;
    o->S_s = var * P;
    o->V_mu = 2.0 * o->M * (1.0 - P);
    o->V_s = var * P - o->M * sig * p;
    if (order < 2) return;
    o->M_mumu = p / sig;
    o->M_mus = -0.5 * t * p;
    o->M_ss = 0.25 * sig * p * (1.0 + t * t);
    o->S_mumu = 2.0 * P;
    o->S_mus = sig * p;
    o->S_ss = var * (P - 0.5 * t * p);
}

static void sigmoidal_moments(double mu, double s, int order, mf_nlgbn_moments *o)
{
    double e = exp(s);
    double k = 1.0 / sqrt(1.0 + e), tau = mu * k;
    double P = 0.5 * erfc(-tau * MF_SQRT1_2), Q = 0.5 * erfc(tau * MF_SQRT1_2);
    double c = e / (e + MF_PI_2);       /* V' = P Q c, c = sigma^2 / (sigma^2 + pi/2) */
    double PQ = P * Q;
    o->M = P;
    o->V = PQ * c;
    o->S = P * P + o->V;
    if (order < 1) return;
    double p = mf_nlgbn_phi(tau);
    double rho = e / (1.0 + e);         /* d log(1 + e^s) / ds */
    double tau_mu = k, tau_s = -0.5 * tau * rho;
    double dc = c * (1.0 - c);          /* dc/ds */
    double dP = Q - P;                  /* d(M(1 - M))/dM */
    o->M_mu = p * tau_mu;
    o->M_s = p * tau_s;
    o->V_mu = c * dP * o->M_mu;
    o->V_s = c * dP * o->M_s + PQ * dc;
    o->S_mu = 2.0 * P * o->M_mu + o->V_mu;
    o->S_s = 2.0 * P * o->M_s + o->V_s;
    if (order < 2) return;
    double tau_mus = -0.5 * k * rho;
    double tau_ss = -0.5 * tau * rho * (1.0 - 1.5 * rho);
    double ddc = dc * (1.0 - 2.0 * c);
    double Ma = o->M_mu, Mb = o->M_s;
    o->M_mumu = -tau * p * tau_mu * tau_mu;
    o->M_mus = -tau * p * tau_mu * tau_s + p * tau_mus;
    o->M_ss = -tau * p * tau_s * tau_s + p * tau_ss;
    /* V'_ab = c (-2 M_a M_b + dP M_ab) + dc dP (M_a [b = s] + M_b [a = s]) + PQ ddc [a = b = s] */
    double V_mumu = c * (-2.0 * Ma * Ma + dP * o->M_mumu);
    double V_mus = c * (-2.0 * Ma * Mb + dP * o->M_mus) + dc * dP * Ma;
    double V_ss = c * (-2.0 * Mb * Mb + dP * o->M_ss) + 2.0 * dc * dP * Mb + PQ * ddc;
    o->S_mumu = 2.0 * Ma * Ma + 2.0 * P * o->M_mumu + V_mumu;
    o->S_mus = 2.0 * Ma * Mb + 2.0 * P * o->M_mus + V_mus;
    o->S_ss = 2.0 * Mb * Mb + 2.0 * P * o->M_ss + V_ss;
}

int mf_nlgbn_moments_eval(int type, double mu, double s, int order, mf_nlgbn_moments *out)
{
    if (out == NULL || order < 0 || order > 2)
        return MF_EBADARG;
    switch (type) {
    case MF_NLGBN_LINEAR:
        linear_moments(mu, s, order, out);
        break;
    case MF_NLGBN_BINARY:
        binary_moments(mu, s, order, out);
        break;
    case MF_NLGBN_RECTIFIED:
        rectified_moments(mu, s, order, out);
        break;
    case MF_NLGBN_SIGMOIDAL:
        sigmoidal_moments(mu, s, order, out);
        break;
    default:
        return MF_EBADARG;
    }
    return MF_OK;
}

static inline double objective(double mu, double s, const mf_nlgbn_moments *mo, double n,
                               double prec, double A, double B)
{
    double d = mu - n;
    return -0.5 * prec * d * d + 0.5 * s - 0.5 * prec * exp(s) + B * mo->M - A * mo->S;
}

static inline double clamp_s(double s)
{
    return s < S_MIN ? S_MIN : (s > S_MAX ? S_MAX : s);
}

int mf_nlgbn_unit_solve(int type, double n, double prec, double A, double B, double gtol,
                        int max_it, double *mu_io, double *s_io, mf_nlgbn_moments *mo,
                        double *gain_out)
{
    if (gain_out == NULL)
        return MF_EBADARG;
    *gain_out = 0.0;
    if (mu_io == NULL || s_io == NULL || mo == NULL || max_it < 0
        || type < MF_NLGBN_LINEAR || type > MF_NLGBN_SIGMOIDAL)
        return MF_EBADARG;
    double mu = *mu_io, s = clamp_s(*s_io), f0, f1, gain = 0.0;
    mf_nlgbn_moments trial;

    if (type == MF_NLGBN_LINEAR) {
        /* g is a concave quadratic in mu plus s/2 - (prec/2 + A) e^s: solved exactly. */
        double h = prec + 2.0 * A, mn = (prec * n + B) / h, sn = clamp_s(-log(h));
        linear_moments(mu, s, 0, mo);
        f0 = objective(mu, s, mo, n, prec, A, B);
        linear_moments(mn, sn, 0, &trial);
        f1 = objective(mn, sn, &trial, n, prec, A, B);
        if (!isfinite(f1) || !isfinite(f0))
            return MF_EBADARG;
        *mu_io = mn;
        *s_io = sn;
        *mo = trial;
        *gain_out = f1 > f0 ? f1 - f0 : 0.0;
        return MF_OK;
    }

    mf_nlgbn_moments_eval(type, mu, s, 2, mo);
    f0 = objective(mu, s, mo, n, prec, A, B);
    if (!isfinite(f0))
        return MF_EBADARG;
    for (int it = 0; it < max_it; it++) {
        if (it > 0)
            mf_nlgbn_moments_eval(type, mu, s, 2, mo);
        double es = exp(s);
        double g1 = -prec * (mu - n) + B * mo->M_mu - A * mo->S_mu;
        double g2 = 0.5 - 0.5 * prec * es + B * mo->M_s - A * mo->S_s;
        double h11 = -prec + B * mo->M_mumu - A * mo->S_mumu;
        double h12 = B * mo->M_mus - A * mo->S_mus;
        double h22 = -0.5 * prec * es + B * mo->M_ss - A * mo->S_ss;
        double det = h11 * h22 - h12 * h12;
        if (!(h11 < 0.0 && h22 < 0.0 && det > 0.0)) {
            /* not concave here: shift the Hessian until it is negative definite */
            double half = 0.5 * (h11 - h22);
            double lmax = 0.5 * (h11 + h22) + sqrt(half * half + h12 * h12);
            double shift = lmax + 1e-3 * (fabs(h11) + fabs(h22) + 2.0 * fabs(h12)) + 1e-10;
            h11 -= shift;
            h22 -= shift;
            det = h11 * h22 - h12 * h12;
        }
        if (!(det > 0.0) || !isfinite(det))
            break;
        double d1 = -(h22 * g1 - h12 * g2) / det;
        double d2 = -(h11 * g2 - h12 * g1) / det;
        double slope = g1 * d1 + g2 * d2;          /* = g' (-H)^{-1} g > 0 */
        if (!(0.5 * slope > gtol))
            break;
        if (fabs(d2) > MAX_STEP_S) {
            double r = MAX_STEP_S / fabs(d2);
            d1 *= r;
            d2 *= r;
            slope *= r;
        }
        double alpha = 1.0, mt = mu, st = s;
        int accepted = 0;
        for (int k = 0; k < MAX_HALVINGS; k++) {
            mt = mu + alpha * d1;
            st = clamp_s(s + alpha * d2);
            mf_nlgbn_moments_eval(type, mt, st, 0, &trial);
            f1 = objective(mt, st, &trial, n, prec, A, B);
            if (isfinite(f1) && f1 > f0 && f1 >= f0 + ARMIJO * alpha * slope) {
                accepted = 1;
                break;
            }
            alpha *= 0.5;
        }
        if (!accepted)
            break;
        gain += f1 - f0;
        f0 = f1;
        mu = mt;
        s = st;
        mo->M = trial.M;
        mo->S = trial.S;
        mo->V = trial.V;
    }
    *mu_io = mu;
    *s_io = s;
    *gain_out = gain;
    return MF_OK;
}
