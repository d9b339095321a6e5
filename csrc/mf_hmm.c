/* Context-sensitive HMMs: forward-backward, structured and naive mean field, exact likelihood
 * over the augmented state.  See mf_hmm.h for the model and docs/context_hmm.md for the
 * derivation of the updates. */
#include "mf_hmm.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define HALF_LOG_2PI 0.91893853320467274178

static double sq(double x) { return x * x; }

/* ----------------------------------------------------------------------------------------- */
/* Forward-backward                                                                           */

ptrdiff_t mf_hmm_fb_work_size(ptrdiff_t T, ptrdiff_t n) { return T * n + T + 2 * n; }

int mf_hmm_forward_backward(ptrdiff_t T, ptrdiff_t n, const double *startprob,
                            const double *transmat, const double *logpot, double *gamma,
                            double *xi_sum, double *work, double *logz)
{
    double *phi = work;            /* (T, n) exp(logpot - max) */
    double *c = work + T * n;      /* (T) scale factors */
    double *beta = c + T;          /* (n) beta_t */
    double *v = beta + n;          /* (n) scratch */
    double lz = 0.0;
    ptrdiff_t t, i, j;

    for (t = 0; t < T; t++) {
        const double *lp = logpot + t * n;
        double mx = -INFINITY;
        for (i = 0; i < n; i++) {
            if (isnan(lp[i]) || lp[i] == INFINITY) return MF_HMM_NONFINITE;
            if (lp[i] > mx) mx = lp[i];
        }
        if (mx == -INFINITY) return MF_HMM_IMPOSSIBLE;
        for (i = 0; i < n; i++) phi[t * n + i] = exp(lp[i] - mx);
        lz += mx;
    }
    /* forward, alpha kept (normalised) in gamma */
    {
        double s = 0.0;
        for (i = 0; i < n; i++) {
            gamma[i] = startprob[i] * phi[i];
            s += gamma[i];
        }
        if (!(s > 0.0)) return MF_HMM_IMPOSSIBLE;
        c[0] = s;
        for (i = 0; i < n; i++) gamma[i] /= s;
    }
    for (t = 1; t < T; t++) {
        const double *ap = gamma + (t - 1) * n;
        double *an = gamma + t * n;
        double s = 0.0;
        for (j = 0; j < n; j++) an[j] = 0.0;
        for (i = 0; i < n; i++) {
            const double ai = ap[i];
            const double *row = transmat + i * n;
            if (ai == 0.0) continue;
            for (j = 0; j < n; j++) an[j] += ai * row[j];
        }
        for (j = 0; j < n; j++) {
            an[j] *= phi[t * n + j];
            s += an[j];
        }
        if (!(s > 0.0)) return MF_HMM_IMPOSSIBLE;
        c[t] = s;
        for (j = 0; j < n; j++) an[j] /= s;
    }
    for (t = 0; t < T; t++) lz += log(c[t]);
    if (!isfinite(lz)) return MF_HMM_NONFINITE;
    *logz = lz;

    /* backward; gamma[t+1] = alpha[t+1] beta[t+1] once alpha[t+1] is no longer needed */
    if (xi_sum)
        for (i = 0; i < n * n; i++) xi_sum[i] = 0.0;
    for (i = 0; i < n; i++) beta[i] = 1.0;
    for (t = T - 2; t >= 0; t--) {
        const double *ph = phi + (t + 1) * n;
        const double *at = gamma + t * n;
        double *g1 = gamma + (t + 1) * n;
        const double ic = 1.0 / c[t + 1];
        for (j = 0; j < n; j++) {
            v[j] = ph[j] * beta[j] * ic;     /* phi_{t+1} beta_{t+1} / c_{t+1} */
            g1[j] *= beta[j];
        }
        for (i = 0; i < n; i++) {
            const double *row = transmat + i * n;
            double s = 0.0;
            for (j = 0; j < n; j++) s += row[j] * v[j];
            beta[i] = s;                      /* beta_t, v holds what beta_{t+1} was needed for */
        }
        if (xi_sum) {
            for (i = 0; i < n; i++) {
                const double ai = at[i];
                const double *row = transmat + i * n;
                double *xr = xi_sum + i * n;
                if (ai == 0.0) continue;
                for (j = 0; j < n; j++) xr[j] += ai * row[j] * v[j];
            }
        }
    }
    for (i = 0; i < n; i++) gamma[i] *= beta[i];
    return MF_HMM_OK;
}

/* ----------------------------------------------------------------------------------------- */
/* Shared pieces: single-site emission terms, the list of long-range couplings                 */

static const double *table(const mf_hmm_model *m, int k)
{
    return k == 0 ? m->U : (k == 1 ? m->V : m->W);
}

/* e[t, i]: every term of ln p(x | s) that involves s_t alone; returns the constant part
 * sum_t (-D/2 ln 2 pi - |x_t|^2 / 2). */
static double site_terms(const mf_hmm_model *m, ptrdiff_t T, const double *X, double *e)
{
    const ptrdiff_t n = m->n, D = m->D, lag = m->lag;
    double cst = 0.0;
    ptrdiff_t t, i, d;
    for (t = 0; t < T; t++) {
        const double *x = X + t * D;
        double xx = 0.0;
        for (d = 0; d < D; d++) xx += x[d] * x[d];
        cst += -0.5 * xx - (double)D * HALF_LOG_2PI;
        for (i = 0; i < n; i++) {
            double v = 0.0;
            const double *u = m->U + i * D;
            for (d = 0; d < D; d++) v += x[d] * u[d] - 0.5 * u[d] * u[d];
            if (m->right && t >= lag) {        /* s_t is the right context of x_{t-lag} */
                const double *xr = X + (t - lag) * D, *r = m->V + i * D;
                for (d = 0; d < D; d++) v += xr[d] * r[d] - 0.5 * r[d] * r[d];
            }
            if (m->left && t + lag < T) {      /* s_t is the left context of x_{t+lag} */
                const double *xl = X + (t + lag) * D, *l = m->W + i * D;
                for (d = 0; d < D; d++) v += xl[d] * l[d] - 0.5 * l[d] * l[d];
            }
            e[t * n + i] = v;
        }
    }
    return cst;
}

typedef struct {
    int ta, tb;          /* tables of the two ends (0 = U, 1 = V, 2 = W) */
    ptrdiff_t sa, sb;    /* times of the two ends */
} pair_t;

/* Couplings -a(s_sa) . b(s_sb) of ln p(x | s): one per output and pair of its mean's terms. */
static ptrdiff_t build_pairs(const mf_hmm_model *m, ptrdiff_t T, pair_t *p)
{
    const ptrdiff_t lag = m->lag;
    ptrdiff_t t, np = 0;
    for (t = 0; t < T; t++) {
        const int r = m->right && t + lag < T, l = m->left && t - lag >= 0;
        if (r) { p[np].ta = 0; p[np].tb = 1; p[np].sa = t; p[np].sb = t + lag; np++; }
        if (l) { p[np].ta = 0; p[np].tb = 2; p[np].sa = t; p[np].sb = t - lag; np++; }
        if (r && l) { p[np].ta = 1; p[np].tb = 2; p[np].sa = t + lag; p[np].sb = t - lag; np++; }
    }
    return np;
}

