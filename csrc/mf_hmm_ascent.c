/* Context-HMM kernels: coordinate ascent on the exact mean-field objective of a chain -- two
 * plain sweeps (mf_hmm_chain.c, or the low-rank path of mf_hmm_rows.c), then a sweep from their
 * squared extrapolation, kept when it pays -- and the two exported one-chain functions,
 * mf_hmm_chain_objective and mf_hmm_ascent (mf_hmm.h).
 */
#include "mf_hmm_internal.h"

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
        if ((status = mf_hmm__lr_sweep(x, h, &lz)) != MF_OK) return status;
        return mf_hmm__lr_objective(x, h, &lz, NULL, F);
    }
    if ((status = mf_hmm__xchain_sweep(x, h)) != MF_OK) return status;
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
