/* Context-HMM kernels: the exact mean-field objective of a chain, and coordinate ascent on it.
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
#include "mf_hmm_internal.h"

static int c1_at(const xchain_t *x, ptrdiff_t l)
{
    return x->has1 && l >= 0 && l < x->T && x->lag < x->T - l;
}

static int c2_at(const xchain_t *x, ptrdiff_t l)
{
    return x->has2 && l >= 0 && l < x->T && x->lag < x->T - l && x->lag < x->T - l - x->lag;
}

void mf_hmm__xchain_layout(arena_t *a, xchain_t *x, const mf_hmm_model *m, ptrdiff_t T)
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
    x->rc = (unsigned char *)take(a, T, 1, 1);
    x->K1 = (double *)take(a, n, n, sizeof(double));
    x->K2 = (double *)take(a, n, n, sizeof(double));
    x->KUV = (double *)take(a, n, n, sizeof(double));
    x->KWU = (double *)take(a, n, n, sizeof(double));
    x->kb = (double *)take(a, n, n, sizeof(double));
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

void mf_hmm__xchain_setup(xchain_t *x, const double *X)
{
    const mf_hmm_model *m = x->m;
    const ptrdiff_t n = m->n, D = m->D;
    ptrdiff_t i, j, d, t;
    x->X = X;
    x->cst = mf_hmm__site_terms(m, x->T, X, x->e);
    for (t = 0; t < x->T; t++) x->rc[t] = row_code(X, D, t);
    for (i = 0; i < n; i++)
        for (j = 0; j < n; j++) {
            double kuv = 0.0, kwu = 0.0, k2 = 0.0;
            for (d = 0; d < D; d++) {
                if (m->right) kuv += m->U[i * D + d] * m->V[j * D + d];  /* U at l, V at l+lag */
                if (m->left) kwu += m->W[i * D + d] * m->U[j * D + d];   /* W at l, U at l+lag */
                if (x->has2) k2 += m->W[i * D + d] * m->V[j * D + d];   /* W at l, V at l+2lag */
            }
            x->KUV[i * n + j] = kuv;
            x->KWU[i * n + j] = kwu;
            x->K1[i * n + j] = kuv + kwu;
            x->K2[i * n + j] = k2;
        }
}

const double *mf_hmm__k1(xchain_t *x, ptrdiff_t l)
{
    const mf_hmm_model *m = x->m;
    const ptrdiff_t n = m->n, D = m->D, lag = x->lag;
    unsigned char a, b;
    ptrdiff_t i, j, d;
    if (!c1_at(x, l)) return NULL;
    a = m->right ? x->rc[l] : ROW_MISSING;         /* output l: U at l, V at l + lag */
    b = m->left ? x->rc[l + lag] : ROW_MISSING;    /* output l + lag: W at l, U at l + lag */
    if (a != ROW_PARTIAL && b != ROW_PARTIAL) {
        if (a == ROW_FULL) return b == ROW_FULL ? x->K1 : x->KUV;
        return b == ROW_FULL ? x->KWU : NULL;
    }
    for (i = 0; i < n; i++)
        for (j = 0; j < n; j++) {
            double k = 0.0;
            for (d = 0; d < D; d++) {
                if (a != ROW_MISSING && seen(x->X, D, l, d)) k += m->U[i * D + d] * m->V[j * D + d];
                if (b != ROW_MISSING && seen(x->X, D, l + lag, d))
                    k += m->W[i * D + d] * m->U[j * D + d];
            }
            x->kb[i * n + j] = k;
        }
    return x->kb;
}

