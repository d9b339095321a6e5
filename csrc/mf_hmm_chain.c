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
#include "mf_gemm.h"

static int c1_at(const xchain_t *x, ptrdiff_t l)
{
    return x->has1 && l >= 0 && l < x->T && x->lag < x->T - l;
}

static int c2_at(const xchain_t *x, ptrdiff_t l)
{
    return x->has2 && l >= 0 && l < x->T && x->lag < x->T - l && x->lag < x->T - l - x->lag;
}

static void lr_layout(arena_t *a, xchain_t *x);
static void lr_setup(xchain_t *x);
static void put_table(ptrdiff_t n, ptrdiff_t D, const double *tab, double *row, ptrdiff_t w,
                      ptrdiff_t off);

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
    lr_layout(a, x);
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
    lr_setup(x);
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
 * low-rank sweep leaves them: lr_sweep), and only the backward ones are computed. */
static int xchain_messages(xchain_t *x, const double *h, int have_forward, double *logz)
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

static int xchain_pass(xchain_t *x, const double *h, double *logz)
{
    return xchain_messages(x, h, 0, logz);
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

/* One step of a sweep's right-hand conditional sums: cr[t] = R_t (cr + e - h - tl)[t + 1],
 * shifted to a largest entry of 0 (R: R_t). */
static void cr_step(xchain_t *x, const double *h, ptrdiff_t t, const double *R)
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

/* ----------------------------------------------------------------------------------------- */
/* The low-rank path.  Every coupling energy is a sum over output coordinates of products of
 * two mean tables, K(j, k) = sum_d A[j, d] B[k, d] (masked by the coordinates of its output
 * that are observed), so E[K(s_l, s_m) | s_t = i] for l <= t <= m is
 *   sum_d (Q(s_l | s_t) A)[i, d] (Q(s_m | s_t) B)[i, d] mask(out, d),
 * and the n x D products Q(s_{t-a} | s_t) A, Q(s_{t+b} | s_t) B follow the recursions
 *   LA_t[a] = L_t LA_{t-1}[a-1],   RB_t[b] = R_t RB_{t+1}[b-1]   (LA_t[0] = A, RB_t[0] = B):
 * O(lag n^2 D) per time step instead of the O(lag n^3) of the conditional matrices.  The left
 * rows follow the sweep forward (they use the potentials already updated); the right rows use
 * the old potentials and are recomputed block by block, backward from checkpoints kept every
 * `blk` steps, so that memory stays O((T / blk + blk) lag n D).  Used when 3 D <= 2 n (or when
 * a test forces it, mf_hmm__lowrank_mode); the full-matrix path serves the other cases and
 * the pairwise marginals. */

int mf_hmm__lowrank_mode = 0;   /* 0: by cost, 1: always, 2: never, 3: always, in blocks
                                 * (tests only) */

static void lr_layout(arena_t *a, xchain_t *x)
{
    const mf_hmm_model *m = x->m;
    const ptrdiff_t T = x->T, n = x->n, D = m->D, lag = x->lag;
    ptrdiff_t nD, cap;
    int want = x->has1 && x->T > lag;
    if (mf_hmm__lowrank_mode == 2 || (mf_hmm__lowrank_mode == 0 && 3 * D > 2 * n)) want = 0;
    x->lr = 0;
    if (!want) return;
    nD = n * D;
    /* distances kept, never beyond T - 1 */
    cap = T - 1;
    x->bV = m->right ? (x->has2 ? 2 * lag : lag) : -1;
    x->bU = m->left ? lag : -1;
    x->aU = m->right ? lag : -1;
    x->aW = m->left ? (x->has2 ? 2 * lag : lag) : -1;
    if (x->bV > cap) x->bV = cap;
    if (x->aW > cap) x->aW = cap;
    if (x->bU > cap) x->bU = cap;
    if (x->aU > cap) x->aU = cap;
    /* a row holds, state by state, the products at every distance: (n, distances, D) */
    x->offRV = 0;
    x->offRU = (x->bV + 1) * D;
    x->wR = x->offRU + (x->bU + 1) * D;
    x->rowR = n * x->wR;
    x->offLU = 0;
    x->offLW = (x->aU + 1) * D;
    x->wL = x->offLW + (x->aW + 1) * D;
    x->rowL = n * x->wL;
    (void)nD;
    /* all T right rows when they take at most 16 MB, else blocks of about sqrt(T) rows */
    if (x->rowR <= ((ptrdiff_t)1 << 21) / T && mf_hmm__lowrank_mode != 3) x->blk = T;
    else {
        x->blk = 1;
        while (x->blk * x->blk < T) x->blk++;
    }
    x->nck = (T - 1) / x->blk + 2;
    /* rows are O(lag n D): the path is refused (the full-matrix one, whose products take
     * 2 nk n^2 doubles, serves) when its rows would take more than that plus 8M doubles */
    {
        const ptrdiff_t rows = x->blk + x->nck + 2, full = 2 * x->nk * n * n + ((ptrdiff_t)1 << 23);
        if (x->rowR > full / rows || 3 * x->rowL > full) return;
    }
    x->mkr = (double *)take(a, T, D, sizeof(double));
    x->nmiss = (ptrdiff_t *)take(a, T + 1, 1, sizeof(ptrdiff_t));
    x->ck = (double *)take(a, x->nck, x->rowR, sizeof(double));
    x->bk = (double *)take(a, x->blk, x->rowR, sizeof(double));
    x->rr = (double *)take(a, 2, x->rowR, sizeof(double));
    x->ll = (double *)take(a, 3, x->rowL, sizeof(double));
    x->lr = 1;
}

static void lr_setup(xchain_t *x)
{
    const mf_hmm_model *m = x->m;
    const ptrdiff_t T = x->T, D = m->D, nD = x->n * D;
    ptrdiff_t t, d;
    if (!x->lr) return;
    memset(x->ck, 0, (size_t)(x->nck * x->rowR) * sizeof(double));
    memset(x->bk, 0, (size_t)(x->blk * x->rowR) * sizeof(double));
    memset(x->rr, 0, (size_t)(2 * x->rowR) * sizeof(double));
    memset(x->ll, 0, (size_t)(3 * x->rowL) * sizeof(double));
    x->nmiss[0] = 0;
    for (t = 0; t < T; t++) {
        for (d = 0; d < D; d++) {
            x->mkr[(T - 1 - t) * D + d] = seen(x->X, D, t, d) ? 1.0 : 0.0;
        }
        x->nmiss[t + 1] = x->nmiss[t] + (x->rc[t] != ROW_FULL);
    }
    /* the third left row: the tables themselves (a = 0), for the objective */
    if (x->aU >= 0) put_table(x->n, D, m->U, x->ll + 2 * x->rowL, x->wL, x->offLU);
    if (x->aW >= 0) put_table(x->n, D, m->W, x->ll + 2 * x->rowL, x->wL, x->offLW);
    (void)nD;
}

/* Table tab (n, D) at distance 0 of the rows' segment at offset off (width w per state). */
static void put_table(ptrdiff_t n, ptrdiff_t D, const double *tab, double *row, ptrdiff_t w,
                      ptrdiff_t off)
{
    ptrdiff_t i, d;
    for (i = 0; i < n; i++)   /* (D is small: a loop, not a call to memcpy per state) */
        for (d = 0; d < D; d++) row[i * w + off + d] = tab[i * D + d];
}

/* row[i, doff .. doff + L) = sum_k M[i, k] src[k, soff .. soff + L), i < n, rows of width w:
 * one step of a row recursion, each product at a distance from the neighbouring step's at one
 * distance less, one slot further on (doff = D, left and careful rows) or back (soff = D, right
 * rows); an n x n by n x L product, summed in increasing k for every entry (mf_gemm.h). */
static void row_step(ptrdiff_t n, const double *restrict M, const double *restrict src,
                     ptrdiff_t soff, double *restrict row, ptrdiff_t doff, ptrdiff_t w, ptrdiff_t L)
{
    if (L < 1) return;
    mf_gemm_nn_set(n, L, n, M, n, src + soff, w, row + doff, w);
}

/* The right row of t from the row of t + 1 (next; unused at t = T - 1); leaves R_t in x->tmp
 * when t < T - 1.  A right row's segments hold the distances in decreasing order (distance b of
 * the V segment at offRV + (bV - b) D, of the U segment at offRU + (bU - b) D), so that the
 * couplings across t read left and right rows in the same direction (lr_cross).  One product
 * over the whole width of a state's segments (each distance b from b - 1 one slot to the
 * right; the slot of a segment's distance 0 receives the next segment's largest distance,
 * which put_table then overwrites with the table); entries beyond the room left are never
 * read. */
static void lr_rstep(xchain_t *x, ptrdiff_t t, const double *next, double *row)
{
    const mf_hmm_model *m = x->m;
    const ptrdiff_t n = x->n, D = m->D, room = x->T - 1 - t;
    if (room >= 1) {
        rmat(x, t, x->tmp);
        row_step(n, x->tmp, next, D, row, 0, x->wR, x->wR - D);
    }
    if (x->bV >= 0) put_table(n, D, m->V, row, x->wR, x->offRV + x->bV * D);
    if (x->bU >= 0) put_table(n, D, m->U, row, x->wR, x->offRU + x->bU * D);
}

/* The left row of t from the row of t - 1 (prev; unused at t = 0), likewise. */
static void lr_lstep(xchain_t *x, ptrdiff_t t, const double *prev, double *row)
{
    const mf_hmm_model *m = x->m;
    const ptrdiff_t n = x->n, D = m->D;
    if (t >= 1)   /* L_t, which the sweep's step at t - 1 left in x->Lnx */
        row_step(n, x->Lnx, prev, 0, row, D, x->wL, x->wL - D);
    if (x->aU >= 0) put_table(n, D, m->U, row, x->wL, x->offLU);
    if (x->aW >= 0) put_table(n, D, m->W, row, x->wL, x->offLW);
}

/* out[i] += E[K(s_l, s_m) | s_t = i] for the couplings with l = t - a1 at distance lag and
 * l = t - a2 at distance 2 lag (a1 = a2 = 0: those that start at t; a1 = lag, a2 = 2 lag: those
 * that end at t); L and R the left and right rows of t.  The couplings are added to out in
 * turn, U-V (output l), W-U (output l + lag), W-V (output l + lag), each as
 * sum_d la[i, d] rb[i, d] w[d] per state (D = 2 written out). */
static void lr_couplings(const xchain_t *x, ptrdiff_t t, const double *L, const double *R,
                         ptrdiff_t a1, ptrdiff_t a2, double *out)
{
    const mf_hmm_model *m = x->m;
    const ptrdiff_t n = x->n, D = m->D, lag = x->lag, wL = x->wL, wR = x->wR;
    const double *la[3], *rb[3], *w[3];
    ptrdiff_t nc = 0, i, c, d;
    if (c1_at(x, t - a1)) {
        const ptrdiff_t l = t - a1, b = lag - a1;
        if (m->right) {      /* output l: U at l, V at l + lag */
            la[nc] = L + x->offLU + a1 * D;
            rb[nc] = R + x->offRV + (x->bV - b) * D;
            w[nc++] = x->mkr + (x->T - 1 - l) * D;
        }
        if (m->left) {       /* output l + lag: W at l, U at l + lag */
            la[nc] = L + x->offLW + a1 * D;
            rb[nc] = R + x->offRU + (x->bU - b) * D;
            w[nc++] = x->mkr + (x->T - 1 - l - lag) * D;
        }
    }
    if (c2_at(x, t - a2)) {  /* output l + lag: W at l, V at l + 2 lag */
        la[nc] = L + x->offLW + a2 * D;
        rb[nc] = R + x->offRV + (x->bV - (2 * lag - a2)) * D;
        w[nc++] = x->mkr + (x->T - 1 - t + a2 - lag) * D;
    }
    for (c = 0; c < nc; c++) {
        const double *p = la[c], *q = rb[c], *v = w[c];
        if (D == 2) {
            const double w0 = v[0], w1 = v[1];
            for (i = 0; i < n; i++)
                out[i] += p[i * wL] * q[i * wR] * w0 + p[i * wL + 1] * q[i * wR + 1] * w1;
        } else
            for (i = 0; i < n; i++) {
                double s = 0.0;
                for (d = 0; d < D; d++) s += p[i * wL + d] * q[i * wR + d] * v[d];
                out[i] += s;
            }
    }
}

typedef struct {
    const double *la, *rb, *mr;   /* left and right rows' entries at the range's first a; mask */
    ptrdiff_t len;                /* (distances in the range) D */
} cross_range;

/* A range of lr_cross with cnt distances whose outputs are o1 .. o2: the mask (time reversed,
 * as the distances run) is left out (NULL) when every one of those outputs is fully observed. */
static cross_range cross_at(const xchain_t *x, const double *la, const double *rb, ptrdiff_t o1,
                            ptrdiff_t o2, ptrdiff_t cnt)
{
    cross_range c;
    c.la = la;
    c.rb = rb;
    c.mr = x->nmiss[o2 + 1] > x->nmiss[o1] ? x->mkr + (x->T - 1 - o2) * x->m->D : NULL;
    c.len = cnt * x->m->D;
    return c;
}

/* out[i] += E[couplings with earlier end l < t < later end | s_t = i]: for a = t - l in
 * [1, lag - 1] the couplings at distance lag (U at l and V at l + lag, output l; W at l and U at
 * l + lag, output l + lag), for a in [1, 2 lag - 1] those at distance 2 lag (W at l and V at
 * l + 2 lag, output l + lag).  The a for which a coupling exists form one range per distance,
 * and along it the left row's entries (distance a), the right row's (distance lag - a or
 * 2 lag - a, stored in decreasing order) and the time-reversed mask of the outputs all run
 * forward in memory: per state, contiguous products of length (range) D, summed in one
 * fixed order, the mask left out where every output of a range is fully observed.
 * L and R the left and right rows of t. */
static void lr_cross(const xchain_t *x, ptrdiff_t t, const double *L, const double *R,
                     double *out)
{
    const mf_hmm_model *m = x->m;
    const ptrdiff_t n = x->n, D = m->D, lag = x->lag, T = x->T, wL = x->wL, wR = x->wR;
    cross_range rg[3];
    ptrdiff_t nr = 0, lo, hi, i, r;
    /* distance lag: l = t - a >= 0 and l + lag <= T - 1 */
    lo = t + lag - T + 1 > 1 ? t + lag - T + 1 : 1;
    hi = lag - 1 < t ? lag - 1 : t;
    if (x->has1 && lo <= hi) {
        if (m->right)   /* U at l, V at l + lag: outputs l = t - hi .. t - lo */
            rg[nr++] = cross_at(x, L + x->offLU + lo * D, R + x->offRV + (x->bV - lag + lo) * D,
                                t - hi, t - lo, hi - lo + 1);
        if (m->left)    /* W at l, U at l + lag: outputs l + lag */
            rg[nr++] = cross_at(x, L + x->offLW + lo * D, R + x->offRU + (x->bU - lag + lo) * D,
                                t - hi + lag, t - lo + lag, hi - lo + 1);
    }
    /* distance 2 lag: l = t - a >= 0 and l + 2 lag <= T - 1; W at l, V at l + 2 lag: outputs
     * l + lag */
    lo = t + 2 * lag - T + 1 > 1 ? t + 2 * lag - T + 1 : 1;
    hi = 2 * lag - 1 < t ? 2 * lag - 1 : t;
    if (x->has2 && lo <= hi)
        rg[nr++] = cross_at(x, L + x->offLW + lo * D, R + x->offRV + (x->bV - 2 * lag + lo) * D,
                            t - hi + lag, t - lo + lag, hi - lo + 1);
    /* per state, sum_j a[j] b[j] (c[j]) over the ranges in one fixed order: four partial sums
     * (j mod 4 within each range), then (0 + 1) + (2 + 3), the same bits in the SSE2 and AVX2
     * bodies; without the mask the same bits, as x * 1.0 is x */
    for (i = 0; i < n; i++) {
        double s0 = 0.0, s1 = 0.0, s2 = 0.0, s3 = 0.0;
        for (r = 0; r < nr; r++) {
            const double *restrict a = rg[r].la + i * wL, *restrict b = rg[r].rb + i * wR;
            const double *restrict c = rg[r].mr;
            const ptrdiff_t nl = rg[r].len;
            ptrdiff_t j = 0;
            if (c) {
                for (; j + 4 <= nl; j += 4) {
                    s0 += a[j] * b[j] * c[j];
                    s1 += a[j + 1] * b[j + 1] * c[j + 1];
                    s2 += a[j + 2] * b[j + 2] * c[j + 2];
                    s3 += a[j + 3] * b[j + 3] * c[j + 3];
                }
                if (j < nl) s0 += a[j] * b[j] * c[j];
                if (j + 1 < nl) s1 += a[j + 1] * b[j + 1] * c[j + 1];
                if (j + 2 < nl) s2 += a[j + 2] * b[j + 2] * c[j + 2];
            } else {
                for (; j + 4 <= nl; j += 4) {
                    s0 += a[j] * b[j];
                    s1 += a[j + 1] * b[j + 1];
                    s2 += a[j + 2] * b[j + 2];
                    s3 += a[j + 3] * b[j + 3];
                }
                if (j < nl) s0 += a[j] * b[j];
                if (j + 1 < nl) s1 += a[j + 1] * b[j + 1];
                if (j + 2 < nl) s2 += a[j + 2] * b[j + 2];
            }
        }
        out[i] += (s0 + s1) + (s2 + s3);
    }
}

/* F(h) and gam, tl, cr by the low-rank path (no pairwise marginals at lag or 2 lag); xi_sum
 * (the summed marginals of neighbours) when not NULL.  fwd_logz: NULL, or ln Z when the
 * forward messages are already those of h (left by lr_sweep).  cr is a sweep's right-hand
 * conditional sums (backward_cr), formed here from the R_t the rows need anyway. */
static int lr_objective(xchain_t *x, const double *h, const double *fwd_logz, double *xi_sum,
                        double *value)
{
    const ptrdiff_t T = x->T, n = x->n;
    const double *L0 = x->ll + 2 * x->rowL;
    double logz = fwd_logz ? *fwd_logz : 0.0, F, Fs = 0.0;
    ptrdiff_t t, i, j;
    int status = xchain_messages(x, h, fwd_logz != NULL, &logz);
    if (status) return status;
    if (xi_sum) for (i = 0; i < n * n; i++) xi_sum[i] = 0.0;
    const int all = x->blk == T;   /* every right row kept: the sweep reads them directly */
    for (i = 0; i < n; i++) x->cr[(T - 1) * n + i] = 0.0;
    for (t = T - 1; t >= 0; t--) {
        double *row = all ? x->bk + t * x->rowR : x->rr + (t & 1) * x->rowR;
        const double *next = all ? x->bk + (t + 1) * x->rowR : x->rr + ((t + 1) & 1) * x->rowR;
        double *g = x->gam + t * n, *tl = x->tl + t * n, s = 0.0;
        lr_rstep(x, t, next, row);   /* (next unused at t = T - 1) */
        if (!all && t % x->blk == 0)   /* the checkpoints of a sweep that follows */
            memcpy(x->ck + (t / x->blk) * x->rowR, row, (size_t)x->rowR * sizeof(double));
        for (i = 0; i < n; i++) {
            g[i] = x->alpha[t * n + i] * x->beta[t * n + i];
            s += g[i];
            tl[i] = 0.0;
        }
        lr_couplings(x, t, L0, row, 0, 0, tl);
        for (i = 0; i < n; i++) {
            g[i] /= s;
            if (g[i] > 0.0) Fs += g[i] * (x->e[t * n + i] - h[t * n + i] - tl[i]);
        }
        if (t < T - 1) {   /* lr_rstep left R_t in x->tmp */
            cr_step(x, h, t, x->tmp);
            if (xi_sum)
                for (i = 0; i < n; i++)
                    for (j = 0; j < n; j++) xi_sum[i * n + j] += g[i] * x->tmp[i * n + j];
        }
    }
    F = logz + x->cst + Fs;
    if (!isfinite(F)) return HMM_NONFINITE;
    *value = F;
    return MF_OK;
}

/* The right rows of the block starting at t0 (rows t0 .. t0 + blk - 1, clipped at T - 1), from
 * the checkpoint of t0 + blk. */
static void lr_fill_block(xchain_t *x, ptrdiff_t t0)
{
    const ptrdiff_t T = x->T, t1 = t0 + x->blk < T ? t0 + x->blk : T;   /* exclusive */
    ptrdiff_t t;
    const double *next = t1 < T ? x->ck + (t1 / x->blk) * x->rowR : NULL;
    for (t = t1 - 1; t >= t0; t--) {
        double *row = x->bk + (t - t0) * x->rowR;
        lr_rstep(x, t, next, row);
        next = row;
    }
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
    if (x->lr && !pair1 && !pair2 && !pmask) return lr_objective(x, h, NULL, xi_sum, value);
    status = xchain_pass(x, h, &logz);
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

/* The careful evaluation's right rows: per state i, the centred conditional means
 * E[V(s_{l+b}) - Vbar_{l+b} | s_l = i] for b = 0 .. cV (a segment at offCV) and the same of U for
 * b = 0 .. cU (at offCU), D-wide slots, from the row of l + 1 (next; unused at l = T - 1) by one
 * product R_l row_{l+1} over the whole width, as lr_rstep: the rows' recursion runs at a fixed
 * target time l + b, so every entry is carried centred at its own mean.  Entries beyond the
 * room left are never read. */
static void careful_row(xchain_t *x, ptrdiff_t l, const double *next, double *row)
{
    const mf_hmm_model *m = x->m;
    const ptrdiff_t T = x->T, n = x->n, D = m->D, w = x->wC;
    ptrdiff_t i, d;
    if (l < T - 1) {
        rmat(x, l, x->tmp);
        row_step(n, x->tmp, next, 0, row, D, w, w - D);
    }
    for (i = 0; i < n; i++)
        for (d = 0; d < D; d++) {
            if (x->cV >= 0) row[i * w + x->offCV + d] = m->V[i * D + d] - x->bar[(T + l) * D + d];
            if (x->cU >= 0) row[i * w + x->offCU + d] = m->U[i * D + d] - x->bar[l * D + d];
        }
}

/* cov[o, d] += Cov_Q(A[s_l, d], B[s_{l+b}, d]) over the observed coordinates d of output o:
 * sum_i gamma_l(i) (A_id - Abar_ld) E[B(s_{l+b}) - Bbar | s_l = i]_d, every factor centred
 * (A = table ka; c: the row's entries of B at distance b, stride x->wC). */
static void careful_add(xchain_t *x, ptrdiff_t o, ptrdiff_t l, int ka, const double *c)
{
    const mf_hmm_model *m = x->m;
    const ptrdiff_t n = x->n, D = m->D, w = x->wC;
    const double *A = table(m, ka), *abar = x->bar + (ka * x->T + l) * D, *g = x->gam + l * n;
    ptrdiff_t i, d;
    for (d = 0; d < D; d++) {
        double acc = 0.0;
        if (!seen(x->X, D, o, d)) continue;
        for (i = 0; i < n; i++)
            if (g[i] > 0.0) acc += g[i] * (A[i * D + d] - abar[d]) * c[i * w + d];
        x->cov[o * D + d] += acc;
    }
}

int mf_hmm__xchain_careful(xchain_t *x, const double *h, double *value)
{
    const mf_hmm_model *m = x->m;
    const ptrdiff_t T = x->T, n = x->n, D = m->D, lag = x->lag;
    double *hs = x->cr, logz, F;
    ptrdiff_t t, i;
    int status;
    /* E_Q[ln P(s)] + H(Q) = ln Z - sum_t gamma_t . h_t, with each h_t shifted to a largest
     * entry of 0 (Q is unchanged) so that neither term carries the potentials' size */
    for (t = 0; t < T; t++) {
        double mx = -INFINITY;
        for (i = 0; i < n; i++)
            if (h[t * n + i] > mx) mx = h[t * n + i];
        if (!isfinite(mx)) mx = 0.0;   /* the pass below reports what is wrong */
        for (i = 0; i < n; i++) hs[t * n + i] = h[t * n + i] - mx;
    }
    if ((status = xchain_pass(x, hs, &logz)) != MF_OK) return status;
    F = logz;
    for (t = 0; t < T; t++) {
        double *g = x->gam + t * n, s = 0.0;
        for (i = 0; i < n; i++) {
            g[i] = x->alpha[t * n + i] * x->beta[t * n + i];
            s += g[i];
        }
        for (i = 0; i < n; i++) {
            g[i] /= s;
            if (g[i] > 0.0) F -= g[i] * hs[t * n + i];
        }
    }
    mf_hmm__bar_means(m, T, x->gam, x->bar);
    memset(x->cov, 0, (size_t)(T * D) * sizeof(double));
    /* each covariance at its earlier end l, the rows carried backward: for an output, U-V (at
     * l = t) is added before W-U and W-V (at l = t - lag) */
    if (x->has1) memset(x->cnd, 0, (size_t)(2 * n * x->wC) * sizeof(double));
    if (x->has1)
        for (t = T - 1; t >= 0; t--) {
            double *row = x->cnd + (t & 1) * n * x->wC;
            careful_row(x, t, x->cnd + ((t + 1) & 1) * n * x->wC, row);
            if (lag >= T - t) continue;
            if (m->right && x->rc[t] != ROW_MISSING)   /* output t: U at t, V at t + lag */
                careful_add(x, t, t, 0, row + x->offCV + lag * D);
            if (m->left && x->rc[t + lag] != ROW_MISSING) {   /* output t + lag: W at t, ... */
                careful_add(x, t + lag, t, 2, row + x->offCU + lag * D);   /* ... U at t + lag */
                if (m->right && lag < T - t - lag)                          /* ... V at t + 2 lag */
                    careful_add(x, t + lag, t, 2, row + x->offCV + 2 * lag * D);
            }
        }
    F += mf_hmm__emission(m, T, x->X, x->gam, x->bar, x->cov);
    if (!isfinite(F)) return HMM_NONFINITE;
    *value = F;
    return MF_OK;
}

/* The end of a sweep's step at t, shared by both paths: h_t = term (shifted to a largest
 * reachable entry of 0), the forward message alpha_t it gives, and the left conditional sums
 * cl for t + 1 (khi: the couplings whose later end is t).  With lz (not NULL) also phi_t and
 * ln Z's term of t, added to *lz: the forward messages of the new h_t, as xchain_messages
 * would compute them (bit for bit). */
static int set_site(xchain_t *x, ptrdiff_t t, const double *term, const double *khi, double *h,
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
    if (lz) *lz += log(s);   /* as xchain_messages will find for h_t, whose largest is 0 */
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
        rmat(x, t, x->tmp);
        cr_step(x, h, t, x->tmp);
    }
}

/* One sweep of exact coordinate maximisation over h_0, ..., h_{T-1} (in place).  Needs the
 * messages and tl of mf_hmm__xchain_objective(h) just before. */
static int xchain_sweep(xchain_t *x, double *h)
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
        if ((status = set_site(x, t, term, khi, h, cl, NULL)) != MF_OK) return status;
    }
    return MF_OK;
}


