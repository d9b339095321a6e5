/* The E-step of a layered nonlinear Gaussian belief network over a block of patterns, and the
 * check of a network's layout that guards it; see mf_nlgbn.h for the contract and
 * docs/derivations/nlgbn.rst for the derivations.  Plain C, no Python, no allocation: the caller (the
 * Cython driver in mfengine/nlgbn/_estep.pyx) owns the threads and the scratch memory. */
#include <math.h>
#include <stdint.h>
#include "mf_nlgbn.h"

#define UNIT_MAX_IT 50              /* Newton steps per unit and visit */
#define NET_CHECKED 0x4e4c47        /* the value of net->checked after a successful check */

/* a + b and a * b for non-negative a, b, or -1 when the result would not fit ptrdiff_t */
static ptrdiff_t add_sz(ptrdiff_t a, ptrdiff_t b)
{
    if (a < 0 || b < 0 || a > PTRDIFF_MAX - b)
        return -1;
    return a + b;
}

static ptrdiff_t mul_sz(ptrdiff_t a, ptrdiff_t b)
{
    if (a < 0 || b < 0 || (a != 0 && b > PTRDIFF_MAX / a))
        return -1;
    return a * b;
}

int mf_nlgbn_net_check(mf_nlgbn_net *net, ptrdiff_t len_sizes, ptrdiff_t len_offset,
                       ptrdiff_t len_woff, ptrdiff_t len_soff, ptrdiff_t len_types,
                       ptrdiff_t len_WT, ptrdiff_t len_bias, ptrdiff_t len_prec,
                       ptrdiff_t len_acoef, ptrdiff_t stat_size)
{
    if (net == NULL)
        return MF_EBADARG;
    net->checked = 0;
    ptrdiff_t L = net->n_layers;
    if (L < 2 || len_sizes != L || len_offset != L + 1 || len_woff < L - 1 || len_soff < L - 1)
        return MF_EBADARG;
    if (net->sizes == NULL || net->offset == NULL || net->woff == NULL || net->soff == NULL
        || net->types == NULL || net->WT == NULL || net->bias == NULL || net->prec == NULL
        || net->acoef == NULL)
        return MF_EBADARG;
    /* layer offsets */
    if (net->offset[0] != 0)
        return MF_EBADARG;
    for (ptrdiff_t l = 0; l < L; l++) {
        if (net->sizes[l] < 1)
            return MF_EBADARG;
        ptrdiff_t next = add_sz(net->offset[l], net->sizes[l]);
        if (next < 0)
            return MF_EOVERFLOW;
        if (net->offset[l + 1] != next)
            return MF_EBADARG;
    }
    ptrdiff_t U = net->offset[L], H = net->offset[L - 1];
    if (len_types != U || len_bias != U || len_prec != U || len_acoef != U)
        return MF_EBADARG;
    /* weight blocks and statistics blocks */
    ptrdiff_t nw = 0;
    ptrdiff_t base = mul_sz(4, U);
    if (base < 0)
        return MF_EOVERFLOW;
    for (ptrdiff_t l = 0; l < L - 1; l++) {
        ptrdiff_t P = net->sizes[l], C = net->sizes[l + 1];
        if (net->woff[l] != nw || net->soff[l] != base)
            return MF_EBADARG;
        ptrdiff_t block = mul_sz(P, C);
        nw = block < 0 ? -1 : add_sz(nw, block);
        ptrdiff_t P1 = add_sz(P, 1);
        ptrdiff_t aa = mul_sz(P1, P1), cc = mul_sz(C, P1);
        ptrdiff_t sb = (aa < 0 || cc < 0) ? -1 : add_sz(aa, cc);
        base = sb < 0 ? -1 : add_sz(base, sb);
        if (nw < 0 || base < 0)
            return MF_EOVERFLOW;
    }
    if (len_WT != nw || (stat_size != 0 && stat_size != base))
        return MF_EBADARG;
    ptrdiff_t scratch = mul_sz(3, add_sz(U, H));
    if (scratch < 0 || add_sz(scratch, 1) < 0)
        return MF_EOVERFLOW;
    /* values */
    for (ptrdiff_t i = 0; i < U; i++) {
        int t = net->types[i];
        if (t < MF_NLGBN_LINEAR || t > MF_NLGBN_SIGMOIDAL)
            return MF_EBADARG;
        if (!isfinite(net->bias[i]) || !isfinite(net->prec[i]) || !(net->prec[i] > 0.0)
            || !isfinite(net->acoef[i]) || !(net->acoef[i] >= 0.0))
            return MF_EBADARG;
    }
    for (ptrdiff_t k = 0; k < nw; k++)
        if (!isfinite(net->WT[k]))
            return MF_EBADARG;
    net->n_units = U;
    net->n_hidden = H;
    net->n_visible = U - H;
    net->n_weights = nw;
    net->stat_size = base;
    net->scratch_size = scratch + 1;
    net->checked = NET_CHECKED;
    return MF_OK;
}

