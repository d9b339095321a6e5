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
/* Structured mean field                                                                      */

int mf_hmm_structured(const mf_hmm_model *m, ptrdiff_t T, const double *X, int max_sweeps,
                      double tol, const double *init, double *gamma, double *xi_sum, double *history, int *n_sweeps,
                      double *bound, double *logpot, double *stat_H, double *stat_g)
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
    if (xi_sum) {
        double lz2;
        double *g2 = (double *)malloc((size_t)(T * n) * sizeof(double));
        if (!g2) { status = MF_HMM_ENOMEM; goto done; }
        status = mf_hmm_forward_backward(T, n, m->startprob, m->transmat, h, g2, xi_sum, work,
                                         &lz2);
        free(g2);
        if (status) goto done;
    }
    if (stat_H && stat_g) {
        const ptrdiff_t K = 3 * n;
        memset(stat_H, 0, (size_t)(D * K * K) * sizeof(double));
        memset(stat_g, 0, (size_t)(D * K) * sizeof(double));
        for (t = 0; t < T; t++) {
            const int r = m->right && t + m->lag < T, l = m->left && t - m->lag >= 0;
            const double *x = X + t * D;
            for (d = 0; d < D; d++) {
                double *H = stat_H + d * K * K, *g = stat_g + d * K;
                for (i = 0; i < n; i++) {
                    double gi = gamma[t * n + i];
                    H[i * K + i] += gi;
                    g[i] += x[d] * gi;
                    if (r) {
                        gi = gamma[(t + m->lag) * n + i];
                        H[(n + i) * K + n + i] += gi;
                        g[n + i] += x[d] * gi;
                    }
                    if (l) {
                        gi = gamma[(t - m->lag) * n + i];
                        H[(2 * n + i) * K + 2 * n + i] += gi;
                        g[2 * n + i] += x[d] * gi;
                    }
                }
            }
        }
        for (p = 0; p < np; p++) {
            const pair_t *pp = pairs + p;
            const double *ga = gamma + pp->sa * n, *gb = gamma + pp->sb * n;
            const ptrdiff_t oa = pp->ta * n, ob = pp->tb * n;
            ptrdiff_t j;
            for (d = 0; d < D; d++) {
                double *H = stat_H + d * K * K;
                const double l2 = lam2[p * D + d];
                for (i = 0; i < n; i++)
                    for (j = 0; j < n; j++) {
                        const double c = ga[i] * gb[j];
                        H[(oa + i) * K + ob + j] += c;
                        H[(ob + j) * K + oa + i] += c;
                    }
                if (l2 > 0.0) {
                    const double il2 = 1.0 / l2;
                    for (i = 0; i < n; i++) {
                        H[(oa + i) * K + oa + i] += l2 * ga[i];
                        H[(ob + i) * K + ob + i] += il2 * gb[i];
                        for (j = 0; j < n; j++) {
                            H[(oa + i) * K + oa + j] -= l2 * ga[i] * ga[j];
                            H[(ob + i) * K + ob + j] -= il2 * gb[i] * gb[j];
                        }
                    }
                }
            }
        }
    }
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
/* Structured mean field from two starts                                                      */

int mf_hmm_structured_best(const mf_hmm_model *m, ptrdiff_t T, const double *X, int max_sweeps,
                           double tol, double *gamma, double *xi_sum, double *history,
                           int *n_sweeps, double *bound, double *logpot, double *stat_H,
                           double *stat_g)
{
    const ptrdiff_t n = m->n, D = m->D, K = 3 * m->n;
    double *q = NULL, *g2 = NULL, *xi2 = NULL, *hist2 = NULL, *lp2 = NULL, *H2 = NULL, *gg2 = NULL;
    double b2 = -INFINITY, bn;
    int status, ns2 = 0, nsn = 0, k;

    status = mf_hmm_structured(m, T, X, max_sweeps, tol, NULL, gamma, xi_sum, history, n_sweeps,
                               bound, logpot, stat_H, stat_g);
    if (status) return status;
    if (!m->right && !m->left) return MF_HMM_OK;   /* no couplings: the chain is exact */
    q = (double *)malloc((size_t)(T * n) * sizeof(double));
    g2 = (double *)malloc((size_t)(T * n) * sizeof(double));
    xi2 = (double *)malloc((size_t)(n * n) * sizeof(double));
    hist2 = (double *)malloc((size_t)(max_sweeps + 1) * sizeof(double));
    lp2 = (double *)malloc((size_t)(T * n) * sizeof(double));
    H2 = stat_H ? (double *)malloc((size_t)(D * K * K) * sizeof(double)) : NULL;
    gg2 = stat_g ? (double *)malloc((size_t)(D * K) * sizeof(double)) : NULL;
    if (!q || !g2 || !xi2 || !hist2 || !lp2 || (stat_H && !H2) || (stat_g && !gg2)) {
        status = MF_HMM_ENOMEM;
        goto done;
    }
    for (k = 0; k <= max_sweeps; k++) hist2[k] = NAN;
    status = mf_hmm_naive(m, T, X, max_sweeps, tol, q, hist2, &nsn, &bn);
    if (status) goto done;
    for (k = 0; k <= max_sweeps; k++) hist2[k] = NAN;
    status = mf_hmm_structured(m, T, X, max_sweeps, tol, q, g2, xi_sum ? xi2 : NULL, hist2, &ns2,
                               &b2, lp2, H2, gg2);
    if (status) goto done;
    if (b2 > *bound) {
        memcpy(gamma, g2, (size_t)(T * n) * sizeof(double));
        if (xi_sum) memcpy(xi_sum, xi2, (size_t)(n * n) * sizeof(double));
        memcpy(history, hist2, (size_t)(max_sweeps + 1) * sizeof(double));
        if (logpot) memcpy(logpot, lp2, (size_t)(T * n) * sizeof(double));
        if (stat_H) memcpy(stat_H, H2, (size_t)(D * K * K) * sizeof(double));
        if (stat_g) memcpy(stat_g, gg2, (size_t)(D * K) * sizeof(double));
        *n_sweeps = ns2;
        *bound = b2;
    }
done:
    free(q);
    free(g2);
    free(xi2);
    free(hist2);
    free(lp2);
    free(H2);
    free(gg2);
    return status;
}