/* constcol[k * D + d] = 1 when column d of table k takes one value over all states. */
static void const_columns(const mf_hmm_model *m, int *constcol)
{
    const ptrdiff_t n = m->n, D = m->D;
    int k;
    ptrdiff_t i, d;
    for (k = 0; k < 3; k++) {
        const double *tab = table(m, k);
        for (d = 0; d < D; d++) {
            int c = 1;
            if ((k == 1 && !m->right) || (k == 2 && !m->left)) { constcol[k * D + d] = 1; continue; }
            for (i = 1; i < n; i++)
                if (tab[i * D + d] != tab[d]) { c = 0; break; }
            constcol[k * D + d] = c;
        }
    }
}

static double dot_gamma(const double *g, const double *tab, ptrdiff_t n, ptrdiff_t D, ptrdiff_t d)
{
    double s = 0.0;
    ptrdiff_t i;
    for (i = 0; i < n; i++) s += g[i] * tab[i * D + d];
    return s;
}

static double var_gamma(const double *g, const double *tab, ptrdiff_t n, ptrdiff_t D, ptrdiff_t d,
                        double mean)
{
    double s = 0.0;
    ptrdiff_t i;
    for (i = 0; i < n; i++) s += g[i] * sq(tab[i * D + d] - mean);
    return s;
}

/* ----------------------------------------------------------------------------------------- */
/* Link bound                                                                                 */

int mf_hmm_link(const mf_hmm_model *m, ptrdiff_t T, const double *X, int max_sweeps, double tol,
                const double *init, double *gamma, double *history, int *n_sweeps,
                double *bound, double *logpot)
{
    const ptrdiff_t n = m->n, D = m->D;
    const ptrdiff_t fbw = mf_hmm_fb_work_size(T, n);
    double *e = NULL, *h = NULL, *work = NULL, *lam2 = NULL, *abar = NULL, *bbar = NULL;
    pair_t *pairs = NULL;
    int constcol[3 * 64];
    int *cc = constcol, status = MF_HMM_OK, it;
    ptrdiff_t np, p, t, i, d;
    double cst, logz = 0.0, B = -INFINITY, prev = -INFINITY;

    if (D > 64) cc = (int *)malloc((size_t)(3 * D) * sizeof(int));
    e = (double *)malloc((size_t)(T * n) * sizeof(double));
    h = (double *)malloc((size_t)(T * n) * sizeof(double));
    work = (double *)malloc((size_t)fbw * sizeof(double));
    pairs = (pair_t *)malloc((size_t)(3 * T + 1) * sizeof(pair_t));
    lam2 = (double *)malloc((size_t)((3 * T + 1) * D) * sizeof(double));
    abar = (double *)malloc((size_t)((3 * T + 1) * D) * sizeof(double));
    bbar = (double *)malloc((size_t)((3 * T + 1) * D) * sizeof(double));
    if (!cc || !e || !h || !work || !pairs || !lam2 || !abar || !bbar) {
        status = MF_HMM_ENOMEM;
        goto done;
    }
    const_columns(m, cc);
    cst = site_terms(m, T, X, e);
    np = build_pairs(m, T, pairs);

    memcpy(h, e, (size_t)(T * n) * sizeof(double));
    if (init) memcpy(gamma, init, (size_t)(T * n) * sizeof(double));
    else {
        status = mf_hmm_forward_backward(T, n, m->startprob, m->transmat, h, gamma, NULL, work,
                                         &logz);
        if (status) goto done;
    }

    for (it = 0;; it++) {
        /* Links: for the current Q, the best lambda for every coupling, and the bound. */
        double eh = 0.0;
        for (t = 0; t < T * n; t++) eh += gamma[t] * (e[t] - h[t]);
        B = logz + eh + cst;
        for (p = 0; p < np; p++) {
            const pair_t *pp = pairs + p;
            const double *A = table(m, pp->ta), *Bt = table(m, pp->tb);
            const double *ga = gamma + pp->sa * n, *gb = gamma + pp->sb * n;
            for (d = 0; d < D; d++) {
                const double a = dot_gamma(ga, A, n, D, d), b = dot_gamma(gb, Bt, n, D, d);
                double l2 = -1.0; /* < 0: exact factorised term (one end is not random) */
                abar[p * D + d] = a;
                bbar[p * D + d] = b;
                B -= a * b;
                if (!cc[pp->ta * D + d] && !cc[pp->tb * D + d]) {
                    const double va = var_gamma(ga, A, n, D, d, a);
                    const double vb = var_gamma(gb, Bt, n, D, d, b);
                    if (va > 0.0 && vb > 0.0) l2 = sqrt(vb / va);
                    else if (va > 0.0) l2 = MF_HMM_LAM2_MIN;
                    else if (vb > 0.0) l2 = MF_HMM_LAM2_MAX;
                    else l2 = 1.0;
                    if (l2 < MF_HMM_LAM2_MIN) l2 = MF_HMM_LAM2_MIN;
                    if (l2 > MF_HMM_LAM2_MAX) l2 = MF_HMM_LAM2_MAX;
                    B -= 0.5 * l2 * va + 0.5 * vb / l2;
                }
                lam2[p * D + d] = l2;
            }
        }
        if (init && it == 0) {
            /* the given marginals only seed the links; they are not a chain Q of this family */
            B = -INFINITY;
        } else {
            if (!isfinite(B)) { status = MF_HMM_NONFINITE; goto done; }
            history[init ? it - 1 : it] = B;
            if (np == 0 || it - (init ? 1 : 0) == max_sweeps) break;
            if (it > (init ? 1 : 0) && B - prev <= tol * (double)T) break;
        }
        prev = B;

        /* Chain: exact forward-backward with the links' expected potentials. */
        memcpy(h, e, (size_t)(T * n) * sizeof(double));
        for (p = 0; p < np; p++) {
            const pair_t *pp = pairs + p;
            const double *A = table(m, pp->ta), *Bt = table(m, pp->tb);
            double *ha = h + pp->sa * n, *hb = h + pp->sb * n;
            for (d = 0; d < D; d++) {
                const double a = abar[p * D + d], b = bbar[p * D + d], l2 = lam2[p * D + d];
                if (l2 < 0.0) {
                    for (i = 0; i < n; i++) ha[i] -= b * A[i * D + d];
                    for (i = 0; i < n; i++) hb[i] -= a * Bt[i * D + d];
                } else {
                    /* (l2 a - b) A_i - l2 A_i^2 / 2 and (b / l2 - a) B_i - B_i^2 / (2 l2), each
                     * less a constant in i (which leaves Q unchanged) */
                    for (i = 0; i < n; i++) {
                        const double ai = A[i * D + d];
                        ha[i] -= 0.5 * l2 * sq(ai - a) + b * ai;
                    }
                    for (i = 0; i < n; i++) {
                        const double bi = Bt[i * D + d];
                        hb[i] -= 0.5 * sq(bi - b) / l2 + a * bi;
                    }
                }
            }
        }
        /* shift each h_t to max 0 (Q unchanged): keeps ln Z - E[h] free of cancellation */
        for (t = 0; t < T; t++) {
            double mx = -INFINITY;
            for (i = 0; i < n; i++) if (h[t * n + i] > mx) mx = h[t * n + i];
            if (isfinite(mx)) for (i = 0; i < n; i++) h[t * n + i] -= mx;
        }
        status = mf_hmm_forward_backward(T, n, m->startprob, m->transmat, h, gamma, NULL, work,
                                         &logz);
        if (status) goto done;
    }
    *n_sweeps = init ? it - 1 : it;
    *bound = B;
    if (logpot) memcpy(logpot, h, (size_t)(T * n) * sizeof(double));
done:
    if (cc != constcol) free(cc);
    free(e);
    free(h);
    free(work);
    free(pairs);
    free(lam2);
    free(abar);
    free(bbar);
    return status;
}

