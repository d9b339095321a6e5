/* Context-HMM kernels: the exact mean-field objective of a chain, by its conditional
 * transition matrices.
 * Q(s) = P(s) prod_t exp h_t(s_t) / Z.  With e_t the single-site terms and the couplings
 * written per earlier end l as energies K1(s_l, s_{l+lag}) and K2(s_l, s_{l+2 lag}),
 *   F(h) = ln Z - sum_t gamma_t . (h_t - e_t) + cst - sum_couplings E_Q[K(s_lo, s_hi)],
 * the pairwise marginals coming from the chain's conditional transition matrices
 *   R_t(i, j) = Q(s_{t+1} = j | s_t = i),   L_t(i, j) = Q(s_{t-1} = j | s_t = i),
 * whose products give Q(s_{t+k} | s_t) and Q(s_{t-k} | s_t).  Changing h_t alone changes only the
 * marginal of s_t and leaves Q(rest | s_t) as it was, so the exact maximiser over h_t is
 *   h_t(i) = E_Q[ sum_{u != t} (e_u - h_u)(s_u) - sum_couplings K | s_t = i ] + e_t(i)
 * (up to a constant), computed from the left part (s_{<t} given s_t, through L) and the right
 * part (s_{>t} given s_t, through R), independent given s_t; see docs/derivations/context_hmm.rst.
 *
 * Here: the chain's buffers and coupling energies, its messages and conditional matrices, and
 * the full-matrix path -- F(h) with the pairwise marginals (mf_hmm__xchain_objective) and one
 * sweep of the update above (mf_hmm__xchain_sweep), whose step at t ends in mf_hmm__set_site,
 * which the low-rank sweep shares.  The low-rank path and the careful evaluation of the
 * reported bound are in mf_hmm_rows.c; the ascent that alternates sweeps and objectives, and
 * the exported one-chain functions, in mf_hmm_ascent.c.
 */
#include "mf_hmm_internal.h"

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
    x->At = (double *)take(a, n, n, sizeof(double));
    x->Lnx = (double *)take(a, n, n, sizeof(double));
    x->v = (double *)take(a, 5, n, sizeof(double));
    x->sq = (double *)take(a, 3 * T, n, sizeof(double));
    x->bar = (double *)take(a, 3 * T, m->D, sizeof(double));
    x->cov = (double *)take(a, T, m->D, sizeof(double));
    /* the careful evaluation's rows: V to distance 2 lag (lag without left context), U to lag */
    x->cV = m->right ? (m->left ? 2 * m->lag : m->lag) : -1;
    x->cU = m->left ? m->lag : -1;
    x->offCV = 0;
    x->offCU = (x->cV + 1) * m->D;
    x->wC = (x->cV + 1 + x->cU + 1) * m->D;
    x->cnd = (double *)take(a, 2 * n, x->wC > 0 ? x->wC : 1, sizeof(double));
    mf_hmm__lr_layout(a, x);
}

