/* Context-sensitive HMMs: forward-backward, structured and naive mean field, exact likelihood
 * over the augmented state.  See mf_hmm.h for the model and docs/context_hmm.md for the
 * derivation of the updates. */
#include "mf_hmm.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define HALF_LOG_2PI 0.91893853320467274178

/* Internal outcomes, never returned by an exported function: a sequence of probability zero,
 * a NaN or infinite value in the arithmetic.  The exported functions write -inf / NaN instead. */
#define HMM_IMPOSSIBLE 100
#define HMM_NONFINITE 101

static double sq(double x) { return x * x; }

/* The value an exported function writes for an internal outcome, and the status it returns. */
static int publish(int status, double *value)
{
    if (status == HMM_IMPOSSIBLE) {
        *value = -INFINITY;
        return MF_OK;
    }
    if (status == HMM_NONFINITE) {
        *value = NAN;
        return MF_OK;
    }
    return status;
}

/* ----------------------------------------------------------------------------------------- */
/* Sizes: every scratch block is laid out by a function that runs twice, once to measure (base
 * NULL) with checked arithmetic, once to carve the block it measured.                           */

#define ALIGN 16

typedef struct {
    char *base;       /* NULL while measuring */
    ptrdiff_t used;   /* bytes laid out so far */
    int bad;          /* a size overflowed */
} arena_t;

/* a * b into *out when both are >= 0 and the product fits a ptrdiff_t. */
static int mul_ok(ptrdiff_t a, ptrdiff_t b, ptrdiff_t *out)
{
    if (a < 0 || b < 0) return 0;
    if (a != 0 && b > PTRDIFF_MAX / a) return 0;
    *out = a * b;
    return 1;
}

/* Room for c1 * c2 items of `elem` bytes. */
static void *take(arena_t *a, ptrdiff_t c1, ptrdiff_t c2, ptrdiff_t elem)
{
    ptrdiff_t count, bytes;
    void *p;
    if (a->bad || !mul_ok(c1, c2, &count) || !mul_ok(count, elem, &bytes)
        || bytes > PTRDIFF_MAX - ALIGN || a->used > PTRDIFF_MAX - ALIGN - bytes
        || (uint64_t)(a->used + bytes + ALIGN) > (uint64_t)SIZE_MAX) {
        a->bad = 1;
        return NULL;
    }
    bytes = (bytes + ALIGN - 1) / ALIGN * ALIGN;
    p = a->base ? (void *)(a->base + a->used) : NULL;
    a->used += bytes;
    return p;
}

static int arena_alloc(arena_t *a)
{
    if (a->bad) return MF_EOVERFLOW;
    a->base = (char *)malloc(a->used > 0 ? (size_t)a->used : 1);
    if (!a->base) return MF_ENOMEM;
    a->used = 0;
    return MF_OK;
}

/* Checks m and T, and gives the model as the kernels see it: when lag >= T no output has a
 * context state inside the sequence, so the contexts are switched off and lag set to T (a
 * context "at distance T" touches nothing); t + lag is then never formed with a lag >= T.
 * Also checks that T * n, T * D and n * n * D fit with room to spare, so that the index
 * arithmetic of the kernels (at most a few times these) cannot overflow. */
static int prepare(const mf_hmm_model *m, ptrdiff_t T, mf_hmm_model *e)
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

static int check_sweeps(ptrdiff_t max_sweeps, double tol, const double *history,
                        ptrdiff_t hist_len)
{
    if (max_sweeps < 0 || !(tol >= 0.0) || !history || hist_len < 1) return MF_EBADARG;
    return MF_OK;
}

static void put_history(double *history, ptrdiff_t hist_len, ptrdiff_t k, double v)
{
    if (k >= 0 && k < hist_len) history[k] = v;
}

/* ----------------------------------------------------------------------------------------- */
/* Forward-backward                                                                           */

ptrdiff_t mf_hmm_fb_work_size(ptrdiff_t T, ptrdiff_t n)
{
    ptrdiff_t tn, s;
    if (T < 1 || n < 1 || !mul_ok(T, n, &tn) || !mul_ok(n, 2, &s)) return -1;
    if (tn > PTRDIFF_MAX / 8 - T - s) return -1;
    return tn + T + s;
}