/* ----------------------------------------------------------------------------------------- */
/* Naive (fully factorised) mean field                                                        */

/* sum_j q[j] log(a[j]) with 0 log 0 = 0; -inf when some q[j] > 0 meets a[j] = 0. */
static double qlog(const double *q, const double *a, ptrdiff_t n, ptrdiff_t stride)
{
    double s = 0.0;
    ptrdiff_t j;
    for (j = 0; j < n; j++) {
        if (q[j] == 0.0) continue;
        if (a[j * stride] == 0.0) return -INFINITY;
        s += q[j] * log(a[j * stride]);
    }
    return s;
}

/* means[k][t, d] = sum_i q_t(i) table_k[i, d] */
static void naive_means(const mf_hmm_model *m, const double *q, ptrdiff_t t, double *means,
                        ptrdiff_t T)
{
    const ptrdiff_t n = m->n, D = m->D;
    int k;
    ptrdiff_t d;
    for (k = 0; k < 3; k++) {
        const double *tab = table(m, k);
        if ((k == 1 && !m->right) || (k == 2 && !m->left)) continue;
        for (d = 0; d < D; d++) means[(k * T + t) * D + d] = dot_gamma(q + t * n, tab, n, D, d);
    }
}

static double naive_bound(const mf_hmm_model *m, ptrdiff_t T, const double *q, const double *e,
                          double cst, const pair_t *pairs, ptrdiff_t np, const double *means)
{
    const ptrdiff_t n = m->n, D = m->D;
    double B = cst;
    ptrdiff_t t, i, p, d;
    B += qlog(q, m->startprob, n, 1);
    for (t = 0; t < T; t++) {
        for (i = 0; i < n; i++) {
            const double qi = q[t * n + i];
            if (qi > 0.0) B += qi * (e[t * n + i] - log(qi));
            if (t + 1 < T && qi > 0.0) B += qi * qlog(q + (t + 1) * n, m->transmat + i * n, n, 1);
        }
    }
    for (p = 0; p < np; p++) {
        const double *ma = means + (pairs[p].ta * T + pairs[p].sa) * D;
        const double *mb = means + (pairs[p].tb * T + pairs[p].sb) * D;
        for (d = 0; d < D; d++) B -= ma[d] * mb[d];
    }
    return B;
}

int mf_hmm_naive(const mf_hmm_model *m, ptrdiff_t T, const double *X, int max_sweeps, double tol,
                 double *q, double *history, int *n_sweeps, double *bound)
{
    const ptrdiff_t n = m->n, D = m->D, lag = m->lag;
    double *e = NULL, *work = NULL, *means = NULL, *pot = NULL, *cpl = NULL;
    pair_t *pairs = NULL;
    int status = MF_HMM_OK, it;
    ptrdiff_t np, t, i, j, d, k;
    double cst, logz, B = -INFINITY, prev = -INFINITY;

    e = (double *)malloc((size_t)(T * n) * sizeof(double));
    work = (double *)malloc((size_t)mf_hmm_fb_work_size(T, n) * sizeof(double));
    means = (double *)calloc((size_t)(3 * T * D), sizeof(double));
    pot = (double *)malloc((size_t)n * sizeof(double));
    cpl = (double *)malloc((size_t)(3 * D) * sizeof(double));
    pairs = (pair_t *)malloc((size_t)(3 * T + 1) * sizeof(pair_t));
    if (!e || !work || !means || !pot || !cpl || !pairs) {
        status = MF_HMM_ENOMEM;
        goto done;
    }
    cst = site_terms(m, T, X, e);
    np = build_pairs(m, T, pairs);
    status = mf_hmm_forward_backward(T, n, m->startprob, m->transmat, e, q, NULL, work, &logz);
    if (status) goto done;
    for (t = 0; t < T; t++) naive_means(m, q, t, means, T);

    for (it = 0;; it++) {
        B = naive_bound(m, T, q, e, cst, pairs, np, means);
        if (isnan(B) || B == INFINITY) { status = MF_HMM_NONFINITE; goto done; }
        history[it] = B;
        if (it == max_sweeps) break;
        if (it > 0 && B - prev <= tol * (double)T) break;
        prev = B;
        for (k = 0; k < T; k++) {
            const int forward = (it % 2) == 0;
            const double *mU = means, *mV = means + T * D, *mW = means + 2 * T * D;
            double mx = -INFINITY, s = 0.0;
            t = forward ? k : T - 1 - k;
            /* coupling vectors: what multiplies U[i], V[i], W[i] at time t */
            for (d = 0; d < 3 * D; d++) cpl[d] = 0.0;
            if (m->right && t + lag < T)
                for (d = 0; d < D; d++) cpl[d] += mV[(t + lag) * D + d];
            if (m->left && t - lag >= 0)
                for (d = 0; d < D; d++) cpl[d] += mW[(t - lag) * D + d];
            if (m->right && t - lag >= 0) {
                for (d = 0; d < D; d++) cpl[D + d] += mU[(t - lag) * D + d];
                if (m->left && t - 2 * lag >= 0)
                    for (d = 0; d < D; d++) cpl[D + d] += mW[(t - 2 * lag) * D + d];
            }
            if (m->left && t + lag < T) {
                for (d = 0; d < D; d++) cpl[2 * D + d] += mU[(t + lag) * D + d];
                if (m->right && t + 2 * lag < T)
                    for (d = 0; d < D; d++) cpl[2 * D + d] += mV[(t + 2 * lag) * D + d];
            }
            for (i = 0; i < n; i++) {
                double v = e[t * n + i];
                if (t == 0) v += m->startprob[i] > 0.0 ? log(m->startprob[i]) : -INFINITY;
                if (t > 0) v += qlog(q + (t - 1) * n, m->transmat + i, n, n);
                if (t + 1 < T) v += qlog(q + (t + 1) * n, m->transmat + i * n, n, 1);
                for (d = 0; d < D; d++) {
                    v -= m->U[i * D + d] * cpl[d];
                    if (m->right) v -= m->V[i * D + d] * cpl[D + d];
                    if (m->left) v -= m->W[i * D + d] * cpl[2 * D + d];
                }
                pot[i] = v;
                if (v > mx) mx = v;
            }
            if (mx == -INFINITY) { status = MF_HMM_IMPOSSIBLE; goto done; }
            if (!isfinite(mx)) { status = MF_HMM_NONFINITE; goto done; }
            for (j = 0; j < n; j++) {
                pot[j] = exp(pot[j] - mx);
                s += pot[j];
            }
            for (j = 0; j < n; j++) q[t * n + j] = pot[j] / s;
            naive_means(m, q, t, means, T);
        }
    }
    *n_sweeps = it;
    *bound = B;
done:
    free(e);
    free(work);
    free(means);
    free(pot);
    free(cpl);
    free(pairs);
    return status;
}

