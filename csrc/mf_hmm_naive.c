/* Context-HMM kernels: fully factorised (naive) mean field.  See mf_hmm.h. */
#include "mf_hmm_internal.h"

/* sum_j q[j] la[j] with 0 log 0 = 0, la = log(a) precomputed (-inf where a = 0); -inf when
 * some q[j] > 0 meets a[j] = 0. */
static double qlog(const double *q, const double *la, ptrdiff_t n, ptrdiff_t stride)
{
    double s = 0.0;
    ptrdiff_t j;
    for (j = 0; j < n; j++) {
        if (q[j] == 0.0) continue;
        if (la[j * stride] == -INFINITY) return -INFINITY;
        s += q[j] * la[j * stride];
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

/* E_Q[ln P(s)] + H(Q) of the product Q: every term of the bound but the emissions. */
static double naive_chain_terms(ptrdiff_t n, ptrdiff_t T, const double *q, const double *logsp,
                                const double *logA)
{
    double B = qlog(q, logsp, n, 1);
    ptrdiff_t t, i;
    for (t = 0; t < T; t++)
        for (i = 0; i < n; i++) {
            const double qi = q[t * n + i];
            if (qi > 0.0) B -= qi * log(qi);
            if (t + 1 < T && qi > 0.0) B += qi * qlog(q + (t + 1) * n, logA + i * n, n, 1);
        }
    return B;
}

/* The bound, evaluated without cancellation (mf_hmm__emission): a product Q has no
 * covariances between the terms of an output's mean.  means holds E_Q of the tables. */
static double naive_bound(const mf_hmm_model *m, ptrdiff_t T, const double *X, const double *q,
                          const double *means, const double *logsp, const double *logA)
{
    return naive_chain_terms(m->n, T, q, logsp, logA) + mf_hmm__emission(m, T, X, q, means, NULL);
}

void mf_hmm__naive_layout(arena_t *a, const mf_hmm_model *m, ptrdiff_t T, naive_bufs *b)
{
    const ptrdiff_t n = m->n, D = m->D;
    b->e = (double *)take(a, T, n, sizeof(double));
    b->work = (double *)take(a, mf_hmm_fb_work_size(T, n), 1, sizeof(double));
    b->means = (double *)take(a, 3 * T, D, sizeof(double));
    b->pot = (double *)take(a, n, 1, sizeof(double));
    b->cpl = (double *)take(a, 3, D, sizeof(double));
    b->logsp = (double *)take(a, n, 1, sizeof(double));
    b->logA = (double *)take(a, n, n, sizeof(double));
}

int mf_hmm__naive(const mf_hmm_model *m, ptrdiff_t T, const double *X, ptrdiff_t max_sweeps,
                      double tol, double *q, double *history, ptrdiff_t hist_len,
                      ptrdiff_t *n_sweeps, double *bound)
{
    const ptrdiff_t n = m->n, D = m->D, lag = m->lag;
    arena_t a = {NULL, 0, 0};
    naive_bufs b;
    int status, converged = 1;
    ptrdiff_t it, t, i, j, d, k;
    double logz, B = -INFINITY, prev = -INFINITY;
    double *e, *means, *pot, *cpl;

    mf_hmm__naive_layout(&a, m, T, &b);
    if ((status = arena_alloc(&a)) != MF_OK) return status;
    mf_hmm__naive_layout(&a, m, T, &b);
    e = b.e;
    means = b.means;
    pot = b.pot;
    cpl = b.cpl;
    memset(means, 0, (size_t)(3 * T * D) * sizeof(double));
    for (i = 0; i < n; i++) b.logsp[i] = m->startprob[i] > 0.0 ? log(m->startprob[i]) : -INFINITY;
    for (i = 0; i < n * n; i++) b.logA[i] = m->transmat[i] > 0.0 ? log(m->transmat[i]) : -INFINITY;
    (void)mf_hmm__site_terms(m, T, X, e);   /* the potentials' single-site part */
    status = mf_hmm__fb(T, n, m->startprob, m->transmat, e, q, NULL, b.work, &logz);
    if (status) goto done;
    for (t = 0; t < T; t++) naive_means(m, q, t, means, T);

    for (it = 0;; it++) {
        B = naive_bound(m, T, X, q, means, b.logsp, b.logA);
        if (isnan(B) || B == INFINITY) { status = HMM_NONFINITE; goto done; }
        put_history(history, hist_len, it, B);
        if (it > 0 && B - prev <= tol * (double)T) break;
        if (it == max_sweeps) { converged = 0; break; }
        prev = B;
        for (k = 0; k < T; k++) {
            const int forward = (it % 2) == 0;
            const double *mU = means, *mV = means + T * D, *mW = means + 2 * T * D;
            double mx = -INFINITY, s = 0.0;
            t = forward ? k : T - 1 - k;
            /* coupling vectors: what multiplies U[i], V[i], W[i] at time t */
            for (d = 0; d < 3 * D; d++) cpl[d] = 0.0;
            /* (each only where the output that holds the coupling is observed) */
            if (m->right && lag < T - t)           /* output t: U at t, V at t + lag */
                for (d = 0; d < D; d++)
                    if (seen(X, D, t, d)) cpl[d] += mV[(t + lag) * D + d];
            if (m->left && t >= lag)               /* output t: U at t, W at t - lag */
                for (d = 0; d < D; d++)
                    if (seen(X, D, t, d)) cpl[d] += mW[(t - lag) * D + d];
            if (m->right && t >= lag) {            /* output t - lag */
                for (d = 0; d < D; d++)
                    if (seen(X, D, t - lag, d)) cpl[D + d] += mU[(t - lag) * D + d];
                if (m->left && t - lag >= lag)
                    for (d = 0; d < D; d++)
                        if (seen(X, D, t - lag, d)) cpl[D + d] += mW[(t - 2 * lag) * D + d];
            }
            if (m->left && lag < T - t) {          /* output t + lag */
                for (d = 0; d < D; d++)
                    if (seen(X, D, t + lag, d)) cpl[2 * D + d] += mU[(t + lag) * D + d];
                if (m->right && lag < T - t - lag)
                    for (d = 0; d < D; d++)
                        if (seen(X, D, t + lag, d)) cpl[2 * D + d] += mV[(t + 2 * lag) * D + d];
            }
            for (i = 0; i < n; i++) {
                double v = e[t * n + i];
                if (t == 0) v += b.logsp[i];
                if (t > 0) v += qlog(q + (t - 1) * n, b.logA + i, n, n);
                if (t + 1 < T) v += qlog(q + (t + 1) * n, b.logA + i * n, n, 1);
                for (d = 0; d < D; d++) {
                    v -= m->U[i * D + d] * cpl[d];
                    if (m->right) v -= m->V[i * D + d] * cpl[D + d];
                    if (m->left) v -= m->W[i * D + d] * cpl[2 * D + d];
                }
                pot[i] = v;
                if (v > mx) mx = v;
            }
            if (mx == -INFINITY) { status = HMM_IMPOSSIBLE; goto done; }
            if (!isfinite(mx)) { status = HMM_NONFINITE; goto done; }
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
    status = converged ? MF_OK : MF_NOT_CONVERGED;
done:
    free(a.base);
    return status;
}

int mf_hmm_naive(const mf_hmm_model *m, ptrdiff_t T, const double *X, ptrdiff_t max_sweeps,
                 double tol, double *q, double *history, ptrdiff_t hist_len,
                 ptrdiff_t *n_sweeps, double *bound)
{
    mf_hmm_model e;
    int status = mf_hmm__prepare(m, T, &e);
    if (status) return status;
    if ((status = check_sweeps(max_sweeps, tol, history, hist_len)) != MF_OK) return status;
    if (!X || !q || !n_sweeps || !bound) return MF_EBADARG;
    return mf_hmm__publish(mf_hmm__naive(&e, T, X, max_sweeps, tol, q, history, hist_len, n_sweeps, bound),
                   bound);
}