static int fb_core(ptrdiff_t T, ptrdiff_t n, const double *startprob, const double *transmat,
                   const double *logpot, double *gamma, double *xi_sum, double *work,
                   double *logz)
{
    double *phi = work;            /* (T, n) exp(logpot - max) */
    double *c = work + T * n;      /* (T) scale factors */
    double *beta = c + T;          /* (n) beta_t */
    double *v = beta + n;          /* (n) scratch */
    double lz = 0.0;
    ptrdiff_t t, i, j;

    /* forward, alpha kept (normalised) in gamma.  Each step is scaled by the largest potential
     * among the states the chain can be in (predicted mass > 0), so that a reachable state far
     * below an unreachable one cannot underflow the whole step to zero. */
    for (t = 0; t < T; t++) {
        const double *lp = logpot + t * n;
        double *an = gamma + t * n, *ph = phi + t * n;
        double mx = -INFINITY, s = 0.0;
        for (i = 0; i < n; i++)
            if (isnan(lp[i]) || lp[i] == INFINITY) return HMM_NONFINITE;
        if (t == 0) {
            for (j = 0; j < n; j++) an[j] = startprob[j];
        } else {
            const double *ap = gamma + (t - 1) * n;
            for (j = 0; j < n; j++) an[j] = 0.0;
            for (i = 0; i < n; i++) {
                const double ai = ap[i];
                const double *row = transmat + i * n;
                if (ai == 0.0) continue;
                for (j = 0; j < n; j++) an[j] += ai * row[j];
            }
        }
        for (j = 0; j < n; j++)
            if (an[j] > 0.0 && lp[j] > mx) mx = lp[j];
        if (mx == -INFINITY) return HMM_IMPOSSIBLE;
        for (j = 0; j < n; j++) {
            const double dl = lp[j] - mx;
            ph[j] = exp(dl < 0.0 ? dl : 0.0);   /* > 0 only off the chain's support */
            an[j] *= ph[j];
            s += an[j];
        }
        if (!(s > 0.0)) return HMM_NONFINITE;
        lz += mx;
        c[t] = s;
        for (j = 0; j < n; j++) an[j] /= s;
    }
    for (t = 0; t < T; t++) lz += log(c[t]);
    if (!isfinite(lz)) return HMM_NONFINITE;
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
    return MF_OK;
}

int mf_hmm_forward_backward(ptrdiff_t T, ptrdiff_t n, const double *startprob,
                            const double *transmat, const double *logpot, double *gamma,
                            double *xi_sum, double *work, double *logz)
{
    if (mf_hmm_fb_work_size(T, n) < 0) return T < 1 || n < 1 ? MF_EBADARG : MF_EOVERFLOW;
    if (!startprob || !transmat || !logpot || !gamma || !work || !logz) return MF_EBADARG;
    return publish(fb_core(T, n, startprob, transmat, logpot, gamma, xi_sum, work, logz), logz);
}

int mf_hmm_viterbi(ptrdiff_t T, ptrdiff_t n, const double *startprob, const double *transmat,
                   const double *logpot, ptrdiff_t *path, double *logq)
{
    arena_t a = {NULL, 0, 0};
    double *delta, *dnew, *logA;
    ptrdiff_t *back, t, i, j;
    int status;
    if (T < 1 || n < 1 || !startprob || !transmat || !logpot || !path || !logq)
        return MF_EBADARG;
    for (int pass = 0; pass < 2; pass++) {
        delta = (double *)take(&a, n, 1, sizeof(double));
        dnew = (double *)take(&a, n, 1, sizeof(double));
        logA = (double *)take(&a, n, n, sizeof(double));
        back = (ptrdiff_t *)take(&a, T, n, sizeof(ptrdiff_t));
        if (pass == 0 && (status = arena_alloc(&a)) != MF_OK) return status;
    }
    for (i = 0; i < n * n; i++) logA[i] = transmat[i] > 0.0 ? log(transmat[i]) : -INFINITY;
    for (i = 0; i < n; i++)
        delta[i] = (startprob[i] > 0.0 ? log(startprob[i]) : -INFINITY) + logpot[i];
    for (t = 1; t < T; t++) {
        for (j = 0; j < n; j++) {
            double best = -INFINITY;
            ptrdiff_t arg = 0;
            for (i = 0; i < n; i++) {
                const double v = delta[i] + logA[i * n + j];
                if (v > best) {
                    best = v;
                    arg = i;
                }
            }
            back[t * n + j] = arg;
            dnew[j] = best + logpot[t * n + j];
        }
        memcpy(delta, dnew, (size_t)n * sizeof(double));
    }
    {
        double best = -INFINITY;
        ptrdiff_t arg = 0;
        for (i = 0; i < n; i++)
            if (delta[i] > best) {
                best = delta[i];
                arg = i;
            }
        path[T - 1] = arg;
        for (t = T - 1; t >= 1; t--) path[t - 1] = back[t * n + path[t]];
        *logq = isnan(best) ? NAN : best;
    }
    free(a.base);
    return MF_OK;
}

/* ----------------------------------------------------------------------------------------- */
/* Shared pieces: single-site emission terms, the list of long-range couplings                 */

static const double *table(const mf_hmm_model *m, int k)
{
    return k == 0 ? m->U : (k == 1 ? m->V : m->W);
}