/* ----------------------------------------------------------------------------------------- */
/* Exact likelihood over the augmented state                                                  */

static ptrdiff_t exact_width(const mf_hmm_model *m, ptrdiff_t T)
{
    ptrdiff_t w = 1 + (m->right ? m->lag : 0) + (m->left ? m->lag : 0);
    return w < T ? w : T;
}

ptrdiff_t mf_hmm_exact_states(const mf_hmm_model *m, ptrdiff_t T)
{
    ptrdiff_t w = exact_width(m, T), N = 1, k;
    for (k = 0; k < w; k++) {
        if (N > PTRDIFF_MAX / m->n) return -1;
        N *= m->n;
    }
    return N;
}

int mf_hmm_exact(const mf_hmm_model *m, ptrdiff_t T, const double *X, double *loglik)
{
    const ptrdiff_t n = m->n, D = m->D, lag = m->lag;
    const ptrdiff_t w = exact_width(m, T), N = mf_hmm_exact_states(m, T);
    const ptrdiff_t nwin = T - w + 1;
    double *alpha = NULL, *anew = NULL, *le = NULL, *mean = NULL;
    ptrdiff_t *start = NULL, *outs = NULL, *pw = NULL, *dig = NULL, *kt = NULL;
    int status = MF_HMM_OK;
    ptrdiff_t t, k, idx, q, d;
    double ll = 0.0;

    if (N < 0) return MF_HMM_ENOMEM;
    alpha = (double *)malloc((size_t)N * sizeof(double));
    anew = (double *)malloc((size_t)N * sizeof(double));
    le = (double *)malloc((size_t)N * sizeof(double));
    mean = (double *)malloc((size_t)D * sizeof(double));
    start = (ptrdiff_t *)calloc((size_t)(nwin + 1), sizeof(ptrdiff_t));
    outs = (ptrdiff_t *)malloc((size_t)T * sizeof(ptrdiff_t));
    kt = (ptrdiff_t *)malloc((size_t)T * sizeof(ptrdiff_t));
    pw = (ptrdiff_t *)malloc((size_t)w * sizeof(ptrdiff_t));
    dig = (ptrdiff_t *)malloc((size_t)w * sizeof(ptrdiff_t));
    if (!alpha || !anew || !le || !mean || !start || !outs || !kt || !pw || !dig) {
        status = MF_HMM_ENOMEM;
        goto done;
    }
    /* window k = (s_k .. s_{k+w-1}); digit 0 (most significant) is s_k */
    pw[w - 1] = 1;
    for (q = w - 2; q >= 0; q--) pw[q] = pw[q + 1] * n;
    /* output t goes to the first window holding all the states its mean depends on */
    for (t = 0; t < T; t++) {
        ptrdiff_t lo = (m->left && t - lag >= 0) ? t - lag : t;
        kt[t] = lo < T - w ? lo : T - w;
        start[kt[t] + 1]++;
    }
    for (k = 0; k < nwin; k++) start[k + 1] += start[k];
    {
        ptrdiff_t *fill = (ptrdiff_t *)malloc((size_t)(nwin + 1) * sizeof(ptrdiff_t));
        if (!fill) { status = MF_HMM_ENOMEM; goto done; }
        memcpy(fill, start, (size_t)(nwin + 1) * sizeof(ptrdiff_t));
        for (t = 0; t < T; t++) outs[fill[kt[t]]++] = t;
        free(fill);
    }

    for (k = 0; k < nwin; k++) {
        double mx = -INFINITY, s = 0.0;
        for (idx = 0; idx < N; idx++) {
            double l = 0.0;
            ptrdiff_t r = idx, o;
            for (q = 0; q < w; q++) {
                dig[q] = r / pw[q];
                r -= dig[q] * pw[q];
            }
            for (o = start[k]; o < start[k + 1]; o++) {
                const ptrdiff_t tt = outs[o];
                const double *x = X + tt * D, *u = m->U + dig[tt - k] * D;
                for (d = 0; d < D; d++) mean[d] = u[d];
                if (m->right && tt + lag < T) {
                    const double *v = m->V + dig[tt + lag - k] * D;
                    for (d = 0; d < D; d++) mean[d] += v[d];
                }
                if (m->left && tt - lag >= 0) {
                    const double *v = m->W + dig[tt - lag - k] * D;
                    for (d = 0; d < D; d++) mean[d] += v[d];
                }
                for (d = 0; d < D; d++) l -= 0.5 * sq(x[d] - mean[d]);
                l -= (double)D * HALF_LOG_2PI;
            }
            if (k == 0) {
                double pr = m->startprob[dig[0]];
                for (q = 1; q < w; q++) pr *= m->transmat[dig[q - 1] * n + dig[q]];
                alpha[idx] = pr; /* prior of the first window, combined below */
            }
            le[idx] = l;
            if (l > mx) mx = l;
        }
        if (!isfinite(mx)) { status = MF_HMM_NONFINITE; goto done; }
        if (k == 0) {
            for (idx = 0; idx < N; idx++) {
                anew[idx] = alpha[idx] * exp(le[idx] - mx);
                s += anew[idx];
            }
        } else {
            const ptrdiff_t top = pw[0];
            for (idx = 0; idx < N; idx++) {
                const ptrdiff_t rest = idx / n, snew = idx % n;
                double acc = 0.0;
                ptrdiff_t so;
                if (w == 1) {
                    for (so = 0; so < n; so++) acc += alpha[so] * m->transmat[so * n + snew];
                } else {
                    for (so = 0; so < n; so++) acc += alpha[so * top + rest];
                    acc *= m->transmat[(rest % n) * n + snew];
                }
                anew[idx] = acc * exp(le[idx] - mx);
                s += anew[idx];
            }
        }
        if (!(s > 0.0)) { status = MF_HMM_IMPOSSIBLE; goto done; }
        ll += log(s) + mx;
        for (idx = 0; idx < N; idx++) alpha[idx] = anew[idx] / s;
    }
    if (!isfinite(ll)) { status = MF_HMM_NONFINITE; goto done; }
    *loglik = ll;
done:
    free(alpha);
    free(anew);
    free(le);
    free(mean);
    free(start);
    free(outs);
    free(kt);
    free(pw);
    free(dig);
    return status;
}

