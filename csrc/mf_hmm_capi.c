/* Context-HMM kernels: the C entry points for outside callers (mfengine_solver.h), with every
 * argument checked before any kernel reads it -- sizes, pointers, probability vectors, finite
 * means, output variances, sequence lengths and their sum -- and the sequences spread over
 * OpenMP threads (or, with fewer sequences than threads, a structured solve's starts).  Plain
 * C: they run in a process with no Python interpreter.  mfengine/hmm/_chain.pyx exports the
 * same functions to Cython under the names mf_hmm_*_infer and mf_hmm_infer_diag; the contract
 * is in mfengine/solver.pxd.
 *
 * Diagonal output variances (mfengine_hmm_infer_diag) are served by whitening: with
 * sigma_d = sqrt(variances[d]), N(x; m, diag(sigma^2)) = N(x / sigma; m / sigma, I) / prod
 * sigma_d over the observed d, so the unit-covariance kernels run on the tables and each
 * sequence's rows divided column-wise by sigma (the tables once per call, the rows per
 * sequence into a scratch of the thread's own), and each bound then loses the sum of
 * ln sigma_d over the sequence's observed entries.  The posteriors and chain potentials are
 * the whitened problem's, unchanged. */
#include "mf_hmm_internal.h"
#include "mf_parallel.h"

#define CAPI_MAX_STATES ((ptrdiff_t)1 << 20)

/* startprob (n) and every row of transmat (n, n) are probability vectors (to 1e-8). */
static int check_chain(ptrdiff_t n, const double *startprob, const double *transmat)
{
    ptrdiff_t i, j;
    double s = 0.0;
    for (i = 0; i < n; i++) {
        if (!(startprob[i] >= 0.0) || !isfinite(startprob[i])) return MF_EBADARG;
        s += startprob[i];
    }
    if (!(fabs(s - 1.0) <= 1e-8)) return MF_EBADARG;
    for (i = 0; i < n; i++) {
        s = 0.0;
        for (j = 0; j < n; j++) {
            const double a = transmat[i * n + j];
            if (!(a >= 0.0) || !isfinite(a)) return MF_EBADARG;
            s += a;
        }
        if (!(fabs(s - 1.0) <= 1e-8)) return MF_EBADARG;
    }
    return MF_OK;
}

/* Fill m after checking every size, pointer and value of the model. */
static int capi_model(mf_hmm_model *m, ptrdiff_t n, ptrdiff_t D, ptrdiff_t lag, int context,
                      const double *startprob, const double *transmat, const double *U,
                      const double *V, const double *W)
{
    ptrdiff_t i;
    int status;
    if (n < 1 || D < 1 || lag < 1 || context < 1 || context > 3) return MF_EBADARG;
    if (n > CAPI_MAX_STATES || D > ((ptrdiff_t)1 << 40) / n)   /* n n D and the scratch fit */
        return MF_EOVERFLOW;
    if (!startprob || !transmat || !U) return MF_EBADARG;
    if (((context & 1) && !V) || ((context & 2) && !W)) return MF_EBADARG;
    if ((status = check_chain(n, startprob, transmat)) != MF_OK) return status;
    for (i = 0; i < n * D; i++) {
        if (!(fabs(U[i]) <= 1e100)) return MF_EBADARG;
        if ((context & 1) && !(fabs(V[i]) <= 1e100)) return MF_EBADARG;
        if ((context & 2) && !(fabs(W[i]) <= 1e100)) return MF_EBADARG;
    }
    m->n = n;
    m->D = D;
    m->lag = lag;
    m->right = (context & 1) ? 1 : 0;
    m->left = (context & 2) ? 1 : 0;
    m->startprob = startprob;
    m->transmat = transmat;
    m->U = U;
    m->V = (context & 1) ? V : U;
    m->W = (context & 2) ? W : U;
    return MF_OK;
}

/* offsets (n_seq + 1) from lengths, without overflow; X free of infinities (NaN: missing),
 * and so is X / sigma column-wise when sigma (D) is not NULL. */
static int capi_offsets(ptrdiff_t n_seq, const ptrdiff_t *lengths, const double *X, ptrdiff_t n,
                        ptrdiff_t D, const double *sigma, ptrdiff_t *offsets)
{
    ptrdiff_t s, i, d, total = 0;
    offsets[0] = 0;
    for (s = 0; s < n_seq; s++) {
        if (lengths[s] < 1) return MF_EBADARG;
        if (total > ((ptrdiff_t)1 << 62) / (n > D ? n : D) - lengths[s]) return MF_EOVERFLOW;
        total += lengths[s];
        offsets[s + 1] = total;
    }
    for (i = 0; i < total; i++)
        for (d = 0; d < D; d++) {
            const double x = X[i * D + d];
            if (!isnan(x) && !(isfinite(x) && (!sigma || isfinite(x / sigma[d]))))
                return MF_EBADARG;
        }
    return MF_OK;
}

