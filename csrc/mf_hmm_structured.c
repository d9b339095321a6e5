/* Context-HMM kernels: structured mean field -- the chain with the model's transitions
 * and free potentials, its exact objective maximised by coordinate ascent from several starts
 * -- and the M-step statistics of that objective in the means.  See mf_hmm.h. */
#include "mf_hmm_internal.h"

#if defined(_OPENMP)
#include <omp.h>
#endif

/* M-step statistics of F in the means, for the chain whose marginals are gamma; pmask (3, D, n, n)
 * holds, per output coordinate d, the summed pairwise marginals of the couplings whose output is
 * observed in d (mf_hmm__xchain_objective).  A missing coordinate contributes nothing. */
static void mstep_stats(const mf_hmm_model *m, ptrdiff_t T, const double *X, const double *gamma,
                        const double *pmask, double *stat_H, double *stat_g)
{
    const ptrdiff_t n = m->n, D = m->D, lag = m->lag, K = 3 * n, n2 = n * n;
    ptrdiff_t t, i, j, d;
    memset(stat_H, 0, (size_t)(D * K * K) * sizeof(double));
    memset(stat_g, 0, (size_t)(D * K) * sizeof(double));
    for (t = 0; t < T; t++) {
        const int r = m->right && lag < T - t, l = m->left && t >= lag;
        const double *x = X + t * D;
        for (d = 0; d < D; d++) {
            double *H = stat_H + d * K * K, *g = stat_g + d * K;
            if (isnan(x[d])) continue;
            for (i = 0; i < n; i++) {
                const double gu = gamma[t * n + i];
                const double gv = r ? gamma[(t + lag) * n + i] : 0.0;
                const double gw = l ? gamma[(t - lag) * n + i] : 0.0;
                H[i * K + i] += gu;
                H[(n + i) * K + n + i] += gv;
                H[(2 * n + i) * K + 2 * n + i] += gw;
                g[i] += x[d] * gu;
                g[n + i] += x[d] * gv;
                g[2 * n + i] += x[d] * gw;
            }
        }
    }
    if (T > lag && (m->right || m->left))
        for (d = 0; d < D; d++) {
            double *H = stat_H + d * K * K;
            const double *puv = pmask + (0 * D + d) * n2, *pwu = pmask + (1 * D + d) * n2;
            const double *pwv = pmask + (2 * D + d) * n2;
            for (i = 0; i < n; i++)
                for (j = 0; j < n; j++) {
                    if (m->right) {   /* U at s_t = i, V at s_{t+lag} = j */
                        const double p1 = puv[i * n + j];
                        H[i * K + n + j] += p1;
                        H[(n + j) * K + i] += p1;
                    }
                    if (m->left) {    /* W at s_{t-lag} = i, U at s_t = j */
                        const double p1 = pwu[i * n + j];
                        H[(2 * n + i) * K + j] += p1;
                        H[j * K + 2 * n + i] += p1;
                    }
                    if (m->right && m->left && T - lag > lag) {   /* W at s_{t-lag}, V at s_{t+lag} */
                        const double p2 = pwv[i * n + j];
                        H[(2 * n + i) * K + n + j] += p2;
                        H[(n + j) * K + 2 * n + i] += p2;
                    }
                }
        }
}

void mf_hmm__structured_layout(arena_t *a, xchain_t *x, const mf_hmm_model *m, ptrdiff_t T,
                              ptrdiff_t hist_len, structured_bufs *b)
{
    mf_hmm__xchain_layout(a, x, m, T);
    b->hbest = (double *)take(a, T, m->n, sizeof(double));
    b->h = (double *)take(a, T, m->n, sizeof(double));
    b->hist = (double *)take(a, hist_len, 1, sizeof(double));
    b->q = (double *)take(a, T, m->n, sizeof(double));
    b->pairs = (double *)take(a, 2 * m->n, m->n, sizeof(double));
    b->pmask = (double *)take(a, 3 * m->D, m->n * m->n, sizeof(double));
}

/* Start k of the structured solver (see mf_hmm.h): potentials in b->h, the ascent's history
 * in b->hist, its value in *F and sweeps in *ns; b->q and gam are scratch (gam: T n).  Returns
 * the ascent's status, or HMM_IMPOSSIBLE for a naive start that has no finite value (the start
 * is then skipped), or the first error. */