/* ----------------------------------------------------------------------------------------- */
/* Exact mean-field objective of a chain, and coordinate ascent on it                          */
/*
 * Q(s) = P(s) prod_t exp h_t(s_t) / Z.  With e_t the single-site terms and the couplings
 * written per earlier end l as energies K1(s_l, s_{l+lag}) and K2(s_l, s_{l+2 lag}),
 *   F(h) = ln Z - sum_t gamma_t . (h_t - e_t) + cst - sum_couplings E_Q[K(s_lo, s_hi)],
 * the pairwise marginals coming from the chain's conditional transition matrices
 *   R_t(i, j) = Q(s_{t+1} = j | s_t = i),   L_t(i, j) = Q(s_{t-1} = j | s_t = i),
 * whose products give Q(s_{t+k} | s_t) and Q(s_{t-k} | s_t).  Changing h_t alone changes only the
 * marginal of s_t and leaves Q(rest | s_t) as it was, so the exact maximiser over h_t is
 *   h_t(i) = E_Q[ sum_{u != t} (e_u - h_u)(s_u) - sum_couplings K | s_t = i ] + e_t(i)
 * (up to a constant), computed from the left part (s_{<t} given s_t, through L) and the right
 * part (s_{>t} given s_t, through R), independent given s_t; see docs/context_hmm.md.
 */

typedef struct {
    const mf_hmm_model *m;
    ptrdiff_t T, n, lag, kmax;  /* kmax: longest coupling distance (0 without couplings) */
    int has1, has2;             /* couplings at distance lag / 2 lag in the model */
    double cst;
    double *e;                  /* (T, n) single-site terms */
    double *K1, *K2;            /* (n, n) coupling energies, row = state at the earlier end */
    double *alpha, *beta, *phi; /* (T, n) filtered forward, scaled backward, exp(h - max) */
    double *gam;                /* (T, n) marginals */
    double *tl;                 /* (T, n) E[couplings whose earlier end is t | s_t] */
    double *cr;                 /* (T, n) right-hand conditional sums of a sweep */
    double *ML, *MR;            /* (2 lag, n, n) products of conditional matrices */
    double *tmp, *tmp2;         /* (n, n) */
    double *v;                  /* (5 n) */
} xchain_t;

static int c1_at(const xchain_t *x, ptrdiff_t l) { return x->has1 && l >= 0 && l + x->lag < x->T; }
static int c2_at(const xchain_t *x, ptrdiff_t l)
{
    return x->has2 && l >= 0 && l + 2 * x->lag < x->T;
}

static void xchain_free(xchain_t *x)
{
    free(x->e);
    free(x->K1);
    free(x->alpha);
    free(x->ML);
    free(x->v);
}

static int xchain_init(xchain_t *x, const mf_hmm_model *m, ptrdiff_t T, const double *X)
{
    const ptrdiff_t n = m->n, D = m->D;
    ptrdiff_t i, j, d, nk;
    memset(x, 0, sizeof(*x));
    x->m = m;
    x->T = T;
    x->n = n;
    x->lag = m->lag;
    x->has1 = m->right || m->left;
    x->has2 = m->right && m->left;
    x->kmax = x->has2 ? 2 * m->lag : (x->has1 ? m->lag : 0);
    nk = 2 * m->lag;   /* products up to distance 2 lag (pair2 asks for them) */
    x->e = (double *)malloc((size_t)(T * n) * sizeof(double));
    x->K1 = (double *)calloc((size_t)(2 * n * n), sizeof(double));
    x->alpha = (double *)malloc((size_t)(6 * T * n) * sizeof(double));
    x->ML = (double *)malloc((size_t)((2 * nk + 2) * n * n) * sizeof(double));
    x->v = (double *)malloc((size_t)(5 * n) * sizeof(double));
    if (!x->e || !x->K1 || !x->alpha || !x->ML || !x->v) {
        xchain_free(x);
        return MF_HMM_ENOMEM;
    }
    x->K2 = x->K1 + n * n;
    x->beta = x->alpha + T * n;
    x->phi = x->beta + T * n;
    x->gam = x->phi + T * n;
    x->tl = x->gam + T * n;
    x->cr = x->tl + T * n;
    x->MR = x->ML + nk * n * n;
    x->tmp = x->MR + nk * n * n;
    x->tmp2 = x->tmp + n * n;
    x->cst = site_terms(m, T, X, x->e);
    for (i = 0; i < n; i++)
        for (j = 0; j < n; j++) {
            double k1 = 0.0, k2 = 0.0;
            for (d = 0; d < D; d++) {
                if (m->right) k1 += m->U[i * D + d] * m->V[j * D + d];   /* U at l, V at l+lag */
                if (m->left) k1 += m->W[i * D + d] * m->U[j * D + d];    /* W at l, U at l+lag */
                if (x->has2) k2 += m->W[i * D + d] * m->V[j * D + d];   /* W at l, V at l+2lag */
            }
            x->K1[i * n + j] = k1;
            x->K2[i * n + j] = k2;
        }
    return MF_HMM_OK;
}

