/* Context-HMM kernels: scaled forward-backward and Viterbi for a chain
 * Q(s) ~ P(s) prod_t exp(logpot[t, s_t]).  See mf_hmm.h. */
#include "mf_hmm_internal.h"

ptrdiff_t mf_hmm_fb_work_size(ptrdiff_t T, ptrdiff_t n)
{
    ptrdiff_t tn, s;
    if (T < 1 || n < 1 || !mul_ok(T, n, &tn) || !mul_ok(n, 2, &s)) return -1;
    if (tn > PTRDIFF_MAX / 8 - T - s) return -1;
    return tn + T + s;
}

int mf_hmm__fb(ptrdiff_t T, ptrdiff_t n, const double *startprob, const double *transmat,
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
    return mf_hmm__publish(mf_hmm__fb(T, n, startprob, transmat, logpot, gamma, xi_sum, work, logz), logz);
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

/* The state i with cumulative weight first above u * sum(w) (never one of weight zero). */
static ptrdiff_t draw(const double *w, ptrdiff_t n, double u)
{
    double total = 0.0, c = 0.0, target;
    ptrdiff_t i, last = -1;
    for (i = 0; i < n; i++) total += w[i];
    target = u * total;
    for (i = 0; i < n; i++) {
        if (!(w[i] > 0.0)) continue;
        last = i;
        c += w[i];
        if (c > target) return i;
    }
    return last;   /* rounding at the top of the range */
}

int mf_hmm_sample_chain(ptrdiff_t T, ptrdiff_t n, const double *startprob, const double *transmat,
                        const double *logpot, ptrdiff_t n_draws, const double *u,
                        ptrdiff_t *paths, double *work)
{
    double *alpha, *w;
    ptrdiff_t t, i, j, k, tn;
    if (mf_hmm_fb_work_size(T, n) < 0) return T < 1 || n < 1 ? MF_EBADARG : MF_EOVERFLOW;
    if (n_draws < 0 || !startprob || !transmat || !logpot || !work) return MF_EBADARG;
    if (n_draws > 0 && (!u || !paths)) return MF_EBADARG;
    if (!mul_ok(n_draws, T, &tn)) return MF_EOVERFLOW;
    alpha = work;              /* (T, n) filtered forward messages */
    w = work + T * n;          /* (n) weights of one backward draw */
    /* forward filtering, scaled as in mf_hmm__fb */
    for (t = 0; t < T; t++) {
        const double *lp = logpot + t * n;
        double *an = alpha + t * n;
        double mx = -INFINITY, s = 0.0;
        for (i = 0; i < n; i++)
            if (isnan(lp[i]) || lp[i] == INFINITY) return MF_EBADARG;
        if (t == 0) {
            for (j = 0; j < n; j++) an[j] = startprob[j];
        } else {
            const double *ap = alpha + (t - 1) * n;
            for (j = 0; j < n; j++) an[j] = 0.0;
            for (i = 0; i < n; i++) {
                const double ai = ap[i];
                if (ai == 0.0) continue;
                for (j = 0; j < n; j++) an[j] += ai * transmat[i * n + j];
            }
        }
        for (j = 0; j < n; j++)
            if (an[j] > 0.0 && lp[j] > mx) mx = lp[j];
        if (mx == -INFINITY) return MF_EBADARG;      /* probability zero: nothing to draw */
        for (j = 0; j < n; j++) {
            const double dl = lp[j] - mx;
            an[j] *= exp(dl < 0.0 ? dl : 0.0);
            s += an[j];
        }
        if (!(s > 0.0)) return MF_EBADARG;
        for (j = 0; j < n; j++) an[j] /= s;
    }
    /* backward sampling: s_{T-1} ~ alpha_{T-1}, s_t ~ alpha_t(i) transmat(i, s_{t+1}) */
    for (k = 0; k < n_draws; k++) {
        const double *uk = u + k * T;
        ptrdiff_t *pk = paths + k * T;
        pk[T - 1] = draw(alpha + (T - 1) * n, n, uk[T - 1]);
        for (t = T - 2; t >= 0; t--) {
            const ptrdiff_t nxt = pk[t + 1];
            for (i = 0; i < n; i++) w[i] = alpha[t * n + i] * transmat[i * n + nxt];
            pk[t] = draw(w, n, uk[t]);
        }
    }
    return MF_OK;
}