/* n_i = bias_i + sum_j w_ij M_j for every unit (top layer: bias). */
static void net_inputs(const mf_nlgbn_net *net, const double *M, double *nn)
{
    for (ptrdiff_t c = 0; c < net->n_units; c++)
        nn[c] = net->bias[c];
    for (ptrdiff_t l = 0; l < net->n_layers - 1; l++) {
        ptrdiff_t nc = net->sizes[l + 1], poff = net->offset[l], coff = net->offset[l + 1];
        for (ptrdiff_t j = 0; j < net->sizes[l]; j++) {
            double mj = M[poff + j];
            const double *row = net->WT + net->woff[l] + j * nc;
            for (ptrdiff_t c = 0; c < nc; c++)
                nn[coff + c] += row[c] * mj;
        }
    }
}

/* F of eq. 11 from the cached net inputs and output variances (mu includes the data). */
static double pattern_bound(const mf_nlgbn_net *net, const double *mu, const double *s,
                            const double *nn, const double *V, const double *acoef,
                            const unsigned char *miss)
{
    const double two_pi = 6.28318530717958647692;
    double total = 0.0;
    for (ptrdiff_t i = 0; i < net->n_units; i++) {
        if (miss != NULL && i >= net->n_hidden && miss[i - net->n_hidden])
            continue;               /* a missing visible unit: marginalised, no term */
        double p = net->prec[i], d = mu[i] - nn[i];
        total += -0.5 * p * d * d + 0.5 * log(p / two_pi);
    }
    for (ptrdiff_t i = 0; i < net->n_hidden; i++)
        total += -acoef[i] * V[i]
                 + 0.5 * (1.0 + log(two_pi) + s[i] - net->prec[i] * exp(s[i]));
    return total;
}

/* Coordinate ascent on one pattern's bound.  mu (n_units) holds the hidden means and receives
 * the data in its visible part; s (n_hidden).  Returns F at the end, NaN if a unit's problem was
 * not finite. */
