/* NLGBN: the E-step's C entry point for outside callers (mfengine_solver.h), every argument
 * checked before the kernel reads it -- the layer sizes and every size derived from them
 * without overflow, unit types, finite weights and biases, variances that give a finite
 * precision, finite data where not missing, a warm start's finite means -- and the patterns'
 * blocks spread over OpenMP threads, each thread with its own scratch.  Plain C: it runs in a
 * process with no Python interpreter.  mfengine/nlgbn/_estep.pyx exports the same function to
 * Cython as mf_nlgbn_infer; the contract is in mfengine/solver.pxd. */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "mf_nlgbn.h"
#include "mf_parallel.h"

#define PATTERN_BLOCK 64   /* patterns per task, as in the Python path */

static ptrdiff_t add_sz(ptrdiff_t a, ptrdiff_t b)
{
    return (a < 0 || b < 0 || a > PTRDIFF_MAX - b) ? -1 : a + b;
}

static ptrdiff_t mul_sz(ptrdiff_t a, ptrdiff_t b)
{
    return (a < 0 || b < 0 || (a != 0 && b > PTRDIFF_MAX / a)) ? -1 : a * b;
}

/* Sizes: units U, hidden H, weights nw; MF_EBADARG / MF_EOVERFLOW when the layout is bad. */
static int check_sizes(ptrdiff_t L, const ptrdiff_t *sizes, ptrdiff_t *U, ptrdiff_t *nw)
{
    ptrdiff_t l, k, base, P, C, P1;
    if (L < 2 || L > PTRDIFF_MAX / 64 || !sizes) return MF_EBADARG;
    *U = 0;
    for (l = 0; l < L; l++) {
        if (sizes[l] < 1) return MF_EBADARG;
        if ((*U = add_sz(*U, sizes[l])) < 0) return MF_EOVERFLOW;
    }
    *nw = 0;
    if ((base = mul_sz(4, *U)) < 0) return MF_EOVERFLOW;
    for (l = 0; l + 1 < L; l++) {
        P = sizes[l];
        C = sizes[l + 1];
        k = mul_sz(P, C);
        *nw = k >= 0 ? add_sz(*nw, k) : -1;
        P1 = add_sz(P, 1);
        k = (P1 >= 0 && mul_sz(P1, P1) >= 0 && mul_sz(C, P1) >= 0)
                ? add_sz(mul_sz(P1, P1), mul_sz(C, P1)) : -1;
        base = k >= 0 ? add_sz(base, k) : -1;
        if (*nw < 0 || base < 0) return MF_EOVERFLOW;
    }
    if (mul_sz(add_sz(*U, 8), 8) < 0 || mul_sz(*nw, 8) < 0) return MF_EOVERFLOW;
    return MF_OK;
}

typedef struct {
    const mf_nlgbn_net *net;
    ptrdiff_t n_patterns, nv, H, max_sweeps;
    const double *X;
    const unsigned char *missing;
    double *mu, *logvar, *bound, tol;
    ptrdiff_t *n_sweeps;
    unsigned char *converged;
    double **buf;    /* one scratch block per thread */
    int *status;     /* per block */
} estep_job;

static void estep_body(void *ctx, ptrdiff_t blk, int thread)
{
    const estep_job *j = (const estep_job *)ctx;
    const ptrdiff_t start = blk * PATTERN_BLOCK;
    const ptrdiff_t stop = start + PATTERN_BLOCK < j->n_patterns ? start + PATTERN_BLOCK
                                                                 : j->n_patterns;
    j->status[blk] = mf_nlgbn_estep_block_miss(
        j->net, stop - start, j->X + start * j->nv,
        j->missing ? j->missing + start * j->nv : NULL, j->mu + start * j->H,
        j->logvar + start * j->H, j->tol, j->tol / (10.0 * (double)j->H), j->max_sweeps,
        j->bound + start, j->n_sweeps + start, j->converged + start, NULL, j->buf[thread]);
}

/* The net's derived arrays (transposed weights, precisions, the a-coefficients, offsets) and
 * the check of the whole net; MF_OK, MF_EBADARG or MF_EOVERFLOW. */