static int run_start(int k, const mf_hmm_model *m, ptrdiff_t T, const double *X,
                     ptrdiff_t max_sweeps, double tol, xchain_t *x, structured_bufs *b,
                     double *gam, ptrdiff_t hist_len, double *F, ptrdiff_t *ns)
{
    double lb;
    int status;
    if (k == 0) {
        /* link bound from the first-order posterior */
        status = mf_hmm__link(m, T, X, max_sweeps, tol, NULL, gam, b->hist, hist_len, ns, &lb,
                              b->h);
    } else if (k == 1) {
        /* link bound from the fully factorised solution */
        status = mf_hmm__naive(m, T, X, max_sweeps, tol, b->q, b->hist, hist_len, ns, &lb);
        /* zeros in the transitions can leave the product family without a finite start */
        if (status == HMM_IMPOSSIBLE) return status;
        if (status == MF_OK || status == MF_NOT_CONVERGED)
            status = mf_hmm__link(m, T, X, max_sweeps, tol, b->q, gam, b->hist, hist_len, ns,
                                  &lb, b->h);
    } else {
        memcpy(b->h, x->e, (size_t)(T * m->n) * sizeof(double));   /* first-order posterior */
        status = MF_OK;
    }
    if (status != MF_OK && status != MF_NOT_CONVERGED) return status;
    return mf_hmm__xchain_ascent(x, max_sweeps, tol, b->h, b->hist, hist_len, ns, F);
}

/* One worker's scratch for the parallel starts: its own chain and buffers. */
typedef struct {
    arena_t a;
    xchain_t x;
    structured_bufs b;
    double *gam;
} worker_t;

static void worker_layout(worker_t *w, const mf_hmm_model *m, ptrdiff_t T, ptrdiff_t hist_len)
{
    mf_hmm__structured_layout(&w->a, &w->x, m, T, hist_len, &w->b);
    w->gam = (double *)take(&w->a, T, m->n, sizeof(double));
}

/* The three starts on up to n_threads threads (at most 3), each start in a worker's block and
 * its result (potentials, history, value, sweeps, status) kept apart, so that the start kept
 * -- the highest value, the first on a tie -- and everything reported are the same for any
 * n_threads.  Only the first error (in the starts' order) is returned. */
static int parallel_starts(const mf_hmm_model *m, ptrdiff_t T, const double *X,
                           ptrdiff_t max_sweeps, double tol, ptrdiff_t hist_len, int n_threads,
                           double *h_out[3], double *hist_out[3], double F_out[3],
                           ptrdiff_t ns_out[3], int st_out[3])
{
    worker_t w[3];
    int nw = n_threads < 3 ? n_threads : 3, i, status = MF_OK;
    for (i = 0; i < nw; i++) {
        w[i].a.base = NULL;
        w[i].a.used = 0;
        w[i].a.bad = 0;
        worker_layout(&w[i], m, T, hist_len);
        if ((status = arena_alloc(&w[i].a)) != MF_OK) {
            while (i-- > 0) free(w[i].a.base);
            return status;
        }
        worker_layout(&w[i], m, T, hist_len);
        mf_hmm__xchain_setup(&w[i].x, X);
    }
#if defined(_OPENMP)
#pragma omp parallel for schedule(dynamic, 1) num_threads(nw)
#endif
    for (i = 0; i < 3; i++) {
#if defined(_OPENMP)
        worker_t *me = &w[omp_get_thread_num()];
#else
        worker_t *me = &w[0];
#endif
        st_out[i] = run_start(i, m, T, X, max_sweeps, tol, &me->x, &me->b, me->gam, hist_len,
                              &F_out[i], &ns_out[i]);
        memcpy(h_out[i], me->b.h, (size_t)(T * m->n) * sizeof(double));
        memcpy(hist_out[i], me->b.hist, (size_t)hist_len * sizeof(double));
    }
    for (i = 0; i < nw; i++) free(w[i].a.base);
    return status;
}