static double solve_pattern(const mf_nlgbn_net *net, const double *x, const unsigned char *miss,
                            double *mu, double *s, double *nn, double *M, double *V,
                            double *precp, double *acp, double tol, double utol,
                            ptrdiff_t max_sweeps, ptrdiff_t *sweeps, unsigned char *converged)
{
    ptrdiff_t H = net->n_hidden, L = net->n_layers, nv = net->n_visible, sw = 0;
    mf_nlgbn_moments mo;
    int failed = 0;
    const double *prec = net->prec, *acoef = net->acoef;
    *converged = 0;
    for (ptrdiff_t i = 0; i < nv; i++)
        mu[H + i] = (miss != NULL && miss[i]) ? 0.0 : x[i];
    if (miss != NULL) {
        /* A missing visible unit leaves the bound: its precision counts as 0 in its parents'
         * problems (no B term) and its part of their A coefficients is removed. */
        int any = 0;
        for (ptrdiff_t i = 0; i < nv; i++)
            any |= miss[i] != 0;
        if (any) {
            ptrdiff_t U = net->n_units, poff = net->offset[L - 2], P = net->sizes[L - 2];
            const double *WTl = net->WT + net->woff[L - 2];
            for (ptrdiff_t i = 0; i < U; i++)
                precp[i] = (i >= H && miss[i - H]) ? 0.0 : net->prec[i];
            for (ptrdiff_t i = 0; i < H; i++)
                acp[i] = net->acoef[i];
            for (ptrdiff_t j = 0; j < P; j++) {
                double a = 0.0;
                for (ptrdiff_t c = 0; c < nv; c++)
                    a += precp[H + c] * WTl[j * nv + c] * WTl[j * nv + c];
                acp[poff + j] = 0.5 * a;    /* recomputed from the observed children only */
            }
            prec = precp;
            acoef = acp;
        } else {
            miss = NULL;
        }
    }
    for (ptrdiff_t i = 0; i < H; i++) {
        mf_nlgbn_moments_eval(net->types[i], mu[i], s[i], 0, &mo);
        M[i] = mo.M;
        V[i] = mo.V;
    }
    net_inputs(net, M, nn);
    while (sw < max_sweeps && !failed) {
        double gain = 0.0;
        for (ptrdiff_t li = 0; li < L - 1 && !failed; li++) {
            ptrdiff_t l = sw % 2 == 0 ? li : L - 2 - li;
            ptrdiff_t nc = net->sizes[l + 1], coff = net->offset[l + 1];
            for (ptrdiff_t j = net->offset[l]; j < net->offset[l + 1]; j++) {
                const double *row = net->WT + net->woff[l] + (j - net->offset[l]) * nc;
                double Mold = M[j], B = 0.0, g;
                for (ptrdiff_t c = 0; c < nc; c++)
                    B += row[c] * prec[coff + c] * (mu[coff + c] - nn[coff + c] + row[c] * Mold);
                if (mf_nlgbn_unit_solve(net->types[j], nn[j], prec[j], acoef[j], B,
                                        utol, UNIT_MAX_IT, &mu[j], &s[j], &mo, &g) != MF_OK) {
                    failed = 1;
                    break;
                }
                M[j] = mo.M;
                V[j] = mo.V;
                double dM = mo.M - Mold;
                if (dM != 0.0)
                    for (ptrdiff_t c = 0; c < nc; c++)
                        nn[coff + c] += row[c] * dM;
                gain += g;
            }
        }
        sw++;
        if (!failed && gain < tol) {
            *converged = 1;
            break;
        }
    }
    *sweeps = sw;
    if (failed)
        return NAN;
    net_inputs(net, M, nn);          /* exact, free of the drift of the incremental updates */
    double F = pattern_bound(net, mu, s, nn, V, acoef, miss);
    return isfinite(F) ? F : NAN;
}

/* Add one pattern to the statistics block st (layout in mf_nlgbn.h). */
static void accumulate(const mf_nlgbn_net *net, const double *mu, const double *s,
                       const double *M, const double *V, const unsigned char *miss, double *st)
{
    ptrdiff_t U = net->n_units, H = net->n_hidden;
    for (ptrdiff_t i = 0; i < U; i++) {
        st[i] += mu[i];
        st[U + i] += mu[i] * mu[i];
    }
    for (ptrdiff_t i = 0; i < H; i++) {
        st[2 * U + i] += exp(s[i]);
        st[3 * U + i] += V[i];
    }
    for (ptrdiff_t l = 0; l < net->n_layers - 1; l++) {
        ptrdiff_t P = net->sizes[l], C = net->sizes[l + 1];
        ptrdiff_t poff = net->offset[l], coff = net->offset[l + 1];
        double *aa = st + net->soff[l];
        double *cc = aa + (P + 1) * (P + 1);
        aa[0] += 1.0;
        for (ptrdiff_t b = 0; b < P; b++)
            aa[1 + b] += M[poff + b];
        for (ptrdiff_t a = 0; a < P; a++) {
            double ma = M[poff + a];
            aa[(a + 1) * (P + 1)] += ma;
            for (ptrdiff_t b = 0; b < P; b++)
                aa[(a + 1) * (P + 1) + 1 + b] += ma * M[poff + b];
        }
        for (ptrdiff_t c = 0; c < C; c++) {
            double mc = mu[coff + c];
            cc[c * (P + 1)] += mc;
            for (ptrdiff_t b = 0; b < P; b++)
                cc[c * (P + 1) + 1 + b] += mc * M[poff + b];
        }
    }
    if (miss != NULL) {
        /* A missing visible unit c has q(x_c | h) = p(x_c | h): mu_c holds its mean net input
         * n_c, and E[x_c^2] = n_c^2 + sum_b w_cb^2 V_b + psi_c^2 (the last two in the
         * sigma^2 slot), E[x_c f_b] = n_c M_b + w_cb V_b. */
        ptrdiff_t L = net->n_layers, P = net->sizes[L - 2], C = net->n_visible;
        ptrdiff_t poff = net->offset[L - 2];
        const double *WTl = net->WT + net->woff[L - 2];
        double *cc = st + net->soff[L - 2] + (P + 1) * (P + 1);
        for (ptrdiff_t c = 0; c < C; c++) {
            if (!miss[c])
                continue;
            double extra = 1.0 / net->prec[H + c];
            for (ptrdiff_t b = 0; b < P; b++) {
                double w = WTl[b * C + c];
                extra += w * w * V[poff + b];
                cc[c * (P + 1) + 1 + b] += w * V[poff + b];
            }
            st[2 * U + H + c] += extra;
        }
    }
}