static int build_net(mf_nlgbn_net *net, ptrdiff_t L, const ptrdiff_t *sizes,
                     const signed char *types, const double *weights, const double *biases,
                     const double *variances, ptrdiff_t U, ptrdiff_t nw, ptrdiff_t *offset,
                     ptrdiff_t *woff, ptrdiff_t *soff, double *WT, double *prec, double *acoef)
{
    ptrdiff_t l, i, j, c, P, C;
    offset[0] = 0;
    for (l = 0; l < L; l++) offset[l + 1] = offset[l] + sizes[l];
    woff[0] = 0;
    soff[0] = 4 * U;
    for (l = 0; l + 1 < L; l++) {
        P = sizes[l];
        C = sizes[l + 1];
        if (l + 1 < L - 1) {
            woff[l + 1] = woff[l] + P * C;
            soff[l + 1] = soff[l] + (P + 1) * (P + 1) + C * (P + 1);
        }
        for (i = 0; i < C; i++)
            for (j = 0; j < P; j++) WT[woff[l] + j * C + i] = weights[woff[l] + i * P + j];
    }
    for (i = 0; i < U; i++) {
        prec[i] = 1.0 / variances[i];
        acoef[i] = 0.0;
    }
    for (l = 0; l + 1 < L; l++) {
        C = sizes[l + 1];
        for (j = 0; j < sizes[l]; j++) {
            double a = 0.0;
            for (c = 0; c < C; c++) {
                const double w = WT[woff[l] + j * C + c];
                a += w * w * prec[offset[l + 1] + c];
            }
            acoef[offset[l] + j] = 0.5 * a;
            if (!isfinite(acoef[offset[l] + j])) return MF_EBADARG;
        }
    }
    net->n_layers = L;
    net->sizes = sizes;
    net->offset = offset;
    net->woff = woff;
    net->soff = soff;
    net->types = types;
    net->WT = WT;
    net->bias = biases;
    net->prec = prec;
    net->acoef = acoef;
    return mf_nlgbn_net_check(net, L, L + 1, L - 1, L - 1, U, nw, U, U, U, 0);
}

/* The default start: prior means (a top-down pass with the parents' output means) and
 * log sigma^2 = log psi^2, copied to every pattern. */
static int prior_start(const mf_nlgbn_net *net, ptrdiff_t L, const ptrdiff_t *sizes,
                       const double *biases, const double *variances, ptrdiff_t n_patterns,
                       ptrdiff_t H, double *prior_mu, double *prior_lv, double *mu,
                       double *logvar)
{
    const ptrdiff_t *offset = net->offset, *woff = net->woff;
    mf_nlgbn_moments mo;
    ptrdiff_t l, i, j, c, p;
    for (l = 0; l + 1 < L; l++) {
        for (i = offset[l]; i < offset[l + 1]; i++) {
            prior_mu[i] = biases[i];
            prior_lv[i] = log(variances[i]);
        }
        if (l > 0)
            for (j = offset[l - 1]; j < offset[l]; j++) {
                mf_nlgbn_moments_eval(net->types[j], prior_mu[j], prior_lv[j], 0, &mo);
                for (c = 0; c < sizes[l]; c++)
                    prior_mu[offset[l] + c] +=
                        net->WT[woff[l - 1] + (j - offset[l - 1]) * sizes[l] + c] * mo.M;
            }
        for (i = offset[l]; i < offset[l + 1]; i++)
            if (!isfinite(prior_mu[i])) return MF_EBADARG;
    }
    for (p = 0; p < n_patterns; p++)
        for (i = 0; i < H; i++) {
            mu[p * H + i] = prior_mu[i];
            logvar[p * H + i] = prior_lv[i];
        }
    return MF_OK;
}