const double *mf_hmm__k2(xchain_t *x, ptrdiff_t l)
{
    const mf_hmm_model *m = x->m;
    const ptrdiff_t n = m->n, D = m->D, lag = x->lag;
    ptrdiff_t i, j, d;
    if (!c2_at(x, l)) return NULL;
    if (x->rc[l + lag] != ROW_PARTIAL)              /* output l + lag: W at l, V at l + 2 lag */
        return x->rc[l + lag] == ROW_FULL ? x->K2 : NULL;
    for (i = 0; i < n; i++)
        for (j = 0; j < n; j++) {
            double k = 0.0;
            for (d = 0; d < D; d++)
                if (seen(x->X, D, l + lag, d)) k += m->W[i * D + d] * m->V[j * D + d];
            x->kb[i * n + j] = k;
        }
    return x->kb;
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
        /* predicted mass of s_t; the step is scaled by the best reachable potential (mf_hmm__fb) */
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

static void matmul(ptrdiff_t n, const double *restrict A, const double *restrict B,
                   double *restrict C)
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
int mf_hmm__xchain_objective(xchain_t *x, const double *h, double *xi_sum, double *pair1,
                            double *pair2, double *pmask, double *value)
{
    const ptrdiff_t T = x->T, n = x->n, n2 = n * n, lag = x->lag, D = x->m->D;
    double logz, F;
    ptrdiff_t t, i, j, d;
    int status = xchain_pass(x, h, &logz);
    const double *k;
    if (status) return status;
    if (xi_sum) for (i = 0; i < n2; i++) xi_sum[i] = 0.0;
    if (pair1) for (i = 0; i < n2; i++) pair1[i] = 0.0;
    if (pair2) for (i = 0; i < n2; i++) pair2[i] = 0.0;
    if (pmask) for (i = 0; i < 3 * D * n2; i++) pmask[i] = 0.0;
    if (!x->has1) pair1 = pair2 = pmask = NULL;
    if (pmask && !pair1) pmask = NULL;
    F = logz + x->cst;
    for (t = 0; t < T; t++) {
        double *g = x->gam + t * n, *tl = x->tl + t * n, s = 0.0;
        ptrdiff_t kk = x->kmax > 1 ? x->kmax : 1;
        if ((pair1 || pmask) && kk < lag) kk = lag;
        if (pair2 || (pmask && x->has2)) kk = 2 * lag;
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
        if ((k = mf_hmm__k1(x, t)) != NULL) add_rowdot(n, x->MR + (lag - 1) * n2, k, tl);
        if ((k = mf_hmm__k2(x, t)) != NULL) add_rowdot(n, x->MR + (2 * lag - 1) * n2, k, tl);
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
            if (pmask && lag <= kk)
                for (d = 0; d < D; d++) {
                    const double *M1 = x->MR + (lag - 1) * n2 + i * n;
                    if (seen(x->X, D, t, d))           /* output t: U at t, V at t + lag */
                        for (j = 0; j < n; j++) pmask[(0 * D + d) * n2 + i * n + j] += g[i] * M1[j];
                    if (seen(x->X, D, t + lag, d)) {   /* output t + lag: W at t */
                        for (j = 0; j < n; j++) pmask[(1 * D + d) * n2 + i * n + j] += g[i] * M1[j];
                        if (2 * lag <= kk)            /* ... and V at t + 2 lag */
                            for (j = 0; j < n; j++)
                                pmask[(2 * D + d) * n2 + i * n + j] +=
                                    g[i] * x->MR[(2 * lag - 1) * n2 + i * n + j];
                    }
                }
        }
    }
    if (!isfinite(F)) return HMM_NONFINITE;
    *value = F;
    return MF_OK;
}

/* One sweep of exact coordinate maximisation over h_0, ..., h_{T-1} (in place).  Needs the
 * messages and tl of mf_hmm__xchain_objective(h) just before. */