/* e[t, i]: every term of ln p(x | s) that involves s_t alone; returns the constant part
 * sum_t (-D/2 ln 2 pi - |x_t|^2 / 2).  m has been through prepare (lag < T or no context). */
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
            if (m->left && lag < T - t) {      /* s_t is the left context of x_{t+lag} */
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

/* Couplings -a(s_sa) . b(s_sb) of ln p(x | s): one per output and pair of its mean's terms;
 * at most 3 T of them. */
static ptrdiff_t build_pairs(const mf_hmm_model *m, ptrdiff_t T, pair_t *p)
{
    const ptrdiff_t lag = m->lag;
    ptrdiff_t t, np = 0;
    for (t = 0; t < T; t++) {
        const int r = m->right && lag < T - t, l = m->left && t >= lag;
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

typedef struct {
    double *e, *h, *work, *lam2, *abar, *bbar;
    pair_t *pairs;
    int *cc;
} link_bufs;

static void link_layout(arena_t *a, const mf_hmm_model *m, ptrdiff_t T, link_bufs *b)
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
}

/* The link iteration on a prepared model (internal statuses). */
static int link_core(const mf_hmm_model *m, ptrdiff_t T, const double *X, ptrdiff_t max_sweeps,
                     double tol, const double *init, double *gamma, double *history,
                     ptrdiff_t hist_len, ptrdiff_t *n_sweeps, double *bound, double *logpot)
{
    const ptrdiff_t n = m->n, D = m->D;
    arena_t a = {NULL, 0, 0};
    link_bufs b;
    int status, converged = 1;
    int *cc;
    ptrdiff_t it, np, p, t, i, d;
    double cst, logz = 0.0, B = -INFINITY, prev = -INFINITY;
    double *e, *h;

    link_layout(&a, m, T, &b);
    if ((status = arena_alloc(&a)) != MF_OK) return status;
    link_layout(&a, m, T, &b);
    cc = b.cc;
    e = b.e;
    h = b.h;
    const_columns(m, cc);
    cst = site_terms(m, T, X, e);
    np = build_pairs(m, T, b.pairs);

    memcpy(h, e, (size_t)(T * n) * sizeof(double));
    if (init) memcpy(gamma, init, (size_t)(T * n) * sizeof(double));
    else {
        status = fb_core(T, n, m->startprob, m->transmat, h, gamma, NULL, b.work, &logz);
        if (status) goto done;
    }

    for (it = 0;; it++) {
        /* Links: for the current Q, the best lambda for every coupling, and the bound. */
        double eh = 0.0;
        for (t = 0; t < T * n; t++) eh += gamma[t] * (e[t] - h[t]);
        B = logz + eh + cst;
        for (p = 0; p < np; p++) {
            const pair_t *pp = b.pairs + p;
            const double *A = table(m, pp->ta), *Bt = table(m, pp->tb);
            const double *ga = gamma + pp->sa * n, *gb = gamma + pp->sb * n;
            for (d = 0; d < D; d++) {
                const double av = dot_gamma(ga, A, n, D, d), bv = dot_gamma(gb, Bt, n, D, d);
                double l2 = -1.0; /* < 0: exact factorised term (one end is not random) */
                b.abar[p * D + d] = av;
                b.bbar[p * D + d] = bv;
                B -= av * bv;
                if (!cc[pp->ta * D + d] && !cc[pp->tb * D + d]) {
                    const double va = var_gamma(ga, A, n, D, d, av);
                    const double vb = var_gamma(gb, Bt, n, D, d, bv);
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
        status = fb_core(T, n, m->startprob, m->transmat, h, gamma, NULL, b.work, &logz);
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
    int status = prepare(m, T, &e);
    if (status) return status;
    if ((status = check_sweeps(max_sweeps, tol, history, hist_len)) != MF_OK) return status;
    if (!X || !gamma || !n_sweeps || !bound) return MF_EBADARG;
    return publish(link_core(&e, T, X, max_sweeps, tol, init, gamma, history, hist_len, n_sweeps,
                             bound, logpot), bound);
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

typedef struct {
    double *e, *work, *means, *pot, *cpl;
    pair_t *pairs;
} naive_bufs;

static void naive_layout(arena_t *a, const mf_hmm_model *m, ptrdiff_t T, naive_bufs *b)
{
    const ptrdiff_t n = m->n, D = m->D;
    b->e = (double *)take(a, T, n, sizeof(double));
    b->work = (double *)take(a, mf_hmm_fb_work_size(T, n), 1, sizeof(double));
    b->means = (double *)take(a, 3 * T, D, sizeof(double));
    b->pot = (double *)take(a, n, 1, sizeof(double));
    b->cpl = (double *)take(a, 3, D, sizeof(double));
    b->pairs = (pair_t *)take(a, 3 * T + 1, 1, sizeof(pair_t));
}

static int naive_core(const mf_hmm_model *m, ptrdiff_t T, const double *X, ptrdiff_t max_sweeps,
                      double tol, double *q, double *history, ptrdiff_t hist_len,
                      ptrdiff_t *n_sweeps, double *bound)
{
    const ptrdiff_t n = m->n, D = m->D, lag = m->lag;
    arena_t a = {NULL, 0, 0};
    naive_bufs b;
    int status, converged = 1;
    ptrdiff_t it, np, t, i, j, d, k;
    double cst, logz, B = -INFINITY, prev = -INFINITY;
    double *e, *means, *pot, *cpl;

    naive_layout(&a, m, T, &b);
    if ((status = arena_alloc(&a)) != MF_OK) return status;
    naive_layout(&a, m, T, &b);
    e = b.e;
    means = b.means;
    pot = b.pot;
    cpl = b.cpl;
    memset(means, 0, (size_t)(3 * T * D) * sizeof(double));
    cst = site_terms(m, T, X, e);
    np = build_pairs(m, T, b.pairs);
    status = fb_core(T, n, m->startprob, m->transmat, e, q, NULL, b.work, &logz);
    if (status) goto done;
    for (t = 0; t < T; t++) naive_means(m, q, t, means, T);

    for (it = 0;; it++) {
        B = naive_bound(m, T, q, e, cst, b.pairs, np, means);
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
            if (m->right && lag < T - t)
                for (d = 0; d < D; d++) cpl[d] += mV[(t + lag) * D + d];
            if (m->left && t >= lag)
                for (d = 0; d < D; d++) cpl[d] += mW[(t - lag) * D + d];
            if (m->right && t >= lag) {
                for (d = 0; d < D; d++) cpl[D + d] += mU[(t - lag) * D + d];
                if (m->left && t - lag >= lag)
                    for (d = 0; d < D; d++) cpl[D + d] += mW[(t - 2 * lag) * D + d];
            }
            if (m->left && lag < T - t) {
                for (d = 0; d < D; d++) cpl[2 * D + d] += mU[(t + lag) * D + d];
                if (m->right && lag < T - t - lag)
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
    int status = prepare(m, T, &e);
    if (status) return status;
    if ((status = check_sweeps(max_sweeps, tol, history, hist_len)) != MF_OK) return status;
    if (!X || !q || !n_sweeps || !bound) return MF_EBADARG;
    return publish(naive_core(&e, T, X, max_sweeps, tol, q, history, hist_len, n_sweeps, bound),
                   bound);
}

/* ----------------------------------------------------------------------------------------- */
/* Exact likelihood over the augmented state                                                  */

/* Window width on a prepared model: 1 + lag per context, at most T. */
static ptrdiff_t exact_width(const mf_hmm_model *m, ptrdiff_t T)
{
    const ptrdiff_t k = (m->right ? 1 : 0) + (m->left ? 1 : 0);
    if (k == 0) return 1;
    if (m->lag >= (T - 1) / k + 1) return T;   /* 1 + k lag >= T, without forming k lag */
    return 1 + k * m->lag;
}

static ptrdiff_t exact_states_of(const mf_hmm_model *e, ptrdiff_t T)
{
    ptrdiff_t w = exact_width(e, T), N = 1, k;
    for (k = 0; k < w; k++) {
        if (N > PTRDIFF_MAX / e->n) return -1;
        N *= e->n;
    }
    return N;
}

ptrdiff_t mf_hmm_exact_states(const mf_hmm_model *m, ptrdiff_t T)
{
    mf_hmm_model e;
    if (!m || T < 1 || m->n < 1 || m->lag < 1) return -1;
    e = *m;
    if (m->lag >= T) e.right = e.left = 0;
    return exact_states_of(&e, T);
}

typedef struct {
    double *alpha, *anew, *le, *mean;
    ptrdiff_t *start, *fill, *outs, *kt, *pw, *dig;
} exact_bufs;

static void exact_layout(arena_t *a, const mf_hmm_model *m, ptrdiff_t T, ptrdiff_t N,
                         ptrdiff_t w, exact_bufs *b)
{
    const ptrdiff_t nwin = T - w + 1;
    b->alpha = (double *)take(a, N, 1, sizeof(double));
    b->anew = (double *)take(a, N, 1, sizeof(double));
    b->le = (double *)take(a, N, 1, sizeof(double));
    b->mean = (double *)take(a, m->D, 1, sizeof(double));
    b->start = (ptrdiff_t *)take(a, nwin + 1, 1, sizeof(ptrdiff_t));
    b->fill = (ptrdiff_t *)take(a, nwin + 1, 1, sizeof(ptrdiff_t));
    b->outs = (ptrdiff_t *)take(a, T, 1, sizeof(ptrdiff_t));
    b->kt = (ptrdiff_t *)take(a, T, 1, sizeof(ptrdiff_t));
    b->pw = (ptrdiff_t *)take(a, w, 1, sizeof(ptrdiff_t));
    b->dig = (ptrdiff_t *)take(a, w, 1, sizeof(ptrdiff_t));
}

int mf_hmm_exact(const mf_hmm_model *m0, ptrdiff_t T, const double *X, double *loglik)
{
    mf_hmm_model em;
    const mf_hmm_model *m = &em;
    ptrdiff_t n, D, lag, w, N, nwin;
    arena_t a = {NULL, 0, 0};
    exact_bufs b;
    double *alpha, *anew, *le, *mean;
    ptrdiff_t *start, *outs, *pw, *dig, *kt;
    int status = prepare(m0, T, &em);
    ptrdiff_t t, k, idx, q, d;
    double ll = 0.0;

    if (status) return status;
    if (!X || !loglik) return MF_EBADARG;
    n = m->n;
    D = m->D;
    lag = m->lag;
    w = exact_width(m, T);
    N = exact_states_of(m, T);
    nwin = T - w + 1;
    if (N < 0) return MF_EOVERFLOW;
    exact_layout(&a, m, T, N, w, &b);
    if ((status = arena_alloc(&a)) != MF_OK) return status;
    exact_layout(&a, m, T, N, w, &b);
    alpha = b.alpha;
    anew = b.anew;
    le = b.le;
    mean = b.mean;
    start = b.start;
    outs = b.outs;
    kt = b.kt;
    pw = b.pw;
    dig = b.dig;
    memset(start, 0, (size_t)(nwin + 1) * sizeof(ptrdiff_t));
    /* window k = (s_k .. s_{k+w-1}); digit 0 (most significant) is s_k */
    pw[w - 1] = 1;
    for (q = w - 2; q >= 0; q--) pw[q] = pw[q + 1] * n;
    /* output t goes to the first window holding all the states its mean depends on */
    for (t = 0; t < T; t++) {
        ptrdiff_t lo = (m->left && t >= lag) ? t - lag : t;
        kt[t] = lo < T - w ? lo : T - w;
        start[kt[t] + 1]++;
    }
    for (k = 0; k < nwin; k++) start[k + 1] += start[k];
    memcpy(b.fill, start, (size_t)(nwin + 1) * sizeof(ptrdiff_t));
    for (t = 0; t < T; t++) outs[b.fill[kt[t]]++] = t;

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
                if (m->right && lag < T - tt) {
                    const double *v = m->V + dig[tt + lag - k] * D;
                    for (d = 0; d < D; d++) mean[d] += v[d];
                }
                if (m->left && tt >= lag) {
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
        }
        /* predicted mass of every window, then the step scaled by the best reachable one */
        if (k == 0) {
            for (idx = 0; idx < N; idx++) anew[idx] = alpha[idx];
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
                anew[idx] = acc;
            }
        }
        for (idx = 0; idx < N; idx++) {
            if (isnan(le[idx]) || le[idx] == INFINITY) { status = HMM_NONFINITE; goto done; }
            if (anew[idx] > 0.0 && le[idx] > mx) mx = le[idx];
        }
        if (mx == -INFINITY) { status = HMM_IMPOSSIBLE; goto done; }
        for (idx = 0; idx < N; idx++) {
            anew[idx] = anew[idx] > 0.0 ? anew[idx] * exp(le[idx] - mx) : 0.0;
            s += anew[idx];
        }
        if (!(s > 0.0)) { status = HMM_NONFINITE; goto done; }
        ll += log(s) + mx;
        for (idx = 0; idx < N; idx++) alpha[idx] = anew[idx] / s;
    }
    if (!isfinite(ll)) { status = HMM_NONFINITE; goto done; }
    *loglik = ll;
done:
    free(a.base);
    return publish(status, loglik);
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
    const mf_hmm_model *m;      /* prepared: lag < T, or no context */
    ptrdiff_t T, n, lag, kmax;  /* kmax: longest coupling distance (0 without couplings) */
    ptrdiff_t nk;               /* products of conditional matrices kept: min(2 lag, T - 1) */
    int has1, has2;             /* couplings at distance lag / 2 lag in the model */
    double cst;
    double *e;                  /* (T, n) single-site terms */
    double *K1, *K2;            /* (n, n) coupling energies, row = state at the earlier end */
    double *alpha, *beta, *phi; /* (T, n) filtered forward, scaled backward, exp(h - max) */
    double *gam;                /* (T, n) marginals */
    double *tl;                 /* (T, n) E[couplings whose earlier end is t | s_t] */
    double *cr;                 /* (T, n) right-hand conditional sums of a sweep */
    double *ML, *MR;            /* (nk, n, n) products of conditional matrices */
    double *tmp, *tmp2;         /* (n, n) */
    double *v;                  /* (5 n) */
} xchain_t;

static int c1_at(const xchain_t *x, ptrdiff_t l)
{
    return x->has1 && l >= 0 && l < x->T && x->lag < x->T - l;
}

static int c2_at(const xchain_t *x, ptrdiff_t l)
{
    return x->has2 && l >= 0 && l < x->T && x->lag < x->T - l && x->lag < x->T - l - x->lag;
}

/* Sizes and the buffers of an xchain_t for the prepared model m (x->m .. x->nk set here). */
static void xchain_layout(arena_t *a, xchain_t *x, const mf_hmm_model *m, ptrdiff_t T)
{
    const ptrdiff_t n = m->n;
    x->m = m;
    x->T = T;
    x->n = n;
    x->lag = m->lag;
    x->has1 = m->right || m->left;
    x->has2 = m->right && m->left;
    x->kmax = x->has2 ? 2 * m->lag : (x->has1 ? m->lag : 0);
    /* products up to distance 2 lag (pair2 asks for them), never beyond T - 1 */
    x->nk = x->has1 ? (m->lag < (T - 1) / 2 + 1 ? 2 * m->lag : T - 1) : (T > 1 ? 1 : 0);
    if (x->nk > T - 1) x->nk = T - 1;
    x->e = (double *)take(a, T, n, sizeof(double));
    x->K1 = (double *)take(a, n, n, sizeof(double));
    x->K2 = (double *)take(a, n, n, sizeof(double));
    x->alpha = (double *)take(a, T, n, sizeof(double));
    x->beta = (double *)take(a, T, n, sizeof(double));
    x->phi = (double *)take(a, T, n, sizeof(double));
    x->gam = (double *)take(a, T, n, sizeof(double));
    x->tl = (double *)take(a, T, n, sizeof(double));
    x->cr = (double *)take(a, T, n, sizeof(double));
    x->ML = (double *)take(a, x->nk, n * n, sizeof(double));
    x->MR = (double *)take(a, x->nk, n * n, sizeof(double));
    x->tmp = (double *)take(a, n, n, sizeof(double));
    x->tmp2 = (double *)take(a, n, n, sizeof(double));
    x->v = (double *)take(a, 5, n, sizeof(double));
}

/* Fills the carved buffers: site terms and coupling energies. */
static void xchain_setup(xchain_t *x, const double *X)
{
    const mf_hmm_model *m = x->m;
    const ptrdiff_t n = m->n, D = m->D;
    ptrdiff_t i, j, d;
    x->cst = site_terms(m, x->T, X, x->e);
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
        double *al = x->alpha + t * n, *ph = x->phi + t * n;
        double mx = -INFINITY, s = 0.0;
        for (i = 0; i < n; i++)
            if (isnan(lp[i]) || lp[i] == INFINITY) return HMM_NONFINITE;
        /* predicted mass of s_t; the step is scaled by the best reachable potential (fb_core) */
        for (j = 0; j < n; j++) {
            double a;
            if (t == 0) a = x->m->startprob[j];
            else {
                a = 0.0;
                for (i = 0; i < n; i++) a += x->alpha[(t - 1) * n + i] * A[i * n + j];
            }
            al[j] = a;
            if (a > 0.0 && lp[j] > mx) mx = lp[j];
        }
        if (mx == -INFINITY) return HMM_IMPOSSIBLE;
        for (j = 0; j < n; j++) {
            const double dl = lp[j] - mx;
            ph[j] = exp(dl < 0.0 ? dl : 0.0);
            al[j] *= ph[j];
            s += al[j];
        }
        if (!(s > 0.0)) return HMM_NONFINITE;
        lz += mx;
        for (j = 0; j < n; j++) al[j] /= s;
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
        if (!(s > 0.0)) return HMM_IMPOSSIBLE;
        for (i = 0; i < n; i++) x->beta[t * n + i] /= s;
    }
    if (!isfinite(lz)) return HMM_NONFINITE;
    *logz = lz;
    return MF_OK;
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

/* MR[k-1] = Q(s_{t+k} | s_t), k = 1..kk (kk <= nk) */
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

/* ML[k-1] = Q(s_{t-k} | s_t), k = 1..kk (kk <= nk) */
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
 * NULL (pair1 and pair2 stay zero in a model without context couplings). */
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
    if (!x->has1) pair1 = pair2 = NULL;
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
    if (!isfinite(F)) return HMM_NONFINITE;
    *value = F;
    return MF_OK;
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
        for (a = 1; a < 2 * lag && a <= t; a++) {
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
            if (!isfinite(term[i])) return HMM_NONFINITE;
        /* new h_t and the forward message alpha_t it gives, scaled by the best reachable term */
        {
            double mx = -INFINITY;
            double *al = x->alpha + t * n;
            for (j = 0; j < n; j++) {
                double pr;
                if (t == 0) pr = x->m->startprob[j];
                else {
                    pr = 0.0;
                    for (i = 0; i < n; i++) pr += x->alpha[(t - 1) * n + i] * A[i * n + j];
                }
                al[j] = pr;
                if (pr > 0.0 && term[j] > mx) mx = term[j];
            }
            if (mx == -INFINITY) return HMM_IMPOSSIBLE;
            for (j = 0; j < n; j++) {
                const double dl = term[j] - mx;
                h[t * n + j] = dl;
                al[j] = al[j] > 0.0 ? al[j] * exp(dl) : 0.0;
                s += al[j];
            }
        }
        if (!(s > 0.0)) return HMM_NONFINITE;
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
    return MF_OK;
}

/* An xchain_t with its own block (for the exported one-chain functions). */
static int xchain_open(xchain_t *x, arena_t *a, const mf_hmm_model *m, ptrdiff_t T,
                       const double *X)
{
    int status;
    xchain_layout(a, x, m, T);
    if ((status = arena_alloc(a)) != MF_OK) return status;
    xchain_layout(a, x, m, T);
    xchain_setup(x, X);
    return MF_OK;
}

int mf_hmm_chain_objective(const mf_hmm_model *m, ptrdiff_t T, const double *X,
                           const double *logpot, double *gamma, double *xi_sum, double *pair1,
                           double *pair2, double *value)
{
    mf_hmm_model e;
    xchain_t x;
    arena_t a = {NULL, 0, 0};
    int status = prepare(m, T, &e);
    if (status) return status;
    if (!X || !logpot || !value) return MF_EBADARG;
    if ((status = xchain_open(&x, &a, &e, T, X)) != MF_OK) return status;
    status = xchain_objective(&x, logpot, xi_sum, pair1, pair2, value);
    if (!status && gamma) memcpy(gamma, x.gam, (size_t)(T * e.n) * sizeof(double));
    free(a.base);
    return publish(status, value);
}

/* Coordinate ascent from h (in place); history[0..*n_sweeps] (within hist_len).  MF_OK when a
 * sweep raised F by at most tol * T (or there is nothing to optimise), MF_NOT_CONVERGED when
 * the budget ran out first. */
static int xchain_ascent(xchain_t *x, ptrdiff_t max_sweeps, double tol, double *h,
                         double *history, ptrdiff_t hist_len, ptrdiff_t *n_sweeps,
                         double *value)
{
    double F, Fn;
    ptrdiff_t it = 0;
    int status = xchain_objective(x, h, NULL, NULL, NULL, &F), converged = 1;
    if (status) return status;
    put_history(history, hist_len, 0, F);
    if (x->kmax > 0 && x->T > x->lag) {
        converged = 0;
        while (it < max_sweeps) {
            it++;
            status = xchain_sweep(x, h);
            if (status) return status;
            status = xchain_objective(x, h, NULL, NULL, NULL, &Fn);
            if (status) return status;
            put_history(history, hist_len, it, Fn);
            if (Fn - F <= tol * (double)x->T) {
                F = Fn;
                converged = 1;
                break;
            }
            F = Fn;
        }
    }
    *n_sweeps = it;
    *value = F;
    return converged ? MF_OK : MF_NOT_CONVERGED;
}

int mf_hmm_ascent(const mf_hmm_model *m, ptrdiff_t T, const double *X, ptrdiff_t max_sweeps,
                  double tol, double *logpot, double *history, ptrdiff_t hist_len,
                  ptrdiff_t *n_sweeps, double *value)
{
    mf_hmm_model e;
    xchain_t x;
    arena_t a = {NULL, 0, 0};
    int status = prepare(m, T, &e);
    if (status) return status;
    if ((status = check_sweeps(max_sweeps, tol, history, hist_len)) != MF_OK) return status;
    if (!X || !logpot || !n_sweeps || !value) return MF_EBADARG;
    if ((status = xchain_open(&x, &a, &e, T, X)) != MF_OK) return status;
    status = xchain_ascent(&x, max_sweeps, tol, logpot, history, hist_len, n_sweeps, value);
    free(a.base);
    return publish(status, value);
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
        const int r = m->right && lag < T - t, l = m->left && t >= lag;
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
    if (T > lag && (m->right || m->left))
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
                if (m->right && m->left && T - lag > lag) {   /* W at s_{t-lag} = i, V at s_{t+lag} = j */
                    const double p2 = pair2[i * n + j];
                    H[(2 * n + i) * K + n + j] += p2;
                    H[(n + j) * K + 2 * n + i] += p2;
                }
            }
    for (d = 1; d < D; d++) memcpy(stat_H + d * K * K, stat_H, (size_t)(K * K) * sizeof(double));
}

typedef struct {
    double *hbest, *h, *hist, *q, *pairs;
} structured_bufs;

static void structured_layout(arena_t *a, xchain_t *x, const mf_hmm_model *m, ptrdiff_t T,
                              ptrdiff_t hist_len, structured_bufs *b)
{
    xchain_layout(a, x, m, T);
    b->hbest = (double *)take(a, T, m->n, sizeof(double));
    b->h = (double *)take(a, T, m->n, sizeof(double));
    b->hist = (double *)take(a, hist_len, 1, sizeof(double));
    b->q = (double *)take(a, T, m->n, sizeof(double));
    b->pairs = (double *)take(a, 2 * m->n, m->n, sizeof(double));
}

static int structured_core(const mf_hmm_model *m, ptrdiff_t T, const double *X,
                           ptrdiff_t max_sweeps, double tol, const double *init, double *gamma,
                           double *xi_sum, double *history, ptrdiff_t hist_len,
                           ptrdiff_t *n_sweeps, double *bound, double *logpot, double *stat_H,
                           double *stat_g)
{
    const ptrdiff_t n = m->n, Tn = T * m->n;
    xchain_t x;
    arena_t a = {NULL, 0, 0};
    structured_bufs b;
    double best = -INFINITY, F, lb;
    ptrdiff_t k, ns = 0, nbest = 0;
    int status, start, conv_best = MF_OK;

    structured_layout(&a, &x, m, T, hist_len, &b);
    if ((status = arena_alloc(&a)) != MF_OK) return status;
    structured_layout(&a, &x, m, T, hist_len, &b);
    xchain_setup(&x, X);
    if (init || x.kmax == 0 || T <= m->lag) {
        /* a warm start; or no couplings, where the first-order posterior is exact */
        memcpy(b.hbest, init ? init : x.e, (size_t)Tn * sizeof(double));
        status = xchain_ascent(&x, max_sweeps, tol, b.hbest, history, hist_len, &nbest, &best);
        if (status != MF_OK && status != MF_NOT_CONVERGED) goto done;
        conv_best = status;
    } else {
        for (start = 0; start < 3; start++) {
            if (start == 0) {
                /* link bound from the first-order posterior */
                status = link_core(m, T, X, max_sweeps, tol, NULL, gamma, b.hist, hist_len, &ns,
                                   &lb, b.h);
            } else if (start == 1) {
                /* link bound from the fully factorised solution */
                status = naive_core(m, T, X, max_sweeps, tol, b.q, b.hist, hist_len, &ns, &lb);
                if (status == HMM_IMPOSSIBLE) {
                    /* zeros in the transitions can leave the product family without a finite
                     * start; that start is then skipped */
                    continue;
                }
                if (status == MF_OK || status == MF_NOT_CONVERGED)
                    status = link_core(m, T, X, max_sweeps, tol, b.q, gamma, b.hist, hist_len,
                                       &ns, &lb, b.h);
            } else {
                memcpy(b.h, x.e, (size_t)Tn * sizeof(double));   /* first-order posterior */
                status = MF_OK;
            }
            if (status != MF_OK && status != MF_NOT_CONVERGED) goto done;
            status = xchain_ascent(&x, max_sweeps, tol, b.h, b.hist, hist_len, &ns, &F);
            if (status != MF_OK && status != MF_NOT_CONVERGED) goto done;
            if (F > best) {
                best = F;
                nbest = ns;
                conv_best = status;
                memcpy(b.hbest, b.h, (size_t)Tn * sizeof(double));
                for (k = 0; k <= ns && k < hist_len; k++) history[k] = b.hist[k];
            }
        }
    }
    /* the kept chain's marginals and statistics */
    status = xchain_objective(&x, b.hbest, xi_sum, b.pairs, b.pairs + n * n, &F);
    if (status) goto done;
    memcpy(gamma, x.gam, (size_t)Tn * sizeof(double));
    if (logpot) memcpy(logpot, b.hbest, (size_t)Tn * sizeof(double));
    if (stat_H && stat_g) mstep_stats(m, T, X, x.gam, b.pairs, b.pairs + n * n, stat_H, stat_g);
    *n_sweeps = nbest;
    *bound = best;
    status = conv_best;
done:
    free(a.base);
    return status;
}

int mf_hmm_structured(const mf_hmm_model *m, ptrdiff_t T, const double *X, ptrdiff_t max_sweeps,
                      double tol, const double *init, double *gamma, double *xi_sum,
                      double *history, ptrdiff_t hist_len, ptrdiff_t *n_sweeps, double *bound,
                      double *logpot, double *stat_H, double *stat_g)
{
    mf_hmm_model e;
    int status = prepare(m, T, &e);
    if (status) return status;
    if ((status = check_sweeps(max_sweeps, tol, history, hist_len)) != MF_OK) return status;
    if (!X || !gamma || !n_sweeps || !bound) return MF_EBADARG;
    return publish(structured_core(&e, T, X, max_sweeps, tol, init, gamma, xi_sum, history,
                                   hist_len, n_sweeps, bound, logpot, stat_H, stat_g), bound);
}

/* ----------------------------------------------------------------------------------------- */
/* Scratch sizes                                                                              */

int mf_hmm_work_size(int method, const mf_hmm_model *m, ptrdiff_t T, ptrdiff_t *bytes)
{
    mf_hmm_model e;
    arena_t a = {NULL, 0, 0}, b = {NULL, 0, 0};
    int status = prepare(m, T, &e);
    if (status) return status;
    if (!bytes) return MF_EBADARG;
    if (method == MF_HMM_NAIVE) {
        naive_bufs nb;
        naive_layout(&a, &e, T, &nb);
    } else if (method == MF_HMM_LINK) {
        link_bufs lb;
        link_layout(&a, &e, T, &lb);
    } else if (method == MF_HMM_CHAIN) {
        xchain_t x;
        xchain_layout(&a, &x, &e, T);
    } else if (method == MF_HMM_STRUCTURED) {
        /* its own block (with the wrapper's history of at most 1001 entries), and on top of
         * it the block of mf_hmm_link or of mf_hmm_naive, never both at once */
        xchain_t x;
        structured_bufs sb;
        link_bufs lb;
        naive_bufs nb;
        arena_t c = {NULL, 0, 0};
        structured_layout(&a, &x, &e, T, 1001, &sb);
        link_layout(&b, &e, T, &lb);
        naive_layout(&c, &e, T, &nb);
        if (c.bad) b.bad = 1;
        if (c.used > b.used) b.used = c.used;
        if (!a.bad && !b.bad && a.used > PTRDIFF_MAX - b.used) a.bad = 1;
        a.used += b.used;
    } else if (method == MF_HMM_EXACT) {
        exact_bufs eb;
        ptrdiff_t N = exact_states_of(&e, T);
        if (N < 0) return MF_EOVERFLOW;
        exact_layout(&a, &e, T, N, exact_width(&e, T), &eb);
    } else {
        return MF_EBADARG;
    }
    if (a.bad || b.bad) return MF_EOVERFLOW;
    *bytes = a.used;
    return MF_OK;
}