static int structured_core(const mf_hmm_model *m, ptrdiff_t T, const double *X,
                           ptrdiff_t max_sweeps, double tol, const double *init, double *gamma,
                           double *xi_sum, double *history, ptrdiff_t hist_len,
                           ptrdiff_t *n_sweeps, double *bound, double *logpot, double *stat_H,
                           double *stat_g, int n_threads)
{
    const ptrdiff_t n = m->n, Tn = T * m->n;
    xchain_t x;
    arena_t a = {NULL, 0, 0}, ka = {NULL, 0, 0};
    structured_bufs b;
    double best = -INFINITY, F, *hk[3], *histk[3], Fk[3];
    ptrdiff_t k, nbest = 0, nsk[3];
    int status, start, conv_best = MF_OK, stk[3];

    mf_hmm__structured_layout(&a, &x, m, T, hist_len, &b);
    if ((status = arena_alloc(&a)) != MF_OK) return status;
    mf_hmm__structured_layout(&a, &x, m, T, hist_len, &b);
    mf_hmm__xchain_setup(&x, X);
    if (init || x.kmax == 0 || T <= m->lag) {
        /* a warm start; or no couplings, where the first-order posterior is exact */
        memcpy(b.hbest, init ? init : x.e, (size_t)Tn * sizeof(double));
        status = mf_hmm__xchain_ascent(&x, max_sweeps, tol, b.hbest, history, hist_len, &nbest, &best);
        if (status != MF_OK && status != MF_NOT_CONVERGED) goto done;
        conv_best = status;
    } else {
        /* the three starts and their ascents: one after another in this block, or on
         * several threads in blocks of their own; each start's result kept apart */
        for (start = 0; start < 3; start++) {
            hk[start] = (double *)take(&ka, T, n, sizeof(double));
            histk[start] = (double *)take(&ka, hist_len, 1, sizeof(double));
        }
        if ((status = arena_alloc(&ka)) != MF_OK) goto done;
        for (start = 0; start < 3; start++) {
            hk[start] = (double *)take(&ka, T, n, sizeof(double));
            histk[start] = (double *)take(&ka, hist_len, 1, sizeof(double));
        }
        if (n_threads > 1) {
            status = parallel_starts(m, T, X, max_sweeps, tol, hist_len, n_threads, hk, histk,
                                     Fk, nsk, stk);
            if (status != MF_OK) goto done;
        } else {
            for (start = 0; start < 3; start++) {
                stk[start] = run_start(start, m, T, X, max_sweeps, tol, &x, &b, gamma, hist_len,
                                       &Fk[start], &nsk[start]);
                memcpy(hk[start], b.h, (size_t)Tn * sizeof(double));
                memcpy(histk[start], b.hist, (size_t)hist_len * sizeof(double));
                if (stk[start] != MF_OK && stk[start] != MF_NOT_CONVERGED
                    && !(start == 1 && stk[start] == HMM_IMPOSSIBLE))
                    break;   /* an error: the later starts are not run */
            }
        }
        for (start = 0; start < 3; start++) {
            status = stk[start];
            if (start == 1 && status == HMM_IMPOSSIBLE) continue;   /* that start is skipped */
            if (status != MF_OK && status != MF_NOT_CONVERGED) goto done;
            if (Fk[start] > best) {
                best = Fk[start];
                nbest = nsk[start];
                conv_best = status;
                memcpy(b.hbest, hk[start], (size_t)Tn * sizeof(double));
                for (k = 0; k <= nsk[start] && k < hist_len; k++) history[k] = histk[start][k];
            }
        }
    }
    /* the kept chain's marginals and statistics */
    status = mf_hmm__xchain_objective(&x, b.hbest, xi_sum, b.pairs, b.pairs + n * n,
                                      stat_H && stat_g ? b.pmask : NULL, &F);
    if (status) goto done;
    memcpy(gamma, x.gam, (size_t)Tn * sizeof(double));
    if (logpot) memcpy(logpot, b.hbest, (size_t)Tn * sizeof(double));
    if (stat_H && stat_g) mstep_stats(m, T, X, x.gam, b.pmask, stat_H, stat_g);
    /* the reported value: the kept chain's F evaluated without cancellation (mf_hmm__emission) */
    status = mf_hmm__xchain_careful(&x, b.hbest, &best);
    if (status) goto done;
    *n_sweeps = nbest;
    *bound = best;
    status = conv_best;
done:
    free(a.base);
    free(ka.base);
    return status;
}

int mf_hmm_structured_threads(const mf_hmm_model *m, ptrdiff_t T, const double *X,
                              ptrdiff_t max_sweeps, double tol, const double *init,
                              double *gamma, double *xi_sum, double *history, ptrdiff_t hist_len,
                              ptrdiff_t *n_sweeps, double *bound, double *logpot, double *stat_H,
                              double *stat_g, int n_threads)
{
    mf_hmm_model e;
    int status = mf_hmm__prepare(m, T, &e);
    if (status) return status;
    if ((status = check_sweeps(max_sweeps, tol, history, hist_len)) != MF_OK) return status;
    if (!X || !gamma || !n_sweeps || !bound) return MF_EBADARG;
    if (n_threads < 1) n_threads = 1;
    return mf_hmm__publish(structured_core(&e, T, X, max_sweeps, tol, init, gamma, xi_sum, history,
                                           hist_len, n_sweeps, bound, logpot, stat_H, stat_g,
                                           n_threads),
                           bound);
}

int mf_hmm_structured(const mf_hmm_model *m, ptrdiff_t T, const double *X, ptrdiff_t max_sweeps,
                      double tol, const double *init, double *gamma, double *xi_sum,
                      double *history, ptrdiff_t hist_len, ptrdiff_t *n_sweeps, double *bound,
                      double *logpot, double *stat_H, double *stat_g)
{
    return mf_hmm_structured_threads(m, T, X, max_sweeps, tol, init, gamma, xi_sum, history,
                                     hist_len, n_sweeps, bound, logpot, stat_H, stat_g, 1);
}