static int xchain_sweep(xchain_t *x, double *h)
{
    const ptrdiff_t T = x->T, n = x->n, n2 = n * n, lag = x->lag;
    const double *A = x->m->transmat;
    double *cl = x->v, *khi = x->v + n, *term = x->v + 2 * n, *w = x->v + 3 * n;
    double *sd = x->v + 4 * n;
    ptrdiff_t t, i, j, a;
    const double *k;

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
        if ((k = mf_hmm__k1(x, t - lag)) != NULL) add_rowdot_t(n, x->ML + (lag - 1) * n2, k, khi);
        if ((k = mf_hmm__k2(x, t - 2 * lag)) != NULL)
            add_rowdot_t(n, x->ML + (2 * lag - 1) * n2, k, khi);
        /* couplings with earlier end t - a < t < later end:
         * E[K(s_{t-a}, s_hi) | s_t = i] = sum_{j,k} Q(s_{t-a} = j | i) K(j, k) Q(s_hi = k | i) */
        for (a = 1; a < 2 * lag && a <= t; a++) {
            if (a < lag && (k = mf_hmm__k1(x, t - a)) != NULL) {
                matmul(n, x->ML + (a - 1) * n2, k, x->tmp2);
                add_rowdot(n, x->tmp2, x->MR + (lag - a - 1) * n2, sd);
            }
            if ((k = mf_hmm__k2(x, t - a)) != NULL) {
                matmul(n, x->ML + (a - 1) * n2, k, x->tmp2);
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
    mf_hmm__xchain_layout(a, x, m, T);
    if ((status = arena_alloc(a)) != MF_OK) return status;
    mf_hmm__xchain_layout(a, x, m, T);
    mf_hmm__xchain_setup(x, X);
    return MF_OK;
}

int mf_hmm_chain_objective(const mf_hmm_model *m, ptrdiff_t T, const double *X,
                           const double *logpot, double *gamma, double *xi_sum, double *pair1,
                           double *pair2, double *value)
{
    mf_hmm_model e;
    xchain_t x;
    arena_t a = {NULL, 0, 0};
    int status = mf_hmm__prepare(m, T, &e);
    if (status) return status;
    if (!X || !logpot || !value) return MF_EBADARG;
    if ((status = xchain_open(&x, &a, &e, T, X)) != MF_OK) return status;
    status = mf_hmm__xchain_objective(&x, logpot, xi_sum, pair1, pair2, NULL, value);
    if (!status && gamma) memcpy(gamma, x.gam, (size_t)(T * e.n) * sizeof(double));
    free(a.base);
    return mf_hmm__publish(status, value);
}

/* Coordinate ascent from h (in place); history[0..*n_sweeps] (within hist_len).  MF_OK when a
 * sweep raised F by at most tol * T (or there is nothing to optimise), MF_NOT_CONVERGED when
 * the budget ran out first. */
int mf_hmm__xchain_ascent(xchain_t *x, ptrdiff_t max_sweeps, double tol, double *h,
                         double *history, ptrdiff_t hist_len, ptrdiff_t *n_sweeps,
                         double *value)
{
    double F, Fn;
    ptrdiff_t it = 0;
    int status = mf_hmm__xchain_objective(x, h, NULL, NULL, NULL, NULL, &F), converged = 1;
    if (status) return status;
    put_history(history, hist_len, 0, F);
    if (x->kmax > 0 && x->T > x->lag) {
        converged = 0;
        while (it < max_sweeps) {
            it++;
            status = xchain_sweep(x, h);
            if (status) return status;
            status = mf_hmm__xchain_objective(x, h, NULL, NULL, NULL, NULL, &Fn);
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
    int status = mf_hmm__prepare(m, T, &e);
    if (status) return status;
    if ((status = check_sweeps(max_sweeps, tol, history, hist_len)) != MF_OK) return status;
    if (!X || !logpot || !n_sweeps || !value) return MF_EBADARG;
    if ((status = xchain_open(&x, &a, &e, T, X)) != MF_OK) return status;
    status = mf_hmm__xchain_ascent(&x, max_sweeps, tol, logpot, history, hist_len, n_sweeps, value);
    free(a.base);
    return mf_hmm__publish(status, value);
}
