/* Context-HMM kernels: structured mean field -- the chain with the model's transitions
 * and free potentials, its exact objective maximised by coordinate ascent from several starts
 * -- and the M-step statistics of that objective in the means.  See mf_hmm.h. */
#include "mf_hmm_internal.h"

#define PRE_TOL MF_HMM_PRE_TOL
#define SCREEN_TOL MF_HMM_SCREEN_TOL
#define N_STARTS MF_HMM_N_STARTS
/* How many of the screened starts go on to the caller's tolerance.  Two finalists (run on
 * two threads side by side) changed no bound over the 162 instances of docs/derivations/context_hmm.rst and
 * cost a quarter more time on one thread. */
#define FINALISTS 1
/* The status of a start the caller left out (never usable, never an error). */
#define START_OFF (-1)

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

/* Start k of the structured solver (see mf_hmm.h), its ascent run to tolerance tol (the
 * screen's), the link / naive solves before it to the looser of tol and PRE_TOL:
 * potentials in b->h, the ascent's history in b->hist, its value in *F and sweeps in *ns;
 * b->q and gam are scratch (gam: T n).  Returns the ascent's status, or HMM_IMPOSSIBLE for a
 * naive start that has no finite value (the start is then skipped), or the first error. */
static int run_start(int k, const mf_hmm_model *m, ptrdiff_t T, const double *X,
                     ptrdiff_t max_sweeps, double tol, xchain_t *x, structured_bufs *b,
                     double *gam, ptrdiff_t hist_len, double *F, ptrdiff_t *ns)
{
    const double ptol = tol > PRE_TOL ? tol : PRE_TOL;
    double lb;
    int status;
    if (k == 0) {
        /* link bound from the first-order posterior */
        status = mf_hmm__link(m, T, X, max_sweeps, ptol, NULL, gam, b->hist, hist_len, ns, &lb,
                              b->h);
    } else if (k == 1) {
        /* link bound from the fully factorised solution */
        status = mf_hmm__naive(m, T, X, max_sweeps, ptol, b->q, b->hist, hist_len, ns, &lb);
        /* zeros in the transitions can leave the product family without a finite start */
        if (status == HMM_IMPOSSIBLE) return status;
        if (status == MF_OK || status == MF_NOT_CONVERGED)
            status = mf_hmm__link(m, T, X, max_sweeps, ptol, b->q, gam, b->hist, hist_len, ns,
                                  &lb, b->h);
    } else if (k == 2) {
        memcpy(b->h, x->e, (size_t)(T * m->n) * sizeof(double));   /* first-order posterior */
        status = MF_OK;
    } else {
        mf_hmm__own_terms(m, T, X, b->h);   /* ... of the model without its context means */
        status = MF_OK;
    }
    if (status != MF_OK && status != MF_NOT_CONVERGED) return status;
    return mf_hmm__xchain_ascent(x, max_sweeps, tol, b->h, b->hist, hist_len, ns, F);
}

/* One thread's scratch: a chain and its buffers (worker 0: the solve's main ones). */
typedef struct {
    xchain_t own_x;
    structured_bufs own_b;
    xchain_t *x;
    structured_bufs *b;
    double *gam;
} worker_t;

static void worker_layout(worker_t *w, arena_t *a, const mf_hmm_model *m, ptrdiff_t T,
                          ptrdiff_t hist_len)
{
    mf_hmm__structured_layout(a, &w->own_x, m, T, hist_len, &w->own_b);
    w->gam = (double *)take(a, T, m->n, sizeof(double));
    w->x = &w->own_x;
    w->b = &w->own_b;
}

/* The starts' results, one entry per start: potentials, history, value, sweeps, status. */
typedef struct {
    const mf_hmm_model *m;
    ptrdiff_t T, max_sweeps, hist_len;
    const double *X;
    double tol, stol;
    double *h[N_STARTS], *hist[N_STARTS], F[N_STARTS];
    ptrdiff_t ns[N_STARTS];
    int st[N_STARTS], fin[FINALISTS];
    int sel[N_STARTS];   /* the starts run, in increasing order: phase 0's job i is sel[i] */
} starts_t;