int mfengine_nlgbn_infer(ptrdiff_t n_layers, const ptrdiff_t *sizes, const signed char *types,
                         const double *weights, const double *biases, const double *variances,
                         ptrdiff_t n_patterns, const double *X, const unsigned char *missing,
                         double tol, ptrdiff_t max_sweeps, int warm_start, int n_threads,
                         double *mu, double *logvar, double *bound, ptrdiff_t *n_sweeps,
                         unsigned char *converged)
{
    const ptrdiff_t L = n_layers;
    ptrdiff_t U, nw, H, nv, i, k, p, nblocks, blk;
    ptrdiff_t *offset = NULL, *woff = NULL, *soff = NULL;
    double *WT = NULL, *prec = NULL, *acoef = NULL, *prior_mu = NULL, *prior_lv = NULL;
    double **buf = NULL;
    int *status = NULL, rc, nt = 1, t;
    mf_nlgbn_net net;
    estep_job job;

    if ((rc = check_sizes(L, sizes, &U, &nw)) != MF_OK) return rc;
    H = U - sizes[L - 1];
    nv = sizes[L - 1];
    if (!types || !weights || !biases || !variances) return MF_EBADARG;
    if (n_patterns < 0 || max_sweeps < 1 || !(tol > 0.0) || !isfinite(tol)) return MF_EBADARG;
    if (n_patterns > 0 && (!X || !mu || !logvar || !bound || !n_sweeps || !converged))
        return MF_EBADARG;
    if (mul_sz(n_patterns, nv) < 0 || mul_sz(n_patterns, H) < 0) return MF_EOVERFLOW;
    for (i = 0; i < U; i++) {
        if (types[i] < 0 || types[i] > 3 || (i >= H && types[i] != 0)) return MF_EBADARG;
        if (!isfinite(biases[i]) || !isfinite(variances[i]) || !(variances[i] >= DBL_MIN))
            return MF_EBADARG;
        if (!isfinite(1.0 / variances[i])) return MF_EBADARG;
    }
    for (k = 0; k < nw; k++)
        if (!isfinite(weights[k])) return MF_EBADARG;
    for (p = 0; p < n_patterns; p++) {
        for (i = 0; i < nv; i++)
            if ((!missing || !missing[p * nv + i]) && !isfinite(X[p * nv + i])) return MF_EBADARG;
        if (warm_start)
            for (i = 0; i < H; i++)
                if (!isfinite(mu[p * H + i]) || !isfinite(logvar[p * H + i])) return MF_EBADARG;
    }

    offset = (ptrdiff_t *)malloc((size_t)(L + 1) * sizeof(ptrdiff_t));
    woff = (ptrdiff_t *)malloc((size_t)L * sizeof(ptrdiff_t));
    soff = (ptrdiff_t *)malloc((size_t)L * sizeof(ptrdiff_t));
    WT = (double *)malloc((size_t)(nw + 1) * sizeof(double));
    prec = (double *)malloc((size_t)(U + 1) * sizeof(double));
    acoef = (double *)malloc((size_t)(U + 1) * sizeof(double));
    prior_mu = (double *)malloc((size_t)(U + 1) * sizeof(double));
    prior_lv = (double *)malloc((size_t)(U + 1) * sizeof(double));
    if (!offset || !woff || !soff || !WT || !prec || !acoef || !prior_mu || !prior_lv) {
        rc = MF_ENOMEM;
        goto done;
    }
    rc = build_net(&net, L, sizes, types, weights, biases, variances, U, nw, offset, woff, soff,
                   WT, prec, acoef);
    if (rc == MF_OK && !warm_start)
        rc = prior_start(&net, L, sizes, biases, variances, n_patterns, H, prior_mu, prior_lv,
                         mu, logvar);
    if (rc != MF_OK || n_patterns == 0) goto done;

    nblocks = (n_patterns + PATTERN_BLOCK - 1) / PATTERN_BLOCK;
    nt = mf_clamp_threads(n_threads, nblocks);
    status = (int *)malloc((size_t)nblocks * sizeof(int));
    buf = (double **)calloc((size_t)nt, sizeof(double *));
    if (!status || !buf) {
        rc = MF_ENOMEM;
        goto done;
    }
    for (t = 0; t < nt; t++)
        if (!(buf[t] = (double *)malloc((size_t)(net.scratch_size + 1) * sizeof(double)))) {
            rc = MF_ENOMEM;
            goto done;
        }
    for (blk = 0; blk < nblocks; blk++) status[blk] = MF_OK;
    job.net = &net;
    job.n_patterns = n_patterns;
    job.nv = nv;
    job.H = H;
    job.max_sweeps = max_sweeps;
    job.X = X;
    job.missing = missing;
    job.mu = mu;
    job.logvar = logvar;
    job.bound = bound;
    job.tol = tol;
    job.n_sweeps = n_sweeps;
    job.converged = converged;
    job.buf = buf;
    job.status = status;
    mf_parallel_for(nblocks, nt, estep_body, &job);
    for (blk = 0; blk < nblocks; blk++) {
        if (status[blk] == MF_EBADARG) rc = MF_EBADARG;
        else if (status[blk] == MF_NOT_CONVERGED && rc == MF_OK) rc = MF_NOT_CONVERGED;
    }
    for (p = 0; p < n_patterns; p++)
        if (!isfinite(bound[p])) rc = MF_EOVERFLOW;
done:
    if (buf)
        for (t = 0; t < nt; t++) free(buf[t]);
    free(buf);
    free(status);
    free(offset);
    free(woff);
    free(soff);
    free(WT);
    free(prec);
    free(acoef);
    free(prior_mu);
    free(prior_lv);
    return rc;
}