/* variances (D): each finite and > 0, and every mean of m over sqrt(variance) still within
 * the 1e100 of capi_model. */
static int capi_variances(const mf_hmm_model *m, const double *variances)
{
    ptrdiff_t i, d;
    for (d = 0; d < m->D; d++)
        if (!(variances[d] > 0.0) || !isfinite(variances[d])) return MF_EBADARG;
    for (i = 0; i < m->n; i++)
        for (d = 0; d < m->D; d++) {
            const double sigma = sqrt(variances[d]);
            if (!(fabs(m->U[i * m->D + d] / sigma) <= 1e100)) return MF_EBADARG;
            if (m->right && !(fabs(m->V[i * m->D + d] / sigma) <= 1e100)) return MF_EBADARG;
            if (m->left && !(fabs(m->W[i * m->D + d] / sigma) <= 1e100)) return MF_EBADARG;
        }
    return MF_OK;
}

/* M (n, D) divided column-wise by sigma (D), into out; returns out. */
static const double *whiten_table(const double *M, ptrdiff_t n, ptrdiff_t D, const double *sigma,
                                  double *out)
{
    ptrdiff_t i, d;
    for (i = 0; i < n; i++)
        for (d = 0; d < D; d++) out[i * D + d] = M[i * D + d] / sigma[d];
    return out;
}

/* Rows X (T, D) divided column-wise by sigma into out (T, D); returns the sum over the
 * observed entries of half_log_var[d] = ln sigma_d, in row order. */
static double whiten_rows(const double *X, ptrdiff_t T, ptrdiff_t D, const double *sigma,
                          const double *half_log_var, double *out)
{
    ptrdiff_t t, d;
    double logdet = 0.0;
    for (t = 0; t < T; t++)
        for (d = 0; d < D; d++) {
            const double x = X[t * D + d];
            out[t * D + d] = x / sigma[d];   /* NaN stays NaN: still missing */
            if (!isnan(x)) logdet += half_log_var[d];
        }
    return logdet;
}

int mfengine_hmm_fb_infer(ptrdiff_t T, ptrdiff_t n, const double *startprob,
                          const double *transmat, const double *logpot, double *gamma,
                          double *xi_sum, double *logz)
{
    ptrdiff_t i, wsize;
    double *work;
    int status;
    if (T < 1 || n < 1 || !startprob || !transmat || !logpot || !gamma || !logz)
        return MF_EBADARG;
    wsize = mf_hmm_fb_work_size(T, n);
    if (wsize < 0 || n > CAPI_MAX_STATES) return MF_EOVERFLOW;
    if ((status = check_chain(n, startprob, transmat)) != MF_OK) return status;
    for (i = 0; i < T * n; i++)
        if (isnan(logpot[i]) || logpot[i] > 1.0e300) return MF_EBADARG;
    work = (double *)malloc((size_t)wsize * sizeof(double));
    if (!work) return MF_ENOMEM;
    status = mf_hmm_forward_backward(T, n, startprob, transmat, logpot, gamma, xi_sum, work,
                                     logz);
    free(work);
    return status;
}

typedef struct {
    int structured, inner;
    unsigned starts;
    const mf_hmm_model *m;
    const ptrdiff_t *offsets;
    const double *X;
    const double *sigma, *half_log_var;   /* (D) each, or NULL: unit covariance */
    double *xw;                           /* with sigma: xw_stride doubles per thread */
    ptrdiff_t xw_stride;
    ptrdiff_t max_sweeps;
    double tol;
    double *gamma, *logpot, *bound;
    ptrdiff_t *n_sweeps;
    int *st;
} many_job;