/* Forward (filtered, normalised) and backward (scaled) messages of the chain with potentials h. */
static int xchain_pass(xchain_t *x, const double *h, double *logz)
{
    const ptrdiff_t T = x->T, n = x->n;
    const double *A = x->m->transmat;
    double lz = 0.0;
    ptrdiff_t t, i, j;
    for (t = 0; t < T; t++) {
        const double *lp = h + t * n;
        double mx = -INFINITY, s = 0.0;
        for (i = 0; i < n; i++) {
            if (isnan(lp[i]) || lp[i] == INFINITY) return MF_HMM_NONFINITE;
            if (lp[i] > mx) mx = lp[i];
        }
        if (mx == -INFINITY) return MF_HMM_IMPOSSIBLE;
        for (i = 0; i < n; i++) x->phi[t * n + i] = exp(lp[i] - mx);
        lz += mx;
        for (j = 0; j < n; j++) {
            double a;
            if (t == 0) a = x->m->startprob[j];
            else {
                a = 0.0;
                for (i = 0; i < n; i++) a += x->alpha[(t - 1) * n + i] * A[i * n + j];
            }
            a *= x->phi[t * n + j];
            x->alpha[t * n + j] = a;
            s += a;
        }
        if (!(s > 0.0)) return MF_HMM_IMPOSSIBLE;
        for (j = 0; j < n; j++) x->alpha[t * n + j] /= s;
        lz += log(s);
    }
    for (i = 0; i < n; i++) x->beta[(T - 1) * n + i] = 1.0;
    for (t = T - 2; t >= 0; t--) {
        double s = 0.0;
        for (j = 0; j < n; j++) x->v[j] = x->phi[(t + 1) * n + j] * x->beta[(t + 1) * n + j];
        for (i = 0; i < n; i++) {
            double b = 0.0;
            for (j = 0; j < n; j++) b += A[i * n + j] * x->v[j];
            x->beta[t * n + i] = b;
            s += b;
        }
        if (!(s > 0.0)) return MF_HMM_IMPOSSIBLE;
        for (i = 0; i < n; i++) x->beta[t * n + i] /= s;
    }
    if (!isfinite(lz)) return MF_HMM_NONFINITE;
    *logz = lz;
    return MF_HMM_OK;
}

/* R_t(i, j) = Q(s_{t+1} = j | s_t = i), from the backward messages (t + 1 < T); a state that
 * cannot occur at t gets a zero row. */
static void rmat(const xchain_t *x, ptrdiff_t t, double *R)
{
    const ptrdiff_t n = x->n;
    const double *A = x->m->transmat, *ph = x->phi + (t + 1) * n, *be = x->beta + (t + 1) * n;
    ptrdiff_t i, j;
    for (i = 0; i < n; i++) {
        double s = 0.0;
        for (j = 0; j < n; j++) {
            R[i * n + j] = A[i * n + j] * ph[j] * be[j];
            s += R[i * n + j];
        }
        if (s > 0.0) for (j = 0; j < n; j++) R[i * n + j] /= s;
    }
}

/* L_t(i, j) = Q(s_{t-1} = j | s_t = i), from the filtered forward messages (t >= 1). */
static void lmat(const xchain_t *x, ptrdiff_t t, double *L)
{
    const ptrdiff_t n = x->n;
    const double *A = x->m->transmat, *al = x->alpha + (t - 1) * n;
    ptrdiff_t i, j;
    for (i = 0; i < n; i++) {
        double s = 0.0;
        for (j = 0; j < n; j++) {
            L[i * n + j] = al[j] * A[j * n + i];
            s += L[i * n + j];
        }
        if (s > 0.0) for (j = 0; j < n; j++) L[i * n + j] /= s;
    }
}

static void matmul(ptrdiff_t n, const double *A, const double *B, double *C)
{
    ptrdiff_t i, j, k;
    for (i = 0; i < n * n; i++) C[i] = 0.0;
    for (i = 0; i < n; i++)
        for (k = 0; k < n; k++) {
            const double a = A[i * n + k];
            if (a == 0.0) continue;
            for (j = 0; j < n; j++) C[i * n + j] += a * B[k * n + j];
        }
}

/* MR[k-1] = Q(s_{t+k} | s_t), k = 1..kk */
static void right_products(xchain_t *x, ptrdiff_t t, ptrdiff_t kk)
{
    const ptrdiff_t n2 = x->n * x->n;
    ptrdiff_t k;
    if (kk < 1) return;
    rmat(x, t, x->MR);
    for (k = 2; k <= kk; k++) {
        rmat(x, t + k - 1, x->tmp);
        matmul(x->n, x->MR + (k - 2) * n2, x->tmp, x->MR + (k - 1) * n2);
    }
}

/* ML[k-1] = Q(s_{t-k} | s_t), k = 1..kk */
static void left_products(xchain_t *x, ptrdiff_t t, ptrdiff_t kk)
{
    const ptrdiff_t n2 = x->n * x->n;
    ptrdiff_t k;
    if (kk < 1) return;
    lmat(x, t, x->ML);
    for (k = 2; k <= kk; k++) {
        lmat(x, t - k + 1, x->tmp);
        matmul(x->n, x->ML + (k - 2) * n2, x->tmp, x->ML + (k - 1) * n2);
    }
}

/* out[j] += sum_k M[j, k] K[j, k] */
static void add_rowdot(ptrdiff_t n, const double *M, const double *K, double *out)
{
    ptrdiff_t j, k;
    for (j = 0; j < n; j++) {
        double s = 0.0;
        for (k = 0; k < n; k++) s += M[j * n + k] * K[j * n + k];
        out[j] += s;
    }
}

/* out[i] += sum_j M[i, j] K[j, i] */
static void add_rowdot_t(ptrdiff_t n, const double *M, const double *K, double *out)
{
    ptrdiff_t i, j;
    for (i = 0; i < n; i++) {
        double s = 0.0;
        for (j = 0; j < n; j++) s += M[i * n + j] * K[j * n + i];
        out[i] += s;
    }
}

static void shift_max(double *v, ptrdiff_t n)
{
    double mx = -INFINITY;
    ptrdiff_t i;
    for (i = 0; i < n; i++) if (v[i] > mx) mx = v[i];
    if (isfinite(mx)) for (i = 0; i < n; i++) v[i] -= mx;
}

/* F(h); fills gam, tl (and the messages) for a sweep that follows; xi_sum, pair1, pair2 may be
 * NULL. */
static int xchain_objective(xchain_t *x, const double *h, double *xi_sum, double *pair1,
                            double *pair2, double *value)
{
    const ptrdiff_t T = x->T, n = x->n, n2 = n * n, lag = x->lag;
    double logz, F;
    ptrdiff_t t, i, j;
    int status = xchain_pass(x, h, &logz);
    if (status) return status;
    if (xi_sum) for (i = 0; i < n2; i++) xi_sum[i] = 0.0;
    if (pair1) for (i = 0; i < n2; i++) pair1[i] = 0.0;
    if (pair2) for (i = 0; i < n2; i++) pair2[i] = 0.0;
    F = logz + x->cst;
    for (t = 0; t < T; t++) {
        double *g = x->gam + t * n, *tl = x->tl + t * n, s = 0.0;
        ptrdiff_t kk = x->kmax > 1 ? x->kmax : 1;
        if (pair1 && kk < lag) kk = lag;
        if (pair2) kk = 2 * lag;
        if (kk > T - 1 - t) kk = T - 1 - t;
        for (i = 0; i < n; i++) {
            g[i] = x->alpha[t * n + i] * x->beta[t * n + i];
            s += g[i];
        }
        for (i = 0; i < n; i++) {
            g[i] /= s;
            tl[i] = 0.0;
            if (g[i] > 0.0) F += g[i] * (x->e[t * n + i] - h[t * n + i]);
        }
        if (kk < 1) continue;
        right_products(x, t, kk);
        if (c1_at(x, t)) add_rowdot(n, x->MR + (lag - 1) * n2, x->K1, tl);
        if (c2_at(x, t)) add_rowdot(n, x->MR + (2 * lag - 1) * n2, x->K2, tl);
        for (i = 0; i < n; i++) {
            if (g[i] == 0.0) continue;
            F -= g[i] * tl[i];
            if (xi_sum)
                for (j = 0; j < n; j++) xi_sum[i * n + j] += g[i] * x->MR[i * n + j];
            if (pair1 && lag <= kk)
                for (j = 0; j < n; j++) pair1[i * n + j] += g[i] * x->MR[(lag - 1) * n2 + i * n + j];
            if (pair2 && 2 * lag <= kk)
                for (j = 0; j < n; j++)
                    pair2[i * n + j] += g[i] * x->MR[(2 * lag - 1) * n2 + i * n + j];
        }
    }
    if (!isfinite(F)) return MF_HMM_NONFINITE;
    *value = F;
    return MF_HMM_OK;
}