/* The solve's one block (one allocation, so that a solve's scratch is reused from the heap
 * by the next rather than mapped afresh): the main chain and its buffers; with the starts,
 * their results and a chain for each worker 1 .. nw - 1 (worker 0 works in the main chain). */
static void core_layout(arena_t *a, xchain_t *x, structured_bufs *b, const mf_hmm_model *m,
                        ptrdiff_t T, ptrdiff_t hist_len, int starts, starts_t *S, worker_t *w,
                        int nw)
{
    int k;
    mf_hmm__structured_layout(a, x, m, T, hist_len, b);
    if (!starts) return;
    for (k = 0; k < N_STARTS; k++) {
        S->h[k] = (double *)take(a, T, m->n, sizeof(double));
        S->hist[k] = (double *)take(a, hist_len, 1, sizeof(double));
    }
    for (k = 1; k < nw; k++) worker_layout(&w[k], a, m, T, hist_len);
}

/* Job i of a phase on worker me: phase 0 runs start sel[i] to the screen's tolerance, phase 1
 * takes finalist i on to the caller's, within what is left of the sweep budget. */
static void run_job(starts_t *S, int phase, int i, worker_t *me)
{
    const size_t Tn = (size_t)(S->T * S->m->n);
    if (phase == 0) {
        const int k = S->sel[i];
        S->st[k] = run_start(k, S->m, S->T, S->X, S->max_sweeps, S->stol, me->x, me->b, me->gam,
                             S->hist_len, &S->F[k], &S->ns[k]);
        memcpy(S->h[k], me->b->h, Tn * sizeof(double));
        memcpy(S->hist[k], me->b->hist, (size_t)S->hist_len * sizeof(double));
    } else {
        const int k = S->fin[i];
        ptrdiff_t more = 0, j;
        double F;
        if (S->st[k] != MF_OK) return;   /* out of sweeps already: it competes as it is */
        if (S->ns[k] >= S->max_sweeps) {
            S->st[k] = MF_NOT_CONVERGED;
            return;
        }
        S->st[k] = mf_hmm__xchain_ascent(me->x, S->max_sweeps - S->ns[k], S->tol, S->h[k],
                                         me->b->hist, S->hist_len, &more, &F);
        for (j = 1; j <= more && S->ns[k] + j < S->hist_len; j++)
            S->hist[k][S->ns[k] + j] = me->b->hist[j];
        S->ns[k] += more;
        S->F[k] = F;
    }
}

/* The jobs of a phase on nw workers (one thread each); which worker runs a job changes
 * nothing in its result, so everything reported is the same for any number of threads. */
static void run_phase(starts_t *S, int phase, int n_jobs, worker_t *w, int nw)
{
    int i;
#if defined(_OPENMP)
#pragma omp parallel for schedule(dynamic, 1) num_threads(nw) if (nw > 1)
#endif
    for (i = 0; i < n_jobs; i++) {
#if defined(_OPENMP)
        worker_t *me = &w[omp_get_thread_num()];
#else
        worker_t *me = &w[0];
#endif
        run_job(S, phase, i, me);
    }
}

/* A start's status that lets it compete: converged or out of sweeps (start 1 may also have
 * been skipped: HMM_IMPOSSIBLE, never an error). */
static int usable(int st) { return st == MF_OK || st == MF_NOT_CONVERGED; }

/* The usable start with the highest value not yet in fin[0 .. nf), the first on a tie; -1 when
 * none is left. */
