/* Context-HMM kernels: the C entry points for outside callers (mfengine_solver.h), with every
 * argument checked before any kernel reads it -- sizes, pointers, probability vectors, finite
 * means, sequence lengths and their sum -- and the sequences spread over OpenMP threads (or,
 * with fewer sequences than threads, a structured solve's starts).  Plain C: they run in a
 * process with no Python interpreter.  mfengine/hmm/_chain.pyx exports the same functions to
 * Cython under the names mf_hmm_*_infer; the contract is in mfengine/solver.pxd. */
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

/* offsets (n_seq + 1) from lengths, without overflow; X free of infinities (NaN: missing). */
static int capi_offsets(ptrdiff_t n_seq, const ptrdiff_t *lengths, const double *X, ptrdiff_t n,
                        ptrdiff_t D, ptrdiff_t *offsets)
{
    ptrdiff_t s, i, total = 0;
    offsets[0] = 0;
    for (s = 0; s < n_seq; s++) {
        if (lengths[s] < 1) return MF_EBADARG;
        if (total > ((ptrdiff_t)1 << 62) / (n > D ? n : D) - lengths[s]) return MF_EOVERFLOW;
        total += lengths[s];
        offsets[s + 1] = total;
    }
    for (i = 0; i < total * D; i++)
        if (!isnan(X[i]) && !isfinite(X[i])) return MF_EBADARG;
    return MF_OK;
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
    double hist = 0.0;
    (void)thread;
    if (j->structured)
        j->st[s] = mf_hmm_structured_starts(j->m, T, j->X + a * D, j->max_sweeps, j->tol, NULL,
                                            j->gamma + a * n, NULL, &hist, 1, &j->n_sweeps[s],
                                            &j->bound[s], j->logpot + a * n, NULL, NULL,
                                            j->inner, j->starts);
    else
        j->st[s] = mf_hmm_naive(j->m, T, j->X + a * D, j->max_sweeps, j->tol, j->gamma + a * n,
                                &hist, 1, &j->n_sweeps[s], &j->bound[s]);
}

static int capi_many(int structured, unsigned starts, ptrdiff_t n, ptrdiff_t D, ptrdiff_t lag,
                     int context, const double *startprob, const double *transmat, const double *U,
                     const double *V, const double *W, ptrdiff_t n_seq, const ptrdiff_t *lengths,
                     const double *X, ptrdiff_t max_sweeps, double tol, int n_threads,
                     double *gamma, double *logpot, double *bound, ptrdiff_t *n_sweeps,
                     signed char *converged)
{
    mf_hmm_model m;
    many_job job;
    ptrdiff_t s, *offsets;
    int *st, status = capi_model(&m, n, D, lag, context, startprob, transmat, U, V, W);
    if (status != MF_OK) return status;
    if (n_seq < 0 || max_sweeps < 0 || !(tol >= 0.0) || !isfinite(tol)) return MF_EBADARG;
    if (structured && (starts == 0 || (starts & ~MFENGINE_HMM_ALL_STARTS))) return MF_EBADARG;
    if (n_seq == 0) return MF_OK;
    if (!lengths || !X || !gamma || !bound || !n_sweeps || !converged
        || (structured && !logpot))
        return MF_EBADARG;
    if (n_seq > ((ptrdiff_t)1 << 40)) return MF_EOVERFLOW;
    offsets = (ptrdiff_t *)malloc((size_t)(n_seq + 1) * sizeof(ptrdiff_t));
    st = (int *)malloc((size_t)n_seq * sizeof(int));
    if (!offsets || !st) {
        free(offsets);
        free(st);
        return MF_ENOMEM;
    }
    status = capi_offsets(n_seq, lengths, X, n, D, offsets);
    if (status == MF_OK) {
        /* threads over sequences, or (fewer sequences than threads) over each structured
         * solve's starts when it has several; the answers are the same either way */
        const int nt = mf_clamp_threads(n_threads, MF_MAX_THREADS);
        const int by_starts = mf_hmm_threads_by_starts(structured, starts, n_seq, nt);
        job.structured = structured;
        job.starts = starts;
        job.inner = by_starts ? nt : 1;
        job.m = &m;
        job.offsets = offsets;
        job.X = X;
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
    return capi_many(1, starts, n, D, lag, context, startprob, transmat, U, V, W, n_seq, lengths,
                     X, max_sweeps, tol, n_threads, gamma, logpot, bound, n_sweeps, converged);
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
                     W, n_seq, lengths, X, max_sweeps, tol, n_threads, gamma, logpot, bound,
                     n_sweeps, converged);
}

int mfengine_hmm_naive_infer(ptrdiff_t n, ptrdiff_t D, ptrdiff_t lag, int context,
                             const double *startprob, const double *transmat, const double *U,
                             const double *V, const double *W, ptrdiff_t n_seq,
                             const ptrdiff_t *lengths, const double *X, ptrdiff_t max_sweeps,
                             double tol, int n_threads, double *gamma, double *bound,
                             ptrdiff_t *n_sweeps, signed char *converged)
{
    return capi_many(0, 0u, n, D, lag, context, startprob, transmat, U, V, W, n_seq, lengths, X,
                     max_sweeps, tol, n_threads, gamma, NULL, bound, n_sweeps, converged);
}