static void many_body(void *ctx, ptrdiff_t s, int thread)
{
    const many_job *j = (const many_job *)ctx;
    const ptrdiff_t n = j->m->n, D = j->m->D, a = j->offsets[s], T = j->offsets[s + 1] - a;
    const double *X = j->X + a * D;
    double hist = 0.0, logdet = 0.0;
    if (j->sigma) {
        double *xw = j->xw + thread * j->xw_stride;
        logdet = whiten_rows(X, T, D, j->sigma, j->half_log_var, xw);
        X = xw;
    }
    if (j->structured)
        j->st[s] = mf_hmm_structured_starts(j->m, T, X, j->max_sweeps, j->tol, NULL,
                                            j->gamma + a * n, NULL, &hist, 1, &j->n_sweeps[s],
                                            &j->bound[s], j->logpot + a * n, NULL, NULL,
                                            j->inner, j->starts);
    else
        j->st[s] = mf_hmm_naive(j->m, T, X, j->max_sweeps, j->tol, j->gamma + a * n, &hist, 1,
                                &j->n_sweeps[s], &j->bound[s]);
    if (j->sigma && (j->st[s] == MF_OK || j->st[s] == MF_NOT_CONVERGED))
        j->bound[s] -= logdet;
}

/* The structured (or naive) solver on n_seq sequences, after every check; variances (D) or
 * NULL (unit covariance) as mfengine_hmm_infer_diag.  Every entry point but fb's is this. */
static int capi_many(int structured, unsigned starts, ptrdiff_t n, ptrdiff_t D, ptrdiff_t lag,
                     int context, const double *startprob, const double *transmat, const double *U,
                     const double *V, const double *W, const double *variances, ptrdiff_t n_seq,
                     const ptrdiff_t *lengths, const double *X, ptrdiff_t max_sweeps, double tol,
                     int n_threads, double *gamma, double *logpot, double *bound,
                     ptrdiff_t *n_sweeps, signed char *converged)
{
    mf_hmm_model m;
    many_job job;
    ptrdiff_t s, d, *offsets, max_T = 0;
    double *tabs = NULL, *xw = NULL;   /* with variances: sigma, ln sigma, tables; rows */
    int nt, by_starts, *st;
    int status = capi_model(&m, n, D, lag, context, startprob, transmat, U, V, W);
    if (status != MF_OK) return status;
    if (n_seq < 0 || max_sweeps < 0 || !(tol >= 0.0) || !isfinite(tol)) return MF_EBADARG;
    if (structured && (starts == 0 || (starts & ~MFENGINE_HMM_ALL_STARTS))) return MF_EBADARG;
    if (variances && (status = capi_variances(&m, variances)) != MF_OK) return status;
    if (n_seq == 0) return MF_OK;
    if (!lengths || !X || !gamma || !bound || !n_sweeps || !converged
        || (structured && !logpot))
        return MF_EBADARG;
    if (n_seq > ((ptrdiff_t)1 << 40)) return MF_EOVERFLOW;
    offsets = (ptrdiff_t *)malloc((size_t)(n_seq + 1) * sizeof(ptrdiff_t));
    st = (int *)malloc((size_t)n_seq * sizeof(int));
    if (variances)   /* n D <= 2^40 (capi_model) */
        tabs = (double *)malloc((size_t)((2 + (1 + m.right + m.left) * n) * D) * sizeof(double));
    if (!offsets || !st || (variances && !tabs)) {
        free(offsets);
        free(st);
        free(tabs);
        return MF_ENOMEM;
    }
    if (variances)
        for (d = 0; d < D; d++) {
            tabs[d] = sqrt(variances[d]);
            tabs[D + d] = 0.5 * log(variances[d]);
        }
    status = capi_offsets(n_seq, lengths, X, n, D, variances ? tabs : NULL, offsets);
    /* threads over sequences, or (fewer sequences than threads) over each structured solve's
     * starts when it has several; the answers are the same either way */
    nt = mf_clamp_threads(n_threads, MF_MAX_THREADS);
    by_starts = mf_hmm_threads_by_starts(structured, starts, n_seq, nt);
    if (status == MF_OK && variances) {
        /* a row scratch for each thread of mf_parallel_for's loop over the sequences */
        const ptrdiff_t n_buf = mf_clamp_threads(by_starts ? 1 : nt, n_seq);
        for (s = 0; s < n_seq; s++)
            if (lengths[s] > max_T) max_T = lengths[s];
        if (max_T * D > PTRDIFF_MAX / (ptrdiff_t)sizeof(double) / n_buf)   /* max_T D <= 2^62 */
            status = MF_EOVERFLOW;
        else if (!(xw = (double *)malloc((size_t)(n_buf * max_T * D) * sizeof(double))))
            status = MF_ENOMEM;
        else {   /* the tables after sigma and ln sigma, U first, then V and W as present */
            double *next = tabs + 2 * D + n * D;
            m.U = whiten_table(U, n, D, tabs, tabs + 2 * D);
            m.V = m.right ? whiten_table(V, n, D, tabs, next) : m.U;
            m.W = m.left ? whiten_table(W, n, D, tabs, next + m.right * n * D) : m.U;
        }
    }
    if (status == MF_OK) {
        job.structured = structured;
        job.starts = starts;
        job.inner = by_starts ? nt : 1;
        job.m = &m;
        job.offsets = offsets;
        job.X = X;
        job.sigma = variances ? tabs : NULL;
        job.half_log_var = variances ? tabs + D : NULL;
        job.xw = xw;
        job.xw_stride = max_T * D;
        job.max_sweeps = max_sweeps;
        job.tol = tol;
        job.gamma = gamma;
        job.logpot = logpot;
        job.bound = bound;
        job.n_sweeps = n_sweeps;
        job.st = st;
        mf_parallel_for(n_seq, by_starts ? 1 : nt, many_body, &job);
        for (s = 0; s < n_seq; s++) {
            if (st[s] != MF_OK && st[s] != MF_NOT_CONVERGED) {
                status = st[s];
                break;
            }
            converged[s] = st[s] == MF_OK ? 1 : 0;
            if (st[s] == MF_NOT_CONVERGED) status = MF_NOT_CONVERGED;
        }
    }
    free(offsets);
    free(st);
    free(tabs);
    free(xw);
    return status;
}