static int next_best(const starts_t *S, int nf)
{
    int k, j, sel = -1;
    for (k = 0; k < N_STARTS; k++) {
        int taken = 0;
        if (!usable(S->st[k])) continue;
        for (j = 0; j < nf; j++) taken |= S->fin[j] == k;
        if (taken) continue;
        if (sel < 0 || S->F[k] > S->F[sel] || (isnan(S->F[sel]) && !isnan(S->F[k]))) sel = k;
    }
    return sel;
}

static int structured_core(const mf_hmm_model *m, ptrdiff_t T, const double *X,
                           ptrdiff_t max_sweeps, double tol, const double *init, double *gamma,
                           double *xi_sum, double *history, ptrdiff_t hist_len,
                           ptrdiff_t *n_sweeps, double *bound, double *logpot, double *stat_H,
                           double *stat_g, int n_threads, unsigned start_mask)
{
    const ptrdiff_t n = m->n, Tn = T * m->n;
    /* several starts unless warm-started, or without couplings (the first-order posterior
     * is then exact) */
    const int starts = !init && (m->right || m->left) && T > m->lag;
    int nsel = 0, sel[N_STARTS];
    for (int j = 0; j < N_STARTS; j++)
        if (start_mask & (1u << j)) sel[nsel++] = j;
    const int nw = starts && n_threads > 1 ? (n_threads < nsel ? n_threads : nsel) : 1;
    xchain_t x;
    arena_t a = {NULL, 0, 0};
    structured_bufs b;
    double best = -INFINITY, F;
    ptrdiff_t k, nbest = 0;
    int status, conv_best = MF_OK, nf, kept;
    worker_t w[N_STARTS];
    starts_t S;

    core_layout(&a, &x, &b, m, T, hist_len, starts, &S, w, nw);
    if ((status = arena_alloc(&a)) != MF_OK) return status;
    core_layout(&a, &x, &b, m, T, hist_len, starts, &S, w, nw);
    mf_hmm__xchain_setup(&x, X);
    if (!starts) {
        memcpy(b.hbest, init ? init : x.e, (size_t)Tn * sizeof(double));
        status = mf_hmm__xchain_ascent(&x, max_sweeps, tol, b.hbest, history, hist_len, &nbest, &best);
        if (status != MF_OK && status != MF_NOT_CONVERGED) goto done;
        conv_best = status;
    } else {
        S.m = m;
        S.T = T;
        S.X = X;
        S.max_sweeps = max_sweeps;
        S.hist_len = hist_len;
        S.tol = tol;
        /* one start alone is not screened: its ascent goes straight to the caller's tol */
        S.stol = nsel > 1 && tol < SCREEN_TOL ? SCREEN_TOL : tol;
        for (k = 0; k < N_STARTS; k++) S.st[k] = START_OFF;
        for (k = 0; k < nsel; k++) S.sel[k] = sel[k];
        w[0].x = &x;   /* worker 0 (the calling thread) works in the main chain */
        w[0].b = &b;
        w[0].gam = gamma;
        for (k = 1; k < nw; k++) mf_hmm__xchain_setup(w[k].x, X);
        /* every start's ascent to the screen's tolerance */
        run_phase(&S, 0, nsel, w, nw);
        for (k = 0; k < nsel; k++)
            if (!usable(S.st[sel[k]]) && !(sel[k] == 1 && S.st[sel[k]] == HMM_IMPOSSIBLE)) {
                status = S.st[sel[k]];   /* the first error, in the starts' order */
                goto done;
            }
        /* the naive start alone, and skipped (no finite naive solution): the link start from
         * the first-order posterior, which is never skipped, stands in for it */
        if (next_best(&S, 0) < 0) {
            S.sel[0] = 0;
            run_phase(&S, 0, 1, w, 1);
            if (!usable(S.st[0])) {
                status = S.st[0];
                goto done;
            }
        }
        /* the best FINALISTS go on to the caller's tolerance (if it is tighter and they
         * converged at the screen's); nf >= 1: a start that is run is usable or skipped, and
         * start 0 is never skipped */
        for (nf = 0; nf < FINALISTS && (k = next_best(&S, nf)) >= 0; nf++) S.fin[nf] = (int)k;
        if (S.stol > tol) {
            run_phase(&S, 1, nf, w, nw);
            for (k = 0; k < nf; k++)
                if (!usable(S.st[S.fin[k]])) {
                    status = S.st[S.fin[k]];
                    goto done;
                }
        }
        /* the finalist with the highest value kept, the better screened one on a tie */
        kept = S.fin[0];
        for (k = 1; k < nf; k++)
            if (S.F[S.fin[k]] > S.F[kept] || (isnan(S.F[kept]) && !isnan(S.F[S.fin[k]])))
                kept = S.fin[k];
        best = S.F[kept];
        nbest = S.ns[kept];
        conv_best = S.st[kept];
        memcpy(b.hbest, S.h[kept], (size_t)Tn * sizeof(double));
        for (k = 0; k <= nbest && k < hist_len; k++) history[k] = S.hist[kept][k];
    }
    /* the kept chain's marginals and statistics */
    if (stat_H && stat_g)   /* the M-step's pairwise marginals: the full-matrix path */
        status = mf_hmm__xchain_objective(&x, b.hbest, xi_sum, b.pairs, b.pairs + n * n, b.pmask,
                                          &F);
    else
        status = mf_hmm__xchain_objective(&x, b.hbest, xi_sum, NULL, NULL, NULL, &F);
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
    return status;
}