/* One sweep of coordinate maximisation by the low-rank path (same update as xchain_sweep).
 * Needs the messages, tl, cr and checkpoints of lr_objective(h) just before; leaves the forward
 * messages of the new h, and its ln Z in *lz. */
static int lr_sweep(xchain_t *x, double *h, double *lz)
{
    const ptrdiff_t T = x->T, n = x->n, lag = x->lag;
    double *cl = x->v, *khi = x->v + n, *term = x->v + 2 * n, *sd = x->v + 4 * n;
    ptrdiff_t t, i;
    int status;

    *lz = 0.0;
    for (i = 0; i < n; i++) cl[i] = 0.0;
    for (t = 0; t < T; t++) {
        double *L = x->ll + (t & 1) * x->rowL;
        const double *Lp = x->ll + ((t + 1) & 1) * x->rowL, *R;
        if (t % x->blk == 0 && x->blk < T) lr_fill_block(x, t);
        R = x->bk + (t % x->blk) * x->rowR;
        lr_lstep(x, t, Lp, L);     /* from alpha_{<t}: h_{<t} already updated */
        for (i = 0; i < n; i++) {
            khi[i] = 0.0;
            sd[i] = 0.0;
        }
        /* couplings whose later end is t, and those with earlier end t - a < t < later end */
        lr_couplings(x, t, L, R, lag, 2 * lag, khi);
        lr_cross(x, t, L, R, sd);
        for (i = 0; i < n; i++)
            term[i] = x->e[t * n + i] + cl[i] + x->cr[t * n + i] - x->tl[t * n + i] - khi[i]
                      - sd[i];
        if ((status = set_site(x, t, term, khi, h, cl, lz)) != MF_OK) return status;
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

/* One step of the ascent: a sweep from h, whose objective was the last one computed, then
 * the objective at the result (which the next sweep needs), *F. */
static int ascent_step(xchain_t *x, double *h, double *F)
{
    double lz;
    int status;
    if (x->lr) {   /* the sweep leaves the new forward messages */
        if ((status = lr_sweep(x, h, &lz)) != MF_OK) return status;
        return lr_objective(x, h, &lz, NULL, F);
    }
    if ((status = xchain_sweep(x, h)) != MF_OK) return status;
    return mf_hmm__xchain_objective(x, h, NULL, NULL, NULL, NULL, F);
}

/* The squared extrapolation of three successive iterates h0, h1, h2 (Varadhan & Roland 2008,
 * SQUAREM's step S3): with r = h1 - h0 and v = h2 - 2 h1 + h0, hp = h0 - 2 a r + a^2 v,
 * a = -|r| / |v| clipped to [-ALPHA_MAX, -1] (a = -1 gives h2 itself).  Entries where an
 * iterate is not finite (a state a potential forbids) are h2's.  Returns 0 when there is no
 * step to take (r or v zero). */
#define ALPHA_MAX 100.0
static int extrapolate(const double *h0, const double *h1, const double *h2, double *hp,
                       ptrdiff_t N)
{
    double sr = 0.0, sv = 0.0, al;
    ptrdiff_t i;
    for (i = 0; i < N; i++) {
        if (!isfinite(h0[i]) || !isfinite(h1[i]) || !isfinite(h2[i])) continue;
        sr += sq(h1[i] - h0[i]);
        sv += sq(h2[i] - 2.0 * h1[i] + h0[i]);
    }
    if (!(sr > 0.0) || !(sv > 0.0) || !isfinite(sr) || !isfinite(sv)) return 0;
    al = -sqrt(sr / sv);
    if (al > -1.0) al = -1.0;
    if (al < -ALPHA_MAX) al = -ALPHA_MAX;
    for (i = 0; i < N; i++) {
        if (!isfinite(h0[i]) || !isfinite(h1[i]) || !isfinite(h2[i])) {
            hp[i] = h2[i];
            continue;
        }
        hp[i] = h0[i] - 2.0 * al * (h1[i] - h0[i]) + al * al * (h2[i] - 2.0 * h1[i] + h0[i]);
    }
    return 1;
}
#undef ALPHA_MAX

/* Coordinate ascent from h (in place); history[0..*n_sweeps] (within hist_len).  Two plain
 * sweeps, then a sweep from their extrapolation, kept only when it ends above the second
 * plain sweep (else the ascent goes on from there): every iterate kept is at least as high as
 * the one before, and the history is that of the iterates kept.  MF_OK when a sweep raised F
 * by at most tol * T (or there is nothing to optimise), MF_NOT_CONVERGED when the budget ran
 * out first. */
int mf_hmm__xchain_ascent(xchain_t *x, ptrdiff_t max_sweeps, double tol, double *h,
                         double *history, ptrdiff_t hist_len, ptrdiff_t *n_sweeps,
                         double *value)
{
    const ptrdiff_t N = x->T * x->n;
    const double tolT = tol * (double)x->T;
    double F, Fn, Fp, *h0 = x->sq, *h1 = x->sq + N, *hp = x->sq + 2 * N;
    ptrdiff_t it = 0;
    int status = mf_hmm__xchain_objective(x, h, NULL, NULL, NULL, NULL, &F), converged = 1, k;
    if (status) return status;
    put_history(history, hist_len, 0, F);
    if (x->kmax > 0 && x->T > x->lag) {
        converged = 0;
        while (it < max_sweeps) {
            /* two plain sweeps, h0 -> h1 -> h */
            for (k = 0; k < 2 && !converged && it < max_sweeps; k++) {
                memcpy(k ? h1 : h0, h, (size_t)N * sizeof(double));
                if ((status = ascent_step(x, h, &Fn)) != MF_OK) return status;
                put_history(history, hist_len, ++it, Fn);
                if (Fn - F <= tolT) converged = 1;
                F = Fn;
            }
            if (converged || it >= max_sweeps) break;
            /* a sweep from the extrapolated point: kept when it ends above F */
            if (!extrapolate(h0, h1, h, hp, N)) continue;
            status = mf_hmm__xchain_objective(x, hp, NULL, NULL, NULL, NULL, &Fp);
            if (status == MF_OK) {
                status = ascent_step(x, hp, &Fn);
                it++;
                if (status == MF_OK && Fn >= F) {
                    memcpy(h, hp, (size_t)N * sizeof(double));
                    put_history(history, hist_len, it, Fn);
                    if (Fn - Fp <= tolT) converged = 1;
                    F = Fn;
                    if (converged) break;
                    continue;
                }
                put_history(history, hist_len, it, F);
            }
            /* the point did not pay (or left the range the chain can take): back to h */
            if (status != MF_OK && status != HMM_NONFINITE && status != HMM_IMPOSSIBLE)
                return status;
            if ((status = mf_hmm__xchain_objective(x, h, NULL, NULL, NULL, NULL, &Fn)) != MF_OK)
                return status;
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
