/* Context-HMM kernels: the row recursions over a chain (mf_hmm_chain.c has the chain itself).
 *
 * The low-rank path.  Every coupling energy is a sum over output coordinates of products of
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
 * the pairwise marginals.
 *
 * The careful evaluation of the reported bound (mf_hmm__xchain_careful) carries rows of the
 * same kind, the centred conditional means of the tables at a fixed target time, so that each
 * covariance is summed over values of the size of the answer (see mf_hmm__emission).
 */
#include "mf_hmm_internal.h"
#include "mf_gemm.h"

int mf_hmm__lowrank_mode = 0;   /* 0: by cost, 1: always, 2: never, 3: always, in blocks
                                 * (tests only) */

/* Table tab (n, D) at distance 0 of the rows' segment at offset off (width w per state). */
static void put_table(ptrdiff_t n, ptrdiff_t D, const double *tab, double *row, ptrdiff_t w,
                      ptrdiff_t off)
{
    ptrdiff_t i, d;
    for (i = 0; i < n; i++)   /* (D is small: a loop, not a call to memcpy per state) */
        for (d = 0; d < D; d++) row[i * w + off + d] = tab[i * D + d];
}

void mf_hmm__lr_layout(arena_t *a, xchain_t *x)
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

void mf_hmm__lr_setup(xchain_t *x)
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
        mf_hmm__rmat(x, t, x->tmp);
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
 * forward messages are already those of h (left by mf_hmm__lr_sweep).  cr is a sweep's
 * right-hand conditional sums (backward_cr), formed here from the R_t the rows need anyway. */
int mf_hmm__lr_objective(xchain_t *x, const double *h, const double *fwd_logz, double *xi_sum,
                         double *value)
{
    const ptrdiff_t T = x->T, n = x->n;
    const double *L0 = x->ll + 2 * x->rowL;
    double logz = fwd_logz ? *fwd_logz : 0.0, F, Fs = 0.0;
    ptrdiff_t t, i, j;
    int status = mf_hmm__xchain_messages(x, h, fwd_logz != NULL, &logz);
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
            mf_hmm__cr_step(x, h, t, x->tmp);
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

/* One sweep of coordinate maximisation by the low-rank path (the same update as
 * mf_hmm__xchain_sweep).  Needs the messages, tl, cr and checkpoints of mf_hmm__lr_objective(h)
 * just before; leaves the forward messages of the new h, and its ln Z in *lz. */
int mf_hmm__lr_sweep(xchain_t *x, double *h, double *lz)
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
        if ((status = mf_hmm__set_site(x, t, term, khi, h, cl, lz)) != MF_OK) return status;
    }
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
        mf_hmm__rmat(x, l, x->tmp);
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
    if ((status = mf_hmm__xchain_messages(x, hs, 0, &logz)) != MF_OK) return status;
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