/* One sweep of exact coordinate maximisation over h_0, ..., h_{T-1} (in place).  Needs the
 * messages and tl of xchain_objective(h) just before. */
static int xchain_sweep(xchain_t *x, double *h)
{
    const ptrdiff_t T = x->T, n = x->n, n2 = n * n, lag = x->lag;
    const double *A = x->m->transmat;
    double *cl = x->v, *khi = x->v + n, *term = x->v + 2 * n, *w = x->v + 3 * n;
    double *sd = x->v + 4 * n;
    ptrdiff_t t, i, j, a;

    /* cr[t](i) = E[sum_{u > t} (e_u - h_u)(s_u) - couplings with both ends > t | s_t = i],
     * up to a constant in i */
    for (i = 0; i < n; i++) x->cr[(T - 1) * n + i] = 0.0;
    for (t = T - 1; t >= 1; t--) {
        for (j = 0; j < n; j++)
            w[j] = x->cr[t * n + j] + x->e[t * n + j] - h[t * n + j] - x->tl[t * n + j];
        rmat(x, t - 1, x->tmp);
        for (i = 0; i < n; i++) {
            double s = 0.0;
            for (j = 0; j < n; j++) s += x->tmp[i * n + j] * w[j];
            x->cr[(t - 1) * n + i] = s;
        }
        shift_max(x->cr + (t - 1) * n, n);
    }

    /* forward: cl(i) = E[sum_{u < t} (e_u - h_u)(s_u) - couplings with both ends < t | s_t = i] */
    for (i = 0; i < n; i++) cl[i] = 0.0;
    for (t = 0; t < T; t++) {
        const ptrdiff_t kl = x->kmax < t ? x->kmax : t;
        const ptrdiff_t kr = x->kmax < T - 1 - t ? x->kmax : T - 1 - t;
        double s = 0.0;
        left_products(x, t, kl);    /* from alpha_{<t}, i.e. from h_{<t}: already updated */
        right_products(x, t, kr);   /* from h_{>t}: not updated yet in this sweep */
        for (i = 0; i < n; i++) {
            khi[i] = 0.0;
            sd[i] = 0.0;
        }
        /* couplings whose later end is t */
        if (c1_at(x, t - lag)) add_rowdot_t(n, x->ML + (lag - 1) * n2, x->K1, khi);
        if (c2_at(x, t - 2 * lag)) add_rowdot_t(n, x->ML + (2 * lag - 1) * n2, x->K2, khi);
        /* couplings with earlier end t - a < t < later end:
         * E[K(s_{t-a}, s_hi) | s_t = i] = sum_{j,k} Q(s_{t-a} = j | i) K(j, k) Q(s_hi = k | i) */
        for (a = 1; a < 2 * lag; a++) {
            if (a < lag && c1_at(x, t - a)) {
                matmul(n, x->ML + (a - 1) * n2, x->K1, x->tmp2);
                add_rowdot(n, x->tmp2, x->MR + (lag - a - 1) * n2, sd);
            }
            if (c2_at(x, t - a)) {
                matmul(n, x->ML + (a - 1) * n2, x->K2, x->tmp2);
                add_rowdot(n, x->tmp2, x->MR + (2 * lag - a - 1) * n2, sd);
            }
        }
        for (i = 0; i < n; i++)
            term[i] = x->e[t * n + i] + cl[i] + x->cr[t * n + i] - x->tl[t * n + i] - khi[i]
                      - sd[i];
        for (i = 0; i < n; i++)
            if (!isfinite(term[i])) return MF_HMM_NONFINITE;
        shift_max(term, n);
        /* new h_t and the forward message alpha_t it gives */
        for (j = 0; j < n; j++) {
            double al;
            h[t * n + j] = term[j];
            if (t == 0) al = x->m->startprob[j];
            else {
                al = 0.0;
                for (i = 0; i < n; i++) al += x->alpha[(t - 1) * n + i] * A[i * n + j];
            }
            al *= exp(term[j]);
            x->alpha[t * n + j] = al;
            s += al;
        }
        if (!(s > 0.0)) return MF_HMM_IMPOSSIBLE;
        for (j = 0; j < n; j++) x->alpha[t * n + j] /= s;
        if (t + 1 < T) {
            for (j = 0; j < n; j++) w[j] = cl[j] + x->e[t * n + j] - h[t * n + j] - khi[j];
            lmat(x, t + 1, x->tmp);
            for (i = 0; i < n; i++) {
                double c = 0.0;
                for (j = 0; j < n; j++) c += x->tmp[i * n + j] * w[j];
                cl[i] = c;
            }
            shift_max(cl, n);
        }
    }
    return MF_HMM_OK;
}

int mf_hmm_chain_objective(const mf_hmm_model *m, ptrdiff_t T, const double *X,
                           const double *logpot, double *gamma, double *xi_sum, double *pair1,
                           double *pair2, double *value)
{
    xchain_t x;
    int status = xchain_init(&x, m, T, X);
    if (status) return status;
    status = xchain_objective(&x, logpot, xi_sum, pair1, pair2, value);
    if (!status && gamma) memcpy(gamma, x.gam, (size_t)(T * m->n) * sizeof(double));
    xchain_free(&x);
    return status;
}

