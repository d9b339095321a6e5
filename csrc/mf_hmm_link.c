/* Context-HMM kernels: the link bound (docs/derivations/context_hmm.rst, "Link variables"): the chain
 * exact, each long-range coupling replaced by a Gaussian link variable.  See mf_hmm.h. */
#include "mf_hmm_internal.h"

void mf_hmm__link_layout(arena_t *a, const mf_hmm_model *m, ptrdiff_t T, link_bufs *b)
{
    const ptrdiff_t n = m->n, D = m->D, np = 3 * T + 1;
    b->cc = (int *)take(a, 3, D, sizeof(int));
    b->e = (double *)take(a, T, n, sizeof(double));
    b->h = (double *)take(a, T, n, sizeof(double));
    b->work = (double *)take(a, mf_hmm_fb_work_size(T, n), 1, sizeof(double));
    b->pairs = (pair_t *)take(a, np, 1, sizeof(pair_t));
    b->lam2 = (double *)take(a, np, D, sizeof(double));
    b->abar = (double *)take(a, np, D, sizeof(double));
    b->bbar = (double *)take(a, np, D, sizeof(double));
    b->mom = (double *)take(a, 6 * T, D, sizeof(double));
}

/* The link iteration on a prepared model (internal statuses). */
int mf_hmm__link(const mf_hmm_model *m, ptrdiff_t T, const double *X, ptrdiff_t max_sweeps,
                     double tol, const double *init, double *gamma, double *history,
                     ptrdiff_t hist_len, ptrdiff_t *n_sweeps, double *bound, double *logpot)
{
    const ptrdiff_t n = m->n, D = m->D;
    arena_t a = {NULL, 0, 0};
    link_bufs b;
    int status, converged = 1;
    int *cc;
    ptrdiff_t it, np, p, t, i, d;
    int k;
    double cst, logz = 0.0, B = -INFINITY, prev = -INFINITY;
    double *e, *h;

    mf_hmm__link_layout(&a, m, T, &b);
    if ((status = arena_alloc(&a)) != MF_OK) return status;
    mf_hmm__link_layout(&a, m, T, &b);
    cc = b.cc;
    e = b.e;
    h = b.h;
    mf_hmm__const_columns(m, cc);
    cst = mf_hmm__site_terms(m, T, X, e);
    np = mf_hmm__build_pairs(m, T, b.pairs);

    memcpy(h, e, (size_t)(T * n) * sizeof(double));
    if (init) memcpy(gamma, init, (size_t)(T * n) * sizeof(double));
    else {
        status = mf_hmm__fb(T, n, m->startprob, m->transmat, h, gamma, NULL, b.work, &logz);
        if (status) goto done;
    }

    for (it = 0;; it++) {
        /* Links: for the current Q, the best lambda for every coupling, and the bound. */
        double eh = 0.0;
        for (t = 0; t < T * n; t++) eh += gamma[t] * (e[t] - h[t]);
        B = logz + eh + cst;
        /* each table's column means and variances under every gamma_t, once (a site is an end
         * of several couplings) */
        for (t = 0; t < T; t++)
            for (k = 0; k < 3; k++) {
                const double *tab = table(m, k);
                double *mo = b.mom + (t * 3 + k) * 2 * D;
                if ((k == 1 && !m->right) || (k == 2 && !m->left)) continue;
                for (d = 0; d < D; d++) {
                    mo[2 * d] = dot_gamma(gamma + t * n, tab, n, D, d);
                    mo[2 * d + 1] = var_gamma(gamma + t * n, tab, n, D, d, mo[2 * d]);
                }
            }
        for (p = 0; p < np; p++) {
            const pair_t *pp = b.pairs + p;
            const double *ma = b.mom + (pp->sa * 3 + pp->ta) * 2 * D;
            const double *mb = b.mom + (pp->sb * 3 + pp->tb) * 2 * D;
            for (d = 0; d < D; d++) {
                double av, bv, l2 = -1.0; /* < 0: exact factorised term (one end is not random) */
                if (!seen(X, D, pp->out, d)) {   /* a missing coordinate couples nothing */
                    b.lam2[p * D + d] = 0.0;
                    continue;
                }
                av = ma[2 * d];
                bv = mb[2 * d];
                b.abar[p * D + d] = av;
                b.bbar[p * D + d] = bv;
                B -= av * bv;
                if (!cc[pp->ta * D + d] && !cc[pp->tb * D + d]) {
                    const double va = ma[2 * d + 1];
                    const double vb = mb[2 * d + 1];
                    if (va > 0.0 && vb > 0.0) l2 = sqrt(vb / va);
                    else if (va > 0.0) l2 = MF_HMM_LAM2_MIN;
                    else if (vb > 0.0) l2 = MF_HMM_LAM2_MAX;
                    else l2 = 1.0;
                    if (l2 < MF_HMM_LAM2_MIN) l2 = MF_HMM_LAM2_MIN;
                    if (l2 > MF_HMM_LAM2_MAX) l2 = MF_HMM_LAM2_MAX;
                    B -= 0.5 * l2 * va + 0.5 * vb / l2;
                }
                b.lam2[p * D + d] = l2;
            }
        }
        if (init && it == 0) {
            /* the given marginals only seed the links; they are not a chain Q of this family */
            B = -INFINITY;
        } else {
            const ptrdiff_t k = init ? it - 1 : it;
            if (!isfinite(B)) { status = HMM_NONFINITE; goto done; }
            put_history(history, hist_len, k, B);
            if (np == 0) break;
            if (k > 0 && B - prev <= tol * (double)T) break;
            if (k == max_sweeps) { converged = 0; break; }
        }
        prev = B;

        /* Chain: exact forward-backward with the links' expected potentials. */
        memcpy(h, e, (size_t)(T * n) * sizeof(double));
        for (p = 0; p < np; p++) {
            const pair_t *pp = b.pairs + p;
            const double *A = table(m, pp->ta), *Bt = table(m, pp->tb);
            double *ha = h + pp->sa * n, *hb = h + pp->sb * n;
            for (d = 0; d < D; d++) {
                const double av = b.abar[p * D + d], bv = b.bbar[p * D + d];
                const double l2 = b.lam2[p * D + d];
                if (l2 == 0.0) continue;   /* missing coordinate */
                if (l2 < 0.0) {
                    for (i = 0; i < n; i++) ha[i] -= bv * A[i * D + d];
                    for (i = 0; i < n; i++) hb[i] -= av * Bt[i * D + d];
                } else {
                    /* (l2 a - b) A_i - l2 A_i^2 / 2 and (b / l2 - a) B_i - B_i^2 / (2 l2), each
                     * less a constant in i (which leaves Q unchanged) */
                    for (i = 0; i < n; i++) {
                        const double ai = A[i * D + d];
                        ha[i] -= 0.5 * l2 * sq(ai - av) + bv * ai;
                    }
                    for (i = 0; i < n; i++) {
                        const double bi = Bt[i * D + d];
                        hb[i] -= 0.5 * sq(bi - bv) / l2 + av * bi;
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
        status = mf_hmm__fb(T, n, m->startprob, m->transmat, h, gamma, NULL, b.work, &logz);
        if (status) goto done;
    }
    *n_sweeps = init ? it - 1 : it;
    *bound = B;
    if (logpot) memcpy(logpot, h, (size_t)(T * n) * sizeof(double));
    status = converged ? MF_OK : MF_NOT_CONVERGED;
done:
    free(a.base);
    return status;
}

int mf_hmm_link(const mf_hmm_model *m, ptrdiff_t T, const double *X, ptrdiff_t max_sweeps,
                double tol, const double *init, double *gamma, double *history,
                ptrdiff_t hist_len, ptrdiff_t *n_sweeps, double *bound, double *logpot)
{
    mf_hmm_model e;
    int status = mf_hmm__prepare(m, T, &e);
    if (status) return status;
    if ((status = check_sweeps(max_sweeps, tol, history, hist_len)) != MF_OK) return status;
    if (!X || !gamma || !n_sweeps || !bound) return MF_EBADARG;
    return mf_hmm__publish(mf_hmm__link(&e, T, X, max_sweeps, tol, init, gamma, history, hist_len, n_sweeps,
                             bound, logpot), bound);
}