int mfengine_hmm_structured_infer_starts(ptrdiff_t n, ptrdiff_t D, ptrdiff_t lag, int context,
                                         const double *startprob, const double *transmat,
                                         const double *U, const double *V, const double *W,
                                         ptrdiff_t n_seq, const ptrdiff_t *lengths,
                                         const double *X, ptrdiff_t max_sweeps, double tol,
                                         int n_threads, unsigned starts, double *gamma,
                                         double *logpot, double *bound, ptrdiff_t *n_sweeps,
                                         signed char *converged)
{
    return capi_many(1, starts, n, D, lag, context, startprob, transmat, U, V, W, NULL, n_seq,
                     lengths, X, max_sweeps, tol, n_threads, gamma, logpot, bound, n_sweeps,
                     converged);
}

int mfengine_hmm_structured_infer(ptrdiff_t n, ptrdiff_t D, ptrdiff_t lag, int context,
                                  const double *startprob, const double *transmat,
                                  const double *U, const double *V, const double *W,
                                  ptrdiff_t n_seq, const ptrdiff_t *lengths, const double *X,
                                  ptrdiff_t max_sweeps, double tol, int n_threads, double *gamma,
                                  double *logpot, double *bound, ptrdiff_t *n_sweeps,
                                  signed char *converged)
{
    return capi_many(1, MFENGINE_HMM_ALL_STARTS, n, D, lag, context, startprob, transmat, U, V,
                     W, NULL, n_seq, lengths, X, max_sweeps, tol, n_threads, gamma, logpot,
                     bound, n_sweeps, converged);
}

int mfengine_hmm_naive_infer(ptrdiff_t n, ptrdiff_t D, ptrdiff_t lag, int context,
                             const double *startprob, const double *transmat, const double *U,
                             const double *V, const double *W, ptrdiff_t n_seq,
                             const ptrdiff_t *lengths, const double *X, ptrdiff_t max_sweeps,
                             double tol, int n_threads, double *gamma, double *bound,
                             ptrdiff_t *n_sweeps, signed char *converged)
{
    return capi_many(0, 0u, n, D, lag, context, startprob, transmat, U, V, W, NULL, n_seq,
                     lengths, X, max_sweeps, tol, n_threads, gamma, NULL, bound, n_sweeps,
                     converged);
}

int mfengine_hmm_infer_diag(int method, unsigned starts, ptrdiff_t n, ptrdiff_t D, ptrdiff_t lag,
                            int context, const double *startprob, const double *transmat,
                            const double *U, const double *V, const double *W,
                            const double *variances, ptrdiff_t n_seq, const ptrdiff_t *lengths,
                            const double *X, ptrdiff_t max_sweeps, double tol, int n_threads,
                            double *gamma, double *logpot, double *bound, ptrdiff_t *n_sweeps,
                            signed char *converged)
{
    const int structured = method == MFENGINE_HMM_METHOD_STRUCTURED;
    if (!structured && method != MFENGINE_HMM_METHOD_NAIVE) return MF_EBADARG;
    return capi_many(structured, structured ? starts : 0u, n, D, lag, context, startprob,
                     transmat, U, V, W, variances, n_seq, lengths, X, max_sweeps, tol, n_threads,
                     gamma, structured ? logpot : NULL, bound, n_sweeps, converged);
}