/* Coordinate ascent from h (in place); history[0..*n_sweeps]. */
static int xchain_ascent(xchain_t *x, int max_sweeps, double tol, double *h, double *history,
                         int *n_sweeps, double *value)
{
    double F, Fn;
    int it, status = xchain_objective(x, h, NULL, NULL, NULL, &F);
    if (status) return status;
    history[0] = F;
    it = 0;
    if (x->kmax > 0 && x->T > x->lag)
        for (it = 1; it <= max_sweeps; it++) {
            status = xchain_sweep(x, h);
            if (status) return status;
            status = xchain_objective(x, h, NULL, NULL, NULL, &Fn);
            if (status) return status;
            history[it] = Fn;
            if (Fn - F <= tol * (double)x->T) {
                F = Fn;
                break;
            }
            F = Fn;
        }
    *n_sweeps = it > max_sweeps ? max_sweeps : it;
    *value = F;
    return MF_HMM_OK;
}

int mf_hmm_ascent(const mf_hmm_model *m, ptrdiff_t T, const double *X, int max_sweeps,
                  double tol, double *logpot, double *history, int *n_sweeps, double *value)
{
    xchain_t x;
    int status = xchain_init(&x, m, T, X);
    if (status) return status;
    status = xchain_ascent(&x, max_sweeps, tol, logpot, history, n_sweeps, value);
    xchain_free(&x);
    return status;
}

/* M-step statistics of F in the means, for the chain whose marginals are gamma and whose summed
 * pairwise marginals at distance lag and 2 lag are pair1, pair2 (identical for every d). */
static void mstep_stats(const mf_hmm_model *m, ptrdiff_t T, const double *X, const double *gamma,
                        const double *pair1, const double *pair2, double *stat_H, double *stat_g)
{
    const ptrdiff_t n = m->n, D = m->D, lag = m->lag, K = 3 * n;
    ptrdiff_t t, i, j, d;
    double *H = stat_H;
    memset(stat_H, 0, (size_t)(D * K * K) * sizeof(double));
    memset(stat_g, 0, (size_t)(D * K) * sizeof(double));
    for (t = 0; t < T; t++) {
        const int r = m->right && t + lag < T, l = m->left && t - lag >= 0;
        const double *x = X + t * D;
        for (i = 0; i < n; i++) {
            const double gu = gamma[t * n + i];
            const double gv = r ? gamma[(t + lag) * n + i] : 0.0;
            const double gw = l ? gamma[(t - lag) * n + i] : 0.0;
            H[i * K + i] += gu;
            H[(n + i) * K + n + i] += gv;
            H[(2 * n + i) * K + 2 * n + i] += gw;
            for (d = 0; d < D; d++) {
                double *g = stat_g + d * K;
                g[i] += x[d] * gu;
                g[n + i] += x[d] * gv;
                g[2 * n + i] += x[d] * gw;
            }
        }
    }
    if (T > lag)
        for (i = 0; i < n; i++)
            for (j = 0; j < n; j++) {
                const double p1 = pair1[i * n + j];
                if (m->right) {   /* U at s_t = i, V at s_{t+lag} = j */
                    H[i * K + n + j] += p1;
                    H[(n + j) * K + i] += p1;
                }
                if (m->left) {    /* W at s_{t-lag} = i, U at s_t = j */
                    H[(2 * n + i) * K + j] += p1;
                    H[j * K + 2 * n + i] += p1;
                }
                if (m->right && m->left && T > 2 * lag) {   /* W at s_{t-lag} = i, V at s_{t+lag} = j */
                    const double p2 = pair2[i * n + j];
                    H[(2 * n + i) * K + n + j] += p2;
                    H[(n + j) * K + 2 * n + i] += p2;
                }
            }
    for (d = 1; d < D; d++) memcpy(stat_H + d * K * K, stat_H, (size_t)(K * K) * sizeof(double));
}

int mf_hmm_structured(const mf_hmm_model *m, ptrdiff_t T, const double *X, int max_sweeps,
                      double tol, const double *init, double *gamma, double *xi_sum,
                      double *history, int *n_sweeps, double *bound, double *logpot,
                      double *stat_H, double *stat_g)
{
    const ptrdiff_t n = m->n, Tn = T * m->n;
    xchain_t x;
    double *hbest = NULL, *h = NULL, *hist = NULL, *q = NULL, *pairs = NULL;
    double best = -INFINITY, F, lb;
    int status, k, start, ns = 0, nbest = 0;

    status = xchain_init(&x, m, T, X);
    if (status) return status;
    hbest = (double *)malloc((size_t)Tn * sizeof(double));
    h = (double *)malloc((size_t)Tn * sizeof(double));
    hist = (double *)malloc((size_t)(max_sweeps + 1) * sizeof(double));
    q = (double *)malloc((size_t)Tn * sizeof(double));
    pairs = (double *)malloc((size_t)(2 * n * n) * sizeof(double));
    if (!hbest || !h || !hist || !q || !pairs) {
        status = MF_HMM_ENOMEM;
        goto done;
    }
    if (init || x.kmax == 0 || T <= m->lag) {
        /* a warm start; or no couplings, where the first-order posterior is exact */
        memcpy(hbest, init ? init : x.e, (size_t)Tn * sizeof(double));
        status = xchain_ascent(&x, max_sweeps, tol, hbest, history, &nbest, &best);
        if (status) goto done;
    } else {
        for (start = 0; start < 3; start++) {
            if (start == 0) {
                /* link bound from the first-order posterior */
                status = mf_hmm_link(m, T, X, max_sweeps, tol, NULL, gamma, hist, &ns, &lb, h);
            } else if (start == 1) {
                /* link bound from the fully factorised solution */
                status = mf_hmm_naive(m, T, X, max_sweeps, tol, q, hist, &ns, &lb);
                if (status == MF_HMM_IMPOSSIBLE) {
                    /* zeros in the transitions can leave the product family without a finite
                     * start; that start is then skipped */
                    status = MF_HMM_OK;
                    continue;
                }
                if (!status)
                    status = mf_hmm_link(m, T, X, max_sweeps, tol, q, gamma, hist, &ns, &lb, h);
            } else {
                memcpy(h, x.e, (size_t)Tn * sizeof(double));   /* first-order posterior */
            }
            if (status) goto done;
            status = xchain_ascent(&x, max_sweeps, tol, h, hist, &ns, &F);
            if (status) goto done;
            if (F > best) {
                best = F;
                nbest = ns;
                memcpy(hbest, h, (size_t)Tn * sizeof(double));
                for (k = 0; k <= ns; k++) history[k] = hist[k];
            }
        }
    }
    /* the kept chain's marginals and statistics */
    status = xchain_objective(&x, hbest, xi_sum, pairs, pairs + n * n, &F);
    if (status) goto done;
    memcpy(gamma, x.gam, (size_t)Tn * sizeof(double));
    if (logpot) memcpy(logpot, hbest, (size_t)Tn * sizeof(double));
    if (stat_H && stat_g) mstep_stats(m, T, X, x.gam, pairs, pairs + n * n, stat_H, stat_g);
    *n_sweeps = nbest;
    *bound = best;
done:
    xchain_free(&x);
    free(hbest);
    free(h);
    free(hist);
    free(q);
    free(pairs);
    return status;
}
