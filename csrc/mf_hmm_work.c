/* Context-HMM kernels: the scratch each method allocates (mf_hmm_work_size), measured by
 * running the methods' layout functions without a block.  Kept apart from the shared pieces
 * of mf_hmm_common.c, which every method uses, so that no file depends on one that depends on
 * it.  See mf_hmm.h. */
#include "mf_hmm_internal.h"

int mf_hmm_work_size(int method, const mf_hmm_model *m, ptrdiff_t T, ptrdiff_t *bytes)
{
    mf_hmm_model e;
    arena_t a = {NULL, 0, 0}, b = {NULL, 0, 0};
    int status = mf_hmm__prepare(m, T, &e);
    if (status) return status;
    if (!bytes) return MF_EBADARG;
    if (method == MF_HMM_NAIVE) {
        naive_bufs nb;
        mf_hmm__naive_layout(&a, &e, T, &nb);
    } else if (method == MF_HMM_LINK) {
        link_bufs lb;
        mf_hmm__link_layout(&a, &e, T, &lb);
    } else if (method == MF_HMM_CHAIN) {
        xchain_t x;
        mf_hmm__xchain_layout(&a, &x, &e, T);
    } else if (method == MF_HMM_STRUCTURED) {
        /* its own block (with the wrapper's history of at most 1001 entries), and on top of
         * it the block of mf_hmm_link or of mf_hmm_naive, never both at once */
        xchain_t x;
        structured_bufs sb;
        link_bufs lb;
        naive_bufs nb;
        arena_t c = {NULL, 0, 0};
        mf_hmm__structured_layout(&a, &x, &e, T, 1001, &sb);
        (void)take(&a, MF_HMM_N_STARTS * T, e.n, sizeof(double));   /* the starts' potentials */
        (void)take(&a, MF_HMM_N_STARTS * 1001, 1, sizeof(double));  /* ... and histories */
        mf_hmm__link_layout(&b, &e, T, &lb);
        mf_hmm__naive_layout(&c, &e, T, &nb);
        if (c.bad) b.bad = 1;
        if (c.used > b.used) b.used = c.used;
        if (!a.bad && !b.bad && a.used > PTRDIFF_MAX - b.used) a.bad = 1;
        a.used += b.used;
    } else if (method == MF_HMM_EXACT) {
        exact_bufs eb;
        ptrdiff_t N = mf_hmm__exact_states_of(&e, T);
        if (N < 0) return MF_EOVERFLOW;
        mf_hmm__exact_layout(&a, &e, T, N, mf_hmm__exact_width(&e, T), &eb);
    } else {
        return MF_EBADARG;
    }
    if (a.bad || b.bad) return MF_EOVERFLOW;
    *bytes = a.used;
    return MF_OK;
}
