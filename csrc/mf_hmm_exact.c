/* Context-HMM kernels: the exact likelihood by a scaled forward recursion over the
 * augmented state (windows of w consecutive states).  See mf_hmm.h. */
#include "mf_hmm_internal.h"

ptrdiff_t mf_hmm__exact_width(const mf_hmm_model *m, ptrdiff_t T)
{
    const ptrdiff_t k = (m->right ? 1 : 0) + (m->left ? 1 : 0);
    if (k == 0) return 1;
    if (m->lag >= (T - 1) / k + 1) return T;   /* 1 + k lag >= T, without forming k lag */
    return 1 + k * m->lag;
}

ptrdiff_t mf_hmm__exact_states_of(const mf_hmm_model *e, ptrdiff_t T)
{
    ptrdiff_t w = mf_hmm__exact_width(e, T), N = 1, k;
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
    return mf_hmm__exact_states_of(&e, T);
}

void mf_hmm__exact_layout(arena_t *a, const mf_hmm_model *m, ptrdiff_t T, ptrdiff_t N,
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
    int status = mf_hmm__prepare(m0, T, &em);
    ptrdiff_t t, k, idx, q, d;
    double ll = 0.0;

    if (status) return status;
    if (!X || !loglik) return MF_EBADARG;
    n = m->n;
    D = m->D;
    lag = m->lag;
    w = mf_hmm__exact_width(m, T);
    N = mf_hmm__exact_states_of(m, T);
    nwin = T - w + 1;
    if (N < 0) return MF_EOVERFLOW;
    mf_hmm__exact_layout(&a, m, T, N, w, &b);
    if ((status = arena_alloc(&a)) != MF_OK) return status;
    mf_hmm__exact_layout(&a, m, T, N, w, &b);
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
                /* the residual x - U - V - W, subtracted term by term from x (adding a small
                 * context mean to a large U first would round at U's scale) */
                for (d = 0; d < D; d++) mean[d] = x[d] - u[d];
                if (m->right && lag < T - tt) {
                    const double *v = m->V + dig[tt + lag - k] * D;
                    for (d = 0; d < D; d++) mean[d] -= v[d];
                }
                if (m->left && tt >= lag) {
                    const double *v = m->W + dig[tt - lag - k] * D;
                    for (d = 0; d < D; d++) mean[d] -= v[d];
                }
                for (d = 0; d < D; d++)   /* a missing coordinate (NaN) is left out */
                    if (!isnan(x[d])) l -= 0.5 * sq(mean[d]) + HALF_LOG_2PI;
            }
            if (k == 0) {
                double pr = m->startprob[dig[0]];
                for (q = 1; q < w; q++) pr *= m->transmat[dig[q - 1] * n + dig[q]];
                alpha[idx] = pr; /* prior of the first window, combined below */
            }
            le[idx] = l;
        }
        /* In log space throughout: alpha holds the log of the normalised forward mass of every
         * window (a window whose emissions are thousands of nats worse than another's keeps its
         * mass instead of underflowing, which once lost the best path at |x - mean| ~ 1e4).
         * anew = log predicted mass + the window's emission terms. */
        if (k == 0) {
            for (idx = 0; idx < N; idx++)
                anew[idx] = alpha[idx] > 0.0 ? log(alpha[idx]) : -INFINITY;
        } else {
            const ptrdiff_t top = pw[0];
            for (idx = 0; idx < N; idx++) {
                const ptrdiff_t rest = idx / n, snew = idx % n;
                double mp = -INFINITY, acc = 0.0, v;
                ptrdiff_t so;
                if (w == 1) {
                    for (so = 0; so < n; so++) {
                        v = alpha[so] + log(m->transmat[so * n + snew]);
                        if (v > mp) mp = v;
                    }
                    if (mp > -INFINITY)
                        for (so = 0; so < n; so++)
                            acc += exp(alpha[so] + log(m->transmat[so * n + snew]) - mp);
                    anew[idx] = mp > -INFINITY ? mp + log(acc) : -INFINITY;
                } else {
                    for (so = 0; so < n; so++)
                        if (alpha[so * top + rest] > mp) mp = alpha[so * top + rest];
                    if (mp > -INFINITY)
                        for (so = 0; so < n; so++) acc += exp(alpha[so * top + rest] - mp);
                    anew[idx] = mp > -INFINITY
                        ? mp + log(acc) + log(m->transmat[(rest % n) * n + snew]) : -INFINITY;
                }
            }
        }
        for (idx = 0; idx < N; idx++) {
            if (isnan(le[idx]) || le[idx] == INFINITY) { status = HMM_NONFINITE; goto done; }
            anew[idx] = anew[idx] > -INFINITY ? anew[idx] + le[idx] : -INFINITY;
            if (anew[idx] > mx) mx = anew[idx];
        }
        if (mx == -INFINITY) { status = HMM_IMPOSSIBLE; goto done; }
        for (idx = 0; idx < N; idx++) s += exp(anew[idx] - mx);
        if (!(s > 0.0)) { status = HMM_NONFINITE; goto done; }
        ll += log(s) + mx;
        for (idx = 0; idx < N; idx++) alpha[idx] = anew[idx] - mx - log(s);
    }
    if (!isfinite(ll)) { status = HMM_NONFINITE; goto done; }
    *loglik = ll;
done:
    free(a.base);
    return mf_hmm__publish(status, loglik);
}