int mf_nlgbn_estep_block(const mf_nlgbn_net *net, ptrdiff_t n, const double *X, double *mu,
                         double *logvar, double tol, double unit_tol, ptrdiff_t max_sweeps,
                         double *bound, ptrdiff_t *n_sweeps, unsigned char *converged,
                         double *stats, double *scratch)
{
    return mf_nlgbn_estep_block_miss(net, n, X, NULL, mu, logvar, tol, unit_tol, max_sweeps,
                                     bound, n_sweeps, converged, stats, scratch);
}

int mf_nlgbn_estep_block_miss(const mf_nlgbn_net *net, ptrdiff_t n, const double *X,
                              const unsigned char *miss, double *mu, double *logvar, double tol,
                              double unit_tol, ptrdiff_t max_sweeps, double *bound,
                              ptrdiff_t *n_sweeps, unsigned char *converged, double *stats,
                              double *scratch)
{
    if (net == NULL || net->checked != NET_CHECKED || n < 0 || max_sweeps < 0
        || !(tol >= 0.0) || !isfinite(tol) || !(unit_tol >= 0.0) || !isfinite(unit_tol))
        return MF_EBADARG;
    if (n == 0)
        return MF_OK;
    if (X == NULL || mu == NULL || logvar == NULL || bound == NULL || n_sweeps == NULL
        || converged == NULL || scratch == NULL)
        return MF_EBADARG;
    ptrdiff_t U = net->n_units, H = net->n_hidden, nv = net->n_visible;
    double *mfull = scratch, *nn = scratch + U, *Mb = scratch + 2 * U, *Vb = Mb + H;
    double *precp = Vb + H, *acp = precp + U;
    int status = MF_OK;
    for (ptrdiff_t p = 0; p < n; p++) {
        double *mup = mu + p * H, *lvp = logvar + p * H;
        const unsigned char *mrow = miss != NULL ? miss + p * nv : NULL;
        for (ptrdiff_t i = 0; i < H; i++)
            mfull[i] = mup[i];
        bound[p] = solve_pattern(net, X + p * nv, mrow, mfull, lvp, nn, Mb, Vb, precp, acp, tol,
                                 unit_tol, max_sweeps, &n_sweeps[p], &converged[p]);
        for (ptrdiff_t i = 0; i < H; i++)
            mup[i] = mfull[i];
        if (max_sweeps > 0 && !converged[p])
            status = MF_NOT_CONVERGED;
        if (mrow != NULL)
            for (ptrdiff_t i = 0; i < nv; i++)
                if (mrow[i])
                    mfull[H + i] = nn[H + i];   /* the predictive mean of a missing entry */
        if (stats != NULL)
            accumulate(net, mfull, lvp, Mb, Vb, mrow, stats);
    }
    return status;
}