void mf_hmm__xchain_setup(xchain_t *x, const double *X)
{
    const mf_hmm_model *m = x->m;
    const ptrdiff_t n = m->n, D = m->D;
    ptrdiff_t i, j, d, t;
    x->X = X;
    x->cst = mf_hmm__site_terms(m, x->T, X, x->e);
    for (i = 0; i < n; i++)
        for (j = 0; j < n; j++) x->At[j * n + i] = m->transmat[i * n + j];
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
    mf_hmm__lr_setup(x);
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

/* al[j] = the chain's predicted mass of s_t = j: startprob at t = 0, else
 * sum_i alpha_{t-1}(i) A(i, j), each sum in increasing i (the loop over j innermost). */
static void predict(const xchain_t *x, ptrdiff_t t, double *al)
{
    const ptrdiff_t n = x->n;
    const double *A = x->m->transmat, *ap;
    ptrdiff_t i, j;
    if (t == 0) {
        for (j = 0; j < n; j++) al[j] = x->m->startprob[j];
        return;
    }
    ap = x->alpha + (t - 1) * n;
    for (j = 0; j < n; j++) al[j] = 0.0;
    for (i = 0; i < n; i++) {
        const double c = ap[i], *Ai = A + i * n;
        for (j = 0; j < n; j++) al[j] += c * Ai[j];
    }
}

/* The filtered forward message alpha_t for potentials lp at t, from alpha_{t-1}: the predicted
 * mass times exp(lp - mx), normalised, with mx the largest potential among the states t can
 * reach (so that no factor exceeds 1; mf_hmm__fb); ph (or NULL) receives those factors,
 * exp(min(lp - mx, 0)).  *mx and *s (the mass before normalising) for ln Z.  HMM_IMPOSSIBLE
 * when no reachable state has a potential above -inf. */
static int forward_step(xchain_t *x, ptrdiff_t t, const double *lp, double *ph, double *mx,
                        double *s)
{
    const ptrdiff_t n = x->n;
    double *al = x->alpha + t * n, m = -INFINITY, sum = 0.0;
    ptrdiff_t j;
    predict(x, t, al);
    for (j = 0; j < n; j++)
        if (al[j] > 0.0 && lp[j] > m) m = lp[j];
    if (m == -INFINITY) return HMM_IMPOSSIBLE;
    for (j = 0; j < n; j++) {
        const double dl = lp[j] - m, f = exp(dl < 0.0 ? dl : 0.0);
        if (ph) ph[j] = f;
        al[j] = al[j] > 0.0 ? al[j] * f : 0.0;
        sum += al[j];
    }
    if (!(sum > 0.0)) return HMM_NONFINITE;
    for (j = 0; j < n; j++) al[j] /= sum;
    *mx = m;
    *s = sum;
    return MF_OK;
}

/* Forward (filtered, normalised) and backward (scaled) messages of the chain with potentials h,
 * and ln Z.  With have_forward the forward messages, phi and *logz are already those of h (a
 * low-rank sweep leaves them: mf_hmm__lr_sweep), and only the backward ones are computed. */
int mf_hmm__xchain_messages(xchain_t *x, const double *h, int have_forward, double *logz)
{
    const ptrdiff_t T = x->T, n = x->n;
    const double *A = x->m->transmat;
    double lz = have_forward ? *logz : 0.0;
    ptrdiff_t t, i, j;
    for (t = 0; t < T && !have_forward; t++) {
        const double *lp = h + t * n;
        double mx, s;
        int status;
        for (i = 0; i < n; i++)
            if (isnan(lp[i]) || lp[i] == INFINITY) return HMM_NONFINITE;
        if ((status = forward_step(x, t, lp, x->phi + t * n, &mx, &s)) != MF_OK) return status;
        lz += mx;
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
void mf_hmm__rmat(const xchain_t *x, ptrdiff_t t, double *R)
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
    const double *At = x->At, *al = x->alpha + (t - 1) * n;
    ptrdiff_t i, j;
    for (i = 0; i < n; i++) {
        double s = 0.0;
        for (j = 0; j < n; j++) {
            L[i * n + j] = al[j] * At[i * n + j];
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
    mf_hmm__rmat(x, t, x->MR);
    for (k = 2; k <= kk; k++) {
        mf_hmm__rmat(x, t + k - 1, x->tmp);
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

/* One step of a sweep's right-hand conditional sums: cr[t] = R_t (cr + e - h - tl)[t + 1],
 * shifted to a largest entry of 0 (R: R_t). */
void mf_hmm__cr_step(xchain_t *x, const double *h, ptrdiff_t t, const double *R)
{
    const ptrdiff_t n = x->n, u = t + 1;
    double *w = x->v + 3 * n;
    ptrdiff_t i, j;
    for (j = 0; j < n; j++)
        w[j] = x->cr[u * n + j] + x->e[u * n + j] - h[u * n + j] - x->tl[u * n + j];
    for (i = 0; i < n; i++) {
        double c = 0.0;
        for (j = 0; j < n; j++) c += R[i * n + j] * w[j];
        x->cr[t * n + i] = c;
    }
    shift_max(x->cr + t * n, n);
}

/* F(h); fills gam, tl (and the messages) for a sweep that follows; xi_sum, pair1, pair2 may be
 * NULL (pair1 and pair2 stay zero in a model without context couplings). */
int mf_hmm__xchain_objective(xchain_t *x, const double *h, double *xi_sum, double *pair1,
                             double *pair2, double *pmask, double *value)
{
    const ptrdiff_t T = x->T, n = x->n, n2 = n * n, lag = x->lag, D = x->m->D;
    double logz, F;
    ptrdiff_t t, i, j, d;
    int status;
    const double *k;
    if (x->lr && !pair1 && !pair2 && !pmask) return mf_hmm__lr_objective(x, h, NULL, xi_sum, value);
    status = mf_hmm__xchain_messages(x, h, 0, &logz);
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

/* The end of a sweep's step at t, shared by both paths: h_t = term (shifted to a largest
 * reachable entry of 0), the forward message alpha_t it gives, and the left conditional sums
 * cl for t + 1 (khi: the couplings whose later end is t).  With lz (not NULL) also phi_t and
 * ln Z's term of t, added to *lz: the forward messages of the new h_t, as
 * mf_hmm__xchain_messages would compute them (bit for bit). */
int mf_hmm__set_site(xchain_t *x, ptrdiff_t t, const double *term, const double *khi, double *h,
                     double *cl, double *lz)
{
    const ptrdiff_t T = x->T, n = x->n;
    double *w = x->v + 3 * n, mx, s;
    ptrdiff_t i, j;
    int status;
    for (i = 0; i < n; i++)
        if (!isfinite(term[i])) return HMM_NONFINITE;
    if ((status = forward_step(x, t, term, lz ? x->phi + t * n : NULL, &mx, &s)) != MF_OK) return status;
    for (j = 0; j < n; j++) h[t * n + j] = term[j] - mx;
    if (lz) *lz += log(s);   /* as mf_hmm__xchain_messages will find for h_t, whose largest is 0 */
    if (t + 1 < T) {
        for (j = 0; j < n; j++) w[j] = cl[j] + x->e[t * n + j] - h[t * n + j] - khi[j];
        lmat(x, t + 1, x->Lnx);   /* (kept for the low-rank path's left row of t + 1) */
        for (i = 0; i < n; i++) {
            double c = 0.0;
            for (j = 0; j < n; j++) c += x->Lnx[i * n + j] * w[j];
            cl[i] = c;
        }
        shift_max(cl, n);
    }
    return MF_OK;
}

/* cr[t](i) = E[sum_{u > t} (e_u - h_u)(s_u) - couplings with both ends > t | s_t = i], up to a
 * constant in i, for every t (a sweep's backward half, the same on both paths). */
static void backward_cr(xchain_t *x, const double *h)
{
    const ptrdiff_t T = x->T, n = x->n;
    ptrdiff_t t, i;
    for (i = 0; i < n; i++) x->cr[(T - 1) * n + i] = 0.0;
    for (t = T - 2; t >= 0; t--) {
        mf_hmm__rmat(x, t, x->tmp);
        mf_hmm__cr_step(x, h, t, x->tmp);
    }
}

/* One sweep of exact coordinate maximisation over h_0, ..., h_{T-1} (in place).  Needs the
 * messages and tl of mf_hmm__xchain_objective(h) just before. */
int mf_hmm__xchain_sweep(xchain_t *x, double *h)
{
    const ptrdiff_t T = x->T, n = x->n, n2 = n * n, lag = x->lag;
    double *cl = x->v, *khi = x->v + n, *term = x->v + 2 * n, *sd = x->v + 4 * n;
    ptrdiff_t t, i, a;
    const double *k;
    int status;

    backward_cr(x, h);

    /* forward: cl(i) = E[sum_{u < t} (e_u - h_u)(s_u) - couplings with both ends < t | s_t = i] */
    for (i = 0; i < n; i++) cl[i] = 0.0;
    for (t = 0; t < T; t++) {
        const ptrdiff_t kl = x->kmax < t ? x->kmax : t;
        const ptrdiff_t kr = x->kmax < T - 1 - t ? x->kmax : T - 1 - t;
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
        if ((status = mf_hmm__set_site(x, t, term, khi, h, cl, NULL)) != MF_OK) return status;
    }
    return MF_OK;
}
