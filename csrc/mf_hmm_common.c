/* Context-HMM kernels, shared pieces: argument checks and the effective lag, the
 * single-site emission terms, the list of long-range couplings, the careful evaluation of the
 * emission part of a bound.  See mf_hmm.h for the model and mf_hmm_internal.h for how the
 * files fit together. */
#include "mf_hmm_internal.h"

int mf_hmm__prepare(const mf_hmm_model *m, ptrdiff_t T, mf_hmm_model *e)
{
    ptrdiff_t a;
    if (!m || !e || T < 1 || m->n < 1 || m->D < 1 || m->lag < 1) return MF_EBADARG;
    if (!m->startprob || !m->transmat || !m->U) return MF_EBADARG;
    if ((m->right && !m->V) || (m->left && !m->W)) return MF_EBADARG;
    if (!mul_ok(T, m->n, &a) || !mul_ok(a, 64, &a)) return MF_EOVERFLOW;
    if (!mul_ok(T, m->D, &a) || !mul_ok(a, 64, &a)) return MF_EOVERFLOW;
    if (!mul_ok(m->n, m->n, &a) || !mul_ok(a, m->D, &a) || !mul_ok(a, 128, &a))
        return MF_EOVERFLOW;
    *e = *m;
    e->right = m->right ? 1 : 0;
    e->left = m->left ? 1 : 0;
    if (m->lag >= T) {
        e->right = e->left = 0;
        e->lag = T;
    }
    return MF_OK;
}

/* sum over the observed coordinates of x of x[d] a[d] - a[d]^2 / 2: ln N(x; a, I) up to terms
 * free of a, for one table row a */
static double site_term(const double *x, const double *a, ptrdiff_t D)
{
    double v = 0.0;
    ptrdiff_t d;
    for (d = 0; d < D; d++)
        if (!isnan(x[d])) v += x[d] * a[d] - 0.5 * a[d] * a[d];
    return v;
}

double mf_hmm__site_terms(const mf_hmm_model *m, ptrdiff_t T, const double *X, double *e)
{
    const ptrdiff_t n = m->n, D = m->D, lag = m->lag;
    double cst = 0.0;
    ptrdiff_t t, i, d;
    for (t = 0; t < T; t++) {
        const double *x = X + t * D;
        const int r = m->right && t >= lag, l = m->left && lag < T - t;
        double xx = 0.0;
        for (d = 0; d < D; d++)
            if (!isnan(x[d])) xx += x[d] * x[d] + 2.0 * HALF_LOG_2PI;
        cst -= 0.5 * xx;
        for (i = 0; i < n; i++) {
            double v = site_term(x, m->U + i * D, D);
            if (r) v += site_term(X + (t - lag) * D, m->V + i * D, D);  /* right context of x_{t-lag} */
            if (l) v += site_term(X + (t + lag) * D, m->W + i * D, D);  /* left context of x_{t+lag} */
            e[t * n + i] = v;
        }
    }
    return cst;
}

void mf_hmm__own_terms(const mf_hmm_model *m, ptrdiff_t T, const double *X, double *e)
{
    const ptrdiff_t n = m->n, D = m->D;
    ptrdiff_t t, i;
    for (t = 0; t < T; t++)
        for (i = 0; i < n; i++) e[t * n + i] = site_term(X + t * D, m->U + i * D, D);
}

void mf_hmm__bar_means(const mf_hmm_model *m, ptrdiff_t T, const double *gam, double *bar)
{
    const ptrdiff_t n = m->n, D = m->D;
    ptrdiff_t t, d;
    int k;
    for (k = 0; k < 3; k++) {
        const double *tab = table(m, k);
        if ((k == 1 && !m->right) || (k == 2 && !m->left)) continue;
        for (t = 0; t < T; t++)
            for (d = 0; d < D; d++) bar[(k * T + t) * D + d] = dot_gamma(gam + t * n, tab, n, D, d);
    }
}

double mf_hmm__emission(const mf_hmm_model *m, ptrdiff_t T, const double *X, const double *gam,
                        const double *bar, const double *cov)
{
    const ptrdiff_t n = m->n, D = m->D, lag = m->lag;
    double s = 0.0;
    ptrdiff_t t, d;
    for (t = 0; t < T; t++) {
        const int r = m->right && lag < T - t, l = m->left && t >= lag;   /* output t's terms */
        for (d = 0; d < D; d++) {
            const double x = X[t * D + d], mu = bar[t * D + d];
            double res, var;
            if (isnan(x)) continue;
            res = x - mu;
            var = var_gamma(gam + t * n, m->U, n, D, d, mu);
            if (r) {
                const double mv = bar[(T + t + lag) * D + d];
                res -= mv;
                var += var_gamma(gam + (t + lag) * n, m->V, n, D, d, mv);
            }
            if (l) {
                const double mw = bar[(2 * T + t - lag) * D + d];
                res -= mw;
                var += var_gamma(gam + (t - lag) * n, m->W, n, D, d, mw);
            }
            if (cov) var += 2.0 * cov[t * D + d];
            s -= 0.5 * (res * res + var) + HALF_LOG_2PI;
        }
    }
    return s;
}

ptrdiff_t mf_hmm__build_pairs(const mf_hmm_model *m, ptrdiff_t T, pair_t *p)
{
    const ptrdiff_t lag = m->lag;
    ptrdiff_t t, np = 0;
    for (t = 0; t < T; t++) {
        const int r = m->right && lag < T - t, l = m->left && t >= lag;
        if (r) { p[np].ta = 0; p[np].tb = 1; p[np].sa = t; p[np].sb = t + lag; p[np].out = t; np++; }
        if (l) { p[np].ta = 0; p[np].tb = 2; p[np].sa = t; p[np].sb = t - lag; p[np].out = t; np++; }
        if (r && l) {
            p[np].ta = 1; p[np].tb = 2; p[np].sa = t + lag; p[np].sb = t - lag; p[np].out = t;
            np++;
        }
    }
    return np;
}

void mf_hmm__const_columns(const mf_hmm_model *m, int *constcol)
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