int mf_hmm_structured_starts(const mf_hmm_model *m, ptrdiff_t T, const double *X,
                             ptrdiff_t max_sweeps, double tol, const double *init,
                             double *gamma, double *xi_sum, double *history, ptrdiff_t hist_len,
                             ptrdiff_t *n_sweeps, double *bound, double *logpot, double *stat_H,
                             double *stat_g, int n_threads, unsigned starts)
{
    mf_hmm_model e;
    int status = mf_hmm__prepare(m, T, &e);
    if (status) return status;
    if ((status = check_sweeps(max_sweeps, tol, history, hist_len)) != MF_OK) return status;
    if (!X || !gamma || !n_sweeps || !bound) return MF_EBADARG;
    if (starts == 0 || (starts & ~MFENGINE_HMM_ALL_STARTS)) return MF_EBADARG;
    if (n_threads < 1) n_threads = 1;
    return mf_hmm__publish(structured_core(&e, T, X, max_sweeps, tol, init, gamma, xi_sum, history,
                                           hist_len, n_sweeps, bound, logpot, stat_H, stat_g,
                                           n_threads, starts),
                           bound);
}

int mf_hmm_structured_threads(const mf_hmm_model *m, ptrdiff_t T, const double *X,
                              ptrdiff_t max_sweeps, double tol, const double *init,
                              double *gamma, double *xi_sum, double *history, ptrdiff_t hist_len,
                              ptrdiff_t *n_sweeps, double *bound, double *logpot, double *stat_H,
                              double *stat_g, int n_threads)
{
    return mf_hmm_structured_starts(m, T, X, max_sweeps, tol, init, gamma, xi_sum, history,
                                    hist_len, n_sweeps, bound, logpot, stat_H, stat_g, n_threads,
                                    MFENGINE_HMM_ALL_STARTS);
}

int mf_hmm_structured(const mf_hmm_model *m, ptrdiff_t T, const double *X, ptrdiff_t max_sweeps,
                      double tol, const double *init, double *gamma, double *xi_sum,
                      double *history, ptrdiff_t hist_len, ptrdiff_t *n_sweeps, double *bound,
                      double *logpot, double *stat_H, double *stat_g)
{
    return mf_hmm_structured_threads(m, T, X, max_sweeps, tol, init, gamma, xi_sum, history,
                                     hist_len, n_sweeps, bound, logpot, stat_H, stat_g, 1);
}
